/* pipeline_compute.c - F, B and W of a CPU stage, and the weight versions
 * they name (the live weights or a stash; PipeDream's weight stashing),
 * with recomputation (a forward again before what reads its activations). */
#include "pipeline_impl.h"

/* ---- weight versions ---- */

/* Points a context's parameters at version v: the live weights or its stash. */
static pd_status pd__bind(pd__pipe *p, pd__chunk *C, pd__actx *c, int32_t v) {
    const pd__vstage *S = &p->vs[C->k];
    const float *base = NULL;
    if (S->np == 0) return PD_OK; /* nothing to point: a checkpoint holds no versions of a stage without weights */
    for (int k = 0; v != C->live && k < C->nstash; k++)
        if (C->stash[k].version == v) base = C->stash[k].w;
    if (v != C->live && !base)
        return pd__err(PD_ERR_INTERNAL, "weight version %d is not held (the live one is %d)", (int)v, (int)C->live);
    for (int k = 0; k < S->np; k++) {
        int i = S->params[k];
        pd__actx_value(c, p->sl.param[i])->data = base ? (float *)base + S->pk[k] : p->sl.params + p->sl.poff[i];
    }
    return PD_OK;
}

/* Before the live weights become version live+1: keep version live in a stash
 * while an instruction after index k still names it. */
pd_status pd__stash_live(pd__pipe *p, pd__chunk *C, int k) {
    const pd__vstage *S = &p->vs[C->k];
    int32_t v = C->live;
    C->live = v + 1;
    if (C->need_until[v] <= k) return PD_OK;
    pd__stash *h = NULL;
    int held = 1;
    for (int j = 0; j < C->nstash; j++) {
        if (C->stash[j].version < 0 && !h) h = &C->stash[j];
        held += C->stash[j].version >= 0;
    }
    if (!h) return pd__err(PD_ERR_INTERNAL, "more than %d weight versions held", C->nstash + 1);
    h->version = v;
    for (int j = 0; !C->dev && j < S->np; j++) { /* a GPU stage copies on its device (pd__dev_stash) */
        int i = S->params[j];
        size_t n = (size_t)p->g->tensors[p->sl.param[i]].numel;
        memcpy(h->w + S->pk[j], p->sl.params + p->sl.poff[i], sizeof(float) * n);
    }
    if (held + 1 > C->peak_versions) C->peak_versions = held + 1;
    for (int j = 0; j < p->nslots; j++)
        if (C->slot_ver[j] == v) PD_TRY(pd__bind(p, C, C->slot[j], v));
    return PD_OK;
}

/* After instruction k naming version v: free v's stash when nothing later names it. */
void pd__release(pd__chunk *C, int32_t v, int k) {
    if (v < 0 || C->need_until[v] != k) return;
    for (int j = 0; j < C->nstash; j++)
        if (C->stash[j].version == v) C->stash[j].version = -1;
}


/* Recomputation: before what reads microbatch mb's activations (its B, W,
 * SEND_ACT), its forward again into the chunk's shared slab unless that
 * holds them already: the same inputs (kept by its slot), weights (the slot
 * is bound to its forward's version), Dropout seed; the BatchNorm running
 * statistics, which a training forward updates, put back as they were. */
pd_status pd__rc_ensure(pd__wk *W, pd__chunk *C, int mb) {
    pd__pipe *p = W->p;
    int slot = mb % p->nslots;
    if (!p->recompute || C->rc_owner == slot) return PD_OK;
    const pd__vstage *S = &p->vs[C->k];
    if (W->dev) return pd__dev_recompute(W, C, mb);
    pd__actx *c = C->slot[slot];
    char *save = C->rc_bufs;
    for (int j = 0; j < S->nbufs; j++, save += pd__tbytes(p->g, S->bufs[j - 1]))
        memcpy(save, pd__actx_value(c, S->bufs[j])->data, pd__tbytes(p->g, S->bufs[j]));
    PD_TRY(pd__feed_inputs(p, c, mb));
    W->x.seed = pd__mb_seed(p, mb);
    C->rc_owner = -1;
    PD_TRY(pd__actx_forward(p->s, &W->x, c, S->nodes, S->nnodes));
    save = C->rc_bufs;
    for (int j = 0; j < S->nbufs; j++, save += pd__tbytes(p->g, S->bufs[j - 1]))
        memcpy(pd__actx_value(c, S->bufs[j])->data, save, pd__tbytes(p->g, S->bufs[j]));
    C->rc_owner = slot;
    W->recomputes++;
    return PD_OK;
}

