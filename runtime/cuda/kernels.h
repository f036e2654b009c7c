/* kernels.h - the launchers the op glue (runtime/cuda/ops.c) calls: plain
 * C functions over device pointers and sizes, implemented in the .cu files.
 * All float32, row-major, queued on the context's stream; a size of 0 is a
 * no-op. "+=" below: the launcher adds into its output (backward kernels),
 * as the CPU backward kernels do. Private to runtime/cuda/.
 */
#ifndef PD_CUDA_KERNELS_H
#define PD_CUDA_KERNELS_H

#include "cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PD_CU_MAXD 8 /* = PD_MAX_DIMS, checked in ops.c */

/* ---- element-wise (elementwise.cu) -------------------------------------------------------------- */

typedef enum pd__cu_unary {
    PD_CU_RELU = 0,
    PD_CU_LEAKY_RELU, /* alpha */
    PD_CU_SIGMOID,
    PD_CU_TANH,
    PD_CU_GELU,      /* erf form */
    PD_CU_GELU_TANH, /* approximate="tanh" */
    PD_CU_ERF,
    PD_CU_EXP,
    PD_CU_LOG,
    PD_CU_SQRT,
    PD_CU_NEG,
    PD_CU_RECIPROCAL,
    PD_CU_IDENTITY
} pd__cu_unary;

/* y = f(x) */
pd_status pd__cu_unary_fwd(pd__cuda_ctx *c, int op, float alpha, float *y, const float *x, int64_t n);
/* dx += dy * f'(x), from x or y = f(x) as each op needs */
pd_status pd__cu_unary_bwd(pd__cuda_ctx *c, int op, float alpha, float *dx, const float *dy, const float *x,
                           const float *y, int64_t n);

typedef enum pd__cu_binary { PD_CU_ADD = 0, PD_CU_SUB, PD_CU_MUL, PD_CU_DIV } pd__cu_binary;

/* numpy broadcasting of two operands to an output of nd dims: sa/sb are the
 * operands' element strides per output dim, 0 where broadcast. */
typedef struct pd__cu_bcast {
    int nd;
    int64_t shape[PD_CU_MAXD];
    int64_t sa[PD_CU_MAXD], sb[PD_CU_MAXD];
} pd__cu_bcast;

/* y = a op b */
pd_status pd__cu_binary_fwd(pd__cuda_ctx *c, int op, float *y, const float *a, const float *b, const pd__cu_bcast *bc);
/* d += alpha * the gradient of operand `which` (0: a, 1: b), summed over the
 * output positions it was broadcast to; nt: its element count. a and b are
 * only read where the op's derivative needs them (may be NULL for Add/Sub). */
pd_status pd__cu_binary_bwd(pd__cuda_ctx *c, int op, int which, float alpha, float *d, const float *dy, const float *a,
                            const float *b, const pd__cu_bcast *bc, int64_t nt);
/* y = alpha * a broadcast to bc's shape (bc->sa: a's strides) */
pd_status pd__cu_broadcast(pd__cuda_ctx *c, float *y, const float *a, float alpha, const pd__cu_bcast *bc);
/* y += alpha * x */
pd_status pd__cu_axpy(pd__cuda_ctx *c, float *y, const float *x, float alpha, int64_t n);
/* y (+)= x transposed: y's dim i is x's dim perm[i] */
pd_status pd__cu_permute(pd__cuda_ctx *c, float *y, const float *x, int nd, const int64_t *xshape, const int64_t *perm,
                         bool accumulate);
/* dst[o, doff + j, i] (+)= src[o, soff + j, i] for o < outer, j < len, i < inner;
 * dst's middle dim has dlen entries, src's slen (Split, Concat and their backward) */
pd_status pd__cu_slab_copy(pd__cuda_ctx *c, float *dst, int64_t dlen, int64_t doff, const float *src, int64_t slen,
                           int64_t soff, int64_t outer, int64_t len, int64_t inner, bool accumulate);
/* Gather along an axis, data (outer, axis_len, inner), indices (nidx) int64 or
 * int32, negative ones counted from the end: y (outer, nidx, inner).
 * Indices out of range give 0 and set the context's error flag. */
pd_status pd__cu_gather_fwd(pd__cuda_ctx *c, float *y, const float *data, const void *idx, bool idx64, int64_t outer,
                            int64_t axis_len, int64_t nidx, int64_t inner);
/* ddata += scatter-add of dy (atomics: the order of the sums is not fixed) */
pd_status pd__cu_gather_bwd(pd__cuda_ctx *c, float *ddata, const float *dy, const void *idx, bool idx64, int64_t outer,
                            int64_t axis_len, int64_t nidx, int64_t inner);

/* ---- matrix products (blas.cu) -------------------------------------------------------------------
 * Row-major C (M, N) = alpha * op(A) (M, K) * op(B) (K, N) + beta * C, batch
 * times with element strides sA, sB, sC between the matrices (0: shared).
 * A stride 0 for C with batch > 1 is refused (the sums would race). */
pd_status pd__cu_gemm(pd__cuda_ctx *c, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                      const float *B, float beta, float *C, int64_t batch, int64_t sA, int64_t sB, int64_t sC);

/* ---- convolution (dnn.cu, cuDNN) -------------------------------------------------------------------
 * X (N, C, in...), W (K, C/group, k...), Y (N, K, out...), 1 to 3 spatial
 * dims, symmetric pads. Algorithms are chosen once per geometry and cached. */
typedef struct pd__cu_conv {
    int nsp;
    int64_t N, C, K, group;
    int64_t in[3], out[3], k[3], s[3], d[3], p[3];
} pd__cu_conv;

