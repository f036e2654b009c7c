/* save.c - pd_graph_save: the model the graph was loaded from, with every
 * initializer replaced by the graph's current values (trained ones included).
 *
 * The serialized ModelProto kept at load is unpacked, each initializer found
 * in the graph gets its data as raw_data (typed fields and external-data
 * references dropped: the saved model is self-contained), and the result is
 * written to a temporary file in the target's folder, fsynced and renamed, so
 * a failure never leaves a half-written model behind (pd_graph_save), or
 * handed to the caller as a buffer (pd_graph_save_memory). Everything else (nodes,
 * symbolic dims, opsets, metadata) is kept byte for byte in meaning.
 */
#include "../core/pd_internal.h"
#include "onnx.pb-c.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void pd__drop_typed(Onnx__TensorProto *tp) {
    PD_FREE(tp->float_data);
    tp->float_data = NULL;
    tp->n_float_data = 0;
    PD_FREE(tp->int32_data);
    tp->int32_data = NULL;
    tp->n_int32_data = 0;
    PD_FREE(tp->int64_data);
    tp->int64_data = NULL;
    tp->n_int64_data = 0;
    PD_FREE(tp->double_data);
    tp->double_data = NULL;
    tp->n_double_data = 0;
    PD_FREE(tp->uint64_data);
    tp->uint64_data = NULL;
    tp->n_uint64_data = 0;
    for (size_t i = 0; i < tp->n_external_data; i++)
        onnx__string_string_entry_proto__free_unpacked(tp->external_data[i], NULL);
    PD_FREE(tp->external_data);
    tp->external_data = NULL;
    tp->n_external_data = 0;
    tp->has_data_location = 0;
    tp->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__DEFAULT;
}

/* vi's type: a tensor of x's dtype and shape. */
static pd_status pd__typed_vi(Onnx__ValueInfoProto *vi, const pd__tensor *x) {
    static const Onnx__TypeProto tinit = ONNX__TYPE_PROTO__INIT;
    static const Onnx__TypeProto__Tensor ttinit = ONNX__TYPE_PROTO__TENSOR__INIT;
    static const Onnx__TensorShapeProto sinit = ONNX__TENSOR_SHAPE_PROTO__INIT;
    static const Onnx__TensorShapeProto__Dimension dinit = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT;
    Onnx__TypeProto *tp = calloc(1, sizeof *tp);
    Onnx__TypeProto__Tensor *tt = calloc(1, sizeof *tt);
    Onnx__TensorShapeProto *sp = calloc(1, sizeof *sp);
    Onnx__TensorShapeProto__Dimension **dims = calloc((size_t)x->ndim + 1, sizeof *dims);
    if (!tp || !tt || !sp || !dims) {
        free(tp), free(tt), free(sp), free(dims);
        return PD_ERR_NOMEM;
    }
    *tp = tinit;
    *tt = ttinit;
    *sp = sinit;
    vi->type = tp; /* owned by vi from here on */
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    tt->has_elem_type = 1;
    tt->elem_type = (int32_t)x->dtype;
    tt->shape = sp;
    sp->dim = dims;
    for (int d = 0; d < x->ndim; d++) {
        Onnx__TensorShapeProto__Dimension *dm = calloc(1, sizeof *dm);
        if (!dm) return PD_ERR_NOMEM;
        *dm = dinit;
        dm->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
        dm->dim_value = x->shape[d];
        sp->dim[sp->n_dim++] = dm;
    }
    return PD_OK;
}

/* A model without training_info gets one naming the initializers a session
 * trained (update_binding), so that loading the saved model trains the same
 * set: the algorithm graph is Identity per tensor, a record of which, not of
 * how (the update is the optimizer's). A model's own training_info is kept.
 * Allocated with the C library's allocator, as protobuf-c frees the model. */
