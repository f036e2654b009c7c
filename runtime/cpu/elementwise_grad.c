/* elementwise_grad.c - CPU backward kernels of the element-wise ops (Add ...
 * Where, Cast, Identity) and of ReduceSum / ReduceMean; the forwards are in
 * elementwise.c, whose broadcast iterator, thread splitter, conversions and
 * reduction kernel (elementwise_common.h) these reuse.
 *
 * How it is built:
 * - A gradient row computes o (+)= EXPR(g, u, v) along a run of output
 *   elements: g from the output gradient, u and v from two of the forward's
 *   tensors (an input broadcast to the output, stride 0 or 1, or the
 *   output). It is written once as an expression, per dtype, and run by the
 *   forward's broadcast iterator over the output's shape.
 * - An input of the output's shape gets its row added straight into its
 *   gradient (Add's and Identity's into an axpy). A broadcast input's
 *   gradient is the row (stored in scratch) summed over the dims the input
 *   is broadcast along, by ReduceSum's kernel adding into din: a bias
 *   gradient ([N, C] into [C]) runs vectorized and split over C between
 *   threads. Add, Sub and Sum skip the row: dout itself is summed.
 * - Gradients flow only between float tensors; an integer input or output
 *   gets nothing added. float16 / bfloat16 (and a Pow exponent of another
 *   dtype) compute in float as the forward does: tensors are converted into
 *   scratch, and a gradient of another dtype is computed in scratch and
 *   then added, converted (Cast's conversion, rounding once).
 * - Formulas follow PyTorch's autograd: Relu's gradient is 0 at 0, Clip
 *   passes it where min <= x <= max, Sigmoid, Tanh, Exp, Sqrt and
 *   Reciprocal use the output, Pow's are masked where they would be 0 * inf.
 * - Besides dout, a backward reads only (so a session may free the rest):
 *   Mul and Div the other input (Div's B also A), Pow both, Where the
 *   condition, Clip its bounds, Reduce* the axes; y for Sqrt, Exp,
 *   Reciprocal, Relu, Sigmoid, Tanh; x for Log, LeakyRelu, Erf, Gelu, Clip;
 *   nothing else (Add, Sub, Sum, Neg, Cast, Identity). Tested.
 */
#include "elementwise_common.h"

/* What a gradient row reads besides its streams. */
typedef struct pd__gctx {
    bool acc;      /* o += expr (else o = expr) */
    bool inv;      /* Where: the gradient of Y, which flows where the condition is false */
    double alpha;  /* LeakyRelu's slope; the scale of a broadcast dout (ReduceMean) */
    double lo, hi; /* Clip's bounds */
} pd__gctx;

static int64_t numel(const pd_tensor *t) { return pd_tensor_numel(t); }
static bool is_float(pd_dtype t) { return pd__ekind(t) == PD_EK_FLOAT; }

/* ---- rows ------------------------------------------------------------------------ */

/* Binary rows: g from a (the output gradient: contiguous), u from b and v
 * from c, each contiguous or one broadcast value; the four stride cases are
 * separate loops so that each vectorizes. */
#define PD__GRAD_LOOPS(OP, T, EXPR)                       \
    if (sb && sc) {                                       \
        for (int64_t i = 0; i < n; i++) {                 \
            const T g = gp[i], u = up[i], v = vp[i];      \
            (void)u;                                      \
            (void)v;                                      \
            o[i] OP(T)(EXPR);                             \
        }                                                 \
    } else if (sb) {                                      \
        const T v = vp[0];                                \
        (void)v;                                          \
        for (int64_t i = 0; i < n; i++) {                 \
            const T g = gp[i], u = up[i];                 \
            (void)u;                                      \
            o[i] OP(T)(EXPR);                             \
        }                                                 \
    } else if (sc) {                                      \
        const T u = up[0];                                \
        (void)u;                                          \
        for (int64_t i = 0; i < n; i++) {                 \
            const T g = gp[i], v = vp[i];                 \
            (void)v;                                      \
            o[i] OP(T)(EXPR);                             \
        }                                                 \
    } else {                                              \
        const T u = up[0], v = vp[0];                     \
        (void)u;                                          \
        (void)v;                                          \
        for (int64_t i = 0; i < n; i++) {                 \
            const T g = gp[i];                            \
            o[i] OP(T)(EXPR);                             \
        }                                                 \
    }

#define PD__GRAD_ROW(name, T, EXPR)                                            \
    PD__VEC static void name(PD__ROW_ARGS) {                                         \
        T *o = (T *)o_;                                                        \
        const T *gp = (const T *)a_, *up = (const T *)b_, *vp = (const T *)c_; \
        const pd__gctx *ctx = ctx_;                                            \
        (void)sa;                                                              \
        if (ctx->acc) {                                                        \
            PD__GRAD_LOOPS(+=, T, EXPR)                                        \
        } else {                                                               \
            PD__GRAD_LOOPS(=, T, EXPR)                                         \
        }                                                                      \
    }

/* Unary rows: g, u = x and v = y all contiguous (shaped as the output);
 * PRE declares what EXPR needs from ctx. */
