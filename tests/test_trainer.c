/* test_trainer.c - pipeline training through the public API only
 * (pipedream.h, no private headers; two private calls declared below), on
 * the bundled MLP (examples/digits_mlp.onnx, x (N,64) -> y (N,10)) and its
 * digits (examples/digits/train_{x,y}.npy).
 *
 *   - a 2-stage flush pipeline (4 microbatches of 8 rows) gives per step the
 *     losses of single-stage pd_session training on the same 32-row batches
 *     (1e-5 relative), and the same trained weights (1e-5); so does one
 *     whose second stage has 2 replicas (a plan from a file);
 *   - pipedream on 2 stages (asynchronous, weight stashing) converges;
 *   - checkpoints every 5 steps into a folder, across two pd_trainer_train
 *     calls; later checkpoints removed (a crash after step 10's was
 *     persisted); a new trainer on a fresh graph resumes, repeats the call
 *     and the next: the per-step results after the checkpoint and the saved
 *     model's bytes equal the uninterrupted run's, bitwise (flush and
 *     pipedream); resuming from the end of a call works the same way;
 *   - a checkpoint of other settings is refused, naming the setting;
 *   - a call that fails part-way (a NaN) names the stage and step; the
 *     trainer then takes only a resume, after which it trains on bitwise;
 *   - pd_session_snapshot / pd_session_restore continue bitwise, and a bad
 *     buffer leaves the session as it was;
 *   - bad arguments: statuses with messages naming the argument, no crash,
 *     out-parameters untouched;
 *   - two trainers in one process, on two threads at once, each equal to a
 *     trainer run alone;
 *   - checkpoint_every = PD_CHECKPOINT_AUTO: CheckFreq's interval
 *     (pd__ckpt_auto_every, closed-form values), the steps checkpointed for
 *     given costs, and a resume from one of them, bitwise.
 *     The private calls these take come from libpdinternal.
 *
 *   test_trainer MODEL.onnx DIGITS_DIR WORKDIR
 */
#include "pipedream.h"

#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

enum { MB = 8, M = 4, D = 64, STEPS = 20, MORE = 6 };

static const char *model;
static char workdir[1024];
static pd_tensor X, Y; /* the digits: 1437 rows */

static int says(const char *what) { return strstr(pd_last_error(), what) != NULL; }

static pd_graph *load(int64_t batch) {
    pd_load_options lo = PD_LOAD_OPTIONS_INIT;
    lo.batch = batch;
    pd_graph *g = NULL;
    if (pd_graph_load_file(model, &lo, &g) != PD_OK) printf("# load %s: %s\n", model, pd_last_error());
    return g;
}

/* A plan of `stages` stages for g: a profile made from the graph's own
 * nodes (equal costs; an edge wherever a node reads another's output), cut
 * evenly. */
static pd_plan *make_plan(const pd_graph *g, int stages) {
    int n = pd_graph_num_nodes(g), ne = 0;
    pd_profile_node_info *nodes = calloc((size_t)n, sizeof *nodes);
    int *edges = calloc((size_t)n * (size_t)n * 2 + 2, sizeof *edges);
    for (int i = 0; i < n; i++) {
        pd_node_info ni;
        if (pd_graph_node(g, i, &ni) != PD_OK) ni.name = "?";
        nodes[i].name = ni.name;
        nodes[i].desc = ni.op_type;
        nodes[i].fwd_ms = nodes[i].bwd_in_ms = nodes[i].bwd_w_ms = 1;
        nodes[i].act_bytes = 1000;
        for (int j = 0; j < i; j++) {
            int linked = 0;
            for (int a = 0; a < ni.n_inputs && !linked; a++)
                for (int b = 0; pd_graph_node_output(g, j, b) && !linked; b++) {
                    const char *in = pd_graph_node_input(g, i, a);
                    linked = in && !strcmp(in, pd_graph_node_output(g, j, b));
                }
            if (linked) edges[2 * ne] = j, edges[2 * ne + 1] = i, ne++;
        }
    }
    pd_profile *prof = NULL;
    pd_plan *plan = NULL;
    pd_plan_options po = PD_PLAN_OPTIONS_INIT;
    po.algo = "uniform";
    po.workers = stages;
    po.straight = 1;
    po.microbatches = M;
    if (pd_profile_create(nodes, n, edges, ne, MB, &prof) != PD_OK || pd_plan_create(prof, &po, &plan) != PD_OK)
        printf("# plan: %s\n", pd_last_error());
    pd_profile_destroy(prof);
    free(nodes);
    free(edges);
    return plan;
}

/* A plan from a JSON file (pd_plan_load): stage 0 the first Gemm, stage 1
 * the rest, replicated twice. */
static pd_plan *plan_of_json(const char *json);
static pd_plan *replicated_plan(void) {
    static const char json[] =
        "{\"format\": \"pdonnx-plan\", \"version\": 1, \"workers\": 3, \"microbatches\": 4, \"microbatch_size\": 8,\n"
        " \"nodes\": [\"/fc1/Gemm\", \"/Relu\", \"/fc2/Gemm\", \"/Relu_1\", \"/fc3/Gemm\"],\n"
        " \"stages\": [{\"id\": 0, \"replicas\": 1, \"nodes\": [\"/fc1/Gemm\"],\n"
        "             \"fwd_ms\": 1, \"bwd_in_ms\": 1, \"bwd_w_ms\": 1},\n"
        "            {\"id\": 1, \"replicas\": 2, \"nodes\": [\"/Relu\", \"/fc2/Gemm\", \"/Relu_1\", \"/fc3/Gemm\"],\n"
        "             \"fwd_ms\": 2, \"bwd_in_ms\": 2, \"bwd_w_ms\": 2}]}\n";
    return plan_of_json(json);
}

/* A plan of the MLP's nodes, one stage, named `names` (a JSON list). */
static pd_plan *one_stage_plan(const char *names) {
    char json[1024];
    snprintf(json, sizeof json,
             "{\"format\": \"pdonnx-plan\", \"version\": 1, \"workers\": 1, \"microbatches\": 4, "
             "\"microbatch_size\": 8, \"nodes\": %s, \"stages\": [{\"id\": 0, \"replicas\": 1, \"nodes\": %s, "
             "\"fwd_ms\": 1, \"bwd_in_ms\": 1, \"bwd_w_ms\": 1}]}\n", names, names);
    return plan_of_json(json);
}

static pd_plan *plan_of_json(const char *json) {
    char path[1200];
    snprintf(path, sizeof path, "%s/trainer-plan.json", workdir);
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(json, f);
        fclose(f);
    }
    pd_plan *plan = NULL;
    if (pd_plan_load(path, &plan) != PD_OK) printf("# plan_load: %s\n", pd_last_error());
    remove(path);
    return plan;
}

/* The trainer's options, with *tr (filled here) as its training options. */
static pd_trainer_options options(const char *schedule, int microbatches, pd_train_options *tr) {
    pd_trainer_options o = PD_TRAINER_OPTIONS_INIT;
    *tr = (pd_train_options)PD_TRAIN_OPTIONS_INIT;
    tr->lr = 0.1;
    tr->optimizer = PD_OPT_MOMENTUM; /* optimizer state in the checkpoints */
    tr->threads = 1;
    o.train = tr;
    o.schedule = schedule;
    o.microbatches = microbatches;
    return o;
}

