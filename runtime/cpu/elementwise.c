/* elementwise.c - CPU kernels of the element-wise ops (Add ... Where, Cast,
 * Identity) and of the reductions ReduceSum and ReduceMean, each forward
 * beside its backward.
 *
 * Forward, how it is built:
 * - An op is a "row" function: it writes n contiguous output elements from
 *   inputs that are, along that run, either contiguous (stride 1) or one
 *   broadcast value (stride 0). Each row is written once as an expression
 *   and instantiated per dtype from the type lists below.
 * - One broadcast iterator (pd__bplan) turns any numpy broadcast into rows:
 *   it drops size-1 dims and merges dims that walk memory the same way, so
 *   equal shapes, a scalar operand and a bias over trailing dims all become
 *   a few long contiguous rows. Work above PD__PAR_MIN elements is split
 *   over OpenMP threads (x->threads of them, 0: all).
 * - float16 / bfloat16 (and mixed-dtype Pow, integer Erf) compute in float
 *   or double: inputs are converted into scratch memory and the result
 *   converted back by the same code as Cast (pd__ew_convert()).
 * - float32 Exp, Sigmoid, Tanh, Erf and Gelu use the branch-free exp, tanh
 *   and erf of fastmath.h (within 3 ulp, tested) so that their loops
 *   vectorize; everything else calls libm.
 *
 * Backward, how it is built:
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

#ifdef _OPENMP
#include <omp.h>
#endif

/* ---- threads --------------------------------------------------------------------- */
int pd__ew_threads(const pd__exec *x, int64_t work) {
#ifdef _OPENMP
    if (work < PD__PAR_MIN) return 1;
    int nt = x && x->threads > 0 ? x->threads : omp_get_max_threads();
    int64_t cap = work / (PD__PAR_MIN / 4);
    if (nt > cap) nt = (int)cap;
    return nt > 1 ? nt : 1;
#else
    (void)x;
    (void)work;
    return 1;
#endif
}

/* Runs fn over [0, total) in contiguous chunks (multiples of `align`), one
 * per thread; `work` (elements touched) decides how many threads. */
void pd__ew_par_range(const pd__exec *x, int64_t total, int64_t work, int64_t align, pd__range_fn fn, void *ctx) {
    if (total <= 0) return;
    int nt = pd__ew_threads(x, work);
    if (nt > total) nt = (int)total;
    if (nt <= 1) {
        fn(ctx, 0, total);
        return;
    }
    int64_t chunk = (total + nt - 1) / nt;
    chunk = (chunk + align - 1) / align * align;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static)
#endif
    for (int t = 0; t < nt; t++) {
        int64_t b = (int64_t)t * chunk, e = b + chunk < total ? b + chunk : total;
        if (b < e) fn(ctx, b, e);
    }
}

static int64_t numel(const pd_tensor *t) { return pd_tensor_numel(t); }

/* ---- conversions (Cast, and the staging of 16-bit floats) ------------------------- */
/* IEEE half from double, rounded to nearest even in one step (going through
 * float would round twice). */
static uint16_t dbl_to_half(double d) {
    uint64_t b;
    memcpy(&b, &d, 8);
    uint16_t sign = (uint16_t)((b >> 48) & 0x8000);
    int e = (int)((b >> 52) & 0x7ff);
    uint64_t m = b & 0xfffffffffffffull;
    if (e == 0x7ff) return (uint16_t)(sign | 0x7c00 | (m ? 0x200 : 0));
    if (e == 0) return sign; /* double subnormals are far below half's range */
    m |= 1ull << 52;         /* value = m * 2^(e - 1075) */
    int he = e - 1023 + 15;  /* half's biased exponent */
    int shift = he >= 1 ? 42 : 42 + 1 - he;
    if (shift > 54) return sign;
    uint64_t q = m >> shift, rem = m & ((1ull << shift) - 1), half = 1ull << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) q++;
    /* normal: q in [2^10, 2^11] holds the implicit bit, so adding it carries
     * into the exponent; subnormal: q is the encoding itself */
    uint32_t r = he >= 1 ? ((uint32_t)(he - 1) << 10) + (uint32_t)q : (uint32_t)q;
    if (r >= 0x7c00) return (uint16_t)(sign | 0x7c00);
    return (uint16_t)(sign | r);
}

/* Values pass through a block of "wide" values: double for float sources,
 * int64 for signed / small unsigned / bool, uint64 for uint64. */
#define PD__BLK 256
enum { PD_WIDE_F, PD_WIDE_I, PD_WIDE_U };
typedef union pd__wide {
    double f[PD__BLK];
    int64_t i[PD__BLK];
    uint64_t u[PD__BLK];
} pd__wide;

#define PD__LOAD_F(_, dt, T, sfx, W, M, MIN, MAX) \
    case dt:                                      \
        for (int64_t i = 0; i < n; i++) w->f[i] = (double)((const T *)src)[i]; \
        return PD_WIDE_F;
#define PD__LOAD_I(_, dt, T, sfx, W, M, MIN, MAX)                              \
    case dt:                                                                    \
        if (dt == PD_UINT64) {                                                  \
            for (int64_t i = 0; i < n; i++) w->u[i] = (uint64_t)((const T *)src)[i]; \
            return PD_WIDE_U;                                                   \
        }                                                                       \
        for (int64_t i = 0; i < n; i++) w->i[i] = (int64_t)((const T *)src)[i]; \
        return PD_WIDE_I;

/* Loads n elements of dtype t from src; returns which member of w holds them. */
static int wide_load(pd_dtype t, const void *src, int64_t n, pd__wide *w) {
    switch (t) {
        PD__FLOATS(PD__LOAD_F, _)
        PD__INTS(PD__LOAD_I, _)
    case PD_FLOAT16:
        for (int64_t i = 0; i < n; i++) w->f[i] = pd__half_to_float(((const uint16_t *)src)[i]);
        return PD_WIDE_F;
    case PD_BFLOAT16:
        for (int64_t i = 0; i < n; i++) w->f[i] = pd__bf16_to_float(((const uint16_t *)src)[i]);
        return PD_WIDE_F;
    case PD_BOOL:
        for (int64_t i = 0; i < n; i++) w->i[i] = ((const uint8_t *)src)[i] != 0;
        return PD_WIDE_I;
    default: return -1;
    }
}

/* Float to integer: truncation toward zero; NaN gives 0 and values out of
 * range saturate (ONNX leaves both undefined; C would be undefined too). */
#define PD__SAT(_, dt, T, sfx, W, M, MIN, MAX)               \
    static inline T sat_##sfx(double v) {                    \
        if (!(v == v)) return 0;                             \
        if (v <= (double)(MIN)) return (T)(MIN);             \
        if (v >= (double)(MAX)) return (T)(MAX);             \
        return (T)v;                                         \
    }
PD__INTS(PD__SAT, _)

