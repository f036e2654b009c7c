/* test_loader.c - the ONNX reader (onnx/load.c, onnx/tensor_pb.c) on small
 * models built here with protobuf-c and written to a temporary folder:
 * shapes, dtypes, batch binding, external data (and its escapes), corrupt
 * and hostile files. Prints OK / NOT OK per check; exits 1 on any failure. */
#include <math.h>
#include <errno.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/pd_internal.h"
#include "../core/plan.h"
#include "onnx.pb-c.h"
#include "../onnx/onnx_io.h"
#include "check.h"

/* ---- an arena for the protobuf structs built here ------------------------------ */

static void **arena;
static size_t arena_n, arena_cap;

static void *al(size_t n) {
    if (arena_n == arena_cap) {
        arena_cap = arena_cap ? arena_cap * 2 : 256;
        arena = realloc(arena, arena_cap * sizeof *arena);
        if (!arena) abort();
    }
    void *p = calloc(1, n ? n : 1);
    if (!p) abort();
    return arena[arena_n++] = p;
}

static void arena_free(void) {
    for (size_t i = 0; i < arena_n; i++) free(arena[i]);
    free(arena);
    arena = NULL;
    arena_n = arena_cap = 0;
}

static char *S(const char *s) {
    char *d = al(strlen(s) + 1);
    strcpy(d, s);
    return d;
}

static char *fmt(const char *f, ...) {
    char buf[4096];
    va_list ap;
    va_start(ap, f);
    vsnprintf(buf, sizeof buf, f, ap);
    va_end(ap);
    return S(buf);
}

/* "a,,b" -> {"a", "", "b"} */
static char **split(const char *list, size_t *n) {
    *n = 0;
    if (!list) return NULL;
    char **v = al(sizeof(char *) * (strlen(list) + 1));
    const char *p = list;
    for (;;) {
        size_t k = strcspn(p, ",");
        char *s = al(k + 1);
        memcpy(s, p, k);
        v[(*n)++] = s;
        if (!p[k]) break;
        p += k + 1;
    }
    return v;
}

static int64_t *dims_of(const char *dims, size_t *n) {
    char **tok = split(dims, n);
    if (*n == 1 && !tok[0][0]) *n = 0; /* "" is a scalar */
    int64_t *d = al(sizeof(int64_t) * (*n + 1));
    for (size_t i = 0; i < *n; i++) d[i] = strtoll(tok[i], NULL, 10);
    return d;
}

/* ---- builders ------------------------------------------------------------------ */

static Onnx__TensorProto *mk_tensor(const char *name, int dt, const char *dims) {
    static const Onnx__TensorProto init = ONNX__TENSOR_PROTO__INIT;
    Onnx__TensorProto *t = al(sizeof *t);
    *t = init;
    t->name = S(name);
    t->has_data_type = 1;
    t->data_type = dt;
    t->dims = dims_of(dims, &t->n_dims);
    return t;
}

static Onnx__TensorProto *mk_raw(const char *name, int dt, const char *dims, const void *data,
                                 size_t nbytes) {
    Onnx__TensorProto *t = mk_tensor(name, dt, dims);
    t->has_raw_data = 1;
    t->raw_data.len = nbytes;
    t->raw_data.data = al(nbytes);
    memcpy(t->raw_data.data, data, nbytes);
    return t;
}

static Onnx__TensorProto *mk_f32(const char *name, const char *dims, const float *v, size_t n) {
    Onnx__TensorProto *t = mk_tensor(name, PD_FLOAT, dims);
    t->n_float_data = n;
    t->float_data = al(sizeof(float) * n);
    memcpy(t->float_data, v, sizeof(float) * n);
    return t;
}

static Onnx__TensorProto *mk_i32(const char *name, int dt, const char *dims, const int32_t *v, size_t n) {
    Onnx__TensorProto *t = mk_tensor(name, dt, dims);
    t->n_int32_data = n;
    t->int32_data = al(sizeof(int32_t) * n);
    memcpy(t->int32_data, v, sizeof(int32_t) * n);
    return t;
}

static Onnx__TensorProto *mk_external(const char *name, const char *dims, const char *loc, const char *off,
                                      const char *len) {
    static const Onnx__StringStringEntryProto kvinit = ONNX__STRING_STRING_ENTRY_PROTO__INIT;
    Onnx__TensorProto *t = mk_tensor(name, PD_FLOAT, dims);
    t->has_data_location = 1;
    t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    t->external_data = al(sizeof(void *) * 3);
    const char *keys[3] = {"location", "offset", "length"}, *vals[3] = {loc, off, len};
    for (int i = 0; i < 3; i++) {
        if (!vals[i]) continue;
        Onnx__StringStringEntryProto *kv = al(sizeof *kv);
        *kv = kvinit;
        kv->key = S(keys[i]);
        kv->value = S(vals[i]);
        t->external_data[t->n_external_data++] = kv;
    }
    return t;
}

/* dims: "N,4" (numbers: dim_value, "?": unset, else dim_param); NULL: no shape. */
static Onnx__ValueInfoProto *mk_vi(const char *name, int elem, const char *dims) {
    static const Onnx__ValueInfoProto viinit = ONNX__VALUE_INFO_PROTO__INIT;
    static const Onnx__TypeProto tpinit = ONNX__TYPE_PROTO__INIT;
    static const Onnx__TypeProto__Tensor ttinit = ONNX__TYPE_PROTO__TENSOR__INIT;
    static const Onnx__TensorShapeProto spinit = ONNX__TENSOR_SHAPE_PROTO__INIT;
    static const Onnx__TensorShapeProto__Dimension dinit = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT;
    Onnx__ValueInfoProto *vi = al(sizeof *vi);
    *vi = viinit;
    vi->name = S(name);
    Onnx__TypeProto *tp = al(sizeof *tp);
    *tp = tpinit;
    Onnx__TypeProto__Tensor *tt = al(sizeof *tt);
    *tt = ttinit;
    tt->has_elem_type = 1;
    tt->elem_type = elem;
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    vi->type = tp;
    if (dims) {
        Onnx__TensorShapeProto *sp = al(sizeof *sp);
        *sp = spinit;
        size_t n;
        char **tok = split(dims, &n);
        if (n == 1 && !tok[0][0]) n = 0;
        sp->dim = al(sizeof(void *) * (n + 1));
        for (size_t i = 0; i < n; i++) {
            Onnx__TensorShapeProto__Dimension *d = al(sizeof *d);
            *d = dinit;
            char *end;
            long long v = strtoll(tok[i], &end, 10);
            if (*end == '\0' && end != tok[i]) {
                d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
                d->dim_value = v;
            } else if (strcmp(tok[i], "?") != 0) {
                d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
                d->dim_param = tok[i];
            }
            sp->dim[i] = d;
        }
        sp->n_dim = n;
        tt->shape = sp;
    }
    return vi;
}

static Onnx__NodeProto *mk_node(const char *op, const char *name, const char *ins, const char *outs) {
    static const Onnx__NodeProto init = ONNX__NODE_PROTO__INIT;
    Onnx__NodeProto *n = al(sizeof *n);
    *n = init;
    n->op_type = S(op);
    if (name) n->name = S(name);
    n->input = split(ins, &n->n_input);
    n->output = split(outs, &n->n_output);
    n->attribute = al(sizeof(void *) * 16);
    return n;
}

static Onnx__AttributeProto *mk_attr(Onnx__NodeProto *n, const char *name, int type) {
    static const Onnx__AttributeProto init = ONNX__ATTRIBUTE_PROTO__INIT;
    Onnx__AttributeProto *a = al(sizeof *a);
    *a = init;
    a->name = S(name);
    a->has_type = 1;
    a->type = (Onnx__AttributeProto__AttributeType)type;
    n->attribute[n->n_attribute++] = a;
    return a;
}

typedef struct mb {
    Onnx__ModelProto m;
    Onnx__GraphProto g;
    Onnx__OperatorSetIdProto ops[4], *opp[4];
    Onnx__NodeProto *nodes[32];
    Onnx__TensorProto *inits[32];
    Onnx__ValueInfoProto *ins[16], *outs[32];
} mb;

static mb *mb_new(int64_t opset) {
    static const Onnx__ModelProto minit = ONNX__MODEL_PROTO__INIT;
    static const Onnx__GraphProto ginit = ONNX__GRAPH_PROTO__INIT;
    static const Onnx__OperatorSetIdProto oinit = ONNX__OPERATOR_SET_ID_PROTO__INIT;
    mb *b = al(sizeof *b);
    b->m = minit;
    b->g = ginit;
    b->m.has_ir_version = 1;
    b->m.ir_version = 8;
    b->m.graph = &b->g;
    b->g.name = S("test");
    b->g.node = b->nodes;
    b->g.initializer = b->inits;
    b->g.input = b->ins;
    b->g.output = b->outs;
    b->m.opset_import = b->opp;
    for (int i = 0; i < 4; i++) {
        b->ops[i] = oinit;
        b->opp[i] = &b->ops[i];
    }
    b->ops[0].domain = S("");
    b->ops[0].has_version = 1;
    b->ops[0].version = opset;
    b->m.n_opset_import = 1;
    return b;
}

static void mb_domain(mb *b, const char *domain, int64_t version) {
    Onnx__OperatorSetIdProto *o = &b->ops[b->m.n_opset_import++];
    o->domain = S(domain);
    o->has_version = 1;
    o->version = version;
}

static void add_node(mb *b, Onnx__NodeProto *n) { b->nodes[b->g.n_node++] = n; }
static void add_init(mb *b, Onnx__TensorProto *t) { b->inits[b->g.n_initializer++] = t; }
static void add_in(mb *b, Onnx__ValueInfoProto *v) { b->ins[b->g.n_input++] = v; }
static void add_out(mb *b, const char *name) { b->outs[b->g.n_output++] = mk_vi(name, PD_FLOAT, NULL); }

static uint8_t *mb_pack(const mb *b, size_t *len) {
    *len = onnx__model_proto__get_packed_size(&b->m);
    uint8_t *buf = al(*len);
    onnx__model_proto__pack(&b->m, buf);
    return buf;
}

/* ---- files ----------------------------------------------------------------------- */

static char tmp_root[64];

