/* shape_tensor.c - shape rules and FLOP counts of the tensor ops: Flatten,
 * Reshape, Transpose, Concat, Split, Slice, Gather, Unsqueeze, Squeeze,
 * Expand, Pad, Constant, Shape, ConstantOfShape, Range, CumSum, CumProd,
 * Trilu, Size, Tile, OneHot, GatherElements, GatherND, ScatterElements,
 * ScatterND, ArgMax, ArgMin, TopK, Hardmax, DepthToSpace, SpaceToDepth,
 * EyeLike, Compress, ReverseSequence, NonZero; and the parameter
 * resolvers of shape_tensor.h, which the CPU kernels share.
 *
 * How it works: docs/INTERNALS.md, "core/shape_tensor.c".
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "shape_tensor.h"

#define MAX_VIEWS 8 /* most inputs of an op that reads constant inputs (Slice: 5) */

/* ---- small helpers ---------------------------------------------------------- */

static int64_t view_numel(const pd_tensor *t) {
    int64_t k = 1;
    for (int i = 0; i < t->ndim; i++) k *= t->shape[i];
    return k;
}

static bool is_int_dtype(pd_dtype t) {
    return t == PD_INT8 || t == PD_INT16 || t == PD_INT32 || t == PD_INT64 || t == PD_UINT8 || t == PD_UINT16 ||
           t == PD_UINT32 || t == PD_UINT64;
}

static bool is_float_dtype(pd_dtype t) {
    return t == PD_FLOAT || t == PD_DOUBLE || t == PD_FLOAT16 || t == PD_BFLOAT16;
}

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Reads a 1-D (or scalar) int32/int64 tensor of at most `max` values. */
static pd_status read_ints(const pd_tensor *t, const char *what, int max, int64_t *v, int *count) {
    int64_t k = view_numel(t);
    if (t->data == NULL && k > 0)
        return pd__err(PD_ERR_UNSUPPORTED, "%s must be constant (dynamic shapes are not supported)", what);
    if (t->dtype != PD_INT64 && t->dtype != PD_INT32)
        return pd__err(PD_ERR_SHAPE, "%s must be int64 or int32, not %s", what, pd_dtype_name(t->dtype));
    if (t->ndim > 1) return pd__err(PD_ERR_SHAPE, "%s must be 1-D, got rank %d", what, t->ndim);
    if (k > max) return pd__err(PD_ERR_SHAPE, "%s has %lld values, at most %d allowed", what, (long long)k, max);
    for (int64_t i = 0; i < k; i++) v[i] = pd__get_i(t->dtype, t->data, i);
    *count = (int)k;
    return PD_OK;
}

/* Reads an ints attribute of at most `max` values; *count = -1 when absent. */
static pd_status read_attr_ints(const pd__node *n, const char *name, int max, int64_t *v, int *count) {
    const int64_t *a;
    int k = pd__attr_ints(n, name, &a);
    const pd__attr *at = pd__attr_get(n, name);
    if (at == NULL) {
        *count = -1;
        return PD_OK;
    }
    if (at->type != PD_A_INTS) return pd__err(PD_ERR_INVALID, "attribute %s must be a list of ints", name);
    if (k > max) return pd__err(PD_ERR_SHAPE, "attribute %s has %d values, at most %d allowed", name, k, max);
    for (int i = 0; i < k; i++) v[i] = a[i];
    *count = k;
    return PD_OK;
}

/* Normalizes `k` axes against `rank` in place, rejecting duplicates. */
static pd_status norm_axes(const char *what, int64_t *axes, int k, int rank) {
    bool seen[PD_MAX_DIMS] = {false};
    for (int i = 0; i < k; i++) {
        int a;
        if (!pd__norm_axis(axes[i], rank, &a))
            return pd__err(PD_ERR_SHAPE, "%s value %lld out of range for rank %d", what, (long long)axes[i], rank);
        if (seen[a]) return pd__err(PD_ERR_SHAPE, "%s repeats axis %d", what, a);
        seen[a] = true;
        axes[i] = a;
    }
    return PD_OK;
}

static const pd_tensor *view_in(const pd__node *n, pd_tensor *const *in, int i) { return i < n->nin ? in[i] : NULL; }

/* ---- parameter resolvers (shape_tensor.h) ------------------------------------ */

bool pd__norm_axis(int64_t axis, int rank, int *out) {
    if (axis < -(int64_t)rank || axis >= rank) return false;
    *out = (int)(axis < 0 ? axis + rank : axis);
    return true;
}

pd_status pd__transpose_perm(const pd__node *n, int rank, int *perm) {
    const int64_t *p;
    int k = pd__attr_ints(n, "perm", &p);
    if (pd__attr_get(n, "perm") == NULL) {
        for (int i = 0; i < rank; i++) perm[i] = rank - 1 - i;
        return PD_OK;
    }
    if (k != rank) return pd__err(PD_ERR_SHAPE, "perm has %d entries but the input has rank %d", k, rank);
    bool seen[PD_MAX_DIMS] = {false};
    for (int i = 0; i < k; i++) {
        if (p[i] < 0 || p[i] >= rank || seen[p[i]])
            return pd__err(PD_ERR_SHAPE, "perm is not a permutation of 0..%d (entry %d is %lld)", rank - 1, i,
                           (long long)p[i]);
        seen[p[i]] = true;
        perm[i] = (int)p[i];
    }
    return PD_OK;
}

pd_status pd__split_sizes(const pd__node *n, pd_tensor *const *in, int *axis, int64_t *sizes) {
    const pd_tensor *x = in[0], *s = view_in(n, in, 1);
    int nout = n->nout;
    int64_t ax = pd__attr_i(n, "axis", 0);
    if (!pd__norm_axis(ax, x->ndim, axis))
        return pd__err(PD_ERR_SHAPE, "axis %lld out of range for rank %d", (long long)ax, x->ndim);
    int64_t dim = x->shape[*axis];
    const int64_t *sa;
    int ka = pd__attr_ints(n, "split", &sa);
    if (s != NULL && view_numel(s) > 0) {
        int64_t k = view_numel(s);
        if (s->data == NULL)
            return pd__err(PD_ERR_UNSUPPORTED, "split must be constant (dynamic shapes are not supported)");
        if (!is_int_dtype(s->dtype))
            return pd__err(PD_ERR_SHAPE, "split must be int64, not %s", pd_dtype_name(s->dtype));
        if (k != nout) return pd__err(PD_ERR_SHAPE, "split has %lld values for %d outputs", (long long)k, nout);
        for (int i = 0; i < nout; i++) sizes[i] = pd__get_i(s->dtype, s->data, i);
    } else if (pd__attr_get(n, "split") != NULL && ka > 0) {
        if (ka != nout) return pd__err(PD_ERR_SHAPE, "split has %d values for %d outputs", ka, nout);
        for (int i = 0; i < nout; i++) sizes[i] = sa[i];
    } else {
        int64_t parts = pd__attr_i(n, "num_outputs", nout);
        if (parts != nout)
            return pd__err(PD_ERR_SHAPE, "num_outputs is %lld but the node has %d outputs", (long long)parts, nout);
        if (nout < 1) return pd__err(PD_ERR_INVALID, "no outputs");
        int64_t div = dim / nout;
        if (dim % nout != 0) {
            if (n->opset < 18)
                return pd__err(PD_ERR_SHAPE, "cannot split a dim of %lld into %d equal parts", (long long)dim, nout);
            div += 1; /* opset 18: the last chunk is smaller */
        }
        for (int i = 0; i < nout; i++) sizes[i] = div;
        sizes[nout - 1] = dim - div * (nout - 1);
        if (sizes[nout - 1] < 0)
            return pd__err(PD_ERR_SHAPE, "cannot split a dim of %lld into %d parts", (long long)dim, nout);
    }
    int64_t sum = 0;
    for (int i = 0; i < nout; i++) {
        if (sizes[i] < 0) return pd__err(PD_ERR_SHAPE, "split[%d] = %lld is negative", i, (long long)sizes[i]);
        if (__builtin_add_overflow(sum, sizes[i], &sum)) return pd__err(PD_ERR_SHAPE, "split sizes overflow");
    }
    if (sum != dim)
        return pd__err(PD_ERR_SHAPE, "split sizes add up to %lld but axis %d has %lld", (long long)sum, *axis,
                       (long long)dim);
    return PD_OK;
}

pd_status pd__slice_resolve(const pd__node *n, pd_tensor *const *in, pd__slice_params *p) {
    const pd_tensor *x = in[0];
    int r = x->ndim;
    for (int d = 0; d < r; d++) {
        p->start[d] = 0;
        p->step[d] = 1;
        p->count[d] = x->shape[d];
    }
    int64_t st[PD_MAX_DIMS], en[PD_MAX_DIMS], ax[PD_MAX_DIMS], sp[PD_MAX_DIMS];
    int ks, ke, ka = -1, kp = -1;
    const pd_tensor *ts = view_in(n, in, 1), *te = view_in(n, in, 2);
    if (ts == NULL && te == NULL) { /* opset < 10: attributes */
        PD_TRY(read_attr_ints(n, "starts", PD_MAX_DIMS, st, &ks));
        PD_TRY(read_attr_ints(n, "ends", PD_MAX_DIMS, en, &ke));
        PD_TRY(read_attr_ints(n, "axes", PD_MAX_DIMS, ax, &ka));
        if (ks < 0 || ke < 0) return pd__err(PD_ERR_INVALID, "missing starts or ends");
    } else {
        if (ts == NULL || te == NULL) return pd__err(PD_ERR_INVALID, "missing starts or ends input");
        const pd_tensor *ta = view_in(n, in, 3), *tp = view_in(n, in, 4);
        PD_TRY(read_ints(ts, "starts", PD_MAX_DIMS, st, &ks));
        PD_TRY(read_ints(te, "ends", PD_MAX_DIMS, en, &ke));
        if (ta) PD_TRY(read_ints(ta, "axes", PD_MAX_DIMS, ax, &ka));
        if (tp) PD_TRY(read_ints(tp, "steps", PD_MAX_DIMS, sp, &kp));
    }
    if (ke != ks) return pd__err(PD_ERR_SHAPE, "starts has %d values but ends has %d", ks, ke);
    if (ka < 0) {
        if (ks > r) return pd__err(PD_ERR_SHAPE, "starts has %d values for rank %d", ks, r);
        for (int i = 0; i < ks; i++) ax[i] = i;
    } else if (ka != ks) {
        return pd__err(PD_ERR_SHAPE, "axes has %d values but starts has %d", ka, ks);
    }
    if (kp < 0)
        for (int i = 0; i < ks; i++) sp[i] = 1;
    else if (kp != ks)
        return pd__err(PD_ERR_SHAPE, "steps has %d values but starts has %d", kp, ks);
    PD_TRY(norm_axes("axes", ax, ks, r));
    for (int i = 0; i < ks; i++) {
        int a = (int)ax[i];
        int64_t dim = x->shape[a], s = st[i], e = en[i], k = sp[i], c = 0;
        if (k == 0) return pd__err(PD_ERR_SHAPE, "steps[%d] is 0", i);
        if (s < 0) s += dim;
        if (e < 0) e += dim;
        if (k > 0) {
            s = clamp64(s, 0, dim);
            e = clamp64(e, 0, dim);
            if (e > s) c = (e - s - 1) / k + 1;
        } else {
            s = clamp64(s, 0, dim - 1);
            e = clamp64(e, -1, dim - 1);
            if (s > e) c = (int64_t)((uint64_t)(s - e - 1) / ((uint64_t)0 - (uint64_t)k)) + 1;
        }
        if (dim == 0) s = 0, c = 0;
        p->start[a] = s;
        p->step[a] = k;
        p->count[a] = c;
    }
    return PD_OK;
}

