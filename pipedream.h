/* pipedream.h - pdonnx: train ONNX models with pipeline parallelism, in C.
 *
 * The public API. Everything an embedding program needs is declared here:
 * load an ONNX model into a graph, inspect it, run it.
 *
 *     #include "pipedream.h"
 *
 *     pd_graph *g;
 *     pd_load_options lo = PD_LOAD_OPTIONS_INIT;
 *     lo.batch = 8;
 *     if (pd_graph_load_file("model.onnx", &lo, &g) != PD_OK) {
 *         fprintf(stderr, "%s\n", pd_last_error());
 *         return 1;
 *     }
 *     pd_engine *e;
 *     pd_engine_options eo = PD_ENGINE_OPTIONS_INIT;
 *     pd_engine_create(g, &eo, &e);
 *     pd_engine_set_input(e, "x", &x);      // x: a pd_tensor view of your data
 *     pd_engine_run(e);
 *     pd_tensor y;
 *     pd_engine_get_output(e, "y", &y);     // a view into the engine's memory
 *     pd_engine_destroy(e);
 *     pd_graph_destroy(g);
 *
 * Conventions: every fallible call returns pd_status; on failure the
 * out-parameters are untouched, nothing leaks, and pd_last_error() (per
 * thread) holds a one-line message naming the file, node or argument at
 * fault. Handles are opaque; destroy functions accept NULL. The library
 * never exits or aborts.
 *
 * The core is kept as small source files in core/ and compiled into
 * libpipedream; runtime/ holds the backends and onnx/ the ONNX reader.
 */
#ifndef PIPEDREAM_H
#define PIPEDREAM_H

#include <stddef.h>
#include <stdint.h>

#ifndef PDDEF
#define PDDEF extern
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
    PD_BFLOAT16 = 16
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
PDDEF const char *pd_status_name(pd_status s);
PDDEF const char *pd_dtype_name(pd_dtype t);
PDDEF size_t pd_dtype_size(pd_dtype t); /* 0 for strings and undefined */
PDDEF int64_t pd_tensor_numel(const pd_tensor *t);
PDDEF void pd_tensor_free(pd_tensor *t); /* frees data from pd_npy_load etc. */

/* ---- NumPy .npy files ---------------------------------------------------- */
PDDEF pd_status pd_npy_load(const char *path, pd_tensor *out);
PDDEF pd_status pd_npy_save(const char *path, const pd_tensor *t);
/* Reads only the header: dtype and shape, data left NULL. */
PDDEF pd_status pd_npy_peek(const char *path, pd_tensor *out);

/* ---- Graphs ------------------------------------------------------------ */
typedef struct pd_graph pd_graph;

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
} pd_load_options;
#define PD_LOAD_OPTIONS_INIT {sizeof(pd_load_options), 0, 0, NULL, 1, 0, NULL, NULL}

PDDEF pd_status pd_graph_load_file(const char *path, const pd_load_options *opt, pd_graph **out);
/* `name` names the model in messages; `base_dir` resolves external data (NULL: none allowed). */
PDDEF pd_status pd_graph_load_memory(const void *buf, size_t len, const char *name,
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
    int64_t flops;         /* forward FLOPs (multiply-add = 2) */
    int64_t param_bytes;   /* bytes of float initializers it reads */
    int64_t output_bytes;  /* bytes of its outputs (activations) */
} pd_node_info;

PDDEF int pd_graph_num_nodes(const pd_graph *g);
PDDEF int pd_graph_num_inputs(const pd_graph *g);  /* runtime inputs, initializers excluded */
PDDEF int pd_graph_num_outputs(const pd_graph *g);
PDDEF pd_status pd_graph_node(const pd_graph *g, int i, pd_node_info *out);
/* Name of input/output tensor j of node i (NULL for an absent optional one). */
PDDEF const char *pd_graph_node_input(const pd_graph *g, int i, int j);
PDDEF const char *pd_graph_node_output(const pd_graph *g, int i, int j);
PDDEF pd_status pd_graph_input(const pd_graph *g, int i, pd_value_info *out);
PDDEF pd_status pd_graph_output(const pd_graph *g, int i, pd_value_info *out);
PDDEF pd_status pd_graph_value(const pd_graph *g, const char *name, pd_value_info *out);
PDDEF int64_t pd_graph_param_bytes(const pd_graph *g);

/* ---- Inference engine ------------------------------------------------------ */
typedef struct pd_engine pd_engine;

typedef struct pd_engine_options {
    size_t size;        /* sizeof(pd_engine_options) */
    int threads;        /* 0: all cores */
    const char *backend; /* "cpu" (default) */
} pd_engine_options;
#define PD_ENGINE_OPTIONS_INIT {sizeof(pd_engine_options), 0, NULL}

