/* rnn_impl.h - the typed bodies of the CPU recurrent kernels
 * (runtime/cpu/rnn.c), forward and backward side by side.
 *
 * How it works: docs/INTERNALS.md, "runtime/cpu/rnn_impl.h".
 */

/* C (M, N) = alpha * op(A) @ op(B) + beta * C, row-major, through BLAS. */
static pd_status FN(rgemm)(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T *A, int64_t lda, const T *B,
                           int64_t ldb, double beta, T *C, int64_t ldc) {
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
            (T)1, A, (int)lda, B, (int)ldb, (T)beta, C, (int)ldc);
    return PD_OK;
}

static inline T FN(sigm)(T v) { return (T)1 / ((T)1 + EXP(-v)); }

/* Direction d forward; fills the workspace and writes Y, Y_h, Y_c where given. */
static pd_status FN(rnn_dir_fwd)(const pd__rnn *r, const pd__rnn_ws *w, T *ws, int d) {
    const int64_t S = r->S, N = r->N, In = r->In, H = r->H, G = r->G, GH = G * H, SN = S * N, NH = N * H;
    const pd__rnn_cell cell = r->a.cell;
    const bool lbr = r->a.lbr;
    const T *X = r->X;                                     // X's rows (S*N, In)
    const T *W = (const T *)r->W + d * GH * In;             // (G*H, In)
    const T *R = (const T *)r->R + d * GH * H;             // (G*H, H)
    const T *Bw = r->B ? (const T *)r->B + d * 2 * GH : NULL, *Br = Bw ? Bw + GH : NULL; // (G*H) each
    const T *P = r->P ? (const T *)r->P + d * 3 * H : NULL;                               // (3*H): i, o, f
    T *XW = ws + w->xw, *HS = ws + w->hs, *CS = ws + w->cs, *GS = ws + w->gs, *AUX = ws + w->aux, *HR = ws + w->hr;
    /* xw = X @ W^T + Wb + Rb (GRU with linear_before_reset: Rbh goes inside the reset) */
    if (Bw)
        for (int64_t q = 0; q < SN; q++)
            for (int64_t k = 0; k < GH; k++)
                XW[q * GH + k] = Bw[k] + (cell == PD_RNN_GRU && lbr && k >= 2 * H ? (T)0 : Br[k]);
    PD_TRY(FN(rgemm)(false, true, SN, GH, In, X, In, W, In, Bw ? 1 : 0, XW, GH));
    for (int64_t b = 0; b < N; b++)
        for (int64_t j = 0; j < H; j++) {
            HS[b * H + j] = r->h0 ? ((const T *)r->h0)[rnn_hoff(r, d, b) + j] : (T)0;
            if (cell == PD_RNN_LSTM) CS[b * H + j] = r->c0 ? ((const T *)r->c0)[rnn_hoff(r, d, b) + j] : (T)0;
        }
    const int64_t nr = cell == PD_RNN_GRU && !lbr ? 2 * H : GH; /* R's rows applied to H itself */
    for (int64_t s = 0; s < S; s++) {
        const T *Hp = HS + s * NH, *Cp = CS + s * NH;
        T *Hn = HS + (s + 1) * NH, *Cn = CS + (s + 1) * NH, *gs = GS + s * N * GH, *aux = AUX + s * NH;
        PD_TRY(FN(rgemm)(false, true, N, nr, H, Hp, H, R, H, 0, HR, GH));
        for (int64_t b = 0; b < N; b++) {
            int64_t t;
            const T *hp = Hp + b * H;
            T *hn = Hn + b * H, *g = gs + b * GH;
            if (!rnn_time(r, d, b, s, &t)) { /* past its length: the state stays */
                memcpy(hn, hp, sizeof(T) * (size_t)H);
                if (cell == PD_RNN_LSTM) memcpy(Cn + b * H, Cp + b * H, sizeof(T) * (size_t)H);
                if (cell == PD_RNN_GRU) memset(aux + b * H, 0, sizeof(T) * (size_t)H);
                continue;
            }
            const T *xw = XW + rnn_xrow(r, t, b) * GH, *hr = HR + b * GH;
            switch (cell) {
            case PD_RNN_LSTM:
                for (int64_t j = 0; j < H; j++) { /* peepholes: i and f see C before the step, o after it */
                    T cp = Cp[b * H + j], pi = P ? P[j] * cp : (T)0, pf = P ? P[2 * H + j] * cp : (T)0;
                    T i = FN(sigm)(xw[j] + hr[j] + pi), f = FN(sigm)(xw[2 * H + j] + hr[2 * H + j] + pf);
                    T c = TANH(xw[3 * H + j] + hr[3 * H + j]);
                    T C = f * cp + i * c;
                    T o = FN(sigm)(xw[H + j] + hr[H + j] + (P ? P[H + j] * C : (T)0));
                    Cn[b * H + j] = C;
                    hn[j] = o * TANH(C);
                    g[j] = i, g[H + j] = o, g[2 * H + j] = f, g[3 * H + j] = c;
                }
                break;
            case PD_RNN_GRU:
                for (int64_t j = 0; j < H; j++) {
                    T z = FN(sigm)(xw[j] + hr[j]), rr = FN(sigm)(xw[H + j] + hr[H + j]);
                    g[j] = z, g[H + j] = rr;
                    if (lbr) {
                        T a = hr[2 * H + j] + (Br ? Br[2 * H + j] : (T)0), h = TANH(xw[2 * H + j] + rr * a);
                        aux[b * H + j] = a;
                        g[2 * H + j] = h;
                        hn[j] = ((T)1 - z) * h + z * hp[j];
                    } else {
                        aux[b * H + j] = rr * hp[j];
                    }
                }
                break;
            case PD_RNN_SIMPLE:
                for (int64_t j = 0; j < H; j++) hn[j] = g[j] = TANH(xw[j] + hr[j]);
                break;
            }
        }
        if (cell == PD_RNN_GRU && !lbr) { /* h = tanh(xw_h + (r * H) @ Rh^T) */
            PD_TRY(FN(rgemm)(false, true, N, H, H, aux, H, R + 2 * H * H, H, 0, HR + 2 * H, GH));
            for (int64_t b = 0; b < N; b++) {
                int64_t t;
                if (!rnn_time(r, d, b, s, &t)) continue;
                const T *xw = XW + rnn_xrow(r, t, b) * GH, *hr = HR + b * GH, *hp = Hp + b * H;
                T *g = gs + b * GH, *hn = Hn + b * H;
                for (int64_t j = 0; j < H; j++) {
                    T h = TANH(xw[2 * H + j] + hr[2 * H + j]), z = g[j];
                    g[2 * H + j] = h;
                    hn[j] = ((T)1 - z) * h + z * hp[j];
                }
            }
        }
        if (r->Y)
            for (int64_t b = 0; b < N; b++) {
                int64_t t;
                if (rnn_time(r, d, b, s, &t))
                    memcpy((T *)r->Y + rnn_yoff(r, t, d, b), Hn + b * H, sizeof(T) * (size_t)H);
            }
    }
    for (int64_t b = 0; b < N; b++) {
        if (r->Yh) memcpy((T *)r->Yh + rnn_hoff(r, d, b), HS + S * NH + b * H, sizeof(T) * (size_t)H);
        if (r->Yc) memcpy((T *)r->Yc + rnn_hoff(r, d, b), CS + S * NH + b * H, sizeof(T) * (size_t)H);
    }
    return PD_OK;
}

