/* test_grad_nn.c - the nn ops' CPU backward kernels (runtime/cpu/nn.c):
 *
 * - every differentiable input of Gemm, MatMul, Conv, ConvTranspose,
 *   BatchNormalization (training session, the node's own training mode,
 *   inference), LayerNormalization, InstanceNormalization,
 *   GroupNormalization (opsets 18 and 21), RMSNormalization,
 *   LpNormalization, MeanVarianceNormalization, MaxPool, AveragePool,
 *   LpPool, MaxUnpool, GlobalAveragePool, GlobalMaxPool, Resize and Upsample (the
 *   adjoint of the interpolation), Einsum, LRN, Softmax, LogSoftmax,
 *   Dropout, SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss,
 *   RotaryEmbedding, Attention, FlexAttention, LinearAttention, CausalConvWithState,
 *   GridSample, AffineGrid, Col2Im and
 *   CenterCropPad against
 *   central differences in float64 (tests/gradcheck.h: also += into din
 *   and the split B/W backward), over random shapes and attributes;
 * - the float32 backward against the float64 one on the same values;
 * - float16 MatMul, Conv, Softmax, LogSoftmax, Attention and FlexAttention
 *   (computed in float32) against float64, forward and backward;
 * - the multi-threaded backward against the single-threaded one;
 * - BatchNormalization's training-session forward against hand-computed
 *   values (batch statistics, running statistics updated in place with the
 *   unbiased variance), and Dropout's training mask (rate, scale, the same
 *   mask in the backward, per seed and per node);
 * - MaxPool with ties: the gradient goes to the element the forward's
 *   Indices output names (the first maximum in the window). 
 */
#include "../core/shape_nn.h"
#include "check.h"
#include "gradcheck.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- random configurations ---------------------------------------------------------------------- */

static uint64_t rs_state;
static void rs_seed(uint64_t s) { rs_state = s * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull; }
static uint64_t rs_next(void) {
    rs_state ^= rs_state << 13;
    rs_state ^= rs_state >> 7;
    rs_state ^= rs_state << 17;
    return rs_state;
}
static int64_t irand(int64_t lo, int64_t hi) { return lo + (int64_t)(rs_next() % (uint64_t)(hi - lo + 1)); }

static const char *shp(char *buf, int nd, const int64_t *s) {
    pd__format_shape(buf, 64, nd, s);
    return buf;
}

/* A case builder: the same seed gives the same case in either dtype. It
 * sets the inputs whose gradients are checked and describes the case. */
typedef gc *(*build_fn)(uint64_t seed, pd_dtype dt, uint32_t *mask, char *desc, size_t dn);

static double at(gc *c, int i, int64_t k) {
    const pd__tensor *t = &c->g->tensors[c->in[i]];
    return pd__get_f(t->dtype, t->data, k);
}
static void set(gc *c, int i, int64_t k, double v) {
    pd__tensor *t = &c->g->tensors[c->in[i]];
    pd__set_f(t->dtype, t->data, k, v);
}
static int64_t numel_in(gc *c, int i) { return c->g->tensors[c->in[i]].numel; }

/* Random window attributes over ns spatial dims (pads may come from auto_pad). */
static void rand_window(gc *c, int ns, int64_t maxpad, bool dil, bool valid) {
    int64_t s[8], d[8], p[16];
    for (int i = 0; i < ns; i++) {
        s[i] = irand(1, 3);
        d[i] = dil ? irand(1, 2) : 1;
        p[i] = irand(0, maxpad);
        p[ns + i] = irand(0, maxpad);
    }
    if (irand(0, 1)) gc_attr_ints(c, "strides", ns, s);
    if (dil) gc_attr_ints(c, "dilations", ns, d);
    int ap = (int)irand(0, 5);
    if (ap == 1) gc_attr_s(c, "auto_pad", "SAME_UPPER");
    else if (ap == 2) gc_attr_s(c, "auto_pad", "SAME_LOWER");
    else if (ap == 3 && valid) gc_attr_s(c, "auto_pad", "VALID");
    else if (ap != 4) gc_attr_ints(c, "pads", 2 * ns, p);
}

/* Every window of every dim holds at least one input position (no output of -inf or 0/0). */
static bool windows_hit(const pd__win *w) {
    for (int i = 0; i < w->nsp; i++)
        for (int64_t o = 0; o < w->out[i]; o++) {
            bool hit = false;
            for (int64_t j = 0; j < w->k[i] && !hit; j++) {
                int64_t pos = o * w->s[i] - w->pb[i] + j * w->d[i];
                hit = pos >= 0 && pos < w->in[i];
            }
            if (!hit) return false;
        }
    return true;
}

static const char *attr_desc(gc *c, char *buf, size_t n) {
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < c->node.nattr && k + 1 < n; i++) {
        const pd__attr *a = &c->node.attr[i];
        int w = 0;
        if (a->type == PD_A_INT) w = snprintf(buf + k, n - k, " %s=%lld", a->name, (long long)a->i);
        else if (a->type == PD_A_FLOAT) w = snprintf(buf + k, n - k, " %s=%g", a->name, (double)a->f);
        else if (a->type == PD_A_STRING) w = snprintf(buf + k, n - k, " %s=%s", a->name, a->s);
        else if (a->type == PD_A_INTS) {
            char s[64];
            w = snprintf(buf + k, n - k, " %s=%s", a->name, shp(s, a->n, a->ints));
        }
        if (w < 0 || (size_t)w >= n - k) break;
        k += (size_t)w;
    }
    return buf;
}

/* "opset N in0 [..] in1 [..] attrs" */
static void describe(gc *c, char *d, size_t dn) {
    char a[256], s[64];
    size_t k = (size_t)snprintf(d, dn, "opset %d", c->node.opset);
    for (int i = 0; i < c->nin && k < dn; i++) {
        if (c->in[i] < 0) k += (size_t)snprintf(d + k, dn - k, " -");
        else {
            const pd__tensor *t = &c->g->tensors[c->in[i]];
            k += (size_t)snprintf(d + k, dn - k, " %s", shp(s, t->ndim, t->shape));
        }
    }
    if (k < dn) snprintf(d + k, dn - k, "%s", attr_desc(c, a, sizeof a));
}

/* ---- builders ------------------------------------------------------------------------------------ */

static gc *b_gemm(uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn) {
    rs_seed(seed);
    int opset = irand(0, 2) == 0 ? 9 : 13;
    int64_t M = irand(1, 5), K = irand(1, 5), N = irand(1, 5);
    bool ta = irand(0, 1), tb = irand(0, 1);
    static const float ab[] = {1, 0.5f, -1.25f, 2};
    float alpha = ab[irand(0, 3)], beta = irand(0, 5) == 0 ? 0 : ab[irand(0, 3)];
    int cs = (int)irand(opset >= 11 ? 0 : 1, 7);
    gc *c = gc_new("Gemm", opset);
    gc_seed(c, seed);
    int64_t sa[2] = {ta ? K : M, ta ? M : K}, sb[2] = {tb ? N : K, tb ? K : N};
    gc_input(c, dt, 2, sa, NULL);
    gc_input(c, dt, 2, sb, NULL);
    /* C: absent, (), (1), (N), (1, N), (M, 1), (M, N), (1, 1) */
    int64_t cshape[7][2] = {{0}, {1}, {N}, {1, N}, {M, 1}, {M, N}, {1, 1}};
    int cnd[7] = {0, 1, 1, 2, 2, 2, 2};
    if (cs) gc_input(c, dt, cnd[cs - 1], cshape[cs - 1], NULL);
    if (ta) gc_attr_i(c, "transA", 1);
    if (tb) gc_attr_i(c, "transB", 1);
    if (alpha != 1 || irand(0, 1)) gc_attr_f(c, "alpha", alpha);
    if (beta != 1 || irand(0, 1)) gc_attr_f(c, "beta", beta);
    gc_outputs(c, 1);
    *mask = cs ? 0x7 : 0x3;
    describe(c, d, dn);
    return c;
}

/* The loader's fused Linear (pd__fuse_linear): Gemm of A (..., K) in the
 * fused domain, B transposed or not, C (N) or absent; the kernels read A's
 * leading dims as rows. */
static gc *b_linear(uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn) {
    rs_seed(seed);
    int rank = (int)irand(3, 4);
    int64_t sa[4], K = irand(1, 5), N = irand(1, 5);
    for (int i = 0; i < rank - 1; i++) sa[i] = irand(1, 3);
    sa[rank - 1] = K;
    bool tb = irand(0, 2) != 0, bias = irand(0, 3) != 0;
    gc *c = gc_new("Gemm", 17);
    PD_FREE(c->node.domain);
    c->node.domain = pd__strdup(PD__FUSED_DOMAIN);
    gc_seed(c, seed);
    int64_t sb[2] = {tb ? N : K, tb ? K : N}, sc[1] = {N};
    gc_input(c, dt, rank, sa, NULL);
    gc_input(c, dt, 2, sb, NULL);
    if (bias) gc_input(c, dt, 1, sc, NULL);
    if (tb) gc_attr_i(c, "transB", 1);
    if (irand(0, 2) == 0) gc_attr_f(c, "alpha", 0.5f);
    gc_outputs(c, 1);
    *mask = bias ? 0x7 : 0x3;
    describe(c, d, dn);
    return c;
}

static gc *b_matmul(uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn) {
    rs_seed(seed);
    int64_t M = irand(1, 4), K = irand(1, 4), N = irand(1, 4), ob[4];
    int kind = (int)irand(0, 5), nb = (int)irand(0, 3), ba = nb, bb = nb;
    for (int i = 0; i < nb; i++) ob[i] = irand(1, 3);
    if (irand(0, 1)) ba = (int)irand(0, nb);
    else bb = (int)irand(0, nb);
    int64_t sa[8], sb[8];
    int ra = 0, rb = 0;
    if (kind == 0 || kind == 2) { /* 1-D A */
        sa[ra++] = K;
    } else {
        for (int i = nb - ba; i < nb; i++) sa[ra++] = irand(0, 2) == 0 ? 1 : ob[i];
        sa[ra++] = M;
        sa[ra++] = K;
    }
    if (kind == 1 || kind == 2) { /* 1-D B */
        sb[rb++] = K;
    } else {
        for (int i = nb - bb; i < nb; i++) sb[rb++] = irand(0, 2) == 0 ? 1 : ob[i];
        sb[rb++] = K;
        sb[rb++] = N;
    }
    gc *c = gc_new("MatMul", 13);
    gc_seed(c, seed);
    gc_input(c, dt, ra, sa, NULL);
    gc_input(c, dt, rb, sb, NULL);
    gc_outputs(c, 1);
    *mask = 0x3;
    describe(c, d, dn);
    return c;
}

/* MatMul of 12 batches of small matrices, B whole or broadcast over the first
 * batch dim: the products split over the threads (run at gc_threads 2). */
static gc *b_matmul_batched(uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn) {
    rs_seed(seed);
    int64_t M = irand(2, 5), K = irand(2, 5), N = irand(2, 5);
    int64_t sa[4] = {3, 4, M, K}, sb[4] = {3, 4, K, N};
    bool bcast = irand(0, 1);
    gc *c = gc_new("MatMul", 13);
    gc_seed(c, seed);
    gc_input(c, dt, 4, sa, NULL);
    gc_input(c, dt, bcast ? 3 : 4, bcast ? sb + 1 : sb, NULL);
    gc_outputs(c, 1);
    *mask = 0x3;
    describe(c, d, dn);
    return c;
}

