/* nn.c - CPU kernels of the neural-network ops, each forward beside its
 * backward: GEMM-based (Gemm, MatMul, Conv, ConvTranspose: im2col + OpenBLAS
 * or oneDNN), normalizations, pooling, Resize, Einsum, softmaxes, losses,
 * attention, the quantized ops (the full list: docs/INTERNALS.md,
 * "runtime/cpu/nn.c"). Each pd__cpu_<Op> reads the attributes, takes the
 * window geometry from pd__win_make (as the shape rule did) and dispatches on
 * the dtype to a kernel written once in nn_impl.h. Each pd__cpu_<Op>_bwd ADDS
 * the gradient of each input it is given a din for, and only those
 * (zero-bubble's split backward runs each half alone). */
#include "nn_common.h"

/* ---- the typed kernels ------------------------------------------------------------------------ */
/* float64 has no small-product path: BLAS takes them all */
static bool no_dgemm1(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double *A, int64_t lda,
                      const double *B, int64_t ldb, double beta, double *C, int64_t ldc) {
    (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda, (void)B, (void)ldb, (void)beta;
    (void)C, (void)ldc;
    return false;
}

#define T float
#define FN(name) name##_f32
#define PD_GEMM cblas_sgemm
#define PD_GEMM1 pd__dnnl_sgemm1
#define EXP pd__expf
#include "nn_impl.h"
#undef T
#undef FN
#undef PD_GEMM
#undef PD_GEMM1
#undef EXP

#define T double
#define FN(name) name##_f64
#define PD_GEMM cblas_dgemm
#define PD_GEMM1 no_dgemm1
#define EXP exp
#include "nn_impl.h"
#undef T
#undef FN
#undef PD_GEMM
#undef PD_GEMM1
#undef EXP

/* The gradient of output j / the gradient wanted for input i: NULL when
 * absent, not wanted, or beyond the node's count. */
static const pd_tensor *gout(const pd__node *n, pd_tensor *const *dout, int j) {
    return j < n->nout ? dout[j] : NULL;
}
static pd_tensor *gin(const pd__node *n, pd_tensor *const *din, int i) { return i < n->nin ? din[i] : NULL; }
static void *dptr(const pd_tensor *t) { return t ? t->data : NULL; }

/* ---- float16 and bfloat16 through the float32 kernels ------------------------------------------- */

/* MatMul, Conv, Attention, Softmax and LogSoftmax take float16/bfloat16 as
 * ONNX's references do:
 * widened to float32, computed, and the float outputs (gradients) rounded
 * back once. The float32 copies are allocated per call: a convenience path,
 * not a fast one. Tensors of other dtypes (masks, lengths) pass as they are. */
static bool is_half(pd_dtype t) { return t == PD_FLOAT16 || t == PD_BFLOAT16; }

#define PD_HALF_MAX 16 /* inputs or outputs of the ops that take this path */

/* float32 views w of t[0..n): the half ones point into mem (NULL: only
 * counting) and are filled from t when copy. Returns the floats they take. */
static int64_t half_widen(pd_tensor *const *t, int n, pd_tensor *w, pd_tensor **wp, float *mem, bool copy) {
    int64_t used = 0;
    for (int i = 0; i < n; i++) {
        wp[i] = t[i] ? &w[i] : NULL;
        if (!t[i]) continue;
        w[i] = *t[i];
        if (!is_half(t[i]->dtype)) continue;
        int64_t k = pd_tensor_numel(t[i]);
        w[i].dtype = PD_FLOAT;
        w[i].data = mem ? mem + used : NULL;
        for (int64_t j = 0; mem && copy && j < k; j++) mem[used + j] = (float)pd__get_f(t[i]->dtype, t[i]->data, j);
        used += k;
    }
    return used;
}

static void half_narrow(pd_tensor *const *t, int n, const pd_tensor *w) {
    for (int i = 0; i < n; i++)
        if (t[i] && is_half(t[i]->dtype))
            for (int64_t j = 0, k = pd_tensor_numel(t[i]); j < k; j++)
                pd__set_f(t[i]->dtype, t[i]->data, j, ((const float *)w[i].data)[j]);
}

/* fwd, or bwd when given, on float32 views of in, out (and dout, din). */
static pd_status half_run(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                          pd_tensor *const *dout, pd_tensor *const *din, pd__kernel_fn fwd, pd__grad_fn bwd) {
    if (n->nin > PD_HALF_MAX || n->nout > PD_HALF_MAX)
        return pd__err(PD_ERR_UNSUPPORTED, "float16 with %d inputs and %d outputs", n->nin, n->nout);
    pd_tensor wi[PD_HALF_MAX], wo[PD_HALF_MAX], wdo[PD_HALF_MAX], wdi[PD_HALF_MAX];
    pd_tensor *pi[PD_HALF_MAX], *po[PD_HALF_MAX], *pdo[PD_HALF_MAX], *pdi[PD_HALF_MAX];
    int64_t k = half_widen(in, n->nin, wi, pi, NULL, false) + half_widen(out, n->nout, wo, po, NULL, false);
    if (bwd) k += half_widen(dout, n->nout, wdo, pdo, NULL, false) + half_widen(din, n->nin, wdi, pdi, NULL, false);
    float *mem = PD_MALLOC((size_t)(k > 0 ? k : 1) * sizeof(float));
    if (!mem) return pd__err(PD_ERR_NOMEM, "cannot allocate float32 copies of %lld float16 values", (long long)k);
    float *p = mem;
    p += half_widen(in, n->nin, wi, pi, p, true);
    p += half_widen(out, n->nout, wo, po, p, bwd != NULL); /* the backward reads the forward's outputs */
    pd_status st;
    if (bwd) {
        p += half_widen(dout, n->nout, wdo, pdo, p, true);
        half_widen(din, n->nin, wdi, pdi, p, true); /* the kernel adds into what is there */
        st = bwd(x, n, pi, po, pdo, pdi);
        if (st == PD_OK) half_narrow(din, n->nin, wdi);
    } else {
        st = fwd(x, n, pi, po);
        if (st == PD_OK) half_narrow(out, n->nout, wo);
    }
    PD_FREE(mem);
    return st;
}

#define PD_HALF_FWD(fn)                                                                                           \
    if (is_half(in[0]->dtype)) return half_run(x, n, in, out, NULL, NULL, fn, NULL)
#define PD_HALF_BWD(fn)                                                                                           \
    if (is_half(in[0]->dtype)) return half_run(x, n, in, out, dout, din, NULL, fn)

/* ---- Gemm, MatMul ------------------------------------------------------------------------------- */
pd_status pd__cpu_Gemm(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    bool ta = pd__attr_i(n, "transA", 0) != 0, tb = pd__attr_i(n, "transB", 0) != 0;
    double alpha = pd__attr_f(n, "alpha", 1.0f), beta = pd__attr_f(n, "beta", 1.0f);
    PD_DISPATCH(in[0]->dtype, gemm_op, (x, in[0], in[1], opt_in(n, in, 2), out[0], ta, tb, alpha, beta))
}

pd_status pd__cpu_MatMul(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    PD_HALF_FWD(pd__cpu_MatMul);
    (void)x;
    (void)n;
    PD_DISPATCH(in[0]->dtype, matmul, (in[0], in[1], out[0]))
}

pd_status pd__cpu_Gemm_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                           pd_tensor *const *dout, pd_tensor *const *din) {
    (void)out;
    const pd_tensor *dY = gout(n, dout, 0), *C = opt_in(n, in, 2);
    if (!dY) return PD_OK;
    bool ta = pd__attr_i(n, "transA", 0) != 0, tb = pd__attr_i(n, "transB", 0) != 0;
    double alpha = pd__attr_f(n, "alpha", 1.0f), beta = pd__attr_f(n, "beta", 1.0f);
    PD_DISPATCH(in[0]->dtype, gemm_bwd,
                (x, in[0], in[1], C, dY->data, ta, tb, alpha, beta, dptr(gin(n, din, 0)), dptr(gin(n, din, 1)),
                 C ? dptr(gin(n, din, 2)) : NULL))
}

pd_status pd__cpu_MatMul_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                             pd_tensor *const *dout, pd_tensor *const *din) {
    PD_HALF_BWD(pd__cpu_MatMul_bwd);
    (void)out;
    const pd_tensor *dY = gout(n, dout, 0);
    if (!dY) return PD_OK;
    PD_DISPATCH(in[0]->dtype, matmul_bwd,
                (in[0], in[1], dY->data, dptr(gin(n, din, 0)), dptr(gin(n, din, 1)), pd__fresh(x, 0), pd__fresh(x, 1)))
}

/* ---- Conv, ConvTranspose ------------------------------------------------------------------------- */
pd_status pd__cpu_Conv(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    PD_HALF_FWD(pd__cpu_Conv);
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

pd_status pd__cpu_Conv_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                           pd_tensor *const *dout, pd_tensor *const *din) {
    PD_HALF_BWD(pd__cpu_Conv_bwd);
    (void)out;
    const pd_tensor *dY = gout(n, dout, 0);
    if (!dY) return PD_OK;
    pd__win w;
    PD_TRY(pd__win_make(n, PD_WIN_CONV, in[0]->ndim, in[0]->shape, in[1]->shape + 2, &w));
    int64_t group = pd__attr_i(n, "group", 1);
    void *dB = opt_in(n, in, 2) ? dptr(gin(n, din, 2)) : NULL;
    PD_DISPATCH(in[0]->dtype, conv_bwd,
                (x, &w, group, in[0], in[1], dY->data, dptr(gin(n, din, 0)), dptr(gin(n, din, 1)), dB))
}

pd_status pd__cpu_ConvTranspose_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                                    pd_tensor *const *dout, pd_tensor *const *din) {
    (void)out;
    const pd_tensor *dY = gout(n, dout, 0);
    if (!dY) return PD_OK;
    pd__win w;
    PD_TRY(pd__win_make(n, PD_WIN_CONVT, in[0]->ndim, in[0]->shape, in[1]->shape + 2, &w));
    int64_t group = pd__attr_i(n, "group", 1);
    void *dB = opt_in(n, in, 2) ? dptr(gin(n, din, 2)) : NULL;
    PD_DISPATCH(in[0]->dtype, conv_transpose_bwd,
                (x, &w, group, in[0], in[1], dY->data, dptr(gin(n, din, 0)), dptr(gin(n, din, 1)), dB))
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

/* X (N, F, S) with F the params' size: C, or C*D1*... with spatial=0.
 * Batch statistics (mean, biased variance over N and S) in two cases:
 * - the node's own training mode (training_mode=1, extra outputs, is_test=0),
 *   as ONNX: the updated running statistics go to outputs 1 and 2
 *   (momentum*running + (1-momentum)*batch, biased variance);
 * - a node exported for inference run by a training session (x->training),
 *   as PyTorch's BatchNorm in train mode: the running mean/var inputs 3 and
 *   4 are updated in place with the unbiased batch variance (n/(n-1)). */
pd_status pd__cpu_BatchNormalization(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    const pd_tensor *X = in[0];
    int64_t N = X->shape[0], F = pd_tensor_numel(in[1]), numel = pd_tensor_numel(X);
    int64_t S = N > 0 && F > 0 ? numel / (N * F) : 0;
    double eps = pd__attr_f(n, "epsilon", 1e-5f), mom = pd__attr_f(n, "momentum", 0.9f);
    bool node_train = pd__bn_training(n), session_train = !node_train && x->training;
    bool train = node_train || session_train;
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
    if (session_train && N * S > 0) { /* an empty batch has no statistics to fold in */
        /* one value per feature has no unbiased variance: the biased one (0) stands in */
        double cnt = (double)(N * S), unb = cnt > 1 ? cnt / (cnt - 1) : 1;
        for (int64_t f = 0; f < F; f++) {
            mu[f] = mom * mu[f] + (1 - mom) * bm[f];
            va[f] = mom * va[f] + (1 - mom) * bv[f] * unb;
            pd__set_f(in[3]->dtype, in[3]->data, f, mu[f]);
            pd__set_f(in[4]->dtype, in[4]->data, f, va[f]);
        }
    }
    pd_tensor *rm = opt_out(n, out, 1), *rv = opt_out(n, out, 2);
    pd_tensor *smo = n->opset < 14 ? opt_out(n, out, 3) : NULL, *svo = n->opset < 14 ? opt_out(n, out, 4) : NULL;
    for (int64_t f = 0; f < F; f++) {
        if (rm) pd__set_f(rm->dtype, rm->data, f, node_train ? mom * mu[f] + (1 - mom) * bm[f] : mu[f]);
        if (rv) pd__set_f(rv->dtype, rv->data, f, node_train ? mom * va[f] + (1 - mom) * bv[f] : va[f]);
        if (smo) pd__set_f(smo->dtype, smo->data, f, um[f]);
        if (svo) pd__set_f(svo->dtype, svo->data, f, uv[f]);
    }
    return PD_OK;
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

static pd_status bn_grad(pd__exec *x, pd_dtype dt, int64_t N, int64_t F, int64_t S, const void *X, const void *dY,
                         const double *mean, const double *istd, const double *scale, bool batch, void *dX,
                         double *sdy, double *sdyx) {
    PD_DISPATCH(dt, bn_bwd, (x, N, F, S, X, dY, mean, istd, scale, batch, dX, sdy, sdyx))
}

/* With batch statistics (the node's training mode, or a training session,
 * as the forward) the gradient goes through the mean and variance, which
 * are recomputed from X: the running statistics were updated by the
 * forward already. Otherwise (inference) it is the affine map's with the
 * running statistics. The running statistics outputs carry no gradient. */
pd_status pd__cpu_BatchNormalization_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in,
                                         pd_tensor *const *out, pd_tensor *const *dout, pd_tensor *const *din) {
    (void)out;
    const pd_tensor *X = in[0], *dY = gout(n, dout, 0);
    pd_tensor *dX = gin(n, din, 0), *dS = gin(n, din, 1), *dB = gin(n, din, 2);
    if (!dY || (!dX && !dS && !dB)) return PD_OK;
    int64_t N = X->shape[0], F = pd_tensor_numel(in[1]), numel = pd_tensor_numel(X);
    int64_t S = N > 0 && F > 0 ? numel / (N * F) : 0;
    double eps = pd__attr_f(n, "epsilon", 1e-5f);
    bool batch = pd__bn_training(n) || x->training;
    double *buf = pd__scratch_n(x, 6, F, sizeof(double));
    if (!buf) return PD_ERR_NOMEM;
    double *sc = buf, *mean = sc + F, *var = mean + F, *istd = var + F, *sdy = istd + F, *sdyx = sdy + F;
    for (int64_t f = 0; f < F; f++) sc[f] = pd__get_f(in[1]->dtype, in[1]->data, f);
    if (batch) {
        PD_TRY(bn_stats(x, X->dtype, N, F, S, X->data, mean, var));
    } else {
        for (int64_t f = 0; f < F; f++) {
            mean[f] = pd__get_f(in[3]->dtype, in[3]->data, f);
            var[f] = pd__get_f(in[4]->dtype, in[4]->data, f);
        }
    }
    for (int64_t f = 0; f < F; f++) istd[f] = 1.0 / sqrt(var[f] + eps);
    PD_TRY(bn_grad(x, X->dtype, N, F, S, X->data, dY->data, mean, istd, sc, batch, dptr(dX), sdy, sdyx));
    for (int64_t f = 0; f < F; f++) {
        if (dS) pd__set_f(dS->dtype, dS->data, f, pd__get_f(dS->dtype, dS->data, f) + sdyx[f]);
        if (dB) pd__set_f(dB->dtype, dB->data, f, pd__get_f(dB->dtype, dB->data, f) + sdy[f]);
    }
    return PD_OK;
}

static pd_status ln_grad(pd__exec *x, pd_dtype dt, int64_t R, int64_t D, const void *X, const void *scale,
                         double eps, const void *dY, const void *dm, const void *di, pd_dtype mdt, void *dX,
                         double *st, double *dsc, double *dbi) {
    PD_DISPATCH(dt, layer_norm_bwd, (x, R, D, X, scale, eps, dY, dm, di, mdt, dX, st, dsc, dbi))
}

/* dp (broadcastable to shape, nd dims) += the sum of dense (D) over the
 * positions each of its elements was broadcast to. */
static void reduce_param(pd_tensor *dp, int nd, const int64_t *shape, int64_t D, const double *dense) {
    int64_t idx[PD_MAX_DIMS] = {0};
    for (int64_t i = 0; i < D; i++) {
        int64_t off = param_offset(dp, nd, idx);
        pd__set_f(dp->dtype, dp->data, off, pd__get_f(dp->dtype, dp->data, off) + dense[i]);
        odo_next(idx, shape, nd);
    }
}

pd_status pd__cpu_LayerNormalization_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in,
                                         pd_tensor *const *out, pd_tensor *const *dout, pd_tensor *const *din) {
    const pd_tensor *X = in[0], *scale = in[1], *bias = opt_in(n, in, 2);
    const pd_tensor *dY = gout(n, dout, 0), *dM = gout(n, dout, 1), *dI = gout(n, dout, 2);
    pd_tensor *dX = gin(n, din, 0), *dS = gin(n, din, 1), *dB = bias ? gin(n, din, 2) : NULL;
    if (!dY) dS = dB = NULL;
    if (!dY && !dM && !dI) return PD_OK;
    if (!dX && !dS && !dB) return PD_OK;
    int r = X->ndim;
    int64_t axis = pd__attr_i(n, "axis", -1);
    if (axis < 0) axis += r;
    if (axis < 0 || axis >= r) return pd__err(PD_ERR_SHAPE, "axis %lld is out of range", (long long)axis);
    int nd = r - (int)axis;
    int64_t R = prod64((int)axis, X->shape), D = prod64(nd, X->shape + axis);
    double eps = pd__attr_f(n, "epsilon", 1e-5f);
    bool exs = pd_tensor_numel(scale) != D;
    /* scratch: row statistics (2R), dense dScale and dB (2D), the expanded scale (D) */
    char *buf = pd__scratch_n(x, 2 * R + 2 * D + D, 1, sizeof(double));
    if (!buf) return PD_ERR_NOMEM;
    double *st = (double *)buf, *dsc = st + 2 * R, *dbi = dsc + D;
    const void *sd = scale->data;
    if (exs) {
        expand_param(scale, nd, X->shape + axis, D, X->dtype, dbi + D);
        sd = dbi + D;
    }
    const pd_tensor *mo = opt_out(n, out, 1), *io = opt_out(n, out, 2);
    pd_dtype mdt = dM && mo ? mo->dtype : dI && io ? io->dtype : PD_FLOAT;
    PD_TRY(ln_grad(x, X->dtype, R, D, X->data, sd, eps, dptr(dY), dptr(dM), dptr(dI), mdt, dptr(dX), st,
                   dS ? dsc : NULL, dB ? dbi : NULL));
    if (dS) reduce_param(dS, nd, X->shape + axis, D, dsc);
    if (dB) reduce_param(dB, nd, X->shape + axis, D, dbi);
    return PD_OK;
}

