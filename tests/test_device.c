/* test_device.c - the device interface (runtime/device.h) of each device
 * against closed-form values and against the CPU's own functions: copies,
 * memset, the gradients' sum of squares, scaling, the optimizer step, cross-entropy,
 * timers, events and a link between two contexts. The CPU always; CUDA on the simulated device when the
 * backend is built (the CPU's kernels behind the CUDA API, so bitwise); with
 * --gpu, CUDA on the first GPU (77 without one; within 1e-6, a GPU's
 * arithmetic may contract).
 * Then the session on a device of the test's own: the CPU with memory of its
 * own (so the session keeps device twins of its slabs and copies between
 * them, as on a GPU), kernels that add where the CPU's write fresh
 * gradients (as CUDA's), and Relu (and BatchNormalization, or not) refused
 * (so they fall back to the CPU with copies around them): training cnn_bn,
 * resnet and the digits MLP (cross-entropy) gives the CPU session's losses,
 * gradient norms, weights, evaluation and saved model bitwise. That runs on
 * every machine, a CUDA build or not; where the backend is built, the
 * session on the simulated device likewise (cnn_bn, the digits MLP). */
#include "../runtime/device.h"
#include "../runtime/loss.h"
#include "../runtime/optim.h"
#include "../runtime/session.h"
#ifdef PD_HAVE_CUDA
#include "../runtime/cuda/cuda.h"
#endif
#include "check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static bool same(const float *a, const float *b, int n, bool exact) {
    return exact ? memcmp(a, b, sizeof(float) * (size_t)n) == 0 : check_rel_err(a, b, n) <= 1e-6;
}

/* upload, copy, download, memset0; the sum of squares of {3, 0, 4, 0, 12} is 169; scale */
static void test_memory(const pd__dev *d, const char *name) {
    const float h[5] = {3, 0, 4, 0, 12};
    float back[5] = {0}, zero[5] = {0};
    void *a = NULL, *b = NULL, *pin = NULL;
    bool ok = d->i->alloc(d->c, sizeof h, &a) == PD_OK && d->i->alloc(d->c, sizeof h, &b) == PD_OK;
    ok = ok && d->i->upload(d->c, a, h, sizeof h) == PD_OK && d->i->copy(d->c, b, a, sizeof h) == PD_OK &&
         d->i->download(d->c, back, b, sizeof h) == PD_OK;
    CHECK(ok && memcmp(back, h, sizeof h) == 0, "%s: upload, device copy, download give the bytes back", name);
    double sq = 0;
    ok = d->i->sumsq(d->c, a, 5, &sq) == PD_OK;
    CHECK(ok && sq == 169.0, "%s: sumsq of {3,0,4,0,12} = %g (want 169)", name, sq);
    const float half[5] = {1.5f, 0, 2, 0, 6};
    ok = d->i->scale(d->c, a, 5, 0.5f) == PD_OK && d->i->download(d->c, back, a, sizeof h) == PD_OK;
    CHECK(ok && memcmp(back, half, sizeof half) == 0, "%s: scale by 0.5", name);
    ok = d->i->memset0(d->c, b, sizeof h) == PD_OK && d->i->download(d->c, back, b, sizeof h) == PD_OK;
    CHECK(ok && memcmp(back, zero, sizeof zero) == 0, "%s: memset0", name);
    /* a large one, in pieces over 2 threads on the CPU (pd__cpu_zero): every
     * byte of an odd length zeroed, the bytes around it untouched */
    enum { BIG = (1 << 20) + 13, PAD = 64 };
    unsigned char *big = malloc(BIG + 2 * PAD);
    void *dbig = NULL;
    pd__threads_use(2);
    ok = big && d->i->alloc(d->c, BIG + 2 * PAD, &dbig) == PD_OK;
    if (ok) memset(big, 0xab, BIG + 2 * PAD);
    ok = ok && d->i->upload(d->c, dbig, big, BIG + 2 * PAD) == PD_OK &&
         d->i->memset0(d->c, (char *)dbig + PAD, BIG) == PD_OK &&
         d->i->download(d->c, big, dbig, BIG + 2 * PAD) == PD_OK;
    size_t bad = 0;
    for (size_t i = 0; ok && i < BIG + 2 * PAD; i++) bad += big[i] != (i < PAD || i >= PAD + BIG ? 0xab : 0);
    CHECK(ok && bad == 0, "%s: memset0 of %d bytes at 2 threads zeroes them and nothing around (%zu wrong)", name,
          (int)BIG, bad);
    d->i->free(d->c, dbig);
    free(big);
    ok = d->i->host_alloc(d->c, 64, &pin) == PD_OK;
    CHECK(ok && (pin == NULL) == d->i->host_memory, "%s: host_alloc stages only where the device has its own memory",
          name);
    d->i->host_free(d->c, pin);
    d->i->free(d->c, a);
    d->i->free(d->c, b);
}

