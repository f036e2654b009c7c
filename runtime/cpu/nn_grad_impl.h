/* nn_grad_impl.h - the typed bodies of the CPU nn backward kernels
 * (runtime/cpu/nn_grad.c).
 *
 * Included by nn_grad.c once per element type, after nn_impl.h, with T,
 * FN(name), PD_GEMM and EXP defined as for nn_impl.h, whose forward pieces
 * (GEMM, im2col/col2im, softmax, batch statistics, the max pool's argmax)
 * these reuse. Every kernel ADDS into the input gradients it is given (the
 * pd__grad_fn contract) and computes only those it is given. Reductions
 * over a batch accumulate in double. No include guard on purpose.
 */

/* ---- Gemm, MatMul ------------------------------------------------------------------------ */

/* Y (M, N) = alpha * op(A) @ op(B) + beta * C:
 *   dA += alpha * dY @ op(B)^T (transposed back when transA), likewise dB,
 *   dC += beta * dY summed over the dims C broadcasts along. */
static pd_status FN(gemm_bwd)(const pd_tensor *a, const pd_tensor *b, const pd_tensor *c, const T *dY, bool ta,
                              bool tb, double alpha, double beta, T *dA, T *dB, T *dC) {
    int64_t M = a->shape[ta ? 1 : 0], K = a->shape[ta ? 0 : 1], N = b->shape[tb ? 0 : 1];
    int64_t lda = a->shape[1], ldb = b->shape[1];
    const T *A = a->data, *B = b->data;
    if (dA) {
        if (!ta) PD_TRY(FN(gemm)(false, !tb, M, K, N, alpha, dY, N, B, ldb, 1, dA, K)); // (M, K)
        else PD_TRY(FN(gemm)(tb, true, K, M, N, alpha, B, ldb, dY, N, 1, dA, M));       // (K, M)
    }
    if (dB) {
        if (!tb) PD_TRY(FN(gemm)(!ta, false, K, N, M, alpha, A, lda, dY, N, 1, dB, N)); // (K, N)
        else PD_TRY(FN(gemm)(true, ta, N, K, M, alpha, dY, N, A, lda, 1, dB, K));       // (N, K)
    }
    if (dC && beta != 0) {
        int64_t cc = c->ndim >= 1 ? c->shape[c->ndim - 1] : 1, cr = c->ndim == 2 ? c->shape[0] : 1;
        for (int64_t ci = 0; ci < cr; ci++)
            for (int64_t cj = 0; cj < cc; cj++) {
                double s = 0;
                for (int64_t i = cr == 1 ? 0 : ci; i < (cr == 1 ? M : ci + 1); i++)
                    for (int64_t j = cc == 1 ? 0 : cj; j < (cc == 1 ? N : cj + 1); j++) s += dY[i * N + j];
                dC[ci * cc + cj] += (T)(beta * s);
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
    for (int64_t q = 0; q < L.nbatch; q++, pd__mm_next(&L)) {
        const T *dq = dY + q * M * N; // (M, N)
        if (dA) PD_TRY(FN(gemm)(false, true, M, K, N, 1, dq, N, B + L.obb * K * N, N, fa ? 0 : 1, dA + L.oa * M * K, K));
        if (dB) PD_TRY(FN(gemm)(true, false, K, N, M, 1, A + L.oa * M * K, K, dq, N, fb ? 0 : 1, dB + L.obb * K * N, N));
    }
    return PD_OK;
}

/* ---- Conv, ConvTranspose -------------------------------------------------------------------- */

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

/* dX (NC, in...) += dY (NC, out...) at each window's maximum, recomputed by
 * the forward's maxpool (the first maximum in window order wins, as there).
 * Y (NC*OUT) and ind (NC*OUT) are scratch. */
static pd_status FN(maxpool_bwd)(pd__exec *x, const pd__win *w, int64_t NC, const T *X, const T *dY, T *Y,
                                 int64_t *ind, T *dX) {
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

/* X (N, F, S), y = (x - mean) * istd * scale + b per feature f. Sums sdy[f] =
 * sum dY and sdyx[f] = sum dY * xhat over N and S (the gradients of b and
 * scale). dX (when given) += scale * istd * dY, and with batch statistics
 * (batch: mean and istd are X's own) minus the parts through them:
 * - scale * istd * (sdy + xhat * sdyx) / (N*S). */
static pd_status FN(bn_bwd)(pd__exec *x, int64_t N, int64_t F, int64_t S, const T *X, const T *dY,
                            const double *mean, const double *istd, const double *scale, bool batch, T *dX,
                            double *sdy, double *sdyx) {
    int nt = pd__nthreads(x);
    double cnt = (double)(N * S);
    PD_OMP_FOR(nt, N * F * S > 32768)
    for (int64_t f = 0; f < F; f++) {
        double m = mean[f], is = istd[f], a = 0, b = 0;
        for (int64_t n = 0; n < N; n++) {
            const T *xp = X + (n * F + f) * S, *gp = dY + (n * F + f) * S;
            for (int64_t s = 0; s < S; s++) {
                a += gp[s];
                b += gp[s] * (xp[s] - m);
            }
        }
        b *= is;
        sdy[f] = a;
        sdyx[f] = b;
        if (!dX) continue;
        double k = scale[f] * is, ma = batch && cnt > 0 ? a / cnt : 0, mb = batch && cnt > 0 ? b / cnt : 0;
        for (int64_t n = 0; n < N; n++) {
            const T *xp = X + (n * F + f) * S, *gp = dY + (n * F + f) * S;
            T *dp = dX + (n * F + f) * S;
            for (int64_t s = 0; s < S; s++) dp[s] += (T)(k * (gp[s] - ma - (xp[s] - m) * is * mb));
        }
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
        mg += ((a1[0] + a1[1]) + (a1[2] + a1[3])) + ((a1[4] + a1[5]) + (a1[6] + a1[7]));
        mgx += ((a2[0] + a2[1]) + (a2[2] + a2[3])) + ((a2[4] + a2[5]) + (a2[6] + a2[7]));
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
    enum { BLK = 64 };
    int64_t nblk = (D + BLK - 1) / BLK;
    PD_OMP_FOR(nt, R * D > 32768)
    for (int64_t b = 0; b < nblk; b++) {
        int64_t i0 = b * BLK, ni = D - i0 < BLK ? D - i0 : BLK;
        double s1[BLK] = {0}, s2[BLK] = {0};
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

/* ---- softmax family ----------------------------------------------------------------------------- */

/* Over len of (outer, len, inner), from the forward's output Y:
 * softmax: dX += Y * (dY - sum(dY * Y)); log-softmax: dX += dY - exp(Y) * sum(dY). */
static pd_status FN(softmax_bwd)(pd__exec *x, int64_t outer, int64_t len, int64_t inner, const T *Y, const T *dY,
                                 T *dX, int log_sm) {
    int nt = pd__nthreads(x);
    if (inner == 1) {
        PD_OMP_FOR(nt, outer * len > 16384)
        for (int64_t o = 0; o < outer; o++) {
            const T *yp = Y + o * len, *gp = dY + o * len; // (len)
            T *dp = dX + o * len;
            double s = 0;
            if (log_sm) {
                for (int64_t j = 0; j < len; j++) s += gp[j];
                for (int64_t j = 0; j < len; j++) dp[j] += (T)(gp[j] - EXP(yp[j]) * s);
            } else {
                for (int64_t j = 0; j < len; j++) s += (double)gp[j] * yp[j];
                for (int64_t j = 0; j < len; j++) dp[j] += (T)(yp[j] * (gp[j] - s));
            }
        }
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

/* dX (n) += dY * keep * scale (keep NULL: all kept, scale 1). */
static pd_status FN(dropout_bwd)(pd__exec *x, int64_t n, const T *dY, const uint8_t *keep, double scale, T *dX) {
    int nt = pd__nthreads(x);
    T sc = (T)scale;
    PD_OMP_FOR(nt, n > 65536)
    for (int64_t i = 0; i < n; i++) dX[i] += !keep ? dY[i] : keep[i] ? dY[i] * sc : (T)0;
    return PD_OK;
}