/* ---- InstanceNormalization, GroupNormalization, RMSNormalization ---- */

/* The (N, C, S) view and the group count of an InstanceNormalization (G =
 * C) or GroupNormalization node, and its scale and bias read per channel
 * into sc, bi (C doubles each): GroupNormalization before opset 21 gives
 * them per group, each shared by the group's C/G channels. */
static void gn_view(const pd__node *n, pd_tensor *const *in, bool group, int64_t *N, int64_t *C, int64_t *G,
                    int64_t *S, double *sc, double *bi) {
    const pd_tensor *X = in[0];
    *N = X->shape[0];
    *C = X->shape[1];
    *S = prod64(X->ndim - 2, X->shape + 2);
    *G = group ? pd__attr_i(n, "num_groups", 1) : *C;
    bool per_group = group && n->opset < 21;
    for (int64_t c = 0; c < *C; c++) {
        int64_t k = per_group ? c / (*C / *G) : c;
        if (sc) sc[c] = pd__get_f(in[1]->dtype, in[1]->data, k);
        if (bi) bi[c] = pd__get_f(in[2]->dtype, in[2]->data, k);
    }
}

static pd_status gn_run(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out, bool group) {
    const pd_tensor *X = in[0];
    int64_t C = X->shape[1], N, G, S;
    double *sc = pd__scratch_n(x, 2, C, sizeof(double));
    if (!sc) return PD_ERR_NOMEM;
    gn_view(n, in, group, &N, &C, &G, &S, sc, sc + C);
    double eps = pd__attr_f(n, "epsilon", 1e-5f);
    PD_DISPATCH(X->dtype, group_norm, (x, N, C, G, S, X->data, sc, sc + C, eps, out[0]->data))
}

static pd_status gn_grad_run(pd__exec *x, pd_dtype dt, int64_t N, int64_t C, int64_t G, int64_t S, const void *X,
                             const void *dY, const double *sc, double eps, void *dX, double *st, double *dsc,
                             double *dbi) {
    PD_DISPATCH(dt, group_norm_bwd, (x, N, C, G, S, X, dY, sc, eps, dX, st, dsc, dbi))
}

/* dX through the group statistics; dscale, dbias summed per channel, and
 * per group (over its channels) for GroupNormalization before opset 21. */
static pd_status gn_grad(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *dout,
                         pd_tensor *const *din, bool group) {
    const pd_tensor *X = in[0], *dY = gout(n, dout, 0);
    pd_tensor *dX = gin(n, din, 0), *dS = gin(n, din, 1), *dB = gin(n, din, 2);
    if (!dY || (!dX && !dS && !dB)) return PD_OK;
    int64_t C = X->shape[1], N, G, S;
    /* scratch: the per-channel scale, dscale, dbias (3C), row statistics (2*N*G) */
    int64_t R = X->shape[0] * (group ? pd__attr_i(n, "num_groups", 1) : C);
    double *sc = pd__scratch_n(x, 3 * C + 2 * R, 1, sizeof(double));
    if (!sc) return PD_ERR_NOMEM;
    double *dsc = sc + C, *dbi = dsc + C, *st = dbi + C;
    gn_view(n, in, group, &N, &C, &G, &S, sc, NULL);
    double eps = pd__attr_f(n, "epsilon", 1e-5f);
    PD_TRY(gn_grad_run(x, X->dtype, N, C, G, S, X->data, dY->data, sc, eps, dptr(dX), st, dS ? dsc : NULL,
                       dB ? dbi : NULL));
    bool per_group = group && n->opset < 21;
    for (int j = 0; j < 2; j++) {
        pd_tensor *dp = j ? dB : dS;
        const double *v = j ? dbi : dsc;
        if (!dp) continue;
        for (int64_t c = 0; c < C; c++) {
            int64_t k = per_group ? c / (C / G) : c;
            pd__set_f(dp->dtype, dp->data, k, pd__get_f(dp->dtype, dp->data, k) + v[c]);
        }
    }
    return PD_OK;
}

pd_status pd__cpu_InstanceNormalization(pd__exec *x, const pd__node *n, pd_tensor *const *in,
                                        pd_tensor *const *out) {
    return gn_run(x, n, in, out, false);
}

pd_status pd__cpu_InstanceNormalization_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in,
                                            pd_tensor *const *out, pd_tensor *const *dout, pd_tensor *const *din) {
    (void)out;
    return gn_grad(x, n, in, dout, din, false);
}

pd_status pd__cpu_GroupNormalization(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    return gn_run(x, n, in, out, true);
}

pd_status pd__cpu_GroupNormalization_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in,
                                         pd_tensor *const *out, pd_tensor *const *dout, pd_tensor *const *din) {
    (void)out;
    return gn_grad(x, n, in, dout, din, true);
}

/* Rows (R, D) of an RMSNormalization node, and its scale dense over D at
 * *sd (expanded into buf, D elements of X's dtype, when it broadcasts). */
static pd_status rms_view(const pd__node *n, pd_tensor *const *in, int64_t *R, int64_t *D, int *nd, void *buf,
                          const void **sd) {
    const pd_tensor *X = in[0], *scale = in[1];
    int r = X->ndim;
    int64_t axis = pd__attr_i(n, "axis", -1);
    if (axis < 0) axis += r;
    if (axis < 0 || axis >= r) return pd__err(PD_ERR_SHAPE, "axis %lld is out of range", (long long)axis);
    *nd = r - (int)axis;
    *R = prod64((int)axis, X->shape);
    *D = prod64(*nd, X->shape + axis);
    *sd = scale->data;
    if (pd_tensor_numel(scale) != *D) {
        expand_param(scale, *nd, X->shape + axis, *D, X->dtype, buf);
        *sd = buf;
    }
    return PD_OK;
}

pd_status pd__cpu_RMSNormalization(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    const pd_tensor *X = in[0];
    int64_t R, D = pd_tensor_numel(X);
    int nd;
    void *buf = pd__scratch_n(x, D, 1, pd_dtype_size(X->dtype));
    if (!buf) return PD_ERR_NOMEM;
    const void *sd;
    PD_TRY(rms_view(n, in, &R, &D, &nd, buf, &sd));
    double eps = pd__attr_f(n, "epsilon", 1e-5f);
    PD_DISPATCH(X->dtype, rms_norm, (x, R, D, X->data, sd, eps, out[0]->data))
}

static pd_status rms_grad(pd__exec *x, pd_dtype dt, int64_t R, int64_t D, const void *X, const void *scale,
                          double eps, const void *dY, void *dX, double *st, double *dsc) {
    PD_DISPATCH(dt, rms_norm_bwd, (x, R, D, X, scale, eps, dY, dX, st, dsc))
}

pd_status pd__cpu_RMSNormalization_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in,
                                       pd_tensor *const *out, pd_tensor *const *dout, pd_tensor *const *din) {
    (void)out;
    const pd_tensor *X = in[0], *dY = gout(n, dout, 0);
    pd_tensor *dX = gin(n, din, 0), *dS = gin(n, din, 1);
    if (!dY || (!dX && !dS)) return PD_OK;
    int64_t numel = pd_tensor_numel(X), R, D;
    int nd;
    /* scratch: row statistics (numel at most), dense dscale (numel at most), the expanded scale (numel) */
    double *st = pd__scratch_n(x, 3 * numel + 2, 1, sizeof(double));
    if (!st) return PD_ERR_NOMEM;
    double *dsc = st + numel + 1, *buf = dsc + numel + 1;
    const void *sd;
    PD_TRY(rms_view(n, in, &R, &D, &nd, buf, &sd));
    double eps = pd__attr_f(n, "epsilon", 1e-5f);
    PD_TRY(rms_grad(x, X->dtype, R, D, X->data, sd, eps, dY->data, dptr(dX), st, dS ? dsc : NULL));
    if (dS) reduce_param(dS, nd, X->shape + (X->ndim - nd), D, dsc);
    return PD_OK;
}

/* ---- LpNormalization, MeanVarianceNormalization ---- */

static void lpn_view(const pd__node *n, const pd_tensor *X, int64_t *outer, int64_t *len, int64_t *inner, int *p) {
    int64_t a = pd__attr_i(n, "axis", -1);
    int axis = (int)(a < 0 ? a + X->ndim : a);
    *outer = prod64(axis, X->shape);
    *len = X->shape[axis];
    *inner = prod64(X->ndim - axis - 1, X->shape + axis + 1);
    *p = (int)pd__attr_i(n, "p", 2);
}

pd_status pd__cpu_LpNormalization(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    int64_t o, l, i;
    int p;
    lpn_view(n, in[0], &o, &l, &i, &p);
    PD_DISPATCH(in[0]->dtype, lp_norm, (x, o, l, i, p, in[0]->data, out[0]->data))
}

pd_status pd__cpu_LpNormalization_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                                      pd_tensor *const *dout, pd_tensor *const *din) {
    (void)out;
    const pd_tensor *dY = gout(n, dout, 0);
    pd_tensor *dX = gin(n, din, 0);
    if (!dY || !dX) return PD_OK;
    int64_t o, l, i;
    int p;
    lpn_view(n, in[0], &o, &l, &i, &p);
    PD_DISPATCH(in[0]->dtype, lp_norm_bwd, (x, o, l, i, p, in[0]->data, dY->data, dX->data))
}

/* The group of each element of X (key, numel) over MeanVarianceNormalization's
 * axes: its index over the dims kept; *K groups. */
static pd_status mvn_keys(pd__exec *x, const pd__node *n, const pd_tensor *X, int64_t extra, int64_t **key,
                          int64_t *K) {
    bool red[PD_MAX_DIMS];
    if (pd__mvn_axes(n, X->ndim, red) < 0) return pd__err(PD_ERR_SHAPE, "axes out of range or repeated");
    int64_t numel = pd_tensor_numel(X), kdim[PD_MAX_DIMS], idx[PD_MAX_DIMS] = {0};
    *K = 1;
    for (int d = 0; d < X->ndim; d++) {
        kdim[d] = red[d] ? 1 : X->shape[d];
        *K *= kdim[d];
    }
    /* scratch: the keys (numel), then `extra` doubles per group */
    *key = pd__scratch_n(x, numel + extra * *K + 1, 1, sizeof(int64_t));
    if (!*key) return PD_ERR_NOMEM;
    for (int64_t e = 0; e < numel; e++) {
        int64_t k = 0;
        for (int d = 0; d < X->ndim; d++) k = k * kdim[d] + (red[d] ? 0 : idx[d]);
        (*key)[e] = k;
        odo_next(idx, X->shape, X->ndim);
    }
    return PD_OK;
}

pd_status pd__cpu_MeanVarianceNormalization(pd__exec *x, const pd__node *n, pd_tensor *const *in,
                                            pd_tensor *const *out) {
    const pd_tensor *X = in[0];
    int64_t *key, K, numel = pd_tensor_numel(X);
    PD_TRY(mvn_keys(x, n, X, 2, &key, &K));
    double *st = (double *)(key + numel);
    PD_DISPATCH(X->dtype, mvn, (numel, K, key, X->data, st, out[0]->data))
}

pd_status pd__cpu_MeanVarianceNormalization_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in,
                                                pd_tensor *const *out, pd_tensor *const *dout,
                                                pd_tensor *const *din) {
    (void)out;
    const pd_tensor *X = in[0], *dY = gout(n, dout, 0);
    pd_tensor *dX = gin(n, din, 0);
    if (!dY || !dX) return PD_OK;
    int64_t *key, K, numel = pd_tensor_numel(X);
    PD_TRY(mvn_keys(x, n, X, 4, &key, &K));
    double *st = (double *)(key + numel);
    PD_DISPATCH(X->dtype, mvn_bwd, (numel, K, key, X->data, dY->data, st, dX->data))
}

