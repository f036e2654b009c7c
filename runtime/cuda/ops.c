/* ops.c - the CUDA backend's op table: for each op it runs, the forward and
 * backward glue from a node (attributes, shapes) to the launchers of
 * kernels.h, with the CPU kernels' contracts (outputs overwritten, input
 * gradients added into); supports_op says which nodes those are, and the
 * rest stays with the CPU backend. The table is keyed by pd_op (core/ops.h).
 *
 * Only float32 data (indices and labels int64 or int32). Shape-only inputs
 * (Reshape's shape, Split's sizes, Squeeze's axes) are never read: the
 * output shapes inference gave say everything, so they may stay on the host.
 */
#include "kernels.h"

#include "../../core/shape_nn.h"
#include "host.h"
#include "../../core/shape_tensor.h"

#include <string.h>

_Static_assert(PD_CU_MAXD == PD_MAX_DIMS, "kernels.h's rank limit is pipedream.h's");

static const pd_tensor *opt_in(const pd__node *n, pd_tensor *const *in, int i) { return i < n->nin ? in[i] : NULL; }
static pd_tensor *gin(const pd__node *n, pd_tensor *const *din, int i) { return din && i < n->nin ? din[i] : NULL; }
static const pd_tensor *gout(const pd__node *n, pd_tensor *const *dout, int j) {
    return dout && j < n->nout ? dout[j] : NULL;
}
static const float *cf(const pd_tensor *t) { return t ? (const float *)t->data : NULL; }
static float *wf(pd_tensor *t) { return t ? (float *)t->data : NULL; }
static int64_t prod(int n, const int64_t *v) {
    int64_t p = 1;
    for (int i = 0; i < n; i++) p *= v[i];
    return p;
}

/* ---- element-wise ---------------------------------------------------------------------------------- */

static int unary_code(const pd__node *n, float *alpha) {
    *alpha = 0;
    switch ((pd_op)n->op) {
    case PD_OP_RELU: return PD_CU_RELU;
    case PD_OP_LEAKY_RELU: *alpha = pd__attr_f(n, "alpha", 0.01f); return PD_CU_LEAKY_RELU;
    case PD_OP_SIGMOID: return PD_CU_SIGMOID;
    case PD_OP_TANH: return PD_CU_TANH;
    case PD_OP_GELU: return strcmp(pd__attr_s(n, "approximate", "none"), "tanh") ? PD_CU_GELU : PD_CU_GELU_TANH;
    case PD_OP_ERF: return PD_CU_ERF;
    case PD_OP_EXP: return PD_CU_EXP;
    case PD_OP_LOG: return PD_CU_LOG;
    case PD_OP_SQRT: return PD_CU_SQRT;
    case PD_OP_NEG: return PD_CU_NEG;
    case PD_OP_RECIPROCAL: return PD_CU_RECIPROCAL;
    default: return PD_CU_IDENTITY;
    }
}

static pd_status cu_unary(pd__cuda_ctx *c, const pd__exec *x, const pd__node *n, pd_tensor *const *in,
                          pd_tensor *const *out) {
    (void)x;
    float a;
    int op = unary_code(n, &a);
    return pd__cu_unary_fwd(c, op, a, wf(out[0]), cf(in[0]), pd_tensor_numel(in[0]));
}

static pd_status cu_unary_bwd(pd__cuda_ctx *c, const pd__exec *x, const pd__node *n, pd_tensor *const *in,
                              pd_tensor *const *out, pd_tensor *const *dout, pd_tensor *const *din) {
    (void)x;
    const pd_tensor *dy = gout(n, dout, 0);
    pd_tensor *dx = gin(n, din, 0);
    if (!dy || !dx) return PD_OK;
    float a;
    int op = unary_code(n, &a);
    return pd__cu_unary_bwd(c, op, a, wf(dx), cf(dy), cf(in[0]), cf(out[0]), pd_tensor_numel(in[0]));
}

/* Reshape, Flatten, Squeeze, Unsqueeze, Identity: the same elements */
static pd_status cu_copy(pd__cuda_ctx *c, const pd__exec *x, const pd__node *n, pd_tensor *const *in,
                         pd_tensor *const *out) {
    (void)x;
    (void)n;
    return pd__cuda_copy(c, out[0]->data, in[0]->data, sizeof(float) * (size_t)pd_tensor_numel(in[0]));
}

static pd_status cu_copy_bwd(pd__cuda_ctx *c, const pd__exec *x, const pd__node *n, pd_tensor *const *in,
                             pd_tensor *const *out, pd_tensor *const *dout, pd_tensor *const *din) {
    (void)x;
    (void)out;
    const pd_tensor *dy = gout(n, dout, 0);
    pd_tensor *dx = gin(n, din, 0);
    if (!dy || !dx) return PD_OK;
    return pd__cu_axpy(c, wf(dx), cf(dy), 1.0f, pd_tensor_numel(in[0]));
}

/* The broadcast layout of a and b onto y (numpy rules, right-aligned). */
static pd_status bcast_make(const pd_tensor *a, const pd_tensor *b, const pd_tensor *y, pd__cu_bcast *bc) {
    memset(bc, 0, sizeof *bc);
    bc->nd = y->ndim;
    int64_t sa = 1, sb = 1;
    for (int i = y->ndim - 1; i >= 0; i--) {
        int ia = i - (y->ndim - a->ndim), ib = b ? i - (y->ndim - b->ndim) : -1;
        int64_t da = ia >= 0 ? a->shape[ia] : 1, db = ib >= 0 ? b->shape[ib] : 1;
        if ((da != 1 && da != y->shape[i]) || (db != 1 && db != y->shape[i]))
            return pd__err(PD_ERR_SHAPE, "operands do not broadcast to the output");
        bc->shape[i] = y->shape[i];
        bc->sa[i] = da == 1 ? 0 : sa;
        bc->sb[i] = db == 1 ? 0 : sb;
        sa *= da;
        sb *= db;
    }
    return PD_OK;
}

static int binary_code(const pd__node *n) {
    switch ((pd_op)n->op) {
    case PD_OP_ADD: return PD_CU_ADD;
    case PD_OP_SUB: return PD_CU_SUB;
    case PD_OP_MUL: return PD_CU_MUL;
    default: return PD_CU_DIV;
    }
}

