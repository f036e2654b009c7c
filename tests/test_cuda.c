/* test_cuda.c - the CUDA backend against the CPU backend, the reference.
 *
 * Every op of the CUDA table, forward and backward, on random float32
 * inputs: a one-node graph (built with gradcheck.h's helpers), shapes from
 * the op's shape rule, the CPU kernel and the CUDA kernel on the same
 * inputs; the backward with the same random output gradients and the input
 * gradients pre-filled with the same random values (the kernels must add).
 * Errors are normalized: max |gpu - cpu| / max(1, max |cpu|) per tensor,
 * against a bound per case (fp32; the matrix products and convolutions
 * again in tf32 and bf16 with looser bounds). Then the optimizers against
 * runtime/optim.c over several steps, the gradient norm, the session's
 * cross-entropy loss against runtime/loss.c, the allocator's reuse and
 * statistics (and that it gives nothing back while transfers to other
 * processes are pending), and supports_op's refusals.
 *
 * On the simulated device (PDONNX_CUDA_MODULE=sim[:N], suite devsim) the
 * same checks run the CPU kernels behind the device API (the numbers agree
 * exactly; what is tested is the device path: copies, streams, the
 * allocator, the loss and optimizer calls), and instead of the CUDA
 * table's refusals: host code touching device memory faults.
 *
 * Exits 77 (meson's "skipped") when pd__cuda_device_count() is 0: no GPU,
 * no driver; fails when the CUDA module cannot be loaded (pd__cuda_load).
 * Prints OK / NOT OK per check with the error found.
 * `test_cuda --cases` needs no device: it checks that every case is well
 * formed (shape rule, CPU forward and backward, supports_op), test
 * 'cuda-cases'.
 */
#include "../runtime/cuda/cuda.h"
#include "../runtime/loss.h"
#include "../runtime/optim.h"
#include "check.h"
#include "gradcheck.h"

#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

static pd__cuda_ctx *ctx;
static uint64_t rng = 0x243f6a8885a308d3ull;
static double urand(void) { /* [-1, 1) */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 4503599627370496.0 - 1.0;
}

/* normalized max error of n floats */
static double nerr(const float *gpu, const float *cpu, int64_t n) {
    double m = 0, s = 1;
    for (int64_t i = 0; i < n; i++)
        if (fabs(cpu[i]) > s) s = fabs(cpu[i]);
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)gpu[i] - cpu[i]) / s;
        if (!(d <= m)) m = d; /* NaN counts */
    }
    return m;
}

static double dev_err(const pd_tensor *dev, const pd_tensor *host) {
    int64_t n = pd_tensor_numel(host);
    float *h = malloc(sizeof(float) * (size_t)(n + 1));
    double e = INFINITY;
    if (pd__cuda_tensor_download(ctx, dev, h) == PD_OK) e = nerr(h, host->data, n);
    else printf("# download: %s\n", pd_last_error());
    free(h);
    return e;
}

/* Shapes from the rule and host outputs, as gc_check does. */
static bool prep(gc *c) {
    pd__node *n = &c->node;
    n->nin = c->nin;
    n->nout = c->nout;
    n->in = malloc(sizeof(int) * (size_t)(c->nin + 1));
    n->out = malloc(sizeof(int) * (size_t)(c->nout + 1));
    memcpy(n->in, c->in, sizeof(int) * (size_t)c->nin);
    memcpy(n->out, c->out, sizeof(int) * (size_t)c->nout);
    if (n->op < 0 || pd__ops[n->op].shape(c->g, n) != PD_OK) {
        printf("# %s: shape rule: %s\n", n->op_type, pd_last_error());
        return false;
    }
    for (int j = 0; j < c->nout; j++) {
        pd__tensor *t = &c->g->tensors[c->out[j]];
        t->data = calloc(1, (size_t)t->numel * pd_dtype_size(t->dtype) + 1);
    }
    return true;
}

/* --cases: the cases' construction alone (shape rules, the CPU forward and
 * backward, supports_op), without a device: catches a wrong case here. */
static bool cases_only;

static void cpu_case(const char *what, gc *c, uint32_t mask) {
    pd__node *n = &c->node;
    pd_tensor hiv[16], hov[16], *hi[16], *ho[16], hdo[16], *hdop[16], hdi[16], *hdip[16];
    gc__views(c, hiv, hi, hov, ho);
    pd__exec x = {.threads = 1, .g = c->g, .training = c->training, .seed = 1234};
    pd_status s = pd__cpu_run(&x, c->g, n, hi, ho);
    for (int j = 0; j < c->nout; j++) {
        hdo[j] = *ho[j];
        hdo[j].data = calloc((size_t)pd_tensor_numel(ho[j]) + 1, sizeof(float));
        hdop[j] = &hdo[j];
    }
    for (int i = 0; i < c->nin; i++) {
        hdip[i] = NULL;
        if (!hi[i] || !((mask >> i) & 1)) continue;
        hdi[i] = *hi[i];
        hdi[i].data = calloc((size_t)pd_tensor_numel(hi[i]) + 1, sizeof(float));
        hdip[i] = &hdi[i];
    }
    if (s == PD_OK && mask) s = pd__cpu_run_bwd(&x, c->g, n, hi, ho, hdop, hdip);
    CHECK(s == PD_OK, "%s: the case runs on the CPU (%s)", what, s == PD_OK ? "ok" : pd_last_error());
    for (int j = 0; j < c->nout; j++) free(hdo[j].data);
    for (int i = 0; i < c->nin; i++)
        if (hdip[i]) free(hdi[i].data);
    free(x.scratch);
}

/* While the products run in reduced precision: its name and bound. */
static const char *prec_name;
static double prec_tol;
static bool bitwise_bwd; /* run_case: the GPU backward twice from the same start, the bits compared */

/* One node on both backends: forward outputs (and, in training, the inputs
 * updated in place), then the gradients of the inputs in `mask`. */
