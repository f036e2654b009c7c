/* train_pipe.h - what `pdonnx train`'s pipeline runs share: the single
 * pipeline of tools/train.c and AvgPipe's K of tools/train_avgpipe.c.
 *
 * The plan: a --plan file checked against the model, or one planned now.
 * The data ring: the rows a pipeline trains on, read from the data stream a
 * few steps at a time into a ring its stages fill as they read
 * (pd__pipe_set_ring), so a run's rows are never copied whole. One ring per
 * pipeline; AvgPipe's pipeline i reads minibatch (done + k) K + i of the
 * stream at its step k (done: the steps of the rounds before, pd__avg_steps). */
#ifndef PD_CLI_TRAIN_PIPE_H
#define PD_CLI_TRAIN_PIPE_H

#include "../runtime/avgpipe.h"
#include "../runtime/data.h"
#include "../runtime/pipeline.h"

#include <pthread.h>

/* What a run's plan is made from. */
typedef struct pd_cli_plan_args {
    const char *plan;          /* --plan FILE, or NULL: profile and plan now */
    int stages, microbatches;  /* --stages, --microbatches */
    int chunks;                /* virtual stages per stage (interleaved; else 1) */
    int threads;               /* the profile's threads */
    const pd_train_options *o; /* the profile's optimizer and loss */
    /* The file g was loaded from and how (NULL: not measured again), and a
     * step's rows: with several microbatches the profile is measured at
     * those rows too, to fit each node's per-call cost (pd_profile_fit). */
    const char *model;
    const pd_load_options *lo;
    int64_t rows;
    bool quiet;                /* no note when the fit could not be made */
} pd_cli_plan_args;

/* The file's plan (its nodes must be g's), or PipeDream's planner on a
 * profile of g measured now, as a straight pipeline of stages x chunks
 * stages (virtual stage k on stage k % stages; cut evenly when the planner
 * finds fewer worth having). A profile fitted at a step's rows gives the
 * plan its per-call costs: its one worker runs the step as one call per
 * node, so its predicted speedup counts what microbatching costs. Not with
 * per-stage loading (lo->lazy_weights): the whole step's activations in
 * one process are what that mode avoids. A fit that fails (the model will
 * not load or run at the step's rows) leaves the plan without per-call
 * costs, after a note. */
pd_status pd_cli_pipe_plan(const pd_cli_plan_args *pa, pd_graph *g, pd_plan **out);

/* The model file g was loaded from, loaded again as lo says with g's input
 * shapes, their first dim (g's rows, batch) made `rows`. */
pd_status pd_cli_graph_at(const char *model, const pd_load_options *lo, const pd_graph *g, int64_t batch,
                          int64_t rows, pd_graph **out);

typedef struct pd_cli_ring {
    pd__data *data;
    int64_t batch;         /* rows per step */
    int stride, offset;    /* step k reads minibatch (done + k) stride + offset */
    const pd__avg *avg;    /* done: pd__avg_steps(avg), or 0 without one */
    pthread_mutex_t *mu;   /* pipelines sharing the stream fill one at a time (NULL: one pipeline) */
    size_t xrow, yrow;     /* bytes per row */
    char *x, *y;           /* the ring's rows */
} pd_cli_ring;

/* Allocates r's rows for a ring of `ring` steps (r's first five fields set
 * by the caller) and points the graph's inputs at them: ins[i] is the rows
 * of X for the data input named `input`, of Y for every other (the labels
 * input), *labels those of Y (under mpirun the caller agrees on the
 * status); pd_cli_ring_free in both cases. */
pd_status pd_cli_ring_open(pd_cli_ring *r, int ring, const pd_graph *g, const char *input, const pd_tensor *X,
                     const pd_tensor *Y, pd_tensor *ins, pd_tensor *labels);
/* The ring's fill (ctx: the pd_cli_ring), for pd_trainer_set_ring or
 * pd__pipe_set_ring: step `step` of the run into slot `slot`. */
pd_status pd_cli_ring_fill(void *ctx, int64_t step, int slot);
void pd_cli_ring_free(pd_cli_ring *r);

#endif
