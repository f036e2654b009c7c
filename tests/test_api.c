/* test_api.c - the embedding API as a program outside the library sees it:
 * only pipedream.h, linked against libpipedream (pipedream_dep, no private
 * headers).
 *
 *   - bad arguments: every call answers with a status (never a crash, an
 *     exit or an abort), a message that names the argument at fault, and
 *     out-parameters left untouched; destroy functions take NULL;
 *   - two sessions side by side in one process train independently: their
 *     losses, interleaved step by step, equal those of a session trained
 *     alone on the same data;
 *   - a trained model saved to memory and loaded back computes the same
 *     outputs, bit for bit, as the graph it was saved from (and the file
 *     save agrees with the memory save);
 *   - pd_last_error is per thread.
 *
 *   test_api MODEL.onnx WORKDIR   (the bundled examples/digits_mlp.onnx: x (N,64) -> y (N,10))
 */
#include "pipedream.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#define B 8
#define D 64
#define K 10

static const char *model;
static char workdir[1024];

/* true when the last error mentions `what` */
static int says(const char *what) { return strstr(pd_last_error(), what) != NULL; }

static pd_graph *load(void) {
    pd_load_options lo = PD_LOAD_OPTIONS_INIT;
    lo.batch = B;
    pd_graph *g = NULL;
    if (pd_graph_load_file(model, &lo, &g) != PD_OK) printf("# load %s: %s\n", model, pd_last_error());
    return g;
}

/* a deterministic batch: variant v of the inputs and labels */
static void batch(int v, float *x, int64_t *y) {
    uint32_t s = 12345u + 7919u * (uint32_t)v;
    for (int i = 0; i < B * D; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)(s >> 8) / 16777216.0f;
    }
    for (int i = 0; i < B; i++) y[i] = (i * 3 + v) % K;
}

static pd_session *session(pd_graph *g) {
    pd_train_options to = PD_TRAIN_OPTIONS_INIT;
    to.lr = 0.1;
    to.threads = 1;
    pd_session *s = NULL;
    if (pd_session_create(g, &to, &s) != PD_OK) printf("# session: %s\n", pd_last_error());
    return s;
}

static pd_status step(pd_session *s, int v, double *loss) {
    static float x[B * D];
    static int64_t y[B];
    batch(v, x, y);
    pd_tensor xt = {PD_FLOAT, 2, {B, D}, x}, yt = {PD_INT64, 1, {B}, y};
    pd_step_result r;
    pd_status st = pd_session_set_input(s, "x", &xt);
    if (st == PD_OK) st = pd_session_set_labels(s, &yt);
    if (st == PD_OK) st = pd_session_step(s, &r);
    if (st == PD_OK) *loss = r.loss;
    return st;
}

/* runs the graph on input variant v and copies the B x K output into out */
static pd_status infer(pd_graph *g, int v, float *out) {
    static float x[B * D];
    static int64_t y[B];
    batch(v, x, y);
    pd_tensor xt = {PD_FLOAT, 2, {B, D}, x}, yv;
    pd_engine_options eo = PD_ENGINE_OPTIONS_INIT;
    eo.threads = 1;
    pd_engine *e = NULL;
    pd_status st = pd_engine_create(g, &eo, &e);
    if (st == PD_OK) st = pd_engine_set_input(e, "x", &xt);
    if (st == PD_OK) st = pd_engine_run(e);
    if (st == PD_OK) st = pd_engine_get_output(e, "y", &yv);
    if (st == PD_OK) memcpy(out, yv.data, sizeof(float) * B * K);
    pd_engine_destroy(e);
    return st;
}