#define PD__GRAD_UROW(name, T, PRE, EXPR)                                      \
    PD__VEC static void name(PD__ROW_ARGS) {                                         \
        T *o = (T *)o_;                                                        \
        const T *gp = (const T *)a_, *up = (const T *)b_, *vp = (const T *)c_; \
        const pd__gctx *ctx = ctx_;                                            \
        (void)sa;                                                              \
        (void)sb;                                                              \
        (void)sc;                                                              \
        PRE;                                                                   \
        if (ctx->acc) {                                                        \
            for (int64_t i = 0; i < n; i++) {                                  \
                const T g = gp[i], u = up[i], v = vp[i];                       \
                (void)u;                                                       \
                (void)v;                                                       \
                o[i] += (T)(EXPR);                                             \
            }                                                                  \
        } else {                                                               \
            for (int64_t i = 0; i < n; i++) {                                  \
                const T g = gp[i], u = up[i], v = vp[i];                       \
                (void)u;                                                       \
                (void)v;                                                       \
                o[i] = (T)(EXPR);                                              \
            }                                                                  \
        }                                                                      \
    }

#define PD__GTAB(name) {[PD_FLOAT] = name##_f32, [PD_DOUBLE] = name##_f64}

static pd__row_fn row_of(const pd__row_fn *tab, pd_dtype w) { return (unsigned)w < PD__NDT ? tab[w] : NULL; }

/* Binary: Mul (u = the other input), Div (of A: u = B; of B: u = A, v = B),
 * Pow (u = base, v = exponent; the base's is 0 where the exponent is 0, the
 * exponent's 0 where the base is 0 and the exponent >= 0, as PyTorch). */