static bool write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    bool ok = fwrite(data, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

static const char *save(const mb *b, const char *rel) {
    size_t len;
    uint8_t *buf = mb_pack(b, &len);
    char *path = fmt("%s/%s", tmp_root, rel);
    if (!write_file(path, buf, len)) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
    return path;
}

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

/* ---- loading helpers --------------------------------------------------------------- */

static pd_graph *const SENTINEL = (pd_graph *)&tmp_root;

/* Loads a file expecting failure with status `want` and every needle in the message. */
static void expect_fail(const char *label, const char *path, const pd_load_options *o, pd_status want,
                        const char *n1, const char *n2) {
    pd_graph *g = SENTINEL;
    pd_status s = pd_graph_load_file(path, o, &g);
    const char *msg = pd_last_error();
    bool ok = s == want && g == SENTINEL && (!n1 || strstr(msg, n1)) && (!n2 || strstr(msg, n2)) &&
              !strchr(msg, '\n');
    CHECK(ok, "%s -> %s: %s", label, pd_status_name(s), msg);
    if (s == PD_OK && g != SENTINEL) pd_graph_destroy(g);
}

static pd_graph *expect_load(const char *label, const char *path, const pd_load_options *o) {
    pd_graph *g = NULL;
    pd_status s = pd_graph_load_file(path, o, &g);
    CHECK(s == PD_OK && g, "%s loads%s%s", label, s ? ": " : "", s ? pd_last_error() : "");
    return s == PD_OK ? g : NULL;
}

static const pd__tensor *T(const pd_graph *g, const char *name) {
    int i = pd__graph_find(g, name);
    return i >= 0 ? &g->tensors[i] : NULL;
}

static bool shape_is(int ndim, const int64_t *shape, const char *want) {
    size_t n;
    int64_t *d = dims_of(want, &n);
    if ((size_t)ndim != n) return false;
    for (size_t i = 0; i < n; i++)
        if (shape[i] != d[i]) return false;
    return true;
}

/* ---- the tests ---------------------------------------------------------------------- */

static const float W12[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
static const float B3[3] = {0.5f, -1, 2};

/* y = x @ W + B with x (N, 4) */
static mb *tiny(void) {
    mb *b = mb_new(13);
    add_in(b, mk_vi("x", PD_FLOAT, "N,4"));
    add_init(b, mk_f32("W", "4,3", W12, 12));
    add_init(b, mk_raw("B", PD_FLOAT, "3", B3, sizeof B3));
    add_node(b, mk_node("MatMul", "mm", "x,W", "h"));
    add_node(b, mk_node("Add", NULL, "h,B", "y"));
    add_out(b, "y");
    return b;
}

static void test_tiny(void) {
    const char *path = save(tiny(), "tiny.onnx");
    pd_load_options o = PD_LOAD_OPTIONS_INIT;
    o.batch = 2;
    pd_graph *g = expect_load("tiny model, batch 2", path, &o);
    if (g) {
        pd_value_info vi;
        CHECK(pd_graph_num_inputs(g) == 1 && pd_graph_input(g, 0, &vi) == PD_OK &&
                  strcmp(vi.name, "x") == 0 && vi.dtype == PD_FLOAT && shape_is(vi.ndim, vi.shape, "2,4"),
              "tiny: one runtime input x (2,4)");
        CHECK(pd_graph_num_outputs(g) == 1 && pd_graph_output(g, 0, &vi) == PD_OK &&
                  shape_is(vi.ndim, vi.shape, "2,3"),
              "tiny: output y (2,3)");
        CHECK(pd_graph_value(g, "h", &vi) == PD_OK && shape_is(vi.ndim, vi.shape, "2,3"), "tiny: h (2,3)");
        CHECK(pd_graph_num_nodes(g) == 2, "tiny: two nodes");
        CHECK(g->opset == 13 && g->nnodes == 2 && g->nodes[0].opset == 13,
              "tiny: opset 13 on graph and nodes");
        CHECK(g->nnodes == 2 && strcmp(g->nodes[1].name, "Add_1") == 0 && g->nodes[1].op == PD_OP_ADD &&
                  g->nodes[0].op == PD_OP_MATMUL,
              "tiny: the unnamed node is called Add_1, ops looked up");
        CHECK(pd_graph_param_bytes(g) == 60, "tiny: 60 parameter bytes (got %lld)",
              (long long)pd_graph_param_bytes(g));
        const pd__tensor *w = T(g, "W"), *bb = T(g, "B");
        CHECK(w && w->kind == PD_T_INIT && w->data && memcmp(w->data, W12, sizeof W12) == 0 &&
                  shape_is(w->ndim, w->shape, "4,3"),
              "tiny: W from float_data");
        CHECK(bb && bb->kind == PD_T_INIT && bb->data && memcmp(bb->data, B3, sizeof B3) == 0,
              "tiny: B from raw_data");
        CHECK(strcmp(g->path, path) == 0 && strcmp(g->name, "test") == 0, "tiny: path and graph name kept");
        pd_graph_destroy(g);
    }
    /* NULL options: defaults, so the symbolic N is an error */
    expect_fail("tiny model without batch", path, NULL, PD_ERR_SHAPE,
                "input 'x' has symbolic dim 'N' at axis 0", "tiny.onnx");

    pd_input_shape is = {"x", 2, {5, 4}, PD_UNDEFINED};
    pd_load_options o2 = PD_LOAD_OPTIONS_INIT;
    o2.n_input_shapes = 1;
    o2.input_shapes = &is;
    g = expect_load("tiny model, shape (5,4) given", path, &o2);
    if (g) {
        pd_value_info vi;
        CHECK(pd_graph_value(g, "y", &vi) == PD_OK && shape_is(vi.ndim, vi.shape, "5,3"),
              "given shape: y (5,3)");
        pd_graph_destroy(g);
    }
    pd_input_shape bad = {"x", 3, {5, 4, 1}, PD_UNDEFINED};
    o2.input_shapes = &bad;
    expect_fail("given shape of the wrong rank", path, &o2, PD_ERR_SHAPE, "'x'", "rank 3");
    pd_input_shape typo = {"xx", 2, {5, 4}, PD_UNDEFINED};
    o2.input_shapes = &typo;
    o2.batch = 1;
    expect_fail("given shape for no input", path, &o2, PD_ERR_INVALID, "'xx'", NULL);

    /* an older caller that knows only size and batch */
    struct {
        size_t size;
        int64_t batch;
    } old = {offsetof(pd_load_options, batch) + sizeof(int64_t), 3};
    g = NULL;
    pd_status s = pd_graph_load_file(path, (const pd_load_options *)(const void *)&old, &g);
    pd_value_info vi;
    CHECK(s == PD_OK && pd_graph_input(g, 0, &vi) == PD_OK && vi.shape[0] == 3,
          "options with a short size: %s", s ? pd_last_error() : "batch 3 seen");
    pd_graph_destroy(g);
}

static void test_batch(void) {
    mb *b = mb_new(13);
    add_in(b, mk_vi("x", PD_FLOAT, "batch,3"));
    add_in(b, mk_vi("m", PD_INT64, "?,2"));
    add_in(b, mk_vi("s", PD_FLOAT, "2,S"));
    add_out(b, "x");
    add_out(b, "m");
    add_out(b, "s");
    const char *path = save(b, "batch.onnx");
    pd_load_options o = PD_LOAD_OPTIONS_INIT;
    o.batch = 7;
    expect_fail("symbolic dim at axis 1 with batch", path, &o, PD_ERR_SHAPE,
                "input 's' has symbolic dim 'S' at axis 1", "give opt->batch or the input's shape");
    pd_input_shape is = {"s", 2, {2, 9}, PD_UNDEFINED};
    o.n_input_shapes = 1;
    o.input_shapes = &is;
    pd_graph *g = expect_load("batch 7 + shape for s", path, &o);
    if (g) {
        pd_value_info x, m, s;
        CHECK(pd_graph_num_inputs(g) == 3 && pd_graph_value(g, "x", &x) == PD_OK &&
                  pd_graph_value(g, "m", &m) == PD_OK && pd_graph_value(g, "s", &s) == PD_OK &&
                  shape_is(x.ndim, x.shape, "7,3") && shape_is(m.ndim, m.shape, "7,2") &&
                  m.dtype == PD_INT64 && shape_is(s.ndim, s.shape, "2,9"),
              "batch binds the symbolic and the unset first dim; the given shape wins");
        pd_graph_destroy(g);
    }
    o.n_input_shapes = 0;
    o.batch = -1;
    expect_fail("negative batch", path, &o, PD_ERR_INVALID, "batch", NULL);

    mb *c = mb_new(13);
    add_in(c, mk_vi("x", PD_FLOAT, NULL));
    add_out(c, "x");
    path = save(c, "noshape.onnx");
    o.batch = 4;
    expect_fail("input without a shape", path, &o, PD_ERR_SHAPE, "input 'x'", NULL);
    pd_input_shape xs = {"x", 1, {6}, PD_UNDEFINED};
    o.n_input_shapes = 1;
    o.input_shapes = &xs;
    g = expect_load("input without a shape, shape given", path, &o);
    pd_graph_destroy(g);
}

static void test_old_style(void) {
    mb *b = tiny();
    add_in(b, mk_vi("W", PD_FLOAT, "4,3"));
    add_in(b, mk_vi("B", PD_FLOAT, "3"));
    const char *path = save(b, "oldstyle.onnx");
    pd_load_options o = PD_LOAD_OPTIONS_INIT;
    o.batch = 1;
    pd_graph *g = expect_load("old-style model (initializers listed as inputs)", path, &o);
    if (g) {
        pd_value_info vi;
        CHECK(pd_graph_num_inputs(g) == 1 && pd_graph_input(g, 0, &vi) == PD_OK && strcmp(vi.name, "x") == 0,
              "old style: W and B are not runtime inputs");
        CHECK(T(g, "W") && T(g, "W")->kind == PD_T_INIT, "old style: W is an initializer");
        pd_graph_destroy(g);
    }
}

static void test_bad_files(void) {
    size_t len;
    uint8_t *buf = mb_pack(tiny(), &len);
    const char *path = fmt("%s/truncated.onnx", tmp_root);
    write_file(path, buf, len / 2);
    expect_fail("truncated file", path, NULL, PD_ERR_PARSE,
                "truncated.onnx: not a valid ONNX model (protobuf parse failed)", NULL);
    int cut = 0;
    for (size_t n = 1; n < len; n++) { /* every prefix: an error or a graph, never a crash */
        pd_graph *g = NULL;
        if (pd_graph_load_memory(buf, n, "prefix", NULL, NULL, &g) != PD_OK) cut++;
        pd_graph_destroy(g);
    }
    CHECK(cut == (int)len - 1, "every strict prefix of a model is refused (%d of %zu)", cut, len - 1);

    pd_graph *g = SENTINEL;
    pd_status s = pd_graph_load_memory(buf, len / 2, "mem.onnx", NULL, NULL, &g);
    CHECK(s == PD_ERR_PARSE && g == SENTINEL && strncmp(pd_last_error(), "mem.onnx: ", 10) == 0,
          "truncated buffer in memory names the buffer: %s", pd_last_error());

    path = fmt("%s/empty.onnx", tmp_root);
    write_file(path, "", 0);
    expect_fail("empty file", path, NULL, PD_ERR_PARSE, "empty.onnx", "not a valid ONNX model");

    path = fmt("%s/does-not-exist.onnx", tmp_root);
    expect_fail("missing file", path, NULL, PD_ERR_IO, "does-not-exist.onnx", strerror(ENOENT));
    expect_fail("a folder", tmp_root, NULL, PD_ERR_IO, tmp_root, NULL);

    /* messages nested 600 deep (200 If-like subgraph levels): refused, no stack overflow */
    size_t cap = 1 << 16, n = 0;
    uint8_t *deep = al(cap), *tmp = al(cap);
    for (int level = 0; level < 200; level++) {
        /* graph{node{attribute{g{...}}}}: fields graph.node=1, node.attribute=5, attr.g=6 */
        static const uint8_t fields[3] = {(6 << 3) | 2, (5 << 3) | 2, (1 << 3) | 2};
        for (int f = 0; f < 3; f++) {
            size_t k = 0;
            tmp[k++] = fields[f];
            size_t v = n;
            do {
                tmp[k++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
                v >>= 7;
            } while (v);
            memmove(deep + k, deep, n);
            memcpy(deep, tmp, k);
            n += k;
        }
    }
    memmove(deep + 3, deep, n); /* model.graph = 7 */
    deep[0] = (7 << 3) | 2;
    deep[1] = (uint8_t)((n & 0x7f) | 0x80);
    deep[2] = (uint8_t)(n >> 7);
    n += 3;
    g = SENTINEL;
    s = pd_graph_load_memory(deep, n, "deep.onnx", NULL, NULL, &g);
    CHECK(s != PD_OK && g == SENTINEL && strstr(pd_last_error(), "deep.onnx"),
          "deeply nested model refused: %s", pd_last_error());
}

static void test_tensor_checks(void) {
    float f[6] = {0};
    mb *b = mb_new(13);
    add_init(b, mk_raw("R", PD_FLOAT, "2,3", f, 20));
    add_out(b, "R");
    expect_fail("raw_data length mismatch", save(b, "rawlen.onnx"), NULL, PD_ERR_PARSE, "initializer 'R'",
                "20 bytes");

    b = mb_new(13);
    add_init(b, mk_f32("F", "2,3", f, 5));
    add_out(b, "F");
    expect_fail("float_data count mismatch", save(b, "typedlen.onnx"), NULL, PD_ERR_PARSE, "initializer 'F'",
                "5 values");

    b = mb_new(13);
    add_init(b, mk_tensor("O", PD_FLOAT, "1099511627776,1099511627776,1099511627776"));
    add_out(b, "O");
    expect_fail("dims whose product overflows", save(b, "overflow.onnx"), NULL, PD_ERR_NOMEM,
                "initializer 'O'", NULL);

    b = mb_new(13);
    add_init(b, mk_raw("O", PD_FLOAT, "4611686018427387904", f, 4));
    add_out(b, "O");
    expect_fail("a size in bytes that overflows", save(b, "overflow2.onnx"), NULL, PD_ERR_NOMEM,
                "initializer 'O'", NULL);

    b = mb_new(13);
    add_init(b, mk_tensor("N", PD_FLOAT, "2,-3"));
    add_out(b, "N");
    expect_fail("negative dim", save(b, "negdim.onnx"), NULL, PD_ERR_PARSE, "initializer 'N'", "negative");

    b = mb_new(13);
    add_init(b, mk_raw("H", PD_FLOAT, "1,1,1,1,1,1,1,1,1", f, 4));
    add_out(b, "H");
    expect_fail("rank 9", save(b, "rank9.onnx"), NULL, PD_ERR_UNSUPPORTED, "initializer 'H'", "rank 9");

    b = mb_new(13);
    Onnx__TensorProto *st = mk_tensor("names", PD_STRING, "1");
    st->n_string_data = 1;
    st->string_data = al(sizeof *st->string_data);
    st->string_data[0].data = (uint8_t *)S("a");
    st->string_data[0].len = 1;
    add_init(b, st);
    add_out(b, "names");
    expect_fail("string initializer", save(b, "string.onnx"), NULL, PD_ERR_UNSUPPORTED, "initializer 'names'",
                "string");

    b = mb_new(13);
    add_init(b, mk_raw("C", 14, "1", f, 8));
    add_out(b, "C");
    expect_fail("complex64 initializer", save(b, "complex.onnx"), NULL, PD_ERR_UNSUPPORTED, "initializer 'C'",
                "complex64");

    b = mb_new(13);
    add_init(b, mk_raw("D", PD_FLOAT, "1", f, 4));
    add_init(b, mk_raw("D", PD_FLOAT, "1", f, 4));
    add_out(b, "D");
    expect_fail("duplicate initializer", save(b, "dupinit.onnx"), NULL, PD_ERR_INVALID, "'D'", NULL);

    b = mb_new(13);
    add_in(b, mk_vi("x", PD_FLOAT, "1099511627776,1099511627776,1099511627776"));
    add_out(b, "x");
    expect_fail("input dims whose product overflows", save(b, "inoverflow.onnx"), NULL, PD_ERR_SHAPE, "'x'",
                NULL);

    b = mb_new(13);
    add_in(b, mk_vi("x", PD_STRING, "2"));
    add_out(b, "x");
    expect_fail("string input", save(b, "strinput.onnx"), NULL, PD_ERR_UNSUPPORTED, "input 'x'", "string");
}

static void test_graph_checks(void) {
    mb *b = mb_new(13);
    add_in(b, mk_vi("x", PD_FLOAT, "2"));
    add_node(b, mk_node("Relu", "first", "x,b", "a"));
    add_node(b, mk_node("Relu", "second", "a", "b"));
    add_out(b, "b");
    expect_fail("a cycle", save(b, "cycle.onnx"), NULL, PD_ERR_INVALID, "node '", "cycle");

    b = mb_new(13);
    add_in(b, mk_vi("x", PD_FLOAT, "2"));
    add_node(b, mk_node("Add", "adder", "x,ghost", "y"));
    add_out(b, "y");
    expect_fail("an input nobody produces", save(b, "ghost.onnx"), NULL, PD_ERR_INVALID, "node 'adder'",
                "'ghost'");

    b = mb_new(13);
    add_in(b, mk_vi("x", PD_FLOAT, "2"));
    add_node(b, mk_node("Relu", "r", "x", "y"));
    add_out(b, "y");
    add_out(b, "z");
    expect_fail("a graph output nobody computes", save(b, "noout.onnx"), NULL, PD_ERR_INVALID, "output 'z'",
                NULL);

    b = mb_new(13);
    add_in(b, mk_vi("x", PD_FLOAT, "2"));
    add_node(b, mk_node("Relu", "r1", "x", "y"));
    add_node(b, mk_node("Relu", "r2", "x", "y"));
    add_out(b, "y");
    expect_fail("two producers of one tensor", save(b, "twice.onnx"), NULL, PD_ERR_INVALID, "'y'", "node 'r");

    b = mb_new(13);
    add_in(b, mk_vi("x", PD_FLOAT, "2"));
    add_node(b, mk_node("Relu", "r", "x", "x"));
    add_out(b, "x");
    expect_fail("a node writing a graph input", save(b, "writesin.onnx"), NULL, PD_ERR_INVALID, "node 'r'",
                "'x'");
}

/* Unsupported nodes: the loader marks them op = -1 and the load is refused,
 * naming the node, the op and (when not ai.onnx) the domain. */
static void expect_unsupported(const char *label, const char *path, const char *op, const char *domain) {
    pd_load_options o = PD_LOAD_OPTIONS_INIT;
    pd_graph *g = SENTINEL;
    pd_status s = pd_graph_load_file(path, &o, &g);
    CHECK(s == PD_ERR_UNSUPPORTED && g == SENTINEL && strstr(pd_last_error(), op) &&
              strstr(pd_last_error(), "node '") && (!domain || strstr(pd_last_error(), domain)),
          "%s -> %s: %s", label, pd_status_name(s), pd_last_error());
    if (s == PD_OK && g != SENTINEL) pd_graph_destroy(g);
}

static void test_unsupported(void) {
    mb *b = mb_new(13);
    add_in(b, mk_vi("x", PD_FLOAT, "2"));
    add_node(b, mk_node("FooBar", "fb", "x", "y"));
    add_out(b, "y");
    expect_unsupported("unknown op", save(b, "foobar.onnx"), "FooBar", NULL);

    b = mb_new(13);
    mb_domain(b, "com.example", 1);
    add_in(b, mk_vi("x", PD_FLOAT, "2"));
    Onnx__NodeProto *n = mk_node("Relu", "custom", "x", "y");
    n->domain = S("com.example");
    add_node(b, n);
    add_out(b, "y");
    expect_unsupported("a known op name in another domain", save(b, "domain.onnx"), "Relu", "com.example");

    /* a subgraph attribute makes even a known op unsupported */
    b = mb_new(13);
    add_in(b, mk_vi("x", PD_FLOAT, "2"));
    n = mk_node("Relu", "withgraph", "x", "y");
    Onnx__AttributeProto *a = mk_attr(n, "body", PD_A_GRAPH);
    static const Onnx__GraphProto ginit = ONNX__GRAPH_PROTO__INIT;
    a->g = al(sizeof *a->g);
    *a->g = ginit;
    add_node(b, n);
    add_out(b, "y");
    expect_unsupported("a node with a graph attribute", save(b, "graphattr.onnx"), "Relu", NULL);

    /* several: every missing operator named at once, with its node count, in order of first use */
    b = mb_new(13);
    mb_domain(b, "com.example", 1);
    add_in(b, mk_vi("x", PD_FLOAT, "2"));
    add_node(b, mk_node("FooBar", "f1", "x", "a"));
    add_node(b, mk_node("Relu", "r", "a", "b"));
    add_node(b, mk_node("Frob", "g1", "b", "c"));
    add_node(b, mk_node("FooBar", "f2", "c", "d"));
    n = mk_node("Baz", "z", "d", "e");
    n->domain = S("com.example");
    add_node(b, n);
    add_node(b, mk_node("FooBar", "f3", "e", "y"));
    add_out(b, "y");
    const char *path = save(b, "several.onnx");
    pd_load_options o = PD_LOAD_OPTIONS_INIT;
    pd_graph *g = SENTINEL;
    pd_status s = pd_graph_load_file(path, &o, &g);
    char want[512];
    snprintf(want, sizeof want, "%s: 3 operators are not supported: FooBar (3 nodes), Frob (1), com.example.Baz (1)",
             path);
    CHECK(s == PD_ERR_UNSUPPORTED && g == SENTINEL && !strcmp(pd_last_error(), want), "several missing operators -> %s",
          pd_last_error());
}

static void test_attributes(void) {
    mb *b = mb_new(17);
    b->ops[0].domain = S("ai.onnx");
    add_in(b, mk_vi("x", PD_FLOAT, "2"));
    Onnx__NodeProto *n = mk_node("Relu", "r", "x", "y");
    Onnx__AttributeProto *a;
    a = mk_attr(n, "f", PD_A_FLOAT);
    a->has_f = 1;
    a->f = 0.25f;
    a = mk_attr(n, "i", PD_A_INT);
    a->has_i = 1;
    a->i = -7;
    a = mk_attr(n, "s", PD_A_STRING);
    a->has_s = 1;
    a->s.data = (uint8_t *)S("hello");
    a->s.len = 5;
    a = mk_attr(n, "ints", PD_A_INTS);
    static int64_t iv[3] = {1, -2, 3};
    a->ints = iv;
    a->n_ints = 3;
    a = mk_attr(n, "floats", PD_A_FLOATS);
    static float fv[2] = {1.5f, -0.5f};
    a->floats = fv;
    a->n_floats = 2;
    a = mk_attr(n, "strings", PD_A_STRINGS);
    a->strings = al(2 * sizeof *a->strings);
    a->strings[0].data = (uint8_t *)S("ab");
    a->strings[0].len = 2;
    a->strings[1].data = (uint8_t *)S("c");
    a->strings[1].len = 1;
    a->n_strings = 2;
    a = mk_attr(n, "t", PD_A_TENSOR);
    static const int32_t tv[2] = {0x3c00, 0xc000}; /* float16 1, -2 */
    a->t = mk_i32("", PD_FLOAT16, "2", tv, 2);
    /* IR version 1 style: no type, only the field */
    a = mk_attr(n, "untyped", 0);
    a->has_type = 0;
    a->has_i = 1;
    a->i = 42;
    add_node(b, n);
    add_out(b, "y");
    pd_load_options o = PD_LOAD_OPTIONS_INIT;
    o.fold_constants = 0;
    pd_graph *g = expect_load("node with every attribute type", save(b, "attrs.onnx"), &o);
    if (!g) return;
    const pd__node *r = g->nnodes == 1 ? &g->nodes[0] : NULL;
    CHECK(r && r->op == PD_OP_RELU && r->opset == 17 && g->opset == 17 && strcmp(r->domain, "") == 0,
          "attrs: Relu in domain 'ai.onnx' is the default domain, opset 17");
    if (r) {
        const int64_t *ints;
        const float *floats;
        CHECK(pd__attr_f(r, "f", 0) == 0.25f && pd__attr_i(r, "i", 0) == -7 &&
                  strcmp(pd__attr_s(r, "s", ""), "hello") == 0,
              "attrs: float, int, string");
        CHECK(pd__attr_ints(r, "ints", &ints) == 3 && ints[1] == -2 &&
                  pd__attr_floats(r, "floats", &floats) == 2 && floats[1] == -0.5f,
              "attrs: ints, floats");
        const pd__attr *sa = pd__attr_get(r, "strings");
        CHECK(sa && sa->type == PD_A_STRINGS && sa->n == 2 && memcmp(sa->s, "ab\0c\0", 5) == 0,
              "attrs: strings packed NUL-separated in s");
        const pd__attr *ta = pd__attr_get(r, "t");
        CHECK(ta && ta->type == PD_A_TENSOR && ta->t && ta->t->dtype == PD_FLOAT16 && ta->t->ndim == 1 &&
                  pd__get_f(PD_FLOAT16, ta->t->data, 0) == 1.0 &&
                  pd__get_f(PD_FLOAT16, ta->t->data, 1) == -2.0,
              "attrs: float16 tensor attribute");
        CHECK(pd__attr_i(r, "untyped", 0) == 42, "attrs: untyped (IR 1) int attribute");
    }
    pd_graph_destroy(g);

    b = mb_new(13);
    add_in(b, mk_vi("x", PD_FLOAT, "2"));
    n = mk_node("Relu", "r", "x", "y");
    a = mk_attr(n, "t", PD_A_TENSOR);
    static const float bad[1] = {1};
    a->t = mk_raw("", PD_FLOAT, "2", bad, 4);
    add_node(b, n);
    add_out(b, "y");
    expect_fail("a bad tensor attribute", save(b, "badattr.onnx"), NULL, PD_ERR_PARSE,
                "node 'r' (Relu): attribute 't'", NULL);
}

/* Every dtype, in raw_data and in the typed field, as graph outputs. */
static void test_dtypes(void) {
    mb *b = mb_new(13);
    const uint16_t h[3] = {0x3c00, 0xc000, 0x3800};  /* 1, -2, 0.5 */
    const uint16_t bf[3] = {0x3f80, 0xc000, 0x4040}; /* 1, -2, 3 */
    const int8_t i8[3] = {-128, 127, -1};
    const uint8_t u8[3] = {0, 255, 7};
    const int16_t i16[3] = {-32768, 32767, -2};
    const uint16_t u16[3] = {0, 65535, 9};
    const int32_t i32[3] = {INT32_MIN, INT32_MAX, -3};
    const uint8_t bo[3] = {0, 1, 1};
    const double d[3] = {1.5, -2.25, 1e300};
    const int64_t i64[3] = {INT64_MIN, INT64_MAX, -4};
    const uint32_t u32[3] = {0, 4294967295u, 5};
    const uint64_t u64[3] = {0, UINT64_MAX, 6};
    struct {
        const char *name;
        int dt;
        const void *v;
        size_t es;
    } cases[] = {
        {"f16", PD_FLOAT16, h, 2}, {"bf16", PD_BFLOAT16, bf, 2}, {"i8", PD_INT8, i8, 1},
        {"u8", PD_UINT8, u8, 1},   {"i16", PD_INT16, i16, 2},    {"u16", PD_UINT16, u16, 2},
        {"i32", PD_INT32, i32, 4}, {"bool", PD_BOOL, bo, 1},     {"f64", PD_DOUBLE, d, 8},
        {"i64", PD_INT64, i64, 8}, {"u32", PD_UINT32, u32, 4},   {"u64", PD_UINT64, u64, 8},
    };
    int nc = (int)(sizeof cases / sizeof cases[0]);
    for (int c = 0; c < nc; c++) {
        add_init(b, mk_raw(fmt("raw_%s", cases[c].name), cases[c].dt, "3", cases[c].v, 3 * cases[c].es));
        Onnx__TensorProto *t = mk_tensor(fmt("typed_%s", cases[c].name), cases[c].dt, "3");
        switch (cases[c].dt) {
        case PD_DOUBLE:
            t->n_double_data = 3;
            t->double_data = al(24);
            memcpy(t->double_data, d, 24);
            break;
        case PD_INT64:
            t->n_int64_data = 3;
            t->int64_data = al(24);
            memcpy(t->int64_data, i64, 24);
            break;
        case PD_UINT32:
        case PD_UINT64:
            t->n_uint64_data = 3;
            t->uint64_data = al(24);
            for (int k = 0; k < 3; k++) t->uint64_data[k] = cases[c].dt == PD_UINT32 ? u32[k] : u64[k];
            break;
        default:
            t->n_int32_data = 3;
            t->int32_data = al(12);
            for (int k = 0; k < 3; k++) {
                int32_t v = 0;
                switch (cases[c].dt) {
                case PD_FLOAT16: v = h[k]; break;
                case PD_BFLOAT16: v = bf[k]; break;
                case PD_INT8: v = i8[k]; break;
                case PD_UINT8: v = u8[k]; break;
                case PD_INT16: v = i16[k]; break;
                case PD_UINT16: v = u16[k]; break;
                case PD_INT32: v = i32[k]; break;
                case PD_BOOL: v = bo[k] ? 5 : 0; break; /* any nonzero is true */
                }
                t->int32_data[k] = v;
            }
        }
        add_init(b, t);
        add_out(b, fmt("raw_%s", cases[c].name));
        add_out(b, fmt("typed_%s", cases[c].name));
    }
    /* a scalar and an empty tensor */
    const float one = 1;
    add_init(b, mk_f32("scalar", "", &one, 1));
    add_init(b, mk_raw("empty", PD_FLOAT, "0,3", &one, 0));
    add_out(b, "scalar");
    add_out(b, "empty");
    pd_graph *g = expect_load("every dtype, raw and typed", save(b, "dtypes.onnx"), NULL);
    if (!g) return;
    for (int c = 0; c < nc; c++)
        for (int raw = 0; raw < 2; raw++) {
            const pd__tensor *t = T(g, fmt("%s_%s", raw ? "raw" : "typed", cases[c].name));
            CHECK(t && t->kind == PD_T_INIT && (int)t->dtype == cases[c].dt && t->ndim == 1 &&
                      t->shape[0] == 3 && t->numel == 3 && t->data &&
                      memcmp(t->data, cases[c].v, 3 * cases[c].es) == 0,
                  "dtype %s (%s) decodes to the right values", cases[c].name,
                  raw ? "raw_data" : "typed field");
        }
    const pd__tensor *t = T(g, "raw_f16");
    CHECK(t && pd__get_f(PD_FLOAT16, t->data, 2) == 0.5, "float16 0x3800 reads as 0.5");
    t = T(g, "typed_bf16");
    CHECK(t && pd__get_f(PD_BFLOAT16, t->data, 2) == 3.0, "bfloat16 0x4040 reads as 3");
    t = T(g, "scalar");
    CHECK(t && t->ndim == 0 && t->numel == 1 && *(float *)t->data == 1, "a scalar initializer");
    t = T(g, "empty");
    CHECK(t && t->ndim == 2 && t->numel == 0 && t->data, "an empty initializer has a (non-NULL) buffer");
    pd_graph_destroy(g);
}

/* The low-bit types: float8 codes a byte, int4/float4 two and uint2 four to a
 * byte (low bits first, the last byte part used), from raw_data and
 * int32_data; sizes checked against the shape; saved packed again, and a
 * reload gives the same bits. */
static void test_lowbit_io(void) {
    mb *b = mb_new(21);
    static const uint8_t i4raw[3] = {0x78, 0x0f, 0x03}; /* -8, 7, -1, 0, 3 */
    static const uint8_t f8raw[3] = {0x38, 0xc0, 0x7f}; /* 1, -2, NaN */
    static const int32_t u2typed[2] = {0xe4, 0x0b};     /* 0, 1, 2, 3, 3, 2 */
    static const int32_t f4typed[2] = {0xf1, 0x07};     /* 0.5, -6, 6 */
    add_init(b, mk_raw("i4", PD_INT4, "5", i4raw, 3));
    add_init(b, mk_raw("f8", PD_FLOAT8E4M3FN, "3", f8raw, 3));
    add_init(b, mk_i32("u2", PD_UINT2, "6", u2typed, 2));
    add_init(b, mk_i32("f4", PD_FLOAT4E2M1, "3", f4typed, 2));
    add_out(b, "i4");
    add_out(b, "f8");
    add_out(b, "u2");
    add_out(b, "f4");
    const char *path = save(b, "lowbit.onnx");
    pd_graph *g = expect_load("low-bit initializers", path, NULL);
    if (!g) return;
    static const int8_t i4[5] = {-8, 7, -1, 0, 3}, u2[6] = {0, 1, 2, 3, 3, 2};
    const pd__tensor *t = T(g, "i4");
    CHECK(t && t->dtype == PD_INT4 && t->numel == 5 && !memcmp(t->data, i4, 5), "int4 raw_data unpacks, sign-extended");
    t = T(g, "u2");
    CHECK(t && t->dtype == PD_UINT2 && t->numel == 6 && !memcmp(t->data, u2, 6), "uint2 int32_data unpacks 4 a byte");
    t = T(g, "f8");
    CHECK(t && t->dtype == PD_FLOAT8E4M3FN && pd__get_f(t->dtype, t->data, 0) == 1 &&
              pd__get_f(t->dtype, t->data, 1) == -2 && isnan(pd__get_f(t->dtype, t->data, 2)),
          "float8e4m3fn codes read as 1, -2, NaN");
    t = T(g, "f4");
    CHECK(t && t->dtype == PD_FLOAT4E2M1 && pd__get_f(t->dtype, t->data, 0) == 0.5 &&
              pd__get_f(t->dtype, t->data, 1) == -6 && pd__get_f(t->dtype, t->data, 2) == 6,
          "float4e2m1 int32_data reads as 0.5, -6, 6");

    const char *out = fmt("%s/lowbit_saved.onnx", tmp_root);
    pd_graph *g2 = NULL;
    bool ok = pd_graph_save(g, out) == PD_OK && pd_graph_load_file(out, NULL, &g2) == PD_OK;
    CHECK(ok, "low-bit initializers save and reload: %s", ok ? "yes" : pd_last_error());
    const char *names[4] = {"i4", "f8", "u2", "f4"};
    for (int k = 0; ok && k < 4; k++) {
        const pd__tensor *a = T(g, names[k]), *c = T(g2, names[k]);
        CHECK(a && c && a->dtype == c->dtype && a->numel == c->numel && !memcmp(a->data, c->data, (size_t)a->numel),
              "'%s' has the same bits after save and reload", names[k]);
    }
    pd_graph_destroy(g2);
    pd_graph_destroy(g);
    /* the saved file holds them packed: 3 bytes for 5 int4, 2 for 6 uint2 */
    size_t len;
    unsigned char *buf;
    if (pd__read_file(out, &buf, &len) == PD_OK) {
        Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, len, buf);
        size_t want[4] = {3, 3, 2, 2}, bad = 0;
        for (size_t i = 0; m && i < m->graph->n_initializer; i++) {
            const Onnx__TensorProto *tp = m->graph->initializer[i];
            for (int k = 0; k < 4; k++)
                if (!strcmp(tp->name, names[k]) && (!tp->has_raw_data || tp->raw_data.len != want[k])) bad++;
        }
        CHECK(m && bad == 0, "saved raw_data is packed (3, 3, 2, 2 bytes)");
        if (m) onnx__model_proto__free_unpacked(m, NULL);
        PD_FREE(buf);
    }

    /* external data: the packed bytes in a file beside the model */
    write_file(fmt("%s/i4.bin", tmp_root), i4raw, 3);
    mb *h = mb_new(21);
    Onnx__TensorProto *ext = mk_external("i4", "5", "i4.bin", NULL, NULL);
    ext->data_type = PD_INT4;
    add_init(h, ext);
    add_out(h, "i4");
    g = expect_load("int4 from external data", save(h, "lowbit_ext.onnx"), NULL);
    t = g ? T(g, "i4") : NULL;
    CHECK(t && t->dtype == PD_INT4 && t->numel == 5 && !memcmp(t->data, i4, 5), "external int4 unpacks: -8 7 -1 0 3");
    pd_graph_destroy(g);
    h = mb_new(21);
    ext = mk_external("i4", "5", "i4.bin", "0", "2");
    ext->data_type = PD_INT4;
    add_init(h, ext);
    add_out(h, "i4");
    expect_fail("external int4 of 2 bytes for 5 elements", save(h, "lowbit_ext_short.onnx"), NULL, PD_ERR_PARSE,
                "has 2 bytes", "needs 3");

    /* hostile sizes: a byte short or over, int32_data counted per element */
    h = mb_new(21);
    add_init(h, mk_raw("i4", PD_INT4, "5", i4raw, 2));
    add_out(h, "i4");
    expect_fail("int4 raw_data a byte short", save(h, "lowbit_short.onnx"), NULL, PD_ERR_PARSE, "raw_data has 2 bytes",
                "needs 3");
    h = mb_new(21);
    static const int32_t five[5] = {1, 2, 3, 4, 5};
    add_init(h, mk_i32("u2", PD_UINT2, "6", five, 5));
    add_out(h, "u2");
    expect_fail("uint2 int32_data one value per element", save(h, "lowbit_typed.onnx"), NULL, PD_ERR_PARSE,
                "int32_data has 5 values", "packs into 2");
    h = mb_new(21);
    add_init(h, mk_raw("f4", PD_FLOAT4E2M1, "4611686018427387904,4", i4raw, 3));
    add_out(h, "f4");
    expect_fail("float4 of 2^64 elements", save(h, "lowbit_huge.onnx"), NULL, PD_ERR_NOMEM, "too large", NULL);
}

/* The low-bit types move through the byte-moving ops and convert with Cast;
 * an op that would compute in one refuses, naming the node and the dtype. */
static void test_lowbit_ops(void) {
    mb *b = mb_new(21);
    static const int64_t shp[2] = {3, 2};
    add_in(b, mk_vi("x", PD_FLOAT8E5M2, "2,3"));
    add_init(b, mk_raw("shape", PD_INT64, "2", shp, sizeof shp));
    add_node(b, mk_node("Reshape", "reshape", "x,shape", "r"));
    add_node(b, mk_node("Transpose", "transpose", "r", "t"));
    add_node(b, mk_node("Identity", "identity", "t", "y"));
    Onnx__NodeProto *c = mk_node("Cast", "cast", "y", "yf");
    Onnx__AttributeProto *a = mk_attr(c, "to", PD_A_INT);
    a->has_i = 1;
    a->i = PD_FLOAT;
    add_node(b, c);
    add_out(b, "y");
    add_out(b, "yf");
    pd_graph *g = expect_load("float8 through Reshape, Transpose, Identity, Cast", save(b, "lowbit_move.onnx"), NULL);
    pd_engine *e = NULL;
    if (g && pd_engine_create(g, NULL, &e) == PD_OK) {
        uint8_t xs[6] = {0x3c, 0x40, 0xc2, 0x01, 0x7b, 0x7e}; /* 1, 2, -3, 2^-16, 57344, NaN */
        pd_tensor in = {PD_FLOAT8E5M2, 2, {2, 3}, xs}, y, yf;
        bool ok = pd_engine_set_input(e, "x", &in) == PD_OK && pd_engine_run(e) == PD_OK &&
                  pd_engine_get_output(e, "y", &y) == PD_OK && pd_engine_get_output(e, "yf", &yf) == PD_OK;
        CHECK(ok, "the float8 graph runs: %s", ok ? "yes" : pd_last_error());
        static const uint8_t want[6] = {0x3c, 0xc2, 0x7b, 0x40, 0x01, 0x7e}; /* [3,2] transposed */
        const float wf[5] = {1, -3, 57344, 2, 0x1p-16f};
        if (ok) {
            CHECK(y.dtype == PD_FLOAT8E5M2 && y.shape[0] == 2 && y.shape[1] == 3 && !memcmp(y.data, want, 6),
                  "Reshape, Transpose and Identity move the float8 bytes");
            const float *f = yf.data;
            CHECK(yf.dtype == PD_FLOAT && !memcmp(f, wf, sizeof wf) && isnan(f[5]),
                  "Cast decodes them: 1 -3 57344 2 2^-16 NaN");
        }
    } else if (g) {
        CHECK(false, "engine on the float8 graph: %s", pd_last_error());
    }
    pd_engine_destroy(e);
    pd_graph_destroy(g);

    /* int4 through the other byte movers: Concat, Slice, Gather, Tile, Flatten,
     * Unsqueeze, Squeeze, Split; the values onnx.reference gives */
    {
        mb *m = mb_new(21);
        static const int64_t shp3[3] = {2, 3, 4}, st[1] = {1}, en[1] = {3}, ax1[1] = {1}, idx[2] = {0, 2},
                             rep[3] = {2, 1, 1}, ax0[1] = {0};
        static int64_t perm[3] = {2, 0, 1};
        add_in(m, mk_vi("x", PD_FLOAT, "24"));
        add_init(m, mk_raw("shp", PD_INT64, "3", shp3, sizeof shp3));
        add_init(m, mk_raw("st", PD_INT64, "1", st, 8));
        add_init(m, mk_raw("en", PD_INT64, "1", en, 8));
        add_init(m, mk_raw("ax", PD_INT64, "1", ax1, 8));
        add_init(m, mk_raw("idx", PD_INT64, "2", idx, sizeof idx));
        add_init(m, mk_raw("rep", PD_INT64, "3", rep, sizeof rep));
        add_init(m, mk_raw("ax0", PD_INT64, "1", ax0, 8));
        struct {
            const char *op, *ins, *outs, *attr;
            int64_t v;
        } chain[] = {{"Cast", "x", "l", "to", PD_INT4},         {"Reshape", "l,shp", "r", NULL, 0},
                     {"Transpose", "r", "t", NULL, 0},           {"Concat", "t,t", "c", "axis", 1},
                     {"Slice", "c,st,en,ax", "s", NULL, 0},      {"Gather", "s,idx", "g", "axis", 0},
                     {"Tile", "g,rep", "ti", NULL, 0},           {"Flatten", "ti", "f", "axis", 1},
                     {"Unsqueeze", "f,ax0", "u", NULL, 0},       {"Squeeze", "u,ax0", "sq", NULL, 0},
                     {"Split", "sq", "sp0,sp1", "num_outputs", 2}, {"Identity", "sp1", "id", NULL, 0},
                     {"Cast", "id", "y", "to", PD_FLOAT}};
        for (size_t k = 0; k < sizeof chain / sizeof chain[0]; k++) {
            Onnx__NodeProto *nd = mk_node(chain[k].op, fmt("n%zu", k), chain[k].ins, chain[k].outs);
            if (chain[k].attr) {
                Onnx__AttributeProto *at = mk_attr(nd, chain[k].attr, PD_A_INT);
                at->has_i = 1;
                at->i = chain[k].v;
            }
            if (!strcmp(chain[k].op, "Transpose")) {
                Onnx__AttributeProto *at = mk_attr(nd, "perm", PD_A_INTS);
                at->ints = perm;
                at->n_ints = 3;
            }
            if (!strcmp(chain[k].op, "Split")) {
                Onnx__AttributeProto *at = mk_attr(nd, "axis", PD_A_INT);
                at->has_i = 1;
                at->i = 0;
            }
            add_node(m, nd);
        }
        add_out(m, "y");
        pd_graph *gm = expect_load("int4 through ten byte-moving ops", save(m, "lowbit_chain.onnx"), NULL);
        pd_engine *em = NULL;
        float xs[24], *yv = NULL;
        for (int i = 0; i < 24; i++) xs[i] = (float)(i - 12) * 0.37f;
        pd_tensor tin = {PD_FLOAT, 1, {24}, xs}, yo;
        bool ok = gm && pd_engine_create(gm, NULL, &em) == PD_OK && pd_engine_set_input(em, "x", &tin) == PD_OK &&
                  pd_engine_run(em) == PD_OK && pd_engine_get_output(em, "y", &yo) == PD_OK;
        if (ok) yv = yo.data;
        static const float want[12] = {0, 1, 2, -4, -2, -1, 0, 2, 3, -3, -2, 0};
        CHECK(ok && yo.ndim == 2 && yo.shape[0] == 2 && yo.shape[1] == 6 && !memcmp(yv, want, sizeof want),
              "int4 through Concat, Slice, Gather, Tile, Flatten, Unsqueeze, Squeeze, Split: onnx.reference's values%s%s",
              ok ? "" : ": ", ok ? "" : pd_last_error());
        pd_engine_destroy(em);
        pd_graph_destroy(gm);
    }

    struct {
        const char *op, *label;
        int dt;
        const char *needle;
    } refuse[] = {
        {"Add", "Add of float8e4m3fn", PD_FLOAT8E4M3FN, "float8e4m3fn"},
        {"CumSum", "CumSum of int4", PD_INT4, "int4"},
        {"Hardmax", "Hardmax of float8e5m2fnuz", PD_FLOAT8E5M2FNUZ, "float8e5m2fnuz"},
        {"Trilu", "Trilu of float8e8m0 (its zero is no 0x00)", PD_FLOAT8E8M0, "no kernel computes in"},
        {"ArgMax", "ArgMax of float4e2m1", PD_FLOAT4E2M1, "float4e2m1"},
        {"Relu", "Relu of uint2", PD_UINT2, "uint2"},
    };
    for (size_t k = 0; k < sizeof refuse / sizeof refuse[0]; k++) {
        mb *h = mb_new(21);
        static const int64_t zero = 0;
        add_in(h, mk_vi("x", refuse[k].dt, "2,2"));
        add_init(h, mk_raw("axis", PD_INT64, "", &zero, 8));
        const char *ins = !strcmp(refuse[k].op, "Add") ? "x,x" : !strcmp(refuse[k].op, "CumSum") ? "x,axis" : "x";
        add_node(h, mk_node(refuse[k].op, "n0", ins, "y"));
        add_out(h, "y");
        expect_fail(refuse[k].label, save(h, fmt("lowbit_refuse%zu.onnx", k)), NULL, PD_ERR_UNSUPPORTED, "'n0'",
                    refuse[k].needle);
    }
}

/* QuantizeLinear to float8 without saturation and to int4 with a zero
 * point, DequantizeLinear back, Cast to e8m0 rounding to nearest without
 * saturation: the values ONNX's ReferenceEvaluator (onnx 1.23) gives. */
static void test_lowbit_quant(void) {
    mb *b = mb_new(25);
    static const float two = 2;
    static const uint8_t zero = 0, one = 1;
    add_in(b, mk_vi("x", PD_FLOAT, "8"));
    add_init(b, mk_f32("s", "", &two, 1));
    add_init(b, mk_raw("zf8", PD_FLOAT8E4M3FN, "", &zero, 1));
    add_init(b, mk_raw("zi4", PD_INT4, "", &one, 1));
    Onnx__NodeProto *n = mk_node("QuantizeLinear", "q1", "x,s,zf8", "q1");
    Onnx__AttributeProto *a = mk_attr(n, "saturate", PD_A_INT);
    a->has_i = 1;
    a->i = 0;
    add_node(b, n);
    add_node(b, mk_node("QuantizeLinear", "q2", "x,s,zi4", "q2"));
    n = mk_node("Cast", "c", "x", "c");
    a = mk_attr(n, "to", PD_A_INT);
    a->has_i = 1;
    a->i = PD_FLOAT8E8M0;
    a = mk_attr(n, "saturate", PD_A_INT);
    a->has_i = 1;
    a->i = 0;
    a = mk_attr(n, "round_mode", PD_A_STRING);
    a->has_s = 1;
    a->s.data = (uint8_t *)S("nearest");
    a->s.len = 7;
    add_node(b, n);
    add_node(b, mk_node("DequantizeLinear", "d", "q2,s,zi4", "d"));
    add_out(b, "q1");
    add_out(b, "q2");
    add_out(b, "c");
    add_out(b, "d");
    pd_graph *g = expect_load("QuantizeLinear to float8 and int4, Cast to e8m0", save(b, "lowbit_quant.onnx"), NULL);
    pd_engine *e = NULL;
    if (!g || pd_engine_create(g, NULL, &e) != PD_OK) {
        CHECK(false, "engine on the quantizing graph: %s", pd_last_error());
        pd_graph_destroy(g);
        return;
    }
    float xs[8] = {1000, -1000, 0.3f, 3.7f, 300, -17, 14.9f, 5.0f};
    pd_tensor in = {PD_FLOAT, 1, {8}, xs}, q1, q2, c, d;
    bool ok = pd_engine_set_input(e, "x", &in) == PD_OK && pd_engine_run(e) == PD_OK &&
              pd_engine_get_output(e, "q1", &q1) == PD_OK && pd_engine_get_output(e, "q2", &q2) == PD_OK &&
              pd_engine_get_output(e, "c", &c) == PD_OK && pd_engine_get_output(e, "d", &d) == PD_OK;
    CHECK(ok, "the quantizing graph runs: %s", ok ? "yes" : pd_last_error());
    if (ok) {
        static const uint8_t wq1[8] = {127, 255, 34, 63, 113, 208, 79, 66}, wc[8] = {137, 137, 125, 129, 135, 131, 131, 129};
        static const int8_t wq2[8] = {7, -8, 1, 3, 7, -7, 7, 3};
        static const float wd[8] = {12, -18, 0, 4, 12, -16, 12, 4};
        CHECK(q1.dtype == PD_FLOAT8E4M3FN && !memcmp(q1.data, wq1, 8),
              "QuantizeLinear saturate=0 to float8e4m3fn: out of range gives NaN of its sign, the rest rounds to even");
        CHECK(q2.dtype == PD_INT4 && !memcmp(q2.data, wq2, 8), "QuantizeLinear to int4 with zero point 1 clips to [-8, 7]");
        CHECK(c.dtype == PD_FLOAT8E8M0 && !memcmp(c.data, wc, 8), "Cast to float8e8m0, round_mode nearest, saturate 0");
        CHECK(d.dtype == PD_FLOAT && !memcmp(d.data, wd, sizeof wd), "DequantizeLinear of int4 with zero point 1");
    }
    pd_engine_destroy(e);
    pd_graph_destroy(g);
}

/* Training cannot go through a cast to a low-bit type or a QuantizeLinear:
 * the session refuses, naming the node where the gradient's flow stops. */
static void test_lowbit_train(void) {
    static const float w[6] = {1, 2, 3, 4, 5, 6}, sc = 0.5f;
    static const uint8_t zero = 0;
    for (int k = 0; k < 2; k++) {
        mb *b = mb_new(21);
        add_in(b, mk_vi("x", PD_FLOAT, "4,3"));
        add_init(b, mk_f32("W", "3,2", w, 6));
        if (k == 0) {
            Onnx__NodeProto *c = mk_node("Cast", "to_f8", "W", "W8");
            Onnx__AttributeProto *a = mk_attr(c, "to", PD_A_INT);
            a->has_i = 1;
            a->i = PD_FLOAT8E4M3FN;
            add_node(b, c);
            c = mk_node("Cast", "back", "W8", "Wd");
            a = mk_attr(c, "to", PD_A_INT);
            a->has_i = 1;
            a->i = PD_FLOAT;
            add_node(b, c);
        } else {
            add_init(b, mk_f32("s", "", &sc, 1));
            add_init(b, mk_raw("z", PD_FLOAT8E5M2, "", &zero, 1));
            add_node(b, mk_node("QuantizeLinear", "quant", "W,s,z", "W8"));
            add_node(b, mk_node("DequantizeLinear", "dequant", "W8,s,z", "Wd"));
        }
        add_node(b, mk_node("MatMul", "mm", "x,Wd", "y"));
        add_out(b, "y");
        pd_graph *g = NULL;
        pd_session *s = NULL;
        pd_train_options to = PD_TRAIN_OPTIONS_INIT;
        to.loss = PD_LOSS_MSE;
        pd_status st = pd_graph_load_file(save(b, fmt("lowbit_train%d.onnx", k)), NULL, &g);
        if (st == PD_OK) st = pd_session_create(g, &to, &s);
        const char *msg = pd_last_error();
        bool named = k == 0 ? strstr(msg, "'to_f8' (Cast)") && strstr(msg, "float8e4m3fn")
                            : strstr(msg, "'quant' (QuantizeLinear)") && strstr(msg, "no gradient for 'W'");
        CHECK(st == PD_ERR_INVALID && named, "training through %s is refused naming the node: %s",
              k == 0 ? "a Cast to float8" : "QuantizeLinear to float8", msg);
        pd_session_destroy(s);
        pd_graph_destroy(g);
    }
}

static void test_external(void) {
    /* root/ext/ is the model's folder; root/secret.bin lies outside it */
    const char *dir = fmt("%s/ext", tmp_root);
    mkdir(dir, 0755);
    mkdir(fmt("%s/data", dir), 0755);
    float blob[4 + 12] = {99, 99, 99, 99};
    memcpy(blob + 4, W12, sizeof W12);
    write_file(fmt("%s/data/w.bin", dir), blob, sizeof blob);
    write_file(fmt("%s/plain.bin", dir), W12, sizeof W12);
    write_file(fmt("%s/secret.bin", tmp_root), W12, sizeof W12);
    if (symlink(fmt("%s/secret.bin", tmp_root), fmt("%s/abslink.bin", dir)) != 0 ||
        symlink("../secret.bin", fmt("%s/rellink.bin", dir)) != 0 ||
        symlink("data/w.bin", fmt("%s/inlink.bin", dir)) != 0)
        fprintf(stderr, "symlink: %s\n", strerror(errno));

    struct {
        const char *label, *loc, *off, *len;
        pd_status want;
        const char *needle;
    } cases[] = {
        {"external data inside the folder, offset and length", "data/w.bin", "16", "48", PD_OK, NULL},
        {"external data, whole file", "plain.bin", NULL, NULL, PD_OK, NULL},
        {"external data through a symlink that stays inside", "inlink.bin", "16", NULL, PD_OK, NULL},
        {"external data '../secret.bin'", "../secret.bin", NULL, NULL, PD_ERR_INVALID, "'../secret.bin'"},
        {"external data 'data/../../secret.bin'", "data/../../secret.bin", NULL, NULL, PD_ERR_INVALID,
         "'data/../../secret.bin'"},
        {"external data '/etc/passwd'", "/etc/passwd", NULL, NULL, PD_ERR_INVALID, "'/etc/passwd'"},
        {"external data via a relative symlink out", "rellink.bin", NULL, NULL, PD_ERR_INVALID,
         "'rellink.bin'"},
        {"external data via an absolute symlink out", "abslink.bin", NULL, NULL, PD_ERR_INVALID,
         "'abslink.bin'"},
        {"external data file missing", "nothere.bin", NULL, NULL, PD_ERR_IO, "nothere.bin"},
        {"external data of the wrong length", "data/w.bin", NULL, NULL, PD_ERR_PARSE, "data/w.bin"},
        {"external data past the end", "data/w.bin", "32", "48", PD_ERR_PARSE, "data/w.bin"},
        {"external data with a bad offset", "data/w.bin", "-16", "48", PD_ERR_PARSE, "offset"},
        {"external data naming a folder", "data", NULL, NULL, PD_ERR_INVALID, "data"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        mb *b = mb_new(13);
        add_init(b, mk_external("W", "4,3", cases[c].loc, cases[c].off, cases[c].len));
        add_out(b, "W");
        const char *path = save(b, fmt("ext/m%zu.onnx", c));
        if (cases[c].want != PD_OK) {
            expect_fail(cases[c].label, path, NULL, cases[c].want, "initializer 'W'", cases[c].needle);
            continue;
        }
        pd_graph *g = expect_load(cases[c].label, path, NULL);
        if (!g) continue;
        const pd__tensor *t = T(g, "W");
        CHECK(t && t->data && memcmp(t->data, W12, sizeof W12) == 0 && shape_is(t->ndim, t->shape, "4,3"),
              "%s: the right values", cases[c].label);
        pd_graph_destroy(g);

        if (c == 0) { /* the same bytes from memory: refused without a base folder, fine with one */
            size_t len;
            uint8_t *buf = mb_pack(b, &len);
            g = SENTINEL;
            pd_status s = pd_graph_load_memory(buf, len, "mem.onnx", NULL, NULL, &g);
            CHECK(s != PD_OK && g == SENTINEL && strstr(pd_last_error(), "'W'") &&
                      strstr(pd_last_error(), "data/w.bin"),
                  "external data from memory without a base folder is refused: %s", pd_last_error());
            g = NULL;
            s = pd_graph_load_memory(buf, len, "mem.onnx", dir, NULL, &g);
            CHECK(s == PD_OK && T(g, "W") && memcmp(T(g, "W")->data, W12, sizeof W12) == 0,
                  "external data from memory with a base folder: %s", s ? pd_last_error() : "right values");
            pd_graph_destroy(g);
        }
    }

    /* lazy_weights: the same checks at load, nothing read; the value when asked
     * for; a file cut short after the load is a one-line error naming it */
    pd_load_options lazy = PD_LOAD_OPTIONS_INIT;
    lazy.lazy_weights = 1;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const char *path = fmt("%s/ext/m%zu.onnx", tmp_root, c);
        if (cases[c].want != PD_OK) {
            expect_fail(fmt("lazy: %s", cases[c].label), path, &lazy, cases[c].want, "initializer 'W'", cases[c].needle);
            continue;
        }
        pd_graph *g = expect_load(cases[c].label, path, &lazy);
        pd__tensor *t = g ? &g->tensors[pd__graph_find(g, "W")] : NULL;
        CHECK(t && !t->data && pd__deferred(t) && pd__tensor_load(t) == PD_OK && t->data &&
                  memcmp(t->data, W12, sizeof W12) == 0,
              "lazy: %s: not read at load, the right values when read", cases[c].label);
        pd_graph_destroy(g);
    }
    write_file(fmt("%s/cut.bin", dir), W12, sizeof W12);
    mb *cb = mb_new(13);
    add_init(cb, mk_external("W", "4,3", "cut.bin", NULL, NULL));
    add_out(cb, "W");
    pd_graph *cg = expect_load("lazy: cut.bin", save(cb, "ext/cut.onnx"), &lazy);
    if (cg) {
        write_file(fmt("%s/cut.bin", dir), W12, 8);
        pd__tensor *t = &cg->tensors[pd__graph_find(cg, "W")];
        pd_status s = pd__tensor_load(t);
        CHECK(s == PD_ERR_IO && !t->data && strstr(pd_last_error(), "'W'") && strstr(pd_last_error(), "cut.bin") &&
                  !strchr(pd_last_error(), '\n'),
              "lazy: external data cut short after the load: %s", pd_last_error());
        pd_graph_destroy(cg);
    }

    /* a FIFO inside the folder: opening it for reading blocked until a writer
     * came (for ever); ext/fifo.onnx stays for the CLI test */
    if (mkfifo(fmt("%s/fifo.bin", dir), 0644) != 0) fprintf(stderr, "mkfifo: %s\n", strerror(errno));
    mb *b = mb_new(13);
    add_init(b, mk_external("W", "4,3", "fifo.bin", NULL, NULL));
    add_out(b, "W");
    expect_fail("external data naming a FIFO", save(b, "ext/fifo.onnx"), NULL, PD_ERR_INVALID, "initializer 'W'",
                "fifo.bin' is not a regular file");
}

/* ---- hostile models (issue 22): written to hostile/, kept for test_hostile_load.sh ---- */

/* No byte below 0x20 and no DEL: the message cannot break its line or drive a terminal. */
static bool printable(const char *s) {
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f) return false;
    return true;
}

/* FLOPs of a MatMul of two [2^30, 2^30] inputs: 2^91, far past INT64_MAX. No
 * data is needed: info only reads the declared shapes. */
static void test_huge_flops(void) {
    mb *b = mb_new(13);
    add_in(b, mk_vi("A", PD_FLOAT, "1073741824,1073741824"));
    add_in(b, mk_vi("B", PD_FLOAT, "1073741824,1073741824"));
    add_node(b, mk_node("MatMul", "mm", "A,B", "y"));
    add_node(b, mk_node("Relu", "r", "y", "z"));
    add_node(b, mk_node("MatMul", "mm2", "z,B", "w"));
    add_out(b, "w");
    pd_graph *g = expect_load("MatMul of [2^30,2^30] inputs", save(b, "hostile/flops.onnx"), NULL);
    if (!g) return;
    pd_node_info ni;
    CHECK(pd_graph_node(g, 0, &ni) == PD_OK && ni.flops == INT64_MAX,
          "FLOPs of a 2^91-FLOP MatMul stop at INT64_MAX (got %lld)", (long long)ni.flops);
    CHECK(pd_graph_node(g, 1, &ni) == PD_OK && ni.flops == (int64_t)1 << 60 && ni.output_bytes == (int64_t)1 << 62,
          "the Relu between counts 2^60 FLOPs, 2^62 bytes (got %lld, %lld)", (long long)ni.flops,
          (long long)ni.output_bytes);
    pd_graph_destroy(g);
}

/* Names with a newline, a tab and terminal escapes: messages stay one line
 * of printable bytes. hostile/names.onnx loads (for info), names_bad.onnx
 * fails naming the node. */
static void test_control_names(void) {
    const char *node = "r\npdonnx: forged\x1b[31m", *in = "x\tin\x1b]0;title\x07", *out = "y\r\x7f";
    mb *b = mb_new(13);
    b->g.name = S("graph\nname\x1b[2J");
    add_in(b, mk_vi(in, PD_FLOAT, "2"));
    add_node(b, mk_node("Relu", node, in, out));
    add_out(b, out);
    pd_graph *g = expect_load("a model whose names hold control bytes", save(b, "hostile/names.onnx"), NULL);
    pd_graph_destroy(g);

    b = mb_new(13);
    add_in(b, mk_vi(in, PD_FLOAT, "2"));
    add_node(b, mk_node("Add", node, fmt("%s,ghost\x1b[0m", in), out));
    add_out(b, out);
    g = SENTINEL;
    pd_status s = pd_graph_load_file(save(b, "hostile/names_bad.onnx"), NULL, &g);
    const char *msg = pd_last_error();
    CHECK(s != PD_OK && g == SENTINEL && printable(msg) && strstr(msg, "node 'r\\npdonnx: forged\\x1b[31m'"),
          "a bad node with control bytes in its name: one printable line, escaped: %s", msg);
}

/* Opsets that do not exist, and a model that imports none. */
static void test_opsets(void) {
    struct {
        const char *file, *domain;
        int64_t version;
        pd_status want;
        const char *needle;
    } cases[] = {
        {"opset_99", "", 99, PD_ERR_UNSUPPORTED, "opset 99 of domain 'ai.onnx'"},
        {"opset_0", "", 0, PD_ERR_UNSUPPORTED, "opset 0 of domain 'ai.onnx'"},
        {"opset_neg", "ai.onnx", -1, PD_ERR_UNSUPPORTED, "opset -1 of domain 'ai.onnx'"},
        {"opset_huge", "", (int64_t)1 << 62, PD_ERR_UNSUPPORTED, "opset 4611686018427387904 of domain 'ai.onnx'"},
        {"opset_28", "", 28, PD_ERR_UNSUPPORTED, "reads opsets 1 to 27"},
        {"opset_27", "", 27, PD_OK, NULL},
        {"opset_1", "", 1, PD_OK, NULL},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        mb *b = mb_new(cases[c].version);
        b->ops[0].domain = S(cases[c].domain);
        add_in(b, mk_vi("x", PD_FLOAT, "2"));
        add_node(b, mk_node("Relu", "r", "x", "y"));
        add_out(b, "y");
        const char *path = save(b, fmt("hostile/%s.onnx", cases[c].file));
        if (cases[c].want == PD_OK) {
            pd_graph_destroy(expect_load(fmt("opset %lld", (long long)cases[c].version), path, NULL));
            continue;
        }
        expect_fail(fmt("opset %lld", (long long)cases[c].version), path, NULL, cases[c].want, cases[c].needle,
                    fmt("%s.onnx", cases[c].file));
    }
    mb *b = mb_new(13);
    b->m.n_opset_import = 0;
    add_in(b, mk_vi("x", PD_FLOAT, "2"));
    add_node(b, mk_node("Relu", "r", "x", "y"));
    add_out(b, "y");
    expect_fail("no opset imported (IR version 8)", save(b, "hostile/opset_none.onnx"), NULL, PD_ERR_INVALID,
                "opset_none.onnx", "imports no opset");
    b->m.ir_version = 2; /* before opset_import existed: opset 1 */
    pd_graph *g = expect_load("no opset imported, IR version 2", save(b, "hostile/opset_ir2.onnx"), NULL);
    CHECK(g && g->opset == 1, "an IR version 2 model without imports is opset 1");
    pd_graph_destroy(g);

    b = mb_new(13);
    b->ops[0].domain = S("com.example");
    add_in(b, mk_vi("x", PD_FLOAT, "2"));
    add_node(b, mk_node("Relu", "r", "x", "y"));
    add_out(b, "y");
    expect_fail("a default-domain node in a model that imports only com.example", save(b, "hostile/opset_nodefault.onnx"),
                NULL, PD_ERR_INVALID, "node 'r' (Relu)", "does not import the default domain");
    b->ops[0].version = 0;
    expect_fail("domain com.example at version 0", save(b, "hostile/opset_custom0.onnx"), NULL, PD_ERR_INVALID,
                "'com.example'", "opset 0");
    b = mb_new(13);
    mb_domain(b, "ai.onnx.ml", 99);
    add_in(b, mk_vi("x", PD_FLOAT, "2"));
    add_node(b, mk_node("Relu", "r", "x", "y"));
    add_out(b, "y");
    expect_fail("ai.onnx.ml opset 99", save(b, "hostile/opset_ml99.onnx"), NULL, PD_ERR_UNSUPPORTED,
                "opset 99 of domain 'ai.onnx.ml'", NULL);
}

/* ConstantOfShape(shape) as the model's output: folding makes it at load. */
static mb *const_of_shape(const int64_t *shape, size_t rank) {
    mb *b = mb_new(13);
    Onnx__TensorProto *t = mk_tensor("shape", PD_INT64, fmt("%zu", rank));
    t->n_int64_data = rank;
    t->int64_data = al(sizeof(int64_t) * rank);
    memcpy(t->int64_data, shape, sizeof(int64_t) * rank);
    add_init(b, t);
    add_node(b, mk_node("ConstantOfShape", "cos", "shape", "big"));
    add_out(b, "big");
    return b;
}

/* A hundred bytes of model asking for a constant of 8 GiB: refused before any
 * of it is allocated, naming the node and the size; the cap can be raised. */
static void test_constant_cap(void) {
    const int64_t huge[1] = {(int64_t)1 << 31}, mid[2] = {1024, 1024};
    const char *path = save(const_of_shape(huge, 1), "hostile/const_8g.onnx");
    struct stat st;
    CHECK(stat(path, &st) == 0 && st.st_size < 128, "the 8 GiB ConstantOfShape model is %lld bytes",
          (long long)st.st_size);
    expect_fail("ConstantOfShape of 8 GiB", path, NULL, PD_ERR_UNSUPPORTED, "node 'cos' (ConstantOfShape)",
                "8589934592 bytes");
    const char *mpath = save(const_of_shape(mid, 2), "hostile/const_4m.onnx");
    pd_load_options o = PD_LOAD_OPTIONS_INIT;
    o.max_constant_bytes = 1 << 20;
    expect_fail("ConstantOfShape of 4 MiB, cap 1 MiB", mpath, &o, PD_ERR_UNSUPPORTED, "4194304 bytes",
                "cap of 1048576 bytes");
    o.max_constant_bytes = 4 << 20;
    pd_graph *g = expect_load("ConstantOfShape of 4 MiB, cap 4 MiB", mpath, &o);
    CHECK(g && T(g, "big") && T(g, "big")->data && T(g, "big")->kind == PD_T_CONST, "the 4 MiB constant is folded");
    pd_graph_destroy(g);
    pd_graph_destroy(expect_load("ConstantOfShape of 4 MiB, default cap", mpath, NULL));
    o.max_constant_bytes = -1;
    expect_fail("a negative cap", mpath, &o, PD_ERR_INVALID, "max_constant_bytes", NULL);

    /* Expand of a constant, twice: 2 x 2 MiB, the cap counts them together */
    mb *b = mb_new(13);
    const float one = 1;
    add_init(b, mk_f32("one", "", &one, 1));
    b->inits[0]->data_type = PD_INT64; /* an int64 initializer: never trained, so folded */
    b->inits[0]->n_float_data = 0;
    b->inits[0]->n_int64_data = 1;
    b->inits[0]->int64_data = al(sizeof(int64_t));
    b->inits[0]->int64_data[0] = 1;
    Onnx__TensorProto *t = mk_tensor("to", PD_INT64, "2");
    t->n_int64_data = 2;
    t->int64_data = al(2 * sizeof(int64_t));
    t->int64_data[0] = 512, t->int64_data[1] = 512;
    add_init(b, t);
    add_node(b, mk_node("Expand", "e1", "one,to", "a"));
    add_node(b, mk_node("Expand", "e2", "one,to", "c"));
    add_out(b, "a");
    add_out(b, "c");
    const char *epath = save(b, "hostile/expand.onnx");
    o.max_constant_bytes = 3 << 20;
    expect_fail("two Expands of 2 MiB each, cap 3 MiB", epath, &o, PD_ERR_UNSUPPORTED, "node 'e2' (Expand)", NULL);
    o.max_constant_bytes = 4 << 20;
    pd_graph_destroy(expect_load("two Expands of 2 MiB each, cap 4 MiB", epath, &o));
}

static void test_tensor_pb(void) {
    const float v[3] = {1, 2, 3};
    Onnx__TensorProto *t = mk_raw("input_name", PD_FLOAT, "3", v, sizeof v);
    size_t len = onnx__tensor_proto__get_packed_size(t);
    uint8_t *buf = al(len);
    onnx__tensor_proto__pack(t, buf);
    const char *path = fmt("%s/input_0.pb", tmp_root);
    write_file(path, buf, len);
    pd_tensor x;
    char *name = NULL;
    pd_status s = pd__tensor_pb_load(path, &x, &name);
    CHECK(s == PD_OK && x.dtype == PD_FLOAT && x.ndim == 1 && x.shape[0] == 3 &&
              memcmp(x.data, v, sizeof v) == 0 && name && strcmp(name, "input_name") == 0,
          "TensorProto file: values and name%s%s", s ? ": " : "", s ? pd_last_error() : "");
    if (s == PD_OK) pd_tensor_free(&x);
    free(name);

    const int32_t bv[4] = {0, 1, 0, 9};
    t = mk_i32("", PD_BOOL, "2,2", bv, 4);
    len = onnx__tensor_proto__get_packed_size(t);
    buf = al(len);
    onnx__tensor_proto__pack(t, buf);
    write_file(path, buf, len);
    s = pd__tensor_pb_load(path, &x, NULL);
    CHECK(s == PD_OK && x.dtype == PD_BOOL && x.ndim == 2 && ((uint8_t *)x.data)[3] == 1 &&
              ((uint8_t *)x.data)[2] == 0,
          "TensorProto file: bool from int32_data");
    if (s == PD_OK) pd_tensor_free(&x);

    write_file(path, buf, len / 2);
    pd_tensor keep = {PD_UNDEFINED, 0, {0}, NULL};
    x = keep;
    s = pd__tensor_pb_load(path, &x, NULL);
    CHECK(s == PD_ERR_PARSE && x.data == NULL && strstr(pd_last_error(), "input_0.pb"),
          "truncated TensorProto file: %s", pd_last_error());

    /* a SequenceProto: name (field 1, bytes), elem_type 1, one tensor (field 3) */
    static const uint8_t seq[] = {0x0a, 0x03, 's', 'e', 'q', 0x10, 0x01, 0x1a, 0x04, 0x08, 0x01, 0x10, 0x01};
    write_file(path, seq, sizeof seq);
    s = pd__tensor_pb_load(path, &x, NULL);
    CHECK(s == PD_ERR_UNSUPPORTED && strstr(pd_last_error(), "input_0.pb"), "SequenceProto file refused: %s",
          pd_last_error());
    static const uint8_t unnamed[] = {0x10, 0x01, 0x1a, 0x04, 0x08, 0x01, 0x10, 0x01};
    write_file(path, unnamed, sizeof unnamed);
    s = pd__tensor_pb_load(path, &x, NULL);
    CHECK(s == PD_ERR_UNSUPPORTED, "unnamed SequenceProto file refused: %s", pd_last_error());
    s = pd__tensor_pb_load(fmt("%s/nope.pb", tmp_root), &x, NULL);
    CHECK(s == PD_ERR_IO && strstr(pd_last_error(), "nope.pb"), "missing TensorProto file: %s",
          pd_last_error());
}

/* ---- control flow (onnx/flow.c) --------------------------------------------------- */

static Onnx__TensorProto *mk_i64(const char *name, const char *dims, const int64_t *v, size_t n) {
    return mk_raw(name, PD_INT64, dims, v, n * sizeof *v);
}

/* A subgraph: a model builder's graph, its inputs and outputs declared as float. */
static Onnx__GraphProto *sub(mb *b) { return &b->g; }

static void graph_attr(Onnx__NodeProto *n, const char *name, mb *body) {
    Onnx__AttributeProto *a = mk_attr(n, name, PD_A_GRAPH);
    a->g = sub(body);
}

/* Loop M times: y += 1, y starting at [1, 2]; the body names its output
 * "y_out", and the outer graph holds a tensor named as its renamed copy
 * would be ("L/0/y_out"): the copies take other names. */
static mb *loop_model(int64_t M, bool runtime_cond) {
    mb *b = mb_new(13);
    const int64_t y0[2] = {1, 2}, clash[2] = {100, 200}, one = 1; /* int64: folded at load */
    const uint8_t yes = 1;
    add_init(b, mk_i64("M", "", &M, 1));
    add_init(b, mk_raw("c", PD_BOOL, "", &yes, 1));
    add_init(b, mk_i64("y0", "2", y0, 2));
    add_init(b, mk_i64("L/0/y_out", "2", clash, 2));
    mb *body = mb_new(13);
    add_in(body, mk_vi("i", PD_INT64, ""));
    add_in(body, mk_vi("cond", PD_BOOL, ""));
    add_in(body, mk_vi("y", PD_INT64, "2"));
    add_init(body, mk_i64("one", "", &one, 1));
    add_node(body, mk_node("Add", "inc", "y,one", "y_out"));
    if (runtime_cond) { /* the condition is computed from the runtime input x */
        add_node(body, mk_node("ReduceSum", "rs", "x", "xs0"));
        Onnx__NodeProto *cast = mk_node("Cast", "toint", "xs0", "xs");
        Onnx__AttributeProto *to = mk_attr(cast, "to", PD_A_INT);
        to->has_i = 1;
        to->i = PD_INT64;
        add_node(body, cast);
        add_node(body, mk_node("Greater", "gt", "xs,one", "cond_out"));
    } else {
        add_node(body, mk_node("Identity", "keep", "cond", "cond_out"));
    }
    add_out(body, "cond_out");
    add_out(body, "y_out");
    if (runtime_cond) add_in(b, mk_vi("x", PD_FLOAT, "2"));
    Onnx__NodeProto *n = mk_node("Loop", "L", "M,c,y0", "y");
    graph_attr(n, "body", body);
    add_node(b, n);
    add_node(b, mk_node("Add", "plus", "y,L/0/y_out", "z"));
    add_out(b, "z");
    return b;
}

/* A branch returning Identity(x) as r. */
static mb *id_branch(const char *r) {
    mb *br = mb_new(13);
    add_node(br, mk_node("Identity", NULL, "x", r));
    add_out(br, r);
    return br;
}

/* If nested depth levels deep: each then_branch holds the next If, the innermost returns x. */
static mb *nested_if(int depth) {
    mb *inner = NULL;
    for (int d = depth; d >= 0; d--) {
        mb *br = id_branch(fmt("r%d", d));
        if (inner) {
            br = mb_new(13);
            Onnx__NodeProto *n = mk_node("If", fmt("if%d", d + 1), "c", fmt("r%d", d));
            graph_attr(n, "then_branch", inner);
            graph_attr(n, "else_branch", id_branch(fmt("e%d", d)));
            add_node(br, n);
            add_out(br, fmt("r%d", d));
        }
        inner = br;
    }
    mb *b = mb_new(13);
    const uint8_t yes = 1;
    add_init(b, mk_raw("c", PD_BOOL, "", &yes, 1));
    add_in(b, mk_vi("x", PD_FLOAT, "2"));
    Onnx__NodeProto *n = mk_node("If", "if0", "c", "y");
    graph_attr(n, "then_branch", inner);
    graph_attr(n, "else_branch", id_branch("e"));
    add_node(b, n);
    add_out(b, "y");
    return b;
}

static void test_control_flow(void) {
    pd_graph *g = expect_load("Loop of 3, a name that clashes with a renamed copy", save(loop_model(3, false), "loop3.onnx"),
                              NULL);
    const pd__tensor *z = g ? T(g, "z") : NULL;
    CHECK(z && z->data && ((int64_t *)z->data)[0] == 104 && ((int64_t *)z->data)[1] == 205,
          "Loop of 3 folds to [1, 2] + 3 + [100, 200] = [104, 205]");
    int ones = 0;
    for (int t = 0; g && t < g->ntensors; t++) ones += strstr(g->tensors[t].name, "/one") != NULL;
    CHECK(ones == 1, "the body's initializer is decoded once for the 3 iterations (%d copies)", ones);
    pd_graph_destroy(g);
    expect_fail("Loop of 10^6 iterations", save(loop_model(1000000, false), "hostile/loop_1e6.onnx"), NULL,
                PD_ERR_UNSUPPORTED, "node 'L' (Loop)", "past 4096 iterations");
    expect_fail("Loop whose condition depends on a runtime input", save(loop_model(3, true), "hostile/loop_data.onnx"),
                NULL, PD_ERR_UNSUPPORTED, "node 'L' (Loop)", "data-dependent loop");

    pd_graph_destroy(expect_load("If nested 15 deep", save(nested_if(15), "if_15.onnx"), NULL));
    expect_fail("If nested 20 deep", save(nested_if(20), "hostile/if_20.onnx"), NULL, PD_ERR_UNSUPPORTED,
                "node 'if0' (If)", "nest deeper than 16");

    /* a branch giving two outputs to an If of one; a branch reading a name nobody defines */
    mb *b = mb_new(13), *tb = mb_new(13), *eb = mb_new(13);
    const uint8_t yes = 1;
    add_init(b, mk_raw("c", PD_BOOL, "", &yes, 1));
    add_in(b, mk_vi("x", PD_FLOAT, "2"));
    add_node(tb, mk_node("Identity", "t1", "x", "a"));
    add_node(tb, mk_node("Identity", "t2", "x", "b"));
    add_out(tb, "a");
    add_out(tb, "b");
    add_node(eb, mk_node("Identity", "e1", "x", "e"));
    add_out(eb, "e");
    Onnx__NodeProto *n = mk_node("If", "sel", "c", "y");
    graph_attr(n, "then_branch", tb);
    graph_attr(n, "else_branch", eb);
    add_node(b, n);
    add_out(b, "y");
    expect_fail("If whose branch has two outputs for one", save(b, "hostile/if_count.onnx"), NULL, PD_ERR_INVALID,
                "node 'sel' (If)", "then_branch 2");
    /* a condition known only at run time, and branches of different shapes */
    mb *rb = mb_new(13), *rt = id_branch("a"), *re = mb_new(13);
    add_in(rb, mk_vi("x", PD_FLOAT, "2"));
    add_in(rb, mk_vi("rc", PD_BOOL, ""));
    Onnx__NodeProto *cat = mk_node("Concat", "twice", "x,x", "e");
    Onnx__AttributeProto *ax = mk_attr(cat, "axis", PD_A_INT);
    ax->has_i = 1;
    add_node(re, cat);
    add_out(re, "e");
    Onnx__NodeProto *rif = mk_node("If", "rsel", "rc", "y");
    graph_attr(rif, "then_branch", rt);
    graph_attr(rif, "else_branch", re);
    add_node(rb, rif);
    add_out(rb, "y");
    expect_fail("If on a runtime condition whose branches differ in shape", save(rb, "hostile/if_shapes.onnx"), NULL,
                PD_ERR_UNSUPPORTED, "node 'rsel' (If)", "float32 [2] and float32 [4]");

    tb->g.n_output = 1;
    eb->nodes[0]->input[0] = S("nowhere");
    expect_fail("If whose branch reads an undefined name", save(b, "hostile/if_undef.onnx"), NULL, PD_ERR_INVALID,
                "node 'sel' (If)", "'nowhere'");
}

/* test_loader [DIR]: with DIR, the models are written there and kept (the CLI
 * test runs pdonnx on them). */
/* y = (x W) * s + b, trained with mse from one session per option set:
 * which initializers the session trains and lists as untrained. */
static void trainable_case(const char *label, const char *path, const char *freeze, const char *trainable,
                           const char *want_params, const char *want_untrained) {
    pd_load_options lo = PD_LOAD_OPTIONS_INIT;
    pd_graph *g = NULL;
    pd_session *s = NULL;
    pd_train_options to = PD_TRAIN_OPTIONS_INIT;
    to.loss = PD_LOSS_MSE;
    to.freeze = freeze;
    to.trainable = trainable;
    char params[256] = "", untrained[256] = "";
    pd_status st = pd_graph_load_file(path, &lo, &g);
    if (st == PD_OK) st = pd_session_create(g, &to, &s);
    for (int i = 0; st == PD_OK && i < pd_session_num_params(s); i++) {
        const char *name;
        if (pd_session_param(s, i, &name, NULL, NULL) == PD_OK)
            snprintf(params + strlen(params), sizeof params - strlen(params), "%s%s", i ? "," : "", name);
    }
    for (int i = 0; st == PD_OK && i < pd_session_num_untrained(s); i++) {
        pd_value_info v;
        const char *why;
        if (pd_session_untrained(s, i, &v, &why) == PD_OK)
            snprintf(untrained + strlen(untrained), sizeof untrained - strlen(untrained), "%s%s(%s)", i ? "," : "",
                     v.name, why);
    }
    CHECK(st == PD_OK && !strcmp(params, want_params) && !strcmp(untrained, want_untrained),
          "trainable: %s: trains [%s], not [%s] %s", label, params, untrained, st == PD_OK ? "" : pd_last_error());
    pd_session_destroy(s);
    pd_graph_destroy(g);
}

static void test_trainable(void) {
    static const float w[6] = {0.1f, -0.2f, 0.3f, 0.4f, -0.5f, 0.6f}, sc[1] = {0.5f}, bias[2] = {0.1f, -0.1f};
    mb *b = mb_new(17);
    add_in(b, mk_vi("x", PD_FLOAT, "4,3"));
    add_init(b, mk_f32("W", "3,2", w, 6));
    add_init(b, mk_f32("s", "", sc, 1)); /* the dynamo exporter's kind of constant: a float scalar initializer */
    add_init(b, mk_f32("b", "2", bias, 2));
    add_node(b, mk_node("MatMul", "mm", "x,W", "h"));
    add_node(b, mk_node("Mul", "scale", "h,s", "hs"));
    add_node(b, mk_node("Add", "bias", "hs,b", "y"));
    add_out(b, "y");
    const char *plain = save(b, "trainable.onnx");
    trainable_case("the default", plain, NULL, NULL, "W,b", "s(one element: an exporter's constant)");
    trainable_case("trainable names the scalar", plain, NULL, "^s$", "W,s,b", "");
    trainable_case("freeze wins over trainable", plain, "^(s|W)$", "^s$", "b",
                   "W(the freeze pattern matches it),s(the freeze pattern matches it)");

    /* a saved model says what was trained (training_info), and loading it trains the same set */
    {
        pd_load_options lo = PD_LOAD_OPTIONS_INIT;
        pd_train_options to = PD_TRAIN_OPTIONS_INIT;
        to.loss = PD_LOSS_MSE;
        pd_graph *g = NULL;
        pd_session *s = NULL;
        const char *saved = fmt("%s/trained.onnx", tmp_root);
        bool ok = pd_graph_load_file(plain, &lo, &g) == PD_OK && pd_session_create(g, &to, &s) == PD_OK &&
                  pd_graph_save(g, saved) == PD_OK;
        pd_session_destroy(s);
        pd_graph_destroy(g);
        CHECK(ok, "trainable: a trained model saves: %s", ok ? "yes" : pd_last_error());
        trainable_case("the saved model's training_info", saved, NULL, NULL, "W,b",
                       "s(the model's training_info does not list it)");
    }

    /* the model's own answer: training_info's update_binding lists W only */
    static const Onnx__TrainingInfoProto tinit = ONNX__TRAINING_INFO_PROTO__INIT;
    static const Onnx__StringStringEntryProto einit = ONNX__STRING_STRING_ENTRY_PROTO__INIT;
    Onnx__TrainingInfoProto *ti = al(sizeof *ti);
    *ti = tinit;
    Onnx__StringStringEntryProto *e = al(sizeof *e);
    *e = einit;
    e->key = S("W");
    e->value = S("W_new");
    ti->n_update_binding = 1;
    ti->update_binding = al(sizeof(void *));
    ti->update_binding[0] = e;
    b->m.n_training_info = 1;
    b->m.training_info = al(sizeof(void *));
    b->m.training_info[0] = ti;
    const char *listed = save(b, "training_info.onnx");
    trainable_case("training_info lists W", listed, NULL, NULL, "W",
                   "s(the model's training_info does not list it),b(the model's training_info does not list it)");
    trainable_case("training_info, and trainable names b", listed, NULL, "^b$", "W,b",
                   "s(the model's training_info does not list it)");
}

/* The TorchScript exporter's ties: b2 = Identity(b1), two biases of equal
 * values stored once. Reported either way; untie gives b2 its own values,
 * trained on their own. */
static void test_ties(void) {
    static const float w[4] = {0.5f, -0.25f, 0.75f, 1.0f}, zero[2] = {0.01f, 0.01f};
    mb *b = mb_new(17);
    add_in(b, mk_vi("x", PD_FLOAT, "4,2"));
    add_init(b, mk_f32("W1", "2,2", w, 4));
    add_init(b, mk_f32("W2", "2,2", w, 4));
    add_init(b, mk_f32("b1", "2", zero, 2));
    add_node(b, mk_node("Identity", "tie", "b1", "b2"));
    add_node(b, mk_node("MatMul", "m1", "x,W1", "h1"));
    add_node(b, mk_node("Add", "a1", "h1,b1", "h2"));
    add_node(b, mk_node("Tanh", "t", "h2", "h3"));
    add_node(b, mk_node("MatMul", "m2", "h3,W2", "h4"));
    add_node(b, mk_node("Add", "a2", "h4,b2", "y"));
    add_out(b, "y");
    const char *path = save(b, "tied.onnx");
    for (int untie = 0; untie <= 1; untie++) {
        pd_load_options lo = PD_LOAD_OPTIONS_INIT;
        lo.untie = untie;
        pd_train_options to = PD_TRAIN_OPTIONS_INIT;
        to.loss = PD_LOSS_MSE;
        pd_graph *g = NULL;
        pd_session *s = NULL;
        const char *alias = "", *source = "";
        bool ok = pd_graph_load_file(path, &lo, &g) == PD_OK && pd_graph_num_tied(g) == 1 &&
                  pd_graph_tied(g, 0, &alias, &source) == PD_OK && !strcmp(alias, "b2") && !strcmp(source, "b1") &&
                  pd_session_create(g, &to, &s) == PD_OK;
        char names[128] = "";
        for (int i = 0; ok && i < pd_session_num_params(s); i++) {
            const char *nm;
            if (pd_session_param(s, i, &nm, NULL, NULL) != PD_OK) continue;
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? "," : "", nm);
        }
        /* one step: tied, b1 moves by both Adds' gradients; untied, b1 and b2 each by their own */
        float xv[8] = {1, 2, -1, 0.5f, 0.25f, -2, 1, 1}, yv[8] = {0};
        int64_t sx[2] = {4, 2};
        pd_tensor X = {PD_FLOAT, 2, {sx[0], sx[1]}, xv}, Y = {PD_FLOAT, 2, {sx[0], sx[1]}, yv};
        pd_step_result r;
        ok = ok && pd_session_set_input(s, "x", &X) == PD_OK && pd_session_set_labels(s, &Y) == PD_OK &&
             pd_session_step(s, &r) == PD_OK;
        bool differ = false;
        if (ok && untie) {
            pd_tensor t1 = {0}, t2 = {0};
            for (int i = 0; i < pd_session_num_params(s); i++) {
                const char *nm;
                pd_tensor t;
                if (pd_session_param(s, i, &nm, &t, NULL) != PD_OK) continue;
                if (!strcmp(nm, "b1")) t1 = t;
                if (!strcmp(nm, "b2")) t2 = t;
            }
            differ = t1.data && t2.data && ((float *)t1.data)[0] != ((float *)t2.data)[0];
        }
        CHECK(ok && !strcmp(names, untie ? "W1,W2,b1,b2" : "W1,W2,b1") && (!untie || differ),
              "ties: b2 = Identity(b1) is reported; %s it trains [%s]%s %s", untie ? "untied," : "tied,", names,
              untie ? (differ ? ", b1 and b2 apart after a step" : ", b1 == b2 after a step") : "",
              ok ? "" : pd_last_error());
        pd_session_destroy(s);
        pd_graph_destroy(g);
    }
}

