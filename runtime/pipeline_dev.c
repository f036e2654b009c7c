/* pipeline_dev.c - the pipeline's GPU stages: the device side of every
 * instruction (F, B, W, SEND, RECV, ALLREDUCE, STEP), of snapshots and
 * resume and of tied weights, and the device set-up and teardown
 * (pipeline_impl.h). runtime/pipeline.c calls these where a thread's stage
 * is on a GPU (W->dev); the device memory is runtime/pipeline_cuda.c's. */
#include "pipeline_impl.h"

#include <math.h>
#include <string.h>

pd_status pd__dev_refuse(const char *what) {
    return pd__err(PD_ERR_UNSUPPORTED, "pipeline: %s with GPU stages: not supported yet", what);
}

/* At pd__pipe_create: the devices (the plan's per stage, else --device's)
 * checked, and the contexts' tensor sets (*need, taken over) kept for
 * pd__dev_setup. */
pd_status pd__dev_prepare(pd__pipe *p, const pd_plan *plan, const pd_train_options *o, bool **need) {
    p->gpu = true;
    p->o.device = o->device;
    p->o.device_index = o->device_index;
    p->o.precision = o->precision;
    if (!(p->gdev = PD_CALLOC((size_t)p->nworkers, sizeof(int))) || !(p->gfix = PD_CALLOC((size_t)p->nworkers, sizeof(bool))))
        return pd__err(PD_ERR_NOMEM, "out of memory");
    for (int w = 0; w < p->nworkers; w++) {
        p->gfix[w] = plan->stage && plan->stage[w].has_device;
        p->gdev[w] = p->gfix[w] ? plan->stage[w].device : o->device_index;
        for (int c = 1; c < p->nchunks; c++) {
            const pd__stage *k = plan->stage ? &plan->stage[c * p->nworkers + w] : NULL;
            if (k && k->has_device && k->device != p->gdev[w])
                return pd__err(PD_ERR_INVALID, "plan: virtual stage %d is on cuda:%d, its worker %d's first chunk on "
                               "cuda:%d: a worker's chunks share its GPU", c * p->nworkers + w, k->device, w, p->gdev[w]);
        }
        PD_TRY(pd__gpu_check(p->gdev[w]));
    }
    p->gneed = *need;
    *need = NULL;
    return PD_OK;
}

/* What pd__dev_setup made, undone (a failed set-up, pd__pipe_destroy). */
void pd__dev_teardown(pd__pipe *p) {
    for (int i = 0; p->wk && i < p->nwk; i++) {
        pd__gpu_destroy(p->wk[i].dev);
        p->wk[i].dev = NULL;
        for (int c = 0; p->wk[i].ch && c < p->nchunks; c++) p->wk[i].ch[c].dev = false;
    }
    for (int l = 0; p->glink && l + 1 < p->nvstages; l++) pd__glink_destroy(p->glink[l]);
    PD_FREE(p->glink);
    p->glink = NULL;
    if (p->dremote) p->dremote->vt->destroy(p->dremote); /* after the contexts, whose pending hook reads it */
    p->dremote = NULL;
    p->gready = false;
}

/* Before the first run: a pd__gpu for each thread of this process, the
 * links' buffers between them, and under MPI the NCCL transport (collective:
 * every process sets up in its first run; the processes first agree that
 * each made its device side, so that one's failure is an error on every
 * process, naming it, instead of leaving the others in NCCL's set-up). */