/* Conv (transpose false) or ConvTranspose, retried until the window fits. */
static gc *b_conv_any(uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn, bool transpose) {
    for (uint64_t tries = 0;; tries++) {
        rs_seed(seed * 977 + tries);
        int ns = irand(0, 5) == 0 ? 3 : (int)irand(1, 2);
        bool big = irand(0, 2) == 0, one = !transpose && big && irand(0, 2) == 0;
        int64_t group = irand(0, 2) == 0 ? irand(2, 3) : 1, N = irand(1, 2);
        int64_t Cg = big ? irand(4, 5) : irand(1, 3), Mg = big ? irand(4, 5) : irand(1, 3);
        int64_t xs[8] = {N, group * Cg}, ws[8];
        if (transpose) ws[0] = group * Cg, ws[1] = Mg;
        else ws[0] = group * Mg, ws[1] = Cg;
        for (int i = 0; i < ns; i++) {
            ws[2 + i] = one ? 1 : irand(1, 3);
            int64_t lo = ns == 3 ? 2 : 3, hi = ns == 1 ? 9 : ns == 2 ? (big ? 4 : 6) : 3;
            xs[2 + i] = irand(lo, hi);
        }
        gc *c = gc_new(transpose ? "ConvTranspose" : "Conv", irand(0, 1) ? 11 : 22);
        gc_seed(c, seed);
        if (group > 1 || irand(0, 1)) gc_attr_i(c, "group", group);
        if (!one) rand_window(c, ns, 2, true, true);
        if (transpose && irand(0, 2) == 0) {
            int64_t op[8], os[8];
            for (int i = 0; i < ns; i++) op[i] = irand(0, 1);
            if (irand(0, 1)) {
                gc_attr_ints(c, "output_padding", ns, op);
            } else { /* an output_shape near the natural size */
                pd__win w;
                if (pd__win_make(&c->node, PD_WIN_CONVT, ns + 2, xs, ws + 2, &w) == PD_OK) {
                    for (int i = 0; i < ns; i++) os[i] = w.out[i] + irand(-1, 1);
                    gc_attr_ints(c, "output_shape", ns, os);
                }
            }
        }
        if (irand(0, 3) == 0) gc_attr_ints(c, "kernel_shape", ns, ws + 2);
        pd__win w;
        bool ok = pd__win_make(&c->node, transpose ? PD_WIN_CONVT : PD_WIN_CONV, ns + 2, xs, ws + 2, &w) == PD_OK;
        for (int i = 0; ok && i < ns; i++) ok = w.out[i] >= 1 && w.out[i] <= 12;
        if (!ok) {
            gc_free(c);
            continue;
        }
        bool bias = irand(0, 1);
        int64_t M = transpose ? Mg * group : ws[0];
        gc_input(c, dt, ns + 2, xs, NULL);
        gc_input(c, dt, ns + 2, ws, NULL);
        if (bias) gc_input(c, dt, 1, &M, NULL);
        gc_outputs(c, 1);
        *mask = bias ? 0x7 : 0x3;
        describe(c, d, dn);
        return c;
    }
}
static gc *b_conv(uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn) {
    return b_conv_any(seed, dt, mask, d, dn, false);
}
static gc *b_convt(uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn) {
    return b_conv_any(seed, dt, mask, d, dn, true);
}

/* modes: 0 a training session on a node exported for inference, 1 inference
 * (the affine backward), 2 the node's training_mode=1 (ONNX's batch
 * statistics) outside a session, 3 opset 7 spatial=0 (per-feature) in a session. */
static gc *b_bn(uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn) {
    rs_seed(seed);
    int mode = (int)irand(0, 3);
    int sr = (int)irand(0, 2);
    int64_t xs[8] = {irand(1, 3), irand(1, 3)};
    for (int i = 0; i < sr; i++) xs[2 + i] = irand(1, 3);
    /* at least three values per feature: with two, y = +-scale + bias whatever X is, and
     * the gradient is only eps's tiny effect, below the differences' noise */
    int64_t per = xs[0] * (mode == 3 ? 1 : (sr ? xs[2] : 1) * (sr > 1 ? xs[3] : 1));
    if (per < 3) xs[0] = 3;
    gc *c = gc_new("BatchNormalization", mode == 3 ? 7 : 15);
    gc_seed(c, seed);
    int pnd = mode == 3 ? 1 + sr : 1;
    gc_input(c, dt, 2 + sr, xs, NULL);
    for (int i = 1; i < 5; i++) gc_input(c, dt, pnd, xs + 1, NULL);
    for (int64_t k = 0; k < numel_in(c, 4); k++) set(c, 4, k, 0.2 + fabs(at(c, 4, k)));
    if (mode == 3) gc_attr_i(c, "spatial", 0);
    if (mode == 2) gc_attr_i(c, "training_mode", 1);
    if (irand(0, 1)) gc_attr_f(c, "epsilon", irand(0, 1) ? 1e-3f : 1e-5f);
    if (irand(0, 1)) gc_attr_f(c, "momentum", 0.7f);
    gc_training(c, mode == 0 || mode == 3);
    gc_outputs(c, 1);
    *mask = 0x7;
    describe(c, d, dn);
    static const char *names[] = {" session", " inference", " training_mode=1", " session per-feature"};
    size_t k = strlen(d);
    snprintf(d + k, dn - k, "%s", names[mode]);
    return c;
}

/* A training session's BatchNormalization over 70 channels, planes of 1, 4
 * (2x2), 3 (1x3) and 9 (3x3) values: the small planes' path (under 8
 * values: 64 channels at a time, images outer; runtime/cpu/nn_impl.h's
 * FN(bn_stats_rows)) across a full block and a partial one, S a constant
 * (1, 4) and not (3), and the per-channel path (9). */
static gc *b_bn_wide(uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn) {
    static const int64_t sp[4][2] = {{0, 0}, {2, 2}, {1, 3}, {3, 3}};
    int v = (int)(seed % 4);
    int64_t xs[4] = {2, 70, sp[v][0], sp[v][1]}, f = 70;
    gc *c = gc_new("BatchNormalization", 15);
    gc_seed(c, seed);
    gc_input(c, dt, v ? 4 : 2, xs, NULL);
    for (int i = 1; i < 5; i++) gc_input(c, dt, 1, &f, NULL);
    for (int64_t k = 0; k < f; k++) set(c, 4, k, 0.2 + fabs(at(c, 4, k)));
    gc_training(c, true);
    gc_outputs(c, 1);
    *mask = 0x7;
    describe(c, d, dn);
    return c;
}

static gc *b_ln(uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn) {
    rs_seed(seed);
    int r = (int)irand(1, 4);
    int64_t xs[8], ss[8], bs[8];
    for (int i = 0; i < r; i++) xs[i] = irand(1, 4);
    int axis = (int)irand(-r, r - 1), ax = axis < 0 ? axis + r : axis, nd = r - ax;
    int sn = (int)irand(1, nd), bn = (int)irand(0, nd);
    for (int i = 0; i < sn; i++) ss[i] = irand(0, 3) == 0 ? 1 : xs[r - sn + i];
    for (int i = 0; i < bn; i++) bs[i] = irand(0, 3) == 0 ? 1 : xs[r - bn + i];
    int nout = (int)irand(1, 3);
    gc *c = gc_new("LayerNormalization", 17);
    gc_seed(c, seed);
    gc_input(c, dt, r, xs, NULL);
    gc_input(c, dt, sn, ss, NULL);
    if (bn && irand(0, 2)) gc_input(c, dt, bn, bs, NULL);
    if (axis != -1 || irand(0, 1)) gc_attr_i(c, "axis", axis);
    int64_t D = 1;
    for (int i = ax; i < r; i++) D *= xs[i];
    /* two values per row normalize to about +-1 whatever they are: a large
     * epsilon keeps the gradient above the differences' noise */
    if (D == 2) gc_attr_f(c, "epsilon", 0.5f);
    else if (irand(0, 1)) gc_attr_f(c, "epsilon", irand(0, 1) ? 0.1f : 1e-5f);
    if (nout > 1) gc_attr_i(c, "stash_type", PD_DOUBLE); /* differences of float32 statistics are noise */
    gc_outputs(c, nout);
    *mask = c->nin == 3 ? 0x7 : 0x3;
    describe(c, d, dn);
    size_t k = strlen(d);
    snprintf(d + k, dn - k, " outputs %d", nout);
    return c;
}

/* InstanceNormalization (group false) or GroupNormalization, opset 18
 * (scale and bias per group) or 21 (per channel). */
static gc *b_gn_any(uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn, bool group) {
    rs_seed(seed);
    int r = (int)irand(group ? 2 : 3, 5);
    int64_t G = group ? irand(1, 3) : 1, xs[8] = {irand(1, 3), G * irand(1, 3)};
    for (int i = 2; i < r; i++) xs[i] = irand(1, 4);
    int opset = group ? (irand(0, 1) ? 18 : 21) : (irand(0, 1) ? 6 : 22);
    gc *c = gc_new(group ? "GroupNormalization" : "InstanceNormalization", opset);
    gc_seed(c, seed);
    gc_input(c, dt, r, xs, NULL);
    int64_t ps[1] = {group && opset < 21 ? G : xs[1]};
    gc_input(c, dt, 1, ps, NULL);
    gc_input(c, dt, 1, ps, NULL);
    if (group) gc_attr_i(c, "num_groups", G);
    int64_t D = xs[1] / G;
    for (int i = 2; i < r; i++) D *= xs[i];
    /* a row of one or two values normalizes to 0 or about +-1: a large
     * epsilon keeps the gradient above the differences' noise */
    if (D <= 2) gc_attr_f(c, "epsilon", 0.5f);
    else if (irand(0, 1)) gc_attr_f(c, "epsilon", irand(0, 1) ? 0.1f : 1e-5f);
    if (group && opset >= 21 && irand(0, 1)) gc_attr_i(c, "stash_type", PD_FLOAT);
    gc_outputs(c, 1);
    *mask = 0x7;
    describe(c, d, dn);
    return c;
}
static gc *b_in(uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn) {
    return b_gn_any(seed, dt, mask, d, dn, false);
}
static gc *b_gn(uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn) {
    return b_gn_any(seed, dt, mask, d, dn, true);
}

static gc *b_rms(uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn) {
    rs_seed(seed);
    int r = (int)irand(1, 4);
    int64_t xs[8], ss[8];
    for (int i = 0; i < r; i++) xs[i] = irand(1, 4);
    int axis = (int)irand(-r, r - 1), ax = axis < 0 ? axis + r : axis, nd = r - ax;
    int sn = (int)irand(1, nd);
    for (int i = 0; i < sn; i++) ss[i] = irand(0, 3) == 0 ? 1 : xs[r - sn + i];
    gc *c = gc_new("RMSNormalization", 23);
    gc_seed(c, seed);
    gc_input(c, dt, r, xs, NULL);
    gc_input(c, dt, sn, ss, NULL);
    if (axis != -1 || irand(0, 1)) gc_attr_i(c, "axis", axis);
    if (irand(0, 1)) gc_attr_f(c, "epsilon", irand(0, 1) ? 0.1f : 1e-5f);
    gc_outputs(c, 1);
    *mask = 0x3;
    describe(c, d, dn);
    return c;
}

/* MaxPool (max true) or AveragePool, retried until every window holds an input. */
static gc *b_pool_any(uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn, bool max) {
    for (uint64_t tries = 0;; tries++) {
        rs_seed(seed * 613 + tries);
        int ns = irand(0, 4) == 0 ? 3 : (int)irand(1, 2);
        int64_t xs[8] = {irand(1, 2), irand(1, 3)}, ks[8];
        for (int i = 0; i < ns; i++) {
            ks[i] = irand(1, 3);
            xs[2 + i] = ns == 1 ? irand(3, 10) : ns == 2 ? irand(3, 6) : irand(2, 4);
        }
        int opset = max ? (irand(0, 1) ? 12 : 22) : (irand(0, 1) ? 11 : 19);
        gc *c = gc_new(max ? "MaxPool" : "AveragePool", opset);
        gc_seed(c, seed);
        gc_attr_ints(c, "kernel_shape", ns, ks);
        rand_window(c, ns, 1, max || opset >= 19, true);
        if (irand(0, 1)) gc_attr_i(c, "ceil_mode", 1);
        if (!max && irand(0, 1)) gc_attr_i(c, "count_include_pad", 1);
        int nout = max ? (int)irand(1, 2) : 1;
        if (nout == 2 && irand(0, 1)) gc_attr_i(c, "storage_order", 1);
        pd__win w;
        if (pd__win_make(&c->node, PD_WIN_POOL, ns + 2, xs, NULL, &w) != PD_OK || !windows_hit(&w)) {
            gc_free(c);
            continue;
        }
        gc_input(c, dt, ns + 2, xs, NULL);
        if (max) { /* distinct values, far apart compared with the differences' step: no ties */
            int64_t n = numel_in(c, 0);
            for (int64_t k = 0; k < n; k++) set(c, 0, k, -1 + 2.0 * (double)k / (double)n);
            for (int64_t k = n - 1; k > 0; k--) {
                int64_t j = irand(0, k);
                double t = at(c, 0, k);
                set(c, 0, k, at(c, 0, j));
                set(c, 0, j, t);
            }
        }
        gc_outputs(c, nout);
        *mask = 0x1;
        describe(c, d, dn);
        return c;
    }
}
static gc *b_maxpool(uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn) {
    return b_pool_any(seed, dt, mask, d, dn, true);
}
static gc *b_avgpool(uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn) {
    return b_pool_any(seed, dt, mask, d, dn, false);
}

