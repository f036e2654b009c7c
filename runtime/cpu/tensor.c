/* tensor.c - CPU kernels of the tensor ops, each forward beside its
 * backward: Flatten, Reshape, Unsqueeze, Squeeze, Transpose, Concat, Split,
 * Slice, Expand, Gather, Pad, CumSum, CumProd, Trilu, Tile, GatherElements,
 * GatherND, ScatterElements, ScatterND, TopK, DepthToSpace, SpaceToDepth,
 * Compress, ReverseSequence; and Constant, Shape, ConstantOfShape, Range,
 * Size, OneHot, ArgMax, ArgMin, Hardmax, EyeLike and NonZero, which are not
 * differentiable.
 *
 * How it works: docs/INTERNALS.md, "runtime/cpu/tensor.c".
 */
#include "../../core/shape_tensor.h"
#include "fastmath.h"
#include "omp_for.h"

#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* ---- shared by forward and backward ------------------------------------------------------------
 * element counts, row-major strides, how many threads a copy deserves, and
 * Pad's index rule, so that both read the same positions */

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

#define TILE 32 /* transpose tile edge, in elements */

/* ---- helpers ------------------------------------------------------------------ */
static pd_status elem_size(const pd_tensor *t, size_t *es) {
    *es = pd_dtype_size(t->dtype);
    if (*es == 0) return pd__err(PD_ERR_UNSUPPORTED, "dtype %s is not supported", pd_dtype_name(t->dtype));
    return PD_OK;
}

/* The loop of copy_strided for one element width; inlined with w constant,
 * the memcpy becomes a single move. */
static inline void copy_w(char *dst, const char *src, int64_t len, int64_t stride, int64_t w) {
    for (int64_t i = 0; i < len; i++) memcpy(dst + i * w, src + i * stride * w, (size_t)w);
}

/* dst[i] = src[i * stride] for i < len (stride in elements: may be 0 or negative). */
static void copy_strided(char *dst, const char *src, int64_t len, int64_t stride, size_t es) {
    if (stride == 1) {
        memcpy(dst, src, (size_t)len * es);
        return;
    }
    switch (es) {
    case 1: copy_w(dst, src, len, stride, 1); break;
    case 2: copy_w(dst, src, len, stride, 2); break;
    case 4: copy_w(dst, src, len, stride, 4); break;
    case 8: copy_w(dst, src, len, stride, 8); break;
    default: copy_w(dst, src, len, stride, (int64_t)es); break;
    }
}

/* memcpy of a large buffer on several threads. */
static void par_memcpy(const pd__exec *x, void *dst, const void *src, int64_t bytes) {
    if (dst == src || bytes <= 0) return;
    const int64_t chunk = (int64_t)1 << 16;
    int64_t parts = (bytes + chunk - 1) / chunk;
    int nt = pd__threads_for(x, bytes, parts);
    PD_OMP_FOR(nt, nt > 1)
    for (int64_t p = 0; p < parts; p++) {
        int64_t off = p * chunk, len = bytes - off < chunk ? bytes - off : chunk;
        memcpy((char *)dst + off, (const char *)src + off, (size_t)len);
    }
}

/* ---- the strided walker ----------------------------------------------------------
 * Writes a contiguous output of shape od[k] from in[sum_d idx_d * is[d]]
 * (input strides in elements, any sign, 0 for broadcast dims). */
typedef struct walk {
    int k;
    int64_t od[PD_MAX_DIMS];
    int64_t is[PD_MAX_DIMS];
} walk;

/* Drops size-1 dims and merges neighbours that are contiguous in the input. */
static void walk_simplify(walk *w) {
    int k = 0;
    for (int d = 0; d < w->k; d++) {
        if (w->od[d] == 1) continue;
        if (k > 0 && w->is[k - 1] == w->is[d] * w->od[d]) {
            w->od[k - 1] *= w->od[d];
            w->is[k - 1] = w->is[d];
            continue;
        }
        w->od[k] = w->od[d];
        w->is[k] = w->is[d];
        k++;
    }
    w->k = k;
}

/* Output rows [r0, r1) of a walk with k >= 1 (a row runs along the last dim). */
static void walk_rows(const walk *w, char *out, const char *in, size_t es, int64_t r0, int64_t r1) {
    int k = w->k;
    int64_t len = w->od[k - 1], idx[PD_MAX_DIMS], off = 0, rem = r0;
    for (int d = k - 2; d >= 0; d--) {
        idx[d] = rem % w->od[d];
        rem /= w->od[d];
        off += idx[d] * w->is[d];
    }
    for (int64_t r = r0; r < r1; r++) {
        copy_strided(out + r * len * (int64_t)es, in + off * (int64_t)es, len, w->is[k - 1], es);
        for (int d = k - 2; d >= 0; d--) {
            off += w->is[d];
            if (++idx[d] < w->od[d]) break;
            off -= idx[d] * w->is[d];
            idx[d] = 0;
        }
    }
}

static void walk_run(const pd__exec *x, walk w, char *out, const char *in, size_t es) {
    for (int d = 0; d < w.k; d++)
        if (w.od[d] == 0) return;
    walk_simplify(&w);
    if (w.k == 0) {
        memcpy(out, in, es);
        return;
    }
    int64_t rows = 1;
    for (int d = 0; d < w.k - 1; d++) rows *= w.od[d];
    int nt = pd__threads_for(x, rows * w.od[w.k - 1] * (int64_t)es, rows);
    if (nt <= 1) {
        walk_rows(&w, out, in, es, 0, rows);
        return;
    }
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static)
#endif
    for (int t = 0; t < nt; t++) walk_rows(&w, out, in, es, rows * t / nt, rows * (t + 1) / nt);
}

/* The gradient dtype: din and dout must both be float32 or both float64. */
static pd_status grad_dtype(const pd_tensor *a, const pd_tensor *b, bool *f32) {
    if (a->dtype != b->dtype)
        return pd__err(PD_ERR_INTERNAL, "gradient dtypes differ (%s, %s)", pd_dtype_name(a->dtype),
                       pd_dtype_name(b->dtype));
    if (a->dtype != PD_FLOAT && a->dtype != PD_DOUBLE)
        return pd__err(PD_ERR_UNSUPPORTED, "no backward for dtype %s (float and double only)", pd_dtype_name(a->dtype));
    *f32 = a->dtype == PD_FLOAT;
    return PD_OK;
}

static pd_status same_numel(const pd_tensor *a, const pd_tensor *b) {
    if (pd__numel_of(a) != pd__numel_of(b))
        return pd__err(PD_ERR_INTERNAL, "gradient has %lld elements, expected %lld", (long long)pd__numel_of(b),
                       (long long)pd__numel_of(a));
    return PD_OK;
}

/* d += s over n contiguous elements: own functions, so that restrict holds
 * (GCC ignores it on block-scope pointers, kept this loop scalar and merged
 * it with the strided one) and the AVX2 clone runs where it can. */
PD__VEC static void add_contig_f32(float *restrict d, const float *restrict s, int64_t n) {
    for (int64_t i = 0; i < n; i++) d[i] += s[i];
}
PD__VEC static void add_contig_f64(double *restrict d, const double *restrict s, int64_t n) {
    for (int64_t i = 0; i < n; i++) d[i] += s[i];
}

/* dst[i * ds] += src[i * ss] for i < len (strides in elements, any sign);
 * ds == 0 sums the row (in double) into dst[0]. */
#define ADD_ROW(T, contig)                                                                                             \
    do {                                                                                                               \
        T *restrict d = dst;                                                                                           \
        const T *restrict s = src;                                                                                     \
        if (ds == 1 && ss == 1) {                                                                                      \
            contig(d, s, len);                                                                                         \
        } else if (ds == 0) {                                                                                          \
            double acc = 0;                                                                                            \
            for (int64_t i = 0; i < len; i++) acc += s[i * ss];                                                        \
            d[0] += (T)acc;                                                                                            \
        } else {                                                                                                       \
            for (int64_t i = 0; i < len; i++) d[i * ds] += s[i * ss];                                                  \
        }                                                                                                              \
    } while (0)

static inline void add_row(bool f32, void *dst, int64_t ds, const void *src, int64_t ss, int64_t len) {
    if (f32)
        ADD_ROW(float, add_contig_f32);
    else
        ADD_ROW(double, add_contig_f64);
}
#undef ADD_ROW

/* dst[i * ds] = src[i * ss] for i < len: add_row into a fresh din (ds != 0). */
static inline void set_row(bool f32, void *dst, int64_t ds, const void *src, int64_t ss, int64_t len) {
    size_t es = f32 ? 4 : 8;
    if (ds == 1 && ss == 1) {
        memcpy(dst, src, (size_t)len * es);
    } else if (f32) {
        for (int64_t i = 0; i < len; i++) ((float *)dst)[i * ds] = ((const float *)src)[i * ss];
    } else {
        for (int64_t i = 0; i < len; i++) ((double *)dst)[i * ds] = ((const double *)src)[i * ss];
    }
}

/* ---- the accumulating walk -------------------------------------------------------
 * For every index tuple of a box n[k]: din[sum idx_d * ds[d]] += dout[sum idx_d * ss[d]].
 * ds[d] == 0 marks a dim that is summed over (Expand); the walk is injective
 * into din otherwise. */
typedef struct acc {
    int k;
    int64_t n[PD_MAX_DIMS];
    int64_t ds[PD_MAX_DIMS]; /* strides into din, in elements */
    int64_t ss[PD_MAX_DIMS]; /* strides into dout, in elements */
    bool set;                /* din = instead of += (pd__exec.fresh; an injective walk only) */
} acc;

/* Drops size-1 dims and merges neighbours contiguous in both din and dout. */
static void acc_simplify(acc *w) {
    int k = 0;
    for (int d = 0; d < w->k; d++) {
        if (w->n[d] == 1) continue;
        if (k > 0 && w->ds[k - 1] == w->ds[d] * w->n[d] && w->ss[k - 1] == w->ss[d] * w->n[d]) {
            w->n[k - 1] *= w->n[d];
            w->ds[k - 1] = w->ds[d];
            w->ss[k - 1] = w->ss[d];
            continue;
        }
        w->n[k] = w->n[d];
        w->ds[k] = w->ds[d];
        w->ss[k] = w->ss[d];
        k++;
    }
    w->k = k;
}

/* The whole of a simplified walk with k >= 1 (rows run along the last dim). */
static void acc_rows(const acc *w, char *dst, const char *src, size_t es, bool f32) {
    int k = w->k;
    int64_t rows = 1, idx[PD_MAX_DIMS] = {0}, doff = 0, soff = 0;
    for (int d = 0; d < k - 1; d++) rows *= w->n[d];
    for (int64_t r = 0; r < rows; r++) {
        (w->set ? set_row : add_row)(f32, dst + doff * (int64_t)es, w->ds[k - 1], src + soff * (int64_t)es,
                                     w->ss[k - 1], w->n[k - 1]);
        for (int d = k - 2; d >= 0; d--) {
            doff += w->ds[d];
            soff += w->ss[d];
            if (++idx[d] < w->n[d]) break;
            doff -= idx[d] * w->ds[d];
            soff -= idx[d] * w->ss[d];
            idx[d] = 0;
        }
    }
}

/* Runs a walk. Threads split one dim that is not summed over (the outermost
 * one long enough for every thread, else the longest), so each owns a
 * disjoint part of din. */
static void acc_run(const pd__exec *x, acc w, char *dst, const char *src, size_t es, bool f32) {
    int64_t total = 1;
    for (int d = 0; d < w.k; d++) total *= w.n[d];
    if (total == 0) return;
    acc_simplify(&w);
    if (w.k == 0) {
        (w.set ? set_row : add_row)(f32, dst, 1, src, 1, 1);
        return;
    }
    int sd = -1, want = pd__threads_for(x, total * (int64_t)es, total);
    for (int d = 0; d < w.k && want > 1; d++) {
        if (w.ds[d] == 0) continue;
        if (w.n[d] >= want) {
            sd = d;
            break;
        }
        if (sd < 0 || w.n[d] > w.n[sd]) sd = d;
    }
    int nt = sd < 0 ? 1 : pd__threads_for(x, total * (int64_t)es, w.n[sd]);
    if (nt <= 1) {
        acc_rows(&w, dst, src, es, f32);
        return;
    }
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static)
#endif
    for (int t = 0; t < nt; t++) {
        int64_t lo = w.n[sd] * t / nt, hi = w.n[sd] * (t + 1) / nt;
        if (lo == hi) continue;
        acc part = w;
        part.n[sd] = hi - lo;
        acc_rows(&part, dst + lo * w.ds[sd] * (int64_t)es, src + lo * w.ss[sd] * (int64_t)es, es, f32);
    }
}

/* A walk whose innermost dim is strided in dout while dim j (stride 1 in
 * dout) is not innermost: add TILE x TILE blocks of the (j, last) plane so
 * that reads and writes both stay within a few cache lines. */
static void acc_tiled(const pd__exec *x, const acc *w, int j, char *dst, const char *src, size_t es, bool f32) {
    int k = w->k, no = 0, outer_d[PD_MAX_DIMS];
    int64_t nouter = 1;
    for (int d = 0; d < k - 1; d++)
        if (d != j) {
            outer_d[no++] = d;
            nouter *= w->n[d];
        }
    int64_t A = w->n[j], B = w->n[k - 1];
    int64_t atiles = (A + TILE - 1) / TILE, units = nouter * atiles;
    int nt = pd__threads_for(x, nouter * A * B * (int64_t)es, units);
    PD_OMP_FOR(nt, nt > 1)
    for (int64_t u = 0; u < units; u++) {
        int64_t o = u / atiles, a0 = (u % atiles) * TILE, a1 = a0 + TILE < A ? a0 + TILE : A;
        int64_t doff = 0, soff = 0;
        for (int i = no - 1; i >= 0; i--) {
            int d = outer_d[i];
            int64_t id = o % w->n[d];
            o /= w->n[d];
            doff += id * w->ds[d];
            soff += id * w->ss[d];
        }
        for (int64_t b0 = 0; b0 < B; b0 += TILE) {
            int64_t nb = b0 + TILE < B ? TILE : B - b0;
            for (int64_t a = a0; a < a1; a++)
                (w->set ? set_row : add_row)(f32, dst + (doff + a * w->ds[j] + b0 * w->ds[k - 1]) * (int64_t)es, w->ds[k - 1],
                        src + (soff + a * w->ss[j] + b0 * w->ss[k - 1]) * (int64_t)es, w->ss[k - 1], nb);
        }
    }
}

