/* pipeline_snap.c - SNAPSHOT: a stage's state captured at a minibatch
 * boundary (CheckFreq's two phases: the pre region before the next
 * minibatch's first instruction, the rest after), and bitwise resume. */
#include "pipeline_impl.h"

/* ---- snapshots ---------------------------------------------------------------- */

/* Worker w's records: its chunks' buffers (pre: the region taken before its
 * first instruction of the next minibatch) or its state (the rest). w_ NULL:
 * only sizes, with the most stashes a chunk can hold. */
static void pd__snap_write(const pd__pipe *p, const pd__wk *W, bool pre, pd__recw *rw) {
    const pd_graph *g = p->g;
    const pd__slabs *sl = &p->sl;
    if (pre) {
        for (int c = 0; c < p->nchunks; c++) {
            const pd__vstage *S = &p->vs[W->ch[c].k];
            for (int j = 0; j < S->nbufs; j++) {
                int t = S->bufs[j];
                pd__rec_put(rw, PD_REC_BUFFER, 0, g->tensors[t].name, pd__actx_value(W->ch[c].slot[0], t)->data,
                            pd__tbytes(g, t));
            }
        }
        return;
    }
    int64_t u = W->updates;
    pd__rec_put(rw, PD_REC_META, 0, "updates", &u, sizeof u);
    for (int c = 0; c < p->nchunks; c++) {
        const pd__chunk *C = &W->ch[c];
        const pd__vstage *S = &p->vs[C->k];
        char nm[32];
        snprintf(nm, sizeof nm, "live/%d", C->k);
        pd__rec_put(rw, PD_REC_META, C->live, nm, NULL, 0);
        for (int j = 0; j < S->np; j++) {
            int i = S->params[j], t = sl->param[i];
            size_t b = pd__tbytes(g, t);
            pd__rec_put(rw, PD_REC_WEIGHT, C->live, g->tensors[t].name, sl->params + sl->poff[i], b);
            if (sl->state0) pd__rec_put(rw, PD_REC_STATE0, 0, g->tensors[t].name, sl->state0 + sl->poff[i], b);
            if (sl->state1) pd__rec_put(rw, PD_REC_STATE1, 0, g->tensors[t].name, sl->state1 + sl->poff[i], b);
        }
        for (int h = 0; h < C->nstash; h++) {
            if (rw->buf && C->stash[h].version < 0) continue; /* sizing: every stash slot */
            for (int j = 0; j < S->np; j++) {
                int t = sl->param[S->params[j]];
                pd__rec_put(rw, PD_REC_STASH, C->stash[h].version, g->tensors[t].name, C->stash[h].w + S->pk[j],
                            pd__tbytes(g, t));
            }
        }
    }
}

pd_status pd__pipe_set_snap_hooks(pd__pipe *p, const pd__snap_hooks *h) {
    if (!p || !h || !h->want || !h->ready) return pd__err(PD_ERR_INVALID, "pd__pipe_set_snap_hooks: NULL argument");
    for (int w = 0; p->kind == PD_SCHED_PIPEDREAM && w < p->nworkers; w++)
        if (p->rep[w] > 1) /* a snapshot holds one set of stashes per stage, which its replicas share */
            return pd__err(PD_ERR_UNSUPPORTED,
                           "checkpoints of a pipedream run with a replicated stage (stage %d, %d replicas) are not "
                           "supported yet: each replica stashes the versions of its own microbatches",
                           w, p->rep[w]);
    /* one thread decides the boundaries for this process's threads: stage 0's
     * in one process; under MPI its lowest stage's (the others of the process
     * pass each boundary causally after it, as in one process), a replica's
     * where that is the lowest there (it may take no part, but want may
     * agree with the other processes on each boundary) */
    p->decider = -1;
    for (int i = 0; i < p->nwk && p->decider < 0; i++)
        if (p->rank_of[i] == p->rank) p->decider = i;
    if (!p->part) {
        p->part = PD_CALLOC((size_t)p->nworkers, sizeof(char *));
        p->part_cap = PD_CALLOC((size_t)p->nworkers, sizeof(size_t));
        p->part_pre = PD_CALLOC((size_t)p->nworkers, sizeof(size_t));
        p->part_len = PD_CALLOC((size_t)p->nworkers, sizeof(size_t));
        if (!p->part || !p->part_cap || !p->part_pre || !p->part_len) return pd__err(PD_ERR_NOMEM, "out of memory");
        for (int i = 0; i < p->nwk; i++) {
            const pd__wk *W = &p->wk[i];
            if (W->r != 0 || p->rank_of[i] != p->rank) continue; /* replica 0 of each stage here writes its part */
            p->snap_need++;
            pd__recw pre = {NULL, 0, 0}, post = {NULL, 0, 0};
            pd__snap_write(p, W, true, &pre);
            pd__snap_write(p, W, false, &post);
            p->part_pre[W->w] = pre.n;
            p->part_cap[W->w] = pre.n + post.n;
            if (!(p->part[W->w] = PD_MALLOC(pre.n + post.n + 1)))
                return pd__err(PD_ERR_NOMEM, "out of memory for the snapshot of stage %d (%zu bytes)", W->w,
                               pre.n + post.n);
        }
    }
    p->hooks = *h;
    p->hooks_on = true;
    return PD_OK;
}

