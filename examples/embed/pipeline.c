/* pipeline.c - pipeline training with checkpoints, embedded through pipedream.h.
 *
 * Trains the bundled MLP (64 -> 128 -> 64 -> 10) as a 2-stage pipeline (1F1B,
 * 4 microbatches of 8 rows per step) on data made here in memory, in two
 * calls of 20 steps, checkpointing every 10 steps into a folder:
 *
 *   1. a first trainer does the first call, then the program "stops" (the
 *      trainer is destroyed, as a crash would lose it);
 *   2. a second trainer, on a freshly loaded model, resumes from the newest
 *      checkpoint and does the second call;
 *   3. a third trainer does both calls without stopping.
 *
 * The resumed model must equal the uninterrupted one byte for byte.
 *
 *     cc pipeline.c $(pkg-config --cflags --libs pipedream) -o pipeline
 *     ./pipeline ../digits_mlp.onnx [CHECKPOINT_DIR]
 */
#include <pipedream.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MICRO 8   /* rows per microbatch: the batch the model is loaded with */
#define MICROS 4  /* microbatches per step */
#define PIXELS 64
#define CLASSES 10
#define CALL 20   /* steps per pd_trainer_train call */
#define STEPS (2 * CALL)
#define ROWS (STEPS * MICROS * MICRO)

static float x[ROWS * PIXELS];
static int64_t y[ROWS];

