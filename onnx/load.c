/* load.c - reads an ONNX model (ModelProto) into a pd_graph.
 *
 * Order: opsets, initializers (owned data), runtime inputs (concrete shapes,
 * from the model, the caller's input shapes or the batch size), outputs,
 * nodes (op looked up in the op table; foreign domains and subgraph
 * attributes leave op = -1, refused later naming the op; If/Loop/Scan keep
 * their subgraphs, unrolled by flow.c as finalize meets them), then toposort
 * and finalize (shape inference, constant folding). Every error names the file
 * and the tensor, node or attribute; on error the partial graph is destroyed
 * and *out is untouched. */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../core/pd_internal.h"
#include "decode.h"

typedef pd__loader loader;

/* printf into a PD_MALLOC'd string; NULL when out of memory. */
static char *fmt_alloc(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *fmt_alloc(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return NULL;
    char *s = PD_MALLOC((size_t)n + 1);
    if (!s) return NULL;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

static pd_status nomem(const loader *L) { return pd__err(PD_ERR_NOMEM, "%s: out of memory", L->g->path); }

static const char *str_or_empty(const char *s) { return s ? s : ""; }

/* "" and "ai.onnx" are the same domain. */
static const char *norm_domain(const char *d) { return (!d || strcmp(d, "ai.onnx") == 0) ? "" : d; }

/* The opset version imported for a domain; 0 when it is not imported. */
static int64_t domain_version(const Onnx__ModelProto *m, const char *domain) {
    for (size_t i = 0; i < m->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *o = m->opset_import[i];
        if (o && strcmp(norm_domain(o->domain), domain) == 0) return o->has_version ? o->version : 0;
    }
    return 0;
}

/* The newest opsets this build reads: those of ONNX 1.22, whose backend test
 * data (../shared/onnx-tests) the ops are checked against. A newer opset may
 * change an op's meaning; refusing it beats computing something else. */
#define PD__OPSET_MAX 27    /* ai.onnx */
#define PD__ML_OPSET_MAX 5  /* ai.onnx.ml (Binarizer and ArrayFeatureExtractor only: node_op) */

/* Every import names a version that exists: >= 1, and for the ONNX domains at
 * most the newest one known. A model without any import is refused unless its
 * IR version (1 or 2) predates opset_import; other domains are checked only
 * for a positive version: their nodes are refused later, naming the domain. */
static pd_status check_opsets(const loader *L) {
    const Onnx__ModelProto *m = L->m;
    const char *path = L->g->path;
    if (m->n_opset_import == 0) {
        if (m->has_ir_version && m->ir_version >= 1 && m->ir_version < 3) return PD_OK; /* opset 1 */
        return pd__err(PD_ERR_INVALID, "%s: the model imports no opset (opset_import is empty; IR version %lld needs one)",
                       path, (long long)(m->has_ir_version ? m->ir_version : 0));
    }
    for (size_t i = 0; i < m->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *o = m->opset_import[i];
        if (!o) continue;
        const char *d = norm_domain(o->domain);
        int64_t v = o->has_version ? o->version : 0;
        int64_t max = !*d ? PD__OPSET_MAX : strcmp(d, "ai.onnx.ml") == 0 ? PD__ML_OPSET_MAX : INT64_MAX;
        if (v < 1 || v > max) {
            if (max == INT64_MAX)
                return pd__err(PD_ERR_INVALID, "%s: domain '%s' is imported at opset %lld; versions start at 1", path,
                               d, (long long)v);
            return pd__err(PD_ERR_UNSUPPORTED,
                           "%s: opset %lld of domain '%s' does not exist or is newer than this build knows "
                           "(it reads opsets 1 to %d, ONNX 1.22)",
                           path, (long long)v, *d ? d : "ai.onnx", (int)max);
        }
    }
    return PD_OK;
}

/* ---- options ---------------------------------------------------------------- */

static pd_status get_options(const pd_load_options *opt, const char *name, pd_load_options *o) {
    pd_load_options d = PD_LOAD_OPTIONS_INIT;
    PD_TRY(pd__opts_read(&d, opt, sizeof d, "pd_graph_load: opt"));
    if (d.max_constant_bytes == 0) d.max_constant_bytes = PD_MAX_CONSTANT_BYTES_DEFAULT;
    if (d.max_constant_bytes < 0)
        return pd__err(PD_ERR_INVALID, "%s: max_constant_bytes %lld is negative", name,
                       (long long)d.max_constant_bytes);
    if (d.batch < 0)
        return pd__err(PD_ERR_INVALID, "%s: batch size %lld is negative", name, (long long)d.batch);
    if (d.n_input_shapes < 0 || (d.n_input_shapes > 0 && !d.input_shapes))
        return pd__err(PD_ERR_INVALID, "%s: %d input shapes given with no array", name, d.n_input_shapes);
    for (int i = 0; i < d.n_input_shapes; i++) {
        const pd_input_shape *s = &d.input_shapes[i];
        for (int j = 0; !s->name && j < i; j++)
            if (!d.input_shapes[j].name)
                return pd__err(PD_ERR_INVALID, "%s: input shapes %d and %d both have no name (one may: the first input)",
                               name, j, i);
        if (s->ndim < 0 || s->ndim > PD_MAX_DIMS)
            return pd__err(PD_ERR_INVALID, "%s: input shape for '%s' has rank %d (0 to %d allowed)", name,
                           s->name, s->ndim, PD_MAX_DIMS);
        for (int a = 0; a < s->ndim; a++)
            if (s->shape[a] < 0)
                return pd__err(PD_ERR_INVALID, "%s: input shape for '%s' has negative dim %lld at axis %d",
                               name, s->name, (long long)s->shape[a], a);
    }
    if (d.n_const_inputs < 0 || (d.n_const_inputs > 0 && (!d.const_input_names || !d.const_inputs)))
        return pd__err(PD_ERR_INVALID, "%s: %d constant inputs given with no array", name, d.n_const_inputs);
    for (int i = 0; i < d.n_const_inputs; i++) {
        const pd_tensor *t = &d.const_inputs[i];
        const char *nm = d.const_input_names[i];
        if (!nm) return pd__err(PD_ERR_INVALID, "%s: constant input %d has no name", name, i);
        if (t->ndim < 0 || t->ndim > PD_MAX_DIMS)
            return pd__err(PD_ERR_INVALID, "%s: constant input '%s' has rank %d (0 to %d allowed)", name, nm,
                           t->ndim, PD_MAX_DIMS);
        int64_t numel = pd__shape_numel(t->ndim, t->shape);
        if (numel < 0)
            return pd__err(PD_ERR_INVALID, "%s: constant input '%s' has a negative dim or too many elements",
                           name, nm);
        if (numel > 0 && !t->data)
            return pd__err(PD_ERR_INVALID, "%s: constant input '%s' has no data", name, nm);
    }
    *o = d;
    return PD_OK;
}

/* ---- initializers --------------------------------------------------------------- */

static pd_status load_initializers(loader *L) {
    pd_graph *g = L->g;
    const Onnx__GraphProto *gp = L->gp;
    if (gp->n_sparse_initializer > 0) {
        const Onnx__SparseTensorProto *sp = gp->sparse_initializer[0];
        const char *nm = sp && sp->values && sp->values->name ? sp->values->name : "?";
        return pd__err(PD_ERR_UNSUPPORTED, "%s: sparse initializer '%s' is not supported", g->path, nm);
    }
    for (size_t i = 0; i < gp->n_initializer; i++) {
        const Onnx__TensorProto *tp = gp->initializer[i];
        if (!tp->name || !*tp->name)
            return pd__err(PD_ERR_PARSE, "%s: initializer %zu has no name", g->path, i);
        if (pd__graph_find(g, tp->name) >= 0)
            return pd__err(PD_ERR_INVALID, "%s: initializer '%s' appears twice", g->path, tp->name);
        char *what = fmt_alloc("%s: initializer '%s'", g->path, tp->name);
        if (!what) return nomem(L);
        pd_tensor t;
        pd__tensor where = {0}; /* lazy_weights: the file and offset, data left unread */
        pd_status s = pd__decode_tensor_ex(tp, what, L->base_dir, L->opt.lazy_weights ? &where : NULL, &t);
        PD_FREE(what);
        if (s != PD_OK) return s;
        int ti = pd__graph_tensor(g, tp->name);
        if (ti < 0) {
            PD_FREE(t.data);
            PD_FREE(where.ext_path);
            return nomem(L);
        }
        pd__tensor *gt = &g->tensors[ti];
        gt->ext_path = where.ext_path;
        gt->ext_off = where.ext_off;
        gt->kind = PD_T_INIT;
        gt->dtype = t.dtype;
        gt->data = t.data; /* owned by the graph from here on */
        gt->producer = -1;
        PD_TRY(pd__tensor_set_shape(g, gt, t.ndim, t.shape));
    }
    return PD_OK;
}

/* ---- runtime inputs ------------------------------------------------------------ */

/* The shape (and dtype, PD_UNDEFINED when not said) the caller gives for an
 * input: from input_shapes, else from the value of a constant input. false
 * when neither names it. */
static bool given_shape(const loader *L, const char *name, int *ndim, int64_t *shape, pd_dtype *dtype) {
    for (int i = 0; i < L->opt.n_input_shapes; i++)
        if (L->opt.input_shapes[i].name && strcmp(L->opt.input_shapes[i].name, name) == 0) {
            *dtype = L->opt.input_shapes[i].dtype;
            *ndim = L->opt.input_shapes[i].ndim;
            memcpy(shape, L->opt.input_shapes[i].shape, sizeof(int64_t) * (size_t)*ndim);
            return true;
        }
    for (int i = 0; i < L->opt.n_const_inputs; i++)
        if (strcmp(L->opt.const_input_names[i], name) == 0) {
            *dtype = L->opt.const_inputs[i].dtype;
            *ndim = L->opt.const_inputs[i].ndim;
            memcpy(shape, L->opt.const_inputs[i].shape, sizeof(int64_t) * (size_t)*ndim);
            return true;
        }
    return false;
}

/* The input shape given without a name (the first runtime input's dims the
 * model leaves open: a data file's rows fixing a sequence length), or NULL. */
static const pd_input_shape *unnamed_shape(const loader *L) {
    for (int i = 0; i < L->opt.n_input_shapes; i++)
        if (!L->opt.input_shapes[i].name) return &L->opt.input_shapes[i];
    return NULL;
}

/* Works out a runtime input's concrete shape; `first`: the model's first runtime input. */
static pd_status input_shape(const loader *L, const char *name, const Onnx__TypeProto__Tensor *tt,
                             pd_dtype dtype, bool first, int *ndim, int64_t *shape) {
    const char *path = L->g->path;
    const Onnx__TensorShapeProto *sp = tt->shape;
    if (sp && sp->n_dim > PD_MAX_DIMS)
        return pd__err(PD_ERR_UNSUPPORTED, "%s: input '%s' has rank %zu, above the maximum of %d", path, name,
                       sp->n_dim, PD_MAX_DIMS);
    pd_dtype gdt = PD_UNDEFINED;
    if (given_shape(L, name, ndim, shape, &gdt)) {
        if (gdt != PD_UNDEFINED && gdt != dtype)
            return pd__err(PD_ERR_SHAPE, "%s: input '%s' is %s in the model, the value given is %s", path,
                           name, pd_dtype_name(dtype), pd_dtype_name(gdt));
        if (sp && (size_t)*ndim != sp->n_dim)
            return pd__err(PD_ERR_SHAPE,
                           "%s: input '%s': the shape given has rank %d, the model's has rank %zu", path,
                           name, *ndim, sp->n_dim);
        return PD_OK;
    }
    const pd_input_shape *fill = first ? unnamed_shape(L) : NULL;
    if (!sp && !fill)
        return pd__err(PD_ERR_SHAPE, "%s: input '%s' has no shape in the model; give the input's shape", path,
                       name);
    if (fill && sp && (size_t)fill->ndim != sp->n_dim) fill = NULL; /* not this input's shape: the caller's checks say so */
    *ndim = sp ? (int)sp->n_dim : fill->ndim;
    if (!sp) memcpy(shape, fill->shape, sizeof(int64_t) * (size_t)*ndim);
    for (int a = 0; sp && a < *ndim; a++) {
        const Onnx__TensorShapeProto__Dimension *d = sp->dim[a];
        bool known =
            d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE && d->dim_value >= 0;
        if (known) {
            shape[a] = d->dim_value;
            continue;
        }
        if (a == 0 && L->opt.batch > 0) {
            shape[a] = L->opt.batch;
            continue;
        }
        if (fill) {
            shape[a] = fill->shape[a];
            continue;
        }
        if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM && d->dim_param &&
            *d->dim_param)
            return pd__err(
                PD_ERR_SHAPE,
                "%s: input '%s' has symbolic dim '%s' at axis %d; give opt->batch or the input's shape", path,
                name, d->dim_param, a);
        return pd__err(PD_ERR_SHAPE,
                       "%s: input '%s' has an unknown dim at axis %d; give opt->batch or the input's shape",
                       path, name, a);
    }
    return PD_OK;
}

static pd_status load_inputs(loader *L) {
    pd_graph *g = L->g;
    const Onnx__GraphProto *gp = L->gp;
    g->inputs = PD_MALLOC(sizeof(int) * (gp->n_input ? gp->n_input : 1));
    if (!g->inputs) return nomem(L);
    g->ninputs = 0;
    for (size_t i = 0; i < gp->n_input; i++) {
        const Onnx__ValueInfoProto *vi = gp->input[i];
        const char *name = vi->name;
        if (!name || !*name) return pd__err(PD_ERR_PARSE, "%s: graph input %zu has no name", g->path, i);
        int ti = pd__graph_find(g, name);
        if (ti >= 0 && g->tensors[ti].kind == PD_T_INIT)
            continue; /* old style: an initializer listed as input */
        if (ti >= 0) return pd__err(PD_ERR_INVALID, "%s: graph input '%s' appears twice", g->path, name);
        const Onnx__TypeProto *tp = vi->type;
        if (!tp) return pd__err(PD_ERR_PARSE, "%s: input '%s' has no type", g->path, name);
        if (tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type)
            return pd__err(
                PD_ERR_UNSUPPORTED,
                "%s: input '%s' is not a dense tensor (sequence, map, optional or sparse); not supported",
                g->path, name);
        const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
        int32_t et = tt->has_elem_type ? tt->elem_type : 0;
        if (et == PD_UNDEFINED)
            return pd__err(PD_ERR_PARSE, "%s: input '%s' has no element type", g->path, name);
        if (pd__onnx_dtype_size(et) == 0)
            return pd__err(PD_ERR_UNSUPPORTED,
                           "%s: input '%s' has element type %s (%d), which is not supported", g->path, name,
                           pd__onnx_type_name(et), (int)et);
        int ndim = 0;
        int64_t shape[PD_MAX_DIMS];
        PD_TRY(input_shape(L, name, tt, (pd_dtype)et, g->ninputs == 0, &ndim, shape));
        ti = pd__graph_tensor(g, name);
        if (ti < 0) return nomem(L);
        pd__tensor *t = &g->tensors[ti];
        t->kind = PD_T_INPUT;
        t->dtype = (pd_dtype)et;
        t->producer = -1;
        PD_TRY(pd__tensor_set_shape(g, t, ndim, shape));
        g->inputs[g->ninputs++] = ti;
    }
    /* every input shape the caller gave must name a runtime input */
    for (int i = 0; i < L->opt.n_input_shapes; i++) {
        const char *nm = L->opt.input_shapes[i].name;
        if (!nm) continue;
        int ti = pd__graph_find(g, nm);
        if (ti < 0 || g->tensors[ti].kind != PD_T_INPUT)
            return pd__err(PD_ERR_INVALID,
                           "%s: a shape was given for '%s', which is not a runtime input of the model",
                           g->path, nm);
    }
    return PD_OK;
}

/* ---- outputs ----------------------------------------------------------------------- */

static pd_status load_outputs(loader *L) {
    pd_graph *g = L->g;
    const Onnx__GraphProto *gp = L->gp;
    g->outputs = PD_MALLOC(sizeof(int) * (gp->n_output ? gp->n_output : 1));
    if (!g->outputs) return nomem(L);
    g->noutputs = 0;
    for (size_t i = 0; i < gp->n_output; i++) {
        const char *name = gp->output[i]->name;
        if (!name || !*name) return pd__err(PD_ERR_PARSE, "%s: graph output %zu has no name", g->path, i);
        int ti = pd__graph_tensor(g, name);
        if (ti < 0) return nomem(L);
        if (g->tensors[ti].is_output)
            return pd__err(PD_ERR_INVALID, "%s: graph output '%s' appears twice", g->path, name);
        g->tensors[ti].is_output = true;
        g->outputs[g->noutputs++] = ti;
    }
    return PD_OK;
}

/* ---- nodes ------------------------------------------------------------------------ */

/* The type of an attribute; IR version 1 models leave it out and set one field. */
static int attr_type(const Onnx__AttributeProto *ap) {
    if (ap->has_type && ap->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__UNDEFINED) return (int)ap->type;
    if (ap->has_f) return PD_A_FLOAT;
    if (ap->has_i) return PD_A_INT;
    if (ap->has_s) return PD_A_STRING;
    if (ap->t) return PD_A_TENSOR;
    if (ap->g) return PD_A_GRAPH;
    if (ap->n_floats) return PD_A_FLOATS;
    if (ap->n_ints) return PD_A_INTS;
    if (ap->n_strings) return PD_A_STRINGS;
    if (ap->n_graphs) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPHS;
    if (ap->n_tensors) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSORS;
    return PD_A_UNDEFINED;
}

/* Fills *a from *ap. Sets *unsupported for attributes we cannot hold
 * (subgraph lists, sparse tensors, tensor lists, type protos): the node stays
 * in the graph with op = -1 and the attribute keeps only its name and type.
 * A subgraph is kept borrowed from the model (pd__attr.graph). */
static pd_status load_attr(loader *L, const pd__node *n, const Onnx__AttributeProto *ap, pd__attr *a,
                           bool *unsupported) {
    const char *path = L->g->path;
    const char *aname = ap->name;
    if (!aname || !*aname)
        return pd__err(PD_ERR_PARSE, "%s: node '%s' (%s): an attribute has no name", path, n->name,
                       n->op_type);
    for (int k = 0; k < n->nattr; k++)
        if (strcmp(n->attr[k].name, aname) == 0)
            return pd__err(PD_ERR_INVALID, "%s: node '%s' (%s): attribute '%s' appears twice", path, n->name,
                           n->op_type, aname);
    a->name = pd__strdup(aname);
    if (!a->name) return nomem(L);
    int type = attr_type(ap);
    a->type = (pd__atype)type;
    size_t cnt = 0;
    switch (type) {
    case PD_A_FLOATS: cnt = ap->n_floats; break;
    case PD_A_INTS: cnt = ap->n_ints; break;
    case PD_A_STRINGS: cnt = ap->n_strings; break;
    default: break;
    }
    if (cnt > INT_MAX)
        return pd__err(PD_ERR_PARSE, "%s: node '%s' (%s): attribute '%s' has too many values", path, n->name,
                       n->op_type, aname);
    a->n = (int)cnt;
    switch (type) {
    case PD_A_UNDEFINED: break;
    case PD_A_FLOAT: a->f = ap->f; break;
    case PD_A_INT: a->i = ap->i; break;
    case PD_A_STRING:
        a->s = PD_MALLOC(ap->s.len + 1);
        if (!a->s) return nomem(L);
        if (ap->s.len) memcpy(a->s, ap->s.data, ap->s.len);
        a->s[ap->s.len] = '\0';
        break;
    case PD_A_FLOATS:
        if (cnt) {
            a->floats = PD_MALLOC(cnt * sizeof(float));
            if (!a->floats) return nomem(L);
            memcpy(a->floats, ap->floats, cnt * sizeof(float));
        }
        break;
    case PD_A_INTS:
        if (cnt) {
            a->ints = PD_MALLOC(cnt * sizeof(int64_t));
            if (!a->ints) return nomem(L);
            memcpy(a->ints, ap->ints, cnt * sizeof(int64_t));
        }
        break;
    case PD_A_STRINGS: {
        /* packed into s: n NUL-terminated strings back to back */
        size_t total = 0;
        for (size_t k = 0; k < cnt; k++) total += ap->strings[k].len + 1;
        if (cnt) {
            a->s = PD_MALLOC(total);
            if (!a->s) return nomem(L);
            char *p = a->s;
            for (size_t k = 0; k < cnt; k++) {
                if (ap->strings[k].len) memcpy(p, ap->strings[k].data, ap->strings[k].len);
                p += ap->strings[k].len;
                *p++ = '\0';
            }
        }
        break;
    }
    case PD_A_TENSOR: {
        if (!ap->t)
            return pd__err(PD_ERR_PARSE, "%s: node '%s' (%s): tensor attribute '%s' has no tensor", path,
                           n->name, n->op_type, aname);
        char *what = fmt_alloc("%s: node '%s' (%s): attribute '%s'", path, n->name, n->op_type, aname);
        if (!what) return nomem(L);
        pd_tensor t;
        pd_status s = pd__decode_tensor(ap->t, what, L->base_dir, &t);
        PD_FREE(what);
        if (s != PD_OK) return s;
        a->t = PD_MALLOC(sizeof *a->t);
        if (!a->t) {
            PD_FREE(t.data);
            return nomem(L);
        }
        *a->t = t;
        break;
    }
    case PD_A_GRAPH:
        if (!ap->g)
            return pd__err(PD_ERR_PARSE, "%s: node '%s' (%s): graph attribute '%s' has no graph", path, n->name,
                           n->op_type, aname);
        PD_TRY(pd__flow_keep(L, a, ap->g));
        break;
    default: /* GRAPHS, TENSORS, SPARSE_TENSOR(S), TYPE_PROTO(S) */
        *unsupported = true;
        break;
    }
    return PD_OK;
}

static pd_status by_name(void *ctx, const char *name, bool is_output, int *t) {
    (void)is_output;
    loader *L = (loader *)ctx;
    *t = pd__graph_tensor(L->g, name);
    return *t < 0 ? nomem(L) : PD_OK;
}

static pd_status tensor_list(loader *L, size_t n, char **names, bool outs, pd__resolve_fn resolve, void *ctx,
                             int **idx_out, int *n_out) {
    if (n > INT_MAX / 2) return pd__err(PD_ERR_PARSE, "%s: a node has too many inputs or outputs", L->g->path);
    int *idx = PD_MALLOC(sizeof(int) * (n ? n : 1));
    if (!idx) return nomem(L);
    for (size_t k = 0; k < n; k++) {
        idx[k] = -1; /* "": an absent optional input or output */
        if (!names[k] || !*names[k]) continue;
        pd_status s = resolve(ctx, names[k], outs, &idx[k]);
        if (s != PD_OK) {
            PD_FREE(idx);
            return s;
        }
    }
    *idx_out = idx;
    *n_out = (int)n;
    return PD_OK;
}

/* The op a node runs: the op table's entry for ai.onnx's ops, and for the
 * few ops of other domains that are implemented, each in its own
 * domain only (the table holds names, not domains); -1 otherwise. */
static int node_op(const char *domain, const char *op_type) {
    static const char *const other[][2] = {
        {"ai.onnx.preview", "FlexAttention"},
        {"ai.onnx.preview.training", "Adagrad"},
        {"ai.onnx.preview.training", "Adam"},
        {"ai.onnx.preview.training", "Momentum"},
        {"ai.onnx.ml", "Binarizer"},
        {"ai.onnx.ml", "ArrayFeatureExtractor"},
    };
    const char *want = "";
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++)
        if (strcmp(op_type, other[i][1]) == 0) want = other[i][0];
    return strcmp(domain, want) == 0 ? pd__op_lookup(op_type) : -1;
}