/* Views of `steps` steps of `rows` rows from row `first` of the digits. */
static void rows_of(int64_t first, int64_t n, pd_tensor *x, pd_tensor *y) {
    *x = X;
    *y = Y;
    x->shape[0] = y->shape[0] = n;
    x->data = (float *)X.data + first * D;
    y->data = (int64_t *)Y.data + first;
}

static pd_status train(pd_trainer *t, int64_t first_row, int64_t steps, pd_step_result *r) {
    pd_tensor x, y;
    rows_of(first_row, steps * pd_trainer_batch(t), &x, &y);
    return pd_trainer_train(t, steps, &x, &y, r);
}

static void *saved(pd_graph *g, size_t *len) {
    void *buf = NULL;
    if (pd_graph_save_memory(g, &buf, len) != PD_OK) printf("# save: %s\n", pd_last_error());
    return buf;
}

/* ---- a pipeline equals one stage ---- */

/* The model in buf, loaded with MB rows, run on the first MB digits. */
static pd_status outputs(const void *buf, size_t len, float *out) {
    pd_load_options lo = PD_LOAD_OPTIONS_INIT;
    lo.batch = MB;
    pd_graph *g = NULL;
    pd_engine *e = NULL;
    pd_engine_options eo = PD_ENGINE_OPTIONS_INIT;
    eo.threads = 1;
    pd_tensor x, y, v;
    rows_of(0, MB, &x, &y);
    pd_status st = pd_graph_load_memory(buf, len, "trained", NULL, &lo, &g);
    if (st == PD_OK) st = pd_engine_create(g, &eo, &e);
    if (st == PD_OK) st = pd_engine_set_input(e, "x", &x);
    if (st == PD_OK) st = pd_engine_run(e);
    if (st == PD_OK) st = pd_engine_get_output(e, "y", &v);
    if (st == PD_OK) memcpy(out, v.data, sizeof(float) * MB * 10);
    pd_engine_destroy(e);
    pd_graph_destroy(g);
    return st;
}

static void test_flush_equals_session(int replicated) {
    pd_graph *gp = load(MB), *gs = load(MB * M);
    pd_plan *plan = gp ? replicated ? replicated_plan() : make_plan(gp, 2) : NULL;
    if (replicated) {
        pd_stage_info si;
        CHECK(plan && pd_plan_stage(plan, 1, &si) == PD_OK && si.replicas == 2,
              "a plan whose stage 1 has 2 replicas, from a file: %s", plan ? "ok" : pd_last_error());
    }
    pd_train_options tr;
    pd_trainer_options o = options("flush", M, &tr);
    pd_trainer *t = NULL;
    CHECK(plan && pd_trainer_create(gp, plan, &o, &t) == PD_OK, "create a 2-stage flush trainer%s: %s",
          replicated ? " (stage 1 on 2 replicas)" : "", t ? "ok" : pd_last_error());
    if (!t) goto out;
    CHECK(pd_trainer_stages(t) == 2 && pd_trainer_batch(t) == MB * M && pd_trainer_step_count(t) == 0,
          "2 stages, %lld rows per step", (long long)pd_trainer_batch(t));
    pd_step_result rp[STEPS], rs;
    CHECK(train(t, 0, STEPS, rp) == PD_OK && pd_trainer_step_count(t) == STEPS, "train %d steps: %s", STEPS,
          pd_trainer_step_count(t) == STEPS ? "ok" : pd_last_error());
    pd_session *s = NULL;
    if (pd_session_create(gs, &tr, &s) != PD_OK) s = NULL;
    double worst = 0;
    int ok = s != NULL;
    for (int k = 0; ok && k < STEPS; k++) {
        pd_tensor x, y;
        rows_of((int64_t)k * MB * M, MB * M, &x, &y);
        ok = pd_session_set_input(s, "x", &x) == PD_OK && pd_session_set_labels(s, &y) == PD_OK &&
             pd_session_step(s, &rs) == PD_OK;
        double d = fabs(rp[k].loss - rs.loss) / fabs(rs.loss);
        if (d > worst) worst = d;
        if (ok && k == STEPS - 1) ok = fabs(rp[k].lr - rs.lr) < 1e-12 && rs.loss < rp[0].loss;
    }
    CHECK(ok && worst <= 1e-5,
          "%sper-step losses equal single-stage training (worst relative difference %.2g; %.4f -> %.4f)",
          replicated ? "replicated: " : "", worst, rp[0].loss, rp[STEPS - 1].loss);
    pd_session_destroy(s);
    pd_trainer_destroy(t);
    /* the trained weights, back in both graphs: saved, reloaded, run on the same rows */
    size_t lp = 0, ls = 0;
    void *bp = saved(gp, &lp), *bs = saved(gs, &ls);
    float op[MB * 10], os[MB * 10];
    double wd = 1;
    if (bp && bs && outputs(bp, lp, op) == PD_OK && outputs(bs, ls, os) == PD_OK) {
        wd = 0;
        for (int i = 0; i < MB * 10; i++) {
            double d = fabs((double)op[i] - os[i]) / (1 + fabs((double)os[i]));
            if (d > wd) wd = d;
        }
    }
    CHECK(wd <= 1e-5, "%sthe trained models compute the same outputs (max relative difference %.2g)",
          replicated ? "replicated: " : "", wd);
    pd_buffer_free(bp);
    pd_buffer_free(bs);
out:
    pd_plan_destroy(plan);
    pd_graph_destroy(gp);
    pd_graph_destroy(gs);
}

static void test_pipedream_converges(void) {
    pd_graph *g = load(MB);
    pd_plan *plan = g ? make_plan(g, 2) : NULL;
    pd_train_options tr;
    pd_trainer_options o = options("pipedream", 0, &tr);
    tr.optimizer = PD_OPT_SGD;
    tr.lr = 0.2;
    pd_trainer *t = NULL;
    enum { N = 150 };
    static pd_step_result r[N];
    CHECK(plan && pd_trainer_create(g, plan, &o, &t) == PD_OK && pd_trainer_batch(t) == MB,
          "pipedream trainer (one microbatch per step): %s", t ? "ok" : pd_last_error());
    CHECK(t && train(t, 0, N, r) == PD_OK, "pipedream: %d steps", N);
    double first = 0, last = 0;
    for (int k = 0; k < 10; k++) first += r[k].loss / 10, last += r[N - 10 + k].loss / 10;
    CHECK(t && last < 0.5 * first, "pipedream on 2 stages converges: mean loss %.4f -> %.4f", first, last);
    pd_trainer_destroy(t);
    pd_plan_destroy(plan);
    pd_graph_destroy(g);
}

/* ---- checkpoints ---- */

static void rm_rf(const char *path) {
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char p[2200];
            snprintf(p, sizeof p, "%s/%s", path, e->d_name);
            rm_rf(p);
        }
        closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}

static void rm_ckpt(const char *dir, int64_t step) {
    char p[1400];
    snprintf(p, sizeof p, "%s/ckpt-%012lld", dir, (long long)step);
    rm_rf(p);
}

