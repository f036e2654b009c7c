/* embed.c - pdonnx embedded in a C program, through pipedream.h only.
 *
 * Loads the bundled MLP (64 -> 128 -> 64 -> 10), trains it for a few steps on
 * data made here in memory (no files: each of 10 classes is a fixed random
 * 64-pixel pattern plus noise), saves the trained model into a buffer,
 * loads it back from that buffer and checks that the reloaded model gives
 * the same loss as the one it was saved from.
 *
 *     cc embed.c $(pkg-config --cflags --libs pipedream) -o embed
 *     ./embed ../digits_mlp.onnx
 */
#include <pipedream.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define BATCH 32
#define PIXELS 64
#define CLASSES 10
#define STEPS 30

/* A small deterministic generator (xorshift64*), uniform in [0, 1). */
static double uniform(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return (double)((*s * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

/* Minibatch `step`: BATCH images of random classes, each its class's pattern plus noise. */
static void make_batch(const float *patterns, uint64_t *rng, float *x, int64_t *y) {
    for (int i = 0; i < BATCH; i++) {
        int c = (int)(uniform(rng) * CLASSES);
        y[i] = c;
        for (int j = 0; j < PIXELS; j++) x[i * PIXELS + j] = patterns[c * PIXELS + j] + 0.3f * (float)uniform(rng);
    }
}

static int fail(const char *what) {
    fprintf(stderr, "embed: %s: %s\n", what, pd_last_error());
    return 1;
}

int main(int argc, char **argv) {
    const char *model = argc > 1 ? argv[1] : "../digits_mlp.onnx";
    static float patterns[CLASSES * PIXELS], x[BATCH * PIXELS];
    static int64_t y[BATCH];
    uint64_t rng = 88172645463325252ull;
    for (int i = 0; i < CLASSES * PIXELS; i++) patterns[i] = uniform(&rng) < 0.3 ? 1.0f : 0.0f;

    /* views of our arrays: the session copies what it is given */
    pd_tensor xt = {PD_FLOAT, 2, {BATCH, PIXELS}, x};
    pd_tensor yt = {PD_INT64, 1, {BATCH}, y};

    pd_load_options lo = PD_LOAD_OPTIONS_INIT;
    lo.batch = BATCH; /* binds the model's symbolic batch dimension */
    pd_graph *g = NULL;
    if (pd_graph_load_file(model, &lo, &g) != PD_OK) return fail("load");
    printf("loaded %s: %d nodes, %lld parameter bytes\n", model, pd_graph_num_nodes(g),
           (long long)pd_graph_param_bytes(g));

    pd_train_options to = PD_TRAIN_OPTIONS_INIT; /* softmax cross-entropy for int64 labels */
    to.optimizer = PD_OPT_MOMENTUM;
    to.lr = 0.05;
    to.threads = 1;
    pd_session *s = NULL;
    if (pd_session_create(g, &to, &s) != PD_OK) return fail("session");
    double first = 0, last = 0;
    for (int step = 0; step < STEPS; step++) {
        make_batch(patterns, &rng, x, y);
        pd_step_result r;
        if (pd_session_set_input(s, "x", &xt) != PD_OK || pd_session_set_labels(s, &yt) != PD_OK ||
            pd_session_step(s, &r) != PD_OK)
            return fail("step");
        if (step == 0) first = r.loss;
        last = r.loss;
        if (step % 5 == 0 || step == STEPS - 1)
            printf("step %2d  loss %.4f  accuracy %3.0f%%\n", step, r.loss, 100.0 * (double)r.correct / (double)r.count);
    }

    /* one held-out batch, evaluated by the trained model ... */
    make_batch(patterns, &rng, x, y);
    pd_step_result trained;
    if (pd_session_set_input(s, "x", &xt) != PD_OK || pd_session_set_labels(s, &yt) != PD_OK ||
        pd_session_eval(s, &trained) != PD_OK)
        return fail("eval");

    /* ... and by the same model saved to memory and loaded back */
    void *buf = NULL;
    size_t len = 0;
    if (pd_graph_save_memory(g, &buf, &len) != PD_OK) return fail("save");
    pd_graph *g2 = NULL;
    pd_status st = pd_graph_load_memory(buf, len, "trained", NULL, &lo, &g2);
    pd_buffer_free(buf);
    if (st != PD_OK) return fail("reload");
    pd_session *s2 = NULL;
    pd_step_result reloaded;
    if (pd_session_create(g2, &to, &s2) != PD_OK || pd_session_set_input(s2, "x", &xt) != PD_OK ||
        pd_session_set_labels(s2, &yt) != PD_OK || pd_session_eval(s2, &reloaded) != PD_OK)
        return fail("eval of the reloaded model");
    printf("saved to memory (%zu bytes) and reloaded: loss %.6f, trained %.6f\n", len, reloaded.loss, trained.loss);

    pd_session_destroy(s2);
    pd_graph_destroy(g2);
    pd_session_destroy(s);
    pd_graph_destroy(g);

    int ok = last < 0.5 * first && fabs(reloaded.loss - trained.loss) <= 1e-6 * (1 + fabs(trained.loss));
    printf("%s: loss %.4f -> %.4f\n", ok ? "OK" : "NOT OK", first, last);
    return ok ? 0 : 1;
}