/* F: the graph inputs the stage's nodes read copied in, its forward, and on
 * the last stage the loss (on a GPU stage: pd__dev_forward). */
pd_status pd__do_forward(pd__wk *W, pd__chunk *C, int mb, int32_t version) {
    pd__pipe *p = W->p;
    const pd__vstage *S = &p->vs[C->k];
    int slot = mb % p->nslots;
    pd__actx *c = C->slot[slot];
    if (C->slot_ver[slot] >= 0) return pd__err(PD_ERR_INTERNAL, "microbatch %d's slot is still in flight", mb);
    if (W->dev) PD_TRY(pd__gpu_bind(W->dev));
    PD_TRY(pd__bind(p, C, c, version)); /* on a GPU stage, the host views, which nodes on the CPU compute in */
    if (W->dev) PD_TRY(pd__dev_use(W, C, slot, version));
    C->slot_ver[slot] = version;
    C->sent[slot] = false;
    if (++W->inflight > W->peak_act) W->peak_act = W->inflight;
    W->x.seed = pd__mb_seed(p, mb);
    pd_step_result r;
    memset(&r, 0, sizeof r);
    if (W->dev) {
        PD_TRY(pd__dev_forward(W, C, mb, &r));
    } else {
        PD_TRY(pd__feed_inputs(p, c, mb));
        PD_TRY(pd__actx_forward(p->s, &W->x, c, S->nodes, S->nnodes));
        C->rc_owner = slot;
        if (C->k != p->nvstages - 1) return PD_OK;
        pd_tensor lab;
        PD_TRY(pd__mb_rows(p, -1, mb, &lab));
        PD_TRY(pd__actx_loss(p->s, c, &lab, 1.0 / p->nmicro, &r));
    }
    return C->k == p->nvstages - 1 ? pd__mb_result(p, mb, &r) : PD_OK;
}

/* This thread's gradient slab: replica 0's is the session's, another's its own. */
float *pd__gslab(const pd__wk *W) { return W->grads ? W->grads : W->p->sl.grads; }

/* The order parameters' gradients become final in: j by j at position k
 * (going down), then those no node reads (at k = 0). */
static bool pd__final_at(const pd__wk *W, int j, int k) { return W->arfirst[j] == k || (k == 0 && W->arfirst[j] < 0); }

/* Across processes, a replica's last backward (or W) of a minibatch: the
 * nodes run in stretches, and as soon as a stretch has made parameters'
 * gradients final (their last reader's backward, in reverse order, has run)
 * their all-reduces start and travel while the backward goes on (packed in
 * the order they become final, in buckets of 1 MiB, the rest when the
 * backward ends); ALLREDUCE waits for them and unpacks. Every replica runs
 * the same nodes in the same order, so starts the same all-reduces in the
 * same order; each element is summed as by the packed all-reduce. */
