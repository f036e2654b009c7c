/* nn.cu - own kernels of the neural-network ops: Softmax/LogSoftmax,
 * LayerNormalization, BatchNormalization (batch or running statistics, the
 * running update of a training session), Max/Average/GlobalAverage pooling,
 * per-channel bias, SoftmaxCrossEntropyLoss and the session's cross-entropy
 * loss (runtime/loss.c). Forward and backward side by side; backward
 * kernels add into their outputs. Statistics are summed in double, as the
 * CPU kernels do.
 *
 * How it works: docs/INTERNALS.md, "runtime/cuda/nn.cu".
 */
#include "internal.cuh"

#include <math.h>
#include <string.h>

/* ---- Softmax, LogSoftmax: one thread per (outer, inner) row ------------------------------------- */

__global__ static void k_softmax(float *y, const float *x, int64_t outer, int64_t len, int64_t inner, bool lg) {
    PD_CU_FOR(r, outer * inner) {
        int64_t o = r / inner, i = r % inner;
        const float *xp = x + o * len * inner + i;
        float *yp = y + o * len * inner + i;
        float mx = -INFINITY;
        for (int64_t j = 0; j < len; j++) mx = fmaxf(mx, xp[j * inner]);
        double s = 0;
        for (int64_t j = 0; j < len; j++) s += (double)expf(xp[j * inner] - mx);
        if (lg) {
            float ls = (float)log(s);
            for (int64_t j = 0; j < len; j++) yp[j * inner] = xp[j * inner] - mx - ls;
        } else {
            float inv = (float)(1.0 / s);
            for (int64_t j = 0; j < len; j++) yp[j * inner] = expf(xp[j * inner] - mx) * inv;
        }
    }
}

/* softmax: dx = y (dy - sum dy y); log-softmax: dx = dy - exp(y) sum dy */
__global__ static void k_softmax_bwd(float *dx, const float *dy, const float *y, int64_t outer, int64_t len,
                                     int64_t inner, bool lg) {
    PD_CU_FOR(r, outer * inner) {
        int64_t base = (r / inner) * len * inner + r % inner;
        double s = 0;
        for (int64_t j = 0; j < len; j++) {
            int64_t k = base + j * inner;
            s += lg ? (double)dy[k] : (double)dy[k] * y[k];
        }
        float fs = (float)s;
        for (int64_t j = 0; j < len; j++) {
            int64_t k = base + j * inner;
            dx[k] += lg ? dy[k] - expf(y[k]) * fs : y[k] * (dy[k] - fs);
        }
    }
}

/* The last axis (inner 1) of rows longer than a warp: one block per row,
 * the same arithmetic (max, e^(x - max) in float summed in double). */
__global__ static void k_softmax_rows(float *y, const float *x, int64_t len, bool lg) {
    __shared__ double shd[32];
    __shared__ float shf[32];
    const float *xp = x + (int64_t)blockIdx.x * len;
    float *yp = y + (int64_t)blockIdx.x * len;
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x) mx = fmaxf(mx, xp[j]);
    mx = pd__cu_block_max(mx, shf);
    double s = 0;
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x) s += (double)expf(xp[j] - mx);
    s = pd__cu_block_sum(s, shd);
    if (lg) {
        float ls = (float)log(s);
        for (int64_t j = threadIdx.x; j < len; j += blockDim.x) yp[j] = xp[j] - mx - ls;
    } else {
        float inv = (float)(1.0 / s);
        for (int64_t j = threadIdx.x; j < len; j += blockDim.x) yp[j] = expf(xp[j] - mx) * inv;
    }
}

__global__ static void k_softmax_rows_bwd(float *dx, const float *dy, const float *y, int64_t len, bool lg) {
    __shared__ double shd[32];
    int64_t base = (int64_t)blockIdx.x * len;
    double s = 0;
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x)
        s += lg ? (double)dy[base + j] : (double)dy[base + j] * y[base + j];
    float fs = (float)pd__cu_block_sum(s, shd);
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
        int64_t k = base + j;
        dx[k] += lg ? dy[k] - expf(y[k]) * fs : y[k] * (dy[k] - fs);
    }
}

/* rows of the last axis longer than a warp: a block each; else a thread each */
static bool pd__cu_softmax_by_block(int64_t outer, int64_t len, int64_t inner) {
    return inner == 1 && len > 32 && outer <= INT32_MAX;
}

extern "C" pd_status pd__cu_softmax_fwd(pd__cuda_ctx *c, float *y, const float *x, int64_t outer, int64_t len,
                                        int64_t inner, bool lg) {
    if (outer * inner <= 0 || len <= 0) return PD_OK;
    if (pd__cu_softmax_by_block(outer, len, inner))
        k_softmax_rows<<<(unsigned)outer, pd__cu_row_threads(len), 0, c->stream>>>(y, x, len, lg);
    else
        k_softmax<<<pd__cu_blocks(outer * inner), PD_CU_THREADS, 0, c->stream>>>(y, x, outer, len, inner, lg);
    PD_CU_LAUNCHED();
    return PD_OK;
}

extern "C" pd_status pd__cu_softmax_bwd(pd__cuda_ctx *c, float *dx, const float *dy, const float *y, int64_t outer,
                                        int64_t len, int64_t inner, bool lg) {
    if (outer * inner <= 0 || len <= 0) return PD_OK;
    if (pd__cu_softmax_by_block(outer, len, inner))
        k_softmax_rows_bwd<<<(unsigned)outer, pd__cu_row_threads(len), 0, c->stream>>>(dx, dy, y, len, lg);
    else
        k_softmax_bwd<<<pd__cu_blocks(outer * inner), PD_CU_THREADS, 0, c->stream>>>(dx, dy, y, outer, len, inner,
                                                                                     lg);
    PD_CU_LAUNCHED();
    return PD_OK;
}