static pd_status cu_binary(pd__cuda_ctx *c, const pd__exec *x, const pd__node *n, pd_tensor *const *in,
                           pd_tensor *const *out) {
    (void)x;
    pd__cu_bcast bc;
    PD_TRY(bcast_make(in[0], in[1], out[0], &bc));
    return pd__cu_binary_fwd(c, binary_code(n), wf(out[0]), cf(in[0]), cf(in[1]), &bc);
}

static pd_status cu_binary_bwd(pd__cuda_ctx *c, const pd__exec *x, const pd__node *n, pd_tensor *const *in,
                               pd_tensor *const *out, pd_tensor *const *dout, pd_tensor *const *din) {
    (void)x;
    const pd_tensor *dy = gout(n, dout, 0);
    if (!dy) return PD_OK;
    pd__cu_bcast bc;
    PD_TRY(bcast_make(in[0], in[1], out[0], &bc));
    for (int i = 0; i < 2; i++) {
        pd_tensor *d = gin(n, din, i);
        if (d)
            PD_TRY(pd__cu_binary_bwd(c, binary_code(n), i, 1.0f, wf(d), cf(dy), cf(in[0]), cf(in[1]), &bc,
                                     pd_tensor_numel(in[i])));
    }
    return PD_OK;
}

/* ---- Gemm, MatMul ------------------------------------------------------------------------------------ */

static pd_status cu_Gemm(pd__cuda_ctx *c, const pd__exec *x, const pd__node *n, pd_tensor *const *in,
                         pd_tensor *const *out) {
    (void)x;
    bool ta = pd__attr_i(n, "transA", 0) != 0, tb = pd__attr_i(n, "transB", 0) != 0;
    float alpha = pd__attr_f(n, "alpha", 1.0f), beta = pd__attr_f(n, "beta", 1.0f);
    const pd_tensor *A = in[0], *B = in[1], *C = opt_in(n, in, 2);
    int64_t K = ta ? A->shape[0] : A->shape[A->ndim - 1], N = tb ? B->shape[0] : B->shape[1];
    int64_t M = N ? pd_tensor_numel(out[0]) / N : 0; /* A (..., K): the loader's fused Linear */
    float b2 = 0.0f;
    if (C && beta != 0.0f) { /* Y = beta C broadcast, then Y += alpha A B */
        pd__cu_bcast bc;
        PD_TRY(bcast_make(C, NULL, out[0], &bc));
        PD_TRY(pd__cu_broadcast(c, wf(out[0]), cf(C), beta, &bc));
        b2 = 1.0f;
    }
    return pd__cu_gemm(c, ta, tb, M, N, K, alpha, cf(A), cf(B), b2, wf(out[0]), 1, 0, 0, 0);
}

static pd_status cu_Gemm_bwd(pd__cuda_ctx *c, const pd__exec *x, const pd__node *n, pd_tensor *const *in,
                             pd_tensor *const *out, pd_tensor *const *dout, pd_tensor *const *din) {
    (void)x;
    const pd_tensor *dY = gout(n, dout, 0);
    if (!dY) return PD_OK;
    bool ta = pd__attr_i(n, "transA", 0) != 0, tb = pd__attr_i(n, "transB", 0) != 0;
    float alpha = pd__attr_f(n, "alpha", 1.0f), beta = pd__attr_f(n, "beta", 1.0f);
    const pd_tensor *A = in[0], *B = in[1], *C = opt_in(n, in, 2);
    int64_t K = ta ? A->shape[0] : A->shape[A->ndim - 1], N = tb ? B->shape[0] : B->shape[1];
    int64_t M = N ? pd_tensor_numel(dY) / N : 0; /* A (..., K): the loader's fused Linear */
    const float *a = cf(A), *b = cf(B), *dy = cf(dY);
    pd_tensor *dA = gin(n, din, 0), *dB = gin(n, din, 1), *dC = C ? gin(n, din, 2) : NULL;
    if (dA) { /* d op(A) = alpha dY op(B)^T (M, K); stored transposed when ta */
        if (!ta) PD_TRY(pd__cu_gemm(c, false, !tb, M, K, N, alpha, dy, b, 1.0f, wf(dA), 1, 0, 0, 0));
        else PD_TRY(pd__cu_gemm(c, tb, true, K, M, N, alpha, b, dy, 1.0f, wf(dA), 1, 0, 0, 0));
    }
    if (dB) { /* d op(B) = alpha op(A)^T dY (K, N); stored transposed when tb */
        if (!tb) PD_TRY(pd__cu_gemm(c, !ta, false, K, N, M, alpha, a, dy, 1.0f, wf(dB), 1, 0, 0, 0));
        else PD_TRY(pd__cu_gemm(c, true, ta, N, K, M, alpha, dy, a, 1.0f, wf(dB), 1, 0, 0, 0));
    }
    if (dC && beta != 0.0f) { /* beta dY summed over C's broadcast dims */
        pd__cu_bcast bc;
        PD_TRY(bcast_make(out[0], C, out[0], &bc));
        PD_TRY(pd__cu_binary_bwd(c, PD_CU_ADD, 1, beta, wf(dC), dy, NULL, NULL, &bc, pd_tensor_numel(C)));
    }
    return PD_OK;
}

/* numpy matmul: 1-D operands promoted, batch dims broadcast. The batches of
 * A and B each are one matrix (stride 0), all matrices (full) or another
 * broadcast pattern (looped one product at a time). */
typedef struct mm {
    int64_t M, K, N, nbatch, na, nb; /* na, nb: matrices in A and B */
    int nd;
    int64_t ob[PD_MAX_DIMS], sa[PD_MAX_DIMS], sb[PD_MAX_DIMS];
} mm;

