/* shape_nn.c - shape rules and FLOP counts of the neural-network ops
 * (convolutions, pools, normalizations, attention, losses, quantized
 * products; the list and how it works: docs/INTERNALS.md, "core/shape_nn.c").
 */
#include "shape_nn.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- small helpers ---------------------------------------------------------- */

/* A shape formatted for a message; the temporary lives to the end of the call. */
typedef struct pd__shp {
    char s[160];
} pd__shp;

static pd__shp shp(const pd__tensor *t) {
    pd__shp b;
    pd__format_shape(b.s, sizeof b.s, t->ndim, t->shape);
    return b;
}

static pd__shp shpv(int n, const int64_t *v) {
    pd__shp b;
    pd__format_shape(b.s, sizeof b.s, n, v);
    return b;
}

static bool is_float(pd_dtype t) { return t == PD_FLOAT || t == PD_DOUBLE; }

static const pd__tensor *cin(const pd_graph *g, const pd__node *n, int i) {
    return (i < n->nin && n->in[i] >= 0) ? &g->tensors[n->in[i]] : NULL;
}

static const pd__tensor *cout(const pd_graph *g, const pd__node *n, int i) {
    return (i < n->nout && n->out[i] >= 0) ? &g->tensors[n->out[i]] : NULL;
}

static int64_t prod(int n, const int64_t *v) {
    int64_t p = 1;
    for (int i = 0; i < n; i++) p *= v[i];
    return p;
}

/* The same in double, for FLOP counts: kernel_shape comes from the file
 * unchecked, and the products of huge declared shapes overflow an int64. */
static double dprod(int n, const int64_t *v) {
    double p = 1;
    for (int i = 0; i < n; i++) p *= (double)v[i];
    return p;
}

static double dnumel(const pd__tensor *t) { return t->numel > 0 ? (double)t->numel : 0; }

/* Adds the node prefix to a message set with pd__err (geometry errors). */
static pd_status node_prefix(const pd_graph *g, const pd__node *n, pd_status st) {
    pd__err_prefix("%s: node '%s' (%s)", g->path, n->name, n->op_type);
    return st;
}

static pd_status need(pd_graph *g, pd__node *n, int i, const char *what, pd__tensor **t) {
    *t = pd__in(g, n, i);
    if (!*t) return pd__node_err(g, n, PD_ERR_INVALID, "input %d (%s) is missing", i, what);
    return PD_OK;
}

static pd_status need_float(pd_graph *g, pd__node *n, const pd__tensor *t, const char *what) {
    if (!is_float(t->dtype))
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "%s '%s' has dtype %s (float and double are supported)", what,
                            t->name, pd_dtype_name(t->dtype));
    return PD_OK;
}

/* The same, float16 and bfloat16 accepted too: the ops whose CPU kernels
 * widen them to float32 (runtime/cpu/nn.c, half_run). */
static pd_status need_float_half(pd_graph *g, pd__node *n, const pd__tensor *t, const char *what) {
    if (t->dtype == PD_FLOAT16 || t->dtype == PD_BFLOAT16) return PD_OK;
    return need_float(g, n, t, what);
}

static pd_status need_dtype(pd_graph *g, pd__node *n, const pd__tensor *t, pd_dtype want, const char *what) {
    if (t->dtype != want)
        return pd__node_err(g, n, PD_ERR_SHAPE, "%s '%s' has dtype %s, expected %s", what, t->name,
                            pd_dtype_name(t->dtype), pd_dtype_name(want));
    return PD_OK;
}

/* Sets output i's dtype and shape (absent optional outputs are skipped). */
static pd_status set_out(pd_graph *g, pd__node *n, int i, pd_dtype dt, int ndim, const int64_t *shape) {
    pd__tensor *t = pd__out(g, n, i);
    if (!t) return PD_OK;
    t->dtype = dt;
    return pd__tensor_set_shape(g, t, ndim, shape);
}

/* Normalizes an axis attribute into [0, hi]; false when out of [-r, hi]. */
static bool norm_axis(int64_t a, int r, int hi, int *out) {
    if (a < 0) a += r;
    if (a < 0 || a > hi) return false;
    *out = (int)a;
    return true;
}

/* ---- sliding windows -------------------------------------------------------- */

typedef enum { AP_NOTSET, AP_SAME_UPPER, AP_SAME_LOWER, AP_VALID } pd__autopad;

/* Reads an INTS attribute of `want` values into dst (def when absent). */
static pd_status win_ints(const pd__node *n, const char *name, int want, int64_t def, int64_t lo, int64_t *dst) {
    const int64_t *v;
    int c = pd__attr_ints(n, name, &v);
    if (c == 0) {
        for (int i = 0; i < want; i++) dst[i] = def;
        return PD_OK;
    }
    if (c != want)
        return pd__err(PD_ERR_SHAPE, "attribute %s has %d values, expected %d", name, c, want);
    for (int i = 0; i < want; i++) {
        if (v[i] < lo || v[i] > INT32_MAX)
            return pd__err(PD_ERR_SHAPE, "attribute %s has value %lld at %d (must be >= %lld)", name,
                           (long long)v[i], i, (long long)lo);
        dst[i] = v[i];
    }
    return PD_OK;
}

static int64_t floor_div2(int64_t v) { return v >= 0 ? v / 2 : -((-v + 1) / 2); }

static pd_status win_convt(const pd__node *n, pd__win *w, pd__autopad ap) {
    int ns = w->nsp;
    int64_t op[PD_MAX_DIMS];
    PD_TRY(win_ints(n, "output_padding", ns, 0, 0, op));
    const int64_t *osv;
    int osc = pd__attr_ints(n, "output_shape", &osv);
    if (osc && osc != ns && osc != ns + 2)
        return pd__err(PD_ERR_SHAPE, "attribute output_shape %s has %d values, expected %d", shpv(osc, osv).s, osc, ns);
    const int64_t *os = osc ? osv + (osc - ns) : NULL;
    for (int i = 0; i < ns; i++) {
        int64_t ek = (w->k[i] - 1) * w->d[i] + 1, grown;
        if (!pd__mul_ok(w->s[i], w->in[i], &grown) || grown > INT64_MAX / 4)
            return pd__err(PD_ERR_SHAPE, "input size %lld times stride %lld overflows in spatial dim %d",
                           (long long)w->in[i], (long long)w->s[i], i);
        int64_t natural = w->s[i] * (w->in[i] - 1) + op[i] + ek;
        if (ap == AP_SAME_UPPER || ap == AP_SAME_LOWER) {
            /* as ONNX's reference: the output is in*stride (or output_shape), the
             * difference is split with the odd one at the end for SAME_UPPER */
            w->out[i] = os ? os[i] : w->in[i] * w->s[i];
            int64_t total = natural - w->out[i], half = floor_div2(total);
            w->pb[i] = ap == AP_SAME_UPPER ? half : total - half;
            w->pe[i] = total - w->pb[i];
        } else {
            if (ap == AP_VALID) w->pb[i] = w->pe[i] = 0;
            /* output_shape with explicit (or zero) pads grows or cuts at the end */
            w->out[i] = os ? os[i] : natural - w->pb[i] - w->pe[i];
        }
        if (w->out[i] < 1)
            return pd__err(PD_ERR_SHAPE, "output size %lld in spatial dim %d (input %lld, kernel %lld, stride %lld)",
                           (long long)w->out[i], i, (long long)w->in[i], (long long)w->k[i], (long long)w->s[i]);
    }
    return PD_OK;
}

pd_status pd__win_make(const pd__node *n, pd__win_kind kind, int ndim, const int64_t *x, const int64_t *ks,
                       pd__win *w) {
    memset(w, 0, sizeof *w);
    int ns = ndim - 2;
    if (ns < 1)
        return pd__err(PD_ERR_SHAPE, "input %s has rank %d; expected (N, C, D1, ...) with a spatial dim",
                       shpv(ndim, x).s, ndim);
    w->nsp = ns;
    for (int i = 0; i < ns; i++) w->in[i] = x[i + 2];
    const int64_t *kv;
    int kc = pd__attr_ints(n, "kernel_shape", &kv);
    if (kind == PD_WIN_POOL) {
        if (kc != ns)
            return pd__err(PD_ERR_SHAPE, "attribute kernel_shape has %d values, expected %d for input %s", kc, ns,
                           shpv(ndim, x).s);
        PD_TRY(win_ints(n, "kernel_shape", ns, 1, 1, w->k));
    } else {
        for (int i = 0; i < ns; i++) w->k[i] = ks[i];
        if (kc && (kc != ns || memcmp(kv, ks, sizeof(int64_t) * (size_t)ns) != 0))
            return pd__err(PD_ERR_SHAPE, "attribute kernel_shape %s does not match the weights' kernel %s",
                           shpv(kc, kv).s, shpv(ns, ks).s);
        for (int i = 0; i < ns; i++)
            if (w->k[i] < 1 || w->k[i] > INT32_MAX)
                return pd__err(PD_ERR_SHAPE, "kernel %s has an empty or huge dim", shpv(ns, ks).s);
    }
    PD_TRY(win_ints(n, "strides", ns, 1, 1, w->s));
    PD_TRY(win_ints(n, "dilations", ns, 1, 1, w->d));
    int64_t pads[2 * PD_MAX_DIMS];
    PD_TRY(win_ints(n, "pads", 2 * ns, 0, 0, pads));
    for (int i = 0; i < ns; i++) {
        w->pb[i] = pads[i];
        w->pe[i] = pads[ns + i];
    }
    const char *aps = pd__attr_s(n, "auto_pad", "NOTSET");
    pd__autopad ap;
    if (!strcmp(aps, "NOTSET") || !aps[0]) ap = AP_NOTSET;
    else if (!strcmp(aps, "SAME_UPPER")) ap = AP_SAME_UPPER;
    else if (!strcmp(aps, "SAME_LOWER")) ap = AP_SAME_LOWER;
    else if (!strcmp(aps, "VALID")) ap = AP_VALID;
    else return pd__err(PD_ERR_UNSUPPORTED, "attribute auto_pad '%s' is not NOTSET, SAME_UPPER, SAME_LOWER or VALID", aps);
    if (kind == PD_WIN_CONVT) return win_convt(n, w, ap);

    bool ceil_mode = kind == PD_WIN_POOL && pd__attr_i(n, "ceil_mode", 0) != 0;
    for (int i = 0; i < ns; i++) {
        int64_t in = w->in[i], s = w->s[i], ek = (w->k[i] - 1) * w->d[i] + 1;
        if (ap == AP_SAME_UPPER || ap == AP_SAME_LOWER) {
            w->out[i] = (in + s - 1) / s;
            int64_t total = (w->out[i] - 1) * s + ek - in;
            if (total < 0) total = 0;
            w->pb[i] = ap == AP_SAME_UPPER ? total / 2 : total - total / 2;
            w->pe[i] = total - w->pb[i];
        } else {
            if (ap == AP_VALID) w->pb[i] = w->pe[i] = 0;
            int64_t num = in + w->pb[i] + w->pe[i] - ek;
            if (num < 0)
                return pd__err(PD_ERR_SHAPE,
                               "window of %lld (kernel %lld, dilation %lld) is larger than the padded input %lld "
                               "in spatial dim %d of %s",
                               (long long)ek, (long long)w->k[i], (long long)w->d[i],
                               (long long)(in + w->pb[i] + w->pe[i]), i, shpv(ndim, x).s);
            if (ceil_mode) {
                w->out[i] = (num + s - 1) / s + 1;
                /* the last window must start inside the input or its leading pad */
                if ((w->out[i] - 1) * s >= in + w->pb[i]) w->out[i]--;
            } else {
                w->out[i] = num / s + 1;
            }
        }
        if (w->out[i] < 1)
            return pd__err(PD_ERR_SHAPE, "empty output in spatial dim %d of %s", i, shpv(ndim, x).s);
    }
    return PD_OK;
}

/* ---- Gemm, MatMul ------------------------------------------------------------- */

pd_status pd__shape_Gemm(pd_graph *g, pd__node *n) {
    pd__tensor *a, *b, *c = pd__in(g, n, 2);
    PD_TRY(need(g, n, 0, "A", &a));
    PD_TRY(need(g, n, 1, "B", &b));
    PD_TRY(need_float(g, n, a, "A"));
    PD_TRY(need_dtype(g, n, b, a->dtype, "B"));
    if (c) PD_TRY(need_dtype(g, n, c, a->dtype, "C"));
    int ta = pd__attr_i(n, "transA", 0) != 0, tb = pd__attr_i(n, "transB", 0) != 0;
    /* the loader's fused Linear (pd__fuse_linear) takes A (..., K); files' Gemm is 2-D */
    bool rows = !ta && a->ndim > 2 && n->domain && !strcmp(n->domain, PD__FUSED_DOMAIN);
    if ((a->ndim != 2 && !rows) || b->ndim != 2)
        return pd__node_err(g, n, PD_ERR_SHAPE, "A %s and B %s must be matrices", shp(a).s, shp(b).s);
    int64_t M = a->shape[ta], K = a->shape[ta ? 0 : a->ndim - 1], Kb = b->shape[tb], N = b->shape[!tb];
    if (K != Kb)
        return pd__node_err(g, n, PD_ERR_SHAPE, "A %s (transA=%d) and B %s (transB=%d): inner dims %lld and %lld differ",
                            shp(a).s, ta, shp(b).s, tb, (long long)K, (long long)Kb);
    if (c) {
        bool ok = c->ndim <= 2;
        if (ok && c->ndim >= 1) ok = c->shape[c->ndim - 1] == 1 || c->shape[c->ndim - 1] == N;
        if (ok && c->ndim == 2) ok = c->shape[0] == 1 || c->shape[0] == M;
        if (!ok)
            return pd__node_err(g, n, PD_ERR_SHAPE, "C %s does not broadcast to the output [%lld,%lld]", shp(c).s,
                                (long long)M, (long long)N);
    }
    if (c && c->ndim == 2 && c->shape[0] != 1 && rows)
        return pd__node_err(g, n, PD_ERR_SHAPE, "C %s must broadcast along A %s's rows", shp(c).s, shp(a).s);
    int64_t y[PD_MAX_DIMS] = {M, N};
    for (int d = 0; rows && d < a->ndim; d++) y[d] = d < a->ndim - 1 ? a->shape[d] : N;
    return set_out(g, n, 0, a->dtype, rows ? a->ndim : 2, y);
}

double pd__flops_Gemm(const pd_graph *g, const pd__node *n) {
    const pd__tensor *a = cin(g, n, 0), *y = cout(g, n, 0);
    if (!a || !y || a->ndim < 2 || y->ndim < 2) return 0;
    int64_t K = a->shape[pd__attr_i(n, "transA", 0) != 0 ? 0 : a->ndim - 1];
    return 2.0 * dnumel(y) * (double)K + (cin(g, n, 2) ? dnumel(y) : 0);
}

/* MatMul as numpy: 1-D operands are promoted (and the dim removed again),
 * batch dims broadcast. */
typedef struct pd__mm {
    int64_t M, N, K, Kb;
    double batch;             /* product of the batch dims (for FLOPs; may exceed an int64) */
    int ndim;                 /* output rank */
    int64_t out[PD_MAX_DIMS]; /* output shape */
    bool bcast_ok;
} pd__mm;

static void mm_dims(const pd__tensor *a, const pd__tensor *b, pd__mm *r) {
    int ra = a->ndim, rb = b->ndim;
    r->M = ra >= 2 ? a->shape[ra - 2] : 1;
    r->K = a->shape[ra - 1];
    r->Kb = rb >= 2 ? b->shape[rb - 2] : b->shape[0];
    r->N = rb >= 2 ? b->shape[rb - 1] : 1;
    int ba = ra > 2 ? ra - 2 : 0, bb = rb > 2 ? rb - 2 : 0, nb = ba > bb ? ba : bb;
    r->bcast_ok = true;
    r->batch = 1;
    r->ndim = 0;
    for (int i = 0; i < nb; i++) {
        int ia = i - (nb - ba), ib = i - (nb - bb);
        int64_t da = ia >= 0 ? a->shape[ia] : 1, db = ib >= 0 ? b->shape[ib] : 1;
        if (da != db && da != 1 && db != 1) r->bcast_ok = false;
        int64_t d = da == 1 ? db : da;
        r->out[r->ndim++] = d;
        r->batch *= (double)d;
    }
    if (ra >= 2) r->out[r->ndim++] = r->M;
    if (rb >= 2) r->out[r->ndim++] = r->N;
}

