/* nn_impl.h - the typed bodies of the CPU nn kernels (runtime/cpu/nn.c),
 * forward and backward side by side.
 *
 * How it works: docs/INTERNALS.md, "runtime/cpu/nn_impl.h".
 */

/* ---- Gemm, MatMul ------------------------------------------------------------------------ */

/* One BLAS call (sizes checked by FN(gemm)). */
static void FN(blas_call)(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const T *A, int64_t lda,
                          const T *B, int64_t ldb, double beta, T *C, int64_t ldc) {
    PD_GEMM(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K,
            (T)alpha, A, (int)(lda > 0 ? lda : 1), B, (int)(ldb > 0 ? ldb : 1), (T)beta, C, (int)(ldc > 0 ? ldc : 1));
}
/* One call on one thread: oneDNN's sgemm (PD_GEMM1) where the build has it,
 * 4-12% faster than OpenBLAS's on the MLP's and the GPT's products here, and
 * its kernels chosen by the CPU's instruction flags where OpenBLAS goes by
 * the CPU's model (docs/PERF.md, "Every float32 product on oneDNN's sgemm"); BLAS
 * for doubles and without oneDNN. */
static void FN(gemm_call)(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const T *A, int64_t lda,
                          const T *B, int64_t ldb, double beta, T *C, int64_t ldc) {
    if (PD_GEMM1(ta, tb, M, N, K, (T)alpha, A, lda, B, ldb, (T)beta, C, ldc)) return;
    FN(blas_call)(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* C (M, N) = alpha * op(A) (M, K) @ op(B) (K, N) + beta * C, row-major. */
static pd_status FN(gemm)(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const T *A, int64_t lda,
                          const T *B, int64_t ldb, double beta, T *C, int64_t ldc) {
    if (M <= 0 || N <= 0) return PD_OK;
    if (K <= 0) {
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) C[i * ldc + j] = beta == 0 ? (T)0 : (T)(beta * C[i * ldc + j]);
        return PD_OK;
    }
    if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX || lda > INT32_MAX || ldb > INT32_MAX || ldc > INT32_MAX)
        return pd__err(PD_ERR_UNSUPPORTED, "matrix product of %lldx%lldx%lld exceeds BLAS's 32-bit sizes",
                       (long long)M, (long long)N, (long long)K);
    int nt = pd__gemm_threads(M, N, K);
    if (nt <= 1) {
        int was = pd__one_thread();
        FN(gemm_call)(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        pd__one_thread_end(was);
        return PD_OK;
    }
    /* the larger of C's two sides split over the threads, one call each
     * (oneDNN's too: an earlier measurement here found two of its calls at
     * once slow for a run's first ten steps, not borne out since; docs/PERF.md) */
    bool rows = M >= N;
    int64_t len = rows ? M : N;
    PD_OMP_FOR(nt, true)
    for (int t = 0; t < nt; t++) {
        int64_t lo = (len * t / nt) & ~(int64_t)15, hi = t == nt - 1 ? len : (len * (t + 1) / nt) & ~(int64_t)15;
        const T *a = rows ? A + (ta ? lo : lo * lda) : A, *b = rows ? B : B + (tb ? lo * ldb : lo);
        FN(gemm_call)(ta, tb, rows ? hi - lo : M, rows ? N : hi - lo, K, alpha, a, lda, b, ldb, beta,
                      C + (rows ? lo * ldc : lo), ldc);
    }
    return PD_OK;
}

/* Y (M, N) = alpha * op(A) @ op(B) + beta * C, C broadcast from (), (N), (1|M, 1|N).
 * A (..., K) without transA: its leading dims are M (the loader's fused
 * Linear, pd__fuse_linear; ONNX's Gemm is 2-D). */
static pd_status FN(gemm_op)(pd__exec *x, const pd_tensor *a, const pd_tensor *b, const pd_tensor *c, pd_tensor *y,
                             bool ta, bool tb, double alpha, double beta) {
    int64_t N = y->shape[y->ndim - 1], M = N ? pd_tensor_numel(y) / N : 0, K = a->shape[ta ? 0 : a->ndim - 1];
    T *Y = y->data; // (M, N)
    if (c && beta != 0) { /* Y starts as C, row by row (a bias: the same row each time) */
        const T *C = c->data;
        int64_t cc = c->ndim >= 1 ? c->shape[c->ndim - 1] : 1, cr = c->ndim == 2 ? c->shape[0] : 1;
        int nt = pd__nthreads(x);
        PD_OMP_FOR(nt, M * N > 65536)
        for (int64_t i = 0; i < M; i++) {
            const T *src = C + (cr == 1 ? 0 : i) * cc;
            if (cc == N) memcpy(Y + i * N, src, sizeof(T) * (size_t)N);
            else for (int64_t j = 0; j < N; j++) Y[i * N + j] = src[0];
        }
    } else {
        beta = 0;
    }
    return FN(gemm)(ta, tb, M, N, K, alpha, a->data, a->shape[a->ndim - 1], b->data, b->shape[1], beta, Y, N);
}

/* numpy matmul: 1-D operands promoted, batch dims broadcast. */
static pd_status FN(matmul)(const pd_tensor *a, const pd_tensor *b, pd_tensor *y) {
    pd__mm L;
    pd__mm_init(a, b, &L);
    const int64_t M = L.M, K = L.K, N = L.N;
    const T *A = a->data, *B = b->data; // (..., M, K), (..., K, N)
    T *Y = y->data;                     // (..., M, N)
    if (L.nbb == 1) /* B is one matrix: all of A's rows in one product */
        return FN(gemm)(false, false, L.nbatch * M, N, K, 1, A, K, B, N, 0, Y, N);
    int nt = pd__mm_batch_threads(&L); /* small sizes: FN(gemm) cannot fail */
    if (nt > 1) {
        PD_OMP_FOR(nt, 1)
        for (int64_t q = 0; q < L.nbatch; q++) {
            int64_t oa, ob;
            pd__mm_at(&L, q, &oa, &ob);
            FN(gemm)(false, false, M, N, K, 1, A + oa * M * K, K, B + ob * K * N, N, 0, Y + q * M * N, N);
        }
        return PD_OK;
    }
    for (int64_t q = 0; q < L.nbatch; q++, pd__mm_next(&L))
        PD_TRY(FN(gemm)(false, false, M, N, K, 1, A + L.oa * M * K, K, B + L.obb * K * N, N, 0, Y + q * M * N, N));
    return PD_OK;
}

/* Y (M, N) = alpha * op(A) @ op(B) + beta * C:
 *   dA += alpha * dY @ op(B)^T (transposed back when transA), likewise dB,
 *   dC += beta * dY summed over the dims C broadcasts along;
 * those of dA, dB, dC that are fresh (pd__exec.fresh bits 0-2) are written,
 * the products with beta 0, so no one zeroes them first. */
/* col[j] += dY[i, j] over the rows i of (M, N), in row order, for j in [j0, j1). */
PD__VEC static void FN(col_sums)(const T *dY, int64_t M, int64_t N, int64_t j0, int64_t j1, double *col) {
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = j0; j < j1; j++) col[j] += dY[i * N + j];
}

static pd_status FN(gemm_bwd)(pd__exec *x, const pd_tensor *a, const pd_tensor *b, const pd_tensor *c, const T *dY,
                              bool ta, bool tb, double alpha, double beta, T *dA, T *dB, T *dC) {
    int64_t lda = a->shape[a->ndim - 1], ldb = b->shape[1], K = ta ? a->shape[0] : lda, N = b->shape[tb ? 0 : 1];
    int64_t M = ta ? a->shape[1] : a->ndim == 2 ? a->shape[0] : K ? pd_tensor_numel(a) / K : 0; /* A (..., K) */
    const T *A = a->data, *B = b->data;
    double ba = pd__fresh(x, 0) ? 0 : 1, bb = pd__fresh(x, 1) ? 0 : 1;
    bool fc = pd__fresh(x, 2);
    if (dA) {
        if (!ta) PD_TRY(FN(gemm)(false, !tb, M, K, N, alpha, dY, N, B, ldb, ba, dA, K)); // (M, K)
        else PD_TRY(FN(gemm)(tb, true, K, M, N, alpha, B, ldb, dY, N, ba, dA, M));       // (K, M)
    }
    if (dB) {
        if (!tb) PD_TRY(FN(gemm)(!ta, false, K, N, M, alpha, A, lda, dY, N, bb, dB, N)); // (K, N)
        else PD_TRY(FN(gemm)(true, ta, N, K, M, alpha, dY, N, A, lda, bb, dB, K));       // (N, K)
    }
    if (dC && fc && beta == 0) memset(dC, 0, sizeof(T) * (size_t)pd_tensor_numel(c));
    if (dC && beta != 0) {
        int64_t cc = c->ndim >= 1 ? c->shape[c->ndim - 1] : 1, cr = c->ndim == 2 ? c->shape[0] : 1;
        double *col = cr == 1 && cc == N && N > 1 ? (double *)PD_CALLOC((size_t)N, sizeof(double)) : NULL;
        if (col) { /* a bias over the columns: the rows added in order, as below; threads take columns */
            int nt = M * N > 65536 ? pd__nthreads(x) : 1;
            if (nt > (N + 15) / 16) nt = (int)((N + 15) / 16); /* at least 16 columns each */
            PD_OMP_FOR(nt, nt > 1)
            for (int t = 0; t < nt; t++) { /* contiguous column ranges, multiples of 8 */
                int64_t j0 = (N * t / nt) & ~(int64_t)7, j1 = t == nt - 1 ? N : (N * (t + 1) / nt) & ~(int64_t)7;
                FN(col_sums)(dY, M, N, j0, j1, col);
            }
            for (int64_t j = 0; j < N; j++) dC[j] = (T)(beta * col[j]) + (fc ? 0 : dC[j]);
            PD_FREE(col);
            return PD_OK;
        }
        for (int64_t ci = 0; ci < cr; ci++)
            for (int64_t cj = 0; cj < cc; cj++) {
                double s = 0;
                for (int64_t i = cr == 1 ? 0 : ci; i < (cr == 1 ? M : ci + 1); i++)
                    for (int64_t j = cc == 1 ? 0 : cj; j < (cc == 1 ? N : cj + 1); j++) s += dY[i * N + j];
                dC[ci * cc + cj] = (T)(beta * s) + (fc ? 0 : dC[ci * cc + cj]);
            }
    }
    return PD_OK;
}

/* numpy matmul, Y (..., M, N) = A (..., M, K) @ B (..., K, N): per output batch
 * dA += dY @ B^T, dB += A^T @ dY, into the operand's own (possibly
 * broadcast) batch, so broadcast batches sum. */
/* fa, fb (pd__exec.fresh): dA, dB hold nothing yet: the first product into
 * each block writes it (beta 0), a broadcast operand's later ones add. */
static pd_status FN(matmul_bwd)(const pd_tensor *a, const pd_tensor *b, const T *dY, T *dA, T *dB, bool fa, bool fb) {
    pd__mm L;
    pd__mm_init(a, b, &L);
    const int64_t M = L.M, K = L.K, N = L.N;
    const T *A = a->data, *B = b->data;
    if (L.nbb == 1) { /* B is one matrix and A holds every batch: A's rows stack */
        if (dA) PD_TRY(FN(gemm)(false, true, L.nbatch * M, K, N, 1, dY, N, B, N, fa ? 0 : 1, dA, K));
        if (dB) PD_TRY(FN(gemm)(true, false, K, N, L.nbatch * M, 1, A, K, dY, N, fb ? 0 : 1, dB, N));
        return PD_OK;
    }
    /* a broadcast operand's blocks are visited more than once: zero them, then add */
    int64_t na = pd_tensor_numel(a), nb = pd_tensor_numel(b);
    if (dA && fa && na != L.nbatch * M * K) memset(dA, 0, sizeof(T) * (size_t)na), fa = false;
    if (dB && fb && nb != L.nbatch * K * N) memset(dB, 0, sizeof(T) * (size_t)nb), fb = false;
    int nt = pd__mm_batch_threads(&L);
    if (nt > 1 && na == L.nbatch * M * K && nb == L.nbatch * K * N) { /* each block written by one batch */
        PD_OMP_FOR(nt, 1)
        for (int64_t q = 0; q < L.nbatch; q++) {
            int64_t oa, ob;
            pd__mm_at(&L, q, &oa, &ob);
            const T *dq = dY + q * M * N;
            if (dA) FN(gemm)(false, true, M, K, N, 1, dq, N, B + ob * K * N, N, fa ? 0 : 1, dA + oa * M * K, K);
            if (dB) FN(gemm)(true, false, K, N, M, 1, A + oa * M * K, K, dq, N, fb ? 0 : 1, dB + ob * K * N, N);
        }
        return PD_OK;
    }
    for (int64_t q = 0; q < L.nbatch; q++, pd__mm_next(&L)) {
        const T *dq = dY + q * M * N; // (M, N)
        if (dA) PD_TRY(FN(gemm)(false, true, M, K, N, 1, dq, N, B + L.obb * K * N, N, fa ? 0 : 1, dA + L.oa * M * K, K));
        if (dB) PD_TRY(FN(gemm)(true, false, K, N, M, 1, A + L.oa * M * K, K, dq, N, fb ? 0 : 1, dB + L.obb * K * N, N));
    }
    return PD_OK;
}

/* ---- Conv, ConvTranspose -------------------------------------------------------------------- */

/* col (C*prod(k), prod(out)) from img (C, in...): row (c, k...) holds the
 * input values each output position sees through kernel tap k (0 in pads).
 * Consecutive images of a batch are consecutive channels here. */
/* The 2-D case, the common one, without the N-D odometers: per (c, kh, kw)
 * row, each output row is a zero-padded strided copy of one input row. */
static void FN(im2col_2d)(pd__exec *x, const T *img, int64_t C, const pd__win *w, T *col) {
    const int64_t KH = w->k[0], KW = w->k[1], H = w->in[0], W = w->in[1], OH = w->out[0], OW = w->out[1];
    const int64_t SH = w->s[0], SW = w->s[1], DH = w->d[0], DW = w->d[1], PH = w->pb[0], PW = w->pb[1];
    const int64_t rows = C * KH * KW;
    int nt = pd__nthreads(x);
    PD_OMP_FOR(nt, rows * OH * OW > 32768)
    for (int64_t r = 0; r < rows; r++) {
        int64_t c = r / (KH * KW), kh = (r / KW) % KH, kw = r % KW;
        const T *src = img + c * H * W;
        T *dst = col + r * OH * OW;
        int64_t p = kw * DW - PW, lo, hi;
        out_range(p, SW, W, OW, &lo, &hi);
        for (int64_t oh = 0; oh < OH; oh++, dst += OW) {
            int64_t ih = oh * SH - PH + kh * DH;
            if (ih < 0 || ih >= H) {
                for (int64_t o = 0; o < OW; o++) dst[o] = 0;
                continue;
            }
            const T *srow = src + ih * W;
            for (int64_t o = 0; o < lo; o++) dst[o] = 0;
            if (SW == 1) /* rows are short: an inline loop beats a memcpy call */
                for (int64_t o = lo; o < hi; o++) dst[o] = srow[o + p];
            else
                for (int64_t o = lo; o < hi; o++) dst[o] = srow[o * SW + p];
            for (int64_t o = hi > lo ? hi : lo; o < OW; o++) dst[o] = 0;
        }
    }
}

static void FN(im2col)(pd__exec *x, const T *img, int64_t C, const pd__win *w, T *col) {
    if (w->nsp == 2) {
        FN(im2col_2d)(x, img, C, w, col);
        return;
    }
    int ns = w->nsp, last = ns - 1;
    int64_t K = prod64(ns, w->k), IN = prod64(ns, w->in), OUT = prod64(ns, w->out);
    int64_t OL = w->out[last], IL = w->in[last], S = w->s[last], outer = OUT / OL, rows = C * K;
    int nt = pd__nthreads(x);
    PD_OMP_FOR(nt, rows * OUT > 32768)
    for (int64_t r = 0; r < rows; r++) {
        int64_t c = r / K, kk[PD_MAX_DIMS], oi[PD_MAX_DIMS] = {0};
        odo_unflat(r % K, w->k, ns, kk);
        const T *src = img + c * IN; // (in...)
        T *dst = col + r * OUT;      // (out...)
        int64_t p = kk[last] * w->d[last] - w->pb[last], lo, hi;
        out_range(p, S, IL, OL, &lo, &hi);
        for (int64_t q = 0; q < outer; q++, dst += OL) {
            int64_t off;
            bool ok = outer_offset(w, oi, kk, w->in, &off);
            odo_next(oi, w->out, last);
            if (!ok) {
                for (int64_t o = 0; o < OL; o++) dst[o] = 0;
                continue;
            }
            const T *srow = src + off * IL;
            for (int64_t o = 0; o < lo; o++) dst[o] = 0;
            if (S == 1)
                for (int64_t o = lo; o < hi; o++) dst[o] = srow[o + p];
            else
                for (int64_t o = lo; o < hi; o++) dst[o] = srow[o * S + p];
            for (int64_t o = hi; o < OL; o++) dst[o] = 0;
        }
    }
}

/* The adjoint of im2col: img (C, out...) += col (C*prod(k), prod(in...)), for
 * ConvTranspose, whose image is its output and whose columns are its input. */
