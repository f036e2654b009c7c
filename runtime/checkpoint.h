/* checkpoint.h - private: checkpoints, CheckFreq-style (runtime/checkpoint.c,
 * docs/CHECKPOINT.md). A snapshot is one part per stage, each a run of
 * self-describing records named by graph tensor (weights, optimizer state,
 * stashed versions, BatchNorm statistics, counters); taking one is a copy to
 * host memory, and a writer thread persists it. */
#ifndef PD_CHECKPOINT_H
#define PD_CHECKPOINT_H

#include "../core/pd_internal.h"

enum {
    PD_REC_WEIGHT = 1, /* a trained parameter's live value (version: its id) */
    PD_REC_STATE0,     /* the optimizer's first state (momentum, Adam's m) */
    PD_REC_STATE1,     /* the second (Adam's v) */
    PD_REC_STASH,      /* a parameter's value in an older weight version still needed */
    PD_REC_BUFFER,     /* a tensor a training forward writes (BatchNorm running statistics) */
    PD_REC_META        /* a counter: "updates" (int64), "live" (version: the live version of virtual stage `name`'s suffix) */
};

typedef struct pd__rec {
    uint32_t kind;
    int32_t version;
    const char *name; /* not NUL-terminated: name_len bytes */
    uint32_t name_len;
    const void *data;
    uint64_t bytes;
} pd__rec;

/* Appends a record at w->n when it fits in w->cap (buf NULL: only counts). */
typedef struct pd__recw {
    char *buf;
    size_t n, cap;
} pd__recw;
void pd__rec_put(pd__recw *w, uint32_t kind, int32_t version, const char *name, const void *data, uint64_t bytes);
/* The record at *off (advanced past it); *end true at the end of the part.
 * A truncated or malformed record is PD_ERR_PARSE naming `what`. */
pd_status pd__rec_next(const void *buf, size_t len, size_t *off, pd__rec *r, bool *end, const char *what);
bool pd__rec_is(const pd__rec *r, const char *name);

enum {
    PD_CKPT_VERSION = 2,      /* the manifest's: 2 adds "checksum"; 1 is still read (pd__ckpt_read) */
    PD_CKPT_MAX_PARTS = 1024  /* parts a manifest may list */
};
#define PD_CKPT_MAX_INT ((int64_t)1 << 53) /* the largest step or size a manifest holds (exact as a double) */

/* A checkpoint on disk: DIR/ckpt-<step>/{part-<i>.bin, manifest.json}. info:
 * the caller's JSON object (the run: model, plan, schedule, options), kept in
 * the manifest. keep > 0: only the newest `keep` checkpoints stay. */
pd_status pd__ckpt_write(const char *dir, int64_t step, const char *info_json, int nparts, const void *const *parts,
                         const size_t *lens, int keep);

typedef struct pd__ckpt {
    char *path;      /* DIR/ckpt-<step> */
    int64_t step;
    char *info_json; /* the manifest's "info" */
    int nparts;
    void **parts;    /* NULL each after pd__ckpt_open: pd__ckpt_part_stream reads one */
    size_t *lens;
    uint32_t *crcs;  /* the manifest's CRC-32 of each part */
} pd__ckpt;
/* The newest valid checkpoint of dir (pd__ckpt_read); each one skipped is
 * reported through warn (a line naming it and what is wrong). PD_ERR_IO
 * when there is none. */
pd_status pd__ckpt_read_latest(const char *dir, pd__ckpt *out, void (*warn)(void *ctx, const char *msg), void *ctx);
/* One checkpoint folder (DIR/ckpt-<step>), valid when: its manifest's
 * checksum matches (version 2; a version-1 manifest has none and is read
 * only in a folder named ckpt-<step>), its numbers are integers in range,
 * it lists 1 to PD_CKPT_MAX_PARTS files named part-0.bin, part-1.bin, ...,
 * its step is the folder name's (when that is ckpt-<step>) and every
 * part's "updates" record's, and every part has the listed size and CRC-32.
 * Otherwise PD_ERR_PARSE (PD_ERR_IO, PD_ERR_NOMEM) naming the file. */
pd_status pd__ckpt_read(const char *path, pd__ckpt *out);
/* pd__ckpt_read and pd__ckpt_read_latest with every check, but holding no
 * part: each is read in chunks of 1 MiB (pdonnx export streams a model
 * bigger than memory); parts stay NULL. */
pd_status pd__ckpt_open(const char *path, pd__ckpt *out);
pd_status pd__ckpt_open_latest(const char *dir, pd__ckpt *out, void (*warn)(void *ctx, const char *msg), void *ctx);
/* Part i of an opened checkpoint streamed record by record: fn gets each
 * (r->data NULL; name NUL-terminated) but the "updates" counter, and may
 * read the record's data, in order, through pd__ckpt_stream_read (what it
 * leaves is read past). Every byte is read once; the size, CRC-32 and step
 * are checked again (PD_ERR_PARSE naming the file when it changed since it
 * was opened: the caller discards what fn made). */
