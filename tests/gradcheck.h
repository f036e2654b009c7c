/* gradcheck.h - finite-difference checks of backward kernels, shared by the
 * tests/test_grad_*.c programs.
 *
 * A case is a one-node graph built in memory: inputs (float64 with random
 * values in [-1, 1], or given data, e.g. int64 indices), attributes, then
 * gc_check() runs the op's shape rule, its forward on the CPU backend, and
 * its backward with random output gradients r_j; it compares each wanted
 * input gradient with central differences of L = sum_j <out_j, r_j>:
 *     dL/dx_i ~ (L(x_i + h) - L(x_i - h)) / 2h,  h = 1e-6 * max(1, |x_i|)
 * and passes when |analytic - numeric| <= tol * (|numeric| + 1e-3 * scale) + 1e-9
 * (the last term: the differences' own rounding, about eps |out r| / h)
 * for every element, scale being the largest |numeric| of that input.
 * It also checks that the backward ADDS into din (it pre-fills din with
 * ones and subtracts them), that asking for each input alone gives the
 * same gradient as asking for all (the split B/W backward), and that with
 * every din marked fresh (pd__exec.fresh) and pre-filled with NaN the
 * backward writes the same gradient over all of it.
 *
 *     gc *c = gc_new("Gemm", 13);
 *     int64_t sa[2] = {3, 4}, sb[2] = {4, 5};
 *     gc_input(c, PD_DOUBLE, 2, sa, NULL);
 *     gc_input(c, PD_DOUBLE, 2, sb, NULL);
 *     gc_attr_i(c, "transB", 0);
 *     gc_outputs(c, 1);
 *     CHECK(gc_check(c, 1e-6, 0x3), "Gemm ...: %s", gc_why(c));
 *     gc_free(c);
 */
#ifndef PD_GRADCHECK_H
#define PD_GRADCHECK_H

#include "../core/pd_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* the threads the kernels run with (the batched products split their batches
 * over threads only with more than one) */
static int gc_threads = 1;

/* The ops a finite-difference check passed for (gc_check): a program ends
 * with gc_uncovered for the family it checks (core/ops.h). */
static bool gc_covered[PD_OP_COUNT];

/* The differentiable ops of `family` (PD_OPF_NN, _ELEM or _TENSOR) without
 * a passing gc_check, named in buf; how many. */
static inline int gc_uncovered(unsigned family, char *buf, size_t n) {
    int k = 0;
    buf[0] = 0;
    for (int op = 0; op < PD_OP_COUNT; op++)
        if ((pd__ops[op].flags & family) && pd__ops[op].grad && !gc_covered[op]) {
            size_t l = strlen(buf);
            snprintf(buf + l, n - l, " %s", pd__ops[op].name);
            k++;
        }
    return k;
}

typedef struct gc {
    pd_graph *g;
    pd__node node;
    int nin, nout;
    int in[16], out[16];
    uint64_t rng;
    bool training;
    char why[512];
} gc;

static inline double gc_rand(gc *c) { /* xorshift64*, uniform in [-1, 1) */
    c->rng ^= c->rng >> 12;
    c->rng ^= c->rng << 25;
    c->rng ^= c->rng >> 27;
    return (double)((c->rng * 2685821657736338717ull) >> 11) / 4503599627370496.0 - 1.0;
}

static inline gc *gc_new(const char *op_type, int opset) {
    gc *c = calloc(1, sizeof *c);
    c->g = pd__graph_new("gradcheck");
    c->node.name = pd__strdup(op_type);
    c->node.op_type = pd__strdup(op_type);
    c->node.domain = pd__strdup("");
    c->node.op = pd__op_lookup(op_type);
    c->node.opset = opset;
    c->g->opset = opset;
    c->rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)strlen(op_type) * 1315423911u;
    return c;
}

/* Seeds the random values (each case may want its own). */
static inline void gc_seed(gc *c, uint64_t s) { c->rng = s * 0x9e3779b97f4a7c15ull + 1; }

/* Adds input i with the given shape; data NULL: random float64 in [-1, 1)
 * (dtype must then be PD_DOUBLE or PD_FLOAT). Returns its index. */