/* The 2-D case of col2im without the N-D odometers. */
static void FN(col2im_2d)(pd__exec *x, const T *col, int64_t C, const pd__win *w, T *img) {
    const int64_t KH = w->k[0], KW = w->k[1], IH = w->in[0], IW = w->in[1], OH = w->out[0], OW = w->out[1];
    const int64_t SH = w->s[0], SW = w->s[1], DH = w->d[0], DW = w->d[1], PH = w->pb[0], PW = w->pb[1];
    int nt = pd__nthreads(x);
    PD_OMP_FOR(nt, C * KH * KW * IH * IW > 32768)
    for (int64_t c = 0; c < C; c++) {
        T *dst = img + c * OH * OW; // (out...)
        for (int64_t kh = 0; kh < KH; kh++)
            for (int64_t kw = 0; kw < KW; kw++) {
                const T *src = col + ((c * KH + kh) * KW + kw) * IH * IW; // (in...)
                int64_t p = kw * DW - PW, lo, hi;
                out_range(p, SW, OW, IW, &lo, &hi);
                for (int64_t ih = 0; ih < IH; ih++) {
                    int64_t oh = ih * SH - PH + kh * DH;
                    if (oh < 0 || oh >= OH) continue;
                    T *drow = dst + oh * OW;
                    const T *srow = src + ih * IW;
                    if (SW == 1)
                        for (int64_t i = lo; i < hi; i++) drow[i + p] += srow[i];
                    else
                        for (int64_t i = lo; i < hi; i++) drow[i * SW + p] += srow[i];
                }
            }
    }
}

static void FN(col2im)(pd__exec *x, const T *col, int64_t C, const pd__win *w, T *img) {
    if (w->nsp == 2) {
        FN(col2im_2d)(x, col, C, w, img);
        return;
    }
    int ns = w->nsp, last = ns - 1;
    int64_t K = prod64(ns, w->k), IN = prod64(ns, w->in), OUT = prod64(ns, w->out);
    int64_t IL = w->in[last], OL = w->out[last], S = w->s[last], outer = IN / IL;
    int nt = pd__nthreads(x);
    PD_OMP_FOR(nt, C * K * IN > 32768)
    for (int64_t c = 0; c < C; c++) {
        T *dst = img + c * OUT; // (out...)
        for (int64_t kr = 0; kr < K; kr++) {
            int64_t kk[PD_MAX_DIMS], ii[PD_MAX_DIMS] = {0};
            odo_unflat(kr, w->k, ns, kk);
            const T *src = col + (c * K + kr) * IN; // (in...)
            int64_t p = kk[last] * w->d[last] - w->pb[last], lo, hi;
            out_range(p, S, OL, IL, &lo, &hi);
            for (int64_t q = 0; q < outer; q++, src += IL) {
                int64_t off;
                bool ok = outer_offset(w, ii, kk, w->out, &off);
                odo_next(ii, w->in, last);
                if (!ok) continue;
                T *drow = dst + off * OL;
                for (int64_t i = lo; i < hi; i++) drow[i * S + p] += src[i];
            }
        }
    }
}

/* Y (NM, OUT) planes set to the bias (M) or 0. */
static void FN(fill_bias)(pd__exec *x, int64_t NM, int64_t M, int64_t OUT, const T *b, T *Y) {
    int nt = pd__nthreads(x);
    PD_OMP_FOR(nt, NM * OUT > 32768)
    for (int64_t nm = 0; nm < NM; nm++) {
        T bv = b ? b[nm % M] : (T)0, *yp = Y + nm * OUT;
        for (int64_t o = 0; o < OUT; o++) yp[o] = bv;
    }
}

/* Direct convolution for tiny per-group products (depthwise and the like),
 * where a GEMM would be a GEMV: Y (N, M, out...) += taps of X (N, C, in...). */
static void FN(conv_direct)(pd__exec *x, const pd__win *w, int64_t group, int64_t N, int64_t C, int64_t M,
                            const T *X, const T *W, T *Y) {
    int ns = w->nsp, last = ns - 1;
    int64_t Cg = C / group, Mg = M / group, K = prod64(ns, w->k), IN = prod64(ns, w->in), OUT = prod64(ns, w->out);
    int64_t OL = w->out[last], IL = w->in[last], S = w->s[last], outer = OUT / OL;
    int nt = pd__nthreads(x);
    PD_OMP_FOR(nt, N * M * OUT * Cg * K > 32768)
    for (int64_t nm = 0; nm < N * M; nm++) {
        int64_t n = nm / M, m = nm % M, g = m / Mg;
        T *yp = Y + nm * OUT; // (out...)
        for (int64_t c = 0; c < Cg; c++) {
            const T *xc = X + (n * C + g * Cg + c) * IN; // (in...)
            const T *wk = W + (m * Cg + c) * K;           // (k...)
            for (int64_t kr = 0; kr < K; kr++) {
                int64_t kk[PD_MAX_DIMS], oi[PD_MAX_DIMS] = {0};
                odo_unflat(kr, w->k, ns, kk);
                T wv = wk[kr];
                int64_t p = kk[last] * w->d[last] - w->pb[last], lo, hi;
                out_range(p, S, IL, OL, &lo, &hi);
                T *yrow = yp;
                for (int64_t q = 0; q < outer; q++, yrow += OL) {
                    int64_t off;
                    bool ok = outer_offset(w, oi, kk, w->in, &off);
                    odo_next(oi, w->out, last);
                    if (!ok) continue;
                    const T *srow = xc + off * IL;
                    if (S == 1)
                        for (int64_t o = lo; o < hi; o++) yrow[o] += wv * srow[o + p];
                    else
                        for (int64_t o = lo; o < hi; o++) yrow[o] += wv * srow[o * S + p];
                }
            }
        }
    }
}

/* ---- convolutions with few output positions: one GEMM over the batch ---------------------- */

/* Output planes of at most this many positions (ResNet-18's last layers on
 * 32x32 images: 2x2 and 1x1) make per-image GEMMs too thin: Y_n (Mg, OUT) =
 * W_g @ col_n is a GEMV at OUT = 1, and dW_g += dY_n @ col_n^T a rank-OUT
 * update. Such a conv runs one GEMM per group over a chunk of images
 * instead, whose columns lie side by side: colj (C*K, nb*OUT), row c*K + k
 * holding tap k of channel c at every image's every position. oneDNN's
 * kernels were slower on these shapes (the weight gradient of a 512-channel
 * 3x3 layer at 1x1, batch 32: 28 ms on one thread, no faster on two; 3.3 ms
 * this way) and faster at 4x4 (8 ms against 10 for the three passes).
 *
 * Where the input planes are as small (IN <= KL, the live taps: a 3x3 layer
 * at 2x2 or at 1x1, a kernel the size of the image), an image's convolution
 * is a dense layer instead, and the batch one product with no columns:
 * Y (N, M*OUT) = X (N, C*IN) @ Wd^T, Wd[m*OUT + o][c*IN + p] = W[m][c][the
 * tap that reads position p at output o] (0 where none does). It multiplies
 * OUT*IN pairs an image where the columns multiply OUT*KL (16 against 36
 * at 2x2), and W itself is Wd where that map is the identity (OUT 1, a
 * kernel covering the unpadded image). */
#define PD_CONV_FEW_OUT 8

static bool FN(conv_few)(const pd__win *w, int64_t Cg, int64_t Mg) {
    return prod64(w->nsp, w->out) <= PD_CONV_FEW_OUT && Cg * Mg > 16;
}

/* A conv_few call's geometry: its taps (conv_few_taps), the live ones
 * (KL of K), and where its scratch puts the weights of the live taps (wl,
 * (M, Cg*KL); the weights themselves when all are live), their gradient
 * (dwl, likewise; NULL when dW itself takes it), and a chunk's joined
 * columns colj (C*KL, nb*OUT) and joined output (gradient) yj (M, nb*OUT).
 * In the dense form (dense): the npair (tap, output, input position) pairs
 * where a tap reads the input, as three arrays in pair; the dense weights
 * wl (M*OUT, Cg*IN) and their gradient dwl, each NULL where W and dW are
 * them. */
typedef struct FN(few) {
    int64_t K, KL, IN, OUT, chunk, npair, *tap, *live, *pair;
    bool dense;
    const T *wl;
    T *dwl, *colj;
} FN(few);

/* colj (C*KL, nb*OUT) = the live taps of nb images X (nb, C, in...). */
static void FN(im2col_few)(pd__exec *x, const FN(few) *f, const T *X, int64_t nb, int64_t C, T *colj) {
    int64_t L = nb * f->OUT, KL = f->KL, OUT = f->OUT, IN = f->IN;
    int nt = pd__nthreads(x);
    PD_OMP_FOR(nt, C * KL * L > 32768)
    for (int64_t r = 0; r < C * KL; r++) {
        const int64_t *t = f->tap + f->live[r % KL] * OUT;
        const T *src = X + (r / KL) * IN;
        T *dst = colj + r * L;
        for (int64_t n = 0; n < nb; n++, src += C * IN, dst += OUT)
            for (int64_t o = 0; o < OUT; o++) dst[o] = t[o] >= 0 ? src[t[o]] : (T)0;
    }
}

/* dX (nb, C, in...) += the taps colj (C*KL, nb*OUT) put back, one channel
 * per iteration (its planes are its own). */
static void FN(col2im_few)(pd__exec *x, const FN(few) *f, const T *colj, int64_t nb, int64_t C, T *dX) {
    int64_t L = nb * f->OUT, KL = f->KL, OUT = f->OUT, IN = f->IN;
    int nt = pd__nthreads(x);
    PD_OMP_FOR(nt, C * KL * L > 32768)
    for (int64_t c = 0; c < C; c++)
        for (int64_t j = 0; j < KL; j++) {
            const int64_t *t = f->tap + f->live[j] * OUT;
            const T *src = colj + (c * KL + j) * L;
            T *dst = dX + c * IN;
            for (int64_t n = 0; n < nb; n++, src += OUT, dst += C * IN)
                for (int64_t o = 0; o < OUT; o++)
                    if (t[o] >= 0) dst[t[o]] += src[o];
        }
}

/* dst (nb, R, L) += src (R, nb*L), or dst (R, nb*L) = src (nb, R, L) (join):
 * an output (gradient) between the images' layout and the joined one. */
static void FN(few_move)(pd__exec *x, const T *src, int64_t nb, int64_t R, int64_t L, T *dst, bool join) {
    int nt = pd__nthreads(x);
    PD_OMP_FOR(nt, nb * R * L > 32768)
    for (int64_t r = 0; r < R; r++)
        for (int64_t n = 0; n < nb; n++) {
            const T *a = join ? src + (n * R + r) * L : src + (r * nb + n) * L;
            T *b = join ? dst + (r * nb + n) * L : dst + (n * R + r) * L;
            for (int64_t l = 0; l < L; l++) b[l] = join ? a[l] : b[l] + a[l];
        }
}

/* W's (M, Cg*K) columns of live taps into wl (M, Cg*KL) (to_live), or wl's
 * added back into W's (a weight gradient). */
static void FN(few_taps_move)(pd__exec *x, const FN(few) *f, int64_t MC, T *W, T *wl, bool to_live) {
    int64_t K = f->K, KL = f->KL;
    int nt = pd__nthreads(x);
    PD_OMP_FOR(nt, MC * KL > 32768)
    for (int64_t i = 0; i < MC; i++)
        for (int64_t j = 0; j < KL; j++) {
            if (to_live) wl[i * KL + j] = W[i * K + f->live[j]];
            else W[i * K + f->live[j]] += wl[i * KL + j];
        }
}

/* W (M, Cg, K) into the dense weights wd (M*OUT, Cg*IN) (to_dense: zeros
 * where no tap pairs an output with an input position), or a dense
 * gradient wd added back onto W's taps (a weight gradient), one output
 * channel per iteration, a pair at a time over the channels, the pairs in
 * f->pair's order (by tap, then output), so each tap's sum has one order at
 * every thread count. (Over the channels a pair at a time: 0.75 ms for the
 * gradient of a 256-channel 3x3 layer at 2x2, where a channel at a time
 * over its 16 pairs took 1.6-1.9 ms.) */
static void FN(few_dense_move)(pd__exec *x, const FN(few) *f, int64_t M, int64_t Cg, T *W, T *wd, bool to_dense) {
    int64_t K = f->K, IN = f->IN, OUT = f->OUT, np = f->npair, row = Cg * IN;
    const int64_t *tk = f->pair, *po = f->pair + np, *pp = f->pair + 2 * np;
    int nt = pd__nthreads(x);
    PD_OMP_FOR(nt, M * OUT * Cg * IN > 32768)
    for (int64_t m = 0; m < M; m++) {
        T *dm = wd + m * OUT * row, *wm = W + m * Cg * K;
        if (to_dense && np < OUT * IN) memset(dm, 0, sizeof(T) * (size_t)(OUT * row));
        for (int64_t j = 0; j < np; j++) {
            T *d = dm + po[j] * row + pp[j], *w = wm + tk[j];
            for (int64_t c = 0; c < Cg; c++) {
                if (to_dense) d[c * IN] = w[c * K];
                else w[c * K] += d[c * IN];
            }
        }
    }
}

/* The dense form's pairs and weights (FN(few_make), IN <= KL): the (tap,
 * output, input position) of every tap reading the input, by tap, then Wd
 * (with room for its gradient, grad) unless W is it: one output, and tap k
 * reading position k. */
static void FN(few_dense_make)(pd__exec *x, FN(few) *f, int64_t M, int64_t Cg, const T *W, bool grad, T *q) {
    int64_t OUT = f->OUT, np = 0;
    f->dense = true;
    for (int64_t i = 0; i < f->K * OUT; i++) np += f->tap[i] >= 0;
    f->npair = np;
    bool same = OUT == 1 && f->IN == f->K && np == f->K;
    for (int64_t k = 0, j = 0; k < f->K; k++)
        for (int64_t o = 0; o < OUT; o++)
            if (f->tap[k * OUT + o] >= 0) {
                f->pair[j] = k, f->pair[np + j] = o, f->pair[2 * np + j] = f->tap[k * OUT + o];
                same = same && f->tap[k * OUT + o] == k;
                j++;
            }
    f->wl = W, f->dwl = NULL;
    if (same) return;
    FN(few_dense_move)(x, f, M, Cg, (T *)W, q, true);
    f->wl = q;
    if (grad) f->dwl = q + M * OUT * Cg * f->IN;
}

/* The geometry and one scratch for it: the tap tables, then either the
 * dense form's weights (FN(few_dense_make)), or the live taps' weights (and
 * their gradient, grad) unless all are live, and a chunk's colj and yj, the
 * chunk sized so that those two fit PD_NN_CHUNK_BYTES. */
static pd_status FN(few_make)(pd__exec *x, const pd__win *w, int64_t N, int64_t C, int64_t M, int64_t Cg, const T *W,
                              bool grad, FN(few) *f) {
    int ns = w->nsp;
    f->K = prod64(ns, w->k), f->IN = prod64(ns, w->in), f->OUT = prod64(ns, w->out);
    f->dense = false;
    /* the dense form needs IN <= KL <= K: only then its pair table and weights */
    bool may_dense = f->IN <= f->K;
    int64_t pairs = may_dense ? 3 * f->OUT * f->IN : 0; /* up to OUT*IN pairs of three */
    int64_t tables = ((f->K * (f->OUT + 1) + pairs) * (int64_t)sizeof(int64_t) + 63) / 64 * 64 / (int64_t)sizeof(T);
    /* the live taps are not known before the tables: size the rest for all of them */
    int64_t wsz = M * Cg * f->K, per_image = (C * f->K + M) * f->OUT, g = grad ? 2 : 1;
    int64_t c = (int64_t)(PD_NN_CHUNK_BYTES / sizeof(T)) / (per_image ? per_image : 1);
    f->chunk = c < 1 ? 1 : c > N ? N : c;
    int64_t cols = g * wsz + f->chunk * per_image, dsz = may_dense ? g * M * f->OUT * Cg * f->IN : 0;
    T *p = (T *)pd__scratch_n(x, tables + (cols > dsz ? cols : dsz), sizeof(T), 1);
    if (!p) return PD_ERR_NOMEM;
    f->tap = (int64_t *)(void *)p;
    f->live = f->tap + f->K * f->OUT;
    f->pair = f->live + f->K;
    f->KL = conv_few_taps(w, f->tap, f->live);
    T *q = p + tables;
    if (may_dense && f->IN <= f->KL) {
        FN(few_dense_make)(x, f, M, Cg, W, grad, q);
        return PD_OK;
    }
    f->wl = W, f->dwl = NULL;
    if (f->KL < f->K) {
        FN(few_taps_move)(x, f, M * Cg, (T *)W, q, true);
        f->wl = q, q += wsz;
        if (grad) f->dwl = q, q += wsz;
    }
    f->colj = q;
    return PD_OK;
}

/* FN(conv) for few output positions (FN(conv_few)): per chunk of images,
 * yj_g (Mg, nb*OUT) = wl_g (Mg, Cg*KL) @ colj_g, added to Y (holding the bias). */