int64_t pd__pipe_snap_gap(const pd__pipe *p) { return pd__sched_async(p->kind) ? p->nworkers + 1 : 1; }

void pd__pipe_snap_part(const pd__pipe *p, int w, const void **data, size_t *len) {
    *data = p->part[w]; /* NULL: another process takes it */
    *len = p->part[w] ? p->part_len[w] : 0;
}

void pd__pipe_snap_release(pd__pipe *p) {
    pthread_mutex_lock(&p->mu);
    p->snap_b = 0;
    p->snap_have = 0;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

pd_status pd__pipe_snap_agree(pd__pipe *p, double *v, int64_t n) {
    return p->remote ? p->remote->vt->allreduce(p->remote, PD__CKPT, v, n, true) : PD_OK;
}

/* pd__pipe_watch_writer's hooks. stop: the run failed here, or (while the
 * stage threads run, the only time no other thread of this process may be
 * inside MPI) a notice of another process's failure came, which stops the
 * run here too. */
static bool pd__writer_stop(void *ctx) {
    pd__pipe *p = ctx;
    pthread_mutex_lock(&p->mu);
    bool stop = p->abort;
    pd_status st = stop || !p->running ? PD_OK : pd__mpi_transport_check(p->remote);
    char msg[sizeof p->errmsg];
    if (st != PD_OK) snprintf(msg, sizeof msg, "%s", pd_last_error());
    pthread_mutex_unlock(&p->mu);
    if (st != PD_OK) pd__pipe_stop(p, st, msg);
    return stop || st != PD_OK;
}

static void pd__writer_failed(void *ctx, const char *msg) { pd__pipe_stop(ctx, PD_ERR_IO, msg); }

void pd__pipe_watch_writer(pd__pipe *p, struct pd__ckpt_writer *w) {
    if (p->remote) pd__ckpt_writer_watch(w, pd__writer_stop, pd__writer_failed, p);
}

bool pd__pipe_aborted(pd__pipe *p) {
    pthread_mutex_lock(&p->mu);
    bool a = p->abort;
    pthread_mutex_unlock(&p->mu);
    return a;
}

void pd__pipe_snap_stats(pd__pipe *p, int64_t *taken, double *pause_ms) {
    pthread_mutex_lock(&p->mu);
    if (taken) *taken = p->snaps_taken;
    if (pause_ms) *pause_ms = p->snap_pause_ms;
    pthread_mutex_unlock(&p->mu);
}

/* Worker 0 decides, before its first instruction of minibatch m, the
 * boundaries up to m+1: every worker passes boundary b only after that. */
void pd__snap_decide(pd__pipe *p, int64_t m) {
    while (p->decided < m + 1 && p->decided + 1 < p->nmb) {
        int64_t b = ++p->decided;
        bool w = b - p->last_taken >= pd__pipe_snap_gap(p) && p->hooks.want(p->hooks.ctx, b);
        if (!w) continue;
        p->last_taken = b;
        pthread_mutex_lock(&p->mu);
        p->want[b] = 1;
        pthread_mutex_unlock(&p->mu);
    }
}

/* Waits until the parts are free (the last snapshot persisted) or already
 * hold boundary b, and claims them; false when b is not wanted or the
 * pipeline was aborted. */
static bool pd__snap_claim(pd__pipe *p, int64_t b, bool *stop) {
    pthread_mutex_lock(&p->mu);
    bool want = p->want[b];
    while (want && p->snap_b != 0 && p->snap_b != b && !p->abort) pthread_cond_wait(&p->cv, &p->mu);
    if (p->abort) *stop = true;
    bool ok = want && !p->abort;
    if (ok) p->snap_b = b;
    pthread_mutex_unlock(&p->mu);
    return ok;
}

/* Before the first instruction of a minibatch >= b: the buffers (what a
 * forward writes) as they stand after every minibatch < b. */
pd_status pd__snap_pre(pd__wk *W, int64_t b, bool *stop) {
    pd__pipe *p = W->p;
    int64_t t0 = pd__ns();
    if (W->copied_boundary == b || !pd__snap_claim(p, b, stop)) return PD_OK;
    if (W->dev) PD_TRY(pd__dev_snap(W, true)); /* a GPU stage's buffers into the host contexts first */
    pd__recw rw = {p->part[W->w], 0, p->part_pre[W->w]};
    pd__snap_write(p, W, true, &rw);
    W->copied_boundary = b;
    W->snap_ms += 1e-6 * (double)(pd__ns() - t0);
    return PD_OK;
}

/* After the last instruction of a minibatch < b: the weights (live and
 * stashed), optimizer state and counters; the last worker to deposit hands
 * the snapshot over. */
pd_status pd__snap_post(pd__wk *W, int64_t b, bool *stop) {
    pd__pipe *p = W->p;
    int64_t t0 = pd__ns();
    if (!pd__snap_claim(p, b, stop)) return PD_OK;
    if (W->dev) PD_TRY(pd__dev_snap(W, false)); /* a GPU stage's weights, state, stashes and buffers to the host */
    if (W->copied_boundary != b) { /* nothing ran since minibatch b-1: the buffers are as they stand */
        pd__recw pre = {p->part[W->w], 0, p->part_pre[W->w]};
        pd__snap_write(p, W, true, &pre);
        W->copied_boundary = b;
    }
    pd__recw rw = {p->part[W->w] + p->part_pre[W->w], 0, p->part_cap[W->w] - p->part_pre[W->w]};
    pd__snap_write(p, W, false, &rw);
    p->part_len[W->w] = p->part_pre[W->w] + rw.n;
    W->snap_ms += 1e-6 * (double)(pd__ns() - t0);
    pthread_mutex_lock(&p->mu);
    if (W->snap_ms > p->snap_cur_ms) p->snap_cur_ms = W->snap_ms;
    W->snap_ms = 0;
    bool ready = ++p->snap_have == p->snap_need;
    if (ready) {
        p->snap_pause_ms += p->snap_cur_ms;
        p->snap_cur_ms = 0;
        p->snaps_taken++;
    }
    pthread_mutex_unlock(&p->mu);
    if (ready) p->hooks.ready(p->hooks.ctx, b);
    return PD_OK;
}

pd_status pd__pipe_snap_capture(pd__pipe *p) {
    if (!p->part) return pd__err(PD_ERR_INVALID, "pd__pipe_snap_capture: no snapshot hooks set");
    pthread_mutex_lock(&p->mu);
    while (p->snap_b != 0) pthread_cond_wait(&p->cv, &p->mu);
    p->snap_b = INT64_MAX;
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->nwk; i++) {
        pd__wk *W = &p->wk[i];
        if (W->r != 0 || !p->part[W->w]) continue;
        if (W->dev) { /* a GPU stage's stashes (its weights came back at the end of the run) */
            pd_status st = pd__dev_snap(W, false);
            if (st != PD_OK) {
                pd__pipe_snap_release(p);
                return st;
            }
        }
        pd__recw pre = {p->part[W->w], 0, p->part_pre[W->w]};
        pd__snap_write(p, W, true, &pre);
        pd__recw rw = {p->part[W->w] + p->part_pre[W->w], 0, p->part_cap[W->w] - p->part_pre[W->w]};
        pd__snap_write(p, W, false, &rw);
        p->part_len[W->w] = p->part_pre[W->w] + rw.n;
    }
    return PD_OK;
}