static void test_bad_arguments(void) {
    pd_graph *const G_SENTINEL = (pd_graph *)&check_count;
    pd_graph *g = G_SENTINEL;
    pd_load_options lo = PD_LOAD_OPTIONS_INIT;
    lo.batch = B;

    CHECK(pd_graph_load_file(NULL, &lo, &g) == PD_ERR_INVALID && says("path") && g == G_SENTINEL,
          "load_file(NULL path): invalid, names the path: %s", pd_last_error());
    CHECK(pd_graph_load_file(model, &lo, NULL) == PD_ERR_INVALID && says("out"),
          "load_file(NULL out): invalid, names out: %s", pd_last_error());
    CHECK(pd_graph_load_file("/no/such/model.onnx", &lo, &g) == PD_ERR_IO && says("/no/such/model.onnx") &&
              g == G_SENTINEL,
          "load_file(missing file): io error naming the file: %s", pd_last_error());
    static const char junk[] = "\x08\x07\x12\xff\xff\xff not a model";
    CHECK(pd_graph_load_memory(junk, sizeof junk, "junk-model", NULL, &lo, &g) == PD_ERR_PARSE && says("junk-model") &&
              g == G_SENTINEL,
          "load_memory(garbage): parse error naming the buffer: %s", pd_last_error());
    CHECK(pd_graph_load_memory(NULL, 10, NULL, NULL, &lo, &g) == PD_ERR_INVALID && says("buf") && g == G_SENTINEL,
          "load_memory(NULL buf): invalid, names buf: %s", pd_last_error());

    g = load();
    if (!g) {
        CHECK(0, "loading %s", model);
        return;
    }
    void *buf = (void *)&check_count;
    size_t len = 77;
    CHECK(pd_graph_save_memory(NULL, &buf, &len) == PD_ERR_INVALID && says("graph") && len == 77,
          "save_memory(NULL graph): names the graph: %s", pd_last_error());
    CHECK(pd_graph_save_memory(g, NULL, &len) == PD_ERR_INVALID && says("buf"), "save_memory(NULL buf): %s",
          pd_last_error());
    CHECK(pd_graph_save_memory(g, &buf, NULL) == PD_ERR_INVALID && says("len") && buf == (void *)&check_count,
          "save_memory(NULL len): %s", pd_last_error());
    CHECK(pd_graph_save(g, NULL) == PD_ERR_INVALID && says("path"), "save(NULL path): %s", pd_last_error());

    pd_value_info vi;
    pd_node_info ni;
    CHECK(pd_graph_value(g, NULL, &vi) == PD_ERR_INVALID && says("name"), "graph_value(NULL name): %s",
          pd_last_error());
    CHECK(pd_graph_value(g, "no-such-tensor", &vi) == PD_ERR_INVALID && says("no-such-tensor"),
          "graph_value(unknown): names it: %s", pd_last_error());
    CHECK(pd_graph_value(NULL, "x", &vi) == PD_ERR_INVALID && says("graph"), "graph_value(NULL graph): %s",
          pd_last_error());
    CHECK(pd_graph_node(g, 99, &ni) == PD_ERR_INVALID && says("99"), "graph_node(99): names the index: %s",
          pd_last_error());
    CHECK(pd_graph_input(g, 0, NULL) == PD_ERR_INVALID && says("out"), "graph_input(NULL out): %s", pd_last_error());
    CHECK(pd_graph_num_nodes(NULL) == 0 && pd_graph_param_bytes(NULL) == 0 && pd_graph_node_input(NULL, 0, 0) == NULL,
          "graph counts of NULL are 0");

    pd_engine *e = (pd_engine *)&check_count;
    CHECK(pd_engine_create(NULL, NULL, &e) == PD_ERR_INVALID && says("graph") && e == (pd_engine *)&check_count,
          "engine_create(NULL graph): %s", pd_last_error());
    pd_engine_options eo = PD_ENGINE_OPTIONS_INIT;
    eo.backend = "quantum";
    CHECK(pd_engine_create(g, &eo, &e) != PD_OK && says("quantum") && e == (pd_engine *)&check_count,
          "engine_create(unknown backend): names it: %s", pd_last_error());
    e = NULL;
    CHECK(pd_engine_create(g, NULL, &e) == PD_OK, "engine_create with default options");
    float x[B * D] = {0};
    pd_tensor xt = {PD_FLOAT, 2, {B, D}, x}, bad = {PD_FLOAT, 2, {B, D + 1}, x};
    CHECK(pd_engine_set_input(e, NULL, &xt) == PD_ERR_INVALID && says("name"), "engine_set_input(NULL name): %s",
          pd_last_error());
    CHECK(pd_engine_set_input(e, "x", NULL) == PD_ERR_INVALID && says("tensor"), "engine_set_input(NULL tensor): %s",
          pd_last_error());
    CHECK(pd_engine_set_input(e, "x", &bad) == PD_ERR_SHAPE && says("x"), "engine_set_input(wrong shape): %s",
          pd_last_error());
    pd_tensor out;
    CHECK(pd_engine_get_output(e, "nope", &out) == PD_ERR_INVALID && says("nope"), "engine_get_output(unknown): %s",
          pd_last_error());
    CHECK(pd_engine_run(NULL) == PD_ERR_INVALID && says("engine"), "engine_run(NULL): %s", pd_last_error());
    pd_engine_destroy(e);

    pd_session *s = (pd_session *)&check_count;
    CHECK(pd_session_create(NULL, NULL, &s) == PD_ERR_INVALID && says("graph") && s == (pd_session *)&check_count,
          "session_create(NULL graph): %s", pd_last_error());
    pd_train_options to = PD_TRAIN_OPTIONS_INIT;
    to.lr = -1;
    CHECK(pd_session_create(g, &to, &s) == PD_ERR_INVALID && says("learning rate") && s == (pd_session *)&check_count,
          "session_create(lr -1): names the learning rate: %s", pd_last_error());
    /* devices (docs/CUDA.md): the parser, and a CUDA session where there is no GPU or no backend */
    pd_train_options dv = PD_TRAIN_OPTIONS_INIT;
    CHECK(pd_train_options_set_device(&dv, "cuda:2", "bf16") == PD_OK && dv.device == PD_DEVICE_CUDA &&
              dv.device_index == 2 && dv.precision == PD_PRECISION_BF16,
          "train_options_set_device(cuda:2, bf16)");
    CHECK(pd_train_options_set_device(&dv, "cpu", NULL) == PD_OK && dv.device == PD_DEVICE_CPU &&
              dv.precision == PD_PRECISION_BF16,
          "train_options_set_device(cpu, NULL) keeps the precision");
    CHECK(pd_train_options_set_device(&dv, "cuda:x", NULL) == PD_ERR_INVALID && says("cuda:x") &&
              dv.device == PD_DEVICE_CPU,
          "train_options_set_device(cuda:x): names it, o untouched: %s", pd_last_error());
    CHECK(pd_train_options_set_device(&dv, NULL, "fp16") == PD_ERR_INVALID && says("fp16"),
          "train_options_set_device(precision fp16): %s", pd_last_error());
    if (pd_cuda_device_count() == 0) {
        dv.device = PD_DEVICE_CUDA;
        CHECK(pd_session_create(g, &dv, &s) == PD_ERR_UNSUPPORTED && says("device cuda") &&
                  s == (pd_session *)&check_count,
              "session_create(cuda) without a GPU or the backend: %s", pd_last_error());
    }
    s = session(g);
    if (s) {
        double loss;
        CHECK(pd_session_step(s, NULL) == PD_ERR_INVALID && says("'x'") && says("not been set"),
              "session_step before any input: names the input: %s", pd_last_error());
        CHECK(pd_session_set_input(s, NULL, &xt) == PD_ERR_INVALID && says("name"), "session_set_input(NULL name): %s",
              pd_last_error());
        CHECK(pd_session_set_input(s, "nope", &xt) == PD_ERR_INVALID && says("nope"),
              "session_set_input(unknown): names it: %s", pd_last_error());
        CHECK(pd_session_set_input(s, "x", &bad) == PD_ERR_SHAPE && says("'x'"), "session_set_input(wrong shape): %s",
              pd_last_error());
        CHECK(pd_session_set_labels(s, NULL) == PD_ERR_INVALID && says("labels"), "session_set_labels(NULL): %s",
              pd_last_error());
        pd_tensor nodata = {PD_INT64, 1, {B}, NULL};
        CHECK(pd_session_set_labels(s, &nodata) == PD_ERR_INVALID && says("data"),
              "session_set_labels(NULL data): %s", pd_last_error());
        const char *pname = "untouched";
        CHECK(pd_session_param(s, 99, &pname, NULL, NULL) == PD_ERR_INVALID && says("99") &&
                  strcmp(pname, "untouched") == 0,
              "session_param(99): names the index: %s", pd_last_error());
        pd_session *s2 = (pd_session *)&check_count;
        CHECK(pd_session_create(g, NULL, &s2) == PD_ERR_INVALID && says("another session") &&
                  s2 == (pd_session *)&check_count,
              "a second session on a graph being trained is refused: %s", pd_last_error());
        CHECK(step(s, 0, &loss) == PD_OK && isfinite(loss), "a step after the errors: loss %g", loss);
        CHECK(pd_session_step_count(s) == 1 && pd_session_batch(s) == B && pd_session_num_params(s) == 6,
              "session counts: 1 step, batch %d, 6 parameters", B);
        CHECK(pd_session_sync(s) == PD_OK, "session_sync on the CPU: nothing to do");
    }
    CHECK(pd_session_sync(NULL) == PD_ERR_INVALID && says("session"), "session_sync(NULL): %s", pd_last_error());
    CHECK(pd_session_step(NULL, NULL) == PD_ERR_INVALID && says("session"), "session_step(NULL): %s", pd_last_error());
    CHECK(pd_session_batch(NULL) == 0 && pd_session_num_params(NULL) == 0 && pd_session_step_count(NULL) == 0,
          "session counts of NULL are 0");
    pd_session_destroy(s);
    pd_graph_destroy(g);

    pd_tensor t = {PD_FLOAT, 1, {3}, (void *)&check_count};
    CHECK(pd_npy_load(NULL, &t) == PD_ERR_INVALID && says("path") && t.data == (void *)&check_count,
          "npy_load(NULL path): %s", pd_last_error());
    CHECK(pd_npy_load("/no/such.npy", &t) == PD_ERR_IO && says("/no/such.npy") && t.data == (void *)&check_count,
          "npy_load(missing): names the file: %s", pd_last_error());
    CHECK(pd_npy_save("/tmp/x.npy", NULL) == PD_ERR_INVALID && says("tensor"), "npy_save(NULL tensor): %s",
          pd_last_error());

    pd_profile *p = (pd_profile *)&check_count;
    CHECK(pd_profile_create(NULL, 3, NULL, 0, 1, &p) == PD_ERR_INVALID && says("nodes") &&
              p == (pd_profile *)&check_count,
          "profile_create(NULL nodes): %s", pd_last_error());
    CHECK(pd_profile_load(NULL, &p) == PD_ERR_INVALID && says("path"), "profile_load(NULL): %s", pd_last_error());
    CHECK(pd_profile_load("/no/such/profile.json", &p) == PD_ERR_IO && says("/no/such/profile.json") &&
              p == (pd_profile *)&check_count,
          "profile_load(missing): names the file: %s", pd_last_error());
    pd_plan *plan = (pd_plan *)&check_count;
    pd_plan_options po = PD_PLAN_OPTIONS_INIT;
    CHECK(pd_plan_create(NULL, &po, &plan) == PD_ERR_INVALID && plan == (pd_plan *)&check_count,
          "plan_create(NULL profile): %s", pd_last_error());
    {   /* the library names the options field, not a command-line flag (pdonnx maps it to --cost-model) */
        pd_profile_node_info nodes[2] = {{"a", "", 1, 1, 1, 0, 4, 4}, {"b", "", 1, 1, 1, 0, 4, 4}};
        int edges[2] = {0, 1};
        pd_profile *pp = NULL;
        pd_plan_options bad = PD_PLAN_OPTIONS_INIT;
        bad.cost_model = "nope";
        bad.workers = 2;
        CHECK(pd_profile_create(nodes, 2, edges, 1, 1, &pp) == PD_OK &&
                  pd_plan_create(pp, &bad, &plan) == PD_ERR_INVALID && says("opt->cost_model 'nope'") && !says("--"),
              "plan_create(unknown cost model) names the field: %s", pd_last_error());
        pd_profile_destroy(pp);
    }
    CHECK(pd_plan_load(NULL, &plan) == PD_ERR_INVALID && says("path"), "plan_load(NULL): %s", pd_last_error());
    CHECK(pd_plan_save(NULL, "/tmp/p.json") == PD_ERR_INVALID && says("plan"), "plan_save(NULL plan): %s",
          pd_last_error());
    pd_sim_result r;
    memset(&r, 0, sizeof r);
    CHECK(pd_simulate(NULL, NULL, &r) == PD_ERR_INVALID && says("plan") && r.stage == NULL,
          "simulate(NULL plan): %s", pd_last_error());
    pd_plan_info pi;
    CHECK(pd_plan_info_get(NULL, &pi) == PD_ERR_INVALID, "plan_info_get(NULL): %s", pd_last_error());
    CHECK(pd_plan_node_stage(NULL, 0, NULL) == -1 && pd_profile_num_nodes(NULL) == 0, "plan/profile queries of NULL");

    /* every destroy takes NULL, quietly: the last error stays the one before */
    CHECK(pd_graph_load_file("/nonexistent/every-destroy.onnx", NULL, NULL) == PD_ERR_INVALID, "load with NULL out: %s", pd_last_error());
    char before[256];
    snprintf(before, sizeof before, "%s", pd_last_error());
    pd_graph_destroy(NULL);
    pd_engine_destroy(NULL);
    pd_session_destroy(NULL);
    pd_profile_destroy(NULL);
    pd_plan_destroy(NULL);
    pd_sim_result_free(NULL);
    pd_tensor_free(NULL);
    pd_buffer_free(NULL);
    CHECK(before[0] && !strcmp(pd_last_error(), before),
          "every destroy and free accepts NULL without an error (last error still: %s)", pd_last_error());

    int named = 1;
    for (int k = PD_OK; k <= PD_ERR_INTERNAL; k++) named &= pd_status_name((pd_status)k) != NULL;
    CHECK(named && pd_dtype_size(PD_FLOAT) == 4 && strcmp(pd_dtype_name(PD_INT64), "int64") == 0,
          "status and dtype names");
}

