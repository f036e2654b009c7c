/* nn.c - CPU forward kernels of the neural-network ops: Gemm, MatMul, Conv,
 * ConvTranspose (N-D, im2col/col2im + OpenBLAS GEMM), BatchNormalization
 * (inference and training statistics), LayerNormalization, MaxPool,
 * AveragePool, GlobalAveragePool (N-D), LRN, Softmax, LogSoftmax, Dropout,
 * SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss.
 *
 * Each pd__cpu_<Op> reads the attributes, takes the window geometry from
 * pd__win_make (the same function the shape rule used) and dispatches on the
 * dtype to a typed kernel. The typed kernels are written once in nn_impl.h
 * and instantiated below for float (_f32) and double (_f64). Scratch memory
 * comes from pd__scratch; loops run on OpenMP threads where worthwhile.
 */
#include "../../core/shape_nn.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#define PD_PRAGMA(s) _Pragma(#s)
#define PD_OMP_FOR(nt, cond) PD_PRAGMA(omp parallel for num_threads(nt) schedule(static) if (cond))
static int pd__nthreads(const pd__exec *x) { return x->threads > 0 ? x->threads : omp_get_max_threads(); }
#else
#define PD_OMP_FOR(nt, cond) (void)(nt);
static int pd__nthreads(const pd__exec *x) { (void)x; return 1; }
#endif

/* ---- untyped helpers ---------------------------------------------------------------------- */

static int64_t prod64(int n, const int64_t *v) {
    int64_t p = 1;
    for (int i = 0; i < n; i++) p *= v[i];
    return p;
}

/* Scratch for a*b elements of `size` bytes (NULL with the error set). */
static void *pd__scratch_n(pd__exec *x, int64_t a, int64_t b, size_t size) {
    int64_t n;
    if (!pd__mul_ok(a, b, &n) || !pd__mul_ok(n, (int64_t)size, &n)) {
        pd__err(PD_ERR_NOMEM, "scratch of %lld x %lld elements overflows", (long long)a, (long long)b);
        return NULL;
    }
    return pd__scratch(x, n < 64 ? 64 : (size_t)n);
}

/* Odometers over multi-indices, last dim fastest. */
static void odo_next(int64_t *idx, const int64_t *dims, int n) {
    for (int i = n - 1; i >= 0; i--) {
        if (++idx[i] < dims[i]) return;
        idx[i] = 0;
    }
}

static void odo_unflat(int64_t flat, const int64_t *dims, int n, int64_t *idx) {
    for (int i = n - 1; i >= 0; i--) {
        idx[i] = flat % dims[i];
        flat /= dims[i];
    }
}

/* [lo, hi): the o in [0, n) with 0 <= o*s + p < len (s > 0). */
static void out_range(int64_t p, int64_t s, int64_t len, int64_t n, int64_t *lo, int64_t *hi) {
    int64_t a = p >= 0 ? 0 : (-p + s - 1) / s;
    int64_t b = len - p <= 0 ? 0 : (len - p + s - 1) / s;
    if (a > n) a = n;
    if (b > n) b = n;
    if (b < a) b = a;
    *lo = a;
    *hi = b;
}

/* Offset of the row (all dims but the last) that window position o reads
 * through tap k in an image of spatial size `size`; false when it falls in a pad. */
static bool outer_offset(const pd__win *w, const int64_t *o, const int64_t *k, const int64_t *size, int64_t *off) {
    int64_t v = 0;
    for (int i = 0; i < w->nsp - 1; i++) {
        int64_t pos = o[i] * w->s[i] - w->pb[i] + k[i] * w->d[i];
        if (pos < 0 || pos >= size[i]) return false;
        v = v * size[i] + pos;
    }
    *off = v;
    return true;
}

/* Conv and ConvTranspose stage at most this much im2col data per chunk of images. */
#define PD_NN_CHUNK_BYTES ((size_t)64 << 20)