pd_status pd__pad_resolve(const pd__node *n, pd_tensor *const *in, pd__pad_params *p) {
    const pd_tensor *x = in[0];
    int r = x->ndim;
    const char *mode = pd__attr_s(n, "mode", "constant");
    if (strcmp(mode, "constant") == 0)
        p->mode = PD_PAD_CONSTANT;
    else if (strcmp(mode, "reflect") == 0)
        p->mode = PD_PAD_REFLECT;
    else if (strcmp(mode, "edge") == 0)
        p->mode = PD_PAD_EDGE;
    else if (strcmp(mode, "wrap") == 0)
        p->mode = PD_PAD_WRAP;
    else
        return pd__err(PD_ERR_UNSUPPORTED, "unknown pad mode '%s'", mode);

    int64_t pads[2 * PD_MAX_DIMS], axes[PD_MAX_DIMS];
    int kp, ka = -1;
    const pd_tensor *tp = view_in(n, in, 1), *ta = view_in(n, in, 3);
    if (tp == NULL) { /* opset < 11: attribute (`paddings` in opset 1) */
        PD_TRY(read_attr_ints(n, "pads", 2 * PD_MAX_DIMS, pads, &kp));
        if (kp < 0) PD_TRY(read_attr_ints(n, "paddings", 2 * PD_MAX_DIMS, pads, &kp));
        if (kp < 0) return pd__err(PD_ERR_INVALID, "missing pads");
    } else {
        PD_TRY(read_ints(tp, "pads", 2 * PD_MAX_DIMS, pads, &kp));
    }
    if (ta) PD_TRY(read_ints(ta, "axes", PD_MAX_DIMS, axes, &ka));
    if (ka < 0) {
        ka = r;
        for (int i = 0; i < r; i++) axes[i] = i;
    }
    if (kp != 2 * ka) return pd__err(PD_ERR_SHAPE, "pads has %d values, expected %d (2 per axis)", kp, 2 * ka);
    PD_TRY(norm_axes("axes", axes, ka, r));
    for (int d = 0; d < r; d++) p->begin[d] = p->end[d] = 0;
    for (int i = 0; i < ka; i++) {
        p->begin[axes[i]] = pads[i];
        p->end[axes[i]] = pads[i + ka];
    }
    for (int d = 0; d < r; d++) {
        int64_t dim = x->shape[d], o;
        if (__builtin_add_overflow(dim, p->begin[d], &o) || __builtin_add_overflow(o, p->end[d], &o))
            return pd__err(PD_ERR_SHAPE, "pads of axis %d overflow", d);
        if (o < 0)
            return pd__err(PD_ERR_SHAPE, "pads %lld, %lld crop axis %d of size %lld below 0", (long long)p->begin[d],
                           (long long)p->end[d], d, (long long)dim);
        if (p->mode != PD_PAD_CONSTANT && dim == 0 && o > 0)
            return pd__err(PD_ERR_SHAPE, "cannot pad the empty axis %d in %s mode", d, mode);
    }
    return PD_OK;
}

void pd__shape_span(const pd__node *n, int rank, int *start, int *end) {
    int64_t s = pd__attr_i(n, "start", 0), e = pd__attr_i(n, "end", rank);
    if (s < 0) s += rank;
    if (e < 0) e += rank;
    s = clamp64(s, 0, rank);
    e = clamp64(e, 0, rank);
    if (e < s) e = s;
    *start = (int)s;
    *end = (int)e;
}

pd_status pd__constant_value(const pd__node *n, pd_tensor *out) {
    for (int i = 0; i < n->nattr; i++) {
        const pd__attr *a = &n->attr[i];
        pd_tensor v;
        memset(&v, 0, sizeof v);
        if (strcmp(a->name, "value") == 0) {
            if (a->type != PD_A_TENSOR || a->t == NULL)
                return pd__err(PD_ERR_INVALID, "attribute value is not a tensor");
            v = *a->t;
            if (pd_dtype_size(v.dtype) == 0)
                return pd__err(PD_ERR_UNSUPPORTED, "constants of dtype %s are not supported", pd_dtype_name(v.dtype));
        } else if (strcmp(a->name, "value_float") == 0) {
            v.dtype = PD_FLOAT;
            v.data = (void *)&a->f;
        } else if (strcmp(a->name, "value_floats") == 0) {
            v.dtype = PD_FLOAT;
            v.ndim = 1;
            v.shape[0] = a->n;
            v.data = a->floats;
        } else if (strcmp(a->name, "value_int") == 0) {
            v.dtype = PD_INT64;
            v.data = (void *)&a->i;
        } else if (strcmp(a->name, "value_ints") == 0) {
            v.dtype = PD_INT64;
            v.ndim = 1;
            v.shape[0] = a->n;
            v.data = a->ints;
        } else if (strncmp(a->name, "value_string", 12) == 0 || strcmp(a->name, "sparse_value") == 0) {
            return pd__err(PD_ERR_UNSUPPORTED, "Constant with %s is not supported", a->name);
        } else {
            continue;
        }
        if (view_numel(&v) > 0 && v.data == NULL) return pd__err(PD_ERR_INVALID, "attribute %s has no data", a->name);
        *out = v;
        return PD_OK;
    }
    return pd__err(PD_ERR_INVALID, "Constant has no value attribute");
}

pd_status pd__constant_of_shape_value(const pd__node *n, pd_tensor *out, float *zero) {
    const pd__attr *a = pd__attr_get(n, "value");
    if (a == NULL) {
        *zero = 0.0f;
        pd_tensor v;
        memset(&v, 0, sizeof v);
        v.dtype = PD_FLOAT;
        v.data = zero;
        *out = v;
        return PD_OK;
    }
    if (a->type != PD_A_TENSOR || a->t == NULL) return pd__err(PD_ERR_INVALID, "attribute value is not a tensor");
    if (pd_dtype_size(a->t->dtype) == 0)
        return pd__err(PD_ERR_UNSUPPORTED, "value of dtype %s is not supported", pd_dtype_name(a->t->dtype));
    if (view_numel(a->t) != 1 || a->t->data == NULL)
        return pd__err(PD_ERR_SHAPE, "value must have one element, has %lld", (long long)view_numel(a->t));
    *out = *a->t;
    return PD_OK;
}

pd_status pd__range_count(const pd_tensor *start, const pd_tensor *limit, const pd_tensor *delta, int64_t *count) {
    const pd_tensor *t[3] = {start, limit, delta};
    const char *names[3] = {"start", "limit", "delta"};
    for (int i = 0; i < 3; i++) {
        if (t[i] == NULL) return pd__err(PD_ERR_INVALID, "missing input %s", names[i]);
        if (view_numel(t[i]) != 1)
            return pd__err(PD_ERR_SHAPE, "%s must be a scalar, has %lld elements", names[i],
                           (long long)view_numel(t[i]));
        if (t[i]->data == NULL)
            return pd__err(PD_ERR_UNSUPPORTED, "%s must be constant (dynamic shapes are not supported)", names[i]);
        if (t[i]->dtype != start->dtype)
            return pd__err(PD_ERR_SHAPE, "%s is %s but start is %s", names[i], pd_dtype_name(t[i]->dtype),
                           pd_dtype_name(start->dtype));
    }
    pd_dtype dt = start->dtype;
    if (is_float_dtype(dt)) {
        double s = pd__get_f(dt, start->data, 0), l = pd__get_f(dt, limit->data, 0), d = pd__get_f(dt, delta->data, 0);
        if (d == 0 || !isfinite(s) || !isfinite(l) || !isfinite(d))
            return pd__err(PD_ERR_SHAPE, "range(%g, %g, %g) is not finite", s, l, d);
        double c = ceil((l - s) / d);
        if (!(c > 0)) c = 0;
        if (c > 9.0e15) return pd__err(PD_ERR_SHAPE, "range(%g, %g, %g) is too long", s, l, d);
        *count = (int64_t)c;
    } else if (is_int_dtype(dt)) {
        int64_t s = pd__get_i(dt, start->data, 0), l = pd__get_i(dt, limit->data, 0), d = pd__get_i(dt, delta->data, 0);
        int64_t diff;
        if (d == 0) return pd__err(PD_ERR_SHAPE, "delta is 0");
        if (__builtin_sub_overflow(l, s, &diff))
            return pd__err(PD_ERR_SHAPE, "range(%lld, %lld) overflows", (long long)s, (long long)l);
        if (diff == 0 || (diff > 0) != (d > 0)) {
            *count = 0;
        } else {
            int64_t q = diff / d; /* diff and d have one sign: q > 0 unless |d| > |diff| */
            if (diff % d != 0) q += 1;
            *count = q;
        }
    } else {
        return pd__err(PD_ERR_UNSUPPORTED, "Range of %s is not supported", pd_dtype_name(dt));
    }
    return PD_OK;
}

pd_status pd__cumsum_axis(const pd_tensor *x, const pd_tensor *axis, int *out) {
    if (axis == NULL) return pd__err(PD_ERR_INVALID, "missing input axis");
    if (axis->dtype != PD_INT64 && axis->dtype != PD_INT32)
        return pd__err(PD_ERR_SHAPE, "axis must be int64 or int32, not %s", pd_dtype_name(axis->dtype));
    if (view_numel(axis) != 1 || axis->ndim > 1) return pd__err(PD_ERR_SHAPE, "axis must be a scalar");
    if (axis->data == NULL) return pd__err(PD_ERR_UNSUPPORTED, "axis must be constant");
    int64_t a = pd__get_i(axis->dtype, axis->data, 0);
    if (!pd__norm_axis(a, x->ndim, out))
        return pd__err(PD_ERR_SHAPE, "axis %lld out of range for rank %d", (long long)a, x->ndim);
    return PD_OK;
}

pd_status pd__eyelike_dtype(const pd__node *n, pd_dtype in, pd_dtype *out) {
    int64_t dt = pd__attr_i(n, "dtype", (int64_t)in);
    pd_dtype d = (pd_dtype)dt;
    bool ok = dt > 0 && dt <= PD_BFLOAT16 && d != PD_STRING && pd_dtype_size(d) > 0;
    if (!ok) return pd__err(PD_ERR_UNSUPPORTED, "dtype %lld is not supported", (long long)dt);
    *out = d;
    return PD_OK;
}

pd_status pd__compress_params(const pd__node *n, pd_tensor *const *in, int *axis, int64_t *len, int64_t *kept) {
    const pd_tensor *x = in[0], *c = view_in(n, in, 1);
    if (c == NULL) return pd__err(PD_ERR_INVALID, "missing input condition");
    if (c->dtype != PD_BOOL) return pd__err(PD_ERR_SHAPE, "condition must be bool, not %s", pd_dtype_name(c->dtype));
    if (c->ndim != 1) return pd__err(PD_ERR_SHAPE, "condition must be 1-D, has rank %d", c->ndim);
    *axis = -1;
    int64_t dim = view_numel(x);
    if (pd__attr_get(n, "axis") != NULL) {
        int64_t a = pd__attr_i(n, "axis", 0);
        if (!pd__norm_axis(a, x->ndim, axis))
            return pd__err(PD_ERR_SHAPE, "axis %lld out of range for rank %d", (long long)a, x->ndim);
        dim = x->shape[*axis];
    }
    if (c->data == NULL && c->shape[0] > 0)
        return pd__err(PD_ERR_UNSUPPORTED, "condition must be a constant: the output's shape depends on its values");
    const uint8_t *v = (const uint8_t *)c->data;
    *kept = 0;
    for (int64_t i = 0; i < c->shape[0]; i++) {
        if (!v[i]) continue;
        if (i >= dim) /* numpy's compress refuses this too */
            return pd__err(PD_ERR_SHAPE, "condition selects index %lld of an axis of %lld", (long long)i,
                           (long long)dim);
        ++*kept;
    }
    *len = c->shape[0] < dim ? c->shape[0] : dim;
    return PD_OK;
}

pd_status pd__reverse_sequence_params(const pd__node *n, pd_tensor *const *in, int *time_axis, int *batch_axis) {
    const pd_tensor *x = in[0], *l = view_in(n, in, 1);
    if (x->ndim < 2) return pd__err(PD_ERR_SHAPE, "input must have rank >= 2, has %d", x->ndim);
    int64_t ta = pd__attr_i(n, "time_axis", 0), ba = pd__attr_i(n, "batch_axis", 1);
    if (!((ta == 0 && ba == 1) || (ta == 1 && ba == 0)))
        return pd__err(PD_ERR_INVALID, "time_axis %lld and batch_axis %lld (expected 0 and 1, either way)",
                       (long long)ta, (long long)ba);
    *time_axis = (int)ta;
    *batch_axis = (int)ba;
    if (l == NULL) return pd__err(PD_ERR_INVALID, "missing input sequence_lens");
    if (l->dtype != PD_INT64) return pd__err(PD_ERR_SHAPE, "sequence_lens must be int64, not %s", pd_dtype_name(l->dtype));
    if (l->ndim != 1 || l->shape[0] != x->shape[ba])
        return pd__err(PD_ERR_SHAPE, "sequence_lens must be 1-D of the batch size %lld", (long long)x->shape[ba]);
    for (int64_t b = 0; l->data != NULL && b < l->shape[0]; b++) {
        int64_t v = ((const int64_t *)l->data)[b];
        if (v < 0 || v > x->shape[ta])
            return pd__err(PD_ERR_INVALID, "sequence_lens[%lld] = %lld is outside [0, %lld]", (long long)b,
                           (long long)v, (long long)x->shape[ta]);
    }
    return PD_OK;
}