/* A tied LM head as both of PyTorch's exporters write it: the head is a
 * second initializer, the embedding's transpose. Tied (the default) it is
 * Transpose(emb.weight) and one tensor trains, moved by both uses'
 * gradients: after one step, emb.weight is where the untied run's emb.weight
 * and head would be summed (E_u + H_u^T - E). Saved, the file's head holds
 * the trained embedding's transpose. Equal values (fresh zeros) are no tie. */
static void test_transposed_ties(void) {
    static const float e[15] = {0.1f, -0.2f, 0.3f, 0.4f, 0.5f, -0.6f, 0.7f, 0.8f,
                                -0.9f, 0.15f, 0.25f, -0.35f, 0.45f, 0.55f, 0.65f}; /* 5 x 3 */
    float h[15], z1[6] = {0}, z2[6] = {0};
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 3; j++) h[j * 5 + i] = e[i * 3 + j];
    mb *b = mb_new(17);
    add_in(b, mk_vi("x", PD_FLOAT, "4,5"));
    add_init(b, mk_f32("emb.weight", "5,3", e, 15));
    add_init(b, mk_f32("onnx::MatMul_9", "3,5", h, 15));
    add_init(b, mk_f32("za", "2,3", z1, 6)); /* zeros against zeros transposed: no tie */
    add_init(b, mk_f32("zb", "3,2", z2, 6));
    add_node(b, mk_node("MatMul", "m1", "x,emb.weight", "h1"));
    add_node(b, mk_node("Tanh", "t", "h1", "h2"));
    add_node(b, mk_node("MatMul", "m2", "h2,onnx::MatMul_9", "h3"));
    add_node(b, mk_node("MatMul", "mz", "za,zb", "hz"));
    add_node(b, mk_node("ReduceSum", "rz", "hz", "sz"));
    add_node(b, mk_node("Add", "a", "h3,sz", "y"));
    add_out(b, "y");
    const char *path = save(b, "tied_transposed.onnx");
    float xv[20], yv[20] = {0}, E[2][15], H[15];
    for (int i = 0; i < 20; i++) xv[i] = (float)((i * 7 % 11) - 5) * 0.1f;
    pd_tensor X = {PD_FLOAT, 2, {4, 5}, xv}, Y = {PD_FLOAT, 2, {4, 5}, yv};
    const double lr = 0.1;
    bool ok = true;
    for (int untie = 1; untie >= 0; untie--) {
        pd_load_options lo = PD_LOAD_OPTIONS_INIT;
        lo.untie = untie;
        pd_train_options to = PD_TRAIN_OPTIONS_INIT;
        to.loss = PD_LOSS_MSE;
        to.optimizer = PD_OPT_SGD;
        to.lr = lr;
        pd_graph *g = NULL;
        pd_session *s = NULL;
        const char *alias = "", *source = "";
        pd_step_result r;
        bool k = pd_graph_load_file(path, &lo, &g) == PD_OK && pd_graph_num_tied(g) == 1 &&
                 pd_graph_tied(g, 0, &alias, &source) == PD_OK && !strcmp(alias, "onnx::MatMul_9") &&
                 !strcmp(source, "emb.weight") && pd_graph_tied_transposed(g, 0) == 1 &&
                 pd_session_create(g, &to, &s) == PD_OK && pd_session_set_input(s, "x", &X) == PD_OK &&
                 pd_session_set_labels(s, &Y) == PD_OK && pd_session_step(s, &r) == PD_OK;
        char names[128] = "";
        for (int i = 0; k && i < pd_session_num_params(s); i++) {
            const char *nm;
            pd_tensor t;
            if (pd_session_param(s, i, &nm, &t, NULL) != PD_OK) continue;
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? "," : "", nm);
            if (!strcmp(nm, "emb.weight")) memcpy(E[untie], t.data, sizeof E[0]);
            if (!strcmp(nm, "onnx::MatMul_9")) memcpy(H, t.data, sizeof H);
        }
        const char *want = untie ? "emb.weight,onnx::MatMul_9,za,zb" : "emb.weight,za,zb";
        CHECK(k && !strcmp(names, want), "transposed tie reported; %s, it trains [%s] %s",
              untie ? "untied" : "tied", names, k ? "" : pd_last_error());
        ok = ok && k;
        if (k && !untie) {
            double worst = 0;
            for (int i = 0; i < 5; i++)
                for (int j = 0; j < 3; j++) {
                    double want_e = (double)E[1][i * 3 + j] + H[j * 5 + i] - e[i * 3 + j];
                    worst = fmax(worst, fabs(E[0][i * 3 + j] - want_e));
                }
            CHECK(worst <= 1e-6, "transposed tie: the tied step adds both uses' gradients (max error %.3g)", worst);
            pd_session_destroy(s);
            s = NULL;
            char *out = fmt("%s/tied_transposed_trained.onnx", tmp_root);
            pd_graph *g2 = NULL;
            pd_load_options l1 = PD_LOAD_OPTIONS_INIT;
            l1.untie = 1;
            pd_session *s2 = NULL;
            bool same = pd_graph_save(g, out) == PD_OK && pd_graph_load_file(out, &l1, &g2) == PD_OK &&
                        pd_session_create(g2, &to, &s2) == PD_OK;
            for (int i = 0; same && i < pd_session_num_params(s2); i++) {
                const char *nm;
                pd_tensor t;
                if (pd_session_param(s2, i, &nm, &t, NULL) != PD_OK) continue;
                if (strcmp(nm, "onnx::MatMul_9")) continue;
                for (int a = 0; a < 5; a++)
                    for (int c = 0; c < 3; c++) same = same && ((float *)t.data)[c * 5 + a] == E[0][a * 3 + c];
            }
            CHECK(same, "transposed tie: the saved file's head is the trained embedding's transpose %s",
                  same ? "" : pd_last_error());
            pd_session_destroy(s2);
            pd_graph_destroy(g2);
        }
        pd_session_destroy(s);
        pd_graph_destroy(g);
    }
}

