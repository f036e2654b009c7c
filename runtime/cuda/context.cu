/* context.cu - the CUDA device context: device discovery, the stream and the
 * cuBLAS/cuDNN handles, the caching allocator, host<->device copies, and the
 * conversion of CUDA, cuBLAS and cuDNN error codes into pd_status.
 */
#include "internal.cuh"

#include <pthread.h>

#include <string.h>

/* ---- errors ------------------------------------------------------------------------------------ */

extern "C" pd_status pd__cuda_fail_rt(cudaError_t e, const char *call, const char *file, int line) {
    pd_status s = e == cudaErrorMemoryAllocation ? PD_ERR_NOMEM
                  : e == cudaErrorInvalidValue   ? PD_ERR_INVALID
                                                 : PD_ERR_INTERNAL;
    return pd__err(s, "%s:%d: %s: %s (%s)", file, line, call, cudaGetErrorString(e), cudaGetErrorName(e));
}

extern "C" pd_status pd__cuda_fail_blas(cublasStatus_t e, const char *call, const char *file, int line) {
    pd_status s = e == CUBLAS_STATUS_ALLOC_FAILED    ? PD_ERR_NOMEM
                  : e == CUBLAS_STATUS_NOT_SUPPORTED ? PD_ERR_UNSUPPORTED
                  : e == CUBLAS_STATUS_INVALID_VALUE ? PD_ERR_INVALID
                                                     : PD_ERR_INTERNAL;
    return pd__err(s, "%s:%d: %s: %s (cuBLAS %d)", file, line, call, cublasGetStatusString(e), (int)e);
}

extern "C" pd_status pd__cuda_fail_dnn(cudnnStatus_t e, const char *call, const char *file, int line) {
    pd_status s = e == CUDNN_STATUS_ALLOC_FAILED      ? PD_ERR_NOMEM
                  : e == CUDNN_STATUS_NOT_SUPPORTED   ? PD_ERR_UNSUPPORTED
                  : e == CUDNN_STATUS_BAD_PARAM       ? PD_ERR_INVALID
                                                      : PD_ERR_INTERNAL;
    return pd__err(s, "%s:%d: %s: %s (cuDNN %d)", file, line, call, cudnnGetErrorString(e), (int)e);
}

/* ---- devices and the context ------------------------------------------------------------------- */

extern "C" int pd__cuda_device_count(void) {
    int n = 0;
    /* no driver, no device, a driver older than the runtime: an error code, not a crash */
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError(); /* clear the sticky error */
        return 0;
    }
    return n;
}

static void cu_release(pd__cuda_ctx *c);
void pd__cu_conv_cache_free(pd__cuda_ctx *c); /* dnn.cu */

/* Direct access from this device to every peer that allows it, so that a
 * stage's cudaMemcpyPeerAsync goes over NVLink or PCIe peer-to-peer rather
 * than through host memory. Once per device and process (the primary
 * context is shared); a peer without access is left to the staged copy. */
static void cu_enable_peers(int device) {
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static unsigned long long done; /* bit d: device d's peers enabled (the first 64 devices) */
    if (device < 0 || device >= 64) return;
    pthread_mutex_lock(&mu);
    if (!(done & (1ull << device))) {
        int n = 0;
        if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
        for (int peer = 0; peer < n; peer++) {
            int can = 0;
            if (peer == device || cudaDeviceCanAccessPeer(&can, device, peer) != cudaSuccess || !can) continue;
            (void)cudaDeviceEnablePeerAccess(peer, 0); /* refused or already on: the staged copy still works */
        }
        (void)cudaGetLastError(); /* nothing sticky is left from a refusal */
        done |= 1ull << device;
    }
    pthread_mutex_unlock(&mu);
}

static pd_status cu_init(pd__cuda_ctx *c, int device) {
    PD_CU(cudaSetDevice(device));
    cu_enable_peers(device);
    PD_CU(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    PD_CUBLAS(cublasCreate(&c->blas));
    PD_CUBLAS(cublasSetStream(c->blas, c->stream));
    /* products in the precision the context asks for, nothing implicit */
    PD_CUBLAS(cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH));
    PD_CUDNN(cudnnCreate(&c->dnn));
    PD_CUDNN(cudnnSetStream(c->dnn, c->stream));
    void *flag;
    PD_TRY(pd__cuda_alloc(c, sizeof(int), &flag));
    c->flag = (int *)flag;
    PD_CU(cudaMemsetAsync(c->flag, 0, sizeof(int), c->stream));
    return PD_OK;
}

