/* avgpipe.h - private: AvgPipe (Chen et al., PPoPP 2023) in one process: K
 * parallel pipelines of the same model, each a pd__pipe over its own graph
 * copy (its own threads, one per stage), trained on different minibatches and
 * kept close by elastic averaging (runtime/avgpipe.c).
 *
 * How it works: docs/INTERNALS.md, "runtime/avgpipe.h".
 */
#ifndef PD_AVGPIPE_H
#define PD_AVGPIPE_H

#include "../core/plan.h"

/* One elastic-averaging update of K replicas x[0..K) of n floats and their
 * centre, in place (all terms use the values from before the update). */
void pd__elastic_update(float *const *x, int K, float *centre, int64_t n, double alpha);

typedef struct pd__avg pd__avg;

/* g[0..K): K graphs of the same model with the same initial weights, each
 * loaded with the microbatch size as its batch; pipeline i trains g[i] in
 * place until pd__avg_destroy, which leaves the centre in every g[i]. plan,
 * o, kind and microbatches as for pd__pipe_create (every pipeline gets the
 * same plan: K pipelines use K times its workers). alpha in [0, 1/K] keeps
 * the update a contraction (the paper's stability condition); every >= 0. */
pd_status pd__avg_create(pd_graph *const *g, int K, const pd_plan *plan, const pd_train_options *o,
                         pd__sched_kind kind, int microbatches, double alpha, int every, pd__avg **out);
/* Under mpirun: this process (rank of size) runs one stage replica of one of
 * the K pipelines (pipeline rank / P, P = the plan's processes), on g; the
 * elastic update sums across the processes holding the same stage of every
 * pipeline. pd__avg_run then takes this pipeline's data only (inputs[0],
 * labels[0]) and gives every pipeline's losses (per_pipe) and their mean.
 * After training, pd__avg_gather puts the centre of every stage into every
 * process's graph (collective). */
pd_status pd__avg_create_mpi(pd_graph *g, int K, const pd_plan *plan, const pd_train_options *o, pd__sched_kind kind,
                             int microbatches, double alpha, int every, int rank, int size, pd__avg **out);
pd_status pd__avg_gather(pd__avg *a);
/* The pipeline this process runs (under MPI; 0 otherwise). */
int pd__avg_mine(const pd__avg *a);

/* Writes the centre into every pipeline's weights and destroys the pipelines
 * (their graphs keep the centre). Accepts NULL. */
void pd__avg_destroy(pd__avg *a);
int pd__avg_pipelines(const pd__avg *a);
/* The pipeline i (for statistics, traces). */
struct pd__pipe *pd__avg_pipe(pd__avg *a, int i);

/* Trains `steps` steps; in each, pipeline i runs one minibatch of its own
 * stream: inputs[i] (graph input order, as pd__pipe_run) and labels[i], each
 * holding steps * microbatches * batch rows. The pipelines run concurrently,
 * a thread each, and meet every `every` steps for the elastic update (counted
 * across runs). results (may be NULL): steps entries, the loss the mean of
 * the K pipelines' losses of that step, lr the update's; per_pipe (may be
 * NULL): K * steps entries, pipeline i's step t at [i * steps + t].
 * An error in a pipeline ends the run once the others finish their steps up
 * to the next elastic update (the message names the pipeline); updates
 * already made stay made. */
/* Steps done by earlier runs and, during a run, by its earlier rounds: a
 * ring's fill (pd__pipe_set_ring on each pipeline) adds it to the step it is
 * asked for, which counts from the round's start. Under a ring each
 * pipeline's inputs and labels are the ring's, not the run's rows. */
int64_t pd__avg_steps(const pd__avg *a);
pd_status pd__avg_run(pd__avg *a, int64_t steps, const pd_tensor *const *inputs, const pd_tensor *labels,
                      pd_step_result *results, pd_step_result *per_pipe);

/* The centre (n floats, the session's parameter layout), after the last run:
 * with averaging disabled, the pipelines' current mean. Borrowed. */
const float *pd__avg_centre(pd__avg *a, int64_t *n);
/* Elastic updates made so far; wall time of the last run. */
int64_t pd__avg_updates(const pd__avg *a);
double pd__avg_last_run_ms(const pd__avg *a);

#endif