pd_status pd__shape_MatMul(pd_graph *g, pd__node *n) {
    pd__tensor *a, *b;
    PD_TRY(need(g, n, 0, "A", &a));
    PD_TRY(need(g, n, 1, "B", &b));
    PD_TRY(need_float_half(g, n, a, "A"));
    PD_TRY(need_dtype(g, n, b, a->dtype, "B"));
    if (a->ndim < 1 || b->ndim < 1)
        return pd__node_err(g, n, PD_ERR_SHAPE, "A %s and B %s must have rank >= 1", shp(a).s, shp(b).s);
    pd__mm r;
    mm_dims(a, b, &r);
    if (r.K != r.Kb)
        return pd__node_err(g, n, PD_ERR_SHAPE, "A %s and B %s: inner dims %lld and %lld differ", shp(a).s, shp(b).s,
                            (long long)r.K, (long long)r.Kb);
    if (!r.bcast_ok)
        return pd__node_err(g, n, PD_ERR_SHAPE, "A %s and B %s: batch dims do not broadcast", shp(a).s, shp(b).s);
    return set_out(g, n, 0, a->dtype, r.ndim, r.out);
}

double pd__flops_MatMul(const pd_graph *g, const pd__node *n) {
    const pd__tensor *a = cin(g, n, 0), *b = cin(g, n, 1);
    if (!a || !b || a->ndim < 1 || b->ndim < 1) return 0;
    pd__mm r;
    mm_dims(a, b, &r);
    return 2.0 * r.batch * (double)r.M * (double)r.N * (double)r.K;
}

/* ---- Conv, ConvTranspose ------------------------------------------------------------ */

/* Shared checks of X, W, B; *wch is W's dim that must equal C/group (Conv: 1, ConvTranspose: 0). */
static pd_status conv_inputs(pd_graph *g, pd__node *n, pd__tensor **x, pd__tensor **w, int64_t *group) {
    pd__tensor *b = pd__in(g, n, 2);
    PD_TRY(need(g, n, 0, "X", x));
    PD_TRY(need(g, n, 1, "W", w));
    /* float16 for Conv only: ConvTranspose has no float32 detour */
    PD_TRY(n->op == PD_OP_CONV ? need_float_half(g, n, *x, "X") : need_float(g, n, *x, "X"));
    PD_TRY(need_dtype(g, n, *w, (*x)->dtype, "W"));
    if (b) PD_TRY(need_dtype(g, n, b, (*x)->dtype, "B"));
    if ((*x)->ndim < 3)
        return pd__node_err(g, n, PD_ERR_SHAPE, "X %s must be (N, C, D1, ...)", shp(*x).s);
    if ((*w)->ndim != (*x)->ndim)
        return pd__node_err(g, n, PD_ERR_SHAPE, "W %s must have the rank of X %s", shp(*w).s, shp(*x).s);
    *group = pd__attr_i(n, "group", 1);
    if (*group < 1 || (*x)->shape[1] % *group != 0)
        return pd__node_err(g, n, PD_ERR_SHAPE, "X %s has %lld channels, not divisible by group=%lld", shp(*x).s,
                            (long long)(*x)->shape[1], (long long)*group);
    return PD_OK;
}

static pd_status conv_bias(pd_graph *g, pd__node *n, int64_t M) {
    pd__tensor *b = pd__in(g, n, 2);
    if (b && (b->ndim != 1 || b->shape[0] != M))
        return pd__node_err(g, n, PD_ERR_SHAPE, "B %s must be [%lld], one per output channel", shp(b).s, (long long)M);
    return PD_OK;
}

pd_status pd__shape_Conv(pd_graph *g, pd__node *n) {
    pd__tensor *x, *w;
    int64_t group = 1; /* set by conv_inputs; gcc cannot always see it */
    PD_TRY(conv_inputs(g, n, &x, &w, &group));
    int64_t C = x->shape[1], M = w->shape[0];
    if (w->shape[1] * group != C || M % group != 0)
        return pd__node_err(g, n, PD_ERR_SHAPE,
                            "X %s with group=%lld needs W [M, %lld, k...] with M divisible by the group; W is %s",
                            shp(x).s, (long long)group, (long long)(C / group), shp(w).s);
    PD_TRY(conv_bias(g, n, M));
    pd__win win;
    pd_status st = pd__win_make(n, PD_WIN_CONV, x->ndim, x->shape, w->shape + 2, &win);
    if (st != PD_OK) return node_prefix(g, n, st);
    int64_t y[PD_MAX_DIMS] = {x->shape[0], M};
    for (int i = 0; i < win.nsp; i++) y[i + 2] = win.out[i];
    return set_out(g, n, 0, x->dtype, x->ndim, y);
}

double pd__flops_Conv(const pd_graph *g, const pd__node *n) {
    const pd__tensor *w = cin(g, n, 1), *y = cout(g, n, 0);
    if (!w || !y || w->ndim < 3) return 0;
    /* each output element: (C/group) * prod(kernel) multiply-adds, plus the bias */
    return 2.0 * dnumel(y) * dprod(w->ndim - 1, w->shape + 1) + (cin(g, n, 2) ? dnumel(y) : 0);
}

pd_status pd__shape_ConvTranspose(pd_graph *g, pd__node *n) {
    pd__tensor *x, *w;
    int64_t group = 1; /* set by conv_inputs; gcc cannot always see it */
    PD_TRY(conv_inputs(g, n, &x, &w, &group));
    int64_t C = x->shape[1], M = w->shape[1] * group;
    if (w->shape[0] != C)
        return pd__node_err(g, n, PD_ERR_SHAPE, "X %s has %lld channels but W %s is [C, M/group, k...] with C=%lld",
                            shp(x).s, (long long)C, shp(w).s, (long long)w->shape[0]);
    PD_TRY(conv_bias(g, n, M));
    pd__win win;
    pd_status st = pd__win_make(n, PD_WIN_CONVT, x->ndim, x->shape, w->shape + 2, &win);
    if (st != PD_OK) return node_prefix(g, n, st);
    int64_t y[PD_MAX_DIMS] = {x->shape[0], M};
    for (int i = 0; i < win.nsp; i++) y[i + 2] = win.out[i];
    return set_out(g, n, 0, x->dtype, x->ndim, y);
}

double pd__flops_ConvTranspose(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = cin(g, n, 0), *w = cin(g, n, 1), *y = cout(g, n, 0);
    if (!x || !w || !y || w->ndim < 3) return 0;
    /* each input element scatters (M/group) * prod(kernel) multiply-adds */
    return 2.0 * dnumel(x) * dprod(w->ndim - 1, w->shape + 1) + (cin(g, n, 2) ? dnumel(y) : 0);
}

/* ---- MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv ---------------------------------- */
/* Integer products of (a - a_zero_point)(b - b_zero_point), summed in int32;
 * the QLinear forms then requantize with the three scales. Zero points and
 * scales hold one value or one per row of A / column of B / output channel. */

static bool is_q8(pd_dtype t) { return t == PD_INT8 || t == PD_UINT8; }

static pd_status need_q8(pd_graph *g, pd__node *n, const pd__tensor *t, const char *what) {
    if (!is_q8(t->dtype))
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "%s '%s' has dtype %s (int8 and uint8 are supported)", what,
                            t->name, pd_dtype_name(t->dtype));
    return PD_OK;
}

/* Optional input i: a zero point of `of`'s dtype or a float scale (of NULL), holding 1 or `per` values. */
static pd_status need_qparam(pd_graph *g, pd__node *n, int i, const char *what, const pd__tensor *of, int64_t per,
                             bool required) {
    pd__tensor *t = pd__in(g, n, i);
    if (!t) return required ? pd__node_err(g, n, PD_ERR_INVALID, "input %d (%s) is missing", i, what) : PD_OK;
    if (t->ndim < 0) return pd__node_err(g, n, PD_ERR_SHAPE, "%s '%s' has no known shape", what, t->name);
    if (of) PD_TRY(need_dtype(g, n, t, of->dtype, what));
    else if (t->dtype != PD_FLOAT && t->dtype != PD_DOUBLE && t->dtype != PD_FLOAT16)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "%s '%s' has dtype %s (float, double and float16 are supported)",
                            what, t->name, pd_dtype_name(t->dtype));
    if (t->numel != 1 && (per < 0 || t->numel != per))
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "%s '%s' %s: one value%s is supported", what, t->name,
                            shp(t).s, per < 0 ? "" : " or one per row / column / channel");
    return PD_OK;
}

/* A (..., M, K) times B (..., K, N) as MatMul; *r gets the dims. */
static pd_status qmm_shape(pd_graph *g, pd__node *n, const pd__tensor *a, const pd__tensor *b, pd__mm *r) {
    if (a->ndim < 1 || b->ndim < 1)
        return pd__node_err(g, n, PD_ERR_SHAPE, "A %s and B %s must have rank >= 1", shp(a).s, shp(b).s);
    mm_dims(a, b, r);
    if (r->K != r->Kb)
        return pd__node_err(g, n, PD_ERR_SHAPE, "A %s and B %s: inner dims %lld and %lld differ", shp(a).s, shp(b).s,
                            (long long)r->K, (long long)r->Kb);
    if (!r->bcast_ok)
        return pd__node_err(g, n, PD_ERR_SHAPE, "A %s and B %s: batch dims do not broadcast", shp(a).s, shp(b).s);
    return PD_OK;
}

pd_status pd__shape_MatMulInteger(pd_graph *g, pd__node *n) {
    pd__tensor *a, *b;
    PD_TRY(need(g, n, 0, "A", &a));
    PD_TRY(need(g, n, 1, "B", &b));
    PD_TRY(need_q8(g, n, a, "A"));
    PD_TRY(need_q8(g, n, b, "B"));
    pd__mm r;
    PD_TRY(qmm_shape(g, n, a, b, &r));
    PD_TRY(need_qparam(g, n, 2, "a_zero_point", a, r.M, false));
    PD_TRY(need_qparam(g, n, 3, "b_zero_point", b, r.N, false));
    return set_out(g, n, 0, PD_INT32, r.ndim, r.out);
}

double pd__flops_MatMulInteger(const pd_graph *g, const pd__node *n) { return pd__flops_MatMul(g, n); }

pd_status pd__shape_QLinearMatMul(pd_graph *g, pd__node *n) {
    pd__tensor *a, *b, *yz = pd__in(g, n, 7);
    PD_TRY(need(g, n, 0, "a", &a));
    PD_TRY(need(g, n, 3, "b", &b));
    PD_TRY(need_q8(g, n, a, "a"));
    PD_TRY(need_q8(g, n, b, "b"));
    pd__mm r;
    PD_TRY(qmm_shape(g, n, a, b, &r));
    PD_TRY(need_qparam(g, n, 1, "a_scale", NULL, r.M, true));
    PD_TRY(need_qparam(g, n, 2, "a_zero_point", a, r.M, false));
    PD_TRY(need_qparam(g, n, 4, "b_scale", NULL, r.N, true));
    PD_TRY(need_qparam(g, n, 5, "b_zero_point", b, r.N, false));
    PD_TRY(need_qparam(g, n, 6, "y_scale", NULL, -1, true));
    if (yz) PD_TRY(need_q8(g, n, yz, "y_zero_point"));
    PD_TRY(need_qparam(g, n, 7, "y_zero_point", yz, -1, false));
    return set_out(g, n, 0, yz ? yz->dtype : a->dtype, r.ndim, r.out);
}

double pd__flops_QLinearMatMul(const pd_graph *g, const pd__node *n) {
    const pd__tensor *a = cin(g, n, 0), *b = cin(g, n, 3);
    if (!a || !b || a->ndim < 1 || b->ndim < 1) return 0;
    pd__mm r;
    mm_dims(a, b, &r);
    return 2.0 * r.batch * (double)r.M * (double)r.N * (double)r.K;
}

/* X (N, C, D...) and W (M, C/group, k...) of int8 / uint8, geometry as Conv. */
static pd_status qconv_shape(pd_graph *g, pd__node *n, int xi, int wi, pd_dtype ydt) {
    pd__tensor *x, *w;
    PD_TRY(need(g, n, xi, "x", &x));
    PD_TRY(need(g, n, wi, "w", &w));
    PD_TRY(need_q8(g, n, x, "x"));
    PD_TRY(need_q8(g, n, w, "w"));
    if (x->ndim < 3 || w->ndim != x->ndim)
        return pd__node_err(g, n, PD_ERR_SHAPE, "x %s must be (N, C, D1, ...) and w %s of its rank", shp(x).s,
                            shp(w).s);
    int64_t group = pd__attr_i(n, "group", 1), C = x->shape[1], M = w->shape[0];
    if (group < 1 || C % group != 0 || w->shape[1] * group != C || M % group != 0)
        return pd__node_err(g, n, PD_ERR_SHAPE, "x %s with group=%lld needs w [M, %lld, k...] with M divisible by the "
                            "group; w is %s", shp(x).s, (long long)group, (long long)(group >= 1 ? C / group : C),
                            shp(w).s);
    pd__win win;
    pd_status st = pd__win_make(n, PD_WIN_CONV, x->ndim, x->shape, w->shape + 2, &win);
    if (st != PD_OK) return node_prefix(g, n, st);
    int64_t y[PD_MAX_DIMS] = {x->shape[0], M};
    for (int i = 0; i < win.nsp; i++) y[i + 2] = win.out[i];
    return set_out(g, n, 0, ydt == PD_UNDEFINED ? x->dtype : ydt, x->ndim, y);
}

pd_status pd__shape_ConvInteger(pd_graph *g, pd__node *n) {
    PD_TRY(qconv_shape(g, n, 0, 1, PD_INT32));
    const pd__tensor *x = cin(g, n, 0), *w = cin(g, n, 1);
    PD_TRY(need_qparam(g, n, 2, "x_zero_point", x, -2, false));
    return need_qparam(g, n, 3, "w_zero_point", w, w->shape[0], false);
}

double pd__flops_ConvInteger(const pd_graph *g, const pd__node *n) { return pd__flops_Conv(g, n); }

pd_status pd__shape_QLinearConv(pd_graph *g, pd__node *n) {
    pd__tensor *yz = pd__in(g, n, 7), *b = pd__in(g, n, 8);
    if (yz) PD_TRY(need_q8(g, n, yz, "y_zero_point"));
    PD_TRY(qconv_shape(g, n, 0, 3, yz ? yz->dtype : PD_UNDEFINED));
    const pd__tensor *x = cin(g, n, 0), *w = cin(g, n, 3);
    int64_t M = w->shape[0];
    PD_TRY(need_qparam(g, n, 1, "x_scale", NULL, -1, true));
    PD_TRY(need_qparam(g, n, 2, "x_zero_point", x, -1, false));
    PD_TRY(need_qparam(g, n, 4, "w_scale", NULL, M, true));
    PD_TRY(need_qparam(g, n, 5, "w_zero_point", w, M, false));
    PD_TRY(need_qparam(g, n, 6, "y_scale", NULL, -1, true));
    PD_TRY(need_qparam(g, n, 7, "y_zero_point", yz, -1, false));
    if (b) {
        PD_TRY(need_dtype(g, n, b, PD_INT32, "B"));
        if (b->ndim != 1 || b->shape[0] != M)
            return pd__node_err(g, n, PD_ERR_SHAPE, "B %s must be [%lld], one per output channel", shp(b).s,
                                (long long)M);
    }
    return PD_OK;
}

double pd__flops_QLinearConv(const pd_graph *g, const pd__node *n) {
    const pd__tensor *w = cin(g, n, 3), *y = cout(g, n, 0);
    if (!w || !y || w->ndim < 3) return 0;
    return 2.0 * dnumel(y) * dprod(w->ndim - 1, w->shape + 1) + 3 * dnumel(y);
}

/* ---- normalizations ------------------------------------------------------------------- */

int pd__bn_training(const pd__node *n) {
    if (n->opset >= 14) return pd__attr_i(n, "training_mode", 0) != 0;
    if (n->opset < 7) return pd__attr_i(n, "is_test", 0) == 0;
    for (int i = 1; i < n->nout; i++)
        if (n->out[i] >= 0) return 1;
    return 0;
}

