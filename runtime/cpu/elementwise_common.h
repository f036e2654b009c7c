/* elementwise_common.h - what the element-wise forward kernels
 * (runtime/cpu/elementwise.c) and their backward (beside them) share, so
 * that a gradient walks a broadcast, splits work over threads,
 * converts dtypes and sums over axes with the very code the forward is
 * tested with: the dtype lists rows are instantiated from, the work dtypes,
 * the thread splitter, Cast's conversion, the broadcast iterator and the
 * ReduceSum machinery (here also adding into an existing tensor), and the
 * branch-free float math. Private to the CPU backend.
 */
#ifndef PD_ELEMENTWISE_COMMON_H
#define PD_ELEMENTWISE_COMMON_H

#include "../../core/shape_elem.h"
#include "fastmath.h"

#include <math.h>
#include <string.h>

#define PD__PAR_MIN 32768 /* elements of work below which one thread does it all */
#define PD__NDT 17        /* dtype enum values are < this */

/* ---- dtypes ---------------------------------------------------------------------- */

/* The dtypes rows are instantiated for:
 * X(..., dtype, C type, suffix, W: type the arithmetic wraps in, M: libm suffix, MIN, MAX).
 * Integer arithmetic goes through the unsigned W so that overflow wraps
 * instead of being undefined. */
#define PD__FLOATS(X, ...)                                                 \
    X(__VA_ARGS__, PD_FLOAT, float, f32, float, f, -INFINITY, INFINITY)    \
    X(__VA_ARGS__, PD_DOUBLE, double, f64, double, , -INFINITY, INFINITY)
#define PD__SINTS(X, ...)                                                  \
    X(__VA_ARGS__, PD_INT8, int8_t, i8, uint32_t, , INT8_MIN, INT8_MAX)    \
    X(__VA_ARGS__, PD_INT16, int16_t, i16, uint32_t, , INT16_MIN, INT16_MAX) \
    X(__VA_ARGS__, PD_INT32, int32_t, i32, uint32_t, , INT32_MIN, INT32_MAX) \
    X(__VA_ARGS__, PD_INT64, int64_t, i64, uint64_t, , INT64_MIN, INT64_MAX)
#define PD__UINTS(X, ...)                                                  \
    X(__VA_ARGS__, PD_UINT8, uint8_t, u8, uint32_t, , 0, UINT8_MAX)        \
    X(__VA_ARGS__, PD_UINT16, uint16_t, u16, uint32_t, , 0, UINT16_MAX)    \
    X(__VA_ARGS__, PD_UINT32, uint32_t, u32, uint32_t, , 0, UINT32_MAX)    \
    X(__VA_ARGS__, PD_UINT64, uint64_t, u64, uint64_t, , 0, UINT64_MAX)
#define PD__INTS(X, ...) PD__SINTS(X, __VA_ARGS__) PD__UINTS(X, __VA_ARGS__)
#define PD__NUMS(X, ...) PD__FLOATS(X, __VA_ARGS__) PD__INTS(X, __VA_ARGS__)

/* The dtype a float computation runs in: float for float/float16/bfloat16,
 * double for double and (where allowed) integers. */
static inline pd_dtype pd__float_work(pd_dtype t) {
    return (t == PD_FLOAT || t == PD_FLOAT16 || t == PD_BFLOAT16) ? PD_FLOAT : PD_DOUBLE;
}

/* The dtype arithmetic runs in: the dtype itself, float for the 16-bit floats. */
static inline pd_dtype pd__arith_work(pd_dtype t) { return (t == PD_FLOAT16 || t == PD_BFLOAT16) ? PD_FLOAT : t; }

/* ---- threads --------------------------------------------------------------------- */

typedef void (*pd__range_fn)(void *ctx, int64_t begin, int64_t end);

/* How many threads `work` elements deserve (x->threads at most, 0: all). */
int pd__ew_threads(const pd__exec *x, int64_t work);
/* Runs fn over [0, total) in contiguous chunks (multiples of `align`), one
 * per thread; `work` (elements touched) decides how many threads. */
void pd__ew_par_range(const pd__exec *x, int64_t total, int64_t work, int64_t align, pd__range_fn fn, void *ctx);

/* ---- conversions ----------------------------------------------------------------- */

/* dst (dtype dt) = src (dtype st) converted, n elements, ONNX Cast semantics. */
void pd__ew_convert(const pd__exec *x, pd_dtype dt, void *dst, pd_dtype st, const void *src, int64_t n);
/* dst (float dtype dt) += alpha * src (float dtype st), through double, rounded once. */
void pd__ew_convert_add(const pd__exec *x, pd_dtype dt, void *dst, pd_dtype st, const void *src, int64_t n,
                        double alpha);

/* ---- rows and the broadcast iterator ---------------------------------------------- */

/* A row: n output elements from inputs a, b, c (those the op has) whose
 * strides along the row are sa, sb, sc: 1 (contiguous) or 0 (one value).
 * Unary rows are only called with the input shaped as the output (sa = 1). */
typedef void (*pd__row_fn)(void *o, const void *a, int64_t sa, const void *b, int64_t sb, const void *c, int64_t sc,
                           int64_t n, const void *ctx);

#define PD__ROW_ARGS                                                                                       \
    void *o_, const void *a_, int64_t sa, const void *b_, int64_t sb, const void *c_, int64_t sc, int64_t n, \
        const void *ctx_

#define PD__MAX_BIN 3

/* out = fn(in...) with numpy broadcasting of the nin (<= 3) inputs to out's
 * shape, in rows; the views' dtypes give their element sizes. `cost` is the
 * work per element, for the thread count. */
pd_status pd__ew_bcast_run(const pd__exec *x, pd__row_fn fn, const void *ctx, const pd_tensor *out, int nin,
                           const pd_tensor *in, int64_t cost);

/* ---- sums ---------------------------------------------------------------------- */

/* dst += alpha * src, n elements of w (float or double). */
void pd__ew_axpy(const pd__exec *x, pd_dtype w, int64_t n, double alpha, const void *src, void *dst);
/* dst += alpha * (src summed over the dims where mask[d]): src is dense
 * with `shape`, dst dense with the dims kept (in order); w is float or
 * double. ReduceSum's kernel, adding instead of storing. */
void pd__ew_reduce_add(const pd__exec *x, pd_dtype w, int ndim, const int64_t *shape, const bool *mask,
                       const void *src, void *dst, double alpha);

/* ---- branch-free float math (fastmath.h), per dtype suffix ---------------------------- */

#define pd__sel_f32 pd__self
#define pd__sel_f64 pd__seld
#define pd__fabs_f32 fabsf
#define pd__fabs_f64 fabs
#define pd__exp_f32 pd__expf
#define pd__exp_f64 exp
#define pd__tanh_f32 pd__tanhf
#define pd__tanh_f64 tanh
#define pd__erf_f32 pd__erff
#define pd__erf_f64 erf

/* sigmoid from e = exp(-|x|), which cannot overflow: 1/(1+e) for x >= 0,
 * e/(1+e) below (so tiny results keep their precision). */
#define PD__DEF_SIGMOID(T, sfx)                              \
    PD__INLINE T pd__sigmoid_##sfx(T x) {                    \
        T e = pd__exp_##sfx(-pd__fabs_##sfx(x)), r = (T)1 / ((T)1 + e); \
        return pd__sel_##sfx(x < 0, e * r, r);               \
    }
PD__DEF_SIGMOID(float, f32)
PD__DEF_SIGMOID(double, f64)

#endif
