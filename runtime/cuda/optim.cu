/* optim.cu - the optimizer updates of runtime/optim.c as one fused kernel per
 * optimizer (same formulas, same float arithmetic, the bias corrections
 * computed on the host in double as there), the gradients' sum of squares
 * (the norm) and the clipping scale.
 */
#include "internal.cuh"

extern "C" {
#include "../optim.h" /* PD__NORM_BLOCK */
}

#include <math.h>

__global__ static void k_sgd(float *w, const float *g, float lr, float wd, int64_t n) {
    PD_CU_FOR(i, n) w[i] -= lr * (g[i] + wd * w[i]);
}

/* nesterov: w -= lr (g' + mu v), else w -= lr v; the first step sets v = g' */
__global__ static void k_momentum(float *w, const float *g, float *v, float lr, float wd, float mu, bool first,
                                  bool nesterov, int64_t n) {
    PD_CU_FOR(i, n) {
        float gi = g[i] + wd * w[i];
        float vi = first ? gi : mu * v[i] + gi;
        v[i] = vi;
        w[i] -= nesterov ? lr * (gi + mu * vi) : lr * vi;
    }
}

/* c1, c2, decay: 1-b1, 1-b2, 1 - lr*wd in double, rounded to float once (PyTorch's scalars, optim.c) */
__global__ static void k_adam(float *w, const float *g, float *m, float *v, float wd, float decay, float b1, float b2,
                              float c1, float c2, float eps, float step, float sbc2, bool decoupled, int64_t n) {
    PD_CU_FOR(i, n) {
        float gi = g[i], wi = w[i];
        if (decoupled)
            wi *= decay;
        else
            gi += wd * wi;
        float mi = b1 * m[i] + c1 * gi;
        float vi = b2 * v[i] + c2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        w[i] = wi - step * mi / (sqrtf(vi) / sbc2 + eps);
    }
}

extern "C" pd_status pd__cuda_optim_step(pd__cuda_ctx *c, const pd_train_options *o, int64_t t, double lr, float *w,
                                         const float *g, float *s0, float *s1, int64_t n) {
    if (n <= 0) return PD_OK;
    const float wd = (float)o->weight_decay, mu = (float)o->momentum, flr = (float)lr;
    unsigned nb = pd__cu_blocks(n);
    switch (o->optimizer) {
    case PD_OPT_SGD: k_sgd<<<nb, PD_CU_THREADS, 0, c->stream>>>(w, g, flr, wd, n); break;
    case PD_OPT_MOMENTUM:
    case PD_OPT_NESTEROV:
        if (!s0) return pd__err(PD_ERR_INVALID, "momentum needs its state slab");
        k_momentum<<<nb, PD_CU_THREADS, 0, c->stream>>>(w, g, s0, flr, wd, mu, t == 1,
                                                         o->optimizer == PD_OPT_NESTEROV, n);
        break;
    case PD_OPT_ADAM:
    case PD_OPT_ADAMW: {
        if (!s0 || !s1) return pd__err(PD_ERR_INVALID, "adam needs its two state slabs");
        const double bc1 = 1.0 - pow(o->beta1, (double)t), bc2 = 1.0 - pow(o->beta2, (double)t);
        const float step = (float)(lr / bc1), sbc2 = (float)sqrt(bc2);
        k_adam<<<nb, PD_CU_THREADS, 0, c->stream>>>(w, g, s0, s1, wd, (float)(1.0 - lr * o->weight_decay),
                                                     (float)o->beta1, (float)o->beta2, (float)(1.0 - o->beta1),
                                                     (float)(1.0 - o->beta2), (float)o->eps, step, sbc2,
                                                     o->optimizer == PD_OPT_ADAMW, n);
        break;
    }
    default: return pd__err(PD_ERR_INVALID, "unknown optimizer %d", (int)o->optimizer);
    }
    PD_CU_LAUNCHED();
    return PD_OK;
}

/* block b of pd__sq_sum's blocks (runtime/optim.c), its sum of squares into
 * part[b]: the block's threads add in their own order (not the CPU's eight
 * running sums), so a slab's sum is close to the CPU's, not its bits */
__global__ static void k_sumsq(double *part, const float *g, int64_t n) {
    __shared__ double sh[32];
    const float *x = g + (int64_t)blockIdx.x * PD__NORM_BLOCK;
    int64_t m = n - (int64_t)blockIdx.x * PD__NORM_BLOCK;
    if (m > PD__NORM_BLOCK) m = PD__NORM_BLOCK;
    double s = 0;
    for (int64_t i = threadIdx.x; i < m; i += blockDim.x) s += (double)x[i] * x[i];
    s = pd__cu_block_sum(s, sh);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

/* the blocks' sums added in block order, as the CPU adds them: the same
 * bits run after run (a double atomicAdd per block added them in whatever
 * order the blocks ended, and two runs' norms differed in their last bits) */
__global__ static void k_sum_in_order(double *out, const double *part, unsigned nb) {
    double s = 0;
    for (unsigned b = 0; b < nb; b++) s += part[b];
    *out = s;
}

extern "C" pd_status pd__cuda_sumsq(pd__cuda_ctx *c, const float *g, int64_t n, double *sq) {
    if (n <= 0) {
        *sq = 0;
        return PD_OK;
    }
    unsigned nb = (unsigned)((n + PD__NORM_BLOCK - 1) / PD__NORM_BLOCK);
    void *buf;
    PD_TRY(pd__cuda_alloc(c, sizeof(double) * ((size_t)nb + 1), &buf));
    double h = 0, *part = (double *)buf + 1;
    k_sumsq<<<nb, PD_CU_THREADS, 0, c->stream>>>(part, g, n);
    k_sum_in_order<<<1, 1, 0, c->stream>>>((double *)buf, part, nb);
    cudaError_t e = cudaGetLastError();
    pd_status s = e == cudaSuccess ? pd__cuda_download(c, &h, buf, sizeof h)
                                   : pd__cuda_fail_rt(e, "k_sumsq", __FILE__, __LINE__);
    pd__cuda_free(c, buf);
    PD_TRY(s);
    *sq = h;
    return PD_OK;
}

__global__ static void k_scale(float *g, float s, int64_t n) { PD_CU_FOR(i, n) g[i] *= s; }

extern "C" pd_status pd__cuda_scale(pd__cuda_ctx *c, float *g, int64_t n, float s) {
    if (n <= 0) return PD_OK;
    k_scale<<<pd__cu_blocks(n), PD_CU_THREADS, 0, c->stream>>>(g, s, n);
    PD_CU_LAUNCHED();
    return PD_OK;
}
