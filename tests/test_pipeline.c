/* test_pipeline.c - the pipeline runtime (runtime/pipeline.c) against
 * single-stage training.
 *
 * The MLP fixture with its train cases' data stream (step k takes rows
 * (k*8 + j) mod 50): 25 steps of pd_session_step at batch 8 are the
 * reference. The pipeline cuts the model into stages (uniform plan) and runs
 * the same global batch as 1, 2 and 4 microbatches:
 * - gpipe and flush, 2 and 3 stages: every step's loss and every trained
 *   weight equal the reference's to 1e-5 relative (Adam: 1e-4);
 * - 2bw, 2 to 4 stages: equal a reference that applies every gradient one
 *   step late (W(t+1) = W(t) - lr grad f(W(t-1)), W(-1) = W(0)), 2 versions;
 * - pipedream (weight stashing; the pipeline itself fails a B whose version
 *   is not its F's), 2 to 4 stages: stage s holds p-s versions; equals a
 *   reference that computes microbatch k with each stage's weights at the
 *   version its F names in the schedule; converges in 300 steps; with
 *   replicated stages (round robin, one update of the mean gradient per
 *   round) the same replay, each replica's versions as its list keeps;
 * - a NaN in one minibatch's data, and a failure injected at every
 *   instruction kind of every stage, stop all stages with an error naming
 *   the stage and the step (no deadlock), and the pipeline trains on.
 * - zb-h1 (B input gradients, W weight gradients; the split itself checked on
 *   one context), interleaved (P workers x V chunks), replicated stages
 *   (gradients summed by ALLREDUCE) and Bi-Partition plans (a backward moved
 *   across a boundary either way): equal single-stage like gpipe and flush;
 * - statistics (busy time, peaks of microbatches held against the schedule's
 *   closed forms, activation bytes from the graph) and the Chrome trace (every
 *   instruction of the run, in order);
 * - failures on a replicated stage (ALLREDUCE, STEP included; flush and
 *   pipedream) and in a chunk
 *   stop the pipeline; plans it cannot run are refused with the reason.
 * The small GPT fixture, and the MLP with its loss inside the model (labels
 * a graph input), run a sample of the same checks (2-4 stages).
 * BatchNorm in training mode (cnn_bn, CPU): gpipe and flush with M > 1
 * microbatches equal single-stage gradient accumulation over the same
 * microbatches (each its own statistics), not the whole minibatch's step,
 * which they equal for M = 1; the MLP's accumulation equals its whole batch.
 *
 * test_pipeline --device cuda FIXTURES (suite cuda; exits 77 without a GPU):
 * the same checks with every stage on GPU 0 (several stages on one GPU),
 * against single-stage training on the GPU (fp32; 2bw's one-step-late and
 * pipedream's stashed-version replays on the CPU, whose host slabs they
 * rewrite), to at least 1e-4 relative; the failures and a NaN stop the run
 * and it trains on; what GPU stages do not support yet is refused. On the
 * simulated device (the CPU's kernels), the same plan's device and CPU
 * stages give the same losses and weights bit for bit: replicated stages
 * in one process under every schedule.
 */
#include "../core/plan.h"
#include "../core/schedule.h"
#include "../runtime/data.h"
#include "../runtime/pipeline.h"
#include "../runtime/session.h"
#ifdef PD_HAVE_CUDA
#include "../runtime/cuda/cuda.h" /* pd__cuda_is_sim */
#endif
#include "check.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { STEPS = 25, LONG = 300, BATCH = 8 };

/* The tied model: this node (a reader of the shared table) is moved to the last stage. */
static const char *tie_node;

/* --device cuda: the pipelines' (and the single-stage references') device,
 * and the least relative tolerance of a comparison (float sums in another
 * order on another backend) */
static pd_device_kind device = PD_DEVICE_CPU;
static double tol_floor = 0;

typedef struct ref {
    const char *name;
    pd_train_options o;
    bool late; /* SGD with every gradient applied one step late (2bw's rule) */
    int steps;
    double tol; /* relative, on losses and weights */
    double loss[LONG];
    double gnorm[LONG];
    pd_graph *g; /* trained */
    /* > 1 (SGD only): gradient accumulation, what a flushing pipeline of
     * `accum` microbatches computes: each microbatch of BATCH/accum rows its
     * own training forward (BatchNorm normalises with that microbatch's
     * statistics and updates its running ones, microbatch after microbatch),
     * then one update with the mean of their gradients; the step's loss is
     * the mean of theirs */
    int accum;
} ref;

static double tol_of(double tol) { return tol > tol_floor ? tol : tol_floor; }

/* Options of a reference that rewrites the session's host slabs between
 * steps (one step late, stashed versions): always on the CPU. */
static pd_train_options on_host(const pd_train_options *o) {
    pd_train_options h = *o;
    h.device = PD_DEVICE_CPU;
    return h;
}

static double rel_err(const float *got, const float *want, int64_t n) {
    double scale = 0, worst = 0;
    for (int64_t i = 0; i < n; i++) scale += fabs(want[i]);
    scale = n ? scale / (double)n : 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]) / (fabs(want[i]) + scale + 1e-12);
        if (!(e <= worst)) worst = e;
    }
    return worst;
}

/* Step k's BATCH rows of a stream. */
static pd_tensor batch_of(const pd_tensor *all, int k) {
    pd_tensor b = *all;
    size_t row = (size_t)(pd_tensor_numel(all) / all->shape[0]) * pd_dtype_size(all->dtype);
    b.shape[0] = BATCH;
    b.data = (char *)all->data + row * BATCH * (size_t)k;
    return b;
}

/* fx: the fixture's folder */
static pd_status load(const char *fx, int64_t batch, pd_graph **g) {
    char p[1024];
    pd_load_options lo = PD_LOAD_OPTIONS_INIT;
    lo.batch = batch;
    snprintf(p, sizeof p, "%s/model.onnx", fx);
    return pd_graph_load_file(p, &lo, g);
}

/* n rows of a stream from row `first` on. */
static pd_tensor rows_of(const pd_tensor *all, int64_t first, int64_t n) {
    pd_tensor b = *all;
    size_t row = (size_t)(pd_tensor_numel(all) / all->shape[0]) * pd_dtype_size(all->dtype);
    b.shape[0] = n;
    b.data = (char *)all->data + row * (size_t)first;
    return b;
}

/* r->accum microbatches a step (ref.accum): the session at BATCH/accum rows
 * computes each microbatch's loss and gradients (its own SGD update is
 * undone) and the update is made here. */
static pd_status run_ref_accum(const char *fx, const pd_tensor *xs, const pd_tensor *ys, ref *r) {
    if (r->o.optimizer != PD_OPT_SGD || r->o.weight_decay != 0 || r->o.clip_grad_norm != 0 || r->late)
        return pd__err(PD_ERR_INVALID, "%s: the accumulating reference is plain SGD", r->name);
    const int mrows = BATCH / r->accum;
    pd_train_options o = on_host(&r->o);
    pd_session *s = NULL;
    pd_status st = load(fx, mrows, &r->g);
    if (st == PD_OK) st = pd_session_create(r->g, &o, &s);
    pd_value_info in;
    if (st == PD_OK) st = pd_graph_input(r->g, 0, &in);
    pd__slabs sl = {0};
    if (st == PD_OK) st = pd__session_slabs(s, &sl);
    size_t bytes = sizeof(float) * (size_t)sl.total;
    float *acc = malloc(bytes ? bytes : 1), *keep = malloc(bytes ? bytes : 1);
    for (int k = 0; k < r->steps && st == PD_OK; k++) {
        memset(acc, 0, bytes);
        memcpy(keep, sl.params, bytes);
        double loss = 0, norm = 0;
        for (int j = 0; j < r->accum && st == PD_OK; j++) {
            pd_tensor bx = rows_of(xs, (int64_t)k * BATCH + j * mrows, mrows);
            pd_tensor by = rows_of(ys, (int64_t)k * BATCH + j * mrows, mrows);
            pd_step_result res;
            st = pd_session_set_input(s, in.name, &bx);
            if (st == PD_OK) st = pd_session_set_labels(s, &by);
            if (st == PD_OK) st = pd_session_step(s, &res);
            memcpy(sl.params, keep, bytes);
            loss += res.loss / r->accum;
            for (int64_t i = 0; st == PD_OK && i < sl.total; i++) acc[i] += sl.grads[i] / (float)r->accum;
        }
        for (int64_t i = 0; st == PD_OK && i < sl.total; i++) {
            norm += (double)acc[i] * acc[i];
            sl.params[i] -= (float)r->o.lr * acc[i];
        }
        r->loss[k] = loss;
        r->gnorm[k] = sqrt(norm);
    }
    free(acc);
    free(keep);
    pd_session_destroy(s);
    return st;
}

/* Single-stage training on the whole stream, one minibatch of BATCH rows a step. */
static pd_status run_ref(const char *fx, const pd_tensor *xs, const pd_tensor *ys, ref *r) {
    if (r->accum > 1) return run_ref_accum(fx, xs, ys, r);
    pd_session *s = NULL;
    pd_train_options ho = on_host(&r->o);
    pd_status st = load(fx, BATCH, &r->g);
    if (st == PD_OK) st = pd_session_create(r->g, r->late ? &ho : &r->o, &s);
    pd_value_info in;
    if (st == PD_OK) st = pd_graph_input(r->g, 0, &in);
    pd__slabs sl = {0};
    if (st == PD_OK) st = pd__session_slabs(s, &sl);
    size_t bytes = sizeof(float) * (size_t)sl.total;
    float *prev = malloc(bytes ? bytes : 1), *cur = malloc(bytes ? bytes : 1);
    if (st == PD_OK) memcpy(prev, sl.params, bytes); /* W(-1) = W(0) */
    for (int k = 0; k < r->steps && st == PD_OK; k++) {
        if (r->late) { /* the step's gradient at W(k-1) */
            memcpy(cur, sl.params, bytes);
            memcpy(sl.params, prev, bytes);
        }
        pd_tensor bx = batch_of(xs, k), by = batch_of(ys, k);
        pd_step_result res;
        st = pd_session_set_input(s, in.name, &bx);
        if (st == PD_OK) st = pd_session_set_labels(s, &by);
        if (st == PD_OK) st = pd_session_step(s, &res);
        r->loss[k] = res.loss;
        r->gnorm[k] = res.grad_norm;
        if (st == PD_OK && r->late) { /* the session's own update is dropped: W(k+1) = W(k) - lr grad */
            memcpy(prev, cur, bytes);
            for (int64_t i = 0; i < sl.total; i++) sl.params[i] = cur[i] - (float)r->o.lr * sl.grads[i];
        }
    }
    free(prev);
    free(cur);
    pd_session_destroy(s);
    return st;
}

static pd_status make_plan(pd_graph *g, int stages, int m, pd_plan **plan) {
    pd_profile *prof = NULL;
    pd_profile_options po = PD_PROFILE_OPTIONS_INIT;
    po.warmup = 0;
    po.repeats = 1;
    po.threads = 1;
    pd_status st = pd_profile_measure(g, &po, &prof);
    pd_plan_options o = PD_PLAN_OPTIONS_INIT;
    o.algo = "uniform";
    o.workers = stages;
    o.straight = 1;
    o.microbatches = m;
    if (st == PD_OK) st = pd_plan_create(prof, &o, plan);
    pd_profile_destroy(prof);
    return st;
}

/* Bi-Partition from a uniform plan: at each boundary between stages s and
 * s+1, the backward of a node without parameters moves across it: bip 1, the
 * first node of s+1 to s (its activations travel back with the gradients);
 * bip 2, the last node of s to s+1 (they travel forward). Returns the nodes
 * moved. */
static int bipartition(const pd_graph *g, pd_plan *plan, int bip) {
    int moved = 0;
    for (int i = 1; i < g->nnodes; i++) {
        if (plan->fwd_stage[i - 1] == plan->fwd_stage[i]) continue;
        int v = bip == 1 ? i : i - 1, to = bip == 1 ? plan->fwd_stage[i - 1] : plan->fwd_stage[i];
        bool params = false;
        for (int j = 0; j < g->nodes[v].nin; j++) {
            int t = g->nodes[v].in[j];
            params |= t >= 0 && g->tensors[t].kind == PD_T_INIT && g->tensors[t].dtype == PD_FLOAT;
        }
        if (params) continue;
        plan->bwd_stage[v] = to;
        moved++;
    }
    return moved;
}

/* --device cuda with several devices: worker w's stages on device
 * w % spread_devices (the plan's per-stage device), 0: all on device 0 */
static int spread_devices = 0;

/* stages workers; chunks: virtual stages per worker (interleaved: the plan
 * cuts stages*chunks virtual stages); reps: NULL, or replicas per stage; bip:
 * 0, or a Bi-Partition (bipartition()). */