/* A causal mask as GPT-2's and Llama's exports build it, from Shape alone:
 * Shape, Gather, Range, Unsqueeze, LessOrEqual, Not, Where. With the shapes
 * known at load every node of it folds: the graph left is the two nodes that
 * read the data (issue 18: shape-only subgraphs cost nothing per step). */
static void test_mask_folds(void) {
    static const int64_t one = 1, zero = 0, ax0 = 0, ax1 = 1;
    static const float neg = -1e9f, fz = 0;
    mb *b = mb_new(17);
    add_in(b, mk_vi("x", PD_FLOAT, "batch,5"));
    add_init(b, mk_raw("i1", PD_INT64, "", &one, 8));
    add_init(b, mk_raw("i0", PD_INT64, "", &zero, 8));
    add_init(b, mk_raw("a0", PD_INT64, "1", &ax0, 8));
    add_init(b, mk_raw("a1", PD_INT64, "1", &ax1, 8));
    add_init(b, mk_raw("neg", PD_FLOAT, "", &neg, 4));
    add_init(b, mk_raw("fz", PD_FLOAT, "", &fz, 4));
    add_node(b, mk_node("Shape", "shape", "x", "s"));
    add_node(b, mk_node("Gather", "len", "s,i1", "T"));
    add_node(b, mk_node("Range", "range", "i0,T,i1", "r"));
    add_node(b, mk_node("Unsqueeze", "row", "r,a0", "r0"));
    add_node(b, mk_node("Unsqueeze", "col", "r,a1", "r1"));
    add_node(b, mk_node("LessOrEqual", "le", "r0,r1", "keep"));
    add_node(b, mk_node("Not", "not", "keep", "drop"));
    add_node(b, mk_node("Where", "bias", "drop,neg,fz", "mask"));
    add_node(b, mk_node("Unsqueeze", "x3", "x,a1", "xs"));
    add_node(b, mk_node("Add", "add", "xs,mask", "y"));
    add_out(b, "y");
    pd_load_options o = PD_LOAD_OPTIONS_INIT;
    o.batch = 3;
    pd_graph *g = expect_load("a causal mask from Shape", save(b, "mask.onnx"), &o);
    if (!g) return;
    char ops[256] = "";
    for (int i = 0; i < pd_graph_num_nodes(g); i++) {
        pd_node_info ni;
        if (pd_graph_node(g, i, &ni) != PD_OK) continue;
        snprintf(ops + strlen(ops), sizeof ops - strlen(ops), "%s%s", i ? "," : "", ni.op_type);
    }
    pd_value_info y;
    CHECK(!strcmp(ops, "Unsqueeze,Add") && pd_graph_value(g, "y", &y) == PD_OK && shape_is(y.ndim, y.shape, "3,5,5"),
          "a causal mask built from Shape folds at load: the nodes left are [%s]", ops);
    pd_graph_destroy(g);
}

