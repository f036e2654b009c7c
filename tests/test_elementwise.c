/* test_elementwise.c - the element-wise CPU kernels (runtime/cpu/elementwise.c)
 * against a naive reference: numpy broadcasting over random shapes and
 * dtypes, Where, the reductions over random axes, Cast's edge cases, the
 * edges of the comparisons, logic, Max / Min, Mod, rounding and the other
 * reductions, the optimizer update rules against onnx.reference, and the
 * multi-threaded paths (results must equal the single-threaded ones). */
#include "../core/pd_internal.h"
#include "check.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static int64_t irand(int64_t n) { return (int64_t)(next() % (uint64_t)n); }

/* A tensor of random values (small integers, so that integer ops do not
 * overflow and float sums are exact enough). Free data with free(). */
static pd_tensor make(pd_dtype t, int nd, const int64_t *shape, bool nonzero) {
    pd_tensor x = {t, nd, {0}, NULL};
    for (int d = 0; d < nd; d++) x.shape[d] = shape[d];
    int64_t n = pd_tensor_numel(&x);
    x.data = calloc((size_t)(n ? n : 1), pd_dtype_size(t));
    bool sgn = t != PD_UINT8 && t != PD_UINT16 && t != PD_UINT32 && t != PD_UINT64;
    for (int64_t i = 0; i < n; i++) {
        int64_t v = irand(9) + 1;
        if (sgn && (next() & 1)) v = -v;
        if (!nonzero && irand(7) == 0) v = 0;
        if (t == PD_FLOAT || t == PD_DOUBLE || t == PD_FLOAT16 || t == PD_BFLOAT16)
            pd__set_f(t, x.data, i, (double)v * 0.5);
        else
            pd__set_i(t, x.data, i, v);
    }
    return x;
}

static pd_tensor empty_like(pd_dtype t, int nd, const int64_t *shape) {
    pd_tensor x = {t, nd, {0}, NULL};
    for (int d = 0; d < nd; d++) x.shape[d] = shape[d];
    int64_t n = pd_tensor_numel(&x);
    x.data = calloc((size_t)(n ? n : 1), pd_dtype_size(t));
    return x;
}

/* Index into a (right-aligned, broadcast) input for output coordinates. */
static int64_t bidx(const pd_tensor *t, int ond, const int64_t *coord) {
    int64_t i = 0;
    for (int d = 0; d < t->ndim; d++) {
        int od = d + ond - t->ndim;
        i = i * t->shape[d] + (t->shape[d] == 1 ? 0 : coord[od]);
    }
    return i;
}

static void coords(int nd, const int64_t *shape, int64_t i, int64_t *c) {
    for (int d = nd - 1; d >= 0; d--) {
        c[d] = i % shape[d];
        i /= shape[d];
    }
}

static pd__node node(pd_op op, int opset, int nin) {
    pd__node n;
    memset(&n, 0, sizeof n);
    n.name = "n";
    n.op_type = "op";
    n.op = op;
    n.opset = opset;
    n.nin = nin;
    n.nout = 1;
    return n;
}

static bool same_bytes(const pd_tensor *a, const pd_tensor *b) {
    return memcmp(a->data, b->data, (size_t)pd_tensor_numel(a) * pd_dtype_size(a->dtype)) == 0;
}

/* An integer result as dtype t stores it (wrapping). */
static double wrap(pd_dtype t, double v) {
    uint64_t buf = 0;
    pd__set_i(t, &buf, 0, (int64_t)v);
    return pd__get_f(t, &buf, 0);
}

/* ---- binary broadcasting ------------------------------------------------------ */

typedef enum { B_ADD, B_SUB, B_MUL, B_DIV } bop;

static double ref_bin(bop o, double a, double b, bool isint) {
    switch (o) {
    case B_ADD: return a + b;
    case B_SUB: return a - b;
    case B_MUL: return a * b;
    default: return isint ? (b == 0 ? 0 : trunc(a / b)) : a / b;
    }
}

static int test_binary_case(pd__exec *x, bop o, pd_dtype t, int na, const int64_t *sa, int nb, const int64_t *sb) {
    static const pd_op ops[] = {PD_OP_ADD, PD_OP_SUB, PD_OP_MUL, PD_OP_DIV};
    int nd = na > nb ? na : nb;
    int64_t so[PD_MAX_DIMS];
    for (int d = 0; d < nd; d++) {
        int da = d - (nd - na), db = d - (nd - nb);
        int64_t p = da >= 0 ? sa[da] : 1, q = db >= 0 ? sb[db] : 1;
        so[d] = p == 1 ? q : p;
    }
    pd_tensor a = make(t, na, sa, false), b = make(t, nb, sb, o == B_DIV), y = empty_like(t, nd, so);
    pd_tensor *in[2] = {&a, &b}, *out[1] = {&y};
    pd__node n = node(ops[o], 14, 2);
    pd_status st = pd__cpu_kernels[ops[o]](x, &n, in, out);
    bool isint = t != PD_FLOAT && t != PD_DOUBLE && t != PD_FLOAT16 && t != PD_BFLOAT16;
    int bad = st != PD_OK;
    int64_t c[PD_MAX_DIMS];
    for (int64_t i = 0; !bad && i < pd_tensor_numel(&y); i++) {
        coords(nd, so, i, c);
        double want = ref_bin(o, pd__get_f(t, a.data, bidx(&a, nd, c)), pd__get_f(t, b.data, bidx(&b, nd, c)), isint);
        if (isint) want = wrap(t, want);
        double got = pd__get_f(t, y.data, i);
        double tol = (t == PD_FLOAT16 || t == PD_BFLOAT16) ? 1e-2 * fabs(want) : 1e-6 * fabs(want);
        if (fabs(got - want) > tol) bad = 1;
    }
    free(a.data);
    free(b.data);
    free(y.data);
    return bad;
}

static void random_shapes(int *na, int64_t *sa, int *nb, int64_t *sb) {
    int nd = (int)irand(5);
    int64_t full[PD_MAX_DIMS];
    for (int d = 0; d < nd; d++) full[d] = irand(4) + 1;
    *na = nd;
    *nb = nd - (int)irand(nd + 1);
    for (int d = 0; d < *na; d++) sa[d] = irand(3) == 0 ? 1 : full[d];
    for (int d = 0; d < *nb; d++) sb[d] = irand(3) == 0 ? 1 : full[d + nd - *nb];
    if (next() & 1) { /* swap: B the bigger one */
        int64_t tmp[PD_MAX_DIMS];
        int nt = *na;
        memcpy(tmp, sa, sizeof tmp);
        memcpy(sa, sb, sizeof tmp);
        memcpy(sb, tmp, sizeof tmp);
        *na = *nb;
        *nb = nt;
    }
}

