/* graph.c - the graph IR: tensors by name, nodes, topological order, shape
 * inference with constant folding, dead-node removal.
 *
 * Loading ends in pd__graph_finalize: nodes are visited in topological order,
 * each op's shape rule gives its outputs' dtypes and shapes, and a node whose
 * inputs are all constants (and which is not a trainable initializer's user)
 * is evaluated once on the CPU backend and replaced by its results. That is how
 * PyTorch's Shape/Gather/Unsqueeze/Concat subgraphs of dynamic axes disappear.
 */
#include "pd_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- names -------------------------------------------------------------- */

static uint64_t pd__hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static bool pd__hash_grow(pd_graph *g) {
    int cap = g->hcap ? g->hcap * 2 : 256;
    int *h = (int *)PD_MALLOC(sizeof(int) * (size_t)cap);
    if (!h) return false;
    for (int i = 0; i < cap; i++) h[i] = -1;
    for (int t = 0; t < g->ntensors; t++) {
        uint64_t k = pd__hash_str(g->tensors[t].name) & (uint64_t)(cap - 1);
        while (h[k] >= 0) k = (k + 1) & (uint64_t)(cap - 1);
        h[k] = t;
    }
    PD_FREE(g->hash);
    g->hash = h;
    g->hcap = cap;
    return true;
}

int pd__graph_find(const pd_graph *g, const char *name) {
    if (!g->hcap || !name) return -1;
    uint64_t k = pd__hash_str(name) & (uint64_t)(g->hcap - 1);
    while (g->hash[k] >= 0) {
        if (strcmp(g->tensors[g->hash[k]].name, name) == 0) return g->hash[k];
        k = (k + 1) & (uint64_t)(g->hcap - 1);
    }
    return -1;
}

int pd__graph_tensor(pd_graph *g, const char *name) {
    int t = pd__graph_find(g, name);
    if (t >= 0) return t;
    if (g->ntensors == g->tcap) {
        int cap = g->tcap ? g->tcap * 2 : 64;
        pd__tensor *nt = (pd__tensor *)PD_REALLOC(g->tensors, sizeof(pd__tensor) * (size_t)cap);
        if (!nt) return -1;
        g->tensors = nt;
        g->tcap = cap;
    }
    if ((g->ntensors + 1) * 2 > g->hcap && !pd__hash_grow(g)) return -1;
    pd__tensor *x = &g->tensors[g->ntensors];
    memset(x, 0, sizeof *x);
    x->name = pd__strdup(name);
    if (!x->name) return -1;
    x->ndim = -1;
    x->producer = -1;
    t = g->ntensors++;
    uint64_t k = pd__hash_str(name) & (uint64_t)(g->hcap - 1);
    while (g->hash[k] >= 0) k = (k + 1) & (uint64_t)(g->hcap - 1);
    g->hash[k] = t;
    return t;
}

pd_graph *pd__graph_new(const char *path) {
    pd_graph *g = (pd_graph *)PD_CALLOC(1, sizeof *g);
    if (!g) return NULL;
    g->path = pd__strdup(path ? path : "<memory>");
    g->name = pd__strdup("");
    if (!g->path || !g->name) {
        pd_graph_destroy(g);
        return NULL;
    }
    return g;
}

pd_status pd__graph_add_node(pd_graph *g, pd__node *n) {
    if (g->nnodes == g->ncap) {
        int cap = g->ncap ? g->ncap * 2 : 64;
        pd__node *nn = (pd__node *)PD_REALLOC(g->nodes, sizeof(pd__node) * (size_t)cap);
        if (!nn) return pd__err(PD_ERR_NOMEM, "%s: out of memory adding node", g->path);
        g->nodes = nn;
        g->ncap = cap;
    }
    g->nodes[g->nnodes++] = *n;
    return PD_OK;
}

static void pd__attr_free(pd__attr *a) {
    PD_FREE(a->name);
    PD_FREE(a->s);
    PD_FREE(a->ints);
    PD_FREE(a->floats);
    if (a->t) {
        PD_FREE(a->t->data);
        PD_FREE(a->t);
    }
}

void pd__node_free(pd__node *n) {
    PD_FREE(n->name);
    PD_FREE(n->op_type);
    PD_FREE(n->domain);
    PD_FREE(n->in);
    PD_FREE(n->out);
    for (int i = 0; i < n->nattr; i++) pd__attr_free(&n->attr[i]);
    PD_FREE(n->attr);
    for (int i = 0; i < n->nabsorbed; i++) PD_FREE(n->absorbed[i]);
    PD_FREE(n->absorbed);
    memset(n, 0, sizeof *n);
}

void pd_graph_destroy(pd_graph *g) {
    if (!g) return;
    for (int i = 0; i < g->ntensors; i++) {
        PD_FREE(g->tensors[i].name);
        PD_FREE(g->tensors[i].ext_path);
        PD_FREE(g->tensors[i].ext_loc);
        if (!g->tensors[i].borrowed) PD_FREE(g->tensors[i].data);
    }
    PD_FREE(g->model_bytes);
    for (int i = 0; i < g->nnodes; i++) pd__node_free(&g->nodes[i]);
    PD_FREE(g->tensors);
    PD_FREE(g->nodes);
    PD_FREE(g->inputs);
    PD_FREE(g->outputs);
    PD_FREE(g->hash);
    PD_FREE(g->tied);
    for (int i = 0; i < g->nnotes; i++) PD_FREE(g->notes[i]);
    PD_FREE(g->notes);
    PD_FREE(g->path);
    PD_FREE(g->name);
    PD_FREE(g);
}

/* ---- node errors and attributes --------------------------------------- */

pd_status pd__node_err(const pd_graph *g, const pd__node *n, pd_status s, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return pd__err(s, "%s: node '%s' (%s): %s", g->path, n->name, n->op_type, msg);
}

const pd__attr *pd__attr_get(const pd__node *n, const char *name) {
    for (int i = 0; i < n->nattr; i++)
        if (strcmp(n->attr[i].name, name) == 0) return &n->attr[i];
    return NULL;
}

int64_t pd__attr_i(const pd__node *n, const char *name, int64_t def) {
    const pd__attr *a = pd__attr_get(n, name);
    if (!a) return def;
    if (a->type == PD_A_INT) return a->i;
    if (a->type == PD_A_FLOAT) return (int64_t)a->f;
    return def;
}

float pd__attr_f(const pd__node *n, const char *name, float def) {
    const pd__attr *a = pd__attr_get(n, name);
    if (!a) return def;
    if (a->type == PD_A_FLOAT) return a->f;
    if (a->type == PD_A_INT) return (float)a->i;
    return def;
}

