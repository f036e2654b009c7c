/* session_grads.c - the activation gradients of a backward: when each is
 * zeroed (or written fresh by its kernel), and where it lives (a slab planned
 * by lifetimes). The session plans its own over the whole graph, each
 * pipeline activation context over its stage's backward. */
#include "session_impl.h"

#include <string.h>

/* Whether a node's backward runs: it has an output gradient to read and an
 * input gradient to add into (ga: its gradient arguments, outputs' first).
 * pd__backward's rule, which the planning below follows. */
bool pd__bwd_runs_of(const pd__node *n, pd_tensor *const *ga) {
    bool any_out = false, any_in = false;
    for (int j = 0; j < n->nout; j++) any_out |= ga[j] != NULL;
    for (int j = 0; j < n->nin; j++) any_in |= ga[n->nout + j] != NULL;
    return any_out && any_in;
}

/* The activation gradients' plan: each is zeroed just before the first
 * backward node that touches it (or not at all when that kernel writes it
 * whole), and gradients whose lives do not overlap share bytes. The
 * arguments (nodes, has, role, split) and why: docs/INTERNALS.md,
 * "runtime/session_grads.c". On return l holds each buffer's offset in a
 * slab of *total bytes (the caller's to allocate and free l). */
pd_status pd__plan_grads_over(const pd_session *s, pd_tensor *const *gargs, const int *nodes, int n, const bool *has,
                              const uint8_t *role, bool split, pd__zplan *zp, pd__life *l, size_t *total) {
    const pd_graph *g = s->g;
    int nargs = g->nnodes ? s->arg_start[g->nnodes - 1] + g->nodes[g->nnodes - 1].nin + g->nodes[g->nnodes - 1].nout : 0;
    zp->at = PD_CALLOC(3 * (size_t)g->nnodes + 1, sizeof(int));
    zp->list = PD_CALLOC((size_t)nargs + 1, sizeof(int));
    zp->fresh = PD_CALLOC((size_t)g->nnodes + 1, sizeof(uint32_t));
    if (!zp->at || !zp->list || !zp->fresh || pd__life_init(l, g->ntensors) != PD_OK) {
        pd__zplan_free(zp);
        return pd__err(PD_ERR_NOMEM, "%s: out of memory planning the training buffers", g->path);
    }
    enum { UNTOUCHED = INT32_MAX };
    for (int t = 0; t < g->ntensors; t++) {
        const pd__tensor *x = &g->tensors[t];
        if (!s->needs_grad[t] || x->kind == PD_T_INIT || (has && !has[t])) continue;
        int r = role ? role[t] : 0;
        pd__life_add(l, t, r & PD__G_SET ? -1 : UNTOUCHED, r & PD__G_KEEP ? n : -1,
                     (size_t)(x->numel > 0 ? x->numel : 0) * pd_dtype_size(x->dtype));
    }
    int nz = 0;
    for (int k = n - 1; k >= 0; k--) {
        int i = nodes ? nodes[k] : k;
        const pd__node *nd = &g->nodes[i];
        pd_tensor *const *ga = gargs + s->arg_start[i];
        int step = n - 1 - k;
        zp->at[3 * i] = zp->at[3 * i + 1] = zp->at[3 * i + 2] = nz;
        if (!pd__bwd_runs_of(nd, ga)) continue;
        /* first touches: zeroed (pass 0), or written whole by the kernel
         * (pass 1: an input gradient the node adds into through one
         * argument only, not also an output's) */
        int first[64], nf = 0;
        for (int j = 0; j < nd->nout + nd->nin; j++) {
            int t = j < nd->nout ? nd->out[j] : nd->in[j - nd->nout], b = ga[j] ? l->at[t] : -1;
            if (b < 0) continue; /* no gradient asked for, or a parameter's */
            if (l->first[b] == UNTOUCHED) {
                l->first[b] = step;
                if (nf < 64) first[nf++] = j;
                else zp->list[nz++] = t;
            }
            if (l->last[b] < step) l->last[b] = step;
        }
        for (int pass = 0; pass < 2; pass++) {
            for (int f = 0; f < nf; f++) {
                int j = first[f], q = j - nd->nout, t = j < nd->nout ? nd->out[j] : nd->in[q], uses = 0;
                for (int a = 0; a < nd->nout + nd->nin; a++)
                    uses += ga[a] && (a < nd->nout ? nd->out[a] : nd->in[a - nd->nout]) == t;
                bool fresh = q >= 0 && q < 32 && uses == 1;
                if (fresh != (pass == 1)) continue;
                zp->list[nz++] = t;
                if (fresh) zp->fresh[i] |= 1u << q;
            }
            zp->at[3 * i + 1 + pass] = nz;
        }
    }
    for (int b = 0; b < l->n; b++)
        if (l->first[b] == UNTOUCHED) l->first[b] = l->last[b] = -2;
        else if (split || l->last[b] < l->first[b]) l->last[b] = split ? n : l->first[b];
    if (pd__life_pack(l, total) != PD_OK) {
        pd__life_free(l);
        pd__zplan_free(zp);
        return pd__err(PD_ERR_NOMEM, "%s: out of memory planning the training buffers", g->path);
    }
    return PD_OK;
}

void pd__zplan_free(pd__zplan *zp) {
    PD_FREE(zp->at);
    PD_FREE(zp->list);
    PD_FREE(zp->fresh);
    memset(zp, 0, sizeof *zp);
}

/* The session's activation gradients (pd__plan_grads_over over the whole
 * graph); the prediction's is written by the loss. */
pd_status pd__plan_grads(pd_session *s) {
    const pd_graph *g = s->g;
    uint8_t *role = PD_CALLOC((size_t)g->ntensors + 1, 1);
    if (!role) return pd__err(PD_ERR_NOMEM, "%s: out of memory planning the training buffers", g->path);
    role[s->pred] = PD__G_SET;
    pd__life l;
    size_t total;
    pd_status st = pd__plan_grads_over(s, s->gargs, NULL, g->nnodes, NULL, role, false, &s->zp, &l, &total);
    PD_FREE(role);
    if (st != PD_OK) return st;
    s->gact = s->o.device == PD_DEVICE_CUDA ? PD_CALLOC(1, total + 64) : pd__slab(total); /* see s->act */
    s->gact_bytes = total;
    if (s->gact)
        for (int b = 0; b < l.n; b++) s->gviews[l.id[b]].data = (char *)s->gact + l.off[b];
    pd__life_free(&l);
    return s->gact ? PD_OK : pd__err(PD_ERR_NOMEM, "%s: out of memory for the activation gradients", g->path);
}
