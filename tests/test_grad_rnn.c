/* test_grad_rnn.c - the recurrent ops' CPU backward kernels (runtime/cpu/rnn.c):
 *
 * - every differentiable input of LSTM, GRU (linear_before_reset 0 and 1)
 *   and RNN - X, W, R, B, initial_h, initial_c, LSTM's P - against central
 *   differences in float64 (tests/gradcheck.h: also += into din and the split
 *   B/W backward), over random sizes (1 to 4 steps), directions (forward,
 *   reverse, bidirectional), layouts, with and without B and the initial
 *   states, with uniform and per-entry sequence_lens, with the gradients of
 *   Y; Y and Y_h; or Y, Y_h and Y_c;
 * - the float32 forward and backward against the float64 ones on the same values;
 * - the forward against a plain reference of ONNX's equations (GRU's two
 *   linear_before_reset forms, per-entry sequence_lens, both layouts);
 * - the forms refused at load (peepholes, clip, other activations, input_forget);
 * - two layers as PyTorch exports them (the second without Y) train in a session.
 */
#include "check.h"
#include "gradcheck.h"
#include "onnx.pb-c.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rs_state;
static void rs_seed(uint64_t s) { rs_state = s * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull; }
static uint64_t rs_next(void) {
    rs_state ^= rs_state << 13;
    rs_state ^= rs_state >> 7;
    rs_state ^= rs_state << 17;
    return rs_state;
}
static int64_t irand(int64_t lo, int64_t hi) { return lo + (int64_t)(rs_next() % (uint64_t)(hi - lo + 1)); }

/* A random case of op (LSTM, GRU, RNN) in dtype dt; *mask: the inputs to check. */
static gc *build(const char *op, uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn) {
    rs_seed(seed);
    bool lstm = strcmp(op, "LSTM") == 0, gru = strcmp(op, "GRU") == 0;
    int64_t G = lstm ? 4 : gru ? 3 : 1;
    int64_t S = irand(1, 4), N = irand(1, 3), I = irand(1, 4), H = irand(1, 4);
    int dir = (int)irand(0, 2), D = dir == 2 ? 2 : 1, layout = (int)irand(0, 1);
    bool hasB = irand(0, 1), hasH = irand(0, 1), hasC = lstm && irand(0, 1), lens = irand(0, 2) == 0;
    bool hasP = lstm && irand(0, 1);
    int lbr = gru ? (int)irand(0, 1) : 0, nout = (int)irand(1, lstm ? 3 : 2);
    gc *c = gc_new(op, layout ? 14 : (int)irand(7, 22));
    gc_seed(c, seed);
    int64_t xs[3] = {S, N, I}, ws[3] = {D, G * H, I}, rsh[3] = {D, G * H, H}, bs[2] = {D, 2 * G * H}, hs[3] = {D, N, H};
    if (layout) xs[0] = N, xs[1] = S, hs[0] = N, hs[1] = D;
    *mask = 0x7;
    gc_input(c, dt, 3, xs, NULL);
    gc_input(c, dt, 3, ws, NULL);
    gc_input(c, dt, 3, rsh, NULL);
    int32_t lv[3];
    char ld[32] = "";
    for (int64_t b = 0; b < N; b++) lv[b] = (int32_t)irand(0, S);
    if (lens) snprintf(ld, sizeof ld, " lens=%d,%d,%d", lv[0], N > 1 ? lv[1] : -1, N > 2 ? lv[2] : -1);
    int last = hasP ? 7 : hasC ? 6 : hasH ? 5 : lens ? 4 : hasB ? 3 : 2; /* absent trailing inputs are left off */
    if (last >= 3) {
        if (hasB) gc_input(c, dt, 2, bs, NULL), *mask |= 0x8;
        else gc_absent(c);
    }
    if (last >= 4) {
        int64_t ls[1] = {N};
        if (lens) gc_input(c, PD_INT32, 1, ls, lv);
        else gc_absent(c);
    }
    if (last >= 5) {
        if (hasH) gc_input(c, dt, 3, hs, NULL), *mask |= 0x20;
        else gc_absent(c);
    }
    if (last >= 6) {
        if (hasC) gc_input(c, dt, 3, hs, NULL), *mask |= 0x40;
        else gc_absent(c);
    }
    int64_t ps[2] = {D, 3 * H};
    if (last >= 7) gc_input(c, dt, 2, ps, NULL), *mask |= 0x80;
    static const char *dirs[3] = {"forward", "reverse", "bidirectional"};
    if (dir || irand(0, 1)) gc_attr_s(c, "direction", dirs[dir]);
    gc_attr_i(c, "hidden_size", H);
    if (layout) gc_attr_i(c, "layout", 1);
    if (gru) gc_attr_i(c, "linear_before_reset", lbr);
    gc_outputs(c, nout);
    snprintf(d, dn, "S=%lld N=%lld I=%lld H=%lld %s layout=%d%s%s%s%s%s%s outputs=%d", (long long)S, (long long)N,
             (long long)I, (long long)H, dirs[dir], layout, hasB ? " B" : "", hasH ? " initial_h" : "",
             hasC ? " initial_c" : "", hasP ? " P" : "", ld, lbr ? " linear_before_reset" : "", nout);
    return c;
}

