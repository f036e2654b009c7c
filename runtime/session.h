/* session.h - private hooks into the training session (runtime/session.c) for
 * the profiler (runtime/profiler.c): a training step that times every node. */
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
/* The graph tensor the loss starts from (the prediction, or the model's own loss). */
int pd__session_loss_tensor(const pd_session *s);
/* PD_LOSS_GRAPH: the graph input fed the labels; -1 otherwise. */
int pd__session_labels_input(const pd_session *s);

#endif
