/* test_avgpipe.c - AvgPipe: the avgpipe schedule in the pipeline executor,
 * elastic averaging (runtime/avgpipe.c) and the K-pipeline runtime.
 *
 * - pd__elastic_update against hand-computed values (K = 2 and K = 1);
 * - the avgpipe schedule (forwards run ahead, one update per minibatch) on
 *   one pipeline of 2 and 3 stages gives exactly flush's per-step losses and
 *   trained weights on the MLP (the same microbatches are summed in the same
 *   order, so bit for bit; the check allows 0 difference);
 * - pd__avg with K = 1 and averaging disabled is exactly flush's trajectory,
 *   averaging or not, run in one call or in chunks;
 * - K = 2 pipelines (each on its own minibatches, an elastic update every 4
 *   steps, alpha 0.25, the learning rate times (K+1)/K = 1.5, see
 *   check_converges) converge on the MLP (400 steps) and on the small GPT
 *   (200 steps): the centre's loss over the whole training set is within 5%
 *   (plus 0.01) of one pipeline's after the same steps (which saw half the
 *   samples) and below half the initial loss; the centre is what the graphs
 *   keep;
 * - refused: alpha > 1/K, asynchronous schedules;
 * - the tuner (plan --algo avgpipe) on a hand-made chain where K and m follow
 *   in closed form, with and without a memory limit (test_tuner);
 * - --device cuda (suites devsim and cuda; 77 without a GPU): K = 2 and 3
 *   pipelines of GPU stages against the same runs on CPU stages (avgpipe,
 *   flush, gpipe, zb-h1, interleaved; replicated stages, stages on several
 *   GPUs, runs ending between updates, momentum; cnn_bn with a replica;
 *   the tied fixture, its table read on two and three stages): every loss
 *   and weight bitwise on the simulated device (check_device).
 */
#include "../core/plan.h"
#include "../core/schedule.h"
#include "../core/pd_internal.h"
#include "../runtime/avgpipe.h"
#include "../runtime/data.h"
#include "../runtime/pipeline.h"
#ifdef PD_HAVE_CUDA
#include "../runtime/cuda/cuda.h" /* pd__cuda_is_sim */
#endif
#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { BATCH = 8, M = 4, STEPS = 25, MAXK = 3 };

static void test_elastic_formula(void) {
    /* K = 2, alpha = 0.25, centre (2, 0):
     *   element 0: x = (1, 3), d = (-1, 1), sum 0  -> x = (1.25, 2.75), centre 2
     *   element 1: x = (4, -2), d = (4, -2), sum 2 -> x = (3, -1.5),   centre 0.5 */
    float a[2] = {1, 4}, b[2] = {3, -2}, c[2] = {2, 0};
    float *x[2] = {a, b};
    pd__elastic_update(x, 2, c, 2, 0.25);
    CHECK(a[0] == 1.25f && b[0] == 2.75f && c[0] == 2.0f && a[1] == 3.0f && b[1] == -1.5f && c[1] == 0.5f,
          "elastic update, K = 2, alpha 0.25: x (1.25, 2.75) (3, -1.5), centre (2, 0.5) (got (%g, %g) (%g, %g), (%g, %g))",
          a[0], b[0], a[1], b[1], c[0], c[1]);
    /* K = 1, alpha = 0.5: x 2, centre 0 -> both meet at 1; alpha 0 changes nothing */
    float y[1] = {2}, cy[1] = {0};
    float *xy[1] = {y};
    pd__elastic_update(xy, 1, cy, 1, 0.5);
    bool one = y[0] == 1.0f && cy[0] == 1.0f;
    pd__elastic_update(xy, 1, cy, 1, 0);
    CHECK(one && y[0] == 1.0f && cy[0] == 1.0f, "elastic update, K = 1, alpha 0.5: x 2 and centre 0 meet at 1");
}