static pd_status FN(conv_few_fwd)(pd__exec *x, const pd__win *w, int64_t group, int64_t N, int64_t C, int64_t M,
                                  const T *xd, const T *wd, T *yd) {
    int64_t Cg = C / group, Mg = M / group;
    FN(few) f;
    PD_TRY(FN(few_make)(x, w, N, C, M, Cg, wd, false, &f));
    int64_t rows = Cg * f.KL, OUT = f.OUT;
    if (f.dense) { /* Y_g (N, Mg*OUT) += X_g (N, Cg*IN) @ Wd_g^T */
        int64_t IN = f.IN;
        for (int64_t gi = 0; gi < group; gi++)
            PD_TRY(FN(gemm)(false, true, N, Mg * OUT, Cg * IN, 1, xd + gi * Cg * IN, C * IN,
                            f.wl + gi * Mg * OUT * Cg * IN, Cg * IN, 1, yd + gi * Mg * OUT, M * OUT));
        return PD_OK;
    }
    for (int64_t n0 = 0; n0 < N; n0 += f.chunk) {
        int64_t nb = N - n0 < f.chunk ? N - n0 : f.chunk, L = nb * OUT;
        T *yj = f.colj + C * f.KL * L;
        FN(im2col_few)(x, &f, xd + n0 * C * f.IN, nb, C, f.colj);
        for (int64_t gi = 0; gi < group; gi++)
            PD_TRY(FN(gemm)(false, false, Mg, L, rows, 1, f.wl + gi * Mg * rows, rows, f.colj + gi * rows * L, L, 0,
                            yj + gi * Mg * L, L));
        FN(few_move)(x, yj, nb, M, OUT, yd + n0 * M * OUT, false);
    }
    return PD_OK;
}

/* FN(conv_bwd) for few output positions: per chunk, dyj (M, nb*OUT) = dY's
 * planes side by side, then per group dW_g += dyj_g @ colj_g^T and
 * colj_g = wl_g^T @ dyj_g, whose taps go back into dX. */
static pd_status FN(conv_few_bwd)(pd__exec *x, const pd__win *w, int64_t group, int64_t N, int64_t C, int64_t M,
                                  const T *xd, const T *wd, const T *dY, T *dX, T *dW) {
    int64_t Cg = C / group, Mg = M / group;
    FN(few) f;
    PD_TRY(FN(few_make)(x, w, N, C, M, Cg, wd, dW != NULL, &f));
    int64_t rows = Cg * f.KL, OUT = f.OUT;
    T *dw = f.dwl ? f.dwl : dW; /* the live taps' (or dense) gradient, added into dW at the end */
    if (f.dense) { /* dWd_g = dY_g^T @ X_g, dX_g += dY_g @ Wd_g */
        int64_t IN = f.IN, wg = Mg * OUT * Cg * IN;
        for (int64_t gi = 0; gi < group; gi++) {
            const T *dyg = dY + gi * Mg * OUT;
            if (dW)
                PD_TRY(FN(gemm)(true, false, Mg * OUT, Cg * IN, N, 1, dyg, M * OUT, xd + gi * Cg * IN, C * IN,
                                f.dwl ? 0 : 1, dw + gi * wg, Cg * IN));
            if (dX)
                PD_TRY(FN(gemm)(false, false, N, Cg * IN, Mg * OUT, 1, dyg, M * OUT, f.wl + gi * wg, Cg * IN, 1,
                                dX + gi * Cg * IN, C * IN));
        }
        if (dW && f.dwl) FN(few_dense_move)(x, &f, M, Cg, dW, f.dwl, false);
        return PD_OK;
    }
    for (int64_t n0 = 0; n0 < N; n0 += f.chunk) {
        int64_t nb = N - n0 < f.chunk ? N - n0 : f.chunk, L = nb * OUT;
        T *dyj = f.colj + C * f.KL * L;
        FN(few_move)(x, dY + n0 * M * OUT, nb, M, OUT, dyj, true);
        if (dW) {
            FN(im2col_few)(x, &f, xd + n0 * C * f.IN, nb, C, f.colj);
            for (int64_t gi = 0; gi < group; gi++)
                PD_TRY(FN(gemm)(false, true, Mg, rows, L, 1, dyj + gi * Mg * L, L, f.colj + gi * rows * L, L,
                                f.dwl && n0 == 0 ? 0 : 1, dw + gi * Mg * rows, rows));
        }
        if (dX) {
            for (int64_t gi = 0; gi < group; gi++)
                PD_TRY(FN(gemm)(true, false, rows, L, Mg, 1, f.wl + gi * Mg * rows, rows, dyj + gi * Mg * L, L, 0,
                                f.colj + gi * rows * L, L));
            FN(col2im_few)(x, &f, f.colj, nb, C, dX + n0 * C * f.IN);
        }
    }
    if (f.dwl) FN(few_taps_move)(x, &f, M * Cg, dW, f.dwl, false);
    return PD_OK;
}

/* Y (N, M, out...) = conv(X (N, C, in...), W (M, C/group, k...)) + B (M).
 * Images go in chunks: one im2col pass over the chunk, then its GEMMs, so the
 * OpenMP and BLAS thread pools alternate once per chunk, not per image. */
static pd_status FN(conv)(pd__exec *x, const pd__win *w, int64_t group, const pd_tensor *X, const pd_tensor *W,
                          const pd_tensor *B, pd_tensor *Y) {
    int ns = w->nsp;
    int64_t N = X->shape[0], C = X->shape[1], M = W->shape[0], Cg = C / group, Mg = M / group;
    int64_t K = prod64(ns, w->k), IN = prod64(ns, w->in), OUT = prod64(ns, w->out), rows = Cg * K;
    const T *xd = X->data, *wd = W->data;
    T *yd = Y->data;
    bool few = FN(conv_few)(w, Cg, Mg);
    if (sizeof(T) == sizeof(float) && !few) {
        bool done;
        PD_TRY(pd__dnnl_conv(x, w, group, X, W, B, Y, &done));
        if (done) return PD_OK;
    }
    FN(fill_bias)(x, N * M, M, OUT, B ? (const T *)B->data : NULL, yd);
    if (few) return FN(conv_few_fwd)(x, w, group, N, C, M, xd, wd, yd);
    if (Cg * Mg <= 16) {
        FN(conv_direct)(x, w, group, N, C, M, xd, wd, yd);
        return PD_OK;
    }
    bool direct = K == 1; /* a 1x1 kernel without stride or pad reads X as it is */
    for (int i = 0; i < ns; i++) direct = direct && w->s[i] == 1 && w->pb[i] == 0 && w->pe[i] == 0;
    int64_t per_image = C * K * OUT, chunk = N;
    T *col = NULL; // (chunk * group, Cg*K, OUT)
    if (!direct) {
        chunk = (int64_t)(PD_NN_CHUNK_BYTES / sizeof(T)) / (per_image ? per_image : 1);
        chunk = chunk < 1 ? 1 : chunk > N ? N : chunk;
        if (!(col = pd__scratch_n(x, chunk, per_image, sizeof(T)))) return PD_ERR_NOMEM;
    }
    for (int64_t n0 = 0; n0 < N; n0 += chunk) {
        int64_t nb = N - n0 < chunk ? N - n0 : chunk;
        if (!direct) FN(im2col)(x, xd + n0 * C * IN, nb * C, w, col);
        for (int64_t n = n0; n < n0 + nb; n++)
            for (int64_t gi = 0; gi < group; gi++) {
                const T *src = direct ? xd + (n * C + gi * Cg) * IN : col + ((n - n0) * group + gi) * rows * OUT;
                PD_TRY(FN(gemm)(false, false, Mg, OUT, rows, 1, wd + gi * Mg * rows, rows, src, OUT, 1,
                                yd + (n * M + gi * Mg) * OUT, OUT));
            }
    }
    return PD_OK;
}

/* Y (N, M, out...) = convT(X (N, C, in...), W (C, M/group, k...)) + B (M):
 * per chunk of images, col = W_g^T X_g by GEMM, then one col2im pass. */
static pd_status FN(conv_transpose)(pd__exec *x, const pd__win *w, int64_t group, const pd_tensor *X,
                                    const pd_tensor *W, const pd_tensor *B, pd_tensor *Y) {
    int ns = w->nsp;
    int64_t N = X->shape[0], C = X->shape[1], Cg = C / group, Mg = W->shape[1], M = Mg * group;
    int64_t K = prod64(ns, w->k), IN = prod64(ns, w->in), OUT = prod64(ns, w->out), rows = Mg * K;
    int64_t per_image = M * K * IN;
    int64_t chunk = (int64_t)(PD_NN_CHUNK_BYTES / sizeof(T)) / (per_image ? per_image : 1);
    chunk = chunk < 1 ? 1 : chunk > N ? N : chunk;
    T *col = pd__scratch_n(x, chunk, per_image, sizeof(T)); // (chunk * group, Mg*K, IN)
    if (!col) return PD_ERR_NOMEM;
    const T *xd = X->data, *wd = W->data;
    T *yd = Y->data;
    FN(fill_bias)(x, N * M, M, OUT, B ? (const T *)B->data : NULL, yd);
    for (int64_t n0 = 0; n0 < N; n0 += chunk) {
        int64_t nb = N - n0 < chunk ? N - n0 : chunk;
        for (int64_t n = n0; n < n0 + nb; n++)
            for (int64_t gi = 0; gi < group; gi++) /* col_g (Mg*K, IN) = W_g^T, W_g (Cg, Mg*K), times X_g (Cg, IN) */
                PD_TRY(FN(gemm)(true, false, rows, IN, Cg, 1, wd + gi * Cg * rows, rows,
                                xd + (n * C + gi * Cg) * IN, IN, 0, col + ((n - n0) * group + gi) * rows * IN, IN));
        FN(col2im)(x, col, nb * M, w, yd + n0 * M * OUT);
    }
    return PD_OK;
}

/* dB (M) += dY (N, M, OUT) summed over N and OUT. */
static void FN(bias_bwd)(pd__exec *x, int64_t N, int64_t M, int64_t OUT, const T *dY, T *dB) {
    int nt = pd__nthreads(x);
    PD_OMP_FOR(nt, N * M * OUT > 32768)
    for (int64_t m = 0; m < M; m++) {
        double s = 0;
        for (int64_t n = 0; n < N; n++) {
            const T *p = dY + (n * M + m) * OUT;
            for (int64_t o = 0; o < OUT; o++) s += p[o];
        }
        dB[m] += (T)s;
    }
}

/* The adjoint of conv_direct (tiny per-group products): dX (N, C, in...) +=
 * taps of dY (N, M, out...) through W, one input plane per iteration; dW
 * (M, C/group, k...) += dY . taps of X, one filter row per iteration. */
static void FN(conv_direct_bwd)(pd__exec *x, const pd__win *w, int64_t group, int64_t N, int64_t C, int64_t M,
                                const T *X, const T *W, const T *dY, T *dX, T *dW) {
    int ns = w->nsp, last = ns - 1;
    int64_t Cg = C / group, Mg = M / group, K = prod64(ns, w->k), IN = prod64(ns, w->in), OUT = prod64(ns, w->out);
    int64_t OL = w->out[last], IL = w->in[last], S = w->s[last], outer = OUT / OL;
    int nt = pd__nthreads(x);
    if (dX) {
        PD_OMP_FOR(nt, N * M * OUT * Cg * K > 32768)
        for (int64_t nc = 0; nc < N * C; nc++) {
            int64_t n = nc / C, c = nc % C, g = c / Cg, cl = c % Cg;
            T *xp = dX + nc * IN; // (in...)
            for (int64_t m = g * Mg; m < (g + 1) * Mg; m++) {
                const T *dyp = dY + (n * M + m) * OUT; // (out...)
                const T *wk = W + (m * Cg + cl) * K;    // (k...)
                for (int64_t kr = 0; kr < K; kr++) {
                    int64_t kk[PD_MAX_DIMS], oi[PD_MAX_DIMS] = {0};
                    odo_unflat(kr, w->k, ns, kk);
                    T wv = wk[kr];
                    int64_t p = kk[last] * w->d[last] - w->pb[last], lo, hi;
                    out_range(p, S, IL, OL, &lo, &hi);
                    for (int64_t q = 0; q < outer; q++) {
                        int64_t off;
                        bool ok = outer_offset(w, oi, kk, w->in, &off);
                        odo_next(oi, w->out, last);
                        if (!ok) continue;
                        T *drow = xp + off * IL;
                        const T *grow = dyp + q * OL;
                        for (int64_t o = lo; o < hi; o++) drow[o * S + p] += wv * grow[o];
                    }
                }
            }
        }
    }
    if (dW) {
        PD_OMP_FOR(nt, N * M * OUT * Cg * K > 32768)
        for (int64_t mc = 0; mc < M * Cg; mc++) {
            int64_t m = mc / Cg, cl = mc % Cg, g = m / Mg;
            for (int64_t kr = 0; kr < K; kr++) {
                int64_t kk[PD_MAX_DIMS];
                odo_unflat(kr, w->k, ns, kk);
                int64_t p = kk[last] * w->d[last] - w->pb[last], lo, hi;
                out_range(p, S, IL, OL, &lo, &hi);
                double acc = 0;
                for (int64_t n = 0; n < N; n++) {
                    const T *xc = X + (n * C + g * Cg + cl) * IN; // (in...)
                    const T *dyp = dY + (n * M + m) * OUT;        // (out...)
                    int64_t oi[PD_MAX_DIMS] = {0};
                    for (int64_t q = 0; q < outer; q++) {
                        int64_t off;
                        bool ok = outer_offset(w, oi, kk, w->in, &off);
                        odo_next(oi, w->out, last);
                        if (!ok) continue;
                        const T *srow = xc + off * IL, *grow = dyp + q * OL;
                        for (int64_t o = lo; o < hi; o++) acc += (double)grow[o] * srow[o * S + p];
                    }
                }
                dW[mc * K + kr] += (T)acc;
            }
        }
    }
}

/* Y (N, M, out...) = conv(X (N, C, in...), W (M, C/group, k...)) + B:
 *   dW_g (Mg, Cg*K) += dY_g (Mg, OUT) @ im2col(X)_g^T,
 *   dX += col2im(W_g^T (Cg*K, Mg) @ dY_g), the image being X (the window swapped),
 *   dB += dY summed over N and OUT.
 * The columns of a chunk of images serve dW first, then dX. */
static pd_status FN(conv_bwd)(pd__exec *x, const pd__win *w, int64_t group, const pd_tensor *X, const pd_tensor *W,
                              const T *dY, T *dX, T *dW, T *dB) {
    int ns = w->nsp;
    int64_t N = X->shape[0], C = X->shape[1], M = W->shape[0], Cg = C / group, Mg = M / group;
    int64_t K = prod64(ns, w->k), IN = prod64(ns, w->in), OUT = prod64(ns, w->out), rows = Cg * K;
    const T *xd = X->data, *wd = W->data;
    if (dB) FN(bias_bwd)(x, N, M, OUT, dY, dB);
    if (!dX && !dW) return PD_OK;
    if (FN(conv_few)(w, Cg, Mg)) return FN(conv_few_bwd)(x, w, group, N, C, M, xd, wd, dY, dX, dW);
    if (sizeof(T) == sizeof(float)) {
        bool done;
        PD_TRY(pd__dnnl_conv_bwd(x, w, group, X, W, (const float *)dY, (float *)dX, (float *)dW, &done));
        if (done) return PD_OK;
    }
    if (Cg * Mg <= 16) {
        FN(conv_direct_bwd)(x, w, group, N, C, M, xd, wd, dY, dX, dW);
        return PD_OK;
    }
    bool direct = K == 1; /* as the forward: X is its own im2col (and IN == OUT) */
    for (int i = 0; i < ns; i++) direct = direct && w->s[i] == 1 && w->pb[i] == 0 && w->pe[i] == 0;
    int64_t per_image = C * K * OUT, chunk = N;
    T *col = NULL; // (chunk * group, Cg*K, OUT)
    if (!direct) {
        chunk = (int64_t)(PD_NN_CHUNK_BYTES / sizeof(T)) / (per_image ? per_image : 1);
        chunk = chunk < 1 ? 1 : chunk > N ? N : chunk;
        if (!(col = pd__scratch_n(x, chunk, per_image, sizeof(T)))) return PD_ERR_NOMEM;
    }
    pd__win wt = win_swap(w);
    for (int64_t n0 = 0; n0 < N; n0 += chunk) {
        int64_t nb = N - n0 < chunk ? N - n0 : chunk;
        if (dW) {
            if (!direct) FN(im2col)(x, xd + n0 * C * IN, nb * C, w, col);
            for (int64_t n = n0; n < n0 + nb; n++)
                for (int64_t gi = 0; gi < group; gi++) {
                    const T *src = direct ? xd + (n * C + gi * Cg) * IN : col + ((n - n0) * group + gi) * rows * OUT;
                    PD_TRY(FN(gemm)(false, true, Mg, rows, OUT, 1, dY + (n * M + gi * Mg) * OUT, OUT, src, OUT, 1,
                                    dW + gi * Mg * rows, rows));
                }
        }
        if (dX) {
            for (int64_t n = n0; n < n0 + nb; n++)
                for (int64_t gi = 0; gi < group; gi++) {
                    T *dst = direct ? dX + (n * C + gi * Cg) * IN : col + ((n - n0) * group + gi) * rows * OUT;
                    PD_TRY(FN(gemm)(true, false, rows, OUT, Mg, 1, wd + gi * Mg * rows, rows,
                                    dY + (n * M + gi * Mg) * OUT, OUT, direct ? 1 : 0, dst, OUT));
                }
            if (!direct) FN(col2im)(x, col, nb * C, &wt, dX + n0 * C * IN);
        }
    }
    return PD_OK;
}

/* Y (N, M, out...) = convT(X (N, C, in...), W (C, M/group, k...)) + B, i.e.
 * col2im(W_g^T X_g): with col = im2col(dY) over the swapped window (image dY,
 * positions those of X), dX_g += W_g (Cg, Mg*K) @ col_g, dW_g += X_g @ col_g^T. */