static const char *ops[3] = {"LSTM", "GRU", "RNN"};

static void check_gradients(void) {
    for (int o = 0; o < 3; o++)
        for (int i = 0; i < 60; i++) {
            char d[256];
            uint32_t mask;
            gc *c = build(ops[o], (uint64_t)(o * 1000 + i + 1), PD_DOUBLE, &mask, d, sizeof d);
            bool ok = gc_check(c, 1e-6, mask);
            CHECK(ok, "%s gradient #%d %s: %s", ops[o], i, d, gc_why(c));
            gc_free(c);
        }
}

/* ---- float32 against float64 ------------------------------------------------------------------- */

/* Shape rule, forward, then backward with fixed output gradients; y[j] gets
 * output j, g[i] input i's gradient (mask), as doubles; free them. */
static bool run_case(gc *c, uint32_t mask, double **y, double **g) {
    pd__node *n = &c->node;
    n->nin = c->nin;
    n->nout = c->nout;
    n->in = malloc(sizeof(int) * (size_t)(c->nin + 1));
    n->out = malloc(sizeof(int) * (size_t)(c->nout + 1));
    memcpy(n->in, c->in, sizeof(int) * (size_t)c->nin);
    memcpy(n->out, c->out, sizeof(int) * (size_t)c->nout);
    for (int i = 0; i < 16; i++) y[i] = g[i] = NULL;
    if (pd__ops[n->op].shape(c->g, n) != PD_OK) {
        snprintf(c->why, sizeof c->why, "shape rule: %s", pd_last_error());
        return false;
    }
    pd_tensor iv[16], ov[16], dov[16], div[16], *ip[16], *op[16], *dop[16], *dip[16];
    for (int j = 0; j < c->nout; j++) {
        pd__tensor *t = &c->g->tensors[c->out[j]];
        t->data = calloc(1, (size_t)t->numel * pd_dtype_size(t->dtype) + 1);
        ov[j] = pd__view(t);
        op[j] = &ov[j];
    }
    for (int i = 0; i < c->nin; i++) {
        ip[i] = NULL;
        if (c->in[i] < 0) continue;
        iv[i] = pd__view(&c->g->tensors[c->in[i]]);
        ip[i] = &iv[i];
    }
    pd__exec x = {.threads = 1, .g = c->g, .seed = 1234};
    bool ok = pd__cpu_run(&x, c->g, n, ip, op) == PD_OK;
    uint64_t r = 0x2545f4914f6cdd1dull;
    for (int j = 0; j < c->nout; j++) {
        int64_t k, m = pd_tensor_numel(&ov[j]);
        y[j] = malloc(sizeof(double) * (size_t)(m + 1));
        dov[j] = ov[j];
        dov[j].data = malloc(sizeof(double) * (size_t)(m + 1));
        for (k = 0; k < m; k++) {
            y[j][k] = pd__get_f(ov[j].dtype, ov[j].data, k);
            r ^= r >> 12, r ^= r << 25, r ^= r >> 27;
            pd__set_f(dov[j].dtype, dov[j].data, k, (double)((r * 2685821657736338717ull) >> 11) / 4503599627370496.0 - 1);
        }
        dop[j] = &dov[j];
    }
    for (int i = 0; i < c->nin; i++) {
        dip[i] = NULL;
        if (!((mask >> i) & 1) || c->in[i] < 0) continue;
        div[i] = iv[i];
        div[i].data = calloc((size_t)pd_tensor_numel(&iv[i]) + 1, sizeof(double));
        dip[i] = &div[i];
    }
    ok = ok && pd__cpu_run_bwd(&x, c->g, n, ip, op, dop, dip) == PD_OK;
    if (!ok) snprintf(c->why, sizeof c->why, "%s", pd_last_error());
    for (int i = 0; i < c->nin; i++) {
        if (!dip[i]) continue;
        int64_t m = pd_tensor_numel(&div[i]);
        g[i] = malloc(sizeof(double) * (size_t)(m + 1));
        for (int64_t k = 0; k < m; k++) g[i][k] = pd__get_f(div[i].dtype, div[i].data, k);
        free(div[i].data);
    }
    for (int j = 0; j < c->nout; j++) free(dov[j].data);
    free(x.scratch);
    return ok;
}

