/* shape_elem.c - shape rules and FLOP counts of the element-wise ops:
 * the arithmetic, comparison and logic ones with numpy (multidirectional)
 * broadcasting (Add ... Pow, Mod, Sum, Max, Min, Mean, Equal, Less ...,
 * And, Or, Xor, Where, BitwiseAnd/Or/Xor, BitShift), PRelu (one-way), the
 * unary ones (Sqrt ... Gelu, Clip, the activations, Abs ... Round,
 * trigonometry, Not, BitwiseNot, IsNaN, IsInf),
 * Cast, CastLike and Identity, QuantizeLinear, DequantizeLinear and
 * DynamicQuantizeLinear, and the reductions (ReduceSum ... ReduceLogSumExp).
 *
 * How it works: docs/INTERNALS.md, "core/shape_elem.c".
 */
#include "shape_elem.h"

#include <stdio.h>
#include <string.h>

/* ---- helpers ---------------------------------------------------------------- */

/* Input i, which must be present and have a shape. */
static pd_status input(pd_graph *g, const pd__node *n, int i, pd__tensor **t) {
    *t = pd__in(g, n, i);
    if (!*t) return pd__node_err(g, n, PD_ERR_INVALID, "input %d is missing", i);
    if ((*t)->ndim < 0) return pd__node_err(g, n, PD_ERR_SHAPE, "input %d ('%s') has no known shape", i, (*t)->name);
    return PD_OK;
}

static pd_status output(pd_graph *g, const pd__node *n, pd__tensor **t) {
    *t = pd__out(g, n, 0);
    if (!*t) return pd__node_err(g, n, PD_ERR_INVALID, "output 0 is missing");
    return PD_OK;
}

/* The dtype of input i must be of one of the classes in `kinds`. */
static pd_status check_kind(const pd_graph *g, const pd__node *n, const pd__tensor *t, unsigned kinds) {
    unsigned k = pd__ekind(t->dtype);
    if (k & kinds) return PD_OK;
    return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "dtype %s of '%s' is not supported", pd_dtype_name(t->dtype),
                        t->name);
}

static pd_status check_same_dtype(const pd_graph *g, const pd__node *n, const pd__tensor *a, const pd__tensor *b) {
    if (a->dtype == b->dtype) return PD_OK;
    return pd__node_err(g, n, PD_ERR_SHAPE, "dtypes differ: '%s' is %s, '%s' is %s", a->name,
                        pd_dtype_name(a->dtype), b->name, pd_dtype_name(b->dtype));
}

/* shape (*nd) = numpy broadcast of shape and b; error naming both when they do not fit. */
static pd_status bcast(const pd_graph *g, const pd__node *n, int *nd, int64_t *shape, int nb, const int64_t *b) {
    int nr = *nd > nb ? *nd : nb;
    int64_t r[PD_MAX_DIMS];
    for (int d = 0; d < nr; d++) {
        int da = d - (nr - *nd), db = d - (nr - nb);
        int64_t x = da >= 0 ? shape[da] : 1, y = db >= 0 ? b[db] : 1;
        if (x != y && x != 1 && y != 1) {
            char sa[128], sb[128];
            pd__format_shape(sa, sizeof sa, *nd, shape);
            pd__format_shape(sb, sizeof sb, nb, b);
            return pd__node_err(g, n, PD_ERR_SHAPE, "shapes %s and %s do not broadcast", sa, sb);
        }
        r[d] = x == 1 ? y : x;
    }
    for (int d = 0; d < nr; d++) shape[d] = r[d];
    *nd = nr;
    return PD_OK;
}

/* Element counts for the FLOP rules, in double: 8 * numel may not fit an int64. */
static double out_numel(const pd_graph *g, const pd__node *n) {
    if (n->nout < 1 || n->out[0] < 0) return 0;
    int64_t v = g->tensors[n->out[0]].numel;
    return v > 0 ? (double)v : 0;
}

static double in_numel(const pd_graph *g, const pd__node *n, int i) {
    if (i >= n->nin || n->in[i] < 0) return 0;
    int64_t v = g->tensors[n->in[i]].numel;
    return v > 0 ? (double)v : 0;
}

/* ---- binary ops with broadcasting --------------------------------------------- */

/* A op B: both of a class in `kinds`; same dtype unless `mixed`; output
 * dtype `odt` (PD_UNDEFINED: A's). Honours opset < 7's broadcast/axis. */
static pd_status shape_binary(pd_graph *g, pd__node *n, unsigned kinds, bool mixed, pd_dtype odt) {
    pd__tensor *a, *b, *y;
    PD_TRY(input(g, n, 0, &a));
    PD_TRY(input(g, n, 1, &b));
    PD_TRY(output(g, n, &y));
    PD_TRY(check_kind(g, n, a, kinds));
    PD_TRY(check_kind(g, n, b, kinds));
    if (!mixed) PD_TRY(check_same_dtype(g, n, a, b));
    int nd = a->ndim, nb = b->ndim;
    int64_t shape[PD_MAX_DIMS], bs[PD_MAX_DIMS];
    for (int d = 0; d < nd; d++) shape[d] = a->shape[d];
    for (int d = 0; d < nb; d++) bs[d] = b->shape[d];
    if (!pd__legacy_bshape(n, nd, &nb, bs)) {
        char sa[128], sb[128];
        pd__format_shape(sa, sizeof sa, a->ndim, a->shape);
        pd__format_shape(sb, sizeof sb, b->ndim, b->shape);
        return pd__node_err(g, n, PD_ERR_SHAPE, "shape %s does not fit in %s at axis %lld", sb, sa,
                            (long long)pd__attr_i(n, "axis", 0));
    }
    PD_TRY(bcast(g, n, &nd, shape, nb, bs));
    y->dtype = odt == PD_UNDEFINED ? a->dtype : odt;
    return pd__tensor_set_shape(g, y, nd, shape);
}