static void run_pipe_bx(const char *fx, const pd_tensor *xs, const pd_tensor *ys, const ref *r, int stages, int m,
                        pd__sched_kind kind, int chunks, const int *reps, int bip) {
    pd_graph *g = NULL;
    pd_plan *plan = NULL;
    pd__pipe *p = NULL;
    pd_step_result res[STEPS];
    char shape[160] = "";
    if (chunks > 1) snprintf(shape, sizeof shape, " x %d chunks", chunks);
    for (int s = 0; reps && s < stages; s++)
        snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%d", s ? "," : ", replicas ", reps[s]);
    pd_status st = load(fx, BATCH / m, &g);
    if (st == PD_OK) st = make_plan(g, stages * chunks, m, &plan);
    if (st == PD_OK && plan->n_stages != stages * chunks)
        st = pd__err(PD_ERR_INTERNAL, "the plan has %d stages", plan->n_stages);
    if (st == PD_OK) plan->chunks = chunks;
    for (int s = 0; st == PD_OK && reps && s < stages; s++) plan->stage[s].replicas = reps[s];
    for (int s = 0; st == PD_OK && spread_devices > 0 && s < plan->n_stages; s++) {
        plan->stage[s].has_device = true;
        plan->stage[s].device = s % stages % spread_devices; /* a worker's chunks share its device */
        snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%d", s ? "," : ", on devices ",
                 plan->stage[s].device);
    }
    for (int i = 0; st == PD_OK && tie_node && i < g->nnodes; i++) /* the table's second reader to the last stage */
        if (!strcmp(g->nodes[i].name, tie_node)) {
            plan->fwd_stage[i] = plan->bwd_stage[i] = plan->n_stages - 1;
            snprintf(shape + strlen(shape), sizeof shape - strlen(shape), ", the tied table on stages 0 and %d",
                     plan->n_stages - 1);
        }
    if (st == PD_OK && bip) {
        int moved = bipartition(g, plan, bip);
        snprintf(shape + strlen(shape), sizeof shape - strlen(shape), ", bipartition: %d backward%s moved %s", moved,
                 moved == 1 ? "" : "s", bip == 1 ? "back" : "on");
        if (moved == 0) st = pd__err(PD_ERR_INTERNAL, "no node without parameters at a boundary");
    }
    if (st == PD_OK) st = pd__pipe_create(g, plan, &r->o, kind, m, &p);
    if (st == PD_OK) st = pd__pipe_run(p, STEPS, xs, ys, res);
    int versions = 0;
    for (int s = 0; st == PD_OK && s < stages; s++)
        if (pd__pipe_peak_versions(p, s) > versions) versions = pd__pipe_peak_versions(p, s);
    pd__pipe_destroy(p); /* the graph gets the trained weights back */
    double worst = 0, wworst = 0;
    int compared = 0;
    for (int k = 0; st == PD_OK && k < STEPS; k++) {
        double e = fabs(res[k].loss - r->loss[k]) / fabs(r->loss[k]);
        if (!(e <= worst)) worst = e;
        /* a flushing schedule reports the update's global gradient norm, as one stage does */
        e = kind == PD_SCHED_2BW ? 0 : fabs(res[k].grad_norm - r->gnorm[k]) / fabs(r->gnorm[k]);
        if (!(e <= worst)) worst = e;
    }
    for (int t = 0; st == PD_OK && t < g->ntensors; t++) {
        const pd__tensor *a = &g->tensors[t];
        if (a->kind != PD_T_INIT || a->dtype != PD_FLOAT) continue;
        int u = pd__graph_find(r->g, a->name);
        double e = u >= 0 ? rel_err(a->data, r->g->tensors[u].data, a->numel) : INFINITY;
        if (!(e <= wworst)) wworst = e;
        compared++;
    }
    int max_versions = kind == PD_SCHED_2BW ? 2 : 1;
    CHECK(st == PD_OK && worst <= tol_of(r->tol) && wworst <= tol_of(r->tol) && compared > 0 && versions == max_versions,
          "%s, %d stages%s x %d microbatches, %s: %d step losses and %d weights equal single-stage, max relative "
          "error %.3g / %.3g, at most %d weight versions per stage%s%s",
          r->name, stages, shape, m, pd__sched_kind_name(kind), STEPS, compared, worst, wworst, versions,
          st ? ": " : "",
          st ? pd_last_error() : "");
    pd_plan_destroy(plan);
    pd_graph_destroy(g);
}

static void run_pipe_ex(const char *fx, const pd_tensor *xs, const pd_tensor *ys, const ref *r, int stages, int m,
                        pd__sched_kind kind, int chunks, const int *reps) {
    run_pipe_bx(fx, xs, ys, r, stages, m, kind, chunks, reps, 0);
}

static void run_pipe(const char *fx, const pd_tensor *xs, const pd_tensor *ys, const ref *r, int stages, int m,
                     pd__sched_kind kind) {
    run_pipe_ex(fx, xs, ys, r, stages, m, kind, 1, NULL);
}

/* The most weight versions a replica of stage s must hold under schedule sc
 * (pipedream, replica j of r taking the microbatches j mod r): walking its
 * instructions, the live version (STEPs so far) and the versions of its
 * microbatches whose F ran and whose B has not. */
static int versions_needed(const pd__schedule *sc, int s, int r) {
    int peak = 1;
    for (int j = 0; j < r; j++) {
        int live = 0, mb[64], ver[64], n = 0; /* its microbatches in flight and their versions */
        for (int k = 0; k < sc->len[s]; k++) {
            const pd__instr *in = &sc->ins[s][k];
            if (in->op == PD_I_F && in->mb % r == j && n < 64) mb[n] = in->mb, ver[n++] = in->version;
            for (int q = 0; in->op == PD_I_B && in->mb % r == j && q < n; q++)
                if (mb[q] == in->mb) mb[q] = mb[n - 1], ver[q] = ver[--n];
            if (in->op != PD_I_STEP) continue;
            int held = 1; /* the new live version, and each older one still named */
            live++;
            for (int q = 0; q < n; q++) {
                bool seen = ver[q] == live;
                for (int u = 0; u < q && !seen; u++) seen = ver[u] == ver[q];
                held += !seen;
            }
            if (held > peak) peak = held;
        }
    }
    return peak;
}

/* PipeDream: an update after every microbatch (BATCH rows), weights stashed.
 * reps (NULL: none): replicas per stage, which update once per round. */
static void run_pipedream(const char *fx, const pd_tensor *xs, const pd_tensor *ys, const ref *r, int stages,
                          const int *reps) {
    pd_graph *g = NULL;
    pd_plan *plan = NULL;
    pd__pipe *p = NULL;
    pd__schedule *sc = NULL;
    pd_step_result res[LONG];
    char shape[64] = "";
    for (int s = 0; reps && s < stages; s++)
        snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%d", s ? "," : ", replicas ", reps[s]);
    pd_status st = load(fx, BATCH, &g);
    if (st == PD_OK) st = make_plan(g, stages, 1, &plan);
    for (int s = 0; st == PD_OK && reps && s < stages; s++) plan->stage[s].replicas = reps[s];
    if (st == PD_OK) st = pd__schedule_build(PD_SCHED_PIPEDREAM, stages, 1, 1, LONG, reps, &sc);
    if (st == PD_OK) st = pd__pipe_create(g, plan, &r->o, PD_SCHED_PIPEDREAM, 1, &p);
    if (st == PD_OK) st = pd__pipe_run(p, LONG, xs, ys, res);
    char held[64] = "", want[64] = "";
    bool within = st == PD_OK;
    for (int s = 0; st == PD_OK && s < stages; s++) {
        int v = pd__pipe_peak_versions(p, s), w = versions_needed(sc, s, reps ? reps[s] : 1);
        within &= v == w && v <= stages - s && (reps || v == stages - s);
        snprintf(held + strlen(held), sizeof held - strlen(held), "%s%d", s ? " " : "", v);
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s%d", s ? " " : "", w);
    }
    CHECK(within,
          "%s, pipedream, %d stages%s: every backward used its forward's weight version; versions held per stage %s "
          "(the schedule's in-flight versions: %s; at most p-s: %d .. 1)%s%s",
          r->name, stages, shape, held, want, stages, st ? ": " : "", st ? pd_last_error() : "");
    pd__schedule_free(sc);
    double first = 0, last = 0, ref_last = 0;
    for (int k = 0; st == PD_OK && k < 10; k++) {
        first += res[k].loss / 10;
        last += res[LONG - 10 + k].loss / 10;
        ref_last += r->loss[LONG - 10 + k] / 10;
    }
    /* a replicated stage makes one update of the mean gradient per round of r microbatches, i.e. it moves
     * at 1/r of the others' rate per sample, so it is not held to the single-stage loss, only to a 20-fold drop */
    CHECK(st == PD_OK && (reps ? last < 0.05 * first : last < 0.1 * first && last < 2 * ref_last),
          "%s, pipedream, %d stages%s: converges, mean loss of the first 10 steps %.4f, of the last 10 %.4f "
          "(single-stage %.4f)",
          r->name, stages, shape, first, last, ref_last);
    pd__pipe_destroy(p);
    pd_plan_destroy(plan);
    pd_graph_destroy(g);
}

/* PipeDream, exactly: microbatch k's forward and backward on stage s use
 * version v_s(k) (its F's in the schedule) of that stage's weights; the
 * update k+1 = k - lr * gradient, on every stage. Replayed on one stage.
 * reps (NULL: none): a stage with r replicas updates once per round of r
 * microbatches (the run's last round may be shorter) with their mean
 * gradient: version v+1 = v - lr * mean of the round's gradients. */
static void run_pipedream_exact(const char *fx, const pd_tensor *xs, const pd_tensor *ys, const ref *r, int stages,
                                bool vsync, const int *reps) {
    pd_graph *g = NULL, *rg = NULL;
    pd_plan *plan = NULL;
    pd__pipe *p = NULL;
    pd__schedule *sc = NULL;
    pd_session *s = NULL;
    pd_step_result res[STEPS];
    double want[STEPS];
    int ver[4][STEPS], round[4] = {0}, cnt[4] = {0};
    float *hist = NULL, *acc = NULL;
    int *pq = NULL; /* per parameter: its stage */
    pd__slabs sl = {0};
    char shape[64] = "";
    for (int s = 0; reps && s < stages; s++)
        snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%d", s ? "," : ", replicas ", reps[s]);
    pd_status st = load(fx, BATCH, &g);
    if (st == PD_OK) st = load(fx, BATCH, &rg);
    if (st == PD_OK) st = make_plan(g, stages, 1, &plan);
    for (int s = 0; st == PD_OK && reps && s < stages; s++) plan->stage[s].replicas = reps[s];
    if (st == PD_OK) st = pd__schedule_build(PD_SCHED_PIPEDREAM, stages, 1, 1, STEPS, reps, &sc);
    if (st == PD_OK && vsync) st = pd__schedule_vertical_sync(sc);
    for (int q = 0; st == PD_OK && q < stages; q++)
        for (int k = 0; k < sc->len[q]; k++)
            if (sc->ins[q][k].op == PD_I_F) ver[q][sc->ins[q][k].mb] = sc->ins[q][k].version;
    /* the reference */
    pd_train_options ho = on_host(&r->o);
    if (st == PD_OK) st = pd_session_create(rg, &ho, &s);
    if (st == PD_OK) st = pd__session_slabs(s, &sl);
    if (st == PD_OK) {
        hist = calloc((size_t)sl.total * (STEPS + 1) + 1, sizeof(float));
        acc = calloc((size_t)sl.total + 1, sizeof(float));
        pq = calloc((size_t)sl.np + 1, sizeof(int));
        if (!hist || !acc || !pq) st = pd__err(PD_ERR_NOMEM, "out of memory");
    }
    if (st == PD_OK) memcpy(hist, sl.params, sizeof(float) * (size_t)sl.total);
    for (int i = 0; st == PD_OK && i < sl.np; i++)
        for (int n = 0; n < rg->nnodes; n++)
            for (int j = 0; j < rg->nodes[n].nin; j++)
                if (rg->nodes[n].in[j] == sl.param[i]) pq[i] = plan->fwd_stage[n];
    pd_value_info in;
    if (st == PD_OK) st = pd_graph_input(rg, 0, &in);
    for (int k = 0; st == PD_OK && k < STEPS; k++) {
        for (int i = 0; i < sl.np; i++) {
            const float *from = hist + (size_t)sl.total * (size_t)ver[pq[i]][k] + sl.poff[i];
            memcpy(sl.params + sl.poff[i], from, sizeof(float) * (size_t)rg->tensors[sl.param[i]].numel);
        }
        pd_tensor bx = batch_of(xs, k), by = batch_of(ys, k);
        pd_step_result one;
        st = pd_session_set_input(s, in.name, &bx);
        if (st == PD_OK) st = pd_session_set_labels(s, &by);
        if (st == PD_OK) st = pd_session_step(s, &one); /* its update is dropped */
        want[k] = one.loss;
        for (int64_t j = 0; j < sl.total; j++) acc[j] += sl.grads[j];
        for (int q = 0; q < stages; q++) { /* stage q closes a round: its next version */
            int rq = reps ? reps[q] : 1;
            cnt[q]++;
            if (k % rq != rq - 1 && k != STEPS - 1) continue;
            float f = 1.0f / (float)cnt[q];
            for (int i = 0; i < sl.np; i++) {
                if (pq[i] != q) continue;
                float *a = hist + (size_t)sl.total * (size_t)round[q] + sl.poff[i], *b = a + sl.total;
                float *gs = acc + sl.poff[i];
                for (int64_t j = 0; j < rg->tensors[sl.param[i]].numel; j++) {
                    b[j] = a[j] - (float)r->o.lr * (gs[j] * f);
                    gs[j] = 0;
                }
            }
            round[q]++;
            cnt[q] = 0;
        }
    }
    /* the pipeline */
    if (st == PD_OK) st = pd__pipe_create(g, plan, &r->o, PD_SCHED_PIPEDREAM, 1, &p);
    if (st == PD_OK) st = pd__pipe_set_vertical_sync(p, vsync);
    if (st == PD_OK) st = pd__pipe_run(p, STEPS, xs, ys, res);
    /* vertical sync: the last stage runs each microbatch on stage 0's version */
    bool same = true;
    for (int k = 0; st == PD_OK && k < STEPS; k++) same &= ver[stages - 1][k] == ver[0][k];
    pd__pipe_destroy(p);
    double worst = 0, wworst = 0;
    for (int k = 0; st == PD_OK && k < STEPS; k++) {
        double e = fabs(res[k].loss - want[k]) / fabs(want[k]);
        if (!(e <= worst)) worst = e;
    }
    for (int i = 0; st == PD_OK && i < sl.np; i++) {
        const pd__tensor *rt = &rg->tensors[sl.param[i]];
        int u = pd__graph_find(g, rt->name);
        const float *w = hist + (size_t)sl.total * (size_t)round[pq[i]] + sl.poff[i];
        double e = u >= 0 ? rel_err(g->tensors[u].data, w, rt->numel) : INFINITY;
        if (!(e <= wworst)) wworst = e;
    }
    CHECK(st == PD_OK && worst <= tol_of(1e-5) && wworst <= tol_of(1e-5) && same == vsync,
          "%s, pipedream%s, %d stages%s: %d step losses and %d weights equal single-stage with each stage's stashed "
          "version (stage 0's F of microbatch 5 uses version %d, the last stage's %d; updates per stage: %d, %d), "
          "max relative error %.3g / %.3g%s%s",
          r->name, vsync ? " with vertical sync" : "", stages, shape, STEPS, sl.np, st == PD_OK ? ver[0][5] : -1,
          st == PD_OK ? ver[stages - 1][5] : -1, round[0], round[stages - 1], worst, wworst, st ? ": " : "",
          st ? pd_last_error() : "");
    free(hist);
    free(acc);
    free(pq);
    pd_session_destroy(s);
    pd__schedule_free(sc);
    pd_plan_destroy(plan);
    pd_graph_destroy(g);
    pd_graph_destroy(rg);
}

