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
        if (x->kind != PD_T_INIT || !x->data || (int)x->dtype != tp->data_type) continue;
        size_t bytes = (size_t)x->numel * pd_dtype_size(x->dtype);
        uint8_t *d = PD_MALLOC(bytes ? bytes : 1);
        if (!d) {
            st = pd__err(PD_ERR_NOMEM, "%s: out of memory saving '%s'", what, tp->name);
            break;
        }
        memcpy(d, x->data, bytes);
        pd__drop_typed(tp);
        PD_FREE(tp->raw_data.data);
        tp->raw_data.data = d;
        tp->raw_data.len = bytes;
        tp->has_raw_data = 1;
    }
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