static int same_results(const pd_step_result *a, const pd_step_result *b, int n) {
    for (int k = 0; k < n; k++)
        if (memcmp(&a[k].loss, &b[k].loss, sizeof(double)) || memcmp(&a[k].lr, &b[k].lr, sizeof(double)) ||
            a[k].count != b[k].count)
            return 0;
    return 1;
}

/* A trainer on a fresh graph (*g), checkpointing into dir (NULL: none). */
static pd_trainer *fresh(const char *schedule, int microbatches, const char *dir, pd_graph **g, pd_plan **plan) {
    *g = load(MB);
    *plan = *g ? make_plan(*g, 2) : NULL;
    pd_train_options tr;
    pd_trainer_options o = options(schedule, microbatches, &tr);
    o.checkpoint_dir = dir;
    o.checkpoint_every = dir ? 5 : 0;
    o.checkpoint_keep = 0;
    pd_trainer *t = NULL;
    if (*plan && pd_trainer_create(*g, *plan, &o, &t) != PD_OK) printf("# trainer: %s\n", pd_last_error());
    return t;
}

static void finish(pd_trainer *t, pd_graph *g, pd_plan *plan, void **buf, size_t *len) {
    pd_trainer_destroy(t);
    if (buf) *buf = g ? saved(g, len) : NULL;
    pd_plan_destroy(plan);
    pd_graph_destroy(g);
}

static void test_checkpoint_resume(const char *schedule, int microbatches) {
    char da[1200], db[1200];
    snprintf(da, sizeof da, "%s/trainer-ckpt-%s-a", workdir, schedule);
    snprintf(db, sizeof db, "%s/trainer-ckpt-%s-b", workdir, schedule);
    rm_rf(da);
    rm_rf(db);
    pd_graph *g;
    pd_plan *plan;
    pd_step_result ra[STEPS], ra2[MORE], rb[STEPS], rb2[MORE], rc2[MORE];
    void *ma = NULL, *mb = NULL, *mc = NULL;
    size_t la = 0, lb = 0, lc = 0;

    /* A: uninterrupted, two calls: 20 steps, then 6 */
    pd_trainer *t = fresh(schedule, microbatches, da, &g, &plan);
    int64_t B = t ? pd_trainer_batch(t) : 0;
    int ok = t && train(t, 0, STEPS, ra) == PD_OK && train(t, STEPS * B, MORE, ra2) == PD_OK;
    CHECK(ok, "%s: uninterrupted run with checkpoints every 5 steps: %s", schedule, ok ? "ok" : pd_last_error());
    finish(t, g, plan, &ma, &la);
    struct stat sb;
    char p[1400];
    snprintf(p, sizeof p, "%s/ckpt-%012d/manifest.json", da, 10);
    CHECK(stat(p, &sb) == 0, "%s: checkpoint of step 10 on disk", schedule);

    /* a crash after step 10's checkpoint: the later ones never happened */
    rm_ckpt(da, 26), rm_ckpt(da, 25), rm_ckpt(da, 20), rm_ckpt(da, 15);
    t = fresh(schedule, microbatches, db, &g, &plan);
    pd_resume_info ri = {-1, -1, -1};
    ok = t && pd_trainer_resume(t, da, &ri) == PD_OK;
    CHECK(ok && ri.step == 10 && ri.run_first == 0 && ri.run_steps == STEPS && pd_trainer_step_count(t) == 10,
          "%s: resumed at step %lld of a call of %lld steps from %lld: %s", schedule, (long long)ri.step,
          (long long)ri.run_steps, (long long)ri.run_first, ok ? "ok" : pd_last_error());
    pd_step_result junk[MORE];
    CHECK(t && train(t, 0, MORE, junk) == PD_ERR_INVALID && says("steps") && says("repeat that call"),
          "%s: another call than the interrupted one is refused: %s", schedule, pd_last_error());
    ok = t && train(t, 0, STEPS, rb) == PD_OK && train(t, STEPS * B, MORE, rb2) == PD_OK;
    CHECK(ok && rb[9].count == 0 && same_results(rb + 10, ra + 10, STEPS - 10) && same_results(rb2, ra2, MORE),
          "%s: the resumed run's steps 11..%d equal the uninterrupted run's, bitwise: %s", schedule, STEPS + MORE,
          ok ? "ok" : pd_last_error());
    finish(t, g, plan, &mb, &lb);
    CHECK(ma && mb && la == lb && !memcmp(ma, mb, la), "%s: the trained model's bytes equal the uninterrupted run's",
          schedule);

    /* from the end of a call: B's checkpoint of step 20 */
    rm_ckpt(db, 26), rm_ckpt(db, 25);
    t = fresh(schedule, microbatches, NULL, &g, &plan);
    ok = t && pd_trainer_resume(t, db, &ri) == PD_OK;
    CHECK(ok && ri.step == STEPS && ri.run_first + ri.run_steps == STEPS,
          "%s: resumed at the end of the first call: %s",
          schedule, ok ? "ok" : pd_last_error());
    ok = ok && train(t, STEPS * B, MORE, rc2) == PD_OK;
    CHECK(ok && same_results(rc2, ra2, MORE), "%s: the next call equals the uninterrupted run's, bitwise", schedule);
    finish(t, g, plan, &mc, &lc);
    CHECK(mc && la == lc && !memcmp(ma, mc, la), "%s: and so does the trained model", schedule);

    /* other settings are refused by name */
    g = load(MB);
    plan = g ? make_plan(g, 2) : NULL;
    pd_train_options tr;
    pd_trainer_options o = options(schedule, microbatches, &tr);
    tr.lr = 0.05;
    t = NULL;
    if (plan && pd_trainer_create(g, plan, &o, &t) != PD_OK) t = NULL;
    CHECK(t && pd_trainer_resume(t, db, &ri) == PD_ERR_INVALID && says("lr") && says("0.05"),
          "%s: a checkpoint taken with another lr is refused: %s", schedule, pd_last_error());
    finish(t, g, plan, NULL, NULL);
    pd_buffer_free(ma);
    pd_buffer_free(mb);
    pd_buffer_free(mc);
    rm_rf(da);
    rm_rf(db);
}

/* A call that fails part-way (a NaN in step 3's rows): the error names the
 * stage and step; the trainer then takes only a resume, after which it
 * trains on as the uninterrupted run does. */