pd_status pd__shape_BatchNormalization(pd_graph *g, pd__node *n) {
    static const char *names[5] = {"X", "scale", "B", "input_mean", "input_var"};
    pd__tensor *t[5];
    for (int i = 0; i < 5; i++) PD_TRY(need(g, n, i, names[i], &t[i]));
    pd__tensor *x = t[0];
    PD_TRY(need_float(g, n, x, "X"));
    if (x->ndim < 2) return pd__node_err(g, n, PD_ERR_SHAPE, "X %s must be (N, C, ...)", shp(x).s);
    /* spatial=0 (opsets 7-8): statistics per (C, D1, ...) feature rather than per channel */
    bool per_feature = n->opset < 9 && pd__attr_i(n, "spatial", 1) == 0;
    int pnd = per_feature ? x->ndim - 1 : 1;
    for (int i = 1; i < 5; i++) {
        /* opset 15 lets the parameters have their own float types; they are read as double */
        pd_dtype pt = t[i]->dtype;
        if (!is_float(pt) && pt != PD_FLOAT16 && pt != PD_BFLOAT16)
            return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "%s '%s' has dtype %s", names[i], t[i]->name,
                                pd_dtype_name(pt));
        bool ok = t[i]->ndim == pnd && memcmp(t[i]->shape, x->shape + 1, sizeof(int64_t) * (size_t)pnd) == 0;
        if (!ok)
            return pd__node_err(g, n, PD_ERR_SHAPE, "%s %s must be %s for X %s", names[i], shp(t[i]).s,
                                shpv(pnd, x->shape + 1).s, shp(x).s);
    }
    PD_TRY(set_out(g, n, 0, x->dtype, x->ndim, x->shape));
    if (n->opset >= 14) {
        PD_TRY(set_out(g, n, 1, t[3]->dtype, pnd, x->shape + 1));
        PD_TRY(set_out(g, n, 2, t[4]->dtype, pnd, x->shape + 1));
    } else {
        for (int i = 1; i < 5; i++) PD_TRY(set_out(g, n, i, x->dtype, pnd, x->shape + 1));
    }
    return PD_OK;
}

double pd__flops_BatchNormalization(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = cin(g, n, 0);
    if (!x) return 0;
    /* y = x*a + b per element; training adds the two statistics passes */
    return (pd__bn_training(n) ? 6 : 2) * dnumel(x);
}

pd_status pd__shape_LayerNormalization(pd_graph *g, pd__node *n) {
    pd__tensor *x, *scale, *b = pd__in(g, n, 2);
    PD_TRY(need(g, n, 0, "X", &x));
    PD_TRY(need(g, n, 1, "Scale", &scale));
    PD_TRY(need_float(g, n, x, "X"));
    PD_TRY(need_dtype(g, n, scale, x->dtype, "Scale"));
    if (b) PD_TRY(need_dtype(g, n, b, x->dtype, "B"));
    int r = x->ndim, axis;
    if (r < 1) return pd__node_err(g, n, PD_ERR_SHAPE, "X %s must have rank >= 1", shp(x).s);
    int64_t a = pd__attr_i(n, "axis", -1);
    if (!norm_axis(a, r, r - 1, &axis))
        return pd__node_err(g, n, PD_ERR_SHAPE, "axis %lld is out of range for X %s", (long long)a, shp(x).s);
    for (int j = 1; j < 3; j++) {
        pd__tensor *p = j == 1 ? scale : b;
        if (!p) continue;
        bool ok = p->ndim <= r - axis;
        for (int i = 0; ok && i < p->ndim; i++) {
            int64_t d = p->shape[p->ndim - 1 - i];
            ok = d == 1 || d == x->shape[r - 1 - i];
        }
        if (!ok)
            return pd__node_err(g, n, PD_ERR_SHAPE, "%s %s does not broadcast to the normalized shape %s of X %s",
                                j == 1 ? "Scale" : "B", shp(p).s, shpv(r - axis, x->shape + axis).s, shp(x).s);
    }
    int64_t st = pd__attr_i(n, "stash_type", PD_FLOAT);
    if (st != PD_FLOAT && st != PD_DOUBLE)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "stash_type %lld (float and double are supported)",
                            (long long)st);
    int64_t ms[PD_MAX_DIMS];
    for (int i = 0; i < r; i++) ms[i] = i < axis ? x->shape[i] : 1;
    PD_TRY(set_out(g, n, 0, x->dtype, r, x->shape));
    PD_TRY(set_out(g, n, 1, (pd_dtype)st, r, ms));
    return set_out(g, n, 2, (pd_dtype)st, r, ms);
}

double pd__flops_LayerNormalization(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = cin(g, n, 0);
    /* mean, variance, normalize, scale and shift */
    return x ? 8 * dnumel(x) : 0;
}

/* stash_type (LayerNormalization, GroupNormalization 21, RMSNormalization):
 * the precision of the statistics; the kernels keep them in double, at
 * least as precise as any the spec allows. */
static pd_status stash_ok(pd_graph *g, pd__node *n) {
    int64_t st = pd__attr_i(n, "stash_type", PD_FLOAT);
    if (st != PD_FLOAT && st != PD_DOUBLE && st != PD_FLOAT16 && st != PD_BFLOAT16)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "stash_type %lld (float, double, float16 and bfloat16 are supported)",
                            (long long)st);
    return PD_OK;
}

/* A per-channel (or per-group) parameter: a vector of `len` values of X's dtype. */
static pd_status need_vec(pd_graph *g, pd__node *n, int i, const char *what, const pd__tensor *x, int64_t len,
                          const char *of) {
    pd__tensor *t;
    PD_TRY(need(g, n, i, what, &t));
    PD_TRY(need_dtype(g, n, t, x->dtype, what));
    if (t->ndim != 1 || t->shape[0] != len)
        return pd__node_err(g, n, PD_ERR_SHAPE, "%s %s must be [%lld] (%s) for X %s", what, shp(t).s, (long long)len,
                            of, shp(x).s);
    return PD_OK;
}

pd_status pd__shape_InstanceNormalization(pd_graph *g, pd__node *n) {
    pd__tensor *x;
    PD_TRY(need(g, n, 0, "input", &x));
    PD_TRY(need_float(g, n, x, "input"));
    if (x->ndim < 3) return pd__node_err(g, n, PD_ERR_SHAPE, "input %s must be (N, C, D1, ...)", shp(x).s);
    PD_TRY(need_vec(g, n, 1, "scale", x, x->shape[1], "C"));
    PD_TRY(need_vec(g, n, 2, "B", x, x->shape[1], "C"));
    return set_out(g, n, 0, x->dtype, x->ndim, x->shape);
}

double pd__flops_InstanceNormalization(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = cin(g, n, 0);
    return x ? 8 * dnumel(x) : 0;
}

/* Opset 18: scale and bias per group; from 21: per channel (and stash_type). */
pd_status pd__shape_GroupNormalization(pd_graph *g, pd__node *n) {
    pd__tensor *x;
    PD_TRY(need(g, n, 0, "X", &x));
    PD_TRY(need_float(g, n, x, "X"));
    if (x->ndim < 2) return pd__node_err(g, n, PD_ERR_SHAPE, "X %s must be (N, C, ...)", shp(x).s);
    if (!pd__attr_get(n, "num_groups"))
        return pd__node_err(g, n, PD_ERR_INVALID, "attribute num_groups is missing");
    int64_t G = pd__attr_i(n, "num_groups", 0), C = x->shape[1];
    if (G < 1 || C % G != 0)
        return pd__node_err(g, n, PD_ERR_SHAPE, "num_groups %lld does not divide the %lld channels of X %s",
                            (long long)G, (long long)C, shp(x).s);
    bool per_group = n->opset < 21;
    PD_TRY(need_vec(g, n, 1, "scale", x, per_group ? G : C, per_group ? "num_groups" : "C"));
    PD_TRY(need_vec(g, n, 2, "bias", x, per_group ? G : C, per_group ? "num_groups" : "C"));
    if (!per_group) PD_TRY(stash_ok(g, n));
    return set_out(g, n, 0, x->dtype, x->ndim, x->shape);
}

double pd__flops_GroupNormalization(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = cin(g, n, 0);
    return x ? 8 * dnumel(x) : 0;
}

/* Y = X / sqrt(mean(X^2 over axis..r-1) + epsilon) * scale, scale
 * broadcastable to the normalized shape (as LayerNormalization's). */
pd_status pd__shape_RMSNormalization(pd_graph *g, pd__node *n) {
    pd__tensor *x, *scale;
    PD_TRY(need(g, n, 0, "X", &x));
    PD_TRY(need(g, n, 1, "scale", &scale));
    PD_TRY(need_float(g, n, x, "X"));
    PD_TRY(need_dtype(g, n, scale, x->dtype, "scale"));
    int r = x->ndim, axis;
    if (r < 1) return pd__node_err(g, n, PD_ERR_SHAPE, "X %s must have rank >= 1", shp(x).s);
    int64_t a = pd__attr_i(n, "axis", -1);
    if (!norm_axis(a, r, r - 1, &axis))
        return pd__node_err(g, n, PD_ERR_SHAPE, "axis %lld is out of range for X %s", (long long)a, shp(x).s);
    bool ok = scale->ndim <= r - axis;
    for (int i = 0; ok && i < scale->ndim; i++) {
        int64_t d = scale->shape[scale->ndim - 1 - i];
        ok = d == 1 || d == x->shape[r - 1 - i];
    }
    if (!ok)
        return pd__node_err(g, n, PD_ERR_SHAPE, "scale %s does not broadcast to the normalized shape %s of X %s",
                            shp(scale).s, shpv(r - axis, x->shape + axis).s, shp(x).s);
    PD_TRY(stash_ok(g, n));
    return set_out(g, n, 0, x->dtype, r, x->shape);
}

double pd__flops_RMSNormalization(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = cin(g, n, 0);
    /* square and sum, normalize, scale */
    return x ? 4 * dnumel(x) : 0;
}

/* y = x / ||x||_p along axis (p 1 or 2, as the spec). */
pd_status pd__shape_LpNormalization(pd_graph *g, pd__node *n) {
    pd__tensor *x;
    PD_TRY(need(g, n, 0, "input", &x));
    PD_TRY(need_float(g, n, x, "input"));
    int axis = 0;
    int64_t a = pd__attr_i(n, "axis", -1), p = pd__attr_i(n, "p", 2);
    if (x->ndim < 1 || !norm_axis(a, x->ndim, x->ndim - 1, &axis))
        return pd__node_err(g, n, PD_ERR_SHAPE, "axis %lld is out of range for input %s", (long long)a, shp(x).s);
    if (p != 1 && p != 2)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "attribute p is %lld (the spec allows 1 and 2)", (long long)p);
    return set_out(g, n, 0, x->dtype, x->ndim, x->shape);
}

double pd__flops_LpNormalization(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = cin(g, n, 0);
    return x ? 3 * dnumel(x) : 0;
}

int pd__mvn_axes(const pd__node *n, int ndim, bool *reduced) {
    static const int64_t def[3] = {0, 2, 3};
    const int64_t *v;
    int c = pd__attr_ints(n, "axes", &v);
    if (!pd__attr_get(n, "axes")) v = def, c = 3;
    for (int i = 0; i < ndim; i++) reduced[i] = false;
    for (int i = 0; i < c; i++) {
        int a;
        if (!norm_axis(v[i], ndim, ndim - 1, &a) || reduced[a]) return -1 - i;
        reduced[a] = true;
    }
    return c;
}

pd_status pd__shape_MeanVarianceNormalization(pd_graph *g, pd__node *n) {
    pd__tensor *x;
    PD_TRY(need(g, n, 0, "X", &x));
    PD_TRY(need_float(g, n, x, "X"));
    bool red[PD_MAX_DIMS];
    int c = pd__mvn_axes(n, x->ndim, red);
    if (c < 0) {
        const int64_t *v;
        pd__attr_ints(n, "axes", &v);
        return pd__node_err(g, n, PD_ERR_SHAPE, "axes entry %d%s is out of range or repeated for X %s", -1 - c,
                            pd__attr_get(n, "axes") ? "" : " of the default [0,2,3]", shp(x).s);
    }
    return set_out(g, n, 0, x->dtype, x->ndim, x->shape);
}

double pd__flops_MeanVarianceNormalization(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = cin(g, n, 0);
    return x ? 6 * dnumel(x) : 0;
}

pd_status pd__shape_LRN(pd_graph *g, pd__node *n) {
    pd__tensor *x;
    PD_TRY(need(g, n, 0, "X", &x));
    PD_TRY(need_float(g, n, x, "X"));
    if (x->ndim < 2) return pd__node_err(g, n, PD_ERR_SHAPE, "X %s must be (N, C, ...)", shp(x).s);
    int64_t size = pd__attr_i(n, "size", 0);
    if (size < 1) return pd__node_err(g, n, PD_ERR_SHAPE, "attribute size must be >= 1 (is %lld)", (long long)size);
    return set_out(g, n, 0, x->dtype, x->ndim, x->shape);
}

double pd__flops_LRN(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = cin(g, n, 0);
    return x ? dnumel(x) * (2.0 * (double)pd__attr_i(n, "size", 1) + 4) : 0;
}

/* ---- pools ---------------------------------------------------------------------------------- */

static pd_status pool_shape(pd_graph *g, pd__node *n, bool any_dtype) {
    pd__tensor *x;
    PD_TRY(need(g, n, 0, "X", &x));
    if (any_dtype) {
        pd_dtype t = x->dtype;
        if (!is_float(t) && t != PD_UINT8 && t != PD_INT8 && t != PD_FLOAT16)
            return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "X '%s' has dtype %s", x->name, pd_dtype_name(t));
    } else {
        PD_TRY(need_float(g, n, x, "X"));
    }
    if (x->ndim < 3) return pd__node_err(g, n, PD_ERR_SHAPE, "X %s must be (N, C, D1, ...)", shp(x).s);
    pd__win win;
    pd_status st = pd__win_make(n, PD_WIN_POOL, x->ndim, x->shape, NULL, &win);
    if (st != PD_OK) return node_prefix(g, n, st);
    int64_t y[PD_MAX_DIMS] = {x->shape[0], x->shape[1]};
    for (int i = 0; i < win.nsp; i++) y[i + 2] = win.out[i];
    PD_TRY(set_out(g, n, 0, x->dtype, x->ndim, y));
    return set_out(g, n, 1, PD_INT64, x->ndim, y);
}

static double pool_flops(const pd_graph *g, const pd__node *n) {
    const pd__tensor *y = cout(g, n, 0);
    const int64_t *k;
    int nk = pd__attr_ints(n, "kernel_shape", &k);
    return y ? dnumel(y) * dprod(nk, k) : 0;
}

pd_status pd__shape_MaxPool(pd_graph *g, pd__node *n) {
    int64_t so = pd__attr_i(n, "storage_order", 0);
    if (so != 0 && so != 1)
        return pd__node_err(g, n, PD_ERR_SHAPE, "storage_order must be 0 or 1 (is %lld)", (long long)so);
    return pool_shape(g, n, true);
}
double pd__flops_MaxPool(const pd_graph *g, const pd__node *n) { return pool_flops(g, n); }

pd_status pd__shape_AveragePool(pd_graph *g, pd__node *n) {
    if (n->nout > 1 && n->out[1] >= 0)
        return pd__node_err(g, n, PD_ERR_SHAPE, "AveragePool has one output, the model gives it %d", n->nout);
    return pool_shape(g, n, false);
}
double pd__flops_AveragePool(const pd_graph *g, const pd__node *n) { return pool_flops(g, n); }