/* MT19937 as numpy's legacy RandomState: np.random.seed(s) then uniform(0, 1). */
typedef struct pd__mt {
    uint32_t s[624];
    int i;
} pd__mt;

static void mt_seed(pd__mt *m, uint32_t seed) {
    m->s[0] = seed;
    for (int i = 1; i < 624; i++) m->s[i] = 1812433253u * (m->s[i - 1] ^ (m->s[i - 1] >> 30)) + (uint32_t)i;
    m->i = 624;
}

static uint32_t mt_next(pd__mt *m) {
    if (m->i >= 624) {
        for (int k = 0; k < 624; k++) {
            uint32_t y = (m->s[k] & 0x80000000u) | (m->s[(k + 1) % 624] & 0x7fffffffu);
            m->s[k] = m->s[(k + 397) % 624] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
        }
        m->i = 0;
    }
    uint32_t y = m->s[m->i++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

static double mt_uniform(pd__mt *m) {
    uint32_t a = mt_next(m) >> 5, b = mt_next(m) >> 6;
    return (a * 67108864.0 + b) / 9007199254740992.0;
}

/* ---- the typed kernels ------------------------------------------------------------------------ */

#define T float
#define FN(name) name##_f32
#define PD_GEMM cblas_sgemm
#define EXP expf
#include "nn_impl.h"
#undef T
#undef FN
#undef PD_GEMM
#undef EXP

#define T double
#define FN(name) name##_f64
#define PD_GEMM cblas_dgemm
#define EXP exp
#include "nn_impl.h"
#undef T
#undef FN
#undef PD_GEMM
#undef EXP

static pd_status bad_dtype(pd_dtype t) {
    return pd__err(PD_ERR_UNSUPPORTED, "no CPU kernel for dtype %s", pd_dtype_name(t));
}

/* Calls fn_f32 or fn_f64 with args by dtype dt. */
#define PD_DISPATCH(dt, fn, args)                  \
    switch (dt) {                                  \
    case PD_FLOAT: return fn##_f32 args;           \
    case PD_DOUBLE: return fn##_f64 args;          \
    default: return bad_dtype(dt);                 \
    }

/* Optional inputs/outputs: NULL when absent or beyond the node's count. */
static const pd_tensor *opt_in(const pd__node *n, pd_tensor *const *in, int i) {
    return i < n->nin ? in[i] : NULL;
}
static pd_tensor *opt_out(const pd__node *n, pd_tensor *const *out, int i) {
    return i < n->nout ? out[i] : NULL;
}

/* ---- Gemm, MatMul ------------------------------------------------------------------------------- */

pd_status pd__cpu_Gemm(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)x;
    bool ta = pd__attr_i(n, "transA", 0) != 0, tb = pd__attr_i(n, "transB", 0) != 0;
    double alpha = pd__attr_f(n, "alpha", 1.0f), beta = pd__attr_f(n, "beta", 1.0f);
    PD_DISPATCH(in[0]->dtype, gemm_op, (in[0], in[1], opt_in(n, in, 2), out[0], ta, tb, alpha, beta))
}

pd_status pd__cpu_MatMul(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)x;
    (void)n;
    PD_DISPATCH(in[0]->dtype, matmul, (in[0], in[1], out[0]))
}

/* ---- Conv, ConvTranspose ------------------------------------------------------------------------- */

pd_status pd__cpu_Conv(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    pd__win w;
    PD_TRY(pd__win_make(n, PD_WIN_CONV, in[0]->ndim, in[0]->shape, in[1]->shape + 2, &w));
    int64_t group = pd__attr_i(n, "group", 1);
    PD_DISPATCH(in[0]->dtype, conv, (x, &w, group, in[0], in[1], opt_in(n, in, 2), out[0]))
}