static void run_case(const char *what0, gc *c, uint32_t mask, double tol) {
    pd__node *n = &c->node;
    char what[160];
    snprintf(what, sizeof what, "%s%s%s", prec_name ? prec_name : "", prec_name ? ": " : "", what0);
    if (prec_name) tol = prec_tol;
    if (!prep(c)) {
        CHECK(0, "%s: setup", what);
        return;
    }
    CHECK(pd__cuda_supports_op(c->g, n), "%s: supported", what);
    if (cases_only) {
        cpu_case(what, c, mask);
        return;
    }
    int nin = c->nin, nout = c->nout;
    pd_tensor hiv[16], hov[16], *hi[16], *ho[16], div_[16], dov[16], *di[16], *dO[16];
    gc__views(c, hiv, hi, hov, ho);
    bool ok = true;
    for (int i = 0; i < nin; i++) {
        di[i] = NULL;
        if (!hi[i]) continue;
        ok = ok && pd__cuda_tensor_upload(ctx, hi[i], &div_[i]) == PD_OK;
        di[i] = &div_[i];
    }
    for (int j = 0; j < nout; j++) {
        ok = ok && pd__cuda_tensor_zeros(ctx, ho[j]->dtype, ho[j]->ndim, ho[j]->shape, &dov[j]) == PD_OK;
        dO[j] = &dov[j];
    }
    pd__exec x = {.threads = 1, .g = c->g, .training = c->training, .seed = 1234};
    pd_status sc = pd__cpu_run(&x, c->g, n, hi, ho);
    pd_status sg = ok ? pd__cuda_run(ctx, &x, c->g, n, di, dO) : PD_ERR_INTERNAL;
    if (sg == PD_OK) sg = pd__cuda_sync(ctx);
    if (sc != PD_OK || sg != PD_OK) {
        CHECK(0, "%s: forward runs (cpu %s, cuda %s: %s)", what, pd_status_name(sc), pd_status_name(sg),
              pd_last_error());
        goto done;
    }
    for (int j = 0; j < nout; j++) {
        double e = dev_err(&dov[j], ho[j]);
        CHECK(e <= tol, "%s: forward output %d, error %.3g (bound %.1g)", what, j, e, tol);
    }
    if (c->training) /* BatchNormalization's running statistics, updated in place */
        for (int i = 3; i < nin && i < 5; i++) {
            double e = dev_err(&div_[i], hi[i]);
            CHECK(e <= tol, "%s: running statistic %d updated, error %.3g", what, i, e);
        }
    if (!mask) goto done;
    /* backward: the same random dY, dX pre-filled with the same random values */
    pd_tensor hdo[16], *hdop[16], ddo[16], *ddop[16], hdi[16], *hdip[16], ddi[16], *ddip[16];
    for (int j = 0; j < nout; j++) {
        hdop[j] = ddop[j] = NULL;
        hdo[j] = *ho[j];
        int64_t k = pd_tensor_numel(ho[j]);
        hdo[j].data = malloc(sizeof(float) * (size_t)(k + 1));
        for (int64_t q = 0; q < k; q++) ((float *)hdo[j].data)[q] = (float)urand();
        if (pd__cuda_tensor_upload(ctx, &hdo[j], &ddo[j]) != PD_OK) ok = false;
        hdop[j] = &hdo[j];
        ddop[j] = &ddo[j];
    }
    for (int i = 0; i < nin; i++) {
        hdip[i] = ddip[i] = NULL;
        if (!hi[i] || !((mask >> i) & 1)) continue;
        hdi[i] = *hi[i];
        int64_t k = pd_tensor_numel(hi[i]);
        hdi[i].data = malloc(sizeof(float) * (size_t)(k + 1));
        for (int64_t q = 0; q < k; q++) ((float *)hdi[i].data)[q] = (float)urand();
        if (pd__cuda_tensor_upload(ctx, &hdi[i], &ddi[i]) != PD_OK) ok = false;
        hdip[i] = &hdi[i];
        ddip[i] = &ddi[i];
    }
    pd_tensor ddi2[16], *ddip2[16];
    for (int i = 0; i < nin; i++) {
        ddip2[i] = NULL;
        if (!bitwise_bwd || !hdip[i]) continue;
        if (pd__cuda_tensor_upload(ctx, &hdi[i], &ddi2[i]) != PD_OK) ok = false;
        ddip2[i] = &ddi2[i];
    }
    sc = pd__cpu_run_bwd(&x, c->g, n, hi, ho, hdop, hdip);
    sg = ok ? pd__cuda_run_bwd(ctx, &x, c->g, n, di, dO, ddop, ddip) : PD_ERR_INTERNAL;
    if (sg == PD_OK && bitwise_bwd) sg = pd__cuda_run_bwd(ctx, &x, c->g, n, di, dO, ddop, ddip2);
    if (sg == PD_OK) sg = pd__cuda_sync(ctx);
    for (int i = 0; sg == PD_OK && i < nin; i++) {
        if (!ddip2[i]) continue;
        size_t nb = (size_t)pd_tensor_numel(&ddi2[i]) * pd_dtype_size(ddi2[i].dtype);
        void *a = malloc(nb), *b = malloc(nb);
        bool same = a && b && pd__cuda_tensor_download(ctx, &ddi[i], a) == PD_OK &&
                    pd__cuda_tensor_download(ctx, &ddi2[i], b) == PD_OK && !memcmp(a, b, nb);
        CHECK(same, "%s: gradient of input %d bitwise equal in two runs", what, i);
        free(a);
        free(b);
    }
    for (int i = 0; i < nin; i++)
        if (ddip2[i]) pd__cuda_tensor_free(ctx, ddip2[i]);
    if (sc != PD_OK || sg != PD_OK) {
        CHECK(0, "%s: backward runs (cpu %s, cuda %s: %s)", what, pd_status_name(sc), pd_status_name(sg),
              pd_last_error());
    } else {
        for (int i = 0; i < nin; i++) {
            if (!hdip[i]) continue;
            double e = dev_err(&ddi[i], &hdi[i]);
            CHECK(e <= tol, "%s: gradient of input %d, error %.3g (bound %.1g)", what, i, e, tol);
        }
    }
    for (int j = 0; j < nout; j++) {
        free(hdo[j].data);
        pd__cuda_tensor_free(ctx, &ddo[j]);
    }
    for (int i = 0; i < nin; i++) {
        if (!hdip[i]) continue;
        free(hdi[i].data);
        pd__cuda_tensor_free(ctx, &ddi[i]);
    }
done:
    for (int i = 0; i < nin; i++)
        if (di[i]) pd__cuda_tensor_free(ctx, di[i]);
    for (int j = 0; j < nout; j++) pd__cuda_tensor_free(ctx, &dov[j]);
    free(x.scratch);
}

/* ---- cases --------------------------------------------------------------------------------------- */

#define TOL 2e-5
#define TOL_SUM 1e-4 /* long sums (products, convolutions, reductions) in other orders */

static int64_t S1[1], S2[2], S3[3], S4[4];
#define SH1(a) (S1[0] = (a), S1)
#define SH2(a, b) (S2[0] = (a), S2[1] = (b), S2)
#define SH3(a, b, c_) (S3[0] = (a), S3[1] = (b), S3[2] = (c_), S3)
#define SH4(a, b, c_, d) (S4[0] = (a), S4[1] = (b), S4[2] = (c_), S4[3] = (d), S4)