pd_status pd__maxunpool_shapes(const pd__node *n, pd_tensor *const *in, int64_t *frame, int64_t *out) {
    const pd_tensor *X = in[0], *S = n->nin > 2 ? in[2] : NULL;
    int r = X->ndim, nsp = r - 2;
    if (r < 3) return pd__err(PD_ERR_SHAPE, "X %s must be (N, C, D1, ...)", shpv(r, X->shape).s);
    const int64_t *k, *st, *pads;
    int nk = pd__attr_ints(n, "kernel_shape", &k), ns = pd__attr_ints(n, "strides", &st),
        np = pd__attr_ints(n, "pads", &pads);
    if (nk != nsp) return pd__err(PD_ERR_SHAPE, "kernel_shape has %d values for %d spatial dims", nk, nsp);
    if (ns != 0 && ns != nsp) return pd__err(PD_ERR_SHAPE, "strides has %d values for %d spatial dims", ns, nsp);
    if (np != 0 && np != 2 * nsp) return pd__err(PD_ERR_SHAPE, "pads has %d values for %d spatial dims", np, nsp);
    frame[0] = X->shape[0];
    frame[1] = X->shape[1];
    for (int i = 0; i < nsp; i++) {
        int64_t s = ns ? st[i] : 1, pb = np ? pads[i] : 0, pe = np ? pads[nsp + i] : 0;
        if (k[i] < 1 || s < 1 || pb < 0 || pe < 0)
            return pd__err(PD_ERR_SHAPE, "kernel %lld, stride %lld, pads %lld and %lld at spatial dim %d",
                           (long long)k[i], (long long)s, (long long)pb, (long long)pe, i);
        frame[i + 2] = (X->shape[i + 2] - 1) * s - pb - pe + k[i];
        if (frame[i + 2] < 0) return pd__err(PD_ERR_SHAPE, "spatial dim %d of the output would be negative", i);
    }
    memcpy(out, frame, sizeof(int64_t) * (size_t)r);
    if (S == NULL) return PD_OK;
    if (S->dtype != PD_INT64 || S->ndim != 1 || S->shape[0] != r)
        return pd__err(PD_ERR_SHAPE, "output_shape must be int64 of %d values", r);
    if (S->data == NULL) return pd__err(PD_ERR_UNSUPPORTED, "output_shape must be constant");
    for (int d = 0; d < r; d++) {
        out[d] = ((const int64_t *)S->data)[d];
        if (out[d] < frame[d]) /* the reference places the frame in the output: it must fit */
            return pd__err(PD_ERR_SHAPE, "output_shape %s is smaller than the unpooled %s", shpv(r, out).s,
                           shpv(r, frame).s);
    }
    return PD_OK;
}

pd_status pd__shape_MaxUnpool(pd_graph *g, pd__node *n) {
    pd__tensor *x, *ind;
    PD_TRY(need(g, n, 0, "X", &x));
    PD_TRY(need_float(g, n, x, "X"));
    PD_TRY(need(g, n, 1, "I", &ind));
    if (ind->dtype != PD_INT64 || ind->ndim != x->ndim || memcmp(ind->shape, x->shape, sizeof(int64_t) * (size_t)x->ndim))
        return pd__node_err(g, n, PD_ERR_SHAPE, "I must be int64 of X's shape %s, is %s %s", shp(x).s,
                            pd_dtype_name(ind->dtype), shp(ind).s);
    pd_tensor v[3], *vp[3] = {NULL, NULL, NULL};
    for (int i = 0; i < n->nin && i < 3; i++) {
        pd__tensor *t = pd__in(g, n, i);
        if (t == NULL) continue;
        v[i] = pd__view(t);
        if (!pd__foldable_input(t)) v[i].data = NULL;
        vp[i] = &v[i];
    }
    int64_t frame[PD_MAX_DIMS], y[PD_MAX_DIMS];
    pd_status st = pd__maxunpool_shapes(n, vp, frame, y);
    if (st != PD_OK) return node_prefix(g, n, st);
    return set_out(g, n, 0, x->dtype, x->ndim, y);
}

double pd__flops_MaxUnpool(const pd_graph *g, const pd__node *n) {
    (void)g, (void)n;
    return 0;
}

pd_status pd__shape_GlobalAveragePool(pd_graph *g, pd__node *n) {
    pd__tensor *x;
    PD_TRY(need(g, n, 0, "X", &x));
    PD_TRY(need_float(g, n, x, "X"));
    if (x->ndim < 2) return pd__node_err(g, n, PD_ERR_SHAPE, "X %s must be (N, C, ...)", shp(x).s);
    int64_t y[PD_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) y[i] = i < 2 ? x->shape[i] : 1;
    return set_out(g, n, 0, x->dtype, x->ndim, y);
}

double pd__flops_GlobalAveragePool(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = cin(g, n, 0);
    return x ? dnumel(x) : 0;
}

pd_status pd__shape_GlobalMaxPool(pd_graph *g, pd__node *n) { return pd__shape_GlobalAveragePool(g, n); }

double pd__flops_GlobalMaxPool(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = cin(g, n, 0);
    return x ? dnumel(x) : 0;
}

double pd__lppool_p(const pd__node *n) {
    const pd__attr *a = pd__attr_get(n, "p");
    if (a && a->type == PD_A_FLOAT) return a->f; /* opset 1: a float */
    return (double)pd__attr_i(n, "p", 2);
}

pd_status pd__shape_LpPool(pd_graph *g, pd__node *n) {
    double p = pd__lppool_p(n);
    if (!(p >= 1 && p <= 64))
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "attribute p is %g (1 to 64 are supported)", p);
    if (n->nout > 1 && n->out[1] >= 0)
        return pd__node_err(g, n, PD_ERR_SHAPE, "LpPool has one output, the model gives it %d", n->nout);
    return pool_shape(g, n, false);
}

double pd__flops_LpPool(const pd_graph *g, const pd__node *n) { return 3 * pool_flops(g, n); }

/* ---- Resize, Upsample ------------------------------------------------------------------------ */

void pd__resize_inputs(const pd__node *n, int *scales, int *sizes) {
    bool up = !strcmp(n->op_type, "Upsample");
    if (up) *scales = n->opset >= 9 ? 1 : -1, *sizes = -1;
    else if (n->opset < 11) *scales = 1, *sizes = -1;
    else *scales = 2, *sizes = 3;
}

static bool rsz_given(const pd_tensor *t) { return t && pd_tensor_numel(t) > 0; }

/* Resize's modes from its attributes (Upsample and Resize-10: asymmetric
 * coordinates, nearest rounds down); *keep is keep_aspect_ratio_policy's
 * 1 not_larger, 2 not_smaller, 0 stretch. */
static pd_status rsz_modes(const pd__node *n, pd__rsz *r, int *keep) {
    bool v10 = !strcmp(n->op_type, "Upsample") || n->opset < 11;
    const char *mode = pd__attr_s(n, "mode", "nearest");
    if (!strcmp(mode, "linear") || (v10 && !strcmp(mode, "bilinear"))) r->linear = true;
    else if (!v10 && !strcmp(mode, "cubic")) r->cubic = true;
    else if (strcmp(mode, "nearest") != 0)
        return pd__err(PD_ERR_UNSUPPORTED, "mode '%s' is not supported (nearest, linear and cubic are)", mode);
    r->cubic_a = pd__attr_f(n, "cubic_coeff_a", -0.75f);
    r->exclude_outside = pd__attr_i(n, "exclude_outside", 0) != 0;
    if (v10) { /* Upsample and Resize-10: asymmetric coordinates, nearest rounds down */
        r->ctm = PD_RSZ_ASYMMETRIC;
        r->nearest = PD_RSZ_FLOOR;
    } else {
        static const char *ctms[] = {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                                     "half_pixel_symmetric", "tf_crop_and_resize"};
        static const char *nms[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
        const char *c = pd__attr_s(n, "coordinate_transformation_mode", "half_pixel");
        const char *m = pd__attr_s(n, "nearest_mode", "round_prefer_floor");
        int i;
        for (i = 0; i < 6 && strcmp(c, ctms[i]); i++) {}
        if (i == 6)
            return pd__err(PD_ERR_UNSUPPORTED, "coordinate_transformation_mode '%s' is not supported (half_pixel, "
                           "pytorch_half_pixel, align_corners, asymmetric, half_pixel_symmetric and "
                           "tf_crop_and_resize are)", c);
        r->ctm = (pd__rsz_ctm)i;
        for (i = 0; i < 4 && strcmp(m, nms[i]); i++) {}
        if (i == 4) return pd__err(PD_ERR_UNSUPPORTED, "nearest_mode '%s' is not supported", m);
        r->nearest = (pd__rsz_nearest)i;
        r->extrapolation = pd__attr_f(n, "extrapolation_value", 0);
        r->antialias = pd__attr_i(n, "antialias", 0) != 0;
        if (r->antialias && !r->linear && !r->cubic)
            return pd__err(PD_ERR_UNSUPPORTED, "antialias=1 is defined for the linear and cubic modes, not nearest");
        const char *k = pd__attr_s(n, "keep_aspect_ratio_policy", "stretch");
        *keep = !strcmp(k, "not_larger") ? 1 : !strcmp(k, "not_smaller") ? 2 : 0;
        if (!*keep && strcmp(k, "stretch") != 0)
            return pd__err(PD_ERR_UNSUPPORTED, "keep_aspect_ratio_policy '%s' is not supported (stretch, not_larger "
                           "and not_smaller are)", k);
    }
    return PD_OK;
}

/* The axes scales and sizes apply to (opset 18+), every axis by default. */
static pd_status rsz_axes(const pd__node *n, int ndim, int *axes, int *na) {
    *na = ndim;
    const int64_t *av;
    int ac = pd__attr_ints(n, "axes", &av);
    bool seen[PD_MAX_DIMS] = {false};
    for (int i = 0; i < ndim; i++) axes[i] = i;
    if (ac) {
        if (ac > ndim) return pd__err(PD_ERR_SHAPE, "attribute axes has %d values for rank %d", ac, ndim);
        *na = ac;
        for (int i = 0; i < ac; i++) {
            if (!norm_axis(av[i], ndim, ndim - 1, &axes[i]) || seen[axes[i]])
                return pd__err(PD_ERR_SHAPE, "attribute axes entry %d (%lld) is out of range or repeated", i,
                               (long long)av[i]);
            seen[axes[i]] = true;
        }
    }
    return PD_OK;
}

/* tf_crop_and_resize's roi: starts then ends of the axes scaled, in [0, 1] units. */
static pd_status rsz_roi(const pd_tensor *roi, const int *axes, int na, pd__rsz *r) {
    int ndim = r->ndim;
    if (!rsz_given(roi)) return pd__err(PD_ERR_SHAPE, "tf_crop_and_resize needs the roi input");
    if (pd_tensor_numel(roi) != 2 * na)
        return pd__err(PD_ERR_SHAPE, "roi has %lld values for %d axes (want %d)", (long long)pd_tensor_numel(roi),
                       na, 2 * na);
    r->roi_f32 = roi->dtype == PD_FLOAT;
    for (int i = 0; roi->data && i < na; i++) {
        r->roi[axes[i]] = pd__get_f(roi->dtype, roi->data, i);
        r->roi[ndim + axes[i]] = pd__get_f(roi->dtype, roi->data, na + i);
    }
    return PD_OK;
}

/* The output sizes from scales (an input, or Upsample-7's attribute) or sizes. */
static pd_status rsz_targets(const pd__node *n, const int64_t *x, const pd_tensor *scales, const pd_tensor *sizes,
                             const int *axes, int na, pd__rsz *r) {
    bool up = !strcmp(n->op_type, "Upsample");
    const float *af = NULL;
    int afc = up && n->opset < 9 ? pd__attr_floats(n, "scales", &af) : 0;
    bool hs = rsz_given(scales) || afc > 0, hz = rsz_given(sizes);
    if (hs == hz)
        return pd__err(PD_ERR_SHAPE, hs ? "both scales and sizes are given" : "neither scales nor sizes is given");
    int64_t cnt = hs ? (afc ? afc : pd_tensor_numel(scales)) : pd_tensor_numel(sizes);
    if (cnt != na) return pd__err(PD_ERR_SHAPE, "%s has %lld values for %d axes", hs ? "scales" : "sizes", (long long)cnt, na);
    const pd_tensor *t = hs ? scales : sizes;
    if (!afc && !t->data) return pd__err(PD_ERR_UNSUPPORTED, "%s is not a constant at load", hs ? "scales" : "sizes");
    for (int i = 0; i < na; i++) {
        int d = axes[i];
        if (hs) {
            double sc = afc ? af[i] : pd__get_f(t->dtype, t->data, i);
            if (!(sc > 0) || sc > 1e6) return pd__err(PD_ERR_SHAPE, "scale %g of axis %d is not positive", sc, d);
            r->scale[d] = sc;
            double o = floor((double)x[d] * sc);
            if (o > (double)INT32_MAX) return pd__err(PD_ERR_SHAPE, "output size %g of axis %d is too large", o, d);
            r->out[d] = (int64_t)o;
            r->outf[d] = (double)x[d] * sc;
        } else {
            int64_t o = pd__get_i(t->dtype, t->data, i);
            if (o < 0 || o > INT32_MAX) return pd__err(PD_ERR_SHAPE, "size %lld of axis %d is out of range", (long long)o, d);
            r->out[d] = o;
            r->scale[d] = x[d] ? (double)o / (double)x[d] : 1;
            r->outf[d] = (double)o;
        }
        if (r->out[d] > 0 && x[d] == 0)
            return pd__err(PD_ERR_SHAPE, "axis %d of size 0 cannot be resized to %lld", d, (long long)r->out[d]);
    }
    return PD_OK;
}

/* keep_aspect_ratio_policy with sizes: one scale for the axes, the smallest
 * (not_larger) or largest (not_smaller) of sizes / input; sizes rounded half up. */
static void rsz_keep(int keep, const int64_t *x, const int *axes, int na, pd__rsz *r) {
    double sc = keep == 1 ? INFINITY : 0;
    for (int i = 0; i < na; i++) {
        double s = r->scale[axes[i]];
        sc = keep == 1 ? fmin(sc, s) : fmax(sc, s);
    }
    for (int i = 0; i < na; i++) {
        int d = axes[i];
        r->scale[d] = sc;
        r->out[d] = (int64_t)((double)x[d] * sc + 0.5);
        r->outf[d] = (double)x[d] * sc;
    }
}

/* antialias: the kernel's support, [-1, 1] or [-2, 2], over the scale. */
static pd_status rsz_taps(pd__rsz *r) {
    r->taps = 4;
    for (int d = 0; r->antialias && d < r->ndim; d++) {
        double s = r->scale[d] < 1 ? r->scale[d] : 1, t = -2 * floor((r->cubic ? -2 : -1) / s);
        if (t > 1024)
            return pd__err(PD_ERR_UNSUPPORTED, "antialias at scale %g of axis %d needs %g taps (1024 at most)", s, d,
                           t);
        if (t > r->taps) r->taps = (int)t;
    }
    return PD_OK;
}

pd_status pd__resize_plan(const pd__node *n, int ndim, const int64_t *x, const pd_tensor *roi,
                          const pd_tensor *scales, const pd_tensor *sizes, pd__rsz *r) {
    memset(r, 0, sizeof *r);
    r->ndim = ndim;
    int keep = 0, axes[PD_MAX_DIMS], na;
    PD_TRY(rsz_modes(n, r, &keep));
    PD_TRY(rsz_axes(n, ndim, axes, &na));
    for (int i = 0; i < ndim; i++) {
        r->in[i] = r->out[i] = x[i];
        r->scale[i] = 1;
        r->outf[i] = (double)x[i];
        r->roi[i] = 0, r->roi[ndim + i] = 1;
    }
    if (r->ctm == PD_RSZ_TF_CROP_AND_RESIZE) PD_TRY(rsz_roi(roi, axes, na, r));
    PD_TRY(rsz_targets(n, x, scales, sizes, axes, na, r));
    if (keep && rsz_given(sizes)) rsz_keep(keep, x, axes, na, r);
    return rsz_taps(r);
}

static pd_status resize_shape(pd_graph *g, pd__node *n) {
    pd__tensor *x;
    PD_TRY(need(g, n, 0, "X", &x));
    PD_TRY(need_float(g, n, x, "X"));
    int si, zi;
    pd__resize_inputs(n, &si, &zi);
    pd_tensor sv, zv, *sp = NULL, *zp = NULL;
    for (int j = 0; j < 2; j++) {
        int k = j ? zi : si;
        pd__tensor *t = k >= 0 ? pd__in(g, n, k) : NULL;
        if (!t) continue;
        pd_tensor v = pd__view(t);
        if (!((t->kind == PD_T_INIT || t->kind == PD_T_CONST) && t->data)) v.data = NULL;
        if (t->ndim != 1 || (j ? (t->dtype != PD_INT64) : !is_float(t->dtype) && t->dtype != PD_FLOAT16))
            return pd__node_err(g, n, PD_ERR_SHAPE, "%s %s (%s) must be a 1-D %s tensor", j ? "sizes" : "scales",
                                shp(t).s, pd_dtype_name(t->dtype), j ? "int64" : "float");
        if (j) zv = v, zp = &zv;
        else sv = v, sp = &sv;
    }
    pd__tensor *rt = si == 2 ? pd__in(g, n, 1) : NULL; /* roi: its values only matter to the kernel */
    pd_tensor rv, *rp = NULL;
    if (rt && rt->ndim >= 0) {
        rv = pd__view(rt);
        if (!((rt->kind == PD_T_INIT || rt->kind == PD_T_CONST) && rt->data)) rv.data = NULL;
        rp = &rv;
    }
    pd__rsz r;
    pd_status st = pd__resize_plan(n, x->ndim, x->shape, rp, sp, zp, &r);
    if (st != PD_OK) return node_prefix(g, n, st);
    return set_out(g, n, 0, x->dtype, x->ndim, r.out);
}

static double resize_flops(const pd_graph *g, const pd__node *n) {
    const pd__tensor *y = cout(g, n, 0), *x = cin(g, n, 0);
    if (!y || !x) return 0;
    /* linear: two taps per resized axis */
    return pd__attr_s(n, "mode", "nearest")[0] == 'n' ? 0 : 2 * dnumel(y) * (double)x->ndim;
}

pd_status pd__shape_Resize(pd_graph *g, pd__node *n) { return resize_shape(g, n); }
double pd__flops_Resize(const pd_graph *g, const pd__node *n) { return resize_flops(g, n); }
pd_status pd__shape_Upsample(pd_graph *g, pd__node *n) { return resize_shape(g, n); }
double pd__flops_Upsample(const pd_graph *g, const pd__node *n) { return resize_flops(g, n); }

/* ---- Bernoulli, RandomUniformLike -------------------------------------------------------------- */

/* A draw shaped like input 0, of the dtype attribute (default: the input's). */
static pd_status random_like_shape(pd_graph *g, pd__node *n, bool float_only) {
    pd__tensor *x;
    PD_TRY(need(g, n, 0, "input", &x));
    if (x->ndim < 0) return pd__node_err(g, n, PD_ERR_SHAPE, "input '%s' has no known shape", x->name);
    pd_dtype t = (pd_dtype)pd__attr_i(n, "dtype", (int64_t)x->dtype);
    bool ok = pd_dtype_size(t) > 0 && t != PD_BFLOAT16;
    if (float_only || n->op == PD_OP_BERNOULLI) {
        /* RandomUniformLike's output, Bernoulli's probabilities: floats */
        const pd__tensor *f = n->op == PD_OP_BERNOULLI ? x : NULL;
        if (f && !(is_float(f->dtype) || f->dtype == PD_FLOAT16))
            return pd__node_err(g, n, PD_ERR_UNSUPPORTED,
                                "input '%s' has dtype %s (float, double, float16 are supported)", x->name,
                                pd_dtype_name(x->dtype));
        if (float_only) ok = ok && (is_float(t) || t == PD_FLOAT16);
    }
    if (!ok) return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "output dtype %s is not supported", pd_dtype_name(t));
    return set_out(g, n, 0, t, x->ndim, x->shape);
}