pd_status pd__cpu_ConvTranspose(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    pd__win w;
    PD_TRY(pd__win_make(n, PD_WIN_CONVT, in[0]->ndim, in[0]->shape, in[1]->shape + 2, &w));
    int64_t group = pd__attr_i(n, "group", 1);
    PD_DISPATCH(in[0]->dtype, conv_transpose, (x, &w, group, in[0], in[1], opt_in(n, in, 2), out[0]))
}

/* ---- normalizations ------------------------------------------------------------------------------- */

static pd_status bn_run(pd__exec *x, pd_dtype dt, int64_t N, int64_t F, int64_t S, const void *X, const double *m,
                        const double *a, const double *b, void *Y) {
    PD_DISPATCH(dt, affine, (x, N, F, S, X, m, a, b, Y))
}

static pd_status bn_stats(pd__exec *x, pd_dtype dt, int64_t N, int64_t F, int64_t S, const void *X, double *mean,
                          double *var) {
    PD_DISPATCH(dt, batch_stats, (x, N, F, S, X, mean, var))
}

/* X (N, F, S) with F the params' size: C, or C*D1*... with spatial=0. */
pd_status pd__cpu_BatchNormalization(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    const pd_tensor *X = in[0];
    int64_t N = X->shape[0], F = pd_tensor_numel(in[1]), numel = pd_tensor_numel(X);
    int64_t S = N > 0 && F > 0 ? numel / (N * F) : 0;
    double eps = pd__attr_f(n, "epsilon", 1e-5f), mom = pd__attr_f(n, "momentum", 0.9f);
    bool train = pd__bn_training(n);
    double *buf = pd__scratch_n(x, 8, F, sizeof(double));
    if (!buf) return PD_ERR_NOMEM;
    double *sc = buf, *bi = sc + F, *mu = bi + F, *va = mu + F, *bm = va + F, *bv = bm + F, *a = bv + F;
    for (int64_t f = 0; f < F; f++) {
        sc[f] = pd__get_f(in[1]->dtype, in[1]->data, f);
        bi[f] = pd__get_f(in[2]->dtype, in[2]->data, f);
        mu[f] = pd__get_f(in[3]->dtype, in[3]->data, f);
        va[f] = pd__get_f(in[4]->dtype, in[4]->data, f);
    }
    if (train) PD_TRY(bn_stats(x, X->dtype, N, F, S, X->data, bm, bv));
    const double *um = train ? bm : mu, *uv = train ? bv : va;
    for (int64_t f = 0; f < F; f++) a[f] = sc[f] / sqrt(uv[f] + eps);
    PD_TRY(bn_run(x, X->dtype, N, F, S, X->data, um, a, bi, out[0]->data));
    /* running = momentum * running + (1 - momentum) * batch statistic (biased variance) */
    pd_tensor *rm = opt_out(n, out, 1), *rv = opt_out(n, out, 2);
    pd_tensor *smo = n->opset < 14 ? opt_out(n, out, 3) : NULL, *svo = n->opset < 14 ? opt_out(n, out, 4) : NULL;
    for (int64_t f = 0; f < F; f++) {
        if (rm) pd__set_f(rm->dtype, rm->data, f, train ? mom * mu[f] + (1 - mom) * bm[f] : mu[f]);
        if (rv) pd__set_f(rv->dtype, rv->data, f, train ? mom * va[f] + (1 - mom) * bv[f] : va[f]);
        if (smo) pd__set_f(smo->dtype, smo->data, f, um[f]);
        if (svo) pd__set_f(svo->dtype, svo->data, f, uv[f]);
    }
    return PD_OK;
}

/* Expands a parameter broadcastable to shape (nd dims) into D dense elements at dst. */
static void expand_param(const pd_tensor *p, int nd, const int64_t *shape, int64_t D, pd_dtype dt, void *dst) {
    int64_t idx[PD_MAX_DIMS] = {0};
    for (int64_t i = 0; i < D; i++) {
        int64_t off = 0;
        for (int j = 0; j < p->ndim; j++) {
            int sj = nd - p->ndim + j;
            off = off * p->shape[j] + (p->shape[j] == 1 ? 0 : idx[sj]);
        }
        pd__set_f(dt, dst, i, pd__get_f(p->dtype, p->data, off));
        odo_next(idx, shape, nd);
    }
}