/* ---- Flatten, Reshape, Squeeze, Unsqueeze: the bytes do not change ---------------- */
static pd_status copy_all(pd__exec *x, pd_tensor *const *in, pd_tensor *const *out) {
    size_t es;
    PD_TRY(elem_size(in[0], &es));
    int64_t k = pd__numel_of(out[0]);
    if (k != pd__numel_of(in[0]))
        return pd__err(PD_ERR_INTERNAL, "element counts differ (%lld, %lld)", (long long)pd__numel_of(in[0]),
                       (long long)k);
    par_memcpy(x, out[0]->data, in[0]->data, k * (int64_t)es);
    return PD_OK;
}

pd_status pd__cpu_Flatten(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)n;
    return copy_all(x, in, out);
}

pd_status pd__cpu_Reshape(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)n;
    return copy_all(x, in, out);
}

pd_status pd__cpu_Unsqueeze(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)n;
    return copy_all(x, in, out);
}

pd_status pd__cpu_Squeeze(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)n;
    return copy_all(x, in, out);
}

/* ---- Flatten, Reshape, Unsqueeze, Squeeze: din += dout, same element order ---------- */
static pd_status add_all(pd__exec *x, pd_tensor *const *dout, pd_tensor *const *din) {
    if (din[0] == NULL || dout[0] == NULL) return PD_OK;
    bool f32 = false;
    PD_TRY(grad_dtype(din[0], dout[0], &f32));
    PD_TRY(same_numel(din[0], dout[0]));
    acc w = {.k = 1, .n = {pd__numel_of(din[0])}, .ds = {1}, .ss = {1}, .set = pd__fresh(x, 0)};
    acc_run(x, w, din[0]->data, dout[0]->data, f32 ? 4 : 8, f32);
    return PD_OK;
}

pd_status pd__cpu_Flatten_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                              pd_tensor *const *dout, pd_tensor *const *din) {
    (void)n, (void)in, (void)out;
    return add_all(x, dout, din);
}

pd_status pd__cpu_Reshape_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                              pd_tensor *const *dout, pd_tensor *const *din) {
    (void)n, (void)in, (void)out;
    return add_all(x, dout, din);
}

pd_status pd__cpu_Unsqueeze_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                                pd_tensor *const *dout, pd_tensor *const *din) {
    (void)n, (void)in, (void)out;
    return add_all(x, dout, din);
}

pd_status pd__cpu_Squeeze_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                              pd_tensor *const *dout, pd_tensor *const *din) {
    (void)n, (void)in, (void)out;
    return add_all(x, dout, din);
}

/* ---- Transpose ------------------------------------------------------------------------ */
/* A walk whose innermost output dim is strided in the input while input dim j
 * (stride 1) lands elsewhere: copy TILE x TILE blocks of the (j, last) plane
 * so that both reads and writes stay within a few cache lines. */
static void transpose_tiled(const pd__exec *x, const walk *w, int j, char *out, const char *in, size_t es) {
    int k = w->k, no = 0, outer_d[PD_MAX_DIMS];
    int64_t ost[PD_MAX_DIMS];
    pd__strides_of(k, w->od, ost);
    int64_t nouter = 1;
    for (int d = 0; d < k - 1; d++)
        if (d != j) {
            outer_d[no++] = d;
            nouter *= w->od[d];
        }
    int64_t A = w->od[j], B = w->od[k - 1], sb = w->is[k - 1], oa = ost[j];
    int64_t atiles = (A + TILE - 1) / TILE, units = nouter * atiles;
    int nt = pd__threads_for(x, nouter * A * B * (int64_t)es, units);
    PD_OMP_FOR(nt, nt > 1)
    for (int64_t u = 0; u < units; u++) {
        int64_t o = u / atiles, a0 = (u % atiles) * TILE, a1 = a0 + TILE < A ? a0 + TILE : A;
        int64_t io = 0, oo = 0;
        for (int i = no - 1; i >= 0; i--) {
            int d = outer_d[i];
            int64_t id = o % w->od[d];
            o /= w->od[d];
            io += id * w->is[d];
            oo += id * ost[d];
        }
        for (int64_t b0 = 0; b0 < B; b0 += TILE) {
            int64_t nb = b0 + TILE < B ? TILE : B - b0;
            for (int64_t a = a0; a < a1; a++)
                copy_strided(out + (oo + a * oa + b0) * (int64_t)es, in + (io + a + b0 * sb) * (int64_t)es, nb, sb, es);
        }
    }
}

pd_status pd__cpu_Transpose(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    const pd_tensor *t = in[0];
    size_t es;
    PD_TRY(elem_size(t, &es));
    int perm[PD_MAX_DIMS];
    PD_TRY(pd__transpose_perm(n, t->ndim, perm));
    int64_t ist[PD_MAX_DIMS];
    pd__strides_of(t->ndim, t->shape, ist);
    walk w = {.k = t->ndim};
    for (int d = 0; d < t->ndim; d++) {
        w.od[d] = t->shape[perm[d]];
        w.is[d] = ist[perm[d]];
    }
    if (pd__numel_of(t) == 0) return PD_OK;
    walk_simplify(&w);
    int j = -1;
    for (int d = 0; d < w.k; d++)
        if (w.is[d] == 1) j = d;
    if (j >= 0 && j < w.k - 1 && w.od[w.k - 1] > 1) {
        transpose_tiled(x, &w, j, out[0]->data, t->data, es);
        return PD_OK;
    }
    walk_run(x, w, out[0]->data, t->data, es);
    return PD_OK;
}

/* ---- Transpose: din += dout transposed by the inverse permutation --------------------- */
pd_status pd__cpu_Transpose_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                                pd_tensor *const *dout, pd_tensor *const *din) {
    (void)out;
    if (din[0] == NULL || dout[0] == NULL) return PD_OK;
    const pd_tensor *t = in[0];
    bool f32 = false;
    PD_TRY(grad_dtype(din[0], dout[0], &f32));
    PD_TRY(same_numel(din[0], dout[0]));
    int perm[PD_MAX_DIMS], inv[PD_MAX_DIMS];
    PD_TRY(pd__transpose_perm(n, t->ndim, perm));
    int64_t oshape[PD_MAX_DIMS], ost[PD_MAX_DIMS], ist[PD_MAX_DIMS];
    for (int d = 0; d < t->ndim; d++) {
        oshape[d] = t->shape[perm[d]];
        inv[perm[d]] = d;
    }
    pd__strides_of(t->ndim, oshape, ost);
    pd__strides_of(t->ndim, t->shape, ist);
    /* walk din in its own order (contiguous writes); input dim e is output dim inv[e] */
    acc w = {.k = t->ndim, .set = pd__fresh(x, 0)};
    for (int e = 0; e < t->ndim; e++) {
        w.n[e] = t->shape[e];
        w.ds[e] = ist[e];
        w.ss[e] = ost[inv[e]];
    }
    size_t es = f32 ? 4 : 8;
    if (pd__numel_of(t) == 0) return PD_OK;
    acc_simplify(&w);
    int j = -1;
    for (int d = 0; d < w.k; d++)
        if (w.ss[d] == 1) j = d;
    if (j >= 0 && j < w.k - 1 && w.n[w.k - 1] > 1) {
        acc_tiled(x, &w, j, din[0]->data, dout[0]->data, es, f32);
        return PD_OK;
    }
    acc_run(x, w, din[0]->data, dout[0]->data, es, f32);
    return PD_OK;
}

/* ---- Concat, Split --------------------------------------------------------------------- */
pd_status pd__cpu_Concat(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    pd_tensor *o = out[0];
    size_t es;
    PD_TRY(elem_size(o, &es));
    int axis;
    int64_t ax = pd__attr_i(n, "axis", 1);
    if (!pd__norm_axis(ax, o->ndim, &axis)) return pd__err(PD_ERR_SHAPE, "axis %lld out of range", (long long)ax);
    int64_t outer = 1, inner = (int64_t)es;
    for (int d = 0; d < axis; d++) outer *= o->shape[d];
    for (int d = axis + 1; d < o->ndim; d++) inner *= o->shape[d];
    int64_t row = o->shape[axis] * inner;
    if (outer == 0 || row == 0) return PD_OK;
    int nt = pd__threads_for(x, outer * row, outer);
    PD_OMP_FOR(nt, nt > 1)
    for (int64_t r = 0; r < outer; r++) {
        int64_t off = 0;
        for (int i = 0; i < n->nin; i++) {
            int64_t len = in[i]->shape[axis] * inner;
            if (len == 0) continue;
            memcpy((char *)o->data + r * row + off, (const char *)in[i]->data + r * len, (size_t)len);
            off += len;
        }
    }
    return PD_OK;
}

pd_status pd__cpu_Split(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    const pd_tensor *t = in[0];
    size_t es;
    PD_TRY(elem_size(t, &es));
    int64_t *sizes = pd__scratch(x, (size_t)n->nout * sizeof *sizes);
    if (sizes == NULL) return PD_ERR_NOMEM;
    int axis;
    PD_TRY(pd__split_sizes(n, in, &axis, sizes));
    int64_t outer = 1, inner = (int64_t)es;
    for (int d = 0; d < axis; d++) outer *= t->shape[d];
    for (int d = axis + 1; d < t->ndim; d++) inner *= t->shape[d];
    int64_t row = t->shape[axis] * inner;
    if (outer == 0 || row == 0) return PD_OK;
    int nt = pd__threads_for(x, outer * row, outer);
    PD_OMP_FOR(nt, nt > 1)
    for (int64_t r = 0; r < outer; r++) {
        int64_t off = 0;
        for (int i = 0; i < n->nout; i++) {
            int64_t len = sizes[i] * inner;
            if (len > 0 && out[i] != NULL)
                memcpy((char *)out[i]->data + r * len, (const char *)t->data + r * row + off, (size_t)len);
            off += len;
        }
    }
    return PD_OK;
}

/* ---- Concat, Split: blocks of rows ----------------------------------------------------- */
/* The rows of a tensor split at `axis`: outer blocks of `inner` elements per index. */
static void outer_inner(const pd_tensor *t, int axis, int64_t *outer, int64_t *inner) {
    *outer = 1;
    *inner = 1;
    for (int d = 0; d < axis; d++) *outer *= t->shape[d];
    for (int d = axis + 1; d < t->ndim; d++) *inner *= t->shape[d];
}

pd_status pd__cpu_Concat_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                             pd_tensor *const *dout, pd_tensor *const *din) {
    if (dout[0] == NULL) return PD_OK;
    const pd_tensor *o = out[0];
    int axis;
    int64_t ax = pd__attr_i(n, "axis", 1), outer, inner;
    if (!pd__norm_axis(ax, o->ndim, &axis)) return pd__err(PD_ERR_SHAPE, "axis %lld out of range", (long long)ax);
    outer_inner(o, axis, &outer, &inner);
    int64_t row = o->shape[axis] * inner, off = 0;
    for (int i = 0; i < n->nin; i++) {
        int64_t len = in[i]->shape[axis] * inner;
        if (din[i] != NULL && len > 0) {
            bool f32 = false;
            PD_TRY(grad_dtype(din[i], dout[0], &f32));
            acc w = {.k = 2, .n = {outer, len}, .ds = {len, 1}, .ss = {row, 1}};
            size_t es = f32 ? 4 : 8;
            acc_run(x, w, din[i]->data, (const char *)dout[0]->data + off * (int64_t)es, es, f32);
        }
        off += len;
    }
    return PD_OK;
}

pd_status pd__cpu_Split_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                            pd_tensor *const *dout, pd_tensor *const *din) {
    (void)out;
    if (din[0] == NULL) return PD_OK;
    const pd_tensor *t = in[0];
    int64_t *sizes = pd__scratch(x, (size_t)n->nout * sizeof *sizes);
    if (sizes == NULL) return PD_ERR_NOMEM;
    int axis;
    PD_TRY(pd__split_sizes(n, in, &axis, sizes));
    int64_t outer, inner;
    outer_inner(t, axis, &outer, &inner);
    int64_t row = t->shape[axis] * inner, off = 0;
    bool fresh = pd__fresh(x, 0); /* din holds nothing yet: each part is written, a part without gradient zeroed */
    size_t es = din[0]->dtype == PD_DOUBLE ? 8 : 4;
    for (int j = 0; j < n->nout; j++) {
        int64_t len = sizes[j] * inner;
        if (dout[j] != NULL && len > 0) {
            bool f32 = false;
            PD_TRY(grad_dtype(din[0], dout[j], &f32));
            acc w = {.k = 2, .n = {outer, len}, .ds = {row, 1}, .ss = {len, 1}, .set = fresh};
            acc_run(x, w, (char *)din[0]->data + off * (int64_t)es, dout[j]->data, es, f32);
        } else if (fresh && len > 0) {
            for (int64_t o = 0; o < outer; o++) memset((char *)din[0]->data + (o * row + off) * (int64_t)es, 0, (size_t)len * es);
        }
        off += len;
    }
    return PD_OK;
}

/* ---- Slice, Expand ------------------------------------------------------------------------ */
pd_status pd__cpu_Slice(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    const pd_tensor *t = in[0];
    size_t es;
    PD_TRY(elem_size(t, &es));
    pd__slice_params p;
    PD_TRY(pd__slice_resolve(n, in, &p));
    int64_t ist[PD_MAX_DIMS], base = 0;
    pd__strides_of(t->ndim, t->shape, ist);
    walk w = {.k = t->ndim};
    for (int d = 0; d < t->ndim; d++) {
        if (p.count[d] == 0) return PD_OK;
        w.od[d] = p.count[d];
        w.is[d] = p.step[d] * ist[d];
        base += p.start[d] * ist[d];
    }
    walk_run(x, w, out[0]->data, (const char *)t->data + base * (int64_t)es, es);
    return PD_OK;
}

pd_status pd__cpu_Expand(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)n;
    const pd_tensor *t = in[0];
    pd_tensor *o = out[0];
    size_t es;
    PD_TRY(elem_size(t, &es));
    int64_t ist[PD_MAX_DIMS];
    pd__strides_of(t->ndim, t->shape, ist);
    walk w = {.k = o->ndim};
    int lead = o->ndim - t->ndim;
    if (lead < 0) return pd__err(PD_ERR_INTERNAL, "output rank %d below input rank %d", o->ndim, t->ndim);
    for (int d = 0; d < o->ndim; d++) {
        int id = d - lead;
        w.od[d] = o->shape[d];
        w.is[d] = (id < 0 || t->shape[id] == 1) ? 0 : ist[id];
        if (id >= 0 && t->shape[id] != 1 && t->shape[id] != o->shape[d])
            return pd__err(PD_ERR_INTERNAL, "cannot expand dim %d from %lld to %lld", d, (long long)t->shape[id],
                           (long long)o->shape[d]);
    }
    if (pd__numel_of(o) == 0) return PD_OK;
    walk_run(x, w, o->data, t->data, es);
    return PD_OK;
}

