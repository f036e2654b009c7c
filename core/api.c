/* api.c - the public graph-inspection calls of pipedream.h. */
#include "pd_internal.h"

#include <string.h>

int pd_graph_num_nodes(const pd_graph *g) { return g ? g->nnodes : 0; }
int pd_graph_num_inputs(const pd_graph *g) { return g ? g->ninputs : 0; }
int pd_graph_num_outputs(const pd_graph *g) { return g ? g->noutputs : 0; }
int pd_graph_num_tied(const pd_graph *g) { return g ? g->ntied : 0; }

pd_status pd_graph_tied(const pd_graph *g, int i, const char **alias, const char **source) {
    if (!g) return pd__err(PD_ERR_INVALID, "pd_graph_tied: graph is NULL");
    if (i < 0 || i >= g->ntied)
        return pd__err(PD_ERR_INVALID, "pd_graph_tied: index %d out of range [0, %d)", i, g->ntied);
    if (alias) *alias = g->tensors[g->tied[3 * i]].name;
    if (source) *source = g->tensors[g->tied[3 * i + 1]].name;
    return PD_OK;
}

int pd_graph_num_notes(const pd_graph *g) { return g ? g->nnotes : 0; }

const char *pd_graph_note(const pd_graph *g, int i) { return g && i >= 0 && i < g->nnotes ? g->notes[i] : NULL; }

int pd_graph_tied_transposed(const pd_graph *g, int i) {
    return g && i >= 0 && i < g->ntied ? g->tied[3 * i + 2] : 0;
}

static bool pd__is_param(const pd__tensor *t) {
    return t->kind == PD_T_INIT &&
           (t->dtype == PD_FLOAT || t->dtype == PD_DOUBLE || t->dtype == PD_FLOAT16 || t->dtype == PD_BFLOAT16);
}

static int64_t pd__bytes(const pd__tensor *t) { return t->numel * (int64_t)pd_dtype_size(t->dtype); }

/* Counts a model's declared shapes can push past INT64_MAX stop there. */
static int64_t pd__saturate(double v) { return v >= 9223372036854775807.0 ? INT64_MAX : v > 0 ? (int64_t)v : 0; }
static int64_t pd__sat_add(int64_t a, int64_t b) {
    int64_t r;
    return __builtin_add_overflow(a, b, &r) ? INT64_MAX : r;
}

pd_status pd_graph_node(const pd_graph *g, int i, pd_node_info *out) {
    if (!g || !out) return pd__err(PD_ERR_INVALID, "pd_graph_node: %s is NULL", !g ? "graph" : "out");
    if (i < 0 || i >= g->nnodes)
        return pd__err(PD_ERR_INVALID, "pd_graph_node: node index %d out of range [0, %d)", i, g->nnodes);
    const pd__node *n = &g->nodes[i];
    pd_node_info info;
    memset(&info, 0, sizeof info);
    info.name = n->name;
    info.op_type = n->op_type;
    info.n_inputs = n->nin;
    info.n_outputs = n->nout;
    info.flops = n->op >= 0 ? pd__saturate(pd__ops[n->op].flops(g, n)) : 0;
    for (int j = 0; j < n->nin; j++)
        if (n->in[j] >= 0 && pd__is_param(&g->tensors[n->in[j]]))
            info.param_bytes = pd__sat_add(info.param_bytes, pd__bytes(&g->tensors[n->in[j]]));
    for (int j = 0; j < n->nout; j++)
        if (n->out[j] >= 0) info.output_bytes = pd__sat_add(info.output_bytes, pd__bytes(&g->tensors[n->out[j]]));
    *out = info;
    return PD_OK;
}

const char *pd_graph_node_input(const pd_graph *g, int i, int j) {
    if (!g || i < 0 || i >= g->nnodes || j < 0 || j >= g->nodes[i].nin || g->nodes[i].in[j] < 0) return NULL;
    return g->tensors[g->nodes[i].in[j]].name;
}

const char *pd_graph_node_output(const pd_graph *g, int i, int j) {
    if (!g || i < 0 || i >= g->nnodes || j < 0 || j >= g->nodes[i].nout || g->nodes[i].out[j] < 0) return NULL;
    return g->tensors[g->nodes[i].out[j]].name;
}

static void pd__value_info(const pd__tensor *t, pd_value_info *out) {
    memset(out, 0, sizeof *out);
    out->name = t->name;
    out->dtype = t->dtype;
    out->ndim = t->ndim;
    for (int i = 0; i < t->ndim; i++) out->shape[i] = t->shape[i];
}

pd_status pd_graph_input(const pd_graph *g, int i, pd_value_info *out) {
    if (!g || !out) return pd__err(PD_ERR_INVALID, "pd_graph_input: %s is NULL", !g ? "graph" : "out");
    if (i < 0 || i >= g->ninputs)
        return pd__err(PD_ERR_INVALID, "pd_graph_input: index %d out of range [0, %d)", i, g->ninputs);
    pd__value_info(&g->tensors[g->inputs[i]], out);
    return PD_OK;
}

pd_status pd_graph_output(const pd_graph *g, int i, pd_value_info *out) {
    if (!g || !out) return pd__err(PD_ERR_INVALID, "pd_graph_output: %s is NULL", !g ? "graph" : "out");
    if (i < 0 || i >= g->noutputs)
        return pd__err(PD_ERR_INVALID, "pd_graph_output: index %d out of range [0, %d)", i, g->noutputs);
    pd__value_info(&g->tensors[g->outputs[i]], out);
    return PD_OK;
}

pd_status pd_graph_value(const pd_graph *g, const char *name, pd_value_info *out) {
    if (!g || !name || !out)
        return pd__err(PD_ERR_INVALID, "pd_graph_value: %s is NULL", !g ? "graph" : !name ? "name" : "out");
    int t = pd__graph_find(g, name);
    if (t < 0) return pd__err(PD_ERR_INVALID, "%s: no tensor named '%s'", g->path, name);
    pd__value_info(&g->tensors[t], out);
    return PD_OK;
}

int64_t pd_graph_param_bytes(const pd_graph *g) {
    int64_t s = 0;
    if (!g) return 0;
    for (int t = 0; t < g->ntensors; t++)
        if (pd__is_param(&g->tensors[t])) s += pd__bytes(&g->tensors[t]);
    return s;
}