static void mm_make(const pd_tensor *a, const pd_tensor *b, mm *L) {
    int ra = a->ndim, rb = b->ndim;
    L->M = ra >= 2 ? a->shape[ra - 2] : 1;
    L->K = a->shape[ra - 1];
    L->N = rb >= 2 ? b->shape[rb - 1] : 1;
    int ba = ra > 2 ? ra - 2 : 0, bb = rb > 2 ? rb - 2 : 0;
    L->nd = ba > bb ? ba : bb;
    L->nbatch = L->na = L->nb = 1;
    int64_t stra = 1, strb = 1;
    for (int i = L->nd - 1; i >= 0; i--) {
        int ia = i - (L->nd - ba), ib = i - (L->nd - bb);
        int64_t da = ia >= 0 ? a->shape[ia] : 1, db = ib >= 0 ? b->shape[ib] : 1;
        L->ob[i] = da == 1 ? db : da;
        L->sa[i] = da == 1 ? 0 : stra;
        L->sb[i] = db == 1 ? 0 : strb;
        stra *= da;
        strb *= db;
        L->nbatch *= L->ob[i];
    }
    L->na = stra;
    L->nb = strb;
}

/* matrix indices of A and B for output batch q */
static void mm_at(const mm *L, int64_t q, int64_t *ia, int64_t *ib) {
    int64_t a = 0, b = 0;
    for (int i = L->nd - 1; i >= 0; i--) {
        int64_t k = q % L->ob[i];
        q /= L->ob[i];
        a += k * L->sa[i];
        b += k * L->sb[i];
    }
    *ia = a;
    *ib = b;
}

static pd_status cu_MatMul(pd__cuda_ctx *c, const pd__exec *x, const pd__node *n, pd_tensor *const *in,
                           pd_tensor *const *out) {
    (void)x;
    (void)n;
    mm L;
    mm_make(in[0], in[1], &L);
    const float *a = cf(in[0]), *b = cf(in[1]);
    float *y = wf(out[0]);
    int64_t MK = L.M * L.K, KN = L.K * L.N, MN = L.M * L.N;
    if (L.nb == 1 && L.na == L.nbatch) /* one B: all of A's rows in one product */
        return pd__cu_gemm(c, false, false, L.nbatch * L.M, L.N, L.K, 1.0f, a, b, 0.0f, y, 1, 0, 0, 0);
    if (L.na == L.nbatch && L.nb == L.nbatch)
        return pd__cu_gemm(c, false, false, L.M, L.N, L.K, 1.0f, a, b, 0.0f, y, L.nbatch, MK, KN, MN);
    if (L.na == 1 && L.nb == L.nbatch)
        return pd__cu_gemm(c, false, false, L.M, L.N, L.K, 1.0f, a, b, 0.0f, y, L.nbatch, 0, KN, MN);
    for (int64_t q = 0; q < L.nbatch; q++) {
        int64_t ia, ib;
        mm_at(&L, q, &ia, &ib);
        PD_TRY(pd__cu_gemm(c, false, false, L.M, L.N, L.K, 1.0f, a + ia * MK, b + ib * KN, 0.0f, y + q * MN, 1, 0, 0,
                           0));
    }
    return PD_OK;
}

static pd_status cu_MatMul_bwd(pd__cuda_ctx *c, const pd__exec *x, const pd__node *n, pd_tensor *const *in,
                               pd_tensor *const *out, pd_tensor *const *dout, pd_tensor *const *din) {
    (void)x;
    (void)out;
    const pd_tensor *dY = gout(n, dout, 0);
    pd_tensor *dA = gin(n, din, 0), *dB = gin(n, din, 1);
    if (!dY || (!dA && !dB)) return PD_OK;
    mm L;
    mm_make(in[0], in[1], &L);
    const float *a = cf(in[0]), *b = cf(in[1]), *dy = cf(dY);
    float *da = wf(dA), *db = wf(dB);
    int64_t MK = L.M * L.K, KN = L.K * L.N, MN = L.M * L.N;
    /* dA (M, K) += dY (M, N) B^T; dB (K, N) += A^T dY */
    if (L.nb == 1 && L.na == L.nbatch) {
        int64_t R = L.nbatch * L.M;
        if (da) PD_TRY(pd__cu_gemm(c, false, true, R, L.K, L.N, 1.0f, dy, b, 1.0f, da, 1, 0, 0, 0));
        if (db) PD_TRY(pd__cu_gemm(c, true, false, L.K, L.N, R, 1.0f, a, dy, 1.0f, db, 1, 0, 0, 0));
        return PD_OK;
    }
    if (L.na == L.nbatch && L.nb == L.nbatch) {
        if (da) PD_TRY(pd__cu_gemm(c, false, true, L.M, L.K, L.N, 1.0f, dy, b, 1.0f, da, L.nbatch, MN, KN, MK));
        if (db) PD_TRY(pd__cu_gemm(c, true, false, L.K, L.N, L.M, 1.0f, a, dy, 1.0f, db, L.nbatch, MK, MN, KN));
        return PD_OK;
    }
    /* broadcast batches: one product per batch, summed in order on the stream */
    for (int64_t q = 0; q < L.nbatch; q++) {
        int64_t ia, ib;
        mm_at(&L, q, &ia, &ib);
        if (da) PD_TRY(pd__cu_gemm(c, false, true, L.M, L.K, L.N, 1.0f, dy + q * MN, b + ib * KN, 1.0f, da + ia * MK,
                                   1, 0, 0, 0));
        if (db) PD_TRY(pd__cu_gemm(c, true, false, L.K, L.N, L.M, 1.0f, a + ia * MK, dy + q * MN, 1.0f, db + ib * KN,
                                   1, 0, 0, 0));
    }
    return PD_OK;
}

/* ---- Conv ---------------------------------------------------------------------------------------------- */

static pd_status conv_geom(const pd__node *n, pd_tensor *const *in, const pd_tensor *y, pd__cu_conv *g) {
    const pd_tensor *X = in[0], *W = in[1];
    pd__win w;
    PD_TRY(pd__win_make(n, PD_WIN_CONV, X->ndim, X->shape, W->shape + 2, &w));
    if (w.nsp < 1 || w.nsp > 3) return pd__err(PD_ERR_UNSUPPORTED, "Conv over %d spatial dims on CUDA", w.nsp);
    memset(g, 0, sizeof *g);
    g->nsp = w.nsp;
    g->N = X->shape[0];
    g->C = X->shape[1];
    g->K = W->shape[0];
    g->group = pd__attr_i(n, "group", 1);
    for (int i = 0; i < w.nsp; i++) {
        if (w.pb[i] != w.pe[i]) return pd__err(PD_ERR_UNSUPPORTED, "Conv with asymmetric pads on CUDA");
        g->in[i] = w.in[i];
        g->out[i] = w.out[i];
        g->k[i] = w.k[i];
        g->s[i] = w.s[i];
        g->d[i] = w.d[i];
        g->p[i] = w.pb[i];
        if (y && y->shape[2 + i] != w.out[i]) return pd__err(PD_ERR_SHAPE, "Conv output size differs");
    }
    return PD_OK;
}

