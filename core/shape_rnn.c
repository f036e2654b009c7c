/* shape_rnn.c - shape rules and FLOP counts of the recurrent ops LSTM, GRU
 * and RNN (ONNX opsets 1-22; layout from 14).
 *
 * How it works: docs/INTERNALS.md, "core/shape_rnn.c".
 */
#include "shape_rnn.h"

#include <string.h>

/* A shape formatted for a message; the temporary lives to the end of the call. */
typedef struct pd__shp {
    char s[160];
} pd__shp;

static pd__shp shp(const pd__tensor *t) {
    pd__shp b;
    pd__format_shape(b.s, sizeof b.s, t->ndim, t->shape);
    return b;
}

static const pd__tensor *cin(const pd_graph *g, const pd__node *n, int i) {
    return (i < n->nin && n->in[i] >= 0) ? &g->tensors[n->in[i]] : NULL;
}

/* ASCII strings equal but for case (ONNX Runtime reads activations so). */
static bool same_name(const char *a, const char *b) {
    for (; *a && *b; a++, b++) {
        char x = *a >= 'A' && *a <= 'Z' ? (char)(*a - 'A' + 'a') : *a, y = *b >= 'A' && *b <= 'Z' ? (char)(*b - 'A' + 'a') : *b;
        if (x != y) return false;
    }
    return *a == *b;
}

/* The ONNX default activation of slot k (per direction) of a cell. */
static const char *default_act(pd__rnn_cell cell, int k) {
    if (cell == PD_RNN_SIMPLE) return "Tanh";
    return k == 0 ? "Sigmoid" : "Tanh";
}

pd_status pd__rnn_attrs_read(const pd__node *n, pd__rnn_attrs *a) {
    memset(a, 0, sizeof *a);
    const char *op = n->op_type;
    a->cell = strcmp(op, "LSTM") == 0 ? PD_RNN_LSTM : strcmp(op, "GRU") == 0 ? PD_RNN_GRU : PD_RNN_SIMPLE;
    a->gates = a->cell == PD_RNN_LSTM ? 4 : a->cell == PD_RNN_GRU ? 3 : 1;
    const char *dir = pd__attr_s(n, "direction", "forward");
    if (strcmp(dir, "forward") == 0) a->ndir = 1;
    else if (strcmp(dir, "reverse") == 0) a->ndir = 1, a->reverse = true;
    else if (strcmp(dir, "bidirectional") == 0) a->ndir = 2;
    else return pd__err(PD_ERR_INVALID, "direction '%s' (forward, reverse or bidirectional)", dir);
    a->hidden = pd__attr_i(n, "hidden_size", -1);
    if (pd__attr_get(n, "hidden_size") && a->hidden < 1)
        return pd__err(PD_ERR_SHAPE, "hidden_size must be >= 1 (is %lld)", (long long)a->hidden);
    int64_t layout = pd__attr_i(n, "layout", 0);
    if (layout != 0 && layout != 1) return pd__err(PD_ERR_INVALID, "layout must be 0 or 1 (is %lld)", (long long)layout);
    a->layout = (int)layout;
    a->lbr = a->cell == PD_RNN_GRU && pd__attr_i(n, "linear_before_reset", 0) != 0;
    if (pd__attr_get(n, "clip"))
        return pd__err(PD_ERR_UNSUPPORTED, "attribute clip (%g) is not supported", (double)pd__attr_f(n, "clip", 0));
    if (a->cell == PD_RNN_LSTM && pd__attr_i(n, "input_forget", 0) != 0)
        return pd__err(PD_ERR_UNSUPPORTED, "attribute input_forget=1 (coupled input and forget gates) is not supported");
    const pd__attr *acts = pd__attr_get(n, "activations");
    if (acts) {
        int per = a->cell == PD_RNN_LSTM ? 3 : a->cell == PD_RNN_GRU ? 2 : 1;
        if (acts->type != PD_A_STRINGS || acts->n != per * a->ndir)
            return pd__err(PD_ERR_INVALID, "attribute activations has %d values, expected %d", acts->n, per * a->ndir);
        const char *s = acts->s;
        for (int k = 0; k < acts->n; k++, s += strlen(s) + 1) {
            const char *want = default_act(a->cell, k % per);
            if (!same_name(s, want))
                return pd__err(PD_ERR_UNSUPPORTED,
                               "attribute activations: '%s' at %d is not supported (only the default %s)", s, k, want);
        }
    }
    return PD_OK;
}

static pd_status check_shape(pd_graph *g, pd__node *n, const pd__tensor *t, const char *what, int nd,
                             const int64_t *want) {
    bool ok = t->ndim == nd;
    for (int i = 0; ok && i < nd; i++) ok = t->shape[i] == want[i];
    if (!ok) {
        char w[160];
        pd__format_shape(w, sizeof w, nd, want);
        return pd__node_err(g, n, PD_ERR_SHAPE, "%s '%s' is %s, expected %s", what, t->name, shp(t).s, w);
    }
    return PD_OK;
}

