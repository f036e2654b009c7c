/* test_grad_tensor.c - the backward kernels of the tensor ops
 * (runtime/cpu/tensor.c): Flatten, Reshape, Unsqueeze, Squeeze,
 * Transpose, Concat, Split, Slice, Gather, Expand, Pad, CumSum, CumProd,
 * Compress, ReverseSequence, Trilu, Tile,
 * GatherElements, GatherND, ScatterElements, ScatterND, TopK, DepthToSpace,
 * SpaceToDepth.
 *
 * 1. Finite differences (tests/gradcheck.h) in float64 on many random small
 *    cases of every op: ranks 1-5, negative axes, Slice with negative steps
 *    and clamped ends, Gather with repeated and negative indices on several
 *    axes, Split with unequal sizes, Pad in every mode.
 * 2. An exact reference on the same random cases and on large ones, in
 *    float32 and float64, on two threads: these forwards only move elements,
 *    so with input element k set to the tag k + 1 every output element names
 *    the input element it came from (or is a pad constant <= 0), and the
 *    gradient is din[tag - 1] += dout[o], summed in double. That also checks
 *    Split with an absent output gradient, and float32 against float64.
 * 3. Errors: the ops with no gradient, a bad Gather index, an integer dtype.
 *    Forwards finite differences cannot see: ArgMax/ArgMin/TopK/Hardmax ties,
 *    integer and bool data, OneHot's wrapped and out-of-range indices, the
 *    scatter reductions; TopK's runtime K and a max-scatter's backward refused;
 *    TfIdfVectorizer's weightings against onnx.reference.
 * 4. Timings (informative) of the embedding backward and the attention
 *    transposes.
 */
#include "check.h"
#include "gradcheck.h"

#include <stdint.h>
#include <stdlib.h>
#include <time.h>

/* ---- random parameters -------------------------------------------------------- */

static uint64_t rs = 0x243f6a8885a308d3ull;
static uint64_t next_u64(void) {
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return rs;
}
static int64_t irand(int64_t lo, int64_t hi) { return lo + (int64_t)(next_u64() % (uint64_t)(hi - lo + 1)); }

/* A random shape of rank r whose dims keep the element count small. */
static void rand_shape(int r, int64_t *s) {
    int64_t hi = r <= 2 ? 6 : r == 3 ? 4 : 3;
    for (int d = 0; d < r; d++) s[d] = irand(1, hi);
}

static void shuffle(int n, int64_t *v) {
    for (int i = n - 1; i > 0; i--) {
        int j = (int)irand(0, i);
        int64_t t = v[i];
        v[i] = v[j];
        v[j] = t;
    }
}

static char *fmt_shape(char *buf, int r, const int64_t *s) {
    pd__format_shape(buf, 64, r, s);
    return buf;
}

static char *fmt_ints(char *buf, int k, const int64_t *v) {
    int o = snprintf(buf, 96, "(");
    for (int i = 0; i < k && o < 90; i++) {
        if (v[i] == INT64_MAX)
            o += snprintf(buf + o, 96 - (size_t)o, "%sMAX", i ? "," : "");
        else if (v[i] == INT64_MIN)
            o += snprintf(buf + o, 96 - (size_t)o, "%sMIN", i ? "," : "");
        else
            o += snprintf(buf + o, 96 - (size_t)o, "%s%lld", i ? "," : "", (long long)v[i]);
    }
    snprintf(buf + o, 96 - (size_t)o, ")");
    return buf;
}

static void in_ints(gc *c, int k, const int64_t *v) {
    int64_t len = k;
    gc_input(c, PD_INT64, 1, &len, v);
}

/* A case: the graph, what it is, which inputs get gradients, which outputs
 * have none (dout NULL; the exact reference only). */
typedef struct tcase {
    char desc[256];
    uint32_t mask;
    uint32_t no_dout;
} tcase;

typedef gc *(*build_fn)(pd_dtype dt, tcase *tc);

/* ---- random cases, one builder per op ------------------------------------------------ */

static gc *b_flatten(pd_dtype dt, tcase *tc) {
    int r = (int)irand(1, 5);
    int64_t s[8], axis = irand(-r, r);
    rand_shape(r, s);
    gc *c = gc_new("Flatten", 13);
    gc_input(c, dt, r, s, NULL);
    gc_attr_i(c, "axis", axis);
    gc_outputs(c, 1);
    char a[64];
    snprintf(tc->desc, sizeof tc->desc, "Flatten %s axis %lld", fmt_shape(a, r, s), (long long)axis);
    return c;
}

static gc *b_reshape(pd_dtype dt, tcase *tc) {
    int r = (int)irand(1, 5), k = 0;
    int64_t s[8], t[8];
    rand_shape(r, s);
    for (int d = 0; d < r; d++) {
        if (k > 0 && irand(0, 2) == 0)
            t[k - 1] *= s[d];
        else
            t[k++] = s[d];
    }
    if (irand(0, 3) == 0) t[k++] = 1;
    if (irand(0, 1)) t[irand(0, k - 1)] = -1;
    if (t[0] == s[0] && irand(0, 1)) t[0] = 0; /* copies the input's dim 0 */
    gc *c = gc_new("Reshape", 14);
    gc_input(c, dt, r, s, NULL);
    in_ints(c, k, t);
    gc_outputs(c, 1);
    char a[64], b[96];
    snprintf(tc->desc, sizeof tc->desc, "Reshape %s to %s", fmt_shape(a, r, s), fmt_ints(b, k, t));
    return c;
}

static gc *b_unsqueeze(pd_dtype dt, tcase *tc) {
    int r = (int)irand(0, 4), k = (int)irand(1, 5 - r), ro = r + k, opset = irand(0, 1) ? 13 : 11;
    int64_t s[8] = {1}, ax[8];
    rand_shape(r, s);
    for (int i = 0; i < ro; i++) ax[i] = i;
    shuffle(ro, ax);
    for (int i = 0; i < k; i++)
        if (irand(0, 1)) ax[i] -= ro;
    gc *c = gc_new("Unsqueeze", opset);
    gc_input(c, dt, r, s, NULL);
    if (opset >= 13)
        in_ints(c, k, ax);
    else
        gc_attr_ints(c, "axes", k, ax);
    gc_outputs(c, 1);
    char a[64], b[96];
    snprintf(tc->desc, sizeof tc->desc, "Unsqueeze-%d %s axes %s", opset, fmt_shape(a, r, s), fmt_ints(b, k, ax));
    return c;
}

static gc *b_squeeze(pd_dtype dt, tcase *tc) {
    int r = (int)irand(1, 5), opset = irand(0, 1) ? 13 : 11, k = 0;
    int64_t s[8], ax[8];
    rand_shape(r, s);
    for (int d = 0; d < r; d++)
        if (irand(0, 1)) s[d] = 1;
    for (int d = 0; d < r; d++)
        if (s[d] == 1 && irand(0, 2) > 0) ax[k++] = irand(0, 1) ? d : d - r;
    gc *c = gc_new("Squeeze", opset);
    gc_input(c, dt, r, s, NULL);
    if (k > 0 && opset >= 13)
        in_ints(c, k, ax);
    else if (k > 0)
        gc_attr_ints(c, "axes", k, ax);
    gc_outputs(c, 1);
    char a[64], b[96];
    snprintf(tc->desc, sizeof tc->desc, "Squeeze-%d %s axes %s", opset, fmt_shape(a, r, s),
             k ? fmt_ints(b, k, ax) : "(none)");
    return c;
}

static gc *b_transpose(pd_dtype dt, tcase *tc) {
    int r = (int)irand(1, 5);
    int64_t s[8], p[8];
    rand_shape(r, s);
    for (int d = 0; d < r; d++) p[d] = d;
    shuffle(r, p);
    bool def = irand(0, 4) == 0;
    gc *c = gc_new("Transpose", 13);
    gc_input(c, dt, r, s, NULL);
    if (!def) gc_attr_ints(c, "perm", r, p);
    gc_outputs(c, 1);
    char a[64], b[96];
    snprintf(tc->desc, sizeof tc->desc, "Transpose %s perm %s", fmt_shape(a, r, s),
             def ? "(default)" : fmt_ints(b, r, p));
    return c;
}

static gc *b_concat(pd_dtype dt, tcase *tc) {
    int r = (int)irand(1, 4), ni = (int)irand(1, 4), ax = (int)irand(-r, r - 1), a = ax < 0 ? ax + r : ax;
    int64_t s[8], sizes[8];
    rand_shape(r, s);
    gc *c = gc_new("Concat", 13);
    for (int i = 0; i < ni; i++) {
        sizes[i] = irand(0, 3);
        s[a] = sizes[i];
        gc_input(c, dt, r, s, NULL);
    }
    gc_attr_i(c, "axis", ax);
    gc_outputs(c, 1);
    tc->mask = (1u << ni) - 1;
    char b[64], e[96];
    s[a] = -1;
    snprintf(tc->desc, sizeof tc->desc, "Concat of %s with %s along axis %d", fmt_shape(b, r, s),
             fmt_ints(e, ni, sizes), ax);
    return c;
}

static gc *b_split(pd_dtype dt, tcase *tc) {
    int r = (int)irand(1, 4), ax = (int)irand(-r, r - 1), a = ax < 0 ? ax + r : ax, how = (int)irand(0, 3);
    int nout = (int)irand(1, 4), opset = how == 1 ? 11 : how == 2 ? 18 : 13;
    int64_t s[8], D = irand(1, 7), sizes[8];
    rand_shape(r, s);
    s[a] = D;
    if (how == 2) { /* num_outputs: equal parts, the last one smaller */
        int64_t div = (D + nout - 1) / nout;
        while (nout > 1 && div * (nout - 1) > D) {
            nout--;
            div = (D + nout - 1) / nout;
        }
    } else if (how == 3) { /* equal parts, no split given */
        while (D % nout != 0) nout--;
    } else { /* unequal sizes (some 0) adding up to D */
        int64_t cut[9];
        cut[0] = 0;
        cut[nout] = D;
        for (int j = 1; j < nout; j++) cut[j] = irand(0, D);
        for (int j = 1; j < nout; j++) /* sort the inner cuts */
            for (int i = j; i > 1 && cut[i] < cut[i - 1]; i--) {
                int64_t t = cut[i];
                cut[i] = cut[i - 1];
                cut[i - 1] = t;
            }
        for (int j = 0; j < nout; j++) sizes[j] = cut[j + 1] - cut[j];
    }
    gc *c = gc_new("Split", opset);
    gc_input(c, dt, r, s, NULL);
    if (how == 0) in_ints(c, nout, sizes);
    if (how == 1) gc_attr_ints(c, "split", nout, sizes);
    if (how == 2) gc_attr_i(c, "num_outputs", nout);
    gc_attr_i(c, "axis", ax);
    gc_outputs(c, nout);
    if (nout > 1 && irand(0, 1)) tc->no_dout = 1u << irand(0, nout - 1);
    char b[64], e[96];
    if (how <= 1)
        fmt_ints(e, nout, sizes);
    else
        snprintf(e, sizeof e, "%d %sparts", nout, how == 2 ? "(num_outputs) " : "equal ");
    snprintf(tc->desc, sizeof tc->desc, "Split-%d %s axis %d into %s, outputs without gradient 0x%x", opset,
             fmt_shape(b, r, s), ax, e, tc->no_dout);
    return c;
}