static void test_failure_then_resume(void) {
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/trainer-ckpt-failure", workdir);
    rm_rf(dir);
    pd_graph *g;
    pd_plan *plan;
    pd_step_result ra[STEPS], rb[STEPS];
    pd_trainer *t = fresh("flush", M, dir, &g, &plan);
    int ok = t && train(t, 0, STEPS, ra) == PD_OK; /* the reference, and checkpoints at 5, 10, 15, 20 */
    pd_trainer_destroy(t);
    pd_plan_destroy(plan);
    pd_graph_destroy(g);
    rm_ckpt(dir, 20), rm_ckpt(dir, 15), rm_ckpt(dir, 10);
    t = fresh("flush", M, NULL, &g, &plan);
    int64_t B = MB * M, n = (int64_t)STEPS * B;
    float *x = malloc(sizeof(float) * (size_t)(n * D));
    pd_tensor xt, yt;
    rows_of(0, n, &xt, &yt);
    if (x) memcpy(x, xt.data, sizeof(float) * (size_t)(n * D));
    if (x) x[(3 * B + 1) * D + 5] = NAN;
    xt.data = x;
    pd_status st = t && x ? pd_trainer_train(t, STEPS, &xt, &yt, rb) : PD_ERR_NOMEM;
    CHECK(ok && st == PD_ERR_NUMERIC, "a NaN in step 4's rows: %s (%s)", pd_status_name(st), pd_last_error());
    CHECK(t && train(t, 0, STEPS, rb) == PD_ERR_INVALID && says("failed") && says("pd_trainer_resume"),
          "after a call failed part-way, training is refused until a resume: %s", pd_last_error());
    pd_resume_info ri;
    ok = t && pd_trainer_resume(t, dir, &ri) == PD_OK && ri.step == 5;
    CHECK(ok, "resumed at step 5 after the failure: %s", ok ? "ok" : pd_last_error());
    ok = ok && train(t, 0, STEPS, rb) == PD_OK;
    CHECK(ok && same_results(rb + 5, ra + 5, STEPS - 5), "... and trains on as the uninterrupted run, bitwise");
    free(x);
    pd_trainer_destroy(t);
    pd_plan_destroy(plan);
    pd_graph_destroy(g);
    rm_rf(dir);
}

/* ---- CheckFreq's auto policy ---- */

/* Private (libpdinternal): CheckFreq's interval, and a trainer's measured
 * checkpoint costs replaced by given ones. */
int64_t pd__ckpt_auto_every(double step_ms, double snapshot_ms, double persist_ms, double overhead);
pd_status pd__trainer_ckpt_costs(pd_trainer *t, double step_ms, double pause_ms, double persist_ms);

/* pd__ckpt_auto_every is ceil(max((pause + persist) / (overhead * step),
 * persist / step)), at least 1 (values exact in binary). */
static void test_auto_every_formula(void) {
    static const struct {
        double step, pause, persist, overhead;
        int64_t want;
    } c[] = {
        {10, 2, 40, 0.5, 9},      /* (2 + 40) / 5 = 8.4 -> 9 */
        {4, 3, 3, 0.25, 6},       /* (3 + 3) / 1 = 6 exactly */
        {8, 6, 10, 0.125, 16},    /* 16 / 1 = 16; the persist alone 1.25 */
        {2, 0, 30, 4, 15},        /* the budget 30 / 8 = 3.75, but not before the last persist is over: 30 / 2 */
        {10, 1, 1, 0.5, 1},       /* 2 / 5 = 0.4: every step */
        {0, 5, 5, 0.035, 1},      /* no step time measured yet */
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        int64_t got = pd__ckpt_auto_every(c[i].step, c[i].pause, c[i].persist, c[i].overhead);
        CHECK(got == c[i].want, "auto_every(step %g ms, pause %g ms, persist %g ms, overhead %g) = %lld (want %lld)",
              c[i].step, c[i].pause, c[i].persist, c[i].overhead, (long long)got, (long long)c[i].want);
    }
}

/* The auto policy's options: refused by name, and an older struct's size
 * (before checkpoint_overhead) reads it as 0. */
static void test_auto_options(void) {
    pd_graph *g = load(MB);
    pd_plan *plan = g ? make_plan(g, 2) : NULL;
    pd_trainer *const T0 = (pd_trainer *)&check_count;
    pd_trainer *t = T0, *old = NULL;
    pd_train_options tr;
    pd_trainer_options o = options("flush", M, &tr), b = o;
    if (!plan) {
        CHECK(0, "a plan for the auto policy's option checks");
        pd_graph_destroy(g);
        return;
    }
    b.checkpoint_every = PD_CHECKPOINT_AUTO;
    CHECK(pd_trainer_create(g, plan, &b, &t) == PD_ERR_INVALID && says("checkpoint_dir") && t == T0,
          "create(PD_CHECKPOINT_AUTO without a folder): %s", pd_last_error());
    b.checkpoint_dir = workdir;
    b.checkpoint_every = -2;
    CHECK(pd_trainer_create(g, plan, &b, &t) == PD_ERR_INVALID && says("opt->checkpoint_every is -2") && t == T0,
          "create(checkpoint_every -2): %s", pd_last_error());
    b.checkpoint_every = PD_CHECKPOINT_AUTO;
    b.checkpoint_overhead = -0.5;
    CHECK(pd_trainer_create(g, plan, &b, &t) == PD_ERR_INVALID && says("opt->checkpoint_overhead") && t == T0,
          "create(checkpoint_overhead -0.5): %s", pd_last_error());
    b.checkpoint_overhead = NAN;
    CHECK(pd_trainer_create(g, plan, &b, &t) == PD_ERR_INVALID && says("opt->checkpoint_overhead") && t == T0,
          "create(checkpoint_overhead NaN): %s", pd_last_error());
    /* the struct before checkpoint_overhead: it reads as 0, auto's default */
    b = o;
    b.size = offsetof(pd_trainer_options, checkpoint_overhead);
    b.checkpoint_overhead = -1; /* past size: not read (read, it is refused) */
    CHECK(pd_trainer_create(g, plan, &b, &old) == PD_OK && old,
          "create(the struct without checkpoint_overhead) ignores what lies past its size: %s",
          old ? "ok" : pd_last_error());
    pd_trainer_destroy(old);
    old = NULL;
    pd_plan_destroy(plan);
    pd_graph_destroy(g);
}

/* The steps of dir's checkpoints, in order, as text ("3 12 20"). */
static void ckpt_steps(const char *dir, char *out, size_t n) {
    long long s[64];
    int k = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) && k < 64)
        if (!strncmp(e->d_name, "ckpt-", 5)) s[k++] = strtoll(e->d_name + 5, NULL, 10);
    if (d) closedir(d);
    for (int i = 1; i < k; i++)
        for (int j = i; j > 0 && s[j - 1] > s[j]; j--) {
            long long x = s[j];
            s[j] = s[j - 1], s[j - 1] = x;
        }
    out[0] = 0;
    for (int i = 0; i < k; i++) snprintf(out + strlen(out), n - strlen(out), "%s%lld", i ? " " : "", s[i]);
}

/* A flush trainer with checkpoint_every = PD_CHECKPOINT_AUTO into dir;
 * costs (step, pause, persist ms) given, or NULL: measured. */
static pd_trainer *fresh_auto(const char *dir, const double *costs, pd_graph **g, pd_plan **plan) {
    *g = load(MB);
    *plan = *g ? make_plan(*g, 2) : NULL;
    pd_train_options tr;
    pd_trainer_options o = options("flush", M, &tr);
    o.checkpoint_dir = dir;
    o.checkpoint_every = PD_CHECKPOINT_AUTO;
    o.checkpoint_overhead = 0.5;
    o.checkpoint_keep = 0;
    pd_trainer *t = NULL;
    if (*plan && pd_trainer_create(*g, *plan, &o, &t) != PD_OK) printf("# trainer: %s\n", pd_last_error());
    if (t && costs && pd__trainer_ckpt_costs(t, costs[0], costs[1], costs[2]) != PD_OK) printf("# costs\n");
    return t;
}

