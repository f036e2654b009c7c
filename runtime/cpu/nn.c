/* nn.c - CPU forward kernels of the neural-network ops: Gemm, MatMul, Conv,
 * ConvTranspose (N-D, im2col/col2im + OpenBLAS GEMM), BatchNormalization
 * (inference and training statistics), LayerNormalization, MaxPool,
 * AveragePool, GlobalAveragePool (N-D), LRN, Softmax, LogSoftmax, Dropout,
 * SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss.
 *
 * Each pd__cpu_<Op> reads the attributes, takes the window geometry from
 * pd__win_make (the same function the shape rule used) and dispatches on the
 * dtype to a typed kernel. The typed kernels are written once in nn_impl.h
 * and instantiated below for float (_f32) and double (_f64); the untyped
 * helpers they share with the backward (nn_grad.c) are in nn_common.h.
 * Scratch memory comes from pd__scratch; loops run on OpenMP threads where
 * worthwhile. In a training session (x->training) BatchNormalization uses
 * batch statistics and Dropout drops (see each below).
 */
#include "nn_common.h"

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
