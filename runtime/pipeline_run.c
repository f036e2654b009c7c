/* pipeline_run.c - a run: the stage threads walking their instruction
 * lists, the snapshot boundaries, and what the processes agree on at the
 * end of a run under MPI. */
#include "pipeline_impl.h"

static bool pd__mine(const pd__wk *W, const pd__instr *in);

/* Whether instruction k (a B or a W) makes this replica's last parameter
 * gradients before its ALLREDUCE, whose all-reduces may then overlap it
 * (across processes, without chunks). */
static bool pd__last_grads(const pd__wk *W, int k) {
    const pd__pipe *p = W->p;
    if (!p->ar_overlap || !p->remote || W->nrep == 1 || p->nchunks > 1 || !p->remote->vt->iallreduce) return false;
    for (int q = k + 1; q < p->sched->len[W->w]; q++) {
        const pd__instr *in = &p->sched->ins[W->w][q];
        if (in->op == PD_I_ALLREDUCE) return true;
        if (((in->op == PD_I_B && !in->split) || in->op == PD_I_W) && pd__mine(W, in)) return false;
    }
    return false;
}

/* Instruction k of thread W; *stop: the pipeline was aborted while it waited. */
static pd_status pd__instr_run(pd__wk *W, int k, bool *stop) {
    pd__pipe *p = W->p;
    const pd__instr *in = &p->sched->ins[W->w][k];
    if (in->chunk < 0 || in->chunk >= p->nchunks)
        return pd__err(PD_ERR_INTERNAL, "instruction %d names chunk %d of %d", k, (int)in->chunk, p->nchunks);
    pd__chunk *C = &W->ch[in->chunk];
    int v = C->k;
    if (W->w == p->fail_stage && in->op == p->fail_op && in->mb == p->fail_mb)
        return pd__err(PD_ERR_INTERNAL, "injected failure");
    switch (in->op) {
    case PD_I_F: return pd__do_forward(W, C, in->mb, in->version);
    case PD_I_B: return pd__do_backward(W, C, in->mb, in->version, in->split ? 1 : 0, !in->split && pd__last_grads(W, k));
    case PD_I_W: return pd__do_backward(W, C, in->mb, in->version, 2, pd__last_grads(W, k));
    case PD_I_SEND_ACT: return pd__send(W, C, v, false, in->mb, stop);
    case PD_I_RECV_ACT: return pd__recv(W, C, v - 1, false, in->mb, stop);
    case PD_I_SEND_GRAD: return pd__send(W, C, v - 1, true, in->mb, stop);
    case PD_I_RECV_GRAD: return pd__recv(W, C, v, true, in->mb, stop);
    case PD_I_ALLREDUCE: return pd__do_allreduce(W, in->mb, stop);
    case PD_I_STEP: return pd__do_step(W, in->mb, in->version, k, stop);
    default: return pd__err(PD_ERR_UNSUPPORTED, "instruction %s is not supported yet", pd__op_name(in->op));
    }
}

/* A replica runs its microbatches (pd__replica_of), and every ALLREDUCE and STEP. */
static bool pd__mine(const pd__wk *W, const pd__instr *in) {
    if (W->nrep == 1 || in->op == PD_I_ALLREDUCE || in->op == PD_I_STEP) return true;
    return pd__replica_of(W->p, W->w, in->mb) == W->r;
}

/* Instructions of minibatches before the run's resume boundary were done
 * before the checkpoint it resumes from. */
static bool pd__runs(const pd__wk *W, const pd__instr *in) {
    return in->mb / W->p->nmicro >= W->p->resume_b && pd__mine(W, in);
}