/* ---- Slice, Expand: backward --------------------------------------------------------------------- */
pd_status pd__cpu_Slice_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                            pd_tensor *const *dout, pd_tensor *const *din) {
    (void)out;
    if (din[0] == NULL || dout[0] == NULL) return PD_OK;
    const pd_tensor *t = in[0];
    bool f32 = false;
    PD_TRY(grad_dtype(din[0], dout[0], &f32));
    pd__slice_params p;
    PD_TRY(pd__slice_resolve(n, in, &p));
    int64_t ist[PD_MAX_DIMS], ost[PD_MAX_DIMS], base = 0;
    pd__strides_of(t->ndim, t->shape, ist);
    pd__strides_of(t->ndim, p.count, ost);
    acc w = {.k = t->ndim};
    for (int d = 0; d < t->ndim; d++) {
        if (p.count[d] == 0) return PD_OK;
        w.n[d] = p.count[d];
        w.ds[d] = p.step[d] * ist[d];
        w.ss[d] = ost[d];
        base += p.start[d] * ist[d];
    }
    if (pd__numel_of(dout[0]) != pd__shape_numel(t->ndim, p.count))
        return pd__err(PD_ERR_INTERNAL, "gradient does not have the slice's shape");
    size_t es = f32 ? 4 : 8;
    acc_run(x, w, (char *)din[0]->data + base * (int64_t)es, dout[0]->data, es, f32);
    return PD_OK;
}

pd_status pd__cpu_Expand_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                             pd_tensor *const *dout, pd_tensor *const *din) {
    (void)n;
    if (din[0] == NULL || dout[0] == NULL) return PD_OK;
    const pd_tensor *t = in[0], *o = out[0];
    bool f32 = false;
    PD_TRY(grad_dtype(din[0], dout[0], &f32));
    int lead = o->ndim - t->ndim;
    if (lead < 0) return pd__err(PD_ERR_INTERNAL, "output rank %d below input rank %d", o->ndim, t->ndim);
    int64_t ist[PD_MAX_DIMS], ost[PD_MAX_DIMS];
    pd__strides_of(t->ndim, t->shape, ist);
    pd__strides_of(o->ndim, o->shape, ost);
    acc w = {.k = o->ndim};
    for (int d = 0; d < o->ndim; d++) {
        int id = d - lead;
        if (id >= 0 && t->shape[id] != 1 && t->shape[id] != o->shape[d])
            return pd__err(PD_ERR_INTERNAL, "cannot expand dim %d from %lld to %lld", d, (long long)t->shape[id],
                           (long long)o->shape[d]);
        w.n[d] = o->shape[d];
        w.ds[d] = (id < 0 || t->shape[id] == 1) ? 0 : ist[id]; /* 0: summed over */
        w.ss[d] = ost[d];
    }
    acc_run(x, w, din[0]->data, dout[0]->data, f32 ? 4 : 8, f32);
    return PD_OK;
}

/* ---- Gather ------------------------------------------------------------------------------- */
pd_status pd__cpu_Gather(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    const pd_tensor *t = in[0], *ind = in[1];
    size_t es;
    PD_TRY(elem_size(t, &es));
    int axis;
    int64_t ax = pd__attr_i(n, "axis", 0);
    if (!pd__norm_axis(ax, t->ndim, &axis)) return pd__err(PD_ERR_SHAPE, "axis %lld out of range", (long long)ax);
    int64_t N = t->shape[axis], nidx = pd__numel_of(ind), outer = 1, inner = (int64_t)es;
    for (int d = 0; d < axis; d++) outer *= t->shape[d];
    for (int d = axis + 1; d < t->ndim; d++) inner *= t->shape[d];
    for (int64_t j = 0; j < nidx; j++) {
        int64_t v = pd__get_i(ind->dtype, ind->data, j);
        if (v < -N || v >= N)
            return pd__err(PD_ERR_INVALID, "index %lld out of range [-%lld, %lld)", (long long)v, (long long)N,
                           (long long)N);
    }
    int64_t units = outer * nidx;
    if (units == 0 || inner == 0) return PD_OK;
    int nt = pd__threads_for(x, units * inner, units);
    char *dst = out[0]->data;
    const char *src = t->data;
    PD_OMP_FOR(nt, nt > 1)
    for (int64_t u = 0; u < units; u++) {
        int64_t r = u / nidx, v = pd__get_i(ind->dtype, ind->data, u % nidx);
        if (v < 0) v += N;
        memcpy(dst + u * inner, src + (r * N + v) * inner, (size_t)inner);
    }
    return PD_OK;
}

/* ---- Gather: scatter-add rows of dout at the indices ------------------------------------ */
/* din[r, idx[j], c] += dout[r, j, c] for r in [r0, r1), c in [c0, c1). */
static void gather_add(char *dst, const char *src, const int64_t *idx, int64_t nidx, int64_t N, int64_t inner,
                       size_t es, bool f32, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    for (int64_t r = r0; r < r1; r++)
        for (int64_t j = 0; j < nidx; j++)
            add_row(f32, dst + ((r * N + idx[j]) * inner + c0) * (int64_t)es, 1,
                    src + ((r * nidx + j) * inner + c0) * (int64_t)es, 1, c1 - c0);
}

pd_status pd__cpu_Gather_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                             pd_tensor *const *dout, pd_tensor *const *din) {
    (void)out;
    if (din[0] == NULL || dout[0] == NULL) return PD_OK;
    const pd_tensor *t = in[0], *ind = in[1];
    bool f32 = false;
    PD_TRY(grad_dtype(din[0], dout[0], &f32));
    int axis;
    int64_t ax = pd__attr_i(n, "axis", 0);
    if (!pd__norm_axis(ax, t->ndim, &axis)) return pd__err(PD_ERR_SHAPE, "axis %lld out of range", (long long)ax);
    int64_t N = t->shape[axis], nidx = pd__numel_of(ind), outer, inner;
    outer_inner(t, axis, &outer, &inner);
    if (pd__numel_of(dout[0]) != outer * nidx * inner)
        return pd__err(PD_ERR_INTERNAL, "gradient does not have the gathered shape");
    if (outer * nidx * inner == 0) return PD_OK;
    /* indices, checked and made non-negative before anything is added */
    int64_t *idx = pd__scratch(x, (size_t)nidx * sizeof *idx);
    if (idx == NULL) return PD_ERR_NOMEM;
    for (int64_t j = 0; j < nidx; j++) {
        int64_t v = pd__get_i(ind->dtype, ind->data, j);
        if (v < -N || v >= N)
            return pd__err(PD_ERR_INVALID, "index %lld out of range [-%lld, %lld)", (long long)v, (long long)N,
                           (long long)N);
        idx[j] = v < 0 ? v + N : v;
    }
    size_t es = f32 ? 4 : 8;
    char *dst = din[0]->data;
    const char *src = dout[0]->data;
    /* Repeated indices add into the same din row, so threads split what they
     * own: the outer blocks when there are enough, else the columns of a row
     * (an embedding table's backward: outer = 1, rows of `width` columns). */
    int64_t bytes = outer * nidx * inner * (int64_t)es, cgroups = (inner + 15) / 16;
    int nt = pd__threads_for(x, bytes, outer > cgroups ? outer : cgroups);
    if (nt <= 1) {
        gather_add(dst, src, idx, nidx, N, inner, es, f32, 0, outer, 0, inner);
        return PD_OK;
    }
    bool by_outer = outer >= nt;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static)
#endif
    for (int th = 0; th < nt; th++) {
        if (by_outer) {
            gather_add(dst, src, idx, nidx, N, inner, es, f32, outer * th / nt, outer * (th + 1) / nt, 0, inner);
        } else {
            int64_t c0 = cgroups * th / nt * 16, c1 = cgroups * (th + 1) / nt * 16;
            if (c1 > inner) c1 = inner;
            if (c0 < c1) gather_add(dst, src, idx, nidx, N, inner, es, f32, 0, outer, c0, c1);
        }
    }
    return PD_OK;
}

/* ---- Pad ------------------------------------------------------------------------------------ */
static void fill(char *dst, const unsigned char *val, int64_t count, size_t es) {
    for (int64_t i = 0; i < count; i++) memcpy(dst + i * (int64_t)es, val, es);
}

/* Output rows [r0, r1) of a Pad (a row runs along the last axis). */
static void pad_rows(const pd_tensor *t, pd_tensor *o, const pd__pad_params *p, const unsigned char *val, size_t es,
                     int64_t r0, int64_t r1) {
    int r = t->ndim;
    int64_t ist[PD_MAX_DIMS], L = o->shape[r - 1], D = t->shape[r - 1], b = p->begin[r - 1];
    pd__strides_of(r, t->shape, ist);
    int64_t lo = b > 0 ? b : 0, hi = D + b < L ? D + b : L; /* the run copied as is */
    for (int64_t row = r0; row < r1; row++) {
        char *dst = (char *)o->data + row * L * (int64_t)es;
        int64_t rem = row, off = 0;
        bool inside = true;
        for (int d = r - 2; d >= 0 && inside; d--) {
            int64_t s = pd__pad_src(p->mode, rem % o->shape[d], p->begin[d], t->shape[d]);
            rem /= o->shape[d];
            if (s < 0) inside = false;
            off += s * ist[d];
        }
        if (!inside) {
            fill(dst, val, L, es);
            continue;
        }
        const char *src = (const char *)t->data + off * (int64_t)es;
        if (lo < hi) memcpy(dst + lo * (int64_t)es, src + (lo - b) * (int64_t)es, (size_t)(hi - lo) * es);
        for (int64_t e = 0; e < L; e++) {
            if (e == lo && lo < hi) e = hi;
            if (e >= L) break;
            int64_t s = pd__pad_src(p->mode, e, b, D);
            memcpy(dst + e * (int64_t)es, s < 0 ? (const char *)val : src + s * (int64_t)es, es);
        }
    }
}

pd_status pd__cpu_Pad(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    const pd_tensor *t = in[0];
    pd_tensor *o = out[0];
    size_t es;
    PD_TRY(elem_size(t, &es));
    pd__pad_params p;
    PD_TRY(pd__pad_resolve(n, in, &p));
    unsigned char val[16] = {0};
    const pd_tensor *cv = n->nin > 2 ? in[2] : NULL;
    if (cv != NULL) {
        if (pd__numel_of(cv) > 0) memcpy(val, cv->data, es);
    } else if (es <= sizeof val) {
        pd__set_f(t->dtype, val, 0, pd__attr_f(n, "value", 0.0f));
    }
    if (pd__numel_of(o) == 0) return PD_OK;
    if (t->ndim == 0) {
        memcpy(o->data, t->data, es);
        return PD_OK;
    }
    if (pd__numel_of(t) == 0) { /* constant mode only (checked by the resolver) */
        fill(o->data, val, pd__numel_of(o), es);
        return PD_OK;
    }
    int64_t rows = pd__numel_of(o) / o->shape[t->ndim - 1];
    int nt = pd__threads_for(x, pd__numel_of(o) * (int64_t)es, rows);
    if (nt <= 1) {
        pad_rows(t, o, &p, val, es, 0, rows);
        return PD_OK;
    }
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static)
#endif
    for (int i = 0; i < nt; i++) pad_rows(t, o, &p, val, es, rows * i / nt, rows * (i + 1) / nt);
    return PD_OK;
}

/* ---- Pad: backward ------------------------------------------------------------------------------------ */
/* Which output positions of each outer axis read each input position:
 * pre[d] lists them, bucket i being pre[d][start[d][i] .. start[d][i + 1]).
 * (The last axis is mapped element by element with pd__pad_src.) */
typedef struct pad_map {
    int64_t *start[PD_MAX_DIMS];
    int64_t *pre[PD_MAX_DIMS];
} pad_map;

/* din rows [r0, r1) (a row runs along the last axis) of a Pad's backward: each
 * gathers the dout rows that read it, folding each along the last axis. */
static void pad_rows_bwd(const pd_tensor *t, const pd_tensor *o, const pd__pad_params *p, const pad_map *m, char *dst,
                     const char *src, size_t es, bool f32, int64_t r0, int64_t r1) {
    int r = t->ndim, k = r - 1;
    int64_t D = t->shape[k], L = o->shape[k], b = p->begin[k];
    int64_t lo = b > 0 ? b : 0, hi = D + b < L ? D + b : L; /* the run of dout read as is */
    int64_t orow[PD_MAX_DIMS];                              /* dout row strides, in rows */
    pd__strides_of(k, o->shape, orow);
    for (int64_t row = r0; row < r1; row++) {
        int64_t id[PD_MAX_DIMS], rem = row, pos[PD_MAX_DIMS], off = 0;
        bool empty = false;
        for (int d = k - 1; d >= 0; d--) {
            id[d] = rem % t->shape[d];
            rem /= t->shape[d];
            pos[d] = m->start[d][id[d]];
            if (pos[d] == m->start[d][id[d] + 1])
                empty = true;
            else
                off += m->pre[d][pos[d]] * orow[d];
        }
        if (empty) continue;
        char *drow = dst + row * D * (int64_t)es;
        for (;;) {
            const char *srow = src + off * L * (int64_t)es;
            if (lo < hi) add_row(f32, drow + (lo - b) * (int64_t)es, 1, srow + lo * (int64_t)es, 1, hi - lo);
            for (int64_t e = 0; e < L; e++) {
                if (e == lo && lo < hi) e = hi;
                if (e >= L) break;
                int64_t s = pd__pad_src(p->mode, e, b, D);
                if (s >= 0) add_row(f32, drow + s * (int64_t)es, 1, srow + e * (int64_t)es, 1, 1);
            }
            /* next combination of preimages of the outer coordinates */
            int d = k - 1;
            for (; d >= 0; d--) {
                off -= m->pre[d][pos[d]] * orow[d];
                if (++pos[d] < m->start[d][id[d] + 1]) {
                    off += m->pre[d][pos[d]] * orow[d];
                    break;
                }
                pos[d] = m->start[d][id[d]];
                off += m->pre[d][pos[d]] * orow[d];
            }
            if (d < 0) break;
        }
    }
}