/* max |a - b| / max(|b|, 1) over n values. */
static double rel_diff(const double *a, const double *b, int64_t n) {
    double md = 0, mb = 1;
    for (int64_t k = 0; k < n; k++) {
        double e = fabs(a[k] - b[k]);
        if (!(e <= md)) md = e; /* NaN counts */
        if (fabs(b[k]) > mb) mb = fabs(b[k]);
    }
    return md / mb;
}

static void check_f32(void) {
    for (int o = 0; o < 3; o++)
        for (int i = 0; i < 20; i++) {
            char d[256], d2[256];
            uint32_t mask, mask2;
            uint64_t seed = (uint64_t)(o * 1000 + 500 + i);
            gc *c32 = build(ops[o], seed, PD_FLOAT, &mask, d, sizeof d);
            gc *c64 = build(ops[o], seed, PD_DOUBLE, &mask2, d2, sizeof d2);
            for (int k = 0; k < c64->nin; k++) { /* the same values: float64 gets float32's */
                if (c64->in[k] < 0) continue;
                const pd__tensor *t = &c32->g->tensors[c32->in[k]];
                pd__tensor *u = &c64->g->tensors[c64->in[k]];
                if (t->dtype != PD_FLOAT) continue;
                for (int64_t e = 0; e < t->numel; e++) pd__set_f(u->dtype, u->data, e, pd__get_f(PD_FLOAT, t->data, e));
            }
            double *y32[16], *y64[16], *g32[16], *g64[16], fd = 0, bd = 0;
            bool ok = run_case(c32, mask, y32, g32) && run_case(c64, mask, y64, g64);
            for (int j = 0; ok && j < c64->nout; j++) {
                double e = rel_diff(y32[j], y64[j], c64->g->tensors[c64->out[j]].numel);
                if (!(e <= fd)) fd = e;
            }
            for (int k = 0; ok && k < c64->nin; k++) {
                if (!g64[k]) continue;
                double e = rel_diff(g32[k], g64[k], c64->g->tensors[c64->in[k]].numel);
                if (!(e <= bd)) bd = e;
            }
            CHECK(ok && fd <= 1e-5 && bd <= 1e-4, "%s float32 vs float64 #%d %s: forward %.3g, backward %.3g %s",
                  ops[o], i, d, fd, bd, ok ? "" : (c32->why[0] ? c32->why : c64->why));
            for (int k = 0; k < 16; k++) free(y32[k]), free(y64[k]), free(g32[k]), free(g64[k]);
            gc_free(c32);
            gc_free(c64);
        }
}

/* ---- the forward against a plain reference --------------------------------------------------------- */

static double sig(double v) { return 1 / (1 + exp(-v)); }

/* ONNX's equations, one batch entry and one unit at a time, in double (a
 * float64 case built by build()); entries run their first len steps, Y is 0
 * beyond them (ONNX Runtime's rule). y[j]: the expected output j. */