static void test_binary_random(pd__exec *x) {
    static const pd_dtype types[] = {PD_FLOAT, PD_DOUBLE, PD_INT32, PD_INT8, PD_UINT8, PD_INT64, PD_UINT64, PD_FLOAT16,
                                     PD_BFLOAT16};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        int bad = 0, runs = 0;
        for (int r = 0; r < 200; r++) {
            int na, nb;
            int64_t sa[PD_MAX_DIMS], sb[PD_MAX_DIMS];
            random_shapes(&na, sa, &nb, sb);
            bad += test_binary_case(x, (bop)(r % 4), types[ti], na, sa, nb, sb);
            runs++;
        }
        CHECK(bad == 0, "binary broadcast %s: %d random shapes x {Add,Sub,Mul,Div}, %d wrong", pd_dtype_name(types[ti]),
              runs, bad);
    }
}

/* Large shapes walk the threaded path: compare with 1 thread and the reference. */
static void test_binary_threads(void) {
    struct {
        int na, nb;
        int64_t sa[4], sb[4];
    } cs[] = {
        {2, 1, {256, 1024}, {1024}},           /* bias over the last dim */
        {3, 3, {64, 96, 33}, {64, 1, 33}},     /* broadcast in the middle */
        {4, 3, {8, 64, 16, 16}, {64, 1, 1}},   /* conv bias */
        {1, 0, {300001}, {0}},                 /* scalar */
        {2, 2, {700, 513}, {700, 513}},        /* same shape */
        {2, 2, {1, 999}, {997, 1}},            /* outer product */
    };
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
        pd__exec x1 = {.threads = 1}, x4 = {.threads = 4};
        int bad = test_binary_case(&x4, B_MUL, PD_FLOAT, cs[k].na, cs[k].sa, cs[k].nb, cs[k].sb);
        rng = 1234 + k;
        pd_tensor a = make(PD_FLOAT, cs[k].na, cs[k].sa, false), b = make(PD_FLOAT, cs[k].nb, cs[k].sb, false);
        int nd = cs[k].na > cs[k].nb ? cs[k].na : cs[k].nb;
        int64_t so[4];
        for (int d = 0; d < nd; d++) {
            int da = d - (nd - cs[k].na), db = d - (nd - cs[k].nb);
            int64_t p = da >= 0 ? cs[k].sa[da] : 1, q = db >= 0 ? cs[k].sb[db] : 1;
            so[d] = p == 1 ? q : p;
        }
        pd_tensor y1 = empty_like(PD_FLOAT, nd, so), y4 = empty_like(PD_FLOAT, nd, so);
        pd_tensor *in[2] = {&a, &b}, *o1[1] = {&y1}, *o4[1] = {&y4};
        pd__node n = node(PD_OP_SUB, 14, 2);
        bool ok = pd__cpu_Sub(&x1, &n, in, o1) == PD_OK && pd__cpu_Sub(&x4, &n, in, o4) == PD_OK;
        CHECK(!bad && ok && same_bytes(&y1, &y4), "binary threaded case %zu: matches reference and 1 thread", k);
        free(a.data);
        free(b.data);
        free(y1.data);
        free(y4.data);
        free(x1.scratch);
        free(x4.scratch);
    }
}

/* Sum of 3 inputs, all broadcast, in float16 (staged through float). */
static void test_sum(pd__exec *x) {
    int64_t s0[] = {3, 1}, s1[] = {4}, s2[] = {2, 1, 1};
    pd_tensor a = make(PD_FLOAT16, 2, s0, false), b = make(PD_FLOAT16, 1, s1, false), c = make(PD_FLOAT16, 3, s2, false);
    int64_t so[] = {2, 3, 4};
    pd_tensor y = empty_like(PD_FLOAT16, 3, so);
    pd_tensor *in[3] = {&a, &b, &c}, *out[1] = {&y};
    pd__node n = node(PD_OP_SUM, 13, 3);
    int bad = pd__cpu_Sum(x, &n, in, out) != PD_OK;
    int64_t co[3];
    for (int64_t i = 0; i < 24 && !bad; i++) {
        coords(3, so, i, co);
        double want = pd__get_f(PD_FLOAT16, a.data, bidx(&a, 3, co)) + pd__get_f(PD_FLOAT16, b.data, bidx(&b, 3, co)) +
                      pd__get_f(PD_FLOAT16, c.data, bidx(&c, 3, co));
        if (pd__get_f(PD_FLOAT16, y.data, i) != want) bad = 1;
    }
    CHECK(!bad, "Sum: three float16 inputs broadcast to [2,3,4]");
    free(a.data);
    free(b.data);
    free(c.data);
    free(y.data);
}

static void test_where(pd__exec *x) {
    int64_t sc[] = {5, 1, 7}, sa[] = {4, 1}, sb[] = {1, 1, 7}, so[] = {5, 4, 7};
    pd_tensor c = make(PD_BOOL, 3, sc, false), a = make(PD_INT64, 2, sa, false), b = make(PD_INT64, 3, sb, false);
    for (int64_t i = 0; i < 35; i++) ((uint8_t *)c.data)[i] = (uint8_t)(next() & 1);
    pd_tensor y = empty_like(PD_INT64, 3, so);
    pd_tensor *in[3] = {&c, &a, &b}, *out[1] = {&y};
    pd__node n = node(PD_OP_WHERE, 16, 3);
    int bad = pd__cpu_Where(x, &n, in, out) != PD_OK;
    int64_t co[3];
    for (int64_t i = 0; i < 140 && !bad; i++) {
        coords(3, so, i, co);
        int64_t want = ((uint8_t *)c.data)[bidx(&c, 3, co)] ? ((int64_t *)a.data)[bidx(&a, 3, co)]
                                                            : ((int64_t *)b.data)[bidx(&b, 3, co)];
        if (((int64_t *)y.data)[i] != want) bad = 1;
    }
    CHECK(!bad, "Where: 3-way broadcast [5,1,7] ? [4,1] : [1,1,7]");
    free(a.data);
    free(b.data);
    free(c.data);
    free(y.data);
}

/* ---- reductions ------------------------------------------------------------------ */