static pd_status cu_Conv(pd__cuda_ctx *c, const pd__exec *x, const pd__node *n, pd_tensor *const *in,
                         pd_tensor *const *out) {
    (void)x;
    pd__cu_conv g;
    PD_TRY(conv_geom(n, in, out[0], &g));
    PD_TRY(pd__cu_conv_fwd(c, &g, wf(out[0]), cf(in[0]), cf(in[1])));
    const pd_tensor *B = opt_in(n, in, 2);
    if (B) PD_TRY(pd__cu_channel_bias_add(c, wf(out[0]), cf(B), g.N, g.K, prod(g.nsp, g.out)));
    return PD_OK;
}

static pd_status cu_Conv_bwd(pd__cuda_ctx *c, const pd__exec *x, const pd__node *n, pd_tensor *const *in,
                             pd_tensor *const *out, pd_tensor *const *dout, pd_tensor *const *din) {
    (void)x;
    const pd_tensor *dY = gout(n, dout, 0);
    if (!dY) return PD_OK;
    pd__cu_conv g;
    PD_TRY(conv_geom(n, in, out[0], &g));
    pd_tensor *dX = gin(n, din, 0), *dW = gin(n, din, 1), *dB = opt_in(n, in, 2) ? gin(n, din, 2) : NULL;
    if (dX) PD_TRY(pd__cu_conv_bwd_data(c, &g, wf(dX), cf(dY), cf(in[1])));
    if (dW) PD_TRY(pd__cu_conv_bwd_filter(c, &g, wf(dW), cf(dY), cf(in[0])));
    if (dB) PD_TRY(pd__cu_channel_bias_grad(c, wf(dB), cf(dY), g.N, g.K, prod(g.nsp, g.out)));
    return PD_OK;
}

/* ---- normalizations --------------------------------------------------------------------------------------- */

static void bn_dims(pd_tensor *const *in, int64_t *N, int64_t *F, int64_t *S) {
    int64_t numel = pd_tensor_numel(in[0]);
    *N = in[0]->shape[0];
    *F = pd_tensor_numel(in[1]);
    *S = *N > 0 && *F > 0 ? numel / (*N * *F) : 0;
}

/* Session training (x->training): batch statistics and the running ones
 * updated in place in inputs 3 and 4, as the CPU kernel. */
static pd_status cu_BatchNormalization(pd__cuda_ctx *c, const pd__exec *x, const pd__node *n, pd_tensor *const *in,
                                       pd_tensor *const *out) {
    int64_t N = 0, F = 0, S = 0;
    bn_dims(in, &N, &F, &S);
    float eps = pd__attr_f(n, "epsilon", 1e-5f), mom = pd__attr_f(n, "momentum", 0.9f);
    return pd__cu_batchnorm_fwd(c, wf(out[0]), cf(in[0]), cf(in[1]), cf(in[2]), wf(in[3]), wf(in[4]), N, F, S, eps,
                                mom, x && x->training);
}

static pd_status cu_BatchNormalization_bwd(pd__cuda_ctx *c, const pd__exec *x, const pd__node *n, pd_tensor *const *in,
                                           pd_tensor *const *out, pd_tensor *const *dout, pd_tensor *const *din) {
    (void)out;
    const pd_tensor *dY = gout(n, dout, 0);
    if (!dY) return PD_OK;
    int64_t N = 0, F = 0, S = 0;
    bn_dims(in, &N, &F, &S);
    float eps = pd__attr_f(n, "epsilon", 1e-5f);
    return pd__cu_batchnorm_bwd(c, wf(gin(n, din, 0)), wf(gin(n, din, 1)), wf(gin(n, din, 2)), cf(dY), cf(in[0]),
                                cf(in[1]), cf(in[3]), cf(in[4]), N, F, S, eps, x && x->training);
}

static pd_status ln_dims(const pd__node *n, pd_tensor *const *in, int64_t *R, int64_t *D) {
    const pd_tensor *X = in[0], *B = opt_in(n, in, 2);
    int r = X->ndim;
    int64_t axis = pd__attr_i(n, "axis", -1);
    if (axis < 0) axis += r;
    if (axis < 0 || axis >= r) return pd__err(PD_ERR_SHAPE, "axis %lld is out of range", (long long)axis);
    *R = prod((int)axis, X->shape);
    *D = prod(r - (int)axis, X->shape + axis);
    if (pd_tensor_numel(in[1]) != *D || (B && pd_tensor_numel(B) != *D))
        return pd__err(PD_ERR_UNSUPPORTED, "LayerNormalization with broadcast scale or bias on CUDA");
    return PD_OK;
}

static pd_status cu_LayerNormalization(pd__cuda_ctx *c, const pd__exec *x, const pd__node *n, pd_tensor *const *in,
                                       pd_tensor *const *out) {
    (void)x;
    int64_t R = 0, D = 0;
    PD_TRY(ln_dims(n, in, &R, &D));
    float eps = pd__attr_f(n, "epsilon", 1e-5f);
    pd_tensor *mo = n->nout > 1 ? out[1] : NULL, *io = n->nout > 2 ? out[2] : NULL;
    return pd__cu_layernorm_fwd(c, wf(out[0]), wf(mo), wf(io), cf(in[0]), cf(in[1]), cf(opt_in(n, in, 2)), R, D, eps);
}