static void test_two_sessions(void) {
    enum { STEPS = 4 };
    double alone[STEPS], a[STEPS], b[STEPS];
    /* the reference: one session, alone in the process */
    pd_graph *g = load();
    pd_session *s = g ? session(g) : NULL;
    int ok = s != NULL;
    for (int i = 0; ok && i < STEPS; i++) ok = step(s, 100 + i, &alone[i]) == PD_OK;
    pd_session_destroy(s);
    pd_graph_destroy(g);
    CHECK(ok, "a session alone: %d steps", STEPS);

    /* two sessions on two graphs, stepped in turn on different data */
    pd_graph *g1 = load(), *g2 = load();
    pd_session *s1 = g1 ? session(g1) : NULL, *s2 = g2 ? session(g2) : NULL;
    ok = ok && s1 && s2;
    for (int i = 0; ok && i < STEPS; i++) {
        ok = step(s1, 100 + i, &a[i]) == PD_OK;
        ok = ok && step(s2, 200 + i, &b[i]) == PD_OK;
    }
    CHECK(ok, "two sessions side by side: %d steps each", STEPS);
    int same = ok, differ = 0;
    for (int i = 0; ok && i < STEPS; i++) {
        same &= a[i] == alone[i];
        differ |= b[i] != a[i];
    }
    CHECK(same, "the first session's losses equal the lone session's (%.6f .. %.6f)", ok ? a[0] : 0,
          ok ? a[STEPS - 1] : 0);
    CHECK(differ, "the second session, on other data, has losses of its own");
    CHECK(ok && a[STEPS - 1] < a[0], "the loss goes down (%.6f -> %.6f)", ok ? a[0] : 0, ok ? a[STEPS - 1] : 0);
    pd_session_destroy(s1);
    pd_session_destroy(s2);
    pd_graph_destroy(g1);
    pd_graph_destroy(g2);
}