pd_status pd__cpu_LayerNormalization(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    const pd_tensor *X = in[0], *scale = in[1], *bias = opt_in(n, in, 2);
    int r = X->ndim;
    int64_t axis = pd__attr_i(n, "axis", -1);
    if (axis < 0) axis += r;
    if (axis < 0 || axis >= r) return pd__err(PD_ERR_SHAPE, "axis %lld is out of range", (long long)axis);
    int64_t R = prod64((int)axis, X->shape), D = prod64(r - (int)axis, X->shape + axis);
    double eps = pd__attr_f(n, "epsilon", 1e-5f);
    const void *sd = scale->data, *bd = bias ? bias->data : NULL;
    bool exs = pd_tensor_numel(scale) != D, exb = bias && pd_tensor_numel(bias) != D;
    if (exs || exb) {
        size_t es = pd_dtype_size(X->dtype);
        char *buf = pd__scratch_n(x, 2, D, es);
        if (!buf) return PD_ERR_NOMEM;
        if (exs) {
            expand_param(scale, r - (int)axis, X->shape + axis, D, X->dtype, buf);
            sd = buf;
        }
        if (exb) {
            expand_param(bias, r - (int)axis, X->shape + axis, D, X->dtype, buf + D * es);
            bd = buf + D * es;
        }
    }
    pd_tensor *mo = opt_out(n, out, 1), *io = opt_out(n, out, 2);
    pd_dtype mdt = mo ? mo->dtype : io ? io->dtype : PD_FLOAT;
    PD_DISPATCH(X->dtype, layer_norm,
                (x, R, D, X->data, sd, bd, eps, out[0]->data, mo ? mo->data : NULL, io ? io->data : NULL, mdt))
}

pd_status pd__cpu_LRN(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    const pd_tensor *X = in[0];
    int64_t N = X->shape[0], C = X->shape[1], S = prod64(X->ndim - 2, X->shape + 2);
    int64_t size = pd__attr_i(n, "size", 1);
    double alpha = pd__attr_f(n, "alpha", 1e-4f), beta = pd__attr_f(n, "beta", 0.75f),
           bias = pd__attr_f(n, "bias", 1.0f);
    PD_DISPATCH(X->dtype, lrn, (x, N, C, S, X->data, size, alpha, beta, bias, out[0]->data))
}

/* ---- pools ---------------------------------------------------------------------------------------- */

/* MaxPool of uint8, int8, float16: through float, exactly (a max picks one of the inputs). */
static pd_status maxpool_via_float(pd__exec *x, const pd__win *w, int64_t NC, const pd_tensor *X, pd_tensor *Y,
                                   int64_t *ind, int so) {
    int64_t nx = pd_tensor_numel(X), ny = pd_tensor_numel(Y);
    float *buf = pd__scratch_n(x, nx + ny, 1, sizeof(float));
    if (!buf) return PD_ERR_NOMEM;
    for (int64_t i = 0; i < nx; i++) buf[i] = (float)pd__get_f(X->dtype, X->data, i);
    PD_TRY(maxpool_f32(x, w, NC, buf, buf + nx, ind, so));
    for (int64_t i = 0; i < ny; i++) pd__set_f(Y->dtype, Y->data, i, buf[nx + i]);
    return PD_OK;
}