static pd_status FN(rnn_forward)(const pd__rnn *r, const pd__rnn_ws *w, void *ws) {
    if (r->Y) memset(r->Y, 0, sizeof(T) * (size_t)(r->S * r->a.ndir * r->N * r->H)); /* past a length: 0 */
    for (int d = 0; d < r->a.ndir; d++) PD_TRY(FN(rnn_dir_fwd)(r, w, ws, d));
    return PD_OK;
}

/* One LSTM row's gate gradients (i, o, f, c into dg) from dn, the gradient
 * reaching h, and dC, the cell's; dC becomes the previous step's. */
static void FN(lstm_bwd_row)(int64_t H, const T *g, const T *Cprev, const T *Cnow, const T *dn, const T *P, T *dP,
                             T *dC, T *dg, T *tb) {
    for (int64_t j = 0; j < H; j++) {
        T i = g[j], o = g[H + j], f = g[2 * H + j], c = g[3 * H + j];
        T Cp = Cprev[j], C = Cnow[j], tc = TANH(C);
        T dop = dn[j] * tc * o * ((T)1 - o);
        T dct = dC[j] + dn[j] * o * ((T)1 - tc * tc) + (P ? dop * P[H + j] : (T)0);
        dg[j] = dct * c * i * ((T)1 - i);
        dg[H + j] = dop;
        dg[2 * H + j] = dct * Cp * f * ((T)1 - f);
        dg[3 * H + j] = dct * i * ((T)1 - c * c);
        dC[j] = dct * f + (P ? dg[j] * P[j] + dg[2 * H + j] * P[2 * H + j] : (T)0);
        if (dP) {
            dP[j] += dg[j] * Cp;
            dP[H + j] += dop * C;
            dP[2 * H + j] += dg[2 * H + j] * Cp;
        }
        tb[j] = 0;
    }
}