static pd_status lrn_grad(pd__exec *x, pd_dtype dt, int64_t N, int64_t C, int64_t S, const void *X, const void *dY,
                          int64_t size, double alpha, double beta, double bias, double *Q, void *dX) {
    PD_DISPATCH(dt, lrn_bwd, (x, N, C, S, X, dY, size, alpha, beta, bias, Q, dX))
}

pd_status pd__cpu_LRN_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                          pd_tensor *const *dout, pd_tensor *const *din) {
    (void)out;
    const pd_tensor *X = in[0], *dY = gout(n, dout, 0);
    pd_tensor *dX = gin(n, din, 0);
    if (!dY || !dX) return PD_OK;
    int64_t N = X->shape[0], C = X->shape[1], S = prod64(X->ndim - 2, X->shape + 2);
    int64_t size = pd__attr_i(n, "size", 1);
    double alpha = pd__attr_f(n, "alpha", 1e-4f), beta = pd__attr_f(n, "beta", 0.75f),
           bias = pd__attr_f(n, "bias", 1.0f);
    double *Q = pd__scratch_n(x, pd_tensor_numel(X), 1, sizeof(double));
    if (!Q) return PD_ERR_NOMEM;
    return lrn_grad(x, X->dtype, N, C, S, X->data, dY->data, size, alpha, beta, bias, Q, dX->data);
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

pd_status pd__cpu_MaxPool_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                              pd_tensor *const *dout, pd_tensor *const *din) {
    const pd_tensor *X = in[0], *dY = gout(n, dout, 0);
    pd_tensor *dX = gin(n, din, 0);
    if (!dY || !dX) return PD_OK;
    pd__win w;
    PD_TRY(pd__win_make(n, PD_WIN_POOL, X->ndim, X->shape, NULL, &w));
    int64_t NC = X->shape[0] * X->shape[1], ny = NC * prod64(w.nsp, w.out);
    /* scratch: the argmax (ny int64), then the recomputed Y (ny) */
    int64_t *ind = pd__scratch_n(x, 2 * ny, 1, sizeof(int64_t));
    if (!ind) return PD_ERR_NOMEM;
    const void *Y = out[0] ? out[0]->data : NULL; /* the forward's output: its maxima */
    PD_DISPATCH(X->dtype, maxpool_bwd, (x, &w, NC, X->data, Y, dY->data, (void *)(ind + ny), ind, dX->data))
}

static pd_status avgpool_grad(pd__exec *x, pd_dtype dt, const pd__win *w, int64_t NC, const void *dY,
                              const int64_t *cnt, void *G, void *dX) {
    PD_DISPATCH(dt, avgpool_bwd, (x, w, NC, dY, cnt, G, dX))
}

pd_status pd__cpu_AveragePool_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                                  pd_tensor *const *dout, pd_tensor *const *din) {
    (void)out;
    const pd_tensor *X = in[0], *dY = gout(n, dout, 0);
    pd_tensor *dX = gin(n, din, 0);
    if (!dY || !dX) return PD_OK;
    pd__win w;
    PD_TRY(pd__win_make(n, PD_WIN_POOL, X->ndim, X->shape, NULL, &w));
    int64_t NC = X->shape[0] * X->shape[1], nc = 0, ny = NC * prod64(w.nsp, w.out);
    for (int i = 0; i < w.nsp; i++) nc += w.out[i];
    /* scratch: the per-dim counts (nc int64), then dY / count (ny, as wide as a double at most) */
    int64_t *cnt = pd__scratch_n(x, nc + ny, 1, sizeof(int64_t));
    if (!cnt) return PD_ERR_NOMEM;
    pool_counts(&w, pd__attr_i(n, "count_include_pad", 0) != 0, cnt);
    return avgpool_grad(x, X->dtype, &w, NC, dY->data, cnt, cnt + nc, dX->data);
}

pd_status pd__cpu_GlobalAveragePool_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                                        pd_tensor *const *dout, pd_tensor *const *din) {
    (void)out;
    const pd_tensor *X = in[0], *dY = gout(n, dout, 0);
    pd_tensor *dX = gin(n, din, 0);
    if (!dY || !dX) return PD_OK;
    int64_t NC = X->shape[0] * X->shape[1], S = prod64(X->ndim - 2, X->shape + 2);
    PD_DISPATCH(X->dtype, global_avgpool_bwd, (x, NC, S, dY->data, dX->data))
}

pd_status pd__cpu_GlobalMaxPool(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)n;
    const pd_tensor *X = in[0];
    int64_t NC = X->shape[0] * X->shape[1], S = prod64(X->ndim - 2, X->shape + 2);
    PD_DISPATCH(X->dtype, global_maxpool, (x, NC, S, X->data, out[0]->data))
}

pd_status pd__cpu_GlobalMaxPool_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                                    pd_tensor *const *dout, pd_tensor *const *din) {
    (void)out;
    const pd_tensor *X = in[0], *dY = gout(n, dout, 0);
    pd_tensor *dX = gin(n, din, 0);
    if (!dY || !dX) return PD_OK;
    int64_t NC = X->shape[0] * X->shape[1], S = prod64(X->ndim - 2, X->shape + 2);
    PD_DISPATCH(X->dtype, global_maxpool_bwd, (x, NC, S, X->data, dY->data, dX->data))
}

pd_status pd__cpu_LpPool(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    const pd_tensor *X = in[0];
    pd__win w;
    PD_TRY(pd__win_make(n, PD_WIN_POOL, X->ndim, X->shape, NULL, &w));
    int64_t NC = X->shape[0] * X->shape[1];
    PD_DISPATCH(X->dtype, lppool, (x, &w, NC, pd__lppool_p(n), X->data, out[0]->data, NULL, NULL))
}

pd_status pd__cpu_LpPool_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                             pd_tensor *const *dout, pd_tensor *const *din) {
    (void)out;
    const pd_tensor *X = in[0], *dY = gout(n, dout, 0);
    pd_tensor *dX = gin(n, din, 0);
    if (!dY || !dX) return PD_OK;
    pd__win w;
    PD_TRY(pd__win_make(n, PD_WIN_POOL, X->ndim, X->shape, NULL, &w));
    int64_t NC = X->shape[0] * X->shape[1];
    /* scratch: Y recomputed (NC * OUT) */
    void *Y = pd__scratch_n(x, NC * prod64(w.nsp, w.out), 1, pd_dtype_size(X->dtype));
    if (!Y) return PD_ERR_NOMEM;
    PD_DISPATCH(X->dtype, lppool, (x, &w, NC, pd__lppool_p(n), X->data, Y, dY->data, dX->data))
}

/* ---- MaxUnpool: X's elements put where I says, zeros elsewhere ---- */
/* off[j] = the output offset of X's element j: I[j] is a flat index into
 * the frame (pd__maxunpool_shapes), which sits at the output's start. */
static pd_status unpool_offsets(pd__exec *x, const pd__node *n, pd_tensor *const *in, int64_t *ynumel, int64_t **off) {
    int64_t frame[PD_MAX_DIMS], oshape[PD_MAX_DIMS], fst[PD_MAX_DIMS], ost[PD_MAX_DIMS];
    PD_TRY(pd__maxunpool_shapes(n, in, frame, oshape));
    int r = in[0]->ndim;
    int64_t fn = 1, on = 1, m = pd_tensor_numel(in[0]);
    for (int d = r - 1; d >= 0; d--) {
        fst[d] = fn, ost[d] = on;
        fn *= frame[d], on *= oshape[d];
    }
    *ynumel = on;
    *off = pd__scratch(x, (size_t)(m + 1) * sizeof(int64_t));
    if (*off == NULL) return PD_ERR_NOMEM;
    const int64_t *ind = in[1]->data;
    for (int64_t j = 0; j < m; j++) {
        int64_t v = ind[j], o = 0;
        if (v < 0 || v >= fn)
            return pd__err(PD_ERR_INVALID, "index %lld is outside the unpooled %lld elements", (long long)v,
                           (long long)fn);
        for (int d = 0; d < r; d++) o += v / fst[d] % frame[d] * ost[d];
        (*off)[j] = o;
    }
    return PD_OK;
}

pd_status pd__cpu_MaxUnpool(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    int64_t *off, yn, m = pd_tensor_numel(in[0]);
    PD_TRY(unpool_offsets(x, n, in, &yn, &off));
    size_t es = pd_dtype_size(in[0]->dtype);
    char *y = out[0]->data;
    const char *xs = in[0]->data;
    memset(y, 0, (size_t)yn * es);
    for (int64_t j = 0; j < m; j++) memcpy(y + off[j] * (int64_t)es, xs + j * (int64_t)es, es); /* the last write wins */
    return PD_OK;
}

/* PyTorch's rule: dX[j] += dY[off[j]], also where two elements share an index. */
pd_status pd__cpu_MaxUnpool_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                                pd_tensor *const *dout, pd_tensor *const *din) {
    (void)out;
    if (din[0] == NULL || dout[0] == NULL) return PD_OK;
    if (din[0]->dtype != dout[0]->dtype || !(din[0]->dtype == PD_FLOAT || din[0]->dtype == PD_DOUBLE))
        return pd__err(PD_ERR_UNSUPPORTED, "MaxUnpool backward of %s", pd_dtype_name(din[0]->dtype));
    int64_t *off, yn, m = pd_tensor_numel(in[0]);
    PD_TRY(unpool_offsets(x, n, in, &yn, &off));
    for (int64_t j = 0; j < m; j++) {
        if (din[0]->dtype == PD_FLOAT) ((float *)din[0]->data)[j] += ((const float *)dout[0]->data)[off[j]];
        else ((double *)din[0]->data)[j] += ((const double *)dout[0]->data)[off[j]];
    }
    return PD_OK;
}

/* ---- Resize, Upsample ---- */

/* The plan of a Resize/Upsample node from its inputs, and its taps in scratch. */
static pd_status rsz_prep(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd__rsz *r, int64_t **ti,
                          double **tw) {
    int si, zi;
    pd__resize_inputs(n, &si, &zi);
    const pd_tensor *S = si >= 0 ? opt_in(n, in, si) : NULL, *Z = zi >= 0 ? opt_in(n, in, zi) : NULL;
    const pd_tensor *R = si == 2 ? opt_in(n, in, 1) : NULL;
    PD_TRY(pd__resize_plan(n, in[0]->ndim, in[0]->shape, R, S, Z, r));
    if (r->ctm == PD_RSZ_TF_CROP_AND_RESIZE && !R->data) return pd__err(PD_ERR_INVALID, "roi has no data");
    int64_t nt = 0;
    for (int d = 0; d < r->ndim; d++) nt += r->out[d];
    *ti = pd__scratch_n(x, 2 * r->taps * nt + 1, 1, sizeof(int64_t));
    if (!*ti) return PD_ERR_NOMEM;
    *tw = (double *)(*ti + r->taps * nt);
    resize_taps(r, *ti, *tw);
    return PD_OK;
}

static pd_status rsz_run(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    pd__rsz r;
    int64_t *ti = NULL;
    double *tw = NULL;
    PD_TRY(rsz_prep(x, n, in, &r, &ti, &tw));
    PD_DISPATCH(in[0]->dtype, resize, (x, &r, ti, tw, in[0]->data, out[0]->data, NULL, NULL))
}

static pd_status rsz_grad(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *dout,
                          pd_tensor *const *din) {
    const pd_tensor *dY = gout(n, dout, 0);
    pd_tensor *dX = gin(n, din, 0);
    if (!dY || !dX) return PD_OK;
    pd__rsz r;
    int64_t *ti = NULL;
    double *tw = NULL;
    PD_TRY(rsz_prep(x, n, in, &r, &ti, &tw));
    PD_DISPATCH(in[0]->dtype, resize, (x, &r, ti, tw, NULL, NULL, dY->data, dX->data))
}

pd_status pd__cpu_Resize(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    return rsz_run(x, n, in, out);
}

/* The adjoint of the interpolation, into X only (roi, scales, sizes are not differentiable). */
pd_status pd__cpu_Resize_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                             pd_tensor *const *dout, pd_tensor *const *din) {
    (void)out;
    return rsz_grad(x, n, in, dout, din);
}

pd_status pd__cpu_Upsample(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    return rsz_run(x, n, in, out);
}

pd_status pd__cpu_Upsample_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                               pd_tensor *const *dout, pd_tensor *const *din) {
    (void)out;
    return rsz_grad(x, n, in, dout, din);
}

/* ---- Einsum ---- */

/* The plan, scratch of `extra` elements plus, with one operand, B: ones of
 * e->bshape at the scratch's end (*ones). */
static pd_status ein_prep(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd__ein *e, int64_t extra, void **s,
                          pd_tensor *ones) {
    const pd_tensor *A = in[0], *B = n->nin > 1 ? in[1] : in[0];
    PD_TRY(pd__einsum_plan(n, n->nin, A->ndim, A->shape, B->ndim, B->shape, e));
    int64_t nb = n->nin == 1 ? prod64(e->rb, e->bshape) : 0;
    size_t es = pd_dtype_size(A->dtype);
    *s = pd__scratch_n(x, extra + nb, 1, es);
    if (!*s) return PD_ERR_NOMEM;
    if (n->nin == 1) {
        *ones = (pd_tensor){A->dtype, e->rb, {0}, (char *)*s + (size_t)extra * es};
        memcpy(ones->shape, e->bshape, sizeof(int64_t) * (size_t)e->rb);
        for (int64_t i = 0; i < nb; i++) pd__set_f(A->dtype, ones->data, i, 1);
    } else {
        *ones = *in[1];
    }
    return PD_OK;
}

/* The diagonal of operand k (t, its letters repeated: ein's diag) into dst,
 * a tensor of e->dshape[k]; or with back, dst's values added to t where
 * they came from (the diagonal's adjoint). */
static void ein_diag(const pd__ein *e, int k, pd_tensor *t, pd_tensor *dst, bool back) {
    int64_t st[PD_MAX_DIMS], acc = 1, idx[PD_MAX_DIMS] = {0}, cnt = prod64(e->dr[k], e->dshape[k]);
    size_t es = pd_dtype_size(t->dtype);
    for (int i = t->ndim - 1; i >= 0; i--) st[i] = acc, acc *= t->shape[i];
    for (int64_t q = 0; q < cnt; q++) {
        int64_t off = 0;
        for (int i = 0; i < t->ndim; i++) off += idx[e->dmap[k][i]] * st[i];
        if (back)
            pd__set_f(t->dtype, t->data, off, pd__get_f(t->dtype, t->data, off) + pd__get_f(dst->dtype, dst->data, q));
        else
            memcpy((char *)dst->data + q * (int64_t)es, (const char *)t->data + off * (int64_t)es, es);
        odo_next(idx, e->dshape[k], e->dr[k]);
    }
}

/* A view of e->dshape[k] at mem. */
static pd_tensor ein_view(const pd__ein *e, int k, pd_dtype dt, void *mem) {
    pd_tensor v = {dt, e->dr[k], {0}, mem};
    memcpy(v.shape, e->dshape[k], sizeof(int64_t) * (size_t)e->dr[k]);
    return v;
}

/* The elements of the diagonals the product reads instead of A, B (0 when none). */
static void ein_diag_sizes(const pd__node *n, const pd__ein *e, int64_t *na, int64_t *nb) {
    *na = e->diag[0] ? prod64(e->dr[0], e->dshape[0]) : 0;
    *nb = n->nin > 1 && e->diag[1] ? prod64(e->dr[1], e->dshape[1]) : 0;
}