static double uniform(uint64_t *s) { /* xorshift64*, uniform in [0, 1) */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return (double)((*s * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

/* Every step's rows, made once: each class a fixed 64-pixel pattern plus noise. */
static void make_data(void) {
    static float patterns[CLASSES * PIXELS];
    uint64_t rng = 88172645463325252ull;
    for (int i = 0; i < CLASSES * PIXELS; i++) patterns[i] = uniform(&rng) < 0.3 ? 1.0f : 0.0f;
    for (int i = 0; i < ROWS; i++) {
        int c = (int)(uniform(&rng) * CLASSES);
        y[i] = c;
        for (int j = 0; j < PIXELS; j++) x[i * PIXELS + j] = patterns[c * PIXELS + j] + 0.3f * (float)uniform(&rng);
    }
}

static const char *model;
static const char *ckpt_dir;

/* A trainer on a freshly loaded model: a plan of 2 stages from the model's
 * measured costs, the flush (1F1B) schedule, checkpoints when ckpt is set. */
static pd_status start(const char *ckpt, pd_graph **g, pd_plan **plan, pd_trainer **t) {
    pd_load_options lo = PD_LOAD_OPTIONS_INIT;
    lo.batch = MICRO; /* a pipeline's graph takes one microbatch */
    pd_profile_options pro = PD_PROFILE_OPTIONS_INIT;
    pro.threads = 1;
    pd_plan_options po = PD_PLAN_OPTIONS_INIT;
    po.workers = 2;
    po.straight = 1; /* one worker per stage, no replicas */
    po.microbatches = MICROS;
    po.algo = "uniform"; /* even cuts: the same plan every time this runs */
    pd_train_options tr = PD_TRAIN_OPTIONS_INIT;
    tr.optimizer = PD_OPT_MOMENTUM;
    tr.lr = 0.05;
    tr.threads = 1;
    pd_trainer_options to = PD_TRAINER_OPTIONS_INIT;
    to.train = &tr;
    to.schedule = "flush";
    to.microbatches = MICROS;
    to.checkpoint_dir = ckpt;
    to.checkpoint_every = ckpt ? 10 : 0;
    to.checkpoint_keep = 2;
    pd_profile *prof = NULL;
    *g = NULL;
    *plan = NULL;
    *t = NULL;
    pd_status st = pd_graph_load_file(model, &lo, g);
    if (st == PD_OK) st = pd_profile_measure(*g, &pro, &prof);
    if (st == PD_OK) st = pd_plan_create(prof, &po, plan);
    pd_profile_destroy(prof);
    if (st == PD_OK) st = pd_trainer_create(*g, *plan, &to, t);
    return st;
}

/* Call k (0 or 1): its steps' rows, straight from our arrays. */
static pd_status call(pd_trainer *t, int k, pd_step_result *r) {
    int64_t first = (int64_t)k * CALL * MICROS * MICRO;
    pd_tensor xt = {PD_FLOAT, 2, {CALL * MICROS * MICRO, PIXELS}, x + first * PIXELS};
    pd_tensor yt = {PD_INT64, 1, {CALL * MICROS * MICRO}, y + first};
    pd_status st = pd_trainer_train(t, CALL, &xt, &yt, r);
    for (int i = 0; st == PD_OK && i < CALL; i += 5)
        printf("  step %2d  loss %.4f  lr %.3f  grad norm %.3f\n", k * CALL + i + 1, r[i].loss, r[i].lr, r[i].grad_norm);
    return st;
}

/* Destroys the trainer, then saves the trained graph into *buf. */
static pd_status finish(pd_graph *g, pd_plan *plan, pd_trainer *t, void **buf, size_t *len) {
    pd_trainer_destroy(t); /* the trained weights go back into g */
    pd_status st = buf ? pd_graph_save_memory(g, buf, len) : PD_OK;
    pd_plan_destroy(plan);
    pd_graph_destroy(g);
    return st;
}

static int fail(const char *what) {
    fprintf(stderr, "pipeline: %s: %s\n", what, pd_last_error());
    return 1;
}

int main(int argc, char **argv) {
    model = argc > 1 ? argv[1] : "../digits_mlp.onnx";
    ckpt_dir = argc > 2 ? argv[2] : "pipeline-checkpoints";
    make_data();
    pd_graph *g;
    pd_plan *plan;
    pd_trainer *t;
    pd_step_result r[CALL];
    double first_loss = 0, last_loss = 0;

    /* 1. the first call, with checkpoints; then the trainer is gone */
    if (start(ckpt_dir, &g, &plan, &t) != PD_OK) return fail("start");
    printf("%d stages, %lld rows per step, checkpoints in %s\n", pd_trainer_stages(t), (long long)pd_trainer_batch(t),
           ckpt_dir);
    if (call(t, 0, r) != PD_OK) return fail("first call");
    first_loss = r[0].loss;
    finish(g, plan, t, NULL, NULL);
    printf("stopped after step %d\n", CALL);

    /* 2. a new trainer resumes where the checkpoints end */
    pd_resume_info ri;
    if (start(ckpt_dir, &g, &plan, &t) != PD_OK) return fail("restart");
    if (pd_trainer_resume(t, ckpt_dir, &ri) != PD_OK) return fail("resume");
    printf("resumed at step %lld\n", (long long)ri.step);
    if (ri.step != CALL) {
        fprintf(stderr, "pipeline: %s holds checkpoints of another run: give an empty folder\n", ckpt_dir);
        return 1;
    }
    if (call(t, 1, r) != PD_OK) return fail("second call");
    last_loss = r[CALL - 1].loss;
    void *resumed = NULL, *straight = NULL;
    size_t rlen = 0, slen = 0;
    if (finish(g, plan, t, &resumed, &rlen) != PD_OK) return fail("save");

    /* 3. the same two calls without stopping */
    printf("uninterrupted:\n");
    if (start(NULL, &g, &plan, &t) != PD_OK) return fail("start");
    if (call(t, 0, r) != PD_OK || call(t, 1, r) != PD_OK) return fail("train");
    if (finish(g, plan, t, &straight, &slen) != PD_OK) return fail("save");

    int same = rlen == slen && memcmp(resumed, straight, rlen) == 0;
    int ok = same && last_loss < 0.5 * first_loss;
    printf("the resumed model (%zu bytes) %s the uninterrupted one\n", rlen, same ? "equals" : "DIFFERS FROM");
    printf("%s: loss %.4f -> %.4f\n", ok ? "OK" : "NOT OK", first_loss, last_loss);
    pd_buffer_free(resumed);
    pd_buffer_free(straight);
    return ok ? 0 : 1;
}