static gc *mk(const char *op, int opset) {
    gc *c = gc_new(op, opset);
    gc_seed(c, rng);
    urand();
    return c;
}

/* random input with |x| >= lo (away from a pole or a kink), optionally positive */
static int in_away(gc *c, int nd, const int64_t *shape, double lo, bool positive) {
    int i = gc_input(c, PD_FLOAT, nd, shape, NULL);
    float *d = gc_data(c, i);
    int64_t k = pd__shape_numel(nd, shape);
    for (int64_t q = 0; q < k; q++) {
        float v = d[q];
        if (positive) v = fabsf(v);
        if (fabsf(v) < lo) v = v < 0 ? -(float)lo - fabsf(v) : (float)lo + fabsf(v);
        d[q] = v;
    }
    return i;
}

static void test_unary(void) {
    static const char *ops[] = {"Relu", "LeakyRelu", "Sigmoid", "Tanh", "Erf", "Exp", "Neg", "Identity"};
    for (size_t k = 0; k < sizeof ops / sizeof *ops; k++) {
        gc *c = mk(ops[k], 17);
        in_away(c, 3, SH3(3, 5, 7), 1e-3, false);
        if (!strcmp(ops[k], "LeakyRelu")) gc_attr_f(c, "alpha", 0.1f);
        gc_outputs(c, 1);
        run_case(ops[k], c, 1, TOL);
        gc_free(c);
    }
    static const char *pos[] = {"Log", "Sqrt", "Reciprocal"};
    for (size_t k = 0; k < sizeof pos / sizeof *pos; k++) {
        gc *c = mk(pos[k], 17);
        in_away(c, 2, SH2(6, 9), 0.2, true);
        gc_outputs(c, 1);
        run_case(pos[k], c, 1, TOL);
        gc_free(c);
    }
    for (int t = 0; t < 2; t++) {
        gc *c = mk("Gelu", 20);
        in_away(c, 2, SH2(4, 33), 0, false);
        if (t) gc_attr_s(c, "approximate", "tanh");
        gc_outputs(c, 1);
        run_case(t ? "Gelu tanh" : "Gelu", c, 1, TOL);
        gc_free(c);
    }
}

static void test_binary(void) {
    static const char *ops[] = {"Add", "Sub", "Mul", "Div"};
    static const int64_t shapes[][2][4] = {
        /* rank of a, b in [0][.][3] */
        {{4, 5, 0, 2}, {4, 5, 0, 2}},
        {{2, 3, 4, 3}, {4, 0, 0, 1}},
        {{2, 1, 4, 3}, {3, 1, 0, 2}},
        {{1, 0, 0, 1}, {2, 3, 0, 2}},
        {{5, 1, 0, 2}, {1, 6, 0, 2}},
        /* a bias over 3200 rows: its gradient summed in 100 chunks, then the chunks */
        {{64, 50, 8, 3}, {8, 0, 0, 1}},
        /* an attention mask over the batch: read at i % 35 */
        {{6, 5, 7, 3}, {1, 5, 7, 3}},
        /* broadcast along a middle axis of 100: 3 chunks of a strided reduction */
        {{3, 100, 4, 3}, {3, 1, 4, 3}},
    };
    for (size_t k = 0; k < 4; k++)
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
            gc *c = mk(ops[k], 17);
            int ra = (int)shapes[s][0][3], rb = (int)shapes[s][1][3];
            in_away(c, ra, shapes[s][0], 0, false);
            in_away(c, rb, shapes[s][1], 0.3, false); /* Div: away from 0 */
            gc_outputs(c, 1);
            char what[64];
            snprintf(what, sizeof what, "%s broadcast case %zu", ops[k], s);
            run_case(what, c, 3, TOL_SUM);
            gc_free(c);
        }
}

static void test_gemm(void) {
    const int64_t M = 7, K = 13, N = 5;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int cs = 0; cs < 5; cs++) {
                gc *c = mk("Gemm", 13);
                gc_input(c, PD_FLOAT, 2, ta ? SH2(K, M) : SH2(M, K), NULL);
                gc_input(c, PD_FLOAT, 2, tb ? SH2(N, K) : SH2(K, N), NULL);
                if (cs == 1) gc_input(c, PD_FLOAT, 1, SH1(N), NULL);
                if (cs == 2) gc_input(c, PD_FLOAT, 2, SH2(M, 1), NULL);
                if (cs == 3) gc_input(c, PD_FLOAT, 2, SH2(M, N), NULL);
                if (cs == 4) gc_input(c, PD_FLOAT, 2, SH2(1, N), NULL);
                gc_attr_i(c, "transA", ta);
                gc_attr_i(c, "transB", tb);
                gc_attr_f(c, "alpha", 0.7f);
                gc_attr_f(c, "beta", 1.3f);
                gc_outputs(c, 1);
                char what[64];
                snprintf(what, sizeof what, "Gemm transA=%d transB=%d C case %d", ta, tb, cs);
                run_case(what, c, cs ? 7 : 3, TOL_SUM);
                gc_free(c);
            }
}

static void test_matmul(void) {
    static const int64_t cases[][2][5] = {
        /* shapes, rank last */
        {{5, 7, 0, 0, 2}, {7, 3, 0, 0, 2}},
        {{2, 3, 5, 7, 4}, {7, 4, 0, 0, 2}},
        {{2, 3, 5, 7, 4}, {2, 3, 7, 4, 4}},
        {{5, 7, 0, 0, 2}, {2, 7, 4, 0, 3}},
        {{2, 1, 5, 7, 4}, {3, 7, 4, 0, 3}},
        {{7, 0, 0, 0, 1}, {7, 3, 0, 0, 2}},
        {{4, 7, 0, 0, 2}, {7, 0, 0, 0, 1}},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        gc *c = mk("MatMul", 13);
        gc_input(c, PD_FLOAT, (int)cases[k][0][4], cases[k][0], NULL);
        gc_input(c, PD_FLOAT, (int)cases[k][1][4], cases[k][1], NULL);
        gc_outputs(c, 1);
        char what[64];
        snprintf(what, sizeof what, "MatMul case %zu", k);
        run_case(what, c, 3, TOL_SUM);
        gc_free(c);
    }
}