static int64_t slice_bound(int64_t D) {
    switch (irand(0, 7)) {
    case 0:
        return INT64_MAX;
    case 1:
        return INT64_MIN;
    case 2:
        return -D - irand(1, 3); /* clamped at the front */
    case 3:
        return D + irand(0, 3); /* clamped at the back */
    default:
        return irand(-D, D - 1);
    }
}

static gc *b_slice(pd_dtype dt, tcase *tc) {
    int r = (int)irand(1, 4), k = (int)irand(1, r), how = (int)irand(0, 3);
    static const int64_t steps[] = {1, 1, 2, 3, -1, -1, -2, -3};
    int64_t s[8], ax[8], st[8], en[8], sp[8], axv[8];
    for (int d = 0; d < r; d++) s[d] = irand(1, r <= 2 ? 7 : 4);
    for (int i = 0; i < r; i++) ax[i] = i;
    if (how != 1) shuffle(r, ax); /* without an axes input, starts cover axes 0..k-1 */
    for (int i = 0; i < k; i++) {
        int64_t D = s[ax[i]];
        sp[i] = how >= 2 ? 1 : steps[irand(0, 7)];
        st[i] = slice_bound(D);
        en[i] = slice_bound(D);
        axv[i] = irand(0, 1) ? ax[i] - r : ax[i];
    }
    int opset = how == 3 ? 9 : 13;
    gc *c = gc_new("Slice", opset);
    gc_input(c, dt, r, s, NULL);
    if (how == 3) {
        gc_attr_ints(c, "starts", k, st);
        gc_attr_ints(c, "ends", k, en);
        gc_attr_ints(c, "axes", k, axv);
    } else {
        in_ints(c, k, st);
        in_ints(c, k, en);
        if (how == 1)
            gc_absent(c);
        else
            in_ints(c, k, axv);
        if (how <= 1) in_ints(c, k, sp);
    }
    gc_outputs(c, 1);
    char b[64], e1[96], e2[96], e3[96], e4[96];
    snprintf(tc->desc, sizeof tc->desc, "Slice-%d %s starts %s ends %s axes %s steps %s", opset, fmt_shape(b, r, s),
             fmt_ints(e1, k, st), fmt_ints(e2, k, en), how == 1 ? "(none)" : fmt_ints(e3, k, axv), fmt_ints(e4, k, sp));
    return c;
}

static gc *b_gather(pd_dtype dt, tcase *tc) {
    int r = (int)irand(1, 3), ax = (int)irand(-r, r - 1), a = ax < 0 ? ax + r : ax, q = (int)irand(0, 2);
    int64_t s[8], is[8], idx[64], N, nidx = 1;
    for (int d = 0; d < r; d++) s[d] = irand(1, 5);
    N = s[a];
    for (int d = 0; d < q; d++) nidx *= is[d] = irand(1, 4);
    int64_t pool[3] = {irand(-N, N - 1), irand(-N, N - 1), irand(-N, N - 1)};
    for (int64_t j = 0; j < nidx; j++) idx[j] = irand(0, 1) ? pool[irand(0, 2)] : irand(-N, N - 1);
    bool i32 = irand(0, 3) == 0;
    int32_t idx32[64];
    for (int64_t j = 0; j < nidx; j++) idx32[j] = (int32_t)idx[j];
    gc *c = gc_new("Gather", 13);
    gc_input(c, dt, r, s, NULL);
    gc_input(c, i32 ? PD_INT32 : PD_INT64, q, is, i32 ? (const void *)idx32 : (const void *)idx);
    gc_attr_i(c, "axis", ax);
    gc_outputs(c, 1);
    char b[64], e[96];
    snprintf(tc->desc, sizeof tc->desc, "Gather %s axis %d indices %s %s", fmt_shape(b, r, s), ax,
             i32 ? "int32" : "int64", fmt_ints(e, (int)nidx, idx));
    return c;
}

static gc *b_expand(pd_dtype dt, tcase *tc) {
    int ri = (int)irand(1, 4), rt = (int)irand(1, 5);
    int64_t s[8], t[8];
    for (int d = 0; d < ri; d++) s[d] = irand(0, 1) ? 1 : irand(2, 3);
    for (int i = 0; i < rt; i++) { /* aligned from the right */
        int id = ri - 1 - i;
        int64_t v = id < 0 ? 1 : s[id];
        t[rt - 1 - i] = v == 1 ? irand(1, 3) : irand(0, 2) ? v : 1;
    }
    gc *c = gc_new("Expand", 13);
    gc_input(c, dt, ri, s, NULL);
    in_ints(c, rt, t);
    gc_outputs(c, 1);
    char b[64], e[96];
    snprintf(tc->desc, sizeof tc->desc, "Expand %s to %s", fmt_shape(b, ri, s), fmt_ints(e, rt, t));
    return c;
}

static const char *pad_modes[] = {"constant", "reflect", "edge", "wrap"};

static gc *b_pad(pd_dtype dt, tcase *tc) {
    int r = irand(0, 15) == 0 ? 0 : (int)irand(1, 4), mode = (int)irand(0, 3), how = (int)irand(0, 2);
    int opset = mode == 3 ? 19 : how == 0 ? 2 : how == 1 ? 13 : 18;
    int64_t s[8], ax[8], pads[16];
    rand_shape(r, s);
    int k = r;
    for (int i = 0; i < r; i++) ax[i] = i;
    if (opset >= 18 && r > 0 && irand(0, 1)) { /* an axes input: some axes, any order */
        shuffle(r, ax);
        k = (int)irand(1, r);
    }
    for (int i = 0; i < k; i++) {
        int64_t D = s[ax[i]], b, e;
        do {
            if (mode == 1) { /* reflect: mostly within the axis, sometimes past it */
                b = irand(-1, irand(0, 3) ? D - 1 : D + 2);
                e = irand(-1, irand(0, 3) ? D - 1 : D + 2);
            } else {
                b = irand(-1, 3);
                e = irand(-1, 3);
            }
        } while (D + b + e < 0);
        pads[i] = b;
        pads[k + i] = e;
        if (irand(0, 1)) ax[i] -= r;
    }
    bool cv = mode == 0 && irand(0, 1);
    gc *c = gc_new("Pad", opset);
    gc_input(c, dt, r, s, NULL);
    gc_attr_s(c, "mode", pad_modes[mode]);
    if (opset < 11) {
        gc_attr_ints(c, "pads", 2 * k, pads);
        if (cv) gc_attr_f(c, "value", -0.5f);
    } else {
        in_ints(c, 2 * k, pads);
        if (cv) {
            float f = -0.5f;
            double d = -0.5;
            gc_input(c, dt, 0, s, dt == PD_FLOAT ? (const void *)&f : (const void *)&d);
        } else if (opset >= 18 && k < r) {
            gc_absent(c);
        }
        if (k < r) in_ints(c, k, ax);
    }
    gc_outputs(c, 1);
    char b[64], e1[96], e2[96];
    snprintf(tc->desc, sizeof tc->desc, "Pad-%d %s %s pads %s axes %s%s", opset, pad_modes[mode], fmt_shape(b, r, s),
             fmt_ints(e1, 2 * k, pads), k < r ? fmt_ints(e2, k, ax) : "(all)", cv ? " value -0.5" : "");
    return c;
}

/* ---- mask-building, index, selection and layout ops ------------------------------------ */

static gc *b_cumsum(pd_dtype dt, tcase *tc) {
    int r = (int)irand(1, 4), ax = (int)irand(-r, r - 1);
    int64_t s[8], a = ax, ex = irand(0, 1), rev = irand(0, 1);
    rand_shape(r, s);
    bool i32 = irand(0, 1);
    int32_t a32 = (int32_t)a;
    gc *c = gc_new("CumSum", 14);
    gc_input(c, dt, r, s, NULL);
    gc_input(c, i32 ? PD_INT32 : PD_INT64, 0, s, i32 ? (const void *)&a32 : (const void *)&a);
    if (ex || irand(0, 1)) gc_attr_i(c, "exclusive", ex);
    if (rev || irand(0, 1)) gc_attr_i(c, "reverse", rev);
    gc_outputs(c, 1);
    char b[64];
    snprintf(tc->desc, sizeof tc->desc, "CumSum %s axis %d (%s) exclusive %lld reverse %lld", fmt_shape(b, r, s), ax,
             i32 ? "int32" : "int64", (long long)ex, (long long)rev);
    return c;
}

/* Some elements exactly 0: the backward does not divide by x, so a zero (or
 * two) in a run gives the products of the others, as finite differences do. */
static gc *b_cumprod(pd_dtype dt, tcase *tc) {
    int r = (int)irand(1, 4), ax = (int)irand(-r, r - 1);
    int64_t s[8], a = ax, ex = irand(0, 1), rev = irand(0, 1);
    rand_shape(r, s);
    gc *c = gc_new("CumProd", 26);
    int i = gc_input(c, dt, r, s, NULL);
    gc_input(c, PD_INT64, 0, s, &a);
    int64_t total = c->g->tensors[c->in[i]].numel, zeros = irand(0, 2);
    for (int64_t z = 0; z < zeros; z++) pd__set_f(dt, gc_data(c, i), irand(0, total - 1), 0.0);
    if (ex || irand(0, 1)) gc_attr_i(c, "exclusive", ex);
    if (rev || irand(0, 1)) gc_attr_i(c, "reverse", rev);
    gc_outputs(c, 1);
    char b[64];
    snprintf(tc->desc, sizeof tc->desc, "CumProd %s axis %d exclusive %lld reverse %lld, %lld zeros",
             fmt_shape(b, r, s), ax, (long long)ex, (long long)rev, (long long)zeros);
    return c;
}