/* Adam, three steps, on the device and with runtime/optim.c on the host */
static void test_optim(const pd__dev *d, const char *name, bool exact) {
    enum { N = 37 };
    pd_train_options o = PD_TRAIN_OPTIONS_INIT;
    o.optimizer = PD_OPT_ADAMW;
    o.weight_decay = 0.1;
    float w[N], g[N], s0[N] = {0}, s1[N] = {0}, dw[N], ds0[N], ds1[N];
    for (int i = 0; i < N; i++) w[i] = 0.05f * (float)(i - 18), g[i] = 0.01f * (float)((i * 7) % 13 - 6);
    void *bw = NULL, *bg = NULL, *b0 = NULL, *b1 = NULL;
    size_t n = sizeof w;
    bool ok = d->i->alloc(d->c, n, &bw) == PD_OK && d->i->alloc(d->c, n, &bg) == PD_OK &&
              d->i->alloc(d->c, n, &b0) == PD_OK && d->i->alloc(d->c, n, &b1) == PD_OK;
    ok = ok && d->i->upload(d->c, bw, w, n) == PD_OK && d->i->upload(d->c, bg, g, n) == PD_OK &&
         d->i->memset0(d->c, b0, n) == PD_OK && d->i->memset0(d->c, b1, n) == PD_OK;
    for (int t = 1; t <= 3 && ok; t++) {
        ok = d->i->optim_step(d->c, &o, t, 1e-2, bw, bg, b0, b1, N) == PD_OK;
        pd__optim_step(&o, t, 1e-2, w, g, s0, s1, N);
    }
    ok = ok && d->i->sync(d->c) == PD_OK && d->i->download(d->c, dw, bw, n) == PD_OK &&
         d->i->download(d->c, ds0, b0, n) == PD_OK && d->i->download(d->c, ds1, b1, n) == PD_OK;
    CHECK(ok && same(dw, w, N, exact) && same(ds0, s0, N, exact) && same(ds1, s1, N, exact),
          "%s: three AdamW steps equal runtime/optim.c's%s", name, exact ? " bitwise" : "");
    d->i->free(d->c, bw), d->i->free(d->c, bg), d->i->free(d->c, b0), d->i->free(d->c, b1);
}

/* cross-entropy of 2 rows of 3 logits: rows {0, 0, 0} label 2 (loss ln 3)
 * and {ln 2, 0, 0} label 0 (softmax 1/2: loss ln 2); mean (ln 3 + ln 2) / 2;
 * the gradient (softmax - onehot) / 2 */
