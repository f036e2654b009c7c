/* host.h - what the CUDA module calls back in libpipedream: errors, the
 * node attribute getters and shape helpers its kernels share with the CPU,
 * the device allocator's bookkeeping (dcache.c) and the MPI transport's
 * checks. libpipedream passes this table to the module when it loads it
 * (loader.c), so the module links no copy of libpipedream and needs none of
 * its symbols exported: the library exports only pd_* (module.c's stubs
 * of the same names forward through the table). */
#ifndef PD_CUDA_HOST_H
#define PD_CUDA_HOST_H

#include "../../core/pd_internal.h"
#include "../../core/shape_nn.h"
#include "../../core/shape_tensor.h"
#include "../comm/transport.h"
#include "dcache.h"

typedef struct pd__cuda_host {
    size_t size; /* sizeof(pd__cuda_host) where libpipedream was built */
    pd_status (*err)(pd_status s, const char *fmt, ...);
    void (*err_prefix)(const char *fmt, ...);
    const char *(*last_error)(void);
    const char *(*dtype_name)(pd_dtype t);
    size_t (*dtype_size)(pd_dtype t);
    const pd__op_def *ops; /* pd__ops */
    const pd__attr *(*attr_get)(const pd__node *n, const char *name);
    int64_t (*attr_i)(const pd__node *n, const char *name, int64_t def);
    float (*attr_f)(const pd__node *n, const char *name, float def);
    const char *(*attr_s)(const pd__node *n, const char *name, const char *def);
    int (*attr_ints)(const pd__node *n, const char *name, const int64_t **v);
    int (*bn_training)(const pd__node *n);
    int (*loss_reduction)(const pd__node *n);
    bool (*norm_axis)(int64_t axis, int rank, int *out);
    int64_t (*shape_numel)(int ndim, const int64_t *shape);
    pd_status (*softmax_split)(const pd__node *n, int ndim, const int64_t *shape, int64_t *outer, int64_t *len,
                               int64_t *inner);
    pd_status (*transpose_perm)(const pd__node *n, int rank, int *perm);
    pd_status (*win_make)(const pd__node *n, pd__win_kind kind, int ndim, const int64_t *xshape,
                          const int64_t *kshape, pd__win *w);
    int (*dcache_class)(size_t bytes, size_t *rounded);
    void *(*dcache_take)(pd__dcache *d, int cls);
    bool (*dcache_track)(pd__dcache *d, void *p, int cls, bool fresh);
    int (*dcache_give)(pd__dcache *d, void *p);
    void (*dcache_drain)(pd__dcache *d, void (*drop)(void *ctx, void *p), void *ctx);
    void (*dcache_release)(pd__dcache *d, void (*drop)(void *ctx, void *p), void *ctx);
    bool (*mpi_relayed)(const char *msg);
    pd_status (*mpi_transport_check)(pd__transport *t);
    pd_status (*mpi_use)(void);
} pd__cuda_host;

/* The module's op table, pd__ops of the libpipedream that loaded it. */
extern const pd__op_def *pd__cuda_host_ops;
void pd__cuda_host_bind(const pd__cuda_host *h);

#endif