extern "C" pd_status pd__cuda_ctx_create(int device, pd__cuda_ctx **out) {
    if (!out) return pd__err(PD_ERR_INVALID, "pd__cuda_ctx_create: out is NULL");
    int n = pd__cuda_device_count();
    if (device < 0 || device >= n)
        return pd__err(PD_ERR_INVALID, "CUDA device %d does not exist (%d device%s)", device, n, n == 1 ? "" : "s");
    pd__cuda_ctx *c = (pd__cuda_ctx *)PD_CALLOC(1, sizeof *c);
    if (!c) return pd__err(PD_ERR_NOMEM, "cannot allocate a CUDA context");
    c->device = device;
    c->precision = PD_CUDA_FP32;
    pd_status s = cu_init(c, device);
    if (s != PD_OK) {
        cu_release(c);
        return s;
    }
    *out = c;
    return PD_OK;
}

/* A block of the allocator given back to the driver. */
static void cu_drop(void *ctx, void *p) {
    (void)ctx;
    (void)cudaFree(p);
}

static void cu_release(pd__cuda_ctx *c) {
    if (c->stream) (void)cudaStreamSynchronize(c->stream);
    pd__cu_conv_cache_free(c);
    if (c->ev0) (void)cudaEventDestroy(c->ev0);
    if (c->ev1) (void)cudaEventDestroy(c->ev1);
    pd__dcache_release(&c->mem, cu_drop, NULL);
    if (c->dnn) (void)cudnnDestroy(c->dnn);
    if (c->blas) (void)cublasDestroy(c->blas);
    if (c->stream) (void)cudaStreamDestroy(c->stream);
    PD_FREE(c);
}

extern "C" void pd__cuda_ctx_destroy(pd__cuda_ctx *c) {
    if (!c) return;
    (void)cudaSetDevice(c->device);
    cu_release(c);
}

extern "C" void pd__cuda_set_precision(pd__cuda_ctx *c, pd__cuda_precision p) { c->precision = p; }
extern "C" pd__cuda_precision pd__cuda_get_precision(const pd__cuda_ctx *c) { return c->precision; }
extern "C" int pd__cuda_device(const pd__cuda_ctx *c) { return c->device; }
extern "C" void *pd__cuda_stream(pd__cuda_ctx *c) { return (void *)c->stream; }

extern "C" pd_status pd__cuda_bind(pd__cuda_ctx *c) {
    PD_CU(cudaSetDevice(c->device));
    return PD_OK;
}

extern "C" pd_status pd__cuda_sync(pd__cuda_ctx *c) {
    PD_CU(cudaStreamSynchronize(c->stream));
    return pd__cu_check_flag(c, "a kernel");
}

extern "C" pd_status pd__cu_check_flag(pd__cuda_ctx *c, const char *what) {
    int h = 0;
    PD_CU(cudaMemcpyAsync(&h, c->flag, sizeof h, cudaMemcpyDeviceToHost, c->stream));
    PD_CU(cudaStreamSynchronize(c->stream));
    if (!h) return PD_OK;
    PD_CU(cudaMemsetAsync(c->flag, 0, sizeof(int), c->stream));
    return pd__err(PD_ERR_INVALID, "%s met an index or label out of range", what);
}

extern "C" pd_status pd__cuda_timer_start(pd__cuda_ctx *c) {
    if (!c->ev0) PD_CU(cudaEventCreate(&c->ev0));
    if (!c->ev1) PD_CU(cudaEventCreate(&c->ev1));
    PD_CU(cudaEventRecord(c->ev0, c->stream));
    return PD_OK;
}

extern "C" pd_status pd__cuda_timer_stop(pd__cuda_ctx *c, double *ms) {
    float f = 0;
    PD_CU(cudaEventRecord(c->ev1, c->stream));
    PD_CU(cudaEventSynchronize(c->ev1));
    PD_CU(cudaEventElapsedTime(&f, c->ev0, c->ev1));
    *ms = (double)f;
    return pd__cu_check_flag(c, "a kernel");
}

