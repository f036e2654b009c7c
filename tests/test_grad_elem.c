/* test_grad_elem.c - the element-wise backward kernels
 * (runtime/cpu/elementwise.c): every differentiable input of every op
 * against central finite differences in float64 (tests/gradcheck.h: also
 * += into din and each input asked for alone) over random broadcast
 * shapes, axes and attributes; the float32 backward against the float64
 * one at the same values; the fast paths (equal shapes, the bias
 * reduction, several threads) against naive sums; float16 through its
 * staging; and the rules finite differences cannot see (Relu at 0, Clip's
 * inclusive bounds, casts to integers, dout NULL, Equal). */
#include "gradcheck.h"
#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL 1e-6 /* finite differences, float64 */

static uint64_t rs = 0x2545f4914f6cdd1dull; /* TEST_SEED in the environment overrides */
static uint64_t rnd(void) {
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return rs;
}
static int irand(int n) { return (int)(rnd() % (uint64_t)n); }
static double urand(double lo, double hi) { return lo + (hi - lo) * (double)(rnd() >> 11) / 9007199254740992.0; }

/* ---- shapes ---------------------------------------------------------------------- */

/* A random shape of rank 0..maxr, dims 1..4; one time in eight, rank up
 * to 6 with dims 1..3. */
static void rand_shape(int maxr, int *nd, int64_t *s) {
    bool deep = irand(8) == 0;
    *nd = irand((deep ? 6 : maxr) + 1);
    for (int d = 0; d < *nd; d++) s[d] = 1 + irand(deep ? 3 : 4);
}

/* A shape that broadcasts to (ond, os): its trailing dims (rank often
 * lower), each the output's or 1. */
static void sub_shape(int ond, const int64_t *os, int *nd, int64_t *s) {
    *nd = irand(3) ? ond : irand(ond + 1);
    for (int d = 0; d < *nd; d++) s[d] = irand(3) == 0 ? 1 : os[d + ond - *nd];
}

static void fmt(char *buf, size_t n, int nd, const int64_t *s) { pd__format_shape(buf, n, nd, s); }

/* Input i of c, as doubles. */
static double *dat(gc *c, int i) { return gc_data(c, i); }
static int64_t cnt(gc *c, int i) { return c->g->tensors[c->in[i]].numel; }

/* ---- float32 against float64 ------------------------------------------------------- */

/* After gc_check: the inputs rounded to float (in place, so both runs see
 * the same values), forward and backward in float64 and in float32 with
 * the same output gradients, added into din = 0.5; every wanted input's
 * gradients must agree. */
static bool f32_consistent(gc *c, uint32_t mask, char *why, size_t wn) {
    pd__node *n = &c->node;
    pd_graph *g = c->g;
    pd_tensor v[2][16], o[2][16], d[2][16], gi[2][16];
    pd_tensor *iv[2][16], *ov[2][16], *dv[2][16], *gv[2][16];
    void *own[256];
    int nown = 0;
    bool ok = true;
    for (int i = 0; i < c->nin; i++) {
        for (int p = 0; p < 2; p++) iv[p][i] = gv[p][i] = NULL;
        if (c->in[i] < 0) continue;
        pd__tensor *t = &g->tensors[c->in[i]];
        v[0][i] = v[1][i] = pd__view(t);
        if (t->dtype == PD_DOUBLE) {
            double *p = t->data;
            float *q = own[nown++] = calloc((size_t)t->numel + 1, sizeof(float));
            for (int64_t k = 0; k < t->numel; k++) q[k] = (float)p[k], p[k] = q[k];
            v[1][i].dtype = PD_FLOAT;
            v[1][i].data = q;
        }
        for (int p = 0; p < 2; p++) iv[p][i] = &v[p][i];
        if (!((mask >> i) & 1) || t->dtype != PD_DOUBLE) continue;
        for (int p = 0; p < 2; p++) {
            gi[p][i] = v[p][i];
            gi[p][i].data = own[nown++] = calloc((size_t)t->numel + 1, sizeof(double));
            gv[p][i] = &gi[p][i];
            for (int64_t k = 0; k < t->numel; k++) pd__set_f(gi[p][i].dtype, gi[p][i].data, k, 0.5); /* += */
        }
    }
    for (int j = 0; j < c->nout; j++) {
        pd__tensor *t = &g->tensors[c->out[j]];
        for (int p = 0; p < 2; p++) {
            o[p][j] = pd__view(t);
            if (p == 1 && t->dtype == PD_DOUBLE) o[p][j].dtype = PD_FLOAT;
            o[p][j].data = own[nown++] = calloc((size_t)t->numel + 1, sizeof(double));
            ov[p][j] = &o[p][j];
            dv[p][j] = NULL;
        }
        if (t->dtype != PD_DOUBLE) continue;
        for (int p = 0; p < 2; p++) {
            d[p][j] = o[p][j];
            d[p][j].data = own[nown++] = calloc((size_t)t->numel + 1, sizeof(double));
            dv[p][j] = &d[p][j];
        }
        for (int64_t k = 0; k < t->numel; k++) {
            float r = (float)urand(-1, 1);
            ((double *)d[0][j].data)[k] = r;
            ((float *)d[1][j].data)[k] = r;
        }
    }
    pd__exec x = {.threads = 1, .g = g};
    for (int p = 0; p < 2 && ok; p++) {
        if (pd__cpu_run(&x, g, n, iv[p], ov[p]) != PD_OK ||
            pd__cpu_run_bwd(&x, g, n, iv[p], ov[p], dv[p], gv[p]) != PD_OK) {
            snprintf(why, wn, "%s run: %s", p ? "float32" : "float64", pd_last_error());
            ok = false;
        }
    }
    for (int i = 0; i < c->nin && ok; i++) {
        if (!gv[0][i]) continue;
        int64_t m = pd_tensor_numel(gv[0][i]);
        const double *a = gi[0][i].data;
        const float *b = gi[1][i].data;
        double scale = 0;
        for (int64_t k = 0; k < m; k++) scale = fmax(scale, fabs(a[k]));
        for (int64_t k = 0; k < m && ok; k++) {
            if (!(fabs(a[k] - b[k]) <= 1e-4 * (fabs(a[k]) + 1e-2 * scale) + 1e-5)) {
                snprintf(why, wn, "input %d element %lld: float32 %.8g, float64 %.8g", i, (long long)k, b[k], a[k]);
                ok = false;
            }
        }
    }
    free(x.scratch);
    for (int k = 0; k < nown; k++) free(own[k]);
    return ok;
}

/* ---- groups of random cases --------------------------------------------------------- */

typedef struct group {
    const char *name;
    int cases, fails;
    char first[900];
} group;

/* Checks c (finite differences, then float32 consistency) and frees it. */
static void run_case(group *gr, gc *c, uint32_t mask, const char *desc) {
    char why[600];
    bool ok = gc_check(c, TOL, mask);
    if (ok) ok = f32_consistent(c, mask, why, sizeof why);
    else snprintf(why, sizeof why, "%s", gc_why(c));
    gr->cases++;
    if (!ok && !gr->fails++) snprintf(gr->first, sizeof gr->first, "%.280s: %.600s", desc, why);
    gc_free(c);
}

static void group_end(group *gr) {
    CHECK(gr->fails == 0, "%s: %d random cases, finite differences and float32 vs float64%s%s", gr->name, gr->cases,
          gr->fails ? "; first failure: " : "", gr->first);
}

/* ---- binary ops ------------------------------------------------------------------ */

/* Values of a binary op's inputs that keep it smooth: Div's B away from 0,
 * Pow's base positive. */
static void binary_values(gc *c, const char *op) {
    if (!strcmp(op, "Div"))
        for (int64_t k = 0; k < cnt(c, 1); k++) dat(c, 1)[k] = urand(0.5, 1.5) * (irand(2) ? 1 : -1);
    if (!strcmp(op, "Pow")) {
        for (int64_t k = 0; k < cnt(c, 0); k++) dat(c, 0)[k] = urand(0.5, 2.0);
        for (int64_t k = 0; k < cnt(c, 1); k++) dat(c, 1)[k] = urand(-2.0, 2.0);
    }
}

