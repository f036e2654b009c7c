/* elementwise.cu - own kernels for the element-wise ops and the tensor
 * moves: unary activations and their derivatives, binary ops with numpy
 * broadcasting (the backward sums each operand's gradient over the positions
 * it was broadcast to, one thread per operand element, no atomics; a small
 * operand broadcast over many positions, a bias, in chunks of positions
 * summed in a second pass), axpy,
 * transposes, slab copies (Split, Concat) and the embedding gather with its
 * scatter-add backward.
 *
 * How it works: docs/INTERNALS.md, "runtime/cuda/elementwise.cu".
 */
#include "internal.cuh"

#include <math.h>
#include <string.h>

/* ---- unary ----------------------------------------------------------------------------------------- */

#define PD_CU_SQRT1_2 0.70710678118654752440f
#define PD_CU_GELU_K 0.79788456080286535588f  /* sqrt(2/pi) */
#define PD_CU_INV_SQRT2PI 0.39894228040143267794f
#define PD_CU_2_SQRTPI 1.12837916709551257390f

__device__ static inline float cu_unary(int op, float a, float x) {
    switch (op) {
    case PD_CU_RELU: return x < 0.0f ? 0.0f : x; /* NaN passes, as on the CPU and in PyTorch */
    case PD_CU_LEAKY_RELU: return x < 0.0f ? a * x : x;
    case PD_CU_SIGMOID: return 1.0f / (1.0f + expf(-x));
    case PD_CU_TANH: return tanhf(x);
    case PD_CU_GELU: return 0.5f * x * (1.0f + erff(x * PD_CU_SQRT1_2));
    case PD_CU_GELU_TANH: return 0.5f * x * (1.0f + tanhf(PD_CU_GELU_K * (x + 0.044715f * x * x * x)));
    case PD_CU_ERF: return erff(x);
    case PD_CU_EXP: return expf(x);
    case PD_CU_LOG: return logf(x);
    case PD_CU_SQRT: return sqrtf(x);
    case PD_CU_NEG: return -x;
    case PD_CU_RECIPROCAL: return 1.0f / x;
    default: return x;
    }
}

/* dy * f'(x), with y = f(x) */
__device__ static inline float cu_unary_grad(int op, float a, float x, float y, float dy) {
    switch (op) {
    case PD_CU_RELU: return x > 0.0f ? dy : 0.0f;
    case PD_CU_LEAKY_RELU: return x < 0.0f ? a * dy : dy;
    case PD_CU_SIGMOID: return dy * y * (1.0f - y);
    case PD_CU_TANH: return dy * (1.0f - y * y);
    case PD_CU_GELU: {
        float cdf = 0.5f * (1.0f + erff(x * PD_CU_SQRT1_2)), pdf = PD_CU_INV_SQRT2PI * expf(-0.5f * x * x);
        return dy * (cdf + x * pdf);
    }
    case PD_CU_GELU_TANH: {
        float u = PD_CU_GELU_K * (x + 0.044715f * x * x * x), t = tanhf(u);
        float du = PD_CU_GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
        return dy * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
    }
    case PD_CU_ERF: return dy * PD_CU_2_SQRTPI * expf(-x * x);
    case PD_CU_EXP: return dy * y;
    case PD_CU_LOG: return dy / x;
    case PD_CU_SQRT: return dy * 0.5f / y;
    case PD_CU_NEG: return -dy;
    case PD_CU_RECIPROCAL: return -dy * y * y;
    default: return dy;
    }
}

__global__ static void k_unary(int op, float a, float *y, const float *x, int64_t n) {
    PD_CU_FOR(i, n) y[i] = cu_unary(op, a, x[i]);
}

/* x or y may be NULL where the op's derivative does not read it: the op
 * tells which (see pd__cu_unary_bwd). */
__global__ static void k_unary_bwd(int op, float a, float *dx, const float *dy, const float *x, const float *y,
                                   int64_t n) {
    PD_CU_FOR(i, n) {
        float xi = x ? x[i] : 0.0f, yi = y ? y[i] : 0.0f;
        dx[i] += cu_unary_grad(op, a, xi, yi, dy[i]);
    }
}

extern "C" pd_status pd__cu_unary_fwd(pd__cuda_ctx *c, int op, float alpha, float *y, const float *x, int64_t n) {
    if (n <= 0) return PD_OK;
    k_unary<<<pd__cu_blocks(n), PD_CU_THREADS, 0, c->stream>>>(op, alpha, y, x, n);
    PD_CU_LAUNCHED();
    return PD_OK;
}

