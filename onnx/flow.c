/* flow.c - If, Loop and Scan, unrolled into the graph as it loads.
 *
 * How it works: docs/INTERNALS.md, "onnx/flow.c".
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "../core/pd_internal.h"
#include "decode.h"

#define PD__FLOW_MAX_DEPTH 16     /* subgraphs inside subgraphs */
#define PD__FLOW_MAX_ITERS 4096   /* iterations one Loop or Scan unrolls */
#define PD__FLOW_MAX_NODES 250000 /* nodes all control flow of a model splices in */

/* ---- a name -> tensor map (names borrowed from the model) ------------------ */

typedef struct smap {
    const char **key;
    int *val;
    int cap, n;
} smap;

static uint64_t hstr(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static void smap_free(smap *m) {
    PD_FREE(m->key);
    PD_FREE(m->val);
    memset(m, 0, sizeof *m);
}

static int smap_slot(const smap *m, const char *k) {
    uint64_t i = hstr(k) & (uint64_t)(m->cap - 1);
    while (m->key[i] && strcmp(m->key[i], k)) i = (i + 1) & (uint64_t)(m->cap - 1);
    return (int)i;
}

/* false: k is not there (*v untouched). */
static bool smap_get(const smap *m, const char *k, int *v) {
    if (!m->cap) return false;
    int i = smap_slot(m, k);
    if (!m->key[i]) return false;
    *v = m->val[i];
    return true;
}

/* Sets k (replacing); false when out of memory. */
static bool smap_put(smap *m, const char *k, int v) {
    if ((m->n + 1) * 2 > m->cap) {
        smap b = {NULL, NULL, m->cap ? m->cap * 2 : 16, 0};
        b.key = (const char **)PD_CALLOC((size_t)b.cap, sizeof *b.key);
        b.val = (int *)PD_MALLOC(sizeof(int) * (size_t)b.cap);
        if (!b.key || !b.val) {
            smap_free(&b);
            return false;
        }
        for (int i = 0; i < m->cap; i++)
            if (m->key[i]) {
                int j = smap_slot(&b, m->key[i]);
                b.key[j] = m->key[i];
                b.val[j] = m->val[i];
                b.n++;
            }
        smap_free(m);
        *m = b;
    }
    int i = smap_slot(m, k);
    if (!m->key[i]) m->n++;
    m->key[i] = k;
    m->val[i] = v;
    return true;
}

static pd_status nomem(const pd_graph *g) {
    return pd__err(PD_ERR_NOMEM, "%s: out of memory unrolling control flow", g->path);
}

/* ---- GRAPH attributes' subgraphs ---------------------------------------------
 * Kept beside the graph rather than in pd__attr: only loading needs them.
 * Looked up newest first, so an attribute array freed and its address reused
 * finds its own subgraph. */

pd_status pd__flow_keep(pd__loader *L, const pd__attr *a, const Onnx__GraphProto *gp) {
    if (L->nsub == L->subcap) {
        int cap = L->subcap ? L->subcap * 2 : 16;
        const pd__attr **ka = (const pd__attr **)PD_REALLOC(L->sub_attr, sizeof *ka * (size_t)cap);
        if (ka) L->sub_attr = ka;
        const Onnx__GraphProto **kg = (const Onnx__GraphProto **)PD_REALLOC(L->sub_graph, sizeof *kg * (size_t)cap);
        if (kg) L->sub_graph = kg;
        if (!ka || !kg) return nomem(L->g);
        L->subcap = cap;
    }
    L->sub_attr[L->nsub] = a;
    L->sub_graph[L->nsub++] = gp;
    return PD_OK;
}

const Onnx__GraphProto *pd__flow_graph(const pd__loader *L, const pd__attr *a) {
    for (int i = L->nsub - 1; i >= 0; i--)
        if (L->sub_attr[i] == a) return L->sub_graph[i];
    return NULL;
}

/* ---- outer-scope names --------------------------------------------------- */

typedef struct names {
    const char **v;
    int n, cap;
    smap seen;
} names;

static bool names_add(names *o, const char *s) {
    int dummy;
    if (smap_get(&o->seen, s, &dummy)) return true;
    if (o->n == o->cap) {
        int cap = o->cap ? o->cap * 2 : 16;
        const char **v = (const char **)PD_REALLOC(o->v, sizeof *v * (size_t)cap);
        if (!v) return false;
        o->v = v;
        o->cap = cap;
    }
    o->v[o->n++] = s;
    return smap_put(&o->seen, s, 1);
}

/* Every name the subgraph defines: inputs, initializers, node outputs. */
static bool defined_names(const Onnx__GraphProto *b, smap *def) {
    for (size_t i = 0; i < b->n_input; i++)
        if (b->input[i]->name && !smap_put(def, b->input[i]->name, 1)) return false;
    for (size_t i = 0; i < b->n_initializer; i++)
        if (b->initializer[i]->name && !smap_put(def, b->initializer[i]->name, 1)) return false;
    for (size_t i = 0; i < b->n_node; i++)
        for (size_t k = 0; k < b->node[i]->n_output; k++)
            if (b->node[i]->output[k] && *b->node[i]->output[k] && !smap_put(def, b->node[i]->output[k], 1))
                return false;
    return true;
}

/* Adds to o the names b reads but does not define, its nested subgraphs' included. */
static pd_status refs_of(const pd__loader *L, const pd__node *ctl, const Onnx__GraphProto *b, int depth, names *o) {
    pd_graph *g = L->g;
    if (depth > PD__FLOW_MAX_DEPTH)
        return pd__node_err(g, ctl, PD_ERR_UNSUPPORTED, "subgraphs nest deeper than %d levels; refused",
                            PD__FLOW_MAX_DEPTH);
    smap def = {0};
    names inner = {0};
    pd_status st = PD_OK;
    if (!defined_names(b, &def)) st = nomem(g);
    int dummy;
    for (size_t i = 0; i < b->n_node && st == PD_OK; i++) {
        const Onnx__NodeProto *np = b->node[i];
        for (size_t k = 0; k < np->n_input && st == PD_OK; k++) {
            const char *s = np->input[k];
            if (s && *s && !smap_get(&def, s, &dummy) && !names_add(o, s)) st = nomem(g);
        }
        for (size_t a = 0; a < np->n_attribute && st == PD_OK; a++) {
            if (!np->attribute[a]->g) continue;
            st = refs_of(L, ctl, np->attribute[a]->g, depth + 1, &inner);
        }
    }
    for (int k = 0; k < inner.n && st == PD_OK; k++)
        if (!smap_get(&def, inner.v[k], &dummy) && !names_add(o, inner.v[k])) st = nomem(g);
    PD_FREE(inner.v);
    smap_free(&inner.seen);
    smap_free(&def);
    return st;
}

pd_status pd__flow_outer_refs(const pd__loader *L, const pd__node *n, const char ***out, int *count) {
    names o = {0};
    pd_status st = PD_OK;
    for (int a = 0; a < n->nattr && st == PD_OK; a++)
        if (n->attr[a].type == PD_A_GRAPH) {
            const Onnx__GraphProto *gp = pd__flow_graph(L, &n->attr[a]);
            st = gp ? refs_of(L, n, gp, 1, &o) : pd__node_err(L->g, n, PD_ERR_INTERNAL, "a subgraph went missing");
        }
    smap_free(&o.seen);
    if (st != PD_OK) {
        PD_FREE(o.v);
        return st;
    }
    *out = o.v;
    *count = o.n;
    return PD_OK;
}

/* ---- the nodes made ------------------------------------------------------- */

typedef struct nodes {
    pd__node *v;
    int n, cap;
} nodes;

/* Takes *x (freed on failure). */
static pd_status push(pd__loader *L, nodes *o, pd__node *x) {
    if (o->n == o->cap) {
        int cap = o->cap ? o->cap * 2 : 32;
        pd__node *v = (pd__node *)PD_REALLOC(o->v, sizeof *v * (size_t)cap);
        if (!v) {
            pd__node_free(x);
            return nomem(L->g);
        }
        o->v = v;
        o->cap = cap;
    }
    o->v[o->n++] = *x;
    memset(x, 0, sizeof *x);
    return PD_OK;
}

/* A new tensor named "<base>", or "<base>#k" when that is taken. */
static pd_status fresh(pd_graph *g, const char *base, int *t) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s", base);
    for (int k = 1; pd__graph_find(g, buf) >= 0; k++) snprintf(buf, sizeof buf, "%s#%d", base, k);
    *t = pd__graph_tensor(g, buf);
    return *t < 0 ? nomem(g) : PD_OK;
}

