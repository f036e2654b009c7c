/* pipeline_mpi.c - the pipeline across processes: which threads a rank
 * runs, tied weights across processes, the final gather of the weights. */
#include "pipeline_impl.h"

/* The processes the plan's stage_to_rank maps the threads onto, when it is
 * a mapping onto 0 .. K-1 (every rank used; stages may share a rank, so a
 * process may run several stages, a replica of a replicated one among
 * them; a stage's replicas sit on consecutive ranks, each in a process of
 * its own); -1 when it is not. */
static int pd__planned_processes(const pd__pipe *p) {
    if (!p->first_rank) return -1;
    int K = 0;
    for (int w = 0; w < p->nworkers; w++) {
        if (p->first_rank[w] < 0) return -1;
        if (p->first_rank[w] + p->rep[w] > K) K = p->first_rank[w] + p->rep[w];
    }
    for (int r = 0; r < K; r++) {
        bool used = false;
        for (int w = 0; w < p->nworkers && !used; w++) used = r >= p->first_rank[w] && r < p->first_rank[w] + p->rep[w];
        if (!used) return -1;
    }
    return K;
}

int pd__pipe_processes(const pd__pipe *p) {
    int K = pd__planned_processes(p);
    return K > 0 ? K : p->nwk;
}

int pd__pipe_threads(const pd__pipe *p) { return p->nwk; }

pd_status pd__pipe_set_ranks(pd__pipe *p, int rank, int nranks) { return pd__pipe_set_ranks_in(p, rank, nranks, 0); }

/* Tied weights across processes: every process holds the whole model, so a
 * process running a stage that reads a tied parameter keeps its own copy,
 * updated at every STEP with the gradients summed across the holders
 * (pd__sum_tied_remote) by the same optimizer on the same state: the copies
 * stay the owner's, bit for bit. Where another process owns the parameter,
 * the thread of the lowest stage here reading it updates the copy (W->tup):
 * the forwards of the next minibatch here that read it come after that
 * stage's STEP. tied: per thread, whether its stage reads one (the
 * transport's PD__TIED group). */
static pd_status pd__tied_setup(pd__pipe *p, int rank, bool *tied) {
    p->nties = 0, p->tbuf_n = 0, p->tie_thread = -1;
    for (int i = 0; i < p->nwk; i++) {
        if (p->rank_of[i] == rank && p->tie_thread < 0) p->tie_thread = i;
        PD_FREE(p->wk[i].tup);
        p->wk[i].ntup = 0;
        if (p->shared && !(p->wk[i].tup = PD_MALLOC(sizeof(int) * ((size_t)p->sl.np + 1))))
            return pd__err(PD_ERR_NOMEM, "out of memory");
    }
    PD_FREE(p->tie);
    PD_FREE(p->tbuf);
    if (!p->shared) return PD_OK;
    if (!(p->tie = PD_MALLOC(sizeof *p->tie * ((size_t)p->sl.np + 1)))) return pd__err(PD_ERR_NOMEM, "out of memory");
    for (int k = 0; k < p->nvstages; k++)
        for (int j = 0; j < p->vs[k].np; j++) {
            int i = p->vs[k].params[j], nslot = 0, upd = -1;
            for (int q = k; q < p->nvstages; q++) nslot += pd__tied_reader(p, q, i, NULL);
            if (nslot < 2) continue;
            pd__tie *T = &p->tie[p->nties++];
            *T = (pd__tie){i, k, nslot == 2 ? 1 : nslot, p->tbuf_n, false};
            p->tbuf_n += T->nslot * p->g->tensors[p->sl.param[i]].numel;
            for (int q = k; q < p->nvstages; q++) {
                int th = p->wbase[q % p->nworkers];
                if (!pd__tied_reader(p, q, i, NULL)) continue;
                tied[th] = true;
                if (p->rank_of[th] != rank) continue;
                T->here = true;
                if (upd < 0) upd = th;
            }
            if (upd >= 0 && upd != p->wbase[k % p->nworkers]) p->wk[upd].tup[p->wk[upd].ntup++] = i;
        }
    bool any = false; /* a process holding no copy takes no part in the sums */
    for (int t = 0; t < p->nties; t++) any |= p->tie[t].here;
    if (!any) p->tie_thread = -1;
    if (!(p->tbuf = PD_MALLOC(sizeof(float) * ((size_t)p->tbuf_n + 1))))
        return pd__err(PD_ERR_NOMEM, "out of memory for the tied parameters' gradients (%lld floats)",
                       (long long)p->tbuf_n);
    return PD_OK;
}