static int test_reduce_case(pd__exec *x, bool mean, pd_dtype t, int nd, const int64_t *shape, const bool *mask,
                            bool keep) {
    pd_tensor a = make(t, nd, shape, false);
    int64_t axes[PD_MAX_DIMS], so[PD_MAX_DIMS];
    int na = 0, no = 0;
    for (int d = 0; d < nd; d++) {
        if (mask[d]) axes[na++] = d - (irand(2) ? nd : 0); /* negative axes too */
        if (!mask[d]) so[no++] = shape[d];
        else if (keep) so[no++] = 1;
    }
    if (na == 0) { /* empty axes: reduce all */
        no = 0;
        for (int d = 0; d < nd && keep; d++) so[no++] = 1;
    }
    pd_tensor ax = {PD_INT64, 1, {na}, axes}, y = empty_like(t, no, so);
    pd_tensor *in[2] = {&a, &ax}, *out[1] = {&y};
    pd__attr attr = {"keepdims", PD_A_INT, keep, 0, NULL, 0, NULL, NULL, NULL};
    pd__node n = node(mean ? PD_OP_REDUCE_MEAN : PD_OP_REDUCE_SUM, 18, 2);
    n.nattr = 1;
    n.attr = &attr;
    int bad = pd__cpu_kernels[n.op](x, &n, in, out) != PD_OK;
    /* reference: accumulate every input element into its output */
    int64_t on = pd_tensor_numel(&y);
    double *acc = calloc((size_t)(on ? on : 1), sizeof(double));
    int64_t *cnt = calloc((size_t)(on ? on : 1), sizeof(int64_t));
    int64_t c[PD_MAX_DIMS];
    for (int64_t i = 0; i < pd_tensor_numel(&a); i++) {
        coords(nd, shape, i, c);
        int64_t o = 0;
        for (int d = 0; d < nd; d++)
            if (!(mask[d] || na == 0)) o = o * shape[d] + c[d];
        acc[o] += pd__get_f(t, a.data, i);
        cnt[o]++;
    }
    bool isint = t != PD_FLOAT && t != PD_DOUBLE && t != PD_FLOAT16;
    for (int64_t o = 0; o < on && !bad; o++) {
        double want = mean ? (isint ? trunc(acc[o] / (double)cnt[o]) : acc[o] / (double)cnt[o]) : acc[o];
        if (isint) want = wrap(t, want);
        if (fabs(pd__get_f(t, y.data, o) - want) > (t == PD_FLOAT16 ? 2e-3 : 1e-5) * (1 + fabs(want))) bad = 1;
    }
    free(acc);
    free(cnt);
    free(a.data);
    free(y.data);
    return bad;
}

static void test_reduce_random(pd__exec *x) {
    static const pd_dtype types[] = {PD_FLOAT, PD_DOUBLE, PD_INT32, PD_UINT8, PD_FLOAT16};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        int bad = 0;
        for (int r = 0; r < 300; r++) {
            int nd = (int)irand(5) + 1;
            int64_t shape[PD_MAX_DIMS];
            bool mask[PD_MAX_DIMS];
            for (int d = 0; d < nd; d++) {
                shape[d] = irand(5) + 1;
                mask[d] = irand(2);
            }
            bad += test_reduce_case(x, r & 1, types[ti], nd, shape, mask, (r >> 1) & 1);
        }
        CHECK(bad == 0, "ReduceSum/ReduceMean %s: 300 random shapes and axes, %d wrong", pd_dtype_name(types[ti]), bad);
    }
}

static void test_reduce_threads(void) {
    struct {
        int nd;
        int64_t s[4];
        bool m[4];
    } cs[] = {
        {2, {4096, 96}, {true, false}},           /* bias gradient: over the batch */
        {2, {96, 4096}, {false, true}},           /* over the last dim */
        {4, {16, 32, 24, 24}, {true, false, true, true}}, /* batch-norm statistics */
        {3, {50, 70, 40}, {false, true, false}},  /* the middle dim */
        {1, {200000}, {true}},                    /* everything */
    };
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
        pd__exec x4 = {.threads = 4};
        int bad = test_reduce_case(&x4, k & 1, PD_DOUBLE, cs[k].nd, cs[k].s, cs[k].m, k & 2);
        bad += test_reduce_case(&x4, false, PD_INT64, cs[k].nd, cs[k].s, cs[k].m, true);
        CHECK(!bad, "reduce threaded case %zu matches the reference", k);
        free(x4.scratch);
    }
}

/* ---- unary, Cast --------------------------------------------------------------- */

static pd_status run1(pd__exec *x, pd__node *n, pd_tensor *a, pd_tensor *y) {
    pd_tensor *in[1] = {a}, *out[1] = {y};
    return pd__cpu_kernels[n->op](x, n, in, out);
}

static void test_unary(pd__exec *x) {
    float v[6] = {-3.0f, -0.5f, 0.0f, 0.25f, 1.0f, 4.0f}, r[6];
    pd_tensor a = {PD_FLOAT, 1, {6}, v}, y = {PD_FLOAT, 1, {6}, r};
    pd__node n = node(PD_OP_GELU, 20, 1);
    bool ok = run1(x, &n, &a, &y) == PD_OK;
    for (int i = 0; i < 6; i++) ok &= fabsf(r[i] - 0.5f * v[i] * (1 + erff(v[i] / sqrtf(2)))) < 1e-6f;
    CHECK(ok, "Gelu (erf) matches 0.5x(1+erf(x/sqrt2))");

    pd__attr ap = {"alpha", PD_A_FLOAT, 0, 0.2f, NULL, 0, NULL, NULL, NULL};
    n = node(PD_OP_LEAKY_RELU, 16, 1);
    n.nattr = 1;
    n.attr = &ap;
    ok = run1(x, &n, &a, &y) == PD_OK && r[0] == -0.6f && r[1] == -0.1f && r[5] == 4.0f;
    CHECK(ok, "LeakyRelu alpha=0.2");

    int8_t iv[5] = {-128, -5, 0, 7, 127}, ir[5], lo = -6, hi = 100;
    pd_tensor ia = {PD_INT8, 1, {5}, iv}, iy = {PD_INT8, 1, {5}, ir}, tl = {PD_INT8, 0, {0}, &lo},
              th = {PD_INT8, 0, {0}, &hi};
    pd_tensor *cin[3] = {&ia, &tl, NULL}, *cout[1] = {&iy};
    n = node(PD_OP_CLIP, 13, 3);
    ok = pd__cpu_Clip(x, &n, cin, cout) == PD_OK && ir[0] == -6 && ir[1] == -5 && ir[4] == 127;
    cin[2] = &th;
    ok &= pd__cpu_Clip(x, &n, cin, cout) == PD_OK && ir[0] == -6 && ir[3] == 7 && ir[4] == 100;
    CHECK(ok, "Clip int8 with min only, then min and max");

    n = node(PD_OP_NEG, 13, 1);
    ok = run1(x, &n, &ia, &iy) == PD_OK && ir[0] == -128 && ir[1] == 5 && ir[4] == -127;
    CHECK(ok, "Neg int8 wraps -128");

    int32_t pv[4] = {2, -3, 5, 0}, pe[4] = {10, 3, 0, 0}, pr[4];
    pd_tensor pa = {PD_INT32, 1, {4}, pv}, pb = {PD_INT32, 1, {4}, pe}, py = {PD_INT32, 1, {4}, pr};
    pd_tensor *pin[2] = {&pa, &pb}, *pout[1] = {&py};
    n = node(PD_OP_POW, 15, 2);
    ok = pd__cpu_Pow(x, &n, pin, pout) == PD_OK && pr[0] == 1024 && pr[1] == -27 && pr[2] == 1 && pr[3] == 1;
    float fe[4] = {0.5f, 2.0f, 1.0f, 3.0f};
    int32_t qv[4] = {9, -3, 5, 2};
    pd_tensor pf = {PD_FLOAT, 1, {4}, fe}, pq = {PD_INT32, 1, {4}, qv};
    pin[0] = &pq;
    pin[1] = &pf;
    ok &= pd__cpu_Pow(x, &n, pin, pout) == PD_OK && pr[0] == 3 && pr[1] == 9 && pr[2] == 5 && pr[3] == 8;
    CHECK(ok, "Pow int32^int32 and int32^float32");

    int32_t dv[4] = {-7, 7, INT32_MIN, 5}, dd[4] = {2, -2, -1, 0};
    pd_tensor da = {PD_INT32, 1, {4}, dv}, db = {PD_INT32, 1, {4}, dd};
    pd_tensor *din[2] = {&da, &db};
    n = node(PD_OP_DIV, 14, 2);
    ok = pd__cpu_Div(x, &n, din, pout) == PD_OK && pr[0] == -3 && pr[1] == -3 && pr[2] == INT32_MIN && pr[3] == 0;
    CHECK(ok, "Div int32 truncates; MIN/-1 and x/0 do not trap");
}