pd_status pd__cpu_Einsum(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    const pd_tensor *A = in[0], *B = n->nin > 1 ? in[1] : in[0];
    pd__ein e;
    PD_TRY(pd__einsum_plan(n, n->nin, A->ndim, A->shape, B->ndim, B->shape, &e));
    int64_t na, nb;
    ein_diag_sizes(n, &e, &na, &nb);
    void *s;
    pd_tensor Bv, Av = *A;
    PD_TRY(ein_prep(x, n, in, &e, na + nb + e.B * e.M * e.K + e.B * e.K * e.N + e.B * e.M * e.N, &s, &Bv));
    size_t es = pd_dtype_size(A->dtype);
    if (na) Av = ein_view(&e, 0, A->dtype, s), ein_diag(&e, 0, in[0], &Av, false);
    if (nb) Bv = ein_view(&e, 1, A->dtype, (char *)s + na * es), ein_diag(&e, 1, in[1], &Bv, false);
    PD_DISPATCH(A->dtype, einsum, (&e, &Av, &Bv, out[0]->data, (void *)((char *)s + (na + nb) * es)))
}

pd_status pd__cpu_Einsum_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                             pd_tensor *const *dout, pd_tensor *const *din) {
    (void)out;
    const pd_tensor *A = in[0], *B = n->nin > 1 ? in[1] : in[0], *dY = gout(n, dout, 0);
    pd_tensor *dA = gin(n, din, 0), *dB = n->nin > 1 ? gin(n, din, 1) : NULL;
    if (!dY || (!dA && !dB)) return PD_OK;
    pd__ein e;
    PD_TRY(pd__einsum_plan(n, n->nin, A->ndim, A->shape, B->ndim, B->shape, &e));
    int64_t na, nb;
    ein_diag_sizes(n, &e, &na, &nb);
    void *s;
    pd_tensor Bv, Av = *A, dAv, dBv;
    /* scratch: the diagonals A', B', their gradients dA', dB', the product's own */
    int64_t own = 2 * (e.B * e.M * e.K + e.B * e.K * e.N) + e.B * e.M * e.N;
    PD_TRY(ein_prep(x, n, in, &e, 2 * (na + nb) + own, &s, &Bv));
    size_t es = pd_dtype_size(A->dtype);
    char *m = s;
    if (na) {
        Av = ein_view(&e, 0, A->dtype, m), ein_diag(&e, 0, in[0], &Av, false);
        dAv = ein_view(&e, 0, A->dtype, m + (na + nb) * es);
        memset(dAv.data, 0, (size_t)na * es);
    }
    if (nb) {
        Bv = ein_view(&e, 1, A->dtype, m + na * es), ein_diag(&e, 1, in[1], &Bv, false);
        dBv = ein_view(&e, 1, A->dtype, m + (2 * na + nb) * es);
        memset(dBv.data, 0, (size_t)nb * es);
    }
    void *pa = dA && na ? dAv.data : dptr(dA), *pb = dB && nb ? dBv.data : dptr(dB);
    pd_status st;
    switch (A->dtype) {
    case PD_FLOAT: st = einsum_bwd_f32(&e, &Av, &Bv, dY->data, pa, pb, (void *)(m + 2 * (na + nb) * es)); break;
    case PD_DOUBLE: st = einsum_bwd_f64(&e, &Av, &Bv, dY->data, pa, pb, (void *)(m + 2 * (na + nb) * es)); break;
    default: return pd__err(PD_ERR_UNSUPPORTED, "Einsum backward of %s", pd_dtype_name(A->dtype));
    }
    PD_TRY(st);
    if (dA && na) ein_diag(&e, 0, dA, &dAv, true);
    if (dB && nb) ein_diag(&e, 1, dB, &dBv, true);
    return PD_OK;
}

/* ---- DeformConv ---- */
/* A convolution whose taps move: tap k of output (i, j) reads X at
 * (i sh - pt + kh dh + dy, j sw - pl + kw dw + dx), (dy, dx) from offset for
 * the tap's offset group, bilinearly with zeros outside (GridSample with
 * align_corners, as ONNX's reference samples), times the mask (1 when absent).
 * The samples go into col (C, KH KW, OH, OW) per image, which the weights
 * then contract as a grouped convolution would. Reads and writes through
 * pd__get_f / pd__set_f, in double: a reference kernel, not a fast one. */
static inline double dget(const pd_tensor *t, int64_t i) { return pd__get_f(t->dtype, t->data, i); }
static inline void dadd(pd_tensor *t, int64_t i, double v) { pd__set_f(t->dtype, t->data, i, dget(t, i) + v); }

/* The four corners around (h, w) in an H x W plane: flat index (-1 outside),
 * weight and the weight's derivatives along h and w. */
typedef struct {
    int64_t at[4];
    double wt[4], gh[4], gw[4];
} pd__bil;

static void bil_corners(int64_t H, int64_t W, double h, double w, pd__bil *b) {
    double h0 = floor(h), w0 = floor(w), ly = h - h0, lx = w - w0;
    for (int c = 0; c < 4; c++) {
        int a = c >> 1, e = c & 1;
        double y = h0 + a, xx = w0 + e;
        b->at[c] = y >= 0 && y < (double)H && xx >= 0 && xx < (double)W ? (int64_t)y * W + (int64_t)xx : -1;
        double wy = a ? ly : 1 - ly, wx = e ? lx : 1 - lx;
        b->wt[c] = wy * wx;
        b->gh[c] = (a ? 1 : -1) * wx;
        b->gw[c] = wy * (e ? 1 : -1);
    }
}

/* The sampling position of tap (kh, kw) for output (i, j) of image nb, offset group og. */
static void deform_pos(const pd__deform *p, const pd_tensor *off, int64_t nb, int64_t og, int64_t kh, int64_t kw,
                       int64_t i, int64_t j, double *h, double *w, int64_t *oidx) {
    int64_t ch = ((og * p->KH + kh) * p->KW + kw) * 2, plane = p->OH * p->OW;
    *oidx = ((nb * p->OG * p->KH * p->KW * 2 + ch) * p->OH + i) * p->OW + j;
    *h = (double)(i * p->sh - p->pt + kh * p->dh) + dget(off, *oidx);
    *w = (double)(j * p->sw - p->pl + kw * p->dw) + dget(off, *oidx + plane);
}

static pd_status deform_prep(const pd__node *n, pd_tensor *const *in, pd__deform *p) {
    const pd_tensor *B = opt_in(n, in, 3), *M = opt_in(n, in, 4);
    return pd__deform_plan(n, in[0]->ndim, in[0]->shape, in[1]->ndim, in[1]->shape, in[2]->ndim, in[2]->shape,
                           B ? B->ndim : 0, B ? B->shape : NULL, M ? M->ndim : 0, M ? M->shape : NULL, p);
}

/* col (C, K, OH, OW) of image nb: the masked samples. */
static void deform_col(const pd__deform *p, pd_tensor *const *in, const pd_tensor *M, int64_t nb, double *col) {
    const pd_tensor *X = in[0], *off = in[2];
    int64_t K = p->KH * p->KW, P = p->OH * p->OW, cpo = p->C / p->OG;
    for (int64_t c = 0; c < p->C; c++)
        for (int64_t k = 0; k < K; k++)
            for (int64_t i = 0; i < p->OH; i++)
                for (int64_t j = 0; j < p->OW; j++) {
                    int64_t og = c / cpo, oidx;
                    double h, w, v = 0;
                    deform_pos(p, off, nb, og, k / p->KW, k % p->KW, i, j, &h, &w, &oidx);
                    pd__bil b;
                    bil_corners(p->H, p->W, h, w, &b);
                    for (int q = 0; q < 4; q++)
                        if (b.at[q] >= 0) v += b.wt[q] * dget(X, (nb * p->C + c) * p->H * p->W + b.at[q]);
                    double m = M ? dget(M, ((nb * p->OG + og) * K + k) * P + i * p->OW + j) : 1;
                    col[(c * K + k) * P + i * p->OW + j] = m * v;
                }
}

pd_status pd__cpu_DeformConv(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    pd__deform p;
    PD_TRY(deform_prep(n, in, &p));
    const pd_tensor *Wt = in[1], *B = opt_in(n, in, 3), *M = opt_in(n, in, 4);
    int64_t K = p.KH * p.KW, P = p.OH * p.OW, cpg = p.C / p.G, opg = p.OC / p.G;
    double *col = pd__scratch_n(x, p.C * K * P + 1, 1, sizeof(double));
    if (!col) return PD_ERR_NOMEM;
    for (int64_t nb = 0; nb < p.N; nb++) {
        deform_col(&p, in, M, nb, col);
        for (int64_t oc = 0; oc < p.OC; oc++)
            for (int64_t q = 0; q < P; q++) {
                double acc = B ? dget(B, oc) : 0;
                for (int64_t cl = 0; cl < cpg; cl++)
                    for (int64_t k = 0; k < K; k++)
                        acc += dget(Wt, (oc * cpg + cl) * K + k) * col[((oc / opg * cpg + cl) * K + k) * P + q];
                pd__set_f(out[0]->dtype, out[0]->data, (nb * p.OC + oc) * P + q, acc);
            }
    }
    return PD_OK;
}

/* dB: dY summed; dW: dY against col; through col's element (c, k, i, j), with
 * g = sum over the group's outputs of dY W: the mask's gradient is g times
 * the sample, X's g m times each corner's weight, the offset's g m times the
 * sample's slope along h and w. */
pd_status pd__cpu_DeformConv_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                                 pd_tensor *const *dout, pd_tensor *const *din) {
    (void)out;
    const pd_tensor *X = in[0], *Wt = in[1], *off = in[2], *M = opt_in(n, in, 4), *dY = gout(n, dout, 0);
    pd_tensor *dX = gin(n, din, 0), *dW = gin(n, din, 1), *dO = gin(n, din, 2), *dB = gin(n, din, 3),
              *dM = gin(n, din, 4);
    if (!dY) return PD_OK;
    pd__deform p;
    PD_TRY(deform_prep(n, in, &p));
    int64_t K = p.KH * p.KW, P = p.OH * p.OW, cpg = p.C / p.G, opg = p.OC / p.G, cpo = p.C / p.OG;
    double *col = pd__scratch_n(x, p.C * K * P + 1, 1, sizeof(double));
    if (!col) return PD_ERR_NOMEM;
    for (int64_t nb = 0; nb < p.N; nb++) {
        const int64_t ybase = nb * p.OC * P;
        if (dB)
            for (int64_t oc = 0; oc < p.OC; oc++)
                for (int64_t q = 0; q < P; q++) dadd(dB, oc, dget(dY, ybase + oc * P + q));
        if (dW) {
            deform_col(&p, in, M, nb, col);
            for (int64_t oc = 0; oc < p.OC; oc++)
                for (int64_t cl = 0; cl < cpg; cl++)
                    for (int64_t k = 0; k < K; k++) {
                        double acc = 0;
                        for (int64_t q = 0; q < P; q++)
                            acc += dget(dY, ybase + oc * P + q) * col[((oc / opg * cpg + cl) * K + k) * P + q];
                        dadd(dW, (oc * cpg + cl) * K + k, acc);
                    }
        }
        if (!dX && !dO && !dM) continue;
        for (int64_t c = 0; c < p.C; c++)
            for (int64_t k = 0; k < K; k++)
                for (int64_t i = 0; i < p.OH; i++)
                    for (int64_t j = 0; j < p.OW; j++) {
                        int64_t q = i * p.OW + j, og = c / cpo, g0 = c / cpg * opg, oidx;
                        double g = 0;
                        for (int64_t oc = g0; oc < g0 + opg; oc++)
                            g += dget(dY, ybase + oc * P + q) * dget(Wt, (oc * cpg + c % cpg) * K + k);
                        if (g == 0) continue;
                        double h, w, v = 0, vh = 0, vw = 0;
                        deform_pos(&p, off, nb, og, k / p.KW, k % p.KW, i, j, &h, &w, &oidx);
                        pd__bil b;
                        bil_corners(p.H, p.W, h, w, &b);
                        int64_t xb = (nb * p.C + c) * p.H * p.W, midx = ((nb * p.OG + og) * K + k) * P + q;
                        double m = M ? dget(M, midx) : 1;
                        for (int t = 0; t < 4; t++) {
                            if (b.at[t] < 0) continue;
                            double xv = dget(X, xb + b.at[t]);
                            v += b.wt[t] * xv, vh += b.gh[t] * xv, vw += b.gw[t] * xv;
                            if (dX) dadd(dX, xb + b.at[t], g * m * b.wt[t]);
                        }
                        if (dM) dadd(dM, midx, g * v);
                        if (dO) {
                            dadd(dO, oidx, g * m * vh);
                            dadd(dO, oidx + P, g * m * vw);
                        }
                    }
    }
    return PD_OK;
}

/* ---- Det ---- */

/* The determinant of the m x m matrix a (row-major, overwritten): LU with
 * partial pivoting, the product of the pivots, a sign per row swap. */
static double det_lu(int64_t m, double *a) {
    double det = 1;
    for (int64_t k = 0; k < m; k++) {
        int64_t p = k;
        for (int64_t i = k + 1; i < m; i++)
            if (fabs(a[i * m + k]) > fabs(a[p * m + k])) p = i;
        if (a[p * m + k] == 0) return 0;
        if (p != k) {
            for (int64_t j = 0; j < m; j++) {
                double t = a[k * m + j];
                a[k * m + j] = a[p * m + j], a[p * m + j] = t;
            }
            det = -det;
        }
        det *= a[k * m + k];
        for (int64_t i = k + 1; i < m; i++) {
            double f = a[i * m + k] / a[k * m + k];
            for (int64_t j = k + 1; j < m; j++) a[i * m + j] -= f * a[k * m + j];
        }
    }
    return det;
}

static pd_status det_view(const pd_tensor *X, int64_t *B, int64_t *m) {
    if (X->ndim < 2 || X->shape[X->ndim - 1] != X->shape[X->ndim - 2])
        return pd__err(PD_ERR_SHAPE, "X is not a batch of square matrices");
    *m = X->shape[X->ndim - 1];
    *B = prod64(X->ndim - 2, X->shape);
    return PD_OK;
}

pd_status pd__cpu_Det(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)n;
    const pd_tensor *X = in[0];
    int64_t B = 0, m = 0;
    PD_TRY(det_view(X, &B, &m));
    double *a = pd__scratch_n(x, m * m + 1, 1, sizeof(double));
    if (!a) return PD_ERR_NOMEM;
    for (int64_t b = 0; b < B; b++) {
        for (int64_t i = 0; i < m * m; i++) a[i] = pd__get_f(X->dtype, X->data, b * m * m + i);
        pd__set_f(out[0]->dtype, out[0]->data, b, det_lu(m, a));
    }
    return PD_OK;
}

/* d det(A) / dA = adj(A)^T, the cofactors: C[i][j] = (-1)^(i+j) det(A without
 * row i and column j). Cofactors rather than det(A) A^-T, which a singular A
 * does not have (its gradient is still defined); O(m^5), for the small
 * matrices Det is used on. */