static void test_binary(const char *op) {
    char name[64];
    snprintf(name, sizeof name, "%s (numpy broadcasting)", op);
    group gr = {name, 0, 0, ""};
    for (int t = 0; t < 120; t++) {
        int ond, na, nb;
        int64_t os[PD_MAX_DIMS], sa[PD_MAX_DIMS], sb[PD_MAX_DIMS];
        rand_shape(4, &ond, os);
        sub_shape(ond, os, &na, sa);
        sub_shape(ond, os, &nb, sb);
        if (t == 0) na = ond, memcpy(sa, os, sizeof sa), nb = 0; /* a scalar operand */
        if (t == 1) na = nb = ond, memcpy(sa, os, sizeof sa), memcpy(sb, os, sizeof sb); /* equal shapes */
        gc *c = gc_new(op, 14);
        gc_seed(c, rnd());
        gc_input(c, PD_DOUBLE, na, sa, NULL);
        gc_input(c, PD_DOUBLE, nb, sb, NULL);
        gc_outputs(c, 1);
        binary_values(c, op);
        char d[256], s1[96], s2[96];
        fmt(s1, sizeof s1, na, sa);
        fmt(s2, sizeof s2, nb, sb);
        snprintf(d, sizeof d, "%s %s %s", op, s1, s2);
        run_case(&gr, c, 0x3, d);
    }
    /* opset < 7: B's dims line up with A's at `axis` */
    for (int t = 0; t < 4; t++) {
        int64_t sa[3] = {2, 3, 4}, sb[2] = {3, 4};
        int nb = t < 2 ? 1 : 2;
        if (t == 0 || t == 2) sb[0] = 3; /* at axis 1 */
        else sb[0] = 2;                  /* at axis 0 */
        if (t == 3) sb[1] = 3;           /* (2, 3) at axis 0 */
        gc *c = gc_new(op, 6);
        gc_seed(c, rnd());
        gc_input(c, PD_DOUBLE, 3, sa, NULL);
        gc_input(c, PD_DOUBLE, nb, sb, NULL);
        gc_attr_i(c, "broadcast", 1);
        gc_attr_i(c, "axis", t == 0 || t == 2 ? 1 : 0);
        gc_outputs(c, 1);
        binary_values(c, op);
        run_case(&gr, c, 0x3, "opset 6 broadcast=1 with axis");
    }
    group_end(&gr);
}

/* Pow's special cases: exponent 2 (the forward's x*x path), integer
 * exponents at base 0 (masked 0 * inf), an exponent of another dtype. */
static void test_pow_special(void) {
    group gr = {"Pow (x^2 path, base 0, float32 and int64 exponents)", 0, 0, ""};
    int64_t s3[1] = {3}, s1[1] = {1};
    {
        gc *c = gc_new("Pow", 15);
        gc_input(c, PD_DOUBLE, 1, s3, NULL);
        gc_input(c, PD_DOUBLE, 0, s1, NULL);
        for (int k = 0; k < 3; k++) dat(c, 0)[k] = urand(0.5, 2); /* positive: log(base) for the exponent's */
        dat(c, 1)[0] = 2.0;
        gc_outputs(c, 1);
        run_case(&gr, c, 0x3, "x^2, scalar exponent");
    }
    {
        gc *c = gc_new("Pow", 15);
        gc_input(c, PD_DOUBLE, 1, s3, NULL);
        gc_input(c, PD_DOUBLE, 1, s3, NULL);
        double b[3] = {0.0, 0.5, 1.5}, e[3] = {2.0, 3.0, 0.0};
        memcpy(dat(c, 0), b, sizeof b);
        memcpy(dat(c, 1), e, sizeof e);
        gc_outputs(c, 1);
        run_case(&gr, c, 0x3, "base 0 with exponent 2, exponent 0");
    }
    {
        int64_t sa[2] = {2, 3};
        float e[3] = {1.5f, -0.5f, 2.25f};
        gc *c = gc_new("Pow", 15);
        gc_input(c, PD_DOUBLE, 2, sa, NULL);
        for (int k = 0; k < 6; k++) dat(c, 0)[k] = urand(0.5, 2);
        gc_input(c, PD_FLOAT, 1, s3, e);
        gc_outputs(c, 1);
        run_case(&gr, c, 0x1, "float64 base, float32 exponent");
    }
    {
        int64_t sa[2] = {2, 3};
        int64_t e[3] = {3, -1, 2};
        gc *c = gc_new("Pow", 15);
        gc_input(c, PD_DOUBLE, 2, sa, NULL);
        gc_input(c, PD_INT64, 1, s3, e);
        gc_outputs(c, 1);
        run_case(&gr, c, 0x1, "float64 base, int64 exponent");
    }
    group_end(&gr);
}

static void test_sum(void) {
    group gr = {"Sum (1 to 4 inputs, broadcasting)", 0, 0, ""};
    for (int t = 0; t < 60; t++) {
        int ond, nk = 1 + t % 4;
        int64_t os[PD_MAX_DIMS];
        rand_shape(4, &ond, os);
        gc *c = gc_new("Sum", 13);
        gc_seed(c, rnd());
        char d[512] = "Sum", s[96];
        for (int k = 0; k < nk; k++) {
            int nd;
            int64_t sh[PD_MAX_DIMS];
            sub_shape(ond, os, &nd, sh);
            gc_input(c, PD_DOUBLE, nd, sh, NULL);
            fmt(s, sizeof s, nd, sh);
            strncat(d, " ", sizeof d - strlen(d) - 1);
            strncat(d, s, sizeof d - strlen(d) - 1);
        }
        gc_outputs(c, 1);
        run_case(&gr, c, (1u << nk) - 1, d);
    }
    group_end(&gr);
}

static void test_where(void) {
    group gr = {"Where (3-way broadcasting)", 0, 0, ""};
    for (int t = 0; t < 100; t++) {
        int ond, nc, nx, ny;
        int64_t os[PD_MAX_DIMS], sc[PD_MAX_DIMS], sx[PD_MAX_DIMS], sy[PD_MAX_DIMS];
        rand_shape(4, &ond, os);
        sub_shape(ond, os, &nc, sc);
        sub_shape(ond, os, &nx, sx);
        sub_shape(ond, os, &ny, sy);
        uint8_t cond[256];
        int64_t ncond = pd__shape_numel(nc, sc);
        for (int64_t k = 0; k < ncond; k++) cond[k] = (uint8_t)irand(2);
        gc *c = gc_new("Where", 16);
        gc_seed(c, rnd());
        gc_input(c, PD_BOOL, nc, sc, cond);
        gc_input(c, PD_DOUBLE, nx, sx, NULL);
        gc_input(c, PD_DOUBLE, ny, sy, NULL);
        gc_outputs(c, 1);
        char d[300], a[96], b[96], e[96];
        fmt(a, sizeof a, nc, sc);
        fmt(b, sizeof b, nx, sx);
        fmt(e, sizeof e, ny, sy);
        snprintf(d, sizeof d, "Where %s %s %s", a, b, e);
        run_case(&gr, c, 0x6, d);
    }
    group_end(&gr);
}

/* ---- unary ops ------------------------------------------------------------------- */

typedef enum { V_ANY, V_POS, V_NONZERO, V_KINK0 } vkind;

static void unary_values(gc *c, vkind vk, double lo, double hi) {
    for (int64_t k = 0; k < cnt(c, 0); k++) {
        double v = urand(lo, hi);
        if (vk == V_POS) v = urand(0.3, 2.0);
        if (vk == V_NONZERO) v = urand(0.3, 2.0) * (irand(2) ? 1 : -1);
        if (vk == V_KINK0) v = urand(0.05, 1.5) * (irand(2) ? 1 : -1);
        dat(c, 0)[k] = v;
    }
}

static void test_unary(const char *op, vkind vk, double lo, double hi) {
    char name[64];
    snprintf(name, sizeof name, "%s", op);
    group gr = {name, 0, 0, ""};
    for (int t = 0; t < 30; t++) {
        int nd;
        int64_t s[PD_MAX_DIMS];
        rand_shape(4, &nd, s);
        gc *c = gc_new(op, 13);
        gc_seed(c, rnd());
        gc_input(c, PD_DOUBLE, nd, s, NULL);
        unary_values(c, vk, lo, hi);
        gc_outputs(c, 1);
        char d[128], sh[96];
        fmt(sh, sizeof sh, nd, s);
        snprintf(d, sizeof d, "%s %s", op, sh);
        run_case(&gr, c, 0x1, d);
    }
    group_end(&gr);
}

static void test_leaky_gelu(void) {
    group gr = {"LeakyRelu (alpha), Gelu (none, tanh)", 0, 0, ""};
    const float alphas[3] = {0.01f, 0.2f, -1.5f};
    for (int t = 0; t < 40; t++) {
        int nd;
        int64_t s[PD_MAX_DIMS];
        rand_shape(3, &nd, s);
        bool gelu = t >= 16;
        gc *c = gc_new(gelu ? "Gelu" : "LeakyRelu", gelu ? 20 : 16);
        gc_seed(c, rnd());
        gc_input(c, PD_DOUBLE, nd, s, NULL);
        unary_values(c, gelu ? V_ANY : V_KINK0, -3, 3);
        char d[128];
        if (gelu) {
            if (t % 3) gc_attr_s(c, "approximate", t % 3 == 1 ? "tanh" : "none");
            snprintf(d, sizeof d, "Gelu approximate=%s", t % 3 == 1 ? "tanh" : "none");
        } else {
            if (t % 4) gc_attr_f(c, "alpha", alphas[t % 3]);
            snprintf(d, sizeof d, "LeakyRelu alpha=%g", t % 4 ? (double)alphas[t % 3] : 0.01);
        }
        gc_outputs(c, 1);
        run_case(&gr, c, 0x1, d);
    }
    group_end(&gr);
}

