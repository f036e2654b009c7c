/* session.h - private hooks into the training session (runtime/session*.c) for
 * the profiler (runtime/profiler.c): a training step that times every node;
 * and for the pipeline (runtime/pipeline.c): activation contexts, so that
 * several microbatches can be in flight over the session's parameters. */
#ifndef PD_SESSION_H
#define PD_SESSION_H

#include "../core/pd_internal.h"

/* Milliseconds of one timed step; the arrays are the caller's, one entry per graph node. */
typedef struct pd__step_times {
    double *fwd_ms;
    double *bwd_in_ms;  /* input gradients: din asked only for inputs that are not parameters */
    double *bwd_w_ms;   /* weight gradients: din asked only for the trained parameters */
    double loss_ms;     /* the loss and its gradient */
} pd__step_times;

/* One training step without the optimizer update, every node timed: forward,
 * loss, backward. A node's backward runs as two kernel calls (input gradients,
 * then weight gradients), the split the kernels support; the gradients are the
 * same as pd_session_step's. Parameters are not updated; what a training
 * forward writes (BatchNorm running statistics) is written. */
pd_status pd__session_timed_step(pd_session *s, pd__step_times *t);
/* pd_session_create on the device dev (runtime/device.h) rather than the
 * one opt->device names: a test's device (tests/test_device.c: the CPU
 * with memory of its own and nodes it refuses, so the twin slabs, copies
 * and fallbacks run without a GPU). */
struct pd__dev_i;
pd_status pd__session_create_on(pd_graph *g, const pd_train_options *opt, const struct pd__dev_i *dev,
                                pd_session **out);
/* The graph tensor the loss starts from (the prediction, or the model's own loss). */
int pd__session_loss_tensor(const pd_session *s);
/* PD_LOSS_GRAPH: the graph input fed the labels; -1 otherwise. */
int pd__session_labels_input(const pd_session *s);

/* ---- for the pipeline ------------------------------------------------------ */

/* A slab planned by lifetimes: buffers (one per tensor) alive from step
 * first to step last (inclusive); buffers alive at the same time never share
 * bytes. Greedy by decreasing size, lowest fitting offset, each 64-byte
 * aligned (runtime/engine.c): O(n log n) whether few or most buffers are alive
 * at once. The inference engine plans its activations with it, the session its
 * activation gradients. */
typedef struct pd__life {
    int n;             /* buffers */
    int *id, *at;      /* buffer k's tensor; tensor t's buffer, -1 for none */
    int *first, *last; /* buffer k's steps */
    size_t *size, *off;
    int method;        /* 0: the faster of the two ways (engine.c); 1, 2: one of them (tests) */
} pd__life;

pd_status pd__life_init(pd__life *l, int ntensors); /* no buffers; PD_ERR_NOMEM */
void pd__life_add(pd__life *l, int t, int first, int last, size_t bytes);
pd_status pd__life_pack(pd__life *l, size_t *total); /* fills off; *total: the slab's size */
void pd__life_free(pd__life *l);
size_t pd__engine_slab_bytes(const pd_engine *e); /* the engine's planned slab (tests, benches) */

/* Which activation gradients each node's backward touches first (by node
 * i: list[at[3i] .. at[3i+1]) are zeroed before it, list[at[3i+1] ..
 * at[3i+2]) are fresh, written whole by its kernel: input bits fresh[i] of
 * pd__exec.fresh; a backend that cannot write them zeroes those too). */
typedef struct pd__zplan {
    int *at, *list;
    uint32_t *fresh;
} pd__zplan;
void pd__zplan_free(pd__zplan *zp);

/* An activation context: its own copy of every activation and activation
 * gradient of the graph, with the nodes' argument tables pointing into it.
 * Parameters (values and gradients) stay the session's, shared by every
 * context: a backward adds (+=) into the session's gradient slab. A context's
 * parameter view may be re-pointed (pd__actx_value) at another weight version. */
typedef struct pd__actx pd__actx;
/* need (NULL: all): per graph tensor, whether the context holds it; the
 * activations and gradients of the others have no memory (data NULL), so a
 * pipeline stage's contexts hold only what its nodes and links touch.
 * The activation gradients are planned over the backward of
 * bnodes[0..nb) (run in reverse; pd__actx_backward over them or a stretch of
 * them) as the session plans its own (lifetimes, lazy zeroing). role (NULL:
 * none), per tensor: PD__G_SET, its gradient is written before the backward
 * (received, or the loss's) and never zeroed; PD__G_KEEP, it is read after
 * the backward (sent). split: the backward may run as
 * pd__actx_backward_part's two passes, the W pass reading every output
 * gradient again, so none share. */
enum { PD__G_SET = 1, PD__G_KEEP = 2 };
pd_status pd__actx_create(const pd_session *s, const bool *need, const int *bnodes, int nb, const uint8_t *role,
                          bool split, pd__actx **out);
/* The same with the activations of need outside own (per tensor) held in
 * `shared`, a slab of pd__actx_shared_bytes(s, need, own) bytes that several
 * contexts use in turn (the pipeline's activation recomputation: each
 * microbatch owns only what it received, its forward redone into the
 * shared slab before its backward). own NULL: pd__actx_create. */
pd_status pd__actx_create_in(const pd_session *s, const bool *need, const bool *own, void *shared, const int *bnodes,
                             int nb, const uint8_t *role, bool split, pd__actx **out);