static void test_memory_round_trip(void) {
    static float before[B * K], trained[B * K], reloaded[B * K], from_file[B * K];
    pd_graph *g = load();
    if (!g) {
        CHECK(0, "load");
        return;
    }
    CHECK(infer(g, 7, before) == PD_OK, "outputs of the untrained model");
    pd_session *s = session(g);
    double loss = 0;
    int ok = s != NULL;
    for (int i = 0; ok && i < 3; i++) ok = step(s, i, &loss) == PD_OK;
    pd_session_destroy(s); /* the graph keeps the trained values */
    CHECK(ok, "3 training steps");
    CHECK(infer(g, 7, trained) == PD_OK && memcmp(before, trained, sizeof before) != 0,
          "training changed the outputs");

    void *buf = NULL;
    size_t len = 0;
    CHECK(pd_graph_save_memory(g, &buf, &len) == PD_OK && buf && len > 1000, "save_memory: %zu bytes", len);
    pd_load_options lo = PD_LOAD_OPTIONS_INIT;
    lo.batch = B;
    pd_graph *g2 = NULL;
    CHECK(buf && pd_graph_load_memory(buf, len, NULL, NULL, &lo, &g2) == PD_OK, "load_memory of the saved model: %s",
          g2 ? "ok" : pd_last_error());
    CHECK(g2 && pd_graph_num_nodes(g2) == pd_graph_num_nodes(g) && pd_graph_param_bytes(g2) == pd_graph_param_bytes(g),
          "the reloaded graph has the same nodes and parameters");
    CHECK(g2 && infer(g2, 7, reloaded) == PD_OK && memcmp(trained, reloaded, sizeof trained) == 0,
          "the reloaded model's outputs equal the trained model's, bit for bit");

    char path[1200];
    snprintf(path, sizeof path, "%s/api_trained.onnx", workdir);
    pd_graph *g3 = NULL;
    CHECK(pd_graph_save(g, path) == PD_OK && pd_graph_load_file(path, &lo, &g3) == PD_OK &&
              infer(g3, 7, from_file) == PD_OK && memcmp(trained, from_file, sizeof trained) == 0,
          "saved to a file, the same outputs: %s", g3 ? "ok" : pd_last_error());
    void *buf3 = NULL;
    size_t len3 = 0;
    CHECK(g3 && pd_graph_save_memory(g3, &buf3, &len3) == PD_OK && len3 == len && memcmp(buf, buf3, len) == 0,
          "the file's model saved to memory again gives the same bytes");
    remove(path);
    pd_buffer_free(buf);
    pd_buffer_free(buf3);
    pd_graph_destroy(g3);
    pd_graph_destroy(g2);
    pd_graph_destroy(g);
}