int64_t pd__count_nonzero(const pd_tensor *x) {
    int64_t k = 0, total = view_numel(x);
    size_t es = pd_dtype_size(x->dtype);
    const unsigned char *p = (const unsigned char *)x->data;
    for (int64_t i = 0; i < total; i++) {
        bool nz;
        if (x->dtype == PD_FLOAT || x->dtype == PD_DOUBLE || x->dtype == PD_FLOAT16 || x->dtype == PD_BFLOAT16)
            nz = pd__get_f(x->dtype, x->data, i) != 0; /* -0.0 is zero */
        else {
            nz = false;
            for (size_t b = 0; b < es; b++) nz |= p[(size_t)i * es + b] != 0;
        }
        k += nz;
    }
    return k;
}

pd_status pd__trilu_k(const pd__node *n, pd_tensor *const *in, int64_t *k) {
    const pd_tensor *t = view_in(n, in, 1);
    *k = 0;
    if (t == NULL) return PD_OK;
    if (t->dtype != PD_INT64) return pd__err(PD_ERR_SHAPE, "k must be int64, not %s", pd_dtype_name(t->dtype));
    if (view_numel(t) != 1) return pd__err(PD_ERR_SHAPE, "k must be a scalar");
    if (t->data == NULL) return pd__err(PD_ERR_UNSUPPORTED, "k must be constant");
    *k = pd__get_i(t->dtype, t->data, 0);
    return PD_OK;
}

pd_status pd__tile_repeats(const pd__node *n, pd_tensor *const *in, int64_t *rep) {
    const pd_tensor *x = in[0], *t = view_in(n, in, 1);
    if (t == NULL) return pd__err(PD_ERR_INVALID, "missing input repeats");
    int k;
    if (n->opset < 6) { /* Tile-1: inputs tiles and axis, scalars: one axis repeated */
        const pd_tensor *ta = view_in(n, in, 2);
        int64_t tiles, ax;
        int kt, ka, a;
        if (ta == NULL) return pd__err(PD_ERR_INVALID, "missing input axis");
        PD_TRY(read_ints(t, "tiles", 1, &tiles, &kt));
        PD_TRY(read_ints(ta, "axis", 1, &ax, &ka));
        if (kt != 1 || ka != 1) return pd__err(PD_ERR_SHAPE, "tiles and axis must be scalars");
        if (!pd__norm_axis(ax, x->ndim, &a))
            return pd__err(PD_ERR_SHAPE, "axis %lld out of range for rank %d", (long long)ax, x->ndim);
        for (int d = 0; d < x->ndim; d++) rep[d] = d == a ? tiles : 1;
        k = x->ndim;
    } else {
        PD_TRY(read_ints(t, "repeats", PD_MAX_DIMS, rep, &k));
    }
    if (k != x->ndim) return pd__err(PD_ERR_SHAPE, "repeats has %d values for rank %d", k, x->ndim);
    int big = 0;
    for (int d = 0; d < k; d++) {
        if (rep[d] < 0) return pd__err(PD_ERR_SHAPE, "repeats[%d] = %lld is negative", d, (long long)rep[d]);
        big += rep[d] != 1;
    }
    if (x->ndim + big > PD_MAX_DIMS) /* the walk has a dim per axis and one per repeated axis */
        return pd__err(PD_ERR_UNSUPPORTED, "rank %d with %d repeated axes exceeds %d walk dims", x->ndim, big,
                       PD_MAX_DIMS);
    return PD_OK;
}

pd_status pd__onehot_params(const pd__node *n, pd_tensor *const *in, int *axis, int64_t *depth) {
    const pd_tensor *ind = in[0], *d = view_in(n, in, 1);
    int r = ind->ndim + 1;
    int64_t ax = pd__attr_i(n, "axis", -1);
    if (r > PD_MAX_DIMS) return pd__err(PD_ERR_UNSUPPORTED, "output rank %d exceeds %d", r, PD_MAX_DIMS);
    if (!pd__norm_axis(ax, r, axis)) return pd__err(PD_ERR_SHAPE, "axis %lld out of range for rank %d", (long long)ax, r);
    if (d == NULL) return pd__err(PD_ERR_INVALID, "missing input depth");
    if (view_numel(d) != 1) return pd__err(PD_ERR_SHAPE, "depth must have one element");
    if (d->data == NULL) return pd__err(PD_ERR_UNSUPPORTED, "depth must be constant (dynamic shapes are not supported)");
    if (pd_dtype_size(d->dtype) == 0 || d->dtype == PD_BOOL)
        return pd__err(PD_ERR_SHAPE, "depth must be numeric, not %s", pd_dtype_name(d->dtype));
    double v = is_float_dtype(d->dtype) ? pd__get_f(d->dtype, d->data, 0) : (double)pd__get_i(d->dtype, d->data, 0);
    if (!(v >= 1 && v < 9.0e15)) return pd__err(PD_ERR_SHAPE, "depth %g is not a positive count", v);
    *depth = (int64_t)v;
    return PD_OK;
}

pd_status pd__reduce_axis(const pd__node *n, int rank, int64_t def, int *axis) {
    int64_t ax = pd__attr_i(n, "axis", def);
    if (!pd__norm_axis(ax, rank, axis))
        return pd__err(PD_ERR_SHAPE, "axis %lld out of range for rank %d", (long long)ax, rank);
    return PD_OK;
}

pd_status pd__topk_params(const pd__node *n, pd_tensor *const *in, int *axis, int64_t *k) {
    const pd_tensor *x = in[0], *t = view_in(n, in, 1);
    PD_TRY(pd__reduce_axis(n, x->ndim, -1, axis));
    if (x->ndim == 0) return pd__err(PD_ERR_SHAPE, "input must have rank >= 1");
    if (t == NULL) {
        if (pd__attr_get(n, "k") == NULL) return pd__err(PD_ERR_INVALID, "missing k");
        *k = pd__attr_i(n, "k", 0);
    } else {
        if (t->dtype != PD_INT64) return pd__err(PD_ERR_SHAPE, "K must be int64, not %s", pd_dtype_name(t->dtype));
        if (view_numel(t) != 1) return pd__err(PD_ERR_SHAPE, "K must have one element");
        if (t->data == NULL)
            return pd__err(PD_ERR_UNSUPPORTED, "K must be constant (a runtime K is a dynamic shape, not supported)");
        *k = pd__get_i(t->dtype, t->data, 0);
    }
    if (*k < 0 || *k > x->shape[*axis])
        return pd__err(PD_ERR_SHAPE, "k = %lld out of range [0, %lld]", (long long)*k, (long long)x->shape[*axis]);
    return PD_OK;
}

pd_status pd__gathernd_params(const pd__node *n, const pd_tensor *data, const pd_tensor *ind, int *batch, int *m) {
    int64_t b = pd__attr_i(n, "batch_dims", 0);
    if (ind->dtype != PD_INT64) return pd__err(PD_ERR_SHAPE, "indices must be int64, not %s", pd_dtype_name(ind->dtype));
    if (ind->ndim < 1 || data->ndim < 1) return pd__err(PD_ERR_SHAPE, "data and indices must have rank >= 1");
    if (b < 0 || b >= ind->ndim || b >= data->ndim)
        return pd__err(PD_ERR_SHAPE, "batch_dims %lld out of range for ranks %d, %d", (long long)b, data->ndim,
                       ind->ndim);
    int64_t k = ind->shape[ind->ndim - 1];
    if (k < 1 || k > data->ndim - b)
        return pd__err(PD_ERR_SHAPE, "indices' last dim %lld out of range [1, %lld]", (long long)k,
                       (long long)(data->ndim - b));
    for (int d = 0; d < b; d++)
        if (ind->shape[d] != data->shape[d])
            return pd__err(PD_ERR_SHAPE, "batch dim %d is %lld in indices but %lld in data", d, (long long)ind->shape[d],
                           (long long)data->shape[d]);
    *batch = (int)b;
    *m = (int)k;
    return PD_OK;
}

pd_status pd__scatter_reduction(const pd__node *n, pd__scatter_red *r) {
    static const char *names[] = {"none", "add", "mul", "max", "min"};
    const char *s = pd__attr_s(n, "reduction", "none");
    for (int i = 0; i < 5; i++)
        if (strcmp(s, names[i]) == 0) {
            *r = (pd__scatter_red)i;
            return PD_OK;
        }
    return pd__err(PD_ERR_UNSUPPORTED, "unknown reduction '%s'", s);
}

pd_status pd__space_depth_walk(const pd__node *n, const pd_tensor *x, bool to_space, int64_t *box, int64_t *istride,
                               int64_t *oshape) {
    int64_t b = pd__attr_i(n, "blocksize", 0);
    if (pd__attr_get(n, "blocksize") == NULL) return pd__err(PD_ERR_INVALID, "missing attribute blocksize");
    if (b < 1) return pd__err(PD_ERR_SHAPE, "blocksize %lld must be positive", (long long)b);
    if (x->ndim != 4) return pd__err(PD_ERR_SHAPE, "input must have rank 4, has %d", x->ndim);
    int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3];
    if (to_space) { /* out[n, c, h*b + i, w*b + j] = in[n, ch(c, i, j), h, w] */
        const char *mode = pd__attr_s(n, "mode", "DCR");
        bool dcr = strcmp(mode, "DCR") == 0;
        if (!dcr && strcmp(mode, "CRD") != 0) return pd__err(PD_ERR_UNSUPPORTED, "unknown mode '%s'", mode);
        if (C % (b * b) != 0)
            return pd__err(PD_ERR_SHAPE, "channels %lld not divisible by blocksize^2 = %lld", (long long)C,
                           (long long)(b * b));
        int64_t c2 = C / (b * b), hw = H * W;
        int64_t bx[6] = {N, c2, H, b, W, b};
        int64_t st[6] = {C * hw, dcr ? hw : b * b * hw, W, dcr ? b * c2 * hw : b * hw, 1, dcr ? c2 * hw : hw};
        memcpy(box, bx, sizeof bx);
        memcpy(istride, st, sizeof st);
        int64_t os[4] = {N, c2, H * b, W * b};
        memcpy(oshape, os, sizeof os);
    } else { /* out[n, (i*b + j)*C + c, h, w] = in[n, c, h*b + i, w*b + j] */
        if (H % b != 0 || W % b != 0)
            return pd__err(PD_ERR_SHAPE, "height %lld and width %lld must be multiples of blocksize %lld", (long long)H,
                           (long long)W, (long long)b);
        int64_t bx[6] = {N, b, b, C, H / b, W / b};
        int64_t st[6] = {C * H * W, W, 1, H * W, b * W, b};
        memcpy(box, bx, sizeof bx);
        memcpy(istride, st, sizeof st);
        int64_t os[4] = {N, C * b * b, H / b, W / b};
        memcpy(oshape, os, sizeof os);
    }
    return PD_OK;
}

/* ---- helpers of the shape rules ---------------------------------------------- */

/* Re-reports the current error (set by a resolver) as an error of node n. */
static pd_status node_fail(const pd_graph *g, const pd__node *n, pd_status s) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", pd_last_error());
    return pd__node_err(g, n, s, "%s", msg);
}

/* Input i, present and with a known shape. */
static pd_status need_in(pd_graph *g, pd__node *n, int i, const char *what, pd__tensor **out) {
    pd__tensor *t = pd__in(g, n, i);
    if (t == NULL) return pd__node_err(g, n, PD_ERR_INVALID, "missing input %d (%s)", i, what);
    if (t->ndim < 0) return pd__node_err(g, n, PD_ERR_SHAPE, "input %s has no known shape", t->name);
    *out = t;
    return PD_OK;
}

/* Like need_in, for an input whose elements the op moves (strings are not supported). */
static pd_status need_data(pd_graph *g, pd__node *n, int i, pd__tensor **out) {
    PD_TRY(need_in(g, n, i, "data", out));
    if (pd_dtype_size((*out)->dtype) == 0)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "dtype %s is not supported", pd_dtype_name((*out)->dtype));
    return PD_OK;
}

static pd_status set_out(pd_graph *g, pd__node *n, int i, pd_dtype dt, int ndim, const int64_t *shape) {
    pd__tensor *o = pd__out(g, n, i);
    if (o == NULL) return PD_OK; /* an unused optional output */
    for (int d = 0; d < ndim; d++)
        if (shape[d] < 0)
            return pd__node_err(g, n, PD_ERR_SHAPE, "output dim %d would be %lld", d, (long long)shape[d]);
    o->dtype = dt;
    return pd__tensor_set_shape(g, o, ndim, shape);
}