static void test_loss(const pd__dev *d, const char *name) {
    float z[6] = {0, 0, 0, (float)log(2.0), 0, 0}, dz[6];
    int64_t y[2] = {2, 0};
    pd_tensor lz = {PD_FLOAT, 2, {2, 3}, NULL}, ly = {PD_INT64, 1, {2}, NULL};
    void *bz = NULL, *by = NULL, *bd = NULL;
    bool ok = d->i->alloc(d->c, sizeof z, &bz) == PD_OK && d->i->alloc(d->c, sizeof y, &by) == PD_OK &&
              d->i->alloc(d->c, sizeof z, &bd) == PD_OK;
    ok = ok && d->i->upload(d->c, bz, z, sizeof z) == PD_OK && d->i->upload(d->c, by, y, sizeof y) == PD_OK;
    lz.data = bz, ly.data = by;
    double loss = 0;
    int64_t correct = 0, count = 0;
    ok = ok && d->i->cross_entropy(d->c, &lz, &ly, INT64_MAX, bd, &loss, &correct, &count) == PD_OK &&
         d->i->download(d->c, dz, bd, sizeof dz) == PD_OK;
    double want = (log(3.0) + log(2.0)) / 2, third = 1.0 / 3 / 2;
    const float wantd[6] = {(float)third, (float)third, (float)(third - 0.5), -0.25f, 0.125f, 0.125f};
    CHECK(ok && fabs(loss - want) < 1e-6 && count == 2 && correct == 1 && check_rel_err(dz, wantd, 6) < 1e-6,
          "%s: cross-entropy by hand (loss %.7f, want %.7f; correct %lld of %lld)", name, loss, want,
          (long long)correct, (long long)count);
    d->i->free(d->c, bz), d->i->free(d->c, by), d->i->free(d->c, bd);
}

/* runtime/loss.c at a language model's size (1024 positions of 1003
 * classes: the eight-lane sums' tail too) against log-sum-exp in double,
 * and the same bits on 1 and 2 threads (positions split over the threads,
 * their losses summed in order). */
static void test_loss_large(void) {
    enum { P = 1024, V = 1003 };
    float *z = malloc(sizeof(float) * P * V), *d1 = malloc(sizeof(float) * P * V), *d2 = malloc(sizeof(float) * P * V);
    int64_t *y = malloc(sizeof(int64_t) * P);
    uint64_t r = 12345;
    for (int64_t i = 0; i < (int64_t)P * V; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        z[i] = (float)((double)(r >> 11) / 9007199254740992.0 * 8 - 4);
    }
    for (int p = 0; p < P; p++) y[p] = (p * 7919) % V;
    y[5] = 0, z[5 * V] = 10; /* a position whose first class is its label and its maximum */
    double want = 0, gerr = 0;
    pd_tensor lz = {PD_FLOAT, 2, {P, V}, z}, ly = {PD_INT64, 1, {P}, y};
    double l1 = 0, l2 = 0;
    int64_t c1 = 0, c2 = 0, n1 = 0, n2 = 0, cw = 0;
#ifdef _OPENMP
    int was = omp_get_max_threads();
    omp_set_num_threads(1);
#endif
    bool ok = pd__loss_cross_entropy(&lz, &ly, INT64_MAX, d1, &l1, &c1, &n1) == PD_OK;
#ifdef _OPENMP
    omp_set_num_threads(2);
#endif
    ok = ok && pd__loss_cross_entropy(&lz, &ly, INT64_MAX, d2, &l2, &c2, &n2) == PD_OK;
#ifdef _OPENMP
    omp_set_num_threads(was);
#endif
    for (int p = 0; p < P; p++) {
        const float *zp = z + (int64_t)p * V;
        double mx = zp[0], se = 0;
        int64_t arg = 0;
        for (int v = 1; v < V; v++)
            if (zp[v] > mx) mx = zp[v], arg = v;
        for (int v = 0; v < V; v++) se += exp(zp[v] - mx);
        want += log(se) + mx - zp[y[p]];
        cw += arg == y[p];
        for (int v = 0; v < V; v++) {
            double g = (exp(zp[v] - mx) / se - (v == y[p])) / P;
            gerr = fmax(gerr, fabs(d1[(int64_t)p * V + v] - g) / (1e-3 / P + fabs(g)));
        }
    }
    want /= P;
    CHECK(ok && fabs(l1 - want) < 1e-6 * fabs(want) && gerr < 1e-4 && c1 == cw && n1 == P,
          "cross-entropy of %d positions x %d classes: loss %.9f against %.9f in double, gradient max rel err %.2g, "
          "%lld of %lld correct (want %lld)",
          P, V, l1, want, gerr, (long long)c1, (long long)n1, (long long)cw);
    CHECK(ok && l1 == l2 && c1 == c2 && n1 == n2 && memcmp(d1, d2, sizeof(float) * P * V) == 0,
          "cross-entropy: the same bits on 1 and 2 threads (loss %.17g and %.17g)", l1, l2);
    free(z), free(d1), free(d2), free(y);
}