/* Clip: bounds as inputs (opset 13, either absent) or attributes (opset 6),
 * x kept 0.02 away from them; min > max gives max everywhere and no gradient. */
static void test_clip(void) {
    group gr = {"Clip (input and attribute bounds)", 0, 0, ""};
    for (int t = 0; t < 48; t++) {
        int nd;
        int64_t s[PD_MAX_DIMS];
        rand_shape(3, &nd, s);
        double lo = urand(-0.8, 0.0), hi = urand(0.0, 0.8);
        int form = t % 6; /* 0: both inputs, 1: min only, 2: max only, 3: none, 4: attributes, 5: min > max */
        if (form == 5) {
            double tmp = lo;
            lo = hi + 0.1;
            hi = tmp;
        }
        bool has_lo = form != 2 && form != 3, has_hi = form != 1 && form != 3;
        gc *c = gc_new("Clip", form == 4 ? 6 : 13);
        gc_seed(c, rnd());
        gc_input(c, PD_DOUBLE, nd, s, NULL);
        for (int64_t k = 0; k < cnt(c, 0); k++) {
            double v;
            do v = urand(-1.5, 1.5);
            while ((has_lo && fabs(v - lo) < 0.02) || (has_hi && fabs(v - hi) < 0.02));
            dat(c, 0)[k] = v;
        }
        if (form == 4) {
            gc_attr_f(c, "min", (float)lo);
            gc_attr_f(c, "max", (float)hi);
        } else {
            if (has_lo || has_hi) {
                if (has_lo) gc_input(c, PD_DOUBLE, 0, NULL, &lo);
                else gc_absent(c);
            }
            if (has_hi) gc_input(c, PD_DOUBLE, 0, NULL, &hi);
        }
        gc_outputs(c, 1);
        char d[128];
        snprintf(d, sizeof d, "Clip form %d min %g max %g", form, lo, hi);
        run_case(&gr, c, 0x1, d);
    }
    group_end(&gr);
}

/* ---- Max, Min, Mean, Mod, PRelu ------------------------------------------------------ */

/* Max, Min, Mean: 1 to 4 inputs broadcast together; random values (ties
 * are checked directly in test_ties). */
static void test_variadic(const char *op) {
    char name[64];
    snprintf(name, sizeof name, "%s (1 to 4 inputs, broadcasting)", op);
    group gr = {name, 0, 0, ""};
    for (int t = 0; t < 60; t++) {
        int ond, nk = 1 + t % 4;
        int64_t os[PD_MAX_DIMS];
        rand_shape(4, &ond, os);
        gc *c = gc_new(op, 13);
        gc_seed(c, rnd());
        char d[512], s[96];
        snprintf(d, sizeof d, "%s", op);
        for (int k = 0; k < nk; k++) {
            int nd;
            int64_t sh[PD_MAX_DIMS];
            sub_shape(ond, os, &nd, sh);
            gc_input(c, PD_DOUBLE, nd, sh, NULL);
            fmt(s, sizeof s, nd, sh);
            strncat(d, " ", sizeof d - strlen(d) - 1);
            strncat(d, s, sizeof d - strlen(d) - 1);
        }
        gc_outputs(c, 1);
        run_case(&gr, c, (1u << nk) - 1, d);
    }
    group_end(&gr);
}

/* Mod (fmod 0 and 1): B = +-m, A = m (k + f) with f in [0.1, 0.9], so that
 * A / B stays away from the integers where the result jumps. */
static void test_mod(void) {
    group gr = {"Mod (fmod 0 and 1, numpy broadcasting)", 0, 0, ""};
    for (int t = 0; t < 80; t++) {
        int ond, na, nb;
        int64_t os[PD_MAX_DIMS], sa[PD_MAX_DIMS], sb[PD_MAX_DIMS];
        rand_shape(4, &ond, os);
        sub_shape(ond, os, &na, sa);
        sub_shape(ond, os, &nb, sb);
        int fm = t % 2;
        double m = urand(0.5, 2.0);
        gc *c = gc_new("Mod", 13);
        gc_seed(c, rnd());
        gc_input(c, PD_DOUBLE, na, sa, NULL);
        gc_input(c, PD_DOUBLE, nb, sb, NULL);
        gc_attr_i(c, "fmod", fm);
        for (int64_t k = 0; k < cnt(c, 0); k++) dat(c, 0)[k] = m * (irand(7) - 3 + urand(0.1, 0.9));
        for (int64_t k = 0; k < cnt(c, 1); k++) dat(c, 1)[k] = irand(2) ? m : -m;
        gc_outputs(c, 1);
        char d[256], s1[96], s2[96];
        fmt(s1, sizeof s1, na, sa);
        fmt(s2, sizeof s2, nb, sb);
        snprintf(d, sizeof d, "Mod fmod=%d %s %s", fm, s1, s2);
        run_case(&gr, c, 0x3, d);
    }
    group_end(&gr);
}

/* PRelu: the slope broadcast one way to X (opset 16), or X's shape / one
 * value / one per channel (opset 6); X away from the kink at 0. */
static void test_prelu(void) {
    group gr = {"PRelu (slope broadcast to X)", 0, 0, ""};
    for (int t = 0; t < 60; t++) {
        int nx, ns;
        int64_t sx[PD_MAX_DIMS], ss[PD_MAX_DIMS];
        rand_shape(4, &nx, sx);
        sub_shape(nx, sx, &ns, ss);
        int opset = 16;
        if (t % 10 == 0) opset = 6, ns = 0;
        if (t % 10 == 1) opset = 6, ns = nx, memcpy(ss, sx, sizeof ss);
        if (t % 10 == 2 && nx >= 2) opset = 6, ns = 1, ss[0] = sx[1]; /* per channel */
        gc *c = gc_new("PRelu", opset);
        gc_seed(c, rnd());
        gc_input(c, PD_DOUBLE, nx, sx, NULL);
        gc_input(c, PD_DOUBLE, ns, ss, NULL);
        unary_values(c, V_KINK0, 0, 0);
        gc_outputs(c, 1);
        char d[256], s1[96], s2[96];
        fmt(s1, sizeof s1, nx, sx);
        fmt(s2, sizeof s2, ns, ss);
        snprintf(d, sizeof d, "PRelu opset %d X %s slope %s", opset, s1, s2);
        run_case(&gr, c, 0x3, d);
    }
    group_end(&gr);
}

/* ---- activations, trigonometry, Abs ------------------------------------------------------ */

typedef struct act_case {
    const char *op;
    int opset;
    double lo, hi;     /* x drawn in [lo, hi] */
    const char *a, *b; /* attributes set (NULL: default) */
    float av, bv;
    int nk;
    double kink[2]; /* x kept 0.02 away from these */
} act_case;