static gc *b_compress(pd_dtype dt, tcase *tc) {
    int r = (int)irand(1, 4);
    int64_t s[8], ax = irand(-r, r);
    rand_shape(r, s);
    bool flat = ax == r; /* no axis: the input flattened */
    int64_t dim = flat ? 1 : s[ax < 0 ? ax + r : ax];
    for (int d = 0; flat && d < r; d++) dim *= s[d];
    int64_t len = irand(0, dim);
    uint8_t cond[512];
    for (int64_t j = 0; j < len; j++) cond[j] = (uint8_t)irand(0, 1);
    gc *c = gc_new("Compress", 11);
    gc_input(c, dt, r, s, NULL);
    gc_input(c, PD_BOOL, 1, &len, cond);
    if (!flat) gc_attr_i(c, "axis", ax);
    gc_outputs(c, 1);
    char b[64];
    snprintf(tc->desc, sizeof tc->desc, "Compress %s axis %s%lld, %lld conditions", fmt_shape(b, r, s),
             flat ? "(none) " : "", (long long)(flat ? 0 : ax), (long long)len);
    return c;
}

static gc *b_reverse_sequence(pd_dtype dt, tcase *tc) {
    int r = (int)irand(2, 4);
    int64_t s[8], ta = irand(0, 1), lens[8];
    rand_shape(r, s);
    for (int64_t b = 0; b < s[1 - ta]; b++) lens[b] = irand(0, s[ta]);
    gc *c = gc_new("ReverseSequence", 10);
    gc_input(c, dt, r, s, NULL);
    gc_input(c, PD_INT64, 1, &s[1 - ta], lens);
    if (ta || irand(0, 1)) {
        gc_attr_i(c, "time_axis", ta);
        gc_attr_i(c, "batch_axis", 1 - ta);
    }
    gc_outputs(c, 1);
    char b[64], e[96];
    snprintf(tc->desc, sizeof tc->desc, "ReverseSequence %s time_axis %lld lens %s", fmt_shape(b, r, s),
             (long long)ta, fmt_ints(e, (int)s[1 - ta], lens));
    return c;
}

static gc *b_trilu(pd_dtype dt, tcase *tc) {
    int r = (int)irand(2, 4);
    int64_t s[8], k = irand(-4, 4), up = irand(0, 1);
    rand_shape(r, s);
    bool hask = irand(0, 3) > 0;
    gc *c = gc_new("Trilu", 14);
    gc_input(c, dt, r, s, NULL);
    if (hask) gc_input(c, PD_INT64, 0, s, &k);
    if (up == 0 || irand(0, 1)) gc_attr_i(c, "upper", up);
    gc_outputs(c, 1);
    char b[64];
    snprintf(tc->desc, sizeof tc->desc, "Trilu %s upper %lld k %lld%s", fmt_shape(b, r, s), (long long)up,
             hask ? (long long)k : 0LL, hask ? "" : " (absent)");
    return c;
}

static gc *b_tile(pd_dtype dt, tcase *tc) {
    int r = (int)irand(1, 4);
    int64_t s[8], rep[8];
    rand_shape(r, s);
    for (int d = 0; d < r; d++) {
        if (s[d] > 3) s[d] = 3;
        rep[d] = irand(0, 5) == 0 ? 0 : irand(1, 3);
    }
    bool one = irand(0, 3) == 0; /* Tile-1: a scalar tiles along one axis */
    int64_t ax = irand(-r, r - 1);
    if (one)
        for (int d = 0; d < r; d++) rep[d] = d == (ax < 0 ? ax + r : ax) ? rep[d] : 1;
    gc *c = gc_new("Tile", one ? 1 : 13);
    gc_input(c, dt, r, s, NULL);
    if (one) {
        gc_input(c, PD_INT64, 0, s, &rep[ax < 0 ? ax + r : ax]);
        gc_input(c, PD_INT64, 0, s, &ax);
    } else {
        in_ints(c, r, rep);
    }
    gc_outputs(c, 1);
    char b[64], e[96];
    snprintf(tc->desc, sizeof tc->desc, "Tile-%d %s repeats %s%s", one ? 1 : 13, fmt_shape(b, r, s), fmt_ints(e, r, rep),
             one ? " (tiles, axis)" : "");
    return c;
}

static gc *b_gather_elements(pd_dtype dt, tcase *tc) {
    int r = (int)irand(1, 3), ax = (int)irand(-r, r - 1), a = ax < 0 ? ax + r : ax;
    int64_t s[8], is[8], idx[64], ni = 1;
    for (int d = 0; d < r; d++) s[d] = irand(1, 4);
    for (int d = 0; d < r; d++) ni *= is[d] = d == a ? irand(1, 4) : irand(1, s[d]);
    for (int64_t j = 0; j < ni; j++) idx[j] = irand(-s[a], s[a] - 1);
    bool i32 = irand(0, 3) == 0;
    int32_t idx32[64];
    for (int64_t j = 0; j < ni; j++) idx32[j] = (int32_t)idx[j];
    gc *c = gc_new("GatherElements", 13);
    gc_input(c, dt, r, s, NULL);
    gc_input(c, i32 ? PD_INT32 : PD_INT64, r, is, i32 ? (const void *)idx32 : (const void *)idx);
    gc_attr_i(c, "axis", ax);
    gc_outputs(c, 1);
    char b[64], e[64], f[96];
    snprintf(tc->desc, sizeof tc->desc, "GatherElements %s axis %d indices %s %s", fmt_shape(b, r, s), ax,
             fmt_shape(e, r, is), fmt_ints(f, (int)ni, idx));
    return c;
}

static gc *b_gather_nd(pd_dtype dt, tcase *tc) {
    int r = (int)irand(1, 4), bd = (int)irand(0, r - 1), m = (int)irand(1, r - bd), q = bd + (int)irand(0, 2) + 1;
    int64_t s[8] = {0}, is[8], idx[128], nt = 1;
    for (int d = 0; d < r; d++) s[d] = irand(1, 3);
    for (int d = 0; d < q - 1; d++) is[d] = d < bd ? s[d] : irand(1, 3);
    is[q - 1] = m;
    for (int d = 0; d < q - 1; d++) nt *= is[d];
    for (int64_t t = 0; t < nt; t++)
        for (int l = 0; l < m; l++) idx[t * m + l] = irand(-s[bd + l], s[bd + l] - 1);
    gc *c = gc_new("GatherND", 13);
    gc_input(c, dt, r, s, NULL);
    gc_input(c, PD_INT64, q, is, idx);
    if (bd || irand(0, 1)) gc_attr_i(c, "batch_dims", bd);
    gc_outputs(c, 1);
    char b[64], e[64], f[96];
    snprintf(tc->desc, sizeof tc->desc, "GatherND %s batch_dims %d indices %s %s", fmt_shape(b, r, s), bd,
             fmt_shape(e, q, is), fmt_ints(f, (int)(nt * m), idx));
    return c;
}

static bool scatter_add;    /* the scatter builders: reduction add, else none (distinct targets) */
static bool scatter_legacy; /* b_scatter_elements builds opset 9's Scatter (no reduction attribute) */

static gc *b_scatter_elements(pd_dtype dt, tcase *tc) {
    int r = (int)irand(1, 3), ax = (int)irand(-r, r - 1), a = ax < 0 ? ax + r : ax;
    int64_t s[8], is[8], idx[64], ni = 1, id[8] = {0};
    for (int d = 0; d < r; d++) s[d] = irand(1, 4);
    for (int d = 0; d < r; d++) ni *= is[d] = d == a ? irand(1, s[d]) : irand(1, s[d]);
    /* none: within a line along the axis the targets are distinct (a shifted run) */
    int64_t seed0 = irand(0, 100);
    for (int64_t j = 0; j < ni; j++) {
        int64_t key = 0;
        for (int d = 0; d < r; d++)
            if (d != a) key += id[d] * (d + 3);
        int64_t v = scatter_add ? irand(0, s[a] - 1) : (id[a] + key * seed0 + seed0) % s[a];
        idx[j] = irand(0, 1) ? v - s[a] : v;
        for (int d = r - 1; d >= 0; d--) {
            if (++id[d] < is[d]) break;
            id[d] = 0;
        }
    }
    gc *c = gc_new(scatter_legacy ? "Scatter" : "ScatterElements", scatter_legacy ? 9 : 16);
    gc_input(c, dt, r, s, NULL);
    gc_input(c, PD_INT64, r, is, idx);
    gc_input(c, dt, r, is, NULL);
    gc_attr_i(c, "axis", ax);
    if (scatter_legacy)
        ;
    else if (scatter_add)
        gc_attr_s(c, "reduction", "add");
    else if (irand(0, 1))
        gc_attr_s(c, "reduction", "none");
    gc_outputs(c, 1);
    tc->mask = 0x5;
    char b[64], e[64], f[96];
    snprintf(tc->desc, sizeof tc->desc, "%s-%s %s axis %d indices %s %s",
             scatter_legacy ? "Scatter" : "ScatterElements", scatter_add ? "add" : "none",
             fmt_shape(b, r, s), ax, fmt_shape(e, r, is), fmt_ints(f, (int)ni, idx));
    return c;
}

/* TensorScatter (opset 24): a cache of rank 2 to 4, the sequence axis any but
 * the batch axis, write indices per batch (absent: 0), linear or circular
 * (wrapping past the end). */
static gc *b_tensor_scatter(pd_dtype dt, tcase *tc) {
    int r = (int)irand(2, 4), a = (int)irand(1, r - 1);
    int64_t s[8], us[8], wi[8], B;
    for (int d = 0; d < r; d++) s[d] = us[d] = irand(1, 3);
    s[a] = irand(1, 5);
    us[a] = irand(1, s[a]);
    B = s[0];
    bool circ = irand(0, 1), given = irand(0, 3) != 0;
    for (int64_t b = 0; b < B; b++) wi[b] = circ ? irand(0, s[a] - 1) : irand(0, s[a] - us[a]);
    gc *c = gc_new("TensorScatter", 24);
    gc_input(c, dt, r, s, NULL);
    gc_input(c, dt, r, us, NULL);
    if (given) gc_input(c, PD_INT64, 1, &B, wi);
    gc_attr_i(c, "axis", irand(0, 1) ? a : a - r);
    if (circ) gc_attr_s(c, "mode", "circular");
    else if (irand(0, 1)) gc_attr_s(c, "mode", "linear");
    gc_outputs(c, 1);
    tc->mask = 0x3;
    char b[64], e[64], f[96];
    snprintf(tc->desc, sizeof tc->desc, "TensorScatter-%s cache %s update %s axis %d write_indices %s",
             circ ? "circular" : "linear", fmt_shape(b, r, s), fmt_shape(e, r, us), a,
             given ? fmt_ints(f, (int)B, wi) : "absent");
    return c;
}