pd_status pd__cu_conv_fwd(pd__cuda_ctx *c, const pd__cu_conv *g, float *y, const float *x, const float *w);
pd_status pd__cu_conv_bwd_data(pd__cuda_ctx *c, const pd__cu_conv *g, float *dx, const float *dy,
                               const float *w);     /* dx += */
pd_status pd__cu_conv_bwd_filter(pd__cuda_ctx *c, const pd__cu_conv *g, float *dw, const float *dy,
                                 const float *x);   /* dw += */

/* ---- neural-network kernels (nn.cu) ---------------------------------------------------------------- */

/* y (outer, len, inner) = softmax or log-softmax of x over the middle dim */
pd_status pd__cu_softmax_fwd(pd__cuda_ctx *c, float *y, const float *x, int64_t outer, int64_t len, int64_t inner,
                             bool lg);
/* dx += the gradient from y and dy */
pd_status pd__cu_softmax_bwd(pd__cuda_ctx *c, float *dx, const float *dy, const float *y, int64_t outer, int64_t len,
                             int64_t inner, bool lg);

/* rows (R, D): y = (x - mean) * istd * scale + bias; mean, istd (R) may be NULL */
pd_status pd__cu_layernorm_fwd(pd__cuda_ctx *c, float *y, float *mean, float *istd, const float *x,
                               const float *scale, const float *bias, int64_t R, int64_t D, float eps);
/* dx, dscale, dbias += (each may be NULL) */
pd_status pd__cu_layernorm_bwd(pd__cuda_ctx *c, float *dx, float *dscale, float *dbias, const float *dy,
                               const float *x, const float *scale, int64_t R, int64_t D, float eps);

/* x (N, F, S). train: batch statistics, and rmean/rvar updated in place by
 * PyTorch's rule (momentum mom on the old value, unbiased batch variance);
 * otherwise the running statistics normalize. */
pd_status pd__cu_batchnorm_fwd(pd__cuda_ctx *c, float *y, const float *x, const float *scale, const float *bias,
                               float *rmean, float *rvar, int64_t N, int64_t F, int64_t S, float eps, float mom,
                               bool train);
/* dx, dscale, dbias += (each may be NULL); batch: statistics of x, as the forward in training */
pd_status pd__cu_batchnorm_bwd(pd__cuda_ctx *c, float *dx, float *dscale, float *dbias, const float *dy,
                               const float *x, const float *scale, const float *rmean, const float *rvar, int64_t N,
                               int64_t F, int64_t S, float eps, bool batch);

/* Pooling windows over 1 to 3 spatial dims; pb/pe: pads at the start/end. */
typedef struct pd__cu_win {
    int nsp;
    int64_t in[3], out[3], k[3], s[3], d[3], pb[3], pe[3];
} pd__cu_win;

/* x (NC, in...) -> y (NC, out...) */
pd_status pd__cu_maxpool_fwd(pd__cuda_ctx *c, float *y, const float *x, int64_t NC, const pd__cu_win *w);
pd_status pd__cu_maxpool_bwd(pd__cuda_ctx *c, float *dx, const float *dy, const float *x, int64_t NC,
                             const pd__cu_win *w); /* dx += */
pd_status pd__cu_avgpool_fwd(pd__cuda_ctx *c, float *y, const float *x, int64_t NC, const pd__cu_win *w,
                             bool include_pad);
pd_status pd__cu_avgpool_bwd(pd__cuda_ctx *c, float *dx, const float *dy, int64_t NC, const pd__cu_win *w,
                             bool include_pad); /* dx += */

/* y (R) = mean of each row of x (R, S) (GlobalAveragePool); bwd: dx += dy / S */
pd_status pd__cu_rowmean_fwd(pd__cuda_ctx *c, float *y, const float *x, int64_t R, int64_t S);
pd_status pd__cu_rowmean_bwd(pd__cuda_ctx *c, float *dx, const float *dy, int64_t R, int64_t S);
/* y (N, C, S) += b[c]; db[c] += sum over n, s of dy */
pd_status pd__cu_channel_bias_add(pd__cuda_ctx *c, float *y, const float *b, int64_t N, int64_t C, int64_t S);
pd_status pd__cu_channel_bias_grad(pd__cuda_ctx *c, float *db, const float *dy, int64_t N, int64_t C, int64_t S);

/* SoftmaxCrossEntropyLoss on scores x (N, C, D), labels (N, D) int64 or
 * int32, weights w (C) or NULL, red 0 none (loss (N, D)), 1 sum, 2 mean;
 * logp (N, C, D) may be NULL. Labels out of range set the error flag. */
pd_status pd__cu_sce_fwd(pd__cuda_ctx *c, float *loss, float *logp, const float *x, const void *labels, bool lab64,
                         const float *w, int64_t N, int64_t C, int64_t D, bool has_ii, int64_t ii, int red);
/* dx += d loss / dx for the loss gradient dloss (shape of loss) */
pd_status pd__cu_sce_bwd(pd__cuda_ctx *c, float *dx, const float *dloss, const float *x, const void *labels,
                         bool lab64, const float *w, int64_t N, int64_t C, int64_t D, bool has_ii, int64_t ii,
                         int red);

/* ---- context internals the glue needs (context.cu) ------------------------------------------------ */

/* Reads and clears the context's device error flag (indices or labels out of
 * range in a kernel): waits for the stream. */
pd_status pd__cu_check_flag(pd__cuda_ctx *c, const char *what);

#ifdef __cplusplus
}
#endif

#endif