static void test_cast(pd__exec *x) {
    pd__attr to = {"to", PD_A_INT, 0, 0, NULL, 0, NULL, NULL, NULL};
    pd__node n = node(PD_OP_CAST, 21, 1);
    n.nattr = 1;
    n.attr = &to;
    float fv[7] = {-1.7f, 2.9f, 300.5f, -1e20f, NAN, 0.0f, -0.0f};
    pd_tensor a = {PD_FLOAT, 1, {7}, fv};

    int32_t i32[7];
    pd_tensor y = {PD_INT32, 1, {7}, i32};
    bool ok = run1(x, &n, &a, &y) == PD_OK && i32[0] == -1 && i32[1] == 2 && i32[2] == 300 && i32[3] == INT32_MIN &&
              i32[4] == 0;
    CHECK(ok, "Cast float->int32 truncates toward zero, saturates, NaN->0");

    uint8_t u8[7];
    y = (pd_tensor){PD_UINT8, 1, {7}, u8};
    ok = run1(x, &n, &a, &y) == PD_OK && u8[0] == 0 && u8[1] == 2 && u8[2] == 255;
    CHECK(ok, "Cast float->uint8 saturates");

    y = (pd_tensor){PD_BOOL, 1, {7}, u8};
    ok = run1(x, &n, &a, &y) == PD_OK && u8[0] == 1 && u8[4] == 1 && u8[5] == 0 && u8[6] == 0;
    CHECK(ok, "Cast float->bool is x != 0");

    /* double -> float16 rounds once: 1 + 2^-11 + 2^-40 is above the tie */
    double dv[3] = {1.0 + 0x1p-11 + 0x1p-40, 65520.0, 0x1p-25 + 0x1p-40};
    uint16_t h[3];
    a = (pd_tensor){PD_DOUBLE, 1, {3}, dv};
    y = (pd_tensor){PD_FLOAT16, 1, {3}, h};
    ok = run1(x, &n, &a, &y) == PD_OK && h[0] == 0x3c01 && h[1] == 0x7c00 && h[2] == 0x0001;
    CHECK(ok, "Cast double->float16 rounds to nearest even once (got %04x %04x %04x)", h[0], h[1], h[2]);

    /* every pair of dtypes on small values: round trip through int64 */
    static const pd_dtype all[] = {PD_FLOAT, PD_DOUBLE, PD_FLOAT16, PD_BFLOAT16, PD_INT8, PD_INT16, PD_INT32,
                                   PD_INT64, PD_UINT8, PD_UINT16, PD_UINT32, PD_UINT64, PD_BOOL};
    int bad = 0;
    for (size_t s = 0; s < sizeof all / sizeof all[0]; s++)
        for (size_t d = 0; d < sizeof all / sizeof all[0]; d++) {
            int64_t sh[1] = {40};
            pd_tensor src = make(all[s], 1, sh, false), dst = empty_like(all[d], 1, sh);
            for (int64_t i = 0; i < 40; i++) pd__set_i(all[s], src.data, i, (i * 7) % 100);
            to.i = all[d];
            if (run1(x, &n, &src, &dst) != PD_OK) bad++;
            for (int64_t i = 0; i < 40; i++) {
                int64_t v = (i * 7) % 100;
                if (all[s] == PD_BOOL || all[d] == PD_BOOL) v = v != 0;
                if (pd__get_i(all[d], dst.data, i) != v) {
                    bad++;
                    break;
                }
            }
            free(src.data);
            free(dst.data);
        }
    CHECK(bad == 0, "Cast: all 169 dtype pairs on 0..99 (%d wrong)", bad);
}

/* Error of a float result in ulps of the (double) reference; overflow must be inf. */
static double ulps(float got, double want) {
    if (isnan(want)) return isnan(got) ? 0 : 1e9;
    if (fabs(want) > 3.4028234663852886e38) return (isinf(got) && (got > 0) == (want > 0)) ? 0 : 1e9;
    int e;
    frexp(want, &e);
    return fabs((double)got - want) / ldexp(1.0, e - 24 < -149 ? -149 : e - 24);
}

/* The float32 Exp, Tanh, Sigmoid and Erf are our own vectorizable ones: within
 * 3 ulp of double libm over their whole range, subnormals and overflow included. */
