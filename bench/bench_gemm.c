/* bench_gemm.c - the CPU backend's float32 Gemm kernel (Y = A @ B, the
 * loader's fused Linear of a MatMul and an Add; --transB: A @ B^T, a Gemm as
 * exported for a 2-D input) on 1 thread and on T, alternately in one process: how
 * much a product of a model's shape gains from the second thread on this
 * machine, the bound on a GEMM-bound model's 2T / 1T (docs/PERF.md).
 *
 *   bench_gemm M N K [--threads T] [--iters I] [--transB]
 *
 * Prints one JSON line: the median ms at 1 and T threads, GFLOP/s, ratio. */
#include "../core/pd_internal.h"
#include "bench_common.h"

static pd_tensor matrix(int64_t r, int64_t c) {
    pd_tensor t = {PD_FLOAT, 2, {r, c}, malloc(sizeof(float) * (size_t)(r * c))};
    for (int64_t i = 0; t.data && i < r * c; i++) ((float *)t.data)[i] = (float)(i % 97) / 97.0f - 0.5f;
    return t;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: bench_gemm M N K [--threads T] [--iters I] [--transB]\n");
        return 2;
    }
    int64_t M = atoll(argv[1]), N = atoll(argv[2]), K = atoll(argv[3]);
    int threads = 2, iters = 30, trans = 0;
    for (int i = 4; i < argc; i++) {
        if (!strcmp(argv[i], "--transB")) trans = 1;
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
        else {
            fprintf(stderr, "bench_gemm: unknown argument %s\n", argv[i]);
            return 2;
        }
    }
    if (M <= 0 || N <= 0 || K <= 0 || threads < 1 || iters < 1) {
        fprintf(stderr, "bench_gemm: sizes, threads and iterations must be positive\n");
        return 2;
    }
    pd_tensor A = matrix(M, K), B = trans ? matrix(N, K) : matrix(K, N), Y = matrix(M, N);
    double *t1 = malloc(sizeof(double) * (size_t)iters), *tt = malloc(sizeof(double) * (size_t)iters);
    if (!A.data || !B.data || !Y.data || !t1 || !tt) {
        fprintf(stderr, "bench_gemm: out of memory\n");
        return 1;
    }
    pd__attr tb = {.name = (char *)"transB", .type = PD_A_INT, .i = trans};
    pd__node n = {.name = (char *)"gemm", .op_type = (char *)"Gemm", .domain = (char *)"", .op = PD_OP_GEMM,
                  .opset = 13, .nin = 2, .nout = 1, .nattr = 1, .attr = &tb};
    pd_tensor *in[2] = {&A, &B}, *out[1] = {&Y};
    pd__exec one = {.threads = 1}, many = {.threads = threads};
    for (int r = -3; r < iters; r++) { /* three warm-up rounds */
        pd__threads_use(1); /* as the backend sets it before every node (pd__cpu_run) */
        double a = bench_now();
        pd_status s1 = pd__cpu_kernels[PD_OP_GEMM](&one, &n, in, out);
        double b = bench_now();
        pd__threads_use(threads);
        pd_status s2 = pd__cpu_kernels[PD_OP_GEMM](&many, &n, in, out);
        double c = bench_now();
        if (s1 != PD_OK || s2 != PD_OK) {
            fprintf(stderr, "bench_gemm: %s\n", pd_last_error());
            return 1;
        }
        if (r >= 0) t1[r] = b - a, tt[r] = c - b;
    }
    double m1 = bench_median(t1, iters), mt = bench_median(tt, iters), flop = 2.0 * (double)M * (double)N * (double)K;
    printf("{\"M\": %lld, \"N\": %lld, \"K\": %lld, \"transB\": %d, \"threads\": %d, \"ms_1\": %.4f, "
           "\"ms_T\": %.4f, \"gflops_1\": %.1f, \"gflops_T\": %.1f, \"T_over_1\": %.2f}\n",
           (long long)M, (long long)N, (long long)K, trans, threads, m1 * 1e3, mt * 1e3, flop / m1 / 1e9, flop / mt / 1e9,
           m1 / mt);
    free(A.data), free(B.data), free(Y.data), free(t1), free(tt);
    free(one.scratch), free(many.scratch);
    return 0;
}
