/* train_avgpipe.h - `pdonnx train --parallel-pipelines K`: AvgPipe's K
 * pipelines with elastic averaging (tools/train_avgpipe.c), hooked into
 * `pdonnx train` (tools/train.c) at two points: its flags are taken out of
 * argv before train parses the rest, and it replaces the single pipeline's
 * run when given. */
#ifndef PD_TRAIN_AVGPIPE_H
#define PD_TRAIN_AVGPIPE_H

#include "../core/plan.h"
#include "../runtime/data.h"

#include <stdio.h>

typedef struct pd_cli_avg_args {
    bool given;      /* any of the flags */
    int64_t K;       /* --parallel-pipelines (1) */
    double alpha;    /* --elastic-alpha (0.9/K when not given: EASGD's beta = K alpha = 0.9) */
    int64_t every;   /* --average-every (1) */
    bool alpha_given;
} pd_cli_avg_args;

/* Takes --parallel-pipelines K, --elastic-alpha A and --average-every N out
 * of argv (argc updated); 0, or 2 after a usage error. */
int pd_cli_avg_take_flags(int *argc, char **argv, pd_cli_avg_args *av);

/* What `pdonnx train` has parsed and loaded, for the K pipelines. */
typedef struct pd_cli_avg_ctx {
    const char *model, *plan;   /* plan: --plan FILE or NULL (then profiled and planned as --stages) */
    int stages, microbatches;   /* per pipeline */
    int64_t batch, steps;       /* rows per minibatch; steps of each pipeline */
    const pd_train_options *o;
    pd__sched_kind kind;
    bool quiet;
    const char *trace;          /* pipeline 0's Chrome trace */
    pd_graph *g;                /* pipeline 0's graph (batch: one microbatch); keeps the centre */
    const pd_load_options *lo;  /* how g was loaded (the copies and the profile's fit load it again) */
    const char *input;          /* the data input's name */
    const pd_tensor *X, *Y;
    pd__data *data;             /* the stream: pipeline i takes minibatches t*K + i */
    FILE *mf;                   /* metrics (may be NULL) */
    int rank, size;             /* under mpirun: this process and the job's (size 1: one process) */
    bool (*agree)(bool ok);     /* under mpirun: every process ready to train (false: one is not) */
    bool recompute;             /* --recompute: every pipeline recomputes activations (or the plan's own flag) */
} pd_cli_avg_ctx;

/* Trains; g gets the centre. 0, or 1 after printing the error. */
int pd_cli_train_avgpipe(const pd_cli_avg_args *av, const pd_cli_avg_ctx *c);

#endif