static void reference(gc *c, double **y) {
    const pd__node *n = &c->node;
    bool lstm = strcmp(n->op_type, "LSTM") == 0, gru = strcmp(n->op_type, "GRU") == 0;
    const char *dir = pd__attr_s(n, "direction", "forward");
    int D = strcmp(dir, "bidirectional") == 0 ? 2 : 1, layout = (int)pd__attr_i(n, "layout", 0);
    bool rev0 = strcmp(dir, "reverse") == 0, lbr = pd__attr_i(n, "linear_before_reset", 0) != 0;
    const pd__tensor *tx = &c->g->tensors[c->in[0]], *tr = &c->g->tensors[c->in[2]];
    int64_t S = tx->shape[layout ? 1 : 0], N = tx->shape[layout ? 0 : 1], I = tx->shape[2], H = tr->shape[2];
    int64_t G = lstm ? 4 : gru ? 3 : 1;
    const double *X = tx->data, *W = c->g->tensors[c->in[1]].data, *R = tr->data;
    const double *B = NULL, *h0 = NULL, *c0 = NULL, *P = NULL;
    const int32_t *lens = NULL;
    if (c->nin > 3 && c->in[3] >= 0) B = c->g->tensors[c->in[3]].data;
    if (c->nin > 4 && c->in[4] >= 0) lens = c->g->tensors[c->in[4]].data;
    if (c->nin > 5 && c->in[5] >= 0) h0 = c->g->tensors[c->in[5]].data;
    if (c->nin > 6 && c->in[6] >= 0) c0 = c->g->tensors[c->in[6]].data;
    if (c->nin > 7 && c->in[7] >= 0) P = c->g->tensors[c->in[7]].data; /* peepholes i, o, f */
    for (int j = 0; j < c->nout; j++) y[j] = calloc((size_t)c->g->tensors[c->out[j]].numel + 1, sizeof(double));
    for (int d = 0; d < D; d++)
        for (int64_t b = 0; b < N; b++) {
            double h[8], cc[8], px[32], ph[32], nh[8];
            int64_t hoff = (layout ? b * D + d : d * N + b) * H, L = lens ? lens[b] : S;
            for (int64_t j = 0; j < H; j++) h[j] = h0 ? h0[hoff + j] : 0, cc[j] = c0 ? c0[hoff + j] : 0;
            for (int64_t s = 0; s < L; s++) {
                int64_t t = (rev0 || d == 1) ? L - 1 - s : s;
                const double *x = X + (layout ? b * S + t : t * N + b) * I;
                for (int64_t k = 0; k < G * H; k++) {
                    px[k] = B ? B[d * 2 * G * H + k] : 0;
                    ph[k] = B ? B[d * 2 * G * H + G * H + k] : 0;
                    for (int64_t i = 0; i < I; i++) px[k] += W[(d * G * H + k) * I + i] * x[i];
                    for (int64_t m = 0; m < H; m++) ph[k] += R[(d * G * H + k) * H + m] * h[m];
                }
                for (int64_t j = 0; j < H; j++) {
                    if (lstm) {
                        const double *pp = P ? P + d * 3 * H : NULL;
                        double i = sig(px[j] + ph[j] + (pp ? pp[j] * cc[j] : 0));
                        double f = sig(px[2 * H + j] + ph[2 * H + j] + (pp ? pp[2 * H + j] * cc[j] : 0));
                        double g = tanh(px[3 * H + j] + ph[3 * H + j]);
                        cc[j] = f * cc[j] + i * g;
                        double o = sig(px[H + j] + ph[H + j] + (pp ? pp[H + j] * cc[j] : 0));
                        nh[j] = o * tanh(cc[j]);
                    } else if (gru) {
                        double z = sig(px[j] + ph[j]), hh;
                        if (lbr) {
                            hh = tanh(px[2 * H + j] + sig(px[H + j] + ph[H + j]) * ph[2 * H + j]);
                        } else {
                            double a = B ? B[d * 2 * G * H + G * H + 2 * H + j] : 0;
                            for (int64_t m = 0; m < H; m++)
                                a += R[(d * G * H + 2 * H + j) * H + m] * sig(px[H + m] + ph[H + m]) * h[m];
                            hh = tanh(px[2 * H + j] + a);
                        }
                        nh[j] = (1 - z) * hh + z * h[j];
                    } else {
                        nh[j] = tanh(px[j] + ph[j]);
                    }
                }
                memcpy(h, nh, sizeof h);
                for (int64_t j = 0; j < H; j++) y[0][(layout ? (b * S + t) * D + d : (t * D + d) * N + b) * H + j] = h[j];
            }
            for (int64_t j = 0; j < H; j++) {
                if (c->nout > 1) y[1][hoff + j] = h[j];
                if (c->nout > 2) y[2][hoff + j] = cc[j];
            }
        }
}