pd_status pd__shape_Add(pd_graph *g, pd__node *n) { return shape_binary(g, n, PD_EK_NUM, false, PD_UNDEFINED); }
pd_status pd__shape_Sub(pd_graph *g, pd__node *n) { return shape_binary(g, n, PD_EK_NUM, false, PD_UNDEFINED); }
pd_status pd__shape_Mul(pd_graph *g, pd__node *n) { return shape_binary(g, n, PD_EK_NUM, false, PD_UNDEFINED); }
pd_status pd__shape_Div(pd_graph *g, pd__node *n) { return shape_binary(g, n, PD_EK_NUM, false, PD_UNDEFINED); }
/* Pow: the exponent may have another dtype; the result has the base's. */
pd_status pd__shape_Pow(pd_graph *g, pd__node *n) { return shape_binary(g, n, PD_EK_NUM, true, PD_UNDEFINED); }
pd_status pd__shape_Equal(pd_graph *g, pd__node *n) { return shape_binary(g, n, PD_EK_ANY, false, PD_BOOL); }
pd_status pd__shape_Less(pd_graph *g, pd__node *n) { return shape_binary(g, n, PD_EK_NUM, false, PD_BOOL); }
pd_status pd__shape_LessOrEqual(pd_graph *g, pd__node *n) { return shape_binary(g, n, PD_EK_NUM, false, PD_BOOL); }
pd_status pd__shape_Greater(pd_graph *g, pd__node *n) { return shape_binary(g, n, PD_EK_NUM, false, PD_BOOL); }
pd_status pd__shape_GreaterOrEqual(pd_graph *g, pd__node *n) { return shape_binary(g, n, PD_EK_NUM, false, PD_BOOL); }
pd_status pd__shape_And(pd_graph *g, pd__node *n) { return shape_binary(g, n, PD_EK_BOOL, false, PD_BOOL); }
pd_status pd__shape_Or(pd_graph *g, pd__node *n) { return shape_binary(g, n, PD_EK_BOOL, false, PD_BOOL); }
pd_status pd__shape_Xor(pd_graph *g, pd__node *n) { return shape_binary(g, n, PD_EK_BOOL, false, PD_BOOL); }
/* The bitwise ops: integers of one dtype; BitShift: unsigned ones, and a
 * direction of LEFT or RIGHT. */
pd_status pd__shape_BitwiseAnd(pd_graph *g, pd__node *n) { return shape_binary(g, n, PD_EK_INT, false, PD_UNDEFINED); }
pd_status pd__shape_BitwiseOr(pd_graph *g, pd__node *n) { return shape_binary(g, n, PD_EK_INT, false, PD_UNDEFINED); }
pd_status pd__shape_BitwiseXor(pd_graph *g, pd__node *n) { return shape_binary(g, n, PD_EK_INT, false, PD_UNDEFINED); }
pd_status pd__shape_BitShift(pd_graph *g, pd__node *n) {
    const char *d = pd__attr_s(n, "direction", "");
    if (strcmp(d, "LEFT") != 0 && strcmp(d, "RIGHT") != 0)
        return pd__node_err(g, n, PD_ERR_INVALID, "direction='%s' (expected LEFT or RIGHT)", d);
    return shape_binary(g, n, PD_EK_UINT, false, PD_UNDEFINED);
}
/* Mod: fmod = 0 takes the divisor's sign (Python's %), 1 the dividend's (C's fmod). */
pd_status pd__shape_Mod(pd_graph *g, pd__node *n) {
    int64_t f = pd__attr_i(n, "fmod", 0);
    if (f != 0 && f != 1) return pd__node_err(g, n, PD_ERR_INVALID, "fmod=%lld (expected 0 or 1)", (long long)f);
    return shape_binary(g, n, PD_EK_NUM, false, PD_UNDEFINED);
}