const char *pd__attr_s(const pd__node *n, const char *name, const char *def) {
    const pd__attr *a = pd__attr_get(n, name);
    return (a && a->type == PD_A_STRING && a->s) ? a->s : def;
}

int pd__attr_ints(const pd__node *n, const char *name, const int64_t **v) {
    const pd__attr *a = pd__attr_get(n, name);
    if (!a || a->type != PD_A_INTS) {
        *v = NULL;
        return 0;
    }
    *v = a->ints;
    return a->n;
}

int pd__attr_floats(const pd__node *n, const char *name, const float **v) {
    const pd__attr *a = pd__attr_get(n, name);
    if (!a || a->type != PD_A_FLOATS) {
        *v = NULL;
        return 0;
    }
    *v = a->floats;
    return a->n;
}

/* ---- shapes -------------------------------------------------------------- */

pd_status pd__tensor_set_shape(const pd_graph *g, pd__tensor *t, int ndim, const int64_t *shape) {
    char buf[256];
    if (ndim < 0 || ndim > PD_MAX_DIMS)
        return pd__err(PD_ERR_UNSUPPORTED, "%s: tensor '%s' has rank %d (at most %d supported)", g->path,
                       t->name, ndim, PD_MAX_DIMS);
    int64_t numel = pd__shape_numel(ndim, shape);
    if (numel < 0) {
        pd__format_shape(buf, sizeof buf, ndim, shape);
        return pd__err(PD_ERR_SHAPE, "%s: tensor '%s' has shape %s: negative dim or size overflow", g->path,
                       t->name, buf);
    }
    size_t es = pd_dtype_size(t->dtype);
    int64_t bytes;
    if (es && !pd__mul_ok(numel, (int64_t)es, &bytes)) {
        pd__format_shape(buf, sizeof buf, ndim, shape);
        return pd__err(PD_ERR_SHAPE, "%s: tensor '%s' of shape %s is too large", g->path, t->name, buf);
    }
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->numel = numel;
    return PD_OK;
}

pd_tensor pd__view(const pd__tensor *t) {
    pd_tensor v;
    memset(&v, 0, sizeof v);
    v.dtype = t->dtype;
    v.ndim = t->ndim < 0 ? 0 : t->ndim;
    for (int i = 0; i < v.ndim; i++) v.shape[i] = t->shape[i];
    v.data = t->data;
    return v;
}

/* ---- topological order ------------------------------------------------- */

/* producer[t]: the node writing tensor t (-1: none); a tensor written twice,
 * or a graph input or initializer written at all, is refused. */
static pd_status sort_producers(pd_graph *g, int *producer) {
    for (int t = 0; t < g->ntensors; t++) producer[t] = -1;
    for (int i = 0; i < g->nnodes; i++) {
        pd__node *n = &g->nodes[i];
        for (int j = 0; j < n->nout; j++) {
            int t = n->out[j];
            if (t < 0) continue;
            if (producer[t] >= 0 || g->tensors[t].kind != PD_T_ACT) {
                const char *what = producer[t] >= 0 ? "another node's output"
                                   : g->tensors[t].kind == PD_T_INPUT ? "a graph input"
                                                                       : "an initializer or constant";
                return pd__node_err(g, n, PD_ERR_INVALID, "output '%s' is already %s", g->tensors[t].name, what);
            }
            producer[t] = i;
        }
    }
    return PD_OK;
}

/* Each node's in-degree and its consumers as CSR (users[ustart[i] ..
 * ustart[i + 1]]); *users is allocated here. */
static pd_status sort_users(pd_graph *g, int nn, const int *producer, int *indeg, int *ustart, int **users) {
    int nedges = 0;
    for (int i = 0; i < nn; i++) {
        pd__node *n = &g->nodes[i];
        for (int j = 0; j < n->nin; j++) {
            int t = n->in[j];
            if (t < 0) continue;
            if (producer[t] < 0 && g->tensors[t].kind == PD_T_ACT)
                return pd__node_err(g, n, PD_ERR_INVALID,
                                    "input '%s' is not a graph input, an initializer or any node's output",
                                    g->tensors[t].name);
            if (producer[t] >= 0) {
                indeg[i]++;
                ustart[producer[t]]++;
                nedges++;
            }
        }
    }
    int *fill = (int *)PD_CALLOC((size_t)nn, sizeof(int));
    *users = (int *)PD_MALLOC(sizeof(int) * (size_t)(nedges + 1));
    if (!fill || !*users) {
        PD_FREE(fill);
        return pd__err(PD_ERR_NOMEM, "%s: out of memory sorting the graph", g->path);
    }
    for (int i = 0, acc = 0; i <= nn; i++) { /* prefix sums: the start of node i's users */
        int c = i < nn ? ustart[i] : 0;
        ustart[i] = acc;
        acc += c;
    }
    for (int i = 0; i < nn; i++) {
        pd__node *n = &g->nodes[i];
        for (int j = 0; j < n->nin; j++) {
            int t = n->in[j], p = t >= 0 ? producer[t] : -1;
            if (p >= 0) (*users)[ustart[p] + fill[p]++] = i;
        }
    }
    PD_FREE(fill);
    return PD_OK;
}

pd_status pd__graph_toposort(pd_graph *g) {
    int nn = g->nnodes;
    if (nn <= 0) return PD_OK;
    int *producer = (int *)PD_MALLOC(sizeof(int) * (size_t)(g->ntensors + 1));
    int *indeg = (int *)PD_CALLOC((size_t)nn, sizeof(int));
    int *order = (int *)PD_MALLOC(sizeof(int) * (size_t)nn);
    int *ustart = (int *)PD_CALLOC((size_t)nn + 1, sizeof(int));
    int *users = NULL, head = 0, tail = 0;
    pd__node *sorted = NULL;
    pd_status st = producer && indeg && order && ustart
                       ? PD_OK
                       : pd__err(PD_ERR_NOMEM, "%s: out of memory sorting the graph", g->path);
    if (st == PD_OK) st = sort_producers(g, producer);
    if (st == PD_OK) st = sort_users(g, nn, producer, indeg, ustart, &users);
    if (st != PD_OK) goto done;
    /* Kahn's algorithm, keeping the model's order among ready nodes (a FIFO
     * of indices in order of readiness is stable enough for exports). */
    for (int i = 0; i < nn; i++)
        if (indeg[i] == 0) order[tail++] = i;
    while (head < tail) {
        int i = order[head++];
        for (int k = ustart[i]; k < ustart[i + 1]; k++)
            if (--indeg[users[k]] == 0) order[tail++] = users[k];
    }
    if (tail < nn) {
        int bad = 0;
        while (bad < nn && indeg[bad] == 0) bad++;
        st = pd__node_err(g, &g->nodes[bad], PD_ERR_INVALID, "the graph has a cycle through this node");
        goto done;
    }
    if (!(sorted = (pd__node *)PD_MALLOC(sizeof(pd__node) * (size_t)g->ncap))) {
        st = pd__err(PD_ERR_NOMEM, "%s: out of memory sorting the graph", g->path);
        goto done;
    }
    for (int i = 0; i < nn; i++) sorted[i] = g->nodes[order[i]];
    PD_FREE(g->nodes);
    g->nodes = sorted;
    for (int i = 0; i < nn; i++)
        for (int j = 0; j < g->nodes[i].nout; j++)
            if (g->nodes[i].out[j] >= 0) g->tensors[g->nodes[i].out[j]].producer = i;
done:
    PD_FREE(producer);
    PD_FREE(indeg);
    PD_FREE(order);
    PD_FREE(ustart);
    PD_FREE(users);
    return st;
}