/* One GRU row's gate gradients: dg through W, d2 through R (they differ in
 * the candidate under linear_before_reset); tb is z * dh, the part of the
 * previous h's gradient that skips R. */
static void FN(gru_bwd_row)(int64_t H, bool lbr, const T *g, const T *hp, const T *aux, const T *dn, T *dg, T *d2,
                            T *tb) {
    for (int64_t j = 0; j < H; j++) {
        T z = g[j], rr = g[H + j], h = g[2 * H + j];
        T dph = dn[j] * ((T)1 - z) * ((T)1 - h * h);
        dg[j] = d2[j] = dn[j] * (hp[j] - h) * z * ((T)1 - z);
        dg[2 * H + j] = d2[2 * H + j] = dph;
        if (lbr) {
            T a = aux[j];
            dg[H + j] = d2[H + j] = dph * a * rr * ((T)1 - rr);
            d2[2 * H + j] = dph * rr;
        }
        tb[j] = dn[j] * z;
    }
}

static pd_status FN(rnn_dir_param_grads)(const pd__rnn *r, const pd__rnn_ws *w, const T *ws, int d, int64_t nr);

/* Direction d backward, after its forward filled the workspace; adds into
 * the input gradients given. */
static pd_status FN(rnn_dir_bwd)(const pd__rnn *r, const pd__rnn_ws *w, T *ws, int d) {
    const int64_t S = r->S, N = r->N, H = r->H, G = r->G, GH = G * H, SN = S * N, NH = N * H;
    const pd__rnn_cell cell = r->a.cell;
    const bool lbr = r->a.lbr;
    const T *R = (const T *)r->R + d * GH * H;
    const T *P = r->P ? (const T *)r->P + d * 3 * H : NULL;
    T *dP = r->dP ? (T *)r->dP + d * 3 * H : NULL;
    const T *HS = ws + w->hs, *CS = ws + w->cs, *GS = ws + w->gs, *AUX = ws + w->aux;
    T *DG = ws + w->dg, *D2 = ws + w->d2, *dH = ws + w->dh, *dC = ws + w->dc, *dH2 = ws + w->dh2;
    T *tmp = ws + w->tmp, *dhn = ws + w->dhn, *drh = ws + w->hr; /* hr is free now: (N, H) of it */
    const T *dY = r->dY, *dYh = r->dYh, *dYc = r->dYc;
    for (int64_t b = 0; b < N; b++)
        for (int64_t j = 0; j < H; j++) {
            dH[b * H + j] = dYh ? dYh[rnn_hoff(r, d, b) + j] : (T)0;
            dC[b * H + j] = dYc ? dYc[rnn_hoff(r, d, b) + j] : (T)0;
        }
    memset(DG, 0, sizeof(T) * (size_t)(SN * GH));
    const int64_t nr = cell == PD_RNN_GRU && !lbr ? 2 * H : GH;
    for (int64_t s = S - 1; s >= 0; s--) {
        const T *Hp = HS + s * NH, *gs = GS + s * N * GH, *aux = AUX + s * NH;
        T *d2s = D2 + s * N * GH;
        for (int64_t b = 0; b < N; b++) {
            int64_t t;
            T *d2 = d2s + b * GH, *tb = tmp + b * H, *dn = dhn + b * H;
            if (!rnn_time(r, d, b, s, &t)) {
                memset(d2, 0, sizeof(T) * (size_t)GH);
                continue;
            }
            const T *g = gs + b * GH, *hp = Hp + b * H, *dy = dY ? dY + rnn_yoff(r, t, d, b) : NULL;
            T *dg = DG + rnn_xrow(r, t, b) * GH;
            for (int64_t j = 0; j < H; j++) dn[j] = dH[b * H + j] + (dy ? dy[j] : (T)0);
            switch (cell) {
            case PD_RNN_LSTM:
                FN(lstm_bwd_row)(H, g, CS + s * NH + b * H, CS + (s + 1) * NH + b * H, dn, P, dP, dC + b * H, dg, tb);
                memcpy(d2, dg, sizeof(T) * (size_t)GH);
                break;
            case PD_RNN_GRU:
                FN(gru_bwd_row)(H, lbr, g, hp, aux + b * H, dn, dg, d2, tb);
                break;
            case PD_RNN_SIMPLE:
                for (int64_t j = 0; j < H; j++) {
                    dg[j] = d2[j] = dn[j] * ((T)1 - g[j] * g[j]);
                    tb[j] = 0;
                }
                break;
            }
        }
        if (cell == PD_RNN_GRU && !lbr) { /* through (r * H) @ Rh^T: d(r * H) = dph @ Rh */
            PD_TRY(FN(rgemm)(false, false, N, H, H, d2s + 2 * H, GH, R + 2 * H * H, H, 0, drh, H));
            for (int64_t b = 0; b < N; b++) {
                int64_t t;
                if (!rnn_time(r, d, b, s, &t)) continue;
                const T *g = gs + b * GH, *hp = Hp + b * H;
                T *dg = DG + rnn_xrow(r, t, b) * GH, *d2 = d2s + b * GH;
                for (int64_t j = 0; j < H; j++) {
                    T rr = g[H + j], e = drh[b * H + j];
                    dg[H + j] = d2[H + j] = e * hp[j] * rr * ((T)1 - rr);
                    tmp[b * H + j] += e * rr;
                }
            }
        }
        /* dH before the step: through R, plus GRU's z * dH; unchanged where the entry did not run */
        PD_TRY(FN(rgemm)(false, false, N, H, nr, d2s, GH, R, H, 0, dH2, H));
        for (int64_t b = 0; b < N; b++) {
            int64_t t;
            if (rnn_time(r, d, b, s, &t))
                for (int64_t j = 0; j < H; j++) dH2[b * H + j] += tmp[b * H + j];
            else
                memcpy(dH2 + b * H, dH + b * H, sizeof(T) * (size_t)H);
        }
        memcpy(dH, dH2, sizeof(T) * (size_t)NH);
    }
    for (int64_t b = 0; b < N; b++)
        for (int64_t j = 0; j < H; j++) {
            if (r->dh0) ((T *)r->dh0)[rnn_hoff(r, d, b) + j] += dH[b * H + j];
            if (r->dc0) ((T *)r->dc0)[rnn_hoff(r, d, b) + j] += dC[b * H + j];
        }
    return FN(rnn_dir_param_grads)(r, w, ws, d, nr);
}