static bool is_const(const pd__tensor *t) {
    return (t->kind == PD_T_INIT || t->kind == PD_T_CONST) && (t->data != NULL || t->numel == 0);
}

/* Views of the node's inputs for a resolver; non-constant ones lose their data. */
static pd_status make_views(pd_graph *g, pd__node *n, pd_tensor *v, pd_tensor **vp) {
    if (n->nin > MAX_VIEWS) return pd__node_err(g, n, PD_ERR_INVALID, "too many inputs (%d)", n->nin);
    for (int i = 0; i < n->nin; i++) {
        pd__tensor *t = pd__in(g, n, i);
        vp[i] = NULL;
        if (t == NULL) continue;
        if (t->ndim < 0) return pd__node_err(g, n, PD_ERR_SHAPE, "input %s has no known shape", t->name);
        v[i] = pd__view(t);
        if (!is_const(t)) v[i].data = NULL;
        vp[i] = &v[i];
    }
    return PD_OK;
}

/* Reads constant input i as up to `max` ints. */
static pd_status const_ints(pd_graph *g, pd__node *n, int i, const char *what, int max, int64_t *v, int *count) {
    pd__tensor *t = NULL;
    PD_TRY(need_in(g, n, i, what, &t));
    pd_tensor view = pd__view(t);
    if (!is_const(t)) view.data = NULL;
    pd_status s = read_ints(&view, what, max, v, count);
    return s == PD_OK ? s : node_fail(g, n, s);
}

static pd_status bad_shape(pd_graph *g, pd__node *n, const char *what, const pd__tensor *x, int k,
                           const int64_t *shape) {
    char a[128], b[128];
    pd__format_shape(a, sizeof a, x->ndim, x->shape);
    pd__format_shape(b, sizeof b, k, shape);
    return pd__node_err(g, n, PD_ERR_SHAPE, "cannot %s %s into %s", what, a, b);
}

/* ---- shape rules --------------------------------------------------------------- */

pd_status pd__shape_Flatten(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL;
    PD_TRY(need_data(g, n, 0, &x));
    int r = x->ndim;
    int64_t axis = pd__attr_i(n, "axis", 1);
    if (axis < -(int64_t)r || axis > r)
        return pd__node_err(g, n, PD_ERR_SHAPE, "axis %lld out of range [-%d, %d]", (long long)axis, r, r);
    if (axis < 0) axis += r;
    int64_t shape[2] = {pd__shape_numel((int)axis, x->shape), pd__shape_numel(r - (int)axis, x->shape + axis)};
    return set_out(g, n, 0, x->dtype, 2, shape);
}

pd_status pd__shape_Reshape(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL;
    PD_TRY(need_data(g, n, 0, &x));
    int64_t shape[PD_MAX_DIMS];
    int k;
    if (pd__in(g, n, 1) == NULL && pd__attr_get(n, "shape") != NULL) { /* Reshape-1 */
        pd_status s = read_attr_ints(n, "shape", PD_MAX_DIMS, shape, &k);
        if (s != PD_OK) return node_fail(g, n, s);
    } else {
        PD_TRY(const_ints(g, n, 1, "shape", PD_MAX_DIMS, shape, &k));
    }
    bool allowzero = pd__attr_i(n, "allowzero", 0) != 0;
    int64_t total = pd__shape_numel(x->ndim, x->shape), known = 1;
    int infer = -1;
    for (int i = 0; i < k; i++) {
        if (shape[i] == -1) {
            if (infer >= 0) return pd__node_err(g, n, PD_ERR_SHAPE, "shape has more than one -1");
            infer = i;
            continue;
        }
        if (shape[i] < -1)
            return pd__node_err(g, n, PD_ERR_SHAPE, "shape[%d] = %lld is negative", i, (long long)shape[i]);
        if (shape[i] == 0 && !allowzero) {
            if (i >= x->ndim)
                return pd__node_err(g, n, PD_ERR_SHAPE, "shape[%d] = 0 copies a dim the input (rank %d) lacks", i,
                                    x->ndim);
            shape[i] = x->shape[i];
        }
        if (!pd__mul_ok(known, shape[i], &known)) return pd__node_err(g, n, PD_ERR_SHAPE, "shape overflows");
    }
    if (infer >= 0) {
        if (known == 0 || total % known != 0) {
            shape[infer] = -1;
            return bad_shape(g, n, "reshape", x, k, shape);
        }
        shape[infer] = total / known;
    } else if (known != total) {
        return bad_shape(g, n, "reshape", x, k, shape);
    }
    return set_out(g, n, 0, x->dtype, k, shape);
}

pd_status pd__shape_Transpose(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL;
    PD_TRY(need_data(g, n, 0, &x));
    int perm[PD_MAX_DIMS];
    pd_status s = pd__transpose_perm(n, x->ndim, perm);
    if (s != PD_OK) return node_fail(g, n, s);
    int64_t shape[PD_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) shape[i] = x->shape[perm[i]];
    return set_out(g, n, 0, x->dtype, x->ndim, shape);
}

pd_status pd__shape_Concat(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL;
    PD_TRY(need_data(g, n, 0, &x));
    const pd__attr *aa = pd__attr_get(n, "axis");
    if (aa == NULL && n->opset >= 4) return pd__node_err(g, n, PD_ERR_INVALID, "missing attribute axis");
    int64_t ax = pd__attr_i(n, "axis", 1);
    int r = x->ndim, axis;
    if (!pd__norm_axis(ax, r, &axis))
        return pd__node_err(g, n, PD_ERR_SHAPE, "axis %lld out of range for rank %d", (long long)ax, r);
    int64_t shape[PD_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    for (int i = 1; i < n->nin; i++) {
        pd__tensor *t = NULL;
        PD_TRY(need_data(g, n, i, &t));
        if (t->dtype != x->dtype)
            return pd__node_err(g, n, PD_ERR_SHAPE, "input %d is %s but input 0 is %s", i, pd_dtype_name(t->dtype),
                                pd_dtype_name(x->dtype));
        if (t->ndim != r)
            return pd__node_err(g, n, PD_ERR_SHAPE, "input %d has rank %d but input 0 has %d", i, t->ndim, r);
        for (int d = 0; d < r; d++)
            if (d != axis && t->shape[d] != x->shape[d])
                return pd__node_err(g, n, PD_ERR_SHAPE, "input %d has %lld at dim %d but input 0 has %lld", i,
                                    (long long)t->shape[d], d, (long long)x->shape[d]);
        if (__builtin_add_overflow(shape[axis], t->shape[axis], &shape[axis]))
            return pd__node_err(g, n, PD_ERR_SHAPE, "concatenated dim overflows");
    }
    return set_out(g, n, 0, x->dtype, r, shape);
}

pd_status pd__shape_Split(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL;
    PD_TRY(need_data(g, n, 0, &x));
    pd_tensor v[MAX_VIEWS], *vp[MAX_VIEWS];
    PD_TRY(make_views(g, n, v, vp));
    if (n->nout < 1) return pd__node_err(g, n, PD_ERR_INVALID, "no outputs");
    int64_t *sizes = (int64_t *)PD_MALLOC((size_t)n->nout * sizeof *sizes);
    if (sizes == NULL) return pd__node_err(g, n, PD_ERR_NOMEM, "out of memory");
    int axis = 0;
    pd_status s = pd__split_sizes(n, vp, &axis, sizes);
    if (s != PD_OK) s = node_fail(g, n, s);
    for (int i = 0; s == PD_OK && i < n->nout; i++) {
        int64_t shape[PD_MAX_DIMS];
        memcpy(shape, x->shape, sizeof shape);
        shape[axis] = sizes[i];
        s = set_out(g, n, i, x->dtype, x->ndim, shape);
    }
    PD_FREE(sizes);
    return s;
}

pd_status pd__shape_Slice(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL;
    PD_TRY(need_data(g, n, 0, &x));
    pd_tensor v[MAX_VIEWS], *vp[MAX_VIEWS];
    PD_TRY(make_views(g, n, v, vp));
    pd__slice_params p;
    pd_status s = pd__slice_resolve(n, vp, &p);
    if (s != PD_OK) return node_fail(g, n, s);
    return set_out(g, n, 0, x->dtype, x->ndim, p.count);
}

pd_status pd__shape_Gather(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL, *idx = NULL;
    PD_TRY(need_data(g, n, 0, &x));
    PD_TRY(need_in(g, n, 1, "indices", &idx));
    if (idx->dtype != PD_INT64 && idx->dtype != PD_INT32)
        return pd__node_err(g, n, PD_ERR_SHAPE, "indices must be int64 or int32, not %s", pd_dtype_name(idx->dtype));
    int64_t ax = pd__attr_i(n, "axis", 0);
    int axis = 0;
    if (!pd__norm_axis(ax, x->ndim, &axis))
        return pd__node_err(g, n, PD_ERR_SHAPE, "axis %lld out of range for rank %d", (long long)ax, x->ndim);
    int r = x->ndim - 1 + idx->ndim;
    if (r > PD_MAX_DIMS) return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "output rank %d exceeds %d", r, PD_MAX_DIMS);
    int64_t shape[PD_MAX_DIMS];
    int k = 0;
    for (int d = 0; d < axis; d++) shape[k++] = x->shape[d];
    for (int d = 0; d < idx->ndim; d++) shape[k++] = idx->shape[d];
    for (int d = axis + 1; d < x->ndim; d++) shape[k++] = x->shape[d];
    return set_out(g, n, 0, x->dtype, r, shape);
}

/* The axes of Squeeze/Unsqueeze: attribute before opset 13, input after.
 * *k = -1 when there are none. */
static pd_status squeeze_axes(pd_graph *g, pd__node *n, int64_t *axes, int *k) {
    if (pd__in(g, n, 1) != NULL) return const_ints(g, n, 1, "axes", PD_MAX_DIMS, axes, k);
    pd_status s = read_attr_ints(n, "axes", PD_MAX_DIMS, axes, k);
    return s == PD_OK ? s : node_fail(g, n, s);
}

pd_status pd__shape_Unsqueeze(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL;
    PD_TRY(need_data(g, n, 0, &x));
    int64_t axes[PD_MAX_DIMS];
    int k;
    PD_TRY(squeeze_axes(g, n, axes, &k));
    if (k < 0) return pd__node_err(g, n, PD_ERR_INVALID, "missing axes");
    int r = x->ndim + k;
    if (r > PD_MAX_DIMS) return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "output rank %d exceeds %d", r, PD_MAX_DIMS);
    pd_status s = norm_axes("axes", axes, k, r);
    if (s != PD_OK) return node_fail(g, n, s);
    bool ins[PD_MAX_DIMS] = {false};
    for (int i = 0; i < k; i++) ins[axes[i]] = true;
    int64_t shape[PD_MAX_DIMS];
    for (int d = 0, j = 0; d < r; d++) shape[d] = ins[d] ? 1 : x->shape[j++];
    return set_out(g, n, 0, x->dtype, r, shape);
}

pd_status pd__shape_Squeeze(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL;
    PD_TRY(need_data(g, n, 0, &x));
    int64_t axes[PD_MAX_DIMS];
    int k;
    PD_TRY(squeeze_axes(g, n, axes, &k));
    bool drop[PD_MAX_DIMS] = {false};
    if (k <= 0) { /* no axes (or an empty list, as onnxruntime reads it): every 1 goes */
        for (int d = 0; d < x->ndim; d++) drop[d] = x->shape[d] == 1;
    } else {
        pd_status s = norm_axes("axes", axes, k, x->ndim);
        if (s != PD_OK) return node_fail(g, n, s);
        for (int i = 0; i < k; i++) {
            if (x->shape[axes[i]] != 1)
                return pd__node_err(g, n, PD_ERR_SHAPE, "cannot squeeze axis %d of size %lld", (int)axes[i],
                                    (long long)x->shape[axes[i]]);
            drop[axes[i]] = true;
        }
    }
    int64_t shape[PD_MAX_DIMS];
    int r = 0;
    for (int d = 0; d < x->ndim; d++)
        if (!drop[d]) shape[r++] = x->shape[d];
    return set_out(g, n, 0, x->dtype, r, shape);
}

