/* elementwise.c - CPU kernels of the element-wise ops (Add ... Where, Cast,
 * Identity; then the comparisons and logic, the bitwise ops and BitShift,
 * Max / Min / Mean, Mod, PRelu, Abs ... Round, the activations,
 * trigonometry, CastLike and the quantization ops) and of the
 * reductions (ReduceSum and ReduceMean on the fast path below; ReduceMax
 * ... ReduceLogSumExp on a plain one at the end), each forward beside its
 * backward.
 *
 * How it works: docs/INTERNALS.md, "runtime/cpu/elementwise.c".
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
    case PD_INT4: case PD_UINT4: case PD_INT2: case PD_UINT2:
        for (int64_t i = 0; i < n; i++) w->i[i] = pd__get_i(t, src, i);
        return PD_WIDE_I;
    default:
        if (!pd__dtype_lowbit(t)) return -1;
        for (int64_t i = 0; i < n; i++) w->f[i] = pd__get_f(t, src, i); /* float8, float4: exact in double */
        return PD_WIDE_F;
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
    default: /* the low-bit types, Cast's defaults: saturate, e8m0 rounds up */
        if (!pd__dtype_lowbit(t)) return;
        for (int64_t i = 0; i < n; i++) {
            if (cat == PD_WIDE_F) pd__set_f(t, dst, i, w->f[i]);
            else pd__set_i(t, dst, i, cat == PD_WIDE_I ? w->i[i] : (int64_t)w->u[i]);
        }
        return;
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

static bool convertible(pd_dtype t) { return pd__ekind(t) != 0 || pd__dtype_lowbit(t); }

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
    double alpha, beta; /* beta: HardSigmoid's, Selu's gamma, Shrink's bias */
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
    double beta;   /* HardSigmoid's beta, Selu's gamma */
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
/* dst = src, bytes long, over the threads (the range is in bytes) */
typedef struct copy_job {
    char *dst;
    const char *src;
} copy_job;

static void copy_range(void *ctx, int64_t b, int64_t e) {
    copy_job *j = ctx;
    memcpy(j->dst + b, j->src + b, (size_t)(e - b));
}

static void par_copy(const pd__exec *x, void *dst, const void *src, int64_t bytes) {
    copy_job j = {dst, src};
    pd__ew_par_range(x, bytes, bytes / 4, 4096, copy_range, &j);
}

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
        par_copy(x, din->data, term, on * (int64_t)pd_dtype_size(w));
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
    pd_tensor *y = out[0];
    if (!convertible(in[0]->dtype) || !convertible(y->dtype))
        return pd__err(PD_ERR_UNSUPPORTED, "Cast from %s to %s is not supported", pd_dtype_name(in[0]->dtype),
                       pd_dtype_name(y->dtype));
    if (numel(in[0]) != numel(y)) return pd__err(PD_ERR_SHAPE, "input and output sizes differ");
    /* saturate = 0 (float8: overflow to inf or NaN) and e8m0's other rounding
     * modes take the scalar encoder; the defaults go the blocked way */
    bool sat = pd__attr_i(n, "saturate", 1) != 0;
    const char *rm = pd__attr_s(n, "round_mode", "up");
    int mode = !strcmp(rm, "down") ? PD_RM_DOWN : !strcmp(rm, "nearest") ? PD_RM_NEAREST : PD_RM_UP;
    bool f8 = pd__dtype_lowbit(y->dtype) && pd__dtype_bits(y->dtype) == 8;
    if (f8 && y->dtype != in[0]->dtype && (!sat || mode != PD_RM_UP)) {
        for (int64_t i = 0; i < numel(y); i++)
            ((uint8_t *)y->data)[i] = pd__lowfloat_encode(y->dtype, pd__get_f(in[0]->dtype, in[0]->data, i), sat, mode);
        return PD_OK;
    }
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

/* ==== comparisons, logic, Max / Min / Mean, Mod, more unary ops ==================== */
/* These follow the rows above: one expression per op, instantiated per
 * dtype, run by the same broadcast iterator and staging. Gradients follow
 * PyTorch's derivatives.yaml (noted per op). */