static gc *b_scatter_nd(pd_dtype dt, tcase *tc) {
    int r = (int)irand(1, 3), m = (int)irand(1, r), q = (int)irand(1, 3);
    int64_t s[8], is[8], us[8], idx[64], nt = 1;
    for (int d = 0; d < r; d++) s[d] = irand(1, 4);
    int64_t cells = 1;
    for (int l = 0; l < m; l++) cells *= s[l];
    for (int d = 0; d < q - 1; d++) nt *= is[d] = irand(1, 3);
    if (!scatter_add && nt > cells) q = 1, nt = 1; /* none: distinct targets */
    is[q - 1] = m;
    int64_t cell[64];
    for (int64_t i = 0; i < cells; i++) cell[i] = i;
    shuffle((int)cells, cell);
    for (int64_t t = 0; t < nt; t++) {
        int64_t v = scatter_add ? irand(0, cells - 1) : cell[t];
        for (int l = m - 1; l >= 0; l--) {
            idx[t * m + l] = irand(0, 1) ? v % s[l] - s[l] : v % s[l];
            v /= s[l];
        }
    }
    int ru = 0;
    for (int d = 0; d < q - 1; d++) us[ru++] = is[d];
    for (int d = m; d < r; d++) us[ru++] = s[d];
    gc *c = gc_new("ScatterND", 16);
    gc_input(c, dt, r, s, NULL);
    gc_input(c, PD_INT64, q, is, idx);
    gc_input(c, dt, ru, us, NULL);
    if (scatter_add) gc_attr_s(c, "reduction", "add");
    gc_outputs(c, 1);
    tc->mask = 0x5;
    char b[64], e[64], f[96];
    snprintf(tc->desc, sizeof tc->desc, "ScatterND-%s %s indices %s %s", scatter_add ? "add" : "none",
             fmt_shape(b, r, s), fmt_shape(e, q, is), fmt_ints(f, (int)(nt * m), idx));
    return c;
}

static gc *b_topk(pd_dtype dt, tcase *tc) {
    int r = (int)irand(1, 3), ax = (int)irand(-r, r - 1), a = ax < 0 ? ax + r : ax, opset = irand(0, 3) ? 11 : 1;
    int64_t s[8], k, largest = irand(0, 1);
    rand_shape(r, s);
    k = irand(0, s[a]);
    gc *c = gc_new("TopK", opset);
    gc_input(c, dt, r, s, NULL);
    if (opset >= 10) {
        int64_t one = 1;
        gc_input(c, PD_INT64, 1, &one, &k);
        gc_attr_i(c, "largest", largest);
    } else {
        gc_attr_i(c, "k", k);
        largest = 1;
    }
    gc_attr_i(c, "axis", ax);
    gc_outputs(c, 2);
    tc->no_dout = 0x2;
    char b[64];
    snprintf(tc->desc, sizeof tc->desc, "TopK-%d %s axis %d k %lld largest %lld", opset, fmt_shape(b, r, s), ax,
             (long long)k, (long long)largest);
    return c;
}

static gc *b_space_depth(pd_dtype dt, tcase *tc, bool to_space) {
    int64_t bs = irand(1, 3), s[4] = {irand(1, 2), irand(1, 3), irand(1, 3), irand(1, 3)};
    if (to_space)
        s[1] *= bs * bs;
    else
        s[2] *= bs, s[3] *= bs;
    bool crd = to_space && irand(0, 1);
    gc *c = gc_new(to_space ? "DepthToSpace" : "SpaceToDepth", 13);
    gc_input(c, dt, 4, s, NULL);
    gc_attr_i(c, "blocksize", bs);
    if (crd || (to_space && irand(0, 1))) gc_attr_s(c, "mode", crd ? "CRD" : "DCR");
    gc_outputs(c, 1);
    char b[64];
    snprintf(tc->desc, sizeof tc->desc, "%s %s blocksize %lld%s", to_space ? "DepthToSpace" : "SpaceToDepth",
             fmt_shape(b, 4, s), (long long)bs, crd ? " CRD" : "");
    return c;
}
static gc *b_depth_to_space(pd_dtype dt, tcase *tc) { return b_space_depth(dt, tc, true); }
static gc *b_space_to_depth(pd_dtype dt, tcase *tc) { return b_space_depth(dt, tc, false); }

/* ---- the exact reference ---------------------------------------------------------------- */

typedef struct mc_res {
    int nin;
    int64_t numel[16];
    double *grad[16];   /* the gradient the backward added */
    double *refabs[16]; /* sum of |dout| over the elements that feed each one */
} mc_res;

static void mc_free(mc_res *m) {
    for (int i = 0; i < 16; i++) {
        free(m->grad[i]);
        free(m->refabs[i]);
    }
    memset(m, 0, sizeof *m);
}

/* Binds the node's inputs and outputs, runs the shape rule, allocates the outputs. */
static bool prepare(gc *c, char *why, size_t nwhy) {
    pd__node *n = &c->node;
    n->nin = c->nin;
    n->nout = c->nout;
    n->in = malloc(sizeof(int) * (size_t)(c->nin + 1));
    n->out = malloc(sizeof(int) * (size_t)(c->nout + 1));
    memcpy(n->in, c->in, sizeof(int) * (size_t)c->nin);
    memcpy(n->out, c->out, sizeof(int) * (size_t)c->nout);
    if (n->op < 0 || pd__ops[n->op].shape(c->g, n) != PD_OK) {
        snprintf(why, nwhy, "shape rule: %s", pd_last_error());
        return false;
    }
    for (int j = 0; j < c->nout; j++) {
        pd__tensor *t = &c->g->tensors[c->out[j]];
        t->data = calloc(1, (size_t)t->numel * pd_dtype_size(t->dtype) + 1);
    }
    return true;
}

/* Runs case c (data inputs of dtype dt) against the tag reference. */
static bool mc_run(gc *c, pd_dtype dt, const tcase *tc, int threads, mc_res *res, char *why, size_t nwhy) {
    memset(res, 0, sizeof *res);
    if (!prepare(c, why, nwhy)) return false;
    pd__node *n = &c->node;
    uint32_t mask = tc->mask ? tc->mask : 1;
    int64_t tagbase[16] = {0}, base = 0;
    for (int i = 0; i < c->nin; i++) {
        if (!((mask >> i) & 1) || c->in[i] < 0) continue;
        pd__tensor *t = &c->g->tensors[c->in[i]];
        for (int64_t k = 0; k < t->numel; k++) pd__set_f(t->dtype, t->data, k, (double)(base + k + 1));
        tagbase[i] = base;
        base += t->numel;
    }
    if (dt == PD_FLOAT && base >= (1 << 24)) {
        snprintf(why, nwhy, "too many elements to tag in float32");
        return false;
    }
    pd__exec x = {.threads = threads, .g = c->g};
    pd_tensor iv[16], ov[16], *ip[16], *op[16], dov[16], *dop[16], div[16], *dip[16];
    gc__views(c, iv, ip, ov, op);
    bool ok = true;
    double *r[16] = {0}, *pre[16] = {0};
    if (pd__cpu_run(&x, c->g, n, ip, op) != PD_OK) {
        snprintf(why, nwhy, "forward: %s", pd_last_error());
        ok = false;
        goto done;
    }
    gc_seed(c, 4242); /* the same dout and prefill in both dtypes */
    for (int j = 0; j < c->nout; j++) {
        const pd__tensor *t = &c->g->tensors[c->out[j]];
        dop[j] = NULL;
        if ((tc->no_dout >> j) & 1) continue;
        r[j] = malloc(sizeof(double) * (size_t)(t->numel + 1));
        dov[j] = pd__view(t);
        dov[j].data = malloc((size_t)t->numel * pd_dtype_size(t->dtype) + 1);
        for (int64_t k = 0; k < t->numel; k++) {
            r[j][k] = (double)(float)gc_rand(c);
            pd__set_f(t->dtype, dov[j].data, k, r[j][k]);
        }
        dop[j] = &dov[j];
    }
    res->nin = c->nin;
    for (int i = 0; i < c->nin; i++) {
        dip[i] = NULL;
        if (!((mask >> i) & 1) || c->in[i] < 0) continue;
        const pd__tensor *t = &c->g->tensors[c->in[i]];
        res->numel[i] = t->numel;
        res->grad[i] = calloc((size_t)t->numel + 1, sizeof(double));
        res->refabs[i] = calloc((size_t)t->numel + 1, sizeof(double));
        pre[i] = malloc(sizeof(double) * (size_t)(t->numel + 1));
        div[i] = pd__view(t);
        div[i].data = malloc((size_t)t->numel * pd_dtype_size(t->dtype) + 1);
        for (int64_t k = 0; k < t->numel; k++) {
            pre[i][k] = (double)(float)gc_rand(c);
            pd__set_f(t->dtype, div[i].data, k, pre[i][k]);
        }
        dip[i] = &div[i];
    }
    /* the reference, from the tags */
    double *ref[16] = {0};
    for (int i = 0; i < c->nin; i++)
        if (dip[i]) ref[i] = calloc((size_t)res->numel[i] + 1, sizeof(double));
    for (int j = 0; j < c->nout && ok; j++) {
        if (!r[j]) continue;
        const pd__tensor *t = &c->g->tensors[c->out[j]];
        for (int64_t o = 0; o < t->numel && ok; o++) {
            double v = pd__get_f(t->dtype, t->data, o);
            if (v <= 0) continue; /* a pad constant */
            int64_t tag = (int64_t)v - 1;
            int i = 0;
            while (i < c->nin && !(dip[i] && tag >= tagbase[i] && tag < tagbase[i] + res->numel[i])) i++;
            if (i == c->nin || (double)(tag + 1) != v) {
                snprintf(why, nwhy, "forward output %d element %lld is %g, not a tag", j, (long long)o, v);
                ok = false;
                break;
            }
            ref[i][tag - tagbase[i]] += r[j][o];
            res->refabs[i][tag - tagbase[i]] += fabs(r[j][o]);
        }
    }
    if (ok && pd__cpu_run_bwd(&x, c->g, n, ip, op, dop, dip) != PD_OK) {
        snprintf(why, nwhy, "backward: %s", pd_last_error());
        ok = false;
    }
    double tol = dt == PD_FLOAT ? 1e-5 : 1e-12;
    for (int i = 0; i < c->nin; i++) {
        if (!dip[i]) continue;
        for (int64_t k = 0; k < res->numel[i] && ok; k++) {
            double after = pd__get_f(dt, div[i].data, k), g = after - pre[i][k];
            res->grad[i][k] = g;
            if (!(fabs(g - ref[i][k]) <= tol * (res->refabs[i][k] + fabs(pre[i][k]) + 1))) {
                snprintf(why, nwhy, "input %d element %lld: added %.9g, expected %.9g", i, (long long)k, g, ref[i][k]);
                ok = false;
            }
        }
        free(div[i].data);
        free(ref[i]);
    }
done:
    for (int j = 0; j < c->nout; j++) {
        if (r[j]) free(dov[j].data);
        free(r[j]);
    }
    for (int i = 0; i < 16; i++) free(pre[i]);
    free(x.scratch);
    return ok;
}

