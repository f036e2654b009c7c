/* test_nn.c - the nn CPU kernels (runtime/cpu/nn.c) against naive references:
 * Conv and ConvTranspose (1-D to 3-D, groups, strides, dilations, pads,
 * auto_pad), MaxPool (with indices, both storage orders) and AveragePool
 * (count_include_pad, ceil_mode), MatMul with broadcasting, Softmax and
 * LogSoftmax over every axis, InstanceNormalization and GroupNormalization
 * (per-group and per-channel parameters), LpPool, Einsum, Attention, in float and double, over random
 * shapes; and the multi-threaded paths against the single-threaded ones; GlobalMaxPool's
 * ties and NaN; Attention's fully masked queries; RotaryEmbedding's position ids. */
#include "../core/shape_nn.h"
#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static int64_t irand(int64_t lo, int64_t hi) { return lo + (int64_t)(next() % (uint64_t)(hi - lo + 1)); }
static double frand(void) { return (double)(next() >> 11) / 9007199254740992.0 * 2 - 1; }

static pd_tensor make(pd_dtype t, int nd, const int64_t *shape, bool random) {
    pd_tensor x = {t, nd, {0}, NULL};
    for (int d = 0; d < nd; d++) x.shape[d] = shape[d];
    int64_t n = pd_tensor_numel(&x);
    x.data = calloc((size_t)(n ? n : 1), pd_dtype_size(t));
    if (random)
        for (int64_t i = 0; i < n; i++) pd__set_f(t, x.data, i, frand());
    return x;
}

static double at(const pd_tensor *t, int64_t i) { return pd__get_f(t->dtype, t->data, i); }

/* Max relative difference of y against a double reference. */
static double maxdiff(const pd_tensor *y, const double *ref) {
    double m = 0;
    for (int64_t i = 0; i < pd_tensor_numel(y); i++) {
        double d = fabs(at(y, i) - ref[i]) / (1 + fabs(ref[i]));
        if (!(d <= m)) m = d; /* NaN counts as a difference */
    }
    return m;
}

static double tol(pd_dtype t) { return t == PD_FLOAT ? 1e-4 : 1e-10; }

/* ---- nodes with attributes ---------------------------------------------------- */

typedef struct attrs {
    pd__attr a[10];
    int64_t v[10][16];
    int n;
} attrs;

static void a_ints(attrs *A, const char *name, int cnt, const int64_t *v) {
    pd__attr *a = &A->a[A->n];
    memset(a, 0, sizeof *a);
    a->name = (char *)name;
    a->type = PD_A_INTS;
    a->n = cnt;
    memcpy(A->v[A->n], v, sizeof(int64_t) * (size_t)cnt);
    a->ints = A->v[A->n++];
}

static void a_int(attrs *A, const char *name, int64_t v) {
    pd__attr *a = &A->a[A->n++];
    memset(a, 0, sizeof *a);
    a->name = (char *)name;
    a->type = PD_A_INT;
    a->i = v;
}

static void a_str(attrs *A, const char *name, const char *s) {
    pd__attr *a = &A->a[A->n++];
    memset(a, 0, sizeof *a);
    a->name = (char *)name;
    a->type = PD_A_STRING;
    a->s = (char *)s;
}

static pd__node node(pd_op op, int opset, int nin, int nout, attrs *A) {
    pd__node n;
    memset(&n, 0, sizeof n);
    n.name = "n";
    n.op_type = (char *)pd__ops[op].name;
    n.op = op;
    n.opset = opset;
    n.nin = nin;
    n.nout = nout;
    n.nattr = A ? A->n : 0;
    n.attr = A ? A->a : NULL;
    return n;
}

/* Odometer: false after the last index. */
static bool odo(int64_t *idx, const int64_t *dims, int n) {
    for (int i = n - 1; i >= 0; i--) {
        if (++idx[i] < dims[i]) return true;
        idx[i] = 0;
    }
    return false;
}

static int64_t flat(int n, const int64_t *idx, const int64_t *dims) {
    int64_t f = 0;
    for (int i = 0; i < n; i++) f = f * dims[i] + idx[i];
    return f;
}

/* Random window attributes for ns spatial dims; pads may be set by auto_pad. */
static void random_window(attrs *A, int ns, bool pool, bool convt) {
    int64_t s[6], d[6], p[12];
    for (int i = 0; i < ns; i++) {
        s[i] = irand(1, 3);
        d[i] = (pool && irand(0, 1)) ? 1 : irand(1, 2);
        p[i] = irand(0, 2);
        p[ns + i] = irand(0, 2);
    }
    a_ints(A, "strides", ns, s);
    a_ints(A, "dilations", ns, d);
    int ap = (int)irand(0, 5);
    if (ap == 1) a_str(A, "auto_pad", "SAME_UPPER");
    else if (ap == 2) a_str(A, "auto_pad", "SAME_LOWER");
    else if (ap == 3 && !convt) a_str(A, "auto_pad", "VALID");
    else a_ints(A, "pads", 2 * ns, p);
}

/* ---- Conv, ConvTranspose --------------------------------------------------------- */

static void conv_ref(const pd__win *w, int64_t group, const pd_tensor *X, const pd_tensor *W, const pd_tensor *B,
                     double *ref) {
    int ns = w->nsp;
    int64_t N = X->shape[0], C = X->shape[1], M = W->shape[0], Cg = C / group, Mg = M / group;
    int64_t IN = 1, K = 1, i = 0;
    for (int j = 0; j < ns; j++) IN *= w->in[j], K *= w->k[j];
    for (int64_t n = 0; n < N; n++)
        for (int64_t m = 0; m < M; m++) {
            int64_t o[6] = {0};
            do {
                double acc = B ? at(B, m) : 0;
                for (int64_t c = 0; c < Cg; c++) {
                    int64_t k[6] = {0}, cin = (m / Mg) * Cg + c;
                    do {
                        int64_t pos[6];
                        bool in = true;
                        for (int j = 0; j < ns; j++) {
                            pos[j] = o[j] * w->s[j] - w->pb[j] + k[j] * w->d[j];
                            in = in && pos[j] >= 0 && pos[j] < w->in[j];
                        }
                        if (in) acc += at(X, (n * C + cin) * IN + flat(ns, pos, w->in)) *
                                       at(W, (m * Cg + c) * K + flat(ns, k, w->k));
                    } while (odo(k, w->k, ns));
                }
                ref[i++] = acc;
            } while (odo(o, w->out, ns));
        }
}

/* ConvTranspose as a scatter: input position o adds X * W at o*s - pb + k*d. */
static void convt_ref(const pd__win *w, int64_t group, const pd_tensor *X, const pd_tensor *W, const pd_tensor *B,
                      int64_t M, double *ref) {
    int ns = w->nsp;
    int64_t N = X->shape[0], C = X->shape[1], Cg = C / group, Mg = M / group, IN = 1, OUT = 1, K = 1;
    for (int j = 0; j < ns; j++) IN *= w->in[j], OUT *= w->out[j], K *= w->k[j];
    for (int64_t i = 0; i < N * M * OUT; i++) ref[i] = B ? at(B, (i / OUT) % M) : 0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++) {
            int64_t o[6] = {0}, g = c / Cg;
            do {
                double xv = at(X, (n * C + c) * IN + flat(ns, o, w->in));
                int64_t k[6] = {0};
                do {
                    int64_t pos[6];
                    bool in = true;
                    for (int j = 0; j < ns; j++) {
                        pos[j] = o[j] * w->s[j] - w->pb[j] + k[j] * w->d[j];
                        in = in && pos[j] >= 0 && pos[j] < w->out[j];
                    }
                    if (!in) continue;
                    for (int64_t m = 0; m < Mg; m++)
                        ref[(n * M + g * Mg + m) * OUT + flat(ns, pos, w->out)] +=
                            xv * at(W, (c * Mg + m) * K + flat(ns, k, w->k));
                } while (odo(k, w->k, ns));
            } while (odo(o, w->in, ns));
        }
}