static void check_reference(void) {
    for (int o = 0; o < 3; o++)
        for (int i = 0; i < 40; i++) {
            char d[256];
            uint32_t mask;
            gc *c = build(ops[o], (uint64_t)(o * 1000 + 700 + i), PD_DOUBLE, &mask, d, sizeof d);
            double *y[16], *g[16], *want[16] = {0}, diff = 0;
            bool ok = run_case(c, mask, y, g);
            if (ok) reference(c, want);
            for (int j = 0; ok && j < c->nout; j++)
                for (int64_t k = 0; k < c->g->tensors[c->out[j]].numel; k++) {
                    double e = fabs(y[j][k] - want[j][k]);
                    if (!(e <= diff)) diff = e;
                }
            CHECK(ok && diff <= 1e-12, "%s forward #%d %s against the reference: max diff %.3g %s", ops[o], i, d, diff,
                  c->why);
            for (int k = 0; k < 16; k++) free(y[k]), free(g[k]), free(want[k]);
            gc_free(c);
        }
}

/* ---- training a two-layer model in a session ------------------------------------------------------------ */

/* The model's protobuf structures, freed together. */
static void *arena[256];
static int arena_n;
static void *al(size_t n) {
    void *p = calloc(1, n ? n : 1);
    if (!p || arena_n == 256) abort();
    return arena[arena_n++] = p;
}
static char *str(const char *s) { return strcpy(al(strlen(s) + 1), s); }
static char **names(const char *list, size_t *n) {
    char **v = al(sizeof(char *) * 8), *c = str(list), *t;
    for (*n = 0; (t = strsep(&c, ",")) && *n < 8;) v[(*n)++] = t;
    return v;
}
static Onnx__NodeProto *mk_node(Onnx__GraphProto *g, const char *op, const char *ins, const char *outs) {
    static const Onnx__NodeProto init = ONNX__NODE_PROTO__INIT;
    Onnx__NodeProto *n = al(sizeof *n);
    *n = init;
    n->op_type = str(op);
    n->name = str(outs);
    n->input = names(ins, &n->n_input);
    n->output = names(outs, &n->n_output);
    n->attribute = al(sizeof(void *) * 4);
    g->node[g->n_node++] = n;
    return n;
}
static Onnx__AttributeProto *mk_attr(Onnx__NodeProto *n, const char *name, Onnx__AttributeProto__AttributeType t) {
    static const Onnx__AttributeProto init = ONNX__ATTRIBUTE_PROTO__INIT;
    Onnx__AttributeProto *a = al(sizeof *a);
    *a = init;
    a->name = str(name);
    a->has_type = 1;
    a->type = t;
    n->attribute[n->n_attribute++] = a;
    return a;
}
static void attr_i(Onnx__NodeProto *n, const char *name, int64_t v) {
    Onnx__AttributeProto *a = mk_attr(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
    a->has_i = 1;
    a->i = v;
}
static void attr_ints(Onnx__NodeProto *n, const char *name, int k, const int64_t *v) {
    Onnx__AttributeProto *a = mk_attr(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
    a->n_ints = (size_t)k;
    a->ints = memcpy(al(sizeof(int64_t) * (size_t)k), v, sizeof(int64_t) * (size_t)k);
}
static void attr_s(Onnx__NodeProto *n, const char *name, const char *v) {
    Onnx__AttributeProto *a = mk_attr(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
    a->has_s = 1;
    a->s.data = (uint8_t *)str(v);
    a->s.len = strlen(v);
}
/* An initializer: float, random in [-0.5, 0.5), or int64 values iv. */
static void mk_init(Onnx__GraphProto *g, const char *name, int nd, const int64_t *dims, const int64_t *iv) {
    static const Onnx__TensorProto init = ONNX__TENSOR_PROTO__INIT;
    Onnx__TensorProto *t = al(sizeof *t);
    *t = init;
    t->name = str(name);
    t->n_dims = (size_t)nd;
    t->dims = memcpy(al(sizeof(int64_t) * (size_t)nd), dims, sizeof(int64_t) * (size_t)nd);
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= dims[i];
    t->has_data_type = 1;
    t->data_type = iv ? ONNX__TENSOR_PROTO__DATA_TYPE__INT64 : ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    if (iv) {
        t->n_int64_data = (size_t)n;
        t->int64_data = memcpy(al(sizeof(int64_t) * (size_t)n), iv, sizeof(int64_t) * (size_t)n);
    } else {
        t->n_float_data = (size_t)n;
        t->float_data = al(sizeof(float) * (size_t)n);
        for (int64_t i = 0; i < n; i++) t->float_data[i] = (float)(rs_next() >> 11) / 9007199254740992.0f - 0.5f;
    }
    g->initializer[g->n_initializer++] = t;
}
/* A float graph input or output with a symbolic first dim. */
static Onnx__ValueInfoProto *mk_value(const char *name, int nd, const int64_t *dims) {
    static const Onnx__ValueInfoProto vinit = ONNX__VALUE_INFO_PROTO__INIT;
    static const Onnx__TypeProto tinit = ONNX__TYPE_PROTO__INIT;
    static const Onnx__TypeProto__Tensor ttinit = ONNX__TYPE_PROTO__TENSOR__INIT;
    static const Onnx__TensorShapeProto sinit = ONNX__TENSOR_SHAPE_PROTO__INIT;
    static const Onnx__TensorShapeProto__Dimension dinit = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT;
    Onnx__ValueInfoProto *v = al(sizeof *v);
    Onnx__TypeProto *tp = al(sizeof *tp);
    Onnx__TypeProto__Tensor *tt = al(sizeof *tt);
    Onnx__TensorShapeProto *sp = al(sizeof *sp);
    *v = vinit, *tp = tinit, *tt = ttinit, *sp = sinit;
    v->name = str(name);
    tt->has_elem_type = 1;
    tt->elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    v->type = tp;
    sp->n_dim = (size_t)nd;
    sp->dim = al(sizeof(void *) * (size_t)nd);
    for (int i = 0; i < nd; i++) {
        Onnx__TensorShapeProto__Dimension *d = al(sizeof *d);
        *d = dinit;
        if (i == 0) {
            d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            d->dim_param = str("batch");
        } else {
            d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            d->dim_value = dims[i];
        }
        sp->dim[i] = d;
    }
    tt->shape = sp;
    return v;
}

/* Two recurrent layers over a batch-first x (N, 5, 3) as PyTorch exports
 * them (Transpose in, Y's direction dim folded into the features, the second
 * layer's Y left off), then a Gemm on the last state; trained with Adam on a
 * sum and a last value of the sequence, the loss must fall to a fifth. */
static void check_training(const char *cell, bool bidir) {
    int64_t G = strcmp(cell, "LSTM") == 0 ? 4 : strcmp(cell, "GRU") == 0 ? 3 : 1, D = bidir ? 2 : 1;
    enum { N = 8, S = 5, I = 3, H = 6, C = 2 };
    static const Onnx__ModelProto minit = ONNX__MODEL_PROTO__INIT;
    static const Onnx__GraphProto ginit = ONNX__GRAPH_PROTO__INIT;
    static const Onnx__OperatorSetIdProto oinit = ONNX__OPERATOR_SET_ID_PROTO__INIT;
    Onnx__ModelProto m = minit;
    Onnx__GraphProto g = ginit;
    Onnx__OperatorSetIdProto os = oinit, *osp = &os;
    os.domain = str("");
    os.has_version = 1;
    os.version = 14;
    m.opset_import = &osp;
    m.n_opset_import = 1;
    m.has_ir_version = 1;
    m.ir_version = 8;
    m.graph = &g;
    g.name = str("two_layers");
    g.node = al(sizeof(void *) * 16);
    g.initializer = al(sizeof(void *) * 16);
    rs_seed(42);
    int64_t p3[3] = {1, 0, 2}, p4[4] = {0, 2, 1, 3}, w1[3] = {D, G * H, I}, r[3] = {D, G * H, H}, b[2] = {D, 2 * G * H};
    int64_t w2[3] = {D, G * H, D * H}, s3[3] = {0, 0, -1}, s2[2] = {0, -1}, n3[1] = {3}, n2[1] = {2};
    int64_t wf[2] = {C, D * H}, bf[1] = {C}, xs[3] = {N, S, I}, ps[2] = {N, C};
    mk_init(&g, "W1", 3, w1, NULL), mk_init(&g, "R1", 3, r, NULL), mk_init(&g, "B1", 2, b, NULL);
    mk_init(&g, "W2", 3, w2, NULL), mk_init(&g, "R2", 3, r, NULL), mk_init(&g, "B2", 2, b, NULL);
    mk_init(&g, "shape3", 1, n3, s3), mk_init(&g, "shape2", 1, n2, s2);
    mk_init(&g, "Wfc", 2, wf, NULL), mk_init(&g, "bfc", 1, bf, NULL);
    attr_ints(mk_node(&g, "Transpose", "x", "xt"), "perm", 3, p3);
    for (int l = 0; l < 2; l++) {
        Onnx__NodeProto *n = mk_node(&g, cell, l ? "Y1r,W2,R2,B2" : "xt,W1,R1,B1", l ? ",Yh2" : "Y1,Yh1");
        attr_i(n, "hidden_size", H);
        if (bidir) attr_s(n, "direction", "bidirectional");
        if (G == 3) attr_i(n, "linear_before_reset", 1);
    }
    attr_ints(mk_node(&g, "Transpose", "Y1", "Y1t"), "perm", 4, p4);
    mk_node(&g, "Reshape", "Y1t,shape3", "Y1r"); /* the loader sorts the nodes */
    attr_ints(mk_node(&g, "Transpose", "Yh2", "Yh2t"), "perm", 3, p3);
    mk_node(&g, "Reshape", "Yh2t,shape2", "h");
    attr_i(mk_node(&g, "Gemm", "h,Wfc,bfc", "pred"), "transB", 1);
    Onnx__ValueInfoProto *in = mk_value("x", 3, xs), *out = mk_value("pred", 2, ps);
    g.input = &in, g.n_input = 1, g.output = &out, g.n_output = 1;
    size_t len = onnx__model_proto__get_packed_size(&m);
    uint8_t *buf = al(len);
    onnx__model_proto__pack(&m, buf);
    float X[N * S * I], Y[N * C];
    for (int i = 0; i < N * S * I; i++) X[i] = (float)(rs_next() >> 11) / 4503599627370496.0f - 1;
    for (int k = 0; k < N; k++) {
        Y[2 * k] = Y[2 * k + 1] = 0;
        for (int t = 0; t < S; t++) Y[2 * k] += X[(k * S + t) * I];
        Y[2 * k + 1] = -X[(k * S + S - 1) * I + I - 1];
    }
    pd_tensor xt = {PD_FLOAT, 3, {N, S, I}, X}, yt = {PD_FLOAT, 2, {N, C}, Y};
    pd_load_options lo = PD_LOAD_OPTIONS_INIT;
    lo.batch = N;
    pd_train_options to = PD_TRAIN_OPTIONS_INIT;
    to.optimizer = PD_OPT_ADAM;
    to.lr = 0.02;
    pd_graph *gr = NULL;
    pd_session *ss = NULL;
    pd_step_result res;
    double first = 0, last = 0;
    bool ok = pd_graph_load_memory(buf, len, "two_layers", NULL, &lo, &gr) == PD_OK &&
              pd_session_create(gr, &to, &ss) == PD_OK;
    for (int st = 0; ok && st < 150; st++) {
        ok = pd_session_set_input(ss, "x", &xt) == PD_OK && pd_session_set_labels(ss, &yt) == PD_OK &&
             pd_session_step(ss, &res) == PD_OK;
        if (st == 0) first = res.loss;
        last = res.loss;
    }
    CHECK(ok && last < 0.2 * first, "two %s%s layers train in a session (second layer without Y): loss %.4g -> %.4g %s",
          cell, bidir ? " bidirectional" : "", first, last, ok ? "" : pd_last_error());
    pd_session_destroy(ss);
    pd_graph_destroy(gr);
    while (arena_n > 0) free(arena[--arena_n]);
}

/* ---- forms refused at load ------------------------------------------------------------------------ */

/* An LSTM (or GRU) with one direction, H 2, and the given extra: the shape rule's verdict. */
static pd_status refused(const char *op, int what) {
    gc *c = gc_new(op, 14);
    int64_t H = 2, G = strcmp(op, "LSTM") == 0 ? 4 : 3;
    int64_t xs[3] = {2, 1, 3}, ws[3] = {1, G * H, 3}, rs[3] = {1, G * H, H}, ps[2] = {1, 3 * H};
    gc_input(c, PD_DOUBLE, 3, xs, NULL);
    gc_input(c, PD_DOUBLE, 3, ws, NULL);
    gc_input(c, PD_DOUBLE, 3, rs, NULL);
    gc_attr_i(c, "hidden_size", H);
    if (what == 0) { /* peepholes */
        for (int k = 0; k < 4; k++) gc_absent(c);
        gc_input(c, PD_DOUBLE, 2, ps, NULL);
    } else if (what == 1) {
        gc_attr_f(c, "clip", 3);
    } else if (what == 2) {
        gc__attr(c, "activations", PD_A_STRINGS)->n = 2;
        c->node.attr[c->node.nattr - 1].s = malloc(16);
        memcpy(c->node.attr[c->node.nattr - 1].s, "Sigmoid\0Relu\0", 14);
    } else if (what == 3) {
        gc_attr_i(c, "input_forget", 1);
    }
    gc_outputs(c, 2);
    pd__node *n = &c->node;
    n->nin = c->nin;
    n->nout = c->nout;
    n->in = malloc(sizeof(int) * (size_t)(c->nin + 1));
    n->out = malloc(sizeof(int) * (size_t)(c->nout + 1));
    memcpy(n->in, c->in, sizeof(int) * (size_t)c->nin);
    memcpy(n->out, c->out, sizeof(int) * (size_t)c->nout);
    pd_status st = pd__ops[n->op].shape(c->g, n);
    gc_free(c);
    return st;
}

static void check_refused(void) {
    CHECK(refused("LSTM", 0) == PD_OK, "LSTM with peepholes (P) loads: %s", pd_last_error());
    CHECK(refused("LSTM", 1) == PD_ERR_UNSUPPORTED && strstr(pd_last_error(), "clip"), "clip is refused: %s",
          pd_last_error());
    CHECK(refused("GRU", 2) == PD_ERR_UNSUPPORTED && strstr(pd_last_error(), "Relu"),
          "GRU activations Sigmoid, Relu are refused: %s", pd_last_error());
    CHECK(refused("LSTM", 3) == PD_ERR_UNSUPPORTED && strstr(pd_last_error(), "input_forget"),
          "input_forget=1 is refused: %s", pd_last_error());
    CHECK(refused("LSTM", 4) == PD_OK, "the same LSTM without them loads: %s", pd_last_error());
}

int main(void) {
    check_gradients();
    check_f32();
    check_reference();
    check_refused();
    check_training("LSTM", false);
    check_training("LSTM", true);
    check_training("GRU", true);
    check_training("RNN", false);
    char missing[1024];
    CHECK(gc_uncovered(PD_OPF_RNN, missing, sizeof missing) == 0,
          "every differentiable recurrent op (core/ops.h) has a passing finite-difference case:%s",
          missing[0] ? missing : " yes");
    return check_summary();
}