static void test_order(const pd__dev *d, const char *name) {
    void *ev = NULL;
    double ms = -1;
    bool ok = d->i->event_create(d->c, &ev) == PD_OK && d->i->event_record(d->c, ev) == PD_OK &&
              d->i->event_wait(d->c, ev) == PD_OK && d->i->timer_start(d->c) == PD_OK &&
              d->i->timer_stop(d->c, &ms) == PD_OK && d->i->sync(d->c) == PD_OK;
    CHECK(ok && ms >= 0, "%s: an event recorded and waited on; a timer (%g ms)", name, ms);
    if (ev) d->i->event_destroy(ev);
}

/* A pipeline link (runtime/pipeline_devmem.c): context a's bytes into a
 * buffer of context b's device outside its allocator (copy_peer on a's
 * stream), an event recorded by a that b's stream waits for, then b copies
 * them into its own memory: b gets a's bytes. */
static void test_link(const pd__dev *a, const char *name) {
    const float h[5] = {1, -2, 3.5f, 1e-30f, 7};
    float back[5] = {0};
    pd__dev b = {a->i, NULL};
    void *src = NULL, *buf = NULL, *dst = NULL, *ev = NULL;
    bool ok = a->i->open(0, PD_PRECISION_FP32, &b.c) == PD_OK;
    ok = ok && a->i->alloc(a->c, sizeof h, &src) == PD_OK && b.i->alloc_shared(b.c, sizeof h, &buf) == PD_OK &&
         b.i->alloc(b.c, sizeof h, &dst) == PD_OK && a->i->event_create(a->c, &ev) == PD_OK;
    ok = ok && a->i->upload(a->c, src, h, sizeof h) == PD_OK && a->i->copy_peer(a->c, buf, b.c, src, sizeof h) == PD_OK &&
         a->i->event_record(a->c, ev) == PD_OK && b.i->event_wait(b.c, ev) == PD_OK &&
         b.i->copy(b.c, dst, buf, sizeof h) == PD_OK && b.i->download(b.c, back, dst, sizeof h) == PD_OK;
    CHECK(ok && memcmp(back, h, sizeof h) == 0, "%s: copy_peer into another context's shared buffer, ordered by an "
          "event, gives the bytes back", name);
    if (ev) a->i->event_destroy(ev);
    a->i->free(a->c, src);
    if (b.c) {
        b.i->free_shared(b.c, buf);
        b.i->free(b.c, dst);
        b.i->close(b.c);
    }
}

static void test_device(const pd__dev_i *di, const char *name, bool exact) {
    pd__dev d = {di, NULL};
    pd_status st = di->open(0, PD_PRECISION_FP32, &d.c);
    CHECK(st == PD_OK, "%s: open (%s)", name, st == PD_OK ? "ok" : pd_last_error());
    if (st != PD_OK) return;
    test_memory(&d, name);
    test_optim(&d, name, exact);
    test_loss(&d, name);
    test_order(&d, name);
    test_link(&d, name);
    di->close(d.c);
}

/* the test's devices: refuse these, which run on the CPU with copies */
static bool twin_supports(const pd_graph *g, const pd__node *n) {
    (void)g;
    return n->op != PD_OP_RELU && n->op != PD_OP_BATCH_NORM;
}
static bool twin_supports_bn(const pd_graph *g, const pd__node *n) { /* BatchNorm's statistics on the device */
    (void)g;
    return n->op != PD_OP_RELU;
}

typedef struct run_out {
    double loss[6], gnorm[6], eval;
    float params[20000];
    int64_t nparams;
    void *model; /* the graph saved after pd_session_sync: BatchNorm's statistics too */
    size_t model_len;
} run_out;