/* ---- constant inputs, shape inference and folding ------------------------- */

static bool pd__is_float(pd_dtype t) {
    return t == PD_FLOAT || t == PD_DOUBLE || t == PD_FLOAT16 || t == PD_BFLOAT16;
}

/* A float initializer may be trained: never fold it into something else,
 * unless the model says it is a constant (pd__train_rule: a single element,
 * or left out of its training_info), as the -1e9 of a causal mask is. */
bool pd__foldable_input(const pd__tensor *t) {
    if (t->kind == PD_T_CONST) return true;
    if (t->kind == PD_T_INIT)
        return !pd__is_float(t->dtype) || t->train == PD_TR_SCALAR || t->train == PD_TR_UNLISTED ||
               t->train == PD_TR_EXPORTER;
    return false;
}

static pd_status pd__bind_const_inputs(pd_graph *g, const pd_load_options *opt) {
    for (int c = 0; c < opt->n_const_inputs; c++) {
        const char *name = opt->const_input_names[c];
        const pd_tensor *v = &opt->const_inputs[c];
        int k = -1;
        for (int i = 0; i < g->ninputs; i++)
            if (strcmp(g->tensors[g->inputs[i]].name, name) == 0) k = i;
        if (k < 0) return pd__err(PD_ERR_INVALID, "%s: no graph input named '%s'", g->path, name);
        pd__tensor *t = &g->tensors[g->inputs[k]];
        if (t->dtype != v->dtype)
            return pd__err(PD_ERR_SHAPE, "%s: input '%s' is %s, the value given is %s", g->path, name,
                           pd_dtype_name(t->dtype), pd_dtype_name(v->dtype));
        t->dtype = v->dtype;
        PD_TRY(pd__tensor_set_shape(g, t, v->ndim, v->shape));
        size_t bytes = (size_t)t->numel * pd_dtype_size(t->dtype);
        t->data = PD_MALLOC(bytes ? bytes : 1);
        if (!t->data) return pd__err(PD_ERR_NOMEM, "%s: out of memory binding input '%s'", g->path, name);
        if (bytes) memcpy(t->data, v->data, bytes);
        t->kind = PD_T_CONST;
        g->inputs[k] = g->inputs[--g->ninputs];
    }
    return PD_OK;
}

/* Folds n when its outputs fit in what is left of the cap on folded bytes
 * (*budget, taken from; opt->max_constant_bytes at the start): a tiny model
 * may declare a ConstantOfShape of 8 GiB, which must be refused before it is
 * allocated, naming the node and the size. Refused rather than left to run:
 * at run time the constant would take the same memory, once per stage. */
static pd_status pd__fold_node(pd_graph *g, pd__node *n, const pd_backend_i *be, int64_t *budget, int64_t cap) {
    pd_tensor inv[16], outv[16];
    pd_tensor *in[16], *out[16];
    if (n->nin > 16 || n->nout > 16) return PD_OK; /* not worth folding */
    int64_t need = 0;
    /* a Constant's value is in the file already: only what folding makes up counts */
    for (int j = 0; j < n->nout && n->op != PD_OP_CONSTANT; j++) {
        if (n->out[j] < 0) continue;
        const pd__tensor *t = &g->tensors[n->out[j]];
        int64_t b;
        if (!pd__mul_ok(t->numel, (int64_t)pd_dtype_size(t->dtype), &b) || __builtin_add_overflow(need, b, &need))
            need = INT64_MAX;
    }
    if (need > *budget) {
        int first = 0; /* the first output the model names (LSTM's Y may be left off) */
        while (first < n->nout - 1 && n->out[first] < 0) first++;
        const pd__tensor *t = &g->tensors[n->out[first]];
        char shape[256];
        pd__format_shape(shape, sizeof shape, t->ndim, t->shape);
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED,
                            "folding it makes a constant of %lld bytes (output '%s' %s %s), beyond the cap of "
                            "%lld bytes for the model's constants; raise opt->max_constant_bytes",
                            (long long)need, t->name, pd_dtype_name(t->dtype), shape, (long long)cap);
    }
    *budget -= need;
    for (int j = 0; j < n->nin; j++) {
        in[j] = NULL;
        if (n->in[j] < 0) continue;
        inv[j] = pd__view(&g->tensors[n->in[j]]);
        in[j] = &inv[j];
    }
    for (int j = 0; j < n->nout; j++) {
        out[j] = NULL;
        if (n->out[j] < 0) continue;
        pd__tensor *t = &g->tensors[n->out[j]];
        size_t bytes = (size_t)t->numel * pd_dtype_size(t->dtype);
        t->data = PD_CALLOC(1, bytes ? bytes : 1);
        if (!t->data) return pd__err(PD_ERR_NOMEM, "%s: out of memory folding '%s'", g->path, n->name);
        outv[j] = pd__view(t);
        out[j] = &outv[j];
    }
    pd__exec x;
    memset(&x, 0, sizeof x);
    x.threads = 1;
    x.g = g;
    pd_status st = be->run_node(&x, n, in, out);
    PD_FREE(x.scratch);
    if (st != PD_OK) return st;
    for (int j = 0; j < n->nout; j++) {
        if (n->out[j] < 0) continue;
        g->tensors[n->out[j]].kind = PD_T_CONST;
        g->tensors[n->out[j]].producer = -1;
    }
    return PD_OK;
}

static bool pd__should_fold(const pd_graph *g, const pd__node *n) {
    if (n->op < 0 || !(pd__ops[n->op].flags & PD_OPF_FOLD)) return false;
    if (n->op == PD_OP_SHAPE) return true; /* only needs the input's shape */
    for (int j = 0; j < n->nin; j++)
        if (n->in[j] >= 0 && !pd__foldable_input(&g->tensors[n->in[j]])) return false;
    return true;
}