static pd_status cu_LayerNormalization_bwd(pd__cuda_ctx *c, const pd__exec *x, const pd__node *n, pd_tensor *const *in,
                                           pd_tensor *const *out, pd_tensor *const *dout, pd_tensor *const *din) {
    (void)x;
    (void)out;
    if (gout(n, dout, 1) || gout(n, dout, 2))
        return pd__err(PD_ERR_UNSUPPORTED, "gradients of LayerNormalization's Mean and InvStdDev on CUDA");
    const pd_tensor *dY = gout(n, dout, 0);
    if (!dY) return PD_OK;
    int64_t R = 0, D = 0;
    PD_TRY(ln_dims(n, in, &R, &D));
    float eps = pd__attr_f(n, "epsilon", 1e-5f);
    pd_tensor *dB = opt_in(n, in, 2) ? gin(n, din, 2) : NULL;
    return pd__cu_layernorm_bwd(c, wf(gin(n, din, 0)), wf(gin(n, din, 1)), wf(dB), cf(dY), cf(in[0]), cf(in[1]), R, D,
                                eps);
}

/* ---- pooling --------------------------------------------------------------------------------------------- */

static pd_status pool_geom(const pd__node *n, const pd_tensor *X, pd__cu_win *cw, int64_t *NC) {
    pd__win w;
    PD_TRY(pd__win_make(n, PD_WIN_POOL, X->ndim, X->shape, NULL, &w));
    if (w.nsp < 1 || w.nsp > 3) return pd__err(PD_ERR_UNSUPPORTED, "pooling over %d spatial dims on CUDA", w.nsp);
    memset(cw, 0, sizeof *cw);
    cw->nsp = w.nsp;
    for (int i = 0; i < w.nsp; i++) {
        cw->in[i] = w.in[i];
        cw->out[i] = w.out[i];
        cw->k[i] = w.k[i];
        cw->s[i] = w.s[i];
        cw->d[i] = w.d[i];
        cw->pb[i] = w.pb[i];
        cw->pe[i] = w.pe[i];
    }
    *NC = X->shape[0] * X->shape[1];
    return PD_OK;
}

static pd_status cu_MaxPool(pd__cuda_ctx *c, const pd__exec *x, const pd__node *n, pd_tensor *const *in,
                            pd_tensor *const *out) {
    (void)x;
    pd__cu_win w;
    int64_t NC = 0;
    PD_TRY(pool_geom(n, in[0], &w, &NC));
    return pd__cu_maxpool_fwd(c, wf(out[0]), cf(in[0]), NC, &w);
}

static pd_status cu_MaxPool_bwd(pd__cuda_ctx *c, const pd__exec *x, const pd__node *n, pd_tensor *const *in,
                                pd_tensor *const *out, pd_tensor *const *dout, pd_tensor *const *din) {
    (void)x;
    (void)out;
    const pd_tensor *dY = gout(n, dout, 0);
    pd_tensor *dX = gin(n, din, 0);
    if (!dY || !dX) return PD_OK;
    pd__cu_win w;
    int64_t NC = 0;
    PD_TRY(pool_geom(n, in[0], &w, &NC));
    return pd__cu_maxpool_bwd(c, wf(dX), cf(dY), cf(in[0]), NC, &w);
}

static pd_status cu_AveragePool(pd__cuda_ctx *c, const pd__exec *x, const pd__node *n, pd_tensor *const *in,
                                pd_tensor *const *out) {
    (void)x;
    pd__cu_win w;
    int64_t NC = 0;
    PD_TRY(pool_geom(n, in[0], &w, &NC));
    return pd__cu_avgpool_fwd(c, wf(out[0]), cf(in[0]), NC, &w, pd__attr_i(n, "count_include_pad", 0) != 0);
}

static pd_status cu_AveragePool_bwd(pd__cuda_ctx *c, const pd__exec *x, const pd__node *n, pd_tensor *const *in,
                                    pd_tensor *const *out, pd_tensor *const *dout, pd_tensor *const *din) {
    (void)x;
    (void)out;
    const pd_tensor *dY = gout(n, dout, 0);
    pd_tensor *dX = gin(n, din, 0);
    if (!dY || !dX) return PD_OK;
    pd__cu_win w;
    int64_t NC = 0;
    PD_TRY(pool_geom(n, in[0], &w, &NC));
    return pd__cu_avgpool_bwd(c, wf(dX), cf(dY), NC, &w, pd__attr_i(n, "count_include_pad", 0) != 0);
}

static pd_status cu_GlobalAveragePool(pd__cuda_ctx *c, const pd__exec *x, const pd__node *n, pd_tensor *const *in,
                                      pd_tensor *const *out) {
    (void)x;
    (void)n;
    const pd_tensor *X = in[0];
    int64_t R = X->shape[0] * X->shape[1];
    return pd__cu_rowmean_fwd(c, wf(out[0]), cf(X), R, prod(X->ndim - 2, X->shape + 2));
}

static pd_status cu_GlobalAveragePool_bwd(pd__cuda_ctx *c, const pd__exec *x, const pd__node *n, pd_tensor *const *in,
                                          pd_tensor *const *out, pd_tensor *const *dout, pd_tensor *const *din) {
    (void)x;
    (void)out;
    const pd_tensor *dY = gout(n, dout, 0), *X = in[0];
    pd_tensor *dX = gin(n, din, 0);
    if (!dY || !dX) return PD_OK;
    return pd__cu_rowmean_bwd(c, wf(dX), cf(dY), X->shape[0] * X->shape[1], prod(X->ndim - 2, X->shape + 2));
}

/* ---- Softmax, LogSoftmax, SoftmaxCrossEntropyLoss ---------------------------------------------------------- */

static pd_status cu_softmax(pd__cuda_ctx *c, const pd__exec *x, const pd__node *n, pd_tensor *const *in,
                            pd_tensor *const *out) {
    (void)x;
    int64_t outer = 0, len = 0, inner = 0;
    PD_TRY(pd__softmax_split(n, in[0]->ndim, in[0]->shape, &outer, &len, &inner));
    return pd__cu_softmax_fwd(c, wf(out[0]), cf(in[0]), outer, len, inner, n->op == PD_OP_LOG_SOFTMAX);
}