extern "C" pd_status pd__cu_unary_bwd(pd__cuda_ctx *c, int op, float alpha, float *dx, const float *dy,
                                      const float *x, const float *y, int64_t n) {
    if (n <= 0) return PD_OK;
    bool needs_y = op == PD_CU_SIGMOID || op == PD_CU_TANH || op == PD_CU_EXP || op == PD_CU_SQRT ||
                   op == PD_CU_RECIPROCAL;
    if (needs_y && !y) return pd__err(PD_ERR_INVALID, "pd__cu_unary_bwd: op %d needs the forward's output", op);
    if (!needs_y && !x) return pd__err(PD_ERR_INVALID, "pd__cu_unary_bwd: op %d needs the forward's input", op);
    k_unary_bwd<<<pd__cu_blocks(n), PD_CU_THREADS, 0, c->stream>>>(op, alpha, dx, dy, x, y, n);
    PD_CU_LAUNCHED();
    return PD_OK;
}

/* ---- binary with broadcasting --------------------------------------------------------------------- */

__device__ static inline float cu_binary(int op, float a, float b) {
    switch (op) {
    case PD_CU_ADD: return a + b;
    case PD_CU_SUB: return a - b;
    case PD_CU_MUL: return a * b;
    default: return a / b;
    }
}

static int64_t bc_numel(const pd__cu_bcast *bc) {
    int64_t n = 1;
    for (int i = 0; i < bc->nd; i++) n *= bc->shape[i];
    return n;
}

__global__ static void k_binary(int op, float *y, const float *a, const float *b, pd__cu_bcast bc, int64_t n) {
    PD_CU_FOR(i, n) {
        int64_t r = i, oa = 0, ob = 0;
        for (int d = bc.nd - 1; d >= 0; d--) {
            int64_t k = r % bc.shape[d];
            r /= bc.shape[d];
            oa += k * bc.sa[d];
            ob += k * bc.sb[d];
        }
        y[i] = cu_binary(op, a[oa], b[ob]);
    }
}

__global__ static void k_broadcast(float *y, const float *a, float alpha, pd__cu_bcast bc, int64_t n) {
    PD_CU_FOR(i, n) {
        int64_t r = i, oa = 0;
        for (int d = bc.nd - 1; d >= 0; d--) {
            int64_t k = r % bc.shape[d];
            r /= bc.shape[d];
            oa += k * bc.sa[d];
        }
        y[i] = alpha * a[oa];
    }
}

/* The period m of an operand read at output position i as element i % m:
 * its strides are the contiguous ones over its trailing dims and 0 (or the
 * dim 1) over the leading ones: the same shape (m = n), a scalar (m = 1), a
 * bias over rows, a mask over batch and heads. -1 otherwise. */
static int64_t bc_period(const pd__cu_bcast *bc, const int64_t *st) {
    int64_t m = 1;
    int d = bc->nd - 1;
    for (; d >= 0; d--) { /* the trailing dims it spans, contiguously */
        if (bc->shape[d] == 1) continue;
        if (st[d] != m) break;
        m *= bc->shape[d];
    }
    for (; d >= 0; d--) /* the leading dims it is broadcast along */
        if (bc->shape[d] != 1 && st[d] != 0) return -1;
    return m;
}

/* No index arithmetic: a at i % ma, b at i % mb. */
__global__ static void k_binary_flat(int op, float *y, const float *a, const float *b, int64_t ma, int64_t mb,
                                     int64_t n) {
    PD_CU_FOR(i, n) y[i] = cu_binary(op, a[ma == n ? i : i % ma], b[mb == n ? i : i % mb]);
}

extern "C" pd_status pd__cu_binary_fwd(pd__cuda_ctx *c, int op, float *y, const float *a, const float *b,
                                       const pd__cu_bcast *bc) {
    int64_t n = bc_numel(bc);
    if (n <= 0) return PD_OK;
    int64_t ma = bc_period(bc, bc->sa), mb = bc_period(bc, bc->sb);
    if (ma > 0 && mb > 0)
        k_binary_flat<<<pd__cu_blocks(n), PD_CU_THREADS, 0, c->stream>>>(op, y, a, b, ma, mb, n);
    else
        k_binary<<<pd__cu_blocks(n), PD_CU_THREADS, 0, c->stream>>>(op, y, a, b, *bc, n);
    PD_CU_LAUNCHED();
    return PD_OK;
}