/* Statistics and the trace of a run: 3 stages x 4 microbatches, STEPS steps.
 * Peaks of microbatches held (docs/SCHEDULES.md): gpipe m on every stage,
 * flush min(p-s, m), zb-h1 p; one weight version. Activation bytes: what the
 * stage's nodes produce plus what crosses into it, computed from the graph.
 * The trace holds exactly the run's instructions, one thread per stage. */
static void run_stats(const char *fx, const pd_tensor *xs, const pd_tensor *ys, const ref *r, pd__sched_kind kind) {
    enum { P = 3, M = 4 };
    pd_graph *g = NULL;
    pd_plan *plan = NULL;
    pd__pipe *p = NULL;
    pd_status st = load(fx, BATCH / M, &g);
    if (st == PD_OK) st = make_plan(g, P, M, &plan);
    if (st == PD_OK) st = pd__pipe_create(g, plan, &r->o, kind, M, &p);
    if (st == PD_OK) st = pd__pipe_run(p, STEPS, xs, ys, NULL);
    double wall = st == PD_OK ? pd__pipe_last_run_ms(p) : 0;
    bool ok = st == PD_OK && wall > 0;
    char got[256] = "";
    for (int s = 0; ok && s < P; s++) {
        pd__pipe_stats ps;
        pd__pipe_stats_get(p, s, &ps);
        int want_act = kind == PD_SCHED_GPIPE ? M : kind == PD_SCHED_FLUSH ? (P - s < M ? P - s : M) : P;
        double want_bytes = 0;
        for (int t = 0; t < g->ntensors; t++) {
            int prod = g->tensors[t].producer;
            if (prod < 0) continue;
            int ps_ = plan->fwd_stage[prod], last = ps_;
            for (int n = 0; n < g->nnodes; n++)
                for (int j = 0; j < g->nodes[n].nin; j++)
                    if (g->nodes[n].in[j] == t && plan->fwd_stage[n] > last) last = plan->fwd_stage[n];
            if (ps_ == s || (ps_ < s && last >= s))
                want_bytes += (double)g->tensors[t].numel * pd_dtype_size(g->tensors[t].dtype);
        }
        snprintf(got + strlen(got), sizeof got - strlen(got), "%sstage %d: busy %.2f ms, %d mbs (want %d), %d "
                 "versions, %.0f bytes (want %.0f)", s ? "; " : "", s, ps.busy_ms, ps.peak_act_mbs, want_act,
                 ps.peak_versions, ps.act_bytes_per_mb, want_bytes);
        ok &= ps.busy_ms > 0 && ps.busy_ms <= wall && ps.peak_act_mbs == want_act && ps.peak_versions == 1 &&
              ps.act_bytes_per_mb == want_bytes && want_bytes > 0;
    }
    CHECK(ok, "%s, %d stages x %d microbatches: statistics of a %.1f ms run: %s%s%s", pd__sched_kind_name(kind), P, M,
          wall, got, st ? ": " : "", st ? pd_last_error() : "");
    /* the trace */
    char tmp[64];
    snprintf(tmp, sizeof tmp, "/tmp/test_pipeline_%d.json", (int)getpid());
    pd_status wt = st == PD_OK ? pd__pipe_write_trace(p, tmp) : st;
    FILE *f = wt == PD_OK ? fopen(tmp, "rb") : NULL;
    char *js = NULL;
    if (f) {
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        fseek(f, 0, SEEK_SET);
        js = calloc(1, (size_t)n + 1);
        if (js && fread(js, 1, (size_t)n, f) != (size_t)n) js[0] = 0;
        fclose(f);
    }
    unlink(tmp);
    cJSON *j = js ? cJSON_Parse(js) : NULL;
    int count[PD_I_SNAPSHOT + 1][P], names = 0, bad = 0;
    memset(count, 0, sizeof count);
    double last_end[P] = {0};
    for (cJSON *e = j ? j->child : NULL; e; e = e->next) {
        const char *ph = cJSON_GetStringValue(cJSON_GetObjectItem(e, "ph"));
        const char *cat = cJSON_GetStringValue(cJSON_GetObjectItem(e, "cat"));
        int tid = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(e, "tid"));
        if (tid < 0 || tid >= P || !ph) {
            bad++;
            continue;
        }
        if (strcmp(ph, "M") == 0) {
            char want[32];
            snprintf(want, sizeof want, "stage %d", tid);
            const char *nm = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(e, "args"), "name"));
            names += nm && strcmp(nm, want) == 0;
            continue;
        }
        double ts = cJSON_GetNumberValue(cJSON_GetObjectItem(e, "ts")),
               dur = cJSON_GetNumberValue(cJSON_GetObjectItem(e, "dur"));
        int op = -1;
        for (int k = 0; cat && k <= PD_I_SNAPSHOT; k++)
            if (strcmp(cat, pd__op_name(k)) == 0) op = k;
        /* one thread's events in order, none overlapping, inside the run */
        if (op < 0 || strcmp(ph, "X") != 0 || !(ts >= last_end[tid] - 1e-3) || !(dur >= 0) ||
            !(ts + dur <= wall * 1000 + 1))
            bad++;
        else count[op][tid]++, last_end[tid] = ts + dur;
    }
    const int nmb = STEPS * M;
    bool tr = j && cJSON_IsArray(j) && names == P && bad == 0;
    for (int s = 0; s < P; s++) {
        tr &= count[PD_I_F][s] == nmb && count[PD_I_B][s] == nmb && count[PD_I_STEP][s] == STEPS;
        tr &= count[PD_I_W][s] == (kind == PD_SCHED_ZB_H1 ? nmb : 0) && count[PD_I_ALLREDUCE][s] == 0;
        tr &= count[PD_I_SEND_ACT][s] == (s < P - 1 ? nmb : 0) && count[PD_I_RECV_ACT][s] == (s > 0 ? nmb : 0);
        tr &= count[PD_I_SEND_GRAD][s] == (s > 0 ? nmb : 0) && count[PD_I_RECV_GRAD][s] == (s < P - 1 ? nmb : 0);
    }
    CHECK(tr,
          "%s: the Chrome trace holds every instruction of the run (per stage %d F, %d B, %d W, %d STEP, sends and "
          "receives; stage 1: %d F, %d RECV_ACT, %d W), in order inside the run, named threads (%d), %d bad "
          "events%s%s",
          pd__sched_kind_name(kind), nmb, nmb, kind == PD_SCHED_ZB_H1 ? nmb : 0, STEPS, count[PD_I_F][1],
          count[PD_I_RECV_ACT][1], count[PD_I_W][1], names, bad, wt ? ": " : "", wt ? pd_last_error() : "");
    cJSON_Delete(j);
    free(js);
    pd__pipe_destroy(p);
    pd_plan_destroy(plan);
    pd_graph_destroy(g);
}

/* zb-h1's split on one context: the input-gradient part leaves every
 * parameter gradient zero, the weight part then gives exactly the full
 * backward's parameter gradients. */
static void run_split(const char *fx, const pd_tensor *xs, const pd_tensor *ys, const ref *r) {
    pd_graph *g = NULL;
    pd_session *s = NULL;
    pd__actx *c = NULL;
    pd__slabs sl = {0};
    pd__exec x;
    memset(&x, 0, sizeof x);
    pd_status st = load(fx, BATCH, &g);
    if (st == PD_OK) st = pd_session_create(g, &r->o, &s);
    if (st == PD_OK) st = pd__session_slabs(s, &sl);
    int *nodes = g ? malloc(sizeof(int) * (size_t)g->nnodes) : NULL;
    uint8_t *role = g ? calloc((size_t)g->ntensors, 1) : NULL;
    for (int i = 0; nodes && i < g->nnodes; i++) nodes[i] = i;
    if (role && s) role[pd__session_loss_tensor(s)] = PD__G_SET;
    if (st == PD_OK) st = pd__actx_create(s, NULL, nodes, g->nnodes, role, true, &c);
    float *part = malloc(sizeof(float) * (size_t)(sl.total + 1));
    float *full = malloc(sizeof(float) * (size_t)(sl.total + 1));
    double after_b = -1, in_grad = 0, err = INFINITY;
    if (st == PD_OK) {
        x.threads = 1;
        x.g = g;
        x.training = true;
        pd_tensor bx = batch_of(xs, 0), by = batch_of(ys, 0);
        int in0 = g->inputs[0];
        memcpy(pd__actx_value(c, in0)->data, bx.data, (size_t)pd_tensor_numel(&bx) * pd_dtype_size(bx.dtype));
        if (pd__session_labels_input(s) >= 0) {
            int li = pd__session_labels_input(s);
            memcpy(pd__actx_value(c, li)->data, by.data, (size_t)pd_tensor_numel(&by) * pd_dtype_size(by.dtype));
        }
        pd_step_result res;
        st = pd__actx_forward(s, &x, c, nodes, g->nnodes);
        for (int round = 0; round < 2 && st == PD_OK; round++) {
            memset(sl.grads, 0, sizeof(float) * (size_t)sl.total); /* the activation gradients: the backward */
            st = pd__actx_loss(s, c, &by, 1.0, &res);
            if (st == PD_OK && round == 0) {
                st = pd__actx_backward_part(s, &x, c, nodes, g->nnodes, false);
                after_b = 0;
                for (int64_t e = 0; e < sl.total; e++) after_b = fmax(after_b, fabs(sl.grads[e]));
                for (int t = 0; t < g->ntensors; t++) {
                    pd_tensor *d = pd__actx_grad(c, t);
                    if (g->tensors[t].kind == PD_T_ACT && d->data && g->tensors[t].dtype == PD_FLOAT)
                        for (int64_t e = 0; e < g->tensors[t].numel; e++)
                            in_grad = fmax(in_grad, fabs(((float *)d->data)[e]));
                }
                if (st == PD_OK) st = pd__actx_backward_part(s, &x, c, nodes, g->nnodes, true);
                memcpy(part, sl.grads, sizeof(float) * (size_t)sl.total);
            } else if (st == PD_OK) {
                st = pd__actx_backward(s, &x, c, nodes, g->nnodes);
                memcpy(full, sl.grads, sizeof(float) * (size_t)sl.total);
            }
        }
        if (st == PD_OK) err = rel_err(part, full, sl.total);
    }
    CHECK(st == PD_OK && after_b == 0 && in_grad > 0 && err <= 1e-6,
          "%s: the input-gradient half of the backward leaves the weight gradients zero (max %g; activation "
          "gradients up to %g), the weight half then equals the whole backward's (relative error %.3g)%s%s",
          r->name, after_b, in_grad, err, st ? ": " : "", st ? pd_last_error() : "");
    free(part);
    free(full);
    free(nodes);
    free(role);
    PD_FREE(x.scratch);
    pd__actx_destroy(c);
    pd_session_destroy(s);
    pd_graph_destroy(g);
}

/* A failure on a replicated stage (an F of one replica's microbatch, an
 * ALLREDUCE or STEP that every replica runs) and in an interleaved chunk stops
 * the pipeline naming it; no replica waits forever; it trains on afterwards. */
