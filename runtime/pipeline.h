/* pipeline.h - private: a plan executed as a pipeline in one process
 * (runtime/pipeline.c). One thread per stage walks its instruction list of a
 * pd__schedule; activations go forward and gradients backward through bounded
 * queues between neighbouring stages.
 *
 * Schedules: gpipe and flush (one update per minibatch, gradients summed over
 * its microbatches), zb-h1 (the same update; B computes the input gradients,
 * a later W the weight gradients), interleaved (a plan of P*V virtual stages
 * with chunks = V: virtual stage k runs on worker k % P), pipedream (an
 * update after every microbatch, weight stashing) and 2bw (two weight
 * versions: minibatch t computes on W(t-1)).
 * Replicated stages (plan->stage[s].replicas = r > 1, flushing schedules
 * without chunks): r threads, replica j taking the microbatches i of each
 * minibatch with i mod r == j; ALLREDUCE sums the replicas' gradients, so an
 * update equals single-stage training on the same global batch; the replicas
 * share the stage's weights, which one of them updates while the others wait.
 * Bi-Partition plans (bwd_stage != fwd_stage for nodes without parameters)
 * run under every schedule without chunks.
 * Not yet: replicas under pipedream, 2bw or interleaved; bipartition with
 * chunks; gradient clipping; shared weights across stages.
 */
#ifndef PD_PIPELINE_H
#define PD_PIPELINE_H

#include "../core/plan.h"

typedef struct pd__pipe pd__pipe;

/* g is loaded with the microbatch size as its batch; the pipeline trains its
 * initializers in place (as a pd_session does) until destroyed. plan: one
 * stage per node (plan->fwd_stage; bwd_stage when it differs), its n_nodes
 * equal to g's node count; for interleaved n_stages = P*V virtual stages and
 * chunks = V (a plan with chunks runs only under interleaved, and interleaved
 * needs one; the microbatches a multiple of P); stage[s].replicas. o: the
 * optimizer and loss, as for pd_session_create. pd__pipe_stages: P. */
pd_status pd__pipe_create(pd_graph *g, const pd_plan *plan, const pd_train_options *o, pd__sched_kind kind,
                          int microbatches, pd__pipe **out);
void pd__pipe_destroy(pd__pipe *p);
int pd__pipe_stages(const pd__pipe *p);
/* PipeDream's vertical sync (pipedream schedule only): every stage runs
 * microbatch k on the weight version stage 0's forward of k used. */
pd_status pd__pipe_set_vertical_sync(pd__pipe *p, bool on);

/* Most weight versions stage s held at once during the last run (stashes
 * plus the live weights). */
int pd__pipe_peak_versions(const pd__pipe *p, int s);

/* Statistics of stage (worker) s in the last run; a replicated stage reports
 * its busiest replica and the largest peaks.
 * busy_ms: time in F, B, W and STEP; peak_act_mbs: most microbatches whose
 * activations it held at once (F done, B -- W when split -- not; under
 * interleaving each chunk's microbatch counts once); peak_versions: as
 * pd__pipe_peak_versions; act_bytes_per_mb: bytes of one microbatch's
 * activations on the stage (what its nodes produce plus what it receives;
 * all chunks). */
typedef struct pd__pipe_stats {
    double busy_ms;
    int peak_act_mbs;
    int peak_versions;
    double act_bytes_per_mb;
} pd__pipe_stats;
void pd__pipe_stats_get(const pd__pipe *p, int s, pd__pipe_stats *out);
/* Wall time of the last pd__pipe_run (0 before any). */
double pd__pipe_last_run_ms(const pd__pipe *p);
/* The live weights (and gradient, optimizer-state slabs) of the pipeline's
 * session, borrowed (runtime/session.h): between runs a caller may change the
 * parameters in place (AvgPipe's elastic averaging, runtime/avgpipe.c, which
 * also runs the avgpipe schedule here: weights as under flush); destroy
 * writes them back into the graph. */
struct pd__slabs;
pd_status pd__pipe_slabs(pd__pipe *p, struct pd__slabs *out);
/* The last run as a Chrome trace (JSON array): an "X" event per F, B, W,
 * SEND_ACT, RECV_ACT, SEND_GRAD, RECV_GRAD, ALLREDUCE and STEP it executed
 * (name "F3", "B3.1" under interleaving: op, microbatch, chunk; cat the op;
 * ts/dur in microseconds from the run's start (CLOCK_MONOTONIC); pid 0; tid
 * the thread: the stage, unless a stage is replicated, when threads are
 * numbered stage by stage, replica by replica), and a thread_name per thread
 * ("stage s", "stage s replica r"). RECV events include the wait for the
 * message. Written to a temporary name and renamed. */
pd_status pd__pipe_write_trace(const pd__pipe *p, const char *path);

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