static void test_conv(pd__exec *x, bool transpose, pd_dtype t, int iter) {
    int ns = (int)irand(1, 3);
    int64_t group = irand(1, 3), Cg = irand(1, 5), Mg = irand(1, transpose ? 4 : 6), N = irand(1, 3);
    int64_t xs[8] = {N, group * Cg}, ws[8];
    if (transpose) ws[0] = group * Cg, ws[1] = Mg;
    else ws[0] = group * Mg, ws[1] = Cg;
    for (int i = 0; i < ns; i++) {
        ws[2 + i] = irand(1, 3);
        xs[2 + i] = irand(ns == 3 ? 3 : 4, ns == 1 ? 12 : 7);
    }
    attrs A = {0};
    a_int(&A, "group", group);
    random_window(&A, ns, false, transpose);
    if (transpose && irand(0, 2) == 0) {
        int64_t op[6];
        for (int i = 0; i < ns; i++) op[i] = irand(0, 1);
        a_ints(&A, "output_padding", ns, op);
    }
    pd__win w;
    if (pd__win_make(&(pd__node){.nattr = A.n, .attr = A.a}, transpose ? PD_WIN_CONVT : PD_WIN_CONV, ns + 2, xs,
                     ws + 2, &w) != PD_OK)
        return; /* a window larger than the input: the shape rule rejects it */
    bool bias = irand(0, 1);
    int64_t M = transpose ? Mg * group : ws[0];
    pd_tensor X = make(t, ns + 2, xs, true), W = make(t, ns + 2, ws, true), Bt = make(t, 1, &M, true);
    int64_t ys[8] = {N, M};
    for (int i = 0; i < ns; i++) ys[2 + i] = w.out[i];
    pd_tensor Y = make(t, ns + 2, ys, false);
    double *ref = malloc(sizeof(double) * (size_t)pd_tensor_numel(&Y));
    if (transpose) convt_ref(&w, group, &X, &W, bias ? &Bt : NULL, M, ref);
    else conv_ref(&w, group, &X, &W, bias ? &Bt : NULL, ref);
    pd__node n = node(transpose ? PD_OP_CONV_TRANSPOSE : PD_OP_CONV, 13, bias ? 3 : 2, 1, &A);
    pd_tensor *in[3] = {&X, &W, &Bt}, *out[1] = {&Y};
    pd_status st = pd__cpu_kernels[n.op](x, &n, in, out);
    double d = maxdiff(&Y, ref);
    char shp[64];
    pd__format_shape(shp, sizeof shp, ns + 2, xs);
    CHECK(st == PD_OK && d < tol(t), "%s %s #%d X %s group %lld: max rel diff %.3g", transpose ? "ConvTranspose" : "Conv",
          pd_dtype_name(t), iter, shp, (long long)group, d);
    free(ref);
    free(X.data), free(W.data), free(Bt.data), free(Y.data);
}

/* Conv with few output positions (nn_impl.h's FN(conv_few)), 3x3 taps with
 * pad 0 or 1, forward and backward in float32 against float64 sums written
 * out here. Two forms: one GEMM per group over a chunk of images' columns
 * (ResNet-18's 4x4 to 2x2 by stride 2; batches of more images than one
 * chunk holds: 2048 channels, 227 images a chunk at 4x4 to 2x2), and the
 * dense form where the input planes are as small as the live taps
 * (ResNet-18's 3x3 layers at 2x2, at 1x1 and from 2x2 to 1x1 by stride 2;
 * a 3x3 kernel over an unpadded 3x3 image, where W is the dense weights). */
static void test_conv_few_case(pd__exec *x, int64_t N, int64_t C, int64_t M, int64_t group, int64_t H, int64_t Wd,
                               int64_t stride, int64_t pad) {
    int64_t Cg = C / group, Mg = M / group, OH = (H + 2 * pad - 3) / stride + 1, OW = (Wd + 2 * pad - 3) / stride + 1;
    int64_t xs[4] = {N, C, H, Wd}, ws[4] = {M, Cg, 3, 3}, ys[4] = {N, M, OH, OW};
    pd_tensor X = make(PD_FLOAT, 4, xs, true), W = make(PD_FLOAT, 4, ws, true), B = make(PD_FLOAT, 1, &M, true);
    pd_tensor Y = make(PD_FLOAT, 4, ys, false), dY = make(PD_FLOAT, 4, ys, true);
    pd_tensor dX = make(PD_FLOAT, 4, xs, false), dW = make(PD_FLOAT, 4, ws, false), dB = make(PD_FLOAT, 1, &M, false);
    int64_t ny = N * M * OH * OW, nx = N * C * H * Wd, nw = M * Cg * 9;
    double *ry = calloc((size_t)ny, sizeof(double)), *rx = calloc((size_t)nx, sizeof(double));
    double *rw = calloc((size_t)nw, sizeof(double)), *rb = calloc((size_t)M, sizeof(double));
    for (int64_t n = 0; n < N; n++)
        for (int64_t m = 0; m < M; m++)
            for (int64_t o = 0; o < OH * OW; o++) {
                int64_t yi = (n * M + m) * OH * OW + o;
                double acc = at(&B, m), g = at(&dY, yi);
                rb[m] += g;
                for (int64_t c = 0; c < Cg; c++)
                    for (int64_t k = 0; k < 9; k++) {
                        int64_t h = o / OW * stride - pad + k / 3, v = o % OW * stride - pad + k % 3;
                        if (h < 0 || h >= H || v < 0 || v >= Wd) continue;
                        int64_t xi = ((n * C + m / Mg * Cg + c) * H + h) * Wd + v, wi = (m * Cg + c) * 9 + k;
                        acc += at(&X, xi) * at(&W, wi);
                        rx[xi] += g * at(&W, wi);
                        rw[wi] += g * at(&X, xi);
                    }
                ry[yi] = acc;
            }
    attrs A = {0};
    int64_t pads[4] = {pad, pad, pad, pad}, st[2] = {stride, stride};
    a_ints(&A, "pads", 4, pads);
    a_ints(&A, "strides", 2, st);
    a_int(&A, "group", group);
    pd__node nd = node(PD_OP_CONV, 11, 3, 1, &A);
    pd_tensor *in[3] = {&X, &W, &B}, *out[1] = {&Y}, *dout[1] = {&dY}, *din[3] = {&dX, &dW, &dB};
    bool ok = pd__cpu_kernels[nd.op](x, &nd, in, out) == PD_OK &&
              pd__cpu_grads[nd.op](x, &nd, in, out, dout, din) == PD_OK;
    double dy = maxdiff(&Y, ry), dx = maxdiff(&dX, rx), dw = maxdiff(&dW, rw), db = maxdiff(&dB, rb);
    CHECK(ok && dy < 1e-4 && dx < 1e-4 && dw < 1e-4 && db < 1e-4,
          "Conv with few outputs: X [%lld,%lld,%lld,%lld] M %lld group %lld stride %lld pad %lld, %d threads: max rel "
          "diff Y %.3g "
          "dX %.3g dW %.3g dB %.3g",
          (long long)N, (long long)C, (long long)H, (long long)Wd, (long long)M, (long long)group, (long long)stride,
          (long long)pad, x->threads, dy, dx, dw, db);
    free(ry), free(rx), free(rw), free(rb);
    free(X.data), free(W.data), free(B.data), free(Y.data), free(dY.data), free(dX.data), free(dW.data), free(dB.data);
}