/* A case in float64 and float32 against the reference, then against each other. */
static bool mc_both(build_fn build, int threads, char *desc, size_t ndesc, char *why, size_t nwhy) {
    uint64_t saved = rs;
    tcase t64 = {0}, t32 = {0};
    mc_res r64, r32;
    gc *c = build(PD_DOUBLE, &t64);
    snprintf(desc, ndesc, "%s", t64.desc);
    bool ok = mc_run(c, PD_DOUBLE, &t64, threads, &r64, why, nwhy);
    gc_free(c);
    rs = saved;
    c = build(PD_FLOAT, &t32);
    if (ok) {
        ok = mc_run(c, PD_FLOAT, &t32, threads, &r32, why, nwhy);
        if (!ok) {
            char w[512];
            snprintf(w, sizeof w, "float32: %s", why);
            snprintf(why, nwhy, "%s", w);
        }
        for (int i = 0; i < r64.nin && ok; i++)
            for (int64_t k = 0; k < r64.numel[i] && ok; k++)
                if (!(fabs(r32.grad[i][k] - r64.grad[i][k]) <= 1e-5 * (r64.refabs[i][k] + 1))) {
                    snprintf(why, nwhy, "float32 and float64 differ at input %d element %lld: %.9g vs %.9g", i,
                             (long long)k, r32.grad[i][k], r64.grad[i][k]);
                    ok = false;
                }
        mc_free(&r32);
    }
    gc_free(c);
    mc_free(&r64);
    return ok;
}

/* ---- the random suites ---------------------------------------------------------------------- */

static void suite(const char *name, build_fn build, int nfd, int nmc) {
    int fails = 0;
    char first[1024] = "";
    for (int i = 0; i < nfd; i++) {
        tcase tc = {0};
        gc *c = build(PD_DOUBLE, &tc);
        if (!gc_check(c, 1e-6, tc.mask ? tc.mask : 1)) {
            printf("  finite differences, %s: %s\n", tc.desc, gc_why(c));
            if (!fails++) snprintf(first, sizeof first, "%s: %s", tc.desc, gc_why(c));
        }
        gc_free(c);
    }
    CHECK(fails == 0, "%s: %d random cases match finite differences (float64)%s%s", name, nfd, fails ? "; first: " : "",
          first);
    fails = 0;
    for (int i = 0; i < nmc; i++) {
        char desc[256], why[512];
        if (!mc_both(build, 2, desc, sizeof desc, why, sizeof why)) {
            printf("  exact reference, %s: %s\n", desc, why);
            if (!fails++) snprintf(first, sizeof first, "%s: %s", desc, why);
        }
    }
    CHECK(fails == 0, "%s: %d random cases match the exact reference, float32 and float64 alike%s%s", name, nmc,
          fails ? "; first: " : "", first);
}

/* ---- large cases: the tiled, threaded and hot paths ---------------------------------------------- */

static int big_which;

static gc *b_big(pd_dtype dt, tcase *tc) {
    gc *c = NULL;
    switch (big_which) {
    case 0:
    case 1:
    case 2:
    case 3: { /* the attention permutations, and one more */
        static const int64_t perms[4][4] = {{0, 2, 1, 3}, {0, 2, 3, 1}, {0, 1, 3, 2}, {3, 0, 2, 1}};
        int64_t s[4] = {3, 8, 67, 40};
        c = gc_new("Transpose", 13);
        gc_input(c, dt, 4, s, NULL);
        gc_attr_ints(c, "perm", 4, perms[big_which]);
        char e[96];
        snprintf(tc->desc, sizeof tc->desc, "Transpose [3,8,67,40] perm %s", fmt_ints(e, 4, perms[big_which]));
        break;
    }
    case 4: { /* odd sizes, partial tiles */
        int64_t s[3] = {5, 37, 450}, p[3] = {2, 0, 1};
        c = gc_new("Transpose", 13);
        gc_input(c, dt, 3, s, NULL);
        gc_attr_ints(c, "perm", 3, p);
        snprintf(tc->desc, sizeof tc->desc, "Transpose [5,37,450] perm (2,0,1)");
        break;
    }
    case 5:
    case 6: { /* an embedding table: axis 0, repeated and negative indices */
        int64_t s[2] = {1000, 96}, is[2] = {16, 64};
        static int64_t idx[1024];
        for (int j = 0; j < 1024; j++) idx[j] = irand(0, 3) == 0 ? irand(0, 9) : irand(-1000, 999);
        c = gc_new("Gather", 13);
        gc_input(c, dt, 2, s, NULL);
        gc_input(c, PD_INT64, 2, is, idx);
        if (big_which == 6) gc_attr_i(c, "axis", -2);
        snprintf(tc->desc, sizeof tc->desc, "Gather [1000,96] axis %s, indices [16,64]", big_which == 6 ? "-2" : "0");
        break;
    }
    case 7: { /* axis 1 with a few outer blocks */
        int64_t s[3] = {3, 300, 64}, is[1] = {200};
        static int64_t idx[200];
        for (int j = 0; j < 200; j++) idx[j] = irand(-300, 299);
        c = gc_new("Gather", 13);
        gc_input(c, dt, 3, s, NULL);
        gc_input(c, PD_INT64, 1, is, idx);
        gc_attr_i(c, "axis", 1);
        snprintf(tc->desc, sizeof tc->desc, "Gather [3,300,64] axis 1, indices [200]");
        break;
    }
    case 8: { /* the last axis: many outer blocks of single elements */
        int64_t s[3] = {64, 40, 30}, is[2] = {5, 10};
        static int64_t idx[50];
        for (int j = 0; j < 50; j++) idx[j] = irand(-30, 29);
        c = gc_new("Gather", 13);
        gc_input(c, dt, 3, s, NULL);
        gc_input(c, PD_INT64, 2, is, idx);
        gc_attr_i(c, "axis", -1);
        snprintf(tc->desc, sizeof tc->desc, "Gather [64,40,30] axis -1, indices [5,10]");
        break;
    }
    case 9:
    case 10:
    case 11: { /* Expand: inner sums, outer sums, all summed */
        static const int64_t ins[3][3] = {{64, 1, 64}, {256, 0, 0}, {1, 0, 0}};
        static const int64_t outs[3][4] = {{4, 64, 16, 64}, {512, 256, 0, 0}, {100000, 0, 0, 0}};
        static const int ri[3] = {3, 1, 1}, ro[3] = {4, 2, 1};
        int w = big_which - 9;
        c = gc_new("Expand", 13);
        gc_input(c, dt, ri[w], ins[w], NULL);
        in_ints(c, ro[w], outs[w]);
        char a[64], e[96];
        snprintf(tc->desc, sizeof tc->desc, "Expand %s to %s", fmt_shape(a, ri[w], ins[w]),
                 fmt_ints(e, ro[w], outs[w]));
        break;
    }
    case 12:
    case 13:
    case 14:
    case 15: { /* Pad, every mode, with a crop */
        int64_t s[4] = {4, 16, 30, 33}, pads[8] = {0, -1, 3, 2, 1, 0, 2, -3};
        int mode = big_which - 12;
        c = gc_new("Pad", mode == 3 ? 19 : 13);
        gc_input(c, dt, 4, s, NULL);
        in_ints(c, 8, pads);
        gc_attr_s(c, "mode", pad_modes[mode]);
        snprintf(tc->desc, sizeof tc->desc, "Pad %s [4,16,30,33] pads (0,-1,3,2,1,0,2,-3)", pad_modes[mode]);
        break;
    }
    case 16: { /* Slice with steps of both signs */
        int64_t s[3] = {40, 64, 70}, st[3] = {-1, 3, INT64_MAX}, en[3] = {INT64_MIN, 60, 2}, ax[3] = {2, 1, -3},
                sp[3] = {-1, 2, -3};
        c = gc_new("Slice", 13);
        gc_input(c, dt, 3, s, NULL);
        in_ints(c, 3, st);
        in_ints(c, 3, en);
        in_ints(c, 3, ax);
        in_ints(c, 3, sp);
        snprintf(tc->desc, sizeof tc->desc, "Slice [40,64,70] axes (2,1,-3) steps (-1,2,-3)");
        break;
    }
    case 17: { /* Concat along a middle axis */
        int64_t s[3] = {32, 10, 300};
        c = gc_new("Concat", 13);
        for (int i = 0; i < 3; i++) {
            s[1] = 10 + 7 * i;
            gc_input(c, dt, 3, s, NULL);
        }
        gc_attr_i(c, "axis", -2);
        tc->mask = 0x7;
        snprintf(tc->desc, sizeof tc->desc, "Concat [32,{10,17,24},300] axis -2");
        break;
    }
    case 18:
    case 19: { /* Split, the middle output without a gradient */
        int64_t s[3] = {32, 96, 300}, sizes[3] = {10, 50, 36};
        c = gc_new("Split", 13);
        gc_input(c, dt, 3, s, NULL);
        in_ints(c, 3, sizes);
        gc_attr_i(c, "axis", 1);
        gc_outputs(c, 3);
        tc->no_dout = big_which == 18 ? 0x2 : 0;
        snprintf(tc->desc, sizeof tc->desc, "Split [32,96,300] axis 1 into (10,50,36)%s",
                 big_which == 18 ? ", no gradient for output 1" : "");
        return c;
    }
    case 20: { /* Reshape, contiguous */
        int64_t s[3] = {64, 32, 64}, t[2] = {-1, 128};
        c = gc_new("Reshape", 14);
        gc_input(c, dt, 3, s, NULL);
        in_ints(c, 2, t);
        snprintf(tc->desc, sizeof tc->desc, "Reshape [64,32,64] to (-1,128)");
        break;
    }
    default:
        return NULL;
    }
    gc_outputs(c, 1);
    return c;
}

/* ---- errors ------------------------------------------------------------------------------------ */