pd_status pd__cpu_Pad_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                          pd_tensor *const *dout, pd_tensor *const *din) {
    if (din[0] == NULL || dout[0] == NULL) return PD_OK;
    const pd_tensor *t = in[0], *o = out[0];
    bool f32 = false;
    PD_TRY(grad_dtype(din[0], dout[0], &f32));
    pd__pad_params p;
    PD_TRY(pd__pad_resolve(n, in, &p));
    size_t es = f32 ? 4 : 8;
    if (pd__numel_of(t) == 0 || pd__numel_of(o) == 0) return PD_OK;
    if (t->ndim == 0) {
        add_row(f32, din[0]->data, 1, dout[0]->data, 1, 1);
        return PD_OK;
    }
    int r = t->ndim, k = r - 1;
    /* preimage buckets of the outer axes, in one scratch block */
    size_t words = 0;
    for (int d = 0; d < k; d++) words += (size_t)(t->shape[d] + 1 + o->shape[d] + t->shape[d]);
    int64_t *mem = pd__scratch(x, (words + 1) * sizeof *mem);
    if (mem == NULL) return PD_ERR_NOMEM;
    pad_map m = {{0}, {0}};
    for (int d = 0; d < k; d++) {
        int64_t D = t->shape[d], L = o->shape[d], *start = mem, *pre = mem + D + 1, *cur = pre + L;
        mem = cur + D;
        memset(start, 0, (size_t)(D + 1) * sizeof *start);
        for (int64_t e = 0; e < L; e++) {
            int64_t s = pd__pad_src(p.mode, e, p.begin[d], D);
            if (s >= 0) start[s + 1]++;
        }
        for (int64_t i = 0; i < D; i++) start[i + 1] += start[i];
        memcpy(cur, start, (size_t)D * sizeof *cur);
        for (int64_t e = 0; e < L; e++) {
            int64_t s = pd__pad_src(p.mode, e, p.begin[d], D);
            if (s >= 0) pre[cur[s]++] = e;
        }
        m.start[d] = start;
        m.pre[d] = pre;
    }
    int64_t rows = pd__numel_of(t) / t->shape[k];
    int nt = pd__threads_for(x, pd__numel_of(o) * (int64_t)es, rows);
    if (nt <= 1) {
        pad_rows_bwd(t, o, &p, &m, din[0]->data, dout[0]->data, es, f32, 0, rows);
        return PD_OK;
    }
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static)
#endif
    for (int i = 0; i < nt; i++)
        pad_rows_bwd(t, o, &p, &m, din[0]->data, dout[0]->data, es, f32, rows * i / nt, rows * (i + 1) / nt);
    return PD_OK;
}

/* ---- Constant, Shape, ConstantOfShape, Range ------------------------------------------------ */
pd_status pd__cpu_Constant(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)in;
    pd_tensor v;
    PD_TRY(pd__constant_value(n, &v));
    if (v.dtype != out[0]->dtype || pd__numel_of(&v) != pd__numel_of(out[0]))
        return pd__err(PD_ERR_INTERNAL, "output does not match the constant's dtype or size");
    par_memcpy(x, out[0]->data, v.data, pd__numel_of(&v) * (int64_t)pd_dtype_size(v.dtype));
    return PD_OK;
}

pd_status pd__cpu_Shape(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)x;
    int start, end;
    pd__shape_span(n, in[0]->ndim, &start, &end);
    for (int d = start; d < end; d++) pd__set_i(out[0]->dtype, out[0]->data, d - start, in[0]->shape[d]);
    return PD_OK;
}

pd_status pd__cpu_ConstantOfShape(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)in;
    pd_tensor v;
    float zero;
    PD_TRY(pd__constant_of_shape_value(n, &v, &zero));
    size_t es = pd_dtype_size(v.dtype);
    int64_t k = pd__numel_of(out[0]);
    if (v.dtype != out[0]->dtype) return pd__err(PD_ERR_INTERNAL, "output dtype does not match the value's");
    if (k == 0) return PD_OK;
    bool zeros = true;
    for (size_t i = 0; i < es; i++) zeros = zeros && ((const unsigned char *)v.data)[i] == 0;
    if (zeros) {
        memset(out[0]->data, 0, (size_t)k * es);
        return PD_OK;
    }
    int nt = pd__threads_for(x, k * (int64_t)es, k);
    PD_OMP_FOR(nt, nt > 1)
    for (int i = 0; i < nt; i++)
        fill((char *)out[0]->data + k * i / nt * (int64_t)es, v.data, k * (i + 1) / nt - k * i / nt, es);
    return PD_OK;
}

pd_status pd__cpu_Range(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)x;
    int64_t count;
    PD_TRY(pd__range_count(n->nin > 0 ? in[0] : NULL, n->nin > 1 ? in[1] : NULL, n->nin > 2 ? in[2] : NULL, &count));
    pd_tensor *o = out[0];
    if (count != pd__numel_of(o))
        return pd__err(PD_ERR_INTERNAL, "range has %lld elements, output %lld", (long long)count,
                       (long long)pd__numel_of(o));
    pd_dtype dt = in[0]->dtype;
    if (dt == PD_FLOAT || dt == PD_DOUBLE || dt == PD_FLOAT16 || dt == PD_BFLOAT16) {
        double s = pd__get_f(dt, in[0]->data, 0), d = pd__get_f(dt, in[2]->data, 0);
        for (int64_t i = 0; i < count; i++) pd__set_f(dt, o->data, i, s + (double)i * d);
    } else {
        int64_t s = pd__get_i(dt, in[0]->data, 0), d = pd__get_i(dt, in[2]->data, 0);
        for (int64_t i = 0; i < count; i++) pd__set_i(dt, o->data, i, s + i * d);
    }
    return PD_OK;
}

/* ---- Constant, Shape, ConstantOfShape, Range: no gradient ------------------------------------- */
#define PD__NO_GRAD(name)                                                                                              \
    pd_status pd__cpu_##name##_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,        \
                                   pd_tensor *const *dout, pd_tensor *const *din) {                                    \
        (void)x, (void)n, (void)in, (void)out, (void)dout, (void)din;                                                  \
        return pd__err(PD_ERR_UNSUPPORTED, "%s is not differentiable", #name);                                         \
    }
PD__NO_GRAD(Constant)
PD__NO_GRAD(Shape)
PD__NO_GRAD(ConstantOfShape)
PD__NO_GRAD(Range)

/* ==== mask-building, index, selection and layout ops =========================================
 * CumSum, Trilu, Size, Tile, OneHot; GatherElements, GatherND, ScatterElements,
 * ScatterND; ArgMax, ArgMin, TopK, Hardmax; DepthToSpace, SpaceToDepth. Their
 * parameters come from core/shape_tensor.h like the ops above. */

/* ---- element arithmetic for the ops that compute (CumSum, the scatter reductions,
 * the comparisons): float types through double, integers through 64 bits ---- */
static bool is_float_dt(pd_dtype t) { return t == PD_FLOAT || t == PD_DOUBLE || t == PD_FLOAT16 || t == PD_BFLOAT16; }
static bool is_unsigned_dt(pd_dtype t) { return t == PD_UINT8 || t == PD_UINT16 || t == PD_UINT32 || t == PD_UINT64; }

/* <0, 0, >0 as a[i] is below, equal to, above b[j] (NaN compares equal to everything). */
static inline int cmp_elem(pd_dtype dt, const void *a, int64_t i, const void *b, int64_t j) {
    if (is_float_dt(dt)) {
        double x = pd__get_f(dt, a, i), y = pd__get_f(dt, b, j);
        return (x > y) - (x < y);
    }
    if (is_unsigned_dt(dt)) {
        uint64_t x = (uint64_t)pd__get_i(dt, a, i), y = (uint64_t)pd__get_i(dt, b, j);
        return (x > y) - (x < y);
    }
    int64_t x = pd__get_i(dt, a, i), y = pd__get_i(dt, b, j);
    return (x > y) - (x < y);
}

/* The blocks of a tensor around `axis`: outer x len x inner. */
static void around_axis(const pd_tensor *t, int axis, int64_t *outer, int64_t *len, int64_t *inner) {
    outer_inner(t, axis, outer, inner);
    *len = t->shape[axis];
}

/* ---- CumSum, CumProd ------------------------------------------------------------------------ */
/* dst (+)= the running sums (prod: products) of src along the middle dim of
 * outer x len x inner, from the back when rev, each one short of its own
 * element when excl. acc holds `inner` running values (double for float
 * types, uint64 for integers, whose low bits wrap as the type's). */
static void cum_run(pd_dtype dt, void *dst, const void *src, int64_t outer, int64_t len, int64_t inner, bool excl,
                    bool rev, bool add, bool prod, void *acc) {
    bool fl = is_float_dt(dt);
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t i = 0; i < inner; i++) {
            if (fl) ((double *)acc)[i] = prod ? 1 : 0;
            else ((uint64_t *)acc)[i] = prod ? 1 : 0;
        }
        for (int64_t j = 0; j < len; j++) {
            int64_t base = (o * len + (rev ? len - 1 - j : j)) * inner;
            if (dt == PD_FLOAT || dt == PD_DOUBLE) {
                double *a = acc;
                for (int64_t i = 0; i < inner; i++) {
                    double v = dt == PD_FLOAT ? ((const float *)src)[base + i] : ((const double *)src)[base + i];
                    double r = prod ? a[i] * v : a[i] + v, s = excl ? a[i] : r;
                    a[i] = r;
                    if (dt == PD_FLOAT)
                        ((float *)dst)[base + i] = add ? (float)s + ((float *)dst)[base + i] : (float)s;
                    else
                        ((double *)dst)[base + i] = add ? s + ((double *)dst)[base + i] : s;
                }
            } else if (fl) {
                double *a = acc;
                for (int64_t i = 0; i < inner; i++) {
                    double v = pd__get_f(dt, src, base + i), r = prod ? a[i] * v : a[i] + v, s = excl ? a[i] : r;
                    a[i] = r;
                    pd__set_f(dt, dst, base + i, s);
                }
            } else {
                uint64_t *a = acc;
                for (int64_t i = 0; i < inner; i++) {
                    uint64_t v = (uint64_t)pd__get_i(dt, src, base + i), r = prod ? a[i] * v : a[i] + v;
                    uint64_t s = excl ? a[i] : r;
                    a[i] = r;
                    pd__set_i(dt, dst, base + i, (int64_t)s);
                }
            }
        }
    }
}

/* CumSum's and CumProd's forward. */
static pd_status cum_forward(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out, bool prod) {
    const pd_tensor *t = in[0];
    int axis;
    PD_TRY(pd__cumsum_axis(t, n->nin > 1 ? in[1] : NULL, &axis));
    int64_t outer, len, inner;
    around_axis(t, axis, &outer, &len, &inner);
    if (outer * len * inner == 0) return PD_OK;
    void *acc = pd__scratch(x, (size_t)inner * 8);
    if (acc == NULL) return PD_ERR_NOMEM;
    cum_run(t->dtype, out[0]->data, t->data, outer, len, inner, pd__attr_i(n, "exclusive", 0) != 0,
            pd__attr_i(n, "reverse", 0) != 0, false, prod, acc);
    return PD_OK;
}

pd_status pd__cpu_CumSum(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    return cum_forward(x, n, in, out, false);
}

/* The backward of a cumulative sum is the cumulative sum the other way round. */
pd_status pd__cpu_CumSum_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                             pd_tensor *const *dout, pd_tensor *const *din) {
    (void)out;
    if (din[0] == NULL || dout[0] == NULL) return PD_OK;
    bool f32 = false;
    PD_TRY(grad_dtype(din[0], dout[0], &f32));
    PD_TRY(same_numel(din[0], dout[0]));
    int axis;
    PD_TRY(pd__cumsum_axis(in[0], n->nin > 1 ? in[1] : NULL, &axis));
    int64_t outer, len, inner;
    around_axis(in[0], axis, &outer, &len, &inner);
    if (outer * len * inner == 0) return PD_OK;
    void *acc = pd__scratch(x, (size_t)inner * 8);
    if (acc == NULL) return PD_ERR_NOMEM;
    cum_run(din[0]->dtype, din[0]->data, dout[0]->data, outer, len, inner, pd__attr_i(n, "exclusive", 0) != 0,
            pd__attr_i(n, "reverse", 0) == 0, true, false, acc);
    return PD_OK;
}

/* ---- CumProd -------------------------------------------------------------------------------- */
pd_status pd__cpu_CumProd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    return cum_forward(x, n, in, out, true);
}

/* Without dividing by x, so that zeros are exact: along the walk order
 * (reversed when rev), y_j = P_j x_j (inclusive) or P_j (exclusive), P_j the
 * product of the x before j. Then dx_k = P_k S_k, where S_k sums dy_j times
 * the x strictly between k and j: S_k = dy_k + x_{k+1} S_{k+1} (inclusive),
 * S_k = dy_{k+1} + x_{k+1} S_{k+1} (exclusive), S past the end 0. */
pd_status pd__cpu_CumProd_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                              pd_tensor *const *dout, pd_tensor *const *din) {
    (void)out;
    if (din[0] == NULL || dout[0] == NULL) return PD_OK;
    bool f32 = false;
    PD_TRY(grad_dtype(din[0], dout[0], &f32));
    PD_TRY(grad_dtype(in[0], dout[0], &f32));
    PD_TRY(same_numel(din[0], dout[0]));
    int axis;
    PD_TRY(pd__cumsum_axis(in[0], n->nin > 1 ? in[1] : NULL, &axis));
    int64_t outer, len, inner;
    around_axis(in[0], axis, &outer, &len, &inner);
    if (outer * len * inner == 0) return PD_OK;
    bool excl = pd__attr_i(n, "exclusive", 0) != 0, rev = pd__attr_i(n, "reverse", 0) != 0;
    double *S = pd__scratch(x, (size_t)(len + 1) * (size_t)inner * sizeof(double));
    if (S == NULL) return PD_ERR_NOMEM;
    double *P = S + len * inner;
    const void *xs = in[0]->data, *dy = dout[0]->data;
    void *dx = din[0]->data;
#define LD(p, k) (f32 ? (double)((const float *)(p))[k] : ((const double *)(p))[k])
    for (int64_t o = 0; o < outer; o++) {
        int64_t base[2] = {0, 0}; /* of positions j and j + 1 in walk order */
        for (int64_t j = len - 1; j >= 0; j--) {
            base[1] = base[0];
            base[0] = (o * len + (rev ? len - 1 - j : j)) * inner;
            double *s = S + j * inner, *s1 = s + inner;
            for (int64_t i = 0; i < inner; i++) {
                if (j == len - 1) s[i] = excl ? 0 : LD(dy, base[0] + i);
                else s[i] = LD(dy, base[excl ? 1 : 0] + i) + LD(xs, base[1] + i) * s1[i];
            }
        }
        for (int64_t i = 0; i < inner; i++) P[i] = 1;
        for (int64_t j = 0; j < len; j++) {
            int64_t b = (o * len + (rev ? len - 1 - j : j)) * inner;
            const double *s = S + j * inner;
            for (int64_t i = 0; i < inner; i++) {
                double g = P[i] * s[i];
                if (f32) ((float *)dx)[b + i] += (float)g;
                else ((double *)dx)[b + i] += g;
                P[i] *= LD(xs, b + i);
            }
        }
    }
#undef LD
    return PD_OK;
}