double pd__flops_Add(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_Sub(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_Mul(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_Div(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_Pow(const pd_graph *g, const pd__node *n) { return 8 * out_numel(g, n); }
double pd__flops_Equal(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_Less(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_LessOrEqual(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_Greater(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_GreaterOrEqual(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_And(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_Or(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_Xor(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_BitwiseAnd(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_BitwiseOr(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_BitwiseXor(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_BitShift(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_Mod(const pd_graph *g, const pd__node *n) { return 4 * out_numel(g, n); }

/* Sum, Max, Min, Mean: one or more inputs of one dtype, broadcast together
 * (Max and Min of any numeric dtype from opset 12, floats before; Mean floats). */
static pd_status shape_variadic(pd_graph *g, pd__node *n, unsigned kinds) {
    pd__tensor *a, *y;
    PD_TRY(input(g, n, 0, &a));
    PD_TRY(output(g, n, &y));
    PD_TRY(check_kind(g, n, a, kinds));
    int nd = a->ndim;
    int64_t shape[PD_MAX_DIMS];
    for (int d = 0; d < nd; d++) shape[d] = a->shape[d];
    for (int i = 1; i < n->nin; i++) {
        pd__tensor *b;
        PD_TRY(input(g, n, i, &b));
        PD_TRY(check_same_dtype(g, n, a, b));
        PD_TRY(bcast(g, n, &nd, shape, b->ndim, b->shape));
    }
    y->dtype = a->dtype;
    return pd__tensor_set_shape(g, y, nd, shape);
}

pd_status pd__shape_Sum(pd_graph *g, pd__node *n) { return shape_variadic(g, n, PD_EK_NUM); }
pd_status pd__shape_Max(pd_graph *g, pd__node *n) {
    return shape_variadic(g, n, n->opset >= 12 ? PD_EK_NUM : PD_EK_FLOAT);
}
pd_status pd__shape_Min(pd_graph *g, pd__node *n) {
    return shape_variadic(g, n, n->opset >= 12 ? PD_EK_NUM : PD_EK_FLOAT);
}
pd_status pd__shape_Mean(pd_graph *g, pd__node *n) { return shape_variadic(g, n, PD_EK_FLOAT); }

double pd__flops_Sum(const pd_graph *g, const pd__node *n) {
    double k = n->nin > 1 ? n->nin - 1 : 1;
    return k * out_numel(g, n);
}
double pd__flops_Max(const pd_graph *g, const pd__node *n) { return pd__flops_Sum(g, n); }
double pd__flops_Min(const pd_graph *g, const pd__node *n) { return pd__flops_Sum(g, n); }
double pd__flops_Mean(const pd_graph *g, const pd__node *n) { return pd__flops_Sum(g, n) + out_numel(g, n); }

/* PRelu(X, slope): slope broadcasts to X one way (opset >= 7); before, it is
 * X's shape, one value, or one per channel (axis 1, as PyTorch exported
 * PReLU(num_parameters=C) then). Y has X's shape. */
pd_status pd__shape_PRelu(pd_graph *g, pd__node *n) {
    pd__tensor *x, *s, *y;
    PD_TRY(input(g, n, 0, &x));
    PD_TRY(input(g, n, 1, &s));
    PD_TRY(output(g, n, &y));
    PD_TRY(check_kind(g, n, x, PD_EK_FLOAT));
    PD_TRY(check_same_dtype(g, n, x, s));
    bool fits = s->ndim <= x->ndim;
    for (int d = 0; fits && d < s->ndim; d++) {
        int64_t sd = s->shape[d], xd = x->shape[d + x->ndim - s->ndim];
        fits = sd == 1 || sd == xd;
    }
    if (n->opset < 7)
        fits = s->numel == 1 || s->numel == x->numel || (s->ndim == 1 && x->ndim >= 2 && s->shape[0] == x->shape[1]);
    if (!fits) {
        char sa[128], sb[128];
        pd__format_shape(sa, sizeof sa, x->ndim, x->shape);
        pd__format_shape(sb, sizeof sb, s->ndim, s->shape);
        return pd__node_err(g, n, PD_ERR_SHAPE, "slope of shape %s does not broadcast to X of shape %s", sb, sa);
    }
    y->dtype = x->dtype;
    return pd__tensor_set_shape(g, y, x->ndim, x->shape);
}

double pd__flops_PRelu(const pd_graph *g, const pd__node *n) { return 2 * out_numel(g, n); }

/* Where(condition, X, Y): bool condition, X and Y of one dtype, 3-way broadcast. */
pd_status pd__shape_Where(pd_graph *g, pd__node *n) {
    pd__tensor *c, *a, *b, *y;
    PD_TRY(input(g, n, 0, &c));
    PD_TRY(input(g, n, 1, &a));
    PD_TRY(input(g, n, 2, &b));
    PD_TRY(output(g, n, &y));
    if (c->dtype != PD_BOOL)
        return pd__node_err(g, n, PD_ERR_SHAPE, "condition '%s' is %s, not bool", c->name, pd_dtype_name(c->dtype));
    PD_TRY(check_kind(g, n, a, PD_EK_ANY));
    PD_TRY(check_same_dtype(g, n, a, b));
    int nd = c->ndim;
    int64_t shape[PD_MAX_DIMS];
    for (int d = 0; d < nd; d++) shape[d] = c->shape[d];
    PD_TRY(bcast(g, n, &nd, shape, a->ndim, a->shape));
    PD_TRY(bcast(g, n, &nd, shape, b->ndim, b->shape));
    y->dtype = a->dtype;
    return pd__tensor_set_shape(g, y, nd, shape);
}

double pd__flops_Where(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }

/* ---- unary ops ------------------------------------------------------------------ */

/* Y has X's dtype and shape; X must be of a class in `kinds`. */
static pd_status shape_unary(pd_graph *g, pd__node *n, unsigned kinds) {
    pd__tensor *x, *y;
    PD_TRY(input(g, n, 0, &x));
    PD_TRY(output(g, n, &y));
    PD_TRY(check_kind(g, n, x, kinds));
    y->dtype = x->dtype;
    return pd__tensor_set_shape(g, y, x->ndim, x->shape);
}

#define PD__FLOAT_ONLY PD_EK_FLOAT
#define PD__SIGNED (PD_EK_FLOAT | PD_EK_SINT)

pd_status pd__shape_Sqrt(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Exp(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Log(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Neg(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__SIGNED); }
pd_status pd__shape_Reciprocal(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Relu(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__SIGNED); }
pd_status pd__shape_LeakyRelu(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Sigmoid(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Tanh(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
/* Erf is defined for every numeric type (integers go through double). */
pd_status pd__shape_Erf(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD_EK_NUM); }

/* Not: bool; IsNaN, IsInf: floats to bool. */
pd_status pd__shape_Not(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD_EK_BOOL); }
pd_status pd__shape_BitwiseNot(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD_EK_INT); }
static pd_status shape_float_pred(pd_graph *g, pd__node *n) {
    PD_TRY(shape_unary(g, n, PD__FLOAT_ONLY));
    pd__out(g, n, 0)->dtype = PD_BOOL;
    return PD_OK;
}
pd_status pd__shape_IsNaN(pd_graph *g, pd__node *n) { return shape_float_pred(g, n); }
pd_status pd__shape_IsInf(pd_graph *g, pd__node *n) { return shape_float_pred(g, n); }
pd_status pd__shape_Abs(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD_EK_NUM); }
pd_status pd__shape_Sign(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD_EK_NUM); }
pd_status pd__shape_Floor(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Ceil(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Round(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_HardSigmoid(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_HardSwish(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Softplus(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Softsign(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Elu(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Selu(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Celu(pd_graph *g, pd__node *n) {
    if (pd__attr_f(n, "alpha", 1.0f) == 0.0f) return pd__node_err(g, n, PD_ERR_INVALID, "alpha=0 (Celu divides by it)");
    return shape_unary(g, n, PD__FLOAT_ONLY);
}
pd_status pd__shape_Mish(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Swish(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_ThresholdedRelu(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
/* Shrink is defined on integers too; only floats are computed here. */
pd_status pd__shape_Shrink(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Sin(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Cos(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Tan(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Asin(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Acos(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Atan(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Sinh(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Cosh(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Asinh(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Acosh(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Atanh(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }

double pd__flops_Not(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_BitwiseNot(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_IsNaN(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_IsInf(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_Abs(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_Sign(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_Floor(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_Ceil(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_Round(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_HardSigmoid(const pd_graph *g, const pd__node *n) { return 4 * out_numel(g, n); }
double pd__flops_HardSwish(const pd_graph *g, const pd__node *n) { return 5 * out_numel(g, n); }
double pd__flops_Softplus(const pd_graph *g, const pd__node *n) { return 18 * out_numel(g, n); }
double pd__flops_Softsign(const pd_graph *g, const pd__node *n) { return 3 * out_numel(g, n); }
double pd__flops_Elu(const pd_graph *g, const pd__node *n) { return 10 * out_numel(g, n); }
double pd__flops_Selu(const pd_graph *g, const pd__node *n) { return 11 * out_numel(g, n); }
double pd__flops_Celu(const pd_graph *g, const pd__node *n) { return 12 * out_numel(g, n); }
double pd__flops_Mish(const pd_graph *g, const pd__node *n) { return 30 * out_numel(g, n); }
double pd__flops_Swish(const pd_graph *g, const pd__node *n) { return 12 * out_numel(g, n); }
double pd__flops_ThresholdedRelu(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_Shrink(const pd_graph *g, const pd__node *n) { return 3 * out_numel(g, n); }
double pd__flops_Sin(const pd_graph *g, const pd__node *n) { return 10 * out_numel(g, n); }
double pd__flops_Cos(const pd_graph *g, const pd__node *n) { return 10 * out_numel(g, n); }
double pd__flops_Tan(const pd_graph *g, const pd__node *n) { return 12 * out_numel(g, n); }
double pd__flops_Asin(const pd_graph *g, const pd__node *n) { return 12 * out_numel(g, n); }
double pd__flops_Acos(const pd_graph *g, const pd__node *n) { return 12 * out_numel(g, n); }
double pd__flops_Atan(const pd_graph *g, const pd__node *n) { return 12 * out_numel(g, n); }
double pd__flops_Sinh(const pd_graph *g, const pd__node *n) { return 12 * out_numel(g, n); }
double pd__flops_Cosh(const pd_graph *g, const pd__node *n) { return 12 * out_numel(g, n); }
double pd__flops_Asinh(const pd_graph *g, const pd__node *n) { return 14 * out_numel(g, n); }
double pd__flops_Acosh(const pd_graph *g, const pd__node *n) { return 14 * out_numel(g, n); }
double pd__flops_Atanh(const pd_graph *g, const pd__node *n) { return 14 * out_numel(g, n); }

pd_status pd__shape_Gelu(pd_graph *g, pd__node *n) {
    const char *ap = pd__attr_s(n, "approximate", "none");
    if (strcmp(ap, "none") != 0 && strcmp(ap, "tanh") != 0)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "approximate='%s' (expected none or tanh)", ap);
    return shape_unary(g, n, PD__FLOAT_ONLY);
}

/* Clip: opset >= 11 takes optional scalar min / max inputs of X's dtype;
 * older ones float attributes. */
pd_status pd__shape_Clip(pd_graph *g, pd__node *n) {
    pd__tensor *x;
    PD_TRY(input(g, n, 0, &x));
    PD_TRY(shape_unary(g, n, n->opset >= 11 ? PD_EK_NUM : PD_EK_FLOAT));
    for (int i = 1; i <= 2 && n->opset >= 11; i++) {
        pd__tensor *b = pd__in(g, n, i);
        if (!b) continue;
        if (b->ndim < 0) return pd__node_err(g, n, PD_ERR_SHAPE, "input %d ('%s') has no known shape", i, b->name);
        PD_TRY(check_same_dtype(g, n, x, b));
        if (b->numel != 1) {
            char s[128];
            pd__format_shape(s, sizeof s, b->ndim, b->shape);
            return pd__node_err(g, n, PD_ERR_SHAPE, "%s '%s' has shape %s, not a scalar", i == 1 ? "min" : "max",
                                b->name, s);
        }
    }
    return PD_OK;
}

double pd__flops_Sqrt(const pd_graph *g, const pd__node *n) { return 4 * out_numel(g, n); }
double pd__flops_Exp(const pd_graph *g, const pd__node *n) { return 8 * out_numel(g, n); }
double pd__flops_Log(const pd_graph *g, const pd__node *n) { return 8 * out_numel(g, n); }
double pd__flops_Neg(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_Reciprocal(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_Relu(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_LeakyRelu(const pd_graph *g, const pd__node *n) { return 2 * out_numel(g, n); }
double pd__flops_Sigmoid(const pd_graph *g, const pd__node *n) { return 10 * out_numel(g, n); }
double pd__flops_Tanh(const pd_graph *g, const pd__node *n) { return 10 * out_numel(g, n); }
double pd__flops_Erf(const pd_graph *g, const pd__node *n) { return 10 * out_numel(g, n); }
double pd__flops_Gelu(const pd_graph *g, const pd__node *n) { return 14 * out_numel(g, n); }
double pd__flops_Clip(const pd_graph *g, const pd__node *n) { return 2 * out_numel(g, n); }

/* ---- Cast, Identity ---------------------------------------------------------------- */

/* Cast and CastLike convert between every numeric dtype, the low-bit ones
 * (float8, float4, int4, int2) included; round_mode names e8m0's rounding. */
static pd_status check_cast(pd_graph *g, const pd__node *n, const pd__tensor *x) {
    if (!pd__dtype_lowbit(x->dtype)) PD_TRY(check_kind(g, n, x, PD_EK_ANY));
    const char *rm = pd__attr_s(n, "round_mode", "up");
    if (strcmp(rm, "up") && strcmp(rm, "down") && strcmp(rm, "nearest"))
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "round_mode '%s' is not one of up, down, nearest", rm);
    return PD_OK;
}

pd_status pd__shape_Cast(pd_graph *g, pd__node *n) {
    pd__tensor *x, *y;
    PD_TRY(input(g, n, 0, &x));
    PD_TRY(output(g, n, &y));
    PD_TRY(check_cast(g, n, x));
    const pd__attr *to = pd__attr_get(n, "to");
    if (!to || to->type != PD_A_INT)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "attribute 'to' missing or not an int");
    pd_dtype t = (pd_dtype)to->i;
    if (to->i < 0 || to->i > 64 || (!pd__ekind(t) && !pd__dtype_lowbit(t)))
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "cast to dtype %lld is not supported", (long long)to->i);
    y->dtype = t;
    return pd__tensor_set_shape(g, y, x->ndim, x->shape);
}

double pd__flops_Cast(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }

/* CastLike(input, target_type): Y is input converted to target_type's dtype. */
pd_status pd__shape_CastLike(pd_graph *g, pd__node *n) {
    pd__tensor *x, *t, *y;
    PD_TRY(input(g, n, 0, &x));
    PD_TRY(output(g, n, &y));
    PD_TRY(check_cast(g, n, x));
    t = pd__in(g, n, 1);
    if (!t) return pd__node_err(g, n, PD_ERR_INVALID, "input 1 (target_type) is missing");
    if (!pd__dtype_lowbit(t->dtype)) PD_TRY(check_kind(g, n, t, PD_EK_ANY));
    y->dtype = t->dtype;
    return pd__tensor_set_shape(g, y, x->ndim, x->shape);
}

double pd__flops_CastLike(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }

/* BitCast: the same bytes read as dtype 'to', which must be as wide as the
 * input's (so the shape is unchanged). */
pd_status pd__shape_BitCast(pd_graph *g, pd__node *n) {
    pd__tensor *x, *y;
    PD_TRY(input(g, n, 0, &x));
    PD_TRY(output(g, n, &y));
    PD_TRY(check_kind(g, n, x, PD_EK_ANY));
    const pd__attr *to = pd__attr_get(n, "to");
    if (!to || to->type != PD_A_INT)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "attribute 'to' missing or not an int");
    pd_dtype t = (pd_dtype)to->i;
    if (to->i < 0 || to->i > 64 || !pd__ekind(t))
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "bit cast to dtype %lld is not supported", (long long)to->i);
    if (pd_dtype_size(t) != pd_dtype_size(x->dtype))
        return pd__node_err(g, n, PD_ERR_SHAPE, "bit cast from %s to %s: element sizes differ",
                            pd_dtype_name(x->dtype), pd_dtype_name(t));
    y->dtype = t;
    return pd__tensor_set_shape(g, y, x->ndim, x->shape);
}

double pd__flops_BitCast(const pd_graph *g, const pd__node *n) {
    (void)g;
    (void)n;
    return 0;
}

/* Identity moves bytes: every dtype, the low-bit ones too. */
pd_status pd__shape_Identity(pd_graph *g, pd__node *n) {
    pd__tensor *x, *y;
    PD_TRY(input(g, n, 0, &x));
    PD_TRY(output(g, n, &y));
    if (!pd__dtype_lowbit(x->dtype)) PD_TRY(check_kind(g, n, x, PD_EK_ANY));
    y->dtype = x->dtype;
    return pd__tensor_set_shape(g, y, x->ndim, x->shape);
}

double pd__flops_Identity(const pd_graph *g, const pd__node *n) {
    (void)g;
    (void)n;
    return 0;
}

/* ---- QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear ------------------------- */

/* The types quantized values come in: the integers, and the low-bit types
 * but e8m0 (a scale type, never a quantized one). */
static bool quant_int(pd_dtype t) {
    return t == PD_INT8 || t == PD_UINT8 || t == PD_INT16 || t == PD_UINT16 || t == PD_INT32 ||
           (pd__dtype_lowbit(t) && t != PD_FLOAT8E8M0);
}

/* Scale s (and zero point z) against x: one value (per tensor), a 1-D one of
 * x's dim `axis` (per axis), or with block_size, x's shape with that dim cut
 * into ceil(dim / block_size) blocks. The kernels read the same attributes. */
static pd_status quant_params(pd_graph *g, const pd__node *n, const pd__tensor *x, const pd__tensor *s,
                              const pd__tensor *z) {
    bool same = z && z->ndim == s->ndim && !memcmp(z->shape, s->shape, sizeof(int64_t) * (size_t)s->ndim);
    if (z && !same && (s->numel != 1 || z->numel != 1)) {
        char a[128], b[128];
        pd__format_shape(a, sizeof a, s->ndim, s->shape);
        pd__format_shape(b, sizeof b, z->ndim, z->shape);
        return pd__node_err(g, n, PD_ERR_SHAPE, "scale %s and zero point %s differ in shape", a, b);
    }
    int64_t bs = n->opset >= 21 ? pd__attr_i(n, "block_size", 0) : 0, axis = pd__attr_i(n, "axis", 1);
    if (s->numel == 1 && bs == 0) return PD_OK;
    if (axis < 0) axis += x->ndim;
    if (axis < 0 || axis >= x->ndim)
        return pd__node_err(g, n, PD_ERR_SHAPE, "axis %lld is out of range for rank %d",
                            (long long)pd__attr_i(n, "axis", 1), x->ndim);
    int64_t d = x->shape[axis];
    bool ok;
    if (bs < 0) {
        ok = false;
    } else if (bs == 0) {
        ok = s->ndim == 1 && s->shape[0] == d;
    } else {
        ok = s->ndim == x->ndim;
        for (int i = 0; ok && i < x->ndim; i++)
            ok = s->shape[i] == (i == axis ? (d + bs - 1) / bs : x->shape[i]);
    }
    if (!ok) {
        char a[128], b[128];
        pd__format_shape(a, sizeof a, x->ndim, x->shape);
        pd__format_shape(b, sizeof b, s->ndim, s->shape);
        return pd__node_err(g, n, PD_ERR_SHAPE, "scale %s does not fit x %s with axis %lld and block_size %lld", b, a,
                            (long long)axis, (long long)bs);
    }
    return PD_OK;
}

/* y = saturate(round_half_even(x / scale) + zero_point), in the zero point's
 * type, else output_dtype's, else uint8. */
pd_status pd__shape_QuantizeLinear(pd_graph *g, pd__node *n) {
    pd__tensor *x, *s, *y, *z = pd__in(g, n, 2);
    PD_TRY(input(g, n, 0, &x));
    PD_TRY(input(g, n, 1, &s));
    PD_TRY(output(g, n, &y));
    if (!(pd__ekind(x->dtype) & PD_EK_FLOAT) && x->dtype != PD_INT32)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "x '%s' has dtype %s (float types and int32 are supported)",
                            x->name, pd_dtype_name(x->dtype));
    PD_TRY(check_kind(g, n, s, PD_EK_FLOAT));
    if (z && z->ndim < 0) return pd__node_err(g, n, PD_ERR_SHAPE, "zero point '%s' has no known shape", z->name);
    int64_t od = n->opset >= 21 ? pd__attr_i(n, "output_dtype", 0) : 0;
    pd_dtype t = z ? z->dtype : od ? (pd_dtype)od : PD_UINT8;
    if (!quant_int(t) || t == PD_INT32)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED,
                            "quantizing to %s is not supported (8- and 16-bit integers, int4, uint4, int2, uint2, "
                            "float8 but e8m0, and float4e2m1 are)",
                            od && !z && (od < 0 || od > 64) ? "an unknown dtype" : pd_dtype_name(t));
    if (z && od && od != (int64_t)z->dtype)
        return pd__node_err(g, n, PD_ERR_SHAPE, "output_dtype %lld differs from the zero point's %s", (long long)od,
                            pd_dtype_name(z->dtype));
    PD_TRY(quant_params(g, n, x, s, z));
    y->dtype = t;
    return pd__tensor_set_shape(g, y, x->ndim, x->shape);
}

double pd__flops_QuantizeLinear(const pd_graph *g, const pd__node *n) { return 3 * out_numel(g, n); }

/* y = (x - zero_point) * scale, in the scale's type (or output_dtype's). */
pd_status pd__shape_DequantizeLinear(pd_graph *g, pd__node *n) {
    pd__tensor *x, *s, *y, *z = pd__in(g, n, 2);
    PD_TRY(input(g, n, 0, &x));
    PD_TRY(input(g, n, 1, &s));
    PD_TRY(output(g, n, &y));
    if (!quant_int(x->dtype))
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED,
                            "dequantizing %s is not supported (8-, 16- and 32-bit integers, int4, uint4, int2, "
                            "uint2, float8 but e8m0, and float4e2m1 are)",
                            pd_dtype_name(x->dtype));
    PD_TRY(check_kind(g, n, s, PD_EK_FLOAT));
    if (z) {
        if (z->ndim < 0) return pd__node_err(g, n, PD_ERR_SHAPE, "zero point '%s' has no known shape", z->name);
        PD_TRY(check_same_dtype(g, n, x, z));
    }
    int64_t od = n->opset >= 23 ? pd__attr_i(n, "output_dtype", 0) : 0;
    pd_dtype t = od ? (pd_dtype)od : s->dtype;
    if (od && (od < 0 || od > 64 || !(pd__ekind(t) & PD_EK_FLOAT)))
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "output_dtype %lld is not a supported float type", (long long)od);
    PD_TRY(quant_params(g, n, x, s, z));
    y->dtype = t;
    return pd__tensor_set_shape(g, y, x->ndim, x->shape);
}

double pd__flops_DequantizeLinear(const pd_graph *g, const pd__node *n) { return 2 * out_numel(g, n); }

/* y (uint8, x's shape), y_scale and y_zero_point (scalars) from x's range widened to hold 0. */
pd_status pd__shape_DynamicQuantizeLinear(pd_graph *g, pd__node *n) {
    pd__tensor *x, *y;
    PD_TRY(input(g, n, 0, &x));
    PD_TRY(output(g, n, &y));
    if (x->dtype != PD_FLOAT)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "x '%s' has dtype %s (float is supported)", x->name,
                            pd_dtype_name(x->dtype));
    y->dtype = PD_UINT8;
    PD_TRY(pd__tensor_set_shape(g, y, x->ndim, x->shape));
    for (int i = 1; i < 3; i++) {
        pd__tensor *o = pd__out(g, n, i);
        if (!o) continue;
        o->dtype = i == 1 ? PD_FLOAT : PD_UINT8;
        PD_TRY(pd__tensor_set_shape(g, o, 0, NULL));
    }
    return PD_OK;
}

double pd__flops_DynamicQuantizeLinear(const pd_graph *g, const pd__node *n) { return 5 * out_numel(g, n); }

/* ---- reductions ------------------------------------------------------------------ */

/* x of a class in `kinds`; y has x's dtype. */
static pd_status shape_reduce_of(pd_graph *g, pd__node *n, unsigned kinds) {
    pd__tensor *x, *y;
    PD_TRY(input(g, n, 0, &x));
    PD_TRY(output(g, n, &y));
    PD_TRY(check_kind(g, n, x, kinds));
    pd__tensor *at = pd__reduce_axes_input(n) ? pd__in(g, n, 1) : NULL;
    pd_tensor av = {PD_UNDEFINED, 0, {0}, NULL};
    if (at) {
        if (at->ndim < 0) return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "axes must be constant");
        av = pd__view(at);
        if (!at->data || (at->kind != PD_T_INIT && at->kind != PD_T_CONST)) {
            if (at->numel != 0) return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "axes must be constant");
            av.data = NULL;
        }
    }
    bool mask[PD_MAX_DIMS], noop;
    pd_status st = pd__reduce_mask(n, x->ndim, at ? &av : NULL, mask, &noop);
    if (st == PD_ERR_UNSUPPORTED) return pd__node_err(g, n, st, "axes must be constant");
    if (st != PD_OK) {
        char s[128];
        pd__format_shape(s, sizeof s, x->ndim, x->shape);
        return pd__node_err(g, n, st, "bad or repeated axes for input of shape %s", s);
    }
    bool keep = pd__attr_i(n, "keepdims", 1) != 0;
    int nd = 0;
    int64_t shape[PD_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) {
        if (!mask[d]) shape[nd++] = x->shape[d];
        else if (keep) shape[nd++] = 1;
    }
    y->dtype = x->dtype;
    return pd__tensor_set_shape(g, y, nd, shape);
}

static pd_status shape_reduce(pd_graph *g, pd__node *n) { return shape_reduce_of(g, n, PD_EK_NUM); }

pd_status pd__shape_ReduceMean(pd_graph *g, pd__node *n) { return shape_reduce(g, n); }
pd_status pd__shape_ReduceSum(pd_graph *g, pd__node *n) { return shape_reduce(g, n); }

double pd__flops_ReduceMean(const pd_graph *g, const pd__node *n) { return in_numel(g, n, 0) + out_numel(g, n); }
double pd__flops_ReduceSum(const pd_graph *g, const pd__node *n) { return in_numel(g, n, 0); }

/* ReduceMax, ReduceMin: bool too from opset 20 (any / all). */
pd_status pd__shape_ReduceMax(pd_graph *g, pd__node *n) {
    return shape_reduce_of(g, n, n->opset >= 20 ? PD_EK_ANY : PD_EK_NUM);
}
pd_status pd__shape_ReduceMin(pd_graph *g, pd__node *n) {
    return shape_reduce_of(g, n, n->opset >= 20 ? PD_EK_ANY : PD_EK_NUM);
}
pd_status pd__shape_ReduceProd(pd_graph *g, pd__node *n) { return shape_reduce(g, n); }
pd_status pd__shape_ReduceL1(pd_graph *g, pd__node *n) { return shape_reduce(g, n); }
pd_status pd__shape_ReduceL2(pd_graph *g, pd__node *n) { return shape_reduce(g, n); }
pd_status pd__shape_ReduceSumSquare(pd_graph *g, pd__node *n) { return shape_reduce(g, n); }
pd_status pd__shape_ReduceLogSum(pd_graph *g, pd__node *n) { return shape_reduce(g, n); }
pd_status pd__shape_ReduceLogSumExp(pd_graph *g, pd__node *n) { return shape_reduce(g, n); }

double pd__flops_ReduceMax(const pd_graph *g, const pd__node *n) { return in_numel(g, n, 0); }
double pd__flops_ReduceMin(const pd_graph *g, const pd__node *n) { return in_numel(g, n, 0); }
double pd__flops_ReduceProd(const pd_graph *g, const pd__node *n) { return in_numel(g, n, 0); }
double pd__flops_ReduceL1(const pd_graph *g, const pd__node *n) { return 2 * in_numel(g, n, 0); }
double pd__flops_ReduceL2(const pd_graph *g, const pd__node *n) { return 2 * in_numel(g, n, 0) + 4 * out_numel(g, n); }
double pd__flops_ReduceSumSquare(const pd_graph *g, const pd__node *n) { return 2 * in_numel(g, n, 0); }
double pd__flops_ReduceLogSum(const pd_graph *g, const pd__node *n) { return in_numel(g, n, 0) + 8 * out_numel(g, n); }
double pd__flops_ReduceLogSumExp(const pd_graph *g, const pd__node *n) {
    return 10 * in_numel(g, n, 0) + 8 * out_numel(g, n);
}

/* ---- the optimizer update rules of ai.onnx.preview.training -------------------- */

/* Adagrad, Adam and Momentum: R (float scalar), T (int64 scalar), then n
 * tensors X, n gradients G and n of each state (Adagrad H; Adam V, H;
 * Momentum V), float or double, each the shape of its X; the outputs are
 * the new X and states, grouped the same way. Element-wise updates, not
 * differentiable: a graph runs them as its own optimizer step. */
static pd_status shape_optim(pd_graph *g, pd__node *n, int groups) {
    pd__tensor *r, *t;
    PD_TRY(input(g, n, 0, &r));
    PD_TRY(input(g, n, 1, &t));
    if ((r->dtype != PD_FLOAT && r->dtype != PD_DOUBLE) || r->numel != 1 || t->dtype != PD_INT64 || t->numel != 1)
        return pd__node_err(g, n, PD_ERR_SHAPE, "R (%s) must be a float scalar and T (%s) an int64 scalar",
                            pd_dtype_name(r->dtype), pd_dtype_name(t->dtype));
    int k = (n->nin - 2) / groups;
    if (k < 1 || n->nin != 2 + k * groups || n->nout != k * (groups - 1))
        return pd__node_err(g, n, PD_ERR_INVALID, "%d inputs and %d outputs: expected 2 + %d n and %d n", n->nin,
                            n->nout, groups, groups - 1);
    for (int i = 0; i < k; i++) {
        pd__tensor *x;
        PD_TRY(input(g, n, 2 + i, &x));
        if (x->dtype != PD_FLOAT && x->dtype != PD_DOUBLE)
            return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "X '%s' has dtype %s (float and double are supported)",
                                x->name, pd_dtype_name(x->dtype));
        for (int j = 1; j < groups; j++) {
            pd__tensor *y;
            PD_TRY(input(g, n, 2 + j * k + i, &y));
            if (y->dtype != x->dtype || y->ndim != x->ndim || memcmp(y->shape, x->shape, sizeof(int64_t) * (size_t)x->ndim))
                return pd__node_err(g, n, PD_ERR_SHAPE, "'%s' (%s) does not match X '%s' (%s) in dtype or shape",
                                    y->name, pd_dtype_name(y->dtype), x->name, pd_dtype_name(x->dtype));
        }
        for (int j = 0; j < groups - 1; j++) {
            pd__tensor *o = pd__out(g, n, j * k + i);
            if (!o) continue;
            o->dtype = x->dtype;
            PD_TRY(pd__tensor_set_shape(g, o, x->ndim, x->shape));
        }
    }
    if (n->op == PD_OP_MOMENTUM) {
        const char *mode = pd__attr_s(n, "mode", "");
        if (strcmp(mode, "standard") != 0 && strcmp(mode, "nesterov") != 0)
            return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "mode '%s' (standard and nesterov are defined)", mode);
    }
    return PD_OK;
}

static double optim_flops(const pd_graph *g, const pd__node *n, int groups, double per) {
    double s = 0;
    for (int i = 2; i < 2 + (n->nin - 2) / groups; i++) s += in_numel(g, n, i);
    return per * s;
}

pd_status pd__shape_Adagrad(pd_graph *g, pd__node *n) { return shape_optim(g, n, 3); }
pd_status pd__shape_Adam(pd_graph *g, pd__node *n) { return shape_optim(g, n, 4); }
pd_status pd__shape_Momentum(pd_graph *g, pd__node *n) { return shape_optim(g, n, 3); }
double pd__flops_Adagrad(const pd_graph *g, const pd__node *n) { return optim_flops(g, n, 3, 9); }
double pd__flops_Adam(const pd_graph *g, const pd__node *n) { return optim_flops(g, n, 4, 14); }
double pd__flops_Momentum(const pd_graph *g, const pd__node *n) { return optim_flops(g, n, 3, 7); }

/* ---- ai.onnx.ml ------------------------------------------------------------------ */

/* Binarizer: 1 where X > threshold, else 0, in X's dtype (float, double,
 * int32, int64). Its gradient is zero almost everywhere: not differentiable. */
pd_status pd__shape_Binarizer(pd_graph *g, pd__node *n) {
    pd__tensor *x, *y;
    PD_TRY(input(g, n, 0, &x));
    PD_TRY(output(g, n, &y));
    if (x->dtype != PD_FLOAT && x->dtype != PD_DOUBLE && x->dtype != PD_INT32 && x->dtype != PD_INT64)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "X has dtype %s (float, double, int32 and int64 are supported)",
                            pd_dtype_name(x->dtype));
    y->dtype = x->dtype;
    return pd__tensor_set_shape(g, y, x->ndim, x->shape);
}

double pd__flops_Binarizer(const pd_graph *g, const pd__node *n) { return in_numel(g, n, 0); }
