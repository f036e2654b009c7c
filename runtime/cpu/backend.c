/* backend.c - the CPU backend: the kernel table, expanded from ops.h, and the
 * one place a node runs on the CPU (errors get the node's name here). */
#include "../../core/pd_internal.h"

#include <string.h>

const pd__kernel_fn pd__cpu_kernels[PD_OP_COUNT] = {
#define PD__CPU_K(e, name, flags, grad) [PD_OP_##e] = pd__cpu_##name,
    PD_OPS(PD__CPU_K)
#undef PD__CPU_K
};

const pd__grad_fn pd__cpu_grads[PD_OP_COUNT] = {
#define PD__CPU_G(e, name, flags, grad) [PD_OP_##e] = pd__cpu_##name##_bwd,
    PD_OPS(PD__CPU_G)
#undef PD__CPU_G
};

/* The backward kernels that honour pd__exec.fresh (write a fresh din whole,
 * not add into it): the element-wise ones (through add_term), MatMul, and
 * the copies (Reshape and its kin, Transpose) - those that make most of a
 * transformer's activation gradients. The rest add into zeroed memory. */
bool pd__cpu_bwd_writes(int op) {
    switch (op) {
    case PD_OP_ADD: case PD_OP_SUB: case PD_OP_MUL: case PD_OP_DIV: case PD_OP_POW:
    case PD_OP_SQRT: case PD_OP_EXP: case PD_OP_LOG: case PD_OP_NEG: case PD_OP_RECIPROCAL:
    case PD_OP_RELU: case PD_OP_LEAKY_RELU: case PD_OP_SIGMOID: case PD_OP_TANH: case PD_OP_GELU:
    case PD_OP_ERF: case PD_OP_CLIP:
    case PD_OP_MATMUL:
    case PD_OP_FLATTEN: case PD_OP_RESHAPE: case PD_OP_UNSQUEEZE: case PD_OP_SQUEEZE: case PD_OP_TRANSPOSE:
        return true;
    default:
        return false;
    }
}

static bool pd__cpu_supports(const pd__node *n) { return n->op >= 0 && n->op < PD_OP_COUNT; }

pd_status pd__cpu_run(pd__exec *x, const pd_graph *g, const pd__node *n, pd_tensor *const *in,
                      pd_tensor *const *out) {
    if (!pd__cpu_supports(n))
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "operator %s has no CPU kernel", n->op_type);
    pd_status st = pd__cpu_kernels[n->op](x, n, in, out);
    if (st != PD_OK) pd__err_prefix("%s: node '%s' (%s)", g->path, n->name, n->op_type);
    return st;
}

pd_status pd__cpu_run_bwd(pd__exec *x, const pd_graph *g, const pd__node *n, pd_tensor *const *in,
                          pd_tensor *const *out, pd_tensor *const *dout, pd_tensor *const *din) {
    if (!pd__cpu_supports(n) || !pd__ops[n->op].grad)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "operator %s is not differentiable", n->op_type);
    if (x->fresh && !pd__cpu_bwd_writes(n->op)) { /* the kernel adds: zero what holds nothing yet */
        for (int i = 0; i < n->nin && i < 32; i++)
            if (pd__fresh(x, i) && din[i] && din[i]->data)
                memset(din[i]->data, 0, (size_t)pd_tensor_numel(din[i]) * pd_dtype_size(din[i]->dtype));
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