pd_status pd__shape_Bernoulli(pd_graph *g, pd__node *n) { return random_like_shape(g, n, false); }
double pd__flops_Bernoulli(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = cin(g, n, 0);
    return x ? 4 * dnumel(x) : 0;
}
pd_status pd__shape_RandomUniformLike(pd_graph *g, pd__node *n) { return random_like_shape(g, n, true); }
double pd__flops_RandomUniformLike(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = cin(g, n, 0);
    return x ? 4 * dnumel(x) : 0;
}

/* ---- DeformConv -------------------------------------------------------------------------------- */

pd_status pd__deform_plan(const pd__node *n, int xr, const int64_t *x, int wr, const int64_t *w, int orr,
                          const int64_t *off, int br, const int64_t *b, int mr, const int64_t *m, pd__deform *p) {
    memset(p, 0, sizeof *p);
    if (xr != 4 || wr != 4 || orr != 4)
        return pd__err(PD_ERR_UNSUPPORTED, "only 2-D DeformConv is supported (X, W, offset of rank 4)");
    const int64_t *v;
    p->N = x[0], p->C = x[1], p->H = x[2], p->W = x[3], p->OC = w[0], p->KH = w[2], p->KW = w[3];
    p->G = pd__attr_i(n, "group", 1), p->OG = pd__attr_i(n, "offset_group", 1);
    int c = pd__attr_ints(n, "kernel_shape", &v);
    if (c && (c != 2 || v[0] != p->KH || v[1] != p->KW)) return pd__err(PD_ERR_SHAPE, "kernel_shape does not match W");
    c = pd__attr_ints(n, "strides", &v);
    p->sh = c == 2 ? v[0] : 1, p->sw = c == 2 ? v[1] : 1;
    c = pd__attr_ints(n, "dilations", &v);
    p->dh = c == 2 ? v[0] : 1, p->dw = c == 2 ? v[1] : 1;
    c = pd__attr_ints(n, "pads", &v);
    int64_t pb = c == 4 ? v[2] : 0, pr = c == 4 ? v[3] : 0;
    p->pt = c == 4 ? v[0] : 0, p->pl = c == 4 ? v[1] : 0;
    if (p->G < 1 || p->OG < 1 || p->sh < 1 || p->sw < 1 || p->dh < 1 || p->dw < 1 || p->pt < 0 || p->pl < 0 ||
        pb < 0 || pr < 0)
        return pd__err(PD_ERR_SHAPE, "group, offset_group, strides, dilations must be positive, pads not negative");
    if (p->C != w[1] * p->G || p->OC % p->G || p->C % p->OG)
        return pd__err(PD_ERR_SHAPE, "X's %lld channels, W's %lld x group %lld, offset_group %lld do not fit",
                       (long long)p->C, (long long)w[1], (long long)p->G, (long long)p->OG);
    p->OH = (p->H + p->pt + pb - (p->KH - 1) * p->dh - 1) / p->sh + 1;
    p->OW = (p->W + p->pl + pr - (p->KW - 1) * p->dw - 1) / p->sw + 1;
    int64_t K = p->KH * p->KW;
    if (off[0] != p->N || off[1] != p->OG * K * 2 || off[2] != p->OH || off[3] != p->OW)
        return pd__err(PD_ERR_SHAPE, "offset must be (%lld, %lld, %lld, %lld)", (long long)p->N,
                       (long long)(p->OG * K * 2), (long long)p->OH, (long long)p->OW);
    if (b && (br != 1 || b[0] != p->OC)) return pd__err(PD_ERR_SHAPE, "B must be (%lld)", (long long)p->OC);
    if (m && (mr != 4 || m[0] != p->N || m[1] != p->OG * K || m[2] != p->OH || m[3] != p->OW))
        return pd__err(PD_ERR_SHAPE, "mask must be (%lld, %lld, %lld, %lld)", (long long)p->N, (long long)(p->OG * K),
                       (long long)p->OH, (long long)p->OW);
    return PD_OK;
}

pd_status pd__shape_DeformConv(pd_graph *g, pd__node *n) {
    pd__tensor *x, *w, *o, *b = pd__in(g, n, 3), *m = pd__in(g, n, 4);
    PD_TRY(need(g, n, 0, "X", &x));
    PD_TRY(need(g, n, 1, "W", &w));
    PD_TRY(need(g, n, 2, "offset", &o));
    PD_TRY(need_float(g, n, x, "X"));
    const pd__tensor *all[5] = {x, w, o, b, m};
    for (int i = 1; i < 5; i++)
        if (all[i] && all[i]->dtype != x->dtype)
            return pd__node_err(g, n, PD_ERR_SHAPE, "'%s' is %s, X is %s", all[i]->name, pd_dtype_name(all[i]->dtype),
                                pd_dtype_name(x->dtype));
    pd__deform p;
    pd_status st = pd__deform_plan(n, x->ndim, x->shape, w->ndim, w->shape, o->ndim, o->shape, b ? b->ndim : 0,
                                   b ? b->shape : NULL, m ? m->ndim : 0, m ? m->shape : NULL, &p);
    if (st != PD_OK) return node_prefix(g, n, st);
    int64_t ys[4] = {p.N, p.OC, p.OH, p.OW};
    return set_out(g, n, 0, x->dtype, 4, ys);
}

double pd__flops_DeformConv(const pd_graph *g, const pd__node *n) {
    const pd__tensor *y = cout(g, n, 0), *w = cin(g, n, 1);
    if (!y || !w || w->ndim != 4) return 0;
    return dnumel(y) * (2.0 * (double)(w->shape[1] * w->shape[2] * w->shape[3]) + 10); /* the products, the sampling */
}

/* ---- Det --------------------------------------------------------------------------------------- */

/* Det: X (*, M, M) to the determinants (*). */
pd_status pd__shape_Det(pd_graph *g, pd__node *n) {
    pd__tensor *x;
    PD_TRY(need(g, n, 0, "X", &x));
    PD_TRY(need_float(g, n, x, "X"));
    if (x->ndim < 2 || x->shape[x->ndim - 1] != x->shape[x->ndim - 2])
        return pd__node_err(g, n, PD_ERR_SHAPE, "X %s is not a batch of square matrices", shp(x).s);
    return set_out(g, n, 0, x->dtype, x->ndim - 2, x->shape);
}

double pd__flops_Det(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = cin(g, n, 0);
    if (!x || x->ndim < 2) return 0;
    double m = (double)x->shape[x->ndim - 1];
    return dnumel(x) / (m > 0 ? m * m : 1) * (2.0 / 3.0) * m * m * m; /* an LU per matrix */
}

/* ---- Einsum ------------------------------------------------------------------------------------ */

/* An equation being planned: each operand's letters (t[0] A, t[1] B, t[2]
 * the output), an ellipsis' position in each (-1: none), and once known
 * each letter's axis in A, B and the output (-1: absent). */
typedef struct pd__ein_eq {
    const char *eq;
    char t[3][PD_MAX_DIMS + 1];
    int len[3], ell[3], nin;
    bool arrow, comma;
    int ax[3][128];
} pd__ein_eq;

static pd_status ein_parse(pd__ein_eq *q) {
    int part = 0;
    for (const char *p = q->eq; *p; p++) {
        char ch = *p;
        if (ch == ' ') continue;
        if (ch == ',' && part == 0 && !q->arrow) part = 1, q->comma = true;
        else if (ch == '-' && p[1] == '>' && !q->arrow) q->arrow = true, part = 2, p++;
        else if (((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z')) && q->len[part] < PD_MAX_DIMS)
            q->t[part][q->len[part]++] = ch;
        else if (ch == '.' && p[1] == '.' && p[2] == '.' && q->ell[part] < 0)
            q->ell[part] = q->len[part], p += 2;
        else
            return pd__err(PD_ERR_UNSUPPORTED,
                           "equation '%s' is not supported (one or two operands, letters and '...': a batched "
                           "matrix product such as 'bij,bjk->bik', a transpose, a sum or a diagonal)", q->eq);
    }
    if (q->nin > 2 || q->nin < 1)
        return pd__err(PD_ERR_UNSUPPORTED, "equation '%s' with %d operands is not supported (one or two are)", q->eq,
                       q->nin);
    if (q->nin != (q->comma ? 2 : 1))
        return pd__err(PD_ERR_SHAPE, "equation '%s' does not name %d operands", q->eq, q->nin);
    return PD_OK;
}

/* An ellipsis becomes letters \1, \2 ... for its axes, right-aligned across
 * the operands; without '->' the output is the ellipsis' axes, then the
 * letters named once, in alphabetical order. */
static pd_status ein_expand(pd__ein_eq *q, int ra, int rb) {
    int rk[2] = {ra, rb}, ne = 0, nek[2] = {0, 0};
    for (int k = 0; k < q->nin; k++) {
        nek[k] = q->ell[k] >= 0 ? rk[k] - q->len[k] : 0;
        if (nek[k] < 0 || (q->ell[k] < 0 && q->len[k] != rk[k]))
            return pd__err(PD_ERR_SHAPE, "equation '%s' names %d and %d axes; the operands have ranks %d and %d",
                           q->eq, q->len[0], q->len[1], ra, rb);
        if (nek[k] > ne) ne = nek[k];
    }
    if (q->ell[2] >= 0 && !q->arrow) q->ell[2] = -1;
    for (int k = 0; k < 3; k++) {
        int m = k < 2 ? nek[k] : q->ell[2] >= 0 ? ne : 0, at = q->ell[k];
        if (at < 0 || m == 0) continue;
        if (q->len[k] + m > PD_MAX_DIMS) return pd__err(PD_ERR_SHAPE, "equation '%s' has too many axes", q->eq);
        memmove(q->t[k] + at + m, q->t[k] + at, (size_t)(q->len[k] - at));
        for (int j = 0; j < m; j++) q->t[k][at + j] = (char)(1 + ne - m + j);
        q->len[k] += m;
    }
    if (q->arrow) return PD_OK;
    int cnt[128] = {0};
    for (int k = 0; k < q->nin; k++)
        for (int i = 0; i < q->len[k]; i++) cnt[(int)q->t[k][i]]++;
    for (int j = 0; j < ne; j++) q->t[2][q->len[2]++] = (char)(1 + j);
    for (int ch = 'A'; ch <= 'z'; ch++)
        if (cnt[ch] == 1 && q->len[2] < PD_MAX_DIMS) q->t[2][q->len[2]++] = (char)ch;
    return PD_OK;
}

/* A letter repeated in an operand: the operand becomes its diagonal. */
static pd_status ein_diagonals(pd__ein_eq *q, const int64_t *const sk[2], pd__ein *e) {
    int64_t dsz[2][PD_MAX_DIMS];
    for (int k = 0; k < q->nin; k++) {
        char u[PD_MAX_DIMS + 1] = {0};
        int nu = 0;
        for (int i = 0; i < q->len[k]; i++) {
            int j = 0;
            while (j < nu && u[j] != q->t[k][i]) j++;
            if (j == nu) {
                u[nu] = q->t[k][i];
                dsz[k][nu++] = sk[k][i];
            } else if (dsz[k][j] != sk[k][i]) {
                return pd__err(PD_ERR_SHAPE, "equation '%s': the diagonal over '%c' has sides %lld and %lld", q->eq,
                               q->t[k][i], (long long)dsz[k][j], (long long)sk[k][i]);
            }
            e->dmap[k][i] = j;
        }
        if (nu == q->len[k]) continue;
        e->diag[k] = true;
        e->dr[k] = nu;
        memcpy(e->dshape[k], dsz[k], sizeof(int64_t) * (size_t)nu);
        memcpy(q->t[k], u, (size_t)nu + 1);
        q->len[k] = nu;
    }
    return PD_OK;
}

/* Each letter's axes; one operand gets a B of ones over the letters summed
 * ('ij->i' is 'ij,j->i'). */
static pd_status ein_axes(pd__ein_eq *q, const int64_t *sa, pd__ein *e) {
    memset(q->ax, -1, sizeof q->ax);
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < q->len[k]; i++) q->ax[k][(int)q->t[k][i]] = i;
    for (int i = 0; i < q->len[2]; i++) {
        int ch = q->t[2][i];
        if (q->ax[2][ch] >= 0 || (q->ax[0][ch] < 0 && q->ax[1][ch] < 0))
            return pd__err(PD_ERR_SHAPE, "equation '%s': output letter '%c' is repeated or in no operand", q->eq, ch);
        q->ax[2][ch] = i;
    }
    if (q->nin == 2) return PD_OK;
    for (int i = 0; i < q->len[0]; i++) {
        int ch = q->t[0][i];
        if (q->ax[2][ch] >= 0) continue;
        q->ax[1][ch] = q->len[1];
        e->bshape[q->len[1]] = sa[i];
        q->t[1][q->len[1]++] = (char)ch;
    }
    return PD_OK;
}

/* Every letter is in both operands or in the output, with one size. */
static pd_status ein_check(const pd__ein_eq *q, const int64_t *sa, const int64_t *sb) {
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < q->len[k]; i++) {
            int ch = q->t[k][i];
            const int *a0 = q->ax[0], *a1 = q->ax[1];
            char what[16]; /* a letter, or one of the ellipsis' axes (\1, \2 ...) */
            if (ch < 'A') snprintf(what, sizeof what, "'...' axis %d", ch - 1);
            else snprintf(what, sizeof what, "'%c'", ch);
            if (q->ax[1 - k][ch] < 0 && q->ax[2][ch] < 0)
                return pd__err(PD_ERR_UNSUPPORTED, "equation '%s' sums %s over one operand only; not supported", q->eq,
                               what);
            if (a0[ch] >= 0 && a1[ch] >= 0 && sa[a0[ch]] != sb[a1[ch]]) {
                bool bcast = ch < 'A' && (sa[a0[ch]] == 1 || sb[a1[ch]] == 1); /* valid ONNX, not done here */
                return pd__err(bcast ? PD_ERR_UNSUPPORTED : PD_ERR_SHAPE,
                               "equation '%s': %s is %lld in A and %lld in B (no broadcasting)", q->eq, what,
                               (long long)sa[a0[ch]], (long long)sb[a1[ch]]);
            }
        }
    return PD_OK;
}

/* The letters' roles: batch (A, B, output), M (A, output), K (A, B) and N
 * (B, output); batch, M and N in output order, K in A's order. */
static void ein_roles(const pd__ein_eq *q, const int64_t *sa, const int64_t *sb, pd__ein *e) {
    e->B = e->M = e->N = e->K = 1;
    int na = 0, nb = 0, nc = 0;
    for (int role = 0; role < 4; role++) {
        if (role == 2) { /* K letters: after M in A, after batch in B */
            for (int i = 0; i < q->len[0]; i++) {
                int ch = q->t[0][i];
                if (q->ax[1][ch] < 0 || q->ax[2][ch] >= 0) continue;
                e->pa[na++] = i;
                e->pb[nb++] = q->ax[1][ch];
                e->K *= sa[i];
            }
            continue;
        }
        for (int i = 0; i < q->len[2]; i++) {
            int ch = q->t[2][i], ia = q->ax[0][ch], ib = q->ax[1][ch];
            int r = ia >= 0 && ib >= 0 ? 0 : ia >= 0 ? 1 : 3;
            if (r != role) continue;
            int64_t sz = ia >= 0 ? sa[ia] : sb[ib];
            if (ia >= 0) e->pa[na++] = ia;
            if (ib >= 0) e->pb[nb++] = ib;
            *(r == 0 ? &e->B : r == 1 ? &e->M : &e->N) *= sz;
            e->po[nc] = i;
            e->cshape[nc++] = sz;
        }
    }
    e->nbt = nc;
    for (int j = 0; j < nc; j++) e->out[e->po[j]] = e->cshape[j];
}

pd_status pd__einsum_plan(const pd__node *n, int nin, int ra, const int64_t *sa, int rb, const int64_t *sb,
                          pd__ein *e) {
    memset(e, 0, sizeof *e);
    pd__ein_eq q;
    memset(&q, 0, sizeof q);
    q.eq = pd__attr_s(n, "equation", "");
    q.ell[0] = q.ell[1] = q.ell[2] = -1;
    q.nin = nin;
    PD_TRY(ein_parse(&q));
    PD_TRY(ein_expand(&q, ra, rb));
    const int64_t *sk[2] = {sa, sb};
    PD_TRY(ein_diagonals(&q, sk, e));
    if (e->diag[0]) ra = e->dr[0], sa = e->dshape[0];
    if (e->diag[1]) rb = e->dr[1], sb = e->dshape[1];
    PD_TRY(ein_axes(&q, sa, e));
    if (nin == 1) rb = q.len[1], sb = e->bshape;
    PD_TRY(ein_check(&q, sa, sb));
    e->ra = ra, e->rb = rb, e->ro = q.len[2];
    ein_roles(&q, sa, sb, e);
    return PD_OK;
}

pd_status pd__shape_Einsum(pd_graph *g, pd__node *n) {
    pd__tensor *a, *b;
    if (n->nin != 2 && n->nin != 1)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "equation '%s' with %d operands is not supported (one or two are)",
                            pd__attr_s(n, "equation", ""), n->nin);
    PD_TRY(need(g, n, 0, "A", &a));
    PD_TRY(need_float(g, n, a, "Inputs[0]"));
    b = a;
    if (n->nin == 2) {
        PD_TRY(need(g, n, 1, "B", &b));
        PD_TRY(need_dtype(g, n, b, a->dtype, "Inputs[1]"));
    }
    pd__ein e;
    pd_status st = pd__einsum_plan(n, n->nin, a->ndim, a->shape, b->ndim, b->shape, &e);
    if (st != PD_OK) return node_prefix(g, n, st);
    return set_out(g, n, 0, a->dtype, e.ro, e.out);
}