static void run_failures_ex(const char *fx, const pd_tensor *xs, const pd_tensor *ys, const ref *r) {
    enum { P = 3, M = 4 };
    pd_graph *g = NULL;
    pd_plan *plan = NULL;
    pd__pipe *p = NULL;
    pd_status st = load(fx, BATCH / M, &g);
    if (st == PD_OK) st = make_plan(g, P, M, &plan);
    if (st == PD_OK) plan->stage[1].replicas = 2;
    if (st == PD_OK) st = pd__pipe_create(g, plan, &r->o, PD_SCHED_FLUSH, M, &p);
    const int ops[] = {PD_I_F, PD_I_B, PD_I_ALLREDUCE, PD_I_STEP, PD_I_RECV_ACT, PD_I_SEND_GRAD};
    int named = 0;
    char bad[1024] = "";
    for (int i = 0; st == PD_OK && i < 6; i++) {
        int mb = ops[i] == PD_I_ALLREDUCE || ops[i] == PD_I_STEP ? 7 : 5;
        pd__pipe_inject_failure(p, 1, ops[i], mb);
        pd_status run = pd__pipe_run(p, 4, xs, ys, NULL);
        char want[128];
        snprintf(want, sizeof want, ", step 2, %s of microbatch %d: injected failure", pd__op_name(ops[i]), mb);
        bool ok = run == PD_ERR_INTERNAL && strstr(pd_last_error(), want) &&
                  strstr(pd_last_error(), mb == 5 ? "stage 1 (replica 1)" : "stage 1 (replica ");
        named += ok;
        if (!ok && !bad[0]) snprintf(bad, sizeof bad, "; %s: got '%s'", want, pd_last_error());
    }
    if (p) pd__pipe_inject_failure(p, -1, 0, 0);
    if (st == PD_OK) st = pd__pipe_run(p, 4, xs, ys, NULL);
    pd__pipe_destroy(p);
    p = NULL;
    pd_plan_destroy(plan);
    plan = NULL;
    /* interleaved: 2 workers x 2 chunks */
    bool chunk_named = false;
    if (st == PD_OK) st = make_plan(g, 4, M, &plan);
    if (st == PD_OK) plan->chunks = 2;
    if (st == PD_OK) st = pd__pipe_create(g, plan, &r->o, PD_SCHED_INTERLEAVED, M, &p);
    if (st == PD_OK) {
        pd__pipe_inject_failure(p, 1, PD_I_B, 6);
        pd_status run = pd__pipe_run(p, 4, xs, ys, NULL);
        chunk_named = run == PD_ERR_INTERNAL && strstr(pd_last_error(), "stage 1, step 2, B of microbatch 6 (chunk ");
        if (!chunk_named && !bad[0]) snprintf(bad, sizeof bad, "; interleaved: got '%s'", pd_last_error());
        pd__pipe_inject_failure(p, -1, 0, 0);
        st = pd__pipe_run(p, 4, xs, ys, NULL);
    }
    CHECK(st == PD_OK && named == 6 && chunk_named,
          "flush, 3 stages, stage 1 with 2 replicas: %d/6 injected failures (F, B, ALLREDUCE, STEP, RECV_ACT, "
          "SEND_GRAD) stop every replica, named; interleaved 2 x 2 chunks: a failed B names its chunk; both train on "
          "afterwards%s%s%s",
          named, bad, st ? ": " : "", st ? pd_last_error() : "");
    pd__pipe_destroy(p);
    pd_plan_destroy(plan);
    pd_graph_destroy(g);
}

/* pipedream with stage 1 of 3 on two replicas: a failure injected at each
 * instruction kind of microbatch 5 (replica 1's; its round's ALLREDUCE and
 * STEP, which both replicas run) stops the run naming it, no replica waits
 * forever, and the pipeline trains on. */
static void run_failures_pd(const char *fx, const pd_tensor *xs, const pd_tensor *ys, const ref *r) {
    pd_graph *g = NULL;
    pd_plan *plan = NULL;
    pd__pipe *p = NULL;
    pd_status st = load(fx, BATCH, &g);
    if (st == PD_OK) st = make_plan(g, 3, 1, &plan);
    if (st == PD_OK) plan->stage[1].replicas = 2;
    if (st == PD_OK) st = pd__pipe_create(g, plan, &r->o, PD_SCHED_PIPEDREAM, 1, &p);
    const int ops[] = {PD_I_F, PD_I_B, PD_I_ALLREDUCE, PD_I_STEP, PD_I_RECV_ACT, PD_I_SEND_GRAD};
    int named = 0;
    char bad[1024] = "";
    for (int i = 0; st == PD_OK && i < 6; i++) {
        pd__pipe_inject_failure(p, 1, ops[i], 5);
        pd_status run = pd__pipe_run(p, 8, xs, ys, NULL);
        char want[128];
        snprintf(want, sizeof want, ", step 6, %s of microbatch 5: injected failure", pd__op_name(ops[i]));
        bool every = ops[i] == PD_I_ALLREDUCE || ops[i] == PD_I_STEP;
        bool ok = run == PD_ERR_INTERNAL && strstr(pd_last_error(), want) &&
                  strstr(pd_last_error(), every ? "stage 1 (replica " : "stage 1 (replica 1)");
        named += ok;
        if (!ok && !bad[0]) snprintf(bad, sizeof bad, "; %s: got '%s'", want, pd_last_error());
    }
    if (p) pd__pipe_inject_failure(p, -1, 0, 0);
    if (st == PD_OK) st = pd__pipe_run(p, 8, xs, ys, NULL);
    CHECK(st == PD_OK && named == 6,
          "pipedream, 3 stages, stage 1 with 2 replicas: %d/6 injected failures (F, B, ALLREDUCE, STEP, RECV_ACT, "
          "SEND_GRAD) stop every replica, named; it trains on afterwards%s%s%s",
          named, bad, st ? ": " : "", st ? pd_last_error() : "");
    pd__pipe_destroy(p);
    pd_plan_destroy(plan);
    pd_graph_destroy(g);
}

/* Plans the pipeline cannot run say why. */
static bool no_snap(void *ctx, int64_t b) {
    (void)ctx, (void)b;
    return false;
}
static void no_ready(void *ctx, int64_t b) { (void)ctx, (void)b; }

static void run_refusals(const char *fx, const ref *r) {
    pd_graph *g = NULL;
    pd_plan *plan = NULL;
    pd__pipe *p = NULL;
    pd_status st = load(fx, BATCH / 4, &g);
    if (st == PD_OK) st = make_plan(g, 4, 4, &plan);
    pd_status a = st == PD_OK ? pd__pipe_create(g, plan, &r->o, PD_SCHED_INTERLEAVED, 4, &p) : st;
    char ma[512];
    snprintf(ma, sizeof ma, "%s", pd_last_error());
    pd__pipe_destroy(p);
    p = NULL;
    if (st == PD_OK) plan->chunks = 2;
    pd_status b = st == PD_OK ? pd__pipe_create(g, plan, &r->o, PD_SCHED_FLUSH, 4, &p) : st;
    char mb[512];
    snprintf(mb, sizeof mb, "%s", pd_last_error());
    pd__pipe_destroy(p);
    p = NULL;
    if (st == PD_OK) {
        plan->chunks = 1;
        plan->stage[1].replicas = 2;
    }
    /* pipedream runs a replicated stage, but not with vertical sync (its versions count rounds) or snapshots */
    pd_status c = st == PD_OK ? pd__pipe_create(g, plan, &r->o, PD_SCHED_PIPEDREAM, 1, &p) : st;
    pd_status cv = c == PD_OK ? pd__pipe_set_vertical_sync(p, true) : c;
    char mc[512], mh[512];
    snprintf(mc, sizeof mc, "%s", pd_last_error());
    pd__snap_hooks hooks = {no_snap, no_ready, NULL};
    pd_status ch = c == PD_OK ? pd__pipe_set_snap_hooks(p, &hooks) : c;
    snprintf(mh, sizeof mh, "%s", pd_last_error());
    pd__pipe_destroy(p);
    p = NULL;
    if (st == PD_OK) {
        plan->stage[1].replicas = 1;
        plan->bwd_stage[0] = plan->fwd_stage[0] + 1;
    }
    pd_status d = st == PD_OK ? pd__pipe_create(g, plan, &r->o, PD_SCHED_FLUSH, 4, &p) : st;
    char md[512];
    snprintf(md, sizeof md, "%s", pd_last_error());
    pd__pipe_destroy(p);
    p = NULL;
    if (st == PD_OK) plan->bwd_stage[0] = plan->fwd_stage[0];
    /* a PipeDream-2BW plan of width 2: two pipelines, so every stage twice */
    if (st == PD_OK) {
        plan->stage[1].replicas = 1;
        plan->chunks = 1;
        plan->algo = PD_ALGO_2BW;
        plan->width = 2;
    }
    pd_status w2 = st == PD_OK ? pd__pipe_create(g, plan, &r->o, PD_SCHED_2BW, 4, &p) : st;
    CHECK(w2 == PD_OK && pd__pipe_processes(p) == 2 * plan->n_stages,
          "a 2bw plan of width 2 and %d stages runs %d threads, every stage twice", plan->n_stages,
          p ? pd__pipe_processes(p) : -1);
    pd__pipe_destroy(p);
    p = NULL;
    if (st == PD_OK) plan->algo = PD_ALGO_PIPEDREAM, plan->width = 1;
    pd_train_options clip = r->o;
    clip.clip_grad_norm = 1;
    pd_status e = st == PD_OK ? pd__pipe_create(g, plan, &clip, PD_SCHED_PIPEDREAM, 1, &p) : st;
    CHECK(e == PD_ERR_UNSUPPORTED && strstr(pd_last_error(), "opt->clip_grad_norm"),
          "refused: gradient clipping under pipedream, whose stages update on their own (%s)", pd_last_error());
    pd__pipe_destroy(p);
    CHECK(a == PD_ERR_INVALID && strstr(ma, "interleaved needs a plan with chunks") && b == PD_ERR_INVALID &&
              strstr(mb, "runs only under interleaved") && c == PD_OK && cv == PD_ERR_UNSUPPORTED &&
              strstr(mc, "opt->vertical_sync: stage 1 is replicated") && ch == PD_ERR_UNSUPPORTED &&
              strstr(mh, "checkpoints of a pipedream run with a replicated stage") && d == PD_ERR_UNSUPPORTED &&
              strstr(md, "bipartition"),
          "refused, with reasons: interleaved without chunks (%s); chunks under flush (%s); under pipedream with a "
          "replicated stage, vertical sync (%s) and snapshots (%s); a backward on another stage (%s)",
          ma, mb, mc, mh, md);
    pd_plan_destroy(plan);
    pd_graph_destroy(g);
}

/* A failure injected at every instruction kind of every stage, on
 * microbatch 5 (step 2), stops the run with an error naming it; no deadlock.
 * Then the same pipeline trains on. */
static void run_failures(const char *fx, const pd_tensor *xs, const pd_tensor *ys, const ref *r, pd__sched_kind kind) {
    enum { P = 3, M = 4 };
    pd_graph *g = NULL;
    pd_plan *plan = NULL;
    pd__pipe *p = NULL;
    pd_status st = load(fx, BATCH / M, &g);
    if (st == PD_OK) st = make_plan(g, P, M, &plan);
    if (st == PD_OK) st = pd__pipe_create(g, plan, &r->o, kind, M, &p);
    int tried = 0, named = 0;
    char first_bad[1024] = "";
    const int ops[] = {PD_I_F, PD_I_B, PD_I_SEND_ACT, PD_I_RECV_ACT, PD_I_SEND_GRAD, PD_I_RECV_GRAD, PD_I_STEP};
    for (int s = 0; st == PD_OK && s < P; s++)
        for (int i = 0; i < 7; i++) {
            int op = ops[i], mb = op == PD_I_STEP ? 7 : 5;
            if ((s == 0 && (op == PD_I_RECV_ACT || op == PD_I_SEND_GRAD)) ||
                (s == P - 1 && (op == PD_I_SEND_ACT || op == PD_I_RECV_GRAD)))
                continue;
            pd__pipe_inject_failure(p, s, op, mb);
            pd_status run = pd__pipe_run(p, 4, xs, ys, NULL);
            char want[128];
            snprintf(want, sizeof want, "stage %d, step 2, %s of microbatch %d: injected failure", s,
                     pd__op_name(op), mb);
            tried++;
            if (run == PD_ERR_INTERNAL && strstr(pd_last_error(), want)) named++;
            else if (!first_bad[0]) snprintf(first_bad, sizeof first_bad, "%s: got '%s'", want, pd_last_error());
        }
    if (p) pd__pipe_inject_failure(p, -1, 0, 0);
    if (st == PD_OK) st = pd__pipe_run(p, 4, xs, ys, NULL);
    CHECK(st == PD_OK && tried == 17 && named == tried,
          "%s, %d stages x %d microbatches: %d/%d injected failures (every instruction kind on every stage) stop the "
          "pipeline, named; it trains on afterwards%s%s%s%s",
          pd__sched_kind_name(kind), P, M, named, tried, first_bad[0] ? "; " : "", first_bad, st ? ": " : "",
          st ? pd_last_error() : "");
    pd__pipe_destroy(p);
    pd_plan_destroy(plan);
    pd_graph_destroy(g);
}

