/* pipeline.h - private: a plan executed as a pipeline in one process
 * (runtime/pipeline.c). One thread per stage replica walks its instruction
 * list of a pd__schedule; activations go forward and gradients backward
 * through bounded queues between neighbouring stages. What each schedule,
 * replicas, Bi-Partition, tied weights, clipping, recomputation and GPU
 * stages mean here: docs/INTERNALS.md, "runtime/pipeline.h";
 * docs/SCHEDULES.md for the schedules themselves. */
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
 * writes them back into the graph. GPU stages leave their weights and
 * optimizer state there after every run; a caller that changed the weights
 * calls pd__pipe_slabs_changed before the next run, which uploads them. */
struct pd__slabs;
pd_status pd__pipe_slabs(pd__pipe *p, struct pd__slabs *out);
pd_status pd__pipe_slabs_changed(pd__pipe *p);
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
 * inputs[i] is graph input i, labels the labels, each minibatches *
 * microbatches * batch rows in step order (--loss graph: the labels input's
 * entry is ignored). results (may be NULL): per step the mean loss (on the
 * weights its forward used), the update's lr and grad_norm before clipping
 * (0 under pipedream and 2bw). Every run starts and ends with nothing in
 * flight (2bw: W(-1) = W(0) again). An error in any stage stops every stage
 * with a message naming the stage, step and instruction; the summed
 * gradients are dropped, updates already made stay made. */
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
 * Boundary b (1 <= b < minibatches) is the state after minibatches 0..b-1;
 * each worker takes its part between its last instruction of a minibatch < b
 * and its first of one >= b, so a resumed run equals the uninterrupted one
 * bitwise (docs/INTERNALS.md, "runtime/pipeline.h"). want(ctx, b) is asked on
 * one deciding thread before minibatch b-1 starts, in order of b, skipping
 * boundaries closer than pd__pipe_snap_gap to the last taken; ready(ctx, b)
 * comes when every part is in place; read them with pd__pipe_snap_part until
 * pd__pipe_snap_release (the next snapshot waits for that, as CheckFreq's). */
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
 * Every process builds the same pipeline and runs only the threads of `rank`
 * (one process per stage replica, unless the plan's stage_to_rank maps several
 * onto one). Messages to another process go by MPI, a replicated stage's
 * processes all-reduce its gradients, step results are summed across
 * processes, and pd__pipe_gather gives every process every stage's trained
 * weights. Snapshots: set the hooks after the ranks; each process takes and
 * resumes its own stages' parts (docs/INTERNALS.md, "runtime/pipeline.h"). */
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