static pd_status FN(conv_transpose_bwd)(pd__exec *x, const pd__win *w, int64_t group, const pd_tensor *X,
                                        const pd_tensor *W, const T *dY, T *dX, T *dW, T *dB) {
    int ns = w->nsp;
    int64_t N = X->shape[0], C = X->shape[1], Cg = C / group, Mg = W->shape[1], M = Mg * group;
    int64_t K = prod64(ns, w->k), IN = prod64(ns, w->in), OUT = prod64(ns, w->out), rows = Mg * K;
    if (dB) FN(bias_bwd)(x, N, M, OUT, dY, dB);
    if (!dX && !dW) return PD_OK;
    int64_t per_image = M * K * IN;
    int64_t chunk = (int64_t)(PD_NN_CHUNK_BYTES / sizeof(T)) / (per_image ? per_image : 1);
    chunk = chunk < 1 ? 1 : chunk > N ? N : chunk;
    T *col = pd__scratch_n(x, chunk, per_image, sizeof(T)); // (chunk * group, Mg*K, IN)
    if (!col) return PD_ERR_NOMEM;
    const T *xd = X->data, *wd = W->data;
    pd__win wt = win_swap(w);
    for (int64_t n0 = 0; n0 < N; n0 += chunk) {
        int64_t nb = N - n0 < chunk ? N - n0 : chunk;
        FN(im2col)(x, dY + n0 * M * OUT, nb * M, &wt, col);
        for (int64_t n = n0; n < n0 + nb; n++)
            for (int64_t gi = 0; gi < group; gi++) {
                const T *cg = col + ((n - n0) * group + gi) * rows * IN; // (Mg*K, IN)
                if (dX)
                    PD_TRY(FN(gemm)(false, false, Cg, IN, rows, 1, wd + gi * Cg * rows, rows, cg, IN, 1,
                                    dX + (n * C + gi * Cg) * IN, IN));
                if (dW)
                    PD_TRY(FN(gemm)(false, true, Cg, rows, IN, 1, xd + (n * C + gi * Cg) * IN, IN, cg, IN, 1,
                                    dW + gi * Cg * rows, rows));
            }
    }
    return PD_OK;
}

/* ---- pools ------------------------------------------------------------------------------------ */

/* One output row of a max pool through one tap: outputs [lo, hi) see
 * srow[o * S + p], at flat index base + o * S + p of the plane; with irow,
 * the first maximum's index kept (a NaN wins and stays). */
PD__INLINE void FN(max_row)(const T *srow, int64_t S, int64_t p, int64_t lo, int64_t hi, int64_t base, T *yrow,
                            int64_t *irow) {
    if (irow) {
        for (int64_t o = lo; o < hi; o++) {
            T v = srow[o * S + p], b = yrow[o];
            bool gt = v > b || (v != v && b == b) || irow[o] < 0;
            yrow[o] = gt ? v : b;
            irow[o] = gt ? base + o * S + p : irow[o];
        }
    } else {
        for (int64_t o = lo; o < hi; o++) {
            T v = srow[o * S + p], b = yrow[o];
            yrow[o] = v > b || v != v ? v : b;
        }
    }
}

/* One plane of FN(maxpool) on 2-D windows: each output row's taps visited
 * in kernel order, as FN(maxpool_plane) visits them (so the same maximum
 * and index), without its odometers per tap and row, which on small windows
 * cost as much as the comparisons. lo, hi: per kernel column, the output
 * columns whose tap falls inside the row. */
PD__VEC static void FN(maxpool_plane_2d)(const pd__win *w, const T *xp, T *yp, int64_t *ip, const int64_t *lo,
                                         const int64_t *hi) {
    const int64_t KH = w->k[0], KW = w->k[1], H = w->in[0], W = w->in[1], OH = w->out[0], OW = w->out[1];
    const int64_t SH = w->s[0], SW = w->s[1], DH = w->d[0], DW = w->d[1], PH = w->pb[0], PW = w->pb[1];
    for (int64_t oh = 0; oh < OH; oh++) {
        T *yrow = yp + oh * OW;
        int64_t *irow = ip ? ip + oh * OW : NULL;
        for (int64_t o = 0; o < OW; o++) yrow[o] = (T)-INFINITY;
        if (irow)
            for (int64_t o = 0; o < OW; o++) irow[o] = -1;
        for (int64_t kh = 0; kh < KH; kh++) {
            int64_t ih = oh * SH - PH + kh * DH;
            if (ih < 0 || ih >= H) continue;
            for (int64_t kw = 0; kw < KW; kw++)
                FN(max_row)(xp + ih * W, SW, kw * DW - PW, lo[kw], hi[kw], ih * W, yrow, irow);
        }
    }
}

/* One plane of FN(maxpool), any number of dims: taps go outermost and each
 * updates the whole output rows (all dims but the last) it reads inside X,
 * which vectorizes. */
static void FN(maxpool_plane)(const pd__win *w, const T *xp, T *yp, int64_t *ip) {
    int ns = w->nsp, last = ns - 1;
    int64_t K = prod64(ns, w->k), OUT = prod64(ns, w->out);
    int64_t OL = w->out[last], IL = w->in[last], S = w->s[last], outer = OUT / OL;
    for (int64_t o = 0; o < OUT; o++) yp[o] = (T)-INFINITY;
    if (ip)
        for (int64_t o = 0; o < OUT; o++) ip[o] = -1;
    for (int64_t kr = 0; kr < K; kr++) {
        int64_t kk[PD_MAX_DIMS], oi[PD_MAX_DIMS] = {0};
        odo_unflat(kr, w->k, ns, kk);
        int64_t p = kk[last] * w->d[last] - w->pb[last], lo, hi;
        out_range(p, S, IL, OL, &lo, &hi);
        for (int64_t q = 0; q < outer; q++) {
            int64_t off;
            bool ok = outer_offset(w, oi, kk, w->in, &off);
            odo_next(oi, w->out, last);
            if (!ok) continue;
            FN(max_row)(xp + off * IL, S, p, lo, hi, off * IL, yp + q * OL, ip ? ip + q * OL : NULL);
        }
    }
}

/* Y (NC, out...) = max over each window of X (NC, in...); ind: flat index into X
 * of the max (row-major, or column-major over the spatial dims with storage_order=1).
 * Each output sees its taps in window order, so the first maximum wins (a
 * NaN wins and stays). */
static pd_status FN(maxpool)(pd__exec *x, const pd__win *w, int64_t NC, const T *X, T *Y, int64_t *ind, int so) {
    int ns = w->nsp;
    int64_t K = prod64(ns, w->k), IN = prod64(ns, w->in), OUT = prod64(ns, w->out);
    int64_t cstr[PD_MAX_DIMS]; /* column-major strides of the spatial dims */
    for (int i = 0; i < ns; i++) cstr[i] = i == 0 ? 1 : cstr[i - 1] * w->in[i - 1];
    int64_t lo[16], hi[16]; /* the 2-D walk's output columns, per kernel column */
    bool two = ns == 2 && w->k[1] <= 16;
    for (int64_t kw = 0; two && kw < w->k[1]; kw++)
        out_range(kw * w->d[1] - w->pb[1], w->s[1], w->in[1], w->out[1], &lo[kw], &hi[kw]);
    int nt = pd__nthreads(x);
    PD_OMP_FOR(nt, NC * OUT * K > 32768)
    for (int64_t nc = 0; nc < NC; nc++) {
        const T *xp = X + nc * IN;               // (in...)
        T *yp = Y + nc * OUT;                    // (out...)
        int64_t *ip = ind ? ind + nc * OUT : NULL; // (out...)
        if (two) FN(maxpool_plane_2d)(w, xp, yp, ip, lo, hi);
        else FN(maxpool_plane)(w, xp, yp, ip);
        if (ip) {
            for (int64_t o = 0; o < OUT; o++) {
                int64_t bi = ip[o] < 0 ? 0 : ip[o];
                if (so) { /* re-express the offset column-major */
                    int64_t rem = bi, cm = 0;
                    for (int i = ns - 1; i >= 0; i--) {
                        cm += (rem % w->in[i]) * cstr[i];
                        rem /= w->in[i];
                    }
                    bi = cm;
                }
                ip[o] = nc * IN + bi;
            }
        }
    }
    return PD_OK;
}

/* Y (NC, out...) = sum over each window of X (NC, in...) / its count, the
 * product over dims of cnt (pool_counts: concatenated per-dim tap counts). */
static pd_status FN(avgpool)(pd__exec *x, const pd__win *w, int64_t NC, const T *X, T *Y, const int64_t *cnt) {
    int ns = w->nsp, last = ns - 1;
    int64_t K = prod64(ns, w->k), IN = prod64(ns, w->in), OUT = prod64(ns, w->out);
    int64_t OL = w->out[last], IL = w->in[last], S = w->s[last], outer = OUT / OL;
    const int64_t *cl = cnt; /* counts of the last dim */
    for (int i = 0; i < last; i++) cl += w->out[i];
    int nt = pd__nthreads(x);
    PD_OMP_FOR(nt, NC * OUT * K > 32768)
    for (int64_t nc = 0; nc < NC; nc++) {
        const T *xp = X + nc * IN; // (in...)
        T *yp = Y + nc * OUT;      // (out...)
        for (int64_t o = 0; o < OUT; o++) yp[o] = 0;
        for (int64_t kr = 0; kr < K; kr++) {
            int64_t kk[PD_MAX_DIMS], oi[PD_MAX_DIMS] = {0};
            odo_unflat(kr, w->k, ns, kk);
            int64_t p = kk[last] * w->d[last] - w->pb[last], lo, hi;
            out_range(p, S, IL, OL, &lo, &hi);
            for (int64_t q = 0; q < outer; q++) {
                int64_t off;
                bool ok = outer_offset(w, oi, kk, w->in, &off);
                odo_next(oi, w->out, last);
                if (!ok) continue;
                const T *srow = xp + off * IL;
                T *yrow = yp + q * OL;
                if (S == 1)
                    for (int64_t o = lo; o < hi; o++) yrow[o] += srow[o + p];
                else
                    for (int64_t o = lo; o < hi; o++) yrow[o] += srow[o * S + p];
            }
        }
        int64_t oi[PD_MAX_DIMS] = {0};
        for (int64_t q = 0; q < outer; q++) {
            int64_t rd = 1;
            const int64_t *ci = cnt;
            for (int i = 0; i < last; ci += w->out[i], i++) rd *= ci[oi[i]];
            odo_next(oi, w->out, last);
            T *yrow = yp + q * OL;
            for (int64_t o = 0; o < OL; o++) {
                int64_t div = rd * cl[o];
                yrow[o] = div ? yrow[o] / (T)div : (T)NAN;
            }
        }
    }
    return PD_OK;
}

/* Y (NC) = mean of each plane of X (NC, S). */
static pd_status FN(global_avgpool)(pd__exec *x, int64_t NC, int64_t S, const T *X, T *Y) {
    int nt = pd__nthreads(x);
    PD_OMP_FOR(nt, NC * S > 32768)
    for (int64_t nc = 0; nc < NC; nc++) {
        const T *xp = X + nc * S;
        double sum = 0;
        for (int64_t s = 0; s < S; s++) sum += xp[s];
        Y[nc] = (T)(S ? sum / (double)S : NAN);
    }
    return PD_OK;
}

/* maxpool_bwd on 2-D windows given the forward's output Yf: each window's
 * first tap in kernel order equal to its maximum (NaN to a NaN), the one the
 * forward keeps, found by comparing instead of recomputing with indices. */
static void FN(maxpool_bwd_2d)(pd__exec *x, const pd__win *w, int64_t NC, const T *X, const T *Yf, const T *dY,
                               T *dX) {
    const int64_t KH = w->k[0], KW = w->k[1], H = w->in[0], W = w->in[1], OH = w->out[0], OW = w->out[1];
    const int64_t SH = w->s[0], SW = w->s[1], DH = w->d[0], DW = w->d[1], PH = w->pb[0], PW = w->pb[1];
    int nt = pd__nthreads(x);
    PD_OMP_FOR(nt, NC * OH * OW * KH * KW > 32768)
    for (int64_t nc = 0; nc < NC; nc++) {
        const T *xp = X + nc * H * W, *yp = Yf + nc * OH * OW, *gp = dY + nc * OH * OW;
        T *dp = dX + nc * H * W;
        for (int64_t oh = 0, o = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++, o++) {
                T y = yp[o];
                int64_t at = -1;
                for (int64_t kh = 0; kh < KH && at < 0; kh++) {
                    int64_t ih = oh * SH - PH + kh * DH;
                    if (ih < 0 || ih >= H) continue;
                    for (int64_t kw = 0; kw < KW; kw++) {
                        int64_t iw = ow * SW - PW + kw * DW;
                        if (iw < 0 || iw >= W) continue;
                        T v = xp[ih * W + iw];
                        if (v == y || (v != v && y != y)) {
                            at = ih * W + iw;
                            break;
                        }
                    }
                }
                if (at >= 0) dp[at] += gp[o];
            }
    }
}

/* dX (NC, in...) += dY (NC, out...) at each window's maximum, recomputed by
 * the forward's maxpool (the first maximum in window order wins, as there);
 * on 2-D windows with the forward's output Yf (may be NULL), by
 * FN(maxpool_bwd_2d). Y (NC*OUT) and ind (NC*OUT) are scratch. */
static pd_status FN(maxpool_bwd)(pd__exec *x, const pd__win *w, int64_t NC, const T *X, const T *Yf, const T *dY,
                                 T *Y, int64_t *ind, T *dX) {
    if (Yf && w->nsp == 2) {
        FN(maxpool_bwd_2d)(x, w, NC, X, Yf, dY, dX);
        return PD_OK;
    }
    PD_TRY(FN(maxpool)(x, w, NC, X, Y, ind, 0));
    int64_t OUT = prod64(w->nsp, w->out), K = prod64(w->nsp, w->k);
    int nt = pd__nthreads(x);
    PD_OMP_FOR(nt, NC * OUT * K > 32768)
    for (int64_t nc = 0; nc < NC; nc++)
        for (int64_t o = nc * OUT; o < (nc + 1) * OUT; o++) {
            int64_t i = ind[o]; /* into X, in this plane */
            if (X[i] != Y[o] && Y[o] == Y[o]) continue; /* a window wholly in the pads: -inf, no input */
            dX[i] += dY[o];
        }
    return PD_OK;
}

/* dX (NC, in...) += dY / count, spread over each window's taps inside X
 * (cnt as the forward's: pool_counts). G (NC*OUT) is scratch. */
static pd_status FN(avgpool_bwd)(pd__exec *x, const pd__win *w, int64_t NC, const T *dY, const int64_t *cnt, T *G,
                                 T *dX) {
    int ns = w->nsp, last = ns - 1;
    int64_t K = prod64(ns, w->k), IN = prod64(ns, w->in), OUT = prod64(ns, w->out);
    int64_t OL = w->out[last], IL = w->in[last], S = w->s[last], outer = OUT / OL;
    const int64_t *cl = cnt; /* counts of the last dim */
    for (int i = 0; i < last; i++) cl += w->out[i];
    int nt = pd__nthreads(x);
    PD_OMP_FOR(nt, NC * OUT * K > 32768)
    for (int64_t nc = 0; nc < NC; nc++) {
        const T *dyp = dY + nc * OUT; // (out...)
        T *gp = G + nc * OUT;         // (out...)
        T *xp = dX + nc * IN;         // (in...)
        int64_t oi[PD_MAX_DIMS] = {0};
        for (int64_t q = 0; q < outer; q++) {
            int64_t rd = 1;
            const int64_t *ci = cnt;
            for (int i = 0; i < last; ci += w->out[i], i++) rd *= ci[oi[i]];
            odo_next(oi, w->out, last);
            for (int64_t o = 0; o < OL; o++) {
                int64_t div = rd * cl[o];
                gp[q * OL + o] = div ? dyp[q * OL + o] / (T)div : (T)0;
            }
        }
        for (int64_t kr = 0; kr < K; kr++) {
            int64_t kk[PD_MAX_DIMS], oj[PD_MAX_DIMS] = {0};
            odo_unflat(kr, w->k, ns, kk);
            int64_t p = kk[last] * w->d[last] - w->pb[last], lo, hi;
            out_range(p, S, IL, OL, &lo, &hi);
            for (int64_t q = 0; q < outer; q++) {
                int64_t off;
                bool ok = outer_offset(w, oj, kk, w->in, &off);
                odo_next(oj, w->out, last);
                if (!ok) continue;
                T *drow = xp + off * IL;
                const T *grow = gp + q * OL;
                if (S == 1)
                    for (int64_t o = lo; o < hi; o++) drow[o + p] += grow[o];
                else
                    for (int64_t o = lo; o < hi; o++) drow[o * S + p] += grow[o];
            }
        }
    }
    return PD_OK;
}

/* dX (NC, S) += dY (NC) / S. */
static pd_status FN(global_avgpool_bwd)(pd__exec *x, int64_t NC, int64_t S, const T *dY, T *dX) {
    int nt = pd__nthreads(x);
    PD_OMP_FOR(nt, NC * S > 32768)
    for (int64_t nc = 0; nc < NC; nc++) {
        T g = (T)(dY[nc] / (double)S), *xp = dX + nc * S;
        for (int64_t s = 0; s < S; s++) xp[s] += g;
    }
    return PD_OK;
}

/* ---- normalizations ---------------------------------------------------------------------------- */