/* A constant int64 (or bool) tensor "<ctl>/<what>" of the given shape. */
static pd_status const_tensor(pd_graph *g, const pd__node *ctl, const char *what, pd_dtype dt, int ndim,
                              const int64_t *shape, const void *vals, int *t) {
    char base[512];
    snprintf(base, sizeof base, "%s/%s", ctl->name, what);
    PD_TRY(fresh(g, base, t));
    pd__tensor *x = &g->tensors[*t];
    x->kind = PD_T_CONST;
    x->dtype = dt;
    PD_TRY(pd__tensor_set_shape(g, x, ndim, shape));
    size_t bytes = (size_t)x->numel * pd_dtype_size(dt);
    x->data = PD_MALLOC(bytes ? bytes : 1);
    if (!x->data) return nomem(g);
    if (bytes) memcpy(x->data, vals, bytes);
    return PD_OK;
}

static pd_status const_i64(pd_graph *g, const pd__node *ctl, const char *what, int ndim, int64_t v, int *t) {
    int64_t one = 1;
    return const_tensor(g, ctl, what, PD_INT64, ndim, &one, &v, t);
}

/* A node of ours: "<ctl>/<what>", one output, inputs in, an int attribute
 * when aname is set. The opset is 13 at least (Unsqueeze's axes an input). */
static pd_status mk_node(pd__loader *L, nodes *o, const pd__node *ctl, const char *op_type, const char *what,
                         const int *in, int nin, int out, const char *aname, int64_t aval) {
    pd_graph *g = L->g;
    pd__node x;
    memset(&x, 0, sizeof x);
    char nm[512];
    snprintf(nm, sizeof nm, "%s/%s", ctl->name, what);
    x.name = pd__strdup(nm);
    x.op_type = pd__strdup(op_type);
    x.domain = pd__strdup("");
    x.in = (int *)PD_MALLOC(sizeof(int) * (size_t)nin);
    x.out = (int *)PD_MALLOC(sizeof(int));
    if (aname) {
        x.attr = (pd__attr *)PD_CALLOC(1, sizeof *x.attr);
        if (x.attr) x.attr[0].name = pd__strdup(aname);
    }
    x.nattr = x.attr && x.attr[0].name ? 1 : 0; /* pd__node_free frees what there is */
    if (!x.name || !x.op_type || !x.domain || !x.in || !x.out || (aname && !x.nattr)) {
        if (!x.nattr) PD_FREE(x.attr), x.attr = NULL;
        pd__node_free(&x);
        return nomem(g);
    }
    if (aname) {
        x.attr[0].type = PD_A_INT;
        x.attr[0].i = aval;
    }
    x.op = pd__op_lookup(op_type);
    x.opset = g->opset > 13 ? (int)g->opset : 13;
    memcpy(x.in, in, sizeof(int) * (size_t)nin);
    x.nin = nin;
    x.out[0] = out;
    x.nout = 1;
    if (++L->flow_nodes > PD__FLOW_MAX_NODES) {
        pd__node_free(&x);
        return pd__node_err(g, ctl, PD_ERR_UNSUPPORTED, "unrolling control flow makes more than %d nodes; refused",
                            PD__FLOW_MAX_NODES);
    }
    return push(L, o, &x);
}

/* ---- splicing one copy of a subgraph --------------------------------------- */

typedef struct scope {
    pd__loader *L;
    const pd__node *ctl; /* the control-flow node, for messages */
    const char *what;    /* "then_branch", "body", ... */
    const char *prefix;  /* "<node>/<iteration>/" */
    const smap *outer;   /* enclosing scope: name -> the node's input */
    smap local;          /* this copy: name -> renamed tensor */
    smap def;            /* every name the subgraph defines */
} scope;