pd_status pd__shape_Expand(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL;
    PD_TRY(need_data(g, n, 0, &x));
    int64_t want[PD_MAX_DIMS], shape[PD_MAX_DIMS];
    int k;
    PD_TRY(const_ints(g, n, 1, "shape", PD_MAX_DIMS, want, &k));
    int r = k > x->ndim ? k : x->ndim;
    for (int i = 0; i < r; i++) { /* aligned from the right */
        int64_t a = i < x->ndim ? x->shape[x->ndim - 1 - i] : 1;
        int64_t b = i < k ? want[k - 1 - i] : 1;
        if (b < 0) return pd__node_err(g, n, PD_ERR_SHAPE, "shape[%d] = %lld is negative", k - 1 - i, (long long)b);
        if (a != b && a != 1 && b != 1) return bad_shape(g, n, "expand", x, k, want);
        shape[r - 1 - i] = a == 1 ? b : a;
    }
    return set_out(g, n, 0, x->dtype, r, shape);
}

pd_status pd__shape_Pad(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL;
    PD_TRY(need_data(g, n, 0, &x));
    pd_tensor v[MAX_VIEWS], *vp[MAX_VIEWS];
    PD_TRY(make_views(g, n, v, vp));
    pd__pad_params p;
    pd_status s = pd__pad_resolve(n, vp, &p);
    if (s != PD_OK) return node_fail(g, n, s);
    pd__tensor *cv = pd__in(g, n, 2);
    if (cv != NULL) {
        if (cv->dtype != x->dtype)
            return pd__node_err(g, n, PD_ERR_SHAPE, "constant_value is %s but data is %s", pd_dtype_name(cv->dtype),
                                pd_dtype_name(x->dtype));
        if (cv->ndim < 0 || cv->numel > 1) return pd__node_err(g, n, PD_ERR_SHAPE, "constant_value must be a scalar");
    }
    int64_t shape[PD_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) shape[d] = x->shape[d] + p.begin[d] + p.end[d];
    return set_out(g, n, 0, x->dtype, x->ndim, shape);
}

pd_status pd__shape_Constant(pd_graph *g, pd__node *n) {
    pd_tensor v;
    pd_status s = pd__constant_value(n, &v);
    if (s != PD_OK) return node_fail(g, n, s);
    return set_out(g, n, 0, v.dtype, v.ndim, v.shape);
}

pd_status pd__shape_Shape(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL;
    PD_TRY(need_in(g, n, 0, "data", &x));
    int start, end;
    pd__shape_span(n, x->ndim, &start, &end);
    int64_t len = end - start;
    return set_out(g, n, 0, PD_INT64, 1, &len);
}

pd_status pd__shape_ConstantOfShape(pd_graph *g, pd__node *n) {
    int64_t shape[PD_MAX_DIMS];
    int k;
    PD_TRY(const_ints(g, n, 0, "shape", PD_MAX_DIMS, shape, &k));
    for (int i = 0; i < k; i++)
        if (shape[i] < 0)
            return pd__node_err(g, n, PD_ERR_SHAPE, "shape[%d] = %lld is negative", i, (long long)shape[i]);
    pd_tensor v;
    float zero;
    pd_status s = pd__constant_of_shape_value(n, &v, &zero);
    if (s != PD_OK) return node_fail(g, n, s);
    return set_out(g, n, 0, v.dtype, k, shape);
}

pd_status pd__shape_Range(pd_graph *g, pd__node *n) {
    pd_tensor v[MAX_VIEWS], *vp[MAX_VIEWS];
    if (n->nin != 3) return pd__node_err(g, n, PD_ERR_INVALID, "Range takes 3 inputs, has %d", n->nin);
    PD_TRY(make_views(g, n, v, vp));
    int64_t count;
    pd_status s = pd__range_count(vp[0], vp[1], vp[2], &count);
    if (s != PD_OK) return node_fail(g, n, s);
    return set_out(g, n, 0, vp[0]->dtype, 1, &count);
}

/* Runs a resolver on views of the node's inputs, naming the node on failure. */
#define RESOLVE(call)                                                                                                  \
    do {                                                                                                               \
        pd_status s_ = (call);                                                                                         \
        if (s_ != PD_OK) return node_fail(g, n, s_);                                                                   \
    } while (0)

static bool is_numeric(pd_dtype t) { return is_int_dtype(t) || is_float_dtype(t); }

pd_status pd__shape_CumSum(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL, *a = NULL;
    PD_TRY(need_data(g, n, 0, &x));
    PD_TRY(need_in(g, n, 1, "axis", &a));
    if (!is_numeric(x->dtype))
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "%s of %s is not supported", n->op_type,
                            pd_dtype_name(x->dtype));
    pd_tensor v[MAX_VIEWS], *vp[MAX_VIEWS];
    PD_TRY(make_views(g, n, v, vp));
    int axis = 0;
    if (vp[1]->data != NULL) RESOLVE(pd__cumsum_axis(vp[0], vp[1], &axis));
    return set_out(g, n, 0, x->dtype, x->ndim, x->shape);
}

/* CumProd: CumSum's inputs and attributes. */
pd_status pd__shape_CumProd(pd_graph *g, pd__node *n) { return pd__shape_CumSum(g, n); }

/* EyeLike: a 2-D input's shape, the dtype attribute's dtype (the input's when absent). */
pd_status pd__shape_EyeLike(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL;
    PD_TRY(need_in(g, n, 0, "input", &x));
    if (x->ndim != 2) return pd__node_err(g, n, PD_ERR_SHAPE, "input must be 2-D, has rank %d", x->ndim);
    pd_dtype dt = PD_UNDEFINED;
    RESOLVE(pd__eyelike_dtype(n, x->dtype, &dt));
    return set_out(g, n, 0, dt, 2, x->shape);
}

/* Compress: the output's length along the axis (or flattened) is the count of
 * true conditions, so the condition must be known at load and never trained. */
pd_status pd__shape_Compress(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL, *c = NULL;
    PD_TRY(need_data(g, n, 0, &x));
    PD_TRY(need_in(g, n, 1, "condition", &c));
    pd_tensor v[MAX_VIEWS], *vp[MAX_VIEWS];
    PD_TRY(make_views(g, n, v, vp));
    if (!pd__foldable_input(c)) vp[1]->data = NULL;
    int axis;
    int64_t len, kept;
    RESOLVE(pd__compress_params(n, vp, &axis, &len, &kept));
    if (axis < 0) return set_out(g, n, 0, x->dtype, 1, &kept);
    int64_t shape[PD_MAX_DIMS];
    memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    shape[axis] = kept;
    return set_out(g, n, 0, x->dtype, x->ndim, shape);
}

pd_status pd__shape_ReverseSequence(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL, *l = NULL;
    PD_TRY(need_data(g, n, 0, &x));
    PD_TRY(need_in(g, n, 1, "sequence_lens", &l));
    pd_tensor v[MAX_VIEWS], *vp[MAX_VIEWS];
    PD_TRY(make_views(g, n, v, vp));
    int ta, ba;
    RESOLVE(pd__reverse_sequence_params(n, vp, &ta, &ba));
    return set_out(g, n, 0, x->dtype, x->ndim, x->shape);
}

/* NonZero: [rank, count of non-zeros], which only a constant input that
 * training cannot change fixes at load (a 0-D input counts as 1-D, as numpy's). */
pd_status pd__shape_NonZero(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL;
    PD_TRY(need_data(g, n, 0, &x));
    if (!pd__foldable_input(x) || (x->data == NULL && x->numel > 0))
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED,
                            "the output's shape depends on the values of '%s', supported only when it is a constant "
                            "(folded at load)",
                            x->name);
    pd_tensor v = pd__view(x);
    int64_t shape[2] = {x->ndim > 0 ? x->ndim : 1, pd__count_nonzero(&v)};
    return set_out(g, n, 0, PD_INT64, 2, shape);
}

pd_status pd__shape_Trilu(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL;
    PD_TRY(need_data(g, n, 0, &x));
    if (x->ndim < 2) return pd__node_err(g, n, PD_ERR_SHAPE, "input must have rank >= 2, has %d", x->ndim);
    pd_tensor v[MAX_VIEWS], *vp[MAX_VIEWS];
    PD_TRY(make_views(g, n, v, vp));
    int64_t k; /* a runtime k is checked when the kernel runs */
    if (n->nin > 1 && vp[1] != NULL && vp[1]->data != NULL) RESOLVE(pd__trilu_k(n, vp, &k));
    return set_out(g, n, 0, x->dtype, x->ndim, x->shape);
}

pd_status pd__shape_Size(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL;
    PD_TRY(need_in(g, n, 0, "data", &x));
    return set_out(g, n, 0, PD_INT64, 0, NULL);
}

pd_status pd__shape_Tile(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL;
    PD_TRY(need_data(g, n, 0, &x));
    pd_tensor v[MAX_VIEWS], *vp[MAX_VIEWS];
    PD_TRY(make_views(g, n, v, vp));
    int64_t rep[PD_MAX_DIMS], shape[PD_MAX_DIMS];
    RESOLVE(pd__tile_repeats(n, vp, rep));
    for (int d = 0; d < x->ndim; d++)
        if (!pd__mul_ok(x->shape[d], rep[d], &shape[d])) return pd__node_err(g, n, PD_ERR_SHAPE, "shape overflows");
    return set_out(g, n, 0, x->dtype, x->ndim, shape);
}

pd_status pd__shape_OneHot(pd_graph *g, pd__node *n) {
    pd__tensor *ind = NULL, *val = NULL;
    PD_TRY(need_in(g, n, 0, "indices", &ind));
    PD_TRY(need_data(g, n, 2, &val));
    if (!is_numeric(ind->dtype))
        return pd__node_err(g, n, PD_ERR_SHAPE, "indices must be numeric, not %s", pd_dtype_name(ind->dtype));
    if (val->numel != 2) return pd__node_err(g, n, PD_ERR_SHAPE, "values must have 2 elements, has %lld", (long long)val->numel);
    pd_tensor v[MAX_VIEWS], *vp[MAX_VIEWS];
    PD_TRY(make_views(g, n, v, vp));
    int axis = 0;
    int64_t depth, shape[PD_MAX_DIMS];
    RESOLVE(pd__onehot_params(n, vp, &axis, &depth));
    for (int d = 0, j = 0; d <= ind->ndim; d++) shape[d] = d == axis ? depth : ind->shape[j++];
    return set_out(g, n, 0, val->dtype, ind->ndim + 1, shape);
}

pd_status pd__shape_GatherElements(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL, *idx = NULL;
    PD_TRY(need_data(g, n, 0, &x));
    PD_TRY(need_in(g, n, 1, "indices", &idx));
    if (idx->dtype != PD_INT64 && idx->dtype != PD_INT32)
        return pd__node_err(g, n, PD_ERR_SHAPE, "indices must be int64 or int32, not %s", pd_dtype_name(idx->dtype));
    if (idx->ndim != x->ndim || x->ndim < 1)
        return pd__node_err(g, n, PD_ERR_SHAPE, "indices have rank %d but data %d", idx->ndim, x->ndim);
    int axis = 0;
    RESOLVE(pd__reduce_axis(n, x->ndim, 0, &axis));
    return set_out(g, n, 0, x->dtype, idx->ndim, idx->shape);
}

pd_status pd__shape_GatherND(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL, *idx = NULL;
    PD_TRY(need_data(g, n, 0, &x));
    PD_TRY(need_in(g, n, 1, "indices", &idx));
    pd_tensor xv = pd__view(x), iv = pd__view(idx);
    int b, m;
    RESOLVE(pd__gathernd_params(n, &xv, &iv, &b, &m));
    int r = idx->ndim - 1 + x->ndim - b - m;
    if (r > PD_MAX_DIMS) return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "output rank %d exceeds %d", r, PD_MAX_DIMS);
    int64_t shape[PD_MAX_DIMS];
    int k = 0;
    for (int d = 0; d < idx->ndim - 1; d++) shape[k++] = idx->shape[d];
    for (int d = b + m; d < x->ndim; d++) shape[k++] = x->shape[d];
    return set_out(g, n, 0, x->dtype, r, shape);
}

/* ScatterElements, ScatterND: data and updates of one dtype, a known reduction
 * (arithmetic ones on numbers only). */
static pd_status scatter_common(pd_graph *g, pd__node *n, pd__tensor **x, pd__tensor **idx, pd__tensor **u) {
    PD_TRY(need_data(g, n, 0, x));
    PD_TRY(need_in(g, n, 1, "indices", idx));
    PD_TRY(need_data(g, n, 2, u));
    if ((*idx)->dtype != PD_INT64 && (*idx)->dtype != PD_INT32)
        return pd__node_err(g, n, PD_ERR_SHAPE, "indices must be int64 or int32, not %s", pd_dtype_name((*idx)->dtype));
    if ((*u)->dtype != (*x)->dtype)
        return pd__node_err(g, n, PD_ERR_SHAPE, "updates are %s but data is %s", pd_dtype_name((*u)->dtype),
                            pd_dtype_name((*x)->dtype));
    pd__scatter_red red;
    RESOLVE(pd__scatter_reduction(n, &red));
    if (red != PD_RED_NONE && !is_numeric((*x)->dtype))
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "reduction on %s is not supported", pd_dtype_name((*x)->dtype));
    return PD_OK;
}