/* ---- Trilu ---------------------------------------------------------------------------------- */
/* The columns [*lo, *hi) that row i of a cols-wide matrix keeps. */
static void trilu_keep(bool upper, int64_t k, int64_t i, int64_t cols, int64_t *lo, int64_t *hi) {
    int64_t e; /* upper keeps j >= i + k, lower keeps j <= i + k; a huge k saturates */
    if (__builtin_add_overflow(i, k, &e)) e = k > 0 ? INT64_MAX - 1 : INT64_MIN + 1;
    if (e == INT64_MAX) e = INT64_MAX - 1;
    if (upper) {
        *lo = e < 0 ? 0 : e > cols ? cols : e;
        *hi = cols;
    } else {
        *lo = 0;
        *hi = e + 1 < 0 ? 0 : e + 1 > cols ? cols : e + 1;
    }
}

pd_status pd__cpu_Trilu(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)x;
    const pd_tensor *t = in[0];
    size_t es;
    PD_TRY(elem_size(t, &es));
    int64_t k;
    PD_TRY(pd__trilu_k(n, in, &k));
    bool upper = pd__attr_i(n, "upper", 1) != 0;
    int r = t->ndim;
    int64_t rows = t->shape[r - 2], cols = t->shape[r - 1], mats = pd__numel_of(t) / (rows * cols > 0 ? rows * cols : 1);
    if (rows * cols == 0) return PD_OK;
    char *dst = out[0]->data;
    const char *src = t->data;
    memset(dst, 0, (size_t)(mats * rows * cols) * es);
    for (int64_t m = 0; m < mats * rows; m++) {
        int64_t lo, hi, off = m * cols * (int64_t)es;
        trilu_keep(upper, k, m % rows, cols, &lo, &hi);
        if (lo < hi) memcpy(dst + off + lo * (int64_t)es, src + off + lo * (int64_t)es, (size_t)(hi - lo) * es);
    }
    return PD_OK;
}

/* din += dout where the forward kept the input. */
pd_status pd__cpu_Trilu_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                            pd_tensor *const *dout, pd_tensor *const *din) {
    (void)x, (void)out;
    if (din[0] == NULL || dout[0] == NULL) return PD_OK;
    bool f32 = false;
    PD_TRY(grad_dtype(din[0], dout[0], &f32));
    PD_TRY(same_numel(din[0], dout[0]));
    int64_t k;
    PD_TRY(pd__trilu_k(n, in, &k));
    bool upper = pd__attr_i(n, "upper", 1) != 0;
    const pd_tensor *t = in[0];
    int r = t->ndim;
    int64_t rows = t->shape[r - 2], cols = t->shape[r - 1], es = f32 ? 4 : 8;
    if (rows * cols == 0) return PD_OK;
    int64_t nrows = pd__numel_of(t) / cols;
    for (int64_t m = 0; m < nrows; m++) {
        int64_t lo, hi, off = (m * cols) * es;
        trilu_keep(upper, k, m % rows, cols, &lo, &hi);
        if (lo < hi)
            add_row(f32, (char *)din[0]->data + off + lo * es, 1, (const char *)dout[0]->data + off + lo * es, 1,
                    hi - lo);
    }
    return PD_OK;
}

/* ---- Size ----------------------------------------------------------------------------------- */
pd_status pd__cpu_Size(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)x, (void)n;
    pd__set_i(PD_INT64, out[0]->data, 0, pd__numel_of(in[0]));
    return PD_OK;
}

/* ---- Tile ----------------------------------------------------------------------------------- */
/* The box Tile walks, in output order: per axis, its repeat count (when not
 * 1) then the axis; is: input strides (0 along a repeat), os: output strides. */
static pd_status tile_box(const pd__node *n, pd_tensor *const *in, int *k, int64_t *box, int64_t *is, int64_t *os) {
    const pd_tensor *t = in[0];
    int64_t rep[PD_MAX_DIMS], ist[PD_MAX_DIMS], oshape[PD_MAX_DIMS], ost[PD_MAX_DIMS];
    PD_TRY(pd__tile_repeats(n, in, rep));
    pd__strides_of(t->ndim, t->shape, ist);
    for (int d = 0; d < t->ndim; d++) oshape[d] = t->shape[d] * rep[d];
    pd__strides_of(t->ndim, oshape, ost);
    *k = 0;
    for (int d = 0; d < t->ndim; d++) {
        if (rep[d] != 1) {
            box[*k] = rep[d];
            is[*k] = 0;
            os[(*k)++] = t->shape[d] * ost[d];
        }
        box[*k] = t->shape[d];
        is[*k] = ist[d];
        os[(*k)++] = ost[d];
    }
    return PD_OK;
}

pd_status pd__cpu_Tile(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    size_t es;
    PD_TRY(elem_size(in[0], &es));
    walk w;
    int64_t os[2 * PD_MAX_DIMS];
    PD_TRY(tile_box(n, in, &w.k, w.od, w.is, os));
    if (pd__numel_of(out[0]) == 0) return PD_OK;
    walk_run(x, w, out[0]->data, in[0]->data, es);
    return PD_OK;
}

/* din += the sum of dout's tiles: the repeat dims are summed over. */
pd_status pd__cpu_Tile_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                           pd_tensor *const *dout, pd_tensor *const *din) {
    (void)out;
    if (din[0] == NULL || dout[0] == NULL) return PD_OK;
    bool f32 = false;
    PD_TRY(grad_dtype(din[0], dout[0], &f32));
    acc w = {.k = 0};
    PD_TRY(tile_box(n, in, &w.k, w.n, w.ds, w.ss));
    acc_run(x, w, din[0]->data, dout[0]->data, f32 ? 4 : 8, f32);
    return PD_OK;
}

/* ---- OneHot --------------------------------------------------------------------------------- */
pd_status pd__cpu_OneHot(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)x;
    const pd_tensor *ind = in[0], *val = in[2];
    size_t es;
    PD_TRY(elem_size(val, &es));
    int axis;
    int64_t depth;
    PD_TRY(pd__onehot_params(n, in, &axis, &depth));
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; d++) outer *= ind->shape[d];
    for (int d = axis; d < ind->ndim; d++) inner *= ind->shape[d];
    char *dst = out[0]->data;
    const char *off = val->data, *on = (const char *)val->data + es;
    fill(dst, (const unsigned char *)off, outer * depth * inner, es);
    bool fl = is_float_dt(ind->dtype);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            int64_t p = o * inner + i, v;
            if (fl) {
                double f = pd__get_f(ind->dtype, ind->data, p);
                if (!(f > -9.0e15 && f < 9.0e15)) continue;
                v = (int64_t)f;
            } else {
                v = pd__get_i(ind->dtype, ind->data, p);
            }
            if (v < 0) v += depth;
            if (v < 0 || v >= depth) continue; /* out of range: all off */
            memcpy(dst + ((o * depth + v) * inner + i) * (int64_t)es, on, es);
        }
    return PD_OK;
}

/* ---- GatherElements, ScatterElements: one data offset per index ------------------------------ */
/* off[p] = the offset into data (shape t) of index position p (shape ind):
 * p's coordinates with the axis one replaced by ind[p]; checked, negatives wrapped. */
static pd_status elements_offsets(const pd_tensor *t, const pd_tensor *ind, int axis, int64_t *off) {
    int r = t->ndim;
    int64_t ist[PD_MAX_DIMS], id[PD_MAX_DIMS] = {0}, N = t->shape[axis], np = pd__numel_of(ind), base = 0;
    pd__strides_of(r, t->shape, ist);
    for (int d = 0; d < r; d++)
        if (d != axis && ind->shape[d] > t->shape[d])
            return pd__err(PD_ERR_SHAPE, "indices dim %d (%lld) exceeds data's (%lld)", d, (long long)ind->shape[d],
                           (long long)t->shape[d]);
    for (int64_t p = 0; p < np; p++) {
        int64_t v = pd__get_i(ind->dtype, ind->data, p);
        if (v < -N || v >= N)
            return pd__err(PD_ERR_INVALID, "index %lld out of range [-%lld, %lld)", (long long)v, (long long)N,
                           (long long)N);
        off[p] = base + (v < 0 ? v + N : v) * ist[axis];
        for (int d = r - 1; d >= 0; d--) { /* next position; base skips the axis */
            if (d != axis) base += ist[d];
            if (++id[d] < ind->shape[d]) break;
            if (d != axis) base -= id[d] * ist[d];
            id[d] = 0;
        }
    }
    return PD_OK;
}

static pd_status gather_elements_offsets(pd__exec *x, const pd__node *n, pd_tensor *const *in, int64_t **off) {
    const pd_tensor *t = in[0], *ind = in[1];
    int axis;
    PD_TRY(pd__reduce_axis(n, t->ndim, 0, &axis));
    *off = pd__scratch(x, (size_t)(pd__numel_of(ind) + 1) * sizeof **off);
    if (*off == NULL) return PD_ERR_NOMEM;
    return elements_offsets(t, ind, axis, *off);
}

pd_status pd__cpu_GatherElements(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    size_t es;
    PD_TRY(elem_size(in[0], &es));
    int64_t *off, np = pd__numel_of(in[1]);
    PD_TRY(gather_elements_offsets(x, n, in, &off));
    char *dst = out[0]->data;
    const char *src = in[0]->data;
    for (int64_t p = 0; p < np; p++) memcpy(dst + p * (int64_t)es, src + off[p] * (int64_t)es, es);
    return PD_OK;
}

/* din[off[p]] += dout[p] (repeats add up). */
static void scatter_add_elems(bool f32, void *din, const int64_t *off, const void *dout, int64_t np) {
    for (int64_t p = 0; p < np; p++) {
        if (f32)
            ((float *)din)[off[p]] += ((const float *)dout)[p];
        else
            ((double *)din)[off[p]] += ((const double *)dout)[p];
    }
}

pd_status pd__cpu_GatherElements_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                                     pd_tensor *const *dout, pd_tensor *const *din) {
    (void)out;
    if (din[0] == NULL || dout[0] == NULL) return PD_OK;
    bool f32 = false;
    PD_TRY(grad_dtype(din[0], dout[0], &f32));
    int64_t *off, np = pd__numel_of(in[1]);
    PD_TRY(gather_elements_offsets(x, n, in, &off));
    scatter_add_elems(f32, din[0]->data, off, dout[0]->data, np);
    return PD_OK;
}

/* ---- GatherND, ScatterND: one data offset per index tuple ------------------------------------ */
/* For the tuples of ind (last dim m, after b batch dims) into data t: the
 * offset of each slice (off, *ns of them) and the slice length *inner. */
static pd_status nd_offsets(pd__exec *x, const pd_tensor *t, const pd_tensor *ind, int b, int m, int64_t **off,
                            int64_t *ns, int64_t *inner) {
    int64_t ist[PD_MAX_DIMS], nb = 1, per = 1;
    pd__strides_of(t->ndim, t->shape, ist);
    for (int d = 0; d < b; d++) nb *= t->shape[d];
    for (int d = b; d < ind->ndim - 1; d++) per *= ind->shape[d];
    *inner = 1;
    for (int d = b + m; d < t->ndim; d++) *inner *= t->shape[d];
    *ns = nb * per;
    *off = pd__scratch(x, (size_t)(*ns + 1) * sizeof **off);
    if (*off == NULL) return PD_ERR_NOMEM;
    int64_t bstride = b > 0 ? ist[b - 1] : 0;
    for (int64_t s = 0; s < *ns; s++) {
        int64_t o = (s / (per > 0 ? per : 1)) * bstride;
        for (int l = 0; l < m; l++) {
            int64_t v = pd__get_i(ind->dtype, ind->data, s * m + l), N = t->shape[b + l];
            if (v < -N || v >= N)
                return pd__err(PD_ERR_INVALID, "index %lld out of range [-%lld, %lld) at dim %d", (long long)v,
                               (long long)N, (long long)N, b + l);
            o += (v < 0 ? v + N : v) * ist[b + l];
        }
        (*off)[s] = o;
    }
    return PD_OK;
}

pd_status pd__cpu_GatherND(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    size_t es;
    PD_TRY(elem_size(in[0], &es));
    int b, m;
    PD_TRY(pd__gathernd_params(n, in[0], in[1], &b, &m));
    int64_t *off, ns, inner;
    PD_TRY(nd_offsets(x, in[0], in[1], b, m, &off, &ns, &inner));
    int64_t row = inner * (int64_t)es;
    for (int64_t s = 0; s < ns; s++)
        memcpy((char *)out[0]->data + s * row, (const char *)in[0]->data + off[s] * (int64_t)es, (size_t)row);
    return PD_OK;
}

pd_status pd__cpu_GatherND_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                               pd_tensor *const *dout, pd_tensor *const *din) {
    (void)out;
    if (din[0] == NULL || dout[0] == NULL) return PD_OK;
    bool f32 = false;
    PD_TRY(grad_dtype(din[0], dout[0], &f32));
    int b, m;
    PD_TRY(pd__gathernd_params(n, in[0], in[1], &b, &m));
    int64_t *off, ns, inner, es = f32 ? 4 : 8;
    PD_TRY(nd_offsets(x, in[0], in[1], b, m, &off, &ns, &inner));
    for (int64_t s = 0; s < ns; s++)
        add_row(f32, (char *)din[0]->data + off[s] * es, 1, (const char *)dout[0]->data + s * inner * es, 1, inner);
    return PD_OK;
}

/* ---- ScatterElements, ScatterND ---------------------------------------------------------------- */
/* dst[i] = red(dst[i], src[j]) for one element. */
static inline void reduce_elem(pd__scatter_red r, pd_dtype dt, size_t es, void *dst, int64_t i, const void *src,
                               int64_t j) {
    if (r == PD_RED_NONE) {
        memcpy((char *)dst + i * (int64_t)es, (const char *)src + j * (int64_t)es, es);
    } else if (r == PD_RED_MAX || r == PD_RED_MIN) {
        int c = cmp_elem(dt, src, j, dst, i);
        if (r == PD_RED_MAX ? c > 0 : c < 0)
            memcpy((char *)dst + i * (int64_t)es, (const char *)src + j * (int64_t)es, es);
    } else if (is_float_dt(dt)) {
        double a = pd__get_f(dt, dst, i), b = pd__get_f(dt, src, j);
        pd__set_f(dt, dst, i, r == PD_RED_ADD ? a + b : a * b);
    } else {
        uint64_t a = (uint64_t)pd__get_i(dt, dst, i), b = (uint64_t)pd__get_i(dt, src, j);
        pd__set_i(dt, dst, i, (int64_t)(r == PD_RED_ADD ? a + b : a * b));
    }
}