static pd_status resolve(void *ctx, const char *name, bool is_output, int *t) {
    scope *s = (scope *)ctx;
    pd_graph *g = s->L->g;
    int dummy;
    if (is_output) {
        if (smap_get(&s->local, name, &dummy))
            return pd__node_err(g, s->ctl, PD_ERR_INVALID, "%s defines '%s' twice", s->what, name);
        char base[512];
        snprintf(base, sizeof base, "%s%s", s->prefix, name);
        PD_TRY(fresh(g, base, t));
        return smap_put(&s->local, name, *t) ? PD_OK : nomem(g);
    }
    if (smap_get(&s->local, name, t)) return PD_OK;
    if (smap_get(&s->def, name, &dummy))
        return pd__node_err(g, s->ctl, PD_ERR_INVALID,
                            "%s reads '%s' before computing it (its nodes are not in topological order)", s->what,
                            name);
    if (smap_get(s->outer, name, t)) return PD_OK;
    return pd__node_err(g, s->ctl, PD_ERR_INVALID, "%s reads '%s', which neither it nor an enclosing scope defines",
                        s->what, name);
}

/* The subgraph's values are dense tensors (sequences and optionals are not supported). */
static pd_status check_types(pd_graph *g, const pd__node *ctl, const char *what, const Onnx__ValueInfoProto *const *v,
                             size_t nv) {
    for (size_t i = 0; i < nv; i++) {
        const Onnx__TypeProto *tp = v[i]->type;
        if (tp && tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE &&
            tp->value_case != ONNX__TYPE_PROTO__VALUE__NOT_SET)
            return pd__node_err(g, ctl, PD_ERR_UNSUPPORTED,
                                "%s's value '%s' is a sequence, map, optional or sparse tensor; only dense tensors are "
                                "supported",
                                what, v[i]->name ? v[i]->name : "?");
    }
    return PD_OK;
}

/* The tensor an earlier copy decoded initializer tp into; -1 when none did.
 * Copies share it, so a Loop of 4096 iterations holds a body's weights once. */
static int shared_init(const pd__loader *L, const Onnx__TensorProto *tp) {
    for (int i = L->ninit - 1; i >= 0; i--)
        if (L->init_key[i] == tp) return L->init_tensor[i];
    return -1;
}

static pd_status keep_init(pd__loader *L, const Onnx__TensorProto *tp, int t) {
    if (L->ninit == L->initcap) {
        int cap = L->initcap ? L->initcap * 2 : 16;
        const Onnx__TensorProto **k = (const Onnx__TensorProto **)PD_REALLOC(L->init_key, sizeof *k * (size_t)cap);
        if (k) L->init_key = k;
        int *v = (int *)PD_REALLOC(L->init_tensor, sizeof *v * (size_t)cap);
        if (v) L->init_tensor = v;
        if (!k || !v) return nomem(L->g);
        L->initcap = cap;
    }
    L->init_key[L->ninit] = tp;
    L->init_tensor[L->ninit++] = t;
    return PD_OK;
}

/* Splices a copy of b into o: its inputs bound to bind[], outer names to
 * outer; res[k] gets the tensor of its output k. */
static pd_status splice(pd__loader *L, const pd__node *ctl, int depth, const char *what, const Onnx__GraphProto *b,
                        const smap *outer, const int *bind, const char *prefix, nodes *o, int *res) {
    pd_graph *g = L->g;
    scope s = {L, ctl, what, prefix, outer, {0}, {0}};
    pd_status st = PD_OK;
    if (b->n_sparse_initializer)
        return pd__node_err(g, ctl, PD_ERR_UNSUPPORTED, "%s has a sparse initializer; not supported", what);
    if (!defined_names(b, &s.def)) st = nomem(g);
    for (size_t i = 0; i < b->n_input && st == PD_OK; i++) {
        if (!b->input[i]->name || !*b->input[i]->name)
            st = pd__node_err(g, ctl, PD_ERR_PARSE, "%s's input %zu has no name", what, i);
        else if (!smap_put(&s.local, b->input[i]->name, bind[i]))
            st = nomem(g);
    }
    for (size_t i = 0; i < b->n_initializer && st == PD_OK; i++) {
        const Onnx__TensorProto *tp = b->initializer[i];
        if (!tp->name || !*tp->name) {
            st = pd__node_err(g, ctl, PD_ERR_PARSE, "%s's initializer %zu has no name", what, i);
            break;
        }
        int t = shared_init(L, tp);
        if (t >= 0) { /* decoded for an earlier copy: the same constant */
            st = smap_put(&s.local, tp->name, t) ? PD_OK : nomem(g);
            continue;
        }
        char msg[768];
        snprintf(msg, sizeof msg, "%s: node '%s' (%s): %s's initializer '%s'", g->path, ctl->name, ctl->op_type, what,
                 tp->name);
        pd_tensor v;
        st = pd__decode_tensor(tp, msg, L->base_dir, &v);
        if (st != PD_OK) break;
        st = resolve(&s, tp->name, true, &t);
        if (st == PD_OK) {
            pd__tensor *x = &g->tensors[t];
            x->kind = PD_T_CONST; /* a subgraph's initializer is not a parameter */
            x->dtype = v.dtype;
            x->data = v.data;
            v.data = NULL;
            st = pd__tensor_set_shape(g, x, v.ndim, v.shape);
        }
        PD_FREE(v.data);
        if (st == PD_OK) st = keep_init(L, tp, t);
    }
    for (size_t i = 0; i < b->n_node && st == PD_OK; i++) {
        pd__node x;
        memset(&x, 0, sizeof x);
        st = pd__build_node(L, i, b->node[i], prefix, resolve, &s, &x);
        if (st == PD_OK && x.op == PD__OP_FLOW) {
            if (depth + 1 > PD__FLOW_MAX_DEPTH)
                st = pd__node_err(g, ctl, PD_ERR_UNSUPPORTED, "subgraphs nest deeper than %d levels; refused",
                                  PD__FLOW_MAX_DEPTH);
            for (int a = 0; a < x.nattr; a++)
                if (x.attr[a].type == PD_A_GRAPH) x.attr[a].n = depth + 1;
        }
        if (st == PD_OK && ++L->flow_nodes > PD__FLOW_MAX_NODES)
            st = pd__node_err(g, ctl, PD_ERR_UNSUPPORTED, "unrolling control flow makes more than %d nodes; refused",
                              PD__FLOW_MAX_NODES);
        if (st == PD_OK)
            st = push(L, o, &x);
        else
            pd__node_free(&x);
    }
    for (size_t k = 0; k < b->n_output && st == PD_OK; k++) {
        const char *nm = b->output[k]->name;
        if (!nm || !*nm)
            st = pd__node_err(g, ctl, PD_ERR_PARSE, "%s's output %zu has no name", what, k);
        else
            st = resolve(&s, nm, false, &res[k]);
    }
    smap_free(&s.local);
    smap_free(&s.def);
    return st;
}

