/* pipeline_grads.c - ALLREDUCE and STEP: a replicated stage's gradients
 * summed (in process or by the transport), shared and tied parameters'
 * gradients added, the global gradient norm, clipping and the optimizer
 * step on the stage's own parameter ranges. */
#include "pipeline_impl.h"

/* ALLREDUCE: replica 0 sums its worker's replicas' gradients (every replica waits). */

/* pipedream: the round of r microbatches closed by the STEP of microbatch mb
 * (the run's last round may be shorter) is averaged, as PipeDream's
 * data-parallel replicas of a stage do; the other schedules' losses are
 * already scaled per minibatch, so their gradients are summed. */
float pd__ared_scale(const pd__wk *W, int mb) {
    return W->p->kind == PD_SCHED_PIPEDREAM ? 1.0f / (float)(mb % W->nrep + 1) : 1.0f;
}

static void pd__scale_grads(pd__wk *W, float *G, float f) {
    pd__pipe *p = W->p;
    for (int c = 0; f != 1.0f && c < p->nchunks; c++) {
        const pd__vstage *S = &p->vs[W->ch[c].k];
        for (int j = 0; j < S->np; j++) {
            int i = S->params[j];
            float *g = G + p->sl.poff[i];
            for (int64_t e = 0; e < p->g->tensors[p->sl.param[i]].numel; e++) g[e] *= f;
        }
    }
}

pd_status pd__ared_reserve(pd__wk *W, int64_t *count) {
    int64_t n = 0;
    for (int c = 0; c < W->p->nchunks; c++) n += W->p->vs[W->ch[c].k].packed;
    if (count) *count = n;
    if (n <= W->ared_n) return PD_OK;
    PD_FREE(W->ared);
    W->ared_n = 0;
    if (!(W->ared = PD_MALLOC(sizeof(float) * (size_t)n))) return pd__err(PD_ERR_NOMEM, "out of memory");
    W->ared_n = n;
    return PD_OK;
}

/* A CPU stage's gradients between the session's slab G and W->ared, packed
 * as a GPU stage's device slabs are (chunk after chunk, pd__vstage.pk). */
static void pd__ared_pack(pd__wk *W, float *G, bool in) {
    pd__pipe *p = W->p;
    int64_t at = 0;
    for (int c = 0; c < p->nchunks; c++) {
        const pd__vstage *S = &p->vs[W->ch[c].k];
        for (int j = 0; j < S->np; j++) {
            int i = S->params[j];
            size_t b = sizeof(float) * (size_t)p->g->tensors[p->sl.param[i]].numel;
            if (in) memcpy(W->ared + at + S->pk[j], G + p->sl.poff[i], b);
            else memcpy(G + p->sl.poff[i], W->ared + at + S->pk[j], b);
        }
        at += S->packed;
    }
}

/* Across processes (one thread each), one function for both kinds of stage:
 * the replicas' packed gradients summed so that every replica holds the
 * sum, scaled by pd__ared_scale. Its one fork is where the sum is made:
 * device buffers by NCCL (a GPU stage whose processes talk by NCCL,
 * pd__dev_allreduce), else host buffers by MPI: packed into W->ared (a CPU
 * stage's from the session's slab, a GPU stage's downloaded), all-reduced,
 * scaled, unpacked (uploaded). A CPU stage's sums may have started during
 * its last backward (pd__backward_overlapped): then only waited for. */
static pd_status pd__allreduce_remote(pd__wk *W, int mb) {
    pd__pipe *p = W->p;
    float f = pd__ared_scale(W, mb), *G = W->dev ? NULL : pd__gslab(W);
    if (W->dev && p->dremote) return pd__dev_allreduce(W, f);
    if (W->ar_started) {
        PD_TRY(pd__overlapped_wait(W));
        pd__scale_grads(W, G, f);
        return PD_OK;
    }
    int64_t n = 0;
    PD_TRY(pd__ared_reserve(W, &n));
    if (W->dev) PD_TRY(pd__dev_grads_down(W));
    else pd__ared_pack(W, G, true);
    PD_TRY(p->remote->vt->allreduce(p->remote, W->w, W->ared, n, false));
    for (int64_t e = 0; f != 1.0f && e < n; e++) W->ared[e] *= f;
    if (W->dev) return pd__dev_grads_up(W, W->ared);
    pd__ared_pack(W, G, false);
    return PD_OK;
}