static void test_conv_few(void) {
    for (int threads = 1; threads <= 4; threads += 3) {
        pd__exec x = {.threads = threads};
        /* columns */
        test_conv_few_case(&x, 5, 32, 64, 1, 4, 4, 2, 1); /* 4x4 -> 2x2 by stride 2: 16 positions, 9 taps */
        test_conv_few_case(&x, 3, 40, 24, 2, 4, 2, 2, 1); /* 4x2 -> 2x1, two groups */
        /* the dense form */
        test_conv_few_case(&x, 6, 64, 48, 1, 1, 1, 1, 1); /* 3x3 at 1x1: only the middle tap inside */
        test_conv_few_case(&x, 5, 32, 64, 1, 2, 2, 2, 1); /* 2x2 -> 1x1 by stride 2 */
        test_conv_few_case(&x, 3, 40, 24, 2, 2, 2, 1, 1); /* 2x2, two groups */
        test_conv_few_case(&x, 7, 24, 40, 1, 2, 4, 1, 1); /* 2x4, 8 of the taps' 9 pairs in each row */
        test_conv_few_case(&x, 4, 36, 20, 2, 3, 3, 1, 0); /* 3x3 over 3x3 unpadded: W is the dense weights */
        if (threads == 1) {
            test_conv_few_case(&x, 300, 2048, 4, 2, 4, 4, 2, 1); /* columns, two chunks of images */
            test_conv_few_case(&x, 1000, 2048, 4, 2, 1, 1, 1, 1); /* dense, more images than a chunk would hold */
        }
        free(x.scratch);
    }
}

/* ---- pools ----------------------------------------------------------------------- */

static void test_pool(pd__exec *x, bool max, pd_dtype t, int iter) {
    int ns = (int)irand(1, 3);
    int64_t xs[8] = {irand(1, 2), irand(1, 3)}, ks[6];
    for (int i = 0; i < ns; i++) {
        xs[2 + i] = irand(3, ns == 1 ? 15 : 7);
        ks[i] = irand(1, 3);
    }
    attrs A = {0};
    a_ints(&A, "kernel_shape", ns, ks);
    random_window(&A, ns, true, false);
    bool ceil_mode = irand(0, 1), cip = irand(0, 1), so = max && irand(0, 1), idx = max && irand(0, 1);
    a_int(&A, "ceil_mode", ceil_mode);
    a_int(&A, max ? "storage_order" : "count_include_pad", max ? so : cip);
    pd__win w;
    if (pd__win_make(&(pd__node){.nattr = A.n, .attr = A.a}, PD_WIN_POOL, ns + 2, xs, NULL, &w) != PD_OK) return;
    /* ONNX requires pads smaller than the kernel: keep windows that see the input */
    for (int i = 0; i < ns; i++)
        if (w.pb[i] >= (w.k[i] - 1) * w.d[i] + 1 || w.pe[i] >= (w.k[i] - 1) * w.d[i] + 1) return;
    int64_t ys[8] = {xs[0], xs[1]}, IN = 1;
    for (int i = 0; i < ns; i++) ys[2 + i] = w.out[i], IN *= xs[2 + i];
    pd_tensor X = make(t, ns + 2, xs, true), Y = make(t, ns + 2, ys, false), I = make(PD_INT64, ns + 2, ys, false);
    int64_t ny = pd_tensor_numel(&Y), bad_idx = 0, j = 0;
    double *ref = malloc(sizeof(double) * (size_t)ny);
    int64_t *want = malloc(sizeof(int64_t) * (size_t)ny);
    for (int64_t nc = 0; nc < xs[0] * xs[1]; nc++) {
        int64_t o[6] = {0};
        do {
            double best = -INFINITY, sum = 0;
            int64_t cnt = 0, cntp = 0, bi = -1;
            int64_t k[6] = {0};
            do {
                int64_t pos[6];
                bool in = true, inp = true;
                for (int i = 0; i < ns; i++) {
                    pos[i] = o[i] * w.s[i] - w.pb[i] + k[i] * w.d[i];
                    in = in && pos[i] >= 0 && pos[i] < w.in[i];
                    inp = inp && pos[i] >= -w.pb[i] && pos[i] < w.in[i] + w.pe[i];
                }
                cntp += inp;
                if (!in) continue;
                int64_t off = flat(ns, pos, w.in);
                double v = at(&X, nc * IN + off);
                cnt++;
                sum += v;
                if (v > best) { /* the first maximum in window order */
                    best = v;
                    bi = off;
                    if (so) { /* column-major over the spatial dims */
                        bi = 0;
                        for (int i = ns - 1; i >= 0; i--) bi = bi * w.in[i] + pos[i];
                    }
                }
            } while (odo(k, w.k, ns));
            ref[j] = max ? best : sum / (double)(cip ? cntp : cnt);
            if (idx) want[j] = nc * IN + bi;
            j++;
        } while (odo(o, w.out, ns));
    }
    pd__node n = node(max ? PD_OP_MAX_POOL : PD_OP_AVERAGE_POOL, 19, 1, idx ? 2 : 1, &A);
    pd_tensor *in[1] = {&X}, *out[2] = {&Y, &I};
    pd_status st = pd__cpu_kernels[n.op](x, &n, in, out);
    double d = maxdiff(&Y, ref);
    for (int64_t q = 0; idx && q < ny; q++) bad_idx += ((int64_t *)I.data)[q] != want[q];
    char shp[64];
    pd__format_shape(shp, sizeof shp, ns + 2, xs);
    CHECK(st == PD_OK && d < tol(t) && bad_idx == 0, "%s %s #%d X %s ceil %d: max rel diff %.3g, %lld bad indices",
          max ? "MaxPool" : "AveragePool", pd_dtype_name(t), iter, shp, ceil_mode, d, (long long)bad_idx);
    free(ref);
    free(want);
    free(X.data), free(Y.data), free(I.data);
}

/* ---- MatMul, Softmax ---------------------------------------------------------------- */