static void *other_thread(void *arg) {
    pd_graph *g = NULL;
    if (pd_graph_load_file("/no/such/other-thread.onnx", NULL, &g) == PD_OK) pd_graph_destroy(g);
    snprintf((char *)arg, 256, "%s", pd_last_error());
    return NULL;
}

static void test_errors_per_thread(void) {
    pd_graph *g = NULL;
    if (pd_graph_load_file("/no/such/main-thread.onnx", NULL, &g) == PD_OK) pd_graph_destroy(g);
    char theirs[256] = "";
    pthread_t t;
    int ok = pthread_create(&t, NULL, other_thread, theirs) == 0 && pthread_join(t, NULL) == 0;
    CHECK(ok && strstr(theirs, "other-thread") && says("main-thread"),
          "pd_last_error is per thread (main: %s | other: %s)", pd_last_error(), theirs);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: test_api MODEL.onnx WORKDIR\n");
        return 2;
    }
    model = argv[1];
    snprintf(workdir, sizeof workdir, "%s", argv[2]);
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", PD_VERSION_MAJOR, PD_VERSION_MINOR, PD_VERSION_PATCH);
    CHECK(!strcmp(pd_version(), want) && !strcmp(pd_version(), PD_VERSION_STRING),
          "pd_version() is the header's version: %s (header %s)", pd_version(), want);
    test_bad_arguments();
    test_two_sessions();
    test_memory_round_trip();
    test_errors_per_thread();
    return check_summary();
}