/* Keeps the nodes that still compute something a graph output needs. */
static pd_status pd__prune(pd_graph *g, const bool *folded) {
    bool *need = (bool *)PD_CALLOC((size_t)g->ntensors + 1, sizeof(bool));
    bool *keep = (bool *)PD_CALLOC((size_t)g->nnodes + 1, sizeof(bool));
    if (!need || !keep) {
        PD_FREE(need);
        PD_FREE(keep);
        return pd__err(PD_ERR_NOMEM, "%s: out of memory", g->path);
    }
    for (int i = 0; i < g->noutputs; i++) need[g->outputs[i]] = true;
    for (int i = g->nnodes - 1; i >= 0; i--) {
        pd__node *n = &g->nodes[i];
        if (folded[i]) continue;
        for (int j = 0; j < n->nout; j++)
            if (n->out[j] >= 0 && need[n->out[j]]) keep[i] = true;
        if (!keep[i]) continue;
        for (int j = 0; j < n->nin; j++)
            if (n->in[j] >= 0) need[n->in[j]] = true;
    }
    int k = 0;
    for (int i = 0; i < g->nnodes; i++) {
        if (keep[i]) {
            g->nodes[k++] = g->nodes[i];
        } else {
            pd__node_free(&g->nodes[i]);
        }
    }
    g->nnodes = k;
    for (int t = 0; t < g->ntensors; t++) g->tensors[t].producer = -1;
    for (int i = 0; i < g->nnodes; i++)
        for (int j = 0; j < g->nodes[i].nout; j++)
            if (g->nodes[i].out[j] >= 0) g->tensors[g->nodes[i].out[j]].producer = i;
    /* Folded intermediates nobody reads any more: drop their data. */
    for (int t = 0; t < g->ntensors; t++) {
        pd__tensor *x = &g->tensors[t];
        if (x->kind == PD_T_CONST && !need[t] && !x->is_output) {
            PD_FREE(x->data);
            x->data = NULL;
        }
    }
    PD_FREE(need);
    PD_FREE(keep);
    return PD_OK;
}

static const char *pd__dom(const pd__node *n) { return n->domain ? n->domain : ""; }

/* Every operator the model uses that pdonnx lacks, named at once with its
 * node count ("3 operators are not supported: Max (2 nodes), And (2), ...");
 * one node alone is named as any node error is. */
static bool pd__other_domain(const pd__node *n) { return pd__dom(n)[0] && strcmp(pd__dom(n), "ai.onnx") != 0; }

/* Control flow waits for pd_graph.expand; without one it is unsupported too. */
static bool pd__unsup(const pd_graph *g, const pd__node *n) { return n->op < 0 && !(n->op == PD__OP_FLOW && g->expand); }

/* Node i is unsupported and the first of its kind (op_type and domain): how
 * many nodes of that kind there are; 0 otherwise. */
static int pd__kind_count(const pd_graph *g, int i) {
    const pd__node *a = &g->nodes[i];
    if (!pd__unsup(g, a)) return 0;
    int count = 0;
    for (int k = 0; k < g->nnodes; k++) {
        const pd__node *b = &g->nodes[k];
        if (!pd__unsup(g, b) || strcmp(b->op_type, a->op_type) || strcmp(pd__dom(b), pd__dom(a))) continue;
        if (k < i) return 0;
        count++;
    }
    return count;
}

static pd_status pd__unsupported_ops(const pd_graph *g) {
    int first = -1, kinds = 0, nodes = 0;
    for (int i = 0; i < g->nnodes; i++)
        if (pd__unsup(g, &g->nodes[i])) {
            if (first < 0) first = i;
            nodes++;
            kinds += pd__kind_count(g, i) > 0;
        }
    if (first < 0) return PD_OK;
    const pd__node *n = &g->nodes[first];
    if (nodes == 1)
        return pd__other_domain(n) ? pd__node_err(g, n, PD_ERR_UNSUPPORTED, "operator %s of domain '%s' is not supported",
                                                  n->op_type, pd__dom(n))
                                   : pd__node_err(g, n, PD_ERR_UNSUPPORTED, "operator %s is not supported", n->op_type);
    char list[1024] = "";
    size_t len = 0;
    for (int i = 0; i < g->nnodes && len < sizeof list - 64; i++) {
        int count = pd__kind_count(g, i);
        if (count == 0) continue;
        const pd__node *a = &g->nodes[i];
        bool dom = pd__other_domain(a);
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%s%s%s (%d%s)", len ? ", " : "", dom ? pd__dom(a) : "",
                                dom ? "." : "", a->op_type, count, len ? "" : count == 1 ? " node" : " nodes");
    }
    if (len >= sizeof list - 64) snprintf(list + len, sizeof list - len, ", ...");
    return pd__err(PD_ERR_UNSUPPORTED, "%s: %d operator%s not supported: %s", g->path, kinds,
                   kinds == 1 ? " is" : "s are", list);
}

pd_status pd__graph_note(pd_graph *g, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    char **n = (char **)PD_REALLOC(g->notes, sizeof(char *) * (size_t)(g->nnotes + 1));
    if (!n) return pd__err(PD_ERR_NOMEM, "%s: out of memory", g->path);
    g->notes = n;
    if (!(n[g->nnotes] = pd__strdup(buf))) return pd__err(PD_ERR_NOMEM, "%s: out of memory", g->path);
    g->nnotes++;
    return PD_OK;
}

pd_status pd__add_tie(pd_graph *g, int alias, int source, bool transposed) {
    int *t = (int *)PD_REALLOC(g->tied, sizeof(int) * 3 * (size_t)(g->ntied + 1));
    if (!t) return pd__err(PD_ERR_NOMEM, "%s: out of memory", g->path);
    g->tied = t;
    g->tied[3 * g->ntied] = alias;
    g->tied[3 * g->ntied + 1] = source;
    g->tied[3 * g->ntied + 2] = transposed;
    g->ntied++;
    return PD_OK;
}

/* ---- ties stored as a transpose --------------------------------------------
 * PyTorch ties an LM head to the token embedding: one tensor. Both exporters
 * store the head again, as the embedding's transpose (TorchScript folds W^T
 * into `onnx::MatMul_N`, dynamo into `val_N`), and trained apart the two part
 * from the second step. A 2-D float initializer equal, bit for bit, to
 * another's transpose becomes Transpose(that one), so both uses train one
 * tensor; untie keeps them apart. A tensor whose values are all equal, or a
 * symmetric square, proves nothing (fresh zeros, an identity) and is left. */

static bool pd__transpose_of(const pd__tensor *a, const pd__tensor *b) {
    if (a->shape[0] != b->shape[1] || a->shape[1] != b->shape[0]) return false;
    int64_t r = a->shape[0], c = a->shape[1];
    const uint32_t *x = (const uint32_t *)a->data, *y = (const uint32_t *)b->data;
    for (int64_t i = 0; i < r; i++)
        for (int64_t j = 0; j < c; j++)
            if (x[i * c + j] != y[j * r + i]) return false;
    return true;
}

