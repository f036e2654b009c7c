/* nn_impl.h - the typed bodies of the CPU nn kernels (runtime/cpu/nn.c).
 *
 * Included by nn.c once per element type, with
 *   T          the element type (float, double)
 *   FN(name)   the typed name (name_f32, name_f64)
 *   PD_GEMM    cblas_sgemm / cblas_dgemm
 *   EXP        expf / exp
 * defined, so that each kernel is written once. The untyped helpers they
 * use (odometers, output ranges, threads, scratch) are in nn_common.h.
 * nn_grad.c includes it too: the backward reuses GEMM, im2col/col2im,
 * softmax, the batch statistics and the max pool's argmax from here.
 * No include guard on purpose.
 */

/* ---- GEMM -------------------------------------------------------------------------------- */

/* C (M, N) = alpha * op(A) (M, K) @ op(B) (K, N) + beta * C, row-major, through BLAS. */
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
    PD_GEMM(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K,
            (T)alpha, A, (int)(lda > 0 ? lda : 1), B, (int)(ldb > 0 ? ldb : 1), (T)beta, C, (int)(ldc > 0 ? ldc : 1));
    return PD_OK;
}

/* Y (M, N) = alpha * op(A) @ op(B) + beta * C, C broadcast from (), (N), (1|M, 1|N). */
static pd_status FN(gemm_op)(const pd_tensor *a, const pd_tensor *b, const pd_tensor *c, pd_tensor *y, bool ta,
                             bool tb, double alpha, double beta) {
    int64_t M = y->shape[0], N = y->shape[1], K = a->shape[ta ? 0 : 1];
    T *Y = y->data; // (M, N)
    if (c && beta != 0) {
        const T *C = c->data;
        int64_t cc = c->ndim >= 1 ? c->shape[c->ndim - 1] : 1, cr = c->ndim == 2 ? c->shape[0] : 1;
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) Y[i * N + j] = C[(cr == 1 ? 0 : i) * cc + (cc == 1 ? 0 : j)];
    } else {
        beta = 0;
    }
    return FN(gemm)(ta, tb, M, N, K, alpha, a->data, a->shape[1], b->data, b->shape[1], beta, Y, N);
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
    for (int64_t q = 0; q < L.nbatch; q++, pd__mm_next(&L))
        PD_TRY(FN(gemm)(false, false, M, N, K, 1, A + L.oa * M * K, K, B + L.obb * K * N, N, 0, Y + q * M * N, N));
    return PD_OK;
}

/* ---- Conv, ConvTranspose --------------------------------------------------------------------- */

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
    if (sizeof(T) == sizeof(float)) {
        bool done;
        PD_TRY(pd__dnnl_conv(x, w, group, X, W, B, Y, &done));
        if (done) return PD_OK;
    }
    FN(fill_bias)(x, N * M, M, OUT, B ? (const T *)B->data : NULL, yd);
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

/* ---- pools ---------------------------------------------------------------------------------------- */

/* Y (NC, out...) = max over each window of X (NC, in...); ind: flat index into X
 * of the max (row-major, or column-major over the spatial dims with storage_order=1).
 * Taps go outermost and each updates whole output rows, which vectorizes; taps
 * come in window order, so the first maximum wins (a NaN wins and stays). */
static pd_status FN(maxpool)(pd__exec *x, const pd__win *w, int64_t NC, const T *X, T *Y, int64_t *ind, int so) {
    int ns = w->nsp, last = ns - 1;
    int64_t K = prod64(ns, w->k), IN = prod64(ns, w->in), OUT = prod64(ns, w->out);
    int64_t OL = w->out[last], IL = w->in[last], S = w->s[last], outer = OUT / OL;
    int64_t cstr[PD_MAX_DIMS]; /* column-major strides of the spatial dims */
    for (int i = 0; i < ns; i++) cstr[i] = i == 0 ? 1 : cstr[i - 1] * w->in[i - 1];
    int nt = pd__nthreads(x);
    PD_OMP_FOR(nt, NC * OUT * K > 32768)
    for (int64_t nc = 0; nc < NC; nc++) {
        const T *xp = X + nc * IN;               // (in...)
        T *yp = Y + nc * OUT;                    // (out...)
        int64_t *ip = ind ? ind + nc * OUT : NULL; // (out...)
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
                const T *srow = xp + off * IL;
                T *yrow = yp + q * OL;
                if (ip) {
                    int64_t *irow = ip + q * OL;
                    for (int64_t o = lo; o < hi; o++) {
                        T v = srow[o * S + p], b = yrow[o];
                        bool gt = v > b || (v != v && b == b) || irow[o] < 0;
                        yrow[o] = gt ? v : b;
                        irow[o] = gt ? off * IL + o * S + p : irow[o];
                    }
                } else {
                    for (int64_t o = lo; o < hi; o++) {
                        T v = srow[o * S + p], b = yrow[o];
                        yrow[o] = v > b || v != v ? v : b;
                    }
                }
            }
        }
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