static void test_matmul(pd__exec *x, pd_dtype t, int iter) {
    int ra = (int)irand(1, 4), rb = (int)irand(1, 4), nb = (ra > rb ? ra : rb) - 2;
    int64_t M = irand(1, 5), K = irand(1, 6), N = irand(1, 5), as[8], bs[8], bat[8];
    for (int i = 0; i < (nb > 0 ? nb : 0); i++) bat[i] = irand(1, 3);
    int na = ra > 2 ? ra - 2 : 0, nbb = rb > 2 ? rb - 2 : 0;
    for (int i = 0; i < na; i++) as[i] = irand(0, 2) ? bat[nb - na + i] : 1;
    for (int i = 0; i < nbb; i++) bs[i] = irand(0, 2) ? bat[nb - nbb + i] : 1;
    if (ra == 1) M = 1; /* a 1-D operand is a row (A) or a column (B) */
    if (rb == 1) N = 1;
    if (ra == 1) as[0] = K;
    else as[ra - 2] = M, as[ra - 1] = K;
    if (rb == 1) bs[0] = K;
    else bs[rb - 2] = K, bs[rb - 1] = N;
    pd_tensor A = make(t, ra, as, true), B = make(t, rb, bs, true);
    /* the output shape and the reference, broadcasting by hand */
    int64_t ob[8], ys[8];
    int yn = 0;
    for (int i = 0; i < (nb > 0 ? nb : 0); i++) {
        int ia = i - (nb - na), ib = i - (nb - nbb);
        int64_t da = ia >= 0 ? as[ia] : 1, db = ib >= 0 ? bs[ib] : 1;
        ob[i] = da > db ? da : db;
        ys[yn++] = ob[i];
    }
    if (ra > 1) ys[yn++] = M;
    if (rb > 1) ys[yn++] = N;
    pd_tensor Y = make(t, yn, ys, false);
    int64_t ny = pd_tensor_numel(&Y), nbt = ny / (M * N), q = 0;
    double *ref = malloc(sizeof(double) * (size_t)ny);
    int64_t idx[8] = {0};
    for (int64_t bq = 0; bq < nbt; bq++) {
        int64_t oa = 0, obb = 0;
        for (int i = 0; i < (nb > 0 ? nb : 0); i++) {
            int ia = i - (nb - na), ib = i - (nb - nbb);
            if (ia >= 0) oa = oa * as[ia] + (as[ia] == 1 ? 0 : idx[i]);
            if (ib >= 0) obb = obb * bs[ib] + (bs[ib] == 1 ? 0 : idx[i]);
        }
        for (int64_t m = 0; m < M; m++)
            for (int64_t nn = 0; nn < N; nn++) {
                double acc = 0;
                for (int64_t k = 0; k < K; k++) acc += at(&A, (oa * M + m) * K + k) * at(&B, (obb * K + k) * N + nn);
                ref[q++] = acc;
            }
        if (nb > 0) odo(idx, ob, nb);
    }
    pd__node n = node(PD_OP_MATMUL, 13, 2, 1, NULL);
    pd_tensor *in[2] = {&A, &B}, *out[1] = {&Y};
    pd_status st = pd__cpu_MatMul(x, &n, in, out);
    double d = maxdiff(&Y, ref);
    char sa[64], sb[64];
    pd__format_shape(sa, sizeof sa, ra, as);
    pd__format_shape(sb, sizeof sb, rb, bs);
    CHECK(st == PD_OK && d < tol(t), "MatMul %s #%d %s x %s: max rel diff %.3g", pd_dtype_name(t), iter, sa, sb, d);
    free(ref);
    free(A.data), free(B.data), free(Y.data);
}

static void test_softmax(pd__exec *x, bool lg, pd_dtype t, int iter) {
    int nd = (int)irand(1, 4), opset = irand(0, 1) ? 13 : 11;
    int64_t xs[8];
    for (int i = 0; i < nd; i++) xs[i] = irand(1, 6);
    int axis = (int)irand(0, nd - 1);
    attrs A = {0};
    a_int(&A, "axis", axis - (irand(0, 1) ? nd : 0));
    pd_tensor X = make(t, nd, xs, true), Y = make(t, nd, xs, false);
    for (int64_t i = 0; i < pd_tensor_numel(&X); i++) pd__set_f(t, X.data, i, at(&X, i) * 20);
    int64_t outer = 1, len = 1, inner = 1, nx = pd_tensor_numel(&X);
    for (int i = 0; i < nd; i++) {
        if (i < axis) outer *= xs[i];
        else if (i == axis || opset < 13) len *= xs[i];
        else inner *= xs[i];
    }
    double *ref = malloc(sizeof(double) * (size_t)nx);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j < len; j++) mx = fmax(mx, at(&X, (o * len + j) * inner + i));
            for (int64_t j = 0; j < len; j++) sum += exp(at(&X, (o * len + j) * inner + i) - mx);
            for (int64_t j = 0; j < len; j++) {
                double v = at(&X, (o * len + j) * inner + i) - mx;
                ref[(o * len + j) * inner + i] = lg ? v - log(sum) : exp(v) / sum;
            }
        }
    pd__node n = node(lg ? PD_OP_LOG_SOFTMAX : PD_OP_SOFTMAX, opset, 1, 1, &A);
    pd_tensor *in[1] = {&X}, *out[1] = {&Y};
    pd_status st = pd__cpu_kernels[n.op](x, &n, in, out);
    double d = maxdiff(&Y, ref);
    char shp[64];
    pd__format_shape(shp, sizeof shp, nd, xs);
    CHECK(st == PD_OK && d < tol(t), "%s %s #%d opset %d X %s axis %d: max rel diff %.3g", lg ? "LogSoftmax" : "Softmax",
          pd_dtype_name(t), iter, opset, shp, axis, d);
    free(ref);
    free(X.data), free(Y.data);
}

/* InstanceNormalization and GroupNormalization (opset 18: scale and bias
 * per group; 21: per channel) against the textbook formula. */
static void test_group_norm(pd__exec *x, pd_dtype t, int iter) {
    int kind = (int)irand(0, 2), nd = (int)irand(kind ? 2 : 3, 5), opset = kind == 1 ? 18 : 21;
    int64_t G = kind ? irand(1, 4) : 0, xs[8] = {irand(1, 3), 0};
    xs[1] = kind ? G * irand(1, 3) : irand(1, 5);
    if (!kind) G = xs[1];
    for (int i = 2; i < nd; i++) xs[i] = irand(1, 5);
    int64_t N = xs[0], C = xs[1], S = 1, Cg = C / G, ps[1] = {kind == 1 ? G : C};
    for (int i = 2; i < nd; i++) S *= xs[i];
    attrs A = {0};
    if (kind) a_int(&A, "num_groups", G);
    pd_tensor X = make(t, nd, xs, true), Y = make(t, nd, xs, false), Sc = make(t, 1, ps, true),
              B = make(t, 1, ps, true);
    int64_t nx = pd_tensor_numel(&X);
    double *ref = malloc(sizeof(double) * (size_t)(nx ? nx : 1)), eps = 1e-5;
    for (int64_t r = 0; r < N * G; r++) {
        double m = 0, v = 0;
        for (int64_t i = 0; i < Cg * S; i++) m += at(&X, r * Cg * S + i);
        m /= (double)(Cg * S);
        for (int64_t i = 0; i < Cg * S; i++) v += (at(&X, r * Cg * S + i) - m) * (at(&X, r * Cg * S + i) - m);
        v /= (double)(Cg * S);
        for (int64_t i = 0; i < Cg * S; i++) {
            int64_t c = (r % G) * Cg + i / S, k = kind == 1 ? c / Cg : c;
            ref[r * Cg * S + i] = (at(&X, r * Cg * S + i) - m) / sqrt(v + eps) * at(&Sc, k) + at(&B, k);
        }
    }
    pd__node n = node(kind ? PD_OP_GROUP_NORM : PD_OP_INSTANCE_NORM, opset, 3, 1, &A);
    pd_tensor *in[3] = {&X, &Sc, &B}, *out[1] = {&Y};
    pd_status st = pd__cpu_kernels[n.op](x, &n, in, out);
    double d = maxdiff(&Y, ref);
    char shp[64];
    pd__format_shape(shp, sizeof shp, nd, xs);
    /* a row of a few values may have a tiny variance, which divides the rounding */
    CHECK(st == PD_OK && d < 100 * tol(t), "%s %s #%d opset %d X %s groups %lld: max rel diff %.3g", pd__ops[n.op].name,
          pd_dtype_name(t), iter, opset, shp, (long long)G, d);
    free(ref);
    free(X.data), free(Y.data), free(Sc.data), free(B.data);
}