static void test_acts(void) {
    static const act_case cases[] = {
        {"HardSigmoid", 6, -4, 4, NULL, NULL, 0, 0, 2, {-2.5, 2.5}},
        {"HardSigmoid", 6, -4, 4, "alpha", "beta", 0.5f, 0.25f, 2, {-0.5, 1.5}},
        {"HardSwish", 14, -5, 5, NULL, NULL, 0, 0, 2, {-3, 3}},
        {"Softplus", 1, -4, 4, NULL, NULL, 0, 0, 0, {0, 0}},
        {"Softsign", 1, -3, 3, NULL, NULL, 0, 0, 1, {0, 0}},
        {"Elu", 6, -3, 3, NULL, NULL, 0, 0, 1, {0, 0}},
        {"Elu", 6, -3, 3, "alpha", NULL, 0.4f, 0, 1, {0, 0}},
        {"Selu", 6, -3, 3, NULL, NULL, 0, 0, 1, {0, 0}},
        {"Selu", 6, -3, 3, "alpha", "gamma", 2.0f, 0.7f, 1, {0, 0}},
        {"Celu", 12, -3, 3, NULL, NULL, 0, 0, 1, {0, 0}},
        {"Celu", 12, -3, 3, "alpha", NULL, 2.5f, 0, 1, {0, 0}},
        {"Mish", 18, -4, 4, NULL, NULL, 0, 0, 0, {0, 0}},
        {"Swish", 24, -4, 4, NULL, NULL, 0, 0, 0, {0, 0}},
        {"Swish", 24, -4, 4, "alpha", NULL, 1.702f, 0, 0, {0, 0}},
        {"ThresholdedRelu", 10, -3, 3, NULL, NULL, 0, 0, 1, {1, 0}},
        {"ThresholdedRelu", 10, -3, 3, "alpha", NULL, -0.5f, 0, 1, {-0.5, 0}},
        {"Shrink", 9, -2, 2, NULL, NULL, 0, 0, 2, {-0.5, 0.5}},
        {"Shrink", 9, -2, 2, "lambd", "bias", 1.0f, 0.3f, 2, {-1, 1}},
        {"Abs", 13, -2, 2, NULL, NULL, 0, 0, 1, {0, 0}},
        {"Sin", 7, -4, 4, NULL, NULL, 0, 0, 0, {0, 0}},
        {"Cos", 7, -4, 4, NULL, NULL, 0, 0, 0, {0, 0}},
        {"Tan", 7, -1.2, 1.2, NULL, NULL, 0, 0, 0, {0, 0}},
        {"Asin", 7, -0.9, 0.9, NULL, NULL, 0, 0, 0, {0, 0}},
        {"Acos", 7, -0.9, 0.9, NULL, NULL, 0, 0, 0, {0, 0}},
        {"Atan", 7, -3, 3, NULL, NULL, 0, 0, 0, {0, 0}},
        {"Sinh", 9, -2, 2, NULL, NULL, 0, 0, 0, {0, 0}},
        {"Cosh", 9, -2, 2, NULL, NULL, 0, 0, 0, {0, 0}},
        {"Asinh", 9, -3, 3, NULL, NULL, 0, 0, 0, {0, 0}},
        {"Acosh", 9, 1.1, 3, NULL, NULL, 0, 0, 0, {0, 0}},
        {"Atanh", 9, -0.9, 0.9, NULL, NULL, 0, 0, 0, {0, 0}},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        const act_case *ac = &cases[k];
        char name[96];
        snprintf(name, sizeof name, "%s%s%s", ac->op, ac->a ? " with " : "", ac->a ? ac->a : "");
        group gr = {name, 0, 0, ""};
        for (int t = 0; t < 24; t++) {
            int nd;
            int64_t s[PD_MAX_DIMS];
            rand_shape(4, &nd, s);
            gc *c = gc_new(ac->op, ac->opset);
            gc_seed(c, rnd());
            gc_input(c, PD_DOUBLE, nd, s, NULL);
            for (int64_t i = 0; i < cnt(c, 0); i++) {
                double v;
                bool near;
                do {
                    v = urand(ac->lo, ac->hi);
                    near = false;
                    for (int q = 0; q < ac->nk; q++) near |= fabs(v - ac->kink[q]) < 0.02;
                } while (near);
                dat(c, 0)[i] = v;
            }
            if (ac->a) gc_attr_f(c, ac->a, ac->av);
            if (ac->b) gc_attr_f(c, ac->b, ac->bv);
            gc_outputs(c, 1);
            char d[160], sh[96];
            fmt(sh, sizeof sh, nd, s);
            snprintf(d, sizeof d, "%s %s", name, sh);
            run_case(&gr, c, 0x1, d);
        }
        group_end(&gr);
    }
}

/* ---- Cast, Identity ---------------------------------------------------------------- */

static void test_cast_identity(void) {
    group gr = {"Cast (to double, to int64), Identity", 0, 0, ""};
    for (int t = 0; t < 6; t++) {
        int nd;
        int64_t s[PD_MAX_DIMS];
        rand_shape(3, &nd, s);
        gc *c = gc_new(t < 4 ? "Cast" : "Identity", 19);
        gc_seed(c, rnd());
        gc_input(c, PD_DOUBLE, nd, s, NULL);
        if (t < 4) gc_attr_i(c, "to", t < 2 ? PD_DOUBLE : PD_INT64);
        if (t >= 2 && t < 4) /* keep x away from integers, where the cast jumps */
            for (int64_t k = 0; k < cnt(c, 0); k++) dat(c, 0)[k] = floor(dat(c, 0)[k] * 3) + urand(0.1, 0.9);
        gc_outputs(c, 1);
        run_case(&gr, c, 0x1, t < 2 ? "Cast to double" : t < 4 ? "Cast to int64" : "Identity");
    }
    group_end(&gr);
}

/* CastLike: to the dtype of input 1 (float64 here: float32 would lose the
 * differences); its gradient goes to input 0 only. */
static void test_castlike(void) {
    group gr = {"CastLike (to float64)", 0, 0, ""};
    for (int t = 0; t < 6; t++) {
        int nd;
        int64_t s[PD_MAX_DIMS], s1[1] = {2};
        rand_shape(3, &nd, s);
        gc *c = gc_new("CastLike", 19);
        gc_seed(c, rnd());
        gc_input(c, PD_DOUBLE, nd, s, NULL);
        gc_input(c, PD_DOUBLE, 1, s1, NULL);
        gc_outputs(c, 1);
        run_case(&gr, c, 0x1, "CastLike to double");
    }
    group_end(&gr);
}

/* ---- reductions ------------------------------------------------------------------ */

static void test_reduce(const char *op) {
    char name[96];
    snprintf(name, sizeof name, "%s (axes, keepdims, noop_with_empty_axes)", op);
    group gr = {name, 0, 0, ""};
    bool sum = !strcmp(op, "ReduceSum");
    for (int t = 0; t < 120; t++) {
        int nd = 1 + irand(4);
        int64_t s[PD_MAX_DIMS], axes[PD_MAX_DIMS];
        for (int d = 0; d < nd; d++) s[d] = 1 + irand(4);
        int na = 0;
        for (int d = 0; d < nd; d++)
            if (irand(2)) axes[na++] = irand(2) ? d : d - nd;
        bool from_input = t % 2, keep = irand(2), noop = irand(2);
        int opset = from_input ? (sum ? 13 : 18) : (sum ? 11 : 13);
        gc *c = gc_new(op, opset);
        gc_seed(c, rnd());
        gc_input(c, PD_DOUBLE, nd, s, NULL);
        /* LogSum: a positive sum; L1: away from its kink at 0 */
        if (!strcmp(op, "ReduceLogSum")) unary_values(c, V_POS, 0, 0);
        if (!strcmp(op, "ReduceL1")) unary_values(c, V_KINK0, 0, 0);
        if (from_input) {
            if (na > 0 || irand(2)) {
                int64_t sa[1] = {na};
                gc_input(c, PD_INT64, 1, sa, axes);
            }
            if (noop) gc_attr_i(c, "noop_with_empty_axes", 1);
        } else if (na > 0) {
            gc_attr_ints(c, "axes", na, axes);
        }
        if (!keep || irand(2)) gc_attr_i(c, "keepdims", keep);
        gc_outputs(c, 1);
        char d[256], sh[96], ax[96] = "";
        fmt(sh, sizeof sh, nd, s);
        for (int k = 0; k < na; k++) snprintf(ax + strlen(ax), sizeof ax - strlen(ax), "%lld ", (long long)axes[k]);
        snprintf(d, sizeof d, "%s opset %d x %s axes [%s] keepdims %d noop %d", op, opset, sh, ax, keep,
                 from_input && noop);
        run_case(&gr, c, 0x1, d);
    }
    group_end(&gr);
}

/* ---- direct checks -------------------------------------------------------------------- */

static pd__node mknode(const char *op, int opset, int nin) {
    pd__node n;
    memset(&n, 0, sizeof n);
    n.name = (char *)"n";
    n.op_type = (char *)op;
    n.domain = (char *)"";
    n.op = pd__op_lookup(op);
    n.opset = opset;
    n.nin = nin;
    n.nout = 1;
    return n;
}

static pd_tensor tens(pd_dtype t, int nd, const int64_t *s) {
    pd_tensor x = {t, nd, {0}, NULL};
    for (int d = 0; d < nd; d++) x.shape[d] = s[d];
    int64_t n = pd_tensor_numel(&x);
    x.data = calloc((size_t)(n ? n : 1), pd_dtype_size(t) ? pd_dtype_size(t) : 1);
    return x;
}

/* A node's CPU forward and backward, called directly (no graph). */
static pd_status fwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    return pd__cpu_kernels[n->op](x, n, in, out);
}
static pd_status bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                     pd_tensor *const *dout, pd_tensor *const *din) {
    return pd__cpu_grads[n->op](x, n, in, out, dout, din);
}

/* Relu's gradient at 0 is 0; Clip's passes at both bounds (inclusive). */
static void test_kinks(void) {
    pd__exec x = {.threads = 1};
    int64_t s[1] = {5};
    pd_tensor X = tens(PD_DOUBLE, 1, s), Y = tens(PD_DOUBLE, 1, s), G = tens(PD_DOUBLE, 1, s),
              D = tens(PD_DOUBLE, 1, s);
    double xv[5] = {0.0, -0.0, 1.0, -1.0, 0.5};
    memcpy(X.data, xv, sizeof xv);
    for (int k = 0; k < 5; k++) ((double *)G.data)[k] = 1.0 + k;
    pd_tensor *in[3] = {&X, NULL, NULL}, *out[1] = {&Y}, *dout[1] = {&G}, *din[3] = {&D, NULL, NULL};
    pd__node n = mknode("Relu", 14, 1);
    bool ok = pd__cpu_Relu(&x, &n, in, out) == PD_OK && pd__cpu_Relu_bwd(&x, &n, in, out, dout, din) == PD_OK;
    const double *d = D.data;
    CHECK(ok && d[0] == 0 && d[1] == 0 && d[2] == 3 && d[3] == 0 && d[4] == 5,
          "Relu: gradient 0 at 0 (got %g %g %g %g %g)", d[0], d[1], d[2], d[3], d[4]);
    /* Clip [-1, 0.5]: x = 0 (inside), -0 (inside), 1 (above), -1 (= min), 0.5 (= max) */
    int64_t s0[1] = {1};
    pd_tensor lo = tens(PD_DOUBLE, 0, s0), hi = tens(PD_DOUBLE, 0, s0);
    *(double *)lo.data = -1.0;
    *(double *)hi.data = 0.5;
    memset(D.data, 0, 5 * sizeof(double));
    in[1] = &lo;
    in[2] = &hi;
    n = mknode("Clip", 13, 3);
    ok = pd__cpu_Clip(&x, &n, in, out) == PD_OK && pd__cpu_Clip_bwd(&x, &n, in, out, dout, din) == PD_OK;
    CHECK(ok && d[0] == 1 && d[1] == 2 && d[2] == 0 && d[3] == 4 && d[4] == 5,
          "Clip: gradient passes at min and max (got %g %g %g %g %g)", d[0], d[1], d[2], d[3], d[4]);
    free(lo.data);
    free(hi.data);
    free(X.data);
    free(Y.data);
    free(G.data);
    free(D.data);
    free(x.scratch);
}