/* ---- LayerNormalization: one block per row ------------------------------------------------------ */

__global__ static void k_layernorm(float *y, float *mean, float *istd, const float *x, const float *scale,
                                   const float *bias, int64_t D, float eps) {
    __shared__ double sh[32];
    const float *xr = x + (int64_t)blockIdx.x * D;
    float *yr = y ? y + (int64_t)blockIdx.x * D : NULL;
    double s = 0;
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) s += xr[j];
    double mu = pd__cu_block_sum(s, sh) / (double)D;
    double v = 0;
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) v += (xr[j] - mu) * (xr[j] - mu);
    double var = pd__cu_block_sum(v, sh) / (double)D;
    float is = (float)(1.0 / sqrt(var + (double)eps)), fm = (float)mu;
    for (int64_t j = threadIdx.x; y && j < D; j += blockDim.x) /* y NULL: the statistics alone */
        yr[j] = (xr[j] - fm) * is * scale[j] + (bias ? bias[j] : 0.0f);
    if (threadIdx.x == 0) {
        if (mean) mean[blockIdx.x] = fm;
        if (istd) istd[blockIdx.x] = is;
    }
}

/* dx = istd (g - mean g - xhat mean(g xhat)), g = dy scale */
__global__ static void k_layernorm_bwd_x(float *dx, const float *dy, const float *x, const float *scale, int64_t D,
                                         float eps) {
    __shared__ double sh[32];
    int64_t off = (int64_t)blockIdx.x * D;
    const float *xr = x + off, *gr = dy + off;
    double s = 0;
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) s += xr[j];
    double mu = pd__cu_block_sum(s, sh) / (double)D;
    double v = 0;
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) v += (xr[j] - mu) * (xr[j] - mu);
    double is = 1.0 / sqrt(pd__cu_block_sum(v, sh) / (double)D + (double)eps);
    double sg = 0, sgx = 0;
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
        double g = (double)gr[j] * scale[j], xh = (xr[j] - mu) * is;
        sg += g;
        sgx += g * xh;
    }
    sg = pd__cu_block_sum(sg, sh) / (double)D;
    sgx = pd__cu_block_sum(sgx, sh) / (double)D;
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
        double g = (double)gr[j] * scale[j], xh = (xr[j] - mu) * is;
        dx[off + j] += (float)(is * (g - sg - xh * sgx));
    }
}

/* per row statistics first (mean, istd), then per column sums over rows:
 * blockIdx.y sums chunk y of L rows into part[y][j] (dscale's) and
 * part[S + y][j] (dbias'), k_layernorm_bwd_sum adds the chunks in order. */
__global__ static void k_layernorm_bwd_p(double *part, const float *dy, const float *x, const float *mean,
                                         const float *istd, int64_t R, int64_t D, int64_t L) {
    int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, r0 = (int64_t)blockIdx.y * L;
    int64_t r1 = r0 + L < R ? r0 + L : R, S = gridDim.y;
    if (j >= D) return;
    double ss = 0, sb = 0;
    for (int64_t r = r0; r < r1; r++) {
        float g = dy[r * D + j];
        ss += (double)g * ((x[r * D + j] - mean[r]) * istd[r]);
        sb += g;
    }
    part[(int64_t)blockIdx.y * D + j] = ss;
    part[(S + blockIdx.y) * D + j] = sb;
}

__global__ static void k_layernorm_bwd_sum(float *dscale, float *dbias, const double *part, int64_t D, int64_t S) {
    PD_CU_FOR(j, D) {
        double ss = 0, sb = 0;
        for (int64_t y = 0; y < S; y++) {
            ss += part[y * D + j];
            sb += part[(S + y) * D + j];
        }
        if (dscale) dscale[j] += (float)ss;
        if (dbias) dbias[j] += (float)sb;
    }
}

extern "C" pd_status pd__cu_layernorm_fwd(pd__cuda_ctx *c, float *y, float *mean, float *istd, const float *x,
                                          const float *scale, const float *bias, int64_t R, int64_t D, float eps) {
    if (R <= 0 || D <= 0) return PD_OK;
    if (R > INT32_MAX) return pd__err(PD_ERR_UNSUPPORTED, "LayerNormalization over %lld rows", (long long)R);
    k_layernorm<<<(unsigned)R, PD_CU_THREADS, 0, c->stream>>>(y, mean, istd, x, scale, bias, D, eps);
    PD_CU_LAUNCHED();
    return PD_OK;
}

extern "C" pd_status pd__cu_layernorm_bwd(pd__cuda_ctx *c, float *dx, float *dscale, float *dbias, const float *dy,
                                          const float *x, const float *scale, int64_t R, int64_t D, float eps) {
    if (R <= 0 || D <= 0) return PD_OK;
    if (R > INT32_MAX) return pd__err(PD_ERR_UNSUPPORTED, "LayerNormalization over %lld rows", (long long)R);
    if (dx) {
        k_layernorm_bwd_x<<<(unsigned)R, PD_CU_THREADS, 0, c->stream>>>(dx, dy, x, scale, D, eps);
        PD_CU_LAUNCHED();
    }
    if (dscale || dbias) {
        void *st;
        PD_TRY(pd__cuda_alloc(c, sizeof(float) * 2 * (size_t)R, &st));
        float *mean = (float *)st, *istd = mean + R;
        /* the statistics again, through the forward kernel without its output */
        int64_t S = R / 32 < 1 ? 1 : R / 32;
        if (S > ((int64_t)1 << 18) / D) S = ((int64_t)1 << 18) / D < 1 ? 1 : ((int64_t)1 << 18) / D;
        if (S > 65535) S = 65535;
        void *part;
        pd_status s = pd__cuda_alloc(c, sizeof(double) * 2 * (size_t)(S * D), &part);
        if (s == PD_OK) {
            k_layernorm<<<(unsigned)R, PD_CU_THREADS, 0, c->stream>>>(NULL, mean, istd, x, scale, NULL, D, eps);
            dim3 grid((unsigned)((D + PD_CU_THREADS - 1) / PD_CU_THREADS), (unsigned)S);
            k_layernorm_bwd_p<<<grid, PD_CU_THREADS, 0, c->stream>>>((double *)part, dy, x, mean, istd, R, D,
                                                                     (R + S - 1) / S);
            k_layernorm_bwd_sum<<<pd__cu_blocks(D), PD_CU_THREADS, 0, c->stream>>>(dscale, dbias,
                                                                                   (const double *)part, D, S);
            pd__cuda_free(c, part);
        }
        pd__cuda_free(c, st);
        PD_TRY(s);
        PD_CU_LAUNCHED();
    }
    return PD_OK;
}