/* A NaN in minibatch 3's data: the last stage's loss is NaN; every stage stops. */
static void run_nan(const char *fx, const pd_tensor *xs, const pd_tensor *ys, const ref *r) {
    pd_graph *g = NULL;
    pd_plan *plan = NULL;
    pd__pipe *p = NULL;
    size_t row = (size_t)(pd_tensor_numel(xs) / xs->shape[0]);
    pd_tensor bad = *xs;
    bad.data = malloc(sizeof(float) * (size_t)pd_tensor_numel(xs));
    memcpy(bad.data, xs->data, sizeof(float) * (size_t)pd_tensor_numel(xs));
    ((float *)bad.data)[3 * BATCH * row + 5] = NAN;
    pd_status st = load(fx, BATCH / 2, &g);
    if (st == PD_OK) st = make_plan(g, 3, 2, &plan);
    if (st == PD_OK) st = pd__pipe_create(g, plan, &r->o, PD_SCHED_FLUSH, 2, &p);
    pd_status run = st == PD_OK ? pd__pipe_run(p, STEPS, &bad, ys, NULL) : st;
    const char *msg = pd_last_error();
    CHECK(st == PD_OK && run == PD_ERR_NUMERIC && strstr(msg, "stage 2, step 4,") && strstr(msg, "nan"),
          "a NaN in step 4's data stops the 3-stage pipeline: %s", msg);
    /* the pipeline still trains afterwards */
    if (st == PD_OK) st = pd__pipe_run(p, 2, xs, ys, NULL);
    CHECK(st == PD_OK, "after the error the pipeline runs again%s%s", st ? ": " : "", st ? pd_last_error() : "");
    pd__pipe_destroy(p);
    pd_plan_destroy(plan);
    pd_graph_destroy(g);
    free(bad.data);
}

/* Every check on one fixture (full), or a sample. */
/* A fixture's training rows as the stream of `steps` steps of BATCH rows,
 * laid out row after row (xs, ys: malloc'd; X, Y, d: the caller frees). */
static pd_status load_stream(const char *fx, int steps, pd_tensor *X, pd_tensor *Y, pd__data *d, pd_tensor *xs,
                             pd_tensor *ys) {
    char p[1100];
    snprintf(p, sizeof p, "%s/train/sgd/X.npy", fx);
    pd_status st = pd_npy_load(p, X);
    snprintf(p, sizeof p, "%s/train/sgd/Y.npy", fx);
    if (st == PD_OK) st = pd_npy_load(p, Y);
    if (st == PD_OK) st = pd__data_init(d, X, Y, BATCH, false, 0);
    if (st != PD_OK) return st;
    *xs = *X;
    *ys = *Y;
    xs->shape[0] = ys->shape[0] = (int64_t)steps * BATCH;
    size_t xr = (size_t)(pd_tensor_numel(X) / X->shape[0]) * pd_dtype_size(X->dtype);
    size_t yr = (size_t)(pd_tensor_numel(Y) / Y->shape[0]) * pd_dtype_size(Y->dtype);
    xs->data = malloc(xr * (size_t)steps * BATCH);
    ys->data = malloc(yr * (size_t)steps * BATCH);
    for (int k = 0; k < steps; k++)
        pd__data_fill(d, k, (char *)xs->data + xr * BATCH * (size_t)k, (char *)ys->data + yr * BATCH * (size_t)k);
    return PD_OK;
}

#ifdef PD_HAVE_CUDA /* dev_run, dev_cpu_check: the simulated device's checks */
/* One run of a plan's pipeline on o's device: its losses, its forwards
 * redone (recomputation), and its graph with the trained weights. */
static pd_status dev_run(const char *fx, const pd_plan *plan, const pd_train_options *o, int m, pd__sched_kind kind,
                         const pd_tensor *xs, const pd_tensor *ys, pd_step_result *res, int64_t *redone,
                         pd_graph **g) {
    pd__pipe *p = NULL;
    pd_status st = load(fx, BATCH / m, g);
    if (st == PD_OK) st = pd__pipe_create(*g, plan, o, kind, m, &p);
    if (st == PD_OK) st = pd__pipe_run(p, STEPS, xs, ys, res);
    *redone = 0;
    for (int s = 0; st == PD_OK && s < pd__pipe_stages(p); s++) {
        pd__pipe_stats ps;
        pd__pipe_stats_get(p, s, &ps);
        *redone += ps.recomputes;
    }
    pd__pipe_destroy(p); /* the graph gets the trained weights back */
    return st;
}

/* --device cuda on the simulated device (the CPU's kernels behind the CUDA
 * API): a plan's device stages against the same plan's CPU stages, bit for
 * bit: every step's loss and gradient norm and every trained weight (what
 * the device stages share with the CPU's: the schedule, the sums' order,
 * the norm's blocks, runtime/optim.h; reps: replicas per stage, summed
 * through host memory in replica order as on the CPU). */
static void dev_cpu_check(const char *fx, const pd_tensor *xs, const pd_tensor *ys, const ref *r, int stages, int m,
                          pd__sched_kind kind, int chunks, const int *reps, bool rc) {
    pd_graph *g0 = NULL, *ga = NULL, *gb = NULL;
    pd_plan *plan = NULL;
    pd_step_result ra[STEPS], rb[STEPS];
    pd_train_options cpu = r->o;
    cpu.device = PD_DEVICE_CPU;
    char shape[96] = "";
    for (int s = 0; reps && s < stages; s++)
        snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%d", s ? "," : ", replicas ", reps[s]);
    pd_status st = load(fx, BATCH / m, &g0);
    if (st == PD_OK) st = make_plan(g0, stages * chunks, m, &plan);
    if (st == PD_OK) plan->chunks = chunks;
    for (int s = 0; st == PD_OK && reps && s < stages; s++) plan->stage[s].replicas = reps[s];
    for (int s = 0; st == PD_OK && spread_devices > 0 && s < plan->n_stages; s++) { /* the CPU run ignores them */
        plan->stage[s].has_device = true;
        plan->stage[s].device = s % stages % spread_devices;
    }
    if (st == PD_OK && spread_devices > 0)
        snprintf(shape + strlen(shape), sizeof shape - strlen(shape), ", on %d devices", spread_devices);
    if (st == PD_OK) plan->recompute = rc;
    int64_t na = 0, nb = 0;
    if (st == PD_OK) st = dev_run(fx, plan, &cpu, m, kind, xs, ys, ra, &na, &ga);
    if (st == PD_OK) st = dev_run(fx, plan, &r->o, m, kind, xs, ys, rb, &nb, &gb);
    /* the norms: bitwise too, and under the flushing schedules not 0 (pipedream and 2bw have none) */
    bool flushing = kind != PD_SCHED_PIPEDREAM && kind != PD_SCHED_2BW;
    int same = 0, weights = 0, norms = 0, clipped = 0;
    for (int k = 0; st == PD_OK && k < STEPS; k++) {
        same += memcmp(&ra[k].loss, &rb[k].loss, sizeof ra[k].loss) == 0;
        norms += memcmp(&ra[k].grad_norm, &rb[k].grad_norm, sizeof ra[k].grad_norm) == 0 &&
                 (ra[k].grad_norm > 0) == flushing;
        clipped += r->o.clip_grad_norm > 0 && ra[k].grad_norm > r->o.clip_grad_norm;
    }
    for (int t = 0; st == PD_OK && t < ga->ntensors; t++) {
        const pd__tensor *a = &ga->tensors[t], *b = &gb->tensors[t];
        if (a->kind != PD_T_INIT || a->dtype != PD_FLOAT) continue;
        weights++;
        same += memcmp(a->data, b->data, sizeof(float) * (size_t)a->numel) == 0;
    }
    CHECK(st == PD_OK && weights > 0 && same == STEPS + weights && norms == STEPS && na == nb && (na > 0) == rc &&
              (clipped > 0) == (r->o.clip_grad_norm > 0),
          "%s, %d stages%s%s x %d microbatches, %s%s: device stages against CPU stages, %d of %d losses and weights, "
          "%d of %d gradient norms%s bitwise equal (%d steps clipped), %lld and %lld forwards redone%s%s", r->name,
          stages, chunks > 1 ? " x 2 chunks" : "", shape, m, pd__sched_kind_name(kind), rc ? ", recompute" : "", same,
          STEPS + weights, norms, STEPS, flushing ? "" : " (0)", clipped, (long long)na, (long long)nb, st ? ": " : "",
          st ? pd_last_error() : "");
    pd_plan_destroy(plan);
    pd_graph_destroy(g0);
    pd_graph_destroy(ga);
    pd_graph_destroy(gb);
}
#endif

/* --device cuda: every stage on GPU 0. refs as run_model's (full: all five). */
static void run_gpu(const char *fx, const pd_tensor *xs, const pd_tensor *ys, const ref *refs, bool full) {
    const pd__sched_kind kinds[] = {PD_SCHED_GPIPE, PD_SCHED_FLUSH};
    for (int stages = 2; stages <= 4; stages++)
        for (int k = 0; k < 2; k++) run_pipe(fx, xs, ys, &refs[0], stages, 4, kinds[k]);
    run_pipe(fx, xs, ys, &refs[0], 2, 1, PD_SCHED_FLUSH);
    run_pipe(fx, xs, ys, &refs[0], 3, 2, PD_SCHED_GPIPE);
    run_pipe(fx, xs, ys, &refs[1], 3, 4, PD_SCHED_FLUSH);
    for (int stages = 2; stages <= 4; stages++) {
        run_pipe(fx, xs, ys, &refs[0], stages, 4, PD_SCHED_ZB_H1);
        run_pipe(fx, xs, ys, &refs[2], stages, 2, PD_SCHED_2BW);
        run_pipedream_exact(fx, xs, ys, &refs[0], stages, false, NULL);
    }
    run_pipedream_exact(fx, xs, ys, &refs[0], 3, true, NULL);
    run_pipe_ex(fx, xs, ys, &refs[0], 2, 4, PD_SCHED_INTERLEAVED, 2, NULL);
    run_pipe_bx(fx, xs, ys, &refs[0], 3, 4, PD_SCHED_FLUSH, 1, NULL, 2);
    /* stages on different devices (the simulated device's 4, or a machine's GPUs): peer copies, events across them */
    if (pd_cuda_device_count() >= 2) {
        spread_devices = pd_cuda_device_count();
        run_pipe(fx, xs, ys, &refs[0], 3, 4, PD_SCHED_FLUSH);
        run_pipe(fx, xs, ys, &refs[0], 4, 4, PD_SCHED_ZB_H1);
        run_pipe(fx, xs, ys, &refs[2], 3, 2, PD_SCHED_2BW);
        run_pipe_ex(fx, xs, ys, &refs[0], 2, 4, PD_SCHED_INTERLEAVED, 2, NULL);
#ifdef PD_HAVE_CUDA
        static const int r12d[] = {1, 2};
        if (pd__cuda_is_sim()) dev_cpu_check(fx, xs, ys, &refs[0], 2, 4, PD_SCHED_FLUSH, 1, r12d, true);
#endif
        spread_devices = 0;
    }
    /* the same plan on CPU stages, bit for bit (the simulated device runs the CPU's kernels) */
#ifdef PD_HAVE_CUDA
    if (pd__cuda_is_sim()) {
        static const int r12[] = {1, 2};
        static const struct { pd__sched_kind kind; int m, chunks; } every[] = {
            {PD_SCHED_GPIPE, 4, 1}, {PD_SCHED_ZB_H1, 4, 1}, {PD_SCHED_INTERLEAVED, 4, 2},
            {PD_SCHED_PIPEDREAM, 1, 1}, {PD_SCHED_2BW, 2, 1},
        };
        dev_cpu_check(fx, xs, ys, &refs[0], 2, 4, PD_SCHED_FLUSH, 1, NULL, false);
        dev_cpu_check(fx, xs, ys, &refs[0], 2, 4, PD_SCHED_FLUSH, 1, r12, false); /* replicas in one process */
        dev_cpu_check(fx, xs, ys, &refs[0], 3, 4, PD_SCHED_FLUSH, 1, NULL, true); /* recomputation */
        for (int k = 0; full && k < (int)(sizeof every / sizeof *every); k++) {
            dev_cpu_check(fx, xs, ys, &refs[0], 2, every[k].m, every[k].kind, every[k].chunks, r12, false);
            dev_cpu_check(fx, xs, ys, &refs[0], 2, every[k].m, every[k].kind, every[k].chunks, NULL, true);
        }
        if (full) dev_cpu_check(fx, xs, ys, &refs[0], 2, 4, PD_SCHED_FLUSH, 1, r12, true);
        /* clipped to the whole model's norm: the same norm, so the same clip factor */
        static const struct { pd__sched_kind kind; int stages, chunks; } clip[] = {
            {PD_SCHED_FLUSH, 3, 1}, {PD_SCHED_GPIPE, 2, 1}, {PD_SCHED_ZB_H1, 3, 1}, {PD_SCHED_INTERLEAVED, 2, 2},
        };
        for (int k = 0; full && k < (int)(sizeof clip / sizeof *clip); k++)
            dev_cpu_check(fx, xs, ys, &refs[4], clip[k].stages, 4, clip[k].kind, clip[k].chunks, NULL, false);
    }
#endif
    if (!full) return;
    run_pipe_ex(fx, xs, ys, &refs[1], 2, 4, PD_SCHED_INTERLEAVED, 2, NULL);
    for (int stages = 2; stages <= 4; stages++) run_pipedream(fx, xs, ys, &refs[3], stages, NULL);
    run_pipe(fx, xs, ys, &refs[4], 3, 4, PD_SCHED_FLUSH); /* clipped to the whole model's norm */
    run_nan(fx, xs, ys, &refs[0]);
    run_failures(fx, xs, ys, &refs[0], PD_SCHED_FLUSH);
    run_failures(fx, xs, ys, &refs[2], PD_SCHED_2BW);
    /* what GPU stages do not run yet, refused in one line naming it */
    pd_graph *g = NULL;
    pd_plan *plan = NULL;
    pd__pipe *p = NULL;
    pd_status st = load(fx, BATCH / 4, &g);
    if (st == PD_OK) st = make_plan(g, 3, 4, &plan);
    pd_status b = st == PD_OK ? pd__pipe_create(g, plan, &refs[0].o, PD_SCHED_FLUSH, 4, &p) : st;
    pd__snap_hooks hooks = {no_snap, no_ready, NULL};
    pd_status c = b == PD_OK ? pd__pipe_set_snap_hooks(p, &hooks) : b;
    char mc[512];
    snprintf(mc, sizeof mc, "%s", pd_last_error());
    pd__pipe_destroy(p);
    p = NULL;
    pd_train_options far = refs[0].o;
    far.device_index = 99;
    pd_status d = st == PD_OK ? pd__pipe_create(g, plan, &far, PD_SCHED_FLUSH, 4, &p) : st;
    char md[512];
    snprintf(md, sizeof md, "%s", pd_last_error());
    pd__pipe_destroy(p);
    p = NULL;
    CHECK(c == PD_OK && d == PD_ERR_INVALID && strstr(md, "cuda:99"),
          "GPU stages refuse, with a reason, a GPU the machine lacks (%s); and take snapshot hooks (%s: "
          "test_checkpoint --device cuda runs them)",
          md, c == PD_OK ? "yes" : mc);
    pd_plan_destroy(plan);
    pd_graph_destroy(g);
}