pd_status pd__cpu_Det_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                          pd_tensor *const *dout, pd_tensor *const *din) {
    (void)out;
    const pd_tensor *X = in[0], *dY = gout(n, dout, 0);
    pd_tensor *dX = gin(n, din, 0);
    if (!dY || !dX) return PD_OK;
    int64_t B = 0, m = 0;
    PD_TRY(det_view(X, &B, &m));
    if (m == 0) return PD_OK;
    double *a = pd__scratch_n(x, (m - 1) * (m - 1) + 1, 1, sizeof(double));
    if (!a) return PD_ERR_NOMEM;
    for (int64_t b = 0; b < B; b++) {
        double g = pd__get_f(dY->dtype, dY->data, b);
        const int64_t base = b * m * m;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < m; j++) {
                double c = 1;
                if (m > 1) {
                    int64_t k = 0;
                    for (int64_t r = 0; r < m; r++)
                        for (int64_t q = 0; q < m; q++)
                            if (r != i && q != j) a[k++] = pd__get_f(X->dtype, X->data, base + r * m + q);
                    c = ((i + j) % 2 ? -1 : 1) * det_lu(m - 1, a);
                }
                int64_t o = base + i * m + j;
                pd__set_f(dX->dtype, dX->data, o, pd__get_f(dX->dtype, dX->data, o) + g * c);
            }
    }
    return PD_OK;
}

/* ---- softmax family ---------------------------------------------------------------------------------- */
static pd_status softmax_run(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out, int lg) {
    const pd_tensor *X = in[0];
    int64_t outer, len, inner;
    PD_TRY(pd__softmax_split(n, X->ndim, X->shape, &outer, &len, &inner));
    PD_DISPATCH(X->dtype, softmax, (x, outer, len, inner, X->data, out[0]->data, lg))
}

pd_status pd__cpu_Softmax(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    PD_HALF_FWD(pd__cpu_Softmax);
    return softmax_run(x, n, in, out, 0);
}

pd_status pd__cpu_LogSoftmax(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    PD_HALF_FWD(pd__cpu_LogSoftmax);
    return softmax_run(x, n, in, out, 1);
}

static pd_status softmax_grad(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                              pd_tensor *const *dout, pd_tensor *const *din, int lg) {
    const pd_tensor *X = in[0], *dY = gout(n, dout, 0);
    pd_tensor *dX = gin(n, din, 0);
    if (!dY || !dX) return PD_OK;
    int64_t outer, len, inner;
    PD_TRY(pd__softmax_split(n, X->ndim, X->shape, &outer, &len, &inner));
    PD_DISPATCH(X->dtype, softmax_bwd, (x, outer, len, inner, out[0]->data, dY->data, dX->data, lg))
}

pd_status pd__cpu_Softmax_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                              pd_tensor *const *dout, pd_tensor *const *din) {
    PD_HALF_BWD(pd__cpu_Softmax_bwd);
    return softmax_grad(x, n, in, out, dout, din, 0);
}

pd_status pd__cpu_LogSoftmax_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                                 pd_tensor *const *dout, pd_tensor *const *din) {
    PD_HALF_BWD(pd__cpu_LogSoftmax_bwd);
    return softmax_grad(x, n, in, out, dout, din, 1);
}

/* ---- losses ----------------------------------------------------------------------------------------------- */
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

static pd_status log_softmax(pd__exec *x, pd_dtype dt, int64_t N, int64_t C, int64_t D, const void *X, void *LP) {
    PD_DISPATCH(dt, softmax, (x, N, C, D, X, LP, 1))
}

/* Gradients w.r.t. the scores only (labels and weights are not
 * differentiable); the log_prob output's gradient, when given, adds in. */
pd_status pd__cpu_SoftmaxCrossEntropyLoss_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in,
                                              pd_tensor *const *out, pd_tensor *const *dout, pd_tensor *const *din) {
    const pd_tensor *X = in[0], *W = opt_in(n, in, 2), *dY = gout(n, dout, 0), *dLP = gout(n, dout, 1);
    pd_tensor *dX = gin(n, din, 0);
    if ((!dY && !dLP) || !dX) return PD_OK;
    pd__loss l;
    PD_TRY(loss_opts(n, X, &l));
    const pd_tensor *lpo = opt_out(n, out, 1);
    int64_t tot = pd_tensor_numel(X);
    size_t es = pd_dtype_size(X->dtype);
    /* scratch: G, then the recomputed log-probabilities when the node does not output them */
    char *buf = pd__scratch_n(x, lpo ? tot : 2 * tot, 1, es);
    if (!buf) return PD_ERR_NOMEM;
    void *G = buf, *LP = lpo ? lpo->data : buf + (size_t)tot * es;
    if (!lpo) PD_TRY(log_softmax(x, X->dtype, l.N, l.C, l.D, X->data, LP));
    const void *wd = W ? W->data : NULL;
    PD_DISPATCH(X->dtype, sce_bwd,
                (x, l.N, l.C, l.D, LP, dptr(dLP), in[1], wd, l.has_ii, l.ii, l.red, dptr(dY), G, dX->data))
}

pd_status pd__cpu_NegativeLogLikelihoodLoss_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in,
                                                pd_tensor *const *out, pd_tensor *const *dout,
                                                pd_tensor *const *din) {
    (void)x;
    (void)out;
    const pd_tensor *X = in[0], *W = opt_in(n, in, 2), *dY = gout(n, dout, 0);
    pd_tensor *dX = gin(n, din, 0);
    if (!dY || !dX) return PD_OK;
    pd__loss l;
    PD_TRY(loss_opts(n, X, &l));
    const void *wd = W ? W->data : NULL;
    PD_DISPATCH(X->dtype, nll_bwd, (l.N, l.C, l.D, in[1], wd, l.has_ii, l.ii, l.red, dY->data, dX->data))
}

/* ---- Dropout ---------------------------------------------------------------------------------------------- */
/* Identity at inference. ONNX's training mode (opset 12+, training_mode input
 * true): keep[i] = u[i] >= ratio with u from MT19937 seeded by the seed
 * attribute (0 when absent: runs are reproducible). A training session
 * (x->training): u from the counter-based generator keyed by x->seed and the
 * node's name, which the backward draws again. y = x * keep / (1 - ratio). */
pd_status pd__cpu_Dropout(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    const pd_tensor *X = in[0];
    pd_tensor *Y = out[0], *M = opt_out(n, out, 1);
    int64_t numel = pd_tensor_numel(X);
    double ratio;
    pd__drop_mode mode = dropout_mode(x, n, in, &ratio);
    if (mode == PD_DROP_NONE) {
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
    dropout_fill(x, n, mode, ratio, numel, keep);
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

/* The mask drawn again as the forward drew it (dropout_mode, dropout_fill):
 * dX += dY * keep / (1 - ratio); identity when the forward was. */
pd_status pd__cpu_Dropout_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                              pd_tensor *const *dout, pd_tensor *const *din) {
    (void)out;
    const pd_tensor *dY = gout(n, dout, 0);
    pd_tensor *dX = gin(n, din, 0);
    if (!dY || !dX) return PD_OK;
    int64_t numel = pd_tensor_numel(in[0]);
    double ratio, scale = 1;
    pd__drop_mode mode = dropout_mode(x, n, in, &ratio);
    uint8_t *keep = NULL;
    if (mode != PD_DROP_NONE) {
        if (!(ratio > 0 && ratio < 1)) return pd__err(PD_ERR_INVALID, "ratio %g is not in [0, 1)", ratio);
        if (!(keep = pd__scratch_n(x, numel, 1, 1))) return PD_ERR_NOMEM;
        dropout_fill(x, n, mode, ratio, numel, keep);
        scale = 1.0 / (1.0 - ratio);
    }
    switch (dX->dtype) {
    case PD_FLOAT: return dropout_bwd_f32(x, numel, dY->data, keep, scale, dX->data);
    case PD_DOUBLE: return dropout_bwd_f64(x, numel, dY->data, keep, scale, dX->data);
    default:
        for (int64_t i = 0; i < numel; i++) {
            double g = !keep || keep[i] ? pd__get_f(dY->dtype, dY->data, i) * scale : 0.0;
            pd__set_f(dX->dtype, dX->data, i, pd__get_f(dX->dtype, dX->data, i) + g);
        }
        return PD_OK;
    }
}

/* ---- Bernoulli, RandomUniformLike ---- */
/* u[i] in [0, 1): dropout_u, SplitMix64 over a counter, keyed by the seed
 * attribute when given (the same output every run: reproducible), else by
 * the session's seed and the node's name (as Dropout's training masks).
 * ONNX leaves the generator to the implementation: the values are not
 * numpy's, only their distribution is. */
static uint64_t random_key(const pd__exec *x, const pd__node *n) {
    const pd__attr *a = pd__attr_get(n, "seed");
    if (!a) return dropout_key(x->seed, n->name);
    double s = pd__attr_f(n, "seed", 0);
    uint64_t b;
    memcpy(&b, &s, sizeof b);
    return mix64(b ^ 0x5eed5eed5eed5eedull);
}

/* y[i] = 1 with probability p[i], else 0 (in y's dtype). */
pd_status pd__cpu_Bernoulli(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    const pd_tensor *P = in[0];
    pd_tensor *Y = out[0];
    uint64_t key = random_key(x, n);
    for (int64_t i = 0, m = pd_tensor_numel(P); i < m; i++)
        pd__set_f(Y->dtype, Y->data, i, dropout_u(key, i) < pd__get_f(P->dtype, P->data, i) ? 1.0 : 0.0);
    return PD_OK;
}

/* y[i] = low + (high - low) u[i], kept below high where rounding to y's
 * dtype would reach it. */
pd_status pd__cpu_RandomUniformLike(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    pd_tensor *Y = out[0];
    double lo = pd__attr_f(n, "low", 0), hi = pd__attr_f(n, "high", 1);
    if (!(lo < hi)) return pd__err(PD_ERR_INVALID, "low %g is not below high %g", lo, hi);
    uint64_t key = random_key(x, n);
    for (int64_t i = 0, m = pd_tensor_numel(in[0]); i < m; i++) {
        pd__set_f(Y->dtype, Y->data, i, lo + (hi - lo) * dropout_u(key, i));
        if (pd__get_f(Y->dtype, Y->data, i) >= hi) pd__set_f(Y->dtype, Y->data, i, lo);
    }
    return PD_OK;
}

/* ---- RotaryEmbedding ---- */

static pd_status rope_view(const pd__node *n, pd_tensor *const *in, pd__rope *r) {
    const pd_tensor *X = in[0], *C = in[1], *P = opt_in(n, in, 3);
    return pd__rope_plan(n, X->ndim, X->shape, C->ndim, C->shape, P ? P->ndim : 0, P ? P->shape : NULL, r);
}

pd_status pd__cpu_RotaryEmbedding(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)x;
    pd__rope r;
    PD_TRY(rope_view(n, in, &r));
    const pd_tensor *P = opt_in(n, in, 3);
    PD_DISPATCH(in[0]->dtype, rope, (&r, in[0]->data, in[1]->data, in[2]->data, dptr(P), out[0]->data, false))
}

/* Only X is differentiable: the caches are tables (grad mask 0x1). */
pd_status pd__cpu_RotaryEmbedding_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                                      pd_tensor *const *dout, pd_tensor *const *din) {
    (void)x;
    (void)out;
    const pd_tensor *dY = gout(n, dout, 0), *P = opt_in(n, in, 3);
    pd_tensor *dX = gin(n, din, 0);
    if (!dY || !dX) return PD_OK;
    pd__rope r;
    PD_TRY(rope_view(n, in, &r));
    PD_DISPATCH(in[0]->dtype, rope, (&r, dY->data, in[1]->data, in[2]->data, dptr(P), dX->data, true))
}

/* ---- Attention ---- */

static pd_status attn_view(const pd__node *n, pd_tensor *const *in, pd__attn *a) {
    const pd_tensor *Q = in[0], *K = in[1], *V = in[2], *M = opt_in(n, in, 3), *PK = opt_in(n, in, 4);
    const pd_tensor *KL = opt_in(n, in, 6);
    PD_TRY(pd__attn_plan(n, Q->ndim, Q->shape, K->ndim, K->shape, V->ndim, V->shape, M ? M->ndim : 0,
                         M ? M->shape : NULL, PK ? PK->ndim : 0, PK ? PK->shape : NULL, a));
    a->kvlen = KL ? KL->data : NULL;
    return PD_OK;
}

pd_status pd__cpu_Attention(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    PD_HALF_FWD(pd__cpu_Attention);
    pd__attn a;
    PD_TRY(attn_view(n, in, &a));
    const pd_tensor *M = opt_in(n, in, 3), *pk = opt_in(n, in, 4), *pv = opt_in(n, in, 5);
    pd_tensor *PKo = opt_out(n, out, 1), *PVo = opt_out(n, out, 2), *QK = opt_out(n, out, 3);
    int64_t nk = a.B * a.Hk * a.Tk, st = a.Sq * a.Tk;
    /* scratch: the present keys and values where not wanted as outputs, the scores and probabilities */
    void *s = pd__scratch_n(x, (PKo ? 0 : nk * a.Dh) + (PVo ? 0 : nk * a.Dv) + 2 * st, 1, pd_dtype_size(in[0]->dtype));
    if (!s) return PD_ERR_NOMEM;
    size_t es = pd_dtype_size(in[0]->dtype);
    char *p = s;
    void *PK = PKo ? PKo->data : p;
    p += PKo ? 0 : (size_t)(nk * a.Dh) * es;
    void *PV = PVo ? PVo->data : p;
    p += PVo ? 0 : (size_t)(nk * a.Dv) * es;
    void *S = p, *Pm = p + (size_t)st * es;
    PD_DISPATCH(in[0]->dtype, attention,
                (&a, in[0]->data, in[1]->data, in[2]->data, dptr(M), M ? M->dtype : PD_BOOL, dptr(pk), dptr(pv), PK,
                 PV, out[0]->data, dptr(QK), S, Pm))
}

/* Differentiable in Q, K and V (grad mask 0x7): the mask and the past
 * inputs get no gradient; the present outputs' and the scores' gradients
 * flow into K, V and the scores. */
pd_status pd__cpu_Attention_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                                pd_tensor *const *dout, pd_tensor *const *din) {
    PD_HALF_BWD(pd__cpu_Attention_bwd);
    (void)out;
    pd_tensor *dQ = gin(n, din, 0), *dK = gin(n, din, 1), *dV = gin(n, din, 2);
    const pd_tensor *dY = gout(n, dout, 0), *dPK = gout(n, dout, 1), *dPV = gout(n, dout, 2), *dQK = gout(n, dout, 3);
    if (!dQ && !dK && !dV) return PD_OK;
    if (!dY && !dPK && !dPV && !dQK) return PD_OK;
    pd__attn a;
    PD_TRY(attn_view(n, in, &a));
    const pd_tensor *M = opt_in(n, in, 3), *pk = opt_in(n, in, 4), *pv = opt_in(n, in, 5);
    int64_t nk = a.B * a.Hk * a.Tk, st = a.Sq * a.Tk;
    size_t es = pd_dtype_size(in[0]->dtype);
    char *s = pd__scratch_n(x, 2 * nk * (a.Dh + a.Dv) + 3 * st, 1, es);
    if (!s) return PD_ERR_NOMEM;
    char *PK = s, *PV = PK + (size_t)(nk * a.Dh) * es, *gPK = PV + (size_t)(nk * a.Dv) * es;
    char *gPV = gPK + (size_t)(nk * a.Dh) * es, *S = gPV + (size_t)(nk * a.Dv) * es;
    char *Pm = S + (size_t)st * es, *gS = Pm + (size_t)st * es;
    PD_DISPATCH(in[0]->dtype, attention_bwd,
                (&a, in[0]->data, in[1]->data, in[2]->data, dptr(M), M ? M->dtype : PD_BOOL, dptr(pk), dptr(pv),
                 dptr(dY), dptr(dPK), dptr(dPV), dptr(dQK), dptr(dQ), dptr(dK), dptr(dV), (void *)PK, (void *)PV,
                 (void *)gPK, (void *)gPV, (void *)S, (void *)Pm, (void *)gS))
}