/* GELU as PyTorch's exporters write it below opset 20,
 *   Mul(Mul(h, Add(Erf(Div(h, sqrt 2)), 1)), 0.5),
 * becomes one Gelu node at load, and trains as the five nodes do: the loss
 * and gradient norm of a step with and without folding (fold_constants 0
 * keeps the nodes) agree to float rounding. The exported GPT fixture's
 * trajectories against PyTorch (test_train) run through the fused node too.
 * A chain with an intermediate someone else reads stays as it is. */
static pd_status gelu_step(const char *path, int fold, char *ops, size_t cap, pd_step_result *r) {
    pd_load_options o = PD_LOAD_OPTIONS_INIT;
    o.fold_constants = fold;
    pd_graph *g = NULL;
    pd_session *s = NULL;
    pd_train_options t = PD_TRAIN_OPTIONS_INIT;
    t.loss = PD_LOSS_CROSS_ENTROPY;
    t.threads = 1;
    float x[4 * 6];
    int64_t y[4] = {0, 3, 5, 2};
    for (int i = 0; i < 24; i++) x[i] = (float)((i * 7) % 11) / 5.0f - 1.0f;
    pd_tensor xt = {PD_FLOAT, 2, {4, 6}, x}, yt = {PD_INT64, 1, {4}, y};
    pd_status st = pd_graph_load_file(path, &o, &g);
    if (st == PD_OK) {
        ops[0] = 0;
        for (int i = 0; i < pd_graph_num_nodes(g); i++) {
            pd_node_info ni;
            if (pd_graph_node(g, i, &ni) != PD_OK) continue;
            snprintf(ops + strlen(ops), cap - strlen(ops), "%s%s", i ? "," : "", ni.op_type);
        }
        st = pd_session_create(g, &t, &s);
    }
    if (st == PD_OK) st = pd_session_set_input(s, "x", &xt);
    if (st == PD_OK) st = pd_session_set_labels(s, &yt);
    if (st == PD_OK) st = pd_session_step(s, r);
    pd_session_destroy(s);
    pd_graph_destroy(g);
    return st;
}