/* ---- the tuner (pdonnx plan --algo avgpipe) ----------------------------------------
 * A chain of 4 equal nodes (F 1 ms, B 2 ms, 1000 parameter bytes, 100
 * activation bytes each; no optimizer state), 4 workers, a bandwidth so high
 * that transfers and the elastic exchange cost nothing, up to M = 16
 * microbatches. K pipelines of d = 4/K stages take (m+d-1) * 12/d ms per
 * minibatch of m microbatches: throughput K m / that = 4000 m / (12 (m+d-1))
 * samples/s, proportional to m/(m+d-1). Memory of stage s: 3 * 4000/d +
 * min(d+1-s, m) * 400/d bytes. The tuner takes, per K, the fewest m within 2%
 * of that K's best (m = 16), then the K with the highest throughput:
 * - no limit: K = 4 (d = 1, no bubble), m = 1;
 * - 10000 bytes: K = 4 needs 12400; K = 2 (6000 + 200 min(3, m) <= 6600
 *   fits) with m/(m+1) >= 0.98 * 16/17, so m = 12, beats K = 1 (at best
 *   16/19);
 * - 6300 bytes: K = 2 fits only m = 1 (1/2); K = 1 (3000 + 100 min(5, m))
 *   with m/(m+3) >= 0.98 * 16/19: m = 15 (15/18), so K = 1, m = 15. */
static pd_profile *chain4(void) {
    pd_profile *p;
    if (pd__profile_new(4, &p) != PD_OK) return NULL;
    for (int i = 0; i < 4; i++) {
        char nm[16];
        snprintf(nm, sizeof nm, "n%d", i);
        p->node[i].name = pd__strdup(nm);
        p->node[i].desc = pd__strdup("Layer");
        p->node[i].fwd_ms = 1;
        p->node[i].bwd_in_ms = 2;
        p->node[i].param_bytes = 1000;
        p->node[i].act_bytes = 100;
        if (i > 0) pd__profile_add_edge(p, i - 1, i);
    }
    p->batch = 1;
    if (pd__profile_finish(p, "chain4") != PD_OK) {
        pd_profile_destroy(p);
        return NULL;
    }
    return p;
}

static void test_tuner(void) {
    pd_profile *prof = chain4();
    const double mem[3] = {0, 10000, 6300};
    const int wantK[3] = {4, 2, 1}, wantm[3] = {1, 12, 15};
    for (int i = 0; i < 3; i++) {
        pd_plan_options o = PD_PLAN_OPTIONS_INIT;
        o.algo = "avgpipe";
        o.workers = 4;
        o.bandwidth = 1e18;
        o.memory = mem[i];
        o.microbatches = 16;
        pd_plan *pl = NULL;
        pd_status st = prof ? pd_plan_create(prof, &o, &pl) : PD_ERR_NOMEM;
        int d = 4 / wantK[i], m = wantm[i];
        double want_tp = 4000.0 * m / (12.0 * (m + d - 1));
        bool ok = st == PD_OK && pl->width == wantK[i] && pl->microbatches == m && pl->n_stages == d &&
                  fabs(pl->throughput - want_tp) <= 1e-6 * want_tp && pl->algo == PD_ALGO_AVGPIPE;
        double peak = 0;
        for (int s = 0; st == PD_OK && s < pl->n_stages; s++)
            if (pl->stage[s].memory_bytes > peak) peak = pl->stage[s].memory_bytes;
        ok = ok && (mem[i] == 0 || peak <= mem[i]);
        /* the plan JSON records K and reads back */
        char *js = st == PD_OK ? pd__plan_to_json(pl) : NULL;
        ok = ok && js && strstr(js, "\"parallel_pipelines\":");
        free(js);
        CHECK(ok, "tuner, memory %.0f: K = %d pipelines of %d stages, m = %d, %.3f samples/s predicted (got K = %d, "
                  "%d stages, m = %d, %.3f samples/s, peak %.0f bytes)%s%s",
              mem[i], wantK[i], d, m, want_tp, st == PD_OK ? pl->width : -1, st == PD_OK ? pl->n_stages : -1,
              st == PD_OK ? pl->microbatches : -1, st == PD_OK ? pl->throughput : -1, peak, st ? ": " : "",
              st ? pd_last_error() : "");
        pd_plan_destroy(pl);
    }
    /* too little memory for any K: an error naming the limit */
    pd_plan_options o = PD_PLAN_OPTIONS_INIT;
    o.algo = "avgpipe";
    o.workers = 4;
    o.memory = 3000;
    pd_plan *pl = NULL;
    pd_status st = prof ? pd_plan_create(prof, &o, &pl) : PD_ERR_NOMEM;
    CHECK(st == PD_ERR_INVALID && !pl && strstr(pd_last_error(), "opt->memory 3000"),
          "tuner: nothing fits 3000 bytes per worker: %s", pd_last_error());
    pd_profile_destroy(prof);
}

/* ---- training ---------------------------------------------------------------- */

