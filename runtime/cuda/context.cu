/* context.cu - the CUDA device context: device discovery, the stream and the
 * cuBLAS/cuDNN handles, the caching allocator, host<->device copies, and the
 * conversion of CUDA, cuBLAS and cuDNN error codes into pd_status.
 */
#include "internal.cuh"

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

static pd_status cu_init(pd__cuda_ctx *c, int device) {
    PD_CU(cudaSetDevice(device));
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

static void cu_release(pd__cuda_ctx *c) {
    if (c->stream) (void)cudaStreamSynchronize(c->stream);
    pd__cu_conv_cache_free(c);
    if (c->ev0) (void)cudaEventDestroy(c->ev0);
    if (c->ev1) (void)cudaEventDestroy(c->ev1);
    for (int i = 0; i < c->live_cap; i++)
        if (c->live_p && c->live_p[i]) (void)cudaFree(c->live_p[i]);
    for (int k = 0; k < PD_CU_NCLASS; k++) {
        for (int i = 0; i < c->free[k].n; i++) (void)cudaFree(c->free[k].p[i]);
        PD_FREE(c->free[k].p);
    }
    PD_FREE(c->live_p);
    PD_FREE(c->live_cls);
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

/* ---- the caching allocator ----------------------------------------------------------------------- */

/* Class of a request and its rounded size: 512 B, then 2^e + j 2^(e-2), j = 1..4. */
static int cu_class(size_t bytes, size_t *rounded) {
    if (bytes <= 512) {
        *rounded = 512;
        return 0;
    }
    int e = 63 - __builtin_clzll((unsigned long long)(bytes - 1)); /* 2^e <= bytes-1 < 2^(e+1), e >= 9 */
    size_t step = (size_t)1 << (e - 2);
    size_t j = (bytes - 1 - ((size_t)1 << e)) / step + 1; /* 1..4 */
    *rounded = ((size_t)1 << e) + j * step;
    return 1 + (e - 9) * 4 + (int)(j - 1);
}

static size_t cu_hash(const void *p, int cap) {
    uint64_t h = (uint64_t)(uintptr_t)p;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return (size_t)(h & (uint64_t)(cap - 1));
}

static bool cu_live_grow(pd__cuda_ctx *c) {
    int cap = c->live_cap ? c->live_cap * 2 : 256;
    void **p = (void **)PD_CALLOC((size_t)cap, sizeof *p);
    int *k = (int *)PD_CALLOC((size_t)cap, sizeof *k);
    if (!p || !k) {
        PD_FREE(p);
        PD_FREE(k);
        return false;
    }
    for (int i = 0; i < c->live_cap; i++) {
        if (!c->live_p[i]) continue;
        size_t h = cu_hash(c->live_p[i], cap);
        while (p[h]) h = (h + 1) & (size_t)(cap - 1);
        p[h] = c->live_p[i];
        k[h] = c->live_cls[i];
    }
    PD_FREE(c->live_p);
    PD_FREE(c->live_cls);
    c->live_p = p;
    c->live_cls = k;
    c->live_cap = cap;
    return true;
}

static bool cu_live_put(pd__cuda_ctx *c, void *p, int cls) {
    if ((c->live_n + 1) * 2 > c->live_cap && !cu_live_grow(c)) return false;
    size_t h = cu_hash(p, c->live_cap);
    while (c->live_p[h]) h = (h + 1) & (size_t)(c->live_cap - 1);
    c->live_p[h] = p;
    c->live_cls[h] = cls;
    c->live_n++;
    return true;
}

/* Removes p; its class, or -1 when p is not live. */
static int cu_live_take(pd__cuda_ctx *c, void *p) {
    if (!c->live_cap) return -1;
    size_t mask = (size_t)(c->live_cap - 1), h = cu_hash(p, c->live_cap);
    while (c->live_p[h] && c->live_p[h] != p) h = (h + 1) & mask;
    if (!c->live_p[h]) return -1;
    int cls = c->live_cls[h];
    c->live_p[h] = NULL;
    c->live_n--;
    /* backward shift: re-place the entries after the hole of this cluster */
    for (size_t i = (h + 1) & mask; c->live_p[i]; i = (i + 1) & mask) {
        void *q = c->live_p[i];
        int qc = c->live_cls[i];
        c->live_p[i] = NULL;
        size_t j = cu_hash(q, c->live_cap);
        while (c->live_p[j]) j = (j + 1) & mask;
        c->live_p[j] = q;
        c->live_cls[j] = qc;
    }
    return cls;
}

static size_t cu_class_bytes(int cls) {
    if (cls == 0) return 512;
    int e = (cls - 1) / 4 + 9, j = (cls - 1) % 4 + 1;
    return ((size_t)1 << e) + (size_t)j * ((size_t)1 << (e - 2));
}

extern "C" pd_status pd__cuda_alloc(pd__cuda_ctx *c, size_t bytes, void **out) {
    size_t rounded;
    int cls = cu_class(bytes, &rounded);
    if (cls >= PD_CU_NCLASS) return pd__err(PD_ERR_NOMEM, "device allocation of %zu bytes is too large", bytes);
    c->stats.allocs++;
    void *p = NULL;
    pd__cu_freelist *fl = &c->free[cls];
    if (fl->n > 0) {
        p = fl->p[--fl->n];
        c->stats.cached -= rounded;
        c->stats.reuses++;
    } else {
        cudaError_t e = cudaMalloc(&p, rounded);
        if (e == cudaErrorMemoryAllocation) { /* give the cache back and try once more */
            (void)cudaGetLastError();
            PD_TRY(pd__cuda_mem_trim(c));
            e = cudaMalloc(&p, rounded);
        }
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            return pd__cuda_fail_rt(e, "cudaMalloc", __FILE__, __LINE__);
        }
        c->stats.device_mallocs++;
    }
    if (!cu_live_put(c, p, cls)) {
        (void)cudaFree(p);
        return pd__err(PD_ERR_NOMEM, "cannot grow the device allocator's table");
    }
    c->stats.in_use += rounded;
    if (c->stats.in_use > c->stats.peak) c->stats.peak = c->stats.in_use;
    *out = p;
    return PD_OK;
}

extern "C" void pd__cuda_free(pd__cuda_ctx *c, void *p) {
    if (!c || !p) return;
    int cls = cu_live_take(c, p);
    if (cls < 0) return; /* not ours */
    size_t bytes = cu_class_bytes(cls);
    pd__cu_freelist *fl = &c->free[cls];
    if (fl->n == fl->cap) {
        int cap = fl->cap ? fl->cap * 2 : 8;
        void **np = (void **)PD_REALLOC(fl->p, sizeof(void *) * (size_t)cap);
        if (!np) { /* cannot cache it: give it back (after the work that may use it) */
            (void)cudaStreamSynchronize(c->stream);
            (void)cudaFree(p);
            c->stats.in_use -= bytes;
            return;
        }
        fl->p = np;
        fl->cap = cap;
    }
    fl->p[fl->n++] = p;
    c->stats.in_use -= bytes;
    c->stats.cached += bytes;
}

extern "C" void pd__cuda_mem_get_stats(const pd__cuda_ctx *c, pd__cuda_mem_stats *s) { *s = c->stats; }

extern "C" pd_status pd__cuda_mem_trim(pd__cuda_ctx *c) {
    PD_CU(cudaStreamSynchronize(c->stream));
    for (int k = 0; k < PD_CU_NCLASS; k++) {
        pd__cu_freelist *fl = &c->free[k];
        for (int i = 0; i < fl->n; i++) PD_CU(cudaFree(fl->p[i]));
        c->stats.cached -= (size_t)fl->n * cu_class_bytes(k);
        fl->n = 0;
    }
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

/* ---- between contexts: the pipeline's stages (runtime/pipeline_cuda.c) ----------------------------- */

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
