/* test_device.c - the device interface (runtime/device.h) of each device
 * against closed-form values and against the CPU's own functions: copies,
 * memset, the gradient norm, scaling, the optimizer step, cross-entropy,
 * timers and events. The CPU always; CUDA on the simulated device when the
 * backend is built (the CPU's kernels behind the CUDA API, so bitwise); with
 * --gpu, CUDA on the first GPU (77 without one; within 1e-6, a GPU's
 * arithmetic may contract).
 * The nodes' forward and backward run through the interface in every step
 * of the session suites (train, devsim-train), bitwise against the run
 * before the interface existed. */
#include "../runtime/device.h"
#include "../runtime/loss.h"
#include "../runtime/optim.h"
#ifdef PD_HAVE_CUDA
#include "../runtime/cuda/cuda.h"
#endif
#include "check.h"

#include <math.h>
#include <string.h>

static bool same(const float *a, const float *b, int n, bool exact) {
    return exact ? memcmp(a, b, sizeof(float) * (size_t)n) == 0 : check_rel_err(a, b, n) <= 1e-6;
}

/* upload, copy, download, memset0; the norm of {3, 0, 4, 0, 12} is 13; scale */
static void test_memory(const pd__dev *d, const char *name) {
    const float h[5] = {3, 0, 4, 0, 12};
    float back[5] = {0}, zero[5] = {0};
    void *a = NULL, *b = NULL, *pin = NULL;
    bool ok = d->i->alloc(d->c, sizeof h, &a) == PD_OK && d->i->alloc(d->c, sizeof h, &b) == PD_OK;
    ok = ok && d->i->upload(d->c, a, h, sizeof h) == PD_OK && d->i->copy(d->c, b, a, sizeof h) == PD_OK &&
         d->i->download(d->c, back, b, sizeof h) == PD_OK;
    CHECK(ok && memcmp(back, h, sizeof h) == 0, "%s: upload, device copy, download give the bytes back", name);
    double norm = 0;
    ok = d->i->grad_norm(d->c, a, 5, &norm) == PD_OK;
    CHECK(ok && norm == 13.0, "%s: grad_norm of {3,0,4,0,12} = %g (want 13)", name, norm);
    const float half[5] = {1.5f, 0, 2, 0, 6};
    ok = d->i->scale(d->c, a, 5, 0.5f) == PD_OK && d->i->download(d->c, back, a, sizeof h) == PD_OK;
    CHECK(ok && memcmp(back, half, sizeof half) == 0, "%s: scale by 0.5", name);
    ok = d->i->memset0(d->c, b, sizeof h) == PD_OK && d->i->download(d->c, back, b, sizeof h) == PD_OK;
    CHECK(ok && memcmp(back, zero, sizeof zero) == 0, "%s: memset0", name);
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

static void test_order(const pd__dev *d, const char *name) {
    void *ev = NULL;
    double ms = -1;
    bool ok = d->i->event_create(d->c, &ev) == PD_OK && d->i->event_record(d->c, ev) == PD_OK &&
              d->i->event_wait(d->c, ev) == PD_OK && d->i->timer_start(d->c) == PD_OK &&
              d->i->timer_stop(d->c, &ms) == PD_OK && d->i->sync(d->c) == PD_OK;
    CHECK(ok && ms >= 0, "%s: an event recorded and waited on; a timer (%g ms)", name, ms);
    if (ev) d->i->event_destroy(ev);
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
    di->close(d.c);
}

int main(int argc, char **argv) {
    bool gpu = argc > 1 && strcmp(argv[1], "--gpu") == 0;
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
#else
    if (gpu) {
        printf("SKIP built without the CUDA backend\n");
        return 77;
    }
    test_device(&pd__dev_cpu, "cpu", true);
#endif
    return check_summary();
}