/* AdamW with clipping, 6 steps on the first `batch` rows of x, y; dev NULL: the CPU session */
static pd_status train(const char *model, const char *xp, const char *yp, int64_t batch, const pd__dev_i *dev,
                       run_out *r) {
    pd_tensor X = {0}, Y = {0};
    pd_graph *g = NULL;
    pd_session *s = NULL;
    pd_load_options lo = PD_LOAD_OPTIONS_INIT;
    lo.batch = batch;
    pd_train_options o = PD_TRAIN_OPTIONS_INIT;
    o.optimizer = PD_OPT_ADAMW;
    o.lr = 0.01;
    o.clip_grad_norm = 0.05;
    o.threads = 1;
    pd_value_info in;
    pd_status st = pd_npy_load(xp, &X);
    if (st == PD_OK) st = pd_npy_load(yp, &Y);
    if (st == PD_OK) st = pd_graph_load_file(model, &lo, &g);
    if (st == PD_OK) st = pd__session_create_on(g, &o, dev, &s);
    if (st == PD_OK) st = pd_graph_input(g, 0, &in);
    pd_tensor bx = X, by = Y;
    bx.shape[0] = by.shape[0] = batch;
    for (int k = 0; k < 6 && st == PD_OK; k++) {
        pd_step_result res;
        st = pd_session_set_input(s, in.name, &bx);
        if (st == PD_OK) st = pd_session_set_labels(s, &by);
        if (st == PD_OK) st = pd_session_step(s, &res);
        r->loss[k] = res.loss;
        r->gnorm[k] = res.grad_norm;
    }
    pd_step_result ev;
    if (st == PD_OK) st = pd_session_eval(s, &ev);
    r->eval = ev.loss;
    r->nparams = 0;
    for (int i = 0; st == PD_OK && i < pd_session_num_params(s); i++) {
        pd_tensor v;
        st = pd_session_param(s, i, NULL, &v, NULL);
        int64_t n = pd_tensor_numel(&v);
        if (st == PD_OK && r->nparams + n > (int64_t)(sizeof r->params / sizeof r->params[0]))
            st = pd__err(PD_ERR_INVALID, "test_device: %s has more parameters than the test keeps", model);
        if (st == PD_OK) memcpy(r->params + r->nparams, v.data, sizeof(float) * (size_t)n);
        r->nparams += n;
    }
    if (st == PD_OK) st = pd_session_sync(s);
    if (st == PD_OK) st = pd_graph_save_memory(g, &r->model, &r->model_len);
    pd_session_destroy(s);
    pd_graph_destroy(g);
    pd_tensor_free(&X);
    pd_tensor_free(&Y);
    return st;
}

/* the session on dev (what: how the test says it) against the CPU session:
 * every step's loss and gradient norm (clipped at 0.05: every step here),
 * the weights, evaluation and saved model, bitwise */
static void test_dev_session(const char *name, const char *model, const char *xp, const char *yp, int64_t batch,
                             const pd__dev_i *dev, const char *what) {
    static run_out a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    pd_status sa = train(model, xp, yp, batch, NULL, &a), sb = train(model, xp, yp, batch, dev, &b);
    int clipped = 0;
    for (int k = 0; k < 6; k++) clipped += a.gnorm[k] > 0.05;
    CHECK(sa == PD_OK && sb == PD_OK && a.nparams == b.nparams && a.nparams > 0 &&
              memcmp(a.loss, b.loss, sizeof a.loss) == 0 && memcmp(a.gnorm, b.gnorm, sizeof a.gnorm) == 0 &&
              clipped > 0 && a.eval == b.eval && memcmp(a.params, b.params, sizeof(float) * (size_t)a.nparams) == 0 &&
              a.loss[5] != a.loss[0] && a.model_len == b.model_len && memcmp(a.model, b.model, a.model_len) == 0,
          "%s: 6 steps on %s: the CPU's losses (%.9g .. %.9g), gradient norms (%d of 6 clipped), %lld weights, "
          "evaluation (%.9g) and saved model bitwise%s%s",
          name, what, a.loss[0], a.loss[5], clipped, (long long)a.nparams, a.eval, sa || sb ? ": " : "",
          sa || sb ? pd_last_error() : "");
    pd_buffer_free(a.model);
    pd_buffer_free(b.model);
}