static void test_conv(void) {
    struct {
        int nd;
        int64_t x[5], w[5];
        int64_t stride, dil, pad, group;
        bool bias;
    } cases[] = {
        {4, {2, 3, 9, 9}, {4, 3, 3, 3}, 1, 1, 1, 1, true},
        {4, {2, 3, 11, 10}, {4, 3, 3, 3}, 2, 2, 0, 1, false},
        {4, {2, 4, 8, 8}, {6, 2, 3, 3}, 1, 1, 1, 2, true},
        {3, {2, 3, 11}, {4, 3, 3}, 1, 1, 1, 1, true},
        {5, {1, 2, 5, 5, 5}, {3, 2, 3, 3, 3}, 1, 1, 1, 1, true},
        {4, {3, 1, 8, 8}, {8, 1, 3, 3}, 1, 1, 1, 1, true}, /* cnn_bn's first layer */
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        gc *c = mk("Conv", 17);
        int ns = cases[k].nd - 2;
        gc_input(c, PD_FLOAT, cases[k].nd, cases[k].x, NULL);
        gc_input(c, PD_FLOAT, cases[k].nd, cases[k].w, NULL);
        if (cases[k].bias) gc_input(c, PD_FLOAT, 1, SH1(cases[k].w[0]), NULL);
        int64_t s[3], d[3], p[6];
        for (int i = 0; i < ns; i++) {
            s[i] = cases[k].stride;
            d[i] = cases[k].dil;
            p[i] = p[ns + i] = cases[k].pad;
        }
        gc_attr_ints(c, "strides", ns, s);
        gc_attr_ints(c, "dilations", ns, d);
        gc_attr_ints(c, "pads", 2 * ns, p);
        gc_attr_i(c, "group", cases[k].group);
        gc_outputs(c, 1);
        char what[64];
        snprintf(what, sizeof what, "Conv case %zu (%d-D)", k, ns);
        run_case(what, c, cases[k].bias ? 7 : 3, TOL_SUM);
        gc_free(c);
    }
}

static void test_norms(void) {
    for (int train = 0; train < 2; train++) {
        gc *c = mk("BatchNormalization", 15);
        gc_input(c, PD_FLOAT, 4, SH4(4, 3, 5, 6), NULL);
        gc_input(c, PD_FLOAT, 1, SH1(3), NULL);
        gc_input(c, PD_FLOAT, 1, SH1(3), NULL);
        gc_input(c, PD_FLOAT, 1, SH1(3), NULL);
        in_away(c, 1, SH1(3), 0.5, true); /* variance */
        gc_attr_f(c, "epsilon", 1e-5f);
        gc_attr_f(c, "momentum", 0.9f);
        gc_training(c, train);
        gc_outputs(c, 1);
        run_case(train ? "BatchNormalization, training session" : "BatchNormalization, inference", c, 7, TOL_SUM);
        gc_free(c);
    }
    struct {
        int nd;
        int64_t x[4];
        int64_t axis;
        bool bias;
    } ln[] = {{3, {2, 3, 8}, -1, true}, {2, {4, 300}, 1, false}, {3, {2, 3, 4}, 1, true}};
    for (size_t k = 0; k < sizeof ln / sizeof *ln; k++) {
        gc *c = mk("LayerNormalization", 17);
        gc_input(c, PD_FLOAT, ln[k].nd, ln[k].x, NULL);
        int a = (int)(ln[k].axis < 0 ? ln[k].axis + ln[k].nd : ln[k].axis);
        gc_input(c, PD_FLOAT, ln[k].nd - a, ln[k].x + a, NULL);
        if (ln[k].bias) gc_input(c, PD_FLOAT, ln[k].nd - a, ln[k].x + a, NULL);
        gc_attr_i(c, "axis", ln[k].axis);
        gc_attr_f(c, "epsilon", 1e-5f);
        gc_outputs(c, 1);
        char what[64];
        snprintf(what, sizeof what, "LayerNormalization case %zu", k);
        run_case(what, c, ln[k].bias ? 7 : 3, TOL_SUM);
        gc_free(c);
    }
}

static void test_pool(void) {
    struct {
        const char *op;
        int nd;
        int64_t x[5];
        int64_t k, s, p, ceil, incl;
    } cases[] = {
        {"MaxPool", 4, {2, 3, 8, 8}, 2, 2, 0, 0, 0},   {"MaxPool", 4, {2, 3, 9, 9}, 3, 2, 1, 0, 0},
        {"MaxPool", 3, {2, 3, 10}, 3, 1, 1, 0, 0},     {"MaxPool", 4, {2, 2, 7, 7}, 2, 2, 0, 1, 0},
        {"AveragePool", 4, {2, 3, 8, 8}, 3, 1, 1, 0, 0}, {"AveragePool", 4, {2, 3, 8, 8}, 3, 1, 1, 0, 1},
        {"AveragePool", 4, {2, 3, 7, 7}, 2, 2, 0, 1, 0}, {"AveragePool", 5, {1, 2, 4, 5, 6}, 2, 1, 0, 0, 0},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        gc *c = mk(cases[k].op, 17);
        int ns = cases[k].nd - 2;
        gc_input(c, PD_FLOAT, cases[k].nd, cases[k].x, NULL);
        int64_t ks[3], s[3], p[6];
        for (int i = 0; i < ns; i++) {
            ks[i] = cases[k].k;
            s[i] = cases[k].s;
            p[i] = p[ns + i] = cases[k].p;
        }
        gc_attr_ints(c, "kernel_shape", ns, ks);
        gc_attr_ints(c, "strides", ns, s);
        gc_attr_ints(c, "pads", 2 * ns, p);
        gc_attr_i(c, "ceil_mode", cases[k].ceil);
        if (!strcmp(cases[k].op, "AveragePool")) gc_attr_i(c, "count_include_pad", cases[k].incl);
        gc_outputs(c, 1);
        char what[64];
        snprintf(what, sizeof what, "%s case %zu", cases[k].op, k);
        run_case(what, c, 1, TOL);
        gc_free(c);
    }
    gc *c = mk("GlobalAveragePool", 17);
    gc_input(c, PD_FLOAT, 4, SH4(2, 3, 5, 5), NULL);
    gc_outputs(c, 1);
    run_case("GlobalAveragePool", c, 1, TOL);
    gc_free(c);
}

