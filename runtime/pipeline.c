/* pipeline.c - a plan trained as a pipeline in one process: one thread per
 * stage walks its instruction list (core/schedule.c); activations go forward
 * and gradients backward through bounded queues between neighbouring stages.
 *
 * The machinery is the session's (runtime/session.c): one pd_session over the
 * whole graph chooses the trained parameters and owns the parameter, gradient
 * and optimizer-state slabs; each stage updates only its own parameters'
 * ranges of them. Every microbatch in flight on a stage has an activation
 * context (session.h) of its own, a slot chosen by mb mod slots.
 *
 * Weight versions (docs/SCHEDULES.md): every F and B names the version it
 * uses. The live weights are the session's slab; when a STEP would overwrite
 * a version that a later instruction of the stage still names, the stage
 * first copies it into a stash (its parameters packed) and re-points the
 * microbatches in flight on it. A stash is freed after the last instruction
 * naming its version, so a stage holds exactly the versions its list needs:
 * PipeDream's weight stashing, 2BW's double buffer, and one version for the
 * flush schedules. A B whose version differs from its F's is an error.
 *
 * Link s (stage s -> s+1) carries the tensors made at or before stage s that
 * a later stage reads (a skip connection passes through the stages between),
 * and, backward, the gradients made after s and used at or before it. A
 * message is one packed copy of them; within the process the receiver does
 * not unpack it: its views of those tensors point into the buffer, which
 * goes back to the link's pool when the microbatch's B (W) and SEND_GRAD
 * are done (across processes the transport's buffer is copied out).
 * Bi-Partition (a node's backward on another stage than its forward; only
 * nodes without parameters): a backward's inputs and outputs count as read
 * by its stage, so a later backward's activations travel forward with the
 * activations, and an earlier
 * one's travel back with the gradients (made after s, read by a backward at
 * or before s).
 * Links are between virtual stages (interleaved: k on worker k % P to k+1);
 * a receive takes the message of its microbatch (a replicated stage's
 * replicas share their links).
 *
 * Threads: one per replica of each worker (pd__wk), each with a chunk state
 * (pd__chunk) per virtual stage of its worker. Every thread records its
 * instructions' start and end (a preallocated array, one writer) for the
 * statistics and the trace.
 *
 * The types are in pipeline_impl.h; a GPU stage's side of each instruction
 * (and of snapshots, resume and tied weights) is in pipeline_dev.c.
 */
#include "pipeline_impl.h"


static int64_t pd__ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

pd_status pd__pipe_set_vertical_sync(pd__pipe *p, bool on) {
    if (on && p->kind != PD_SCHED_PIPEDREAM)
        return pd__err(PD_ERR_INVALID, "opt->vertical_sync goes with the pipedream schedule, not %s", pd__sched_kind_name(p->kind));
    for (int w = 0; on && w < p->nworkers; w++) /* a version number counts updates, which a replicated stage makes per round */
        if (p->rep[w] > 1)
            return pd__err(PD_ERR_UNSUPPORTED,
                           "opt->vertical_sync: stage %d is replicated (%d replicas), so it updates once per round of %d "
                           "microbatches and its versions are not stage 0's; not supported",
                           w, p->rep[w], p->rep[w]);
    p->vertical_sync = on;
    return PD_OK;
}

int pd__pipe_stages(const pd__pipe *p) { return p ? p->nworkers : 0; }
int pd__pipe_labels_input(const pd__pipe *p) { return p ? p->labels_input : -1; }
void pd__pipe_inject_failure(pd__pipe *p, int stage, int op, int mb) {
    p->fail_stage = stage;
    p->fail_op = op;
    p->fail_mb = mb;
}

void pd__pipe_stats_get(const pd__pipe *p, int s, pd__pipe_stats *out) {
    memset(out, 0, sizeof *out);
    if (!p || s < 0 || s >= p->nworkers) return;
    for (int i = 0; i < p->nwk; i++) {
        const pd__wk *W = &p->wk[i];
        if (W->w != s) continue;
        if (W->busy_ms > out->busy_ms) out->busy_ms = W->busy_ms;
        if (W->peak_act > out->peak_act_mbs) out->peak_act_mbs = W->peak_act;
        if (W->recomputes > out->recomputes) out->recomputes = W->recomputes;
        for (int c = 0; c < p->nchunks; c++)
            if (W->ch[c].peak_versions > out->peak_versions) out->peak_versions = W->ch[c].peak_versions;
    }
    double rest = 0;
    for (int c = 0; c < p->nchunks; c++) {
        const pd__vstage *S = &p->vs[c * p->nworkers + s];
        out->act_bytes_per_mb += S->act_bytes;
        out->keep_bytes_per_mb += S->keep_bytes;
        rest += S->act_bytes - S->keep_bytes;
    }
    if (!p->recompute) out->keep_bytes_per_mb = out->act_bytes_per_mb, rest = 0;
    out->peak_act_bytes = out->peak_act_mbs * out->keep_bytes_per_mb + (out->peak_act_mbs > 0 ? rest : 0);
}

int pd__pipe_peak_versions(const pd__pipe *p, int s) {
    pd__pipe_stats st;
    pd__pipe_stats_get(p, s, &st);
    return st.peak_versions;
}

double pd__pipe_last_run_ms(const pd__pipe *p) { return p ? p->last_ms : 0; }
pd_status pd__pipe_slabs(pd__pipe *p, pd__slabs *out) { return pd__session_slabs(p->s, out); }

/* The events of this process's threads (pid: the rank). */
static void pd__trace_events(const pd__pipe *p, pd__trace *t) {
    for (int i = 0; i < p->nwk; i++) {
        const pd__wk *W = &p->wk[i];
        if (p->rank_of[i] != p->rank) continue;
        char name[64], args[48];
        if (W->nrep > 1) snprintf(name, sizeof name, "stage %d replica %d", W->w, W->r);
        else snprintf(name, sizeof name, "stage %d", W->w);
        pd__trace_name(t, p->rank, i, name);
        if (p->remote) {
            snprintf(name, sizeof name, "rank %d", p->rank);
            pd__trace_name(t, p->rank, -1, name);
        }
        for (int e = 0; e < W->nev; e++) {
            const pd__ev *v = &W->ev[e];
            const char *op = pd__op_name(v->op);
            if (p->nchunks > 1) snprintf(name, sizeof name, "%s%d.%d", op, (int)v->mb, (int)v->chunk);
            else if (v->op == PD_I_STEP || v->op == PD_I_ALLREDUCE) snprintf(name, sizeof name, "%s", op);
            else snprintf(name, sizeof name, "%s%d", op, (int)v->mb);
            snprintf(args, sizeof args, "\"mb\":%d,\"chunk\":%d", (int)v->mb, (int)v->chunk);
            pd__trace_event(t, name, op, 1e-3 * (double)v->t0, 1e-3 * (double)(v->t1 - v->t0), p->rank, i, args);
        }
    }
}

pd_status pd__pipe_trace_events(const pd__pipe *p, char **buf, size_t *len) {
    *buf = NULL;
    *len = 0;
    FILE *f = open_memstream(buf, len);
    if (!f) return pd__err(PD_ERR_NOMEM, "out of memory for the trace");
    pd__trace t = {f, false};
    pd__trace_events(p, &t);
    if (fclose(f) != 0 || !*buf) {
        free(*buf);
        *buf = NULL;
        return pd__err(PD_ERR_NOMEM, "out of memory for the trace");
    }
    return PD_OK;
}

pd_status pd__pipe_write_trace(const pd__pipe *p, const char *path) {
    if (!p || !path) return pd__err(PD_ERR_INVALID, "pd__pipe_write_trace: NULL argument");
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return pd__err(PD_ERR_NOMEM, "out of memory for the trace");
    pd__trace t = {f, false};
    fputs("[\n", f);
    pd__trace_events(p, &t);
    fputs("\n]\n", f);
    if (fclose(f) != 0 || !buf) {
        free(buf);
        return pd__err(PD_ERR_NOMEM, "out of memory for the trace");
    }
    pd_status st = pd__write_atomic(path, buf, len);
    free(buf);
    return st;
}

size_t pd__tbytes(const pd_graph *g, int t) {
    return (size_t)g->tensors[t].numel * pd_dtype_size(g->tensors[t].dtype);
}

/* ---- queues: one mutex and condition for the whole pipeline; abort wakes all */