double pd__flops_Einsum(const pd_graph *g, const pd__node *n) {
    const pd__tensor *a = cin(g, n, 0), *b = n->nin == 1 ? a : cin(g, n, 1);
    pd__ein e;
    if (!a || !b || pd__einsum_plan(n, n->nin, a->ndim, a->shape, b->ndim, b->shape, &e) != PD_OK) return 0;
    return 2.0 * (double)e.B * (double)e.M * (double)e.N * (double)e.K;
}

/* ---- softmax family --------------------------------------------------------------------- */

pd_status pd__softmax_split(const pd__node *n, int ndim, const int64_t *shape, int64_t *outer, int64_t *len,
                            int64_t *inner) {
    int axis = 0;
    if (n->opset >= 13) {
        int64_t a = pd__attr_i(n, "axis", -1);
        if (ndim < 1 || !norm_axis(a, ndim, ndim - 1, &axis))
            return pd__err(PD_ERR_SHAPE, "axis %lld is out of range for input %s", (long long)a,
                           shpv(ndim, shape).s);
        *outer = prod(axis, shape);
        *len = shape[axis];
        *inner = prod(ndim - axis - 1, shape + axis + 1);
    } else {
        /* before opset 13 the input is coerced to 2-D at axis */
        int64_t a = pd__attr_i(n, "axis", 1);
        if (!norm_axis(a, ndim, ndim, &axis))
            return pd__err(PD_ERR_SHAPE, "axis %lld is out of range for input %s", (long long)a,
                           shpv(ndim, shape).s);
        *outer = prod(axis, shape);
        *len = prod(ndim - axis, shape + axis);
        *inner = 1;
    }
    return PD_OK;
}

static pd_status softmax_shape(pd_graph *g, pd__node *n) {
    pd__tensor *x;
    PD_TRY(need(g, n, 0, "input", &x));
    PD_TRY(need_float_half(g, n, x, "input"));
    int64_t o, l, i;
    pd_status st = pd__softmax_split(n, x->ndim, x->shape, &o, &l, &i);
    if (st != PD_OK) return node_prefix(g, n, st);
    return set_out(g, n, 0, x->dtype, x->ndim, x->shape);
}

static double softmax_flops(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = cin(g, n, 0);
    /* subtract the max, exponentiate, sum, scale */
    return x ? 4 * dnumel(x) : 0;
}

pd_status pd__shape_Softmax(pd_graph *g, pd__node *n) { return softmax_shape(g, n); }
double pd__flops_Softmax(const pd_graph *g, const pd__node *n) { return softmax_flops(g, n); }
pd_status pd__shape_LogSoftmax(pd_graph *g, pd__node *n) { return softmax_shape(g, n); }
double pd__flops_LogSoftmax(const pd_graph *g, const pd__node *n) { return softmax_flops(g, n); }

/* ---- Dropout ------------------------------------------------------------------------------ */

pd_status pd__shape_Dropout(pd_graph *g, pd__node *n) {
    pd__tensor *x, *r = pd__in(g, n, 1), *t = pd__in(g, n, 2);
    PD_TRY(need(g, n, 0, "data", &x));
    if (!is_float(x->dtype) && x->dtype != PD_FLOAT16 && x->dtype != PD_BFLOAT16)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "data '%s' has dtype %s", x->name, pd_dtype_name(x->dtype));
    if (n->opset >= 12) {
        if (r && (r->numel != 1 || !(is_float(r->dtype) || r->dtype == PD_FLOAT16 || r->dtype == PD_BFLOAT16)))
            return pd__node_err(g, n, PD_ERR_SHAPE, "ratio %s (%s) must be a float scalar", shp(r).s,
                                pd_dtype_name(r->dtype));
        if (t && (t->numel != 1 || t->dtype != PD_BOOL))
            return pd__node_err(g, n, PD_ERR_SHAPE, "training_mode %s (%s) must be a bool scalar", shp(t).s,
                                pd_dtype_name(t->dtype));
    }
    float ratio = pd__attr_f(n, "ratio", 0.5f);
    if (n->opset < 12 && (ratio < 0 || ratio >= 1))
        return pd__node_err(g, n, PD_ERR_SHAPE, "ratio %g is not in [0, 1)", (double)ratio);
    PD_TRY(set_out(g, n, 0, x->dtype, x->ndim, x->shape));
    /* the mask is bool from opset 10, the data's type before */
    return set_out(g, n, 1, n->opset >= 10 ? PD_BOOL : x->dtype, x->ndim, x->shape);
}

double pd__flops_Dropout(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = cin(g, n, 0);
    /* identity unless a training_mode input is wired */
    return x && cin(g, n, 2) ? 2 * dnumel(x) : 0;
}

/* ---- losses -------------------------------------------------------------------------------------- */

int pd__loss_reduction(const pd__node *n) {
    const char *r = pd__attr_s(n, "reduction", "mean");
    if (!strcmp(r, "none")) return 0;
    if (!strcmp(r, "sum")) return 1;
    if (!strcmp(r, "mean")) return 2;
    return -1;
}

/* Scores/log-probs (N, C, d1, ...), labels (N, d1, ...), optional weights (C). */
static pd_status loss_shape(pd_graph *g, pd__node *n, bool sce) {
    pd__tensor *x, *y, *w = pd__in(g, n, 2);
    PD_TRY(need(g, n, 0, sce ? "scores" : "input", &x));
    PD_TRY(need(g, n, 1, sce ? "labels" : "target", &y));
    PD_TRY(need_float(g, n, x, sce ? "scores" : "input"));
    if (y->dtype != PD_INT64 && y->dtype != PD_INT32)
        return pd__node_err(g, n, PD_ERR_SHAPE, "labels '%s' have dtype %s, expected int32 or int64", y->name,
                            pd_dtype_name(y->dtype));
    if (x->ndim < 2) return pd__node_err(g, n, PD_ERR_SHAPE, "input %s must be (N, C, d1, ...)", shp(x).s);
    bool ok = y->ndim == x->ndim - 1 && y->shape[0] == x->shape[0] &&
              memcmp(y->shape + 1, x->shape + 2, sizeof(int64_t) * (size_t)(x->ndim - 2)) == 0;
    if (!ok)
        return pd__node_err(g, n, PD_ERR_SHAPE, "labels %s must be the input %s without its class dim", shp(y).s,
                            shp(x).s);
    if (w) {
        PD_TRY(need_dtype(g, n, w, x->dtype, "weights"));
        if (w->ndim != 1 || w->shape[0] != x->shape[1])
            return pd__node_err(g, n, PD_ERR_SHAPE, "weights %s must be [C] = [%lld]", shp(w).s,
                                (long long)x->shape[1]);
    }
    int red = pd__loss_reduction(n);
    if (red < 0)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "reduction '%s' is not none, sum or mean",
                            pd__attr_s(n, "reduction", ""));
    if (red == 0) PD_TRY(set_out(g, n, 0, x->dtype, y->ndim, y->shape));
    else PD_TRY(set_out(g, n, 0, x->dtype, 0, NULL));
    if (sce) return set_out(g, n, 1, x->dtype, x->ndim, x->shape);
    if (n->nout > 1 && n->out[1] >= 0)
        return pd__node_err(g, n, PD_ERR_SHAPE, "NegativeLogLikelihoodLoss has one output, the model gives it %d",
                            n->nout);
    return PD_OK;
}

pd_status pd__shape_SoftmaxCrossEntropyLoss(pd_graph *g, pd__node *n) { return loss_shape(g, n, true); }

double pd__flops_SoftmaxCrossEntropyLoss(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = cin(g, n, 0);
    return x && x->ndim >= 2 && x->shape[1] ? 4 * dnumel(x) + 2 * (double)(x->numel / x->shape[1]) : 0;
}

pd_status pd__shape_NegativeLogLikelihoodLoss(pd_graph *g, pd__node *n) { return loss_shape(g, n, false); }

double pd__flops_NegativeLogLikelihoodLoss(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = cin(g, n, 0);
    return x && x->ndim >= 2 && x->shape[1] ? 2 * (double)(x->numel / x->shape[1]) : 0;
}

/* ---- RotaryEmbedding ----------------------------------------------------------------------- */

pd_status pd__rope_plan(const pd__node *n, int xn, const int64_t *xs, int cn, const int64_t *cs, int pn,
                        const int64_t *ps, pd__rope *r) {
    memset(r, 0, sizeof *r);
    if (xn != 3 && xn != 4) return pd__err(PD_ERR_SHAPE, "X %s must be 3-D or 4-D", shpv(xn, xs).s);
    r->four = xn == 4;
    r->B = xs[0];
    int64_t nh = pd__attr_i(n, "num_heads", 0);
    if (r->four) {
        r->H = xs[1];
        r->S = xs[2];
        r->D = xs[3];
    } else {
        if (nh <= 0 || xs[2] % nh != 0)
            return pd__err(PD_ERR_SHAPE, "num_heads %lld must divide the hidden size of a 3-D X %s", (long long)nh,
                           shpv(xn, xs).s);
        r->S = xs[1];
        r->H = nh;
        r->D = xs[2] / nh;
    }
    r->rd = pd__attr_i(n, "rotary_embedding_dim", 0);
    if (r->rd == 0) r->rd = r->D;
    if (r->rd < 0 || r->rd > r->D || r->rd % 2 != 0)
        return pd__err(PD_ERR_SHAPE, "rotary_embedding_dim %lld must be even and at most the head size %lld",
                       (long long)r->rd, (long long)r->D);
    r->interleaved = pd__attr_i(n, "interleaved", 0) != 0;
    r->pos = pn > 0;
    if (r->pos) {
        if (pn != 2 || ps[0] != r->B || ps[1] != r->S)
            return pd__err(PD_ERR_SHAPE, "position_ids %s must be [%lld,%lld]", shpv(pn, ps).s, (long long)r->B,
                           (long long)r->S);
        if (cn != 2) return pd__err(PD_ERR_SHAPE, "with position_ids the caches %s must be 2-D", shpv(cn, cs).s);
        r->P = cs[0];
        r->C = cs[1];
    } else {
        if (cn != 3 || cs[0] != r->B || cs[1] != r->S)
            return pd__err(PD_ERR_SHAPE, "without position_ids the caches %s must be [%lld,%lld,.]", shpv(cn, cs).s,
                           (long long)r->B, (long long)r->S);
        r->C = cs[2];
    }
    if (r->C < r->rd / 2)
        return pd__err(PD_ERR_SHAPE, "the caches %s are narrower than rotary_embedding_dim/2 = %lld", shpv(cn, cs).s,
                       (long long)(r->rd / 2));
    return PD_OK;
}

pd_status pd__shape_RotaryEmbedding(pd_graph *g, pd__node *n) {
    pd__tensor *x, *c, *s, *p = pd__in(g, n, 3);
    PD_TRY(need(g, n, 0, "X", &x));
    PD_TRY(need(g, n, 1, "cos_cache", &c));
    PD_TRY(need(g, n, 2, "sin_cache", &s));
    PD_TRY(need_float(g, n, x, "X"));
    PD_TRY(need_dtype(g, n, c, x->dtype, "cos_cache"));
    PD_TRY(need_dtype(g, n, s, x->dtype, "sin_cache"));
    if (s->ndim != c->ndim || memcmp(s->shape, c->shape, sizeof(int64_t) * (size_t)c->ndim) != 0)
        return pd__node_err(g, n, PD_ERR_SHAPE, "sin_cache %s and cos_cache %s differ", shp(s).s, shp(c).s);
    if (p) PD_TRY(need_dtype(g, n, p, PD_INT64, "position_ids"));
    pd__rope r;
    pd_status st = pd__rope_plan(n, x->ndim, x->shape, c->ndim, c->shape, p ? p->ndim : 0, p ? p->shape : NULL, &r);
    if (st != PD_OK) return node_prefix(g, n, st);
    return set_out(g, n, 0, x->dtype, x->ndim, x->shape);
}

double pd__flops_RotaryEmbedding(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = cin(g, n, 0);
    return x ? 3 * dnumel(x) : 0;
}

/* ---- Attention ----------------------------------------------------------------------------- */