/* Y (N, F, S) = (X - m[f]) * a[f] + b[f]. */
static pd_status FN(affine)(pd__exec *x, int64_t N, int64_t F, int64_t S, const T *X, const double *m,
                            const double *a, const double *b, T *Y) {
    int nt = pd__nthreads(x);
    int64_t fb = S >= PD_BN_ROW ? 1 : PD_BN_CHANS, nfb = F > 0 ? (F + fb - 1) / fb : 0;
    PD_OMP_FOR(nt, N * F * S > 32768)
    for (int64_t q = 0; q < N * nfb; q++) { /* image n's channels [f0, f1) */
        int64_t n = q / nfb, f0 = q % nfb * fb, f1 = f0 + pd__min64(fb, F - f0);
        if (S == 1) { /* 1x1 planes: across the channels */
            for (int64_t f = f0; f < f1; f++) Y[n * F + f] = (X[n * F + f] - (T)m[f]) * (T)a[f] + (T)b[f];
            continue;
        }
        for (int64_t f = f0; f < f1; f++) {
            T mv = (T)m[f], av = (T)a[f], bv = (T)b[f];
            const T *xp = X + (n * F + f) * S;
            T *yp = Y + (n * F + f) * S;
            for (int64_t s = 0; s < S; s++) yp[s] = (xp[s] - mv) * av + bv;
        }
    }
    return PD_OK;
}

/* Y (R, D) = (X - mean) / sqrt(var + eps) * scale (D) + bias (D), per row;
 * mean and inv_std (R) are stored with dtype mdt when asked for. */
/* A row's sum and sum of squared deviations from m, in double, over 8
 * lanes (so the loops vectorize; the order is fixed, so the results are the
 * same run after run). */
PD__INLINE double FN(row_sum)(const T *x, int64_t n) {
    double acc[8] = {0}, s = 0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += (double)x[i + l];
    for (; i < n; i++) s += (double)x[i];
    return s + pd__lanes8(acc);
}
PD__INLINE double FN(row_sqdev)(const T *x, int64_t n, double m) {
    double acc[8] = {0}, s = 0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += ((double)x[i + l] - m) * ((double)x[i + l] - m);
    for (; i < n; i++) s += ((double)x[i] - m) * ((double)x[i] - m);
    return s + pd__lanes8(acc);
}

/* mean[f], var[f] (biased) of X (N, F, S) over N and S, two passes in
 * double: each of channel f's N rows summed over 8 lanes (FN(row_sum)), the
 * rows' sums added in order, so a channel's statistics are the same at
 * every thread count (threads take channels). */
PD__VEC static void FN(bn_stats_chan)(const T *X, int64_t N, int64_t FS, int64_t S, double *mean, double *var) {
    double cnt = (double)(N * S), sum = 0, sq = 0;
    for (int64_t n = 0; n < N; n++) sum += FN(row_sum)(X + n * FS, S);
    double m = cnt > 0 ? sum / cnt : 0;
    for (int64_t n = 0; n < N; n++) sq += FN(row_sqdev)(X + n * FS, S, m);
    *mean = m;
    *var = cnt > 0 ? sq / cnt : 0;
}

/* FN(bn_stats_chan) for the channels [f0, f1) of planes under 8 values
 * (S < PD_BN_ROW: a row's eight lanes stay empty, so its sum is its values
 * added in order), the images outer, so a pass reads X once in order and
 * the channels vectorize: each channel's sums are made in
 * FN(bn_stats_chan)'s order, the same bits. Inlined with S a constant
 * (FN(bn_stats_small)), which unrolls the rows. */
PD__INLINE void FN(bn_stats_rows)(const T *X, int64_t N, int64_t F, int64_t S, int64_t f0, int64_t nf, double *mean,
                                  double *var) {
    double cnt = (double)(N * S), sum[PD_BN_CHANS] = {0}, sq[PD_BN_CHANS] = {0};
    for (int64_t n = 0; n < N; n++) {
        const T *xn = X + (n * F + f0) * S;
        for (int64_t j = 0; j < nf; j++) {
            double r = 0;
            for (int64_t s = 0; s < S; s++) r += (double)xn[j * S + s];
            sum[j] += r;
        }
    }
    for (int64_t j = 0; j < nf; j++) mean[f0 + j] = cnt > 0 ? sum[j] / cnt : 0;
    for (int64_t n = 0; n < N; n++) {
        const T *xn = X + (n * F + f0) * S;
        for (int64_t j = 0; j < nf; j++) {
            double m = mean[f0 + j], r = 0;
            for (int64_t s = 0; s < S; s++) r += ((double)xn[j * S + s] - m) * ((double)xn[j * S + s] - m);
            sq[j] += r;
        }
    }
    for (int64_t j = 0; j < nf; j++) var[f0 + j] = cnt > 0 ? sq[j] / cnt : 0;
}
PD__VEC static void FN(bn_stats_small)(const T *X, int64_t N, int64_t F, int64_t S, int64_t f0, int64_t nf,
                                       double *mean, double *var) {
    if (S == 1) FN(bn_stats_rows)(X, N, F, 1, f0, nf, mean, var);
    else if (S == 4) FN(bn_stats_rows)(X, N, F, 4, f0, nf, mean, var);
    else FN(bn_stats_rows)(X, N, F, S, f0, nf, mean, var);
}

static pd_status FN(batch_stats)(pd__exec *x, int64_t N, int64_t F, int64_t S, const T *X, double *mean,
                                 double *var) {
    int nt = pd__nthreads(x);
    if (S < PD_BN_ROW) {
        int64_t nfb = (F + PD_BN_CHANS - 1) / PD_BN_CHANS;
        PD_OMP_FOR(nt, N * F * S > 32768)
        for (int64_t q = 0; q < nfb; q++)
            FN(bn_stats_small)(X, N, F, S, q * PD_BN_CHANS, pd__min64(PD_BN_CHANS, F - q * PD_BN_CHANS), mean, var);
        return PD_OK;
    }
    PD_OMP_FOR(nt, N * F * S > 32768)
    for (int64_t f = 0; f < F; f++)
        FN(bn_stats_chan)(X + f * S, N, F * S, S, &mean[f], &var[f]);
    return PD_OK;
}

/* One row of LayerNormalization: *m, *is its mean and 1/std. */
PD__VEC static void FN(layer_norm_row)(const T *xp, int64_t D, const T *scale, const T *bias, double eps, T *yp,
                                       double *m_out, double *is_out) {
    double m = D ? FN(row_sum)(xp, D) / (double)D : 0;
    double is = 1.0 / sqrt((D ? FN(row_sqdev)(xp, D, m) / (double)D : 0) + eps);
    if (bias)
        for (int64_t i = 0; i < D; i++) yp[i] = (T)(((double)xp[i] - m) * is * scale[i] + bias[i]);
    else
        for (int64_t i = 0; i < D; i++) yp[i] = (T)(((double)xp[i] - m) * is * scale[i]);
    *m_out = m;
    *is_out = is;
}

static pd_status FN(layer_norm)(pd__exec *x, int64_t R, int64_t D, const T *X, const T *scale, const T *bias,
                                double eps, T *Y, void *mean, void *inv_std, pd_dtype mdt) {
    int nt = pd__nthreads(x);
    PD_OMP_FOR(nt, R * D > 32768)
    for (int64_t r = 0; r < R; r++) {
        double m, is;
        FN(layer_norm_row)(X + r * D, D, scale, bias, eps, Y + r * D, &m, &is);
        if (mean) pd__set_f(mdt, mean, r, m);
        if (inv_std) pd__set_f(mdt, inv_std, r, is);
    }
    return PD_OK;
}

/* Y = X / (bias + alpha/size * sum of X^2 over the size channels around c)^beta, X (N, C, S). */
static pd_status FN(lrn)(pd__exec *x, int64_t N, int64_t C, int64_t S, const T *X, int64_t size, double alpha,
                         double beta, double bias, T *Y) {
    int nt = pd__nthreads(x);
    int64_t before = (size - 1) / 2, after = size / 2;
    PD_OMP_FOR(nt, N * C * S * size > 32768)
    for (int64_t nc = 0; nc < N * C; nc++) {
        int64_t n = nc / C, c = nc % C;
        int64_t lo = c - before < 0 ? 0 : c - before, hi = c + after > C - 1 ? C - 1 : c + after;
        const T *xn = X + n * C * S;
        T *yp = Y + nc * S;
        for (int64_t s = 0; s < S; s++) {
            double sq = 0;
            for (int64_t j = lo; j <= hi; j++) sq += (double)xn[j * S + s] * xn[j * S + s];
            yp[s] = (T)(xn[c * S + s] / pow(bias + alpha / (double)size * sq, beta));
        }
    }
    return PD_OK;
}

/* X (N, F, S), y = (x - mean) * istd * scale + b per feature f. Sums sdy[f] =
 * sum dY and sdyx[f] = sum dY * xhat over N and S (the gradients of b and
 * scale). dX (when given) += scale * istd * dY, and with batch statistics
 * (batch: mean and istd are X's own) minus the parts through them:
 * - scale * istd * (sdy + xhat * sdyx) / (N*S). */
/* bn_bwd's channel: X, dY, dX at its first row, rows FS apart; *a = sum
 * dY, *b = sum dY * (X - m), each row over 8 lanes, the rows in order. */
PD__VEC static void FN(bn_bwd_sums)(const T *X, const T *dY, int64_t N, int64_t FS, int64_t S, double m, double *a,
                                    double *b) {
    double sa = 0, sb = 0;
    for (int64_t n = 0; n < N; n++) {
        const T *xp = X + n * FS, *gp = dY + n * FS;
        double a8[8] = {0}, b8[8] = {0}, ra = 0, rb = 0;
        int64_t s = 0;
        for (; s + 8 <= S; s += 8)
            for (int l = 0; l < 8; l++) {
                a8[l] += (double)gp[s + l];
                b8[l] += (double)gp[s + l] * ((double)xp[s + l] - m);
            }
        for (; s < S; s++) {
            ra += (double)gp[s];
            rb += (double)gp[s] * ((double)xp[s] - m);
        }
        sa += ra + pd__lanes8(a8);
        sb += rb + pd__lanes8(b8);
    }
    *a = sa;
    *b = sb;
}
/* dX += k * (dY - ma - (X - m) * c) over the channel's rows */
PD__VEC static void FN(bn_bwd_dx)(const T *X, const T *dY, T *dX, int64_t N, int64_t FS, int64_t S, double m,
                                  double k, double ma, double c) {
    for (int64_t n = 0; n < N; n++) {
        const T *xp = X + n * FS, *gp = dY + n * FS;
        T *dp = dX + n * FS;
        for (int64_t s = 0; s < S; s++) dp[s] += (T)(k * ((double)gp[s] - ma - ((double)xp[s] - m) * c));
    }
}

/* FN(bn_bwd)'s channels [f0, f0 + nf) for planes under 8 values, images
 * outer (as FN(bn_stats_rows)): each channel's sums in FN(bn_bwd_sums)'s
 * order and the same dX, so the same bits. */
PD__INLINE void FN(bn_bwd_rows)(const T *X, const T *dY, int64_t N, int64_t F, int64_t S, int64_t f0, int64_t nf,
                                const double *mean, const double *istd, const double *scale, bool batch, T *dX,
                                double *sdy, double *sdyx) {
    double cnt = (double)(N * S), sa[PD_BN_CHANS] = {0}, sb[PD_BN_CHANS] = {0};
    double k[PD_BN_CHANS], ma[PD_BN_CHANS], c[PD_BN_CHANS];
    for (int64_t n = 0; n < N; n++) {
        int64_t o = (n * F + f0) * S;
        for (int64_t j = 0; j < nf; j++) {
            double m = mean[f0 + j], ra = 0, rb = 0;
            for (int64_t s = 0; s < S; s++) {
                ra += (double)dY[o + j * S + s];
                rb += (double)dY[o + j * S + s] * ((double)X[o + j * S + s] - m);
            }
            sa[j] += ra;
            sb[j] += rb;
        }
    }
    for (int64_t j = 0; j < nf; j++) {
        double is = istd[f0 + j], a = sa[j], b = sb[j] * is;
        sdy[f0 + j] = a;
        sdyx[f0 + j] = b;
        k[j] = scale[f0 + j] * is;
        ma[j] = batch && cnt > 0 ? a / cnt : 0;
        c[j] = is * (batch && cnt > 0 ? b / cnt : 0);
    }
    if (!dX) return;
    for (int64_t n = 0; n < N; n++) {
        int64_t o = (n * F + f0) * S;
        for (int64_t j = 0; j < nf; j++)
            for (int64_t s = 0; s < S; s++) {
                int64_t i = o + j * S + s;
                dX[i] += (T)(k[j] * ((double)dY[i] - ma[j] - ((double)X[i] - mean[f0 + j]) * c[j]));
            }
    }
}
PD__VEC static void FN(bn_bwd_small)(const T *X, const T *dY, int64_t N, int64_t F, int64_t S, int64_t f0,
                                     int64_t nf, const double *mean, const double *istd, const double *scale,
                                     bool batch, T *dX, double *sdy, double *sdyx) {
    if (S == 1) FN(bn_bwd_rows)(X, dY, N, F, 1, f0, nf, mean, istd, scale, batch, dX, sdy, sdyx);
    else if (S == 4) FN(bn_bwd_rows)(X, dY, N, F, 4, f0, nf, mean, istd, scale, batch, dX, sdy, sdyx);
    else FN(bn_bwd_rows)(X, dY, N, F, S, f0, nf, mean, istd, scale, batch, dX, sdy, sdyx);
}

static pd_status FN(bn_bwd)(pd__exec *x, int64_t N, int64_t F, int64_t S, const T *X, const T *dY,
                            const double *mean, const double *istd, const double *scale, bool batch, T *dX,
                            double *sdy, double *sdyx) {
    int nt = pd__nthreads(x);
    double cnt = (double)(N * S);
    if (S < PD_BN_ROW) {
        int64_t nfb = (F + PD_BN_CHANS - 1) / PD_BN_CHANS;
        PD_OMP_FOR(nt, N * F * S > 32768)
        for (int64_t q = 0; q < nfb; q++)
            FN(bn_bwd_small)(X, dY, N, F, S, q * PD_BN_CHANS, pd__min64(PD_BN_CHANS, F - q * PD_BN_CHANS), mean, istd,
                             scale, batch, dX, sdy, sdyx);
        return PD_OK;
    }
    PD_OMP_FOR(nt, N * F * S > 32768)
    for (int64_t f = 0; f < F; f++) {
        double m = mean[f], is = istd[f], a, b;
        FN(bn_bwd_sums)(X + f * S, dY + f * S, N, F * S, S, m, &a, &b);
        b *= is;
        sdy[f] = a;
        sdyx[f] = b;
        if (!dX) continue;
        double k = scale[f] * is, ma = batch && cnt > 0 ? a / cnt : 0, mb = batch && cnt > 0 ? b / cnt : 0;
        FN(bn_bwd_dx)(X + f * S, dY + f * S, dX + f * S, N, F * S, S, m, k, ma, is * mb);
    }
    return PD_OK;
}

/* One row of LayerNormalization's backward: st = (mean, 1/std); dX (when
 * not NULL) += from dY (may be NULL), cm = dLoss/dmean / D and di_r =
 * dLoss/d(1/std), in double over 8 lanes as the forward. */
PD__VEC static void FN(layer_norm_bwd_row)(const T *xp, int64_t D, const T *scale, double eps, const T *gp, double cm,
                                           double di_r, T *dp, double *st) {
    double m = D ? FN(row_sum)(xp, D) / (double)D : 0;
    double is = 1.0 / sqrt((D ? FN(row_sqdev)(xp, D, m) / (double)D : 0) + eps);
    st[0] = m;
    st[1] = is;
    if (!dp || D == 0) return;
    double mg = 0, mgx = 0;
    if (gp) {
        double a1[8] = {0}, a2[8] = {0};
        int64_t i = 0;
        for (; i + 8 <= D; i += 8)
            for (int l = 0; l < 8; l++) {
                double g = (double)gp[i + l] * scale[i + l];
                a1[l] += g;
                a2[l] += g * ((double)xp[i + l] - m);
            }
        for (; i < D; i++) {
            double g = (double)gp[i] * scale[i];
            mg += g;
            mgx += g * ((double)xp[i] - m);
        }
        mg += pd__lanes8(a1);
        mgx += pd__lanes8(a2);
        mg /= (double)D;
        mgx *= is / (double)D;
    }
    double ci = -di_r * is * is * is / (double)D; /* d istd / d x_i */
    if (gp)
        for (int64_t i = 0; i < D; i++) {
            double xm = (double)xp[i] - m;
            dp[i] += (T)(cm + ci * xm + is * ((double)gp[i] * scale[i] - mg - xm * is * mgx));
        }
    else
        for (int64_t i = 0; i < D; i++) dp[i] += (T)(cm + ci * ((double)xp[i] - m));
}

/* dsc, dbi [i0, i0 + ni) = sums over the rows of dY * xhat and dY, in row
 * order (blocks of columns go to threads: the same bits at every count). */
#define PD_LN_BLK 32
PD__VEC static void FN(layer_norm_col_sums)(int64_t R, int64_t D, const T *X, const T *dY, const double *st,
                                            int64_t i0, int64_t ni, double *dsc, double *dbi) {
    double s1[PD_LN_BLK] = {0}, s2[PD_LN_BLK] = {0};
    for (int64_t r = 0; r < R; r++) {
        const T *xp = X + r * D + i0, *gp = dY + r * D + i0;
        double m = st[2 * r], is = st[2 * r + 1];
        for (int64_t i = 0; i < ni; i++) {
            s1[i] += (double)gp[i] * (xp[i] - m) * is;
            s2[i] += gp[i];
        }
    }
    for (int64_t i = 0; i < ni; i++) {
        if (dsc) dsc[i0 + i] = s1[i];
        if (dbi) dbi[i0 + i] = s2[i];
    }
}

