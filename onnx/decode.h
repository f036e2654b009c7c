/* decode.h - helpers shared by the ONNX model reader (load.c) and the
 * TensorProto reader (tensor_pb.c); all defined in tensor_pb.c. Private. */
#ifndef PD_ONNX_DECODE_H
#define PD_ONNX_DECODE_H

#include <stddef.h>

#include "../core/pd_internal.h"
#include "onnx.pb-c.h"

/* Decodes a TensorProto into *out (dtype, shape, data owned: PD_MALLOC'd, at
 * least one byte even for an empty tensor). `what` starts every error message
 * ("model.onnx: initializer 'W'"). External data is read relative to base_dir
 * and refused when base_dir is NULL. On failure *out is untouched. */
pd_status pd__decode_tensor(const Onnx__TensorProto *tp, const char *what, const char *base_dir,
                            pd_tensor *out);

/* The same; with `where` (lazy_weights), a float32 tensor in external data is
 * checked but not read: out->data is NULL and where->ext_path/ext_off say
 * where it is (pd__tensor_read). */
pd_status pd__decode_tensor_ex(const Onnx__TensorProto *tp, const char *what, const char *base_dir,
                               pd__tensor *where, pd_tensor *out);

/* Element size of the ONNX data types we decode (TensorProto.DataType
 * numbering, as pd_dtype); 0 for the others (string, complex, float8, int4...). */
size_t pd__onnx_dtype_size(int32_t dt);
/* ONNX's name of a data type, refused ones included ("unknown" past the list). */
const char *pd__onnx_type_name(int32_t dt);

/* The folder of a path ("." when it has none), PD_MALLOC'd; NULL when out of memory. */
char *pd__dir_of(const char *path);

/* Walks a serialized message of type `desc` without unpacking it: returns
 * PD__PB_MALFORMED for broken wire data, PD__PB_TOO_DEEP when messages nest
 * deeper than max_depth (protobuf-c's unpacker recurses once per level and
 * would run out of stack on hostile input), else PD__PB_OK. */
enum { PD__PB_OK = 0, PD__PB_MALFORMED, PD__PB_TOO_DEEP };
int pd__pb_check(const ProtobufCMessageDescriptor *desc, const uint8_t *buf, size_t len, int max_depth);

#define PD__PB_MAX_DEPTH 100

/* Reads a protobuf varint at *p (before end) into *v and moves *p past it;
 * false when it runs past end or 64 bits. */
bool pd__pb_varint(const uint8_t **p, const uint8_t *end, uint64_t *v);

/* ---- the model reader's state, shared with flow.c ---------------------------- */

typedef struct pd__loader {
    pd_graph *g;
    const Onnx__ModelProto *m;
    const Onnx__GraphProto *gp;
    const char *base_dir; /* NULL: external data refused */
    pd_load_options opt;
    int64_t flow_nodes; /* nodes control flow has spliced in so far (flow.c's budget) */
    int nsub, subcap;   /* GRAPH attributes -> their subgraphs (pd__flow_keep) */
    const pd__attr **sub_attr;
    const Onnx__GraphProto **sub_graph;
    int ninit, initcap; /* subgraph initializers decoded so far -> their tensor (flow.c: one copy for all iterations) */
    const Onnx__TensorProto **init_key;
    int *init_tensor;
} pd__loader;

/* Maps a node's input or output name to a tensor index (*t; -1 for ""). */
typedef pd_status (*pd__resolve_fn)(void *ctx, const char *name, bool is_output, int *t);

/* Builds *n from np: names from np (or "<prefix><op_type>_<index>"), the op
 * from the table (PD__OP_FLOW for If/Loop/Scan, whose GRAPH attributes are
 * kept borrowed from the model), tensors through resolve (NULL: by name in
 * L->g). A control-flow node gets its subgraphs' outer-scope names appended
 * to its inputs (pd__flow_outer_refs), so that toposort orders it after them. */
pd_status pd__build_node(pd__loader *L, size_t index, const Onnx__NodeProto *np, const char *prefix,
                         pd__resolve_fn resolve, void *ctx, pd__node *n);

/* flow.c: the names a control-flow node's subgraphs read from enclosing
 * scopes, in first-use order, deduplicated (*names PD_MALLOC'd, strings
 * borrowed from the model). Fails past the nesting limit. */
pd_status pd__flow_outer_refs(const pd__loader *L, const pd__node *n, const char ***names, int *count);
/* flow.c: records that GRAPH attribute a holds gp (borrowed from the model);
 * pd__flow_graph finds it again (NULL: not recorded). */
pd_status pd__flow_keep(pd__loader *L, const pd__attr *a, const Onnx__GraphProto *gp);
const Onnx__GraphProto *pd__flow_graph(const pd__loader *L, const pd__attr *a);
/* flow.c: pd_graph.expand, the loader's hook that unrolls control flow. */
pd_status pd__flow_expand(void *ctx, pd_graph *g, pd__node *n, pd__node **made, int *nmade);

#endif
