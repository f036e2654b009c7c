/* pipeline_dev.c - the pipeline's GPU stages: the device side of every
 * instruction (F, B, W, SEND, RECV, ALLREDUCE, STEP), of snapshots and
 * resume and of tied weights (in one process and across processes), and
 * the device set-up and teardown, under MPI too (pipeline_impl.h).
 * runtime/pipeline.c calls these where a thread's stage is on a GPU
 * (W->dev); the device memory is runtime/pipeline_devmem.c's. */
#include "pipeline_impl.h"

#include <math.h>
#include <string.h>

/* ---- GPU stages (--device cuda; docs/CUDA.md, "The pipeline on GPUs") ----
 * Each thread has a pd__gpu (pipeline_devmem.h: its context, packed weight,
 * gradient, optimizer and stash slabs, device twins of its slots' contexts),
 * each link within a process a pd__glink (event-ordered device buffers whose
 * indices the queues carry). The schedule, versions and queues are the CPU
 * pipeline's; only where the numbers are differs. Between MPI processes,
 * messages and replica sums go by NCCL where each process runs one stage on
 * real GPUs of an NCCL build, else through host memory over the MPI
 * transport (docs/DISTRIBUTED.md, "GPU stages"). AvgPipe re-uploads the
 * weights it averaged in the host slabs (pd__dev_push_weights), under MPI
 * too. Not yet: tied weights with replicated stages (as on CPU stages). */

/* The device interface GPU stages run on: CUDA's table (the simulated
 * device's too); none without the backend, which pd__gpu_check refuses first. */
static const pd__dev_i *pd__dev_gpu_i(void) {
#ifdef PD_HAVE_CUDA
    return &pd__dev_cuda;
#else
    return NULL;
#endif
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
    for (int l = 0; p->glink && l + 1 < p->nvstages; l++) pd__glink_destroy(p->glink[l]); /* before the contexts it uses */
    PD_FREE(p->glink);
    p->glink = NULL;
    for (int i = 0; p->wk && i < p->nwk; i++) {
        pd__gpu_destroy(p->wk[i].dev);
        p->wk[i].dev = NULL;
        for (int c = 0; p->wk[i].ch && c < p->nchunks; c++) p->wk[i].ch[c].dev = false;
    }
    if (p->dremote) p->dremote->vt->destroy(p->dremote); /* after the contexts, whose pending hook reads it */
    p->dremote = NULL;
    p->gready = false;
}

/* Thread W's device side: its chunks' device memory on its GPU (under
 * MPI, unless the plan names it, --device's index plus the process's rank
 * on its machine, as torchrun's LOCAL_RANK: a machine's processes spread). */
static pd_status pd__dev_stage(pd__pipe *p, pd__wk *W) {
    const pd_graph *g = p->g;
    pd__gpu_chunk *cd = PD_CALLOC((size_t)p->nchunks, sizeof *cd);
    if (!cd) return pd__err(PD_ERR_NOMEM, "out of memory");
    for (int c = 0; c < p->nchunks; c++) {
        const pd__chunk *C = &W->ch[c];
        const pd__vstage *S = &p->vs[C->k];
        cd[c] = (pd__gpu_chunk){S->params, S->pk, S->np, S->packed, C->slot,
                                p->gneed + (size_t)C->k * (size_t)g->ntensors, C->nstash,
                                S->sp, S->spk, S->nsp, S->spacked};
    }
    int ndev = pd_cuda_device_count();
    if (p->remote && !p->gfix[W->w] && ndev > 0) p->gdev[W->w] = (p->o.device_index + p->lrank) % ndev;
    pd_status st = pd__gpu_create(p->s, g, &p->sl, pd__dev_gpu_i(), p->gdev[W->w], p->o.precision, p->nchunks, cd,
                                  p->nslots, &W->dev);
    PD_FREE(cd);
    if (st != PD_OK) pd__err_prefix("stage %d on cuda:%d", W->w, p->gdev[W->w]);
    for (int c = 0; c < p->nchunks && st == PD_OK; c++) W->ch[c].dev = true;
    return st;
}

/* This process's first thread of worker w; -1: none here. */
static int pd__dev_here(const pd__pipe *p, int w) {
    for (int r = 0; r < p->rep[w]; r++)
        if (p->rank_of[p->wbase[w] + r] == p->rank) return p->wbase[w] + r;
    return -1;
}