/* In this process: replica 0 adds its worker's replicas' gradients to its
 * own in replica order and scales them, every replica waiting. CPU replicas
 * add into the session's slab (replica 0's) from their own slabs, which are
 * zeroed; GPU replicas each bring their packed gradients to host memory
 * first, and all take the sum back after (each updates its own copy). */
static pd_status pd__allreduce_here(pd__wk *W, int mb, bool *stop) {
    pd__pipe *p = W->p;
    if (W->dev) PD_TRY(pd__dev_grads_down(W));
    if (!pd__barrier(p, W->w)) return *stop = true, PD_OK;
    float f = pd__ared_scale(W, mb);
    for (int q = 1; W->r == 0 && W->dev && q < W->nrep; q++)
        for (int64_t e = 0; e < W->ared_n; e++) W->ared[e] += W[q].ared[e];
    for (int64_t e = 0; W->r == 0 && W->dev && f != 1.0f && e < W->ared_n; e++) W->ared[e] *= f;
    for (int q = 1; W->r == 0 && !W->dev && q < W->nrep; q++) {
        float *gr = W[q].grads;
        for (int c = 0; c < p->nchunks; c++) {
            const pd__vstage *S = &p->vs[W->ch[c].k];
            for (int j = 0; j < S->np; j++) {
                int i = S->params[j];
                int64_t off = p->sl.poff[i], n = p->g->tensors[p->sl.param[i]].numel;
                for (int64_t e = 0; e < n; e++) p->sl.grads[off + e] += gr[off + e];
                memset(gr + off, 0, sizeof(float) * (size_t)n);
            }
        }
    }
    if (W->r == 0 && !W->dev) pd__scale_grads(W, p->sl.grads, f);
    if (!pd__barrier(p, W->w)) return *stop = true, PD_OK;
    if (!W->dev) return PD_OK;
    PD_TRY(pd__dev_grads_up(W, (W - W->r)->ared));
    if (!pd__barrier(p, W->w)) *stop = true;
    return PD_OK;
}

/* ALLREDUCE: the replicas' gradients summed, in this process or across
 * processes, one function for CPU and GPU stages either way. */
pd_status pd__do_allreduce(pd__wk *W, int mb, bool *stop) {
    if (W->nrep == 1) return PD_OK;
    return W->p->remote ? pd__allreduce_remote(W, mb) : pd__allreduce_here(W, mb, stop);
}

/* Every thread of the pipeline (of this process, under MPI) meets (in order of their STEPs); false when aborted. */
bool pd__meet_all(pd__pipe *p) { return pd__meet(p, &p->allbar, p->remote ? p->nlocal : p->nwk); }

/* The owner of a shared parameter adds the later stages' gradients of it to
 * its own, in stage order, and clears theirs (they are waiting at STEP). */
static void pd__sum_shared(pd__wk *W, float *G) {
    pd__pipe *p = W->p;
    for (int c = 0; c < p->nchunks; c++)
        for (int k = W->ch[c].k + 1; k < p->nvstages; k++) {
            const pd__vstage *K = &p->vs[k];
            pd__chunk *other = &p->wk[p->wbase[k % p->nworkers]].ch[k / p->nworkers];
            for (int j = 0; j < K->nsp; j++) {
                int i = K->sp[j];
                bool mine = false;
                for (int q = 0; q < p->vs[W->ch[c].k].np && !mine; q++) mine = p->vs[W->ch[c].k].params[q] == i;
                if (!mine) continue;
                float *dst = G + p->sl.poff[i], *src = other->sg + K->spk[j];
                int64_t n = p->g->tensors[p->sl.param[i]].numel;
                for (int64_t e = 0; e < n; e++) dst[e] += src[e];
                memset(src, 0, sizeof(float) * (size_t)n);
            }
        }
}

/* Whether virtual stage k reads parameter i (owns it, or shares it); *g:
 * its gradient of it when this process runs k, else NULL. */
bool pd__tied_reader(pd__pipe *p, int k, int i, float **g) {
    pd__wk *W = &p->wk[p->wbase[k % p->nworkers]]; /* no replicas: refused where a parameter is shared */
    const pd__vstage *K = &p->vs[k];
    bool here = p->rank_of[W - p->wk] == p->rank;
    if (g) *g = NULL;
    for (int j = 0; j < K->np; j++)
        if (K->params[j] == i) {
            if (g && here) *g = p->sl.grads + p->sl.poff[i];
            return true;
        }
    for (int j = 0; j < K->nsp; j++)
        if (K->sp[j] == i) {
            if (g && here) *g = W->ch[k / p->nworkers].sg + K->spk[j];
            return true;
        }
    return false;
}

