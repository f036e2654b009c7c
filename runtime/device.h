/* device.h - one device interface (after ggml's ggml_backend_i): what a
 * training step asks of the machine it runs on. The CPU implements it in
 * runtime/cpu/device.c, CUDA (and the simulated device) in
 * runtime/cuda/device.c over the module's table. The one-stage session's
 * step (runtime/session_step.c) and the pipeline's device stages are written
 * against it. Calls are ordered as a stream; only download, sync, sumsq,
 * cross_entropy and timer_stop wait. A context belongs to one thread at a
 * time (another calls bind first). Usage: docs/INTERNALS.md,
 * "runtime/device.h". */
#ifndef PD_DEVICE_H
#define PD_DEVICE_H

#include "../core/pd_internal.h"

typedef struct pd__dev_i {
    const char *name;
    /* Device memory is host memory (the CPU): a host buffer is its own
     * device twin, so callers use the host's and skip the copies. */
    bool host_memory;
    /* Backward kernels honour pd__exec.fresh (write, not add, those input
     * gradients); without it the caller zeroes them too. */
    bool writes_fresh;

    /* ---- the context ---- */
    pd_status (*open)(int index, pd_precision p, void **ctx);
    void (*close)(void *ctx); /* NULL: a no-op */
    pd_status (*bind)(void *ctx);
    pd_status (*sync)(void *ctx); /* waits for the work queued; reports its errors */

    /* ---- nodes: the CPU kernels' contracts (pd__kernel_fn, pd__grad_fn;
     * the backward adds into din), errors naming the node ---- */
    bool (*supports_op)(const pd_graph *g, const pd__node *n); /* what it refuses runs on the CPU */
    pd_status (*forward)(void *ctx, pd__exec *x, const pd_graph *g, const pd__node *n, pd_tensor *const *in,
                         pd_tensor *const *out);
    pd_status (*backward)(void *ctx, pd__exec *x, const pd_graph *g, const pd__node *n, pd_tensor *const *in,
                          pd_tensor *const *out, pd_tensor *const *dout, pd_tensor *const *din);

    /* ---- memory ---- */
    pd_status (*alloc)(void *ctx, size_t bytes, void **out); /* not zeroed */
    void (*free)(void *ctx, void *p);                        /* NULL p: a no-op */
    /* page-locked host memory for uploads that do not wait (*out NULL:
     * none needed, the device reads host memory) */
    pd_status (*host_alloc)(void *ctx, size_t bytes, void **out);
    void (*host_free)(void *ctx, void *p);
    pd_status (*upload)(void *ctx, void *dst, const void *src, size_t bytes);   /* host to device */
    pd_status (*download)(void *ctx, void *dst, const void *src, size_t bytes); /* device to host; waits */
    pd_status (*copy)(void *ctx, void *dst, const void *src, size_t bytes);     /* device to device */
    pd_status (*memset0)(void *ctx, void *dst, size_t bytes);
    /* Between contexts (the pipeline's links, runtime/pipeline_devmem.c):
     * alloc_shared: memory on ctx's device outside its allocator, which
     * other contexts' streams use too (ordered by events); copy_peer: bytes
     * from ctx's device to dst on dst_ctx's device, queued on ctx's stream. */
    pd_status (*alloc_shared)(void *ctx, size_t bytes, void **out);
    void (*free_shared)(void *ctx, void *p); /* NULL p: a no-op */
    pd_status (*copy_peer)(void *ctx, void *dst, void *dst_ctx, const void *src, size_t bytes);

    /* ---- the update (runtime/optim.c's formulas, in the same float arithmetic) ---- */
    /* sum g^2 in double, in pd__sq_sum's blocks and order (runtime/optim.h):
     * bitwise the CPU's on the simulated device, not on a GPU; waits */
    pd_status (*sumsq)(void *ctx, const float *g, int64_t n, double *sq);
    pd_status (*scale)(void *ctx, float *g, int64_t n, float s);                 /* g *= s */
    pd_status (*optim_step)(void *ctx, const pd_train_options *o, int64_t t, double lr, float *w, float *g,
                            float *s0, float *s1, int64_t n);
    /* pd__loss_cross_entropy on device logits and int64 labels; the sums
     * come back (waits); dlogits (may be NULL) is overwritten */
    pd_status (*cross_entropy)(void *ctx, const pd_tensor *logits, const pd_tensor *labels, int64_t rows,
                               float *dlogits, double *loss, int64_t *correct, int64_t *count);

    /* ---- time and order between contexts (the pipeline's SEND/RECV) ---- */
    pd_status (*timer_start)(void *ctx);
    pd_status (*timer_stop)(void *ctx, double *ms); /* the work since timer_start, as the device ran it */
    pd_status (*event_create)(void *ctx, void **ev);
    void (*event_destroy)(void *ev);
    pd_status (*event_record)(void *ctx, void *ev); /* after the work queued so far */
    pd_status (*event_wait)(void *ctx, void *ev);   /* work queued after this waits for ev's last record */
} pd__dev_i;

/* A device: its interface and an open context. */
typedef struct pd__dev {
    const pd__dev_i *i;
    void *c;
} pd__dev;

extern const pd__dev_i pd__dev_cpu;
#ifdef PD_HAVE_CUDA
extern const pd__dev_i pd__dev_cuda; /* runtime/cuda/device.c; the simulated device too */
#endif

/* Host bytes to and from their device twin; nothing when the twin is the
 * host buffer itself (host_memory) or either is NULL. */
static inline pd_status pd__dev_up(const pd__dev *d, void *dst, const void *src, size_t bytes) {
    return dst && src && dst != src ? d->i->upload(d->c, dst, src, bytes) : PD_OK;
}
static inline pd_status pd__dev_down(const pd__dev *d, void *dst, const void *src, size_t bytes) {
    return dst && src && dst != src ? d->i->download(d->c, dst, src, bytes) : PD_OK;
}

#endif