/* The device buffers of every link with both ends in this process (all of
 * them in one process): what its queue holds, one per sender (a replica)
 * holding one while the queue is full, one per receiver reading one. */
static pd_status pd__dev_links(pd__pipe *p) {
    if (p->nvstages < 2) return PD_OK;
    if (!(p->glink = PD_CALLOC((size_t)p->nvstages - 1, sizeof *p->glink)))
        return pd__err(PD_ERR_NOMEM, "out of memory");
    for (int l = 0; l + 1 < p->nvstages; l++) {
        int lo = pd__dev_here(p, l % p->nworkers), hi = pd__dev_here(p, (l + 1) % p->nworkers);
        if (lo < 0 || hi < 0) continue; /* another process holds an end: messages go by NCCL or MPI */
        PD_TRY(pd__glink_create(p->wk[lo].dev, p->wk[hi].dev, p->link[l].act_bytes, p->link[l].grad_bytes,
                                p->link[l].fwd.cap + p->rep[l % p->nworkers] + p->rep[(l + 1) % p->nworkers],
                                &p->glink[l]));
    }
    return PD_OK;
}

/* Under MPI, whether GPU stages in different processes talk by NCCL
 * (device buffers, no host copy) rather than by the MPI transport through
 * host memory: in a build with NCCL, on real GPUs (the simulated device
 * has none), when every process runs one stage thread (the NCCL transport
 * has one rank and one compute stream per process). The same on every
 * process: it depends on the plan's ranks alone, and the processes check
 * that they agree (pd__dev_remote). */
static bool pd__dev_nccl(const pd__pipe *p) {
#ifdef PD_HAVE_NCCL
    if (pd__cuda_is_sim()) return false;
    for (int i = 0; i < p->nwk; i++)
        for (int j = 0; j < i; j++)
            if (p->rank_of[i] == p->rank_of[j]) return false;
    return true;
#else
    (void)p;
    return false;
#endif
}

/* Under MPI, after this process's device side (st: how that went): the
 * processes agree that each made its own, so that one's failure is an error
 * on every process, naming it, instead of leaving the others waiting in
 * NCCL's set-up or for its messages; then the NCCL transport when the
 * processes talk by NCCL (collective), with mine's stream as the compute
 * stream. Otherwise nothing more: the MPI transport carries the messages. */
static pd_status pd__dev_remote(pd__pipe *p, pd__wk *mine, pd_status st) {
    bool nccl = pd__dev_nccl(p), same = pd__mpi_same(nccl); /* every process, whatever failed here */
    if (st == PD_OK && !same)
        st = pd__err(PD_ERR_INVALID, "pipeline: some processes run on the simulated device and some on GPUs "
                     "(PDONNX_CUDA_MODULE must be the same for every process)");
    if (st == PD_OK && !mine) st = pd__err(PD_ERR_INTERNAL, "rank %d runs no stage", p->rank);
    int low = pd__mpi_agree(st == PD_OK);
    if (st == PD_OK && low >= 0) st = pd__err(PD_ERR_IO, "MPI: rank %d failed: setting up its GPU stage", low);
    if (st != PD_OK || !nccl) return st;
#ifdef PD_HAVE_NCCL
    int *worker_of = PD_MALLOC(sizeof(int) * (size_t)p->nwk);
    if (!worker_of) return pd__err(PD_ERR_NOMEM, "out of memory");
    for (int i = 0; i < p->nwk; i++) worker_of[i] = p->wk[i].w;
    /* p->remote carries the failure notices the NCCL waits watch for */
    st = pd__cuda_nccl_transport_create(p->nwk, p->rank_of, worker_of, p->nworkers, p->nvstages - 1, p->gcolor,
                                        p->gdev[mine->w], pd__gpu_stream(mine->dev), p->remote, &p->dremote);
    if (st == PD_OK) /* its allocator gives nothing back (cudaFree) while a send may wait for a peer */
        pd__gpu_set_pending(mine->dev, pd__cuda_nccl_pending, p->dremote);
    PD_FREE(worker_of);
#endif
    return st;
}

/* Before the first run: a pd__gpu for each thread of this process, the
 * device buffers of the links between them, and under MPI what links the
 * processes (pd__dev_remote). */