static void *pd__stage_main(void *arg) {
    pd__wk *W = arg;
    pd__pipe *p = W->p;
    /* stage 0 decides for every thread of this process; under MPI each
     * process's lowest stage decides for its threads (want must then give
     * every process the same answer) */
    bool snap = p->hooks_on && W->r == 0, decide = p->hooks_on && W - p->wk == p->decider;
    bool stop = false;
    for (int k = 0; k < p->sched->len[W->w] && !stop; k++) {
        const pd__instr *in = &p->sched->ins[W->w][k];
        if (!pd__runs(W, in)) continue;
        if (decide) pd__snap_decide(p, in->mb / p->nmicro);
        pd_status ss = PD_OK;
        for (; snap && W->next_first < p->nmb && W->kfirst[W->next_first] <= k && !stop && ss == PD_OK; W->next_first++)
            ss = pd__snap_pre(W, W->next_first, &stop);
        if (ss != PD_OK) pd__fail(p, W, in, ss);
        if (stop || ss != PD_OK) break;
        int64_t t0 = pd__ns();
        pd_status st = pd__instr_run(W, k, &stop);
        int64_t t1 = pd__ns();
        if (st == PD_OK && !stop) {
            if (W->nev < W->evcap) W->ev[W->nev++] = (pd__ev){t0 - p->t0, t1 - p->t0, in->mb, in->op, in->chunk};
            if (in->op == PD_I_F || in->op == PD_I_B || in->op == PD_I_W || in->op == PD_I_STEP)
                W->busy_ms += 1e-6 * (double)(t1 - t0);
            if (in->op == PD_I_F || in->op == PD_I_B || in->op == PD_I_W)
                pd__release(&W->ch[in->chunk], in->version, k);
        }
        if (st != PD_OK) pd__fail(p, W, in, st);
        if (st != PD_OK || stop) break;
        for (; snap && W->next_last < p->nmb && W->klast[W->next_last] <= k && !stop && ss == PD_OK; W->next_last++)
            ss = pd__snap_post(W, W->next_last, &stop);
        if (ss != PD_OK) {
            pd__fail(p, W, in, ss);
            break;
        }
        pthread_mutex_lock(&p->mu);
        stop = stop || p->abort;
        pthread_mutex_unlock(&p->mu);
    }
    return NULL;
}

/* Worker W's boundary tables for a run of n minibatches: kfirst[b], the
 * index of its first instruction of a minibatch >= b (len: none), klast[b]
 * of its last one < b (-1: none), over the instructions it runs. */
static pd_status pd__snap_bounds(pd__pipe *p, pd__wk *W, const pd__schedule *sched, int64_t n) {
    PD_FREE(W->kfirst);
    PD_FREE(W->klast);
    W->kfirst = PD_MALLOC(sizeof(int) * ((size_t)n + 1));
    W->klast = PD_MALLOC(sizeof(int) * ((size_t)n + 1));
    if (!W->kfirst || !W->klast) return pd__err(PD_ERR_NOMEM, "out of memory");
    int len = sched->len[W->w];
    for (int64_t b = 0; b <= n; b++) W->kfirst[b] = len, W->klast[b] = -1;
    for (int k = 0; k < len; k++) { /* first and last index of each minibatch, then prefix max and suffix min */
        const pd__instr *in = &sched->ins[W->w][k];
        int64_t m = in->mb / p->nmicro;
        if (!pd__runs(W, in) || m < 0 || m >= n) continue;
        if (k < W->kfirst[m]) W->kfirst[m] = k;
        if (k > W->klast[m + 1]) W->klast[m + 1] = k;
    }
    for (int64_t b = n - 1; b >= 0; b--)
        if (W->kfirst[b + 1] < W->kfirst[b]) W->kfirst[b] = W->kfirst[b + 1];
    for (int64_t b = 1; b <= n; b++)
        if (W->klast[b - 1] > W->klast[b]) W->klast[b] = W->klast[b - 1];
    W->next_first = W->next_last = p->resume_b + 1;
    W->copied_boundary = 0;
    W->snap_ms = 0;
    return PD_OK;
}

/* Across processes, after a run: every send completed; each step's result
 * summed from the processes of the last stage (lr from its replica 0), its
 * loss from its microbatches' (each made by one process, 0 elsewhere: an
 * exact sum), added in their order as in one process. */