#define PD__NO_GRAD(name)                                                                                       \
    pd_status pd__cpu_##name##_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out, \
                                   pd_tensor *const *dout, pd_tensor *const *din) {                             \
        (void)x, (void)n, (void)in, (void)out, (void)dout, (void)din;                                           \
        return pd__err(PD_ERR_UNSUPPORTED, "%s is not differentiable", #name);                                  \
    }

/* ---- comparisons and logic: bool out ---------------------------------------------- */
#define PD__DEF_CMP(_, dt, T, sfx, W, M, MIN, MAX)  \
    PD__BIN_ROW(lt_##sfx, T, uint8_t, x < y)        \
    PD__BIN_ROW(le_##sfx, T, uint8_t, x <= y)       \
    PD__BIN_ROW(gt_##sfx, T, uint8_t, x > y)        \
    PD__BIN_ROW(ge_##sfx, T, uint8_t, x >= y)
PD__NUMS(PD__DEF_CMP, _)
static const pd__row_fn lt_rows[PD__NDT] = {PD__NUMS(PD__TAB, lt)};
static const pd__row_fn le_rows[PD__NDT] = {PD__NUMS(PD__TAB, le)};
static const pd__row_fn gt_rows[PD__NDT] = {PD__NUMS(PD__TAB, gt)};
static const pd__row_fn ge_rows[PD__NDT] = {PD__NUMS(PD__TAB, ge)};
PD__BIN_ROW(and_b8, uint8_t, uint8_t, (x != 0) & (y != 0))
PD__BIN_ROW(or_b8, uint8_t, uint8_t, (x != 0) | (y != 0))
PD__BIN_ROW(xor_b8, uint8_t, uint8_t, (x != 0) ^ (y != 0))
PD__UN_ROW(not_b8, uint8_t, , x == 0)
static const pd__row_fn and_rows[PD__NDT] = {[PD_BOOL] = and_b8};
static const pd__row_fn or_rows[PD__NDT] = {[PD_BOOL] = or_b8};
static const pd__row_fn xor_rows[PD__NDT] = {[PD_BOOL] = xor_b8};
static const pd__row_fn not_rows[PD__NDT] = {[PD_BOOL] = not_b8};

pd_status pd__cpu_Less(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    return binary(x, n, in, out[0], lt_rows, true);
}
pd_status pd__cpu_LessOrEqual(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    return binary(x, n, in, out[0], le_rows, true);
}
pd_status pd__cpu_Greater(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    return binary(x, n, in, out[0], gt_rows, true);
}
pd_status pd__cpu_GreaterOrEqual(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    return binary(x, n, in, out[0], ge_rows, true);
}
pd_status pd__cpu_And(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    return binary(x, n, in, out[0], and_rows, true);
}
pd_status pd__cpu_Or(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    return binary(x, n, in, out[0], or_rows, true);
}
pd_status pd__cpu_Xor(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    return binary(x, n, in, out[0], xor_rows, true);
}
pd_status pd__cpu_Not(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)n;
    return unary(x, in, out[0], PD_BOOL, not_rows, NULL, 1);
}
PD__NO_GRAD(Less)
PD__NO_GRAD(LessOrEqual)
PD__NO_GRAD(Greater)
PD__NO_GRAD(GreaterOrEqual)
PD__NO_GRAD(And)
PD__NO_GRAD(Or)
PD__NO_GRAD(Xor)
PD__NO_GRAD(Not)

/* ---- bitwise ops on integers; BitShift on unsigned ones ----------------------------- */
/* A shift by the width or more gives 0, as numpy's (C leaves it undefined);
 * the left shift runs in W so that uint8 and uint16 do not shift an int. */
#define PD__DEF_BITS(_, dt, T, sfx, W, M, MIN, MAX) \
    PD__BIN_ROW(band_##sfx, T, T, x & y)            \
    PD__BIN_ROW(bor_##sfx, T, T, x | y)             \
    PD__BIN_ROW(bxor_##sfx, T, T, x ^ y)            \
    PD__UN_ROW(bnot_##sfx, T, , ~x)
#define PD__DEF_SHIFT(_, dt, T, sfx, W, M, MIN, MAX)                               \
    PD__BIN_ROW(shl_##sfx, T, T, y >= 8 * sizeof(T) ? (T)0 : (T)((W)x << y))      \
    PD__BIN_ROW(shr_##sfx, T, T, y >= 8 * sizeof(T) ? (T)0 : (T)(x >> y))
PD__INTS(PD__DEF_BITS, _)
PD__UINTS(PD__DEF_SHIFT, _)
static const pd__row_fn band_rows[PD__NDT] = {PD__INTS(PD__TAB, band)};
static const pd__row_fn bor_rows[PD__NDT] = {PD__INTS(PD__TAB, bor)};
static const pd__row_fn bxor_rows[PD__NDT] = {PD__INTS(PD__TAB, bxor)};
static const pd__row_fn bnot_rows[PD__NDT] = {PD__INTS(PD__TAB, bnot)};
static const pd__row_fn shl_rows[PD__NDT] = {PD__UINTS(PD__TAB, shl)};
static const pd__row_fn shr_rows[PD__NDT] = {PD__UINTS(PD__TAB, shr)};

pd_status pd__cpu_BitwiseAnd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    return binary(x, n, in, out[0], band_rows, false);
}
pd_status pd__cpu_BitwiseOr(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    return binary(x, n, in, out[0], bor_rows, false);
}
pd_status pd__cpu_BitwiseXor(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    return binary(x, n, in, out[0], bxor_rows, false);
}
pd_status pd__cpu_BitwiseNot(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)n;
    return unary(x, in, out[0], in[0]->dtype, bnot_rows, NULL, 1);
}
pd_status pd__cpu_BitShift(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    bool left = strcmp(pd__attr_s(n, "direction", ""), "LEFT") == 0;
    return binary(x, n, in, out[0], left ? shl_rows : shr_rows, false);
}
PD__NO_GRAD(BitwiseAnd)
PD__NO_GRAD(BitwiseOr)
PD__NO_GRAD(BitwiseXor)
PD__NO_GRAD(BitwiseNot)
PD__NO_GRAD(BitShift)

/* IsNaN, IsInf: float in (16-bit floats staged to float), bool out; IsInf's
 * detect_negative / detect_positive in ctx->lo[0] / hi[0]. */
#define PD__PRED_ROW(name, T, EXPR)              \
    PD__VEC static void name(PD__ROW_ARGS) {     \
        uint8_t *o = (uint8_t *)o_;              \
        const T *a = (const T *)a_;              \
        const pd__ectx *ctx = ctx_;              \
        const int neg = ctx->lo[0], pos = ctx->hi[0]; \
        (void)neg;                               \
        (void)pos;                               \
        (void)sa;                                \
        (void)b_;                                \
        (void)sb;                                \
        (void)c_;                                \
        (void)sc;                                \
        for (int64_t i = 0; i < n; i++) {        \
            const T x = a[i];                    \
            o[i] = (uint8_t)(EXPR);              \
        }                                        \
    }
#define PD__DEF_PRED(_, dt, T, sfx, W, M, MIN, MAX)   \
    PD__PRED_ROW(isnan_##sfx, T, isnan(x))            \
    PD__PRED_ROW(isinf_##sfx, T, (neg && x == -(T)INFINITY) || (pos && x == (T)INFINITY))
PD__FLOATS(PD__DEF_PRED, _)
static const pd__row_fn isnan_rows[PD__NDT] = {PD__FLOATS(PD__TAB, isnan)};
static const pd__row_fn isinf_rows[PD__NDT] = {PD__FLOATS(PD__TAB, isinf)};

/* A unary row whose output dtype (wout) is not its input's (w). */
static pd_status unary_as(pd__exec *x, pd_tensor *const *in, pd_tensor *out, pd_dtype w, pd_dtype wout,
                          const pd__row_fn *tab, const pd__ectx *ctx, int64_t cost) {
    if (numel(in[0]) != numel(out)) return pd__err(PD_ERR_SHAPE, "input and output sizes differ");
    pd_tensor v = *in[0], *vp = &v;
    v.ndim = out->ndim;
    memcpy(v.shape, out->shape, sizeof v.shape);
    return run_rows(x, 1, &vp, w, out, wout, row_of(tab, w), ctx, cost);
}

pd_status pd__cpu_IsNaN(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)n;
    pd__ectx c;
    memset(&c, 0, sizeof c);
    return unary_as(x, in, out[0], pd__float_work(in[0]->dtype), PD_BOOL, isnan_rows, &c, 1);
}
pd_status pd__cpu_IsInf(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    pd__ectx c;
    memset(&c, 0, sizeof c);
    c.lo[0] = pd__attr_i(n, "detect_negative", 1) != 0;
    c.hi[0] = pd__attr_i(n, "detect_positive", 1) != 0;
    return unary_as(x, in, out[0], pd__float_work(in[0]->dtype), PD_BOOL, isinf_rows, &c, 1);
}
PD__NO_GRAD(IsNaN)
PD__NO_GRAD(IsInf)

/* ---- Max, Min, Mean: variadic, broadcasting ------------------------------------------ */
/* Floats propagate NaN (numpy's maximum, torch.maximum). */
#define PD__DEF_MAXMIN_F(_, dt, T, sfx, W, M, MIN, MAX)           \
    PD__BIN_ROW(max_##sfx, T, T, (x > y || isnan(x)) ? x : y)     \
    PD__BIN_ROW(min_##sfx, T, T, (x < y || isnan(x)) ? x : y)
#define PD__DEF_MAXMIN_I(_, dt, T, sfx, W, M, MIN, MAX) \
    PD__BIN_ROW(max_##sfx, T, T, x > y ? x : y)         \
    PD__BIN_ROW(min_##sfx, T, T, x < y ? x : y)
PD__FLOATS(PD__DEF_MAXMIN_F, _)
PD__INTS(PD__DEF_MAXMIN_I, _)
static const pd__row_fn max_rows[PD__NDT] = {PD__NUMS(PD__TAB, max)};
static const pd__row_fn min_rows[PD__NDT] = {PD__NUMS(PD__TAB, min)};
#define PD__DEF_DIVK(_, dt, T, sfx, W, M, MIN, MAX) PD__UN_ROW(divk_##sfx, T, const T k = (T)ctx->alpha, x / k)
PD__FLOATS(PD__DEF_DIVK, _)
static const pd__row_fn divk_rows[PD__NDT] = {PD__FLOATS(PD__TAB, divk)};

/* out = in0 op in1, then out = out op in_k (Sum's loop); Mean divides by the count. */
static pd_status variadic(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *y, const pd__row_fn *tab,
                          bool mean) {
    int nin = n->nin;
    if (nin < 1 || nin > PD__MAX_STAGED) return pd__err(PD_ERR_UNSUPPORTED, "%s of %d inputs", n->op_type, nin);
    for (int k = 0; k < nin; k++)
        if (!in[k]) return pd__err(PD_ERR_INVALID, "input %d is missing", k);
    if (numel(y) <= 0) return PD_OK;
    pd_dtype w = pd__arith_work(in[0]->dtype);
    pd__row_fn fn = row_of(tab, w), dk = mean ? row_of(divk_rows, w) : NULL;
    if (!fn || (mean && !dk))
        return pd__err(PD_ERR_UNSUPPORTED, "%s of %s is not supported", n->op_type, pd_dtype_name(in[0]->dtype));
    pd_tensor view[PD__MAX_STAGED], ov;
    PD_TRY(stage_begin(x, nin, in, w, view, y, w, &ov));
    if (nin == 1) {
        if (numel(&view[0]) != numel(&ov)) return pd__err(PD_ERR_SHAPE, "input and output sizes differ");
        memcpy(ov.data, view[0].data, (size_t)numel(&ov) * pd_dtype_size(w));
    } else {
        PD_TRY(pd__ew_bcast_run(x, fn, NULL, &ov, 2, view, 1));
        for (int k = 2; k < nin; k++) {
            pd_tensor ab[2] = {ov, view[k]};
            PD_TRY(pd__ew_bcast_run(x, fn, NULL, &ov, 2, ab, 1));
        }
    }
    if (mean) {
        pd__ectx c;
        memset(&c, 0, sizeof c);
        c.alpha = nin;
        PD_TRY(pd__ew_bcast_run(x, dk, &c, &ov, 1, &ov, 1));
    }
    stage_end(x, y, &ov);
    return PD_OK;
}

pd_status pd__cpu_Max(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    return variadic(x, n, in, out[0], max_rows, false);
}
pd_status pd__cpu_Min(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    return variadic(x, n, in, out[0], min_rows, false);
}
pd_status pd__cpu_Mean(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    return variadic(x, n, in, out[0], add_rows, true);
}

/* Max / Min's gradient rows: cnt += (y == x_k) (g's stream carries y);
 * then each input gets h = dout / cnt where it equals y. */
#define PD__DEF_MAXMIN_GRADS(_, dt, T, sfx, W, M, MIN, MAX)           \
    PD__GRAD_ROW(geqcnt_##sfx, T, pd__sel_##sfx(g == u, (T)1, (T)0))  \
    PD__GRAD_ROW(geqsel_##sfx, T, pd__sel_##sfx(u == v, g, (T)0))
PD__FLOATS(PD__DEF_MAXMIN_GRADS, _)
static const pd__row_fn geqcnt_rows[PD__NDT] = PD__GTAB(geqcnt);
static const pd__row_fn geqsel_rows[PD__NDT] = PD__GTAB(geqsel);

/* Mean: each input gets dout / n, summed over the dims it is broadcast
 * along. Max, Min: as torch.maximum / minimum, dout goes to the inputs
 * equal to the output, split evenly among them (dout / 2 at a tie of two);
 * n-ary as the same rule. */
static pd_status variadic_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                              pd_tensor *const *dout, pd_tensor *const *din, bool mean) {
    const pd_tensor *y = out[0];
    if (!dout || !dout[0] || !is_float(y->dtype)) return PD_OK;
    int nin = n->nin;
    if (nin < 1 || nin > PD__MAX_STAGED) return pd__err(PD_ERR_UNSUPPORTED, "%s of %d inputs", n->op_type, nin);
    pd_dtype w = pd__float_work(y->dtype);
    int64_t on = numel(y);
    PD_TRY(check_size(dout[0], y, "the output gradient"));
    bool any = false, tmp_o = false;
    size_t tmp_i = 0, need = stage_bytes(dout[0], w);
    for (int i = 0; i < nin; i++) {
        if (!in[i]) return pd__err(PD_ERR_INVALID, "input %d is missing", i);
        if (!mean) need += stage_bytes(in[i], w);
        if (!wanted(din, i, in[i])) continue;
        PD_TRY(check_size(din[i], in[i], "an input gradient"));
        any = true;
        tmp_o |= needs_tmp_o(!mean, on, numel(in[i]), din[i]->dtype, w);
        if (needs_tmp_i(on, numel(in[i]), din[i]->dtype, w) && wbytes(numel(in[i]), w) > tmp_i)
            tmp_i = wbytes(numel(in[i]), w);
    }
    if (!any) return PD_OK;
    if (!mean) need += stage_bytes(y, w) + 2 * wbytes(on, w);
    need += (tmp_o ? wbytes(on, w) : 0) + tmp_i;
    pd__arena ar;
    PD_TRY(arena_init(x, &ar, need));
    pd_tensor g = stage(x, &ar, dout[0], w);
    g.ndim = y->ndim;
    memcpy(g.shape, y->shape, sizeof g.shape);
    pd__gctx ctx;
    memset(&ctx, 0, sizeof ctx);
    pd_tensor v[PD__MAX_STAGED], yv = g, h = g;
    if (!mean) {
        for (int k = 0; k < nin; k++) v[k] = stage(x, &ar, in[k], w);
        yv = stage(x, &ar, y, w);
        pd_tensor cnt = yv;
        cnt.data = arena_take(&ar, on, w);
        memset(cnt.data, 0, (size_t)on * pd_dtype_size(w));
        ctx.acc = true;
        for (int k = 0; k < nin; k++) {
            pd_tensor s[3] = {yv, v[k], yv};
            PD_TRY(pd__ew_bcast_run(x, row_of(geqcnt_rows, w), &ctx, &cnt, 3, s, 1));
        }
        ctx.acc = false;
        h.data = arena_take(&ar, on, w);
        pd_tensor s[3] = {g, cnt, g};
        PD_TRY(pd__ew_bcast_run(x, row_of(gdiva_rows, w), &ctx, &h, 3, s, 1));
    }
    void *to = tmp_o ? arena_take(&ar, on, w) : NULL, *ti = tmp_i ? ar.p + ar.off : NULL;
    for (int i = 0; i < nin; i++) {
        if (!wanted(din, i, in[i])) continue;
        if (mean) {
            PD_TRY(add_term(x, w, y, in[i]->ndim, in[i]->shape, din[i], NULL, ctx, 1, &g, 1, 1.0 / nin, NULL, ti,
                            false));
        } else {
            pd_tensor s[3] = {h, v[i], yv};
            PD_TRY(add_term(x, w, y, in[i]->ndim, in[i]->shape, din[i], row_of(geqsel_rows, w), ctx, 3, s, 2, 1.0,
                            to, ti, false));
        }
    }
    return PD_OK;
}

pd_status pd__cpu_Max_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                          pd_tensor *const *dout, pd_tensor *const *din) {
    return variadic_bwd(x, n, in, out, dout, din, false);
}
pd_status pd__cpu_Min_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                          pd_tensor *const *dout, pd_tensor *const *din) {
    return variadic_bwd(x, n, in, out, dout, din, false);
}
pd_status pd__cpu_Mean_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                           pd_tensor *const *dout, pd_tensor *const *din) {
    return variadic_bwd(x, n, in, out, dout, din, true);
}

/* ---- Mod --------------------------------------------------------------------------- */
/* fmod = 1: the dividend's sign (C's fmod and %); fmod = 0: the divisor's
 * (Python's %). An integer x mod 0 gives 0 (ONNX leaves it undefined; C traps). */
#define PD__PYMOD(r, y) (((r) != 0 && (((r) < 0) != ((y) < 0))) ? (r) + (y) : (r))
#define PD__DEF_MOD_F(_, dt, T, sfx, W, M, MIN, MAX) \
    PD__BIN_ROW(fmod_##sfx, T, T, fmod##M(x, y))     \
    PD__BIN_ROW(pymod_##sfx, T, T, PD__PYMOD(fmod##M(x, y), y))
#define PD__IMOD(T, x, y) ((y) == 0 || (y) == (T)-1 ? (T)0 : (T)((x) % (y)))
#define PD__DEF_MOD_S(_, dt, T, sfx, W, M, MIN, MAX) \
    PD__BIN_ROW(fmod_##sfx, T, T, PD__IMOD(T, x, y)) \
    PD__BIN_ROW(pymod_##sfx, T, T, (T)PD__PYMOD(PD__IMOD(T, x, y), y))
#define PD__DEF_MOD_U(_, dt, T, sfx, W, M, MIN, MAX)     \
    PD__BIN_ROW(fmod_##sfx, T, T, y == 0 ? (T)0 : (T)(x % y)) \
    PD__BIN_ROW(pymod_##sfx, T, T, y == 0 ? (T)0 : (T)(x % y))
PD__FLOATS(PD__DEF_MOD_F, _)
PD__SINTS(PD__DEF_MOD_S, _)
PD__UINTS(PD__DEF_MOD_U, _)
static const pd__row_fn fmod_rows[PD__NDT] = {PD__NUMS(PD__TAB, fmod)};
static const pd__row_fn pymod_rows[PD__NDT] = {PD__NUMS(PD__TAB, pymod)};

pd_status pd__cpu_Mod(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    return binary(x, n, in, out[0], pd__attr_i(n, "fmod", 0) ? fmod_rows : pymod_rows, false);
}

/* As torch.fmod / torch.remainder: dA = dout, dB = -dout * trunc(A / B)
 * (fmod = 1) or floor(A / B) (fmod = 0). */
#define PD__DEF_MOD_GRADS(_, dt, T, sfx, W, M, MIN, MAX)    \
    PD__GRAD_ROW(gmodt_##sfx, T, -g * trunc##M(u / v))      \
    PD__GRAD_ROW(gmodf_##sfx, T, -g * floor##M(u / v))
PD__FLOATS(PD__DEF_MOD_GRADS, _)
static const pd__row_fn gmodt_rows[PD__NDT] = PD__GTAB(gmodt);
static const pd__row_fn gmodf_rows[PD__NDT] = PD__GTAB(gmodf);

pd_status pd__cpu_Mod_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                          pd_tensor *const *dout, pd_tensor *const *din) {
    static const pd__bspec t = {{NULL, gmodt_rows}, {-1, 0}, {-1, 1}, {1, 1}, 4};
    static const pd__bspec f = {{NULL, gmodf_rows}, {-1, 0}, {-1, 1}, {1, 1}, 4};
    return binary_bwd(x, n, in, out, dout, din, pd__attr_i(n, "fmod", 0) ? &t : &f);
}

/* ---- PRelu ------------------------------------------------------------------------- */
#define PD__DEF_PRELU(_, dt, T, sfx, W, M, MIN, MAX)                  \
    PD__BIN_ROW(prelu_##sfx, T, T, pd__sel_##sfx(x < 0, x * y, x))    \
    PD__GRAD_ROW(gprelux_##sfx, T, pd__sel_##sfx(u > 0, g, g * v))    \
    PD__GRAD_ROW(gprelus_##sfx, T, pd__sel_##sfx(u > 0, (T)0, g * u))
PD__FLOATS(PD__DEF_PRELU, _)
static const pd__row_fn prelu_rows[PD__NDT] = {PD__FLOATS(PD__TAB, prelu)};
static const pd__row_fn gprelux_rows[PD__NDT] = PD__GTAB(gprelux);
static const pd__row_fn gprelus_rows[PD__NDT] = PD__GTAB(gprelus);

/* The slope as it broadcasts to X: opsets < 7 take one value, X's shape,
 * or one per channel (axis 1: shape [C, 1, ...]). */
static void prelu_views(const pd__node *n, pd_tensor *const *in, pd_tensor *v) {
    v[0] = *in[0];
    v[1] = *in[1];
    if (n->opset >= 7) return;
    if (numel(&v[1]) == 1) {
        v[1].ndim = 0;
    } else if (numel(&v[1]) == numel(&v[0])) {
        v[1].ndim = v[0].ndim;
        memcpy(v[1].shape, v[0].shape, sizeof v[1].shape);
    } else if (v[0].ndim >= 2) {
        v[1].ndim = v[0].ndim - 1;
        v[1].shape[0] = v[0].shape[1];
        for (int d = 1; d < v[1].ndim; d++) v[1].shape[d] = 1;
    }
}

pd_status pd__cpu_PRelu(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    pd_tensor v[2];
    prelu_views(n, in, v);
    if (!is_float(v[0].dtype) || v[1].dtype != v[0].dtype)
        return pd__err(PD_ERR_UNSUPPORTED, "PRelu of %s is not supported", pd_dtype_name(v[0].dtype));
    pd_dtype w = pd__float_work(v[0].dtype);
    pd_tensor *vp[2] = {&v[0], &v[1]};
    return run_rows(x, 2, vp, w, out[0], w, row_of(prelu_rows, w), NULL, 2);
}

/* As torch's prelu: dX = dout where x > 0, dout * slope elsewhere; dslope =
 * dout * x where x <= 0, summed over the dims the slope is broadcast along. */
pd_status pd__cpu_PRelu_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                            pd_tensor *const *dout, pd_tensor *const *din) {
    static const pd__bspec sp = {{gprelux_rows, gprelus_rows}, {0, 0}, {1, -1}, {1, 1}, 2};
    pd_tensor v[2];
    prelu_views(n, in, v);
    pd_tensor *vp[2] = {&v[0], &v[1]};
    return binary_bwd(x, n, vp, out, dout, din, &sp);
}

/* ---- unary: Abs, Sign, Floor, Ceil, Round -------------------------------------------------- */
#define PD__DEF_ABS_F(_, dt, T, sfx, W, M, MIN, MAX)                                  \
    PD__UN_ROW(abs_##sfx, T, , fabs##M(x))                                            \
    PD__UN_ROW(sign_##sfx, T, , pd__sel_##sfx(x > 0, (T)1, pd__sel_##sfx(x < 0, (T)-1, x))) \
    PD__UN_ROW(floor_##sfx, T, , floor##M(x))                                         \
    PD__UN_ROW(ceil_##sfx, T, , ceil##M(x))                                           \
    PD__UN_ROW(round_##sfx, T, , rint##M(x))
#define PD__DEF_ABS_S(_, dt, T, sfx, W, M, MIN, MAX)          \
    PD__UN_ROW(abs_##sfx, T, , x < 0 ? (T)(0u - (W)x) : x)    \
    PD__UN_ROW(sign_##sfx, T, , (x > 0) - (x < 0))
#define PD__DEF_ABS_U(_, dt, T, sfx, W, M, MIN, MAX) \
    PD__UN_ROW(abs_##sfx, T, , x)                    \
    PD__UN_ROW(sign_##sfx, T, , x > 0)
PD__FLOATS(PD__DEF_ABS_F, _)
PD__SINTS(PD__DEF_ABS_S, _)
PD__UINTS(PD__DEF_ABS_U, _)
static const pd__row_fn abs_rows[PD__NDT] = {PD__NUMS(PD__TAB, abs)};
static const pd__row_fn sign_rows[PD__NDT] = {PD__NUMS(PD__TAB, sign)};
static const pd__row_fn floor_rows[PD__NDT] = {PD__FLOATS(PD__TAB, floor)};
static const pd__row_fn ceil_rows[PD__NDT] = {PD__FLOATS(PD__TAB, ceil)};
static const pd__row_fn round_rows[PD__NDT] = {PD__FLOATS(PD__TAB, round)};

/* In the dtype itself (16-bit floats in float). */
#define PD__ARITH_UNARY(Op, tab)                                                                          \
    pd_status pd__cpu_##Op(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {  \
        (void)n;                                                                                          \
        return unary(x, in, out[0], pd__arith_work(in[0]->dtype), tab, NULL, 1);                          \
    }
PD__ARITH_UNARY(Abs, abs_rows)
PD__ARITH_UNARY(Sign, sign_rows)
PD__ARITH_UNARY(Floor, floor_rows)
PD__ARITH_UNARY(Ceil, ceil_rows)
PD__ARITH_UNARY(Round, round_rows)
/* Sign, Floor, Ceil, Round: gradient 0 almost everywhere; not differentiable
 * here, so that training through one is refused naming the node. */
PD__NO_GRAD(Sign)
PD__NO_GRAD(Floor)
PD__NO_GRAD(Ceil)
PD__NO_GRAD(Round)

/* ---- activations and trigonometry: float, with ctx alpha / beta --------------------------------- */
#define PD__DEF_ACT_FNS(_, dt, T, sfx, W, M, MIN, MAX)                                            \
    PD__INLINE T clamp01_##sfx(T v) {                                                             \
        v = pd__sel_##sfx(v < 0, (T)0, v);                                                        \
        return pd__sel_##sfx(v > 1, (T)1, v);                                                     \
    }                                                                                             \
    PD__INLINE T splus_##sfx(T x) {                                                            \
        return pd__sel_##sfx(x > 0, x, (T)0) + log1p##M(pd__exp_##sfx(-pd__fabs_##sfx(x)));       \
    }                                                                                             \
    PD__INLINE T mish_d_##sfx(T x) {                                                              \
        T t = pd__tanh_##sfx(splus_##sfx(x));                                                  \
        return t + x * pd__sigmoid_##sfx(x) * ((T)1 - t * t);                                     \
    }                                                                                             \
    PD__INLINE T swish_d_##sfx(T x, T al) {                                                       \
        T sg = pd__sigmoid_##sfx(al * x);                                                         \
        return sg + al * x * sg * ((T)1 - sg);                                                    \
    }
PD__FLOATS(PD__DEF_ACT_FNS, _)

#define PD__AB(T)                  \
    const T al = (T)ctx->alpha;    \
    const T be = (T)ctx->beta;     \
    (void)al;                      \
    (void)be
#define PD__DEF_ACTS(_, dt, T, sfx, W, M, MIN, MAX)                                                           \
    PD__UN_ROW(hsig_##sfx, T, PD__AB(T), clamp01_##sfx(al * x + be))                                          \
    PD__UN_ROW(hswish_##sfx, T, , x * clamp01_##sfx(x / (T)6 + (T)0.5))                                       \
    PD__UN_ROW(softplus_##sfx, T, , splus_##sfx(x))                                                        \
    PD__UN_ROW(softsign_##sfx, T, , x / ((T)1 + pd__fabs_##sfx(x)))                                           \
    PD__UN_ROW(elu_##sfx, T, PD__AB(T), pd__sel_##sfx(x < 0, al * expm1##M(x), x))                            \
    PD__UN_ROW(selu_##sfx, T, PD__AB(T), be * pd__sel_##sfx(x <= 0, al * expm1##M(x), x))                    \
    PD__UN_ROW(celu_##sfx, T, PD__AB(T), pd__sel_##sfx(x > 0, x, (T)0) + pd__sel_##sfx(x < 0, al * expm1##M(x / al), (T)0)) \
    PD__UN_ROW(mish_##sfx, T, , x * pd__tanh_##sfx(splus_##sfx(x)))                                        \
    PD__UN_ROW(swish_##sfx, T, PD__AB(T), x * pd__sigmoid_##sfx(al * x))                                    \
    PD__UN_ROW(trelu_##sfx, T, PD__AB(T), pd__sel_##sfx(x > al, x, (T)0))                                     \
    PD__UN_ROW(shrink_##sfx, T, PD__AB(T), x < -al ? x + be : x > al ? x - be : (T)0)                         \
    PD__UN_ROW(sin_##sfx, T, , sin##M(x))                                                                     \
    PD__UN_ROW(cos_##sfx, T, , cos##M(x))                                                                     \
    PD__UN_ROW(tan_##sfx, T, , tan##M(x))                                                                     \
    PD__UN_ROW(asin_##sfx, T, , asin##M(x))                                                                   \
    PD__UN_ROW(acos_##sfx, T, , acos##M(x))                                                                   \
    PD__UN_ROW(atan_##sfx, T, , atan##M(x))                                                                   \
    PD__UN_ROW(sinh_##sfx, T, , sinh##M(x))                                                                   \
    PD__UN_ROW(cosh_##sfx, T, , cosh##M(x))                                                                   \
    PD__UN_ROW(asinh_##sfx, T, , asinh##M(x))                                                                 \
    PD__UN_ROW(acosh_##sfx, T, , acosh##M(x))                                                                 \
    PD__UN_ROW(atanh_##sfx, T, , atanh##M(x))
PD__FLOATS(PD__DEF_ACTS, _)

/* Gradients, u = x, v = y, as PyTorch: hardsigmoid's passes strictly inside
 * (0, 1), hardswish's is x/3 + 1/2 on [-3, 3], elu's / celu's at x <= 0
 * use exp(x), threshold's passes where x > alpha, shrink's where |x| > lambd. */
#define PD__DEF_ACT_GRADS(_, dt, T, sfx, W, M, MIN, MAX)                                                         \
    PD__GRAD_UROW(ghsig_##sfx, T, PD__AB(T), pd__sel_##sfx(al * u + be > 0 && al * u + be < 1, g * al, (T)0))   \
    PD__GRAD_UROW(ghswish_##sfx, T, ,                                                                            \
                  pd__sel_##sfx(u < -3, (T)0, pd__sel_##sfx(u <= 3, g * (u / (T)3 + (T)0.5), g)))                \
    PD__GRAD_UROW(gsoftplus_##sfx, T, , g * pd__sigmoid_##sfx(u))                                                \
    PD__GRAD_UROW(gsoftsign_##sfx, T, , g / (((T)1 + pd__fabs_##sfx(u)) * ((T)1 + pd__fabs_##sfx(u))))          \
    PD__GRAD_UROW(gelu_a_##sfx, T, PD__AB(T), pd__sel_##sfx(u > 0, g, g * al * pd__exp_##sfx(u)))               \
    PD__GRAD_UROW(gselu_##sfx, T, PD__AB(T), be * pd__sel_##sfx(u > 0, g, g * al * pd__exp_##sfx(u)))          \
    PD__GRAD_UROW(gcelu_##sfx, T, PD__AB(T), pd__sel_##sfx(u > 0, g, g * pd__exp_##sfx(u / al)))                \
    PD__GRAD_UROW(gmish_##sfx, T, , g * mish_d_##sfx(u))                                                         \
    PD__GRAD_UROW(gswish_##sfx, T, PD__AB(T), g * swish_d_##sfx(u, al))                                          \
    PD__GRAD_UROW(gtrelu_##sfx, T, PD__AB(T), pd__sel_##sfx(u > al, g, (T)0))                                    \
    PD__GRAD_UROW(gshrink_##sfx, T, PD__AB(T), pd__sel_##sfx(u < -al || u > al, g, (T)0))                        \
    PD__GRAD_UROW(gabs_##sfx, T, , pd__sel_##sfx(u > 0, g, pd__sel_##sfx(u < 0, -g, (T)0)))                      \
    PD__GRAD_UROW(gsin_##sfx, T, , g * cos##M(u))                                                                \
    PD__GRAD_UROW(gcos_##sfx, T, , -g * sin##M(u))                                                               \
    PD__GRAD_UROW(gtan_##sfx, T, , g * ((T)1 + v * v))                                                           \
    PD__GRAD_UROW(gasin_##sfx, T, , g / sqrt##M((T)1 - u * u))                                                   \
    PD__GRAD_UROW(gacos_##sfx, T, , -g / sqrt##M((T)1 - u * u))                                                  \
    PD__GRAD_UROW(gatan_##sfx, T, , g / ((T)1 + u * u))                                                          \
    PD__GRAD_UROW(gsinh_##sfx, T, , g * cosh##M(u))                                                              \
    PD__GRAD_UROW(gcosh_##sfx, T, , g * sinh##M(u))                                                              \
    PD__GRAD_UROW(gasinh_##sfx, T, , g / sqrt##M(u * u + (T)1))                                                  \
    PD__GRAD_UROW(gacosh_##sfx, T, , g / sqrt##M(u * u - (T)1))                                                  \
    PD__GRAD_UROW(gatanh_##sfx, T, , g / ((T)1 - u * u))
PD__FLOATS(PD__DEF_ACT_GRADS, _)

/* Op, forward row, gradient row, what the gradient reads, cost; the
 * attributes: alpha's name and default, beta's name and default (NULL: none). */
#define PD__ACT(Op, row, grow, use, cost, aname, adef, bname, bdef)                                              \
    static void Op##_ab(const pd__node *n, double *a, double *b) {                                               \
        *a = aname ? pd__attr_f(n, aname ? aname : "", (float)(adef)) : (adef);                                  \
        *b = bname ? pd__attr_f(n, bname ? bname : "", (float)(bdef)) : (bdef);                                  \
    }                                                                                                            \
    pd_status pd__cpu_##Op(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {        \
        static const pd__row_fn tab[PD__NDT] = {PD__FLOATS(PD__TAB, row)};                                       \
        if (!is_float(in[0]->dtype))                                                                             \
            return pd__err(PD_ERR_UNSUPPORTED, #Op " of %s is not supported", pd_dtype_name(in[0]->dtype));      \
        pd__ectx c;                                                                                              \
        memset(&c, 0, sizeof c);                                                                                 \
        Op##_ab(n, &c.alpha, &c.beta);                                                                           \
        return unary(x, in, out[0], pd__float_work(in[0]->dtype), tab, &c, cost);                                \
    }                                                                                                            \
    pd_status pd__cpu_##Op##_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,    \
                                 pd_tensor *const *dout, pd_tensor *const *din) {                                \
        static const pd__row_fn tab[PD__NDT] = PD__GTAB(grow);                                                   \
        pd__gctx ctx;                                                                                            \
        memset(&ctx, 0, sizeof ctx);                                                                             \
        Op##_ab(n, &ctx.alpha, &ctx.beta);                                                                       \
        return unary_bwd(x, in, out, dout, din, tab, &ctx, use, cost);                                           \
    }
#define PD__NONAME ((const char *)NULL)
PD__ACT(HardSigmoid, hsig, ghsig, PD__USE_X, 4, "alpha", 0.2, "beta", 0.5)
PD__ACT(HardSwish, hswish, ghswish, PD__USE_X, 5, PD__NONAME, 0, PD__NONAME, 0)
PD__ACT(Softplus, softplus, gsoftplus, PD__USE_X, 18, PD__NONAME, 0, PD__NONAME, 0)
PD__ACT(Softsign, softsign, gsoftsign, PD__USE_X, 3, PD__NONAME, 0, PD__NONAME, 0)
PD__ACT(Elu, elu, gelu_a, PD__USE_X, 10, "alpha", 1.0, PD__NONAME, 0)
PD__ACT(Selu, selu, gselu, PD__USE_X, 11, "alpha", 1.67326319217681884765625, "gamma", 1.05070102214813232421875)
PD__ACT(Celu, celu, gcelu, PD__USE_X, 12, "alpha", 1.0, PD__NONAME, 0)
PD__ACT(Mish, mish, gmish, PD__USE_X, 30, PD__NONAME, 0, PD__NONAME, 0)
PD__ACT(Swish, swish, gswish, PD__USE_X, 12, "alpha", 1.0, PD__NONAME, 0)
PD__ACT(ThresholdedRelu, trelu, gtrelu, PD__USE_X, 1, "alpha", 1.0, PD__NONAME, 0)
PD__ACT(Shrink, shrink, gshrink, PD__USE_X, 3, "lambd", 0.5, "bias", 0.0)
PD__ACT(Sin, sin, gsin, PD__USE_X, 10, PD__NONAME, 0, PD__NONAME, 0)
PD__ACT(Cos, cos, gcos, PD__USE_X, 10, PD__NONAME, 0, PD__NONAME, 0)
PD__ACT(Tan, tan, gtan, PD__USE_Y, 12, PD__NONAME, 0, PD__NONAME, 0)
PD__ACT(Asin, asin, gasin, PD__USE_X, 12, PD__NONAME, 0, PD__NONAME, 0)
PD__ACT(Acos, acos, gacos, PD__USE_X, 12, PD__NONAME, 0, PD__NONAME, 0)
PD__ACT(Atan, atan, gatan, PD__USE_X, 12, PD__NONAME, 0, PD__NONAME, 0)
PD__ACT(Sinh, sinh, gsinh, PD__USE_X, 12, PD__NONAME, 0, PD__NONAME, 0)
PD__ACT(Cosh, cosh, gcosh, PD__USE_X, 12, PD__NONAME, 0, PD__NONAME, 0)
PD__ACT(Asinh, asinh, gasinh, PD__USE_X, 14, PD__NONAME, 0, PD__NONAME, 0)
PD__ACT(Acosh, acosh, gacosh, PD__USE_X, 14, PD__NONAME, 0, PD__NONAME, 0)
PD__ACT(Atanh, atanh, gatanh, PD__USE_X, 14, PD__NONAME, 0, PD__NONAME, 0)

/* Abs: as torch.abs, sign(x) * dout, 0 at 0. */
PD__UNARY_BWD(Abs, ((const pd__row_fn[PD__NDT])PD__GTAB(gabs)), PD__USE_X, 1)

/* ---- CastLike: Cast to the second input's dtype ------------------------------------------ */
pd_status pd__cpu_CastLike(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    return pd__cpu_Cast(x, n, in, out);
}

/* The gradient flows into input 0 only (target_type gives a dtype, no values). */
pd_status pd__cpu_CastLike_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                               pd_tensor *const *dout, pd_tensor *const *din) {
    (void)n;
    return pass_bwd(x, in, out, dout, din);
}

/* ---- BitCast: the bytes copied, the dtype changed ---------------------------------------- */
/* The host is little-endian like ONNX's byte order, so a copy is the reinterpretation. */
pd_status pd__cpu_BitCast(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)x;
    (void)n;
    pd_tensor *y = out[0];
    size_t es = pd_dtype_size(y->dtype);
    if (!es || es != pd_dtype_size(in[0]->dtype))
        return pd__err(PD_ERR_UNSUPPORTED, "BitCast from %s to %s is not supported", pd_dtype_name(in[0]->dtype),
                       pd_dtype_name(y->dtype));
    if (numel(in[0]) != numel(y)) return pd__err(PD_ERR_SHAPE, "input and output sizes differ");
    if (numel(y) > 0 && y->data != in[0]->data) memcpy(y->data, in[0]->data, (size_t)numel(y) * es);
    return PD_OK;
}
PD__NO_GRAD(BitCast)

/* ---- QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear ----------------------------- */
/* Scalar loops through pd__get_* / pd__set_*: these run at load (folding
 * quantized weights) or on small tensors, and carry the reference's exact
 * rounding. Round half to even is nearbyint under the default rounding mode. */

static void quant_range(pd_dtype t, double *lo, double *hi) {
    switch (t) {
    case PD_INT8: *lo = -128, *hi = 127; break;
    case PD_UINT8: *lo = 0, *hi = 255; break;
    case PD_INT16: *lo = -32768, *hi = 32767; break;
    case PD_UINT16: *lo = 0, *hi = 65535; break;
    case PD_INT4: *lo = -8, *hi = 7; break;
    case PD_UINT4: *lo = 0, *hi = 15; break;
    case PD_INT2: *lo = -2, *hi = 1; break;
    case PD_UINT2: *lo = 0, *hi = 3; break;
    default: *lo = -2147483648.0, *hi = 2147483647.0; break;
    }
}

/* float8 and float4e2m1 (int4 and int2 go the integer way) */
static bool lowfloat(pd_dtype t) {
    return pd__dtype_lowbit(t) && t != PD_INT4 && t != PD_UINT4 && t != PD_INT2 && t != PD_UINT2;
}

/* Maps an element of x to its scale's index: 0 per tensor, the axis coordinate
 * per axis, the block's position in the scale's own shape when blocked (the
 * shape rule checked that the shapes fit). */
typedef struct pd__qmap {
    int64_t dim, inner, blocks, bs; /* bs 0: per axis; dim 0: per tensor */
} pd__qmap;

static pd__qmap qmap_make(const pd__node *n, const pd_tensor *x, const pd_tensor *s) {
    pd__qmap m = {0, 1, 1, 0};
    int64_t bs = n->opset >= 21 ? pd__attr_i(n, "block_size", 0) : 0, axis = pd__attr_i(n, "axis", 1);
    if (numel(s) == 1 && bs == 0) return m;
    if (axis < 0) axis += x->ndim;
    m.dim = x->shape[axis];
    for (int i = (int)axis + 1; i < x->ndim; i++) m.inner *= x->shape[i];
    m.bs = bs;
    m.blocks = bs ? (m.dim + bs - 1) / bs : m.dim;
    return m;
}

static int64_t qmap_at(const pd__qmap *m, int64_t i) {
    if (!m->dim) return 0;
    int64_t in = i % m->inner, a = (i / m->inner) % m->dim, o = i / (m->inner * m->dim);
    if (!m->bs) return a;
    return (o * m->blocks + a / m->bs) * m->inner + in;
}

/* x / scale as the reference's numpy divides: in float32 (rounded to half
 * when both are float16, to bfloat16 when both are), in double when either is
 * double or x is int32. */
static double quant_div(pd_dtype xt, pd_dtype st, double x, double s) {
    if (xt == PD_DOUBLE || st == PD_DOUBLE || xt == PD_INT32) return x / s;
    float q = (float)x / (float)s;
    if (xt == PD_FLOAT16 && st == PD_FLOAT16) q = pd__half_to_float(pd__float_to_half(q));
    if (xt == PD_BFLOAT16 && st == PD_BFLOAT16) q = pd__bf16_to_float(pd__float_to_bf16(q));
    return q;
}

pd_status pd__cpu_QuantizeLinear(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)x;
    const pd_tensor *X = in[0], *S = in[1], *Z = n->nin > 2 ? in[2] : NULL;
    pd_tensor *Y = out[0];
    pd__qmap m = qmap_make(n, X, S);
    double lo, hi;
    quant_range(Y->dtype, &lo, &hi);
    int64_t cnt = numel(X);
    if (lowfloat(Y->dtype)) {
        /* float8 and float4: x / scale (+ zero point, 0 in practice) in float32,
         * then Cast's rounding to nearest even, saturating unless saturate = 0 */
        bool sat = pd__attr_i(n, "saturate", 1) != 0;
        for (int64_t i = 0; i < cnt; i++) {
            int64_t k = qmap_at(&m, i);
            double v = quant_div(X->dtype, S->dtype, pd__get_f(X->dtype, X->data, i), pd__get_f(S->dtype, S->data, k));
            if (Z && Z->data) v = (float)(v + pd__get_f(Z->dtype, Z->data, k));
            ((uint8_t *)Y->data)[i] = pd__lowfloat_encode(Y->dtype, v, sat, PD_RM_UP);
        }
        return PD_OK;
    }
    for (int64_t i = 0; i < cnt; i++) {
        int64_t k = qmap_at(&m, i);
        double xv = pd__get_f(X->dtype, X->data, i), sv = pd__get_f(S->dtype, S->data, k);
        double v = nearbyint(quant_div(X->dtype, S->dtype, xv, sv));
        if (v != v) v = 0;
        if (Z && Z->data) v += (double)pd__get_i(Z->dtype, Z->data, k);
        pd__set_i(Y->dtype, Y->data, i, (int64_t)(v < lo ? lo : v > hi ? hi : v));
    }
    return PD_OK;
}

/* (x - zero_point) is exact in double, and its product with a float scale
 * too, so one rounding to the output type gives the reference's float32 result. */
pd_status pd__cpu_DequantizeLinear(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)x;
    const pd_tensor *X = in[0], *S = in[1], *Z = n->nin > 2 ? in[2] : NULL;
    pd_tensor *Y = out[0];
    pd__qmap m = qmap_make(n, X, S);
    int64_t cnt = numel(X);
    /* float8 and float4 values are decoded to double; with the zero point 0
     * the spec asks of them, their product with a float scale is exact too */
    bool fx = lowfloat(X->dtype);
    for (int64_t i = 0; i < cnt; i++) {
        int64_t k = qmap_at(&m, i);
        double v;
        if (fx) {
            v = pd__get_f(X->dtype, X->data, i);
            if (Z && Z->data) v -= pd__get_f(Z->dtype, Z->data, k);
        } else {
            int64_t iv = pd__get_i(X->dtype, X->data, i);
            if (Z && Z->data) iv -= pd__get_i(Z->dtype, Z->data, k);
            v = (double)iv;
        }
        double r = v * pd__get_f(S->dtype, S->data, k);
        pd__set_f(Y->dtype, Y->data, i, Y->dtype == PD_DOUBLE ? r : (double)(float)r);
    }
    return PD_OK;
}

/* The spec's formulas in float32, as its reference computes them:
 * scale = (max(0, max x) - min(0, min x)) / 255, zero point = round(clip(-min / scale)). */
pd_status pd__cpu_DynamicQuantizeLinear(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)x;
    const pd_tensor *X = in[0];
    const float *xv = (const float *)X->data;
    int64_t cnt = numel(X);
    float mn = 0, mx = 0;
    for (int64_t i = 0; i < cnt; i++) {
        if (xv[i] < mn) mn = xv[i];
        if (xv[i] > mx) mx = xv[i];
    }
    float scale = (mx - mn) / 255.0f;
    float zf = scale > 0 ? 0.0f - mn / scale : 0.0f;
    zf = nearbyintf(zf < 0 ? 0 : zf > 255 ? 255 : zf);
    uint8_t *y = (uint8_t *)out[0]->data;
    for (int64_t i = 0; i < cnt; i++) {
        float v = scale > 0 ? nearbyintf(xv[i] / scale) + zf : zf;
        y[i] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
    }
    if (n->nout > 1 && out[1]) *(float *)out[1]->data = scale;
    if (n->nout > 2 && out[2]) *(uint8_t *)out[2]->data = (uint8_t)zf;
    return PD_OK;
}
PD__NO_GRAD(QuantizeLinear)
PD__NO_GRAD(DequantizeLinear)
PD__NO_GRAD(DynamicQuantizeLinear)

/* ---- ReduceMax ... ReduceLogSumExp ------------------------------------------------------- */
/* One walk over the input in order, each element combined into its output
 * (an odometer gives the output offset: the kept dims' strides, 0 for the
 * reduced ones). Floats compute in double, integers (Max, Min, Prod, L1,
 * SumSquare) in int64 / uint64, wrapping; L2, LogSum and LogSumExp of
 * integers in double, cast back. One thread: these are rare in training
 * graphs and small where they appear. */
enum { PD_R_MAX, PD_R_MIN, PD_R_PROD, PD_R_L1, PD_R_L2, PD_R_SSQ, PD_R_LOGSUM, PD_R_LSE };

typedef struct pd__rmap {
    int nd;
    int64_t shape[PD_MAX_DIMS], ost[PD_MAX_DIMS];
} pd__rmap;

static void rmap_make(pd__rmap *m, int ndim, const int64_t *shape, const bool *mask) {
    int64_t acc = 1;
    m->nd = ndim;
    for (int d = ndim - 1; d >= 0; d--) {
        m->shape[d] = shape[d];
        m->ost[d] = mask[d] ? 0 : acc;
        if (!mask[d]) acc *= shape[d];
    }
}

/* BODY runs for each input element i with o its output's offset. */
#define PD__RMAP_LOOP(m, total, BODY)                                  \
    do {                                                               \
        int64_t idx_[PD_MAX_DIMS] = {0}, o = 0;                        \
        for (int64_t i = 0; i < (total); i++) {                        \
            BODY;                                                      \
            for (int d_ = (m)->nd - 1; d_ >= 0; d_--) {                \
                o += (m)->ost[d_];                                     \
                if (++idx_[d_] < (m)->shape[d_]) break;                \
                o -= (m)->ost[d_] * (m)->shape[d_];                    \
                idx_[d_] = 0;                                          \
            }                                                          \
        }                                                              \
    } while (0)

#define PD__DEF_RGEN_I(T, sfx, LO, HI, ABS)                                                               \
    static void rgen_##sfx(int kind, const pd__rmap *m, int64_t xn, const T *s, T *dst, int64_t on) {     \
        T init = kind == PD_R_MAX ? (LO) : kind == PD_R_MIN ? (HI) : kind == PD_R_PROD ? (T)1 : (T)0;     \
        for (int64_t k = 0; k < on; k++) dst[k] = init;                                                   \
        switch (kind) {                                                                                   \
        case PD_R_MAX: PD__RMAP_LOOP(m, xn, dst[o] = s[i] > dst[o] ? s[i] : dst[o]); break;               \
        case PD_R_MIN: PD__RMAP_LOOP(m, xn, dst[o] = s[i] < dst[o] ? s[i] : dst[o]); break;               \
        case PD_R_PROD: PD__RMAP_LOOP(m, xn, dst[o] = (T)((uint64_t)dst[o] * (uint64_t)s[i])); break;     \
        case PD_R_L1: PD__RMAP_LOOP(m, xn, dst[o] = (T)((uint64_t)dst[o] + (uint64_t)ABS(s[i]))); break;  \
        default: PD__RMAP_LOOP(m, xn, dst[o] = (T)((uint64_t)dst[o] + (uint64_t)s[i] * (uint64_t)s[i])); break; \
        }                                                                                                 \
    }
#define PD__IABS(v) ((v) < 0 ? 0u - (uint64_t)(v) : (uint64_t)(v))
#define PD__UABS(v) (v)
PD__DEF_RGEN_I(int64_t, i64, INT64_MIN, INT64_MAX, PD__IABS)
PD__DEF_RGEN_I(uint64_t, u64, 0, UINT64_MAX, PD__UABS)

/* Doubles; tmp: `on` more doubles (LogSumExp's sums). Max / Min propagate NaN. */
static void rgen_f64(int kind, const pd__rmap *m, int64_t xn, const double *s, double *dst, int64_t on,
                     double *tmp) {
    double init = kind == PD_R_MAX || kind == PD_R_LSE ? -INFINITY : kind == PD_R_MIN ? INFINITY
                  : kind == PD_R_PROD ? 1.0 : 0.0;
    for (int64_t k = 0; k < on; k++) dst[k] = init;
    switch (kind) {
    case PD_R_MAX:
    case PD_R_LSE: PD__RMAP_LOOP(m, xn, dst[o] = (s[i] > dst[o] || isnan(s[i])) ? s[i] : dst[o]); break;
    case PD_R_MIN: PD__RMAP_LOOP(m, xn, dst[o] = (s[i] < dst[o] || isnan(s[i])) ? s[i] : dst[o]); break;
    case PD_R_PROD: PD__RMAP_LOOP(m, xn, dst[o] *= s[i]); break;
    case PD_R_L1: PD__RMAP_LOOP(m, xn, dst[o] += fabs(s[i])); break;
    case PD_R_LOGSUM: PD__RMAP_LOOP(m, xn, dst[o] += s[i]); break;
    default: PD__RMAP_LOOP(m, xn, dst[o] += s[i] * s[i]); break; /* L2, SumSquare */
    }
    if (kind == PD_R_L2)
        for (int64_t k = 0; k < on; k++) dst[k] = sqrt(dst[k]);
    if (kind == PD_R_LOGSUM)
        for (int64_t k = 0; k < on; k++) dst[k] = log(dst[k]);
    if (kind == PD_R_LSE) { /* max + log(sum(exp(x - max))); an infinite max is the answer */
        for (int64_t k = 0; k < on; k++) tmp[k] = 0;
        PD__RMAP_LOOP(m, xn, tmp[o] += exp(s[i] - (isfinite(dst[o]) ? dst[o] : 0)));
        for (int64_t k = 0; k < on; k++)
            if (isfinite(dst[k])) dst[k] += log(tmp[k]);
    }
}

/* The axes of a Reduce* node as a mask. */
static pd_status rmask(const pd__node *n, pd_tensor *const *in, bool *mask) {
    bool noop;
    const pd_tensor *axes = (pd__reduce_axes_input(n) && n->nin > 1) ? in[1] : NULL;
    pd_status st = pd__reduce_mask(n, in[0]->ndim, axes, mask, &noop);
    return st == PD_OK ? PD_OK : pd__err(st, "bad or unknown axes");
}

static pd_status reduce_gen(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *out, int kind) {
    const pd_tensor *xt = in[0];
    unsigned k = pd__ekind(xt->dtype);
    bool boolean = k == PD_EK_BOOL && (kind == PD_R_MAX || kind == PD_R_MIN); /* any / all, in uint64 */
    if (!((k & PD_EK_NUM) || boolean) || out->dtype != xt->dtype)
        return pd__err(PD_ERR_UNSUPPORTED, "%s of %s is not supported", n->op_type, pd_dtype_name(xt->dtype));
    bool mask[PD_MAX_DIMS];
    PD_TRY(rmask(n, in, mask));
    int64_t on = numel(out), xn = numel(xt);
    if (on <= 0) return PD_OK;
    bool ikind = kind == PD_R_MAX || kind == PD_R_MIN || kind == PD_R_PROD || kind == PD_R_L1 || kind == PD_R_SSQ;
    pd_dtype w = k == PD_EK_FLOAT || !ikind ? PD_DOUBLE : k == PD_EK_SINT ? PD_INT64 : PD_UINT64;
    if (boolean) w = PD_UINT64;
    int64_t cnt = 1;
    for (int d = 0; d < xt->ndim; d++)
        if (!mask[d]) cnt *= xt->shape[d];
    if (cnt != on) return pd__err(PD_ERR_SHAPE, "output size does not match the reduction");
    pd__arena ar;
    PD_TRY(arena_init(x, &ar, stage_bytes(xt, w) + 2 * wbytes(on, w)));
    pd_tensor v = stage(x, &ar, xt, w);
    void *dst = arena_take(&ar, on, w), *tmp = arena_take(&ar, on, w);
    pd__rmap m;
    rmap_make(&m, xt->ndim, xt->shape, mask);
    if (w == PD_DOUBLE) rgen_f64(kind, &m, xn, v.data, dst, on, tmp);
    else if (w == PD_INT64) rgen_i64(kind, &m, xn, v.data, dst, on);
    else rgen_u64(kind, &m, xn, v.data, dst, on);
    pd__ew_convert(x, out->dtype, out->data, w, dst, on);
    return PD_OK;
}

/* Gradients in double, as PyTorch: amax / amin split dout evenly among the
 * elements equal to the result; prod: dout * prod(others), with zeros
 * handled (one zero: only it gets a gradient; two: none); L1: sign(x);
 * L2: x / y, 0 where y = 0; SumSquare: 2x; LogSum: 1 / sum; LogSumExp:
 * exp(x - y). */
static pd_status reduce_gen_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                                pd_tensor *const *dout, pd_tensor *const *din, int kind) {
    const pd_tensor *xt = in[0], *y = out[0];
    if (!dout || !dout[0] || !wanted(din, 0, xt) || !is_float(dout[0]->dtype)) return PD_OK;
    bool mask[PD_MAX_DIMS];
    PD_TRY(rmask(n, in, mask));
    PD_TRY(check_size(din[0], xt, "the input gradient"));
    PD_TRY(check_size(dout[0], y, "the output gradient"));
    int64_t xn = numel(xt), on = numel(y);
    if (xn <= 0 || on <= 0) return PD_OK;
    pd_dtype w = PD_DOUBLE;
    pd__arena ar;
    PD_TRY(arena_init(x, &ar, stage_bytes(xt, w) + stage_bytes(y, w) + stage_bytes(dout[0], w) + wbytes(xn, w) +
                                  2 * wbytes(on, w)));
    pd_tensor xv = stage(x, &ar, xt, w), yv = stage(x, &ar, y, w), gv = stage(x, &ar, dout[0], w);
    const double *s = xv.data, *yy = yv.data, *g = gv.data;
    double *d = arena_take(&ar, xn, w), *a = arena_take(&ar, on, w), *b = arena_take(&ar, on, w);
    pd__rmap mm, *m = &mm;
    rmap_make(m, xt->ndim, xt->shape, mask);
    for (int64_t k = 0; k < on; k++) a[k] = 0, b[k] = 1;
    switch (kind) {
    case PD_R_MAX:
    case PD_R_MIN:
        PD__RMAP_LOOP(m, xn, a[o] += s[i] == yy[o]);
        PD__RMAP_LOOP(m, xn, d[i] = s[i] == yy[o] ? g[o] / a[o] : 0);
        break;
    case PD_R_PROD: /* a: zeros, b: product of the nonzero ones */
        PD__RMAP_LOOP(m, xn, if (s[i] == 0) a[o] += 1; else b[o] *= s[i]);
        PD__RMAP_LOOP(m, xn, d[i] = a[o] == 0 ? g[o] * b[o] / s[i] : (a[o] == 1 && s[i] == 0) ? g[o] * b[o] : 0);
        break;
    case PD_R_L1: PD__RMAP_LOOP(m, xn, d[i] = s[i] > 0 ? g[o] : s[i] < 0 ? -g[o] : 0); break;
    case PD_R_L2: PD__RMAP_LOOP(m, xn, d[i] = yy[o] == 0 ? 0 : g[o] * s[i] / yy[o]); break;
    case PD_R_SSQ: PD__RMAP_LOOP(m, xn, d[i] = 2 * g[o] * s[i]); break;
    case PD_R_LOGSUM:
        PD__RMAP_LOOP(m, xn, a[o] += s[i]);
        PD__RMAP_LOOP(m, xn, d[i] = g[o] / a[o]);
        break;
    default: PD__RMAP_LOOP(m, xn, d[i] = g[o] * exp(s[i] - yy[o])); break;
    }
    pd__ew_convert_add(x, din[0]->dtype, din[0]->data, w, d, xn, 1.0);
    return PD_OK;
}

#define PD__REDUCE_GEN(Op, kind)                                                                                \
    pd_status pd__cpu_##Op(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {        \
        return reduce_gen(x, n, in, out[0], kind);                                                               \
    }                                                                                                            \
    pd_status pd__cpu_##Op##_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,    \
                                 pd_tensor *const *dout, pd_tensor *const *din) {                                \
        return reduce_gen_bwd(x, n, in, out, dout, din, kind);                                                   \
    }
PD__REDUCE_GEN(ReduceMax, PD_R_MAX)
PD__REDUCE_GEN(ReduceMin, PD_R_MIN)
PD__REDUCE_GEN(ReduceProd, PD_R_PROD)
PD__REDUCE_GEN(ReduceL1, PD_R_L1)
PD__REDUCE_GEN(ReduceL2, PD_R_L2)
PD__REDUCE_GEN(ReduceSumSquare, PD_R_SSQ)
PD__REDUCE_GEN(ReduceLogSum, PD_R_LOGSUM)
PD__REDUCE_GEN(ReduceLogSumExp, PD_R_LSE)

/* ---- the optimizer update rules of ai.onnx.preview.training ------------------------------------- */

/* In float64 through pd__get_f/pd__set_f, as written in ONNX's operator
 * definitions (onnx/reference/ops/aionnx_preview_training). Inputs R, T,
 * then n X, n G and the n of each state; outputs the new X, then the new
 * states. Each element is read before any output is written, so an output
 * may share its input's memory. */
typedef struct {
    double r, norm, alpha, beta, eps, post, decay;
    int64_t t;
    bool nesterov;
} optim_rule;

static optim_rule optim_make(const pd__node *n, pd_tensor *const *in) {
    optim_rule o;
    o.r = pd__get_f(in[0]->dtype, in[0]->data, 0);
    o.t = pd__get_i(in[1]->dtype, in[1]->data, 0);
    o.norm = pd__attr_f(n, "norm_coefficient", 0);
    o.post = pd__attr_f(n, "norm_coefficient_post", 0);
    o.eps = pd__attr_f(n, "epsilon", 1e-6f);
    o.decay = pd__attr_f(n, "decay_factor", 0);
    bool adam = n->op == PD_OP_ADAM;
    o.alpha = pd__attr_f(n, "alpha", adam ? 0.9f : 0);
    o.beta = pd__attr_f(n, "beta", adam ? 0.999f : 0);
    o.nesterov = strcmp(pd__attr_s(n, "mode", "standard"), "nesterov") == 0;
    return o;
}

#define OPT_GET(t, i) pd__get_f((t)->dtype, (t)->data, i)
/* an output may be left out (ONNX's empty name) */
#define OPT_SET(t, i, v)                                                                                           \
    do {                                                                                                           \
        if (t) pd__set_f((t)->dtype, (t)->data, i, v);                                                             \
    } while (0)

pd_status pd__cpu_Adagrad(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)x;
    optim_rule o = optim_make(n, in);
    int k = (n->nin - 2) / 3;
    double r = o.r / (1 + (double)o.t * o.decay); /* the decayed learning rate */
    for (int i = 0; i < k; i++) {
        const pd_tensor *X = in[2 + i], *G = in[2 + k + i], *H = in[2 + 2 * k + i];
        for (int64_t e = 0, m = pd_tensor_numel(X); e < m; e++) {
            double xv = OPT_GET(X, e), g = o.norm * xv + OPT_GET(G, e), h = OPT_GET(H, e) + g * g;
            OPT_SET(out[i], e, xv - r * g / (sqrt(h) + o.eps));
            OPT_SET(out[k + i], e, h);
        }
    }
    return PD_OK;
}

pd_status pd__cpu_Adam(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)x;
    optim_rule o = optim_make(n, in);
    int k = (n->nin - 2) / 4;
    /* bias correction of both moments from the first step on (T > 0) */
    double r = o.t > 0 ? o.r * sqrt(1 - pow(o.beta, (double)o.t)) / (1 - pow(o.alpha, (double)o.t)) : o.r;
    for (int i = 0; i < k; i++) {
        const pd_tensor *X = in[2 + i], *G = in[2 + k + i], *V = in[2 + 2 * k + i], *H = in[2 + 3 * k + i];
        for (int64_t e = 0, m = pd_tensor_numel(X); e < m; e++) {
            double xv = OPT_GET(X, e), g = o.norm * xv + OPT_GET(G, e);
            double v = o.alpha * OPT_GET(V, e) + (1 - o.alpha) * g, h = o.beta * OPT_GET(H, e) + (1 - o.beta) * g * g;
            OPT_SET(out[i], e, (1 - o.post) * (xv - r * v / (sqrt(h) + o.eps)));
            OPT_SET(out[k + i], e, v);
            OPT_SET(out[2 * k + i], e, h);
        }
    }
    return PD_OK;
}

pd_status pd__cpu_Momentum(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)x;
    optim_rule o = optim_make(n, in);
    int k = (n->nin - 2) / 3;
    double beta = o.t > 0 ? o.beta : 1; /* the first step takes the whole gradient */
    for (int i = 0; i < k; i++) {
        const pd_tensor *X = in[2 + i], *G = in[2 + k + i], *V = in[2 + 2 * k + i];
        for (int64_t e = 0, m = pd_tensor_numel(X); e < m; e++) {
            double xv = OPT_GET(X, e), g = o.norm * xv + OPT_GET(G, e), v = o.alpha * OPT_GET(V, e) + beta * g;
            OPT_SET(out[i], e, xv - o.r * (o.nesterov ? g + o.alpha * v : v));
            OPT_SET(out[k + i], e, v);
        }
    }
    return PD_OK;
}

#undef OPT_GET
#undef OPT_SET

PD__NO_GRAD(Adagrad)
PD__NO_GRAD(Adam)
PD__NO_GRAD(Momentum)

/* ---- ai.onnx.ml ---------------------------------------------------------------------------------- */

pd_status pd__cpu_Binarizer(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)x;
    double th = pd__attr_f(n, "threshold", 0);
    for (int64_t i = 0, k = pd_tensor_numel(in[0]); i < k; i++)
        pd__set_f(out[0]->dtype, out[0]->data, i, pd__get_f(in[0]->dtype, in[0]->data, i) > th ? 1 : 0);
    return PD_OK;
}
PD__NO_GRAD(Binarizer)