static pd_status pd__add_training_info(const pd_graph *g, Onnx__ModelProto *m) {
    int n = 0;
    for (int t = 0; t < g->ntensors; t++) n += g->tensors[t].kind == PD_T_INIT && g->tensors[t].trained;
    if (n == 0 || m->n_training_info > 0) return PD_OK;
    static const Onnx__TrainingInfoProto tinit = ONNX__TRAINING_INFO_PROTO__INIT;
    static const Onnx__GraphProto ginit = ONNX__GRAPH_PROTO__INIT;
    static const Onnx__NodeProto ninit = ONNX__NODE_PROTO__INIT;
    static const Onnx__ValueInfoProto vinit = ONNX__VALUE_INFO_PROTO__INIT;
    static const Onnx__StringStringEntryProto einit = ONNX__STRING_STRING_ENTRY_PROTO__INIT;
    Onnx__TrainingInfoProto *ti = calloc(1, sizeof *ti);
    Onnx__GraphProto *alg = calloc(1, sizeof *alg);
    m->training_info = calloc(1, sizeof *m->training_info);
    if (!ti || !alg || !m->training_info) {
        free(ti);
        free(alg);
        return pd__err(PD_ERR_NOMEM, "out of memory");
    }
    *ti = tinit;
    *alg = ginit;
    m->training_info[0] = ti; /* freed with the model from here on (free_unpacked frees with the default allocator) */
    m->n_training_info = 1;
    ti->algorithm = alg;
    alg->name = strdup("pdonnx_trained");
    alg->doc_string = strdup("the initializers pdonnx trained; update_binding names them (the update itself is "
                                 "pdonnx's optimizer, not this graph)");
    alg->node = calloc((size_t)n, sizeof *alg->node);
    alg->output = calloc((size_t)n, sizeof *alg->output);
    ti->update_binding = calloc((size_t)n, sizeof *ti->update_binding);
    if (!alg->name || !alg->doc_string || !alg->node || !alg->output || !ti->update_binding)
        return pd__err(PD_ERR_NOMEM, "out of memory");
    for (int t = 0; t < g->ntensors; t++) {
        const pd__tensor *x = &g->tensors[t];
        if (x->kind != PD_T_INIT || !x->trained) continue;
        size_t len = strlen(x->name) + 16;
        char *out = malloc(len);
        Onnx__NodeProto *nd = calloc(1, sizeof *nd);
        Onnx__ValueInfoProto *vi = calloc(1, sizeof *vi);
        Onnx__StringStringEntryProto *e = calloc(1, sizeof *e);
        char **nin = calloc(1, sizeof(char *)), **nout = calloc(1, sizeof(char *));
        if (!out || !nd || !vi || !e || !nin || !nout) {
            free(out), free(nd), free(vi), free(e), free(nin), free(nout);
            return pd__err(PD_ERR_NOMEM, "out of memory");
        }
        snprintf(out, len, "%s__trained", x->name);
        *nd = ninit;
        nd->op_type = strdup("Identity");
        nin[0] = strdup(x->name);
        nout[0] = strdup(out);
        nd->input = nin;
        nd->n_input = 1;
        nd->output = nout;
        nd->n_output = 1;
        alg->node[alg->n_node++] = nd;
        *vi = vinit;
        vi->name = strdup(out);
        alg->output[alg->n_output++] = vi;
        if (pd__typed_vi(vi, x) != PD_OK) return pd__err(PD_ERR_NOMEM, "out of memory");
        *e = einit;
        e->key = strdup(x->name);
        e->value = out;
        ti->update_binding[ti->n_update_binding++] = e;
        if (!nd->op_type || !nin[0] || !nout[0] || !vi->name || !e->key) return pd__err(PD_ERR_NOMEM, "out of memory");
    }
    return PD_OK;
}

/* tp refers to x's value in the external file x->ext_loc (beside the saved
 * model) at x->ext_off; allocated with the C library's allocator, as
 * protobuf-c frees the model. */
static pd_status pd__refer_external(Onnx__TensorProto *tp, const pd__tensor *x, const char *what) {
    static const Onnx__StringStringEntryProto einit = ONNX__STRING_STRING_ENTRY_PROTO__INIT;
    pd__drop_typed(tp);
    free(tp->raw_data.data); /* unpacked by protobuf-c: its allocator */
    tp->raw_data.data = NULL;
    tp->raw_data.len = 0;
    tp->has_raw_data = 0;
    if (!(tp->external_data = calloc(3, sizeof *tp->external_data))) return pd__err(PD_ERR_NOMEM, "%s: out of memory", what);
    char v[3][4096];
    snprintf(v[0], sizeof v[0], "%s", x->ext_loc);
    snprintf(v[1], sizeof v[1], "%lld", (long long)x->ext_off);
    snprintf(v[2], sizeof v[2], "%lld", (long long)x->numel * 4);
    const char *keys[3] = {"location", "offset", "length"};
    for (int i = 0; i < 3; i++) {
        Onnx__StringStringEntryProto *e = malloc(sizeof *e);
        if (!e) return pd__err(PD_ERR_NOMEM, "%s: out of memory", what);
        *e = einit;
        tp->external_data[tp->n_external_data++] = e;
        e->key = strdup(keys[i]);
        e->value = strdup(v[i]);
        if (!e->key || !e->value) return pd__err(PD_ERR_NOMEM, "%s: out of memory", what);
    }
    tp->has_data_location = 1;
    tp->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    return PD_OK;
}

/* The source of tensor t when t is a tie stored as a transpose and not
 * untied (computed by a Transpose node at run time), else -1. */
static int pd__transposed_source(const pd_graph *g, int t) {
    for (int i = 0; i < g->ntied; i++)
        if (g->tied[3 * i] == t && g->tied[3 * i + 2] && g->tensors[t].kind == PD_T_ACT &&
            g->tensors[g->tied[3 * i + 1]].data)
            return g->tied[3 * i + 1];
    return -1;
}

/* The model with the graph's current initializer values, serialized into a
 * new buffer (PD_MALLOC). `what` names the destination in messages. */