static bool pd__tie_candidate(const pd__tensor *x) {
    if (x->kind != PD_T_INIT || x->dtype != PD_FLOAT || !x->data || x->ndim != 2 || x->numel < 2) return false;
    if (x->train == PD_TR_SCALAR || x->train == PD_TR_UNLISTED || x->train == PD_TR_EXPORTER) return false;
    const uint32_t *v = (const uint32_t *)x->data;
    bool same = true;
    for (int64_t i = 1; i < x->numel && same; i++) same = v[i] == v[0];
    return !same && !(x->shape[0] == x->shape[1] && pd__transpose_of(x, x));
}

/* a module's parameter ("transformer.wte.weight"), not an exporter's name ("onnx::MatMul_7", "val_3") */
static bool pd__param_name(const char *s) { return strchr(s, '.') && !strstr(s, "::"); }

static pd_status pd__add_transpose_node(pd_graph *g, int source, int alias) {
    pd__node n;
    memset(&n, 0, sizeof n);
    size_t len = strlen(g->tensors[alias].name) + 32;
    n.name = (char *)PD_MALLOC(len);
    n.op_type = pd__strdup("Transpose");
    n.domain = pd__strdup("");
    n.in = (int *)PD_MALLOC(sizeof(int));
    n.out = (int *)PD_MALLOC(sizeof(int));
    n.attr = (pd__attr *)PD_CALLOC(1, sizeof(pd__attr));
    int64_t *perm = (int64_t *)PD_MALLOC(2 * sizeof(int64_t));
    char *pname = pd__strdup("perm");
    if (!n.name || !n.op_type || !n.domain || !n.in || !n.out || !n.attr || !perm || !pname) {
        PD_FREE(perm);
        PD_FREE(pname);
        pd__node_free(&n);
        return pd__err(PD_ERR_NOMEM, "%s: out of memory", g->path);
    }
    snprintf(n.name, len, "%s/tied_transpose", g->tensors[alias].name);
    n.op = PD_OP_TRANSPOSE;
    n.opset = (int)g->opset;
    n.nin = n.nout = 1;
    n.in[0] = source;
    n.out[0] = alias;
    perm[0] = 1;
    perm[1] = 0;
    n.nattr = 1;
    n.attr[0].name = pname;
    n.attr[0].type = PD_A_INTS;
    n.attr[0].n = 2;
    n.attr[0].ints = perm;
    pd_status st = pd__graph_add_node(g, &n);
    if (st != PD_OK) pd__node_free(&n);
    return st;
}

static bool pd__tied_already(const pd_graph *g, int t) {
    for (int i = 0; i < g->ntied; i++)
        if (g->tied[3 * i + 2] && (g->tied[3 * i] == t || g->tied[3 * i + 1] == t)) return true;
    return false;
}

pd_status pd__tie_transposes(pd_graph *g, bool untie) {
    for (int b = 0; b < g->ntensors; b++) {
        if (!pd__tie_candidate(&g->tensors[b]) || pd__tied_already(g, b)) continue;
        for (int a = 0; a < g->ntensors; a++) {
            pd__tensor *A = &g->tensors[a], *B = &g->tensors[b];
            if (a == b || A->ndim != 2 || A->shape[0] != B->shape[1] || A->shape[1] != B->shape[0]) continue;
            if (!pd__tie_candidate(A) || !pd__transpose_of(A, B)) continue;
            /* the module's parameter is the source; else the one stored first */
            bool bsrc = pd__param_name(B->name) && !pd__param_name(A->name);
            int source = bsrc ? b : a, alias = bsrc ? a : b;
            PD_TRY(pd__add_tie(g, alias, source, true));
            if (!untie) {
                pd__tensor *x = &g->tensors[alias];
                PD_TRY(pd__add_transpose_node(g, source, alias));
                if (!x->borrowed) PD_FREE(x->data);
                x->data = NULL;
                x->kind = PD_T_ACT;
            }
            break;
        }
    }
    return PD_OK;
}

/* ---- half_as_float ---------------------------------------------------------- */

static bool pd__is_half(pd_dtype t) { return t == PD_FLOAT16 || t == PD_BFLOAT16; }

/* data (numel elements of *dt) rewritten as float32 in a new buffer */
static pd_status pd__floatify(pd_graph *g, const char *what, pd_dtype *dt, int64_t numel, void **data) {
    float *f = (float *)PD_MALLOC(sizeof(float) * (size_t)(numel > 0 ? numel : 1));
    if (!f) return pd__err(PD_ERR_NOMEM, "%s: out of memory for '%s' in float32", g->path, what);
    for (int64_t i = 0; i < numel; i++) f[i] = (float)pd__get_f(*dt, *data, i);
    PD_FREE(*data);
    *data = f;
    *dt = PD_FLOAT;
    return PD_OK;
}

/* an attribute naming a tensor type (Cast's `to`, EyeLike's and the random
 * ops' `dtype`) */
static bool pd__dtype_attr(const pd__node *n, const pd__attr *a) {
    return a->type == PD_A_INT && (!strcmp(a->name, "to") || !strcmp(a->name, "dtype")) &&
           (!strcmp(n->op_type, "Cast") || !strcmp(n->op_type, "EyeLike") || !strncmp(n->op_type, "Random", 6) ||
            !strcmp(n->op_type, "Bernoulli"));
}

pd_status pd__half_as_float(pd_graph *g) {
    int tensors = 0, attrs = 0;
    for (int t = 0; t < g->ntensors; t++) {
        pd__tensor *x = &g->tensors[t];
        if (!pd__is_half(x->dtype)) continue;
        x->file_dtype = x->dtype;
        if (x->data && !x->borrowed) PD_TRY(pd__floatify(g, x->name, &x->dtype, x->numel, &x->data));
        x->dtype = PD_FLOAT;
        tensors++;
    }
    for (int i = 0; i < g->nnodes; i++) {
        pd__node *n = &g->nodes[i];
        for (int k = 0; k < n->nattr; k++) {
            pd__attr *a = &n->attr[k];
            if (pd__dtype_attr(n, a) && pd__is_half((pd_dtype)a->i)) {
                a->i = PD_FLOAT;
                attrs++;
            } else if (a->type == PD_A_TENSOR && a->t && pd__is_half(a->t->dtype)) {
                PD_TRY(pd__floatify(g, a->name, &a->t->dtype, pd_tensor_numel(a->t), &a->t->data));
                attrs++;
            }
        }
    }
    if (tensors + attrs == 0) return PD_OK;
    return pd__graph_note(g, "float16/bfloat16 computed in float32: %d tensors and %d node attributes (the saved "
                          "model keeps the file's types)", tensors, attrs);
}