static void test_float_math(pd__exec *x) {
    enum { N = 200001 };
    static float v[N], r[N];
    struct {
        pd_op op;
        const char *name;
        double lo, hi;
    } cs[] = {{PD_OP_EXP, "Exp", -110, 92},        {PD_OP_EXP, "Exp", -1e-3, 1e-3},
              {PD_OP_TANH, "Tanh", -12, 12},       {PD_OP_TANH, "Tanh", -1e-3, 1e-3},
              {PD_OP_SIGMOID, "Sigmoid", -110, 30}, {PD_OP_SIGMOID, "Sigmoid", -1e-3, 1e-3},
              {PD_OP_ERF, "Erf", -6, 6},           {PD_OP_ERF, "Erf", -1e-3, 1e-3},
              {PD_OP_ERF, "Erf", 0.9, 0.95},       {PD_OP_ERF, "Erf", -1e-30, 1e-30}};
    pd_tensor a = {PD_FLOAT, 1, {N}, v}, y = {PD_FLOAT, 1, {N}, r};
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
        for (int i = 0; i < N; i++) v[i] = (float)(cs[k].lo + (cs[k].hi - cs[k].lo) * i / (N - 1));
        pd__node n = node(cs[k].op, 13, 1);
        bool ok = run1(x, &n, &a, &y) == PD_OK;
        double worst = 0;
        for (int i = 0; i < N; i++) {
            double xd = v[i];
            double want = cs[k].op == PD_OP_EXP    ? exp(xd)
                          : cs[k].op == PD_OP_TANH ? tanh(xd)
                          : cs[k].op == PD_OP_ERF  ? erf(xd)
                                                   : 1 / (1 + exp(-xd));
            double u = ulps(r[i], want);
            if (u > worst) worst = u;
        }
        CHECK(ok && worst < 3, "%s on [%g, %g]: max error %.2f ulp", cs[k].name, cs[k].lo, cs[k].hi, worst);
    }
    float sp[5] = {NAN, INFINITY, -INFINITY, -0.0f, -200.0f};
    a.shape[0] = y.shape[0] = 5;
    memcpy(v, sp, sizeof sp);
    pd__node n = node(PD_OP_EXP, 13, 1);
    bool ok = run1(x, &n, &a, &y) == PD_OK && isnan(r[0]) && isinf(r[1]) && r[2] == 0 && r[3] == 1 && r[4] == 0;
    n = node(PD_OP_TANH, 13, 1);
    ok &= run1(x, &n, &a, &y) == PD_OK && isnan(r[0]) && r[1] == 1 && r[2] == -1 && r[3] == 0 && signbit(r[3]);
    n = node(PD_OP_SIGMOID, 13, 1);
    ok &= run1(x, &n, &a, &y) == PD_OK && isnan(r[0]) && r[1] == 1 && r[2] == 0 && r[3] == 0.5f && r[4] == 0;
    n = node(PD_OP_ERF, 13, 1);
    ok &= run1(x, &n, &a, &y) == PD_OK && isnan(r[0]) && r[1] == 1 && r[2] == -1 && r[3] == 0 && signbit(r[3]) &&
          r[4] == -1;
    CHECK(ok, "Exp, Tanh, Sigmoid, Erf of NaN, +-inf, -0, -200");
}

/* ---- comparisons, logic, Max / Min / Mean, Mod, Abs ... Round, reductions ------------------- */

static pd_status run2(pd__exec *x, pd__node *n, pd_tensor *a, pd_tensor *b, pd_tensor *y) {
    pd_tensor *in[2] = {a, b}, *out[1] = {y};
    return pd__cpu_kernels[n->op](x, n, in, out);
}

/* What finite differences and the ONNX node tests leave out: integers
 * beyond double's 53 bits, NaN, wrapping, x mod 0, half-way rounding,
 * bool broadcasting, IsInf's flags, float16 staging. */