typedef struct fixture {
    char dir[1024];
    const char *name;
    pd_tensor X, Y;  /* the training set */
    pd__data d;      /* its stream: step k takes rows (k*BATCH + j) mod rows */
    pd_train_options o;
} fixture;

static pd_status load(const fixture *f, int64_t batch, pd_graph **g) {
    char p[1100];
    pd_load_options lo = PD_LOAD_OPTIONS_INIT;
    lo.batch = batch;
    snprintf(p, sizeof p, "%s/model.onnx", f->dir);
    return pd_graph_load_file(p, &lo, g);
}

/* Stream minibatches first, first+stride, ... (n of them), back to back. */
static pd_status stream(fixture *f, int64_t first, int64_t stride, int64_t n, pd_tensor *xs, pd_tensor *ys) {
    size_t xr = (size_t)(pd_tensor_numel(&f->X) / f->X.shape[0]) * pd_dtype_size(f->X.dtype);
    size_t yr = (size_t)(pd_tensor_numel(&f->Y) / f->Y.shape[0]) * pd_dtype_size(f->Y.dtype);
    *xs = f->X, *ys = f->Y;
    xs->shape[0] = ys->shape[0] = n * BATCH;
    xs->data = malloc(xr * (size_t)(n * BATCH));
    ys->data = malloc(yr * (size_t)(n * BATCH));
    if (!xs->data || !ys->data) return pd__err(PD_ERR_NOMEM, "out of memory");
    for (int64_t k = 0; k < n; k++)
        PD_TRY(pd__data_fill(&f->d, first + k * stride, (char *)xs->data + xr * BATCH * (size_t)k,
                             (char *)ys->data + yr * BATCH * (size_t)k));
    return PD_OK;
}

static pd_status make_plan(pd_graph *g, int stages, pd_plan **plan) {
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
    o.microbatches = M;
    if (st == PD_OK) st = pd_plan_create(prof, &o, plan);
    if (st == PD_OK && (*plan)->n_stages != stages)
        st = pd__err(PD_ERR_INTERNAL, "the plan has %d stages, not %d", (*plan)->n_stages, stages);
    pd_profile_destroy(prof);
    return st;
}

/* Mean loss of the graph's weights over the whole training set (g at batch BATCH/M). */
static double full_loss(fixture *f, pd_graph *g) {
    pd_session *s = NULL;
    pd_value_info in;
    if (pd_session_create(g, &f->o, &s) != PD_OK || pd_graph_input(g, 0, &in) != PD_OK) return NAN;
    int64_t b = pd_session_batch(s), rows = f->X.shape[0], n = 0;
    size_t xr = (size_t)(pd_tensor_numel(&f->X) / rows) * pd_dtype_size(f->X.dtype);
    size_t yr = (size_t)(pd_tensor_numel(&f->Y) / rows) * pd_dtype_size(f->Y.dtype);
    double sum = 0;
    for (int64_t r = 0; r + b <= rows; r += b, n++) {
        pd_tensor bx = f->X, by = f->Y;
        bx.shape[0] = by.shape[0] = b;
        bx.data = (char *)f->X.data + xr * (size_t)r;
        by.data = (char *)f->Y.data + yr * (size_t)r;
        pd_step_result res;
        if (pd_session_set_input(s, in.name, &bx) != PD_OK || pd_session_set_labels(s, &by) != PD_OK ||
            pd_session_eval(s, &res) != PD_OK) {
            sum = NAN;
            break;
        }
        sum += res.loss;
    }
    pd_session_destroy(s);
    return n ? sum / (double)n : NAN;
}

/* Largest absolute difference between the float initializers of a and b. */
static double weight_diff(const pd_graph *a, const pd_graph *b, int *compared) {
    double worst = 0;
    *compared = 0;
    for (int t = 0; t < a->ntensors; t++) {
        const pd__tensor *x = &a->tensors[t];
        if (x->kind != PD_T_INIT || x->dtype != PD_FLOAT) continue;
        int u = pd__graph_find(b, x->name);
        if (u < 0) return INFINITY;
        const float *p = x->data, *q = b->tensors[u].data;
        for (int64_t i = 0; i < x->numel; i++) {
            double e = fabs((double)p[i] - q[i]);
            if (!(e <= worst)) worst = e;
        }
        (*compared)++;
    }
    return worst;
}

/* One pipeline (pd__pipe) of `stages` stages under `kind` on stream
 * minibatches 0..steps-1; the trained graph and per-step losses. */