extern "C" pd_status pd__cuda_host_alloc(size_t bytes, void **out) {
    void *p = NULL;
    PD_CU(cudaMallocHost(&p, bytes ? bytes : 1));
    *out = p;
    return PD_OK;
}

extern "C" void pd__cuda_host_free(void *p) {
    if (p) (void)cudaFreeHost(p);
}

/* ---- the caching allocator (its bookkeeping: dcache.c) ------------------------------------------- */

extern "C" void pd__cuda_set_pending(pd__cuda_ctx *c, bool (*pending)(void *arg), void *arg) {
    c->pending = pending;
    c->pending_arg = arg;
}

/* Whether cudaFree, which waits for the whole device, could now wait for another process. */
static bool cu_pending(pd__cuda_ctx *c) { return c->pending && c->pending(c->pending_arg); }

extern "C" pd_status pd__cuda_alloc(pd__cuda_ctx *c, size_t bytes, void **out) {
    size_t rounded;
    int cls = pd__dcache_class(bytes, &rounded);
    if (cls >= PD_CU_NCLASS) return pd__err(PD_ERR_NOMEM, "device allocation of %zu bytes is too large", bytes);
    void *p = pd__dcache_take(&c->mem, cls);
    bool fresh = !p;
    if (fresh) {
        cudaError_t e = cudaMalloc(&p, rounded);
        if (e == cudaErrorMemoryAllocation) { /* give the cache back and try once more */
            (void)cudaGetLastError();
            if (cu_pending(c))
                return pd__err(PD_ERR_NOMEM,
                               "CUDA: out of device memory for %zu bytes; the %zu cached are not given back while "
                               "transfers to other processes are in flight (cudaFree would wait for them)",
                               bytes, c->mem.stats.cached);
            PD_TRY(pd__cuda_mem_trim(c));
            e = cudaMalloc(&p, rounded);
        }
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            return pd__cuda_fail_rt(e, "cudaMalloc", __FILE__, __LINE__);
        }
    }
    if (!pd__dcache_track(&c->mem, p, cls, fresh)) {
        (void)cudaFree(p);
        return pd__err(PD_ERR_NOMEM, "cannot grow the device allocator's table");
    }
    *out = p;
    return PD_OK;
}

extern "C" void pd__cuda_free(pd__cuda_ctx *c, void *p) {
    if (!c || !p) return;
    if (pd__dcache_give(&c->mem, p) == 0) { /* cannot cache it: give it back (after the work that may use it) */
        (void)cudaStreamSynchronize(c->stream);
        (void)cudaFree(p);
    }
}

extern "C" void pd__cuda_mem_get_stats(const pd__cuda_ctx *c, pd__cuda_mem_stats *s) {
    *s = c->mem.stats;
}

extern "C" pd_status pd__cuda_mem_trim(pd__cuda_ctx *c) {
    if (cu_pending(c))
        return pd__err(PD_ERR_NOMEM, "CUDA: the %zu cached bytes are not given back while transfers to other "
                       "processes are in flight (cudaFree would wait for them)", c->mem.stats.cached);
    PD_CU(cudaStreamSynchronize(c->stream));
    pd__dcache_drain(&c->mem, cu_drop, NULL);
    return PD_OK;
}

/* ---- copies ---------------------------------------------------------------------------------------- */

extern "C" pd_status pd__cuda_upload(pd__cuda_ctx *c, void *dst, const void *src, size_t bytes) {
    if (!bytes) return PD_OK;
    /* pageable source: cudaMemcpyAsync stages it before returning */
    PD_CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream));
    return PD_OK;
}

extern "C" pd_status pd__cuda_download(pd__cuda_ctx *c, void *dst, const void *src, size_t bytes) {
    if (bytes) PD_CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream));
    PD_CU(cudaStreamSynchronize(c->stream));
    return PD_OK;
}

extern "C" pd_status pd__cuda_copy(pd__cuda_ctx *c, void *dst, const void *src, size_t bytes) {
    if (bytes && dst != src) PD_CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream));
    return PD_OK;
}

extern "C" pd_status pd__cuda_memset0(pd__cuda_ctx *c, void *dst, size_t bytes) {
    if (bytes) PD_CU(cudaMemsetAsync(dst, 0, bytes, c->stream));
    return PD_OK;
}