/* ---- BatchNormalization: per channel sums in chunks, then element-wise -------------------------
 * x (N, F, S): channel f is N runs of S values, stride F*S between them.
 * A channel's M = N*S values are split into P chunks (enough blocks to fill
 * the device: early ResNet layers have 64 channels of 400k values); block
 * (f, p) sums its chunk in double, a per-channel kernel adds the P partial
 * sums in order (the same result run after run) and makes the channel's
 * coefficients, and an element-wise kernel applies them. Statistics are the
 * shifted sums (x - x0, x0 the channel's first value) in double: the mean
 * and biased variance of the CPU kernel's two passes to double rounding. */

__device__ static inline int64_t cu_bn_idx(int64_t i, int64_t f, int64_t F, int64_t S) {
    return ((i / S) * F + f) * S + i % S;
}

/* block (f, p): sums of (x - x0) and (x - x0)^2 over chunk p into part[(f*P + p)*2 + 0, 1] */
__global__ static void k_bn_stats_part(double *part, const float *x, int64_t F, int64_t S, int64_t M, int64_t L) {
    __shared__ double sh[32];
    int64_t f = blockIdx.x, p = blockIdx.y, i0 = p * L, i1 = i0 + L < M ? i0 + L : M;
    double x0 = x[cu_bn_idx(0, f, F, S)], s1 = 0, s2 = 0;
    for (int64_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) {
        double d = x[cu_bn_idx(i, f, F, S)] - x0;
        s1 += d;
        s2 += d * d;
    }
    s1 = pd__cu_block_sum(s1, sh);
    s2 = pd__cu_block_sum(s2, sh);
    if (threadIdx.x == 0) {
        part[(f * gridDim.y + p) * 2] = s1;
        part[(f * gridDim.y + p) * 2 + 1] = s2;
    }
}

/* per channel: the statistics (batch: from the parts; else the running
 * ones), the running update of a training forward, and st[f] = {mean,
 * 1/sqrt(var + eps)} */
__global__ static void k_bn_stats(double *st, const double *part, const float *x, float *rmean, float *rvar,
                                  int64_t F, int64_t S, int64_t M, int64_t P, float eps, float mom, bool batch,
                                  bool update) {
    PD_CU_FOR(f, F) {
        double mu, var;
        if (batch) {
            double s1 = 0, s2 = 0;
            for (int64_t p = 0; p < P; p++) {
                s1 += part[(f * P + p) * 2];
                s2 += part[(f * P + p) * 2 + 1];
            }
            double m1 = s1 / (double)M;
            mu = x[cu_bn_idx(0, f, F, S)] + m1;
            var = s2 / (double)M - m1 * m1;
            if (var < 0) var = 0;
        } else {
            mu = rmean[f];
            var = rvar[f];
        }
        st[2 * f] = mu;
        st[2 * f + 1] = 1.0 / sqrt(var + (double)eps);
        if (update) {
            /* one value per feature has no unbiased variance: the biased one (0) stands in */
            double unb = M > 1 ? (double)M / (double)(M - 1) : 1.0;
            rmean[f] = (float)(mom * (double)rmean[f] + (1.0 - mom) * mu);
            rvar[f] = (float)(mom * (double)rvar[f] + (1.0 - mom) * var * unb);
        }
    }
}

__global__ static void k_bn_apply(float *y, const float *x, const float *scale, const float *bias, const double *st,
                                  int64_t F, int64_t S, int64_t n) {
    PD_CU_FOR(k, n) {
        int64_t f = (k / S) % F;
        double a = (double)scale[f] * st[2 * f + 1];
        float fa = (float)a, fb = (float)((double)bias[f] - st[2 * f] * a);
        y[k] = x[k] * fa + fb;
    }
}

/* block (f, p): sums of dy and dy (x - mean) istd over chunk p */
__global__ static void k_bn_bwd_part(double *part, const float *dy, const float *x, const double *st, int64_t F,
                                     int64_t S, int64_t M, int64_t L) {
    __shared__ double sh[32];
    int64_t f = blockIdx.x, p = blockIdx.y, i0 = p * L, i1 = i0 + L < M ? i0 + L : M;
    double mu = st[2 * f], is = st[2 * f + 1], sdy = 0, sdyx = 0;
    for (int64_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) {
        int64_t k = cu_bn_idx(i, f, F, S);
        double g = dy[k];
        sdy += g;
        sdyx += g * (x[k] - mu) * is;
    }
    sdy = pd__cu_block_sum(sdy, sh);
    sdyx = pd__cu_block_sum(sdyx, sh);
    if (threadIdx.x == 0) {
        part[(f * gridDim.y + p) * 2] = sdy;
        part[(f * gridDim.y + p) * 2 + 1] = sdyx;
    }
}