/* ---- the control-flow node ---------------------------------------------------- */

static pd__attr *graph_attr(const pd__loader *L, pd__node *n, const char *name, const Onnx__GraphProto **gp,
                            pd_status *st) {
    for (int a = 0; a < n->nattr; a++)
        if (n->attr[a].type == PD_A_GRAPH && !strcmp(n->attr[a].name, name) && (*gp = pd__flow_graph(L, &n->attr[a])))
            return &n->attr[a];
    *st = pd__node_err(L->g, n, PD_ERR_INVALID, "graph attribute '%s' is missing", name);
    return NULL;
}

/* The outer-scope names of n's subgraphs, mapped to its inputs before the
 * last `tail` ones; *first: the count of its own inputs, before them. */
static pd_status outer_map(pd__loader *L, const pd__node *n, int tail, smap *m, int *first) {
    const char **nm = NULL;
    int cnt = 0;
    PD_TRY(pd__flow_outer_refs(L, n, &nm, &cnt));
    pd_status st = PD_OK;
    *first = n->nin - tail - cnt;
    if (*first < 0) st = pd__node_err(L->g, n, PD_ERR_INTERNAL, "the node lost its outer-scope inputs");
    for (int k = 0; k < cnt && st == PD_OK; k++)
        if (!smap_put(m, nm[k], n->in[*first + k])) st = nomem(L->g);
    PD_FREE(nm);
    return st;
}

/* The one value of a tensor known at load, as a double; false when it is
 * computed at run time (or has more than one element: *many). */
static bool const_value(const pd_graph *g, int t, double *v, bool *many) {
    *many = false;
    if (t < 0) return false;
    const pd__tensor *x = &g->tensors[t];
    if (!x->data || !pd__foldable_input(x)) return false;
    if (x->numel != 1) {
        *many = true;
        return false;
    }
    switch (x->dtype) {
    case PD_BOOL:
    case PD_UINT8:
        *v = *(const uint8_t *)x->data;
        return true;
    case PD_INT8:
        *v = *(const int8_t *)x->data;
        return true;
    case PD_INT32:
        *v = *(const int32_t *)x->data;
        return true;
    case PD_INT64:
        *v = (double)*(const int64_t *)x->data;
        return true;
    case PD_FLOAT:
        *v = *(const float *)x->data;
        return true;
    case PD_DOUBLE:
        *v = *(const double *)x->data;
        return true;
    default:
        return false;
    }
}

static pd_status same_shape(pd_graph *g, const pd__node *n, int j, int a, int b) {
    const pd__tensor *x = &g->tensors[a], *y = &g->tensors[b];
    bool same = x->dtype == y->dtype && x->ndim == y->ndim;
    for (int d = 0; same && d < x->ndim; d++) same = x->shape[d] == y->shape[d];
    if (same) return PD_OK;
    char sa[128], sb[128];
    pd__format_shape(sa, sizeof sa, x->ndim, x->shape);
    pd__format_shape(sb, sizeof sb, y->ndim, y->shape);
    return pd__node_err(g, n, PD_ERR_UNSUPPORTED,
                        "the condition is known only at run time and the branches give output %d as %s %s and %s %s; "
                        "a runtime If needs both alike",
                        j, pd_dtype_name(x->dtype), sa, pd_dtype_name(y->dtype), sb);
}

/* If: the branch taken when the condition is known; else both, and on the
 * second visit (attribute i = 1) a Where per output. */