/* ---- between contexts: the pipeline's stages (runtime/pipeline_devmem.c) --------------------------- */

extern "C" pd_status pd__cuda_copy_peer(pd__cuda_ctx *c, void *dst, int ddev, const void *src, int sdev, size_t bytes) {
    if (!bytes) return PD_OK;
    if (ddev == sdev) PD_CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream));
    else PD_CU(cudaMemcpyPeerAsync(dst, ddev, src, sdev, bytes, c->stream));
    return PD_OK;
}

extern "C" pd_status pd__cuda_malloc_on(int device, size_t bytes, void **out) {
    void *p = NULL;
    PD_CU(cudaSetDevice(device));
    PD_CU(cudaMalloc(&p, bytes ? bytes : 1));
    *out = p;
    return PD_OK;
}

extern "C" void pd__cuda_free_on(int device, void *p) {
    if (!p) return;
    (void)cudaSetDevice(device);
    (void)cudaFree(p);
}

extern "C" pd_status pd__cuda_event_create(int device, void **out) {
    cudaEvent_t e;
    PD_CU(cudaSetDevice(device));
    PD_CU(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    *out = (void *)e;
    return PD_OK;
}

extern "C" void pd__cuda_event_destroy(void *ev) {
    if (ev) (void)cudaEventDestroy((cudaEvent_t)ev);
}

extern "C" pd_status pd__cuda_event_record(pd__cuda_ctx *c, void *ev) {
    PD_CU(cudaEventRecord((cudaEvent_t)ev, c->stream));
    return PD_OK;
}

extern "C" pd_status pd__cuda_event_wait(pd__cuda_ctx *c, void *ev) {
    PD_CU(cudaStreamWaitEvent(c->stream, (cudaEvent_t)ev, 0));
    return PD_OK;
}

static pd_status cu_tensor_bytes(pd_dtype dt, int ndim, const int64_t *shape, size_t *bytes) {
    int64_t n = pd__shape_numel(ndim, shape);
    size_t es = pd_dtype_size(dt);
    if (n < 0 || es == 0 || (uint64_t)n > SIZE_MAX / es)
        return pd__err(PD_ERR_INVALID, "a device tensor of %s with %lld elements", pd_dtype_name(dt), (long long)n);
    *bytes = (size_t)n * es;
    return PD_OK;
}

extern "C" pd_status pd__cuda_tensor_zeros(pd__cuda_ctx *c, pd_dtype dt, int ndim, const int64_t *shape,
                                          pd_tensor *dev) {
    size_t bytes = 0;
    PD_TRY(cu_tensor_bytes(dt, ndim, shape, &bytes));
    void *p;
    PD_TRY(pd__cuda_alloc(c, bytes, &p));
    pd_status s = pd__cuda_memset0(c, p, bytes);
    if (s != PD_OK) {
        pd__cuda_free(c, p);
        return s;
    }
    memset(dev, 0, sizeof *dev);
    dev->dtype = dt;
    dev->ndim = ndim;
    for (int i = 0; i < ndim; i++) dev->shape[i] = shape[i];
    dev->data = p;
    return PD_OK;
}

extern "C" pd_status pd__cuda_tensor_upload(pd__cuda_ctx *c, const pd_tensor *host, pd_tensor *dev) {
    size_t bytes = 0;
    PD_TRY(cu_tensor_bytes(host->dtype, host->ndim, host->shape, &bytes));
    void *p;
    PD_TRY(pd__cuda_alloc(c, bytes, &p));
    pd_status s = pd__cuda_upload(c, p, host->data, bytes);
    if (s != PD_OK) {
        pd__cuda_free(c, p);
        return s;
    }
    *dev = *host;
    dev->data = p;
    return PD_OK;
}

extern "C" pd_status pd__cuda_tensor_download(pd__cuda_ctx *c, const pd_tensor *dev, void *host) {
    size_t bytes = 0;
    PD_TRY(cu_tensor_bytes(dev->dtype, dev->ndim, dev->shape, &bytes));
    return pd__cuda_download(c, host, dev->data, bytes);
}

extern "C" void pd__cuda_tensor_free(pd__cuda_ctx *c, pd_tensor *dev) {
    if (!dev) return;
    pd__cuda_free(c, dev->data);
    dev->data = NULL;
}