/* LayerNormalization over rows of X (R, D), y = xhat * scale (D) + bias:
 * row statistics (mean, istd as the forward computes them) go to st (2R);
 * dX (when given) += istd * (g - mean(g) - xhat * mean(g * xhat)), g = dY * scale,
 * plus what flows back from the Mean (dm) and InvStdDev (di) outputs;
 * dsc, dbi (D, when given) = sum over rows of dY * xhat and dY. dY may be NULL
 * (only dm or di given). */
static pd_status FN(layer_norm_bwd)(pd__exec *x, int64_t R, int64_t D, const T *X, const T *scale, double eps,
                                    const T *dY, const void *dm, const void *di, pd_dtype mdt, T *dX, double *st,
                                    double *dsc, double *dbi) {
    int nt = pd__nthreads(x);
    PD_OMP_FOR(nt, R * D > 32768)
    for (int64_t r = 0; r < R; r++) {
        double cm = dm ? pd__get_f(mdt, dm, r) / (double)D : 0; /* d mean / d x_i = 1/D */
        double di_r = di ? pd__get_f(mdt, di, r) : 0;
        FN(layer_norm_bwd_row)(X + r * D, D, scale, eps, dY ? dY + r * D : NULL, cm, di_r, dX ? dX + r * D : NULL,
                               st + 2 * r);
    }
    if (!dY || (!dsc && !dbi)) return PD_OK;
    int64_t nblk = (D + PD_LN_BLK - 1) / PD_LN_BLK;
    PD_OMP_FOR(nt, R * D > 32768)
    for (int64_t b = 0; b < nblk; b++) {
        int64_t i0 = b * PD_LN_BLK;
        FN(layer_norm_col_sums)(R, D, X, dY, st, i0, D - i0 < PD_LN_BLK ? D - i0 : PD_LN_BLK, dsc, dbi);
    }
    return PD_OK;
}

/* GroupNormalization and InstanceNormalization (G = C): X (N, C, S) in N*G
 * rows of Cg = C/G consecutive channels, each normalized over its Cg*S
 * values (mean and biased variance in double, as LayerNormalization);
 * Y = xhat * sc[c] + bi[c] per channel c. */
static pd_status FN(group_norm)(pd__exec *x, int64_t N, int64_t C, int64_t G, int64_t S, const T *X,
                                const double *sc, const double *bi, double eps, T *Y) {
    int64_t Cg = C / G, D = Cg * S;
    int nt = pd__nthreads(x);
    PD_OMP_FOR(nt, N * C * S > 32768)
    for (int64_t r = 0; r < N * G; r++) {
        const T *xp = X + r * D;
        T *yp = Y + r * D;
        double m = D ? FN(row_sum)(xp, D) / (double)D : 0;
        double is = 1.0 / sqrt((D ? FN(row_sqdev)(xp, D, m) / (double)D : 0) + eps);
        for (int64_t j = 0, c = (r % G) * Cg; j < Cg; j++, c++)
            for (int64_t s = 0; s < S; s++) yp[j * S + s] = (T)(((double)xp[j * S + s] - m) * is * sc[c] + bi[c]);
    }
    return PD_OK;
}

/* The backward of group_norm: row statistics to st (2*N*G); dX (when given)
 * += istd * (g - mean(g) - xhat * mean(g * xhat)) per row, g = dY * sc[c];
 * dsc, dbi (C, when given) = sums over N and S of dY * xhat and dY. */
static pd_status FN(group_norm_bwd)(pd__exec *x, int64_t N, int64_t C, int64_t G, int64_t S, const T *X,
                                    const T *dY, const double *sc, double eps, T *dX, double *st, double *dsc,
                                    double *dbi) {
    int64_t Cg = C / G, D = Cg * S;
    int nt = pd__nthreads(x);
    PD_OMP_FOR(nt, N * C * S > 32768)
    for (int64_t r = 0; r < N * G; r++) {
        const T *xp = X + r * D, *gp = dY + r * D;
        double m = D ? FN(row_sum)(xp, D) / (double)D : 0;
        double is = 1.0 / sqrt((D ? FN(row_sqdev)(xp, D, m) / (double)D : 0) + eps);
        st[2 * r] = m;
        st[2 * r + 1] = is;
        if (!dX || D == 0) continue;
        int64_t c0 = (r % G) * Cg;
        double mg = 0, mgx = 0;
        for (int64_t j = 0; j < Cg; j++)
            for (int64_t s = 0; s < S; s++) {
                double g = (double)gp[j * S + s] * sc[c0 + j];
                mg += g;
                mgx += g * ((double)xp[j * S + s] - m) * is;
            }
        mg /= (double)D;
        mgx /= (double)D;
        T *dp = dX + r * D;
        for (int64_t j = 0; j < Cg; j++)
            for (int64_t s = 0; s < S; s++) {
                double xh = ((double)xp[j * S + s] - m) * is;
                dp[j * S + s] += (T)(is * ((double)gp[j * S + s] * sc[c0 + j] - mg - xh * mgx));
            }
    }
    if (!dsc && !dbi) return PD_OK;
    PD_OMP_FOR(nt, N * C * S > 32768)
    for (int64_t c = 0; c < C; c++) {
        double s1 = 0, s2 = 0;
        for (int64_t n = 0; n < N; n++) {
            int64_t r = n * G + c / Cg;
            const T *xp = X + (n * C + c) * S, *gp = dY + (n * C + c) * S;
            double m = st[2 * r], is = st[2 * r + 1];
            for (int64_t s = 0; s < S; s++) {
                s1 += (double)gp[s] * ((double)xp[s] - m) * is;
                s2 += gp[s];
            }
        }
        if (dsc) dsc[c] = s1;
        if (dbi) dbi[c] = s2;
    }
    return PD_OK;
}

/* RMSNormalization over rows of X (R, D): Y = X * istd * scale (D),
 * istd = 1/sqrt(mean(X^2) + eps), in double. */
static pd_status FN(rms_norm)(pd__exec *x, int64_t R, int64_t D, const T *X, const T *scale, double eps, T *Y) {
    int nt = pd__nthreads(x);
    PD_OMP_FOR(nt, R * D > 32768)
    for (int64_t r = 0; r < R; r++) {
        const T *xp = X + r * D;
        T *yp = Y + r * D;
        double is = 1.0 / sqrt((D ? FN(row_sqdev)(xp, D, 0) / (double)D : 0) + eps);
        for (int64_t i = 0; i < D; i++) yp[i] = (T)((double)xp[i] * is * scale[i]);
    }
    return PD_OK;
}

/* The backward of rms_norm: istd per row to st (R); dX (when given) +=
 * istd * g - x * istd^3 * mean(g * x), g = dY * scale; dsc (D, when given)
 * = sum over rows of dY * x * istd. */
static pd_status FN(rms_norm_bwd)(pd__exec *x, int64_t R, int64_t D, const T *X, const T *scale, double eps,
                                  const T *dY, T *dX, double *st, double *dsc) {
    int nt = pd__nthreads(x);
    PD_OMP_FOR(nt, R * D > 32768)
    for (int64_t r = 0; r < R; r++) {
        const T *xp = X + r * D, *gp = dY + r * D;
        double is = 1.0 / sqrt((D ? FN(row_sqdev)(xp, D, 0) / (double)D : 0) + eps);
        st[r] = is;
        if (!dX || D == 0) continue;
        double a = 0;
        for (int64_t i = 0; i < D; i++) a += (double)gp[i] * scale[i] * xp[i];
        double k = is * is * is * a / (double)D;
        T *dp = dX + r * D;
        for (int64_t i = 0; i < D; i++) dp[i] += (T)(is * (double)gp[i] * scale[i] - (double)xp[i] * k);
    }
    if (!dsc) return PD_OK;
    PD_OMP_FOR(nt, R * D > 32768)
    for (int64_t i = 0; i < D; i++) {
        double s1 = 0;
        for (int64_t r = 0; r < R; r++) s1 += (double)dY[r * D + i] * X[r * D + i] * st[r];
        dsc[i] = s1;
    }
    return PD_OK;
}

/* y_c = x_c * d_c^-beta, d_c = bias + alpha/size * sum of x_j^2 over the
 * channels j around c, X (N, C, S):
 *   dx_j += dy_j d_j^-beta - 2 alpha beta / size * x_j * sum over the c whose
 *           window holds j of dy_c x_c d_c^(-beta-1).
 * Q (N*C*S) is scratch for dy_c x_c d_c^(-beta-1). */
static pd_status FN(lrn_bwd)(pd__exec *x, int64_t N, int64_t C, int64_t S, const T *X, const T *dY, int64_t size,
                             double alpha, double beta, double bias, double *Q, T *dX) {
    int nt = pd__nthreads(x);
    int64_t before = (size - 1) / 2, after = size / 2;
    PD_OMP_FOR(nt, N * C * S * size > 32768)
    for (int64_t nc = 0; nc < N * C; nc++) {
        int64_t n = nc / C, c = nc % C;
        int64_t lo = c - before < 0 ? 0 : c - before, hi = c + after > C - 1 ? C - 1 : c + after;
        const T *xn = X + n * C * S, *gp = dY + nc * S;
        for (int64_t s = 0; s < S; s++) {
            double sq = 0;
            for (int64_t j = lo; j <= hi; j++) sq += (double)xn[j * S + s] * xn[j * S + s];
            double d = bias + alpha / (double)size * sq, p = pow(d, -beta);
            dX[nc * S + s] += (T)(gp[s] * p);
            Q[nc * S + s] = gp[s] * (double)xn[c * S + s] * p / d;
        }
    }
    double k = -2 * alpha * beta / (double)size;
    PD_OMP_FOR(nt, N * C * S * size > 32768)
    for (int64_t nc = 0; nc < N * C; nc++) {
        int64_t n = nc / C, c = nc % C;
        int64_t lo = c - after < 0 ? 0 : c - after, hi = c + before > C - 1 ? C - 1 : c + before;
        const double *qn = Q + n * C * S;
        for (int64_t s = 0; s < S; s++) {
            double acc = 0;
            for (int64_t j = lo; j <= hi; j++) acc += qn[j * S + s];
            dX[nc * S + s] += (T)(k * X[nc * S + s] * acc);
        }
    }
    return PD_OK;
}

/* ---- LpNormalization, MeanVarianceNormalization, GlobalMaxPool, LpPool ---------------------------- */

/* Lines of X (outer, len, inner) along len: y = x / ||x||_p, p 1 or 2 (a
 * line of zeros stays 0, as ONNX's reference). */
static pd_status FN(lp_norm)(pd__exec *x, int64_t outer, int64_t len, int64_t inner, int p, const T *X, T *Y) {
    int nt = pd__nthreads(x);
    PD_OMP_FOR(nt, outer * len * inner > 32768)
    for (int64_t q = 0; q < outer * inner; q++) {
        int64_t base = (q / inner) * len * inner + q % inner;
        double nrm = 0;
        for (int64_t j = 0; j < len; j++) {
            double v = X[base + j * inner];
            nrm += p == 1 ? fabs(v) : v * v;
        }
        if (p == 2) nrm = sqrt(nrm);
        for (int64_t j = 0; j < len; j++) Y[base + j * inner] = nrm == 0 ? (T)0 : (T)(X[base + j * inner] / nrm);
    }
    return PD_OK;
}

/* dX += dY / n - d n/dx * sum(dY * x) / n^2, n = ||x||_p: d n/dx = x / n
 * (p 2) or sign(x) (p 1, 0 at 0 as PyTorch's abs). */
static pd_status FN(lp_norm_bwd)(pd__exec *x, int64_t outer, int64_t len, int64_t inner, int p, const T *X,
                                 const T *dY, T *dX) {
    int nt = pd__nthreads(x);
    PD_OMP_FOR(nt, outer * len * inner > 32768)
    for (int64_t q = 0; q < outer * inner; q++) {
        int64_t base = (q / inner) * len * inner + q % inner;
        double nrm = 0, a = 0;
        for (int64_t j = 0; j < len; j++) {
            double v = X[base + j * inner];
            nrm += p == 1 ? fabs(v) : v * v;
            a += (double)dY[base + j * inner] * v;
        }
        if (p == 2) nrm = sqrt(nrm);
        if (nrm == 0) continue; /* y is 0 there whatever x: no gradient */
        for (int64_t j = 0; j < len; j++) {
            double v = X[base + j * inner], dn = p == 2 ? v / nrm : (double)((v > 0) - (v < 0));
            dX[base + j * inner] += (T)(dY[base + j * inner] / nrm - dn * a / (nrm * nrm));
        }
    }
    return PD_OK;
}

/* MeanVarianceNormalization: element i belongs to group key[i] (K groups of
 * numel/K elements); y = (x - mean) / (std + 1e-9), std the biased one,
 * as ONNX's function body. st (2K) is scratch. */
static pd_status FN(mvn)(int64_t numel, int64_t K, const int64_t *key, const T *X, double *st, T *Y) {
    double *m = st, *v = st + K, cnt = K ? (double)(numel / K) : 1;
    for (int64_t k = 0; k < 2 * K; k++) st[k] = 0;
    for (int64_t i = 0; i < numel; i++) m[key[i]] += X[i];
    for (int64_t k = 0; k < K; k++) m[k] /= cnt;
    for (int64_t i = 0; i < numel; i++) v[key[i]] += ((double)X[i] - m[key[i]]) * ((double)X[i] - m[key[i]]);
    for (int64_t k = 0; k < K; k++) v[k] = 1.0 / (sqrt(v[k] / cnt) + 1e-9);
    for (int64_t i = 0; i < numel; i++) Y[i] = (T)(((double)X[i] - m[key[i]]) * v[key[i]]);
    return PD_OK;
}

/* y = (x - m) * k, k = 1 / (s + 1e-9), s^2 = mean((x - m)^2), per group of D:
 * dX += k * (g - mean(g)) - k^2 (x - m) / (D s) * sum(g * (x - m)).
 * st (5K) is scratch. */
static pd_status FN(mvn_bwd)(int64_t numel, int64_t K, const int64_t *key, const T *X, const T *dY, double *st,
                             T *dX) {
    double *m = st, *sd = st + K, *a = sd + K, *b = a + K, cnt = K ? (double)(numel / K) : 1;
    for (int64_t k = 0; k < 4 * K; k++) st[k] = 0;
    for (int64_t i = 0; i < numel; i++) m[key[i]] += X[i];
    for (int64_t k = 0; k < K; k++) m[k] /= cnt;
    for (int64_t i = 0; i < numel; i++) {
        double xm = (double)X[i] - m[key[i]];
        sd[key[i]] += xm * xm;
        a[key[i]] += dY[i];
        b[key[i]] += (double)dY[i] * xm;
    }
    for (int64_t k = 0; k < K; k++) sd[k] = sqrt(sd[k] / cnt);
    for (int64_t i = 0; i < numel; i++) {
        int64_t k = key[i];
        double kk = 1.0 / (sd[k] + 1e-9), xm = (double)X[i] - m[k];
        double through_std = sd[k] > 0 ? kk * kk * xm / (cnt * sd[k]) * b[k] : 0;
        dX[i] += (T)(kk * (dY[i] - a[k] / cnt) - through_std);
    }
    return PD_OK;
}

/* Y (NC) = max of each plane of X (NC, S); NaN propagates. */
static pd_status FN(global_maxpool)(pd__exec *x, int64_t NC, int64_t S, const T *X, T *Y) {
    int nt = pd__nthreads(x);
    PD_OMP_FOR(nt, NC * S > 32768)
    for (int64_t nc = 0; nc < NC; nc++) {
        const T *xp = X + nc * S;
        T m = S ? xp[0] : (T)-INFINITY;
        for (int64_t s = 1; s < S && m == m; s++)
            if (xp[s] > m || xp[s] != xp[s]) m = xp[s];
        Y[nc] = m;
    }
    return PD_OK;
}

/* dX (NC, S) += dY (NC) at the first maximum of each plane (MaxPool's rule). */
static pd_status FN(global_maxpool_bwd)(pd__exec *x, int64_t NC, int64_t S, const T *X, const T *dY, T *dX) {
    int nt = pd__nthreads(x);
    PD_OMP_FOR(nt, NC * S > 32768)
    for (int64_t nc = 0; nc < NC; nc++) {
        const T *xp = X + nc * S;
        int64_t best = 0;
        for (int64_t s = 1; s < S && xp[best] == xp[best]; s++)
            if (xp[s] > xp[best] || xp[s] != xp[s]) best = s;
        if (S) dX[nc * S + best] += dY[nc];
    }
    return PD_OK;
}

/* LpPool: y = (sum over the window's taps inside X of |x|^p)^(1/p), pads
 * counting as zeros; with dY given instead of computing Y, dX += dY *
 * |x|^(p-1) sign(x) / y^(p-1) (nothing where y is 0). */
