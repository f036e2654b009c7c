/* ckpt_policy.h - private: when a training run takes its checkpoints and
 * who writes them (runtime/ckpt_policy.c), for the public trainer
 * (pd_trainer_*, checkpoint_every) and `pdonnx train` alike: every N steps,
 * or CheckFreq's auto (one process, or agreed across MPI processes); the
 * pipeline's snapshot hooks or a one-stage session's snapshots; the writer
 * from start to finish; the final checkpoint; what it all cost. */
#ifndef PD_CKPT_POLICY_H
#define PD_CKPT_POLICY_H

#include "checkpoint.h"
#include "pipeline.h"

/* What auto measures, given instead (a test's closed-form values). */
typedef struct pd__ckpol_costs {
    double step_ms;    /* a training step */
    double pause_ms;   /* a snapshot's pause */
    double persist_ms; /* a checkpoint's persist */
} pd__ckpol_costs;

typedef struct pd__ckpol_opts {
    const char *dir;
    int64_t every;       /* N; -1 (PD_CHECKPOINT_AUTO): CheckFreq's auto; 0: only the final state */
    int keep;            /* the newest kept (0: all) */
    double overhead;     /* auto's bound on what checkpoints cost, a fraction of training time */
    int processes;       /* under MPI: the job's processes (each writes its stages' parts); 0 or 1: one */
    int rank;            /* ... this one's; rank 0 writes the manifests */
    int parts;           /* ... and the parts of a checkpoint (the plan's stages) */
    const pd__ckpol_costs *costs; /* NULL: measured */
} pd__ckpol_opts;

typedef struct pd__ckpol pd__ckpol;

/* info: the run's JSON text, in every manifest (copied). first: the step
 * training starts from (a resume's). */
pd_status pd__ckpol_start(const pd__ckpol_opts *o, const char *info, int64_t first, pd__ckpol **out);
/* Pipeline training: snapshots at the boundaries due, taken by the
 * pipeline's workers; boundary b of a run is step offset + b. progress(ctx,
 * step), when given, runs before that step's snapshot is handed to the
 * writer (on a worker thread): every step before it is done. */
pd_status pd__ckpol_attach(pd__ckpol *c, pd__pipe *p, int64_t offset, void (*progress)(void *ctx, int64_t step),
                           void *ctx);
/* One stage: after step `step` (1-based); snapshots the session when one is due. */
pd_status pd__ckpol_session(pd__ckpol *c, pd_session *s, int64_t step);
/* The state at the end of training, as the last checkpoint (of p or s),
 * unless the one at `step` was just taken. */
pd_status pd__ckpol_final(pd__ckpol *c, pd__pipe *p, pd_session *s, int64_t step);
/* The run failed: a checkpoint waiting for other processes' parts fails now. */
void pd__ckpol_cancel(pd__ckpol *c);
/* Waits for the writer (the first persist error, its message in
 * pd_last_error); summary (n bytes, may be NULL): what checkpointing cost,
 * train_s the training time the pauses are a fraction of; frees c. */
pd_status pd__ckpol_finish(pd__ckpol *c, double train_s, char *summary, size_t n);

#endif
