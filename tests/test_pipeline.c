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
 *   version its F names in the schedule; converges in 300 steps;
 * - a NaN in one minibatch's data, and a failure injected at every
 *   instruction kind of every stage, stop all stages with an error naming
 *   the stage and the step (no deadlock), and the pipeline trains on.
 * The small GPT fixture, and the MLP with its loss inside the model (labels
 * a graph input), run a sample of the same checks (2-4 stages).
 */
#include "../core/plan.h"
#include "../core/schedule.h"
#include "../runtime/data.h"
#include "../runtime/pipeline.h"
#include "../runtime/session.h"
#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { STEPS = 25, LONG = 300, BATCH = 8 };

typedef struct ref {
    const char *name;
    pd_train_options o;
    bool late; /* SGD with every gradient applied one step late (2bw's rule) */
    int steps;
    double tol; /* relative, on losses and weights */
    double loss[LONG];
    pd_graph *g; /* trained */
} ref;

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

/* Single-stage training on the whole stream, one minibatch of BATCH rows a step. */
static pd_status run_ref(const char *fx, const pd_tensor *xs, const pd_tensor *ys, ref *r) {
    pd_session *s = NULL;
    pd_status st = load(fx, BATCH, &r->g);
    if (st == PD_OK) st = pd_session_create(r->g, &r->o, &s);
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

static void run_pipe(const char *fx, const pd_tensor *xs, const pd_tensor *ys, const ref *r, int stages, int m,
                     pd__sched_kind kind) {
    pd_graph *g = NULL;
    pd_plan *plan = NULL;
    pd__pipe *p = NULL;
    pd_step_result res[STEPS];
    pd_status st = load(fx, BATCH / m, &g);
    if (st == PD_OK) st = make_plan(g, stages, m, &plan);
    if (st == PD_OK && plan->n_stages != stages)
        st = pd__err(PD_ERR_INTERNAL, "the plan has %d stages", plan->n_stages);
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
    CHECK(st == PD_OK && worst <= r->tol && wworst <= r->tol && compared > 0 && versions == max_versions,
          "%s, %d stages x %d microbatches, %s: %d step losses and %d weights equal single-stage, max relative error "
          "%.3g / %.3g, at most %d weight versions per stage%s%s",
          r->name, stages, m, pd__sched_kind_name(kind), STEPS, compared, worst, wworst, versions, st ? ": " : "",
          st ? pd_last_error() : "");
    pd_plan_destroy(plan);
    pd_graph_destroy(g);
}

/* PipeDream: an update after every microbatch (BATCH rows), weights stashed. */
static void run_pipedream(const char *fx, const pd_tensor *xs, const pd_tensor *ys, const ref *r, int stages) {
    pd_graph *g = NULL;
    pd_plan *plan = NULL;
    pd__pipe *p = NULL;
    pd_step_result res[LONG];
    pd_status st = load(fx, BATCH, &g);
    if (st == PD_OK) st = make_plan(g, stages, 1, &plan);
    if (st == PD_OK) st = pd__pipe_create(g, plan, &r->o, PD_SCHED_PIPEDREAM, 1, &p);
    if (st == PD_OK) st = pd__pipe_run(p, LONG, xs, ys, res);
    char held[64] = "";
    bool within = st == PD_OK;
    for (int s = 0; st == PD_OK && s < stages; s++) {
        int v = pd__pipe_peak_versions(p, s);
        within &= v == stages - s;
        snprintf(held + strlen(held), sizeof held - strlen(held), "%s%d", s ? " " : "", v);
    }
    CHECK(within,
          "%s, pipedream, %d stages: every backward used its forward's weight version; versions held per stage %s "
          "(p-s: %d .. 1)%s%s",
          r->name, stages, held, stages, st ? ": " : "", st ? pd_last_error() : "");
    double first = 0, last = 0, ref_last = 0;
    for (int k = 0; st == PD_OK && k < 10; k++) {
        first += res[k].loss / 10;
        last += res[LONG - 10 + k].loss / 10;
        ref_last += r->loss[LONG - 10 + k] / 10;
    }
    CHECK(st == PD_OK && last < 0.1 * first && last < 2 * ref_last,
          "%s, pipedream, %d stages: converges, mean loss of the first 10 steps %.4f, of the last 10 %.4f "
          "(single-stage %.4f)",
          r->name, stages, first, last, ref_last);
    pd__pipe_destroy(p);
    pd_plan_destroy(plan);
    pd_graph_destroy(g);
}

/* PipeDream, exactly: microbatch k's forward and backward on stage s use
 * version v_s(k) (its F's in the schedule) of that stage's weights; the
 * update k+1 = k - lr * gradient, on every stage. Replayed on one stage. */
static void run_pipedream_exact(const char *fx, const pd_tensor *xs, const pd_tensor *ys, const ref *r, int stages) {
    pd_graph *g = NULL, *rg = NULL;
    pd_plan *plan = NULL;
    pd__pipe *p = NULL;
    pd__schedule *sc = NULL;
    pd_session *s = NULL;
    pd_step_result res[STEPS];
    double want[STEPS];
    int ver[4][STEPS];
    float *hist = NULL;
    pd__slabs sl = {0};
    pd_status st = load(fx, BATCH, &g);
    if (st == PD_OK) st = load(fx, BATCH, &rg);
    if (st == PD_OK) st = make_plan(g, stages, 1, &plan);
    if (st == PD_OK) st = pd__schedule_build(PD_SCHED_PIPEDREAM, stages, 1, 1, STEPS, NULL, &sc);
    for (int q = 0; st == PD_OK && q < stages; q++)
        for (int k = 0; k < sc->len[q]; k++)
            if (sc->ins[q][k].op == PD_I_F) ver[q][sc->ins[q][k].mb] = sc->ins[q][k].version;
    /* the reference */
    if (st == PD_OK) st = pd_session_create(rg, &r->o, &s);
    if (st == PD_OK) st = pd__session_slabs(s, &sl);
    if (st == PD_OK) hist = malloc(sizeof(float) * (size_t)sl.total * (STEPS + 1));
    if (hist) memcpy(hist, sl.params, sizeof(float) * (size_t)sl.total);
    pd_value_info in;
    if (st == PD_OK) st = pd_graph_input(rg, 0, &in);
    for (int k = 0; st == PD_OK && k < STEPS; k++) {
        for (int i = 0; i < sl.np; i++) {
            int t = sl.param[i], q = -1;
            for (int n = 0; n < rg->nnodes; n++)
                for (int j = 0; j < rg->nodes[n].nin; j++)
                    if (rg->nodes[n].in[j] == t) q = plan->fwd_stage[n];
            const float *from = hist + (size_t)sl.total * (size_t)ver[q][k] + sl.poff[i];
            memcpy(sl.params + sl.poff[i], from, sizeof(float) * (size_t)rg->tensors[t].numel);
        }
        pd_tensor bx = batch_of(xs, k), by = batch_of(ys, k);
        pd_step_result one;
        st = pd_session_set_input(s, in.name, &bx);
        if (st == PD_OK) st = pd_session_set_labels(s, &by);
        if (st == PD_OK) st = pd_session_step(s, &one); /* its update is dropped */
        want[k] = one.loss;
        float *a = hist + (size_t)sl.total * (size_t)k, *b = a + sl.total;
        for (int64_t j = 0; j < sl.total; j++) b[j] = a[j] - (float)r->o.lr * sl.grads[j];
    }
    /* the pipeline */
    if (st == PD_OK) st = pd__pipe_create(g, plan, &r->o, PD_SCHED_PIPEDREAM, 1, &p);
    if (st == PD_OK) st = pd__pipe_run(p, STEPS, xs, ys, res);
    pd__pipe_destroy(p);
    double worst = 0, wworst = 0;
    for (int k = 0; st == PD_OK && k < STEPS; k++) {
        double e = fabs(res[k].loss - want[k]) / fabs(want[k]);
        if (!(e <= worst)) worst = e;
    }
    for (int i = 0; st == PD_OK && i < sl.np; i++) {
        const pd__tensor *rt = &rg->tensors[sl.param[i]];
        int u = pd__graph_find(g, rt->name);
        const float *w = hist + (size_t)sl.total * STEPS + sl.poff[i];
        double e = u >= 0 ? rel_err(g->tensors[u].data, w, rt->numel) : INFINITY;
        if (!(e <= wworst)) wworst = e;
    }
    CHECK(st == PD_OK && worst <= 1e-5 && wworst <= 1e-5,
          "%s, pipedream, %d stages: %d step losses and %d weights equal single-stage with each stage's stashed "
          "version (stage 0's F of microbatch 5 uses version %d), max relative error %.3g / %.3g%s%s",
          r->name, stages, STEPS, sl.np, st == PD_OK ? ver[0][5] : -1, worst, wworst, st ? ": " : "",
          st ? pd_last_error() : "");
    free(hist);
    pd_session_destroy(s);
    pd__schedule_free(sc);
    pd_plan_destroy(plan);
    pd_graph_destroy(g);
    pd_graph_destroy(rg);
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
static void run_model(const char *fixtures, const char *model, bool full, pd_loss_kind loss) {
    char fx[1024], p[1100];
    snprintf(fx, sizeof fx, "%s/%s", fixtures, model);
    pd_tensor X = {0}, Y = {0};
    pd__data d = {0};
    snprintf(p, sizeof p, "%s/train/sgd/X.npy", fx);
    pd_status st = pd_npy_load(p, &X);
    snprintf(p, sizeof p, "%s/train/sgd/Y.npy", fx);
    if (st == PD_OK) st = pd_npy_load(p, &Y);
    if (st == PD_OK) st = pd__data_init(&d, &X, &Y, BATCH, false, 0);
    CHECK(st == PD_OK, "%s: the training data loads%s%s", model, st ? ": " : "", st ? pd_last_error() : "");
    if (st != PD_OK) return;
    /* the stream of every step, laid out row after row */
    int steps = full ? LONG : STEPS;
    pd_tensor xs = X, ys = Y;
    xs.shape[0] = ys.shape[0] = (int64_t)steps * BATCH;
    size_t xr = (size_t)(pd_tensor_numel(&X) / X.shape[0]) * pd_dtype_size(X.dtype);
    size_t yr = (size_t)(pd_tensor_numel(&Y) / Y.shape[0]) * pd_dtype_size(Y.dtype);
    xs.data = malloc(xr * (size_t)steps * BATCH);
    ys.data = malloc(yr * (size_t)steps * BATCH);
    for (int k = 0; k < steps; k++)
        pd__data_fill(&d, k, (char *)xs.data + xr * BATCH * (size_t)k, (char *)ys.data + yr * BATCH * (size_t)k);

    char names[4][96];
    snprintf(names[0], sizeof names[0], "%s, sgd lr 0.05", model);
    snprintf(names[1], sizeof names[1], "%s, adam lr 0.01", model);
    snprintf(names[2], sizeof names[2], "%s, sgd lr 0.05, gradients one step late", model);
    snprintf(names[3], sizeof names[3], "%s, sgd lr 0.1, %d steps", model, LONG);
    /* Adam divides by the root of the squared gradients, so the float noise of
     * summing microbatches instead of rows reaches the weights undamped where
     * a gradient is tiny: 1e-4 there, as test_train allows against PyTorch */
    ref refs[4] = {{names[0], PD_TRAIN_OPTIONS_INIT, false, STEPS, 1e-5, {0}, NULL},
                   {names[1], PD_TRAIN_OPTIONS_INIT, false, STEPS, 1e-4, {0}, NULL},
                   {names[2], PD_TRAIN_OPTIONS_INIT, true, STEPS, 1e-5, {0}, NULL},
                   {names[3], PD_TRAIN_OPTIONS_INIT, false, LONG, 1e-5, {0}, NULL}};
    refs[0].o.optimizer = refs[2].o.optimizer = refs[3].o.optimizer = PD_OPT_SGD;
    refs[0].o.lr = refs[2].o.lr = 0.05;
    refs[3].o.lr = 0.1;
    refs[1].o.optimizer = PD_OPT_ADAM;
    refs[1].o.lr = 0.01;
    /* as the fixture's adam case: Adam turns the float noise of a true zero gradient into steps of lr */
    refs[1].o.freeze = "attn\\.c_attn\\.bias$";
    int nrefs = full ? 4 : 3;
    for (int i = 0; i < nrefs && st == PD_OK; i++) {
        refs[i].o.loss = loss;
        refs[i].o.threads = 1;
        st = run_ref(fx, &xs, &ys, &refs[i]);
        CHECK(st == PD_OK, "%s: the single-stage reference trains%s%s", refs[i].name, st ? ": " : "",
              st ? pd_last_error() : "");
    }
    const int ms[] = {1, 2, 4};
    const pd__sched_kind kinds[] = {PD_SCHED_GPIPE, PD_SCHED_FLUSH};
    if (st == PD_OK && full) {
        for (int stages = 2; stages <= 3; stages++)
            for (int i = 0; i < 3; i++)
                for (int k = 0; k < 2; k++) run_pipe(fx, &xs, &ys, &refs[0], stages, ms[i], kinds[k]);
        run_pipe(fx, &xs, &ys, &refs[1], 3, 4, PD_SCHED_FLUSH);
        run_pipe(fx, &xs, &ys, &refs[1], 2, 2, PD_SCHED_GPIPE);
        for (int stages = 2; stages <= 4; stages++)
            for (int i = 0; i < 3; i++) run_pipe(fx, &xs, &ys, &refs[2], stages, ms[i], PD_SCHED_2BW);
        for (int stages = 2; stages <= 4; stages++) {
            run_pipedream_exact(fx, &xs, &ys, &refs[0], stages);
            run_pipedream(fx, &xs, &ys, &refs[3], stages);
        }
        run_nan(fx, &xs, &ys, &refs[0]);
        run_failures(fx, &xs, &ys, &refs[0], PD_SCHED_GPIPE);
        run_failures(fx, &xs, &ys, &refs[0], PD_SCHED_FLUSH);
        run_failures(fx, &xs, &ys, &refs[2], PD_SCHED_2BW);
    } else if (st == PD_OK) {
        for (int stages = 2; stages <= 4; stages += 2)
            for (int k = 0; k < 2; k++) run_pipe(fx, &xs, &ys, &refs[0], stages, 4, kinds[k]);
        run_pipe(fx, &xs, &ys, &refs[1], 3, 2, PD_SCHED_FLUSH);
        run_pipe(fx, &xs, &ys, &refs[2], 3, 2, PD_SCHED_2BW);
        run_pipedream_exact(fx, &xs, &ys, &refs[0], 3);
    }
    for (int i = 0; i < 4; i++) pd_graph_destroy(refs[i].g);
    pd__data_free(&d);
    free(xs.data);
    free(ys.data);
    pd_tensor_free(&X);
    pd_tensor_free(&Y);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_pipeline FIXTURES_DIR\n");
        return 2;
    }
    run_model(argv[1], "mlp", true, PD_LOSS_CROSS_ENTROPY);
    run_model(argv[1], "gpt", false, PD_LOSS_CROSS_ENTROPY);
    run_model(argv[1], "mlp_loss", false, PD_LOSS_GRAPH); /* the loss inside the model, its labels an input */
    return check_summary();
}
