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
 * message is one packed copy of them. Bi-Partition (a node's backward on
 * another stage than its forward; only nodes without parameters): a
 * backward's inputs and outputs count as read by its stage, so a later
 * backward's activations travel forward with the activations, and an earlier
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
 */
#include "pipeline.h"
#include "../core/schedule.h"
#include "optim.h"
#include "session.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct pd__msg {
    int32_t mb;
    void *buf;
} pd__msg;

typedef struct pd__queue {
    pd__msg *ring;
    int cap, head, n;
    void **pool;        /* spent message buffers, reused (all of one link's size): no malloc per message */
    int npool;
} pd__queue;

typedef struct pd__link {
    int *t;            /* tensors carried forward (values) */
    int nt;
    int *gt, ngt;      /* tensors whose gradients are carried backward */
    int *bt, nbt;      /* tensors whose values are carried backward (bipartition) */
    size_t act_bytes;  /* one forward message */
    size_t grad_bytes; /* one backward message: those gradients, then those values */
    pd__queue fwd, bwd;
} pd__link;

typedef struct pd__stash {
    int32_t version;    /* -1: free */
    float *w;           /* the stage's parameters, packed */
} pd__stash;

typedef struct pd__vstage { /* virtual stage k: what it computes */
    int *nodes, nnodes; /* forwards, in topological order */
    int *bnodes, nbnodes; /* backwards (the same nodes unless bipartition) */
    int *params, np;    /* session parameter indices owned */
    int64_t *pk, packed; /* offset of each in a stash; floats in one */
    double act_bytes;   /* one microbatch's activations: its nodes' outputs and what it receives */
} pd__vstage;

typedef struct pd__chunk { /* a virtual stage on one replica of its worker */
    int k;              /* the virtual stage */
    pd__actx **slot;
    int32_t *slot_ver;  /* version of the F in each slot; -1: none in flight */
    pd__stash *stash;
    int nstash;
    int32_t live;       /* version of the live weights (STEPs this run) */
    int *need_until;    /* per version: index of the last F/B/W naming it (this run) */
    int peak_versions;  /* most versions held at once (this run) */
} pd__chunk;

typedef struct pd__ev {
    int64_t t0, t1;     /* ns since the run's start */
    int32_t mb;
    uint8_t op;
    int16_t chunk;
} pd__ev;

typedef struct pd__wk { /* a thread: replica r of worker w */
    struct pd__pipe *p;
    int w, r, nrep;
    pd__chunk *ch;      /* one per chunk */
    pd__exec x;
    float *grads;       /* r > 0: its own gradient slab (the session's layout) */
    int64_t updates;
    pd__ev *ev;
    int nev, evcap;
    int inflight, peak_act;
    double busy_ms;
} pd__wk;

typedef struct pd__bar {
    int n, gen;
} pd__bar;

struct pd__pipe {
    pd_graph *g;
    pd_session *s;
    pd__slabs sl;
    pd_train_options o;
    pd__sched_kind kind;
    bool vertical_sync; /* pipedream: every stage runs a microbatch on stage 0's version */
    int P, V, NV, M, nslots; /* workers, chunks, virtual stages, microbatches */
    int64_t rows;      /* per microbatch */
    int pred, labels_input;
    pd__vstage *vs;    /* NV */
    int *rep;          /* per worker: replicas */
    pd__wk *wk;        /* nwk threads, worker by worker */
    int nwk;
    pd__bar *bar;      /* per worker */
    pd__link *link;    /* NV-1 links */
    int64_t steps;     /* steps done by earlier runs */
    int fail_stage, fail_op, fail_mb; /* test hook: this instruction fails */
    double last_ms;
    /* one run */
    const pd__schedule *sched;
    const pd_tensor *inputs, *labels;
    pd_step_result *res;
    int64_t t0;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool abort;
    pd_status err;
    char errmsg[1024];
};

static int64_t pd__ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

pd_status pd__pipe_set_vertical_sync(pd__pipe *p, bool on) {
    if (on && p->kind != PD_SCHED_PIPEDREAM)
        return pd__err(PD_ERR_INVALID, "--vertical-sync goes with the pipedream schedule, not %s", pd__sched_kind_name(p->kind));
    p->vertical_sync = on;
    return PD_OK;
}

int pd__pipe_stages(const pd__pipe *p) { return p ? p->P : 0; }
void pd__pipe_inject_failure(pd__pipe *p, int stage, int op, int mb) {
    p->fail_stage = stage;
    p->fail_op = op;
    p->fail_mb = mb;
}