/* A replicated last stage's replicas finish their microbatches in any order;
 * the step's loss adds the microbatches' losses in microbatch order all the
 * same, so runs give the same bits (and processes give one process's). */
static void run_loss_order(const char *fx, const pd_tensor *xs, const pd_tensor *ys, const ref *r) {
    enum { RUNS = 8, M = 8 };
    const int reps[] = {1, 3};
    double first[STEPS];
    int differ = 0, runs = 0;
    pd_status st = PD_OK;
    for (int run = 0; run < RUNS && st == PD_OK; run++) {
        pd_graph *g = NULL;
        pd_plan *plan = NULL;
        pd__pipe *p = NULL;
        pd_step_result res[STEPS];
        st = load(fx, BATCH / M, &g);
        if (st == PD_OK) st = make_plan(g, 2, M, &plan);
        for (int s = 0; st == PD_OK && s < 2; s++) plan->stage[s].replicas = reps[s];
        if (st == PD_OK) st = pd__pipe_create(g, plan, &r->o, PD_SCHED_FLUSH, M, &p);
        if (st == PD_OK) st = pd__pipe_run(p, STEPS, xs, ys, res);
        pd__pipe_destroy(p);
        for (int k = 0; st == PD_OK && k < STEPS; k++) {
            if (run == 0) first[k] = res[k].loss;
            differ += memcmp(&first[k], &res[k].loss, sizeof(double)) != 0;
        }
        runs += st == PD_OK;
        pd_plan_destroy(plan);
        pd_graph_destroy(g);
    }
    CHECK(st == PD_OK && differ == 0, "%s, 2 stages, the last replicated 3 times, %d microbatches, flush: %d runs, "
          "the same %d step losses bit for bit (%d differ)%s%s", r->name, M, runs, STEPS, differ, st ? ": " : "",
          st ? pd_last_error() : "");
}

static void run_model(const char *fixtures, const char *model, bool full, pd_loss_kind loss) {
    char fx[1024];
    snprintf(fx, sizeof fx, "%s/%s", fixtures, model);
    pd_tensor X = {0}, Y = {0}, xs = {0}, ys = {0};
    pd__data d = {0};
    int steps = full ? LONG : STEPS;
    pd_status st = load_stream(fx, steps, &X, &Y, &d, &xs, &ys);
    CHECK(st == PD_OK, "%s: the training data loads%s%s", model, st ? ": " : "", st ? pd_last_error() : "");
    if (st != PD_OK) return;

    char names[5][96];
    snprintf(names[0], sizeof names[0], "%s, sgd lr 0.05", model);
    snprintf(names[1], sizeof names[1], "%s, adam lr 0.01", model);
    snprintf(names[2], sizeof names[2], "%s, sgd lr 0.05, gradients one step late", model);
    snprintf(names[3], sizeof names[3], "%s, sgd lr 0.1, %d steps", model, LONG);
    snprintf(names[4], sizeof names[4], "%s, momentum lr 0.05, gradients clipped to norm 0.25", model);
    /* Adam divides by the root of the squared gradients, so the float noise of
     * summing microbatches instead of rows reaches the weights undamped where
     * a gradient is tiny: 1e-4 there, as test_train allows against PyTorch */
    static ref refs[5];
    const ref init[5] = {{names[0], PD_TRAIN_OPTIONS_INIT, false, STEPS, 1e-5, {0}, {0}, NULL, 0},
                         {names[1], PD_TRAIN_OPTIONS_INIT, false, STEPS, 1e-4, {0}, {0}, NULL, 0},
                         {names[2], PD_TRAIN_OPTIONS_INIT, true, STEPS, 1e-5, {0}, {0}, NULL, 0},
                         {names[3], PD_TRAIN_OPTIONS_INIT, false, LONG, 1e-5, {0}, {0}, NULL, 0},
                         {names[4], PD_TRAIN_OPTIONS_INIT, false, STEPS, 1e-5, {0}, {0}, NULL, 0}};
    memcpy(refs, init, sizeof refs);
    refs[4].o.optimizer = PD_OPT_MOMENTUM;
    /* on a GPU cuBLAS tiles a 32-row product and four 8-row ones differently,
     * and Adam carries that noise into the weights: 1.14e-4 on an H100 */
    if (device == PD_DEVICE_CUDA) refs[1].tol = 3e-4;
    /* mlp_loss's data: fc2.weight[4788]'s gradient is 0 at step 1 and 6.6e-8 at
     * step 2, a sum with cancellation, and Adam's first step with it is ~lr
     * whatever its size; the microbatches' sums move it 1.2e-4 away (1.5e-5
     * before Adam took PyTorch's 1-beta scalars: the same noise, elsewhere) */
    if (loss == PD_LOSS_GRAPH) refs[1].tol = 3e-4;
    refs[4].o.lr = 0.05;
    refs[4].o.clip_grad_norm = 0.25;
    refs[0].o.optimizer = refs[2].o.optimizer = refs[3].o.optimizer = PD_OPT_SGD;
    refs[0].o.lr = refs[2].o.lr = 0.05;
    refs[3].o.lr = 0.1;
    refs[1].o.optimizer = PD_OPT_ADAM;
    refs[1].o.lr = 0.01;
    /* as the fixture's adam case: Adam turns the float noise of a true zero gradient into steps of lr */
    refs[1].o.freeze = "attn\\.c_attn\\.bias$";
    int nrefs = full ? 5 : 3;
    for (int i = 0; i < nrefs && st == PD_OK; i++) {
        refs[i].o.loss = loss;
        refs[i].o.threads = 1;
        refs[i].o.device = device;
        st = run_ref(fx, &xs, &ys, &refs[i]);
        CHECK(st == PD_OK, "%s: the single-stage reference trains%s%s", refs[i].name, st ? ": " : "",
              st ? pd_last_error() : "");
    }
    const int ms[] = {1, 2, 4};
    const pd__sched_kind kinds[] = {PD_SCHED_GPIPE, PD_SCHED_FLUSH};
    if (st == PD_OK && device == PD_DEVICE_CUDA) {
        run_gpu(fx, &xs, &ys, refs, full);
    } else if (st == PD_OK && full) {
        for (int stages = 2; stages <= 3; stages++)
            for (int i = 0; i < 3; i++)
                for (int k = 0; k < 2; k++) run_pipe(fx, &xs, &ys, &refs[0], stages, ms[i], kinds[k]);
        run_pipe(fx, &xs, &ys, &refs[1], 3, 4, PD_SCHED_FLUSH);
        run_pipe(fx, &xs, &ys, &refs[1], 2, 2, PD_SCHED_GPIPE);
        for (int stages = 2; stages <= 4; stages++)
            for (int i = 0; i < 3; i++) run_pipe(fx, &xs, &ys, &refs[2], stages, ms[i], PD_SCHED_2BW);
        for (int stages = 2; stages <= 4; stages++) {
            run_pipedream_exact(fx, &xs, &ys, &refs[0], stages, false, NULL);
            run_pipedream_exact(fx, &xs, &ys, &refs[0], stages, true, NULL);
            run_pipedream(fx, &xs, &ys, &refs[3], stages, NULL);
        }
        /* pipedream with replicated stages (PipeDream's hybrid plans): round robin, a stash per replica, the
         * round's gradients averaged; 25 steps leave a short last round on a 2-way stage (25 = 12 * 2 + 1) */
        const int rp[][3] = {{2, 1, 1}, {1, 2, 1}, {1, 1, 2}, {2, 2, 2}, {1, 3, 1}};
        for (int i = 0; i < 5; i++) run_pipedream_exact(fx, &xs, &ys, &refs[0], 3, false, rp[i]);
        run_pipedream_exact(fx, &xs, &ys, &refs[0], 2, false, rp[3]);
        run_pipedream(fx, &xs, &ys, &refs[3], 3, rp[1]);
        const int rq[] = {1, 2};
        run_pipedream(fx, &xs, &ys, &refs[3], 2, rq);
        /* zero-bubble: split B and W */
        for (int stages = 2; stages <= 4; stages++)
            for (int i = 1; i < 3; i++) run_pipe(fx, &xs, &ys, &refs[0], stages, ms[i], PD_SCHED_ZB_H1);
        run_pipe(fx, &xs, &ys, &refs[1], 3, 4, PD_SCHED_ZB_H1);
        /* interleaved: P workers x V chunks */
        run_pipe_ex(fx, &xs, &ys, &refs[0], 2, 2, PD_SCHED_INTERLEAVED, 2, NULL);
        run_pipe_ex(fx, &xs, &ys, &refs[0], 2, 4, PD_SCHED_INTERLEAVED, 2, NULL);
        run_pipe_ex(fx, &xs, &ys, &refs[1], 2, 4, PD_SCHED_INTERLEAVED, 2, NULL);
        /* 2bw with replicated stages: replicas take microbatches in turn, each keeps its own stash */
        const int rb[][3] = {{2, 1, 1}, {1, 2, 1}, {2, 2, 2}};
        for (int i = 0; i < 3; i++) run_pipe_ex(fx, &xs, &ys, &refs[2], 3, 4, PD_SCHED_2BW, 1, rb[i]);
        const int rw[][2] = {{2, 1}, {1, 2}, {2, 2}}; /* a replicated worker holds both its chunks twice */
        for (int i = 0; i < 3; i++) run_pipe_ex(fx, &xs, &ys, &refs[0], 2, 4, PD_SCHED_INTERLEAVED, 2, rw[i]);
        /* replicated stages */
        const int r2[][3] = {{2, 1, 1}, {1, 2, 1}, {1, 1, 2}, {2, 2, 2}, {1, 3, 1}};
        for (int i = 0; i < 5; i++) run_pipe_ex(fx, &xs, &ys, &refs[0], 3, 4, PD_SCHED_FLUSH, 1, r2[i]);
        run_pipe_ex(fx, &xs, &ys, &refs[0], 2, 2, PD_SCHED_GPIPE, 1, r2[3]);
        run_pipe_ex(fx, &xs, &ys, &refs[0], 3, 4, PD_SCHED_ZB_H1, 1, r2[1]);
        run_pipe_ex(fx, &xs, &ys, &refs[1], 3, 4, PD_SCHED_FLUSH, 1, r2[0]);
        run_loss_order(fx, &xs, &ys, &refs[0]);
        const pd__sched_kind sk[] = {PD_SCHED_GPIPE, PD_SCHED_FLUSH, PD_SCHED_ZB_H1};
        for (int k = 0; k < 3; k++) run_stats(fx, &xs, &ys, &refs[0], sk[k]);
        /* Bi-Partition */
        for (int k = 0; k < 2; k++) {
            run_pipe_bx(fx, &xs, &ys, &refs[0], 3, 4, kinds[k], 1, NULL, 2);
            run_pipe_bx(fx, &xs, &ys, &refs[0], 3, 2, kinds[k], 1, NULL, 2);
        }
        run_pipe_bx(fx, &xs, &ys, &refs[0], 3, 4, PD_SCHED_ZB_H1, 1, NULL, 2);
        run_pipe_bx(fx, &xs, &ys, &refs[2], 3, 4, PD_SCHED_2BW, 1, NULL, 2);
        run_pipe_bx(fx, &xs, &ys, &refs[1], 3, 4, PD_SCHED_FLUSH, 1, NULL, 2);
        const int r3[] = {1, 2, 1};
        run_pipe_bx(fx, &xs, &ys, &refs[0], 3, 4, PD_SCHED_FLUSH, 1, r3, 2);
        /* gradient clipping: the whole model's norm, across stages and replicas */
        int clipped = 0;
        for (int k = 0; k < STEPS; k++) clipped += refs[4].gnorm[k] > refs[4].o.clip_grad_norm;
        CHECK(clipped > STEPS / 2, "%s: the reference clips %d of its %d steps", refs[4].name, clipped, STEPS);
        run_pipe(fx, &xs, &ys, &refs[4], 3, 4, PD_SCHED_FLUSH);
        run_pipe(fx, &xs, &ys, &refs[4], 2, 2, PD_SCHED_GPIPE);
        run_pipe(fx, &xs, &ys, &refs[4], 3, 4, PD_SCHED_ZB_H1);
        run_pipe_ex(fx, &xs, &ys, &refs[4], 2, 4, PD_SCHED_INTERLEAVED, 2, NULL);
        run_pipe_ex(fx, &xs, &ys, &refs[4], 3, 4, PD_SCHED_FLUSH, 1, r2[3]);
        run_refusals(fx, &refs[0]);
        run_split(fx, &xs, &ys, &refs[0]);
        run_failures_ex(fx, &xs, &ys, &refs[0]);
        run_failures_pd(fx, &xs, &ys, &refs[0]);
        run_nan(fx, &xs, &ys, &refs[0]);
        run_failures(fx, &xs, &ys, &refs[0], PD_SCHED_GPIPE);
        run_failures(fx, &xs, &ys, &refs[0], PD_SCHED_FLUSH);
        run_failures(fx, &xs, &ys, &refs[2], PD_SCHED_2BW);
    } else if (st == PD_OK) {
        for (int stages = 2; stages <= 4; stages += 2)
            for (int k = 0; k < 2; k++) run_pipe(fx, &xs, &ys, &refs[0], stages, 4, kinds[k]);
        run_pipe(fx, &xs, &ys, &refs[1], 3, 2, PD_SCHED_FLUSH);
        run_pipe(fx, &xs, &ys, &refs[2], 3, 2, PD_SCHED_2BW);
        run_pipedream_exact(fx, &xs, &ys, &refs[0], 3, false, NULL);
        run_pipedream_exact(fx, &xs, &ys, &refs[0], 3, true, NULL);
        const int rp[] = {1, 2, 1};
        run_pipedream_exact(fx, &xs, &ys, &refs[0], 3, false, rp);
        run_pipe(fx, &xs, &ys, &refs[0], 3, 4, PD_SCHED_ZB_H1);
        run_pipe_ex(fx, &xs, &ys, &refs[0], 2, 4, PD_SCHED_INTERLEAVED, 2, NULL);
        run_pipe_ex(fx, &xs, &ys, &refs[0], 2, 4, PD_SCHED_INTERLEAVED, 3, NULL);
        run_split(fx, &xs, &ys, &refs[0]);
        for (int bip = 1; bip <= 2; bip++) { /* 4 stages have a movable node at a boundary for bip 1, 3 for bip 2 */
            int n = bip == 1 ? 4 : 3;
            run_pipe_bx(fx, &xs, &ys, &refs[0], n, 4, PD_SCHED_FLUSH, 1, NULL, bip);
            run_pipe_bx(fx, &xs, &ys, &refs[0], n, 2, PD_SCHED_GPIPE, 1, NULL, bip);
            run_pipe_bx(fx, &xs, &ys, &refs[0], n, 4, PD_SCHED_ZB_H1, 1, NULL, bip);
            run_pipe_bx(fx, &xs, &ys, &refs[2], n, 2, PD_SCHED_2BW, 1, NULL, bip);
        }
        const int r2[] = {1, 2, 1};
        run_pipe_ex(fx, &xs, &ys, &refs[0], 3, 4, PD_SCHED_FLUSH, 1, r2);
    }
    for (int i = 0; i < 5; i++) pd_graph_destroy(refs[i].g);
    pd__data_free(&d);
    free(xs.data);
    free(ys.data);
    pd_tensor_free(&X);
    pd_tensor_free(&Y);
}