static void test_more_ops(pd__exec *x) {
    /* comparisons: uint64 beyond 2^53, int8 broadcast, NaN compares false */
    uint64_t ua[3] = {UINT64_MAX, UINT64_MAX - 1, 1}, ub[3] = {UINT64_MAX - 1, UINT64_MAX, 1};
    uint8_t r[6];
    pd_tensor A = {PD_UINT64, 1, {3}, ua}, B = {PD_UINT64, 1, {3}, ub}, Y = {PD_BOOL, 1, {3}, r};
    pd__node n = node(PD_OP_GREATER, 13, 2);
    bool ok = run2(x, &n, &A, &B, &Y) == PD_OK && r[0] == 1 && r[1] == 0 && r[2] == 0;
    n = node(PD_OP_LESS_OR_EQUAL, 16, 2);
    ok &= run2(x, &n, &A, &B, &Y) == PD_OK && r[0] == 0 && r[1] == 1 && r[2] == 1;
    int8_t ia[6] = {-128, 0, 127, 5, -1, 3}, ib[3] = {0, 0, 3};
    pd_tensor IA = {PD_INT8, 2, {2, 3}, ia}, IB = {PD_INT8, 1, {3}, ib}, Y6 = {PD_BOOL, 2, {2, 3}, r};
    n = node(PD_OP_LESS, 13, 2);
    ok &= run2(x, &n, &IA, &IB, &Y6) == PD_OK && r[0] == 1 && r[1] == 0 && r[2] == 0 && r[3] == 0 && r[4] == 1 &&
          r[5] == 0;
    n = node(PD_OP_GREATER_OR_EQUAL, 16, 2);
    ok &= run2(x, &n, &IA, &IB, &Y6) == PD_OK && r[0] == 0 && r[1] == 1 && r[5] == 1;
    float fa[3] = {NAN, 1.0f, -0.0f}, fb[3] = {NAN, NAN, 0.0f};
    pd_tensor FA = {PD_FLOAT, 1, {3}, fa}, FB = {PD_FLOAT, 1, {3}, fb};
    n = node(PD_OP_LESS_OR_EQUAL, 16, 2);
    ok &= run2(x, &n, &FA, &FB, &Y) == PD_OK && r[0] == 0 && r[1] == 0 && r[2] == 1;
    CHECK(ok, "Greater / LessOrEqual uint64 near 2^64, Less / GreaterOrEqual int8 broadcast, NaN compares false");

    /* logic: [2, 2] with [2] */
    uint8_t la[4] = {0, 1, 0, 1}, lb[2] = {0, 1};
    pd_tensor LA = {PD_BOOL, 2, {2, 2}, la}, LB = {PD_BOOL, 1, {2}, lb}, LY = {PD_BOOL, 2, {2, 2}, r};
    n = node(PD_OP_AND, 7, 2);
    ok = run2(x, &n, &LA, &LB, &LY) == PD_OK && !r[0] && r[1] && !r[2] && r[3];
    n = node(PD_OP_OR, 7, 2);
    ok &= run2(x, &n, &LA, &LB, &LY) == PD_OK && !r[0] && r[1] && !r[2] && r[3];
    n = node(PD_OP_XOR, 7, 2);
    ok &= run2(x, &n, &LA, &LB, &LY) == PD_OK && !r[0] && !r[1] && !r[2] && !r[3];
    uint8_t lc[4] = {0, 1, 0, 1};
    pd_tensor LC = {PD_BOOL, 2, {2, 2}, lc};
    ok &= run2(x, &n, &LA, &LC, &LY) == PD_OK && !r[0] && !r[1];
    n = node(PD_OP_NOT, 1, 1);
    ok &= run1(x, &n, &LA, &LY) == PD_OK && r[0] && !r[1] && r[2] && !r[3];
    CHECK(ok, "And, Or, Xor with a broadcast operand; Not");

    { /* bitwise: int16 [2, 2] with [2]; BitShift by the width or more gives 0 (numpy's rule) */
        int16_t wa[4] = {-1, 0x0f0f, 12, INT16_MIN}, wb[2] = {0x00ff, -2}, wy[4];
        pd_tensor WA = {PD_INT16, 2, {2, 2}, wa}, WB = {PD_INT16, 1, {2}, wb}, WY = {PD_INT16, 2, {2, 2}, wy};
        n = node(PD_OP_BITWISE_AND, 18, 2);
        ok = run2(x, &n, &WA, &WB, &WY) == PD_OK && wy[0] == 0x00ff && wy[1] == 0x0f0e && wy[2] == 12 && wy[3] == INT16_MIN;
        n = node(PD_OP_BITWISE_OR, 18, 2);
        ok &= run2(x, &n, &WA, &WB, &WY) == PD_OK && wy[0] == -1 && wy[1] == -1 && wy[2] == 0xff && wy[3] == -2;
        n = node(PD_OP_BITWISE_XOR, 18, 2);
        ok &= run2(x, &n, &WA, &WB, &WY) == PD_OK && wy[0] == (int16_t)0xff00 && wy[1] == (int16_t)0xf0f1;
        n = node(PD_OP_BITWISE_NOT, 18, 1);
        ok &= run1(x, &n, &WA, &WY) == PD_OK && wy[0] == 0 && wy[1] == (int16_t)0xf0f0 && wy[3] == INT16_MAX;
        uint8_t ha[4] = {0x81, 0x81, 0x81, 0x81}, hb[4] = {1, 7, 8, 200}, hy[4];
        pd_tensor HA = {PD_UINT8, 1, {4}, ha}, HB = {PD_UINT8, 1, {4}, hb}, HY = {PD_UINT8, 1, {4}, hy};
        pd__attr dir = {"direction", PD_A_STRING, 0, 0, "LEFT", 0, NULL, NULL, NULL};
        n = node(PD_OP_BIT_SHIFT, 11, 2);
        n.nattr = 1;
        n.attr = &dir;
        ok &= run2(x, &n, &HA, &HB, &HY) == PD_OK && hy[0] == 0x02 && hy[1] == 0x80 && hy[2] == 0 && hy[3] == 0;
        dir.s = "RIGHT";
        ok &= run2(x, &n, &HA, &HB, &HY) == PD_OK && hy[0] == 0x40 && hy[1] == 1 && hy[2] == 0 && hy[3] == 0;
        uint64_t ua64[2] = {UINT64_MAX, 1}, ub64[2] = {63, 64}, uy64[2];
        pd_tensor UA = {PD_UINT64, 1, {2}, ua64}, UB = {PD_UINT64, 1, {2}, ub64}, UY = {PD_UINT64, 1, {2}, uy64};
        dir.s = "LEFT";
        ok &= run2(x, &n, &UA, &UB, &UY) == PD_OK && uy64[0] == (uint64_t)1 << 63 && uy64[1] == 0;
        CHECK(ok, "BitwiseAnd, Or, Xor int16 with a broadcast operand; BitwiseNot; BitShift uint8 and uint64 by 0..width+");
    }

    /* IsNaN of float16, IsInf with its flags */
    uint16_t h[4] = {pd__float_to_half(NAN), pd__float_to_half(INFINITY), pd__float_to_half(-INFINITY),
                     pd__float_to_half(1.0f)};
    pd_tensor H = {PD_FLOAT16, 1, {4}, h}, HY = {PD_BOOL, 1, {4}, r};
    n = node(PD_OP_IS_NAN, 20, 1);
    ok = run1(x, &n, &H, &HY) == PD_OK && r[0] && !r[1] && !r[2] && !r[3];
    n = node(PD_OP_IS_INF, 20, 1);
    ok &= run1(x, &n, &H, &HY) == PD_OK && !r[0] && r[1] && r[2] && !r[3];
    pd__attr dp = {"detect_positive", PD_A_INT, 0, 0, NULL, 0, NULL, NULL, NULL};
    n.attr = &dp;
    n.nattr = 1;
    ok &= run1(x, &n, &H, &HY) == PD_OK && !r[1] && r[2];
    CHECK(ok, "IsNaN, IsInf (float16; detect_positive=0)");

    /* Max / Min: int64 beyond 2^53 exactly, NaN propagates; Mean */
    int64_t ma[2] = {(int64_t)1 << 60, -((int64_t)1 << 60)}, mb[2] = {((int64_t)1 << 60) + 1, -((int64_t)1 << 60) - 1},
            mr[2];
    pd_tensor MA = {PD_INT64, 1, {2}, ma}, MB = {PD_INT64, 1, {2}, mb}, MY = {PD_INT64, 1, {2}, mr};
    n = node(PD_OP_MAX, 13, 2);
    ok = run2(x, &n, &MA, &MB, &MY) == PD_OK && mr[0] == mb[0] && mr[1] == ma[1];
    n = node(PD_OP_MIN, 13, 2);
    ok &= run2(x, &n, &MA, &MB, &MY) == PD_OK && mr[0] == ma[0] && mr[1] == mb[1];
    float fr[3];
    pd_tensor FY = {PD_FLOAT, 1, {3}, fr};
    n = node(PD_OP_MAX, 13, 2);
    ok &= run2(x, &n, &FA, &FB, &FY) == PD_OK && isnan(fr[0]) && isnan(fr[1]);
    n = node(PD_OP_MIN, 13, 2);
    ok &= run2(x, &n, &FB, &FA, &FY) == PD_OK && isnan(fr[0]) && isnan(fr[1]);
    double da[2] = {1, 2}, db[1] = {4}, dc[2] = {1, 0}, dr[2];
    pd_tensor DA = {PD_DOUBLE, 1, {2}, da}, DB = {PD_DOUBLE, 1, {1}, db}, DC = {PD_DOUBLE, 1, {2}, dc},
              DY = {PD_DOUBLE, 1, {2}, dr};
    pd_tensor *min3[3] = {&DA, &DB, &DC}, *mout[1] = {&DY};
    n = node(PD_OP_MEAN, 13, 3);
    ok &= pd__cpu_kernels[n.op](x, &n, min3, mout) == PD_OK && dr[0] == 2 && dr[1] == 2;
    CHECK(ok, "Max / Min of int64 near 2^60 exact, of float with NaN give NaN; Mean of 3 broadcast");

    /* Mod: int32 both signs, fmod 0 (divisor's sign) and 1 (dividend's); x mod 0, MIN mod -1 */
    int32_t qa[6] = {7, -7, 7, -7, 5, INT32_MIN}, qb[6] = {3, 3, -3, -3, 0, -1}, qr[6];
    pd_tensor QA = {PD_INT32, 1, {6}, qa}, QB = {PD_INT32, 1, {6}, qb}, QY = {PD_INT32, 1, {6}, qr};
    pd__attr fm = {"fmod", PD_A_INT, 1, 0, NULL, 0, NULL, NULL, NULL};
    n = node(PD_OP_MOD, 13, 2);
    ok = run2(x, &n, &QA, &QB, &QY) == PD_OK && qr[0] == 1 && qr[1] == 2 && qr[2] == -2 && qr[3] == -1 &&
         qr[4] == 0 && qr[5] == 0;
    n.attr = &fm;
    n.nattr = 1;
    ok &= run2(x, &n, &QA, &QB, &QY) == PD_OK && qr[0] == 1 && qr[1] == -1 && qr[2] == 1 && qr[3] == -1;
    double ra[2] = {-5.5, 5.5}, rb[2] = {2, 2}, rr[2];
    pd_tensor RA = {PD_DOUBLE, 1, {2}, ra}, RB = {PD_DOUBLE, 1, {2}, rb}, RY = {PD_DOUBLE, 1, {2}, rr};
    n.nattr = 0;
    ok &= run2(x, &n, &RA, &RB, &RY) == PD_OK && rr[0] == 0.5 && rr[1] == 1.5;
    n.nattr = 1;
    ok &= run2(x, &n, &RA, &RB, &RY) == PD_OK && rr[0] == -1.5 && rr[1] == 1.5;
    CHECK(ok, "Mod int32 fmod 0 / 1 with both signs, x mod 0 = 0, INT32_MIN mod -1 = 0; float64 fmod 0 / 1");

    /* Abs, Sign of int8 (wrapping -128), Sign of floats (-0, NaN), Round half to even, Floor, Ceil */
    int8_t sv[4] = {-128, -3, 0, 9}, sr[4];
    pd_tensor SV = {PD_INT8, 1, {4}, sv}, SY = {PD_INT8, 1, {4}, sr};
    n = node(PD_OP_ABS, 13, 1);
    ok = run1(x, &n, &SV, &SY) == PD_OK && sr[0] == -128 && sr[1] == 3 && sr[2] == 0 && sr[3] == 9;
    n = node(PD_OP_SIGN, 13, 1);
    ok &= run1(x, &n, &SV, &SY) == PD_OK && sr[0] == -1 && sr[1] == -1 && sr[2] == 0 && sr[3] == 1;
    float gv[6] = {-0.0f, NAN, -2.5f, 0.5f, 1.5f, 2.5f}, gr[6];
    pd_tensor GV = {PD_FLOAT, 1, {6}, gv}, GY = {PD_FLOAT, 1, {6}, gr};
    ok &= run1(x, &n, &GV, &GY) == PD_OK && gr[0] == 0 && signbit(gr[0]) && isnan(gr[1]) && gr[2] == -1;
    n = node(PD_OP_ROUND, 11, 1);
    ok &= run1(x, &n, &GV, &GY) == PD_OK && gr[2] == -2 && gr[3] == 0 && gr[4] == 2 && gr[5] == 2;
    n = node(PD_OP_FLOOR, 13, 1);
    ok &= run1(x, &n, &GV, &GY) == PD_OK && gr[2] == -3 && gr[3] == 0 && gr[5] == 2;
    n = node(PD_OP_CEIL, 13, 1);
    ok &= run1(x, &n, &GV, &GY) == PD_OK && gr[2] == -2 && gr[3] == 1 && gr[5] == 3;
    CHECK(ok, "Abs / Sign int8 (|-128| wraps), Sign of -0 and NaN, Round half to even, Floor, Ceil");

    /* reductions: ReduceMax int64 exact, ReduceLogSumExp of large and -inf values, ReduceProd int32 */
    int64_t xa[4] = {((int64_t)1 << 60) + 1, (int64_t)1 << 60, -5, -7}, xr[2], ax1 = 1;
    pd_tensor XA = {PD_INT64, 2, {2, 2}, xa}, XY = {PD_INT64, 2, {2, 1}, xr}, AX = {PD_INT64, 1, {1}, &ax1};
    n = node(PD_OP_REDUCE_MAX, 18, 2);
    ok = run2(x, &n, &XA, &AX, &XY) == PD_OK && xr[0] == xa[0] && xr[1] == -5;
    n = node(PD_OP_REDUCE_MIN, 18, 2);
    ok &= run2(x, &n, &XA, &AX, &XY) == PD_OK && xr[0] == xa[1] && xr[1] == -7;
    float la2[4] = {1000.0f, 1000.0f, -INFINITY, -INFINITY}, lr[2];
    pd_tensor LA2 = {PD_FLOAT, 2, {2, 2}, la2}, LY2 = {PD_FLOAT, 2, {2, 1}, lr};
    n = node(PD_OP_REDUCE_LOG_SUM_EXP, 18, 2);
    ok &= run2(x, &n, &LA2, &AX, &LY2) == PD_OK && fabsf(lr[0] - (1000.0f + logf(2.0f))) < 1e-3f && lr[1] == -INFINITY;
    int32_t pa[4] = {-3, 4, 0, 9}, pr[2];
    pd_tensor PA = {PD_INT32, 2, {2, 2}, pa}, PY = {PD_INT32, 2, {2, 1}, pr};
    n = node(PD_OP_REDUCE_PROD, 18, 2);
    ok &= run2(x, &n, &PA, &AX, &PY) == PD_OK && pr[0] == -12 && pr[1] == 0;
    CHECK(ok, "ReduceMax / Min int64 near 2^60 exact, ReduceLogSumExp of (1000, 1000) and (-inf, -inf), ReduceProd int32");

    /* CastLike: float to int32 (truncated), the dtype from input 1 */
    float cv[3] = {1.9f, -1.9f, 3.0f};
    int32_t like[1] = {0}, cr[3];
    pd_tensor CV = {PD_FLOAT, 1, {3}, cv}, CL = {PD_INT32, 1, {1}, like}, CY = {PD_INT32, 1, {3}, cr};
    n = node(PD_OP_CAST_LIKE, 19, 2);
    ok = run2(x, &n, &CV, &CL, &CY) == PD_OK && cr[0] == 1 && cr[1] == -1 && cr[2] == 3;
    CHECK(ok, "CastLike float -> int32 (the dtype of input 1)");
}