/* The offsets of a scatter's update positions: one per element (ScatterElements,
 * *inner = 1) or one per slice (ScatterND). */
static pd_status scatter_offsets(pd__exec *x, const pd__node *n, pd_tensor *const *in, bool nd, int64_t **off,
                                 int64_t *ns, int64_t *inner) {
    if (nd) {
        const pd_tensor *ind = in[1];
        if (ind->ndim < 1 || ind->shape[ind->ndim - 1] < 1 || ind->shape[ind->ndim - 1] > in[0]->ndim)
            return pd__err(PD_ERR_SHAPE, "bad indices shape");
        return nd_offsets(x, in[0], ind, 0, (int)ind->shape[ind->ndim - 1], off, ns, inner);
    }
    *ns = pd__numel_of(in[1]);
    *inner = 1;
    return gather_elements_offsets(x, n, in, off);
}

static pd_status scatter_fwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out, bool nd) {
    const pd_tensor *t = in[0];
    size_t es;
    PD_TRY(elem_size(t, &es));
    pd__scatter_red red;
    PD_TRY(pd__scatter_reduction(n, &red));
    int64_t *off, ns, inner;
    PD_TRY(scatter_offsets(x, n, in, nd, &off, &ns, &inner));
    par_memcpy(x, out[0]->data, t->data, pd__numel_of(t) * (int64_t)es);
    for (int64_t s = 0; s < ns; s++) {
        if (red == PD_RED_NONE) {
            memcpy((char *)out[0]->data + off[s] * (int64_t)es, (const char *)in[2]->data + s * inner * (int64_t)es,
                   (size_t)inner * es);
            continue;
        }
        for (int64_t i = 0; i < inner; i++) reduce_elem(red, t->dtype, es, out[0]->data, off[s] + i, in[2]->data, s * inner + i);
    }
    return PD_OK;
}

/* reduction none: data's gradient is dout but where an update landed, the
 * updates' is dout there; add: data's is dout, the updates' the same gather.
 * (PyTorch's scatter and scatter_add; mul, max, min have no backward here.) */
static pd_status scatter_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *dout,
                             pd_tensor *const *din, bool nd) {
    if (dout[0] == NULL || (din[0] == NULL && din[2] == NULL)) return PD_OK;
    pd__scatter_red red;
    PD_TRY(pd__scatter_reduction(n, &red));
    if (red != PD_RED_NONE && red != PD_RED_ADD)
        return pd__err(PD_ERR_UNSUPPORTED, "no gradient for reduction '%s' (only none and add)",
                       pd__attr_s(n, "reduction", "none"));
    bool f32 = false;
    for (int i = 0; i < 3; i += 2)
        if (din[i] != NULL) PD_TRY(grad_dtype(din[i], dout[0], &f32));
    int64_t *off, ns, inner, es = f32 ? 4 : 8, nd0 = pd__numel_of(in[0]);
    PD_TRY(scatter_offsets(x, n, in, nd, &off, &ns, &inner));
    if (din[2] != NULL)
        for (int64_t s = 0; s < ns; s++)
            add_row(f32, (char *)din[2]->data + s * inner * es, 1, (const char *)dout[0]->data + off[s] * es, 1, inner);
    if (din[0] == NULL) return PD_OK;
    if (red == PD_RED_ADD) {
        add_row(f32, din[0]->data, 1, dout[0]->data, 1, nd0);
        return PD_OK;
    }
    /* mark the overwritten elements (the offsets live in scratch: copy them out first) */
    int64_t *mem = pd__scratch(x, (size_t)(ns + 1) * sizeof *mem + (size_t)nd0 + 1);
    if (mem == NULL) return PD_ERR_NOMEM;
    PD_TRY(scatter_offsets(x, n, in, nd, &off, &ns, &inner)); /* scratch may have moved */
    unsigned char *hit = (unsigned char *)(off + ns);
    memset(hit, 0, (size_t)nd0);
    for (int64_t s = 0; s < ns; s++) memset(hit + off[s], 1, (size_t)inner);
    for (int64_t i = 0; i < nd0; i++)
        if (!hit[i]) add_row(f32, (char *)din[0]->data + i * es, 1, (const char *)dout[0]->data + i * es, 1, 1);
    return PD_OK;
}

pd_status pd__cpu_ScatterElements(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    return scatter_fwd(x, n, in, out, false);
}

pd_status pd__cpu_ScatterElements_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                                      pd_tensor *const *dout, pd_tensor *const *din) {
    (void)out;
    return scatter_bwd(x, n, in, dout, din, false);
}

/* Scatter: the opset-9 name of ScatterElements (it has no reduction attribute). */
pd_status pd__cpu_Scatter(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    return scatter_fwd(x, n, in, out, false);
}

pd_status pd__cpu_Scatter_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                              pd_tensor *const *dout, pd_tensor *const *din) {
    (void)out;
    return scatter_bwd(x, n, in, dout, din, false);
}

pd_status pd__cpu_ScatterND(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    return scatter_fwd(x, n, in, out, true);
}

pd_status pd__cpu_ScatterND_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                                pd_tensor *const *dout, pd_tensor *const *din) {
    (void)out;
    return scatter_bwd(x, n, in, dout, din, true);
}

/* ---- TensorScatter: a KV cache update ----------------------------------------------------------- */
/* The cache as (P, max, inner) around the sequence axis and the update as
 * (P, len, inner); row (p, s) of the update lands on row (p, dst[p * len + s])
 * of the cache, p's batch being p / (P / batch). In order, so that with a
 * circular cache shorter than the update the last write wins. With `owners`,
 * room for P * max more after dst. */
static pd_status tscatter_rows(pd__exec *x, const pd__node *n, pd_tensor *const *in, bool owners, int64_t *P,
                               int64_t *max, int64_t *len, int64_t *inner, int64_t **dst) {
    const pd_tensor *c = in[0], *u = in[1], *w = n->nin > 2 ? in[2] : NULL;
    int axis = 0;
    PD_TRY(pd__reduce_axis(n, c->ndim, -2, &axis));
    if (axis < 1) return pd__err(PD_ERR_SHAPE, "axis %d is the batch axis", axis);
    bool circ = strcmp(pd__attr_s(n, "mode", "linear"), "circular") == 0;
    *P = pd__shape_numel(axis, c->shape), *max = c->shape[axis], *len = u->shape[axis];
    *inner = pd__shape_numel(c->ndim - axis - 1, c->shape + axis + 1);
    int64_t B = c->shape[0], per = B ? *P / B : 0;
    *dst = pd__scratch(x, (size_t)(*P * *len + (owners ? *P * *max : 0) + 1) * sizeof(int64_t));
    if (!*dst) return PD_ERR_NOMEM;
    for (int64_t p = 0; p < *P; p++) {
        int64_t start = w && w->data ? ((const int64_t *)w->data)[p / per] : 0;
        for (int64_t s = 0; s < *len; s++) {
            int64_t i = start + s;
            if (circ && *max > 0) i = ((i % *max) + *max) % *max;
            if (i < 0 || i >= *max)
                return pd__err(PD_ERR_INVALID, "write index %lld + %lld is outside the cache's %lld positions",
                               (long long)start, (long long)s, (long long)*max);
            (*dst)[p * *len + s] = i;
        }
    }
    return PD_OK;
}

pd_status pd__cpu_TensorScatter(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    size_t es;
    PD_TRY(elem_size(in[0], &es));
    int64_t P, max, len, inner, *dst;
    PD_TRY(tscatter_rows(x, n, in, false, &P, &max, &len, &inner, &dst));
    par_memcpy(x, out[0]->data, in[0]->data, pd__numel_of(in[0]) * (int64_t)es);
    int64_t row = inner * (int64_t)es;
    for (int64_t p = 0; p < P; p++)
        for (int64_t s = 0; s < len; s++)
            memcpy((char *)out[0]->data + (p * max + dst[p * len + s]) * row,
                   (const char *)in[1]->data + (p * len + s) * row, (size_t)row);
    return PD_OK;
}

/* past_cache's gradient is dout but on the rows written; update's row is
 * dout's row it landed on, unless a later row overwrote it there. */
pd_status pd__cpu_TensorScatter_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                                    pd_tensor *const *dout, pd_tensor *const *din) {
    (void)out;
    if (dout[0] == NULL || (din[0] == NULL && din[1] == NULL)) return PD_OK;
    bool f32 = false;
    for (int i = 0; i < 2; i++)
        if (din[i] != NULL) PD_TRY(grad_dtype(din[i], dout[0], &f32));
    int64_t P, max, len, inner, *dst, es = f32 ? 4 : 8;
    PD_TRY(tscatter_rows(x, n, in, true, &P, &max, &len, &inner, &dst));
    int64_t *owner = dst + P * len; /* owner[p * max + i]: the update row written last at cache row i, or -1 */
    for (int64_t i = 0; i < P * max; i++) owner[i] = -1;
    for (int64_t p = 0; p < P; p++)
        for (int64_t s = 0; s < len; s++) owner[p * max + dst[p * len + s]] = s;
    for (int64_t p = 0; p < P; p++)
        for (int64_t i = 0; i < max; i++) {
            int64_t s = owner[p * max + i];
            const char *g = (const char *)dout[0]->data + (p * max + i) * inner * es;
            if (s < 0 && din[0]) add_row(f32, (char *)din[0]->data + (p * max + i) * inner * es, 1, g, 1, inner);
            if (s >= 0 && din[1]) add_row(f32, (char *)din[1]->data + (p * len + s) * inner * es, 1, g, 1, inner);
        }
    return PD_OK;
}

/* ---- ArgMax, ArgMin, Hardmax ------------------------------------------------------------------ */
/* The index along the middle dim of the max (or min) of slice (o, i); the first
 * one of ties, or the last when `last`. */
static int64_t arg_best(pd_dtype dt, const void *d, int64_t o, int64_t len, int64_t inner, int64_t i, bool max,
                        bool last) {
    int64_t best = 0, base = o * len * inner + i;
    for (int64_t j = 1; j < len; j++) {
        int c = cmp_elem(dt, d, base + j * inner, d, base + best * inner);
        if (max ? c > 0 : c < 0) best = j;
        else if (c == 0 && last) best = j;
    }
    return best;
}

static pd_status arg_run(const pd__node *n, pd_tensor *const *in, pd_tensor *const *out, bool max) {
    const pd_tensor *t = in[0];
    int axis;
    PD_TRY(pd__reduce_axis(n, t->ndim, 0, &axis));
    int64_t outer, len, inner;
    around_axis(t, axis, &outer, &len, &inner);
    bool last = pd__attr_i(n, "select_last_index", 0) != 0;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++)
            ((int64_t *)out[0]->data)[o * inner + i] = arg_best(t->dtype, t->data, o, len, inner, i, max, last);
    return PD_OK;
}

pd_status pd__cpu_ArgMax(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)x;
    return arg_run(n, in, out, true);
}

pd_status pd__cpu_ArgMin(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)x;
    return arg_run(n, in, out, false);
}

/* 1 at the first max along the axis (opset < 13: of each row of the input
 * flattened to 2-D at the axis), 0 elsewhere. */
pd_status pd__cpu_Hardmax(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)x;
    const pd_tensor *t = in[0];
    int axis;
    PD_TRY(pd__reduce_axis(n, t->ndim, n->opset >= 13 ? -1 : 1, &axis));
    int64_t outer, len, inner, total = pd__numel_of(t);
    around_axis(t, axis, &outer, &len, &inner);
    if (n->opset < 13) {
        len *= inner;
        inner = 1;
    }
    for (int64_t p = 0; p < total; p++) pd__set_f(t->dtype, out[0]->data, p, 0);
    if (len == 0) return PD_OK;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            int64_t j = arg_best(t->dtype, t->data, o, len, inner, i, true, false);
            pd__set_f(t->dtype, out[0]->data, (o * len + j) * inner + i, 1);
        }
    return PD_OK;
}

/* ---- TopK --------------------------------------------------------------------------------------- */
typedef struct topk_ctx {
    pd_dtype dt;
    const void *d;
    int64_t base, inner;
    bool largest;
} topk_ctx;

/* Stable merge sort of idx[0..len) by value, the best first (ties keep index order). */
static void topk_sort(const topk_ctx *c, int64_t *idx, int64_t *tmp, int64_t len) {
    for (int64_t w = 1; w < len; w *= 2) {
        for (int64_t lo = 0; lo < len; lo += 2 * w) {
            int64_t mid = lo + w < len ? lo + w : len, hi = lo + 2 * w < len ? lo + 2 * w : len, a = lo, b = mid, o = lo;
            while (a < mid && b < hi) {
                int cm = cmp_elem(c->dt, c->d, c->base + idx[b] * c->inner, c->d, c->base + idx[a] * c->inner);
                bool take_b = c->largest ? cm > 0 : cm < 0;
                tmp[o++] = take_b ? idx[b++] : idx[a++];
            }
            while (a < mid) tmp[o++] = idx[a++];
            while (b < hi) tmp[o++] = idx[b++];
        }
        memcpy(idx, tmp, (size_t)len * sizeof *idx);
    }
}

/* For every slice (o, i): the indices of its k best elements, best first, in sel[(o * inner + i) * k ...]. */
static pd_status topk_select(pd__exec *x, const pd__node *n, pd_tensor *const *in, int64_t **sel, int64_t *outer,
                             int64_t *len, int64_t *inner, int64_t *k) {
    const pd_tensor *t = in[0];
    int axis;
    PD_TRY(pd__topk_params(n, in, &axis, k));
    around_axis(t, axis, outer, len, inner);
    int64_t ns = *outer * *inner;
    int64_t *mem = pd__scratch(x, (size_t)(ns * *k + 2 * *len + 1) * sizeof *mem);
    if (mem == NULL) return PD_ERR_NOMEM;
    int64_t *idx = mem + ns * *k, *tmp = idx + *len;
    bool largest = pd__attr_i(n, "largest", 1) != 0;
    for (int64_t o = 0; o < *outer; o++)
        for (int64_t i = 0; i < *inner; i++) {
            topk_ctx c = {t->dtype, t->data, o * *len * *inner + i, *inner, largest};
            for (int64_t j = 0; j < *len; j++) idx[j] = j;
            topk_sort(&c, idx, tmp, *len);
            memcpy(mem + (o * *inner + i) * *k, idx, (size_t)*k * sizeof *idx);
        }
    *sel = mem;
    return PD_OK;
}

