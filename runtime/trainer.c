/* trainer.c - the public pipeline-training API (pd_trainer_*, pipedream.h)
 * over the private pipeline (pipeline.h) and checkpoints (checkpoint.h,
 * ckpt_policy.h), and the session snapshot pair (pd_session_snapshot/_restore).
 * A pd_trainer_train call is one pd__pipe_run; with a checkpoint folder the
 * policy's boundaries are snapshotted by the workers and persisted by a
 * writer thread, each call ending with its last checkpoint, and every
 * manifest records the run so pd_trainer_resume can name a field that
 * differs. Under MPI (opt->mpi) every process makes the same calls and every
 * outcome is agreed, so an error anywhere is an error everywhere; details:
 * docs/INTERNALS.md, "runtime/trainer.c". */
#include "../core/plan.h"
#include "../core/schedule.h"
#include "checkpoint.h"
#include "ckpt_policy.h"
#include "comm/transport.h"
#include "optim.h"
#include "pipeline.h"
#include "session.h"
#include "trainer.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct pd_trainer {
    pd_graph *g;
    pd__pipe *pipe;
    pd__sched_kind kind;
    int nstages, nmicro;
    int64_t batch;      /* rows per step */
    int64_t steps;      /* steps done since the start (or the checkpoint resumed) */
    cJSON *info;        /* what resume compares; NULL when the run cannot be described */
    char *dir;          /* checkpoint folder (NULL: none) */
    int64_t every;      /* PD_CHECKPOINT_AUTO: CheckFreq's */
    int keep;
    double overhead;    /* auto's budget */
    pd__ckpol_costs costs; /* auto's costs given (pd__trainer_ckpt_costs), when fixed_costs */
    bool fixed_costs;
    /* a resume inside a call: the call to repeat (run_steps 0: none pending) */
    int64_t run_first, run_steps, resume_b;
    bool failed;        /* a call stopped part-way: only a resume makes sense */
    bool mpi;           /* this process runs its share of the plan (opt->mpi) */
    bool lazy;          /* the graph defers its weights (lazy_weights): each process holds its stages' only */
    int rank;           /* ... as this rank (rank 0 writes the checkpoints' manifests) */
    int nproc;          /* ... of this many */
    pd_loss_kind loss;  /* the labels it takes */
    char *output;       /* the prediction (NULL: the first output) */
    /* during a call with checkpoints */
    pd__ckpol *ck;
    char *run_info;     /* info with this call's position, for every manifest of the call */
};

/* ---- run description ---- */

/* Per node its forward and backward stage, and per stage its replicas: what a
 * checkpoint's parts are cut by. */
static char *pd__cut_text(const pd_plan *p) {
    size_t cap = 16 + 24 * ((size_t)p->n_nodes * 2 + (size_t)p->n_stages);
    char *s = PD_MALLOC(cap), *at = s;
    if (!s) return NULL;
    size_t left = cap;
#define PD__PUT(...)                                        \
    do {                                                    \
        int n_ = snprintf(at, left, __VA_ARGS__);           \
        if (n_ < 0 || (size_t)n_ >= left) n_ = (int)left - 1; \
        at += n_;                                           \
        left -= (size_t)n_;                                 \
    } while (0)
    PD__PUT("chunks %d; fwd", p->chunks > 1 ? p->chunks : 1);
    for (int i = 0; i < p->n_nodes; i++) PD__PUT(" %d", p->fwd_stage[i]);
    PD__PUT("; bwd");
    for (int i = 0; i < p->n_nodes; i++) PD__PUT(" %d", p->bwd_stage ? p->bwd_stage[i] : p->fwd_stage[i]);
    PD__PUT("; replicas");
    for (int i = 0; i < p->n_stages; i++) PD__PUT(" %d", p->stage ? p->stage[i].replicas : 1);
#undef PD__PUT
    return s;
}