static pd_status expand_if(pd__loader *L, pd__node *n, nodes *o) {
    pd_graph *g = L->g;
    pd_status st = PD_OK;
    const Onnx__GraphProto *tb = NULL, *eb = NULL;
    pd__attr *ta = graph_attr(L, n, "then_branch", &tb, &st),
             *ea = ta ? graph_attr(L, n, "else_branch", &eb, &st) : NULL;
    if (!ea) return st;
    int nout = n->nout;
    if (ta->i == 1) { /* both spliced: [cond, then outputs, else outputs] */
        int c = n->in[0];
        if (g->tensors[c].ndim != 0) {
            int64_t none = 0;
            int shp = -1, cs = -1;
            PD_TRY(const_tensor(g, n, "scalar_shape", PD_INT64, 1, &none, NULL, &shp));
            char base[512];
            snprintf(base, sizeof base, "%s/cond_scalar", n->name);
            PD_TRY(fresh(g, base, &cs));
            int in[2] = {c, shp};
            PD_TRY(mk_node(L, o, n, "Reshape", "cond_scalar", in, 2, cs, NULL, 0));
            c = cs;
        }
        for (int j = 0; j < nout; j++) {
            if (n->out[j] < 0) continue;
            PD_TRY(same_shape(g, n, j, n->in[1 + j], n->in[1 + nout + j]));
            int in[3] = {c, n->in[1 + j], n->in[1 + nout + j]};
            char what[32];
            snprintf(what, sizeof what, "select_%d", j);
            PD_TRY(mk_node(L, o, n, "Where", what, in, 3, n->out[j], NULL, 0));
        }
        return PD_OK;
    }
    smap outer = {0};
    int E = 0;
    st = outer_map(L, n, 0, &outer, &E);
    if (st == PD_OK && (E != 1 || n->in[0] < 0))
        st = pd__node_err(g, n, PD_ERR_INVALID, "If takes one input, the condition; it has %d", E);
    if (st == PD_OK && (tb->n_input || eb->n_input))
        st = pd__node_err(g, n, PD_ERR_INVALID, "a branch of If declares inputs");
    if (st == PD_OK && ((int)tb->n_output != nout || (int)eb->n_output != nout))
        st = pd__node_err(g, n, PD_ERR_INVALID, "the node has %d outputs, then_branch %zu and else_branch %zu", nout,
                          tb->n_output, eb->n_output);
    if (st == PD_OK)
        st = check_types(g, n, "then_branch", (const Onnx__ValueInfoProto *const *)tb->output, tb->n_output);
    if (st == PD_OK)
        st = check_types(g, n, "else_branch", (const Onnx__ValueInfoProto *const *)eb->output, eb->n_output);
    double v = 0;
    bool many = false, known = st == PD_OK && const_value(g, n->in[0], &v, &many);
    if (st == PD_OK && (many || g->tensors[n->in[0]].numel != 1))
        st = pd__node_err(g, n, PD_ERR_INVALID, "the condition '%s' has %lld elements, not one",
                          g->tensors[n->in[0]].name, (long long)g->tensors[n->in[0]].numel);
    int *res = (int *)PD_MALLOC(sizeof(int) * (size_t)(2 * nout + 1));
    if (!res && st == PD_OK) st = nomem(g);
    char prefix[512];
    if (st == PD_OK && known) {
        bool t = v != 0;
        snprintf(prefix, sizeof prefix, "%s/%s/", n->name, t ? "then" : "else");
        st = splice(L, n, ta->n, t ? "then_branch" : "else_branch", t ? tb : eb, &outer, NULL, prefix, o, res);
        for (int j = 0; j < nout && st == PD_OK; j++)
            if (n->out[j] >= 0) {
                char what[32];
                snprintf(what, sizeof what, "out_%d", j);
                st = mk_node(L, o, n, "Identity", what, &res[j], 1, n->out[j], NULL, 0);
            }
    } else if (st == PD_OK) {
        snprintf(prefix, sizeof prefix, "%s/then/", n->name);
        st = splice(L, n, ta->n, "then_branch", tb, &outer, NULL, prefix, o, res);
        snprintf(prefix, sizeof prefix, "%s/else/", n->name);
        if (st == PD_OK) st = splice(L, n, ta->n, "else_branch", eb, &outer, NULL, prefix, o, res + nout);
        int *in = st == PD_OK ? (int *)PD_REALLOC(n->in, sizeof(int) * (size_t)(2 * nout + 1)) : NULL;
        if (st == PD_OK && !in) st = nomem(g);
        if (st == PD_OK) { /* back after the branches, to select */
            n->in = in;
            memcpy(n->in + 1, res, sizeof(int) * (size_t)(2 * nout));
            n->nin = 2 * nout + 1;
            ta->i = 1;
            st = push(L, o, n);
        }
    }
    PD_FREE(res);
    smap_free(&outer);
    return st;
}

/* Unsqueeze each piece at axis, Concat them along it (reversed: last first) into out. */
static pd_status stack(pd__loader *L, nodes *o, const pd__node *n, const int *pieces, int count, int stride,
                       int64_t axis, bool reversed, int out, const char *tag) {
    pd_graph *g = L->g;
    int ax = -1;
    PD_TRY(const_i64(g, n, "stack_axis", 1, axis, &ax));
    int *cat = (int *)PD_MALLOC(sizeof(int) * (size_t)count);
    if (!cat) return nomem(g);
    pd_status st = PD_OK;
    for (int t = 0; t < count && st == PD_OK; t++) {
        char what[64];
        snprintf(what, sizeof what, "%s/%d", tag, t);
        char base[512];
        snprintf(base, sizeof base, "%s/%s", n->name, what);
        st = fresh(g, base, &cat[reversed ? count - 1 - t : t]);
        int in[2] = {pieces[t * stride], ax};
        if (st == PD_OK) st = mk_node(L, o, n, "Unsqueeze", what, in, 2, cat[reversed ? count - 1 - t : t], NULL, 0);
    }
    if (st == PD_OK) st = mk_node(L, o, n, "Concat", tag, cat, count, out, "axis", axis);
    PD_FREE(cat);
    return st;
}

/* Loop: one iteration per visit, then itself again, until the trip count or
 * the condition ends it; then the final values and the stacked scan outputs. */