/* Tied weights (tests/fixtures/tied: the embedding table is also the output
 * layer): the table's first reader on stage 0, its second on the last stage;
 * the flushing schedules equal single-stage training, and the schedules that
 * update stages on their own refuse it. */
static void run_tied(const char *fixtures) {
    char fx[1024];
    snprintf(fx, sizeof fx, "%s/tied", fixtures);
    pd_tensor X = {0}, Y = {0}, xs = {0}, ys = {0};
    pd__data d = {0};
    pd_status st = load_stream(fx, STEPS, &X, &Y, &d, &xs, &ys);
    static ref r = {"tied, momentum lr 0.05, clipped to 1", PD_TRAIN_OPTIONS_INIT, false, STEPS, 1e-5, {0}, {0},
                    NULL, 0};
    r.o.optimizer = PD_OPT_MOMENTUM;
    r.o.lr = 0.05;
    r.o.clip_grad_norm = 1;
    r.o.threads = 1;
    r.o.device = device; /* --device cuda: tied weights across GPU stages (the reference on the GPU too) */
    if (device == PD_DEVICE_CUDA) r.tol = 1e-4;
    if (st == PD_OK) st = run_ref(fx, &xs, &ys, &r);
    CHECK(st == PD_OK, "tied: the single-stage reference trains%s%s", st ? ": " : "", st ? pd_last_error() : "");
    tie_node = "/Transpose";
    if (st == PD_OK) {
        run_pipe(fx, &xs, &ys, &r, 2, 4, PD_SCHED_FLUSH);
        run_pipe(fx, &xs, &ys, &r, 3, 4, PD_SCHED_FLUSH);
        run_pipe(fx, &xs, &ys, &r, 3, 2, PD_SCHED_GPIPE);
        run_pipe(fx, &xs, &ys, &r, 3, 4, PD_SCHED_ZB_H1);
        run_pipe_ex(fx, &xs, &ys, &r, 2, 4, PD_SCHED_INTERLEAVED, 2, NULL);
        /* refused where stages update on their own */
        pd_graph *g = NULL;
        pd_plan *plan = NULL;
        pd__pipe *pp = NULL;
        pd_status a = load(fx, BATCH, &g);
        if (a == PD_OK) a = make_plan(g, 2, 1, &plan);
        for (int i = 0; a == PD_OK && i < g->nnodes; i++)
            if (!strcmp(g->nodes[i].name, tie_node)) plan->fwd_stage[i] = plan->bwd_stage[i] = 1;
        pd_train_options o = r.o;
        o.clip_grad_norm = 0;
        pd_status b = a == PD_OK ? pd__pipe_create(g, plan, &o, PD_SCHED_PIPEDREAM, 1, &pp) : a;
        CHECK(b == PD_ERR_UNSUPPORTED && strstr(pd_last_error(), "tied weights"),
              "tied: refused under pipedream, whose stages update on their own (%s)", pd_last_error());
        pd__pipe_destroy(pp);
        pd_plan_destroy(plan);
        pd_graph_destroy(g);
    }
    tie_node = NULL;
    pd_graph_destroy(r.g);
    pd__data_free(&d);
    free(xs.data);
    free(ys.data);
    pd_tensor_free(&X);
    pd_tensor_free(&Y);
}

/* How far two references' losses (steps) and trained weights are apart: the
 * largest relative difference; *first: that of the first loss. */
static double ref_distance(const ref *a, const ref *b, double *first) {
    double worst = 0;
    *first = fabs(a->loss[0] - b->loss[0]) / fabs(b->loss[0]);
    for (int k = 0; k < a->steps; k++) {
        double e = fabs(a->loss[k] - b->loss[k]) / fabs(b->loss[k]);
        if (!(e <= worst)) worst = e;
    }
    for (int t = 0; t < b->g->ntensors; t++) {
        const pd__tensor *w = &b->g->tensors[t];
        if (w->kind != PD_T_INIT || w->dtype != PD_FLOAT) continue;
        int u = pd__graph_find(a->g, w->name);
        double e = u >= 0 ? rel_err(a->g->tensors[u].data, w->data, w->numel) : INFINITY;
        if (!(e <= worst)) worst = e;
    }
    return worst;
}

/* BatchNorm in training mode normalises with the statistics of the rows it
 * is given, so a flushing pipeline of M microbatches equals single-stage
 * training on the whole minibatch only for M = 1. For M > 1 it equals
 * single-stage gradient accumulation over the same M microbatches
 * (ref.accum: each microbatch's own statistics, running statistics updated
 * once per microbatch, one update with the mean gradient), which differs
 * from the whole minibatch's training from the first loss on. Without
 * BatchNorm (the MLP) accumulation and the whole minibatch agree. */
static void run_batchnorm(const char *fixtures) {
    static ref r[3] = {
        {"cnn_bn, sgd lr 0.05", PD_TRAIN_OPTIONS_INIT, false, STEPS, 1e-5, {0}, {0}, NULL, 1},
        {"cnn_bn, sgd lr 0.05, one stage accumulating 2 microbatches of 4 rows (BatchNorm statistics per microbatch)",
         PD_TRAIN_OPTIONS_INIT, false, STEPS, 1e-5, {0}, {0}, NULL, 2},
        {"cnn_bn, sgd lr 0.05, one stage accumulating 4 microbatches of 2 rows (BatchNorm statistics per microbatch)",
         PD_TRAIN_OPTIONS_INIT, false, STEPS, 1e-5, {0}, {0}, NULL, 4}};
    static ref m[2] = {{"mlp, sgd lr 0.05", PD_TRAIN_OPTIONS_INIT, false, STEPS, 1e-5, {0}, {0}, NULL, 1},
                       {"mlp, sgd lr 0.05, one stage accumulating 4 microbatches", PD_TRAIN_OPTIONS_INIT, false, STEPS,
                        1e-5, {0}, {0}, NULL, 4}};
    for (int model = 0; model < 2; model++) {
        ref *refs = model ? m : r;
        int n = model ? 2 : 3;
        char fx[1024];
        snprintf(fx, sizeof fx, "%s/%s", fixtures, model ? "mlp" : "cnn_bn");
        pd_tensor X = {0}, Y = {0}, xs = {0}, ys = {0};
        pd__data d = {0};
        pd_status st = load_stream(fx, STEPS, &X, &Y, &d, &xs, &ys);
        for (int i = 0; i < n && st == PD_OK; i++) {
            refs[i].o.optimizer = PD_OPT_SGD;
            refs[i].o.lr = 0.05;
            refs[i].o.threads = 1;
            st = run_ref(fx, &xs, &ys, &refs[i]);
        }
        CHECK(st == PD_OK, "%s: the references train%s%s", fx, st ? ": " : "", st ? pd_last_error() : "");
        double first = 0, dist = st == PD_OK ? ref_distance(&refs[n - 1], &refs[0], &first) : 0;
        if (st == PD_OK && model == 1) {
            CHECK(dist <= 1e-5, "%s: without BatchNorm, equals the whole minibatch's training (%d losses and the "
                  "weights within %.3g)", refs[1].name, STEPS, dist);
        } else if (st == PD_OK) {
            for (int i = 1; i < n; i++) {
                dist = ref_distance(&refs[i], &refs[0], &first);
                CHECK(first > 1e-3 && dist > 1e-2,
                      "%s: not the whole minibatch's training: the first loss differs by %.3g, the run by %.3g",
                      refs[i].name, first, dist);
            }
            /* one microbatch: the whole minibatch's statistics */
            run_pipe(fx, &xs, &ys, &refs[0], 2, 1, PD_SCHED_FLUSH);
            run_pipe(fx, &xs, &ys, &refs[0], 3, 1, PD_SCHED_GPIPE);
            for (int i = 1; i < n; i++) {
                run_pipe(fx, &xs, &ys, &refs[i], 2, refs[i].accum, PD_SCHED_FLUSH);
                run_pipe(fx, &xs, &ys, &refs[i], 3, refs[i].accum, PD_SCHED_GPIPE);
            }
        }
        for (int i = 0; i < n; i++) pd_graph_destroy(refs[i].g);
        pd__data_free(&d);
        free(xs.data);
        free(ys.data);
        pd_tensor_free(&X);
        pd_tensor_free(&Y);
    }
}

/* ---- activation recomputation (plan->recompute) ----
 * The same run with and without it: step losses and trained weights equal
 * bit for bit (forwards run again with the microbatch's inputs, weight
 * version and Dropout seed), some forward run again, and each stage's peak
 * activations peak_act_mbs * keep (what it receives) + one microbatch's
 * rest, strictly below peak_act_mbs * act when it holds several: stage 0
 * receives nothing and holds exactly one microbatch's (1/peak_act_mbs).
 * Models: every case on the mlp with Dropout (masks drawn again), a few on
 * the mlp, gpt, mlp_loss (labels a graph input, fed again) and cnn_bn
 * (BatchNorm running statistics, which a redone forward must not move). */
enum { RC_STEPS = 6 }; /* enough for every schedule's steady state; short under valgrind */

typedef struct rc_case {
    pd__sched_kind kind;
    int stages, m, chunks;
    const int *reps;
    int bip;
} rc_case;

static pd_status rc_run(const char *fx, const pd_plan *plan, const rc_case *c, const pd_tensor *xs, const pd_tensor *ys,
                        pd_step_result *res, pd__pipe_stats *stats, pd_graph **g) {
    pd__pipe *p = NULL;
    pd_train_options o = PD_TRAIN_OPTIONS_INIT;
    o.optimizer = PD_OPT_SGD;
    o.lr = 0.05;
    if (strstr(fx, "mlp_loss")) o.loss = PD_LOSS_GRAPH; /* the loss inside the model, its labels an input */
    pd_status st = load(fx, BATCH / c->m, g);
    if (st == PD_OK) st = pd__pipe_create(*g, plan, &o, c->kind, c->m, &p);
    if (st == PD_OK) st = pd__pipe_run(p, RC_STEPS, xs, ys, res);
    for (int s = 0; st == PD_OK && s < c->stages; s++) pd__pipe_stats_get(p, s, &stats[s]);
    pd__pipe_destroy(p);
    return st;
}

