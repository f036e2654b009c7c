/* dnn.cu - convolution on cuDNN: forward, backward data and backward filter.
 *
 * How it works: docs/INTERNALS.md, "runtime/cuda/dnn.cu".
 */
#include "internal.cuh"

#include <string.h>

#define PD_CU_CONV_WS_LIMIT ((size_t)512 << 20)

struct pd__cu_conv_entry {
    pd__cu_conv key; /* zero-padded: compared with memcmp */
    cudnnMathType_t math;
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    bool have_fwd, have_bd, have_bf;
    cudnnConvolutionFwdAlgo_t fwd;
    cudnnConvolutionBwdDataAlgo_t bd;
    cudnnConvolutionBwdFilterAlgo_t bf;
    cudnnMathType_t math_fwd, math_bd, math_bf; /* each chosen algorithm's own math type */
    size_t ws_fwd, ws_bd, ws_bf;
};

static void cu_conv_entry_free(pd__cu_conv_entry *e) {
    if (e->x) (void)cudnnDestroyTensorDescriptor(e->x);
    if (e->y) (void)cudnnDestroyTensorDescriptor(e->y);
    if (e->w) (void)cudnnDestroyFilterDescriptor(e->w);
    if (e->conv) (void)cudnnDestroyConvolutionDescriptor(e->conv);
}

void pd__cu_conv_cache_free(pd__cuda_ctx *c) {
    for (int i = 0; i < c->nconv; i++) cu_conv_entry_free(&c->conv[i]);
    PD_FREE(c->conv);
    c->conv = NULL;
    c->nconv = c->conv_cap = 0;
}

static cudnnMathType_t cu_math(pd__cuda_precision p) {
    return p == PD_CUDA_FP32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
}

/* Whether an algorithm's math type keeps the precision's promise: FMA
 * alone for fp32 (CUDNN_DEFAULT_MATH may use TF32 on Ampere and later). */
static bool cu_math_ok(cudnnMathType_t m, cudnnMathType_t want) {
    if (want == CUDNN_FMA_MATH) return m == CUDNN_FMA_MATH;
    return m == CUDNN_TENSOR_OP_MATH || m == CUDNN_FMA_MATH || m == CUDNN_DEFAULT_MATH;
}

static pd_status cu_desc_packed(cudnnTensorDescriptor_t d, int nd, const int *dims) {
    int str[5];
    int s = 1;
    for (int i = nd - 1; i >= 0; i--) {
        str[i] = s;
        s *= dims[i];
    }
    PD_CUDNN(cudnnSetTensorNdDescriptor(d, CUDNN_DATA_FLOAT, nd, dims, str));
    return PD_OK;
}