/* per channel: the parts added into sums[f] = {sdy, sdyx}, dscale and dbias */
__global__ static void k_bn_bwd_sums(double *sums, float *dscale, float *dbias, const double *part, int64_t F,
                                     int64_t P) {
    PD_CU_FOR(f, F) {
        double sdy = 0, sdyx = 0;
        for (int64_t p = 0; p < P; p++) {
            sdy += part[(f * P + p) * 2];
            sdyx += part[(f * P + p) * 2 + 1];
        }
        sums[2 * f] = sdy;
        sums[2 * f + 1] = sdyx;
        if (dscale) dscale[f] += (float)sdyx;
        if (dbias) dbias[f] += (float)sdy;
    }
}

__global__ static void k_bn_bwd_apply(float *dx, const float *dy, const float *x, const float *scale, const double *st,
                                      const double *sums, int64_t F, int64_t S, int64_t M, int64_t n, bool batch) {
    PD_CU_FOR(k, n) {
        int64_t f = (k / S) % F;
        double mu = st[2 * f], is = st[2 * f + 1], a = (double)scale[f] * is, g = dy[k];
        if (batch) g -= (sums[2 * f] + (x[k] - mu) * is * sums[2 * f + 1]) / (double)M;
        dx[k] += (float)(a * g);
    }
}

/* Chunks per channel: about 2048 blocks in all, at least 1024 values a chunk. */
static int64_t cu_bn_chunks(int64_t F, int64_t M) {
    int64_t P = (2048 + F - 1) / F, most = M / 1024;
    if (P > most) P = most;
    if (P > 65535) P = 65535;
    return P < 1 ? 1 : P;
}

/* scratch: st (2F), the parts (2FP) and, backward, the sums (2F) */
static pd_status cu_bn_scratch(pd__cuda_ctx *c, int64_t F, int64_t P, double **st, double **part, double **sums) {
    void *buf;
    PD_TRY(pd__cuda_alloc(c, sizeof(double) * (size_t)(4 * F + 2 * F * P), &buf));
    *st = (double *)buf;
    *sums = *st + 2 * F;
    *part = *sums + 2 * F;
    return PD_OK;
}

/* st for batch statistics (from x) or the running ones */
static void cu_bn_launch_stats(pd__cuda_ctx *c, double *st, double *part, const float *x, float *rmean, float *rvar,
                               int64_t F, int64_t S, int64_t M, int64_t P, float eps, float mom, bool batch,
                               bool update) {
    if (batch) {
        dim3 grid((unsigned)F, (unsigned)P);
        k_bn_stats_part<<<grid, PD_CU_THREADS, 0, c->stream>>>(part, x, F, S, M, (M + P - 1) / P);
    }
    k_bn_stats<<<pd__cu_blocks(F), PD_CU_THREADS, 0, c->stream>>>(st, part, x, rmean, rvar, F, S, M, P, eps, mom,
                                                                   batch, update);
}

extern "C" pd_status pd__cu_batchnorm_fwd(pd__cuda_ctx *c, float *y, const float *x, const float *scale,
                                          const float *bias, float *rmean, float *rvar, int64_t N, int64_t F,
                                          int64_t S, float eps, float mom, bool train) {
    int64_t M = N * S;
    if (F <= 0 || M <= 0) return PD_OK;
    if (F > INT32_MAX) return pd__err(PD_ERR_UNSUPPORTED, "BatchNormalization of %lld channels", (long long)F);
    int64_t P = cu_bn_chunks(F, M);
    double *st, *part, *sums;
    PD_TRY(cu_bn_scratch(c, F, P, &st, &part, &sums));
    cu_bn_launch_stats(c, st, part, x, rmean, rvar, F, S, M, P, eps, mom, train, train);
    k_bn_apply<<<pd__cu_blocks(F * M), PD_CU_THREADS, 0, c->stream>>>(y, x, scale, bias, st, F, S, F * M);
    cudaError_t e = cudaGetLastError();
    pd__cuda_free(c, st); /* stream-ordered: reused only by later work */
    if (e != cudaSuccess) return pd__cuda_fail_rt(e, "k_bn_apply", __FILE__, __LINE__);
    return PD_OK;
}

extern "C" pd_status pd__cu_batchnorm_bwd(pd__cuda_ctx *c, float *dx, float *dscale, float *dbias, const float *dy,
                                          const float *x, const float *scale, const float *rmean, const float *rvar,
                                          int64_t N, int64_t F, int64_t S, float eps, bool batch) {
    int64_t M = N * S;
    if (F <= 0 || M <= 0) return PD_OK;
    if (F > INT32_MAX) return pd__err(PD_ERR_UNSUPPORTED, "BatchNormalization of %lld channels", (long long)F);
    int64_t P = cu_bn_chunks(F, M);
    double *st, *part, *sums;
    PD_TRY(cu_bn_scratch(c, F, P, &st, &part, &sums));
    /* the running statistics are read, never written, here */
    cu_bn_launch_stats(c, st, part, x, (float *)rmean, (float *)rvar, F, S, M, P, eps, 0.0f, batch, false);
    dim3 grid((unsigned)F, (unsigned)P);
    k_bn_bwd_part<<<grid, PD_CU_THREADS, 0, c->stream>>>(part, dy, x, st, F, S, M, (M + P - 1) / P);
    k_bn_bwd_sums<<<pd__cu_blocks(F), PD_CU_THREADS, 0, c->stream>>>(sums, dscale, dbias, part, F, P);
    if (dx)
        k_bn_bwd_apply<<<pd__cu_blocks(F * M), PD_CU_THREADS, 0, c->stream>>>(dx, dy, x, scale, st, sums, F, S, M,
                                                                              F * M, batch);
    cudaError_t e = cudaGetLastError();
    pd__cuda_free(c, st);
    if (e != cudaSuccess) return pd__cuda_fail_rt(e, "k_bn_bwd_apply", __FILE__, __LINE__);
    return PD_OK;
}

/* ---- pooling: one thread per output element ------------------------------------------------------
 * The window is padded to 3 spatial dims on the left (size 1, kernel 1). */

