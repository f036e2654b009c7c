/* rnn.c - CPU kernels of the recurrent ops LSTM, GRU and RNN (ONNX), each
 * forward beside its backward (back-propagation through time).
 *
 * How it works: docs/INTERNALS.md, "runtime/cpu/rnn.c".
 */
#include "../../core/shape_rnn.h"
#include "nn_common.h"

/* A node's tensors and sizes, untyped. */
typedef struct pd__rnn {
    pd__rnn_attrs a;
    int64_t S, N, In, H, G; /* steps, batch, input size, hidden size, gate blocks */
    int64_t *len;          /* per batch entry, in [0, S] */
    const void *X, *W, *R, *B, *h0, *c0, *P; /* P: LSTM's peepholes (ndir, 3 H: i, o, f) */
    void *Y, *Yh, *Yc;
    const void *dY, *dYh, *dYc;
    void *dX, *dW, *dR, *dB, *dh0, *dc0, *dP;
} pd__rnn;

/* Row of X (and of X's gate products) at time t, batch entry b. */
static inline int64_t rnn_xrow(const pd__rnn *r, int64_t t, int64_t b) {
    return r->a.layout ? b * r->S + t : t * r->N + b;
}
/* Offset of Y[t, d, b, :] (layout 1: Y[b, t, d, :]). */
static inline int64_t rnn_yoff(const pd__rnn *r, int64_t t, int d, int64_t b) {
    int64_t D = r->a.ndir;
    return (r->a.layout ? (b * r->S + t) * D + d : (t * D + d) * r->N + b) * r->H;
}
/* Offset of Y_h[d, b, :] (initial_h, Y_c, initial_c; layout 1: [b, d, :]). */
static inline int64_t rnn_hoff(const pd__rnn *r, int d, int64_t b) {
    return (r->a.layout ? b * r->a.ndir + d : d * r->N + b) * r->H;
}
/* Whether entry b runs at step s of direction d, and at which time. */
static inline bool rnn_time(const pd__rnn *r, int d, int64_t b, int64_t s, int64_t *t) {
    int64_t L = r->len[b];
    if (s >= L) return false;
    *t = (r->a.reverse || d == 1) ? L - 1 - s : s;
    return true;
}

/* Elements of the per-direction workspace: the forward's (kept for the
 * backward) and, for the backward, its own. */
typedef struct pd__rnn_ws {
    int64_t xw, hs, cs, gs, aux, hr;          /* forward */
    int64_t dg, d2, dh, dc, dh2, tmp, dhn;    /* backward */
    int64_t total;
} pd__rnn_ws;

static pd__rnn_ws rnn_ws(const pd__rnn *r, bool bwd) {
    pd__rnn_ws w;
    int64_t SN = r->S * r->N, GH = r->G * r->H, NH = r->N * r->H, at = 0;
#define PD__WS(f, n) (w.f = at, at += ((n) + 7) / 8 * 8)
    PD__WS(xw, SN * GH);
    PD__WS(hs, (r->S + 1) * NH);
    PD__WS(cs, r->a.cell == PD_RNN_LSTM ? (r->S + 1) * NH : 0);
    PD__WS(gs, SN * GH);
    PD__WS(aux, r->a.cell == PD_RNN_GRU ? SN * r->H : 0);
    PD__WS(hr, NH * r->G);
    if (bwd) {
        PD__WS(dg, SN * GH);
        PD__WS(d2, SN * GH);
        PD__WS(dh, NH);
        PD__WS(dc, NH);
        PD__WS(dh2, NH);
        PD__WS(tmp, NH);
        PD__WS(dhn, NH);
    }
#undef PD__WS
    w.total = at;
    return w;
}

/* ---- the typed kernels ------------------------------------------------------------------------ */
#define T float
#define FN(name) name##_f32
#define PD_GEMM cblas_sgemm
#define EXP expf
#define TANH tanhf
#include "rnn_impl.h"
#undef T
#undef FN
#undef PD_GEMM
#undef EXP
#undef TANH

#define T double
#define FN(name) name##_f64
#define PD_GEMM cblas_dgemm
#define EXP exp
#define TANH tanh
#include "rnn_impl.h"
#undef T
#undef FN
#undef PD_GEMM
#undef EXP
#undef TANH

static const void *dat(const pd_tensor *t) { return t ? t->data : NULL; }

/* Fills *r from the node (forward: dout and din NULL); the scratch for the
 * workspace of one direction comes with it, in *ws (bytes from pd__scratch). */