/* The owners' values of every tied parameter in slabs[0..nslab) (a NULL
 * slab is skipped) to the other processes holding a reader: an all-reduce of
 * the PD__TIED group with -0.0 from the others (exact). buf holds nslab
 * times the tied parameters' floats. Collective over the group. */
pd_status pd__tied_from_owner(pd__pipe *p, float *const *slabs, int nslab, float *buf) {
    const pd__slabs *sl = &p->sl;
    int64_t n = 0;
    for (int t = 0; t < p->nties; t++) { /* the owner's values, -0.0 elsewhere */
        int64_t m = p->g->tensors[sl->param[p->tie[t].i]].numel;
        bool owner = p->rank_of[p->wbase[p->tie[t].owner % p->nworkers]] == p->rank;
        for (int q = 0; q < nslab; q++, n += m)
            for (int64_t e = 0; e < m; e++) buf[n + e] = owner && slabs[q] ? slabs[q][sl->poff[p->tie[t].i] + e] : -0.0f;
    }
    PD_TRY(p->remote->vt->allreduce(p->remote, PD__TIED, buf, n, false));
    for (int64_t t = 0, at = 0; t < p->nties; t++) { /* into the other holders' copies */
        const pd__tie *T = &p->tie[t];
        int64_t m = p->g->tensors[sl->param[T->i]].numel;
        bool owner = p->rank_of[p->wbase[T->owner % p->nworkers]] == p->rank;
        for (int q = 0; q < nslab; q++, at += m)
            if (T->here && !owner && slabs[q]) memcpy(slabs[q] + sl->poff[T->i], buf + at, sizeof(float) * (size_t)m);
    }
    return PD_OK;
}

/* GPU stages' tied weights after an update (pd__dev_tied_weights): the
 * owners' new weights, which each owner's thread put in the session's host
 * slab, to the processes holding a reader but not the owner, as a resume's
 * pd__tied_restore does. The holders' optimizers need not agree with the
 * owner's device to the bit this way. Called by this process's tie thread. */
pd_status pd__tied_weights_remote(pd__pipe *p) {
    float *params = p->sl.params;
    return pd__tied_from_owner(p, &params, 1, p->tbuf); /* tbuf holds at least one copy of each */
}

pd_status pd__pipe_fits(const pd__pipe *p, int nranks) {
    int K = pd__planned_processes(p), need = K > 0 ? K : p->nwk;
    if (nranks != need && need == p->nwk)
        return pd__err(PD_ERR_INVALID,
                       "this plan runs as %d processes, one per stage replica (%d stages%s), not %d: mpirun -np %d",
                       p->nwk, p->nworkers, p->nwk > p->nworkers ? ", some replicated" : "", nranks, p->nwk);
    if (nranks != need)
        return pd__err(PD_ERR_INVALID, "this plan runs as %d processes (its stage_to_rank puts %d stage%s on them), "
                       "not %d: mpirun -np %d", need, p->nwk, p->nwk > p->nworkers ? " replicas" : "s", nranks, need);
    return PD_OK;
}

