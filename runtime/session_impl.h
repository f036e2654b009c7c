/* session_impl.h - private to the training session: its layout
 * (struct pd_session) and what its two files share. runtime/session.c is
 * the session on the CPU (slabs, steps, losses, the activation contexts the
 * pipeline uses); runtime/session_dev.c its device side (pd__sdev_*: the
 * device twin of its slabs, the step on a GPU or the simulated device, and
 * the device activation contexts, pd__dactx, of the pipeline's GPU stages). */
#ifndef PD_SESSION_IMPL_H
#define PD_SESSION_IMPL_H

#include "session.h"

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
    struct pd__sdev *dev; /* PD_DEVICE_CUDA: the device side; NULL on the CPU */
};

/* An activation context of the pipeline (session.h). */
struct pd__actx {
    void *act, *gact;    /* this context's activations and their gradients */
    size_t abytes, gbytes; /* their sizes (a device twin maps an address by its offset in them) */
    pd_tensor *views, *gviews;
    pd_tensor **args, **gargs; /* laid out as the session's (arg_start) */
    pd__zplan zp;              /* as the session's, over the backward it was planned for */
};

/* ---- the device side (session_dev.c) ---- */
typedef struct pd__sdev pd__sdev;
pd_status pd__sdev_create(pd_session *s);
void pd__sdev_destroy(pd_session *s);
pd_status pd__sdev_pull(const pd_session *s, bool grads);
pd_status pd__sdev_push(pd_session *s);
pd_status pd__sdev_input(pd_session *s, int t);
pd_status pd__sdev_labels(pd_session *s);
pd_status pd__sdev_step(pd_session *s, pd_step_result *r);
pd_status pd__sdev_eval(pd_session *s, int64_t rows, pd_step_result *r);
pd_status pd__sdev_timed_step(pd_session *s, pd__step_times *t);
bool pd__sdev_ready(const pd_session *s);

/* ---- shared by session.c and session_dev.c (defined in session.c) ---- */
bool pd__bwd_runs_of(const pd__node *n, pd_tensor *const *ga);
pd_status pd__loss(pd_session *s, bool grad, int64_t rows, pd_step_result *r);
uint64_t pd__mix(uint64_t z);
pd_status pd__numeric_error(pd_session *s, const char *what, double v);

#endif