static gc *b_gap(uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn) {
    rs_seed(seed);
    int r = (int)irand(3, 5);
    int64_t xs[8];
    for (int i = 0; i < r; i++) xs[i] = irand(1, 4);
    gc *c = gc_new("GlobalAveragePool", 1);
    gc_seed(c, seed);
    gc_input(c, dt, r, xs, NULL);
    gc_outputs(c, 1);
    *mask = 0x1;
    describe(c, d, dn);
    return c;
}

static gc *b_gmp(uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn) {
    rs_seed(seed);
    int r = (int)irand(3, 5);
    int64_t xs[8];
    for (int i = 0; i < r; i++) xs[i] = irand(1, 4);
    gc *c = gc_new("GlobalMaxPool", 1);
    gc_seed(c, seed);
    gc_input(c, dt, r, xs, NULL);
    /* distinct values, far apart compared with the differences' step: no ties */
    int64_t n = numel_in(c, 0);
    for (int64_t k = 0; k < n; k++) set(c, 0, k, -1 + 2.0 * (double)k / (double)n);
    for (int64_t k = n - 1; k > 0; k--) {
        int64_t j = irand(0, k);
        double t = at(c, 0, k);
        set(c, 0, k, at(c, 0, j));
        set(c, 0, j, t);
    }
    gc_outputs(c, 1);
    *mask = 0x1;
    describe(c, d, dn);
    return c;
}

/* MaxUnpool: distinct random indices into the unpooled frame, pads that
 * leave it at least X's size, output_shape sometimes larger than the frame. */
static gc *b_maxunpool(uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn) {
    rs_seed(seed);
    int r = (int)irand(3, 5), nsp = r - 2;
    int64_t xs[8], k[3], st[3], pads[6], frame[8], os[8], fn = 1;
    for (int i = 0; i < r; i++) xs[i] = irand(1, 3);
    for (int i = 0; i < nsp; i++) {
        k[i] = irand(1, 3), st[i] = irand(1, 3);
        int64_t room = (xs[i + 2] - 1) * (st[i] - 1) + k[i] - 1; /* frame - input at zero pads */
        pads[i] = irand(0, room), pads[nsp + i] = irand(0, room - pads[i]);
    }
    for (int i = 0; i < r; i++) {
        frame[i] = i < 2 ? xs[i] : (xs[i] - 1) * st[i - 2] - pads[i - 2] - pads[nsp + i - 2] + k[i - 2];
        os[i] = frame[i] + (irand(0, 2) == 0 ? irand(0, 2) : 0);
        fn *= frame[i];
    }
    int64_t *perm = malloc(sizeof(int64_t) * (size_t)fn);
    for (int64_t j = 0; j < fn; j++) perm[j] = j;
    for (int64_t j = fn - 1; j > 0; j--) {
        int64_t q = irand(0, j), t = perm[j];
        perm[j] = perm[q], perm[q] = t;
    }
    bool has_os = irand(0, 1);
    gc *c = gc_new("MaxUnpool", 11);
    gc_seed(c, seed);
    gc_input(c, dt, r, xs, NULL);
    gc_input(c, PD_INT64, r, xs, perm);
    int64_t rr = r;
    if (has_os) gc_input(c, PD_INT64, 1, &rr, os);
    free(perm);
    gc_attr_ints(c, "kernel_shape", nsp, k);
    gc_attr_ints(c, "strides", nsp, st);
    gc_attr_ints(c, "pads", 2 * nsp, pads);
    gc_outputs(c, 1);
    *mask = 0x1;
    describe(c, d, dn);
    return c;
}

/* LpPool (p 1 to 3; opset 18 adds dilations and ceil_mode), retried until every window holds an input. */
static gc *b_lppool(uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn) {
    for (uint64_t tries = 0;; tries++) {
        rs_seed(seed * 733 + tries);
        int ns = irand(0, 4) == 0 ? 3 : (int)irand(1, 2);
        int64_t xs[8] = {irand(1, 2), irand(1, 3)}, ks[8];
        for (int i = 0; i < ns; i++) {
            ks[i] = irand(1, 3);
            xs[2 + i] = ns == 1 ? irand(3, 8) : ns == 2 ? irand(3, 5) : irand(2, 3);
        }
        int opset = irand(0, 1) ? 11 : 18;
        gc *c = gc_new("LpPool", opset);
        gc_seed(c, seed);
        gc_attr_ints(c, "kernel_shape", ns, ks);
        rand_window(c, ns, 1, opset >= 18, true);
        if (opset >= 18 && irand(0, 1)) gc_attr_i(c, "ceil_mode", 1);
        int64_t p = irand(1, 3);
        if (p != 2 || irand(0, 1)) gc_attr_i(c, "p", p);
        pd__win w;
        if (pd__win_make(&c->node, PD_WIN_POOL, ns + 2, xs, NULL, &w) != PD_OK || !windows_hit(&w)) {
            gc_free(c);
            continue;
        }
        gc_input(c, dt, ns + 2, xs, NULL);
        /* away from 0, where |x| has its kink (p 1) */
        for (int64_t k = 0; k < numel_in(c, 0); k++) {
            double v = at(c, 0, k);
            set(c, 0, k, v < 0 ? v - 0.1 : v + 0.1);
        }
        gc_outputs(c, 1);
        *mask = 0x1;
        describe(c, d, dn);
        return c;
    }
}

static gc *b_lpn(uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn) {
    rs_seed(seed);
    int r = (int)irand(1, 4);
    int64_t xs[8];
    for (int i = 0; i < r; i++) xs[i] = irand(1, 4);
    int axis = (int)irand(-r, r - 1);
    /* a line of one value normalizes to its sign: gradient 0, where float32 and float64 differ by rounding only */
    xs[axis < 0 ? axis + r : axis] = irand(2, 4);
    int64_t p = irand(1, 2);
    gc *c = gc_new("LpNormalization", 1);
    gc_seed(c, seed);
    gc_input(c, dt, r, xs, NULL);
    for (int64_t k = 0; k < numel_in(c, 0); k++) { /* away from 0, where |x| has its kink (p 1) */
        double v = at(c, 0, k);
        set(c, 0, k, v < 0 ? v - 0.1 : v + 0.1);
    }
    if (axis != -1 || irand(0, 1)) gc_attr_i(c, "axis", axis);
    if (p != 2 || irand(0, 1)) gc_attr_i(c, "p", p);
    gc_outputs(c, 1);
    *mask = 0x1;
    describe(c, d, dn);
    return c;
}

/* MeanVarianceNormalization over random axes (the default [0, 2, 3] on rank
 * 4), groups of 3 values or more. */
static gc *b_mvn(uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn) {
    for (uint64_t tries = 0;; tries++) {
        rs_seed(seed * 311 + tries);
        int r = (int)irand(1, 5);
        int64_t xs[8], axes[8], na = 0, D = 1;
        for (int i = 0; i < r; i++) xs[i] = irand(1, 4);
        bool dflt = r == 4 && irand(0, 1);
        for (int i = 0; i < r; i++)
            if (dflt ? i != 1 : irand(0, 1)) {
                axes[na++] = irand(0, 1) ? i : i - r;
                D *= xs[i];
            }
        if (na == 0 || D < 3) continue;
        gc *c = gc_new("MeanVarianceNormalization", irand(0, 1) ? 9 : 13);
        gc_seed(c, seed);
        gc_input(c, dt, r, xs, NULL);
        if (!dflt || irand(0, 1)) gc_attr_ints(c, "axes", (int)na, axes);
        gc_outputs(c, 1);
        *mask = 0x1;
        describe(c, d, dn);
        return c;
    }
}

/* Resize (opset 10, 11, 13, 18 with axes) or Upsample (7, 9): nearest,
 * linear or cubic, every supported coordinate transformation (with
 * tf_crop_and_resize a roi that reaches outside the input) and nearest_mode,
 * antialias, up- and downsampling, from constant scales or sizes. */
