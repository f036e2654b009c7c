/* pipeline_devmem.h - private: what lives on a device for the pipeline's
 * device stages (runtime/pipeline_devmem.c; docs/CUDA.md, "The pipeline on
 * GPUs"), written once against the device interface (runtime/device.h).
 * Per pipeline thread a pd__gpu: one context (stream) on the stage's device,
 * per chunk its packed parameter, gradient, optimizer-state and stash slabs,
 * per slot a device activation context; everything on one stream, in order.
 * Per link a pd__glink: message buffers on the receiver's device, ordered by
 * `ready` and `done` events, the queues carrying only their index. A link's
 * two contexts must outlive it. Details: docs/INTERNALS.md,
 * "runtime/pipeline_devmem.h". */
#ifndef PD_PIPELINE_DEVMEM_H
#define PD_PIPELINE_DEVMEM_H

#include "device.h"
#include "session.h"

typedef struct pd__gpu pd__gpu;
typedef struct pd__glink pd__glink;

/* What pd__gpu_create needs of a chunk. */
typedef struct pd__gpu_chunk {
    const int *params; /* the session parameter indices it owns (pd__slabs order) */
    const int64_t *pk; /* their offsets in a packed version */
    int np;
    int64_t packed;        /* floats in a packed version */
    pd__actx *const *slot; /* its host contexts, one per slot */
    const bool *need;      /* per graph tensor: its contexts hold it */
    int nstash;
    /* tied weights: parameters an earlier stage owns that it reads too, a
     * copy of their weights (sw) and their gradients (sg) on its device,
     * packed at spk[] (spacked floats) */
    const int *sp;
    const int64_t *spk;
    int nsp;
    int64_t spacked;
} pd__gpu_chunk;

/* Whether `device` can run a stage: a one-line error when the build has no
 * CUDA backend, the machine no GPU, or fewer GPUs. */
pd_status pd__gpu_check(int device);
/* A context of interface di on `device` with the given precision, the chunks' weights
 * uploaded from the session's host slab, their gradients and optimizer
 * state zero, and a twin of every slot's context. */
pd_status pd__gpu_create(pd_session *s, const pd_graph *g, const pd__slabs *sl, const pd__dev_i *di, int device,
                         pd_precision prec, int nchunks, const pd__gpu_chunk *ch, int nslots, pd__gpu **out);
void pd__gpu_destroy(pd__gpu *d);
/* The calling thread works on d's device (a worker calls it before its work). */
pd_status pd__gpu_bind(pd__gpu *d);
pd__dactx *pd__gpu_slot(pd__gpu *d, int c, int slot);
/* Its stream (a cudaStream_t: the NCCL transport's compute stream). */
void *pd__gpu_stream(pd__gpu *d);
/* Work outside its stream that may wait for another process: while
 * pending(arg), its allocator gives nothing back to the driver
 * (pd__cuda_set_pending). arg must outlive d. */
void pd__gpu_set_pending(pd__gpu *d, bool (*pending)(void *arg), void *arg);
/* Chunk c's packed gradients (device) and their count. */
void pd__gpu_grads(pd__gpu *d, int c, float **g, int64_t *n);
/* n bytes between two device addresses of d's GPU, queued on its stream. */
pd_status pd__gpu_copy(pd__gpu *d, void *dst, const void *src, size_t n);
/* Points slot's parameter views on chunk c at the live weights (h < 0) or
 * stash h, their gradients at the chunk's gradient slab. */
void pd__gpu_use(pd__gpu *d, int c, int slot, int h);
/* n bytes of host memory to device address dst (queued; src reusable on return). */
pd_status pd__gpu_upload(pd__gpu *d, void *dst, const void *src, size_t n);
/* n bytes of device address src to host memory dst (waits). */
pd_status pd__gpu_download(pd__gpu *d, void *dst, const void *src, size_t n);
/* The live weights of chunk c into its stash h. */
pd_status pd__gpu_stash(pd__gpu *d, int c, int h);
/* The sum of squares of the gradients: each chunk's packed slab's (the
 * device's sumsq), added in chunk order, as a CPU stage adds them (waits). */
pd_status pd__gpu_sqnorm(pd__gpu *d, double *sq);
/* When a gradient is not finite: the first such parameter (session index)
 * and value; *param -1 when all are finite (waits). */