static pd_status expand_loop(pd__loader *L, pd__node *n, nodes *o) {
    pd_graph *g = L->g;
    pd_status st = PD_OK;
    const Onnx__GraphProto *b = NULL;
    pd__attr *ba = graph_attr(L, n, "body", &b, &st);
    if (!ba) return st;
    int iter = (int)ba->i, nb = (int)b->n_input;
    int N = nb - 2, K = (int)b->n_output - 1 - N;
    smap outer = {0};
    int E = 0;
    if (K < 0) K = 0; /* refused below */
    PD_TRY(outer_map(L, n, iter * K, &outer, &E));
    if (nb < 2 || E != nb || (int)b->n_output < 1 + N || n->nout != N + K) {
        smap_free(&outer);
        return pd__node_err(g, n, PD_ERR_INVALID,
                            "the body has %zu inputs and %zu outputs; the node, %d inputs and %d outputs (the body "
                            "needs 2 + N inputs and 1 + N + K outputs for N loop-carried values, K scan outputs)",
                            b->n_input, b->n_output, E, n->nout);
    }
    st = check_types(g, n, "body", (const Onnx__ValueInfoProto *const *)b->input, b->n_input);
    if (st == PD_OK) st = check_types(g, n, "body", (const Onnx__ValueInfoProto *const *)b->output, b->n_output);
    double m = 0, c = 1;
    bool many = false, has_m = n->in[0] >= 0, has_c = n->in[1] >= 0;
    if (st == PD_OK && has_m && !const_value(g, n->in[0], &m, &many))
        st = pd__node_err(g, n, PD_ERR_UNSUPPORTED,
                          "the trip count '%s' is %s; a Loop is unrolled at load and needs a constant one",
                          g->tensors[n->in[0]].name, many ? "not a scalar" : "computed from runtime data");
    if (st == PD_OK && has_c && !const_value(g, n->in[1], &c, &many))
        st = pd__node_err(g, n, PD_ERR_UNSUPPORTED,
                          "the condition '%s' %s; a Loop is unrolled at load and needs a constant one (a "
                          "data-dependent loop)",
                          g->tensors[n->in[1]].name,
                          many   ? "is not a scalar"
                          : iter ? "the body computes depends on runtime data"
                                 : "depends on runtime data");
    if (st == PD_OK && !has_m && !has_c)
        st = pd__node_err(g, n, PD_ERR_INVALID, "the Loop has neither a trip count nor a condition: it never ends");
    bool done = (has_m && iter >= m) || (has_c && c == 0);
    if (st == PD_OK && !done && iter >= PD__FLOW_MAX_ITERS)
        st = pd__node_err(g, n, PD_ERR_UNSUPPORTED, "the Loop runs past %d iterations; unrolling it is refused",
                          PD__FLOW_MAX_ITERS);
    const int *pieces = n->in + (n->nin - iter * K);
    for (int k = 0; k < N && st == PD_OK; k++)
        if (n->in[2 + k] < 0) st = pd__node_err(g, n, PD_ERR_INVALID, "loop-carried input %d is empty", k);
    if (st == PD_OK && done) {
        if (iter == 0 && K > 0)
            st = pd__node_err(g, n, PD_ERR_UNSUPPORTED,
                              "the Loop runs no iteration and has scan outputs, whose shape is then unknown");
        for (int k = 0; k < N && st == PD_OK; k++)
            if (n->out[k] >= 0) {
                char what[32];
                snprintf(what, sizeof what, "out_%d", k);
                st = mk_node(L, o, n, "Identity", what, &n->in[2 + k], 1, n->out[k], NULL, 0);
            }
        for (int j = 0; j < K && st == PD_OK; j++) {
            char tag[32];
            snprintf(tag, sizeof tag, "scan_%d", j);
            if (n->out[N + j] >= 0) st = stack(L, o, n, pieces + j, iter, K, 0, false, n->out[N + j], tag);
        }
        smap_free(&outer);
        return st;
    }
    int *bind = (int *)PD_MALLOC(sizeof(int) * (size_t)nb), *res = (int *)PD_MALLOC(sizeof(int) * (size_t)(1 + N + K));
    if (st == PD_OK && (!bind || !res)) st = nomem(g);
    if (st == PD_OK) {
        char what[64];
        snprintf(what, sizeof what, "iter_%d", iter);
        st = const_i64(g, n, what, 0, iter, &bind[0]);
    }
    if (st == PD_OK && !has_c) {
        uint8_t yes = 1;
        int64_t one = 1;
        st = const_tensor(g, n, "true", PD_BOOL, 0, &one, &yes, &bind[1]);
    } else if (st == PD_OK) {
        bind[1] = n->in[1];
    }
    if (st == PD_OK) {
        memcpy(bind + 2, n->in + 2, sizeof(int) * (size_t)N);
        char prefix[512];
        snprintf(prefix, sizeof prefix, "%s/%d/", n->name, iter);
        st = splice(L, n, ba->n, "body", b, &outer, bind, prefix, o, res);
    }
    int *in = st == PD_OK ? (int *)PD_REALLOC(n->in, sizeof(int) * (size_t)(n->nin + K + 1)) : NULL;
    if (st == PD_OK && !in) st = nomem(g);
    if (st == PD_OK) { /* [M, cond, v..., outer..., pieces...] for the next visit */
        n->in = in;
        if (has_c) n->in[1] = res[0];
        memcpy(n->in + 2, res + 1, sizeof(int) * (size_t)N);
        memcpy(n->in + n->nin, res + 1 + N, sizeof(int) * (size_t)K);
        n->nin += K;
        ba->i = iter + 1;
        st = push(L, o, n);
    }
    PD_FREE(bind);
    PD_FREE(res);
    smap_free(&outer);
    return st;
}

/* The ints attribute `name` with count entries, or def for each when absent. */
static pd_status scan_ints(pd_graph *g, const pd__node *n, const char *name, int count, int64_t def, int64_t *v) {
    const int64_t *a = NULL;
    int k = pd__attr_ints(n, name, &a);
    if (a && k != count)
        return pd__node_err(g, n, PD_ERR_INVALID, "attribute '%s' has %d values for %d scan values", name, k, count);
    for (int i = 0; i < count; i++) v[i] = a ? a[i] : def;
    return PD_OK;
}

/* A new tensor "<ctl>/<what>" and a Gather of src's index i along axis into it. */
static pd_status take(pd__loader *L, nodes *o, const pd__node *n, int src, int64_t i, int64_t axis, const char *what,
                      int *t) {
    pd_graph *g = L->g;
    int idx = -1;
    char base[512], iname[64];
    snprintf(iname, sizeof iname, "index_%lld", (long long)i);
    PD_TRY(const_i64(g, n, iname, 0, i, &idx));
    snprintf(base, sizeof base, "%s/%s", n->name, what);
    PD_TRY(fresh(g, base, t));
    int in[2] = {src, idx};
    return mk_node(L, o, n, "Gather", what, in, 2, *t, "axis", axis);
}

typedef struct scan_ctx {
    const Onnx__GraphProto *b;
    int depth, N, nsi, K;
    const smap *outer;
    const int64_t *iax, *idir, *oax, *odir;
    int64_t T;
    bool v8;  /* opset 8: a batch axis 0, each row scanned on its own */
    int s0;   /* opset 8: sequence_lens is input 0, the states follow */
} scan_ctx;

/* T steps of the body: states cur (updated), scan inputs src cut along
 * iax; pieces[t * K + j]: step t's scan output j. tag names the copies. */