/* Where record r goes on worker W: chunk *c and parameter *j (-1: none). */
static void pd__snap_find(const pd__pipe *p, const pd__wk *W, const pd__rec *r, int *c, int *j) {
    for (*c = 0; *c < p->nchunks; (*c)++) {
        const pd__vstage *S = &p->vs[W->ch[*c].k];
        if (r->kind == PD_REC_BUFFER) {
            for (*j = 0; *j < S->nbufs; (*j)++)
                if (pd__rec_is(r, p->g->tensors[S->bufs[*j]].name)) return;
        } else {
            for (*j = 0; *j < S->np; (*j)++)
                if (pd__rec_is(r, p->g->tensors[p->sl.param[S->params[*j]]].name)) return;
        }
    }
    *c = *j = -1;
}

/* After a resume, a tied parameter's copies in processes that hold a reader
 * but not its owner are the model's, not the checkpoint's (a part holds its
 * stage's own parameters): the owner's process gives its weights and
 * optimizer state to the other holders (an all-reduce of the PD__TIED group,
 * -0.0 from the others: exact), so every copy is the owner's again, as
 * pd__sum_tied_remote keeps them. Collective: every process resumes. */
static pd_status pd__tied_restore(pd__pipe *p) {
    const pd__slabs *sl = &p->sl;
    float *slab[3] = {sl->params, sl->state0, sl->state1};
    int64_t n = 0;
    for (int t = 0; t < p->nties; t++) n += 3 * p->g->tensors[sl->param[p->tie[t].i]].numel;
    if (!p->remote || n == 0) return PD_OK;
    float *v = PD_MALLOC(sizeof(float) * (size_t)n);
    if (!v) return pd__err(PD_ERR_NOMEM, "out of memory for the tied parameters (%lld floats)", (long long)n);
    pd_status st = pd__tied_from_owner(p, slab, 3, v);
    PD_FREE(v);
    return st;
}