extern "C" pd_status pd__cu_broadcast(pd__cuda_ctx *c, float *y, const float *a, float alpha, const pd__cu_bcast *bc) {
    int64_t n = bc_numel(bc);
    if (n <= 0) return PD_OK;
    k_broadcast<<<pd__cu_blocks(n), PD_CU_THREADS, 0, c->stream>>>(y, a, alpha, *bc, n);
    PD_CU_LAUNCHED();
    return PD_OK;
}

/* The output dims split for one operand: kept (its stride is not 0: one
 * thread per combination, in the operand's own C order) and reduced (it was
 * broadcast along them: each thread loops over them). Per dim: its size and
 * the strides of the output, a and b along it. */
typedef struct cu_red {
    int nk, nr;
    int64_t ks[PD_CU_MAXD], ko[PD_CU_MAXD], ka[PD_CU_MAXD], kb[PD_CU_MAXD];
    int64_t rs[PD_CU_MAXD], ro[PD_CU_MAXD], ra[PD_CU_MAXD], rb[PD_CU_MAXD];
    int64_t R; /* product of rs */
} cu_red;

/* The gradient of operand element t summed over reduced positions [j0, j1). */
__device__ static inline float cu_binary_bwd_sum(int op, int which, const float *dy, const float *a, const float *b,
                                                 const cu_red &p, int64_t t, int64_t j0, int64_t j1) {
    int64_t r = t, oo = 0, oa = 0, ob = 0;
    for (int k = p.nk - 1; k >= 0; k--) {
        int64_t q = r % p.ks[k];
        r /= p.ks[k];
        oo += q * p.ko[k];
        oa += q * p.ka[k];
        ob += q * p.kb[k];
    }
    float s = 0.0f;
    for (int64_t j = j0; j < j1; j++) {
        int64_t u = j, po = oo, pa = oa, pb = ob;
        for (int k = p.nr - 1; k >= 0; k--) {
            int64_t q = u % p.rs[k];
            u /= p.rs[k];
            po += q * p.ro[k];
            pa += q * p.ra[k];
            pb += q * p.rb[k];
        }
        float g = dy[po];
        switch (op) {
        case PD_CU_ADD: s += g; break;
        case PD_CU_SUB: s += which ? -g : g; break;
        case PD_CU_MUL: s += which ? g * a[pa] : g * b[pb]; break;
        default: {
            float bv = b[pb];
            s += which ? -g * a[pa] / (bv * bv) : g / bv;
        }
        }
    }
    return s;
}

/* The gradient of an operand of the output's shape (nothing to sum): the
 * other operand at i % ma or i % mb, as k_binary_flat reads them. */
__global__ static void k_binary_bwd_flat(int op, int which, float alpha, float *d, const float *dy, const float *a,
                                         const float *b, int64_t ma, int64_t mb, int64_t n) {
    PD_CU_FOR(i, n) {
        float g = dy[i], v;
        switch (op) {
        case PD_CU_ADD: v = g; break;
        case PD_CU_SUB: v = which ? -g : g; break;
        case PD_CU_MUL: v = which ? g * a[ma == n ? i : i % ma] : g * b[mb == n ? i : i % mb]; break;
        default: {
            float bv = b[mb == n ? i : i % mb];
            v = which ? -g * a[ma == n ? i : i % ma] / (bv * bv) : g / bv;
        }
        }
        d[i] += alpha * v;
    }
}

__global__ static void k_binary_bwd(int op, int which, float alpha, float *d, const float *dy, const float *a,
                                    const float *b, cu_red p, int64_t nt) {
    PD_CU_FOR(t, nt) d[t] += alpha * cu_binary_bwd_sum(op, which, dy, a, b, p, t, 0, p.R);
}

/* A few operand elements each summed over many positions (a bias over a
 * batch): blockIdx.y takes chunk y of L positions, its partial sums go to
 * part[y * nt + t]; k_sum_parts adds them up in chunk order (the same
 * result run after run). */
__global__ static void k_binary_bwd_part(int op, int which, float *part, const float *dy, const float *a,
                                         const float *b, cu_red p, int64_t nt, int64_t L) {
    int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, j0 = (int64_t)blockIdx.y * L;
    int64_t j1 = j0 + L < p.R ? j0 + L : p.R;
    if (t < nt) part[(int64_t)blockIdx.y * nt + t] = cu_binary_bwd_sum(op, which, dy, a, b, p, t, j0, j1);
}