static pd_status scan_steps(pd__loader *L, nodes *o, const pd__node *n, const scan_ctx *c, const int *src, int *cur,
                            int *pieces, const char *tag) {
    pd_graph *g = L->g;
    int *bind = (int *)PD_MALLOC(sizeof(int) * (size_t)(c->N + c->nsi + 1));
    int *res = (int *)PD_MALLOC(sizeof(int) * (size_t)(c->N + c->K + 1));
    pd_status st = bind && res ? PD_OK : nomem(g);
    for (int64_t t = 0; t < c->T && st == PD_OK; t++) {
        memcpy(bind, cur, sizeof(int) * (size_t)c->N);
        for (int j = 0; j < c->nsi && st == PD_OK; j++) {
            char what[64];
            snprintf(what, sizeof what, "%s%lld/scan_in_%d", tag, (long long)t, j);
            st = take(L, o, n, src[j], c->idir[j] ? c->T - 1 - t : t, c->iax[j], what, &bind[c->N + j]);
        }
        char prefix[512];
        snprintf(prefix, sizeof prefix, "%s/%s%lld/", n->name, tag, (long long)t);
        if (st == PD_OK) st = splice(L, n, c->depth, "body", c->b, c->outer, bind, prefix, o, res);
        if (st != PD_OK) break;
        memcpy(cur, res, sizeof(int) * (size_t)c->N);
        if (c->K) memcpy(pieces + t * c->K, res + c->N, sizeof(int) * (size_t)c->K);
    }
    PD_FREE(bind);
    PD_FREE(res);
    return st;
}

/* Scan: the length is the scan inputs' extent, known now; all iterations at
 * once. Opset 8's form has sequence_lens first (all must equal the length)
 * and a batch axis 0 everywhere: one unrolled scan per batch row, restacked. */
/* The scan inputs' length T (one for all) and, opset 8, the batch B every
 * input shares; iax normalised (opset 8: along the row). sin: the scan
 * inputs, state: the states. */
static pd_status scan_lengths(pd_graph *g, const pd__node *n, bool v8, const int *sin, const int *state, int N,
                              int nsi, int64_t *iax, const int64_t *idir, int64_t *T, int64_t *B) {
    for (int j = 0; j < nsi + N; j++) { /* scan inputs, then (opset 8) the states' batch */
        bool scan = j < nsi;
        int t = scan ? sin[j] : state[j - nsi];
        if (t < 0)
            return pd__node_err(g, n, PD_ERR_INVALID, "%s input %d is empty", scan ? "scan" : "state",
                                scan ? j : j - nsi);
        const pd__tensor *x = &g->tensors[t];
        if (v8 && (x->ndim < 1 || (*B >= 0 && x->shape[0] != *B)))
            return pd__node_err(g, n, PD_ERR_INVALID, "input '%s' does not have the batch axis 0 of %lld rows",
                                x->name, (long long)*B);
        if (v8) *B = x->shape[0];
        if (!scan) continue;
        int64_t a = iax[j] < 0 ? iax[j] + x->ndim : iax[j];
        if (a < 0 || a >= x->ndim)
            return pd__node_err(g, n, PD_ERR_INVALID, "scan input '%s' of rank %d has no axis %lld", x->name, x->ndim,
                                (long long)iax[j]);
        iax[j] = v8 ? a - 1 : a; /* opset 8: along the row, once the batch axis is taken */
        if (*T >= 0 && x->shape[a] != *T)
            return pd__node_err(g, n, PD_ERR_INVALID, "the scan inputs' lengths differ (%lld and %lld)", (long long)*T,
                                (long long)x->shape[a]);
        *T = x->shape[a];
        if (idir[j] != 0 && idir[j] != 1)
            return pd__node_err(g, n, PD_ERR_INVALID, "scan_input_directions[%d] is %lld, not 0 or 1", j,
                                (long long)idir[j]);
    }
    return PD_OK;
}

/* What unrolling refuses: sequence_lens shorter than the scan, an empty
 * batch, too many iterations, scan outputs of no iteration. */
static pd_status scan_limits(pd_graph *g, const pd__node *n, const scan_ctx *c, int64_t B) {
    for (int k = 0; k < c->K; k++)
        if (c->odir[k] != 0 && c->odir[k] != 1)
            return pd__node_err(g, n, PD_ERR_INVALID, "scan_output_directions[%d] is %lld, not 0 or 1", k,
                                (long long)c->odir[k]);
    int64_t T = c->T;
    if (c->v8 && n->in[0] >= 0) { /* sequence_lens: only the full length is supported */
        const pd__tensor *sl = &g->tensors[n->in[0]];
        bool full = sl->data && pd__foldable_input(sl) && sl->dtype == PD_INT32 && sl->numel == B;
        for (int64_t r = 0; full && r < B; r++) full = ((const int32_t *)sl->data)[r] == T;
        if (!full)
            return pd__node_err(g, n, PD_ERR_UNSUPPORTED,
                                "sequence_lens '%s' is not a constant equal to the scan length %lld for every row; "
                                "shorter rows are not supported",
                                sl->name, (long long)T);
    }
    if (c->v8 && B < 1)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "the batch has no rows; an empty Scan is not supported");
    int64_t steps = T * (c->v8 ? B : 1);
    if (T > PD__FLOW_MAX_ITERS || steps > PD__FLOW_MAX_ITERS)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "the Scan runs %lld iterations, past %d; unrolling it is refused",
                            (long long)steps, PD__FLOW_MAX_ITERS);
    if (T == 0 && c->K > 0)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED,
                            "the Scan runs no iteration and has scan outputs, whose shape is then unknown");
    return PD_OK;
}

/* Row r (opset 8: batch row r; later opsets: the one row): its states and
 * scan inputs, the T steps, its scan outputs stacked over the steps; the
 * row's final states and scan outputs go to rows[r * (N + K) ...]. */