/* QuantizeLinear rounds half-way quotients to even and saturates; an all-zero
 * DynamicQuantizeLinear input gives scale 0 and zeros, not NaN. */
static void test_quant(pd__exec *x) {
    float qx[6] = {2.5f, 3.5f, -2.5f, -3.5f, 1000.0f, -1000.0f}, one = 1.0f;
    int8_t zp = 0, qy[6];
    pd_tensor QX = {PD_FLOAT, 1, {6}, qx}, QS = {PD_FLOAT, 0, {0}, &one}, QZ = {PD_INT8, 0, {0}, &zp};
    pd_tensor QY = {PD_INT8, 1, {6}, qy};
    pd_tensor *in[3] = {&QX, &QS, &QZ}, *out[3] = {&QY};
    pd__node n = node(PD_OP_QUANTIZE_LINEAR, 21, 3);
    bool ok = pd__cpu_kernels[n.op](x, &n, in, out) == PD_OK && qy[0] == 2 && qy[1] == 4 && qy[2] == -2 &&
              qy[3] == -4 && qy[4] == 127 && qy[5] == -128;
    CHECK(ok, "QuantizeLinear: 2.5 -> 2, 3.5 -> 4, -2.5 -> -2, -3.5 -> -4, saturated to int8");

    float dx[4] = {0, 0, 0, 0}, ds = -1;
    uint8_t dy[4] = {9, 9, 9, 9}, dz = 9;
    pd_tensor DX = {PD_FLOAT, 1, {4}, dx}, DY = {PD_UINT8, 1, {4}, dy}, DS = {PD_FLOAT, 0, {0}, &ds};
    pd_tensor DZ = {PD_UINT8, 0, {0}, &dz};
    pd_tensor *din[1] = {&DX}, *dout[3] = {&DY, &DS, &DZ};
    n = node(PD_OP_DYNAMIC_QUANTIZE_LINEAR, 11, 1);
    n.nout = 3;
    ok = pd__cpu_kernels[n.op](x, &n, din, dout) == PD_OK && ds == 0 && dz == 0 && dy[0] == 0 && dy[3] == 0;
    CHECK(ok, "DynamicQuantizeLinear of zeros: scale 0, zero point 0, y 0");
}