/* If, Loop and Scan of ai.onnx, each with its one subgraph attribute (two for If). */
static bool is_flow(const pd__node *n) {
    if (*n->domain) return false;
    return !strcmp(n->op_type, "If") || !strcmp(n->op_type, "Loop") || !strcmp(n->op_type, "Scan");
}

/* Appends the outer-scope names a control-flow node's subgraphs read to its
 * inputs: toposort must see them (the subgraph reads them when unrolled). */
static pd_status add_outer_refs(loader *L, pd__node *n, pd__resolve_fn resolve, void *ctx) {
    const char **names = NULL;
    int cnt = 0;
    PD_TRY(pd__flow_outer_refs(L, n, &names, &cnt));
    int *in = cnt ? PD_REALLOC(n->in, sizeof(int) * (size_t)(n->nin + cnt)) : n->in;
    if (!in) {
        PD_FREE(names);
        return nomem(L);
    }
    n->in = in;
    pd_status s = PD_OK;
    for (int k = 0; k < cnt && s == PD_OK; k++) {
        s = resolve(ctx, names[k], false, &n->in[n->nin]);
        if (s == PD_OK) n->nin++;
    }
    PD_FREE(names);
    return s;
}

pd_status pd__build_node(loader *L, size_t index, const Onnx__NodeProto *np, const char *prefix,
                         pd__resolve_fn resolve, void *ctx, pd__node *n) {
    pd_graph *g = L->g;
    if (!resolve) resolve = by_name, ctx = L;
    const char *op_type = str_or_empty(np->op_type);
    if (!*op_type) return pd__err(PD_ERR_PARSE, "%s: node %s%zu has no op_type", g->path, prefix ? prefix : "", index);
    const char *domain = norm_domain(np->domain);
    n->op_type = pd__strdup(op_type);
    n->domain = pd__strdup(domain);
    if (np->name && *np->name) n->name = prefix ? fmt_alloc("%s%s", prefix, np->name) : pd__strdup(np->name);
    else n->name = fmt_alloc("%s%s_%zu", prefix ? prefix : "", op_type, index);
    if (!n->op_type || !n->domain || !n->name) return nomem(L);
    n->opset = (int)domain_version(L->m, domain);
    if (!*domain && n->opset == 0 && L->m->n_opset_import > 0)
        return pd__err(PD_ERR_INVALID, "%s: node '%s' (%s): the model does not import the default domain (ai.onnx)",
                       g->path, n->name, n->op_type);
    n->op = node_op(domain, op_type);
    PD_TRY(tensor_list(L, np->n_input, np->input, false, resolve, ctx, &n->in, &n->nin));
    PD_TRY(tensor_list(L, np->n_output, np->output, true, resolve, ctx, &n->out, &n->nout));
    if (np->n_attribute > INT_MAX)
        return pd__err(PD_ERR_PARSE, "%s: node '%s' (%s) has too many attributes", g->path, n->name,
                       n->op_type);
    if (np->n_attribute) {
        n->attr = PD_CALLOC(np->n_attribute, sizeof *n->attr);
        if (!n->attr) return nomem(L);
    }
    bool unsupported = false, graphs = false;
    for (size_t k = 0; k < np->n_attribute; k++) {
        pd_status s = load_attr(L, n, np->attribute[k], &n->attr[k], &unsupported);
        n->nattr = (int)k + 1; /* the attribute is freed with the node, even half-built */
        if (s != PD_OK) return s;
        graphs |= n->attr[k].type == PD_A_GRAPH;
    }
    if (graphs && !unsupported && is_flow(n)) {
        n->op = PD__OP_FLOW;
        PD_TRY(add_outer_refs(L, n, resolve, ctx));
    } else if (unsupported || graphs) {
        n->op = -1;
    }
    return PD_OK;
}