static inline int gc_input(gc *c, pd_dtype dt, int ndim, const int64_t *shape, const void *data) {
    char name[32];
    snprintf(name, sizeof name, "in%d", c->nin);
    int t = pd__graph_tensor(c->g, name);
    pd__tensor *x = &c->g->tensors[t];
    x->dtype = dt;
    x->kind = data ? PD_T_CONST : PD_T_INPUT;
    pd__tensor_set_shape(c->g, x, ndim, shape);
    size_t bytes = (size_t)x->numel * pd_dtype_size(dt);
    x->data = calloc(1, bytes ? bytes : 1);
    if (data)
        memcpy(x->data, data, bytes);
    else
        for (int64_t i = 0; i < x->numel; i++) pd__set_f(dt, x->data, i, gc_rand(c));
    c->in[c->nin] = t;
    return c->nin++;
}

/* An absent optional input (ONNX's empty name). */
static inline void gc_absent(gc *c) { c->in[c->nin++] = -1; }

/* The data of input i, to set special values (e.g. keep away from kinks). */
static inline void *gc_data(gc *c, int i) { return c->g->tensors[c->in[i]].data; }

static inline pd__attr *gc__attr(gc *c, const char *name, pd__atype type) {
    c->node.attr = realloc(c->node.attr, sizeof(pd__attr) * (size_t)(c->node.nattr + 1));
    pd__attr *a = &c->node.attr[c->node.nattr++];
    memset(a, 0, sizeof *a);
    a->name = pd__strdup(name);
    a->type = type;
    return a;
}
static inline void gc_attr_i(gc *c, const char *name, int64_t v) { gc__attr(c, name, PD_A_INT)->i = v; }
static inline void gc_attr_f(gc *c, const char *name, float v) { gc__attr(c, name, PD_A_FLOAT)->f = v; }
static inline void gc_attr_s(gc *c, const char *name, const char *v) { gc__attr(c, name, PD_A_STRING)->s = pd__strdup(v); }
static inline void gc_attr_ints(gc *c, const char *name, int n, const int64_t *v) {
    pd__attr *a = gc__attr(c, name, PD_A_INTS);
    a->n = n;
    a->ints = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    memcpy(a->ints, v, sizeof(int64_t) * (size_t)n);
}
static inline void gc_attr_floats(gc *c, const char *name, int n, const float *v) {
    pd__attr *a = gc__attr(c, name, PD_A_FLOATS);
    a->n = n;
    a->floats = malloc(sizeof(float) * (size_t)(n ? n : 1));
    memcpy(a->floats, v, sizeof(float) * (size_t)n);
}
/* Run forward and backward in training mode (BatchNorm batch statistics, Dropout). */
static inline void gc_training(gc *c, bool on) { c->training = on; }

/* Declares the node's outputs (shapes come from the op's shape rule). */
static inline void gc_outputs(gc *c, int nout) {
    for (int j = 0; j < nout; j++) {
        char name[32];
        snprintf(name, sizeof name, "out%d", j);
        c->out[j] = pd__graph_tensor(c->g, name);
    }
    c->nout = nout;
}

static inline const char *gc_why(const gc *c) { return c->why; }

static inline void gc_free(gc *c) {
    if (!c) return;
    pd__node_free(&c->node); /* the node is not in the graph's list */
    pd_graph_destroy(c->g);
    free(c);
}