/* Auto's checkpoints: the first after 3 steps of each call (to measure what
 * one costs), then every pd__ckpt_auto_every(step, pause, persist,
 * overhead) steps, and the end of each call. With the costs given (10 ms a
 * step, 2 ms a pause, 40 ms a persist, overhead 0.5: every 9), a call of 20
 * steps and one of 6 take 3, 12, 20 and 23, 26. Resumed from 12, the run
 * equals the uninterrupted one bitwise. Measured: 3 and the end at least. */
static void test_auto_checkpoints(void) {
    char da[1200], db[1200], got[256];
    snprintf(da, sizeof da, "%s/trainer-auto-a", workdir);
    snprintf(db, sizeof db, "%s/trainer-auto-b", workdir);
    rm_rf(da);
    rm_rf(db);
    const double costs[3] = {10, 2, 40};
    int64_t e = pd__ckpt_auto_every(costs[0], costs[1], costs[2], 0.5);
    pd_graph *g;
    pd_plan *plan;
    pd_step_result ra[STEPS], ra2[MORE], rb[STEPS], rb2[MORE];
    void *ma = NULL, *mb = NULL;
    size_t la = 0, lb = 0;
    pd_trainer *t = fresh_auto(da, costs, &g, &plan);
    int64_t B = t ? pd_trainer_batch(t) : 0;
    int ok = t && train(t, 0, STEPS, ra) == PD_OK && train(t, STEPS * B, MORE, ra2) == PD_OK;
    CHECK(ok, "auto: two calls with checkpoints: %s", ok ? "ok" : pd_last_error());
    finish(t, g, plan, &ma, &la);
    ckpt_steps(da, got, sizeof got);
    CHECK(e == 9 && !strcmp(got, "3 12 20 23 26"),
          "auto with given costs (every %lld): checkpoints at steps %s (want 3 12 20 23 26)", (long long)e, got);

    rm_ckpt(da, 26), rm_ckpt(da, 23), rm_ckpt(da, 20); /* a crash after step 12's */
    t = fresh_auto(db, costs, &g, &plan);
    pd_resume_info ri = {-1, -1, -1};
    ok = t && pd_trainer_resume(t, da, &ri) == PD_OK && ri.step == 12;
    CHECK(ok, "auto: resumed at step %lld: %s", (long long)ri.step, ok ? "ok" : pd_last_error());
    ok = ok && train(t, 0, STEPS, rb) == PD_OK && train(t, STEPS * B, MORE, rb2) == PD_OK;
    CHECK(ok && same_results(rb + 12, ra + 12, STEPS - 12) && same_results(rb2, ra2, MORE),
          "auto: the resumed run's steps 13..%d equal the uninterrupted run's, bitwise: %s", STEPS + MORE,
          ok ? "ok" : pd_last_error());
    finish(t, g, plan, &mb, &lb);
    CHECK(ma && mb && la == lb && !memcmp(ma, mb, la), "auto: the trained model's bytes equal the uninterrupted run's");
    ckpt_steps(db, got, sizeof got);
    CHECK(!strcmp(got, "15 20 23 26"), "auto: the resumed run's first checkpoint 3 steps after 12: %s", got);
    pd_buffer_free(ma);
    pd_buffer_free(mb);
    rm_rf(da);
    rm_rf(db);

    t = fresh_auto(da, NULL, &g, &plan); /* measured */
    ok = t && train(t, 0, STEPS, ra) == PD_OK;
    finish(t, g, plan, NULL, NULL);
    ckpt_steps(da, got, sizeof got);
    CHECK(ok && !strncmp(got, "3 ", 2) && strlen(got) >= 4 && !strcmp(got + strlen(got) - 3, " 20"),
          "auto with measured costs: the first checkpoint at step 3, the last at 20: %s (%s)", got,
          ok ? "ok" : pd_last_error());
    rm_rf(da);
}

/* ---- one stage: snapshot and restore ---- */

static pd_status sstep(pd_session *s, int k, double *loss) {
    pd_tensor x, y;
    rows_of((int64_t)k * MB, MB, &x, &y);
    pd_step_result r;
    pd_status st = pd_session_set_input(s, "x", &x);
    if (st == PD_OK) st = pd_session_set_labels(s, &y);
    if (st == PD_OK) st = pd_session_step(s, &r);
    *loss = r.loss;
    return st;
}

static void test_session_snapshot(void) {
    pd_graph *g = load(MB), *g2 = load(MB);
    pd_train_options tr;
    (void)options("flush", 1, &tr);
    pd_session *s = NULL, *s2 = NULL;
    if (pd_session_create(g, &tr, &s) != PD_OK) s = NULL;
    if (pd_session_create(g2, &tr, &s2) != PD_OK) s2 = NULL;
    double l[10], l2[5];
    int ok = s && s2;
    for (int k = 0; ok && k < 5; k++) ok = sstep(s, k, &l[k]) == PD_OK;
    void *buf = NULL;
    size_t len = 0;
    ok = ok && pd_session_snapshot(s, &buf, &len) == PD_OK;
    for (int k = 5; ok && k < 10; k++) ok = sstep(s, k, &l[k]) == PD_OK;
    ok = ok && pd_session_restore(s2, buf, len) == PD_OK && pd_session_step_count(s2) == 5;
    for (int k = 5; ok && k < 10; k++) ok = sstep(s2, k, &l2[k - 5]) == PD_OK;
    CHECK(ok && !memcmp(l + 5, l2, sizeof l2), "session snapshot (%zu bytes) restored into another session trains on "
          "bitwise: %s", len, ok ? "ok" : pd_last_error());
    /* a corrupt buffer: refused, the session as it was */
    void *before = NULL, *after = NULL;
    size_t lb = 0, lf = 0;
    if (pd_session_snapshot(s2, &before, &lb) != PD_OK) before = NULL;
    unsigned char *bad = malloc(len);
    memcpy(bad, buf, len);
    size_t cut = len / 2;
    CHECK(pd_session_restore(s2, bad, cut) != PD_OK && says("pd_session_restore"),
          "a truncated snapshot is refused: %s",
          pd_last_error());
    if (pd_session_snapshot(s2, &after, &lf) != PD_OK) after = NULL;
    CHECK(before && after && lb == lf && !memcmp(before, after, lb), "... and the session is left as it was");
    free(bad);
    pd_buffer_free(before);
    pd_buffer_free(after);
    pd_buffer_free(buf);
    pd_session_destroy(s);
    pd_session_destroy(s2);
    pd_graph_destroy(g);
    pd_graph_destroy(g2);
}

/* ---- bad arguments ---- */