static pd_status load_nodes(loader *L) {
    pd_graph *g = L->g;
    const Onnx__GraphProto *gp = L->gp;
    for (size_t i = 0; i < gp->n_node; i++) {
        pd__node n;
        memset(&n, 0, sizeof n);
        pd_status s = pd__build_node(L, i, gp->node[i], NULL, NULL, NULL, &n);
        if (s == PD_OK) s = pd__graph_add_node(g, &n);
        if (s != PD_OK) {
            pd__node_free(&n);
            return s;
        }
    }
    return PD_OK;
}

/* Every graph output is computed by a node, fed or stored. (toposort checks
 * that each tensor has at most one producer and every node input a source.) */
static pd_status check_outputs(loader *L) {
    pd_graph *g = L->g;
    bool *made = PD_CALLOC((size_t)g->ntensors + 1, sizeof(bool));
    if (!made) return nomem(L);
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i].nout; k++)
            if (g->nodes[i].out[k] >= 0) made[g->nodes[i].out[k]] = true;
    pd_status s = PD_OK;
    for (int j = 0; j < g->noutputs && s == PD_OK; j++) {
        const pd__tensor *t = &g->tensors[g->outputs[j]];
        if (t->kind == PD_T_ACT && !made[g->outputs[j]])
            s = pd__err(PD_ERR_INVALID, "%s: graph output '%s' is not computed by any node, fed or stored",
                        g->path, t->name);
    }
    PD_FREE(made);
    return s;
}

