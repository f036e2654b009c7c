/* pipeline.h - private: a plan executed as a pipeline in one process
 * (runtime/pipeline.c). One thread per stage walks its instruction list of a
 * pd__schedule; activations go forward and gradients backward through bounded
 * queues between neighbouring stages.
 *
 * Schedules: gpipe and flush (one update per minibatch, gradients summed over
 * its microbatches), pipedream (an update after every microbatch, weight
 * stashing) and 2bw (two weight versions: minibatch t computes on W(t-1)).
 * So far: fwd_stage == bwd_stage, one replica per stage, no virtual stages
 * (interleaved), no split backward (zb-h1), no gradient clipping.
 */
#ifndef PD_PIPELINE_H
#define PD_PIPELINE_H

#include "../core/plan.h"

typedef struct pd__pipe pd__pipe;

/* g is loaded with the microbatch size as its batch; the pipeline trains its
 * initializers in place (as a pd_session does) until destroyed. plan: one
 * stage per node (plan->fwd_stage), its n_nodes equal to g's node count. o:
 * the optimizer and loss, as for pd_session_create. */
pd_status pd__pipe_create(pd_graph *g, const pd_plan *plan, const pd_train_options *o, pd__sched_kind kind,
                          int microbatches, pd__pipe **out);
void pd__pipe_destroy(pd__pipe *p);
int pd__pipe_stages(const pd__pipe *p);

/* Most weight versions stage s held at once during the last run (stashes
 * plus the live weights). */
int pd__pipe_peak_versions(const pd__pipe *p, int s);

/* Test hook: the instruction op (pd__op_kind) of microbatch mb on stage s
 * fails in the following runs (stage -1: none). */
void pd__pipe_inject_failure(pd__pipe *p, int stage, int op, int mb);

/* Trains `minibatches` steps (pipedream: a minibatch is one microbatch).
 * inputs[i] is graph input i (g->inputs order) and labels the labels, each
 * holding minibatches * microbatches * batch rows: step t takes the rows of
 * its microbatches t*m .. t*m+m-1 in order. For --loss graph the labels
 * input's entry in inputs is ignored (labels feed it). results (may be NULL):
 * one per step, the loss the mean over the minibatch (computed on the weights
 * its forward used), lr the update's; grad_norm is not computed (0).
 * A run's schedule starts and ends with nothing in flight, so the async
 * schedules start each run from one version (2bw: W(-1) = W(0) again).
 * An error in any stage stops every stage; the message names the stage, the
 * step and the instruction; the summed gradients are dropped, and updates
 * already made stay made. */
pd_status pd__pipe_run(pd__pipe *p, int64_t minibatches, const pd_tensor *inputs, const pd_tensor *labels,
                       pd_step_result *results);

#endif