static void test_twin_session(const char *name, const char *model, const char *xp, const char *yp, int64_t batch,
                              bool bn_on_device) {
    pd__dev_i twin = pd__dev_cpu;
    twin.name = "cpu-twin";
    twin.host_memory = false;
    twin.writes_fresh = false;
    twin.supports_op = bn_on_device ? twin_supports_bn : twin_supports;
    test_dev_session(name, model, xp, yp, batch, &twin,
                     bn_on_device ? "a device with its own memory, Relu refused"
                                  : "a device with its own memory, Relu and BatchNormalization refused");
}

static void test_twin_sessions(const char *fx, const char *root) {
    char m[1024], x[1024], y[1024];
    const char *fixtures[] = {"cnn_bn", "resnet"}; /* their y is the eval-mode output: BatchNorm in training mode makes a loss */
    for (int i = 0; i < 2; i++) {
        snprintf(m, sizeof m, "%s/%s/model.onnx", fx, fixtures[i]);
        snprintf(x, sizeof x, "%s/%s/x.npy", fx, fixtures[i]);
        snprintf(y, sizeof y, "%s/%s/y.npy", fx, fixtures[i]);
        test_twin_session(fixtures[i], m, x, y, 4, false);
        test_twin_session(fixtures[i], m, x, y, 4, true);
    }
    snprintf(m, sizeof m, "%s/examples/digits_mlp.onnx", root);
    snprintf(x, sizeof x, "%s/examples/digits/train_x.npy", root);
    snprintf(y, sizeof y, "%s/examples/digits/train_y.npy", root);
    test_twin_session("digits_mlp (cross-entropy)", m, x, y, 32, false);
}

#ifdef PD_HAVE_CUDA
/* the session on the simulated device (pd__cuda_use_sim first): the CPU's
 * kernels and sums behind the CUDA API, so the CPU session's bits */
static void test_sim_sessions(const char *fx, const char *root) {
    char m[1024], x[1024], y[1024];
    snprintf(m, sizeof m, "%s/cnn_bn/model.onnx", fx);
    snprintf(x, sizeof x, "%s/cnn_bn/x.npy", fx);
    snprintf(y, sizeof y, "%s/cnn_bn/y.npy", fx);
    test_dev_session("cnn_bn", m, x, y, 4, &pd__dev_cuda, "the simulated device");
    snprintf(m, sizeof m, "%s/examples/digits_mlp.onnx", root);
    snprintf(x, sizeof x, "%s/examples/digits/train_x.npy", root);
    snprintf(y, sizeof y, "%s/examples/digits/train_y.npy", root);
    test_dev_session("digits_mlp (cross-entropy)", m, x, y, 32, &pd__dev_cuda, "the simulated device");
}
#endif

/* test_device [--gpu] | test_device FIXTURES ROOT */
int main(int argc, char **argv) {
    bool gpu = argc > 1 && strcmp(argv[1], "--gpu") == 0;
    if (argc > 2 && !gpu) test_twin_sessions(argv[1], argv[2]);
    if (!gpu) test_loss_large();
#ifdef PD_HAVE_CUDA
    if (gpu) {
        if (pd__cuda_device_count() == 0) {
            printf("SKIP no CUDA GPU\n");
            return 77;
        }
        test_device(&pd__dev_cuda, "cuda", false);
        return check_summary();
    }
    test_device(&pd__dev_cpu, "cpu", true);
    CHECK(pd__cuda_use_sim(1) == PD_OK, "the simulated device");
    test_device(&pd__dev_cuda, "cuda (simulated)", true);
    if (argc > 2) test_sim_sessions(argv[1], argv[2]);
#else
    if (gpu) {
        printf("SKIP built without the CUDA backend\n");
        return 77;
    }
    test_device(&pd__dev_cpu, "cpu", true);
#endif
    return check_summary();
}