static void test_errors(void) {
    pd__exec x = {.threads = 1};
    pd__node nd = {0};
    nd.name = "n";
    nd.op_type = "Shape";
    pd_status s1 = pd__cpu_Shape_bwd(&x, &nd, NULL, NULL, NULL, NULL);
    pd_status s2 = pd__cpu_Constant_bwd(&x, &nd, NULL, NULL, NULL, NULL);
    pd_status s3 = pd__cpu_ConstantOfShape_bwd(&x, &nd, NULL, NULL, NULL, NULL);
    pd_status s4 = pd__cpu_Range_bwd(&x, &nd, NULL, NULL, NULL, NULL);
    CHECK(s1 == PD_ERR_UNSUPPORTED && s2 == PD_ERR_UNSUPPORTED && s3 == PD_ERR_UNSUPPORTED &&
              s4 == PD_ERR_UNSUPPORTED && strstr(pd_last_error(), "not differentiable") != NULL,
          "Shape, Constant, ConstantOfShape, Range: backward is PD_ERR_UNSUPPORTED (%s)", pd_last_error());

    /* Gather with an index past the table: an error, and din left alone */
    double tab[6] = {0}, dy[4] = {1, 2, 3, 4}, dx[6] = {0}, y[4] = {0};
    int64_t idx[2] = {0, 3};
    pd_tensor tin = {PD_DOUBLE, 2, {3, 2}, tab}, tind = {PD_INT64, 1, {2}, idx}, tout = {PD_DOUBLE, 2, {2, 2}, y},
              tdy = {PD_DOUBLE, 2, {2, 2}, dy}, tdx = {PD_DOUBLE, 2, {3, 2}, dx};
    pd_tensor *in[2] = {&tin, &tind}, *out[1] = {&tout}, *dout[1] = {&tdy}, *din[2] = {&tdx, NULL};
    nd.op_type = "Gather";
    nd.nin = 2;
    nd.nout = 1;
    pd_status s = pd__cpu_Gather_bwd(&x, &nd, in, out, dout, din);
    bool untouched = true;
    for (int i = 0; i < 6; i++) untouched = untouched && dx[i] == 0;
    CHECK(s == PD_ERR_INVALID && untouched, "Gather backward: index 3 of 3 rows is PD_ERR_INVALID, din untouched (%s)",
          pd_last_error());
    idx[1] = -3;
    s = pd__cpu_Gather_bwd(&x, &nd, in, out, dout, din);
    CHECK(s == PD_OK && dx[0] == 1 + 3 && dx[1] == 2 + 4 && dx[2] == 0 && dx[5] == 0,
          "Gather backward: index -3 of 3 rows is row 0, and repeats accumulate");

    /* integer data has no gradient */
    int64_t a[4] = {0}, b[4] = {0};
    pd_tensor ti = {PD_INT64, 1, {4}, a}, to = {PD_INT64, 2, {2, 2}, b};
    pd_tensor *in1[1] = {&ti}, *out1[1] = {&to}, *dout1[1] = {&to}, *din1[1] = {&ti};
    nd.op_type = "Reshape";
    nd.nin = 1;
    s = pd__cpu_Reshape_bwd(&x, &nd, in1, out1, dout1, din1);
    CHECK(s == PD_ERR_UNSUPPORTED, "Reshape backward of int64 is PD_ERR_UNSUPPORTED (%s)", pd_last_error());

    /* nothing asked, nothing done */
    pd_tensor *none[2] = {NULL, NULL};
    s = pd__cpu_Gather_bwd(&x, &nd, in, out, dout, none);
    pd_status s5 = pd__cpu_Transpose_bwd(&x, &nd, in1, out1, none, none);
    CHECK(s == PD_OK && s5 == PD_OK, "din NULL or dout NULL: nothing to do, PD_OK");
    free(x.scratch);
}

/* ---- forwards that finite differences cannot see: integer and bool data, ties, refusals ---- */

/* Runs case c's shape rule and forward; false (with why) on an error. */
static bool fwd_run(gc *c, char *why, size_t nwhy) {
    why[0] = 0;
    if (!prepare(c, why, nwhy)) return false;
    pd__exec x = {.threads = 1, .g = c->g};
    pd_tensor iv[16], ov[16], *ip[16], *op[16];
    gc__views(c, iv, ip, ov, op);
    bool ok = pd__cpu_run(&x, c->g, &c->node, ip, op) == PD_OK;
    if (!ok) snprintf(why, nwhy, "forward: %s", pd_last_error());
    free(x.scratch);
    return ok;
}

/* Output j of a case that ran, as int64 values (k of them); false when its size differs. */
static bool out_is(gc *c, int j, int k, const int64_t *want) {
    const pd__tensor *t = &c->g->tensors[c->out[j]];
    if (t->numel != k) return false;
    for (int i = 0; i < k; i++)
        if (pd__get_i(t->dtype, t->data, i) != want[i]) return false;
    return true;
}

/* TfIdfVectorizer's weightings, skips and the int32 input (ONNX's node cases
 * have TF with int64 only): the values from onnx.reference (IDF without
 * weights, where the reference fails, is 1 per n-gram present). */
static void test_tfidf(void) {
    static const char *modes[4] = {"TF", "IDF", "TFIDF", "IDF"};
    static const double want[4][14] = {
        {0, 3, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0, 1},
        {0, 1, 0, 0, 0, 0, 0, 0, 0, 1.5, 0, 2.5, 0, 3.5},
        {0, 3, 0, 0, 0, 0, 0, 0, 0, 1.5, 0, 2.5, 0, 3.5},
        {0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0, 1},
    };
    const int32_t x[12] = {1, 1, 3, 3, 3, 7, 8, 6, 7, 5, 6, 8};
    const int64_t counts[2] = {0, 4}, idx[7] = {0, 1, 2, 3, 4, 5, 6}, pool[10] = {2, 3, 5, 4, 5, 6, 7, 8, 6, 7};
    const float w[7] = {0.5f, 1, 1.5f, 2, 2.5f, 3, 3.5f};
    int64_t s[2] = {2, 6};
    for (int m = 0; m < 4; m++) {
        char why[512];
        gc *c = gc_new("TfIdfVectorizer", 9);
        gc_input(c, PD_INT32, 2, s, x);
        gc_attr_i(c, "min_gram_length", 1);
        gc_attr_i(c, "max_gram_length", 2);
        gc_attr_i(c, "max_skip_count", 1);
        gc_attr_s(c, "mode", modes[m]);
        gc_attr_ints(c, "ngram_counts", 2, counts);
        gc_attr_ints(c, "ngram_indexes", 7, idx);
        gc_attr_ints(c, "pool_int64s", 10, pool);
        if (m == 1 || m == 2) gc_attr_floats(c, "weights", 7, w);
        gc_outputs(c, 1);
        bool ok = fwd_run(c, why, sizeof why);
        const pd__tensor *t = &c->g->tensors[c->out[0]];
        ok = ok && t->dtype == PD_FLOAT && t->numel == 14;
        for (int i = 0; ok && i < 14; i++) ok = pd__get_f(t->dtype, t->data, i) == want[m][i];
        CHECK(ok, "TfIdfVectorizer int32 [2,6], 1- and 2-grams, skip 1, %s%s: onnx.reference's values %s", modes[m],
              m == 1 || m == 2 ? " weighted" : "", why);
        gc_free(c);
    }
}

