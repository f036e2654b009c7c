/* device.c - CUDA as a device (runtime/device.h), in libpipedream: each entry
 * forwards to the module's C API (cuda.h), whose stubs load libpdcuda.so on
 * first use, or run the simulated device (sim.c) when the process asked for
 * it. The context is a pd__cuda_ctx: one device, one stream. */
#include "../device.h"
#include "cuda.h"

static pd_status pd__cu_open(int index, pd_precision p, void **ctx) {
    pd__cuda_ctx *c = NULL;
    PD_TRY(pd__cuda_ctx_create(index, &c));
    pd__cuda_set_precision(c, p == PD_PRECISION_BF16   ? PD_CUDA_BF16
                              : p == PD_PRECISION_TF32 ? PD_CUDA_TF32
                                                       : PD_CUDA_FP32);
    *ctx = c;
    return PD_OK;
}
static void pd__cu_close(void *ctx) { pd__cuda_ctx_destroy(ctx); }
static pd_status pd__cu_bind(void *ctx) { return pd__cuda_bind(ctx); }
static pd_status pd__cu_sync(void *ctx) { return pd__cuda_sync(ctx); }

static pd_status pd__cu_fwd(void *ctx, pd__exec *x, const pd_graph *g, const pd__node *n, pd_tensor *const *in,
                            pd_tensor *const *out) {
    return pd__cuda_run(ctx, x, g, n, in, out);
}
static pd_status pd__cu_bwd(void *ctx, pd__exec *x, const pd_graph *g, const pd__node *n, pd_tensor *const *in,
                            pd_tensor *const *out, pd_tensor *const *dout, pd_tensor *const *din) {
    return pd__cuda_run_bwd(ctx, x, g, n, in, out, dout, din);
}

static pd_status pd__cu_alloc(void *ctx, size_t bytes, void **out) { return pd__cuda_alloc(ctx, bytes, out); }
static void pd__cu_free(void *ctx, void *p) { pd__cuda_free(ctx, p); }
static pd_status pd__cu_host_alloc(void *ctx, size_t bytes, void **out) {
    (void)ctx;
    return pd__cuda_host_alloc(bytes, out);
}
static void pd__cu_host_free(void *ctx, void *p) { (void)ctx, pd__cuda_host_free(p); }
static pd_status pd__cu_upload(void *ctx, void *dst, const void *src, size_t bytes) {
    return pd__cuda_upload(ctx, dst, src, bytes);
}
static pd_status pd__cu_download(void *ctx, void *dst, const void *src, size_t bytes) {
    return pd__cuda_download(ctx, dst, src, bytes);
}
static pd_status pd__cu_copy(void *ctx, void *dst, const void *src, size_t bytes) {
    return pd__cuda_copy(ctx, dst, src, bytes);
}
static pd_status pd__cu_alloc_shared(void *ctx, size_t bytes, void **out) {
    return pd__cuda_malloc_on(pd__cuda_device(ctx), bytes, out);
}
static void pd__cu_free_shared(void *ctx, void *p) { pd__cuda_free_on(pd__cuda_device(ctx), p); }
static pd_status pd__cu_copy_peer(void *ctx, void *dst, void *dst_ctx, const void *src, size_t bytes) {
    return pd__cuda_copy_peer(ctx, dst, pd__cuda_device(dst_ctx), src, pd__cuda_device(ctx), bytes);
}
static pd_status pd__cu_memset0(void *ctx, void *dst, size_t bytes) { return pd__cuda_memset0(ctx, dst, bytes); }

static pd_status pd__cu_sumsq(void *ctx, const float *g, int64_t n, double *sq) {
    return pd__cuda_sumsq(ctx, g, n, sq);
}
static pd_status pd__cu_scale(void *ctx, float *g, int64_t n, float s) { return pd__cuda_scale(ctx, g, n, s); }
static pd_status pd__cu_optim(void *ctx, const pd_train_options *o, int64_t t, double lr, float *w, float *g,
                              float *s0, float *s1, int64_t n) {
    return pd__cuda_optim_step(ctx, o, t, lr, w, g, s0, s1, n);
}
static pd_status pd__cu_ce(void *ctx, const pd_tensor *logits, const pd_tensor *labels, int64_t rows, float *dlogits,
                           double *loss, int64_t *correct, int64_t *count) {
    return pd__cuda_loss_cross_entropy(ctx, logits, labels, rows, dlogits, loss, correct, count);
}

static pd_status pd__cu_timer_start(void *ctx) { return pd__cuda_timer_start(ctx); }
static pd_status pd__cu_timer_stop(void *ctx, double *ms) { return pd__cuda_timer_stop(ctx, ms); }
static pd_status pd__cu_event_create(void *ctx, void **ev) { return pd__cuda_event_create(pd__cuda_device(ctx), ev); }
static void pd__cu_event_destroy(void *ev) { pd__cuda_event_destroy(ev); }
static pd_status pd__cu_event_record(void *ctx, void *ev) { return pd__cuda_event_record(ctx, ev); }
static pd_status pd__cu_event_wait(void *ctx, void *ev) { return pd__cuda_event_wait(ctx, ev); }

const pd__dev_i pd__dev_cuda = {
    .name = "cuda",
    .host_memory = false,
    .writes_fresh = false, /* the CUDA kernels add: fresh gradients are zeroed first */
    .open = pd__cu_open,
    .close = pd__cu_close,
    .bind = pd__cu_bind,
    .sync = pd__cu_sync,
    .supports_op = pd__cuda_supports_op,
    .forward = pd__cu_fwd,
    .backward = pd__cu_bwd,
    .alloc = pd__cu_alloc,
    .free = pd__cu_free,
    .host_alloc = pd__cu_host_alloc,
    .host_free = pd__cu_host_free,
    .upload = pd__cu_upload,
    .download = pd__cu_download,
    .copy = pd__cu_copy,
    .memset0 = pd__cu_memset0,
    .alloc_shared = pd__cu_alloc_shared,
    .free_shared = pd__cu_free_shared,
    .copy_peer = pd__cu_copy_peer,
    .sumsq = pd__cu_sumsq,
    .scale = pd__cu_scale,
    .optim_step = pd__cu_optim,
    .cross_entropy = pd__cu_ce,
    .timer_start = pd__cu_timer_start,
    .timer_stop = pd__cu_timer_stop,
    .event_create = pd__cu_event_create,
    .event_destroy = pd__cu_event_destroy,
    .event_record = pd__cu_event_record,
    .event_wait = pd__cu_event_wait,
};