static void test_gelu_fuses(void) {
    float w[36];
    for (int i = 0; i < 36; i++) w[i] = (float)((i * 5) % 13) / 6.0f - 1.0f;
    const float sqrt2 = 1.41421356f, one = 1.0f, half = 0.5f;
    for (int shared = 0; shared < 2; shared++) {
        mb *b = mb_new(17);
        add_in(b, mk_vi("x", PD_FLOAT, "4,6"));
        add_init(b, mk_raw("W", PD_FLOAT, "6,6", w, sizeof w));
        add_init(b, mk_raw("sqrt2", PD_FLOAT, "", &sqrt2, 4));
        add_init(b, mk_raw("one", PD_FLOAT, "", &one, 4));
        add_init(b, mk_raw("half", PD_FLOAT, "", &half, 4));
        add_node(b, mk_node("MatMul", "fc", "x,W", "h"));
        add_node(b, mk_node("Div", "div", "h,sqrt2", "d"));
        add_node(b, mk_node("Erf", "erf", "d", "e"));
        add_node(b, mk_node("Add", "add", "e,one", "a"));
        add_node(b, mk_node("Mul", "mul", "h,a", "m"));
        add_node(b, mk_node("Mul", "gelu", "m,half", shared ? "g" : "y"));
        if (shared) add_node(b, mk_node("Add", "plus_erf", "g,e", "y")); /* e read twice: no fusion */
        add_out(b, "y");
        const char *path = save(b, shared ? "gelu_shared.onnx" : "gelu.onnx");
        char fused[256], kept[256];
        pd_step_result rf, rk;
        pd_status a = gelu_step(path, 1, fused, sizeof fused, &rf), c = gelu_step(path, 0, kept, sizeof kept, &rk);
        const char *all = shared ? "MatMul,Div,Erf,Add,Mul,Mul,Add" : "MatMul,Div,Erf,Add,Mul,Mul";
        CHECK(a == PD_OK && c == PD_OK && !strcmp(fused, shared ? all : "MatMul,Gelu") && !strcmp(kept, all) &&
                  fabs(rf.loss - rk.loss) <= 1e-6 * fabs(rk.loss) &&
                  fabs(rf.grad_norm - rk.grad_norm) <= 1e-5 * rk.grad_norm,
              "GELU's five exported nodes %s: [%s]; loss %.9g and gradient norm %.9g, without folding %.9g and %.9g %s",
              shared ? "stay when an intermediate is read twice" : "become one Gelu", fused, rf.loss, rf.grad_norm,
              rk.loss, rk.grad_norm, a == PD_OK && c == PD_OK ? "" : pd_last_error());
    }
}

