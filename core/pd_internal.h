/* pd_internal.h - the graph IR and the contracts between core, loader and backends.
 *
 * Not installed. Everything here is private (pd__ names) and may change.
 *
 * A pd_graph holds tensors and nodes. Tensors are referred to by index into
 * g->tensors; node inputs/outputs are tensor indices, -1 for an absent
 * optional input. After loading, nodes are in topological order, every
 * tensor has a concrete dtype and shape, and constant subgraphs are folded
 * into PD_T_CONST tensors.
 */
#ifndef PD_INTERNAL_H
#define PD_INTERNAL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../pipedream.h"
#include "ops.h"

#include <stdlib.h>

/* Every allocation goes through these; an embedding program may define all
 * four before including pipedream.h with PIPEDREAM_IMPLEMENTATION. */
#ifndef PD_MALLOC
#if defined(PD_CALLOC) || defined(PD_REALLOC) || defined(PD_FREE)
#error "define PD_MALLOC, PD_CALLOC, PD_REALLOC and PD_FREE together, or none of them"
#endif
#define PD_MALLOC(sz) malloc(sz)
#define PD_CALLOC(n, sz) calloc(n, sz)
#define PD_REALLOC(p, sz) realloc(p, sz)
#define PD_FREE(p) free(p)
#elif !defined(PD_CALLOC) || !defined(PD_REALLOC) || !defined(PD_FREE)
#error "define PD_MALLOC, PD_CALLOC, PD_REALLOC and PD_FREE together, or none of them"
#endif

/* ---- errors ---------------------------------------------------------------- */

/* Sets the thread's last error (printf-style) and returns `s`; an argument
 * may be pd_last_error() itself. The message is escaped with pd__escape: it
 * stays one line whatever names it quotes. */
