/* tensor.c - CPU forward kernels of the tensor ops: Flatten, Reshape,
 * Transpose, Concat, Split, Slice, Gather, Unsqueeze, Squeeze, Expand, Pad,
 * Constant, Shape, ConstantOfShape, Range.
 *
 * They move bytes, so one kernel serves every dtype: elements are copied as
 * pd_dtype_size-byte units with memcpy. Strided copies (Transpose, Slice,
 * Expand) go through one walker that merges contiguous dims and copies whole
 * rows where it can; Transpose tiles when the innermost dim moves. Large
 * copies are spread over OpenMP threads (x->threads, or OpenMP's default
 * when 0). Op parameters come from core/shape_tensor.h, shared with the
 * shape rules; small helpers from tensor_util.h, shared with tensor_grad.c.
 */
#include <string.h>

#include "tensor_util.h"

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