pd_status pd__cpu_MaxPool(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    const pd_tensor *X = in[0];
    pd__win w;
    PD_TRY(pd__win_make(n, PD_WIN_POOL, X->ndim, X->shape, NULL, &w));
    int64_t NC = X->shape[0] * X->shape[1];
    pd_tensor *io = opt_out(n, out, 1);
    int64_t *ind = io ? io->data : NULL;
    int so = pd__attr_i(n, "storage_order", 0) != 0;
    switch (X->dtype) {
    case PD_FLOAT: return maxpool_f32(x, &w, NC, X->data, out[0]->data, ind, so);
    case PD_DOUBLE: return maxpool_f64(x, &w, NC, X->data, out[0]->data, ind, so);
    case PD_UINT8:
    case PD_INT8:
    case PD_FLOAT16: return maxpool_via_float(x, &w, NC, X, out[0], ind, so);
    default: return bad_dtype(X->dtype);
    }
}

/* cnt: for each dim i, for each output position o of it, how many taps the
 * average divides by: those inside X, or with count_include_pad those inside X
 * and its declared pads (not the extra of ceil_mode). */
static void pool_counts(const pd__win *w, bool include_pad, int64_t *cnt) {
    for (int i = 0; i < w->nsp; i++) {
        for (int64_t o = 0; o < w->out[i]; o++) {
            int64_t st = o * w->s[i] - w->pb[i], lo, hi;
            if (include_pad) out_range(st + w->pb[i], w->d[i], w->in[i] + w->pb[i] + w->pe[i], w->k[i], &lo, &hi);
            else out_range(st, w->d[i], w->in[i], w->k[i], &lo, &hi);
            cnt[o] = hi - lo;
        }
        cnt += w->out[i];
    }
}

pd_status pd__cpu_AveragePool(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    const pd_tensor *X = in[0];
    pd__win w;
    PD_TRY(pd__win_make(n, PD_WIN_POOL, X->ndim, X->shape, NULL, &w));
    int64_t NC = X->shape[0] * X->shape[1], nc = 0;
    for (int i = 0; i < w.nsp; i++) nc += w.out[i];
    int64_t *cnt = pd__scratch_n(x, nc, 1, sizeof(int64_t));
    if (!cnt) return PD_ERR_NOMEM;
    pool_counts(&w, pd__attr_i(n, "count_include_pad", 0) != 0, cnt);
    PD_DISPATCH(X->dtype, avgpool, (x, &w, NC, X->data, out[0]->data, cnt))
}

pd_status pd__cpu_GlobalAveragePool(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)n;
    const pd_tensor *X = in[0];
    int64_t NC = X->shape[0] * X->shape[1], S = prod64(X->ndim - 2, X->shape + 2);
    PD_DISPATCH(X->dtype, global_avgpool, (x, NC, S, X->data, out[0]->data))
}

/* ---- softmax family ---------------------------------------------------------------------------------- */

static pd_status softmax_run(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out, int lg) {
    const pd_tensor *X = in[0];
    int64_t outer, len, inner;
    PD_TRY(pd__softmax_split(n, X->ndim, X->shape, &outer, &len, &inner));
    PD_DISPATCH(X->dtype, softmax, (x, outer, len, inner, X->data, out[0]->data, lg))
}

pd_status pd__cpu_Softmax(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    return softmax_run(x, n, in, out, 0);
}

pd_status pd__cpu_LogSoftmax(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    return softmax_run(x, n, in, out, 1);
}

/* ---- losses ----------------------------------------------------------------------------------------------- */

/* (N, C, D) view of the scores and the loss options. */
typedef struct pd__loss {
    int64_t N, C, D, ii;
    bool has_ii;
    int red;
} pd__loss;

static pd_status loss_opts(const pd__node *n, const pd_tensor *X, pd__loss *l) {
    l->N = X->shape[0];
    l->C = X->shape[1];
    l->D = prod64(X->ndim - 2, X->shape + 2);
    l->has_ii = pd__attr_get(n, "ignore_index") != NULL;
    l->ii = pd__attr_i(n, "ignore_index", 0);
    l->red = pd__loss_reduction(n);
    if (l->red < 0) return pd__err(PD_ERR_UNSUPPORTED, "unknown reduction '%s'", pd__attr_s(n, "reduction", ""));
    return PD_OK;
}

