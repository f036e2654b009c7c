/* session_impl.h - private to the training session: its layout
 * (struct pd_session) and what its files share:
 *   session.c (create, destroy, accessors)  session_params.c (which initializers train)
 *   session_grads.c (the activation gradients' lifetimes)  session_io.c (inputs, labels)
 *   session_step.c (the step, evaluation and timed step, over runtime/device.h)
 *   session_loss.c (the losses, on the device or host)  session_ckpt.c (checkpoint records)
 *   session_nodes.c (nodes forward and backward on a device)
 *   session_dev.c (the step's device memory, pd__sdev; the CPU fallback of refused nodes)
 *   session_actx.c (the pipeline's activation contexts)  session_dactx.c (their device twins) */
#ifndef PD_SESSION_IMPL_H
#define PD_SESSION_IMPL_H

#include "device.h"
#include "session.h"

/* The step's memory on its device. Every device slab has the host slab's
 * layout, so a tensor's device address is its host address's offset in the
 * twin: a CPU fallback copies a tensor down or up with one call. On the CPU
 * (host_memory) the twin is the host slab itself: these are the session's
 * own pointers, the copies between them are skipped, and only the context
 * and cpu are owned here. */
typedef struct pd__sdev {
    pd__dev d;
    float *params, *grads, *state0, *state1; /* the parameter, gradient and optimizer-state slabs */
    void *act, *gact;                         /* activations (inputs included) and their gradients */
    void *consts;                             /* the other initializers and the constants, uploaded once */
    pd_tensor *views, *gviews;                /* per graph tensor: its device data (NULL: none) */
    pd_tensor **args, **gargs;                /* the session's argument tables over the device views */
    bool *cpu;                                /* per node: runs on the CPU (the device's supports_op false) */
    int ncpu;
    void *stage;                              /* pinned staging of the graph inputs (host act layout) */
    size_t stage_bytes;
    pd_tensor labels;                         /* the labels on the device */
    bool ready;                               /* created whole (the device holds the weights) */
} pd__sdev;

struct pd_session {
    pd_graph *g;
    pd_train_options o;
    pd__exec x;
    int np;
    int *param;          /* graph tensor index of each trainable parameter */
    int nuntrained;
    int *untrained;      /* float initializers that reach the loss but are not trained: tensor index, */
    bool *frozen;        /* ... and whether the freeze pattern excluded it (else the model's rules) */
    int64_t *poff;       /* its offset (floats) in the slabs */
    int64_t ptotal;      /* floats in each slab */
    float *params, *grads, *state0, *state1;
    /* lazy_weights: params moved into the slab (the graph borrows them); per
     * parameter, whether its value is in the slab yet (a sparse session's
     * pipeline reads only its process's stages': pd__session_load_param) */
    bool moved;
    bool *loaded;
    const bool *only;    /* while creating: the tensors it may train (NULL: all; pd__session_create_only) */
    size_t sparse_bytes; /* a sparse session's slabs are mapped, each of this size (0: allocated) */
    void *act, *gact;    /* activations and their gradients */
    size_t gact_bytes;
    pd_tensor *views;    /* per graph tensor: its data */
    pd_tensor *gviews;   /* per graph tensor: its gradient (data NULL when none) */
    bool *needs_grad;    /* per graph tensor */
    pd_tensor **args;    /* per node: inputs then outputs */
    pd_tensor **gargs;   /* per node: output gradients then input gradients */
    int *arg_start;
    pd__zplan zp;        /* the activation gradients each node's backward zeroes or writes first (pd__plan_grads) */
    int pred;            /* the prediction (or, PD_LOSS_GRAPH, the loss) tensor */
    int labels_input;    /* PD_LOSS_GRAPH: the graph input fed the labels; else -1 */
    pd_tensor labels;    /* owned copy of the labels */
    bool *fed;           /* per graph input: set since creation */
    bool labels_fed;
    int64_t step;
    pd__sdev dev;        /* where the step runs: the CPU, or a device's twin of the slabs above */
};

/* An activation context of the pipeline (session.h). */
struct pd__actx {
    void *act, *gact;    /* this context's activations and their gradients */
    size_t abytes, gbytes; /* their sizes (a device twin maps an address by its offset in them) */
    pd_tensor *views, *gviews;
    pd_tensor **args, **gargs; /* laid out as the session's (arg_start) */
    pd__zplan zp;              /* as the session's, over the backward it was planned for */
};

static inline size_t pd__tbytes(const pd__tensor *x) {
    return (size_t)(x->numel > 0 ? x->numel : 0) * pd_dtype_size(x->dtype);
}

/* ---- session.c ---- */
void *pd__slab(size_t bytes); /* 64-byte aligned, zeroed; NULL on failure */

/* ---- session_params.c ---- */
pd_status pd__find_outputs(pd_session *s);
pd_status pd__choose_params(pd_session *s);