static void test_softmax(void) {
    static const char *ops[] = {"Softmax", "LogSoftmax"};
    for (int k = 0; k < 2; k++)
        for (int a = 0; a < 3; a++) {
            gc *c = mk(ops[k], a == 2 ? 11 : 13);
            gc_input(c, PD_FLOAT, 3, SH3(3, 4, 10), NULL);
            gc_attr_i(c, "axis", a == 0 ? -1 : 1);
            gc_outputs(c, 1);
            char what[64];
            snprintf(what, sizeof what, "%s axis %s", ops[k], a == 0 ? "-1" : a == 1 ? "1" : "1 (opset 11, 2-D)");
            run_case(what, c, 1, TOL);
            gc_free(c);
        }
    /* rows longer than a warp along the last axis: a block per row (33: one
     * lane of a second warp; 1000: several warps; 3000: a loop per thread) */
    static const int64_t lens[] = {33, 1000, 3000};
    for (int k = 0; k < 2; k++)
        for (int a = 0; a < 3; a++) {
            gc *c = mk(ops[k], 13);
            gc_input(c, PD_FLOAT, 3, SH3(2, 3, lens[a]), NULL);
            gc_attr_i(c, "axis", -1);
            gc_outputs(c, 1);
            char what[64];
            snprintf(what, sizeof what, "%s axis -1, rows of %lld", ops[k], (long long)lens[a]);
            run_case(what, c, 1, TOL);
            gc_free(c);
        }
    /* SoftmaxCrossEntropyLoss: mean, sum with ignore_index, none, weights */
    for (int k = 0; k < 4; k++) {
        gc *c = mk("SoftmaxCrossEntropyLoss", 13);
        int64_t lab[6] = {1, 4, 0, 2, 3, 1};
        if (k == 0) {
            gc_input(c, PD_FLOAT, 2, SH2(4, 5), NULL);
            gc_input(c, PD_INT64, 1, SH1(4), lab);
        } else {
            gc_input(c, PD_FLOAT, 3, SH3(3, 5, 2), NULL);
            gc_input(c, PD_INT64, 2, SH2(3, 2), lab);
        }
        if (k == 3) in_away(c, 1, SH1(5), 0.1, true);
        if (k == 1) gc_attr_i(c, "ignore_index", 4);
        gc_attr_s(c, "reduction", k == 1 ? "sum" : k == 2 ? "none" : "mean");
        gc_outputs(c, 1);
        char what[64];
        snprintf(what, sizeof what, "SoftmaxCrossEntropyLoss case %d", k);
        run_case(what, c, 1, TOL);
        gc_free(c);
    }
}

static void test_tensor(void) {
    { /* embedding: repeated and negative indices */
        gc *c = mk("Gather", 13);
        int64_t idx[6] = {3, 0, -1, 3, 7, 3};
        gc_input(c, PD_FLOAT, 2, SH2(10, 4), NULL);
        gc_input(c, PD_INT64, 2, SH2(3, 2), idx);
        gc_outputs(c, 1);
        run_case("Gather axis 0 (embedding)", c, 1, TOL);
        gc_free(c);
    }
    { /* an embedding's backward over 4096 tokens of a 300-row table: every
       * row summed from many positions, in a fixed order (two runs, same bits) */
        static int64_t idx[4096];
        for (int k = 0; k < 4096; k++) idx[k] = (int64_t)((urand() + 1.0) * 150.0) % 300;
        gc *c = mk("Gather", 13);
        gc_input(c, PD_FLOAT, 2, SH2(300, 70), NULL);
        gc_input(c, PD_INT64, 2, SH2(64, 64), idx);
        gc_outputs(c, 1);
        bitwise_bwd = true;
        run_case("Gather axis 0, 4096 tokens of 300", c, 1, TOL_SUM);
        bitwise_bwd = false;
        gc_free(c);
    }
    {
        gc *c = mk("Gather", 13);
        int64_t idx[4] = {4, 0, 2, 4};
        gc_input(c, PD_FLOAT, 3, SH3(3, 5, 2), NULL);
        gc_input(c, PD_INT64, 1, SH1(4), idx);
        gc_attr_i(c, "axis", 1);
        gc_outputs(c, 1);
        run_case("Gather axis 1", c, 1, TOL);
        gc_free(c);
    }
    {
        gc *c = mk("Transpose", 13);
        int64_t perm[3] = {2, 0, 1};
        gc_input(c, PD_FLOAT, 3, SH3(2, 3, 4), NULL);
        gc_attr_ints(c, "perm", 3, perm);
        gc_outputs(c, 1);
        run_case("Transpose (2,0,1)", c, 1, TOL);
        gc_free(c);
    }
    {
        gc *c = mk("Transpose", 13);
        int64_t perm[4] = {0, 2, 1, 3};
        gc_input(c, PD_FLOAT, 4, SH4(2, 3, 4, 5), NULL);
        gc_attr_ints(c, "perm", 4, perm);
        gc_outputs(c, 1);
        run_case("Transpose (0,2,1,3)", c, 1, TOL);
        gc_free(c);
    }
    {
        gc *c = mk("Split", 13);
        int64_t sizes[3] = {1, 2, 3};
        gc_input(c, PD_FLOAT, 3, SH3(2, 6, 3), NULL);
        gc_input(c, PD_INT64, 1, SH1(3), sizes);
        gc_attr_i(c, "axis", 1);
        gc_outputs(c, 3);
        run_case("Split axis 1", c, 1, TOL);
        gc_free(c);
    }
    {
        gc *c = mk("Concat", 13);
        gc_input(c, PD_FLOAT, 2, SH2(2, 3), NULL);
        gc_input(c, PD_FLOAT, 2, SH2(2, 5), NULL);
        gc_input(c, PD_FLOAT, 2, SH2(2, 1), NULL);
        gc_attr_i(c, "axis", -1);
        gc_outputs(c, 1);
        run_case("Concat axis -1", c, 7, TOL);
        gc_free(c);
    }
    {
        gc *c = mk("Reshape", 13);
        int64_t shape[2] = {6, -1};
        gc_input(c, PD_FLOAT, 3, SH3(2, 3, 4), NULL);
        gc_input(c, PD_INT64, 1, SH1(2), shape);
        gc_outputs(c, 1);
        run_case("Reshape", c, 1, TOL);
        gc_free(c);
    }
    {
        gc *c = mk("Flatten", 13);
        gc_input(c, PD_FLOAT, 4, SH4(2, 3, 4, 5), NULL);
        gc_outputs(c, 1);
        run_case("Flatten", c, 1, TOL);
        gc_free(c);
    }
}

/* The products again with TF32 and bf16 tensor cores (fp32 storage): looser
 * bounds, from the 10- and 7-bit mantissas over these short sums. */
static void test_precision(void) {
    static const struct {
        pd__cuda_precision p;
        const char *name;
        double tol;
    } modes[] = {{PD_CUDA_TF32, "tf32", 5e-3}, {PD_CUDA_BF16, "bf16", 3e-2}};
    for (size_t k = 0; k < sizeof modes / sizeof *modes; k++) {
        pd__cuda_set_precision(ctx, modes[k].p);
        prec_name = modes[k].name;
        prec_tol = modes[k].tol;
        test_gemm();
        test_matmul();
        test_conv();
    }
    pd__cuda_set_precision(ctx, PD_CUDA_FP32);
    prec_name = NULL;
}