static void test_bad_arguments(void) {
    pd_graph *g = load(MB);
    pd_plan *plan = g ? make_plan(g, 2) : NULL;
    pd_trainer *const T0 = (pd_trainer *)&check_count;
    pd_trainer *t = T0;
    pd_train_options tr;
    pd_trainer_options o = options("flush", M, &tr);
    if (!plan) {
        CHECK(0, "a plan for the bad-argument checks");
        pd_graph_destroy(g);
        return;
    }
    CHECK(pd_trainer_create(NULL, plan, &o, &t) == PD_ERR_INVALID && says("g is NULL") && t == T0,
          "create(NULL g): %s", pd_last_error());
    CHECK(pd_trainer_create(g, NULL, &o, &t) == PD_ERR_INVALID && says("plan") && t == T0, "create(NULL plan): %s",
          pd_last_error());
    CHECK(pd_trainer_create(g, plan, &o, NULL) == PD_ERR_INVALID && says("out"), "create(NULL out): %s",
          pd_last_error());
    pd_trainer_options b = o;
    b.size = 4; /* shorter than the size field itself */
    CHECK(pd_trainer_create(g, plan, &b, &t) == PD_ERR_INVALID && says("size") && t == T0, "create(bad size): %s",
          pd_last_error());
    b = o;
    b.schedule = "nope";
    CHECK(pd_trainer_create(g, plan, &b, &t) == PD_ERR_INVALID && says("schedule") && says("nope") && t == T0,
          "create(unknown schedule): %s", pd_last_error());
    b = o;
    b.microbatches = -1;
    CHECK(pd_trainer_create(g, plan, &b, &t) == PD_ERR_INVALID && says("microbatches") && t == T0,
          "create(microbatches -1): %s", pd_last_error());
    pd_train_options tr_b;
    b = options("pipedream", 4, &tr_b);
    CHECK(pd_trainer_create(g, plan, &b, &t) == PD_ERR_INVALID && says("microbatches") && t == T0,
          "create(pipedream, 4 microbatches): %s", pd_last_error());
    b = o;
    b.vertical_sync = 1;
    CHECK(pd_trainer_create(g, plan, &b, &t) == PD_ERR_INVALID && says("vertical_sync") && t == T0,
          "create(vertical sync under flush): %s", pd_last_error());
    b = o;
    b.recompute = 2;
    CHECK(pd_trainer_create(g, plan, &b, &t) == PD_ERR_INVALID && says("opt->recompute") && t == T0,
          "create(recompute 2): %s", pd_last_error());
    b = o;
    b.checkpoint_every = 5;
    CHECK(pd_trainer_create(g, plan, &b, &t) == PD_ERR_INVALID && says("checkpoint_dir") && t == T0,
          "create(checkpoint_every without a folder): %s", pd_last_error());
    b = o;
    pd_train_options bad_lr = tr;
    bad_lr.lr = -1;
    b.train = &bad_lr;
    CHECK(pd_trainer_create(g, plan, &b, &t) == PD_ERR_INVALID && t == T0, "create(negative lr): %s", pd_last_error());
    b = o;
    b.size = sizeof(pd_trainer_options) + 8; /* a newer header's struct: its fields would be ignored */
    CHECK(pd_trainer_create(g, plan, &b, &t) == PD_ERR_INVALID && says("size") && t == T0,
          "create(a struct larger than the library's): %s", pd_last_error());
    pd_train_options big = tr;
    big.size = sizeof big + 8;
    b = o;
    b.train = &big;
    CHECK(pd_trainer_create(g, plan, &b, &t) == PD_ERR_INVALID && says("opt->train") && t == T0,
          "create(train options larger than the library's): %s", pd_last_error());
    /* an older header's struct, up to vertical_sync: the fields after it keep their defaults */
    b = o;
    b.size = offsetof(pd_trainer_options, vertical_sync) + sizeof b.vertical_sync;
    b.checkpoint_every = 5; /* past size: not read (read, it needs a checkpoint_dir) */
    pd_trainer *old = NULL;
    CHECK(pd_trainer_create(g, plan, &b, &old) == PD_OK && old && pd_trainer_batch(old) == MB * M,
          "create(an older, shorter struct) takes the defaults past its size: %s", old ? "ok" : pd_last_error());
    pd_trainer_destroy(old);
    old = NULL;
    CHECK(pd_trainer_create(g, plan, NULL, &old) == PD_OK && old, "create(NULL opt) is the defaults: %s",
          old ? "ok" : pd_last_error());
    pd_trainer_destroy(old);
    /* a plan of another model: the first node that differs, by count and by name, and the model's file */
    CHECK(pd_trainer_check_plan(g, plan) == PD_OK, "check_plan(its own plan): %s", pd_last_error());
    CHECK(pd_trainer_check_plan(NULL, plan) == PD_ERR_INVALID && says("g is NULL"), "check_plan(NULL g): %s",
          pd_last_error());
    char want[1200];
    pd_plan *renamed = one_stage_plan("[\"/fc1/Gemm\", \"/Relu\", \"/fc2/Gemm\", \"/Relu_1\", \"renamed\"]");
    snprintf(want, sizeof want, "node 4 is 'renamed' in the plan but '/fc3/Gemm' in %s", model);
    CHECK(renamed && pd_trainer_check_plan(g, renamed) == PD_ERR_INVALID && !strcmp(pd_last_error(), want),
          "check_plan(a renamed node) says '%s': %s", want, pd_last_error());
    snprintf(want, sizeof want, "pd_trainer_create: node 4 is 'renamed' in the plan but '/fc3/Gemm' in %s", model);
    CHECK(renamed && pd_trainer_create(g, renamed, &o, &t) == PD_ERR_INVALID && !strcmp(pd_last_error(), want) &&
              t == T0, "create(a renamed node) says '%s': %s", want, pd_last_error());
    pd_plan *short4 = one_stage_plan("[\"/fc1/Gemm\", \"/Relu\", \"/fc2/Gemm\", \"/Relu_1\"]");
    snprintf(want, sizeof want, "the plan has 4 nodes but %s has 5: plan this model", model);
    CHECK(short4 && pd_trainer_check_plan(g, short4) == PD_ERR_INVALID && !strcmp(pd_last_error(), want),
          "check_plan(a node short) says '%s': %s", want, pd_last_error());
    pd_plan_destroy(renamed);
    pd_plan_destroy(short4);
    pd_graph *other = load(2 * MB);
    pd_plan *p3 = other ? make_plan(other, 3) : NULL;
    CHECK(p3 && pd_trainer_create(g, p3, &o, &t) == PD_OK, "a 3-stage plan is fine: %s", pd_last_error());
    if (t != T0) pd_trainer_destroy(t);
    t = T0;
    pd_plan_destroy(p3);
    pd_graph_destroy(other);

    t = NULL;
    CHECK(pd_trainer_create(g, plan, &o, &t) == PD_OK, "create: %s", t ? "ok" : pd_last_error());
    pd_trainer *t2 = T0;
    CHECK(pd_trainer_create(g, plan, &o, &t2) == PD_ERR_INVALID && t2 == T0,
          "a second trainer on a graph being trained is refused: %s", pd_last_error());
    pd_tensor x, y;
    rows_of(0, 2 * MB * M, &x, &y);
    pd_step_result r[3];
    CHECK(pd_trainer_train(NULL, 2, &x, &y, r) == PD_ERR_INVALID && says("t is NULL"), "train(NULL trainer): %s",
          pd_last_error());
    CHECK(pd_trainer_train(t, 0, &x, &y, r) == PD_ERR_INVALID && says("steps"), "train(0 steps): %s", pd_last_error());
    CHECK(pd_trainer_train(t, 2, NULL, &y, r) == PD_ERR_INVALID && says("inputs"), "train(NULL inputs): %s",
          pd_last_error());
    CHECK(pd_trainer_train(t, 2, &x, NULL, r) == PD_ERR_INVALID && says("labels"), "train(NULL labels): %s",
          pd_last_error());
    CHECK(pd_trainer_train(t, 3, &x, &y, r) == PD_ERR_SHAPE && says("inputs[0] ('x')") && says("rows"),
          "train(too few rows): %s", pd_last_error());
    pd_tensor xi = x;
    xi.dtype = PD_INT32;
    CHECK(pd_trainer_train(t, 2, &xi, &y, r) == PD_ERR_SHAPE && says("inputs[0]") && says("int32"),
          "train(int32 inputs): %s", pd_last_error());
    pd_tensor yf = y;
    yf.dtype = PD_FLOAT;
    CHECK(pd_trainer_train(t, 2, &x, &yf, r) == PD_ERR_SHAPE && says("labels") && says("mse") && says("10"),
          "train(one float label per row: the default loss takes them for MSE targets): %s", pd_last_error());
    pd_tensor y2 = y;
    y2.ndim = 2;
    y2.shape[1] = 1;
    y2.shape[0] = y.shape[0] / 2;
    y2.shape[1] = 2;
    CHECK(pd_trainer_train(t, 1, &x, &y2, r) == PD_ERR_SHAPE && says("labels") && says("2 values per row"),
          "train(two labels per row): %s", pd_last_error());
    pd_tensor xn = x;
    xn.data = NULL;
    CHECK(pd_trainer_train(t, 2, &xn, &y, r) == PD_ERR_INVALID && says("inputs[0]") && says("data"),
          "train(NULL data): %s", pd_last_error());
    CHECK(pd_trainer_step_count(t) == 0 && pd_trainer_train(t, 2, &x, &y, r) == PD_OK && pd_trainer_step_count(t) == 2,
          "after the refused calls, training works: %s", pd_last_error());
    pd_resume_info ri = {7, 7, 7};
    CHECK(pd_trainer_resume(NULL, workdir, &ri) == PD_ERR_INVALID && says("t is NULL"), "resume(NULL trainer): %s",
          pd_last_error());
    CHECK(pd_trainer_resume(t, NULL, &ri) == PD_ERR_INVALID && says("dir"), "resume(NULL dir): %s", pd_last_error());
    char none[1200];
    snprintf(none, sizeof none, "%s/no-such-checkpoints", workdir);
    CHECK(pd_trainer_resume(t, none, &ri) == PD_ERR_IO && says("no-such-checkpoints") && ri.step == 7,
          "resume(a folder without checkpoints): %s", pd_last_error());
    CHECK(pd_trainer_stages(NULL) == 0 && pd_trainer_batch(NULL) == 0 && pd_trainer_step_count(NULL) == 0,
          "queries on NULL answer 0");
    void *buf = (void *)&check_count;
    size_t len = 0;
    CHECK(pd_session_snapshot(NULL, &buf, &len) == PD_ERR_INVALID && says("s is NULL") && buf == (void *)&check_count,
          "session_snapshot(NULL): %s", pd_last_error());
    CHECK(pd_session_restore(NULL, "x", 1) == PD_ERR_INVALID && says("s is NULL"), "session_restore(NULL): %s",
          pd_last_error());
    pd_trainer_destroy(t);
    pd_trainer_destroy(NULL);
    pd_plan_destroy(plan);
    pd_graph_destroy(g);
}