pd_status pd__dev_setup(pd__pipe *p) {
    const pd_graph *g = p->g;
    pd_status st = PD_OK;
    for (int w = 0; w < p->nworkers && st == PD_OK; w++) {
        int here = 0;
        for (int i = p->wbase[w]; i < p->wbase[w + 1]; i++) here += p->rank_of[i] == p->rank;
        if (here > 1)
            st = pd__err(PD_ERR_UNSUPPORTED, "pipeline: stage %d has %d replicas in this process; replicated "
                         "stages on GPUs run one replica per MPI process so far", w, here);
    }
    if (st == PD_OK && p->shared && p->remote)
        st = pd__dev_refuse("a parameter read by stages in several processes (tied weights under mpirun)");
    if (st == PD_OK && p->remote && p->nlocal > 1) st = pd__dev_refuse("several stages in one MPI process");
    pd__gpu_chunk *cd = st == PD_OK ? PD_CALLOC((size_t)p->nchunks, sizeof *cd) : NULL;
    if (st == PD_OK && !cd) st = pd__err(PD_ERR_NOMEM, "out of memory");
    pd__wk *mine = NULL; /* under MPI: this process's one thread */
    for (int i = 0; i < p->nwk && st == PD_OK; i++) {
        pd__wk *W = &p->wk[i];
        if (p->rank_of[i] != p->rank) continue;
        for (int c = 0; c < p->nchunks; c++) {
            const pd__chunk *C = &W->ch[c];
            const pd__vstage *S = &p->vs[C->k];
            cd[c] = (pd__gpu_chunk){S->params, S->pk, S->np, S->packed, C->slot,
                                    p->gneed + (size_t)C->k * (size_t)g->ntensors, C->nstash,
                                    S->sp, S->spk, S->nsp, S->spacked};
        }
        int ndev = pd_cuda_device_count();
        if (p->remote && !p->gfix[W->w] && ndev > 0) /* as torchrun's LOCAL_RANK: a machine's processes spread */
            p->gdev[W->w] = (p->o.device_index + p->lrank) % ndev;
        st = pd__gpu_create(p->s, g, &p->sl, p->gdev[W->w], p->o.precision, p->nchunks, cd, p->nslots, &W->dev);
        if (st != PD_OK) pd__err_prefix("stage %d on cuda:%d", W->w, p->gdev[W->w]);
        for (int c = 0; c < p->nchunks && st == PD_OK; c++) W->ch[c].dev = true;
        mine = W;
    }
    PD_FREE(cd);
    /* a link's buffers: what its queue holds, one a sender holds while the queue is full, one being read */
    if (st == PD_OK && !p->remote && p->nvstages > 1 && !(p->glink = PD_CALLOC((size_t)p->nvstages - 1, sizeof *p->glink)))
        st = pd__err(PD_ERR_NOMEM, "out of memory");
    for (int l = 0; !p->remote && l + 1 < p->nvstages && st == PD_OK; l++)
        st = pd__glink_create(p->gdev[l % p->nworkers], p->gdev[(l + 1) % p->nworkers], p->link[l].act_bytes,
                              p->link[l].grad_bytes, p->link[l].fwd.cap + 2, &p->glink[l]);
    if (p->remote) {
#ifdef PD_HAVE_NCCL
        int *worker_of = PD_MALLOC(sizeof(int) * (size_t)p->nwk);
        if (st == PD_OK && !worker_of) st = pd__err(PD_ERR_NOMEM, "out of memory");
        for (int i = 0; st == PD_OK && i < p->nwk; i++) worker_of[i] = p->wk[i].w;
        if (st == PD_OK && !mine) st = pd__err(PD_ERR_INTERNAL, "rank %d runs no stage", p->rank);
        int low = pd__mpi_agree(st == PD_OK); /* every process, whatever failed here */
        if (st == PD_OK && low >= 0) st = pd__err(PD_ERR_IO, "MPI: rank %d failed: setting up its GPU stage", low);
        if (st == PD_OK) /* p->remote carries the failure notices the NCCL waits watch for */
            st = pd__cuda_nccl_transport_create(p->nwk, p->rank_of, worker_of, p->nworkers, p->nvstages - 1, p->gcolor,
                                                p->gdev[mine->w], pd__gpu_stream(mine->dev), p->remote, &p->dremote);
        if (st == PD_OK) /* its allocator gives nothing back (cudaFree) while a send may wait for a peer */
            pd__gpu_set_pending(mine->dev, pd__cuda_nccl_pending, p->dremote);
        PD_FREE(worker_of);
#else
        (void)mine;
        if (st == PD_OK)
            st = pd__err(PD_ERR_UNSUPPORTED, "pipeline: GPU stages in several MPI processes need the NCCL transport, "
                         "which this build lacks (meson setup -Dnccl=enabled)");
#endif
    }
    if (st != PD_OK) {
        pd__dev_teardown(p);
        return st;
    }
    p->gready = true;
    return PD_OK;
}

