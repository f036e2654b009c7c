/* device.c - the CPU as a device (runtime/device.h): thin wrappers over the
 * kernels (pd__cpu_run, pd__cpu_run_bwd), runtime/optim.c and runtime/loss.c.
 * Device memory is host memory, so callers skip the copies between a host
 * buffer and its twin (host_memory); the stream is the calling thread, so
 * sync and events have nothing to wait for. */
#include "../device.h"
#include "../loss.h"
#include "../optim.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct pd__cpu_dev {
    int64_t t0; /* timer_start's clock, ns */
} pd__cpu_dev;

static int64_t pd__cpu_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static pd_status pd__cpu_open(int index, pd_precision p, void **ctx) {
    (void)index, (void)p;
    *ctx = PD_CALLOC(1, sizeof(pd__cpu_dev));
    return *ctx ? PD_OK : pd__err(PD_ERR_NOMEM, "out of memory");
}
static void pd__cpu_close(void *ctx) { PD_FREE(ctx); }
static pd_status pd__cpu_ok(void *ctx) { (void)ctx; return PD_OK; }

static bool pd__cpu_dev_supports(const pd_graph *g, const pd__node *n) {
    (void)g;
    return n->op >= 0 && n->op < PD_OP_COUNT;
}
static pd_status pd__cpu_fwd(void *ctx, pd__exec *x, const pd_graph *g, const pd__node *n, pd_tensor *const *in,
                             pd_tensor *const *out) {
    (void)ctx;
    return pd__cpu_run(x, g, n, in, out);
}
static pd_status pd__cpu_bwd(void *ctx, pd__exec *x, const pd_graph *g, const pd__node *n, pd_tensor *const *in,
                             pd_tensor *const *out, pd_tensor *const *dout, pd_tensor *const *din) {
    (void)ctx;
    return pd__cpu_run_bwd(x, g, n, in, out, dout, din);
}

static pd_status pd__cpu_alloc(void *ctx, size_t bytes, void **out) {
    (void)ctx;
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) return pd__err(PD_ERR_NOMEM, "out of memory (%zu bytes)", bytes);
    *out = p;
    return PD_OK;
}
static void pd__cpu_free(void *ctx, void *p) { (void)ctx, free(p); }
static pd_status pd__cpu_host_alloc(void *ctx, size_t bytes, void **out) {
    (void)ctx, (void)bytes;
    *out = NULL; /* no staging: the device reads the host buffer itself */
    return PD_OK;
}
static void pd__cpu_host_free(void *ctx, void *p) { (void)ctx, (void)p; }
static pd_status pd__cpu_memcpy(void *ctx, void *dst, const void *src, size_t bytes) {
    (void)ctx;
    if (dst != src && bytes) memcpy(dst, src, bytes);
    return PD_OK;
}
static pd_status pd__cpu_copy_peer(void *ctx, void *dst, void *dst_ctx, const void *src, size_t bytes) {
    (void)dst_ctx;
    return pd__cpu_memcpy(ctx, dst, src, bytes);
}
static pd_status pd__cpu_memset0(void *ctx, void *dst, size_t bytes) {
    (void)ctx;
    pd__cpu_zero(dst, bytes);
    return PD_OK;
}

static pd_status pd__cpu_sumsq(void *ctx, const float *g, int64_t n, double *sq) {
    (void)ctx;
    *sq = pd__sq_sum(g, n);
    return PD_OK;
}
static pd_status pd__cpu_scale(void *ctx, float *g, int64_t n, float s) {
    (void)ctx;
    for (int64_t i = 0; i < n; i++) g[i] *= s;
    return PD_OK;
}
static pd_status pd__cpu_optim(void *ctx, const pd_train_options *o, int64_t t, double lr, float *w, float *g,
                               float *s0, float *s1, int64_t n) {
    (void)ctx;
    pd__optim_step(o, t, lr, w, g, s0, s1, n);
    return PD_OK;
}
static pd_status pd__cpu_ce(void *ctx, const pd_tensor *logits, const pd_tensor *labels, int64_t rows, float *dlogits,
                            double *loss, int64_t *correct, int64_t *count) {
    (void)ctx;
    return pd__loss_cross_entropy(logits, labels, rows, dlogits, loss, correct, count);
}

static pd_status pd__cpu_timer_start(void *ctx) {
    ((pd__cpu_dev *)ctx)->t0 = pd__cpu_now_ns();
    return PD_OK;
}
static pd_status pd__cpu_timer_stop(void *ctx, double *ms) {
    *ms = 1e-6 * (double)(pd__cpu_now_ns() - ((pd__cpu_dev *)ctx)->t0);
    return PD_OK;
}
/* one thread is one stream: an event is always passed */
static pd_status pd__cpu_event_create(void *ctx, void **ev) {
    *ev = ctx;
    return PD_OK;
}
static void pd__cpu_event_destroy(void *ev) { (void)ev; }
static pd_status pd__cpu_event(void *ctx, void *ev) { (void)ctx, (void)ev; return PD_OK; }

const pd__dev_i pd__dev_cpu = {
    .name = "cpu",
    .host_memory = true,
    .writes_fresh = true,
    .open = pd__cpu_open,
    .close = pd__cpu_close,
    .bind = pd__cpu_ok,
    .sync = pd__cpu_ok,
    .supports_op = pd__cpu_dev_supports,
    .forward = pd__cpu_fwd,
    .backward = pd__cpu_bwd,
    .alloc = pd__cpu_alloc,
    .free = pd__cpu_free,
    .host_alloc = pd__cpu_host_alloc,
    .host_free = pd__cpu_host_free,
    .upload = pd__cpu_memcpy,
    .download = pd__cpu_memcpy,
    .copy = pd__cpu_memcpy,
    .memset0 = pd__cpu_memset0,
    .alloc_shared = pd__cpu_alloc,
    .free_shared = pd__cpu_free,
    .copy_peer = pd__cpu_copy_peer,
    .sumsq = pd__cpu_sumsq,
    .scale = pd__cpu_scale,
    .optim_step = pd__cpu_optim,
    .cross_entropy = pd__cpu_ce,
    .timer_start = pd__cpu_timer_start,
    .timer_stop = pd__cpu_timer_stop,
    .event_create = pd__cpu_event_create,
    .event_destroy = pd__cpu_event_destroy,
    .event_record = pd__cpu_event,
    .event_wait = pd__cpu_event,
};