pd_status pd__dev_setup(pd__pipe *p) {
    /* tied weights with a replicated stage: refused at pd__pipe_create, as on CPU stages */
    pd_status st = PD_OK;
    pd__wk *mine = NULL; /* under MPI with NCCL: this process's one thread (with several, MPI carries the messages) */
    for (int i = 0; i < p->nwk && st == PD_OK; i++)
        if (p->rank_of[i] == p->rank) st = pd__dev_stage(p, mine = &p->wk[i]);
    if (st == PD_OK) st = pd__dev_links(p);
    if (p->remote) st = pd__dev_remote(p, mine, st);
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

/* The graph inputs a device context's nodes read: microbatch mb's rows uploaded (pd__feed_inputs). */
static pd_status pd__dev_feed(pd__wk *W, pd__dactx *d, int mb) {
    pd__pipe *p = W->p;
    const pd_graph *g = p->g;
    for (int i = 0; i < g->ninputs; i++) {
        int t = g->inputs[i];
        void *dst = pd__dactx_value(d, t)->data;
        pd_tensor rows;
        if (!dst) continue;
        PD_TRY(pd__mb_rows(p, i, mb, &rows));
        PD_TRY(pd__gpu_upload(W->dev, dst, rows.data, pd__tbytes(g, t)));
    }
    return PD_OK;
}

/* pd__do_forward's device part, once the slot is taken: the graph inputs
 * uploaded, the forward, and on the last stage the loss into *r
 * (cross-entropy on the device, only its sums come back). */
pd_status pd__dev_forward(pd__wk *W, pd__chunk *C, int mb, pd_step_result *r) {
    pd__pipe *p = W->p;
    const pd__vstage *S = &p->vs[C->k];
    pd__dactx *d = pd__gpu_slot(W->dev, (int)(C - W->ch), mb % p->nslots);
    PD_TRY(pd__dev_feed(W, d, mb));
    PD_TRY(pd__dactx_forward(p->s, &W->x, d, S->nodes, S->nnodes));
    C->rc_owner = mb % p->nslots; /* recomputation: the chunk's shared activations are this microbatch's */
    if (C->k != p->nvstages - 1) return PD_OK;
    pd_tensor lab;
    PD_TRY(pd__mb_rows(p, -1, mb, &lab));
    return pd__dactx_loss(p->s, d, &lab, 1.0 / p->nmicro, r);
}

/* pd__rc_ensure on the device: microbatch mb's forward again into the
 * chunk's shared activations (its slots' device twins share them, as the
 * host contexts do), from its inputs uploaded again, at its slot's weight
 * version, with its Dropout seed; the BatchNorm statistics, which a training
 * forward updates, saved through host memory (C->rc_bufs) and put back. */
pd_status pd__dev_recompute(pd__wk *W, pd__chunk *C, int mb) {
    pd__pipe *p = W->p;
    const pd__vstage *S = &p->vs[C->k];
    int slot = mb % p->nslots;
    pd__dactx *d = pd__gpu_slot(W->dev, (int)(C - W->ch), slot);
    char *save = C->rc_bufs;
    for (int j = 0; j < S->nbufs; j++) {
        const void *v = pd__dactx_value(d, S->bufs[j])->data;
        if (v) PD_TRY(pd__gpu_download(W->dev, save, v, pd__tbytes(p->g, S->bufs[j])));
        save += pd__tbytes(p->g, S->bufs[j]);
    }
    PD_TRY(pd__dev_use(W, C, slot, C->slot_ver[slot]));
    PD_TRY(pd__dev_feed(W, d, mb));
    W->x.seed = pd__mb_seed(p, mb);
    C->rc_owner = -1;
    PD_TRY(pd__dactx_forward(p->s, &W->x, d, S->nodes, S->nnodes));
    save = C->rc_bufs;
    for (int j = 0; j < S->nbufs; j++) {
        void *v = pd__dactx_value(d, S->bufs[j])->data;
        if (v) PD_TRY(pd__gpu_upload(W->dev, v, save, pd__tbytes(p->g, S->bufs[j])));
        save += pd__tbytes(p->g, S->bufs[j]);
    }
    PD_TRY(pd__gpu_sync(W->dev)); /* the uploads have read C->rc_bufs, which the next recomputation rewrites */
    C->rc_owner = slot;
    W->recomputes++;
    return PD_OK;
}

/* pd__do_backward's nodes on the device (part: 0 B, 1 split B, 2 W), at
 * the slot's weight version (a STEP since its F may have stashed it). */
pd_status pd__dev_backward(pd__wk *W, pd__chunk *C, int mb, int32_t version, int part) {
    pd__pipe *p = W->p;
    const pd__vstage *S = &p->vs[C->k];
    int slot = mb % p->nslots;
    PD_TRY(pd__dev_use(W, C, slot, version));
    return pd__dactx_backward(p->s, &W->x, pd__gpu_slot(W->dev, (int)(C - W->ch), slot), S->bnodes, S->nbnodes,
                              part == 0 ? -1 : part - 1);
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

/* pd__send's message from a GPU stage (bound, its activations recomputed
 * if need be) to thread `to`: the tensors into a buffer of the link on the
 * receiver's device, whose index goes through the queue; to another
 * process, into an NCCL buffer on this device, or without NCCL downloaded
 * into the MPI transport's host buffer (waits). */
pd_status pd__dev_send(pd__wk *W, pd__chunk *C, int l, bool grad, int mb, int to, bool *stop) {
    pd__pipe *p = W->p;
    const pd__link *L = &p->link[l];
    int slot = mb % p->nslots, e = -1;
    pd__dactx *d = pd__gpu_slot(W->dev, (int)(C - W->ch), slot);
    if (pd__via(p, W, to) != &p->local.base) { /* another process: NCCL's device buffer, or MPI's host one */
        pd__transport *x = p->dremote ? p->dremote : p->remote;
        size_t n = grad ? L->grad_bytes : L->act_bytes, off = 0;
        char *buf = x->vt->get(x, l, grad, n);
        if (!buf)
            return pd__err(PD_ERR_NOMEM, "no %s memory for a %zu-byte message", p->dremote ? "device" : "host", n);
        for (int k = 0; k < (grad ? L->ngt + L->nbt : L->nt); k++) {
            char *v;
            size_t b;
            PD_TRY(pd__dev_part(p, L, d, grad, k, &v, &b));
            PD_TRY(p->dremote ? pd__gpu_copy(W->dev, buf + off, v, b) : pd__gpu_download(W->dev, buf + off, v, b));
            off += b;
        }
        return x->vt->send(x, (int)(W - p->wk), to, l, grad, mb, buf, n, stop);
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
    return t->vt->send(t, (int)(W - p->wk), to, l, grad, mb, ticket, sizeof *ticket, stop);
}

/* pd__recv's device side, tensor k of the message into the slot's device
 * twin: from the link buffer e the ticket named (in process; the stream
 * waited for the sender's copies in pd__glink_recv_begin) or, e < 0, from
 * buf at *off (another process): NCCL's device buffer, or without NCCL the
 * MPI transport's host message, uploaded (staged: buf may go back at once). */
pd_status pd__dev_take(pd__wk *W, pd__chunk *C, int l, bool grad, int slot, int k, int e, const char *buf,
                       size_t *off) {
    pd__pipe *p = W->p;
    pd__dactx *d = pd__gpu_slot(W->dev, (int)(C - W->ch), slot);
    char *v;
    size_t b = 0;
    PD_TRY(pd__dev_part(p, &p->link[l], d, grad, k, &v, &b));
    pd_status st = e >= 0       ? pd__glink_take(p->glink[l], grad, W->dev, e, *off, v, b)
                   : p->dremote ? pd__gpu_copy(W->dev, v, buf + *off, b)
                                : pd__gpu_upload(W->dev, v, buf + *off, b);
    *off += b;
    return st;
}

/* pd__do_step on the device: every thread updates its own weights (a
 * replica in its own process, with the summed gradients); no shared
 * parameters here. */
/* Tied weights on GPU stages (in one process, sync schedules: every STEP
 * of a minibatch runs together), once every thread has met (pd__do_step).
 * pd__sum_shared's order and arithmetic: each reader's gradients of the
 * parameters it shares come down into its host buffer (C->sg); they meet
 * again; each owner adds the readers' gradients to its own in stage order,
 * through host memory. */
pd_status pd__dev_tied_grads(pd__wk *W, bool *stop) {
    pd__pipe *p = W->p;
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

/* Tied weights on GPU stages across processes (pd__step_tied, every
 * thread here at STEP), around pd__sum_tied_remote, the CPU stages' sum:
 * down: each reader's gradients of the parameters it shares into its host
 * buffer (C->sg), each owner's gradient of a tied parameter into the
 * session's host slab, which is where that sum reads them (waits); up:
 * each owner's summed gradient back onto its device, and the host slab
 * zeroed again (the tie thread zeroes the sums it left for a copy whose
 * owner is in another process). */
pd_status pd__dev_tied_down(pd__wk *W) {
    pd__pipe *p = W->p;
    for (int c = 0; c < p->nchunks; c++) {
        PD_TRY(pd__gpu_shared_grads(W->dev, c, W->ch[c].sg));
        for (int t = 0; t < p->nties; t++)
            if (p->tie[t].owner == W->ch[c].k)
                PD_TRY(pd__gpu_grad_io(W->dev, c, p->tie[t].i, p->sl.grads + p->sl.poff[p->tie[t].i], false));
    }
    return PD_OK;
}

pd_status pd__dev_tied_up(pd__wk *W) {
    pd__pipe *p = W->p;
    for (int t = 0; t < p->nties; t++) {
        const pd__tie *T = &p->tie[t];
        float *g = p->sl.grads + p->sl.poff[T->i];
        size_t b = sizeof(float) * (size_t)p->g->tensors[p->sl.param[T->i]].numel;
        int owner = p->wbase[T->owner % p->nworkers];
        for (int c = 0; c < p->nchunks; c++)
            if (T->owner == W->ch[c].k) {
                PD_TRY(pd__gpu_grad_io(W->dev, c, T->i, g, true));
                memset(g, 0, b);
            }
        if (W - p->wk == p->tie_thread && T->here && p->rank_of[owner] != p->rank) memset(g, 0, b);
    }
    return PD_OK;
}

/* After the update: each owner's new weights of a tied parameter into the
 * host slab, they meet, (across processes: the owners' weights go to the
 * other holders, pd__tied_weights_remote, and they meet again,) each
 * reader uploads them into its copy: every copy is the owner's, bit for
 * bit, whatever the device's arithmetic. */
pd_status pd__dev_tied_weights(pd__wk *W, bool *stop) {
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
    if (p->remote) {
        if (W - p->wk == p->tie_thread) PD_TRY(pd__tied_weights_remote(p));
        if (!pd__meet_all(p)) {
            *stop = true;
            return PD_OK;
        }
    }
    for (int c = 0; c < p->nchunks; c++) PD_TRY(pd__gpu_shared_up(W->dev, c));
    return PD_OK;
}

/* STEP's check on the device: nothing is updated when a gradient is not
 * finite; the first such parameter named (its gradients come down only
 * then). */
pd_status pd__dev_finite(pd__wk *W) {
    pd__pipe *p = W->p;
    double sq = 0;
    PD_TRY(pd__gpu_sqnorm(W->dev, &sq));
    if (isfinite(sq)) return PD_OK;
    int i = -1;
    float v = 0;
    PD_TRY(pd__gpu_nonfinite(W->dev, &i, &v));
    if (i >= 0) return pd__err(PD_ERR_NUMERIC, "the gradient of '%s' is %g", p->g->tensors[p->sl.param[i]].name, (double)v);
    return pd__err(PD_ERR_NUMERIC, "the squared gradient norm is %g", sq);
}

/* pd__stash_live's copy on the device: chunk c's live weights into the
 * stash that now holds version v (none when no later instruction names it). */
pd_status pd__dev_stash(pd__wk *W, int c, int32_t v) {
    pd__chunk *C = &W->ch[c];
    for (int h = 0; h < C->nstash; h++)
        if (C->stash[h].version == v) PD_TRY(pd__gpu_stash(W->dev, c, h));
    return PD_OK;
}

/* ALLREDUCE of a GPU stage's replicas through host memory (in this
 * process, pd__allreduce_here; across processes without NCCL,
 * pd__allreduce_remote): down: this replica's packed gradients, chunk after
 * chunk, into its host buffer W->ared (waits); up: the sum (replica 0's
 * buffer here, its own across processes) into this replica's device
 * gradients (waits: the next ALLREDUCE rewrites it). */
pd_status pd__dev_grads_down(pd__wk *W) {
    pd__pipe *p = W->p;
    int64_t at = 0;
    PD_TRY(pd__ared_reserve(W, NULL));
    PD_TRY(pd__gpu_bind(W->dev));
    for (int c = 0; c < p->nchunks; c++) {
        float *g;
        int64_t k;
        pd__gpu_grads(W->dev, c, &g, &k);
        if (k > 0) PD_TRY(pd__gpu_download(W->dev, W->ared + at, g, sizeof(float) * (size_t)k));
        at += k;
    }
    return PD_OK;
}

pd_status pd__dev_grads_up(pd__wk *W, const float *sum) {
    int64_t at = 0;
    for (int c = 0; c < W->p->nchunks; c++) {
        float *g;
        int64_t k;
        pd__gpu_grads(W->dev, c, &g, &k);
        if (k > 0) PD_TRY(pd__gpu_upload(W->dev, g, sum + at, sizeof(float) * (size_t)k));
        at += k;
    }
    return pd__gpu_sync(W->dev);
}

/* pd__allreduce_remote over NCCL: each chunk's packed gradients summed in
 * place by ncclAllReduce on this stage's stream (the update queued after it
 * reads the sums), then scaled by f (pd__ared_scale). */
pd_status pd__dev_allreduce(pd__wk *W, float f) {
    pd__pipe *p = W->p;
    PD_TRY(pd__gpu_bind(W->dev));
    for (int c = 0; c < p->nchunks; c++) {
        float *g;
        int64_t n;
        pd__gpu_grads(W->dev, c, &g, &n);
        if (n > 0) PD_TRY(p->dremote->vt->allreduce(p->dremote, W->w, g, n, false));
    }
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
        st = pd__gpu_pull(W->dev, c, S->bufs, S->nbufs, !pre && W->r == 0); /* replicas hold the same weights */
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

/* AvgPipe's elastic update (runtime/avgpipe.c) between runs: the host
 * slabs' live weights, which pd__dev_end left there and the update moved,
 * into every GPU stage of this process, the tied weights' copies too
 * (waits). The optimizer state and the buffers stay as they are on the
 * device: the update does not touch them (each replica keeps its own
 * BatchNorm statistics, as on the CPU). */
pd_status pd__dev_push_weights(pd__pipe *p) {
    pd_status st = PD_OK;
    for (int i = 0; i < p->nwk && st == PD_OK; i++)
        for (int c = 0; p->wk[i].dev && c < p->nchunks && st == PD_OK; c++) {
            st = pd__gpu_push_weights(p->wk[i].dev, c);
            if (st != PD_OK) pd__err_prefix("stage %d: the averaged weights onto its GPU", p->wk[i].w);
        }
    return st;
}

/* After a run (every thread joined): each stage's stream drained (an
 * asynchronous error of its kernels fails the run, naming the stage), the
 * weights and optimizer state (each stage's first replica here) and
 * BatchNorm statistics (replica 0's) in the session's host slabs (which
 * pd__pipe_destroy gives the graph), the links' buffers free; a failed
 * run's gradients dropped, as on the CPU. */
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
        /* replica 0's state is the model's (what a snapshot holds): the
         * others' weights are equal, their BatchNorm statistics their own.
         * Under MPI a replica r > 0 without replica 0 in its process pulls
         * its weights into its own slabs (AvgPipe's update reads them) */
        bool first = pd__dev_here(p, W->w) == (int)(W - p->wk);
        for (int c = 0; c < p->nchunks && s1 == PD_OK && first; c++) {
            const pd__vstage *S = &p->vs[W->ch[c].k];
            s1 = pd__gpu_pull(W->dev, c, S->bufs, W->r == 0 ? S->nbufs : 0, true);
        }
        if (s1 != PD_OK && st == PD_OK) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", pd_last_error());
            st = pd__err(s1, "stage %d: %s", W->w, msg);
        }
    }
    for (int l = 0; p->glink && l + 1 < p->nvstages; l++)
        if (p->glink[l]) pd__glink_reset(p->glink[l]); /* none where an end is in another process */
    return st;
}