/* Points slot's device parameter views at version v (live or a stash): a
 * STEP since its F may have moved v into a stash. */
pd_status pd__dev_use(pd__wk *W, pd__chunk *C, int slot, int32_t v) {
    const pd__vstage *S = &W->p->vs[C->k];
    if (S->np == 0) { /* as pd__bind: a checkpoint holds no versions of a stage without weights */
        if (S->nsp > 0) pd__gpu_use(W->dev, (int)(C - W->ch), slot, -1); /* but its tied copies (one version) */
        return PD_OK;
    }
    int h = -1;
    for (int k = 0; v != C->live && k < C->nstash; k++)
        if (C->stash[k].version == v) h = k;
    if (v != C->live && h < 0)
        return pd__err(PD_ERR_INTERNAL, "weight version %d is not held (the live one is %d)", (int)v, (int)C->live);
    pd__gpu_use(W->dev, (int)(C - W->ch), slot, h);
    return PD_OK;
}

/* pd__do_forward's device part, once the slot is taken: the graph inputs
 * uploaded, the forward, and on the last stage the loss into *r
 * (cross-entropy on the device, only its sums come back). */
pd_status pd__dev_forward(pd__wk *W, pd__chunk *C, int mb, pd_step_result *r) {
    pd__pipe *p = W->p;
    const pd_graph *g = p->g;
    const pd__vstage *S = &p->vs[C->k];
    pd__dactx *d = pd__gpu_slot(W->dev, (int)(C - W->ch), mb % p->nslots);
    for (int i = 0; i < g->ninputs; i++) { /* the graph inputs its nodes read */
        int t = g->inputs[i];
        void *dst = pd__dactx_value(d, t)->data;
        pd_tensor rows;
        if (!dst) continue;
        PD_TRY(pd__mb_rows(p, i, mb, &rows));
        PD_TRY(pd__gpu_upload(W->dev, dst, rows.data, pd__tbytes(g, t)));
    }
    PD_TRY(pd__dactx_forward(p->s, &W->x, d, S->nodes, S->nnodes));
    if (C->k != p->nvstages - 1) return PD_OK;
    pd_tensor lab;
    PD_TRY(pd__mb_rows(p, -1, mb, &lab));
    return pd__dactx_loss(p->s, d, &lab, 1.0 / p->nmicro, r);
}

/* pd__do_backward on the device (part: 0 B, 1 split B, 2 W). */
pd_status pd__dev_backward(pd__wk *W, pd__chunk *C, int mb, int32_t version, int part) {
    pd__pipe *p = W->p;
    const pd__vstage *S = &p->vs[C->k];
    int slot = mb % p->nslots;
    int32_t *fv = &C->slot_ver[slot];
    if (*fv != version)
        return pd__err(PD_ERR_INTERNAL, "the %s names weight version %d, its forward used %d", part == 2 ? "W" : "B",
                       (int)version, (int)*fv);
    PD_TRY(pd__gpu_bind(W->dev));
    PD_TRY(pd__dev_use(W, C, slot, version));
    PD_TRY(pd__dactx_backward(p->s, &W->x, pd__gpu_slot(W->dev, (int)(C - W->ch), slot), S->bnodes, S->nbnodes,
                              part == 0 ? -1 : part - 1));
    if (part != 1) {
        *fv = -1;
        W->inflight--;
    }
    return PD_OK;
}

/* Tensor k of a link's message (grad: the backward one) in a device
 * context: its device address and bytes. */