static pd__cu_win cu_win3(const pd__cu_win *w) {
    pd__cu_win v;
    memset(&v, 0, sizeof v);
    v.nsp = 3;
    int sh = 3 - w->nsp;
    for (int i = 0; i < 3; i++) {
        v.in[i] = v.out[i] = v.k[i] = v.s[i] = v.d[i] = 1;
    }
    for (int i = 0; i < w->nsp; i++) {
        v.in[sh + i] = w->in[i];
        v.out[sh + i] = w->out[i];
        v.k[sh + i] = w->k[i];
        v.s[sh + i] = w->s[i];
        v.d[sh + i] = w->d[i];
        v.pb[sh + i] = w->pb[i];
        v.pe[sh + i] = w->pe[i];
    }
    return v;
}

static int64_t cu_win_outs(const pd__cu_win *w) { return w->out[0] * w->out[1] * w->out[2]; }
static int64_t cu_win_ins(const pd__cu_win *w) { return w->in[0] * w->in[1] * w->in[2]; }

/* mode 0: max (dx: route dy to the first maximum); 1: average */
__global__ static void k_pool(float *y, const float *x, pd__cu_win w, int64_t n, int mode, bool incl) {
    PD_CU_FOR(e, n) {
        int64_t o2 = e % w.out[2], o1 = (e / w.out[2]) % w.out[1], o0 = (e / (w.out[2] * w.out[1])) % w.out[0];
        int64_t nc = e / (w.out[0] * w.out[1] * w.out[2]);
        const float *xp = x + nc * w.in[0] * w.in[1] * w.in[2];
        float best = -INFINITY, sum = 0.0f;
        int64_t cnt = 1;
        int64_t o[3] = {o0, o1, o2};
        for (int i = 0; i < 3; i++) { /* the divisor: taps inside X (or its declared pads) per dim */
            int64_t ci = 0;
            for (int64_t t = 0; t < w.k[i]; t++) {
                int64_t p = o[i] * w.s[i] - w.pb[i] + t * w.d[i];
                ci += incl ? (p >= -w.pb[i] && p < w.in[i] + w.pe[i]) : (p >= 0 && p < w.in[i]);
            }
            cnt *= ci;
        }
        for (int64_t t0 = 0; t0 < w.k[0]; t0++) {
            int64_t p0 = o0 * w.s[0] - w.pb[0] + t0 * w.d[0];
            if (p0 < 0 || p0 >= w.in[0]) continue;
            for (int64_t t1 = 0; t1 < w.k[1]; t1++) {
                int64_t p1 = o1 * w.s[1] - w.pb[1] + t1 * w.d[1];
                if (p1 < 0 || p1 >= w.in[1]) continue;
                for (int64_t t2 = 0; t2 < w.k[2]; t2++) {
                    int64_t p2 = o2 * w.s[2] - w.pb[2] + t2 * w.d[2];
                    if (p2 < 0 || p2 >= w.in[2]) continue;
                    float v = xp[(p0 * w.in[1] + p1) * w.in[2] + p2];
                    best = fmaxf(best, v);
                    sum += v;
                }
            }
        }
        y[e] = mode == 0 ? best : (cnt > 0 ? sum / (float)cnt : 0.0f);
    }
}

__global__ static void k_pool_bwd(float *dx, const float *dy, const float *x, pd__cu_win w, int64_t n, int mode,
                                  bool incl) {
    PD_CU_FOR(e, n) {
        int64_t o2 = e % w.out[2], o1 = (e / w.out[2]) % w.out[1], o0 = (e / (w.out[2] * w.out[1])) % w.out[0];
        int64_t nc = e / (w.out[0] * w.out[1] * w.out[2]), base = nc * w.in[0] * w.in[1] * w.in[2];
        int64_t cnt = 1, arg = -1;
        int64_t o[3] = {o0, o1, o2};
        for (int i = 0; i < 3; i++) {
            int64_t ci = 0;
            for (int64_t t = 0; t < w.k[i]; t++) {
                int64_t p = o[i] * w.s[i] - w.pb[i] + t * w.d[i];
                ci += incl ? (p >= -w.pb[i] && p < w.in[i] + w.pe[i]) : (p >= 0 && p < w.in[i]);
            }
            cnt *= ci;
        }
        float best = -INFINITY, g = dy[e], share = cnt > 0 ? g / (float)cnt : 0.0f;
        for (int64_t t0 = 0; t0 < w.k[0]; t0++) {
            int64_t p0 = o0 * w.s[0] - w.pb[0] + t0 * w.d[0];
            if (p0 < 0 || p0 >= w.in[0]) continue;
            for (int64_t t1 = 0; t1 < w.k[1]; t1++) {
                int64_t p1 = o1 * w.s[1] - w.pb[1] + t1 * w.d[1];
                if (p1 < 0 || p1 >= w.in[1]) continue;
                for (int64_t t2 = 0; t2 < w.k[2]; t2++) {
                    int64_t p2 = o2 * w.s[2] - w.pb[2] + t2 * w.d[2];
                    if (p2 < 0 || p2 >= w.in[2]) continue;
                    int64_t k = base + (p0 * w.in[1] + p1) * w.in[2] + p2;
                    if (mode == 0) {
                        if (arg < 0 || x[k] > best) {
                            best = x[k];
                            arg = k;
                        }
                    } else {
                        atomicAdd(&dx[k], share);
                    }
                }
            }
        }
        if (mode == 0 && arg >= 0) atomicAdd(&dx[arg], g);
    }
}

static pd_status cu_pool(pd__cuda_ctx *c, float *y, const float *x, int64_t NC, const pd__cu_win *w, int mode,
                         bool incl) {
    if (w->nsp < 1 || w->nsp > 3) return pd__err(PD_ERR_UNSUPPORTED, "pooling over %d spatial dims", w->nsp);
    pd__cu_win v = cu_win3(w);
    int64_t n = NC * cu_win_outs(&v);
    if (n <= 0 || cu_win_ins(&v) <= 0) return PD_OK;
    k_pool<<<pd__cu_blocks(n), PD_CU_THREADS, 0, c->stream>>>(y, x, v, n, mode, incl);
    PD_CU_LAUNCHED();
    return PD_OK;
}