static pd_status rnn_shape(pd_graph *g, pd__node *n) {
    pd__rnn_attrs a;
    pd_status st = pd__rnn_attrs_read(n, &a);
    if (st != PD_OK) {
        pd__err_prefix("%s: node '%s' (%s)", g->path, n->name, n->op_type);
        return st;
    }
    pd__tensor *x = pd__in(g, n, 0), *w = pd__in(g, n, 1), *r = pd__in(g, n, 2), *b = pd__in(g, n, 3);
    pd__tensor *sl = pd__in(g, n, 4), *h0 = pd__in(g, n, 5);
    bool lstm = a.cell == PD_RNN_LSTM;
    pd__tensor *c0 = lstm ? pd__in(g, n, 6) : NULL, *p = lstm ? pd__in(g, n, 7) : NULL; /* P: peepholes */
    if (!x || !w || !r) return pd__node_err(g, n, PD_ERR_INVALID, "inputs X, W and R are required");
    int maxin = a.cell == PD_RNN_LSTM ? 8 : 6, maxout = a.cell == PD_RNN_LSTM ? 3 : 2;
    if (n->nin > maxin || n->nout > maxout)
        return pd__node_err(g, n, PD_ERR_INVALID, "%d inputs and %d outputs (at most %d and %d)", n->nin, n->nout,
                            maxin, maxout);
    if (x->dtype != PD_FLOAT && x->dtype != PD_DOUBLE)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "X '%s' has dtype %s (float and double are supported)", x->name,
                            pd_dtype_name(x->dtype));
    const pd__tensor *same[6] = {w, r, b, h0, c0, p};
    for (int i = 0; i < 6; i++)
        if (same[i] && same[i]->dtype != x->dtype)
            return pd__node_err(g, n, PD_ERR_SHAPE, "'%s' has dtype %s, X has %s", same[i]->name,
                                pd_dtype_name(same[i]->dtype), pd_dtype_name(x->dtype));
    if (x->ndim != 3) return pd__node_err(g, n, PD_ERR_SHAPE, "X '%s' is %s, expected rank 3", x->name, shp(x).s);
    if (r->ndim != 3) return pd__node_err(g, n, PD_ERR_SHAPE, "R '%s' is %s, expected rank 3", r->name, shp(r).s);
    int64_t S = x->shape[a.layout ? 1 : 0], N = x->shape[a.layout ? 0 : 1], I = x->shape[2];
    int64_t H = a.hidden > 0 ? a.hidden : r->shape[2], G = a.gates, D = a.ndir;
    int64_t ws[3] = {D, G * H, I}, rs[3] = {D, G * H, H}, bs[2] = {D, 2 * G * H}, ls[1] = {N};
    int64_t hs[3] = {D, N, H};
    if (a.layout) hs[0] = N, hs[1] = D;
    PD_TRY(check_shape(g, n, w, "W", 3, ws));
    PD_TRY(check_shape(g, n, r, "R", 3, rs));
    if (b) PD_TRY(check_shape(g, n, b, "B", 2, bs));
    if (h0) PD_TRY(check_shape(g, n, h0, "initial_h", 3, hs));
    if (c0) PD_TRY(check_shape(g, n, c0, "initial_c", 3, hs));
    int64_t ps[2] = {D, 3 * H};
    if (p) PD_TRY(check_shape(g, n, p, "P", 2, ps));
    if (sl) {
        if (sl->dtype != PD_INT32 && sl->dtype != PD_INT64)
            return pd__node_err(g, n, PD_ERR_SHAPE, "sequence_lens '%s' has dtype %s, expected int32", sl->name,
                                pd_dtype_name(sl->dtype));
        PD_TRY(check_shape(g, n, sl, "sequence_lens", 1, ls));
        if (sl->data)
            for (int64_t i = 0; i < N; i++) {
                int64_t v = sl->dtype == PD_INT32 ? ((const int32_t *)sl->data)[i] : ((const int64_t *)sl->data)[i];
                if (v < 0 || v > S)
                    return pd__node_err(g, n, PD_ERR_INVALID, "sequence_lens[%lld] = %lld is outside [0, %lld]",
                                        (long long)i, (long long)v, (long long)S);
            }
    }
    int64_t ys[4] = {S, D, N, H};
    if (a.layout) ys[0] = N, ys[1] = S, ys[2] = D;
    for (int j = 0; j < n->nout; j++) {
        pd__tensor *t = pd__out(g, n, j);
        if (!t) continue;
        t->dtype = x->dtype;
        PD_TRY(pd__tensor_set_shape(g, t, j == 0 ? 4 : 3, j == 0 ? ys : hs));
    }
    return PD_OK;
}

/* Per step and direction: the gate products of X and H (2 flops a multiply-add)
 * and about 8 flops per gate element for the activations and the update. */
static double rnn_flops(const pd_graph *g, const pd__node *n) {
    pd__rnn_attrs a;
    const pd__tensor *x = cin(g, n, 0), *r = cin(g, n, 2);
    if (!x || !r || x->ndim != 3 || r->ndim != 3 || pd__rnn_attrs_read(n, &a) != PD_OK) return 0;
    double H = (double)r->shape[2], G = a.gates, rows = (double)x->shape[0] * (double)x->shape[1] * a.ndir;
    return rows * G * H * (2.0 * ((double)x->shape[2] + H) + 8);
}

pd_status pd__shape_LSTM(pd_graph *g, pd__node *n) { return rnn_shape(g, n); }
double pd__flops_LSTM(const pd_graph *g, const pd__node *n) { return rnn_flops(g, n); }
pd_status pd__shape_GRU(pd_graph *g, pd__node *n) { return rnn_shape(g, n); }
double pd__flops_GRU(const pd_graph *g, const pd__node *n) { return rnn_flops(g, n); }
pd_status pd__shape_RNN(pd_graph *g, pd__node *n) { return rnn_shape(g, n); }
double pd__flops_RNN(const pd_graph *g, const pd__node *n) { return rnn_flops(g, n); }