static pd_status cu_softmax_bwd(pd__cuda_ctx *c, const pd__exec *x, const pd__node *n, pd_tensor *const *in,
                                pd_tensor *const *out, pd_tensor *const *dout, pd_tensor *const *din) {
    (void)x;
    const pd_tensor *dY = gout(n, dout, 0);
    pd_tensor *dX = gin(n, din, 0);
    if (!dY || !dX) return PD_OK;
    int64_t outer = 0, len = 0, inner = 0;
    PD_TRY(pd__softmax_split(n, in[0]->ndim, in[0]->shape, &outer, &len, &inner));
    return pd__cu_softmax_bwd(c, wf(dX), cf(dY), cf(out[0]), outer, len, inner, n->op == PD_OP_LOG_SOFTMAX);
}

typedef struct sce {
    int64_t N, C, D, ii;
    bool has_ii, lab64;
    int red;
} sce;

static pd_status sce_opts(const pd__node *n, pd_tensor *const *in, sce *l) {
    const pd_tensor *X = in[0];
    l->N = X->shape[0];
    l->C = X->shape[1];
    l->D = prod(X->ndim - 2, X->shape + 2);
    l->has_ii = pd__attr_get(n, "ignore_index") != NULL;
    l->ii = pd__attr_i(n, "ignore_index", 0);
    l->red = pd__loss_reduction(n);
    l->lab64 = in[1]->dtype == PD_INT64;
    if (l->red < 0) return pd__err(PD_ERR_UNSUPPORTED, "unknown reduction '%s'", pd__attr_s(n, "reduction", ""));
    return PD_OK;
}

static pd_status cu_SoftmaxCrossEntropyLoss(pd__cuda_ctx *c, const pd__exec *x, const pd__node *n,
                                            pd_tensor *const *in, pd_tensor *const *out) {
    (void)x;
    sce l;
    PD_TRY(sce_opts(n, in, &l));
    pd_tensor *lp = n->nout > 1 ? out[1] : NULL;
    return pd__cu_sce_fwd(c, wf(out[0]), wf(lp), cf(in[0]), in[1]->data, l.lab64, cf(opt_in(n, in, 2)), l.N, l.C, l.D,
                          l.has_ii, l.ii, l.red);
}

static pd_status cu_SoftmaxCrossEntropyLoss_bwd(pd__cuda_ctx *c, const pd__exec *x, const pd__node *n,
                                                pd_tensor *const *in, pd_tensor *const *out, pd_tensor *const *dout,
                                                pd_tensor *const *din) {
    (void)x;
    (void)out;
    if (gout(n, dout, 1)) return pd__err(PD_ERR_UNSUPPORTED, "the gradient of the log_prob output on CUDA");
    const pd_tensor *dL = gout(n, dout, 0);
    pd_tensor *dX = gin(n, din, 0);
    if (!dL || !dX) return PD_OK;
    sce l;
    PD_TRY(sce_opts(n, in, &l));
    return pd__cu_sce_bwd(c, wf(dX), cf(dL), cf(in[0]), in[1]->data, l.lab64, cf(opt_in(n, in, 2)), l.N, l.C, l.D,
                          l.has_ii, l.ii, l.red);
}

/* ---- tensor moves: Gather, Transpose, Split, Concat ---------------------------------------------------- */

static pd_status gather_dims(const pd__node *n, pd_tensor *const *in, int64_t *outer, int64_t *len, int64_t *nidx,
                             int64_t *inner) {
    const pd_tensor *t = in[0];
    int axis;
    int64_t ax = pd__attr_i(n, "axis", 0);
    if (!pd__norm_axis(ax, t->ndim, &axis)) return pd__err(PD_ERR_SHAPE, "axis %lld out of range", (long long)ax);
    *outer = prod(axis, t->shape);
    *len = t->shape[axis];
    *inner = prod(t->ndim - axis - 1, t->shape + axis + 1);
    *nidx = pd_tensor_numel(in[1]);
    return PD_OK;
}

static pd_status cu_Gather(pd__cuda_ctx *c, const pd__exec *x, const pd__node *n, pd_tensor *const *in,
                           pd_tensor *const *out) {
    (void)x;
    int64_t outer = 0, len = 0, nidx = 0, inner = 0;
    PD_TRY(gather_dims(n, in, &outer, &len, &nidx, &inner));
    return pd__cu_gather_fwd(c, wf(out[0]), cf(in[0]), in[1]->data, in[1]->dtype == PD_INT64, outer, len, nidx, inner);
}

static pd_status cu_Gather_bwd(pd__cuda_ctx *c, const pd__exec *x, const pd__node *n, pd_tensor *const *in,
                               pd_tensor *const *out, pd_tensor *const *dout, pd_tensor *const *din) {
    (void)x;
    (void)out;
    const pd_tensor *dY = gout(n, dout, 0);
    pd_tensor *dD = gin(n, din, 0);
    if (!dY || !dD) return PD_OK;
    int64_t outer = 0, len = 0, nidx = 0, inner = 0;
    PD_TRY(gather_dims(n, in, &outer, &len, &nidx, &inner));
    return pd__cu_gather_bwd(c, wf(dD), cf(dY), in[1]->data, in[1]->dtype == PD_INT64, outer, len, nidx, inner);
}

static pd_status cu_Transpose(pd__cuda_ctx *c, const pd__exec *x, const pd__node *n, pd_tensor *const *in,
                              pd_tensor *const *out) {
    (void)x;
    int perm[PD_MAX_DIMS];
    int64_t p[PD_MAX_DIMS];
    PD_TRY(pd__transpose_perm(n, in[0]->ndim, perm));
    for (int i = 0; i < in[0]->ndim; i++) p[i] = perm[i];
    return pd__cu_permute(c, wf(out[0]), cf(in[0]), in[0]->ndim, in[0]->shape, p, false);
}

static pd_status cu_Transpose_bwd(pd__cuda_ctx *c, const pd__exec *x, const pd__node *n, pd_tensor *const *in,
                                  pd_tensor *const *out, pd_tensor *const *dout, pd_tensor *const *din) {
    (void)x;
    const pd_tensor *dY = gout(n, dout, 0);
    pd_tensor *dX = gin(n, din, 0);
    if (!dY || !dX) return PD_OK;
    int perm[PD_MAX_DIMS];
    int64_t inv[PD_MAX_DIMS];
    PD_TRY(pd__transpose_perm(n, in[0]->ndim, perm));
    for (int i = 0; i < in[0]->ndim; i++) inv[perm[i]] = i; /* dX's dim j is dY's dim inv[j] */
    return pd__cu_permute(c, wf(dX), cf(dY), out[0]->ndim, out[0]->shape, inv, true);
}