static pd_status pd__resume_parts(pd__pipe *p, int64_t b, int nparts, const void *const *parts, const size_t *lens) {
    if (b < 0 || (nparts > 0 && (!parts || !lens))) return pd__err(PD_ERR_INVALID, "pd__pipe_resume: bad argument");
    if (nparts != p->nworkers)
        return pd__err(PD_ERR_INVALID, "the checkpoint has %d stage%s, this pipeline %d", nparts, nparts == 1 ? "" : "s",
                       p->nworkers);
    const pd__slabs *sl = &p->sl;
    for (int i = 0; i < p->nwk; i++) {
        pd__wk *W = &p->wk[i];
        bool here = false; /* a replicated stage's processes each restore their copy from replica 0's part */
        for (int q = 0; W->r == 0 && q < W->nrep; q++) here = here || p->rank_of[i + q] == p->rank;
        if (!here) continue; /* its process restores another stage */
        char what[48];
        snprintf(what, sizeof what, "stage %d's part", W->w);
        int64_t need = 1 + (sl->state0 != NULL) + (sl->state1 != NULL), got = 0, want = 0;
        bool updates = false;
        for (int c = 0; c < p->nchunks; c++) {
            pd__chunk *C = &W->ch[c];
            want += need * p->vs[C->k].np + p->vs[C->k].nbufs + 1;
            for (int h = 0; h < C->nstash; h++) C->stash[h].version = -1;
            C->live = -1;
        }
        size_t off = 0;
        for (;;) {
            pd__rec r;
            bool end;
            PD_TRY(pd__rec_next(parts[W->w], lens[W->w], &off, &r, &end, what));
            if (end) break;
            if (r.kind == PD_REC_META) {
                if (pd__rec_is(&r, "updates") && r.bytes == 8) {
                    int64_t u;
                    memcpy(&u, r.data, 8);
                    for (int q = 0; q < W->nrep; q++) W[q].updates = u;
                    updates = true;
                    continue;
                }
                int k;
                char nm[32];
                snprintf(nm, sizeof nm, "%.*s", (int)(r.name_len < 31 ? r.name_len : 31), r.name);
                for (int c = 0; c < p->nchunks; c++)
                    if (sscanf(nm, "live/%d", &k) == 1 && k == W->ch[c].k) {
                        for (int q = 0; q < W->nrep; q++) W[q].ch[c].live = r.version;
                        got++;
                    }
                continue;
            }
            int c, j;
            pd__snap_find(p, W, &r, &c, &j);
            if (c < 0)
                return pd__err(PD_ERR_INVALID, "%s holds '%.*s', which that stage does not own here (another plan?)",
                               what, (int)r.name_len, r.name);
            pd__chunk *C = &W->ch[c];
            const pd__vstage *S = &p->vs[C->k];
            int t = r.kind == PD_REC_BUFFER ? S->bufs[j] : sl->param[S->params[j]];
            if (r.bytes != pd__tbytes(p->g, t))
                return pd__err(PD_ERR_INVALID, "%s: '%s' has %llu bytes, the model %zu", what, p->g->tensors[t].name,
                               (unsigned long long)r.bytes, pd__tbytes(p->g, t));
            float *dst = NULL;
            if (r.kind == PD_REC_BUFFER) dst = pd__actx_value(C->slot[0], t)->data;
            else if (r.kind == PD_REC_WEIGHT) dst = sl->params + sl->poff[S->params[j]];
            else if (r.kind == PD_REC_STATE0 && sl->state0) dst = sl->state0 + sl->poff[S->params[j]];
            else if (r.kind == PD_REC_STATE1 && sl->state1) dst = sl->state1 + sl->poff[S->params[j]];
            else if (r.kind == PD_REC_STASH) {
                pd__stash *h = NULL;
                for (int q = 0; q < C->nstash && !h; q++)
                    if (C->stash[q].version == r.version) h = &C->stash[q];
                for (int q = 0; q < C->nstash && !h; q++)
                    if (C->stash[q].version < 0) (h = &C->stash[q])->version = r.version;
                if (!h) return pd__err(PD_ERR_INVALID, "%s holds more weight versions than the schedule keeps", what);
                dst = h->w + S->pk[j];
            }
            if (!dst)
                return pd__err(PD_ERR_INVALID, "%s holds optimizer state for '%s' that this optimizer does not keep",
                               what, p->g->tensors[t].name);
            memcpy(dst, r.data, (size_t)r.bytes);
            got += r.kind != PD_REC_STASH;
        }
        for (int c = 0; c < p->nchunks; c++) /* the replicas hold the same versions and statistics */
            for (int q = 1; q < W->nrep; q++) {
                for (int h = 0; h < W->ch[c].nstash; h++) {
                    W[q].ch[c].stash[h].version = W->ch[c].stash[h].version;
                    memcpy(W[q].ch[c].stash[h].w, W->ch[c].stash[h].w, sizeof(float) * (size_t)p->vs[W->ch[c].k].packed);
                }
                const pd__vstage *S = &p->vs[W->ch[c].k];
                for (int j = 0; j < S->nbufs; j++)
                    memcpy(pd__actx_value(W[q].ch[c].slot[0], S->bufs[j])->data,
                           pd__actx_value(W->ch[c].slot[0], S->bufs[j])->data, pd__tbytes(p->g, S->bufs[j]));
            }
        if (!updates || got != want)
            return pd__err(PD_ERR_INVALID, "%s is incomplete: %lld of its %lld weights, states and buffers%s", what,
                           (long long)got, (long long)want, updates ? "" : ", no update count");
    }
    memset(sl->grads, 0, sizeof(float) * (size_t)sl->total);
    p->resume_b = b;
    p->gpush = p->gpu; /* GPU stages take the restored state at the next run (pd__dev_push) */
    return PD_OK;
}

pd_status pd__pipe_resume(pd__pipe *p, int64_t b, int nparts, const void *const *parts, const size_t *lens) {
    if (!p) return pd__err(PD_ERR_INVALID, "pd__pipe_resume: bad argument");
    pd_status st = pd__pipe_load_stages(p);
    if (st == PD_OK) st = pd__resume_parts(p, b, nparts, parts, lens);
    /* every process takes part in the tied parameters' exchange, one that
     * failed too (its copies do not matter: it reports its error) */
    char why[512];
    snprintf(why, sizeof why, "%s", st != PD_OK ? pd_last_error() : "");
    pd_status tied = pd__tied_restore(p);
    if (st != PD_OK) return pd__err(st, "%s", why);
    return tied;
}
