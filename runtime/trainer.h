/* trainer.h - what `pdonnx train` reaches of a pd_trainer beyond the public
 * API (runtime/trainer.c). The CLI's pipeline is a trainer, made and checked
 * as pd_trainer_create makes one, trains with pd_trainer_set_ring and
 * pd_trainer_train and saves with pd_trainer_save (under mpirun: agreed,
 * gathered or per stage, as through the API); it reaches the pipeline
 * itself for what the public calls do not offer yet: checkpoints of its own
 * run description (runtime/ckpt_policy.h) and their resume (tools/ckpt.c),
 * the per-stage report and traces. */
#ifndef PD_TRAINER_H
#define PD_TRAINER_H

#include "../core/schedule.h"
#include "pipeline.h"

/* pd_trainer_create with the schedule already parsed (AvgPipe's schedule
 * runs as one pipeline here: pdonnx train --schedule avgpipe without
 * --parallel-pipelines); opt->schedule is not read. Under MPI (opt->mpi)
 * the processes agree on the trainer and take their ranks as
 * pd_trainer_create's do (an error is every process's, naming the lowest
 * failing rank), and the calls after are agreed as pd_trainer_create's. */
pd_status pd__trainer_create_kind(pd_graph *g, const pd_plan *plan, const pd_trainer_options *opt,
                                  pd__sched_kind kind, pd_trainer **out);
/* Checkpoints under PD_CHECKPOINT_AUTO go by these costs instead of the
 * measured ones (a test's closed-form values; from the next call on). */
pd_status pd__trainer_ckpt_costs(pd_trainer *t, double step_ms, double pause_ms, double persist_ms);
/* The trainer's pipeline (pd_trainer_destroy destroys it). */
pd__pipe *pd__trainer_pipe(pd_trainer *t);

#endif