static pd_status pd__run_remote_end(pd__pipe *p, int64_t n, pd_step_result *res) {
    PD_TRY(p->remote->vt->flush(p->remote));
    if (!res) return PD_OK;
    enum { F = 4 }; /* lr, grad_norm, correct, count: each set or summed by the last stage's processes */
    int64_t per = F + p->nmicro;
    double *v = PD_MALLOC(sizeof(double) * (size_t)(per * n));
    if (!v) return pd__err(PD_ERR_NOMEM, "out of memory");
    for (int64_t k = 0; k < n; k++) {
        double *e = v + per * k;
        e[0] = res[k].lr, e[1] = res[k].grad_norm, e[2] = (double)res[k].correct, e[3] = (double)res[k].count;
        memcpy(e + F, p->mbloss + k * p->nmicro, sizeof(double) * (size_t)p->nmicro);
    }
    pd_status st = p->remote->vt->allreduce(p->remote, -1, v, per * n, true);
    for (int64_t k = 0; st == PD_OK && k < n; k++) {
        const double *e = v + per * k;
        res[k].lr = e[0], res[k].grad_norm = e[1], res[k].correct = (int64_t)e[2], res[k].count = (int64_t)e[3];
        res[k].loss = 0;
        for (int i = 0; i < p->nmicro; i++) res[k].loss += e[F + i];
    }
    PD_FREE(v);
    return st;
}


/* Before a run, per thread and chunk: the last instruction naming each
 * weight version (when a stash may go), nothing in flight, counters and a
 * replica's own gradients zeroed, the snapshot boundaries it takes. */
static pd_status pd__run_prepare(pd__pipe *p, const pd__schedule *sched, int64_t minibatches) {
    pd_status st = PD_OK;
    for (int i = 0; i < p->nwk && st == PD_OK; i++) {
        pd__wk *W = &p->wk[i];
        int len = sched->len[W->w], nv = 1;
        for (int k = 0; k < len; k++) nv += sched->ins[W->w][k].op == PD_I_STEP;
        PD_FREE(W->ev);
        W->ev = PD_MALLOC(sizeof(pd__ev) * ((size_t)len + 1));
        W->evcap = W->ev ? len : 0;
        W->nev = 0;
        W->busy_ms = 0;
        W->inflight = W->peak_act = 0;
        W->recomputes = 0;
        pd__wk_zero_grads(p, W); /* its stages' ranges: the rest is never touched */
        W->ar_started = false;
        if (p->hooks_on && W->r == 0 && st == PD_OK) st = pd__snap_bounds(p, W, sched, minibatches);
        for (int c = 0; c < p->nchunks && st == PD_OK; c++) {
            pd__chunk *C = &W->ch[c];
            PD_FREE(C->need_until);
            C->need_until = PD_MALLOC(sizeof(int) * (size_t)nv);
            if (!C->need_until) {
                st = pd__err(PD_ERR_NOMEM, "out of memory");
                break;
            }
            for (int v = 0; v < nv; v++) C->need_until[v] = -1;
            for (int k = 0; k < len; k++) {
                const pd__instr *in = &sched->ins[W->w][k];
                bool names = in->op == PD_I_F || in->op == PD_I_B || in->op == PD_I_W;
                if (!names || in->chunk != c || !pd__mine(W, in)) continue; /* a replica: the versions it uses */
                if (in->version < 0 || in->version >= nv) {
                    st = pd__err(PD_ERR_INTERNAL, "stage %d, instruction %d names weight version %d", W->w, k,
                                 (int)in->version);
                    break;
                }
                C->need_until[in->version] = k;
            }
            for (int k = 0; k < p->nslots; k++) C->slot_ver[k] = -1;
            C->peak_versions = 1;
            C->rc_owner = -1;
            if (p->resume_b > 0) continue; /* the versions pd__pipe_resume restored */
            for (int k = 0; k < C->nstash; k++) C->stash[k].version = -1;
            C->live = 0;
        }
    }
    return st;
}

/* The run's rows: every input and the labels hold the steps' (or the
 * ring's) rows in the model's row shape and dtype. */