/* Float initializers tied through Identity (the TorchScript exporter's way of
 * storing equal values once): recorded in g->tied; with untie, the alias
 * becomes an initializer of its own holding a copy, and the node goes. */
static pd_status pd__find_ties(pd_graph *g, bool untie, bool *folded) {
    for (int i = 0; i < g->nnodes; i++) {
        pd__node *n = &g->nodes[i];
        if (n->op != PD_OP_IDENTITY || n->nin < 1 || n->in[0] < 0 || n->nout < 1 || n->out[0] < 0) continue;
        pd__tensor *src = &g->tensors[n->in[0]], *dst = &g->tensors[n->out[0]];
        if (src->kind != PD_T_INIT || !pd__is_float(src->dtype) || (!src->data && !pd__deferred(src))) continue;
        PD_TRY(pd__add_tie(g, n->out[0], n->in[0], false));
        if (!untie) continue;
        size_t bytes = (size_t)src->numel * pd_dtype_size(src->dtype);
        void *d = NULL;
        if (pd__deferred(src)) { /* lazy_weights: the copy is read when it is used, from the same place */
            if (!(dst->ext_path = pd__strdup(src->ext_path)))
                return pd__err(PD_ERR_NOMEM, "%s: out of memory untying '%s'", g->path, dst->name);
            dst->ext_off = src->ext_off;
        } else if (!(d = PD_MALLOC(bytes ? bytes : 1))) {
            return pd__err(PD_ERR_NOMEM, "%s: out of memory untying '%s'", g->path, dst->name);
        } else {
            memcpy(d, src->data, bytes);
        }
        dst->kind = PD_T_INIT;
        dst->dtype = src->dtype;
        dst->data = d;
        dst->producer = -1;
        dst->train = src->train;
        PD_TRY(pd__tensor_set_shape(g, dst, src->ndim, src->shape));
        folded[i] = true; /* pruned with the folded nodes */
    }
    return PD_OK;
}

/* ---- fusion ----------------------------------------------------------------
 * PyTorch's exporters below opset 20 write F.gelu as five nodes,
 *   Mul(Mul(x, Add(Erf(Div(x, sqrt 2)), 1)), 0.5),
 * five passes over a transformer's widest activation forward and five
 * backward where PyTorch makes one each way (a ViT's step spent 15% there).
 * The chain becomes one Gelu node with the last Mul's name and output; the
 * saved model keeps the file's nodes (save.c writes the file's graph). */

/* t is a one-element constant equal to v (to float rounding). */
static bool pd__const_is(const pd_graph *g, int t, double v) {
    if (t < 0) return false;
    const pd__tensor *x = &g->tensors[t];
    if (!x->data || x->numel != 1 || !pd__foldable_input(x)) return false;
    double d = x->dtype == PD_FLOAT ? *(const float *)x->data : x->dtype == PD_DOUBLE ? *(const double *)x->data : NAN;
    return fabs(d - v) <= 1e-6 * fabs(v);
}

/* The input of binary node n other than one equal to want (-1: neither is). */
static int pd__other_in(const pd__node *n, int want) {
    if (n->nin != 2) return -1;
    return n->in[0] == want ? n->in[1] : n->in[1] == want ? n->in[0] : -1;
}

/* The node that alone reads t, of kind op (-1: none, several, or t is an output). */
static int pd__sole_reader(const pd_graph *g, const int *reads, const int *reader, int t, int op) {
    if (t < 0 || reads[t] != 1 || g->tensors[t].is_output) return -1;
    return g->nodes[reader[t]].op == op ? reader[t] : -1;
}

/* reads[t]: how many live nodes read tensor t; reader[t]: the last of them. */
static pd_status pd__count_reads(const pd_graph *g, const bool *gone, int **reads, int **reader) {
    *reads = (int *)PD_CALLOC((size_t)g->ntensors + 1, sizeof(int));
    *reader = (int *)PD_CALLOC((size_t)g->ntensors + 1, sizeof(int));
    if (!*reads || !*reader) {
        PD_FREE(*reads);
        PD_FREE(*reader);
        return pd__err(PD_ERR_NOMEM, "%s: out of memory", g->path);
    }
    for (int i = 0; i < g->nnodes; i++)
        for (int j = 0; j < g->nodes[i].nin && !gone[i]; j++)
            if (g->nodes[i].in[j] >= 0) (*reads)[g->nodes[i].in[j]]++, (*reader)[g->nodes[i].in[j]] = i;
    return PD_OK;
}

/* Node `into` takes over node `from` (fused away): its name and those it had
 * absorbed, so plans naming the file's nodes still place it (pd__plan_match). */
static pd_status pd__absorb(pd_graph *g, pd__node *into, const pd__node *from) {
    int n = into->nabsorbed + 1 + from->nabsorbed;
    char **names = (char **)PD_REALLOC(into->absorbed, sizeof(char *) * (size_t)n);
    if (!names) return pd__err(PD_ERR_NOMEM, "%s: out of memory", g->path);
    into->absorbed = names;
    for (int k = -1; k < from->nabsorbed; k++) {
        char *name = pd__strdup(k < 0 ? from->name : from->absorbed[k]);
        if (!name) return pd__err(PD_ERR_NOMEM, "%s: out of memory", g->path);
        into->absorbed[into->nabsorbed++] = name;
    }
    return PD_OK;
}