/* GlobalMaxPool: ties and NaN, which finite differences cannot see: the
 * gradient goes to the first maximum of a plane, a NaN wins the max. */
static void test_global_maxpool(pd__exec *x) {
    int64_t xs[3] = {1, 3, 4}, ys[3] = {1, 3, 1};
    pd_tensor X = make(PD_DOUBLE, 3, xs, false), Y = make(PD_DOUBLE, 3, ys, false), dY = make(PD_DOUBLE, 3, ys, false),
              dX = make(PD_DOUBLE, 3, xs, false);
    static const double v[12] = {1, 5, 5, 2, -3, -1, -1, -2, 0, NAN, 7, 1};
    for (int i = 0; i < 12; i++) pd__set_f(PD_DOUBLE, X.data, i, v[i]);
    for (int i = 0; i < 3; i++) pd__set_f(PD_DOUBLE, dY.data, i, i + 1);
    pd__node n = node(PD_OP_GLOBAL_MAX_POOL, 1, 1, 1, NULL);
    pd_tensor *in[1] = {&X}, *out[1] = {&Y}, *dout[1] = {&dY}, *din[1] = {&dX};
    bool ok = pd__cpu_kernels[n.op](x, &n, in, out) == PD_OK &&
              pd__cpu_grads[n.op](x, &n, in, out, dout, din) == PD_OK;
    static const double wy[2] = {5, -1}, wd[12] = {0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0};
    bool good = ok && at(&Y, 0) == wy[0] && at(&Y, 1) == wy[1] && isnan(at(&Y, 2));
    for (int i = 0; i < 12; i++) good = good && at(&dX, i) == wd[i];
    CHECK(good, "GlobalMaxPool: first maximum takes the gradient, NaN propagates");
    free(X.data), free(Y.data), free(dY.data), free(dX.data);
}

/* LpPool (p 1 to 3) against the textbook sum over each window's taps. */
static void test_lppool(pd__exec *x, pd_dtype t, int iter) {
    int ns = (int)irand(1, 3);
    int64_t xs[8] = {irand(1, 2), irand(1, 3)}, p = irand(1, 3);
    int64_t ks[8];
    for (int i = 0; i < ns; i++) xs[2 + i] = irand(3, 6), ks[i] = irand(1, 3);
    attrs A = {0};
    a_ints(&A, "kernel_shape", ns, ks);
    random_window(&A, ns, true, false);
    a_int(&A, "p", p);
    pd__win w;
    if (pd__win_make(&(pd__node){.nattr = A.n, .attr = A.a}, PD_WIN_POOL, ns + 2, xs, NULL, &w) != PD_OK) return;
    int64_t ys[8] = {xs[0], xs[1]};
    for (int i = 0; i < ns; i++) ys[2 + i] = w.out[i];
    pd_tensor X = make(t, ns + 2, xs, true), Y = make(t, ns + 2, ys, false);
    int64_t ny = pd_tensor_numel(&Y), IN = 1, OUT = 1, K = 1;
    for (int i = 0; i < ns; i++) IN *= w.in[i], OUT *= w.out[i], K *= w.k[i];
    double *ref = malloc(sizeof(double) * (size_t)ny);
    for (int64_t nc = 0; nc < xs[0] * xs[1]; nc++)
        for (int64_t o = 0; o < OUT; o++) {
            int64_t oi[8], ki[8];
            for (int64_t f = o, i = ns - 1; i >= 0; i--) oi[i] = f % w.out[i], f /= w.out[i];
            double acc = 0;
            for (int64_t k = 0; k < K; k++) {
                for (int64_t f = k, i = ns - 1; i >= 0; i--) ki[i] = f % w.k[i], f /= w.k[i];
                int64_t off = 0;
                bool in = true;
                for (int i = 0; i < ns; i++) {
                    int64_t pos = oi[i] * w.s[i] - w.pb[i] + ki[i] * w.d[i];
                    in = in && pos >= 0 && pos < w.in[i];
                    off = off * w.in[i] + pos;
                }
                if (in) acc += pow(fabs(at(&X, nc * IN + off)), (double)p);
            }
            ref[nc * OUT + o] = pow(acc, 1.0 / (double)p);
        }
    pd__node n = node(PD_OP_LP_POOL, 18, 1, 1, &A);
    pd_tensor *in[1] = {&X}, *out[1] = {&Y};
    pd_status st = pd__cpu_kernels[n.op](x, &n, in, out);
    double d = maxdiff(&Y, ref);
    char shp[64];
    pd__format_shape(shp, sizeof shp, ns + 2, xs);
    CHECK(st == PD_OK && d < tol(t), "LpPool %s #%d X %s p %lld: max rel diff %.3g", pd_dtype_name(t), iter, shp,
          (long long)p, d);
    free(ref);
    free(X.data), free(Y.data);
}

/* Einsum (batched matrix products, or transposes and sums of one operand)
 * against the sum over every letter's values. */