static pd_status pd__run_check_data(const pd__pipe *p, int64_t minibatches, const pd_tensor *inputs,
                                    const pd_tensor *labels) {
    const pd_graph *g = p->g;
    int64_t need = (p->ring ? p->ring : minibatches) * p->nmicro * p->rows;
    for (int i = 0; i <= g->ninputs; i++) {
        const pd_tensor *v = i < g->ninputs ? &inputs[i] : labels;
        if (i < g->ninputs && g->inputs[i] == p->labels_input) continue;
        int64_t row = i < g->ninputs ? g->tensors[g->inputs[i]].numel / (p->rows ? p->rows : 1) : -1;
        bool ok = v->data && v->ndim >= 1 && v->shape[0] >= need;
        if (ok && row >= 0) ok = v->dtype == g->tensors[g->inputs[i]].dtype && pd_tensor_numel(v) / v->shape[0] == row;
        if (!ok)
            return pd__err(PD_ERR_SHAPE, "%s: pipeline: %s needs %lld rows of the model's row shape and dtype",
                           g->path, i < g->ninputs ? g->tensors[g->inputs[i]].name : "the labels", (long long)need);
    }
    return PD_OK;
}

static pd_status pd__run_schedule(const pd__pipe *p, int64_t minibatches, pd__schedule **out) {
    pd__schedule *sched = NULL;
    PD_TRY(pd__schedule_build(p->kind, p->nworkers, p->nchunks, p->nmicro, (int)minibatches, p->rep, &sched));
    pd_status st = p->vertical_sync ? pd__schedule_vertical_sync(sched) : PD_OK;
    if (st != PD_OK) {
        pd__schedule_free(sched);
        return st;
    }
    *out = sched;
    return PD_OK;
}

/* The per-run state: the threads' plans, GPU stages set up and their
 * weights pushed, the step losses' tables, the snapshot decisions. */
static pd_status pd__run_state(pd__pipe *p, const pd__schedule *sched, int64_t minibatches) {
    PD_TRY(pd__run_prepare(p, sched, minibatches));
    if (p->resume_b >= minibatches)
        return pd__err(PD_ERR_INVALID, "pipeline: resuming at step %lld of a run of %lld", (long long)p->resume_b,
                       (long long)minibatches);
    if (p->gpu && !p->gready) PD_TRY(pd__dev_setup(p));
    if (p->gpush) PD_TRY(pd__dev_push(p));
    PD_FREE(p->mbloss);
    PD_FREE(p->mbn);
    if (!(p->mbloss = PD_CALLOC((size_t)(minibatches * p->nmicro) + 1, sizeof(double))) ||
        !(p->mbn = PD_CALLOC((size_t)minibatches + 1, sizeof(int))))
        return pd__err(PD_ERR_NOMEM, "out of memory");
    if (p->hooks_on) {
        PD_FREE(p->want);
        if (!(p->want = PD_CALLOC((size_t)minibatches + 1, 1))) return pd__err(PD_ERR_NOMEM, "out of memory");
        p->decided = p->resume_b;
        p->last_taken = INT64_MIN / 2;
    }
    p->nmb = minibatches;
    for (int k = 0; k < p->ring; k++) p->ring_at[k] = -1;
    for (int w = 0; w < p->nworkers; w++) p->bar[w] = (pd__bar){0, 0};
    for (int i = 0; i < 4; i++) p->gn[i].t = -1; /* update indices start again each run */
    p->allbar = (pd__bar){0, 0};
    return PD_OK;
}

/* One thread per worker this process runs; joined before returning. */
static pd_status pd__run_threads(pd__pipe *p) {
    pthread_t *th = PD_CALLOC((size_t)p->nwk, sizeof *th);
    if (!th) return pd__err(PD_ERR_NOMEM, "out of memory");
    pd_status st = PD_OK;
    int started = 0;
    for (int i = 0; st == PD_OK && i < p->nwk; i++) {
        if (p->rank_of[i] != p->rank) continue; /* another process runs it */
        if (pthread_create(&th[started], NULL, pd__stage_main, &p->wk[i]) != 0) {
            pthread_mutex_lock(&p->mu);
            p->abort = true;
            pthread_cond_broadcast(&p->cv);
            pthread_mutex_unlock(&p->mu);
            st = pd__err(PD_ERR_NOMEM, "pipeline: cannot start the thread of stage %d", p->wk[i].w);
        } else {
            started++;
        }
    }
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    PD_FREE(th);
    return st;
}