typedef struct pd__ckpt_stream pd__ckpt_stream;
typedef pd_status (*pd__ckpt_rec_fn)(void *ctx, const pd__rec *r, pd__ckpt_stream *s);
pd_status pd__ckpt_part_stream(const pd__ckpt *c, int i, pd__ckpt_rec_fn fn, void *ctx);
pd_status pd__ckpt_stream_read(pd__ckpt_stream *s, void *buf, size_t n);
/* pd__ckpt_read from memory: text (len bytes) is the manifest of folder
 * path, get(ctx, "<path>/part-<i>.bin", ...) gives each part (a PD_MALLOC'd
 * buffer, then the checkpoint's). What the fuzzer calls. */
typedef pd_status (*pd__ckpt_get_fn)(void *ctx, const char *path, unsigned char **data, size_t *len);
pd_status pd__ckpt_parse(const char *path, const void *text, size_t len, pd__ckpt_get_fn get, void *ctx,
                         pd__ckpt *out);
void pd__ckpt_free(pd__ckpt *c);

/* One checkpoint written by several processes (MPI, on a file system they
 * share): each writes its parts into DIR/.ckpt-<step>.tmp-shared, each part
 * followed by a small file with its size and CRC-32; one process waits for
 * all nparts of them (timeout_s), writes the manifest and renames the folder
 * into place. */
pd_status pd__ckpt_write_part(const char *dir, int64_t step, int index, const void *data, size_t len);
pd_status pd__ckpt_finalize(const char *dir, int64_t step, const char *info_json, int nparts, int keep,
                            double timeout_s);

/* Resume checks: the first field of `expect` (a run's info object) that
 * `got` (the checkpoint's) does not hold with the same value, the fields
 * named in skip (NULL-terminated) aside; NULL when they all match. was and
 * now (n bytes each) receive the checkpoint's value and the expected one as
 * text. */
struct cJSON;
/* A manifest's checksum: the CRC-32 of m's compact text (false: out of
 * memory). The writer takes it before adding "checksum", the reader after
 * taking it out. */
bool pd__ckpt_manifest_crc(const struct cJSON *m, uint32_t *crc);
/* A JSON number that is an integer in [lo, hi] (within 2^53) into *out:
 * false for anything else (NaN, 1e300, 1.5, a string), converting nothing
 * out of range. */
bool pd__ckpt_json_int(const struct cJSON *v, int64_t lo, int64_t hi, int64_t *out);
const char *pd__ckpt_info_diff(const struct cJSON *expect, const struct cJSON *got, const char *const *skip, char *was,
                               char *now, size_t n);

/* The background writer: one snapshot persisted at a time. */
typedef struct pd__ckpt_writer pd__ckpt_writer;
pd_status pd__ckpt_writer_start(const char *dir, int keep, pd__ckpt_writer **out);
/* For one process of several: checkpoints of nparts parts, of which a
 * submission gives this process's (the others NULL); `final`: this process
 * writes the manifests (and clears a killed writer's leftovers at start). */
pd_status pd__ckpt_writer_start_dist(const char *dir, int keep, int nparts, bool final, pd__ckpt_writer **out);
/* Hands a snapshot over and returns at once; the parts stay the caller's and
 * are read until release(ctx) is called (from the writer thread). info_json
 * is copied. A snapshot submitted while one is being written waits its turn. */
void pd__ckpt_writer_submit(pd__ckpt_writer *w, int64_t step, const char *info_json, int nparts,
                            const void *const *parts, const size_t *lens, void (*release)(void *ctx), void *ctx);
/* Statistics so far: checkpoints written, milliseconds the last one took to persist. */
void pd__ckpt_writer_stats(pd__ckpt_writer *w, int64_t *written, double *last_persist_ms, int64_t *last_step);
/* The step of the last checkpoint the writer finished, written or failed (-1: none yet). */
int64_t pd__ckpt_writer_done(pd__ckpt_writer *w);
/* The run failed: a checkpoint still waiting for other processes' parts
 * (which may never come) fails at once instead of after its timeout. */
void pd__ckpt_writer_cancel(pd__ckpt_writer *w);
/* Under MPI (pd__pipe_watch_writer): stop(ctx), polled while waiting for
 * other processes' parts, ends the wait when the run failed elsewhere;
 * failed(ctx, msg), called from the writer thread on its first error, stops
 * the run on every process, which would otherwise wait for this process's
 * part (rank 0) or for a stage blocked behind the writer. */
void pd__ckpt_writer_watch(pd__ckpt_writer *w, bool (*stop)(void *ctx), void (*failed)(void *ctx, const char *msg),
                           void *ctx);
/* Waits until everything submitted is written (or failed). */
void pd__ckpt_writer_drain(pd__ckpt_writer *w);
/* Waits for what was submitted; the first error of any persist (its message
 * in pd_last_error), PD_OK otherwise. Then stops the thread and frees w. */
pd_status pd__ckpt_writer_finish(pd__ckpt_writer *w);

/* CheckFreq's frequency: the fewest steps between checkpoints that keeps
 * what one costs under `overhead` of the training time (step_ms per step).
 * The cost is the pause (snapshot_ms) plus the persist (persist_ms), counted
 * whole: the writer thread competes with training for cores and memory
 * bandwidth, and on a machine whose cores all train that is what it slows
 * training by (CheckFreq measures the same interference). Never shorter than
 * one persist, so a snapshot does not wait for the previous one. At least 1. */
int64_t pd__ckpt_auto_every(double step_ms, double snapshot_ms, double persist_ms, double overhead);

#endif