/* outer, inner around `axis` of t */
static void around(const pd_tensor *t, int axis, int64_t *outer, int64_t *inner) {
    *outer = prod(axis, t->shape);
    *inner = prod(t->ndim - axis - 1, t->shape + axis + 1);
}

static pd_status split_axis(const pd__node *n, const pd_tensor *t, int *axis) {
    int64_t ax = pd__attr_i(n, "axis", 0);
    if (!pd__norm_axis(ax, t->ndim, axis)) return pd__err(PD_ERR_SHAPE, "axis %lld out of range", (long long)ax);
    return PD_OK;
}

/* Split: output j is the slab of its own size along the axis, after the previous ones */
static pd_status cu_Split(pd__cuda_ctx *c, const pd__exec *x, const pd__node *n, pd_tensor *const *in,
                          pd_tensor *const *out) {
    (void)x;
    int axis;
    PD_TRY(split_axis(n, in[0], &axis));
    int64_t outer, inner, off = 0, L = in[0]->shape[axis];
    around(in[0], axis, &outer, &inner);
    for (int j = 0; j < n->nout; j++) {
        if (!out[j]) continue;
        int64_t len = out[j]->shape[axis];
        PD_TRY(pd__cu_slab_copy(c, wf(out[j]), len, 0, cf(in[0]), L, off, outer, len, inner, false));
        off += len;
    }
    return PD_OK;
}

static pd_status cu_Split_bwd(pd__cuda_ctx *c, const pd__exec *x, const pd__node *n, pd_tensor *const *in,
                              pd_tensor *const *out, pd_tensor *const *dout, pd_tensor *const *din) {
    (void)x;
    pd_tensor *dX = gin(n, din, 0);
    if (!dX) return PD_OK;
    int axis;
    PD_TRY(split_axis(n, in[0], &axis));
    int64_t outer, inner, off = 0, L = in[0]->shape[axis];
    around(in[0], axis, &outer, &inner);
    for (int j = 0; j < n->nout; j++) {
        if (!out[j]) continue;
        int64_t len = out[j]->shape[axis];
        const pd_tensor *dY = gout(n, dout, j);
        if (dY) PD_TRY(pd__cu_slab_copy(c, wf(dX), L, off, cf(dY), len, 0, outer, len, inner, true));
        off += len;
    }
    return PD_OK;
}

static pd_status cu_Concat(pd__cuda_ctx *c, const pd__exec *x, const pd__node *n, pd_tensor *const *in,
                           pd_tensor *const *out) {
    (void)x;
    int axis;
    int64_t ax = pd__attr_i(n, "axis", 0);
    if (!pd__norm_axis(ax, out[0]->ndim, &axis)) return pd__err(PD_ERR_SHAPE, "axis %lld out of range", (long long)ax);
    int64_t outer, inner, off = 0, L = out[0]->shape[axis];
    around(out[0], axis, &outer, &inner);
    for (int i = 0; i < n->nin; i++) {
        if (!in[i]) continue;
        int64_t len = in[i]->shape[axis];
        PD_TRY(pd__cu_slab_copy(c, wf(out[0]), L, off, cf(in[i]), len, 0, outer, len, inner, false));
        off += len;
    }
    return PD_OK;
}

static pd_status cu_Concat_bwd(pd__cuda_ctx *c, const pd__exec *x, const pd__node *n, pd_tensor *const *in,
                               pd_tensor *const *out, pd_tensor *const *dout, pd_tensor *const *din) {
    (void)x;
    const pd_tensor *dY = gout(n, dout, 0);
    if (!dY) return PD_OK;
    int axis;
    int64_t ax = pd__attr_i(n, "axis", 0);
    if (!pd__norm_axis(ax, out[0]->ndim, &axis)) return pd__err(PD_ERR_SHAPE, "axis %lld out of range", (long long)ax);
    int64_t outer, inner, off = 0, L = out[0]->shape[axis];
    around(out[0], axis, &outer, &inner);
    for (int i = 0; i < n->nin; i++) {
        if (!in[i]) continue;
        int64_t len = in[i]->shape[axis];
        pd_tensor *d = gin(n, din, i);
        if (d) PD_TRY(pd__cu_slab_copy(c, wf(d), len, 0, cf(dY), L, off, outer, len, inner, true));
        off += len;
    }
    return PD_OK;
}

/* ---- the table -------------------------------------------------------------------------------------------- */

typedef struct cu_entry {
    pd__cuda_kernel_fn fwd;
    pd__cuda_grad_fn bwd;
} cu_entry;

#define UNARY {cu_unary, cu_unary_bwd}
#define BINARY {cu_binary, cu_binary_bwd}
#define COPY {cu_copy, cu_copy_bwd}

static const cu_entry cu_table[PD_OP_COUNT] = {
    [PD_OP_GEMM] = {cu_Gemm, cu_Gemm_bwd},
    [PD_OP_MATMUL] = {cu_MatMul, cu_MatMul_bwd},
    [PD_OP_CONV] = {cu_Conv, cu_Conv_bwd},
    [PD_OP_BATCH_NORM] = {cu_BatchNormalization, cu_BatchNormalization_bwd},
    [PD_OP_LAYER_NORM] = {cu_LayerNormalization, cu_LayerNormalization_bwd},
    [PD_OP_MAX_POOL] = {cu_MaxPool, cu_MaxPool_bwd},
    [PD_OP_AVERAGE_POOL] = {cu_AveragePool, cu_AveragePool_bwd},
    [PD_OP_GLOBAL_AVERAGE_POOL] = {cu_GlobalAveragePool, cu_GlobalAveragePool_bwd},
    [PD_OP_SOFTMAX] = {cu_softmax, cu_softmax_bwd},
    [PD_OP_LOG_SOFTMAX] = {cu_softmax, cu_softmax_bwd},
    [PD_OP_SOFTMAX_CE_LOSS] = {cu_SoftmaxCrossEntropyLoss, cu_SoftmaxCrossEntropyLoss_bwd},
    [PD_OP_ADD] = BINARY,
    [PD_OP_SUB] = BINARY,
    [PD_OP_MUL] = BINARY,
    [PD_OP_DIV] = BINARY,
    [PD_OP_SQRT] = UNARY,
    [PD_OP_EXP] = UNARY,
    [PD_OP_LOG] = UNARY,
    [PD_OP_NEG] = UNARY,
    [PD_OP_RECIPROCAL] = UNARY,
    [PD_OP_RELU] = UNARY,
    [PD_OP_LEAKY_RELU] = UNARY,
    [PD_OP_SIGMOID] = UNARY,
    [PD_OP_TANH] = UNARY,
    [PD_OP_GELU] = UNARY,
    [PD_OP_ERF] = UNARY,
    [PD_OP_IDENTITY] = COPY,
    [PD_OP_FLATTEN] = COPY,
    [PD_OP_RESHAPE] = COPY,
    [PD_OP_SQUEEZE] = COPY,
    [PD_OP_UNSQUEEZE] = COPY,
    [PD_OP_TRANSPOSE] = {cu_Transpose, cu_Transpose_bwd},
    [PD_OP_SPLIT] = {cu_Split, cu_Split_bwd},
    [PD_OP_CONCAT] = {cu_Concat, cu_Concat_bwd},
    [PD_OP_GATHER] = {cu_Gather, cu_Gather_bwd},
};