/* ---- the model -------------------------------------------------------------------- */

/* Which initializers may be trained (pd__train_rule): those training_info's
 * update_binding names when the model has one; otherwise all but the
 * single-element ones, an exporter's constants (the dynamo exporter stores
 * an attention scale or a Pow exponent as a float initializer). */
static void mark_trainable(loader *L) {
    pd_graph *g = L->g;
    const Onnx__ModelProto *m = L->m;
    for (size_t i = 0; i < m->n_training_info; i++)
        for (size_t k = 0; m->training_info[i] && k < m->training_info[i]->n_update_binding; k++) {
            const Onnx__StringStringEntryProto *b = m->training_info[i]->update_binding[k];
            int t = b && b->key ? pd__graph_find(g, b->key) : -1;
            if (t >= 0 && g->tensors[t].kind == PD_T_INIT) {
                g->tensors[t].train = PD_TR_LISTED;
                g->training_info = true;
            }
        }
    for (int t = 0; t < g->ntensors; t++) {
        pd__tensor *x = &g->tensors[t];
        if (x->kind != PD_T_INIT || x->train == PD_TR_LISTED) continue;
        if (g->training_info) x->train = PD_TR_UNLISTED;
        else if (x->numel <= 1) x->train = PD_TR_SCALAR;
    }
}