/* Casts: to an integer type adds nothing; float <-> float converts. */
static void test_casts(void) {
    pd__exec x = {.threads = 1};
    int64_t s[1] = {4};
    pd_tensor X = tens(PD_FLOAT, 1, s), G = tens(PD_INT64, 1, s), D = tens(PD_FLOAT, 1, s);
    for (int k = 0; k < 4; k++) ((int64_t *)G.data)[k] = 7, ((float *)D.data)[k] = 1.0f;
    pd_tensor Y = G;
    pd_tensor *in[1] = {&X}, *out[1] = {&Y}, *dout[1] = {&G}, *din[1] = {&D};
    pd__node n = mknode("Cast", 19, 1);
    pd_status st = pd__cpu_Cast_bwd(&x, &n, in, out, dout, din);
    const float *d = D.data;
    CHECK(st == PD_OK && d[0] == 1 && d[3] == 1, "Cast float -> int64: no gradient added (%s)", pd_status_name(st));
    /* float32 -> float64 -> float16 -> float32 */
    pd_tensor G64 = tens(PD_DOUBLE, 1, s), D32 = tens(PD_FLOAT, 1, s), G16 = tens(PD_FLOAT16, 1, s),
              D64 = tens(PD_DOUBLE, 1, s), D16 = tens(PD_FLOAT16, 1, s), G32 = tens(PD_FLOAT, 1, s);
    double gv[4] = {0.1, -2.5, 3.0e-3, 1e5};
    memcpy(G64.data, gv, sizeof gv);
    for (int k = 0; k < 4; k++) {
        ((float *)D32.data)[k] = 1.0f;
        ((uint16_t *)G16.data)[k] = pd__float_to_half((float)k - 1.5f);
        ((double *)D64.data)[k] = 0.25;
        ((uint16_t *)D16.data)[k] = pd__float_to_half(0.5f);
        ((float *)G32.data)[k] = 0.125f * (float)k;
    }
    pd_tensor X32 = tens(PD_FLOAT, 1, s), X16 = tens(PD_FLOAT16, 1, s), X64 = tens(PD_DOUBLE, 1, s);
    bool ok = true;
    in[0] = &X32, out[0] = &G64, dout[0] = &G64, din[0] = &D32;
    ok &= pd__cpu_Cast_bwd(&x, &n, in, out, dout, din) == PD_OK;
    for (int k = 0; k < 4; k++) ok &= ((float *)D32.data)[k] == (float)(1.0 + gv[k]);
    in[0] = &X64, out[0] = &G16, dout[0] = &G16, din[0] = &D64;
    ok &= pd__cpu_Cast_bwd(&x, &n, in, out, dout, din) == PD_OK;
    for (int k = 0; k < 4; k++) ok &= ((double *)D64.data)[k] == 0.25 + ((double)k - 1.5);
    in[0] = &X16, out[0] = &G32, dout[0] = &G32, din[0] = &D16;
    ok &= pd__cpu_Cast_bwd(&x, &n, in, out, dout, din) == PD_OK;
    for (int k = 0; k < 4; k++) ok &= pd__half_to_float(((uint16_t *)D16.data)[k]) == 0.5f + 0.125f * (float)k;
    CHECK(ok, "Cast float32 <- float64, float64 <- float16, float16 <- float32: gradient added, converted");
    pd_tensor *all[] = {&X, &G, &D, &G64, &D32, &G16, &D64, &D16, &G32, &X32, &X16, &X64};
    for (size_t k = 0; k < sizeof all / sizeof *all; k++) free(all[k]->data);
    free(x.scratch);
}

/* dout NULL, nothing wanted, Equal. */
static void test_contract(void) {
    pd__exec x = {.threads = 1};
    int64_t s[2] = {2, 3};
    pd_tensor A = tens(PD_FLOAT, 2, s), B = tens(PD_FLOAT, 1, s + 1), Y = tens(PD_FLOAT, 2, s),
              DA = tens(PD_FLOAT, 2, s), DB = tens(PD_FLOAT, 1, s + 1);
    for (int k = 0; k < 6; k++) ((float *)DA.data)[k] = 3.0f;
    pd_tensor *in[2] = {&A, &B}, *out[1] = {&Y}, *dnull[1] = {NULL}, *din[2] = {&DA, &DB}, *none[2] = {NULL, NULL};
    pd__node n = mknode("Mul", 14, 2);
    bool ok = pd__cpu_Mul_bwd(&x, &n, in, out, dnull, din) == PD_OK && ((float *)DA.data)[5] == 3.0f;
    ok &= pd__cpu_Mul_bwd(&x, &n, in, out, dnull, none) == PD_OK;
    CHECK(ok, "Mul: dout NULL adds nothing; nothing wanted is fine");
    /* Pow with an int64 exponent: its gradient (were it asked for) gets nothing */
    int64_t s3[1] = {3};
    pd_tensor PE = tens(PD_INT64, 1, s3), PDE = tens(PD_INT64, 1, s3), PY = tens(PD_FLOAT, 2, s),
              PG = tens(PD_FLOAT, 2, s);
    for (int k = 0; k < 3; k++) ((int64_t *)PE.data)[k] = k + 1, ((int64_t *)PDE.data)[k] = 5;
    for (int k = 0; k < 6; k++) ((float *)A.data)[k] = 0.5f + (float)k, ((float *)PG.data)[k] = 1.0f;
    pd_tensor *pin[2] = {&A, &PE}, *pout[1] = {&PY}, *pdout[1] = {&PG}, *pdin[2] = {&DA, &PDE};
    pd__node pn = mknode("Pow", 15, 2);
    for (int k = 0; k < 6; k++) ((float *)DA.data)[k] = 0.0f;
    ok = fwd(&x, &pn, pin, pout) == PD_OK && bwd(&x, &pn, pin, pout, pdout, pdin) == PD_OK;
    for (int k = 0; k < 3; k++) ok &= ((int64_t *)PDE.data)[k] == 5;
    ok &= ((float *)DA.data)[5] == 3.0f * 5.5f * 5.5f; /* d(a^3)/da at a = 5.5 */
    CHECK(ok, "Pow float32 base, int64 exponent: the base's gradient; the exponent's untouched");
    /* Pow at base 0, as PyTorch: exponent 0 gives the base 0 (not 0 * inf), 0.5 gives it inf; exponents
     * >= 0 get 0 (not 0 * log 0) */
    pd_tensor ZB = tens(PD_DOUBLE, 1, s3), ZE = tens(PD_DOUBLE, 1, s3), ZY = tens(PD_DOUBLE, 1, s3),
              ZG = tens(PD_DOUBLE, 1, s3), ZDB = tens(PD_DOUBLE, 1, s3), ZDE = tens(PD_DOUBLE, 1, s3);
    double ze[3] = {0.0, 2.0, 0.5};
    memcpy(ZE.data, ze, sizeof ze);
    for (int k = 0; k < 3; k++) ((double *)ZG.data)[k] = 1.0;
    pd_tensor *zin[2] = {&ZB, &ZE}, *zout[1] = {&ZY}, *zdout[1] = {&ZG}, *zdin[2] = {&ZDB, &ZDE};
    ok = fwd(&x, &pn, zin, zout) == PD_OK && bwd(&x, &pn, zin, zout, zdout, zdin) == PD_OK;
    for (int k = 0; k < 3; k++) ok &= ((double *)ZDE.data)[k] == 0;
    ok &= ((double *)ZDB.data)[0] == 0 && ((double *)ZDB.data)[1] == 0 && ((double *)ZDB.data)[2] == INFINITY;
    CHECK(ok, "Pow at base 0, exponents 0, 2, 0.5: base 0 0 inf, exponent 0 0 0 (got %g %g %g, %g %g %g)",
          ((double *)ZDB.data)[0], ((double *)ZDB.data)[1], ((double *)ZDB.data)[2], ((double *)ZDE.data)[0],
          ((double *)ZDE.data)[1], ((double *)ZDE.data)[2]);
    pd_tensor *zall[] = {&ZB, &ZE, &ZY, &ZG, &ZDB, &ZDE};
    for (size_t k = 0; k < sizeof zall / sizeof *zall; k++) free(zall[k]->data);
    free(PE.data);
    free(PDE.data);
    free(PY.data);
    free(PG.data);
    pd__node e = mknode("Equal", 13, 2);
    pd_status st = pd__cpu_Equal_bwd(&x, &e, in, out, dnull, din);
    CHECK(st == PD_ERR_UNSUPPORTED && strstr(pd_last_error(), "not differentiable"), "Equal: %s: %s",
          pd_status_name(st), pd_last_error());
    free(A.data);
    free(B.data);
    free(Y.data);
    free(DA.data);
    free(DB.data);
    free(x.scratch);
}

