/* nn_common.h - the untyped helpers the CPU nn kernels share: nn.c includes
 * it before their typed bodies (nn_impl.h), so that forward and backward
 * walk the same windows, split the same shapes and draw the same Dropout
 * masks.
 *
 * Threads, scratch sizes, odometers over multi-indices, the output ranges of
 * a sliding window, the pools' divisors, Resize's taps, the losses' options, Dropout's two
 * generators (numpy's MT19937 for ONNX's training_mode input, a counter-based
 * one for training sessions) and the dtype dispatch. Private; static inline.
 */
#ifndef PD_NN_COMMON_H
#define PD_NN_COMMON_H

#include "../../core/shape_nn.h"
#include "fastmath.h"
#include "omp_for.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
static inline int pd__nthreads(const pd__exec *x) { return x->threads > 0 ? x->threads : omp_get_max_threads(); }
#else
static inline int pd__nthreads(const pd__exec *x) {
    (void)x;
    return 1;
}
#endif

/* float32 Conv on oneDNN (dnnl.c): *done = false when oneDNN is absent,
 * switched off (PD_NO_ONEDNN=1) or declines the geometry, and the caller
 * takes its im2col path. The backward ADDS into dX and dW (either may be NULL). */
pd_status pd__dnnl_conv(pd__exec *x, const pd__win *w, int64_t group, const pd_tensor *X, const pd_tensor *W,
                        const pd_tensor *B, pd_tensor *Y, bool *done);
pd_status pd__dnnl_conv_bwd(pd__exec *x, const pd__win *w, int64_t group, const pd_tensor *X, const pd_tensor *W,
                            const float *dY, float *dX, float *dW, bool *done);
/* C = alpha op(A) op(B) + beta C, row-major, small, on oneDNN's sgemm and one
 * thread; false when oneDNN is absent or switched off (the caller uses BLAS). */
bool pd__dnnl_sgemm1(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                     const float *B, int64_t ldb, float beta, float *C, int64_t ldc);
/* Primitive runs and declined geometries so far (tests), and freeing the
 * process's primitive cache (tests that check for leaks). */
void pd__dnnl_stats(int64_t *ran, int64_t *declined);
void pd__dnnl_release(void);

/* Conv and ConvTranspose stage at most this much im2col data per chunk of images. */
#define PD_NN_CHUNK_BYTES ((size_t)64 << 20)

static inline int64_t prod64(int n, const int64_t *v) {
    int64_t p = 1;
    for (int i = 0; i < n; i++) p *= v[i];
    return p;
}

/* Scratch for a*b elements of `size` bytes (NULL with the error set). */
static inline void *pd__scratch_n(pd__exec *x, int64_t a, int64_t b, size_t size) {
    int64_t n;
    if (!pd__mul_ok(a, b, &n) || !pd__mul_ok(n, (int64_t)size, &n)) {
        pd__err(PD_ERR_NOMEM, "scratch of %lld x %lld elements overflows", (long long)a, (long long)b);
        return NULL;
    }
    return pd__scratch(x, n < 64 ? 64 : (size_t)n);
}

/* Odometers over multi-indices, last dim fastest. */
static inline void odo_next(int64_t *idx, const int64_t *dims, int n) {
    for (int i = n - 1; i >= 0; i--) {
        if (++idx[i] < dims[i]) return;
        idx[i] = 0;
    }
}

/* The batch layout of numpy matmul A (..., M, K) x B (..., K, N): 1-D operands
 * promoted, batch dims broadcast. Batch q of the output reads matrix oa of A
 * and ob of B (pd__mm_next walks them); nbb == 1 means B is one matrix, so
 * all of A's rows can go through one product. */
typedef struct pd__mm {
    int nb;                   /* batch dims of the output */
    int64_t M, K, N, nbatch, nbb;
    int64_t ob[PD_MAX_DIMS];  /* output batch dims */
    int64_t sa[PD_MAX_DIMS], sb[PD_MAX_DIMS]; /* batch strides in matrices, 0 where broadcast */
    int64_t idx[PD_MAX_DIMS], oa, obb;        /* the walk: current batch index and matrices */
} pd__mm;