/* ---- two trainers at once ---- */

typedef struct job {
    int variant;
    pd_step_result r[10];
    pd_status st;
} job;

static void *run_job(void *arg) {
    job *j = arg;
    pd_graph *g = load(MB);
    pd_plan *plan = g ? make_plan(g, 2) : NULL;
    pd_train_options tr;
    pd_trainer_options o = options(j->variant ? "gpipe" : "flush", M, &tr);
    pd_trainer *t = NULL;
    j->st = plan ? pd_trainer_create(g, plan, &o, &t) : PD_ERR_INVALID;
    if (j->st == PD_OK) j->st = train(t, (int64_t)j->variant * 10 * MB * M, 10, j->r);
    pd_trainer_destroy(t);
    pd_plan_destroy(plan);
    pd_graph_destroy(g);
    return NULL;
}

static void test_two_trainers(void) {
    job alone[2], both[2];
    memset(alone, 0, sizeof alone);
    memset(both, 0, sizeof both);
    alone[1].variant = both[1].variant = 1;
    run_job(&alone[0]);
    run_job(&alone[1]);
    pthread_t th[2];
    int started = 0;
    for (int i = 0; i < 2; i++) started += pthread_create(&th[i], NULL, run_job, &both[i]) == 0;
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    CHECK(started == 2 && alone[0].st == PD_OK && alone[1].st == PD_OK && both[0].st == PD_OK && both[1].st == PD_OK &&
              same_results(alone[0].r, both[0].r, 10) && same_results(alone[1].r, both[1].r, 10) &&
              memcmp(&both[0].r[9].loss, &both[1].r[9].loss, sizeof(double)) != 0,
          "two trainers on two threads at once each equal a trainer run alone");
}

/* opt->recompute: the same losses and trained model bit for bit as without
 * (its pipeline keeps per microbatch only what each stage received). */
static void test_recompute(void) {
    pd_step_result ra[STEPS], rb[STEPS];
    void *ba = NULL, *bb = NULL;
    size_t la = 0, lb = 0;
    pd_status sa = PD_ERR_INTERNAL, sb = PD_ERR_INTERNAL;
    for (int rc = 0; rc < 2; rc++) {
        pd_graph *g = load(MB);
        pd_plan *plan = g ? make_plan(g, 2) : NULL;
        pd_train_options tr;
        pd_trainer_options o = options("flush", M, &tr);
        o.recompute = rc;
        pd_trainer *t = NULL;
        pd_status st = plan ? pd_trainer_create(g, plan, &o, &t) : PD_ERR_INTERNAL;
        if (st == PD_OK) st = train(t, 0, STEPS, rc ? rb : ra);
        *(rc ? &sb : &sa) = st;
        finish(t, g, plan, rc ? &bb : &ba, rc ? &lb : &la);
    }
    CHECK(sa == PD_OK && sb == PD_OK && same_results(ra, rb, STEPS) && ba && bb && la == lb && !memcmp(ba, bb, la),
          "opt->recompute: %d steps' losses and the saved model (%zu bytes) equal bit for bit", STEPS, la);
    pd_buffer_free(ba);
    pd_buffer_free(bb);
}

/* pd_trainer_set_ring: the same rows through a ring of the fewest steps the
 * schedule allows, filled on demand from the digits (offset by `first`
 * rows, so a second call reads on), equal bit for bit to them given at once. */
typedef struct ring_src {
    float *x;
    int64_t *y;
    int64_t first, B;
    int steps, calls, bad; /* bad: fail at this step (-1: never) */
} ring_src;

static pd_status ring_fill(void *ctx, int64_t step, int slot) {
    ring_src *r = ctx;
    r->calls++;
    if (step == r->bad) return PD_ERR_IO;
    int64_t row = r->first + step * r->B;
    memcpy(r->x + (size_t)(slot * r->B * D), (const float *)X.data + row * D, sizeof(float) * (size_t)(r->B * D));
    memcpy(r->y + (size_t)(slot * r->B), (const int64_t *)Y.data + row, sizeof(int64_t) * (size_t)r->B);
    return PD_OK;
}