/* ---- the dynamo exporter's word on parameters ------------------------------
 * torch.export's graph signature names every parameter ("p_x: PARAMETER
 * target='layer1.0.conv1.weight'"), buffer and constant; the dynamo exporter
 * keeps it in the graph's metadata_props, and onnxscript's optimizer notes in
 * each folded initializer's value_info what it was folded from (a Linear
 * weight's transpose from the weight; Llama's rotary tables from the buffer
 * inv_freq). Both fields are newer than the system's onnx.proto (GraphProto
 * field 16, ValueInfoProto field 4): protobuf-c keeps them as unknown fields. */

/* The value of `key` in msg's metadata_props at field `tag` (PD_MALLOC'd), or NULL. */
static char *unknown_meta(const ProtobufCMessage *msg, uint32_t tag, const char *key) {
    for (unsigned i = 0; i < msg->n_unknown_fields; i++) {
        const ProtobufCMessageUnknownField *f = &msg->unknown_fields[i];
        if (f->tag != tag || f->wire_type != PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED) continue;
        /* protobuf-c keeps a length-prefixed field's varint length in data */
        const uint8_t *p = f->data, *end = f->data + f->len;
        uint64_t n;
        if (!pd__pb_varint(&p, end, &n) || n > (uint64_t)(end - p)) continue;
        Onnx__StringStringEntryProto *e = onnx__string_string_entry_proto__unpack(NULL, (size_t)n, p);
        char *v = e && e->key && e->value && !strcmp(e->key, key) ? pd__strdup(e->value) : NULL;
        if (e) onnx__string_string_entry_proto__free_unpacked(e, NULL);
        if (v) return v;
    }
    return NULL;
}