/* ---- FlexAttention: Attention over Q, K and V alone (core/shape_nn.c) ---- */

pd_status pd__cpu_FlexAttention(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    return pd__cpu_Attention(x, n, in, out);
}

pd_status pd__cpu_FlexAttention_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                                    pd_tensor *const *dout, pd_tensor *const *din) {
    return pd__cpu_Attention_bwd(x, n, in, out, dout, din);
}

/* ---- LinearAttention ----------------------------------------------------------------------------- */

/* In float64 through pd__get_f/pd__set_f (any float dtype, rounded once on
 * the way out), one (batch, kv head) at a time. The forward keeps every
 * state S_0..S_T: the backward walks them back instead of undoing the
 * decay, which could divide by exp(decay) ~ 0. */
typedef struct {
    pd__linattn a;
    const pd_tensor *q, *k, *v, *ps, *dc, *bt;
    double *st, *sd, *ds, *e, *kk, *qq, *vv, *u, *r, *du, *dy; /* scratch */
} la_ctx;

static void la_add(const pd_tensor *t, int64_t i, double v) {
    pd__set_f(t->dtype, t->data, i, pd__get_f(t->dtype, t->data, i) + v);
}

static void la_load(const pd_tensor *t, int64_t off, int64_t len, double *dst) {
    for (int64_t i = 0; i < len; i++) dst[i] = pd__get_f(t->dtype, t->data, off + i);
}

static pd_status la_make(pd__exec *x, const pd__node *n, pd_tensor *const *in, la_ctx *c) {
    c->q = in[0], c->k = in[1], c->v = in[2];
    c->ps = opt_in(n, in, 3), c->dc = opt_in(n, in, 4), c->bt = opt_in(n, in, 5);
    const pd_tensor *dc = c->dc, *bt = c->bt;
    PD_TRY(pd__linattn_plan(n, 3, c->q->shape, 3, c->k->shape, 3, c->v->shape, dc ? dc->ndim : 0,
                            dc ? dc->shape : NULL, bt ? bt->ndim : 0, bt ? bt->shape : NULL, &c->a));
    int64_t DD = c->a.Dk * c->a.Dv, Dk = c->a.Dk, Dv = c->a.Dv;
    double *p = pd__scratch_n(x, (c->a.T + 3) * DD + 3 * Dk + 5 * Dv, 1, sizeof(double));
    if (!p) return PD_ERR_NOMEM;
    c->st = p, p += (c->a.T + 1) * DD;
    c->sd = p, p += DD;
    c->ds = p, p += DD;
    c->e = p, p += Dk;
    c->kk = p, p += Dk;
    c->qq = p, p += Dk;
    c->vv = p, p += Dv;
    c->u = p, p += Dv;
    c->r = p, p += Dv;
    c->du = p, p += Dv;
    c->dy = p;
    return PD_OK;
}

/* Token t of kv head h in batch b: k, v, the decay factors e = exp(decay)
 * (1 without gating), beta; Sd = e * S_t row-wise, r = Sd^T k and the value
 * written, u = beta (v - r) (delta rules) or v. Returns beta. */
static double la_token(la_ctx *c, int64_t b, int64_t t, int64_t h) {
    const pd__linattn *a = &c->a;
    int64_t Dk = a->Dk, Dv = a->Dv, bt = b * a->T + t;
    la_load(c->k, (bt * a->Hk + h) * Dk, Dk, c->kk);
    la_load(c->v, (bt * a->Hk + h) * Dv, Dv, c->vv);
    for (int64_t d = 0; d < Dk; d++)
        c->e[d] = a->gated ? exp(pd__get_f(c->dc->dtype, c->dc->data, (bt * a->Hk + h) * a->gw + (a->gw > 1 ? d : 0)))
                           : 1;
    double beta = a->delta ? pd__get_f(c->bt->dtype, c->bt->data, bt * a->bw + (a->bw > 1 ? h : 0)) : 1;
    const double *S = c->st + t * Dk * Dv;
    for (int64_t d = 0; d < Dk; d++)
        for (int64_t m = 0; m < Dv; m++) c->sd[d * Dv + m] = c->e[d] * S[d * Dv + m];
    for (int64_t m = 0; m < Dv; m++) {
        double r = 0;
        if (a->delta)
            for (int64_t d = 0; d < Dk; d++) r += c->sd[d * Dv + m] * c->kk[d];
        c->r[m] = r;
        c->u[m] = a->delta ? beta * (c->vv[m] - r) : c->vv[m];
    }
    return beta;
}

/* Runs the recurrence of (b, h), filling st; writes its output heads into Y
 * when given. */
static void la_forward(la_ctx *c, int64_t b, int64_t h, pd_tensor *Y) {
    const pd__linattn *a = &c->a;
    int64_t Dk = a->Dk, Dv = a->Dv, DD = Dk * Dv, G = a->Hq / a->Hk;
    if (c->ps) la_load(c->ps, (b * a->Hk + h) * DD, DD, c->st);
    else memset(c->st, 0, sizeof(double) * (size_t)DD);
    for (int64_t t = 0; t < a->T; t++) {
        la_token(c, b, t, h);
        double *Sn = c->st + (t + 1) * DD;
        for (int64_t d = 0; d < Dk; d++)
            for (int64_t m = 0; m < Dv; m++) Sn[d * Dv + m] = c->sd[d * Dv + m] + c->kk[d] * c->u[m];
        for (int64_t hq = h * G; Y && hq < (h + 1) * G; hq++) {
            la_load(c->q, ((b * a->T + t) * a->Hq + hq) * Dk, Dk, c->qq);
            for (int64_t m = 0; m < Dv; m++) {
                double o = 0;
                for (int64_t d = 0; d < Dk; d++) o += c->qq[d] * Sn[d * Dv + m];
                pd__set_f(Y->dtype, Y->data, ((b * a->T + t) * a->Hq + hq) * Dv + m, a->scale * o);
            }
        }
    }
}

pd_status pd__cpu_LinearAttention(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    la_ctx c;
    PD_TRY(la_make(x, n, in, &c));
    pd_tensor *PS = opt_out(n, out, 1);
    int64_t DD = c.a.Dk * c.a.Dv;
    for (int64_t b = 0; b < c.a.B; b++)
        for (int64_t h = 0; h < c.a.Hk; h++) {
            la_forward(&c, b, h, out[0]);
            for (int64_t i = 0; PS && i < DD; i++)
                pd__set_f(PS->dtype, PS->data, (b * c.a.Hk + h) * DD + i, c.st[c.a.T * DD + i]);
        }
    return PD_OK;
}

/* Every input is differentiable (grad mask 0x3f): the gradient dS of the
 * state runs back from present_state's through each token's
 *   Sd = e * S (rows), r = Sd^T k, u = beta (v - r) or v, S' = Sd + k u^T,
 *   o = scale * S'^T q
 * and ends in past_state's. */
pd_status pd__cpu_LinearAttention_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                                      pd_tensor *const *dout, pd_tensor *const *din) {
    (void)out;
    const pd_tensor *dY = gout(n, dout, 0), *dPS = gout(n, dout, 1);
    pd_tensor *dQ = gin(n, din, 0), *dK = gin(n, din, 1), *dV = gin(n, din, 2), *dP = gin(n, din, 3);
    pd_tensor *dD = gin(n, din, 4), *dB = gin(n, din, 5);
    if ((!dY && !dPS) || (!dQ && !dK && !dV && !dP && !dD && !dB)) return PD_OK;
    la_ctx c;
    PD_TRY(la_make(x, n, in, &c));
    const pd__linattn *a = &c.a;
    int64_t Dk = a->Dk, Dv = a->Dv, DD = Dk * Dv, G = a->Hq / a->Hk;
    double *dS = c.ds;
    for (int64_t b = 0; b < a->B; b++)
        for (int64_t h = 0; h < a->Hk; h++) {
            la_forward(&c, b, h, NULL);
            if (dPS) la_load(dPS, (b * a->Hk + h) * DD, DD, dS);
            else memset(dS, 0, sizeof(double) * (size_t)DD);
            for (int64_t t = a->T - 1; t >= 0; t--) {
                int64_t bt = b * a->T + t;
                double beta = la_token(&c, b, t, h);
                const double *Sp = c.st + t * DD, *Sn = Sp + DD;
                for (int64_t hq = h * G; dY && hq < (h + 1) * G; hq++) { /* o = scale * S'^T q */
                    int64_t qo = (bt * a->Hq + hq) * Dk;
                    la_load(dY, (bt * a->Hq + hq) * Dv, Dv, c.dy);
                    la_load(c.q, qo, Dk, c.qq);
                    for (int64_t d = 0; d < Dk; d++) {
                        double g = 0;
                        for (int64_t m = 0; m < Dv; m++) {
                            g += Sn[d * Dv + m] * c.dy[m];
                            dS[d * Dv + m] += a->scale * c.qq[d] * c.dy[m];
                        }
                        if (dQ) la_add(dQ, qo + d, a->scale * g);
                    }
                }
                for (int64_t d = 0; d < Dk; d++) { /* S' = Sd + k u^T */
                    double g = 0;
                    for (int64_t m = 0; m < Dv; m++) g += dS[d * Dv + m] * c.u[m];
                    c.qq[d] = g; /* dk so far */
                }
                for (int64_t m = 0; m < Dv; m++) {
                    double g = 0;
                    for (int64_t d = 0; d < Dk; d++) g += dS[d * Dv + m] * c.kk[d];
                    c.du[m] = g;
                }
                double dbeta = 0;
                for (int64_t m = 0; m < Dv; m++) {
                    int64_t vo = (bt * a->Hk + h) * Dv + m;
                    if (!a->delta) {
                        if (dV) la_add(dV, vo, c.du[m]);
                        continue;
                    }
                    /* u = beta (v - r), r = Sd^T k */
                    dbeta += c.du[m] * (c.vv[m] - c.r[m]);
                    if (dV) la_add(dV, vo, beta * c.du[m]);
                    double dr = -beta * c.du[m];
                    for (int64_t d = 0; d < Dk; d++) {
                        dS[d * Dv + m] += c.kk[d] * dr;
                        c.qq[d] += c.sd[d * Dv + m] * dr;
                    }
                }
                if (dB && a->delta) la_add(dB, bt * a->bw + (a->bw > 1 ? h : 0), dbeta);
                for (int64_t d = 0; dK && d < Dk; d++) la_add(dK, (bt * a->Hk + h) * Dk + d, c.qq[d]);
                for (int64_t d = 0; d < Dk; d++) { /* Sd = e * S: de/ddecay = e */
                    double g = 0;
                    for (int64_t m = 0; m < Dv; m++) {
                        g += dS[d * Dv + m] * Sp[d * Dv + m];
                        dS[d * Dv + m] *= c.e[d];
                    }
                    if (dD && a->gated) la_add(dD, (bt * a->Hk + h) * a->gw + (a->gw > 1 ? d : 0), g * c.e[d]);
                }
            }
            for (int64_t i = 0; dP && i < DD; i++) la_add(dP, (b * a->Hk + h) * DD + i, dS[i]);
        }
    return PD_OK;
}

/* ---- CausalConvWithState ------------------------------------------------------------------------- */

/* In float64 through pd__get_f/pd__set_f, any float dtype. Position p of the
 * padded row (K-1 + L long) is past_state's (zeros without it) for p < K-1,
 * else the input's. As ONNX's reference, the convolution is rounded to the
 * dtype before the SiLU. */
typedef struct {
    int64_t B, C, L, K;
    int silu;
    const pd_tensor *x, *w, *b, *ps;
} ccws_geo;

static ccws_geo ccws_make(const pd__node *n, pd_tensor *const *in) {
    ccws_geo q = {in[0]->shape[0], in[0]->shape[1], in[0]->shape[2], in[1]->shape[2], pd__ccws_silu(n),
                  in[0], in[1], opt_in(n, in, 2), opt_in(n, in, 3)};
    return q;
}

/* Padded position p of row (b, c); *t: the tensor it lives in, *i its index (t NULL: a zero). */
static void ccws_at(const ccws_geo *q, int64_t b, int64_t c, int64_t p, const pd_tensor **t, int64_t *i) {
    int64_t row = b * q->C + c;
    if (p >= q->K - 1) *t = q->x, *i = row * q->L + p - (q->K - 1);
    else *t = q->ps, *i = row * (q->K - 1) + p;
}

/* The convolution at output position j of row (b, c), rounded to the dtype. */
static double ccws_conv(const ccws_geo *q, int64_t b, int64_t c, int64_t j) {
    double s = q->b ? pd__get_f(q->b->dtype, q->b->data, c) : 0;
    for (int64_t k = 0; k < q->K; k++) {
        const pd_tensor *t;
        int64_t i;
        ccws_at(q, b, c, j + k, &t, &i);
        if (t) s += pd__get_f(q->w->dtype, q->w->data, c * q->K + k) * pd__get_f(t->dtype, t->data, i);
    }
    uint64_t buf = 0; /* one element of any float dtype */
    pd__set_f(q->x->dtype, &buf, 0, s);
    return pd__get_f(q->x->dtype, &buf, 0);
}

pd_status pd__cpu_CausalConvWithState(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)x;
    ccws_geo q = ccws_make(n, in);
    pd_tensor *Y = out[0], *PS = opt_out(n, out, 1);
    for (int64_t b = 0; b < q.B; b++)
        for (int64_t c = 0; c < q.C; c++) {
            int64_t row = b * q.C + c;
            for (int64_t j = 0; Y && j < q.L; j++) { /* Y may be left out: only the state wanted */
                double v = ccws_conv(&q, b, c, j);
                pd__set_f(Y->dtype, Y->data, row * q.L + j, q.silu ? v / (1 + exp(-v)) : v);
            }
            for (int64_t p = 0; PS && p < q.K - 1; p++) { /* the last K-1 padded positions */
                const pd_tensor *t;
                int64_t i;
                ccws_at(&q, b, c, q.L + p, &t, &i);
                pd__set_f(PS->dtype, PS->data, row * (q.K - 1) + p, t ? pd__get_f(t->dtype, t->data, i) : 0);
            }
        }
    return PD_OK;
}

/* Differentiable in input, weight, bias and past_state (grad mask 0xf); the
 * gradient of present_state flows into the padded positions it copied. */