/* After the threads: GPU stages drained, messages released, the processes'
 * results summed; a failed run leaves no half-summed gradients. */
static pd_status pd__run_finish(pd__pipe *p, int64_t minibatches, pd_step_result *results, pd_status st) {
    if (p->gready) { /* GPU stages: their streams drained, the weights back in the host slabs */
        pd_status ds = pd__dev_end(p, st == PD_OK && p->err == PD_OK);
        if (st == PD_OK && p->err == PD_OK) st = ds;
    }
    for (int i = 0; i < p->nwk; i++) /* messages a failed run left in the contexts */
        for (int c = 0; c < p->nchunks; c++)
            for (int k = 0; k < 2 * p->nslots; k++) pd__unhold(p, &p->wk[i].ch[c], k / 2, k % 2);
    if (st == PD_OK && p->err == PD_OK && p->remote) st = pd__run_remote_end(p, minibatches, results);
    p->last_ms = 1e-6 * (double)(pd__ns() - p->t0);
    for (int l = 0; l + 1 < p->nvstages; l++) {
        pd__q_drain(&p->link[l].fwd);
        pd__q_drain(&p->link[l].bwd);
    }
    if (st == PD_OK && p->err != PD_OK) st = pd__err(p->err, "%s: %s", p->g->path, p->errmsg);
    if (st != PD_OK) {
        memset(p->sl.grads, 0, sizeof(float) * (size_t)p->sl.total);
        for (int i = 0; i < p->nwk; i++)
            for (int c = 0; c < p->nchunks; c++)
                if (p->wk[i].ch[c].sg) memset(p->wk[i].ch[c].sg, 0, sizeof(float) * (size_t)p->vs[p->wk[i].ch[c].k].spacked);
        for (int i = 0; i < p->nwk; i++)
            pd__wk_zero_grads(p, &p->wk[i]);
    }
    return st;
}

pd_status pd__pipe_run(pd__pipe *p, int64_t minibatches, const pd_tensor *inputs, const pd_tensor *labels,
                       pd_step_result *results) {
    if (!p || !labels || (!inputs && p->g->ninputs > 0))
        return pd__err(PD_ERR_INVALID, "pd__pipe_run: NULL argument");
    if (minibatches < 1 || minibatches > INT32_MAX / p->nmicro)
        return pd__err(PD_ERR_INVALID, "pd__pipe_run: %lld minibatches", (long long)minibatches);
    PD_TRY(pd__pipe_load_stages(p));
    PD_TRY(pd__run_check_data(p, minibatches, inputs, labels));
    pd__schedule *sched = NULL;
    PD_TRY(pd__run_schedule(p, minibatches, &sched));
    pd_status st = pd__run_state(p, sched, minibatches);
    if (st != PD_OK) {
        pd__schedule_free(sched);
        p->resume_b = 0;
        return st;
    }
    if (results) memset(results, 0, sizeof *results * (size_t)minibatches);
    p->sched = sched;
    p->inputs = inputs;
    p->labels = labels;
    p->res = results;
    p->abort = false;
    __atomic_store_n(&p->stopped, 0, __ATOMIC_RELEASE);
    p->err = PD_OK;
    p->t0 = pd__ns();
    pthread_mutex_lock(&p->mu);
    p->running = true;
    pthread_mutex_unlock(&p->mu);
    pd_status ts = pd__run_threads(p);
    pthread_mutex_lock(&p->mu); /* waits for a writer's look at the transport (pd__pipe_watch_writer) */
    p->running = false;
    pthread_mutex_unlock(&p->mu);
    st = pd__run_finish(p, minibatches, results, ts);
    if (st == PD_OK) p->steps += minibatches;
    p->resume_b = 0;
    pd__schedule_free(sched);
    p->sched = NULL;
    return st;
}