pd_status pd__shape_ScatterElements(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL, *idx = NULL, *u = NULL;
    PD_TRY(scatter_common(g, n, &x, &idx, &u));
    if (idx->ndim != x->ndim || u->ndim != x->ndim || x->ndim < 1)
        return pd__node_err(g, n, PD_ERR_SHAPE, "data, indices and updates must have one rank (%d, %d, %d)", x->ndim,
                            idx->ndim, u->ndim);
    for (int d = 0; d < x->ndim; d++)
        if (idx->shape[d] != u->shape[d])
            return pd__node_err(g, n, PD_ERR_SHAPE, "indices and updates differ at dim %d", d);
    int axis = 0;
    RESOLVE(pd__reduce_axis(n, x->ndim, 0, &axis));
    return set_out(g, n, 0, x->dtype, x->ndim, x->shape);
}

/* Scatter (opset 9, deprecated): ScatterElements without a reduction. */
pd_status pd__shape_Scatter(pd_graph *g, pd__node *n) { return pd__shape_ScatterElements(g, n); }

pd_status pd__shape_ScatterND(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL, *idx = NULL, *u = NULL;
    PD_TRY(scatter_common(g, n, &x, &idx, &u));
    if (idx->dtype != PD_INT64) return pd__node_err(g, n, PD_ERR_SHAPE, "indices must be int64");
    int q = idx->ndim;
    int64_t m = q > 0 ? idx->shape[q - 1] : -1;
    if (q < 1 || m < 1 || m > x->ndim)
        return pd__node_err(g, n, PD_ERR_SHAPE, "indices' last dim %lld out of range [1, %d]", (long long)m, x->ndim);
    int ru = q - 1 + x->ndim - (int)m;
    bool ok = u->ndim == ru;
    for (int d = 0; ok && d < q - 1; d++) ok = u->shape[d] == idx->shape[d];
    for (int d = (int)m; ok && d < x->ndim; d++) ok = u->shape[q - 1 + d - m] == x->shape[d];
    if (!ok) return pd__node_err(g, n, PD_ERR_SHAPE, "updates do not have the shape indices.shape[:-1] + data.shape[m:]");
    return set_out(g, n, 0, x->dtype, x->ndim, x->shape);
}

/* TensorScatter (opset 24): present_cache is past_cache with update written at
 * each batch's write index along `axis` (default -2); update's shape is the
 * cache's but along that axis, where it is at most as long. */
pd_status pd__shape_TensorScatter(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL, *u = NULL, *w = pd__in(g, n, 2);
    PD_TRY(need_data(g, n, 0, &x));
    PD_TRY(need_data(g, n, 1, &u));
    if (u->dtype != x->dtype)
        return pd__node_err(g, n, PD_ERR_SHAPE, "update is %s but past_cache is %s", pd_dtype_name(u->dtype),
                            pd_dtype_name(x->dtype));
    int axis = 0;
    RESOLVE(pd__reduce_axis(n, x->ndim, -2, &axis));
    if (axis < 1) return pd__node_err(g, n, PD_ERR_SHAPE, "axis %d: the sequence axis cannot be the batch axis", axis);
    bool ok = u->ndim == x->ndim && u->shape[axis] <= x->shape[axis];
    for (int d = 0; ok && d < x->ndim; d++) ok = d == axis || u->shape[d] == x->shape[d];
    if (!ok) return pd__node_err(g, n, PD_ERR_SHAPE, "update does not fit past_cache along axis %d", axis);
    if (w && (w->ndim != 1 || w->shape[0] != x->shape[0] || w->dtype != PD_INT64))
        return pd__node_err(g, n, PD_ERR_SHAPE, "write_indices must be int64 of shape (batch_size)");
    const char *mode = pd__attr_s(n, "mode", "linear");
    if (strcmp(mode, "linear") != 0 && strcmp(mode, "circular") != 0)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "mode '%s' is not supported (linear and circular are)", mode);
    return set_out(g, n, 0, x->dtype, x->ndim, x->shape);
}

/* ArgMax, ArgMin: int64 indices, the axis kept as 1 or dropped. */
static pd_status arg_shape(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL;
    PD_TRY(need_data(g, n, 0, &x));
    if (!is_numeric(x->dtype))
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "%s of %s is not supported", n->op_type, pd_dtype_name(x->dtype));
    int axis = 0;
    RESOLVE(pd__reduce_axis(n, x->ndim, 0, &axis));
    if (x->shape[axis] == 0) return pd__node_err(g, n, PD_ERR_SHAPE, "axis %d is empty", axis);
    bool keep = pd__attr_i(n, "keepdims", 1) != 0;
    int64_t shape[PD_MAX_DIMS];
    int k = 0;
    for (int d = 0; d < x->ndim; d++)
        if (d != axis)
            shape[k++] = x->shape[d];
        else if (keep)
            shape[k++] = 1;
    return set_out(g, n, 0, PD_INT64, k, shape);
}

pd_status pd__shape_ArgMax(pd_graph *g, pd__node *n) { return arg_shape(g, n); }

pd_status pd__shape_ArgMin(pd_graph *g, pd__node *n) { return arg_shape(g, n); }

pd_status pd__shape_TopK(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL;
    PD_TRY(need_data(g, n, 0, &x));
    if (!is_numeric(x->dtype))
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "TopK of %s is not supported", pd_dtype_name(x->dtype));
    pd_tensor v[MAX_VIEWS], *vp[MAX_VIEWS];
    PD_TRY(make_views(g, n, v, vp));
    int axis = 0;
    int64_t k, shape[PD_MAX_DIMS];
    RESOLVE(pd__topk_params(n, vp, &axis, &k));
    memcpy(shape, x->shape, sizeof shape);
    shape[axis] = k;
    PD_TRY(set_out(g, n, 0, x->dtype, x->ndim, shape));
    return set_out(g, n, 1, PD_INT64, x->ndim, shape);
}

pd_status pd__shape_Hardmax(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL;
    PD_TRY(need_data(g, n, 0, &x));
    if (!is_float_dtype(x->dtype))
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "Hardmax of %s is not supported", pd_dtype_name(x->dtype));
    int axis = 0;
    RESOLVE(pd__reduce_axis(n, x->ndim, n->opset >= 13 ? -1 : 1, &axis));
    return set_out(g, n, 0, x->dtype, x->ndim, x->shape);
}

static pd_status space_depth_shape(pd_graph *g, pd__node *n, bool to_space) {
    pd__tensor *x = NULL;
    PD_TRY(need_data(g, n, 0, &x));
    pd_tensor xv = pd__view(x);
    int64_t box[6], st[6], shape[4];
    RESOLVE(pd__space_depth_walk(n, &xv, to_space, box, st, shape));
    return set_out(g, n, 0, x->dtype, 4, shape);
}

pd_status pd__shape_DepthToSpace(pd_graph *g, pd__node *n) { return space_depth_shape(g, n, true); }

pd_status pd__shape_SpaceToDepth(pd_graph *g, pd__node *n) { return space_depth_shape(g, n, false); }

#undef RESOLVE

/* ---- FLOPs: these ops only move data ------------------------------------------ */

#define PD__NO_FLOPS(name)                                                                                             \
    double pd__flops_##name(const pd_graph *g, const pd__node *n) {                                                    \
        (void)g;                                                                                                       \
        (void)n;                                                                                                       \
        return 0;                                                                                                      \
    }
PD__NO_FLOPS(Flatten)
PD__NO_FLOPS(Reshape)
PD__NO_FLOPS(Transpose)
PD__NO_FLOPS(Concat)
PD__NO_FLOPS(Split)
PD__NO_FLOPS(Slice)
PD__NO_FLOPS(Gather)
PD__NO_FLOPS(Unsqueeze)
PD__NO_FLOPS(Squeeze)
PD__NO_FLOPS(Expand)
PD__NO_FLOPS(Pad)
PD__NO_FLOPS(Constant)
PD__NO_FLOPS(Shape)
PD__NO_FLOPS(ConstantOfShape)
PD__NO_FLOPS(Range)
PD__NO_FLOPS(Trilu)
PD__NO_FLOPS(Size)
PD__NO_FLOPS(Tile)
PD__NO_FLOPS(OneHot)
PD__NO_FLOPS(GatherElements)
PD__NO_FLOPS(GatherND)
PD__NO_FLOPS(ScatterElements)
PD__NO_FLOPS(ScatterND)
PD__NO_FLOPS(Scatter)
PD__NO_FLOPS(TensorScatter)
PD__NO_FLOPS(DepthToSpace)
PD__NO_FLOPS(SpaceToDepth)
PD__NO_FLOPS(EyeLike)
PD__NO_FLOPS(Compress)
PD__NO_FLOPS(ReverseSequence)
PD__NO_FLOPS(NonZero)

/* CumSum, CumProd: one add or multiply per element; ArgMax, ArgMin, Hardmax: one compare; TopK: a
 * sort of each slice along the axis (n log n compares). */
static double numel_in0(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = pd__in((pd_graph *)g, n, 0);
    return x == NULL ? 0 : (double)x->numel;
}
double pd__flops_CumSum(const pd_graph *g, const pd__node *n) { return numel_in0(g, n); }
double pd__flops_CumProd(const pd_graph *g, const pd__node *n) { return numel_in0(g, n); }
double pd__flops_ArgMax(const pd_graph *g, const pd__node *n) { return numel_in0(g, n); }
double pd__flops_ArgMin(const pd_graph *g, const pd__node *n) { return numel_in0(g, n); }
double pd__flops_Hardmax(const pd_graph *g, const pd__node *n) { return numel_in0(g, n); }
double pd__flops_TopK(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = pd__in((pd_graph *)g, n, 0);
    if (x == NULL || x->ndim < 1) return 0;
    int axis = 0;
    if (pd__reduce_axis(n, x->ndim, -1, &axis) != PD_OK) return 0;
    double len = (double)x->shape[axis];
    return len > 1 ? (double)x->numel * log2(len) : 0;
}

/* ---- HannWindow, HammingWindow, BlackmanWindow, MelWeightMatrix ------------------------------- */

/* Scalar int input i, constant at load: these ops' output shapes are its value. */
static pd_status const_scalar(pd_graph *g, pd__node *n, int i, const char *what, int64_t *v) {
    int64_t vals[1];
    int k = 0;
    PD_TRY(const_ints(g, n, i, what, 1, vals, &k));
    if (k != 1) return pd__node_err(g, n, PD_ERR_SHAPE, "%s must be a scalar", what);
    *v = vals[0];
    return PD_OK;
}

/* output_datatype: a float dtype (the ONNX enum); the integer outputs the
 * spec allows are not supported. */
static pd_status out_float_dtype(pd_graph *g, pd__node *n, pd_dtype *dt) {
    int64_t t = pd__attr_i(n, "output_datatype", PD_FLOAT);
    if (t < 0 || t > 64 || !is_float_dtype((pd_dtype)t))
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "output_datatype %lld is not supported (float types only)",
                            (long long)t);
    *dt = (pd_dtype)t;
    return PD_OK;
}

static pd_status shape_window(pd_graph *g, pd__node *n) {
    int64_t size = 0;
    pd_dtype dt = PD_FLOAT;
    PD_TRY(out_float_dtype(g, n, &dt));
    PD_TRY(const_scalar(g, n, 0, "size", &size));
    if (size < 0) return pd__node_err(g, n, PD_ERR_SHAPE, "size %lld is negative", (long long)size);
    return set_out(g, n, 0, dt, 1, &size);
}

pd_status pd__shape_HannWindow(pd_graph *g, pd__node *n) { return shape_window(g, n); }
pd_status pd__shape_HammingWindow(pd_graph *g, pd__node *n) { return shape_window(g, n); }
pd_status pd__shape_BlackmanWindow(pd_graph *g, pd__node *n) { return shape_window(g, n); }