void pd__pipe_stats_get(const pd__pipe *p, int s, pd__pipe_stats *out) {
    memset(out, 0, sizeof *out);
    if (!p || s < 0 || s >= p->P) return;
    for (int i = 0; i < p->nwk; i++) {
        const pd__wk *W = &p->wk[i];
        if (W->w != s) continue;
        if (W->busy_ms > out->busy_ms) out->busy_ms = W->busy_ms;
        if (W->peak_act > out->peak_act_mbs) out->peak_act_mbs = W->peak_act;
        for (int c = 0; c < p->V; c++)
            if (W->ch[c].peak_versions > out->peak_versions) out->peak_versions = W->ch[c].peak_versions;
    }
    for (int c = 0; c < p->V; c++) out->act_bytes_per_mb += p->vs[c * p->P + s].act_bytes;
}

int pd__pipe_peak_versions(const pd__pipe *p, int s) {
    pd__pipe_stats st;
    pd__pipe_stats_get(p, s, &st);
    return st.peak_versions;
}

double pd__pipe_last_run_ms(const pd__pipe *p) { return p ? p->last_ms : 0; }
pd_status pd__pipe_slabs(pd__pipe *p, pd__slabs *out) { return pd__session_slabs(p->s, out); }

pd_status pd__pipe_write_trace(const pd__pipe *p, const char *path) {
    if (!p || !path) return pd__err(PD_ERR_INVALID, "pd__pipe_write_trace: NULL argument");
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return pd__err(PD_ERR_NOMEM, "out of memory for the trace");
    fputs("[\n", f);
    bool first = true;
    for (int i = 0; i < p->nwk; i++) {
        const pd__wk *W = &p->wk[i];
        char tn[64];
        if (W->nrep > 1) snprintf(tn, sizeof tn, "stage %d replica %d", W->w, W->r);
        else snprintf(tn, sizeof tn, "stage %d", W->w);
        fprintf(f, "%s{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":%d,\"args\":{\"name\":\"%s\"}}",
                first ? "" : ",\n", i, tn);
        first = false;
        for (int e = 0; e < W->nev; e++) {
            const pd__ev *v = &W->ev[e];
            const char *op = pd__op_name(v->op);
            char name[64];
            if (p->V > 1) snprintf(name, sizeof name, "%s%d.%d", op, (int)v->mb, (int)v->chunk);
            else if (v->op == PD_I_STEP || v->op == PD_I_ALLREDUCE) snprintf(name, sizeof name, "%s", op);
            else snprintf(name, sizeof name, "%s%d", op, (int)v->mb);
            fprintf(f,
                    ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":0,\"tid\":%d,"
                    "\"args\":{\"mb\":%d,\"chunk\":%d}}",
                    name, op, 1e-3 * (double)v->t0, 1e-3 * (double)(v->t1 - v->t0), i, (int)v->mb, (int)v->chunk);
        }
    }
    fputs("\n]\n", f);
    if (fclose(f) != 0 || !buf) {
        free(buf);
        return pd__err(PD_ERR_NOMEM, "out of memory for the trace");
    }
    pd_status st = pd__write_atomic(path, buf, len);
    free(buf);
    return st;
}