static pd_status one_pipe(fixture *f, int stages, pd__sched_kind kind, int steps, pd_graph **g, double *loss) {
    pd_plan *plan = NULL;
    pd__pipe *p = NULL;
    pd_tensor xs = {0}, ys = {0};
    pd_step_result *res = calloc((size_t)steps, sizeof *res);
    pd_status st = res ? load(f, BATCH / M, g) : pd__err(PD_ERR_NOMEM, "out of memory");
    if (st == PD_OK) st = make_plan(*g, stages, &plan);
    if (st == PD_OK) st = pd__pipe_create(*g, plan, &f->o, kind, M, &p);
    if (st == PD_OK) st = stream(f, 0, 1, steps, &xs, &ys);
    pd_tensor ins[2] = {xs, ys};
    if (st == PD_OK) st = pd__pipe_run(p, steps, ins, &ys, res);
    for (int k = 0; st == PD_OK && k < steps; k++) loss[k] = res[k].loss;
    pd__pipe_destroy(p);
    pd_plan_destroy(plan);
    free(xs.data);
    free(ys.data);
    free(res);
    return st;
}

/* What avg_run trains: K pipelines of `stages` workers (each of `chunks`
 * virtual stages under interleaved), reps (NULL: none) replicas per worker,
 * spread > 0: worker w's stages on GPU w % spread (the CPU run ignores it);
 * tie (NULL: none): a node moved to the last stage (the tied fixture's
 * reader of the shared table, so two stages read it). */
typedef struct avg_cfg {
    int K, stages, chunks;
    const int *reps;
    int spread;
    pd__sched_kind kind;
    double alpha;
    int every, steps, chunk;
    const char *tie;
} avg_cfg;

/* K pipelines through pd__avg: pipeline i takes stream minibatches i, i+K,
 * ...; runs of `chunk` steps (steps when 0). g: K graphs (g[0] keeps the
 * centre); loss: the per-step mean over the pipelines; per (may be NULL):
 * K * steps, pipeline i's step t at i * steps + t. */
static pd_status avg_run(fixture *f, const avg_cfg *c, pd_graph **g, double *loss, double *per, int64_t *updates) {
    int K = c->K, steps = c->steps, chunk = c->chunk;
    pd_plan *plan = NULL;
    pd__avg *a = NULL;
    pd_tensor xs[MAXK] = {{0}}, ys[MAXK] = {{0}}, ins[MAXK][2];
    const pd_tensor *inp[MAXK];
    pd_step_result *res = calloc((size_t)steps, sizeof *res), *pr = calloc((size_t)(K * steps), sizeof *pr);
    pd_status st = res && pr ? PD_OK : pd__err(PD_ERR_NOMEM, "out of memory");
    int chunks = c->chunks > 1 ? c->chunks : 1;
    for (int i = 0; i < K && st == PD_OK; i++) st = load(f, BATCH / M, &g[i]);
    if (st == PD_OK) st = make_plan(g[0], c->stages * chunks, &plan);
    if (st == PD_OK) plan->chunks = chunks;
    for (int s = 0; st == PD_OK && c->reps && s < c->stages; s++) plan->stage[s].replicas = c->reps[s];
    for (int i = 0; st == PD_OK && c->tie && i < g[0]->nnodes; i++)
        if (!strcmp(g[0]->nodes[i].name, c->tie)) plan->fwd_stage[i] = plan->bwd_stage[i] = plan->n_stages - 1;
    for (int s = 0; st == PD_OK && c->spread > 0 && s < plan->n_stages; s++) {
        plan->stage[s].has_device = true;
        plan->stage[s].device = s % c->stages % c->spread; /* a worker's chunks share its device */
    }
    if (st == PD_OK) st = pd__avg_create(g, K, plan, &f->o, c->kind, M, c->alpha, c->every, &a);
    for (int i = 0; i < K && st == PD_OK; i++) st = stream(f, i, K, steps, &xs[i], &ys[i]);
    if (chunk <= 0) chunk = steps;
    for (int done = 0; st == PD_OK && done < steps; done += chunk) {
        int n = steps - done < chunk ? steps - done : chunk;
        pd_tensor lv[MAXK];
        for (int i = 0; i < K; i++) {
            size_t xr = (size_t)(pd_tensor_numel(&xs[i]) / xs[i].shape[0]) * pd_dtype_size(xs[i].dtype);
            size_t yr = (size_t)(pd_tensor_numel(&ys[i]) / ys[i].shape[0]) * pd_dtype_size(ys[i].dtype);
            ins[i][0] = xs[i], ins[i][1] = ys[i], lv[i] = ys[i];
            ins[i][0].shape[0] = ins[i][1].shape[0] = lv[i].shape[0] = (int64_t)n * BATCH;
            ins[i][0].data = (char *)xs[i].data + xr * BATCH * (size_t)done;
            ins[i][1].data = lv[i].data = (char *)ys[i].data + yr * BATCH * (size_t)done;
            inp[i] = ins[i];
        }
        st = pd__avg_run(a, n, inp, lv, res + done, pr + (size_t)K * (size_t)done);
        const pd_step_result *got = pr + (size_t)K * (size_t)done; /* this run's n steps, pipeline by pipeline */
        for (int i = 0; st == PD_OK && per && i < K; i++)
            for (int k = 0; k < n; k++) per[i * steps + done + k] = got[i * n + k].loss;
    }
    for (int k = 0; st == PD_OK && k < steps; k++) loss[k] = res[k].loss;
    if (updates) *updates = pd__avg_updates(a);
    pd__avg_destroy(a);
    pd_plan_destroy(plan);
    for (int i = 0; i < K; i++) free(xs[i].data), free(ys[i].data);
    free(res);
    free(pr);
    return st;
}