/* Direction d's weight, bias and input gradients from the gate gradients
 * its backward left in the workspace (DG through W, D2 through R). */
static pd_status FN(rnn_dir_param_grads)(const pd__rnn *r, const pd__rnn_ws *w, const T *ws, int d, int64_t nr) {
    const int64_t S = r->S, N = r->N, In = r->In, H = r->H, GH = r->G * H, SN = S * N;
    const T *W = (const T *)r->W + d * GH * In;
    const T *HS = ws + w->hs, *AUX = ws + w->aux, *DG = ws + w->dg, *D2 = ws + w->d2;
    if (r->dR) {
        T *dR = (T *)r->dR + d * GH * H;
        PD_TRY(FN(rgemm)(true, false, nr, H, SN, D2, GH, HS, H, 1, dR, H));
        if (nr < GH) PD_TRY(FN(rgemm)(true, false, H, H, SN, D2 + 2 * H, GH, AUX, H, 1, dR + 2 * H * H, H));
    }
    if (r->dB) {
        T *dB = (T *)r->dB + d * 2 * GH;
        for (int64_t k = 0; k < GH; k++) {
            double sw = 0, sr = 0;
            for (int64_t q = 0; q < SN; q++) sw += DG[q * GH + k], sr += D2[q * GH + k];
            dB[k] += (T)sw;
            dB[GH + k] += (T)sr;
        }
    }
    if (r->dX) PD_TRY(FN(rgemm)(false, false, SN, In, GH, DG, GH, W, In, 1, r->dX, In));
    if (r->dW) PD_TRY(FN(rgemm)(true, false, GH, In, SN, DG, GH, r->X, In, 1, (T *)r->dW + d * GH * In, In));
    return PD_OK;
}

static pd_status FN(rnn_backward)(const pd__rnn *r, const pd__rnn_ws *w, void *ws) {
    for (int d = 0; d < r->a.ndir; d++) {
        PD_TRY(FN(rnn_dir_fwd)(r, w, ws, d));
        PD_TRY(FN(rnn_dir_bwd)(r, w, ws, d));
    }
    return PD_OK;
}
