/* blas.cu - row-major (batched) matrix products on cuBLAS, in the context's
 * precision: fp32 (COMPUTE_32F), tf32 (COMPUTE_32F_FAST_TF32) or bf16
 * products (COMPUTE_32F_FAST_16BF), fp32 storage in every case.
 *
 * Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS
 * gets B before A and N before M, with the leading dimensions of the stored
 * (row-major) matrices.
 */
#include "internal.cuh"

static cublasComputeType_t cu_compute(pd__cuda_precision p) {
    switch (p) {
    case PD_CUDA_TF32: return CUBLAS_COMPUTE_32F_FAST_TF32;
    case PD_CUDA_BF16: return CUBLAS_COMPUTE_32F_FAST_16BF;
    default: return CUBLAS_COMPUTE_32F;
    }
}

extern "C" pd_status pd__cu_gemm(pd__cuda_ctx *c, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                                 const float *A, const float *B, float beta, float *C, int64_t batch, int64_t sA,
                                 int64_t sB, int64_t sC) {
    if (M <= 0 || N <= 0 || batch <= 0) return PD_OK;
    if (batch > 1 && sC == 0) return pd__err(PD_ERR_INVALID, "pd__cu_gemm: batched products into one matrix");
    if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX || batch > INT32_MAX)
        return pd__err(PD_ERR_UNSUPPORTED, "matrix product of %lld x %lld x %lld is too large for cuBLAS", (long long)M,
                       (long long)N, (long long)K);
    if (K == 0) { /* C = beta C: cuBLAS does that too, but say it plainly */
        if (beta == 1.0f) return PD_OK;
    }
    /* stored row-major: A is (M, K), or (K, M) when ta; B is (K, N), or (N, K) when tb */
    int lda = (int)(ta ? M : K), ldb = (int)(tb ? K : N), ldc = (int)N;
    if (lda < 1) lda = 1;
    if (ldb < 1) ldb = 1;
    cublasOperation_t opA = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opB = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasComputeType_t ct = cu_compute(c->precision);
    if (batch == 1) {
        PD_CUBLAS(cublasGemmEx(c->blas, opB, opA, (int)N, (int)M, (int)K, &alpha, B, CUDA_R_32F, ldb, A, CUDA_R_32F,
                               lda, &beta, C, CUDA_R_32F, ldc, ct, CUBLAS_GEMM_DEFAULT));
    } else {
        PD_CUBLAS(cublasGemmStridedBatchedEx(c->blas, opB, opA, (int)N, (int)M, (int)K, &alpha, B, CUDA_R_32F, ldb,
                                             (long long)sB, A, CUDA_R_32F, lda, (long long)sA, &beta, C, CUDA_R_32F,
                                             ldc, (long long)sC, (int)batch, ct, CUBLAS_GEMM_DEFAULT));
    }
    return PD_OK;
}