static double loss_diff(const double *a, const double *b, int n) {
    double worst = 0;
    for (int k = 0; k < n; k++)
        if (!(fabs(a[k] - b[k]) <= worst)) worst = fabs(a[k] - b[k]);
    return worst;
}

static void check_exact(fixture *f) {
    double lf[STEPS], la[STEPS];
    for (int stages = 2; stages <= 3; stages++) {
        pd_graph *gf = NULL, *ga = NULL;
        pd_status st = one_pipe(f, stages, PD_SCHED_FLUSH, STEPS, &gf, lf);
        if (st == PD_OK) st = one_pipe(f, stages, PD_SCHED_AVGPIPE, STEPS, &ga, la);
        int n = 0;
        double wl = st == PD_OK ? loss_diff(lf, la, STEPS) : -1, ww = st == PD_OK ? weight_diff(gf, ga, &n) : -1;
        CHECK(st == PD_OK && wl == 0 && ww == 0 && n > 0,
              "%s, %d stages x %d microbatches: avgpipe's %d step losses and %d weights equal flush's exactly "
              "(largest differences %g, %g)%s%s",
              f->name, stages, M, STEPS, n, wl, ww, st ? ": " : "", st ? pd_last_error() : "");
        pd_graph_destroy(ga);
        ga = NULL;
        /* K = 1 without averaging: flush's trajectory, in one run or in runs of 7 steps */
        const pd__sched_kind kinds[] = {PD_SCHED_FLUSH, PD_SCHED_AVGPIPE};
        for (int i = 0; i < 2 && st == PD_OK; i++) {
            for (int chunk = 0; chunk <= 7; chunk += 7) {
                pd_graph *g1[1] = {NULL};
                avg_cfg c = {1, stages, 1, NULL, 0, kinds[i], 0, 0, STEPS, chunk, NULL};
                st = avg_run(f, &c, g1, la, NULL, NULL);
                wl = st == PD_OK ? loss_diff(lf, la, STEPS) : -1;
                ww = st == PD_OK ? weight_diff(gf, g1[0], &n) : -1;
                CHECK(st == PD_OK && wl == 0 && ww == 0 && n > 0,
                      "%s, K = 1, averaging off, %d stages, %s%s: flush's losses and weights exactly (%g, %g)%s%s",
                      f->name, stages, pd__sched_kind_name(kinds[i]), chunk ? ", runs of 7 steps" : "", wl, ww,
                      st ? ": " : "", st ? pd_last_error() : "");
                pd_graph_destroy(g1[0]);
            }
        }
        pd_graph_destroy(gf);
    }
}

/* K = 2 against one pipeline over the same number of steps. In elastic
 * averaging's steady state (every pipeline seeing gradient g, an update every
 * step) the pipelines sit at a fixed offset from the centre and all move by
 * K/(K+1) lr g per step, whatever alpha: the centre of K = 2 pipelines at
 * learning rate lr follows SGD at 2/3 lr. So the K = 2 run uses 1.5 lr, and
 * its centre is then held to one pipeline's loss at lr. */