pd_status pd__cpu_TopK(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    const pd_tensor *t = in[0];
    size_t es;
    PD_TRY(elem_size(t, &es));
    int64_t *sel, outer, len, inner, k;
    PD_TRY(topk_select(x, n, in, &sel, &outer, &len, &inner, &k));
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++)
            for (int64_t j = 0; j < k; j++) {
                int64_t v = sel[(o * inner + i) * k + j], p = (o * k + j) * inner + i;
                if (out[0] != NULL)
                    memcpy((char *)out[0]->data + p * (int64_t)es,
                           (const char *)t->data + ((o * len + v) * inner + i) * (int64_t)es, es);
                if (n->nout > 1 && out[1] != NULL) ((int64_t *)out[1]->data)[p] = v;
            }
    return PD_OK;
}

/* din[selected] += dout of the values (the indices output has no gradient). */
pd_status pd__cpu_TopK_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                           pd_tensor *const *dout, pd_tensor *const *din) {
    (void)out;
    if (din[0] == NULL || dout[0] == NULL) return PD_OK;
    bool f32 = false;
    PD_TRY(grad_dtype(din[0], dout[0], &f32));
    int64_t *sel, outer, len, inner, k, es = f32 ? 4 : 8;
    PD_TRY(topk_select(x, n, in, &sel, &outer, &len, &inner, &k));
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++)
            for (int64_t j = 0; j < k; j++) {
                int64_t v = sel[(o * inner + i) * k + j];
                add_row(f32, (char *)din[0]->data + ((o * len + v) * inner + i) * es, 1,
                        (const char *)dout[0]->data + ((o * k + j) * inner + i) * es, 1, 1);
            }
    return PD_OK;
}

/* ---- DepthToSpace, SpaceToDepth: a six-dim transpose ------------------------------------------- */
static pd_status space_depth_fwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                                 bool to_space) {
    size_t es;
    PD_TRY(elem_size(in[0], &es));
    walk w = {.k = 6};
    int64_t oshape[4];
    PD_TRY(pd__space_depth_walk(n, in[0], to_space, w.od, w.is, oshape));
    if (pd__numel_of(in[0]) == 0) return PD_OK;
    walk_run(x, w, out[0]->data, in[0]->data, es);
    return PD_OK;
}

static pd_status space_depth_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *dout,
                                 pd_tensor *const *din, bool to_space) {
    if (din[0] == NULL || dout[0] == NULL) return PD_OK;
    bool f32 = false;
    PD_TRY(grad_dtype(din[0], dout[0], &f32));
    PD_TRY(same_numel(din[0], dout[0]));
    acc w = {.k = 6};
    int64_t oshape[4];
    PD_TRY(pd__space_depth_walk(n, in[0], to_space, w.n, w.ds, oshape));
    pd__strides_of(6, w.n, w.ss);
    acc_run(x, w, din[0]->data, dout[0]->data, f32 ? 4 : 8, f32);
    return PD_OK;
}

pd_status pd__cpu_DepthToSpace(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    return space_depth_fwd(x, n, in, out, true);
}

pd_status pd__cpu_DepthToSpace_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                                   pd_tensor *const *dout, pd_tensor *const *din) {
    (void)out;
    return space_depth_bwd(x, n, in, dout, din, true);
}

pd_status pd__cpu_SpaceToDepth(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    return space_depth_fwd(x, n, in, out, false);
}

pd_status pd__cpu_SpaceToDepth_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                                   pd_tensor *const *dout, pd_tensor *const *din) {
    (void)out;
    return space_depth_bwd(x, n, in, dout, din, false);
}

/* ---- Size, OneHot, ArgMax, ArgMin, Hardmax: no gradient ------------------------------------------ */
PD__NO_GRAD(Size)
PD__NO_GRAD(OneHot)
PD__NO_GRAD(ArgMax)
PD__NO_GRAD(ArgMin)
PD__NO_GRAD(Hardmax)

/* ==== EyeLike, Compress, ReverseSequence, NonZero ============================================== */

/* ---- EyeLike: ones on diagonal k of a 2-D output, zeros elsewhere ---------------------------- */
pd_status pd__cpu_EyeLike(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)x, (void)in;
    pd_tensor *o = out[0];
    size_t es;
    PD_TRY(elem_size(o, &es));
    if (o->ndim != 2) return pd__err(PD_ERR_SHAPE, "output must be 2-D, has rank %d", o->ndim);
    int64_t rows = o->shape[0], cols = o->shape[1], k = pd__attr_i(n, "k", 0);
    memset(o->data, 0, (size_t)(rows * cols) * es);
    for (int64_t i = 0; i < rows; i++) {
        int64_t j;
        if (__builtin_add_overflow(i, k, &j) || j < 0 || j >= cols) continue;
        pd__set_f(o->dtype, o->data, i * cols + j, 1.0);
    }
    return PD_OK;
}

/* ---- Compress: the slices (or, without an axis, the elements) whose condition is true --------- */
/* The blocks around the axis: outer x dim x inner (the flattened input: 1 x numel x 1). */
static pd_status compress_box(const pd__node *n, pd_tensor *const *in, int64_t *outer, int64_t *dim,
                              int64_t *inner, int64_t *len, const uint8_t **cond) {
    int axis;
    int64_t kept;
    PD_TRY(pd__compress_params(n, in, &axis, len, &kept));
    if (axis < 0) {
        *outer = *inner = 1;
        *dim = pd__numel_of(in[0]);
    } else {
        around_axis(in[0], axis, outer, dim, inner);
    }
    *cond = in[1]->data;
    return PD_OK;
}

pd_status pd__cpu_Compress(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)x;
    size_t es;
    PD_TRY(elem_size(in[0], &es));
    int64_t outer, dim, inner, len;
    const uint8_t *c;
    PD_TRY(compress_box(n, in, &outer, &dim, &inner, &len, &c));
    char *dst = out[0]->data;
    const char *src = in[0]->data;
    size_t row = (size_t)inner * es;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < len; j++)
            if (c[j]) {
                memcpy(dst, src + (size_t)(o * dim + j) * row, row);
                dst += row;
            }
    return PD_OK;
}

/* din's kept slices += dout's, in the forward's order. */
pd_status pd__cpu_Compress_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                               pd_tensor *const *dout, pd_tensor *const *din) {
    (void)x, (void)out;
    if (din[0] == NULL || dout[0] == NULL) return PD_OK;
    bool f32 = false;
    PD_TRY(grad_dtype(din[0], dout[0], &f32));
    int64_t outer, dim, inner, len, es = f32 ? 4 : 8;
    const uint8_t *c;
    PD_TRY(compress_box(n, in, &outer, &dim, &inner, &len, &c));
    const char *g = dout[0]->data;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < len; j++)
            if (c[j]) {
                add_row(f32, (char *)din[0]->data + (o * dim + j) * inner * es, 1, g, 1, inner);
                g += inner * es;
            }
    return PD_OK;
}

/* ---- ReverseSequence: the first sequence_lens[b] steps of batch entry b reversed -------------- */
/* With the input seen as [d0, d1, inner], step t of entry b starts at
 * t * *ts + b * *bs (elements); *T and *B are the time and batch sizes. */
static pd_status revseq_box(const pd__node *n, pd_tensor *const *in, int64_t *T, int64_t *B, int64_t *ts, int64_t *bs,
                            int64_t *inner) {
    int ta, ba;
    PD_TRY(pd__reverse_sequence_params(n, in, &ta, &ba));
    if (in[1]->data == NULL && in[1]->shape[0] > 0) return pd__err(PD_ERR_INVALID, "sequence_lens has no data");
    const pd_tensor *t = in[0];
    *inner = pd__numel_of(t) / (t->shape[0] * t->shape[1] > 0 ? t->shape[0] * t->shape[1] : 1);
    *T = t->shape[ta];
    *B = t->shape[ba];
    int64_t st[2] = {t->shape[1] * *inner, *inner};
    *ts = st[ta];
    *bs = st[ba];
    return PD_OK;
}

/* The step that step t of a sequence of length l reads: reversal is its own inverse. */
static inline int64_t revseq_src(int64_t t, int64_t l) { return t < l ? l - 1 - t : t; }

pd_status pd__cpu_ReverseSequence(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)x;
    size_t es;
    PD_TRY(elem_size(in[0], &es));
    int64_t T, B, ts, bs, inner;
    PD_TRY(revseq_box(n, in, &T, &B, &ts, &bs, &inner));
    const int64_t *lens = in[1]->data;
    char *dst = out[0]->data;
    const char *src = in[0]->data;
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            memcpy(dst + (size_t)(t * ts + b * bs) * es, src + (size_t)(revseq_src(t, lens[b]) * ts + b * bs) * es,
                   (size_t)inner * es);
    return PD_OK;
}

pd_status pd__cpu_ReverseSequence_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                                      pd_tensor *const *dout, pd_tensor *const *din) {
    (void)x, (void)out;
    if (din[0] == NULL || dout[0] == NULL) return PD_OK;
    bool f32 = false;
    PD_TRY(grad_dtype(din[0], dout[0], &f32));
    PD_TRY(same_numel(din[0], dout[0]));
    int64_t T, B, ts, bs, inner, es = f32 ? 4 : 8;
    PD_TRY(revseq_box(n, in, &T, &B, &ts, &bs, &inner));
    const int64_t *lens = in[1]->data;
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            add_row(f32, (char *)din[0]->data + (revseq_src(t, lens[b]) * ts + b * bs) * es, 1,
                    (const char *)dout[0]->data + (t * ts + b * bs) * es, 1, inner);
    return PD_OK;
}

/* ---- NonZero: the coordinates of the non-zero elements, [rank, count] in row-major order ------- */
pd_status pd__cpu_NonZero(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)x, (void)n;
    const pd_tensor *t = in[0];
    int r = t->ndim > 0 ? t->ndim : 1;
    int64_t cnt = pd__count_nonzero(t), total = pd__numel_of(t);
    if (out[0]->ndim != 2 || out[0]->shape[0] != r || out[0]->shape[1] != cnt)
        return pd__err(PD_ERR_SHAPE, "%lld non-zeros, but the output was sized at load for %lld", (long long)cnt,
                       (long long)(out[0]->ndim == 2 ? out[0]->shape[1] : -1));
    int64_t *o = out[0]->data, st[PD_MAX_DIMS], k = 0;
    pd__strides_of(t->ndim, t->shape, st);
    size_t es = pd_dtype_size(t->dtype);
    bool fl = is_float_dt(t->dtype);
    for (int64_t i = 0; i < total; i++) {
        bool nz = false;
        if (fl) nz = pd__get_f(t->dtype, t->data, i) != 0;
        else
            for (size_t b = 0; b < es; b++) nz |= ((const unsigned char *)t->data)[(size_t)i * es + b] != 0;
        if (!nz) continue;
        if (t->ndim == 0) o[k] = 0;
        for (int d = 0; d < t->ndim; d++) o[d * cnt + k] = i / st[d] % t->shape[d];
        k++;
    }
    return PD_OK;
}

PD__NO_GRAD(EyeLike)
PD__NO_GRAD(NonZero)

/* ---- HannWindow, HammingWindow, BlackmanWindow, MelWeightMatrix ------------------------------- */

/* w[k] = a0 - a1 cos(2 pi k / N) + a2 cos(4 pi k / N), N the size when
 * periodic, size - 1 when symmetric (the spec's forms). */
static pd_status window(const pd__node *n, pd_tensor *const *out, double a0, double a1, double a2) {
    pd_tensor *o = out[0];
    int64_t size = pd__numel_of(o), N = pd__attr_i(n, "periodic", 1) ? size : size - 1;
    for (int64_t k = 0; k < size; k++) {
        double t = N > 0 ? 2 * M_PI * (double)k / (double)N : 0;
        pd__set_f(o->dtype, o->data, k, a0 - a1 * cos(t) + a2 * cos(2 * t));
    }
    return PD_OK;
}

pd_status pd__cpu_HannWindow(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)x, (void)in;
    return window(n, out, 0.5, 0.5, 0);
}

pd_status pd__cpu_HammingWindow(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)x, (void)in;
    return window(n, out, 25.0 / 46.0, 21.0 / 46.0, 0);
}

pd_status pd__cpu_BlackmanWindow(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)x, (void)in;
    return window(n, out, 0.42, 0.5, 0.08);
}

/* Triangular filters between num_mel_bins + 2 points evenly spaced in mel
 * (2595 log10(1 + f / 700)), mapped to DFT bins by floor((dft_length + 1) f /
 * sample_rate). The spacing divides by num_mel_bins + 2, as ONNX's reference
 * does, so the outputs match its tests. */
pd_status pd__cpu_MelWeightMatrix(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)x, (void)n;
    pd_tensor *o = out[0];
    int64_t bins = pd__get_i(in[0]->dtype, in[0]->data, 0), len = pd__get_i(in[1]->dtype, in[1]->data, 0);
    int64_t rows = len / 2 + 1;
    if (o->ndim != 2 || o->shape[0] != rows || o->shape[1] != bins)
        return pd__err(PD_ERR_INTERNAL, "output does not match num_mel_bins and dft_length");
    double rate = pd__get_f(in[2]->dtype, in[2]->data, 0), lo = pd__get_f(in[3]->dtype, in[3]->data, 0),
           hi = pd__get_f(in[4]->dtype, in[4]->data, 0);
    if (!(rate > 0)) return pd__err(PD_ERR_INVALID, "sample_rate %g must be positive", rate);
    int64_t *pt = PD_MALLOC((size_t)(bins + 2) * sizeof *pt);
    if (pt == NULL) return pd__err(PD_ERR_NOMEM, "out of memory");
    double mlo = 2595 * log10(1 + lo / 700), mhi = 2595 * log10(1 + hi / 700), step = (mhi - mlo) / (double)(bins + 2);
    for (int64_t i = 0; i < bins + 2; i++) {
        double f = 700 * (pow(10, ((double)i * step + mlo) / 2595) - 1);
        pt[i] = (int64_t)floor((double)(len + 1) * f / rate);
    }
    int64_t total = rows * bins;
    for (int64_t i = 0; i < total; i++) pd__set_f(o->dtype, o->data, i, 0);
    pd_status s = PD_OK;
    for (int64_t i = 0; i < bins && s == PD_OK; i++) {
        int64_t l = pt[i], c = pt[i + 1], h = pt[i + 2];
        if (l < 0 || h >= rows + (h == c) || c < l || h < c) {
            s = pd__err(PD_ERR_INVALID, "mel bin %lld falls outside the %lld DFT bins (edges %g..%g Hz)", (long long)i,
                        (long long)rows, lo, hi);
            break;
        }
        if (c == l)
            pd__set_f(o->dtype, o->data, c * bins + i, 1);
        else
            for (int64_t j = l; j <= c; j++) pd__set_f(o->dtype, o->data, j * bins + i, (double)(j - l) / (double)(c - l));
        for (int64_t j = c; j < h; j++) pd__set_f(o->dtype, o->data, j * bins + i, (double)(h - j) / (double)(h - c));
    }
    PD_FREE(pt);
    return s;
}