/* ---- what each backward reads ---------------------------------------------------------- */

/* After gc_check: the backward asked for the inputs in `ask` gives the same
 * gradients when the data of every tensor it should not read (inputs not in
 * `reads`, the output unless `reads_y`) is NULL. What a session may free. */
static bool reads_only(gc *c, uint32_t ask, uint32_t reads, bool reads_y) {
    pd_graph *g = c->g;
    pd_tensor v[16], o, d, gi[2][16], *iv[2][16], *ov[2], *dv[1] = {&d}, *gv[2][16];
    for (int i = 0; i < c->nin; i++) {
        iv[0][i] = iv[1][i] = gv[0][i] = gv[1][i] = NULL;
        if (c->in[i] < 0) continue;
        v[i] = pd__view(&g->tensors[c->in[i]]);
        iv[0][i] = &v[i];
        if ((reads >> i) & 1) iv[1][i] = &v[i];
        else {
            iv[1][i] = malloc(sizeof(pd_tensor));
            *iv[1][i] = v[i];
            iv[1][i]->data = NULL;
        }
        for (int p = 0; p < 2 && ((ask >> i) & 1); p++) {
            gi[p][i] = v[i];
            gi[p][i].data = calloc((size_t)pd_tensor_numel(&v[i]) + 1, sizeof(double));
            gv[p][i] = &gi[p][i];
        }
    }
    o = pd__view(&g->tensors[c->out[0]]);
    pd_tensor onull = o;
    if (!reads_y) onull.data = NULL;
    ov[0] = &o;
    ov[1] = &onull;
    d = o;
    d.data = calloc((size_t)pd_tensor_numel(&o) + 1, sizeof(double));
    for (int64_t k = 0; k < pd_tensor_numel(&o); k++) ((double *)d.data)[k] = urand(-1, 1);
    pd__exec x = {.threads = 1, .g = g};
    bool ok = pd__cpu_run(&x, g, &c->node, iv[0], ov) == PD_OK;
    for (int p = 0; p < 2 && ok; p++) ok = pd__cpu_run_bwd(&x, g, &c->node, iv[p], ov + p, dv, gv[p]) == PD_OK;
    for (int i = 0; i < c->nin; i++) {
        if (gv[0][i]) {
            ok = ok && !memcmp(gi[0][i].data, gi[1][i].data, (size_t)pd_tensor_numel(&v[i]) * sizeof(double));
            free(gi[0][i].data);
            free(gi[1][i].data);
        }
        if (iv[1][i] && iv[1][i] != &v[i]) free(iv[1][i]);
    }
    free(d.data);
    free(x.scratch);
    return ok;
}

typedef struct reads_case {
    const char *op;
    int opset, nin;
    uint32_t ask, reads;
    bool reads_y;
} reads_case;

static void test_reads(void) {
    static const reads_case cases[] = {
        {"Add", 14, 2, 0x3, 0, false},       {"Sub", 14, 2, 0x3, 0, false},
        {"Sum", 13, 3, 0x7, 0, false},       {"Mul", 14, 2, 0x1, 0x2, false},
        {"Mul", 14, 2, 0x2, 0x1, false},     {"Div", 14, 2, 0x1, 0x2, false},
        {"Div", 14, 2, 0x2, 0x3, false},     {"Pow", 15, 2, 0x3, 0x3, false},
        {"Where", 16, 3, 0x6, 0x1, false},   {"Sqrt", 13, 1, 1, 0, true},
        {"Exp", 13, 1, 1, 0, true},          {"Log", 13, 1, 1, 1, false},
        {"Neg", 13, 1, 1, 0, false},         {"Reciprocal", 13, 1, 1, 0, true},
        {"Relu", 14, 1, 1, 0, true},         {"LeakyRelu", 16, 1, 1, 1, false},
        {"Sigmoid", 13, 1, 1, 0, true},      {"Tanh", 13, 1, 1, 0, true},
        {"Erf", 13, 1, 1, 1, false},         {"Gelu", 20, 1, 1, 1, false},
        {"Clip", 13, 3, 1, 0x7, false},      {"Cast", 19, 1, 1, 0, false},
        {"Identity", 19, 1, 1, 0, false},    {"ReduceSum", 13, 2, 1, 0x2, false},
        {"ReduceMean", 18, 2, 1, 0x2, false},
        {"Max", 13, 2, 0x3, 0x3, true},      {"Mean", 13, 2, 0x3, 0, false},
        {"PRelu", 16, 2, 0x3, 0x3, false},   {"Abs", 13, 1, 1, 1, false},
        {"Softplus", 1, 1, 1, 1, false},     {"Tan", 7, 1, 1, 0, true},
        {"CastLike", 19, 2, 1, 0, false},    {"ReduceMax", 18, 2, 1, 0x3, true},
        {"ReduceL2", 18, 2, 1, 0x3, true},   {"ReduceSumSquare", 18, 2, 1, 0x3, false},
    };
    char bad[512] = "";
    int nbad = 0;
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        const reads_case *rc = &cases[k];
        int64_t sx[2] = {3, 4}, sb[1] = {4}, s0[1] = {1}, ax[1] = {1};
        uint8_t cond[4] = {1, 0, 0, 1};
        double lo = -0.5, hi = 0.5;
        gc *c = gc_new(rc->op, rc->opset);
        gc_seed(c, rnd());
        if (!strcmp(rc->op, "Where")) gc_input(c, PD_BOOL, 1, sb, cond);
        int xi = gc_input(c, PD_DOUBLE, 2, sx, NULL);
        for (int64_t i = 0; i < 12; i++) dat(c, xi)[i] = urand(0.3, 1.5); /* positive for Sqrt, Log, Pow */
        if (!strcmp(rc->op, "Clip")) {
            gc_input(c, PD_DOUBLE, 0, s0, &lo);
            gc_input(c, PD_DOUBLE, 0, s0, &hi);
        } else if (!strncmp(rc->op, "Reduce", 6)) {
            gc_input(c, PD_INT64, 1, s0, ax);
        } else {
            for (int i = c->nin; i < rc->nin; i++) gc_input(c, PD_DOUBLE, 1, sb, NULL);
        }
        if (!strcmp(rc->op, "Cast")) gc_attr_i(c, "to", PD_DOUBLE);
        gc_outputs(c, 1);
        bool ok = gc_check(c, TOL, rc->ask) && reads_only(c, rc->ask, rc->reads, rc->reads_y);
        if (!ok && nbad++ < 4)
            snprintf(bad + strlen(bad), sizeof bad - strlen(bad), " %.12s(ask 0x%x: %.80s)", rc->op,
                     (unsigned)rc->ask, gc_why(c));
        gc_free(c);
    }
    CHECK(nbad == 0, "each backward reads only the tensors it needs (dout; Mul, Div, Pow, Where: the inputs their "
                     "formula uses; Sqrt, Exp, Reciprocal, Relu, Sigmoid, Tanh: y; Log, LeakyRelu, Erf, Gelu, "
                     "Clip: x; the rest neither)%s",
          bad);
}

/* ---- fast paths and threads ---------------------------------------------------------- */

/* float32 Add / Mul / Sub of x (N, C) and a bias (C) or a column (N, 1),
 * large enough for several threads: the gradients against naive sums in
 * double, and 2 threads bit-identical to 1. */