static void test_ring(void) {
    pd_step_result ra[STEPS + MORE], rb[STEPS + MORE];
    void *ba = NULL, *bb = NULL, *bc = NULL;
    size_t la = 0, lb = 0, lc = 0;
    pd_status sa = PD_ERR_INTERNAL, sb = PD_ERR_INTERNAL, sc = PD_ERR_INTERNAL;
    int ring = 0, calls = 0;
    for (int use = 0; use < 3; use++) { /* the rows at once; a ring; a ring without results */
        pd_graph *g = load(MB);
        pd_plan *plan = g ? make_plan(g, 2) : NULL;
        pd_train_options tr;
        pd_trainer_options o = options("flush", M, &tr);
        pd_trainer *t = NULL;
        pd_status st = plan ? pd_trainer_create(g, plan, &o, &t) : PD_ERR_INTERNAL;
        pd_step_result *r = use == 2 ? NULL : use ? rb : ra;
        if (st == PD_OK && !use) st = train(t, 0, STEPS, r);
        if (st == PD_OK && !use) st = train(t, STEPS * MB * M, MORE, r + STEPS);
        if (st == PD_OK && use) {
            ring = pd_trainer_ring_steps(t);
            ring_src src = {malloc(sizeof(float) * (size_t)(ring * MB * M * D)),
                            malloc(sizeof(int64_t) * (size_t)(ring * MB * M)), 0, MB * M, ring, 0, -1};
            pd_tensor x = X, y = Y;
            x.shape[0] = y.shape[0] = ring * MB * M;
            x.data = src.x;
            y.data = src.y;
            st = src.x && src.y ? pd_trainer_set_ring(t, ring, ring_fill, &src) : PD_ERR_NOMEM;
            if (st == PD_OK) st = pd_trainer_train(t, STEPS, &x, &y, r);
            src.first = STEPS * MB * M;
            if (st == PD_OK) st = pd_trainer_train(t, MORE, &x, &y, r ? r + STEPS : NULL);
            if (use == 1) calls = src.calls;
            free(src.x);
            free(src.y);
        }
        *(use == 2 ? &sc : use ? &sb : &sa) = st;
        finish(t, g, plan, use == 2 ? &bc : use ? &bb : &ba, use == 2 ? &lc : use ? &lb : &la);
    }
    CHECK(sa == PD_OK && sb == PD_OK && ring >= 2 && ring < STEPS && calls == STEPS + MORE &&
              same_results(ra, rb, STEPS + MORE) && ba && bb && la == lb && !memcmp(ba, bb, la),
          "set_ring: %d + %d steps through a ring of %d steps (%d fills) give the losses and the saved model (%zu "
          "bytes) of the rows at once, bit for bit: %s", STEPS, MORE, ring, calls, la,
          sb == PD_OK ? "ok" : pd_last_error());
    /* the ring reuses a step's slot once its losses are counted, results or not */
    CHECK(sc == PD_OK && bc && lc == la && !memcmp(ba, bc, la),
          "set_ring without results: %d + %d steps train to the same saved model: %s", STEPS, MORE,
          sc == PD_OK ? "ok" : pd_last_error());
    pd_buffer_free(ba);
    pd_buffer_free(bb);
    pd_buffer_free(bc);
}

/* What set_ring refuses, and a fill's error stopping the call. */
static void test_ring_errors(void) {
    pd_graph *g = load(MB);
    pd_plan *plan = g ? make_plan(g, 2) : NULL;
    pd_train_options tr;
    pd_trainer_options o = options("flush", M, &tr);
    pd_trainer *t = NULL;
    if (!plan || pd_trainer_create(g, plan, &o, &t) != PD_OK) {
        CHECK(0, "a trainer for the ring's errors: %s", pd_last_error());
        pd_plan_destroy(plan);
        pd_graph_destroy(g);
        return;
    }
    int ring = pd_trainer_ring_steps(t);
    CHECK(pd_trainer_set_ring(NULL, ring, ring_fill, NULL) == PD_ERR_INVALID && says("t is NULL"),
          "set_ring(NULL t): %s", pd_last_error());
    CHECK(pd_trainer_set_ring(t, ring, NULL, NULL) == PD_ERR_INVALID && says("pd_trainer_set_ring: steps is"),
          "set_ring(no fill): %s", pd_last_error());
    CHECK(pd_trainer_set_ring(t, ring - 1, ring_fill, NULL) == PD_ERR_INVALID && says("pd_trainer_set_ring") &&
              says("at least"), "set_ring(%d steps, one short): %s", ring - 1, pd_last_error());
    ring_src src = {malloc(sizeof(float) * (size_t)(ring * MB * M * D)),
                    malloc(sizeof(int64_t) * (size_t)(ring * MB * M)), 0, MB * M, ring, 0, 3};
    pd_tensor x = X, y = Y;
    x.shape[0] = y.shape[0] = ring * MB * M;
    x.data = src.x;
    y.data = src.y;
    CHECK(src.x && src.y && pd_trainer_set_ring(t, ring, ring_fill, &src) == PD_OK, "set_ring(%d steps): %s", ring,
          pd_last_error());
    x.shape[0] = ring * MB * M - 1;
    char want[128];
    snprintf(want, sizeof want, "%d steps of %d rows (the ring's) need %d", ring, MB * M, ring * MB * M);
    CHECK(pd_trainer_train(t, STEPS, &x, &y, NULL) == PD_ERR_SHAPE && says("inputs[0]") && says(want) && src.calls == 0,
          "train with a ring's rows one short is refused before any fill: %s", pd_last_error());
    x.shape[0] = ring * MB * M;
    CHECK(pd_trainer_train(t, STEPS, &x, &y, NULL) == PD_ERR_IO && src.calls >= 4,
          "a fill failing at step 3 stops the call with its status (%d fills): %s", src.calls, pd_last_error());
    free(src.x);
    free(src.y);
    pd_trainer_destroy(t);
    pd_plan_destroy(plan);
    pd_graph_destroy(g);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: test_trainer MODEL.onnx DIGITS_DIR WORKDIR\n");
        return 2;
    }
    model = argv[1];
    snprintf(workdir, sizeof workdir, "%s", argv[3]);
    char px[1200], py[1200];
    snprintf(px, sizeof px, "%s/train_x.npy", argv[2]);
    snprintf(py, sizeof py, "%s/train_y.npy", argv[2]);
    if (pd_npy_load(px, &X) != PD_OK || pd_npy_load(py, &Y) != PD_OK || X.dtype != PD_FLOAT || Y.dtype != PD_INT64 ||
        X.shape[0] < (STEPS + MORE) * MB * M) {
        fprintf(stderr, "test_trainer: the digits: %s\n", pd_last_error());
        return 1;
    }
    test_bad_arguments();
    test_flush_equals_session(0);
    test_flush_equals_session(1);
    test_pipedream_converges();
    test_checkpoint_resume("flush", M);
    test_checkpoint_resume("pipedream", 0);
    test_failure_then_resume();
    test_auto_every_formula();
    test_auto_options();
    test_auto_checkpoints();
    test_session_snapshot();
    test_two_trainers();
    test_recompute();
    test_ring();
    test_ring_errors();
    pd_tensor_free(&X);
    pd_tensor_free(&Y);
    return check_summary();
}