__global__ static void k_sum_parts(float *d, const float *part, float alpha, int64_t nt, int64_t S) {
    PD_CU_FOR(t, nt) {
        float s = 0.0f;
        for (int64_t y = 0; y < S; y++) s += part[y * nt + t];
        d[t] += alpha * s;
    }
}

/* Chunks of a reduction of R positions for nt outputs: enough threads to
 * fill the device (about 2^18), at least 32 positions a chunk. */
static int64_t cu_red_chunks(int64_t nt, int64_t R) {
    int64_t S = ((int64_t)1 << 18) / (nt > 0 ? nt : 1), most = R / 32;
    if (S > most) S = most;
    if (S > 65535) S = 65535;
    return S < 1 ? 1 : S;
}

extern "C" pd_status pd__cu_binary_bwd(pd__cuda_ctx *c, int op, int which, float alpha, float *d, const float *dy,
                                       const float *a, const float *b, const pd__cu_bcast *bc, int64_t nt) {
    if (nt <= 0 || bc_numel(bc) <= 0) return PD_OK;
    if ((op == PD_CU_MUL || op == PD_CU_DIV) && (!b || (which && !a)))
        return pd__err(PD_ERR_INVALID, "pd__cu_binary_bwd: the operands are needed");
    cu_red p;
    memset(&p, 0, sizeof p);
    p.R = 1;
    int64_t ostr[PD_CU_MAXD], s = 1, kept = 1;
    for (int i = bc->nd - 1; i >= 0; i--) {
        ostr[i] = s;
        s *= bc->shape[i];
    }
    const int64_t *st = which ? bc->sb : bc->sa;
    for (int i = 0; i < bc->nd; i++) {
        if (bc->shape[i] == 1) continue;
        if (st[i] != 0) {
            p.ks[p.nk] = bc->shape[i];
            p.ko[p.nk] = ostr[i];
            p.ka[p.nk] = bc->sa[i];
            p.kb[p.nk] = bc->sb[i];
            kept *= bc->shape[i];
            p.nk++;
        } else {
            p.rs[p.nr] = bc->shape[i];
            p.ro[p.nr] = ostr[i];
            p.ra[p.nr] = bc->sa[i];
            p.rb[p.nr] = bc->sb[i];
            p.R *= bc->shape[i];
            p.nr++;
        }
    }
    if (kept != nt)
        return pd__err(PD_ERR_INTERNAL, "pd__cu_binary_bwd: operand of %lld elements, broadcast layout says %lld",
                       (long long)nt, (long long)kept);
    int64_t n = bc_numel(bc), ma = bc_period(bc, bc->sa), mb = bc_period(bc, bc->sb);
    if (nt == n && (which ? mb : ma) == n && ma > 0 && mb > 0) {
        k_binary_bwd_flat<<<pd__cu_blocks(n), PD_CU_THREADS, 0, c->stream>>>(op, which, alpha, d, dy, a, b, ma, mb, n);
        PD_CU_LAUNCHED();
        return PD_OK;
    }
    int64_t S = cu_red_chunks(nt, p.R);
    if (S == 1 || nt > INT32_MAX / 2) {
        k_binary_bwd<<<pd__cu_blocks(nt), PD_CU_THREADS, 0, c->stream>>>(op, which, alpha, d, dy, a, b, p, nt);
        PD_CU_LAUNCHED();
        return PD_OK;
    }
    float *part = NULL;
    PD_TRY(pd__cuda_alloc(c, sizeof(float) * (size_t)(S * nt), (void **)&part));
    int64_t L = (p.R + S - 1) / S;
    dim3 grid((unsigned)((nt + PD_CU_THREADS - 1) / PD_CU_THREADS), (unsigned)S);
    k_binary_bwd_part<<<grid, PD_CU_THREADS, 0, c->stream>>>(op, which, part, dy, a, b, p, nt, L);
    k_sum_parts<<<pd__cu_blocks(nt), PD_CU_THREADS, 0, c->stream>>>(d, part, alpha, nt, S);
    cudaError_t e = cudaGetLastError();
    pd__cuda_free(c, part); /* stream-ordered: reused only by later work */
    if (e != cudaSuccess) return pd__cuda_fail_rt(e, "k_binary_bwd_part", __FILE__, __LINE__);
    return PD_OK;
}

__global__ static void k_axpy(float *y, const float *x, float alpha, int64_t n) { PD_CU_FOR(i, n) y[i] += alpha * x[i]; }

