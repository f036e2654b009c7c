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
 * Replicated stages (plan->stage[s].replicas = r > 1, flushing schedules): r threads, replica j taking the microbatches i of each
 * minibatch with i mod r == j; ALLREDUCE sums the replicas' gradients, so an
 * update equals single-stage training on the same global batch; the replicas
 * share the stage's weights, which one of them updates while the others wait.
 * Bi-Partition plans (bwd_stage != fwd_stage for nodes without parameters)
 * run under every schedule without chunks.
 * Replicas under interleaved too (a replicated worker holds all its chunks
 * on every replica) and 2bw (each replica its own stash; a 2bw plan's width
 * w is every stage replicated w times). Under pipedream (PipeDream's hybrid
 * plans) replica j of an r-way stage takes microbatches j, j+r, ... (round
 * robin), keeps its own stash, and the replicas average their gradients and
 * update once per round of r microbatches; not with --vertical-sync or
 * snapshots yet. Not yet: bipartition with
 * chunks. Tied weights (a parameter read by several stages: the first owns
 * and updates it, the others add their gradients into buffers of their own,
 * summed into the owner's when every stage meets at STEP) under the flushing
 * schedules, without replicas; across MPI processes every process holding a
 * reader keeps a copy, updated with the same sum (all-reduced in stage
 * slots, added in stage order). Gradient clipping (and the step's
 * gradient norm) only under the flushing schedules, where an update has every
 * stage's gradients: the stages meet at STEP and add their squared norms in
 * worker order.
 * Activation recomputation (plan->recompute; docs/SCHEDULES.md): a
 * microbatch in flight keeps what its stage received, the rest of a chunk's
 * activations are one slab its forward is redone into before a B, W or
 * SEND_ACT that finds another microbatch's there; every schedule, CPU and
 * GPU stages; the same results bit for bit.
 * GPU stages (o->device PD_DEVICE_CUDA; docs/CUDA.md, "The pipeline on
 * GPUs"): every thread computes on a CUDA device (the plan's per stage, else
 * o->device_index), its weights, stashes and contexts there
 * (runtime/pipeline_devmem.h), made at the first run; messages are device
 * copies ordered by events, NCCL between processes; a stage's replicas in
 * one process sum their gradients through host memory. Not yet: tied weights
 * with replicas or under MPI, several stages per MPI process.
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
/* PD_LOSS_GRAPH: the graph input (tensor index) the labels feed; -1 otherwise. */
int pd__pipe_labels_input(const pd__pipe *p);
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
    /* bytes of activations held at the peak: peak_act_mbs * act_bytes_per_mb,
     * or under recomputation peak_act_mbs * keep_bytes_per_mb (what each
     * received) plus one microbatch's rest, the shared slab forwards are
     * redone into; recomputes: forwards run again (busiest replica) */
    double peak_act_bytes;
    double keep_bytes_per_mb;
    int64_t recomputes;
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
/* The same events of this process's threads only, comma-separated, without
 * the brackets (malloc'd): under MPI rank 0 joins every process's (pid: the
 * rank, one track per thread). */
pd_status pd__pipe_trace_events(const pd__pipe *p, char **buf, size_t *len);

/* Test hook: the instruction op (pd__op_kind) of microbatch mb on stage s
 * fails in the following runs (stage -1: none). */
void pd__pipe_inject_failure(pd__pipe *p, int stage, int op, int mb);
/* The same from the environment, read when a pipeline is made:
 * PDONNX_TEST_FAIL=STAGE:OP:MB (OP as pd__op_name spells it, "F", "STEP"):
 * under MPI the process running that stage fails in the middle of the run
 * (tests/test_mpi.sh, test_mpi_api.sh). Unset or malformed: nothing. */
void pd__pipe_inject_env(pd__pipe *p);

/* Trains `minibatches` steps (pipedream: a minibatch is one microbatch).
 * inputs[i] is graph input i (g->inputs order) and labels the labels, each
 * holding minibatches * microbatches * batch rows: step t takes the rows of
 * its microbatches t*m .. t*m+m-1 in order. For --loss graph the labels
 * input's entry in inputs is ignored (labels feed it). results (may be NULL):
 * one per step, the loss the mean over the minibatch (computed on the weights
 * its forward used), lr the update's; grad_norm the update's global gradient
 * norm before clipping (flushing schedules; 0 under pipedream and 2bw).
 * A run's schedule starts and ends with nothing in flight, so the async
 * schedules start each run from one version (2bw: W(-1) = W(0) again).
 * An error in any stage stops every stage; the message names the stage, the
 * step and the instruction; the summed gradients are dropped, and updates
 * already made stay made. */
pd_status pd__pipe_run(pd__pipe *p, int64_t minibatches, const pd_tensor *inputs, const pd_tensor *labels,
                       pd_step_result *results);

/* Rows on demand, so a run need not hold every step's rows: the next
 * pd__pipe_run's inputs and labels hold `steps` steps of rows (a ring), and
 * fill(ctx, k, slot) writes step k's rows into slot k % steps of them before
 * its first microbatch is read (on a stage's thread, one call at a time).
 * steps must be at least pd__pipe_ring_steps: no stage reads a step after a
 * step that many later is read (a step overwritten while still needed is
 * an error, not a wrong result). steps 0: every step's rows at once again. */
typedef pd_status (*pd__ring_fill)(void *ctx, int64_t step, int slot);
pd_status pd__pipe_set_ring(pd__pipe *p, int steps, pd__ring_fill fill, void *ctx);
int pd__pipe_ring_steps(const pd__pipe *p);
int pd__pipe_ring(const pd__pipe *p); /* the ring set, 0: none */

/* ---- snapshots, for checkpoints (runtime/checkpoint.h, docs/CHECKPOINT.md) ----
 *
 * Boundary b of a run (1 <= b < minibatches) is the state after minibatches
 * 0..b-1 and before b: each worker takes its part of it after its last
 * instruction of a minibatch < b -- the live weights, the stashed versions
 * that later instructions still name, the optimizer state, its update count
 * -- and before its first instruction of a minibatch >= b the buffers its
 * forwards write (BatchNorm's running statistics). Under pipedream and 2bw
 * some forwards of minibatches >= b ran before that point; a resumed run
 * runs them again on the stashed versions they used, so it equals the
 * uninterrupted run bitwise.
 *
 * want(ctx, b) is asked on stage 0's thread (under MPI: the process's
 * lowest thread's, a replica's where that is all it runs) before minibatch
 * b-1 starts, in order of b;
 * boundaries closer than pd__pipe_snap_gap to the last one taken are not
 * asked (async schedules: P+1, others 1). ready(ctx, b) is called (on a
 * worker thread) when every part of b is in place; the parts are then read
 * with pd__pipe_snap_part until pd__pipe_snap_release, and the next
 * snapshot waits for that (CheckFreq: a snapshot waits for the last persist). */
typedef struct pd__snap_hooks {
    bool (*want)(void *ctx, int64_t b);
    void (*ready)(void *ctx, int64_t b);
    void *ctx;
} pd__snap_hooks;
/* Allocates the parts (one per worker, sized for its most versions). */
pd_status pd__pipe_set_snap_hooks(pd__pipe *p, const pd__snap_hooks *h);
int64_t pd__pipe_snap_gap(const pd__pipe *p);
void pd__pipe_snap_part(const pd__pipe *p, int w, const void **data, size_t *len);
void pd__pipe_snap_release(pd__pipe *p);
/* Under MPI, from want (on the deciding thread): sums n doubles across the
 * pipeline's processes, on a communicator of their own, so that they agree
 * on a boundary that depends on measured times (CheckFreq's auto); every
 * process must make the same calls at the same boundaries. One process: a
 * no-op. Waits that may last (for a persist) should give up when
 * pd__pipe_aborted says the run was stopped. */
pd_status pd__pipe_snap_agree(pd__pipe *p, double *v, int64_t n);
bool pd__pipe_aborted(pd__pipe *p);
struct pd__ckpt_writer;
/* Under MPI: a checkpoint writer of this pipeline's runs (pd__ckpt_writer_watch)
 * stops the run on its first error, and stops waiting for other processes'
 * parts when the run failed; one process: nothing (its errors come at the end). */
void pd__pipe_watch_writer(pd__pipe *p, struct pd__ckpt_writer *w);
/* Snapshots taken in every run so far, and the pause they cost in total
 * (per snapshot, the longest any worker spent waiting for and copying it). */
void pd__pipe_snap_stats(pd__pipe *p, int64_t *taken, double *pause_ms);
/* Between runs: the whole state into the parts (after the held snapshot is
 * released); read them with pd__pipe_snap_part, then release. */
pd_status pd__pipe_snap_capture(pd__pipe *p);
/* Before a run: restores the parts (one per worker, from the same plan and
 * schedule) of boundary b; the next pd__pipe_run, of the same length as the
 * run they came from, skips minibatches < b. */
pd_status pd__pipe_resume(pd__pipe *p, int64_t b, int nparts, const void *const *parts, const size_t *lens);

/* ---- across processes (MPI: runtime/comm/transport.h, docs/DISTRIBUTED.md) ----
 * Every process builds the same pipeline (same graph, plan, schedule); this
 * one runs only the threads of `rank`: thread i (stage by stage, replica by
 * replica) is process i, one process per stage replica, unless the plan's
 * stage_to_rank maps them onto fewer (several stages per process, a
 * replica of a replicated stage among them; a stage's replicas each in a
 * process of its own). Messages to a thread of another process go by MPI,
 * within the process by the queues; a replicated stage's processes
 * all-reduce its gradients and each updates its own copy of the weights. A
 * run's step results are summed across the processes (every one gets
 * them). After training, pd__pipe_gather gives every process every
 * stage's trained weights and statistics (for saving). Snapshots: set the
 * hooks after the ranks; each process takes the parts of its own stages
 * (replica 0's; pd__pipe_snap_part gives NULL for the others), decides each
 * boundary itself (so want must give every process the same answer), and
 * resumes its own stages (a replica's process from replica 0's part). */
pd_status pd__pipe_set_ranks(pd__pipe *p, int rank, int nranks);
/* The same for one of several pipelines side by side (AvgPipe): the
 * processes of color `color` (collective over every process) run this
 * pipeline, rank and nranks counted among them. */
pd_status pd__pipe_set_ranks_in(pd__pipe *p, int rank, int nranks, int color);
/* The processes pd__pipe_set_ranks needs: one per stage replica, or the
 * plan's stage_to_rank's; the threads (stage replicas) they run. */
int pd__pipe_processes(const pd__pipe *p);
int pd__pipe_threads(const pd__pipe *p);
/* PD_OK when nranks processes run the plan (pd__pipe_processes); else the
 * error pd__pipe_set_ranks gives, naming the count mpirun needs. */
pd_status pd__pipe_fits(const pd__pipe *p, int nranks);
pd_status pd__pipe_gather(pd__pipe *p);
/* stageload.c (lazy_weights, docs/DISTRIBUTED.md "Per-stage loading"): read
 * the parameters of this process's stages (after pd__pipe_set_ranks; the
 * runs and resumes call it, once); and, collectively after training, write
 * each stage's trained tensors from the process holding its replica 0 to
 * "<model>.stage<k>.bin" beside `model`, pointing the graph's tensors there
 * (ext_loc) for pd_graph_save to refer to. */
pd_status pd__pipe_load_stages(pd__pipe *p);
pd_status pd__pipe_save_stages(pd__pipe *p, const char *model);
/* A replica's own gradient buffer (whole-model sized, calloc'd) zeroed where
 * its stages' parameters lie, in this process only: the rest is never
 * touched, never resident. */
struct pd__wk;
void pd__wk_zero_grads(const pd__pipe *p, struct pd__wk *W);

#endif