static inline void pd__mm_init(const pd_tensor *a, const pd_tensor *b, pd__mm *L) {
    int ra = a->ndim, rb = b->ndim;
    L->M = ra >= 2 ? a->shape[ra - 2] : 1;
    L->K = a->shape[ra - 1];
    L->N = rb >= 2 ? b->shape[rb - 1] : 1;
    int ba = ra > 2 ? ra - 2 : 0, bb = rb > 2 ? rb - 2 : 0;
    L->nb = ba > bb ? ba : bb;
    L->nbatch = L->nbb = 1;
    int64_t stra = 1, strb = 1;
    for (int i = L->nb - 1; i >= 0; i--) {
        int ia = i - (L->nb - ba), ib = i - (L->nb - bb);
        int64_t da = ia >= 0 ? a->shape[ia] : 1, db = ib >= 0 ? b->shape[ib] : 1;
        L->ob[i] = da == 1 ? db : da;
        L->sa[i] = da == 1 ? 0 : stra;
        L->sb[i] = db == 1 ? 0 : strb;
        stra *= da;
        strb *= db;
        L->nbatch *= L->ob[i];
        L->nbb *= db;
        L->idx[i] = 0;
    }
    L->oa = L->obb = 0;
}

/* Moves to the next output batch (call after using oa/obb of the current one). */
static inline void pd__mm_next(pd__mm *L) {
    odo_next(L->idx, L->ob, L->nb);
    L->oa = L->obb = 0;
    for (int i = 0; i < L->nb; i++) {
        L->oa += L->idx[i] * L->sa[i];
        L->obb += L->idx[i] * L->sb[i];
    }
}

static inline void odo_unflat(int64_t flat, const int64_t *dims, int n, int64_t *idx) {
    for (int i = n - 1; i >= 0; i--) {
        idx[i] = flat % dims[i];
        flat /= dims[i];
    }
}

/* The matrices of output batch q: A's at oa, B's at ob (in matrices). */
static inline void pd__mm_at(const pd__mm *L, int64_t q, int64_t *oa, int64_t *ob) {
    int64_t idx[PD_MAX_DIMS];
    odo_unflat(q, L->ob, L->nb, idx);
    *oa = *ob = 0;
    for (int i = 0; i < L->nb; i++) {
        *oa += idx[i] * L->sa[i];
        *ob += idx[i] * L->sb[i];
    }
}

/* Threads to split a batched product's batches over: attention's many small
 * products (a ViT's 65x64 by 64x65) are too small for OpenBLAS to split, so
 * each thread takes whole products (OpenBLAS's OpenMP build runs one thread
 * inside a parallel region); big ones (1: none) FN(gemm) splits itself. */
#define PD_MM_SMALL ((int64_t)1 << 21) /* M*N*K of a product too small for BLAS to split */

/* BatchNormalization's planes under PD_BN_ROW values (a ResNet's last
 * stages: 2x2 and 1x1) run PD_BN_CHANS channels at a time, images outer:
 * per row of a channel they cost more than their few values. */
#define PD_BN_ROW 8
#define PD_BN_CHANS 64

static inline int64_t pd__min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Eight running sums added in one fixed order, ((0+1)+(2+3))+((4+5)+(6+7)):
 * the reductions that keep eight lanes (so they vectorize) end with it, and
 * give the same bits on every run and clone. */