/* nn.Linear on a 3-D activation as PyTorch exports it for training,
 * Add(MatMul(x, Transpose(W)), b), becomes Gemm(x, W, b, transB=1) at
 * load and trains as the three nodes do (loss and gradient norm of a step
 * with and without folding agree to float rounding). A Transpose someone
 * else reads stays. */
static pd_status linear_step(const char *path, int fold, char *ops, size_t cap, pd_step_result *r) {
    pd_load_options o = PD_LOAD_OPTIONS_INIT;
    o.fold_constants = fold;
    pd_graph *g = NULL;
    pd_session *s = NULL;
    pd_train_options t = PD_TRAIN_OPTIONS_INIT;
    t.loss = PD_LOSS_MSE;
    t.threads = 1;
    float x[2 * 3 * 4], y[2 * 3 * 5];
    for (int i = 0; i < 24; i++) x[i] = (float)((i * 7) % 11) / 5.0f - 1.0f;
    for (int i = 0; i < 30; i++) y[i] = (float)((i * 3) % 7) / 4.0f - 0.5f;
    pd_tensor xt = {PD_FLOAT, 3, {2, 3, 4}, x}, yt = {PD_FLOAT, 3, {2, 3, 5}, y};
    pd_status st = pd_graph_load_file(path, &o, &g);
    if (st == PD_OK) {
        ops[0] = 0;
        for (int i = 0; i < pd_graph_num_nodes(g); i++) {
            pd_node_info ni;
            if (pd_graph_node(g, i, &ni) != PD_OK) continue;
            snprintf(ops + strlen(ops), cap - strlen(ops), "%s%s", i ? "," : "", ni.op_type);
        }
        st = pd_session_create(g, &t, &s);
    }
    if (st == PD_OK) st = pd_session_set_input(s, "x", &xt);
    if (st == PD_OK) st = pd_session_set_labels(s, &yt);
    if (st == PD_OK) st = pd_session_step(s, r);
    pd_session_destroy(s);
    pd_graph_destroy(g);
    return st;
}