static pd_status cu_pool_bwd(pd__cuda_ctx *c, float *dx, const float *dy, const float *x, int64_t NC,
                             const pd__cu_win *w, int mode, bool incl) {
    if (w->nsp < 1 || w->nsp > 3) return pd__err(PD_ERR_UNSUPPORTED, "pooling over %d spatial dims", w->nsp);
    pd__cu_win v = cu_win3(w);
    int64_t n = NC * cu_win_outs(&v);
    if (n <= 0 || cu_win_ins(&v) <= 0) return PD_OK;
    k_pool_bwd<<<pd__cu_blocks(n), PD_CU_THREADS, 0, c->stream>>>(dx, dy, x, v, n, mode, incl);
    PD_CU_LAUNCHED();
    return PD_OK;
}

extern "C" pd_status pd__cu_maxpool_fwd(pd__cuda_ctx *c, float *y, const float *x, int64_t NC, const pd__cu_win *w) {
    return cu_pool(c, y, x, NC, w, 0, false);
}
extern "C" pd_status pd__cu_maxpool_bwd(pd__cuda_ctx *c, float *dx, const float *dy, const float *x, int64_t NC,
                                        const pd__cu_win *w) {
    return cu_pool_bwd(c, dx, dy, x, NC, w, 0, false);
}
extern "C" pd_status pd__cu_avgpool_fwd(pd__cuda_ctx *c, float *y, const float *x, int64_t NC, const pd__cu_win *w,
                                        bool include_pad) {
    return cu_pool(c, y, x, NC, w, 1, include_pad);
}
extern "C" pd_status pd__cu_avgpool_bwd(pd__cuda_ctx *c, float *dx, const float *dy, int64_t NC, const pd__cu_win *w,
                                        bool include_pad) {
    return cu_pool_bwd(c, dx, dy, NULL, NC, w, 1, include_pad);
}

/* ---- rows and channels ------------------------------------------------------------------------------ */

__global__ static void k_rowmean(float *y, const float *x, int64_t S) {
    __shared__ double sh[32];
    const float *xr = x + (int64_t)blockIdx.x * S;
    double s = 0;
    for (int64_t j = threadIdx.x; j < S; j += blockDim.x) s += xr[j];
    s = pd__cu_block_sum(s, sh);
    if (threadIdx.x == 0) y[blockIdx.x] = (float)(s / (double)S);
}

__global__ static void k_rowmean_bwd(float *dx, const float *dy, int64_t S, int64_t n) {
    PD_CU_FOR(i, n) dx[i] += dy[i / S] / (float)S;
}

extern "C" pd_status pd__cu_rowmean_fwd(pd__cuda_ctx *c, float *y, const float *x, int64_t R, int64_t S) {
    if (R <= 0 || S <= 0) return PD_OK;
    if (R > INT32_MAX) return pd__err(PD_ERR_UNSUPPORTED, "a mean over %lld rows", (long long)R);
    k_rowmean<<<(unsigned)R, PD_CU_THREADS, 0, c->stream>>>(y, x, S);
    PD_CU_LAUNCHED();
    return PD_OK;
}

extern "C" pd_status pd__cu_rowmean_bwd(pd__cuda_ctx *c, float *dx, const float *dy, int64_t R, int64_t S) {
    if (R <= 0 || S <= 0) return PD_OK;
    k_rowmean_bwd<<<pd__cu_blocks(R * S), PD_CU_THREADS, 0, c->stream>>>(dx, dy, S, R * S);
    PD_CU_LAUNCHED();
    return PD_OK;
}

__global__ static void k_bias_add(float *y, const float *b, int64_t C, int64_t S, int64_t n) {
    PD_CU_FOR(i, n) y[i] += b[(i / S) % C];
}

__global__ static void k_bias_grad(float *db, const float *dy, int64_t N, int64_t C, int64_t S) {
    __shared__ double sh[32];
    int64_t ch = blockIdx.x, M = N * S;
    double s = 0;
    for (int64_t i = threadIdx.x; i < M; i += blockDim.x) s += dy[((i / S) * C + ch) * S + i % S];
    s = pd__cu_block_sum(s, sh);
    if (threadIdx.x == 0) db[ch] += (float)s;
}

extern "C" pd_status pd__cu_channel_bias_add(pd__cuda_ctx *c, float *y, const float *b, int64_t N, int64_t C,
                                             int64_t S) {
    int64_t n = N * C * S;
    if (n <= 0) return PD_OK;
    k_bias_add<<<pd__cu_blocks(n), PD_CU_THREADS, 0, c->stream>>>(y, b, C, S, n);
    PD_CU_LAUNCHED();
    return PD_OK;
}

extern "C" pd_status pd__cu_channel_bias_grad(pd__cuda_ctx *c, float *db, const float *dy, int64_t N, int64_t C,
                                              int64_t S) {
    if (C <= 0 || N * S <= 0) return PD_OK;
    if (C > INT32_MAX) return pd__err(PD_ERR_UNSUPPORTED, "a bias of %lld channels", (long long)C);
    k_bias_grad<<<(unsigned)C, PD_CU_THREADS, 0, c->stream>>>(db, dy, N, C, S);
    PD_CU_LAUNCHED();
    return PD_OK;
}

/* ---- SoftmaxCrossEntropyLoss: one thread per (n, d) sample ------------------------------------------ */

__device__ static inline int64_t cu_label(const void *lab, bool lab64, int64_t i) {
    return lab64 ? ((const int64_t *)lab)[i] : (int64_t)((const int32_t *)lab)[i];
}