/* Views of the node's inputs and outputs. */
static inline void gc__views(gc *c, pd_tensor *iv, pd_tensor **ip, pd_tensor *ov, pd_tensor **op) {
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

/* L = sum_j <out_j, r_j> after a forward at the current inputs. Summed in
 * long double: in double, the rounding of a sum over a hundred outputs,
 * divided by 2h, already exceeds the tolerance of a small gradient. */
static inline bool gc__loss(gc *c, pd__exec *x, double *const *r, long double *L) {
    pd_tensor iv[16], ov[16], *ip[16], *op[16];
    gc__views(c, iv, ip, ov, op);
    if (pd__cpu_run(x, c->g, &c->node, ip, op) != PD_OK) return false;
    long double s = 0;
    for (int j = 0; j < c->nout; j++) {
        const pd__tensor *t = &c->g->tensors[c->out[j]];
        if (!r[j]) continue;
        for (int64_t k = 0; k < t->numel; k++) s += (long double)pd__get_f(t->dtype, t->data, k) * r[j][k];
    }
    *L = s;
    return true;
}

/* Checks the gradients of the inputs in `mask` (bit i: input i). */
static inline bool gc_check(gc *c, double tol, uint32_t mask) {
    pd__node *n = &c->node;
    n->nin = c->nin;
    n->nout = c->nout;
    n->in = malloc(sizeof(int) * (size_t)(c->nin + 1));
    n->out = malloc(sizeof(int) * (size_t)(c->nout + 1));
    memcpy(n->in, c->in, sizeof(int) * (size_t)c->nin);
    memcpy(n->out, c->out, sizeof(int) * (size_t)c->nout);
    c->why[0] = 0;
    if (n->op < 0) {
        snprintf(c->why, sizeof c->why, "unknown op %s", n->op_type);
        return false;
    }
    if (pd__ops[n->op].shape(c->g, n) != PD_OK) {
        snprintf(c->why, sizeof c->why, "shape rule: %s", pd_last_error());
        return false;
    }
    for (int j = 0; j < c->nout; j++) {
        pd__tensor *t = &c->g->tensors[c->out[j]];
        t->data = calloc(1, (size_t)t->numel * pd_dtype_size(t->dtype) + 1);
    }
    pd__exec x = {.threads = gc_threads, .g = c->g, .training = c->training, .seed = 1234};
    double *r[16] = {0};
    bool ok = true;
    long double L0;
    /* random output gradients, for float outputs */
    for (int j = 0; j < c->nout; j++) {
        const pd__tensor *t = &c->g->tensors[c->out[j]];
        if (t->dtype != PD_DOUBLE && t->dtype != PD_FLOAT) continue;
        r[j] = malloc(sizeof(double) * (size_t)(t->numel + 1));
        for (int64_t k = 0; k < t->numel; k++) r[j][k] = gc_rand(c);
    }
    if (!gc__loss(c, &x, r, &L0)) {
        snprintf(c->why, sizeof c->why, "forward: %s", pd_last_error());
        ok = false;
        goto done;
    }
    /* analytic: all wanted inputs at once, din pre-filled with ones */
    pd_tensor iv[16], ov[16], *ip[16], *op[16], dov[16], *dop[16], div[16], *dip[16];
    gc__views(c, iv, ip, ov, op);
    double *grad[16] = {0};
    for (int j = 0; j < c->nout; j++) {
        dop[j] = NULL;
        if (!r[j]) continue;
        const pd__tensor *t = &c->g->tensors[c->out[j]];
        dov[j] = pd__view(t);
        dov[j].data = malloc(sizeof(double) * (size_t)(t->numel + 1)); /* same dtype as the output */
        for (int64_t k = 0; k < t->numel; k++) pd__set_f(t->dtype, dov[j].data, k, r[j][k]);
        dop[j] = &dov[j];
    }
    for (int pass = 0; pass <= c->nin && ok; pass++) {
        /* pass 0: every wanted input together; pass i+1: input i alone */
        for (int i = 0; i < c->nin; i++) {
            dip[i] = NULL;
            bool want = (mask >> i) & 1 && c->in[i] >= 0 && (pass == 0 || pass == i + 1);
            if (!want) continue;
            const pd__tensor *t = &c->g->tensors[c->in[i]];
            div[i] = pd__view(t);
            div[i].data = malloc(sizeof(double) * (size_t)(t->numel + 1));
            for (int64_t k = 0; k < t->numel; k++) pd__set_f(t->dtype, div[i].data, k, 1.0);
            dip[i] = &div[i];
        }
        if (pd__cpu_run_bwd(&x, c->g, n, ip, op, dop, dip) != PD_OK) {
            snprintf(c->why, sizeof c->why, "backward: %s", pd_last_error());
            ok = false;
        }
        for (int i = 0; i < c->nin; i++) {
            if (!dip[i]) continue;
            const pd__tensor *t = &c->g->tensors[c->in[i]];
            if (pass == 0) {
                grad[i] = malloc(sizeof(double) * (size_t)(t->numel + 1));
                for (int64_t k = 0; k < t->numel; k++) grad[i][k] = pd__get_f(t->dtype, div[i].data, k) - 1.0;
            } else if (ok) {
                for (int64_t k = 0; k < t->numel && ok; k++) {
                    double g1 = pd__get_f(t->dtype, div[i].data, k) - 1.0;
                    if (fabs(g1 - grad[i][k]) > 1e-9 * (1 + fabs(grad[i][k]))) {
                        snprintf(c->why, sizeof c->why,
                                 "input %d alone gives a different gradient at %lld: %.10g vs %.10g", i, (long long)k,
                                 g1, grad[i][k]);
                        ok = false;
                    }
                }
            }
            free(div[i].data);
        }
    }
    /* fresh (pd__exec.fresh): din pre-filled with NaN, which the kernel must
     * overwrite whole with the same gradient (or pd__cpu_run_bwd zero first) */
    for (int i = 0; i < c->nin && ok; i++) {
        dip[i] = NULL;
        if (!grad[i] || i >= 32) continue;
        const pd__tensor *t = &c->g->tensors[c->in[i]];
        div[i] = pd__view(t);
        div[i].data = malloc(sizeof(double) * (size_t)(t->numel + 1));
        for (int64_t k = 0; k < t->numel; k++) pd__set_f(t->dtype, div[i].data, k, NAN);
        dip[i] = &div[i];
        x.fresh |= 1u << i;
    }
    if (ok && pd__cpu_run_bwd(&x, c->g, n, ip, op, dop, dip) != PD_OK) {
        snprintf(c->why, sizeof c->why, "fresh backward: %s", pd_last_error());
        ok = false;
    }
    if (x.fresh != 0) {
        snprintf(c->why, sizeof c->why, "pd__cpu_run_bwd left pd__exec.fresh set (%#x)", (unsigned)x.fresh);
        ok = false;
    }
    for (int i = 0; i < c->nin; i++) {
        if (!dip[i]) continue;
        const pd__tensor *t = &c->g->tensors[c->in[i]];
        for (int64_t k = 0; k < t->numel && ok; k++) {
            double gf = pd__get_f(t->dtype, div[i].data, k);
            if (!(fabs(gf - grad[i][k]) <= 1e-9 * (1 + fabs(grad[i][k])))) {
                snprintf(c->why, sizeof c->why, "input %d, fresh: %.10g at %lld where adding gives %.10g", i, gf,
                         (long long)k, grad[i][k]);
                ok = false;
            }
        }
        free(div[i].data);
    }
    /* numeric */
    for (int i = 0; i < c->nin && ok; i++) {
        if (!grad[i]) continue;
        pd__tensor *t = &c->g->tensors[c->in[i]];
        double *num = malloc(sizeof(double) * (size_t)(t->numel + 1)), scale = 0;
        for (int64_t k = 0; k < t->numel && ok; k++) {
            double v = pd__get_f(t->dtype, t->data, k), h = 1e-6 * (fabs(v) > 1 ? fabs(v) : 1);
            long double Lp = 0, Lm = 0;
            pd__set_f(t->dtype, t->data, k, v + h);
            ok = gc__loss(c, &x, r, &Lp);
            pd__set_f(t->dtype, t->data, k, v - h);
            ok = ok && gc__loss(c, &x, r, &Lm);
            pd__set_f(t->dtype, t->data, k, v);
            if (!ok) snprintf(c->why, sizeof c->why, "forward: %s", pd_last_error());
            num[k] = (double)((Lp - Lm) / (2 * h));
            if (fabs(num[k]) > scale) scale = fabs(num[k]);
        }
        for (int64_t k = 0; k < t->numel && ok; k++) {
            if (!(fabs(grad[i][k] - num[k]) <= tol * (fabs(num[k]) + 1e-3 * scale) + 1e-9)) {
                snprintf(c->why, sizeof c->why, "input %d element %lld: analytic %.10g, numeric %.10g", i,
                         (long long)k, grad[i][k], num[k]);
                ok = false;
            }
        }
        free(num);
    }
    for (int i = 0; i < c->nin; i++) free(grad[i]);
    for (int j = 0; j < c->nout; j++)
        if (dop[j]) free(dov[j].data);
done:
    for (int j = 0; j < c->nout; j++) free(r[j]);
    free(x.scratch);
    if (ok) snprintf(c->why, sizeof c->why, "ok");
    if (ok && c->node.op >= 0 && c->node.op < PD_OP_COUNT && (mask & pd__ops[c->node.op].grad))
        gc_covered[c->node.op] = true;
    return ok;
}

#endif