pd_status pd__err(pd_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Copies src (NULL: "") into dst (n bytes, always NUL-terminated, truncated
 * between escapes) with bytes below 0x20 and 0x7f written as \n, \t, \r or
 * \xNN; returns dst. For names read from a model before they are printed. */
const char *pd__escape(char *dst, size_t n, const char *src);
/* Chrome trace events (chrome://tracing, Perfetto): one writer for the
 * simulator's predicted schedule and the executor's measured one. Events are
 * separated by ",\n"; the caller writes the enclosing "[" and "]". Times in
 * microseconds; args: the body of a JSON object ("\"mb\":3"), or NULL. */
typedef struct pd__trace {
    FILE *f;
    bool more; /* an event was written: the next one needs a separator */
} pd__trace;
/* a process's (tid < 0) or a thread's name (ph "M") */
void pd__trace_name(pd__trace *t, int pid, int tid, const char *name);
/* a span (ph "X"), or an instant (ph "i") when dur_us < 0 */
void pd__trace_event(pd__trace *t, const char *name, const char *cat, double ts_us, double dur_us, int pid, int tid,
                     const char *args);
/* counter values (ph "C") at ts_us */
void pd__trace_counter(pd__trace *t, const char *name, double ts_us, int pid, const char *args);

/* Reads a caller's options struct (NULL, or `size` bytes of it) over *out,
 * which holds the defaults (the _INIT macro); refuses a size past `full`. */
pd_status pd__opts_read(void *out, const void *opt, size_t full, const char *what);
/* Prefixes the current message: "prefix: old message". */
void pd__err_prefix(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define PD_TRY(expr)                        \
    do {                                    \
        pd_status pd__s = (expr);           \
        if (pd__s != PD_OK) return pd__s;   \
    } while (0)

/* ---- small helpers ----------------------------------------------------------- */
char *pd__strdup(const char *s);
/* a*b with overflow check into *out; false on overflow or negative operands. */
bool pd__mul_ok(int64_t a, int64_t b, int64_t *out);
/* numel of a shape with overflow check; -1 on overflow or a negative dim. */
int64_t pd__shape_numel(int ndim, const int64_t *shape);
void pd__format_shape(char *buf, size_t n, int ndim, const int64_t *shape);
/* Reads element i of a numeric tensor as double / int64, any dtype. */
double pd__get_f(pd_dtype t, const void *data, int64_t i);
int64_t pd__get_i(pd_dtype t, const void *data, int64_t i);
/* Writes value v to element i, converting to the dtype (float16/bfloat16 too). */
void pd__set_f(pd_dtype t, void *data, int64_t i, double v);
void pd__set_i(pd_dtype t, void *data, int64_t i, int64_t v);
/* Reads a whole regular file into a NUL-terminated buffer (*len excludes the NUL; free with PD_FREE). */
pd_status pd__read_file(const char *path, unsigned char **buf, size_t *len);
/* Reads exactly len bytes at offset of an open file. */
pd_status pd__pread_all(int fd, const char *path, void *buf, size_t len, int64_t offset);
/* Opens path for reading if it is a regular file (never blocks on a FIFO). */
struct stat;
pd_status pd__open_regular(const char *path, int *fd, struct stat *st);
/* PD_OK when path may be written: absent in an existing writable folder, or a
 * regular file; never a folder, a path ending in '/', a device or a FIFO. */
pd_status pd__check_dest(const char *path);
/* Writes a whole file through a temporary name, fsync and rename (pd__check_dest first). */
pd_status pd__write_atomic(const char *path, const void *buf, size_t len);
float pd__half_to_float(uint16_t h);
uint16_t pd__float_to_half(float f);
float pd__bf16_to_float(uint16_t h);
uint16_t pd__float_to_bf16(float f);

/* The low-bit types (float8 x5, float4e2m1, int4/uint4, int2/uint2), one byte
 * an element in memory. */
bool pd__dtype_lowbit(pd_dtype t);
/* Bits per element in a file (raw_data, int32_data): 4 or 2 for the packed
 * types, else 8 * the element size. */
int pd__dtype_bits(pd_dtype t);
/* Cast's rounding for float8e8m0 (its round_mode attribute). */
enum { PD_RM_UP, PD_RM_DOWN, PD_RM_NEAREST };
/* Decodes one element of a float8 or float4e2m1 type (NaN for its NaN codes). */
double pd__lowfloat_decode(pd_dtype t, uint8_t c);
/* Encodes v into a float8 or float4e2m1 type, rounding to nearest even (e8m0:
 * round_mode, as ONNX's reference). saturate: out of range (and inf) gives the
 * largest finite value, else inf or NaN where the type has them (float4e2m1
 * always saturates: it has neither). */
uint8_t pd__lowfloat_encode(pd_dtype t, double v, bool saturate, int round_mode);
/* n elements of a 4- or 2-bit type between their packed file form ((n * bits
 * + 7) / 8 bytes, low bits first) and one a byte (int4/int2 sign-extended). */
void pd__unpack_bits(pd_dtype t, const uint8_t *src, int64_t n, int8_t *dst);
void pd__pack_bits(pd_dtype t, const int8_t *src, int64_t n, uint8_t *dst);

/* ---- the graph IR --------------------------------------------------------- */

typedef enum pd__tkind {
    PD_T_ACT = 0, /* computed by a node at run time */
    PD_T_INPUT,   /* fed by the caller */
    PD_T_INIT,    /* initializer (float ones are the trainable candidates) */
    PD_T_CONST    /* a Constant node's value or a folded result */
} pd__tkind;

/* Whether a float initializer may be trained, decided at load: the model's
 * ModelProto.training_info names the ones training updates (update_binding);
 * without one, a single-element tensor (an exporter's scale, exponent or
 * epsilon) is a constant. A session may still train any of them by name
 * (pd_train_options.trainable). */
typedef enum pd__train_rule {
    PD_TR_DEFAULT = 0, /* trained when it reaches the loss */
    PD_TR_LISTED,      /* in training_info's update_binding */
    PD_TR_UNLISTED,    /* the model has training_info without it */
    PD_TR_SCALAR,      /* one element, no training_info */
    PD_TR_EXPORTER     /* the dynamo exporter's graph signature: a buffer or constant, not a parameter */
} pd__train_rule;

typedef struct pd__tensor {
    char *name;
    pd_dtype dtype;
    int ndim;        /* -1 while unknown */
    int64_t shape[PD_MAX_DIMS];
    int64_t numel;
    pd__tkind kind;
    int producer;    /* node index, -1 for inputs and constants */
    bool is_output;
    bool borrowed;   /* data lives in a session's parameter slab: not freed with the graph */
    bool trained;    /* a session trained it (pd_graph_save lists it in training_info) */
    pd__train_rule train;
    void *data;      /* owned (unless borrowed); set for PD_T_INIT and PD_T_CONST */
    pd_dtype file_dtype; /* the file's float16/bfloat16 for a tensor computed in float32 (half_as_float), else 0 */
    /* lazy_weights: while data is NULL, the value is numel floats at ext_off
     * in ext_path (resolved, checked at load; pd__tensor_read). ext_loc, when
     * set, is where pd_graph_save refers to it (relative to the saved model:
     * a per-stage save's file) instead of reading it. */
    char *ext_path;
    char *ext_loc;
    int64_t ext_off;
} pd__tensor;

static inline bool pd__deferred(const pd__tensor *t) { return !t->data && t->ext_path; }

/* lazy_weights (onnx/tensor_pb.c): a deferred float tensor's value (t->numel
 * floats from t->ext_path at t->ext_off) into dst; pd__tensor_load into a new
 * t->data. Both are no-ops returning PD_OK for a tensor that has its data. */
pd_status pd__tensor_read(const pd__tensor *t, float *dst);
pd_status pd__tensor_load(pd__tensor *t);

/* Attribute types, numbered as ONNX's AttributeProto.AttributeType. */
typedef enum pd__atype {
    PD_A_UNDEFINED = 0,
    PD_A_FLOAT = 1,
    PD_A_INT = 2,
    PD_A_STRING = 3,
    PD_A_TENSOR = 4,
    PD_A_GRAPH = 5,
    PD_A_FLOATS = 6,
    PD_A_INTS = 7,
    PD_A_STRINGS = 8
} pd__atype;

typedef struct pd__attr {
    char *name;
    pd__atype type;
    int64_t i;
    float f;
    char *s;           /* PD_A_STRING: NUL-terminated copy; PD_A_STRINGS: n strings back to back, each NUL-terminated */
    int n;             /* count for FLOATS / INTS / STRINGS */
    int64_t *ints;
    float *floats;
    pd_tensor *t;      /* PD_A_TENSOR: owned tensor (data owned too). PD_A_GRAPH (the subgraph
                          itself is the loader's, onnx/flow.c): i counts the iterations a Loop has
                          unrolled (If: 1 once both branches are in), n the nesting depth */
} pd__attr;

/* The domain of nodes the loader makes by fusing exported ones (pd__fuse_linear):
 * no file's node has it, so shape rules may allow those nodes what ONNX does not. */
#define PD__FUSED_DOMAIN "pdonnx.fused"

typedef struct pd__node {
    char *name;        /* the model's name, or "<op_type>_<index>" when it has none */
    char *op_type;
    char *domain;      /* "" for ai.onnx */
    int op;            /* pd_op, -1 when unsupported, PD__OP_FLOW for If/Loop/Scan until expanded */
    int opset;         /* opset version of its domain */
    int nin, nout;
    int *in, *out;
    int nattr;
    pd__attr *attr;
    int nabsorbed;     /* the file's nodes the loader fused into this one (pd__fuse_*): */
    char **absorbed;   /* their names, so a plan written for the file still finds them */
} pd__node;

struct pd_graph {
    char *path;        /* the file, for messages ("<memory>" when loaded from memory) */
    char *name;
    int64_t opset;     /* ai.onnx opset */
    bool training_info; /* the model says which initializers training updates (pd__train_rule) */
    int ntied;
    int *tied;          /* triples (alias, source, transposed) of tensor indices: alias = Identity(source
                           initializer), or its Transpose (pd__tie_transposes) */
    int ntensors, tcap;
    pd__tensor *tensors;
    int nnodes, ncap;
    pd__node *nodes;
    int ninputs, noutputs;
    int *inputs;       /* runtime inputs (kind PD_T_INPUT) */
    int *outputs;
    /* name -> tensor index (open addressing, power-of-two size) */
    int hcap;
    int *hash;
    /* the serialized ModelProto it was loaded from (pd_graph_save rewrites it) */
    unsigned char *model_bytes;
    size_t model_len;
    /* what the loader found the exporter did to the model (pd_graph_note) */
    int nnotes;
    char **notes;
    /* control flow (If/Loop/Scan, op PD__OP_FLOW) met by pd__graph_finalize is
     * handed to expand, which consumes *n and returns the nodes that replace it
     * (the loader's onnx/flow.c; NULL: such nodes are unsupported) */
    pd_status (*expand)(void *ctx, pd_graph *g, pd__node *n, pd__node **made, int *nmade);
    void *expand_ctx;
};

/* The op of a control-flow node, expanded at load (pd_graph.expand). */
#define PD__OP_FLOW (-2)

int pd__graph_find(const pd_graph *g, const char *name);
/* Finds or adds a tensor by name; returns its index or -1 on allocation failure. */
int pd__graph_tensor(pd_graph *g, const char *name);
/* Frees what a node owns (names, arrays, attributes) and zeroes it. */
void pd__node_free(pd__node *n);
/* Adds a node (copies nothing: takes ownership of the arrays in *n). */
pd_status pd__graph_add_node(pd_graph *g, pd__node *n);
pd_status pd__add_tie(pd_graph *g, int alias, int source, bool transposed);
/* A line for pd_graph_note (printf-style). */
pd_status pd__graph_note(pd_graph *g, const char *fmt, ...);
/* 2-D float initializers stored as another's transpose (a tied LM head):
 * with !untie, the alias becomes Transpose(source). Before toposort. */
pd_status pd__tie_transposes(pd_graph *g, bool untie);
/* pd_load_options.half_as_float: every float16/bfloat16 tensor, dtype
 * attribute (Cast's `to`, ...) and tensor attribute becomes float32; a load
 * note counts them. Before the shapes are inferred. */
pd_status pd__half_as_float(pd_graph *g);
pd_graph *pd__graph_new(const char *path);
/* Sorts nodes topologically; fails naming a node on a cycle or a missing input. */
pd_status pd__graph_toposort(pd_graph *g);
/* Binds opt's constant inputs, infers shapes in order, folds constants by
 * running them on `fold` (the loader passes the CPU backend; NULL or
 * opt->fold_constants == 0: no folding), removes dead nodes. opt is never NULL.
 * The backend comes in as an argument so that the graph IR needs no kernels
 * (pipedream.h's implementation section holds the core without the runtime). */
struct pd_backend_i;
pd_status pd__graph_finalize(pd_graph *g, const pd_load_options *opt, const struct pd_backend_i *fold);
/* Sets t->ndim/shape/numel; checks overflow and PD_MAX_DIMS. */
pd_status pd__tensor_set_shape(const pd_graph *g, pd__tensor *t, int ndim, const int64_t *shape);
/* t's value is fixed at load: a constant, or an initializer training does
 * not update (not a float, or one the model marks constant); nodes whose
 * inputs all are get folded. */
bool pd__foldable_input(const pd__tensor *t);
/* A pd_tensor view of a graph tensor's data. */
pd_tensor pd__view(const pd__tensor *t);

/* ---- attributes --------------------------------------------------------- */
const pd__attr *pd__attr_get(const pd__node *n, const char *name);
int64_t pd__attr_i(const pd__node *n, const char *name, int64_t def);
float pd__attr_f(const pd__node *n, const char *name, float def);
const char *pd__attr_s(const pd__node *n, const char *name, const char *def);
/* Returns the count (0 when absent) and sets *v to the array (NULL when absent). */
int pd__attr_ints(const pd__node *n, const char *name, const int64_t **v);
int pd__attr_floats(const pd__node *n, const char *name, const float **v);

/* ---- the op table ---------------------------------------------------------------- */

/* Sets the output tensors' dtype and shape from the inputs. May read the data
 * of constant inputs (g->tensors[i].data != NULL). Reports errors with
 * pd__node_err. */
typedef pd_status (*pd__shape_fn)(pd_graph *g, pd__node *n);
/* Forward FLOPs of a node with known shapes, in double: a declared shape may be
 * huge (a [2^30,2^30] MatMul is 2^91 FLOPs), which no int64 holds. */
typedef double (*pd__flops_fn)(const pd_graph *g, const pd__node *n);

typedef struct pd__op_def {
    const char *name;
    int flags;
    uint32_t grad;  /* bit i: input i is differentiable */
    uint32_t state; /* bit i: input i is a buffer updated in place while training */
    pd__shape_fn shape;
    pd__flops_fn flops;
} pd__op_def;

extern const pd__op_def pd__ops[PD_OP_COUNT];

/* Input j of n is a buffer its op updates in place while training (ops.h: state). */
static inline bool pd__state_input(const pd__node *n, int j) {
    return n->op >= 0 && n->op < PD_OP_COUNT && j >= 0 && j < 32 && j < n->nin && ((pd__ops[n->op].state >> j) & 1u);
}
int pd__op_lookup(const char *onnx_name); /* -1 when not in the set */

#define PD__DECL_SHAPE(e, name, flags, grad, state)                    \
    pd_status pd__shape_##name(pd_graph *g, pd__node *n); \
    double pd__flops_##name(const pd_graph *g, const pd__node *n);
PD_OPS(PD__DECL_SHAPE)
#undef PD__DECL_SHAPE

/* Error about a node: "model.onnx: node 'name' (OpType): message". */
pd_status pd__node_err(const pd_graph *g, const pd__node *n, pd_status s, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Convenience for shape rules: input i (NULL when absent or out of range). */
static inline pd__tensor *pd__in(pd_graph *g, const pd__node *n, int i) {
    return (i >= 0 && i < n->nin && n->in[i] >= 0) ? &g->tensors[n->in[i]] : NULL;
}
static inline pd__tensor *pd__out(pd_graph *g, const pd__node *n, int i) {
    return (i >= 0 && i < n->nout && n->out[i] >= 0) ? &g->tensors[n->out[i]] : NULL;
}

/* ---- backends ------------------------------------------------------------- */

/* What a kernel sees. Kernels may ask for scratch memory (kept between runs, grows
 * on demand) and use `threads`. */
typedef struct pd__exec {
    int threads;
    void *scratch;
    size_t scratch_size;
    const pd_graph *g;
    /* Training: BatchNormalization normalizes with batch statistics and updates
     * its running mean/var inputs in place (PyTorch's rule: running =
     * momentum*running + (1-momentum)*batch, with ONNX's momentum, and the
     * unbiased variance for the running var); Dropout drops with a mask drawn
     * from `seed` (set per step by the session) and the node's name, so the
     * backward can draw the same mask again. */
    bool training;
    uint64_t seed;
    /* Backward: bit i set, din[i] holds no gradient yet (its memory is
     * stale): the kernel writes all of it instead of adding into it, which
     * saves zeroing it first. pd__cpu_run_bwd zeroes it for kernels that
     * cannot (ops without PD_OPF_BWD_WRITES) and clears the bits when the call returns.
     * Kernels read it through pd__fresh. */
    uint32_t fresh;
} pd__exec;

static inline bool pd__fresh(const pd__exec *x, int i) { return i < 32 && (x->fresh >> i) & 1; }

/* n rounded up to a multiple of 64 (slab offsets, cache lines). */
static inline size_t pd__align64(size_t n) { return (n + 63) & ~(size_t)63; }

/* Returns a scratch buffer of at least `bytes`, 64-byte aligned, or NULL (error set). */
void *pd__scratch(pd__exec *x, size_t bytes);

/* A forward kernel: in[i] is NULL for an absent optional input; out[i] has dtype,
 * shape and data (allocated by the caller from the shapes inference gave). */
typedef pd_status (*pd__kernel_fn)(pd__exec *x, const pd__node *n, pd_tensor *const *in,
                                   pd_tensor *const *out);

/* A backward kernel. in/out: the forward's tensors, holding what the forward
 * saw and produced. dout[j]: the gradient of output j (NULL: zero, e.g. an
 * unused output). din[i]: when not NULL, the gradient of input i is ADDED
 * into it (+=, so a tensor used twice accumulates); NULL: not wanted. Only
 * inputs whose bit is set in the op's grad mask are ever asked for. Asking
 * for the activation inputs alone or the parameter inputs alone gives the
 * split backward (input-gradient B, weight-gradient W) zero-bubble needs. */
typedef pd_status (*pd__grad_fn)(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out,
                                 pd_tensor *const *dout, pd_tensor *const *din);

#define PD__DECL_CPU(e, name, flags, grad, state)                                                                      \
    pd_status pd__cpu_##name(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out);   \
    pd_status pd__cpu_##name##_bwd(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out, \
                                   pd_tensor *const *dout, pd_tensor *const *din);
PD_OPS(PD__DECL_CPU)
#undef PD__DECL_CPU

extern const pd__kernel_fn pd__cpu_kernels[PD_OP_COUNT];
extern const pd__grad_fn pd__cpu_grads[PD_OP_COUNT];

/* Backends plug in through this vtable (CPU now; CUDA later). */
typedef struct pd_backend_i {
    const char *name;
    bool (*supports_op)(const pd__node *n);
    pd_status (*run_node)(pd__exec *x, const pd__node *n, pd_tensor *const *in, pd_tensor *const *out);
} pd_backend_i;

extern const pd_backend_i pd__cpu_backend;

/* Runs one node's backward on the CPU backend, naming the node in any error
 * (x->fresh: see pd__exec). */
pd_status pd__cpu_run_bwd(pd__exec *x, const pd_graph *g, const pd__node *n, pd_tensor *const *in,
                          pd_tensor *const *out, pd_tensor *const *dout, pd_tensor *const *din);

/* The calling thread computes with n threads from here on: our OpenMP loops,
 * oneDNN and OpenBLAS's OpenMP build all read this thread's OpenMP setting,
 * so they share libgomp's one pool; a pthreads OpenBLAS gets the count too
 * (process-wide there). Cheap when n is already set: every node calls it. */
void pd__threads_use(int n);
/* bytes of p set to 0 on the calling thread's OpenMP threads (a large
 * buffer; a small one by memset): no serial stretch between two parallel
 * kernels, in which an idle worker would go to sleep and cost the next
 * region its wake-up (docs/PERF.md, issue 23). */
void pd__cpu_zero(void *p, size_t bytes);
/* threads 0: the cores this process may run on (its affinity mask, so
 * taskset and container limits count), at least 1. */
int pd__threads_default(int threads);

/* The x86 vector level of this CPU as OpenBLAS's kernel sets go: 3 AVX-512
 * (F, BW, DQ, VL), 2 AVX2 with FMA, 1 AVX, 0 older or not x86; the OS's
 * support for the registers counted. */
int pd__cpu_simd_level(void);
/* pd_blas_coretype_advice's rule: the OPENBLAS_CORETYPE for a CPU of this
 * level when OpenBLAS chose `detected`, a core of a lower level; NULL when
 * the choice is the CPU's level (or above), or a name this table lacks. */
const char *pd__blas_core_advice(const char *detected, int level);

/* Runs one node on the CPU backend, naming the node in any error. */
pd_status pd__cpu_run(pd__exec *x, const pd_graph *g, const pd__node *n, pd_tensor *const *in,
                      pd_tensor *const *out);

#endif