static bool signature_param(const char *sig, const char *name, size_t len) {
    static const char pre[] = "PARAMETER target='";
    for (const char *p = strstr(sig, pre); p; p = strstr(p + 1, pre)) {
        const char *q = p + sizeof pre - 1;
        if (!strncmp(q, name, len) && q[len] == '\'') return true;
    }
    return false;
}

/* A folded initializer's value_info note "['a', 'b']" (what onnxscript's
 * optimizer folded it from): whether it names a parameter; *gone: the first
 * such parameter the file no longer holds, when it was folded together with
 * other values (not a plain transpose), else NULL (PD_MALLOC'd). */
static bool folded_from_parameter(const loader *L, const char *sig, const char *from, char **gone) {
    *gone = NULL;
    bool yes = false;
    int entries = 0;
    const char *first = NULL;
    size_t first_len = 0;
    for (const char *p = strchr(from, '\''); p; p = strchr(p, '\'')) {
        const char *q = strchr(p + 1, '\'');
        if (!q) break;
        size_t len = (size_t)(q - p - 1);
        entries++;
        if (signature_param(sig, p + 1, len)) {
            yes = true;
            char nm[512];
            snprintf(nm, sizeof nm, "%.*s", (int)(len < sizeof nm ? len : sizeof nm - 1), p + 1);
            if (!first && pd__graph_find(L->g, nm) < 0) first = p + 1, first_len = len;
        }
        p = q + 1;
    }
    if (first && entries > 1 && (*gone = (char *)PD_MALLOC(first_len + 1))) {
        memcpy(*gone, first, first_len);
        (*gone)[first_len] = 0;
    }
    return yes;
}