static pd_status cu_conv_describe(pd__cuda_ctx *c, pd__cu_conv_entry *e) {
    const pd__cu_conv *g = &e->key;
    /* 1-D as 2-D: a leading spatial dim of size 1 */
    int ns = g->nsp == 1 ? 2 : g->nsp, sh = ns - g->nsp;
    int xd[5], yd[5], wd[5], pad[3], str[3], dil[3];
    xd[0] = (int)g->N;
    xd[1] = (int)g->C;
    yd[0] = (int)g->N;
    yd[1] = (int)g->K;
    wd[0] = (int)g->K;
    wd[1] = (int)(g->C / g->group);
    for (int i = 0; i < ns; i++) {
        int j = i - sh; /* the geometry's dim, or < 0 for the added one */
        xd[2 + i] = j < 0 ? 1 : (int)g->in[j];
        yd[2 + i] = j < 0 ? 1 : (int)g->out[j];
        wd[2 + i] = j < 0 ? 1 : (int)g->k[j];
        pad[i] = j < 0 ? 0 : (int)g->p[j];
        str[i] = j < 0 ? 1 : (int)g->s[j];
        dil[i] = j < 0 ? 1 : (int)g->d[j];
    }
    PD_CUDNN(cudnnCreateTensorDescriptor(&e->x));
    PD_CUDNN(cudnnCreateTensorDescriptor(&e->y));
    PD_CUDNN(cudnnCreateFilterDescriptor(&e->w));
    PD_CUDNN(cudnnCreateConvolutionDescriptor(&e->conv));
    PD_TRY(cu_desc_packed(e->x, ns + 2, xd));
    PD_TRY(cu_desc_packed(e->y, ns + 2, yd));
    PD_CUDNN(cudnnSetFilterNdDescriptor(e->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, ns + 2, wd));
    PD_CUDNN(cudnnSetConvolutionNdDescriptor(e->conv, ns, pad, str, dil, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    PD_CUDNN(cudnnSetConvolutionGroupCount(e->conv, (int)g->group));
    e->math = cu_math(c->precision);
    PD_CUDNN(cudnnSetConvolutionMathType(e->conv, e->math));
    /* the output size cuDNN computes must be ours */
    int od[5];
    PD_CUDNN(cudnnGetConvolutionNdForwardOutputDim(e->conv, e->x, e->w, ns + 2, od));
    for (int i = 0; i < ns + 2; i++)
        if (od[i] != yd[i])
            return pd__err(PD_ERR_INTERNAL, "cuDNN computes output dim %d as %d, the shape rule as %d", i, od[i],
                           yd[i]);
    return PD_OK;
}

static pd_status cu_conv_entry(pd__cuda_ctx *c, const pd__cu_conv *g, pd__cu_conv_entry **out) {
    if (g->nsp < 1 || g->nsp > 3) return pd__err(PD_ERR_UNSUPPORTED, "convolution over %d spatial dims", g->nsp);
    if (g->N > INT32_MAX || g->C > INT32_MAX || g->K > INT32_MAX || g->group < 1 || g->C % g->group)
        return pd__err(PD_ERR_UNSUPPORTED, "convolution geometry out of cuDNN's range");
    pd__cu_conv key;
    memset(&key, 0, sizeof key);
    key.nsp = g->nsp;
    key.N = g->N;
    key.C = g->C;
    key.K = g->K;
    key.group = g->group;
    for (int i = 0; i < g->nsp; i++) {
        key.in[i] = g->in[i];
        key.out[i] = g->out[i];
        key.k[i] = g->k[i];
        key.s[i] = g->s[i];
        key.d[i] = g->d[i];
        key.p[i] = g->p[i];
    }
    cudnnMathType_t math = cu_math(c->precision);
    for (int i = 0; i < c->nconv; i++)
        if (c->conv[i].math == math && !memcmp(&c->conv[i].key, &key, sizeof key)) {
            *out = &c->conv[i];
            return PD_OK;
        }
    if (c->nconv == c->conv_cap) {
        int cap = c->conv_cap ? c->conv_cap * 2 : 16;
        pd__cu_conv_entry *p = (pd__cu_conv_entry *)PD_REALLOC(c->conv, sizeof *p * (size_t)cap);
        if (!p) return pd__err(PD_ERR_NOMEM, "cannot grow the convolution cache");
        c->conv = p;
        c->conv_cap = cap;
    }
    pd__cu_conv_entry *e = &c->conv[c->nconv];
    memset(e, 0, sizeof *e);
    e->key = key;
    pd_status s = cu_conv_describe(c, e);
    if (s != PD_OK) {
        cu_conv_entry_free(e);
        return s;
    }
    c->nconv++;
    *out = e;
    return PD_OK;
}

/* The first algorithm of a heuristic list that succeeded, fits and uses the
 * entry's math mode (else the first that succeeded, fits and whose math
 * type the precision allows); its algorithm, workspace and math type. */
#define PD_CU_PICK(perf, cnt, math, algo_out, ws_out, math_out, what)                               \
    do {                                                                                            \
        int pick = -1;                                                                              \
        for (int i = 0; i < (cnt) && pick < 0; i++)                                                 \
            if ((perf)[i].status == CUDNN_STATUS_SUCCESS && (perf)[i].memory <= PD_CU_CONV_WS_LIMIT && \
                (perf)[i].mathType == (math))                                                       \
                pick = i;                                                                           \
        for (int i = 0; i < (cnt) && pick < 0; i++)                                                 \
            if ((perf)[i].status == CUDNN_STATUS_SUCCESS && (perf)[i].memory <= PD_CU_CONV_WS_LIMIT && \
                cu_math_ok((perf)[i].mathType, (math)))                                             \
                pick = i;                                                                           \
        if (pick < 0) return pd__err(PD_ERR_UNSUPPORTED, "cuDNN has no %s algorithm for this convolution", what); \
        *(algo_out) = (perf)[pick].algo;                                                            \
        *(ws_out) = (perf)[pick].memory;                                                            \
        *(math_out) = (perf)[pick].mathType;                                                        \
    } while (0)

static pd_status cu_pick_fwd(pd__cuda_ctx *c, pd__cu_conv_entry *e) {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int cnt = 0;
    PD_CUDNN(cudnnSetConvolutionMathType(e->conv, e->math)); /* the heuristics answer for the precision's mode */
    PD_CUDNN(cudnnGetConvolutionForwardAlgorithm_v7(c->dnn, e->x, e->w, e->conv, e->y,
                                                    CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &cnt, perf));
    PD_CU_PICK(perf, cnt, e->math, &e->fwd, &e->ws_fwd, &e->math_fwd, "forward");
    PD_CUDNN(cudnnSetConvolutionMathType(e->conv, e->math_fwd));
    PD_CUDNN(cudnnGetConvolutionForwardWorkspaceSize(c->dnn, e->x, e->w, e->conv, e->y, e->fwd, &e->ws_fwd));
    e->have_fwd = true;
    return PD_OK;
}

static pd_status cu_pick_bd(pd__cuda_ctx *c, pd__cu_conv_entry *e) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int cnt = 0;
    PD_CUDNN(cudnnSetConvolutionMathType(e->conv, e->math)); /* the heuristics answer for the precision's mode */
    PD_CUDNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(c->dnn, e->w, e->y, e->conv, e->x,
                                                         CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &cnt, perf));
    PD_CU_PICK(perf, cnt, e->math, &e->bd, &e->ws_bd, &e->math_bd, "backward-data");
    PD_CUDNN(cudnnSetConvolutionMathType(e->conv, e->math_bd));
    PD_CUDNN(cudnnGetConvolutionBackwardDataWorkspaceSize(c->dnn, e->w, e->y, e->conv, e->x, e->bd, &e->ws_bd));
    e->have_bd = true;
    return PD_OK;
}