/* ---- session_grads.c ---- */
/* Whether a node's backward runs (ga: its gradient arguments, outputs' first). */
bool pd__bwd_runs_of(const pd__node *n, pd_tensor *const *ga);
pd_status pd__plan_grads_over(const pd_session *s, pd_tensor *const *gargs, const int *nodes, int n, const bool *has,
                              const uint8_t *role, bool split, pd__zplan *zp, pd__life *l, size_t *total);
pd_status pd__plan_grads(pd_session *s);

/* ---- session_nodes.c: a list of nodes on a device ---- */
/* Where nodes run: a device and the argument tables over its memory, with
 * the host's (h*) for the CPU fallback of the nodes it refuses (cpu; NULL:
 * none); on the CPU both are the same tables. zp: the plan of the
 * activation gradients (session_grads.c). */
typedef struct pd__where {
    const pd__dev *dev;
    pd_tensor *views, *gviews;
    pd_tensor **args, **gargs;
    pd_tensor *hviews, *hgviews;
    pd_tensor **hargs, **hgargs;
    const bool *cpu;
    const pd__zplan *zp;
} pd__where;
/* Forward of nodes[0..n) (NULL: the graph's, in order); ms: NULL, or per
 * node its time (the device's timer). */
pd_status pd__nodes_forward(const pd_session *s, pd__exec *x, const pd__where *w, const int *nodes, int n,
                            double *ms);
/* Their backward, in reverse order. part -1: every gradient at once; 0:
 * only the gradients of inputs that are not initializers (zero-bubble's B);
 * 1: only the parameters' (W, after B over the same nodes: the output
 * gradients B left are read again); 2: both, node by node, each pass timed
 * into in_ms / w_ms (the profiler's). The gradients are the same either way. */
pd_status pd__nodes_backward(const pd_session *s, pd__exec *x, const pd__where *w, const int *nodes, int n, int part,
                             double *in_ms, double *w_ms);

/* ---- session_io.c ---- */
pd_status pd__check_fed(const pd_session *s);

/* ---- session_loss.c ---- */
/* The loss of pred against labels on the host; d (when not NULL) receives dLoss/dpred. */
pd_status pd__loss_of(const pd_session *s, const pd_tensor *pred, const pd_tensor *labels, float *d, int64_t rows,
                      pd_step_result *r);
/* The loss of the prediction in device views v on dev: cross-entropy on
 * int64 labels on the device when dlabels (their device copy) has data,
 * else on the host views hv (the prediction copied down, the gradient up).
 * With grad, dLoss/dpred times scale into gv (hgv on the way). */
pd_status pd__loss_run(const pd_session *s, const pd__dev *dev, pd_tensor *v, pd_tensor *gv, pd_tensor *hv,
                       pd_tensor *hgv, const pd_tensor *labels, const pd_tensor *dlabels, bool grad, int64_t rows,
                       double scale, pd_step_result *r);

/* ---- session_step.c ---- */
uint64_t pd__mix(uint64_t z);

/* ---- session_dev.c: the step's memory on its device ---- */
/* after the host slabs; dev NULL: o.device picks the interface */
pd_status pd__sdev_create(pd_session *s, const pd__dev_i *dev);
void pd__sdev_destroy(pd_session *s);
pd_status pd__sdev_pull(const pd_session *s, bool grads); /* device to host mirror; nothing on the CPU */
pd_status pd__sdev_push(pd_session *s);                   /* host mirror to device (a restore) */
pd_status pd__sdev_input(pd_session *s, int t);           /* graph input t, just set on the host */
pd_status pd__sdev_labels(pd_session *s);                 /* the labels, just set on the host */
int pd__session_cpu_nodes(const pd_session *s);
/* Tensor t between host views v and device views dv (either data NULL: nothing). */
pd_status pd__dev_tdown(const pd__dev *dev, const pd_graph *g, const pd_tensor *v, const pd_tensor *dv, int t);
pd_status pd__dev_tup(const pd__dev *dev, const pd_graph *g, const pd_tensor *v, const pd_tensor *dv, int t);
/* Node i on the CPU for a device that refuses it: its tensors down, the
 * kernel on the host views (v, gv; a, ga its host argument tables), its
 * results up (dv, dgv: the device twins); din: the host input gradients
 * asked for (backward). */
pd_status pd__dev_cpu_node(const pd_session *s, const pd__dev *dev, pd__exec *x, const pd_tensor *v,
                           const pd_tensor *gv, const pd_tensor *dv, const pd_tensor *dgv, pd_tensor **a,
                           pd_tensor **ga, int i, bool bwd, pd_tensor **din);
/* A non-finite loss or norm: names the first non-finite computed tensor (host views) (session_step.c). */
pd_status pd__numeric_error(pd_session *s, const char *what, double v);

#endif