static pd_status pd__dev_part(const pd__pipe *p, const pd__link *L, pd__dactx *d, bool grad, int k, char **data,
                              size_t *bytes) {
    int t = grad ? (k < L->ngt ? L->gt[k] : L->bt[k - L->ngt]) : L->t[k];
    *data = (grad && k < L->ngt ? pd__dactx_grad(d, t) : pd__dactx_value(d, t))->data;
    *bytes = pd__tbytes(p->g, t);
    if (!*data) return pd__err(PD_ERR_INTERNAL, "'%s' has no device memory on this stage", p->g->tensors[t].name);
    return PD_OK;
}

/* pd__send on the device: the tensors into a buffer of the link (on the
 * receiver's device), whose index goes through the queue. */
pd_status pd__dev_send(pd__wk *W, pd__chunk *C, int l, bool grad, int mb, bool *stop) {
    pd__pipe *p = W->p;
    const pd__link *L = &p->link[l];
    int slot = mb % p->nslots, to = pd__peer(p, l, grad, true, mb), e = -1;
    pd__dactx *d = pd__gpu_slot(W->dev, (int)(C - W->ch), slot);
    PD_TRY(pd__gpu_bind(W->dev));
    if (pd__via(p, W, to) != &p->local.base) { /* another process: packed into an NCCL buffer on this device */
        pd__transport *x = p->dremote;
        size_t n = grad ? L->grad_bytes : L->act_bytes, off = 0;
        char *buf = x->vt->get(x, l, grad, n);
        if (!buf) return pd__err(PD_ERR_NOMEM, "no device memory for a %zu-byte message", n);
        for (int k = 0; k < (grad ? L->ngt + L->nbt : L->nt); k++) {
            char *v;
            size_t b;
            PD_TRY(pd__dev_part(p, L, d, grad, k, &v, &b));
            PD_TRY(pd__gpu_copy(W->dev, buf + off, v, b));
            off += b;
        }
        PD_TRY(x->vt->send(x, (int)(W - p->wk), to, l, grad, mb, buf, n, stop));
        if (grad) C->sent[slot] = true;
        return PD_OK;
    }
    pd__glink *G = p->glink[l];
    PD_TRY(pd__glink_send_begin(G, grad, W->dev, &e));
    size_t off = 0;
    for (int k = 0; k < (grad ? L->ngt + L->nbt : L->nt); k++) {
        char *v;
        size_t b;
        PD_TRY(pd__dev_part(p, L, d, grad, k, &v, &b));
        PD_TRY(pd__glink_put(G, grad, W->dev, e, off, v, b));
        off += b;
    }
    PD_TRY(pd__glink_send_end(G, grad, W->dev, e));
    pd__transport *t = &p->local.base;
    int32_t *ticket = t->vt->get(t, l, grad, sizeof *ticket);
    if (!ticket) return pd__err(PD_ERR_NOMEM, "out of memory");
    *ticket = e;
    PD_TRY(t->vt->send(t, (int)(W - p->wk), to, l, grad, mb, ticket, sizeof *ticket, stop));
    if (grad) C->sent[slot] = true;
    return PD_OK;
}

/* pd__recv on the device: the buffer's tensors copied into the context once
 * the sender's copies have run (an event, no host wait). */