static pd_status FN(lppool)(pd__exec *x, const pd__win *w, int64_t NC, double p, const T *X, T *Y, const T *dY,
                            T *dX) {
    int ns = w->nsp;
    int64_t IN = prod64(ns, w->in), OUT = prod64(ns, w->out), K = prod64(ns, w->k);
    int nt = pd__nthreads(x);
    PD_OMP_FOR(nt, NC * OUT * K > 32768)
    for (int64_t nc = 0; nc < NC; nc++) {
        const T *xp = X + nc * IN;
        int64_t oi[PD_MAX_DIMS] = {0};
        for (int64_t o = 0; o < OUT; o++, odo_next(oi, w->out, ns)) {
            for (int pass = 0; pass < (dY ? 2 : 1); pass++) {
                double acc = 0, y = 0, g = 0;
                if (pass == 1) {
                    y = Y[nc * OUT + o];
                    if (!(y > 0)) break;
                    g = dY[nc * OUT + o] / (p == 1 ? 1 : p == 2 ? y : pow(y, p - 1));
                }
                int64_t ki[PD_MAX_DIMS] = {0};
                for (int64_t kk = 0; kk < K; kk++, odo_next(ki, w->k, ns)) {
                    int64_t off = 0;
                    bool in = true;
                    for (int i = 0; i < ns && in; i++) {
                        int64_t pos = oi[i] * w->s[i] - w->pb[i] + ki[i] * w->d[i];
                        in = pos >= 0 && pos < w->in[i];
                        off = off * w->in[i] + pos;
                    }
                    if (!in) continue;
                    double v = xp[off], av = fabs(v);
                    if (pass == 0) acc += p == 1 ? av : p == 2 ? v * v : pow(av, p);
                    else {
                        double sg = (double)((v > 0) - (v < 0));
                        dX[nc * IN + off] += (T)(g * sg * (p == 1 ? 1 : p == 2 ? av : pow(av, p - 1)));
                    }
                }
                if (pass == 0) Y[nc * OUT + o] = (T)(p == 1 ? acc : p == 2 ? sqrt(acc) : pow(acc, 1.0 / p));
            }
        }
    }
    return PD_OK;
}

/* ---- Resize, Upsample --------------------------------------------------------------------------- */

/* Y[o] = sum over the corners of the taps (resize_taps: ti, tw) of the
 * product of their weights times X there; with dY given instead, the
 * adjoint: dX[corner] += weight * dY[o]. An axis takes as many taps as its
 * weights use (1 for nearest and an axis left as it is, 2 linear, 4 cubic,
 * more with antialias): a nearest 2x upsampling of NCHW reads 1 corner per
 * output, not 16. An output with an axis outside tf_crop_and_resize's roi
 * is the extrapolation value, and passes no gradient back. The
 * adjoint runs a thread per plane of the leading axes left as they are
 * (N, C), whose outputs read only their own plane. */
static pd_status FN(resize)(pd__exec *x, const pd__rsz *r, const int64_t *ti, const double *tw, const T *X, T *Y,
                            const T *dY, T *dX) {
    int nd = r->ndim, ntap[PD_MAX_DIMS], lead = 0, corners = 1;
    int64_t base[PD_MAX_DIMS], OUT = prod64(nd, r->out);
    bool prefix = true;
    for (int d = 0, k = 0; d < nd; k += (int)r->out[d], d++) base[d] = k;
    for (int d = 0; d < nd; d++) {
        bool same = r->in[d] == r->out[d];
        ntap[d] = 1;
        for (int64_t i = 0; i < r->out[d]; i++) {
            const int64_t *ki = ti + r->taps * (base[d] + i);
            const double *kw = tw + r->taps * (base[d] + i);
            for (int j = 1; j < r->taps; j++)
                if (kw[j] != 0 && j + 1 > ntap[d]) ntap[d] = j + 1;
            same = same && ki[0] == i && kw[0] == 1;
        }
        prefix = prefix && same && ntap[d] == 1;
        if (prefix) lead = d + 1;
        corners *= ntap[d];
    }
    int64_t P = prod64(lead, r->out), PO = prod64(nd - lead, r->out + lead);
    int nt = pd__nthreads(x);
    PD_OMP_FOR(nt, (dY ? P > 1 : true) && OUT > 32768)
    for (int64_t u = 0; u < (dY ? P : OUT); u++) {
        /* forward: u is an output; adjoint: u is a plane, its outputs in order */
        int64_t first = dY ? u * PO : u, count = dY ? PO : 1;
        int64_t oi[PD_MAX_DIMS];
        odo_unflat(first, r->out, nd, oi);
        for (int64_t o = first; o < first + count; o++) {
            double acc = 0, g = dY ? (double)dY[o] : 0;
            for (int c = 0; c < corners; c++) {
                double w = 1;
                int64_t off = 0;
                for (int d = 0, q = c; d < nd && w != 0; q /= ntap[d], d++) {
                    int64_t k = r->taps * (base[d] + oi[d]) + q % ntap[d];
                    w *= tw[k];
                    off = off * r->in[d] + ti[k];
                }
                if (w == 0) continue;
                if (dY) dX[off] += (T)(w * g);
                else acc += w * (double)X[off];
            }
            if (!dY && r->ctm == PD_RSZ_TF_CROP_AND_RESIZE)
                for (int d = 0; d < nd; d++)
                    if (ti[r->taps * (base[d] + oi[d])] < 0) acc = r->extrapolation;
            if (!dY) Y[o] = (T)acc;
            if (dY) odo_next(oi, r->out, nd);
        }
    }
    return PD_OK;
}

/* ---- Einsum ------------------------------------------------------------------------------------- */

/* dst (axis j = src's axis perm[j]) = (or +=, add) src (nd dims sshape). */
static void FN(permute)(int nd, const int64_t *sshape, const int *perm, const T *src, T *dst, bool add) {
    int64_t st[PD_MAX_DIMS], dshape[PD_MAX_DIMS], idx[PD_MAX_DIMS] = {0}, n = prod64(nd, sshape), acc = 1;
    for (int i = nd - 1; i >= 0; i--) {
        st[i] = acc;
        acc *= sshape[i];
    }
    for (int j = 0; j < nd; j++) dshape[j] = sshape[perm[j]];
    for (int64_t o = 0; o < n; o++) {
        int64_t off = 0;
        for (int j = 0; j < nd; j++) off += idx[j] * st[perm[j]];
        dst[o] = add ? dst[o] + src[off] : src[off];
        odo_next(idx, dshape, nd);
    }
}

/* Y = Einsum(A, B) as pd__ein plans it: A and B permuted into (batch, M, K)
 * and (batch, K, N) in scratch (s: B*M*K + B*K*N + B*M*N elements), one GEMM
 * per batch, the product permuted into Y. */
static pd_status FN(einsum)(const pd__ein *e, const pd_tensor *A, const pd_tensor *Bt, T *Y, T *s) {
    int64_t B = e->B, M = e->M, N = e->N, K = e->K;
    T *a = s, *b = a + B * M * K, *c = b + B * K * N;
    int q[PD_MAX_DIMS];
    FN(permute)(e->ra, A->shape, e->pa, A->data, a, false);
    FN(permute)(e->rb, Bt->shape, e->pb, Bt->data, b, false);
    for (int64_t i = 0; i < B; i++)
        PD_TRY(FN(gemm)(false, false, M, N, K, 1, a + i * M * K, K, b + i * K * N, N, 0, c + i * M * N, N));
    for (int j = 0; j < e->nbt; j++) q[e->po[j]] = j;
    FN(permute)(e->nbt, e->cshape, q, c, Y, false);
    return PD_OK;
}

/* dA += dY's share through B, dB += through A: dC = dY permuted to
 * (batch, M, N), dA_ = dC @ B_^T, dB_ = A_^T @ dC per batch, permuted back.
 * s: 2*(B*M*K + B*K*N) + B*M*N elements of scratch. */
static pd_status FN(einsum_bwd)(const pd__ein *e, const pd_tensor *A, const pd_tensor *Bt, const T *dY, T *dA, T *dB,
                                T *s) {
    int64_t B = e->B, M = e->M, N = e->N, K = e->K;
    T *a = s, *b = a + B * M * K, *dc = b + B * K * N, *ga = dc + B * M * N, *gb = ga + B * M * K;
    int64_t as[PD_MAX_DIMS], bs[PD_MAX_DIMS];
    int qa[PD_MAX_DIMS], qb[PD_MAX_DIMS];
    for (int j = 0; j < e->ra; j++) as[j] = A->shape[e->pa[j]], qa[e->pa[j]] = j;
    for (int j = 0; j < e->rb; j++) bs[j] = Bt->shape[e->pb[j]], qb[e->pb[j]] = j;
    FN(permute)(e->ra, A->shape, e->pa, A->data, a, false);
    FN(permute)(e->rb, Bt->shape, e->pb, Bt->data, b, false);
    int64_t os[PD_MAX_DIMS];
    for (int j = 0; j < e->nbt; j++) os[e->po[j]] = e->cshape[j];
    FN(permute)(e->nbt, os, e->po, dY, dc, false);
    for (int64_t i = 0; i < B; i++) {
        if (dA) PD_TRY(FN(gemm)(false, true, M, K, N, 1, dc + i * M * N, N, b + i * K * N, N, 0, ga + i * M * K, K));
        if (dB) PD_TRY(FN(gemm)(true, false, K, N, M, 1, a + i * M * K, K, dc + i * M * N, N, 0, gb + i * K * N, N));
    }
    if (dA) FN(permute)(e->ra, as, qa, ga, dA, true);
    if (dB) FN(permute)(e->rb, bs, qb, gb, dB, true);
    return PD_OK;
}

/* ---- softmax family ----------------------------------------------------------------------------- */

/* Y = softmax (or log-softmax) of X (outer, len, inner) over len. Rows
 * (inner == 1) go one per iteration; otherwise blocks of up to 256 inner
 * positions go together so that the loops run along contiguous memory. */
/* One row: eight independent lanes for the max and the sum (the reductions
 * are latency bound otherwise, and the lanes vectorize: PD__VEC, EXP without
 * branches), the lanes added in a fixed order. */