/* (dft_length / 2 + 1, num_mel_bins); the sample rate and edges may come at run time. */
pd_status pd__shape_MelWeightMatrix(pd_graph *g, pd__node *n) {
    int64_t bins = 0, len = 0;
    pd_dtype dt = PD_FLOAT;
    PD_TRY(out_float_dtype(g, n, &dt));
    PD_TRY(const_scalar(g, n, 0, "num_mel_bins", &bins));
    PD_TRY(const_scalar(g, n, 1, "dft_length", &len));
    for (int i = 2; i < 5; i++) {
        pd__tensor *t = NULL;
        PD_TRY(need_in(g, n, i, i == 2 ? "sample_rate" : i == 3 ? "lower_edge_hertz" : "upper_edge_hertz", &t));
        if (t->numel != 1) return pd__node_err(g, n, PD_ERR_SHAPE, "input %d must be a scalar", i);
    }
    if (bins < 1 || len < 1)
        return pd__node_err(g, n, PD_ERR_SHAPE, "num_mel_bins %lld and dft_length %lld must be positive",
                            (long long)bins, (long long)len);
    int64_t ys[2] = {len / 2 + 1, bins};
    return set_out(g, n, 0, dt, 2, ys);
}

static double numel_out0(const pd_graph *g, const pd__node *n) {
    const pd__tensor *y = pd__out((pd_graph *)g, n, 0);
    return y == NULL ? 0 : (double)y->numel;
}
double pd__flops_HannWindow(const pd_graph *g, const pd__node *n) { return 4 * numel_out0(g, n); }
double pd__flops_HammingWindow(const pd_graph *g, const pd__node *n) { return 4 * numel_out0(g, n); }
double pd__flops_BlackmanWindow(const pd_graph *g, const pd__node *n) { return 8 * numel_out0(g, n); }
double pd__flops_MelWeightMatrix(const pd_graph *g, const pd__node *n) { return numel_out0(g, n); }

/* ---- DFT, STFT ------------------------------------------------------------------------------------ */

static pd_status scalar_of(const pd_tensor *t, const char *what, int64_t *v) {
    if (t->data == NULL) return pd__err(PD_ERR_UNSUPPORTED, "%s must be constant at load (output shapes are static)", what);
    if (view_numel(t) != 1 || !is_int_dtype(t->dtype))
        return pd__err(PD_ERR_SHAPE, "%s must be an int scalar", what);
    *v = pd__get_i(t->dtype, t->data, 0);
    return PD_OK;
}

pd_status pd__dft_plan(const pd__node *n, const pd_tensor *x, const pd_tensor *len, const pd_tensor *axis, pd__dft *p) {
    int r = x->ndim;
    if (r < 2 || (x->shape[r - 1] != 1 && x->shape[r - 1] != 2))
        return pd__err(PD_ERR_SHAPE, "input must have rank >= 2 and a last dim of 1 (real) or 2 (complex)");
    if (!is_float_dtype(x->dtype)) return pd__err(PD_ERR_UNSUPPORTED, "DFT of %s is not supported", pd_dtype_name(x->dtype));
    /* the axis counts the last (real/imaginary) dim too: [-r, -2] or [0, r - 2] */
    int64_t a = n->opset >= 20 ? -2 : pd__attr_i(n, "axis", 1);
    if (n->opset >= 20 && axis != NULL) PD_TRY(scalar_of(axis, "axis", &a));
    if (a < 0) a += r;
    if (a < 0 || a > r - 2) return pd__err(PD_ERR_SHAPE, "axis is out of range for rank %d", r);
    p->axis = (int)a;
    p->inverse = pd__attr_i(n, "inverse", 0) != 0;
    p->onesided = pd__attr_i(n, "onesided", 0) != 0;
    p->cin = (int)x->shape[r - 1];
    p->lin = x->shape[a];
    p->outer = p->inner = 1;
    for (int i = 0; i < a; i++) p->outer *= x->shape[i];
    for (int i = (int)a + 1; i < r - 1; i++) p->inner *= x->shape[i];
    bool half_in = p->inverse && p->onesided;
    p->n = half_in ? 2 * (p->lin - 1) : p->lin;
    if (len != NULL) PD_TRY(scalar_of(len, "dft_length", &p->n));
    if (p->n < 1) return pd__err(PD_ERR_SHAPE, "dft_length %lld must be positive", (long long)p->n);
    p->m = half_in || !p->onesided ? p->n : p->n / 2 + 1;
    p->cout = half_in ? 1 : 2;
    return PD_OK;
}

pd_status pd__shape_DFT(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL;
    PD_TRY(need_in(g, n, 0, "input", &x));
    pd_tensor v[MAX_VIEWS], *vp[MAX_VIEWS];
    PD_TRY(make_views(g, n, v, vp));
    pd__dft p;
    pd_status s = pd__dft_plan(n, vp[0], n->nin > 1 ? vp[1] : NULL, n->nin > 2 ? vp[2] : NULL, &p);
    if (s != PD_OK) return node_fail(g, n, s);
    int64_t ys[PD_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) ys[i] = x->shape[i];
    ys[p.axis] = p.m, ys[x->ndim - 1] = p.cout;
    return set_out(g, n, 0, x->dtype, x->ndim, ys);
}

pd_status pd__stft_plan(const pd__node *n, const pd_tensor *x, const pd_tensor *step, const pd_tensor *window,
                        const pd_tensor *frame_len, pd__stft *p) {
    if (x->ndim != 3 || (x->shape[2] != 1 && x->shape[2] != 2))
        return pd__err(PD_ERR_SHAPE, "signal must be (batch, length, 1 or 2)");
    if (!is_float_dtype(x->dtype)) return pd__err(PD_ERR_UNSUPPORTED, "STFT of %s is not supported", pd_dtype_name(x->dtype));
    if (step == NULL) return pd__err(PD_ERR_INVALID, "missing frame_step");
    PD_TRY(scalar_of(step, "frame_step", &p->step));
    p->frame_len = -1;
    if (frame_len != NULL) PD_TRY(scalar_of(frame_len, "frame_length", &p->frame_len));
    if (window != NULL) {
        if (window->ndim != 1 || (p->frame_len >= 0 && window->shape[0] != p->frame_len))
            return pd__err(PD_ERR_SHAPE, "window must be 1-D, frame_length long");
        p->frame_len = window->shape[0];
    }
    if (p->frame_len < 1 || p->step < 1)
        return pd__err(PD_ERR_SHAPE, "STFT needs a positive frame_step and a window or frame_length");
    p->batch = x->shape[0], p->length = x->shape[1], p->c = (int)x->shape[2];
    if (p->frame_len > p->length) return pd__err(PD_ERR_SHAPE, "frame_length exceeds the signal's length");
    p->frames = (p->length - p->frame_len) / p->step + 1;
    bool one = pd__attr_i(n, "onesided", 1) != 0 && p->c == 1;
    p->bins = one ? p->frame_len / 2 + 1 : p->frame_len;
    return PD_OK;
}

pd_status pd__shape_STFT(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL;
    PD_TRY(need_in(g, n, 0, "signal", &x));
    pd_tensor v[MAX_VIEWS], *vp[MAX_VIEWS];
    PD_TRY(make_views(g, n, v, vp));
    pd__stft p;
    pd_status s = pd__stft_plan(n, vp[0], n->nin > 1 ? vp[1] : NULL, n->nin > 2 ? vp[2] : NULL,
                                n->nin > 3 ? vp[3] : NULL, &p);
    if (s != PD_OK) return node_fail(g, n, s);
    int64_t ys[4] = {p.batch, p.frames, p.bins, 2};
    return set_out(g, n, 0, x->dtype, 4, ys);
}

double pd__flops_DFT(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = pd__in((pd_graph *)g, n, 0);
    return x == NULL ? 0 : 8 * numel_out0(g, n) * (double)x->shape[x->ndim > 1 ? 1 : 0];
}
double pd__flops_STFT(const pd_graph *g, const pd__node *n) {
    const pd__tensor *y = pd__out((pd_graph *)g, n, 0);
    return y == NULL || y->ndim != 4 ? 0 : 8 * (double)y->numel * (double)y->shape[2];
}

/* ---- NonMaxSuppression ---------------------------------------------------------------------------- */

/* The box's corners (ymin, xmin, ymax, xmax), from either diagonal or from the
 * center and size (center_point_box = 1). Float, as onnxruntime (which made
 * the tests) compares IoUs at the threshold. */
static void nms_corners(pd_dtype dt, const void *boxes, int64_t at, bool center, float *c) {
    float b[4];
    for (int i = 0; i < 4; i++) b[i] = (float)pd__get_f(dt, boxes, at + i);
    if (center) {
        c[0] = b[1] - b[3] / 2, c[1] = b[0] - b[2] / 2, c[2] = b[1] + b[3] / 2, c[3] = b[0] + b[2] / 2;
    } else {
        c[0] = fminf(b[0], b[2]), c[1] = fminf(b[1], b[3]), c[2] = fmaxf(b[0], b[2]), c[3] = fmaxf(b[1], b[3]);
    }
}

static bool nms_overlaps(const float *a, const float *b, float thr) {
    float ih = fminf(a[2], b[2]) - fmaxf(a[0], b[0]), iw = fminf(a[3], b[3]) - fmaxf(a[1], b[1]);
    float inter = fmaxf(ih, 0) * fmaxf(iw, 0);
    if (inter <= 0) return false;
    float aa = (a[2] - a[0]) * (a[3] - a[1]), ab = (b[2] - b[0]) * (b[3] - b[1]), uni = aa + ab - inter;
    if (aa <= 0 || ab <= 0 || uni <= 0) return false;
    return inter / uni > thr;
}

typedef struct {
    float s;
    int64_t i;
} nms_cand;

/* Higher score first; equal scores by index, as onnxruntime's queue orders them. */
static int nms_cmp(const void *pa, const void *pb) {
    const nms_cand *a = (const nms_cand *)pa, *b = (const nms_cand *)pb;
    if (a->s != b->s) return a->s > b->s ? -1 : 1;
    return a->i < b->i ? -1 : a->i > b->i;
}

pd_status pd__nms_select(const pd__node *n, const pd_tensor *const *in, int nin, int64_t *sel, int64_t *out) {
    const pd_tensor *boxes = in[0], *scores = in[1];
    if (boxes->ndim != 3 || boxes->shape[2] != 4 || scores->ndim != 3 || scores->shape[0] != boxes->shape[0] ||
        scores->shape[2] != boxes->shape[1]) {
        return pd__err(PD_ERR_SHAPE, "boxes (batch, spatial, 4) and scores (batch, classes, spatial) do not match");
    }
    int64_t maxsel = 0;
    float iou = 0, sthr = -INFINITY;
    if (nin > 2 && in[2] != NULL && view_numel(in[2]) > 0) maxsel = pd__get_i(in[2]->dtype, in[2]->data, 0);
    if (nin > 3 && in[3] != NULL && view_numel(in[3]) > 0) iou = (float)pd__get_f(in[3]->dtype, in[3]->data, 0);
    if (nin > 4 && in[4] != NULL && view_numel(in[4]) > 0) sthr = (float)pd__get_f(in[4]->dtype, in[4]->data, 0);
    bool center = pd__attr_i(n, "center_point_box", 0) != 0;
    int64_t B = boxes->shape[0], S = boxes->shape[1], K = scores->shape[1], count = 0;
    nms_cand *cand = (nms_cand *)PD_MALLOC((size_t)(S > 0 ? S : 1) * sizeof *cand);
    float *kept = (float *)PD_MALLOC((size_t)(S > 0 ? S : 1) * 4 * sizeof *kept);
    if (cand == NULL || kept == NULL) {
        PD_FREE(cand), PD_FREE(kept);
        return pd__err(PD_ERR_NOMEM, "out of memory");
    }
    for (int64_t b = 0; b < B; b++)
        for (int64_t k = 0; k < K && maxsel > 0; k++) {
            int64_t nc = 0, nk = 0;
            for (int64_t i = 0; i < S; i++) {
                float s = (float)pd__get_f(scores->dtype, scores->data, (b * K + k) * S + i);
                if (s > sthr) cand[nc].s = s, cand[nc].i = i, nc++;
            }
            qsort(cand, (size_t)nc, sizeof *cand, nms_cmp);
            for (int64_t c = 0; c < nc && nk < maxsel; c++) {
                float box[4];
                nms_corners(boxes->dtype, boxes->data, (b * S + cand[c].i) * 4, center, box);
                bool drop = false;
                for (int64_t j = 0; j < nk && !drop; j++) drop = nms_overlaps(&kept[4 * j], box, iou);
                if (drop) continue;
                memcpy(&kept[4 * nk++], box, sizeof box);
                if (sel) sel[3 * count] = b, sel[3 * count + 1] = k, sel[3 * count + 2] = cand[c].i;
                count++;
            }
        }
    PD_FREE(cand), PD_FREE(kept);
    *out = count;
    return PD_OK;
}

/* The output's length is the selection's: known only from the data, so every
 * input must be a constant at load (the op then folds). */