static void test_fast_paths(void) {
    const int64_t N = 300, C = 1000;
    int64_t sx[2] = {N, C}, sb[1] = {C}, sc[2] = {N, 1};
    pd_tensor X = tens(PD_FLOAT, 2, sx), Bb = tens(PD_FLOAT, 1, sb), Bc = tens(PD_FLOAT, 2, sc),
              Y = tens(PD_FLOAT, 2, sx), G = tens(PD_FLOAT, 2, sx);
    float *xv = X.data, *gv = G.data, *bv = Bb.data, *cv = Bc.data;
    for (int64_t k = 0; k < N * C; k++) xv[k] = (float)urand(-1, 1), gv[k] = (float)urand(-1, 1);
    for (int64_t k = 0; k < C; k++) bv[k] = (float)urand(-1, 1);
    for (int64_t k = 0; k < N; k++) cv[k] = (float)urand(-1, 1);
    const char *ops[3] = {"Add", "Mul", "Sub"};
    for (int oi = 0; oi < 3; oi++) {
        for (int col = 0; col < 2; col++) {
            pd_tensor *B = col ? &Bc : &Bb;
            int64_t nb = col ? N : C;
            pd__node n = mknode(ops[oi], 14, 2);
            pd_tensor da[2], db[2];
            bool ok = true;
            for (int th = 0; th < 2; th++) {
                pd__exec x = {.threads = th + 1};
                da[th] = tens(PD_FLOAT, 2, sx);
                db[th] = *B;
                db[th].data = calloc((size_t)nb, sizeof(float));
                for (int64_t k = 0; k < nb; k++) ((float *)db[th].data)[k] = 0.5f;
                pd_tensor *in[2] = {&X, B}, *out[1] = {&Y}, *dout[1] = {&G}, *din[2] = {&da[th], &db[th]};
                ok &= fwd(&x, &n, in, out) == PD_OK;
                ok &= bwd(&x, &n, in, out, dout, din) == PD_OK;
                free(x.scratch);
            }
            /* reference */
            double maxe = 0;
            for (int64_t j = 0; j < nb; j++) {
                double s = 0;
                if (col)
                    for (int64_t c = 0; c < C; c++) s += (double)gv[j * C + c] * (oi == 1 ? xv[j * C + c] : 1);
                else
                    for (int64_t r = 0; r < N; r++) s += (double)gv[r * C + j] * (oi == 1 ? xv[r * C + j] : 1);
                if (oi == 2) s = -s;
                maxe = fmax(maxe, fabs(((float *)db[0].data)[j] - 0.5 - s) / (1 + fabs(s)));
            }
            for (int64_t k = 0; k < N * C; k++) {
                double r = oi == 1 ? (double)gv[k] * (col ? cv[k / C] : bv[k % C]) : gv[k];
                maxe = fmax(maxe, fabs(((float *)da[0].data)[k] - r) / (1 + fabs(r)));
            }
            bool same = !memcmp(da[0].data, da[1].data, (size_t)(N * C) * sizeof(float)) &&
                        !memcmp(db[0].data, db[1].data, (size_t)nb * sizeof(float));
            CHECK(ok && maxe < 1e-4 && same, "%s float32 (%lld, %lld) and %s: max rel error %.2g, 2 threads %s",
                  ops[oi], (long long)N, (long long)C, col ? "(N, 1)" : "(C)", maxe, same ? "identical" : "DIFFER");
            for (int th = 0; th < 2; th++) free(da[th].data), free(db[th].data);
        }
    }
    /* ReduceMean over the last axis and over the first, float32, 2 threads */
    for (int ax = 0; ax < 2; ax++) {
        pd__node n = mknode("ReduceMean", 13, 1);
        pd__attr at;
        memset(&at, 0, sizeof at);
        int64_t axv[1] = {ax ? 1 : 0};
        at.name = (char *)"axes";
        at.type = PD_A_INTS;
        at.n = 1;
        at.ints = axv;
        n.attr = &at;
        n.nattr = 1;
        int64_t so[2] = {ax ? N : 1, ax ? 1 : C};
        pd_tensor Yr = tens(PD_FLOAT, 2, so), Gr = tens(PD_FLOAT, 2, so), D = tens(PD_FLOAT, 2, sx);
        for (int64_t k = 0; k < so[0] * so[1]; k++) ((float *)Gr.data)[k] = (float)urand(-1, 1);
        pd__exec x = {.threads = 2};
        pd_tensor *in[1] = {&X}, *out[1] = {&Yr}, *dout[1] = {&Gr}, *din[1] = {&D};
        bool ok = fwd(&x, &n, in, out) == PD_OK && bwd(&x, &n, in, out, dout, din) == PD_OK;
        double maxe = 0;
        for (int64_t r = 0; r < N; r++)
            for (int64_t c = 0; c < C; c++) {
                double want = ((float *)Gr.data)[ax ? r : c] / (double)(ax ? C : N);
                maxe = fmax(maxe, fabs(((float *)D.data)[r * C + c] - want));
            }
        CHECK(ok && maxe < 1e-7, "ReduceMean float32 (%lld, %lld) axis %d backward, 2 threads: max error %.2g",
              (long long)N, (long long)C, ax, maxe);
        free(Yr.data);
        free(Gr.data);
        free(D.data);
        free(x.scratch);
    }
    free(X.data);
    free(Bb.data);
    free(Bc.data);
    free(Y.data);
    free(G.data);
}

/* float16 (staged through float): Mul with a broadcast operand, Sigmoid,
 * ReduceSum, against float64 at the same values. */
static void test_float16(void) {
    int64_t sx[2] = {3, 5}, sb[1] = {5}, so[2] = {3, 1};
    const char *ops[3] = {"Mul", "Sigmoid", "ReduceSum"};
    for (int oi = 0; oi < 3; oi++) {
        int nin = oi == 0 ? 2 : 1;
        pd__node n = mknode(ops[oi], 13, nin);
        pd__attr at;
        int64_t axv[1] = {1};
        memset(&at, 0, sizeof at);
        at.name = (char *)"axes";
        at.type = PD_A_INTS;
        at.n = 1;
        at.ints = axv;
        if (oi == 2) n.attr = &at, n.nattr = 1, n.opset = 11;
        pd_tensor in[2][2], out[2], dout[2], din[2][2];
        pd_dtype dts[2] = {PD_FLOAT16, PD_DOUBLE};
        for (int p = 0; p < 2; p++) {
            in[p][0] = tens(dts[p], 2, sx);
            in[p][1] = tens(dts[p], 1, sb);
            out[p] = oi == 2 ? tens(dts[p], 2, so) : tens(dts[p], 2, sx);
            dout[p] = oi == 2 ? tens(dts[p], 2, so) : tens(dts[p], 2, sx);
            din[p][0] = tens(dts[p], 2, sx);
            din[p][1] = tens(dts[p], 1, sb);
        }
        /* the same values (representable in float16) on both sides */
        for (int64_t k = 0; k < 15; k++) {
            double v = round(urand(-2, 2) * 64) / 64, g = round(urand(-1, 1) * 64) / 64;
            pd__set_f(PD_FLOAT16, in[0][0].data, k, v), pd__set_f(PD_DOUBLE, in[1][0].data, k, v);
            pd__set_f(PD_FLOAT16, din[0][0].data, k, 0.5), pd__set_f(PD_DOUBLE, din[1][0].data, k, 0.5);
            if (k < pd_tensor_numel(&dout[0]))
                pd__set_f(PD_FLOAT16, dout[0].data, k, g), pd__set_f(PD_DOUBLE, dout[1].data, k, g);
            if (k < 5) {
                double b = round(urand(-2, 2) * 64) / 64;
                pd__set_f(PD_FLOAT16, in[0][1].data, k, b), pd__set_f(PD_DOUBLE, in[1][1].data, k, b);
            }
        }
        bool ok = true;
        for (int p = 0; p < 2; p++) {
            pd__exec x = {.threads = 1};
            pd_tensor *ip[2] = {&in[p][0], &in[p][1]}, *op[1] = {&out[p]}, *dp[1] = {&dout[p]},
                      *gp[2] = {&din[p][0], nin > 1 ? &din[p][1] : NULL};
            ok &= fwd(&x, &n, ip, op) == PD_OK;
            ok &= bwd(&x, &n, ip, op, dp, gp) == PD_OK;
            free(x.scratch);
        }
        double maxe = 0;
        for (int i = 0; i < nin; i++)
            for (int64_t k = 0; k < pd_tensor_numel(&din[1][i]); k++) {
                double a = pd__get_f(PD_FLOAT16, din[0][i].data, k), b = pd__get_f(PD_DOUBLE, din[1][i].data, k);
                maxe = fmax(maxe, fabs(a - b) / (1 + fabs(b)));
            }
        CHECK(ok && maxe < 4e-3, "%s float16 against float64: max rel error %.2g", ops[oi], maxe);
        for (int p = 0; p < 2; p++) {
            free(in[p][0].data), free(in[p][1].data), free(out[p].data), free(dout[p].data);
            free(din[p][0].data), free(din[p][1].data);
        }
    }
}

/* Ties and zeros, where finite differences cannot look: Max / Min split
 * dout evenly among the inputs equal to the output (torch.maximum: half
 * each at a tie of two), ReduceMax among the tied elements (torch.amax),
 * ReduceProd with zeros (one zero: only it gets dout * prod(others); two:
 * nothing), Abs 0 at 0, HardSwish at +-3 as PyTorch; the comparisons,
 * Sign, Floor, Ceil, Round refuse a backward. */