static cJSON *pd__trainer_info(const pd_trainer *t, const pd_plan *plan, const pd_train_options *o, bool vsync) {
    cJSON *j = cJSON_CreateObject();
    char *cut = pd__cut_text(plan), *pj = pd__plan_to_json(plan);
    bool ok = j && cut && pj;
    if (ok) {
        cJSON_AddStringToObject(j, "mode", "pipeline");
        cJSON_AddStringToObject(j, "model", t->g->path ? t->g->path : "");
        cJSON_AddNumberToObject(j, "nodes", (double)t->g->nnodes);
        cJSON_AddNumberToObject(j, "param_bytes", (double)pd_graph_param_bytes(t->g));
        cJSON_AddNumberToObject(j, "graph_batch", (double)(t->batch / t->nmicro));
        cJSON_AddNumberToObject(j, "batch", (double)t->batch);
        cJSON_AddStringToObject(j, "schedule", pd__sched_kind_name(t->kind));
        cJSON_AddNumberToObject(j, "microbatches", (double)t->nmicro);
        cJSON_AddBoolToObject(j, "vertical_sync", vsync);
        cJSON_AddNumberToObject(j, "stages", (double)t->nstages);
        cJSON_AddStringToObject(j, "cut", cut);
        cJSON_AddStringToObject(j, "optimizer", pd__optim_name(o->optimizer));
        cJSON_AddNumberToObject(j, "lr", o->lr);
        cJSON_AddNumberToObject(j, "momentum", o->momentum);
        cJSON_AddNumberToObject(j, "beta1", o->beta1);
        cJSON_AddNumberToObject(j, "beta2", o->beta2);
        cJSON_AddNumberToObject(j, "eps", o->eps);
        cJSON_AddNumberToObject(j, "weight_decay", o->weight_decay);
        cJSON_AddNumberToObject(j, "clip_grad_norm", o->clip_grad_norm);
        cJSON_AddNumberToObject(j, "warmup_steps", (double)o->warmup_steps);
        cJSON_AddNumberToObject(j, "cosine_steps", (double)o->cosine_steps);
        cJSON_AddNumberToObject(j, "min_lr", o->min_lr);
        cJSON_AddNumberToObject(j, "loss", (double)o->loss);
        cJSON_AddStringToObject(j, "output", o->output ? o->output : "");
        cJSON_AddStringToObject(j, "freeze", o->freeze ? o->freeze : "");
        if (o->trainable) cJSON_AddStringToObject(j, "trainable", o->trainable);
        cJSON_AddNumberToObject(j, "seed", (double)o->seed);
        cJSON *pl = cJSON_Parse(pj); /* for pdonnx export and a reader's eyes; compared through "cut" */
        cJSON_AddItemToObject(j, "plan", pl ? pl : cJSON_CreateNull());
    }
    PD_FREE(cut);
    free(pj);
    if (!ok) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

/* ---- create, destroy, queries ---- */

pd_status pd_trainer_check_plan(const pd_graph *g, const pd_plan *plan) {
    if (!g || !plan) return pd__err(PD_ERR_INVALID, "pd_trainer_check_plan: %s is NULL", g ? "plan" : "g");
    if (plan->n_alias) /* stages naming nodes "nodes" lacks: only pd__plan_match (the CLI) resolves them */
        return pd__err(PD_ERR_INVALID, "the plan's stages name node '%s', which its \"nodes\" lack", plan->alias_name[0]);
    if (plan->n_nodes != g->nnodes)
        return pd__err(PD_ERR_INVALID, "the plan has %d nodes but %s has %d: plan this model", plan->n_nodes,
                       g->path, g->nnodes);
    for (int i = 0; plan->node_name && i < plan->n_nodes; i++)
        if (plan->node_name[i] && strcmp(plan->node_name[i], g->nodes[i].name) != 0)
            return pd__err(PD_ERR_INVALID, "node %d is '%s' in the plan but '%s' in %s", i, plan->node_name[i],
                           g->nodes[i].name, g->path);
    return PD_OK;
}

/* opt and train: read by pd_trainer_create (pd__opts_read); given: the
 * schedule parsed by the caller (pd__trainer_create_kind), else NULL. */
static pd_status pd__trainer_make(pd_graph *g, const pd_plan *plan, const pd_trainer_options *opt,
                                  const pd_train_options *train, const pd__sched_kind *given, pd_trainer **out) {
    if (!g) return pd__err(PD_ERR_INVALID, "pd_trainer_create: g is NULL");
    if (!plan) return pd__err(PD_ERR_INVALID, "pd_trainer_create: plan is NULL");
    if (!out) return pd__err(PD_ERR_INVALID, "pd_trainer_create: out is NULL");
    pd__sched_kind kind = given ? *given : PD_SCHED_FLUSH;
    if (!given && opt->schedule && pd__sched_kind_parse(opt->schedule, &kind) != PD_OK) {
        pd__err_prefix("pd_trainer_create: opt->schedule");
        return PD_ERR_INVALID;
    }
    if (!given && kind == PD_SCHED_AVGPIPE)
        return pd__err(PD_ERR_UNSUPPORTED, "pd_trainer_create: opt->schedule 'avgpipe' runs several pipelines: use "
                       "pdonnx train --parallel-pipelines");
    if (opt->microbatches < 0)
        return pd__err(PD_ERR_INVALID, "pd_trainer_create: opt->microbatches is %d", opt->microbatches);
    int M = opt->microbatches ? opt->microbatches : kind == PD_SCHED_PIPEDREAM ? 1
                                                  : plan->microbatches > 0 ? plan->microbatches : 1;
    if (kind == PD_SCHED_PIPEDREAM && M != 1)
        return pd__err(PD_ERR_INVALID, "pd_trainer_create: opt->microbatches is %d; pipedream updates after every "
                       "microbatch, so a step is one microbatch: give 1", M);
    if (opt->vertical_sync && kind != PD_SCHED_PIPEDREAM)
        return pd__err(PD_ERR_INVALID, "pd_trainer_create: opt->vertical_sync goes with the pipedream schedule, not %s",
                       pd__sched_kind_name(kind));
    if (opt->checkpoint_every < 0 && opt->checkpoint_every != PD_CHECKPOINT_AUTO)
        return pd__err(PD_ERR_INVALID, "pd_trainer_create: opt->checkpoint_every is %lld",
                       (long long)opt->checkpoint_every);
    if (opt->checkpoint_keep < 0)
        return pd__err(PD_ERR_INVALID, "pd_trainer_create: opt->checkpoint_keep is %d", opt->checkpoint_keep);
    if (!(opt->checkpoint_overhead >= 0 && opt->checkpoint_overhead < 1e9))
        return pd__err(PD_ERR_INVALID, "pd_trainer_create: opt->checkpoint_overhead is %g, not a finite number >= 0",
                       opt->checkpoint_overhead);
    if (opt->mpi != 0 && opt->mpi != 1)
        return pd__err(PD_ERR_INVALID, "pd_trainer_create: opt->mpi is %d, not 0 or 1", opt->mpi);
    if (opt->recompute != 0 && opt->recompute != 1)
        return pd__err(PD_ERR_INVALID, "pd_trainer_create: opt->recompute is %d, not 0 or 1", opt->recompute);
    if (opt->checkpoint_every != 0 && !opt->checkpoint_dir)
        return pd__err(PD_ERR_INVALID, "pd_trainer_create: opt->checkpoint_every needs opt->checkpoint_dir");
    if (pd_trainer_check_plan(g, plan) != PD_OK) {
        pd__err_prefix("pd_trainer_create");
        return PD_ERR_INVALID;
    }
    pd_trainer *t = PD_CALLOC(1, sizeof *t);
    if (!t) return pd__err(PD_ERR_NOMEM, "out of memory");
    t->g = g;
    t->kind = kind;
    t->nmicro = M;
    t->every = opt->checkpoint_every;
    t->keep = opt->checkpoint_keep;
    t->overhead = opt->checkpoint_overhead > 0 ? opt->checkpoint_overhead : 0.035;
    t->loss = train->loss;
    if (train->output && !(t->output = PD_MALLOC(strlen(train->output) + 1))) goto nomem;
    if (t->output) strcpy(t->output, train->output);
    pd_status st;
    bool half = false; /* float16 weights beside deferred ones: gathered and saved in their own type */
    for (int i = 0; i < g->ntensors; i++) t->lazy |= pd__deferred(&g->tensors[i]), half |= g->tensors[i].file_dtype != 0;
    t->lazy = t->lazy && !half;
    pd_plan run = *plan; /* a shallow copy: the pipeline reads it while being made */
    run.recompute = plan->recompute || opt->recompute != 0;
    plan = &run;
    st = pd__pipe_create(g, plan, train, kind, M, &t->pipe);
    if (st == PD_OK) st = pd__pipe_set_vertical_sync(t->pipe, opt->vertical_sync != 0);
    if (st != PD_OK) goto fail;
    t->nstages = pd__pipe_stages(t->pipe);
    const pd__tensor *x0 = g->ninputs > 0 ? &g->tensors[g->inputs[0]] : NULL;
    t->batch = (int64_t)M * (x0 && x0->ndim > 0 ? x0->shape[0] : 1); /* the pipeline's rows per microbatch */
    t->info = pd__trainer_info(t, plan, train, opt->vertical_sync != 0);
    if (!t->info) goto nomem;
    if (opt->checkpoint_dir) {
        t->dir = PD_MALLOC(strlen(opt->checkpoint_dir) + 1);
        if (!t->dir) goto nomem;
        strcpy(t->dir, opt->checkpoint_dir);
    }
    *out = t;
    return PD_OK;
nomem:
    st = pd__err(PD_ERR_NOMEM, "out of memory");
fail:
    pd_trainer_destroy(t);
    return st;
}

/* Under MPI: every process makes the trainer, the processes agree (one
 * error everywhere, naming the lowest failing rank), then each takes its
 * stage replicas, agreed too (pd__pipe_set_ranks checks the plan fits the
 * processes). The one agreement before a run, for pd_trainer_create and
 * `pdonnx train`; the calls after agree too (t->mpi). */
static pd_status pd__trainer_make_mpi(pd_graph *g, const pd_plan *plan, const pd_trainer_options *opt,
                                      const pd_train_options *train, const pd__sched_kind *kind, pd_trainer **out) {
    pd_status st = pd__mpi_use();
    if (st != PD_OK) {
        pd__err_prefix("pd_trainer_create: opt->mpi");
        return st;
    }
    int rank = 0, size = 1;
    pd_trainer *t = NULL;
    st = pd_mpi_init(&rank, &size);
    if (st == PD_OK) st = pd__trainer_make(g, plan, opt, train, kind, &t);
    st = pd__mpi_agree_status(st);
    if (st == PD_OK) {
        t->mpi = true;
        t->rank = rank;
        t->nproc = size;
        st = pd__mpi_agree_status(pd__pipe_set_ranks(t->pipe, rank, size));
    }
    if (st != PD_OK) {
        pd_trainer_destroy(t);
        return st;
    }
    *out = t;
    return PD_OK;
}

pd_status pd_trainer_create(pd_graph *g, const pd_plan *plan, const pd_trainer_options *user, pd_trainer **out) {
    pd_trainer_options o = PD_TRAINER_OPTIONS_INIT;
    pd_train_options train = PD_TRAIN_OPTIONS_INIT;
    PD_TRY(pd__opts_read(&o, user, sizeof o, "pd_trainer_create: opt"));
    PD_TRY(pd__opts_read(&train, o.train, sizeof train, "pd_trainer_create: opt->train"));
    if (!o.mpi) return pd__trainer_make(g, plan, &o, &train, NULL, out);
    return pd__trainer_make_mpi(g, plan, &o, &train, NULL, out);
}

pd_status pd__trainer_create_kind(pd_graph *g, const pd_plan *plan, const pd_trainer_options *user,
                                  pd__sched_kind kind, pd_trainer **out) {
    pd_trainer_options o = PD_TRAINER_OPTIONS_INIT;
    pd_train_options train = PD_TRAIN_OPTIONS_INIT;
    PD_TRY(pd__opts_read(&o, user, sizeof o, "pd_trainer_create: opt"));
    PD_TRY(pd__opts_read(&train, o.train, sizeof train, "pd_trainer_create: opt->train"));
    if (!o.mpi) return pd__trainer_make(g, plan, &o, &train, &kind, out);
    return pd__trainer_make_mpi(g, plan, &o, &train, &kind, out);
}

pd__pipe *pd__trainer_pipe(pd_trainer *t) { return t ? t->pipe : NULL; }

/* Collective under MPI. With lazy_weights each process writes its stages'
 * files beside path and rank 0 the model last (runtime/stageload.c); the
 * references are the saved model's, not the graph's afterwards. Otherwise
 * rank 0 saves the whole model, gathered again: a resumed state not
 * trained since (pdonnx train --resume at the last step) is gathered too. */
pd_status pd_trainer_save(pd_trainer *t, const char *path) {
    if (!t || !path) return pd__err(PD_ERR_INVALID, "pd_trainer_save: NULL %s", t ? "path" : "trainer");
    pd_status st = PD_OK;
    if (t->mpi && t->lazy) st = pd__pipe_save_stages(t->pipe, path); /* agreed inside: every file is written */
    if (t->mpi && !t->lazy && !t->failed) st = pd__mpi_agree_status(pd__pipe_gather(t->pipe));
    if (st == PD_OK && (!t->mpi || t->rank == 0)) st = pd_graph_save(t->g, path);
    for (int i = 0; i < t->g->ntensors; i++) {
        PD_FREE(t->g->tensors[i].ext_loc);
        t->g->tensors[i].ext_loc = NULL;
    }
    return t->mpi ? pd__mpi_agree_status(st) : st;
}

void pd_trainer_destroy(pd_trainer *t) {
    if (!t) return;
    pd__ckpol_finish(t->ck, 0, NULL, 0);
    pd__pipe_destroy(t->pipe); /* the trained weights go back into the graph */
    for (int i = 0; t->mpi && t->lazy && i < t->g->ntensors; i++) { /* trained elsewhere: not the file's any more */
        pd__tensor *x = &t->g->tensors[i];
        if (x->trained && pd__deferred(x)) PD_FREE(x->ext_path), x->ext_path = NULL;
    }
    cJSON_Delete(t->info);
    free(t->run_info);
    PD_FREE(t->dir);
    PD_FREE(t->output);
    PD_FREE(t);
}

int pd_trainer_stages(const pd_trainer *t) { return t ? t->nstages : 0; }
int64_t pd_trainer_batch(const pd_trainer *t) { return t ? t->batch : 0; }
int64_t pd_trainer_step_count(const pd_trainer *t) { return t ? t->steps : 0; }

pd_status pd_trainer_set_ring(pd_trainer *t, int steps, pd_trainer_fill fill, void *ctx) {
    if (!t) return pd__err(PD_ERR_INVALID, "pd_trainer_set_ring: t is NULL");
    if (steps < 0 || (steps > 0) != (fill != NULL))
        return pd__err(PD_ERR_INVALID, "pd_trainer_set_ring: steps is %d with %s fill: give steps >= %d and a fill, or 0 "
                       "and NULL", steps, fill ? "a" : "no", pd__pipe_ring_steps(t->pipe));
    pd_status st = pd__pipe_set_ring(t->pipe, steps, fill, ctx);
    if (st != PD_OK) pd__err_prefix("pd_trainer_set_ring");
    return st;
}

int pd_trainer_ring_steps(const pd_trainer *t) { return t ? pd__pipe_ring_steps(t->pipe) : 0; }

/* ---- checkpoints during a call ---- */

pd_status pd__trainer_ckpt_costs(pd_trainer *t, double step_ms, double pause_ms, double persist_ms) {
    if (!t) return pd__err(PD_ERR_INVALID, "pd__trainer_ckpt_costs: t is NULL");
    t->costs.step_ms = step_ms;
    t->costs.pause_ms = pause_ms;
    t->costs.persist_ms = persist_ms;
    t->fixed_costs = true;
    return PD_OK;
}

/* The info of every manifest of a call of n steps from step s0, and the
 * call's checkpoint policy (its boundary b is step s0 + b). */
static pd_status pd__trainer_begin(pd_trainer *t, int64_t s0, int64_t n) {
    cJSON *j = cJSON_Duplicate(t->info, true);
    if (j) {
        cJSON_AddNumberToObject(j, "run_first", (double)s0);
        cJSON_AddNumberToObject(j, "run_steps", (double)n);
    }
    char *text = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    if (!text) return pd__err(PD_ERR_NOMEM, "out of memory");
    free(t->run_info);
    t->run_info = text;
    /* under MPI each process writes its stages' parts, rank 0 the manifest once all are in */
    pd__ckpol_opts co = {t->dir, t->every, t->keep, t->overhead, t->mpi ? t->nproc : 1, t->rank, t->nstages,
                         t->fixed_costs ? &t->costs : NULL};
    PD_TRY(pd__ckpol_start(&co, t->run_info, t->steps, &t->ck));
    return pd__ckpol_attach(t->ck, t->pipe, s0, NULL, NULL);
}

/* The end of a call: its final state as the last checkpoint (st: the run's
 * status, agreed under MPI; on failure only what was taken is written, and
 * rank 0 stops waiting for parts that will not come), then every persist
 * waited for; the first error wins. Under MPI the processes then agree, so
 * none returns before rank 0 has written the call's last manifest. */
static pd_status pd__trainer_end(pd_trainer *t, int64_t step, pd_status st) {
    bool agree = t->mpi && st == PD_OK;
    if (st != PD_OK) pd__ckpol_cancel(t->ck);
    if (st == PD_OK) st = pd__ckpol_final(t->ck, t->pipe, NULL, step);
    char msg[1024];
    if (st != PD_OK) snprintf(msg, sizeof msg, "%s", pd_last_error());
    pd_status ws = t->ck ? pd__ckpol_finish(t->ck, 0, NULL, 0) : PD_OK;
    t->ck = NULL;
    if (st != PD_OK) st = pd__err(st, "%s", msg);
    else if ((st = ws) != PD_OK) pd__err_prefix("pd_trainer_train: %s", t->dir);
    return agree ? pd__mpi_agree_status(st) : st;
}

/* ---- training ---- */

/* Labels the loss takes (what a stage would find wrong only in the middle
 * of the run): per row, the graph's labels input under PD_LOSS_GRAPH; else
 * one int64 class per position of the prediction without its class axis
 * (cross-entropy), or float32 targets of its shape (MSE). */
static pd_status pd__trainer_check_labels(const pd_trainer *t, const pd_tensor *labels, int li) {
    const pd_graph *g = t->g;
    int64_t rows = t->batch / t->nmicro, row = -1;
    pd_dtype want = PD_FLOAT;
    const char *why = "mse";
    if (t->loss == PD_LOSS_GRAPH) {
        if (li < 0) return PD_OK;
        want = g->tensors[li].dtype;
        row = g->tensors[li].numel / (rows ? rows : 1);
        why = "the model's labels input";
    } else {
        int pt = t->output ? pd__graph_find(g, t->output) : g->noutputs > 0 ? g->outputs[0] : -1;
        if (pt < 0 || g->tensors[pt].ndim < 1) return PD_OK; /* the pipeline said what is wrong */
        const pd__tensor *pred = &g->tensors[pt];
        bool ce = t->loss == PD_LOSS_CROSS_ENTROPY || (t->loss == PD_LOSS_AUTO && labels->dtype == PD_INT64);
        row = pred->numel / (rows ? rows : 1);
        if (ce) {
            want = PD_INT64;
            row /= pred->shape[pred->ndim - 1] > 0 ? pred->shape[pred->ndim - 1] : 1;
            why = "cross_entropy";
        }
    }
    if (labels->ndim < 1 || labels->ndim > PD_MAX_DIMS || labels->shape[0] < 1) return PD_OK; /* the rows check names it */
    int64_t have = pd_tensor_numel(labels) / labels->shape[0];
    if (labels->dtype != want || have != row)
        return pd__err(PD_ERR_SHAPE, "pd_trainer_train: labels are %s with %lld values per row; %s takes %s with %lld",
                       pd_dtype_name(labels->dtype), (long long)have, why, pd_dtype_name(want), (long long)row);
    return PD_OK;
}

/* What pd__pipe_run would refuse, named the way a caller knows it. */
static pd_status pd__trainer_check_data(const pd_trainer *t, int64_t steps, const pd_tensor *inputs,
                                        const pd_tensor *labels) {
    const pd_graph *g = t->g;
    if (steps > INT32_MAX / t->nmicro || steps > INT64_MAX / t->batch)
        return pd__err(PD_ERR_INVALID, "pd_trainer_train: steps is %lld: too many", (long long)steps);
    int ring = pd__pipe_ring(t->pipe); /* rows on demand: the ring's steps, not the call's */
    int64_t need = (ring ? ring : steps) * t->batch, rows = t->batch / t->nmicro;
    int li = pd__pipe_labels_input(t->pipe);
    PD_TRY(pd__trainer_check_labels(t, labels, li));
    for (int i = 0; i <= g->ninputs; i++) {
        if (i < g->ninputs && g->inputs[i] == li) continue;
        const pd_tensor *v = i < g->ninputs ? &inputs[i] : labels;
        char what[300];
        if (i < g->ninputs) snprintf(what, sizeof what, "inputs[%d] ('%s')", i, g->tensors[g->inputs[i]].name);
        else snprintf(what, sizeof what, "labels");
        if (!v->data) return pd__err(PD_ERR_INVALID, "pd_trainer_train: %s: data is NULL", what);
        if (v->ndim < 1 || v->ndim > PD_MAX_DIMS || v->shape[0] < need)
            return pd__err(PD_ERR_SHAPE, "pd_trainer_train: %s has %lld rows; %lld steps of %lld rows%s need %lld",
                           what, (long long)(v->ndim >= 1 && v->ndim <= PD_MAX_DIMS ? v->shape[0] : 0),
                           (long long)(ring ? ring : steps), (long long)t->batch, ring ? " (the ring's)" : "",
                           (long long)need);
        if (pd_tensor_numel(v) < 0)
            return pd__err(PD_ERR_SHAPE, "pd_trainer_train: %s has a negative dimension", what);
        if (i == g->ninputs) break;
        const pd__tensor *x = &g->tensors[g->inputs[i]];
        int64_t row = x->numel / (rows ? rows : 1);
        if (v->dtype != x->dtype || pd_tensor_numel(v) / v->shape[0] != row) {
            char want[128], got[128];
            pd__format_shape(want, sizeof want, x->ndim, x->shape);
            pd__format_shape(got, sizeof got, v->ndim, v->shape);
            return pd__err(PD_ERR_SHAPE, "pd_trainer_train: %s is %s%s; the model takes rows of %s%s", what,
                           pd_dtype_name(v->dtype), got, pd_dtype_name(x->dtype), want);
        }
    }
    return PD_OK;
}

/* What pd_trainer_train refuses before running. */
static pd_status pd__trainer_train_check(pd_trainer *t, int64_t steps, const pd_tensor *inputs,
                                         const pd_tensor *labels) {
    if (steps < 1) return pd__err(PD_ERR_INVALID, "pd_trainer_train: steps is %lld, not >= 1", (long long)steps);
    if (!inputs && t->g->ninputs > 0) return pd__err(PD_ERR_INVALID, "pd_trainer_train: inputs is NULL");
    if (!labels) return pd__err(PD_ERR_INVALID, "pd_trainer_train: labels is NULL");
    if (t->failed)
        return pd__err(PD_ERR_INVALID, "pd_trainer_train: an earlier call failed in the middle of its steps: resume "
                       "from a checkpoint (pd_trainer_resume) or destroy the trainer");
    if (!labels->data) return pd__err(PD_ERR_INVALID, "pd_trainer_train: labels->data is NULL");
    PD_TRY(pd__trainer_check_data(t, steps, inputs, labels));
    if (t->run_steps > 0 && steps != t->run_steps)
        return pd__err(PD_ERR_INVALID, "pd_trainer_train: steps is %lld, but the checkpoint resumed at step %lld "
                       "was taken in a call of %lld steps from step %lld: repeat that call (the same steps and "
                       "data)", (long long)steps, (long long)t->steps, (long long)t->run_steps,
                       (long long)t->run_first);
    return PD_OK;
}

pd_status pd_trainer_train(pd_trainer *t, int64_t steps, const pd_tensor *inputs, const pd_tensor *labels,
                           pd_step_result *results) {
    if (!t) return pd__err(PD_ERR_INVALID, "pd_trainer_train: t is NULL");
    pd_status st = pd__trainer_train_check(t, steps, inputs, labels);
    if (t->mpi && !pd__mpi_same(steps) && st == PD_OK) /* a run of other lengths would never meet */
        st = pd__err(PD_ERR_INVALID, "pd_trainer_train: steps is %lld here but not on every process: every process "
                     "trains the same steps", (long long)steps);
    int64_t s0 = t->run_steps > 0 ? t->run_first : t->steps;
    /* before the agreement: rank 0's writer clears a killed writer's leftovers before any process writes a part */
    if (st == PD_OK && t->dir) st = pd__trainer_begin(t, s0, steps);
    if (t->mpi) st = pd__mpi_agree_status(st); /* one process's bad arguments stop every process */
    if (st != PD_OK) {
        pd__ckpol_finish(t->ck, 0, NULL, 0); /* nothing submitted */
        t->ck = NULL;
        return st;
    }
    st = pd__pipe_run(t->pipe, steps, inputs, labels, results);
    if (t->mpi) { /* every process ends the call the same way, with the whole model (lazy_weights: its stages') */
        st = pd__mpi_agree_status(st);
        if (st == PD_OK && !t->lazy) st = pd__mpi_agree_status(pd__pipe_gather(t->pipe));
    }
    if (st != PD_OK) t->failed = true; /* the arguments were checked: some updates may be made */
    if (st == PD_OK) {                 /* trained, even if its last checkpoint fails below */
        t->steps = s0 + steps;
        t->run_first = t->run_steps = t->resume_b = 0;
    }
    if (t->dir) st = pd__trainer_end(t, s0 + steps, st);
    return st;
}

/* ---- resume ---- */

/* The checkpoint's run must be this trainer's in every field its state
 * depends on (where the model file lies may change; the plan is compared by
 * its cut). */
static pd_status pd__trainer_match(const pd_trainer *t, const pd__ckpt *c, const cJSON *got) {
    static const char *const skip[] = {"plan", "model", NULL};
    char was[256], now[256];
    const char *field = pd__ckpt_info_diff(t->info, got, skip, was, now, sizeof was);
    if (!field) return PD_OK;
    return pd__err(PD_ERR_INVALID, "pd_trainer_resume: %s was taken with %s %s, this trainer has %s (resume with "
                   "the same model, plan and options)", c->path, field, was, now);
}

pd_status pd_trainer_resume(pd_trainer *t, const char *dir, pd_resume_info *out) {
    if (!t) return pd__err(PD_ERR_INVALID, "pd_trainer_resume: t is NULL");
    if (!dir) return pd__err(PD_ERR_INVALID, "pd_trainer_resume: dir is NULL");
    pd__ckpt c;
    memset(&c, 0, sizeof c);
    pd_status st = pd__ckpt_read_latest(dir, &c, NULL, NULL);
    if (st != PD_OK) pd__err_prefix("pd_trainer_resume");
    cJSON *got = st == PD_OK ? cJSON_Parse(c.info_json) : NULL;
    const cJSON *rf = cJSON_GetObjectItem(got, "run_first"), *rs = cJSON_GetObjectItem(got, "run_steps");
    if (st == PD_OK && !got)
        st = pd__err(PD_ERR_PARSE, "pd_trainer_resume: %s: the manifest's info is not JSON", c.path);
    else if (st == PD_OK) st = pd__trainer_match(t, &c, got);
    int64_t first, n;
    if (!pd__ckpt_json_int(rf, 0, PD_CKPT_MAX_INT, &first)) first = -1;
    if (!pd__ckpt_json_int(rs, 0, PD_CKPT_MAX_INT, &n)) n = -1;
    int64_t b = c.step - first;
    if (st == PD_OK && (first < 0 || n < 1 || b < 1 || b > n))
        st = pd__err(PD_ERR_PARSE, "pd_trainer_resume: %s is at step %lld but names a call of %lld steps from step "
                     "%lld (not a checkpoint of pd_trainer_train?)", c.path, (long long)c.step, (long long)n,
                     (long long)first);
    if (t->mpi) { /* every process restores its stages from the same checkpoint, or none does */
        bool same = pd__mpi_same(st == PD_OK ? c.step : -1);
        if (st == PD_OK && !same)
            st = pd__err(PD_ERR_INVALID, "pd_trainer_resume: %s: the processes found different newest checkpoints "
                         "(is %s on a file system they all see?)", c.path, dir);
        st = pd__mpi_agree_status(st);
    }
    if (st == PD_OK) {
        st = pd__pipe_resume(t->pipe, b == n ? 0 : b, c.nparts, (const void *const *)c.parts, c.lens);
        if (st != PD_OK) pd__err_prefix("pd_trainer_resume: %s", c.path);
        if (t->mpi) st = pd__mpi_agree_status(st);
        if (st != PD_OK) t->failed = true; /* partly restored */
    }
    if (st == PD_OK) {
        t->failed = false;
        t->steps = c.step;
        t->run_first = b == n ? 0 : first;
        t->run_steps = b == n ? 0 : n;
        t->resume_b = b == n ? 0 : b;
        if (out) {
            out->step = c.step;
            out->run_first = first;
            out->run_steps = n;
        }
    }
    cJSON_Delete(got);
    pd__ckpt_free(&c);
    return st;
}

/* ---- one stage: the session's state in memory ---- */

pd_status pd_session_snapshot(const pd_session *s, void **buf, size_t *len) {
    if (!s) return pd__err(PD_ERR_INVALID, "pd_session_snapshot: s is NULL");
    if (!buf) return pd__err(PD_ERR_INVALID, "pd_session_snapshot: buf is NULL");
    if (!len) return pd__err(PD_ERR_INVALID, "pd_session_snapshot: len is NULL");
    pd__recw count = {NULL, 0, 0};
    pd__session_snapshot(s, &count);
    pd__recw w = {PD_MALLOC(count.n + 1), 0, count.n};
    if (!w.buf) return pd__err(PD_ERR_NOMEM, "pd_session_snapshot: out of memory for %zu bytes", count.n);
    pd__session_snapshot(s, &w);
    *buf = w.buf;
    *len = w.n;
    return PD_OK;
}

pd_status pd_session_restore(pd_session *s, const void *buf, size_t len) {
    if (!s) return pd__err(PD_ERR_INVALID, "pd_session_restore: s is NULL");
    if (!buf) return pd__err(PD_ERR_INVALID, "pd_session_restore: buf is NULL");
    void *was;
    size_t wlen;
    PD_TRY(pd_session_snapshot(s, &was, &wlen)); /* to undo a restore that fails half-way */
    pd_status st = pd__session_restore(s, buf, len);
    if (st != PD_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", pd_last_error());
        pd__session_restore(s, was, wlen);
        st = pd__err(st, "pd_session_restore: %s", msg);
    }
    PD_FREE(was);
    return st;
}