static pd_status cu_pick_bf(pd__cuda_ctx *c, pd__cu_conv_entry *e) {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    int cnt = 0;
    PD_CUDNN(cudnnSetConvolutionMathType(e->conv, e->math)); /* the heuristics answer for the precision's mode */
    PD_CUDNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(c->dnn, e->x, e->y, e->conv, e->w,
                                                           CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &cnt, perf));
    PD_CU_PICK(perf, cnt, e->math, &e->bf, &e->ws_bf, &e->math_bf, "backward-filter");
    PD_CUDNN(cudnnSetConvolutionMathType(e->conv, e->math_bf));
    PD_CUDNN(cudnnGetConvolutionBackwardFilterWorkspaceSize(c->dnn, e->x, e->y, e->conv, e->w, e->bf, &e->ws_bf));
    e->have_bf = true;
    return PD_OK;
}

/* dir 0: forward, 1: backward data, 2: backward filter */
static pd_status cu_conv_run(pd__cuda_ctx *c, const pd__cu_conv *g, int dir, float *out, const float *a,
                             const float *b) {
    if (g->N <= 0 || g->C <= 0 || g->K <= 0) return PD_OK;
    pd__cu_conv_entry *e = NULL;
    PD_TRY(cu_conv_entry(c, g, &e));
    if (dir == 0 && !e->have_fwd) PD_TRY(cu_pick_fwd(c, e));
    if (dir == 1 && !e->have_bd) PD_TRY(cu_pick_bd(c, e));
    if (dir == 2 && !e->have_bf) PD_TRY(cu_pick_bf(c, e));
    size_t wsb = dir == 0 ? e->ws_fwd : dir == 1 ? e->ws_bd : e->ws_bf;
    PD_CUDNN(cudnnSetConvolutionMathType(e->conv, dir == 0 ? e->math_fwd : dir == 1 ? e->math_bd : e->math_bf));
    void *ws = NULL;
    if (wsb) PD_TRY(pd__cuda_alloc(c, wsb, &ws));
    const float one = 1.0f, zero = 0.0f;
    cudnnStatus_t st;
    if (dir == 0) /* y = conv(x = a, w = b) */
        st = cudnnConvolutionForward(c->dnn, &one, e->x, a, e->w, b, e->conv, e->fwd, ws, wsb, &zero, e->y, out);
    else if (dir == 1) /* dx += conv^T(dy = a, w = b) */
        st = cudnnConvolutionBackwardData(c->dnn, &one, e->w, b, e->y, a, e->conv, e->bd, ws, wsb, &one, e->x, out);
    else /* dw += corr(x = b, dy = a) */
        st = cudnnConvolutionBackwardFilter(c->dnn, &one, e->x, b, e->y, a, e->conv, e->bf, ws, wsb, &one, e->w, out);
    pd__cuda_free(c, ws); /* stream-ordered: reused only by later work */
    if (st != CUDNN_STATUS_SUCCESS) return pd__cuda_fail_dnn(st, "cudnnConvolution*", __FILE__, __LINE__);
    return PD_OK;
}

extern "C" pd_status pd__cu_conv_fwd(pd__cuda_ctx *c, const pd__cu_conv *g, float *y, const float *x,
                                     const float *w) {
    return cu_conv_run(c, g, 0, y, x, w);
}

extern "C" pd_status pd__cu_conv_bwd_data(pd__cuda_ctx *c, const pd__cu_conv *g, float *dx, const float *dy,
                                          const float *w) {
    return cu_conv_run(c, g, 1, dx, dy, w);
}

extern "C" pd_status pd__cu_conv_bwd_filter(pd__cuda_ctx *c, const pd__cu_conv *g, float *dw, const float *dy,
                                            const float *x) {
    return cu_conv_run(c, g, 2, dw, dy, x);
}