static void test_linear_fuses(void) {
    float w[5 * 4], bias[5];
    for (int i = 0; i < 20; i++) w[i] = (float)((i * 5) % 13) / 6.0f - 1.0f;
    for (int i = 0; i < 5; i++) bias[i] = 0.25f * (float)i - 0.5f;
    for (int shared = 0; shared < 2; shared++) {
        mb *b = mb_new(17);
        add_in(b, mk_vi("x", PD_FLOAT, "2,3,4"));
        add_init(b, mk_raw("W", PD_FLOAT, "5,4", w, sizeof w));
        add_init(b, mk_raw("b", PD_FLOAT, "5", bias, sizeof bias));
        add_node(b, mk_node("Transpose", "t", "W", "Wt"));
        add_node(b, mk_node("MatMul", "mm", "x,Wt", "h"));
        add_node(b, mk_node("Add", "fc", "b,h", shared ? "z" : "y"));
        if (shared) add_node(b, mk_node("ReduceSum", "wsum", "Wt", "s")); /* Wt read twice: no fusion */
        if (shared) add_node(b, mk_node("Add", "plus", "z,s", "y"));
        add_out(b, "y");
        const char *path = save(b, shared ? "linear_shared.onnx" : "linear.onnx");
        char fused[256], kept[256];
        pd_step_result rf, rk;
        pd_status a = linear_step(path, 1, fused, sizeof fused, &rf), c = linear_step(path, 0, kept, sizeof kept, &rk);
        const char *all = shared ? "Transpose,MatMul,ReduceSum,Add,Add" : "Transpose,MatMul,Add";
        CHECK(a == PD_OK && c == PD_OK && !strcmp(fused, shared ? all : "Gemm") && !strcmp(kept, all) &&
                  rk.loss > 0.1 && fabs(rf.loss - rk.loss) <= 1e-6 * fabs(rk.loss) &&
                  fabs(rf.grad_norm - rk.grad_norm) <= 1e-5 * rk.grad_norm,
              "Linear's exported Transpose, MatMul, Add %s: [%s]; loss %.9g and gradient norm %.9g, without folding "
              "%.9g and %.9g %s",
              shared ? "stay when W's transpose is read twice" : "become one Gemm", fused, rf.loss, rf.grad_norm,
              rk.loss, rk.grad_norm, a == PD_OK && c == PD_OK ? "" : pd_last_error());
    }
}

/* A plan written for the file's nodes (by hand, or by a pdonnx that did not
 * fuse nn.Linear) still places the fused Gemm: it answers to the names of
 * the Transpose and MatMul it absorbed and runs where the last of them ran
 * (stage 2 here: the MatMul on 1, the Add on 2); a plan naming a node the
 * model lacks, or leaving one out, is one error naming the node and the plan. */
static pd_status match_plan(pd_graph *g, const char *nodes, const char *stages, int *fwd) {
    char json[1024];
    snprintf(json, sizeof json,
             "{\"format\": \"pdonnx-plan\", \"workers\": 3, \"nodes\": [%s], \"stages\": [{\"fwd_ms\": 1, "
             "\"bwd_in_ms\": 1, \"bwd_w_ms\": 0, \"nodes\": [%s]}]}",
             nodes, stages);
    pd_plan *pl = NULL;
    pd_status st = pd__plan_from_json(json, strlen(json), "old_plan.json", &pl);
    if (st == PD_OK) st = pd__plan_match(pl, g, "old_plan.json");
    for (int i = 0; st == PD_OK && i < g->nnodes; i++) fwd[i] = pl->n_nodes == g->nnodes ? pl->fwd_stage[i] : -9;
    pd__plan_free(pl);
    return st;
}

static void test_linear_plans(void) {
    float w[5 * 4] = {0}, bias[5] = {0};
    mb *b = mb_new(17);
    add_in(b, mk_vi("x", PD_FLOAT, "2,3,4"));
    add_init(b, mk_raw("W", PD_FLOAT, "5,4", w, sizeof w));
    add_init(b, mk_raw("b", PD_FLOAT, "5", bias, sizeof bias));
    add_node(b, mk_node("Relu", "r", "x", "xr"));
    add_node(b, mk_node("Transpose", "t", "W", "Wt"));
    add_node(b, mk_node("MatMul", "mm", "xr,Wt", "h"));
    add_node(b, mk_node("Add", "fc", "h,b", "z"));
    add_node(b, mk_node("Relu", "r2", "z", "y"));
    add_out(b, "y");
    const char *path = save(b, "linear_plan.onnx");
    pd_load_options o = PD_LOAD_OPTIONS_INIT;
    pd_graph *g = NULL;
    if (pd_graph_load_file(path, &o, &g) != PD_OK || g->nnodes != 3 || strcmp(g->nodes[1].name, "fc")) {
        CHECK(0, "linear_plan.onnx loads as Relu, Gemm, Relu: %s", g ? "other nodes" : pd_last_error());
        pd_graph_destroy(g);
        return;
    }
    /* stages as JSON objects: the plan's stage s lists these names */
    const char *three = "\"r\", \"t\"]}, {\"fwd_ms\": 1, \"bwd_in_ms\": 1, \"bwd_w_ms\": 0, \"nodes\": [\"mm\"]}, "
                        "{\"fwd_ms\": 1, \"bwd_in_ms\": 1, \"bwd_w_ms\": 0, \"nodes\": [\"fc\", \"r2\"";
    int fwd[3] = {-1, -1, -1};
    pd_status st = match_plan(g, "\"r\", \"t\", \"mm\", \"fc\", \"r2\"", three, fwd);
    CHECK(st == PD_OK && fwd[0] == 0 && fwd[1] == 2 && fwd[2] == 2,
          "an old plan (r, t | mm | fc, r2): the fused Gemm on stage %d (2), r on %d, r2 on %d %s", fwd[1], fwd[0],
          fwd[2], st ? pd_last_error() : "");
    fwd[0] = fwd[1] = fwd[2] = -1;
    st = match_plan(g, "\"r\", \"fc\", \"r2\"", three, fwd);
    CHECK(st == PD_OK && fwd[0] == 0 && fwd[1] == 2 && fwd[2] == 2,
          "this pdonnx's node list, stages by the file's names: the Gemm on stage %d (2) %s", fwd[1],
          st ? pd_last_error() : "");
    /* unmatched, such a plan is refused by pd_trainer_create (the API), naming the name it cannot place */
    char json[1024];
    snprintf(json, sizeof json,
             "{\"format\": \"pdonnx-plan\", \"workers\": 3, \"nodes\": [\"r\", \"fc\", \"r2\"], \"stages\": "
             "[{\"fwd_ms\": 1, \"bwd_in_ms\": 1, \"bwd_w_ms\": 0, \"nodes\": [%s]}]}",
             three);
    pd_plan *raw = NULL;
    pd_trainer *tr = NULL;
    st = pd__plan_from_json(json, strlen(json), "old_plan.json", &raw);
    if (st == PD_OK) st = pd_trainer_create(g, raw, NULL, &tr);
    CHECK(st == PD_ERR_INVALID && !tr && strstr(pd_last_error(), "name node 't'"),
          "pd_trainer_create with stages naming fused-away nodes, unmatched: %s", pd_last_error());
    pd_trainer_destroy(tr);
    pd__plan_free(raw);
    st = match_plan(g, "\"r\", \"t\", \"mm\", \"fc\", \"r2\"", "\"r\", \"t\", \"mm\", \"fc\", \"zz\"", fwd);
    CHECK(st == PD_ERR_PARSE && strstr(pd_last_error(), "old_plan.json") && strstr(pd_last_error(), "unknown node 'zz'"),
          "a plan with a name mistyped (r2 as zz): %s", pd_last_error());
    st = match_plan(g, "\"r\", \"zz\", \"fc\", \"r2\"", "\"r\", \"zz\", \"fc\", \"r2\"", fwd);
    CHECK(st == PD_ERR_INVALID && strstr(pd_last_error(), "old_plan.json") && strstr(pd_last_error(), "'zz' is not in"),
          "a plan naming a node the model lacks: %s", pd_last_error());
    st = match_plan(g, "\"r\", \"t\", \"mm\", \"fc\"", "\"r\", \"t\", \"mm\", \"fc\"", fwd);
    CHECK(st == PD_ERR_INVALID && strstr(pd_last_error(), "old_plan.json") && strstr(pd_last_error(), "'r2' is in no stage"),
          "a plan leaving out one of the model's nodes: %s", pd_last_error());
    pd_graph_destroy(g);
}

int main(int argc, char **argv) {
    bool keep = argc > 1;
    if (keep) {
        snprintf(tmp_root, sizeof tmp_root, "%s", argv[1]);
        mkdir(tmp_root, 0755);
    } else {
        strcpy(tmp_root, "/tmp/pd_loader_XXXXXX");
        if (!mkdtemp(tmp_root)) {
            perror("mkdtemp");
            return 1;
        }
    }
    test_tiny();
    test_batch();
    test_old_style();
    test_bad_files();
    test_tensor_checks();
    test_graph_checks();
    test_unsupported();
    test_attributes();
    test_dtypes();
    test_lowbit_io();
    test_lowbit_ops();
    test_lowbit_quant();
    test_lowbit_train();
    test_external();
    mkdir(fmt("%s/hostile", tmp_root), 0755);
    test_huge_flops();
    test_control_names();
    test_opsets();
    test_constant_cap();
    test_tensor_pb();
    test_trainable();
    test_ties();
    test_transposed_ties();
    test_mask_folds();
    test_gelu_fuses();
    test_linear_fuses();
    test_linear_plans();
    test_control_flow();
    if (!keep) nftw(tmp_root, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    arena_free();
    return check_summary();
}