/* Bad dtypes are reported, not crashed on. */
static void test_unsupported(pd__exec *x) {
    uint8_t b[4] = {1, 0, 1, 1};
    pd_tensor a = {PD_BOOL, 1, {4}, b}, y = {PD_BOOL, 1, {4}, b};
    pd__node n = node(PD_OP_SQRT, 13, 1);
    pd_status st = run1(x, &n, &a, &y);
    n = node(PD_OP_EXP, 13, 1);
    a.dtype = y.dtype = (pd_dtype)19; /* float8e5m2 */
    pd_status st2 = run1(x, &n, &a, &y);
    CHECK(st == PD_ERR_UNSUPPORTED && st2 == PD_ERR_UNSUPPORTED, "Sqrt of bool, Exp of float8: PD_ERR_UNSUPPORTED");
}

/* ---- the optimizer update rules (ai.onnx.preview.training) ------------------------ */

/* The branches ONNX's node cases do not reach (T = 0: no bias correction, the
 * whole gradient into the momentum; norm_coefficient_post; nesterov from
 * the first step; Adagrad's decay at T = 0), against onnx.reference's
 * float32 values. */
static void test_optim_ops(pd__exec *x) {
    float R = 0.1f, X[3] = {1.0f, -2.0f, 0.5f}, G[3] = {-1.0f, 0.25f, 2.0f}, V[3] = {0.5f, -0.5f, 0.125f},
          H[3] = {0.25f, 1.0f, 0.0f};
    int64_t T0 = 0, T3 = 3;
    static const struct {
        pd_op op;
        int nout;
        double want[3][3];
    } cs[4] = {
        {PD_OP_ADAM, 3, {{0.8378453851, -1.761425376, 0.3101984262}, {0.3509999514, -0.4269999862, 0.3130000532},
                               {0.2573010027, 0.9905290008, 0.04020021483}}},
        {PD_OP_ADAM, 3, {{0.8604733783, -1.775468877, 0.3610946171}, {0.3509999514, -0.4269999862, 0.3130000532},
                               {0.2573010027, 0.9905290008, 0.04020021483}}},
        {PD_OP_MOMENTUM, 2, {{1.147600055, -2.003200054, 0.1089249849}, {-0.5400000215, -0.2199999839, 2.117500067}}},
        {PD_OP_ADAGRAD, 2, {{1.089181304, -2.022392988, 0.4000498354}, {1.230100036, 1.052899957, 4.020025253}}},
    };
    static const char *what[4] = {"Adam T=0 norm_coefficient_post", "Adam T=3 norm_coefficient_post",
                                  "Momentum nesterov T=0", "Adagrad T=0"};
    for (int k = 0; k < 4; k++) {
        pd_tensor r = {PD_FLOAT, 0, {0}, &R}, t = {PD_INT64, 0, {0}, k == 1 ? &T3 : &T0};
        pd_tensor xs = {PD_FLOAT, 1, {3}, X}, gs = {PD_FLOAT, 1, {3}, G}, vs = {PD_FLOAT, 1, {3}, V},
                  hs = {PD_FLOAT, 1, {3}, H};
        float o[3][3];
        pd_tensor os[3] = {{PD_FLOAT, 1, {3}, o[0]}, {PD_FLOAT, 1, {3}, o[1]}, {PD_FLOAT, 1, {3}, o[2]}};
        pd_tensor *in[6] = {&r, &t, &xs, &gs, cs[k].op == PD_OP_ADAGRAD ? &hs : &vs, &hs};
        pd_tensor *out[3] = {&os[0], &os[1], &os[2]};
        pd__attr a[6] = {{"alpha", PD_A_FLOAT, 0, 0.9f, NULL, 0, NULL, NULL, NULL},
                         {"beta", PD_A_FLOAT, 0, cs[k].op == PD_OP_ADAM ? 0.99f : 0.5f, NULL, 0, NULL, NULL, NULL},
                         {"epsilon", PD_A_FLOAT, 0, 1e-3f, NULL, 0, NULL, NULL, NULL},
                         {"norm_coefficient", PD_A_FLOAT, 0, 0.01f, NULL, 0, NULL, NULL, NULL},
                         {"norm_coefficient_post", PD_A_FLOAT, 0, 0.1f, NULL, 0, NULL, NULL, NULL},
                         {"decay_factor", PD_A_FLOAT, 0, 0.5f, NULL, 0, NULL, NULL, NULL}};
        pd__attr mode = {"mode", PD_A_STRING, 0, 0, "nesterov", 0, NULL, NULL, NULL};
        if (cs[k].op == PD_OP_MOMENTUM) a[4] = mode;
        pd__node n = node(cs[k].op, 1, cs[k].op == PD_OP_ADAM ? 6 : 5);
        n.nout = cs[k].nout;
        n.nattr = 6;
        n.attr = a;
        bool ok = pd__cpu_kernels[n.op](x, &n, in, out) == PD_OK;
        double worst = 0;
        for (int j = 0; j < cs[k].nout; j++)
            for (int e = 0; e < 3; e++) {
                double d = fabs(o[j][e] - cs[k].want[j][e]) / (fabs(cs[k].want[j][e]) + 1e-6);
                if (!(d <= worst)) worst = d;
            }
        CHECK(ok && worst < 1e-5, "%s matches onnx.reference (max rel diff %.2g)", what[k], worst);
    }
}

int main(void) {
    pd__exec x = {.threads = 1};
    test_binary_random(&x);
    test_binary_threads();
    test_sum(&x);
    test_where(&x);
    test_reduce_random(&x);
    test_reduce_threads();
    test_unary(&x);
    test_cast(&x);
    test_float_math(&x);
    test_unsupported(&x);
    test_more_ops(&x);
    test_quant(&x);
    test_optim_ops(&x);
    free(x.scratch);
    return check_summary();
}