/* Inputs that are not float data: indices and labels (read on the device,
 * int64 or int32) and shape-only inputs (never read). */
static bool int_input(const pd__node *n, int i, bool *device) {
    *device = false;
    switch ((pd_op)n->op) {
    case PD_OP_GATHER:
    case PD_OP_SOFTMAX_CE_LOSS: *device = true; return i == 1;
    case PD_OP_RESHAPE:
    case PD_OP_SPLIT:
    case PD_OP_SQUEEZE:
    case PD_OP_UNSQUEEZE: return i >= 1;
    default: return false;
    }
}

/* the attribute forms the glue handles */
static bool attrs_ok(const pd__node *n) {
    switch ((pd_op)n->op) {
    case PD_OP_CONV: {
        const char *ap = pd__attr_s(n, "auto_pad", "NOTSET");
        if (strcmp(ap, "NOTSET") && strcmp(ap, "VALID")) return false;
        const int64_t *p;
        int np = pd__attr_ints(n, "pads", &p);
        for (int i = 0; i < np / 2; i++)
            if (p[i] != p[np / 2 + i]) return false; /* cuDNN pads symmetrically */
        return n->nout == 1;
    }
    case PD_OP_MAX_POOL: return n->nout == 1; /* no Indices output yet */
    case PD_OP_BATCH_NORM: return n->nout == 1 && !pd__bn_training(n);
    case PD_OP_SOFTMAX_CE_LOSS: return n->nout == 1;
    case PD_OP_GELU: {
        const char *ap = pd__attr_s(n, "approximate", "none");
        return !strcmp(ap, "none") || !strcmp(ap, "tanh");
    }
    default: return true;
    }
}

int pd__cuda_op_kernels(int op) {
    if (op < 0 || op >= PD_OP_COUNT) return 0;
    return (cu_table[op].fwd ? 1 : 0) | (cu_table[op].bwd ? 2 : 0);
}

bool pd__cuda_supports_op(const pd_graph *g, const pd__node *n) {
    if (!n || n->op < 0 || n->op >= PD_OP_COUNT || !cu_table[n->op].fwd || !attrs_ok(n)) return false;
    if (!g) return true;
    for (int i = 0; i < n->nin; i++) {
        if (n->in[i] < 0) continue;
        const pd__tensor *t = &g->tensors[n->in[i]];
        if (t->ndim > PD_MAX_DIMS) return false;
        bool dev;
        if (int_input(n, i, &dev)) {
            if (dev && t->dtype != PD_INT64 && t->dtype != PD_INT32) return false;
        } else if (t->dtype != PD_FLOAT) {
            return false;
        }
    }
    for (int j = 0; j < n->nout; j++)
        if (n->out[j] >= 0 && g->tensors[n->out[j]].dtype != PD_FLOAT) return false;
    if (n->op == PD_OP_CONV && n->nin > 0 && n->in[0] >= 0) {
        int r = g->tensors[n->in[0]].ndim;
        if (r < 3 || r > 5) return false;
    }
    if ((n->op == PD_OP_MAX_POOL || n->op == PD_OP_AVERAGE_POOL) && n->nin > 0 && n->in[0] >= 0) {
        int r = g->tensors[n->in[0]].ndim;
        if (r < 3 || r > 5) return false;
    }
    return true;
}

static const char *cu_name(const pd_graph *g) { return g && g->path ? g->path : "<graph>"; }

pd_status pd__cuda_run(pd__cuda_ctx *c, const pd__exec *x, const pd_graph *g, const pd__node *n, pd_tensor *const *in,
                       pd_tensor *const *out) {
    if (!pd__cuda_supports_op(g, n))
        return pd__err(PD_ERR_UNSUPPORTED, "%s: node '%s' (%s): no CUDA kernel for this form", cu_name(g), n->name,
                       n->op_type);
    pd_status st = cu_table[n->op].fwd(c, x, n, in, out);
    if (st != PD_OK) pd__err_prefix("%s: node '%s' (%s) on CUDA", cu_name(g), n->name, n->op_type);
    return st;
}

pd_status pd__cuda_run_bwd(pd__cuda_ctx *c, const pd__exec *x, const pd_graph *g, const pd__node *n,
                           pd_tensor *const *in, pd_tensor *const *out, pd_tensor *const *dout,
                           pd_tensor *const *din) {
    if (!pd__cuda_supports_op(g, n) || !cu_table[n->op].bwd || !pd__cuda_host_ops[n->op].grad)
        return pd__err(PD_ERR_UNSUPPORTED, "%s: node '%s' (%s): no CUDA backward for this form", cu_name(g), n->name,
                       n->op_type);
    pd_status st = cu_table[n->op].bwd(c, x, n, in, out, dout, din);
    if (st != PD_OK) pd__err_prefix("%s: node '%s' (%s) backward on CUDA", cu_name(g), n->name, n->op_type);
    return st;
}