size_t pd__actx_shared_bytes(const pd_session *s, const bool *need, const bool *own);
void pd__actx_destroy(pd__actx *c);
pd_tensor *pd__actx_value(pd__actx *c, int t); /* graph tensor t's data in this context */
pd_tensor *pd__actx_grad(pd__actx *c, int t);  /* its gradient (data NULL: none) */
/* Forward of nodes[0..n) in that order / backward in reverse order; x is the
 * caller's (one per thread). */
pd_status pd__actx_forward(const pd_session *s, pd__exec *x, pd__actx *c, const int *nodes, int n);
pd_status pd__actx_backward(const pd_session *s, pd__exec *x, pd__actx *c, const int *nodes, int n);
/* The backward split in two, as zero-bubble's B and W (and the profiler's
 * timed step): weights false: only the gradients of inputs that are not
 * initializers (what flows to earlier nodes); weights true: only the trained
 * parameters' gradients, from the output gradients the first part left in the
 * context. Run both (in that order) and the gradients equal
 * pd__actx_backward's. */
pd_status pd__actx_backward_part(const pd_session *s, pd__exec *x, pd__actx *c, const int *nodes, int n, bool weights);
/* The session's loss on this context's prediction; writes dLoss/dpred times
 * scale into the context. labels: the labels (ignored for PD_LOSS_GRAPH, whose
 * labels are a graph input). */
pd_status pd__actx_loss(const pd_session *s, pd__actx *c, const pd_tensor *labels, double scale, pd_step_result *r);

/* ---- device twins of activation contexts: the pipeline's device stages
 * (runtime/pipeline_devmem.c) ----
 * A pd__dactx holds on a device (an open context that must outlive it) the
 * tensors of host context h that need marks (NULL: all): activations and
 * their gradients at h's offsets, and the other initializers and constants
 * uploaded once (or shared with `base`, a twin on the same context). The
 * parameters have no data until pointed at a weight version
 * (pd__dactx_value/_grad); nodes the device refuses run on the CPU in h's
 * memory. h must outlive its twin. */
struct pd__dev;
typedef struct pd__dactx pd__dactx;
pd_status pd__dactx_create(const pd_session *s, const struct pd__dev *dev, pd__actx *h, const bool *need,
                           const pd__dactx *base, pd__dactx **out);
void pd__dactx_destroy(pd__dactx *d);
pd_tensor *pd__dactx_value(pd__dactx *d, int t);
pd_tensor *pd__dactx_grad(pd__dactx *d, int t);
pd_status pd__dactx_forward(const pd_session *s, pd__exec *x, pd__dactx *d, const int *nodes, int n);
/* part -1: pd__actx_backward; 0 and 1: pd__actx_backward_part's input and weight passes. */
pd_status pd__dactx_backward(const pd_session *s, pd__exec *x, pd__dactx *d, const int *nodes, int n, int part);
/* pd__actx_loss: cross-entropy with int64 labels (host memory) on the
 * device, only the sums coming back; the other losses on the host. */
pd_status pd__dactx_loss(const pd_session *s, pd__dactx *d, const pd_tensor *labels, double scale, pd_step_result *r);

/* PD_DEVICE_CUDA: how many nodes run on the CPU because the CUDA table
 * refuses them (each with copies around it); 0 on the CPU. */
int pd__session_cpu_nodes(const pd_session *s);

bool pd__session_needs_grad(const pd_session *s, int t);
const pd_train_options *pd__session_options(const pd_session *s);
/* The parameter, gradient and optimizer-state slabs (borrowed). */
typedef struct pd__slabs {
    int np;
    const int *param;      /* graph tensor of each trained parameter */
    const int64_t *poff;   /* its offset (floats) in every slab */
    int64_t total;
    float *params, *grads, *state0, *state1; /* state0/1 NULL when the optimizer keeps none */
} pd__slabs;
pd_status pd__session_slabs(pd_session *s, pd__slabs *out);
/* pd_session_create; with sparse, parameters the graph defers (lazy_weights)
 * stay unread and their slab ranges untouched (never resident) until
 * pd__session_load_param reads one and zeroes its gradient and optimizer
 * state: the pipeline under MPI loads only its process's stages. */
pd_status pd__session_create_ex(pd_graph *g, const pd_train_options *opt, bool sparse, pd_session **out);
/* The same, training only the tensors `only` marks (per tensor; NULL: all):
 * the profile of a lazily loaded graph, measured piece by piece. */
pd_status pd__session_create_only(pd_graph *g, const pd_train_options *opt, bool sparse, const bool *only,
                                  pd_session **out);
/* Every way of creating a session: on dev (NULL: opt's device), sparse, training only `only`. */
pd_status pd__session_create_full(pd_graph *g, const pd_train_options *opt, const struct pd__dev_i *dev, bool sparse,
                                  const bool *only, pd_session **out);
pd_status pd__session_load_param(pd_session *s, int i);
void pd__session_mark_loaded(pd_session *s, int i); /* its slab range was written (pd__pipe_gather) */

/* Checkpoints (checkpoint.h): the session's state as the records of one
 * stage (its BatchNorm statistics, step count, weights and optimizer
 * state), and back. Restore refuses records of another model, optimizer or
 * plan, and a part missing any. */
struct pd__recw;
void pd__session_snapshot(const pd_session *s, struct pd__recw *w);
pd_status pd__session_restore(pd_session *s, const void *part, size_t len);

#endif