/* pd__sum_shared across processes: each process puts its stages' gradients
 * of a tied parameter in their slots (one per reading stage, the owner's
 * first) and -0.0 in the others', which adds exactly (x + -0.0 is x, signed
 * zeros too), so whatever order MPI adds the processes' buffers in, the
 * all-reduce leaves each stage's gradient in its slot; every holder then adds
 * the slots in stage order, as the owner does in one process: the same sum,
 * bit for bit, in every copy's gradient. Two stages reading it (GPT-2's table)
 * share one slot, as a + b is b + a. One thread per process does it while
 * the others wait (STEP: every backward here is done). */
static pd_status pd__sum_tied_remote(pd__wk *W, bool *stop) {
    pd__pipe *p = W->p;
    if (W - p->wk == p->tie_thread) {
        for (int t = 0; t < p->nties; t++) {
            const pd__tie *T = &p->tie[t];
            int64_t n = p->g->tensors[p->sl.param[T->i]].numel;
            for (int64_t e = 0; e < T->nslot * n; e++) p->tbuf[T->off + e] = -0.0f;
            for (int k = T->owner, s = 0; k < p->nvstages; k++) {
                float *g, *slot = p->tbuf + T->off + s * n;
                if (!pd__tied_reader(p, k, T->i, &g)) continue;
                for (int64_t e = 0; g && e < n; e++) slot[e] += g[e];
                if (g && k != T->owner) memset(g, 0, sizeof(float) * (size_t)n);
                s += T->nslot > 1;
            }
        }
        PD_TRY(p->remote->vt->allreduce(p->remote, PD__TIED, p->tbuf, p->tbuf_n, false));
        for (int t = 0; t < p->nties; t++) {
            const pd__tie *T = &p->tie[t];
            int64_t n = p->g->tensors[p->sl.param[T->i]].numel;
            float *G = p->sl.grads + p->sl.poff[T->i], *slot = p->tbuf + T->off;
            for (int64_t e = 0; T->here && e < n; e++) G[e] = slot[e];
            for (int s = 1; T->here && s < T->nslot; s++)
                for (int64_t e = 0; e < n; e++) G[e] += slot[s * n + e];
        }
    }
    if (!pd__meet_all(p)) *stop = true;
    return PD_OK;
}

/* A CPU stage's sum of squares: each chunk's parameters' gradients in
 * packed order, in pd__sq_sum's blocks (a GPU stage's packed slab, summed
 * by its device's sumsq, gives the same bits on the simulated device), the
 * chunks' sums added in order. */
static double pd__stage_sqnorm(const pd__wk *W, const float *G) {
    const pd__pipe *p = W->p;
    double sq = 0;
    for (int c = 0; c < p->nchunks; c++) {
        const pd__vstage *S = &p->vs[W->ch[c].k];
        pd__sq_stream q;
        pd__sq_begin(&q, S->packed);
        for (int j = 0; j < S->np; j++)
            pd__sq_feed(&q, G + p->sl.poff[S->params[j]], p->g->tensors[p->sl.param[S->params[j]]].numel);
        sq += pd__sq_end(&q);
    }
    return sq;
}

/* The global L2 norm of the update's gradients (every stage's, each counted
 * once): every thread adds its part and waits for the others (under MPI an
 * all-reduce); the parts are added in worker order, so the norm is the same
 * whatever the arrival order, and the same in one process or several. */