pd_status pd__shape_NonMaxSuppression(pd_graph *g, pd__node *n) {
    pd__tensor *t = NULL;
    PD_TRY(need_in(g, n, 0, "boxes", &t));
    PD_TRY(need_in(g, n, 1, "scores", &t));
    pd_tensor v[MAX_VIEWS], *vp[MAX_VIEWS];
    PD_TRY(make_views(g, n, v, vp));
    for (int i = 0; i < n->nin; i++)
        if (vp[i] != NULL && vp[i]->data == NULL && view_numel(vp[i]) > 0)
            return pd__node_err(g, n, PD_ERR_UNSUPPORTED,
                                "the output size depends on the data: input %d must be a constant at load", i);
    int64_t k = 0;
    pd_status s = pd__nms_select(n, (const pd_tensor *const *)vp, n->nin, NULL, &k);
    if (s != PD_OK) return node_fail(g, n, s);
    int64_t ys[2] = {k, 3};
    return set_out(g, n, 0, PD_INT64, 2, ys);
}

PD__NO_FLOPS(NonMaxSuppression)

/* ---- Unique --------------------------------------------------------------------------------------- */

typedef struct {
    const pd_tensor *x;
    int64_t inner, m, outer; /* slice s is x[o, s, i] for o < outer, i < inner */
    bool fl;
} uq_ctx;

/* Slices compared element by element in C order, as numpy.unique does. */
static int uq_cmp(const uq_ctx *c, int64_t a, int64_t b) {
    for (int64_t o = 0; o < c->outer; o++)
        for (int64_t i = 0; i < c->inner; i++) {
            int64_t ia = (o * c->m + a) * c->inner + i, ib = (o * c->m + b) * c->inner + i;
            if (c->fl) {
                double va = pd__get_f(c->x->dtype, c->x->data, ia), vb = pd__get_f(c->x->dtype, c->x->data, ib);
                if (va != vb) return va < vb ? -1 : 1;
            } else {
                int64_t va = pd__get_i(c->x->dtype, c->x->data, ia), vb = pd__get_i(c->x->dtype, c->x->data, ib);
                if (va != vb) return va < vb ? -1 : 1;
            }
        }
    return 0;
}

/* A stable merge sort of slice numbers (qsort takes no context). */
static void uq_sort(const uq_ctx *c, int64_t *v, int64_t *tmp, int64_t len) {
    if (len < 2) return;
    int64_t h = len / 2;
    uq_sort(c, v, tmp, h);
    uq_sort(c, v + h, tmp, len - h);
    int64_t i = 0, j = h, k = 0;
    while (i < h && j < len) tmp[k++] = uq_cmp(c, v[j], v[i]) < 0 ? v[j++] : v[i++];
    while (i < h) tmp[k++] = v[i++];
    while (j < len) tmp[k++] = v[j++];
    memcpy(v, tmp, (size_t)len * sizeof *v);
}

pd_status pd__unique_run(const pd__node *n, const pd_tensor *x, int *axis, int64_t *count, pd_tensor *const *out,
                         int nout) {
    uq_ctx c = {x, 1, view_numel(x), 1, is_float_dtype(x->dtype)};
    if (!c.fl && !is_int_dtype(x->dtype))
        return pd__err(PD_ERR_UNSUPPORTED, "Unique of %s is not supported", pd_dtype_name(x->dtype));
    *axis = -1;
    if (pd__attr_get(n, "axis") != NULL) {
        int64_t a = pd__attr_i(n, "axis", 0);
        if (a < 0) a += x->ndim;
        if (a < 0 || a >= x->ndim) return pd__err(PD_ERR_SHAPE, "axis is out of range for rank %d", x->ndim);
        *axis = (int)a;
        c.m = x->shape[a];
        for (int i = 0; i < a; i++) c.outer *= x->shape[i];
        for (int i = (int)a + 1; i < x->ndim; i++) c.inner *= x->shape[i];
    }
    int64_t M = c.m, *ord = (int64_t *)PD_MALLOC((size_t)(3 * M + 1) * sizeof *ord), *tmp = ord + M,
            *grp = ord + 2 * M;
    if (ord == NULL) return pd__err(PD_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < M; i++) ord[i] = i;
    uq_sort(&c, ord, tmp, M);
    /* grp[slice] = its group in sorted order; tmp[g] = the group's first slice */
    int64_t U = 0;
    for (int64_t i = 0; i < M; i++) {
        if (i == 0 || uq_cmp(&c, ord[i - 1], ord[i]) != 0) tmp[U++] = ord[i];
        grp[ord[i]] = U - 1;
    }
    *count = U;
    if (out != NULL) {
        /* unsorted: groups in the order of their first slice; rank[g] = the output position */
        bool sorted = pd__attr_i(n, "sorted", 1) != 0;
        int64_t *rank = ord; /* ord is no longer needed */
        if (sorted) {
            for (int64_t g = 0; g < U; g++) rank[g] = g;
        } else {
            int64_t k = 0;
            for (int64_t i = 0; i < M; i++)
                if (tmp[grp[i]] == i) rank[grp[i]] = k++;
        }
        pd_tensor *Y = nout > 0 ? out[0] : NULL, *I = nout > 1 ? out[1] : NULL, *V = nout > 2 ? out[2] : NULL,
                  *C = nout > 3 ? out[3] : NULL;
        size_t es = pd_dtype_size(x->dtype);
        for (int64_t g = 0; g < U; g++) {
            int64_t r = rank[g], s = tmp[g];
            if (I) ((int64_t *)I->data)[r] = s;
            if (C) ((int64_t *)C->data)[r] = 0;
            if (Y)
                for (int64_t o = 0; o < c.outer; o++)
                    memcpy((char *)Y->data + ((o * U + r) * c.inner) * (int64_t)es,
                           (const char *)x->data + ((o * M + s) * c.inner) * (int64_t)es, (size_t)c.inner * es);
        }
        for (int64_t i = 0; i < M; i++) {
            if (V) ((int64_t *)V->data)[i] = rank[grp[i]];
            if (C) ((int64_t *)C->data)[rank[grp[i]]]++;
        }
    }
    PD_FREE(ord);
    return PD_OK;
}

/* The number of unique values is known only from the data: X must be a
 * constant at load (the op then folds). */
pd_status pd__shape_Unique(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL;
    PD_TRY(need_data(g, n, 0, &x));
    pd_tensor v[MAX_VIEWS], *vp[MAX_VIEWS];
    PD_TRY(make_views(g, n, v, vp));
    if (vp[0]->data == NULL && x->numel > 0)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "the output size depends on the data: X must be a constant at load");
    int axis = -1;
    int64_t U = 0;
    pd_status s = pd__unique_run(n, vp[0], &axis, &U, NULL, 0);
    if (s != PD_OK) return node_fail(g, n, s);
    int64_t ys[PD_MAX_DIMS], M = axis < 0 ? x->numel : x->shape[axis];
    if (axis < 0) {
        PD_TRY(set_out(g, n, 0, x->dtype, 1, &U));
    } else {
        for (int i = 0; i < x->ndim; i++) ys[i] = x->shape[i];
        ys[axis] = U;
        PD_TRY(set_out(g, n, 0, x->dtype, x->ndim, ys));
    }
    PD_TRY(set_out(g, n, 1, PD_INT64, 1, &U));
    PD_TRY(set_out(g, n, 2, PD_INT64, 1, &M));
    return set_out(g, n, 3, PD_INT64, 1, &U);
}

PD__NO_FLOPS(Unique)

/* ---- TfIdfVectorizer ---------------------------------------------------------- */

pd_status pd__tfidf_width(const pd__node *n, int64_t *width) {
    const int64_t *idx, *cnt, *pool;
    int nidx = pd__attr_ints(n, "ngram_indexes", &idx), ncnt = pd__attr_ints(n, "ngram_counts", &cnt);
    int npool = pd__attr_ints(n, "pool_int64s", &pool);
    const char *mode = pd__attr_s(n, "mode", "");
    int64_t lo = pd__attr_i(n, "min_gram_length", 0), hi = pd__attr_i(n, "max_gram_length", 0);
    if (pd__attr_get(n, "pool_strings"))
        return pd__err(PD_ERR_UNSUPPORTED, "a string pool (pool_strings) is not supported: string tensors are not");
    if (strcmp(mode, "TF") != 0 && strcmp(mode, "IDF") != 0 && strcmp(mode, "TFIDF") != 0)
        return pd__err(PD_ERR_INVALID, "mode '%s' (TF, IDF and TFIDF are defined)", mode);
    if (lo < 1 || hi < lo || pd__attr_i(n, "max_skip_count", 0) < 0)
        return pd__err(PD_ERR_INVALID, "min_gram_length %lld, max_gram_length %lld and max_skip_count %lld", (long long)lo,
                       (long long)hi, (long long)pd__attr_i(n, "max_skip_count", 0));
    if (nidx < 1 || ncnt < 1)
        return pd__err(PD_ERR_INVALID, "ngram_indexes and ngram_counts must be given");
    for (int i = 0; i < ncnt; i++)
        if (cnt[i] < 0 || cnt[i] > npool || (i && cnt[i] < cnt[i - 1]))
            return pd__err(PD_ERR_INVALID, "ngram_counts[%d] = %lld is not an increasing offset into the %d-item pool",
                           i, (long long)cnt[i], npool);
    int64_t w = 0;
    for (int i = 0; i < nidx; i++) {
        if (idx[i] < 0) return pd__err(PD_ERR_INVALID, "ngram_indexes[%d] = %lld is negative", i, (long long)idx[i]);
        if (idx[i] + 1 > w) w = idx[i] + 1;
    }
    const float *wt;
    int nw = pd__attr_floats(n, "weights", &wt);
    if (nw && nw < w)
        return pd__err(PD_ERR_INVALID, "%d weights for %lld outputs", nw, (long long)w);
    *width = w;
    return PD_OK;
}

/* X (C) or (B, C) of int32 or int64 gives float Y (width) or (B, width). */
pd_status pd__shape_TfIdfVectorizer(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL;
    PD_TRY(need_in(g, n, 0, "X", &x));
    if (x->dtype != PD_INT32 && x->dtype != PD_INT64)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "X has dtype %s (int32 and int64 are supported)",
                            pd_dtype_name(x->dtype));
    if (x->ndim < 1 || x->ndim > 2)
        return pd__node_err(g, n, PD_ERR_SHAPE, "X must be [C] or [B, C], has rank %d", x->ndim);
    int64_t w;
    pd_status st = pd__tfidf_width(n, &w);
    if (st != PD_OK) return node_fail(g, n, st);
    int64_t ys[2] = {x->shape[0], w};
    return x->ndim == 1 ? set_out(g, n, 0, PD_FLOAT, 1, &w) : set_out(g, n, 0, PD_FLOAT, 2, ys);
}

double pd__flops_TfIdfVectorizer(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = n->nin > 0 && n->in[0] >= 0 ? &g->tensors[n->in[0]] : NULL;
    int64_t hi = pd__attr_i(n, "max_gram_length", 1), sk = pd__attr_i(n, "max_skip_count", 0);
    return x && x->numel > 0 ? (double)x->numel * (double)hi * (double)(sk + 1) : 0;
}

/* ---- ai.onnx.ml: ArrayFeatureExtractor ------------------------------------------------ */

/* The elements of X's last axis at the int64 indices Y (any shape,
 * flattened): X's leading dims then numel(Y); a 1-D X gives (1, numel(Y)),
 * as ONNX's reference and onnxruntime do. Not differentiable here (an
 * inference op of the ML domain): training through it is refused. */
pd_status pd__shape_ArrayFeatureExtractor(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL, *y = NULL;
    PD_TRY(need_in(g, n, 0, "X", &x));
    PD_TRY(need_in(g, n, 1, "Y", &y));
    if (y->dtype != PD_INT64) return pd__node_err(g, n, PD_ERR_SHAPE, "Y has dtype %s, expected int64", pd_dtype_name(y->dtype));
    if (x->ndim < 1 || pd_dtype_size(x->dtype) == 0 || x->dtype == PD_STRING)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "X (%s, rank %d) must be a numeric tensor of rank >= 1",
                            pd_dtype_name(x->dtype), x->ndim);
    int64_t s[PD_MAX_DIMS];
    int r = x->ndim == 1 ? 2 : x->ndim;
    if (x->ndim == 1) s[0] = 1;
    else memcpy(s, x->shape, sizeof(int64_t) * (size_t)(x->ndim - 1));
    s[r - 1] = y->numel;
    return set_out(g, n, 0, x->dtype, r, s);
}

PD__NO_FLOPS(ArrayFeatureExtractor)