/* Without training_info, a dynamo export's float initializers that are
 * neither parameters nor folded from one are not trained (PD_TR_EXPORTER);
 * one folded from a parameter the file no longer holds gets a note. */
static pd_status mark_exporter_constants(loader *L) {
    pd_graph *g = L->g;
    if (g->training_info) return PD_OK;
    char *sig = unknown_meta(&L->gp->base, 16, "pkg.torch.export.ExportedProgram.graph_signature");
    if (!sig) return PD_OK;
    for (int t = 0; t < g->ntensors; t++) {
        pd__tensor *x = &g->tensors[t];
        if (x->kind == PD_T_INIT && x->train == PD_TR_DEFAULT && x->dtype == PD_FLOAT &&
            !signature_param(sig, x->name, strlen(x->name)))
            x->train = PD_TR_EXPORTER; /* until its folded_from names a parameter */
    }
    pd_status st = PD_OK;
    for (size_t i = 0; i < L->gp->n_value_info && st == PD_OK; i++) {
        const Onnx__ValueInfoProto *v = L->gp->value_info[i];
        int t = v && v->name ? pd__graph_find(g, v->name) : -1;
        if (t < 0 || g->tensors[t].kind != PD_T_INIT || g->tensors[t].train != PD_TR_EXPORTER) continue;
        char *from = unknown_meta(&v->base, 4, "pkg.onnxscript.optimizer.folded_from"), *gone = NULL;
        pd__tensor *x = &g->tensors[t];
        if (from && folded_from_parameter(L, sig, from, &gone)) x->train = PD_TR_DEFAULT;
        if (gone) {
            char dims[128] = "";
            for (int d = 0; d < x->ndim; d++)
                snprintf(dims + strlen(dims), sizeof dims - strlen(dims), "%s%lld", d ? "," : "",
                         (long long)x->shape[d]);
            st = pd__graph_note(g,
                                "'%s' [%s] is parameter '%s' folded by the exporter with constants, and the file no "
                                "longer holds the parameter: the folded tensor trains in its place (the dynamo "
                                "exporter's optimize=False keeps it; docs/EXPORT.md)",
                                x->name, dims, gone);
        }
        PD_FREE(gone);
        PD_FREE(from);
    }
    PD_FREE(sig);
    return st;
}

