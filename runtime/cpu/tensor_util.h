/* tensor_util.h - small helpers shared by the CPU tensor-op kernels
 * (tensor.c forward, tensor_grad.c backward): element counts, row-major
 * strides, how many threads a copy deserves, and Pad's index rule, so that
 * a forward and its backward read the same positions.
 */
#ifndef PD_TENSOR_UTIL_H
#define PD_TENSOR_UTIL_H

#ifdef _OPENMP
#include <omp.h>
#endif

#include "../../core/shape_tensor.h"

#define PD__PAR_BYTES ((int64_t)1 << 18) /* below this many bytes moved, one thread */

static inline int64_t pd__numel_of(const pd_tensor *t) {
    int64_t k = 1;
    for (int i = 0; i < t->ndim; i++) k *= t->shape[i];
    return k;
}

/* Row-major strides (in elements) of a shape. */
static inline void pd__strides_of(int ndim, const int64_t *shape, int64_t *st) {
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        st[d] = s;
        s *= shape[d];
    }
}

/* Threads for moving `bytes` bytes split into `units` independent parts
 * (x->threads, or OpenMP's default when 0; 1 without OpenMP). */
static inline int pd__threads_for(const pd__exec *x, int64_t bytes, int64_t units) {
#ifdef _OPENMP
    if (bytes < PD__PAR_BYTES || units < 2) return 1;
    int nt = x != NULL && x->threads > 0 ? x->threads : omp_get_max_threads();
    return nt < units ? nt : (int)units;
#else
    (void)x, (void)bytes, (void)units;
    return 1;
#endif
}

/* Pad: the input index that output index o of an axis of size dim, padded
 * by b before, reads; -1 for the constant (constant mode, or an empty axis). */
static inline int64_t pd__pad_src(pd__pad_mode m, int64_t o, int64_t b, int64_t dim) {
    int64_t i = o - b;
    if (i >= 0 && i < dim) return i;
    if (m == PD_PAD_CONSTANT || dim == 0) return -1;
    if (m == PD_PAD_EDGE) return i < 0 ? 0 : dim - 1;
    if (m == PD_PAD_WRAP) {
        i %= dim;
        return i < 0 ? i + dim : i;
    }
    if (dim == 1) return 0; /* reflect: period 2 (dim - 1) */
    int64_t p = 2 * (dim - 1);
    i %= p;
    if (i < 0) i += p;
    return i < dim ? i : p - i;
}

#endif