pd_status pd__attn_plan(const pd__node *n, int qn, const int64_t *qs, int kn, const int64_t *ks, int vn,
                        const int64_t *vs, int mn, const int64_t *ms, int pn, const int64_t *ps, pd__attn *a) {
    memset(a, 0, sizeof *a);
    if ((qn != 3 && qn != 4) || kn != qn || vn != qn)
        return pd__err(PD_ERR_SHAPE, "Q %s, K %s and V %s must all be 3-D or all 4-D", shpv(qn, qs).s,
                       shpv(kn, ks).s, shpv(vn, vs).s);
    a->three = qn == 3;
    a->B = qs[0];
    if (a->three) {
        int64_t hq = pd__attr_i(n, "q_num_heads", 0), hk = pd__attr_i(n, "kv_num_heads", 0);
        if (hq <= 0 || hk <= 0 || qs[2] % hq != 0 || ks[2] % hk != 0 || vs[2] % hk != 0)
            return pd__err(PD_ERR_SHAPE,
                           "3-D Q %s, K %s, V %s need q_num_heads (%lld) and kv_num_heads (%lld) dividing their "
                           "hidden sizes",
                           shpv(qn, qs).s, shpv(kn, ks).s, shpv(vn, vs).s, (long long)hq, (long long)hk);
        a->Hq = hq;
        a->Hk = hk;
        a->Sq = qs[1];
        a->Skv = ks[1];
        a->Dh = qs[2] / hq;
        if (ks[2] / hk != a->Dh || vs[1] != a->Skv)
            return pd__err(PD_ERR_SHAPE, "K %s and V %s do not match Q %s", shpv(kn, ks).s, shpv(vn, vs).s,
                           shpv(qn, qs).s);
        a->Dv = vs[2] / hk;
    } else {
        a->Hq = qs[1];
        a->Sq = qs[2];
        a->Dh = qs[3];
        a->Hk = ks[1];
        a->Skv = ks[2];
        a->Dv = vs[3];
        if (ks[3] != a->Dh || vs[1] != a->Hk || vs[2] != a->Skv)
            return pd__err(PD_ERR_SHAPE, "K %s and V %s do not match Q %s", shpv(kn, ks).s, shpv(vn, vs).s,
                           shpv(qn, qs).s);
    }
    if (ks[0] != a->B || vs[0] != a->B)
        return pd__err(PD_ERR_SHAPE, "K %s and V %s have another batch than Q %s", shpv(kn, ks).s, shpv(vn, vs).s,
                       shpv(qn, qs).s);
    if (a->Hk <= 0 || a->Hq % a->Hk != 0)
        return pd__err(PD_ERR_SHAPE, "the %lld kv heads do not divide the %lld query heads", (long long)a->Hk,
                       (long long)a->Hq);
    if (pn) {
        if (pn != 4 || ps[0] != a->B || ps[1] != a->Hk || ps[3] != a->Dh)
            return pd__err(PD_ERR_SHAPE, "past_key %s must be [%lld,%lld,.,%lld]", shpv(pn, ps).s, (long long)a->B,
                           (long long)a->Hk, (long long)a->Dh);
        a->P = ps[2];
        a->past = true;
    }
    a->Tk = a->P + a->Skv;
    a->causal = pd__attr_i(n, "is_causal", 0) != 0;
    a->scale = pd__attr_get(n, "scale") ? pd__attr_f(n, "scale", 1) : 1 / sqrt((double)a->Dh);
    a->softcap = pd__attr_f(n, "softcap", 0);
    /* as ONNX's reference computes it: 0 and 1 the (softcapped) scores, 2
     * with the mask added, 3 the softmax */
    int64_t mode = pd__attr_i(n, "qk_matmul_output_mode", 0);
    if (mode < 0 || mode > 3)
        return pd__err(PD_ERR_UNSUPPORTED, "attribute qk_matmul_output_mode %lld (0 to 3 are defined)",
                       (long long)mode);
    a->mode = (int)mode;
    if (a->softcap < 0) return pd__err(PD_ERR_SHAPE, "softcap %g is negative", a->softcap);
    if (mn) {
        const int64_t want[3] = {a->B, a->Hq, a->Sq};
        if (mn < 2 || mn > 4 || ms[mn - 1] > a->Tk)
            return pd__err(PD_ERR_SHAPE, "attn_mask %s must have rank 2 to 4 and at most %lld keys", shpv(mn, ms).s,
                           (long long)a->Tk);
        a->mn = mn;
        for (int i = 0; i < 4; i++) a->mshape[i] = 1;
        for (int i = 0; i < mn; i++) a->mshape[4 - mn + i] = ms[i];
        for (int i = 0; i < 3; i++)
            if (a->mshape[i] != 1 && a->mshape[i] != want[i])
                return pd__err(PD_ERR_SHAPE, "attn_mask %s does not broadcast to [%lld,%lld,%lld,%lld]",
                               shpv(mn, ms).s, (long long)a->B, (long long)a->Hq, (long long)a->Sq, (long long)a->Tk);
    }
    return PD_OK;
}

pd_status pd__shape_Attention(pd_graph *g, pd__node *n) {
    pd__tensor *q, *k, *v, *m = pd__in(g, n, 3), *pk = pd__in(g, n, 4), *pv = pd__in(g, n, 5);
    PD_TRY(need(g, n, 0, "Q", &q));
    PD_TRY(need(g, n, 1, "K", &k));
    PD_TRY(need(g, n, 2, "V", &v));
    PD_TRY(need_float_half(g, n, q, "Q"));
    PD_TRY(need_dtype(g, n, k, q->dtype, "K"));
    PD_TRY(need_dtype(g, n, v, q->dtype, "V"));
    pd__tensor *kl = pd__in(g, n, 6);
    if (kl && (kl->dtype != PD_INT64 || kl->ndim != 1 || kl->shape[0] != q->shape[0]))
        return pd__node_err(g, n, PD_ERR_SHAPE, "nonpad_kv_seqlen %s (%s) must be int64 [batch] for Q %s", shp(kl).s,
                            pd_dtype_name(kl->dtype), shp(q).s);
    if (m && m->dtype != PD_BOOL) PD_TRY(need_dtype(g, n, m, q->dtype, "attn_mask"));
    if (!pk != !pv) return pd__node_err(g, n, PD_ERR_SHAPE, "past_key and past_value must be given together");
    if (pk) {
        PD_TRY(need_dtype(g, n, pk, q->dtype, "past_key"));
        PD_TRY(need_dtype(g, n, pv, q->dtype, "past_value"));
    }
    pd__attn a;
    pd_status st = pd__attn_plan(n, q->ndim, q->shape, k->ndim, k->shape, v->ndim, v->shape, m ? m->ndim : 0,
                                 m ? m->shape : NULL, pk ? pk->ndim : 0, pk ? pk->shape : NULL, &a);
    if (st != PD_OK) return node_prefix(g, n, st);
    if (pv && (pv->ndim != 4 || pv->shape[0] != a.B || pv->shape[1] != a.Hk || pv->shape[2] != a.P ||
               pv->shape[3] != a.Dv))
        return pd__node_err(g, n, PD_ERR_SHAPE, "past_value %s must be [%lld,%lld,%lld,%lld]", shp(pv).s,
                            (long long)a.B, (long long)a.Hk, (long long)a.P, (long long)a.Dv);
    int64_t y3[3] = {a.B, a.Sq, a.Hq * a.Dv}, y4[4] = {a.B, a.Hq, a.Sq, a.Dv};
    int64_t pks[4] = {a.B, a.Hk, a.Tk, a.Dh}, pvs[4] = {a.B, a.Hk, a.Tk, a.Dv}, qks[4] = {a.B, a.Hq, a.Sq, a.Tk};
    PD_TRY(set_out(g, n, 0, q->dtype, a.three ? 3 : 4, a.three ? y3 : y4));
    PD_TRY(set_out(g, n, 1, q->dtype, 4, pks));
    PD_TRY(set_out(g, n, 2, q->dtype, 4, pvs));
    return set_out(g, n, 3, q->dtype, 4, qks);
}

double pd__flops_Attention(const pd_graph *g, const pd__node *n) {
    const pd__tensor *q = cin(g, n, 0), *k = cin(g, n, 1), *v = cin(g, n, 2), *m = cin(g, n, 3), *pk = cin(g, n, 4);
    pd__attn a;
    if (!q || !k || !v || q->numel < 0 || k->numel < 0 || v->numel < 0 ||
        pd__attn_plan(n, q->ndim, q->shape, k->ndim, k->shape, v->ndim, v->shape, m ? m->ndim : 0,
                      m ? m->shape : NULL, pk ? pk->ndim : 0, pk ? pk->shape : NULL, &a) != PD_OK)
        return 0;
    double scores = (double)a.B * (double)a.Hq * (double)a.Sq * (double)a.Tk;
    /* Q K^T, P V, and the mask, max, exp, sum and scale per score */
    return scores * (2 * (double)(a.Dh + a.Dv) + 5);
}

/* ---- FlexAttention ------------------------------------------------------------------------- */

/* FlexAttention (ai.onnx.preview, opset 1) without its modifier subgraphs is
 * Attention over 4-D Q, K, V (grouped-query heads, the scale attribute, no
 * mask): the same plan and kernels. The score_mod and prob_mod subgraphs are
 * not run; softmax in float32 or float64 (finer than ONNX's float16 and
 * bfloat16 softmax_precision, so those are refused rather than matched). */
pd_status pd__shape_FlexAttention(pd_graph *g, pd__node *n) {
    static const char *const mods[2] = {"score_mod", "prob_mod"};
    for (int i = 0; i < 2; i++)
        if (pd__attr_get(n, mods[i]))
            return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "the %s subgraph is not supported", mods[i]);
    int64_t sp = pd__attr_i(n, "softmax_precision", PD_FLOAT);
    if (sp != PD_FLOAT && sp != PD_DOUBLE)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "softmax_precision %lld (float and double are supported)",
                            (long long)sp);
    for (int i = 0; i < 3; i++) {
        pd__tensor *t;
        PD_TRY(need(g, n, i, i == 0 ? "Q" : i == 1 ? "K" : "V", &t));
        if (t->ndim != 4)
            return pd__node_err(g, n, PD_ERR_SHAPE, "%s %s must be 4-D (batch, heads, sequence, head size)",
                                i == 0 ? "Q" : i == 1 ? "K" : "V", shp(t).s);
    }
    if (n->nin > 3 || n->nout > 1)
        return pd__node_err(g, n, PD_ERR_INVALID, "takes Q, K and V and gives Y (%d inputs, %d outputs)", n->nin,
                            n->nout);
    return pd__shape_Attention(g, n);
}

double pd__flops_FlexAttention(const pd_graph *g, const pd__node *n) { return pd__flops_Attention(g, n); }

/* ---- LinearAttention ----------------------------------------------------------------------- */

pd_status pd__linattn_plan(const pd__node *n, int qn, const int64_t *qs, int kn, const int64_t *ks, int vn,
                           const int64_t *vs, int dn, const int64_t *ds, int bn, const int64_t *bs, pd__linattn *a) {
    memset(a, 0, sizeof *a);
    const char *rule = pd__attr_s(n, "update_rule", "gated_delta");
    a->gated = strcmp(rule, "gated") == 0 || strcmp(rule, "gated_delta") == 0;
    a->delta = strcmp(rule, "delta") == 0 || strcmp(rule, "gated_delta") == 0;
    if (!a->gated && !a->delta && strcmp(rule, "linear") != 0)
        return pd__err(PD_ERR_UNSUPPORTED, "update_rule '%s' (linear, gated, delta and gated_delta are defined)",
                       rule);
    if (qn != 3 || kn != 3 || vn != 3)
        return pd__err(PD_ERR_SHAPE, "query %s, key %s and value %s must be 3-D (batch, tokens, heads * size)",
                       shpv(qn, qs).s, shpv(kn, ks).s, shpv(vn, vs).s);
    int64_t hq = pd__attr_i(n, "q_num_heads", 0), hk = pd__attr_i(n, "kv_num_heads", 0);
    if (hq <= 0 || hk <= 0 || hq % hk != 0 || qs[2] % hq != 0 || ks[2] % hk != 0 || vs[2] % hk != 0)
        return pd__err(PD_ERR_SHAPE,
                       "q_num_heads %lld must be a positive multiple of kv_num_heads %lld, dividing query %s; "
                       "kv_num_heads must divide key %s and value %s",
                       (long long)hq, (long long)hk, shpv(qn, qs).s, shpv(kn, ks).s, shpv(vn, vs).s);
    a->B = qs[0], a->T = qs[1], a->Hq = hq, a->Hk = hk, a->Dk = qs[2] / hq, a->Dv = vs[2] / hk;
    if (ks[0] != a->B || vs[0] != a->B || ks[1] != a->T || vs[1] != a->T || ks[2] / hk != a->Dk)
        return pd__err(PD_ERR_SHAPE, "key %s and value %s do not match query %s", shpv(kn, ks).s, shpv(vn, vs).s,
                       shpv(qn, qs).s);
    if (a->gated != (dn != 0) || a->delta != (bn != 0))
        return pd__err(PD_ERR_INVALID, "update_rule '%s' %s decay and %s beta", rule,
                       a->gated ? "needs" : "takes no", a->delta ? "needs" : "takes no");
    if (dn) {
        if (dn != 3 || ds[0] != a->B || ds[1] != a->T || (ds[2] != hk && ds[2] != hk * a->Dk))
            return pd__err(PD_ERR_SHAPE, "decay %s must be [%lld,%lld,%lld] or [%lld,%lld,%lld]", shpv(dn, ds).s,
                           (long long)a->B, (long long)a->T, (long long)hk, (long long)a->B, (long long)a->T,
                           (long long)(hk * a->Dk));
        a->gw = ds[2] / hk;
    }
    if (bn) {
        if (bn != 3 || bs[0] != a->B || bs[1] != a->T || (bs[2] != hk && bs[2] != 1))
            return pd__err(PD_ERR_SHAPE, "beta %s must be [%lld,%lld,%lld] or [%lld,%lld,1]", shpv(bn, bs).s,
                           (long long)a->B, (long long)a->T, (long long)hk, (long long)a->B, (long long)a->T);
        a->bw = bs[2];
    }
    /* scale 0 (the default) means 1/sqrt(Dk), as in ONNX's reference */
    double sc = pd__attr_f(n, "scale", 0);
    a->scale = sc != 0 ? sc : 1 / sqrt((double)a->Dk);
    return PD_OK;
}

static bool is_real(pd_dtype t) { return is_float(t) || t == PD_FLOAT16 || t == PD_BFLOAT16; }

/* Computed in float64 through pd__get_f/pd__set_f, so float16 and bfloat16 run
 * too (rounded once, on the way out); past_state may have its own float dtype
 * (ONNX's S), and present_state takes it, else query's. */
pd_status pd__shape_LinearAttention(pd_graph *g, pd__node *n) {
    pd__tensor *q, *k, *v, *ps = pd__in(g, n, 3), *dc = pd__in(g, n, 4), *bt = pd__in(g, n, 5);
    PD_TRY(need(g, n, 0, "query", &q));
    PD_TRY(need(g, n, 1, "key", &k));
    PD_TRY(need(g, n, 2, "value", &v));
    if (!is_real(q->dtype))
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "query '%s' has dtype %s (float types are supported)", q->name,
                            pd_dtype_name(q->dtype));
    PD_TRY(need_dtype(g, n, k, q->dtype, "key"));
    PD_TRY(need_dtype(g, n, v, q->dtype, "value"));
    if (dc) PD_TRY(need_dtype(g, n, dc, q->dtype, "decay"));
    if (bt) PD_TRY(need_dtype(g, n, bt, q->dtype, "beta"));
    pd__linattn a;
    pd_status st = pd__linattn_plan(n, q->ndim, q->shape, k->ndim, k->shape, v->ndim, v->shape, dc ? dc->ndim : 0,
                                    dc ? dc->shape : NULL, bt ? bt->ndim : 0, bt ? bt->shape : NULL, &a);
    if (st != PD_OK) return node_prefix(g, n, st);
    int64_t ss[4] = {a.B, a.Hk, a.Dk, a.Dv}, ys[3] = {a.B, a.T, a.Hq * a.Dv};
    if (ps && (!is_real(ps->dtype) || ps->ndim != 4 || memcmp(ps->shape, ss, sizeof ss) != 0))
        return pd__node_err(g, n, PD_ERR_SHAPE, "past_state %s (%s) must be a float [%lld,%lld,%lld,%lld]",
                            shp(ps).s, pd_dtype_name(ps->dtype), (long long)a.B, (long long)a.Hk, (long long)a.Dk,
                            (long long)a.Dv);
    PD_TRY(set_out(g, n, 0, q->dtype, 3, ys));
    return set_out(g, n, 1, ps ? ps->dtype : q->dtype, 4, ss);
}