pd_status pd__global_norm(pd__wk *W, int64_t t, const float *G, double *norm, bool *stop) {
    pd__pipe *p = W->p;
    double sq = 0;
    if (W->dev && W->r == 0) PD_TRY(pd__gpu_sqnorm(W->dev, &sq)); /* a GPU stage's gradients are on its device */
    if (!W->dev && W->r == 0) sq = pd__stage_sqnorm(W, G);
    if (p->remote && p->nlocal == 1) { /* W->gnpart: made with the transport, so a step allocates nothing */
        double *part = W->gnpart;
        for (int w = 0; w < p->nworkers; w++) part[w] = w == W->w ? sq : 0;
        pd_status st = p->remote->vt->allreduce(p->remote, -1, part, p->nworkers, true);
        double sum = 0;
        for (int w = 0; w < p->nworkers; w++) sum += part[w];
        *norm = sqrt(sum);
        return st;
    }
    struct pd__gn *s = &p->gn[t % 4];
    pthread_mutex_lock(&p->mu);
    if (s->t != t) { /* the slot's last user, four updates ago, is long done */
        if (!s->part) s->part = PD_CALLOC((size_t)p->nworkers + 1, sizeof(double));
        for (int w = 0; s->part && w < p->nworkers; w++) s->part[w] = 0;
        s->t = t;
        s->arrived = 0;
        s->reduced = false;
        s->st = PD_OK;
    }
    if (!s->part) {
        pthread_mutex_unlock(&p->mu);
        return pd__err(PD_ERR_NOMEM, "out of memory");
    }
    s->part[W->w] += sq;
    /* under MPI with several threads here: this process's parts, then the
     * last of its threads to arrive sums them across the processes (one
     * all-reduce per update and process, update by update: every thread
     * here passed update t-1's before arriving at t's) */
    int here = p->remote ? p->nlocal : p->nwk;
    if (++s->arrived == here) {
        if (p->remote) {
            pthread_mutex_unlock(&p->mu);
            pd_status st = p->remote->vt->allreduce(p->remote, -1, s->part, p->nworkers, true);
            pthread_mutex_lock(&p->mu);
            s->st = st;
            s->reduced = true;
            if (st != PD_OK) { /* this thread reports it; the others stop */
                pthread_cond_broadcast(&p->cv);
                pthread_mutex_unlock(&p->mu);
                return st;
            }
        }
        pthread_cond_broadcast(&p->cv);
    }
    while ((s->arrived < here || (p->remote && !s->reduced)) && !p->abort) pthread_cond_wait(&p->cv, &p->mu);
    if (p->abort || (p->remote && s->st != PD_OK)) *stop = true;
    double sum = 0;
    for (int w = 0; w < p->nworkers; w++) sum += s->part[w];
    pthread_mutex_unlock(&p->mu);
    *norm = sqrt(sum);
    return PD_OK;
}

/* STEP's check: nothing is updated when a gradient of the thread's own
 * parameters is not finite; the error names the first. */
static pd_status pd__step_finite(pd__wk *W, const float *G) {
    pd__pipe *p = W->p;
    const pd__slabs *sl = &p->sl;
    if (W->dev) return pd__dev_finite(W);
    for (int c = 0; c < p->nchunks; c++) {
        const pd__vstage *S = &p->vs[W->ch[c].k];
        for (int j = 0; j < S->np; j++) {
            int i = S->params[j];
            const float *g = G + sl->poff[i];
            for (int64_t e = 0; e < p->g->tensors[sl->param[i]].numel; e++)
                if (!isfinite(g[e]))
                    return pd__err(PD_ERR_NUMERIC, "the gradient of '%s' is %g", p->g->tensors[sl->param[i]].name,
                                   (double)g[e]);
        }
    }
    return PD_OK;
}

/* Tied weights (sync schedules), once every backward is done: every thread
 * meets, then the owner adds the readers' gradients to its own (across
 * processes every holder makes the sum, pd__sum_tied_remote, GPU stages'
 * through host memory). */
static pd_status pd__step_tied(pd__wk *W, float *G, bool *stop) {
    pd__pipe *p = W->p;
    if (!pd__meet_all(p)) {
        *stop = true;
        return PD_OK;
    }
    if (!p->remote && W->dev) return pd__dev_tied_grads(W, stop);
    if (!p->remote) {
        pd__sum_shared(W, G);
        return PD_OK;
    }
    if (W->dev) { /* the sum is made in host memory: a GPU stage's gradients come down first, and go back summed */
        PD_TRY(pd__dev_tied_down(W));
        if (!pd__meet_all(p)) {
            *stop = true;
            return PD_OK;
        }
    }
    PD_TRY(pd__sum_tied_remote(W, stop));
    return W->dev && !*stop ? pd__dev_tied_up(W) : PD_OK;
}

/* One update of the whole model: its gradient norm (the step's result) and,
 * as clip_grad_norm_, the gradients scaled to the limit: the thread's
 * chunks' parameters, then its tied copies' (pd__tied_setup). */