pd_status pd__cpu_CausalConvWithState_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                                          pd_tensor *const *dout, pd_tensor *const *din) {
    (void)x, (void)out;
    const pd_tensor *dY = gout(n, dout, 0), *dPS = gout(n, dout, 1);
    pd_tensor *dX = gin(n, din, 0), *dW = gin(n, din, 1), *dB = gin(n, din, 2), *dP = gin(n, din, 3);
    ccws_geo q = ccws_make(n, in);
    for (int64_t b = 0; b < q.B; b++)
        for (int64_t c = 0; c < q.C; c++) {
            int64_t row = b * q.C + c;
            /* the gradient of a padded position lands in the input or past_state it came from */
#define CCWS_PAD_GRAD(p, g)                                                                                        \
    do {                                                                                                           \
        const pd_tensor *t_;                                                                                       \
        int64_t i_;                                                                                                \
        ccws_at(&q, b, c, (p), &t_, &i_);                                                                          \
        pd_tensor *d_ = t_ == q.x ? dX : t_ ? dP : NULL;                                                           \
        if (d_) la_add(d_, i_, (g));                                                                               \
    } while (0)
            for (int64_t p = 0; dPS && p < q.K - 1; p++)
                CCWS_PAD_GRAD(q.L + p, pd__get_f(dPS->dtype, dPS->data, row * (q.K - 1) + p));
            for (int64_t j = 0; dY && j < q.L; j++) {
                double g = pd__get_f(dY->dtype, dY->data, row * q.L + j);
                if (q.silu) { /* d/dv v s(v) = s (1 + v (1 - s)) */
                    double v = ccws_conv(&q, b, c, j), s = 1 / (1 + exp(-v));
                    g *= s * (1 + v * (1 - s));
                }
                if (dB) la_add(dB, c, g);
                for (int64_t k = 0; k < q.K; k++) {
                    const pd_tensor *t;
                    int64_t i;
                    ccws_at(&q, b, c, j + k, &t, &i);
                    if (dW && t) la_add(dW, c * q.K + k, g * pd__get_f(t->dtype, t->data, i));
                    CCWS_PAD_GRAD(j + k, g * pd__get_f(q.w->dtype, q.w->data, c * q.K + k));
                }
            }
#undef CCWS_PAD_GRAD
        }
    return PD_OK;
}

/* ---- GridSample ---------------------------------------------------------------------------------- */

/* Written over float64 through pd__get_f/pd__set_f: one body for both dtypes
 * and both directions; the taps follow ONNX's reference (onnx/reference/ops/
 * op_grid_sample.py), which its node tests were made with. */

typedef struct {
    int r, K, pad;           /* spatial dims, taps per dim, padding mode */
    bool align;
    int64_t N, C, in[3], out[3];
} gs_geo;

static gs_geo gs_make(const pd__node *n, const pd_tensor *X, const pd_tensor *grid) {
    gs_geo q;
    q.r = X->ndim - 2, q.K = pd__grid_mode(n), q.pad = pd__grid_padding(n);
    q.align = pd__attr_i(n, "align_corners", 0) != 0;
    q.N = X->shape[0], q.C = X->shape[1];
    for (int d = 0; d < q.r; d++) q.in[d] = X->shape[2 + d], q.out[d] = grid->shape[1 + d];
    return q;
}

/* Reflects x into [lo, hi]; *sign: its derivative (+1 or -1). */
static double gs_reflect(double x, double lo, double hi, double *sign) {
    double rng = hi - lo;
    *sign = 1;
    if (rng <= 0) return lo;
    if (x < lo) {
        double dx = lo - x;
        int64_t k = (int64_t)(dx / rng);
        double rem = dx - (double)k * rng;
        *sign = k % 2 ? 1 : -1;
        return k % 2 ? hi - rem : lo + rem;
    }
    if (x > hi) {
        double dx = x - hi;
        int64_t k = (int64_t)(dx / rng);
        double rem = dx - (double)k * rng;
        *sign = k % 2 ? 1 : -1;
        return k % 2 ? lo + rem : hi - rem;
    }
    return x;
}

/* The input index of tap i on a dim of length L under the padding (-1: a zero). */
static int64_t gs_index(int64_t i, int64_t L, int pad, double lo, double hi) {
    if (i >= 0 && i < L) return i;
    if (pad == 0) return -1;
    if (pad == 1) return i < 0 ? 0 : L - 1;
    double s;
    int64_t j = (int64_t)gs_reflect((double)i, lo, hi, &s);
    return j < 0 ? 0 : j >= L ? L - 1 : j;
}

static void gs_cubic(double t, double *c, double *dc) {
    const double A = -0.75;
    double u = t + 1, v = 1 - t, w = 2 - t;
    c[0] = ((A * u - 5 * A) * u + 8 * A) * u - 4 * A;
    c[1] = ((A + 2) * t - (A + 3)) * t * t + 1;
    c[2] = ((A + 2) * v - (A + 3)) * v * v + 1;
    c[3] = ((A * w - 5 * A) * w + 8 * A) * w - 4 * A;
    dc[0] = (3 * A * u - 10 * A) * u + 8 * A;
    dc[1] = (3 * (A + 2) * t - 2 * (A + 3)) * t;
    dc[2] = -(3 * (A + 2) * v - 2 * (A + 3)) * v;
    dc[3] = -((3 * A * w - 10 * A) * w + 8 * A);
}

/* The taps of one output point on dim d from its normalized coordinate g:
 * input indices idx (-1: zero), weights w, and their derivatives dw in g. */
static void gs_taps(const gs_geo *q, int d, double g, int64_t *idx, double *w, double *dw) {
    int64_t L = q->in[d];
    double lo = q->align ? 0 : -0.5, hi = q->align ? (double)(L - 1) : (double)L - 0.5;
    double x = q->align ? (g + 1) / 2 * (double)(L - 1) : ((g + 1) * (double)L - 1) / 2;
    double dx = q->align ? (double)(L - 1) / 2 : (double)L / 2; /* dx/dg */
    if (q->K == 1) x = nearbyint(x); /* numpy's rint: half to even */
    if (x < lo || x > hi) {
        if (q->pad == 1) x = x < 0 ? 0 : x > (double)(L - 1) ? (double)(L - 1) : x, dx = 0;
        else if (q->pad == 2) {
            double s;
            x = gs_reflect(x, lo, hi, &s);
            dx *= s;
        }
    }
    if (q->K == 1) {
        idx[0] = gs_index((int64_t)x, L, q->pad, lo, hi);
        w[0] = 1, dw[0] = 0;
        return;
    }
    double f = floor(x), t = x - f;
    int64_t b = (int64_t)f - (q->K == 4);
    for (int k = 0; k < q->K; k++) idx[k] = gs_index(b + k, L, q->pad, lo, hi);
    if (q->K == 2) {
        w[0] = 1 - t, w[1] = t, dw[0] = -dx, dw[1] = dx;
        return;
    }
    gs_cubic(t, w, dw);
    for (int k = 0; k < 4; k++) dw[k] *= dx;
}

/* Forward (Y) or backward (dY into dX, dgrid), one output point per (n, o), all channels. */
static void gs_run(const gs_geo *q, pd_dtype dt, const void *X, const void *G, void *Y, const void *dY, void *dX,
                   void *dG) {
    int64_t O = 1, S = 1;
    for (int d = 0; d < q->r; d++) O *= q->out[d], S *= q->in[d];
    int64_t nk = q->r == 2 ? q->K * q->K : q->K * q->K * q->K;
    for (int64_t n = 0; n < q->N; n++)
        for (int64_t o = 0; o < O; o++) {
            int64_t idx[3][4], go = (n * O + o) * q->r;
            double w[3][4], dw[3][4];
            /* the grid's last dim is (x, y[, z]): x indexes the innermost dim */
            for (int d = 0; d < q->r; d++)
                gs_taps(q, d, pd__get_f(dt, G, go + q->r - 1 - d), idx[d], w[d], dw[d]);
            double dg[3] = {0, 0, 0};
            for (int64_t c = 0; c < q->C; c++) {
                int64_t xo = (n * q->C + c) * S, yo = (n * q->C + c) * O + o;
                double acc = 0, gy = dY ? pd__get_f(dt, dY, yo) : 0;
                for (int64_t t = 0; t < nk; t++) {
                    int k[3] = {(int)(t % q->K), (int)(t / q->K % q->K), (int)(t / q->K / q->K)};
                    int64_t off = 0;
                    double wt = 1;
                    bool zero = false;
                    for (int d = 0; d < q->r; d++) {
                        int kd = k[q->r - 1 - d]; /* innermost dim varies fastest */
                        if (idx[d][kd] < 0) zero = true;
                        off = off * q->in[d] + idx[d][kd];
                        wt *= w[d][kd];
                    }
                    if (zero) continue;
                    if (Y) acc += wt * pd__get_f(dt, X, xo + off);
                    if (dX && gy != 0) pd__set_f(dt, dX, xo + off, pd__get_f(dt, dX, xo + off) + gy * wt);
                    if (dG)
                        for (int d = 0; d < q->r; d++) {
                            double p = dw[d][k[q->r - 1 - d]];
                            for (int e = 0; e < q->r; e++)
                                if (e != d) p *= w[e][k[q->r - 1 - e]];
                            dg[d] += gy * p * pd__get_f(dt, X, xo + off);
                        }
                }
                if (Y) pd__set_f(dt, Y, yo, acc);
            }
            if (dG)
                for (int d = 0; d < q->r; d++) {
                    int64_t j = go + q->r - 1 - d;
                    pd__set_f(dt, dG, j, pd__get_f(dt, dG, j) + dg[d]);
                }
        }
}

pd_status pd__cpu_GridSample(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)x;
    gs_geo q = gs_make(n, in[0], in[1]);
    gs_run(&q, in[0]->dtype, in[0]->data, in[1]->data, out[0]->data, NULL, NULL, NULL);
    return PD_OK;
}

pd_status pd__cpu_GridSample_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                                 pd_tensor *const *dout, pd_tensor *const *din) {
    (void)x, (void)out;
    const pd_tensor *dY = gout(n, dout, 0);
    pd_tensor *dX = gin(n, din, 0), *dG = gin(n, din, 1);
    if (!dY || (!dX && !dG)) return PD_OK;
    gs_geo q = gs_make(n, in[0], in[1]);
    gs_run(&q, in[0]->dtype, in[0]->data, in[1]->data, NULL, dY->data, dptr(dX), q.K == 1 ? NULL : dptr(dG));
    return PD_OK;
}

/* ---- AffineGrid ----------------------------------------------------------------------------------- */

/* The normalized coordinate of position i on a dim of length L. */
static double ag_base(int64_t i, int64_t L, bool align) {
    if (align) return L > 1 ? -1 + 2.0 * (double)i / (double)(L - 1) : -1;
    return -1 + (2.0 * (double)i + 1) / (double)L;
}

/* grid[n, p, j] = sum_k theta[n, j, k] * (x, y[, z], 1)[k]; or its adjoint into dtheta. */
static void ag_run(const pd__node *n, const pd_tensor *th, const pd_tensor *size, void *grid, const void *dgrid,
                   void *dth) {
    const int64_t *sz = (const int64_t *)size->data;
    int r = (int)size->shape[0] - 2;
    bool align = pd__attr_i(n, "align_corners", 0) != 0;
    pd_dtype dt = th->dtype;
    int64_t P = 1;
    for (int d = 0; d < r; d++) P *= sz[2 + d];
    for (int64_t b = 0; b < sz[0]; b++)
        for (int64_t p = 0; p < P; p++) {
            double base[4];
            int64_t rem = p;
            for (int d = r - 1; d >= 0; d--) { /* base[0] is x, the innermost dim */
                base[r - 1 - d] = ag_base(rem % sz[2 + d], sz[2 + d], align);
                rem /= sz[2 + d];
            }
            base[r] = 1;
            for (int j = 0; j < r; j++) {
                int64_t go = (b * P + p) * r + j, to = (b * r + j) * (r + 1);
                if (grid) {
                    double v = 0;
                    for (int k = 0; k <= r; k++) v += pd__get_f(dt, th->data, to + k) * base[k];
                    pd__set_f(dt, grid, go, v);
                } else {
                    double gy = pd__get_f(dt, dgrid, go);
                    for (int k = 0; k <= r; k++) pd__set_f(dt, dth, to + k, pd__get_f(dt, dth, to + k) + gy * base[k]);
                }
            }
        }
}

pd_status pd__cpu_AffineGrid(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)x;
    ag_run(n, in[0], in[1], out[0]->data, NULL, NULL);
    return PD_OK;
}

pd_status pd__cpu_AffineGrid_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                                 pd_tensor *const *dout, pd_tensor *const *din) {
    (void)x, (void)out;
    const pd_tensor *dY = gout(n, dout, 0);
    pd_tensor *dT = gin(n, din, 0);
    if (!dY || !dT) return PD_OK;
    ag_run(n, in[0], in[1], NULL, dY->data, dT->data);
    return PD_OK;
}

/* ---- Col2Im --------------------------------------------------------------------------------------- */

/* Y (N, C, img) += the blocks of X (N, C * K, L); or dX += dY gathered (the adjoint). */
static pd_status c2i_run(const pd__node *n, pd_tensor *const *in, const void *src, void *dst, bool fwd) {
    const pd_tensor *X = in[0];
    int r = (int)in[1]->shape[0];
    const int64_t *img = (const int64_t *)in[1]->data, *blk = (const int64_t *)in[2]->data;
    int64_t cnt[PD_MAX_DIMS], st[PD_MAX_DIMS], pb[PD_MAX_DIMS], dil[PD_MAX_DIMS];
    if (!pd__col2im_plan(n, r, img, blk, cnt, st, pb, dil)) return pd__err(PD_ERR_SHAPE, "bad Col2Im geometry");
    int64_t K = prod64(r, blk), L = prod64(r, cnt), S = prod64(r, img), NC = X->shape[0] * (X->shape[1] / K);
    pd_dtype dt = X->dtype;
    for (int64_t nc = 0; nc < NC; nc++)
        for (int64_t k = 0; k < K; k++)
            for (int64_t l = 0; l < L; l++) {
                int64_t kr = k, lr = l, off = 0;
                bool in_img = true;
                int64_t pos[PD_MAX_DIMS];
                for (int d = r - 1; d >= 0; d--) {
                    pos[d] = (lr % cnt[d]) * st[d] - pb[d] + (kr % blk[d]) * dil[d];
                    lr /= cnt[d], kr /= blk[d];
                    if (pos[d] < 0 || pos[d] >= img[d]) in_img = false;
                }
                if (!in_img) continue;
                for (int d = 0; d < r; d++) off = off * img[d] + pos[d];
                int64_t xi = (nc * K + k) * L + l, yi = nc * S + off;
                if (fwd) pd__set_f(dt, dst, yi, pd__get_f(dt, dst, yi) + pd__get_f(dt, src, xi));
                else pd__set_f(dt, dst, xi, pd__get_f(dt, dst, xi) + pd__get_f(dt, src, yi));
            }
    return PD_OK;
}

pd_status pd__cpu_Col2Im(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)x;
    memset(out[0]->data, 0, (size_t)pd_tensor_numel(out[0]) * pd_dtype_size(out[0]->dtype));
    return c2i_run(n, in, in[0]->data, out[0]->data, true);
}

pd_status pd__cpu_Col2Im_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                             pd_tensor *const *dout, pd_tensor *const *din) {
    (void)x, (void)out;
    const pd_tensor *dY = gout(n, dout, 0);
    pd_tensor *dX = gin(n, din, 0);
    if (!dY || !dX) return PD_OK;
    return c2i_run(n, in, dY->data, dX->data, false);
}

/* ---- CenterCropPad -------------------------------------------------------------------------------- */

/* Per dim: the centred window both share, its start in X and in Y and its length
 * (a crop starts (in - out) / 2 into X, a pad (out - in) / 2 into Y). */
