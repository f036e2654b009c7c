/* ckpt.h - `pdonnx train`'s checkpoints (tools/ckpt.c): when to take them
 * (every N steps, or CheckFreq's `auto`), the writer, resume checks, and
 * `pdonnx export`. */
#ifndef PD_CLI_CKPT_H
#define PD_CLI_CKPT_H

#include "../runtime/checkpoint.h"
#include "../runtime/pipeline.h"

#include <cjson/cJSON.h>

typedef struct pd_cli_ckpt_opts {
    const char *dir;    /* --checkpoint-dir */
    int64_t every;      /* --checkpoint-every N; -1: auto; 0: none */
    int keep;           /* --checkpoint-keep (0: all) */
    double overhead;    /* --checkpoint-overhead: auto's bound on the pause, a fraction of training time */
    bool quiet;
    int processes;      /* under MPI: the job's processes (each writes its stages' parts); 0 or 1: one */
    int rank;           /* ... this one's; rank 0 writes the manifests */
    int parts;          /* ... and the parts of a checkpoint (the plan's stages) */
} pd_cli_ckpt_opts;

typedef struct pd_cli_ckpt pd_cli_ckpt;

/* info: the run (a JSON object, taken over): what resume checks and export reads.
 * first: the step training starts from (a resume's). */
pd_status pd_cli_ckpt_start(const pd_cli_ckpt_opts *o, cJSON *info, int64_t first, pd_cli_ckpt **out);
/* Pipeline training: snapshots at the boundaries chosen, taken by the
 * pipeline's workers. progress(ctx, b), when given, runs before snapshot b
 * is handed to the writer (on a worker thread): every step before b is done,
 * so that the metrics up to b can be written before the checkpoint is. */
pd_status pd_cli_ckpt_attach(pd_cli_ckpt *c, pd__pipe *p, void (*progress)(void *ctx, int64_t b), void *ctx);
/* One stage: after step `step` (1-based) took step_ms; snapshots the session when one is due. */
pd_status pd_cli_ckpt_session(pd_cli_ckpt *c, pd_session *s, int64_t step, double step_ms);
/* The state at the end of training, as the last checkpoint (p or s). */
pd_status pd_cli_ckpt_final(pd_cli_ckpt *c, pd__pipe *p, pd_session *s, int64_t step);
/* Waits for the writer; prints what checkpointing cost (unless quiet); frees c.
 * train_s: the training time the pause is a fraction of. */
pd_status pd_cli_ckpt_finish(pd_cli_ckpt *c, double train_s);
/* The run failed (before pd_cli_ckpt_finish): a checkpoint waiting for
 * another process's part, which may never come, fails at once. */
void pd_cli_ckpt_cancel(pd_cli_ckpt *c);

/* --resume DIR: the newest valid checkpoint (a skipped one is reported on
 * stderr); its info must match `expect` in every field resume depends on,
 * or the error names the field and both values. *info: its info (caller
 * deletes). */
pd_status pd_cli_ckpt_load(const char *dir, const cJSON *expect, pd__ckpt *out, cJSON **info);

int pd_cli_export(int argc, char **argv);

#endif