static pd_status pd__fuse_gelu(pd_graph *g, bool *gone) {
    int *reads, *reader;
    PD_TRY(pd__count_reads(g, gone, &reads, &reader));
    pd_status st = PD_OK;
    for (int ie = 0; ie < g->nnodes && st == PD_OK; ie++) {
        pd__node *E = &g->nodes[ie];
        if (gone[ie] || E->op != PD_OP_ERF || E->nin != 1 || E->nout != 1) continue;
        int d = E->in[0], id = d >= 0 ? g->tensors[d].producer : -1;
        if (id < 0 || gone[id] || reads[d] != 1 || g->tensors[d].is_output) continue;
        pd__node *D = &g->nodes[id];
        int x = -1;
        if (D->op == PD_OP_DIV && D->nin == 2 && pd__const_is(g, D->in[1], 1.41421356237309504880)) x = D->in[0];
        if (D->op == PD_OP_MUL && pd__const_is(g, D->in[1], 0.70710678118654752440)) x = D->in[0];
        if (D->op == PD_OP_MUL && pd__const_is(g, D->in[0], 0.70710678118654752440)) x = D->in[1];
        if (x < 0 || g->tensors[x].dtype != PD_FLOAT) continue;
        int ia = pd__sole_reader(g, reads, reader, E->out[0], PD_OP_ADD);
        if (ia < 0 || !pd__const_is(g, pd__other_in(&g->nodes[ia], E->out[0]), 1.0)) continue;
        int im = pd__sole_reader(g, reads, reader, g->nodes[ia].out[0], PD_OP_MUL);
        if (im < 0 || pd__other_in(&g->nodes[im], g->nodes[ia].out[0]) != x) continue;
        int ih = pd__sole_reader(g, reads, reader, g->nodes[im].out[0], PD_OP_MUL);
        if (ih < 0 || !pd__const_is(g, pd__other_in(&g->nodes[ih], g->nodes[im].out[0]), 0.5)) continue;
        pd__node *H = &g->nodes[ih];
        if (g->tensors[H->out[0]].numel != g->tensors[x].numel) continue;
        char *type = pd__strdup("Gelu");
        if (!type) {
            st = pd__err(PD_ERR_NOMEM, "%s: out of memory", g->path);
            break;
        }
        PD_FREE(H->op_type);
        H->op_type = type;
        H->op = PD_OP_GELU;
        H->in[0] = x;
        H->nin = 1;
        gone[id] = gone[ie] = gone[ia] = gone[im] = true;
        int from[4] = {id, ie, ia, im};
        for (int k = 0; k < 4 && st == PD_OK; k++) st = pd__absorb(g, H, &g->nodes[from[k]]);
    }
    PD_FREE(reads);
    PD_FREE(reader);
    return st;
}

/* An exported nn.Linear on a 3-D activation is Add(MatMul(x, Transpose(W)),
 * b): the Transpose copies W forward and its gradient backward, the Add
 * makes one more pass over the output each way. As Gemm(x, W, b, transB=1)
 * the product reads W through BLAS's transposed layout, starts from the
 * bias (beta 1) and sums the bias gradient in its backward. Only the
 * loader makes a Gemm with x of rank > 2: the kernels flatten x's leading
 * dims, the Gemm shape rule (files) still asks for 2-D. */
static bool pd__is_weight_transpose(const pd_graph *g, const pd__node *T) {
    if (T->op != PD_OP_TRANSPOSE || T->nin != 1 || T->in[0] < 0) return false;
    const pd__tensor *w = &g->tensors[T->in[0]];
    if (w->ndim != 2 || w->dtype != PD_FLOAT) return false;
    const pd__attr *perm = NULL;
    for (int k = 0; k < T->nattr; k++)
        if (!strcmp(T->attr[k].name, "perm")) perm = &T->attr[k];
    return !perm || (perm->n == 2 && perm->ints[0] == 1 && perm->ints[1] == 0);
}

/* Add node ia becomes Gemm(x, W, b) with transB = 1. */
static pd_status pd__make_linear(pd_graph *g, int ia, int x, int w, int b) {
    pd__node *A = &g->nodes[ia];
    int *in = (int *)PD_MALLOC(3 * sizeof(int));
    pd__attr *attr = (pd__attr *)PD_CALLOC(1, sizeof(pd__attr));
    char *type = pd__strdup("Gemm"), *name = pd__strdup("transB"), *domain = pd__strdup(PD__FUSED_DOMAIN);
    if (!in || !attr || !type || !name || !domain) {
        PD_FREE(in), PD_FREE(attr), PD_FREE(type), PD_FREE(name), PD_FREE(domain);
        return pd__err(PD_ERR_NOMEM, "%s: out of memory", g->path);
    }
    in[0] = x, in[1] = w, in[2] = b;
    attr[0].name = name;
    attr[0].type = PD_A_INT;
    attr[0].i = 1;
    for (int k = 0; k < A->nattr; k++) pd__attr_free(&A->attr[k]);
    PD_FREE(A->attr);
    PD_FREE(A->in);
    PD_FREE(A->op_type);
    PD_FREE(A->domain);
    A->domain = domain;
    A->attr = attr, A->nattr = 1, A->in = in, A->nin = 3, A->op_type = type, A->op = PD_OP_GEMM;
    return PD_OK;
}

static pd_status pd__fuse_linear(pd_graph *g, bool *gone) {
    int *reads, *reader;
    PD_TRY(pd__count_reads(g, gone, &reads, &reader));
    pd_status st = PD_OK;
    for (int it = 0; it < g->nnodes && st == PD_OK; it++) {
        pd__node *T = &g->nodes[it];
        if (gone[it] || !pd__is_weight_transpose(g, T) || T->nout != 1 || T->out[0] < 0) continue;
        bool tied = false; /* a tied alias (pd__tie_transposes) keeps its Transpose */
        for (int k = 0; k < g->ntied; k++) tied |= g->tied[3 * k] == T->out[0];
        if (tied) continue;
        int im = pd__sole_reader(g, reads, reader, T->out[0], PD_OP_MATMUL);
        if (im < 0 || g->nodes[im].nin != 2 || g->nodes[im].in[1] != T->out[0]) continue;
        int x = g->nodes[im].in[0], y = g->nodes[im].out[0];
        if (x < 0 || g->tensors[x].dtype != PD_FLOAT || g->tensors[x].ndim < 2) continue;
        int ia = pd__sole_reader(g, reads, reader, y, PD_OP_ADD);
        int b = ia < 0 ? -1 : pd__other_in(&g->nodes[ia], y);
        const pd__tensor *bt = b >= 0 && b != y ? &g->tensors[b] : NULL;
        if (!bt || bt->dtype != PD_FLOAT || bt->ndim != 1 || bt->shape[0] != g->tensors[T->in[0]].shape[0]) continue;
        if (g->tensors[g->nodes[ia].out[0]].numel != g->tensors[y].numel) continue;
        st = pd__make_linear(g, ia, x, T->in[0], b);
        if (st == PD_OK) st = pd__absorb(g, &g->nodes[ia], T);
        if (st == PD_OK) st = pd__absorb(g, &g->nodes[ia], &g->nodes[im]);
        if (st == PD_OK) gone[it] = gone[im] = true;
    }
    PD_FREE(reads);
    PD_FREE(reader);
    return st;
}

/* Replaces node i, already consumed by pd_graph.expand, with the k nodes of
 * made (taken; made freed); *folded grows along. The new nodes come in
 * topological order and read only tensors computed before node i. */
