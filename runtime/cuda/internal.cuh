/* internal.cuh - what the .cu files share: the context's layout, the check
 * macro family that turns CUDA, cuBLAS and cuDNN error codes into pd_status
 * (recording file:line and the failing call), launch geometry and a block
 * reduction. C++ (nvcc) only; C code sees cuda.h and kernels.h.
 */
#ifndef PD_CUDA_INTERNAL_CUH
#define PD_CUDA_INTERNAL_CUH

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <stdint.h>

#include "dcache.h"
#include "kernels.h"

/* ---- foreign error codes -> pd_status ------------------------------------------------------------
 * PD_CU(cudaMalloc(...)); PD_CUBLAS(cublasGemmEx(...)); PD_CUDNN(cudnnConvolutionForward(...));
 * PD_CU_LAUNCHED() after a <<<...>>> launch. Each returns from the enclosing
 * function (which returns pd_status) with the error set. */
extern "C" pd_status pd__cuda_fail_rt(cudaError_t e, const char *call, const char *file, int line);
extern "C" pd_status pd__cuda_fail_blas(cublasStatus_t e, const char *call, const char *file, int line);
extern "C" pd_status pd__cuda_fail_dnn(cudnnStatus_t e, const char *call, const char *file, int line);

#define PD_CU(call)                                                                            \
    do {                                                                                       \
        cudaError_t pd__e = (call);                                                            \
        if (pd__e != cudaSuccess) return pd__cuda_fail_rt(pd__e, #call, __FILE__, __LINE__);   \
    } while (0)
#define PD_CUBLAS(call)                                                                                \
    do {                                                                                               \
        cublasStatus_t pd__e = (call);                                                                 \
        if (pd__e != CUBLAS_STATUS_SUCCESS) return pd__cuda_fail_blas(pd__e, #call, __FILE__, __LINE__); \
    } while (0)
#define PD_CUDNN(call)                                                                                \
    do {                                                                                              \
        cudnnStatus_t pd__e = (call);                                                                 \
        if (pd__e != CUDNN_STATUS_SUCCESS) return pd__cuda_fail_dnn(pd__e, #call, __FILE__, __LINE__); \
    } while (0)
#define PD_CU_LAUNCHED() PD_CU(cudaGetLastError())

/* ---- the context ---------------------------------------------------------------------------------- */

struct pd__cu_conv_entry; /* dnn.cu: descriptors and algorithms of one convolution geometry */

struct pd__cuda_ctx {
    int device;
    pd__cuda_precision precision;
    cudaStream_t stream;
    cublasHandle_t blas;
    cudnnHandle_t dnn;
    pd__dcache mem; /* the caching allocator's bookkeeping (dcache.h) */
    /* work outside the stream that may wait for another process (pd__cuda_set_pending) */
    bool (*pending)(void *arg);
    void *pending_arg;
    /* convolution geometries seen (dnn.cu) */
    struct pd__cu_conv_entry *conv;
    int nconv, conv_cap;
    /* device error flag (an int): kernels set it on bad indices or labels */
    int *flag;
    /* pd__cuda_timer_start/stop (the profiler): created on first use */
    cudaEvent_t ev0, ev1;
};

/* ---- launches ----------------------------------------------------------------------------------- */

#define PD_CU_THREADS 256

/* Blocks for n threads, capped: kernels stride over the rest (grid-stride loops). */
static inline unsigned pd__cu_blocks(int64_t n) {
    int64_t b = (n + PD_CU_THREADS - 1) / PD_CU_THREADS;
    if (b > 65535 * 8) b = 65535 * 8;
    return (unsigned)(b < 1 ? 1 : b);
}

#define PD_CU_FOR(i, n) \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)blockDim.x * gridDim.x)

/* Sum of v over the block (blockDim.x a multiple of 32, at most 1024); the
 * result is valid in every thread. sh: 32 elements of shared memory. */
template <typename T> __device__ inline T pd__cu_block_sum(T v, T *sh) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads(); /* sh may still be read from a previous call */
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    T s = 0;
    for (int w = 0; w < nw; w++) s += sh[w];
    return s;
}

/* The block's largest v (fmaxf: NaN loses, as in a sequential fmaxf loop),
 * valid in every thread; blockDim.x as for pd__cu_block_sum. */
__device__ inline float pd__cu_block_max(float v, float *sh) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    float m = sh[0];
    for (int w = 1; w < nw; w++) m = fmaxf(m, sh[w]);
    return m;
}

/* Threads for one block per row of len elements: a multiple of 32, at most
 * PD_CU_THREADS, no more than the row needs. */
static inline unsigned pd__cu_row_threads(int64_t len) {
    int64_t t = (len + 31) / 32 * 32;
    return (unsigned)(t < 32 ? 32 : t > PD_CU_THREADS ? PD_CU_THREADS : t);
}

#endif