/* Whether a run's stages hold what recomputation promises against the run without. */
static bool rc_peaks_ok(const rc_case *c, const pd__pipe_stats *a, const pd__pipe_stats *b, double *ratio0,
                        int64_t *recomputes) {
    bool ok = true;
    *recomputes = 0;
    for (int s = 0; s < c->stages; s++) {
        double rest = b[s].act_bytes_per_mb - b[s].keep_bytes_per_mb;
        double want = b[s].peak_act_mbs * b[s].keep_bytes_per_mb + (b[s].peak_act_mbs > 0 ? rest : 0);
        ok &= a[s].peak_act_mbs == b[s].peak_act_mbs && b[s].peak_act_bytes == want;
        ok &= a[s].peak_act_bytes == a[s].peak_act_mbs * a[s].act_bytes_per_mb && a[s].recomputes == 0;
        if (b[s].peak_act_mbs > 1 && rest > 0) ok &= b[s].peak_act_bytes < a[s].peak_act_bytes;
        *recomputes += b[s].recomputes;
    }
    *ratio0 = b[0].peak_act_bytes / a[0].peak_act_bytes;
    if (c->chunks == 1 && !c->bip) ok &= b[0].keep_bytes_per_mb == 0 && *ratio0 == 1.0 / a[0].peak_act_mbs;
    return ok && *recomputes > 0;
}

static void rc_check(const char *fx, const char *name, const rc_case *c, const pd_tensor *xs, const pd_tensor *ys) {
    pd_graph *g0 = NULL, *ga = NULL, *gb = NULL;
    pd_plan *plan = NULL;
    pd_step_result ra[RC_STEPS], rb[RC_STEPS];
    pd__pipe_stats sa[8], sb[8];
    memset(sa, 0, sizeof sa);
    memset(sb, 0, sizeof sb);
    pd_status st = load(fx, BATCH / c->m, &g0);
    if (st == PD_OK) st = make_plan(g0, c->stages * c->chunks, c->m, &plan); /* one plan for both runs */
    if (st == PD_OK) plan->chunks = c->chunks;
    for (int s = 0; st == PD_OK && c->reps && s < c->stages; s++) plan->stage[s].replicas = c->reps[s];
    if (st == PD_OK && c->bip && bipartition(g0, plan, c->bip) == 0) st = pd__err(PD_ERR_INTERNAL, "nothing moved");
    if (st == PD_OK) st = rc_run(fx, plan, c, xs, ys, ra, sa, &ga);
    if (st == PD_OK) plan->recompute = true;
    if (st == PD_OK) st = rc_run(fx, plan, c, xs, ys, rb, sb, &gb);
    int same = 0, weights = 0;
    for (int k = 0; st == PD_OK && k < RC_STEPS; k++) same += memcmp(&ra[k].loss, &rb[k].loss, sizeof ra[k].loss) == 0;
    for (int t = 0; st == PD_OK && t < ga->ntensors; t++) {
        const pd__tensor *a = &ga->tensors[t], *b = &gb->tensors[t];
        if (a->kind != PD_T_INIT || a->dtype != PD_FLOAT) continue;
        weights++;
        same += memcmp(a->data, b->data, sizeof(float) * (size_t)a->numel) == 0;
    }
    double ratio0 = 0;
    int64_t rec = 0;
    bool peaks = st == PD_OK && rc_peaks_ok(c, sa, sb, &ratio0, &rec);
    CHECK(st == PD_OK && weights > 0 && same == RC_STEPS + weights && peaks,
          "%s, %d stages x %d microbatches%s%s, %s, recompute: %d of %d losses and weights bitwise equal, %lld "
          "forwards redone, stage 0's peak activations %.4g of the run without%s%s",
          name, c->stages, c->m, c->chunks > 1 ? " x 2 chunks" : "", c->bip ? ", bipartition" : c->reps ? ", replicas 1,2" : "",
          pd__sched_kind_name(c->kind), same, RC_STEPS + weights, (long long)rec, ratio0, st ? ": " : "",
          st ? pd_last_error() : "");
    pd_plan_destroy(plan);
    pd_graph_destroy(g0);
    pd_graph_destroy(ga);
    pd_graph_destroy(gb);
}

/* data: the fixture whose train/sgd stream feeds models (the dropout fixture takes the mlp's). */
static void run_recompute(const char *fixtures) {
    static const int reps[] = {1, 2};
    static const rc_case cases[] = {
        {PD_SCHED_GPIPE, 2, 4, 1, NULL, 0},       {PD_SCHED_FLUSH, 2, 4, 1, NULL, 0},
        {PD_SCHED_FLUSH, 3, 4, 1, NULL, 0},       {PD_SCHED_ZB_H1, 2, 4, 1, NULL, 0},
        {PD_SCHED_INTERLEAVED, 2, 4, 2, NULL, 0}, {PD_SCHED_PIPEDREAM, 2, 1, 1, NULL, 0},
        {PD_SCHED_2BW, 2, 4, 1, NULL, 0},         {PD_SCHED_FLUSH, 2, 4, 1, reps, 0},
        {PD_SCHED_FLUSH, 2, 4, 1, NULL, 1},       {PD_SCHED_GPIPE, 2, 4, 1, NULL, 1},
    };
    static const char *const models[][2] = {{"dropout", "mlp"}, {"mlp", "mlp"}, {"gpt", "gpt"}, {"mlp_loss", "mlp_loss"}, {"cnn_bn", "cnn_bn"}};
    for (int mi = 0; mi < 5; mi++) {
        char fx[1024], dx[1024];
        snprintf(fx, sizeof fx, "%s/%s", fixtures, models[mi][0]);
        snprintf(dx, sizeof dx, "%s/%s", fixtures, models[mi][1]);
        pd_tensor X = {0}, Y = {0}, xs = {0}, ys = {0};
        pd__data d = {0};
        pd_status st = load_stream(dx, RC_STEPS, &X, &Y, &d, &xs, &ys);
        CHECK(st == PD_OK, "%s: the training data loads%s%s", models[mi][0], st ? ": " : "", st ? pd_last_error() : "");
        int n = mi == 0 ? (int)(sizeof cases / sizeof *cases) : mi == 1 ? 3 : 2; /* every case on the model with Dropout */
        for (int k = 0; st == PD_OK && k < n; k++) rc_check(fx, models[mi][0], &cases[k], &xs, &ys);
        free(xs.data);
        free(ys.data);
        pd__data_free(&d);
        pd_tensor_free(&X);
        pd_tensor_free(&Y);
    }
}

/* The 2BW planner's memory model under recomputation against what the
 * runtime then holds: the tightest memory limit (from the unlimited plan's
 * peak, down by 10% a time) at which the planner turns recomputation on; per
 * stage its memory_bytes (3 W + O + in-flight * in + act) within 10% of the
 * runtime's weight versions, gradients and optimizer state plus its peak
 * activations under the 2bw schedule. */
static void run_recompute_planner(const char *fixtures) {
    enum { M = 4 };
    char fx[1024];
    snprintf(fx, sizeof fx, "%s/gpt", fixtures);
    pd_tensor X = {0}, Y = {0}, xs = {0}, ys = {0};
    pd__data d = {0};
    pd_graph *g = NULL;
    pd_profile *prof = NULL;
    pd_plan *plan = NULL;
    pd_status st = load_stream(fx, RC_STEPS, &X, &Y, &d, &xs, &ys);
    if (st == PD_OK) st = load(fx, BATCH / M, &g);
    pd_profile_options po = PD_PROFILE_OPTIONS_INIT;
    po.warmup = 0, po.repeats = 1, po.threads = 1;
    if (st == PD_OK) st = pd_profile_measure(g, &po, &prof);
    pd_plan_options o = PD_PLAN_OPTIONS_INIT;
    o.algo = "2bw", o.workers = 2, o.straight = 1, o.microbatches = M;
    double limit = 0;
    for (int tries = 0; st == PD_OK && tries < 40 && !(plan && plan->recompute); tries++) {
        double peak = 0;
        for (int s = 0; plan && s < plan->n_stages; s++) peak = fmax(peak, plan->stage[s].memory_bytes);
        pd_plan_destroy(plan);
        plan = NULL;
        if (tries > 0) limit = 0.9 * (limit > 0 ? fmin(limit, peak) : peak);
        o.memory = limit;
        st = pd_plan_create(prof, &o, &plan);
    }
    if (st == PD_OK && !plan->recompute) st = pd__err(PD_ERR_INTERNAL, "the planner never chose recomputation");
    pd_graph_destroy(g);
    g = NULL;
    pd__pipe *p = NULL;
    pd_step_result res[RC_STEPS];
    pd_train_options to = PD_TRAIN_OPTIONS_INIT;
    to.optimizer = PD_OPT_SGD;
    if (st == PD_OK) st = load(fx, BATCH / M, &g);
    if (st == PD_OK) st = pd__pipe_create(g, plan, &to, PD_SCHED_2BW, M, &p);
    if (st == PD_OK) st = pd__pipe_run(p, RC_STEPS, &xs, &ys, res);
    double worst = 0;
    char figures[256] = "";
    for (int s = 0; st == PD_OK && s < plan->n_stages; s++) {
        const pd__stage *ps = &plan->stage[s];
        pd__pipe_stats rs;
        pd__pipe_stats_get(p, s, &rs);
        double held = (rs.peak_versions + 1) * ps->param_bytes + ps->optim_bytes + rs.peak_act_bytes;
        worst = fmax(worst, fabs(held - ps->memory_bytes) / ps->memory_bytes);
        snprintf(figures + strlen(figures), sizeof figures - strlen(figures), "%s stage %d %.0f / %.0f", s ? "," : "",
                 s, ps->memory_bytes, held);
    }
    CHECK(st == PD_OK && worst <= 0.10,
          "gpt, 2bw planner at %.0f bytes chose recomputation: predicted / runtime bytes per worker:%s (worst %.2f%%)%s%s",
          limit, figures, 100 * worst, st ? ": " : "", st ? pd_last_error() : "");
    pd__pipe_destroy(p);
    pd_plan_destroy(plan);
    pd_profile_destroy(prof);
    pd_graph_destroy(g);
    free(xs.data);
    free(ys.data);
    pd__data_free(&d);
    pd_tensor_free(&X);
    pd_tensor_free(&Y);
}

/* --device cuda on the simulated device: recomputation where a forward
 * done again must draw the same Dropout masks (dropout) and leave the
 * BatchNorm running statistics as they were (cnn_bn: saved through host
 * memory around it), device stages against CPU stages bit for bit. */
static void run_gpu_recompute(const char *fixtures) {
#ifdef PD_HAVE_CUDA
    static const char *const models[][2] = {{"dropout", "mlp"}, {"cnn_bn", "cnn_bn"}};
    static ref r = {"sgd lr 0.05", PD_TRAIN_OPTIONS_INIT, false, STEPS, 0, {0}, {0}, NULL, 0};
    if (!pd__cuda_is_sim()) return;
    r.o.optimizer = PD_OPT_SGD;
    r.o.lr = 0.05;
    r.o.threads = 1;
    r.o.device = PD_DEVICE_CUDA;
    for (int mi = 0; mi < 2; mi++) {
        char fx[1024], dx[1024], name[160];
        snprintf(fx, sizeof fx, "%s/%s", fixtures, models[mi][0]);
        snprintf(dx, sizeof dx, "%s/%s", fixtures, models[mi][1]);
        snprintf(name, sizeof name, "%s, sgd lr 0.05", models[mi][0]);
        r.name = name;
        pd_tensor X = {0}, Y = {0}, xs = {0}, ys = {0};
        pd__data d = {0};
        pd_status st = load_stream(dx, STEPS, &X, &Y, &d, &xs, &ys);
        CHECK(st == PD_OK, "%s: the training data loads%s%s", models[mi][0], st ? ": " : "", st ? pd_last_error() : "");
        if (st == PD_OK) dev_cpu_check(fx, &xs, &ys, &r, 2, 4, PD_SCHED_FLUSH, 1, NULL, true);
        if (st == PD_OK) dev_cpu_check(fx, &xs, &ys, &r, 2, 1, PD_SCHED_PIPEDREAM, 1, NULL, true);
        free(xs.data);
        free(ys.data);
        pd__data_free(&d);
        pd_tensor_free(&X);
        pd_tensor_free(&Y);
    }
#else
    (void)fixtures;
#endif
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "--device") && !strcmp(argv[2], "cuda")) {
        if (pd_cuda_device_count() == 0) {
            printf("skipped: no CUDA GPU (or a build without the CUDA backend)\n");
            return 77;
        }
        device = PD_DEVICE_CUDA;
        tol_floor = 1e-4;
        argv += 2;
        argc -= 2;
    }
    if (argc < 2) {
        fprintf(stderr, "usage: test_pipeline [--device cuda] FIXTURES_DIR\n");
        return 2;
    }
    run_model(argv[1], "mlp", true, PD_LOSS_CROSS_ENTROPY);
    run_model(argv[1], "gpt", false, PD_LOSS_CROSS_ENTROPY);
    run_model(argv[1], "mlp_loss", false, PD_LOSS_GRAPH); /* the loss inside the model, its labels an input */
    run_tied(argv[1]);
    if (device == PD_DEVICE_CPU) run_batchnorm(argv[1]); /* its references rewrite the host slabs */
    if (device == PD_DEVICE_CPU) run_recompute(argv[1]);
    if (device == PD_DEVICE_CUDA) run_gpu_recompute(argv[1]);
    if (device == PD_DEVICE_CPU) run_recompute_planner(argv[1]);
    return check_summary();
}