static bool pd__q_push(pd__pipe *p, pd__queue *q, pd__msg m) {
    pthread_mutex_lock(&p->mu);
    while (q->n == q->cap && !p->abort) pthread_cond_wait(&p->cv, &p->mu);
    bool ok = !p->abort;
    if (ok) {
        q->ring[(q->head + q->n) % q->cap] = m;
        q->n++;
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    return ok;
}

/* Takes the message of microbatch mb (the oldest such; a link's messages come
 * in order from one sender, or from a replicated stage's replicas). */
static bool pd__q_pop(pd__pipe *p, pd__queue *q, int mb, pd__msg *m) {
    pthread_mutex_lock(&p->mu);
    int at = -1;
    for (;;) {
        for (int i = 0; i < q->n && at < 0; i++)
            if (q->ring[(q->head + i) % q->cap].mb == mb) at = i;
        if (at >= 0 || p->abort) break;
        pthread_cond_wait(&p->cv, &p->mu);
    }
    bool ok = !p->abort && at >= 0;
    if (ok) {
        *m = q->ring[(q->head + at) % q->cap];
        for (int i = at; i > 0; i--) q->ring[(q->head + i) % q->cap] = q->ring[(q->head + i - 1) % q->cap];
        q->head = (q->head + 1) % q->cap;
        q->n--;
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    return ok;
}

static void pd__q_drain(pd__queue *q) {
    for (; q->n > 0; q->n--, q->head = (q->head + 1) % q->cap) PD_FREE(q->ring[q->head].buf);
    q->head = 0;
}

/* A message buffer of n bytes: a spent one of this queue, or a new one. */
static void *pd__q_buf(pd__pipe *p, pd__queue *q, size_t n) {
    void *b = NULL;
    pthread_mutex_lock(&p->mu);
    if (q->npool > 0) b = q->pool[--q->npool];
    pthread_mutex_unlock(&p->mu);
    return b ? b : PD_MALLOC(n ? n : 1);
}

static void pd__q_recycle(pd__pipe *p, pd__queue *q, void *b) {
    pthread_mutex_lock(&p->mu);
    if (q->pool && q->npool < q->cap + 2) {
        q->pool[q->npool++] = b;
        b = NULL;
    }
    pthread_mutex_unlock(&p->mu);
    PD_FREE(b);
}

static void pd__q_free_pool(pd__queue *q) {
    while (q->npool > 0) PD_FREE(q->pool[--q->npool]);
    PD_FREE(q->pool);
    q->pool = NULL;
}

/* ---- the in-process transport (comm/transport.h) over the queues ---- */

static pd__queue *pd__lq(pd__transport *t, int l, int dir) {
    pd__pipe *p = ((pd__qx *)t)->p;
    return dir ? &p->link[l].bwd : &p->link[l].fwd;
}

static void *pd__lx_get(pd__transport *t, int l, int dir, size_t n) {
    return pd__q_buf(((pd__qx *)t)->p, pd__lq(t, l, dir), n);
}

static pd_status pd__lx_send(pd__transport *t, int from, int to, int l, int dir, int mb, void *buf, size_t n,
                             bool *stop) {
    (void)from, (void)to, (void)n;
    pd__msg m = {mb, buf};
    if (!pd__q_push(((pd__qx *)t)->p, pd__lq(t, l, dir), m)) { /* aborted: the stage that failed reports */
        PD_FREE(buf);
        *stop = true;
    }
    return PD_OK;
}

static pd_status pd__lx_recv(pd__transport *t, int from, int to, int l, int dir, int mb, size_t n, void **buf,
                             bool *stop) {
    (void)from, (void)to, (void)n;
    pd__msg m;
    if (!pd__q_pop(((pd__qx *)t)->p, pd__lq(t, l, dir), mb, &m)) {
        *stop = true;
        return PD_OK;
    }
    *buf = m.buf;
    return PD_OK;
}

static void pd__lx_put(pd__transport *t, int l, int dir, void *buf) { pd__q_recycle(((pd__qx *)t)->p, pd__lq(t, l, dir), buf); }

static pd_status pd__lx_allreduce(pd__transport *t, int g, void *data, int64_t n, bool f64) {
    (void)t, (void)g, (void)data, (void)n, (void)f64; /* one process: the sums are made in place (pd__do_allreduce) */
    return PD_OK;
}

static pd_status pd__lx_flush(pd__transport *t) {
    (void)t;
    return PD_OK;
}

static void pd__lx_destroy(pd__transport *t) { (void)t; }

static const pd__transport_i pd__local_vt = {"in-process", pd__lx_get, pd__lx_send, pd__lx_recv, pd__lx_put,
                                             pd__lx_allreduce, pd__lx_flush, pd__lx_destroy, NULL, NULL, NULL};

/* n threads meet at barrier b; false when the pipeline was aborted. */
static bool pd__meet(pd__pipe *p, pd__bar *b, int n) {
    pthread_mutex_lock(&p->mu);
    int gen = b->gen;
    if (++b->n == n) {
        b->n = 0;
        b->gen++;
        pthread_cond_broadcast(&p->cv);
    } else {
        while (b->gen == gen && !p->abort) pthread_cond_wait(&p->cv, &p->mu);
    }
    bool ok = !p->abort;
    pthread_mutex_unlock(&p->mu);
    return ok;
}

/* The replicas of worker w meet. */
static bool pd__barrier(pd__pipe *p, int w) { return pd__meet(p, &p->bar[w], p->rep[w]); }

/* The first error stops every stage. */
static void pd__fail(pd__pipe *p, const pd__wk *W, const pd__instr *in, pd_status st) {
    pthread_mutex_lock(&p->mu);
    bool first = !p->abort;
    if (first) {
        char who[64];
        if (W->nrep > 1) snprintf(who, sizeof who, "stage %d (replica %d)", W->w, W->r);
        else snprintf(who, sizeof who, "stage %d", W->w);
        char chunk[32] = "";
        if (p->nchunks > 1) snprintf(chunk, sizeof chunk, " (chunk %d)", (int)in->chunk);
        p->abort = true;
        __atomic_store_n(&p->stopped, 1, __ATOMIC_RELEASE);
        p->err = st;
        snprintf(p->errmsg, sizeof p->errmsg, "%s, step %lld, %s of microbatch %d%s: %s", who,
                 (long long)(p->steps + in->mb / p->nmicro + 1), pd__op_name(in->op), (int)in->mb, chunk, pd_last_error());
    }
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    /* under MPI the other processes hear of it instead of waiting for ever */
    if (first && p->remote && p->remote->vt->fail) p->remote->vt->fail(p->remote, p->errmsg);
}

/* ---- creation ------------------------------------------------------------------ */

void pd__pipe_destroy(pd__pipe *p) {
    if (!p) return;
    pd__dev_teardown(p); /* GPU stages: their device twins first, while the host contexts they mirror live */
    PD_FREE(p->ring_at);
    for (int i = 0; p->wk && i < p->nwk; i++) {
        pd__wk *W = &p->wk[i];
        for (int c = 0; W->ch && c < p->nchunks; c++) {
            pd__chunk *C = &W->ch[c];
            for (int k = 0; C->slot && k < p->nslots; k++) pd__actx_destroy(C->slot[k]);
            PD_FREE(C->slot);
            PD_FREE(C->slot_ver);
            for (int k = 0; C->stash && k < C->nstash; k++) PD_FREE(C->stash[k].w);
            PD_FREE(C->stash);
            PD_FREE(C->need_until);
            PD_FREE(C->sg);
            for (int k = 0; C->held && k < 2 * p->nslots; k++) PD_FREE(C->held[k]);
            PD_FREE(C->held);
            PD_FREE(C->orig);
            PD_FREE(C->sent);
            PD_FREE(C->rc_vals);
            PD_FREE(C->rc_bufs);
        }
        PD_FREE(W->ch);
        PD_FREE(W->grads);
        PD_FREE(W->ev);
        PD_FREE(W->x.scratch);
        PD_FREE(W->kfirst);
        PD_FREE(W->klast);
        PD_FREE(W->ared);
        PD_FREE(W->gnpart);
        PD_FREE(W->arfirst);
        PD_FREE(W->tup);
    }
    PD_FREE(p->tie);
    PD_FREE(p->tbuf);
    for (int w = 0; p->part && w < p->nworkers; w++) PD_FREE(p->part[w]);
    PD_FREE(p->part);
    PD_FREE(p->part_cap);
    PD_FREE(p->part_pre);
    PD_FREE(p->part_len);
    PD_FREE(p->want);
    PD_FREE(p->mbloss);
    PD_FREE(p->mbn);
    for (int i = 0; i < 4; i++) PD_FREE(p->gn[i].part);
    for (int k = 0; p->vs && k < p->nvstages; k++) {
        PD_FREE(p->vs[k].nodes);
        PD_FREE(p->vs[k].bnodes);
        PD_FREE(p->vs[k].params);
        PD_FREE(p->vs[k].pk);
        PD_FREE(p->vs[k].bufs);
        PD_FREE(p->vs[k].sp);
        PD_FREE(p->vs[k].spk);
    }
    for (int l = 0; p->link && l < p->nvstages - 1; l++) {
        pd__q_drain(&p->link[l].fwd);
        pd__q_drain(&p->link[l].bwd);
        PD_FREE(p->link[l].fwd.ring);
        PD_FREE(p->link[l].bwd.ring);
        pd__q_free_pool(&p->link[l].fwd);
        pd__q_free_pool(&p->link[l].bwd);
        PD_FREE(p->link[l].t);
        PD_FREE(p->link[l].gt);
        PD_FREE(p->link[l].bt);
    }
    PD_FREE(p->gneed);
    PD_FREE(p->gdev);
    PD_FREE(p->gfix);
    if (p->remote) p->remote->vt->destroy(p->remote);
    PD_FREE(p->rank_of);
    PD_FREE(p->wbase);
    PD_FREE(p->first_rank);
    PD_FREE(p->wk);
    PD_FREE(p->vs);
    PD_FREE(p->rep);
    PD_FREE(p->bar);
    PD_FREE(p->link);
    pd_session_destroy(p->s);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    PD_FREE(p);
}

/* Per tensor, the virtual stages that compute, read and differentiate it
 * (pd__assign): one allocation, five arrays of ntensors. */
typedef struct pd__tstages {
    int *tstage; /* the stage computing it (-1: none) */
    int *vlast;  /* the last stage needing its value (a forward reading it, a backward reading or producing it, the loss) */
    int *gfirst; /* the stage running its producer's backward, which consumes its gradient */
    int *glast;  /* the last stage adding to its gradient (its consumers' backwards, the loss) */
    int *bfirst; /* the first stage whose backward needs its value */
} pd__tstages;

static bool pd__tstages_alloc(pd__tstages *ts, int nt) {
    int *all = PD_MALLOC(sizeof(int) * (5 * (size_t)nt + 1));
    *ts = (pd__tstages){all, all + nt, all + 2 * (size_t)nt, all + 3 * (size_t)nt, all + 4 * (size_t)nt};
    return all != NULL;
}

/* Fills ts; checks the plan fits the graph. */
static pd_status pd__assign(pd__pipe *p, const pd_plan *plan, const pd__tstages *ts) {
    const pd_graph *g = p->g;
    int nt = g->ntensors, *tstage = ts->tstage, *vlast = ts->vlast, *gfirst = ts->gfirst, *glast = ts->glast,
        *bfirst = ts->bfirst;
    if (plan->n_nodes != g->nnodes)
        return pd__err(PD_ERR_INVALID, "%s: the plan has %d nodes, the model %d", g->path, plan->n_nodes, g->nnodes);
    for (int t = 0; t < nt; t++) {
        int v = g->tensors[t].producer;
        tstage[t] = v >= 0 ? plan->fwd_stage[v] : -1;
        gfirst[t] = v >= 0 && plan->bwd_stage ? plan->bwd_stage[v] : tstage[t];
        vlast[t] = glast[t] = -1;
        bfirst[t] = INT32_MAX;
    }
    for (int i = 0; i < g->nnodes; i++) {
        const pd__node *n = &g->nodes[i];
        int s = plan->fwd_stage[i], b = plan->bwd_stage ? plan->bwd_stage[i] : s;
        if (s < 0 || s >= p->nvstages) return pd__err(PD_ERR_INVALID, "plan: node %d has stage %d of %d", i, s, p->nvstages);
        if (b < 0 || b >= p->nvstages)
            return pd__err(PD_ERR_INVALID, "plan: node %d has its backward on stage %d of %d", i, b, p->nvstages);
        if (b != s && p->nchunks > 1)
            return pd__err(PD_ERR_UNSUPPORTED,
                           "pipeline: node '%s' has its backward on another stage (bipartition) in a plan with chunks; "
                           "not supported",
                           n->name);
        for (int j = 0; j < n->nin; j++) {
            int t = n->in[j];
            if (t < 0) continue;
            if (tstage[t] > s)
                return pd__err(PD_ERR_INVALID, "plan: node '%s' (stage %d) reads '%s' of a later stage %d", n->name, s,
                               g->tensors[t].name, tstage[t]);
            if (b != s && g->tensors[t].kind == PD_T_INIT && pd__session_needs_grad(p->s, t))
                return pd__err(PD_ERR_UNSUPPORTED,
                               "pipeline: node '%s' reads the parameter '%s' but runs its backward on stage %d, not on "
                               "its forward's stage %d (bipartition moves only nodes without parameters)",
                               n->name, g->tensors[t].name, b, s);
            if (s > vlast[t]) vlast[t] = s;
            if (b > vlast[t]) vlast[t] = b;
            if (b < bfirst[t]) bfirst[t] = b;
            if (tstage[t] >= 0 && pd__session_needs_grad(p->s, t)) {
                if (b < gfirst[t])
                    return pd__err(PD_ERR_INVALID,
                                   "plan: the backward of node '%s' (stage %d) runs before that of '%s', which "
                                   "produces its input '%s' (stage %d): gradients flow only to earlier stages",
                                   n->name, b, g->nodes[g->tensors[t].producer].name, g->tensors[t].name, gfirst[t]);
                if (b > glast[t]) glast[t] = b;
            }
        }
        for (int j = 0; j < n->nout; j++) {
            int t = n->out[j];
            if (t < 0) continue;
            if (b > vlast[t]) vlast[t] = b;
            if (b < bfirst[t]) bfirst[t] = b;
        }
    }
    vlast[p->pred] = glast[p->pred] = p->nvstages - 1; /* the last stage computes the loss and its gradient */
    return PD_OK;
}

/* The plan's shape against the schedule: workers, chunks, replicas. */
static pd_status pd__shape(pd__pipe *p, const pd_plan *plan) {
    int V = plan->chunks > 1 ? plan->chunks : 1;
    if (plan->n_stages < 1 || plan->n_stages % V != 0)
        return pd__err(PD_ERR_INVALID, "plan: %d stages is not a multiple of its %d chunks", plan->n_stages, V);
    if (p->kind == PD_SCHED_INTERLEAVED && V < 2)
        return pd__err(PD_ERR_INVALID,
                       "pipeline: interleaved needs a plan with chunks: P*V virtual stages and chunks = V (virtual "
                       "stage k on worker k %% P); this plan has %d stages and no chunks",
                       plan->n_stages);
    if (p->kind != PD_SCHED_INTERLEAVED && V > 1)
        return pd__err(PD_ERR_INVALID, "pipeline: a plan with %d chunks per worker runs only under interleaved, not %s",
                       V, pd__sched_kind_name(p->kind));
    p->nchunks = V;
    p->nvstages = plan->n_stages;
    p->nworkers = p->nvstages / V;
    p->rep = PD_CALLOC((size_t)p->nworkers, sizeof(int));
    p->bar = PD_CALLOC((size_t)p->nworkers, sizeof(pd__bar));
    if (!p->rep || !p->bar) return pd__err(PD_ERR_NOMEM, "out of memory");
    p->nwk = 0;
    /* PipeDream-2BW's width: w pipelines whose stages all-reduce their
     * gradients, which is every stage replicated w times */
    int width = plan->algo == PD_ALGO_2BW && plan->width > 1 ? plan->width : 1;
    for (int w = 0; w < p->nworkers; w++) {
        int r = plan->stage ? plan->stage[w].replicas : 1;
        if (r < 1) r = 1;
        r *= width;
        for (int c = 1; c < V; c++)
            if (plan->stage && plan->stage[c * p->nworkers + w].replicas > 1) r = 2;
        if (r > 256) return pd__err(PD_ERR_INVALID, "plan: stage %d has %d replicas", w, r);
        p->rep[w] = r;
        p->nwk += r;
    }
    /* the plan's stage_to_rank, unless a worker runs other replicas than its
     * stage names (2BW's width, a replicated chunk): then one process each */
    bool as_planned = plan->stage != NULL;
    for (int w = 0; as_planned && w < p->nworkers; w++) as_planned = plan->stage[w].replicas == p->rep[w];
    p->first_rank = PD_CALLOC((size_t)p->nworkers + 1, sizeof(int));
    for (int w = 0; p->first_rank && w < p->nworkers; w++)
        p->first_rank[w] = as_planned && plan->stage[w].first_rank >= 0 ? plan->stage[w].first_rank : -1;
    p->wbase = PD_CALLOC((size_t)p->nworkers + 1, sizeof(int));
    p->rank_of = PD_CALLOC((size_t)p->nwk + 1, sizeof(int)); /* every thread here until pd__pipe_set_ranks */
    if (!p->wbase || !p->rank_of) return pd__err(PD_ERR_NOMEM, "out of memory");
    for (int w = 1; w <= p->nworkers; w++) p->wbase[w] = p->wbase[w - 1] + p->rep[w - 1];
    return PD_OK;
}

/* Recomputation: chunk C's shared activation slab (the values of need its
 * slots do not own) and the save area of its BatchNorm statistics. */
static pd_status pd__rc_alloc(pd__pipe *p, pd__chunk *C, const bool *need, const bool *own) {
    const pd__vstage *S = &p->vs[C->k];
    size_t nb = 0;
    for (int j = 0; j < S->nbufs; j++) nb += pd__tbytes(p->g, S->bufs[j]);
    C->rc_owner = -1;
    if (posix_memalign(&C->rc_vals, 64, pd__actx_shared_bytes(p->s, need, own) + 64) != 0) C->rc_vals = NULL;
    C->rc_bufs = PD_MALLOC(nb + 1);
    if (!C->rc_vals || !C->rc_bufs) return pd__err(PD_ERR_NOMEM, "%s: out of memory building the pipeline", p->g->path);
    return PD_OK;
}

static pd_status pd__pipe_nomem(const pd__pipe *p) {
    return pd__err(PD_ERR_NOMEM, "%s: out of memory building the pipeline", p->g->path);
}

/* What no pipeline can run: the schedule, microbatches and options checked. */
static pd_status pd__pipe_check(const pd_plan *plan, const pd_train_options *o, pd__sched_kind kind, int microbatches,
                                bool gpu) {
    if (microbatches < 1) return pd__err(PD_ERR_INVALID, "pipeline: %d microbatches", microbatches);
    if ((unsigned)kind > PD_SCHED_AVGPIPE) return pd__err(PD_ERR_INVALID, "pipeline: unknown schedule %d", (int)kind);
    if (kind == PD_SCHED_PIPEDREAM && microbatches != 1)
        return pd__err(PD_ERR_INVALID, "pipeline: pipedream updates after every microbatch, so a minibatch is one "
                       "microbatch: use 1 microbatch, not %d", microbatches);
    if (o && o->clip_grad_norm > 0 && pd__sched_async(kind))
        return pd__err(PD_ERR_UNSUPPORTED, "pipeline: opt->clip_grad_norm needs every stage's gradients of one update at "
                       "once; %s updates each stage on its own (use gpipe, flush, zb-h1 or interleaved)",
                       pd__sched_kind_name(kind));
    if (plan->recompute && gpu)
        return pd__err(PD_ERR_UNSUPPORTED, "pipeline: plan->recompute (activation recomputation) runs on CPU stages "
                       "only so far, not with opt->device cuda");
    return PD_OK;
}

/* Each virtual stage's forward and backward nodes, the BatchNorm statistics
 * its nodes update in place (ops.h: state), the bytes its outputs take. */
static pd_status pd__pipe_vstages(pd__pipe *p, const pd_plan *plan) {
    const pd_graph *g = p->g;
    for (int k = 0; k < p->nvstages; k++) {
        pd__vstage *S = &p->vs[k];
        S->nodes = PD_MALLOC(sizeof(int) * ((size_t)g->nnodes + 1));
        S->bnodes = PD_MALLOC(sizeof(int) * ((size_t)g->nnodes + 1));
        S->params = PD_MALLOC(sizeof(int) * ((size_t)p->sl.np + 1));
        S->pk = PD_MALLOC(sizeof(int64_t) * ((size_t)p->sl.np + 1));
        S->bufs = PD_MALLOC(sizeof(int) * (2 * (size_t)g->nnodes + 1));
        if (!S->nodes || !S->bnodes || !S->params || !S->pk || !S->bufs) return pd__pipe_nomem(p);
        for (int i = 0; i < g->nnodes; i++)
            if ((plan->bwd_stage ? plan->bwd_stage[i] : plan->fwd_stage[i]) == k) S->bnodes[S->nbnodes++] = i;
        for (int i = 0; i < g->nnodes; i++)
            if (plan->fwd_stage[i] == k) {
                S->nodes[S->nnodes++] = i;
                const pd__node *n = &g->nodes[i]; /* BatchNorm's running statistics: updated in place (ops.h: state) */
                for (int j = 0; j < n->nin; j++)
                    if (pd__state_input(n, j) && n->in[j] >= 0 && g->tensors[n->in[j]].kind == PD_T_INIT)
                        S->bufs[S->nbufs++] = n->in[j];
                for (int j = 0; j < g->nodes[i].nout; j++)
                    if (g->nodes[i].out[j] >= 0) S->act_bytes += (double)pd__tbytes(g, g->nodes[i].out[j]);
            }
    }
    return PD_OK;
}

/* Parameters: each belongs to the first virtual stage that reads it; a
 * later stage reading it too (tied weights) shares it: its backward adds
 * into a gradient buffer of its own, which the owner sums into the
 * parameter's at STEP, once every stage has met there. */
static pd_status pd__pipe_params(pd__pipe *p, const pd_plan *plan) {
    const pd_graph *g = p->g;
    pd__sched_kind kind = p->kind;
    for (int i = 0; i < p->sl.np; i++) {
        int t = p->sl.param[i], owner = INT32_MAX;
        for (int k = 0; k < g->nnodes; k++)
            for (int j = 0; j < g->nodes[k].nin; j++)
                if (g->nodes[k].in[j] == t && plan->fwd_stage[k] < owner) owner = plan->fwd_stage[k];
        if (owner == INT32_MAX) continue;
        pd__vstage *S = &p->vs[owner];
        S->pk[S->np] = S->packed;
        S->params[S->np++] = i;
        S->packed += g->tensors[t].numel;
        for (int k = owner + 1; k < p->nvstages; k++) {
            bool reads = false;
            for (int v = 0; v < g->nnodes && !reads; v++)
                for (int j = 0; j < g->nodes[v].nin; j++) reads |= g->nodes[v].in[j] == t && plan->fwd_stage[v] == k;
            if (!reads) continue;
            if (pd__sched_async(kind) || p->rep[owner % p->nworkers] > 1 || p->rep[k % p->nworkers] > 1) {
                return pd__err(PD_ERR_UNSUPPORTED,
                             "pipeline: parameter '%s' is read by stages %d and %d (tied weights): shared across "
                             "stages only under gpipe, flush, zb-h1 and interleaved, without replicas, so far",
                             g->tensors[t].name, owner, k);
            }
            pd__vstage *K = &p->vs[k];
            if (!K->sp && !(K->sp = PD_MALLOC(sizeof(int) * ((size_t)p->sl.np + 1)))) return pd__pipe_nomem(p);
            if (!K->spk && !(K->spk = PD_MALLOC(sizeof(int64_t) * ((size_t)p->sl.np + 1)))) return pd__pipe_nomem(p);
            K->spk[K->nsp] = K->spacked;
            K->sp[K->nsp++] = i;
            K->spacked += g->tensors[t].numel;
            p->shared = true;
        }
    }
    return PD_OK;
}

/* Links: activations made at or before virtual stage l (not graph inputs:
 * every stage reads those itself) and read after it; gradients added to
 * after and used here or before; what a backward here needs from after. */
static pd_status pd__pipe_links(pd__pipe *p, const pd__tstages *ts) {
    const pd_graph *g = p->g;
    const int *tstage = ts->tstage, *vlast = ts->vlast, *gfirst = ts->gfirst, *glast = ts->glast, *bfirst = ts->bfirst;
    for (int l = 0; l + 1 < p->nvstages; l++) {
        pd__link *L = &p->link[l];
        L->t = PD_MALLOC(sizeof(int) * ((size_t)g->ntensors + 1));
        L->gt = PD_MALLOC(sizeof(int) * ((size_t)g->ntensors + 1));
        L->bt = PD_MALLOC(sizeof(int) * ((size_t)g->ntensors + 1));
        L->fwd.cap = L->bwd.cap = p->nmicro + p->nvstages;
        L->fwd.ring = PD_CALLOC((size_t)L->fwd.cap, sizeof(pd__msg));
        L->bwd.ring = PD_CALLOC((size_t)L->bwd.cap, sizeof(pd__msg));
        L->fwd.pool = PD_CALLOC((size_t)L->fwd.cap + 2, sizeof(void *));
        L->bwd.pool = PD_CALLOC((size_t)L->bwd.cap + 2, sizeof(void *));
        if (!L->t || !L->gt || !L->bt || !L->fwd.ring || !L->bwd.ring) return pd__pipe_nomem(p);
        for (int t = 0; t < g->ntensors; t++) {
            if (tstage[t] < 0) continue;
            if (tstage[t] <= l && vlast[t] > l) { /* made here or before, needed after */
                L->t[L->nt++] = t;
                L->act_bytes += pd__tbytes(g, t);
            }
            /* a gradient added to after, used here or before */
            if (pd__session_needs_grad(p->s, t) && gfirst[t] <= l && glast[t] > l) {
                L->gt[L->ngt++] = t;
                L->grad_bytes += pd__tbytes(g, t);
            }
            if (bfirst[t] <= l && tstage[t] > l) { /* made after, a backward here or before needs it */
                L->bt[L->nbt++] = t;
                L->grad_bytes += pd__tbytes(g, t);
                p->vs[l].act_bytes += (double)pd__tbytes(g, t);
                p->vs[l].keep_bytes += (double)pd__tbytes(g, t);
                if (tstage[t] == l + 1) p->vs[l + 1].keep_bytes += (double)pd__tbytes(g, t); /* made there, sent back */
            }
        }
        p->vs[l + 1].act_bytes += (double)L->act_bytes;
        p->vs[l + 1].keep_bytes += (double)L->act_bytes;
    }
    return PD_OK;
}

/* What each virtual stage's contexts hold (need, per stage and tensor): its
 * nodes' (forward and backward) inputs and outputs, what its links carry in
 * and out, and the loss's prediction on the last; the rest has no memory there. */
static void pd__pipe_need(const pd__pipe *p, bool *need) {
    const pd_graph *g = p->g;
    for (int k = 0; k < p->nvstages; k++) {
        bool *nd = need + (size_t)k * (size_t)g->ntensors;
        const pd__vstage *S = &p->vs[k];
        for (int pass = 0; pass < 2; pass++)
            for (int q = 0; q < (pass ? S->nbnodes : S->nnodes); q++) {
                const pd__node *n = &g->nodes[pass ? S->bnodes[q] : S->nodes[q]];
                for (int j = 0; j < n->nin; j++)
                    if (n->in[j] >= 0) nd[n->in[j]] = true;
                for (int j = 0; j < n->nout; j++)
                    if (n->out[j] >= 0) nd[n->out[j]] = true;
            }
        for (int l = k - 1; l <= k; l++) {
            if (l < 0 || l + 1 >= p->nvstages) continue;
            const pd__link *L = &p->link[l];
            for (int q = 0; q < L->nt; q++) nd[L->t[q]] = true;
            for (int q = 0; q < L->ngt; q++) nd[L->gt[q]] = true;
            for (int q = 0; q < L->nbt; q++) nd[L->bt[q]] = true;
        }
        if (k == p->nvstages - 1) nd[p->pred] = true;
        if (p->labels_input >= 0) nd[p->labels_input] = nd[p->labels_input] || k == p->nvstages - 1;
    }
}

/* Chunk c of thread W: its slots' activation contexts (role: which
 * gradients are written before its backward, read after; own: what a slot
 * keeps under recomputation), its weight stashes, and where each slot's
 * link buffers first point (orig). */
static pd_status pd__pipe_chunk(pd__pipe *p, pd__wk *W, int c, const bool *need, uint8_t *role, bool *own) {
    const pd_graph *g = p->g;
    int w = W->w, r = W->r;
    pd__chunk *C = &W->ch[c];
    const pd__vstage *S = &p->vs[c * p->nworkers + w];
    C->k = c * p->nworkers + w;
    C->slot = PD_CALLOC((size_t)p->nslots, sizeof *C->slot);
    C->slot_ver = PD_MALLOC(sizeof(int32_t) * (size_t)p->nslots);
    C->nstash = pd__sched_async(p->kind) ? p->nworkers + 1 : 0;
    C->stash = PD_CALLOC((size_t)C->nstash + 1, sizeof *C->stash);
    if (!C->slot || !C->slot_ver || !C->stash) return pd__pipe_nomem(p);
    if (S->nsp > 0 && !(C->sg = PD_CALLOC((size_t)S->spacked + 1, sizeof(float)))) return pd__pipe_nomem(p);
    /* the gradients it receives (link k's) and the loss's are
     * written before its backward; those it sends (link k-1's)
     * are read after (pd__actx_create) */
    memset(role, 0, (size_t)g->ntensors);
    const pd__link *Lr = C->k + 1 < p->nvstages ? &p->link[C->k] : NULL, *Ls = C->k > 0 ? &p->link[C->k - 1] : NULL;
    for (int q = 0; Lr && q < Lr->ngt; q++) role[Lr->gt[q]] |= PD__G_SET;
    for (int q = 0; Ls && q < Ls->ngt; q++) role[Ls->gt[q]] |= PD__G_KEEP;
    if (C->k == p->nvstages - 1) role[p->pred] |= PD__G_SET;
    /* recomputation: a slot keeps the values it received and those sent back (bipartition) */
    memset(own, 0, (size_t)g->ntensors);
    for (int q = 0; Ls && q < Ls->nt; q++) own[Ls->t[q]] = true;
    for (int q = 0; Ls && q < Ls->nbt; q++) own[Ls->bt[q]] = true;
    for (int q = 0; Lr && q < Lr->nbt; q++) own[Lr->bt[q]] = true;
    const bool *cneed = need + (size_t)C->k * (size_t)g->ntensors;
    if (p->recompute) PD_TRY(pd__rc_alloc(p, C, cneed, own));
    for (int k = 0; k < p->nslots; k++) {
        PD_TRY(pd__actx_create_in(p->s, cneed, p->recompute ? own : NULL, C->rc_vals, S->bnodes, S->nbnodes, role,
                                  p->kind == PD_SCHED_ZB_H1, &C->slot[k]));
        for (int j = 0; r > 0 && j < S->np; j++) { /* the replica's own gradients */
            int pi = S->params[j];
            pd__actx_grad(C->slot[k], p->sl.param[pi])->data = W->grads + p->sl.poff[pi];
        }
        for (int j = 0; j < S->nsp; j++) /* a shared parameter's: its own buffer */
            pd__actx_grad(C->slot[k], p->sl.param[S->sp[j]])->data = C->sg + S->spk[j];
    }
    for (int k = 0; k < C->nstash; k++) {
        C->stash[k].version = -1;
        C->stash[k].w = PD_MALLOC(sizeof(float) * ((size_t)S->packed + 1));
        if (!C->stash[k].w) return pd__pipe_nomem(p);
    }
    const pd__link *La = C->k > 0 ? &p->link[C->k - 1] : NULL;
    const pd__link *Lg = C->k + 1 < p->nvstages ? &p->link[C->k] : NULL;
    C->norig = (La ? La->nt : 0) + (Lg ? Lg->ngt + Lg->nbt : 0);
    C->held = PD_CALLOC(2 * (size_t)p->nslots, sizeof(void *));
    C->orig = PD_CALLOC((size_t)p->nslots * (size_t)C->norig + 1, sizeof(void *));
    C->sent = PD_CALLOC((size_t)p->nslots, sizeof(bool));
    if (!C->held || !C->orig || !C->sent) return pd__pipe_nomem(p);
    for (int k = 0; k < p->nslots; k++) {
        void **o = C->orig + (size_t)k * (size_t)C->norig;
        for (int q = 0; La && q < La->nt; q++) *o++ = pd__actx_value(C->slot[k], La->t[q])->data;
        for (int q = 0; Lg && q < Lg->ngt; q++) *o++ = pd__actx_grad(C->slot[k], Lg->gt[q])->data;
        for (int q = 0; Lg && q < Lg->nbt; q++) *o++ = pd__actx_value(C->slot[k], Lg->bt[q])->data;
    }
    return PD_OK;
}

pd_status pd__pipe_create(pd_graph *g, const pd_plan *plan, const pd_train_options *o, pd__sched_kind kind,
                          int microbatches, pd__pipe **out) {
    if (!g || !plan || !out) return pd__err(PD_ERR_INVALID, "pd__pipe_create: NULL argument");
    /* GPU stages (pd__dev_setup): the session keeps the host slabs, each stage its own device memory */
    bool gpu = o && o->size >= sizeof *o && o->device == PD_DEVICE_CUDA;
    PD_TRY(pd__pipe_check(plan, o, kind, microbatches, gpu));
    pd_train_options ho;
    if (gpu) ho = *o, ho.device = PD_DEVICE_CPU;
    pd__pipe *p = PD_CALLOC(1, sizeof *p);
    if (!p) return pd__err(PD_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->g = g;
    p->kind = kind;
    p->nmicro = microbatches;
    p->local.base.vt = &pd__local_vt;
    p->local.p = p;
    for (int i = 0; i < 4; i++) p->gn[i].t = -1;
    p->fail_stage = -1;
    p->recompute = plan->recompute;
    bool *need = NULL; /* per virtual stage and tensor: its contexts hold it */
    uint8_t *role = NULL; /* per tensor, for one chunk's contexts (PD__G_SET, PD__G_KEEP) */
    bool *own = NULL;     /* recomputation: per tensor, for one chunk's contexts, the values each slot keeps */
    pd__tstages ts;
    bool have_ts = pd__tstages_alloc(&ts, g->ntensors);
    pd_status st = have_ts ? pd__shape(p, plan) : pd__err(PD_ERR_NOMEM, "out of memory");
    if (st != PD_OK) goto done;
    if (kind == PD_SCHED_INTERLEAVED && microbatches % p->nworkers != 0) {
        st = pd__err(PD_ERR_INVALID,
                     "pipeline: interleaved needs the microbatches (%d) to be a multiple of the %d workers",
                     microbatches, p->nworkers);
        goto done;
    }
    p->nslots = pd__sched_async(kind) ? microbatches + p->nworkers : microbatches; /* async: at most P in flight */
    bool lazy = false; /* lazy_weights: each process reads its stages' parameters only (stageload.c) */
    for (int t = 0; t < g->ntensors && !lazy; t++) lazy = pd__deferred(&g->tensors[t]);
    if ((st = pd__session_create_ex(g, gpu ? &ho : o, lazy, &p->s)) != PD_OK) goto done;
    p->o = *pd__session_options(p->s);
    pd__session_slabs(p->s, &p->sl);
    p->pred = pd__session_loss_tensor(p->s);
    p->labels_input = pd__session_labels_input(p->s);
    p->rows = g->ninputs > 0 && g->tensors[g->inputs[0]].ndim > 0 ? g->tensors[g->inputs[0]].shape[0] : 1;
    if ((st = pd__assign(p, plan, &ts)) != PD_OK) goto done;
    p->vs = PD_CALLOC((size_t)p->nvstages, sizeof *p->vs);
    p->wk = PD_CALLOC((size_t)p->nwk, sizeof *p->wk);
    p->link = PD_CALLOC((size_t)p->nvstages, sizeof *p->link);
    need = PD_CALLOC((size_t)p->nvstages * (size_t)g->ntensors + 1, sizeof(bool));
    role = PD_MALLOC((size_t)g->ntensors + 1);
    own = PD_MALLOC((size_t)g->ntensors + 1);
    if (!p->vs || !p->wk || !p->link || !need || !role || !own) {
        st = pd__pipe_nomem(p);
        goto done;
    }
    if ((st = pd__pipe_vstages(p, plan)) != PD_OK || (st = pd__pipe_params(p, plan)) != PD_OK ||
        (st = pd__pipe_links(p, &ts)) != PD_OK)
        goto done;
    pd__pipe_need(p, need);
    /* threads: replica r of worker w, each with its chunks' contexts */
    for (int w = 0, i = 0; w < p->nworkers; w++)
        for (int r = 0; r < p->rep[w]; r++, i++) {
            pd__wk *W = &p->wk[i];
            W->p = p;
            W->w = w;
            W->r = r;
            W->nrep = p->rep[w];
            W->x.threads = 1;
            W->x.g = g;
            W->x.training = true;
            W->ch = PD_CALLOC((size_t)p->nchunks, sizeof *W->ch);
            if (!W->ch || (r > 0 && !(W->grads = PD_CALLOC((size_t)p->sl.total + 1, sizeof(float))))) {
                st = pd__pipe_nomem(p);
                goto done;
            }
            for (int c = 0; c < p->nchunks; c++)
                if ((st = pd__pipe_chunk(p, W, c, need, role, own)) != PD_OK) goto done;
        }
    if (gpu) st = pd__dev_prepare(p, plan, o, &need);
done:
    PD_FREE(ts.tstage);
    PD_FREE(need);
    PD_FREE(role);
    PD_FREE(own);
    if (st != PD_OK) {
        pd__pipe_destroy(p);
        return st;
    }
    *out = p;
    return PD_OK;
}

/* ---- the instructions ------------------------------------------------------------ */

/* Rows of microbatch mb of a tensor holding every microbatch of the run. */
pd_tensor pd__rows(const pd_tensor *all, int64_t rows, int mb) {
    pd_tensor v = *all;
    size_t row = v.shape[0] > 0 ? (size_t)(pd_tensor_numel(all) / v.shape[0]) * pd_dtype_size(v.dtype) : 0;
    v.shape[0] = rows;
    v.data = (char *)all->data + row * (size_t)rows * (size_t)mb;
    return v;
}

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
    for (int j = 0; !C->dev && j < S->np; j++) { /* a GPU stage copies on its device (pd__dev_step) */
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
static void pd__release(pd__chunk *C, int32_t v, int k) {
    if (v < 0 || C->need_until[v] != k) return;
    for (int j = 0; j < C->nstash; j++)
        if (C->stash[j].version == v) C->stash[j].version = -1;
}

/* ---- compute ---- */

static void pd__slot_done(pd__pipe *p, pd__chunk *C, int slot);

/* Microbatch mb's Dropout seed, the same on the CPU and the GPU. */
static uint64_t pd__mb_seed(const pd__pipe *p, int mb) {
    return p->o.seed ^ ((uint64_t)(p->steps * p->nmicro + mb) * 0x9e3779b97f4a7c15ull);
}

/* The last stage's loss of microbatch mb into its minibatch's result
 * (replicas of the last stage share the results). */
static pd_status pd__mb_result(pd__pipe *p, int mb, const pd_step_result *r) {
    if (!isfinite(r->loss)) return pd__err(PD_ERR_NUMERIC, "the loss is %g", r->loss);
    if (!p->res) return PD_OK;
    /* the step's loss: its microbatches' added in their order (a replicated
     * last stage's replicas finish them in any order), once all are in; under
     * MPI after the run, once the processes' losses are in (pd__run_remote_end) */
    pthread_mutex_lock(&p->mu);
    pd_step_result *R = &p->res[mb / p->nmicro];
    p->mbloss[mb] = r->loss / p->nmicro;
    if (++p->mbn[mb / p->nmicro] == p->nmicro && !p->remote)
        for (int i = 0; i < p->nmicro; i++) R->loss += p->mbloss[mb / p->nmicro * p->nmicro + i];
    R->correct += r->correct;
    R->count += r->count;
    pthread_mutex_unlock(&p->mu);
    return PD_OK;
}

/* With a ring: step k into its slot unless there already. The step it
 * replaces must be done with: no later step there, and (where this process
 * runs the last stage) every microbatch's loss taken. */
static pd_status pd__ring_take(pd__pipe *p, int64_t k, int slot) {
    pthread_mutex_lock(&p->mu);
    int64_t had = p->ring_at[slot];
    pd_status st = PD_OK;
    if (had != k) {
        bool busy = had > k || (had >= 0 && !p->remote && p->mbn[had] < p->nmicro);
        st = busy ? pd__err(PD_ERR_INTERNAL, "pipeline: step %lld's rows are needed after step %lld's replaced them "
                            "(a ring of %d steps is too short)", (long long)(had > k ? k : had),
                            (long long)(had > k ? had : k), p->ring)
                  : p->ring_fill(p->ring_ctx, k, slot);
        p->ring_at[slot] = st == PD_OK ? k : -1;
    }
    pthread_mutex_unlock(&p->mu);
    return st;
}

pd_status pd__mb_rows(pd__pipe *p, int i, int mb, pd_tensor *out) {
    const pd_tensor *all = i < 0 || p->g->inputs[i] == p->labels_input ? p->labels : &p->inputs[i];
    if (p->ring) {
        int64_t k = mb / p->nmicro;
        int slot = (int)(k % p->ring);
        PD_TRY(pd__ring_take(p, k, slot));
        mb = slot * p->nmicro + mb % p->nmicro;
    }
    *out = pd__rows(all, p->rows, mb);
    return PD_OK;
}

pd_status pd__pipe_set_ring(pd__pipe *p, int steps, pd__ring_fill fill, void *ctx) {
    if (steps != 0 && (steps < pd__pipe_ring_steps(p) || !fill))
        return pd__err(PD_ERR_INVALID, "pipeline: a ring of %d steps (at least %d, with a fill function)", steps,
                       pd__pipe_ring_steps(p));
    PD_FREE(p->ring_at);
    p->ring_at = NULL;
    if (steps && !(p->ring_at = PD_MALLOC(sizeof(int64_t) * (size_t)steps)))
        return pd__err(PD_ERR_NOMEM, "out of memory");
    p->ring = steps;
    p->ring_fill = fill;
    p->ring_ctx = ctx;
    return PD_OK;
}

/* A stage reads microbatch mb + nslots only once its slot of mb is free,
 * after every stage is done with mb: the steps read at once span at most
 * nslots microbatches, plus the step a replica may lead its peers by. */
int pd__pipe_ring_steps(const pd__pipe *p) { return (p->nslots + p->nmicro - 1) / p->nmicro + 2; }
int pd__pipe_ring(const pd__pipe *p) { return p ? p->ring : 0; }

/* The graph inputs a context's nodes read: microbatch mb's rows copied in. */
static pd_status pd__feed_inputs(pd__pipe *p, pd__actx *c, int mb) {
    const pd_graph *g = p->g;
    for (int i = 0; i < g->ninputs; i++) {
        int t = g->inputs[i];
        pd_tensor rows;
        if (!pd__actx_value(c, t)->data) continue;
        PD_TRY(pd__mb_rows(p, i, mb, &rows));
        memcpy(pd__actx_value(c, t)->data, rows.data, pd__tbytes(g, t));
    }
    return PD_OK;
}

/* Recomputation: before what reads microbatch mb's activations (its B, W,
 * SEND_ACT), its forward again into the chunk's shared slab unless that
 * holds them already: the same inputs (kept by its slot), weights (the slot
 * is bound to its forward's version), Dropout seed; the BatchNorm running
 * statistics, which a training forward updates, put back as they were. */
static pd_status pd__rc_ensure(pd__wk *W, pd__chunk *C, int mb) {
    pd__pipe *p = W->p;
    int slot = mb % p->nslots;
    if (!p->recompute || C->rc_owner == slot) return PD_OK;
    const pd__vstage *S = &p->vs[C->k];
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
static pd_status pd__do_forward(pd__wk *W, pd__chunk *C, int mb, int32_t version) {
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
static float *pd__gslab(const pd__wk *W) { return W->grads ? W->grads : W->p->sl.grads; }

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
static pd_status pd__overlapped_wait(pd__wk *W) {
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
 * gradients (W); overlap: start the gradients' all-reduces as they are made. */
static pd_status pd__do_backward(pd__wk *W, pd__chunk *C, int mb, int32_t version, int part, bool overlap) {
    W->x.seed = pd__mb_seed(W->p, mb); /* Dropout's backward draws its forward's mask again */
    if (W->dev) return pd__dev_backward(W, C, mb, version, part);
    pd__pipe *p = W->p;
    const pd__vstage *S = &p->vs[C->k];
    int32_t *fv = &C->slot_ver[mb % p->nslots];
    if (*fv != version)
        return pd__err(PD_ERR_INTERNAL, "the %s names weight version %d, its forward used %d", part == 2 ? "W" : "B",
                       (int)version, (int)*fv);
    pd__actx *c = C->slot[mb % p->nslots];
    PD_TRY(pd__rc_ensure(W, C, mb)); /* sets the seed too */
    if (overlap) PD_TRY(pd__backward_overlapped(W, S, c, part));
    else if (part == 0) PD_TRY(pd__actx_backward(p->s, &W->x, c, S->bnodes, S->nbnodes));
    else PD_TRY(pd__actx_backward_part(p->s, &W->x, c, S->bnodes, S->nbnodes, part == 2));
    if (part != 1) {
        *fv = -1;
        W->inflight--;
        pd__slot_done(p, C, mb % p->nslots);
    }
    return PD_OK;
}

/* ALLREDUCE: replica 0 sums its worker's replicas' gradients (every replica waits). */

/* Across processes (one thread each): the replicas' gradients summed by the
 * transport, packed in one buffer, so every replica holds the sum. */
static pd_status pd__allreduce_remote(pd__wk *W) {
    pd__pipe *p = W->p;
    if (W->ar_started) return pd__overlapped_wait(W); /* started during the last backward */
    float *G = pd__gslab(W);
    int64_t n = 0;
    for (int c = 0; c < p->nchunks; c++) n += p->vs[W->ch[c].k].packed;
    if (n > W->ared_n) {
        PD_FREE(W->ared);
        if (!(W->ared = PD_MALLOC(sizeof(float) * (size_t)n))) return pd__err(PD_ERR_NOMEM, "out of memory");
        W->ared_n = n;
    }
    for (int pass = 0; pass < 2; pass++) {
        int64_t at = 0;
        for (int c = 0; c < p->nchunks; c++) {
            const pd__vstage *S = &p->vs[W->ch[c].k];
            for (int j = 0; j < S->np; j++) {
                int i = S->params[j];
                size_t b = sizeof(float) * (size_t)p->g->tensors[p->sl.param[i]].numel;
                if (pass == 0) memcpy(W->ared + at + S->pk[j], G + p->sl.poff[i], b);
                else memcpy(G + p->sl.poff[i], W->ared + at + S->pk[j], b);
            }
            at += S->packed;
        }
        if (pass == 0) PD_TRY(p->remote->vt->allreduce(p->remote, W->w, W->ared, n, false));
    }
    return PD_OK;
}

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

static pd_status pd__do_allreduce(pd__wk *W, int mb, bool *stop) {
    pd__pipe *p = W->p;
    if (W->nrep == 1) return PD_OK;
    if (W->dev) return pd__dev_allreduce(W, mb);
    if (p->remote) {
        PD_TRY(pd__allreduce_remote(W));
        pd__scale_grads(W, pd__gslab(W), pd__ared_scale(W, mb));
        return PD_OK;
    }
    if (!pd__barrier(p, W->w)) {
        *stop = true;
        return PD_OK;
    }
    if (W->r == 0) {
        for (int q = 1; q < W->nrep; q++) {
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
        pd__scale_grads(W, p->sl.grads, pd__ared_scale(W, mb));
    }
    if (!pd__barrier(p, W->w)) *stop = true;
    return PD_OK;
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
static bool pd__tied_reader(pd__pipe *p, int k, int i, float **g) {
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

/* The global L2 norm of the update's gradients (every stage's, each counted
 * once): every thread adds its part and waits for the others (under MPI an
 * all-reduce); the parts are added in worker order, so the norm is the same
 * whatever the arrival order, and the same in one process or several. */
pd_status pd__global_norm(pd__wk *W, int64_t t, const float *G, double *norm, bool *stop) {
    pd__pipe *p = W->p;
    double sq = 0;
    if (W->dev && W->r == 0) PD_TRY(pd__gpu_sqnorm(W->dev, &sq)); /* a GPU stage's gradients are on its device */
    for (int c = 0; !W->dev && W->r == 0 && c < p->nchunks; c++) {
        const pd__vstage *S = &p->vs[W->ch[c].k];
        for (int j = 0; j < S->np; j++) {
            int i = S->params[j];
            const float *g = G + p->sl.poff[i];
            for (int64_t e = 0; e < p->g->tensors[p->sl.param[i]].numel; e++) sq += (double)g[e] * g[e];
        }
    }
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

static pd_status pd__do_step(pd__wk *W, int mb, int32_t version, int k, bool *stop) {
    if (W->dev) return pd__dev_step(W, mb, version, k, stop);
    pd__pipe *p = W->p;
    const pd__slabs *sl = &p->sl;
    for (int c = 0; c < p->nchunks; c++)
        if (version != W->ch[c].live + 1)
            return pd__err(PD_ERR_INTERNAL, "STEP makes version %d, the live one is %d", (int)version,
                           (int)W->ch[c].live);
    /* the replicas share the weights, which one of them updates; in
     * processes of their own each updates its copy with the summed gradients */
    bool updater = W->r == 0 || p->remote;
    float *G = pd__gslab(W);
    for (int c = 0; updater && c < p->nchunks; c++) { /* nothing is updated when a gradient is not finite */
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
    if (p->shared && !pd__sched_async(p->kind)) { /* tied weights: every backward done, the owner sums */
        if (!pd__meet_all(p)) {
            *stop = true;
            return PD_OK;
        }
        if (p->remote) PD_TRY(pd__sum_tied_remote(W, stop));
        else pd__sum_shared(W, G);
        if (*stop) return PD_OK;
    }
    if (!pd__sched_async(p->kind)) { /* one update of the whole model: its gradient norm, and clipping */
        double norm = 0;
        PD_TRY(pd__global_norm(W, mb / p->nmicro, G, &norm, stop));
        if (*stop) return PD_OK;
        if (!isfinite(norm)) return pd__err(PD_ERR_NUMERIC, "the gradient norm is %g", norm);
        if (p->res && W->w == p->nworkers - 1 && W->r == 0) p->res[mb / p->nmicro].grad_norm = norm;
        if (p->o.clip_grad_norm > 0 && norm > p->o.clip_grad_norm && updater) { /* as clip_grad_norm_ */
            float cf = (float)(p->o.clip_grad_norm / (norm + 1e-6));
            for (int c = 0; c <= p->nchunks; c++) { /* its chunks' parameters, then its tied copies' (pd__tied_setup) */
                const pd__vstage *S = c < p->nchunks ? &p->vs[W->ch[c].k] : NULL;
                for (int j = 0; j < (S ? S->np : W->ntup); j++) {
                    int i = S ? S->params[j] : W->tup[j];
                    float *g = G + sl->poff[i];
                    for (int64_t e = 0; e < p->g->tensors[sl->param[i]].numel; e++) g[e] *= cf;
                }
            }
        }
    }
    for (int c = 0; c < p->nchunks; c++) PD_TRY(pd__stash_live(p, &W->ch[c], k));
    /* replicas sharing the weights keep their own stashes (2bw): every one has
     * copied the version being replaced before replica 0 writes the next */
    if (W->nrep > 1 && !p->remote && pd__sched_async(p->kind) && !pd__barrier(p, W->w)) {
        *stop = true;
        return PD_OK;
    }
    int64_t t = ++W->updates;
    double lr = pd__lr_at(&p->o, t);
    for (int c = 0; updater && c <= p->nchunks; c++) { /* the same update of a tied copy as its owner's */
        const pd__vstage *S = c < p->nchunks ? &p->vs[W->ch[c].k] : NULL;
        for (int j = 0; j < (S ? S->np : W->ntup); j++) {
            int i = S ? S->params[j] : W->tup[j];
            int64_t off = sl->poff[i], n = p->g->tensors[sl->param[i]].numel;
            pd__optim_step(&p->o, t, lr, sl->params + off, G + off, sl->state0 ? sl->state0 + off : NULL,
                           sl->state1 ? sl->state1 + off : NULL, n);
            memset(G + off, 0, sizeof(float) * (size_t)n);
        }
    }
    if (p->res && W->w == p->nworkers - 1 && W->r == 0) p->res[mb / p->nmicro].lr = lr;
    if (W->nrep > 1 && !p->remote && !pd__barrier(p, W->w)) *stop = true; /* nobody computes on half-updated weights */
    return PD_OK;
}

/* The replica of worker w that runs microbatch mb: i mod replicas for the
 * i-th microbatch of a minibatch; under pipedream (a minibatch is one
 * microbatch) mb mod replicas, PipeDream's round robin. */
static int pd__replica_of(const pd__pipe *p, int w, int mb) {
    return (p->kind == PD_SCHED_PIPEDREAM ? mb : mb % p->nmicro) % p->rep[w];
}

/* The thread at the other end of link l for microbatch mb: the one that
 * receives what a send makes (grad: backward, to virtual stage l), or sends
 * what a receive takes (grad: from l+1). */
int pd__peer(const pd__pipe *p, int l, bool grad, bool sending, int mb) {
    int k = grad == sending ? l : l + 1, w = k % p->nworkers;
    return p->wbase[w] + pd__replica_of(p, w, mb);
}

pd__transport *pd__via(pd__pipe *p, const pd__wk *W, int peer) {
    return p->remote && p->rank_of[peer] != p->rank_of[W - p->wk] ? p->remote : &p->local.base;
}

/* The in-process message of direction dir (0: activations from link k-1,
 * 1: gradients from link k) that slot's views read, back to its queue's
 * pool; the views point at the context's own memory again. */
static void pd__unhold(pd__pipe *p, pd__chunk *C, int slot, int dir) {
    void *b = C->held[2 * slot + dir];
    if (!b) return;
    pd__link *L = &p->link[dir ? C->k : C->k - 1];
    void **o = C->orig + (size_t)slot * (size_t)C->norig + (dir && C->k > 0 ? p->link[C->k - 1].nt : 0);
    pd__actx *c = C->slot[slot];
    for (int q = 0; !dir && q < L->nt; q++) pd__actx_value(c, L->t[q])->data = *o++;
    for (int q = 0; dir && q < L->ngt; q++) pd__actx_grad(c, L->gt[q])->data = *o++;
    for (int q = 0; dir && q < L->nbt; q++) pd__actx_value(c, L->bt[q])->data = *o++;
    C->held[2 * slot + dir] = NULL;
    pd__q_recycle(p, dir ? &L->bwd : &L->fwd, b);
}

/* After the B (W) and the SEND_GRAD of the microbatch in slot: nothing of it
 * reads its messages any more. */
static void pd__slot_done(pd__pipe *p, pd__chunk *C, int slot) {
    if (C->slot_ver[slot] >= 0 || (C->k > 0 && !C->sent[slot])) return;
    pd__unhold(p, C, slot, 0);
    pd__unhold(p, C, slot, 1);
}

/* Packs the link's activations (grad false) or gradients (grad true) of a context. */
static pd_status pd__send(pd__wk *W, pd__chunk *C, int l, bool grad, int mb, bool *stop) {
    if (W->dev) return pd__dev_send(W, C, l, grad, mb, stop);
    pd__pipe *p = W->p;
    const pd__link *L = &p->link[l];
    pd__actx *c = C->slot[mb % p->nslots];
    if (!grad) PD_TRY(pd__rc_ensure(W, C, mb)); /* the values sent back (bipartition) are kept per slot */
    int to = pd__peer(p, l, grad, true, mb);
    pd__transport *t = pd__via(p, W, to);
    size_t n = grad ? L->grad_bytes : L->act_bytes, off = 0;
    char *buf = t->vt->get(t, l, grad, n);
    if (!buf) return pd__err(PD_ERR_NOMEM, "out of memory for a %zu-byte message", n);
    for (int k = 0; k < (grad ? L->ngt + L->nbt : L->nt); k++) {
        int tt = grad ? (k < L->ngt ? L->gt[k] : L->bt[k - L->ngt]) : L->t[k];
        pd_tensor *v = grad && k < L->ngt ? pd__actx_grad(c, tt) : pd__actx_value(c, tt);
        memcpy(buf + off, v->data, pd__tbytes(p->g, tt));
        off += pd__tbytes(p->g, tt);
    }
    PD_TRY(t->vt->send(t, (int)(W - p->wk), to, l, grad, mb, buf, n, stop));
    if (grad) { /* the microbatch's last reader of its messages, unless its W is still to come */
        C->sent[mb % p->nslots] = true;
        pd__slot_done(p, C, mb % p->nslots);
    }
    return PD_OK;
}

static pd_status pd__recv(pd__wk *W, pd__chunk *C, int l, bool grad, int mb, bool *stop) {
    if (W->dev) return pd__dev_recv(W, C, l, grad, mb, stop);
    pd__pipe *p = W->p;
    const pd__link *L = &p->link[l];
    int from = pd__peer(p, l, grad, false, mb);
    pd__transport *t = pd__via(p, W, from);
    size_t n = grad ? L->grad_bytes : L->act_bytes;
    void *buf = NULL;
    PD_TRY(t->vt->recv(t, from, (int)(W - p->wk), l, grad, mb, n, &buf, stop));
    if (*stop) return PD_OK;
    int slot = mb % p->nslots;
    pd__actx *c = C->slot[slot];
    bool hand = t == &p->local.base; /* in process: the views read the buffer itself until the microbatch is done */
    if (hand) pd__unhold(p, C, slot, grad);
    size_t off = 0;
    for (int k = 0; k < (grad ? L->ngt + L->nbt : L->nt); k++) {
        int tt = grad ? (k < L->ngt ? L->gt[k] : L->bt[k - L->ngt]) : L->t[k];
        pd_tensor *v = grad && k < L->ngt ? pd__actx_grad(c, tt) : pd__actx_value(c, tt);
        if (hand) v->data = (char *)buf + off;
        else memcpy(v->data, (char *)buf + off, pd__tbytes(p->g, tt));
        off += pd__tbytes(p->g, tt);
    }
    if (hand) C->held[2 * slot + grad] = buf;
    else t->vt->put(t, l, grad, buf);
    return PD_OK;
}

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
static void pd__snap_decide(pd__pipe *p, int64_t m) {
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
static pd_status pd__snap_pre(pd__wk *W, int64_t b, bool *stop) {
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
static pd_status pd__snap_post(pd__wk *W, int64_t b, bool *stop) {
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
    for (int64_t t = 0, at = 0; t < p->nties; t++) { /* the owner's values, -0.0 elsewhere */
        int64_t m = p->g->tensors[sl->param[p->tie[t].i]].numel;
        bool owner = p->rank_of[p->wbase[p->tie[t].owner % p->nworkers]] == p->rank;
        for (int q = 0; q < 3; q++, at += m)
            for (int64_t e = 0; e < m; e++) v[at + e] = owner && slab[q] ? slab[q][sl->poff[p->tie[t].i] + e] : -0.0f;
    }
    pd_status st = p->remote->vt->allreduce(p->remote, PD__TIED, v, n, false);
    for (int64_t t = 0, at = 0; st == PD_OK && t < p->nties; t++) { /* into the other holders' copies */
        const pd__tie *T = &p->tie[t];
        int64_t m = p->g->tensors[sl->param[T->i]].numel;
        bool owner = p->rank_of[p->wbase[T->owner % p->nworkers]] == p->rank;
        for (int q = 0; q < 3; q++, at += m)
            if (T->here && !owner && slab[q]) memcpy(slab[q] + sl->poff[T->i], v + at, sizeof(float) * (size_t)m);
    }
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
        for (int c = 0; c < p->nchunks; c++) /* the replicas hold the same versions */
            for (int q = 1; q < W->nrep; q++)
                for (int h = 0; h < W->ch[c].nstash; h++) {
                    W[q].ch[c].stash[h].version = W->ch[c].stash[h].version;
                    memcpy(W[q].ch[c].stash[h].w, W->ch[c].stash[h].w, sizeof(float) * (size_t)p->vs[W->ch[c].k].packed);
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

pd_status pd__pipe_run(pd__pipe *p, int64_t minibatches, const pd_tensor *inputs, const pd_tensor *labels,
                       pd_step_result *results) {
    if (!p || !labels || (!inputs && p->g->ninputs > 0))
        return pd__err(PD_ERR_INVALID, "pd__pipe_run: NULL argument");
    if (minibatches < 1 || minibatches > INT32_MAX / p->nmicro)
        return pd__err(PD_ERR_INVALID, "pd__pipe_run: %lld minibatches", (long long)minibatches);
    PD_TRY(pd__pipe_load_stages(p));
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
    pd__schedule *sched = NULL;
    PD_TRY(pd__schedule_build(p->kind, p->nworkers, p->nchunks, p->nmicro, (int)minibatches, p->rep, &sched));
    if (p->vertical_sync) {
        pd_status vs = pd__schedule_vertical_sync(sched);
        if (vs != PD_OK) {
            pd__schedule_free(sched);
            return vs;
        }
    }
    /* per thread and chunk: the last instruction naming each version; nothing in flight */
    pd_status st = pd__run_prepare(p, sched, minibatches);
    if (st == PD_OK && p->resume_b >= minibatches)
        st = pd__err(PD_ERR_INVALID, "pipeline: resuming at step %lld of a run of %lld", (long long)p->resume_b,
                     (long long)minibatches);
    if (st == PD_OK && p->gpu && !p->gready) st = pd__dev_setup(p);
    if (st == PD_OK && p->gpush) st = pd__dev_push(p);
    PD_FREE(p->mbloss);
    PD_FREE(p->mbn);
    if (st == PD_OK && (!(p->mbloss = PD_CALLOC((size_t)(minibatches * p->nmicro) + 1, sizeof(double))) ||
                        !(p->mbn = PD_CALLOC((size_t)minibatches + 1, sizeof(int)))))
        st = pd__err(PD_ERR_NOMEM, "out of memory");
    if (st == PD_OK && p->hooks_on) {
        PD_FREE(p->want);
        if (!(p->want = PD_CALLOC((size_t)minibatches + 1, 1))) st = pd__err(PD_ERR_NOMEM, "out of memory");
        p->decided = p->resume_b;
        p->last_taken = INT64_MIN / 2;
    }
    if (st != PD_OK) {
        pd__schedule_free(sched);
        p->resume_b = 0;
        return st;
    }
    p->nmb = minibatches;
    for (int k = 0; k < p->ring; k++) p->ring_at[k] = -1;
    for (int w = 0; w < p->nworkers; w++) p->bar[w] = (pd__bar){0, 0};
    for (int i = 0; i < 4; i++) p->gn[i].t = -1; /* update indices start again each run */
    p->allbar = (pd__bar){0, 0};
    if (results) memset(results, 0, sizeof *results * (size_t)minibatches);
    p->sched = sched;
    p->inputs = inputs;
    p->labels = labels;
    p->res = results;
    p->abort = false;
    __atomic_store_n(&p->stopped, 0, __ATOMIC_RELEASE);
    p->err = PD_OK;
    pthread_t *th = PD_CALLOC((size_t)p->nwk, sizeof *th);
    int started = 0;
    st = th ? PD_OK : pd__err(PD_ERR_NOMEM, "out of memory");
    p->t0 = pd__ns();
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
    if (st == PD_OK && p->err != PD_OK) st = pd__err(p->err, "%s: %s", g->path, p->errmsg);
    if (st != PD_OK) { /* no half-summed gradients */
        memset(p->sl.grads, 0, sizeof(float) * (size_t)p->sl.total);
        for (int i = 0; i < p->nwk; i++)
            for (int c = 0; c < p->nchunks; c++)
                if (p->wk[i].ch[c].sg) memset(p->wk[i].ch[c].sg, 0, sizeof(float) * (size_t)p->vs[p->wk[i].ch[c].k].spacked);
        for (int i = 0; i < p->nwk; i++)
            pd__wk_zero_grads(p, &p->wk[i]);
    }
    if (st == PD_OK) p->steps += minibatches;
    p->resume_b = 0;
    PD_FREE(th);
    pd__schedule_free(sched);
    p->sched = NULL;
    return st;
}

/* ---- GPU stages (--device cuda; docs/CUDA.md, "The pipeline on GPUs") ----------------------------
 *
 * Every thread of a GPU pipeline has a pd__gpu (pipeline_cuda.h: its CUDA
 * context, its chunks' packed weight, gradient, optimizer-state and stash
 * slabs, a device twin of each slot's activation context) and every link a
 * pd__glink (device message buffers ordered by events; the queues carry
 * their indices). The schedule, the weight-version bookkeeping (live,
 * stash[].version, need_until, slot_ver) and the queues are the CPU
 * pipeline's; F, B, W, SEND, RECV, ALLREDUCE and STEP of a GPU thread run
 * here instead, on the device. Under MPI (one stage replica per process)
 * messages between processes go by NCCL (comm/nccl.h: device buffers, no
 * host copy) and a replicated stage's processes sum their gradients with
 * ncclAllReduce; the MPI transport keeps the rest (failures, the step
 * results, the gradient norm's parts, the final gather). The device side is
 * made at the first run, once pd__pipe_set_ranks has said which threads run
 * here. Not yet: replicas in one process, tied weights, several stages per
 * MPI process, snapshots, AvgPipe (refused with a line naming them). */