PD__NO_GRAD(HannWindow)
PD__NO_GRAD(HammingWindow)
PD__NO_GRAD(BlackmanWindow)
PD__NO_GRAD(MelWeightMatrix)

/* ---- DFT, STFT ------------------------------------------------------------------------------------ */

/* cos and sin of 2 pi j / n for j < n: the products j k are taken mod n, so
 * the table stays exact for long transforms. */
static double *twiddles(int64_t n) {
    double *t = PD_MALLOC((size_t)(2 * n) * sizeof *t);
    if (t == NULL) return NULL;
    for (int64_t j = 0; j < n; j++) t[2 * j] = cos(2 * M_PI * (double)j / (double)n), t[2 * j + 1] = sin(2 * M_PI * (double)j / (double)n);
    return t;
}

/* A direct O(n^2) transform per line: the sizes ONNX models use for DFT
 * (audio frames) are small, and it handles every length alike. */
pd_status pd__cpu_DFT(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    pd__dft p;
    PD_TRY(pd__dft_plan(n, in[0], n->nin > 1 ? in[1] : NULL, n->nin > 2 ? in[2] : NULL, &p));
    double *tw = twiddles(p.n);
    if (tw == NULL) return pd__err(PD_ERR_NOMEM, "out of memory");
    pd_dtype dt = in[0]->dtype;
    const void *xd = in[0]->data;
    void *yd = out[0]->data;
    int64_t lines = p.outer * p.inner, N = p.n, use = p.lin < N ? p.lin : N;
    double sg = p.inverse ? 1 : -1, sc = p.inverse ? 1.0 / (double)N : 1;
    bool half = p.inverse && p.onesided;
    int nt = pd__threads_for(x, lines * p.m * use, lines);
    PD_OMP_FOR(nt, nt > 1)
    for (int64_t l = 0; l < lines; l++) {
        int64_t o = l / p.inner, i = l % p.inner;
        for (int64_t k = 0; k < p.m; k++) {
            double re = 0, im = 0;
            if (!half) {
                for (int64_t j = 0; j < use; j++) {
                    int64_t at = ((o * p.lin + j) * p.inner + i) * p.cin, t = (j * k) % N;
                    double a = pd__get_f(dt, xd, at), b = p.cin == 2 ? pd__get_f(dt, xd, at + 1) : 0;
                    double c = tw[2 * t], s = sg * tw[2 * t + 1];
                    re += a * c - b * s, im += a * s + b * c;
                }
            } else {
                /* the half spectrum X[0..n/2] extended by X[n - j] = conj(X[j]); the real part */
                for (int64_t j = 0; j < N; j++) {
                    int64_t src = j <= N / 2 ? j : N - j, t = (j * k) % N;
                    if (src >= p.lin) continue;
                    int64_t at = ((o * p.lin + src) * p.inner + i) * 2;
                    double a = pd__get_f(dt, xd, at), b = pd__get_f(dt, xd, at + 1);
                    if (j != src) b = -b;
                    re += a * tw[2 * t] - b * tw[2 * t + 1];
                }
            }
            int64_t at = ((o * p.m + k) * p.inner + i) * p.cout;
            pd__set_f(dt, yd, at, re * sc);
            if (p.cout == 2) pd__set_f(dt, yd, at + 1, im * sc);
        }
    }
    PD_FREE(tw);
    return PD_OK;
}

pd_status pd__cpu_STFT(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    pd__stft p;
    const pd_tensor *win = n->nin > 2 ? in[2] : NULL;
    PD_TRY(pd__stft_plan(n, in[0], n->nin > 1 ? in[1] : NULL, win, n->nin > 3 ? in[3] : NULL, &p));
    double *tw = twiddles(p.frame_len);
    if (tw == NULL) return pd__err(PD_ERR_NOMEM, "out of memory");
    pd_dtype dt = in[0]->dtype;
    const void *xd = in[0]->data;
    void *yd = out[0]->data;
    int64_t L = p.frame_len, lines = p.batch * p.frames;
    int nt = pd__threads_for(x, lines * p.bins * L, lines);
    PD_OMP_FOR(nt, nt > 1)
    for (int64_t l = 0; l < lines; l++) {
        int64_t b = l / p.frames, f = l % p.frames;
        for (int64_t k = 0; k < p.bins; k++) {
            double re = 0, im = 0;
            for (int64_t j = 0; j < L; j++) {
                int64_t at = (b * p.length + f * p.step + j) * p.c, t = (j * k) % L;
                double w = win != NULL ? pd__get_f(win->dtype, win->data, j) : 1;
                double a = w * pd__get_f(dt, xd, at), bb = p.c == 2 ? w * pd__get_f(dt, xd, at + 1) : 0;
                double c = tw[2 * t], s = -tw[2 * t + 1];
                re += a * c - bb * s, im += a * s + bb * c;
            }
            int64_t at = (l * p.bins + k) * 2;
            pd__set_f(dt, yd, at, re);
            pd__set_f(dt, yd, at + 1, im);
        }
    }
    PD_FREE(tw);
    return PD_OK;
}

/* The adjoint, the conjugate transpose of the forward: each input element
 * gathers the output gradients through the conjugate twiddles (a real input
 * keeps the real part); with inverse and onesided, each half-spectrum entry
 * gathers the real signal's gradient through every position it fills. */
pd_status pd__cpu_DFT_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                          pd_tensor *const *dout, pd_tensor *const *din) {
    (void)x, (void)out;
    if (din[0] == NULL || dout[0] == NULL) return PD_OK;
    pd__dft p;
    PD_TRY(pd__dft_plan(n, in[0], n->nin > 1 ? in[1] : NULL, n->nin > 2 ? in[2] : NULL, &p));
    double *tw = twiddles(p.n);
    if (tw == NULL) return pd__err(PD_ERR_NOMEM, "out of memory");
    pd_dtype dt = din[0]->dtype, gt = dout[0]->dtype;
    void *dx = din[0]->data;
    const void *dy = dout[0]->data;
    int64_t lines = p.outer * p.inner, N = p.n, use = p.lin < N ? p.lin : N;
    double sg = p.inverse ? 1 : -1, sc = p.inverse ? 1.0 / (double)N : 1;
    bool half = p.inverse && p.onesided;
    for (int64_t l = 0; l < lines; l++) {
        int64_t o = l / p.inner, i = l % p.inner;
        if (!half) {
            for (int64_t j = 0; j < use; j++) {
                double re = 0, im = 0;
                for (int64_t k = 0; k < p.m; k++) {
                    int64_t at = ((o * p.m + k) * p.inner + i) * 2, t = (j * k) % N;
                    double a = pd__get_f(gt, dy, at), b = pd__get_f(gt, dy, at + 1);
                    double c = tw[2 * t], s = -sg * tw[2 * t + 1];
                    re += a * c - b * s, im += a * s + b * c;
                }
                int64_t at = ((o * p.lin + j) * p.inner + i) * p.cin;
                pd__set_f(dt, dx, at, pd__get_f(dt, dx, at) + re * sc);
                if (p.cin == 2) pd__set_f(dt, dx, at + 1, pd__get_f(dt, dx, at + 1) + im * sc);
            }
        } else {
            for (int64_t j = 0; j < N; j++) {
                int64_t src = j <= N / 2 ? j : N - j;
                if (src >= p.lin) continue;
                double da = 0, db = 0;
                for (int64_t k = 0; k < p.m; k++) {
                    int64_t t = (j * k) % N;
                    double g = pd__get_f(gt, dy, (o * p.m + k) * p.inner + i);
                    da += g * tw[2 * t], db -= g * tw[2 * t + 1];
                }
                if (j != src) db = -db;
                int64_t at = ((o * p.lin + src) * p.inner + i) * 2;
                pd__set_f(dt, dx, at, pd__get_f(dt, dx, at) + da * sc);
                pd__set_f(dt, dx, at + 1, pd__get_f(dt, dx, at + 1) + db * sc);
            }
        }
    }
    PD_FREE(tw);
    return PD_OK;
}

PD__NO_GRAD(STFT)

/* ---- NonMaxSuppression: its shape needed the selection, so it runs folded at load ------------------ */
pd_status pd__cpu_NonMaxSuppression(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)x;
    int64_t k = 0;
    PD_TRY(pd__nms_select(n, (const pd_tensor *const *)in, n->nin, NULL, &k));
    if (out[0]->ndim != 2 || out[0]->shape[0] != k)
        return pd__err(PD_ERR_INTERNAL, "selection of %lld boxes does not fit the output", (long long)k);
    return pd__nms_select(n, (const pd_tensor *const *)in, n->nin, (int64_t *)out[0]->data, &k);
}

PD__NO_GRAD(NonMaxSuppression)

/* ---- Unique: its shapes needed the values, so it runs folded at load ------------------------------- */
pd_status pd__cpu_Unique(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)x;
    int axis;
    int64_t U = 0;
    PD_TRY(pd__unique_run(n, in[0], &axis, &U, NULL, 0));
    if (out[0] != NULL && out[0]->shape[axis < 0 ? 0 : axis] != U)
        return pd__err(PD_ERR_INTERNAL, "%lld unique values do not fit the output", (long long)U);
    return pd__unique_run(n, in[0], &axis, &U, out, n->nout);
}

PD__NO_GRAD(Unique)

/* ---- TfIdfVectorizer ------------------------------------------------------------------------------- */

/* The pool holds, for each size s = i + 1, the s-grams from ngram_counts[i]
 * on, numbered 1, 2, ... across all sizes; those with a size within
 * [min_gram_length, max_gram_length] are counted, into column
 * ngram_indexes[id - 1]. As ONNX's reference (a trie), a repeated n-gram
 * counts under its last number. The n-grams of a row start at every
 * position and step by 1 to max_skip_count + 1, unigrams counted once. */
static int64_t tfidf_lookup(const pd__node *n, const pd_tensor *X, int64_t at, int64_t step, int64_t s) {
    const int64_t *cnt, *pool;
    int ncnt = pd__attr_ints(n, "ngram_counts", &cnt), npool = pd__attr_ints(n, "pool_int64s", &pool);
    int64_t lo = pd__attr_i(n, "min_gram_length", 1), hi = pd__attr_i(n, "max_gram_length", 1), id = 0, found = 0;
    for (int i = 0; i < ncnt; i++) {
        int64_t size = i + 1, b = cnt[i], e = i + 1 < ncnt ? cnt[i + 1] : npool, k = (e - b) / size;
        if (size != s || size < lo || size > hi) {
            id += k;
            continue;
        }
        for (int64_t g = 0; g < k; g++) {
            id++;
            int64_t j = 0;
            while (j < s && pool[b + g * s + j] == pd__get_i(X->dtype, X->data, at + j * step)) j++;
            if (j == s) found = id;
        }
    }
    return found;
}

pd_status pd__cpu_TfIdfVectorizer(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)x;
    const pd_tensor *X = in[0];
    pd_tensor *Y = out[0];
    int64_t W;
    PD_TRY(pd__tfidf_width(n, &W));
    const int64_t *idx;
    const float *wt;
    int nidx = pd__attr_ints(n, "ngram_indexes", &idx), nw = pd__attr_floats(n, "weights", &wt);
    const char *mode = pd__attr_s(n, "mode", "TF");
    int64_t rows = X->ndim == 2 ? X->shape[0] : 1, C = X->shape[X->ndim - 1];
    int64_t lo = pd__attr_i(n, "min_gram_length", 1), hi = pd__attr_i(n, "max_gram_length", 1);
    int64_t skips = pd__attr_i(n, "max_skip_count", 0);
    float *y = Y->data;
    memset(y, 0, sizeof(float) * (size_t)(rows * W));
    for (int64_t r = 0; r < rows; r++) {
        int64_t first = lo;
        for (int64_t d = 1; d <= skips + 1; d++) {
            for (int64_t st = 0; st < C; st++)
                for (int64_t s = first; s <= hi && st + (s - 1) * d < C; s++) {
                    int64_t id = tfidf_lookup(n, X, r * C + st, d, s);
                    if (!id) continue;
                    if (id > nidx)
                        return pd__err(PD_ERR_INVALID, "n-gram %lld of the pool has no entry in ngram_indexes (%d)",
                                       (long long)id, nidx);
                    y[r * W + idx[id - 1]] += 1;
                }
            if (first == 1 && ++first > hi) break; /* unigrams do not depend on the skip */
        }
    }
    bool idf = strcmp(mode, "IDF") == 0, tfidf = strcmp(mode, "TFIDF") == 0;
    for (int64_t i = 0; (idf || tfidf) && i < rows * W; i++) {
        double w = nw ? wt[i % W] : 1;
        y[i] = idf ? (y[i] > 0 ? (float)w : 0) : (float)(w * y[i]);
    }
    return PD_OK;
}
PD__NO_GRAD(TfIdfVectorizer)

/* ---- ai.onnx.ml: ArrayFeatureExtractor ------------------------------------------------------------- */

pd_status pd__cpu_ArrayFeatureExtractor(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)x, (void)n;
    const pd_tensor *X = in[0], *Y = in[1];
    size_t es = pd_dtype_size(X->dtype);
    int64_t len = X->shape[X->ndim - 1], rows = len ? pd_tensor_numel(X) / len : 0, k = pd_tensor_numel(Y);
    const int64_t *idx = Y->data;
    for (int64_t j = 0; j < k; j++)
        if (idx[j] < 0 || idx[j] >= len)
            return pd__err(PD_ERR_INVALID, "index %lld is out of the last axis' [0, %lld)", (long long)idx[j],
                           (long long)len);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < k; j++)
            memcpy((char *)out[0]->data + (size_t)(r * k + j) * es, (const char *)X->data + (size_t)(r * len + idx[j]) * es, es);
    return PD_OK;
}
PD__NO_GRAD(ArrayFeatureExtractor)