extern "C" pd_status pd__cu_axpy(pd__cuda_ctx *c, float *y, const float *x, float alpha, int64_t n) {
    if (n <= 0) return PD_OK;
    k_axpy<<<pd__cu_blocks(n), PD_CU_THREADS, 0, c->stream>>>(y, x, alpha, n);
    PD_CU_LAUNCHED();
    return PD_OK;
}

/* ---- moves ------------------------------------------------------------------------------------------ */

typedef struct cu_perm {
    int nd;
    int64_t ys[PD_CU_MAXD]; /* y's shape */
    int64_t xs[PD_CU_MAXD]; /* x's stride along y's dim i (x's dim perm[i]) */
} cu_perm;

__global__ static void k_permute(float *y, const float *x, cu_perm p, int64_t n, bool acc) {
    PD_CU_FOR(i, n) {
        int64_t r = i, ox = 0;
        for (int d = p.nd - 1; d >= 0; d--) {
            ox += (r % p.ys[d]) * p.xs[d];
            r /= p.ys[d];
        }
        if (acc) y[i] += x[ox];
        else y[i] = x[ox];
    }
}

extern "C" pd_status pd__cu_permute(pd__cuda_ctx *c, float *y, const float *x, int nd, const int64_t *xshape,
                                    const int64_t *perm, bool accumulate) {
    if (nd < 0 || nd > PD_CU_MAXD) return pd__err(PD_ERR_UNSUPPORTED, "transpose of rank %d", nd);
    cu_perm p;
    memset(&p, 0, sizeof p);
    p.nd = nd;
    int64_t xstr[PD_CU_MAXD], s = 1, n = 1;
    for (int i = nd - 1; i >= 0; i--) {
        xstr[i] = s;
        s *= xshape[i];
    }
    for (int i = 0; i < nd; i++) {
        if (perm[i] < 0 || perm[i] >= nd) return pd__err(PD_ERR_INVALID, "transpose: bad perm");
        p.ys[i] = xshape[perm[i]];
        p.xs[i] = xstr[perm[i]];
        n *= p.ys[i];
    }
    if (n <= 0) return PD_OK;
    k_permute<<<pd__cu_blocks(n), PD_CU_THREADS, 0, c->stream>>>(y, x, p, n, accumulate);
    PD_CU_LAUNCHED();
    return PD_OK;
}

__global__ static void k_slab(float *dst, int64_t dlen, int64_t doff, const float *src, int64_t slen, int64_t soff,
                              int64_t len, int64_t inner, int64_t n, bool acc) {
    PD_CU_FOR(e, n) {
        int64_t i = e % inner, j = (e / inner) % len, o = e / (inner * len);
        float v = src[(o * slen + soff + j) * inner + i];
        float *p = &dst[(o * dlen + doff + j) * inner + i];
        if (acc) *p += v;
        else *p = v;
    }
}

extern "C" pd_status pd__cu_slab_copy(pd__cuda_ctx *c, float *dst, int64_t dlen, int64_t doff, const float *src,
                                      int64_t slen, int64_t soff, int64_t outer, int64_t len, int64_t inner,
                                      bool accumulate) {
    int64_t n = outer * len * inner;
    if (n <= 0) return PD_OK;
    k_slab<<<pd__cu_blocks(n), PD_CU_THREADS, 0, c->stream>>>(dst, dlen, doff, src, slen, soff, len, inner, n,
                                                                accumulate);
    PD_CU_LAUNCHED();
    return PD_OK;
}

/* ---- gather and scatter-add ------------------------------------------------------------------------- */

__device__ static inline int64_t cu_index(const void *idx, bool idx64, int64_t j, int64_t len, int *flag) {
    int64_t k = idx64 ? ((const int64_t *)idx)[j] : (int64_t)((const int32_t *)idx)[j];
    if (k < 0) k += len;
    if (k < 0 || k >= len) {
        *flag = 1;
        return -1;
    }
    return k;
}

__global__ static void k_gather(float *y, const float *data, const void *idx, bool idx64, int64_t len, int64_t nidx,
                                int64_t inner, int64_t n, int *flag) {
    PD_CU_FOR(e, n) {
        int64_t i = e % inner, j = (e / inner) % nidx, o = e / (inner * nidx);
        int64_t k = cu_index(idx, idx64, j, len, flag);
        y[e] = k < 0 ? 0.0f : data[(o * len + k) * inner + i];
    }
}