/* ---- optimizers, gradient norm, the session's loss --------------------------------------------------- */

static void fill(float *p, int64_t n, double lo) {
    for (int64_t i = 0; i < n; i++) p[i] = (float)(lo + urand());
}

static void test_optim(void) {
    const int64_t n = 1000;
    static const pd_optimizer_kind kinds[] = {PD_OPT_SGD, PD_OPT_MOMENTUM, PD_OPT_NESTEROV, PD_OPT_ADAM, PD_OPT_ADAMW};
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
        pd_train_options o = PD_TRAIN_OPTIONS_INIT;
        o.optimizer = kinds[k];
        o.lr = 0.05;
        o.weight_decay = 0.01;
        float *w = malloc(sizeof(float) * n * 4), *g = w + n, *s0 = g + n, *s1 = s0 + n, *back = malloc(sizeof(float) * n);
        fill(w, n, 0);
        fill(g, n, 0);
        memset(s0, 0, sizeof(float) * 2 * n);
        float *dw = NULL, *dg = NULL, *ds0 = NULL, *ds1 = NULL;
        bool ok = pd__cuda_alloc(ctx, sizeof(float) * n, (void **)&dw) == PD_OK &&
                  pd__cuda_alloc(ctx, sizeof(float) * n, (void **)&dg) == PD_OK &&
                  pd__cuda_alloc(ctx, sizeof(float) * n, (void **)&ds0) == PD_OK &&
                  pd__cuda_alloc(ctx, sizeof(float) * n, (void **)&ds1) == PD_OK;
        ok = ok && pd__cuda_upload(ctx, dw, w, sizeof(float) * n) == PD_OK &&
             pd__cuda_memset0(ctx, ds0, sizeof(float) * n) == PD_OK &&
             pd__cuda_memset0(ctx, ds1, sizeof(float) * n) == PD_OK;
        for (int64_t t = 1; t <= 3 && ok; t++) {
            fill(g, n, 0.1);
            double lr = pd__lr_at(&o, t);
            pd__optim_step(&o, t, lr, w, g, s0, s1, n);
            ok = pd__cuda_upload(ctx, dg, g, sizeof(float) * n) == PD_OK &&
                 pd__cuda_optim_step(ctx, &o, t, lr, dw, dg, ds0, ds1, n) == PD_OK;
        }
        double ew = INFINITY, es = 0;
        if (ok && pd__cuda_download(ctx, back, dw, sizeof(float) * n) == PD_OK) ew = nerr(back, w, n);
        int slabs = pd__optim_state_slabs(kinds[k]);
        for (int s = 0; s < slabs && ok; s++) {
            if (pd__cuda_download(ctx, back, s ? ds1 : ds0, sizeof(float) * n) != PD_OK) es = INFINITY;
            else es = fmax(es, nerr(back, s ? s1 : s0, n));
        }
        CHECK(ok && ew <= 1e-6 && es <= 1e-6, "optimizer %s, 3 steps: weights error %.3g, state error %.3g (%s)",
              pd__optim_name(kinds[k]), ew, es, ok ? "ran" : pd_last_error());
        pd__cuda_free(ctx, dw);
        pd__cuda_free(ctx, dg);
        pd__cuda_free(ctx, ds0);
        pd__cuda_free(ctx, ds1);
        free(w);
        free(back);
    }
    /* the gradient norm and the clipping scale */
    const int64_t m = 100003;
    float *g = malloc(sizeof(float) * m), *back = malloc(sizeof(float) * m), *dg = NULL;
    fill(g, m, 0);
    double sq = -1, ref = pd__sq_sum(g, m);
    bool ok = pd__cuda_alloc(ctx, sizeof(float) * m, (void **)&dg) == PD_OK &&
              pd__cuda_upload(ctx, dg, g, sizeof(float) * m) == PD_OK && pd__cuda_sumsq(ctx, dg, m, &sq) == PD_OK;
    /* the simulated device sums as the CPU does; a GPU's threads in another order within each block */
    if (pd__cuda_is_sim())
        CHECK(ok && memcmp(&sq, &ref, sizeof sq) == 0, "gradients' sum of squares %.17g, cpu %.17g (bitwise)", sq, ref);
    else
        CHECK(ok && fabs(sq - ref) <= 1e-9 * ref, "gradients' sum of squares %.17g, cpu %.17g", sq, ref);
    ok = ok && pd__cuda_scale(ctx, dg, m, 0.25f) == PD_OK && pd__cuda_download(ctx, back, dg, sizeof(float) * m) == PD_OK;
    for (int64_t i = 0; i < m; i++) g[i] *= 0.25f;
    CHECK(ok && nerr(back, g, m) == 0, "gradient scaled");
    pd__cuda_free(ctx, dg);
    free(g);
    free(back);
}

/* One cross-entropy case on both backends: rows of [rows, T, V] logits, the
 * first `use` rows counted. Both take e^(z - max) in float (expf here,
 * pd__expf there: each within 2 ulp) and sum in double, so the loss agrees
 * to a few float ulps, not to double precision. */