static void ccp_walk(const pd_tensor *X, const pd_tensor *Y, const void *src, void *dst, bool fwd, bool add) {
    int r = X->ndim;
    int64_t a[PD_MAX_DIMS], b[PD_MAX_DIMS], len[PD_MAX_DIMS], idx[PD_MAX_DIMS] = {0}, total = 1;
    for (int d = 0; d < r; d++) {
        int64_t i = X->shape[d], o = Y->shape[d];
        a[d] = i > o ? (i - o) / 2 : 0, b[d] = o > i ? (o - i) / 2 : 0, len[d] = i < o ? i : o;
        total *= len[d];
    }
    size_t es = pd_dtype_size(X->dtype);
    for (int64_t t = 0; t < total; t++) {
        int64_t xi = 0, yi = 0;
        for (int d = 0; d < r; d++) xi = xi * X->shape[d] + a[d] + idx[d], yi = yi * Y->shape[d] + b[d] + idx[d];
        int64_t si = fwd ? xi : yi, di = fwd ? yi : xi;
        if (add) pd__set_f(X->dtype, dst, di, pd__get_f(X->dtype, dst, di) + pd__get_f(X->dtype, src, si));
        else memcpy((char *)dst + (size_t)di * es, (const char *)src + (size_t)si * es, es);
        odo_next(idx, len, r);
    }
}

pd_status pd__cpu_CenterCropPad(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)x, (void)n;
    memset(out[0]->data, 0, (size_t)pd_tensor_numel(out[0]) * pd_dtype_size(out[0]->dtype));
    ccp_walk(in[0], out[0], in[0]->data, out[0]->data, true, false);
    return PD_OK;
}

pd_status pd__cpu_CenterCropPad_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                                    pd_tensor *const *dout, pd_tensor *const *din) {
    (void)x;
    const pd_tensor *dY = gout(n, dout, 0);
    pd_tensor *dX = gin(n, din, 0);
    if (!dY || !dX) return PD_OK;
    (void)out;
    ccp_walk(in[0], dY, dY->data, dX->data, false, true);
    return PD_OK;
}

/* ---- RoiAlign ------------------------------------------------------------------------------------- */

/* Each output bin averages (or, in max mode, takes the largest of) bilinear
 * samples on a grid of sampling_ratio (or ceil(roi size / bins)) points per
 * side. The sampling and the max mode's max of the four weighted taps follow
 * onnxruntime, which generated ONNX's test data. */
pd_status pd__cpu_RoiAlign(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    const pd_tensor *X = in[0], *rois = in[1], *bi = in[2];
    pd_tensor *Y = out[0];
    pd_dtype dt = X->dtype;
    int64_t N = X->shape[0], C = X->shape[1], H = X->shape[2], W = X->shape[3], R = rois->shape[0];
    int64_t oh = Y->shape[2], ow = Y->shape[3], sr = pd__attr_i(n, "sampling_ratio", 0);
    double off = pd__roialign_offset(n), scale = pd__attr_f(n, "spatial_scale", 1.0f);
    bool mx = pd__roialign_mode(n) == 1;
    for (int64_t r = 0; r < R; r++) {
        int64_t b = pd__get_i(bi->dtype, bi->data, r);
        if (b < 0 || b >= N)
            return pd__err(PD_ERR_INVALID, "batch_indices[%lld] = %lld is outside [0, %lld)", (long long)r,
                           (long long)b, (long long)N);
    }
    (void)x;
    for (int64_t rc = 0; rc < R * C; rc++) {
        int64_t r = rc / C, c = rc % C, b = pd__get_i(bi->dtype, bi->data, r), base = (b * C + c) * H * W;
        double x0 = pd__get_f(dt, rois->data, 4 * r) * scale - off, y0 = pd__get_f(dt, rois->data, 4 * r + 1) * scale - off;
        double x1 = pd__get_f(dt, rois->data, 4 * r + 2) * scale - off, y1 = pd__get_f(dt, rois->data, 4 * r + 3) * scale - off;
        double rw = x1 - x0, rh = y1 - y0;
        if (off == 0) rw = rw > 1 ? rw : 1, rh = rh > 1 ? rh : 1; /* output_half_pixel: at least one pixel */
        double bh = rh / (double)oh, bw = rw / (double)ow;
        int64_t gh = sr > 0 ? sr : (int64_t)ceil(rh / (double)oh), gw = sr > 0 ? sr : (int64_t)ceil(rw / (double)ow);
        double cnt = gh * gw > 1 ? (double)(gh * gw) : 1;
        for (int64_t ph = 0; ph < oh; ph++)
            for (int64_t pw = 0; pw < ow; pw++) {
                double acc = 0;
                bool first = true;
                for (int64_t iy = 0; iy < gh; iy++)
                    for (int64_t ix = 0; ix < gw; ix++) {
                        double yy = y0 + (double)ph * bh + ((double)iy + 0.5) * bh / (double)gh;
                        double xx = x0 + (double)pw * bw + ((double)ix + 0.5) * bw / (double)gw;
                        double v = 0;
                        if (!(yy < -1.0 || yy > (double)H || xx < -1.0 || xx > (double)W)) {
                            if (yy <= 0) yy = 0;
                            if (xx <= 0) xx = 0;
                            int64_t yl = (int64_t)yy, xl = (int64_t)xx, yh, xh;
                            if (yl >= H - 1) yh = yl = H - 1, yy = (double)yl;
                            else yh = yl + 1;
                            if (xl >= W - 1) xh = xl = W - 1, xx = (double)xl;
                            else xh = xl + 1;
                            double ly = yy - (double)yl, lx = xx - (double)xl, hy = 1 - ly, hx = 1 - lx;
                            double t1 = hy * hx * pd__get_f(dt, X->data, base + yl * W + xl);
                            double t2 = hy * lx * pd__get_f(dt, X->data, base + yl * W + xh);
                            double t3 = ly * hx * pd__get_f(dt, X->data, base + yh * W + xl);
                            double t4 = ly * lx * pd__get_f(dt, X->data, base + yh * W + xh);
                            v = mx ? fmax(fmax(t1, t2), fmax(t3, t4)) : t1 + t2 + t3 + t4;
                        }
                        if (!mx) acc += v;
                        else if (first || v > acc) acc = v;
                        first = false;
                    }
                pd__set_f(dt, Y->data, (rc * oh + ph) * ow + pw, mx ? acc : acc / cnt);
            }
    }
    return PD_OK;
}

pd_status pd__cpu_RoiAlign_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                               pd_tensor *const *dout, pd_tensor *const *din) {
    (void)x, (void)n, (void)in, (void)out, (void)dout, (void)din;
    return pd__err(PD_ERR_UNSUPPORTED, "RoiAlign is not differentiable");
}

/* ---- MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv ------------------------------------------ */
/* Plain loops over int64 sums of (a - a_zero_point)(b - b_zero_point): these
 * run in quantized inference models, at load when folded, and the spec asks
 * for exact integer sums, which a float GEMM would not give past 2^24. A
 * finishing step writes each sum: as int32, or requantized by the QLinear
 * forms. Zero points and scales hold one value or one per row of A, column
 * of B or output channel (the shape rules refused the rest). */

static int64_t qzero(const pd_tensor *t, int64_t k) {
    if (!t || !t->data) return 0;
    return pd__get_i(t->dtype, t->data, pd_tensor_numel(t) == 1 ? 0 : k);
}

static double qscale(const pd_tensor *t, int64_t k) {
    return pd__get_f(t->dtype, t->data, pd_tensor_numel(t) == 1 ? 0 : k);
}

/* a_scale * b_scale / y_scale in the scales' own type, as the reference's
 * numpy computes it (float16 rounds after each step). */
static double qmult(pd_dtype t, double as, double bs, double ys) {
    if (t == PD_DOUBLE) return as * bs / ys;
    float p = (float)as * (float)bs;
    if (t == PD_FLOAT16) p = pd__half_to_float(pd__float_to_half(p));
    float q = p / (float)ys;
    if (t == PD_FLOAT16) q = pd__half_to_float(pd__float_to_half(q));
    return q;
}

/* How a sum reaches the output: requant NULL writes it as int32; else
 * y = saturate(round_half_even(sum * a_scale(row) * b_scale(col) / y_scale) + y_zero_point). */
typedef struct pd__qfin {
    const pd_tensor *as, *bs, *ys, *yz, *bias;
    bool requant;
} pd__qfin;

static void qfin_put(const pd__qfin *f, pd_tensor *Y, int64_t i, int64_t row, int64_t col, int64_t acc) {
    if (f->bias && f->bias->data) acc += pd__get_i(f->bias->dtype, f->bias->data, col);
    if (!f->requant) {
        ((int32_t *)Y->data)[i] = (int32_t)acc;
        return;
    }
    double m = qmult(f->as->dtype, qscale(f->as, row), qscale(f->bs, col), qscale(f->ys, 0));
    double v = nearbyint((double)acc * m) + (double)qzero(f->yz, 0);
    double lo = Y->dtype == PD_INT8 ? -128 : 0, hi = Y->dtype == PD_INT8 ? 127 : 255;
    pd__set_i(Y->dtype, Y->data, i, (int64_t)(v < lo ? lo : v > hi ? hi : v));
}

/* A (..., M, K) times B (..., K, N), batch dims broadcast as numpy's matmul. */
static void qmm_run(const pd_tensor *A, const pd_tensor *B, const pd_tensor *az, const pd_tensor *bz, pd_tensor *Y,
                    const pd__qfin *f) {
    int ra = A->ndim, rb = B->ndim;
    int64_t M = ra >= 2 ? A->shape[ra - 2] : 1, K = A->shape[ra - 1], N = rb >= 2 ? B->shape[rb - 1] : 1;
    int ba = ra > 2 ? ra - 2 : 0, bb = rb > 2 ? rb - 2 : 0, nb = ba > bb ? ba : bb;
    int64_t nbatch = 1, bdim[PD_MAX_DIMS], idx[PD_MAX_DIMS] = {0};
    for (int i = 0; i < nb; i++) {
        int ia = i - (nb - ba), ib = i - (nb - bb);
        int64_t da = ia >= 0 ? A->shape[ia] : 1, db = ib >= 0 ? B->shape[ib] : 1;
        bdim[i] = da == 1 ? db : da;
        nbatch *= bdim[i];
    }
    for (int64_t bi = 0; bi < nbatch; bi++) {
        int64_t ao = 0, bo = 0;
        for (int i = 0; i < nb; i++) {
            int ia = i - (nb - ba), ib = i - (nb - bb);
            if (ia >= 0) ao = ao * A->shape[ia] + (A->shape[ia] == 1 ? 0 : idx[i]);
            if (ib >= 0) bo = bo * B->shape[ib] + (B->shape[ib] == 1 ? 0 : idx[i]);
        }
        ao *= M * K, bo *= K * N;
        for (int64_t m = 0; m < M; m++) {
            int64_t a0 = qzero(az, m);
            for (int64_t c = 0; c < N; c++) {
                int64_t b0 = qzero(bz, c), acc = 0;
                for (int64_t k = 0; k < K; k++)
                    acc += (pd__get_i(A->dtype, A->data, ao + m * K + k) - a0) *
                           (pd__get_i(B->dtype, B->data, bo + k * N + c) - b0);
                qfin_put(f, Y, (bi * M + m) * N + c, m, c, acc);
            }
        }
        for (int i = nb - 1; i >= 0 && ++idx[i] == bdim[i]; i--) idx[i] = 0;
    }
}

pd_status pd__cpu_MatMulInteger(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)x;
    pd__qfin f = {0};
    qmm_run(in[0], in[1], opt_in(n, in, 2), opt_in(n, in, 3), out[0], &f);
    return PD_OK;
}

pd_status pd__cpu_QLinearMatMul(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)x;
    pd__qfin f = {in[1], in[4], in[6], opt_in(n, in, 7), NULL, true};
    qmm_run(in[0], in[3], opt_in(n, in, 2), opt_in(n, in, 5), out[0], &f);
    return PD_OK;
}

/* Direct convolution: each output (b, m, o...) sums its group's channels over
 * the window; taps in the padding add nothing (the reference pads x - x_zero_point with 0). */
static void qconv_run(const pd__win *w, int64_t group, const pd_tensor *X, const pd_tensor *W, const pd_tensor *xz,
                      const pd_tensor *wz, pd_tensor *Y, const pd__qfin *f) {
    int ns = w->nsp;
    int64_t N = X->shape[0], C = X->shape[1], M = W->shape[0], Cg = C / group, Mg = M / group;
    int64_t osz = 1, ksz = 1, isz = 1, x0 = qzero(xz, 0);
    for (int i = 0; i < ns; i++) osz *= w->out[i], ksz *= w->k[i], isz *= w->in[i];
    for (int64_t b = 0; b < N; b++)
        for (int64_t m = 0; m < M; m++) {
            int64_t g = m / Mg, w0 = qzero(wz, m);
            for (int64_t o = 0; o < osz; o++) {
                int64_t oc[PD_MAX_DIMS], acc = 0;
                for (int i = ns - 1, r = o; i >= 0; i--) oc[i] = r % w->out[i], r /= w->out[i];
                for (int64_t kk = 0; kk < ksz; kk++) {
                    int64_t xi = 0;
                    bool inside = true;
                    for (int i = ns - 1, r = kk, st = 1; i >= 0; i--) {
                        int64_t kc = r % w->k[i], p = oc[i] * w->s[i] - w->pb[i] + kc * w->d[i];
                        r /= w->k[i];
                        if (p < 0 || p >= w->in[i]) inside = false;
                        xi += p * st, st *= w->in[i];
                    }
                    if (!inside) continue;
                    for (int64_t c = 0; c < Cg; c++) {
                        int64_t xv = pd__get_i(X->dtype, X->data, (b * C + g * Cg + c) * isz + xi) - x0;
                        int64_t wv = pd__get_i(W->dtype, W->data, (m * Cg + c) * ksz + kk) - w0;
                        acc += xv * wv;
                    }
                }
                qfin_put(f, Y, (b * M + m) * osz + o, 0, m, acc);
            }
        }
}

pd_status pd__cpu_ConvInteger(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)x;
    pd__win w;
    PD_TRY(pd__win_make(n, PD_WIN_CONV, in[0]->ndim, in[0]->shape, in[1]->shape + 2, &w));
    pd__qfin f = {0};
    qconv_run(&w, pd__attr_i(n, "group", 1), in[0], in[1], opt_in(n, in, 2), opt_in(n, in, 3), out[0], &f);
    return PD_OK;
}

pd_status pd__cpu_QLinearConv(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    (void)x;
    pd__win w;
    PD_TRY(pd__win_make(n, PD_WIN_CONV, in[0]->ndim, in[0]->shape, in[3]->shape + 2, &w));
    pd__qfin f = {in[1], in[4], in[6], opt_in(n, in, 7), opt_in(n, in, 8), true};
    qconv_run(&w, pd__attr_i(n, "group", 1), in[0], in[3], opt_in(n, in, 2), opt_in(n, in, 5), out[0], &f);
    return PD_OK;
}

#define PD__NO_GRAD_NN(name)                                                                                    \
    pd_status pd__cpu_##name##_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out, \
                                   pd_tensor *const *dout, pd_tensor *const *din) {                             \
        (void)x, (void)n, (void)in, (void)out, (void)dout, (void)din;                                           \
        return pd__err(PD_ERR_UNSUPPORTED, "%s is not differentiable", #name);                                  \
    }
PD__NO_GRAD_NN(MatMulInteger)
PD__NO_GRAD_NN(QLinearMatMul)
PD__NO_GRAD_NN(ConvInteger)
PD__NO_GRAD_NN(QLinearConv)
PD__NO_GRAD_NN(Bernoulli)
PD__NO_GRAD_NN(RandomUniformLike)