static void test_forward_new(void) {
    char why[512] = "";
    { /* ArgMax / ArgMin ties: the first, or the last with select_last_index */
        const int32_t v[8] = {1, 3, 3, 0, -2, -2, 5, -2};
        int64_t s[2] = {2, 4}, first[2] = {1, 2}, last[2] = {2, 2}, mn[2] = {3, 0}, mnl[2] = {3, 3};
        for (int w = 0; w < 4; w++) {
            gc *c = gc_new(w < 2 ? "ArgMax" : "ArgMin", 13);
            gc_input(c, PD_INT32, 2, s, v);
            gc_attr_i(c, "axis", -1);
            gc_attr_i(c, "keepdims", 0);
            if (w & 1) gc_attr_i(c, "select_last_index", 1);
            const int64_t *want = w == 0 ? first : w == 1 ? last : w == 2 ? mn : mnl;
            gc_outputs(c, 1);
            bool ok = fwd_run(c, why, sizeof why) && c->g->tensors[c->out[0]].dtype == PD_INT64 &&
                      c->g->tensors[c->out[0]].ndim == 1 && out_is(c, 0, 2, want);
            CHECK(ok, "%s int32 rows (1,3,3,0), (-2,-2,5,-2)%s: (%lld, %lld) %s", w < 2 ? "ArgMax" : "ArgMin",
                  w & 1 ? " select_last_index" : "", (long long)want[0], (long long)want[1], why);
            gc_free(c);
        }
        const uint64_t u[3] = {1, UINT64_MAX, 7};
        int64_t n3 = 3, one = 1;
        gc *c = gc_new("ArgMax", 13);
        gc_input(c, PD_UINT64, 1, &n3, u);
        gc_outputs(c, 1);
        CHECK(fwd_run(c, why, sizeof why) && out_is(c, 0, 1, &one), "ArgMax of uint64 (1, MAX, 7) is 1 %s", why);
        gc_free(c);
    }
    { /* TopK ties keep the lower index first; int64 data; largest and smallest */
        const int64_t v[5] = {2, 5, 5, 1, 2};
        int64_t s = 5, k = 3, one = 1;
        int64_t lv[3] = {5, 5, 2}, li[3] = {1, 2, 0}, sv[3] = {1, 2, 2}, si[3] = {3, 0, 4};
        for (int largest = 1; largest >= 0; largest--) {
            gc *c = gc_new("TopK", 11);
            gc_input(c, PD_INT64, 1, &s, v);
            gc_input(c, PD_INT64, 1, &one, &k);
            gc_attr_i(c, "largest", largest);
            gc_outputs(c, 2);
            bool ok = fwd_run(c, why, sizeof why) && out_is(c, 0, 3, largest ? lv : sv) &&
                      out_is(c, 1, 3, largest ? li : si);
            CHECK(ok, "TopK int64 (2,5,5,1,2) k 3 %s: ties in index order %s", largest ? "largest" : "smallest", why);
            gc_free(c);
        }
        gc *c = gc_new("TopK", 11); /* K computed at run time: refused at load, not guessed */
        double x[5] = {0};
        gc_input(c, PD_DOUBLE, 1, &s, x);
        gc_input(c, PD_INT64, 1, &one, &k);
        c->g->tensors[c->in[1]].kind = PD_T_INPUT;
        gc_outputs(c, 2);
        bool ok = !fwd_run(c, why, sizeof why);
        CHECK(ok && strstr(why, "K must be constant") != NULL, "TopK with a runtime K is refused (%s)", why);
        gc_free(c);
    }
    { /* Hardmax: the first of tied maxima */
        const float v[4] = {1, 4, 4, 2};
        int64_t s[2] = {1, 4}, want[4] = {0, 1, 0, 0};
        gc *c = gc_new("Hardmax", 13);
        gc_input(c, PD_FLOAT, 2, s, v);
        gc_outputs(c, 1);
        CHECK(fwd_run(c, why, sizeof why) && out_is(c, 0, 4, want), "Hardmax (1,4,4,2) is (0,1,0,0) %s", why);
        gc_free(c);
    }
    { /* OneHot: a negative index wraps, one out of range is all off; float indices, int32 values */
        const float ind[3] = {1, -1, 3};
        const int32_t vals[2] = {-5, 9};
        int64_t s = 3, depth = 3, two = 2;
        int64_t want[9] = {-5, 9, -5, -5, -5, 9, -5, -5, -5};
        gc *c = gc_new("OneHot", 11);
        gc_input(c, PD_FLOAT, 1, &s, ind);
        gc_input(c, PD_INT64, 0, &s, &depth);
        gc_input(c, PD_INT32, 1, &two, vals);
        gc_outputs(c, 1);
        CHECK(fwd_run(c, why, sizeof why) && c->g->tensors[c->out[0]].dtype == PD_INT32 && out_is(c, 0, 9, want),
              "OneHot (1,-1,3) depth 3 values (-5,9) %s", why);
        gc_free(c);
    }
    { /* Size: int64 scalar, 0 for an empty tensor */
        int64_t s[3] = {2, 3, 0}, zero = 0;
        gc *c = gc_new("Size", 13);
        gc_input(c, PD_BOOL, 3, s, NULL);
        gc_outputs(c, 1);
        CHECK(fwd_run(c, why, sizeof why) && c->g->tensors[c->out[0]].ndim == 0 && out_is(c, 0, 1, &zero),
              "Size of a [2,3,0] bool tensor is a 0-D int64 0 %s", why);
        gc_free(c);
    }
    { /* CumSum on int32, exclusive and reverse; uint64 wraps like the type */
        const int32_t v[4] = {1, 2, 3, 4};
        int64_t s = 4, ax = 0, want[4] = {9, 7, 4, 0};
        gc *c = gc_new("CumSum", 14);
        gc_input(c, PD_INT32, 1, &s, v);
        gc_input(c, PD_INT64, 0, &s, &ax);
        gc_attr_i(c, "exclusive", 1);
        gc_attr_i(c, "reverse", 1);
        gc_outputs(c, 1);
        CHECK(fwd_run(c, why, sizeof why) && out_is(c, 0, 4, want), "CumSum int32 (1,2,3,4) exclusive reverse %s",
              why);
        gc_free(c);
    }
    { /* CumProd on int32, exclusive and reverse; int8 wraps like the type */
        const int32_t v[4] = {1, 2, 3, 4};
        const int8_t w[3] = {16, 16, 3};
        int64_t s = 4, s3 = 3, ax = 0, want[4] = {24, 12, 4, 1}, wrap[3] = {16, 0, 0};
        gc *c = gc_new("CumProd", 26);
        gc_input(c, PD_INT32, 1, &s, v);
        gc_input(c, PD_INT64, 0, &s, &ax);
        gc_attr_i(c, "exclusive", 1);
        gc_attr_i(c, "reverse", 1);
        gc_outputs(c, 1);
        CHECK(fwd_run(c, why, sizeof why) && out_is(c, 0, 4, want), "CumProd int32 (1,2,3,4) exclusive reverse %s",
              why);
        gc_free(c);
        c = gc_new("CumProd", 26);
        gc_input(c, PD_INT8, 1, &s3, w);
        gc_input(c, PD_INT64, 0, &s3, &ax);
        gc_outputs(c, 1);
        CHECK(fwd_run(c, why, sizeof why) && out_is(c, 0, 3, wrap), "CumProd int8 (16,16,3) wraps: (16,0,0) %s", why);
        gc_free(c);
    }
    { /* EyeLike: k beyond the matrix is all zeros; dtype from the attribute */
        int64_t s[2] = {2, 3}, up[6] = {0, 0, 1, 0, 0, 0}, none[6] = {0};
        for (int k = 0; k < 2; k++) {
            gc *c = gc_new("EyeLike", 22);
            gc_input(c, PD_FLOAT, 2, s, none);
            gc_attr_i(c, "k", k ? 3 : 2);
            gc_attr_i(c, "dtype", PD_BOOL);
            gc_outputs(c, 1);
            CHECK(fwd_run(c, why, sizeof why) && c->g->tensors[c->out[0]].dtype == PD_BOOL &&
                      out_is(c, 0, 6, k ? none : up),
                  "EyeLike [2,3] float k %d dtype bool %s", k ? 3 : 2, why);
            gc_free(c);
        }
    }
    { /* NonZero: coordinates of a constant, row-major; refused naming the node on a runtime input */
        const float v[6] = {0, 1.5f, -0.0f, 0, 0, -2};
        int64_t s[2] = {2, 3}, want[4] = {0, 1, 1, 2};
        gc *c = gc_new("NonZero", 13);
        gc_input(c, PD_FLOAT, 2, s, v);
        gc_outputs(c, 1);
        bool ok = fwd_run(c, why, sizeof why) && c->g->tensors[c->out[0]].ndim == 2 &&
                  c->g->tensors[c->out[0]].shape[0] == 2 && out_is(c, 0, 4, want);
        CHECK(ok, "NonZero of a constant [[0,1.5,-0],[0,0,-2]]: [[0,1],[1,2]] %s", why);
        gc_free(c);
        c = gc_new("NonZero", 13);
        gc_input(c, PD_FLOAT, 2, s, NULL);
        gc_outputs(c, 1);
        ok = !fwd_run(c, why, sizeof why) && strstr(why, "node 'NonZero'") && strstr(why, "constant");
        CHECK(ok, "NonZero of a runtime input is refused, naming the node: %s", why);
        gc_free(c);
    }
    { /* Compress without an axis flattens; a runtime condition is refused */
        const int32_t v[6] = {1, 2, 3, 4, 5, 6};
        const uint8_t cond[5] = {0, 1, 0, 0, 1};
        int64_t s[2] = {2, 3}, five = 5, want[2] = {2, 5};
        gc *c = gc_new("Compress", 11);
        gc_input(c, PD_INT32, 2, s, v);
        gc_input(c, PD_BOOL, 1, &five, cond);
        gc_outputs(c, 1);
        CHECK(fwd_run(c, why, sizeof why) && c->g->tensors[c->out[0]].ndim == 1 && out_is(c, 0, 2, want),
              "Compress [2,3] int32, no axis, condition (0,1,0,0,1): (2,5) %s", why);
        gc_free(c);
        c = gc_new("Compress", 11);
        gc_input(c, PD_INT32, 2, s, v);
        int ci = gc_input(c, PD_BOOL, 1, &five, cond);
        c->g->tensors[c->in[ci]].kind = PD_T_INPUT;
        gc_outputs(c, 1);
        bool ok = !fwd_run(c, why, sizeof why) && strstr(why, "node 'Compress'") && strstr(why, "constant");
        CHECK(ok, "Compress with a runtime condition is refused, naming the node: %s", why);
        gc_free(c);
    }
    { /* the byte movers on bool and int8: Tile, Trilu, GatherElements, DepthToSpace */
        const uint8_t b[4] = {1, 0, 0, 1};
        int64_t s[2] = {2, 2}, rep[2] = {1, 2}, two = 2, k = 1;
        int64_t tw[8] = {1, 0, 1, 0, 0, 1, 0, 1}, trw[4] = {0, 0, 0, 0}, trl[4] = {1, 0, 0, 1};
        gc *c = gc_new("Tile", 13);
        gc_input(c, PD_BOOL, 2, s, b);
        gc_input(c, PD_INT64, 1, &two, rep);
        gc_outputs(c, 1);
        CHECK(fwd_run(c, why, sizeof why) && c->g->tensors[c->out[0]].dtype == PD_BOOL && out_is(c, 0, 8, tw),
              "Tile of bool [[1,0],[0,1]] by (1,2) %s", why);
        gc_free(c);
        for (int up = 1; up >= 0; up--) {
            c = gc_new("Trilu", 14);
            gc_input(c, PD_BOOL, 2, s, b);
            gc_input(c, PD_INT64, 0, s, &k);
            gc_attr_i(c, "upper", up);
            gc_outputs(c, 1);
            CHECK(fwd_run(c, why, sizeof why) && out_is(c, 0, 4, up ? trw : trl), "Trilu of bool, k 1, upper %d %s",
                  up, why);
            gc_free(c);
        }
        for (int w = 0; w < 4; w++) { /* k at the int64 limits: everything or nothing kept, no overflow */
            int64_t kk = w & 1 ? INT64_MIN : INT64_MAX, all[4] = {1, 0, 0, 1}, none[4] = {0, 0, 0, 0};
            bool up = w < 2, keep = up == (kk == INT64_MIN);
            c = gc_new("Trilu", 14);
            gc_input(c, PD_BOOL, 2, s, b);
            gc_input(c, PD_INT64, 0, s, &kk);
            gc_attr_i(c, "upper", up);
            gc_outputs(c, 1);
            CHECK(fwd_run(c, why, sizeof why) && out_is(c, 0, 4, keep ? all : none), "Trilu upper %d k %s keeps %s %s",
                  up, kk == INT64_MIN ? "INT64_MIN" : "INT64_MAX", keep ? "all" : "nothing", why);
            gc_free(c);
        }
        const int8_t d[4] = {-1, 2, -3, 4};
        const int64_t ind[4] = {1, 0, -1, 0};
        int64_t ge[4] = {2, -1, 4, -3};
        c = gc_new("GatherElements", 13);
        gc_input(c, PD_INT8, 2, s, d);
        gc_input(c, PD_INT64, 2, s, ind);
        gc_attr_i(c, "axis", 1);
        gc_outputs(c, 1);
        CHECK(fwd_run(c, why, sizeof why) && out_is(c, 0, 4, ge), "GatherElements of int8, axis 1 %s", why);
        gc_free(c);
    }
    { /* ScatterElements reductions on int32; no gradient for mul, max, min */
        static const char *reds[4] = {"add", "mul", "max", "min"};
        const int32_t d[3] = {1, 2, 3}, u[3] = {5, -4, 2};
        const int64_t ind[3] = {0, 0, 2};
        int64_t s = 3, want[4][3] = {{2, 2, 5}, {-20, 2, 6}, {5, 2, 3}, {-4, 2, 2}};
        for (int r = 0; r < 4; r++) {
            gc *c = gc_new("ScatterElements", 18);
            gc_input(c, PD_INT32, 1, &s, d);
            gc_input(c, PD_INT64, 1, &s, ind);
            gc_input(c, PD_INT32, 1, &s, u);
            gc_attr_s(c, "reduction", reds[r]);
            gc_outputs(c, 1);
            CHECK(fwd_run(c, why, sizeof why) && out_is(c, 0, 3, want[r]),
                  "ScatterElements int32 reduction %s, repeated index %s", reds[r], why);
            gc_free(c);
        }
        int64_t two = 2, i2[2] = {1, 1};
        double dd[2] = {1, 2}, du[2] = {3, 4}, g[2] = {1, 1}, gd[2] = {0, 0};
        gc *c = gc_new("ScatterElements", 18);
        gc_input(c, PD_DOUBLE, 1, &two, dd);
        gc_input(c, PD_INT64, 1, &two, i2);
        gc_input(c, PD_DOUBLE, 1, &two, du);
        gc_attr_s(c, "reduction", "max");
        gc_outputs(c, 1);
        bool ok = fwd_run(c, why, sizeof why);
        pd__exec x = {.threads = 1, .g = c->g};
        pd_tensor iv[16], ov[16], *ip[16], *op[16];
        gc__views(c, iv, ip, ov, op);
        pd_tensor tg = ov[0], tgd = iv[0];
        tg.data = g;
        tgd.data = gd;
        pd_tensor *dout[1] = {&tg}, *din[3] = {&tgd, NULL, NULL};
        pd_status st = ok ? pd__cpu_run_bwd(&x, c->g, &c->node, ip, op, dout, din) : PD_ERR_INTERNAL;
        CHECK(st == PD_ERR_UNSUPPORTED && strstr(pd_last_error(), "reduction 'max'") != NULL &&
                  strstr(pd_last_error(), "backward") != NULL && gd[0] == 0,
              "ScatterElements backward with reduction max is refused, naming the node and the reduction (%s)",
              pd_last_error());
        free(x.scratch);
        gc_free(c);
    }
}

