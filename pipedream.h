/* pipedream.h - pdonnx: train ONNX models with pipeline parallelism, in C.
 *
 * The public API, and behind PIPEDREAM_IMPLEMENTATION the dependency-free
 * core (graph IR, shape inference, profiles, planner, schedule generator,
 * simulator) in the style of the stb libraries. Two ways to use it:
 *
 * 1. With the library (everything: ONNX loading, training, profiling):
 *
 *        cc app.c $(pkg-config --cflags --libs pipedream)
 *
 *        #include <pipedream.h>
 *
 *        pd_graph *g;
 *        pd_load_options lo = PD_LOAD_OPTIONS_INIT;
 *        lo.batch = 32;
 *        if (pd_graph_load_file("model.onnx", &lo, &g) != PD_OK) {
 *            fprintf(stderr, "%s\n", pd_last_error());
 *            return 1;
 *        }
 *        pd_session *s;
 *        pd_train_options to = PD_TRAIN_OPTIONS_INIT;
 *        pd_session_create(g, &to, &s);
 *        pd_session_set_input(s, "x", &x);  // x, y: pd_tensor views of your arrays
 *        pd_session_set_labels(s, &y);
 *        pd_step_result r;
 *        pd_session_step(s, &r);            // r.loss
 *        pd_session_destroy(s);
 *        pd_graph_save(g, "trained.onnx");
 *        pd_graph_destroy(g);
 *
 * 2. Header only, the planner and simulator without any dependency but libc
 *    (profile in, plan and simulated timeline out). In exactly one C or C++ file:
 *
 *        #define PIPEDREAM_IMPLEMENTATION
 *        #include "pipedream.h"
 *
 *    and in the others just #include "pipedream.h" (C or C++). Include it
 *    before any system header in that file (it asks for POSIX 2008
 *    declarations); the implementation is C11 that also compiles as C++11. What
 *    the implementation section defines: errors and dtypes (pd_last_error,
 *    pd_status_name, pd_dtype_*, pd_tensor_numel, pd_tensor_free), graph
 *    inspection, profiles (pd_profile_create, _node, _num_nodes, _destroy),
 *    plans (pd_plan_create, _info_get, _stage, _node_stage, _destroy) and
 *    simulation (pd_simulate, pd_sim_result_free). Loading ONNX, training,
 *    measuring and the JSON readers and writers need libpipedream.
 *    Define PD_MALLOC(sz), PD_CALLOC(n, sz), PD_REALLOC(p, sz) and PD_FREE(p)
 *    (all four) before the include to use your own allocator, and PDDEF
 *    (default: extern) to change the linkage of the public functions.
 *
 * Conventions: every fallible call returns pd_status; on failure the
 * out-parameters are untouched, nothing leaks, and pd_last_error() (per
 * thread) holds a one-line message naming the file, node or argument at
 * fault. Handles are opaque; destroy functions accept NULL. The library
 * never exits or aborts. docs/API.md describes every function.
 *
 * The implementation section is generated from the files of core/ by
 * tools/amalgamate.py (a test fails when it is stale): edit core/, then run
 * python3 tools/amalgamate.py.
 */
#if defined(PIPEDREAM_IMPLEMENTATION) && !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif

#ifndef PIPEDREAM_H
#define PIPEDREAM_H

#include <stddef.h>
#include <stdint.h>

#ifndef PDDEF
#define PDDEF extern
#endif

/* On every call that returns a pd_status: ignoring one is a compiler warning
 * (C23 and C++17 [[nodiscard]]; GCC and Clang's warn_unused_result, which a
 * (void) cast does not silence: test the status). */
#ifndef PD_NODISCARD
#if (defined(__cplusplus) && __cplusplus >= 201703L) || (defined(__STDC_VERSION__) && __STDC_VERSION__ > 201710L)
#define PD_NODISCARD [[nodiscard]]
#elif defined(__GNUC__) || defined(__clang__)
#define PD_NODISCARD __attribute__((warn_unused_result))
#else
#define PD_NODISCARD
#endif
#endif

#define PD_VERSION_MAJOR 0
#define PD_VERSION_MINOR 1
#define PD_VERSION_PATCH 0
#define PD_VERSION_STRING "0.1.0"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pd_status {
    PD_OK = 0,
    PD_ERR_IO,          /* a file could not be read or written */
    PD_ERR_PARSE,       /* a file is corrupt or truncated */
    PD_ERR_UNSUPPORTED, /* an op, attribute or dtype we do not implement */
    PD_ERR_SHAPE,       /* shapes or dtypes that do not fit */
    PD_ERR_INVALID,     /* a bad argument or an inconsistent model */
    PD_ERR_NOMEM,       /* an allocation failed or a size overflowed */
    PD_ERR_NUMERIC,     /* a NaN or Inf where a finite value is required */
    PD_ERR_INTERNAL
} pd_status;

/* Element types, numbered as ONNX's TensorProto.DataType. */
typedef enum pd_dtype {
    PD_UNDEFINED = 0,
    PD_FLOAT = 1,
    PD_UINT8 = 2,
    PD_INT8 = 3,
    PD_UINT16 = 4,
    PD_INT16 = 5,
    PD_INT32 = 6,
    PD_INT64 = 7,
    PD_STRING = 8,
    PD_BOOL = 9,
    PD_FLOAT16 = 10,
    PD_DOUBLE = 11,
    PD_UINT32 = 12,
    PD_UINT64 = 13,
    PD_BFLOAT16 = 16,
    /* The low-bit types: one byte per element in memory (the 4- and 2-bit ones
     * unpacked, int4/int2 sign-extended); only Cast, CastLike, the quantization
     * ops and the ops that move bytes take them. */
    PD_FLOAT8E4M3FN = 17,
    PD_FLOAT8E4M3FNUZ = 18,
    PD_FLOAT8E5M2 = 19,
    PD_FLOAT8E5M2FNUZ = 20,
    PD_UINT4 = 21,
    PD_INT4 = 22,
    PD_FLOAT4E2M1 = 23,
    PD_FLOAT8E8M0 = 24,
    PD_UINT2 = 25,
    PD_INT2 = 26
} pd_dtype;

#define PD_MAX_DIMS 8

/* A tensor view: dense, C order. `data` is not owned by the view unless a
 * function says so (pd_npy_load: free with pd_tensor_free). */
typedef struct pd_tensor {
    pd_dtype dtype;
    int ndim;
    int64_t shape[PD_MAX_DIMS];
    void *data;
} pd_tensor;

PDDEF const char *pd_last_error(void);
/* The version of the library linked at run time, "MAJOR.MINOR.PATCH"; a
 * program built against this header has PD_VERSION_STRING. */
PDDEF const char *pd_version(void);
/* The OpenBLAS kernels to ask for on this CPU, as OPENBLAS_CORETYPE's value
 * ("SKYLAKEX", "HASWELL" or "SANDYBRIDGE"), when the OpenBLAS loaded chose
 * kernels for older vector instructions than the CPU has: an OpenBLAS older
 * than the CPU takes its SSE3 (Prescott) kernels, 2.5-4x slower (OpenBLAS
 * computes the recurrent layers' and float64 products, and all of them in a
 * build without oneDNN). NULL when its choice fits, OPENBLAS_CORETYPE is set, the
 * OpenBLAS is built for one CPU (it reads no OPENBLAS_CORETYPE then), or the
 * CPU is not x86. OpenBLAS reads the variable once, when it loads, so set it
 * before the program starts; pdonnx runs itself again with it. Static
 * string; needs libpipedream. */
PDDEF const char *pd_blas_coretype_advice(void);
PDDEF const char *pd_status_name(pd_status s);
PDDEF const char *pd_dtype_name(pd_dtype t);
PDDEF size_t pd_dtype_size(pd_dtype t); /* 0 for strings and undefined */
PDDEF int64_t pd_tensor_numel(const pd_tensor *t);
PDDEF void pd_tensor_free(pd_tensor *t); /* frees data from pd_npy_load etc. */

/* ---- NumPy .npy files ---------------------------------------------------- */
PD_NODISCARD PDDEF pd_status pd_npy_load(const char *path, pd_tensor *out);
PD_NODISCARD PDDEF pd_status pd_npy_save(const char *path, const pd_tensor *t);
/* Reads only the header: dtype and shape, data left NULL. */
PD_NODISCARD PDDEF pd_status pd_npy_peek(const char *path, pd_tensor *out);

/* ---- Graphs ------------------------------------------------------------ */
typedef struct pd_graph pd_graph;

/* A runtime input's shape. name NULL: the model's first runtime input, whose
 * dims the model leaves symbolic or unknown take this shape's (the others,
 * and the batch from pd_load_options.batch, stay) when the ranks agree: a
 * data file's row shape binding a sequence length. At most one without a name. */
typedef struct pd_input_shape {
    const char *name;
    int ndim;
    int64_t shape[PD_MAX_DIMS];
    pd_dtype dtype; /* PD_UNDEFINED: not checked; else must match the model's */
} pd_input_shape;

typedef struct pd_load_options {
    size_t size;      /* sizeof(pd_load_options) */
    int64_t batch;    /* binds a symbolic first dim of every graph input; 0: none */
    int n_input_shapes; /* concrete shapes for named inputs (override the model's) */
    const pd_input_shape *input_shapes;
    int fold_constants; /* fold shape subgraphs and constant nodes (default 1) */
    /* Inputs whose values are fixed at load: they become constants, so shapes
     * that depend on them (a Reshape's target, say) are known. */
    int n_const_inputs;
    const char *const *const_input_names;
    const pd_tensor *const_inputs;
    /* Cap on the bytes of the constants folding may create, all together
     * (0: PD_MAX_CONSTANT_BYTES_DEFAULT). A 100-byte model can ask for a
     * ConstantOfShape of 8 GiB: beyond the cap the load is refused, naming the
     * node and the size. */
    int64_t max_constant_bytes;
    /* Initializers tied through Identity (the TorchScript exporter, in eval
     * mode, stores equal-valued initializers once and makes the others
     * Identity of it, so they would train as one), and 2-D ones stored as
     * another's transpose (PyTorch's tied LM head, which both exporters
     * write twice: by default they train as one, as in PyTorch): 1 gives
     * each its own copy. Either way pd_graph_tied lists them. */
    int untie;
    /* 1: float16 and bfloat16 tensors (a model.half() export) are computed
     * and trained in float32: initializers, inputs and outputs, Cast targets
     * and constants become float32 (a note says how many); pd_graph_save
     * writes the initializers back in the file's types. */
    int half_as_float;
    /* 1: float32 initializers stored as external data are not read at load
     * (their file, offset and length are checked and kept): a session reads
     * each when it is made, and the pipeline under MPI only those of the
     * stages its process runs, so no process holds the whole model
     * (docs/DISTRIBUTED.md, "Per-stage loading"). Transposed ties among them
     * are not looked for (that would read every candidate pair). */
    int lazy_weights;
} pd_load_options;
#define PD_MAX_CONSTANT_BYTES_DEFAULT ((int64_t)1 << 30) /* 1 GiB */
#define PD_LOAD_OPTIONS_INIT {sizeof(pd_load_options), 0, 0, NULL, 1, 0, NULL, NULL, PD_MAX_CONSTANT_BYTES_DEFAULT, 0, 0, 0}

PD_NODISCARD PDDEF pd_status pd_graph_load_file(const char *path, const pd_load_options *opt, pd_graph **out);
/* `name` names the model in messages; `base_dir` resolves external data (NULL: none allowed). */
PD_NODISCARD PDDEF pd_status pd_graph_load_memory(const void *buf, size_t len, const char *name,
                                     const char *base_dir, const pd_load_options *opt, pd_graph **out);
PDDEF void pd_graph_destroy(pd_graph *g);

typedef struct pd_value_info {
    const char *name;
    pd_dtype dtype;
    int ndim;
    int64_t shape[PD_MAX_DIMS];
} pd_value_info;

typedef struct pd_node_info {
    const char *name;
    const char *op_type;
    int n_inputs, n_outputs;
    int64_t flops;         /* forward FLOPs (multiply-add = 2); the three counts stop at INT64_MAX */
    int64_t param_bytes;   /* bytes of float initializers it reads */
    int64_t output_bytes;  /* bytes of its outputs (activations) */
} pd_node_info;

PDDEF int pd_graph_num_nodes(const pd_graph *g);
PDDEF int pd_graph_num_inputs(const pd_graph *g);  /* runtime inputs, initializers excluded */
PDDEF int pd_graph_num_outputs(const pd_graph *g);
PD_NODISCARD PDDEF pd_status pd_graph_node(const pd_graph *g, int i, pd_node_info *out);
/* Name of input/output tensor j of node i (NULL for an absent optional one). */
PDDEF const char *pd_graph_node_input(const pd_graph *g, int i, int j);
PDDEF const char *pd_graph_node_output(const pd_graph *g, int i, int j);
PD_NODISCARD PDDEF pd_status pd_graph_input(const pd_graph *g, int i, pd_value_info *out);
PD_NODISCARD PDDEF pd_status pd_graph_output(const pd_graph *g, int i, pd_value_info *out);
PD_NODISCARD PDDEF pd_status pd_graph_value(const pd_graph *g, const char *name, pd_value_info *out);
PDDEF int64_t pd_graph_param_bytes(const pd_graph *g);
/* Initializers the model ties to another through an Identity node: `alias`
 * is computed as Identity(`source`) (pd_load_options.untie: it was given its
 * own copy of source's values at load). */
PDDEF int pd_graph_num_tied(const pd_graph *g);
PD_NODISCARD PDDEF pd_status pd_graph_tied(const pd_graph *g, int i, const char **alias, const char **source);
/* 1 when tie i stores alias as source's transpose (a tied LM head as both of
 * PyTorch's exporters write it): unless untie, alias is Transpose(source). */
PDDEF int pd_graph_tied_transposed(const pd_graph *g, int i);
/* What the loader found an exporter did to the model that changes what
 * trains (a parameter folded into another tensor, ...): one line each, for
 * the user (pdonnx train prints them). NULL past the end. */
PDDEF int pd_graph_num_notes(const pd_graph *g);
PDDEF const char *pd_graph_note(const pd_graph *g, int i);

/* ---- Inference engine ------------------------------------------------------ */
typedef struct pd_engine pd_engine;

typedef struct pd_engine_options {
    size_t size;        /* sizeof(pd_engine_options) */
    int threads;        /* 0: all cores */
    const char *backend; /* "cpu" (default) */
} pd_engine_options;
#define PD_ENGINE_OPTIONS_INIT {sizeof(pd_engine_options), 0, NULL}

/* The engine keeps a pointer to the graph: destroy the engine first. */
PD_NODISCARD PDDEF pd_status pd_engine_create(pd_graph *g, const pd_engine_options *opt, pd_engine **out);
PDDEF void pd_engine_destroy(pd_engine *e);
/* Copies t into the input (dtype and shape must match the graph's). */
PD_NODISCARD PDDEF pd_status pd_engine_set_input(pd_engine *e, const char *name, const pd_tensor *t);
PD_NODISCARD PDDEF pd_status pd_engine_run(pd_engine *e);
/* A view of an output (or any computed tensor) valid until the next run or destroy. */
PD_NODISCARD PDDEF pd_status pd_engine_get_output(pd_engine *e, const char *name, pd_tensor *out);


/* ---- Training (one stage) ------------------------------------------------------ */
typedef struct pd_session pd_session;

typedef enum pd_loss_kind {
    PD_LOSS_AUTO = 0,       /* cross_entropy for integer labels, mse otherwise */
    PD_LOSS_CROSS_ENTROPY,  /* softmax over the last axis vs int64 classes, mean over the rest */
    PD_LOSS_MSE,            /* mean over all elements */
    PD_LOSS_GRAPH           /* the model's own SoftmaxCrossEntropyLoss / NegativeLogLikelihoodLoss output */
} pd_loss_kind;

typedef enum pd_optimizer_kind {
    PD_OPT_SGD = 0,
    PD_OPT_MOMENTUM,
    PD_OPT_NESTEROV,
    PD_OPT_ADAM,
    PD_OPT_ADAMW
} pd_optimizer_kind;

/* Where a session computes. PD_DEVICE_CUDA needs a build with the CUDA
 * backend (-Dcuda) and a GPU: pd_session_create says which is missing. */
typedef enum pd_device_kind { PD_DEVICE_CPU = 0, PD_DEVICE_CUDA } pd_device_kind;
/* CUDA matrix products (GEMM, MatMul, Conv). Weights, activations, gradients
 * and optimizer state are fp32 in memory in every mode:
 *   FP32  fp32 products (no TF32 anywhere)
 *   TF32  TF32 tensor-core products (cuBLAS and cuDNN)
 *   BF16  cuBLAS products with inputs rounded to bf16 on tensor cores, fp32
 *         accumulation; cuDNN convolutions as TF32 */
typedef enum pd_precision { PD_PRECISION_FP32 = 0, PD_PRECISION_TF32, PD_PRECISION_BF16 } pd_precision;
/* GPUs this process can use: 0 without a GPU or driver, in a build without
 * the CUDA backend, or when the backend's module (libpdcuda.so, loaded by
 * the first CUDA call and not before) or a CUDA library it needs cannot be
 * loaded; pd_session_create with PD_DEVICE_CUDA then says which. Never fails. */
PDDEF int pd_cuda_device_count(void);

typedef struct pd_train_options {
    size_t size;               /* sizeof(pd_train_options) */
    pd_loss_kind loss;
    const char *output;        /* the prediction output (NULL: the model's first output) */
    const char *labels_input;  /* PD_LOSS_GRAPH: the graph input that takes the labels (NULL: found) */
    pd_optimizer_kind optimizer;
    double lr;                 /* 0.01 */
    double momentum;           /* 0.9 */
    double beta1, beta2, eps;  /* 0.9, 0.999, 1e-8 */
    double weight_decay;       /* 0 */
    double clip_grad_norm;     /* 0: off */
    int64_t warmup_steps;      /* linear warm-up from lr/warmup to lr */
    int64_t cosine_steps;      /* > 0: cosine decay to min_lr at this step */
    double min_lr;
    const char *freeze;        /* POSIX extended regex: matching parameters are not trained */
    uint64_t seed;             /* Dropout's random stream */
    int threads;               /* 0: all cores */
    pd_device_kind device;     /* PD_DEVICE_CPU (default) or PD_DEVICE_CUDA (one-stage sessions) */
    int device_index;          /* PD_DEVICE_CUDA: the GPU, 0-based */
    pd_precision precision;    /* PD_DEVICE_CUDA: the matrix products' precision (PD_PRECISION_FP32) */
    const char *trainable;     /* POSIX extended regex: matching initializers are trained even where the model
                                  says not (single-element constants, or absent from its training_info) */
} pd_train_options;
#define PD_TRAIN_OPTIONS_INIT                                                                                        \
    {sizeof(pd_train_options), PD_LOSS_AUTO, NULL, NULL, PD_OPT_SGD, 0.01, 0.9, 0.9, 0.999, 1e-8, 0, 0, 0, 0, 0, NULL, \
     0, 0, PD_DEVICE_CPU, 0, PD_PRECISION_FP32, NULL}
/* Parses "cpu", "cuda" or "cuda:N" into o->device and o->device_index; and
 * "fp32", "tf32" or "bf16" into o->precision (either string may be NULL).
 * "sim" or "sim:N" (N from 1 to 8) is the simulated device: the CUDA path on
 * the CPU (device memory host code cannot touch, a thread per stream; for
 * testing, docs/CUDA.md), with N devices, as device 0. It switches the
 * whole process's CUDA API, so it comes before any CUDA use and is refused
 * after a real GPU was used. */
PD_NODISCARD PDDEF pd_status pd_train_options_set_device(pd_train_options *o, const char *device, const char *precision);

typedef struct pd_step_result {
    double loss;        /* mean loss of the minibatch, from the forward that made the gradients */
    double lr;          /* the learning rate the update used */
    double grad_norm;   /* global L2 norm of the gradients before clipping */
    int64_t correct;    /* cross_entropy: correctly classified positions */
    int64_t count;      /* positions the loss averaged over */
} pd_step_result;

/* The session trains the graph's float initializers in place: pd_graph_save
 * and the graph's values see the trained weights. Destroy it before the graph. */
PD_NODISCARD PDDEF pd_status pd_session_create(pd_graph *g, const pd_train_options *opt, pd_session **out);
PDDEF void pd_session_destroy(pd_session *s);
/* Feeds a graph input for the next step or evaluation (copied). */
PD_NODISCARD PDDEF pd_status pd_session_set_input(pd_session *s, const char *name, const pd_tensor *t);
PD_NODISCARD PDDEF pd_status pd_session_set_labels(pd_session *s, const pd_tensor *labels);
/* Forward, backward and one optimizer update. */
PD_NODISCARD PDDEF pd_status pd_session_step(pd_session *s, pd_step_result *r);
/* Forward only, in inference mode (BatchNorm uses running statistics). */
PD_NODISCARD PDDEF pd_status pd_session_eval(pd_session *s, pd_step_result *r);
/* The same over the first `rows` rows of the batch only (a last, partial batch). */
PD_NODISCARD PDDEF pd_status pd_session_eval_rows(pd_session *s, int64_t rows, pd_step_result *r);
/* The batch size the graph was loaded with (the prediction's first dim). */
PDDEF int64_t pd_session_batch(const pd_session *s);
PDDEF int pd_session_num_params(const pd_session *s);
/* Float initializers that reach the loss but are not trained, and why: the
 * model's own answer (training_info, or a single-element constant) or the
 * freeze pattern. info and why may be NULL. */
PDDEF int pd_session_num_untrained(const pd_session *s);
PD_NODISCARD PDDEF pd_status pd_session_untrained(const pd_session *s, int i, pd_value_info *info, const char **why);
/* Name, shape and current values of trainable parameter i (a view). */
PD_NODISCARD PDDEF pd_status pd_session_param(pd_session *s, int i, const char **name, pd_tensor *value, pd_tensor *grad);
PDDEF int64_t pd_session_step_count(const pd_session *s);
/* PD_DEVICE_CUDA: copies the trained weights, optimizer state and BatchNorm
 * statistics from the GPU into host memory, where the graph's initializers
 * (pd_graph_save, pd_graph_value's data) read them; pd_session_param,
 * snapshots and pd_session_destroy do it themselves. A no-op on the CPU. */
PD_NODISCARD PDDEF pd_status pd_session_sync(pd_session *s);
/* The session's whole training state (weights, optimizer state, step count,
 * BatchNorm statistics) serialized into a new buffer (free it with
 * pd_buffer_free), and back into a session of the same model and options:
 * training on from a restored state equals training on without the pause,
 * bitwise. A restore that fails leaves the session as it was. */
PD_NODISCARD PDDEF pd_status pd_session_snapshot(const pd_session *s, void **buf, size_t *len);
PD_NODISCARD PDDEF pd_status pd_session_restore(pd_session *s, const void *buf, size_t len);

/* Writes the model with the graph's current initializer values (trained ones
 * included) through a temporary file and a rename. */
PD_NODISCARD PDDEF pd_status pd_graph_save(const pd_graph *g, const char *path);
/* The same model serialized into a new buffer of *len bytes (for
 * pd_graph_load_memory, say); free it with pd_buffer_free. */
PD_NODISCARD PDDEF pd_status pd_graph_save_memory(const pd_graph *g, void **buf, size_t *len);
PDDEF void pd_buffer_free(void *buf);

/* ---- Profiles: per-node costs -------------------------------------------------------- */
/* A profile holds, for every node of a model (or a layer of a PipeDream
 * profile), its forward and backward times for one microbatch and its
 * activation, parameter and optimizer-state bytes, plus the DAG's edges. */
typedef struct pd_profile pd_profile;

typedef struct pd_profile_node_info {
    const char *name;
    const char *desc;      /* op type or layer description */
    double fwd_ms;
    double bwd_in_ms;      /* backward: input gradient */
    double bwd_w_ms;       /* backward: weight gradient */
    double act_bytes;      /* output activation bytes */
    double param_bytes;
    double optim_bytes;
} pd_profile_node_info;

typedef struct pd_profile_options {
    size_t size;              /* sizeof(pd_profile_options) */
    const char *device;       /* "cpu" (default), "cuda" or "cuda:N" (nodes timed with CUDA events) */
    int warmup;               /* untimed steps first (2) */
    int repeats;              /* timed steps; the median is kept (5) */
    int threads;              /* 0: all cores */
    pd_optimizer_kind optimizer; /* sizes the optimizer state (adam: 2 floats per parameter) */
    pd_loss_kind loss;        /* the loss the backward starts from */
} pd_profile_options;
#define PD_PROFILE_OPTIONS_INIT {sizeof(pd_profile_options), NULL, 2, 5, 0, PD_OPT_SGD, PD_LOSS_AUTO}

/* Measures every node by running real training steps of `g` (loaded with the
 * microbatch size as its batch) on the backend. */
PD_NODISCARD PDDEF pd_status pd_profile_measure(pd_graph *g, const pd_profile_options *opt, pd_profile **out);
/* Reads a profile: our JSON, or PipeDream's graph.txt (told apart by content). */
PD_NODISCARD PDDEF pd_status pd_profile_load(const char *path, pd_profile **out);
PD_NODISCARD PDDEF pd_status pd_profile_save(const pd_profile *p, const char *path);           /* JSON */
PD_NODISCARD PDDEF pd_status pd_profile_save_pipedream(const pd_profile *p, const char *path); /* graph.txt */
/* A profile from arrays: n_nodes entries of costs (name NULL: "node<i>"; desc
 * NULL: "") and n_edges edges, edges[2k] -> edges[2k+1] (producer, consumer,
 * as node indices). Names are copied. Nodes are put in a topological order
 * that keeps the given one where the edges allow it, so pd_profile_node(i)
 * is nodes[i] for a profile given in order. batch: the microbatch size the
 * times are for (0: unknown). Errors: a bad argument, an edge out of range,
 * a cycle, a negative or non-finite cost. */
PD_NODISCARD PDDEF pd_status pd_profile_create(const pd_profile_node_info *nodes, int n_nodes, const int *edges, int n_edges,
                                  int64_t batch, pd_profile **out);
PDDEF void pd_profile_destroy(pd_profile *p);
PDDEF int pd_profile_num_nodes(const pd_profile *p);
PD_NODISCARD PDDEF pd_status pd_profile_node(const pd_profile *p, int i, pd_profile_node_info *out);
/* Fits each node's per-call cost, the part of its times that does not
 * shrink with the rows, from the same model profiled at other batch sizes
 * (at[0..n-1]: p's nodes in p's order, each profile at a batch of its own,
 * 1 <= n <= 8): the least-squares line through the point at p's batch B, so
 * p's times stay; at b rows the planner then takes call + (t - call) * b / B
 * instead of t * b / B. Errors: a batch unknown or equal to p's, other nodes. */
PD_NODISCARD PDDEF pd_status pd_profile_fit(pd_profile *p, const pd_profile *const *at, int n);
/* Node i's per-call costs: out[0] forward, out[1] input gradient, out[2]
 * weight gradient, in ms (0: the time scales linearly with the rows). */
PD_NODISCARD PDDEF pd_status pd_profile_node_call(const pd_profile *p, int i, double out[3]);

/* ---- Plans: stages, replicas, microbatches ------------------------------------------- */
typedef struct pd_plan pd_plan;

typedef struct pd_plan_options {
    size_t size;              /* sizeof(pd_plan_options) */
    const char *algo;         /* "pipedream" (default), "2bw", "bipartition", "uniform", "params", "avgpipe" */
    const char *cost_model;   /* "default" (transfers counted and overlapped) or "pipedream" (PipeDream's optimizer) */
    int workers;              /* total workers (the product of the topology's levels when given) */
    int n_levels;             /* hierarchical topology, innermost level first: 0 = one level */
    const int *level_workers; /* workers per level, e.g. {4, 4} */
    const double *level_bandwidth; /* bytes/s at each level, e.g. {10e9, 1.25e9} */
    double bandwidth;         /* one level: bytes/s between workers (default 10e9) */
    double memory;            /* bytes per worker; 0: unlimited */
    int microbatches;         /* per minibatch; 0: the planner's choice */
    int straight;             /* no stage replication */
    double activation_compression; /* pipedream cost model: count transfers, divided by this (0: not counted) */
    int max_states;           /* bound on the cut states of a branching DAG (0: 4096); over it a beam of cuts */
    int64_t microbatch_size;  /* rows per microbatch (0: the profile's batch); the profile's times are scaled
                                 to it with their per-call costs (pd_profile_fit), activations linearly */
} pd_plan_options;
#define PD_PLAN_OPTIONS_INIT {sizeof(pd_plan_options), NULL, NULL, 1, 0, NULL, NULL, 10e9, 0, 0, 0, 0, 0, 0}

typedef struct pd_plan_info {
    int n_stages;
    int workers;              /* workers used (sum of replicas times width) */
    int microbatches;
    int width;                /* parallel pipelines (2bw) */
    double time_ms;           /* predicted time per minibatch (steady state) */
    double speedup;           /* over one worker */
    double dp_speedup;        /* over pure data parallelism on the same workers */
    double bubble;            /* predicted idle fraction */
    double throughput;        /* samples per second */
} pd_plan_info;

typedef struct pd_stage_info {
    int first_node, n_nodes;  /* forward nodes, as profile indices: first and count (a DAG stage may not be contiguous: see pd_plan_node_stage) */
    int replicas;
    double compute_ms;        /* forward + backward per microbatch on one replica */
    double comm_ms;           /* activation + gradient transfer per microbatch */
    double memory_bytes;      /* predicted per worker */
} pd_stage_info;

PD_NODISCARD PDDEF pd_status pd_plan_create(const pd_profile *p, const pd_plan_options *opt, pd_plan **out);
PD_NODISCARD PDDEF pd_status pd_plan_save(const pd_plan *p, const char *path); /* JSON */
PD_NODISCARD PDDEF pd_status pd_plan_load(const char *path, pd_plan **out);
PDDEF void pd_plan_destroy(pd_plan *p);
PD_NODISCARD PDDEF pd_status pd_plan_info_get(const pd_plan *p, pd_plan_info *out);
PD_NODISCARD PDDEF pd_status pd_plan_stage(const pd_plan *p, int i, pd_stage_info *out);
/* The stage that runs node i's forward (and, in *bwd, its backward). */
PDDEF int pd_plan_node_stage(const pd_plan *p, int i, int *bwd);

/* ---- Simulation ------------------------------------------------------------------- */
typedef struct pd_sim_options {
    size_t size;              /* sizeof(pd_sim_options) */
    const char *schedule;     /* "gpipe", "flush", "pipedream", "2bw", "interleaved", "zb-h1", "avgpipe" */
    int microbatches;         /* per minibatch (0: the plan's) */
    int minibatches;          /* simulated minibatches (0: enough for a steady state) */
    int chunks;               /* interleaved: virtual stages per worker (2) */
    const char *trace;        /* write a Chrome/Perfetto trace here (NULL: none) */
    const char *svg;          /* draw the timeline here (NULL: none) */
} pd_sim_options;
#define PD_SIM_OPTIONS_INIT {sizeof(pd_sim_options), "flush", 0, 0, 2, NULL, NULL}

typedef struct pd_sim_stage {
    double busy_ms;           /* compute time on this worker */
    double peak_act_bytes;    /* activations held at the peak */
    int peak_act_mbs;         /* microbatches whose activations are held at the peak */
    int peak_versions;        /* weight versions held at the peak */
} pd_sim_stage;

typedef struct pd_sim_result {
    double time_ms;           /* per minibatch (steady state for asynchronous schedules) */
    double makespan_ms;       /* the whole simulated run */
    double throughput;        /* samples per second */
    double bubble;            /* idle fraction: 1 - busy / (workers * makespan) */
    int n_stages;
    pd_sim_stage *stage;      /* n_stages entries; free with pd_sim_result_free */
} pd_sim_result;

PD_NODISCARD PDDEF pd_status pd_simulate(const pd_plan *p, const pd_sim_options *opt, pd_sim_result *out);
PDDEF void pd_sim_result_free(pd_sim_result *r);

/* ---- Pipeline training: a plan's stages as threads of this process ---------------------- */
/* A trainer runs a plan (pd_plan_create or pd_plan_load) on a graph loaded
 * with the microbatch size as its batch: one thread per stage (replica), the
 * schedule's instruction lists, activations and gradients through in-process
 * queues. It trains the graph's initializers in place, as a session does:
 * between pd_trainer_train calls and after pd_trainer_destroy, pd_graph_save
 * sees the trained weights. Data is pushed: each pd_trainer_train call gets
 * every step's rows at once (the schedule keeps several minibatches in
 * flight), read only during the call.
 *
 * Under MPI (opt->mpi = 1; the program launched by mpirun, one process per
 * stage replica, or per group of stages sharing a rank in the plan's
 * stage_to_rank): every process makes the same calls with the same
 * arguments (collective), each runs its own stage replicas, the steps'
 * results come back on every process, and after each call every process's
 * graph holds the whole trained model (rank 0 saves it). A failure on one
 * process is a pd_status on every process, naming the rank. */
typedef struct pd_trainer pd_trainer;

typedef struct pd_trainer_options {
    size_t size;                /* sizeof(pd_trainer_options) */
    const pd_train_options *train; /* loss, optimizer, ... as for pd_session_create (NULL: PD_TRAIN_OPTIONS_INIT) */
    const char *schedule;       /* "flush" (1F1B, default), "gpipe", "zb-h1", "interleaved", "pipedream", "2bw" */
    int microbatches;           /* per step (0: the plan's; pipedream: 1) */
    int vertical_sync;          /* pipedream: every stage runs a microbatch on stage 0's version */
    const char *checkpoint_dir; /* NULL: no checkpoints */
    int64_t checkpoint_every;   /* also every this many steps (0: only at the end of each pd_trainer_train;
                                   PD_CHECKPOINT_AUTO: CheckFreq's interval from the measured costs) */
    int checkpoint_keep;        /* the newest checkpoints kept (0: all; default 3) */
    int mpi;                    /* 1: this process runs its share of the plan under MPI (pd_mpi_init first) */
    int recompute;              /* 1: activation recomputation, as the plan's "recompute": true (either turns it on):
                                   a stage keeps per microbatch only what it received and runs its forward again
                                   before the backward; the same results bit for bit, fewer activations held */
    double checkpoint_overhead; /* PD_CHECKPOINT_AUTO's budget: checkpoints cost at most this share of the
                                   training time (0: 0.035) */
} pd_trainer_options;
#define PD_TRAINER_OPTIONS_INIT {sizeof(pd_trainer_options), NULL, "flush", 0, 0, NULL, 0, 3, 0, 0, 0.0}
/* checkpoint_every: CheckFreq's policy (Mohan et al., FAST '21): a first
 * checkpoint after 3 steps measures what one costs (the snapshot's pause,
 * the persist), then the fewest steps apart that keep that cost under
 * checkpoint_overhead of the training time, measured again after each. */
#define PD_CHECKPOINT_AUTO (-1)

/* Where pd_trainer_resume put the trainer. A checkpoint taken inside a
 * pd_trainer_train call of run_steps steps that began at step run_first
 * (step < run_first + run_steps) is finished by repeating that call: the
 * same steps and the same data; the steps before `step` are skipped. */
typedef struct pd_resume_info {
    int64_t step;               /* steps the checkpoint had done */
    int64_t run_first;          /* the step its pd_trainer_train call began at */
    int64_t run_steps;          /* that call's steps */
} pd_resume_info;

/* Keeps a pointer to g (destroy the trainer first); copies what it needs of
 * plan and opt. One trainer or session per graph at a time. */
PD_NODISCARD PDDEF pd_status pd_trainer_create(pd_graph *g, const pd_plan *plan, const pd_trainer_options *opt, pd_trainer **out);
/* PD_OK when plan was made for g: the same nodes, by count and name (what
 * pd_trainer_create checks first); else an error naming the first difference. */
PD_NODISCARD PDDEF pd_status pd_trainer_check_plan(const pd_graph *g, const pd_plan *plan);
/* Waits for checkpoints being written; gives the trained weights back to the graph. */
PDDEF void pd_trainer_destroy(pd_trainer *t);
/* Writes the trained model to path (collective under MPI: rank 0 writes it).
 * With a graph loaded with lazy_weights under MPI each process holds only its
 * stages' weights (no gather after pd_trainer_train): each writes its stages'
 * tensors to "<path>.stage<k>.bin" beside path and rank 0 writes the model
 * last, referring to them; pd_graph_save then refuses, naming a weight
 * another process trained. */
PD_NODISCARD PDDEF pd_status pd_trainer_save(pd_trainer *t, const char *path);
PDDEF int pd_trainer_stages(const pd_trainer *t);
/* Rows of one step: microbatches times the graph's batch. */
PDDEF int64_t pd_trainer_batch(const pd_trainer *t);
PDDEF int64_t pd_trainer_step_count(const pd_trainer *t);
/* Trains `steps` steps. inputs[i] feeds graph input i (pd_graph_input
 * order; the labels input's entry is ignored under PD_LOSS_GRAPH) and labels
 * the loss, each with steps * pd_trainer_batch(t) rows (at least): step k
 * takes rows k*B .. k*B+B-1. results (NULL, or `steps` entries): each step's
 * mean loss, learning rate and gradient norm (0 under pipedream and 2bw);
 * zeroed for the steps a resume skips. With a checkpoint folder, returns
 * once the call's checkpoints are on disk. */
PD_NODISCARD PDDEF pd_status pd_trainer_train(pd_trainer *t, int64_t steps, const pd_tensor *inputs, const pd_tensor *labels,
                                 pd_step_result *results);
/* Rows on demand, so a call need not hold every step's rows (a data stream,
 * a file larger than memory): after pd_trainer_set_ring(t, steps, fill, ctx)
 * each pd_trainer_train's inputs and labels hold `steps` steps of rows (a
 * ring), and fill(ctx, k, slot) writes the call's step k (from 0) into slot
 * `slot` (k % steps) of them before any of its rows is read: on a stage's
 * thread, one call at a time; an error stops the call. steps is at least
 * pd_trainer_ring_steps(t), the steps the schedule reads ahead; steps 0 and
 * fill NULL: every step's rows at once again. The same losses and weights,
 * bit for bit, as the rows given at once. */
typedef pd_status (*pd_trainer_fill)(void *ctx, int64_t step, int slot);
PD_NODISCARD PDDEF pd_status pd_trainer_set_ring(pd_trainer *t, int steps, pd_trainer_fill fill, void *ctx);
PDDEF int pd_trainer_ring_steps(const pd_trainer *t);
/* Restores the newest valid checkpoint of dir (one taken with the same
 * model, plan, schedule and options, or an error naming what differs). */
PD_NODISCARD PDDEF pd_status pd_trainer_resume(pd_trainer *t, const char *dir, pd_resume_info *out);

/* MPI for trainers with opt->mpi (libpipedream built with MPI; else
 * PD_ERR_UNSUPPORTED). pd_mpi_init initializes MPI at
 * MPI_THREAD_SERIALIZED, or uses the program's own MPI when the program
 * already called MPI_Init_thread (at that level or above); it gives this
 * process's rank and the number of processes (either pointer may be NULL).
 * pd_mpi_finalize finalizes MPI only when pd_mpi_init initialized it:
 * a program that initialized MPI finalizes it itself. Destroy trainers first. */
PD_NODISCARD PDDEF pd_status pd_mpi_init(int *rank, int *size);
PDDEF void pd_mpi_finalize(void);


#ifdef __cplusplus
}
#endif
#endif /* PIPEDREAM_H */

/* ---- the implementation ------------------------------------------------------------------ */
#ifdef PIPEDREAM_IMPLEMENTATION
#ifndef PIPEDREAM_IMPLEMENTATION_INCLUDED
#define PIPEDREAM_IMPLEMENTATION_INCLUDED
/* The implementation compiles as C11 and as C++11 (casts on allocations, no
 * jumps past initializations, no designated initializers or compound
 * literals): define PIPEDREAM_IMPLEMENTATION in one C or C++ file. */
/* Messages are cut to their buffers on purpose (the library builds with
 * -Wno-format-truncation for the same reason). */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 7
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
/* ==== BEGIN GENERATED IMPLEMENTATION (tools/amalgamate.py; edit core/, not this) ==== */
/* ==== core/util.c ==== */
/* util.c - errors, dtypes, element access and the small helpers every layer uses.
 *
 * The last error is per thread (like errno): a library call that fails sets it,
 * pd_last_error() reads it. No other mutable state is global.
 */
/* ---- core/pd_internal.h ---- */
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

/* #include "pipedream.h": the declarations above */
/* ---- core/ops.h ---- */
/* ops.h - the one list of operators.
 *
 * How it works: docs/INTERNALS.md, "core/ops.h".
 */
#ifndef PD_OPS_H
#define PD_OPS_H

#define PD_OPF_FOLD 1
#define PD_OPF_NN 2
#define PD_OPF_ELEM 4
#define PD_OPF_TENSOR 8
#define PD_OPF_FAMILY (PD_OPF_NN | PD_OPF_ELEM | PD_OPF_TENSOR | PD_OPF_RNN)
#define PD_OPF_BWD_WRITES 16
#define PD_OPF_HOST 32
#define PD_OPF_RNN 64
#define PD_GRAD_ALL 0xffffffffu

#define PD_OPS(X)                                                                                  \
    /* neural-network ops */                                                                       \
    X(GEMM, Gemm, PD_OPF_NN | PD_OPF_BWD_WRITES, 0x7, 0)                                           \
    X(MATMUL, MatMul, PD_OPF_NN | PD_OPF_BWD_WRITES, 0x3, 0)                                       \
    X(CONV, Conv, PD_OPF_NN, 0x7, 0)                                                               \
    X(CONV_TRANSPOSE, ConvTranspose, PD_OPF_NN | PD_OPF_HOST, 0x7, 0)                              \
    X(DEFORM_CONV, DeformConv, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0x1f, 0)                     \
    X(BATCH_NORM, BatchNormalization, PD_OPF_NN, 0x7, 0x18)                                        \
    X(LAYER_NORM, LayerNormalization, PD_OPF_NN, 0x7, 0)                                           \
    X(INSTANCE_NORM, InstanceNormalization, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0x7, 0)         \
    X(GROUP_NORM, GroupNormalization, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0x7, 0)               \
    X(RMS_NORM, RMSNormalization, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0x3, 0)                   \
    X(LP_NORM, LpNormalization, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                     \
    X(MVN, MeanVarianceNormalization, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)               \
    X(MAX_POOL, MaxPool, PD_OPF_NN, 0x1, 0)                                                        \
    X(AVERAGE_POOL, AveragePool, PD_OPF_NN, 0x1, 0)                                                \
    X(GLOBAL_AVERAGE_POOL, GlobalAveragePool, PD_OPF_NN, 0x1, 0)                                   \
    X(LP_POOL, LpPool, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                              \
    X(GLOBAL_MAX_POOL, GlobalMaxPool, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)               \
    X(MAX_UNPOOL, MaxUnpool, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                        \
    X(RESIZE, Resize, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                               \
    X(UPSAMPLE, Upsample, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                           \
    X(EINSUM, Einsum, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0x3, 0)                               \
    X(DET, Det, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                                     \
    X(LRN, LRN, PD_OPF_NN | PD_OPF_HOST, 0x1, 0)                                                   \
    X(SOFTMAX, Softmax, PD_OPF_NN, 0x1, 0)                                                         \
    X(LOG_SOFTMAX, LogSoftmax, PD_OPF_NN, 0x1, 0)                                                  \
    X(DROPOUT, Dropout, PD_OPF_NN | PD_OPF_HOST, 0x1, 0)                                           \
    /* random draws: never folded (each run draws), not differentiable */                         \
    X(BERNOULLI, Bernoulli, PD_OPF_NN | PD_OPF_HOST, 0, 0)                                         \
    X(RANDOM_UNIFORM_LIKE, RandomUniformLike, PD_OPF_NN | PD_OPF_HOST, 0, 0)                       \
    X(SOFTMAX_CE_LOSS, SoftmaxCrossEntropyLoss, PD_OPF_NN, 0x1, 0)                                 \
    X(NLL_LOSS, NegativeLogLikelihoodLoss, PD_OPF_NN | PD_OPF_HOST, 0x1, 0)                        \
    X(ROTARY_EMBEDDING, RotaryEmbedding, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)            \
    X(ATTENTION, Attention, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0x7, 0)                         \
    X(LINEAR_ATTENTION, LinearAttention, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0x3f, 0)           \
    X(CAUSAL_CONV_WITH_STATE, CausalConvWithState, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0xf, 0)  \
    /* domain ai.onnx.preview (onnx/load.c, node_op) */                                            \
    X(FLEX_ATTENTION, FlexAttention, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0x7, 0)                \
    X(GRID_SAMPLE, GridSample, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0x3, 0)                      \
    X(AFFINE_GRID, AffineGrid, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                      \
    X(COL2IM, Col2Im, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                               \
    X(CENTER_CROP_PAD, CenterCropPad, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)               \
    X(ROI_ALIGN, RoiAlign, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                            \
    /* quantized (integer) ops: no gradient */                                                     \
    X(MATMUL_INTEGER, MatMulInteger, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                  \
    X(QLINEAR_MATMUL, QLinearMatMul, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                  \
    X(CONV_INTEGER, ConvInteger, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                      \
    X(QLINEAR_CONV, QLinearConv, PD_OPF_NN | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                      \
    /* recurrent: inputs X, W, R, B, sequence_lens, initial_h (initial_c, P) */                    \
    X(LSTM, LSTM, PD_OPF_RNN | PD_OPF_FOLD | PD_OPF_HOST, 0xef, 0)                                 \
    X(GRU, GRU, PD_OPF_RNN | PD_OPF_FOLD | PD_OPF_HOST, 0x2f, 0)                                   \
    X(RNN, RNN, PD_OPF_RNN | PD_OPF_FOLD | PD_OPF_HOST, 0x2f, 0)                                   \
    /* element-wise */                                                                             \
    X(ADD, Add, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_BWD_WRITES, 0x3, 0)                             \
    X(SUB, Sub, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_BWD_WRITES, 0x3, 0)                             \
    X(MUL, Mul, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_BWD_WRITES, 0x3, 0)                             \
    X(DIV, Div, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_BWD_WRITES, 0x3, 0)                             \
    X(POW, Pow, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_BWD_WRITES | PD_OPF_HOST, 0x3, 0)               \
    X(SUM, Sum, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, PD_GRAD_ALL, 0)                           \
    X(SQRT, Sqrt, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_BWD_WRITES, 0x1, 0)                           \
    X(EXP, Exp, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_BWD_WRITES, 0x1, 0)                             \
    X(LOG, Log, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_BWD_WRITES, 0x1, 0)                             \
    X(NEG, Neg, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_BWD_WRITES, 0x1, 0)                             \
    X(RECIPROCAL, Reciprocal, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_BWD_WRITES, 0x1, 0)               \
    X(RELU, Relu, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_BWD_WRITES, 0x1, 0)                           \
    X(LEAKY_RELU, LeakyRelu, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_BWD_WRITES, 0x1, 0)                \
    X(SIGMOID, Sigmoid, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_BWD_WRITES, 0x1, 0)                     \
    X(TANH, Tanh, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_BWD_WRITES, 0x1, 0)                           \
    X(GELU, Gelu, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_BWD_WRITES, 0x1, 0)                           \
    X(ERF, Erf, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_BWD_WRITES, 0x1, 0)                             \
    X(CLIP, Clip, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_BWD_WRITES | PD_OPF_HOST, 0x1, 0)             \
    X(EQUAL, Equal, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                                 \
    X(WHERE, Where, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x6, 0)                               \
    X(CAST, Cast, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                                 \
    X(IDENTITY, Identity, PD_OPF_ELEM | PD_OPF_FOLD, 0x1, 0)                                       \
    X(LESS, Less, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                                   \
    X(LESS_OR_EQUAL, LessOrEqual, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                   \
    X(GREATER, Greater, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                             \
    X(GREATER_OR_EQUAL, GreaterOrEqual, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)             \
    X(AND, And, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                                     \
    X(OR, Or, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                                       \
    X(NOT, Not, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                                     \
    X(XOR, Xor, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                                     \
    X(BITWISE_AND, BitwiseAnd, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                      \
    X(BITWISE_OR, BitwiseOr, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                        \
    X(BITWISE_XOR, BitwiseXor, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                      \
    X(BITWISE_NOT, BitwiseNot, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                      \
    X(BIT_SHIFT, BitShift, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                          \
    X(IS_NAN, IsNaN, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                                \
    X(IS_INF, IsInf, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                                \
    X(MAX, Max, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, PD_GRAD_ALL, 0)                           \
    X(MIN, Min, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, PD_GRAD_ALL, 0)                           \
    X(MEAN, Mean, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, PD_GRAD_ALL, 0)                         \
    X(MOD, Mod, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x3, 0)                                   \
    X(ABS, Abs, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                                   \
    X(SIGN, Sign, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                                   \
    X(FLOOR, Floor, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                                 \
    X(CEIL, Ceil, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                                   \
    X(ROUND, Round, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                                 \
    X(HARD_SIGMOID, HardSigmoid, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                  \
    X(HARD_SWISH, HardSwish, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                      \
    X(SOFTPLUS, Softplus, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                         \
    X(SOFTSIGN, Softsign, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                         \
    X(ELU, Elu, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                                   \
    X(SELU, Selu, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                                 \
    X(CELU, Celu, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                                 \
    X(MISH, Mish, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                                 \
    X(SWISH, Swish, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                               \
    X(THRESHOLDED_RELU, ThresholdedRelu, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)          \
    X(PRELU, PRelu, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x3, 0)                               \
    X(SHRINK, Shrink, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                             \
    X(SIN, Sin, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                                   \
    X(COS, Cos, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                                   \
    X(TAN, Tan, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                                   \
    X(ASIN, Asin, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                                 \
    X(ACOS, Acos, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                                 \
    X(ATAN, Atan, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                                 \
    X(SINH, Sinh, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                                 \
    X(COSH, Cosh, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                                 \
    X(ASINH, Asinh, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                               \
    X(ACOSH, Acosh, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                               \
    X(ATANH, Atanh, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                               \
    X(CAST_LIKE, CastLike, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                        \
    X(BIT_CAST, BitCast, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                            \
    X(QUANTIZE_LINEAR, QuantizeLinear, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)              \
    X(DEQUANTIZE_LINEAR, DequantizeLinear, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)          \
    X(DYNAMIC_QUANTIZE_LINEAR, DynamicQuantizeLinear, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)\
    /* reductions */                                                                               \
    X(REDUCE_MEAN, ReduceMean, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                    \
    X(REDUCE_SUM, ReduceSum, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                      \
    X(REDUCE_MAX, ReduceMax, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                      \
    X(REDUCE_MIN, ReduceMin, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                      \
    X(REDUCE_PROD, ReduceProd, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                    \
    X(REDUCE_L1, ReduceL1, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                        \
    X(REDUCE_L2, ReduceL2, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                        \
    X(REDUCE_SUM_SQUARE, ReduceSumSquare, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)         \
    X(REDUCE_LOG_SUM, ReduceLogSum, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)               \
    X(REDUCE_LOG_SUM_EXP, ReduceLogSumExp, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)        \
    /* optimizer steps as graph nodes: domain ai.onnx.preview.training (onnx/load.c, node_op) */   \
    X(ADAGRAD, Adagrad, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                             \
    X(ADAM, Adam, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                                   \
    X(MOMENTUM, Momentum, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                           \
    /* domain ai.onnx.ml (onnx/load.c, node_op) */                                                 \
    X(BINARIZER, Binarizer, PD_OPF_ELEM | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                         \
    /* tensor manipulation */                                                                      \
    X(FLATTEN, Flatten, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_BWD_WRITES, 0x1, 0)                   \
    X(RESHAPE, Reshape, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_BWD_WRITES, 0x1, 0)                   \
    X(TRANSPOSE, Transpose, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_BWD_WRITES, 0x1, 0)               \
    X(CONCAT, Concat, PD_OPF_TENSOR | PD_OPF_FOLD, PD_GRAD_ALL, 0)                                 \
    X(SPLIT, Split, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_BWD_WRITES, 0x1, 0)                       \
    X(SLICE, Slice, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                             \
    X(GATHER, Gather, PD_OPF_TENSOR | PD_OPF_FOLD, 0x1, 0)                                         \
    X(UNSQUEEZE, Unsqueeze, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_BWD_WRITES, 0x1, 0)               \
    X(SQUEEZE, Squeeze, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_BWD_WRITES, 0x1, 0)                   \
    X(EXPAND, Expand, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                           \
    X(PAD, Pad, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                                 \
    X(CONSTANT, Constant, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                         \
    X(SHAPE, Shape, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                               \
    X(CONSTANT_OF_SHAPE, ConstantOfShape, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)         \
    X(RANGE, Range, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                               \
    X(CUMSUM, CumSum, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                           \
    X(TRILU, Trilu, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                             \
    X(SIZE, Size, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                                 \
    X(TILE, Tile, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                               \
    X(ONE_HOT, OneHot, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                            \
    X(GATHER_ELEMENTS, GatherElements, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)          \
    X(GATHER_ND, GatherND, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                      \
    X(SCATTER_ELEMENTS, ScatterElements, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0x5, 0)        \
    X(SCATTER_ND, ScatterND, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0x5, 0)                    \
    X(SCATTER, Scatter, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0x5, 0)                         \
    X(TENSOR_SCATTER, TensorScatter, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0x3, 0)            \
    X(ARG_MAX, ArgMax, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                            \
    X(ARG_MIN, ArgMin, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                            \
    X(TOP_K, TopK, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                              \
    X(HARDMAX, Hardmax, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                           \
    X(DEPTH_TO_SPACE, DepthToSpace, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)             \
    X(SPACE_TO_DEPTH, SpaceToDepth, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)             \
    X(CUMPROD, CumProd, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                         \
    X(EYE_LIKE, EyeLike, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                          \
    X(COMPRESS, Compress, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                       \
    X(REVERSE_SEQUENCE, ReverseSequence, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)        \
    X(NON_ZERO, NonZero, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                          \
    X(TFIDF_VECTORIZER, TfIdfVectorizer, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)          \
    X(ARRAY_FEATURE_EXTRACTOR, ArrayFeatureExtractor, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)\
    /* signal: windows and the mel matrix take scalars (their sizes constant at load) */           \
    X(HANN_WINDOW, HannWindow, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                    \
    X(HAMMING_WINDOW, HammingWindow, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)              \
    X(BLACKMAN_WINDOW, BlackmanWindow, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)            \
    X(MEL_WEIGHT_MATRIX, MelWeightMatrix, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)         \
    X(DFT, DFT, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0x1, 0)                                 \
    X(STFT, STFT, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                                 \
    /* output sizes that depend on the data: only folded at load */                                \
    X(NMS, NonMaxSuppression, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)                     \
    X(UNIQUE, Unique, PD_OPF_TENSOR | PD_OPF_FOLD | PD_OPF_HOST, 0, 0)

typedef enum pd_op {
#define PD__OP_ENUM(e, name, flags, grad, state) PD_OP_##e,
    PD_OPS(PD__OP_ENUM)
#undef PD__OP_ENUM
        PD_OP_COUNT
} pd_op;

#endif
/* ---- end of core/ops.h ---- */

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
/* ---- end of core/pd_internal.h ---- */

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* C11's _Thread_local; the same in C++ (the implementation compiles as either) */
#ifdef __cplusplus
#define PD__THREAD_LOCAL thread_local
#else
#define PD__THREAD_LOCAL _Thread_local
#endif
static PD__THREAD_LOCAL char pd__errbuf[1024];

const char *pd__escape(char *dst, size_t n, const char *src) {
    static const char hex[] = "0123456789abcdef";
    size_t k = 0;
    if (n == 0) return dst;
    for (const unsigned char *p = (const unsigned char *)(src ? src : ""); *p; p++) {
        char e[5] = {(char)*p, 0, 0, 0, 0};
        if (*p == '\n' || *p == '\t' || *p == '\r') {
            e[0] = '\\';
            e[1] = *p == '\n' ? 'n' : *p == '\t' ? 't' : 'r';
        } else if (*p < 0x20 || *p == 0x7f) {
            e[0] = '\\', e[1] = 'x', e[2] = hex[*p >> 4], e[3] = hex[*p & 15];
        }
        size_t len = strlen(e);
        if (k + len >= n) break; /* an escape is never cut in half */
        memcpy(dst + k, e, len);
        k += len;
    }
    dst[k] = '\0';
    return dst;
}

/* Messages are one line whatever the model's names hold: the formatted text
 * is escaped (pd__escape), so a newline in a node name cannot forge a second
 * line and an ESC cannot drive the terminal. Escaping twice changes nothing.
 * Formatted into a local buffer first: an argument may be pd_last_error()
 * itself (a caller adding context), which the buffer being written holds. */
pd_status pd__err(pd_status s, const char *fmt, ...) {
    char msg[sizeof pd__errbuf];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pd__escape(pd__errbuf, sizeof pd__errbuf, msg);
    return s;
}

void pd__err_prefix(const char *fmt, ...) {
    char old[sizeof pd__errbuf], pre[512], msg[sizeof pd__errbuf];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    memcpy(old, pd__errbuf, sizeof old);
    snprintf(msg, sizeof msg, "%s: %s", pre, old);
    pd__escape(pd__errbuf, sizeof pd__errbuf, msg);
}

const char *pd_last_error(void) { return pd__errbuf; }

static void pd__trace_sep(pd__trace *t) {
    if (t->more) fputs(",\n", t->f);
    t->more = true;
}

void pd__trace_name(pd__trace *t, int pid, int tid, const char *name) {
    pd__trace_sep(t);
    if (tid < 0)
        fprintf(t->f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"%s\"}}", pid, name);
    else
        fprintf(t->f, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}}", pid,
                tid, name);
}

void pd__trace_event(pd__trace *t, const char *name, const char *cat, double ts_us, double dur_us, int pid, int tid,
                     const char *args) {
    pd__trace_sep(t);
    fprintf(t->f, "{\"name\":\"%s\",\"cat\":\"%s\",", name, cat);
    if (dur_us >= 0) fprintf(t->f, "\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,", ts_us, dur_us);
    else fprintf(t->f, "\"ph\":\"i\",\"s\":\"t\",\"ts\":%.3f,", ts_us);
    fprintf(t->f, "\"pid\":%d,\"tid\":%d%s%s%s}", pid, tid, args ? ",\"args\":{" : "", args ? args : "", args ? "}" : "");
}

void pd__trace_counter(pd__trace *t, const char *name, double ts_us, int pid, const char *args) {
    pd__trace_sep(t);
    fprintf(t->f, "{\"name\":\"%s\",\"ph\":\"C\",\"ts\":%.3f,\"pid\":%d,\"args\":{%s}}", name, ts_us, pid, args);
}

/* One rule for every options struct of pipedream.h: `size` first, set by
 * its _INIT macro. A program built against an older header passes a shorter
 * struct and gets the defaults for the fields it never knew; one built
 * against a newer header is refused (its new fields would be ignored). */
pd_status pd__opts_read(void *out, const void *opt, size_t full, const char *what) {
    if (!opt) return PD_OK;
    size_t n = *(const size_t *)opt;
    if (n < sizeof(size_t) || n > full)
        return pd__err(PD_ERR_INVALID, "%s: size is %zu; this library's struct has %zu bytes (start from its _INIT macro)",
                       what, n, full);
    memcpy(out, opt, n);
    *(size_t *)out = full;
    return PD_OK;
}

const char *pd_version(void) { return PD_VERSION_STRING; }

const char *pd_status_name(pd_status s) {
    switch (s) {
    case PD_OK: return "ok";
    case PD_ERR_IO: return "i/o error";
    case PD_ERR_PARSE: return "parse error";
    case PD_ERR_UNSUPPORTED: return "unsupported";
    case PD_ERR_SHAPE: return "shape error";
    case PD_ERR_INVALID: return "invalid";
    case PD_ERR_NOMEM: return "out of memory";
    case PD_ERR_NUMERIC: return "numeric error";
    case PD_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

const char *pd_dtype_name(pd_dtype t) {
    switch (t) {
    case PD_FLOAT: return "float32";
    case PD_UINT8: return "uint8";
    case PD_INT8: return "int8";
    case PD_UINT16: return "uint16";
    case PD_INT16: return "int16";
    case PD_INT32: return "int32";
    case PD_INT64: return "int64";
    case PD_STRING: return "string";
    case PD_BOOL: return "bool";
    case PD_FLOAT16: return "float16";
    case PD_DOUBLE: return "float64";
    case PD_UINT32: return "uint32";
    case PD_UINT64: return "uint64";
    case PD_BFLOAT16: return "bfloat16";
    case PD_FLOAT8E4M3FN: return "float8e4m3fn";
    case PD_FLOAT8E4M3FNUZ: return "float8e4m3fnuz";
    case PD_FLOAT8E5M2: return "float8e5m2";
    case PD_FLOAT8E5M2FNUZ: return "float8e5m2fnuz";
    case PD_UINT4: return "uint4";
    case PD_INT4: return "int4";
    case PD_FLOAT4E2M1: return "float4e2m1";
    case PD_FLOAT8E8M0: return "float8e8m0";
    case PD_UINT2: return "uint2";
    case PD_INT2: return "int2";
    case PD_UNDEFINED: break;
    }
    return "undefined";
}

size_t pd_dtype_size(pd_dtype t) {
    switch (t) {
    case PD_UINT8: case PD_INT8: case PD_BOOL: return 1;
    case PD_FLOAT8E4M3FN: case PD_FLOAT8E4M3FNUZ: case PD_FLOAT8E5M2: case PD_FLOAT8E5M2FNUZ:
    case PD_UINT4: case PD_INT4: case PD_FLOAT4E2M1: case PD_FLOAT8E8M0: case PD_UINT2: case PD_INT2: return 1;
    case PD_UINT16: case PD_INT16: case PD_FLOAT16: case PD_BFLOAT16: return 2;
    case PD_FLOAT: case PD_INT32: case PD_UINT32: return 4;
    case PD_INT64: case PD_DOUBLE: case PD_UINT64: return 8;
    default: return 0;
    }
}

int64_t pd_tensor_numel(const pd_tensor *t) { return t ? pd__shape_numel(t->ndim, t->shape) : 0; }

void pd_tensor_free(pd_tensor *t) {
    if (!t) return;
    PD_FREE(t->data);
    t->data = NULL;
}

char *pd__strdup(const char *s) {
    if (!s) s = "";
    size_t n = strlen(s) + 1;
    char *d = (char *)PD_MALLOC(n);
    if (d) memcpy(d, s, n);
    return d;
}

bool pd__mul_ok(int64_t a, int64_t b, int64_t *out) {
    if (a < 0 || b < 0) return false;
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r)) return false;
    *out = r;
    return true;
}

int64_t pd__shape_numel(int ndim, const int64_t *shape) {
    /* the product of the non-zero dims must fit too: [0, 2^62, 2^62] holds no
     * element, but its rows (a product of some dims) would overflow */
    int64_t n = 1;
    bool empty = false;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == 0) empty = true;
        else if (!pd__mul_ok(n, shape[i], &n)) return -1;
    }
    return empty ? 0 : n;
}

void pd__format_shape(char *buf, size_t n, int ndim, const int64_t *shape) {
    size_t k = 0;
    k += (size_t)snprintf(buf + k, k < n ? n - k : 0, "[");
    for (int i = 0; i < ndim; i++)
        k += (size_t)snprintf(buf + k, k < n ? n - k : 0, "%s%lld", i ? "," : "", (long long)shape[i]);
    snprintf(buf + k, k < n ? n - k : 0, "]");
}

/* IEEE half and bfloat16, round to nearest even. */
float pd__half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            exp = 127 - 15 + 1;
            while (!(man & 0x400)) { man <<= 1; exp--; }
            man &= 0x3ff;
            bits = sign | (exp << 23) | (man << 13);
        }
    } else if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp - 15 + 127) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t pd__float_to_half(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) /* inf or nan */
        return (uint16_t)(sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 : 0));
    if (absx >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* overflow after rounding */
    if (absx < 0x38800000u) { /* subnormal half or zero */
        if (absx < 0x33000000u) return sign;
        uint32_t e = absx >> 23, m = (absx & 0x7fffff) | 0x800000;
        int shift = (int)(126 - e); /* half subnormal unit is 2^-24 */
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = ((absx >> 13) - ((127 - 15) << 10));
    uint32_t rem = absx & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;
    return (uint16_t)(sign | r);
}

float pd__bf16_to_float(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t pd__float_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* quiet nan */
    uint32_t lsb = (x >> 16) & 1;
    x += 0x7fff + lsb;
    return (uint16_t)(x >> 16);
}

/* ---- float8, float4, int4, int2 ------------------------------------------------ */
bool pd__dtype_lowbit(pd_dtype t) { return t >= PD_FLOAT8E4M3FN && t <= PD_INT2; }

int pd__dtype_bits(pd_dtype t) {
    switch (t) {
    case PD_UINT4: case PD_INT4: case PD_FLOAT4E2M1: return 4;
    case PD_UINT2: case PD_INT2: return 2;
    default: return 8 * (int)pd_dtype_size(t);
    }
}

/* A small float format: exponent and mantissa widths, bias, and which codes
 * are special. IEEE: all-ones exponent is inf (m = 0) or NaN, like E5M2. FN:
 * only all-ones is NaN, no inf (E4M3FN). UZ: 0x80 (negative zero) is the one
 * NaN, no -0 and no inf. NONE: every code is finite (E2M1). */
enum { PD_MF_IEEE, PD_MF_FN, PD_MF_UZ, PD_MF_NONE };
typedef struct pd__mfmt {
    int eb, mb, bias, kind;
    uint8_t maxc; /* the largest finite magnitude's code */
} pd__mfmt;

static const pd__mfmt *mf_of(pd_dtype t) {
    static const pd__mfmt e4m3fn = {4, 3, 7, PD_MF_FN, 0x7e}, e4m3fnuz = {4, 3, 8, PD_MF_UZ, 0x7f},
                          e5m2 = {5, 2, 15, PD_MF_IEEE, 0x7b}, e5m2fnuz = {5, 2, 16, PD_MF_UZ, 0x7f},
                          e2m1 = {2, 1, 1, PD_MF_NONE, 0x7};
    switch (t) {
    case PD_FLOAT8E4M3FN: return &e4m3fn;
    case PD_FLOAT8E4M3FNUZ: return &e4m3fnuz;
    case PD_FLOAT8E5M2: return &e5m2;
    case PD_FLOAT8E5M2FNUZ: return &e5m2fnuz;
    case PD_FLOAT4E2M1: return &e2m1;
    default: return NULL;
    }
}

static double mf_decode(const pd__mfmt *f, unsigned c) {
    unsigned sbit = 1u << (f->eb + f->mb), emask = (1u << f->eb) - 1, mmask = (1u << f->mb) - 1;
    unsigned e = (c >> f->mb) & emask, m = c & mmask;
    if (f->kind == PD_MF_UZ && c == sbit) return NAN;
    if (f->kind == PD_MF_IEEE && e == emask) return m ? NAN : (c & sbit) ? -INFINITY : INFINITY;
    if (f->kind == PD_MF_FN && e == emask && m == mmask) return NAN;
    double v = e ? ldexp((double)(m | (1u << f->mb)), (int)e - f->bias - f->mb) : ldexp((double)m, 1 - f->bias - f->mb);
    return (c & sbit) ? -v : v;
}

/* Rounds to float32 first, as ml_dtypes does (a double just above a tie
 * becomes the tie; float32 and float16 sources are exact), then to nearest
 * even, then saturates or overflows; what a NaN, an overflow and a negative
 * zero become follows ml_dtypes too, which ONNX's reference uses. */
static uint8_t mf_encode(const pd__mfmt *f, double v, bool sat) {
    v = (float)v;
    unsigned sbit = 1u << (f->eb + f->mb), sign = signbit(v) ? sbit : 0;
    /* E2M1 has no NaN: ml_dtypes gives a zero of the opposite sign */
    unsigned nan = f->kind == PD_MF_UZ ? sbit : f->kind == PD_MF_FN ? sign | (sbit - 1)
                   : f->kind == PD_MF_IEEE ? sign | (((1u << f->eb) - 1) << f->mb) | (1u << (f->mb - 1)) : sign ^ sbit;
    if (v != v) return (uint8_t)nan;
    double a = fabs(v), max = mf_decode(f, f->maxc);
    if (f->kind == PD_MF_NONE) sat = true;
    unsigned over = sat ? sign | f->maxc : f->kind == PD_MF_IEEE ? sign | (((1u << f->eb) - 1) << f->mb) : nan;
    if (a > 2 * max) return (uint8_t)over; /* inf too; keeps ldexp below in range */
    int emin = 1 - f->bias, e;
    frexp(a, &e);
    e -= 1; /* a in [2^e, 2^(e+1)) */
    if (e < emin) e = emin;
    double q = nearbyint(ldexp(a, f->mb - e)), r = ldexp(q, e - f->mb);
    if (r > max) return (uint8_t)over;
    if (r == 0) return (uint8_t)(f->kind == PD_MF_UZ ? 0 : sign);
    if (r < ldexp(1, emin)) return (uint8_t)(sign | (unsigned)q); /* subnormal */
    frexp(r, &e);
    e -= 1;
    unsigned m = (unsigned)ldexp(r, f->mb - e) - (1u << f->mb);
    return (uint8_t)(sign | ((unsigned)(e + f->bias) << f->mb) | m);
}

/* float8e8m0 is an exponent alone (2^(c-127), 0xff NaN), made as ONNX's
 * to_float8e8m0 makes it from the float32's bits: the sign is dropped, and
 * round_mode decides whether a mantissa rounds the exponent up. */
static uint8_t e8m0_encode(double v, bool sat, int mode) {
    float f = (float)v;
    uint32_t b;
    memcpy(&b, &f, 4);
    uint32_t e = (b >> 23) & 0xff;
    if (e == 0xff) return 0xff;
    bool up = false;
    if (mode == PD_RM_NEAREST) {
        bool g = b & 0x400000, r = b & 0x200000, s = b & 0x1fffff, lsb = e > 0;
        up = g && (r || s || lsb);
    } else if (mode == PD_RM_UP) {
        up = (b & 0x7fffff) != 0;
    }
    if (up && sat && e == 0xfe) up = false;
    return (uint8_t)(e + up);
}

double pd__lowfloat_decode(pd_dtype t, uint8_t c) {
    if (t == PD_FLOAT8E8M0) return c == 0xff ? NAN : ldexp(1.0, (int)c - 127);
    const pd__mfmt *f = mf_of(t);
    return f ? mf_decode(f, c) : 0;
}

uint8_t pd__lowfloat_encode(pd_dtype t, double v, bool saturate, int round_mode) {
    if (t == PD_FLOAT8E8M0) return e8m0_encode(v, saturate, round_mode);
    const pd__mfmt *f = mf_of(t);
    return f ? mf_encode(f, v, saturate) : 0;
}

/* Integers of 4 and 2 bits keep their low bits (two's complement for the
 * signed ones), as Cast does between integer types. */
static int8_t low_int_wrap(pd_dtype t, int64_t v) {
    switch (t) {
    case PD_INT4: return (int8_t)((int)((v & 0xf) ^ 0x8) - 0x8);
    case PD_UINT4: return (int8_t)(v & 0xf);
    case PD_INT2: return (int8_t)((int)((v & 0x3) ^ 0x2) - 0x2);
    default: return (int8_t)(v & 0x3);
    }
}

static bool low_int(pd_dtype t) { return t == PD_INT4 || t == PD_UINT4 || t == PD_INT2 || t == PD_UINT2; }

/* The 4- and 2-bit types are packed in files, low bits first, the last byte
 * part used when the count does not fill it. */
void pd__unpack_bits(pd_dtype t, const uint8_t *src, int64_t n, int8_t *dst) {
    int bits = pd__dtype_bits(t), per = 8 / bits;
    unsigned mask = (1u << bits) - 1, sbit = 1u << (bits - 1);
    bool sgn = t == PD_INT4 || t == PD_INT2;
    for (int64_t i = 0; i < n; i++) {
        unsigned c = (src[i / per] >> ((i % per) * bits)) & mask;
        dst[i] = (int8_t)(sgn ? (int)(c ^ sbit) - (int)sbit : (int)c);
    }
}

void pd__pack_bits(pd_dtype t, const int8_t *src, int64_t n, uint8_t *dst) {
    int bits = pd__dtype_bits(t), per = 8 / bits;
    unsigned mask = (1u << bits) - 1;
    memset(dst, 0, (size_t)((n * bits + 7) / 8));
    for (int64_t i = 0; i < n; i++) dst[i / per] |= (uint8_t)(((unsigned)src[i] & mask) << ((i % per) * bits));
}

double pd__get_f(pd_dtype t, const void *p, int64_t i) {
    switch (t) {
    case PD_FLOAT: return ((const float *)p)[i];
    case PD_DOUBLE: return ((const double *)p)[i];
    case PD_FLOAT16: return pd__half_to_float(((const uint16_t *)p)[i]);
    case PD_BFLOAT16: return pd__bf16_to_float(((const uint16_t *)p)[i]);
    case PD_INT8: return ((const int8_t *)p)[i];
    case PD_INT16: return ((const int16_t *)p)[i];
    case PD_INT32: return ((const int32_t *)p)[i];
    case PD_INT64: return (double)((const int64_t *)p)[i];
    case PD_UINT8: return ((const uint8_t *)p)[i];
    case PD_BOOL: return ((const uint8_t *)p)[i] != 0;
    case PD_UINT16: return ((const uint16_t *)p)[i];
    case PD_UINT32: return ((const uint32_t *)p)[i];
    case PD_UINT64: return (double)((const uint64_t *)p)[i];
    case PD_INT4: case PD_INT2: return ((const int8_t *)p)[i];
    case PD_UINT4: case PD_UINT2: return ((const uint8_t *)p)[i];
    default: return pd__dtype_lowbit(t) ? pd__lowfloat_decode(t, ((const uint8_t *)p)[i]) : 0;
    }
}

int64_t pd__get_i(pd_dtype t, const void *p, int64_t i) {
    switch (t) {
    case PD_INT64: return ((const int64_t *)p)[i];
    case PD_INT32: return ((const int32_t *)p)[i];
    case PD_INT16: return ((const int16_t *)p)[i];
    case PD_INT8: return ((const int8_t *)p)[i];
    case PD_UINT8: return ((const uint8_t *)p)[i];
    case PD_BOOL: return ((const uint8_t *)p)[i] != 0;
    case PD_UINT16: return ((const uint16_t *)p)[i];
    case PD_UINT32: return ((const uint32_t *)p)[i];
    case PD_UINT64: return (int64_t)((const uint64_t *)p)[i];
    case PD_INT4: case PD_INT2: return ((const int8_t *)p)[i];
    case PD_UINT4: case PD_UINT2: return ((const uint8_t *)p)[i];
    default: {
        double v = pd__get_f(t, p, i);
        if (v != v) return 0;
        if (v >= 9.2233720368547758e18) return INT64_MAX;
        if (v <= -9.2233720368547758e18) return INT64_MIN;
        return (int64_t)v;
    }
    }
}

void pd__set_f(pd_dtype t, void *p, int64_t i, double v) {
    switch (t) {
    case PD_FLOAT: ((float *)p)[i] = (float)v; break;
    case PD_DOUBLE: ((double *)p)[i] = v; break;
    case PD_FLOAT16: ((uint16_t *)p)[i] = pd__float_to_half((float)v); break;
    case PD_BFLOAT16: ((uint16_t *)p)[i] = pd__float_to_bf16((float)v); break;
    case PD_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    case PD_FLOAT8E4M3FN: case PD_FLOAT8E4M3FNUZ: case PD_FLOAT8E5M2: case PD_FLOAT8E5M2FNUZ:
    case PD_FLOAT4E2M1: case PD_FLOAT8E8M0:
        ((uint8_t *)p)[i] = pd__lowfloat_encode(t, v, true, PD_RM_UP);
        break;
    case PD_INT4: case PD_UINT4: case PD_INT2: case PD_UINT2:
        /* truncated, then its low bits; NaN and inf give 0, as ml_dtypes */
        ((int8_t *)p)[i] = low_int_wrap(t, isfinite(v) ? (int64_t)fmod(trunc(v), 16.0) : 0);
        break;
    default: pd__set_i(t, p, i, (v != v) ? 0 : (int64_t)v); break;
    }
}

void pd__set_i(pd_dtype t, void *p, int64_t i, int64_t v) {
    switch (t) {
    case PD_INT64: ((int64_t *)p)[i] = v; break;
    case PD_INT32: ((int32_t *)p)[i] = (int32_t)v; break;
    case PD_INT16: ((int16_t *)p)[i] = (int16_t)v; break;
    case PD_INT8: ((int8_t *)p)[i] = (int8_t)v; break;
    case PD_UINT8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case PD_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    case PD_UINT16: ((uint16_t *)p)[i] = (uint16_t)v; break;
    case PD_UINT32: ((uint32_t *)p)[i] = (uint32_t)v; break;
    case PD_UINT64: ((uint64_t *)p)[i] = (uint64_t)v; break;
    default:
        if (low_int(t)) ((int8_t *)p)[i] = low_int_wrap(t, v);
        else pd__set_f(t, p, i, (double)v);
        break;
    }
}

void *pd__scratch(pd__exec *x, size_t bytes) {
    if (bytes <= x->scratch_size) return x->scratch;
    size_t n = bytes + bytes / 4 + 64;
    void *p = NULL;
    if (posix_memalign(&p, 64, n) != 0 || !p) {
        pd__err(PD_ERR_NOMEM, "cannot allocate %zu bytes of scratch memory", n);
        return NULL;
    }
    PD_FREE(x->scratch);
    x->scratch = p;
    x->scratch_size = n;
    return p;
}

/* Opens path for reading only if it is a regular file: O_NONBLOCK so that a
 * FIFO or a device cannot block the open, then fstat on what was opened. */
pd_status pd__open_regular(const char *path, int *fd_out, struct stat *st) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return pd__err(PD_ERR_IO, "%s: %s", path, strerror(errno));
    if (fstat(fd, st) != 0) {
        pd_status s = pd__err(PD_ERR_IO, "%s: %s", path, strerror(errno));
        close(fd);
        return s;
    }
    if (!S_ISREG(st->st_mode)) {
        close(fd);
        return pd__err(PD_ERR_IO, "%s: not a regular file", path);
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl != -1) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    *fd_out = fd;
    return PD_OK;
}

/* A file the program is about to write: absent, or a regular file it may
 * replace, in a folder that exists. Never a folder, a device or a FIFO (the
 * write goes through a temporary and a rename, which would replace the node). */
pd_status pd__check_dest(const char *path) {
    size_t n = strlen(path);
    if (n == 0) return pd__err(PD_ERR_INVALID, "an empty output path");
    if (path[n - 1] == '/') return pd__err(PD_ERR_INVALID, "%s: names a folder, not a file", path);
    struct stat st;
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode)) return pd__err(PD_ERR_INVALID, "%s: is a folder, not a file", path);
        if (!S_ISREG(st.st_mode))
            return pd__err(PD_ERR_INVALID, "%s: not a regular file (a device or a FIFO); refusing to replace it", path);
    } else if (errno != ENOENT) {
        return pd__err(PD_ERR_IO, "%s: %s", path, strerror(errno));
    }
    /* the temporary is made in the file's folder */
    char *dir = strdup(path);
    if (!dir) return pd__err(PD_ERR_NOMEM, "out of memory");
    char *slash = strrchr(dir, '/');
    const char *d = slash ? (slash == dir ? "/" : (*slash = 0, dir)) : ".";
    pd_status s = PD_OK;
    if (stat(d, &st) != 0) s = pd__err(PD_ERR_IO, "%s: folder %s: %s", path, d, strerror(errno));
    else if (!S_ISDIR(st.st_mode)) s = pd__err(PD_ERR_IO, "%s: %s is not a folder", path, d);
    else if (access(d, W_OK) != 0) s = pd__err(PD_ERR_IO, "%s: folder %s: %s", path, d, strerror(errno));
    free(dir);
    return s;
}

/* Writes through "<path>.tmp.<pid>", fsync and rename: a reader sees the old
 * file or the whole new one, never half of it. */
pd_status pd__write_atomic(const char *path, const void *data, size_t len) {
    const char *buf = (const char *)data;
    char tmp[4096];
    PD_TRY(pd__check_dest(path));
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp)
        return pd__err(PD_ERR_IO, "%s: path too long", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return pd__err(PD_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(fd, buf + off, len - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int e = errno;
            close(fd);
            unlink(tmp);
            return pd__err(PD_ERR_IO, "%s: write failed: %s", path, strerror(e));
        }
        off += (size_t)w;
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        int e = errno;
        unlink(tmp);
        return pd__err(PD_ERR_IO, "%s: write failed: %s", path, strerror(e));
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return pd__err(PD_ERR_IO, "%s: cannot rename into place: %s", path, strerror(e));
    }
    return PD_OK;
}


/* Reads len bytes at offset, retrying short reads. */
pd_status pd__pread_all(int fd, const char *path, void *data, size_t len, int64_t offset) {
    unsigned char *buf = (unsigned char *)data;
    size_t got = 0;
    while (got < len) {
        size_t want = len - got;
        if (want > (size_t)1 << 30) want = (size_t)1 << 30;
        ssize_t r = pread(fd, buf + got, want, (off_t)(offset + (int64_t)got));
        if (r < 0) {
            if (errno == EINTR) continue;
            return pd__err(PD_ERR_IO, "%s: %s", path, strerror(errno));
        }
        if (r == 0) return pd__err(PD_ERR_IO, "%s: file shrank while being read", path);
        got += (size_t)r;
    }
    return PD_OK;
}

/* Reads a whole regular file into a NUL-terminated buffer. */
pd_status pd__read_file(const char *path, unsigned char **buf, size_t *len) {
    int fd;
    struct stat st;
    PD_TRY(pd__open_regular(path, &fd, &st));
    if ((uint64_t)st.st_size > (uint64_t)SIZE_MAX - 1) {
        close(fd);
        return pd__err(PD_ERR_NOMEM, "%s: file too large", path);
    }
    size_t n = (size_t)st.st_size;
    unsigned char *b = (unsigned char *)PD_MALLOC(n + 1);
    if (!b) {
        close(fd);
        return pd__err(PD_ERR_NOMEM, "%s: out of memory reading %zu bytes", path, n);
    }
    pd_status s = pd__pread_all(fd, path, b, n, 0);
    close(fd);
    if (s != PD_OK) {
        PD_FREE(b);
        return s;
    }
    b[n] = 0;
    *buf = b;
    *len = n;
    return PD_OK;
}
#undef PD__THREAD_LOCAL

/* ==== core/graph.c ==== */
/* graph.c - the graph IR: tensors by name, nodes, topological order, shape
 * inference with constant folding, dead-node removal.
 *
 * Loading ends in pd__graph_finalize: nodes are visited in topological order,
 * each op's shape rule gives its outputs' dtypes and shapes, and a node whose
 * inputs are all constants (and which is not a trainable initializer's user)
 * is evaluated once on the CPU backend and replaced by its results. That is how
 * PyTorch's Shape/Gather/Unsqueeze/Concat subgraphs of dynamic axes disappear.
 */

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

/* ==== core/ops.c ==== */
/* ops.c - the op table, expanded from the one list in ops.h. */

#include <string.h>

const pd__op_def pd__ops[PD_OP_COUNT] = {
/* in enum order: the enum is expanded from the same list (no designators, so C++ compiles it too) */
#define PD__OP_DEF(e, name, flags, grad, state) {#name, flags, grad, state, pd__shape_##name, pd__flops_##name},
    PD_OPS(PD__OP_DEF)
#undef PD__OP_DEF
};

int pd__op_lookup(const char *onnx_name) {
    if (!onnx_name) return -1;
    for (int i = 0; i < PD_OP_COUNT; i++)
        if (strcmp(pd__ops[i].name, onnx_name) == 0) return i;
    return -1;
}
#undef PD__OP_DEF

/* ==== core/api.c ==== */
/* api.c - the public graph-inspection calls of pipedream.h. */

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

/* ==== core/shape_elem.c ==== */
/* shape_elem.c - shape rules and FLOP counts of the element-wise ops:
 * the arithmetic, comparison and logic ones with numpy (multidirectional)
 * broadcasting (Add ... Pow, Mod, Sum, Max, Min, Mean, Equal, Less ...,
 * And, Or, Xor, Where, BitwiseAnd/Or/Xor, BitShift), PRelu (one-way), the
 * unary ones (Sqrt ... Gelu, Clip, the activations, Abs ... Round,
 * trigonometry, Not, BitwiseNot, IsNaN, IsInf),
 * Cast, CastLike and Identity, QuantizeLinear, DequantizeLinear and
 * DynamicQuantizeLinear, and the reductions (ReduceSum ... ReduceLogSumExp).
 *
 * How it works: docs/INTERNALS.md, "core/shape_elem.c".
 */
/* ---- core/shape_elem.h ---- */
/* shape_elem.h - what the element-wise shape rules (core/shape_elem.c) and
 * their CPU kernels (runtime/cpu/elementwise.c) must agree on: which dtypes
 * an op computes in, the shape input B takes under the old (opset < 7)
 * broadcast attribute, and which axes a Reduce* op reduces.
 * Not installed; private to the library.
 */
#ifndef PD_SHAPE_ELEM_H
#define PD_SHAPE_ELEM_H


/* Dtype classes, as bits so that a rule can say which ones it accepts. */
#define PD_EK_FLOAT 1u /* float, double, float16, bfloat16 */
#define PD_EK_SINT 2u  /* int8, int16, int32, int64 */
#define PD_EK_UINT 4u  /* uint8, uint16, uint32, uint64 */
#define PD_EK_BOOL 8u
#define PD_EK_INT (PD_EK_SINT | PD_EK_UINT)
#define PD_EK_NUM (PD_EK_FLOAT | PD_EK_INT)
#define PD_EK_ANY (PD_EK_NUM | PD_EK_BOOL)

/* The class of a dtype, 0 for the ones no kernel handles (string, float8, int4...). */
static inline unsigned pd__ekind(pd_dtype t) {
    switch (t) {
    case PD_FLOAT: case PD_DOUBLE: case PD_FLOAT16: case PD_BFLOAT16: return PD_EK_FLOAT;
    case PD_INT8: case PD_INT16: case PD_INT32: case PD_INT64: return PD_EK_SINT;
    case PD_UINT8: case PD_UINT16: case PD_UINT32: case PD_UINT64: return PD_EK_UINT;
    case PD_BOOL: return PD_EK_BOOL;
    default: return 0;
    }
}

/* Old-style broadcasting (opset < 7, attribute broadcast=1): B's dims line
 * up with A's starting at `axis` (default: B's dims are A's last ones).
 * Rewrites B's shape into the equivalent rank-na numpy shape. False when B
 * does not fit inside A at that axis. Later opsets: B's shape unchanged. */
static inline bool pd__legacy_bshape(const pd__node *n, int na, int *nb, int64_t *bshape) {
    if (n->opset >= 7 || pd__attr_i(n, "broadcast", 0) == 0 || !pd__attr_get(n, "axis")) return true;
    int64_t axis = pd__attr_i(n, "axis", 0);
    if (axis < 0) axis += na;
    if (axis < 0 || axis + *nb > na) return false;
    int64_t s[PD_MAX_DIMS];
    for (int d = 0; d < na; d++) s[d] = (d >= axis && d < axis + *nb) ? bshape[d - axis] : 1;
    for (int d = 0; d < na; d++) bshape[d] = s[d];
    *nb = na;
    return true;
}

/* Whether a Reduce* node takes its axes from input 1 (newer opsets: 13 for
 * ReduceSum, 18 for the others) rather than the `axes` attribute. */
static inline bool pd__reduce_axes_input(const pd__node *n) {
    return n->opset >= (n->op == PD_OP_REDUCE_SUM ? 13 : 18);
}

/* The axes a Reduce* op of a rank-`ndim` input reduces:
 * mask[d] = 1 for each. `axes` is a view of input 1 (NULL when absent; its
 * data may be NULL only when it has no elements), read in the newer opsets.
 * *noop is set when nothing is reduced (empty axes, noop_with_empty_axes).
 * Returns PD_OK, PD_ERR_UNSUPPORTED (axes not known), or PD_ERR_SHAPE (an
 * axis out of range or repeated). Sets no message: the caller does. */
static inline pd_status pd__reduce_mask(const pd__node *n, int ndim, const pd_tensor *axes, bool *mask,
                                        bool *noop) {
    const int64_t *av = NULL;
    int na = 0;
    bool from_input = pd__reduce_axes_input(n);
    if (from_input && axes) {
        int64_t cnt = pd_tensor_numel(axes);
        if (cnt > 0 && !axes->data) return PD_ERR_UNSUPPORTED;
        if (axes->dtype != PD_INT64 && axes->dtype != PD_INT32) return PD_ERR_SHAPE;
        if (cnt > 64) return PD_ERR_SHAPE;
        na = (int)cnt;
    } else if (!from_input) {
        na = pd__attr_ints(n, "axes", &av);
    }
    *noop = false;
    for (int d = 0; d < ndim; d++) mask[d] = na == 0;
    if (na == 0) {
        if (from_input && pd__attr_i(n, "noop_with_empty_axes", 0)) {
            *noop = true;
            for (int d = 0; d < ndim; d++) mask[d] = false;
        }
        return PD_OK;
    }
    for (int k = 0; k < na; k++) {
        int64_t a = av ? av[k] : pd__get_i(axes->dtype, axes->data, k);
        if (a < 0) a += ndim;
        if (a < 0 || a >= ndim || mask[a]) return PD_ERR_SHAPE;
        mask[a] = true;
    }
    return PD_OK;
}

#endif
/* ---- end of core/shape_elem.h ---- */

#include <stdio.h>
#include <string.h>

/* ---- helpers ---------------------------------------------------------------- */

/* Input i, which must be present and have a shape. */
static pd_status input(pd_graph *g, const pd__node *n, int i, pd__tensor **t) {
    *t = pd__in(g, n, i);
    if (!*t) return pd__node_err(g, n, PD_ERR_INVALID, "input %d is missing", i);
    if ((*t)->ndim < 0) return pd__node_err(g, n, PD_ERR_SHAPE, "input %d ('%s') has no known shape", i, (*t)->name);
    return PD_OK;
}

static pd_status output(pd_graph *g, const pd__node *n, pd__tensor **t) {
    *t = pd__out(g, n, 0);
    if (!*t) return pd__node_err(g, n, PD_ERR_INVALID, "output 0 is missing");
    return PD_OK;
}

/* The dtype of input i must be of one of the classes in `kinds`. */
static pd_status check_kind(const pd_graph *g, const pd__node *n, const pd__tensor *t, unsigned kinds) {
    unsigned k = pd__ekind(t->dtype);
    if (k & kinds) return PD_OK;
    return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "dtype %s of '%s' is not supported", pd_dtype_name(t->dtype),
                        t->name);
}

static pd_status check_same_dtype(const pd_graph *g, const pd__node *n, const pd__tensor *a, const pd__tensor *b) {
    if (a->dtype == b->dtype) return PD_OK;
    return pd__node_err(g, n, PD_ERR_SHAPE, "dtypes differ: '%s' is %s, '%s' is %s", a->name,
                        pd_dtype_name(a->dtype), b->name, pd_dtype_name(b->dtype));
}

/* shape (*nd) = numpy broadcast of shape and b; error naming both when they do not fit. */
static pd_status bcast(const pd_graph *g, const pd__node *n, int *nd, int64_t *shape, int nb, const int64_t *b) {
    int nr = *nd > nb ? *nd : nb;
    int64_t r[PD_MAX_DIMS];
    for (int d = 0; d < nr; d++) {
        int da = d - (nr - *nd), db = d - (nr - nb);
        int64_t x = da >= 0 ? shape[da] : 1, y = db >= 0 ? b[db] : 1;
        if (x != y && x != 1 && y != 1) {
            char sa[128], sb[128];
            pd__format_shape(sa, sizeof sa, *nd, shape);
            pd__format_shape(sb, sizeof sb, nb, b);
            return pd__node_err(g, n, PD_ERR_SHAPE, "shapes %s and %s do not broadcast", sa, sb);
        }
        r[d] = x == 1 ? y : x;
    }
    for (int d = 0; d < nr; d++) shape[d] = r[d];
    *nd = nr;
    return PD_OK;
}

/* Element counts for the FLOP rules, in double: 8 * numel may not fit an int64. */
static double out_numel(const pd_graph *g, const pd__node *n) {
    if (n->nout < 1 || n->out[0] < 0) return 0;
    int64_t v = g->tensors[n->out[0]].numel;
    return v > 0 ? (double)v : 0;
}

static double in_numel(const pd_graph *g, const pd__node *n, int i) {
    if (i >= n->nin || n->in[i] < 0) return 0;
    int64_t v = g->tensors[n->in[i]].numel;
    return v > 0 ? (double)v : 0;
}

/* ---- binary ops with broadcasting --------------------------------------------- */

/* A op B: both of a class in `kinds`; same dtype unless `mixed`; output
 * dtype `odt` (PD_UNDEFINED: A's). Honours opset < 7's broadcast/axis. */
static pd_status shape_binary(pd_graph *g, pd__node *n, unsigned kinds, bool mixed, pd_dtype odt) {
    pd__tensor *a, *b, *y;
    PD_TRY(input(g, n, 0, &a));
    PD_TRY(input(g, n, 1, &b));
    PD_TRY(output(g, n, &y));
    PD_TRY(check_kind(g, n, a, kinds));
    PD_TRY(check_kind(g, n, b, kinds));
    if (!mixed) PD_TRY(check_same_dtype(g, n, a, b));
    int nd = a->ndim, nb = b->ndim;
    int64_t shape[PD_MAX_DIMS], bs[PD_MAX_DIMS];
    for (int d = 0; d < nd; d++) shape[d] = a->shape[d];
    for (int d = 0; d < nb; d++) bs[d] = b->shape[d];
    if (!pd__legacy_bshape(n, nd, &nb, bs)) {
        char sa[128], sb[128];
        pd__format_shape(sa, sizeof sa, a->ndim, a->shape);
        pd__format_shape(sb, sizeof sb, b->ndim, b->shape);
        return pd__node_err(g, n, PD_ERR_SHAPE, "shape %s does not fit in %s at axis %lld", sb, sa,
                            (long long)pd__attr_i(n, "axis", 0));
    }
    PD_TRY(bcast(g, n, &nd, shape, nb, bs));
    y->dtype = odt == PD_UNDEFINED ? a->dtype : odt;
    return pd__tensor_set_shape(g, y, nd, shape);
}

pd_status pd__shape_Add(pd_graph *g, pd__node *n) { return shape_binary(g, n, PD_EK_NUM, false, PD_UNDEFINED); }
pd_status pd__shape_Sub(pd_graph *g, pd__node *n) { return shape_binary(g, n, PD_EK_NUM, false, PD_UNDEFINED); }
pd_status pd__shape_Mul(pd_graph *g, pd__node *n) { return shape_binary(g, n, PD_EK_NUM, false, PD_UNDEFINED); }
pd_status pd__shape_Div(pd_graph *g, pd__node *n) { return shape_binary(g, n, PD_EK_NUM, false, PD_UNDEFINED); }
/* Pow: the exponent may have another dtype; the result has the base's. */
pd_status pd__shape_Pow(pd_graph *g, pd__node *n) { return shape_binary(g, n, PD_EK_NUM, true, PD_UNDEFINED); }
pd_status pd__shape_Equal(pd_graph *g, pd__node *n) { return shape_binary(g, n, PD_EK_ANY, false, PD_BOOL); }
pd_status pd__shape_Less(pd_graph *g, pd__node *n) { return shape_binary(g, n, PD_EK_NUM, false, PD_BOOL); }
pd_status pd__shape_LessOrEqual(pd_graph *g, pd__node *n) { return shape_binary(g, n, PD_EK_NUM, false, PD_BOOL); }
pd_status pd__shape_Greater(pd_graph *g, pd__node *n) { return shape_binary(g, n, PD_EK_NUM, false, PD_BOOL); }
pd_status pd__shape_GreaterOrEqual(pd_graph *g, pd__node *n) { return shape_binary(g, n, PD_EK_NUM, false, PD_BOOL); }
pd_status pd__shape_And(pd_graph *g, pd__node *n) { return shape_binary(g, n, PD_EK_BOOL, false, PD_BOOL); }
pd_status pd__shape_Or(pd_graph *g, pd__node *n) { return shape_binary(g, n, PD_EK_BOOL, false, PD_BOOL); }
pd_status pd__shape_Xor(pd_graph *g, pd__node *n) { return shape_binary(g, n, PD_EK_BOOL, false, PD_BOOL); }
/* The bitwise ops: integers of one dtype; BitShift: unsigned ones, and a
 * direction of LEFT or RIGHT. */
pd_status pd__shape_BitwiseAnd(pd_graph *g, pd__node *n) { return shape_binary(g, n, PD_EK_INT, false, PD_UNDEFINED); }
pd_status pd__shape_BitwiseOr(pd_graph *g, pd__node *n) { return shape_binary(g, n, PD_EK_INT, false, PD_UNDEFINED); }
pd_status pd__shape_BitwiseXor(pd_graph *g, pd__node *n) { return shape_binary(g, n, PD_EK_INT, false, PD_UNDEFINED); }
pd_status pd__shape_BitShift(pd_graph *g, pd__node *n) {
    const char *d = pd__attr_s(n, "direction", "");
    if (strcmp(d, "LEFT") != 0 && strcmp(d, "RIGHT") != 0)
        return pd__node_err(g, n, PD_ERR_INVALID, "direction='%s' (expected LEFT or RIGHT)", d);
    return shape_binary(g, n, PD_EK_UINT, false, PD_UNDEFINED);
}
/* Mod: fmod = 0 takes the divisor's sign (Python's %), 1 the dividend's (C's fmod). */
pd_status pd__shape_Mod(pd_graph *g, pd__node *n) {
    int64_t f = pd__attr_i(n, "fmod", 0);
    if (f != 0 && f != 1) return pd__node_err(g, n, PD_ERR_INVALID, "fmod=%lld (expected 0 or 1)", (long long)f);
    return shape_binary(g, n, PD_EK_NUM, false, PD_UNDEFINED);
}

double pd__flops_Add(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_Sub(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_Mul(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_Div(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_Pow(const pd_graph *g, const pd__node *n) { return 8 * out_numel(g, n); }
double pd__flops_Equal(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_Less(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_LessOrEqual(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_Greater(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_GreaterOrEqual(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_And(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_Or(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_Xor(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_BitwiseAnd(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_BitwiseOr(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_BitwiseXor(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_BitShift(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_Mod(const pd_graph *g, const pd__node *n) { return 4 * out_numel(g, n); }

/* Sum, Max, Min, Mean: one or more inputs of one dtype, broadcast together
 * (Max and Min of any numeric dtype from opset 12, floats before; Mean floats). */
static pd_status shape_variadic(pd_graph *g, pd__node *n, unsigned kinds) {
    pd__tensor *a, *y;
    PD_TRY(input(g, n, 0, &a));
    PD_TRY(output(g, n, &y));
    PD_TRY(check_kind(g, n, a, kinds));
    int nd = a->ndim;
    int64_t shape[PD_MAX_DIMS];
    for (int d = 0; d < nd; d++) shape[d] = a->shape[d];
    for (int i = 1; i < n->nin; i++) {
        pd__tensor *b;
        PD_TRY(input(g, n, i, &b));
        PD_TRY(check_same_dtype(g, n, a, b));
        PD_TRY(bcast(g, n, &nd, shape, b->ndim, b->shape));
    }
    y->dtype = a->dtype;
    return pd__tensor_set_shape(g, y, nd, shape);
}

pd_status pd__shape_Sum(pd_graph *g, pd__node *n) { return shape_variadic(g, n, PD_EK_NUM); }
pd_status pd__shape_Max(pd_graph *g, pd__node *n) {
    return shape_variadic(g, n, n->opset >= 12 ? PD_EK_NUM : PD_EK_FLOAT);
}
pd_status pd__shape_Min(pd_graph *g, pd__node *n) {
    return shape_variadic(g, n, n->opset >= 12 ? PD_EK_NUM : PD_EK_FLOAT);
}
pd_status pd__shape_Mean(pd_graph *g, pd__node *n) { return shape_variadic(g, n, PD_EK_FLOAT); }

double pd__flops_Sum(const pd_graph *g, const pd__node *n) {
    double k = n->nin > 1 ? n->nin - 1 : 1;
    return k * out_numel(g, n);
}
double pd__flops_Max(const pd_graph *g, const pd__node *n) { return pd__flops_Sum(g, n); }
double pd__flops_Min(const pd_graph *g, const pd__node *n) { return pd__flops_Sum(g, n); }
double pd__flops_Mean(const pd_graph *g, const pd__node *n) { return pd__flops_Sum(g, n) + out_numel(g, n); }

/* PRelu(X, slope): slope broadcasts to X one way (opset >= 7); before, it is
 * X's shape, one value, or one per channel (axis 1, as PyTorch exported
 * PReLU(num_parameters=C) then). Y has X's shape. */
pd_status pd__shape_PRelu(pd_graph *g, pd__node *n) {
    pd__tensor *x, *s, *y;
    PD_TRY(input(g, n, 0, &x));
    PD_TRY(input(g, n, 1, &s));
    PD_TRY(output(g, n, &y));
    PD_TRY(check_kind(g, n, x, PD_EK_FLOAT));
    PD_TRY(check_same_dtype(g, n, x, s));
    bool fits = s->ndim <= x->ndim;
    for (int d = 0; fits && d < s->ndim; d++) {
        int64_t sd = s->shape[d], xd = x->shape[d + x->ndim - s->ndim];
        fits = sd == 1 || sd == xd;
    }
    if (n->opset < 7)
        fits = s->numel == 1 || s->numel == x->numel || (s->ndim == 1 && x->ndim >= 2 && s->shape[0] == x->shape[1]);
    if (!fits) {
        char sa[128], sb[128];
        pd__format_shape(sa, sizeof sa, x->ndim, x->shape);
        pd__format_shape(sb, sizeof sb, s->ndim, s->shape);
        return pd__node_err(g, n, PD_ERR_SHAPE, "slope of shape %s does not broadcast to X of shape %s", sb, sa);
    }
    y->dtype = x->dtype;
    return pd__tensor_set_shape(g, y, x->ndim, x->shape);
}

double pd__flops_PRelu(const pd_graph *g, const pd__node *n) { return 2 * out_numel(g, n); }

/* Where(condition, X, Y): bool condition, X and Y of one dtype, 3-way broadcast. */
pd_status pd__shape_Where(pd_graph *g, pd__node *n) {
    pd__tensor *c, *a, *b, *y;
    PD_TRY(input(g, n, 0, &c));
    PD_TRY(input(g, n, 1, &a));
    PD_TRY(input(g, n, 2, &b));
    PD_TRY(output(g, n, &y));
    if (c->dtype != PD_BOOL)
        return pd__node_err(g, n, PD_ERR_SHAPE, "condition '%s' is %s, not bool", c->name, pd_dtype_name(c->dtype));
    PD_TRY(check_kind(g, n, a, PD_EK_ANY));
    PD_TRY(check_same_dtype(g, n, a, b));
    int nd = c->ndim;
    int64_t shape[PD_MAX_DIMS];
    for (int d = 0; d < nd; d++) shape[d] = c->shape[d];
    PD_TRY(bcast(g, n, &nd, shape, a->ndim, a->shape));
    PD_TRY(bcast(g, n, &nd, shape, b->ndim, b->shape));
    y->dtype = a->dtype;
    return pd__tensor_set_shape(g, y, nd, shape);
}

double pd__flops_Where(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }

/* ---- unary ops ------------------------------------------------------------------ */

/* Y has X's dtype and shape; X must be of a class in `kinds`. */
static pd_status shape_unary(pd_graph *g, pd__node *n, unsigned kinds) {
    pd__tensor *x, *y;
    PD_TRY(input(g, n, 0, &x));
    PD_TRY(output(g, n, &y));
    PD_TRY(check_kind(g, n, x, kinds));
    y->dtype = x->dtype;
    return pd__tensor_set_shape(g, y, x->ndim, x->shape);
}

#define PD__FLOAT_ONLY PD_EK_FLOAT
#define PD__SIGNED (PD_EK_FLOAT | PD_EK_SINT)

pd_status pd__shape_Sqrt(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Exp(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Log(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Neg(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__SIGNED); }
pd_status pd__shape_Reciprocal(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Relu(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__SIGNED); }
pd_status pd__shape_LeakyRelu(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Sigmoid(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Tanh(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
/* Erf is defined for every numeric type (integers go through double). */
pd_status pd__shape_Erf(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD_EK_NUM); }

/* Not: bool; IsNaN, IsInf: floats to bool. */
pd_status pd__shape_Not(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD_EK_BOOL); }
pd_status pd__shape_BitwiseNot(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD_EK_INT); }
static pd_status shape_float_pred(pd_graph *g, pd__node *n) {
    PD_TRY(shape_unary(g, n, PD__FLOAT_ONLY));
    pd__out(g, n, 0)->dtype = PD_BOOL;
    return PD_OK;
}
pd_status pd__shape_IsNaN(pd_graph *g, pd__node *n) { return shape_float_pred(g, n); }
pd_status pd__shape_IsInf(pd_graph *g, pd__node *n) { return shape_float_pred(g, n); }
pd_status pd__shape_Abs(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD_EK_NUM); }
pd_status pd__shape_Sign(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD_EK_NUM); }
pd_status pd__shape_Floor(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Ceil(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Round(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_HardSigmoid(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_HardSwish(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Softplus(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Softsign(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Elu(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Selu(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Celu(pd_graph *g, pd__node *n) {
    if (pd__attr_f(n, "alpha", 1.0f) == 0.0f) return pd__node_err(g, n, PD_ERR_INVALID, "alpha=0 (Celu divides by it)");
    return shape_unary(g, n, PD__FLOAT_ONLY);
}
pd_status pd__shape_Mish(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Swish(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_ThresholdedRelu(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
/* Shrink is defined on integers too; only floats are computed here. */
pd_status pd__shape_Shrink(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Sin(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Cos(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Tan(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Asin(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Acos(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Atan(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Sinh(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Cosh(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Asinh(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Acosh(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }
pd_status pd__shape_Atanh(pd_graph *g, pd__node *n) { return shape_unary(g, n, PD__FLOAT_ONLY); }

double pd__flops_Not(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_BitwiseNot(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_IsNaN(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_IsInf(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_Abs(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_Sign(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_Floor(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_Ceil(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_Round(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_HardSigmoid(const pd_graph *g, const pd__node *n) { return 4 * out_numel(g, n); }
double pd__flops_HardSwish(const pd_graph *g, const pd__node *n) { return 5 * out_numel(g, n); }
double pd__flops_Softplus(const pd_graph *g, const pd__node *n) { return 18 * out_numel(g, n); }
double pd__flops_Softsign(const pd_graph *g, const pd__node *n) { return 3 * out_numel(g, n); }
double pd__flops_Elu(const pd_graph *g, const pd__node *n) { return 10 * out_numel(g, n); }
double pd__flops_Selu(const pd_graph *g, const pd__node *n) { return 11 * out_numel(g, n); }
double pd__flops_Celu(const pd_graph *g, const pd__node *n) { return 12 * out_numel(g, n); }
double pd__flops_Mish(const pd_graph *g, const pd__node *n) { return 30 * out_numel(g, n); }
double pd__flops_Swish(const pd_graph *g, const pd__node *n) { return 12 * out_numel(g, n); }
double pd__flops_ThresholdedRelu(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_Shrink(const pd_graph *g, const pd__node *n) { return 3 * out_numel(g, n); }
double pd__flops_Sin(const pd_graph *g, const pd__node *n) { return 10 * out_numel(g, n); }
double pd__flops_Cos(const pd_graph *g, const pd__node *n) { return 10 * out_numel(g, n); }
double pd__flops_Tan(const pd_graph *g, const pd__node *n) { return 12 * out_numel(g, n); }
double pd__flops_Asin(const pd_graph *g, const pd__node *n) { return 12 * out_numel(g, n); }
double pd__flops_Acos(const pd_graph *g, const pd__node *n) { return 12 * out_numel(g, n); }
double pd__flops_Atan(const pd_graph *g, const pd__node *n) { return 12 * out_numel(g, n); }
double pd__flops_Sinh(const pd_graph *g, const pd__node *n) { return 12 * out_numel(g, n); }
double pd__flops_Cosh(const pd_graph *g, const pd__node *n) { return 12 * out_numel(g, n); }
double pd__flops_Asinh(const pd_graph *g, const pd__node *n) { return 14 * out_numel(g, n); }
double pd__flops_Acosh(const pd_graph *g, const pd__node *n) { return 14 * out_numel(g, n); }
double pd__flops_Atanh(const pd_graph *g, const pd__node *n) { return 14 * out_numel(g, n); }

pd_status pd__shape_Gelu(pd_graph *g, pd__node *n) {
    const char *ap = pd__attr_s(n, "approximate", "none");
    if (strcmp(ap, "none") != 0 && strcmp(ap, "tanh") != 0)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "approximate='%s' (expected none or tanh)", ap);
    return shape_unary(g, n, PD__FLOAT_ONLY);
}

/* Clip: opset >= 11 takes optional scalar min / max inputs of X's dtype;
 * older ones float attributes. */
pd_status pd__shape_Clip(pd_graph *g, pd__node *n) {
    pd__tensor *x;
    PD_TRY(input(g, n, 0, &x));
    PD_TRY(shape_unary(g, n, n->opset >= 11 ? PD_EK_NUM : PD_EK_FLOAT));
    for (int i = 1; i <= 2 && n->opset >= 11; i++) {
        pd__tensor *b = pd__in(g, n, i);
        if (!b) continue;
        if (b->ndim < 0) return pd__node_err(g, n, PD_ERR_SHAPE, "input %d ('%s') has no known shape", i, b->name);
        PD_TRY(check_same_dtype(g, n, x, b));
        if (b->numel != 1) {
            char s[128];
            pd__format_shape(s, sizeof s, b->ndim, b->shape);
            return pd__node_err(g, n, PD_ERR_SHAPE, "%s '%s' has shape %s, not a scalar", i == 1 ? "min" : "max",
                                b->name, s);
        }
    }
    return PD_OK;
}

double pd__flops_Sqrt(const pd_graph *g, const pd__node *n) { return 4 * out_numel(g, n); }
double pd__flops_Exp(const pd_graph *g, const pd__node *n) { return 8 * out_numel(g, n); }
double pd__flops_Log(const pd_graph *g, const pd__node *n) { return 8 * out_numel(g, n); }
double pd__flops_Neg(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_Reciprocal(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_Relu(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }
double pd__flops_LeakyRelu(const pd_graph *g, const pd__node *n) { return 2 * out_numel(g, n); }
double pd__flops_Sigmoid(const pd_graph *g, const pd__node *n) { return 10 * out_numel(g, n); }
double pd__flops_Tanh(const pd_graph *g, const pd__node *n) { return 10 * out_numel(g, n); }
double pd__flops_Erf(const pd_graph *g, const pd__node *n) { return 10 * out_numel(g, n); }
double pd__flops_Gelu(const pd_graph *g, const pd__node *n) { return 14 * out_numel(g, n); }
double pd__flops_Clip(const pd_graph *g, const pd__node *n) { return 2 * out_numel(g, n); }

/* ---- Cast, Identity ---------------------------------------------------------------- */

/* Cast and CastLike convert between every numeric dtype, the low-bit ones
 * (float8, float4, int4, int2) included; round_mode names e8m0's rounding. */
static pd_status check_cast(pd_graph *g, const pd__node *n, const pd__tensor *x) {
    if (!pd__dtype_lowbit(x->dtype)) PD_TRY(check_kind(g, n, x, PD_EK_ANY));
    const char *rm = pd__attr_s(n, "round_mode", "up");
    if (strcmp(rm, "up") && strcmp(rm, "down") && strcmp(rm, "nearest"))
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "round_mode '%s' is not one of up, down, nearest", rm);
    return PD_OK;
}

pd_status pd__shape_Cast(pd_graph *g, pd__node *n) {
    pd__tensor *x, *y;
    PD_TRY(input(g, n, 0, &x));
    PD_TRY(output(g, n, &y));
    PD_TRY(check_cast(g, n, x));
    const pd__attr *to = pd__attr_get(n, "to");
    if (!to || to->type != PD_A_INT)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "attribute 'to' missing or not an int");
    pd_dtype t = (pd_dtype)to->i;
    if (to->i < 0 || to->i > 64 || (!pd__ekind(t) && !pd__dtype_lowbit(t)))
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "cast to dtype %lld is not supported", (long long)to->i);
    y->dtype = t;
    return pd__tensor_set_shape(g, y, x->ndim, x->shape);
}

double pd__flops_Cast(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }

/* CastLike(input, target_type): Y is input converted to target_type's dtype. */
pd_status pd__shape_CastLike(pd_graph *g, pd__node *n) {
    pd__tensor *x, *t, *y;
    PD_TRY(input(g, n, 0, &x));
    PD_TRY(output(g, n, &y));
    PD_TRY(check_cast(g, n, x));
    t = pd__in(g, n, 1);
    if (!t) return pd__node_err(g, n, PD_ERR_INVALID, "input 1 (target_type) is missing");
    if (!pd__dtype_lowbit(t->dtype)) PD_TRY(check_kind(g, n, t, PD_EK_ANY));
    y->dtype = t->dtype;
    return pd__tensor_set_shape(g, y, x->ndim, x->shape);
}

double pd__flops_CastLike(const pd_graph *g, const pd__node *n) { return out_numel(g, n); }

/* BitCast: the same bytes read as dtype 'to', which must be as wide as the
 * input's (so the shape is unchanged). */
pd_status pd__shape_BitCast(pd_graph *g, pd__node *n) {
    pd__tensor *x, *y;
    PD_TRY(input(g, n, 0, &x));
    PD_TRY(output(g, n, &y));
    PD_TRY(check_kind(g, n, x, PD_EK_ANY));
    const pd__attr *to = pd__attr_get(n, "to");
    if (!to || to->type != PD_A_INT)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "attribute 'to' missing or not an int");
    pd_dtype t = (pd_dtype)to->i;
    if (to->i < 0 || to->i > 64 || !pd__ekind(t))
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "bit cast to dtype %lld is not supported", (long long)to->i);
    if (pd_dtype_size(t) != pd_dtype_size(x->dtype))
        return pd__node_err(g, n, PD_ERR_SHAPE, "bit cast from %s to %s: element sizes differ",
                            pd_dtype_name(x->dtype), pd_dtype_name(t));
    y->dtype = t;
    return pd__tensor_set_shape(g, y, x->ndim, x->shape);
}

double pd__flops_BitCast(const pd_graph *g, const pd__node *n) {
    (void)g;
    (void)n;
    return 0;
}

/* Identity moves bytes: every dtype, the low-bit ones too. */
pd_status pd__shape_Identity(pd_graph *g, pd__node *n) {
    pd__tensor *x, *y;
    PD_TRY(input(g, n, 0, &x));
    PD_TRY(output(g, n, &y));
    if (!pd__dtype_lowbit(x->dtype)) PD_TRY(check_kind(g, n, x, PD_EK_ANY));
    y->dtype = x->dtype;
    return pd__tensor_set_shape(g, y, x->ndim, x->shape);
}

double pd__flops_Identity(const pd_graph *g, const pd__node *n) {
    (void)g;
    (void)n;
    return 0;
}

/* ---- QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear ------------------------- */

/* The types quantized values come in: the integers, and the low-bit types
 * but e8m0 (a scale type, never a quantized one). */
static bool quant_int(pd_dtype t) {
    return t == PD_INT8 || t == PD_UINT8 || t == PD_INT16 || t == PD_UINT16 || t == PD_INT32 ||
           (pd__dtype_lowbit(t) && t != PD_FLOAT8E8M0);
}

/* Scale s (and zero point z) against x: one value (per tensor), a 1-D one of
 * x's dim `axis` (per axis), or with block_size, x's shape with that dim cut
 * into ceil(dim / block_size) blocks. The kernels read the same attributes. */
static pd_status quant_params(pd_graph *g, const pd__node *n, const pd__tensor *x, const pd__tensor *s,
                              const pd__tensor *z) {
    bool same = z && z->ndim == s->ndim && !memcmp(z->shape, s->shape, sizeof(int64_t) * (size_t)s->ndim);
    if (z && !same && (s->numel != 1 || z->numel != 1)) {
        char a[128], b[128];
        pd__format_shape(a, sizeof a, s->ndim, s->shape);
        pd__format_shape(b, sizeof b, z->ndim, z->shape);
        return pd__node_err(g, n, PD_ERR_SHAPE, "scale %s and zero point %s differ in shape", a, b);
    }
    int64_t bs = n->opset >= 21 ? pd__attr_i(n, "block_size", 0) : 0, axis = pd__attr_i(n, "axis", 1);
    if (s->numel == 1 && bs == 0) return PD_OK;
    if (axis < 0) axis += x->ndim;
    if (axis < 0 || axis >= x->ndim)
        return pd__node_err(g, n, PD_ERR_SHAPE, "axis %lld is out of range for rank %d",
                            (long long)pd__attr_i(n, "axis", 1), x->ndim);
    int64_t d = x->shape[axis];
    bool ok;
    if (bs < 0) {
        ok = false;
    } else if (bs == 0) {
        ok = s->ndim == 1 && s->shape[0] == d;
    } else {
        ok = s->ndim == x->ndim;
        for (int i = 0; ok && i < x->ndim; i++)
            ok = s->shape[i] == (i == axis ? (d + bs - 1) / bs : x->shape[i]);
    }
    if (!ok) {
        char a[128], b[128];
        pd__format_shape(a, sizeof a, x->ndim, x->shape);
        pd__format_shape(b, sizeof b, s->ndim, s->shape);
        return pd__node_err(g, n, PD_ERR_SHAPE, "scale %s does not fit x %s with axis %lld and block_size %lld", b, a,
                            (long long)axis, (long long)bs);
    }
    return PD_OK;
}

/* y = saturate(round_half_even(x / scale) + zero_point), in the zero point's
 * type, else output_dtype's, else uint8. */
pd_status pd__shape_QuantizeLinear(pd_graph *g, pd__node *n) {
    pd__tensor *x, *s, *y, *z = pd__in(g, n, 2);
    PD_TRY(input(g, n, 0, &x));
    PD_TRY(input(g, n, 1, &s));
    PD_TRY(output(g, n, &y));
    if (!(pd__ekind(x->dtype) & PD_EK_FLOAT) && x->dtype != PD_INT32)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "x '%s' has dtype %s (float types and int32 are supported)",
                            x->name, pd_dtype_name(x->dtype));
    PD_TRY(check_kind(g, n, s, PD_EK_FLOAT));
    if (z && z->ndim < 0) return pd__node_err(g, n, PD_ERR_SHAPE, "zero point '%s' has no known shape", z->name);
    int64_t od = n->opset >= 21 ? pd__attr_i(n, "output_dtype", 0) : 0;
    pd_dtype t = z ? z->dtype : od ? (pd_dtype)od : PD_UINT8;
    if (!quant_int(t) || t == PD_INT32)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED,
                            "quantizing to %s is not supported (8- and 16-bit integers, int4, uint4, int2, uint2, "
                            "float8 but e8m0, and float4e2m1 are)",
                            od && !z && (od < 0 || od > 64) ? "an unknown dtype" : pd_dtype_name(t));
    if (z && od && od != (int64_t)z->dtype)
        return pd__node_err(g, n, PD_ERR_SHAPE, "output_dtype %lld differs from the zero point's %s", (long long)od,
                            pd_dtype_name(z->dtype));
    PD_TRY(quant_params(g, n, x, s, z));
    y->dtype = t;
    return pd__tensor_set_shape(g, y, x->ndim, x->shape);
}

double pd__flops_QuantizeLinear(const pd_graph *g, const pd__node *n) { return 3 * out_numel(g, n); }

/* y = (x - zero_point) * scale, in the scale's type (or output_dtype's). */
pd_status pd__shape_DequantizeLinear(pd_graph *g, pd__node *n) {
    pd__tensor *x, *s, *y, *z = pd__in(g, n, 2);
    PD_TRY(input(g, n, 0, &x));
    PD_TRY(input(g, n, 1, &s));
    PD_TRY(output(g, n, &y));
    if (!quant_int(x->dtype))
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED,
                            "dequantizing %s is not supported (8-, 16- and 32-bit integers, int4, uint4, int2, "
                            "uint2, float8 but e8m0, and float4e2m1 are)",
                            pd_dtype_name(x->dtype));
    PD_TRY(check_kind(g, n, s, PD_EK_FLOAT));
    if (z) {
        if (z->ndim < 0) return pd__node_err(g, n, PD_ERR_SHAPE, "zero point '%s' has no known shape", z->name);
        PD_TRY(check_same_dtype(g, n, x, z));
    }
    int64_t od = n->opset >= 23 ? pd__attr_i(n, "output_dtype", 0) : 0;
    pd_dtype t = od ? (pd_dtype)od : s->dtype;
    if (od && (od < 0 || od > 64 || !(pd__ekind(t) & PD_EK_FLOAT)))
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "output_dtype %lld is not a supported float type", (long long)od);
    PD_TRY(quant_params(g, n, x, s, z));
    y->dtype = t;
    return pd__tensor_set_shape(g, y, x->ndim, x->shape);
}

double pd__flops_DequantizeLinear(const pd_graph *g, const pd__node *n) { return 2 * out_numel(g, n); }

/* y (uint8, x's shape), y_scale and y_zero_point (scalars) from x's range widened to hold 0. */
pd_status pd__shape_DynamicQuantizeLinear(pd_graph *g, pd__node *n) {
    pd__tensor *x, *y;
    PD_TRY(input(g, n, 0, &x));
    PD_TRY(output(g, n, &y));
    if (x->dtype != PD_FLOAT)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "x '%s' has dtype %s (float is supported)", x->name,
                            pd_dtype_name(x->dtype));
    y->dtype = PD_UINT8;
    PD_TRY(pd__tensor_set_shape(g, y, x->ndim, x->shape));
    for (int i = 1; i < 3; i++) {
        pd__tensor *o = pd__out(g, n, i);
        if (!o) continue;
        o->dtype = i == 1 ? PD_FLOAT : PD_UINT8;
        PD_TRY(pd__tensor_set_shape(g, o, 0, NULL));
    }
    return PD_OK;
}

double pd__flops_DynamicQuantizeLinear(const pd_graph *g, const pd__node *n) { return 5 * out_numel(g, n); }

/* ---- reductions ------------------------------------------------------------------ */

/* x of a class in `kinds`; y has x's dtype. */
static pd_status shape_reduce_of(pd_graph *g, pd__node *n, unsigned kinds) {
    pd__tensor *x, *y;
    PD_TRY(input(g, n, 0, &x));
    PD_TRY(output(g, n, &y));
    PD_TRY(check_kind(g, n, x, kinds));
    pd__tensor *at = pd__reduce_axes_input(n) ? pd__in(g, n, 1) : NULL;
    pd_tensor av = {PD_UNDEFINED, 0, {0}, NULL};
    if (at) {
        if (at->ndim < 0) return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "axes must be constant");
        av = pd__view(at);
        if (!at->data || (at->kind != PD_T_INIT && at->kind != PD_T_CONST)) {
            if (at->numel != 0) return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "axes must be constant");
            av.data = NULL;
        }
    }
    bool mask[PD_MAX_DIMS], noop;
    pd_status st = pd__reduce_mask(n, x->ndim, at ? &av : NULL, mask, &noop);
    if (st == PD_ERR_UNSUPPORTED) return pd__node_err(g, n, st, "axes must be constant");
    if (st != PD_OK) {
        char s[128];
        pd__format_shape(s, sizeof s, x->ndim, x->shape);
        return pd__node_err(g, n, st, "bad or repeated axes for input of shape %s", s);
    }
    bool keep = pd__attr_i(n, "keepdims", 1) != 0;
    int nd = 0;
    int64_t shape[PD_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) {
        if (!mask[d]) shape[nd++] = x->shape[d];
        else if (keep) shape[nd++] = 1;
    }
    y->dtype = x->dtype;
    return pd__tensor_set_shape(g, y, nd, shape);
}

static pd_status shape_reduce(pd_graph *g, pd__node *n) { return shape_reduce_of(g, n, PD_EK_NUM); }

pd_status pd__shape_ReduceMean(pd_graph *g, pd__node *n) { return shape_reduce(g, n); }
pd_status pd__shape_ReduceSum(pd_graph *g, pd__node *n) { return shape_reduce(g, n); }

double pd__flops_ReduceMean(const pd_graph *g, const pd__node *n) { return in_numel(g, n, 0) + out_numel(g, n); }
double pd__flops_ReduceSum(const pd_graph *g, const pd__node *n) { return in_numel(g, n, 0); }

/* ReduceMax, ReduceMin: bool too from opset 20 (any / all). */
pd_status pd__shape_ReduceMax(pd_graph *g, pd__node *n) {
    return shape_reduce_of(g, n, n->opset >= 20 ? PD_EK_ANY : PD_EK_NUM);
}
pd_status pd__shape_ReduceMin(pd_graph *g, pd__node *n) {
    return shape_reduce_of(g, n, n->opset >= 20 ? PD_EK_ANY : PD_EK_NUM);
}
pd_status pd__shape_ReduceProd(pd_graph *g, pd__node *n) { return shape_reduce(g, n); }
pd_status pd__shape_ReduceL1(pd_graph *g, pd__node *n) { return shape_reduce(g, n); }
pd_status pd__shape_ReduceL2(pd_graph *g, pd__node *n) { return shape_reduce(g, n); }
pd_status pd__shape_ReduceSumSquare(pd_graph *g, pd__node *n) { return shape_reduce(g, n); }
pd_status pd__shape_ReduceLogSum(pd_graph *g, pd__node *n) { return shape_reduce(g, n); }
pd_status pd__shape_ReduceLogSumExp(pd_graph *g, pd__node *n) { return shape_reduce(g, n); }

double pd__flops_ReduceMax(const pd_graph *g, const pd__node *n) { return in_numel(g, n, 0); }
double pd__flops_ReduceMin(const pd_graph *g, const pd__node *n) { return in_numel(g, n, 0); }
double pd__flops_ReduceProd(const pd_graph *g, const pd__node *n) { return in_numel(g, n, 0); }
double pd__flops_ReduceL1(const pd_graph *g, const pd__node *n) { return 2 * in_numel(g, n, 0); }
double pd__flops_ReduceL2(const pd_graph *g, const pd__node *n) { return 2 * in_numel(g, n, 0) + 4 * out_numel(g, n); }
double pd__flops_ReduceSumSquare(const pd_graph *g, const pd__node *n) { return 2 * in_numel(g, n, 0); }
double pd__flops_ReduceLogSum(const pd_graph *g, const pd__node *n) { return in_numel(g, n, 0) + 8 * out_numel(g, n); }
double pd__flops_ReduceLogSumExp(const pd_graph *g, const pd__node *n) {
    return 10 * in_numel(g, n, 0) + 8 * out_numel(g, n);
}

/* ---- the optimizer update rules of ai.onnx.preview.training -------------------- */

/* Adagrad, Adam and Momentum: R (float scalar), T (int64 scalar), then n
 * tensors X, n gradients G and n of each state (Adagrad H; Adam V, H;
 * Momentum V), float or double, each the shape of its X; the outputs are
 * the new X and states, grouped the same way. Element-wise updates, not
 * differentiable: a graph runs them as its own optimizer step. */
static pd_status shape_optim(pd_graph *g, pd__node *n, int groups) {
    pd__tensor *r, *t;
    PD_TRY(input(g, n, 0, &r));
    PD_TRY(input(g, n, 1, &t));
    if ((r->dtype != PD_FLOAT && r->dtype != PD_DOUBLE) || r->numel != 1 || t->dtype != PD_INT64 || t->numel != 1)
        return pd__node_err(g, n, PD_ERR_SHAPE, "R (%s) must be a float scalar and T (%s) an int64 scalar",
                            pd_dtype_name(r->dtype), pd_dtype_name(t->dtype));
    int k = (n->nin - 2) / groups;
    if (k < 1 || n->nin != 2 + k * groups || n->nout != k * (groups - 1))
        return pd__node_err(g, n, PD_ERR_INVALID, "%d inputs and %d outputs: expected 2 + %d n and %d n", n->nin,
                            n->nout, groups, groups - 1);
    for (int i = 0; i < k; i++) {
        pd__tensor *x;
        PD_TRY(input(g, n, 2 + i, &x));
        if (x->dtype != PD_FLOAT && x->dtype != PD_DOUBLE)
            return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "X '%s' has dtype %s (float and double are supported)",
                                x->name, pd_dtype_name(x->dtype));
        for (int j = 1; j < groups; j++) {
            pd__tensor *y;
            PD_TRY(input(g, n, 2 + j * k + i, &y));
            if (y->dtype != x->dtype || y->ndim != x->ndim || memcmp(y->shape, x->shape, sizeof(int64_t) * (size_t)x->ndim))
                return pd__node_err(g, n, PD_ERR_SHAPE, "'%s' (%s) does not match X '%s' (%s) in dtype or shape",
                                    y->name, pd_dtype_name(y->dtype), x->name, pd_dtype_name(x->dtype));
        }
        for (int j = 0; j < groups - 1; j++) {
            pd__tensor *o = pd__out(g, n, j * k + i);
            if (!o) continue;
            o->dtype = x->dtype;
            PD_TRY(pd__tensor_set_shape(g, o, x->ndim, x->shape));
        }
    }
    if (n->op == PD_OP_MOMENTUM) {
        const char *mode = pd__attr_s(n, "mode", "");
        if (strcmp(mode, "standard") != 0 && strcmp(mode, "nesterov") != 0)
            return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "mode '%s' (standard and nesterov are defined)", mode);
    }
    return PD_OK;
}

static double optim_flops(const pd_graph *g, const pd__node *n, int groups, double per) {
    double s = 0;
    for (int i = 2; i < 2 + (n->nin - 2) / groups; i++) s += in_numel(g, n, i);
    return per * s;
}

pd_status pd__shape_Adagrad(pd_graph *g, pd__node *n) { return shape_optim(g, n, 3); }
pd_status pd__shape_Adam(pd_graph *g, pd__node *n) { return shape_optim(g, n, 4); }
pd_status pd__shape_Momentum(pd_graph *g, pd__node *n) { return shape_optim(g, n, 3); }
double pd__flops_Adagrad(const pd_graph *g, const pd__node *n) { return optim_flops(g, n, 3, 9); }
double pd__flops_Adam(const pd_graph *g, const pd__node *n) { return optim_flops(g, n, 4, 14); }
double pd__flops_Momentum(const pd_graph *g, const pd__node *n) { return optim_flops(g, n, 3, 7); }

/* ---- ai.onnx.ml ------------------------------------------------------------------ */

/* Binarizer: 1 where X > threshold, else 0, in X's dtype (float, double,
 * int32, int64). Its gradient is zero almost everywhere: not differentiable. */
pd_status pd__shape_Binarizer(pd_graph *g, pd__node *n) {
    pd__tensor *x, *y;
    PD_TRY(input(g, n, 0, &x));
    PD_TRY(output(g, n, &y));
    if (x->dtype != PD_FLOAT && x->dtype != PD_DOUBLE && x->dtype != PD_INT32 && x->dtype != PD_INT64)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "X has dtype %s (float, double, int32 and int64 are supported)",
                            pd_dtype_name(x->dtype));
    y->dtype = x->dtype;
    return pd__tensor_set_shape(g, y, x->ndim, x->shape);
}

double pd__flops_Binarizer(const pd_graph *g, const pd__node *n) { return in_numel(g, n, 0); }
#undef PD__FLOAT_ONLY
#undef PD__SIGNED

/* ==== core/shape_nn.c ==== */
#define cin pd__shape_nn_cin
#define pd__shp pd__shape_nn_pd__shp
#define set_out pd__shape_nn_set_out
#define shp pd__shape_nn_shp
/* shape_nn.c - shape rules and FLOP counts of the neural-network ops
 * (convolutions, pools, normalizations, attention, losses, quantized
 * products; the list and how it works: docs/INTERNALS.md, "core/shape_nn.c").
 */
/* ---- core/shape_nn.h ---- */
/* shape_nn.h - sliding-window geometry shared by the nn shape rules
 * (core/shape_nn.c) and the CPU kernels (runtime/cpu/nn.c).
 *
 * Conv, ConvTranspose, MaxPool and AveragePool read the same attributes
 * (kernel_shape, strides, dilations, pads, auto_pad, ceil_mode,
 * output_padding, output_shape). One function turns them into a pd__win so
 * that the shape a rule promises and the windows a kernel walks cannot
 * disagree. Not installed; private to the library.
 */
#ifndef PD_SHAPE_NN_H
#define PD_SHAPE_NN_H


/* Window geometry over the spatial dims of an (N, C, D1..Dn) tensor.
 * Window o of dim i covers positions o*s[i] - pb[i] + j*d[i], j in [0, k[i]),
 * of the "image": the input for Conv and pools, the output for ConvTranspose
 * (whose col2im scatters input position o to those positions). */
typedef struct pd__win {
    int nsp;                  /* number of spatial dims */
    int64_t in[PD_MAX_DIMS];  /* spatial sizes of the input X */
    int64_t out[PD_MAX_DIMS]; /* spatial sizes of the output Y */
    int64_t k[PD_MAX_DIMS];   /* kernel */
    int64_t s[PD_MAX_DIMS];   /* strides */
    int64_t d[PD_MAX_DIMS];   /* dilations */
    int64_t pb[PD_MAX_DIMS];  /* pads at the start (ConvTranspose: may be negative) */
    int64_t pe[PD_MAX_DIMS];  /* pads at the end */
} pd__win;

typedef enum pd__win_kind {
    PD_WIN_CONV = 0, /* Conv: kernel from the weights, no ceil_mode */
    PD_WIN_POOL,     /* MaxPool / AveragePool: kernel_shape required, ceil_mode */
    PD_WIN_CONVT     /* ConvTranspose: output_padding, output_shape */
} pd__win_kind;

/* Fills *w from the node's attributes and the shape of X (rank ndim >= 3).
 * kshape: the kernel's spatial dims from the weights (NULL for pools).
 * On error sets the message (without the node prefix) and returns it. */
pd_status pd__win_make(const pd__node *n, pd__win_kind kind, int ndim, const int64_t *xshape,
                       const int64_t *kshape, pd__win *w);

/* MaxUnpool(X, I, output_shape): the shape I's flat indices address
 * (`frame`: N, C, then (in - 1) * stride - pads + kernel per spatial dim,
 * as ONNX's reference) and the output's (`out`: the output_shape input when
 * given, each dim at least frame's, the frame at its start; else frame). in[2]
 * must then have data. */
pd_status pd__maxunpool_shapes(const pd__node *n, pd_tensor *const *in, int64_t *frame, int64_t *out);

/* Whether a BatchNormalization node computes batch statistics: training_mode
 * (opset 14+), more than one output (opsets 7-13), is_test=0 (before 7). */
int pd__bn_training(const pd__node *n);

/* Softmax / LogSoftmax view their input as (outer, len, inner) and normalize
 * over len: one axis from opset 13, the input coerced to 2-D at axis before. */
pd_status pd__softmax_split(const pd__node *n, int ndim, const int64_t *shape, int64_t *outer, int64_t *len,
                            int64_t *inner);

/* MeanVarianceNormalization's axes (default [0, 2, 3]): reduced[d] for each
 * of the ndim dims; returns their count, or -1-i when entry i is out of
 * range or repeated. */
int pd__mvn_axes(const pd__node *n, int ndim, bool *reduced);

/* LpPool's p: an int from opset 2, a float in opset 1 (default 2). */
double pd__lppool_p(const pd__node *n);

/* Resize (opsets 10-19) and Upsample (7-9): separable nearest or N-linear
 * interpolation. The output shape and per-axis scales come from the scales
 * or sizes input (constants at load), the rest from the attributes. */
typedef enum pd__rsz_ctm {
    PD_RSZ_HALF_PIXEL = 0,
    PD_RSZ_PYTORCH_HALF_PIXEL,
    PD_RSZ_ALIGN_CORNERS,
    PD_RSZ_ASYMMETRIC,
    PD_RSZ_HALF_PIXEL_SYMMETRIC,
    PD_RSZ_TF_CROP_AND_RESIZE
} pd__rsz_ctm;
typedef enum pd__rsz_nearest {
    PD_RSZ_ROUND_PREFER_FLOOR = 0,
    PD_RSZ_ROUND_PREFER_CEIL,
    PD_RSZ_FLOOR,
    PD_RSZ_CEIL
} pd__rsz_nearest;
typedef struct pd__rsz {
    bool linear;              /* else nearest (or cubic) */
    bool cubic;               /* Keys' cubic convolution, coefficient cubic_a */
    bool exclude_outside;     /* cubic: taps outside the input weigh 0, the rest renormalised */
    double cubic_a;
    pd__rsz_ctm ctm;          /* coordinate_transformation_mode */
    pd__rsz_nearest nearest;  /* nearest_mode */
    int ndim;
    int64_t in[PD_MAX_DIMS], out[PD_MAX_DIMS];
    double scale[PD_MAX_DIMS]; /* output / input, per axis */
    double outf[PD_MAX_DIMS];  /* input * scale unrounded (with sizes: the size), as align_corners reads it */
    bool antialias;            /* linear, cubic: a downsampled axis widens its kernel by 1 / scale */
    int taps;                  /* input positions per output position: 4, or more with antialias */
    double roi[2 * PD_MAX_DIMS]; /* tf_crop_and_resize: starts, then ends, per axis (0 and 1 elsewhere) */
    double extrapolation;      /* tf_crop_and_resize: the value of outputs mapped outside the input */
    bool roi_f32;              /* roi is float32: its products rounded to float32, as ONNX's reference does */
} pd__rsz;

/* Fills *r from the node and X's shape; roi, scales, sizes: the inputs' data
 * (NULL or empty when not given; roi's data may be NULL at load, where only
 * the shape is wanted). Sets the message (without the node prefix) and
 * returns PD_ERR_UNSUPPORTED for the forms not implemented. */
pd_status pd__resize_plan(const pd__node *n, int ndim, const int64_t *xshape, const pd_tensor *roi,
                          const pd_tensor *scales, const pd_tensor *sizes, pd__rsz *r);

/* DeformConv (2-D): X (N, C, H, W), W (OC, C / group, KH, KW), offset
 * (N, OG * KH * KW * 2, OH, OW), optional B (OC) and mask (N, OG * KH * KW,
 * OH, OW); OG = offset_group. */
typedef struct pd__deform {
    int64_t N, C, H, W, OC, G, OG, KH, KW, OH, OW;
    int64_t sh, sw, dh, dw, pt, pl; /* strides, dilations, leading pads */
} pd__deform;

/* Fills *p from the node and the shapes (bshape, mshape NULL when B, mask
 * are absent). Sets the message (without the node prefix) on error. */
pd_status pd__deform_plan(const pd__node *n, int xr, const int64_t *x, int wr, const int64_t *w, int orr,
                          const int64_t *off, int br, const int64_t *b, int mr, const int64_t *m, pd__deform *p);

/* GridSample's taps per dim (1 nearest, 2 linear, 4 cubic; 0: unknown mode)
 * and padding (0 zeros, 1 border, 2 reflection; -1: unknown). */
int pd__grid_mode(const pd__node *n);
int pd__grid_padding(const pd__node *n);

/* Col2Im's block counts cnt, strides, leading pads and dilations per spatial
 * dim (r of them); false when the attributes do not fit the shapes. */
bool pd__col2im_plan(const pd__node *n, int r, const int64_t *img, const int64_t *blk, int64_t *cnt, int64_t *st,
                     int64_t *pb, int64_t *dil);

/* The input index of Resize's/Upsample's scales and sizes (-1: none). */
void pd__resize_inputs(const pd__node *n, int *scales, int *sizes);

/* Einsum that is a batched matrix product: every letter is
 * a batch dim (in A, B and the output), M (A and the output), N (B and the
 * output) or K (A and B, summed). A is read as (batch, M, K) through the
 * axis order pa, B as (batch, K, N) through pb; the product C (batch, M, N)
 * has its axis j at output axis po[j]. */
typedef struct pd__ein {
    int ra, rb, ro, nbt;                          /* ranks of A, B, the output, C */
    int64_t B, M, N, K;                           /* products of each role's sizes */
    int pa[PD_MAX_DIMS], pb[PD_MAX_DIMS], po[PD_MAX_DIMS];
    int64_t cshape[PD_MAX_DIMS], out[PD_MAX_DIMS]; /* C's dims, the output's */
    int64_t bshape[PD_MAX_DIMS]; /* one operand: B is ones of this shape (the letters summed) */
    /* a letter repeated in operand k (k 0: A, 1: B): the product reads its
     * diagonal, of rank dr[k] and shape dshape[k]; axis i of the operand is
     * axis dmap[k][i] of the diagonal */
    bool diag[2];
    int dr[2], dmap[2][PD_MAX_DIMS];
    int64_t dshape[2][PD_MAX_DIMS];
} pd__ein;

/* Parses the node's equation against the operands' shapes (nin 1: a
 * transpose or sum of A, planned as a product with B = ones of bshape over
 * the letters summed; rb, sb unused). An ellipsis stands for the operand's
 * axes not named (of one size in both operands: no broadcasting); a letter
 * repeated in an operand takes its diagonal (diag). Other forms (three
 * operands, with two operands a sum over one operand's axis) are
 * PD_ERR_UNSUPPORTED naming the equation. Sets the message without the node
 * prefix. */
pd_status pd__einsum_plan(const pd__node *n, int nin, int ra, const int64_t *sa, int rb, const int64_t *sb,
                          pd__ein *e);

/* The reduction attribute of the losses: 0 none, 1 sum, 2 mean, -1 unknown. */
int pd__loss_reduction(const pd__node *n);

/* RotaryEmbedding (opset 23): X seen as (B, S, H, D), from a 4-D
 * (B, H, S, D) or a 3-D (B, S, H*D) input; the first rd of each head's D
 * rotate by the cache rows (C >= rd/2 wide), in pairs (x[2i], x[2i+1])
 * when interleaved, else (x[i], x[i+rd/2]); the rest pass through. With
 * position_ids (B, S) the caches are (P, C) tables indexed by them, else
 * (B, S, C). */
typedef struct pd__rope {
    int64_t B, S, H, D, rd, C, P;
    bool four, interleaved, pos;
} pd__rope;

/* Fills *r from the node and the shapes of X, cos_cache and position_ids
 * (pn 0: absent). Sets the message without the node prefix. */
pd_status pd__rope_plan(const pd__node *n, int xn, const int64_t *xs, int cn, const int64_t *cs, int pn,
                        const int64_t *ps, pd__rope *r);

/* Attention (opset 23): Q (B, Hq, Sq, Dh) or (B, Sq, Hq*Dh), K and V
 * (B, Hk, Skv, Dh|Dv) or 3-D likewise; past_key/past_value (B, Hk, P, .)
 * are prepended to K and V (Tk = P + Skv keys); query head h reads kv head
 * h / (Hq / Hk). Scores scale * Q K^T, softcapped (cap * tanh(s / cap))
 * when softcap > 0, plus the mask (bool: false is -inf; float: added; keys
 * beyond its last dim are -inf) and, when causal, -inf where j > i + P;
 * softmax over the keys, times V. With nonpad_kv_seqlen, batch b's keys
 * from kvlen[b] on are -inf too and, without past, its causal diagonal is
 * offset by kvlen[b] - Sq (keys right-aligned). The mask broadcasts against
 * (B, Hq, Sq, .): mshape is its shape right-aligned to 4 dims (mn 0: none). */
typedef struct pd__attn {
    int64_t B, Hq, Hk, Sq, Skv, P, Tk, Dh, Dv;
    bool three, causal, past;
    const int64_t *kvlen; /* nonpad_kv_seqlen (opset 24, B): the kernel sets it; NULL: none */
    int mode; /* qk_matmul_output_mode: the scores (0, 1), plus the mask (2), the softmax (3) */
    double scale, softcap;
    int mn;
    int64_t mshape[4];
} pd__attn;

/* Fills *a from the node and the shapes of Q, K, V, attn_mask and
 * past_key (ndim 0: absent). Forms not implemented are PD_ERR_UNSUPPORTED
 * naming the attribute. Sets the message without the node prefix. */
pd_status pd__attn_plan(const pd__node *n, int qn, const int64_t *qs, int kn, const int64_t *ks, int vn,
                        const int64_t *vs, int mn, const int64_t *ms, int pn, const int64_t *ps, pd__attn *a);

/* LinearAttention (opset 27): query (B, T, Hq*Dk), key (B, T, Hk*Dk),
 * value (B, T, Hk*Dv); one (Dk, Dv) state per kv head, past_state
 * (B, Hk, Dk, Dv) or zeros. Token t: the state decays by exp(decay)
 * (gated; decay (B, T, Hk) per head or (B, T, Hk*Dk) per key row), the
 * delta rules write beta * (v - S^T k) instead of v (beta (B, T, Hk) or
 * (B, T, 1)), S += k v^T, and query head h reads kv head h / (Hq / Hk):
 * o = scale * S^T q. gw and bw: decay and beta values per token and kv head
 * group (gw 1 or Dk, bw Hk or 1; 0: absent). */
typedef struct pd__linattn {
    int64_t B, T, Hq, Hk, Dk, Dv;
    int64_t gw, bw;
    bool gated, delta;
    double scale;
} pd__linattn;

/* Fills *a from the node and the shapes of query, key, value, decay and
 * beta (ndim 0: absent). Sets the message without the node prefix. */
pd_status pd__linattn_plan(const pd__node *n, int qn, const int64_t *qs, int kn, const int64_t *ks, int vn,
                           const int64_t *vs, int dn, const int64_t *ds, int bn, const int64_t *bs, pd__linattn *a);

/* CausalConvWithState (opset 27): input (B, C, L), depthwise weight
 * (C, 1, K), bias (C), past_state (B, C, K-1) or zeros prepended; output
 * (B, C, L) the valid convolution of the K-1 + L positions (then SiLU
 * with activation silu/swish), present_state (B, C, K-1) their last K-1.
 * 1: silu, 0: none, -1: an activation not defined. */
int pd__ccws_silu(const pd__node *n);

/* RoiAlign's mode (0 avg, 1 max; -1 unknown) and the offset its
 * coordinate_transformation_mode subtracts (0.5 half_pixel, 0
 * output_half_pixel; -1 unknown). */
int pd__roialign_mode(const pd__node *n);
double pd__roialign_offset(const pd__node *n);

#endif
/* ---- end of core/shape_nn.h ---- */

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- small helpers ---------------------------------------------------------- */

/* A shape formatted for a message; the temporary lives to the end of the call. */
typedef struct pd__shp {
    char s[160];
} pd__shp;

static pd__shp shp(const pd__tensor *t) {
    pd__shp b;
    pd__format_shape(b.s, sizeof b.s, t->ndim, t->shape);
    return b;
}

static pd__shp shpv(int n, const int64_t *v) {
    pd__shp b;
    pd__format_shape(b.s, sizeof b.s, n, v);
    return b;
}

static bool is_float(pd_dtype t) { return t == PD_FLOAT || t == PD_DOUBLE; }

static const pd__tensor *cin(const pd_graph *g, const pd__node *n, int i) {
    return (i < n->nin && n->in[i] >= 0) ? &g->tensors[n->in[i]] : NULL;
}

static const pd__tensor *cout(const pd_graph *g, const pd__node *n, int i) {
    return (i < n->nout && n->out[i] >= 0) ? &g->tensors[n->out[i]] : NULL;
}

static int64_t prod(int n, const int64_t *v) {
    int64_t p = 1;
    for (int i = 0; i < n; i++) p *= v[i];
    return p;
}

/* The same in double, for FLOP counts: kernel_shape comes from the file
 * unchecked, and the products of huge declared shapes overflow an int64. */
static double dprod(int n, const int64_t *v) {
    double p = 1;
    for (int i = 0; i < n; i++) p *= (double)v[i];
    return p;
}

static double dnumel(const pd__tensor *t) { return t->numel > 0 ? (double)t->numel : 0; }

/* Adds the node prefix to a message set with pd__err (geometry errors). */
static pd_status node_prefix(const pd_graph *g, const pd__node *n, pd_status st) {
    pd__err_prefix("%s: node '%s' (%s)", g->path, n->name, n->op_type);
    return st;
}

static pd_status need(pd_graph *g, pd__node *n, int i, const char *what, pd__tensor **t) {
    *t = pd__in(g, n, i);
    if (!*t) return pd__node_err(g, n, PD_ERR_INVALID, "input %d (%s) is missing", i, what);
    return PD_OK;
}

static pd_status need_float(pd_graph *g, pd__node *n, const pd__tensor *t, const char *what) {
    if (!is_float(t->dtype))
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "%s '%s' has dtype %s (float and double are supported)", what,
                            t->name, pd_dtype_name(t->dtype));
    return PD_OK;
}

/* The same, float16 and bfloat16 accepted too: the ops whose CPU kernels
 * widen them to float32 (runtime/cpu/nn.c, half_run). */
static pd_status need_float_half(pd_graph *g, pd__node *n, const pd__tensor *t, const char *what) {
    if (t->dtype == PD_FLOAT16 || t->dtype == PD_BFLOAT16) return PD_OK;
    return need_float(g, n, t, what);
}

static pd_status need_dtype(pd_graph *g, pd__node *n, const pd__tensor *t, pd_dtype want, const char *what) {
    if (t->dtype != want)
        return pd__node_err(g, n, PD_ERR_SHAPE, "%s '%s' has dtype %s, expected %s", what, t->name,
                            pd_dtype_name(t->dtype), pd_dtype_name(want));
    return PD_OK;
}

/* Sets output i's dtype and shape (absent optional outputs are skipped). */
static pd_status set_out(pd_graph *g, pd__node *n, int i, pd_dtype dt, int ndim, const int64_t *shape) {
    pd__tensor *t = pd__out(g, n, i);
    if (!t) return PD_OK;
    t->dtype = dt;
    return pd__tensor_set_shape(g, t, ndim, shape);
}

/* Normalizes an axis attribute into [0, hi]; false when out of [-r, hi]. */
static bool norm_axis(int64_t a, int r, int hi, int *out) {
    if (a < 0) a += r;
    if (a < 0 || a > hi) return false;
    *out = (int)a;
    return true;
}

/* ---- sliding windows -------------------------------------------------------- */

typedef enum { AP_NOTSET, AP_SAME_UPPER, AP_SAME_LOWER, AP_VALID } pd__autopad;

/* Reads an INTS attribute of `want` values into dst (def when absent). */
static pd_status win_ints(const pd__node *n, const char *name, int want, int64_t def, int64_t lo, int64_t *dst) {
    const int64_t *v;
    int c = pd__attr_ints(n, name, &v);
    if (c == 0) {
        for (int i = 0; i < want; i++) dst[i] = def;
        return PD_OK;
    }
    if (c != want)
        return pd__err(PD_ERR_SHAPE, "attribute %s has %d values, expected %d", name, c, want);
    for (int i = 0; i < want; i++) {
        if (v[i] < lo || v[i] > INT32_MAX)
            return pd__err(PD_ERR_SHAPE, "attribute %s has value %lld at %d (must be >= %lld)", name,
                           (long long)v[i], i, (long long)lo);
        dst[i] = v[i];
    }
    return PD_OK;
}

static int64_t floor_div2(int64_t v) { return v >= 0 ? v / 2 : -((-v + 1) / 2); }

static pd_status win_convt(const pd__node *n, pd__win *w, pd__autopad ap) {
    int ns = w->nsp;
    int64_t op[PD_MAX_DIMS];
    PD_TRY(win_ints(n, "output_padding", ns, 0, 0, op));
    const int64_t *osv;
    int osc = pd__attr_ints(n, "output_shape", &osv);
    if (osc && osc != ns && osc != ns + 2)
        return pd__err(PD_ERR_SHAPE, "attribute output_shape %s has %d values, expected %d", shpv(osc, osv).s, osc, ns);
    const int64_t *os = osc ? osv + (osc - ns) : NULL;
    for (int i = 0; i < ns; i++) {
        int64_t ek = (w->k[i] - 1) * w->d[i] + 1, grown;
        if (!pd__mul_ok(w->s[i], w->in[i], &grown) || grown > INT64_MAX / 4)
            return pd__err(PD_ERR_SHAPE, "input size %lld times stride %lld overflows in spatial dim %d",
                           (long long)w->in[i], (long long)w->s[i], i);
        int64_t natural = w->s[i] * (w->in[i] - 1) + op[i] + ek;
        if (ap == AP_SAME_UPPER || ap == AP_SAME_LOWER) {
            /* as ONNX's reference: the output is in*stride (or output_shape), the
             * difference is split with the odd one at the end for SAME_UPPER */
            w->out[i] = os ? os[i] : w->in[i] * w->s[i];
            int64_t total = natural - w->out[i], half = floor_div2(total);
            w->pb[i] = ap == AP_SAME_UPPER ? half : total - half;
            w->pe[i] = total - w->pb[i];
        } else {
            if (ap == AP_VALID) w->pb[i] = w->pe[i] = 0;
            /* output_shape with explicit (or zero) pads grows or cuts at the end */
            w->out[i] = os ? os[i] : natural - w->pb[i] - w->pe[i];
        }
        if (w->out[i] < 1)
            return pd__err(PD_ERR_SHAPE, "output size %lld in spatial dim %d (input %lld, kernel %lld, stride %lld)",
                           (long long)w->out[i], i, (long long)w->in[i], (long long)w->k[i], (long long)w->s[i]);
    }
    return PD_OK;
}

pd_status pd__win_make(const pd__node *n, pd__win_kind kind, int ndim, const int64_t *x, const int64_t *ks,
                       pd__win *w) {
    memset(w, 0, sizeof *w);
    int ns = ndim - 2;
    if (ns < 1)
        return pd__err(PD_ERR_SHAPE, "input %s has rank %d; expected (N, C, D1, ...) with a spatial dim",
                       shpv(ndim, x).s, ndim);
    w->nsp = ns;
    for (int i = 0; i < ns; i++) w->in[i] = x[i + 2];
    const int64_t *kv;
    int kc = pd__attr_ints(n, "kernel_shape", &kv);
    if (kind == PD_WIN_POOL) {
        if (kc != ns)
            return pd__err(PD_ERR_SHAPE, "attribute kernel_shape has %d values, expected %d for input %s", kc, ns,
                           shpv(ndim, x).s);
        PD_TRY(win_ints(n, "kernel_shape", ns, 1, 1, w->k));
    } else {
        for (int i = 0; i < ns; i++) w->k[i] = ks[i];
        if (kc && (kc != ns || memcmp(kv, ks, sizeof(int64_t) * (size_t)ns) != 0))
            return pd__err(PD_ERR_SHAPE, "attribute kernel_shape %s does not match the weights' kernel %s",
                           shpv(kc, kv).s, shpv(ns, ks).s);
        for (int i = 0; i < ns; i++)
            if (w->k[i] < 1 || w->k[i] > INT32_MAX)
                return pd__err(PD_ERR_SHAPE, "kernel %s has an empty or huge dim", shpv(ns, ks).s);
    }
    PD_TRY(win_ints(n, "strides", ns, 1, 1, w->s));
    PD_TRY(win_ints(n, "dilations", ns, 1, 1, w->d));
    int64_t pads[2 * PD_MAX_DIMS];
    PD_TRY(win_ints(n, "pads", 2 * ns, 0, 0, pads));
    for (int i = 0; i < ns; i++) {
        w->pb[i] = pads[i];
        w->pe[i] = pads[ns + i];
    }
    const char *aps = pd__attr_s(n, "auto_pad", "NOTSET");
    pd__autopad ap;
    if (!strcmp(aps, "NOTSET") || !aps[0]) ap = AP_NOTSET;
    else if (!strcmp(aps, "SAME_UPPER")) ap = AP_SAME_UPPER;
    else if (!strcmp(aps, "SAME_LOWER")) ap = AP_SAME_LOWER;
    else if (!strcmp(aps, "VALID")) ap = AP_VALID;
    else return pd__err(PD_ERR_UNSUPPORTED, "attribute auto_pad '%s' is not NOTSET, SAME_UPPER, SAME_LOWER or VALID", aps);
    if (kind == PD_WIN_CONVT) return win_convt(n, w, ap);

    bool ceil_mode = kind == PD_WIN_POOL && pd__attr_i(n, "ceil_mode", 0) != 0;
    for (int i = 0; i < ns; i++) {
        int64_t in = w->in[i], s = w->s[i], ek = (w->k[i] - 1) * w->d[i] + 1;
        if (ap == AP_SAME_UPPER || ap == AP_SAME_LOWER) {
            w->out[i] = (in + s - 1) / s;
            int64_t total = (w->out[i] - 1) * s + ek - in;
            if (total < 0) total = 0;
            w->pb[i] = ap == AP_SAME_UPPER ? total / 2 : total - total / 2;
            w->pe[i] = total - w->pb[i];
        } else {
            if (ap == AP_VALID) w->pb[i] = w->pe[i] = 0;
            int64_t num = in + w->pb[i] + w->pe[i] - ek;
            if (num < 0)
                return pd__err(PD_ERR_SHAPE,
                               "window of %lld (kernel %lld, dilation %lld) is larger than the padded input %lld "
                               "in spatial dim %d of %s",
                               (long long)ek, (long long)w->k[i], (long long)w->d[i],
                               (long long)(in + w->pb[i] + w->pe[i]), i, shpv(ndim, x).s);
            if (ceil_mode) {
                w->out[i] = (num + s - 1) / s + 1;
                /* the last window must start inside the input or its leading pad */
                if ((w->out[i] - 1) * s >= in + w->pb[i]) w->out[i]--;
            } else {
                w->out[i] = num / s + 1;
            }
        }
        if (w->out[i] < 1)
            return pd__err(PD_ERR_SHAPE, "empty output in spatial dim %d of %s", i, shpv(ndim, x).s);
    }
    return PD_OK;
}

/* ---- Gemm, MatMul ------------------------------------------------------------- */

pd_status pd__shape_Gemm(pd_graph *g, pd__node *n) {
    pd__tensor *a, *b, *c = pd__in(g, n, 2);
    PD_TRY(need(g, n, 0, "A", &a));
    PD_TRY(need(g, n, 1, "B", &b));
    PD_TRY(need_float(g, n, a, "A"));
    PD_TRY(need_dtype(g, n, b, a->dtype, "B"));
    if (c) PD_TRY(need_dtype(g, n, c, a->dtype, "C"));
    int ta = pd__attr_i(n, "transA", 0) != 0, tb = pd__attr_i(n, "transB", 0) != 0;
    /* the loader's fused Linear (pd__fuse_linear) takes A (..., K); files' Gemm is 2-D */
    bool rows = !ta && a->ndim > 2 && n->domain && !strcmp(n->domain, PD__FUSED_DOMAIN);
    if ((a->ndim != 2 && !rows) || b->ndim != 2)
        return pd__node_err(g, n, PD_ERR_SHAPE, "A %s and B %s must be matrices", shp(a).s, shp(b).s);
    int64_t M = a->shape[ta], K = a->shape[ta ? 0 : a->ndim - 1], Kb = b->shape[tb], N = b->shape[!tb];
    if (K != Kb)
        return pd__node_err(g, n, PD_ERR_SHAPE, "A %s (transA=%d) and B %s (transB=%d): inner dims %lld and %lld differ",
                            shp(a).s, ta, shp(b).s, tb, (long long)K, (long long)Kb);
    if (c) {
        bool ok = c->ndim <= 2;
        if (ok && c->ndim >= 1) ok = c->shape[c->ndim - 1] == 1 || c->shape[c->ndim - 1] == N;
        if (ok && c->ndim == 2) ok = c->shape[0] == 1 || c->shape[0] == M;
        if (!ok)
            return pd__node_err(g, n, PD_ERR_SHAPE, "C %s does not broadcast to the output [%lld,%lld]", shp(c).s,
                                (long long)M, (long long)N);
    }
    if (c && c->ndim == 2 && c->shape[0] != 1 && rows)
        return pd__node_err(g, n, PD_ERR_SHAPE, "C %s must broadcast along A %s's rows", shp(c).s, shp(a).s);
    int64_t y[PD_MAX_DIMS] = {M, N};
    for (int d = 0; rows && d < a->ndim; d++) y[d] = d < a->ndim - 1 ? a->shape[d] : N;
    return set_out(g, n, 0, a->dtype, rows ? a->ndim : 2, y);
}

double pd__flops_Gemm(const pd_graph *g, const pd__node *n) {
    const pd__tensor *a = cin(g, n, 0), *y = cout(g, n, 0);
    if (!a || !y || a->ndim < 2 || y->ndim < 2) return 0;
    int64_t K = a->shape[pd__attr_i(n, "transA", 0) != 0 ? 0 : a->ndim - 1];
    return 2.0 * dnumel(y) * (double)K + (cin(g, n, 2) ? dnumel(y) : 0);
}

/* MatMul as numpy: 1-D operands are promoted (and the dim removed again),
 * batch dims broadcast. */
typedef struct pd__mm {
    int64_t M, N, K, Kb;
    double batch;             /* product of the batch dims (for FLOPs; may exceed an int64) */
    int ndim;                 /* output rank */
    int64_t out[PD_MAX_DIMS]; /* output shape */
    bool bcast_ok;
} pd__mm;

static void mm_dims(const pd__tensor *a, const pd__tensor *b, pd__mm *r) {
    int ra = a->ndim, rb = b->ndim;
    r->M = ra >= 2 ? a->shape[ra - 2] : 1;
    r->K = a->shape[ra - 1];
    r->Kb = rb >= 2 ? b->shape[rb - 2] : b->shape[0];
    r->N = rb >= 2 ? b->shape[rb - 1] : 1;
    int ba = ra > 2 ? ra - 2 : 0, bb = rb > 2 ? rb - 2 : 0, nb = ba > bb ? ba : bb;
    r->bcast_ok = true;
    r->batch = 1;
    r->ndim = 0;
    for (int i = 0; i < nb; i++) {
        int ia = i - (nb - ba), ib = i - (nb - bb);
        int64_t da = ia >= 0 ? a->shape[ia] : 1, db = ib >= 0 ? b->shape[ib] : 1;
        if (da != db && da != 1 && db != 1) r->bcast_ok = false;
        int64_t d = da == 1 ? db : da;
        r->out[r->ndim++] = d;
        r->batch *= (double)d;
    }
    if (ra >= 2) r->out[r->ndim++] = r->M;
    if (rb >= 2) r->out[r->ndim++] = r->N;
}

pd_status pd__shape_MatMul(pd_graph *g, pd__node *n) {
    pd__tensor *a, *b;
    PD_TRY(need(g, n, 0, "A", &a));
    PD_TRY(need(g, n, 1, "B", &b));
    PD_TRY(need_float_half(g, n, a, "A"));
    PD_TRY(need_dtype(g, n, b, a->dtype, "B"));
    if (a->ndim < 1 || b->ndim < 1)
        return pd__node_err(g, n, PD_ERR_SHAPE, "A %s and B %s must have rank >= 1", shp(a).s, shp(b).s);
    pd__mm r;
    mm_dims(a, b, &r);
    if (r.K != r.Kb)
        return pd__node_err(g, n, PD_ERR_SHAPE, "A %s and B %s: inner dims %lld and %lld differ", shp(a).s, shp(b).s,
                            (long long)r.K, (long long)r.Kb);
    if (!r.bcast_ok)
        return pd__node_err(g, n, PD_ERR_SHAPE, "A %s and B %s: batch dims do not broadcast", shp(a).s, shp(b).s);
    return set_out(g, n, 0, a->dtype, r.ndim, r.out);
}

double pd__flops_MatMul(const pd_graph *g, const pd__node *n) {
    const pd__tensor *a = cin(g, n, 0), *b = cin(g, n, 1);
    if (!a || !b || a->ndim < 1 || b->ndim < 1) return 0;
    pd__mm r;
    mm_dims(a, b, &r);
    return 2.0 * r.batch * (double)r.M * (double)r.N * (double)r.K;
}

/* ---- Conv, ConvTranspose ------------------------------------------------------------ */

/* Shared checks of X, W, B; *wch is W's dim that must equal C/group (Conv: 1, ConvTranspose: 0). */
static pd_status conv_inputs(pd_graph *g, pd__node *n, pd__tensor **x, pd__tensor **w, int64_t *group) {
    pd__tensor *b = pd__in(g, n, 2);
    PD_TRY(need(g, n, 0, "X", x));
    PD_TRY(need(g, n, 1, "W", w));
    /* float16 for Conv only: ConvTranspose has no float32 detour */
    PD_TRY(n->op == PD_OP_CONV ? need_float_half(g, n, *x, "X") : need_float(g, n, *x, "X"));
    PD_TRY(need_dtype(g, n, *w, (*x)->dtype, "W"));
    if (b) PD_TRY(need_dtype(g, n, b, (*x)->dtype, "B"));
    if ((*x)->ndim < 3)
        return pd__node_err(g, n, PD_ERR_SHAPE, "X %s must be (N, C, D1, ...)", shp(*x).s);
    if ((*w)->ndim != (*x)->ndim)
        return pd__node_err(g, n, PD_ERR_SHAPE, "W %s must have the rank of X %s", shp(*w).s, shp(*x).s);
    *group = pd__attr_i(n, "group", 1);
    if (*group < 1 || (*x)->shape[1] % *group != 0)
        return pd__node_err(g, n, PD_ERR_SHAPE, "X %s has %lld channels, not divisible by group=%lld", shp(*x).s,
                            (long long)(*x)->shape[1], (long long)*group);
    return PD_OK;
}

static pd_status conv_bias(pd_graph *g, pd__node *n, int64_t M) {
    pd__tensor *b = pd__in(g, n, 2);
    if (b && (b->ndim != 1 || b->shape[0] != M))
        return pd__node_err(g, n, PD_ERR_SHAPE, "B %s must be [%lld], one per output channel", shp(b).s, (long long)M);
    return PD_OK;
}

pd_status pd__shape_Conv(pd_graph *g, pd__node *n) {
    pd__tensor *x, *w;
    int64_t group = 1; /* set by conv_inputs; gcc cannot always see it */
    PD_TRY(conv_inputs(g, n, &x, &w, &group));
    int64_t C = x->shape[1], M = w->shape[0];
    if (w->shape[1] * group != C || M % group != 0)
        return pd__node_err(g, n, PD_ERR_SHAPE,
                            "X %s with group=%lld needs W [M, %lld, k...] with M divisible by the group; W is %s",
                            shp(x).s, (long long)group, (long long)(C / group), shp(w).s);
    PD_TRY(conv_bias(g, n, M));
    pd__win win;
    pd_status st = pd__win_make(n, PD_WIN_CONV, x->ndim, x->shape, w->shape + 2, &win);
    if (st != PD_OK) return node_prefix(g, n, st);
    int64_t y[PD_MAX_DIMS] = {x->shape[0], M};
    for (int i = 0; i < win.nsp; i++) y[i + 2] = win.out[i];
    return set_out(g, n, 0, x->dtype, x->ndim, y);
}

double pd__flops_Conv(const pd_graph *g, const pd__node *n) {
    const pd__tensor *w = cin(g, n, 1), *y = cout(g, n, 0);
    if (!w || !y || w->ndim < 3) return 0;
    /* each output element: (C/group) * prod(kernel) multiply-adds, plus the bias */
    return 2.0 * dnumel(y) * dprod(w->ndim - 1, w->shape + 1) + (cin(g, n, 2) ? dnumel(y) : 0);
}

pd_status pd__shape_ConvTranspose(pd_graph *g, pd__node *n) {
    pd__tensor *x, *w;
    int64_t group = 1; /* set by conv_inputs; gcc cannot always see it */
    PD_TRY(conv_inputs(g, n, &x, &w, &group));
    int64_t C = x->shape[1], M = w->shape[1] * group;
    if (w->shape[0] != C)
        return pd__node_err(g, n, PD_ERR_SHAPE, "X %s has %lld channels but W %s is [C, M/group, k...] with C=%lld",
                            shp(x).s, (long long)C, shp(w).s, (long long)w->shape[0]);
    PD_TRY(conv_bias(g, n, M));
    pd__win win;
    pd_status st = pd__win_make(n, PD_WIN_CONVT, x->ndim, x->shape, w->shape + 2, &win);
    if (st != PD_OK) return node_prefix(g, n, st);
    int64_t y[PD_MAX_DIMS] = {x->shape[0], M};
    for (int i = 0; i < win.nsp; i++) y[i + 2] = win.out[i];
    return set_out(g, n, 0, x->dtype, x->ndim, y);
}

double pd__flops_ConvTranspose(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = cin(g, n, 0), *w = cin(g, n, 1), *y = cout(g, n, 0);
    if (!x || !w || !y || w->ndim < 3) return 0;
    /* each input element scatters (M/group) * prod(kernel) multiply-adds */
    return 2.0 * dnumel(x) * dprod(w->ndim - 1, w->shape + 1) + (cin(g, n, 2) ? dnumel(y) : 0);
}

/* ---- MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv ---------------------------------- */
/* Integer products of (a - a_zero_point)(b - b_zero_point), summed in int32;
 * the QLinear forms then requantize with the three scales. Zero points and
 * scales hold one value or one per row of A / column of B / output channel. */

static bool is_q8(pd_dtype t) { return t == PD_INT8 || t == PD_UINT8; }

static pd_status need_q8(pd_graph *g, pd__node *n, const pd__tensor *t, const char *what) {
    if (!is_q8(t->dtype))
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "%s '%s' has dtype %s (int8 and uint8 are supported)", what,
                            t->name, pd_dtype_name(t->dtype));
    return PD_OK;
}

/* Optional input i: a zero point of `of`'s dtype or a float scale (of NULL), holding 1 or `per` values. */
static pd_status need_qparam(pd_graph *g, pd__node *n, int i, const char *what, const pd__tensor *of, int64_t per,
                             bool required) {
    pd__tensor *t = pd__in(g, n, i);
    if (!t) return required ? pd__node_err(g, n, PD_ERR_INVALID, "input %d (%s) is missing", i, what) : PD_OK;
    if (t->ndim < 0) return pd__node_err(g, n, PD_ERR_SHAPE, "%s '%s' has no known shape", what, t->name);
    if (of) PD_TRY(need_dtype(g, n, t, of->dtype, what));
    else if (t->dtype != PD_FLOAT && t->dtype != PD_DOUBLE && t->dtype != PD_FLOAT16)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "%s '%s' has dtype %s (float, double and float16 are supported)",
                            what, t->name, pd_dtype_name(t->dtype));
    if (t->numel != 1 && (per < 0 || t->numel != per))
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "%s '%s' %s: one value%s is supported", what, t->name,
                            shp(t).s, per < 0 ? "" : " or one per row / column / channel");
    return PD_OK;
}

/* A (..., M, K) times B (..., K, N) as MatMul; *r gets the dims. */
static pd_status qmm_shape(pd_graph *g, pd__node *n, const pd__tensor *a, const pd__tensor *b, pd__mm *r) {
    if (a->ndim < 1 || b->ndim < 1)
        return pd__node_err(g, n, PD_ERR_SHAPE, "A %s and B %s must have rank >= 1", shp(a).s, shp(b).s);
    mm_dims(a, b, r);
    if (r->K != r->Kb)
        return pd__node_err(g, n, PD_ERR_SHAPE, "A %s and B %s: inner dims %lld and %lld differ", shp(a).s, shp(b).s,
                            (long long)r->K, (long long)r->Kb);
    if (!r->bcast_ok)
        return pd__node_err(g, n, PD_ERR_SHAPE, "A %s and B %s: batch dims do not broadcast", shp(a).s, shp(b).s);
    return PD_OK;
}

pd_status pd__shape_MatMulInteger(pd_graph *g, pd__node *n) {
    pd__tensor *a, *b;
    PD_TRY(need(g, n, 0, "A", &a));
    PD_TRY(need(g, n, 1, "B", &b));
    PD_TRY(need_q8(g, n, a, "A"));
    PD_TRY(need_q8(g, n, b, "B"));
    pd__mm r;
    PD_TRY(qmm_shape(g, n, a, b, &r));
    PD_TRY(need_qparam(g, n, 2, "a_zero_point", a, r.M, false));
    PD_TRY(need_qparam(g, n, 3, "b_zero_point", b, r.N, false));
    return set_out(g, n, 0, PD_INT32, r.ndim, r.out);
}

double pd__flops_MatMulInteger(const pd_graph *g, const pd__node *n) { return pd__flops_MatMul(g, n); }

pd_status pd__shape_QLinearMatMul(pd_graph *g, pd__node *n) {
    pd__tensor *a, *b, *yz = pd__in(g, n, 7);
    PD_TRY(need(g, n, 0, "a", &a));
    PD_TRY(need(g, n, 3, "b", &b));
    PD_TRY(need_q8(g, n, a, "a"));
    PD_TRY(need_q8(g, n, b, "b"));
    pd__mm r;
    PD_TRY(qmm_shape(g, n, a, b, &r));
    PD_TRY(need_qparam(g, n, 1, "a_scale", NULL, r.M, true));
    PD_TRY(need_qparam(g, n, 2, "a_zero_point", a, r.M, false));
    PD_TRY(need_qparam(g, n, 4, "b_scale", NULL, r.N, true));
    PD_TRY(need_qparam(g, n, 5, "b_zero_point", b, r.N, false));
    PD_TRY(need_qparam(g, n, 6, "y_scale", NULL, -1, true));
    if (yz) PD_TRY(need_q8(g, n, yz, "y_zero_point"));
    PD_TRY(need_qparam(g, n, 7, "y_zero_point", yz, -1, false));
    return set_out(g, n, 0, yz ? yz->dtype : a->dtype, r.ndim, r.out);
}

double pd__flops_QLinearMatMul(const pd_graph *g, const pd__node *n) {
    const pd__tensor *a = cin(g, n, 0), *b = cin(g, n, 3);
    if (!a || !b || a->ndim < 1 || b->ndim < 1) return 0;
    pd__mm r;
    mm_dims(a, b, &r);
    return 2.0 * r.batch * (double)r.M * (double)r.N * (double)r.K;
}

/* X (N, C, D...) and W (M, C/group, k...) of int8 / uint8, geometry as Conv. */
static pd_status qconv_shape(pd_graph *g, pd__node *n, int xi, int wi, pd_dtype ydt) {
    pd__tensor *x, *w;
    PD_TRY(need(g, n, xi, "x", &x));
    PD_TRY(need(g, n, wi, "w", &w));
    PD_TRY(need_q8(g, n, x, "x"));
    PD_TRY(need_q8(g, n, w, "w"));
    if (x->ndim < 3 || w->ndim != x->ndim)
        return pd__node_err(g, n, PD_ERR_SHAPE, "x %s must be (N, C, D1, ...) and w %s of its rank", shp(x).s,
                            shp(w).s);
    int64_t group = pd__attr_i(n, "group", 1), C = x->shape[1], M = w->shape[0];
    if (group < 1 || C % group != 0 || w->shape[1] * group != C || M % group != 0)
        return pd__node_err(g, n, PD_ERR_SHAPE, "x %s with group=%lld needs w [M, %lld, k...] with M divisible by the "
                            "group; w is %s", shp(x).s, (long long)group, (long long)(group >= 1 ? C / group : C),
                            shp(w).s);
    pd__win win;
    pd_status st = pd__win_make(n, PD_WIN_CONV, x->ndim, x->shape, w->shape + 2, &win);
    if (st != PD_OK) return node_prefix(g, n, st);
    int64_t y[PD_MAX_DIMS] = {x->shape[0], M};
    for (int i = 0; i < win.nsp; i++) y[i + 2] = win.out[i];
    return set_out(g, n, 0, ydt == PD_UNDEFINED ? x->dtype : ydt, x->ndim, y);
}

pd_status pd__shape_ConvInteger(pd_graph *g, pd__node *n) {
    PD_TRY(qconv_shape(g, n, 0, 1, PD_INT32));
    const pd__tensor *x = cin(g, n, 0), *w = cin(g, n, 1);
    PD_TRY(need_qparam(g, n, 2, "x_zero_point", x, -2, false));
    return need_qparam(g, n, 3, "w_zero_point", w, w->shape[0], false);
}

double pd__flops_ConvInteger(const pd_graph *g, const pd__node *n) { return pd__flops_Conv(g, n); }

pd_status pd__shape_QLinearConv(pd_graph *g, pd__node *n) {
    pd__tensor *yz = pd__in(g, n, 7), *b = pd__in(g, n, 8);
    if (yz) PD_TRY(need_q8(g, n, yz, "y_zero_point"));
    PD_TRY(qconv_shape(g, n, 0, 3, yz ? yz->dtype : PD_UNDEFINED));
    const pd__tensor *x = cin(g, n, 0), *w = cin(g, n, 3);
    int64_t M = w->shape[0];
    PD_TRY(need_qparam(g, n, 1, "x_scale", NULL, -1, true));
    PD_TRY(need_qparam(g, n, 2, "x_zero_point", x, -1, false));
    PD_TRY(need_qparam(g, n, 4, "w_scale", NULL, M, true));
    PD_TRY(need_qparam(g, n, 5, "w_zero_point", w, M, false));
    PD_TRY(need_qparam(g, n, 6, "y_scale", NULL, -1, true));
    PD_TRY(need_qparam(g, n, 7, "y_zero_point", yz, -1, false));
    if (b) {
        PD_TRY(need_dtype(g, n, b, PD_INT32, "B"));
        if (b->ndim != 1 || b->shape[0] != M)
            return pd__node_err(g, n, PD_ERR_SHAPE, "B %s must be [%lld], one per output channel", shp(b).s,
                                (long long)M);
    }
    return PD_OK;
}

double pd__flops_QLinearConv(const pd_graph *g, const pd__node *n) {
    const pd__tensor *w = cin(g, n, 3), *y = cout(g, n, 0);
    if (!w || !y || w->ndim < 3) return 0;
    return 2.0 * dnumel(y) * dprod(w->ndim - 1, w->shape + 1) + 3 * dnumel(y);
}

/* ---- normalizations ------------------------------------------------------------------- */

int pd__bn_training(const pd__node *n) {
    if (n->opset >= 14) return pd__attr_i(n, "training_mode", 0) != 0;
    if (n->opset < 7) return pd__attr_i(n, "is_test", 0) == 0;
    for (int i = 1; i < n->nout; i++)
        if (n->out[i] >= 0) return 1;
    return 0;
}

pd_status pd__shape_BatchNormalization(pd_graph *g, pd__node *n) {
    static const char *names[5] = {"X", "scale", "B", "input_mean", "input_var"};
    pd__tensor *t[5];
    for (int i = 0; i < 5; i++) PD_TRY(need(g, n, i, names[i], &t[i]));
    pd__tensor *x = t[0];
    PD_TRY(need_float(g, n, x, "X"));
    if (x->ndim < 2) return pd__node_err(g, n, PD_ERR_SHAPE, "X %s must be (N, C, ...)", shp(x).s);
    /* spatial=0 (opsets 7-8): statistics per (C, D1, ...) feature rather than per channel */
    bool per_feature = n->opset < 9 && pd__attr_i(n, "spatial", 1) == 0;
    int pnd = per_feature ? x->ndim - 1 : 1;
    for (int i = 1; i < 5; i++) {
        /* opset 15 lets the parameters have their own float types; they are read as double */
        pd_dtype pt = t[i]->dtype;
        if (!is_float(pt) && pt != PD_FLOAT16 && pt != PD_BFLOAT16)
            return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "%s '%s' has dtype %s", names[i], t[i]->name,
                                pd_dtype_name(pt));
        bool ok = t[i]->ndim == pnd && memcmp(t[i]->shape, x->shape + 1, sizeof(int64_t) * (size_t)pnd) == 0;
        if (!ok)
            return pd__node_err(g, n, PD_ERR_SHAPE, "%s %s must be %s for X %s", names[i], shp(t[i]).s,
                                shpv(pnd, x->shape + 1).s, shp(x).s);
    }
    PD_TRY(set_out(g, n, 0, x->dtype, x->ndim, x->shape));
    if (n->opset >= 14) {
        PD_TRY(set_out(g, n, 1, t[3]->dtype, pnd, x->shape + 1));
        PD_TRY(set_out(g, n, 2, t[4]->dtype, pnd, x->shape + 1));
    } else {
        for (int i = 1; i < 5; i++) PD_TRY(set_out(g, n, i, x->dtype, pnd, x->shape + 1));
    }
    return PD_OK;
}

double pd__flops_BatchNormalization(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = cin(g, n, 0);
    if (!x) return 0;
    /* y = x*a + b per element; training adds the two statistics passes */
    return (pd__bn_training(n) ? 6 : 2) * dnumel(x);
}

pd_status pd__shape_LayerNormalization(pd_graph *g, pd__node *n) {
    pd__tensor *x, *scale, *b = pd__in(g, n, 2);
    PD_TRY(need(g, n, 0, "X", &x));
    PD_TRY(need(g, n, 1, "Scale", &scale));
    PD_TRY(need_float(g, n, x, "X"));
    PD_TRY(need_dtype(g, n, scale, x->dtype, "Scale"));
    if (b) PD_TRY(need_dtype(g, n, b, x->dtype, "B"));
    int r = x->ndim, axis;
    if (r < 1) return pd__node_err(g, n, PD_ERR_SHAPE, "X %s must have rank >= 1", shp(x).s);
    int64_t a = pd__attr_i(n, "axis", -1);
    if (!norm_axis(a, r, r - 1, &axis))
        return pd__node_err(g, n, PD_ERR_SHAPE, "axis %lld is out of range for X %s", (long long)a, shp(x).s);
    for (int j = 1; j < 3; j++) {
        pd__tensor *p = j == 1 ? scale : b;
        if (!p) continue;
        bool ok = p->ndim <= r - axis;
        for (int i = 0; ok && i < p->ndim; i++) {
            int64_t d = p->shape[p->ndim - 1 - i];
            ok = d == 1 || d == x->shape[r - 1 - i];
        }
        if (!ok)
            return pd__node_err(g, n, PD_ERR_SHAPE, "%s %s does not broadcast to the normalized shape %s of X %s",
                                j == 1 ? "Scale" : "B", shp(p).s, shpv(r - axis, x->shape + axis).s, shp(x).s);
    }
    int64_t st = pd__attr_i(n, "stash_type", PD_FLOAT);
    if (st != PD_FLOAT && st != PD_DOUBLE)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "stash_type %lld (float and double are supported)",
                            (long long)st);
    int64_t ms[PD_MAX_DIMS];
    for (int i = 0; i < r; i++) ms[i] = i < axis ? x->shape[i] : 1;
    PD_TRY(set_out(g, n, 0, x->dtype, r, x->shape));
    PD_TRY(set_out(g, n, 1, (pd_dtype)st, r, ms));
    return set_out(g, n, 2, (pd_dtype)st, r, ms);
}

double pd__flops_LayerNormalization(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = cin(g, n, 0);
    /* mean, variance, normalize, scale and shift */
    return x ? 8 * dnumel(x) : 0;
}

/* stash_type (LayerNormalization, GroupNormalization 21, RMSNormalization):
 * the precision of the statistics; the kernels keep them in double, at
 * least as precise as any the spec allows. */
static pd_status stash_ok(pd_graph *g, pd__node *n) {
    int64_t st = pd__attr_i(n, "stash_type", PD_FLOAT);
    if (st != PD_FLOAT && st != PD_DOUBLE && st != PD_FLOAT16 && st != PD_BFLOAT16)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "stash_type %lld (float, double, float16 and bfloat16 are supported)",
                            (long long)st);
    return PD_OK;
}

/* A per-channel (or per-group) parameter: a vector of `len` values of X's dtype. */
static pd_status need_vec(pd_graph *g, pd__node *n, int i, const char *what, const pd__tensor *x, int64_t len,
                          const char *of) {
    pd__tensor *t;
    PD_TRY(need(g, n, i, what, &t));
    PD_TRY(need_dtype(g, n, t, x->dtype, what));
    if (t->ndim != 1 || t->shape[0] != len)
        return pd__node_err(g, n, PD_ERR_SHAPE, "%s %s must be [%lld] (%s) for X %s", what, shp(t).s, (long long)len,
                            of, shp(x).s);
    return PD_OK;
}

pd_status pd__shape_InstanceNormalization(pd_graph *g, pd__node *n) {
    pd__tensor *x;
    PD_TRY(need(g, n, 0, "input", &x));
    PD_TRY(need_float(g, n, x, "input"));
    if (x->ndim < 3) return pd__node_err(g, n, PD_ERR_SHAPE, "input %s must be (N, C, D1, ...)", shp(x).s);
    PD_TRY(need_vec(g, n, 1, "scale", x, x->shape[1], "C"));
    PD_TRY(need_vec(g, n, 2, "B", x, x->shape[1], "C"));
    return set_out(g, n, 0, x->dtype, x->ndim, x->shape);
}

double pd__flops_InstanceNormalization(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = cin(g, n, 0);
    return x ? 8 * dnumel(x) : 0;
}

/* Opset 18: scale and bias per group; from 21: per channel (and stash_type). */
pd_status pd__shape_GroupNormalization(pd_graph *g, pd__node *n) {
    pd__tensor *x;
    PD_TRY(need(g, n, 0, "X", &x));
    PD_TRY(need_float(g, n, x, "X"));
    if (x->ndim < 2) return pd__node_err(g, n, PD_ERR_SHAPE, "X %s must be (N, C, ...)", shp(x).s);
    if (!pd__attr_get(n, "num_groups"))
        return pd__node_err(g, n, PD_ERR_INVALID, "attribute num_groups is missing");
    int64_t G = pd__attr_i(n, "num_groups", 0), C = x->shape[1];
    if (G < 1 || C % G != 0)
        return pd__node_err(g, n, PD_ERR_SHAPE, "num_groups %lld does not divide the %lld channels of X %s",
                            (long long)G, (long long)C, shp(x).s);
    bool per_group = n->opset < 21;
    PD_TRY(need_vec(g, n, 1, "scale", x, per_group ? G : C, per_group ? "num_groups" : "C"));
    PD_TRY(need_vec(g, n, 2, "bias", x, per_group ? G : C, per_group ? "num_groups" : "C"));
    if (!per_group) PD_TRY(stash_ok(g, n));
    return set_out(g, n, 0, x->dtype, x->ndim, x->shape);
}

double pd__flops_GroupNormalization(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = cin(g, n, 0);
    return x ? 8 * dnumel(x) : 0;
}

/* Y = X / sqrt(mean(X^2 over axis..r-1) + epsilon) * scale, scale
 * broadcastable to the normalized shape (as LayerNormalization's). */
pd_status pd__shape_RMSNormalization(pd_graph *g, pd__node *n) {
    pd__tensor *x, *scale;
    PD_TRY(need(g, n, 0, "X", &x));
    PD_TRY(need(g, n, 1, "scale", &scale));
    PD_TRY(need_float(g, n, x, "X"));
    PD_TRY(need_dtype(g, n, scale, x->dtype, "scale"));
    int r = x->ndim, axis;
    if (r < 1) return pd__node_err(g, n, PD_ERR_SHAPE, "X %s must have rank >= 1", shp(x).s);
    int64_t a = pd__attr_i(n, "axis", -1);
    if (!norm_axis(a, r, r - 1, &axis))
        return pd__node_err(g, n, PD_ERR_SHAPE, "axis %lld is out of range for X %s", (long long)a, shp(x).s);
    bool ok = scale->ndim <= r - axis;
    for (int i = 0; ok && i < scale->ndim; i++) {
        int64_t d = scale->shape[scale->ndim - 1 - i];
        ok = d == 1 || d == x->shape[r - 1 - i];
    }
    if (!ok)
        return pd__node_err(g, n, PD_ERR_SHAPE, "scale %s does not broadcast to the normalized shape %s of X %s",
                            shp(scale).s, shpv(r - axis, x->shape + axis).s, shp(x).s);
    PD_TRY(stash_ok(g, n));
    return set_out(g, n, 0, x->dtype, r, x->shape);
}

double pd__flops_RMSNormalization(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = cin(g, n, 0);
    /* square and sum, normalize, scale */
    return x ? 4 * dnumel(x) : 0;
}

/* y = x / ||x||_p along axis (p 1 or 2, as the spec). */
pd_status pd__shape_LpNormalization(pd_graph *g, pd__node *n) {
    pd__tensor *x;
    PD_TRY(need(g, n, 0, "input", &x));
    PD_TRY(need_float(g, n, x, "input"));
    int axis = 0;
    int64_t a = pd__attr_i(n, "axis", -1), p = pd__attr_i(n, "p", 2);
    if (x->ndim < 1 || !norm_axis(a, x->ndim, x->ndim - 1, &axis))
        return pd__node_err(g, n, PD_ERR_SHAPE, "axis %lld is out of range for input %s", (long long)a, shp(x).s);
    if (p != 1 && p != 2)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "attribute p is %lld (the spec allows 1 and 2)", (long long)p);
    return set_out(g, n, 0, x->dtype, x->ndim, x->shape);
}

double pd__flops_LpNormalization(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = cin(g, n, 0);
    return x ? 3 * dnumel(x) : 0;
}

int pd__mvn_axes(const pd__node *n, int ndim, bool *reduced) {
    static const int64_t def[3] = {0, 2, 3};
    const int64_t *v;
    int c = pd__attr_ints(n, "axes", &v);
    if (!pd__attr_get(n, "axes")) v = def, c = 3;
    for (int i = 0; i < ndim; i++) reduced[i] = false;
    for (int i = 0; i < c; i++) {
        int a;
        if (!norm_axis(v[i], ndim, ndim - 1, &a) || reduced[a]) return -1 - i;
        reduced[a] = true;
    }
    return c;
}

pd_status pd__shape_MeanVarianceNormalization(pd_graph *g, pd__node *n) {
    pd__tensor *x;
    PD_TRY(need(g, n, 0, "X", &x));
    PD_TRY(need_float(g, n, x, "X"));
    bool red[PD_MAX_DIMS];
    int c = pd__mvn_axes(n, x->ndim, red);
    if (c < 0) {
        const int64_t *v;
        pd__attr_ints(n, "axes", &v);
        return pd__node_err(g, n, PD_ERR_SHAPE, "axes entry %d%s is out of range or repeated for X %s", -1 - c,
                            pd__attr_get(n, "axes") ? "" : " of the default [0,2,3]", shp(x).s);
    }
    return set_out(g, n, 0, x->dtype, x->ndim, x->shape);
}

double pd__flops_MeanVarianceNormalization(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = cin(g, n, 0);
    return x ? 6 * dnumel(x) : 0;
}

pd_status pd__shape_LRN(pd_graph *g, pd__node *n) {
    pd__tensor *x;
    PD_TRY(need(g, n, 0, "X", &x));
    PD_TRY(need_float(g, n, x, "X"));
    if (x->ndim < 2) return pd__node_err(g, n, PD_ERR_SHAPE, "X %s must be (N, C, ...)", shp(x).s);
    int64_t size = pd__attr_i(n, "size", 0);
    if (size < 1) return pd__node_err(g, n, PD_ERR_SHAPE, "attribute size must be >= 1 (is %lld)", (long long)size);
    return set_out(g, n, 0, x->dtype, x->ndim, x->shape);
}

double pd__flops_LRN(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = cin(g, n, 0);
    return x ? dnumel(x) * (2.0 * (double)pd__attr_i(n, "size", 1) + 4) : 0;
}

/* ---- pools ---------------------------------------------------------------------------------- */

static pd_status pool_shape(pd_graph *g, pd__node *n, bool any_dtype) {
    pd__tensor *x;
    PD_TRY(need(g, n, 0, "X", &x));
    if (any_dtype) {
        pd_dtype t = x->dtype;
        if (!is_float(t) && t != PD_UINT8 && t != PD_INT8 && t != PD_FLOAT16)
            return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "X '%s' has dtype %s", x->name, pd_dtype_name(t));
    } else {
        PD_TRY(need_float(g, n, x, "X"));
    }
    if (x->ndim < 3) return pd__node_err(g, n, PD_ERR_SHAPE, "X %s must be (N, C, D1, ...)", shp(x).s);
    pd__win win;
    pd_status st = pd__win_make(n, PD_WIN_POOL, x->ndim, x->shape, NULL, &win);
    if (st != PD_OK) return node_prefix(g, n, st);
    int64_t y[PD_MAX_DIMS] = {x->shape[0], x->shape[1]};
    for (int i = 0; i < win.nsp; i++) y[i + 2] = win.out[i];
    PD_TRY(set_out(g, n, 0, x->dtype, x->ndim, y));
    return set_out(g, n, 1, PD_INT64, x->ndim, y);
}

static double pool_flops(const pd_graph *g, const pd__node *n) {
    const pd__tensor *y = cout(g, n, 0);
    const int64_t *k;
    int nk = pd__attr_ints(n, "kernel_shape", &k);
    return y ? dnumel(y) * dprod(nk, k) : 0;
}

pd_status pd__shape_MaxPool(pd_graph *g, pd__node *n) {
    int64_t so = pd__attr_i(n, "storage_order", 0);
    if (so != 0 && so != 1)
        return pd__node_err(g, n, PD_ERR_SHAPE, "storage_order must be 0 or 1 (is %lld)", (long long)so);
    return pool_shape(g, n, true);
}
double pd__flops_MaxPool(const pd_graph *g, const pd__node *n) { return pool_flops(g, n); }

pd_status pd__shape_AveragePool(pd_graph *g, pd__node *n) {
    if (n->nout > 1 && n->out[1] >= 0)
        return pd__node_err(g, n, PD_ERR_SHAPE, "AveragePool has one output, the model gives it %d", n->nout);
    return pool_shape(g, n, false);
}
double pd__flops_AveragePool(const pd_graph *g, const pd__node *n) { return pool_flops(g, n); }

pd_status pd__maxunpool_shapes(const pd__node *n, pd_tensor *const *in, int64_t *frame, int64_t *out) {
    const pd_tensor *X = in[0], *S = n->nin > 2 ? in[2] : NULL;
    int r = X->ndim, nsp = r - 2;
    if (r < 3) return pd__err(PD_ERR_SHAPE, "X %s must be (N, C, D1, ...)", shpv(r, X->shape).s);
    const int64_t *k, *st, *pads;
    int nk = pd__attr_ints(n, "kernel_shape", &k), ns = pd__attr_ints(n, "strides", &st),
        np = pd__attr_ints(n, "pads", &pads);
    if (nk != nsp) return pd__err(PD_ERR_SHAPE, "kernel_shape has %d values for %d spatial dims", nk, nsp);
    if (ns != 0 && ns != nsp) return pd__err(PD_ERR_SHAPE, "strides has %d values for %d spatial dims", ns, nsp);
    if (np != 0 && np != 2 * nsp) return pd__err(PD_ERR_SHAPE, "pads has %d values for %d spatial dims", np, nsp);
    frame[0] = X->shape[0];
    frame[1] = X->shape[1];
    for (int i = 0; i < nsp; i++) {
        int64_t s = ns ? st[i] : 1, pb = np ? pads[i] : 0, pe = np ? pads[nsp + i] : 0;
        if (k[i] < 1 || s < 1 || pb < 0 || pe < 0)
            return pd__err(PD_ERR_SHAPE, "kernel %lld, stride %lld, pads %lld and %lld at spatial dim %d",
                           (long long)k[i], (long long)s, (long long)pb, (long long)pe, i);
        frame[i + 2] = (X->shape[i + 2] - 1) * s - pb - pe + k[i];
        if (frame[i + 2] < 0) return pd__err(PD_ERR_SHAPE, "spatial dim %d of the output would be negative", i);
    }
    memcpy(out, frame, sizeof(int64_t) * (size_t)r);
    if (S == NULL) return PD_OK;
    if (S->dtype != PD_INT64 || S->ndim != 1 || S->shape[0] != r)
        return pd__err(PD_ERR_SHAPE, "output_shape must be int64 of %d values", r);
    if (S->data == NULL) return pd__err(PD_ERR_UNSUPPORTED, "output_shape must be constant");
    for (int d = 0; d < r; d++) {
        out[d] = ((const int64_t *)S->data)[d];
        if (out[d] < frame[d]) /* the reference places the frame in the output: it must fit */
            return pd__err(PD_ERR_SHAPE, "output_shape %s is smaller than the unpooled %s", shpv(r, out).s,
                           shpv(r, frame).s);
    }
    return PD_OK;
}

pd_status pd__shape_MaxUnpool(pd_graph *g, pd__node *n) {
    pd__tensor *x, *ind;
    PD_TRY(need(g, n, 0, "X", &x));
    PD_TRY(need_float(g, n, x, "X"));
    PD_TRY(need(g, n, 1, "I", &ind));
    if (ind->dtype != PD_INT64 || ind->ndim != x->ndim || memcmp(ind->shape, x->shape, sizeof(int64_t) * (size_t)x->ndim))
        return pd__node_err(g, n, PD_ERR_SHAPE, "I must be int64 of X's shape %s, is %s %s", shp(x).s,
                            pd_dtype_name(ind->dtype), shp(ind).s);
    pd_tensor v[3], *vp[3] = {NULL, NULL, NULL};
    for (int i = 0; i < n->nin && i < 3; i++) {
        pd__tensor *t = pd__in(g, n, i);
        if (t == NULL) continue;
        v[i] = pd__view(t);
        if (!pd__foldable_input(t)) v[i].data = NULL;
        vp[i] = &v[i];
    }
    int64_t frame[PD_MAX_DIMS], y[PD_MAX_DIMS];
    pd_status st = pd__maxunpool_shapes(n, vp, frame, y);
    if (st != PD_OK) return node_prefix(g, n, st);
    return set_out(g, n, 0, x->dtype, x->ndim, y);
}

double pd__flops_MaxUnpool(const pd_graph *g, const pd__node *n) {
    (void)g, (void)n;
    return 0;
}

pd_status pd__shape_GlobalAveragePool(pd_graph *g, pd__node *n) {
    pd__tensor *x;
    PD_TRY(need(g, n, 0, "X", &x));
    PD_TRY(need_float(g, n, x, "X"));
    if (x->ndim < 2) return pd__node_err(g, n, PD_ERR_SHAPE, "X %s must be (N, C, ...)", shp(x).s);
    int64_t y[PD_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) y[i] = i < 2 ? x->shape[i] : 1;
    return set_out(g, n, 0, x->dtype, x->ndim, y);
}

double pd__flops_GlobalAveragePool(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = cin(g, n, 0);
    return x ? dnumel(x) : 0;
}

pd_status pd__shape_GlobalMaxPool(pd_graph *g, pd__node *n) { return pd__shape_GlobalAveragePool(g, n); }

double pd__flops_GlobalMaxPool(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = cin(g, n, 0);
    return x ? dnumel(x) : 0;
}

double pd__lppool_p(const pd__node *n) {
    const pd__attr *a = pd__attr_get(n, "p");
    if (a && a->type == PD_A_FLOAT) return a->f; /* opset 1: a float */
    return (double)pd__attr_i(n, "p", 2);
}

pd_status pd__shape_LpPool(pd_graph *g, pd__node *n) {
    double p = pd__lppool_p(n);
    if (!(p >= 1 && p <= 64))
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "attribute p is %g (1 to 64 are supported)", p);
    if (n->nout > 1 && n->out[1] >= 0)
        return pd__node_err(g, n, PD_ERR_SHAPE, "LpPool has one output, the model gives it %d", n->nout);
    return pool_shape(g, n, false);
}

double pd__flops_LpPool(const pd_graph *g, const pd__node *n) { return 3 * pool_flops(g, n); }

/* ---- Resize, Upsample ------------------------------------------------------------------------ */

void pd__resize_inputs(const pd__node *n, int *scales, int *sizes) {
    bool up = !strcmp(n->op_type, "Upsample");
    if (up) *scales = n->opset >= 9 ? 1 : -1, *sizes = -1;
    else if (n->opset < 11) *scales = 1, *sizes = -1;
    else *scales = 2, *sizes = 3;
}

static bool rsz_given(const pd_tensor *t) { return t && pd_tensor_numel(t) > 0; }

/* Resize's modes from its attributes (Upsample and Resize-10: asymmetric
 * coordinates, nearest rounds down); *keep is keep_aspect_ratio_policy's
 * 1 not_larger, 2 not_smaller, 0 stretch. */
static pd_status rsz_modes(const pd__node *n, pd__rsz *r, int *keep) {
    bool v10 = !strcmp(n->op_type, "Upsample") || n->opset < 11;
    const char *mode = pd__attr_s(n, "mode", "nearest");
    if (!strcmp(mode, "linear") || (v10 && !strcmp(mode, "bilinear"))) r->linear = true;
    else if (!v10 && !strcmp(mode, "cubic")) r->cubic = true;
    else if (strcmp(mode, "nearest") != 0)
        return pd__err(PD_ERR_UNSUPPORTED, "mode '%s' is not supported (nearest, linear and cubic are)", mode);
    r->cubic_a = pd__attr_f(n, "cubic_coeff_a", -0.75f);
    r->exclude_outside = pd__attr_i(n, "exclude_outside", 0) != 0;
    if (v10) { /* Upsample and Resize-10: asymmetric coordinates, nearest rounds down */
        r->ctm = PD_RSZ_ASYMMETRIC;
        r->nearest = PD_RSZ_FLOOR;
    } else {
        static const char *ctms[] = {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                                     "half_pixel_symmetric", "tf_crop_and_resize"};
        static const char *nms[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
        const char *c = pd__attr_s(n, "coordinate_transformation_mode", "half_pixel");
        const char *m = pd__attr_s(n, "nearest_mode", "round_prefer_floor");
        int i;
        for (i = 0; i < 6 && strcmp(c, ctms[i]); i++) {}
        if (i == 6)
            return pd__err(PD_ERR_UNSUPPORTED, "coordinate_transformation_mode '%s' is not supported (half_pixel, "
                           "pytorch_half_pixel, align_corners, asymmetric, half_pixel_symmetric and "
                           "tf_crop_and_resize are)", c);
        r->ctm = (pd__rsz_ctm)i;
        for (i = 0; i < 4 && strcmp(m, nms[i]); i++) {}
        if (i == 4) return pd__err(PD_ERR_UNSUPPORTED, "nearest_mode '%s' is not supported", m);
        r->nearest = (pd__rsz_nearest)i;
        r->extrapolation = pd__attr_f(n, "extrapolation_value", 0);
        r->antialias = pd__attr_i(n, "antialias", 0) != 0;
        if (r->antialias && !r->linear && !r->cubic)
            return pd__err(PD_ERR_UNSUPPORTED, "antialias=1 is defined for the linear and cubic modes, not nearest");
        const char *k = pd__attr_s(n, "keep_aspect_ratio_policy", "stretch");
        *keep = !strcmp(k, "not_larger") ? 1 : !strcmp(k, "not_smaller") ? 2 : 0;
        if (!*keep && strcmp(k, "stretch") != 0)
            return pd__err(PD_ERR_UNSUPPORTED, "keep_aspect_ratio_policy '%s' is not supported (stretch, not_larger "
                           "and not_smaller are)", k);
    }
    return PD_OK;
}

/* The axes scales and sizes apply to (opset 18+), every axis by default. */
static pd_status rsz_axes(const pd__node *n, int ndim, int *axes, int *na) {
    *na = ndim;
    const int64_t *av;
    int ac = pd__attr_ints(n, "axes", &av);
    bool seen[PD_MAX_DIMS] = {false};
    for (int i = 0; i < ndim; i++) axes[i] = i;
    if (ac) {
        if (ac > ndim) return pd__err(PD_ERR_SHAPE, "attribute axes has %d values for rank %d", ac, ndim);
        *na = ac;
        for (int i = 0; i < ac; i++) {
            if (!norm_axis(av[i], ndim, ndim - 1, &axes[i]) || seen[axes[i]])
                return pd__err(PD_ERR_SHAPE, "attribute axes entry %d (%lld) is out of range or repeated", i,
                               (long long)av[i]);
            seen[axes[i]] = true;
        }
    }
    return PD_OK;
}

/* tf_crop_and_resize's roi: starts then ends of the axes scaled, in [0, 1] units. */
static pd_status rsz_roi(const pd_tensor *roi, const int *axes, int na, pd__rsz *r) {
    int ndim = r->ndim;
    if (!rsz_given(roi)) return pd__err(PD_ERR_SHAPE, "tf_crop_and_resize needs the roi input");
    if (pd_tensor_numel(roi) != 2 * na)
        return pd__err(PD_ERR_SHAPE, "roi has %lld values for %d axes (want %d)", (long long)pd_tensor_numel(roi),
                       na, 2 * na);
    r->roi_f32 = roi->dtype == PD_FLOAT;
    for (int i = 0; roi->data && i < na; i++) {
        r->roi[axes[i]] = pd__get_f(roi->dtype, roi->data, i);
        r->roi[ndim + axes[i]] = pd__get_f(roi->dtype, roi->data, na + i);
    }
    return PD_OK;
}

/* The output sizes from scales (an input, or Upsample-7's attribute) or sizes. */
static pd_status rsz_targets(const pd__node *n, const int64_t *x, const pd_tensor *scales, const pd_tensor *sizes,
                             const int *axes, int na, pd__rsz *r) {
    bool up = !strcmp(n->op_type, "Upsample");
    const float *af = NULL;
    int afc = up && n->opset < 9 ? pd__attr_floats(n, "scales", &af) : 0;
    bool hs = rsz_given(scales) || afc > 0, hz = rsz_given(sizes);
    if (hs == hz)
        return pd__err(PD_ERR_SHAPE, hs ? "both scales and sizes are given" : "neither scales nor sizes is given");
    int64_t cnt = hs ? (afc ? afc : pd_tensor_numel(scales)) : pd_tensor_numel(sizes);
    if (cnt != na) return pd__err(PD_ERR_SHAPE, "%s has %lld values for %d axes", hs ? "scales" : "sizes", (long long)cnt, na);
    const pd_tensor *t = hs ? scales : sizes;
    if (!afc && !t->data) return pd__err(PD_ERR_UNSUPPORTED, "%s is not a constant at load", hs ? "scales" : "sizes");
    for (int i = 0; i < na; i++) {
        int d = axes[i];
        if (hs) {
            double sc = afc ? af[i] : pd__get_f(t->dtype, t->data, i);
            if (!(sc > 0) || sc > 1e6) return pd__err(PD_ERR_SHAPE, "scale %g of axis %d is not positive", sc, d);
            r->scale[d] = sc;
            double o = floor((double)x[d] * sc);
            if (o > (double)INT32_MAX) return pd__err(PD_ERR_SHAPE, "output size %g of axis %d is too large", o, d);
            r->out[d] = (int64_t)o;
            r->outf[d] = (double)x[d] * sc;
        } else {
            int64_t o = pd__get_i(t->dtype, t->data, i);
            if (o < 0 || o > INT32_MAX) return pd__err(PD_ERR_SHAPE, "size %lld of axis %d is out of range", (long long)o, d);
            r->out[d] = o;
            r->scale[d] = x[d] ? (double)o / (double)x[d] : 1;
            r->outf[d] = (double)o;
        }
        if (r->out[d] > 0 && x[d] == 0)
            return pd__err(PD_ERR_SHAPE, "axis %d of size 0 cannot be resized to %lld", d, (long long)r->out[d]);
    }
    return PD_OK;
}

/* keep_aspect_ratio_policy with sizes: one scale for the axes, the smallest
 * (not_larger) or largest (not_smaller) of sizes / input; sizes rounded half up. */
static void rsz_keep(int keep, const int64_t *x, const int *axes, int na, pd__rsz *r) {
    double sc = keep == 1 ? INFINITY : 0;
    for (int i = 0; i < na; i++) {
        double s = r->scale[axes[i]];
        sc = keep == 1 ? fmin(sc, s) : fmax(sc, s);
    }
    for (int i = 0; i < na; i++) {
        int d = axes[i];
        r->scale[d] = sc;
        r->out[d] = (int64_t)((double)x[d] * sc + 0.5);
        r->outf[d] = (double)x[d] * sc;
    }
}

/* antialias: the kernel's support, [-1, 1] or [-2, 2], over the scale. */
static pd_status rsz_taps(pd__rsz *r) {
    r->taps = 4;
    for (int d = 0; r->antialias && d < r->ndim; d++) {
        double s = r->scale[d] < 1 ? r->scale[d] : 1, t = -2 * floor((r->cubic ? -2 : -1) / s);
        if (t > 1024)
            return pd__err(PD_ERR_UNSUPPORTED, "antialias at scale %g of axis %d needs %g taps (1024 at most)", s, d,
                           t);
        if (t > r->taps) r->taps = (int)t;
    }
    return PD_OK;
}

pd_status pd__resize_plan(const pd__node *n, int ndim, const int64_t *x, const pd_tensor *roi,
                          const pd_tensor *scales, const pd_tensor *sizes, pd__rsz *r) {
    memset(r, 0, sizeof *r);
    r->ndim = ndim;
    int keep = 0, axes[PD_MAX_DIMS], na;
    PD_TRY(rsz_modes(n, r, &keep));
    PD_TRY(rsz_axes(n, ndim, axes, &na));
    for (int i = 0; i < ndim; i++) {
        r->in[i] = r->out[i] = x[i];
        r->scale[i] = 1;
        r->outf[i] = (double)x[i];
        r->roi[i] = 0, r->roi[ndim + i] = 1;
    }
    if (r->ctm == PD_RSZ_TF_CROP_AND_RESIZE) PD_TRY(rsz_roi(roi, axes, na, r));
    PD_TRY(rsz_targets(n, x, scales, sizes, axes, na, r));
    if (keep && rsz_given(sizes)) rsz_keep(keep, x, axes, na, r);
    return rsz_taps(r);
}

static pd_status resize_shape(pd_graph *g, pd__node *n) {
    pd__tensor *x;
    PD_TRY(need(g, n, 0, "X", &x));
    PD_TRY(need_float(g, n, x, "X"));
    int si, zi;
    pd__resize_inputs(n, &si, &zi);
    pd_tensor sv, zv, *sp = NULL, *zp = NULL;
    for (int j = 0; j < 2; j++) {
        int k = j ? zi : si;
        pd__tensor *t = k >= 0 ? pd__in(g, n, k) : NULL;
        if (!t) continue;
        pd_tensor v = pd__view(t);
        if (!((t->kind == PD_T_INIT || t->kind == PD_T_CONST) && t->data)) v.data = NULL;
        if (t->ndim != 1 || (j ? (t->dtype != PD_INT64) : !is_float(t->dtype) && t->dtype != PD_FLOAT16))
            return pd__node_err(g, n, PD_ERR_SHAPE, "%s %s (%s) must be a 1-D %s tensor", j ? "sizes" : "scales",
                                shp(t).s, pd_dtype_name(t->dtype), j ? "int64" : "float");
        if (j) zv = v, zp = &zv;
        else sv = v, sp = &sv;
    }
    pd__tensor *rt = si == 2 ? pd__in(g, n, 1) : NULL; /* roi: its values only matter to the kernel */
    pd_tensor rv, *rp = NULL;
    if (rt && rt->ndim >= 0) {
        rv = pd__view(rt);
        if (!((rt->kind == PD_T_INIT || rt->kind == PD_T_CONST) && rt->data)) rv.data = NULL;
        rp = &rv;
    }
    pd__rsz r;
    pd_status st = pd__resize_plan(n, x->ndim, x->shape, rp, sp, zp, &r);
    if (st != PD_OK) return node_prefix(g, n, st);
    return set_out(g, n, 0, x->dtype, x->ndim, r.out);
}

static double resize_flops(const pd_graph *g, const pd__node *n) {
    const pd__tensor *y = cout(g, n, 0), *x = cin(g, n, 0);
    if (!y || !x) return 0;
    /* linear: two taps per resized axis */
    return pd__attr_s(n, "mode", "nearest")[0] == 'n' ? 0 : 2 * dnumel(y) * (double)x->ndim;
}

pd_status pd__shape_Resize(pd_graph *g, pd__node *n) { return resize_shape(g, n); }
double pd__flops_Resize(const pd_graph *g, const pd__node *n) { return resize_flops(g, n); }
pd_status pd__shape_Upsample(pd_graph *g, pd__node *n) { return resize_shape(g, n); }
double pd__flops_Upsample(const pd_graph *g, const pd__node *n) { return resize_flops(g, n); }

/* ---- Bernoulli, RandomUniformLike -------------------------------------------------------------- */

/* A draw shaped like input 0, of the dtype attribute (default: the input's). */
static pd_status random_like_shape(pd_graph *g, pd__node *n, bool float_only) {
    pd__tensor *x;
    PD_TRY(need(g, n, 0, "input", &x));
    if (x->ndim < 0) return pd__node_err(g, n, PD_ERR_SHAPE, "input '%s' has no known shape", x->name);
    pd_dtype t = (pd_dtype)pd__attr_i(n, "dtype", (int64_t)x->dtype);
    bool ok = pd_dtype_size(t) > 0 && t != PD_BFLOAT16;
    if (float_only || n->op == PD_OP_BERNOULLI) {
        /* RandomUniformLike's output, Bernoulli's probabilities: floats */
        const pd__tensor *f = n->op == PD_OP_BERNOULLI ? x : NULL;
        if (f && !(is_float(f->dtype) || f->dtype == PD_FLOAT16))
            return pd__node_err(g, n, PD_ERR_UNSUPPORTED,
                                "input '%s' has dtype %s (float, double, float16 are supported)", x->name,
                                pd_dtype_name(x->dtype));
        if (float_only) ok = ok && (is_float(t) || t == PD_FLOAT16);
    }
    if (!ok) return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "output dtype %s is not supported", pd_dtype_name(t));
    return set_out(g, n, 0, t, x->ndim, x->shape);
}

pd_status pd__shape_Bernoulli(pd_graph *g, pd__node *n) { return random_like_shape(g, n, false); }
double pd__flops_Bernoulli(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = cin(g, n, 0);
    return x ? 4 * dnumel(x) : 0;
}
pd_status pd__shape_RandomUniformLike(pd_graph *g, pd__node *n) { return random_like_shape(g, n, true); }
double pd__flops_RandomUniformLike(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = cin(g, n, 0);
    return x ? 4 * dnumel(x) : 0;
}

/* ---- DeformConv -------------------------------------------------------------------------------- */

pd_status pd__deform_plan(const pd__node *n, int xr, const int64_t *x, int wr, const int64_t *w, int orr,
                          const int64_t *off, int br, const int64_t *b, int mr, const int64_t *m, pd__deform *p) {
    memset(p, 0, sizeof *p);
    if (xr != 4 || wr != 4 || orr != 4)
        return pd__err(PD_ERR_UNSUPPORTED, "only 2-D DeformConv is supported (X, W, offset of rank 4)");
    const int64_t *v;
    p->N = x[0], p->C = x[1], p->H = x[2], p->W = x[3], p->OC = w[0], p->KH = w[2], p->KW = w[3];
    p->G = pd__attr_i(n, "group", 1), p->OG = pd__attr_i(n, "offset_group", 1);
    int c = pd__attr_ints(n, "kernel_shape", &v);
    if (c && (c != 2 || v[0] != p->KH || v[1] != p->KW)) return pd__err(PD_ERR_SHAPE, "kernel_shape does not match W");
    c = pd__attr_ints(n, "strides", &v);
    p->sh = c == 2 ? v[0] : 1, p->sw = c == 2 ? v[1] : 1;
    c = pd__attr_ints(n, "dilations", &v);
    p->dh = c == 2 ? v[0] : 1, p->dw = c == 2 ? v[1] : 1;
    c = pd__attr_ints(n, "pads", &v);
    int64_t pb = c == 4 ? v[2] : 0, pr = c == 4 ? v[3] : 0;
    p->pt = c == 4 ? v[0] : 0, p->pl = c == 4 ? v[1] : 0;
    if (p->G < 1 || p->OG < 1 || p->sh < 1 || p->sw < 1 || p->dh < 1 || p->dw < 1 || p->pt < 0 || p->pl < 0 ||
        pb < 0 || pr < 0)
        return pd__err(PD_ERR_SHAPE, "group, offset_group, strides, dilations must be positive, pads not negative");
    if (p->C != w[1] * p->G || p->OC % p->G || p->C % p->OG)
        return pd__err(PD_ERR_SHAPE, "X's %lld channels, W's %lld x group %lld, offset_group %lld do not fit",
                       (long long)p->C, (long long)w[1], (long long)p->G, (long long)p->OG);
    p->OH = (p->H + p->pt + pb - (p->KH - 1) * p->dh - 1) / p->sh + 1;
    p->OW = (p->W + p->pl + pr - (p->KW - 1) * p->dw - 1) / p->sw + 1;
    int64_t K = p->KH * p->KW;
    if (off[0] != p->N || off[1] != p->OG * K * 2 || off[2] != p->OH || off[3] != p->OW)
        return pd__err(PD_ERR_SHAPE, "offset must be (%lld, %lld, %lld, %lld)", (long long)p->N,
                       (long long)(p->OG * K * 2), (long long)p->OH, (long long)p->OW);
    if (b && (br != 1 || b[0] != p->OC)) return pd__err(PD_ERR_SHAPE, "B must be (%lld)", (long long)p->OC);
    if (m && (mr != 4 || m[0] != p->N || m[1] != p->OG * K || m[2] != p->OH || m[3] != p->OW))
        return pd__err(PD_ERR_SHAPE, "mask must be (%lld, %lld, %lld, %lld)", (long long)p->N, (long long)(p->OG * K),
                       (long long)p->OH, (long long)p->OW);
    return PD_OK;
}

pd_status pd__shape_DeformConv(pd_graph *g, pd__node *n) {
    pd__tensor *x, *w, *o, *b = pd__in(g, n, 3), *m = pd__in(g, n, 4);
    PD_TRY(need(g, n, 0, "X", &x));
    PD_TRY(need(g, n, 1, "W", &w));
    PD_TRY(need(g, n, 2, "offset", &o));
    PD_TRY(need_float(g, n, x, "X"));
    const pd__tensor *all[5] = {x, w, o, b, m};
    for (int i = 1; i < 5; i++)
        if (all[i] && all[i]->dtype != x->dtype)
            return pd__node_err(g, n, PD_ERR_SHAPE, "'%s' is %s, X is %s", all[i]->name, pd_dtype_name(all[i]->dtype),
                                pd_dtype_name(x->dtype));
    pd__deform p;
    pd_status st = pd__deform_plan(n, x->ndim, x->shape, w->ndim, w->shape, o->ndim, o->shape, b ? b->ndim : 0,
                                   b ? b->shape : NULL, m ? m->ndim : 0, m ? m->shape : NULL, &p);
    if (st != PD_OK) return node_prefix(g, n, st);
    int64_t ys[4] = {p.N, p.OC, p.OH, p.OW};
    return set_out(g, n, 0, x->dtype, 4, ys);
}

double pd__flops_DeformConv(const pd_graph *g, const pd__node *n) {
    const pd__tensor *y = cout(g, n, 0), *w = cin(g, n, 1);
    if (!y || !w || w->ndim != 4) return 0;
    return dnumel(y) * (2.0 * (double)(w->shape[1] * w->shape[2] * w->shape[3]) + 10); /* the products, the sampling */
}

/* ---- Det --------------------------------------------------------------------------------------- */

/* Det: X (*, M, M) to the determinants (*). */
pd_status pd__shape_Det(pd_graph *g, pd__node *n) {
    pd__tensor *x;
    PD_TRY(need(g, n, 0, "X", &x));
    PD_TRY(need_float(g, n, x, "X"));
    if (x->ndim < 2 || x->shape[x->ndim - 1] != x->shape[x->ndim - 2])
        return pd__node_err(g, n, PD_ERR_SHAPE, "X %s is not a batch of square matrices", shp(x).s);
    return set_out(g, n, 0, x->dtype, x->ndim - 2, x->shape);
}

double pd__flops_Det(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = cin(g, n, 0);
    if (!x || x->ndim < 2) return 0;
    double m = (double)x->shape[x->ndim - 1];
    return dnumel(x) / (m > 0 ? m * m : 1) * (2.0 / 3.0) * m * m * m; /* an LU per matrix */
}

/* ---- Einsum ------------------------------------------------------------------------------------ */

/* An equation being planned: each operand's letters (t[0] A, t[1] B, t[2]
 * the output), an ellipsis' position in each (-1: none), and once known
 * each letter's axis in A, B and the output (-1: absent). */
typedef struct pd__ein_eq {
    const char *eq;
    char t[3][PD_MAX_DIMS + 1];
    int len[3], ell[3], nin;
    bool arrow, comma;
    int ax[3][128];
} pd__ein_eq;

static pd_status ein_parse(pd__ein_eq *q) {
    int part = 0;
    for (const char *p = q->eq; *p; p++) {
        char ch = *p;
        if (ch == ' ') continue;
        if (ch == ',' && part == 0 && !q->arrow) part = 1, q->comma = true;
        else if (ch == '-' && p[1] == '>' && !q->arrow) q->arrow = true, part = 2, p++;
        else if (((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z')) && q->len[part] < PD_MAX_DIMS)
            q->t[part][q->len[part]++] = ch;
        else if (ch == '.' && p[1] == '.' && p[2] == '.' && q->ell[part] < 0)
            q->ell[part] = q->len[part], p += 2;
        else
            return pd__err(PD_ERR_UNSUPPORTED,
                           "equation '%s' is not supported (one or two operands, letters and '...': a batched "
                           "matrix product such as 'bij,bjk->bik', a transpose, a sum or a diagonal)", q->eq);
    }
    if (q->nin > 2 || q->nin < 1)
        return pd__err(PD_ERR_UNSUPPORTED, "equation '%s' with %d operands is not supported (one or two are)", q->eq,
                       q->nin);
    if (q->nin != (q->comma ? 2 : 1))
        return pd__err(PD_ERR_SHAPE, "equation '%s' does not name %d operands", q->eq, q->nin);
    return PD_OK;
}

/* An ellipsis becomes letters \1, \2 ... for its axes, right-aligned across
 * the operands; without '->' the output is the ellipsis' axes, then the
 * letters named once, in alphabetical order. */
static pd_status ein_expand(pd__ein_eq *q, int ra, int rb) {
    int rk[2] = {ra, rb}, ne = 0, nek[2] = {0, 0};
    for (int k = 0; k < q->nin; k++) {
        nek[k] = q->ell[k] >= 0 ? rk[k] - q->len[k] : 0;
        if (nek[k] < 0 || (q->ell[k] < 0 && q->len[k] != rk[k]))
            return pd__err(PD_ERR_SHAPE, "equation '%s' names %d and %d axes; the operands have ranks %d and %d",
                           q->eq, q->len[0], q->len[1], ra, rb);
        if (nek[k] > ne) ne = nek[k];
    }
    if (q->ell[2] >= 0 && !q->arrow) q->ell[2] = -1;
    for (int k = 0; k < 3; k++) {
        int m = k < 2 ? nek[k] : q->ell[2] >= 0 ? ne : 0, at = q->ell[k];
        if (at < 0 || m == 0) continue;
        if (q->len[k] + m > PD_MAX_DIMS) return pd__err(PD_ERR_SHAPE, "equation '%s' has too many axes", q->eq);
        memmove(q->t[k] + at + m, q->t[k] + at, (size_t)(q->len[k] - at));
        for (int j = 0; j < m; j++) q->t[k][at + j] = (char)(1 + ne - m + j);
        q->len[k] += m;
    }
    if (q->arrow) return PD_OK;
    int cnt[128] = {0};
    for (int k = 0; k < q->nin; k++)
        for (int i = 0; i < q->len[k]; i++) cnt[(int)q->t[k][i]]++;
    for (int j = 0; j < ne; j++) q->t[2][q->len[2]++] = (char)(1 + j);
    for (int ch = 'A'; ch <= 'z'; ch++)
        if (cnt[ch] == 1 && q->len[2] < PD_MAX_DIMS) q->t[2][q->len[2]++] = (char)ch;
    return PD_OK;
}

/* A letter repeated in an operand: the operand becomes its diagonal. */
static pd_status ein_diagonals(pd__ein_eq *q, const int64_t *const sk[2], pd__ein *e) {
    int64_t dsz[2][PD_MAX_DIMS];
    for (int k = 0; k < q->nin; k++) {
        char u[PD_MAX_DIMS + 1] = {0};
        int nu = 0;
        for (int i = 0; i < q->len[k]; i++) {
            int j = 0;
            while (j < nu && u[j] != q->t[k][i]) j++;
            if (j == nu) {
                u[nu] = q->t[k][i];
                dsz[k][nu++] = sk[k][i];
            } else if (dsz[k][j] != sk[k][i]) {
                return pd__err(PD_ERR_SHAPE, "equation '%s': the diagonal over '%c' has sides %lld and %lld", q->eq,
                               q->t[k][i], (long long)dsz[k][j], (long long)sk[k][i]);
            }
            e->dmap[k][i] = j;
        }
        if (nu == q->len[k]) continue;
        e->diag[k] = true;
        e->dr[k] = nu;
        memcpy(e->dshape[k], dsz[k], sizeof(int64_t) * (size_t)nu);
        memcpy(q->t[k], u, (size_t)nu + 1);
        q->len[k] = nu;
    }
    return PD_OK;
}

/* Each letter's axes; one operand gets a B of ones over the letters summed
 * ('ij->i' is 'ij,j->i'). */
static pd_status ein_axes(pd__ein_eq *q, const int64_t *sa, pd__ein *e) {
    memset(q->ax, -1, sizeof q->ax);
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < q->len[k]; i++) q->ax[k][(int)q->t[k][i]] = i;
    for (int i = 0; i < q->len[2]; i++) {
        int ch = q->t[2][i];
        if (q->ax[2][ch] >= 0 || (q->ax[0][ch] < 0 && q->ax[1][ch] < 0))
            return pd__err(PD_ERR_SHAPE, "equation '%s': output letter '%c' is repeated or in no operand", q->eq, ch);
        q->ax[2][ch] = i;
    }
    if (q->nin == 2) return PD_OK;
    for (int i = 0; i < q->len[0]; i++) {
        int ch = q->t[0][i];
        if (q->ax[2][ch] >= 0) continue;
        q->ax[1][ch] = q->len[1];
        e->bshape[q->len[1]] = sa[i];
        q->t[1][q->len[1]++] = (char)ch;
    }
    return PD_OK;
}

/* Every letter is in both operands or in the output, with one size. */
static pd_status ein_check(const pd__ein_eq *q, const int64_t *sa, const int64_t *sb) {
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < q->len[k]; i++) {
            int ch = q->t[k][i];
            const int *a0 = q->ax[0], *a1 = q->ax[1];
            char what[16]; /* a letter, or one of the ellipsis' axes (\1, \2 ...) */
            if (ch < 'A') snprintf(what, sizeof what, "'...' axis %d", ch - 1);
            else snprintf(what, sizeof what, "'%c'", ch);
            if (q->ax[1 - k][ch] < 0 && q->ax[2][ch] < 0)
                return pd__err(PD_ERR_UNSUPPORTED, "equation '%s' sums %s over one operand only; not supported", q->eq,
                               what);
            if (a0[ch] >= 0 && a1[ch] >= 0 && sa[a0[ch]] != sb[a1[ch]]) {
                bool bcast = ch < 'A' && (sa[a0[ch]] == 1 || sb[a1[ch]] == 1); /* valid ONNX, not done here */
                return pd__err(bcast ? PD_ERR_UNSUPPORTED : PD_ERR_SHAPE,
                               "equation '%s': %s is %lld in A and %lld in B (no broadcasting)", q->eq, what,
                               (long long)sa[a0[ch]], (long long)sb[a1[ch]]);
            }
        }
    return PD_OK;
}

/* The letters' roles: batch (A, B, output), M (A, output), K (A, B) and N
 * (B, output); batch, M and N in output order, K in A's order. */
static void ein_roles(const pd__ein_eq *q, const int64_t *sa, const int64_t *sb, pd__ein *e) {
    e->B = e->M = e->N = e->K = 1;
    int na = 0, nb = 0, nc = 0;
    for (int role = 0; role < 4; role++) {
        if (role == 2) { /* K letters: after M in A, after batch in B */
            for (int i = 0; i < q->len[0]; i++) {
                int ch = q->t[0][i];
                if (q->ax[1][ch] < 0 || q->ax[2][ch] >= 0) continue;
                e->pa[na++] = i;
                e->pb[nb++] = q->ax[1][ch];
                e->K *= sa[i];
            }
            continue;
        }
        for (int i = 0; i < q->len[2]; i++) {
            int ch = q->t[2][i], ia = q->ax[0][ch], ib = q->ax[1][ch];
            int r = ia >= 0 && ib >= 0 ? 0 : ia >= 0 ? 1 : 3;
            if (r != role) continue;
            int64_t sz = ia >= 0 ? sa[ia] : sb[ib];
            if (ia >= 0) e->pa[na++] = ia;
            if (ib >= 0) e->pb[nb++] = ib;
            *(r == 0 ? &e->B : r == 1 ? &e->M : &e->N) *= sz;
            e->po[nc] = i;
            e->cshape[nc++] = sz;
        }
    }
    e->nbt = nc;
    for (int j = 0; j < nc; j++) e->out[e->po[j]] = e->cshape[j];
}

pd_status pd__einsum_plan(const pd__node *n, int nin, int ra, const int64_t *sa, int rb, const int64_t *sb,
                          pd__ein *e) {
    memset(e, 0, sizeof *e);
    pd__ein_eq q;
    memset(&q, 0, sizeof q);
    q.eq = pd__attr_s(n, "equation", "");
    q.ell[0] = q.ell[1] = q.ell[2] = -1;
    q.nin = nin;
    PD_TRY(ein_parse(&q));
    PD_TRY(ein_expand(&q, ra, rb));
    const int64_t *sk[2] = {sa, sb};
    PD_TRY(ein_diagonals(&q, sk, e));
    if (e->diag[0]) ra = e->dr[0], sa = e->dshape[0];
    if (e->diag[1]) rb = e->dr[1], sb = e->dshape[1];
    PD_TRY(ein_axes(&q, sa, e));
    if (nin == 1) rb = q.len[1], sb = e->bshape;
    PD_TRY(ein_check(&q, sa, sb));
    e->ra = ra, e->rb = rb, e->ro = q.len[2];
    ein_roles(&q, sa, sb, e);
    return PD_OK;
}

pd_status pd__shape_Einsum(pd_graph *g, pd__node *n) {
    pd__tensor *a, *b;
    if (n->nin != 2 && n->nin != 1)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "equation '%s' with %d operands is not supported (one or two are)",
                            pd__attr_s(n, "equation", ""), n->nin);
    PD_TRY(need(g, n, 0, "A", &a));
    PD_TRY(need_float(g, n, a, "Inputs[0]"));
    b = a;
    if (n->nin == 2) {
        PD_TRY(need(g, n, 1, "B", &b));
        PD_TRY(need_dtype(g, n, b, a->dtype, "Inputs[1]"));
    }
    pd__ein e;
    pd_status st = pd__einsum_plan(n, n->nin, a->ndim, a->shape, b->ndim, b->shape, &e);
    if (st != PD_OK) return node_prefix(g, n, st);
    return set_out(g, n, 0, a->dtype, e.ro, e.out);
}

double pd__flops_Einsum(const pd_graph *g, const pd__node *n) {
    const pd__tensor *a = cin(g, n, 0), *b = n->nin == 1 ? a : cin(g, n, 1);
    pd__ein e;
    if (!a || !b || pd__einsum_plan(n, n->nin, a->ndim, a->shape, b->ndim, b->shape, &e) != PD_OK) return 0;
    return 2.0 * (double)e.B * (double)e.M * (double)e.N * (double)e.K;
}

/* ---- softmax family --------------------------------------------------------------------- */

pd_status pd__softmax_split(const pd__node *n, int ndim, const int64_t *shape, int64_t *outer, int64_t *len,
                            int64_t *inner) {
    int axis = 0;
    if (n->opset >= 13) {
        int64_t a = pd__attr_i(n, "axis", -1);
        if (ndim < 1 || !norm_axis(a, ndim, ndim - 1, &axis))
            return pd__err(PD_ERR_SHAPE, "axis %lld is out of range for input %s", (long long)a,
                           shpv(ndim, shape).s);
        *outer = prod(axis, shape);
        *len = shape[axis];
        *inner = prod(ndim - axis - 1, shape + axis + 1);
    } else {
        /* before opset 13 the input is coerced to 2-D at axis */
        int64_t a = pd__attr_i(n, "axis", 1);
        if (!norm_axis(a, ndim, ndim, &axis))
            return pd__err(PD_ERR_SHAPE, "axis %lld is out of range for input %s", (long long)a,
                           shpv(ndim, shape).s);
        *outer = prod(axis, shape);
        *len = prod(ndim - axis, shape + axis);
        *inner = 1;
    }
    return PD_OK;
}

static pd_status softmax_shape(pd_graph *g, pd__node *n) {
    pd__tensor *x;
    PD_TRY(need(g, n, 0, "input", &x));
    PD_TRY(need_float_half(g, n, x, "input"));
    int64_t o, l, i;
    pd_status st = pd__softmax_split(n, x->ndim, x->shape, &o, &l, &i);
    if (st != PD_OK) return node_prefix(g, n, st);
    return set_out(g, n, 0, x->dtype, x->ndim, x->shape);
}

static double softmax_flops(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = cin(g, n, 0);
    /* subtract the max, exponentiate, sum, scale */
    return x ? 4 * dnumel(x) : 0;
}

pd_status pd__shape_Softmax(pd_graph *g, pd__node *n) { return softmax_shape(g, n); }
double pd__flops_Softmax(const pd_graph *g, const pd__node *n) { return softmax_flops(g, n); }
pd_status pd__shape_LogSoftmax(pd_graph *g, pd__node *n) { return softmax_shape(g, n); }
double pd__flops_LogSoftmax(const pd_graph *g, const pd__node *n) { return softmax_flops(g, n); }

/* ---- Dropout ------------------------------------------------------------------------------ */

pd_status pd__shape_Dropout(pd_graph *g, pd__node *n) {
    pd__tensor *x, *r = pd__in(g, n, 1), *t = pd__in(g, n, 2);
    PD_TRY(need(g, n, 0, "data", &x));
    if (!is_float(x->dtype) && x->dtype != PD_FLOAT16 && x->dtype != PD_BFLOAT16)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "data '%s' has dtype %s", x->name, pd_dtype_name(x->dtype));
    if (n->opset >= 12) {
        if (r && (r->numel != 1 || !(is_float(r->dtype) || r->dtype == PD_FLOAT16 || r->dtype == PD_BFLOAT16)))
            return pd__node_err(g, n, PD_ERR_SHAPE, "ratio %s (%s) must be a float scalar", shp(r).s,
                                pd_dtype_name(r->dtype));
        if (t && (t->numel != 1 || t->dtype != PD_BOOL))
            return pd__node_err(g, n, PD_ERR_SHAPE, "training_mode %s (%s) must be a bool scalar", shp(t).s,
                                pd_dtype_name(t->dtype));
    }
    float ratio = pd__attr_f(n, "ratio", 0.5f);
    if (n->opset < 12 && (ratio < 0 || ratio >= 1))
        return pd__node_err(g, n, PD_ERR_SHAPE, "ratio %g is not in [0, 1)", (double)ratio);
    PD_TRY(set_out(g, n, 0, x->dtype, x->ndim, x->shape));
    /* the mask is bool from opset 10, the data's type before */
    return set_out(g, n, 1, n->opset >= 10 ? PD_BOOL : x->dtype, x->ndim, x->shape);
}

double pd__flops_Dropout(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = cin(g, n, 0);
    /* identity unless a training_mode input is wired */
    return x && cin(g, n, 2) ? 2 * dnumel(x) : 0;
}

/* ---- losses -------------------------------------------------------------------------------------- */

int pd__loss_reduction(const pd__node *n) {
    const char *r = pd__attr_s(n, "reduction", "mean");
    if (!strcmp(r, "none")) return 0;
    if (!strcmp(r, "sum")) return 1;
    if (!strcmp(r, "mean")) return 2;
    return -1;
}

/* Scores/log-probs (N, C, d1, ...), labels (N, d1, ...), optional weights (C). */
static pd_status loss_shape(pd_graph *g, pd__node *n, bool sce) {
    pd__tensor *x, *y, *w = pd__in(g, n, 2);
    PD_TRY(need(g, n, 0, sce ? "scores" : "input", &x));
    PD_TRY(need(g, n, 1, sce ? "labels" : "target", &y));
    PD_TRY(need_float(g, n, x, sce ? "scores" : "input"));
    if (y->dtype != PD_INT64 && y->dtype != PD_INT32)
        return pd__node_err(g, n, PD_ERR_SHAPE, "labels '%s' have dtype %s, expected int32 or int64", y->name,
                            pd_dtype_name(y->dtype));
    if (x->ndim < 2) return pd__node_err(g, n, PD_ERR_SHAPE, "input %s must be (N, C, d1, ...)", shp(x).s);
    bool ok = y->ndim == x->ndim - 1 && y->shape[0] == x->shape[0] &&
              memcmp(y->shape + 1, x->shape + 2, sizeof(int64_t) * (size_t)(x->ndim - 2)) == 0;
    if (!ok)
        return pd__node_err(g, n, PD_ERR_SHAPE, "labels %s must be the input %s without its class dim", shp(y).s,
                            shp(x).s);
    if (w) {
        PD_TRY(need_dtype(g, n, w, x->dtype, "weights"));
        if (w->ndim != 1 || w->shape[0] != x->shape[1])
            return pd__node_err(g, n, PD_ERR_SHAPE, "weights %s must be [C] = [%lld]", shp(w).s,
                                (long long)x->shape[1]);
    }
    int red = pd__loss_reduction(n);
    if (red < 0)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "reduction '%s' is not none, sum or mean",
                            pd__attr_s(n, "reduction", ""));
    if (red == 0) PD_TRY(set_out(g, n, 0, x->dtype, y->ndim, y->shape));
    else PD_TRY(set_out(g, n, 0, x->dtype, 0, NULL));
    if (sce) return set_out(g, n, 1, x->dtype, x->ndim, x->shape);
    if (n->nout > 1 && n->out[1] >= 0)
        return pd__node_err(g, n, PD_ERR_SHAPE, "NegativeLogLikelihoodLoss has one output, the model gives it %d",
                            n->nout);
    return PD_OK;
}

pd_status pd__shape_SoftmaxCrossEntropyLoss(pd_graph *g, pd__node *n) { return loss_shape(g, n, true); }

double pd__flops_SoftmaxCrossEntropyLoss(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = cin(g, n, 0);
    return x && x->ndim >= 2 && x->shape[1] ? 4 * dnumel(x) + 2 * (double)(x->numel / x->shape[1]) : 0;
}

pd_status pd__shape_NegativeLogLikelihoodLoss(pd_graph *g, pd__node *n) { return loss_shape(g, n, false); }

double pd__flops_NegativeLogLikelihoodLoss(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = cin(g, n, 0);
    return x && x->ndim >= 2 && x->shape[1] ? 2 * (double)(x->numel / x->shape[1]) : 0;
}

/* ---- RotaryEmbedding ----------------------------------------------------------------------- */

pd_status pd__rope_plan(const pd__node *n, int xn, const int64_t *xs, int cn, const int64_t *cs, int pn,
                        const int64_t *ps, pd__rope *r) {
    memset(r, 0, sizeof *r);
    if (xn != 3 && xn != 4) return pd__err(PD_ERR_SHAPE, "X %s must be 3-D or 4-D", shpv(xn, xs).s);
    r->four = xn == 4;
    r->B = xs[0];
    int64_t nh = pd__attr_i(n, "num_heads", 0);
    if (r->four) {
        r->H = xs[1];
        r->S = xs[2];
        r->D = xs[3];
    } else {
        if (nh <= 0 || xs[2] % nh != 0)
            return pd__err(PD_ERR_SHAPE, "num_heads %lld must divide the hidden size of a 3-D X %s", (long long)nh,
                           shpv(xn, xs).s);
        r->S = xs[1];
        r->H = nh;
        r->D = xs[2] / nh;
    }
    r->rd = pd__attr_i(n, "rotary_embedding_dim", 0);
    if (r->rd == 0) r->rd = r->D;
    if (r->rd < 0 || r->rd > r->D || r->rd % 2 != 0)
        return pd__err(PD_ERR_SHAPE, "rotary_embedding_dim %lld must be even and at most the head size %lld",
                       (long long)r->rd, (long long)r->D);
    r->interleaved = pd__attr_i(n, "interleaved", 0) != 0;
    r->pos = pn > 0;
    if (r->pos) {
        if (pn != 2 || ps[0] != r->B || ps[1] != r->S)
            return pd__err(PD_ERR_SHAPE, "position_ids %s must be [%lld,%lld]", shpv(pn, ps).s, (long long)r->B,
                           (long long)r->S);
        if (cn != 2) return pd__err(PD_ERR_SHAPE, "with position_ids the caches %s must be 2-D", shpv(cn, cs).s);
        r->P = cs[0];
        r->C = cs[1];
    } else {
        if (cn != 3 || cs[0] != r->B || cs[1] != r->S)
            return pd__err(PD_ERR_SHAPE, "without position_ids the caches %s must be [%lld,%lld,.]", shpv(cn, cs).s,
                           (long long)r->B, (long long)r->S);
        r->C = cs[2];
    }
    if (r->C < r->rd / 2)
        return pd__err(PD_ERR_SHAPE, "the caches %s are narrower than rotary_embedding_dim/2 = %lld", shpv(cn, cs).s,
                       (long long)(r->rd / 2));
    return PD_OK;
}

pd_status pd__shape_RotaryEmbedding(pd_graph *g, pd__node *n) {
    pd__tensor *x, *c, *s, *p = pd__in(g, n, 3);
    PD_TRY(need(g, n, 0, "X", &x));
    PD_TRY(need(g, n, 1, "cos_cache", &c));
    PD_TRY(need(g, n, 2, "sin_cache", &s));
    PD_TRY(need_float(g, n, x, "X"));
    PD_TRY(need_dtype(g, n, c, x->dtype, "cos_cache"));
    PD_TRY(need_dtype(g, n, s, x->dtype, "sin_cache"));
    if (s->ndim != c->ndim || memcmp(s->shape, c->shape, sizeof(int64_t) * (size_t)c->ndim) != 0)
        return pd__node_err(g, n, PD_ERR_SHAPE, "sin_cache %s and cos_cache %s differ", shp(s).s, shp(c).s);
    if (p) PD_TRY(need_dtype(g, n, p, PD_INT64, "position_ids"));
    pd__rope r;
    pd_status st = pd__rope_plan(n, x->ndim, x->shape, c->ndim, c->shape, p ? p->ndim : 0, p ? p->shape : NULL, &r);
    if (st != PD_OK) return node_prefix(g, n, st);
    return set_out(g, n, 0, x->dtype, x->ndim, x->shape);
}

double pd__flops_RotaryEmbedding(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = cin(g, n, 0);
    return x ? 3 * dnumel(x) : 0;
}

/* ---- Attention ----------------------------------------------------------------------------- */

pd_status pd__attn_plan(const pd__node *n, int qn, const int64_t *qs, int kn, const int64_t *ks, int vn,
                        const int64_t *vs, int mn, const int64_t *ms, int pn, const int64_t *ps, pd__attn *a) {
    memset(a, 0, sizeof *a);
    if ((qn != 3 && qn != 4) || kn != qn || vn != qn)
        return pd__err(PD_ERR_SHAPE, "Q %s, K %s and V %s must all be 3-D or all 4-D", shpv(qn, qs).s,
                       shpv(kn, ks).s, shpv(vn, vs).s);
    a->three = qn == 3;
    a->B = qs[0];
    if (a->three) {
        int64_t hq = pd__attr_i(n, "q_num_heads", 0), hk = pd__attr_i(n, "kv_num_heads", 0);
        if (hq <= 0 || hk <= 0 || qs[2] % hq != 0 || ks[2] % hk != 0 || vs[2] % hk != 0)
            return pd__err(PD_ERR_SHAPE,
                           "3-D Q %s, K %s, V %s need q_num_heads (%lld) and kv_num_heads (%lld) dividing their "
                           "hidden sizes",
                           shpv(qn, qs).s, shpv(kn, ks).s, shpv(vn, vs).s, (long long)hq, (long long)hk);
        a->Hq = hq;
        a->Hk = hk;
        a->Sq = qs[1];
        a->Skv = ks[1];
        a->Dh = qs[2] / hq;
        if (ks[2] / hk != a->Dh || vs[1] != a->Skv)
            return pd__err(PD_ERR_SHAPE, "K %s and V %s do not match Q %s", shpv(kn, ks).s, shpv(vn, vs).s,
                           shpv(qn, qs).s);
        a->Dv = vs[2] / hk;
    } else {
        a->Hq = qs[1];
        a->Sq = qs[2];
        a->Dh = qs[3];
        a->Hk = ks[1];
        a->Skv = ks[2];
        a->Dv = vs[3];
        if (ks[3] != a->Dh || vs[1] != a->Hk || vs[2] != a->Skv)
            return pd__err(PD_ERR_SHAPE, "K %s and V %s do not match Q %s", shpv(kn, ks).s, shpv(vn, vs).s,
                           shpv(qn, qs).s);
    }
    if (ks[0] != a->B || vs[0] != a->B)
        return pd__err(PD_ERR_SHAPE, "K %s and V %s have another batch than Q %s", shpv(kn, ks).s, shpv(vn, vs).s,
                       shpv(qn, qs).s);
    if (a->Hk <= 0 || a->Hq % a->Hk != 0)
        return pd__err(PD_ERR_SHAPE, "the %lld kv heads do not divide the %lld query heads", (long long)a->Hk,
                       (long long)a->Hq);
    if (pn) {
        if (pn != 4 || ps[0] != a->B || ps[1] != a->Hk || ps[3] != a->Dh)
            return pd__err(PD_ERR_SHAPE, "past_key %s must be [%lld,%lld,.,%lld]", shpv(pn, ps).s, (long long)a->B,
                           (long long)a->Hk, (long long)a->Dh);
        a->P = ps[2];
        a->past = true;
    }
    a->Tk = a->P + a->Skv;
    a->causal = pd__attr_i(n, "is_causal", 0) != 0;
    a->scale = pd__attr_get(n, "scale") ? pd__attr_f(n, "scale", 1) : 1 / sqrt((double)a->Dh);
    a->softcap = pd__attr_f(n, "softcap", 0);
    /* as ONNX's reference computes it: 0 and 1 the (softcapped) scores, 2
     * with the mask added, 3 the softmax */
    int64_t mode = pd__attr_i(n, "qk_matmul_output_mode", 0);
    if (mode < 0 || mode > 3)
        return pd__err(PD_ERR_UNSUPPORTED, "attribute qk_matmul_output_mode %lld (0 to 3 are defined)",
                       (long long)mode);
    a->mode = (int)mode;
    if (a->softcap < 0) return pd__err(PD_ERR_SHAPE, "softcap %g is negative", a->softcap);
    if (mn) {
        const int64_t want[3] = {a->B, a->Hq, a->Sq};
        if (mn < 2 || mn > 4 || ms[mn - 1] > a->Tk)
            return pd__err(PD_ERR_SHAPE, "attn_mask %s must have rank 2 to 4 and at most %lld keys", shpv(mn, ms).s,
                           (long long)a->Tk);
        a->mn = mn;
        for (int i = 0; i < 4; i++) a->mshape[i] = 1;
        for (int i = 0; i < mn; i++) a->mshape[4 - mn + i] = ms[i];
        for (int i = 0; i < 3; i++)
            if (a->mshape[i] != 1 && a->mshape[i] != want[i])
                return pd__err(PD_ERR_SHAPE, "attn_mask %s does not broadcast to [%lld,%lld,%lld,%lld]",
                               shpv(mn, ms).s, (long long)a->B, (long long)a->Hq, (long long)a->Sq, (long long)a->Tk);
    }
    return PD_OK;
}

pd_status pd__shape_Attention(pd_graph *g, pd__node *n) {
    pd__tensor *q, *k, *v, *m = pd__in(g, n, 3), *pk = pd__in(g, n, 4), *pv = pd__in(g, n, 5);
    PD_TRY(need(g, n, 0, "Q", &q));
    PD_TRY(need(g, n, 1, "K", &k));
    PD_TRY(need(g, n, 2, "V", &v));
    PD_TRY(need_float_half(g, n, q, "Q"));
    PD_TRY(need_dtype(g, n, k, q->dtype, "K"));
    PD_TRY(need_dtype(g, n, v, q->dtype, "V"));
    pd__tensor *kl = pd__in(g, n, 6);
    if (kl && (kl->dtype != PD_INT64 || kl->ndim != 1 || kl->shape[0] != q->shape[0]))
        return pd__node_err(g, n, PD_ERR_SHAPE, "nonpad_kv_seqlen %s (%s) must be int64 [batch] for Q %s", shp(kl).s,
                            pd_dtype_name(kl->dtype), shp(q).s);
    if (m && m->dtype != PD_BOOL) PD_TRY(need_dtype(g, n, m, q->dtype, "attn_mask"));
    if (!pk != !pv) return pd__node_err(g, n, PD_ERR_SHAPE, "past_key and past_value must be given together");
    if (pk) {
        PD_TRY(need_dtype(g, n, pk, q->dtype, "past_key"));
        PD_TRY(need_dtype(g, n, pv, q->dtype, "past_value"));
    }
    pd__attn a;
    pd_status st = pd__attn_plan(n, q->ndim, q->shape, k->ndim, k->shape, v->ndim, v->shape, m ? m->ndim : 0,
                                 m ? m->shape : NULL, pk ? pk->ndim : 0, pk ? pk->shape : NULL, &a);
    if (st != PD_OK) return node_prefix(g, n, st);
    if (pv && (pv->ndim != 4 || pv->shape[0] != a.B || pv->shape[1] != a.Hk || pv->shape[2] != a.P ||
               pv->shape[3] != a.Dv))
        return pd__node_err(g, n, PD_ERR_SHAPE, "past_value %s must be [%lld,%lld,%lld,%lld]", shp(pv).s,
                            (long long)a.B, (long long)a.Hk, (long long)a.P, (long long)a.Dv);
    int64_t y3[3] = {a.B, a.Sq, a.Hq * a.Dv}, y4[4] = {a.B, a.Hq, a.Sq, a.Dv};
    int64_t pks[4] = {a.B, a.Hk, a.Tk, a.Dh}, pvs[4] = {a.B, a.Hk, a.Tk, a.Dv}, qks[4] = {a.B, a.Hq, a.Sq, a.Tk};
    PD_TRY(set_out(g, n, 0, q->dtype, a.three ? 3 : 4, a.three ? y3 : y4));
    PD_TRY(set_out(g, n, 1, q->dtype, 4, pks));
    PD_TRY(set_out(g, n, 2, q->dtype, 4, pvs));
    return set_out(g, n, 3, q->dtype, 4, qks);
}

double pd__flops_Attention(const pd_graph *g, const pd__node *n) {
    const pd__tensor *q = cin(g, n, 0), *k = cin(g, n, 1), *v = cin(g, n, 2), *m = cin(g, n, 3), *pk = cin(g, n, 4);
    pd__attn a;
    if (!q || !k || !v || q->numel < 0 || k->numel < 0 || v->numel < 0 ||
        pd__attn_plan(n, q->ndim, q->shape, k->ndim, k->shape, v->ndim, v->shape, m ? m->ndim : 0,
                      m ? m->shape : NULL, pk ? pk->ndim : 0, pk ? pk->shape : NULL, &a) != PD_OK)
        return 0;
    double scores = (double)a.B * (double)a.Hq * (double)a.Sq * (double)a.Tk;
    /* Q K^T, P V, and the mask, max, exp, sum and scale per score */
    return scores * (2 * (double)(a.Dh + a.Dv) + 5);
}

/* ---- FlexAttention ------------------------------------------------------------------------- */

/* FlexAttention (ai.onnx.preview, opset 1) without its modifier subgraphs is
 * Attention over 4-D Q, K, V (grouped-query heads, the scale attribute, no
 * mask): the same plan and kernels. The score_mod and prob_mod subgraphs are
 * not run; softmax in float32 or float64 (finer than ONNX's float16 and
 * bfloat16 softmax_precision, so those are refused rather than matched). */
pd_status pd__shape_FlexAttention(pd_graph *g, pd__node *n) {
    static const char *const mods[2] = {"score_mod", "prob_mod"};
    for (int i = 0; i < 2; i++)
        if (pd__attr_get(n, mods[i]))
            return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "the %s subgraph is not supported", mods[i]);
    int64_t sp = pd__attr_i(n, "softmax_precision", PD_FLOAT);
    if (sp != PD_FLOAT && sp != PD_DOUBLE)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "softmax_precision %lld (float and double are supported)",
                            (long long)sp);
    for (int i = 0; i < 3; i++) {
        pd__tensor *t;
        PD_TRY(need(g, n, i, i == 0 ? "Q" : i == 1 ? "K" : "V", &t));
        if (t->ndim != 4)
            return pd__node_err(g, n, PD_ERR_SHAPE, "%s %s must be 4-D (batch, heads, sequence, head size)",
                                i == 0 ? "Q" : i == 1 ? "K" : "V", shp(t).s);
    }
    if (n->nin > 3 || n->nout > 1)
        return pd__node_err(g, n, PD_ERR_INVALID, "takes Q, K and V and gives Y (%d inputs, %d outputs)", n->nin,
                            n->nout);
    return pd__shape_Attention(g, n);
}

double pd__flops_FlexAttention(const pd_graph *g, const pd__node *n) { return pd__flops_Attention(g, n); }

/* ---- LinearAttention ----------------------------------------------------------------------- */

pd_status pd__linattn_plan(const pd__node *n, int qn, const int64_t *qs, int kn, const int64_t *ks, int vn,
                           const int64_t *vs, int dn, const int64_t *ds, int bn, const int64_t *bs, pd__linattn *a) {
    memset(a, 0, sizeof *a);
    const char *rule = pd__attr_s(n, "update_rule", "gated_delta");
    a->gated = strcmp(rule, "gated") == 0 || strcmp(rule, "gated_delta") == 0;
    a->delta = strcmp(rule, "delta") == 0 || strcmp(rule, "gated_delta") == 0;
    if (!a->gated && !a->delta && strcmp(rule, "linear") != 0)
        return pd__err(PD_ERR_UNSUPPORTED, "update_rule '%s' (linear, gated, delta and gated_delta are defined)",
                       rule);
    if (qn != 3 || kn != 3 || vn != 3)
        return pd__err(PD_ERR_SHAPE, "query %s, key %s and value %s must be 3-D (batch, tokens, heads * size)",
                       shpv(qn, qs).s, shpv(kn, ks).s, shpv(vn, vs).s);
    int64_t hq = pd__attr_i(n, "q_num_heads", 0), hk = pd__attr_i(n, "kv_num_heads", 0);
    if (hq <= 0 || hk <= 0 || hq % hk != 0 || qs[2] % hq != 0 || ks[2] % hk != 0 || vs[2] % hk != 0)
        return pd__err(PD_ERR_SHAPE,
                       "q_num_heads %lld must be a positive multiple of kv_num_heads %lld, dividing query %s; "
                       "kv_num_heads must divide key %s and value %s",
                       (long long)hq, (long long)hk, shpv(qn, qs).s, shpv(kn, ks).s, shpv(vn, vs).s);
    a->B = qs[0], a->T = qs[1], a->Hq = hq, a->Hk = hk, a->Dk = qs[2] / hq, a->Dv = vs[2] / hk;
    if (ks[0] != a->B || vs[0] != a->B || ks[1] != a->T || vs[1] != a->T || ks[2] / hk != a->Dk)
        return pd__err(PD_ERR_SHAPE, "key %s and value %s do not match query %s", shpv(kn, ks).s, shpv(vn, vs).s,
                       shpv(qn, qs).s);
    if (a->gated != (dn != 0) || a->delta != (bn != 0))
        return pd__err(PD_ERR_INVALID, "update_rule '%s' %s decay and %s beta", rule,
                       a->gated ? "needs" : "takes no", a->delta ? "needs" : "takes no");
    if (dn) {
        if (dn != 3 || ds[0] != a->B || ds[1] != a->T || (ds[2] != hk && ds[2] != hk * a->Dk))
            return pd__err(PD_ERR_SHAPE, "decay %s must be [%lld,%lld,%lld] or [%lld,%lld,%lld]", shpv(dn, ds).s,
                           (long long)a->B, (long long)a->T, (long long)hk, (long long)a->B, (long long)a->T,
                           (long long)(hk * a->Dk));
        a->gw = ds[2] / hk;
    }
    if (bn) {
        if (bn != 3 || bs[0] != a->B || bs[1] != a->T || (bs[2] != hk && bs[2] != 1))
            return pd__err(PD_ERR_SHAPE, "beta %s must be [%lld,%lld,%lld] or [%lld,%lld,1]", shpv(bn, bs).s,
                           (long long)a->B, (long long)a->T, (long long)hk, (long long)a->B, (long long)a->T);
        a->bw = bs[2];
    }
    /* scale 0 (the default) means 1/sqrt(Dk), as in ONNX's reference */
    double sc = pd__attr_f(n, "scale", 0);
    a->scale = sc != 0 ? sc : 1 / sqrt((double)a->Dk);
    return PD_OK;
}

static bool is_real(pd_dtype t) { return is_float(t) || t == PD_FLOAT16 || t == PD_BFLOAT16; }

/* Computed in float64 through pd__get_f/pd__set_f, so float16 and bfloat16 run
 * too (rounded once, on the way out); past_state may have its own float dtype
 * (ONNX's S), and present_state takes it, else query's. */
pd_status pd__shape_LinearAttention(pd_graph *g, pd__node *n) {
    pd__tensor *q, *k, *v, *ps = pd__in(g, n, 3), *dc = pd__in(g, n, 4), *bt = pd__in(g, n, 5);
    PD_TRY(need(g, n, 0, "query", &q));
    PD_TRY(need(g, n, 1, "key", &k));
    PD_TRY(need(g, n, 2, "value", &v));
    if (!is_real(q->dtype))
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "query '%s' has dtype %s (float types are supported)", q->name,
                            pd_dtype_name(q->dtype));
    PD_TRY(need_dtype(g, n, k, q->dtype, "key"));
    PD_TRY(need_dtype(g, n, v, q->dtype, "value"));
    if (dc) PD_TRY(need_dtype(g, n, dc, q->dtype, "decay"));
    if (bt) PD_TRY(need_dtype(g, n, bt, q->dtype, "beta"));
    pd__linattn a;
    pd_status st = pd__linattn_plan(n, q->ndim, q->shape, k->ndim, k->shape, v->ndim, v->shape, dc ? dc->ndim : 0,
                                    dc ? dc->shape : NULL, bt ? bt->ndim : 0, bt ? bt->shape : NULL, &a);
    if (st != PD_OK) return node_prefix(g, n, st);
    int64_t ss[4] = {a.B, a.Hk, a.Dk, a.Dv}, ys[3] = {a.B, a.T, a.Hq * a.Dv};
    if (ps && (!is_real(ps->dtype) || ps->ndim != 4 || memcmp(ps->shape, ss, sizeof ss) != 0))
        return pd__node_err(g, n, PD_ERR_SHAPE, "past_state %s (%s) must be a float [%lld,%lld,%lld,%lld]",
                            shp(ps).s, pd_dtype_name(ps->dtype), (long long)a.B, (long long)a.Hk, (long long)a.Dk,
                            (long long)a.Dv);
    PD_TRY(set_out(g, n, 0, q->dtype, 3, ys));
    return set_out(g, n, 1, ps ? ps->dtype : q->dtype, 4, ss);
}

double pd__flops_LinearAttention(const pd_graph *g, const pd__node *n) {
    const pd__tensor *q = cin(g, n, 0), *k = cin(g, n, 1), *v = cin(g, n, 2), *dc = cin(g, n, 4),
                     *bt = cin(g, n, 5);
    pd__linattn a;
    if (!q || !k || !v || q->numel < 0 ||
        pd__linattn_plan(n, q->ndim, q->shape, k->ndim, k->shape, v->ndim, v->shape, dc ? dc->ndim : 0,
                         dc ? dc->shape : NULL, bt ? bt->ndim : 0, bt ? bt->shape : NULL, &a) != PD_OK)
        return 0;
    /* per token and kv head: decay, S^T k, the rank-1 update (Dk x Dv each);
     * per query head: S^T q */
    double st = (double)a.Dk * (double)a.Dv;
    return (double)a.B * (double)a.T * ((double)a.Hk * 5 * st + (double)a.Hq * 2 * st);
}

/* ---- CausalConvWithState --------------------------------------------------------------------- */

int pd__ccws_silu(const pd__node *n) {
    const char *act = pd__attr_s(n, "activation", "none");
    if (strcmp(act, "none") == 0) return 0;
    return strcmp(act, "silu") == 0 || strcmp(act, "swish") == 0 ? 1 : -1;
}

/* Any float dtype: the kernel computes in float64 (runtime/cpu/nn.c). */
pd_status pd__shape_CausalConvWithState(pd_graph *g, pd__node *n) {
    pd__tensor *x, *w, *b = pd__in(g, n, 2), *ps = pd__in(g, n, 3);
    PD_TRY(need(g, n, 0, "input", &x));
    PD_TRY(need(g, n, 1, "weight", &w));
    if (!is_real(x->dtype))
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "input '%s' has dtype %s (float types are supported)", x->name,
                            pd_dtype_name(x->dtype));
    PD_TRY(need_dtype(g, n, w, x->dtype, "weight"));
    if (b) PD_TRY(need_dtype(g, n, b, x->dtype, "bias"));
    if (ps) PD_TRY(need_dtype(g, n, ps, x->dtype, "past_state"));
    if (pd__ccws_silu(n) < 0)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "activation '%s' (none, silu and swish are defined)",
                            pd__attr_s(n, "activation", ""));
    if (x->ndim != 3 || w->ndim != 3 || w->shape[0] != x->shape[1] || w->shape[1] != 1 || w->shape[2] < 1)
        return pd__node_err(g, n, PD_ERR_SHAPE, "input %s must be (batch, channels, length) and weight %s (channels, 1, k)",
                            shp(x).s, shp(w).s);
    int64_t B = x->shape[0], C = x->shape[1], K = w->shape[2], ss[3] = {B, C, K - 1};
    if (b && (b->ndim != 1 || b->shape[0] != C))
        return pd__node_err(g, n, PD_ERR_SHAPE, "bias %s must be [%lld]", shp(b).s, (long long)C);
    if (ps && (ps->ndim != 3 || memcmp(ps->shape, ss, sizeof ss) != 0))
        return pd__node_err(g, n, PD_ERR_SHAPE, "past_state %s must be [%lld,%lld,%lld]", shp(ps).s, (long long)B,
                            (long long)C, (long long)(K - 1));
    PD_TRY(set_out(g, n, 0, x->dtype, 3, x->shape));
    return set_out(g, n, 1, x->dtype, 3, ss);
}

double pd__flops_CausalConvWithState(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = cin(g, n, 0), *w = cin(g, n, 1);
    if (!x || !w || w->ndim != 3) return 0;
    return dnumel(x) * (2 * (double)w->shape[2] + (pd__ccws_silu(n) > 0 ? 4 : 0));
}

/* ---- GridSample, AffineGrid, Col2Im, CenterCropPad ------------------------------------------------ */

/* Constant int64 input i as up to `max` ints: these ops' output shapes hang on it. */
static pd_status need_ints(pd_graph *g, pd__node *n, int i, const char *what, int max, int64_t *v, int *k) {
    pd__tensor *t;
    PD_TRY(need(g, n, i, what, &t));
    if (t->dtype != PD_INT64 || t->ndim != 1 || t->shape[0] > max)
        return pd__node_err(g, n, PD_ERR_SHAPE, "%s %s (%s) must be a 1-D int64 tensor of at most %d values", what,
                            shp(t).s, pd_dtype_name(t->dtype), max);
    if (!((t->kind == PD_T_INIT || t->kind == PD_T_CONST) && t->data))
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "%s is not a constant at load", what);
    *k = (int)t->shape[0];
    for (int j = 0; j < *k; j++) v[j] = ((const int64_t *)t->data)[j];
    return PD_OK;
}

int pd__grid_mode(const pd__node *n) {
    const char *m = pd__attr_s(n, "mode", n->opset >= 20 ? "linear" : "bilinear");
    if (!strcmp(m, "nearest")) return 1;
    if (!strcmp(m, "linear") || !strcmp(m, "bilinear")) return 2;
    if (!strcmp(m, "cubic") || !strcmp(m, "bicubic")) return 4;
    return 0;
}

int pd__grid_padding(const pd__node *n) {
    const char *p = pd__attr_s(n, "padding_mode", "zeros");
    return !strcmp(p, "zeros") ? 0 : !strcmp(p, "border") ? 1 : !strcmp(p, "reflection") ? 2 : -1;
}

/* Y (N, C, O1..Or) = X (N, C, D1..Dr) sampled at grid (N, O1..Or, r), r 2 or 3. */
pd_status pd__shape_GridSample(pd_graph *g, pd__node *n) {
    pd__tensor *x, *grid;
    PD_TRY(need(g, n, 0, "X", &x));
    PD_TRY(need(g, n, 1, "grid", &grid));
    PD_TRY(need_float(g, n, x, "X"));
    PD_TRY(need_dtype(g, n, grid, x->dtype, "grid"));
    int r = x->ndim - 2;
    if (r < 2 || r > 3 || grid->ndim != r + 2 || grid->shape[r + 1] != r || grid->shape[0] != x->shape[0])
        return pd__node_err(g, n, PD_ERR_SHAPE, "X %s and grid %s: want X (N, C, D1..Dr), grid (N, O1..Or, r), r 2 or 3",
                            shp(x).s, shp(grid).s);
    int mode = pd__grid_mode(n);
    if (!mode) return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "mode '%s' is not supported", pd__attr_s(n, "mode", ""));
    if (mode == 4 && r != 2) return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "cubic mode needs a 4-D X (the spec's)");
    if (pd__grid_padding(n) < 0)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "padding_mode '%s' is not supported",
                            pd__attr_s(n, "padding_mode", ""));
    int64_t ys[5] = {x->shape[0], x->shape[1]};
    for (int i = 0; i < r; i++) ys[2 + i] = grid->shape[1 + i];
    return set_out(g, n, 0, x->dtype, r + 2, ys);
}

double pd__flops_GridSample(const pd_graph *g, const pd__node *n) {
    const pd__tensor *y = cout(g, n, 0), *x = cin(g, n, 0);
    if (!y || !x) return 0;
    int k = pd__grid_mode(n);
    return 2 * dnumel(y) * pow(k, x->ndim - 2);
}

/* grid (N, H, W, 2) or (N, D, H, W, 3) = theta (N, 2, 3) or (N, 3, 4) applied to the
 * normalized coordinates of size (N, C, H, W) or (N, C, D, H, W). */
pd_status pd__shape_AffineGrid(pd_graph *g, pd__node *n) {
    pd__tensor *th;
    PD_TRY(need(g, n, 0, "theta", &th));
    PD_TRY(need_float(g, n, th, "theta"));
    int64_t sz[5];
    int k;
    PD_TRY(need_ints(g, n, 1, "size", 5, sz, &k));
    int r = k - 2;
    if (r < 2 || r > 3 || th->ndim != 3 || th->shape[0] != sz[0] || th->shape[1] != r || th->shape[2] != r + 1)
        return pd__node_err(g, n, PD_ERR_SHAPE, "theta %s does not match size %s", shp(th).s, shpv(k, sz).s);
    for (int i = 0; i < k; i++)
        if (sz[i] < 1) return pd__node_err(g, n, PD_ERR_SHAPE, "size %s has a dim below 1", shpv(k, sz).s);
    int64_t ys[5] = {sz[0]};
    for (int i = 0; i < r; i++) ys[1 + i] = sz[2 + i];
    ys[r + 1] = r;
    return set_out(g, n, 0, th->dtype, r + 2, ys);
}

double pd__flops_AffineGrid(const pd_graph *g, const pd__node *n) {
    const pd__tensor *y = cout(g, n, 0);
    return y ? 2 * dnumel(y) * 4 : 0;
}

/* The geometry of Col2Im: its block counts per spatial dim, from the node and
 * image/block shapes; false when they do not fit. */
bool pd__col2im_plan(const pd__node *n, int r, const int64_t *img, const int64_t *blk, int64_t *cnt, int64_t *st,
                     int64_t *pb, int64_t *dil) {
    const int64_t *dv, *pv, *sv;
    int dc = pd__attr_ints(n, "dilations", &dv), pc = pd__attr_ints(n, "pads", &pv),
        sc = pd__attr_ints(n, "strides", &sv);
    if ((dc && dc != r) || (pc && pc != 2 * r) || (sc && sc != r)) return false;
    for (int i = 0; i < r; i++) {
        dil[i] = dc ? dv[i] : 1, st[i] = sc ? sv[i] : 1, pb[i] = pc ? pv[i] : 0;
        int64_t pe = pc ? pv[r + i] : 0, ext = dil[i] * (blk[i] - 1) + 1, span = img[i] + pb[i] + pe - ext;
        if (dil[i] < 1 || st[i] < 1 || blk[i] < 1 || span < 0) return false;
        cnt[i] = span / st[i] + 1;
    }
    return true;
}

/* Y (N, C, image_shape) from the blocks X (N, C * prod(block_shape), L): col2im, adding overlaps. */
pd_status pd__shape_Col2Im(pd_graph *g, pd__node *n) {
    pd__tensor *x;
    PD_TRY(need(g, n, 0, "input", &x));
    PD_TRY(need_float(g, n, x, "input"));
    int64_t img[PD_MAX_DIMS], blk[PD_MAX_DIMS], cnt[PD_MAX_DIMS], st[PD_MAX_DIMS], pb[PD_MAX_DIMS], dil[PD_MAX_DIMS];
    int ki, kb;
    PD_TRY(need_ints(g, n, 1, "image_shape", PD_MAX_DIMS - 2, img, &ki));
    PD_TRY(need_ints(g, n, 2, "block_shape", PD_MAX_DIMS - 2, blk, &kb));
    if (ki != kb || ki < 1 || x->ndim != 3)
        return pd__node_err(g, n, PD_ERR_SHAPE, "input %s, image_shape %s and block_shape %s do not agree", shp(x).s,
                            shpv(ki, img).s, shpv(kb, blk).s);
    if (!pd__col2im_plan(n, ki, img, blk, cnt, st, pb, dil))
        return pd__node_err(g, n, PD_ERR_SHAPE, "bad dilations, pads or strides for image %s and block %s",
                            shpv(ki, img).s, shpv(kb, blk).s);
    int64_t K = prod(ki, blk), L = prod(ki, cnt);
    if (x->shape[1] % K || x->shape[2] != L)
        return pd__node_err(g, n, PD_ERR_SHAPE, "input %s: want (N, C * %lld, %lld)", shp(x).s, (long long)K,
                            (long long)L);
    int64_t ys[PD_MAX_DIMS] = {x->shape[0], x->shape[1] / K};
    for (int i = 0; i < ki; i++) ys[2 + i] = img[i];
    return set_out(g, n, 0, x->dtype, ki + 2, ys);
}

double pd__flops_Col2Im(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = cin(g, n, 0);
    return x ? dnumel(x) : 0;
}

/* The output dims of CenterCropPad: shape on axes (all dims by default). */
pd_status pd__shape_CenterCropPad(pd_graph *g, pd__node *n) {
    pd__tensor *x;
    PD_TRY(need(g, n, 0, "input_data", &x));
    int64_t sv[PD_MAX_DIMS], ys[PD_MAX_DIMS];
    int k;
    PD_TRY(need_ints(g, n, 1, "shape", PD_MAX_DIMS, sv, &k));
    const int64_t *av;
    int ac = pd__attr_ints(n, "axes", &av), r = x->ndim;
    if ((ac ? ac : r) != k)
        return pd__node_err(g, n, PD_ERR_SHAPE, "shape %s has %d values for %d axes", shpv(k, sv).s, k, ac ? ac : r);
    for (int i = 0; i < r; i++) ys[i] = x->shape[i];
    bool seen[PD_MAX_DIMS] = {false};
    for (int i = 0; i < k; i++) {
        int a = i;
        if ((ac && !norm_axis(av[i], r, r - 1, &a)) || seen[a] || sv[i] < 0)
            return pd__node_err(g, n, PD_ERR_SHAPE, "axes or shape entry %d is out of range or repeated", i);
        seen[a] = true;
        ys[a] = sv[i];
    }
    return set_out(g, n, 0, x->dtype, r, ys);
}

double pd__flops_CenterCropPad(const pd_graph *g, const pd__node *n) {
    (void)g, (void)n;
    return 0; /* a copy */
}

/* ---- RoiAlign ------------------------------------------------------------------------------------- */

int pd__roialign_mode(const pd__node *n) {
    const char *m = pd__attr_s(n, "mode", "avg");
    return !strcmp(m, "avg") ? 0 : !strcmp(m, "max") ? 1 : -1;
}

/* 0.5 for half_pixel (the default from opset 16), 0 for output_half_pixel
 * (opset 10's only behaviour); -1: unknown. */
double pd__roialign_offset(const pd__node *n) {
    const char *m = pd__attr_s(n, "coordinate_transformation_mode", n->opset >= 16 ? "half_pixel" : "output_half_pixel");
    return !strcmp(m, "half_pixel") ? 0.5 : !strcmp(m, "output_half_pixel") ? 0 : -1;
}

/* Y (R, C, output_height, output_width) pooled from X (N, C, H, W) over rois (R, 4). */
pd_status pd__shape_RoiAlign(pd_graph *g, pd__node *n) {
    pd__tensor *x, *rois, *bi;
    PD_TRY(need(g, n, 0, "X", &x));
    PD_TRY(need(g, n, 1, "rois", &rois));
    PD_TRY(need(g, n, 2, "batch_indices", &bi));
    PD_TRY(need_float(g, n, x, "X"));
    PD_TRY(need_dtype(g, n, rois, x->dtype, "rois"));
    if (bi->dtype != PD_INT64 && bi->dtype != PD_INT32)
        return pd__node_err(g, n, PD_ERR_SHAPE, "batch_indices has dtype %s, expected int64",
                            pd_dtype_name(bi->dtype));
    if (x->ndim != 4 || rois->ndim != 2 || rois->shape[1] != 4 || bi->ndim != 1 || bi->shape[0] != rois->shape[0])
        return pd__node_err(g, n, PD_ERR_SHAPE, "X %s, rois %s, batch_indices %s: want (N, C, H, W), (R, 4), (R)",
                            shp(x).s, shp(rois).s, shp(bi).s);
    if (pd__roialign_mode(n) < 0)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "mode '%s' is not supported", pd__attr_s(n, "mode", ""));
    if (pd__roialign_offset(n) < 0)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "coordinate_transformation_mode '%s' is not supported",
                            pd__attr_s(n, "coordinate_transformation_mode", ""));
    int64_t oh = pd__attr_i(n, "output_height", 1), ow = pd__attr_i(n, "output_width", 1);
    if (oh < 1 || ow < 1 || pd__attr_i(n, "sampling_ratio", 0) < 0)
        return pd__node_err(g, n, PD_ERR_SHAPE, "output_height, output_width must be positive, sampling_ratio >= 0");
    int64_t ys[4] = {rois->shape[0], x->shape[1], oh, ow};
    return set_out(g, n, 0, x->dtype, 4, ys);
}

double pd__flops_RoiAlign(const pd_graph *g, const pd__node *n) {
    const pd__tensor *y = cout(g, n, 0);
    return y ? 8 * dnumel(y) : 0; /* per sample; the samples per bin depend on the rois */
}
#undef cin
#undef pd__shp
#undef set_out
#undef shp

/* ==== core/shape_rnn.c ==== */
#define cin pd__shape_rnn_cin
#define pd__shp pd__shape_rnn_pd__shp
#define shp pd__shape_rnn_shp
/* shape_rnn.c - shape rules and FLOP counts of the recurrent ops LSTM, GRU
 * and RNN (ONNX opsets 1-22; layout from 14).
 *
 * How it works: docs/INTERNALS.md, "core/shape_rnn.c".
 */
/* ---- core/shape_rnn.h ---- */
/* shape_rnn.h - the attributes of the recurrent ops (LSTM, GRU, RNN), read
 * once for the shape rule (core/shape_rnn.c) and the CPU kernels
 * (runtime/cpu/rnn.c), so that the shapes a rule promises and the loops a
 * kernel runs cannot disagree. Not installed; private to the library.
 */
#ifndef PD_SHAPE_RNN_H
#define PD_SHAPE_RNN_H


typedef enum pd__rnn_cell { PD_RNN_LSTM = 0, PD_RNN_GRU, PD_RNN_SIMPLE } pd__rnn_cell;

/* One recurrent node's attributes, checked. */
typedef struct pd__rnn_attrs {
    pd__rnn_cell cell;
    int gates;      /* gate blocks in W and R: 4 (LSTM: i, o, f, c), 3 (GRU: z, r, h), 1 (RNN) */
    int ndir;       /* 1, or 2 for bidirectional */
    bool reverse;   /* direction "reverse" (the one direction runs backwards in time) */
    int64_t hidden; /* hidden_size; -1 when the attribute is absent (then R's last dim) */
    int layout;     /* 0: X (seq, batch, input); 1: X (batch, seq, input) */
    bool lbr;       /* GRU's linear_before_reset */
} pd__rnn_attrs;

/* Fills *a from n's attributes. Forms the kernels do not compute (other
 * activations, clip, input_forget=1) are PD_ERR_UNSUPPORTED naming the
 * attribute; the message has no node prefix. */
pd_status pd__rnn_attrs_read(const pd__node *n, pd__rnn_attrs *a);

#endif
/* ---- end of core/shape_rnn.h ---- */

#include <string.h>

/* A shape formatted for a message; the temporary lives to the end of the call. */
typedef struct pd__shp {
    char s[160];
} pd__shp;

static pd__shp shp(const pd__tensor *t) {
    pd__shp b;
    pd__format_shape(b.s, sizeof b.s, t->ndim, t->shape);
    return b;
}

static const pd__tensor *cin(const pd_graph *g, const pd__node *n, int i) {
    return (i < n->nin && n->in[i] >= 0) ? &g->tensors[n->in[i]] : NULL;
}

/* ASCII strings equal but for case (ONNX Runtime reads activations so). */
static bool same_name(const char *a, const char *b) {
    for (; *a && *b; a++, b++) {
        char x = *a >= 'A' && *a <= 'Z' ? (char)(*a - 'A' + 'a') : *a, y = *b >= 'A' && *b <= 'Z' ? (char)(*b - 'A' + 'a') : *b;
        if (x != y) return false;
    }
    return *a == *b;
}

/* The ONNX default activation of slot k (per direction) of a cell. */
static const char *default_act(pd__rnn_cell cell, int k) {
    if (cell == PD_RNN_SIMPLE) return "Tanh";
    return k == 0 ? "Sigmoid" : "Tanh";
}

pd_status pd__rnn_attrs_read(const pd__node *n, pd__rnn_attrs *a) {
    memset(a, 0, sizeof *a);
    const char *op = n->op_type;
    a->cell = strcmp(op, "LSTM") == 0 ? PD_RNN_LSTM : strcmp(op, "GRU") == 0 ? PD_RNN_GRU : PD_RNN_SIMPLE;
    a->gates = a->cell == PD_RNN_LSTM ? 4 : a->cell == PD_RNN_GRU ? 3 : 1;
    const char *dir = pd__attr_s(n, "direction", "forward");
    if (strcmp(dir, "forward") == 0) a->ndir = 1;
    else if (strcmp(dir, "reverse") == 0) a->ndir = 1, a->reverse = true;
    else if (strcmp(dir, "bidirectional") == 0) a->ndir = 2;
    else return pd__err(PD_ERR_INVALID, "direction '%s' (forward, reverse or bidirectional)", dir);
    a->hidden = pd__attr_i(n, "hidden_size", -1);
    if (pd__attr_get(n, "hidden_size") && a->hidden < 1)
        return pd__err(PD_ERR_SHAPE, "hidden_size must be >= 1 (is %lld)", (long long)a->hidden);
    int64_t layout = pd__attr_i(n, "layout", 0);
    if (layout != 0 && layout != 1) return pd__err(PD_ERR_INVALID, "layout must be 0 or 1 (is %lld)", (long long)layout);
    a->layout = (int)layout;
    a->lbr = a->cell == PD_RNN_GRU && pd__attr_i(n, "linear_before_reset", 0) != 0;
    if (pd__attr_get(n, "clip"))
        return pd__err(PD_ERR_UNSUPPORTED, "attribute clip (%g) is not supported", (double)pd__attr_f(n, "clip", 0));
    if (a->cell == PD_RNN_LSTM && pd__attr_i(n, "input_forget", 0) != 0)
        return pd__err(PD_ERR_UNSUPPORTED, "attribute input_forget=1 (coupled input and forget gates) is not supported");
    const pd__attr *acts = pd__attr_get(n, "activations");
    if (acts) {
        int per = a->cell == PD_RNN_LSTM ? 3 : a->cell == PD_RNN_GRU ? 2 : 1;
        if (acts->type != PD_A_STRINGS || acts->n != per * a->ndir)
            return pd__err(PD_ERR_INVALID, "attribute activations has %d values, expected %d", acts->n, per * a->ndir);
        const char *s = acts->s;
        for (int k = 0; k < acts->n; k++, s += strlen(s) + 1) {
            const char *want = default_act(a->cell, k % per);
            if (!same_name(s, want))
                return pd__err(PD_ERR_UNSUPPORTED,
                               "attribute activations: '%s' at %d is not supported (only the default %s)", s, k, want);
        }
    }
    return PD_OK;
}

static pd_status check_shape(pd_graph *g, pd__node *n, const pd__tensor *t, const char *what, int nd,
                             const int64_t *want) {
    bool ok = t->ndim == nd;
    for (int i = 0; ok && i < nd; i++) ok = t->shape[i] == want[i];
    if (!ok) {
        char w[160];
        pd__format_shape(w, sizeof w, nd, want);
        return pd__node_err(g, n, PD_ERR_SHAPE, "%s '%s' is %s, expected %s", what, t->name, shp(t).s, w);
    }
    return PD_OK;
}

static pd_status rnn_shape(pd_graph *g, pd__node *n) {
    pd__rnn_attrs a;
    pd_status st = pd__rnn_attrs_read(n, &a);
    if (st != PD_OK) {
        pd__err_prefix("%s: node '%s' (%s)", g->path, n->name, n->op_type);
        return st;
    }
    pd__tensor *x = pd__in(g, n, 0), *w = pd__in(g, n, 1), *r = pd__in(g, n, 2), *b = pd__in(g, n, 3);
    pd__tensor *sl = pd__in(g, n, 4), *h0 = pd__in(g, n, 5);
    bool lstm = a.cell == PD_RNN_LSTM;
    pd__tensor *c0 = lstm ? pd__in(g, n, 6) : NULL, *p = lstm ? pd__in(g, n, 7) : NULL; /* P: peepholes */
    if (!x || !w || !r) return pd__node_err(g, n, PD_ERR_INVALID, "inputs X, W and R are required");
    int maxin = a.cell == PD_RNN_LSTM ? 8 : 6, maxout = a.cell == PD_RNN_LSTM ? 3 : 2;
    if (n->nin > maxin || n->nout > maxout)
        return pd__node_err(g, n, PD_ERR_INVALID, "%d inputs and %d outputs (at most %d and %d)", n->nin, n->nout,
                            maxin, maxout);
    if (x->dtype != PD_FLOAT && x->dtype != PD_DOUBLE)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "X '%s' has dtype %s (float and double are supported)", x->name,
                            pd_dtype_name(x->dtype));
    const pd__tensor *same[6] = {w, r, b, h0, c0, p};
    for (int i = 0; i < 6; i++)
        if (same[i] && same[i]->dtype != x->dtype)
            return pd__node_err(g, n, PD_ERR_SHAPE, "'%s' has dtype %s, X has %s", same[i]->name,
                                pd_dtype_name(same[i]->dtype), pd_dtype_name(x->dtype));
    if (x->ndim != 3) return pd__node_err(g, n, PD_ERR_SHAPE, "X '%s' is %s, expected rank 3", x->name, shp(x).s);
    if (r->ndim != 3) return pd__node_err(g, n, PD_ERR_SHAPE, "R '%s' is %s, expected rank 3", r->name, shp(r).s);
    int64_t S = x->shape[a.layout ? 1 : 0], N = x->shape[a.layout ? 0 : 1], I = x->shape[2];
    int64_t H = a.hidden > 0 ? a.hidden : r->shape[2], G = a.gates, D = a.ndir;
    int64_t ws[3] = {D, G * H, I}, rs[3] = {D, G * H, H}, bs[2] = {D, 2 * G * H}, ls[1] = {N};
    int64_t hs[3] = {D, N, H};
    if (a.layout) hs[0] = N, hs[1] = D;
    PD_TRY(check_shape(g, n, w, "W", 3, ws));
    PD_TRY(check_shape(g, n, r, "R", 3, rs));
    if (b) PD_TRY(check_shape(g, n, b, "B", 2, bs));
    if (h0) PD_TRY(check_shape(g, n, h0, "initial_h", 3, hs));
    if (c0) PD_TRY(check_shape(g, n, c0, "initial_c", 3, hs));
    int64_t ps[2] = {D, 3 * H};
    if (p) PD_TRY(check_shape(g, n, p, "P", 2, ps));
    if (sl) {
        if (sl->dtype != PD_INT32 && sl->dtype != PD_INT64)
            return pd__node_err(g, n, PD_ERR_SHAPE, "sequence_lens '%s' has dtype %s, expected int32", sl->name,
                                pd_dtype_name(sl->dtype));
        PD_TRY(check_shape(g, n, sl, "sequence_lens", 1, ls));
        if (sl->data)
            for (int64_t i = 0; i < N; i++) {
                int64_t v = sl->dtype == PD_INT32 ? ((const int32_t *)sl->data)[i] : ((const int64_t *)sl->data)[i];
                if (v < 0 || v > S)
                    return pd__node_err(g, n, PD_ERR_INVALID, "sequence_lens[%lld] = %lld is outside [0, %lld]",
                                        (long long)i, (long long)v, (long long)S);
            }
    }
    int64_t ys[4] = {S, D, N, H};
    if (a.layout) ys[0] = N, ys[1] = S, ys[2] = D;
    for (int j = 0; j < n->nout; j++) {
        pd__tensor *t = pd__out(g, n, j);
        if (!t) continue;
        t->dtype = x->dtype;
        PD_TRY(pd__tensor_set_shape(g, t, j == 0 ? 4 : 3, j == 0 ? ys : hs));
    }
    return PD_OK;
}

/* Per step and direction: the gate products of X and H (2 flops a multiply-add)
 * and about 8 flops per gate element for the activations and the update. */
static double rnn_flops(const pd_graph *g, const pd__node *n) {
    pd__rnn_attrs a;
    const pd__tensor *x = cin(g, n, 0), *r = cin(g, n, 2);
    if (!x || !r || x->ndim != 3 || r->ndim != 3 || pd__rnn_attrs_read(n, &a) != PD_OK) return 0;
    double H = (double)r->shape[2], G = a.gates, rows = (double)x->shape[0] * (double)x->shape[1] * a.ndir;
    return rows * G * H * (2.0 * ((double)x->shape[2] + H) + 8);
}

pd_status pd__shape_LSTM(pd_graph *g, pd__node *n) { return rnn_shape(g, n); }
double pd__flops_LSTM(const pd_graph *g, const pd__node *n) { return rnn_flops(g, n); }
pd_status pd__shape_GRU(pd_graph *g, pd__node *n) { return rnn_shape(g, n); }
double pd__flops_GRU(const pd_graph *g, const pd__node *n) { return rnn_flops(g, n); }
pd_status pd__shape_RNN(pd_graph *g, pd__node *n) { return rnn_shape(g, n); }
double pd__flops_RNN(const pd_graph *g, const pd__node *n) { return rnn_flops(g, n); }
#undef cin
#undef pd__shp
#undef shp

/* ==== core/shape_tensor.c ==== */
#define set_out pd__shape_tensor_set_out
/* shape_tensor.c - shape rules and FLOP counts of the tensor ops: Flatten,
 * Reshape, Transpose, Concat, Split, Slice, Gather, Unsqueeze, Squeeze,
 * Expand, Pad, Constant, Shape, ConstantOfShape, Range, CumSum, CumProd,
 * Trilu, Size, Tile, OneHot, GatherElements, GatherND, ScatterElements,
 * ScatterND, ArgMax, ArgMin, TopK, Hardmax, DepthToSpace, SpaceToDepth,
 * EyeLike, Compress, ReverseSequence, NonZero; and the parameter
 * resolvers of shape_tensor.h, which the CPU kernels share.
 *
 * How it works: docs/INTERNALS.md, "core/shape_tensor.c".
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- core/shape_tensor.h ---- */
/* shape_tensor.h - parameters of the tensor ops (Transpose, Split, Slice, Pad,
 * Shape, Constant, ConstantOfShape, Range, CumSum, CumProd, Trilu, Tile,
 * OneHot, GatherND, the scatters, the arg/top-k selections, DepthToSpace,
 * SpaceToDepth, EyeLike, Compress, ReverseSequence, NonZero), resolved from
 * a node's attributes
 * and constant inputs.
 *
 * How it works: docs/INTERNALS.md, "core/shape_tensor.h".
 */
#ifndef PD_SHAPE_TENSOR_H
#define PD_SHAPE_TENSOR_H


/* axis in [-rank, rank) -> [0, rank); false when out of range. */
bool pd__norm_axis(int64_t axis, int rank, int *out);

/* Transpose: the permutation (attribute `perm`, default reversed), validated. */
pd_status pd__transpose_perm(const pd__node *n, int rank, int *perm);

/* Split: the axis and the size of each of the n->nout parts along it
 * (`sizes` has room for n->nout values). */
pd_status pd__split_sizes(const pd__node *n, pd_tensor *const *in, int *axis, int64_t *sizes);

/* Slice: for every axis of the input (rank = in[0]->ndim) the first element,
 * the step and the count of elements taken; unsliced axes get 0, 1, dim. */
typedef struct pd__slice_params {
    int64_t start[PD_MAX_DIMS];
    int64_t step[PD_MAX_DIMS];
    int64_t count[PD_MAX_DIMS];
} pd__slice_params;
pd_status pd__slice_resolve(const pd__node *n, pd_tensor *const *in, pd__slice_params *p);

/* Pad: mode and the pads before/after every axis (negative pads crop).
 * The constant value is not resolved here (the kernel reads it). */
typedef enum pd__pad_mode { PD_PAD_CONSTANT, PD_PAD_REFLECT, PD_PAD_EDGE, PD_PAD_WRAP } pd__pad_mode;
typedef struct pd__pad_params {
    pd__pad_mode mode;
    int64_t begin[PD_MAX_DIMS];
    int64_t end[PD_MAX_DIMS];
} pd__pad_params;
pd_status pd__pad_resolve(const pd__node *n, pd_tensor *const *in, pd__pad_params *p);

/* Shape (opset 15 start/end): the dims [*start, *end) of a rank-`rank` input. */
void pd__shape_span(const pd__node *n, int rank, int *start, int *end);

/* Constant: a view (dtype, shape, data) of the node's value; the data points
 * into the attribute (NULL when the value has no elements). */
pd_status pd__constant_value(const pd__node *n, pd_tensor *out);

/* ConstantOfShape: a view of the one-element fill value (float 0 when the
 * `value` attribute is absent; `zero` provides its storage). */
pd_status pd__constant_of_shape_value(const pd__node *n, pd_tensor *out, float *zero);

/* Range: the number of elements of Range(start, limit, delta) (scalars). */
pd_status pd__range_count(const pd_tensor *start, const pd_tensor *limit, const pd_tensor *delta, int64_t *count);

/* ---- mask-building, index, selection and layout ops ---------------------------------- */

/* CumSum: the axis (input 1, a constant or runtime scalar with data). */
pd_status pd__cumsum_axis(const pd_tensor *x, const pd_tensor *axis, int *out);

/* EyeLike: the output dtype (attribute dtype, else the input's `in`). */
pd_status pd__eyelike_dtype(const pd__node *n, pd_dtype in, pd_dtype *out);

/* Compress: the axis (-1 when absent: the input flattened), how many of its
 * positions the condition covers (*len) and keeps (*kept). The condition
 * (input 1) must have data; a true past the axis is an error. */
pd_status pd__compress_params(const pd__node *n, pd_tensor *const *in, int *axis, int64_t *len, int64_t *kept);

/* ReverseSequence: the time and batch axes (0 and 1, either way); the
 * sequence lengths (input 1) are checked against the time axis when known. */
pd_status pd__reverse_sequence_params(const pd__node *n, pd_tensor *const *in, int *time_axis, int *batch_axis);

/* NonZero: the count of non-zero elements of x (which has data). */
int64_t pd__count_nonzero(const pd_tensor *x);

/* Trilu: k (optional input 1, default 0). */
pd_status pd__trilu_k(const pd__node *n, pd_tensor *const *in, int64_t *k);

/* Tile: the repeats (input 1, one per axis of in[0], each >= 0; Tile-1:
 * inputs tiles and axis, the one axis repeated). */
pd_status pd__tile_repeats(const pd__node *n, pd_tensor *const *in, int64_t *rep);

/* OneHot: the axis of the output (rank in[0]->ndim + 1) and the depth. */
pd_status pd__onehot_params(const pd__node *n, pd_tensor *const *in, int *axis, int64_t *depth);

/* ArgMax, ArgMin, Hardmax, TopK: the axis of a rank-`rank` input
 * (attribute `axis`, default `def`). */
pd_status pd__reduce_axis(const pd__node *n, int rank, int64_t def, int *axis);

/* TopK: the axis and k (attribute before opset 10, constant input after). */
pd_status pd__topk_params(const pd__node *n, pd_tensor *const *in, int *axis, int64_t *k);

/* GatherND: batch_dims and the length m of an index tuple (indices' last dim). */
pd_status pd__gathernd_params(const pd__node *n, const pd_tensor *data, const pd_tensor *ind, int *batch, int *m);

/* ScatterElements, ScatterND: the reduction attribute. */
typedef enum pd__scatter_red { PD_RED_NONE, PD_RED_ADD, PD_RED_MUL, PD_RED_MAX, PD_RED_MIN } pd__scatter_red;
pd_status pd__scatter_reduction(const pd__node *n, pd__scatter_red *r);

/* DepthToSpace, SpaceToDepth: the six-dim box the output walks, in output
 * order, and the input stride (in elements) of each of its dims; the output
 * shape is written to oshape (rank 4). */
pd_status pd__space_depth_walk(const pd__node *n, const pd_tensor *x, bool to_space, int64_t *box, int64_t *istride,
                               int64_t *oshape);

/* DFT over one axis of x (rank r, the last dim 1 real or 2 complex): outer
 * and inner are the products of the dims before and after the axis (not the
 * last); lin the input's length on the axis, n the transform's length, m the
 * output's; cin and cout the last dims. inverse with onesided reads a half
 * spectrum and writes a real signal. len and axis (the inputs, NULL when
 * absent) must have data. */
typedef struct pd__dft {
    int axis, cin, cout;
    int64_t outer, inner, lin, n, m;
    bool inverse, onesided;
} pd__dft;
pd_status pd__dft_plan(const pd__node *n, const pd_tensor *x, const pd_tensor *len, const pd_tensor *axis, pd__dft *p);

/* STFT of signal (batch, length, 1 or 2): frames of frame_len every step, each
 * bins long in the output (batch, frames, bins, 2). */
typedef struct pd__stft {
    int64_t batch, length, step, frame_len, frames, bins;
    int c;
} pd__stft;
pd_status pd__stft_plan(const pd__node *n, const pd_tensor *x, const pd_tensor *step, const pd_tensor *window,
                        const pd_tensor *frame_len, pd__stft *p);

/* NonMaxSuppression's selected (batch, class, box) triples, written to sel
 * (3 per selection; NULL: only count them) in the spec's order, their count
 * to *count; in holds the nin inputs (NULL when absent), all with data. */
pd_status pd__nms_select(const pd__node *n, const pd_tensor *const *in, int nin, int64_t *sel, int64_t *count);

/* Unique over x (data required): the number of unique values (or slices
 * along the axis attribute) to *count, the axis to *axis (-1: flattened);
 * with out (Y, indices, inverse_indices, counts; NULL when absent) writes
 * them too. */
pd_status pd__unique_run(const pd__node *n, const pd_tensor *x, int *axis, int64_t *count, pd_tensor *const *out,
                         int nout);

/* TfIdfVectorizer: checks the attributes (integer pool only: pool_strings
 * and string inputs are not supported) and gives the output's width,
 * max(ngram_indexes) + 1. Sets the message without the node prefix. */
pd_status pd__tfidf_width(const pd__node *n, int64_t *width);

#endif
/* ---- end of core/shape_tensor.h ---- */

#define MAX_VIEWS 8 /* most inputs of an op that reads constant inputs (Slice: 5) */

/* ---- small helpers ---------------------------------------------------------- */

static int64_t view_numel(const pd_tensor *t) {
    int64_t k = 1;
    for (int i = 0; i < t->ndim; i++) k *= t->shape[i];
    return k;
}

static bool is_int_dtype(pd_dtype t) {
    return t == PD_INT8 || t == PD_INT16 || t == PD_INT32 || t == PD_INT64 || t == PD_UINT8 || t == PD_UINT16 ||
           t == PD_UINT32 || t == PD_UINT64;
}

static bool is_float_dtype(pd_dtype t) {
    return t == PD_FLOAT || t == PD_DOUBLE || t == PD_FLOAT16 || t == PD_BFLOAT16;
}

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Reads a 1-D (or scalar) int32/int64 tensor of at most `max` values. */
static pd_status read_ints(const pd_tensor *t, const char *what, int max, int64_t *v, int *count) {
    int64_t k = view_numel(t);
    if (t->data == NULL && k > 0)
        return pd__err(PD_ERR_UNSUPPORTED, "%s must be constant (dynamic shapes are not supported)", what);
    if (t->dtype != PD_INT64 && t->dtype != PD_INT32)
        return pd__err(PD_ERR_SHAPE, "%s must be int64 or int32, not %s", what, pd_dtype_name(t->dtype));
    if (t->ndim > 1) return pd__err(PD_ERR_SHAPE, "%s must be 1-D, got rank %d", what, t->ndim);
    if (k > max) return pd__err(PD_ERR_SHAPE, "%s has %lld values, at most %d allowed", what, (long long)k, max);
    for (int64_t i = 0; i < k; i++) v[i] = pd__get_i(t->dtype, t->data, i);
    *count = (int)k;
    return PD_OK;
}

/* Reads an ints attribute of at most `max` values; *count = -1 when absent. */
static pd_status read_attr_ints(const pd__node *n, const char *name, int max, int64_t *v, int *count) {
    const int64_t *a;
    int k = pd__attr_ints(n, name, &a);
    const pd__attr *at = pd__attr_get(n, name);
    if (at == NULL) {
        *count = -1;
        return PD_OK;
    }
    if (at->type != PD_A_INTS) return pd__err(PD_ERR_INVALID, "attribute %s must be a list of ints", name);
    if (k > max) return pd__err(PD_ERR_SHAPE, "attribute %s has %d values, at most %d allowed", name, k, max);
    for (int i = 0; i < k; i++) v[i] = a[i];
    *count = k;
    return PD_OK;
}

/* Normalizes `k` axes against `rank` in place, rejecting duplicates. */
static pd_status norm_axes(const char *what, int64_t *axes, int k, int rank) {
    bool seen[PD_MAX_DIMS] = {false};
    for (int i = 0; i < k; i++) {
        int a;
        if (!pd__norm_axis(axes[i], rank, &a))
            return pd__err(PD_ERR_SHAPE, "%s value %lld out of range for rank %d", what, (long long)axes[i], rank);
        if (seen[a]) return pd__err(PD_ERR_SHAPE, "%s repeats axis %d", what, a);
        seen[a] = true;
        axes[i] = a;
    }
    return PD_OK;
}

static const pd_tensor *view_in(const pd__node *n, pd_tensor *const *in, int i) { return i < n->nin ? in[i] : NULL; }

/* ---- parameter resolvers (shape_tensor.h) ------------------------------------ */

bool pd__norm_axis(int64_t axis, int rank, int *out) {
    if (axis < -(int64_t)rank || axis >= rank) return false;
    *out = (int)(axis < 0 ? axis + rank : axis);
    return true;
}

pd_status pd__transpose_perm(const pd__node *n, int rank, int *perm) {
    const int64_t *p;
    int k = pd__attr_ints(n, "perm", &p);
    if (pd__attr_get(n, "perm") == NULL) {
        for (int i = 0; i < rank; i++) perm[i] = rank - 1 - i;
        return PD_OK;
    }
    if (k != rank) return pd__err(PD_ERR_SHAPE, "perm has %d entries but the input has rank %d", k, rank);
    bool seen[PD_MAX_DIMS] = {false};
    for (int i = 0; i < k; i++) {
        if (p[i] < 0 || p[i] >= rank || seen[p[i]])
            return pd__err(PD_ERR_SHAPE, "perm is not a permutation of 0..%d (entry %d is %lld)", rank - 1, i,
                           (long long)p[i]);
        seen[p[i]] = true;
        perm[i] = (int)p[i];
    }
    return PD_OK;
}

pd_status pd__split_sizes(const pd__node *n, pd_tensor *const *in, int *axis, int64_t *sizes) {
    const pd_tensor *x = in[0], *s = view_in(n, in, 1);
    int nout = n->nout;
    int64_t ax = pd__attr_i(n, "axis", 0);
    if (!pd__norm_axis(ax, x->ndim, axis))
        return pd__err(PD_ERR_SHAPE, "axis %lld out of range for rank %d", (long long)ax, x->ndim);
    int64_t dim = x->shape[*axis];
    const int64_t *sa;
    int ka = pd__attr_ints(n, "split", &sa);
    if (s != NULL && view_numel(s) > 0) {
        int64_t k = view_numel(s);
        if (s->data == NULL)
            return pd__err(PD_ERR_UNSUPPORTED, "split must be constant (dynamic shapes are not supported)");
        if (!is_int_dtype(s->dtype))
            return pd__err(PD_ERR_SHAPE, "split must be int64, not %s", pd_dtype_name(s->dtype));
        if (k != nout) return pd__err(PD_ERR_SHAPE, "split has %lld values for %d outputs", (long long)k, nout);
        for (int i = 0; i < nout; i++) sizes[i] = pd__get_i(s->dtype, s->data, i);
    } else if (pd__attr_get(n, "split") != NULL && ka > 0) {
        if (ka != nout) return pd__err(PD_ERR_SHAPE, "split has %d values for %d outputs", ka, nout);
        for (int i = 0; i < nout; i++) sizes[i] = sa[i];
    } else {
        int64_t parts = pd__attr_i(n, "num_outputs", nout);
        if (parts != nout)
            return pd__err(PD_ERR_SHAPE, "num_outputs is %lld but the node has %d outputs", (long long)parts, nout);
        if (nout < 1) return pd__err(PD_ERR_INVALID, "no outputs");
        int64_t div = dim / nout;
        if (dim % nout != 0) {
            if (n->opset < 18)
                return pd__err(PD_ERR_SHAPE, "cannot split a dim of %lld into %d equal parts", (long long)dim, nout);
            div += 1; /* opset 18: the last chunk is smaller */
        }
        for (int i = 0; i < nout; i++) sizes[i] = div;
        sizes[nout - 1] = dim - div * (nout - 1);
        if (sizes[nout - 1] < 0)
            return pd__err(PD_ERR_SHAPE, "cannot split a dim of %lld into %d parts", (long long)dim, nout);
    }
    int64_t sum = 0;
    for (int i = 0; i < nout; i++) {
        if (sizes[i] < 0) return pd__err(PD_ERR_SHAPE, "split[%d] = %lld is negative", i, (long long)sizes[i]);
        if (__builtin_add_overflow(sum, sizes[i], &sum)) return pd__err(PD_ERR_SHAPE, "split sizes overflow");
    }
    if (sum != dim)
        return pd__err(PD_ERR_SHAPE, "split sizes add up to %lld but axis %d has %lld", (long long)sum, *axis,
                       (long long)dim);
    return PD_OK;
}

pd_status pd__slice_resolve(const pd__node *n, pd_tensor *const *in, pd__slice_params *p) {
    const pd_tensor *x = in[0];
    int r = x->ndim;
    for (int d = 0; d < r; d++) {
        p->start[d] = 0;
        p->step[d] = 1;
        p->count[d] = x->shape[d];
    }
    int64_t st[PD_MAX_DIMS], en[PD_MAX_DIMS], ax[PD_MAX_DIMS], sp[PD_MAX_DIMS];
    int ks, ke, ka = -1, kp = -1;
    const pd_tensor *ts = view_in(n, in, 1), *te = view_in(n, in, 2);
    if (ts == NULL && te == NULL) { /* opset < 10: attributes */
        PD_TRY(read_attr_ints(n, "starts", PD_MAX_DIMS, st, &ks));
        PD_TRY(read_attr_ints(n, "ends", PD_MAX_DIMS, en, &ke));
        PD_TRY(read_attr_ints(n, "axes", PD_MAX_DIMS, ax, &ka));
        if (ks < 0 || ke < 0) return pd__err(PD_ERR_INVALID, "missing starts or ends");
    } else {
        if (ts == NULL || te == NULL) return pd__err(PD_ERR_INVALID, "missing starts or ends input");
        const pd_tensor *ta = view_in(n, in, 3), *tp = view_in(n, in, 4);
        PD_TRY(read_ints(ts, "starts", PD_MAX_DIMS, st, &ks));
        PD_TRY(read_ints(te, "ends", PD_MAX_DIMS, en, &ke));
        if (ta) PD_TRY(read_ints(ta, "axes", PD_MAX_DIMS, ax, &ka));
        if (tp) PD_TRY(read_ints(tp, "steps", PD_MAX_DIMS, sp, &kp));
    }
    if (ke != ks) return pd__err(PD_ERR_SHAPE, "starts has %d values but ends has %d", ks, ke);
    if (ka < 0) {
        if (ks > r) return pd__err(PD_ERR_SHAPE, "starts has %d values for rank %d", ks, r);
        for (int i = 0; i < ks; i++) ax[i] = i;
    } else if (ka != ks) {
        return pd__err(PD_ERR_SHAPE, "axes has %d values but starts has %d", ka, ks);
    }
    if (kp < 0)
        for (int i = 0; i < ks; i++) sp[i] = 1;
    else if (kp != ks)
        return pd__err(PD_ERR_SHAPE, "steps has %d values but starts has %d", kp, ks);
    PD_TRY(norm_axes("axes", ax, ks, r));
    for (int i = 0; i < ks; i++) {
        int a = (int)ax[i];
        int64_t dim = x->shape[a], s = st[i], e = en[i], k = sp[i], c = 0;
        if (k == 0) return pd__err(PD_ERR_SHAPE, "steps[%d] is 0", i);
        if (s < 0) s += dim;
        if (e < 0) e += dim;
        if (k > 0) {
            s = clamp64(s, 0, dim);
            e = clamp64(e, 0, dim);
            if (e > s) c = (e - s - 1) / k + 1;
        } else {
            s = clamp64(s, 0, dim - 1);
            e = clamp64(e, -1, dim - 1);
            if (s > e) c = (int64_t)((uint64_t)(s - e - 1) / ((uint64_t)0 - (uint64_t)k)) + 1;
        }
        if (dim == 0) s = 0, c = 0;
        p->start[a] = s;
        p->step[a] = k;
        p->count[a] = c;
    }
    return PD_OK;
}

pd_status pd__pad_resolve(const pd__node *n, pd_tensor *const *in, pd__pad_params *p) {
    const pd_tensor *x = in[0];
    int r = x->ndim;
    const char *mode = pd__attr_s(n, "mode", "constant");
    if (strcmp(mode, "constant") == 0)
        p->mode = PD_PAD_CONSTANT;
    else if (strcmp(mode, "reflect") == 0)
        p->mode = PD_PAD_REFLECT;
    else if (strcmp(mode, "edge") == 0)
        p->mode = PD_PAD_EDGE;
    else if (strcmp(mode, "wrap") == 0)
        p->mode = PD_PAD_WRAP;
    else
        return pd__err(PD_ERR_UNSUPPORTED, "unknown pad mode '%s'", mode);

    int64_t pads[2 * PD_MAX_DIMS], axes[PD_MAX_DIMS];
    int kp, ka = -1;
    const pd_tensor *tp = view_in(n, in, 1), *ta = view_in(n, in, 3);
    if (tp == NULL) { /* opset < 11: attribute (`paddings` in opset 1) */
        PD_TRY(read_attr_ints(n, "pads", 2 * PD_MAX_DIMS, pads, &kp));
        if (kp < 0) PD_TRY(read_attr_ints(n, "paddings", 2 * PD_MAX_DIMS, pads, &kp));
        if (kp < 0) return pd__err(PD_ERR_INVALID, "missing pads");
    } else {
        PD_TRY(read_ints(tp, "pads", 2 * PD_MAX_DIMS, pads, &kp));
    }
    if (ta) PD_TRY(read_ints(ta, "axes", PD_MAX_DIMS, axes, &ka));
    if (ka < 0) {
        ka = r;
        for (int i = 0; i < r; i++) axes[i] = i;
    }
    if (kp != 2 * ka) return pd__err(PD_ERR_SHAPE, "pads has %d values, expected %d (2 per axis)", kp, 2 * ka);
    PD_TRY(norm_axes("axes", axes, ka, r));
    for (int d = 0; d < r; d++) p->begin[d] = p->end[d] = 0;
    for (int i = 0; i < ka; i++) {
        p->begin[axes[i]] = pads[i];
        p->end[axes[i]] = pads[i + ka];
    }
    for (int d = 0; d < r; d++) {
        int64_t dim = x->shape[d], o;
        if (__builtin_add_overflow(dim, p->begin[d], &o) || __builtin_add_overflow(o, p->end[d], &o))
            return pd__err(PD_ERR_SHAPE, "pads of axis %d overflow", d);
        if (o < 0)
            return pd__err(PD_ERR_SHAPE, "pads %lld, %lld crop axis %d of size %lld below 0", (long long)p->begin[d],
                           (long long)p->end[d], d, (long long)dim);
        if (p->mode != PD_PAD_CONSTANT && dim == 0 && o > 0)
            return pd__err(PD_ERR_SHAPE, "cannot pad the empty axis %d in %s mode", d, mode);
    }
    return PD_OK;
}

void pd__shape_span(const pd__node *n, int rank, int *start, int *end) {
    int64_t s = pd__attr_i(n, "start", 0), e = pd__attr_i(n, "end", rank);
    if (s < 0) s += rank;
    if (e < 0) e += rank;
    s = clamp64(s, 0, rank);
    e = clamp64(e, 0, rank);
    if (e < s) e = s;
    *start = (int)s;
    *end = (int)e;
}

pd_status pd__constant_value(const pd__node *n, pd_tensor *out) {
    for (int i = 0; i < n->nattr; i++) {
        const pd__attr *a = &n->attr[i];
        pd_tensor v;
        memset(&v, 0, sizeof v);
        if (strcmp(a->name, "value") == 0) {
            if (a->type != PD_A_TENSOR || a->t == NULL)
                return pd__err(PD_ERR_INVALID, "attribute value is not a tensor");
            v = *a->t;
            if (pd_dtype_size(v.dtype) == 0)
                return pd__err(PD_ERR_UNSUPPORTED, "constants of dtype %s are not supported", pd_dtype_name(v.dtype));
        } else if (strcmp(a->name, "value_float") == 0) {
            v.dtype = PD_FLOAT;
            v.data = (void *)&a->f;
        } else if (strcmp(a->name, "value_floats") == 0) {
            v.dtype = PD_FLOAT;
            v.ndim = 1;
            v.shape[0] = a->n;
            v.data = a->floats;
        } else if (strcmp(a->name, "value_int") == 0) {
            v.dtype = PD_INT64;
            v.data = (void *)&a->i;
        } else if (strcmp(a->name, "value_ints") == 0) {
            v.dtype = PD_INT64;
            v.ndim = 1;
            v.shape[0] = a->n;
            v.data = a->ints;
        } else if (strncmp(a->name, "value_string", 12) == 0 || strcmp(a->name, "sparse_value") == 0) {
            return pd__err(PD_ERR_UNSUPPORTED, "Constant with %s is not supported", a->name);
        } else {
            continue;
        }
        if (view_numel(&v) > 0 && v.data == NULL) return pd__err(PD_ERR_INVALID, "attribute %s has no data", a->name);
        *out = v;
        return PD_OK;
    }
    return pd__err(PD_ERR_INVALID, "Constant has no value attribute");
}

pd_status pd__constant_of_shape_value(const pd__node *n, pd_tensor *out, float *zero) {
    const pd__attr *a = pd__attr_get(n, "value");
    if (a == NULL) {
        *zero = 0.0f;
        pd_tensor v;
        memset(&v, 0, sizeof v);
        v.dtype = PD_FLOAT;
        v.data = zero;
        *out = v;
        return PD_OK;
    }
    if (a->type != PD_A_TENSOR || a->t == NULL) return pd__err(PD_ERR_INVALID, "attribute value is not a tensor");
    if (pd_dtype_size(a->t->dtype) == 0)
        return pd__err(PD_ERR_UNSUPPORTED, "value of dtype %s is not supported", pd_dtype_name(a->t->dtype));
    if (view_numel(a->t) != 1 || a->t->data == NULL)
        return pd__err(PD_ERR_SHAPE, "value must have one element, has %lld", (long long)view_numel(a->t));
    *out = *a->t;
    return PD_OK;
}

pd_status pd__range_count(const pd_tensor *start, const pd_tensor *limit, const pd_tensor *delta, int64_t *count) {
    const pd_tensor *t[3] = {start, limit, delta};
    const char *names[3] = {"start", "limit", "delta"};
    for (int i = 0; i < 3; i++) {
        if (t[i] == NULL) return pd__err(PD_ERR_INVALID, "missing input %s", names[i]);
        if (view_numel(t[i]) != 1)
            return pd__err(PD_ERR_SHAPE, "%s must be a scalar, has %lld elements", names[i],
                           (long long)view_numel(t[i]));
        if (t[i]->data == NULL)
            return pd__err(PD_ERR_UNSUPPORTED, "%s must be constant (dynamic shapes are not supported)", names[i]);
        if (t[i]->dtype != start->dtype)
            return pd__err(PD_ERR_SHAPE, "%s is %s but start is %s", names[i], pd_dtype_name(t[i]->dtype),
                           pd_dtype_name(start->dtype));
    }
    pd_dtype dt = start->dtype;
    if (is_float_dtype(dt)) {
        double s = pd__get_f(dt, start->data, 0), l = pd__get_f(dt, limit->data, 0), d = pd__get_f(dt, delta->data, 0);
        if (d == 0 || !isfinite(s) || !isfinite(l) || !isfinite(d))
            return pd__err(PD_ERR_SHAPE, "range(%g, %g, %g) is not finite", s, l, d);
        double c = ceil((l - s) / d);
        if (!(c > 0)) c = 0;
        if (c > 9.0e15) return pd__err(PD_ERR_SHAPE, "range(%g, %g, %g) is too long", s, l, d);
        *count = (int64_t)c;
    } else if (is_int_dtype(dt)) {
        int64_t s = pd__get_i(dt, start->data, 0), l = pd__get_i(dt, limit->data, 0), d = pd__get_i(dt, delta->data, 0);
        int64_t diff;
        if (d == 0) return pd__err(PD_ERR_SHAPE, "delta is 0");
        if (__builtin_sub_overflow(l, s, &diff))
            return pd__err(PD_ERR_SHAPE, "range(%lld, %lld) overflows", (long long)s, (long long)l);
        if (diff == 0 || (diff > 0) != (d > 0)) {
            *count = 0;
        } else {
            int64_t q = diff / d; /* diff and d have one sign: q > 0 unless |d| > |diff| */
            if (diff % d != 0) q += 1;
            *count = q;
        }
    } else {
        return pd__err(PD_ERR_UNSUPPORTED, "Range of %s is not supported", pd_dtype_name(dt));
    }
    return PD_OK;
}

pd_status pd__cumsum_axis(const pd_tensor *x, const pd_tensor *axis, int *out) {
    if (axis == NULL) return pd__err(PD_ERR_INVALID, "missing input axis");
    if (axis->dtype != PD_INT64 && axis->dtype != PD_INT32)
        return pd__err(PD_ERR_SHAPE, "axis must be int64 or int32, not %s", pd_dtype_name(axis->dtype));
    if (view_numel(axis) != 1 || axis->ndim > 1) return pd__err(PD_ERR_SHAPE, "axis must be a scalar");
    if (axis->data == NULL) return pd__err(PD_ERR_UNSUPPORTED, "axis must be constant");
    int64_t a = pd__get_i(axis->dtype, axis->data, 0);
    if (!pd__norm_axis(a, x->ndim, out))
        return pd__err(PD_ERR_SHAPE, "axis %lld out of range for rank %d", (long long)a, x->ndim);
    return PD_OK;
}

pd_status pd__eyelike_dtype(const pd__node *n, pd_dtype in, pd_dtype *out) {
    int64_t dt = pd__attr_i(n, "dtype", (int64_t)in);
    pd_dtype d = (pd_dtype)dt;
    bool ok = dt > 0 && dt <= PD_BFLOAT16 && d != PD_STRING && pd_dtype_size(d) > 0;
    if (!ok) return pd__err(PD_ERR_UNSUPPORTED, "dtype %lld is not supported", (long long)dt);
    *out = d;
    return PD_OK;
}

pd_status pd__compress_params(const pd__node *n, pd_tensor *const *in, int *axis, int64_t *len, int64_t *kept) {
    const pd_tensor *x = in[0], *c = view_in(n, in, 1);
    if (c == NULL) return pd__err(PD_ERR_INVALID, "missing input condition");
    if (c->dtype != PD_BOOL) return pd__err(PD_ERR_SHAPE, "condition must be bool, not %s", pd_dtype_name(c->dtype));
    if (c->ndim != 1) return pd__err(PD_ERR_SHAPE, "condition must be 1-D, has rank %d", c->ndim);
    *axis = -1;
    int64_t dim = view_numel(x);
    if (pd__attr_get(n, "axis") != NULL) {
        int64_t a = pd__attr_i(n, "axis", 0);
        if (!pd__norm_axis(a, x->ndim, axis))
            return pd__err(PD_ERR_SHAPE, "axis %lld out of range for rank %d", (long long)a, x->ndim);
        dim = x->shape[*axis];
    }
    if (c->data == NULL && c->shape[0] > 0)
        return pd__err(PD_ERR_UNSUPPORTED, "condition must be a constant: the output's shape depends on its values");
    const uint8_t *v = (const uint8_t *)c->data;
    *kept = 0;
    for (int64_t i = 0; i < c->shape[0]; i++) {
        if (!v[i]) continue;
        if (i >= dim) /* numpy's compress refuses this too */
            return pd__err(PD_ERR_SHAPE, "condition selects index %lld of an axis of %lld", (long long)i,
                           (long long)dim);
        ++*kept;
    }
    *len = c->shape[0] < dim ? c->shape[0] : dim;
    return PD_OK;
}

pd_status pd__reverse_sequence_params(const pd__node *n, pd_tensor *const *in, int *time_axis, int *batch_axis) {
    const pd_tensor *x = in[0], *l = view_in(n, in, 1);
    if (x->ndim < 2) return pd__err(PD_ERR_SHAPE, "input must have rank >= 2, has %d", x->ndim);
    int64_t ta = pd__attr_i(n, "time_axis", 0), ba = pd__attr_i(n, "batch_axis", 1);
    if (!((ta == 0 && ba == 1) || (ta == 1 && ba == 0)))
        return pd__err(PD_ERR_INVALID, "time_axis %lld and batch_axis %lld (expected 0 and 1, either way)",
                       (long long)ta, (long long)ba);
    *time_axis = (int)ta;
    *batch_axis = (int)ba;
    if (l == NULL) return pd__err(PD_ERR_INVALID, "missing input sequence_lens");
    if (l->dtype != PD_INT64) return pd__err(PD_ERR_SHAPE, "sequence_lens must be int64, not %s", pd_dtype_name(l->dtype));
    if (l->ndim != 1 || l->shape[0] != x->shape[ba])
        return pd__err(PD_ERR_SHAPE, "sequence_lens must be 1-D of the batch size %lld", (long long)x->shape[ba]);
    for (int64_t b = 0; l->data != NULL && b < l->shape[0]; b++) {
        int64_t v = ((const int64_t *)l->data)[b];
        if (v < 0 || v > x->shape[ta])
            return pd__err(PD_ERR_INVALID, "sequence_lens[%lld] = %lld is outside [0, %lld]", (long long)b,
                           (long long)v, (long long)x->shape[ta]);
    }
    return PD_OK;
}

int64_t pd__count_nonzero(const pd_tensor *x) {
    int64_t k = 0, total = view_numel(x);
    size_t es = pd_dtype_size(x->dtype);
    const unsigned char *p = (const unsigned char *)x->data;
    for (int64_t i = 0; i < total; i++) {
        bool nz;
        if (x->dtype == PD_FLOAT || x->dtype == PD_DOUBLE || x->dtype == PD_FLOAT16 || x->dtype == PD_BFLOAT16)
            nz = pd__get_f(x->dtype, x->data, i) != 0; /* -0.0 is zero */
        else {
            nz = false;
            for (size_t b = 0; b < es; b++) nz |= p[(size_t)i * es + b] != 0;
        }
        k += nz;
    }
    return k;
}

pd_status pd__trilu_k(const pd__node *n, pd_tensor *const *in, int64_t *k) {
    const pd_tensor *t = view_in(n, in, 1);
    *k = 0;
    if (t == NULL) return PD_OK;
    if (t->dtype != PD_INT64) return pd__err(PD_ERR_SHAPE, "k must be int64, not %s", pd_dtype_name(t->dtype));
    if (view_numel(t) != 1) return pd__err(PD_ERR_SHAPE, "k must be a scalar");
    if (t->data == NULL) return pd__err(PD_ERR_UNSUPPORTED, "k must be constant");
    *k = pd__get_i(t->dtype, t->data, 0);
    return PD_OK;
}

pd_status pd__tile_repeats(const pd__node *n, pd_tensor *const *in, int64_t *rep) {
    const pd_tensor *x = in[0], *t = view_in(n, in, 1);
    if (t == NULL) return pd__err(PD_ERR_INVALID, "missing input repeats");
    int k;
    if (n->opset < 6) { /* Tile-1: inputs tiles and axis, scalars: one axis repeated */
        const pd_tensor *ta = view_in(n, in, 2);
        int64_t tiles, ax;
        int kt, ka, a;
        if (ta == NULL) return pd__err(PD_ERR_INVALID, "missing input axis");
        PD_TRY(read_ints(t, "tiles", 1, &tiles, &kt));
        PD_TRY(read_ints(ta, "axis", 1, &ax, &ka));
        if (kt != 1 || ka != 1) return pd__err(PD_ERR_SHAPE, "tiles and axis must be scalars");
        if (!pd__norm_axis(ax, x->ndim, &a))
            return pd__err(PD_ERR_SHAPE, "axis %lld out of range for rank %d", (long long)ax, x->ndim);
        for (int d = 0; d < x->ndim; d++) rep[d] = d == a ? tiles : 1;
        k = x->ndim;
    } else {
        PD_TRY(read_ints(t, "repeats", PD_MAX_DIMS, rep, &k));
    }
    if (k != x->ndim) return pd__err(PD_ERR_SHAPE, "repeats has %d values for rank %d", k, x->ndim);
    int big = 0;
    for (int d = 0; d < k; d++) {
        if (rep[d] < 0) return pd__err(PD_ERR_SHAPE, "repeats[%d] = %lld is negative", d, (long long)rep[d]);
        big += rep[d] != 1;
    }
    if (x->ndim + big > PD_MAX_DIMS) /* the walk has a dim per axis and one per repeated axis */
        return pd__err(PD_ERR_UNSUPPORTED, "rank %d with %d repeated axes exceeds %d walk dims", x->ndim, big,
                       PD_MAX_DIMS);
    return PD_OK;
}

pd_status pd__onehot_params(const pd__node *n, pd_tensor *const *in, int *axis, int64_t *depth) {
    const pd_tensor *ind = in[0], *d = view_in(n, in, 1);
    int r = ind->ndim + 1;
    int64_t ax = pd__attr_i(n, "axis", -1);
    if (r > PD_MAX_DIMS) return pd__err(PD_ERR_UNSUPPORTED, "output rank %d exceeds %d", r, PD_MAX_DIMS);
    if (!pd__norm_axis(ax, r, axis)) return pd__err(PD_ERR_SHAPE, "axis %lld out of range for rank %d", (long long)ax, r);
    if (d == NULL) return pd__err(PD_ERR_INVALID, "missing input depth");
    if (view_numel(d) != 1) return pd__err(PD_ERR_SHAPE, "depth must have one element");
    if (d->data == NULL) return pd__err(PD_ERR_UNSUPPORTED, "depth must be constant (dynamic shapes are not supported)");
    if (pd_dtype_size(d->dtype) == 0 || d->dtype == PD_BOOL)
        return pd__err(PD_ERR_SHAPE, "depth must be numeric, not %s", pd_dtype_name(d->dtype));
    double v = is_float_dtype(d->dtype) ? pd__get_f(d->dtype, d->data, 0) : (double)pd__get_i(d->dtype, d->data, 0);
    if (!(v >= 1 && v < 9.0e15)) return pd__err(PD_ERR_SHAPE, "depth %g is not a positive count", v);
    *depth = (int64_t)v;
    return PD_OK;
}

pd_status pd__reduce_axis(const pd__node *n, int rank, int64_t def, int *axis) {
    int64_t ax = pd__attr_i(n, "axis", def);
    if (!pd__norm_axis(ax, rank, axis))
        return pd__err(PD_ERR_SHAPE, "axis %lld out of range for rank %d", (long long)ax, rank);
    return PD_OK;
}

pd_status pd__topk_params(const pd__node *n, pd_tensor *const *in, int *axis, int64_t *k) {
    const pd_tensor *x = in[0], *t = view_in(n, in, 1);
    PD_TRY(pd__reduce_axis(n, x->ndim, -1, axis));
    if (x->ndim == 0) return pd__err(PD_ERR_SHAPE, "input must have rank >= 1");
    if (t == NULL) {
        if (pd__attr_get(n, "k") == NULL) return pd__err(PD_ERR_INVALID, "missing k");
        *k = pd__attr_i(n, "k", 0);
    } else {
        if (t->dtype != PD_INT64) return pd__err(PD_ERR_SHAPE, "K must be int64, not %s", pd_dtype_name(t->dtype));
        if (view_numel(t) != 1) return pd__err(PD_ERR_SHAPE, "K must have one element");
        if (t->data == NULL)
            return pd__err(PD_ERR_UNSUPPORTED, "K must be constant (a runtime K is a dynamic shape, not supported)");
        *k = pd__get_i(t->dtype, t->data, 0);
    }
    if (*k < 0 || *k > x->shape[*axis])
        return pd__err(PD_ERR_SHAPE, "k = %lld out of range [0, %lld]", (long long)*k, (long long)x->shape[*axis]);
    return PD_OK;
}

pd_status pd__gathernd_params(const pd__node *n, const pd_tensor *data, const pd_tensor *ind, int *batch, int *m) {
    int64_t b = pd__attr_i(n, "batch_dims", 0);
    if (ind->dtype != PD_INT64) return pd__err(PD_ERR_SHAPE, "indices must be int64, not %s", pd_dtype_name(ind->dtype));
    if (ind->ndim < 1 || data->ndim < 1) return pd__err(PD_ERR_SHAPE, "data and indices must have rank >= 1");
    if (b < 0 || b >= ind->ndim || b >= data->ndim)
        return pd__err(PD_ERR_SHAPE, "batch_dims %lld out of range for ranks %d, %d", (long long)b, data->ndim,
                       ind->ndim);
    int64_t k = ind->shape[ind->ndim - 1];
    if (k < 1 || k > data->ndim - b)
        return pd__err(PD_ERR_SHAPE, "indices' last dim %lld out of range [1, %lld]", (long long)k,
                       (long long)(data->ndim - b));
    for (int d = 0; d < b; d++)
        if (ind->shape[d] != data->shape[d])
            return pd__err(PD_ERR_SHAPE, "batch dim %d is %lld in indices but %lld in data", d, (long long)ind->shape[d],
                           (long long)data->shape[d]);
    *batch = (int)b;
    *m = (int)k;
    return PD_OK;
}

pd_status pd__scatter_reduction(const pd__node *n, pd__scatter_red *r) {
    static const char *names[] = {"none", "add", "mul", "max", "min"};
    const char *s = pd__attr_s(n, "reduction", "none");
    for (int i = 0; i < 5; i++)
        if (strcmp(s, names[i]) == 0) {
            *r = (pd__scatter_red)i;
            return PD_OK;
        }
    return pd__err(PD_ERR_UNSUPPORTED, "unknown reduction '%s'", s);
}

pd_status pd__space_depth_walk(const pd__node *n, const pd_tensor *x, bool to_space, int64_t *box, int64_t *istride,
                               int64_t *oshape) {
    int64_t b = pd__attr_i(n, "blocksize", 0);
    if (pd__attr_get(n, "blocksize") == NULL) return pd__err(PD_ERR_INVALID, "missing attribute blocksize");
    if (b < 1) return pd__err(PD_ERR_SHAPE, "blocksize %lld must be positive", (long long)b);
    if (x->ndim != 4) return pd__err(PD_ERR_SHAPE, "input must have rank 4, has %d", x->ndim);
    int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3];
    if (to_space) { /* out[n, c, h*b + i, w*b + j] = in[n, ch(c, i, j), h, w] */
        const char *mode = pd__attr_s(n, "mode", "DCR");
        bool dcr = strcmp(mode, "DCR") == 0;
        if (!dcr && strcmp(mode, "CRD") != 0) return pd__err(PD_ERR_UNSUPPORTED, "unknown mode '%s'", mode);
        if (C % (b * b) != 0)
            return pd__err(PD_ERR_SHAPE, "channels %lld not divisible by blocksize^2 = %lld", (long long)C,
                           (long long)(b * b));
        int64_t c2 = C / (b * b), hw = H * W;
        int64_t bx[6] = {N, c2, H, b, W, b};
        int64_t st[6] = {C * hw, dcr ? hw : b * b * hw, W, dcr ? b * c2 * hw : b * hw, 1, dcr ? c2 * hw : hw};
        memcpy(box, bx, sizeof bx);
        memcpy(istride, st, sizeof st);
        int64_t os[4] = {N, c2, H * b, W * b};
        memcpy(oshape, os, sizeof os);
    } else { /* out[n, (i*b + j)*C + c, h, w] = in[n, c, h*b + i, w*b + j] */
        if (H % b != 0 || W % b != 0)
            return pd__err(PD_ERR_SHAPE, "height %lld and width %lld must be multiples of blocksize %lld", (long long)H,
                           (long long)W, (long long)b);
        int64_t bx[6] = {N, b, b, C, H / b, W / b};
        int64_t st[6] = {C * H * W, W, 1, H * W, b * W, b};
        memcpy(box, bx, sizeof bx);
        memcpy(istride, st, sizeof st);
        int64_t os[4] = {N, C * b * b, H / b, W / b};
        memcpy(oshape, os, sizeof os);
    }
    return PD_OK;
}

/* ---- helpers of the shape rules ---------------------------------------------- */

/* Re-reports the current error (set by a resolver) as an error of node n. */
static pd_status node_fail(const pd_graph *g, const pd__node *n, pd_status s) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", pd_last_error());
    return pd__node_err(g, n, s, "%s", msg);
}

/* Input i, present and with a known shape. */
static pd_status need_in(pd_graph *g, pd__node *n, int i, const char *what, pd__tensor **out) {
    pd__tensor *t = pd__in(g, n, i);
    if (t == NULL) return pd__node_err(g, n, PD_ERR_INVALID, "missing input %d (%s)", i, what);
    if (t->ndim < 0) return pd__node_err(g, n, PD_ERR_SHAPE, "input %s has no known shape", t->name);
    *out = t;
    return PD_OK;
}

/* Like need_in, for an input whose elements the op moves (strings are not supported). */
static pd_status need_data(pd_graph *g, pd__node *n, int i, pd__tensor **out) {
    PD_TRY(need_in(g, n, i, "data", out));
    if (pd_dtype_size((*out)->dtype) == 0)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "dtype %s is not supported", pd_dtype_name((*out)->dtype));
    return PD_OK;
}

static pd_status set_out(pd_graph *g, pd__node *n, int i, pd_dtype dt, int ndim, const int64_t *shape) {
    pd__tensor *o = pd__out(g, n, i);
    if (o == NULL) return PD_OK; /* an unused optional output */
    for (int d = 0; d < ndim; d++)
        if (shape[d] < 0)
            return pd__node_err(g, n, PD_ERR_SHAPE, "output dim %d would be %lld", d, (long long)shape[d]);
    o->dtype = dt;
    return pd__tensor_set_shape(g, o, ndim, shape);
}

static bool is_const(const pd__tensor *t) {
    return (t->kind == PD_T_INIT || t->kind == PD_T_CONST) && (t->data != NULL || t->numel == 0);
}

/* Views of the node's inputs for a resolver; non-constant ones lose their data. */
static pd_status make_views(pd_graph *g, pd__node *n, pd_tensor *v, pd_tensor **vp) {
    if (n->nin > MAX_VIEWS) return pd__node_err(g, n, PD_ERR_INVALID, "too many inputs (%d)", n->nin);
    for (int i = 0; i < n->nin; i++) {
        pd__tensor *t = pd__in(g, n, i);
        vp[i] = NULL;
        if (t == NULL) continue;
        if (t->ndim < 0) return pd__node_err(g, n, PD_ERR_SHAPE, "input %s has no known shape", t->name);
        v[i] = pd__view(t);
        if (!is_const(t)) v[i].data = NULL;
        vp[i] = &v[i];
    }
    return PD_OK;
}

/* Reads constant input i as up to `max` ints. */
static pd_status const_ints(pd_graph *g, pd__node *n, int i, const char *what, int max, int64_t *v, int *count) {
    pd__tensor *t = NULL;
    PD_TRY(need_in(g, n, i, what, &t));
    pd_tensor view = pd__view(t);
    if (!is_const(t)) view.data = NULL;
    pd_status s = read_ints(&view, what, max, v, count);
    return s == PD_OK ? s : node_fail(g, n, s);
}

static pd_status bad_shape(pd_graph *g, pd__node *n, const char *what, const pd__tensor *x, int k,
                           const int64_t *shape) {
    char a[128], b[128];
    pd__format_shape(a, sizeof a, x->ndim, x->shape);
    pd__format_shape(b, sizeof b, k, shape);
    return pd__node_err(g, n, PD_ERR_SHAPE, "cannot %s %s into %s", what, a, b);
}

/* ---- shape rules --------------------------------------------------------------- */

pd_status pd__shape_Flatten(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL;
    PD_TRY(need_data(g, n, 0, &x));
    int r = x->ndim;
    int64_t axis = pd__attr_i(n, "axis", 1);
    if (axis < -(int64_t)r || axis > r)
        return pd__node_err(g, n, PD_ERR_SHAPE, "axis %lld out of range [-%d, %d]", (long long)axis, r, r);
    if (axis < 0) axis += r;
    int64_t shape[2] = {pd__shape_numel((int)axis, x->shape), pd__shape_numel(r - (int)axis, x->shape + axis)};
    return set_out(g, n, 0, x->dtype, 2, shape);
}

pd_status pd__shape_Reshape(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL;
    PD_TRY(need_data(g, n, 0, &x));
    int64_t shape[PD_MAX_DIMS];
    int k;
    if (pd__in(g, n, 1) == NULL && pd__attr_get(n, "shape") != NULL) { /* Reshape-1 */
        pd_status s = read_attr_ints(n, "shape", PD_MAX_DIMS, shape, &k);
        if (s != PD_OK) return node_fail(g, n, s);
    } else {
        PD_TRY(const_ints(g, n, 1, "shape", PD_MAX_DIMS, shape, &k));
    }
    bool allowzero = pd__attr_i(n, "allowzero", 0) != 0;
    int64_t total = pd__shape_numel(x->ndim, x->shape), known = 1;
    int infer = -1;
    for (int i = 0; i < k; i++) {
        if (shape[i] == -1) {
            if (infer >= 0) return pd__node_err(g, n, PD_ERR_SHAPE, "shape has more than one -1");
            infer = i;
            continue;
        }
        if (shape[i] < -1)
            return pd__node_err(g, n, PD_ERR_SHAPE, "shape[%d] = %lld is negative", i, (long long)shape[i]);
        if (shape[i] == 0 && !allowzero) {
            if (i >= x->ndim)
                return pd__node_err(g, n, PD_ERR_SHAPE, "shape[%d] = 0 copies a dim the input (rank %d) lacks", i,
                                    x->ndim);
            shape[i] = x->shape[i];
        }
        if (!pd__mul_ok(known, shape[i], &known)) return pd__node_err(g, n, PD_ERR_SHAPE, "shape overflows");
    }
    if (infer >= 0) {
        if (known == 0 || total % known != 0) {
            shape[infer] = -1;
            return bad_shape(g, n, "reshape", x, k, shape);
        }
        shape[infer] = total / known;
    } else if (known != total) {
        return bad_shape(g, n, "reshape", x, k, shape);
    }
    return set_out(g, n, 0, x->dtype, k, shape);
}

pd_status pd__shape_Transpose(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL;
    PD_TRY(need_data(g, n, 0, &x));
    int perm[PD_MAX_DIMS];
    pd_status s = pd__transpose_perm(n, x->ndim, perm);
    if (s != PD_OK) return node_fail(g, n, s);
    int64_t shape[PD_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) shape[i] = x->shape[perm[i]];
    return set_out(g, n, 0, x->dtype, x->ndim, shape);
}

pd_status pd__shape_Concat(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL;
    PD_TRY(need_data(g, n, 0, &x));
    const pd__attr *aa = pd__attr_get(n, "axis");
    if (aa == NULL && n->opset >= 4) return pd__node_err(g, n, PD_ERR_INVALID, "missing attribute axis");
    int64_t ax = pd__attr_i(n, "axis", 1);
    int r = x->ndim, axis;
    if (!pd__norm_axis(ax, r, &axis))
        return pd__node_err(g, n, PD_ERR_SHAPE, "axis %lld out of range for rank %d", (long long)ax, r);
    int64_t shape[PD_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    for (int i = 1; i < n->nin; i++) {
        pd__tensor *t = NULL;
        PD_TRY(need_data(g, n, i, &t));
        if (t->dtype != x->dtype)
            return pd__node_err(g, n, PD_ERR_SHAPE, "input %d is %s but input 0 is %s", i, pd_dtype_name(t->dtype),
                                pd_dtype_name(x->dtype));
        if (t->ndim != r)
            return pd__node_err(g, n, PD_ERR_SHAPE, "input %d has rank %d but input 0 has %d", i, t->ndim, r);
        for (int d = 0; d < r; d++)
            if (d != axis && t->shape[d] != x->shape[d])
                return pd__node_err(g, n, PD_ERR_SHAPE, "input %d has %lld at dim %d but input 0 has %lld", i,
                                    (long long)t->shape[d], d, (long long)x->shape[d]);
        if (__builtin_add_overflow(shape[axis], t->shape[axis], &shape[axis]))
            return pd__node_err(g, n, PD_ERR_SHAPE, "concatenated dim overflows");
    }
    return set_out(g, n, 0, x->dtype, r, shape);
}

pd_status pd__shape_Split(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL;
    PD_TRY(need_data(g, n, 0, &x));
    pd_tensor v[MAX_VIEWS], *vp[MAX_VIEWS];
    PD_TRY(make_views(g, n, v, vp));
    if (n->nout < 1) return pd__node_err(g, n, PD_ERR_INVALID, "no outputs");
    int64_t *sizes = (int64_t *)PD_MALLOC((size_t)n->nout * sizeof *sizes);
    if (sizes == NULL) return pd__node_err(g, n, PD_ERR_NOMEM, "out of memory");
    int axis = 0;
    pd_status s = pd__split_sizes(n, vp, &axis, sizes);
    if (s != PD_OK) s = node_fail(g, n, s);
    for (int i = 0; s == PD_OK && i < n->nout; i++) {
        int64_t shape[PD_MAX_DIMS];
        memcpy(shape, x->shape, sizeof shape);
        shape[axis] = sizes[i];
        s = set_out(g, n, i, x->dtype, x->ndim, shape);
    }
    PD_FREE(sizes);
    return s;
}

pd_status pd__shape_Slice(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL;
    PD_TRY(need_data(g, n, 0, &x));
    pd_tensor v[MAX_VIEWS], *vp[MAX_VIEWS];
    PD_TRY(make_views(g, n, v, vp));
    pd__slice_params p;
    pd_status s = pd__slice_resolve(n, vp, &p);
    if (s != PD_OK) return node_fail(g, n, s);
    return set_out(g, n, 0, x->dtype, x->ndim, p.count);
}

pd_status pd__shape_Gather(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL, *idx = NULL;
    PD_TRY(need_data(g, n, 0, &x));
    PD_TRY(need_in(g, n, 1, "indices", &idx));
    if (idx->dtype != PD_INT64 && idx->dtype != PD_INT32)
        return pd__node_err(g, n, PD_ERR_SHAPE, "indices must be int64 or int32, not %s", pd_dtype_name(idx->dtype));
    int64_t ax = pd__attr_i(n, "axis", 0);
    int axis = 0;
    if (!pd__norm_axis(ax, x->ndim, &axis))
        return pd__node_err(g, n, PD_ERR_SHAPE, "axis %lld out of range for rank %d", (long long)ax, x->ndim);
    int r = x->ndim - 1 + idx->ndim;
    if (r > PD_MAX_DIMS) return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "output rank %d exceeds %d", r, PD_MAX_DIMS);
    int64_t shape[PD_MAX_DIMS];
    int k = 0;
    for (int d = 0; d < axis; d++) shape[k++] = x->shape[d];
    for (int d = 0; d < idx->ndim; d++) shape[k++] = idx->shape[d];
    for (int d = axis + 1; d < x->ndim; d++) shape[k++] = x->shape[d];
    return set_out(g, n, 0, x->dtype, r, shape);
}

/* The axes of Squeeze/Unsqueeze: attribute before opset 13, input after.
 * *k = -1 when there are none. */
static pd_status squeeze_axes(pd_graph *g, pd__node *n, int64_t *axes, int *k) {
    if (pd__in(g, n, 1) != NULL) return const_ints(g, n, 1, "axes", PD_MAX_DIMS, axes, k);
    pd_status s = read_attr_ints(n, "axes", PD_MAX_DIMS, axes, k);
    return s == PD_OK ? s : node_fail(g, n, s);
}

pd_status pd__shape_Unsqueeze(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL;
    PD_TRY(need_data(g, n, 0, &x));
    int64_t axes[PD_MAX_DIMS];
    int k;
    PD_TRY(squeeze_axes(g, n, axes, &k));
    if (k < 0) return pd__node_err(g, n, PD_ERR_INVALID, "missing axes");
    int r = x->ndim + k;
    if (r > PD_MAX_DIMS) return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "output rank %d exceeds %d", r, PD_MAX_DIMS);
    pd_status s = norm_axes("axes", axes, k, r);
    if (s != PD_OK) return node_fail(g, n, s);
    bool ins[PD_MAX_DIMS] = {false};
    for (int i = 0; i < k; i++) ins[axes[i]] = true;
    int64_t shape[PD_MAX_DIMS];
    for (int d = 0, j = 0; d < r; d++) shape[d] = ins[d] ? 1 : x->shape[j++];
    return set_out(g, n, 0, x->dtype, r, shape);
}

pd_status pd__shape_Squeeze(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL;
    PD_TRY(need_data(g, n, 0, &x));
    int64_t axes[PD_MAX_DIMS];
    int k;
    PD_TRY(squeeze_axes(g, n, axes, &k));
    bool drop[PD_MAX_DIMS] = {false};
    if (k <= 0) { /* no axes (or an empty list, as onnxruntime reads it): every 1 goes */
        for (int d = 0; d < x->ndim; d++) drop[d] = x->shape[d] == 1;
    } else {
        pd_status s = norm_axes("axes", axes, k, x->ndim);
        if (s != PD_OK) return node_fail(g, n, s);
        for (int i = 0; i < k; i++) {
            if (x->shape[axes[i]] != 1)
                return pd__node_err(g, n, PD_ERR_SHAPE, "cannot squeeze axis %d of size %lld", (int)axes[i],
                                    (long long)x->shape[axes[i]]);
            drop[axes[i]] = true;
        }
    }
    int64_t shape[PD_MAX_DIMS];
    int r = 0;
    for (int d = 0; d < x->ndim; d++)
        if (!drop[d]) shape[r++] = x->shape[d];
    return set_out(g, n, 0, x->dtype, r, shape);
}

pd_status pd__shape_Expand(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL;
    PD_TRY(need_data(g, n, 0, &x));
    int64_t want[PD_MAX_DIMS], shape[PD_MAX_DIMS];
    int k;
    PD_TRY(const_ints(g, n, 1, "shape", PD_MAX_DIMS, want, &k));
    int r = k > x->ndim ? k : x->ndim;
    for (int i = 0; i < r; i++) { /* aligned from the right */
        int64_t a = i < x->ndim ? x->shape[x->ndim - 1 - i] : 1;
        int64_t b = i < k ? want[k - 1 - i] : 1;
        if (b < 0) return pd__node_err(g, n, PD_ERR_SHAPE, "shape[%d] = %lld is negative", k - 1 - i, (long long)b);
        if (a != b && a != 1 && b != 1) return bad_shape(g, n, "expand", x, k, want);
        shape[r - 1 - i] = a == 1 ? b : a;
    }
    return set_out(g, n, 0, x->dtype, r, shape);
}

pd_status pd__shape_Pad(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL;
    PD_TRY(need_data(g, n, 0, &x));
    pd_tensor v[MAX_VIEWS], *vp[MAX_VIEWS];
    PD_TRY(make_views(g, n, v, vp));
    pd__pad_params p;
    pd_status s = pd__pad_resolve(n, vp, &p);
    if (s != PD_OK) return node_fail(g, n, s);
    pd__tensor *cv = pd__in(g, n, 2);
    if (cv != NULL) {
        if (cv->dtype != x->dtype)
            return pd__node_err(g, n, PD_ERR_SHAPE, "constant_value is %s but data is %s", pd_dtype_name(cv->dtype),
                                pd_dtype_name(x->dtype));
        if (cv->ndim < 0 || cv->numel > 1) return pd__node_err(g, n, PD_ERR_SHAPE, "constant_value must be a scalar");
    }
    int64_t shape[PD_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) shape[d] = x->shape[d] + p.begin[d] + p.end[d];
    return set_out(g, n, 0, x->dtype, x->ndim, shape);
}

pd_status pd__shape_Constant(pd_graph *g, pd__node *n) {
    pd_tensor v;
    pd_status s = pd__constant_value(n, &v);
    if (s != PD_OK) return node_fail(g, n, s);
    return set_out(g, n, 0, v.dtype, v.ndim, v.shape);
}

pd_status pd__shape_Shape(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL;
    PD_TRY(need_in(g, n, 0, "data", &x));
    int start, end;
    pd__shape_span(n, x->ndim, &start, &end);
    int64_t len = end - start;
    return set_out(g, n, 0, PD_INT64, 1, &len);
}

pd_status pd__shape_ConstantOfShape(pd_graph *g, pd__node *n) {
    int64_t shape[PD_MAX_DIMS];
    int k;
    PD_TRY(const_ints(g, n, 0, "shape", PD_MAX_DIMS, shape, &k));
    for (int i = 0; i < k; i++)
        if (shape[i] < 0)
            return pd__node_err(g, n, PD_ERR_SHAPE, "shape[%d] = %lld is negative", i, (long long)shape[i]);
    pd_tensor v;
    float zero;
    pd_status s = pd__constant_of_shape_value(n, &v, &zero);
    if (s != PD_OK) return node_fail(g, n, s);
    return set_out(g, n, 0, v.dtype, k, shape);
}

pd_status pd__shape_Range(pd_graph *g, pd__node *n) {
    pd_tensor v[MAX_VIEWS], *vp[MAX_VIEWS];
    if (n->nin != 3) return pd__node_err(g, n, PD_ERR_INVALID, "Range takes 3 inputs, has %d", n->nin);
    PD_TRY(make_views(g, n, v, vp));
    int64_t count;
    pd_status s = pd__range_count(vp[0], vp[1], vp[2], &count);
    if (s != PD_OK) return node_fail(g, n, s);
    return set_out(g, n, 0, vp[0]->dtype, 1, &count);
}

/* Runs a resolver on views of the node's inputs, naming the node on failure. */
#define RESOLVE(call)                                                                                                  \
    do {                                                                                                               \
        pd_status s_ = (call);                                                                                         \
        if (s_ != PD_OK) return node_fail(g, n, s_);                                                                   \
    } while (0)

static bool is_numeric(pd_dtype t) { return is_int_dtype(t) || is_float_dtype(t); }

pd_status pd__shape_CumSum(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL, *a = NULL;
    PD_TRY(need_data(g, n, 0, &x));
    PD_TRY(need_in(g, n, 1, "axis", &a));
    if (!is_numeric(x->dtype))
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "%s of %s is not supported", n->op_type,
                            pd_dtype_name(x->dtype));
    pd_tensor v[MAX_VIEWS], *vp[MAX_VIEWS];
    PD_TRY(make_views(g, n, v, vp));
    int axis = 0;
    if (vp[1]->data != NULL) RESOLVE(pd__cumsum_axis(vp[0], vp[1], &axis));
    return set_out(g, n, 0, x->dtype, x->ndim, x->shape);
}

/* CumProd: CumSum's inputs and attributes. */
pd_status pd__shape_CumProd(pd_graph *g, pd__node *n) { return pd__shape_CumSum(g, n); }

/* EyeLike: a 2-D input's shape, the dtype attribute's dtype (the input's when absent). */
pd_status pd__shape_EyeLike(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL;
    PD_TRY(need_in(g, n, 0, "input", &x));
    if (x->ndim != 2) return pd__node_err(g, n, PD_ERR_SHAPE, "input must be 2-D, has rank %d", x->ndim);
    pd_dtype dt = PD_UNDEFINED;
    RESOLVE(pd__eyelike_dtype(n, x->dtype, &dt));
    return set_out(g, n, 0, dt, 2, x->shape);
}

/* Compress: the output's length along the axis (or flattened) is the count of
 * true conditions, so the condition must be known at load and never trained. */
pd_status pd__shape_Compress(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL, *c = NULL;
    PD_TRY(need_data(g, n, 0, &x));
    PD_TRY(need_in(g, n, 1, "condition", &c));
    pd_tensor v[MAX_VIEWS], *vp[MAX_VIEWS];
    PD_TRY(make_views(g, n, v, vp));
    if (!pd__foldable_input(c)) vp[1]->data = NULL;
    int axis;
    int64_t len, kept;
    RESOLVE(pd__compress_params(n, vp, &axis, &len, &kept));
    if (axis < 0) return set_out(g, n, 0, x->dtype, 1, &kept);
    int64_t shape[PD_MAX_DIMS];
    memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    shape[axis] = kept;
    return set_out(g, n, 0, x->dtype, x->ndim, shape);
}

pd_status pd__shape_ReverseSequence(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL, *l = NULL;
    PD_TRY(need_data(g, n, 0, &x));
    PD_TRY(need_in(g, n, 1, "sequence_lens", &l));
    pd_tensor v[MAX_VIEWS], *vp[MAX_VIEWS];
    PD_TRY(make_views(g, n, v, vp));
    int ta, ba;
    RESOLVE(pd__reverse_sequence_params(n, vp, &ta, &ba));
    return set_out(g, n, 0, x->dtype, x->ndim, x->shape);
}

/* NonZero: [rank, count of non-zeros], which only a constant input that
 * training cannot change fixes at load (a 0-D input counts as 1-D, as numpy's). */
pd_status pd__shape_NonZero(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL;
    PD_TRY(need_data(g, n, 0, &x));
    if (!pd__foldable_input(x) || (x->data == NULL && x->numel > 0))
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED,
                            "the output's shape depends on the values of '%s', supported only when it is a constant "
                            "(folded at load)",
                            x->name);
    pd_tensor v = pd__view(x);
    int64_t shape[2] = {x->ndim > 0 ? x->ndim : 1, pd__count_nonzero(&v)};
    return set_out(g, n, 0, PD_INT64, 2, shape);
}

pd_status pd__shape_Trilu(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL;
    PD_TRY(need_data(g, n, 0, &x));
    if (x->ndim < 2) return pd__node_err(g, n, PD_ERR_SHAPE, "input must have rank >= 2, has %d", x->ndim);
    pd_tensor v[MAX_VIEWS], *vp[MAX_VIEWS];
    PD_TRY(make_views(g, n, v, vp));
    int64_t k; /* a runtime k is checked when the kernel runs */
    if (n->nin > 1 && vp[1] != NULL && vp[1]->data != NULL) RESOLVE(pd__trilu_k(n, vp, &k));
    return set_out(g, n, 0, x->dtype, x->ndim, x->shape);
}

pd_status pd__shape_Size(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL;
    PD_TRY(need_in(g, n, 0, "data", &x));
    return set_out(g, n, 0, PD_INT64, 0, NULL);
}

pd_status pd__shape_Tile(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL;
    PD_TRY(need_data(g, n, 0, &x));
    pd_tensor v[MAX_VIEWS], *vp[MAX_VIEWS];
    PD_TRY(make_views(g, n, v, vp));
    int64_t rep[PD_MAX_DIMS], shape[PD_MAX_DIMS];
    RESOLVE(pd__tile_repeats(n, vp, rep));
    for (int d = 0; d < x->ndim; d++)
        if (!pd__mul_ok(x->shape[d], rep[d], &shape[d])) return pd__node_err(g, n, PD_ERR_SHAPE, "shape overflows");
    return set_out(g, n, 0, x->dtype, x->ndim, shape);
}

pd_status pd__shape_OneHot(pd_graph *g, pd__node *n) {
    pd__tensor *ind = NULL, *val = NULL;
    PD_TRY(need_in(g, n, 0, "indices", &ind));
    PD_TRY(need_data(g, n, 2, &val));
    if (!is_numeric(ind->dtype))
        return pd__node_err(g, n, PD_ERR_SHAPE, "indices must be numeric, not %s", pd_dtype_name(ind->dtype));
    if (val->numel != 2) return pd__node_err(g, n, PD_ERR_SHAPE, "values must have 2 elements, has %lld", (long long)val->numel);
    pd_tensor v[MAX_VIEWS], *vp[MAX_VIEWS];
    PD_TRY(make_views(g, n, v, vp));
    int axis = 0;
    int64_t depth, shape[PD_MAX_DIMS];
    RESOLVE(pd__onehot_params(n, vp, &axis, &depth));
    for (int d = 0, j = 0; d <= ind->ndim; d++) shape[d] = d == axis ? depth : ind->shape[j++];
    return set_out(g, n, 0, val->dtype, ind->ndim + 1, shape);
}

pd_status pd__shape_GatherElements(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL, *idx = NULL;
    PD_TRY(need_data(g, n, 0, &x));
    PD_TRY(need_in(g, n, 1, "indices", &idx));
    if (idx->dtype != PD_INT64 && idx->dtype != PD_INT32)
        return pd__node_err(g, n, PD_ERR_SHAPE, "indices must be int64 or int32, not %s", pd_dtype_name(idx->dtype));
    if (idx->ndim != x->ndim || x->ndim < 1)
        return pd__node_err(g, n, PD_ERR_SHAPE, "indices have rank %d but data %d", idx->ndim, x->ndim);
    int axis = 0;
    RESOLVE(pd__reduce_axis(n, x->ndim, 0, &axis));
    return set_out(g, n, 0, x->dtype, idx->ndim, idx->shape);
}

pd_status pd__shape_GatherND(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL, *idx = NULL;
    PD_TRY(need_data(g, n, 0, &x));
    PD_TRY(need_in(g, n, 1, "indices", &idx));
    pd_tensor xv = pd__view(x), iv = pd__view(idx);
    int b, m;
    RESOLVE(pd__gathernd_params(n, &xv, &iv, &b, &m));
    int r = idx->ndim - 1 + x->ndim - b - m;
    if (r > PD_MAX_DIMS) return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "output rank %d exceeds %d", r, PD_MAX_DIMS);
    int64_t shape[PD_MAX_DIMS];
    int k = 0;
    for (int d = 0; d < idx->ndim - 1; d++) shape[k++] = idx->shape[d];
    for (int d = b + m; d < x->ndim; d++) shape[k++] = x->shape[d];
    return set_out(g, n, 0, x->dtype, r, shape);
}

/* ScatterElements, ScatterND: data and updates of one dtype, a known reduction
 * (arithmetic ones on numbers only). */
static pd_status scatter_common(pd_graph *g, pd__node *n, pd__tensor **x, pd__tensor **idx, pd__tensor **u) {
    PD_TRY(need_data(g, n, 0, x));
    PD_TRY(need_in(g, n, 1, "indices", idx));
    PD_TRY(need_data(g, n, 2, u));
    if ((*idx)->dtype != PD_INT64 && (*idx)->dtype != PD_INT32)
        return pd__node_err(g, n, PD_ERR_SHAPE, "indices must be int64 or int32, not %s", pd_dtype_name((*idx)->dtype));
    if ((*u)->dtype != (*x)->dtype)
        return pd__node_err(g, n, PD_ERR_SHAPE, "updates are %s but data is %s", pd_dtype_name((*u)->dtype),
                            pd_dtype_name((*x)->dtype));
    pd__scatter_red red;
    RESOLVE(pd__scatter_reduction(n, &red));
    if (red != PD_RED_NONE && !is_numeric((*x)->dtype))
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "reduction on %s is not supported", pd_dtype_name((*x)->dtype));
    return PD_OK;
}

pd_status pd__shape_ScatterElements(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL, *idx = NULL, *u = NULL;
    PD_TRY(scatter_common(g, n, &x, &idx, &u));
    if (idx->ndim != x->ndim || u->ndim != x->ndim || x->ndim < 1)
        return pd__node_err(g, n, PD_ERR_SHAPE, "data, indices and updates must have one rank (%d, %d, %d)", x->ndim,
                            idx->ndim, u->ndim);
    for (int d = 0; d < x->ndim; d++)
        if (idx->shape[d] != u->shape[d])
            return pd__node_err(g, n, PD_ERR_SHAPE, "indices and updates differ at dim %d", d);
    int axis = 0;
    RESOLVE(pd__reduce_axis(n, x->ndim, 0, &axis));
    return set_out(g, n, 0, x->dtype, x->ndim, x->shape);
}

/* Scatter (opset 9, deprecated): ScatterElements without a reduction. */
pd_status pd__shape_Scatter(pd_graph *g, pd__node *n) { return pd__shape_ScatterElements(g, n); }

pd_status pd__shape_ScatterND(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL, *idx = NULL, *u = NULL;
    PD_TRY(scatter_common(g, n, &x, &idx, &u));
    if (idx->dtype != PD_INT64) return pd__node_err(g, n, PD_ERR_SHAPE, "indices must be int64");
    int q = idx->ndim;
    int64_t m = q > 0 ? idx->shape[q - 1] : -1;
    if (q < 1 || m < 1 || m > x->ndim)
        return pd__node_err(g, n, PD_ERR_SHAPE, "indices' last dim %lld out of range [1, %d]", (long long)m, x->ndim);
    int ru = q - 1 + x->ndim - (int)m;
    bool ok = u->ndim == ru;
    for (int d = 0; ok && d < q - 1; d++) ok = u->shape[d] == idx->shape[d];
    for (int d = (int)m; ok && d < x->ndim; d++) ok = u->shape[q - 1 + d - m] == x->shape[d];
    if (!ok) return pd__node_err(g, n, PD_ERR_SHAPE, "updates do not have the shape indices.shape[:-1] + data.shape[m:]");
    return set_out(g, n, 0, x->dtype, x->ndim, x->shape);
}

/* TensorScatter (opset 24): present_cache is past_cache with update written at
 * each batch's write index along `axis` (default -2); update's shape is the
 * cache's but along that axis, where it is at most as long. */
pd_status pd__shape_TensorScatter(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL, *u = NULL, *w = pd__in(g, n, 2);
    PD_TRY(need_data(g, n, 0, &x));
    PD_TRY(need_data(g, n, 1, &u));
    if (u->dtype != x->dtype)
        return pd__node_err(g, n, PD_ERR_SHAPE, "update is %s but past_cache is %s", pd_dtype_name(u->dtype),
                            pd_dtype_name(x->dtype));
    int axis = 0;
    RESOLVE(pd__reduce_axis(n, x->ndim, -2, &axis));
    if (axis < 1) return pd__node_err(g, n, PD_ERR_SHAPE, "axis %d: the sequence axis cannot be the batch axis", axis);
    bool ok = u->ndim == x->ndim && u->shape[axis] <= x->shape[axis];
    for (int d = 0; ok && d < x->ndim; d++) ok = d == axis || u->shape[d] == x->shape[d];
    if (!ok) return pd__node_err(g, n, PD_ERR_SHAPE, "update does not fit past_cache along axis %d", axis);
    if (w && (w->ndim != 1 || w->shape[0] != x->shape[0] || w->dtype != PD_INT64))
        return pd__node_err(g, n, PD_ERR_SHAPE, "write_indices must be int64 of shape (batch_size)");
    const char *mode = pd__attr_s(n, "mode", "linear");
    if (strcmp(mode, "linear") != 0 && strcmp(mode, "circular") != 0)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "mode '%s' is not supported (linear and circular are)", mode);
    return set_out(g, n, 0, x->dtype, x->ndim, x->shape);
}

/* ArgMax, ArgMin: int64 indices, the axis kept as 1 or dropped. */
static pd_status arg_shape(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL;
    PD_TRY(need_data(g, n, 0, &x));
    if (!is_numeric(x->dtype))
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "%s of %s is not supported", n->op_type, pd_dtype_name(x->dtype));
    int axis = 0;
    RESOLVE(pd__reduce_axis(n, x->ndim, 0, &axis));
    if (x->shape[axis] == 0) return pd__node_err(g, n, PD_ERR_SHAPE, "axis %d is empty", axis);
    bool keep = pd__attr_i(n, "keepdims", 1) != 0;
    int64_t shape[PD_MAX_DIMS];
    int k = 0;
    for (int d = 0; d < x->ndim; d++)
        if (d != axis)
            shape[k++] = x->shape[d];
        else if (keep)
            shape[k++] = 1;
    return set_out(g, n, 0, PD_INT64, k, shape);
}

pd_status pd__shape_ArgMax(pd_graph *g, pd__node *n) { return arg_shape(g, n); }

pd_status pd__shape_ArgMin(pd_graph *g, pd__node *n) { return arg_shape(g, n); }

pd_status pd__shape_TopK(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL;
    PD_TRY(need_data(g, n, 0, &x));
    if (!is_numeric(x->dtype))
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "TopK of %s is not supported", pd_dtype_name(x->dtype));
    pd_tensor v[MAX_VIEWS], *vp[MAX_VIEWS];
    PD_TRY(make_views(g, n, v, vp));
    int axis = 0;
    int64_t k, shape[PD_MAX_DIMS];
    RESOLVE(pd__topk_params(n, vp, &axis, &k));
    memcpy(shape, x->shape, sizeof shape);
    shape[axis] = k;
    PD_TRY(set_out(g, n, 0, x->dtype, x->ndim, shape));
    return set_out(g, n, 1, PD_INT64, x->ndim, shape);
}

pd_status pd__shape_Hardmax(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL;
    PD_TRY(need_data(g, n, 0, &x));
    if (!is_float_dtype(x->dtype))
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "Hardmax of %s is not supported", pd_dtype_name(x->dtype));
    int axis = 0;
    RESOLVE(pd__reduce_axis(n, x->ndim, n->opset >= 13 ? -1 : 1, &axis));
    return set_out(g, n, 0, x->dtype, x->ndim, x->shape);
}

static pd_status space_depth_shape(pd_graph *g, pd__node *n, bool to_space) {
    pd__tensor *x = NULL;
    PD_TRY(need_data(g, n, 0, &x));
    pd_tensor xv = pd__view(x);
    int64_t box[6], st[6], shape[4];
    RESOLVE(pd__space_depth_walk(n, &xv, to_space, box, st, shape));
    return set_out(g, n, 0, x->dtype, 4, shape);
}

pd_status pd__shape_DepthToSpace(pd_graph *g, pd__node *n) { return space_depth_shape(g, n, true); }

pd_status pd__shape_SpaceToDepth(pd_graph *g, pd__node *n) { return space_depth_shape(g, n, false); }

#undef RESOLVE

/* ---- FLOPs: these ops only move data ------------------------------------------ */

#define PD__NO_FLOPS(name)                                                                                             \
    double pd__flops_##name(const pd_graph *g, const pd__node *n) {                                                    \
        (void)g;                                                                                                       \
        (void)n;                                                                                                       \
        return 0;                                                                                                      \
    }
PD__NO_FLOPS(Flatten)
PD__NO_FLOPS(Reshape)
PD__NO_FLOPS(Transpose)
PD__NO_FLOPS(Concat)
PD__NO_FLOPS(Split)
PD__NO_FLOPS(Slice)
PD__NO_FLOPS(Gather)
PD__NO_FLOPS(Unsqueeze)
PD__NO_FLOPS(Squeeze)
PD__NO_FLOPS(Expand)
PD__NO_FLOPS(Pad)
PD__NO_FLOPS(Constant)
PD__NO_FLOPS(Shape)
PD__NO_FLOPS(ConstantOfShape)
PD__NO_FLOPS(Range)
PD__NO_FLOPS(Trilu)
PD__NO_FLOPS(Size)
PD__NO_FLOPS(Tile)
PD__NO_FLOPS(OneHot)
PD__NO_FLOPS(GatherElements)
PD__NO_FLOPS(GatherND)
PD__NO_FLOPS(ScatterElements)
PD__NO_FLOPS(ScatterND)
PD__NO_FLOPS(Scatter)
PD__NO_FLOPS(TensorScatter)
PD__NO_FLOPS(DepthToSpace)
PD__NO_FLOPS(SpaceToDepth)
PD__NO_FLOPS(EyeLike)
PD__NO_FLOPS(Compress)
PD__NO_FLOPS(ReverseSequence)
PD__NO_FLOPS(NonZero)

/* CumSum, CumProd: one add or multiply per element; ArgMax, ArgMin, Hardmax: one compare; TopK: a
 * sort of each slice along the axis (n log n compares). */
static double numel_in0(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = pd__in((pd_graph *)g, n, 0);
    return x == NULL ? 0 : (double)x->numel;
}
double pd__flops_CumSum(const pd_graph *g, const pd__node *n) { return numel_in0(g, n); }
double pd__flops_CumProd(const pd_graph *g, const pd__node *n) { return numel_in0(g, n); }
double pd__flops_ArgMax(const pd_graph *g, const pd__node *n) { return numel_in0(g, n); }
double pd__flops_ArgMin(const pd_graph *g, const pd__node *n) { return numel_in0(g, n); }
double pd__flops_Hardmax(const pd_graph *g, const pd__node *n) { return numel_in0(g, n); }
double pd__flops_TopK(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = pd__in((pd_graph *)g, n, 0);
    if (x == NULL || x->ndim < 1) return 0;
    int axis = 0;
    if (pd__reduce_axis(n, x->ndim, -1, &axis) != PD_OK) return 0;
    double len = (double)x->shape[axis];
    return len > 1 ? (double)x->numel * log2(len) : 0;
}

/* ---- HannWindow, HammingWindow, BlackmanWindow, MelWeightMatrix ------------------------------- */

/* Scalar int input i, constant at load: these ops' output shapes are its value. */
static pd_status const_scalar(pd_graph *g, pd__node *n, int i, const char *what, int64_t *v) {
    int64_t vals[1];
    int k = 0;
    PD_TRY(const_ints(g, n, i, what, 1, vals, &k));
    if (k != 1) return pd__node_err(g, n, PD_ERR_SHAPE, "%s must be a scalar", what);
    *v = vals[0];
    return PD_OK;
}

/* output_datatype: a float dtype (the ONNX enum); the integer outputs the
 * spec allows are not supported. */
static pd_status out_float_dtype(pd_graph *g, pd__node *n, pd_dtype *dt) {
    int64_t t = pd__attr_i(n, "output_datatype", PD_FLOAT);
    if (t < 0 || t > 64 || !is_float_dtype((pd_dtype)t))
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "output_datatype %lld is not supported (float types only)",
                            (long long)t);
    *dt = (pd_dtype)t;
    return PD_OK;
}

static pd_status shape_window(pd_graph *g, pd__node *n) {
    int64_t size = 0;
    pd_dtype dt = PD_FLOAT;
    PD_TRY(out_float_dtype(g, n, &dt));
    PD_TRY(const_scalar(g, n, 0, "size", &size));
    if (size < 0) return pd__node_err(g, n, PD_ERR_SHAPE, "size %lld is negative", (long long)size);
    return set_out(g, n, 0, dt, 1, &size);
}

pd_status pd__shape_HannWindow(pd_graph *g, pd__node *n) { return shape_window(g, n); }
pd_status pd__shape_HammingWindow(pd_graph *g, pd__node *n) { return shape_window(g, n); }
pd_status pd__shape_BlackmanWindow(pd_graph *g, pd__node *n) { return shape_window(g, n); }

/* (dft_length / 2 + 1, num_mel_bins); the sample rate and edges may come at run time. */
pd_status pd__shape_MelWeightMatrix(pd_graph *g, pd__node *n) {
    int64_t bins = 0, len = 0;
    pd_dtype dt = PD_FLOAT;
    PD_TRY(out_float_dtype(g, n, &dt));
    PD_TRY(const_scalar(g, n, 0, "num_mel_bins", &bins));
    PD_TRY(const_scalar(g, n, 1, "dft_length", &len));
    for (int i = 2; i < 5; i++) {
        pd__tensor *t = NULL;
        PD_TRY(need_in(g, n, i, i == 2 ? "sample_rate" : i == 3 ? "lower_edge_hertz" : "upper_edge_hertz", &t));
        if (t->numel != 1) return pd__node_err(g, n, PD_ERR_SHAPE, "input %d must be a scalar", i);
    }
    if (bins < 1 || len < 1)
        return pd__node_err(g, n, PD_ERR_SHAPE, "num_mel_bins %lld and dft_length %lld must be positive",
                            (long long)bins, (long long)len);
    int64_t ys[2] = {len / 2 + 1, bins};
    return set_out(g, n, 0, dt, 2, ys);
}

static double numel_out0(const pd_graph *g, const pd__node *n) {
    const pd__tensor *y = pd__out((pd_graph *)g, n, 0);
    return y == NULL ? 0 : (double)y->numel;
}
double pd__flops_HannWindow(const pd_graph *g, const pd__node *n) { return 4 * numel_out0(g, n); }
double pd__flops_HammingWindow(const pd_graph *g, const pd__node *n) { return 4 * numel_out0(g, n); }
double pd__flops_BlackmanWindow(const pd_graph *g, const pd__node *n) { return 8 * numel_out0(g, n); }
double pd__flops_MelWeightMatrix(const pd_graph *g, const pd__node *n) { return numel_out0(g, n); }

/* ---- DFT, STFT ------------------------------------------------------------------------------------ */

static pd_status scalar_of(const pd_tensor *t, const char *what, int64_t *v) {
    if (t->data == NULL) return pd__err(PD_ERR_UNSUPPORTED, "%s must be constant at load (output shapes are static)", what);
    if (view_numel(t) != 1 || !is_int_dtype(t->dtype))
        return pd__err(PD_ERR_SHAPE, "%s must be an int scalar", what);
    *v = pd__get_i(t->dtype, t->data, 0);
    return PD_OK;
}

pd_status pd__dft_plan(const pd__node *n, const pd_tensor *x, const pd_tensor *len, const pd_tensor *axis, pd__dft *p) {
    int r = x->ndim;
    if (r < 2 || (x->shape[r - 1] != 1 && x->shape[r - 1] != 2))
        return pd__err(PD_ERR_SHAPE, "input must have rank >= 2 and a last dim of 1 (real) or 2 (complex)");
    if (!is_float_dtype(x->dtype)) return pd__err(PD_ERR_UNSUPPORTED, "DFT of %s is not supported", pd_dtype_name(x->dtype));
    /* the axis counts the last (real/imaginary) dim too: [-r, -2] or [0, r - 2] */
    int64_t a = n->opset >= 20 ? -2 : pd__attr_i(n, "axis", 1);
    if (n->opset >= 20 && axis != NULL) PD_TRY(scalar_of(axis, "axis", &a));
    if (a < 0) a += r;
    if (a < 0 || a > r - 2) return pd__err(PD_ERR_SHAPE, "axis is out of range for rank %d", r);
    p->axis = (int)a;
    p->inverse = pd__attr_i(n, "inverse", 0) != 0;
    p->onesided = pd__attr_i(n, "onesided", 0) != 0;
    p->cin = (int)x->shape[r - 1];
    p->lin = x->shape[a];
    p->outer = p->inner = 1;
    for (int i = 0; i < a; i++) p->outer *= x->shape[i];
    for (int i = (int)a + 1; i < r - 1; i++) p->inner *= x->shape[i];
    bool half_in = p->inverse && p->onesided;
    p->n = half_in ? 2 * (p->lin - 1) : p->lin;
    if (len != NULL) PD_TRY(scalar_of(len, "dft_length", &p->n));
    if (p->n < 1) return pd__err(PD_ERR_SHAPE, "dft_length %lld must be positive", (long long)p->n);
    p->m = half_in || !p->onesided ? p->n : p->n / 2 + 1;
    p->cout = half_in ? 1 : 2;
    return PD_OK;
}

pd_status pd__shape_DFT(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL;
    PD_TRY(need_in(g, n, 0, "input", &x));
    pd_tensor v[MAX_VIEWS], *vp[MAX_VIEWS];
    PD_TRY(make_views(g, n, v, vp));
    pd__dft p;
    pd_status s = pd__dft_plan(n, vp[0], n->nin > 1 ? vp[1] : NULL, n->nin > 2 ? vp[2] : NULL, &p);
    if (s != PD_OK) return node_fail(g, n, s);
    int64_t ys[PD_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) ys[i] = x->shape[i];
    ys[p.axis] = p.m, ys[x->ndim - 1] = p.cout;
    return set_out(g, n, 0, x->dtype, x->ndim, ys);
}

pd_status pd__stft_plan(const pd__node *n, const pd_tensor *x, const pd_tensor *step, const pd_tensor *window,
                        const pd_tensor *frame_len, pd__stft *p) {
    if (x->ndim != 3 || (x->shape[2] != 1 && x->shape[2] != 2))
        return pd__err(PD_ERR_SHAPE, "signal must be (batch, length, 1 or 2)");
    if (!is_float_dtype(x->dtype)) return pd__err(PD_ERR_UNSUPPORTED, "STFT of %s is not supported", pd_dtype_name(x->dtype));
    if (step == NULL) return pd__err(PD_ERR_INVALID, "missing frame_step");
    PD_TRY(scalar_of(step, "frame_step", &p->step));
    p->frame_len = -1;
    if (frame_len != NULL) PD_TRY(scalar_of(frame_len, "frame_length", &p->frame_len));
    if (window != NULL) {
        if (window->ndim != 1 || (p->frame_len >= 0 && window->shape[0] != p->frame_len))
            return pd__err(PD_ERR_SHAPE, "window must be 1-D, frame_length long");
        p->frame_len = window->shape[0];
    }
    if (p->frame_len < 1 || p->step < 1)
        return pd__err(PD_ERR_SHAPE, "STFT needs a positive frame_step and a window or frame_length");
    p->batch = x->shape[0], p->length = x->shape[1], p->c = (int)x->shape[2];
    if (p->frame_len > p->length) return pd__err(PD_ERR_SHAPE, "frame_length exceeds the signal's length");
    p->frames = (p->length - p->frame_len) / p->step + 1;
    bool one = pd__attr_i(n, "onesided", 1) != 0 && p->c == 1;
    p->bins = one ? p->frame_len / 2 + 1 : p->frame_len;
    return PD_OK;
}

pd_status pd__shape_STFT(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL;
    PD_TRY(need_in(g, n, 0, "signal", &x));
    pd_tensor v[MAX_VIEWS], *vp[MAX_VIEWS];
    PD_TRY(make_views(g, n, v, vp));
    pd__stft p;
    pd_status s = pd__stft_plan(n, vp[0], n->nin > 1 ? vp[1] : NULL, n->nin > 2 ? vp[2] : NULL,
                                n->nin > 3 ? vp[3] : NULL, &p);
    if (s != PD_OK) return node_fail(g, n, s);
    int64_t ys[4] = {p.batch, p.frames, p.bins, 2};
    return set_out(g, n, 0, x->dtype, 4, ys);
}

double pd__flops_DFT(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = pd__in((pd_graph *)g, n, 0);
    return x == NULL ? 0 : 8 * numel_out0(g, n) * (double)x->shape[x->ndim > 1 ? 1 : 0];
}
double pd__flops_STFT(const pd_graph *g, const pd__node *n) {
    const pd__tensor *y = pd__out((pd_graph *)g, n, 0);
    return y == NULL || y->ndim != 4 ? 0 : 8 * (double)y->numel * (double)y->shape[2];
}

/* ---- NonMaxSuppression ---------------------------------------------------------------------------- */

/* The box's corners (ymin, xmin, ymax, xmax), from either diagonal or from the
 * center and size (center_point_box = 1). Float, as onnxruntime (which made
 * the tests) compares IoUs at the threshold. */
static void nms_corners(pd_dtype dt, const void *boxes, int64_t at, bool center, float *c) {
    float b[4];
    for (int i = 0; i < 4; i++) b[i] = (float)pd__get_f(dt, boxes, at + i);
    if (center) {
        c[0] = b[1] - b[3] / 2, c[1] = b[0] - b[2] / 2, c[2] = b[1] + b[3] / 2, c[3] = b[0] + b[2] / 2;
    } else {
        c[0] = fminf(b[0], b[2]), c[1] = fminf(b[1], b[3]), c[2] = fmaxf(b[0], b[2]), c[3] = fmaxf(b[1], b[3]);
    }
}

static bool nms_overlaps(const float *a, const float *b, float thr) {
    float ih = fminf(a[2], b[2]) - fmaxf(a[0], b[0]), iw = fminf(a[3], b[3]) - fmaxf(a[1], b[1]);
    float inter = fmaxf(ih, 0) * fmaxf(iw, 0);
    if (inter <= 0) return false;
    float aa = (a[2] - a[0]) * (a[3] - a[1]), ab = (b[2] - b[0]) * (b[3] - b[1]), uni = aa + ab - inter;
    if (aa <= 0 || ab <= 0 || uni <= 0) return false;
    return inter / uni > thr;
}

typedef struct {
    float s;
    int64_t i;
} nms_cand;

/* Higher score first; equal scores by index, as onnxruntime's queue orders them. */
static int nms_cmp(const void *pa, const void *pb) {
    const nms_cand *a = (const nms_cand *)pa, *b = (const nms_cand *)pb;
    if (a->s != b->s) return a->s > b->s ? -1 : 1;
    return a->i < b->i ? -1 : a->i > b->i;
}

pd_status pd__nms_select(const pd__node *n, const pd_tensor *const *in, int nin, int64_t *sel, int64_t *out) {
    const pd_tensor *boxes = in[0], *scores = in[1];
    if (boxes->ndim != 3 || boxes->shape[2] != 4 || scores->ndim != 3 || scores->shape[0] != boxes->shape[0] ||
        scores->shape[2] != boxes->shape[1]) {
        return pd__err(PD_ERR_SHAPE, "boxes (batch, spatial, 4) and scores (batch, classes, spatial) do not match");
    }
    int64_t maxsel = 0;
    float iou = 0, sthr = -INFINITY;
    if (nin > 2 && in[2] != NULL && view_numel(in[2]) > 0) maxsel = pd__get_i(in[2]->dtype, in[2]->data, 0);
    if (nin > 3 && in[3] != NULL && view_numel(in[3]) > 0) iou = (float)pd__get_f(in[3]->dtype, in[3]->data, 0);
    if (nin > 4 && in[4] != NULL && view_numel(in[4]) > 0) sthr = (float)pd__get_f(in[4]->dtype, in[4]->data, 0);
    bool center = pd__attr_i(n, "center_point_box", 0) != 0;
    int64_t B = boxes->shape[0], S = boxes->shape[1], K = scores->shape[1], count = 0;
    nms_cand *cand = (nms_cand *)PD_MALLOC((size_t)(S > 0 ? S : 1) * sizeof *cand);
    float *kept = (float *)PD_MALLOC((size_t)(S > 0 ? S : 1) * 4 * sizeof *kept);
    if (cand == NULL || kept == NULL) {
        PD_FREE(cand), PD_FREE(kept);
        return pd__err(PD_ERR_NOMEM, "out of memory");
    }
    for (int64_t b = 0; b < B; b++)
        for (int64_t k = 0; k < K && maxsel > 0; k++) {
            int64_t nc = 0, nk = 0;
            for (int64_t i = 0; i < S; i++) {
                float s = (float)pd__get_f(scores->dtype, scores->data, (b * K + k) * S + i);
                if (s > sthr) cand[nc].s = s, cand[nc].i = i, nc++;
            }
            qsort(cand, (size_t)nc, sizeof *cand, nms_cmp);
            for (int64_t c = 0; c < nc && nk < maxsel; c++) {
                float box[4];
                nms_corners(boxes->dtype, boxes->data, (b * S + cand[c].i) * 4, center, box);
                bool drop = false;
                for (int64_t j = 0; j < nk && !drop; j++) drop = nms_overlaps(&kept[4 * j], box, iou);
                if (drop) continue;
                memcpy(&kept[4 * nk++], box, sizeof box);
                if (sel) sel[3 * count] = b, sel[3 * count + 1] = k, sel[3 * count + 2] = cand[c].i;
                count++;
            }
        }
    PD_FREE(cand), PD_FREE(kept);
    *out = count;
    return PD_OK;
}

/* The output's length is the selection's: known only from the data, so every
 * input must be a constant at load (the op then folds). */
pd_status pd__shape_NonMaxSuppression(pd_graph *g, pd__node *n) {
    pd__tensor *t = NULL;
    PD_TRY(need_in(g, n, 0, "boxes", &t));
    PD_TRY(need_in(g, n, 1, "scores", &t));
    pd_tensor v[MAX_VIEWS], *vp[MAX_VIEWS];
    PD_TRY(make_views(g, n, v, vp));
    for (int i = 0; i < n->nin; i++)
        if (vp[i] != NULL && vp[i]->data == NULL && view_numel(vp[i]) > 0)
            return pd__node_err(g, n, PD_ERR_UNSUPPORTED,
                                "the output size depends on the data: input %d must be a constant at load", i);
    int64_t k = 0;
    pd_status s = pd__nms_select(n, (const pd_tensor *const *)vp, n->nin, NULL, &k);
    if (s != PD_OK) return node_fail(g, n, s);
    int64_t ys[2] = {k, 3};
    return set_out(g, n, 0, PD_INT64, 2, ys);
}

PD__NO_FLOPS(NonMaxSuppression)

/* ---- Unique --------------------------------------------------------------------------------------- */

typedef struct {
    const pd_tensor *x;
    int64_t inner, m, outer; /* slice s is x[o, s, i] for o < outer, i < inner */
    bool fl;
} uq_ctx;

/* Slices compared element by element in C order, as numpy.unique does. */
static int uq_cmp(const uq_ctx *c, int64_t a, int64_t b) {
    for (int64_t o = 0; o < c->outer; o++)
        for (int64_t i = 0; i < c->inner; i++) {
            int64_t ia = (o * c->m + a) * c->inner + i, ib = (o * c->m + b) * c->inner + i;
            if (c->fl) {
                double va = pd__get_f(c->x->dtype, c->x->data, ia), vb = pd__get_f(c->x->dtype, c->x->data, ib);
                if (va != vb) return va < vb ? -1 : 1;
            } else {
                int64_t va = pd__get_i(c->x->dtype, c->x->data, ia), vb = pd__get_i(c->x->dtype, c->x->data, ib);
                if (va != vb) return va < vb ? -1 : 1;
            }
        }
    return 0;
}

/* A stable merge sort of slice numbers (qsort takes no context). */
static void uq_sort(const uq_ctx *c, int64_t *v, int64_t *tmp, int64_t len) {
    if (len < 2) return;
    int64_t h = len / 2;
    uq_sort(c, v, tmp, h);
    uq_sort(c, v + h, tmp, len - h);
    int64_t i = 0, j = h, k = 0;
    while (i < h && j < len) tmp[k++] = uq_cmp(c, v[j], v[i]) < 0 ? v[j++] : v[i++];
    while (i < h) tmp[k++] = v[i++];
    while (j < len) tmp[k++] = v[j++];
    memcpy(v, tmp, (size_t)len * sizeof *v);
}

pd_status pd__unique_run(const pd__node *n, const pd_tensor *x, int *axis, int64_t *count, pd_tensor *const *out,
                         int nout) {
    uq_ctx c = {x, 1, view_numel(x), 1, is_float_dtype(x->dtype)};
    if (!c.fl && !is_int_dtype(x->dtype))
        return pd__err(PD_ERR_UNSUPPORTED, "Unique of %s is not supported", pd_dtype_name(x->dtype));
    *axis = -1;
    if (pd__attr_get(n, "axis") != NULL) {
        int64_t a = pd__attr_i(n, "axis", 0);
        if (a < 0) a += x->ndim;
        if (a < 0 || a >= x->ndim) return pd__err(PD_ERR_SHAPE, "axis is out of range for rank %d", x->ndim);
        *axis = (int)a;
        c.m = x->shape[a];
        for (int i = 0; i < a; i++) c.outer *= x->shape[i];
        for (int i = (int)a + 1; i < x->ndim; i++) c.inner *= x->shape[i];
    }
    int64_t M = c.m, *ord = (int64_t *)PD_MALLOC((size_t)(3 * M + 1) * sizeof *ord), *tmp = ord + M,
            *grp = ord + 2 * M;
    if (ord == NULL) return pd__err(PD_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < M; i++) ord[i] = i;
    uq_sort(&c, ord, tmp, M);
    /* grp[slice] = its group in sorted order; tmp[g] = the group's first slice */
    int64_t U = 0;
    for (int64_t i = 0; i < M; i++) {
        if (i == 0 || uq_cmp(&c, ord[i - 1], ord[i]) != 0) tmp[U++] = ord[i];
        grp[ord[i]] = U - 1;
    }
    *count = U;
    if (out != NULL) {
        /* unsorted: groups in the order of their first slice; rank[g] = the output position */
        bool sorted = pd__attr_i(n, "sorted", 1) != 0;
        int64_t *rank = ord; /* ord is no longer needed */
        if (sorted) {
            for (int64_t g = 0; g < U; g++) rank[g] = g;
        } else {
            int64_t k = 0;
            for (int64_t i = 0; i < M; i++)
                if (tmp[grp[i]] == i) rank[grp[i]] = k++;
        }
        pd_tensor *Y = nout > 0 ? out[0] : NULL, *I = nout > 1 ? out[1] : NULL, *V = nout > 2 ? out[2] : NULL,
                  *C = nout > 3 ? out[3] : NULL;
        size_t es = pd_dtype_size(x->dtype);
        for (int64_t g = 0; g < U; g++) {
            int64_t r = rank[g], s = tmp[g];
            if (I) ((int64_t *)I->data)[r] = s;
            if (C) ((int64_t *)C->data)[r] = 0;
            if (Y)
                for (int64_t o = 0; o < c.outer; o++)
                    memcpy((char *)Y->data + ((o * U + r) * c.inner) * (int64_t)es,
                           (const char *)x->data + ((o * M + s) * c.inner) * (int64_t)es, (size_t)c.inner * es);
        }
        for (int64_t i = 0; i < M; i++) {
            if (V) ((int64_t *)V->data)[i] = rank[grp[i]];
            if (C) ((int64_t *)C->data)[rank[grp[i]]]++;
        }
    }
    PD_FREE(ord);
    return PD_OK;
}

/* The number of unique values is known only from the data: X must be a
 * constant at load (the op then folds). */
pd_status pd__shape_Unique(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL;
    PD_TRY(need_data(g, n, 0, &x));
    pd_tensor v[MAX_VIEWS], *vp[MAX_VIEWS];
    PD_TRY(make_views(g, n, v, vp));
    if (vp[0]->data == NULL && x->numel > 0)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "the output size depends on the data: X must be a constant at load");
    int axis = -1;
    int64_t U = 0;
    pd_status s = pd__unique_run(n, vp[0], &axis, &U, NULL, 0);
    if (s != PD_OK) return node_fail(g, n, s);
    int64_t ys[PD_MAX_DIMS], M = axis < 0 ? x->numel : x->shape[axis];
    if (axis < 0) {
        PD_TRY(set_out(g, n, 0, x->dtype, 1, &U));
    } else {
        for (int i = 0; i < x->ndim; i++) ys[i] = x->shape[i];
        ys[axis] = U;
        PD_TRY(set_out(g, n, 0, x->dtype, x->ndim, ys));
    }
    PD_TRY(set_out(g, n, 1, PD_INT64, 1, &U));
    PD_TRY(set_out(g, n, 2, PD_INT64, 1, &M));
    return set_out(g, n, 3, PD_INT64, 1, &U);
}

PD__NO_FLOPS(Unique)

/* ---- TfIdfVectorizer ---------------------------------------------------------- */

pd_status pd__tfidf_width(const pd__node *n, int64_t *width) {
    const int64_t *idx, *cnt, *pool;
    int nidx = pd__attr_ints(n, "ngram_indexes", &idx), ncnt = pd__attr_ints(n, "ngram_counts", &cnt);
    int npool = pd__attr_ints(n, "pool_int64s", &pool);
    const char *mode = pd__attr_s(n, "mode", "");
    int64_t lo = pd__attr_i(n, "min_gram_length", 0), hi = pd__attr_i(n, "max_gram_length", 0);
    if (pd__attr_get(n, "pool_strings"))
        return pd__err(PD_ERR_UNSUPPORTED, "a string pool (pool_strings) is not supported: string tensors are not");
    if (strcmp(mode, "TF") != 0 && strcmp(mode, "IDF") != 0 && strcmp(mode, "TFIDF") != 0)
        return pd__err(PD_ERR_INVALID, "mode '%s' (TF, IDF and TFIDF are defined)", mode);
    if (lo < 1 || hi < lo || pd__attr_i(n, "max_skip_count", 0) < 0)
        return pd__err(PD_ERR_INVALID, "min_gram_length %lld, max_gram_length %lld and max_skip_count %lld", (long long)lo,
                       (long long)hi, (long long)pd__attr_i(n, "max_skip_count", 0));
    if (nidx < 1 || ncnt < 1)
        return pd__err(PD_ERR_INVALID, "ngram_indexes and ngram_counts must be given");
    for (int i = 0; i < ncnt; i++)
        if (cnt[i] < 0 || cnt[i] > npool || (i && cnt[i] < cnt[i - 1]))
            return pd__err(PD_ERR_INVALID, "ngram_counts[%d] = %lld is not an increasing offset into the %d-item pool",
                           i, (long long)cnt[i], npool);
    int64_t w = 0;
    for (int i = 0; i < nidx; i++) {
        if (idx[i] < 0) return pd__err(PD_ERR_INVALID, "ngram_indexes[%d] = %lld is negative", i, (long long)idx[i]);
        if (idx[i] + 1 > w) w = idx[i] + 1;
    }
    const float *wt;
    int nw = pd__attr_floats(n, "weights", &wt);
    if (nw && nw < w)
        return pd__err(PD_ERR_INVALID, "%d weights for %lld outputs", nw, (long long)w);
    *width = w;
    return PD_OK;
}

/* X (C) or (B, C) of int32 or int64 gives float Y (width) or (B, width). */
pd_status pd__shape_TfIdfVectorizer(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL;
    PD_TRY(need_in(g, n, 0, "X", &x));
    if (x->dtype != PD_INT32 && x->dtype != PD_INT64)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "X has dtype %s (int32 and int64 are supported)",
                            pd_dtype_name(x->dtype));
    if (x->ndim < 1 || x->ndim > 2)
        return pd__node_err(g, n, PD_ERR_SHAPE, "X must be [C] or [B, C], has rank %d", x->ndim);
    int64_t w;
    pd_status st = pd__tfidf_width(n, &w);
    if (st != PD_OK) return node_fail(g, n, st);
    int64_t ys[2] = {x->shape[0], w};
    return x->ndim == 1 ? set_out(g, n, 0, PD_FLOAT, 1, &w) : set_out(g, n, 0, PD_FLOAT, 2, ys);
}

double pd__flops_TfIdfVectorizer(const pd_graph *g, const pd__node *n) {
    const pd__tensor *x = n->nin > 0 && n->in[0] >= 0 ? &g->tensors[n->in[0]] : NULL;
    int64_t hi = pd__attr_i(n, "max_gram_length", 1), sk = pd__attr_i(n, "max_skip_count", 0);
    return x && x->numel > 0 ? (double)x->numel * (double)hi * (double)(sk + 1) : 0;
}

/* ---- ai.onnx.ml: ArrayFeatureExtractor ------------------------------------------------ */

/* The elements of X's last axis at the int64 indices Y (any shape,
 * flattened): X's leading dims then numel(Y); a 1-D X gives (1, numel(Y)),
 * as ONNX's reference and onnxruntime do. Not differentiable here (an
 * inference op of the ML domain): training through it is refused. */
pd_status pd__shape_ArrayFeatureExtractor(pd_graph *g, pd__node *n) {
    pd__tensor *x = NULL, *y = NULL;
    PD_TRY(need_in(g, n, 0, "X", &x));
    PD_TRY(need_in(g, n, 1, "Y", &y));
    if (y->dtype != PD_INT64) return pd__node_err(g, n, PD_ERR_SHAPE, "Y has dtype %s, expected int64", pd_dtype_name(y->dtype));
    if (x->ndim < 1 || pd_dtype_size(x->dtype) == 0 || x->dtype == PD_STRING)
        return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "X (%s, rank %d) must be a numeric tensor of rank >= 1",
                            pd_dtype_name(x->dtype), x->ndim);
    int64_t s[PD_MAX_DIMS];
    int r = x->ndim == 1 ? 2 : x->ndim;
    if (x->ndim == 1) s[0] = 1;
    else memcpy(s, x->shape, sizeof(int64_t) * (size_t)(x->ndim - 1));
    s[r - 1] = y->numel;
    return set_out(g, n, 0, x->dtype, r, s);
}

PD__NO_FLOPS(ArrayFeatureExtractor)
#undef MAX_VIEWS
#undef PD__NO_FLOPS
#undef RESOLVE
#undef set_out

/* ==== core/profile.c ==== */
/* profile.c - building and validating profiles (struct pd_profile, core/plan.h)
 * and the public accessors of pipedream.h.
 *
 * Loaders and the profiler fill a profile made by pd__profile_new, add edges,
 * then call pd__profile_finish: it checks the costs (finite, non-negative) and
 * the edges (in range, no self-loop), drops duplicate edges, and puts the nodes
 * in a topological order that keeps the given order wherever the DAG allows
 * (Kahn's algorithm, ties broken by the original index), so a profile already
 * in order is left as it is. Edges end up sorted by (producer, consumer).
 */
/* ---- core/plan.h ---- */
/* plan.h - profiles, plans and schedules: what the profiler measures, the
 * planner cuts and the schedule generator turns into per-stage instruction
 * lists that the simulator and the runtime execute. Not installed;
 * pipedream.h exposes these through opaque handles. Units: milliseconds for
 * times, bytes for sizes, bytes/s for bandwidth; a profile's times are for
 * one microbatch (the profile's batch). Which file implements what:
 * docs/ARCHITECTURE.md. */
#ifndef PD_PLAN_H
#define PD_PLAN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>


/* ---- profiles ------------------------------------------------------------- */

typedef struct pd__pnode {
    char *name;          /* ONNX node name, or PipeDream's "nodeN" */
    char *desc;          /* op type or PipeDream's layer description */
    double fwd_ms;       /* forward of one microbatch */
    double bwd_in_ms;    /* backward: gradient of the inputs (zero-bubble's B) */
    double bwd_w_ms;     /* backward: gradient of the weights (zero-bubble's W) */
    double act_bytes;    /* bytes of its outputs (one microbatch) */
    double param_bytes;  /* bytes of the trainable parameters it owns */
    double optim_bytes;  /* optimizer state for those parameters */
    /* the part of fwd_ms, bwd_in_ms, bwd_w_ms that does not shrink with the
     * rows (a per-call overhead, fitted from measurements at other batch
     * sizes; 0: the time scales linearly): at b rows a time t measured at the
     * profile's batch B costs call + (t - call) * b / B (pd__pnode_at) */
    double fwd_call_ms, bwd_in_call_ms, bwd_w_call_ms;
} pd__pnode;

#define PD_MAX_FIT_BATCHES 8

struct pd_profile {
    int n;               /* nodes, in a topological order */
    pd__pnode *node;
    int n_edges;
    int *edge;           /* 2*n_edges ints: producer, consumer (node indices, producer < consumer) */
    int64_t batch;       /* microbatch the times are for (0: unknown) */
    char *model;         /* where it came from (for messages); may be NULL */
    char *device;        /* "cpu", "cuda", "pipedream" (imported) ... ; may be NULL */
    int n_fit;           /* the other batch sizes the per-call costs were fitted from (0: none) */
    int64_t fit_batch[PD_MAX_FIT_BATCHES];
};

/* An empty profile with room for n nodes (names NULL, costs 0). */
pd_status pd__profile_new(int n, pd_profile **out);
/* Adds an edge a -> b (checked: indices in range). */
pd_status pd__profile_add_edge(pd_profile *p, int a, int b);
/* Checks: finite non-negative costs, edges in range, acyclic; reorders nodes
 * topologically (stable) when needed. `what` names the profile in errors. */
pd_status pd__profile_finish(pd_profile *p, const char *what);

/* Parses a profile held in memory (JSON or PipeDream graph.txt); `name` names
 * it in errors (runtime/profile_io.c). */
pd_status pd__profile_parse(const char *name, const char *data, size_t len, pd_profile **out);

/* Node d's costs at `ratio` times the profile's batch: times call + (t -
 * call) * ratio, activation bytes times ratio, parameters as they are. */
void pd__pnode_at(const pd__pnode *d, double ratio, pd__pnode *out);
/* A copy of p with every node at b rows (p->batch must be known); names are
 * shared with p, so free it with pd__profile_free_shallow before p goes. */
pd_status pd__profile_at(const pd_profile *p, int64_t b, pd_profile **out);
void pd__profile_free_shallow(pd_profile *p);

/* ---- cut states (antichains) ------------------------------------------------ */

/* A valid cut of the DAG: the set of nodes before it is closed under
 * predecessors (an "ideal"). States are in a topological order of the
 * antichain DAG; state 0 is the empty cut and state n_states-1 the whole
 * graph. The stage between states a and b (a before b, ideal[a] inside
 * ideal[b]) holds the nodes ideal[b] \ ideal[a]. */
typedef struct pd__cuts {
    int n_states;
    bool prefix_only;      /* too many ideals: only the prefixes of the topological order */
    int beam;              /* too many ideals: the cuts kept per size and way (0: every ideal; antichain.c) */
    int words;             /* 64-bit words per ideal bitset */
    uint64_t *ideal;       /* n_states * words */
    /* prefix sums over each ideal (so a stage's totals are differences) */
    double *fwd, *bwd_in, *bwd_w, *act, *param, *optim;
    /* bytes of every tensor crossing the cut (outputs of nodes inside with a
     * consumer outside): sent forward as activations, back as gradients */
    double *cross_bytes;
    /* PipeDream's own measure: activation bytes of the cut's maximal nodes */
    double *antichain_bytes;
    /* pred[b] lists the states a with ideal[a] strictly inside ideal[b] (ascending) */
    int *pred_start, *pred;   /* CSR: pred[pred_start[b] .. pred_start[b+1]) */
} pd__cuts;

/* max_states bounds the enumeration; over it, a beam of cuts per size from
 * each end (beam < 0: as wide as max_states allows; 0: the prefixes of the
 * topological order only, for DPs cubic in the states). */
pd_status pd__cuts_build(const pd_profile *p, int max_states, int beam, pd__cuts **out);
void pd__cuts_free(pd__cuts *c);

/* ---- plans ---------------------------------------------------------------- */

typedef struct pd__stage {
    int replicas;
    int first_rank;        /* ranks first_rank .. first_rank+replicas-1 */
    bool has_device;       /* the plan puts it on CUDA device `device` (GPU stages); else --device's index */
    int device;
    /* per microbatch, on one replica */
    double fwd_ms, bwd_in_ms, bwd_w_ms;
    double param_bytes, optim_bytes, act_bytes;  /* act: activations stashed per microbatch */
    double in_bytes;       /* activation bytes received per microbatch (gradient bytes sent back) */
    double out_bytes;      /* activation bytes sent per microbatch (gradient bytes received) */
    double send_ms;        /* time to send out_bytes to the next stage (and the gradient back) */
    double fwd_call_ms, bwd_in_call_ms, bwd_w_call_ms; /* the per-call parts of fwd_ms ... (pd__pnode) */
    double allreduce_ms;   /* gradient all-reduce among the replicas, per minibatch */
    double time_ms;        /* the stage's cost in the planner's model (per minibatch per replica) */
    double memory_bytes;   /* predicted peak per worker */
} pd__stage;

typedef enum pd__algo {
    PD_ALGO_PIPEDREAM = 0,
    PD_ALGO_2BW,
    PD_ALGO_BIPARTITION,
    PD_ALGO_UNIFORM,
    PD_ALGO_PARAMS,
    PD_ALGO_AVGPIPE        /* AvgPipe's tuner: K parallel pipelines and the microbatches */
} pd__algo;

struct pd_plan {
    int n_nodes;
    char **node_name;      /* copies of the profile's names */
    int *fwd_stage;        /* per node: the stage that runs its forward */
    int *bwd_stage;        /* per node: the stage that runs its backward (== fwd_stage except bipartition) */
    int n_alias;           /* names the stages give that "nodes" lacks: the file's nodes a */
    char **alias_name;     /* loader fused away (a plan edited by hand); pd__plan_match */
    int *alias_fwd, *alias_bwd; /* places the fused node by them, or finds them unknown */
    int n_stages;          /* stages (virtual stages when chunks > 1) */
    pd__stage *stage;
    int chunks;            /* virtual stages per worker: stage k runs on worker k % (n_stages / chunks) */
    int workers;           /* workers given; sum of replicas may be fewer */
    int microbatches;      /* per minibatch (per pipeline) */
    int64_t microbatch_size;
    int64_t profile_batch; /* the batch the profile measured (0: unknown); stage times are scaled from it */
    int width;             /* 2bw, avgpipe: parallel pipelines (data-parallel width; avgpipe's K); 1 otherwise */
    bool recompute;        /* activation recomputation (the 2bw planner's choice; the runtime honours it under every schedule) */
    pd__algo algo;
    char *algo_name, *cost_model, *model;
    double bandwidth;      /* between adjacent stages (the slowest level crossed) */
    /* predictions */
    double time_ms;        /* per minibatch in steady state (the bottleneck stage) */
    double single_ms;      /* one worker, whole model */
    double dp_ms;          /* pure data parallelism on the same workers */
    double speedup;        /* single_ms / time_ms */
    double dp_speedup;     /* dp_ms / time_ms */
    double bubble;         /* predicted idle fraction for the plan's default schedule */
    double throughput;     /* samples per second */
    int n_cut_states;      /* cut states the planner searched (0: not a DAG search) */
    bool prefix_only;      /* they were the prefixes of one topological order */
    int beam;              /* else the cuts kept per size and way (0: every ideal) */
};

void pd__plan_free(pd_plan *p);
/* Whether a stage of p has a per-call cost (then microbatch size matters beyond linear scaling). */
bool pd__plan_has_call(const pd_plan *p);
/* Rewrites p's stage times as linear scaling of the profile's batch would
 * give them at the plan's microbatch size: t - call * (1 - b/B), no call
 * part left (what the simulator predicted before per-call costs). */
void pd__plan_linear(pd_plan *p);
/* The --algo names ("pipedream", "2bw", ...) and back; unknown names are an error naming the flag. */
const char *pd__algo_name(pd__algo a);
pd_status pd__algo_parse(const char *s, pd__algo *out);
/* The plan as JSON text (runtime/plan_io.c); free with cJSON_free / free. */
char *pd__plan_to_json(const pd_plan *p);
/* The reverse (runtime/plan_io.c); `what` names the text in messages. */
pd_status pd__plan_from_json(const char *buf, size_t len, const char *what, pd_plan **out);
/* Rewrites p's nodes as g's (runtime/plan_io.c): a plan written for the file's
 * nodes (by hand, or before the loader fused some) names nodes g fused into one;
 * the fused node runs where the last of them did. Names g lacks are an error
 * naming `what` (the plan file). */
pd_status pd__plan_match(pd_plan *p, const pd_graph *g, const char *what);

/* ---- schedules ---------------------------------------------------------------- */

typedef enum pd__sched_kind {
    PD_SCHED_GPIPE = 0,    /* all F, then all B; flush */
    PD_SCHED_FLUSH,        /* PipeDream-Flush / 1F1B; flush */
    PD_SCHED_PIPEDREAM,    /* asynchronous 1F1B with weight stashing; no flush */
    PD_SCHED_2BW,          /* 1F1B, two weight versions, step every m microbatches */
    PD_SCHED_INTERLEAVED,  /* Megatron's interleaved 1F1B with v chunks per worker */
    PD_SCHED_ZB_H1,        /* zero-bubble H1: B and W split, W fills the bubble */
    PD_SCHED_AVGPIPE       /* AvgPipe's advance forward propagation: 1F1B with forwards issued
                              ahead, at most `inflight` microbatches held per stage; flush */
} pd__sched_kind;

typedef enum pd__op_kind {
    PD_I_F = 0,            /* forward of microbatch mb on chunk */
    PD_I_B,                /* backward: input gradient (and weight gradient unless split) */
    PD_I_W,                /* backward: weight gradient (zero-bubble) */
    PD_I_SEND_ACT,
    PD_I_RECV_ACT,
    PD_I_SEND_GRAD,
    PD_I_RECV_GRAD,
    PD_I_ALLREDUCE,        /* gradients among a stage's replicas */
    PD_I_STEP,             /* optimizer update (version: the new weight version) */
    PD_I_SNAPSHOT          /* checkpoint point */
} pd__op_kind;

typedef struct pd__instr {
    uint8_t op;            /* pd__op_kind */
    uint8_t split;         /* PD_I_B: 1 when a separate PD_I_W follows for this mb */
    int16_t chunk;         /* virtual stage on this worker (interleaved), else 0 */
    int32_t mb;            /* microbatch index (global across minibatches) */
    int32_t version;       /* weight version the F/B/W uses; STEP: version produced */
    int32_t peer;          /* SEND/RECV: the other stage (virtual stage index) */
} pd__instr;

typedef struct pd__schedule {
    pd__sched_kind kind;
    int n_stages;          /* physical stages (workers of one pipeline) */
    int chunks;            /* virtual stages per worker (1 unless interleaved) */
    int microbatches;      /* per minibatch */
    int minibatches;       /* how many minibatches the lists cover */
    int *len;              /* instructions per stage */
    pd__instr **ins;       /* ins[s][k] */
    int inflight;          /* avgpipe: most microbatches a stage holds (0 for other kinds) */
} pd__schedule;

#endif
/* ---- end of core/plan.h ---- */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Edge arrays hold room for pd__edge_cap(n_edges) edges: 16, then powers of two. */
static int pd__edge_cap(int n) {
    int c = 16;
    while (c < n) c *= 2;
    return c;
}

pd_status pd__profile_new(int n, pd_profile **out) {
    if (n < 0 || !out) return pd__err(PD_ERR_INVALID, "pd__profile_new: bad arguments (n = %d)", n);
    pd_profile *p = (pd_profile *)PD_CALLOC(1, sizeof *p);
    if (p) p->node = (pd__pnode *)PD_CALLOC((size_t)n + 1, sizeof *p->node);
    if (!p || !p->node) {
        PD_FREE(p);
        return pd__err(PD_ERR_NOMEM, "out of memory for a profile of %d nodes", n);
    }
    p->n = n;
    *out = p;
    return PD_OK;
}

pd_status pd__profile_add_edge(pd_profile *p, int a, int b) {
    if (a < 0 || a >= p->n || b < 0 || b >= p->n)
        return pd__err(PD_ERR_INVALID, "profile edge %d -> %d: node index out of range [0, %d)", a, b, p->n);
    if (!p->edge || p->n_edges == pd__edge_cap(p->n_edges)) {
        if (p->n_edges > INT32_MAX / 4) return pd__err(PD_ERR_NOMEM, "too many profile edges");
        int *e = (int *)PD_REALLOC(p->edge, sizeof(int) * 2 * (size_t)pd__edge_cap(p->n_edges + 1));
        if (!e) return pd__err(PD_ERR_NOMEM, "out of memory for profile edges");
        p->edge = e;
    }
    p->edge[2 * p->n_edges] = a;
    p->edge[2 * p->n_edges + 1] = b;
    p->n_edges++;
    return PD_OK;
}

static int pd__edge_cmp(const void *x, const void *y) {
    const int *a = (const int *)x, *b = (const int *)y;
    if (a[0] != b[0]) return a[0] < b[0] ? -1 : 1;
    return (a[1] > b[1]) - (a[1] < b[1]);
}

/* A binary min-heap of node indices (the ready set of Kahn's algorithm). */
static void pd__heap_push(int *h, int *len, int v) {
    int i = (*len)++;
    while (i > 0 && h[(i - 1) / 2] > v) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = v;
}

static int pd__heap_pop(int *h, int *len) {
    int top = h[0], v = h[--(*len)], i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= *len) break;
        if (c + 1 < *len && h[c + 1] < h[c]) c++;
        if (h[c] >= v) break;
        h[i] = h[c];
        i = c;
    }
    if (*len > 0) h[i] = v;
    return top;
}

static const char *pd__pname(const pd_profile *p, int i) { return p->node[i].name ? p->node[i].name : "?"; }

pd_status pd__profile_finish(pd_profile *p, const char *what) {
    if (!what) what = p->model ? p->model : "profile";
    for (int i = 0; i < p->n; i++) {
        const pd__pnode *d = &p->node[i];
        const char *field[] = {"fwd_ms",      "bwd_in_ms",      "bwd_w_ms",      "act_bytes",     "param_bytes",
                               "optim_bytes", "fwd_call_ms", "bwd_in_call_ms", "bwd_w_call_ms"};
        double v[] = {d->fwd_ms,      d->bwd_in_ms,   d->bwd_w_ms,       d->act_bytes,    d->param_bytes,
                      d->optim_bytes, d->fwd_call_ms, d->bwd_in_call_ms, d->bwd_w_call_ms};
        for (int k = 0; k < 9; k++)
            if (!isfinite(v[k]) || v[k] < 0)
                return pd__err(PD_ERR_INVALID, "%s: node '%s': %s is %g (costs must be finite and non-negative)", what,
                               pd__pname(p, i), field[k], v[k]);
        for (int k = 0; k < 3; k++) /* a call part is a part of its time */
            if (v[6 + k] > v[k])
                return pd__err(PD_ERR_INVALID, "%s: node '%s': %s %g exceeds %s %g", what, pd__pname(p, i),
                               field[6 + k], v[6 + k], field[k], v[k]);
    }
    for (int e = 0; e < p->n_edges; e++) {
        int a = p->edge[2 * e], b = p->edge[2 * e + 1];
        if (a < 0 || a >= p->n || b < 0 || b >= p->n)
            return pd__err(PD_ERR_INVALID, "%s: edge %d -> %d: node index out of range [0, %d)", what, a, b, p->n);
        if (a == b) return pd__err(PD_ERR_INVALID, "%s: cycle: node '%s' is its own input", what, pd__pname(p, a));
    }
    /* duplicate edges go */
    if (p->n_edges > 0) qsort(p->edge, (size_t)p->n_edges, 2 * sizeof(int), pd__edge_cmp); /* edge may be NULL */
    int ne = 0;
    for (int e = 0; e < p->n_edges; e++)
        if (ne == 0 || pd__edge_cmp(p->edge + 2 * e, p->edge + 2 * (ne - 1)) != 0) {
            p->edge[2 * ne] = p->edge[2 * e];
            p->edge[2 * ne + 1] = p->edge[2 * e + 1];
            ne++;
        }
    p->n_edges = ne;
    /* Kahn: successors in CSR (edges are sorted by producer), ready set a min-heap */
    size_t n1 = (size_t)p->n + 1;
    int *start = (int *)PD_CALLOC(n1, sizeof(int)), *indeg = (int *)PD_CALLOC(n1, sizeof(int));
    int *heap = (int *)PD_MALLOC(n1 * sizeof(int)), *order = (int *)PD_MALLOC(n1 * sizeof(int)), *pos = (int *)PD_MALLOC(n1 * sizeof(int));
    int *edge = (int *)PD_MALLOC(sizeof(int) * 2 * (size_t)pd__edge_cap(ne));
    pd__pnode *node = (pd__pnode *)PD_MALLOC(n1 * sizeof(pd__pnode));
    pd_status st = PD_OK;
    int hl = 0, k = 0;
    if (!start || !indeg || !heap || !order || !pos || !edge || !node) {
        st = pd__err(PD_ERR_NOMEM, "%s: out of memory sorting %d nodes", what, p->n);
        goto done;
    }
    for (int e = 0; e < ne; e++) {
        start[p->edge[2 * e] + 1]++;
        indeg[p->edge[2 * e + 1]]++;
    }
    for (int i = 0; i < p->n; i++) start[i + 1] += start[i];
    for (int i = 0; i < p->n; i++)
        if (indeg[i] == 0) pd__heap_push(heap, &hl, i);
    while (hl > 0) {
        int v = pd__heap_pop(heap, &hl);
        pos[v] = k;
        order[k++] = v;
        for (int e = start[v]; e < start[v + 1]; e++)
            if (--indeg[p->edge[2 * e + 1]] == 0) pd__heap_push(heap, &hl, p->edge[2 * e + 1]);
    }
    if (k < p->n) {
        /* the nodes left (indeg > 0) each have a predecessor left: walking back
         * n steps from one of them lands on a cycle */
        int *back = heap, v = 0;
        for (int e = 0; e < ne; e++)
            if (indeg[p->edge[2 * e]] > 0) back[p->edge[2 * e + 1]] = p->edge[2 * e];
        while (indeg[v] == 0) v++;
        for (int step = 0; step < p->n; step++) v = back[v];
        st = pd__err(PD_ERR_INVALID, "%s: the graph has a cycle through node '%s'", what, pd__pname(p, v));
        goto done;
    }
    for (int i = 0; i < p->n; i++) node[i] = p->node[order[i]];
    for (int e = 0; e < ne; e++) {
        edge[2 * e] = pos[p->edge[2 * e]];
        edge[2 * e + 1] = pos[p->edge[2 * e + 1]];
    }
    qsort(edge, (size_t)ne, 2 * sizeof(int), pd__edge_cmp);
    PD_FREE(p->node);
    PD_FREE(p->edge);
    p->node = node;
    p->edge = edge;
    node = NULL;
    edge = NULL;
done:
    PD_FREE(start);
    PD_FREE(indeg);
    PD_FREE(heap);
    PD_FREE(order);
    PD_FREE(pos);
    PD_FREE(edge);
    PD_FREE(node);
    return st;
}

void pd_profile_destroy(pd_profile *p) {
    if (!p) return;
    for (int i = 0; i < p->n; i++) {
        PD_FREE(p->node[i].name);
        PD_FREE(p->node[i].desc);
    }
    PD_FREE(p->node);
    PD_FREE(p->edge);
    PD_FREE(p->model);
    PD_FREE(p->device);
    PD_FREE(p);
}

int pd_profile_num_nodes(const pd_profile *p) { return p ? p->n : 0; }

pd_status pd_profile_node(const pd_profile *p, int i, pd_profile_node_info *out) {
    if (!p || !out || i < 0 || i >= p->n)
        return pd__err(PD_ERR_INVALID, "pd_profile_node: node index %d out of range", i);
    const pd__pnode *d = &p->node[i];
    out->name = d->name ? d->name : "";
    out->desc = d->desc ? d->desc : "";
    out->fwd_ms = d->fwd_ms;
    out->bwd_in_ms = d->bwd_in_ms;
    out->bwd_w_ms = d->bwd_w_ms;
    out->act_bytes = d->act_bytes;
    out->param_bytes = d->param_bytes;
    out->optim_bytes = d->optim_bytes;
    return PD_OK;
}

pd_status pd_profile_create(const pd_profile_node_info *nodes, int n_nodes, const int *edges, int n_edges,
                            int64_t batch, pd_profile **out) {
    if (!out) return pd__err(PD_ERR_INVALID, "pd_profile_create: NULL out");
    if (n_nodes < 1 || !nodes)
        return pd__err(PD_ERR_INVALID, "pd_profile_create: nodes: %s (need at least one node)",
                       nodes ? "n_nodes < 1" : "NULL");
    if (n_edges < 0 || (n_edges > 0 && !edges))
        return pd__err(PD_ERR_INVALID, "pd_profile_create: edges: %s", n_edges < 0 ? "n_edges < 0" : "NULL");
    if (batch < 0) return pd__err(PD_ERR_INVALID, "pd_profile_create: batch is negative (%lld)", (long long)batch);
    pd_profile *p = NULL;
    PD_TRY(pd__profile_new(n_nodes, &p));
    pd_status st = PD_OK;
    for (int i = 0; i < n_nodes && st == PD_OK; i++) {
        const pd_profile_node_info *d = &nodes[i];
        pd__pnode *q = &p->node[i];
        char nm[32];
        if (!d->name) snprintf(nm, sizeof nm, "node%d", i);
        q->name = pd__strdup(d->name ? d->name : nm);
        q->desc = pd__strdup(d->desc ? d->desc : "");
        if (!q->name || !q->desc) st = pd__err(PD_ERR_NOMEM, "pd_profile_create: out of memory");
        q->fwd_ms = d->fwd_ms;
        q->bwd_in_ms = d->bwd_in_ms;
        q->bwd_w_ms = d->bwd_w_ms;
        q->act_bytes = d->act_bytes;
        q->param_bytes = d->param_bytes;
        q->optim_bytes = d->optim_bytes;
    }
    for (int e = 0; e < n_edges && st == PD_OK; e++) {
        st = pd__profile_add_edge(p, edges[2 * e], edges[2 * e + 1]);
        if (st != PD_OK) pd__err_prefix("pd_profile_create: edges[%d]", e);
    }
    p->batch = batch;
    if (st == PD_OK) {
        st = pd__profile_finish(p, "pd_profile_create");
    }
    if (st != PD_OK) {
        pd_profile_destroy(p);
        return st;
    }
    *out = p;
    return PD_OK;
}

/* ---- scaling to a microbatch size --------------------------------------------------------- */

static double pd__scale(double t, double call, double ratio) { return call + (t - call) * ratio; }

void pd__pnode_at(const pd__pnode *d, double ratio, pd__pnode *out) {
    *out = *d;
    out->fwd_ms = pd__scale(d->fwd_ms, d->fwd_call_ms, ratio);
    out->bwd_in_ms = pd__scale(d->bwd_in_ms, d->bwd_in_call_ms, ratio);
    out->bwd_w_ms = pd__scale(d->bwd_w_ms, d->bwd_w_call_ms, ratio);
    out->act_bytes = d->act_bytes * ratio;
}

pd_status pd__profile_at(const pd_profile *p, int64_t b, pd_profile **out) {
    if (p->batch <= 0)
        return pd__err(PD_ERR_INVALID, "the profile does not say its batch, so its times cannot be scaled to %lld rows",
                       (long long)b);
    pd_profile *q = (pd_profile *)PD_MALLOC(sizeof *q);
    pd__pnode *node = (pd__pnode *)PD_MALLOC(sizeof(pd__pnode) * ((size_t)p->n + 1));
    if (!q || !node) {
        PD_FREE(q);
        PD_FREE(node);
        return pd__err(PD_ERR_NOMEM, "out of memory scaling a profile of %d nodes", p->n);
    }
    *q = *p;
    double ratio = (double)b / (double)p->batch;
    for (int v = 0; v < p->n; v++) pd__pnode_at(&p->node[v], ratio, &node[v]);
    q->node = node;
    q->batch = b;
    *out = q;
    return PD_OK;
}

void pd__profile_free_shallow(pd_profile *p) {
    if (!p) return;
    PD_FREE(p->node);
    PD_FREE(p);
}

/* The per-call part of a time t_B at batch B from the times t[k] at batches
 * b[k]: the least-squares line through (B, t_B), so the profile keeps its
 * measured time at B, clamped to [0, t_B] (a time that grows faster than the
 * rows has no call part; one that does not grow is all call). */
static double pd__fit_call(double tB, double B, const double *t, const double *b, int n) {
    double num = 0, den = 0;
    for (int k = 0; k < n; k++) {
        num += (b[k] - B) * (t[k] - tB);
        den += (b[k] - B) * (b[k] - B);
    }
    double slope = num / den, call = tB - (slope > 0 ? slope : 0) * B;
    return call < 0 ? 0 : call > tB ? tB : call;
}

static pd_status pd__fit_check(const pd_profile *p, const pd_profile *const *at, int n) {
    if (!p || !at || n < 1 || n > PD_MAX_FIT_BATCHES)
        return pd__err(PD_ERR_INVALID, "pd_profile_fit: %s",
                       !p ? "NULL profile" : !at ? "NULL at" : "n must be 1 to 8 (other batch sizes)");
    if (p->batch <= 0) return pd__err(PD_ERR_INVALID, "pd_profile_fit: the profile does not say its batch");
    for (int k = 0; k < n; k++) {
        const pd_profile *q = at[k];
        if (!q || q->batch <= 0 || q->batch == p->batch || q->n != p->n)
            return pd__err(PD_ERR_INVALID, "pd_profile_fit: at[%d]: %s", k,
                           !q                     ? "NULL"
                           : q->batch <= 0        ? "the profile does not say its batch"
                           : q->batch == p->batch ? "measured at the profile's own batch"
                                                  : "a different number of nodes");
        for (int v = 0; v < p->n; v++)
            if (strcmp(pd__pname(q, v), pd__pname(p, v)) != 0)
                return pd__err(PD_ERR_INVALID, "pd_profile_fit: at[%d]: node %d is '%s' where the profile has '%s'", k,
                               v, pd__pname(q, v), pd__pname(p, v));
    }
    return PD_OK;
}

pd_status pd_profile_fit(pd_profile *p, const pd_profile *const *at, int n) {
    PD_TRY(pd__fit_check(p, at, n));
    double b[PD_MAX_FIT_BATCHES], t[PD_MAX_FIT_BATCHES], B = (double)p->batch;
    for (int k = 0; k < n; k++) b[k] = (double)at[k]->batch;
    for (int v = 0; v < p->n; v++) {
        pd__pnode *d = &p->node[v];
        for (int k = 0; k < n; k++) t[k] = at[k]->node[v].fwd_ms;
        d->fwd_call_ms = pd__fit_call(d->fwd_ms, B, t, b, n);
        for (int k = 0; k < n; k++) t[k] = at[k]->node[v].bwd_in_ms;
        d->bwd_in_call_ms = pd__fit_call(d->bwd_in_ms, B, t, b, n);
        for (int k = 0; k < n; k++) t[k] = at[k]->node[v].bwd_w_ms;
        d->bwd_w_call_ms = pd__fit_call(d->bwd_w_ms, B, t, b, n);
    }
    p->n_fit = n;
    for (int k = 0; k < n; k++) p->fit_batch[k] = at[k]->batch;
    return PD_OK;
}

pd_status pd_profile_node_call(const pd_profile *p, int i, double out[3]) {
    if (!p || !out || i < 0 || i >= p->n)
        return pd__err(PD_ERR_INVALID, "pd_profile_node_call: node index %d out of range", i);
    out[0] = p->node[i].fwd_call_ms;
    out[1] = p->node[i].bwd_in_call_ms;
    out[2] = p->node[i].bwd_w_call_ms;
    return PD_OK;
}

bool pd__plan_has_call(const pd_plan *p) {
    for (int s = 0; s < p->n_stages; s++)
        if (p->stage[s].fwd_call_ms > 0 || p->stage[s].bwd_in_call_ms > 0 || p->stage[s].bwd_w_call_ms > 0) return true;
    return false;
}

void pd__plan_linear(pd_plan *p) {
    double ratio = p->profile_batch > 0 && p->microbatch_size > 0 ? (double)p->microbatch_size / p->profile_batch : 1;
    for (int s = 0; s < p->n_stages; s++) {
        pd__stage *st = &p->stage[s];
        st->fwd_ms -= st->fwd_call_ms * (1 - ratio);
        st->bwd_in_ms -= st->bwd_in_call_ms * (1 - ratio);
        st->bwd_w_ms -= st->bwd_w_call_ms * (1 - ratio);
        st->fwd_call_ms = st->bwd_in_call_ms = st->bwd_w_call_ms = 0;
    }
}

/* ==== core/antichain.c ==== */
/* antichain.c - the valid cuts of a layer DAG, as PipeDream's planner sees
 * them: a cut is valid when the nodes before it form an ideal (every node's
 * predecessors before it too), named by its antichain; a stage is the
 * difference of two nested ideals. States are every ideal, found breadth-first
 * and ordered by size; past `max_states` ideals each size keeps the `beam`
 * cuts crossing the fewest bytes. Costs are prefix sums, so a stage's totals
 * are one subtraction. Details: docs/INTERNALS.md, "core/antichain.c". */

#include <string.h>

typedef struct pd__set {
    int words, cap, n;
    uint64_t *bits;   /* n * words */
    int *slot;        /* hash table of indices, cap entries, -1 empty */
} pd__set;

static uint64_t pd__hash_bits(const uint64_t *b, int words) {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < words; i++) {
        h ^= b[i];
        h *= 1099511628211ull;
        h ^= h >> 29;
    }
    return h;
}

/* Adds b if absent; returns its index, or -1 on allocation failure; *added says which. */
static int pd__set_add(pd__set *s, const uint64_t *b, int limit, bool *added) {
    *added = false;
    if (s->n * 2 >= s->cap) {
        int ncap = s->cap ? s->cap * 2 : 1024;
        int *ns = (int *)PD_MALLOC(sizeof(int) * (size_t)ncap);
        if (!ns) return -1;
        for (int i = 0; i < ncap; i++) ns[i] = -1;
        for (int i = 0; i < s->n; i++) {
            uint64_t h = pd__hash_bits(s->bits + (size_t)i * s->words, s->words) & (uint64_t)(ncap - 1);
            while (ns[h] >= 0) h = (h + 1) & (uint64_t)(ncap - 1);
            ns[h] = i;
        }
        PD_FREE(s->slot);
        s->slot = ns;
        s->cap = ncap;
    }
    uint64_t h = pd__hash_bits(b, s->words) & (uint64_t)(s->cap - 1);
    while (s->slot[h] >= 0) {
        if (memcmp(s->bits + (size_t)s->slot[h] * s->words, b, sizeof(uint64_t) * (size_t)s->words) == 0)
            return s->slot[h];
        h = (h + 1) & (uint64_t)(s->cap - 1);
    }
    if (s->n >= limit) return -2;
    if ((s->n & (s->n - 1)) == 0 || s->n == 0) {
        size_t want = (size_t)(s->n ? s->n * 2 : 64) * (size_t)s->words;
        uint64_t *nb = (uint64_t *)PD_REALLOC(s->bits, sizeof(uint64_t) * want);
        if (!nb) return -1;
        s->bits = nb;
    }
    memcpy(s->bits + (size_t)s->n * s->words, b, sizeof(uint64_t) * (size_t)s->words);
    s->slot[h] = s->n;
    *added = true;
    return s->n++;
}

static inline bool pd__has(const uint64_t *b, int i) { return (b[i >> 6] >> (i & 63)) & 1; }

void pd__cuts_free(pd__cuts *c) {
    if (!c) return;
    PD_FREE(c->ideal);
    PD_FREE(c->fwd);
    PD_FREE(c->bwd_in);
    PD_FREE(c->bwd_w);
    PD_FREE(c->act);
    PD_FREE(c->param);
    PD_FREE(c->optim);
    PD_FREE(c->cross_bytes);
    PD_FREE(c->antichain_bytes);
    PD_FREE(c->pred_start);
    PD_FREE(c->pred);
    PD_FREE(c);
}

/* All ideals, breadth-first; returns the count, 0 when over `limit`, -1 on allocation failure. */
static int pd__enumerate(const pd_profile *p, const int *pstart, const int *preds, int words, int limit,
                         pd__set *set) {
    uint64_t *tmp = (uint64_t *)PD_CALLOC((size_t)words, sizeof(uint64_t));
    if (!tmp) return -1;
    bool added;
    int r = pd__set_add(set, tmp, limit, &added);
    if (r < 0) {
        PD_FREE(tmp);
        return -1;
    }
    for (int head = 0; head < set->n; head++) {
        for (int v = 0; v < p->n; v++) {
            const uint64_t *b = set->bits + (size_t)head * words;
            if (pd__has(b, v)) continue;
            bool ready = true;
            for (int k = pstart[v]; k < pstart[v + 1] && ready; k++) ready = pd__has(b, preds[k]);
            if (!ready) continue;
            memcpy(tmp, b, sizeof(uint64_t) * (size_t)words);
            tmp[v >> 6] |= 1ull << (v & 63);
            r = pd__set_add(set, tmp, limit, &added);
            if (r < 0) {
                PD_FREE(tmp);
                return r == -2 ? 0 : -1;
            }
        }
    }
    PD_FREE(tmp);
    return set->n;
}

/* The DAG as the beam walks it: forwards, or reversed (node v is the
 * profile's n-1-v, edges turned round) to grow cuts from the end. */
typedef struct {
    int n;
    const pd__pnode *node;
    const int *pstart, *preds, *sstart, *succs;
} pd__dag;

/* What a cut state's candidate is ranked by: the bytes crossing it, then the
 * compute and parameters before it (equal triples cost a stage the same, so
 * only the first is kept). */
typedef struct {
    double cross, work, param;
    int at; /* its bits: cand + at * words */
} pd__cand;

static int pd__cand_cmp(const void *a, const void *b) {
    const pd__cand *x = (const pd__cand *)a, *y = (const pd__cand *)b;
    if (x->cross != y->cross) return x->cross < y->cross ? -1 : 1;
    if (x->work != y->work) return x->work < y->work ? -1 : 1;
    if (x->param != y->param) return x->param < y->param ? -1 : 1;
    return (x->at > y->at) - (x->at < y->at);
}

/* Whether b holds exactly nodes 0 .. k-1. */
static bool pd__is_prefix(const uint64_t *b, int words, int k) {
    for (int w = 0; w < words; w++) {
        uint64_t want = w < k / 64 ? ~0ull : w == k / 64 && (k & 63) ? (1ull << (k & 63)) - 1 : 0;
        if (b[w] != want) return false;
    }
    return true;
}

/* The cut states of one size: from each state of the size below, every ready
 * node added (crossing bytes updated by that node's edges only). Returns the
 * candidates, deduplicated by bits, in *out (bits in *cbits). */
static int pd__level_cands(const pd__dag *p, int words, const uint64_t *prev, const pd__cand *prevc, int nprev, pd__set *set,
                           pd__cand **out) {
    int cap = 64, nc = 0;
    pd__cand *c = (pd__cand *)PD_MALLOC(sizeof *c * (size_t)cap);
    uint64_t *tmp = (uint64_t *)PD_MALLOC(sizeof(uint64_t) * (size_t)words);
    if (!c || !tmp) goto fail;
    for (int i = 0; i < nprev; i++) {
        const uint64_t *b = prev + (size_t)i * words;
        for (int v = 0; v < p->n; v++) {
            if (pd__has(b, v)) continue;
            bool ready = true;
            for (int k = p->pstart[v]; k < p->pstart[v + 1] && ready; k++) ready = pd__has(b, p->preds[k]);
            if (!ready) continue;
            memcpy(tmp, b, sizeof(uint64_t) * (size_t)words);
            tmp[v >> 6] |= 1ull << (v & 63);
            bool added;
            int at = pd__set_add(set, tmp, INT32_MAX, &added);
            if (at < 0) goto fail;
            if (!added) continue;
            const pd__pnode *nd = &p->node[v];
            pd__cand x = {prevc[i].cross, prevc[i].work + nd->fwd_ms + nd->bwd_in_ms + nd->bwd_w_ms,
                          prevc[i].param + nd->param_bytes, at};
            if (p->sstart[v + 1] > p->sstart[v]) x.cross += nd->act_bytes; /* its consumers are all outside */
            for (int k = p->pstart[v]; k < p->pstart[v + 1]; k++) {
                int u = p->preds[k];
                bool still = false; /* u keeps a consumer outside */
                for (int e = p->sstart[u]; e < p->sstart[u + 1] && !still; e++) still = !pd__has(tmp, p->succs[e]);
                for (int j = p->pstart[v]; j < k && !still; j++) still = p->preds[j] == u; /* counted once */
                if (!still) x.cross -= p->node[u].act_bytes;
            }
            if (nc == cap) {
                pd__cand *nc2 = (pd__cand *)PD_REALLOC(c, sizeof *c * (size_t)cap * 2);
                if (!nc2) goto fail;
                c = nc2, cap *= 2;
            }
            c[nc++] = x;
        }
    }
    PD_FREE(tmp);
    *out = c;
    return nc;
fail:
    PD_FREE(tmp);
    PD_FREE(c);
    return -1;
}

static int pd__cand_by_work(const void *a, const void *b) {
    const pd__cand *x = (const pd__cand *)a, *y = (const pd__cand *)b;
    if (x->work != y->work) return x->work < y->work ? -1 : 1;
    return (x->at > y->at) - (x->at < y->at);
}

/* Keeps (moved to the front, in rank order) the prefix, the first half of the
 * beam by crossing bytes and the other half spread evenly over the compute
 * before the cut: the fewest bytes make cheap cuts, the spread lets stages
 * balance where the cheapest cuts of a size all hold the same work. cand is
 * sorted by pd__cand_cmp; equal triples count once. Returns the count kept. */
static int pd__beam_select(pd__cand *cand, int nc, int beam, int prefix) {
    uint8_t *take = (uint8_t *)PD_CALLOC((size_t)nc + 1, 1);
    pd__cand *rest = (pd__cand *)PD_MALLOC(sizeof *rest * ((size_t)nc + 1));
    if (!take || !rest) {
        PD_FREE(take);
        PD_FREE(rest);
        return -1;
    }
    int by_cross = (beam + 1) / 2, taken = 0, nr = 0, keep = 0;
    for (int i = 0; i < nc; i++) {
        bool same = i && cand[i].cross == cand[i - 1].cross && cand[i].work == cand[i - 1].work &&
                    cand[i].param == cand[i - 1].param;
        if (same) continue;
        if (taken < by_cross) take[i] = 1, taken++;
        else rest[nr] = cand[i], rest[nr++].at = i; /* at: its rank, for now */
    }
    if (prefix >= 0) take[prefix] = 1;
    qsort(rest, (size_t)nr, sizeof *rest, pd__cand_by_work);
    int spread = beam - by_cross < nr ? beam - by_cross : nr;
    for (int j = 0; j < spread; j++) take[rest[(int)(((double)j + 0.5) * nr / spread)].at] = 1;
    for (int i = 0; i < nc; i++)
        if (take[i]) cand[keep++] = cand[i];
    PD_FREE(take);
    PD_FREE(rest);
    return keep;
}

/* Cut states size by size, `beam` (plus the topological prefix) per size;
 * set receives them in that order. Returns the count, -1 on allocation failure. */
static int pd__enumerate_beam(const pd__dag *p, int words, int beam, pd__set *set) {
    int n = p->n, nprev = 1, total = 0, ok = 0;
    size_t wb = sizeof(uint64_t) * (size_t)words;
    uint64_t *prev = (uint64_t *)PD_CALLOC((size_t)words, sizeof(uint64_t)), *next = NULL;
    pd__cand *prevc = (pd__cand *)PD_CALLOC(1, sizeof *prevc), *cand = NULL;
    pd__set level = {words, 0, 0, NULL, NULL};
    bool added;
    if (!prev || !prevc || pd__set_add(set, prev, INT32_MAX, &added) < 0) goto done;
    total = 1;
    for (int k = 1; k <= n; k++) {
        level.n = 0;
        if (level.slot)
            for (int i = 0; i < level.cap; i++) level.slot[i] = -1;
        int nc = pd__level_cands(p, words, prev, prevc, nprev, &level, &cand);
        if (nc < 0) goto done;
        qsort(cand, (size_t)nc, sizeof *cand, pd__cand_cmp);
        /* the topological prefix of size k is a candidate, as that of size k-1 was kept */
        int prefix = -1;
        for (int i = 0; i < nc && prefix < 0; i++)
            if (pd__is_prefix(level.bits + (size_t)cand[i].at * words, words, k)) prefix = i;
        int keep = pd__beam_select(cand, nc, beam, prefix);
        if (keep < 0) goto done;
        next = (uint64_t *)PD_MALLOC(wb * (size_t)(keep + 1));
        if (!next) goto done;
        for (int i = 0; i < keep; i++) {
            memcpy(next + (size_t)i * words, level.bits + (size_t)cand[i].at * words, wb);
            if (pd__set_add(set, next + (size_t)i * words, INT32_MAX, &added) < 0) goto done;
        }
        PD_FREE(prev);
        prev = next, next = NULL;
        PD_FREE(prevc);
        prevc = cand, cand = NULL;
        nprev = keep;
        total += keep;
    }
    ok = 1;
done:
    PD_FREE(prev);
    PD_FREE(next);
    PD_FREE(prevc);
    PD_FREE(cand);
    PD_FREE(level.bits);
    PD_FREE(level.slot);
    return ok ? total : -1;
}

static int pd__popcount(const uint64_t *b, int words) {
    int c = 0;
    for (int i = 0; i < words; i++) c += __builtin_popcountll(b[i]);
    return c;
}

/* The beam from the start and, complemented, from the end (a cut that
 * leaves a late branch undone, as attention's V before Q and K are done,
 * is near the end's beam but far from the start's): both into set. */
static int pd__beam_both(const pd_profile *p, const int *pstart, const int *preds, const int *sstart,
                         const int *succs, int words, int beam, pd__set *set) {
    int n = p->n, ne = pstart[n], S = -1;
    pd__dag fw = {n, p->node, pstart, preds, sstart, succs};
    pd__pnode *rnode = (pd__pnode *)PD_MALLOC(sizeof *rnode * (size_t)n);
    int *rps = (int *)PD_MALLOC(sizeof(int) * ((size_t)n + 1)), *rp = (int *)PD_MALLOC(sizeof(int) * ((size_t)ne + 1));
    int *rss = (int *)PD_MALLOC(sizeof(int) * ((size_t)n + 1)), *rs = (int *)PD_MALLOC(sizeof(int) * ((size_t)ne + 1));
    uint64_t *tmp = (uint64_t *)PD_MALLOC(sizeof(uint64_t) * (size_t)words);
    pd__set back = {words, 0, 0, NULL, NULL};
    pd__dag bw = {n, rnode, rps, rp, rss, rs};
    if (!rnode || !rps || !rp || !rss || !rs || !tmp) goto done;
    rps[0] = rss[0] = 0;
    for (int r = 0; r < n; r++) {
        int v = n - 1 - r;
        rnode[r] = p->node[v];
        rps[r + 1] = rps[r], rss[r + 1] = rss[r];
        for (int k = sstart[v]; k < sstart[v + 1]; k++) rp[rps[r + 1]++] = n - 1 - succs[k];
        for (int k = pstart[v]; k < pstart[v + 1]; k++) rs[rss[r + 1]++] = n - 1 - preds[k];
    }
    if (pd__enumerate_beam(&fw, words, beam, set) < 0 || pd__enumerate_beam(&bw, words, beam, &back) < 0) goto done;
    for (int i = 0; i < back.n; i++) {
        const uint64_t *b = back.bits + (size_t)i * words;
        memset(tmp, 0, sizeof(uint64_t) * (size_t)words);
        for (int v = 0; v < n; v++)
            if (!pd__has(b, n - 1 - v)) tmp[v >> 6] |= 1ull << (v & 63);
        bool added;
        if (pd__set_add(set, tmp, INT32_MAX, &added) < 0) goto done;
    }
    S = set->n;
done:
    PD_FREE(rnode), PD_FREE(rps), PD_FREE(rp), PD_FREE(rss), PD_FREE(rs), PD_FREE(tmp);
    PD_FREE(back.bits), PD_FREE(back.slot);
    return S;
}

/* The profile's edges as CSR both ways: v's predecessors preds[pstart[v] ..
 * pstart[v + 1]], its successors likewise; false when out of memory. */
static bool pd__cuts_csr(const pd_profile *p, int *pstart, int *preds, int *sstart, int *succs) {
    int n = p->n;
    for (int e = 0; e < p->n_edges; e++) {
        pstart[p->edge[2 * e + 1] + 1]++;
        sstart[p->edge[2 * e] + 1]++;
    }
    for (int v = 0; v < n; v++) {
        pstart[v + 1] += pstart[v];
        sstart[v + 1] += sstart[v];
    }
    int *pf = (int *)PD_MALLOC(sizeof(int) * (size_t)n), *sf = (int *)PD_MALLOC(sizeof(int) * (size_t)n);
    if (!pf || !sf) {
        PD_FREE(pf);
        PD_FREE(sf);
        return false;
    }
    memcpy(pf, pstart, sizeof(int) * (size_t)n);
    memcpy(sf, sstart, sizeof(int) * (size_t)n);
    for (int e = 0; e < p->n_edges; e++) {
        preds[pf[p->edge[2 * e + 1]]++] = p->edge[2 * e];
        succs[sf[p->edge[2 * e]]++] = p->edge[2 * e + 1];
    }
    PD_FREE(pf);
    PD_FREE(sf);
    return true;
}

/* State i's ideal (the set's order[i]-th) and its sums: the costs of its
 * nodes, the bytes of those with an edge leaving it (cross) and of those
 * with no edge inside it (its antichain). */
static void pd__cuts_sums(const pd_profile *p, const pd__set *set, const int *order, const int *sstart,
                          const int *succs, pd__cuts *c) {
    int n = p->n, words = c->words;
    for (int i = 0; i < c->n_states; i++) {
        const uint64_t *b = set->bits + (size_t)order[i] * words;
        memcpy(c->ideal + (size_t)i * words, b, sizeof(uint64_t) * (size_t)words);
        for (int v = 0; v < n; v++) {
            if (!pd__has(b, v)) continue;
            const pd__pnode *nd = &p->node[v];
            c->fwd[i] += nd->fwd_ms;
            c->bwd_in[i] += nd->bwd_in_ms;
            c->bwd_w[i] += nd->bwd_w_ms;
            c->act[i] += nd->act_bytes;
            c->param[i] += nd->param_bytes;
            c->optim[i] += nd->optim_bytes;
            bool out_edge = false, in_edge = false;
            for (int k = sstart[v]; k < sstart[v + 1]; k++) {
                if (pd__has(b, succs[k])) in_edge = true;
                else out_edge = true;
            }
            if (out_edge) c->cross_bytes[i] += nd->act_bytes;
            if (!in_edge) c->antichain_bytes[i] += nd->act_bytes;
        }
    }
}

/* Containment: pred[pred_start[b] .. pred_start[b + 1]] are the states a
 * before b whose ideal is inside b's (n: the profile's nodes, for messages). */
static pd_status pd__cuts_containment(pd__cuts *c, int n) {
    int S = c->n_states, words = c->words;
    size_t cap = 1024, cnt = 0;
    c->pred = (int *)PD_MALLOC(sizeof(int) * cap);
    if (!c->pred) return pd__err(PD_ERR_NOMEM, "plan: out of memory building the cut states of %d nodes", n);
    for (int b = 0; b < S; b++) {
        const uint64_t *bb = c->ideal + (size_t)b * words;
        for (int a = 0; a < b; a++) {
            const uint64_t *ab = c->ideal + (size_t)a * words;
            bool sub = true;
            for (int w = 0; w < words && sub; w++) sub = (ab[w] & ~bb[w]) == 0;
            if (!sub) continue;
            if (cnt == cap) {
                int *np = (int *)PD_REALLOC(c->pred, sizeof(int) * cap * 2);
                if (!np) return pd__err(PD_ERR_NOMEM, "plan: out of memory building the cut states of %d nodes", n);
                c->pred = np;
                cap *= 2;
            }
            c->pred[cnt++] = a;
        }
        if (cnt > (size_t)INT32_MAX)
            return pd__err(PD_ERR_NOMEM, "plan: too many stage candidates (%d cut states); lower opt->max_states", S);
        c->pred_start[b + 1] = (int)cnt;
    }
    return PD_OK;
}

pd_status pd__cuts_build(const pd_profile *p, int max_states, int beam, pd__cuts **out) {
    if (!p || p->n <= 0) return pd__err(PD_ERR_INVALID, "plan: the profile has no nodes");
    if (max_states <= 0) max_states = 4096;
    int n = p->n, words = (n + 63) / 64;
    pd_status st = PD_ERR_NOMEM;
    pd__cuts *c = (pd__cuts *)PD_CALLOC(1, sizeof *c);
    int *pstart = (int *)PD_CALLOC((size_t)n + 1, sizeof(int)), *preds = (int *)PD_MALLOC(sizeof(int) * ((size_t)p->n_edges + 1));
    int *sstart = (int *)PD_CALLOC((size_t)n + 1, sizeof(int)), *succs = (int *)PD_MALLOC(sizeof(int) * ((size_t)p->n_edges + 1));
    int *order = NULL, *bucket, S;
    pd__set set = {words, 0, 0, NULL, NULL};
    if (!c || !pstart || !preds || !sstart || !succs || !pd__cuts_csr(p, pstart, preds, sstart, succs)) goto fail;
    S = pd__enumerate(p, pstart, preds, words, max_states, &set);
    if (S < 0) goto fail;
    if (S == 0) {
        /* too many ideals: a beam of them per size */
        if (beam < 0) beam = max_states / (2 * (n + 1)) - 1 > 1 ? max_states / (2 * (n + 1)) - 1 : 1;
        c->beam = beam;
        c->prefix_only = beam == 0;
        PD_FREE(set.bits);
        PD_FREE(set.slot);
        set.n = set.cap = 0;
        set.bits = NULL;
        set.slot = NULL;
        S = pd__beam_both(p, pstart, preds, sstart, succs, words, beam, &set);
        if (S < 0) goto fail;
    }
    /* states by ideal size, ties by index: a counting sort, as sizes are 0..n
     * (and no qsort_r, which is not standard C: the core builds on libc alone) */
    order = (int *)PD_MALLOC(sizeof(int) * (size_t)S);
    bucket = (int *)PD_CALLOC((size_t)n + 2, sizeof(int));
    if (!order || !bucket) {
        PD_FREE(bucket);
        goto fail;
    }
    for (int i = 0; i < S; i++) bucket[pd__popcount(set.bits + (size_t)i * words, words) + 1]++;
    for (int k = 0; k <= n; k++) bucket[k + 1] += bucket[k];
    for (int i = 0; i < S; i++) order[bucket[pd__popcount(set.bits + (size_t)i * words, words)]++] = i;
    PD_FREE(bucket);

    c->n_states = S;
    c->words = words;
    c->ideal = (uint64_t *)PD_MALLOC(sizeof(uint64_t) * (size_t)S * (size_t)words);
    {
        double **arr[] = {&c->fwd, &c->bwd_in, &c->bwd_w, &c->act, &c->param, &c->optim, &c->cross_bytes, &c->antichain_bytes};
        for (size_t k = 0; k < sizeof arr / sizeof arr[0]; k++)
            if (!(*arr[k] = (double *)PD_CALLOC((size_t)S, sizeof(double)))) goto fail;
    }
    c->pred_start = (int *)PD_CALLOC((size_t)S + 1, sizeof(int));
    if (!c->ideal || !c->pred_start) goto fail;
    pd__cuts_sums(p, &set, order, sstart, succs, c);
    if ((st = pd__cuts_containment(c, n)) != PD_OK) goto done;
    *out = c;
    c = NULL;
    goto done;
fail:
    pd__err(st, "plan: out of memory building the cut states of %d nodes", n);
done:
    PD_FREE(order);
    PD_FREE(set.bits);
    PD_FREE(set.slot);
    PD_FREE(pstart);
    PD_FREE(preds);
    PD_FREE(sstart);
    PD_FREE(succs);
    pd__cuts_free(c);
    return st;
}

/* ==== core/partition.c ==== */
/* partition.c - the planners: cut a profiled DAG into pipeline stages.
 *   pipedream    PipeDream's dynamic programme over cut states and per-stage
 *                replication (cost models "pipedream", number for number
 *                PipeDream's optimizer, and "default", which counts transfers)
 *   2bw          PipeDream-2BW: d x w equal-width pipelines under a memory limit
 *   bipartition  separate forward and backward cut points per worker
 *   uniform      equal node counts;  params  equal parameter bytes
 *   avgpipe      AvgPipe's tuner: K pipelines and the microbatch count
 * Every plan is then evaluated the same way (pd__plan_evaluate). The cost
 * models and the bisection: docs/INTERNALS.md, "core/partition.c". */
/* ---- core/schedule.h ---- */
/* schedule.h - private: the schedule generator (core/schedule.c) and the
 * event simulator that replays its instruction lists (core/simulate.c).
 *
 * Indexing: a schedule has p = n_stages workers (physical stages) and v =
 * chunks virtual stages per worker; virtual stage k = chunk * p + worker, so
 * without interleaving the virtual stage is the worker. Cost arrays are per
 * virtual stage. docs/SCHEDULES.md describes every kind's order.
 */
#ifndef PD_SCHEDULE_H
#define PD_SCHEDULE_H


/* "gpipe", "flush" (or "1f1b"), "pipedream", "2bw", "interleaved", "zb-h1", "avgpipe". */
pd_status pd__sched_kind_parse(const char *s, pd__sched_kind *out);
const char *pd__sched_kind_name(pd__sched_kind k);
/* pipedream and 2bw: no flush, the pipeline runs across minibatches. */
bool pd__sched_async(pd__sched_kind k);
/* "F", "B", "W", "SEND_ACT", ... ("?" when out of range). */
const char *pd__op_name(int op);

/* Builds the instruction lists of `minibatches` minibatches of `microbatches`
 * each. chunks: 1, or >= 2 for interleaved. replicas: per worker (NULL: all
 * 1); a worker with replicas > 1 all-reduces its gradients before each STEP
 * (pipedream: one STEP per round of r microbatches, replica j taking the
 * microbatches j mod r).
 * Microbatch indices are global (minibatch t: t*m .. t*m+m-1); STEP and
 * ALLREDUCE carry the last microbatch of the update they close; peer is -1
 * and version -1 where they do not apply. */
pd_status pd__schedule_build(pd__sched_kind kind, int n_stages, int chunks, int microbatches, int minibatches,
                             const int *replicas, pd__schedule **out);
/* AvgPipe's advance forward propagation with an explicit bound: stage s
 * issues min(max(inflight-s-1, 0), m) forwards before its first backward
 * (1F1B as if the pipeline were `inflight` stages deep), so it holds at most
 * min(max(inflight-s, 1), m) microbatches' activations; inflight = p is flush's
 * order. pd__schedule_build(PD_SCHED_AVGPIPE, ...) uses
 * pd__avgpipe_default_inflight(p): p + 1, one forward ahead on every stage. */
pd_status pd__schedule_build_avgpipe(int n_stages, int microbatches, int minibatches, const int *replicas,
                                     int inflight, pd__schedule **out);
int pd__avgpipe_default_inflight(int n_stages);
/* PipeDream's vertical sync on a pipedream schedule: every stage runs
 * microbatch k on the version stage 0's forward of k used. */
pd_status pd__schedule_vertical_sync(pd__schedule *s);
void pd__schedule_free(pd__schedule *s);
/* F before B before W per (virtual stage, microbatch), each exactly once;
 * every F/B past the pipeline's ends preceded by its RECV and followed by its
 * SEND; sends and receives pair up in order on every link; versions consistent
 * (a B/W uses its F's version, an F no version not yet produced); and a
 * zero-cost replay retires every instruction (no deadlock). Errors name the
 * stage, the instruction index and the microbatch. */
pd_status pd__schedule_validate(const pd__schedule *s);
/* Per-stage lines ("stage 0: F0 F1 B0 ...", compute and updates only) or CSV
 * with every instruction: stage,index,op,chunk,mb,version,peer. */
pd_status pd__schedule_write(const pd__schedule *s, FILE *f, bool csv);

/* Costs of one microbatch per virtual stage (NULL arrays: zero, except f_ms
 * and b_ms which are required). */
typedef struct pd__sim_costs {
    const double *f_ms;         /* forward */
    const double *b_ms;         /* input gradient (an unsplit B costs b_ms + w_ms) */
    const double *w_ms;         /* weight gradient */
    const double *send_ms;      /* one transfer over the link k -> k+1, either direction */
    const double *allreduce_ms; /* per worker: one ALLREDUCE */
    const double *act_bytes;    /* activations stashed per microbatch */
    const double *param_bytes;  /* one weight version */
    /* activation recomputation (NULL: off): per virtual stage, what a
     * microbatch in flight keeps (what it receives); the rest of act_bytes
     * is held once, and a B or W whose microbatch's activations are not the
     * last its stage computed first runs its forward again (f_ms more) */
    const double *in_bytes;
} pd__sim_costs;

/* Replays the lists in order per worker: an instruction starts when its
 * worker is free and, for a RECV, when the matching SEND's data has arrived
 * (sends do not block; transfers on one link direction go one at a time).
 * start/end: per worker, arrays of len[s] (NULL: not wanted). Fails naming the
 * instruction on a send/receive mismatch or a deadlock. pd__schedule_validate
 * runs it with NULL costs (all zero) after its own checks. */
pd_status pd__schedule_replay(const pd__schedule *s, const pd__sim_costs *c, double **start, double **end);

/* Validates and simulates s with synthetic costs (arrays per virtual stage,
 * as in pd__sim_costs; no all-reduce cost) and fills out (free with
 * pd_sim_result_free); throughput counts one sample per microbatch.
 * trace: when not NULL, a Chrome trace is written to it. */
pd_status pd__simulate_schedule(const pd__schedule *s, const double *f_ms, const double *b_ms, const double *w_ms,
                                const double *send_ms, const double *act_bytes, const double *param_bytes,
                                pd_sim_result *out, FILE *trace);
/* The same with every cost (all-reduce included) and an optional SVG timeline. */
pd_status pd__simulate_costs(const pd__schedule *s, const pd__sim_costs *c, pd_sim_result *out, FILE *trace, FILE *svg);

/* The schedule pd_simulate runs for this plan and these options, with the
 * per-virtual-stage costs it uses (arrays of n_stages*chunks, freed by
 * pd__sim_plan_free). */
typedef struct pd__sim_plan {
    pd__schedule *sched;
    double *f_ms, *b_ms, *w_ms, *send_ms, *act_bytes, *param_bytes; /* per virtual stage */
    double *in_bytes;  /* per virtual stage under plan->recompute; else NULL */
    double *allreduce_ms;                                           /* per worker */
    int *replicas;                                                  /* per worker */
    bool split_chunks; /* interleaved on a plan without chunks: stages split evenly */
    int64_t samples;   /* samples per minibatch: microbatch size * microbatches * width */
} pd__sim_plan;

pd_status pd__sim_plan_make(const pd_plan *p, const pd_sim_options *opt, pd__sim_plan *out);
void pd__sim_plan_free(pd__sim_plan *sp);

#endif
/* ---- end of core/schedule.h ---- */

#include <math.h>
#include <string.h>

static inline double pd__max(double a, double b) { return a > b ? a : b; }

typedef struct pd__ctx {
    const pd_profile *p;
    const pd_plan_options *o;
    bool pd_model;          /* cost model "pipedream" */
    int levels;
    int lw[8];              /* workers per level, innermost first */
    double lb[8];           /* bandwidth per level, bytes/s */
    int workers;
    double mem;             /* per-worker limit, 0 = none */
    double compress;
    bool twobw;             /* memory as 2BW keeps it: two weight versions, no per-microbatch stash */
    bool recompute;         /* 2BW with activation recomputation: the backward redoes the forward */
} pd__ctx;

/* A stage candidate between cut states a and b. */
typedef struct pd__range {
    double c, w, act, opt, in, out; /* compute ms, param, act, optim, bytes in/out */
} pd__range;

static pd__range pd__rng(const pd__ctx *x, const pd__cuts *c, int a, int b) {
    pd__range r;
    r.c = (c->fwd[b] - c->fwd[a]) * (x->recompute ? 2 : 1) + (c->bwd_in[b] - c->bwd_in[a]) + (c->bwd_w[b] - c->bwd_w[a]);
    r.w = c->param[b] - c->param[a];
    r.act = c->act[b] - c->act[a];
    r.opt = c->optim[b] - c->optim[a];
    r.in = c->cross_bytes[a];
    r.out = b == c->n_states - 1 ? 0 : c->cross_bytes[b];
    return r;
}

/* ---- the default model's stage cost -------------------------------------------- */

/* Per-worker memory of a stage replica with `down` workers after it: weights,
 * gradients and optimizer state, plus, for each microbatch in flight
 * (ceil(down/r) + 1 under 1F1B), its activations and (PipeDream) a stashed
 * weight version; 2BW keeps two versions instead, and with recomputation
 * stashes only each microbatch's stage input plus one microbatch's
 * activations. */
static double pd__stage_mem(const pd__ctx *x, const pd__range *g, int r, int down) {
    double inflight = ceil((double)down / r) + 1;
    if (x->twobw)
        return 3 * g->w + g->opt + (x->recompute ? inflight * g->in + g->act : inflight * g->act);
    return 2 * g->w + g->opt + inflight * g->act + (inflight - 1) * g->w;
}

/* Time per microbatch of a stage replicated r ways: compute plus the gradient
 * all-reduce, or the boundary transfers when they take longer. */
static double pd__stage_time(const pd__range *g, int r, double bw) {
    double wt = 4.0 * g->w / bw * 1e3;
    double t = (g->c + wt - wt / r) / r;
    double x = 2.0 * pd__max(g->in, g->out) / bw * 1e3 / r;
    return pd__max(t, x);
}

/* The fewest replicas for which the stage meets time T and the memory limit
 * with `down` workers after it; INT32_MAX when none up to `left`. */
static int pd__min_replicas(const pd__ctx *x, const pd__range *g, double T, int down, int left) {
    double bw = x->lb[0];
    if (left < 1) return INT32_MAX;
    bool mem_ok1 = x->mem <= 0 || pd__stage_mem(x, g, 1, down) <= x->mem;
    if (mem_ok1 && pd__stage_time(g, 1, bw) <= T) return 1;
    if (x->o->straight || left < 2) return INT32_MAX;
    double r = 2;
    /* compute: T r^2 - (C + 4W') r + 4W' >= 0 for r above the larger root */
    double wt = 4.0 * g->w / bw * 1e3, a = g->c + wt;
    if (T <= 0) return INT32_MAX;
    double disc = a * a - 4 * T * wt;
    if (disc > 0) r = pd__max(r, ceil((a + sqrt(disc)) / (2 * T) - 1e-9));
    /* transfers */
    double xt = 2.0 * pd__max(g->in, g->out) / bw * 1e3;
    r = pd__max(r, ceil(xt / T - 1e-9));
    /* memory: ceil(down/r) <= q */
    if (x->mem > 0) {
        double q = floor((x->mem - 2 * g->w - g->opt - g->act) / (g->act + g->w));
        if (q < 0) return INT32_MAX;
        if (q == 0) {
            if (down > 0) return INT32_MAX;
        } else {
            r = pd__max(r, ceil(down / q));
        }
    }
    if (r > left) return INT32_MAX;
    /* the closed forms round up; settle on the exact smallest r by checking */
    int ri = (int)r;
    while (ri > 2 && pd__stage_time(g, ri - 1, bw) <= T && (x->mem <= 0 || pd__stage_mem(x, g, ri - 1, down) <= x->mem))
        ri--;
    for (int k = 0; k < 3 && ri <= left; k++, ri++)
        if (pd__stage_time(g, ri, bw) <= T && (x->mem <= 0 || pd__stage_mem(x, g, ri, down) <= x->mem)) return ri;
    return INT32_MAX;
}

/* Suffix DP at bottleneck T: need[a] = fewest workers for the stages after cut
 * a; choice[a] = (next cut, replicas). Returns need[0]. */
static int pd__feasible(const pd__ctx *x, const pd__cuts *c, const int *sstart, const int *succ, const double *tot,
                        double T, int *need, int *nxt, int *rep) {
    int S = c->n_states;
    need[S - 1] = 0;
    for (int a = S - 2; a >= 0; a--) {
        int best = INT32_MAX, bb = -1, br = 0;
        for (int k = sstart[a + 1] - 1; k >= sstart[a]; k--) { /* larger cuts first: fewer stages on ties */
            int b = succ[k];
            int left = x->workers - need[b];
            if (left <= 0) continue;
            /* a stage of compute C needs at least C/T replicas: skip what cannot beat `best` */
            double C = tot[b] - tot[a];
            if (C > T * left || (best != INT32_MAX && C > T * (double)(best - need[b] - 1) && best - need[b] - 1 < left))
                continue;
            pd__range g = pd__rng(x, c, a, b);
            int r = pd__min_replicas(x, &g, T, need[b], left);
            if (r == INT32_MAX) continue;
            if (r + need[b] < best) {
                best = r + need[b];
                bb = b;
                br = r;
            }
        }
        need[a] = best;
        nxt[a] = bb;
        rep[a] = br;
    }
    return need[0];
}

typedef struct pd__cut_plan {
    int n;          /* stages */
    int *cut;       /* n+1 cut states */
    int *rep;       /* n replica counts */
    double time_ms; /* the objective's value */
} pd__cut_plan;

static void pd__cut_plan_free(pd__cut_plan *cp) {
    PD_FREE(cp->cut);
    PD_FREE(cp->rep);
    memset(cp, 0, sizeof *cp);
}

/* The bottleneck of the plan recorded in nxt/rep. */
static double pd__actual(const pd__ctx *x, const pd__cuts *c, const int *nxt, const int *rep) {
    double t = 0;
    for (int a = 0; a != c->n_states - 1; a = nxt[a]) {
        pd__range g = pd__rng(x, c, a, nxt[a]);
        t = fmax(t, pd__stage_time(&g, rep[a], x->lb[0]));
    }
    return t;
}

/* The cut states' successors as CSR (succ[sstart[a] .. sstart[a + 1]]:
 * the states whose ideal contains a's), ascending. */
static pd_status pd__fast_succ(const pd__cuts *c, int *sstart, int *succ) {
    int S = c->n_states;
    for (int b = 0; b < S; b++)
        for (int k = c->pred_start[b]; k < c->pred_start[b + 1]; k++) sstart[c->pred[k] + 1]++;
    for (int a = 0; a < S; a++) sstart[a + 1] += sstart[a];
    int *fill = (int *)PD_MALLOC(sizeof(int) * ((size_t)S + 1));
    if (!fill) return pd__err(PD_ERR_NOMEM, "plan: out of memory");
    memcpy(fill, sstart, sizeof(int) * ((size_t)S + 1));
    for (int b = 0; b < S; b++) /* ascending b: succ lists come out ascending */
        for (int k = c->pred_start[b]; k < c->pred_start[b + 1]; k++) succ[fill[c->pred[k]]++] = b;
    PD_FREE(fill);
    return PD_OK;
}

/* No plan fits the memory even with no time limit: say what one node needs. */
static pd_status pd__fast_no_fit(const pd__ctx *x) {
    double need1 = 0;
    for (int i = 0; i < x->p->n; i++) {
        const pd__pnode *nd = &x->p->node[i];
        need1 = fmax(need1, 3 * nd->param_bytes + nd->optim_bytes + nd->act_bytes);
    }
    return pd__err(PD_ERR_INVALID,
                   "plan: no plan fits opt->memory %.0f bytes per worker on %d workers (the largest single "
                   "node alone needs about %.0f bytes); raise opt->memory or add workers",
                   x->mem, x->workers, need1);
}

/* The plan the chain nxt (state a's stage ends at nxt[a]) with replicas rep
 * describes, and its bottleneck stage time. */
static pd_status pd__fast_emit(const pd__ctx *x, const pd__cuts *c, const int *nxt, const int *rep,
                               pd__cut_plan *out) {
    int S = c->n_states, n = 0;
    for (int a = 0; a != S - 1; a = nxt[a]) n++;
    out->n = n;
    out->cut = (int *)PD_MALLOC(sizeof(int) * ((size_t)n + 1));
    out->rep = (int *)PD_MALLOC(sizeof(int) * (size_t)n);
    if (!out->cut || !out->rep) {
        pd__cut_plan_free(out);
        return pd__err(PD_ERR_NOMEM, "plan: out of memory");
    }
    n = 0;
    out->time_ms = 0;
    for (int a = 0; a != S - 1; a = nxt[a]) {
        pd__range g = pd__rng(x, c, a, nxt[a]);
        out->time_ms = fmax(out->time_ms, pd__stage_time(&g, rep[a], x->lb[0]));
        out->cut[n] = a;
        out->rep[n++] = rep[a];
    }
    out->cut[n] = S - 1;
    return PD_OK;
}

static pd_status pd__fast(const pd__ctx *x, const pd__cuts *c, pd__cut_plan *out) {
    int S = c->n_states;
    int np = c->pred_start[S];
    int *sstart = (int *)PD_CALLOC((size_t)S + 1, sizeof(int)), *succ = (int *)PD_CALLOC((size_t)np + 1, sizeof(int));
    int *need = (int *)PD_MALLOC(sizeof(int) * (size_t)S), *nxt = (int *)PD_MALLOC(sizeof(int) * (size_t)S),
        *rep = (int *)PD_MALLOC(sizeof(int) * (size_t)S);
    double *tot = (double *)PD_CALLOC((size_t)S, sizeof(double));
    int *bnxt = (int *)PD_MALLOC(sizeof(int) * (size_t)S), *brep = (int *)PD_MALLOC(sizeof(int) * (size_t)S);
    pd_status st = PD_OK;
    double hi, lo;
    if (!sstart || !succ || !need || !nxt || !rep || !tot || !bnxt || !brep) {
        st = pd__err(PD_ERR_NOMEM, "plan: out of memory");
        goto done;
    }
    if ((st = pd__fast_succ(c, sstart, succ)) != PD_OK) goto done;
    for (int b = 0; b < S; b++) tot[b] = c->fwd[b] * (x->recompute ? 2 : 1) + c->bwd_in[b] + c->bwd_w[b];
    /* an upper bound: memory alone decides (no time limit) */
    if (pd__feasible(x, c, sstart, succ, tot, INFINITY, need, nxt, rep) > x->workers) {
        st = pd__fast_no_fit(x);
        goto done;
    }
    /* Bisection on the bottleneck T, tightened by real plans: a feasible probe
     * moves hi down to the bottleneck its plan actually has; once the bracket
     * is narrow, probing just below hi either finds a better plan or proves
     * hi optimal. lo starts at total compute / workers, a lower bound. */
    hi = pd__actual(x, c, nxt, rep);
    lo = 0;
    for (int b = 0; b < S; b++) lo = fmax(lo, (c->fwd[b] + c->bwd_in[b] + c->bwd_w[b]) / x->workers);
    lo = fmin(lo, hi) * (1 - 1e-12);
    memcpy(bnxt, nxt, sizeof(int) * (size_t)S);
    memcpy(brep, rep, sizeof(int) * (size_t)S);
    /* the optimum is usually near the bound: bracket it by doubling up from lo */
    for (double step = pd__max(lo * 0.25, hi * 1e-6); lo + step < hi; step *= 2) {
        double t = lo + step;
        if (pd__feasible(x, c, sstart, succ, tot, t, need, nxt, rep) <= x->workers) {
            hi = pd__actual(x, c, nxt, rep);
            memcpy(bnxt, nxt, sizeof(int) * (size_t)S);
            memcpy(brep, rep, sizeof(int) * (size_t)S);
            break;
        }
        lo = t;
    }
    for (int it = 0; it < 200 && lo < hi * (1 - 1e-12); it++) {
        double mid = hi - lo > 1e-6 * hi ? 0.5 * (lo + hi) : hi * (1 - 1e-12);
        if (pd__feasible(x, c, sstart, succ, tot, mid, need, nxt, rep) <= x->workers) {
            double t = pd__actual(x, c, nxt, rep);
            if (t < hi) {
                hi = t;
                memcpy(bnxt, nxt, sizeof(int) * (size_t)S);
                memcpy(brep, rep, sizeof(int) * (size_t)S);
            }
            if (mid < hi) hi = mid; /* (the best plan stays the one kept) */
        } else {
            lo = mid;
        }
    }
    st = pd__fast_emit(x, c, bnxt, brep, out);
done:
    PD_FREE(tot);
    PD_FREE(sstart);
    PD_FREE(succ);
    PD_FREE(need);
    PD_FREE(nxt);
    PD_FREE(rep);
    PD_FREE(bnxt);
    PD_FREE(brep);
    return st;
}

/* ---- PipeDream's dynamic programme, level by level ------------------------------ */

typedef struct pd__cell {
    double t;     /* NAN: none */
    int k, m;     /* split: previous cut and machines before it (-1: a single stage) */
    int r;        /* machines of the last stage */
} pd__cell;

/* The cost of stage (k, b] with r machines at level `lv` (M machines on the
 * level, `used` machines up to and including this stage, K machines inside
 * each); `cl` is the stage's compute time at this level. */
static double pd__pd_stage(const pd__ctx *x, const pd__cuts *c, int lv, int k, int b, int r, int M, int used,
                           double cl, int K, bool base) {
    double bw = x->lb[lv];
    pd__range g = pd__rng(x, c, k, b);
    if (x->mem > 0) {
        double stash = ceil((double)(M - used) / r) * (g.act + g.w);
        if (x->pd_model ? stash > x->mem : pd__stage_mem(x, &g, r, (M - used) * K) > x->mem) return NAN;
    }
    double dp = 4.0 * (r - 1) * g.w / (bw * r) * 1e3;
    double t;
    if (x->pd_model) {
        t = (cl + (base ? dp / K : dp)) / r;
        if (x->compress > 0) {
            double in = 2.0 * c->antichain_bytes[k] / (bw * r) * 1e3 / x->compress;
            double out = b < c->n_states - 1 ? 2.0 * c->antichain_bytes[b] / (bw * r) * 1e3 / x->compress : 0;
            if (!base) t = fmax(t, fmax(in, out));
        }
    } else {
        t = (cl + dp / K) / r;
        t = fmax(t, 2.0 * fmax(g.in, g.out) / (bw * r * K) * 1e3);
    }
    return t;
}

/* A[a][b][m] for rows a in `rows` (row list; the final level needs only row 0).
 * cl(a,b): the compute time of a range at this level (NAN when invalid). */
static pd_status pd__pd_level(const pd__ctx *x, const pd__cuts *c, int lv, int K, const double *cl, bool final,
                              pd__cell *A) {
    int S = c->n_states, M = x->lw[lv];
    int rows = final ? 1 : S;
    bool fewer = !x->pd_model;
    uint8_t *sub = NULL; /* sub[a*S+k]: ideal a strictly inside ideal k */
    if (!final) {
        if (!(sub = (uint8_t *)PD_CALLOC((size_t)S * (size_t)S, 1))) return pd__err(PD_ERR_NOMEM, "plan: out of memory (%d cut states)", S);
        for (int k = 0; k < S; k++)
            for (int q = c->pred_start[k]; q < c->pred_start[k + 1]; q++) sub[(size_t)c->pred[q] * S + k] = 1;
    }
#define CELL(a, b, m) A[((size_t)(a) * S + (size_t)(b)) * (size_t)M + (size_t)(m)]
    for (int a = 0; a < rows; a++)
        for (int b = 0; b < S; b++)
            for (int m = 0; m < M; m++) {
                pd__cell *e = &CELL(a, b, m);
                e->t = NAN;
                e->k = e->m = -1;
                e->r = 0;
                if (b <= a || isnan(cl[(size_t)a * S + b])) continue;
                if (m > 0 && x->o->straight) continue;
                e->t = pd__pd_stage(x, c, lv, a, b, m + 1, M, m + 1, cl[(size_t)a * S + b], K, true);
                e->r = m + 1;
            }
    for (int a = 0; a < rows; a++) {
        for (int m = 1; m < M; m++)
            for (int b = a + 1; b < S; b++) {
                if (a > 0 && !sub[(size_t)a * S + b]) continue; /* no stage chain from a to b: stays NAN */
                pd__cell best = CELL(a, b, m);
                if (fewer && (isnan(best.t) || CELL(a, b, m - 1).t < best.t) && !isnan(CELL(a, b, m - 1).t))
                    best = CELL(a, b, m - 1);
                for (int q = c->pred_start[b]; q < c->pred_start[b + 1]; q++) {
                    int k = c->pred[q];
                    if (k <= a) continue;
                    if (a > 0 && !sub[(size_t)a * S + k]) continue; /* k must contain a */
                    double ck = cl[(size_t)k * S + b];
                    if (isnan(ck)) continue;
                    int maxr = x->o->straight ? 1 : m;
                    for (int r = 1; r <= maxr; r++) {
                        const pd__cell *prev = &CELL(a, k, m - r);
                        if (isnan(prev->t)) continue;
                        double t = pd__pd_stage(x, c, lv, k, b, r, M, m + 1, ck, K, false);
                        if (isnan(t)) continue;
                        t = fmax(prev->t, t);
                        if (isnan(best.t) || best.t > t) {
                            best.t = t;
                            best.k = k;
                            best.m = m - r;
                            best.r = r;
                        }
                    }
                }
                CELL(a, b, m) = best;
            }
    }
#undef CELL
    PD_FREE(sub);
    return PD_OK;
}

/* Appends the stages of range (a, b] solved at level lv with m+1 machines. */
typedef struct pd__stage_list {
    int n, cap;
    int *lo, *hi, *rep;
} pd__stage_list;

static pd_status pd__push(pd__stage_list *L, int lo, int hi, int rep) {
    if (L->n == L->cap) {
        int nc = L->cap ? L->cap * 2 : 16;
        int *a = (int *)PD_REALLOC(L->lo, sizeof(int) * (size_t)nc);
        if (!a) return pd__err(PD_ERR_NOMEM, "plan: out of memory");
        L->lo = a;
        int *b = (int *)PD_REALLOC(L->hi, sizeof(int) * (size_t)nc);
        if (!b) return pd__err(PD_ERR_NOMEM, "plan: out of memory");
        L->hi = b;
        int *r = (int *)PD_REALLOC(L->rep, sizeof(int) * (size_t)nc);
        if (!r) return pd__err(PD_ERR_NOMEM, "plan: out of memory");
        L->rep = r;
        L->cap = nc;
    }
    L->lo[L->n] = lo;
    L->hi[L->n] = hi;
    L->rep[L->n++] = rep;
    return PD_OK;
}

static pd_status pd__unwind(const pd__ctx *x, const pd__cuts *c, pd__cell **As, int lv, int a, int b, int mult,
                            pd__stage_list *L) {
    int S = c->n_states, M = x->lw[lv];
    int row = lv == x->levels - 1 ? 0 : a;
    /* the splits of this range, last stage first */
    pd__stage_list here;
    memset(&here, 0, sizeof here);
    pd_status st = PD_OK;
    const pd__cell *e = &As[lv][((size_t)row * S + (size_t)b) * (size_t)M + (size_t)(M - 1)];
    int hi = b;
    for (;;) {
        if (isnan(e->t)) {
            st = pd__err(PD_ERR_INTERNAL, "plan: no solution recorded");
            break;
        }
        if ((st = pd__push(&here, e->k >= 0 ? e->k : a, hi, e->r)) != PD_OK || e->k < 0) break;
        hi = e->k;
        e = &As[lv][((size_t)row * S + (size_t)e->k) * (size_t)M + (size_t)e->m];
    }
    for (int i = here.n - 1; i >= 0 && st == PD_OK; i--) {
        if (lv == 0) st = pd__push(L, here.lo[i], here.hi[i], here.rep[i] * mult);
        else st = pd__unwind(x, c, As, lv - 1, here.lo[i], here.hi[i], here.rep[i] * mult, L);
    }
    PD_FREE(here.lo);
    PD_FREE(here.hi);
    PD_FREE(here.rep);
    return st;
}

static pd_status pd__pipedream_dp(const pd__ctx *x, const pd__cuts *c, pd__cut_plan *out) {
    int S = c->n_states;
    pd_status st = PD_OK;
    pd__cell *As[8] = {0};
    pd__stage_list L;
    memset(&L, 0, sizeof L);
    const pd__cell *top;
    double *cl = (double *)PD_MALLOC(sizeof(double) * (size_t)S * (size_t)S);
    if (!cl) return pd__err(PD_ERR_NOMEM, "plan: out of memory (%d cut states)", S);
    for (int a = 0; a < S; a++)
        for (int b = 0; b < S; b++) cl[(size_t)a * S + b] = NAN;
    for (int b = 0; b < S; b++)
        for (int q = c->pred_start[b]; q < c->pred_start[b + 1]; q++) {
            pd__range g = pd__rng(x, c, c->pred[q], b);
            cl[(size_t)c->pred[q] * S + b] = g.c;
        }
    int K = 1;
    for (int lv = 0; lv < x->levels; lv++) {
        bool final = lv == x->levels - 1;
        size_t cells = (size_t)(final ? 1 : S) * (size_t)S * (size_t)x->lw[lv];
        As[lv] = (pd__cell *)PD_MALLOC(sizeof(pd__cell) * cells);
        if (!As[lv]) {
            st = pd__err(PD_ERR_NOMEM, "plan: out of memory for the DP table (%zu cells)", cells);
            goto done;
        }
        if ((st = pd__pd_level(x, c, lv, K, cl, final, As[lv])) != PD_OK) goto done;
        if (!final)
            for (int a = 0; a < S; a++)
                for (int b = 0; b < S; b++)
                    if (!isnan(cl[(size_t)a * S + b]))
                        cl[(size_t)a * S + b] = As[lv][((size_t)a * S + b) * (size_t)x->lw[lv] + (size_t)(x->lw[lv] - 1)].t;
        K *= x->lw[lv];
    }
    top = &As[x->levels - 1][(size_t)(S - 1) * (size_t)x->lw[x->levels - 1] + (size_t)(x->lw[x->levels - 1] - 1)];
    if (isnan(top->t)) {
        st = pd__err(PD_ERR_INVALID,
                     "plan: no plan uses exactly %d workers within opt->memory %.0f bytes%s; raise opt->memory, "
                     "change opt->workers, or use opt->cost_model default",
                     x->workers, x->mem, x->o->straight ? " as a straight pipeline" : "");
        goto done;
    }
    out->time_ms = top->t;
    if ((st = pd__unwind(x, c, As, x->levels - 1, 0, S - 1, 1, &L)) != PD_OK) goto done;
    out->n = L.n;
    out->cut = (int *)PD_MALLOC(sizeof(int) * ((size_t)L.n + 1));
    out->rep = (int *)PD_MALLOC(sizeof(int) * (size_t)L.n);
    if (!out->cut || !out->rep) {
        pd__cut_plan_free(out);
        st = pd__err(PD_ERR_NOMEM, "plan: out of memory");
        goto done;
    }
    for (int i = 0; i < L.n; i++) {
        out->cut[i] = L.lo[i];
        out->rep[i] = L.rep[i];
    }
    out->cut[L.n] = S - 1;
done:
    for (int lv = 0; lv < 8; lv++) PD_FREE(As[lv]);
    PD_FREE(L.lo);
    PD_FREE(L.hi);
    PD_FREE(L.rep);
    PD_FREE(cl);
    return st;
}

/* ---- contiguous splits of the topological order ----------------------------------- */

/* Cuts nodes 0..n-1 into at most p contiguous ranges minimising the largest
 * sum of `w` (bisection over the answer, greedy check). cut[0..p]. */
static int pd__minmax_split(const double *w, int n, int p, int *cut) {
    double lo = 0, hi = 0;
    for (int i = 0; i < n; i++) {
        lo = fmax(lo, w[i]);
        hi += w[i];
    }
    for (int it = 0; it < 100 && hi - lo > 1e-12 * (hi + 1e-300); it++) {
        double mid = 0.5 * (lo + hi), s = 0;
        int k = 1;
        for (int i = 0; i < n; i++) {
            if (s + w[i] > mid) {
                k++;
                s = 0;
            }
            s += w[i];
        }
        if (k <= p) hi = mid;
        else lo = mid;
    }
    int k = 0;
    double s = 0;
    cut[0] = 0;
    for (int i = 0; i < n; i++) {
        if (s + w[i] > hi * (1 + 1e-12) && i > cut[k]) {
            cut[++k] = i;
            s = 0;
        }
        s += w[i];
    }
    /* use every worker: split the largest ranges while there are spare workers and nodes */
    while (k + 1 < p && k + 1 < n) {
        int best = -1;
        double bw = -1;
        for (int j = 0; j <= k; j++) {
            int lo2 = cut[j], hi2 = j == k ? n : cut[j + 1];
            if (hi2 - lo2 < 2) continue;
            double t = 0;
            for (int i = lo2; i < hi2; i++) t += w[i];
            if (t > bw) {
                bw = t;
                best = j;
            }
        }
        if (best < 0) break;
        int lo2 = cut[best], hi2 = best == k ? n : cut[best + 1];
        double t = 0, half = bw / 2;
        int at = lo2 + 1;
        for (int i = lo2; i < hi2 - 1; i++) {
            t += w[i];
            at = i + 1;
            if (t >= half) break;
        }
        memmove(cut + best + 2, cut + best + 1, sizeof(int) * (size_t)(k - best));
        cut[best + 1] = at;
        k++;
    }
    cut[k + 1] = n;
    return k + 1;
}

/* ---- evaluation: per-stage numbers and predictions --------------------------------- */

static int pd__level_of(const pd__ctx *x, int r1, int r2) {
    int lv = 0, g = 1;
    for (int l = 0; l < x->levels; l++) {
        g *= x->lw[l];
        if (r1 / g == r2 / g) return lv;
        lv = l + 1;
    }
    return x->levels - 1;
}

/* Each stage's sums of its nodes' costs (forward where its forward runs,
 * backward where its backward runs) and its first rank. */
static void pd__eval_sums(pd_plan *pl, const pd_profile *p) {
    int ns = pl->n_stages, rank = 0;
    for (int s = 0; s < ns; s++) {
        pd__stage *st = &pl->stage[s];
        int r = st->replicas;
        memset(st, 0, sizeof *st);
        st->replicas = r;
        st->first_rank = rank;
        rank += r;
    }
    for (int v = 0; v < p->n; v++) {
        const pd__pnode *nd = &p->node[v];
        pd__stage *f = &pl->stage[pl->fwd_stage[v]], *b = &pl->stage[pl->bwd_stage[v]];
        f->fwd_ms += nd->fwd_ms;
        b->bwd_in_ms += nd->bwd_in_ms;
        b->bwd_w_ms += nd->bwd_w_ms;
        f->fwd_call_ms += nd->fwd_call_ms;
        b->bwd_in_call_ms += nd->bwd_in_call_ms;
        b->bwd_w_call_ms += nd->bwd_w_call_ms;
        f->param_bytes += nd->param_bytes;
        f->optim_bytes += nd->optim_bytes;
        f->act_bytes += nd->act_bytes;
    }
}

/* cross[k]: the bytes crossing boundary k|k+1: tensors made at or before k
 * with a consumer after, and (bipartition) the stash a node whose backward
 * runs elsewhere sends there. */
static pd_status pd__eval_cross(const pd_plan *pl, const pd_profile *p, double *cross) {
    int n = p->n;
    int *last = (int *)PD_MALLOC(sizeof(int) * (size_t)n);
    if (!last) return pd__err(PD_ERR_NOMEM, "plan: out of memory");
    for (int v = 0; v < n; v++) last[v] = pl->fwd_stage[v];
    for (int e = 0; e < p->n_edges; e++) {
        int u = p->edge[2 * e], v = p->edge[2 * e + 1];
        if (pl->fwd_stage[v] > last[u]) last[u] = pl->fwd_stage[v];
    }
    for (int v = 0; v < n; v++)
        for (int k = pl->fwd_stage[v]; k < last[v]; k++) cross[k] += p->node[v].act_bytes;
    for (int v = 0; v < n; v++)
        if (pl->bwd_stage[v] != pl->fwd_stage[v]) {
            int lo = pl->fwd_stage[v] < pl->bwd_stage[v] ? pl->fwd_stage[v] : pl->bwd_stage[v];
            int hi = pl->fwd_stage[v] ^ pl->bwd_stage[v] ^ lo;
            for (int k = lo; k < hi; k++) cross[k] += p->node[v].act_bytes;
        }
    PD_FREE(last);
    return PD_OK;
}

/* The plan's totals from its bottleneck stage time tmax and the stages'
 * busy time: one worker's and pure data parallelism's time (level by level
 * as PipeDream computes it), the minibatch's time, speedups, bubble and
 * throughput. */
static void pd__eval_totals(pd_plan *pl, const pd_profile *p, const pd__ctx *x, double tmax, double busy, int used) {
    double single = 0, wtot = 0, call = 0;
    for (int v = 0; v < p->n; v++) {
        single += p->node[v].fwd_ms + p->node[v].bwd_in_ms + p->node[v].bwd_w_ms;
        wtot += p->node[v].param_bytes;
        call += p->node[v].fwd_call_ms + p->node[v].bwd_in_call_ms + p->node[v].bwd_w_call_ms;
    }
    double dp = single;
    int inner = 1;
    for (int l = 0; l < x->levels; l++) {
        int M = x->lw[l];
        dp = (dp + 4.0 * (M - 1) * wtot / (x->lb[l] * M) * 1e3 / inner) / M;
        inner = M;
    }
    int width = pl->width > 0 ? pl->width : 1;
    int m = pl->microbatches > 0 ? pl->microbatches : 1;
    pl->single_ms = single * m * width;
    pl->dp_ms = dp * m * width;
    if (call > 0) { /* per-call costs: one worker runs the minibatch as one call per node, a data-parallel one its share */
        pl->single_ms -= call * (m * width - 1);
        pl->dp_ms -= call * ((double)m * width / x->workers - 1);
    }
    pl->workers = x->workers;
    if (pl->algo == PD_ALGO_2BW) {
        double ar = 0;
        for (int s = 0; s < pl->n_stages; s++)
            ar = fmax(ar, width > 1 ? 4.0 * (width - 1) * pl->stage[s].param_bytes / (x->lb[x->levels - 1] * width) * 1e3 : 0);
        pl->time_ms = m * tmax + ar;
    } else if (pl->time_ms <= 0) {
        pl->time_ms = m * tmax;
    }
    pl->speedup = pl->single_ms / pl->time_ms;
    pl->dp_speedup = pl->dp_ms / pl->time_ms;
    /* steady-state idle: each worker's share of the bottleneck it does not fill */
    pl->bubble = used > 0 ? 1 - busy * m / (used * pl->time_ms) : 0;
    if (pl->bubble < 0) pl->bubble = 0;
    int64_t mbs = pl->microbatch_size > 0 ? pl->microbatch_size : 1;
    pl->throughput = (double)mbs * m * width / (pl->time_ms / 1e3);
}

static pd_status pd__plan_evaluate(pd_plan *pl, const pd_profile *p, const pd__ctx *x) {
    pd__ctx xx = *x;
    xx.twobw = pl->algo == PD_ALGO_2BW;
    xx.recompute = pl->recompute;
    int ns = pl->n_stages;
    pd__eval_sums(pl, p);
    double *cross = (double *)PD_CALLOC((size_t)ns + 1, sizeof(double));
    if (!cross) return pd__err(PD_ERR_NOMEM, "plan: out of memory");
    pd_status st0 = pd__eval_cross(pl, p, cross);
    if (st0 != PD_OK) {
        PD_FREE(cross);
        return st0;
    }
    double tmax = 0, busy = 0;
    int used = 0;
    for (int s = 0; s < ns; s++) {
        pd__stage *st = &pl->stage[s];
        int r = st->replicas;
        st->in_bytes = s > 0 ? cross[s - 1] : 0;
        st->out_bytes = s < ns - 1 ? cross[s] : 0;
        double bw = x->lb[0];
        if (s < ns - 1) bw = x->lb[pd__level_of(x, st->first_rank + r - 1, pl->stage[s + 1].first_rank)];
        st->send_ms = st->out_bytes / bw * 1e3;
        double abw = x->lb[pd__level_of(x, st->first_rank, st->first_rank + r - 1)];
        st->allreduce_ms = r > 1 ? 4.0 * (r - 1) * st->param_bytes / (abw * r) * 1e3 : 0;
        pd__range g = {st->fwd_ms * (xx.recompute ? 2 : 1) + st->bwd_in_ms + st->bwd_w_ms, st->param_bytes,
                       st->act_bytes, st->optim_bytes, st->in_bytes, st->out_bytes};
        int down = 0;
        for (int q = s + 1; q < ns; q++) down += pl->stage[q].replicas;
        st->time_ms = pd__stage_time(&g, r, bw);
        st->memory_bytes = pd__stage_mem(&xx, &g, r, down);
        tmax = fmax(tmax, st->time_ms);
        busy += (st->fwd_ms + st->bwd_in_ms + st->bwd_w_ms + (pl->recompute ? st->fwd_ms : 0)) ;
        used += r;
    }
    PD_FREE(cross);
    pd__eval_totals(pl, p, x, tmax, busy, used);
    return PD_OK;
}

/* ---- plan assembly ----------------------------------------------------------------- */

void pd__plan_free(pd_plan *pl) {
    if (!pl) return;
    if (pl->node_name)
        for (int i = 0; i < pl->n_nodes; i++) PD_FREE(pl->node_name[i]);
    PD_FREE(pl->node_name);
    PD_FREE(pl->fwd_stage);
    PD_FREE(pl->bwd_stage);
    for (int i = 0; i < pl->n_alias; i++) PD_FREE(pl->alias_name[i]);
    PD_FREE(pl->alias_name);
    PD_FREE(pl->alias_fwd);
    PD_FREE(pl->alias_bwd);
    PD_FREE(pl->stage);
    PD_FREE(pl->algo_name);
    PD_FREE(pl->cost_model);
    PD_FREE(pl->model);
    PD_FREE(pl);
}

void pd_plan_destroy(pd_plan *p) { pd__plan_free(p); }

static pd_status pd__plan_alloc(const pd_profile *p, int n_stages, pd_plan **out) {
    pd_plan *pl = (pd_plan *)PD_CALLOC(1, sizeof *pl);
    if (!pl) return pd__err(PD_ERR_NOMEM, "plan: out of memory");
    pl->n_nodes = p->n;
    pl->node_name = (char **)PD_CALLOC((size_t)p->n, sizeof(char *));
    pl->fwd_stage = (int *)PD_CALLOC((size_t)p->n, sizeof(int));
    pl->bwd_stage = (int *)PD_CALLOC((size_t)p->n, sizeof(int));
    pl->n_stages = n_stages;
    pl->stage = (pd__stage *)PD_CALLOC((size_t)n_stages, sizeof(pd__stage));
    pl->chunks = 1;
    pl->width = 1;
    pl->microbatches = 1;
    if (!pl->node_name || !pl->fwd_stage || !pl->bwd_stage || !pl->stage) {
        pd__plan_free(pl);
        return pd__err(PD_ERR_NOMEM, "plan: out of memory");
    }
    for (int i = 0; i < p->n; i++) {
        const char *nm = p->node[i].name ? p->node[i].name : "";
        if (!(pl->node_name[i] = pd__strdup(nm))) {
            pd__plan_free(pl);
            return pd__err(PD_ERR_NOMEM, "plan: out of memory");
        }
    }
    pl->microbatch_size = p->batch;
    pl->profile_batch = p->batch;
    if (p->model && !(pl->model = pd__strdup(p->model))) {
        pd__plan_free(pl);
        return pd__err(PD_ERR_NOMEM, "plan: out of memory");
    }
    *out = pl;
    return PD_OK;
}

/* PipeDream leaves its input layers and unused "__getitem__" sinks out of the
 * search (they have no cost and would only waste a stage); they join the
 * first stage / their producer's stage. */
static bool pd__skip_input(const pd_profile *p, int v, const int *indeg) {
    return indeg[v] == 0 && p->node[v].desc && strncmp(p->node[v].desc, "Input", 5) == 0;
}

/* Nodes left out of the search (fwd_stage -1): inputs join the first stage,
 * sinks their producer's; the backward runs where the forward does. */
static void pd__place_skipped(pd_plan *pl, const pd_profile *p, const int *indeg) {
    for (int v = 0; v < p->n; v++)
        if (pl->fwd_stage[v] < 0) {
            int s = 0;
            for (int e = 0; e < p->n_edges; e++)
                if (p->edge[2 * e + 1] == v && pl->fwd_stage[p->edge[2 * e]] > s) s = pl->fwd_stage[p->edge[2 * e]];
            pl->fwd_stage[v] = indeg[v] == 0 ? 0 : s;
        }
    memcpy(pl->bwd_stage, pl->fwd_stage, sizeof(int) * (size_t)p->n);
}

static pd_status pd__plan_from_cuts(const pd__ctx *x, const pd_profile *rp, const int *map, const pd__cuts *c,
                                    const pd__cut_plan *cp, pd_plan *pl) {
    (void)x;
    for (int s = 0; s < cp->n; s++) {
        pl->stage[s].replicas = cp->rep[s];
        const uint64_t *a = c->ideal + (size_t)cp->cut[s] * c->words, *b = c->ideal + (size_t)cp->cut[s + 1] * c->words;
        for (int v = 0; v < rp->n; v++) {
            bool in_b = (b[v >> 6] >> (v & 63)) & 1, in_a = (a[v >> 6] >> (v & 63)) & 1;
            if (in_b && !in_a) pl->fwd_stage[map[v]] = s;
        }
    }
    return PD_OK;
}

static const char *const pd__algo_names[] = {"pipedream", "2bw", "bipartition", "uniform", "params", "avgpipe"};

const char *pd__algo_name(pd__algo a) { return pd__algo_names[a]; }

pd_status pd__algo_parse(const char *s, pd__algo *out) {
    if (!s) s = "pipedream";
    for (int i = 0; i < (int)(sizeof pd__algo_names / sizeof *pd__algo_names); i++)
        if (strcmp(s, pd__algo_names[i]) == 0) {
            *out = (pd__algo)i;
            return PD_OK;
        }
    return pd__err(PD_ERR_INVALID, "plan: unknown opt->algo '%s' (pipedream, 2bw, bipartition, uniform, params, avgpipe)",
                   s);
}

/* Depth-d straight pipeline for 2bw: fast DP with r = 1 on d workers, 2BW's
 * memory (recomputation: `rc`). */
static pd_status pd__straight(const pd__ctx *x0, const pd__cuts *c, int d, bool rc, pd__cut_plan *cp) {
    pd__ctx x = *x0;
    pd_plan_options o = *x0->o;
    o.straight = 1;
    x.o = &o;
    x.workers = d;
    x.twobw = true;
    x.recompute = rc;
    return pd__fast(&x, c, cp);
}

/* ---- AvgPipe's tuner ------------------------------------------------------------------
 * K parallel pipelines (K divides the workers W) of W/K stages each, m
 * microbatches per pipeline minibatch, under the avgpipe schedule and the
 * memory limit; predicted by pd_simulate (elastic averaging as an all-reduce
 * among the K twins). For each K, m is the fewest microbatches whose
 * throughput is within 2% of that K's best; the chosen K has the highest
 * throughput (ties: fewer pipelines). The memory and cost formulas:
 * docs/INTERNALS.md, "core/partition.c". */

enum { PD__AVG_SLACK_PCT = 2 };

/* Memory, averaging cost and the simulator's prediction for an avgpipe plan
 * of width K with m microbatches (after pd__plan_evaluate). */
static pd_status pd__avgpipe_predict(pd_plan *pl, const pd__ctx *x) {
    int d = pl->n_stages, K = pl->width, m = pl->microbatches, L = pd__avgpipe_default_inflight(d);
    double bw = x->lb[x->levels - 1];
    for (int s = 0; s < d; s++) {
        pd__stage *st = &pl->stage[s];
        int held = L - s > m ? m : L - s;
        st->allreduce_ms = K > 1 ? 4.0 * (K - 1) * st->param_bytes / (bw * K) * 1e3 : 0;
        st->memory_bytes = 3 * st->param_bytes + st->optim_bytes + held * st->act_bytes;
    }
    pd_sim_options so = PD_SIM_OPTIONS_INIT;
    so.schedule = "avgpipe";
    so.microbatches = m;
    so.minibatches = 1;
    pd_sim_result r;
    PD_TRY(pd_simulate(pl, &so, &r));
    pl->time_ms = r.time_ms;
    pl->throughput = r.throughput;
    pl->bubble = r.bubble;
    pl->speedup = pl->time_ms > 0 ? pl->single_ms / pl->time_ms : 0;
    pl->dp_speedup = pl->time_ms > 0 ? pl->dp_ms / pl->time_ms : 0;
    pd_sim_result_free(&r);
    return PD_OK;
}

static bool pd__avgpipe_fits(const pd_plan *pl, const pd__ctx *x) {
    for (int s = 0; s < pl->n_stages && x->mem > 0; s++)
        if (pl->stage[s].memory_bytes > x->mem) return false;
    return true;
}

/* The whole search; *out: the chosen plan, evaluated (p: the evaluation
 * profile, rp/map/inv/indeg as pd_plan_create builds them). */
static pd_status pd__avgpipe_tune(const pd__ctx *x0, const pd_profile *p, const pd_profile *rp, const int *map,
                                  const int *inv, const int *indeg, const pd__cuts *c, pd_plan **out) {
    int W = x0->workers, Mmax = x0->o->microbatches > 0 ? x0->o->microbatches : 4 * W;
    pd_plan *best = NULL;
    pd_status st = PD_OK;
    for (int K = 1; K <= W && st == PD_OK; K++) {
        if (W % K) continue;
        int d = W / K;
        pd__ctx x = *x0;
        pd_plan_options o = *x0->o;
        o.straight = 1;
        x.o = &o;
        x.workers = d;
        x.mem = 0; /* the cut for time; avgpipe's own memory is checked below */
        if (x.levels > 1) { /* the pipelines' stages talk over the level that holds d workers */
            x.levels = 1;
            int lv = 0;
            for (int g = x0->lw[0]; lv + 1 < x0->levels && g < d; g *= x0->lw[++lv]) {}
            x.lb[0] = x0->lb[lv];
            x.lw[0] = d;
        } else {
            x.lw[0] = d;
        }
        pd__cut_plan cp;
        memset(&cp, 0, sizeof cp);
        if (pd__fast(&x, c, &cp) != PD_OK) continue;
        pd_plan *k_best = NULL, **cand = (pd_plan **)PD_CALLOC((size_t)Mmax + 1, sizeof *cand);
        if (!cand) {
            pd__cut_plan_free(&cp);
            st = pd__err(PD_ERR_NOMEM, "plan: out of memory");
            break;
        }
        double top = -1;
        for (int m = 1; m <= Mmax && st == PD_OK; m++) {
            pd_plan *pl;
            if ((st = pd__plan_alloc(p, cp.n, &pl)) != PD_OK) break;
            for (int v = 0; v < p->n; v++) pl->fwd_stage[v] = -1;
            pd__plan_from_cuts(&x, rp, map, c, &cp, pl);
            for (int v = 0; v < p->n; v++)
                if (inv[v] < 0) pl->fwd_stage[v] = -1;
            pd__place_skipped(pl, p, indeg);
            pl->algo = PD_ALGO_AVGPIPE;
            pl->width = K;
            pl->microbatches = m;
            if ((st = pd__plan_evaluate(pl, p, x0)) == PD_OK) st = pd__avgpipe_predict(pl, x0);
            if (st != PD_OK || !pd__avgpipe_fits(pl, x0)) {
                pd__plan_free(pl);
                continue;
            }
            cand[m] = pl;
            if (pl->throughput > top) top = pl->throughput;
        }
        for (int m = 1; m <= Mmax && !k_best; m++)
            if (cand[m] && cand[m]->throughput >= top * (1 - PD__AVG_SLACK_PCT / 100.0)) k_best = cand[m];
        for (int m = 1; m <= Mmax; m++)
            if (cand[m] != k_best) pd__plan_free(cand[m]);
        PD_FREE(cand);
        pd__cut_plan_free(&cp);
        if (k_best && (!best || k_best->throughput > best->throughput * (1 + 1e-9))) {
            pd__plan_free(best);
            best = k_best;
        } else {
            pd__plan_free(k_best);
        }
    }
    if (st != PD_OK) {
        pd__plan_free(best);
        return st;
    }
    if (!best)
        return pd__err(PD_ERR_INVALID,
                       "plan: no avgpipe configuration (pipelines dividing %d workers, 1 to %d microbatches) fits "
                       "opt->memory %.0f bytes per worker; raise opt->memory or add workers",
                       W, Mmax, x0->mem);
    *out = best;
    return PD_OK;
}

/* uniform and params: the nodes in order, cut into workers stages of equal
 * node counts or parameter bytes, no replicas. */
static pd_status pd__plan_even(const pd__ctx *x, const pd_profile *p, pd__algo algo, pd_plan **out) {
    if (x->workers > p->n)
        return pd__err(PD_ERR_INVALID, "plan: %d workers but the model has only %d nodes; set opt->workers to %d or fewer", x->workers, p->n, p->n);
    double *w = (double *)PD_MALLOC(sizeof(double) * (size_t)p->n);
    int *cut = (int *)PD_MALLOC(sizeof(int) * ((size_t)x->workers + 2));
    if (!w || !cut) {
        PD_FREE(w);
        PD_FREE(cut);
        return pd__err(PD_ERR_NOMEM, "plan: out of memory");
    }
    for (int v = 0; v < p->n; v++) w[v] = algo == PD_ALGO_UNIFORM ? 1 : p->node[v].param_bytes + 1e-9;
    int ns = pd__minmax_split(w, p->n, x->workers, cut);
    pd_plan *pl = NULL;
    pd_status st = pd__plan_alloc(p, ns, &pl);
    if (st == PD_OK) {
        for (int s = 0; s < ns; s++) {
            pl->stage[s].replicas = 1;
            for (int v = cut[s]; v < cut[s + 1]; v++) pl->fwd_stage[v] = pl->bwd_stage[v] = s;
        }
        pl->algo = algo;
        pl->microbatches = x->o->microbatches > 0 ? x->o->microbatches : 1;
        st = pd__plan_evaluate(pl, p, x);
    }
    PD_FREE(w);
    PD_FREE(cut);
    if (st != PD_OK) {
        pd__plan_free(pl);
        return st;
    }
    pl->algo_name = pd__strdup(pd__algo_name(algo));
    pl->cost_model = pd__strdup("default");
    pl->bandwidth = x->lb[0];
    *out = pl;
    return PD_OK;
}

/* The planner's context from the options: the cost model, the workers per
 * level and their bandwidths, the memory limit; each option checked. */
static pd_status pd__ctx_init(pd__ctx *x, const pd_profile *p, const pd_plan_options *o) {
    const char *cm = o->cost_model ? o->cost_model : "default";
    if (strcmp(cm, "pipedream") == 0) x->pd_model = true;
    else if (strcmp(cm, "default") != 0)
        return pd__err(PD_ERR_INVALID, "plan: unknown opt->cost_model '%s' (default, pipedream)", cm);
    if (p->n <= 0) return pd__err(PD_ERR_INVALID, "plan: the profile has no nodes");
    if (o->n_levels < 0 || o->n_levels > 8) return pd__err(PD_ERR_INVALID, "plan: opt->level_workers has %d levels (1 to 8)", o->n_levels);
    if (o->n_levels > 0) {
        x->levels = o->n_levels;
        int64_t prod = 1;
        for (int l = 0; l < o->n_levels; l++) {
            if (o->level_workers[l] < 1) return pd__err(PD_ERR_INVALID, "plan: opt->level_workers level %d has %d workers", l, o->level_workers[l]);
            if (!(o->level_bandwidth[l] > 0) || !isfinite(o->level_bandwidth[l]))
                return pd__err(PD_ERR_INVALID, "plan: opt->level_bandwidth of level %d must be positive", l);
            x->lw[l] = o->level_workers[l];
            x->lb[l] = o->level_bandwidth[l];
            prod *= x->lw[l];
            if (prod > 1 << 20) return pd__err(PD_ERR_INVALID, "plan: opt->level_workers has more than %d workers", 1 << 20);
        }
        if (o->workers > 1 && o->workers != prod)
            return pd__err(PD_ERR_INVALID, "plan: opt->workers %d differs from the topology's %lld workers", o->workers, (long long)prod);
        x->workers = (int)prod;
    } else {
        if (o->workers < 1 || o->workers > 1 << 20) return pd__err(PD_ERR_INVALID, "plan: opt->workers must be 1 to %d (got %d)", 1 << 20, o->workers);
        if (!(o->bandwidth > 0) || !isfinite(o->bandwidth)) return pd__err(PD_ERR_INVALID, "plan: opt->bandwidth must be positive");
        x->levels = 1;
        x->lw[0] = o->workers;
        x->lb[0] = o->bandwidth;
        x->workers = o->workers;
    }
    if (o->memory < 0 || !isfinite(o->memory)) return pd__err(PD_ERR_INVALID, "plan: opt->memory must be a positive byte count");
    x->mem = o->memory;
    x->compress = o->activation_compression;
    if (o->microbatches < 0) return pd__err(PD_ERR_INVALID, "plan: opt->microbatches must be positive");
    return PD_OK;
}

static pd_status pd__bipartition(const pd__ctx *x, const pd_profile *p, pd_plan **out);

/* The DAG the cuts are made on (rp: without PipeDream's input layers and
 * __getitem__ sinks; map: its node v is p's map[v], inv the other way) and
 * the profile plans are evaluated on (ep: input layers cost nothing). */
static pd_status pd__plan_dag(const pd_profile *p, int *indeg, int *outdeg, int *map, int *inv, pd_profile *rp,
                              pd__pnode *ev_nodes, pd_profile *ep) {
    for (int e = 0; e < p->n_edges; e++) {
        indeg[p->edge[2 * e + 1]]++;
        outdeg[p->edge[2 * e]]++;
    }
    for (int v = 0; v < p->n; v++) {
        inv[v] = -1;
        bool skip = pd__skip_input(p, v, indeg) ||
                    (outdeg[v] == 0 && p->node[v].desc && strncmp(p->node[v].desc, "__getitem__", 11) == 0);
        if (skip) continue;
        inv[v] = rp->n;
        map[rp->n] = v;
        rp->node[rp->n++] = p->node[v];
    }
    if (rp->n == 0) return pd__err(PD_ERR_INVALID, "plan: the profile has only input nodes");
    for (int e = 0; e < p->n_edges; e++) {
        int a = inv[p->edge[2 * e]], b = inv[p->edge[2 * e + 1]];
        if (a < 0 || b < 0) continue;
        rp->edge[2 * rp->n_edges] = a;
        rp->edge[2 * rp->n_edges + 1] = b;
        rp->n_edges++;
    }
    rp->batch = p->batch;
    /* the profile the plan is evaluated on: PipeDream's input layers cost nothing */
    *ep = *p;
    ep->node = ev_nodes;
    memcpy(ev_nodes, p->node, sizeof(pd__pnode) * (size_t)p->n);
    for (int v = 0; v < p->n; v++)
        if (pd__skip_input(p, v, indeg)) {
            pd__pnode *nd = &ev_nodes[v];
            nd->fwd_ms = nd->bwd_in_ms = nd->bwd_w_ms = nd->act_bytes = nd->param_bytes = nd->optim_bytes = 0;
            nd->fwd_call_ms = nd->bwd_in_call_ms = nd->bwd_w_call_ms = 0;
        }
    return PD_OK;
}

/* 2BW: every depth d dividing the workers, with and without recomputation;
 * the fastest that fits opt->memory. */
static pd_status pd__plan_2bw(pd__ctx *x, const pd_profile *p, const pd_profile *rp, const int *map, const int *inv,
                              const int *indeg, const pd__cuts *c, pd_plan **out) {
    pd_status st;
    double best_tp = -1;
    int best_d = 0, best_rc = 0, best_w = 1;
    pd__cut_plan best;
    memset(&best, 0, sizeof best);
    for (int d = 1; d <= x->workers; d++) {
        if (x->workers % d || d > c->n_states - 1) continue;
        for (int rc = 0; rc < 2; rc++) {
            pd__cut_plan t;
            memset(&t, 0, sizeof t);
            if (pd__straight(x, c, d, rc, &t) != PD_OK) continue; /* does not fit at this depth */
            pd_plan *cand;
            if ((st = pd__plan_alloc(p, t.n, &cand)) != PD_OK) {
                pd__cut_plan_free(&t);
                pd__cut_plan_free(&best);
                return st;
            }
            cand->algo = PD_ALGO_2BW;
            cand->recompute = rc;
            cand->width = x->workers / d;
            cand->microbatches = x->o->microbatches > 0 ? x->o->microbatches : t.n;
            pd__plan_from_cuts(x, rp, map, c, &t, cand);
            for (int s = 0; s < t.n; s++) cand->stage[s].replicas = 1;
            for (int v = 0; v < p->n; v++)
                if (inv[v] < 0) cand->fwd_stage[v] = -1;
            pd__place_skipped(cand, p, indeg);
            pd__plan_evaluate(cand, p, x);
            bool fits = true;
            for (int s = 0; s < t.n && x->mem > 0; s++) fits &= cand->stage[s].memory_bytes <= x->mem;
            if (fits && cand->throughput > best_tp * (1 + 1e-12)) {
                best_tp = cand->throughput;
                best_d = t.n;
                best_rc = rc;
                pd__cut_plan_free(&best);
                best.n = t.n;
                best.cut = (int *)PD_MALLOC(sizeof(int) * ((size_t)t.n + 1));
                best.rep = (int *)PD_MALLOC(sizeof(int) * (size_t)t.n);
                if (best.cut && best.rep) {
                    memcpy(best.cut, t.cut, sizeof(int) * ((size_t)t.n + 1));
                    memcpy(best.rep, t.rep, sizeof(int) * (size_t)t.n);
                }
                best_w = x->workers / d;
            }
            pd__plan_free(cand);
            pd__cut_plan_free(&t);
        }
    }
    if (best_tp < 0 || !best.cut) {
        pd__cut_plan_free(&best);
        return pd__err(PD_ERR_INVALID,
                       "plan: no 2bw configuration fits opt->memory %.0f bytes per worker on %d workers; raise "
                       "opt->memory or add workers", x->mem, x->workers);
    }
    pd_plan *pl;
    if ((st = pd__plan_alloc(p, best_d, &pl)) != PD_OK) {
        pd__cut_plan_free(&best);
        return st;
    }
    pl->algo = PD_ALGO_2BW;
    pl->recompute = best_rc;
    pl->width = best_w;
    pl->microbatches = x->o->microbatches > 0 ? x->o->microbatches : best_d;
    for (int v = 0; v < p->n; v++) pl->fwd_stage[v] = -1;
    pd__plan_from_cuts(x, rp, map, c, &best, pl);
    for (int s = 0; s < best_d; s++) pl->stage[s].replicas = 1;
    pd__cut_plan_free(&best);
    *out = pl;
    return PD_OK;
}

/* Over max_states ideals every cost model takes a beam of cuts (antichain.c;
 * -1: as wide as max_states allows). A topology's inner levels run a DP cubic
 * in the states (O(S^3 M^2)): there the beam gets a quarter of max_states
 * (T5 at 4x2: 495 states, 1.9 s), at least one cut per size and way while
 * that (about 4(n+1) states) fits in max_states and its ~3(n+1) states stay
 * under 1,024 (Inception-v3 at 4x2: 803 states, 25 s, against 2 s for its
 * 326 prefixes; NASNet-mobile's 2,700 would take hours), else the prefixes
 * alone (0). */
static int pd__beam_width(const pd__ctx *x, int n, int max_states) {
    if (x->levels == 1) return -1;
    if (max_states <= 0) max_states = 4096;
    if (max_states < 4 * (n + 1) || 3 * (n + 1) > 1024) return 0;
    int w = max_states / 4 / (2 * (n + 1)) - 1;
    return w > 1 ? w : 1;
}

/* PipeDream's algorithm on the cuts c: the DP (the default model's
 * bisection on one level), the plan evaluated. */
static pd_status pd__plan_dp(const pd__ctx *x, const pd_profile *p, const pd_profile *rp, const int *map,
                             const int *indeg, const pd__cuts *c, pd_plan **out) {
    pd__cut_plan cp;
    memset(&cp, 0, sizeof cp);
    pd_plan *pl = NULL;
    pd_status st = x->levels == 1 && !x->pd_model ? pd__fast(x, c, &cp) : pd__pipedream_dp(x, c, &cp);
    if (st == PD_OK) st = pd__plan_alloc(p, cp.n, &pl);
    if (st == PD_OK) {
        pl->algo = PD_ALGO_PIPEDREAM;
        pl->microbatches = x->o->microbatches > 0 ? x->o->microbatches : 1;
        for (int v = 0; v < p->n; v++) pl->fwd_stage[v] = -1;
        pd__plan_from_cuts(x, rp, map, c, &cp, pl);
        if (x->pd_model) pl->time_ms = cp.time_ms; /* PipeDream's own number */
        pd__place_skipped(pl, p, indeg);
        double dp_time = pl->time_ms;
        st = pd__plan_evaluate(pl, p, x);
        if (st == PD_OK && x->pd_model) {
            pl->time_ms = dp_time;
            pl->speedup = pl->single_ms / pl->time_ms;
            pl->dp_speedup = pl->dp_ms / pl->time_ms;
        }
    }
    pd__cut_plan_free(&cp);
    if (st != PD_OK) {
        pd__plan_free(pl);
        return st;
    }
    *out = pl;
    return PD_OK;
}

/* The default model on a topology: the DP minimises its per-level estimate,
 * which the evaluation can rank differently, so more cuts can evaluate worse
 * (Inception-v3 at 4x2: the beam's plan 482 ms, the prefixes' 289 ms). The
 * prefixes' plan replaces the beam's (*c and *pl) when it evaluates faster:
 * never worse than before the beam. */
static pd_status pd__prefixes_if_better(const pd__ctx *x, const pd_profile *p, const pd_profile *rp, const int *map,
                                        const int *indeg, pd__cuts **c, pd_plan **pl) {
    pd__cuts *c0 = NULL;
    pd_plan *pl0 = NULL;
    pd_status st = pd__cuts_build(rp, x->o->max_states > 0 ? x->o->max_states : 4096, 0, &c0);
    if (st == PD_OK) st = pd__plan_dp(x, p, rp, map, indeg, c0, &pl0);
    if (st == PD_OK && pl0->time_ms < (*pl)->time_ms) {
        pd__plan_free(*pl), pd__cuts_free(*c);
        *pl = pl0, *c = c0;
        return PD_OK;
    }
    pd__plan_free(pl0), pd__cuts_free(c0);
    return st;
}

/* The plan for a profile already at the microbatch size. */
static pd_status pd__plan_create_at(const pd_profile *p, const pd_plan_options *o, pd_plan **out) {
    pd__ctx x;
    memset(&x, 0, sizeof x);
    x.p = p;
    x.o = o;
    pd__algo algo = PD_ALGO_PIPEDREAM;
    PD_TRY(pd__algo_parse(o->algo, &algo));
    PD_TRY(pd__ctx_init(&x, p, o));

    if (algo == PD_ALGO_BIPARTITION) return pd__bipartition(&x, p, out);

    if (algo == PD_ALGO_UNIFORM || algo == PD_ALGO_PARAMS) return pd__plan_even(&x, p, algo, out);

    int *indeg = (int *)PD_CALLOC((size_t)p->n, sizeof(int)), *outdeg = (int *)PD_CALLOC((size_t)p->n, sizeof(int));
    int *map = (int *)PD_MALLOC(sizeof(int) * (size_t)p->n), *inv = (int *)PD_MALLOC(sizeof(int) * (size_t)p->n);
    pd_profile rp;
    memset(&rp, 0, sizeof rp);
    rp.node = (pd__pnode *)PD_MALLOC(sizeof(pd__pnode) * (size_t)p->n);
    rp.edge = (int *)PD_MALLOC(sizeof(int) * 2 * ((size_t)p->n_edges + 1));
    pd_profile ep;
    pd__pnode *ev_nodes = (pd__pnode *)PD_MALLOC(sizeof(pd__pnode) * (size_t)p->n);
    pd__cuts *c = NULL;
    pd_plan *pl = NULL;
    pd_status st = PD_OK;
    if (!indeg || !outdeg || !map || !inv || !rp.node || !rp.edge || !ev_nodes) {
        st = pd__err(PD_ERR_NOMEM, "plan: out of memory");
        goto done;
    }
    if ((st = pd__plan_dag(p, indeg, outdeg, map, inv, &rp, ev_nodes, &ep)) != PD_OK) goto done;
    p = &ep;
    if ((st = pd__cuts_build(&rp, o->max_states > 0 ? o->max_states : 4096, pd__beam_width(&x, rp.n, o->max_states),
                             &c)) != PD_OK)
        goto done;

    if (algo == PD_ALGO_AVGPIPE) {
        if ((st = pd__avgpipe_tune(&x, p, &rp, map, inv, indeg, c, &pl)) != PD_OK) goto done;
    } else if (algo == PD_ALGO_2BW) {
        if ((st = pd__plan_2bw(&x, p, &rp, map, inv, indeg, c, &pl)) != PD_OK) goto done;
    } else {
        if ((st = pd__plan_dp(&x, p, &rp, map, indeg, c, &pl)) != PD_OK) goto done;
        if (x.levels > 1 && !x.pd_model && c->beam > 0 && (st = pd__prefixes_if_better(&x, p, &rp, map, indeg, &c, &pl)))
            goto done;
    }
    if (algo == PD_ALGO_2BW) pd__place_skipped(pl, p, indeg);
    if (algo == PD_ALGO_2BW) {
        double dp_time = pl->time_ms;
        if ((st = pd__plan_evaluate(pl, p, &x)) != PD_OK) goto done;
        if (x.pd_model) {
            pl->time_ms = dp_time;
            pl->speedup = pl->single_ms / pl->time_ms;
            pl->dp_speedup = pl->dp_ms / pl->time_ms;
        }
    }
    pl->algo_name = pd__strdup(pd__algo_name(pl->algo));
    pl->cost_model = pd__strdup(x.pd_model ? "pipedream" : "default");
    pl->bandwidth = x.lb[0];
    pl->beam = c->beam;
    pl->prefix_only = c->prefix_only;
    pl->n_cut_states = c->n_states;
    if (!pl->algo_name || !pl->cost_model) st = pd__err(PD_ERR_NOMEM, "plan: out of memory");
done:
    pd__cuts_free(c);
    PD_FREE(indeg);
    PD_FREE(outdeg);
    PD_FREE(map);
    PD_FREE(inv);
    PD_FREE(rp.node);
    PD_FREE(rp.edge);
    PD_FREE(ev_nodes);
    if (st != PD_OK) {
        pd__plan_free(pl);
        return st;
    }
    *out = pl;
    return PD_OK;
}

/* ---- Bi-Partition ---------------------------------------------------------------------
 * Worker i runs the forward of nodes [f_i, f_i+1) and the backward of nodes
 * [b_i, b_i+1) of the topological order. Letting the two cuts differ
 * balances each worker's F+B load at a finer grain than one cut can. A node
 * whose backward runs on a neighbour must have no parameters (its weights and
 * their gradients stay with its forward), and its stashed activation travels
 * with the boundary gradient. Bisection on the worst load T; for each T a
 * frontier DP keeps, per forward cut, the furthest backward cut reachable. */
/* Bi-Partition's search state: prefix sums of forward (F) and backward (B)
 * time, the parameter-free window around each position, and per stage
 * count i and forward cut f the furthest backward cut reached (reach) and
 * the forward cut it came from (from). */
typedef struct pd__bip {
    int n, workers;
    double *F, *B;
    int *prevp, *nextp, *reach, *from;
} pd__bip;

#define PD__BIP_AT(a, x, i, f) (x)->a[(size_t)(i) * (size_t)((x)->n + 1) + (size_t)(f)]

static void pd__bip_free(pd__bip *x) {
    PD_FREE(x->F);
    PD_FREE(x->B);
    PD_FREE(x->prevp);
    PD_FREE(x->nextp);
    PD_FREE(x->reach);
    PD_FREE(x->from);
}

static pd_status pd__bip_init(pd__bip *x, const pd_profile *p, int workers) {
    int n = p->n;
    size_t cells = (size_t)(workers + 1) * ((size_t)n + 1);
    memset(x, 0, sizeof *x);
    x->n = n;
    x->workers = workers;
    x->F = (double *)PD_CALLOC((size_t)n + 1, sizeof(double));
    x->B = (double *)PD_CALLOC((size_t)n + 1, sizeof(double));
    x->prevp = (int *)PD_MALLOC(sizeof(int) * ((size_t)n + 1));
    x->nextp = (int *)PD_MALLOC(sizeof(int) * ((size_t)n + 1));
    x->reach = (int *)PD_MALLOC(sizeof(int) * cells);
    x->from = (int *)PD_MALLOC(sizeof(int) * cells);
    if (!x->F || !x->B || !x->prevp || !x->nextp || !x->reach || !x->from) return pd__err(PD_ERR_NOMEM, "plan: out of memory");
    for (int v = 0; v < n; v++) {
        x->F[v + 1] = x->F[v] + p->node[v].fwd_ms;
        x->B[v + 1] = x->B[v] + p->node[v].bwd_in_ms + p->node[v].bwd_w_ms;
    }
    /* prevp[k]: 1 + the last node with parameters before position k; nextp[k]: the first at or after k */
    x->prevp[0] = 0;
    for (int k = 1; k <= n; k++) x->prevp[k] = p->node[k - 1].param_bytes > 0 ? k : x->prevp[k - 1];
    x->nextp[n] = n;
    for (int k = n - 1; k >= 0; k--) x->nextp[k] = p->node[k].param_bytes > 0 ? k : x->nextp[k + 1];
    return PD_OK;
}

/* The furthest backward cut after b whose stage's backward fits in rest,
 * inside the parameter-free window of forward cut f2; -1 if none. */
static int pd__bip_furthest(const pd__bip *x, int b, int f2, double rest) {
    int n = x->n;
    int lo = b + 1 > x->prevp[f2] ? b + 1 : x->prevp[f2];
    int hi = f2 == n ? n : (x->nextp[f2] < n ? x->nextp[f2] : n);
    if (f2 == n) lo = lo > n ? lo : n;
    int best = -1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (x->B[mid] - x->B[b] <= rest) {
            best = mid;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    return best;
}

/* The fewest stages (0: none) that split the model with every stage's
 * forward plus backward time at most T; fills reach and from. */
static int pd__bip_fits(pd__bip *x, double T) {
    int n = x->n;
    for (size_t k = 0; k < (size_t)(x->workers + 1) * ((size_t)n + 1); k++) x->reach[k] = -1;
    PD__BIP_AT(reach, x, 0, 0) = 0;
    for (int i = 0; i < x->workers; i++) {
        for (int f = 0; f < n; f++) {
            int b = PD__BIP_AT(reach, x, i, f);
            if (b < 0) continue;
            for (int f2 = f + 1; f2 <= n; f2++) {
                double rest = T - (x->F[f2] - x->F[f]);
                if (rest < 0) break;
                int bb = pd__bip_furthest(x, b, f2, rest);
                if (bb > PD__BIP_AT(reach, x, i + 1, f2)) {
                    PD__BIP_AT(reach, x, i + 1, f2) = bb;
                    PD__BIP_AT(from, x, i + 1, f2) = f;
                }
            }
            if (PD__BIP_AT(reach, x, i + 1, n) == n) return i + 1;
        }
    }
    return 0;
}

/* The plan of the last feasible search: walk the cuts back from the end. */
static pd_status pd__bip_emit(const pd__bip *x, const pd_profile *p, const pd__ctx *c, int used, pd_plan **out) {
    pd_plan *pl;
    PD_TRY(pd__plan_alloc(p, used, &pl));
    pl->algo = PD_ALGO_BIPARTITION;
    pl->microbatches = c->o->microbatches > 0 ? c->o->microbatches : 1;
    for (int i = used, f = x->n; i > 0; i--) {
        int fprev = PD__BIP_AT(from, x, i, f), b = PD__BIP_AT(reach, x, i, f), bprev = PD__BIP_AT(reach, x, i - 1, fprev);
        for (int v = fprev; v < f; v++) pl->fwd_stage[v] = i - 1;
        for (int v = bprev; v < b; v++) pl->bwd_stage[v] = i - 1;
        pl->stage[i - 1].replicas = 1;
        f = fprev;
    }
    pd_status st = pd__plan_evaluate(pl, p, c);
    if (st == PD_OK && (!(pl->algo_name = pd__strdup(pd__algo_name(PD_ALGO_BIPARTITION))) || !(pl->cost_model = pd__strdup("default"))))
        st = pd__err(PD_ERR_NOMEM, "plan: out of memory");
    if (st != PD_OK) {
        pd__plan_free(pl);
        return st;
    }
    pl->bandwidth = c->lb[0];
    *out = pl;
    return PD_OK;
}

/* Bisect the slowest stage's time T; the last of 60 rounds re-runs the DP
 * at the feasible bound, so reach and from describe the plan emitted. */
static pd_status pd__bipartition(const pd__ctx *c, const pd_profile *p, pd_plan **out) {
    int n = p->n, P = c->workers;
    if (P > n) return pd__err(PD_ERR_INVALID, "plan: %d workers but the model has only %d nodes; set opt->workers to %d or fewer", P, n, n);
    pd__bip x;
    pd_status st = pd__bip_init(&x, p, P);
    double lo = 0, hi = st == PD_OK ? x.F[n] + x.B[n] : 0;
    int used = 0;
    for (int it = 0; st == PD_OK && it < 60; it++) {
        double T = it == 59 ? hi : 0.5 * (lo + hi);
        int ok = pd__bip_fits(&x, T);
        if (ok) {
            hi = T;
            used = ok;
        } else {
            lo = T;
        }
        if (it == 59 && !ok) st = pd__err(PD_ERR_INTERNAL, "plan: bipartition found no split");
    }
    if (st == PD_OK) st = pd__bip_emit(&x, p, c, used, out);
    pd__bip_free(&x);
    return st;
}

#undef PD__BIP_AT

/* ---- accessors ------------------------------------------------------------------------ */

pd_status pd_plan_info_get(const pd_plan *p, pd_plan_info *out) {
    if (!p || !out) return pd__err(PD_ERR_INVALID, "pd_plan_info_get: NULL argument");
    pd_plan_info i;
    memset(&i, 0, sizeof i);
    i.n_stages = p->n_stages;
    for (int s = 0; s < p->n_stages; s++) i.workers += p->stage[s].replicas;
    i.workers *= p->width > 0 ? p->width : 1;
    i.microbatches = p->microbatches;
    i.width = p->width;
    i.time_ms = p->time_ms;
    i.speedup = p->speedup;
    i.dp_speedup = p->dp_speedup;
    i.bubble = p->bubble;
    i.throughput = p->throughput;
    *out = i;
    return PD_OK;
}

pd_status pd_plan_stage(const pd_plan *p, int i, pd_stage_info *out) {
    if (!p || !out || i < 0 || i >= p->n_stages) return pd__err(PD_ERR_INVALID, "pd_plan_stage: stage %d out of range", i);
    pd_stage_info s;
    memset(&s, 0, sizeof s);
    s.first_node = -1;
    for (int v = 0; v < p->n_nodes; v++)
        if (p->fwd_stage[v] == i) {
            if (s.first_node < 0) s.first_node = v;
            s.n_nodes++;
        }
    const pd__stage *st = &p->stage[i];
    s.replicas = st->replicas;
    s.compute_ms = st->fwd_ms + st->bwd_in_ms + st->bwd_w_ms;
    s.comm_ms = 2 * st->send_ms;
    s.memory_bytes = st->memory_bytes;
    *out = s;
    return PD_OK;
}

int pd_plan_node_stage(const pd_plan *p, int i, int *bwd) {
    if (!p || i < 0 || i >= p->n_nodes) return -1;
    if (bwd) *bwd = p->bwd_stage[i];
    return p->fwd_stage[i];
}

pd_status pd_plan_create(const pd_profile *p, const pd_plan_options *user, pd_plan **out) {
    if (!p || !out) return pd__err(PD_ERR_INVALID, "pd_plan_create: NULL profile or out");
    pd_plan_options o = PD_PLAN_OPTIONS_INIT;
    PD_TRY(pd__opts_read(&o, user, sizeof o, "pd_plan_create: opt"));
    if (o.microbatch_size < 0 || o.microbatch_size > (int64_t)1 << 40)
        return pd__err(PD_ERR_INVALID, "plan: opt->microbatch_size must be 0 (the profile's batch) or a row count (got %lld)",
                       (long long)o.microbatch_size);
    if (o.microbatch_size == 0 || o.microbatch_size == p->batch) return pd__plan_create_at(p, &o, out);
    /* another microbatch size: plan on the profile scaled to it (per-call costs stay) */
    pd_profile *at = NULL;
    pd_status st = pd__profile_at(p, o.microbatch_size, &at);
    if (st != PD_OK) {
        pd__err_prefix("plan: opt->microbatch_size");
        return st;
    }
    st = pd__plan_create_at(at, &o, out);
    pd__profile_free_shallow(at);
    if (st == PD_OK) (*out)->profile_batch = p->batch;
    return st;
}
#undef CELL
#undef PD__BIP_AT

/* ==== core/schedule.c ==== */
/* schedule.c - the schedule generator: per worker, the ordered instruction
 * list (F, B, W, SEND/RECV, ALLREDUCE, STEP) of every kind (GPipe, Flush,
 * PipeDream, 2BW, interleaved, zero-bubble H1, AvgPipe); validation of any
 * list, hand-made ones included; text and CSV output. Each kind is the order
 * of compute ops on one worker; the emitters add the receive before and the
 * send after each op that crosses a stage boundary, so communication mirrors
 * compute. docs/SCHEDULES.md gives the orders with examples. */

#include <string.h>

static const char *const pd__kind_names[] = {"gpipe", "flush", "pipedream", "2bw", "interleaved", "zb-h1", "avgpipe"};

pd_status pd__sched_kind_parse(const char *s, pd__sched_kind *out) {
    if (s && strcmp(s, "1f1b") == 0) s = "flush";
    for (int k = 0; s && k < (int)(sizeof pd__kind_names / sizeof *pd__kind_names); k++) {
        if (strcmp(s, pd__kind_names[k]) == 0) {
            *out = (pd__sched_kind)k;
            return PD_OK;
        }
    }
    return pd__err(PD_ERR_INVALID,
                   "unknown schedule '%s' (expected gpipe, flush (1f1b), pipedream, 2bw, interleaved, zb-h1 or avgpipe)",
                   s ? s : "(null)");
}

const char *pd__sched_kind_name(pd__sched_kind k) {
    return (unsigned)k < sizeof pd__kind_names / sizeof *pd__kind_names ? pd__kind_names[k] : "?";
}

bool pd__sched_async(pd__sched_kind k) { return k == PD_SCHED_PIPEDREAM || k == PD_SCHED_2BW; }

const char *pd__op_name(int op) {
    static const char *const names[] = {"F",         "B",         "W",         "SEND_ACT", "RECV_ACT",
                                        "SEND_GRAD", "RECV_GRAD", "ALLREDUCE", "STEP",     "SNAPSHOT"};
    return op >= 0 && op < (int)(sizeof names / sizeof *names) ? names[op] : "?";
}

/* ---- building ----------------------------------------------------------------- */

/* One worker's list under construction. */
typedef struct pd__bld {
    int p, v, s;    /* workers, chunks, this worker */
    bool allreduce; /* replicated: ALLREDUCE before STEP */
    pd__instr *ins;
    int n, cap;
    bool oom;
    int *fver; /* version each (chunk, mb)'s F used: fver[chunk * M + mb] (workers are built in turn) */
    int M;     /* microbatches in all */
    int rep;   /* replicas of this worker */
} pd__bld;

static void pd__emit(pd__bld *b, int op, int chunk, int mb, int version, int peer, int split) {
    if (b->oom) return;
    if (b->n == b->cap) {
        int cap = b->cap ? b->cap * 2 : 64;
        pd__instr *ni = (pd__instr *)PD_REALLOC(b->ins, sizeof(pd__instr) * (size_t)cap);
        if (!ni) {
            b->oom = true;
            return;
        }
        b->ins = ni;
        b->cap = cap;
    }
    pd__instr in = {(uint8_t)op, (uint8_t)split, (int16_t)chunk, mb, version, peer};
    b->ins[b->n++] = in;
}

/* F of mb on chunk with weight version `version`, between its receive and send. */
static void pd__F(pd__bld *b, int chunk, int mb, int version) {
    int k = chunk * b->p + b->s, last = b->p * b->v - 1;
    if (k > 0) pd__emit(b, PD_I_RECV_ACT, chunk, mb, -1, k - 1, 0);
    pd__emit(b, PD_I_F, chunk, mb, version, -1, 0);
    if (k < last) pd__emit(b, PD_I_SEND_ACT, chunk, mb, -1, k + 1, 0);
    b->fver[chunk * b->M + mb] = version;
}

/* B of mb on chunk (split: the weight gradient is a later W), with its F's version. */
static void pd__B(pd__bld *b, int chunk, int mb, bool split) {
    int k = chunk * b->p + b->s, last = b->p * b->v - 1;
    if (k < last) pd__emit(b, PD_I_RECV_GRAD, chunk, mb, -1, k + 1, 0);
    pd__emit(b, PD_I_B, chunk, mb, b->fver[chunk * b->M + mb], -1, split);
    if (k > 0) pd__emit(b, PD_I_SEND_GRAD, chunk, mb, -1, k - 1, 0);
}

static void pd__W(pd__bld *b, int chunk, int mb) { pd__emit(b, PD_I_W, chunk, mb, b->fver[chunk * b->M + mb], -1, 0); }

/* The update closing the microbatches up to `mb`, producing `version`. */
static void pd__STEP(pd__bld *b, int mb, int version) {
    if (b->allreduce) pd__emit(b, PD_I_ALLREDUCE, 0, mb, -1, -1, 0);
    pd__emit(b, PD_I_STEP, 0, mb, version, -1, 0);
}

static int pd__min(int a, int b) { return a < b ? a : b; }

/* GPipe: all forwards, then all backwards in reverse microbatch order (the
 * last forward's backward first, as GPipe's autograd does), then the update. */
static void pd__gpipe(pd__bld *b, int m, int N) {
    for (int t = 0; t < N; t++) {
        for (int i = 0; i < m; i++) pd__F(b, 0, t * m + i, t);
        for (int i = m - 1; i >= 0; i--) pd__B(b, 0, t * m + i, false);
        pd__STEP(b, t * m + m - 1, t + 1);
    }
}

/* 1F1B with a flush: min(p-s-1, m) warm-up forwards, then one forward and one
 * backward in turn, then the remaining backwards and the update. zb (ZB-H1):
 * B is split and W of microbatch k-s follows B of microbatch k, so worker s
 * defers s weight gradients into the cool-down, where 1F1B idles. depth: p
 * for 1F1B; AvgPipe's advance forward propagation is the same order with
 * depth = its in-flight bound L, i.e. min(L-s-1, m) warm-up forwards: L-p
 * forwards of later microbatches run ahead of 1F1B's warm-up on every stage,
 * so a stage has work queued while its activations and gradients travel,
 * and holds at most min(L-s, m) microbatches (AvgPipe, Chen et al., PPoPP
 * 2023, section "advance forward propagation"). */
static void pd__flush(pd__bld *b, int m, int N, bool zb, int depth) {
    int w = pd__min(depth - b->s - 1 > 0 ? depth - b->s - 1 : 0, m);
    for (int t = 0; t < N; t++) {
        int o = t * m, nw = 0;
        for (int i = 0; i < w; i++) pd__F(b, 0, o + i, t);
        for (int k = 0; k < m; k++) {
            if (k + w < m) pd__F(b, 0, o + k + w, t);
            pd__B(b, 0, o + k, zb);
            if (zb && k >= b->s) pd__W(b, 0, o + nw++);
        }
        while (zb && nw < m) pd__W(b, 0, o + nw++);
        pd__STEP(b, o + m - 1, t + 1);
    }
}

/* 1F1B without a flush over all M = m*N microbatches. pipedream: an update
 * after every backward; an F uses the latest version (the updates done so
 * far), its B the same stashed version. A pipedream worker with r replicas
 * (PipeDream's hybrid plans: replica j takes microbatches j, j+r, ... in
 * turn) updates once per round of r microbatches, after the backward of its
 * last (or of the run's last microbatch), with the round's gradients
 * averaged by the ALLREDUCE before it. 2bw: an update after the last
 * backward of every m microbatches; minibatch t's microbatches all use
 * version max(t-1, 0) (W(t+1) = W(t) - lr*grad f(W(t-1))); the warm-up is
 * capped at m so that at most two versions are ever live. */
static void pd__async(pd__bld *b, int m, int N, bool twobw) {
    int M = m * N, w = pd__min(b->p - b->s - 1, M), steps = 0;
    if (twobw) w = pd__min(w, m);
    for (int k = -w; k < M; k++) {
        int j = k + w;
        if (j < M) pd__F(b, 0, j, twobw ? (j / m > 0 ? j / m - 1 : 0) : steps);
        if (k < 0) continue;
        pd__B(b, 0, k, false);
        if (!twobw) {
            if (k % b->rep == b->rep - 1 || k == M - 1) pd__STEP(b, k, ++steps);
        }
        else if (k % m == m - 1)
            pd__STEP(b, k, k / m + 1);
    }
}

/* Megatron's interleaved 1F1B (forward_backward_pipelining_with_interleaving):
 * the i-th forward of a minibatch runs chunk (i mod pv) / p on microbatch
 * (i / pv) * p + i mod p, the i-th backward the same microbatch on the
 * mirrored chunk v-1-chunk; (p-s-1)*2 + (v-1)*p warm-up forwards (at most
 * m*v), then one forward and one backward in turn, then the cool-down. */
static void pd__interleaved(pd__bld *b, int m, int N) {
    int p = b->p, v = b->v, total = m * v;
    int w = pd__min((p - b->s - 1) * 2 + (v - 1) * p, total);
    for (int t = 0; t < N; t++) {
        int o = t * m;
        for (int i = -w; i < total; i++) {
            int j = i + w;
            if (j < total) pd__F(b, (j % (p * v)) / p, o + (j / (p * v)) * p + j % p, t);
            if (i >= 0) pd__B(b, v - 1 - (i % (p * v)) / p, o + (i / (p * v)) * p + i % p, false);
        }
        pd__STEP(b, o + m - 1, t + 1);
    }
}

void pd__schedule_free(pd__schedule *s) {
    if (!s) return;
    for (int i = 0; s->ins && i < s->n_stages; i++) PD_FREE(s->ins[i]);
    PD_FREE(s->ins);
    PD_FREE(s->len);
    PD_FREE(s);
}

int pd__avgpipe_default_inflight(int n_stages) { return n_stages + 1; }

static pd_status pd__build(pd__sched_kind kind, int n_stages, int chunks, int microbatches, int minibatches,
                           const int *replicas, int inflight, pd__schedule **out) {
    const char *name = pd__sched_kind_name(kind);
    if ((unsigned)kind > PD_SCHED_AVGPIPE) return pd__err(PD_ERR_INVALID, "schedule: unknown kind %d", (int)kind);
    if (kind == PD_SCHED_AVGPIPE && (inflight < 1 || inflight > 1 << 20))
        return pd__err(PD_ERR_INVALID, "avgpipe: at most %d microbatches in flight per stage (expected 1 to %d)",
                       inflight, 1 << 20);
    if (n_stages < 1 || n_stages > 4096)
        return pd__err(PD_ERR_INVALID, "%s: %d pipeline stages (expected 1 to 4096)", name, n_stages);
    if (microbatches < 1 || minibatches < 1)
        return pd__err(PD_ERR_INVALID, "%s: needs at least one microbatch and one minibatch (got %d and %d)", name,
                       microbatches, minibatches);
    if (kind == PD_SCHED_INTERLEAVED) {
        if (chunks < 2 || chunks > 1024)
            return pd__err(PD_ERR_INVALID, "interleaved: needs 2 to 1024 chunks per worker, got %d", chunks);
        if (microbatches % n_stages != 0)
            return pd__err(
                PD_ERR_INVALID,
                "interleaved: microbatches per minibatch (%d) must be a multiple of the pipeline stages (%d)",
                microbatches, n_stages);
    } else if (chunks != 1) {
        return pd__err(PD_ERR_INVALID, "%s: %d chunks per worker (only interleaved has more than one)", name, chunks);
    }
    int64_t M = (int64_t)microbatches * minibatches;
    if (M * chunks * n_stages > 100000000 || n_stages * chunks > INT16_MAX)
        return pd__err(PD_ERR_INVALID, "%s: %lld microbatches on %d stages is too large to schedule", name,
                       (long long)M, n_stages * chunks);
    for (int s = 0; replicas && s < n_stages; s++)
        if (replicas[s] < 1) return pd__err(PD_ERR_INVALID, "%s: stage %d has %d replicas", name, s, replicas[s]);

    pd__schedule *sc = (pd__schedule *)PD_MALLOC(sizeof *sc);
    if (!sc) return pd__err(PD_ERR_NOMEM, "schedule: out of memory");
    pd__schedule init = {kind, n_stages, chunks, microbatches, minibatches, NULL, NULL, 0};
    *sc = init;
    if (kind == PD_SCHED_AVGPIPE) sc->inflight = inflight;
    sc->len = (int *)PD_MALLOC(sizeof(int) * (size_t)n_stages);
    sc->ins = (pd__instr **)PD_MALLOC(sizeof(pd__instr *) * (size_t)n_stages);
    int *fver = (int *)PD_MALLOC(sizeof(int) * (size_t)(M * chunks));
    if (!sc->len || !sc->ins || !fver) {
        PD_FREE(fver);
        pd__schedule_free(sc);
        return pd__err(PD_ERR_NOMEM, "schedule: out of memory");
    }
    for (int s = 0; s < n_stages; s++) sc->ins[s] = NULL, sc->len[s] = 0;
    for (int s = 0; s < n_stages; s++) {
        pd__bld b = {n_stages, chunks, s, replicas && replicas[s] > 1, NULL, 0, 0, false, fver, (int)M,
                     replicas ? replicas[s] : 1};
        switch (kind) {
        case PD_SCHED_GPIPE: pd__gpipe(&b, microbatches, minibatches); break;
        case PD_SCHED_FLUSH: pd__flush(&b, microbatches, minibatches, false, n_stages); break;
        case PD_SCHED_ZB_H1: pd__flush(&b, microbatches, minibatches, true, n_stages); break;
        case PD_SCHED_AVGPIPE: pd__flush(&b, microbatches, minibatches, false, inflight); break;
        case PD_SCHED_PIPEDREAM: pd__async(&b, microbatches, minibatches, false); break;
        case PD_SCHED_2BW: pd__async(&b, microbatches, minibatches, true); break;
        case PD_SCHED_INTERLEAVED: pd__interleaved(&b, microbatches, minibatches); break;
        }
        sc->ins[s] = b.ins;
        sc->len[s] = b.n;
        if (b.oom) {
            PD_FREE(fver);
            pd__schedule_free(sc);
            return pd__err(PD_ERR_NOMEM, "schedule: out of memory");
        }
    }
    PD_FREE(fver);
    *out = sc;
    return PD_OK;
}

pd_status pd__schedule_build(pd__sched_kind kind, int n_stages, int chunks, int microbatches, int minibatches,
                             const int *replicas, pd__schedule **out) {
    return pd__build(kind, n_stages, chunks, microbatches, minibatches, replicas,
                     kind == PD_SCHED_AVGPIPE ? pd__avgpipe_default_inflight(n_stages) : 0, out);
}

pd_status pd__schedule_build_avgpipe(int n_stages, int microbatches, int minibatches, const int *replicas,
                                     int inflight, pd__schedule **out) {
    return pd__build(PD_SCHED_AVGPIPE, n_stages, 1, microbatches, minibatches, replicas, inflight, out);
}

/* ---- validation ------------------------------------------------------------------ */

/* What has happened to one (virtual stage, microbatch) on its worker. */
enum { PD__RA = 1, PD__F = 2, PD__SA = 4, PD__RG = 8, PD__B = 16, PD__W = 32, PD__SG = 64, PD__SPLIT = 128 };

static pd_status pd__bad(int s, int i, const pd__instr *in, const char *msg) {
    if (in->op == PD_I_STEP || in->op == PD_I_ALLREDUCE || in->op == PD_I_SNAPSHOT)
        return pd__err(PD_ERR_INVALID, "schedule: stage %d, instruction %d (%s): %s", s, i, pd__op_name(in->op), msg);
    return pd__err(PD_ERR_INVALID, "schedule: stage %d, instruction %d (%s mb %d, chunk %d): %s", s, i,
                   pd__op_name(in->op), (int)in->mb, (int)in->chunk, msg);
}

/* Instruction i of worker w (a microbatch's F, B, W or message, on virtual
 * stage k) against what its microbatch did before there: f its flags so
 * far, fv the version its F used; produced the newest version. */
static pd_status sched_check(const pd__schedule *s, int w, int i, const pd__instr *in, int k, uint8_t *f, int *fv,
                             int produced) {
    int V = s->n_stages * s->chunks;
    pd_status rc = PD_OK;
    bool comm = in->op >= PD_I_SEND_ACT && in->op <= PD_I_RECV_GRAD;
    int want = in->op == PD_I_SEND_ACT || in->op == PD_I_RECV_GRAD ? k + 1 : k - 1;
    if (comm && in->peer != want) {
        char msg[64];
        snprintf(msg, sizeof msg, "wrong peer stage %d (expected %d)", (int)in->peer, want);
        return pd__bad(w, i, in, msg);
    }
    switch (in->op) {
    case PD_I_RECV_ACT:
        if (k == 0)
            rc = pd__bad(w, i, in, "the first stage receives no activations");
        else if (*f & (PD__RA | PD__F))
            rc = pd__bad(w, i, in, "received after or twice");
        *f |= PD__RA;
        break;
    case PD_I_F:
        if (*f & PD__F)
            rc = pd__bad(w, i, in, "a second forward");
        else if (k > 0 && !(*f & PD__RA))
            rc = pd__bad(w, i, in, "no RECV_ACT before it");
        else if (in->version > produced || in->version < 0)
            rc = pd__bad(w, i, in, "uses a weight version not produced yet");
        *f |= PD__F;
        *fv = in->version;
        break;
    case PD_I_SEND_ACT:
        if (k == V - 1)
            rc = pd__bad(w, i, in, "the last stage sends no activations");
        else if (!(*f & PD__F) || (*f & PD__SA))
            rc = pd__bad(w, i, in, "not after its F, or twice");
        *f |= PD__SA;
        break;
    case PD_I_RECV_GRAD:
        if (k == V - 1)
            rc = pd__bad(w, i, in, "the last stage receives no gradients");
        else if (!(*f & PD__F) || (*f & (PD__RG | PD__B)))
            rc = pd__bad(w, i, in, "not between its F and its B, or twice");
        *f |= PD__RG;
        break;
    case PD_I_B:
        if (!(*f & PD__F))
            rc = pd__bad(w, i, in, "before its F");
        else if (*f & PD__B)
            rc = pd__bad(w, i, in, "a second backward");
        else if (k < V - 1 && !(*f & PD__RG))
            rc = pd__bad(w, i, in, "no RECV_GRAD before it");
        else if (in->version != *fv)
            rc = pd__bad(w, i, in, "uses another weight version than its F");
        *f |= PD__B | (in->split ? PD__SPLIT : 0);
        break;
    case PD_I_W:
        if (!(*f & PD__B) || !(*f & PD__SPLIT) || (*f & PD__W))
            rc = pd__bad(w, i, in, "not after a split B of its microbatch, or twice");
        else if (in->version != *fv)
            rc = pd__bad(w, i, in, "uses another weight version than its F");
        *f |= PD__W;
        break;
    case PD_I_SEND_GRAD:
        if (k == 0)
            rc = pd__bad(w, i, in, "the first stage sends no gradients");
        else if (!(*f & PD__B) || (*f & PD__SG))
            rc = pd__bad(w, i, in, "not after its B, or twice");
        *f |= PD__SG;
        break;
    }
    return rc;
}

/* Every microbatch ran completely on every virtual stage. */
static pd_status sched_check_complete(const pd__schedule *s, const uint8_t *st, int64_t M) {
    int p = s->n_stages, V = p * s->chunks;
    for (int k = 0; k < V; k++) {
        for (int64_t mb = 0; mb < M; mb++) {
            uint8_t f = st[(int64_t)k * M + mb];
            const char *miss = !(f & PD__F)                      ? "F"
                               : !(f & PD__B)                    ? "B"
                               : (f & PD__SPLIT) && !(f & PD__W) ? "W"
                               : k < V - 1 && !(f & PD__SA)      ? "SEND_ACT"
                               : k > 0 && !(f & PD__SG)          ? "SEND_GRAD"
                                                                 : NULL;
            if (miss)
                return pd__err(PD_ERR_INVALID, "schedule: stage %d (chunk %d) never runs %s of mb %lld", k % p, k / p,
                               miss, (long long)mb);
        }
    }
    return PD_OK;
}

pd_status pd__schedule_validate(const pd__schedule *s) {
    if (!s || s->n_stages < 1 || s->chunks < 1 || s->microbatches < 1 || s->minibatches < 1 || !s->len || !s->ins)
        return pd__err(PD_ERR_INVALID, "schedule: empty or malformed");
    int p = s->n_stages, v = s->chunks, V = p * v;
    int64_t M = (int64_t)s->microbatches * s->minibatches;
    if (M * V > 100000000) return pd__err(PD_ERR_INVALID, "schedule: too large to validate");
    uint8_t *st = (uint8_t *)PD_MALLOC((size_t)(M * V));
    int *ver = (int *)PD_MALLOC(sizeof(int) * (size_t)(M * V));
    if (!st || !ver) {
        PD_FREE(st);
        PD_FREE(ver);
        return pd__err(PD_ERR_NOMEM, "schedule: out of memory");
    }
    memset(st, 0, (size_t)(M * V));
    pd_status rc = PD_OK;
    for (int w = 0; w < p && rc == PD_OK; w++) {
        int produced = 0; /* newest weight version on this worker */
        for (int i = 0; i < s->len[w] && rc == PD_OK; i++) {
            const pd__instr *in = &s->ins[w][i];
            if (in->op > PD_I_SNAPSHOT) {
                rc = pd__bad(w, i, in, "unknown op");
            } else if (in->op == PD_I_STEP) {
                if (in->version <= produced) rc = pd__bad(w, i, in, "produces an old weight version");
                produced = in->version;
            } else if (in->op == PD_I_ALLREDUCE || in->op == PD_I_SNAPSHOT) {
                continue;
            } else if (in->chunk < 0 || in->chunk >= v || in->mb < 0 || in->mb >= M) {
                rc = pd__bad(w, i, in, "chunk or microbatch out of range");
            } else {
                int64_t at = (int64_t)(in->chunk * p + w) * M + in->mb;
                rc = sched_check(s, w, i, in, in->chunk * p + w, &st[at], &ver[at], produced);
            }
        }
    }
    if (rc == PD_OK) rc = sched_check_complete(s, st, M);
    PD_FREE(st);
    PD_FREE(ver);
    if (rc != PD_OK) return rc;
    return pd__schedule_replay(s, NULL, NULL, NULL);
}

/* ---- output ------------------------------------------------------------------------ */

pd_status pd__schedule_write(const pd__schedule *s, FILE *f, bool csv) {
    if (!s || !f) return pd__err(PD_ERR_INVALID, "pd__schedule_write: NULL argument");
    if (csv)
        fprintf(f, "stage,index,op,chunk,mb,version,peer\n");
    else if (s->chunks > 1)
        fprintf(f, "# %s: %d stages x %d chunks, %d microbatches x %d minibatches\n", pd__sched_kind_name(s->kind),
                s->n_stages, s->chunks, s->microbatches, s->minibatches);
    else if (s->kind == PD_SCHED_AVGPIPE)
        fprintf(f, "# %s: %d stages, %d microbatches x %d minibatches, at most %d in flight per stage\n",
                pd__sched_kind_name(s->kind), s->n_stages, s->microbatches, s->minibatches, s->inflight);
    else
        fprintf(f, "# %s: %d stages, %d microbatches x %d minibatches\n", pd__sched_kind_name(s->kind), s->n_stages,
                s->microbatches, s->minibatches);
    for (int w = 0; w < s->n_stages; w++) {
        if (!csv) fprintf(f, "stage %d:", w);
        for (int i = 0; i < s->len[w]; i++) {
            const pd__instr *in = &s->ins[w][i];
            if (csv) {
                fprintf(f, "%d,%d,%s,%d,%d,%d,%d\n", w, i, pd__op_name(in->op), (int)in->chunk, (int)in->mb,
                        (int)in->version, (int)in->peer);
            } else if (in->op == PD_I_F || in->op == PD_I_B || in->op == PD_I_W) {
                fprintf(f, " %s%d", pd__op_name(in->op), (int)in->mb);
                if (s->chunks > 1) fprintf(f, ".%d", (int)in->chunk);
            } else if (in->op == PD_I_STEP) {
                fprintf(f, " STEP");
            } else if (in->op == PD_I_ALLREDUCE) {
                fprintf(f, " AR");
            }
        }
        if (!csv) fprintf(f, "\n");
    }
    if (ferror(f)) return pd__err(PD_ERR_IO, "schedule: write failed");
    return PD_OK;
}

/* PipeDream's vertical sync: every stage runs microbatch k (forward and
 * backward) on weight version v, the version stage 0's forward of k used
 * (version = how many updates the stage has made), instead of its own latest;
 * a stage keeps the older versions it will still need. */
pd_status pd__schedule_vertical_sync(pd__schedule *s) {
    if (s->kind != PD_SCHED_PIPEDREAM)
        return pd__err(PD_ERR_INVALID, "vertical sync applies to the pipedream schedule, not %s", pd__sched_kind_name(s->kind));
    int nmb = 0;
    for (int k = 0; k < s->len[0]; k++)
        if (s->ins[0][k].mb >= nmb) nmb = s->ins[0][k].mb + 1;
    int32_t *v0 = (int32_t *)PD_MALLOC(sizeof(int32_t) * ((size_t)nmb + 1));
    if (!v0) return pd__err(PD_ERR_NOMEM, "out of memory");
    for (int k = 0; k < s->len[0]; k++)
        if (s->ins[0][k].op == PD_I_F) v0[s->ins[0][k].mb] = s->ins[0][k].version;
    for (int q = 0; q < s->n_stages; q++)
        for (int k = 0; k < s->len[q]; k++) {
            pd__instr *in = &s->ins[q][k];
            if ((in->op == PD_I_F || in->op == PD_I_B || in->op == PD_I_W) && in->mb >= 0 && in->mb < nmb)
                in->version = v0[in->mb];
        }
    PD_FREE(v0);
    return PD_OK;
}

/* ==== core/simulate.c ==== */
/* simulate.c - the event simulator: replays a schedule's instruction lists
 * (the runtime's) with per-stage costs instead of kernels, then reports time
 * per minibatch, throughput, the bubble, busy times, peak activations and
 * weight versions, with a Chrome trace and an SVG timeline. A worker runs its
 * list in order; a RECV waits for its SEND's data; a SEND costs its worker
 * nothing, and one link's transfers in one direction go one after another
 * (send_ms each). A replicated stage is one worker with r times the
 * throughput. */

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the replay ------------------------------------------------------------------ */

/* Link k (virtual stages k and k+1): channel 2k carries activations up, 2k+1 gradients down. */
static int pd__channel(const pd__instr *in, int k) {
    switch (in->op) {
    case PD_I_SEND_ACT: return 2 * k;
    case PD_I_RECV_ACT: return 2 * (k - 1);
    case PD_I_SEND_GRAD: return 2 * (k - 1) + 1;
    case PD_I_RECV_GRAD: return 2 * k + 1;
    default: return -1;
    }
}

typedef struct pd__sent {
    double arrive;
    int mb, stage, index;
} pd__sent;

static double pd__cost(const double *a, int k) { return a ? a[k] : 0; }

/* The replay's state: per channel its queue of sends (q, cap, nsent,
 * nrecv) and when its link is next free (chfree); per worker its next
 * instruction (pos) and clock (t); per stage, under recomputation, the
 * microbatch whose activations it holds (owner). */
typedef struct pd__replay {
    int p, V, nch;
    int *cap, *nsent, *nrecv, *pos, *owner;
    double *chfree, *t;
    pd__sent **q;
} pd__replay;

static void pd__replay_free(pd__replay *r) {
    for (int ch = 0; r->q && ch < r->nch; ch++) PD_FREE(r->q[ch]);
    PD_FREE(r->q);
    PD_FREE(r->cap);
    PD_FREE(r->nsent);
    PD_FREE(r->nrecv);
    PD_FREE(r->pos);
    PD_FREE(r->chfree);
    PD_FREE(r->t);
    PD_FREE(r->owner);
}

/* Allocates the state and sizes the channel queues by counting the sends,
 * checking each instruction's op, chunk and link on the way. */
static pd_status pd__replay_init(pd__replay *r, const pd__schedule *s) {
    int p = s->n_stages, V = p * s->chunks, nch = 2 * (V > 1 ? V - 1 : 0);
    memset(r, 0, sizeof *r);
    r->p = p, r->V = V, r->nch = nch;
    r->cap = (int *)PD_CALLOC((size_t)nch + 1, sizeof(int));
    r->nsent = (int *)PD_CALLOC((size_t)nch + 1, sizeof(int));
    r->nrecv = (int *)PD_CALLOC((size_t)nch + 1, sizeof(int));
    r->pos = (int *)PD_CALLOC((size_t)p, sizeof(int));
    r->chfree = (double *)PD_CALLOC((size_t)nch + 1, sizeof(double));
    r->t = (double *)PD_CALLOC((size_t)p, sizeof(double));
    r->owner = (int *)PD_MALLOC(sizeof(int) * ((size_t)V + 1));
    r->q = (pd__sent **)PD_CALLOC((size_t)nch + 1, sizeof(pd__sent *));
    if (!r->cap || !r->nsent || !r->nrecv || !r->pos || !r->chfree || !r->t || !r->q || !r->owner)
        return pd__err(PD_ERR_NOMEM, "simulate: out of memory");
    for (int k = 0; k < V; k++) r->owner[k] = -1;
    for (int w = 0; w < p; w++) {
        for (int i = 0; i < s->len[w]; i++) {
            const pd__instr *in = &s->ins[w][i];
            int k = in->chunk * p + w, ch = pd__channel(in, k);
            bool comm = in->op >= PD_I_SEND_ACT && in->op <= PD_I_RECV_GRAD;
            if (in->op > PD_I_SNAPSHOT || in->chunk < 0 || in->chunk >= s->chunks || (comm && (ch < 0 || ch >= nch)))
                return pd__err(PD_ERR_INVALID,
                               "schedule: stage %d, instruction %d (%s mb %d): op, chunk or link out of range", w, i,
                               pd__op_name(in->op), (int)in->mb);
            if (in->op == PD_I_SEND_ACT || in->op == PD_I_SEND_GRAD) r->cap[ch]++;
        }
    }
    for (int ch = 0; ch < nch; ch++)
        if (r->cap[ch] && !(r->q[ch] = (pd__sent *)PD_MALLOC(sizeof(pd__sent) * (size_t)r->cap[ch])))
            return pd__err(PD_ERR_NOMEM, "simulate: out of memory");
    return PD_OK;
}

/* Runs worker w's next instruction: *ran false when it is a receive whose
 * send has not happened yet. */
static pd_status pd__replay_op(pd__replay *r, const pd__schedule *s, const pd__sim_costs *c, int w, double **start,
                               double **end, bool *ran) {
    int i = r->pos[w];
    const pd__instr *in = &s->ins[w][i];
    int k = in->chunk * r->p + w, ch = pd__channel(in, k);
    double t0 = r->t[w], dur = 0;
    *ran = false;
    switch (in->op) {
    case PD_I_F: dur = c ? c->f_ms[k] : 0, r->owner[k] = in->mb; break;
    case PD_I_B: dur = c ? c->b_ms[k] + (in->split ? 0 : pd__cost(c->w_ms, k)) : 0; break;
    case PD_I_W: dur = c ? pd__cost(c->w_ms, k) : 0; break;
    case PD_I_ALLREDUCE: dur = c ? pd__cost(c->allreduce_ms, w) : 0; break;
    case PD_I_SEND_ACT:
    case PD_I_SEND_GRAD: {
        double x = c ? pd__cost(c->send_ms, ch / 2) : 0;
        double a = (t0 > r->chfree[ch] ? t0 : r->chfree[ch]) + x;
        r->chfree[ch] = a;
        pd__sent sent = {a, in->mb, w, i};
        r->q[ch][r->nsent[ch]++] = sent;
        break;
    }
    case PD_I_RECV_ACT:
    case PD_I_RECV_GRAD: {
        if (r->nrecv[ch] == r->nsent[ch]) return PD_OK;
        const pd__sent *e = &r->q[ch][r->nrecv[ch]++];
        if (e->mb != in->mb)
            return pd__err(PD_ERR_INVALID,
                           "schedule: stage %d, instruction %d (%s mb %d from stage %d): the matching send "
                           "(stage %d, instruction %d) carries mb %d",
                           w, i, pd__op_name(in->op), (int)in->mb, (int)in->peer, e->stage, e->index, e->mb);
        if (e->arrive > t0) t0 = e->arrive;
        break;
    }
    default: break;
    }
    if ((in->op == PD_I_B || in->op == PD_I_W) && c && c->in_bytes && r->owner[k] != in->mb)
        dur += c->f_ms[k], r->owner[k] = in->mb; /* the forward again first */
    if (start) start[w][i] = t0;
    if (end) end[w][i] = t0 + dur;
    r->t[w] = t0 + dur;
    *ran = true;
    return PD_OK;
}

/* After the replay: a worker left waiting is a deadlock, a send left in a
 * queue was never received. */
static pd_status pd__replay_leftovers(const pd__replay *r, const pd__schedule *s) {
    for (int w = 0; w < r->p; w++) {
        if (r->pos[w] < s->len[w]) {
            const pd__instr *in = &s->ins[w][r->pos[w]];
            return pd__err(PD_ERR_INVALID,
                           "schedule: stage %d, instruction %d (%s mb %d from stage %d) waits forever: no matching send "
                           "(deadlock)",
                           w, r->pos[w], pd__op_name(in->op), (int)in->mb, (int)in->peer);
        }
    }
    for (int ch = 0; ch < r->nch; ch++) {
        if (r->nrecv[ch] < r->nsent[ch]) {
            const pd__sent *e = &r->q[ch][r->nrecv[ch]];
            return pd__err(PD_ERR_INVALID, "schedule: stage %d, instruction %d (%s mb %d to stage %d): never received",
                           e->stage, e->index, pd__op_name(s->ins[e->stage][e->index].op), e->mb,
                           (int)s->ins[e->stage][e->index].peer);
        }
    }
    return PD_OK;
}

pd_status pd__schedule_replay(const pd__schedule *s, const pd__sim_costs *c, double **start, double **end) {
    pd__replay r;
    pd_status rc = pd__replay_init(&r, s);
    for (bool progress = rc == PD_OK; progress;) {
        progress = false;
        for (int w = 0; rc == PD_OK && w < r.p; w++) {
            bool ran = true;
            for (; rc == PD_OK && ran && r.pos[w] < s->len[w];) {
                rc = pd__replay_op(&r, s, c, w, start, end, &ran);
                if (ran) r.pos[w]++, progress = true;
            }
        }
        if (rc != PD_OK) progress = false;
    }
    if (rc == PD_OK) rc = pd__replay_leftovers(&r, s);
    pd__replay_free(&r);
    return rc;
}

/* ---- measuring ------------------------------------------------------------------- */

/* Asynchronous schedules: minibatches left out at each end of the steady-state
 * window (the pipeline fills within about V microbatches). */
static int pd__warm(int V, int m) { return (V + m - 1) / m + 1; }

static bool pd__compute(int op) { return op == PD_I_F || op == PD_I_B || op == PD_I_W; }

/* "F3", or "F3.1" (mb 3, chunk 1) when workers hold several chunks. */
static void pd__label(char *buf, size_t n, const pd__schedule *s, const pd__instr *in) {
    if (s->chunks > 1)
        snprintf(buf, n, "%s%d.%d", pd__op_name(in->op), (int)in->mb, (int)in->chunk);
    else
        snprintf(buf, n, "%s%d", pd__op_name(in->op), (int)in->mb);
}

/* Walks worker w's list in order: in-flight microbatches (F done, last
 * backward op not) and live weight versions (those in-flight microbatches
 * use, plus the newest). Fills the peaks; with a trace, emits counters. */
static pd_status pd__memory(const pd__schedule *s, const pd__sim_costs *c, int w, double *const *en, int max_version,
                            pd_sim_stage *out, pd__trace *trace) {
    int *ref = (int *)PD_CALLOC((size_t)max_version + 1, sizeof(int));
    if (!ref) return pd__err(PD_ERR_NOMEM, "simulate: out of memory");
    int p = s->n_stages, count = 0, live = 0, current = 0;
    double bytes = 0, params = 0;
    int *held = (int *)PD_CALLOC((size_t)s->chunks + 1, sizeof(int)); /* per chunk: microbatches in flight */
    if (!held) {
        PD_FREE(ref);
        return pd__err(PD_ERR_NOMEM, "simulate: out of memory");
    }
    for (int ch = 0; ch < s->chunks; ch++) params += pd__cost(c->param_bytes, ch * p + w);
    out->peak_act_mbs = 0, out->peak_act_bytes = 0, out->peak_versions = 1;
    for (int i = 0; i < s->len[w]; i++) {
        const pd__instr *in = &s->ins[w][i];
        int k = in->chunk * p + w, v = in->version;
        /* per microbatch its activations, or under recomputation what it received */
        double per_mb = c->in_bytes ? c->in_bytes[k] : pd__cost(c->act_bytes, k);
        if (in->op == PD_I_F) {
            count++, bytes += per_mb, held[in->chunk]++;
            if (v >= 0 && v <= max_version && ref[v]++ == 0) live++;
        } else if (in->op == PD_I_W || (in->op == PD_I_B && !in->split)) {
            count--, bytes -= per_mb, held[in->chunk]--;
            if (v >= 0 && v <= max_version && --ref[v] == 0) live--;
        } else if (in->op == PD_I_STEP) {
            current = v;
        } else {
            continue;
        }
        int versions = live + (current >= 0 && current <= max_version && ref[current] == 0);
        double all = bytes; /* recomputation: plus one microbatch's rest per chunk with one in flight */
        for (int ch = 0; c->in_bytes && ch < s->chunks; ch++)
            if (held[ch] > 0) all += pd__cost(c->act_bytes, ch * p + w);
        if (count > out->peak_act_mbs) out->peak_act_mbs = count;
        if (all > out->peak_act_bytes) out->peak_act_bytes = all;
        if (versions > out->peak_versions) out->peak_versions = versions;
        if (trace) {
            char name[32], args[96];
            snprintf(name, sizeof name, "memory stage %d", w);
            snprintf(args, sizeof args, "\"activations\":%.0f,\"weights\":%.0f", all > 0 ? all : 0,
                     versions * params);
            pd__trace_counter(trace, name, en[w][i] * 1000, 0, args);
        }
    }
    PD_FREE(ref);
    PD_FREE(held);
    return PD_OK;
}

static void pd__trace_events(const pd__schedule *s, double *const *st, double *const *en, pd__trace *t) {
    char name[64], args[96];
    snprintf(name, sizeof name, "pdonnx simulate: %s", pd__sched_kind_name(s->kind));
    pd__trace_name(t, 0, -1, name);
    for (int w = 0; w < s->n_stages; w++) {
        snprintf(name, sizeof name, "stage %d", w);
        pd__trace_name(t, 0, w, name);
    }
    for (int w = 0; w < s->n_stages; w++) {
        for (int i = 0; i < s->len[w]; i++) {
            const pd__instr *in = &s->ins[w][i];
            double ts = st[w][i] * 1000, dur = (en[w][i] - st[w][i]) * 1000;
            if (pd__compute(in->op)) {
                const char *cat = in->op == PD_I_F ? "forward" : in->op == PD_I_B ? "backward" : "weight-gradient";
                pd__label(name, sizeof name, s, in);
                snprintf(args, sizeof args, "\"mb\":%d,\"chunk\":%d,\"version\":%d", (int)in->mb, (int)in->chunk,
                         (int)in->version);
                pd__trace_event(t, name, cat, ts, dur, 0, w, args);
            } else if (in->op == PD_I_ALLREDUCE && en[w][i] > st[w][i]) {
                pd__trace_event(t, "allreduce", "allreduce", ts, dur, 0, w, NULL);
            } else if (in->op == PD_I_STEP) {
                snprintf(args, sizeof args, "\"version\":%d", (int)in->version);
                pd__trace_event(t, "step", "step", ts, -1, 0, w, args);
            }
        }
    }
}

/* 1, 2 or 5 times a power of ten, about x/8. */
static double pd__tick(double x) {
    double e = pow(10, floor(log10(x / 8))), r = x / 8 / e;
    return e * (r < 1.5 ? 1 : r < 3.5 ? 2 : r < 7.5 ? 5 : 10);
}

static void pd__svg(const pd__schedule *s, double *const *st, double *const *en, const pd_sim_result *r, FILE *f) {
    const double left = 70, width = 1000, top = 34, row = 26, gap = 6;
    int p = s->n_stages;
    double span = r->makespan_ms > 0 ? r->makespan_ms : 1, sx = width / span, axis = top + p * (row + gap) + 4;
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" "
            "font-size=\"11\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n",
            left + width + 30, axis + 56);
    char chunks[32] = "";
    if (s->chunks > 1) snprintf(chunks, sizeof chunks, " x %d chunks", s->chunks);
    fprintf(f,
            "<text x=\"%.0f\" y=\"20\" font-size=\"13\">%s: %d stages%s, %d microbatches x %d minibatches; "
            "%.4g ms per minibatch, bubble %.1f%%</text>\n",
            left, pd__sched_kind_name(s->kind), p, chunks, s->microbatches, s->minibatches, r->time_ms,
            100 * r->bubble);
    for (int w = 0; w < p; w++) {
        double y = top + w * (row + gap);
        fprintf(f, "<text x=\"8\" y=\"%.1f\">stage %d</text>\n", y + row / 2 + 4, w);
        for (int i = 0; i < s->len[w]; i++) {
            const pd__instr *in = &s->ins[w][i];
            if (!pd__compute(in->op) && in->op != PD_I_ALLREDUCE) continue;
            double x = left + st[w][i] * sx, dx = (en[w][i] - st[w][i]) * sx;
            if (dx <= 0) continue;
            const char *fill = in->op == PD_I_F           ? "#4e79a7"
                               : in->op == PD_I_W         ? "#f28e2b"
                               : in->op == PD_I_ALLREDUCE ? "#9c9c9c"
                               : in->split                ? "#76b7b2"
                                                          : "#59a14f";
            double shade = s->chunks > 1 ? 1 - 0.45 * in->chunk / (s->chunks - 1) : 1;
            fprintf(f,
                    "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.0f\" fill=\"%s\" fill-opacity=\"%.2f\" "
                    "stroke=\"#fff\" stroke-width=\"0.5\"/>\n",
                    x, y, dx, row, fill, shade);
            if (dx >= 12 && in->op != PD_I_ALLREDUCE)
                fprintf(f, "<text x=\"%.2f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"10\">%d</text>\n",
                        x + dx / 2, y + row / 2 + 4, (int)in->mb);
        }
    }
    fprintf(f, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#000\"/>\n", left, axis, left + width,
            axis);
    double tick = pd__tick(span);
    for (int i = 0; i * tick <= span * (1 + 1e-9); i++) {
        double x = left + i * tick * sx;
        fprintf(f, "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"#000\"/>\n", x, axis, x, axis + 5);
        fprintf(f, "<text x=\"%.2f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n", x, axis + 17, i * tick);
    }
    fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">ms</text>\n", left + width + 25, axis + 17);
    const char *key[][2] = {{"#4e79a7", "F forward"},
                            {"#59a14f", "B backward"},
                            {"#76b7b2", "B input gradient"},
                            {"#f28e2b", "W weight gradient"},
                            {"#9c9c9c", "all-reduce"}};
    for (int i = 0; i < 5; i++)
        fprintf(f,
                "<rect x=\"%.0f\" y=\"%.1f\" width=\"10\" height=\"10\" fill=\"%s\"/><text x=\"%.0f\" "
                "y=\"%.1f\">%s</text>\n",
                left + 150 * i, axis + 30, key[i][0], left + 150 * i + 14, axis + 39, key[i][1]);
    fprintf(f, "</svg>\n");
}

static double pd__overlap(double a, double b, double lo, double hi) {
    double x = (b < hi ? b : hi) - (a > lo ? a : lo);
    return x > 0 ? x : 0;
}

pd_status pd__simulate_costs(const pd__schedule *s, const pd__sim_costs *c, pd_sim_result *out, FILE *trace,
                             FILE *svg) {
    if (!s || !c || !c->f_ms || !c->b_ms || !out)
        return pd__err(PD_ERR_INVALID, "simulate: NULL schedule, costs or result");
    PD_TRY(pd__schedule_validate(s));
    int p = s->n_stages, V = p * s->chunks, m = s->microbatches, N = s->minibatches;
    const double *arr[] = {c->f_ms, c->b_ms, c->w_ms, c->send_ms, c->act_bytes, c->param_bytes};
    const char *names[] = {"forward", "backward", "weight-gradient", "send", "activation bytes", "parameter bytes"};
    for (int a = 0; a < 6; a++)
        for (int k = 0; arr[a] && k < V; k++)
            if (!isfinite(arr[a][k]) || arr[a][k] < 0)
                return pd__err(PD_ERR_INVALID, "simulate: virtual stage %d: %s cost %g is not a finite value >= 0", k,
                               names[a], arr[a][k]);
    for (int w = 0; c->allreduce_ms && w < p; w++)
        if (!isfinite(c->allreduce_ms[w]) || c->allreduce_ms[w] < 0)
            return pd__err(PD_ERR_INVALID, "simulate: stage %d: all-reduce cost %g is not a finite value >= 0", w,
                           c->allreduce_ms[w]);

    pd_status rc = PD_OK;
    pd__trace tr = {trace, false}, *tp = trace ? &tr : NULL;
    double **st = (double **)PD_CALLOC((size_t)p, sizeof(double *)), **en = (double **)PD_CALLOC((size_t)p, sizeof(double *));
    double *done = (double *)PD_CALLOC((size_t)N, sizeof(double));
    pd_sim_stage *stage = (pd_sim_stage *)PD_CALLOC((size_t)p, sizeof(pd_sim_stage));
    bool ok = st && en && done && stage;
    double makespan, lo, hi, time_ms, busy;
    int max_version;
    pd_sim_result r;
    for (int w = 0; ok && w < p; w++) {
        st[w] = (double *)PD_MALLOC(sizeof(double) * (size_t)(s->len[w] + 1));
        en[w] = (double *)PD_MALLOC(sizeof(double) * (size_t)(s->len[w] + 1));
        ok = st[w] && en[w];
    }
    if (!ok) {
        rc = pd__err(PD_ERR_NOMEM, "simulate: out of memory");
        goto out;
    }
    if ((rc = pd__schedule_replay(s, c, st, en)) != PD_OK) goto out;

    /* makespan, minibatch completions, the newest weight version */
    makespan = 0;
    max_version = 0;
    for (int w = 0; w < p; w++) {
        for (int i = 0; i < s->len[w]; i++) {
            const pd__instr *in = &s->ins[w][i];
            if (en[w][i] > makespan) makespan = en[w][i];
            if (in->version > max_version) max_version = in->version;
            int t = in->mb >= 0 ? in->mb / m : -1;
            if (t >= 0 && t < N && in->op != PD_I_SEND_ACT && in->op != PD_I_SEND_GRAD && en[w][i] > done[t])
                done[t] = en[w][i];
        }
    }
    /* the measured window: the whole run, or for asynchronous schedules from the
     * completion of minibatch a to that of b, leaving out fill and drain */
    lo = 0, hi = makespan, time_ms = makespan / N;
    if (pd__sched_async(s->kind) && N >= 2) {
        int a = pd__warm(V, m), b;
        if (a > (N - 2) / 2) a = (N - 2) / 2;
        b = N - 1 - a;
        lo = done[a], hi = done[b], time_ms = (hi - lo) / (b - a);
    }
    busy = 0;
    for (int w = 0; w < p; w++) {
        for (int i = 0; i < s->len[w]; i++) {
            if (!pd__compute(s->ins[w][i].op)) continue;
            stage[w].busy_ms += en[w][i] - st[w][i];
            busy += pd__overlap(st[w][i], en[w][i], lo, hi);
        }
    }
    if (trace) fputs("[\n", trace);
    if (trace) pd__trace_events(s, st, en, tp);
    for (int w = 0; w < p && rc == PD_OK; w++) rc = pd__memory(s, c, w, en, max_version, &stage[w], tp);
    if (rc != PD_OK) goto out;
    if (trace) fputs("\n]\n", trace);

    memset(&r, 0, sizeof r);
    r.time_ms = time_ms;
    r.makespan_ms = makespan;
    r.throughput = time_ms > 0 ? m / (time_ms / 1000) : 0;
    r.bubble = hi > lo ? 1 - busy / (p * (hi - lo)) : 0;
    if (r.bubble < 0) r.bubble = 0;
    r.n_stages = p;
    r.stage = stage;
    if (svg) pd__svg(s, st, en, &r, svg);
    if ((trace && ferror(trace)) || (svg && ferror(svg))) {
        rc = pd__err(PD_ERR_IO, "simulate: writing the trace or timeline failed");
        goto out;
    }
    *out = r;
    stage = NULL;
out:
    for (int w = 0; w < p && st; w++) PD_FREE(st[w]);
    for (int w = 0; w < p && en; w++) PD_FREE(en[w]);
    PD_FREE(st);
    PD_FREE(en);
    PD_FREE(done);
    PD_FREE(stage);
    return rc;
}

pd_status pd__simulate_schedule(const pd__schedule *s, const double *f_ms, const double *b_ms, const double *w_ms,
                                const double *send_ms, const double *act_bytes, const double *param_bytes,
                                pd_sim_result *out, FILE *trace) {
    pd__sim_costs c = {f_ms, b_ms, w_ms, send_ms, NULL, act_bytes, param_bytes, NULL};
    return pd__simulate_costs(s, &c, out, trace, NULL);
}

void pd_sim_result_free(pd_sim_result *r) {
    if (!r) return;
    PD_FREE(r->stage);
    r->stage = NULL;
    r->n_stages = 0;
}

/* ---- plans ------------------------------------------------------------------------ */

void pd__sim_plan_free(pd__sim_plan *sp) {
    if (!sp) return;
    pd__schedule_free(sp->sched);
    PD_FREE(sp->f_ms);
    PD_FREE(sp->b_ms);
    PD_FREE(sp->w_ms);
    PD_FREE(sp->send_ms);
    PD_FREE(sp->act_bytes);
    PD_FREE(sp->in_bytes);
    PD_FREE(sp->param_bytes);
    PD_FREE(sp->allreduce_ms);
    PD_FREE(sp->replicas);
    memset(sp, 0, sizeof *sp);
}

pd_status pd__sim_plan_make(const pd_plan *pl, const pd_sim_options *opt, pd__sim_plan *out) {
    pd_sim_options o = PD_SIM_OPTIONS_INIT;
    PD_TRY(pd__opts_read(&o, opt, sizeof o, "pd_simulate: opt"));
    if (!pl || !out) return pd__err(PD_ERR_INVALID, "pd_simulate: NULL plan or result");
    pd__sched_kind kind = PD_SCHED_FLUSH; /* set by the parse; initialized for -Wmaybe-uninitialized in the amalgamation */
    PD_TRY(pd__sched_kind_parse(o.schedule ? o.schedule : "flush", &kind));
    int pc = pl->chunks > 0 ? pl->chunks : 1;
    if (pl->n_stages < 1 || !pl->stage || pl->n_stages % pc != 0)
        return pd__err(PD_ERR_INVALID, "pd_simulate: the plan has %d stages in %d chunks per worker", pl->n_stages, pc);
    int p = pl->n_stages / pc, v = pc;
    bool split = false;
    if (kind == PD_SCHED_INTERLEAVED && pc == 1) {
        v = o.chunks, split = true;
        if (v < 2) return pd__err(PD_ERR_INVALID, "pd_simulate: interleaved needs at least 2 chunks, got %d", v);
    } else if (kind != PD_SCHED_INTERLEAVED && pc > 1) {
        return pd__err(PD_ERR_INVALID,
                       "pd_simulate: the plan has %d chunks per worker: only the interleaved schedule runs it", pc);
    }
    if (o.microbatches < 0 || o.minibatches < 0)
        return pd__err(PD_ERR_INVALID, "pd_simulate: negative microbatch or minibatch count");
    int m = o.microbatches > 0 ? o.microbatches : pl->microbatches > 0 ? pl->microbatches : 1;
    int N = o.minibatches > 0 ? o.minibatches : pd__sched_async(kind) ? 2 * pd__warm(p * v, m) + 8 : 1;
    int V = p * v;
    pd__sim_plan sp;
    memset(&sp, 0, sizeof sp);
    sp.f_ms = (double *)PD_CALLOC((size_t)V, sizeof(double));
    sp.b_ms = (double *)PD_CALLOC((size_t)V, sizeof(double));
    sp.w_ms = (double *)PD_CALLOC((size_t)V, sizeof(double));
    sp.send_ms = (double *)PD_CALLOC((size_t)V, sizeof(double));
    sp.act_bytes = (double *)PD_CALLOC((size_t)V, sizeof(double));
    sp.param_bytes = (double *)PD_CALLOC((size_t)V, sizeof(double));
    sp.allreduce_ms = (double *)PD_CALLOC((size_t)p, sizeof(double));
    sp.replicas = (int *)PD_CALLOC((size_t)p, sizeof(int));
    if (pl->recompute && !(sp.in_bytes = (double *)PD_CALLOC((size_t)V, sizeof(double)))) {
        pd__sim_plan_free(&sp);
        return pd__err(PD_ERR_NOMEM, "pd_simulate: out of memory");
    }
    if (!sp.f_ms || !sp.b_ms || !sp.w_ms || !sp.send_ms || !sp.act_bytes || !sp.param_bytes || !sp.allreduce_ms ||
        !sp.replicas) {
        pd__sim_plan_free(&sp);
        return pd__err(PD_ERR_NOMEM, "pd_simulate: out of memory");
    }
    /* the wrap-around link of a split plan (last worker -> first) costs as the dearest real link */
    double wrap = 0;
    for (int s = 0; s + 1 < p; s++)
        if (pl->stage[s].send_ms > wrap) wrap = pl->stage[s].send_ms;
    for (int k = 0; k < V; k++) {
        int w = k % p;
        const pd__stage *g = split ? &pl->stage[w] : &pl->stage[k];
        double r = g->replicas > 0 ? g->replicas : 1, d = split ? v : 1;
        sp.f_ms[k] = g->fwd_ms / d / r;
        sp.b_ms[k] = g->bwd_in_ms / d / r;
        sp.w_ms[k] = g->bwd_w_ms / d / r;
        sp.act_bytes[k] = g->act_bytes / d;
        if (sp.in_bytes) sp.in_bytes[k] = g->in_bytes / d;
        sp.param_bytes[k] = g->param_bytes / d;
        sp.send_ms[k] = k + 1 == V ? 0 : !split ? g->send_ms : w + 1 < p ? g->send_ms : wrap;
        if ((int)r > sp.replicas[w]) sp.replicas[w] = (int)r;
        /* pipedream's replicas take microbatches in turn and update once per round: one ALLREDUCE a round */
        if (!split || k < p) sp.allreduce_ms[w] += g->allreduce_ms;
    }
    sp.split_chunks = split;
    int width = pl->width > 0 ? pl->width : 1;
    int64_t mbs = pl->microbatch_size > 0 ? pl->microbatch_size : 1;
    sp.samples = mbs * m * width;
    /* copies of a stage all-reduce: its replicas and, with parallel pipelines, their twins */
    int *copies = (int *)PD_MALLOC(sizeof(int) * (size_t)p);
    if (!copies) {
        pd__sim_plan_free(&sp);
        return pd__err(PD_ERR_NOMEM, "pd_simulate: out of memory");
    }
    for (int w = 0; w < p; w++) copies[w] = sp.replicas[w] * width;
    pd_status rc = pd__schedule_build(kind, p, v, m, N, copies, &sp.sched);
    PD_FREE(copies);
    if (rc != PD_OK) {
        pd__err_prefix("pd_simulate");
        pd__sim_plan_free(&sp);
        return rc;
    }
    *out = sp;
    return PD_OK;
}

/* A temporary file beside `path`, renamed into place when the write succeeded. */
static FILE *pd__open_tmp(const char *path, char *tmp, size_t n, pd_status *rc) {
    if (!path) return NULL;
    FILE *f = NULL;
    if ((*rc = pd__check_dest(path)) != PD_OK) return NULL;
    if ((size_t)snprintf(tmp, n, "%s.tmp", path) >= n)
        *rc = pd__err(PD_ERR_IO, "%s: path too long", path);
    else if (!(f = fopen(tmp, "w")))
        *rc = pd__err(PD_ERR_IO, "%s: %s", path, strerror(errno));
    return f;
}

static pd_status pd__close_tmp(FILE *f, const char *tmp, const char *path, pd_status rc) {
    if (!f) return rc;
    bool ok = fclose(f) == 0;
    if (rc == PD_OK && (!ok || rename(tmp, path) != 0))
        rc = pd__err(PD_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    if (rc != PD_OK) remove(tmp);
    return rc;
}

pd_status pd_simulate(const pd_plan *p, const pd_sim_options *opt, pd_sim_result *out) {
    pd_sim_options o = PD_SIM_OPTIONS_INIT;
    PD_TRY(pd__opts_read(&o, opt, sizeof o, "pd_simulate: opt"));
    if (!out) return pd__err(PD_ERR_INVALID, "pd_simulate: NULL result");
    pd__sim_plan sp;
    PD_TRY(pd__sim_plan_make(p, &o, &sp));
    pd__sim_costs c = {sp.f_ms, sp.b_ms, sp.w_ms, sp.send_ms, sp.allreduce_ms, sp.act_bytes, sp.param_bytes, sp.in_bytes};
    char ttmp[4096], stmp[4096];
    pd_status rc = PD_OK;
    FILE *ft = pd__open_tmp(o.trace, ttmp, sizeof ttmp, &rc);
    FILE *fs = rc == PD_OK ? pd__open_tmp(o.svg, stmp, sizeof stmp, &rc) : NULL;
    pd_sim_result r;
    memset(&r, 0, sizeof r);
    if (rc == PD_OK) rc = pd__simulate_costs(sp.sched, &c, &r, ft, fs);
    rc = pd__close_tmp(ft, ttmp, o.trace, rc);
    rc = pd__close_tmp(fs, stmp, o.svg, rc);
    if (rc == PD_OK) {
        r.throughput = r.time_ms > 0 ? (double)sp.samples / (r.time_ms / 1000) : 0;
        *out = r;
    } else {
        pd_sim_result_free(&r);
    }
    pd__sim_plan_free(&sp);
    return rc;
}
/* ==== END GENERATED IMPLEMENTATION ==== */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 7
#pragma GCC diagnostic pop
#endif
#endif /* PIPEDREAM_IMPLEMENTATION_INCLUDED */
#endif /* PIPEDREAM_IMPLEMENTATION */
