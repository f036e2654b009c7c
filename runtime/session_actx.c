/* session_actx.c - the pipeline's activation contexts (session.h): a
 * microbatch's activations and activation gradients over the session's
 * parameters, and the forward, backward (whole or zero-bubble's two
 * passes; session_nodes.c on the CPU device) and loss over them; and the
 * slabs' accessors. */
#include "session_impl.h"

#include <string.h>

void pd__actx_destroy(pd__actx *c) {
    if (!c) return;
    PD_FREE(c->act);
    PD_FREE(c->gact);
    PD_FREE(c->views);
    PD_FREE(c->gviews);
    PD_FREE(c->args);
    PD_FREE(c->gargs);
    pd__zplan_free(&c->zp);
    PD_FREE(c);
}

/* Whether tensor t is an activation a context holds: in need, and (mine)
 * in its own slab, or (!mine) in the shared one. */
static bool pd__actx_holds(const pd_graph *g, const bool *need, const bool *own, int t, bool mine) {
    const pd__tensor *x = &g->tensors[t];
    if ((need && !need[t]) || !(x->kind == PD_T_ACT || x->kind == PD_T_INPUT) || x->ndim < 0) return false;
    return (!own || own[t]) == mine;
}

static size_t pd__actx_tbytes(const pd__tensor *x) {
    return pd__align64((size_t)(x->numel > 0 ? x->numel : 0) * pd_dtype_size(x->dtype));
}

size_t pd__actx_shared_bytes(const pd_session *s, const bool *need, const bool *own) {
    size_t n = 0;
    for (int t = 0; own && t < s->g->ntensors; t++)
        if (pd__actx_holds(s->g, need, own, t, false)) n += pd__actx_tbytes(&s->g->tensors[t]);
    return n;
}

pd_status pd__actx_create(const pd_session *s, const bool *need, const int *bnodes, int nb, const uint8_t *role,
                          bool split, pd__actx **out) {
    return pd__actx_create_in(s, need, NULL, NULL, bnodes, nb, role, split, out);
}

pd_status pd__actx_create_in(const pd_session *s, const bool *need, const bool *own, void *shared, const int *bnodes,
                             int nb, const uint8_t *role, bool split, pd__actx **out) {
    const pd_graph *g = s->g;
    pd__actx *c = PD_CALLOC(1, sizeof *c);
    if (!c) return pd__err(PD_ERR_NOMEM, "out of memory");
    size_t abytes = 0;
    for (int t = 0; t < g->ntensors; t++)
        if (pd__actx_holds(g, need, own, t, true)) abytes += pd__actx_tbytes(&g->tensors[t]);
    int nargs = s->arg_start[g->nnodes - 1] + g->nodes[g->nnodes - 1].nin + g->nodes[g->nnodes - 1].nout;
    c->act = pd__slab(abytes);
    c->abytes = abytes;
    c->views = PD_CALLOC((size_t)g->ntensors + 1, sizeof(pd_tensor));
    c->gviews = PD_CALLOC((size_t)g->ntensors + 1, sizeof(pd_tensor));
    c->args = PD_CALLOC((size_t)nargs + 1, sizeof(pd_tensor *));
    c->gargs = PD_CALLOC((size_t)nargs + 1, sizeof(pd_tensor *));
    if (!c->act || !c->views || !c->gviews || !c->args || !c->gargs) {
        pd__actx_destroy(c);
        return pd__err(PD_ERR_NOMEM, "%s: out of memory for a microbatch's activations", g->path);
    }
    size_t ao = 0, so = 0;
    for (int t = 0; t < g->ntensors; t++) {
        const pd__tensor *x = &g->tensors[t];
        c->views[t] = s->views[t]; /* parameters and constants: shared with the session */
        c->gviews[t] = s->gviews[t]; /* parameter gradients: the session's slab */
        if ((x->kind == PD_T_ACT || x->kind == PD_T_INPUT) && x->ndim >= 0) {
            c->views[t].data = NULL; /* not needed: no memory */
            if (pd__actx_holds(g, need, own, t, true)) {
                c->views[t].data = (char *)c->act + ao;
                ao += pd__actx_tbytes(x);
            } else if (pd__actx_holds(g, need, own, t, false)) {
                c->views[t].data = (char *)shared + so;
                so += pd__actx_tbytes(x);
            }
        }
        if (s->needs_grad[t] && x->kind != PD_T_INIT) c->gviews[t].data = NULL; /* planned below */
    }
    /* the session's argument tables, re-pointed at this context's views */
    for (int k = 0; k < nargs; k++) {
        c->args[k] = s->args[k] ? c->views + (s->args[k] - s->views) : NULL;
        c->gargs[k] = s->gargs[k] ? c->gviews + (s->gargs[k] - s->gviews) : NULL;
    }
    pd__life l;
    size_t total;
    pd_status st = pd__plan_grads_over(s, c->gargs, bnodes, nb, need, role, split, &c->zp, &l, &total);
    if (st == PD_OK) {
        c->gbytes = total;
        if ((c->gact = pd__slab(total)))
            for (int b = 0; b < l.n; b++) c->gviews[l.id[b]].data = (char *)c->gact + l.off[b];
        else st = pd__err(PD_ERR_NOMEM, "%s: out of memory for a microbatch's gradients", g->path);
        pd__life_free(&l);
    }
    if (st != PD_OK) {
        pd__actx_destroy(c);
        return st;
    }
    *out = c;
    return PD_OK;
}