static void check_converges(fixture *f, int steps, int stages) {
    const double alpha = 0.25;
    const int every = 4;
    double *l1 = calloc((size_t)steps, sizeof(double)), *l2 = calloc((size_t)steps, sizeof(double));
    pd_graph *g1 = NULL, *g2[2] = {NULL, NULL}, *g0 = NULL;
    int64_t updates = 0;
    pd_status st = l1 && l2 ? load(f, BATCH / M, &g0) : pd__err(PD_ERR_NOMEM, "out of memory");
    double before = st == PD_OK ? full_loss(f, g0) : NAN;
    if (st == PD_OK) st = one_pipe(f, stages, PD_SCHED_FLUSH, steps, &g1, l1);
    double lr = f->o.lr;
    f->o.lr = lr * 1.5; /* (K+1)/K: the centre drifts at K/(K+1) of SGD's speed (see below) */
    avg_cfg c = {2, stages, 1, NULL, 0, PD_SCHED_AVGPIPE, alpha, every, steps, 0, NULL};
    if (st == PD_OK) st = avg_run(f, &c, g2, l2, NULL, &updates);
    f->o.lr = lr;
    double single = st == PD_OK ? full_loss(f, g1) : NAN, centre = st == PD_OK ? full_loss(f, g2[0]) : NAN;
    int n = 0;
    double same = st == PD_OK ? weight_diff(g2[0], g2[1], &n) : -1;
    CHECK(st == PD_OK && centre <= 1.05 * single + 0.01 && centre < 0.5 * before && updates == steps / 4 &&
              same == 0,
          "%s, K = 2 pipelines of %d stages at 1.5 lr, alpha 0.25 every 4 steps, %d steps: the centre's "
          "training-set loss %.4f is within 5%% + 0.01 of one pipeline's %.4f at lr (initial %.4f; %lld elastic "
          "updates; both graphs hold the centre: %s)%s%s",
          f->name, stages, steps, centre, single, before, (long long)updates, same == 0 ? "yes" : "no",
          st ? ": " : "", st ? pd_last_error() : "");
    pd_graph_destroy(g0);
    pd_graph_destroy(g1);
    pd_graph_destroy(g2[0]);
    pd_graph_destroy(g2[1]);
    free(l1);
    free(l2);
}

static void check_refusals(fixture *f) {
    pd_graph *g[2] = {NULL, NULL};
    pd_plan *plan = NULL;
    pd__avg *a = NULL;
    pd_status st = load(f, BATCH / M, &g[0]);
    if (st == PD_OK) st = load(f, BATCH / M, &g[1]);
    if (st == PD_OK) st = make_plan(g[0], 2, &plan);
    pd_status big = st == PD_OK ? pd__avg_create(g, 2, plan, &f->o, PD_SCHED_AVGPIPE, M, 0.6, 1, &a) : st;
    bool said = big == PD_ERR_INVALID && strstr(pd_last_error(), "1/K") && !a;
    pd_status async = st == PD_OK ? pd__avg_create(g, 2, plan, &f->o, PD_SCHED_2BW, M, 0.25, 1, &a) : st;
    said = said && async == PD_ERR_UNSUPPORTED && strstr(pd_last_error(), "2bw") && !a;
    CHECK(said, "refused: alpha 0.6 with 2 pipelines (> 1/K), and the 2bw schedule (%s)", pd_last_error());
    pd_plan_destroy(plan);
    pd_graph_destroy(g[0]);
    pd_graph_destroy(g[1]);
}

/* ---- GPU stages (--device cuda) ------------------------------------------------ */

/* The difference of a from b relative to b's size plus scale (0: bitwise equal). */
static double rel(double a, double b, double scale) { return a == b ? 0 : fabs(a - b) / (fabs(b) + scale + 1e-12); }

/* The same AvgPipe run on CPU stages and on GPU stages (f->o's device; opt
 * the optimizer): every pipeline's every step loss and every float
 * initializer of every graph afterwards (the centre, and pipeline i's own
 * BatchNorm statistics) within tol relatively (weights: to their size plus
 * the tensor's mean magnitude; 0 on the simulated device,
 * which runs the CPU's kernels: bitwise), and the same elastic updates. The
 * GPU stages' weights go down after each run, the update runs on the host,
 * and they go back up (pd__pipe_slabs_changed): without that upload the GPU
 * pipelines would never see the averaging. */