static void test_einsum(pd__exec *x, pd_dtype t, int iter) {
    /* letters by role: batch, M (A only), N (B only), K (summed) */
    static const char pool[] = "abcdefghijXYZ";
    int cnt[4] = {(int)irand(0, 2), (int)irand(0, 2), (int)irand(0, 2), (int)irand(0, 2)};
    bool one = irand(0, 3) == 0; /* one operand: a transpose and sum of A */
    if (one) cnt[0] = cnt[2] = 0;
    char let[4][3];
    int64_t lsz[128] = {0};
    int used = 0, start = (int)irand(0, 5);
    for (int r = 0; r < 4; r++)
        for (int i = 0; i < cnt[r]; i++) {
            let[r][i] = pool[(start + used++) % 13];
            lsz[(int)let[r][i]] = irand(1, 3);
        }
    char ea[8] = {0}, eb[8] = {0}, eo[8] = {0};
    int na = 0, nb = 0, no = 0;
    static const int ra[3] = {0, 1, 3}, rb[3] = {0, 3, 2}, ro[3] = {0, 1, 2};
    for (int j = 0; j < 3; j++) {
        for (int i = 0; i < cnt[ra[j]]; i++) ea[na++] = let[ra[j]][i];
        for (int i = 0; i < cnt[rb[j]]; i++) eb[nb++] = let[rb[j]][i];
        for (int i = 0; i < cnt[ro[j]]; i++) eo[no++] = let[ro[j]][i];
    }
    char *sh[3] = {ea, eb, eo};
    int ln[3] = {na, nb, no};
    for (int k = 0; k < 3; k++) /* shuffled */
        for (int i = ln[k] - 1; i > 0; i--) {
            int j = (int)irand(0, i);
            char t = sh[k][i];
            sh[k][i] = sh[k][j];
            sh[k][j] = t;
        }
    bool implicit = cnt[0] == 0 && (!one || cnt[3] == 0) && irand(0, 2) == 0;
    char eq[40];
    if (one) snprintf(eq, sizeof eq, implicit ? "%s" : "%s -> %s", ea, eo);
    else if (implicit) snprintf(eq, sizeof eq, "%s,%s", ea, eb);
    else snprintf(eq, sizeof eq, "%s, %s -> %s", ea, eb, eo);
    int64_t as[8], bs[8];
    for (int i = 0; i < na; i++) as[i] = lsz[(int)ea[i]];
    for (int i = 0; i < nb; i++) bs[i] = lsz[(int)eb[i]];
    attrs A = {0};
    pd__attr *ae = &A.a[A.n++];
    memset(ae, 0, sizeof *ae);
    ae->name = "equation";
    ae->type = PD_A_STRING;
    ae->s = eq;
    pd__node n = node(PD_OP_EINSUM, 12, one ? 1 : 2, 1, &A);
    pd__ein e;
    bool planned = pd__einsum_plan(&n, one ? 1 : 2, na, as, nb, bs, &e) == PD_OK;
    CHECK(planned, "Einsum '%s' is planned", eq);
    if (!planned) return;
    pd_tensor X = make(t, na, as, true), W = make(t, nb, bs, !one), Y = make(t, e.ro, e.out, false);
    if (one) /* B stands for the summed letters: ones */
        for (int64_t i = 0; i < pd_tensor_numel(&W); i++) pd__set_f(t, W.data, i, 1);
    /* the output's letters: the explicit ones, or those of the plan's order */
    char lo[8] = {0};
    if (implicit) {
        int k = 0;
        for (int ch = 'A'; ch <= 'z'; ch++)
            if ((strchr(ea, ch) != NULL) != (!one && strchr(eb, ch) != NULL) && ch != 0) lo[k++] = (char)ch;
    } else {
        memcpy(lo, eo, sizeof lo);
    }
    char all[16] = {0};
    int nl = 0;
    int64_t dims[16], idx[16] = {0}, val[128] = {0};
    for (const char *p = ea; *p; p++) all[nl] = *p, dims[nl++] = lsz[(int)*p];
    for (const char *p = eb; *p; p++)
        if (!strchr(ea, *p)) all[nl] = *p, dims[nl++] = lsz[(int)*p];
    int64_t ny = pd_tensor_numel(&Y), total = 1;
    for (int i = 0; i < nl; i++) total *= dims[i];
    double *ref = calloc((size_t)(ny ? ny : 1), sizeof(double));
    for (int64_t q = 0; q < total; q++) {
        for (int i = 0; i < nl; i++) val[(int)all[i]] = idx[i];
        int64_t oa = 0, ob = 0, oo = 0;
        for (int i = 0; i < na; i++) oa = oa * as[i] + val[(int)ea[i]];
        for (int i = 0; i < nb; i++) ob = ob * bs[i] + val[(int)eb[i]];
        for (int i = 0; i < e.ro; i++) oo = oo * e.out[i] + val[(int)lo[i]];
        ref[oo] += at(&X, oa) * at(&W, ob);
        odo(idx, dims, nl);
    }
    pd_tensor *in[2] = {&X, &W}, *out[1] = {&Y};
    pd_status st = pd__cpu_kernels[n.op](x, &n, in, out);
    double d = maxdiff(&Y, ref);
    CHECK(st == PD_OK && d < tol(t), "Einsum %s #%d '%s': max rel diff %.3g", pd_dtype_name(t), iter, eq, d);
    free(ref);
    free(X.data), free(W.data), free(Y.data);
}

/* ---- Bernoulli, RandomUniformLike ---- */

/* a_flt is below, with Attention's tests */
static void a_flt(attrs *A, const char *name, float v);

/* The draws' distributions over 40000 elements: Bernoulli(p) means p per
 * element (p from 0 to 1 across the tensor, so the sum's variance is known),
 * uniform's mean (lo + hi) / 2 and variance (hi - lo)^2 / 12, each within 4
 * standard errors; a seed gives the same draw twice, no seed and another
 * seed a different one; values 0 / 1 and within [lo, hi). */
static void test_random(pd__exec *x) {
    enum { N = 40000 };
    int64_t s[2] = {200, 200};
    pd_tensor P = make(PD_FLOAT, 2, s, false), Y = make(PD_DOUBLE, 2, s, false), Y2 = make(PD_DOUBLE, 2, s, false);
    double mean = 0, var = 0;
    for (int64_t i = 0; i < N; i++) {
        double p = (double)(i % 101) / 100;
        pd__set_f(PD_FLOAT, P.data, i, p);
        mean += (float)p, var += (float)p * (1 - (float)p);
    }
    for (int seeded = 0; seeded < 2; seeded++) {
        attrs A = {0};
        a_int(&A, "dtype", PD_DOUBLE);
        if (seeded) a_flt(&A, "seed", 7);
        pd__node n = node(PD_OP_BERNOULLI, 22, 1, 1, &A);
        pd_tensor *in[1] = {&P}, *out[1] = {&Y}, *out2[1] = {&Y2};
        bool ok = pd__cpu_kernels[n.op](x, &n, in, out) == PD_OK && pd__cpu_kernels[n.op](x, &n, in, out2) == PD_OK;
        double sum = 0;
        bool binary = true, same = true;
        for (int64_t i = 0; i < N; i++) {
            double v = at(&Y, i);
            binary = binary && (v == 0 || v == 1) && (i % 101 != 0 || v == 0) && (i % 101 != 100 || v == 1);
            same = same && v == at(&Y2, i);
            sum += v;
        }
        double z = (sum - mean) / sqrt(var);
        CHECK(ok && binary && fabs(z) < 4 && same,
              "Bernoulli%s: 0 or 1 (p 0 always 0, p 1 always 1), sum %.0f for expected %.1f (%.2f standard errors), "
              "two runs alike",
              seeded ? " seed 7" : "", sum, mean, z);
    }
    for (int seeded = 0; seeded < 3; seeded++) {
        attrs A = {0};
        double lo = -2, hi = 3;
        a_flt(&A, "low", (float)lo);
        a_flt(&A, "high", (float)hi);
        a_int(&A, "dtype", PD_DOUBLE);
        if (seeded) a_flt(&A, "seed", seeded == 1 ? 7.0f : 8.0f);
        pd__node n = node(PD_OP_RANDOM_UNIFORM_LIKE, 22, 1, 1, &A);
        pd_tensor *in[1] = {&P}, *out[1] = {&Y};
        /* Y2 holds the last draw of the loop before: seed 7 against no seed, seed 8 against seed 7 */
        if (seeded == 0) memset(Y2.data, 0, sizeof(double) * N);
        bool ok = pd__cpu_kernels[n.op](x, &n, in, out) == PD_OK;
        double m = 0, m2 = 0;
        bool range = true;
        int64_t differ = 0;
        for (int64_t i = 0; i < N; i++) {
            double v = at(&Y, i);
            range = range && v >= lo && v < hi;
            m += v, m2 += v * v;
            differ += v != at(&Y2, i);
        }
        m /= N, m2 = m2 / N - m * m;
        double w = hi - lo, zm = (m - (lo + hi) / 2) / (w / sqrt(12.0 * N));
        double zv = (m2 - w * w / 12) / (w * w * sqrt(1.0 / 180 / N)); /* var of (u - mean)^2: w^4 / 180 */
        CHECK(ok && range && fabs(zm) < 4 && fabs(zv) < 4 && (seeded == 0 || differ > N / 2),
              "RandomUniformLike [-2, 3)%s: within range, mean %.4f (%.2f standard errors), variance %.4f (%.2f), "
              "%lld of %d values unlike the previous draw",
              seeded == 1 ? " seed 7" : seeded == 2 ? " seed 8" : "", m, zm, m2, zv, (long long)differ, (int)N);
        memcpy(Y2.data, Y.data, sizeof(double) * N);
    }
    { /* seed 7 twice: the same draw */
        attrs A = {0};
        a_flt(&A, "seed", 7);
        a_int(&A, "dtype", PD_DOUBLE);
        pd__node n = node(PD_OP_RANDOM_UNIFORM_LIKE, 22, 1, 1, &A);
        pd_tensor *in[1] = {&P}, *out[1] = {&Y}, *out2[1] = {&Y2};
        bool ok = pd__cpu_kernels[n.op](x, &n, in, out) == PD_OK && pd__cpu_kernels[n.op](x, &n, in, out2) == PD_OK;
        ok = ok && memcmp(Y.data, Y2.data, sizeof(double) * N) == 0;
        CHECK(ok, "RandomUniformLike seed 7: two runs give the same draw");
    }
    free(P.data), free(Y.data), free(Y2.data);
}

