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
 * and, backward, their gradients. A message is one packed copy of them.
 */
#include "pipeline.h"
#include "../core/schedule.h"
#include "optim.h"
#include "session.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

typedef struct pd__msg {
    int32_t mb;
    void *buf;
} pd__msg;

typedef struct pd__queue {
    pd__msg *ring;
    int cap, head, n;
} pd__queue;

typedef struct pd__link {
    int *t;            /* tensors carried forward */
    int nt;
    size_t act_bytes;  /* one forward message */
    size_t grad_bytes; /* one backward message: the gradients of those that have one */
    pd__queue fwd, bwd;
} pd__link;

typedef struct pd__stash {
    int32_t version;    /* -1: free */
    float *w;           /* the stage's parameters, packed */
} pd__stash;

typedef struct pd__pstage {
    int *nodes, nnodes; /* in topological order */
    int *params, np;    /* session parameter indices owned */
    int64_t *pk, packed; /* offset of each in a stash; floats in one */
    pd__actx **slot;
    int32_t *slot_ver;  /* version of the F in each slot; -1: none in flight */
    pd__stash *stash;
    int nstash;
    int32_t live;       /* version of the live weights (STEPs this run) */
    int *need_until;    /* per version: index of the last F/B naming it (this run) */
    int peak_versions;  /* most versions held at once (this run) */
    pd__exec x;
    int64_t updates;
} pd__pstage;

struct pd__pipe {
    pd_graph *g;
    pd_session *s;
    pd__slabs sl;
    pd_train_options o;
    pd__sched_kind kind;
    int P, M, nslots;
    int64_t rows;      /* per microbatch */
    int pred, labels_input;
    pd__pstage *st;
    pd__link *link;    /* P-1 links */
    int64_t steps;     /* steps done by earlier runs */
    int fail_stage, fail_op, fail_mb; /* test hook: this instruction fails */
    /* one run */
    const pd__schedule *sched;
    const pd_tensor *inputs, *labels;
    pd_step_result *res;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool abort;
    pd_status err;
    char errmsg[1024];
};

int pd__pipe_stages(const pd__pipe *p) { return p ? p->P : 0; }
void pd__pipe_inject_failure(pd__pipe *p, int stage, int op, int mb) {
    p->fail_stage = stage;
    p->fail_op = op;
    p->fail_mb = mb;
}

int pd__pipe_peak_versions(const pd__pipe *p, int s) { return p && s >= 0 && s < p->P ? p->st[s].peak_versions : 0; }

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