/* max and log-sum-exp of x[n, :, d] */
__device__ static inline float cu_lse(const float *x, int64_t n, int64_t C, int64_t D, int64_t d) {
    const float *xp = x + n * C * D + d;
    float mx = -INFINITY;
    for (int64_t k = 0; k < C; k++) mx = fmaxf(mx, xp[k * D]);
    double s = 0;
    for (int64_t k = 0; k < C; k++) s += (double)expf(xp[k * D] - mx);
    return mx + (float)log(s);
}

/* per sample: l[s] = -logp[t] w[t] and wt[s] = w[t] (0, 0 when ignored) */
__global__ static void k_sce(float *l, float *wt, float *logp, const float *x, const void *lab, bool lab64,
                             const float *w, int64_t N, int64_t C, int64_t D, bool has_ii, int64_t ii, int *flag) {
    PD_CU_FOR(s, N * D) {
        int64_t n = s / D, d = s % D, t = cu_label(lab, lab64, s);
        float lse = cu_lse(x, n, C, D, d);
        if (logp)
            for (int64_t k = 0; k < C; k++) logp[(n * C + k) * D + d] = x[(n * C + k) * D + d] - lse;
        float lv = 0.0f, wv = 0.0f;
        if (!(has_ii && t == ii)) {
            if (t < 0 || t >= C) {
                *flag = 1;
            } else {
                wv = w ? w[t] : 1.0f;
                lv = -(x[(n * C + t) * D + d] - lse) * wv;
            }
        }
        l[s] = lv;
        wt[s] = wv;
    }
}

/* out[0] = sum l (red 1) or sum l / sum wt (red 2); one block */
__global__ static void k_sce_reduce(float *out, const float *l, const float *wt, int64_t n, int red) {
    __shared__ double sh[32];
    double s = 0, ws = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        s += l[i];
        ws += wt[i];
    }
    s = pd__cu_block_sum(s, sh);
    ws = pd__cu_block_sum(ws, sh);
    if (threadIdx.x == 0) out[0] = (float)(red == 1 ? s : s / ws);
}

/* dx[n, :, d] += g w[t] (softmax - onehot(t)), g = dloss[s] (none), dloss[0] (sum) or dloss[0] / sum w (mean) */
__global__ static void k_sce_bwd(float *dx, const float *dloss, const float *wsum, const float *x, const void *lab,
                                 bool lab64, const float *w, int64_t N, int64_t C, int64_t D, bool has_ii, int64_t ii,
                                 int red) {
    PD_CU_FOR(s, N * D) {
        int64_t n = s / D, d = s % D, t = cu_label(lab, lab64, s);
        if ((has_ii && t == ii) || t < 0 || t >= C) continue;
        float g = red == 0 ? dloss[s] : dloss[0];
        if (red == 2) g /= wsum[0];
        g *= w ? w[t] : 1.0f;
        float lse = cu_lse(x, n, C, D, d);
        for (int64_t k = 0; k < C; k++) {
            int64_t i = (n * C + k) * D + d;
            dx[i] += g * (expf(x[i] - lse) - (k == t ? 1.0f : 0.0f));
        }
    }
}

extern "C" pd_status pd__cu_sce_fwd(pd__cuda_ctx *c, float *loss, float *logp, const float *x, const void *labels,
                                    bool lab64, const float *w, int64_t N, int64_t C, int64_t D, bool has_ii,
                                    int64_t ii, int red) {
    int64_t n = N * D;
    if (n <= 0 || C <= 0) {
        if (red != 0) {
            float v = red == 1 ? 0.0f : NAN; /* an empty mean is 0/0, as on the CPU */
            PD_TRY(pd__cuda_upload(c, loss, &v, sizeof v));
            PD_CU(cudaStreamSynchronize(c->stream)); /* v is on this stack */
        }
        return PD_OK;
    }
    void *buf;
    PD_TRY(pd__cuda_alloc(c, sizeof(float) * 2 * (size_t)n, &buf));
    float *l = red == 0 ? loss : (float *)buf, *wt = (float *)buf + n;
    k_sce<<<pd__cu_blocks(n), PD_CU_THREADS, 0, c->stream>>>(l, wt, logp, x, labels, lab64, w, N, C, D, has_ii, ii,
                                                              c->flag);
    if (red != 0) k_sce_reduce<<<1, PD_CU_THREADS, 0, c->stream>>>(loss, l, wt, n, red);
    pd__cuda_free(c, buf);
    PD_CU_LAUNCHED();
    return PD_OK;
}

extern "C" pd_status pd__cu_sce_bwd(pd__cuda_ctx *c, float *dx, const float *dloss, const float *x, const void *labels,
                                    bool lab64, const float *w, int64_t N, int64_t C, int64_t D, bool has_ii,
                                    int64_t ii, int red) {
    int64_t n = N * D;
    if (n <= 0 || C <= 0) return PD_OK;
    void *buf;
    PD_TRY(pd__cuda_alloc(c, sizeof(float) * (2 * (size_t)n + 1), &buf));
    float *l = (float *)buf, *wt = l + n, *ws = wt + n;
    if (red == 2) { /* the sum of the weights, through the forward's per-sample pass */
        k_sce<<<pd__cu_blocks(n), PD_CU_THREADS, 0, c->stream>>>(l, wt, NULL, x, labels, lab64, w, N, C, D, has_ii,
                                                                  ii, c->flag);
        k_sce_reduce<<<1, PD_CU_THREADS, 0, c->stream>>>(ws, wt, wt, n, 1);
    }
    k_sce_bwd<<<pd__cu_blocks(n), PD_CU_THREADS, 0, c->stream>>>(dx, dloss, ws, x, labels, lab64, w, N, C, D, has_ii,
                                                                  ii, red);
    pd__cuda_free(c, buf);
    PD_CU_LAUNCHED();
    return PD_OK;
}