pd_status pd__cpu_SoftmaxCrossEntropyLoss(pd__exec *x, const pd__node *n, pd_tensor *const *in,
                                          pd_tensor *const *out) {
    const pd_tensor *X = in[0], *W = opt_in(n, in, 2);
    pd__loss l;
    PD_TRY(loss_opts(n, X, &l));
    pd_tensor *lpo = opt_out(n, out, 1);
    void *lp = lpo ? lpo->data : pd__scratch_n(x, pd_tensor_numel(X), 1, pd_dtype_size(X->dtype));
    if (!lp) return PD_ERR_NOMEM;
    const void *wd = W ? W->data : NULL;
    PD_DISPATCH(X->dtype, sce, (x, l.N, l.C, l.D, X->data, lp, in[1], wd, l.has_ii, l.ii, l.red, out[0]->data))
}

pd_status pd__cpu_NegativeLogLikelihoodLoss(pd__exec *x, const pd__node *n, pd_tensor *const *in,
                                            pd_tensor *const *out) {
    (void)x;
    const pd_tensor *X = in[0], *W = opt_in(n, in, 2);
    pd__loss l;
    PD_TRY(loss_opts(n, X, &l));
    const void *wd = W ? W->data : NULL;
    PD_DISPATCH(X->dtype, nll, (l.N, l.C, l.D, X->data, in[1], wd, l.has_ii, l.ii, l.red, out[0]->data))
}

/* ---- Dropout ---------------------------------------------------------------------------------------------- */

/* Identity at inference. Training (opset 12+, training_mode input true):
 * keep[i] = u[i] >= ratio with u from MT19937 seeded by the seed attribute
 * (0 when absent: runs are reproducible), y = x * keep / (1 - ratio). */
pd_status pd__cpu_Dropout(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    const pd_tensor *X = in[0], *R = opt_in(n, in, 1), *TM = opt_in(n, in, 2);
    pd_tensor *Y = out[0], *M = opt_out(n, out, 1);
    int64_t numel = pd_tensor_numel(X);
    double ratio = 0.5;
    bool train = false;
    if (n->opset >= 12) {
        if (R) ratio = pd__get_f(R->dtype, R->data, 0);
        train = TM && pd__get_i(TM->dtype, TM->data, 0) != 0;
    }
    if (!train || ratio == 0) {
        if (Y->data != X->data) memcpy(Y->data, X->data, (size_t)numel * pd_dtype_size(X->dtype));
        if (M) {
            if (M->dtype == PD_BOOL) memset(M->data, 1, (size_t)numel);
            else for (int64_t i = 0; i < numel; i++) pd__set_f(M->dtype, M->data, i, 1);
        }
        return PD_OK;
    }
    if (!(ratio > 0 && ratio < 1)) return pd__err(PD_ERR_INVALID, "ratio %g is not in [0, 1)", ratio);
    uint8_t *keep = M && M->dtype == PD_BOOL ? M->data : pd__scratch_n(x, numel, 1, 1);
    if (!keep) return PD_ERR_NOMEM;
    pd__mt mt;
    mt_seed(&mt, (uint32_t)pd__attr_i(n, "seed", 0));
    for (int64_t i = 0; i < numel; i++) keep[i] = mt_uniform(&mt) >= ratio;
    if (M && M->dtype != PD_BOOL)
        for (int64_t i = 0; i < numel; i++) pd__set_f(M->dtype, M->data, i, keep[i]);
    double scale = 1.0 / (1.0 - ratio);
    switch (X->dtype) {
    case PD_FLOAT: return dropout_apply_f32(x, numel, X->data, keep, scale, Y->data);
    case PD_DOUBLE: return dropout_apply_f64(x, numel, X->data, keep, scale, Y->data);
    default:
        for (int64_t i = 0; i < numel; i++)
            pd__set_f(Y->dtype, Y->data, i, keep[i] ? pd__get_f(X->dtype, X->data, i) * scale : 0.0);
        return PD_OK;
    }
}