static pd_status build_graph(loader *L) {
    pd_graph *g = L->g;
    const Onnx__ModelProto *m = L->m;
    char *gname = pd__strdup(str_or_empty(L->gp->name));
    if (!gname) return nomem(L);
    PD_FREE(g->name);
    g->name = gname;
    PD_TRY(check_opsets(L));
    /* no ai.onnx import: opset 1 (an IR version 1/2 model, or one that uses other domains only) */
    int64_t opset = domain_version(m, "");
    bool imported = false;
    for (size_t i = 0; i < m->n_opset_import; i++)
        if (m->opset_import[i] && !*norm_domain(m->opset_import[i]->domain)) imported = true;
    g->opset = imported ? opset : 1;
    PD_TRY(load_initializers(L));
    mark_trainable(L);
    PD_TRY(mark_exporter_constants(L));
    for (int t = 0; t < g->ntensors; t++) /* lazy_weights defers parameters only: constants are read now */
        if (pd__deferred(&g->tensors[t]) && g->tensors[t].train != PD_TR_DEFAULT && g->tensors[t].train != PD_TR_LISTED)
            PD_TRY(pd__tensor_load(&g->tensors[t]));
    PD_TRY(load_inputs(L));
    PD_TRY(load_outputs(L));
    PD_TRY(load_nodes(L));
    PD_TRY(check_outputs(L));
    if (L->opt.half_as_float) PD_TRY(pd__half_as_float(g));
    PD_TRY(pd__tie_transposes(g, L->opt.untie != 0));
    PD_TRY(pd__graph_toposort(g));
    g->expand = pd__flow_expand;
    g->expand_ctx = L;
    pd_status s = pd__graph_finalize(g, &L->opt, &pd__cpu_backend);
    g->expand = NULL; /* the subgraphs go with the model */
    g->expand_ctx = NULL;
    return s;
}

/* `owned`, when not NULL, is buf's allocation: freed as soon as it is unpacked. */
static pd_status load(const uint8_t *buf, size_t len, unsigned char *owned, const char *name,
                      const char *base_dir, const pd_load_options *opt, pd_graph **out) {
    loader L;
    memset(&L, 0, sizeof L);
    L.base_dir = base_dir;
    pd_status s = get_options(opt, name, &L.opt);
    if (s != PD_OK) {
        PD_FREE(owned);
        return s;
    }
    int c = pd__pb_check(&onnx__model_proto__descriptor, buf, len, PD__PB_MAX_DEPTH);
    if (c == PD__PB_TOO_DEEP) {
        PD_FREE(owned);
        return pd__err(PD_ERR_UNSUPPORTED, "%s: messages nest deeper than %d levels; refused", name,
                       PD__PB_MAX_DEPTH);
    }
    Onnx__ModelProto *m = c == PD__PB_OK ? onnx__model_proto__unpack(NULL, len, buf) : NULL;
    if (!m) {
        PD_FREE(owned);
        return pd__err(PD_ERR_PARSE, "%s: not a valid ONNX model (protobuf parse failed)", name);
    }
    if (!m->graph) {
        onnx__model_proto__free_unpacked(m, NULL);
        PD_FREE(owned);
        return pd__err(PD_ERR_PARSE, "%s: not a valid ONNX model (it has no graph)", name);
    }
    L.m = m;
    L.gp = m->graph;
    L.g = pd__graph_new(name);
    /* the serialized model stays with the graph: pd_graph_save rewrites it */
    if (L.g && !owned && (owned = PD_MALLOC(len ? len : 1))) memcpy(owned, buf, len);
    if (!L.g || !owned) {
        onnx__model_proto__free_unpacked(m, NULL);
        pd_graph_destroy(L.g);
        PD_FREE(owned);
        return pd__err(PD_ERR_NOMEM, "%s: out of memory", name);
    }
    L.g->model_bytes = owned;
    L.g->model_len = len;
    s = build_graph(&L);
    PD_FREE(L.sub_attr);
    PD_FREE(L.sub_graph);
    PD_FREE(L.init_key);
    PD_FREE(L.init_tensor);
    onnx__model_proto__free_unpacked(m, NULL);
    if (s != PD_OK) {
        pd_graph_destroy(L.g);
        return s;
    }
    *out = L.g;
    return PD_OK;
}

pd_status pd_graph_load_file(const char *path, const pd_load_options *opt, pd_graph **out) {
    if (!path || !out) return pd__err(PD_ERR_INVALID, "pd_graph_load_file: NULL %s", path ? "out" : "path");
    unsigned char *buf;
    size_t len;
    PD_TRY(pd__read_file(path, &buf, &len));
    char *dir = pd__dir_of(path);
    if (!dir) {
        PD_FREE(buf);
        return pd__err(PD_ERR_NOMEM, "%s: out of memory", path);
    }
    pd_status s = load(buf, len, buf, path, dir, opt, out);
    PD_FREE(dir);
    return s;
}

pd_status pd_graph_load_memory(const void *buf, size_t len, const char *name, const char *base_dir,
                               const pd_load_options *opt, pd_graph **out) {
    if (!name) name = "<memory>";
    if (!out || (!buf && len))
        return pd__err(PD_ERR_INVALID, "%s: pd_graph_load_memory: NULL %s", name, out ? "buf" : "out");
    static const uint8_t empty[1] = {0};
    return load(buf ? buf : empty, len, NULL, name, base_dir, opt, out);
}