#define PD__STORE_LOOPS(T, FROM_F, FROM_I, FROM_U)                                       \
    {                                                                                    \
        T *o = (T *)dst;                                                                 \
        if (cat == PD_WIDE_F)                                                            \
            for (int64_t i = 0; i < n; i++) o[i] = FROM_F(w->f[i]);                      \
        else if (cat == PD_WIDE_I)                                                       \
            for (int64_t i = 0; i < n; i++) o[i] = FROM_I(w->i[i]);                      \
        else                                                                             \
            for (int64_t i = 0; i < n; i++) o[i] = FROM_U(w->u[i]);                      \
        return;                                                                          \
    }
#define PD__AS(T) (T)
#define PD__STORE_F(_, dt, T, sfx, W, M, MIN, MAX) \
    case dt: PD__STORE_LOOPS(T, PD__AS(T), PD__AS(T), PD__AS(T))
#define PD__STORE_I(_, dt, T, sfx, W, M, MIN, MAX) \
    case dt: PD__STORE_LOOPS(T, sat_##sfx, PD__AS(T), PD__AS(T))
#define PD__HALF(v) dbl_to_half((double)(v))
#define PD__BF16(v) pd__float_to_bf16((float)(v))
#define PD__NZ(v) (uint8_t)((v) != 0)

/* Stores n wide values (member `cat` of w) into dst as dtype t. */
static void wide_store(pd_dtype t, void *dst, int64_t n, int cat, const pd__wide *w) {
    switch (t) {
        PD__FLOATS(PD__STORE_F, _)
        PD__INTS(PD__STORE_I, _)
    case PD_FLOAT16: PD__STORE_LOOPS(uint16_t, PD__HALF, PD__HALF, PD__HALF)
    case PD_BFLOAT16: PD__STORE_LOOPS(uint16_t, PD__BF16, PD__BF16, PD__BF16)
    case PD_BOOL: PD__STORE_LOOPS(uint8_t, PD__NZ, PD__NZ, PD__NZ)
    default: return;
    }
}

typedef struct pd__cvjob {
    pd_dtype dt, st;
    char *dst;
    const char *src;
} pd__cvjob;

static void convert_range(void *ctx, int64_t begin, int64_t end) {
    const pd__cvjob *j = ctx;
    size_t ds = pd_dtype_size(j->dt), ss = pd_dtype_size(j->st);
    pd__wide w;
    for (int64_t b = begin; b < end; b += PD__BLK) {
        int64_t n = end - b < PD__BLK ? end - b : PD__BLK;
        int cat = wide_load(j->st, j->src + (size_t)b * ss, n, &w);
        wide_store(j->dt, j->dst + (size_t)b * ds, n, cat, &w);
    }
}

/* dst (dtype dt) = src (dtype st) converted, n elements, ONNX Cast semantics. */
void pd__ew_convert(const pd__exec *x, pd_dtype dt, void *dst, pd_dtype st, const void *src, int64_t n) {
    if (n <= 0) return;
    if (dt == st) {
        if (dst != src) memcpy(dst, src, (size_t)n * pd_dtype_size(dt));
        return;
    }
    pd__cvjob j = {dt, st, dst, src};
    pd__ew_par_range(x, n, n, PD__BLK, convert_range, &j);
}

static bool convertible(pd_dtype t) { return pd__ekind(t) != 0; }

/* ---- staging: inputs and output in the dtype a row computes in ------------------- */
#define PD__MAX_STAGED 64

/* Fills view[k] with input k as dtype w (the input itself, or a converted
 * copy in scratch) and *oview with where the row writes the output (out
 * itself when its dtype is wout, scratch otherwise; stage_end converts). */
static pd_status stage_begin(pd__exec *x, int nin, pd_tensor *const *in, pd_dtype w, pd_tensor *view, pd_tensor *out,
                             pd_dtype wout, pd_tensor *oview) {
    size_t need = 0;
    for (int k = 0; k < nin; k++)
        if (in[k]->dtype != w) need += pd__align64((size_t)numel(in[k]) * pd_dtype_size(w));
    if (out->dtype != wout) need += pd__align64((size_t)numel(out) * pd_dtype_size(wout));
    char *buf = NULL;
    if (need) {
        buf = pd__scratch(x, need);
        if (!buf) return PD_ERR_NOMEM;
    }
    size_t off = 0;
    for (int k = 0; k < nin; k++) {
        view[k] = *in[k];
        if (in[k]->dtype == w) continue;
        if (!convertible(in[k]->dtype))
            return pd__err(PD_ERR_UNSUPPORTED, "dtype %s is not supported", pd_dtype_name(in[k]->dtype));
        view[k].dtype = w;
        view[k].data = buf + off;
        off += pd__align64((size_t)numel(in[k]) * pd_dtype_size(w));
        pd__ew_convert(x, w, view[k].data, in[k]->dtype, in[k]->data, numel(in[k]));
    }
    *oview = *out;
    if (out->dtype != wout) {
        if (!convertible(out->dtype))
            return pd__err(PD_ERR_UNSUPPORTED, "dtype %s is not supported", pd_dtype_name(out->dtype));
        oview->dtype = wout;
        oview->data = buf + off;
    }
    return PD_OK;
}

static void stage_end(const pd__exec *x, pd_tensor *out, const pd_tensor *oview) {
    if (oview->data != out->data) pd__ew_convert(x, out->dtype, out->data, oview->dtype, oview->data, numel(out));
}

/* ---- rows ------------------------------------------------------------------------ */
/* What a row with parameters reads: LeakyRelu's alpha, Clip's bounds (in
 * the row's dtype). */
typedef struct pd__ectx {
    double alpha;
    unsigned char lo[8], hi[8];
} pd__ectx;

/* o = EXPR(x, y) with x from a, y from b; the four stride cases are
 * separate loops so that each vectorizes. */
#define PD__BIN_ROW(name, T, TO, EXPR)                                              \
    PD__VEC static void name(PD__ROW_ARGS) {                                        \
        TO *o = (TO *)o_;                                                           \
        const T *a = (const T *)a_, *b = (const T *)b_;                             \
        (void)c_;                                                                   \
        (void)sc;                                                                   \
        (void)ctx_;                                                                 \
        if (sa && sb) {                                                             \
            for (int64_t i = 0; i < n; i++) {                                       \
                const T x = a[i], y = b[i];                                         \
                o[i] = (TO)(EXPR);                                                  \
            }                                                                       \
        } else if (sa) {                                                            \
            const T y = b[0];                                                       \
            for (int64_t i = 0; i < n; i++) {                                       \
                const T x = a[i];                                                   \
                o[i] = (TO)(EXPR);                                                  \
            }                                                                       \
        } else if (sb) {                                                            \
            const T x = a[0];                                                       \
            for (int64_t i = 0; i < n; i++) {                                       \
                const T y = b[i];                                                   \
                o[i] = (TO)(EXPR);                                                  \
            }                                                                       \
        } else {                                                                    \
            const T x = a[0], y = b[0];                                             \
            const TO v = (TO)(EXPR);                                                \
            for (int64_t i = 0; i < n; i++) o[i] = v;                               \
        }                                                                           \
    }

/* o = EXPR(x) with x from a; PRE declares what EXPR needs from ctx. */
#define PD__UN_ROW(name, T, PRE, EXPR)          \
    PD__VEC static void name(PD__ROW_ARGS) {    \
        T *o = (T *)o_;                         \
        const T *a = (const T *)a_;             \
        const pd__ectx *ctx = ctx_;             \
        (void)ctx;                              \
        (void)sa;                               \
        (void)b_;                               \
        (void)sb;                               \
        (void)c_;                               \
        (void)sc;                               \
        PRE;                                    \
        for (int64_t i = 0; i < n; i++) {       \
            const T x = a[i];                   \
            o[i] = (T)(EXPR);                   \
        }                                       \
    }

/* A table of rows per dtype: [dtype] = op_suffix. */
#define PD__TAB(op, dt, T, sfx, W, M, MIN, MAX) [dt] = op##_##sfx,

/* The row of dtype w, NULL when there is none. */
static pd__row_fn row_of(const pd__row_fn *tab, pd_dtype w) { return (unsigned)w < PD__NDT ? tab[w] : NULL; }

/* binary arithmetic */
#define PD__DEF_ADD(_, dt, T, sfx, W, M, MIN, MAX) PD__BIN_ROW(add_##sfx, T, T, (W)x + (W)y)
#define PD__DEF_SUB(_, dt, T, sfx, W, M, MIN, MAX) PD__BIN_ROW(sub_##sfx, T, T, (W)x - (W)y)
#define PD__DEF_MUL(_, dt, T, sfx, W, M, MIN, MAX) PD__BIN_ROW(mul_##sfx, T, T, (W)x * (W)y)
PD__NUMS(PD__DEF_ADD, _)
PD__NUMS(PD__DEF_SUB, _)
PD__NUMS(PD__DEF_MUL, _)

/* Integer division truncates like C; x/0 gives 0 and MIN/-1 wraps (ONNX
 * leaves both undefined; in C they trap). */
#define PD__DEF_DIV_F(_, dt, T, sfx, W, M, MIN, MAX) PD__BIN_ROW(div_##sfx, T, T, x / y)
#define PD__DEF_DIV_S(_, dt, T, sfx, W, M, MIN, MAX) \
    PD__BIN_ROW(div_##sfx, T, T, y == 0 ? (T)0 : y == -1 ? (T)(0u - (W)x) : (T)(x / y))
#define PD__DEF_DIV_U(_, dt, T, sfx, W, M, MIN, MAX) PD__BIN_ROW(div_##sfx, T, T, y == 0 ? (T)0 : (T)(x / y))
PD__FLOATS(PD__DEF_DIV_F, _)
PD__SINTS(PD__DEF_DIV_S, _)
PD__UINTS(PD__DEF_DIV_U, _)

/* Integer power by squaring, wrapping; negative exponents give 1/x^|e|
 * truncated (so 0 unless |x| = 1). */
static inline int64_t ipow(int64_t x, int64_t e) {
    if (e < 0) return x == 1 ? 1 : x == -1 ? ((e & 1) ? -1 : 1) : 0;
    uint64_t r = 1, b = (uint64_t)x;
    for (uint64_t k = (uint64_t)e; k; k >>= 1) {
        if (k & 1) r *= b;
        b *= b;
    }
    return (int64_t)r;
}
PD__BIN_ROW(pow_f32, float, float, powf(x, y))
PD__BIN_ROW(pow_f64, double, double, pow(x, y))
PD__BIN_ROW(pow_i64, int64_t, int64_t, ipow(x, y))

#define PD__DEF_EQ(_, dt, T, sfx, W, M, MIN, MAX) PD__BIN_ROW(eq_##sfx, T, uint8_t, x == y)
PD__NUMS(PD__DEF_EQ, _)
PD__BIN_ROW(eq_b8, uint8_t, uint8_t, (x != 0) == (y != 0))

static const pd__row_fn add_rows[PD__NDT] = {PD__NUMS(PD__TAB, add)};
static const pd__row_fn sub_rows[PD__NDT] = {PD__NUMS(PD__TAB, sub)};
static const pd__row_fn mul_rows[PD__NDT] = {PD__NUMS(PD__TAB, mul)};
static const pd__row_fn div_rows[PD__NDT] = {PD__NUMS(PD__TAB, div)};
static const pd__row_fn eq_rows[PD__NDT] = {PD__NUMS(PD__TAB, eq)[PD_BOOL] = eq_b8};
static const pd__row_fn pow_rows[PD__NDT] = {[PD_FLOAT] = pow_f32, [PD_DOUBLE] = pow_f64, [PD_INT64] = pow_i64};

/* unary: signed */
#define PD__DEF_NEG(_, dt, T, sfx, W, M, MIN, MAX) PD__UN_ROW(neg_##sfx, T, , -(W)x)
#define PD__DEF_RELU(_, dt, T, sfx, W, M, MIN, MAX) PD__UN_ROW(relu_##sfx, T, , x < 0 ? (T)0 : x)
PD__FLOATS(PD__DEF_NEG, _)
PD__SINTS(PD__DEF_NEG, _)
PD__FLOATS(PD__DEF_RELU, _)
PD__SINTS(PD__DEF_RELU, _)
static const pd__row_fn neg_rows[PD__NDT] = {PD__FLOATS(PD__TAB, neg) PD__SINTS(PD__TAB, neg)};
static const pd__row_fn relu_rows[PD__NDT] = {PD__FLOATS(PD__TAB, relu) PD__SINTS(PD__TAB, relu)};

/* unary: float math (M is the libm suffix: sqrtf / sqrt) */
#define PD__GELU_ERF(T, sfx) (T)0.5 * x * ((T)1 + pd__erf_##sfx(x * (T)0.70710678118654752440))
#define PD__GELU_TANH(T, sfx) \
    (T)0.5 * x * ((T)1 + pd__tanh_##sfx((T)0.79788456080286535588 * (x + (T)0.044715 * x * x * x)))
#define PD__DEF_FMATH(_, dt, T, sfx, W, M, MIN, MAX)                         \
    PD__UN_ROW(sqrt_##sfx, T, , sqrt##M(x))                                  \
    PD__UN_ROW(exp_##sfx, T, , pd__exp_##sfx(x))                             \
    PD__UN_ROW(log_##sfx, T, , log##M(x))                                    \
    PD__UN_ROW(recip_##sfx, T, , (T)1 / x)                                   \
    PD__UN_ROW(sigmoid_##sfx, T, , pd__sigmoid_##sfx(x))                    \
    PD__UN_ROW(tanh_##sfx, T, , pd__tanh_##sfx(x))                           \
    PD__UN_ROW(erf_##sfx, T, , pd__erf_##sfx(x))                             \
    PD__UN_ROW(gelu_##sfx, T, , PD__GELU_ERF(T, sfx))                        \
    PD__UN_ROW(gelut_##sfx, T, , PD__GELU_TANH(T, sfx))                      \
    PD__UN_ROW(lrelu_##sfx, T, const T al = (T)ctx->alpha, pd__sel_##sfx(x < 0, al, 1) * x)
PD__FLOATS(PD__DEF_FMATH, _)
static const pd__row_fn sqrt_rows[PD__NDT] = {PD__FLOATS(PD__TAB, sqrt)};
static const pd__row_fn exp_rows[PD__NDT] = {PD__FLOATS(PD__TAB, exp)};
static const pd__row_fn log_rows[PD__NDT] = {PD__FLOATS(PD__TAB, log)};
static const pd__row_fn recip_rows[PD__NDT] = {PD__FLOATS(PD__TAB, recip)};
static const pd__row_fn sigmoid_rows[PD__NDT] = {PD__FLOATS(PD__TAB, sigmoid)};
static const pd__row_fn tanh_rows[PD__NDT] = {PD__FLOATS(PD__TAB, tanh)};
static const pd__row_fn erf_rows[PD__NDT] = {PD__FLOATS(PD__TAB, erf)};
static const pd__row_fn gelu_rows[PD__NDT] = {PD__FLOATS(PD__TAB, gelu)};
static const pd__row_fn gelut_rows[PD__NDT] = {PD__FLOATS(PD__TAB, gelut)};
static const pd__row_fn lrelu_rows[PD__NDT] = {PD__FLOATS(PD__TAB, lrelu)};

/* Clip: max(x, lo) then min(., hi), so lo > hi gives hi (as numpy); NaN stays. */
#define PD__CLIP_PRE(T)              \
    T lo;                            \
    T hi;                            \
    memcpy(&lo, ctx->lo, sizeof lo); \
    memcpy(&hi, ctx->hi, sizeof hi)
#define PD__DEF_CLIP(_, dt, T, sfx, W, M, MIN, MAX) \
    PD__UN_ROW(clip_##sfx, T, PD__CLIP_PRE(T), (x < lo ? lo : x) > hi ? hi : (x < lo ? lo : x))
PD__NUMS(PD__DEF_CLIP, _)
static const pd__row_fn clip_rows[PD__NDT] = {PD__NUMS(PD__TAB, clip)};

/* Where(c, x, y) by element size: any dtype. */
#define PD__WHERE_ROW(name, T)                                               \
    static void name(PD__ROW_ARGS) {                                         \
        T *o = (T *)o_;                                                      \
        const uint8_t *c = (const uint8_t *)a_;                              \
        const T *x = (const T *)b_, *y = (const T *)c_;                      \
        (void)ctx_;                                                          \
        for (int64_t i = 0; i < n; i++) o[i] = c[i * sa] ? x[i * sb] : y[i * sc]; \
    }
PD__WHERE_ROW(where_1, uint8_t)
PD__WHERE_ROW(where_2, uint16_t)
PD__WHERE_ROW(where_4, uint32_t)
PD__WHERE_ROW(where_8, uint64_t)

/* ---- rows of the gradients ---------------------------------------------------- */
/* What a gradient row reads besides its streams. */
typedef struct pd__gctx {
    bool acc;      /* o += expr (else o = expr) */
    bool inv;      /* Where: the gradient of Y, which flows where the condition is false */
    double alpha;  /* LeakyRelu's slope; the scale of a broadcast dout (ReduceMean) */
    double lo, hi; /* Clip's bounds */
} pd__gctx;

static bool is_float(pd_dtype t) { return pd__ekind(t) == PD_EK_FLOAT; }

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

/* ---- the broadcast iterator ---------------------------------------------------- */
/* The output's dims after dropping 1s and merging, with each input's
 * element stride per dim (0 where it is broadcast). */
typedef struct pd__bplan {
    int nd;
    int64_t shape[PD_MAX_DIMS];
    int64_t st[PD__MAX_BIN][PD_MAX_DIMS];
} pd__bplan;

static pd_status plan_make(pd__bplan *p, int ond, const int64_t *oshape, int nin, const pd_tensor *in) {
    int64_t cst[PD__MAX_BIN][PD_MAX_DIMS];
    for (int k = 0; k < nin; k++) {
        if (in[k].ndim > ond) return pd__err(PD_ERR_SHAPE, "input %d has more dims than the output", k);
        int64_t s = 1;
        for (int d = in[k].ndim - 1; d >= 0; d--) {
            cst[k][d] = s;
            s *= in[k].shape[d];
        }
    }
    p->nd = 0;
    for (int d = 0; d < ond; d++) {
        if (oshape[d] == 1) continue;
        int64_t st[PD__MAX_BIN];
        for (int k = 0; k < nin; k++) {
            int dk = d - (ond - in[k].ndim);
            int64_t dim = dk >= 0 ? in[k].shape[dk] : 1;
            if (dim != 1 && dim != oshape[d])
                return pd__err(PD_ERR_SHAPE, "input %d does not broadcast to the output (dim %d: %lld vs %lld)", k,
                               d, (long long)dim, (long long)oshape[d]);
            st[k] = dim == 1 ? 0 : cst[k][dk];
        }
        int m = p->nd - 1;
        bool merge = m >= 0;
        for (int k = 0; k < nin && merge; k++) merge = p->st[k][m] == st[k] * oshape[d];
        if (merge) {
            p->shape[m] *= oshape[d];
            for (int k = 0; k < nin; k++) p->st[k][m] = st[k];
        } else {
            p->shape[p->nd] = oshape[d];
            for (int k = 0; k < nin; k++) p->st[k][p->nd] = st[k];
            p->nd++;
        }
    }
    return PD_OK;
}

typedef struct pd__bjob {
    const pd__bplan *p;
    pd__row_fn fn;
    const void *ctx;
    int nin;
    char *o;
    size_t osz;
    const char *in[PD__MAX_BIN];
    size_t isz[PD__MAX_BIN];
} pd__bjob;

/* Output elements [begin, end): rows along the last merged dim, an
 * odometer over the others. */
static void bjob_range(void *ctx, int64_t begin, int64_t end) {
    const pd__bjob *j = ctx;
    const pd__bplan *p = j->p;
    int nd = p->nd, nin = j->nin;
    int64_t inner = nd ? p->shape[nd - 1] : 1;
    int64_t idx[PD_MAX_DIMS], off[PD__MAX_BIN] = {0}, s[PD__MAX_BIN] = {0};
    for (int k = 0; k < nin; k++) s[k] = nd ? p->st[k][nd - 1] : 0;
    int64_t row = begin / inner, col = begin % inner;
    for (int d = nd - 2; d >= 0; d--) {
        idx[d] = row % p->shape[d];
        row /= p->shape[d];
        for (int k = 0; k < nin; k++) off[k] += idx[d] * p->st[k][d];
    }
    for (int64_t pos = begin; pos < end;) {
        int64_t len = inner - col < end - pos ? inner - col : end - pos;
        const void *a[PD__MAX_BIN] = {NULL, NULL, NULL};
        for (int k = 0; k < nin; k++) a[k] = j->in[k] + (size_t)(off[k] + col * s[k]) * j->isz[k];
        j->fn(j->o + (size_t)pos * j->osz, a[0], s[0], a[1], s[1], a[2], s[2], len, j->ctx);
        pos += len;
        col = 0;
        for (int d = nd - 2; d >= 0; d--) {
            for (int k = 0; k < nin; k++) off[k] += p->st[k][d];
            if (++idx[d] < p->shape[d]) break;
            for (int k = 0; k < nin; k++) off[k] -= p->st[k][d] * p->shape[d];
            idx[d] = 0;
        }
    }
}

/* out = fn(in...) broadcast; views already in the row's dtypes. */
pd_status pd__ew_bcast_run(const pd__exec *x, pd__row_fn fn, const void *ctx, const pd_tensor *out, int nin,
                           const pd_tensor *in, int64_t cost) {
    int64_t n = numel(out);
    if (n <= 0) return PD_OK;
    pd__bplan p;
    PD_TRY(plan_make(&p, out->ndim, out->shape, nin, in));
    pd__bjob j = {&p, fn, ctx, nin, out->data, pd_dtype_size(out->dtype), {NULL, NULL, NULL}, {0, 0, 0}};
    for (int k = 0; k < nin; k++) {
        j.in[k] = in[k].data;
        j.isz[k] = pd_dtype_size(in[k].dtype);
    }
    pd__ew_par_range(x, n, n * cost, 64, bjob_range, &j);
    return PD_OK;
}

/* The common path: stage the inputs in dtype w, run the row (which writes
 * dtype wout), convert the result into out. */
static pd_status run_rows(pd__exec *x, int nin, pd_tensor *const *in, pd_dtype w, pd_tensor *out, pd_dtype wout,
                          pd__row_fn fn, const void *ctx, int64_t cost) {
    if (!fn) return pd__err(PD_ERR_UNSUPPORTED, "dtype %s is not supported", pd_dtype_name(in[0]->dtype));
    if (numel(out) <= 0) return PD_OK;
    pd_tensor view[PD__MAX_BIN], ov;
    PD_TRY(stage_begin(x, nin, in, w, view, out, wout, &ov));
    PD_TRY(pd__ew_bcast_run(x, fn, ctx, &ov, nin, view, cost));
    stage_end(x, out, &ov);
    return PD_OK;
}

/* ---- the backward's scratch and staging ----------------------------------------------------------- */
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

/* ---- binary ops -------------------------------------------------------------- */
/* A op B in A's dtype (16-bit floats in float); Equal writes bool. B takes
 * the old broadcast attribute's shape in opsets < 7. */
static pd_status binary(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *out, const pd__row_fn *tab,
                        bool to_bool) {
    pd_tensor a = *in[0], b = *in[1];
    if (!pd__legacy_bshape(n, a.ndim, &b.ndim, b.shape))
        return pd__err(PD_ERR_SHAPE, "input B does not fit in A at the broadcast axis");
    pd_dtype w = pd__arith_work(a.dtype);
    pd_tensor *v[2] = {&a, &b};
    return run_rows(x, 2, v, w, out, to_bool ? PD_BOOL : w, row_of(tab, w), NULL, 1);
}

pd_status pd__cpu_Add(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    return binary(x, n, in, out[0], add_rows, false);
}
pd_status pd__cpu_Sub(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    return binary(x, n, in, out[0], sub_rows, false);
}
pd_status pd__cpu_Mul(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    return binary(x, n, in, out[0], mul_rows, false);
}
pd_status pd__cpu_Div(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    return binary(x, n, in, out[0], div_rows, false);
}
pd_status pd__cpu_Equal(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    return binary(x, n, in, out[0], eq_rows, true);
}

/* Pow: a float base computes in its float dtype (the exponent converted to
 * it); an integer base in int64 with an integer exponent, in double with a
 * float one, the result cast back (truncated) to the base's dtype. x^2 is x*x. */
pd_status pd__cpu_Pow(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    pd_tensor a = *in[0], b = *in[1];
    if (!pd__legacy_bshape(n, a.ndim, &b.ndim, b.shape))
        return pd__err(PD_ERR_SHAPE, "input B does not fit in A at the broadcast axis");
    unsigned ka = pd__ekind(a.dtype), kb = pd__ekind(b.dtype);
    pd_dtype w;
    if (ka == PD_EK_FLOAT) w = pd__float_work(a.dtype);
    else if (ka & PD_EK_INT) w = (kb & PD_EK_INT) ? PD_INT64 : PD_DOUBLE;
    else return pd__err(PD_ERR_UNSUPPORTED, "Pow of %s is not supported", pd_dtype_name(a.dtype));
    if (!kb || kb == PD_EK_BOOL)
        return pd__err(PD_ERR_UNSUPPORTED, "Pow with a %s exponent is not supported", pd_dtype_name(b.dtype));
    pd_tensor *v[2] = {&a, &b};
    if ((w == PD_FLOAT || w == PD_DOUBLE) && numel(&b) == 1 && b.data && pd__get_f(b.dtype, b.data, 0) == 2.0) {
        v[1] = &a; /* x^2 = x*x, which is how pow rounds it too */
        return run_rows(x, 2, v, w, out[0], w, row_of(mul_rows, w), NULL, 1);
    }
    return run_rows(x, 2, v, w, out[0], w, row_of(pow_rows, w), NULL, 8);
}

/* Sum: out = in0 + in1, then out += in_k; one input is a copy. */
pd_status pd__cpu_Sum(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    int nin = n->nin;
    pd_tensor *y = out[0];
    if (nin < 1 || nin > PD__MAX_STAGED) return pd__err(PD_ERR_UNSUPPORTED, "Sum of %d inputs", nin);
    for (int k = 0; k < nin; k++)
        if (!in[k]) return pd__err(PD_ERR_INVALID, "input %d is missing", k);
    if (numel(y) <= 0) return PD_OK;
    pd_dtype w = pd__arith_work(in[0]->dtype);
    pd__row_fn add = row_of(add_rows, w);
    if (!add) return pd__err(PD_ERR_UNSUPPORTED, "dtype %s is not supported", pd_dtype_name(in[0]->dtype));
    pd_tensor view[PD__MAX_STAGED], ov;
    PD_TRY(stage_begin(x, nin, in, w, view, y, w, &ov));
    if (nin == 1) {
        if (numel(&view[0]) != numel(&ov)) return pd__err(PD_ERR_SHAPE, "input and output sizes differ");
        memcpy(ov.data, view[0].data, (size_t)numel(&ov) * pd_dtype_size(w));
    } else {
        PD_TRY(pd__ew_bcast_run(x, add, NULL, &ov, 2, view, 1));
        for (int k = 2; k < nin; k++) {
            pd_tensor ab[2] = {ov, view[k]};
            PD_TRY(pd__ew_bcast_run(x, add, NULL, &ov, 2, ab, 1));
        }
    }
    stage_end(x, y, &ov);
    return PD_OK;
}

/* Where(condition, X, Y), any dtype of X and Y. */
pd_status pd__cpu_Where(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)n;
    pd_tensor v[3] = {*in[0], *in[1], *in[2]};
    pd__row_fn fn = NULL;
    switch (pd_dtype_size(v[1].dtype)) {
    case 1: fn = where_1; break;
    case 2: fn = where_2; break;
    case 4: fn = where_4; break;
    case 8: fn = where_8; break;
    default: break;
    }
    if (!fn || v[0].dtype != PD_BOOL || v[1].dtype != v[2].dtype || out[0]->dtype != v[1].dtype)
        return pd__err(PD_ERR_UNSUPPORTED, "Where of %s is not supported", pd_dtype_name(v[1].dtype));
    return pd__ew_bcast_run(x, fn, NULL, out[0], 3, v, 1);
}

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

/* ---- unary ops ------------------------------------------------------------------ */
static pd_status unary(pd__exec *x, pd_tensor *const *in, pd_tensor *out, pd_dtype w, const pd__row_fn *tab,
                       const pd__ectx *ctx, int64_t cost) {
    if (numel(in[0]) != numel(out)) return pd__err(PD_ERR_SHAPE, "input and output sizes differ");
    pd_tensor v = *in[0], *vp = &v;
    v.ndim = out->ndim; /* same elements: walk it as the output */
    memcpy(v.shape, out->shape, sizeof v.shape);
    return run_rows(x, 1, &vp, w, out, w, row_of(tab, w), ctx, cost);
}

/* Float math: in float (float, float16, bfloat16) or double (double, integers). */
#define PD__FLOAT_UNARY(Op, tab, cost)                                                                       \
    pd_status pd__cpu_##Op(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {     \
        (void)n;                                                                                             \
        if (!(pd__ekind(in[0]->dtype) & PD_EK_NUM))                                                          \
            return pd__err(PD_ERR_UNSUPPORTED, #Op " of %s is not supported", pd_dtype_name(in[0]->dtype));   \
        return unary(x, in, out[0], pd__float_work(in[0]->dtype), tab, NULL, cost);                              \
    }
PD__FLOAT_UNARY(Sqrt, sqrt_rows, 4)
PD__FLOAT_UNARY(Exp, exp_rows, 8)
PD__FLOAT_UNARY(Log, log_rows, 8)
PD__FLOAT_UNARY(Reciprocal, recip_rows, 2)
PD__FLOAT_UNARY(Sigmoid, sigmoid_rows, 10)
PD__FLOAT_UNARY(Tanh, tanh_rows, 10)
PD__FLOAT_UNARY(Erf, erf_rows, 10)

pd_status pd__cpu_Neg(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)n;
    return unary(x, in, out[0], pd__arith_work(in[0]->dtype), neg_rows, NULL, 1);
}

pd_status pd__cpu_Relu(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)n;
    return unary(x, in, out[0], pd__arith_work(in[0]->dtype), relu_rows, NULL, 1);
}

pd_status pd__cpu_LeakyRelu(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    if (!(pd__ekind(in[0]->dtype) & PD_EK_FLOAT))
        return pd__err(PD_ERR_UNSUPPORTED, "LeakyRelu of %s is not supported", pd_dtype_name(in[0]->dtype));
    pd__ectx c;
    memset(&c, 0, sizeof c);
    c.alpha = pd__attr_f(n, "alpha", 0.01f);
    return unary(x, in, out[0], pd__float_work(in[0]->dtype), lrelu_rows, &c, 2);
}

pd_status pd__cpu_Gelu(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    const char *ap = pd__attr_s(n, "approximate", "none");
    if (!(pd__ekind(in[0]->dtype) & PD_EK_FLOAT))
        return pd__err(PD_ERR_UNSUPPORTED, "Gelu of %s is not supported", pd_dtype_name(in[0]->dtype));
    const pd__row_fn *tab = strcmp(ap, "tanh") == 0 ? gelut_rows : gelu_rows;
    if (tab == gelu_rows && strcmp(ap, "none") != 0)
        return pd__err(PD_ERR_UNSUPPORTED, "approximate='%s' is not supported", ap);
    return unary(x, in, out[0], pd__float_work(in[0]->dtype), tab, NULL, 14);
}

/* Clip's bounds in dtype w: inputs 1 and 2 (opset >= 11, of X's dtype),
 * the float attributes before; absent ones are -inf/+inf (the dtype's limits). */
pd_status pd__cpu_Clip(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    pd_dtype w = pd__arith_work(in[0]->dtype);
    if (!row_of(clip_rows, w))
        return pd__err(PD_ERR_UNSUPPORTED, "Clip of %s is not supported", pd_dtype_name(in[0]->dtype));
    pd__ectx c;
    memset(&c, 0, sizeof c);
    for (int k = 0; k < 2; k++) {
        unsigned char *dst = k ? c.hi : c.lo;
        const pd_tensor *b = (n->opset >= 11 && n->nin > k + 1) ? in[k + 1] : NULL;
        if (b && numel(b) >= 1 && b->data) {
            if (!convertible(b->dtype)) return pd__err(PD_ERR_UNSUPPORTED, "Clip bound of %s", pd_dtype_name(b->dtype));
            pd__ew_convert(x, w, dst, b->dtype, b->data, 1);
        } else {
            double v = k ? INFINITY : -INFINITY;
            if (n->opset < 11) v = pd__attr_f(n, k ? "max" : "min", k ? 3.4028234663852886e38f : -3.4028234663852886e38f);
            pd__ew_convert(x, w, dst, PD_DOUBLE, &v, 1);
        }
    }
    return unary(x, in, out[0], w, clip_rows, &c, 2);
}

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

/* ---- Cast, Identity ------------------------------------------------------------ */
pd_status pd__cpu_Cast(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)n;
    pd_tensor *y = out[0];
    if (!convertible(in[0]->dtype) || !convertible(y->dtype))
        return pd__err(PD_ERR_UNSUPPORTED, "Cast from %s to %s is not supported", pd_dtype_name(in[0]->dtype),
                       pd_dtype_name(y->dtype));
    if (numel(in[0]) != numel(y)) return pd__err(PD_ERR_SHAPE, "input and output sizes differ");
    pd__ew_convert(x, y->dtype, y->data, in[0]->dtype, in[0]->data, numel(y));
    return PD_OK;
}

pd_status pd__cpu_Identity(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)x;
    (void)n;
    pd_tensor *y = out[0];
    size_t es = pd_dtype_size(y->dtype);
    if (!es || y->dtype != in[0]->dtype) return pd__err(PD_ERR_UNSUPPORTED, "Identity of %s", pd_dtype_name(y->dtype));
    if (numel(in[0]) != numel(y)) return pd__err(PD_ERR_SHAPE, "input and output sizes differ");
    if (numel(y) > 0 && y->data != in[0]->data) memcpy(y->data, in[0]->data, (size_t)numel(y) * es);
    return PD_OK;
}

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
/* The input's dims with size-1 ones dropped and neighbours of the same kind
 * (reduced or kept) merged; the last one is walked contiguously:
 * reduced-last sums runs of C elements into one output (C = its size,
 * V = 1); kept-last adds runs of V elements into V outputs (C = 1). */
typedef struct pd__rjob {
    pd_dtype w; /* float, double, int64 or uint64 (integers sum as uint64) */
    bool mean, sgn;
    bool add;     /* dst += alpha * sum (floats, not mean) instead of dst = sum */
    double alpha;
    const char *src;
    char *dst;
    int nk, nr;                                 /* outer kept / reduced dims */
    int64_t ks[PD_MAX_DIMS], kst[PD_MAX_DIMS];  /* their sizes and input strides */
    int64_t rs[PD_MAX_DIMS], rst[PD_MAX_DIMS];
    int64_t rtotal;                             /* product of rs */
    int64_t C, V, blk, nblk;
    int64_t count;                              /* elements reduced into each output */
} pd__rjob;

/* Contiguous sum with 8 partial sums (vectorizes without reassociation). */
#define PD__DEF_RSUM(T, sfx)                                       \
    static T rsum_##sfx(const T *p, int64_t n) {                   \
        T s[8] = {0, 0, 0, 0, 0, 0, 0, 0};                         \
        int64_t i = 0;                                             \
        for (; i + 8 <= n; i += 8)                                 \
            for (int l = 0; l < 8; l++) s[l] += p[i + l];          \
        for (; i < n; i++) s[0] += p[i];                           \
        return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7])); \
    }
PD__DEF_RSUM(float, f32)
PD__DEF_RSUM(double, f64)
PD__DEF_RSUM(uint64_t, u64)

static inline float rfin_f32(float s, const pd__rjob *j) { return j->mean ? s / (float)j->count : s; }
static inline double rfin_f64(double s, const pd__rjob *j) { return j->mean ? s / (double)j->count : s; }
static inline uint64_t rfin_u64(uint64_t s, const pd__rjob *j) {
    if (!j->mean) return s;
    if (j->count == 0) return 0;
    return j->sgn ? (uint64_t)((int64_t)s / j->count) : s / (uint64_t)j->count;
}

/* Items [begin, end): an item is one output (reduced-last) or one block of
 * a run of V outputs (kept-last). */
#define PD__DEF_REDUCE(T, sfx)                                                              \
    static void reduce_##sfx(void *ctx, int64_t begin, int64_t end) {                       \
        const pd__rjob *j = ctx;                                                            \
        const T *src = (const T *)j->src;                                                   \
        T *dst = (T *)j->dst;                                                               \
        for (int64_t it = begin; it < end; it++) {                                          \
            int64_t q = it / j->nblk, cb = it % j->nblk, base = 0, rem = q;                 \
            for (int d = j->nk - 1; d >= 0; d--) {                                          \
                base += (rem % j->ks[d]) * j->kst[d];                                       \
                rem /= j->ks[d];                                                            \
            }                                                                               \
            int64_t ridx[PD_MAX_DIMS] = {0}, roff = 0;                                      \
            if (j->V == 1) {                                                                \
                T acc = 0;                                                                  \
                for (int64_t r = 0; r < j->rtotal; r++) {                                   \
                    acc += rsum_##sfx(src + base + roff, j->C);                             \
                    for (int d = j->nr - 1; d >= 0; d--) {                                  \
                        roff += j->rst[d];                                                  \
                        if (++ridx[d] < j->rs[d]) break;                                    \
                        roff -= j->rst[d] * j->rs[d];                                       \
                        ridx[d] = 0;                                                        \
                    }                                                                       \
                }                                                                           \
                T r = rfin_##sfx(acc, j);                                                   \
                dst[q] = j->add ? (T)(dst[q] + (T)j->alpha * r) : r;                        \
            } else {                                                                        \
                int64_t c0 = cb * j->blk, c1 = c0 + j->blk < j->V ? c0 + j->blk : j->V;     \
                T *o = dst + q * j->V + c0;                                                 \
                const T al = (T)j->alpha;                                                   \
                bool plain = !j->add || j->alpha == 1;                                      \
                if (!j->add)                                                                \
                    for (int64_t c = 0; c < c1 - c0; c++) o[c] = 0;                         \
                for (int64_t r = 0; r < j->rtotal; r++) {                                   \
                    const T *p = src + base + roff + c0;                                    \
                    if (plain)                                                              \
                        for (int64_t c = 0; c < c1 - c0; c++) o[c] += p[c];                 \
                    else                                                                    \
                        for (int64_t c = 0; c < c1 - c0; c++) o[c] += al * p[c];            \
                    for (int d = j->nr - 1; d >= 0; d--) {                                  \
                        roff += j->rst[d];                                                  \
                        if (++ridx[d] < j->rs[d]) break;                                    \
                        roff -= j->rst[d] * j->rs[d];                                       \
                        ridx[d] = 0;                                                        \
                    }                                                                       \
                }                                                                           \
                if (j->mean && !j->add)                                                     \
                    for (int64_t c = 0; c < c1 - c0; c++) o[c] = rfin_##sfx(o[c], j);       \
            }                                                                               \
        }                                                                                   \
    }
PD__DEF_REDUCE(float, f32)
PD__DEF_REDUCE(double, f64)
PD__DEF_REDUCE(uint64_t, u64)

/* Fills the job's dims from the input shape and the reduce mask; false
 * when nothing (of size > 1) is reduced. */
static bool rjob_dims(pd__rjob *j, int ndim, const int64_t *shape, const bool *mask) {
    int m = 0;
    int64_t s[PD_MAX_DIMS];
    bool red[PD_MAX_DIMS];
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == 1) continue;
        if (m > 0 && red[m - 1] == mask[d]) {
            s[m - 1] *= shape[d];
        } else {
            s[m] = shape[d];
            red[m++] = mask[d];
        }
    }
    int64_t st[PD_MAX_DIMS], acc = 1;
    for (int d = m - 1; d >= 0; d--) {
        st[d] = acc;
        acc *= s[d];
    }
    j->nk = j->nr = 0;
    j->count = 1;
    bool any = false;
    for (int d = 0; d < m; d++) {
        if (red[d]) j->count *= s[d];
        any |= red[d];
        if (d == m - 1) continue; /* the contiguous one */
        if (red[d]) {
            j->rs[j->nr] = s[d];
            j->rst[j->nr++] = st[d];
        } else {
            j->ks[j->nk] = s[d];
            j->kst[j->nk++] = st[d];
        }
    }
    if (!any) return false;
    bool red_last = red[m - 1];
    j->C = red_last ? s[m - 1] : 1;
    j->V = red_last ? 1 : s[m - 1];
    j->rtotal = 1;
    for (int d = 0; d < j->nr; d++) j->rtotal *= j->rs[d];
    return true;
}

/* Runs a job whose dims, dtype, src and dst are set: `on` outputs from
 * `total` inputs. */
static void rjob_run(const pd__exec *x, pd__rjob *j, int64_t on, int64_t total) {
    int nt = pd__ew_threads(x, total);
    int64_t rows = on / j->V;
    /* kept-last: blocks of up to 4096 outputs (accumulators stay in
     * cache, input rows stream), smaller only to give every thread work */
    j->blk = j->V < 4096 ? j->V : 4096;
    while (j->blk > 64 && rows * ((j->V + j->blk - 1) / j->blk) < nt) j->blk = (j->blk + 1) / 2;
    j->nblk = (j->V + j->blk - 1) / j->blk;
    pd__range_fn fn = j->w == PD_FLOAT ? reduce_f32 : j->w == PD_DOUBLE ? reduce_f64 : reduce_u64;
    pd__ew_par_range(x, rows * j->nblk, total, 1, fn, j);
}

/* The dtype a reduction runs in. */
static pd_dtype reduce_work(pd_dtype t) {
    unsigned k = pd__ekind(t);
    if (k == PD_EK_FLOAT) return pd__float_work(t);
    if (k == PD_EK_SINT) return PD_INT64;
    if (k == PD_EK_UINT) return PD_UINT64;
    return PD_UNDEFINED;
}

static pd_status reduce(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *out, bool mean) {
    const pd_tensor *xt = in[0];
    pd_dtype w = reduce_work(xt->dtype);
    if (w == PD_UNDEFINED || out->dtype != xt->dtype)
        return pd__err(PD_ERR_UNSUPPORTED, "reduction of %s is not supported", pd_dtype_name(xt->dtype));
    bool mask[PD_MAX_DIMS], noop;
    const pd_tensor *axes = (pd__reduce_axes_input(n) && n->nin > 1) ? in[1] : NULL;
    pd_status st = pd__reduce_mask(n, xt->ndim, axes, mask, &noop);
    if (st != PD_OK) return pd__err(st, "bad or unknown axes");
    int64_t on = numel(out);
    if (on <= 0) return PD_OK;
    pd_tensor v, ov;
    memset(&ov, 0, sizeof ov); /* set by stage_begin; GCC cannot see it through the error paths */
    PD_TRY(stage_begin(x, 1, in, w, &v, out, w, &ov));
    pd__rjob j;
    memset(&j, 0, sizeof j);
    size_t es = pd_dtype_size(w);
    if (numel(xt) == 0) { /* empty sums are 0, empty means NaN (0 for integers) */
        memset(ov.data, 0, (size_t)on * es);
        for (int64_t i = 0; mean && i < on; i++) {
            if (w == PD_FLOAT) ((float *)ov.data)[i] = NAN;
            if (w == PD_DOUBLE) ((double *)ov.data)[i] = NAN;
        }
    } else if (noop || !rjob_dims(&j, xt->ndim, xt->shape, mask)) {
        if (on != numel(xt)) return pd__err(PD_ERR_SHAPE, "output size does not match a reduction of the input");
        memcpy(ov.data, v.data, (size_t)on * es);
    } else {
        j.w = w;
        j.mean = mean;
        j.sgn = w == PD_INT64;
        j.src = v.data;
        j.dst = ov.data;
        if (j.count * (on) != numel(xt)) return pd__err(PD_ERR_SHAPE, "output size does not match the reduction");
        rjob_run(x, &j, on, numel(xt));
    }
    stage_end(x, out, &ov);
    return PD_OK;
}

pd_status pd__cpu_ReduceSum(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    return reduce(x, n, in, out[0], false);
}

pd_status pd__cpu_ReduceMean(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    return reduce(x, n, in, out[0], true);
}

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

/* ---- sums into existing tensors (the backward's broadcast reductions) --------------- */
typedef struct pd__axjob {
    double alpha;
    const void *src;
    void *dst;
} pd__axjob;

#define PD__DEF_AXPY(T, sfx)                                                   \
    static void axpy_##sfx(void *ctx, int64_t begin, int64_t end) {            \
        const pd__axjob *j = ctx;                                              \
        const T *s = (const T *)j->src + begin;                                \
        T *d = (T *)j->dst + begin;                                            \
        int64_t n = end - begin;                                               \
        if (j->alpha == 1) {                                                   \
            for (int64_t i = 0; i < n; i++) d[i] += s[i];                      \
        } else {                                                               \
            const T a = (T)j->alpha;                                           \
            for (int64_t i = 0; i < n; i++) d[i] += a * s[i];                  \
        }                                                                      \
    }
PD__DEF_AXPY(float, f32)
PD__DEF_AXPY(double, f64)

void pd__ew_axpy(const pd__exec *x, pd_dtype w, int64_t n, double alpha, const void *src, void *dst) {
    pd__axjob j = {alpha, src, dst};
    pd__ew_par_range(x, n, n, 64, w == PD_FLOAT ? axpy_f32 : axpy_f64, &j);
}

void pd__ew_reduce_add(const pd__exec *x, pd_dtype w, int ndim, const int64_t *shape, const bool *mask,
                       const void *src, void *dst, double alpha) {
    int64_t total = pd__shape_numel(ndim, shape);
    if (total <= 0) return;
    pd__rjob j;
    memset(&j, 0, sizeof j);
    if (!rjob_dims(&j, ndim, shape, mask)) { /* nothing of size > 1 reduced */
        pd__ew_axpy(x, w, total, alpha, src, dst);
        return;
    }
    j.w = w;
    j.add = true;
    j.alpha = alpha;
    j.src = src;
    j.dst = dst;
    rjob_run(x, &j, total / j.count, total);
}

/* dst += alpha * src through blocks of doubles: the loads and stores Cast uses. */
typedef struct pd__cajob {
    pd_dtype dt, st;
    char *dst;
    const char *src;
    double alpha;
} pd__cajob;

static void convert_add_range(void *ctx, int64_t begin, int64_t end) {
    const pd__cajob *j = ctx;
    size_t ds = pd_dtype_size(j->dt), ss = pd_dtype_size(j->st);
    pd__wide ws, wd;
    for (int64_t b = begin; b < end; b += PD__BLK) {
        int64_t n = end - b < PD__BLK ? end - b : PD__BLK;
        wide_load(j->st, j->src + (size_t)b * ss, n, &ws);
        wide_load(j->dt, j->dst + (size_t)b * ds, n, &wd);
        for (int64_t i = 0; i < n; i++) wd.f[i] += j->alpha * ws.f[i];
        wide_store(j->dt, j->dst + (size_t)b * ds, n, PD_WIDE_F, &wd);
    }
}

void pd__ew_convert_add(const pd__exec *x, pd_dtype dt, void *dst, pd_dtype st, const void *src, int64_t n,
                        double alpha) {
    if (n <= 0 || pd__ekind(dt) != PD_EK_FLOAT || pd__ekind(st) != PD_EK_FLOAT) return;
    if (dt == st && (dt == PD_FLOAT || dt == PD_DOUBLE)) {
        pd__ew_axpy(x, dt, n, alpha, src, dst);
        return;
    }
    pd__cajob j = {dt, st, dst, src, alpha};
    pd__ew_par_range(x, n, n, PD__BLK, convert_add_range, &j);
}