/* ---- timings --------------------------------------------------------------------------------------- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Times forward and backward of a float32 case (threads 0: OpenMP's default). */
static void timing(gc *c, const char *what, int reps) {
    char why[512];
    if (!prepare(c, why, sizeof why)) {
        CHECK(false, "timing %s: %s", what, why);
        gc_free(c);
        return;
    }
    pd__exec x = {.threads = 0, .g = c->g};
    pd_tensor iv[16], ov[16], *ip[16], *op[16], dov, *dop[1] = {&dov}, div, *dip[2] = {&div, NULL};
    gc__views(c, iv, ip, ov, op);
    dov = ov[0];
    dov.data = calloc((size_t)pd_tensor_numel(&dov) + 1, sizeof(float));
    div = iv[0];
    div.data = calloc((size_t)pd_tensor_numel(&div) + 1, sizeof(float));
    bool ok = pd__cpu_run(&x, c->g, &c->node, ip, op) == PD_OK && /* warm up: touch every page */
              pd__cpu_run_bwd(&x, c->g, &c->node, ip, op, dop, dip) == PD_OK;
    double t0 = now_s();
    for (int i = 0; i < reps; i++) ok = ok && pd__cpu_run(&x, c->g, &c->node, ip, op) == PD_OK;
    double t1 = now_s();
    for (int i = 0; i < reps; i++) ok = ok && pd__cpu_run_bwd(&x, c->g, &c->node, ip, op, dop, dip) == PD_OK;
    double t2 = now_s();
    if (!ok)
        CHECK(false, "timing %s: %s", what, pd_last_error());
    else
        printf("# %-48s forward %8.3f ms, backward %8.3f ms\n", what, (t1 - t0) / reps * 1e3, (t2 - t1) / reps * 1e3);
    free(dov.data);
    free(div.data);
    free(x.scratch);
    gc_free(c);
}

static void timings(void) {
    { /* a GPT-2 small embedding's backward: 8192 tokens into a [50257, 768] table */
        int64_t s[2] = {50257, 768}, is[2] = {8, 1024};
        int64_t *idx = malloc(sizeof(int64_t) * 8192);
        for (int j = 0; j < 8192; j++) idx[j] = irand(0, 50256);
        gc *c = gc_new("Gather", 13);
        gc_input(c, PD_FLOAT, 2, s, NULL);
        gc_input(c, PD_INT64, 2, is, idx);
        gc_outputs(c, 1);
        free(idx);
        timing(c, "Gather [50257,768] by [8,1024] (embedding)", 3);
    }
    static const int64_t perms[3][4] = {{0, 2, 1, 3}, {0, 2, 3, 1}, {0, 1, 3, 2}};
    for (int p = 0; p < 3; p++) { /* [batch, heads, tokens, head width] */
        int64_t s[4] = {8, 12, 256, 64};
        gc *c = gc_new("Transpose", 13);
        gc_input(c, PD_FLOAT, 4, s, NULL);
        gc_attr_ints(c, "perm", 4, perms[p]);
        gc_outputs(c, 1);
        char what[96], e[96];
        snprintf(what, sizeof what, "Transpose [8,12,256,64] perm %s", fmt_ints(e, 4, perms[p]));
        timing(c, what, 5);
    }
}

/* DFT in both forms (opset 17: axis attribute; 20: axis input), real or
 * complex, forward or inverse, onesided, with and without dft_length. */
static gc *b_dft(pd_dtype dt, tcase *tc) {
    int r = (int)irand(2, 4), ax = (int)irand(0, r - 2);
    int64_t s[8], inv = irand(0, 1), one = irand(0, 1), len = irand(1, 7), axv = ax - (irand(0, 1) ? r : 0);
    rand_shape(r, s);
    s[r - 1] = inv && one ? 2 : irand(1, 2);
    bool haslen = irand(0, 1) || (inv && one && s[ax] < 2), o20 = irand(0, 1);
    gc *c = gc_new("DFT", o20 ? 20 : 17);
    gc_input(c, dt, r, s, NULL);
    if (haslen) gc_input(c, PD_INT64, 0, s, &len);
    else if (o20) gc_absent(c);
    if (o20) gc_input(c, PD_INT64, 0, s, &axv);
    else gc_attr_i(c, "axis", axv);
    if (inv || irand(0, 1)) gc_attr_i(c, "inverse", inv);
    if (one || irand(0, 1)) gc_attr_i(c, "onesided", one);
    gc_outputs(c, 1);
    char b[64];
    snprintf(tc->desc, sizeof tc->desc, "DFT-%d %s axis %lld inverse %lld onesided %lld dft_length %lld",
             o20 ? 20 : 17, fmt_shape(b, r, s), (long long)axv, (long long)inv, (long long)one,
             haslen ? (long long)len : -1LL);
    return c;
}

int main(int argc, char **argv) {
    bool quick = argc > 1 && strcmp(argv[1], "--no-timings") == 0;
    suite("Flatten", b_flatten, 30, 30);
    suite("Reshape", b_reshape, 30, 30);
    suite("Unsqueeze", b_unsqueeze, 30, 30);
    suite("Squeeze", b_squeeze, 30, 30);
    suite("Transpose", b_transpose, 60, 60);
    suite("Concat", b_concat, 40, 40);
    suite("Split", b_split, 60, 60);
    suite("Slice", b_slice, 120, 120);
    suite("Gather", b_gather, 80, 80);
    suite("Expand", b_expand, 60, 60);
    suite("Pad", b_pad, 120, 120);
    suite("CumSum", b_cumsum, 60, 0); /* sums: not a move, finite differences only */
    suite("CumProd", b_cumprod, 60, 0); /* products: finite differences only */
    suite("Compress", b_compress, 40, 40);
    suite("ReverseSequence", b_reverse_sequence, 40, 40);
    suite("Trilu", b_trilu, 60, 60);
    suite("Tile", b_tile, 60, 60);
    suite("GatherElements", b_gather_elements, 60, 60);
    suite("GatherND", b_gather_nd, 60, 60);
    suite("ScatterElements (none)", b_scatter_elements, 60, 60);
    suite("ScatterND (none)", b_scatter_nd, 60, 60);
    suite("TensorScatter", b_tensor_scatter, 60, 60);
    scatter_legacy = true;
    suite("Scatter (opset 9)", b_scatter_elements, 40, 40);
    scatter_legacy = false;
    scatter_add = true; /* sums: finite differences only */
    suite("ScatterElements (add)", b_scatter_elements, 60, 0);
    suite("ScatterND (add)", b_scatter_nd, 60, 0);
    suite("TopK", b_topk, 60, 60);
    suite("DepthToSpace", b_depth_to_space, 40, 40);
    suite("SpaceToDepth", b_space_to_depth, 40, 40);
    suite("DFT", b_dft, 60, 0); /* sums: finite differences only */

    { /* a transpose with partial tiles, by finite differences */
        int64_t s[4] = {1, 2, 35, 33}, p[4] = {0, 1, 3, 2};
        gc *c = gc_new("Transpose", 13);
        gc_input(c, PD_DOUBLE, 4, s, NULL);
        gc_attr_ints(c, "perm", 4, p);
        gc_outputs(c, 1);
        CHECK(gc_check(c, 1e-6, 1), "Transpose [1,2,35,33] perm (0,1,3,2), tiled: finite differences: %s", gc_why(c));
        gc_free(c);
    }
    for (big_which = 0;; big_which++) { /* 2 threads, and 5: uneven parts */
        tcase probe = {0};
        gc *c = b_big(PD_DOUBLE, &probe);
        if (c == NULL) break;
        gc_free(c);
        for (int threads = 2; threads <= 5; threads += 3) {
            char desc[256], why[512];
            bool ok = mc_both(b_big, threads, desc, sizeof desc, why, sizeof why);
            CHECK(ok, "%s: exact, float32 and float64, %d threads: %s", desc, threads, ok ? "ok" : why);
        }
    }
    test_errors();
    test_forward_new();
    test_tfidf();
    if (!quick) timings();
    char missing[1024];
    CHECK(gc_uncovered(PD_OPF_TENSOR, missing, sizeof missing) == 0,
          "every differentiable tensor op (core/ops.h) has a passing finite-difference case:%s",
          missing[0] ? missing : " yes");
    return check_summary();
}