static pd_status pd__splice(pd_graph *g, int i, pd__node *made, int k, bool **folded) {
    int nn = g->nnodes - 1 + k;
    pd__node *nodes = nn > g->ncap ? (pd__node *)PD_REALLOC(g->nodes, sizeof(pd__node) * (size_t)nn) : g->nodes;
    if (nodes) g->nodes = nodes, g->ncap = nn > g->ncap ? nn : g->ncap;
    bool *f = nodes ? (bool *)PD_REALLOC(*folded, (size_t)nn + 1) : NULL;
    if (!f) {
        for (int j = 0; j < k; j++) pd__node_free(&made[j]);
        PD_FREE(made);
        return pd__err(PD_ERR_NOMEM, "%s: out of memory expanding control flow", g->path);
    }
    *folded = f;
    memmove(&g->nodes[i + k], &g->nodes[i + 1], sizeof(pd__node) * (size_t)(g->nnodes - i - 1));
    memmove(&f[i + k], &f[i + 1], (size_t)(g->nnodes - i - 1));
    for (int j = 0; j < k; j++) g->nodes[i + j] = made[j], f[i + j] = false;
    g->nnodes = nn;
    PD_FREE(made);
    return PD_OK;
}

/* Node i is If/Loop/Scan: expanded in place, then visited again from i. */
static pd_status pd__expand_at(pd_graph *g, int i, bool **folded) {
    pd__node self = g->nodes[i], *made = NULL;
    memset(&g->nodes[i], 0, sizeof self); /* self is the expander's from here on */
    int k = 0;
    PD_TRY(g->expand(g->expand_ctx, g, &self, &made, &k));
    PD_TRY(pd__splice(g, i, made, k, folded));
    for (int j = i; j < i + k; j++)
        if (pd__unsup(g, &g->nodes[j])) return pd__unsupported_ops(g); /* an op of the subgraph we lack */
    return PD_OK;
}

/* The low-bit types (float8, float4, int4, int2) are stored, converted and
 * moved, never computed in: an op that reads or makes one must be a
 * conversion or only move bytes. The other ops' shape rules mostly refuse
 * them by their dtype checks already; this catches the ones that take "any
 * dtype" and compute (CumSum, ArgMax, TopK, NonZero, Trilu's zeros...). */
static pd_status pd__check_lowbit(const pd_graph *g, const pd__node *n) {
    switch (n->op) {
    case PD_OP_CAST: case PD_OP_CAST_LIKE: case PD_OP_QUANTIZE_LINEAR: case PD_OP_DEQUANTIZE_LINEAR:
    case PD_OP_IDENTITY: case PD_OP_FLATTEN: case PD_OP_RESHAPE: case PD_OP_TRANSPOSE: case PD_OP_CONCAT:
    case PD_OP_SPLIT: case PD_OP_SLICE: case PD_OP_GATHER: case PD_OP_UNSQUEEZE: case PD_OP_SQUEEZE:
    case PD_OP_EXPAND: case PD_OP_CONSTANT: case PD_OP_SHAPE: case PD_OP_CONSTANT_OF_SHAPE: case PD_OP_SIZE:
    case PD_OP_TILE: case PD_OP_GATHER_ELEMENTS: case PD_OP_GATHER_ND: case PD_OP_DEPTH_TO_SPACE:
    case PD_OP_SPACE_TO_DEPTH: case PD_OP_COMPRESS: case PD_OP_REVERSE_SEQUENCE:
        return PD_OK;
    case PD_OP_SCATTER_ELEMENTS: case PD_OP_SCATTER_ND:
        if (!strcmp(pd__attr_s(n, "reduction", "none"), "none")) return PD_OK;
        break;
    default: break;
    }
    for (int k = 0; k < n->nin + n->nout; k++) {
        int id = k < n->nin ? n->in[k] : n->out[k - n->nin];
        const pd__tensor *t = id >= 0 ? &g->tensors[id] : NULL;
        if (t && pd__dtype_lowbit(t->dtype))
            return pd__node_err(g, n, PD_ERR_UNSUPPORTED,
                                "%s '%s' is %s, which no kernel computes in (Cast it to a wider type first)",
                                k < n->nin ? "input" : "output", t->name, pd_dtype_name(t->dtype));
    }
    return PD_OK;
}

pd_status pd__graph_finalize(pd_graph *g, const pd_load_options *opt, const pd_backend_i *fold) {
    PD_TRY(pd__bind_const_inputs(g, opt));
    PD_TRY(pd__unsupported_ops(g));
    bool *folded = (bool *)PD_CALLOC((size_t)g->nnodes + 1, sizeof(bool));
    if (!folded) return pd__err(PD_ERR_NOMEM, "%s: out of memory", g->path);
    pd_status tst = pd__find_ties(g, opt->untie != 0, folded);
    if (tst != PD_OK) {
        PD_FREE(folded);
        return tst;
    }
    pd_status st = PD_OK;
    int64_t budget = opt->max_constant_bytes > 0 ? opt->max_constant_bytes : PD_MAX_CONSTANT_BYTES_DEFAULT;
    for (int i = 0; i < g->nnodes && st == PD_OK; i++) {
        pd__node *n = &g->nodes[i];
        if (folded[i]) continue; /* an untied Identity */
        if (n->op == PD__OP_FLOW) {
            st = pd__expand_at(g, i--, &folded);
            continue;
        }
        bool any = false; /* every op of the set has an output; LSTM, GRU and RNN may leave off the first */
        for (int j = 0; j < n->nout; j++) any |= n->out[j] >= 0;
        if (!any || (n->out[0] < 0 && !(pd__ops[n->op].flags & PD_OPF_RNN))) {
            st = pd__node_err(g, n, PD_ERR_INVALID, "the node has no output");
            break;
        }
        st = pd__ops[n->op].shape(g, n);
        if (st == PD_OK) st = pd__check_lowbit(g, n);
        if (st != PD_OK) break;
        for (int j = 0; j < n->nout && st == PD_OK; j++) {
            pd__tensor *t = pd__out(g, n, j);
            if (t && (t->ndim < 0 || t->dtype == PD_UNDEFINED))
                st = pd__node_err(g, n, PD_ERR_INTERNAL, "shape rule left output %d without a shape", j);
        }
        if (st == PD_OK && fold && opt->fold_constants && pd__should_fold(g, n)) {
            st = pd__fold_node(g, n, fold, &budget, opt->max_constant_bytes);
            folded[i] = st == PD_OK;
        }
    }
    for (int t = 0; st == PD_OK && t < g->ntensors; t++) g->tensors[t].producer = -1; /* nodes moved */
    for (int i = 0; st == PD_OK && i < g->nnodes; i++)
        for (int j = 0; j < g->nodes[i].nout; j++)
            if (g->nodes[i].out[j] >= 0 && g->tensors[g->nodes[i].out[j]].kind == PD_T_ACT)
                g->tensors[g->nodes[i].out[j]].producer = i;
    if (st == PD_OK && opt->fold_constants) st = pd__fuse_gelu(g, folded);
    if (st == PD_OK && opt->fold_constants) st = pd__fuse_linear(g, folded);
    if (st == PD_OK) st = pd__prune(g, folded);
    PD_FREE(folded);
    return st;
}