static pd_status pd__graph_pack(const pd_graph *g, const char *what, uint8_t **out, size_t *out_len) {
    if (!g->model_bytes) return pd__err(PD_ERR_INVALID, "%s: the graph keeps no model to save", g->path);
    Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, g->model_len, g->model_bytes);
    if (!m || !m->graph) {
        if (m) onnx__model_proto__free_unpacked(m, NULL);
        return pd__err(PD_ERR_INTERNAL, "%s: the kept model no longer parses", g->path);
    }
    pd_status st = PD_OK;
    for (size_t i = 0; i < m->graph->n_initializer && st == PD_OK; i++) {
        Onnx__TensorProto *tp = m->graph->initializer[i];
        int t = pd__graph_find(g, tp->name);
        if (t < 0) continue;
        const pd__tensor *x = &g->tensors[t];
        int src = pd__transposed_source(g, t); /* a tie stored as a transpose: the file's copy, from its source */
        if (src < 0 && x->kind == PD_T_INIT && x->ext_loc && x->dtype == PD_FLOAT && !x->file_dtype) {
            st = pd__refer_external(tp, x, what); /* a per-stage save's file (runtime/stageload.c) */
            continue;
        }
        if (src < 0 && x->kind == PD_T_INIT && x->trained && !x->data && !pd__deferred(x)) {
            st = pd__err(PD_ERR_INVALID, "%s: initializer '%s' was trained by another process (per-stage loading): "
                         "save with pd_trainer_save", what, tp->name);
            break;
        }
        if (src < 0 && (x->kind != PD_T_INIT || (!x->data && !pd__deferred(x)))) continue;
        pd_dtype dt = x->file_dtype ? x->file_dtype : x->dtype; /* a half tensor trained in float32: the file's type */
        if ((int)dt != tp->data_type) continue;
        int bits = pd__dtype_bits(dt); /* int4, float4, int2 pack 2 or 4 to a byte */
        bool packed = bits == 4 || bits == 2;
        size_t bytes = packed ? ((size_t)x->numel * (size_t)bits + 7) / 8 : (size_t)x->numel * pd_dtype_size(dt);
        uint8_t *d = PD_MALLOC(bytes ? bytes : 1);
        if (!d) {
            st = pd__err(PD_ERR_NOMEM, "%s: out of memory saving '%s'", what, tp->name);
            break;
        }
        if (src < 0 && pd__deferred(x)) { /* lazy_weights, never read: read now (a float32 tensor) */
            if ((st = pd__tensor_read(x, (float *)d)) != PD_OK) {
                PD_FREE(d);
                break;
            }
        } else if (src < 0 && packed) {
            pd__pack_bits(x->dtype, (const int8_t *)x->data, x->numel, d);
        } else if (src < 0 && dt == x->dtype) {
            memcpy(d, x->data, bytes);
        } else if (src < 0) {
            for (int64_t k = 0; k < x->numel; k++) pd__set_f(dt, d, k, pd__get_f(x->dtype, x->data, k));
        } else { /* x (r x c) = source^T */
            const float *a = (const float *)g->tensors[src].data;
            int64_t r = x->shape[0], c = x->shape[1];
            for (int64_t i = 0; i < r; i++)
                for (int64_t j = 0; j < c; j++) pd__set_f(dt, d, i * c + j, a[j * r + i]);
        }
        pd__drop_typed(tp);
        PD_FREE(tp->raw_data.data);
        tp->raw_data.data = d;
        tp->raw_data.len = bytes;
        tp->has_raw_data = 1;
    }
    if (st == PD_OK) st = pd__add_training_info(g, m);
    uint8_t *buf = NULL;
    size_t len = 0;
    if (st == PD_OK) {
        len = onnx__model_proto__get_packed_size(m);
        buf = PD_MALLOC(len ? len : 1);
        if (!buf)
            st = pd__err(PD_ERR_NOMEM, "%s: out of memory (%zu bytes)", what, len);
        else
            onnx__model_proto__pack(m, buf);
    }
    onnx__model_proto__free_unpacked(m, NULL);
    if (st != PD_OK) return st;
    *out = buf;
    *out_len = len;
    return PD_OK;
}

pd_status pd_graph_save(const pd_graph *g, const char *path) {
    if (!g || !path) return pd__err(PD_ERR_INVALID, "pd_graph_save: NULL %s", g ? "path" : "graph");
    uint8_t *buf;
    size_t len;
    PD_TRY(pd__graph_pack(g, path, &buf, &len));
    pd_status st = pd__write_atomic(path, buf, len);
    PD_FREE(buf);
    return st;
}

pd_status pd_graph_save_memory(const pd_graph *g, void **buf, size_t *len) {
    if (!g || !buf || !len)
        return pd__err(PD_ERR_INVALID, "pd_graph_save_memory: NULL %s", !g ? "graph" : !buf ? "buf" : "len");
    uint8_t *b;
    size_t n;
    PD_TRY(pd__graph_pack(g, "<memory>", &b, &n));
    *buf = b;
    *len = n;
    return PD_OK;
}

void pd_buffer_free(void *buf) { PD_FREE(buf); }