/* ---- normalizations -------------------------------------------------------------------------------- */

/* Y (N, F, S) = (X - m[f]) * a[f] + b[f]. */
static pd_status FN(affine)(pd__exec *x, int64_t N, int64_t F, int64_t S, const T *X, const double *m,
                            const double *a, const double *b, T *Y) {
    int nt = pd__nthreads(x);
    PD_OMP_FOR(nt, N * F * S > 32768)
    for (int64_t nf = 0; nf < N * F; nf++) {
        T mv = (T)m[nf % F], av = (T)a[nf % F], bv = (T)b[nf % F];
        const T *xp = X + nf * S;
        T *yp = Y + nf * S;
        for (int64_t s = 0; s < S; s++) yp[s] = (xp[s] - mv) * av + bv;
    }
    return PD_OK;
}

/* mean[f], var[f] (biased) of X (N, F, S) over N and S, two passes in double. */
static pd_status FN(batch_stats)(pd__exec *x, int64_t N, int64_t F, int64_t S, const T *X, double *mean,
                                 double *var) {
    int nt = pd__nthreads(x);
    double cnt = (double)(N * S);
    PD_OMP_FOR(nt, N * F * S > 32768)
    for (int64_t f = 0; f < F; f++) {
        double sum = 0, sq = 0;
        for (int64_t n = 0; n < N; n++) {
            const T *xp = X + (n * F + f) * S;
            for (int64_t s = 0; s < S; s++) sum += xp[s];
        }
        double m = cnt > 0 ? sum / cnt : 0;
        for (int64_t n = 0; n < N; n++) {
            const T *xp = X + (n * F + f) * S;
            for (int64_t s = 0; s < S; s++) sq += (xp[s] - m) * (xp[s] - m);
        }
        mean[f] = m;
        var[f] = cnt > 0 ? sq / cnt : 0;
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
    return s + (((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])));
}
PD__INLINE double FN(row_sqdev)(const T *x, int64_t n, double m) {
    double acc[8] = {0}, s = 0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += ((double)x[i + l] - m) * ((double)x[i + l] - m);
    for (; i < n; i++) s += ((double)x[i] - m) * ((double)x[i] - m);
    return s + (((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])));
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

/* ---- softmax family ---------------------------------------------------------------------------------- */

/* Y = softmax (or log-softmax) of X (outer, len, inner) over len. Rows
 * (inner == 1) go one per iteration; otherwise blocks of up to 256 inner
 * positions go together so that the loops run along contiguous memory. */
static pd_status FN(softmax)(pd__exec *x, int64_t outer, int64_t len, int64_t inner, const T *X, T *Y, int log_sm) {
    int nt = pd__nthreads(x);
    if (inner == 1) {
        PD_OMP_FOR(nt, outer * len > 16384)
        for (int64_t o = 0; o < outer; o++) {
            const T *xp = X + o * len; // (len)
            T *yp = Y + o * len;       // (len)
            /* four independent accumulators: the reductions are latency bound otherwise */
            T m4[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
            int64_t j4 = len & ~(int64_t)3;
            for (int64_t j = 0; j < j4; j += 4)
                for (int u = 0; u < 4; u++) m4[u] = xp[j + u] > m4[u] ? xp[j + u] : m4[u];
            for (int64_t j = j4; j < len; j++) m4[0] = xp[j] > m4[0] ? xp[j] : m4[0];
            T mx = m4[0];
            for (int u = 1; u < 4; u++) mx = m4[u] > mx ? m4[u] : mx;
            double s4[4] = {0, 0, 0, 0};
            T *ep = log_sm ? NULL : yp; /* softmax keeps the exponentials */
            for (int64_t j = 0; j < j4; j += 4)
                for (int u = 0; u < 4; u++) {
                    T e = EXP(xp[j + u] - mx);
                    if (ep) ep[j + u] = e;
                    s4[u] += e;
                }
            for (int64_t j = j4; j < len; j++) {
                T e = EXP(xp[j] - mx);
                if (ep) ep[j] = e;
                s4[0] += e;
            }
            double sum = (s4[0] + s4[1]) + (s4[2] + s4[3]);
            if (log_sm) {
                T ls = (T)log(sum);
                for (int64_t j = 0; j < len; j++) yp[j] = xp[j] - mx - ls;
            } else {
                T inv = (T)(1.0 / sum);
                for (int64_t j = 0; j < len; j++) yp[j] *= inv;
            }
        }
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

/* ---- Dropout ------------------------------------------------------------------------------------------- */

/* Y (n) = X * keep * scale. */
static pd_status FN(dropout_apply)(pd__exec *x, int64_t n, const T *X, const uint8_t *keep, double scale, T *Y) {
    int nt = pd__nthreads(x);
    T sc = (T)scale;
    PD_OMP_FOR(nt, n > 65536)
    for (int64_t i = 0; i < n; i++) Y[i] = keep[i] ? X[i] * sc : (T)0;
    return PD_OK;
}