pd_status pd__gpu_nonfinite(pd__gpu *d, int *param, float *value);
pd_status pd__gpu_scale(pd__gpu *d, float f);
/* pd__optim_step on every chunk (update t, rate lr), then its gradients zeroed. */
pd_status pd__gpu_update(pd__gpu *d, const pd_train_options *o, int64_t t, double lr);
pd_status pd__gpu_zero_grads(pd__gpu *d);
/* Waits for the stream; reports an asynchronous error of its kernels. */
pd_status pd__gpu_sync(pd__gpu *d);
/* Chunk c's initializers bufs[0..nb) (BatchNorm statistics: the twin of
 * slot 0's) into its host slot 0, and with weights its live weights and
 * optimizer state into the session's host slabs (waits). */
pd_status pd__gpu_pull(pd__gpu *d, int c, const int *bufs, int nb, bool weights);
/* Tied weights (pipeline.c, pd__dev_tied_*). shared_grads: chunk c's
 * gradients of the parameters it shares into host memory (spacked floats),
 * then zeroed on the device (waits). grad_add: parameter i's gradient (chunk
 * c owns it) += add, through host memory tmp of its size (waits).
 * grad_io: parameter i's gradient (chunk c owns it) into host memory of
 * its size (up false, waits) or from it (up, queued; host reusable on
 * return). weight_down: parameter i's live weights into the session's host
 * slab (waits). shared_up: the host slab's weights of the parameters chunk
 * c shares into its copy (waits). */
pd_status pd__gpu_shared_grads(pd__gpu *d, int c, float *host);
pd_status pd__gpu_grad_add(pd__gpu *d, int c, int i, const float *add);
pd_status pd__gpu_grad_io(pd__gpu *d, int c, int i, float *host, bool up);
pd_status pd__gpu_weight_down(pd__gpu *d, int c, int i);
pd_status pd__gpu_shared_up(pd__gpu *d, int c);
/* Stash h of chunk c (packed) into host memory of its size (waits), or
 * from it (queued). */
pd_status pd__gpu_pull_stash(pd__gpu *d, int c, int h, float *host);
pd_status pd__gpu_push_stash(pd__gpu *d, int c, int h, const float *host);
/* The inverse of pull after a resume: the session's host slabs (live weights,
 * optimizer state, the tied weights' copies) and host slot 0's bufs[0..nb)
 * into chunk c's device memory (waits). */
pd_status pd__gpu_push(pd__gpu *d, int c, const int *bufs, int nb);
/* Only the live weights and the tied weights' copies (waits). */
pd_status pd__gpu_push_weights(pd__gpu *d, int c);

/* Link l's buffers: n per direction; lo: a thread of stage l, hi: one of
 * stage l+1 (their devices' contexts: buffers on the receiver's device
 * outside its allocator, events on each side's); act_bytes forward,
 * grad_bytes backward. */
pd_status pd__glink_create(const pd__gpu *lo, const pd__gpu *hi, size_t act_bytes, size_t grad_bytes, int n,
                           pd__glink **out);
void pd__glink_destroy(pd__glink *L);
/* Between runs, every stream idle: every buffer free (a failed run leaves some taken). */
void pd__glink_reset(pd__glink *L);
/* Sending in direction dir (0: forward, from stage l): takes a free buffer
 * (*e), then each put copies n bytes of from's device memory at offset off,
 * and send_end marks it ready. */
pd_status pd__glink_send_begin(pd__glink *L, int dir, pd__gpu *from, int *e);
pd_status pd__glink_put(pd__glink *L, int dir, pd__gpu *from, int e, size_t off, const void *src, size_t n);
pd_status pd__glink_send_end(pd__glink *L, int dir, pd__gpu *from, int e);
/* Receiving buffer e: the receiver's stream waits for it, each take copies
 * out of it, recv_end frees it once those copies have run. */
pd_status pd__glink_recv_begin(pd__glink *L, int dir, pd__gpu *to, int e);
pd_status pd__glink_take(pd__glink *L, int dir, pd__gpu *to, int e, size_t off, void *dst, size_t n);
pd_status pd__glink_recv_end(pd__glink *L, int dir, pd__gpu *to, int e);

#endif
