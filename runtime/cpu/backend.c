/* backend.c - the CPU backend: the kernel table, expanded from ops.h, and the
 * one place a node runs on the CPU (errors get the node's name here). */
#include "../../core/pd_internal.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* OpenBLAS's own (cblas.h is not included: it drags in its own complex types);
 * openblas_get_parallel: 0 sequential, 1 pthreads, 2 OpenMP */
int openblas_get_parallel(void);
int openblas_get_num_threads(void);
void openblas_set_num_threads(int);
char *openblas_get_corename(void);
char *openblas_get_config(void);

void pd__threads_use(int n) {
#ifdef _OPENMP
    if (omp_get_max_threads() != n) omp_set_num_threads(n);
#endif
    if (openblas_get_parallel() != 2 && openblas_get_num_threads() != n) openblas_set_num_threads(n);
}

void pd__cpu_zero(void *p, size_t bytes) {
    enum { PIECE = 1 << 16 };
    int64_t np = (int64_t)((bytes + PIECE - 1) / PIECE);
#pragma omp parallel for schedule(static) if (np >= 4)
    for (int64_t i = 0; i < np; i++)
        memset((char *)p + i * PIECE, 0, i == np - 1 ? bytes - (size_t)i * PIECE : PIECE);
}

int pd__cpu_simd_level(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl"))
        return 3;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 2;
    if (__builtin_cpu_supports("avx")) return 1;
#endif
    return 0;
}

const char *pd__blas_core_advice(const char *detected, int level) {
    /* OpenBLAS's x86-64 cores (a DYNAMIC_ARCH build's names, as
     * openblas_get_corename gives them; a build for one core gives its
     * target in capitals) by the widest vectors their kernels use */
    static const struct {
        const char *name;
        int level;
    } cores[] = {
        {"Prescott", 0}, {"Atom", 0}, {"Core2", 0}, {"Penryn", 0}, {"Dunnington", 0}, {"Nehalem", 0},
        {"Athlon", 0}, {"Opteron", 0}, {"Opteron_SSE3", 0}, {"Barcelona", 0}, {"Nano", 0}, {"Bobcat", 0},
        {"Sandybridge", 1}, {"Bulldozer", 1}, {"Piledriver", 1}, {"Steamroller", 1},
        {"Haswell", 2}, {"Excavator", 2}, {"Zen", 2},
        {"SkylakeX", 3}, {"Cooperlake", 3}, {"SapphireRapids", 3},
    };
    static const char *const wanted[] = {NULL, "SANDYBRIDGE", "HASWELL", "SKYLAKEX"};
    if (!detected || level < 1 || level > 3) return NULL;
    for (size_t i = 0; i < sizeof cores / sizeof cores[0]; i++)
        if (strcasecmp(detected, cores[i].name) == 0) return cores[i].level < level ? wanted[level] : NULL;
    return NULL;
}

const char *pd_blas_coretype_advice(void) {
    const char *set = getenv("OPENBLAS_CORETYPE");
    if (set && *set) return NULL;
    /* only a DYNAMIC_ARCH build reads OPENBLAS_CORETYPE */
    const char *config = openblas_get_config();
    if (!config || !strstr(config, "DYNAMIC_ARCH")) return NULL;
    return pd__blas_core_advice(openblas_get_corename(), pd__cpu_simd_level());
}

int pd__threads_default(int threads) {
    if (threads > 0) return threads;
    cpu_set_t set;
    int n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : (int)sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? n : 1;
}

const pd__kernel_fn pd__cpu_kernels[PD_OP_COUNT] = {
#define PD__CPU_K(e, name, flags, grad, state) [PD_OP_##e] = pd__cpu_##name,
    PD_OPS(PD__CPU_K)
#undef PD__CPU_K
};

const pd__grad_fn pd__cpu_grads[PD_OP_COUNT] = {
#define PD__CPU_G(e, name, flags, grad, state) [PD_OP_##e] = pd__cpu_##name##_bwd,
    PD_OPS(PD__CPU_G)
#undef PD__CPU_G
};

static bool pd__cpu_supports(const pd__node *n) { return n->op >= 0 && n->op < PD_OP_COUNT; }

pd_status pd__cpu_run(pd__exec *x, const pd_graph *g, const pd__node *n, pd_tensor *const *in,
                      pd_tensor *const *out) {
    if (!pd__cpu_supports(n))
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "operator %s has no CPU kernel", n->op_type);
    if (x->threads > 0) pd__threads_use(x->threads);
    pd_status st = pd__cpu_kernels[n->op](x, n, in, out);
    if (st != PD_OK) pd__err_prefix("%s: node '%s' (%s)", g->path, n->name, n->op_type);
    return st;
}

pd_status pd__cpu_run_bwd(pd__exec *x, const pd_graph *g, const pd__node *n, pd_tensor *const *in,
                          pd_tensor *const *out, pd_tensor *const *dout, pd_tensor *const *din) {
    if (!pd__cpu_supports(n) || !pd__ops[n->op].grad)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "operator %s is not differentiable", n->op_type);
    if (x->threads > 0) pd__threads_use(x->threads);
    if (x->fresh && !(pd__ops[n->op].flags & PD_OPF_BWD_WRITES)) { /* the kernel adds: zero what holds nothing yet */
        for (int i = 0; i < n->nin && i < 32; i++)
            if (pd__fresh(x, i) && din[i] && din[i]->data)
                pd__cpu_zero(din[i]->data, (size_t)pd_tensor_numel(din[i]) * pd_dtype_size(din[i]->dtype));
        x->fresh = 0;
    }
    pd_status st = pd__cpu_grads[n->op](x, n, in, out, dout, din);
    x->fresh = 0;
    if (st != PD_OK) pd__err_prefix("%s: node '%s' (%s) backward", g->path, n->name, n->op_type);
    return st;
}

static pd_status pd__cpu_run_node(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out) {
    return pd__cpu_run(x, x->g, n, in, out);
}

const pd_backend_i pd__cpu_backend = {"cpu", pd__cpu_supports, pd__cpu_run_node};