pd_status pd__pipe_set_ranks_in(pd__pipe *p, int rank, int nranks, int color) {
    p->gcolor = color; /* GPU stages: the processes of their NCCL communicators (pd__dev_setup) */
    PD_TRY(pd__pipe_fits(p, nranks));
    int K = pd__planned_processes(p);
    if (p->hooks_on) return pd__err(PD_ERR_INVALID, "pd__pipe_set_ranks: set the ranks before the snapshot hooks");
    int *worker_of = PD_MALLOC(sizeof(int) * (size_t)p->nwk);
    bool *tied = PD_CALLOC((size_t)p->nwk, sizeof(bool));
    if (!worker_of || !tied) {
        PD_FREE(worker_of);
        PD_FREE(tied);
        return pd__err(PD_ERR_NOMEM, "out of memory");
    }
    /* the plan's stage_to_rank (its stages' consecutive ranks), when it is a
     * mapping onto 0 .. nranks-1; otherwise contiguous, stage by stage */
    bool planned = K == nranks;
    p->nlocal = 0;
    for (int i = 0; i < p->nwk; i++) {
        pd__wk *W = &p->wk[i];
        p->rank_of[i] = planned ? p->first_rank[W->w] + W->r : i;
        p->nlocal += p->rank_of[i] == rank;
        worker_of[i] = W->w;
        int np = 1;
        for (int c = 0; c < p->nchunks; c++) np = p->vs[W->ch[c].k].np > np ? p->vs[W->ch[c].k].np : np;
        if ((!W->arfirst && !(W->arfirst = PD_CALLOC((size_t)np, sizeof(int)))) ||
            (!W->gnpart && !(W->gnpart = PD_CALLOC((size_t)p->nworkers, sizeof(double))))) {
            PD_FREE(worker_of);
            PD_FREE(tied);
            return pd__err(PD_ERR_NOMEM, "out of memory");
        }
    }
    int window = 8;
    while (window < 2 * (p->nmicro + p->nvstages) + 2) window *= 2; /* above what a link holds in flight */
    pd_status st = pd__tied_setup(p, rank, tied);
    if (st == PD_OK)
        st = pd__mpi_transport_create(p->nwk, p->rank_of, worker_of, tied, p->nworkers, p->nvstages - 1, window, color, &p->stopped,
                                      &p->remote);
    PD_FREE(worker_of);
    PD_FREE(tied);
    if (st != PD_OK) {
        for (int i = 0; i < p->nwk; i++) p->rank_of[i] = 0;
        p->nlocal = 0;
        return st;
    }
    p->rank = rank;
    p->lrank = p->gpu ? pd__mpi_local_rank() : 0; /* collective (the first time), as the transport's creation */
    const char *ov = getenv("PDONNX_ALLREDUCE_OVERLAP"); /* a benchmark's switch (bench/run_mpi.sh) */
    p->ar_overlap = !ov || strcmp(ov, "0") != 0;
    return pd__pipe_load_stages(p);
}

pd_status pd__pipe_gather(pd__pipe *p) {
    if (!p->remote) return PD_OK;
    const pd_graph *g = p->g;
    int64_t nb = 0; /* BatchNorm statistics, every stage's in order */
    for (int k = 0; k < p->nvstages; k++)
        for (int j = 0; j < p->vs[k].nbufs; j++) nb += g->tensors[p->vs[k].bufs[j]].numel;
    float *v = PD_CALLOC((size_t)(p->sl.total + nb) + 1, sizeof(float));
    if (!v) return pd__err(PD_ERR_NOMEM, "out of memory");
    for (int pass = 0; pass < 2; pass++) {
        int64_t at = p->sl.total;
        for (int k = 0; k < p->nvstages; k++) {
            const pd__vstage *S = &p->vs[k];
            int owner = p->wbase[k % p->nworkers]; /* replica 0 holds the stage's weights */
            bool mine = p->rank_of[owner] == p->rank;
            for (int j = 0; j < S->np; j++) {
                int i = S->params[j];
                size_t b = sizeof(float) * (size_t)g->tensors[p->sl.param[i]].numel;
                if (pass == 0 && mine) memcpy(v + p->sl.poff[i], p->sl.params + p->sl.poff[i], b);
                if (pass == 1) memcpy(p->sl.params + p->sl.poff[i], v + p->sl.poff[i], b);
                if (pass == 1) pd__session_mark_loaded(p->s, i); /* lazy_weights: every value is here now */
            }
            for (int j = 0; j < S->nbufs; j++) {
                const pd__tensor *x = &g->tensors[S->bufs[j]];
                float *d = pd__actx_value(p->wk[owner].ch[k / p->nworkers].slot[0], S->bufs[j])->data;
                if (x->dtype == PD_FLOAT && pass == 0 && mine) memcpy(v + at, d, sizeof(float) * (size_t)x->numel);
                if (x->dtype == PD_FLOAT && pass == 1) memcpy(d, v + at, sizeof(float) * (size_t)x->numel);
                at += x->numel;
            }
        }
        if (pass == 0) {
            pd_status st = p->remote->vt->allreduce(p->remote, -1, v, p->sl.total + nb, false);
            if (st != PD_OK) {
                PD_FREE(v);
                return st;
            }
        }
    }
    PD_FREE(v);
    return PD_OK;
}