static pd_status rnn_gather(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                            pd_tensor *const *dout, pd_tensor *const *din, pd__rnn *r, pd__rnn_ws *w, void **ws) {
    memset(r, 0, sizeof *r);
    PD_TRY(pd__rnn_attrs_read(n, &r->a));
    const pd_tensor *X = in[0], *R = in[2];
    bool lstm = r->a.cell == PD_RNN_LSTM;
    r->S = X->shape[r->a.layout ? 1 : 0];
    r->N = X->shape[r->a.layout ? 0 : 1];
    r->In = X->shape[2];
    r->H = R->shape[2];
    r->G = r->a.gates;
    r->X = X->data;
    r->W = in[1]->data;
    r->R = R->data;
    r->B = dat(opt_in(n, in, 3));
    r->h0 = dat(opt_in(n, in, 5));
    r->c0 = lstm ? dat(opt_in(n, in, 6)) : NULL;
    r->P = lstm ? dat(opt_in(n, in, 7)) : NULL;
    r->Y = (void *)dat(opt_out(n, out, 0));
    r->Yh = (void *)dat(opt_out(n, out, 1));
    r->Yc = lstm ? (void *)dat(opt_out(n, out, 2)) : NULL;
    if (dout) {
        r->dY = n->nout > 0 ? dat(dout[0]) : NULL;
        r->dYh = n->nout > 1 ? dat(dout[1]) : NULL;
        r->dYc = lstm && n->nout > 2 ? dat(dout[2]) : NULL;
    }
    if (din) {
        void **dv[7] = {&r->dX, &r->dW, &r->dR, &r->dB, &r->dh0, &r->dc0, &r->dP};
        int idx[7] = {0, 1, 2, 3, 5, 6, 7};
        for (int k = 0; k < 7; k++)
            if (idx[k] < n->nin && opt_in(n, in, idx[k]) && din[idx[k]]) *dv[k] = din[idx[k]]->data;
        if (!lstm) r->dc0 = r->dP = NULL;
    }
    *w = rnn_ws(r, din != NULL);
    size_t esz = pd_dtype_size(X->dtype);
    int64_t lenb = (r->N * (int64_t)sizeof(int64_t) + 63) / 64 * 64;
    char *s = pd__scratch_n(x, w->total * (int64_t)esz + lenb, 1, 1);
    if (!s) return PD_ERR_NOMEM;
    r->len = (int64_t *)s;
    *ws = s + lenb;
    const pd_tensor *sl = opt_in(n, in, 4);
    for (int64_t b = 0; b < r->N; b++) {
        int64_t v = r->S;
        if (sl) v = sl->dtype == PD_INT32 ? ((const int32_t *)sl->data)[b] : ((const int64_t *)sl->data)[b];
        if (v < 0 || v > r->S)
            return pd__err(PD_ERR_INVALID, "sequence_lens[%lld] = %lld is outside [0, %lld]", (long long)b,
                           (long long)v, (long long)r->S);
        r->len[b] = v;
    }
    return PD_OK;
}

static pd_status rnn_fwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    pd__rnn r;
    pd__rnn_ws w;
    void *ws;
    PD_TRY(rnn_gather(x, n, in, out, NULL, NULL, &r, &w, &ws));
    PD_DISPATCH(in[0]->dtype, rnn_forward, (&r, &w, ws))
}

static pd_status rnn_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                         pd_tensor *const *dout, pd_tensor *const *din) {
    pd__rnn r;
    pd__rnn_ws w;
    void *ws;
    PD_TRY(rnn_gather(x, n, in, out, dout, din, &r, &w, &ws));
    r.Y = r.Yh = r.Yc = NULL; /* the forward runs again for its gates: the outputs stay as they are */
    if (!r.dY && !r.dYh && !r.dYc) return PD_OK;
    if (!r.dX && !r.dW && !r.dR && !r.dB && !r.dh0 && !r.dc0 && !r.dP) return PD_OK;
    PD_DISPATCH(in[0]->dtype, rnn_backward, (&r, &w, ws))
}

/* ---- LSTM, GRU, RNN ------------------------------------------------------------------------------ */
pd_status pd__cpu_LSTM(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    return rnn_fwd(x, n, in, out);
}
pd_status pd__cpu_LSTM_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                           pd_tensor *const *dout, pd_tensor *const *din) {
    return rnn_bwd(x, n, in, out, dout, din);
}

pd_status pd__cpu_GRU(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    return rnn_fwd(x, n, in, out);
}
pd_status pd__cpu_GRU_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                          pd_tensor *const *dout, pd_tensor *const *din) {
    return rnn_bwd(x, n, in, out, dout, din);
}

pd_status pd__cpu_RNN(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    return rnn_fwd(x, n, in, out);
}
pd_status pd__cpu_RNN_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                          pd_tensor *const *dout, pd_tensor *const *din) {
    return rnn_bwd(x, n, in, out, dout, din);
}