/* The engine keeps a pointer to the graph: destroy the engine first. */
PDDEF pd_status pd_engine_create(pd_graph *g, const pd_engine_options *opt, pd_engine **out);
PDDEF void pd_engine_destroy(pd_engine *e);
/* Copies t into the input (dtype and shape must match the graph's). */
PDDEF pd_status pd_engine_set_input(pd_engine *e, const char *name, const pd_tensor *t);
PDDEF pd_status pd_engine_run(pd_engine *e);
/* A view of an output (or any computed tensor) valid until the next run or destroy. */
PDDEF pd_status pd_engine_get_output(pd_engine *e, const char *name, pd_tensor *out);


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
} pd_train_options;
#define PD_TRAIN_OPTIONS_INIT \
    {sizeof(pd_train_options), PD_LOSS_AUTO, NULL, NULL, PD_OPT_SGD, 0.01, 0.9, 0.9, 0.999, 1e-8, 0, 0, 0, 0, 0, NULL, 0, 0}

typedef struct pd_step_result {
    double loss;        /* mean loss of the minibatch, from the forward that made the gradients */
    double lr;          /* the learning rate the update used */
    double grad_norm;   /* global L2 norm of the gradients before clipping */
    int64_t correct;    /* cross_entropy: correctly classified positions */
    int64_t count;      /* positions the loss averaged over */
} pd_step_result;

/* The session trains the graph's float initializers in place: pd_graph_save
 * and the graph's values see the trained weights. Destroy it before the graph. */
PDDEF pd_status pd_session_create(pd_graph *g, const pd_train_options *opt, pd_session **out);
PDDEF void pd_session_destroy(pd_session *s);
/* Feeds a graph input for the next step or evaluation (copied). */
PDDEF pd_status pd_session_set_input(pd_session *s, const char *name, const pd_tensor *t);
PDDEF pd_status pd_session_set_labels(pd_session *s, const pd_tensor *labels);
/* Forward, backward and one optimizer update. */
PDDEF pd_status pd_session_step(pd_session *s, pd_step_result *r);
/* Forward only, in inference mode (BatchNorm uses running statistics). */
PDDEF pd_status pd_session_eval(pd_session *s, pd_step_result *r);
/* The same over the first `rows` rows of the batch only (a last, partial batch). */
PDDEF pd_status pd_session_eval_rows(pd_session *s, int64_t rows, pd_step_result *r);
/* The batch size the graph was loaded with (the prediction's first dim). */
PDDEF int64_t pd_session_batch(const pd_session *s);
PDDEF int pd_session_num_params(const pd_session *s);
/* Name, shape and current values of trainable parameter i (a view). */
PDDEF pd_status pd_session_param(pd_session *s, int i, const char **name, pd_tensor *value, pd_tensor *grad);
PDDEF int64_t pd_session_step_count(const pd_session *s);

/* Writes the model with the graph's current initializer values (trained ones
 * included) through a temporary file and a rename. */
PDDEF pd_status pd_graph_save(const pd_graph *g, const char *path);

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
    const char *device;       /* "cpu" (default) */
    int warmup;               /* untimed steps first (2) */
    int repeats;              /* timed steps; the median is kept (5) */
    int threads;              /* 0: all cores */
    pd_optimizer_kind optimizer; /* sizes the optimizer state (adam: 2 floats per parameter) */
    pd_loss_kind loss;        /* the loss the backward starts from */
} pd_profile_options;
#define PD_PROFILE_OPTIONS_INIT {sizeof(pd_profile_options), NULL, 2, 5, 0, PD_OPT_SGD, PD_LOSS_AUTO}

/* Measures every node by running real training steps of `g` (loaded with the
 * microbatch size as its batch) on the backend. */
PDDEF pd_status pd_profile_measure(pd_graph *g, const pd_profile_options *opt, pd_profile **out);
/* Reads a profile: our JSON, or PipeDream's graph.txt (told apart by content). */
PDDEF pd_status pd_profile_load(const char *path, pd_profile **out);
PDDEF pd_status pd_profile_save(const pd_profile *p, const char *path);           /* JSON */
PDDEF pd_status pd_profile_save_pipedream(const pd_profile *p, const char *path); /* graph.txt */
PDDEF void pd_profile_destroy(pd_profile *p);
PDDEF int pd_profile_num_nodes(const pd_profile *p);
PDDEF pd_status pd_profile_node(const pd_profile *p, int i, pd_profile_node_info *out);

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
    int max_states;           /* bound on the cut states of a branching DAG (0: 100000) */
} pd_plan_options;
#define PD_PLAN_OPTIONS_INIT {sizeof(pd_plan_options), NULL, NULL, 1, 0, NULL, NULL, 10e9, 0, 0, 0, 0, 0}

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

PDDEF pd_status pd_plan_create(const pd_profile *p, const pd_plan_options *opt, pd_plan **out);
PDDEF pd_status pd_plan_save(const pd_plan *p, const char *path); /* JSON */
PDDEF pd_status pd_plan_load(const char *path, pd_plan **out);
PDDEF void pd_plan_destroy(pd_plan *p);
PDDEF pd_status pd_plan_info_get(const pd_plan *p, pd_plan_info *out);
PDDEF pd_status pd_plan_stage(const pd_plan *p, int i, pd_stage_info *out);
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

PDDEF pd_status pd_simulate(const pd_plan *p, const pd_sim_options *opt, pd_sim_result *out);
PDDEF void pd_sim_result_free(pd_sim_result *r);


#ifdef __cplusplus
}
#endif
#endif /* PIPEDREAM_H */