static pd_status pd__backward_overlapped(pd__wk *W, const pd__vstage *S, pd__actx *c, int part) {
    pd__pipe *p = W->p;
    const pd_graph *g = p->g;
    const float *G = pd__gslab(W);
    if (S->packed > W->ared_n) { /* the first minibatch only */
        PD_FREE(W->ared);
        if (!(W->ared = PD_MALLOC(sizeof(float) * (size_t)S->packed))) return pd__err(PD_ERR_NOMEM, "out of memory");
        W->ared_n = S->packed;
    }
    for (int j = 0; j < S->np; j++) { /* the lowest position of a node reading parameter j */
        W->arfirst[j] = -1;
        for (int k = 0; k < S->nbnodes && W->arfirst[j] < 0; k++) {
            const pd__node *nd = &g->nodes[S->bnodes[k]];
            for (int q = 0; q < nd->nin; q++)
                if (nd->in[q] == p->sl.param[S->params[j]]) W->arfirst[j] = k;
        }
    }
    /* final gradients are packed into W->ared in the order they become
     * final; a bucket [lo, at) goes once it holds PD__BUCKET values, and the
     * rest when the backward ends */
    enum { PD__BUCKET = 1 << 18 };
    int64_t lo = 0, at = 0;
    int top = S->nbnodes;
    for (int k = S->nbnodes - 1; k >= 0; k--) {
        bool due = k == 0;
        for (int j = 0; j < S->np && !due; j++) due = W->arfirst[j] == k;
        if (!due) continue;
        if (part == 0) PD_TRY(pd__actx_backward(p->s, &W->x, c, S->bnodes + k, top - k));
        else PD_TRY(pd__actx_backward_part(p->s, &W->x, c, S->bnodes + k, top - k, true));
        top = k;
        for (int j = 0; j < S->np; j++) {
            if (!pd__final_at(W, j, k)) continue;
            int i = S->params[j];
            int64_t n = g->tensors[p->sl.param[i]].numel;
            memcpy(W->ared + at, G + p->sl.poff[i], sizeof(float) * (size_t)n);
            at += n;
            if (at - lo >= PD__BUCKET) {
                PD_TRY(p->remote->vt->iallreduce(p->remote, W->w, W->ared + lo, at - lo, false));
                lo = at;
            }
        }
    }
    if (at > lo) PD_TRY(p->remote->vt->iallreduce(p->remote, W->w, W->ared + lo, at - lo, false));
    W->ar_started = true;
    return PD_OK;
}

/* ALLREDUCE after pd__backward_overlapped: the sums back into the slab. */
pd_status pd__overlapped_wait(pd__wk *W) {
    pd__pipe *p = W->p;
    const pd__vstage *S = &p->vs[W->ch[0].k];
    float *G = pd__gslab(W);
    W->ar_started = false;
    PD_TRY(p->remote->vt->wait_all(p->remote, W->w));
    int64_t at = 0;
    for (int k = S->nbnodes - 1; k >= 0; k--)
        for (int j = 0; j < S->np; j++) {
            if (!pd__final_at(W, j, k)) continue;
            int i = S->params[j];
            int64_t n = p->g->tensors[p->sl.param[i]].numel;
            memcpy(G + p->sl.poff[i], W->ared + at, sizeof(float) * (size_t)n);
            at += n;
        }
    return PD_OK;
}

/* part: 0 the whole backward (B), 1 input gradients (split B), 2 weight
 * gradients (W); overlap: start the gradients' all-reduces as they are made
 * (CPU stages under MPI). A GPU stage's nodes run on its device
 * (pd__dev_backward); the rest is the same. */
pd_status pd__do_backward(pd__wk *W, pd__chunk *C, int mb, int32_t version, int part, bool overlap) {
    W->x.seed = pd__mb_seed(W->p, mb); /* Dropout's backward draws its forward's mask again */
    pd__pipe *p = W->p;
    const pd__vstage *S = &p->vs[C->k];
    int32_t *fv = &C->slot_ver[mb % p->nslots];
    if (*fv != version)
        return pd__err(PD_ERR_INTERNAL, "the %s names weight version %d, its forward used %d", part == 2 ? "W" : "B",
                       (int)version, (int)*fv);
    pd__actx *c = C->slot[mb % p->nslots];
    if (W->dev) PD_TRY(pd__gpu_bind(W->dev));
    PD_TRY(pd__rc_ensure(W, C, mb)); /* sets the seed too */
    if (W->dev) PD_TRY(pd__dev_backward(W, C, mb, version, part));
    else if (overlap) PD_TRY(pd__backward_overlapped(W, S, c, part));
    else if (part == 0) PD_TRY(pd__actx_backward(p->s, &W->x, c, S->bnodes, S->nbnodes));
    else PD_TRY(pd__actx_backward_part(p->s, &W->x, c, S->bnodes, S->nbnodes, part == 2));
    if (part != 1) {
        *fv = -1;
        W->inflight--;
        pd__slot_done(p, C, mb % p->nslots);
    }
    return PD_OK;
}