static void loss_case(const char *what, int64_t rows, int64_t T, int64_t V, int64_t use, int tie, bool nan) {
    pd_tensor logits = {PD_FLOAT, 3, {rows, T, V}, NULL}, labels = {PD_INT64, 2, {rows, T}, NULL};
    int64_t n = rows * T * V;
    float *z = malloc(sizeof(float) * (size_t)n), *dz = malloc(sizeof(float) * (size_t)n),
          *back = malloc(sizeof(float) * (size_t)n);
    int64_t *y = malloc(sizeof(int64_t) * (size_t)(rows * T));
    fill(z, n, 0);
    for (int64_t i = 0; i < rows * T; i++) y[i] = (int64_t)((urand() + 1) * 0.5 * (double)V) % V;
    if (tie) /* position 0's largest logit twice, at V/3 and at the end: the first is the prediction */
        for (int64_t v = 0; v < V; v++) z[v] = v == V / 3 || v == V - 1 ? 3.0f : z[v];
    if (tie) y[0] = V / 3;
    if (nan) z[V + 1] = NAN; /* position 1: NaN loss and gradient on both */
    logits.data = z;
    labels.data = y;
    double l0 = 0, l1 = -1;
    int64_t c0 = 0, c1 = -1, n0 = 0, n1 = -1;
    pd_status s0 = pd__loss_cross_entropy(&logits, &labels, use, dz, &l0, &c0, &n0);
    pd_tensor dl, dy;
    float *ddz = NULL;
    bool ok = pd__cuda_tensor_upload(ctx, &logits, &dl) == PD_OK && pd__cuda_tensor_upload(ctx, &labels, &dy) == PD_OK &&
              pd__cuda_alloc(ctx, sizeof(float) * (size_t)n, (void **)&ddz) == PD_OK;
    pd_status s1 = ok ? pd__cuda_loss_cross_entropy(ctx, &dl, &dy, use, ddz, &l1, &c1, &n1) : PD_ERR_INTERNAL;
    ok = ok && s0 == PD_OK && s1 == PD_OK &&
         pd__cuda_download(ctx, back, ddz, sizeof(float) * (size_t)n) == PD_OK;
    if (nan) {
        bool nans = isnan(l0) && isnan(l1) && isnan(back[V + 1]) && isnan(dz[V + 1]);
        back[V + 1] = dz[V + 1] = 0;
        for (int64_t v = 0; v < V; v++) nans = nans && isnan(back[V + v]) == isnan(dz[V + v]);
        CHECK(ok && nans, "cross_entropy %s: a NaN logit makes the loss %g (cpu %g) and its row's gradient NaN", what, l1,
              l0);
    } else {
        CHECK(ok && fabs(l1 - l0) <= 1e-6 * (1 + fabs(l0)) && c0 == c1 && n0 == n1 && nerr(back, dz, n) <= 1e-6,
              "cross_entropy %s: loss %.9g vs cpu %.9g, correct %lld/%lld, count %lld/%lld, gradient error %.3g", what,
              l1, l0, (long long)c1, (long long)c0, (long long)n1, (long long)n0, nerr(back, dz, n));
    }
    if (tie) CHECK(ok && c0 >= 1 && c1 == c0, "cross_entropy %s: a tie goes to the first index (%lld correct)", what,
                   (long long)c1);
    if (!nan && use >= 3) {
        y[2 * T] = V + 2; /* out of range */
        ok = pd__cuda_upload(ctx, dy.data, y, sizeof(int64_t) * (size_t)(rows * T)) == PD_OK;
        CHECK(ok && pd__cuda_loss_cross_entropy(ctx, &dl, &dy, use, NULL, &l1, NULL, NULL) == PD_ERR_INVALID,
              "cross_entropy %s: a label out of range is refused (%s)", what, pd_last_error());
    }
    pd__cuda_tensor_free(ctx, &dl);
    pd__cuda_tensor_free(ctx, &dy);
    pd__cuda_free(ctx, ddz);
    free(z);
    free(dz);
    free(back);
    free(y);
}

static void test_loss(void) {
    loss_case("7 classes, 3 of 4 rows", 4, 3, 7, 3, 1, false);
    loss_case("1000 classes (several warps)", 3, 5, 1000, 3, 1, false);
    loss_case("50257 classes (GPT-2's vocabulary)", 2, 4, 50257, 2, 1, false);
    loss_case("33 classes, a NaN", 2, 2, 33, 2, 0, true);
}

/* ---- allocator, copies, refusals ------------------------------------------------------------------------ */

static void test_alloc(void) {
    pd__cuda_mem_stats a, b;
    void *p = NULL, *q = NULL;
    pd__cuda_mem_get_stats(ctx, &a);
    bool ok = pd__cuda_alloc(ctx, 1000, &p) == PD_OK;
    pd__cuda_free(ctx, p);
    ok = ok && pd__cuda_alloc(ctx, 900, &q) == PD_OK; /* the same 1 KiB class */
    pd__cuda_mem_get_stats(ctx, &b);
    CHECK(ok && q == p && b.reuses == a.reuses + 1 && b.device_mallocs <= a.device_mallocs + 1,
          "allocator: a freed block is reused by its class (mallocs %lld -> %lld, reuses %lld -> %lld)",
          (long long)a.device_mallocs, (long long)b.device_mallocs, (long long)a.reuses, (long long)b.reuses);
    pd__cuda_free(ctx, q);
    /* a steady-state loop: no cudaMalloc after the first round */
    pd__cuda_mem_get_stats(ctx, &a);
    int64_t after_first = 0;
    for (int round = 0; round < 5 && ok; round++) {
        void *v[20];
        for (int i = 0; i < 20; i++) ok = ok && pd__cuda_alloc(ctx, (size_t)(i + 1) * 37000, &v[i]) == PD_OK;
        for (int i = 0; i < 20 && ok; i++) pd__cuda_free(ctx, v[i]);
        pd__cuda_mem_get_stats(ctx, &b);
        if (round == 0) after_first = b.device_mallocs;
    }
    CHECK(ok && b.device_mallocs == after_first && b.in_use == a.in_use,
          "allocator: steady state without cudaMalloc (%lld mallocs after round 1, %lld after 5)",
          (long long)after_first, (long long)b.device_mallocs);
    ok = pd__cuda_mem_trim(ctx) == PD_OK;
    pd__cuda_mem_get_stats(ctx, &b);
    CHECK(ok && b.cached == 0, "allocator: trim releases the cache");
    /* copies */
    float h[257], back[257];
    fill(h, 257, 0);
    pd_tensor t = {PD_FLOAT, 1, {257}, h}, d;
    ok = pd__cuda_tensor_upload(ctx, &t, &d) == PD_OK && pd__cuda_tensor_download(ctx, &d, back) == PD_OK;
    CHECK(ok && !memcmp(h, back, sizeof h), "upload and download round trip");
    pd__cuda_tensor_free(ctx, &d);
}

/* pd__cuda_set_pending's hook, as the NCCL transport's with a send in flight: counts its calls */
static bool pending_yes(void *arg) {
    ++*(int *)arg;
    return true;
}

/* More than any device has (1 PiB): cudaMalloc fails. With transfers to other processes in flight the cache
 * stays (no cudaFree: it would wait for them) and the error names the size; without, it is given back first. */
static void test_alloc_pending(void) {
    pd__cuda_mem_stats a, b;
    void *p = NULL, *q = NULL;
    int asked = 0;
    size_t huge = (size_t)1 << 50;
    bool ok = pd__cuda_alloc(ctx, 1000, &p) == PD_OK;
    pd__cuda_free(ctx, p);
    pd__cuda_mem_get_stats(ctx, &a);
    pd__cuda_set_pending(ctx, pending_yes, &asked);
    pd_status st = pd__cuda_alloc(ctx, huge, &q);
    pd__cuda_mem_get_stats(ctx, &b);
    CHECK(ok && st == PD_ERR_NOMEM && asked == 1 && a.cached > 0 && b.cached == a.cached &&
              strstr(pd_last_error(), "1125899906842624 bytes"),
          "allocator: out of memory while transfers are in flight: nothing given back, the size named (%s)",
          pd_last_error());
    st = pd__cuda_mem_trim(ctx);
    pd__cuda_mem_get_stats(ctx, &b);
    CHECK(st != PD_OK && asked == 2 && b.cached == a.cached, "allocator: no trim while transfers are in flight");
    pd__cuda_set_pending(ctx, NULL, NULL);
    st = pd__cuda_alloc(ctx, huge, &q);
    pd__cuda_mem_get_stats(ctx, &b);
    CHECK(st == PD_ERR_NOMEM && b.cached == 0, "allocator: out of memory otherwise: the cache given back, retried");
}