static void test_ties(void) {
    pd__exec x = {.threads = 1};
    int64_t s5[1] = {5};
    pd_tensor A = tens(PD_DOUBLE, 1, s5), B = tens(PD_DOUBLE, 1, s5), C = tens(PD_DOUBLE, 1, s5),
              Y = tens(PD_DOUBLE, 1, s5), G = tens(PD_DOUBLE, 1, s5), DA = tens(PD_DOUBLE, 1, s5),
              DB = tens(PD_DOUBLE, 1, s5), DC = tens(PD_DOUBLE, 1, s5);
    double av[5] = {1, 2, 3, 0, 4}, bv[5] = {1, 5, 3, 0, 2}, cv[5] = {0, 0, 3, 0, 4};
    memcpy(A.data, av, sizeof av), memcpy(B.data, bv, sizeof bv), memcpy(C.data, cv, sizeof cv);
    for (int k = 0; k < 5; k++) ((double *)G.data)[k] = 6.0;
    pd_tensor *in[3] = {&A, &B, &C}, *out[1] = {&Y}, *dout[1] = {&G}, *din[3] = {&DA, &DB, &DC};
    pd__node n = mknode("Max", 13, 3);
    bool ok = fwd(&x, &n, in, out) == PD_OK && bwd(&x, &n, in, out, dout, din) == PD_OK;
    const double *da = DA.data, *db = DB.data, *dc = DC.data;
    /* Max: 1 (a, b tie), 5 (b), 3 (all three), 0 (all three), 4 (a, c) */
    ok &= da[0] == 3 && db[0] == 3 && dc[0] == 0 && da[1] == 0 && db[1] == 6 && dc[1] == 0;
    ok &= da[2] == 2 && db[2] == 2 && dc[2] == 2 && da[3] == 2 && da[4] == 3 && db[4] == 0 && dc[4] == 3;
    CHECK(ok, "Max of 3 inputs: dout split among the tied inputs (a: %g %g %g %g %g)", da[0], da[1], da[2], da[3],
          da[4]);
    memset(DA.data, 0, 40), memset(DB.data, 0, 40);
    n = mknode("Min", 13, 2);
    ok = fwd(&x, &n, in, out) == PD_OK && bwd(&x, &n, in, out, dout, din) == PD_OK;
    ok &= da[0] == 3 && db[0] == 3 && da[1] == 6 && db[1] == 0 && da[4] == 0 && db[4] == 6;
    CHECK(ok, "Min of 2 inputs: half each at a tie");
    /* ReduceMax / ReduceProd over axis 1 of a 3x3 */
    int64_t s33[2] = {3, 3}, s3[1] = {3}, s1[1] = {1}, ax[1] = {1};
    pd_tensor X = tens(PD_DOUBLE, 2, s33), R = tens(PD_DOUBLE, 1, s3), RG = tens(PD_DOUBLE, 1, s3),
              DX = tens(PD_DOUBLE, 2, s33), AX = tens(PD_INT64, 1, s1);
    memcpy(AX.data, ax, sizeof ax);
    double xv[9] = {1, 3, 3, 2, 2, 2, 5, -1, 0};
    memcpy(X.data, xv, sizeof xv);
    for (int k = 0; k < 3; k++) ((double *)RG.data)[k] = 1.0;
    pd_tensor *rin[2] = {&X, &AX}, *rout[1] = {&R}, *rdout[1] = {&RG}, *rdin[2] = {&DX, NULL};
    n = mknode("ReduceMax", 18, 2);
    pd__attr kd = {"keepdims", PD_A_INT, 0, 0, NULL, 0, NULL, NULL, NULL};
    n.attr = &kd;
    n.nattr = 1;
    ok = fwd(&x, &n, rin, rout) == PD_OK && bwd(&x, &n, rin, rout, rdout, rdin) == PD_OK;
    const double *dx = DX.data, *r = R.data;
    ok &= r[0] == 3 && r[1] == 2 && r[2] == 5;
    ok &= dx[0] == 0 && dx[1] == 0.5 && dx[2] == 0.5 && fabs(dx[3] - 1.0 / 3) < 1e-15 && dx[6] == 1 && dx[7] == 0;
    CHECK(ok, "ReduceMax: dout split among the tied elements (%g %g %g, %g %g %g)", dx[0], dx[1], dx[2], dx[3],
          dx[4], dx[5]);
    double pv[9] = {2, 0, 3, 0, 0, 1, 2, 3, 4};
    memcpy(X.data, pv, sizeof pv);
    memset(DX.data, 0, 72);
    n.op = pd__op_lookup("ReduceProd");
    n.op_type = (char *)"ReduceProd";
    ok = fwd(&x, &n, rin, rout) == PD_OK && bwd(&x, &n, rin, rout, rdout, rdin) == PD_OK;
    ok &= r[0] == 0 && r[1] == 0 && r[2] == 24;
    ok &= dx[0] == 0 && dx[1] == 6 && dx[2] == 0 && dx[3] == 0 && dx[4] == 0 && dx[5] == 0;
    ok &= dx[6] == 12 && dx[7] == 8 && dx[8] == 6;
    CHECK(ok, "ReduceProd with zeros: one zero gets prod(others), two get nothing (%g %g %g, %g %g %g)", dx[0], dx[1],
          dx[2], dx[3], dx[4], dx[5]);
    /* Abs at 0, HardSwish at -3 and 3 */
    double hv[5] = {0, -3, 3, -0.0, 1};
    memcpy(A.data, hv, sizeof hv);
    memset(DA.data, 0, 40);
    n = mknode("Abs", 13, 1);
    ok = fwd(&x, &n, in, out) == PD_OK && bwd(&x, &n, in, out, dout, din) == PD_OK;
    ok &= da[0] == 0 && da[1] == -6 && da[3] == 0 && da[4] == 6;
    CHECK(ok, "Abs: gradient 0 at 0 and -0");
    memset(DA.data, 0, 40);
    n = mknode("HardSwish", 14, 1);
    ok = fwd(&x, &n, in, out) == PD_OK && bwd(&x, &n, in, out, dout, din) == PD_OK;
    ok &= da[0] == 3 && da[1] == -3 && da[2] == 9;
    CHECK(ok, "HardSwish at 0, -3, 3: dout * (x/3 + 1/2) on [-3, 3] (got %g %g %g)", da[0], da[1], da[2]);
    static const char *none[] = {"Less",       "Greater",   "LessOrEqual", "GreaterOrEqual", "And",
                                 "Or",         "Xor",       "Not",         "BitwiseAnd",     "BitwiseOr",
                                 "BitwiseXor", "BitwiseNot", "BitShift",   "IsNaN",          "IsInf",
                                 "Sign",       "Floor",     "Ceil",        "Round"};
    bool refused = true;
    for (size_t k = 0; k < sizeof none / sizeof *none; k++) {
        pd__node m = mknode(none[k], 13, 1);
        refused &= bwd(&x, &m, in, out, dout, din) == PD_ERR_UNSUPPORTED && pd__ops[m.op].grad == 0;
    }
    CHECK(refused, "comparisons, logic, bitwise ops, Sign, Floor, Ceil, Round: not differentiable (grad 0, backward refused)");
    pd_tensor *all[] = {&A, &B, &C, &Y, &G, &DA, &DB, &DC, &X, &R, &RG, &DX, &AX};
    for (size_t k = 0; k < sizeof all / sizeof *all; k++) free(all[k]->data);
    free(x.scratch);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* lines out before any crash */
    const char *seed = getenv("TEST_SEED");
    if (seed && *seed) rs = strtoull(seed, NULL, 0) * 0x9e3779b97f4a7c15ull + 1;
    test_binary("Add");
    test_binary("Sub");
    test_binary("Mul");
    test_binary("Div");
    test_binary("Pow");
    test_pow_special();
    test_sum();
    test_where();
    test_unary("Sqrt", V_POS, 0, 0);
    test_unary("Exp", V_ANY, -2, 2);
    test_unary("Log", V_POS, 0, 0);
    test_unary("Neg", V_ANY, -2, 2);
    test_unary("Reciprocal", V_NONZERO, 0, 0);
    test_unary("Relu", V_KINK0, 0, 0);
    test_unary("Sigmoid", V_ANY, -4, 4);
    test_unary("Tanh", V_ANY, -3, 3);
    test_unary("Erf", V_ANY, -2.5, 2.5);
    test_leaky_gelu();
    test_clip();
    test_cast_identity();
    test_reduce("ReduceSum");
    test_reduce("ReduceMean");
    test_reduce("ReduceMax");
    test_reduce("ReduceMin");
    test_reduce("ReduceProd");
    test_reduce("ReduceL1");
    test_reduce("ReduceL2");
    test_reduce("ReduceSumSquare");
    test_reduce("ReduceLogSum");
    test_reduce("ReduceLogSumExp");
    test_variadic("Max");
    test_variadic("Min");
    test_variadic("Mean");
    test_mod();
    test_prelu();
    test_acts();
    test_castlike();
    test_ties();
    test_kinks();
    test_casts();
    test_contract();
    test_reads();
    test_fast_paths();
    test_float16();
    char missing[1024];
    CHECK(gc_uncovered(PD_OPF_ELEM, missing, sizeof missing) == 0,
          "every differentiable element-wise op (core/ops.h) has a passing finite-difference case:%s",
          missing[0] ? missing : " yes");
    return check_summary();
}