pd_status pd__dev_recv(pd__wk *W, pd__chunk *C, int l, bool grad, int mb, bool *stop) {
    pd__pipe *p = W->p;
    const pd__link *L = &p->link[l];
    pd__transport *t = &p->local.base;
    int from = pd__peer(p, l, grad, false, mb);
    if (pd__via(p, W, from) != &p->local.base) { /* another process: NCCL's buffer, which this stream waits for */
        pd__transport *x = p->dremote;
        size_t n = grad ? L->grad_bytes : L->act_bytes, off = 0;
        char *buf = NULL;
        PD_TRY(pd__gpu_bind(W->dev));
        PD_TRY(x->vt->recv(x, from, (int)(W - p->wk), l, grad, mb, n, (void **)&buf, stop));
        pd__dactx *d = pd__gpu_slot(W->dev, (int)(C - W->ch), mb % p->nslots);
        pd_status st = PD_OK;
        for (int k = 0; k < (grad ? L->ngt + L->nbt : L->nt) && st == PD_OK; k++) {
            char *v;
            size_t b = 0;
            st = pd__dev_part(p, L, d, grad, k, &v, &b);
            if (st == PD_OK) st = pd__gpu_copy(W->dev, v, buf + off, b);
            off += b;
        }
        x->vt->put(x, l, grad, buf); /* free again once the copies queued on this stream have run */
        return st;
    }
    pd__glink *G = p->glink[l];
    void *buf = NULL;
    PD_TRY(t->vt->recv(t, from, (int)(W - p->wk), l, grad, mb, sizeof(int32_t), &buf, stop));
    if (*stop) return PD_OK;
    int32_t e;
    memcpy(&e, buf, sizeof e);
    t->vt->put(t, l, grad, buf);
    pd__dactx *d = pd__gpu_slot(W->dev, (int)(C - W->ch), mb % p->nslots);
    PD_TRY(pd__gpu_bind(W->dev));
    PD_TRY(pd__glink_recv_begin(G, grad, W->dev, e));
    size_t off = 0;
    for (int k = 0; k < (grad ? L->ngt + L->nbt : L->nt); k++) {
        char *v;
        size_t b;
        PD_TRY(pd__dev_part(p, L, d, grad, k, &v, &b));
        PD_TRY(pd__glink_take(G, grad, W->dev, e, off, v, b));
        off += b;
    }
    return pd__glink_recv_end(G, grad, W->dev, e);
}

/* pd__do_step on the device: every thread updates its own weights (a
 * replica in its own process, with the summed gradients); no shared
 * parameters here. */
/* Tied weights on GPU stages (in one process, sync schedules: every STEP
 * of a minibatch runs together). pd__sum_shared's order and arithmetic:
 * every thread meets; each reader's gradients of the parameters it shares
 * come down into its host buffer (C->sg); they meet again; each owner adds
 * the readers' gradients to its own in stage order, through host memory. */
static pd_status pd__dev_tied_grads(pd__wk *W, bool *stop) {
    pd__pipe *p = W->p;
    if (!pd__meet_all(p)) {
        *stop = true;
        return PD_OK;
    }
    for (int c = 0; c < p->nchunks; c++) PD_TRY(pd__gpu_shared_grads(W->dev, c, W->ch[c].sg));
    if (!pd__meet_all(p)) {
        *stop = true;
        return PD_OK;
    }
    pd_status st = PD_OK;
    for (int c = 0; c < p->nchunks && st == PD_OK; c++)
        for (int k = W->ch[c].k + 1; k < p->nvstages && st == PD_OK; k++) {
            const pd__vstage *K = &p->vs[k], *S = &p->vs[W->ch[c].k];
            pd__chunk *other = &p->wk[p->wbase[k % p->nworkers]].ch[k / p->nworkers];
            for (int j = 0; j < K->nsp && st == PD_OK; j++) {
                int i = K->sp[j];
                bool mine = false;
                for (int q = 0; q < S->np && !mine; q++) mine = S->params[q] == i;
                if (!mine) continue;
                int64_t n = p->g->tensors[p->sl.param[i]].numel;
                st = pd__gpu_grad_add(W->dev, c, i, other->sg + K->spk[j]);
                if (st == PD_OK) memset(other->sg + K->spk[j], 0, sizeof(float) * (size_t)n);
            }
        }
    return st;
}

/* After the update: each owner's new weights of a tied parameter into the
 * host slab, they meet, each reader uploads them into its copy. */
static pd_status pd__dev_tied_weights(pd__wk *W, bool *stop) {
    pd__pipe *p = W->p;
    for (int c = 0; c < p->nchunks; c++)
        for (int k = W->ch[c].k + 1; k < p->nvstages; k++) {
            const pd__vstage *K = &p->vs[k], *S = &p->vs[W->ch[c].k];
            for (int j = 0; j < K->nsp; j++)
                for (int q = 0; q < S->np; q++)
                    if (S->params[q] == K->sp[j]) PD_TRY(pd__gpu_weight_down(W->dev, c, K->sp[j]));
        }
    if (!pd__meet_all(p)) {
        *stop = true;
        return PD_OK;
    }
    for (int c = 0; c < p->nchunks; c++) PD_TRY(pd__gpu_shared_up(W->dev, c));
    return PD_OK;
}