static bool pd__q_pop(pd__pipe *p, pd__queue *q, pd__msg *m) {
    pthread_mutex_lock(&p->mu);
    while (q->n == 0 && !p->abort) pthread_cond_wait(&p->cv, &p->mu);
    bool ok = !p->abort;
    if (ok) {
        *m = q->ring[q->head];
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

/* The first error stops every stage. */
static void pd__fail(pd__pipe *p, int stage, const pd__instr *in, pd_status st) {
    pthread_mutex_lock(&p->mu);
    if (!p->abort) {
        p->abort = true;
        p->err = st;
        snprintf(p->errmsg, sizeof p->errmsg, "stage %d, step %lld, %s of microbatch %d: %s", stage,
                 (long long)(p->steps + in->mb / p->M + 1), pd__op_name(in->op), (int)in->mb, pd_last_error());
    }
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

/* ---- creation ------------------------------------------------------------------ */

void pd__pipe_destroy(pd__pipe *p) {
    if (!p) return;
    for (int s = 0; p->st && s < p->P; s++) {
        pd__pstage *S = &p->st[s];
        for (int k = 0; S->slot && k < p->nslots; k++) pd__actx_destroy(S->slot[k]);
        PD_FREE(S->slot);
        PD_FREE(S->slot_ver);
        for (int k = 0; S->stash && k < S->nstash; k++) PD_FREE(S->stash[k].w);
        PD_FREE(S->stash);
        PD_FREE(S->pk);
        PD_FREE(S->need_until);
        PD_FREE(S->nodes);
        PD_FREE(S->params);
        PD_FREE(S->x.scratch);
    }
    for (int l = 0; p->link && l < p->P - 1; l++) {
        pd__q_drain(&p->link[l].fwd);
        pd__q_drain(&p->link[l].bwd);
        PD_FREE(p->link[l].fwd.ring);
        PD_FREE(p->link[l].bwd.ring);
        PD_FREE(p->link[l].t);
    }
    PD_FREE(p->st);
    PD_FREE(p->link);
    pd_session_destroy(p->s);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    PD_FREE(p);
}

/* Which stage each node and tensor belongs to; checks the plan fits the graph. */
static pd_status pd__assign(pd__pipe *p, const pd_plan *plan, int *tstage, int *last_use) {
    const pd_graph *g = p->g;
    if (plan->n_nodes != g->nnodes)
        return pd__err(PD_ERR_INVALID, "%s: the plan has %d nodes, the model %d", g->path, plan->n_nodes, g->nnodes);
    if (plan->chunks > 1) return pd__err(PD_ERR_UNSUPPORTED, "pipeline: virtual stages (chunks) are not supported yet");
    for (int s = 0; s < plan->n_stages; s++)
        if (plan->stage[s].replicas > 1)
            return pd__err(PD_ERR_UNSUPPORTED, "pipeline: stage %d is replicated; replicas are not supported yet", s);
    for (int t = 0; t < g->ntensors; t++) {
        tstage[t] = g->tensors[t].producer >= 0 ? plan->fwd_stage[g->tensors[t].producer] : -1;
        last_use[t] = -1;
    }
    for (int i = 0; i < g->nnodes; i++) {
        const pd__node *n = &g->nodes[i];
        int s = plan->fwd_stage[i];
        if (s < 0 || s >= p->P) return pd__err(PD_ERR_INVALID, "plan: node %d has stage %d of %d", i, s, p->P);
        if (plan->bwd_stage && plan->bwd_stage[i] != s)
            return pd__err(PD_ERR_UNSUPPORTED, "pipeline: node '%s' has its backward on another stage (bipartition)",
                           n->name);
        for (int j = 0; j < n->nin; j++) {
            int t = n->in[j];
            if (t < 0) continue;
            if (tstage[t] > s)
                return pd__err(PD_ERR_INVALID, "plan: node '%s' (stage %d) reads '%s' of a later stage %d", n->name, s,
                               g->tensors[t].name, tstage[t]);
            if (s > last_use[t]) last_use[t] = s;
        }
    }
    last_use[p->pred] = p->P - 1; /* the last stage computes the loss */
    return PD_OK;
}

pd_status pd__pipe_create(pd_graph *g, const pd_plan *plan, const pd_train_options *o, pd__sched_kind kind,
                          int microbatches, pd__pipe **out) {
    if (!g || !plan || !out) return pd__err(PD_ERR_INVALID, "pd__pipe_create: NULL argument");
    if (microbatches < 1) return pd__err(PD_ERR_INVALID, "pipeline: %d microbatches", microbatches);
    if (kind != PD_SCHED_GPIPE && kind != PD_SCHED_FLUSH && kind != PD_SCHED_PIPEDREAM && kind != PD_SCHED_2BW)
        return pd__err(PD_ERR_UNSUPPORTED,
                       "pipeline: schedule '%s' is not supported yet (gpipe, flush, pipedream, 2bw)",
                       pd__sched_kind_name(kind));
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
    p->P = plan->n_stages;
    p->M = microbatches;
    p->fail_stage = -1;
    p->nslots = pd__sched_async(kind) ? microbatches + p->P : microbatches; /* async: at most P in flight */
    int *tstage = PD_MALLOC(sizeof(int) * ((size_t)g->ntensors + 1));
    int *last_use = PD_MALLOC(sizeof(int) * ((size_t)g->ntensors + 1));
    pd_status st = tstage && last_use ? pd_session_create(g, o, &p->s) : pd__err(PD_ERR_NOMEM, "out of memory");
    if (st != PD_OK) goto fail;
    p->o = *pd__session_options(p->s);
    pd__session_slabs(p->s, &p->sl);
    p->pred = pd__session_loss_tensor(p->s);
    p->labels_input = pd__session_labels_input(p->s);
    p->rows = g->ninputs > 0 && g->tensors[g->inputs[0]].ndim > 0 ? g->tensors[g->inputs[0]].shape[0] : 1;
    if ((st = pd__assign(p, plan, tstage, last_use)) != PD_OK) goto fail;
    p->st = PD_CALLOC((size_t)p->P, sizeof *p->st);
    p->link = PD_CALLOC((size_t)p->P, sizeof *p->link);
    if (!p->st || !p->link) goto nomem;
    for (int s = 0; s < p->P; s++) {
        pd__pstage *S = &p->st[s];
        S->nodes = PD_MALLOC(sizeof(int) * ((size_t)g->nnodes + 1));
        S->params = PD_MALLOC(sizeof(int) * ((size_t)p->sl.np + 1));
        S->slot = PD_CALLOC((size_t)p->nslots, sizeof *S->slot);
        S->slot_ver = PD_MALLOC(sizeof(int32_t) * (size_t)p->nslots);
        S->pk = PD_MALLOC(sizeof(int64_t) * ((size_t)p->sl.np + 1));
        S->nstash = pd__sched_async(kind) ? p->P + 1 : 0;
        S->stash = PD_CALLOC((size_t)S->nstash + 1, sizeof *S->stash);
        if (!S->nodes || !S->params || !S->slot || !S->slot_ver || !S->pk || !S->stash) goto nomem;
        for (int i = 0; i < g->nnodes; i++)
            if (plan->fwd_stage[i] == s) S->nodes[S->nnodes++] = i;
        for (int k = 0; k < p->nslots; k++)
            if ((st = pd__actx_create(p->s, &S->slot[k])) != PD_OK) goto fail;
        S->x.threads = 1;
        S->x.g = g;
        S->x.training = true;
    }
    /* parameters: each belongs to the one stage that reads it */
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
        pd__pstage *S = &p->st[owner];
        S->pk[S->np] = S->packed;
        S->params[S->np++] = i;
        S->packed += g->tensors[t].numel;
    }
    for (int s = 0; s < p->P; s++)
        for (int k = 0; k < p->st[s].nstash; k++) {
            p->st[s].stash[k].version = -1;
            p->st[s].stash[k].w = PD_MALLOC(sizeof(float) * ((size_t)p->st[s].packed + 1));
            if (!p->st[s].stash[k].w) goto nomem;
        }
    /* links: activations made at or before stage l (not graph inputs: every
     * stage reads those itself) and read after it */
    for (int l = 0; l + 1 < p->P; l++) {
        pd__link *L = &p->link[l];
        L->t = PD_MALLOC(sizeof(int) * ((size_t)g->ntensors + 1));
        L->fwd.cap = L->bwd.cap = p->M + p->P;
        L->fwd.ring = PD_CALLOC((size_t)L->fwd.cap, sizeof(pd__msg));
        L->bwd.ring = PD_CALLOC((size_t)L->bwd.cap, sizeof(pd__msg));
        if (!L->t || !L->fwd.ring || !L->bwd.ring) goto nomem;
        for (int t = 0; t < g->ntensors; t++) {
            if (tstage[t] < 0 || tstage[t] > l || last_use[t] <= l) continue;
            L->t[L->nt++] = t;
            L->act_bytes += pd__tbytes(g, t);
            if (pd__session_needs_grad(p->s, t)) L->grad_bytes += pd__tbytes(g, t);
        }
    }
    PD_FREE(tstage);
    PD_FREE(last_use);
    *out = p;
    return PD_OK;
nomem:
    st = pd__err(PD_ERR_NOMEM, "%s: out of memory building the pipeline", g->path);
fail:
    PD_FREE(tstage);
    PD_FREE(last_use);
    pd__pipe_destroy(p);
    return st;
}

/* ---- the instructions ------------------------------------------------------------ */

static pd__actx *pd__slot(pd__pipe *p, int s, int mb) { return p->st[s].slot[mb % p->nslots]; }

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
static pd_status pd__bind(pd__pipe *p, int s, pd__actx *c, int32_t v) {
    pd__pstage *S = &p->st[s];
    const float *base = NULL;
    for (int k = 0; v != S->live && k < S->nstash; k++)
        if (S->stash[k].version == v) base = S->stash[k].w;
    if (v != S->live && !base)
        return pd__err(PD_ERR_INTERNAL, "weight version %d is not held (the live one is %d)", (int)v, (int)S->live);
    for (int k = 0; k < S->np; k++) {
        int i = S->params[k];
        pd__actx_value(c, p->sl.param[i])->data = base ? (float *)base + S->pk[k] : p->sl.params + p->sl.poff[i];
    }
    return PD_OK;
}

/* Before the live weights become version live+1: keep version live in a stash
 * while an instruction after index k still names it. */
static pd_status pd__stash_live(pd__pipe *p, int s, int k) {
    pd__pstage *S = &p->st[s];
    int32_t v = S->live;
    S->live = v + 1;
    if (S->need_until[v] <= k) return PD_OK;
    pd__stash *h = NULL;
    int held = 1;
    for (int j = 0; j < S->nstash; j++) {
        if (S->stash[j].version < 0 && !h) h = &S->stash[j];
        held += S->stash[j].version >= 0;
    }
    if (!h) return pd__err(PD_ERR_INTERNAL, "more than %d weight versions held", S->nstash + 1);
    h->version = v;
    for (int j = 0; j < S->np; j++) {
        int i = S->params[j];
        size_t n = (size_t)p->g->tensors[p->sl.param[i]].numel;
        memcpy(h->w + S->pk[j], p->sl.params + p->sl.poff[i], sizeof(float) * n);
    }
    if (held + 1 > S->peak_versions) S->peak_versions = held + 1;
    for (int j = 0; j < p->nslots; j++)
        if (S->slot_ver[j] == v) PD_TRY(pd__bind(p, s, S->slot[j], v));
    return PD_OK;
}

/* After instruction k naming version v: free v's stash when nothing later names it. */
static void pd__release(pd__pstage *S, int32_t v, int k) {
    if (S->need_until[v] != k) return;
    for (int j = 0; j < S->nstash; j++)
        if (S->stash[j].version == v) S->stash[j].version = -1;
}

/* ---- compute ---- */

static pd_status pd__do_forward(pd__pipe *p, int s, int mb, int32_t version) {
    const pd_graph *g = p->g;
    pd__pstage *S = &p->st[s];
    pd__actx *c = pd__slot(p, s, mb);
    if (S->slot_ver[mb % p->nslots] >= 0)
        return pd__err(PD_ERR_INTERNAL, "microbatch %d's slot is still in flight", mb);
    PD_TRY(pd__bind(p, s, c, version));
    S->slot_ver[mb % p->nslots] = version;
    pd__actx_zero_grads(c);
    for (int i = 0; i < g->ninputs; i++) {
        int t = g->inputs[i];
        pd_tensor v = pd__rows(t == p->labels_input ? p->labels : &p->inputs[i], p->rows, mb);
        memcpy(pd__actx_value(c, t)->data, v.data, pd__tbytes(g, t));
    }
    S->x.seed = p->o.seed ^ ((uint64_t)(p->steps * p->M + mb) * 0x9e3779b97f4a7c15ull);
    PD_TRY(pd__actx_forward(p->s, &S->x, c, S->nodes, S->nnodes));
    if (s != p->P - 1) return PD_OK;
    pd_step_result r;
    memset(&r, 0, sizeof r);
    pd_tensor lab = pd__rows(p->labels, p->rows, mb);
    PD_TRY(pd__actx_loss(p->s, c, &lab, 1.0 / p->M, &r));
    if (!isfinite(r.loss)) return pd__err(PD_ERR_NUMERIC, "the loss is %g", r.loss);
    if (p->res) {
        pd_step_result *R = &p->res[mb / p->M];
        R->loss += r.loss / p->M;
        R->correct += r.correct;
        R->count += r.count;
    }
    return PD_OK;
}

static pd_status pd__do_backward(pd__pipe *p, int s, int mb, int32_t version) {
    pd__pstage *S = &p->st[s];
    int32_t *fv = &S->slot_ver[mb % p->nslots];
    if (*fv != version)
        return pd__err(PD_ERR_INTERNAL, "the backward names weight version %d, its forward used %d", (int)version,
                       (int)*fv);
    PD_TRY(pd__actx_backward(p->s, &S->x, pd__slot(p, s, mb), S->nodes, S->nnodes));
    *fv = -1;
    return PD_OK;
}

static pd_status pd__do_step(pd__pipe *p, int s, int mb, int32_t version, int k) {
    pd__pstage *S = &p->st[s];
    const pd__slabs *sl = &p->sl;
    if (version != S->live + 1)
        return pd__err(PD_ERR_INTERNAL, "STEP makes version %d, the live one is %d", (int)version, (int)S->live);
    for (int j = 0; j < S->np; j++) { /* nothing is updated when a gradient is not finite */
        int i = S->params[j];
        const float *g = sl->grads + sl->poff[i];
        for (int64_t e = 0; e < p->g->tensors[sl->param[i]].numel; e++)
            if (!isfinite(g[e]))
                return pd__err(PD_ERR_NUMERIC, "the gradient of '%s' is %g", p->g->tensors[sl->param[i]].name,
                               (double)g[e]);
    }
    PD_TRY(pd__stash_live(p, s, k));
    int64_t t = ++S->updates;
    double lr = pd__lr_at(&p->o, t);
    for (int j = 0; j < S->np; j++) {
        int i = S->params[j];
        int64_t off = sl->poff[i], n = p->g->tensors[sl->param[i]].numel;
        pd__optim_step(&p->o, t, lr, sl->params + off, sl->grads + off, sl->state0 ? sl->state0 + off : NULL,
                       sl->state1 ? sl->state1 + off : NULL, n);
        memset(sl->grads + off, 0, sizeof(float) * (size_t)n);
    }
    if (p->res && s == p->P - 1) p->res[mb / p->M].lr = lr;
    return PD_OK;
}

/* Packs the link's activations (grad false) or gradients (grad true) of a context. */
static pd_status pd__send(pd__pipe *p, int s, int l, bool grad, int mb, pd__queue *q) {
    const pd__link *L = &p->link[l];
    pd__actx *c = pd__slot(p, s, mb);
    size_t n = grad ? L->grad_bytes : L->act_bytes, off = 0;
    char *buf = PD_MALLOC(n ? n : 1);
    if (!buf) return pd__err(PD_ERR_NOMEM, "out of memory for a %zu-byte message", n);
    for (int k = 0; k < L->nt; k++) {
        int t = L->t[k];
        if (grad && !pd__session_needs_grad(p->s, t)) continue;
        pd_tensor *v = grad ? pd__actx_grad(c, t) : pd__actx_value(c, t);
        memcpy(buf + off, v->data, pd__tbytes(p->g, t));
        off += pd__tbytes(p->g, t);
    }
    pd__msg m = {mb, buf};
    if (!pd__q_push(p, q, m)) PD_FREE(buf); /* aborted: the stage that failed reports */
    return PD_OK;
}

static pd_status pd__recv(pd__pipe *p, int s, int l, bool grad, int mb, pd__queue *q, bool *stop) {
    const pd__link *L = &p->link[l];
    pd__msg m;
    if (!pd__q_pop(p, q, &m)) {
        *stop = true;
        return PD_OK;
    }
    if (m.mb != mb) {
        PD_FREE(m.buf);
        return pd__err(PD_ERR_INTERNAL, "received microbatch %d where %d was expected", (int)m.mb, mb);
    }
    pd__actx *c = pd__slot(p, s, mb);
    size_t off = 0;
    for (int k = 0; k < L->nt; k++) {
        int t = L->t[k];
        if (grad && !pd__session_needs_grad(p->s, t)) continue;
        pd_tensor *v = grad ? pd__actx_grad(c, t) : pd__actx_value(c, t);
        memcpy(v->data, (char *)m.buf + off, pd__tbytes(p->g, t));
        off += pd__tbytes(p->g, t);
    }
    PD_FREE(m.buf);
    return PD_OK;
}

typedef struct pd__worker {
    pd__pipe *p;
    int s;
} pd__worker;

/* Instruction k of stage s; *stop: the pipeline was aborted while it waited. */
static pd_status pd__instr_run(pd__pipe *p, int s, int k, bool *stop) {
    const pd__instr *in = &p->sched->ins[s][k];
    if (s == p->fail_stage && in->op == p->fail_op && in->mb == p->fail_mb)
        return pd__err(PD_ERR_INTERNAL, "injected failure");
    switch (in->op) {
    case PD_I_F: return pd__do_forward(p, s, in->mb, in->version);
    case PD_I_B: return pd__do_backward(p, s, in->mb, in->version);
    case PD_I_SEND_ACT: return pd__send(p, s, s, false, in->mb, &p->link[s].fwd);
    case PD_I_RECV_ACT: return pd__recv(p, s, s - 1, false, in->mb, &p->link[s - 1].fwd, stop);
    case PD_I_SEND_GRAD: return pd__send(p, s, s - 1, true, in->mb, &p->link[s - 1].bwd);
    case PD_I_RECV_GRAD: return pd__recv(p, s, s, true, in->mb, &p->link[s].bwd, stop);
    case PD_I_ALLREDUCE: return PD_OK; /* one replica */
    case PD_I_STEP: return pd__do_step(p, s, in->mb, in->version, k);
    default: return pd__err(PD_ERR_UNSUPPORTED, "instruction %s is not supported yet", pd__op_name(in->op));
    }
}

static void *pd__stage_main(void *arg) {
    pd__worker *w = arg;
    pd__pipe *p = w->p;
    int s = w->s;
    for (int k = 0; k < p->sched->len[s]; k++) {
        const pd__instr *in = &p->sched->ins[s][k];
        bool stop = false;
        pd_status st = pd__instr_run(p, s, k, &stop);
        if (st == PD_OK && (in->op == PD_I_F || in->op == PD_I_B)) pd__release(&p->st[s], in->version, k);
        if (st != PD_OK) pd__fail(p, s, in, st);
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
    PD_TRY(pd__schedule_build(p->kind, p->P, 1, p->M, (int)minibatches, NULL, &sched));
    /* per stage: the last instruction naming each version; nothing in flight */
    for (int s = 0; s < p->P; s++) {
        pd__pstage *S = &p->st[s];
        int nv = 1;
        for (int k = 0; k < sched->len[s]; k++) nv += sched->ins[s][k].op == PD_I_STEP;
        PD_FREE(S->need_until);
        S->need_until = PD_MALLOC(sizeof(int) * (size_t)nv);
        if (!S->need_until) {
            pd__schedule_free(sched);
            return pd__err(PD_ERR_NOMEM, "out of memory");
        }
        for (int v = 0; v < nv; v++) S->need_until[v] = -1;
        for (int k = 0; k < sched->len[s]; k++) {
            const pd__instr *in = &sched->ins[s][k];
            if ((in->op == PD_I_F || in->op == PD_I_B) && (in->version < 0 || in->version >= nv)) {
                pd__schedule_free(sched);
                return pd__err(PD_ERR_INTERNAL, "stage %d, instruction %d names weight version %d", s, k,
                               (int)in->version);
            }
            if (in->op == PD_I_F || in->op == PD_I_B) S->need_until[in->version] = k;
        }
        for (int k = 0; k < p->nslots; k++) S->slot_ver[k] = -1;
        for (int k = 0; k < S->nstash; k++) S->stash[k].version = -1;
        S->live = 0;
        S->peak_versions = 1;
    }
    if (results) memset(results, 0, sizeof *results * (size_t)minibatches);
    p->sched = sched;
    p->inputs = inputs;
    p->labels = labels;
    p->res = results;
    p->abort = false;
    p->err = PD_OK;
    pthread_t *th = PD_CALLOC((size_t)p->P, sizeof *th);
    pd__worker *w = PD_CALLOC((size_t)p->P, sizeof *w);
    int started = 0;
    pd_status st = th && w ? PD_OK : pd__err(PD_ERR_NOMEM, "out of memory");
    for (int s = 0; st == PD_OK && s < p->P; s++) {
        w[s].p = p;
        w[s].s = s;
        if (pthread_create(&th[s], NULL, pd__stage_main, &w[s]) != 0) {
            pthread_mutex_lock(&p->mu);
            p->abort = true;
            pthread_cond_broadcast(&p->cv);
            pthread_mutex_unlock(&p->mu);
            st = pd__err(PD_ERR_NOMEM, "pipeline: cannot start the thread of stage %d", s);
        } else {
            started++;
        }
    }
    for (int s = 0; s < started; s++) pthread_join(th[s], NULL);
    for (int l = 0; l + 1 < p->P; l++) {
        pd__q_drain(&p->link[l].fwd);
        pd__q_drain(&p->link[l].bwd);
    }
    if (st == PD_OK && p->err != PD_OK) st = pd__err(p->err, "%s: %s", g->path, p->errmsg);
    if (st != PD_OK) memset(p->sl.grads, 0, sizeof(float) * (size_t)p->sl.total); /* no half-summed gradients */
    if (st == PD_OK) p->steps += minibatches;
    PD_FREE(th);
    PD_FREE(w);
    pd__schedule_free(sched);
    p->sched = NULL;
    return st;
}