/* ---- Attention, RotaryEmbedding ---- */

static void a_flt(attrs *A, const char *name, float v) {
    pd__attr *a = &A->a[A->n++];
    memset(a, 0, sizeof *a);
    a->name = (char *)name;
    a->type = PD_A_FLOAT;
    a->f = v;
}

/* Attention against the formula, element by element in double: 3-D and
 * 4-D, grouped-query heads, past keys and values, bool and float masks
 * broadcast and shorter than the keys, causal, scale, softcap,
 * nonpad_kv_seqlen. */
static void test_attention(pd__exec *x, pd_dtype t, int it) {
    int64_t B = irand(1, 2), Hk = irand(1, 3), Hq = Hk * irand(1, 3), Sq = irand(1, 5), Skv = irand(1, 5);
    int64_t Dh = irand(1, 6), Dv = irand(1, 6), P = irand(0, 1) ? irand(1, 3) : 0, T = P + Skv;
    bool three = irand(0, 1), causal = irand(0, 2) == 0;
    int mk = (int)irand(0, 2), mn = (int)irand(2, 4);
    double scale = irand(0, 1) ? 1 / sqrt((double)Dh) : 0.75, cap = irand(0, 2) == 0 ? 2.5 : 0;
    int64_t q4[4] = {B, Hq, Sq, Dh}, k4[4] = {B, Hk, Skv, Dh}, v4[4] = {B, Hk, Skv, Dv};
    int64_t q3[3] = {B, Sq, Hq * Dh}, k3[3] = {B, Skv, Hk * Dh}, v3[3] = {B, Skv, Hk * Dv};
    int64_t pks[4] = {B, Hk, P, Dh}, pvs[4] = {B, Hk, P, Dv}, ys3[3] = {B, Sq, Hq * Dv}, ys4[4] = {B, Hq, Sq, Dv};
    int64_t full[4] = {B, Hq, Sq, irand(1, T)}, ms[4], m4[4] = {1, 1, 1, 1};
    for (int i = 0; i < mn; i++) ms[i] = full[4 - mn + i] > 1 && i < mn - 1 && irand(0, 2) == 0 ? 1 : full[4 - mn + i];
    for (int i = 0; i < mn; i++) m4[4 - mn + i] = ms[i];
    int nd = three ? 3 : 4;
    pd_tensor Q = make(t, nd, three ? q3 : q4, true), K = make(t, nd, three ? k3 : k4, true);
    pd_tensor V = make(t, nd, three ? v3 : v4, true), PK = make(t, 4, pks, true), PV = make(t, 4, pvs, true);
    pd_tensor M = make(mk == 1 ? PD_BOOL : t, mn, ms, mk == 2);
    int64_t nm = pd_tensor_numel(&M), lm = ms[mn - 1];
    if (mk == 1)
        for (int64_t i = 0; i < nm; i++) ((uint8_t *)M.data)[i] = i % lm == 0 || irand(0, 2) != 0;
    int64_t os[4] = {B, Hk, T, Dh}, ovs[4] = {B, Hk, T, Dv}, qks[4] = {B, Hq, Sq, T};
    pd_tensor Y = make(t, nd, three ? ys3 : ys4, false), OK_ = make(t, 4, os, false), OV = make(t, 4, ovs, false);
    pd_tensor QK = make(t, 4, qks, false);
    attrs A = {0};
    a_int(&A, "q_num_heads", Hq);
    a_int(&A, "kv_num_heads", Hk);
    a_int(&A, "is_causal", causal);
    a_flt(&A, "scale", (float)scale);
    a_flt(&A, "softcap", (float)cap);
    scale = (float)scale;
    /* nonpad_kv_seqlen (opset 24): at least one key per query */
    bool kvl = irand(0, 3) == 0;
    int64_t kv[2], bs = B, lo = causal && !P ? (Sq < T ? Sq : T) : 1;
    for (int64_t b = 0; b < B; b++) kv[b] = irand(lo, T);
    pd_tensor KL = {PD_INT64, 1, {bs}, kv};
    pd__node n = node(PD_OP_ATTENTION, kvl ? 24 : 23, kvl ? 7 : P ? 6 : 4, 4, &A);
    pd_tensor *in[7] = {&Q, &K, &V, mk ? &M : NULL, P ? &PK : NULL, P ? &PV : NULL, &KL};
    pd_tensor *out[4] = {&Y, &OK_, &OV, &QK};
    pd_status st = pd__cpu_kernels[n.op](x, &n, in, out);
    double *ry = calloc((size_t)pd_tensor_numel(&Y), sizeof(double));
    double *rq = calloc((size_t)(B * Hq * Sq * T), sizeof(double));
    double *s = calloc((size_t)T, sizeof(double));
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hq; h++)
            for (int64_t i = 0; i < Sq; i++) {
                int64_t kl = kvl ? kv[b] : T, off = kvl && !P ? kl - Sq : P;
                int64_t hk = h / (Hq / Hk), qo = three ? (b * Sq + i) * Hq * Dh + h * Dh : ((b * Hq + h) * Sq + i) * Dh;
                double mx = -INFINITY, sum = 0;
                for (int64_t j = 0; j < T; j++) {
                    double d = 0;
                    for (int64_t e = 0; e < Dh; e++) {
                        int64_t s2 = j - P;
                        double kv = j < P ? at(&PK, ((b * Hk + hk) * P + j) * Dh + e)
                                          : at(&K, three ? (b * Skv + s2) * Hk * Dh + hk * Dh + e
                                                         : ((b * Hk + hk) * Skv + s2) * Dh + e);
                        d += at(&Q, qo + e) * kv;
                    }
                    d *= scale;
                    if (cap > 0) d = cap * tanh(d / cap);
                    rq[((b * Hq + h) * Sq + i) * T + j] = d;
                    int64_t mo = (m4[0] > 1 ? b : 0) * m4[1] * m4[2] * m4[3] + (m4[1] > 1 ? h : 0) * m4[2] * m4[3] +
                                 (m4[2] > 1 ? i : 0) * m4[3] + j;
                    if (mk && j >= lm) d = -INFINITY;
                    else if (mk == 1 && !((uint8_t *)M.data)[mo]) d = -INFINITY;
                    else if (mk == 2) d += at(&M, mo);
                    if ((causal && j > i + off) || j >= kl) d = -INFINITY;
                    s[j] = d;
                    mx = fmax(mx, d);
                }
                for (int64_t j = 0; j < T; j++) sum += s[j] = exp(s[j] - mx);
                for (int64_t e = 0; e < Dv; e++) {
                    double acc = 0;
                    for (int64_t j = 0; j < T; j++) {
                        int64_t s2 = j - P;
                        acc += s[j] / sum *
                               (j < P ? at(&PV, ((b * Hk + hk) * P + j) * Dv + e)
                                      : at(&V, three ? (b * Skv + s2) * Hk * Dv + hk * Dv + e
                                                     : ((b * Hk + hk) * Skv + s2) * Dv + e));
                    }
                    ry[three ? (b * Sq + i) * Hq * Dv + h * Dv + e : ((b * Hq + h) * Sq + i) * Dv + e] = acc;
                }
            }
    double dy = maxdiff(&Y, ry), dq = maxdiff(&QK, rq);
    CHECK(st == PD_OK && dy <= tol(t) && dq <= tol(t),
          "Attention #%d %s %s Q [%lld,%lld,%lld,%lld] Hk %lld Skv %lld Dv %lld past %lld mask %d/%d causal %d "
          "softcap %g nonpad_kv_seqlen %d: max diff %.3g (scores %.3g)",
          it, pd_dtype_name(t), three ? "3-D" : "4-D", (long long)B, (long long)Hq, (long long)Sq, (long long)Dh,
          (long long)Hk, (long long)Skv, (long long)Dv, (long long)P, mk, mn, causal, cap, kvl, dy, dq);
    free(ry), free(rq), free(s);
    pd_tensor *all[] = {&Q, &K, &V, &PK, &PV, &M, &Y, &OK_, &OV, &QK};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]->data);
}