static pd_status pd__step_clip(pd__wk *W, int mb, float *G, bool updater, bool *stop) {
    pd__pipe *p = W->p;
    const pd__slabs *sl = &p->sl;
    double norm = 0;
    PD_TRY(pd__global_norm(W, mb / p->nmicro, G, &norm, stop));
    if (*stop) return PD_OK;
    if (!isfinite(norm)) return pd__err(PD_ERR_NUMERIC, "the gradient norm is %g", norm);
    if (p->res && W->w == p->nworkers - 1 && W->r == 0) p->res[mb / p->nmicro].grad_norm = norm;
    if (!(p->o.clip_grad_norm > 0 && norm > p->o.clip_grad_norm && updater)) return PD_OK;
    float cf = (float)(p->o.clip_grad_norm / (norm + 1e-6));
    if (W->dev) return pd__gpu_scale(W->dev, cf);
    for (int c = 0; c <= p->nchunks; c++) {
        const pd__vstage *S = c < p->nchunks ? &p->vs[W->ch[c].k] : NULL;
        for (int j = 0; j < (S ? S->np : W->ntup); j++) {
            int i = S ? S->params[j] : W->tup[j];
            float *g = G + sl->poff[i];
            for (int64_t e = 0; e < p->g->tensors[sl->param[i]].numel; e++) g[e] *= cf;
        }
    }
    return PD_OK;
}

/* Update t at rate lr of the thread's own parameters and its tied copies
 * (the same update as their owner's), their gradients zeroed after. */
static pd_status pd__step_update(pd__wk *W, float *G, int64_t t, double lr) {
    pd__pipe *p = W->p;
    const pd__slabs *sl = &p->sl;
    if (W->dev) return pd__gpu_update(W->dev, &p->o, t, lr);
    for (int c = 0; c <= p->nchunks; c++) {
        const pd__vstage *S = c < p->nchunks ? &p->vs[W->ch[c].k] : NULL;
        for (int j = 0; j < (S ? S->np : W->ntup); j++) {
            int i = S ? S->params[j] : W->tup[j];
            int64_t off = sl->poff[i], n = p->g->tensors[sl->param[i]].numel;
            pd__optim_step(&p->o, t, lr, sl->params + off, G + off, sl->state0 ? sl->state0 + off : NULL,
                           sl->state1 ? sl->state1 + off : NULL, n);
            memset(G + off, 0, sizeof(float) * (size_t)n);
        }
    }
    return PD_OK;
}

/* STEP, one function for CPU and GPU stages: the check, tied weights'
 * gradients, the norm and clipping, the replaced version into a stash, the
 * update. A CPU stage works on the session's slabs (replicas here share
 * them: replica 0 updates, the others wait), a GPU stage on its packed
 * device slabs (every replica its own copy, as replicas in processes of
 * their own). */
pd_status pd__do_step(pd__wk *W, int mb, int32_t version, int k, bool *stop) {
    pd__pipe *p = W->p;
    for (int c = 0; c < p->nchunks; c++)
        if (version != W->ch[c].live + 1)
            return pd__err(PD_ERR_INTERNAL, "STEP makes version %d, the live one is %d", (int)version,
                           (int)W->ch[c].live);
    bool sharing = W->nrep > 1 && !p->remote && !W->dev; /* replicas with one copy of the weights */
    bool updater = !sharing || W->r == 0;
    float *G = W->dev ? NULL : pd__gslab(W);
    if (W->dev) PD_TRY(pd__gpu_bind(W->dev));
    if (updater) PD_TRY(pd__step_finite(W, G));
    if (p->shared && !pd__sched_async(p->kind)) {
        PD_TRY(pd__step_tied(W, G, stop));
        if (*stop) return PD_OK;
    }
    if (!pd__sched_async(p->kind)) {
        PD_TRY(pd__step_clip(W, mb, G, updater, stop));
        if (*stop) return PD_OK;
    }
    for (int c = 0; c < p->nchunks; c++) { /* the version being replaced into a stash when a later instruction names it */
        int32_t v = W->ch[c].live;
        PD_TRY(pd__stash_live(p, &W->ch[c], k));
        if (W->dev) PD_TRY(pd__dev_stash(W, c, v));
    }
    /* replicas sharing the weights keep their own stashes (2bw): every one has
     * copied the version being replaced before replica 0 writes the next */
    if (sharing && pd__sched_async(p->kind) && !pd__barrier(p, W->w)) {
        *stop = true;
        return PD_OK;
    }
    int64_t t = ++W->updates;
    double lr = pd__lr_at(&p->o, t);
    if (updater) PD_TRY(pd__step_update(W, G, t, lr));
    if (p->res && W->w == p->nworkers - 1 && W->r == 0) p->res[mb / p->nmicro].lr = lr;
    if (W->dev && p->shared) PD_TRY(pd__dev_tied_weights(W, stop)); /* the owners' new weights into the readers' copies */
    if (sharing && !pd__barrier(p, W->w)) *stop = true; /* nobody computes on half-updated weights */
    return PD_OK;
}