pd_status pd__dev_step(pd__wk *W, int mb, int32_t version, int k, bool *stop) {
    pd__pipe *p = W->p;
    for (int c = 0; c < p->nchunks; c++)
        if (version != W->ch[c].live + 1)
            return pd__err(PD_ERR_INTERNAL, "STEP makes version %d, the live one is %d", (int)version,
                           (int)W->ch[c].live);
    PD_TRY(pd__gpu_bind(W->dev));
    double sq = 0;
    PD_TRY(pd__gpu_sqnorm(W->dev, &sq));
    if (!isfinite(sq)) { /* nothing is updated when a gradient is not finite; name the first */
        int i = -1;
        float v = 0;
        PD_TRY(pd__gpu_nonfinite(W->dev, &i, &v));
        if (i >= 0)
            return pd__err(PD_ERR_NUMERIC, "the gradient of '%s' is %g", p->g->tensors[p->sl.param[i]].name, (double)v);
        return pd__err(PD_ERR_NUMERIC, "the squared gradient norm is %g", sq);
    }
    if (p->shared) { /* tied weights (sync schedules): the readers' gradients into the owner's */
        PD_TRY(pd__dev_tied_grads(W, stop));
        if (*stop) return PD_OK;
    }
    if (!pd__sched_async(p->kind)) { /* one update of the whole model: its gradient norm, and clipping */
        double norm = 0;
        PD_TRY(pd__global_norm(W, mb / p->nmicro, NULL, &norm, stop));
        if (*stop) return PD_OK;
        if (!isfinite(norm)) return pd__err(PD_ERR_NUMERIC, "the gradient norm is %g", norm);
        if (p->res && W->w == p->nworkers - 1 && W->r == 0) p->res[mb / p->nmicro].grad_norm = norm;
        if (p->o.clip_grad_norm > 0 && norm > p->o.clip_grad_norm) /* as clip_grad_norm_ */
            PD_TRY(pd__gpu_scale(W->dev, (float)(p->o.clip_grad_norm / (norm + 1e-6))));
    }
    for (int c = 0; c < p->nchunks; c++) { /* the version being replaced into a stash when a later instruction names it */
        pd__chunk *C = &W->ch[c];
        int32_t v = C->live;
        PD_TRY(pd__stash_live(p, C, k));
        for (int h = 0; h < C->nstash; h++)
            if (C->stash[h].version == v) PD_TRY(pd__gpu_stash(W->dev, c, h));
    }
    int64_t t = ++W->updates;
    double lr = pd__lr_at(&p->o, t);
    PD_TRY(pd__gpu_update(W->dev, &p->o, t, lr));
    if (p->res && W->w == p->nworkers - 1 && W->r == 0) p->res[mb / p->nmicro].lr = lr;
    if (p->shared) PD_TRY(pd__dev_tied_weights(W, stop)); /* the owners' new weights into the readers' copies */
    return PD_OK;
}

/* ALLREDUCE across the processes of a replicated stage: each chunk's packed
 * gradients summed in place by ncclAllReduce on this stage's stream (the
 * update queued after it reads the sums), averaged over the round under
 * pipedream as on the CPU. */
pd_status pd__dev_allreduce(pd__wk *W, int mb) {
    pd__pipe *p = W->p;
    if (!p->dremote) return pd__err(PD_ERR_INTERNAL, "replicas of a GPU stage outside MPI");
    PD_TRY(pd__gpu_bind(W->dev));
    for (int c = 0; c < p->nchunks; c++) {
        float *g;
        int64_t n;
        pd__gpu_grads(W->dev, c, &g, &n);
        if (n > 0) PD_TRY(p->dremote->vt->allreduce(p->dremote, W->w, g, n, false));
    }
    float f = pd__ared_scale(W, mb);
    return f == 1.0f ? PD_OK : pd__gpu_scale(W->dev, f);
}