static gc *b_resize_any(uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn, bool up) {
    static const char *ctms[] = {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                                 "half_pixel_symmetric"};
    static const char *nms[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
    static const float scs[] = {0.3f, 0.5f, 0.6f, 1, 1.5f, 2, 2.5f, 3};
    for (uint64_t tries = 0;; tries++) {
        rs_seed(seed * 419 + tries);
        int r = (int)irand(up ? 3 : 1, 4);
        int64_t xs[8];
        for (int i = 0; i < r; i++) xs[i] = irand(1, i < r - 2 ? 2 : 5);
        int opset = up ? (irand(0, 1) ? 7 : 9) : (int)(int64_t[]){10, 11, 13, 18, 19}[irand(0, 4)];
        bool sizes = !up && opset >= 11 && irand(0, 1), axes = opset >= 18 && r >= 2 && irand(0, 1);
        int na = axes ? 2 : r, ax[2] = {r - 2, r - 1};
        if (axes && irand(0, 1)) ax[0] = r - 1, ax[1] = r - 2;
        float sc[8];
        int64_t sz[8];
        bool ok = true;
        for (int i = 0; i < na; i++) {
            int dim = axes ? ax[i] : i;
            bool resized = axes || dim >= r - 2 || irand(0, 3) == 0;
            sc[i] = resized ? scs[irand(0, 7)] : 1;
            sz[i] = resized ? irand(1, 7) : xs[dim];
            if (!sizes && (int64_t)floor(xs[dim] * (double)sc[i]) < 1) ok = false;
        }
        if (!ok) continue;
        gc *c = gc_new(up ? "Upsample" : "Resize", opset);
        bool crop = false;
        gc_seed(c, seed);
        gc_input(c, dt, r, xs, NULL);
        int64_t nv[1] = {na};
        if (up && opset < 9) gc_attr_floats(c, "scales", na, sc);
        else if (opset < 11) gc_input(c, PD_FLOAT, 1, nv, sc);
        else {
            /* tf_crop_and_resize: a roi from a bit before the start to a bit past the end,
             * so that some outputs are the extrapolation value */
            crop = opset >= 11 && irand(0, 3) == 0;
            if (crop) {
                float roi[16];
                int64_t nr[1] = {2 * na};
                for (int i = 0; i < na; i++) {
                    roi[i] = (float)irand(-2, 6) / 10;
                    roi[na + i] = (float)irand(5, 12) / 10;
                }
                gc_input(c, PD_FLOAT, 1, nr, roi);
            } else {
                gc_absent(c); /* roi */
            }
            if (sizes) {
                gc_absent(c);
                gc_input(c, PD_INT64, 1, nv, sz);
            } else {
                gc_input(c, PD_FLOAT, 1, nv, sc);
            }
        }
        if (axes) {
            int64_t av[2] = {ax[0], ax[1] - (irand(0, 1) ? r : 0)};
            gc_attr_ints(c, "axes", 2, av);
        }
        bool linear = irand(0, 1), cubic = !linear && opset >= 11 && irand(0, 2) == 0;
        if (linear) gc_attr_s(c, "mode", "linear");
        else if (cubic) gc_attr_s(c, "mode", "cubic");
        else if (irand(0, 1)) gc_attr_s(c, "mode", "nearest");
        if (cubic && irand(0, 1)) gc_attr_i(c, "exclude_outside", 1);
        if (cubic && irand(0, 1)) gc_attr_f(c, "cubic_coeff_a", -0.5f);
        /* antialias (opset 18): the kernel widened by 1 / scale where an axis shrinks */
        if ((linear || cubic) && opset >= 18 && irand(0, 1)) gc_attr_i(c, "antialias", 1);
        if (crop) {
            gc_attr_s(c, "coordinate_transformation_mode", "tf_crop_and_resize");
            if (irand(0, 1)) gc_attr_f(c, "extrapolation_value", 2.5f);
            if (!linear && !cubic) gc_attr_s(c, "nearest_mode", nms[irand(0, 3)]);
        } else if (opset >= 11) {
            int ct = (int)irand(0, 5), nm = (int)irand(0, 4);
            if (ct < 5) gc_attr_s(c, "coordinate_transformation_mode", ctms[ct]);
            if (!linear && !cubic && nm < 4) gc_attr_s(c, "nearest_mode", nms[nm]);
        }
        gc_outputs(c, 1);
        *mask = 0x1;
        describe(c, d, dn);
        size_t k = strlen(d);
        if (sizes) snprintf(d + k, dn - k, " sizes");
        else snprintf(d + k, dn - k, " scales %g %g ...", (double)sc[0], (double)sc[na - 1]);
        return c;
    }
}
static gc *b_resize(uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn) {
    return b_resize_any(seed, dt, mask, d, dn, false);
}
static gc *b_upsample(uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn) {
    return b_resize_any(seed, dt, mask, d, dn, true);
}

/* DeformConv: groups, offset groups, strides, dilations, pads; offsets
 * of a few pixels either way (taps reading outside X), B and mask each
 * present or not. */
static gc *b_deform(uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn) {
    rs_seed(seed);
    int64_t G = irand(1, 2), OG = irand(1, 2), N = irand(1, 2), C = G * OG * irand(1, 2), OC = G * irand(1, 2);
    int64_t kh = irand(1, 3), kw = irand(1, 3), sh = irand(1, 2), sw = irand(1, 2), dh = irand(1, 2), dw = irand(1, 2);
    int64_t pads[4] = {irand(0, 1), irand(0, 1), irand(0, 1), irand(0, 1)};
    int64_t H = (kh - 1) * dh + 1 + irand(0, 3), W = (kw - 1) * dw + 1 + irand(0, 3);
    int64_t OH = (H + pads[0] + pads[2] - (kh - 1) * dh - 1) / sh + 1;
    int64_t OW = (W + pads[1] + pads[3] - (kw - 1) * dw - 1) / sw + 1;
    int64_t xs[4] = {N, C, H, W}, ws[4] = {OC, C / G, kh, kw}, os[4] = {N, OG * kh * kw * 2, OH, OW};
    int64_t bs[1] = {OC}, ms[4] = {N, OG * kh * kw, OH, OW}, st[2] = {sh, sw}, dl[2] = {dh, dw}, ks[2] = {kh, kw};
    bool hb = irand(0, 1), hm = irand(0, 1);
    gc *c = gc_new("DeformConv", 19);
    gc_seed(c, seed);
    gc_input(c, dt, 4, xs, NULL);
    gc_input(c, dt, 4, ws, NULL);
    gc_input(c, dt, 4, os, NULL);
    for (int64_t k = 0; k < numel_in(c, 2); k++) set(c, 2, k, at(c, 2, k) * 2.5); /* whole pixels away, some outside */
    if (hb) gc_input(c, dt, 1, bs, NULL);
    else if (hm) gc_absent(c);
    if (hm) gc_input(c, dt, 4, ms, NULL);
    gc_attr_ints(c, "strides", 2, st);
    gc_attr_ints(c, "dilations", 2, dl);
    gc_attr_ints(c, "pads", 4, pads);
    if (irand(0, 1)) gc_attr_ints(c, "kernel_shape", 2, ks);
    if (G > 1 || irand(0, 1)) gc_attr_i(c, "group", G);
    if (OG > 1 || irand(0, 1)) gc_attr_i(c, "offset_group", OG);
    gc_outputs(c, 1);
    *mask = 0x7 | (hb ? 0x8 : 0) | (hm ? 0x10 : 0);
    describe(c, d, dn);
    return c;
}

/* Einsum with an ellipsis and repeated letters (diagonals), one or two
 * operands: the equation from a list, each letter's size (and the
 * ellipsis' axes) random. */
static gc *b_einsum_diag(uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn) {
    static const char *eqs[] = {"...ii->...i", "ii->i", "ii", "...ij,...jk->...ik", "bii,bij->bj", "iij->ji",
                                "...ii,...i->...", "a...b,b...c->...ac", "abab->ba", "ij,jj->i", "i...->...",
                                "...ij"};
    rs_seed(seed);
    const char *eq = eqs[irand(0, (int64_t)(sizeof eqs / sizeof eqs[0]) - 1)];
    int64_t size[128], ell[4], ne = irand(0, 2);
    for (int ch = 0; ch < 128; ch++) size[ch] = irand(1, 3);
    for (int j = 0; j < ne; j++) ell[j] = irand(1, 3);
    gc *c = gc_new("Einsum", 12);
    gc_seed(c, seed);
    int nin = 0;
    for (const char *p = eq; *p && *p != '-';) { /* each operand's shape from its letters */
        int64_t sh[8];
        int r = 0;
        for (; *p && *p != ',' && *p != '-'; p++) {
            if (*p == '.') {
                for (int j = 0; j < ne; j++) sh[r++] = ell[j];
                p += 2;
            } else {
                sh[r++] = size[(int)*p];
            }
        }
        gc_input(c, dt, r, sh, NULL);
        nin++;
        if (*p == ',') p++;
    }
    gc_attr_s(c, "equation", eq);
    gc_outputs(c, 1);
    *mask = nin == 2 ? 0x3 : 0x1;
    describe(c, d, dn);
    return c;
}

/* Det: batches of 1x1 to 4x4 matrices, some singular (two equal rows: the
 * cofactors still give the gradient). */
static gc *b_det(uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn) {
    rs_seed(seed);
    int nb = (int)irand(0, 2);
    int64_t xs[8], m = irand(1, 4);
    for (int i = 0; i < nb; i++) xs[i] = irand(1, 3);
    xs[nb] = xs[nb + 1] = m;
    gc *c = gc_new("Det", 22);
    gc_seed(c, seed);
    gc_input(c, dt, nb + 2, xs, NULL);
    bool singular = m > 1 && irand(0, 3) == 0;
    if (singular)
        for (int64_t k = 0; k < numel_in(c, 0); k += m * m)
            for (int64_t j = 0; j < m; j++) set(c, 0, k + m + j, at(c, 0, k + j));
    gc_outputs(c, 1);
    *mask = 0x1;
    describe(c, d, dn);
    if (singular) snprintf(d + strlen(d), dn - strlen(d), " singular");
    return c;
}

/* Einsum as a batched matrix product: random batch, M, N and K letters in
 * random orders, the output explicit or implicit; or of one operand (a
 * transpose and sum). */
static gc *b_einsum(uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn) {
    rs_seed(seed);
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
    gc *c = gc_new("Einsum", 12);
    gc_seed(c, seed);
    gc_input(c, dt, na, as, NULL);
    if (!one) gc_input(c, dt, nb, bs, NULL);
    gc_attr_s(c, "equation", eq);
    gc_outputs(c, 1);
    *mask = one ? 0x1 : 0x3;
    describe(c, d, dn);
    return c;
}

static gc *b_lrn(uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn) {
    rs_seed(seed);
    int r = (int)irand(2, 4);
    int64_t xs[8] = {irand(1, 2), irand(1, 7)};
    for (int i = 2; i < r; i++) xs[i] = irand(1, 4);
    gc *c = gc_new("LRN", 13);
    gc_seed(c, seed);
    gc_input(c, dt, r, xs, NULL);
    gc_attr_i(c, "size", irand(1, 5));
    static const float al[] = {1e-4f, 0.5f, 1.0f}, be[] = {0.75f, 0.5f, 1.3f}, bi[] = {1.0f, 2.0f, 0.5f};
    if (irand(0, 2)) gc_attr_f(c, "alpha", al[irand(0, 2)]);
    if (irand(0, 2)) gc_attr_f(c, "beta", be[irand(0, 2)]);
    if (irand(0, 2)) gc_attr_f(c, "bias", bi[irand(0, 2)]);
    gc_outputs(c, 1);
    *mask = 0x1;
    describe(c, d, dn);
    return c;
}

static gc *b_softmax_any(uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn, bool lg) {
    rs_seed(seed);
    int r = (int)irand(1, 4), opset = irand(0, 1) ? 11 : 13;
    int64_t xs[8];
    for (int i = 0; i < r; i++) xs[i] = irand(1, 5);
    gc *c = gc_new(lg ? "LogSoftmax" : "Softmax", opset);
    gc_seed(c, seed);
    gc_input(c, dt, r, xs, NULL);
    /* opset 13: one axis in [-r, r-1]; before, the 2-D coercion point in [-r, r] */
    int64_t axis = opset >= 13 ? irand(-r, r - 1) : irand(-r, r);
    if (irand(0, 3)) gc_attr_i(c, "axis", axis);
    gc_outputs(c, 1);
    *mask = 0x1;
    describe(c, d, dn);
    return c;
}
static gc *b_softmax(uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn) {
    return b_softmax_any(seed, dt, mask, d, dn, false);
}
static gc *b_logsoftmax(uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn) {
    return b_softmax_any(seed, dt, mask, d, dn, true);
}

/* modes: 0 a session, ratio input; 1 a session, opset 10's ratio attribute;
 * 2 ONNX's training_mode input (MT19937) outside a session; 3 inference (identity). */
static gc *b_dropout(uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn) {
    rs_seed(seed);
    int mode = (int)irand(0, 3), r = (int)irand(1, 3);
    int64_t xs[8];
    for (int i = 0; i < r; i++) xs[i] = irand(1, 6);
    static const double ratios[] = {0.2, 0.5, 0.75};
    double ratio = ratios[irand(0, 2)];
    gc *c = gc_new("Dropout", mode == 1 ? 10 : 13);
    gc_seed(c, seed);
    gc_input(c, dt, r, xs, NULL);
    if (mode == 0 || mode == 2) gc_input(c, PD_DOUBLE, 0, NULL, &ratio);
    if (mode == 2) {
        bool on = true;
        gc_input(c, PD_BOOL, 0, NULL, &on);
        gc_attr_i(c, "seed", (int64_t)irand(0, 1000));
    }
    if (mode == 1) gc_attr_f(c, "ratio", (float)ratio);
    gc_training(c, mode <= 1);
    gc_outputs(c, (int)irand(1, 2));
    *mask = 0x1;
    describe(c, d, dn);
    static const char *names[] = {" session", " session (attribute)", " training_mode input", " inference"};
    size_t k = strlen(d);
    snprintf(d + k, dn - k, "%s ratio %g", names[mode], ratio);
    return c;
}

static gc *b_loss_any(uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn, bool sce) {
    rs_seed(seed);
    int r = (int)irand(2, 4);
    int64_t xs[8] = {irand(1, 3), irand(2, 5)}, ls[8];
    for (int i = 2; i < r; i++) xs[i] = irand(1, 3);
    ls[0] = xs[0];
    for (int i = 2; i < r; i++) ls[i - 1] = xs[i];
    int64_t nl = 1, C = xs[1];
    for (int i = 0; i < r - 1; i++) nl *= ls[i];
    bool has_ii = irand(0, 2) == 0;
    int64_t ii = irand(0, 1) ? -1 : irand(0, C - 1);
    int64_t *lab = calloc((size_t)nl, sizeof(int64_t));
    int32_t *lab32 = malloc(sizeof(int32_t) * (size_t)nl);
    for (int64_t k = 0; k < nl; k++) {
        lab[k] = irand(0, C - 1);
        if (has_ii && irand(0, 3) == 0) lab[k] = ii;
    }
    if (has_ii && lab[0] == ii) lab[0] = (ii + 1) % C; /* at least one counts */
    for (int64_t k = 0; k < nl; k++) lab32[k] = (int32_t)lab[k];
    static const char *reds[] = {"none", "sum", "mean"};
    int red = (int)irand(0, 2);
    gc *c = gc_new(sce ? "SoftmaxCrossEntropyLoss" : "NegativeLogLikelihoodLoss", 13);
    gc_seed(c, seed);
    gc_input(c, dt, r, xs, NULL);
    if (irand(0, 3)) gc_input(c, PD_INT64, r - 1, ls, lab);
    else gc_input(c, PD_INT32, r - 1, ls, lab32);
    if (irand(0, 1)) {
        gc_input(c, dt, 1, &C, NULL);
        for (int64_t k = 0; k < C; k++) set(c, 2, k, 0.5 + fabs(at(c, 2, k))); /* sums of weights far from 0 */
    }
    if (has_ii) gc_attr_i(c, "ignore_index", ii);
    if (red != 2 || irand(0, 1)) gc_attr_s(c, "reduction", reds[red]);
    gc_outputs(c, sce ? (int)irand(1, 2) : 1);
    *mask = 0x1;
    describe(c, d, dn);
    size_t k = strlen(d);
    snprintf(d + k, dn - k, " outputs %d", c->nout);
    free(lab);
    free(lab32);
    return c;
}
static gc *b_sce(uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn) {
    return b_loss_any(seed, dt, mask, d, dn, true);
}
static gc *b_nll(uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn) {
    return b_loss_any(seed, dt, mask, d, dn, false);
}

/* RotaryEmbedding: 3-D or 4-D X, interleaved or halves, a partial
 * rotary_embedding_dim, caches indexed by position_ids or per token. */
static gc *b_rope(uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn) {
    rs_seed(seed);
    int64_t B = irand(1, 2), S = irand(1, 3), H = irand(1, 3), D = 2 * irand(1, 3);
    int64_t rd = irand(0, 2) == 0 ? 2 * irand(1, D / 2) : 0, half = (rd ? rd : D) / 2, C = half + irand(0, 1);
    bool four = irand(0, 1), pos = irand(0, 1);
    int64_t P = irand(1, 5);
    gc *c = gc_new("RotaryEmbedding", 23);
    gc_seed(c, seed);
    int64_t x4[4] = {B, H, S, D}, x3[3] = {B, S, H * D}, c2[2] = {P, C}, c3[3] = {B, S, C}, ps[2] = {B, S};
    gc_input(c, dt, four ? 4 : 3, four ? x4 : x3, NULL);
    gc_input(c, dt, pos ? 2 : 3, pos ? c2 : c3, NULL);
    gc_input(c, dt, pos ? 2 : 3, pos ? c2 : c3, NULL);
    if (pos) {
        int64_t ids[16];
        for (int64_t i = 0; i < B * S; i++) ids[i] = irand(0, P - 1);
        gc_input(c, PD_INT64, 2, ps, ids);
    }
    if (!four || irand(0, 1)) gc_attr_i(c, "num_heads", H);
    if (rd || irand(0, 1)) gc_attr_i(c, "rotary_embedding_dim", rd);
    if (irand(0, 1)) gc_attr_i(c, "interleaved", irand(0, 1));
    gc_outputs(c, 1);
    *mask = 0x1;
    describe(c, d, dn);
    return c;
}

/* Attention: 3-D or 4-D, grouped-query heads, past keys and values, a bool
 * or float mask (broadcast, maybe fewer keys than the total), causal,
 * scale, softcap, nonpad_kv_seqlen; the present and score outputs' gradients checked too. */
static gc *b_attn(uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn) {
    rs_seed(seed);
    int64_t B = irand(1, 2), Hk = irand(1, 2), Hq = Hk * irand(1, 2), Sq = irand(1, 3), Skv = irand(1, 3);
    int64_t Dh = irand(1, 3), Dv = irand(1, 3), P = irand(0, 2) == 0 ? 0 : irand(1, 2), T = P + Skv;
    bool three = irand(0, 1), causal = irand(0, 2) == 0;
    int mk = (int)irand(0, 2); /* 0 none, 1 bool, 2 float */
    gc *c = gc_new("Attention", 23);
    gc_seed(c, seed);
    int64_t q4[4] = {B, Hq, Sq, Dh}, k4[4] = {B, Hk, Skv, Dh}, v4[4] = {B, Hk, Skv, Dv};
    int64_t q3[3] = {B, Sq, Hq * Dh}, k3[3] = {B, Skv, Hk * Dh}, v3[3] = {B, Skv, Hk * Dv};
    gc_input(c, dt, three ? 3 : 4, three ? q3 : q4, NULL);
    gc_input(c, dt, three ? 3 : 4, three ? k3 : k4, NULL);
    gc_input(c, dt, three ? 3 : 4, three ? v3 : v4, NULL);
    int64_t lm = irand(0, 1) ? T : irand(1, T);
    if (mk) {
        int mn = (int)irand(2, 4);
        int64_t full[4] = {B, Hq, Sq, lm}, ms[4];
        for (int i = 0; i < mn; i++) ms[i] = full[4 - mn + i];
        for (int i = 0; i < mn - 1; i++)
            if (irand(0, 2) == 0) ms[i] = 1;
        int64_t nm = 1;
        for (int i = 0; i < mn; i++) nm *= ms[i];
        if (mk == 1) {
            uint8_t mb[256];
            /* key 0 always attended: no row masked whole */
            for (int64_t i = 0; i < nm; i++) mb[i] = i % ms[mn - 1] == 0 || irand(0, 2) != 0;
            gc_input(c, PD_BOOL, mn, ms, mb);
        } else {
            gc_input(c, dt, mn, ms, NULL);
        }
    } else if (P) {
        gc_absent(c);
    }
    /* nonpad_kv_seqlen (opset 24): at least one key per query */
    bool kvl = irand(0, 3) == 0;
    int64_t kv[2], bs = B, lo = causal && !P ? (Sq < T ? Sq : T) : 1;
    for (int64_t b = 0; b < B; b++) kv[b] = irand(lo, T);
    if (kvl && !mk && !P) gc_absent(c);
    if (P) {
        int64_t pk[4] = {B, Hk, P, Dh}, pv[4] = {B, Hk, P, Dv};
        gc_input(c, dt, 4, pk, NULL);
        gc_input(c, dt, 4, pv, NULL);
    } else if (kvl) {
        gc_absent(c);
        gc_absent(c);
    }
    if (kvl) {
        gc_input(c, PD_INT64, 1, &bs, kv);
        c->node.opset = c->g->opset = 24;
    }
    if (three || irand(0, 1)) {
        gc_attr_i(c, "q_num_heads", Hq);
        gc_attr_i(c, "kv_num_heads", Hk);
    }
    if (causal || irand(0, 1)) gc_attr_i(c, "is_causal", causal);
    if (irand(0, 1)) gc_attr_f(c, "scale", irand(0, 1) ? 0.5f : 1.25f);
    if (irand(0, 2) == 0) gc_attr_f(c, "softcap", irand(0, 1) ? 1.5f : 3.0f);
    int nout = irand(0, 1) ? 4 : 1;
    if (nout == 4) {
        /* the scores with the mask (2) only where it adds no -inf */
        int mode = (int)irand(0, 3);
        if (mode == 2 && (mk == 1 || causal || (mk && lm < T) || kvl)) mode = 3;
        if (mode || irand(0, 1)) gc_attr_i(c, "qk_matmul_output_mode", mode);
    }
    gc_outputs(c, nout);
    *mask = 0x7;
    describe(c, d, dn);
    return c;
}

/* FlexAttention (no subgraphs): 4-D, grouped-query heads, Dv != Dh, scale. */
static gc *b_flexattn(uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn) {
    rs_seed(seed);
    int64_t B = irand(1, 2), Hk = irand(1, 2), Hq = Hk * irand(1, 2), Sq = irand(1, 3), Skv = irand(1, 3);
    int64_t Dh = irand(1, 3), Dv = irand(1, 3);
    gc *c = gc_new("FlexAttention", 1);
    gc_seed(c, seed);
    int64_t q4[4] = {B, Hq, Sq, Dh}, k4[4] = {B, Hk, Skv, Dh}, v4[4] = {B, Hk, Skv, Dv};
    gc_input(c, dt, 4, q4, NULL);
    gc_input(c, dt, 4, k4, NULL);
    gc_input(c, dt, 4, v4, NULL);
    if (irand(0, 1)) gc_attr_f(c, "scale", 0.5f);
    gc_outputs(c, 1);
    *mask = 0x7;
    describe(c, d, dn);
    return c;
}

/* LinearAttention: each update rule, grouped-query heads, per-head or
 * per-row decay, per-head or shared beta, a past state or none, scale;
 * present_state's gradient checked too (every input differentiable). */
static gc *b_linattn(uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn) {
    static const char *rules[4] = {"linear", "gated", "delta", "gated_delta"};
    rs_seed(seed);
    int rule = (int)irand(0, 3);
    bool gated = rule & 1, delta = rule & 2, past = irand(0, 1);
    int64_t B = irand(1, 2), T = irand(1, 3), Hk = irand(1, 2), Hq = Hk * irand(1, 2), Dk = irand(1, 3),
            Dv = irand(1, 3);
    gc *c = gc_new("LinearAttention", 27);
    gc_seed(c, seed);
    int64_t qs[3] = {B, T, Hq * Dk}, ks[3] = {B, T, Hk * Dk}, vs[3] = {B, T, Hk * Dv}, ps[4] = {B, Hk, Dk, Dv};
    int64_t ds[3] = {B, T, irand(0, 1) ? Hk : Hk * Dk}, bs[3] = {B, T, irand(0, 1) ? Hk : 1};
    gc_input(c, dt, 3, qs, NULL);
    gc_input(c, dt, 3, ks, NULL);
    gc_input(c, dt, 3, vs, NULL);
    *mask = 0x7;
    if (past) gc_input(c, dt, 4, ps, NULL), *mask |= 0x8;
    else if (gated || delta) gc_absent(c);
    if (gated) gc_input(c, dt, 3, ds, NULL), *mask |= 0x10;
    else if (delta) gc_absent(c);
    if (delta) gc_input(c, dt, 3, bs, NULL), *mask |= 0x20;
    gc_attr_i(c, "q_num_heads", Hq);
    gc_attr_i(c, "kv_num_heads", Hk);
    if (rule != 3 || irand(0, 1)) gc_attr_s(c, "update_rule", rules[rule]);
    if (irand(0, 1)) gc_attr_f(c, "scale", 0.75f);
    gc_outputs(c, (int)irand(1, 2));
    describe(c, d, dn);
    return c;
}

/* CausalConvWithState: kernel 1 to 4 (1: an empty state), bias and past
 * state or not, SiLU or none; present_state's gradient checked too. */
static gc *b_ccws(uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn) {
    rs_seed(seed);
    int64_t B = irand(1, 2), C = irand(1, 3), L = irand(1, 4), K = irand(1, 4);
    bool bias = irand(0, 1), past = irand(0, 1);
    gc *c = gc_new("CausalConvWithState", 27);
    gc_seed(c, seed);
    int64_t xs[3] = {B, C, L}, ws[3] = {C, 1, K}, ps[3] = {B, C, K - 1};
    gc_input(c, dt, 3, xs, NULL);
    gc_input(c, dt, 3, ws, NULL);
    *mask = 0x3;
    if (bias) gc_input(c, dt, 1, &C, NULL), *mask |= 0x4;
    else if (past) gc_absent(c);
    if (past) gc_input(c, dt, 3, ps, NULL), *mask |= 0x8;
    int act = (int)irand(0, 2);
    if (act) gc_attr_s(c, "activation", act == 1 ? "silu" : "swish");
    gc_outputs(c, (int)irand(1, 2));
    describe(c, d, dn);
    return c;
}

/* ---- running a case without the finite differences ------------------------------------------------ */

/* Shape rule, output buffers and the exec of a built case (as gc_check does). */
static bool prep(gc *c, pd__exec *x, int threads) {
    pd__node *n = &c->node;
    n->nin = c->nin;
    n->nout = c->nout;
    n->in = malloc(sizeof(int) * (size_t)(c->nin + 1));
    n->out = malloc(sizeof(int) * (size_t)(c->nout + 1));
    memcpy(n->in, c->in, sizeof(int) * (size_t)c->nin);
    memcpy(n->out, c->out, sizeof(int) * (size_t)c->nout);
    if (n->op < 0 || pd__ops[n->op].shape(c->g, n) != PD_OK) {
        snprintf(c->why, sizeof c->why, "shape rule: %s", pd_last_error());
        return false;
    }
    for (int j = 0; j < c->nout; j++) {
        pd__tensor *t = &c->g->tensors[c->out[j]];
        t->data = calloc(1, (size_t)t->numel * pd_dtype_size(t->dtype) + 1);
    }
    *x = (pd__exec){.threads = threads, .g = c->g, .training = c->training, .seed = 1234};
    return true;
}

static void views(gc *c, pd_tensor *iv, pd_tensor **ip, pd_tensor *ov, pd_tensor **op) {
    for (int i = 0; i < c->nin; i++) {
        ip[i] = NULL;
        if (c->in[i] < 0) continue;
        iv[i] = pd__view(&c->g->tensors[c->in[i]]);
        ip[i] = &iv[i];
    }
    for (int j = 0; j < c->nout; j++) {
        ov[j] = pd__view(&c->g->tensors[c->out[j]]);
        op[j] = &ov[j];
    }
}

/* Forward, then backward with fixed random output gradients; g[i] (for the
 * inputs in mask) gets input i's gradient as doubles (free them). The
 * gradient buffers start at `base` (backwards add into them: base is taken
 * off again, so a kernel that overwrites instead of adding shows); y, when
 * not NULL, gets the first output's values (free it). */
static bool run_grads_y(gc *c, uint32_t mask, int threads, double base, double **g, double **y) {
    pd__exec x;
    for (int i = 0; i < c->nin; i++) g[i] = NULL;
    if (y) *y = NULL;
    if (!prep(c, &x, threads)) return false;
    pd_tensor iv[16], ov[16], dov[16], div[16], *ip[16], *op[16], *dop[16], *dip[16];
    views(c, iv, ip, ov, op);
    bool ok = pd__cpu_run(&x, c->g, &c->node, ip, op) == PD_OK;
    if (!ok) snprintf(c->why, sizeof c->why, "forward: %s", pd_last_error());
    uint64_t r = 0x2545f4914f6cdd1dull;
    for (int j = 0; j < c->nout; j++) {
        dop[j] = NULL;
        if (ov[j].dtype != PD_FLOAT && ov[j].dtype != PD_DOUBLE && ov[j].dtype != PD_FLOAT16) continue;
        dov[j] = ov[j];
        int64_t n = pd_tensor_numel(&ov[j]);
        dov[j].data = malloc(sizeof(double) * (size_t)(n + 1));
        for (int64_t k = 0; k < n; k++) {
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
        for (int64_t k = 0; k < pd_tensor_numel(&iv[i]); k++) pd__set_f(div[i].dtype, div[i].data, k, base);
        dip[i] = &div[i];
    }
    if (ok && pd__cpu_run_bwd(&x, c->g, &c->node, ip, op, dop, dip) != PD_OK) {
        snprintf(c->why, sizeof c->why, "backward: %s", pd_last_error());
        ok = false;
    }
    for (int i = 0; i < c->nin; i++) {
        if (!dip[i]) continue;
        int64_t n = pd_tensor_numel(&div[i]);
        g[i] = malloc(sizeof(double) * (size_t)(n + 1));
        for (int64_t k = 0; k < n; k++) g[i][k] = pd__get_f(div[i].dtype, div[i].data, k) - base;
        free(div[i].data);
    }
    if (y && c->nout > 0) {
        int64_t n = pd_tensor_numel(&ov[0]);
        *y = malloc(sizeof(double) * (size_t)(n + 1));
        for (int64_t k = 0; k < n; k++) (*y)[k] = pd__get_f(ov[0].dtype, ov[0].data, k);
    }
    for (int j = 0; j < c->nout; j++)
        if (dop[j]) free(dov[j].data);
    free(x.scratch);
    return ok;
}

static bool run_grads(gc *c, uint32_t mask, int threads, double **g) {
    return run_grads_y(c, mask, threads, 0, g, NULL);
}

/* max |a - b| / max |b| over n values (0 when all are 0). */
static double vec_diff(const double *a, const double *b, int64_t n) {
    double md = 0, mb = 0;
    for (int64_t k = 0; k < n; k++) {
        double e = fabs(a[k] - b[k]);
        if (!(e <= md)) md = e; /* NaN counts */
        if (fabs(b[k]) > mb) mb = fabs(b[k]);
    }
    return md / (mb > 0 ? mb : 1);
}

/* max |a - b| / max |b| over the inputs in mask (0 when all are 0). */
static double grad_diff(gc *c, uint32_t mask, double **a, double **b) {
    double worst = 0;
    for (int i = 0; i < c->nin; i++) {
        if (!((mask >> i) & 1) || !a[i] || !b[i]) continue;
        double md = 0, mb = 0;
        for (int64_t k = 0; k < numel_in(c, i); k++) {
            double e = fabs(a[i][k] - b[i][k]);
            if (!(e <= md)) md = e; /* NaN counts */
            if (fabs(b[i][k]) > mb) mb = fabs(b[i][k]);
        }
        double rel = md / (mb > 0 ? mb : 1);
        if (!(rel <= worst)) worst = rel;
    }
    return worst;
}

static void free_grads(gc *c, double **g) {
    for (int i = 0; i < c->nin; i++) free(g[i]);
}

/* GridSample, 4-D (every mode) or 5-D (nearest, linear), every padding mode,
 * align_corners 0 and 1, the opset 16 and 20 mode names; the grid reaches a
 * little beyond [-1, 1] so the padding is read. Nearest checks X only (its
 * grid gradient is 0). */
static gc *b_gridsample(uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn) {
    static const char *pads[] = {"zeros", "border", "reflection"};
    rs_seed(seed);
    int mode = (int)irand(0, 2), r = mode == 2 ? 2 : (int)irand(2, 3), opset = irand(0, 1) ? 16 : 20;
    static const char *m16[] = {"nearest", "bilinear", "bicubic"}, *m20[] = {"nearest", "linear", "cubic"};
    int64_t xs[5] = {irand(1, 2), irand(1, 2)}, gs[5] = {xs[0]};
    for (int i = 0; i < r; i++) xs[2 + i] = irand(1, 4), gs[1 + i] = irand(1, 3);
    gs[r + 1] = r;
    gc *c = gc_new("GridSample", opset);
    gc_seed(c, seed);
    gc_input(c, dt, r + 2, xs, NULL);
    gc_input(c, dt, r + 2, gs, NULL);
    for (int64_t k = 0; k < numel_in(c, 1); k++) set(c, 1, k, at(c, 1, k) * 1.3);
    if (mode != 1 || irand(0, 1)) gc_attr_s(c, "mode", opset == 16 ? m16[mode] : m20[mode]);
    int64_t p = irand(0, 2);
    if (p || irand(0, 1)) gc_attr_s(c, "padding_mode", pads[p]);
    if (irand(0, 1)) gc_attr_i(c, "align_corners", 1);
    gc_outputs(c, 1);
    *mask = mode == 0 ? 0x1 : 0x3;
    describe(c, d, dn);
    return c;
}

/* AffineGrid 2-D or 3-D, align_corners 0 and 1. */
static gc *b_affinegrid(uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn) {
    rs_seed(seed);
    int r = (int)irand(2, 3);
    int64_t sz[5] = {irand(1, 2), irand(1, 3)}, ts[3] = {sz[0], r, r + 1}, ns[1] = {r + 2};
    for (int i = 0; i < r; i++) sz[2 + i] = irand(1, 4);
    gc *c = gc_new("AffineGrid", 20);
    gc_seed(c, seed);
    gc_input(c, dt, 3, ts, NULL);
    gc_input(c, PD_INT64, 1, ns, sz);
    if (irand(0, 1)) gc_attr_i(c, "align_corners", irand(0, 1));
    gc_outputs(c, 1);
    *mask = 0x1;
    describe(c, d, dn);
    return c;
}

/* Col2Im over 1 to 3 spatial dims, with strides, dilations and pads. */
static gc *b_col2im(uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn) {
    for (uint64_t tries = 0;; tries++) {
        rs_seed(seed * 131 + tries);
        int r = (int)irand(1, 3);
        int64_t img[3], blk[3], st[3], dil[3], pads[6], K = 1, L = 1;
        bool ok = true, hs = irand(0, 1), hp = irand(0, 1);
        for (int i = 0; i < r; i++) {
            img[i] = irand(1, 5), blk[i] = irand(1, 3), st[i] = hs ? irand(1, 2) : 1, dil[i] = irand(1, 2);
            pads[i] = hp ? irand(0, 1) : 0, pads[r + i] = hp ? irand(0, 1) : 0;
            int64_t span = img[i] + pads[i] + pads[r + i] - dil[i] * (blk[i] - 1) - 1;
            if (span < 0) ok = false;
            else K *= blk[i], L *= span / st[i] + 1;
        }
        if (!ok) continue;
        int64_t xs[3] = {irand(1, 2), irand(1, 2) * K, L}, ns[1] = {r};
        gc *c = gc_new("Col2Im", 18);
        gc_seed(c, seed);
        gc_input(c, dt, 3, xs, NULL);
        gc_input(c, PD_INT64, 1, ns, img);
        gc_input(c, PD_INT64, 1, ns, blk);
        if (hs) gc_attr_ints(c, "strides", r, st);
        gc_attr_ints(c, "dilations", r, dil);
        if (hp) gc_attr_ints(c, "pads", 2 * r, pads);
        gc_outputs(c, 1);
        *mask = 0x1;
        describe(c, d, dn);
        return c;
    }
}

/* CenterCropPad: each dim cropped, padded or kept, over all dims or some axes. */
static gc *b_centercroppad(uint64_t seed, pd_dtype dt, uint32_t *mask, char *d, size_t dn) {
    rs_seed(seed);
    int r = (int)irand(1, 4), na = 0;
    int64_t xs[4], sh[4], ax[4];
    for (int i = 0; i < r; i++) xs[i] = irand(1, 5);
    bool axes = irand(0, 1);
    for (int i = 0; i < r; i++)
        if (!axes || irand(0, 1)) {
            ax[na] = irand(0, 1) ? i : i - r;
            sh[na++] = irand(1, 6);
        }
    if (na == 0) ax[0] = 0, sh[na++] = irand(1, 6); /* an empty axes attribute reads as absent */
    gc *c = gc_new("CenterCropPad", 18);
    gc_seed(c, seed);
    gc_input(c, dt, r, xs, NULL);
    int64_t ns[1] = {na};
    gc_input(c, PD_INT64, 1, ns, sh);
    if (axes) gc_attr_ints(c, "axes", na, ax);
    gc_outputs(c, 1);
    *mask = 0x1;
    describe(c, d, dn);
    return c;
}

/* ---- the three checks per op ---------------------------------------------------------------------------- */

typedef struct op_case {
    const char *name;
    build_fn build;
    int n_grad, n_f32; /* cases against finite differences, float32 against float64 */
} op_case;

static uint64_t name_seed(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static void check_gradients(const op_case *oc) {
    for (int i = 0; i < oc->n_grad; i++) {
        char d[512];
        uint32_t mask;
        gc *c = oc->build(name_seed(oc->name) + (uint64_t)i, PD_DOUBLE, &mask, d, sizeof d);
        bool ok = gc_check(c, 1e-6, mask);
        CHECK(ok, "%s gradient #%d %s: %s", oc->name, i, d, gc_why(c));
        gc_free(c);
    }
}

static void check_f32(const op_case *oc) {
    for (int i = 0; i < oc->n_f32; i++) {
        char d[512], d2[512];
        uint32_t mask, mask2;
        uint64_t seed = name_seed(oc->name) + 1000003u * (uint64_t)(i + 1);
        gc *c32 = oc->build(seed, PD_FLOAT, &mask, d, sizeof d);
        gc *c64 = oc->build(seed, PD_DOUBLE, &mask2, d2, sizeof d2);
        /* the same values: float64 gets float32's */
        for (int k = 0; k < c64->nin; k++) {
            if (c64->in[k] < 0) continue;
            const pd__tensor *t = &c32->g->tensors[c32->in[k]];
            if (t->dtype != PD_FLOAT) continue;
            for (int64_t e = 0; e < t->numel; e++) set(c64, k, e, pd__get_f(PD_FLOAT, t->data, e));
        }
        /* float32 (oneDNN's convolutions, where built) against float64 (ours),
         * forward and backward, the gradients added onto 0.5 */
        double *g32[16], *g64[16], *y32 = NULL, *y64 = NULL;
        bool ok = run_grads_y(c32, mask, 1, 0.5, g32, &y32) && run_grads_y(c64, mask, 1, 0.5, g64, &y64);
        double diff = ok ? grad_diff(c64, mask, g32, g64) : INFINITY;
        double ydiff = ok && y32 && y64 ? vec_diff(y32, y64, c64->g->tensors[c64->out[0]].numel) : INFINITY;
        CHECK(ok && diff <= 1e-4 && ydiff <= 1e-5, "%s float32 vs float64 #%d %s: max rel diff %.3g (forward %.3g) %s",
              oc->name, i, d, diff, ydiff, ok ? "" : (c32->why[0] ? c32->why : c64->why));
        free(y32);
        free(y64);
        free_grads(c32, g32);
        free_grads(c64, g64);
        gc_free(c32);
        gc_free(c64);
    }
}

/* float16 (widened to float32 and rounded back: nn.c's half_run) against
 * float64 on the same float16 values, forward and backward, within
 * float16's rounding (inputs, output gradients and the 0.5 added to the
 * gradients each round to 2^-11 relative). */
static void check_f16(const op_case *oc) {
    for (int i = 0; i < oc->n_f32; i++) {
        char d[512], d2[512];
        uint32_t mask, mask2;
        uint64_t seed = name_seed(oc->name) + 7000003u * (uint64_t)(i + 1);
        gc *c16 = oc->build(seed, PD_FLOAT16, &mask, d, sizeof d);
        gc *c64 = oc->build(seed, PD_DOUBLE, &mask2, d2, sizeof d2);
        for (int k = 0; k < c64->nin; k++) {
            if (c64->in[k] < 0) continue;
            const pd__tensor *t = &c16->g->tensors[c16->in[k]];
            if (t->dtype != PD_FLOAT16) continue;
            for (int64_t e = 0; e < t->numel; e++) set(c64, k, e, pd__get_f(PD_FLOAT16, t->data, e));
        }
        double *g16[16], *g64[16], *y16 = NULL, *y64 = NULL;
        bool ok = run_grads_y(c16, mask, 1, 0.5, g16, &y16) && run_grads_y(c64, mask, 1, 0.5, g64, &y64);
        double diff = ok ? grad_diff(c64, mask, g16, g64) : INFINITY;
        double ydiff = ok && y16 && y64 ? vec_diff(y16, y64, c64->g->tensors[c64->out[0]].numel) : INFINITY;
        CHECK(ok && diff <= 1e-2 && ydiff <= 4e-3, "%s float16 vs float64 #%d %s: max rel diff %.3g (forward %.3g) %s",
              oc->name, i, d, diff, ydiff, ok ? "" : (c16->why[0] ? c16->why : c64->why));
        free(y16);
        free(y64);
        free_grads(c16, g16);
        free_grads(c64, g64);
        gc_free(c16);
        gc_free(c64);
    }
}

/* ---- multi-threaded against single-threaded, on cases large enough for OpenMP ------------------------ */

static gc *big_case(int which, uint32_t *mask) {
    int64_t x4[4] = {4, 32, 24, 24}, w4[4] = {32, 32, 3, 3}, w1[4] = {64, 32, 1, 1}, wd[4] = {32, 1, 3, 3};
    int64_t b1 = 32, b64 = 64, pads[4] = {1, 1, 1, 1}, ks[2] = {3, 3}, st[2] = {2, 2};
    gc *c = NULL;
    switch (which) {
    case 0: /* im2col conv */
    case 1: /* 1x1 conv (X is its own columns) */
    case 2: /* depthwise (direct) conv */
        c = gc_new("Conv", 13);
        gc_input(c, PD_DOUBLE, 4, x4, NULL);
        gc_input(c, PD_DOUBLE, 4, which == 0 ? w4 : which == 1 ? w1 : wd, NULL);
        gc_input(c, PD_DOUBLE, 1, which == 1 ? &b64 : &b1, NULL);
        if (which != 1) gc_attr_ints(c, "pads", 4, pads);
        if (which == 2) gc_attr_i(c, "group", 32);
        *mask = 0x7;
        break;
    case 3:
        c = gc_new("ConvTranspose", 13);
        gc_input(c, PD_DOUBLE, 4, x4, NULL);
        gc_input(c, PD_DOUBLE, 4, w4, NULL);
        gc_input(c, PD_DOUBLE, 1, &b1, NULL);
        gc_attr_ints(c, "strides", 2, st);
        *mask = 0x7;
        break;
    case 4:
    case 5:
        c = gc_new(which == 4 ? "MaxPool" : "AveragePool", 12);
        gc_input(c, PD_DOUBLE, 4, x4, NULL);
        gc_attr_ints(c, "kernel_shape", 2, ks);
        gc_attr_ints(c, "pads", 4, pads);
        *mask = 0x1;
        break;
    case 6:
        c = gc_new("BatchNormalization", 15);
        gc_input(c, PD_DOUBLE, 4, x4, NULL);
        for (int i = 0; i < 4; i++) gc_input(c, PD_DOUBLE, 1, &b1, NULL);
        for (int64_t k = 0; k < 32; k++) set(c, 4, k, 1 + at(c, 4, k) * 0.5);
        gc_training(c, true);
        *mask = 0x7;
        break;
    case 7:
        c = gc_new("LayerNormalization", 17);
        gc_input(c, PD_DOUBLE, 4, x4, NULL);
        gc_input(c, PD_DOUBLE, 2, x4 + 2, NULL);
        gc_input(c, PD_DOUBLE, 2, x4 + 2, NULL);
        gc_attr_i(c, "axis", 2);
        *mask = 0x7;
        break;
    case 8:
        c = gc_new("LRN", 13);
        gc_input(c, PD_DOUBLE, 4, x4, NULL);
        gc_attr_i(c, "size", 3);
        *mask = 0x1;
        break;
    case 9:
    case 10:
        c = gc_new(which == 9 ? "Softmax" : "LogSoftmax", 13);
        gc_input(c, PD_DOUBLE, 4, x4, NULL);
        gc_attr_i(c, "axis", which == 9 ? 1 : -1);
        *mask = 0x1;
        break;
    case 12: /* nearest 2x: a plane per thread in the adjoint */
    case 14: { /* BatchNormalization's small planes (2x2), enough of them to split: 300 channels, 5 blocks */
        int64_t xb[4] = {32, 300, 2, 2}, nb = 300;
        c = gc_new("BatchNormalization", 15);
        gc_input(c, PD_DOUBLE, 4, xb, NULL);
        for (int i = 0; i < 4; i++) gc_input(c, PD_DOUBLE, 1, &nb, NULL);
        for (int64_t k = 0; k < nb; k++) set(c, 4, k, 1 + at(c, 4, k) * 0.5);
        gc_training(c, true);
        *mask = 0x7;
        break;
    }
    case 13: { /* linear 2x, align_corners: 4 corners, planes again */
        static const float sc[4] = {1, 1, 2, 2};
        int64_t ns = 4;
        c = gc_new("Resize", 13);
        gc_input(c, PD_DOUBLE, 4, x4, NULL);
        gc_absent(c);
        gc_input(c, PD_FLOAT, 1, &ns, sc);
        gc_attr_s(c, "mode", which == 12 ? "nearest" : "linear");
        if (which == 13) gc_attr_s(c, "coordinate_transformation_mode", "align_corners");
        *mask = 0x1;
        break;
    }
    case 11: {
        c = gc_new("SoftmaxCrossEntropyLoss", 13);
        gc_input(c, PD_DOUBLE, 4, x4, NULL);
        int64_t ls[3] = {4, 24, 24}, *lab = malloc(sizeof(int64_t) * 4 * 24 * 24);
        for (int64_t k = 0; k < 4 * 24 * 24; k++) lab[k] = (k * 7) % 32;
        gc_input(c, PD_INT64, 3, ls, lab);
        free(lab);
        *mask = 0x1;
        break;
    }
    default:
        return NULL;
    }
    gc_outputs(c, 1);
    return c;
}

static void check_threads(void) {
    for (int which = 0; which <= 14; which++) {
        uint32_t mask;
        gc *c1 = big_case(which, &mask), *c2 = big_case(which, &mask);
        double *g1[16], *g2[16];
        bool ok = run_grads(c1, mask, 1, g1) && run_grads(c2, mask, 2, g2);
        double diff = ok ? grad_diff(c1, mask, g2, g1) : INFINITY;
        CHECK(ok && diff <= 1e-12, "%s 2 threads vs 1: max rel diff %.3g %s", c1->node.op_type, diff,
              ok ? "" : c1->why);
        free_grads(c1, g1);
        free_grads(c2, g2);
        gc_free(c1);
        gc_free(c2);
    }
}

/* ---- BatchNormalization's training-session forward ----------------------------------------------------- */

static void check_bn_forward(void) {
    /* X (2, 2, 2): channel 0 holds 1 2 | 3 4, channel 1 holds 0 0 | 0 4 */
    double X[8] = {1, 2, 0, 0, 3, 4, 0, 4}, sc[2] = {2, 1}, bi[2] = {0.5, -1}, rm[2] = {0, 1}, rv[2] = {1, 2};
    int64_t xs[3] = {2, 2, 2}, ps = 2;
    for (int mode = 0; mode < 3; mode++) { /* 0 session, 1 inference, 2 training_mode=1 outside a session */
        gc *c = gc_new("BatchNormalization", 15);
        gc_input(c, PD_DOUBLE, 3, xs, X);
        gc_input(c, PD_DOUBLE, 1, &ps, sc);
        gc_input(c, PD_DOUBLE, 1, &ps, bi);
        gc_input(c, PD_DOUBLE, 1, &ps, rm);
        gc_input(c, PD_DOUBLE, 1, &ps, rv);
        gc_attr_f(c, "epsilon", 1e-5f);
        gc_attr_f(c, "momentum", 0.9f); /* PyTorch's momentum 0.1 */
        if (mode == 2) gc_attr_i(c, "training_mode", 1);
        gc_training(c, mode == 0);
        gc_outputs(c, mode == 2 ? 3 : 1);
        pd__exec x;
        bool ok = prep(c, &x, 1);
        pd_tensor iv[16], ov[16], *ip[16], *op[16];
        views(c, iv, ip, ov, op);
        ok = ok && pd__cpu_run(&x, c->g, &c->node, ip, op) == PD_OK;
        double eps = (double)1e-5f;
        /* batch: mean 2.5 and 1, biased var 1.25 and 3, unbiased 5/3 and 4 */
        double bm[2] = {2.5, 1}, bv[2] = {1.25, 3}, uv[2] = {5.0 / 3, 4};
        double worst = 0;
        const double *y = ov[0].data;
        for (int k = 0; k < 8; k++) {
            int ch = (k / 2) % 2;
            double m = mode == 1 ? rm[ch] : bm[ch], v = mode == 1 ? rv[ch] : bv[ch];
            double want = (X[k] - m) / sqrt(v + eps) * sc[ch] + bi[ch];
            worst = fmax(worst, fabs(y[k] - want));
        }
        CHECK(ok && worst < 1e-12, "BatchNormalization forward (%s): Y max diff %.3g",
              mode == 0 ? "session" : mode == 1 ? "inference" : "training_mode=1", worst);
        /* running statistics: in place with the unbiased variance in a session;
         * untouched otherwise, the node's own mode putting them (biased) in outputs 1, 2 */
        const double *im = gc_data(c, 3), *iv_ = gc_data(c, 4);
        double want_m[2], want_v[2];
        double mo = (double)0.9f; /* the attribute is a float */
        for (int ch = 0; ch < 2; ch++) {
            want_m[ch] = mode == 0 ? mo * rm[ch] + (1 - mo) * bm[ch] : rm[ch];
            want_v[ch] = mode == 0 ? mo * rv[ch] + (1 - mo) * uv[ch] : rv[ch];
        }
        /* by hand, with momentum 0.9: 0.25, 1.0 and 1.0666667, 2.2 */
        if (mode == 0)
            CHECK(fabs(want_m[0] - 0.25) < 1e-7 && fabs(want_m[1] - 1.0) < 1e-7 &&
                      fabs(want_v[0] - 1.0666666666666667) < 1e-7 && fabs(want_v[1] - 2.2) < 1e-7,
                  "BatchNormalization expected running statistics (by hand)");
        double dm = 0;
        for (int ch = 0; ch < 2; ch++) dm = fmax(dm, fmax(fabs(im[ch] - want_m[ch]), fabs(iv_[ch] - want_v[ch])));
        CHECK(ok && dm < 1e-12, "BatchNormalization running statistics inputs (%s): max diff %.3g",
              mode == 0 ? "session: updated in place, unbiased variance" : mode == 1 ? "inference: unchanged"
                                                                                     : "training_mode=1: unchanged",
              dm);
        if (mode == 2) {
            const double *om = ov[1].data, *ovv = ov[2].data;
            double d2 = 0;
            for (int ch = 0; ch < 2; ch++)
                d2 = fmax(d2, fmax(fabs(om[ch] - (mo * rm[ch] + (1 - mo) * bm[ch])),
                                   fabs(ovv[ch] - (mo * rv[ch] + (1 - mo) * bv[ch]))));
            CHECK(ok && d2 < 1e-12, "BatchNormalization training_mode=1 outputs running statistics (biased): max diff %.3g",
                  d2);
        }
        free(x.scratch);
        gc_free(c);
    }
    /* a second session step moves the running statistics again, from the updated values */
    gc *c = gc_new("BatchNormalization", 15);
    gc_input(c, PD_DOUBLE, 3, xs, X);
    gc_input(c, PD_DOUBLE, 1, &ps, sc);
    gc_input(c, PD_DOUBLE, 1, &ps, bi);
    gc_input(c, PD_DOUBLE, 1, &ps, rm);
    gc_input(c, PD_DOUBLE, 1, &ps, rv);
    gc_attr_f(c, "momentum", 0.5f);
    gc_training(c, true);
    gc_outputs(c, 1);
    pd__exec x;
    bool ok = prep(c, &x, 1);
    pd_tensor iv[16], ov[16], *ip[16], *op[16];
    views(c, iv, ip, ov, op);
    ok = ok && pd__cpu_run(&x, c->g, &c->node, ip, op) == PD_OK && pd__cpu_run(&x, c->g, &c->node, ip, op) == PD_OK;
    const double *im = gc_data(c, 3), *iv_ = gc_data(c, 4);
    /* channel 0: mean 0 -> 1.25 -> 1.875; var 1 -> 4/3 -> 1.5 */
    CHECK(ok && fabs(im[0] - 1.875) < 1e-12 && fabs(iv_[0] - 1.5) < 1e-12,
          "BatchNormalization two session steps, momentum 0.5: running mean %.6g (1.875), var %.6g (1.5)", im[0],
          iv_[0]);
    free(x.scratch);
    gc_free(c);
}

/* ---- Dropout's training mask ------------------------------------------------------------------------------ */

/* Runs Dropout on ones (n) in a session with seed and name; y gets the output,
 * dx the backward of dY = ones; mask (when non-NULL) the mask output. */
static bool dropout_run(int64_t n, double ratio, uint64_t seed, const char *name, bool training, int threads,
                        double *y, double *dx, uint8_t *mask) {
    gc *c = gc_new("Dropout", 13);
    free(c->node.name);
    c->node.name = pd__strdup(name);
    double *ones = malloc(sizeof(double) * (size_t)n);
    for (int64_t k = 0; k < n; k++) ones[k] = 1;
    gc_input(c, PD_DOUBLE, 1, &n, ones);
    gc_input(c, PD_DOUBLE, 0, NULL, &ratio);
    gc_training(c, training);
    gc_outputs(c, 2);
    pd__exec x;
    bool ok = prep(c, &x, threads);
    x.seed = seed;
    pd_tensor iv[16], ov[16], *ip[16], *op[16];
    views(c, iv, ip, ov, op);
    ok = ok && pd__cpu_run(&x, c->g, &c->node, ip, op) == PD_OK;
    if (ok) {
        memcpy(y, ov[0].data, sizeof(double) * (size_t)n);
        if (mask) memcpy(mask, ov[1].data, (size_t)n);
        pd_tensor dy = ov[0], d = iv[0];
        dy.data = ones;
        d.data = calloc((size_t)n, sizeof(double));
        pd_tensor *dop[2] = {&dy, NULL}, *dip[2] = {&d, NULL};
        ok = pd__cpu_run_bwd(&x, c->g, &c->node, ip, op, dop, dip) == PD_OK;
        memcpy(dx, d.data, sizeof(double) * (size_t)n);
        free(d.data);
    }
    free(ones);
    free(x.scratch);
    gc_free(c);
    return ok;
}

static void check_dropout(void) {
    enum { N = 100000 };
    double *y1 = malloc(sizeof(double) * N), *y2 = malloc(sizeof(double) * N), *dx = malloc(sizeof(double) * N);
    uint8_t *m = malloc(N);
    double ratio = 0.25;
    bool ok = dropout_run(N, ratio, 42, "drop1", true, 1, y1, dx, m);
    int64_t zeros = 0, bad = 0, same = 0;
    for (int64_t k = 0; k < N; k++) {
        zeros += y1[k] == 0;
        bad += !(y1[k] == 0 || fabs(y1[k] - 1 / 0.75) < 1e-15); /* kept values scaled by 1/(1-ratio) */
        bad += (m[k] != 0) != (y1[k] != 0);
        same += dx[k] == y1[k]; /* the backward draws the same mask */
    }
    double rate = (double)zeros / N;
    CHECK(ok && fabs(rate - ratio) < 0.01 && bad == 0, "Dropout session: drop rate %.4f (ratio %g), %lld bad values",
          rate, ratio, (long long)bad);
    CHECK(ok && same == N, "Dropout session: the backward's mask is the forward's (%lld of %d)", (long long)same, N);
    ok = dropout_run(N, ratio, 42, "drop1", true, 2, y2, dx, NULL);
    CHECK(ok && !memcmp(y1, y2, sizeof(double) * N), "Dropout session: same seed and node, 2 threads: same mask");
    ok = dropout_run(N, ratio, 43, "drop1", true, 1, y2, dx, NULL);
    int64_t diff = 0;
    for (int64_t k = 0; k < N; k++) diff += (y1[k] == 0) != (y2[k] == 0);
    CHECK(ok && diff > N / 4, "Dropout session: another seed, another mask (%lld of %d differ)", (long long)diff, N);
    ok = dropout_run(N, ratio, 42, "drop2", true, 1, y2, dx, NULL);
    diff = 0;
    for (int64_t k = 0; k < N; k++) diff += (y1[k] == 0) != (y2[k] == 0);
    CHECK(ok && diff > N / 4, "Dropout session: another node, another mask (%lld of %d differ)", (long long)diff, N);
    ok = dropout_run(N, ratio, 42, "drop1", false, 1, y2, dx, m);
    bad = 0;
    for (int64_t k = 0; k < N; k++) bad += y2[k] != 1 || dx[k] != 1 || m[k] != 1;
    CHECK(ok && bad == 0, "Dropout outside a session: identity, gradient passes through (%lld bad)", (long long)bad);
    free(y1);
    free(y2);
    free(dx);
    free(m);
}

/* ---- MaxPool with ties: the gradient goes where the forward's Indices point -------------------------------- */

static void check_maxpool_ties(void) {
    for (int i = 0; i < 24; i++) {
        uint32_t mask;
        char d[512];
        gc *c = b_maxpool(name_seed("ties") + (uint64_t)i, PD_DOUBLE, &mask, d, sizeof d);
        gc_outputs(c, 2); /* with Indices, row-major */
        for (int k = 0; k < c->node.nattr; k++)
            if (!strcmp(c->node.attr[k].name, "storage_order")) c->node.attr[k].i = 0;
        for (int64_t k = 0; k < numel_in(c, 0); k++) set(c, 0, k, (double)irand(0, 2)); /* many ties */
        pd__exec x;
        bool ok = prep(c, &x, 1);
        pd_tensor iv[16], ov[16], *ip[16], *op[16];
        views(c, iv, ip, ov, op);
        ok = ok && pd__cpu_run(&x, c->g, &c->node, ip, op) == PD_OK;
        int64_t nx = numel_in(c, 0), ny = pd_tensor_numel(&ov[0]);
        double *want = calloc((size_t)nx, sizeof(double)), *dy = malloc(sizeof(double) * (size_t)ny);
        pd_tensor dyt = ov[0], dxt = iv[0];
        dyt.data = dy;
        dxt.data = calloc((size_t)nx, sizeof(double));
        for (int64_t o = 0; o < ny; o++) {
            dy[o] = (double)(o % 7) - 3;
            if (ok) want[((const int64_t *)ov[1].data)[o]] += dy[o];
        }
        pd_tensor *dop[2] = {&dyt, NULL}, *dip[1] = {&dxt};
        ok = ok && pd__cpu_run_bwd(&x, c->g, &c->node, ip, op, dop, dip) == PD_OK;
        int64_t bad = 0;
        for (int64_t k = 0; k < nx; k++) bad += ((double *)dxt.data)[k] != want[k];
        CHECK(ok && bad == 0, "MaxPool ties #%d %s: gradient at the forward's Indices (%lld differ)", i, d,
              (long long)bad);
        free(want);
        free(dy);
        free(dxt.data);
        free(x.scratch);
        gc_free(c);
    }
}

/* ---- split B/W on conv and gemm with the other gradient absent: nothing is touched --------------------- */

static void check_untouched(void) {
    /* asking for nothing, or with no output gradient, leaves din alone */
    uint32_t mask;
    char d[512];
    gc *c = b_conv(7, PD_DOUBLE, &mask, d, sizeof d);
    pd__exec x;
    bool ok = prep(c, &x, 1);
    pd_tensor iv[16], ov[16], *ip[16], *op[16];
    views(c, iv, ip, ov, op);
    ok = ok && pd__cpu_run(&x, c->g, &c->node, ip, op) == PD_OK;
    pd_tensor dx = iv[0];
    dx.data = malloc(sizeof(double) * (size_t)pd_tensor_numel(&iv[0]));
    for (int64_t k = 0; k < pd_tensor_numel(&iv[0]); k++) ((double *)dx.data)[k] = 3;
    pd_tensor *dop[1] = {NULL}, *dip[3] = {&dx, NULL, NULL};
    ok = ok && pd__cpu_run_bwd(&x, c->g, &c->node, ip, op, dop, dip) == PD_OK;
    int64_t bad = 0;
    for (int64_t k = 0; k < pd_tensor_numel(&iv[0]); k++) bad += ((double *)dx.data)[k] != 3;
    CHECK(ok && bad == 0, "Conv backward without an output gradient adds nothing (%lld changed)", (long long)bad);
    free(dx.data);
    free(x.scratch);
    gc_free(c);
}

/* runtime/cpu/dnnl.c: float32 convolutions on oneDNN where built */
void pd__dnnl_stats(int64_t *ran, int64_t *declined);
void pd__dnnl_release(void);

int main(void) {
    static const op_case ops[] = {
        {"Gemm", b_gemm, 60, 10},
        {"Gemm (fused Linear, A of rank 3-4)", b_linear, 40, 8},
        {"MatMul", b_matmul, 60, 10},
        {"Conv", b_conv, 120, 64},
        {"ConvTranspose", b_convt, 100, 16},
        {"BatchNormalization", b_bn, 80, 12},
        {"BatchNormalization over 70 channels", b_bn_wide, 4, 4},
        {"LayerNormalization", b_ln, 80, 12},
        {"InstanceNormalization", b_in, 40, 8},
        {"GroupNormalization", b_gn, 60, 10},
        {"RMSNormalization", b_rms, 60, 10},
        {"LpNormalization", b_lpn, 40, 8},
        {"MeanVarianceNormalization", b_mvn, 40, 8},
        {"MaxPool", b_maxpool, 100, 12},
        {"AveragePool", b_avgpool, 100, 12},
        {"GlobalAveragePool", b_gap, 20, 6},
        {"GlobalMaxPool", b_gmp, 20, 6},
        {"LpPool", b_lppool, 60, 10},
        {"MaxUnpool", b_maxunpool, 40, 8},
        {"Resize", b_resize, 160, 16},
        {"Upsample", b_upsample, 30, 6},
        {"Einsum", b_einsum, 80, 12},
        {"Einsum (ellipsis, diagonals)", b_einsum_diag, 60, 10},
        {"Det", b_det, 60, 10},
        {"DeformConv", b_deform, 80, 12},
        {"LRN", b_lrn, 50, 8},
        {"Softmax", b_softmax, 50, 8},
        {"LogSoftmax", b_logsoftmax, 50, 8},
        {"Dropout", b_dropout, 40, 8},
        {"SoftmaxCrossEntropyLoss", b_sce, 80, 12},
        {"NegativeLogLikelihoodLoss", b_nll, 40, 8},
        {"RotaryEmbedding", b_rope, 40, 8},
        {"Attention", b_attn, 100, 12},
        {"FlexAttention", b_flexattn, 40, 8},
        {"LinearAttention", b_linattn, 80, 12},
        {"CausalConvWithState", b_ccws, 60, 10},
        {"GridSample", b_gridsample, 120, 16},
        {"AffineGrid", b_affinegrid, 30, 6},
        {"Col2Im", b_col2im, 60, 10},
        {"CenterCropPad", b_centercroppad, 40, 8},
    };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        check_gradients(&ops[i]);
        check_f32(&ops[i]);
        static const char *half[] = {"MatMul", "Conv", "Softmax", "LogSoftmax", "Attention", "FlexAttention"};
        for (size_t h = 0; h < sizeof half / sizeof half[0]; h++)
            if (strcmp(ops[i].name, half[h]) == 0) check_f16(&ops[i]);
    }
    gc_threads = 2; /* batched products split over threads: the same values */
    static const op_case par = {"MatMul of 12 batches on 2 threads", b_matmul_batched, 8, 4};
    check_gradients(&par);
    check_f32(&par);
    gc_threads = 1;
    check_threads();
    check_bn_forward();
    check_dropout();
    check_maxpool_ties();
    check_untouched();
#ifdef PD_HAVE_ONEDNN
    { /* the float32 checks above ran on oneDNN: it declined none of their convolutions */
        int64_t ran, declined;
        pd__dnnl_stats(&ran, &declined);
        const char *off = getenv("PD_NO_ONEDNN");
        if (!(off && *off && strcmp(off, "0") != 0))
            CHECK(ran > 0 && declined == 0, "oneDNN ran the float32 convolutions (%lld runs, %lld declined)",
                  (long long)ran, (long long)declined);
        pd__dnnl_release();
    }
#endif
    char missing[1024];
    CHECK(gc_uncovered(PD_OPF_NN, missing, sizeof missing) == 0,
          "every differentiable neural-network op (core/ops.h) has a passing finite-difference case:%s",
          missing[0] ? missing : " yes");
    return check_summary();
}