static void check_device(fixture *f, const avg_cfg *c, pd_optimizer_kind opt, double tol) {
    enum { NL = MAXK * STEPS };
    pd_graph *ga[MAXK] = {NULL}, *gb[MAXK] = {NULL};
    double la[STEPS], lb[STEPS], pa[NL], pb[NL], worst = 0;
    int64_t ua = -1, ub = -2;
    pd_train_options dev = f->o;
    f->o.device = PD_DEVICE_CPU;
    f->o.optimizer = opt;
    pd_status st = avg_run(f, c, ga, la, pa, &ua);
    f->o.device = dev.device;
    if (st == PD_OK) st = avg_run(f, c, gb, lb, pb, &ub);
    f->o = dev;
    int same = 0, n = 0, weights = 0;
    for (int k = 0; st == PD_OK && k < c->K * c->steps; k++, n++) {
        double e = rel(pb[k], pa[k], 0);
        same += e <= tol;
        if (!(e <= worst)) worst = e;
    }
    for (int i = 0; st == PD_OK && i < c->K; i++)
        for (int t = 0; t < ga[i]->ntensors; t++) {
            const pd__tensor *x = &ga[i]->tensors[t], *y = &gb[i]->tensors[t];
            if (x->kind != PD_T_INIT || x->dtype != PD_FLOAT) continue;
            const float *p = x->data, *q = y->data;
            double scale = 0; /* the tensor's mean magnitude: near-zero weights are not held to their own size */
            for (int64_t j = 0; j < x->numel; j++) scale += fabs(p[j]) / (double)x->numel;
            bool eq = true;
            for (int64_t j = 0; j < x->numel; j++) {
                double e = rel(q[j], p[j], scale);
                eq = eq && e <= tol;
                if (!(e <= worst)) worst = e;
            }
            same += eq, n++, weights++;
        }
    char shape[96] = "";
    for (int s = 0; c->reps && s < c->stages; s++)
        snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%d", s ? "," : ", replicas ", c->reps[s]);
    if (c->spread > 0) snprintf(shape + strlen(shape), sizeof shape - strlen(shape), ", on %d GPUs", c->spread);
    if (c->tie) snprintf(shape + strlen(shape), sizeof shape - strlen(shape), ", %s on the last", c->tie);
    CHECK(st == PD_OK && weights > 0 && same == n && ua == ub && ua == c->steps / c->every,
          "%s, K = %d pipelines of %d stages%s%s x %d microbatches, %s, %s, alpha %g every %d%s: GPU stages against "
          "CPU stages, %d of %d losses and weight tensors equal (largest relative difference %g, allowed %g), %lld "
          "and %lld elastic updates%s%s",
          f->name, c->K, c->stages, c->chunks > 1 ? " x 2 chunks" : "", shape, M, pd__sched_kind_name(c->kind),
          opt == PD_OPT_SGD ? "sgd" : "momentum", c->alpha, c->every, c->chunk ? ", runs of 7 steps" : "", same, n,
          worst, tol, (long long)ua, (long long)ub, st ? ": " : "", st ? pd_last_error() : "");
    for (int i = 0; i < MAXK; i++) pd_graph_destroy(ga[i]), pd_graph_destroy(gb[i]);
}

/* K = 2 and 3, flushing schedules (avgpipe, flush, gpipe, zb-h1,
 * interleaved), replicated stages, stages spread over GPUs, runs that end
 * between elastic updates, momentum's state. */
static void check_devices(fixture *f, double tol) {
    static const int r12[] = {1, 2}, r21[] = {2, 1};
    const avg_cfg cs[] = {
        {2, 2, 1, NULL, 0, PD_SCHED_AVGPIPE, 0.25, 4, STEPS, 0, NULL},
        {3, 2, 1, NULL, 0, PD_SCHED_FLUSH, 0.25, 3, STEPS, 7, NULL},
        {2, 3, 1, NULL, 0, PD_SCHED_GPIPE, 0.4, 2, STEPS, 0, NULL},
        {3, 2, 1, NULL, 0, PD_SCHED_ZB_H1, 0.3, 5, STEPS, 0, NULL},
        {2, 2, 2, NULL, 0, PD_SCHED_INTERLEAVED, 0.25, 4, STEPS, 0, NULL},
        {2, 2, 1, r12, 0, PD_SCHED_FLUSH, 0.25, 4, STEPS, 0, NULL},
        {3, 2, 1, r21, 0, PD_SCHED_AVGPIPE, 0.25, 3, STEPS, 7, NULL},
        {2, 3, 1, NULL, 3, PD_SCHED_AVGPIPE, 0.25, 4, STEPS, 0, NULL},
    };
    int gpus = pd_cuda_device_count();
    for (int i = 0; i < (int)(sizeof cs / sizeof *cs); i++) {
        avg_cfg c = cs[i];
        if (c.spread > gpus) c.spread = gpus; /* stages spread over the GPUs there are (the simulated device has 4) */
        if (cs[i].spread > 0 && c.spread < 2) {
            printf("skipped: %s, K = %d pipelines spread over GPUs: this machine has %d\n", f->name, c.K, gpus);
            continue;
        }
        check_device(f, &c, i % 2 ? PD_OPT_MOMENTUM : PD_OPT_SGD, tol);
    }
}