/* A GPU stage's state into the host memory pd__snap_write reads (waits):
 * the buffers (BatchNorm statistics, into slot 0's host context), and unless
 * pre (which writes only those) the live weights and optimizer state (into
 * the session's slabs) and the stashes that hold a version (into their host
 * copies). */
pd_status pd__dev_snap(pd__wk *W, bool pre) {
    pd__pipe *p = W->p;
    pd_status st = pd__gpu_bind(W->dev);
    for (int c = 0; c < p->nchunks && st == PD_OK; c++) {
        pd__chunk *C = &W->ch[c];
        const pd__vstage *S = &p->vs[C->k];
        st = pd__gpu_pull(W->dev, c, S->bufs, S->nbufs, !pre);
        for (int h = 0; !pre && st == PD_OK && h < C->nstash; h++)
            if (C->stash[h].version >= 0) st = pd__gpu_pull_stash(W->dev, c, h, C->stash[h].w);
    }
    if (st != PD_OK) pd__err_prefix("snapshot of a GPU stage");
    return st;
}

/* After pd__pipe_resume: the restored host state (weights, optimizer state,
 * stashes, buffers) into every GPU stage of this process (waits). */
pd_status pd__dev_push(pd__pipe *p) {
    pd_status st = PD_OK;
    for (int i = 0; i < p->nwk && st == PD_OK; i++) {
        pd__wk *W = &p->wk[i];
        if (!W->dev) continue;
        for (int c = 0; c < p->nchunks && st == PD_OK; c++) {
            pd__chunk *C = &W->ch[c];
            const pd__vstage *S = &p->vs[C->k];
            for (int h = 0; st == PD_OK && h < C->nstash; h++)
                if (C->stash[h].version >= 0) st = pd__gpu_push_stash(W->dev, c, h, C->stash[h].w);
            if (st == PD_OK) st = pd__gpu_push(W->dev, c, S->bufs, S->nbufs);
        }
        if (st != PD_OK) pd__err_prefix("stage %d: resuming on its GPU", W->w);
    }
    p->gpush = false;
    return st;
}

/* After a run (every thread joined): each stage's stream drained (an
 * asynchronous error of its kernels fails the run, naming the stage), the
 * weights, optimizer state and BatchNorm statistics in the session's host
 * slabs (which pd__pipe_destroy gives the graph), the links' buffers free;
 * a failed run's gradients dropped, as on the CPU. */
pd_status pd__dev_end(pd__pipe *p, bool ok) {
    pd_status st = PD_OK;
    if (p->dremote && ok) st = p->dremote->vt->flush(p->dremote); /* every send done (polled: a peer may fail) */
    if (p->dremote && (!ok || st != PD_OK)) /* NCCL kernels waiting for a peer return: the syncs below end */
        p->dremote->vt->fail(p->dremote, NULL);
    for (int i = 0; i < p->nwk; i++) {
        pd__wk *W = &p->wk[i];
        if (!W->dev) continue; /* another process's */
        pd_status s1 = pd__gpu_bind(W->dev);
        if (s1 == PD_OK) s1 = pd__gpu_sync(W->dev);
        if (s1 == PD_OK && !ok) s1 = pd__gpu_zero_grads(W->dev);
        for (int c = 0; c < p->nchunks && s1 == PD_OK; c++) {
            const pd__vstage *S = &p->vs[W->ch[c].k];
            s1 = pd__gpu_pull(W->dev, c, S->bufs, S->nbufs, true);
        }
        if (s1 != PD_OK && st == PD_OK) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", pd_last_error());
            st = pd__err(s1, "stage %d: %s", W->w, msg);
        }
    }
    for (int l = 0; p->glink && l + 1 < p->nvstages; l++) pd__glink_reset(p->glink[l]);
    return st;
}