__global__ static void k_scatter_add(float *dd, const float *dy, const void *idx, bool idx64, int64_t len,
                                     int64_t nidx, int64_t inner, int64_t n, int *flag) {
    PD_CU_FOR(e, n) {
        int64_t i = e % inner, j = (e / inner) % nidx, o = e / (inner * nidx);
        int64_t k = cu_index(idx, idx64, j, len, flag);
        if (k >= 0) atomicAdd(&dd[(o * len + k) * inner + i], dy[e]);
    }
}

extern "C" pd_status pd__cu_gather_fwd(pd__cuda_ctx *c, float *y, const float *data, const void *idx, bool idx64,
                                       int64_t outer, int64_t axis_len, int64_t nidx, int64_t inner) {
    int64_t n = outer * nidx * inner;
    if (n <= 0) return PD_OK;
    k_gather<<<pd__cu_blocks(n), PD_CU_THREADS, 0, c->stream>>>(y, data, idx, idx64, axis_len, nidx, inner, n,
                                                                  c->flag);
    PD_CU_LAUNCHED();
    return PD_OK;
}

/* Gather's backward in a fixed order: a block per row k of data (per outer
 * index o) scans the indices PD_CU_THREADS at a time, lists the j with
 * idx[j] == k in ascending order, and each thread adds those rows of dy
 * into its columns of row k. Each row has one writer and one order of
 * sums, so no atomics and two runs give the same bits (an embedding's
 * gradient under atomicAdd did not, and bitwise resume checks failed);
 * a token repeated thousands of times is summed by the whole block. */
__global__ static void k_gather_bwd_rows(float *dd, const float *dy, const void *idx, bool idx64, int64_t len,
                                         int64_t nidx, int64_t inner, int64_t nrows, int *flag) {
    __shared__ int64_t hits[PD_CU_THREADS];
    __shared__ int warp_hits[PD_CU_THREADS / 32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int64_t r = blockIdx.x; r < nrows; r += gridDim.x) {
        int64_t o = r / len, k = r % len;
        float *drow = dd + (o * len + k) * inner;
        const float *ybase = dy + o * nidx * inner;
        for (int64_t j0 = 0; j0 < nidx; j0 += PD_CU_THREADS) {
            int64_t j = j0 + threadIdx.x;
            bool hit = j < nidx && cu_index(idx, idx64, j, len, flag) == k;
            unsigned m = __ballot_sync(0xffffffffu, hit);
            if (lane == 0) warp_hits[warp] = __popc(m);
            __syncthreads();
            int before = 0, total = 0;
            for (int w = 0; w < PD_CU_THREADS / 32; w++) {
                before += w < warp ? warp_hits[w] : 0;
                total += warp_hits[w];
            }
            if (hit) hits[before + __popc(m & ((1u << lane) - 1u))] = j;
            __syncthreads();
            for (int64_t i = threadIdx.x; total && i < inner; i += PD_CU_THREADS) {
                float acc = 0.0f;
                for (int q = 0; q < total; q++) acc += ybase[hits[q] * inner + i];
                drow[i] += acc;
            }
            __syncthreads(); /* hits and warp_hits are rewritten by the next chunk */
        }
    }
}

/* Past this many index comparisons (outer * len * nidx) the ordered scan
 * would cost more than the step; the atomic scatter takes over (its sums in
 * no fixed order: docs/CUDA.md). An embedding of 50257 rows and 4096 tokens
 * is 2^27.6. */
#define PD_CU_GATHER_ORDERED_MAX ((double)(1ull << 34))

extern "C" pd_status pd__cu_gather_bwd(pd__cuda_ctx *c, float *ddata, const float *dy, const void *idx, bool idx64,
                                       int64_t outer, int64_t axis_len, int64_t nidx, int64_t inner) {
    int64_t n = outer * nidx * inner;
    if (n <= 0 || axis_len <= 0) return PD_OK;
    if ((double)outer * (double)axis_len * (double)nidx <= PD_CU_GATHER_ORDERED_MAX) {
        int64_t nrows = outer * axis_len;
        unsigned blocks = (unsigned)(nrows < 65535 * 8 ? nrows : 65535 * 8);
        k_gather_bwd_rows<<<blocks, PD_CU_THREADS, 0, c->stream>>>(ddata, dy, idx, idx64, axis_len, nidx, inner, nrows,
                                                                   c->flag);
    } else {
        k_scatter_add<<<pd__cu_blocks(n), PD_CU_THREADS, 0, c->stream>>>(ddata, dy, idx, idx64, axis_len, nidx, inner,
                                                                           n, c->flag);
    }
    PD_CU_LAUNCHED();
    return PD_OK;
}