static bool fixture_open(fixture *f, const char *fixtures, const char *name) {
    char p[1200];
    memset(f, 0, sizeof *f);
    f->name = name;
    snprintf(f->dir, sizeof f->dir, "%s/%s", fixtures, name);
    snprintf(p, sizeof p, "%s/train/sgd/X.npy", f->dir);
    pd_status st = pd_npy_load(p, &f->X);
    snprintf(p, sizeof p, "%s/train/sgd/Y.npy", f->dir);
    if (st == PD_OK) st = pd_npy_load(p, &f->Y);
    if (st == PD_OK) st = pd__data_init(&f->d, &f->X, &f->Y, BATCH, false, 0);
    pd_train_options o = PD_TRAIN_OPTIONS_INIT;
    o.optimizer = PD_OPT_SGD;
    o.lr = 0.05;
    o.loss = PD_LOSS_CROSS_ENTROPY;
    o.threads = 1;
    f->o = o;
    CHECK(st == PD_OK, "%s: the training data loads%s%s", name, st ? ": " : "", st ? pd_last_error() : "");
    return st == PD_OK;
}

static void fixture_close(fixture *f) {
    pd__data_free(&f->d);
    pd_tensor_free(&f->X);
    pd_tensor_free(&f->Y);
}

/* --device cuda: the GPU checks only (77 without a GPU); bitwise on the simulated device. */
static int main_device(const char *fixtures) {
    if (pd_cuda_device_count() == 0) {
        printf("skipped: no CUDA GPU (or a build without the CUDA backend)\n");
        return 77;
    }
    double tol = 1e-3; /* a GPU's kernels sum in other orders than the CPU's */
#ifdef PD_HAVE_CUDA
    if (pd__cuda_is_sim()) tol = 0;
#endif
    const char *names[] = {"mlp", "cnn_bn", "tied"};
    for (int m = 0; m < 3; m++) {
        fixture f;
        if (fixture_open(&f, fixtures, names[m])) {
            f.o.device = PD_DEVICE_CUDA;
            if (m == 0) check_devices(&f, tol);
            if (m == 1) { /* BatchNorm: running statistics (replica 0's in each graph) stay each pipeline's own */
                static const int r21[] = {2, 1};
                avg_cfg c = {2, 2, 1, r21, 0, PD_SCHED_FLUSH, 0.25, 4, STEPS, 0, NULL};
                check_device(&f, &c, PD_OPT_MOMENTUM, tol);
            }
            if (m == 2) { /* tied weights: the last stage's copy of the table takes the averaged weights too */
                avg_cfg c2 = {2, 2, 1, NULL, 0, PD_SCHED_FLUSH, 0.25, 4, STEPS, 0, "/Transpose"};
                avg_cfg c3 = {3, 3, 1, NULL, 0, PD_SCHED_GPIPE, 0.25, 3, STEPS, 7, "/Transpose"};
                check_device(&f, &c2, PD_OPT_MOMENTUM, tol);
                check_device(&f, &c3, PD_OPT_SGD, tol);
            }
        }
        fixture_close(&f);
    }
    return check_summary();
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "--device") && !strcmp(argv[2], "cuda")) return main_device(argv[3]);
    if (argc < 2) {
        fprintf(stderr, "usage: test_avgpipe [--device cuda] FIXTURES_DIR\n");
        return 2;
    }
    test_elastic_formula();
    test_tuner();
    fixture f;
    if (fixture_open(&f, argv[1], "mlp")) {
        check_exact(&f);
        check_converges(&f, 400, 2);
        check_refusals(&f);
    }
    fixture_close(&f);
    if (fixture_open(&f, argv[1], "gpt")) {
        check_converges(&f, 200, 2);
    }
    fixture_close(&f);
    return check_summary();
}