#define PD__DEF_BIN_GRADS(_, dt, T, sfx, W, M, MIN, MAX)                                           \
    PD__GRAD_ROW(gmul_##sfx, T, g * u)                                                              \
    PD__GRAD_ROW(gdiva_##sfx, T, g / u)                                                             \
    PD__GRAD_ROW(gdivb_##sfx, T, -g * ((u / v) / v))                                                \
    PD__GRAD_ROW(gpowa_##sfx, T, pd__sel_##sfx(v == 0, (T)0, g * v * pow##M(u, v - (T)1)))        \
    PD__GRAD_ROW(gpowb_##sfx, T, pd__sel_##sfx(u == 0 && v >= 0, (T)0, g * pow##M(u, v) * log##M(u)))
PD__FLOATS(PD__DEF_BIN_GRADS, _)
static const pd__row_fn gmul_rows[PD__NDT] = PD__GTAB(gmul);
static const pd__row_fn gdiva_rows[PD__NDT] = PD__GTAB(gdiva);
static const pd__row_fn gdivb_rows[PD__NDT] = PD__GTAB(gdivb);
static const pd__row_fn gpowa_rows[PD__NDT] = PD__GTAB(gpowa);
static const pd__row_fn gpowb_rows[PD__NDT] = PD__GTAB(gpowb);

/* Gelu's derivatives. Exact form: Phi(x) + x phi(x). In float, Phi comes
 * from erfc by Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7, i.e. about
 * an ulp of Phi), whose exp(-x^2/2) is phi's too: one branch-free exp and
 * the loop vectorizes (erff is a scalar libm call, 5x the rest of the
 * loop); below 0 Phi = erfc/2 is computed without cancellation. In double,
 * libm's erf. Tanh form, with t = tanh(k (x + 0.044715 x^3)), k =
 * sqrt(2/pi): 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 * 0.044715 x^2), as
 * PyTorch. */
PD__INLINE float gelu_d_f32(float x) {
    float z = fabsf(x) * 0.70710678118654752440f, t = 1.0f / (1.0f + 0.3275911f * z);
    float p = t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
    float e = pd__expf(-0.5f * x * x), tail = 0.5f * p * e; /* tail = P(N > |x|) = erfc(z) / 2 */
    return pd__self(x < 0, tail, 1.0f - tail) + x * 0.39894228040143267794f * e;
}
PD__INLINE double gelu_d_f64(double x) {
    return 0.5 * (1 + erf(x * 0.70710678118654752440)) + x * 0.39894228040143267794 * exp(-0.5 * x * x);
}
#define PD__DEF_GELUT_D(_, dt, T, sfx, W, M, MIN, MAX)                                                 \
    PD__INLINE T gelut_d_##sfx(T x) {                                                                  \
        const T k = (T)0.79788456080286535588, c = (T)0.044715;                                        \
        T t = pd__tanh_##sfx(k * (x + c * x * x * x));                                                 \
        return (T)0.5 * ((T)1 + t) + (T)0.5 * x * ((T)1 - t * t) * k * ((T)1 + (T)3 * c * x * x);     \
    }
PD__FLOATS(PD__DEF_GELUT_D, _)

/* Unary, u = x and v = y. */
#define PD__CLIP_GPRE(T)     \
    const T lo = (T)ctx->lo; \
    const T hi = (T)ctx->hi
#define PD__DEF_UN_GRADS(_, dt, T, sfx, W, M, MIN, MAX)                                          \
    PD__GRAD_UROW(gsqrt_##sfx, T, , g / ((T)2 * v))                                             \
    PD__GRAD_UROW(gexp_##sfx, T, , g * v)                                                       \
    PD__GRAD_UROW(glog_##sfx, T, , g / u)                                                       \
    PD__GRAD_UROW(gneg_##sfx, T, , -g)                                                          \
    PD__GRAD_UROW(grecip_##sfx, T, , -g * (v * v))                                              \
    PD__GRAD_UROW(grelu_##sfx, T, , pd__sel_##sfx(v > 0, g, (T)0))                              \
    PD__GRAD_UROW(glrelu_##sfx, T, const T al = (T)ctx->alpha, pd__sel_##sfx(u > 0, g, g * al)) \
    PD__GRAD_UROW(gsigmoid_##sfx, T, , g * ((T)1 - v) * v)                                      \
    PD__GRAD_UROW(gtanh_##sfx, T, , g * ((T)1 - v * v))                                         \
    PD__GRAD_UROW(gerf_##sfx, T, , g * (T)1.12837916709551257390 * pd__exp_##sfx(-u * u))       \
    PD__GRAD_UROW(ggelu_##sfx, T, , g * gelu_d_##sfx(u))                                        \
    PD__GRAD_UROW(ggelut_##sfx, T, , g * gelut_d_##sfx(u))                                      \
    PD__GRAD_UROW(gclip_##sfx, T, PD__CLIP_GPRE(T), pd__sel_##sfx(u >= lo && u <= hi, g, (T)0))
PD__FLOATS(PD__DEF_UN_GRADS, _)
static const pd__row_fn gsqrt_rows[PD__NDT] = PD__GTAB(gsqrt);
static const pd__row_fn gexp_rows[PD__NDT] = PD__GTAB(gexp);
static const pd__row_fn glog_rows[PD__NDT] = PD__GTAB(glog);
static const pd__row_fn gneg_rows[PD__NDT] = PD__GTAB(gneg);
static const pd__row_fn grecip_rows[PD__NDT] = PD__GTAB(grecip);
static const pd__row_fn grelu_rows[PD__NDT] = PD__GTAB(grelu);
static const pd__row_fn glrelu_rows[PD__NDT] = PD__GTAB(glrelu);
static const pd__row_fn gsigmoid_rows[PD__NDT] = PD__GTAB(gsigmoid);
static const pd__row_fn gtanh_rows[PD__NDT] = PD__GTAB(gtanh);
static const pd__row_fn gerf_rows[PD__NDT] = PD__GTAB(gerf);
static const pd__row_fn ggelu_rows[PD__NDT] = PD__GTAB(ggelu);
static const pd__row_fn ggelut_rows[PD__NDT] = PD__GTAB(ggelut);
static const pd__row_fn gclip_rows[PD__NDT] = PD__GTAB(gclip);

/* Where: g (contiguous) where the condition (b, bool) is true (false for
 * Y's gradient, ctx->inv), 0 elsewhere. */
#define PD__DEF_WHERE_GRAD(_, dt, T, sfx, W, M, MIN, MAX)                                        \
    static void gwhere_##sfx(PD__ROW_ARGS) {                                                     \
        T *o = (T *)o_;                                                                          \
        const T *gp = (const T *)a_;                                                             \
        const uint8_t *cp = (const uint8_t *)b_;                                                 \
        const pd__gctx *ctx = ctx_;                                                              \
        const int keep = !ctx->inv;                                                              \
        (void)sa;                                                                                \
        (void)c_;                                                                                \
        (void)sc;                                                                                \
        if (sb && ctx->acc) {                                                                    \
            for (int64_t i = 0; i < n; i++) o[i] += pd__sel_##sfx((cp[i] != 0) == keep, gp[i], (T)0); \
        } else if (sb) {                                                                         \
            for (int64_t i = 0; i < n; i++) o[i] = pd__sel_##sfx((cp[i] != 0) == keep, gp[i], (T)0); \
        } else if ((cp[0] != 0) == keep) {                                                       \
            for (int64_t i = 0; i < n; i++) o[i] = ctx->acc ? o[i] + gp[i] : gp[i];              \
        } else if (!ctx->acc) {                                                                  \
            for (int64_t i = 0; i < n; i++) o[i] = 0;                                            \
        }                                                                                        \
    }
PD__FLOATS(PD__DEF_WHERE_GRAD, _)
static const pd__row_fn gwhere_rows[PD__NDT] = PD__GTAB(gwhere);

/* ReduceSum / ReduceMean: o (+)= alpha * g, g (a) broadcast back over the
 * reduced dims (stride 0 or 1). */
#define PD__DEF_SCALE_GRAD(_, dt, T, sfx, W, M, MIN, MAX)                     \
    static void gscale_##sfx(PD__ROW_ARGS) {                                  \
        T *o = (T *)o_;                                                       \
        const T *gp = (const T *)a_;                                          \
        const pd__gctx *ctx = ctx_;                                           \
        const T al = (T)ctx->alpha;                                           \
        (void)b_;                                                             \
        (void)sb;                                                             \
        (void)c_;                                                             \
        (void)sc;                                                             \
        if (sa && ctx->acc) {                                                 \
            for (int64_t i = 0; i < n; i++) o[i] += al * gp[i];               \
        } else if (sa) {                                                      \
            for (int64_t i = 0; i < n; i++) o[i] = al * gp[i];                \
        } else {                                                              \
            const T v = al * gp[0];                                           \
            if (ctx->acc)                                                     \
                for (int64_t i = 0; i < n; i++) o[i] += v;                    \
            else                                                              \
                for (int64_t i = 0; i < n; i++) o[i] = v;                     \
        }                                                                     \
    }
PD__FLOATS(PD__DEF_SCALE_GRAD, _)
static const pd__row_fn gscale_rows[PD__NDT] = PD__GTAB(gscale);

/* ---- scratch and staging ----------------------------------------------------------- */

static size_t wbytes(int64_t n, pd_dtype w) { return pd__align64((size_t)(n > 0 ? n : 0) * pd_dtype_size(w)); }

/* Pieces of one scratch buffer (kernels get one: asking again may move it). */
typedef struct pd__arena {
    char *p;
    size_t off;
} pd__arena;

static pd_status arena_init(pd__exec *x, pd__arena *a, size_t need) {
    a->p = NULL;
    a->off = 0;
    if (!need) return PD_OK;
    a->p = pd__scratch(x, need);
    return a->p ? PD_OK : PD_ERR_NOMEM;
}

static void *arena_take(pd__arena *a, int64_t n, pd_dtype w) {
    void *p = a->p + a->off;
    a->off += wbytes(n, w);
    return p;
}

/* Bytes to hold t as dtype w (0 when it is w already). */
static size_t stage_bytes(const pd_tensor *t, pd_dtype w) { return t->dtype == w ? 0 : wbytes(numel(t), w); }

/* t as dtype w: itself, or a converted copy in the arena. */
static pd_tensor stage(const pd__exec *x, pd__arena *a, const pd_tensor *t, pd_dtype w) {
    pd_tensor v = *t;
    if (t->dtype == w) return v;
    v.dtype = w;
    v.data = arena_take(a, numel(t), w);
    pd__ew_convert(x, w, v.data, t->dtype, t->data, numel(t));
    return v;
}

/* ---- one input's gradient ---------------------------------------------------------- */

/* What a term needs beyond staging: scratch of the output's size for the
 * row's values (a row whose result cannot go straight into din) and of
 * the input's size (a broadcast input whose din is not of dtype w). */
static bool needs_tmp_o(bool row, int64_t on, int64_t in_n, pd_dtype dt, pd_dtype w) {
    return row && !(in_n == on && dt == w);
}
static bool needs_tmp_i(int64_t on, int64_t in_n, pd_dtype dt, pd_dtype w) { return in_n != on && dt != w; }

/* din += alpha * (the term, of `o`'s shape, summed over the dims the input
 * (rank ind, dims ish, right-aligned under o's) is broadcast along). The
 * term is fn over the streams s[0..ns) (views in w broadcast to o's shape,
 * s[0] the output gradient), or s[0] itself when fn is NULL. tmp_o, tmp_i:
 * scratch as needs_tmp_o / needs_tmp_i say. fresh (pd__exec.fresh): din =
 * rather than +=; written in place where the term is din's whole, zeroed
 * first otherwise. */
static pd_status add_term(const pd__exec *x, pd_dtype w, const pd_tensor *o, int ind, const int64_t *ish,
                          pd_tensor *din, pd__row_fn fn, pd__gctx ctx, int ns, const pd_tensor *s, int64_t cost,
                          double alpha, void *tmp_o, void *tmp_i, bool fresh) {
    int64_t on = numel(o), in_n = pd__shape_numel(ind, ish);
    bool full = in_n == on, direct = din->dtype == w;
    if (fresh && !(full && direct && (fn || alpha == 1) && on > 0)) {
        memset(din->data, 0, (size_t)(in_n > 0 ? in_n : 0) * pd_dtype_size(din->dtype));
        fresh = false;
    }
    if (on <= 0 || in_n <= 0) return PD_OK; /* an empty output adds nothing */
    pd_tensor ov = *o;
    ov.dtype = w;
    if (fn && full && direct) { /* straight into din */
        ctx.acc = !fresh;
        ov.data = din->data;
        return pd__ew_bcast_run(x, fn, &ctx, &ov, ns, s, cost);
    }
    const void *term = s[0].data;
    if (fresh) { /* din = the output gradient itself */
        memcpy(din->data, term, (size_t)on * pd_dtype_size(w));
        return PD_OK;
    }
    if (fn) {
        ctx.acc = false;
        ov.data = tmp_o;
        PD_TRY(pd__ew_bcast_run(x, fn, &ctx, &ov, ns, s, cost));
        term = tmp_o;
    }
    if (full && !direct) {
        pd__ew_convert_add(x, din->dtype, din->data, w, term, on, alpha);
        return PD_OK;
    }
    bool mask[PD_MAX_DIMS];
    for (int d = 0; d < o->ndim; d++) {
        int di = d - (o->ndim - ind);
        mask[d] = di < 0 || ish[di] == 1;
    }
    if (direct) {
        pd__ew_reduce_add(x, w, o->ndim, o->shape, mask, term, din->data, alpha);
    } else {
        memset(tmp_i, 0, (size_t)in_n * pd_dtype_size(w));
        pd__ew_reduce_add(x, w, o->ndim, o->shape, mask, term, tmp_i, 1.0);
        pd__ew_convert_add(x, din->dtype, din->data, w, tmp_i, in_n, alpha);
    }
    return PD_OK;
}

/* Whether input i's gradient is wanted and can flow (a float tensor). */
static bool wanted(pd_tensor *const *din, int i, const pd_tensor *in) {
    return din && din[i] && in && is_float(din[i]->dtype) && is_float(in->dtype);
}

static pd_status check_size(const pd_tensor *a, const pd_tensor *b, const char *what) {
    if (numel(a) == numel(b)) return PD_OK;
    return pd__err(PD_ERR_SHAPE, "%s has %lld elements, expected %lld", what, (long long)numel(a),
                   (long long)numel(b));
}

/* ---- binary ops ------------------------------------------------------------------ */

/* A binary op's gradient, per input: its row (NULL: the term is dout
 * itself), the inputs feeding u and v (0: A, 1: B, -1: none) and a scale. */
typedef struct pd__bspec {
    const pd__row_fn *row[2];
    int u[2], v[2];
    double alpha[2];
    int64_t cost;
} pd__bspec;

static pd_status binary_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                            pd_tensor *const *dout, pd_tensor *const *din, const pd__bspec *sp) {
    const pd_tensor *y = out[0];
    if (!dout || !dout[0] || !is_float(y->dtype)) return PD_OK;
    bool want[2] = {wanted(din, 0, in[0]), wanted(din, 1, in[1])};
    if (!want[0] && !want[1]) return PD_OK;
    pd_tensor ab[2] = {*in[0], *in[1]}; /* B in A's dims under opset < 7's broadcast attribute */
    if (!pd__legacy_bshape(n, ab[0].ndim, &ab[1].ndim, ab[1].shape))
        return pd__err(PD_ERR_SHAPE, "input B does not fit in A at the broadcast axis");
    pd_dtype w = pd__float_work(y->dtype);
    int64_t on = numel(y);
    PD_TRY(check_size(dout[0], y, "the output gradient"));
    bool use[2] = {false, false}, tmp_o = false;
    size_t tmp_i = 0;
    for (int i = 0; i < 2; i++) {
        if (!want[i]) continue;
        PD_TRY(check_size(din[i], in[i], "an input gradient"));
        if (sp->row[i] && sp->u[i] >= 0) use[sp->u[i]] = true;
        if (sp->row[i] && sp->v[i] >= 0) use[sp->v[i]] = true;
        tmp_o |= needs_tmp_o(sp->row[i] != NULL, on, numel(in[i]), din[i]->dtype, w);
        if (needs_tmp_i(on, numel(in[i]), din[i]->dtype, w) && wbytes(numel(in[i]), w) > tmp_i)
            tmp_i = wbytes(numel(in[i]), w);
    }
    size_t need = stage_bytes(dout[0], w) + (tmp_o ? wbytes(on, w) : 0) + tmp_i;
    for (int k = 0; k < 2; k++) need += use[k] ? stage_bytes(&ab[k], w) : 0;
    pd__arena ar;
    PD_TRY(arena_init(x, &ar, need));
    pd_tensor g = stage(x, &ar, dout[0], w), v[2];
    g.ndim = y->ndim;
    memcpy(g.shape, y->shape, sizeof g.shape);
    for (int k = 0; k < 2; k++)
        if (use[k]) v[k] = stage(x, &ar, &ab[k], w);
    void *to = tmp_o ? arena_take(&ar, on, w) : NULL, *ti = tmp_i ? ar.p + ar.off : NULL;
    pd__gctx ctx;
    memset(&ctx, 0, sizeof ctx);
    for (int i = 0; i < 2; i++) {
        if (!want[i]) continue;
        pd_tensor s[3] = {g, g, g}; /* unused streams read g: valid memory of the output's shape */
        pd__row_fn fn = NULL;
        if (sp->row[i]) {
            if (sp->u[i] >= 0) s[1] = v[sp->u[i]];
            if (sp->v[i] >= 0) s[2] = v[sp->v[i]];
            fn = row_of(sp->row[i], w);
        }
        PD_TRY(add_term(x, w, y, ab[i].ndim, ab[i].shape, din[i], fn, ctx, 3, s, sp->cost, sp->alpha[i], to, ti,
                         pd__fresh(x, i)));
    }
    return PD_OK;
}

#define PD__BIN_BWD(Op, ...)                                                                                   \
    pd_status pd__cpu_##Op##_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out, \
                                 pd_tensor *const *dout, pd_tensor *const *din) {                              \
        static const pd__bspec sp = __VA_ARGS__;                                                               \
        return binary_bwd(x, n, in, out, dout, din, &sp);                                                      \
    }
/* d(A+B) = dout, d(A-B) = dout, -dout */
PD__BIN_BWD(Add, {{NULL, NULL}, {-1, -1}, {-1, -1}, {1, 1}, 1})
PD__BIN_BWD(Sub, {{NULL, NULL}, {-1, -1}, {-1, -1}, {1, -1}, 1})
/* dA = dout * B, dB = dout * A */
PD__BIN_BWD(Mul, {{gmul_rows, gmul_rows}, {1, 0}, {-1, -1}, {1, 1}, 2})
/* dA = dout / B, dB = -dout * (A / B) / B */
PD__BIN_BWD(Div, {{gdiva_rows, gdivb_rows}, {1, 0}, {-1, 1}, {1, 1}, 4})
/* dA = dout * B * A^(B-1), dB = dout * A^B * log(A) */
PD__BIN_BWD(Pow, {{gpowa_rows, gpowb_rows}, {0, 0}, {1, 1}, {1, 1}, 24})

/* Sum: every input gets dout, summed over the dims it is broadcast along. */
pd_status pd__cpu_Sum_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                          pd_tensor *const *dout, pd_tensor *const *din) {
    const pd_tensor *y = out[0];
    if (!dout || !dout[0] || !is_float(y->dtype)) return PD_OK;
    pd_dtype w = pd__float_work(y->dtype);
    int64_t on = numel(y);
    PD_TRY(check_size(dout[0], y, "the output gradient"));
    bool any = false;
    size_t tmp_i = 0;
    for (int i = 0; i < n->nin; i++) {
        if (!wanted(din, i, in[i])) continue;
        PD_TRY(check_size(din[i], in[i], "an input gradient"));
        any = true;
        if (needs_tmp_i(on, numel(in[i]), din[i]->dtype, w) && wbytes(numel(in[i]), w) > tmp_i)
            tmp_i = wbytes(numel(in[i]), w);
    }
    if (!any) return PD_OK;
    pd__arena ar;
    PD_TRY(arena_init(x, &ar, stage_bytes(dout[0], w) + tmp_i));
    pd_tensor g = stage(x, &ar, dout[0], w);
    g.ndim = y->ndim;
    memcpy(g.shape, y->shape, sizeof g.shape);
    void *ti = tmp_i ? ar.p + ar.off : NULL;
    pd__gctx ctx;
    memset(&ctx, 0, sizeof ctx);
    for (int i = 0; i < n->nin; i++)
        if (wanted(din, i, in[i]))
            PD_TRY(add_term(x, w, y, in[i]->ndim, in[i]->shape, din[i], NULL, ctx, 1, &g, 1, 1.0, NULL, ti, false));
    return PD_OK;
}

/* Where(C, X, Y): dX = dout where C, dY = dout where not C, each summed
 * over the dims it is broadcast along; C is not differentiable. */
pd_status pd__cpu_Where_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                            pd_tensor *const *dout, pd_tensor *const *din) {
    (void)n;
    const pd_tensor *y = out[0], *c = in[0];
    if (!dout || !dout[0] || !is_float(y->dtype)) return PD_OK;
    bool want[3] = {false, wanted(din, 1, in[1]), wanted(din, 2, in[2])};
    if (!want[1] && !want[2]) return PD_OK;
    if (c->dtype != PD_BOOL) return pd__err(PD_ERR_UNSUPPORTED, "Where with a %s condition", pd_dtype_name(c->dtype));
    pd_dtype w = pd__float_work(y->dtype);
    int64_t on = numel(y);
    PD_TRY(check_size(dout[0], y, "the output gradient"));
    bool tmp_o = false;
    size_t tmp_i = 0;
    for (int i = 1; i <= 2; i++) {
        if (!want[i]) continue;
        PD_TRY(check_size(din[i], in[i], "an input gradient"));
        tmp_o |= needs_tmp_o(true, on, numel(in[i]), din[i]->dtype, w);
        if (needs_tmp_i(on, numel(in[i]), din[i]->dtype, w) && wbytes(numel(in[i]), w) > tmp_i)
            tmp_i = wbytes(numel(in[i]), w);
    }
    pd__arena ar;
    PD_TRY(arena_init(x, &ar, stage_bytes(dout[0], w) + (tmp_o ? wbytes(on, w) : 0) + tmp_i));
    pd_tensor s[2] = {stage(x, &ar, dout[0], w), *c};
    s[0].ndim = y->ndim;
    memcpy(s[0].shape, y->shape, sizeof s[0].shape);
    void *to = tmp_o ? arena_take(&ar, on, w) : NULL, *ti = tmp_i ? ar.p + ar.off : NULL;
    pd__gctx ctx;
    memset(&ctx, 0, sizeof ctx);
    for (int i = 1; i <= 2; i++) {
        if (!want[i]) continue;
        ctx.inv = i == 2;
        PD_TRY(add_term(x, w, y, in[i]->ndim, in[i]->shape, din[i], row_of(gwhere_rows, w), ctx, 2, s, 1, 1.0, to,
                        ti, false));
    }
    return PD_OK;
}

pd_status pd__cpu_Equal_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                            pd_tensor *const *dout, pd_tensor *const *din) {
    (void)x;
    (void)n;
    (void)in;
    (void)out;
    (void)dout;
    (void)din;
    return pd__err(PD_ERR_UNSUPPORTED, "Equal is not differentiable");
}

/* ---- unary ops ------------------------------------------------------------------- */

/* What a unary backward reads besides dout: its input x, its output y. */
#define PD__USE_X 1
#define PD__USE_Y 2

/* din += the row over (dout, x, y), all walked flat; a tensor the row
 * does not read (`use`) is neither touched nor converted (the row gets
 * dout in its place). */
static pd_status unary_bwd(pd__exec *x, pd_tensor *const *in, pd_tensor *const *out, pd_tensor *const *dout,
                           pd_tensor *const *din, const pd__row_fn *tab, const pd__gctx *ctx, int use,
                           int64_t cost) {
    const pd_tensor *xt = in[0], *y = out[0];
    if (!dout || !dout[0] || !wanted(din, 0, xt) || !is_float(y->dtype)) return PD_OK;
    int64_t nn = numel(xt);
    PD_TRY(check_size(y, xt, "the output"));
    PD_TRY(check_size(dout[0], xt, "the output gradient"));
    PD_TRY(check_size(din[0], xt, "the input gradient"));
    pd_dtype w = pd__float_work(xt->dtype);
    bool direct = din[0]->dtype == w;
    pd__arena ar;
    PD_TRY(arena_init(x, &ar, stage_bytes(dout[0], w) + (use & PD__USE_X ? stage_bytes(xt, w) : 0) +
                                  (use & PD__USE_Y ? stage_bytes(y, w) : 0) + (direct ? 0 : wbytes(nn, w))));
    pd_tensor s[3];
    s[0] = stage(x, &ar, dout[0], w);
    s[1] = use & PD__USE_X ? stage(x, &ar, xt, w) : s[0];
    s[2] = use & PD__USE_Y ? stage(x, &ar, y, w) : s[0];
    for (int k = 0; k < 3; k++) {
        s[k].ndim = 1;
        s[k].shape[0] = nn;
    }
    pd_tensor o = s[0];
    void *to = direct ? NULL : arena_take(&ar, nn, w);
    return add_term(x, w, &o, 1, &nn, din[0], row_of(tab, w), *ctx, 3, s, cost, 1.0, to, NULL, pd__fresh(x, 0));
}

#define PD__UNARY_BWD(Op, tab, use, cost)                                                                      \
    pd_status pd__cpu_##Op##_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out, \
                                 pd_tensor *const *dout, pd_tensor *const *din) {                              \
        pd__gctx ctx;                                                                                          \
        (void)n;                                                                                               \
        memset(&ctx, 0, sizeof ctx);                                                                           \
        return unary_bwd(x, in, out, dout, din, tab, &ctx, use, cost);                                         \
    }
PD__UNARY_BWD(Sqrt, gsqrt_rows, PD__USE_Y, 2)
PD__UNARY_BWD(Exp, gexp_rows, PD__USE_Y, 1)
PD__UNARY_BWD(Log, glog_rows, PD__USE_X, 2)
PD__UNARY_BWD(Neg, gneg_rows, 0, 1)
PD__UNARY_BWD(Reciprocal, grecip_rows, PD__USE_Y, 2)
PD__UNARY_BWD(Relu, grelu_rows, PD__USE_Y, 1)
PD__UNARY_BWD(Sigmoid, gsigmoid_rows, PD__USE_Y, 2)
PD__UNARY_BWD(Tanh, gtanh_rows, PD__USE_Y, 2)
PD__UNARY_BWD(Erf, gerf_rows, PD__USE_X, 8)

pd_status pd__cpu_LeakyRelu_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                                pd_tensor *const *dout, pd_tensor *const *din) {
    pd__gctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.alpha = pd__attr_f(n, "alpha", 0.01f);
    return unary_bwd(x, in, out, dout, din, glrelu_rows, &ctx, PD__USE_X, 1);
}

pd_status pd__cpu_Gelu_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                           pd_tensor *const *dout, pd_tensor *const *din) {
    const char *ap = pd__attr_s(n, "approximate", "none");
    bool th = strcmp(ap, "tanh") == 0;
    if (!th && strcmp(ap, "none") != 0) return pd__err(PD_ERR_UNSUPPORTED, "approximate='%s' is not supported", ap);
    pd__gctx ctx;
    memset(&ctx, 0, sizeof ctx);
    return unary_bwd(x, in, out, dout, din, th ? ggelut_rows : ggelu_rows, &ctx, PD__USE_X, 16);
}

/* Clip: the bounds as the forward reads them (inputs 1 and 2 from opset
 * 11, the float attributes before; absent ones unbounded). The gradient
 * passes where min <= x <= max, as PyTorch's clamp; the bounds get none. */
pd_status pd__cpu_Clip_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                           pd_tensor *const *dout, pd_tensor *const *din) {
    pd__gctx ctx;
    memset(&ctx, 0, sizeof ctx);
    for (int k = 0; k < 2; k++) {
        const pd_tensor *b = (n->opset >= 11 && n->nin > k + 1) ? in[k + 1] : NULL;
        double v = k ? INFINITY : -INFINITY;
        if (b && numel(b) >= 1 && b->data) {
            if (!pd__ekind(b->dtype)) return pd__err(PD_ERR_UNSUPPORTED, "Clip bound of %s", pd_dtype_name(b->dtype));
            v = pd__get_f(b->dtype, b->data, 0);
        } else if (n->opset < 11) {
            v = pd__attr_f(n, k ? "max" : "min", k ? 3.4028234663852886e38f : -3.4028234663852886e38f);
        }
        if (k) ctx.hi = v;
        else ctx.lo = v;
    }
    return unary_bwd(x, in, out, dout, din, gclip_rows, &ctx, PD__USE_X, 2);
}

/* ---- Cast, Identity ---------------------------------------------------------------- */

/* din += dout, converted: float to float only (an integer or bool side
 * carries no gradient). */
static pd_status pass_bwd(pd__exec *x, pd_tensor *const *in, pd_tensor *const *out, pd_tensor *const *dout,
                          pd_tensor *const *din) {
    if (!dout || !dout[0] || !wanted(din, 0, in[0]) || !is_float(out[0]->dtype) || !is_float(dout[0]->dtype))
        return PD_OK;
    PD_TRY(check_size(dout[0], din[0], "the output gradient"));
    pd__ew_convert_add(x, din[0]->dtype, din[0]->data, dout[0]->dtype, dout[0]->data, numel(din[0]), 1.0);
    return PD_OK;
}

pd_status pd__cpu_Cast_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                           pd_tensor *const *dout, pd_tensor *const *din) {
    (void)n;
    return pass_bwd(x, in, out, dout, din);
}

pd_status pd__cpu_Identity_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                               pd_tensor *const *dout, pd_tensor *const *din) {
    (void)n;
    return pass_bwd(x, in, out, dout, din);
}

/* ---- reductions ------------------------------------------------------------------ */

/* dX += dout broadcast back over the reduced axes (put back as 1s when
 * keepdims = 0), divided by their size for ReduceMean. */
static pd_status reduce_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *dout,
                            pd_tensor *const *din, bool mean) {
    const pd_tensor *xt = in[0];
    if (!dout || !dout[0] || !wanted(din, 0, xt) || !is_float(dout[0]->dtype)) return PD_OK;
    bool mask[PD_MAX_DIMS], noop;
    const pd_tensor *axes = (pd__reduce_axes_input(n) && n->nin > 1) ? in[1] : NULL;
    pd_status st = pd__reduce_mask(n, xt->ndim, axes, mask, &noop);
    if (st != PD_OK) return pd__err(st, "bad or unknown axes");
    PD_TRY(check_size(din[0], xt, "the input gradient"));
    int64_t xn = numel(xt), count = 1;
    if (xn <= 0) return PD_OK;
    pd_tensor gs = *dout[0];
    gs.ndim = xt->ndim;
    for (int d = 0; d < xt->ndim; d++) {
        gs.shape[d] = mask[d] ? 1 : xt->shape[d];
        if (mask[d]) count *= xt->shape[d];
    }
    PD_TRY(check_size(dout[0], &gs, "the output gradient"));
    pd_dtype w = pd__float_work(xt->dtype);
    bool direct = din[0]->dtype == w;
    pd__arena ar;
    PD_TRY(arena_init(x, &ar, stage_bytes(dout[0], w) + (direct ? 0 : wbytes(xn, w))));
    pd_tensor g = stage(x, &ar, dout[0], w), o = *xt;
    g.ndim = gs.ndim;
    memcpy(g.shape, gs.shape, sizeof g.shape);
    o.dtype = w;
    o.data = direct ? din[0]->data : arena_take(&ar, xn, w);
    pd__gctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.acc = direct;
    ctx.alpha = mean ? 1.0 / (double)count : 1.0;
    PD_TRY(pd__ew_bcast_run(x, row_of(gscale_rows, w), &ctx, &o, 1, &g, 1));
    if (!direct) pd__ew_convert_add(x, din[0]->dtype, din[0]->data, w, o.data, xn, 1.0);
    return PD_OK;
}

pd_status pd__cpu_ReduceSum_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                                pd_tensor *const *dout, pd_tensor *const *din) {
    (void)out;
    return reduce_bwd(x, n, in, dout, din, false);
}

pd_status pd__cpu_ReduceMean_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                                 pd_tensor *const *dout, pd_tensor *const *din) {
    (void)out;
    return reduce_bwd(x, n, in, dout, din, true);
}
