/* tensor.c - CPU kernels of the tensor ops, each forward beside its
 * backward: Flatten, Reshape, Unsqueeze, Squeeze, Transpose, Concat, Split,
 * Slice, Expand, Gather, Pad; and Constant, Shape, ConstantOfShape and
 * Range, which are not differentiable.
 *
 * Forward: they move bytes, so one kernel serves every dtype: elements are
 * copied as pd_dtype_size-byte units with memcpy. Strided copies
 * (Transpose, Slice, Expand) go through one walker that merges contiguous
 * dims and copies whole rows where it can; Transpose tiles when the
 * innermost dim moves. Large copies are spread over OpenMP threads
 * (x->threads, or OpenMP's default when 0).
 *
 * Backward: every forward here moves elements, out[o] = in[src(o)] (or a
 * constant); its backward adds each dout[o] into din[src(o)], for float32
 * and float64. Most of them are one strided walk (`acc`) over a box of
 * positions with a stride into din and one into dout; Transpose tiles when
 * the innermost dim moves, Gather scatter-adds rows, Pad gathers each din
 * row's preimages. Threads are only ever given disjoint parts of din, so
 * results do not depend on the thread count.
 *
 * Op parameters (perm, split sizes, slice starts/steps, pads) come from
 * core/shape_tensor.h, the functions the shape rules use too, so shape,
 * forward and backward cannot disagree.
 */
#include "../../core/shape_tensor.h"

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
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
#endif
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

/* dst[i * ds] += src[i * ss] for i < len (strides in elements, any sign);
 * ds == 0 sums the row (in double) into dst[0]. */
#define ADD_ROW(T)                                                                                                     \
    do {                                                                                                               \
        T *restrict d = dst;                                                                                           \
        const T *restrict s = src;                                                                                     \
        if (ds == 1 && ss == 1) {                                                                                      \
            for (int64_t i = 0; i < len; i++) d[i] += s[i];                                                            \
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
        ADD_ROW(float);
    else
        ADD_ROW(double);
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
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
#endif
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
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
#endif
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
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
#endif
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
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
#endif
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
    for (int j = 0; j < n->nout; j++) {
        int64_t len = sizes[j] * inner;
        if (dout[j] != NULL && len > 0) {
            bool f32 = false;
            PD_TRY(grad_dtype(din[0], dout[j], &f32));
            acc w = {.k = 2, .n = {outer, len}, .ds = {row, 1}, .ss = {len, 1}};
            size_t es = f32 ? 4 : 8;
            acc_run(x, w, (char *)din[0]->data + off * (int64_t)es, dout[j]->data, es, f32);
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
    (void)nt;
    char *dst = out[0]->data;
    const char *src = t->data;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
#endif
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
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
#endif
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