/* What the differences cannot see: a query with every key masked gives NaN
 * (as ONNX's reference), and a position id outside RotaryEmbedding's
 * caches is an error, not a read out of bounds. */
static void test_attention_edges(pd__exec *x) {
    int64_t s4[4] = {1, 1, 2, 2}, ms[2] = {2, 2};
    pd_tensor Q = make(PD_FLOAT, 4, s4, true), K = make(PD_FLOAT, 4, s4, true), V = make(PD_FLOAT, 4, s4, true);
    pd_tensor M = make(PD_BOOL, 2, ms, false), Y = make(PD_FLOAT, 4, s4, false);
    ((uint8_t *)M.data)[0] = 1; /* query 0 sees key 0, query 1 none */
    pd__node n = node(PD_OP_ATTENTION, 23, 4, 1, NULL);
    pd_tensor *in[4] = {&Q, &K, &V, &M}, *out[1] = {&Y};
    pd_status st = pd__cpu_kernels[n.op](x, &n, in, out);
    const float *y = Y.data;
    CHECK(st == PD_OK && y[0] == ((float *)V.data)[0] && y[1] == ((float *)V.data)[1] && isnan(y[2]) && isnan(y[3]),
          "Attention: a query with every key masked is NaN, one with one key gets its value (%g %g %g %g)", y[0], y[1],
          y[2], y[3]);
    int64_t xs[4] = {1, 1, 2, 2}, cs[2] = {3, 1}, ps[2] = {1, 2}, ids[2] = {1, 3};
    pd_tensor X = make(PD_FLOAT, 4, xs, true), C = make(PD_FLOAT, 2, cs, true), S = make(PD_FLOAT, 2, cs, true);
    pd_tensor Pi = {PD_INT64, 2, {1, 2}, ids}, R = make(PD_FLOAT, 4, xs, false);
    (void)ps;
    pd__node rn = node(PD_OP_ROTARY_EMBEDDING, 23, 4, 1, NULL);
    pd_tensor *rin[4] = {&X, &C, &S, &Pi}, *rout[1] = {&R};
    st = pd__cpu_kernels[rn.op](x, &rn, rin, rout);
    CHECK(st == PD_ERR_INVALID, "RotaryEmbedding: position id 3 of a 3-row cache is refused (%s)", pd_last_error());
    ids[1] = 2;
    st = pd__cpu_kernels[rn.op](x, &rn, rin, rout);
    const float *xv = X.data, *c = C.data, *sv = S.data, *r = R.data;
    /* token 1 at position 2, head size 2: (x0, x1) rotated by cos, sin of row 2 */
    float e0 = c[2] * xv[2] - sv[2] * xv[3], e1 = sv[2] * xv[2] + c[2] * xv[3];
    CHECK(st == PD_OK && fabsf(r[2] - e0) < 1e-6f && fabsf(r[3] - e1) < 1e-6f,
          "RotaryEmbedding: a token rotates by its position's row (%g %g, expected %g %g)", r[2], r[3], e0, e1);
    pd_tensor *all[] = {&Q, &K, &V, &M, &Y, &X, &C, &S, &R};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]->data);
}

/* Pools and softmax on 4 threads give the bits of 1 thread; conv is a BLAS sum, so close. */
static void test_threads(void) {
    pd__exec x1 = {.threads = 1}, x4 = {.threads = 4};
    int64_t xs[4] = {4, 8, 33, 29}, ws[4] = {16, 8, 3, 3};
    pd_tensor X = make(PD_FLOAT, 4, xs, true), W = make(PD_FLOAT, 4, ws, true);
    attrs A = {0};
    int64_t k[2] = {3, 3}, p[4] = {1, 1, 1, 1}, s[2] = {2, 1};
    a_ints(&A, "kernel_shape", 2, k);
    a_ints(&A, "pads", 4, p);
    a_ints(&A, "strides", 2, s);
    pd__win w;
    pd__win_make(&(pd__node){.nattr = A.n, .attr = A.a}, PD_WIN_POOL, 4, xs, NULL, &w);
    int64_t ys[4] = {4, 8, w.out[0], w.out[1]}, cs[4] = {4, 16, w.out[0], w.out[1]};
    static const pd_op ops[4] = {PD_OP_MAX_POOL, PD_OP_AVERAGE_POOL, PD_OP_SOFTMAX, PD_OP_CONV};
    for (int i = 0; i < 4; i++) {
        bool conv = ops[i] == PD_OP_CONV, sm = ops[i] == PD_OP_SOFTMAX;
        const int64_t *shape = conv ? cs : sm ? xs : ys;
        pd_tensor Y1 = make(PD_FLOAT, 4, shape, false), Y4 = make(PD_FLOAT, 4, shape, false);
        pd__node n = node(ops[i], 13, conv ? 2 : 1, 1, sm ? NULL : &A);
        pd_tensor *in[2] = {&X, &W}, *o1[1] = {&Y1}, *o4[1] = {&Y4};
        bool ok = pd__cpu_kernels[n.op](&x1, &n, in, o1) == PD_OK && pd__cpu_kernels[n.op](&x4, &n, in, o4) == PD_OK;
        double d = 0;
        for (int64_t j = 0; j < pd_tensor_numel(&Y1); j++) d = fmax(d, fabs(at(&Y1, j) - at(&Y4, j)));
        CHECK(ok && (conv ? d < 1e-4 : d == 0), "%s on 4 threads equals 1 thread (max diff %.3g)", pd__ops[ops[i]].name,
              d);
        free(Y1.data), free(Y4.data);
    }
    free(X.data), free(W.data);
    free(x1.scratch), free(x4.scratch);
}

/* test_nn [ITERATIONS] (60 by default) */
int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 60;
    pd__exec x1 = {.threads = 1}, x4 = {.threads = 4};
    for (int it = 0; it < iters; it++) {
        pd_dtype t = it % 2 ? PD_DOUBLE : PD_FLOAT;
        pd__exec *x = it % 3 ? &x1 : &x4;
        test_conv(x, false, t, it);
        test_conv(x, true, t, it);
        test_pool(x, true, t, it);
        test_pool(x, false, t, it);
        test_matmul(x, t, it);
        test_softmax(x, false, t, it);
        test_softmax(x, true, t, it);
        test_group_norm(x, t, it);
        test_lppool(x, t, it);
        test_einsum(x, t, it);
        test_attention(x, t, it);
    }
    test_attention_edges(&x1);
    test_conv_few();
    test_global_maxpool(&x1);
    test_random(&x1);
    test_threads();
    free(x1.scratch);
    free(x4.scratch);
    return check_summary();
}
