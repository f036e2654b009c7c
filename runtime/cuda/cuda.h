/* cuda.h - the CUDA backend's C API: a device context (stream, cuBLAS and
 * cuDNN handles, a caching allocator), host<->device copies, the op table
 * (forward and backward of runtime/cuda/ops.c's ops), the fused optimizer
 * updates and the cross-entropy loss. C code includes it without the
 * toolkit's headers: device tensors are pd_tensor views of device memory.
 * The functions live in libpdcuda.so, loaded with dlopen on first use
 * (PD_CUDA_API below). Every call runs on the context's stream in order;
 * a context belongs to one thread at a time (pd__cuda_bind); errors come
 * back as pd_status with "file:line: call: reason". Usage, ordering and
 * errors: docs/INTERNALS.md, "runtime/cuda/cuda.h"; building: docs/CUDA.md. */
#ifndef PD_CUDA_H
#define PD_CUDA_H

#ifdef __cplusplus
/* the IR's declarations have C linkage; its system headers are included
 * first, outside the extern "C" block (C++'s wrappers of them are templates) */
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
extern "C" {
#endif

#include "../../core/pd_internal.h"

/* Devices usable by this process: 0 without a GPU, without a driver or when
 * the runtime cannot initialize. Never fails, never aborts. */
int pd__cuda_device_count(void);

/* Matrix-product precision (weights, activations and optimizer state stay
 * fp32 in memory in every mode):
 *   FP32  full fp32 products (cuBLAS COMPUTE_32F, cuDNN FMA math)
 *   TF32  fp32 storage, TF32 tensor-core products (cuBLAS and cuDNN)
 *   BF16  fp32 storage, products rounded through bf16 on tensor cores (cuBLAS
 *         COMPUTE_32F_FAST_16BF; cuDNN convolutions as TF32). Real bf16
 *         activations with fp32 master weights are future work (docs/CUDA.md). */
typedef enum pd__cuda_precision { PD_CUDA_FP32 = 0, PD_CUDA_TF32, PD_CUDA_BF16 } pd__cuda_precision;

typedef struct pd__cuda_ctx pd__cuda_ctx;

/* A context on device `device` (0-based): its own non-blocking stream,
 * cuBLAS and cuDNN handles bound to it, an empty allocator cache. */
pd_status pd__cuda_ctx_create(int device, pd__cuda_ctx **out);
/* Waits for the stream, frees every cached and live block; NULL is a no-op. */
void pd__cuda_ctx_destroy(pd__cuda_ctx *c);
void pd__cuda_set_precision(pd__cuda_ctx *c, pd__cuda_precision p);
pd__cuda_precision pd__cuda_get_precision(const pd__cuda_ctx *c);
int pd__cuda_device(const pd__cuda_ctx *c);
/* Makes the context's device current for the calling thread: a thread other
 * than the creator calls it once before using the context (a stage worker). */
pd_status pd__cuda_bind(pd__cuda_ctx *c);
/* The cudaStream_t, for a caller that records events between stages. */
void *pd__cuda_stream(pd__cuda_ctx *c);
/* Waits until everything queued on the stream has run; reports its errors. */
pd_status pd__cuda_sync(pd__cuda_ctx *c);

/* The profiler's clock: an event recorded on the stream at start, another at
 * stop; stop waits for it and gives the milliseconds between them (the work
 * queued in between, as the GPU ran it). */
pd_status pd__cuda_timer_start(pd__cuda_ctx *c);
pd_status pd__cuda_timer_stop(pd__cuda_ctx *c, double *ms);

/* Page-locked host memory (cudaMallocHost): uploads from it are truly
 * asynchronous, so the caller keeps it unchanged until the stream has run
 * the copy (the session's input staging). */
pd_status pd__cuda_host_alloc(size_t bytes, void **out);
void pd__cuda_host_free(void *p);

/* ---- the caching allocator ----------------------------------------------------------------------
 * Sizes are rounded up to a size class (512 B, then four classes per power of
 * two); a freed block goes to its class's free list and the next request of
 * that class takes it back without cudaMalloc. Blocks are stream-ordered on
 * the context's one stream: a block freed while kernels still use it is only
 * handed to work queued after them. When cudaMalloc fails the cache is
 * released and the request retried once, unless work that may wait for
 * another process is pending (pd__cuda_set_pending). */
typedef struct pd__cuda_mem_stats {
    size_t in_use;          /* bytes in live blocks (rounded to their classes) */
    size_t cached;          /* bytes in free blocks kept for reuse */
    size_t peak;            /* the largest in_use so far */
    int64_t device_mallocs; /* cudaMalloc calls */
    int64_t allocs;         /* pd__cuda_alloc calls */
    int64_t reuses;         /* of them served from the cache */
} pd__cuda_mem_stats;

/* bytes == 0 gives a valid block of the smallest class. */
pd_status pd__cuda_alloc(pd__cuda_ctx *c, size_t bytes, void **out);
/* Returns a block to the cache; NULL is a no-op, and so is a pointer this
 * context did not allocate (or already freed). */
void pd__cuda_free(pd__cuda_ctx *c, void *p);
void pd__cuda_mem_get_stats(const pd__cuda_ctx *c, pd__cuda_mem_stats *s);
/* Gives the cached (free) blocks back to the driver (waits for the stream). */
pd_status pd__cuda_mem_trim(pd__cuda_ctx *c);
/* Work on the device outside the context's stream that may wait for another
 * process: the NCCL transport's transfers (pd__cuda_nccl_pending). cudaFree
 * waits for the whole device, so a block given back to the driver while a
 * send waits for its receiver waits for that peer, which may itself be
 * waiting for this process: a deadlock no poll sees. pending(arg) says
 * whether any such work is pending now (NULL, the default: never); while it
 * is, trim fails and an allocation the cache cannot serve fails as out of
 * memory, naming its size, instead of trimming and retrying. */
void pd__cuda_set_pending(pd__cuda_ctx *c, bool (*pending)(void *arg), void *arg);

/* ---- copies ---------------------------------------------------------------------------------------
 * upload: queued on the stream (the host buffer may be reused on return: the
 * copy is staged); download: waits for the stream and the copy. */
pd_status pd__cuda_upload(pd__cuda_ctx *c, void *dst, const void *src, size_t bytes);
pd_status pd__cuda_download(pd__cuda_ctx *c, void *dst, const void *src, size_t bytes);
pd_status pd__cuda_copy(pd__cuda_ctx *c, void *dst, const void *src, size_t bytes); /* device to device */
pd_status pd__cuda_memset0(pd__cuda_ctx *c, void *dst, size_t bytes);

/* ---- between contexts (the pipeline's links: device.h's alloc_shared, copy_peer, events) -----------
 * copy_peer: bytes from src on device sdev to dst on device ddev, queued on
 * c's stream (cudaMemcpyPeerAsync; a plain device copy when they are the
 * same device). malloc_on: device memory outside every context's allocator
 * (a buffer two contexts' streams use, ordered by events). Events carry
 * order from one stream to another without a host wait: create one on the
 * device of the stream that records it; record queues it after the work on
 * c's stream so far; wait makes c's stream wait for its last record (of any
 * device; no wait when it was never recorded). */
pd_status pd__cuda_copy_peer(pd__cuda_ctx *c, void *dst, int ddev, const void *src, int sdev, size_t bytes);
pd_status pd__cuda_malloc_on(int device, size_t bytes, void **out);
void pd__cuda_free_on(int device, void *p);
pd_status pd__cuda_event_create(int device, void **out);
void pd__cuda_event_destroy(void *ev);
pd_status pd__cuda_event_record(pd__cuda_ctx *c, void *ev);
pd_status pd__cuda_event_wait(pd__cuda_ctx *c, void *ev);

/* A device tensor with host's dtype and shape and a copy of its data
 * (dev->data from the allocator); dev untouched on error. */
pd_status pd__cuda_tensor_upload(pd__cuda_ctx *c, const pd_tensor *host, pd_tensor *dev);
/* A zero-filled device tensor of the given dtype and shape. */
pd_status pd__cuda_tensor_zeros(pd__cuda_ctx *c, pd_dtype dt, int ndim, const int64_t *shape, pd_tensor *dev);
/* Copies a device tensor's data into host memory of its size (waits). */
pd_status pd__cuda_tensor_download(pd__cuda_ctx *c, const pd_tensor *dev, void *host);
void pd__cuda_tensor_free(pd__cuda_ctx *c, pd_tensor *dev);

/* ---- ops --------------------------------------------------------------------------------------------
 * The same contracts as the CPU kernels (pd__kernel_fn, pd__grad_fn in
 * core/pd_internal.h) with device tensors: out[] has its shape and device
 * memory; the backward ADDS into din[]. x gives training and seed (the
 * scratch fields are not used: scratch comes from the allocator). */
typedef pd_status (*pd__cuda_kernel_fn)(pd__cuda_ctx *c, const pd__exec *x, const pd__node *n, pd_tensor *const *in,
                                        pd_tensor *const *out);
typedef pd_status (*pd__cuda_grad_fn)(pd__cuda_ctx *c, const pd__exec *x, const pd__node *n, pd_tensor *const *in,
                                      pd_tensor *const *out, pd_tensor *const *dout, pd_tensor *const *din);

/* Whether the CUDA backend runs node n (forward and, where the op has one,
 * backward): its op is in the table, its attributes are of the supported
 * forms and, when g is not NULL, its inputs have the supported dtypes and
 * shapes. What it refuses stays on the CPU backend. */
bool pd__cuda_supports_op(const pd_graph *g, const pd__node *n);
/* What the backend's table holds for op: 1 a forward, | 2 a backward
 * (tests/test_cuda.c --cases checks it against core/ops.h's PD_OPF_HOST). */
int pd__cuda_op_kernels(int op);
/* Run node n (errors name it, as pd__cpu_run's do; g may be NULL). */
pd_status pd__cuda_run(pd__cuda_ctx *c, const pd__exec *x, const pd_graph *g, const pd__node *n, pd_tensor *const *in,
                       pd_tensor *const *out);
pd_status pd__cuda_run_bwd(pd__cuda_ctx *c, const pd__exec *x, const pd_graph *g, const pd__node *n,
                           pd_tensor *const *in, pd_tensor *const *out, pd_tensor *const *dout,
                           pd_tensor *const *din);

/* ---- optimizer and loss ------------------------------------------------------------------------------
 * pd__optim_step (runtime/optim.c) on device slabs: the same formulas, in
 * the same float arithmetic, one fused kernel per optimizer. */
pd_status pd__cuda_optim_step(pd__cuda_ctx *c, const pd_train_options *o, int64_t t, double lr, float *w,
                              const float *g, float *s0, float *s1, int64_t n);
/* sum g^2 in double, in pd__sq_sum's blocks of the slab, their sums added
 * in order (waits for the stream): pd__sq_sum's bits on the simulated
 * device; on a GPU each block's threads add in another order (docs/CUDA.md). */
pd_status pd__cuda_sumsq(pd__cuda_ctx *c, const float *g, int64_t n, double *sq);
/* g *= s (gradient clipping). */
pd_status pd__cuda_scale(pd__cuda_ctx *c, float *g, int64_t n, float s);
/* pd__loss_cross_entropy (runtime/loss.c) on device logits and labels:
 * loss, correct and count come back to the host (waits); dlogits (device,
 * may be NULL) is overwritten. */
pd_status pd__cuda_loss_cross_entropy(pd__cuda_ctx *c, const pd_tensor *logits, const pd_tensor *labels, int64_t rows,
                                      float *dlogits, double *loss, int64_t *correct, int64_t *count);

/* ---- the module ----------------------------------------------------------------------------------
 * Everything above is implemented in libpdcuda.so (the .cu files, ops.c and
 * module.c), which libpipedream never links: loader.c defines each function
 * of PD_CUDA_API as a stub that forwards through the module's table, loading
 * it on the first call (pthread_once); without it the stubs answer each
 * entry's last argument. Adding a function is one line: X(return type, name
 * without pd__cuda_, (parameters), (arguments), the answer without the module)
 * or V(name, (parameters), (arguments)) for a void one. Where the module is
 * looked for and why nothing else may call CUDA: docs/INTERNALS.md,
 * "runtime/cuda/cuda.h". */
#define PD_CUDA_API(X, V)                                                                                             \
    X(int, device_count, (void), (), 0)                                                                               \
    X(pd_status, ctx_create, (int device, pd__cuda_ctx **out), (device, out), pd__cuda_load())                        \
    V(ctx_destroy, (pd__cuda_ctx *c), (c))                                                                            \
    V(set_precision, (pd__cuda_ctx *c, pd__cuda_precision p), (c, p))                                                 \
    X(pd__cuda_precision, get_precision, (const pd__cuda_ctx *c), (c), PD_CUDA_FP32)                                  \
    X(int, device, (const pd__cuda_ctx *c), (c), -1)                                                                  \
    X(pd_status, bind, (pd__cuda_ctx *c), (c), pd__cuda_load())                                                       \
    X(void *, stream, (pd__cuda_ctx *c), (c), NULL)                                                                   \
    X(pd_status, sync, (pd__cuda_ctx *c), (c), pd__cuda_load())                                                       \
    X(pd_status, timer_start, (pd__cuda_ctx *c), (c), pd__cuda_load())                                                \
    X(pd_status, timer_stop, (pd__cuda_ctx *c, double *ms), (c, ms), pd__cuda_load())                                 \
    X(pd_status, host_alloc, (size_t bytes, void **out), (bytes, out), pd__cuda_load())                               \
    V(host_free, (void *p), (p))                                                                                      \
    X(pd_status, alloc, (pd__cuda_ctx *c, size_t bytes, void **out), (c, bytes, out), pd__cuda_load())                \
    V(free, (pd__cuda_ctx *c, void *p), (c, p))                                                                       \
    V(mem_get_stats, (const pd__cuda_ctx *c, pd__cuda_mem_stats *s), (c, s))                                          \
    X(pd_status, mem_trim, (pd__cuda_ctx *c), (c), pd__cuda_load())                                                   \
    V(set_pending, (pd__cuda_ctx *c, bool (*pending)(void *arg), void *arg), (c, pending, arg))                       \
    X(pd_status, upload, (pd__cuda_ctx *c, void *dst, const void *src, size_t bytes), (c, dst, src, bytes),           \
      pd__cuda_load())                                                                                                \
    X(pd_status, download, (pd__cuda_ctx *c, void *dst, const void *src, size_t bytes), (c, dst, src, bytes),         \
      pd__cuda_load())                                                                                                \
    X(pd_status, copy, (pd__cuda_ctx *c, void *dst, const void *src, size_t bytes), (c, dst, src, bytes),             \
      pd__cuda_load())                                                                                                \
    X(pd_status, memset0, (pd__cuda_ctx *c, void *dst, size_t bytes), (c, dst, bytes), pd__cuda_load())               \
    X(pd_status, copy_peer, (pd__cuda_ctx *c, void *dst, int ddev, const void *src, int sdev, size_t bytes),          \
      (c, dst, ddev, src, sdev, bytes), pd__cuda_load())                                                              \
    X(pd_status, malloc_on, (int device, size_t bytes, void **out), (device, bytes, out), pd__cuda_load())           \
    V(free_on, (int device, void *p), (device, p))                                                                    \
    X(pd_status, event_create, (int device, void **out), (device, out), pd__cuda_load())                              \
    V(event_destroy, (void *ev), (ev))                                                                                \
    X(pd_status, event_record, (pd__cuda_ctx *c, void *ev), (c, ev), pd__cuda_load())                                 \
    X(pd_status, event_wait, (pd__cuda_ctx *c, void *ev), (c, ev), pd__cuda_load())                                   \
    X(pd_status, tensor_upload, (pd__cuda_ctx *c, const pd_tensor *host, pd_tensor *dev), (c, host, dev),             \
      pd__cuda_load())                                                                                                \
    X(pd_status, tensor_zeros, (pd__cuda_ctx *c, pd_dtype dt, int ndim, const int64_t *shape, pd_tensor *dev),        \
      (c, dt, ndim, shape, dev), pd__cuda_load())                                                                     \
    X(pd_status, tensor_download, (pd__cuda_ctx *c, const pd_tensor *dev, void *host), (c, dev, host),                \
      pd__cuda_load())                                                                                                \
    V(tensor_free, (pd__cuda_ctx *c, pd_tensor *dev), (c, dev))                                                       \
    X(bool, supports_op, (const pd_graph *g, const pd__node *n), (g, n), false)                                       \
    X(int, op_kernels, (int op), (op), 0)                                                                             \
    X(pd_status, run,                                                                                                 \
      (pd__cuda_ctx *c, const pd__exec *x, const pd_graph *g, const pd__node *n, pd_tensor *const *in,                \
       pd_tensor *const *out),                                                                                        \
      (c, x, g, n, in, out), pd__cuda_load())                                                                         \
    X(pd_status, run_bwd,                                                                                             \
      (pd__cuda_ctx *c, const pd__exec *x, const pd_graph *g, const pd__node *n, pd_tensor *const *in,                \
       pd_tensor *const *out, pd_tensor *const *dout, pd_tensor *const *din),                                         \
      (c, x, g, n, in, out, dout, din), pd__cuda_load())                                                              \
    X(pd_status, optim_step,                                                                                          \
      (pd__cuda_ctx *c, const pd_train_options *o, int64_t t, double lr, float *w, const float *g, float *s0,         \
       float *s1, int64_t n),                                                                                         \
      (c, o, t, lr, w, g, s0, s1, n), pd__cuda_load())                                                                \
    X(pd_status, sumsq, (pd__cuda_ctx *c, const float *g, int64_t n, double *sq), (c, g, n, sq), pd__cuda_load())    \
    X(pd_status, scale, (pd__cuda_ctx *c, float *g, int64_t n, float s), (c, g, n, s), pd__cuda_load())               \
    X(pd_status, loss_cross_entropy,                                                                                  \
      (pd__cuda_ctx *c, const pd_tensor *logits, const pd_tensor *labels, int64_t rows, float *dlogits,               \
       double *loss, int64_t *correct, int64_t *count),                                                               \
      (c, logits, labels, rows, dlogits, loss, correct, count), pd__cuda_load())                                      \
    X(pd_status, nccl_transport_create,                                                                               \
      (int nthreads, const int *rank_of, const int *worker_of, int nworkers, int nlinks, int color, int device,       \
       void *stream, struct pd__transport *watch, struct pd__transport **out),                                        \
      (nthreads, rank_of, worker_of, nworkers, nlinks, color, device, stream, watch, out), pd__cuda_load())           \
    X(pd_status, nccl_sync, (struct pd__transport *t), (t), pd__cuda_load())                                          \
    X(bool, nccl_pending, (void *t), (t), false)                                                                      \
    X(int, nccl_devices, (void), (), 0)

/* The NCCL transport (runtime/comm/nccl.h: pd__nccl_transport_create,
 * pd__nccl_sync, pd__nccl_pending, pd__nccl_devices), which the module
 * holds when built with NCCL (PD_HAVE_NCCL); without, create and sync fail
 * with one line, nothing is pending and there are 0 devices for it. */
struct pd__transport;
struct pd__cuda_host;
pd_status pd__cuda_nccl_transport_create(int nthreads, const int *rank_of, const int *worker_of, int nworkers,
                                         int nlinks, int color, int device, void *stream, struct pd__transport *watch,
                                         struct pd__transport **out);
pd_status pd__cuda_nccl_sync(struct pd__transport *t);
bool pd__cuda_nccl_pending(void *t); /* t: the transport; pd__cuda_set_pending's hook */
int pd__cuda_nccl_devices(void);

/* The module's table: a header, then one pointer per function of the list. */
#define PD__CUDA_MEMBER(ret, name, params, args, fallback) ret(*name) params;
#define PD__CUDA_MEMBER_V(name, params, args) void(*name) params;
typedef struct pd__cuda_api {
    size_t size;           /* sizeof(pd__cuda_api) where the module was built */
    const char *version;   /* its PD_VERSION_STRING */
    const char *signature; /* PD_CUDA_API_SIGNATURE where the module was built */
    /* called first, with the libpipedream functions the module calls (host.h) */
    void (*bind_host)(const struct pd__cuda_host *host);
    PD_CUDA_API(PD__CUDA_MEMBER, PD__CUDA_MEMBER_V)
} pd__cuda_api;

/* The list as text, "int device_count(void);pd_status ctx_create(...);...":
 * a module built from another list is refused, not called. */
#define PD__CUDA_SIG(ret, name, params, args, fallback) #ret " " #name #params ";"
#define PD__CUDA_SIG_V(name, params, args) "void " #name #params ";"
#define PD_CUDA_API_SIGNATURE PD_CUDA_API(PD__CUDA_SIG, PD__CUDA_SIG_V)

/* The module's one exported symbol: its const pd__cuda_api (module.c). */
#define PD_CUDA_MODULE_SYMBOL "pd__cuda_module_api"
/* The module's file name; PDONNX_CUDA_MODULE overrides the whole path. */
#define PD_CUDA_MODULE_NAME "libpdcuda.so"

/* Loads the module, once per process (later calls give the first answer):
 * PD_OK, or PD_ERR_UNSUPPORTED with one line, "cannot load the CUDA module
 * PATH: REASON" (dlerror's reason, or why the module was refused). Defined
 * by libpipedream's loader, not by the module. */
pd_status pd__cuda_load(void);

/* The simulated device (sim.c: the API on the CPU, device memory no host
 * code can touch, a worker thread per stream; docs/CUDA.md) instead of the
 * module, with ndevices devices (1-8): before the first CUDA call of the
 * process, as PDONNX_CUDA_MODULE=sim[:N] does; refused once the process has
 * loaded the module or simulates another count. pd__cuda_is_sim: whether
 * the CUDA API is the simulated device's. Defined by the loader. */
pd_status pd__cuda_use_sim(int ndevices);
bool pd__cuda_is_sim(void);

#ifdef __cplusplus
}
#endif

#endif