static inline double pd__lanes8(const double *a) {
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

/* Threads for one matrix product C (M, N) = A (M, K) B (K, N) outside a
 * parallel region: its larger side is split in parts of at least 64 and each
 * thread makes one single-threaded call. 5-15% faster than OpenBLAS's own
 * split on a transformer's products with 2 threads (median, this 2-core VM).
 * 1: one call, on the calling thread (pd__one_thread); always for a product
 * of at most PD_MM_SMALL multiply-adds, so that a batched product's small
 * matrices (attention's) give the same bits at every thread count. */
static inline int pd__gemm_threads(int64_t M, int64_t N, int64_t K) {
#ifdef _OPENMP
    if (omp_in_parallel() || M * N * K <= PD_MM_SMALL) return 1;
    int nt = omp_get_max_threads();
    int64_t most = (M >= N ? M : N) / 64;
    return most < nt ? (int)(most > 1 ? most : 1) : nt;
#else
    (void)M, (void)N, (void)K;
    return 1;
#endif
}
/* The library call that follows on the calling thread alone: OpenBLAS's
 * OpenMP build and oneDNN thread a call by omp_get_max_threads(), and
 * OpenBLAS's split of a product pd__gemm_threads leaves whole costs more
 * than it saves (the MLP's 1024x10 layer took twice as long on 2 threads).
 * Sets this thread's count only; returns the count to give back to
 * pd__one_thread_end (0: nothing changed). */
static inline int pd__one_thread(void) {
#ifdef _OPENMP
    int was = omp_get_max_threads();
    if (was == 1) return 0;
    omp_set_num_threads(1);
    return was;
#else
    return 0;
#endif
}
static inline void pd__one_thread_end(int was) {
#ifdef _OPENMP
    if (was) omp_set_num_threads(was);
#else
    (void)was;
#endif
}
static inline int pd__mm_batch_threads(const pd__mm *L) {
#ifdef _OPENMP
    int nt = omp_get_max_threads();
    if (nt < 2 || L->nbatch < 2 * (int64_t)nt || L->M * L->N * L->K > PD_MM_SMALL) return 1;
    return nt;
#else
    (void)L;
    return 1;
#endif
}

/* [lo, hi): the o in [0, n) with 0 <= o*s + p < len (s > 0). */
static inline void out_range(int64_t p, int64_t s, int64_t len, int64_t n, int64_t *lo, int64_t *hi) {
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
static inline bool outer_offset(const pd__win *w, const int64_t *o, const int64_t *k, const int64_t *size,
                                int64_t *off) {
    int64_t v = 0;
    for (int i = 0; i < w->nsp - 1; i++) {
        int64_t pos = o[i] * w->s[i] - w->pb[i] + k[i] * w->d[i];
        if (pos < 0 || pos >= size[i]) return false;
        v = v * size[i] + pos;
    }
    *off = v;
    return true;
}

/* The window with input and output swapped: im2col over it is the adjoint of
 * col2im over w and the other way round (Conv's backward reads ConvTranspose's
 * forward machinery, and ConvTranspose's backward Conv's). */
static inline pd__win win_swap(const pd__win *w) {
    pd__win v = *w;
    memcpy(v.in, w->out, sizeof v.in);
    memcpy(v.out, w->in, sizeof v.out);
    return v;
}

/* tap[k * OUT + o]: the flat offset in an input plane that tap k reads at
 * output position o, or -1 in the padding. live: the taps that read the
 * input somewhere (a 3x3 window with pad 1 at a 1x1 output: the middle one);
 * returns their count. */
static inline int64_t conv_few_taps(const pd__win *w, int64_t *tap, int64_t *live) {
    int ns = w->nsp;
    int64_t K = prod64(ns, w->k), OUT = prod64(ns, w->out), nl = 0;
    for (int64_t kr = 0; kr < K; kr++) {
        int64_t kk[PD_MAX_DIMS], oi[PD_MAX_DIMS];
        bool any = false;
        odo_unflat(kr, w->k, ns, kk);
        for (int64_t o = 0; o < OUT; o++) {
            odo_unflat(o, w->out, ns, oi);
            int64_t v = 0;
            for (int i = 0; i < ns && v >= 0; i++) {
                int64_t pos = oi[i] * w->s[i] - w->pb[i] + kk[i] * w->d[i];
                v = pos < 0 || pos >= w->in[i] ? -1 : v * w->in[i] + pos;
            }
            tap[kr * OUT + o] = v;
            any = any || v >= 0;
        }
        if (any) live[nl++] = kr;
    }
    return nl;
}

/* cnt: for each dim i, for each output position o of it, how many taps the
 * average divides by: those inside X, or with count_include_pad those inside X
 * and its declared pads (not the extra of ceil_mode). */
static inline void pool_counts(const pd__win *w, bool include_pad, int64_t *cnt) {
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

/* Resize's taps: for output position o of axis d (k = sum of out[0..d-1] + o),
 * the input positions ti[T k .. T k + T-1] with weights tw[T k .. T k + T-1],
 * T = r->taps: one for nearest and an axis left as it is, two for linear,
 * four for cubic, 2 / scale or 4 / scale with antialias downsampling (the
 * rest weigh 0). A position tf_crop_and_resize maps outside the input has
 * ti = -1 and no weight: the output there is the extrapolation value. */
static inline double rsz_coord(const pd__rsz *r, int d, int64_t o) {
    double in = (double)r->in[d], out = r->outf[d], s = r->scale[d];
    switch (r->ctm) {
    case PD_RSZ_HALF_PIXEL: return ((double)o + 0.5) / s - 0.5;
    case PD_RSZ_PYTORCH_HALF_PIXEL: return out > 1 ? ((double)o + 0.5) / s - 0.5 : 0;
    case PD_RSZ_ALIGN_CORNERS: return out > 1 ? (double)o * (in - 1) / (out - 1) : 0;
    case PD_RSZ_HALF_PIXEL_SYMMETRIC: /* the input's centre on the output's, when the size was rounded */
        return in / 2 * (1 - (double)r->out[d] / out) + ((double)o + 0.5) / s - 0.5;
    case PD_RSZ_TF_CROP_AND_RESIZE: { /* the roi's span [start, end] of the input spread over the output */
        double span = r->roi[r->ndim + d] - r->roi[d], start = r->roi[d] * (in - 1);
        if (r->roi_f32) span = (float)span, start = (float)start; /* an output on an edge or a tie stays there */
        return (out > 1 ? (double)o * span * (in - 1) / (out - 1) : span * (in - 1) / 2) + start;
    }
    default: return (double)o / s;
    }
}

/* The kernels of linear and cubic (Keys, coefficient A) interpolation at distance t. */
static inline double rsz_kernel(const pd__rsz *r, double t) {
    double A = r->cubic_a;
    t = fabs(t);
    if (!r->cubic) return t < 1 ? 1 - t : 0;
    if (t <= 1) return ((A + 2) * t - (A + 3)) * t * t + 1;
    return t < 2 ? ((A * t - 5 * A) * t + 8 * A) * t - 4 * A : 0;
}

/* Taps at coordinate c, as ONNX's reference picks them: nt neighbours of c
 * (nt = 4 for cubic; with antialias, the kernel stretched by 1 / scale
 * covers nt = 2 / scale or 4 / scale), an integral c counting as 1 past the
 * position below it; the input extended by its edge values, or with
 * exclude_outside the taps outside it weigh 0. With antialias the weights
 * are renormalised to sum 1, as a stretched kernel's do not. */
static inline void rsz_wide(const pd__rsz *r, int d, double c, int nt, int64_t *ti, double *tw) {
    double f = floor(c), t = c == f ? 1 : c - f, s = r->antialias && r->scale[d] < 1 ? r->scale[d] : 1, sum = 0;
    int64_t first = (int64_t)(c - t) + 1 - nt / 2, last = r->in[d] - 1;
    for (int j = 0; j < nt; j++) {
        int64_t i = first + j;
        tw[j] = rsz_kernel(r, s * (double)(1 - nt / 2 + j - t));
        if (r->exclude_outside && (i < 0 || i > last)) tw[j] = 0;
        sum += tw[j];
        ti[j] = i < 0 ? 0 : i > last ? last : i;
    }
    if ((r->exclude_outside || r->antialias) && sum != 0)
        for (int j = 0; j < nt; j++) tw[j] /= sum;
}

static inline void resize_taps(const pd__rsz *r, int64_t *ti, double *tw) {
    int64_t k = 0;
    for (int d = 0; d < r->ndim; d++) {
        int64_t last = r->in[d] - 1;
        bool crop = r->ctm == PD_RSZ_TF_CROP_AND_RESIZE, full = r->roi[d] == 0 && r->roi[r->ndim + d] == 1;
        bool wide = r->antialias && r->scale[d] < 1;
        int nt = wide ? (int)(-2 * floor((r->cubic ? -2 : -1) / r->scale[d])) : 4;
        for (int64_t o = 0; o < r->out[d]; o++, k++) {
            double c = rsz_coord(r, d, o);
            int64_t *i = ti + r->taps * k;
            double *w = tw + r->taps * k;
            for (int j = 0; j < r->taps; j++) i[j] = 0, w[j] = 0;
            w[0] = 1;
            if (r->out[d] == r->in[d] && r->scale[d] == 1 && (!crop || full)) { /* an axis not resized: the identity */
                i[0] = o;
            } else if (crop && (c < 0 || c > (double)last)) {
                i[0] = -1, w[0] = 0;
            } else if (r->cubic || wide) {
                rsz_wide(r, d, c, nt, i, w);
            } else if (r->linear) {
                c = c < 0 ? 0 : c > (double)last ? (double)last : c;
                i[0] = (int64_t)floor(c);
                i[1] = i[0] + 1 > last ? last : i[0] + 1;
                w[1] = i[1] == i[0] ? 0 : c - (double)i[0];
                w[0] = 1 - w[1];
            } else {
                double f = floor(c);
                switch (r->nearest) {
                case PD_RSZ_ROUND_PREFER_FLOOR: c = c == f + 0.5 ? f : round(c); break;
                case PD_RSZ_ROUND_PREFER_CEIL: c = c == f + 0.5 ? f + 1 : round(c); break;
                case PD_RSZ_FLOOR: c = f; break;
                default: c = ceil(c); break;
                }
                i[0] = c < 0 ? 0 : c > (double)last ? last : (int64_t)c;
            }
        }
    }
}

/* (N, C, D) view of the losses' scores and their options. */
typedef struct pd__loss {
    int64_t N, C, D, ii;
    bool has_ii;
    int red;
} pd__loss;

static inline pd_status loss_opts(const pd__node *n, const pd_tensor *X, pd__loss *l) {
    l->N = X->shape[0];
    l->C = X->shape[1];
    l->D = prod64(X->ndim - 2, X->shape + 2);
    l->has_ii = pd__attr_get(n, "ignore_index") != NULL;
    l->ii = pd__attr_i(n, "ignore_index", 0);
    l->red = pd__loss_reduction(n);
    if (l->red < 0) return pd__err(PD_ERR_UNSUPPORTED, "unknown reduction '%s'", pd__attr_s(n, "reduction", ""));
    return PD_OK;
}

/* Offset into a parameter p broadcastable to shape (nd dims) of the dense
 * element at multi-index idx. */
static inline int64_t param_offset(const pd_tensor *p, int nd, const int64_t *idx) {
    int64_t off = 0;
    for (int j = 0; j < p->ndim; j++) {
        int sj = nd - p->ndim + j;
        off = off * p->shape[j] + (p->shape[j] == 1 ? 0 : idx[sj]);
    }
    return off;
}

/* Expands a parameter broadcastable to shape (nd dims) into D dense elements at dst. */
static inline void expand_param(const pd_tensor *p, int nd, const int64_t *shape, int64_t D, pd_dtype dt, void *dst) {
    int64_t idx[PD_MAX_DIMS] = {0};
    for (int64_t i = 0; i < D; i++) {
        pd__set_f(dt, dst, i, pd__get_f(p->dtype, p->data, param_offset(p, nd, idx)));
        odo_next(idx, shape, nd);
    }
}

/* ---- Dropout's masks ------------------------------------------------------------------------- */

/* MT19937 as numpy's legacy RandomState: np.random.seed(s) then uniform(0, 1). */
typedef struct pd__mt {
    uint32_t s[624];
    int i;
} pd__mt;

static inline void mt_seed(pd__mt *m, uint32_t seed) {
    m->s[0] = seed;
    for (int i = 1; i < 624; i++) m->s[i] = 1812433253u * (m->s[i - 1] ^ (m->s[i - 1] >> 30)) + (uint32_t)i;
    m->i = 624;
}

static inline uint32_t mt_next(pd__mt *m) {
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

static inline double mt_uniform(pd__mt *m) {
    uint32_t a = mt_next(m) >> 5, b = mt_next(m) >> 6;
    return (a * 67108864.0 + b) / 9007199254740992.0;
}

/* SplitMix64's finalizer: a counter through it is a good generator. */
static inline uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The key of a node's mask in a training step: the session's seed and the
 * node's name (FNV-1a), so nodes differ and steps differ. */
static inline uint64_t dropout_key(uint64_t seed, const char *name) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *p = name ? name : ""; *p; p++) h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
    return mix64(seed ^ mix64(h));
}

/* Uniform in [0, 1) for element i: depends on (key, i) only, so any thread
 * and the backward draw the same value. */
static inline double dropout_u(uint64_t key, int64_t i) {
    return (double)(mix64(key + (uint64_t)(i + 1) * 0x9e3779b97f4a7c15ull) >> 11) * 0x1p-53;
}

typedef enum pd__drop_mode {
    PD_DROP_NONE = 0, /* identity */
    PD_DROP_ONNX,     /* ONNX's training_mode input: MT19937 from the seed attribute */
    PD_DROP_SESSION   /* x->training: counter-based, from x->seed and the node's name */
} pd__drop_mode;

/* What a Dropout node does in this run, and its ratio. A training session
 * (x->training) drops whatever the model says, with the ratio from the
 * attribute (opsets < 12) or input 1 (default 0.5); otherwise only ONNX's
 * training_mode input turns it on. */
static inline pd__drop_mode dropout_mode(const pd__exec *x, const pd__node *n, pd_tensor *const *in, double *ratio) {
    const pd_tensor *R = n->nin > 1 ? in[1] : NULL, *TM = n->nin > 2 ? in[2] : NULL;
    double r = 0.5;
    bool onnx_train = false;
    if (n->opset >= 12) {
        if (R) r = pd__get_f(R->dtype, R->data, 0);
        onnx_train = TM && pd__get_i(TM->dtype, TM->data, 0) != 0;
    } else {
        r = pd__attr_f(n, "ratio", 0.5f);
    }
    *ratio = r;
    if (r == 0) return PD_DROP_NONE;
    if (x->training) return PD_DROP_SESSION;
    return onnx_train ? PD_DROP_ONNX : PD_DROP_NONE;
}

/* keep (numel) for a mode other than NONE; ratio must be in (0, 1). */
static inline void dropout_fill(const pd__exec *x, const pd__node *n, pd__drop_mode mode, double ratio,
                                int64_t numel, uint8_t *keep) {
    if (mode == PD_DROP_ONNX) {
        pd__mt mt;
        mt_seed(&mt, (uint32_t)pd__attr_i(n, "seed", 0));
        for (int64_t i = 0; i < numel; i++) keep[i] = mt_uniform(&mt) >= ratio;
        return;
    }
    uint64_t key = dropout_key(x->seed, n->name);
    int nt = pd__nthreads(x);
    PD_OMP_FOR(nt, numel > 65536)
    for (int64_t i = 0; i < numel; i++) keep[i] = dropout_u(key, i) >= ratio;
}

/* ---- dispatch ------------------------------------------------------------------------------- */

static inline pd_status bad_dtype(pd_dtype t) {
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
static inline const pd_tensor *opt_in(const pd__node *n, pd_tensor *const *in, int i) {
    return i < n->nin ? in[i] : NULL;
}
static inline pd_tensor *opt_out(const pd__node *n, pd_tensor *const *out, int i) {
    return i < n->nout ? out[i] : NULL;
}

#endif