/* ---- the session's cross-entropy loss (runtime/loss.c) ---------------------------------------------- */

/* One block per position p: loss and correctness into l[p], ok[p];
 * dlogits overwritten. The arithmetic is runtime/loss.c's: the largest logit
 * (its first index on ties), e^(z - max) in float summed in double, the
 * gradient e * (float)(1 / (sum n)) with 1/n taken from the label's. */
__global__ static void k_ce(double *l, int *ok, float *dz, const float *z, const int64_t *y, int64_t V, double n,
                            int *flag) {
    __shared__ double shd[32];
    __shared__ float shv[32];
    __shared__ int64_t shi[32];
    int64_t p = blockIdx.x;
    const float *zp = z + p * V;
    /* the largest logit and its first index: per thread, then per warp, then the block */
    float mx = -INFINITY;
    int64_t arg = INT64_MAX;
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x)
        if (zp[v] > mx || (arg == INT64_MAX && !isnan(zp[v]))) {
            mx = zp[v];
            arg = v;
        }
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, mx, o);
        int64_t oi = __shfl_xor_sync(0xffffffffu, arg, o);
        if (oi != INT64_MAX && (arg == INT64_MAX || ov > mx || (ov == mx && oi < arg))) {
            mx = ov;
            arg = oi;
        }
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (lane == 0) {
        shv[warp] = mx;
        shi[warp] = arg;
    }
    __syncthreads();
    mx = shv[0];
    arg = shi[0];
    for (int w = 1; w < nw; w++)
        if (shi[w] != INT64_MAX && (arg == INT64_MAX || shv[w] > mx || (shv[w] == mx && shi[w] < arg))) {
            mx = shv[w];
            arg = shi[w];
        }
    if (isnan(zp[0])) { /* loss.c's running maximum starts at z[0] and keeps a NaN there; it skips later ones */
        mx = zp[0];
        arg = 0;
    }
    double s = 0;
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x) s += (double)expf(zp[v] - mx);
    double se = pd__cu_block_sum(s, shd);
    int64_t t = y[p];
    if (t < 0 || t >= V) {
        if (threadIdx.x == 0) {
            *flag = 1;
            l[p] = 0;
            ok[p] = 0;
        }
        return;
    }
    if (threadIdx.x == 0) {
        l[p] = log(se) + mx - zp[t];
        ok[p] = arg == t;
    }
    if (dz) {
        float *dp = dz + p * V;
        float scale = (float)(1.0 / (se * n)), inv = (float)(1.0 / n);
        for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
            float d = expf(zp[v] - mx) * scale;
            dp[v] = v == t ? d - inv : d;
        }
    }
}

__global__ static void k_ce_reduce(double *out, const double *l, const int *ok, int64_t n) {
    __shared__ double sh[32];
    double s = 0, k = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        s += l[i];
        k += ok[i];
    }
    s = pd__cu_block_sum(s, sh);
    k = pd__cu_block_sum(k, sh);
    if (threadIdx.x == 0) {
        out[0] = s;
        out[1] = k;
    }
}

extern "C" pd_status pd__cuda_loss_cross_entropy(pd__cuda_ctx *c, const pd_tensor *logits, const pd_tensor *labels,
                                                 int64_t rows, float *dlogits, double *loss, int64_t *correct,
                                                 int64_t *count) {
    if (logits->dtype != PD_FLOAT || logits->ndim < 1 || labels->dtype != PD_INT64)
        return pd__err(PD_ERR_SHAPE, "cross_entropy needs float32 logits with a class axis and int64 labels");
    int64_t V = logits->shape[logits->ndim - 1], total = pd_tensor_numel(logits) / (V ? V : 1);
    bool fits = labels->ndim == logits->ndim - 1 && V >= 1;
    for (int i = 0; fits && i < labels->ndim; i++) fits = labels->shape[i] == logits->shape[i];
    if (!fits) return pd__err(PD_ERR_SHAPE, "cross_entropy: the labels do not fit the output");
    int64_t lead = logits->ndim > 1 ? logits->shape[0] : 1, per_row = lead ? total / lead : 0;
    int64_t n = (rows < lead ? rows : lead) * per_row;
    if (n < 0) n = 0;
    double h[2] = {0, 0};
    if (n > 0) {
        void *buf;
        size_t bytes = sizeof(double) * (size_t)(n + 2) + sizeof(int) * (size_t)n;
        PD_TRY(pd__cuda_alloc(c, bytes, &buf));
        double *l = (double *)buf, *out = l + n;
        int *ok = (int *)(out + 2);
        if (n > INT32_MAX) {
            pd__cuda_free(c, buf);
            return pd__err(PD_ERR_UNSUPPORTED, "cross_entropy over %lld positions", (long long)n);
        }
        k_ce<<<(unsigned)n, pd__cu_row_threads(V), 0, c->stream>>>(l, ok, dlogits, (const float *)logits->data,
                                                                    (const int64_t *)labels->data, V, (double)n,
                                                                    c->flag);
        k_ce_reduce<<<1, PD_CU_THREADS, 0, c->stream>>>(out, l, ok, n);
        cudaError_t e = cudaGetLastError();
        pd_status s = e == cudaSuccess ? pd__cuda_download(c, h, out, sizeof h) : PD_OK;
        pd__cuda_free(c, buf);
        if (e != cudaSuccess) return pd__cuda_fail_rt(e, "k_ce", __FILE__, __LINE__);
        PD_TRY(s);
        PD_TRY(pd__cu_check_flag(c, "cross_entropy"));
    }
    if (dlogits && n < total) PD_TRY(pd__cuda_memset0(c, dlogits + n * V, sizeof(float) * (size_t)((total - n) * V)));
    *loss = n ? h[0] / (double)n : 0;
    if (correct) *correct = (int64_t)h[1];
    if (count) *count = n;
    return PD_OK;
}
