/* host.c - in the CUDA module: libpipedream's functions the module calls, as
 * stubs of the same names that forward through the table libpipedream gave
 * it at load (host.h; pd__cuda_module_bind). The module is loaded, and bound,
 * before any of its functions runs; these stubs are local to it (module.map). */
#include "host.h"

#include <stdarg.h>
#include <stdio.h>

static const pd__cuda_host *pd__host;
const pd__op_def *pd__cuda_host_ops;

void pd__cuda_host_bind(const pd__cuda_host *h) {
    pd__host = h;
    pd__cuda_host_ops = h->ops;
}

/* formatted here, then passed as one "%s" argument: one va_list per call */
pd_status pd__err(pd_status s, const char *fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return pd__host->err(s, "%s", msg);
}

void pd__err_prefix(const char *fmt, ...) {
    char pre[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    pd__host->err_prefix("%s", pre);
}

const char *pd_last_error(void) { return pd__host->last_error(); }
const char *pd_dtype_name(pd_dtype t) { return pd__host->dtype_name(t); }
size_t pd_dtype_size(pd_dtype t) { return pd__host->dtype_size(t); }
int64_t pd_tensor_numel(const pd_tensor *t) { return t ? pd__host->shape_numel(t->ndim, t->shape) : 0; }
const pd__attr *pd__attr_get(const pd__node *n, const char *name) { return pd__host->attr_get(n, name); }
int64_t pd__attr_i(const pd__node *n, const char *name, int64_t def) { return pd__host->attr_i(n, name, def); }
float pd__attr_f(const pd__node *n, const char *name, float def) { return pd__host->attr_f(n, name, def); }
const char *pd__attr_s(const pd__node *n, const char *name, const char *def) { return pd__host->attr_s(n, name, def); }
int pd__attr_ints(const pd__node *n, const char *name, const int64_t **v) { return pd__host->attr_ints(n, name, v); }
int pd__bn_training(const pd__node *n) { return pd__host->bn_training(n); }
int pd__loss_reduction(const pd__node *n) { return pd__host->loss_reduction(n); }
bool pd__norm_axis(int64_t axis, int rank, int *out) { return pd__host->norm_axis(axis, rank, out); }
int64_t pd__shape_numel(int ndim, const int64_t *shape) { return pd__host->shape_numel(ndim, shape); }
pd_status pd__softmax_split(const pd__node *n, int ndim, const int64_t *shape, int64_t *outer, int64_t *len,
                            int64_t *inner) {
    return pd__host->softmax_split(n, ndim, shape, outer, len, inner);
}
pd_status pd__transpose_perm(const pd__node *n, int rank, int *perm) { return pd__host->transpose_perm(n, rank, perm); }
pd_status pd__win_make(const pd__node *n, pd__win_kind kind, int ndim, const int64_t *xshape, const int64_t *kshape,
                       pd__win *w) {
    return pd__host->win_make(n, kind, ndim, xshape, kshape, w);
}
int pd__dcache_class(size_t bytes, size_t *rounded) { return pd__host->dcache_class(bytes, rounded); }
void *pd__dcache_take(pd__dcache *d, int cls) { return pd__host->dcache_take(d, cls); }
bool pd__dcache_track(pd__dcache *d, void *p, int cls, bool fresh) { return pd__host->dcache_track(d, p, cls, fresh); }
int pd__dcache_give(pd__dcache *d, void *p) { return pd__host->dcache_give(d, p); }
void pd__dcache_drain(pd__dcache *d, void (*drop)(void *ctx, void *p), void *ctx) { pd__host->dcache_drain(d, drop, ctx); }
void pd__dcache_release(pd__dcache *d, void (*drop)(void *ctx, void *p), void *ctx) {
    pd__host->dcache_release(d, drop, ctx);
}
bool pd__mpi_relayed(const char *msg) { return pd__host->mpi_relayed(msg); }
pd_status pd__mpi_transport_check(pd__transport *t) { return pd__host->mpi_transport_check(t); }
pd_status pd__mpi_use(void) { return pd__host->mpi_use(); }