static pd_status scan_row(pd__loader *L, nodes *o, pd__node *n, const scan_ctx *c, int64_t r, int *cur,
                          int *pieces, int *rows) {
    pd_graph *g = L->g;
    int N = c->N, K = c->K, *src = cur + N;
    const int *sin = n->in + c->s0 + N;
    char tag[64] = "";
    if (c->v8) snprintf(tag, sizeof tag, "row%lld/", (long long)r);
    for (int k = 0; k < N + c->nsi; k++) { /* this row's states and scan inputs */
        int from = k < N ? n->in[c->s0 + k] : sin[k - N];
        char what[96];
        snprintf(what, sizeof what, "%s%s_%d", tag, k < N ? "state" : "scan_in", k < N ? k : k - N);
        if (c->v8) PD_TRY(take(L, o, n, from, r, 0, what, &cur[k]));
        else cur[k] = from;
    }
    PD_TRY(scan_steps(L, o, n, c, src, cur, pieces, tag));
    for (int k = 0; k < N; k++) rows[r * (N + K) + k] = cur[k];
    for (int j = 0; j < K; j++) { /* the row's scan output j, stacked over the steps */
        char what[96], base[512];
        snprintf(what, sizeof what, "%sscan_%d", tag, j);
        snprintf(base, sizeof base, "%s/%s", n->name, what);
        int *dst = &rows[r * (N + K) + N + j];
        if (!c->v8) *dst = n->out[N + j];
        else PD_TRY(fresh(g, base, dst));
        if (*dst >= 0)
            PD_TRY(stack(L, o, n, pieces + j, (int)c->T, K, c->oax[j] - (c->v8 ? 1 : 0), c->odir[j] != 0, *dst, what));
    }
    return PD_OK;
}

static pd_status expand_scan(pd__loader *L, pd__node *n, nodes *o) {
    pd_graph *g = L->g;
    pd_status st = PD_OK;
    bool v8 = n->opset < 9;
    const Onnx__GraphProto *b = NULL;
    pd__attr *ba = graph_attr(L, n, "body", &b, &st);
    if (!ba) return st;
    int nsi = (int)pd__attr_i(n, "num_scan_inputs", -1), E = (int)b->n_input, s0 = v8 ? 1 : 0;
    int N = E - nsi, K = (int)b->n_output - N;
    smap outer = {0};
    int given = 0;
    PD_TRY(outer_map(L, n, 0, &outer, &given));
    if (nsi < 1 || N < 0 || K < 0 || given != E + s0 || n->nout != N + K) {
        smap_free(&outer);
        return pd__node_err(g, n, PD_ERR_INVALID,
                            "num_scan_inputs is %d, the body has %zu inputs and %zu outputs, the node %d inputs and %d "
                            "outputs; they do not agree",
                            nsi, b->n_input, b->n_output, given, n->nout);
    }
    int64_t *iax = (int64_t *)PD_MALLOC(sizeof(int64_t) * (size_t)(2 * nsi + 2 * K + 1));
    int *cur = (int *)PD_MALLOC(sizeof(int) * (size_t)(N + nsi + 1));
    int *pieces = NULL, *rows = NULL;
    if (!iax || !cur) st = nomem(g);
    int64_t *idir = iax + nsi, *oax = idir + nsi, *odir = oax + K;
    if (st == PD_OK) st = check_types(g, n, "body", (const Onnx__ValueInfoProto *const *)b->input, b->n_input);
    if (st == PD_OK) st = check_types(g, n, "body", (const Onnx__ValueInfoProto *const *)b->output, b->n_output);
    if (st == PD_OK) st = scan_ints(g, n, "scan_input_axes", nsi, v8 ? 1 : 0, iax);
    if (st == PD_OK) st = scan_ints(g, n, v8 ? "directions" : "scan_input_directions", nsi, 0, idir);
    if (st == PD_OK) st = scan_ints(g, n, "scan_output_axes", K, v8 ? 1 : 0, oax);
    if (st == PD_OK) st = scan_ints(g, n, "scan_output_directions", K, 0, odir);
    int64_t T = -1, B = -1;
    if (st == PD_OK) st = scan_lengths(g, n, v8, n->in + s0 + N, n->in + s0, N, nsi, iax, idir, &T, &B);
    scan_ctx c = {.b = b, .depth = ba->n, .N = N, .nsi = nsi, .K = K, .outer = &outer, .iax = iax, .idir = idir,
                  .oax = oax, .odir = odir, .T = T, .v8 = v8, .s0 = s0};
    if (st == PD_OK) st = scan_limits(g, n, &c, B);
    int64_t R = v8 ? B : 1;
    if (st == PD_OK && !(pieces = (int *)PD_MALLOC(sizeof(int) * (size_t)(T * K + 1)))) st = nomem(g);
    if (st == PD_OK && !(rows = (int *)PD_MALLOC(sizeof(int) * (size_t)(R * (N + K) + 1)))) st = nomem(g);
    for (int64_t r = 0; r < R && st == PD_OK; r++) st = scan_row(L, o, n, &c, r, cur, pieces, rows);
    for (int k = 0; k < N + K && st == PD_OK; k++) { /* opset 8: the rows stacked again along the batch axis */
        if (n->out[k] < 0 || (!v8 && k >= N)) continue;
        char what[32];
        snprintf(what, sizeof what, "out_%d", k);
        if (v8)
            st = stack(L, o, n, rows + k, (int)R, N + K, 0, false, n->out[k], what);
        else
            st = mk_node(L, o, n, "Identity", what, &rows[k], 1, n->out[k], NULL, 0);
    }
    PD_FREE(iax);
    PD_FREE(cur);
    PD_FREE(pieces);
    PD_FREE(rows);
    smap_free(&outer);
    return st;
}

pd_status pd__flow_expand(void *ctx, pd_graph *g, pd__node *n, pd__node **made, int *nmade) {
    pd__loader *L = (pd__loader *)ctx;
    nodes o = {0};
    pd_status st;
    if (!strcmp(n->op_type, "If"))
        st = expand_if(L, n, &o);
    else if (!strcmp(n->op_type, "Loop"))
        st = expand_loop(L, n, &o);
    else if (!strcmp(n->op_type, "Scan"))
        st = expand_scan(L, n, &o);
    else
        st = pd__node_err(g, n, PD_ERR_INTERNAL, "not a control-flow op");
    pd__node_free(n); /* zeroed when it went back in as its own continuation */
    if (st != PD_OK) {
        for (int i = 0; i < o.n; i++) pd__node_free(&o.v[i]);
        PD_FREE(o.v);
        return st;
    }
    *made = o.v;
    *nmade = o.n;
    return PD_OK;
}