double pd__flops_LinearAttention(const pd_graph *g, const pd__node *n) {
    const pd__tensor *q = cin(g, n, 0), *k = cin(g, n, 1), *v = cin(g, n, 2), *dc = cin(g, n, 4),
                     *bt = cin(g, n, 5);
    pd__linattn a;
    if (!q || !k || !v || q->numel < 0 ||
        pd__linattn_plan(n, q->ndim, q->shape, k->ndim, k->shape, v->ndim, v->shape, dc ? dc->ndim : 0,
                         dc ? dc->shape : NULL, bt ? bt->ndim : 0, bt ? bt->shape : NULL, &a) != PD_OK)
        return 0;
    /* per token and kv head: decay, S^T k, the rank-1 update (Dk x Dv each);
     * per query head: S^T q */
    double st = (double)a.Dk * (double)a.Dv;
    return (double)a.B * (double)a.T * ((double)a.Hk * 5 * st + (double)a.Hq * 2 * st);
}

/* ---- CausalConvWithState --------------------------------------------------------------------- */

int pd__ccws_silu(const pd__node *n) {
    const char *act = pd__attr_s(n, "activation", "none");
    if (strcmp(act, "none") == 0) return 0;
    return strcmp(act, "silu") == 0 || strcmp(act, "swish") == 0 ? 1 : -1;
}

/* Any float dtype: the kernel computes in float64 (runtime/cpu/nn.c). */
pd_status pd__shape_CausalConvWithState(pd_graph *g, pd__node *n) {
    pd__tensor *x, *w, *b = pd__in(g, n, 2), *ps = pd__in(g, n, 3);
    PD_TRY(need(g, n, 0, "input", &x));
    PD_TRY(need(g, n, 1, "weight", &w));
    if (!is_real(x->dtype))
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "input '%s' has dtype %s (float types are supported)", x->name,
                            pd_dtype_name(x->dtype));
    PD_TRY(need_dtype(g, n, w, x->dtype, "weight"));
    if (b) PD_TRY(need_dtype(g, n, b, x->dtype, "bias"));
    if (ps) PD_TRY(need_dtype(g, n, ps, x->dtype, "past_state"));
    if (pd__ccws_silu(n) < 0)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "activation '%s' (none, silu and swish are defined)",
                            pd__attr_s(n, "activation", ""));
    if (x->ndim != 3 || w->ndim != 3 || w->shape[0] != x->shape[1] || w->shape[1] != 1 || w->shape[2] < 1)
        return pd__node_err(g, n, PD_ERR_SHAPE, "input %s must be (batch, channels, length) and weight %s (channels, 1, k)",
                            shp(x).s, shp(w).s);
    int64_t B = x->shape[0], C = x->shape[1], K = w->shape[2], ss[3] = {B, C, K - 1};
    if (b && (b->ndim != 1 || b->shape[0] != C))
        return pd__node_err(g, n, PD_ERR_SHAPE, "bias %s must be [%lld]", shp(b).s, (long long)C);
    if (ps && (ps->ndim != 3 || memcmp(ps->shape, ss, sizeof ss) != 0))
        return pd__node_err(g, n, PD_ERR_SHAPE, "past_state %s must be [%lld,%lld,%lld]", shp(ps).s, (long long)B,
                            (long long)C, (long long)(K - 1));
    PD_TRY(set_out(g, n, 0, x->dtype, 3, x->shape));
    return set_out(g, n, 1, x->dtype, 3, ss);
}

double pd__flops_CausalConvWithState(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = cin(g, n, 0), *w = cin(g, n, 1);
    if (!x || !w || w->ndim != 3) return 0;
    return dnumel(x) * (2 * (double)w->shape[2] + (pd__ccws_silu(n) > 0 ? 4 : 0));
}

/* ---- GridSample, AffineGrid, Col2Im, CenterCropPad ------------------------------------------------ */

/* Constant int64 input i as up to `max` ints: these ops' output shapes hang on it. */
static pd_status need_ints(pd_graph *g, pd__node *n, int i, const char *what, int max, int64_t *v, int *k) {
    pd__tensor *t;
    PD_TRY(need(g, n, i, what, &t));
    if (t->dtype != PD_INT64 || t->ndim != 1 || t->shape[0] > max)
        return pd__node_err(g, n, PD_ERR_SHAPE, "%s %s (%s) must be a 1-D int64 tensor of at most %d values", what,
                            shp(t).s, pd_dtype_name(t->dtype), max);
    if (!((t->kind == PD_T_INIT || t->kind == PD_T_CONST) && t->data))
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "%s is not a constant at load", what);
    *k = (int)t->shape[0];
    for (int j = 0; j < *k; j++) v[j] = ((const int64_t *)t->data)[j];
    return PD_OK;
}

int pd__grid_mode(const pd__node *n) {
    const char *m = pd__attr_s(n, "mode", n->opset >= 20 ? "linear" : "bilinear");
    if (!strcmp(m, "nearest")) return 1;
    if (!strcmp(m, "linear") || !strcmp(m, "bilinear")) return 2;
    if (!strcmp(m, "cubic") || !strcmp(m, "bicubic")) return 4;
    return 0;
}

int pd__grid_padding(const pd__node *n) {
    const char *p = pd__attr_s(n, "padding_mode", "zeros");
    return !strcmp(p, "zeros") ? 0 : !strcmp(p, "border") ? 1 : !strcmp(p, "reflection") ? 2 : -1;
}

/* Y (N, C, O1..Or) = X (N, C, D1..Dr) sampled at grid (N, O1..Or, r), r 2 or 3. */
pd_status pd__shape_GridSample(pd_graph *g, pd__node *n) {
    pd__tensor *x, *grid;
    PD_TRY(need(g, n, 0, "X", &x));
    PD_TRY(need(g, n, 1, "grid", &grid));
    PD_TRY(need_float(g, n, x, "X"));
    PD_TRY(need_dtype(g, n, grid, x->dtype, "grid"));
    int r = x->ndim - 2;
    if (r < 2 || r > 3 || grid->ndim != r + 2 || grid->shape[r + 1] != r || grid->shape[0] != x->shape[0])
        return pd__node_err(g, n, PD_ERR_SHAPE, "X %s and grid %s: want X (N, C, D1..Dr), grid (N, O1..Or, r), r 2 or 3",
                            shp(x).s, shp(grid).s);
    int mode = pd__grid_mode(n);
    if (!mode) return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "mode '%s' is not supported", pd__attr_s(n, "mode", ""));
    if (mode == 4 && r != 2) return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "cubic mode needs a 4-D X (the spec's)");
    if (pd__grid_padding(n) < 0)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "padding_mode '%s' is not supported",
                            pd__attr_s(n, "padding_mode", ""));
    int64_t ys[5] = {x->shape[0], x->shape[1]};
    for (int i = 0; i < r; i++) ys[2 + i] = grid->shape[1 + i];
    return set_out(g, n, 0, x->dtype, r + 2, ys);
}

double pd__flops_GridSample(const pd_graph *g, const pd__node *n) {
    const pd__tensor *y = cout(g, n, 0), *x = cin(g, n, 0);
    if (!y || !x) return 0;
    int k = pd__grid_mode(n);
    return 2 * dnumel(y) * pow(k, x->ndim - 2);
}

/* grid (N, H, W, 2) or (N, D, H, W, 3) = theta (N, 2, 3) or (N, 3, 4) applied to the
 * normalized coordinates of size (N, C, H, W) or (N, C, D, H, W). */
pd_status pd__shape_AffineGrid(pd_graph *g, pd__node *n) {
    pd__tensor *th;
    PD_TRY(need(g, n, 0, "theta", &th));
    PD_TRY(need_float(g, n, th, "theta"));
    int64_t sz[5];
    int k;
    PD_TRY(need_ints(g, n, 1, "size", 5, sz, &k));
    int r = k - 2;
    if (r < 2 || r > 3 || th->ndim != 3 || th->shape[0] != sz[0] || th->shape[1] != r || th->shape[2] != r + 1)
        return pd__node_err(g, n, PD_ERR_SHAPE, "theta %s does not match size %s", shp(th).s, shpv(k, sz).s);
    for (int i = 0; i < k; i++)
        if (sz[i] < 1) return pd__node_err(g, n, PD_ERR_SHAPE, "size %s has a dim below 1", shpv(k, sz).s);
    int64_t ys[5] = {sz[0]};
    for (int i = 0; i < r; i++) ys[1 + i] = sz[2 + i];
    ys[r + 1] = r;
    return set_out(g, n, 0, th->dtype, r + 2, ys);
}

double pd__flops_AffineGrid(const pd_graph *g, const pd__node *n) {
    const pd__tensor *y = cout(g, n, 0);
    return y ? 2 * dnumel(y) * 4 : 0;
}

/* The geometry of Col2Im: its block counts per spatial dim, from the node and
 * image/block shapes; false when they do not fit. */
bool pd__col2im_plan(const pd__node *n, int r, const int64_t *img, const int64_t *blk, int64_t *cnt, int64_t *st,
                     int64_t *pb, int64_t *dil) {
    const int64_t *dv, *pv, *sv;
    int dc = pd__attr_ints(n, "dilations", &dv), pc = pd__attr_ints(n, "pads", &pv),
        sc = pd__attr_ints(n, "strides", &sv);
    if ((dc && dc != r) || (pc && pc != 2 * r) || (sc && sc != r)) return false;
    for (int i = 0; i < r; i++) {
        dil[i] = dc ? dv[i] : 1, st[i] = sc ? sv[i] : 1, pb[i] = pc ? pv[i] : 0;
        int64_t pe = pc ? pv[r + i] : 0, ext = dil[i] * (blk[i] - 1) + 1, span = img[i] + pb[i] + pe - ext;
        if (dil[i] < 1 || st[i] < 1 || blk[i] < 1 || span < 0) return false;
        cnt[i] = span / st[i] + 1;
    }
    return true;
}

/* Y (N, C, image_shape) from the blocks X (N, C * prod(block_shape), L): col2im, adding overlaps. */
pd_status pd__shape_Col2Im(pd_graph *g, pd__node *n) {
    pd__tensor *x;
    PD_TRY(need(g, n, 0, "input", &x));
    PD_TRY(need_float(g, n, x, "input"));
    int64_t img[PD_MAX_DIMS], blk[PD_MAX_DIMS], cnt[PD_MAX_DIMS], st[PD_MAX_DIMS], pb[PD_MAX_DIMS], dil[PD_MAX_DIMS];
    int ki, kb;
    PD_TRY(need_ints(g, n, 1, "image_shape", PD_MAX_DIMS - 2, img, &ki));
    PD_TRY(need_ints(g, n, 2, "block_shape", PD_MAX_DIMS - 2, blk, &kb));
    if (ki != kb || ki < 1 || x->ndim != 3)
        return pd__node_err(g, n, PD_ERR_SHAPE, "input %s, image_shape %s and block_shape %s do not agree", shp(x).s,
                            shpv(ki, img).s, shpv(kb, blk).s);
    if (!pd__col2im_plan(n, ki, img, blk, cnt, st, pb, dil))
        return pd__node_err(g, n, PD_ERR_SHAPE, "bad dilations, pads or strides for image %s and block %s",
                            shpv(ki, img).s, shpv(kb, blk).s);
    int64_t K = prod(ki, blk), L = prod(ki, cnt);
    if (x->shape[1] % K || x->shape[2] != L)
        return pd__node_err(g, n, PD_ERR_SHAPE, "input %s: want (N, C * %lld, %lld)", shp(x).s, (long long)K,
                            (long long)L);
    int64_t ys[PD_MAX_DIMS] = {x->shape[0], x->shape[1] / K};
    for (int i = 0; i < ki; i++) ys[2 + i] = img[i];
    return set_out(g, n, 0, x->dtype, ki + 2, ys);
}

double pd__flops_Col2Im(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = cin(g, n, 0);
    return x ? dnumel(x) : 0;
}

/* The output dims of CenterCropPad: shape on axes (all dims by default). */
pd_status pd__shape_CenterCropPad(pd_graph *g, pd__node *n) {
    pd__tensor *x;
    PD_TRY(need(g, n, 0, "input_data", &x));
    int64_t sv[PD_MAX_DIMS], ys[PD_MAX_DIMS];
    int k;
    PD_TRY(need_ints(g, n, 1, "shape", PD_MAX_DIMS, sv, &k));
    const int64_t *av;
    int ac = pd__attr_ints(n, "axes", &av), r = x->ndim;
    if ((ac ? ac : r) != k)
        return pd__node_err(g, n, PD_ERR_SHAPE, "shape %s has %d values for %d axes", shpv(k, sv).s, k, ac ? ac : r);
    for (int i = 0; i < r; i++) ys[i] = x->shape[i];
    bool seen[PD_MAX_DIMS] = {false};
    for (int i = 0; i < k; i++) {
        int a = i;
        if ((ac && !norm_axis(av[i], r, r - 1, &a)) || seen[a] || sv[i] < 0)
            return pd__node_err(g, n, PD_ERR_SHAPE, "axes or shape entry %d is out of range or repeated", i);
        seen[a] = true;
        ys[a] = sv[i];
    }
    return set_out(g, n, 0, x->dtype, r, ys);
}

double pd__flops_CenterCropPad(const pd_graph *g, const pd__node *n) {
    (void)g, (void)n;
    return 0; /* a copy */
}

/* ---- RoiAlign ------------------------------------------------------------------------------------- */

int pd__roialign_mode(const pd__node *n) {
    const char *m = pd__attr_s(n, "mode", "avg");
    return !strcmp(m, "avg") ? 0 : !strcmp(m, "max") ? 1 : -1;
}

/* 0.5 for half_pixel (the default from opset 16), 0 for output_half_pixel
 * (opset 10's only behaviour); -1: unknown. */
double pd__roialign_offset(const pd__node *n) {
    const char *m = pd__attr_s(n, "coordinate_transformation_mode", n->opset >= 16 ? "half_pixel" : "output_half_pixel");
    return !strcmp(m, "half_pixel") ? 0.5 : !strcmp(m, "output_half_pixel") ? 0 : -1;
}

/* Y (R, C, output_height, output_width) pooled from X (N, C, H, W) over rois (R, 4). */
pd_status pd__shape_RoiAlign(pd_graph *g, pd__node *n) {
    pd__tensor *x, *rois, *bi;
    PD_TRY(need(g, n, 0, "X", &x));
    PD_TRY(need(g, n, 1, "rois", &rois));
    PD_TRY(need(g, n, 2, "batch_indices", &bi));
    PD_TRY(need_float(g, n, x, "X"));
    PD_TRY(need_dtype(g, n, rois, x->dtype, "rois"));
    if (bi->dtype != PD_INT64 && bi->dtype != PD_INT32)
        return pd__node_err(g, n, PD_ERR_SHAPE, "batch_indices has dtype %s, expected int64",
                            pd_dtype_name(bi->dtype));
    if (x->ndim != 4 || rois->ndim != 2 || rois->shape[1] != 4 || bi->ndim != 1 || bi->shape[0] != rois->shape[0])
        return pd__node_err(g, n, PD_ERR_SHAPE, "X %s, rois %s, batch_indices %s: want (N, C, H, W), (R, 4), (R)",
                            shp(x).s, shp(rois).s, shp(bi).s);
    if (pd__roialign_mode(n) < 0)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "mode '%s' is not supported", pd__attr_s(n, "mode", ""));
    if (pd__roialign_offset(n) < 0)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "coordinate_transformation_mode '%s' is not supported",
                            pd__attr_s(n, "coordinate_transformation_mode", ""));
    int64_t oh = pd__attr_i(n, "output_height", 1), ow = pd__attr_i(n, "output_width", 1);
    if (oh < 1 || ow < 1 || pd__attr_i(n, "sampling_ratio", 0) < 0)
        return pd__node_err(g, n, PD_ERR_SHAPE, "output_height, output_width must be positive, sampling_ratio >= 0");
    int64_t ys[4] = {rois->shape[0], x->shape[1], oh, ow};
    return set_out(g, n, 0, x->dtype, 4, ys);
}

double pd__flops_RoiAlign(const pd_graph *g, const pd__node *n) {
    const pd__tensor *y = cout(g, n, 0);
    return y ? 8 * dnumel(y) : 0; /* per sample; the samples per bin depend on the rois */
}