static size_t pd__tbytes(const pd_graph *g, int t) {
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

/* The replicas of worker w meet; false when the pipeline was aborted. */
static bool pd__barrier(pd__pipe *p, int w) {
    pd__bar *b = &p->bar[w];
    pthread_mutex_lock(&p->mu);
    int gen = b->gen;
    if (++b->n == p->rep[w]) {
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

/* The first error stops every stage. */
static void pd__fail(pd__pipe *p, const pd__wk *W, const pd__instr *in, pd_status st) {
    pthread_mutex_lock(&p->mu);
    if (!p->abort) {
        char who[64];
        if (W->nrep > 1) snprintf(who, sizeof who, "stage %d (replica %d)", W->w, W->r);
        else snprintf(who, sizeof who, "stage %d", W->w);
        char chunk[32] = "";
        if (p->V > 1) snprintf(chunk, sizeof chunk, " (chunk %d)", (int)in->chunk);
        p->abort = true;
        p->err = st;
        snprintf(p->errmsg, sizeof p->errmsg, "%s, step %lld, %s of microbatch %d%s: %s", who,
                 (long long)(p->steps + in->mb / p->M + 1), pd__op_name(in->op), (int)in->mb, chunk, pd_last_error());
    }
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

/* ---- creation ------------------------------------------------------------------ */

void pd__pipe_destroy(pd__pipe *p) {
    if (!p) return;
    for (int i = 0; p->wk && i < p->nwk; i++) {
        pd__wk *W = &p->wk[i];
        for (int c = 0; W->ch && c < p->V; c++) {
            pd__chunk *C = &W->ch[c];
            for (int k = 0; C->slot && k < p->nslots; k++) pd__actx_destroy(C->slot[k]);
            PD_FREE(C->slot);
            PD_FREE(C->slot_ver);
            for (int k = 0; C->stash && k < C->nstash; k++) PD_FREE(C->stash[k].w);
            PD_FREE(C->stash);
            PD_FREE(C->need_until);
        }
        PD_FREE(W->ch);
        PD_FREE(W->grads);
        PD_FREE(W->ev);
        PD_FREE(W->x.scratch);
    }
    for (int k = 0; p->vs && k < p->NV; k++) {
        PD_FREE(p->vs[k].nodes);
        PD_FREE(p->vs[k].bnodes);
        PD_FREE(p->vs[k].params);
        PD_FREE(p->vs[k].pk);
    }
    for (int l = 0; p->link && l < p->NV - 1; l++) {
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

/* Per tensor (ts: 5 arrays of ntensors): tstage, the virtual stage computing
 * it (-1: none); vlast, the last stage needing its value (a forward reading
 * it, a backward reading or producing it, the loss); gfirst, the stage running
 * its producer's backward, which consumes its gradient; glast, the last stage
 * adding to its gradient (its consumers' backwards, the loss); bfirst, the
 * first stage whose backward needs its value. Checks the plan fits the graph. */
static pd_status pd__assign(pd__pipe *p, const pd_plan *plan, int *ts) {
    const pd_graph *g = p->g;
    int nt = g->ntensors, *tstage = ts, *vlast = ts + nt, *gfirst = ts + 2 * nt, *glast = ts + 3 * nt,
        *bfirst = ts + 4 * nt;
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
        if (s < 0 || s >= p->NV) return pd__err(PD_ERR_INVALID, "plan: node %d has stage %d of %d", i, s, p->NV);
        if (b < 0 || b >= p->NV)
            return pd__err(PD_ERR_INVALID, "plan: node %d has its backward on stage %d of %d", i, b, p->NV);
        if (b != s && p->V > 1)
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
    vlast[p->pred] = glast[p->pred] = p->NV - 1; /* the last stage computes the loss and its gradient */
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
    p->V = V;
    p->NV = plan->n_stages;
    p->P = p->NV / V;
    p->rep = PD_CALLOC((size_t)p->P, sizeof(int));
    p->bar = PD_CALLOC((size_t)p->P, sizeof(pd__bar));
    if (!p->rep || !p->bar) return pd__err(PD_ERR_NOMEM, "out of memory");
    p->nwk = 0;
    for (int w = 0; w < p->P; w++) {
        int r = plan->stage ? plan->stage[w].replicas : 1;
        if (r < 1) r = 1;
        for (int c = 1; c < V; c++)
            if (plan->stage && plan->stage[c * p->P + w].replicas > 1) r = 2;
        if (r > 1 && (V > 1 || pd__sched_async(p->kind)))
            return pd__err(PD_ERR_UNSUPPORTED,
                           "pipeline: stage %d is replicated; replicas run only under gpipe, flush and zb-h1 without "
                           "chunks so far, not %s",
                           w, pd__sched_kind_name(p->kind));
        if (r > 256) return pd__err(PD_ERR_INVALID, "plan: stage %d has %d replicas", w, r);
        p->rep[w] = r;
        p->nwk += r;
    }
    return PD_OK;
}

pd_status pd__pipe_create(pd_graph *g, const pd_plan *plan, const pd_train_options *o, pd__sched_kind kind,
                          int microbatches, pd__pipe **out) {
    if (!g || !plan || !out) return pd__err(PD_ERR_INVALID, "pd__pipe_create: NULL argument");
    if (microbatches < 1) return pd__err(PD_ERR_INVALID, "pipeline: %d microbatches", microbatches);
    if ((unsigned)kind > PD_SCHED_AVGPIPE) return pd__err(PD_ERR_INVALID, "pipeline: unknown schedule %d", (int)kind);
    if (kind == PD_SCHED_PIPEDREAM && microbatches != 1)
        return pd__err(PD_ERR_INVALID, "pipeline: pipedream updates after every microbatch, so a minibatch is one "
                       "microbatch: use 1 microbatch, not %d", microbatches);
    if (o && o->clip_grad_norm > 0)
        return pd__err(PD_ERR_UNSUPPORTED, "pipeline: gradient clipping is not supported yet");
    pd__pipe *p = PD_CALLOC(1, sizeof *p);
    if (!p) return pd__err(PD_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->g = g;
    p->kind = kind;
    p->M = microbatches;
    p->fail_stage = -1;
    int *ts = PD_MALLOC(sizeof(int) * (5 * (size_t)g->ntensors + 1));
    int nt = g->ntensors, *tstage = ts, *vlast = ts + nt, *gfirst = ts + 2 * nt, *glast = ts + 3 * nt,
        *bfirst = ts + 4 * nt;
    pd_status st = ts ? pd__shape(p, plan) : pd__err(PD_ERR_NOMEM, "out of memory");
    if (st != PD_OK) goto fail;
    if (kind == PD_SCHED_INTERLEAVED && microbatches % p->P != 0) {
        st = pd__err(PD_ERR_INVALID,
                     "pipeline: interleaved needs the microbatches (%d) to be a multiple of the %d workers",
                     microbatches, p->P);
        goto fail;
    }
    p->nslots = pd__sched_async(kind) ? microbatches + p->P : microbatches; /* async: at most P in flight */
    if ((st = pd_session_create(g, o, &p->s)) != PD_OK) goto fail;
    p->o = *pd__session_options(p->s);
    pd__session_slabs(p->s, &p->sl);
    p->pred = pd__session_loss_tensor(p->s);
    p->labels_input = pd__session_labels_input(p->s);
    p->rows = g->ninputs > 0 && g->tensors[g->inputs[0]].ndim > 0 ? g->tensors[g->inputs[0]].shape[0] : 1;
    if ((st = pd__assign(p, plan, ts)) != PD_OK) goto fail;
    p->vs = PD_CALLOC((size_t)p->NV, sizeof *p->vs);
    p->wk = PD_CALLOC((size_t)p->nwk, sizeof *p->wk);
    p->link = PD_CALLOC((size_t)p->NV, sizeof *p->link);
    if (!p->vs || !p->wk || !p->link) goto nomem;
    for (int k = 0; k < p->NV; k++) {
        pd__vstage *S = &p->vs[k];
        S->nodes = PD_MALLOC(sizeof(int) * ((size_t)g->nnodes + 1));
        S->bnodes = PD_MALLOC(sizeof(int) * ((size_t)g->nnodes + 1));
        S->params = PD_MALLOC(sizeof(int) * ((size_t)p->sl.np + 1));
        S->pk = PD_MALLOC(sizeof(int64_t) * ((size_t)p->sl.np + 1));
        if (!S->nodes || !S->bnodes || !S->params || !S->pk) goto nomem;
        for (int i = 0; i < g->nnodes; i++)
            if ((plan->bwd_stage ? plan->bwd_stage[i] : plan->fwd_stage[i]) == k) S->bnodes[S->nbnodes++] = i;
        for (int i = 0; i < g->nnodes; i++)
            if (plan->fwd_stage[i] == k) {
                S->nodes[S->nnodes++] = i;
                for (int j = 0; j < g->nodes[i].nout; j++)
                    if (g->nodes[i].out[j] >= 0) S->act_bytes += (double)pd__tbytes(g, g->nodes[i].out[j]);
            }
    }
    /* parameters: each belongs to the one virtual stage that reads it */
    for (int i = 0; i < p->sl.np; i++) {
        int owner = -1, t = p->sl.param[i];
        for (int k = 0; k < g->nnodes; k++)
            for (int j = 0; j < g->nodes[k].nin; j++) {
                if (g->nodes[k].in[j] != t) continue;
                int s = plan->fwd_stage[k];
                if (owner >= 0 && owner != s) {
                    st = pd__err(PD_ERR_UNSUPPORTED, "pipeline: parameter '%s' is read by stages %d and %d (shared "
                                 "weights across stages are not supported yet)", g->tensors[t].name, owner, s);
                    goto fail;
                }
                owner = s;
            }
        if (owner < 0) continue;
        pd__vstage *S = &p->vs[owner];
        S->pk[S->np] = S->packed;
        S->params[S->np++] = i;
        S->packed += g->tensors[t].numel;
    }
    /* threads: replica r of worker w, each with its chunks' contexts */
    for (int w = 0, i = 0; w < p->P; w++)
        for (int r = 0; r < p->rep[w]; r++, i++) {
            pd__wk *W = &p->wk[i];
            W->p = p;
            W->w = w;
            W->r = r;
            W->nrep = p->rep[w];
            W->x.threads = 1;
            W->x.g = g;
            W->x.training = true;
            W->ch = PD_CALLOC((size_t)p->V, sizeof *W->ch);
            if (!W->ch) goto nomem;
            if (r > 0 && !(W->grads = PD_CALLOC((size_t)p->sl.total + 1, sizeof(float)))) goto nomem;
            for (int c = 0; c < p->V; c++) {
                pd__chunk *C = &W->ch[c];
                const pd__vstage *S = &p->vs[c * p->P + w];
                C->k = c * p->P + w;
                C->slot = PD_CALLOC((size_t)p->nslots, sizeof *C->slot);
                C->slot_ver = PD_MALLOC(sizeof(int32_t) * (size_t)p->nslots);
                C->nstash = pd__sched_async(kind) ? p->P + 1 : 0;
                C->stash = PD_CALLOC((size_t)C->nstash + 1, sizeof *C->stash);
                if (!C->slot || !C->slot_ver || !C->stash) goto nomem;
                for (int k = 0; k < p->nslots; k++) {
                    if ((st = pd__actx_create(p->s, &C->slot[k])) != PD_OK) goto fail;
                    for (int j = 0; r > 0 && j < S->np; j++) { /* the replica's own gradients */
                        int pi = S->params[j];
                        pd__actx_grad(C->slot[k], p->sl.param[pi])->data = W->grads + p->sl.poff[pi];
                    }
                }
                for (int k = 0; k < C->nstash; k++) {
                    C->stash[k].version = -1;
                    C->stash[k].w = PD_MALLOC(sizeof(float) * ((size_t)S->packed + 1));
                    if (!C->stash[k].w) goto nomem;
                }
            }
        }
    /* links: activations made at or before virtual stage l (not graph inputs:
     * every stage reads those itself) and read after it */
    for (int l = 0; l + 1 < p->NV; l++) {
        pd__link *L = &p->link[l];
        L->t = PD_MALLOC(sizeof(int) * ((size_t)g->ntensors + 1));
        L->gt = PD_MALLOC(sizeof(int) * ((size_t)g->ntensors + 1));
        L->bt = PD_MALLOC(sizeof(int) * ((size_t)g->ntensors + 1));
        L->fwd.cap = L->bwd.cap = p->M + p->NV;
        L->fwd.ring = PD_CALLOC((size_t)L->fwd.cap, sizeof(pd__msg));
        L->bwd.ring = PD_CALLOC((size_t)L->bwd.cap, sizeof(pd__msg));
        L->fwd.pool = PD_CALLOC((size_t)L->fwd.cap + 2, sizeof(void *));
        L->bwd.pool = PD_CALLOC((size_t)L->bwd.cap + 2, sizeof(void *));
        if (!L->t || !L->gt || !L->bt || !L->fwd.ring || !L->bwd.ring) goto nomem;
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
            }
        }
        p->vs[l + 1].act_bytes += (double)L->act_bytes;
    }
    PD_FREE(ts);
    *out = p;
    return PD_OK;
nomem:
    st = pd__err(PD_ERR_NOMEM, "%s: out of memory building the pipeline", g->path);
fail:
    PD_FREE(ts);
    pd__pipe_destroy(p);
    return st;
}

/* ---- the instructions ------------------------------------------------------------ */

/* Rows of microbatch mb of a tensor holding every microbatch of the run. */
static pd_tensor pd__rows(const pd_tensor *all, int64_t rows, int mb) {
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
static pd_status pd__stash_live(pd__pipe *p, pd__chunk *C, int k) {
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
    for (int j = 0; j < S->np; j++) {
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

static pd_status pd__do_forward(pd__wk *W, pd__chunk *C, int mb, int32_t version) {
    pd__pipe *p = W->p;
    const pd_graph *g = p->g;
    const pd__vstage *S = &p->vs[C->k];
    pd__actx *c = C->slot[mb % p->nslots];
    if (C->slot_ver[mb % p->nslots] >= 0)
        return pd__err(PD_ERR_INTERNAL, "microbatch %d's slot is still in flight", mb);
    PD_TRY(pd__bind(p, C, c, version));
    C->slot_ver[mb % p->nslots] = version;
    if (++W->inflight > W->peak_act) W->peak_act = W->inflight;
    pd__actx_zero_grads_of(p->s, c, S->bnodes, S->nbnodes);
    for (int i = 0; i < g->ninputs; i++) {
        int t = g->inputs[i];
        pd_tensor v = pd__rows(t == p->labels_input ? p->labels : &p->inputs[i], p->rows, mb);
        memcpy(pd__actx_value(c, t)->data, v.data, pd__tbytes(g, t));
    }
    W->x.seed = p->o.seed ^ ((uint64_t)(p->steps * p->M + mb) * 0x9e3779b97f4a7c15ull);
    PD_TRY(pd__actx_forward(p->s, &W->x, c, S->nodes, S->nnodes));
    if (C->k != p->NV - 1) return PD_OK;
    pd_step_result r;
    memset(&r, 0, sizeof r);
    pd_tensor lab = pd__rows(p->labels, p->rows, mb);
    PD_TRY(pd__actx_loss(p->s, c, &lab, 1.0 / p->M, &r));
    if (!isfinite(r.loss)) return pd__err(PD_ERR_NUMERIC, "the loss is %g", r.loss);
    if (p->res) {
        pthread_mutex_lock(&p->mu); /* replicas of the last stage share the results */
        pd_step_result *R = &p->res[mb / p->M];
        R->loss += r.loss / p->M;
        R->correct += r.correct;
        R->count += r.count;
        pthread_mutex_unlock(&p->mu);
    }
    return PD_OK;
}

/* part: 0 the whole backward (B), 1 input gradients (split B), 2 weight gradients (W). */
static pd_status pd__do_backward(pd__wk *W, pd__chunk *C, int mb, int32_t version, int part) {
    pd__pipe *p = W->p;
    const pd__vstage *S = &p->vs[C->k];
    int32_t *fv = &C->slot_ver[mb % p->nslots];
    if (*fv != version)
        return pd__err(PD_ERR_INTERNAL, "the %s names weight version %d, its forward used %d", part == 2 ? "W" : "B",
                       (int)version, (int)*fv);
    pd__actx *c = C->slot[mb % p->nslots];
    if (part == 0) PD_TRY(pd__actx_backward(p->s, &W->x, c, S->bnodes, S->nbnodes));
    else PD_TRY(pd__actx_backward_part(p->s, &W->x, c, S->bnodes, S->nbnodes, part == 2));
    if (part != 1) {
        *fv = -1;
        W->inflight--;
    }
    return PD_OK;
}

/* ALLREDUCE: replica 0 sums its worker's replicas' gradients (every replica waits). */
static pd_status pd__do_allreduce(pd__wk *W, bool *stop) {
    pd__pipe *p = W->p;
    if (W->nrep == 1) return PD_OK;
    if (!pd__barrier(p, W->w)) {
        *stop = true;
        return PD_OK;
    }
    if (W->r == 0) {
        for (int q = 1; q < W->nrep; q++) {
            float *gr = W[q].grads;
            for (int c = 0; c < p->V; c++) {
                const pd__vstage *S = &p->vs[W->ch[c].k];
                for (int j = 0; j < S->np; j++) {
                    int i = S->params[j];
                    int64_t off = p->sl.poff[i], n = p->g->tensors[p->sl.param[i]].numel;
                    for (int64_t e = 0; e < n; e++) p->sl.grads[off + e] += gr[off + e];
                    memset(gr + off, 0, sizeof(float) * (size_t)n);
                }
            }
        }
    }
    if (!pd__barrier(p, W->w)) *stop = true;
    return PD_OK;
}

static pd_status pd__do_step(pd__wk *W, int mb, int32_t version, int k, bool *stop) {
    pd__pipe *p = W->p;
    const pd__slabs *sl = &p->sl;
    for (int c = 0; c < p->V; c++)
        if (version != W->ch[c].live + 1)
            return pd__err(PD_ERR_INTERNAL, "STEP makes version %d, the live one is %d", (int)version,
                           (int)W->ch[c].live);
    for (int c = 0; W->r == 0 && c < p->V; c++) { /* nothing is updated when a gradient is not finite */
        const pd__vstage *S = &p->vs[W->ch[c].k];
        for (int j = 0; j < S->np; j++) {
            int i = S->params[j];
            const float *g = sl->grads + sl->poff[i];
            for (int64_t e = 0; e < p->g->tensors[sl->param[i]].numel; e++)
                if (!isfinite(g[e]))
                    return pd__err(PD_ERR_NUMERIC, "the gradient of '%s' is %g", p->g->tensors[sl->param[i]].name,
                                   (double)g[e]);
        }
    }
    for (int c = 0; c < p->V; c++) PD_TRY(pd__stash_live(p, &W->ch[c], k));
    int64_t t = ++W->updates;
    double lr = pd__lr_at(&p->o, t);
    for (int c = 0; W->r == 0 && c < p->V; c++) { /* the replicas share the weights: one updates them */
        const pd__vstage *S = &p->vs[W->ch[c].k];
        for (int j = 0; j < S->np; j++) {
            int i = S->params[j];
            int64_t off = sl->poff[i], n = p->g->tensors[sl->param[i]].numel;
            pd__optim_step(&p->o, t, lr, sl->params + off, sl->grads + off, sl->state0 ? sl->state0 + off : NULL,
                           sl->state1 ? sl->state1 + off : NULL, n);
            memset(sl->grads + off, 0, sizeof(float) * (size_t)n);
        }
    }
    if (p->res && W->w == p->P - 1 && W->r == 0) p->res[mb / p->M].lr = lr;
    if (W->nrep > 1 && !pd__barrier(p, W->w)) *stop = true; /* nobody computes on half-updated weights */
    return PD_OK;
}

/* Packs the link's activations (grad false) or gradients (grad true) of a context. */
static pd_status pd__send(pd__pipe *p, pd__chunk *C, int l, bool grad, int mb, pd__queue *q) {
    const pd__link *L = &p->link[l];
    pd__actx *c = C->slot[mb % p->nslots];
    size_t n = grad ? L->grad_bytes : L->act_bytes, off = 0;
    char *buf = pd__q_buf(p, q, n);
    if (!buf) return pd__err(PD_ERR_NOMEM, "out of memory for a %zu-byte message", n);
    for (int k = 0; k < (grad ? L->ngt + L->nbt : L->nt); k++) {
        int t = grad ? (k < L->ngt ? L->gt[k] : L->bt[k - L->ngt]) : L->t[k];
        pd_tensor *v = grad && k < L->ngt ? pd__actx_grad(c, t) : pd__actx_value(c, t);
        memcpy(buf + off, v->data, pd__tbytes(p->g, t));
        off += pd__tbytes(p->g, t);
    }
    pd__msg m = {mb, buf};
    if (!pd__q_push(p, q, m)) PD_FREE(buf); /* aborted: the stage that failed reports */
    return PD_OK;
}

static pd_status pd__recv(pd__pipe *p, pd__chunk *C, int l, bool grad, int mb, pd__queue *q, bool *stop) {
    const pd__link *L = &p->link[l];
    pd__msg m;
    if (!pd__q_pop(p, q, mb, &m)) {
        *stop = true;
        return PD_OK;
    }
    pd__actx *c = C->slot[mb % p->nslots];
    size_t off = 0;
    for (int k = 0; k < (grad ? L->ngt + L->nbt : L->nt); k++) {
        int t = grad ? (k < L->ngt ? L->gt[k] : L->bt[k - L->ngt]) : L->t[k];
        pd_tensor *v = grad && k < L->ngt ? pd__actx_grad(c, t) : pd__actx_value(c, t);
        memcpy(v->data, (char *)m.buf + off, pd__tbytes(p->g, t));
        off += pd__tbytes(p->g, t);
    }
    pd__q_recycle(p, q, m.buf);
    return PD_OK;
}

/* Instruction k of thread W; *stop: the pipeline was aborted while it waited. */
static pd_status pd__instr_run(pd__wk *W, int k, bool *stop) {
    pd__pipe *p = W->p;
    const pd__instr *in = &p->sched->ins[W->w][k];
    if (in->chunk < 0 || in->chunk >= p->V)
        return pd__err(PD_ERR_INTERNAL, "instruction %d names chunk %d of %d", k, (int)in->chunk, p->V);
    pd__chunk *C = &W->ch[in->chunk];
    int v = C->k;
    if (W->w == p->fail_stage && in->op == p->fail_op && in->mb == p->fail_mb)
        return pd__err(PD_ERR_INTERNAL, "injected failure");
    switch (in->op) {
    case PD_I_F: return pd__do_forward(W, C, in->mb, in->version);
    case PD_I_B: return pd__do_backward(W, C, in->mb, in->version, in->split ? 1 : 0);
    case PD_I_W: return pd__do_backward(W, C, in->mb, in->version, 2);
    case PD_I_SEND_ACT: return pd__send(p, C, v, false, in->mb, &p->link[v].fwd);
    case PD_I_RECV_ACT: return pd__recv(p, C, v - 1, false, in->mb, &p->link[v - 1].fwd, stop);
    case PD_I_SEND_GRAD: return pd__send(p, C, v - 1, true, in->mb, &p->link[v - 1].bwd);
    case PD_I_RECV_GRAD: return pd__recv(p, C, v, true, in->mb, &p->link[v].bwd, stop);
    case PD_I_ALLREDUCE: return pd__do_allreduce(W, stop);
    case PD_I_STEP: return pd__do_step(W, in->mb, in->version, k, stop);
    default: return pd__err(PD_ERR_UNSUPPORTED, "instruction %s is not supported yet", pd__op_name(in->op));
    }
}

/* A replica takes microbatch i of each minibatch when i mod replicas is its index. */
static bool pd__mine(const pd__wk *W, const pd__instr *in) {
    if (W->nrep == 1 || in->op == PD_I_ALLREDUCE || in->op == PD_I_STEP) return true;
    return (in->mb % W->p->M) % W->nrep == W->r;
}

static void *pd__stage_main(void *arg) {
    pd__wk *W = arg;
    pd__pipe *p = W->p;
    for (int k = 0; k < p->sched->len[W->w]; k++) {
        const pd__instr *in = &p->sched->ins[W->w][k];
        if (!pd__mine(W, in)) continue;
        bool stop = false;
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
        pthread_mutex_lock(&p->mu);
        stop = p->abort;
        pthread_mutex_unlock(&p->mu);
        if (stop) break;
    }
    return NULL;
}

pd_status pd__pipe_run(pd__pipe *p, int64_t minibatches, const pd_tensor *inputs, const pd_tensor *labels,
                       pd_step_result *results) {
    if (!p || !labels || (!inputs && p->g->ninputs > 0))
        return pd__err(PD_ERR_INVALID, "pd__pipe_run: NULL argument");
    if (minibatches < 1 || minibatches > INT32_MAX / p->M)
        return pd__err(PD_ERR_INVALID, "pd__pipe_run: %lld minibatches", (long long)minibatches);
    const pd_graph *g = p->g;
    int64_t need = minibatches * p->M * p->rows;
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
    PD_TRY(pd__schedule_build(p->kind, p->P, p->V, p->M, (int)minibatches, p->rep, &sched));
    if (p->vertical_sync) {
        pd_status vs = pd__schedule_vertical_sync(sched);
        if (vs != PD_OK) {
            pd__schedule_free(sched);
            return vs;
        }
    }
    /* per thread and chunk: the last instruction naming each version; nothing in flight */
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
        if (W->grads) memset(W->grads, 0, sizeof(float) * (size_t)p->sl.total);
        for (int c = 0; c < p->V && st == PD_OK; c++) {
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
                if (!names || in->chunk != c) continue;
                if (in->version < 0 || in->version >= nv) {
                    st = pd__err(PD_ERR_INTERNAL, "stage %d, instruction %d names weight version %d", W->w, k,
                                 (int)in->version);
                    break;
                }
                C->need_until[in->version] = k;
            }
            for (int k = 0; k < p->nslots; k++) C->slot_ver[k] = -1;
            for (int k = 0; k < C->nstash; k++) C->stash[k].version = -1;
            C->live = 0;
            C->peak_versions = 1;
        }
    }
    if (st != PD_OK) {
        pd__schedule_free(sched);
        return st;
    }
    for (int w = 0; w < p->P; w++) p->bar[w] = (pd__bar){0, 0};
    if (results) memset(results, 0, sizeof *results * (size_t)minibatches);
    p->sched = sched;
    p->inputs = inputs;
    p->labels = labels;
    p->res = results;
    p->abort = false;
    p->err = PD_OK;
    pthread_t *th = PD_CALLOC((size_t)p->nwk, sizeof *th);
    int started = 0;
    st = th ? PD_OK : pd__err(PD_ERR_NOMEM, "out of memory");
    p->t0 = pd__ns();
    for (int i = 0; st == PD_OK && i < p->nwk; i++) {
        if (pthread_create(&th[i], NULL, pd__stage_main, &p->wk[i]) != 0) {
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
    p->last_ms = 1e-6 * (double)(pd__ns() - p->t0);
    for (int l = 0; l + 1 < p->NV; l++) {
        pd__q_drain(&p->link[l].fwd);
        pd__q_drain(&p->link[l].bwd);
    }
    if (st == PD_OK && p->err != PD_OK) st = pd__err(p->err, "%s: %s", g->path, p->errmsg);
    if (st != PD_OK) { /* no half-summed gradients */
        memset(p->sl.grads, 0, sizeof(float) * (size_t)p->sl.total);
        for (int i = 0; i < p->nwk; i++)
            if (p->wk[i].grads) memset(p->wk[i].grads, 0, sizeof(float) * (size_t)p->sl.total);
    }
    if (st == PD_OK) p->steps += minibatches;
    PD_FREE(th);
    pd__schedule_free(sched);
    p->sched = NULL;
    return st;
}