PD__VEC static void FN(softmax_row)(const T *xp, T *yp, int64_t len, int log_sm) {
    T m8[8];
    for (int u = 0; u < 8; u++) m8[u] = -INFINITY;
    int64_t j8 = len & ~(int64_t)7;
    for (int64_t j = 0; j < j8; j += 8)
        for (int u = 0; u < 8; u++) m8[u] = xp[j + u] > m8[u] ? xp[j + u] : m8[u];
    for (int64_t j = j8; j < len; j++) m8[0] = xp[j] > m8[0] ? xp[j] : m8[0];
    T mx = m8[0];
    for (int u = 1; u < 8; u++) mx = m8[u] > mx ? m8[u] : mx;
    double s8[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (log_sm) {
        for (int64_t j = 0; j < j8; j += 8)
            for (int u = 0; u < 8; u++) s8[u] += EXP(xp[j + u] - mx);
        for (int64_t j = j8; j < len; j++) s8[0] += EXP(xp[j] - mx);
    } else { /* softmax keeps the exponentials */
        for (int64_t j = 0; j < len; j++) yp[j] = EXP(xp[j] - mx);
        for (int64_t j = 0; j < j8; j += 8)
            for (int u = 0; u < 8; u++) s8[u] += yp[j + u];
        for (int64_t j = j8; j < len; j++) s8[0] += yp[j];
    }
    double sum = pd__lanes8(s8);
    if (log_sm) {
        T ls = (T)log(sum);
        for (int64_t j = 0; j < len; j++) yp[j] = xp[j] - mx - ls;
    } else {
        T inv = (T)(1.0 / sum);
        for (int64_t j = 0; j < len; j++) yp[j] *= inv;
    }
}

/* Y = softmax (or log-softmax) of X (outer, len, inner) over len. Rows
 * (inner == 1) go one per iteration; otherwise blocks of up to 256 inner
 * positions go together so that the loops run along contiguous memory. */
static pd_status FN(softmax)(pd__exec *x, int64_t outer, int64_t len, int64_t inner, const T *X, T *Y, int log_sm) {
    int nt = pd__nthreads(x);
    if (inner == 1) {
        PD_OMP_FOR(nt, outer * len > 16384)
        for (int64_t o = 0; o < outer; o++) FN(softmax_row)(X + o * len, Y + o * len, len, log_sm);
        return PD_OK;
    }
    enum { BLK = 256 };
    int64_t nblk = (inner + BLK - 1) / BLK;
    PD_OMP_FOR(nt, outer * len * inner > 16384)
    for (int64_t ob = 0; ob < outer * nblk; ob++) {
        int64_t o = ob / nblk, i0 = (ob % nblk) * BLK, ni = inner - i0 < BLK ? inner - i0 : BLK;
        const T *xp = X + o * len * inner + i0; // (len, inner) block
        T *yp = Y + o * len * inner + i0;
        T mx[BLK];
        double sum[BLK];
        for (int64_t i = 0; i < ni; i++) {
            mx[i] = -INFINITY;
            sum[i] = 0;
        }
        for (int64_t j = 0; j < len; j++)
            for (int64_t i = 0; i < ni; i++) mx[i] = xp[j * inner + i] > mx[i] ? xp[j * inner + i] : mx[i];
        if (log_sm) {
            for (int64_t j = 0; j < len; j++)
                for (int64_t i = 0; i < ni; i++) sum[i] += EXP(xp[j * inner + i] - mx[i]);
            T ls[BLK];
            for (int64_t i = 0; i < ni; i++) ls[i] = (T)log(sum[i]);
            for (int64_t j = 0; j < len; j++)
                for (int64_t i = 0; i < ni; i++) yp[j * inner + i] = xp[j * inner + i] - mx[i] - ls[i];
        } else {
            for (int64_t j = 0; j < len; j++)
                for (int64_t i = 0; i < ni; i++) {
                    T e = EXP(xp[j * inner + i] - mx[i]);
                    yp[j * inner + i] = e;
                    sum[i] += e;
                }
            for (int64_t i = 0; i < ni; i++) sum[i] = 1.0 / sum[i];
            for (int64_t j = 0; j < len; j++)
                for (int64_t i = 0; i < ni; i++) yp[j * inner + i] *= (T)sum[i];
        }
    }
    return PD_OK;
}

/* loss (N, D) = -LP[n, t, d] * w[t] for labels t (N, D) of LP (N, C, D); ignored
 * labels give 0 and weigh 0. red: 0 none (Y is (N, D)), 1 sum, 2 mean (sum / sum of weights). */
static pd_status FN(nll)(int64_t N, int64_t C, int64_t D, const T *LP, const pd_tensor *labels, const T *wt,
                         bool has_ii, int64_t ii, int red, T *Y) {
    double sum = 0, wsum = 0;
    for (int64_t n = 0; n < N; n++) {
        for (int64_t d = 0; d < D; d++) {
            int64_t t = pd__get_i(labels->dtype, labels->data, n * D + d);
            double l = 0, wv = 0;
            if (!(has_ii && t == ii)) {
                if (t < 0 || t >= C)
                    return pd__err(PD_ERR_INVALID, "label %lld at %lld is out of range [0, %lld)", (long long)t,
                                   (long long)(n * D + d), (long long)C);
                wv = wt ? (double)wt[t] : 1.0;
                l = -(double)LP[(n * C + t) * D + d] * wv;
            }
            if (red == 0) Y[n * D + d] = (T)l;
            sum += l;
            wsum += wv;
        }
    }
    if (red == 1) Y[0] = (T)sum;
    if (red == 2) Y[0] = (T)(sum / wsum);
    return PD_OK;
}

/* SoftmaxCrossEntropyLoss: LP (N, C, D) = log-softmax of X over C, then the NLL loss. */
static pd_status FN(sce)(pd__exec *x, int64_t N, int64_t C, int64_t D, const T *X, T *LP, const pd_tensor *labels,
                         const T *wt, bool has_ii, int64_t ii, int red, T *Y) {
    PD_TRY(FN(softmax)(x, N, C, D, X, LP, 1));
    return FN(nll)(N, C, D, LP, labels, wt, has_ii, ii, red, Y);
}

/* One row of the backward below, its sum in eight lanes as the forward's. */
PD__VEC static void FN(softmax_bwd_row)(const T *yp, const T *gp, T *dp, int64_t len, int log_sm) {
    double s8[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t j8 = len & ~(int64_t)7;
    for (int64_t j = 0; j < j8; j += 8)
        for (int u = 0; u < 8; u++) s8[u] += log_sm ? (double)gp[j + u] : (double)gp[j + u] * yp[j + u];
    for (int64_t j = j8; j < len; j++) s8[0] += log_sm ? (double)gp[j] : (double)gp[j] * yp[j];
    double s = pd__lanes8(s8);
    if (log_sm)
        for (int64_t j = 0; j < len; j++) dp[j] += (T)(gp[j] - EXP(yp[j]) * s);
    else
        for (int64_t j = 0; j < len; j++) dp[j] += (T)(yp[j] * (gp[j] - s));
}

/* Over len of (outer, len, inner), from the forward's output Y:
 * softmax: dX += Y * (dY - sum(dY * Y)); log-softmax: dX += dY - exp(Y) * sum(dY). */
static pd_status FN(softmax_bwd)(pd__exec *x, int64_t outer, int64_t len, int64_t inner, const T *Y, const T *dY,
                                 T *dX, int log_sm) {
    int nt = pd__nthreads(x);
    if (inner == 1) {
        PD_OMP_FOR(nt, outer * len > 16384)
        for (int64_t o = 0; o < outer; o++) FN(softmax_bwd_row)(Y + o * len, dY + o * len, dX + o * len, len, log_sm);
        return PD_OK;
    }
    enum { BLK = 256 };
    int64_t nblk = (inner + BLK - 1) / BLK;
    PD_OMP_FOR(nt, outer * len * inner > 16384)
    for (int64_t ob = 0; ob < outer * nblk; ob++) {
        int64_t o = ob / nblk, i0 = (ob % nblk) * BLK, ni = inner - i0 < BLK ? inner - i0 : BLK;
        const T *yp = Y + o * len * inner + i0, *gp = dY + o * len * inner + i0; // (len, inner) block
        T *dp = dX + o * len * inner + i0;
        double s[BLK];
        for (int64_t i = 0; i < ni; i++) s[i] = 0;
        for (int64_t j = 0; j < len; j++)
            for (int64_t i = 0; i < ni; i++)
                s[i] += log_sm ? (double)gp[j * inner + i] : (double)gp[j * inner + i] * yp[j * inner + i];
        for (int64_t j = 0; j < len; j++)
            for (int64_t i = 0; i < ni; i++) {
                int64_t e = j * inner + i;
                dp[e] += log_sm ? (T)(gp[e] - EXP(yp[e]) * s[i]) : (T)(yp[e] * (gp[e] - s[i]));
            }
    }
    return PD_OK;
}

/* ---- losses --------------------------------------------------------------------------------------- */

/* The NLL loss's gradient w.r.t. its log-probabilities LP (N, C, D):
 * dLP[n, t, d] += -w[t] * g, g the gradient of the (n, d) loss: dY[n, d]
 * (reduction none), dY (sum), dY / sum of the weights (mean; 0 when every
 * label is ignored). Ignored labels get nothing. */
static pd_status FN(nll_bwd)(int64_t N, int64_t C, int64_t D, const pd_tensor *labels, const T *wt, bool has_ii,
                             int64_t ii, int red, const T *dY, T *dLP) {
    double wsum = 0;
    for (int64_t k = 0; k < N * D; k++) {
        int64_t t = pd__get_i(labels->dtype, labels->data, k);
        if (has_ii && t == ii) continue;
        if (t < 0 || t >= C)
            return pd__err(PD_ERR_INVALID, "label %lld at %lld is out of range [0, %lld)", (long long)t,
                           (long long)k, (long long)C);
        wsum += wt ? (double)wt[t] : 1.0;
    }
    double g0 = red == 1 ? (double)dY[0] : red == 2 ? (wsum != 0 ? dY[0] / wsum : 0) : 0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t d = 0; d < D; d++) {
            int64_t t = pd__get_i(labels->dtype, labels->data, n * D + d);
            if (has_ii && t == ii) continue;
            double g = red == 0 ? (double)dY[n * D + d] : g0;
            dLP[(n * C + t) * D + d] -= (T)(g * (wt ? (double)wt[t] : 1.0));
        }
    return PD_OK;
}

/* SoftmaxCrossEntropyLoss, LP (N, C, D) the log-softmax of X over C: the
 * gradient w.r.t. LP, G = dLP (the log_prob output's, or 0) + the NLL's
 * (when dY), goes back through the log-softmax: dX += G - exp(LP) * sum_c G.
 * G (N*C*D) is scratch. */
static pd_status FN(sce_bwd)(pd__exec *x, int64_t N, int64_t C, int64_t D, const T *LP, const T *dLP,
                             const pd_tensor *labels, const T *wt, bool has_ii, int64_t ii, int red, const T *dY,
                             T *G, T *dX) {
    int64_t tot = N * C * D;
    if (dLP) memcpy(G, dLP, sizeof(T) * (size_t)tot);
    else memset(G, 0, sizeof(T) * (size_t)tot);
    if (dY) PD_TRY(FN(nll_bwd)(N, C, D, labels, wt, has_ii, ii, red, dY, G));
    int nt = pd__nthreads(x);
    PD_OMP_FOR(nt, tot > 16384)
    for (int64_t nd = 0; nd < N * D; nd++) {
        int64_t n = nd / D, d = nd % D, base = n * C * D + d;
        double s = 0;
        for (int64_t c = 0; c < C; c++) s += G[base + c * D];
        for (int64_t c = 0; c < C; c++) dX[base + c * D] += (T)(G[base + c * D] - EXP(LP[base + c * D]) * s);
    }
    return PD_OK;
}

/* ---- Dropout -------------------------------------------------------------------------------------- */

/* Y (n) = X * keep * scale. */
static pd_status FN(dropout_apply)(pd__exec *x, int64_t n, const T *X, const uint8_t *keep, double scale, T *Y) {
    int nt = pd__nthreads(x);
    T sc = (T)scale;
    PD_OMP_FOR(nt, n > 65536)
    for (int64_t i = 0; i < n; i++) Y[i] = keep[i] ? X[i] * sc : (T)0;
    return PD_OK;
}

/* dX (n) += dY * keep * scale (keep NULL: all kept, scale 1). */
static pd_status FN(dropout_bwd)(pd__exec *x, int64_t n, const T *dY, const uint8_t *keep, double scale, T *dX) {
    int nt = pd__nthreads(x);
    T sc = (T)scale;
    PD_OMP_FOR(nt, n > 65536)
    for (int64_t i = 0; i < n; i++) dX[i] += !keep ? dY[i] : keep[i] ? dY[i] * sc : (T)0;
    return PD_OK;
}

/* ---- RotaryEmbedding ------------------------------------------------------------------------ */

/* Y = X rotated by the cache rows (the plan r: shape_nn.h); with bwd,
 * Y += X rotated back (the transpose: sin negated), the backward's dX from dY. */
static pd_status FN(rope)(const pd__rope *r, const T *X, const T *cosc, const T *sinc, const int64_t *pos, T *Y,
                          bool bwd) {
    int64_t half = r->rd / 2;
    for (int64_t b = 0; b < r->B; b++)
        for (int64_t s = 0; s < r->S; s++) {
            int64_t row = b * r->S + s;
            if (r->pos) {
                row = pos[b * r->S + s];
                if (row < 0 || row >= r->P)
                    return pd__err(PD_ERR_INVALID, "position_ids[%lld][%lld] = %lld is outside the caches' %lld rows",
                                   (long long)b, (long long)s, (long long)row, (long long)r->P);
            }
            const T *c = cosc + row * r->C, *sn = sinc + row * r->C;
            for (int64_t h = 0; h < r->H; h++) {
                int64_t off = (r->four ? (b * r->H + h) * r->S + s : (b * r->S + s) * r->H + h) * r->D;
                const T *xp = X + off;
                T *yp = Y + off;
                for (int64_t i = 0; i < half; i++) {
                    int64_t i1 = r->interleaved ? 2 * i : i, i2 = r->interleaved ? 2 * i + 1 : i + half;
                    T co = c[i], si = bwd ? -sn[i] : sn[i], x1 = xp[i1], x2 = xp[i2];
                    T y1 = co * x1 - si * x2, y2 = si * x1 + co * x2;
                    if (bwd) {
                        yp[i1] += y1;
                        yp[i2] += y2;
                    } else {
                        yp[i1] = y1;
                        yp[i2] = y2;
                    }
                }
                for (int64_t d = r->rd; d < r->D; d++) yp[d] = bwd ? yp[d] + xp[d] : xp[d];
            }
        }
    return PD_OK;
}

/* ---- Attention ------------------------------------------------------------------------------- */

/* The present keys PK (B, Hk, T, Dh) and values PV (B, Hk, T, Dv): the past
 * rows, then K's and V's (3-D: (B, Skv, Hk*D)). */
static void FN(attn_present)(const pd__attn *a, const T *K, const T *V, const T *pastk, const T *pastv, T *PK,
                             T *PV) {
    for (int64_t b = 0; b < a->B; b++)
        for (int64_t hk = 0; hk < a->Hk; hk++)
            for (int64_t t = 0; t < a->Tk; t++) {
                T *kd = PK + ((b * a->Hk + hk) * a->Tk + t) * a->Dh, *vd = PV + ((b * a->Hk + hk) * a->Tk + t) * a->Dv;
                const T *ks, *vs;
                if (t < a->P) {
                    ks = pastk + ((b * a->Hk + hk) * a->P + t) * a->Dh;
                    vs = pastv + ((b * a->Hk + hk) * a->P + t) * a->Dv;
                } else {
                    int64_t s = t - a->P;
                    ks = K + (a->three ? (b * a->Skv + s) * a->Hk + hk : (b * a->Hk + hk) * a->Skv + s) * a->Dh;
                    vs = V + (a->three ? (b * a->Skv + s) * a->Hk + hk : (b * a->Hk + hk) * a->Skv + s) * a->Dv;
                }
                memcpy(kd, ks, sizeof(T) * (size_t)a->Dh);
                memcpy(vd, vs, sizeof(T) * (size_t)a->Dv);
            }
}

/* Head h of batch b: S (Sq, T) = the scores scale * Q K^T, softcapped; Pm
 * (Sq, T) = softmax over the keys of S + the mask (bool or T) + causal. A
 * row with every key masked is NaN, as ONNX's reference computes it. */
static pd_status FN(attn_probs)(const pd__attn *a, int64_t b, int64_t h, const T *Q, const T *PK, const void *mask,
                                pd_dtype mdt, T *S, T *Pm, T *QK) {
    int64_t hk = h / (a->Hq / a->Hk), ldq = a->three ? a->Hq * a->Dh : a->Dh;
    const T *q = Q + (a->three ? b * a->Sq * a->Hq * a->Dh + h * a->Dh : (b * a->Hq + h) * a->Sq * a->Dh);
    PD_TRY(FN(gemm)(false, true, a->Sq, a->Tk, a->Dh, a->scale, q, ldq, PK + (b * a->Hk + hk) * a->Tk * a->Dh, a->Dh, 0,
                    S, a->Tk));
    int64_t ms[4] = {0, 0, 0, 1}, lm = a->mn ? a->mshape[3] : a->Tk;
    if (a->mn) {
        ms[2] = lm;
        ms[1] = a->mshape[2] * ms[2];
        ms[0] = a->mshape[1] * ms[1];
        for (int k = 0; k < 3; k++)
            if (a->mshape[k] == 1) ms[k] = 0;
    }
    int64_t kl = a->kvlen ? a->kvlen[b] : a->Tk, off = a->kvlen && !a->past ? kl - a->Sq : a->P;
    for (int64_t i = 0; i < a->Sq; i++) {
        T *sr = S + i * a->Tk, *pr = Pm + i * a->Tk;
        int64_t mo = b * ms[0] + h * ms[1] + i * ms[2];
        double mx = -INFINITY;
        for (int64_t j = 0; j < a->Tk; j++) {
            if (a->softcap > 0) sr[j] = (T)(a->softcap * tanh((double)sr[j] / a->softcap));
            double z = sr[j];
            if (j >= lm) z = -INFINITY;
            else if (a->mn) {
                if (mdt == PD_BOOL) z = ((const uint8_t *)mask)[mo + j] ? z : -INFINITY;
                else z += (double)((const T *)mask)[mo + j];
            }
            if ((a->causal && j > i + off) || j >= kl) z = -INFINITY;
            pr[j] = (T)z;
            if (QK && a->mode < 3) QK[i * a->Tk + j] = a->mode == 2 ? (T)z : sr[j];
            if (z > mx) mx = z;
        }
        double sum = 0;
        for (int64_t j = 0; j < a->Tk; j++) {
            double e = mx == -INFINITY ? NAN : exp((double)pr[j] - mx);
            pr[j] = (T)e;
            sum += e;
        }
        for (int64_t j = 0; j < a->Tk; j++) pr[j] = (T)((double)pr[j] / sum);
        if (QK && a->mode == 3) memcpy(QK + i * a->Tk, pr, sizeof(T) * (size_t)a->Tk);
    }
    return PD_OK;
}

/* Y = softmax(scores) V per head; PK, PV (the present outputs or scratch)
 * filled here; QK (B, Hq, Sq, T; NULL: not wanted) gets the scores. S, Pm:
 * scratch of Sq*T each. */
static pd_status FN(attention)(const pd__attn *a, const T *Q, const T *K, const T *V, const void *mask, pd_dtype mdt,
                               const T *pastk, const T *pastv, T *PK, T *PV, T *Y, T *QK, T *S, T *Pm) {
    FN(attn_present)(a, K, V, pastk, pastv, PK, PV);
    int64_t ldy = a->three ? a->Hq * a->Dv : a->Dv;
    for (int64_t b = 0; b < a->B; b++)
        for (int64_t h = 0; h < a->Hq; h++) {
            int64_t hk = h / (a->Hq / a->Hk);
            PD_TRY(FN(attn_probs)(a, b, h, Q, PK, mask, mdt, S, Pm, QK ? QK + (b * a->Hq + h) * a->Sq * a->Tk : NULL));
            T *y = Y + (a->three ? b * a->Sq * a->Hq * a->Dv + h * a->Dv : (b * a->Hq + h) * a->Sq * a->Dv);
            PD_TRY(FN(gemm)(false, false, a->Sq, a->Dv, a->Tk, 1, Pm, a->Tk, PV + (b * a->Hk + hk) * a->Tk * a->Dv,
                            a->Dv, 0, y, ldy));
        }
    return PD_OK;
}

/* The backward, recomputing the softmax per head: dQ, dK, dV (each may be
 * NULL) += the gradients from dY, dPKo and dPVo (the present outputs' K
 * and V rows) and dQK (the scores); the past inputs get none. Scratch: PK,
 * PV, dPK, dPV of the present outputs' sizes, S, Pm, dS of Sq*T each. */
static pd_status FN(attention_bwd)(const pd__attn *a, const T *Q, const T *K, const T *V, const void *mask,
                                   pd_dtype mdt, const T *pastk, const T *pastv, const T *dY, const T *dPKo,
                                   const T *dPVo, const T *dQK, T *dQ, T *dK, T *dV, T *PK, T *PV, T *dPK, T *dPV,
                                   T *S, T *Pm, T *dS) {
    FN(attn_present)(a, K, V, pastk, pastv, PK, PV);
    int64_t nk = a->B * a->Hk * a->Tk;
    memset(dPK, 0, sizeof(T) * (size_t)(nk * a->Dh));
    memset(dPV, 0, sizeof(T) * (size_t)(nk * a->Dv));
    int64_t ldq = a->three ? a->Hq * a->Dh : a->Dh, ldy = a->three ? a->Hq * a->Dv : a->Dv;
    for (int64_t b = 0; b < a->B; b++)
        for (int64_t h = 0; h < a->Hq; h++) {
            int64_t hk = h / (a->Hq / a->Hk), kv = (b * a->Hk + hk) * a->Tk;
            const T *q = Q + (a->three ? b * a->Sq * a->Hq * a->Dh + h * a->Dh : (b * a->Hq + h) * a->Sq * a->Dh);
            PD_TRY(FN(attn_probs)(a, b, h, Q, PK, mask, mdt, S, Pm, NULL));
            const T *gq = dQK ? dQK + (b * a->Hq + h) * a->Sq * a->Tk : NULL;
            memset(dS, 0, sizeof(T) * (size_t)(a->Sq * a->Tk));
            if (dY || (gq && a->mode == 3)) {
                const T *dy =
                    dY ? dY + (a->three ? b * a->Sq * a->Hq * a->Dv + h * a->Dv : (b * a->Hq + h) * a->Sq * a->Dv)
                       : NULL;
                if (dY) {
                    PD_TRY(FN(gemm)(false, true, a->Sq, a->Tk, a->Dv, 1, dy, ldy, PV + kv * a->Dv, a->Dv, 0, dS,
                                    a->Tk));
                    PD_TRY(FN(gemm)(true, false, a->Tk, a->Dv, a->Sq, 1, Pm, a->Tk, dy, ldy, 1, dPV + kv * a->Dv,
                                    a->Dv));
                }
                /* mode 3: the scores output is the softmax, its gradient joins dY's before the softmax's backward */
                if (gq && a->mode == 3)
                    for (int64_t k = 0; k < a->Sq * a->Tk; k++) dS[k] += gq[k];
                for (int64_t i = 0; i < a->Sq; i++) {
                    T *gr = dS + i * a->Tk, *pr = Pm + i * a->Tk;
                    double dot = 0;
                    for (int64_t j = 0; j < a->Tk; j++) dot += (double)gr[j] * pr[j];
                    for (int64_t j = 0; j < a->Tk; j++) gr[j] = (T)((double)pr[j] * ((double)gr[j] - dot));
                }
            }
            /* modes 0 to 2: the scores output (with the mask, a constant, in 2) adds to the scores' gradient */
            for (int64_t k = 0; k < a->Sq * a->Tk; k++) {
                double g = (double)dS[k] + (gq && a->mode < 3 ? (double)gq[k] : 0);
                if (a->softcap > 0) {
                    double t = (double)S[k] / a->softcap;
                    g *= 1 - t * t;
                }
                dS[k] = (T)g;
            }
            if (dQ) {
                T *dq = dQ + (q - Q);
                PD_TRY(FN(gemm)(false, false, a->Sq, a->Dh, a->Tk, a->scale, dS, a->Tk, PK + kv * a->Dh, a->Dh, 1, dq,
                                ldq));
            }
            if (dK)
                PD_TRY(FN(gemm)(true, false, a->Tk, a->Dh, a->Sq, a->scale, dS, a->Tk, q, ldq, 1, dPK + kv * a->Dh,
                                a->Dh));
        }
    /* the rows of K and V in the present keys and values */
    for (int64_t b = 0; b < a->B; b++)
        for (int64_t hk = 0; hk < a->Hk; hk++)
            for (int64_t s = 0; s < a->Skv; s++) {
                int64_t t = (b * a->Hk + hk) * a->Tk + a->P + s;
                int64_t r = a->three ? (b * a->Skv + s) * a->Hk + hk : (b * a->Hk + hk) * a->Skv + s;
                if (dK)
                    for (int64_t d = 0; d < a->Dh; d++)
                        dK[r * a->Dh + d] += dPK[t * a->Dh + d] + (dPKo ? dPKo[t * a->Dh + d] : (T)0);
                if (dV)
                    for (int64_t d = 0; d < a->Dv; d++)
                        dV[r * a->Dv + d] += dPV[t * a->Dv + d] + (dPVo ? dPVo[t * a->Dv + d] : (T)0);
            }
    return PD_OK;
}