pd_tensor *pd__actx_value(pd__actx *c, int t) { return &c->views[t]; }
pd_tensor *pd__actx_grad(pd__actx *c, int t) { return &c->gviews[t]; }

/* The CPU without a context: the activation contexts time nothing. */
static const pd__dev pd__cpu_untimed = {&pd__dev_cpu, NULL};

static pd__where pd__actx_where(pd__actx *c) {
    return (pd__where){&pd__cpu_untimed, c->views, c->gviews, c->args, c->gargs, c->views, c->gviews, c->args,
                       c->gargs, NULL, &c->zp};
}

pd_status pd__actx_forward(const pd_session *s, pd__exec *x, pd__actx *c, const int *nodes, int n) {
    pd__where w = pd__actx_where(c);
    return pd__nodes_forward(s, x, &w, nodes, n, NULL);
}

pd_status pd__actx_backward(const pd_session *s, pd__exec *x, pd__actx *c, const int *nodes, int n) {
    pd__where w = pd__actx_where(c);
    return pd__nodes_backward(s, x, &w, nodes, n, -1, NULL, NULL);
}

pd_status pd__actx_backward_part(const pd_session *s, pd__exec *x, pd__actx *c, const int *nodes, int n,
                                 bool weights) {
    pd__where w = pd__actx_where(c);
    return pd__nodes_backward(s, x, &w, nodes, n, weights ? 1 : 0, NULL, NULL);
}

pd_status pd__actx_loss(const pd_session *s, pd__actx *c, const pd_tensor *labels, double scale, pd_step_result *r) {
    return pd__loss_run(s, &pd__cpu_untimed, c->views, c->gviews, c->views, c->gviews, labels, NULL, true, INT64_MAX,
                        scale, r);
}

bool pd__session_needs_grad(const pd_session *s, int t) { return s->needs_grad[t]; }
const pd_train_options *pd__session_options(const pd_session *s) { return &s->o; }

pd_status pd__session_slabs(pd_session *s, pd__slabs *out) {
    if (!s || !out) return pd__err(PD_ERR_INVALID, "pd__session_slabs: NULL argument");
    out->np = s->np;
    out->param = s->param;
    out->poff = s->poff;
    out->total = s->ptotal;
    out->params = s->params;
    out->grads = s->grads;
    out->state0 = s->state0;
    out->state1 = s->state1;
    return PD_OK;
}