static void test_refusals(void) {
    gc *c = mk("Conv", 17);
    int64_t pads[4] = {0, 0, 1, 1};
    gc_input(c, PD_FLOAT, 4, SH4(1, 1, 5, 5), NULL);
    gc_input(c, PD_FLOAT, 4, SH4(1, 1, 3, 3), NULL);
    gc_attr_ints(c, "pads", 4, pads);
    gc_outputs(c, 1);
    CHECK(prep(c) && !pd__cuda_supports_op(c->g, &c->node), "Conv with asymmetric pads stays on the CPU");
    gc_free(c);
    c = mk("Relu", 17);
    gc_input(c, PD_DOUBLE, 1, SH1(4), NULL);
    gc_outputs(c, 1);
    CHECK(prep(c) && !pd__cuda_supports_op(c->g, &c->node), "float64 stays on the CPU");
    gc_free(c);
    c = mk("Pow", 17);
    gc_input(c, PD_FLOAT, 1, SH1(4), NULL);
    gc_input(c, PD_FLOAT, 1, SH1(4), NULL);
    gc_outputs(c, 1);
    CHECK(prep(c) && !pd__cuda_supports_op(c->g, &c->node), "an op without a CUDA kernel (Pow) stays on the CPU");
    gc_free(c);
}

/* The CUDA table against core/ops.h: an op has a CUDA forward (and a
 * backward where it is differentiable) unless it is marked PD_OPF_HOST, and
 * one so marked has none. */
static void test_op_table(void) {
    char missing[2048] = "", stale[2048] = "";
    for (int op = 0; op < PD_OP_COUNT; op++) {
        int k = pd__cuda_op_kernels(op);
        bool host = pd__ops[op].flags & PD_OPF_HOST, want_bwd = pd__ops[op].grad != 0;
        char *to = NULL;
        if (host && k) to = stale;
        else if (!host && (!(k & 1) || (want_bwd && !(k & 2)) || (!want_bwd && (k & 2)))) to = missing;
        if (to) snprintf(to + strlen(to), 2048 - strlen(to), " %s(%d)", pd__ops[op].name, k);
        if (!host && (k & 1)) { /* the table and supports_op agree */
            pd__node n;
            memset(&n, 0, sizeof n);
            n.op = op;
            n.nout = 1;
            n.opset = 17;
            n.op_type = (char *)pd__ops[op].name;
            if (!pd__cuda_supports_op(NULL, &n)) snprintf(missing + strlen(missing), 2048 - strlen(missing),
                                                          " %s(supports_op)", pd__ops[op].name);
        }
    }
    CHECK(!missing[0], "every op not marked PD_OPF_HOST has its CUDA forward and backward:%s", missing[0] ? missing : " yes");
    CHECK(!stale[0], "no op marked PD_OPF_HOST has a CUDA kernel:%s", stale[0] ? stale : " none");
}

/* The simulated device's promise: device memory is not host memory. A child
 * reads through a device pointer and must die of it (SIGSEGV; under ASan its
 * handler reports the fault and exits non-zero). */
static void test_sim_guard(void) {
    void *p = NULL;
    bool ok = pd__cuda_alloc(ctx, 64, &p) == PD_OK && pd__cuda_memset0(ctx, p, 64) == PD_OK &&
              pd__cuda_sync(ctx) == PD_OK;
    fflush(stdout);
    pid_t pid = ok ? fork() : -1;
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY); /* the sanitizer's report is not this test's output */
        if (fd >= 0) dup2(fd, 2);
        volatile float v = *(volatile float *)p;
        (void)v;
        _exit(42);
    }
    int status = 0;
    bool died = pid > 0 && waitpid(pid, &status, 0) == pid &&
                ((WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV) ||
                 (WIFEXITED(status) && WEXITSTATUS(status) != 42 && WEXITSTATUS(status) != 0));
    CHECK(ok && died, "simulated device: host code reading device memory faults (status %d)", status);
    float back[16] = {1};
    ok = ok && pd__cuda_download(ctx, back, p, sizeof back) == PD_OK;
    CHECK(ok && back[0] == 0 && back[15] == 0, "simulated device: the stream reads and writes it");
    pd__cuda_free(ctx, p);
}

static void run_cases(void) {
    test_unary();
    test_binary();
    test_gemm();
    test_matmul();
    test_conv();
    test_norms();
    test_pool();
    test_softmax();
    test_tensor();
}

int main(int argc, char **argv) {
    /* the module (libpdcuda.so) is built with this test: not loading it is a failure, not a skip */
    if (pd__cuda_load() != PD_OK) {
        printf("NOT OK %s\n", pd_last_error());
        return 1;
    }
    if (argc > 1 && !strcmp(argv[1], "--cases")) {
        cases_only = true;
        run_cases();
        if (!pd__cuda_is_sim()) test_refusals(), test_op_table();
        return check_summary();
    }
    int n = pd__cuda_device_count();
    if (n == 0) {
        printf("no CUDA device (or no driver): skipped\n");
        return 77;
    }
    if (pd__cuda_ctx_create(0, &ctx) != PD_OK) {
        printf("NOT OK context on device 0: %s\n", pd_last_error());
        return 1;
    }
    printf("# %d %s device(s); testing on device 0 in fp32\n", n, pd__cuda_is_sim() ? "simulated" : "CUDA");
    test_alloc();
    test_alloc_pending();
    run_cases();
    test_precision();
    test_optim();
    test_loss();
    if (pd__cuda_is_sim()) test_sim_guard(); /* its supports_op is the CPU backend's, not the CUDA table's */
    else test_refusals(), test_op_table();
    pd__cuda_mem_stats s;
    pd__cuda_mem_get_stats(ctx, &s);
    printf("# allocator: %lld allocations, %lld from the cache, %lld cudaMalloc, peak %zu bytes\n",
           (long long)s.allocs, (long long)s.reuses, (long long)s.device_mallocs, s.peak);
    pd__cuda_ctx_destroy(ctx);
    return check_summary();
}
