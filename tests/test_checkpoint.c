/* test_checkpoint.c - snapshots of a running pipeline, resume, and
 * checkpoints on disk (runtime/pipeline.c, runtime/checkpoint.c).
 *
 * Exact resume: for every schedule (gpipe, flush, zb-h1, interleaved,
 * pipedream with and without vertical sync, 2bw) on 2-3 stages of the MLP
 * (Adam: optimizer state; pipedream and 2bw on 4 too, whose stage 1 holds
 * no weights), the CNN with BatchNorm (running statistics written
 * by forwards that run ahead under pipedream and 2bw; momentum) and the small
 * GPT: a run that snapshots at every boundary it may equals a run that takes
 * none, bitwise; and a fresh pipeline resumed from each snapshot gives the
 * same per-step losses after it and the same final weights and statistics,
 * bitwise. A snapshot of another plan, or cut short, is refused.
 * On disk: two-phase writes, keep-K pruning, a corrupted or truncated
 * checkpoint detected by its CRC-32 and the previous one used, leftovers of
 * a killed writer cleared; CheckFreq's frequency rule on hand-computed cases.
 * Hostile folders: clean-up never deletes through a link (a symlinked
 * checkpoint rewritten or rotated out, a symlinked temporary); a manifest
 * edited (its step, its info, its file list, with and without a matching
 * checksum), a FIFO for a part, an old version-1 manifest: each such
 * checkpoint skipped with a warning naming it, the previous one used.
 *
 * test_checkpoint --device cuda FIXTURES: the same snapshots and resumes
 * with every stage on GPU 0 (suite cuda; on the simulated device, suite
 * devsim): a snapshot pulls the stage's weights, optimizer state, stashes
 * and buffers from the device, a resume pushes them back; the same bitwise
 * equalities, a replicated stage's replicas (each on its own context, one
 * process) and --recompute included.
 * Exits 77 without a device.
 */
#include "../core/plan.h"
#include "../core/schedule.h"
#include "../runtime/checkpoint.h"
#ifdef PD_HAVE_CUDA
#include "../runtime/cuda/cuda.h"
#endif
#include "../runtime/data.h"
#include "../runtime/pipeline.h"
#include "check.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { BATCH = 8, MAXB = 64 };

static int rep0 = 1; /* replicas of stage 0 in the plans made */
static int recomp = 0; /* the plans' recompute (--recompute) */
static pd_device_kind device = PD_DEVICE_CPU; /* --device cuda: every stage on GPU 0 */

typedef struct store { /* every snapshot of a run, copied out */
    pd__pipe *p;
    int P;
    void *part[MAXB][8];
    size_t len[MAXB][8];
    bool have[MAXB];
    int n;
} store;

static bool want_all(void *ctx, int64_t b) {
    (void)ctx;
    (void)b;
    return true;
}

static void ready_copy(void *ctx, int64_t b) {
    store *s = ctx;
    for (int w = 0; w < s->P && b < MAXB; w++) {
        const void *d;
        size_t n;
        pd__pipe_snap_part(s->p, w, &d, &n);
        s->part[b][w] = malloc(n + 1);
        memcpy(s->part[b][w], d, n);
        s->len[b][w] = n;
    }
    if (b < MAXB && !s->have[b]) s->have[b] = true, s->n++;
    pd__pipe_snap_release(s->p);
}

static void store_free(store *s) {
    for (int b = 0; b < MAXB; b++)
        for (int w = 0; w < 8; w++) free(s->part[b][w]);
    memset(s, 0, sizeof *s);
}

typedef struct model {
    const char *name;
    pd_tensor xs, ys; /* the stream of every step */
    pd_train_options o;
    int steps;
} model;

static pd_status load(const char *fx, const char *name, int64_t batch, pd_graph **g) {
    char p[1200];
    pd_load_options lo = PD_LOAD_OPTIONS_INIT;
    lo.batch = batch;
    snprintf(p, sizeof p, "%s/%s/model.onnx", fx, name);
    return pd_graph_load_file(p, &lo, g);
}

static pd_status make_plan(pd_graph *g, int stages, int chunks, pd_plan **plan) {
    pd_profile *prof = NULL;
    pd_profile_options po = PD_PROFILE_OPTIONS_INIT;
    po.warmup = 0;
    po.repeats = 1;
    po.threads = 1;
    pd_status st = pd_profile_measure(g, &po, &prof);
    pd_plan_options o = PD_PLAN_OPTIONS_INIT;
    o.algo = "uniform";
    o.workers = stages * chunks;
    o.straight = 1;
    if (st == PD_OK) st = pd_plan_create(prof, &o, plan);
    if (st == PD_OK) (*plan)->chunks = chunks;
    if (st == PD_OK) (*plan)->stage[0].replicas = rep0;
    if (st == PD_OK) (*plan)->recompute = recomp;
    pd_profile_destroy(prof);
    return st;
}

/* The float initializers of g (trained weights and BatchNorm statistics), equal bitwise. */
static bool same_weights(const pd_graph *a, const pd_graph *b) {
    if (a->ntensors != b->ntensors) return false;
    for (int t = 0; t < a->ntensors; t++) {
        const pd__tensor *x = &a->tensors[t], *y = &b->tensors[t];
        if (x->kind != PD_T_INIT || x->dtype != PD_FLOAT) continue;
        if (memcmp(x->data, y->data, sizeof(float) * (size_t)x->numel) != 0) return false;
    }
    return true;
}

typedef struct run {
    pd_graph *g;
    pd_step_result res[MAXB];
    pd_status st;
} run;

/* One run of m->steps minibatches: with snapshots into s (NULL: none), or
 * resumed at boundary b from s. */
static void run_pipe(const char *fx, const model *m, pd__sched_kind kind, bool vsync, int P, int V, int M,
                     store *s, int64_t resume_b, const store *from, run *r) {
    memset(r, 0, sizeof *r);
    pd_plan *plan = NULL;
    pd__pipe *p = NULL;
    r->st = load(fx, m->name, BATCH / M, &r->g);
    if (r->st == PD_OK) r->st = make_plan(r->g, P, V, &plan);
    if (r->st == PD_OK) r->st = pd__pipe_create(r->g, plan, &m->o, kind, M, &p);
    if (r->st == PD_OK) r->st = pd__pipe_set_vertical_sync(p, vsync);
    if (r->st == PD_OK && s) {
        s->p = p;
        s->P = P;
        pd__snap_hooks h = {want_all, ready_copy, s};
        r->st = pd__pipe_set_snap_hooks(p, &h);
    }
    if (r->st == PD_OK && from)
        r->st = pd__pipe_resume(p, resume_b, P, (const void *const *)from->part[resume_b], from->len[resume_b]);
    pd_tensor ins[2] = {m->xs, m->ys};
    if (r->st == PD_OK) r->st = pd__pipe_run(p, m->steps, ins, &m->ys, r->res);
    pd__pipe_destroy(p);
    pd_plan_destroy(plan);
}

static void check_schedule(const char *fx, const model *m, pd__sched_kind kind, bool vsync, int P, int V, int M) {
    char what[160];
    snprintf(what, sizeof what, "%s, %s%s, %d stages%s%s%s, %d microbatches", m->name, pd__sched_kind_name(kind),
             vsync ? " (vertical sync)" : "", P, V > 1 ? " x 2 chunks" : "", rep0 > 1 ? " (stage 0 replicated)" : "",
             recomp ? " (recompute)" : "", M);
    store s;
    memset(&s, 0, sizeof s);
    run plain, snapped;
    run_pipe(fx, m, kind, vsync, P, V, M, NULL, 0, NULL, &plain);
    run_pipe(fx, m, kind, vsync, P, V, M, &s, 0, NULL, &snapped);
    CHECK(plain.st == PD_OK && snapped.st == PD_OK, "%s: runs%s%s", what, plain.st || snapped.st ? ": " : "",
          plain.st || snapped.st ? pd_last_error() : "");
    if (plain.st != PD_OK || snapped.st != PD_OK) goto out;
    int64_t gap = pd__sched_async(kind) ? P + 1 : 1, expect = (m->steps - 2) / gap + 1;
    CHECK(s.n == expect, "%s: %d snapshots taken, every %lld boundaries of %d steps: %lld", what, s.n,
          (long long)gap, m->steps, (long long)expect);
    CHECK(memcmp(plain.res, snapped.res, sizeof(pd_step_result) * (size_t)m->steps) == 0 &&
              same_weights(plain.g, snapped.g),
          "%s: taking snapshots changes nothing (losses and weights bitwise)", what);
    int ok = 0, tried = 0;
    for (int b = 1; b < m->steps; b++) {
        if (!s.have[b]) continue;
        run r;
        run_pipe(fx, m, kind, vsync, P, V, M, NULL, b, &s, &r);
        tried++;
        bool same = r.st == PD_OK && same_weights(plain.g, r.g);
        for (int k = b; same && k < m->steps; k++)
            same = memcmp(&r.res[k], &plain.res[k], sizeof r.res[k]) == 0;
        if (same) ok++;
        else
            printf("  resumed at %d: %s\n", b, r.st ? pd_last_error() : "differs");
        pd_graph_destroy(r.g);
    }
    CHECK(tried > 0 && ok == tried, "%s: resumed from each of %d snapshots, the rest of the run equals the "
          "uninterrupted one bitwise (%d did)", what, tried, ok);
out:
    pd_graph_destroy(plain.g);
    pd_graph_destroy(snapped.g);
    store_free(&s);
}

static bool load_model(const char *fx, model *m, const char *name, pd_optimizer_kind opt, double lr, int steps) {
    char p[1200];
    pd_tensor X = {0}, Y = {0};
    pd__data d = {0};
    memset(m, 0, sizeof *m);
    m->name = name;
    pd_train_options o = PD_TRAIN_OPTIONS_INIT;
    m->o = o;
    m->o.device = device;
    m->o.optimizer = opt;
    m->o.lr = lr;
    m->o.threads = 1;
    m->steps = steps;
    snprintf(p, sizeof p, "%s/%s/train/sgd/X.npy", fx, name);
    pd_status st = pd_npy_load(p, &X);
    snprintf(p, sizeof p, "%s/%s/train/sgd/Y.npy", fx, name);
    if (st == PD_OK) st = pd_npy_load(p, &Y);
    if (st == PD_OK) st = pd__data_init(&d, &X, &Y, BATCH, true, 7);
    CHECK(st == PD_OK, "%s: the training data loads", name);
    if (st != PD_OK) return false;
    m->xs = X;
    m->ys = Y;
    m->xs.shape[0] = m->ys.shape[0] = (int64_t)steps * BATCH;
    size_t xr = (size_t)(pd_tensor_numel(&X) / X.shape[0]) * pd_dtype_size(X.dtype);
    size_t yr = (size_t)(pd_tensor_numel(&Y) / Y.shape[0]) * pd_dtype_size(Y.dtype);
    m->xs.data = malloc(xr * (size_t)steps * BATCH);
    m->ys.data = malloc(yr * (size_t)steps * BATCH);
    for (int k = 0; k < steps; k++)
        pd__data_fill(&d, k, (char *)m->xs.data + xr * BATCH * (size_t)k, (char *)m->ys.data + yr * BATCH * (size_t)k);
    pd__data_free(&d);
    pd_tensor_free(&X);
    pd_tensor_free(&Y);
    return true;
}

static void free_model(model *m) {
    free(m->xs.data);
    free(m->ys.data);
}

/* A snapshot refused where it does not fit. */
static void check_refusals(const char *fx, const model *m) {
    store s;
    memset(&s, 0, sizeof s);
    run r;
    run_pipe(fx, m, PD_SCHED_FLUSH, false, 2, 1, 2, &s, 0, NULL, &r);
    pd_graph_destroy(r.g);
    CHECK(r.st == PD_OK && s.have[3], "refusals: a 2-stage flush run snapshots");
    if (!s.have[3]) return;
    /* into 3 stages */
    pd_graph *g = NULL;
    pd_plan *plan = NULL;
    pd__pipe *p = NULL;
    pd_status st = load(fx, m->name, BATCH / 2, &g);
    if (st == PD_OK) st = make_plan(g, 3, 1, &plan);
    if (st == PD_OK) st = pd__pipe_create(g, plan, &m->o, PD_SCHED_FLUSH, 2, &p);
    pd_status a = st == PD_OK ? pd__pipe_resume(p, 3, 2, (const void *const *)s.part[3], s.len[3]) : st;
    CHECK(a == PD_ERR_INVALID && strstr(pd_last_error(), "2 stages"), "refusals: 2 parts into 3 stages: %s",
          pd_last_error());
    const void *three[3] = {s.part[3][0], s.part[3][1], s.part[3][1]};
    size_t lens[3] = {s.len[3][0], s.len[3][1], s.len[3][1]};
    pd_status b = st == PD_OK ? pd__pipe_resume(p, 3, 3, three, lens) : st;
    CHECK(b == PD_ERR_INVALID && strstr(pd_last_error(), "does not own"), "refusals: another plan's part: %s",
          pd_last_error());
    pd__pipe_destroy(p);
    pd_plan_destroy(plan);
    pd_graph_destroy(g);
    /* the same plan, a part cut short or missing its last records */
    p = NULL;
    plan = NULL;
    g = NULL;
    st = load(fx, m->name, BATCH / 2, &g);
    if (st == PD_OK) st = make_plan(g, 2, 1, &plan);
    if (st == PD_OK) st = pd__pipe_create(g, plan, &m->o, PD_SCHED_FLUSH, 2, &p);
    size_t cut[2] = {s.len[3][0], s.len[3][1] - 5};
    pd_status c = st == PD_OK ? pd__pipe_resume(p, 3, 2, (const void *const *)s.part[3], cut) : st;
    CHECK(c == PD_ERR_PARSE && strstr(pd_last_error(), "stage 1"), "refusals: a part cut short: %s", pd_last_error());
    size_t off = 0, last = 0; /* stage 0's part without its last record */
    for (;;) {
        pd__rec r;
        bool end;
        size_t at = off;
        if (pd__rec_next(s.part[3][0], s.len[3][0], &off, &r, &end, "t") != PD_OK || end) break;
        last = at;
    }
    size_t less[2] = {last, s.len[3][1]};
    pd_status d = st == PD_OK ? pd__pipe_resume(p, 3, 2, (const void *const *)s.part[3], less) : st;
    CHECK(d == PD_ERR_INVALID && strstr(pd_last_error(), "incomplete"), "refusals: a part without its last "
          "record: %s", pd_last_error());
    pd_status e = st == PD_OK ? pd__pipe_resume(p, 3, 2, (const void *const *)s.part[3], s.len[3]) : st;
    pd_tensor ins[2] = {m->xs, m->ys};
    pd_status f = e == PD_OK ? pd__pipe_run(p, 3, ins, &m->ys, NULL) : e;
    CHECK(e == PD_OK && f == PD_ERR_INVALID && strstr(pd_last_error(), "resuming at step 3 of a run of 3"),
          "refusals: resuming at the run's end: %s", pd_last_error());
    pd__pipe_destroy(p);
    pd_plan_destroy(plan);
    pd_graph_destroy(g);
    store_free(&s);
}

static void warn_collect(void *ctx, const char *msg) {
    char *buf = ctx;
    strncat(buf, msg, 4000 - strlen(buf));
    strncat(buf, "\n", 4000 - strlen(buf));
}

/* pd__ckpt_part_stream's callback: "name=data;" appended to ctx (64 bytes) */
static pd_status collect_rec(void *ctx, const pd__rec *r, pd__ckpt_stream *s) {
    char *out = ctx, d[32] = "";
    if (r->bytes >= sizeof d) return PD_ERR_INTERNAL;
    PD_TRY(pd__ckpt_stream_read(s, d, (size_t)r->bytes));
    snprintf(out + strlen(out), 64 - strlen(out), "%s=%s;", r->name, d);
    return PD_OK;
}

static void check_disk(void) {
    char dir[] = "/tmp/pd_ckpt_test_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "disk: a temporary folder");
    /* parts are records (a reader checks them); a[AT] is the first byte of a's data */
    enum { AT = 20 + 1 };
    char a[64], b[64];
    pd__recw ra = {a, 0, sizeof a}, rb = {b, 0, sizeof b};
    pd__rec_put(&ra, PD_REC_WEIGHT, 0, "a", "stage zero's bytes", 18);
    pd__rec_put(&rb, PD_REC_WEIGHT, 0, "b", "stage one", 9);
    const void *parts[2] = {a, b};
    size_t lens[2] = {ra.n, rb.n};
    pd_status st = pd__ckpt_write(dir, 10, "{\"schedule\": \"flush\"}", 2, parts, lens, 2);
    a[AT] = 'S';
    if (st == PD_OK) st = pd__ckpt_write(dir, 20, "{\"schedule\": \"flush\"}", 2, parts, lens, 2);
    a[AT] = 'T';
    if (st == PD_OK) st = pd__ckpt_write(dir, 30, "{\"schedule\": \"flush\"}", 2, parts, lens, 2);
    CHECK(st == PD_OK, "disk: three checkpoints written%s%s", st ? ": " : "", st ? pd_last_error() : "");
    char p[512];
    struct stat sb;
    snprintf(p, sizeof p, "%s/ckpt-000000000010", dir);
    bool gone = stat(p, &sb) != 0;
    snprintf(p, sizeof p, "%s/ckpt-000000000020/manifest.json", dir);
    CHECK(gone && stat(p, &sb) == 0, "disk: keep 2 removed the oldest, kept the next");
    pd__ckpt c;
    char warns[4096] = "";
    st = pd__ckpt_read_latest(dir, &c, warn_collect, warns);
    CHECK(st == PD_OK && c.step == 30 && c.nparts == 2 && c.lens[0] == lens[0] && memcmp(c.parts[0], a, lens[0]) == 0 &&
              strstr(c.info_json, "flush") && !warns[0],
          "disk: the newest read back whole");
    if (st == PD_OK) pd__ckpt_free(&c);
    /* corrupt one byte of the newest: its checksum fails, step 20 is used */
    snprintf(p, sizeof p, "%s/ckpt-000000000030/part-1.bin", dir);
    FILE *f = fopen(p, "r+b");
    if (f) {
        fputc('X', f);
        fclose(f);
    }
    st = pd__ckpt_read_latest(dir, &c, warn_collect, warns);
    CHECK(st == PD_OK && c.step == 20 && ((char *)c.parts[0])[AT] == 'S' && strstr(warns, "checksum mismatch") &&
              strstr(warns, "ckpt-000000000030"),
          "disk: a corrupted checkpoint is reported and the previous one used: %s", warns);
    if (st == PD_OK) pd__ckpt_free(&c);
    /* truncate the older one too: nothing valid is left */
    snprintf(p, sizeof p, "%s/ckpt-000000000020/part-0.bin", dir);
    CHECK(truncate(p, 3) == 0, "disk: truncating a part");
    warns[0] = 0;
    st = pd__ckpt_read_latest(dir, &c, warn_collect, warns);
    CHECK(st == PD_ERR_IO && strstr(pd_last_error(), "no valid checkpoint") && strstr(warns, "truncated"),
          "disk: a truncated one is reported too, and with none valid left: %s", pd_last_error());
    /* a killed writer's temporary folder is cleared; a half-made one is never read */
    snprintf(p, sizeof p, "%s/.ckpt-000000000040.tmp-99", dir);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/ckpt-000000000050", dir); /* no manifest */
    mkdir(p, 0755);
    pd__ckpt_writer *w = NULL;
    st = pd__ckpt_writer_start(dir, 0, &w);
    snprintf(p, sizeof p, "%s/.ckpt-000000000040.tmp-99", dir);
    CHECK(st == PD_OK && stat(p, &sb) != 0, "disk: the writer clears a killed writer's leftovers");
    if (w) {
        a[AT] = 'U';
        pd__ckpt_writer_submit(w, 60, NULL, 2, parts, lens, NULL, NULL);
        st = pd__ckpt_writer_finish(w);
    }
    warns[0] = 0;
    pd_status r = pd__ckpt_read_latest(dir, &c, warn_collect, warns);
    CHECK(st == PD_OK && r == PD_OK && c.step == 60 && ((char *)c.parts[0])[AT] == 'U',
          "disk: the background writer persists a submitted snapshot");
    if (r == PD_OK) pd__ckpt_free(&c);
    pd__ckpt_free(&c);
    /* a write into a folder that cannot be created fails with the path */
    st = pd__ckpt_write("/proc/pd_no_such/dir", 1, NULL, 2, parts, lens, 0);
    CHECK(st == PD_ERR_IO && strstr(pd_last_error(), "/proc/pd_no_such"), "disk: an unwritable folder: %s",
          pd_last_error());
    /* written by several processes: each its parts, one the manifest once all are in */
    a[AT] = 'V';
    st = pd__ckpt_write_part(dir, 70, 1, b, lens[1]);
    if (st == PD_OK) st = pd__ckpt_write_part(dir, 70, 0, a, lens[0]);
    if (st == PD_OK) st = pd__ckpt_finalize(dir, 70, "{\"schedule\": \"flush\"}", 2, 0, 5);
    r = st == PD_OK ? pd__ckpt_read_latest(dir, &c, warn_collect, warns) : st;
    CHECK(r == PD_OK && c.step == 70 && c.nparts == 2 && ((char *)c.parts[0])[AT] == 'V' && c.lens[1] == lens[1] &&
              memcmp(c.parts[1], b, lens[1]) == 0,
          "disk: a checkpoint written part by part, then its manifest, reads back whole");
    if (r == PD_OK) pd__ckpt_free(&c);
    /* opened without its parts (pdonnx export's streaming): every check, no part held; each
     * streamed record by record as written, and refused naming it when it changed since */
    r = pd__ckpt_open_latest(dir, &c, warn_collect, warns);
    char got0[64] = "", got1[64] = "";
    pd_status r0 = r == PD_OK ? pd__ckpt_part_stream(&c, 0, collect_rec, got0) : r;
    pd_status r1 = r == PD_OK ? pd__ckpt_part_stream(&c, 1, collect_rec, got1) : r;
    CHECK(r == PD_OK && c.step == 70 && c.nparts == 2 && !c.parts[0] && !c.parts[1] && c.lens[1] == lens[1] &&
              r0 == PD_OK && !strcmp(got0, "a=Vtage zero's bytes;") && r1 == PD_OK && !strcmp(got1, "b=stage one;"),
          "disk: opened without its parts, each streamed back as written (%s %s)", got0, got1);
    snprintf(p, sizeof p, "%s/ckpt-000000000070/part-1.bin", dir);
    f = fopen(p, "r+b");
    if (f) fseek(f, AT, SEEK_SET), fputc('Y', f), fclose(f);
    got1[0] = 0;
    r1 = r == PD_OK ? pd__ckpt_part_stream(&c, 1, collect_rec, got1) : r;
    CHECK(r1 == PD_ERR_PARSE && strstr(pd_last_error(), "ckpt-000000000070/part-1.bin") &&
              strstr(pd_last_error(), "changed since"),
          "disk: a part changed after the checks is refused naming it: %s", pd_last_error());
    if (r == PD_OK) pd__ckpt_free(&c);
    warns[0] = 0;
    r = pd__ckpt_open_latest(dir, &c, warn_collect, warns);
    CHECK(r == PD_OK && c.step == 60 && strstr(warns, "ckpt-000000000070") && strstr(warns, "checksum mismatch"),
          "disk: opening checks every part as reading does (the changed one skipped): %s", warns);
    if (r == PD_OK) pd__ckpt_free(&c);
    st = pd__ckpt_write_part(dir, 80, 0, a, lens[0]); /* part 1 never comes */
    pd_status fz = st == PD_OK ? pd__ckpt_finalize(dir, 80, NULL, 2, 0, 0.05) : st;
    snprintf(p, sizeof p, "%s/ckpt-000000000080", dir);
    CHECK(fz == PD_ERR_IO && strstr(pd_last_error(), "part 1 never came") && stat(p, &sb) != 0,
          "disk: a part that never comes: no checkpoint, the wait ends (%s)", pd_last_error());
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "disk: cleaned up");
}

/* ---- hostile folders ---- */

static bool slurp(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = 0;
    return true;
}

static bool spit(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    bool ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok;
}

/* Checkpoint `step` of two parts of records, each with its "updates" record at `step`. */
static pd_status write_step(const char *dir, int64_t step, const char *info, int keep) {
    char a[128], b[128];
    pd__recw ra = {a, 0, sizeof a}, rb = {b, 0, sizeof b};
    float v[2] = {(float)step, 1};
    pd__rec_put(&ra, PD_REC_WEIGHT, 0, "w0", v, sizeof v);
    pd__rec_put(&ra, PD_REC_META, 0, "updates", &step, 8);
    pd__rec_put(&rb, PD_REC_WEIGHT, 0, "w1", v, sizeof v);
    pd__rec_put(&rb, PD_REC_META, 0, "updates", &step, 8);
    const void *parts[2] = {a, b};
    size_t lens[2] = {ra.n, rb.n};
    return pd__ckpt_write(dir, step, info, 2, parts, lens, keep);
}

/* The victim: a folder outside the checkpoints, holding files with the
 * names a writer uses and one of its own. */
static const char *const victim_files[] = {"part-0.bin", "part-0.json", "manifest.json", "manifest.json.tmp.1",
                                           "notes.txt", NULL};

static void make_victim(const char *v) {
    char p[600];
    for (int i = 0; victim_files[i]; i++) {
        snprintf(p, sizeof p, "%s/%s", v, victim_files[i]);
        spit(p, victim_files[i]);
    }
}

static bool victim_whole(const char *v) {
    char p[600], got[64];
    for (int i = 0; victim_files[i]; i++) {
        snprintf(p, sizeof p, "%s/%s", v, victim_files[i]);
        if (!slurp(p, got, sizeof got) || strcmp(got, victim_files[i]) != 0) return false;
    }
    return true;
}

static bool is_link(const char *path) {
    struct stat sb;
    return lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode);
}

static bool exists(const char *path) {
    struct stat sb;
    return lstat(path, &sb) == 0;
}

static void check_cleanup(void) {
    char dir[] = "/tmp/pd_ckpt_links_XXXXXX", victim[] = "/tmp/pd_ckpt_victim_XXXXXX";
    CHECK(mkdtemp(dir) && mkdtemp(victim), "links: temporary folders");
    make_victim(victim);
    char p[600], q[600];
    /* a checkpoint rewritten (a resumed run passes its step again) that is a link */
    snprintf(p, sizeof p, "%s/ckpt-000000000010", dir);
    CHECK(symlink(victim, p) == 0, "links: ckpt-10 a link to a folder outside");
    pd_status st = write_step(dir, 10, NULL, 0);
    pd__ckpt c;
    pd_status r = pd__ckpt_read(p, &c);
    CHECK(st == PD_OK && victim_whole(victim) && !is_link(p) && r == PD_OK && c.step == 10,
          "links: rewriting a symlinked ckpt-10 replaces the link, the folder it named is untouched%s%s",
          st ? ": " : "", st ? pd_last_error() : "");
    if (r == PD_OK) pd__ckpt_free(&c);
    /* one rotated out by keep */
    snprintf(p, sizeof p, "%s/ckpt-000000000005", dir);
    CHECK(symlink(victim, p) == 0, "links: ckpt-5 a link");
    st = write_step(dir, 20, NULL, 2);
    CHECK(st == PD_OK && victim_whole(victim) && !exists(p),
          "links: keep 2 rotates a symlinked ckpt-5 out by unlinking the link, the folder it named untouched");
    /* a real folder rotated out: only the writer's regular files go; a
     * foreign file, and a link named like a part, stay (so does the folder) */
    snprintf(p, sizeof p, "%s/ckpt-000000000001", dir);
    mkdir(p, 0755);
    snprintf(q, sizeof q, "%s/manifest.json", p);
    spit(q, "{}");
    snprintf(q, sizeof q, "%s/notes.txt", p);
    spit(q, "mine");
    char target[600];
    snprintf(target, sizeof target, "%s/part-0.bin", victim);
    snprintf(q, sizeof q, "%s/part-0.bin", p);
    CHECK(symlink(target, q) == 0, "links: a part that is a link");
    st = write_step(dir, 30, NULL, 2);
    snprintf(q, sizeof q, "%s/notes.txt", p);
    bool foreign = exists(q);
    snprintf(q, sizeof q, "%s/manifest.json", p);
    CHECK(st == PD_OK && victim_whole(victim) && foreign && !exists(q),
          "links: a rotated folder loses only the writer's regular files; a foreign file and a link stay");
    /* temporaries: a stale one cleared at start, and this process's own */
    snprintf(p, sizeof p, "%s/.ckpt-000000000003.tmp-77", dir);
    CHECK(symlink(victim, p) == 0, "links: a stale temporary that is a link");
    pd__ckpt_writer *w = NULL;
    st = pd__ckpt_writer_start(dir, 0, &w);
    if (w) pd__ckpt_writer_finish(w);
    CHECK(st == PD_OK && victim_whole(victim) && !exists(p),
          "links: the writer clears a symlinked temporary by unlinking it, the folder it named untouched");
    snprintf(p, sizeof p, "%s/.ckpt-000000000040.tmp-%ld", dir, (long)getpid());
    CHECK(symlink(victim, p) == 0, "links: this writer's own temporary a link");
    st = write_step(dir, 40, NULL, 0);
    snprintf(q, sizeof q, "%s/ckpt-000000000040/manifest.json", dir);
    CHECK(st == PD_OK && victim_whole(victim) && exists(q) && !exists(p),
          "links: a symlinked temporary of this writer's is replaced by a folder of its own");
    /* the shared temporary of several processes: refused, nothing written through it */
    snprintf(p, sizeof p, "%s/.ckpt-000000000050.tmp-shared", dir);
    CHECK(symlink(victim, p) == 0, "links: a shared temporary that is a link");
    st = pd__ckpt_write_part(dir, 50, 3, "x", 1);
    snprintf(q, sizeof q, "%s/part-3.bin", victim);
    CHECK(st == PD_ERR_IO && strstr(pd_last_error(), "tmp-shared") && !exists(q) && victim_whole(victim),
          "links: a part is not written through a symlinked shared temporary (%s)", pd_last_error());
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", dir, victim);
    CHECK(system(cmd) == 0, "links: cleaned up");
}

/* Rewrites path's manifest with `edit` applied to it and, when resum, the
 * checksum made to match again (a manifest that lies consistently). */
static bool edit_manifest(const char *ck, void (*edit)(cJSON *m), bool resum) {
    char f[600], text[1 << 16];
    snprintf(f, sizeof f, "%s/manifest.json", ck);
    if (!slurp(f, text, sizeof text)) return false;
    cJSON *m = cJSON_Parse(text);
    if (!m) return false;
    edit(m);
    if (resum) {
        uint32_t crc;
        cJSON_DeleteItemFromObjectCaseSensitive(m, "checksum");
        pd__ckpt_manifest_crc(m, &crc);
        cJSON_AddNumberToObject(m, "checksum", crc);
    }
    char *out = cJSON_Print(m);
    bool ok = out && spit(f, out);
    free(out);
    cJSON_Delete(m);
    return ok;
}

static void set_step(cJSON *m, double v) { cJSON_ReplaceItemInObjectCaseSensitive(m, "step", cJSON_CreateNumber(v)); }
static void step_20(cJSON *m) { set_step(m, 20); }
static void step_40(cJSON *m) { set_step(m, 40); }
static void step_neg(cJSON *m) { set_step(m, -7); }
static void step_huge(cJSON *m) { set_step(m, 1e300); }
static void step_frac(cJSON *m) { set_step(m, 29.5); }
static void step_text(cJSON *m) { cJSON_ReplaceItemInObjectCaseSensitive(m, "step", cJSON_CreateString("30")); }
static void info_steps(cJSON *m) {
    cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetObjectItem(m, "info"), "steps", cJSON_CreateNumber(401));
}
static void info_rename(cJSON *m) {
    cJSON *info = cJSON_GetObjectItem(m, "info");
    cJSON_AddItemToObject(info, "schedulf", cJSON_DetachItemFromObjectCaseSensitive(info, "schedule"));
}
static void files_empty(cJSON *m) { cJSON_ReplaceItemInObjectCaseSensitive(m, "files", cJSON_CreateArray()); }
static void files_many(cJSON *m) {
    cJSON *files = cJSON_GetObjectItem(m, "files");
    for (int i = 0; i < 2000; i++) cJSON_AddItemToArray(files, cJSON_Duplicate(cJSON_GetArrayItem(files, 0), true));
}
static void files_name(cJSON *m) {
    cJSON *e = cJSON_GetArrayItem(cJSON_GetObjectItem(m, "files"), 0);
    cJSON_ReplaceItemInObjectCaseSensitive(e, "name", cJSON_CreateString("../part-0.bin"));
}
static void files_bytes(cJSON *m) {
    cJSON *e = cJSON_GetArrayItem(cJSON_GetObjectItem(m, "files"), 0);
    cJSON_ReplaceItemInObjectCaseSensitive(e, "bytes", cJSON_CreateNumber(1e300));
}
static void version_1(cJSON *m) {
    cJSON_ReplaceItemInObjectCaseSensitive(m, "version", cJSON_CreateNumber(1));
    cJSON_DeleteItemFromObjectCaseSensitive(m, "checksum");
}
static void version_1_step(cJSON *m) {
    version_1(m);
    step_20(m);
}
static void version_3(cJSON *m) { cJSON_ReplaceItemInObjectCaseSensitive(m, "version", cJSON_CreateNumber(3)); }

static void check_manifest(void) {
    char dir[] = "/tmp/pd_ckpt_manifest_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "manifest: a temporary folder");
    /* numbers cJSON prints in few digits, text to escape: the checksum survives the round trip */
    const char *info = "{\"schedule\": \"flush\", \"steps\": 400, \"lr\": 0.30000000000000004, \"tiny\": 1e-7, "
                       "\"big\": 1e300, \"long\": 123456789012345678, \"neg\": -0.0, \"text\": \"\\u00e9\\\"\\\\\\n\"}";
    pd_status st = PD_OK;
    for (int64_t s = 10; s <= 30 && st == PD_OK; s += 10) st = write_step(dir, s, info, 0);
    pd__ckpt c;
    char warns[4096] = "", ck[600], text[1 << 16], saved[1 << 16], f[700];
    pd_status r = st == PD_OK ? pd__ckpt_read_latest(dir, &c, warn_collect, warns) : st;
    CHECK(r == PD_OK && c.step == 30 && !warns[0] && strstr(c.info_json, "0.3") && strstr(c.info_json, "1e+300"),
          "manifest: written with its checksum, read back (awkward numbers and text in info)%s%s", r ? ": " : "",
          r ? pd_last_error() : warns);
    if (r == PD_OK) pd__ckpt_free(&c);
    snprintf(ck, sizeof ck, "%s/ckpt-000000000030", dir);
    snprintf(f, sizeof f, "%s/manifest.json", ck);
    CHECK(slurp(f, saved, sizeof saved) && strstr(saved, "\"version\":\t2") && strstr(saved, "\"checksum\":"),
          "manifest: version 2, with a checksum");
    /* each edit of ckpt-30's manifest: it is skipped with a warning naming it and why, ckpt-20 used */
    static const struct {
        const char *what;
        void (*edit)(cJSON *m);
        bool resum;
        const char *why;
    } cases[] = {
        {"step 30 -> 20", step_20, false, "checksum mismatch"},
        {"step 30 -> -7", step_neg, false, "checksum mismatch"},
        {"step 30 -> 1e300", step_huge, false, "checksum mismatch"},
        {"info's steps 400 -> 401", info_steps, false, "checksum mismatch"},
        {"a key of info renamed", info_rename, false, "checksum mismatch"},
        {"an empty file list", files_empty, false, "checksum mismatch"},
        {"2002 files", files_many, false, "checksum mismatch"},
        {"step 30 -> 20, checksum matching", step_20, true, "but the folder is step 30's"},
        {"step 30 -> -7, checksum matching", step_neg, true, "not an integer"},
        {"step 30 -> 1e300, checksum matching", step_huge, true, "not an integer"},
        {"step 30 -> 29.5, checksum matching", step_frac, true, "not an integer"},
        {"step 30 -> \"30\", checksum matching", step_text, true, "not an integer"},
        {"an empty file list, checksum matching", files_empty, true, "0 files listed"},
        {"2002 files, checksum matching", files_many, true, "2002 files listed"},
        {"a file named ../part-0.bin, checksum matching", files_name, true, "file entry 0 is malformed"},
        {"a file of 1e300 bytes, checksum matching", files_bytes, true, "file entry 0 is malformed"},
        {"version 1 (no checksum) with step 30 -> 20", version_1_step, false, "but the folder is step 30's"},
        {"version 3", version_3, true, "version 3, not one this build reads"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        spit(f, saved);
        bool edited = edit_manifest(ck, cases[i].edit, cases[i].resum);
        warns[0] = 0;
        r = pd__ckpt_read_latest(dir, &c, warn_collect, warns);
        CHECK(edited && r == PD_OK && c.step == 20 && strstr(warns, "skipping") && strstr(warns, "ckpt-000000000030") &&
                  strstr(warns, cases[i].why),
              "manifest: %s: skipped, the one before used: %s", cases[i].what, r ? pd_last_error() : warns);
        if (r == PD_OK) pd__ckpt_free(&c);
    }
    /* an older version-1 manifest whose step is its folder's is still read */
    spit(f, saved);
    edit_manifest(ck, version_1, false);
    r = pd__ckpt_read_latest(dir, &c, warn_collect, warns);
    CHECK(r == PD_OK && c.step == 30 && c.nparts == 2, "manifest: a version-1 manifest in ckpt-<its step> is read");
    if (r == PD_OK) pd__ckpt_free(&c);
    /* a copy of a checkpoint in a folder of another name (pdonnx export DIR/copy):
     * version 2 is read on its checksum, version 1 has nothing to vouch for its step */
    char copy[700], cmd[2000];
    snprintf(copy, sizeof copy, "%s/copy", dir);
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s'", ck, copy);
    bool copied = system(cmd) == 0;
    r = pd__ckpt_read(copy, &c);
    CHECK(copied && r == PD_ERR_PARSE && strstr(pd_last_error(), "version-1 manifest"),
          "manifest: version 1 in a folder of another name: refused (%s)", pd_last_error());
    spit(f, saved);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s/manifest.json'", f, copy);
    r = system(cmd) == 0 ? pd__ckpt_read(copy, &c) : PD_ERR_IO;
    CHECK(r == PD_OK && c.step == 30, "manifest: version 2 in a folder of another name: read");
    if (r == PD_OK) pd__ckpt_free(&c);
    /* a checkpoint moved to another step's name, its manifest made to agree: the parts' records say otherwise */
    char moved[700];
    snprintf(moved, sizeof moved, "%s/ckpt-000000000040", dir);
    bool ren = rename(ck, moved) == 0 && edit_manifest(moved, step_40, true);
    warns[0] = 0;
    r = pd__ckpt_read_latest(dir, &c, warn_collect, warns);
    CHECK(ren && r == PD_OK && c.step == 20 &&
              strstr(warns, "ckpt-000000000040/part-0.bin: its records are at step 30"),
          "manifest: a step the parts' records contradict: skipped: %s", warns);
    if (r == PD_OK) pd__ckpt_free(&c);
    rename(moved, ck);
    spit(f, saved);
    /* a FIFO for a part: never opened for reading (which would block for ever), skipped at once */
    snprintf(text, sizeof text, "%s/part-0.bin", ck);
    unlink(text);
    bool fifo = mkfifo(text, 0644) == 0;
    warns[0] = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    r = pd__ckpt_read_latest(dir, &c, warn_collect, warns);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    CHECK(fifo && r == PD_OK && c.step == 20 && strstr(warns, "ckpt-000000000030/part-0.bin") &&
              t1.tv_sec - t0.tv_sec < 5,
          "manifest: a FIFO for a part: skipped at once, naming it: %s", warns);
    if (r == PD_OK) pd__ckpt_free(&c);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "manifest: cleaned up");
}

/* An error formatted with pd_last_error() as an argument (a caller adding
 * context) read "--resume D: --resume D: oint there": the buffer written
 * was the one read. */
static void check_errors(void) {
    char dir[] = "/tmp/pd_ckpt_errors_XXXXXX", want[600];
    CHECK(mkdtemp(dir) != NULL, "errors: a temporary folder");
    pd__ckpt c;
    pd_status r = pd__ckpt_read_latest(dir, &c, NULL, NULL);
    snprintf(want, sizeof want, "%s: no checkpoint there", dir);
    CHECK(r == PD_ERR_IO && !strcmp(pd_last_error(), want), "errors: an empty folder: '%s'", pd_last_error());
    pd__err(r, "--resume %s", pd_last_error());
    snprintf(want, sizeof want, "--resume %s: no checkpoint there", dir);
    CHECK(!strcmp(pd_last_error(), want), "errors: an error formatted with pd_last_error() itself: '%s'",
          pd_last_error());
    pd__err(PD_ERR_IO, "abc");
    pd__err(PD_ERR_IO, "%s, %s: %s", "x", pd_last_error(), pd_last_error());
    CHECK(!strcmp(pd_last_error(), "x, abc: abc"), "errors: the last error twice in one message: '%s'",
          pd_last_error());
    CHECK(rmdir(dir) == 0, "errors: cleaned up");
}

static void check_records(void) {
    char buf[256];
    pd__recw w = {buf, 0, sizeof buf};
    float v[3] = {1, 2, 3};
    pd__rec_put(&w, PD_REC_WEIGHT, 4, "fc.weight", v, sizeof v);
    pd__rec_put(&w, PD_REC_META, 7, "live/2", NULL, 0);
    pd__recw count = {NULL, 0, 0};
    pd__rec_put(&count, PD_REC_WEIGHT, 4, "fc.weight", v, sizeof v);
    pd__rec_put(&count, PD_REC_META, 7, "live/2", NULL, 0);
    CHECK(count.n == w.n && w.n == (20 + 9 + 12) + (20 + 6), "records: sizes counted as written (%zu)", w.n);
    size_t off = 0;
    pd__rec r;
    bool end;
    pd_status st = pd__rec_next(buf, w.n, &off, &r, &end, "test");
    bool ok = st == PD_OK && !end && r.kind == PD_REC_WEIGHT && r.version == 4 && pd__rec_is(&r, "fc.weight") &&
              r.bytes == 12 && memcmp(r.data, v, 12) == 0;
    st = pd__rec_next(buf, w.n, &off, &r, &end, "test");
    ok = ok && st == PD_OK && r.kind == PD_REC_META && r.version == 7 && pd__rec_is(&r, "live/2");
    st = pd__rec_next(buf, w.n, &off, &r, &end, "test");
    CHECK(ok && st == PD_OK && end, "records: read back in order");
    size_t missed = 0, first_missed = 0; /* cuts inside a record read as a whole file */
    for (size_t cut = 1; cut < w.n; cut++) {
        off = 0;
        pd_status a = PD_OK;
        while (a == PD_OK) {
            a = pd__rec_next(buf, cut, &off, &r, &end, "cut");
            if (end) break;
        }
        if (cut != 41 && a != PD_ERR_PARSE && !missed++) first_missed = cut;
    }
    CHECK(missed == 0, "records: every cut inside a record is reported (%zu missed, the first at %zu)", missed,
          first_missed);
}

static void check_auto(void) {
    /* (7 + 10) ms / (3.5% of 100 ms) = 4.86: every 5 steps */
    CHECK(pd__ckpt_auto_every(100, 7, 10, 0.035) == 5, "auto: 7 ms pause + 10 ms persist, 100 ms steps, 3.5%%: every 5");
    /* 20 / 3.5 = 5.71: 6 */
    CHECK(pd__ckpt_auto_every(100, 10, 10, 0.035) == 6, "auto: 10 + 10 ms: every 6");
    /* 957 / 3.5 = 273.4: 274 */
    CHECK(pd__ckpt_auto_every(100, 7, 950, 0.035) == 274, "auto: a 950 ms persist: every 274");
    /* a loose bound: the persist itself, 950 / 100 = 9.5: 10 */
    CHECK(pd__ckpt_auto_every(100, 7, 950, 1000) == 10, "auto: never closer than one persist: every 10");
    CHECK(pd__ckpt_auto_every(100, 0, 0, 0.035) == 1 && pd__ckpt_auto_every(0, 5, 5, 0.035) == 1,
          "auto: free checkpoints, or no step time yet: every step");
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "--device") && !strcmp(argv[2], "cuda")) {
        if (pd_cuda_device_count() == 0) {
            printf("skipped: no CUDA GPU (or a build without the CUDA backend)\n");
            return 77;
        }
        device = PD_DEVICE_CUDA;
        argv += 2;
        argc -= 2;
    }
    if (argc < 2) {
        fprintf(stderr, "usage: test_checkpoint [--device cuda] FIXTURES_DIR\n");
        return 2;
    }
    const char *fx = argv[1];
    if (device == PD_DEVICE_CPU) { /* the records and the disk: nothing of them is on a device */
        check_records();
        check_auto();
        check_disk();
        check_errors();
        check_cleanup();
        check_manifest();
    }
    model m;
    if (load_model(fx, &m, "mlp", PD_OPT_ADAM, 0.01, 12)) {
        for (int P = 2; P <= 3; P++) {
            check_schedule(fx, &m, PD_SCHED_GPIPE, false, P, 1, 2);
            check_schedule(fx, &m, PD_SCHED_FLUSH, false, P, 1, 4);
            check_schedule(fx, &m, PD_SCHED_ZB_H1, false, P, 1, 4);
            check_schedule(fx, &m, PD_SCHED_PIPEDREAM, false, P, 1, 1);
            check_schedule(fx, &m, PD_SCHED_PIPEDREAM, true, P, 1, 1);
            check_schedule(fx, &m, PD_SCHED_2BW, false, P, 1, 2);
        }
        check_schedule(fx, &m, PD_SCHED_INTERLEAVED, false, 2, 2, 2);
        check_schedule(fx, &m, PD_SCHED_PIPEDREAM, false, 4, 1, 1); /* a stage of a Relu alone: no versions held */
        check_schedule(fx, &m, PD_SCHED_2BW, false, 4, 1, 2);
        rep0 = 2; /* replicas in one process (on GPU stages each on its own context) */
        check_schedule(fx, &m, PD_SCHED_FLUSH, false, 2, 1, 4);
        check_schedule(fx, &m, PD_SCHED_GPIPE, false, 3, 1, 2);
        check_schedule(fx, &m, PD_SCHED_ZB_H1, false, 2, 1, 4);
        check_schedule(fx, &m, PD_SCHED_INTERLEAVED, false, 2, 2, 2);
        check_schedule(fx, &m, PD_SCHED_2BW, false, 2, 1, 4); /* each replica's stash restored */
        check_schedule(fx, &m, PD_SCHED_2BW, false, 3, 1, 2);
        recomp = 1;
        check_schedule(fx, &m, PD_SCHED_FLUSH, false, 2, 1, 4);
        check_schedule(fx, &m, PD_SCHED_2BW, false, 2, 1, 4);
        rep0 = 1;
        check_schedule(fx, &m, PD_SCHED_FLUSH, false, 3, 1, 4);
        check_schedule(fx, &m, PD_SCHED_PIPEDREAM, false, 3, 1, 1);
        check_schedule(fx, &m, PD_SCHED_2BW, false, 2, 1, 2);
        check_schedule(fx, &m, PD_SCHED_INTERLEAVED, false, 2, 2, 2);
        recomp = 0;
        check_refusals(fx, &m);
        free_model(&m);
    }
    if (load_model(fx, &m, "cnn_bn", PD_OPT_MOMENTUM, 0.05, 10)) {
        check_schedule(fx, &m, PD_SCHED_FLUSH, false, 2, 1, 2);
        check_schedule(fx, &m, PD_SCHED_PIPEDREAM, false, 3, 1, 1);
        check_schedule(fx, &m, PD_SCHED_2BW, false, 2, 1, 4);
        rep0 = 2; /* replicas keep BatchNorm statistics of their own; replica 0's are the model's, the snapshot's */
        check_schedule(fx, &m, PD_SCHED_FLUSH, false, 2, 1, 2);
        recomp = 1;
        check_schedule(fx, &m, PD_SCHED_2BW, false, 2, 1, 2);
        rep0 = 1;
        check_schedule(fx, &m, PD_SCHED_PIPEDREAM, false, 3, 1, 1);
        recomp = 0;
        free_model(&m);
    }
    if (load_model(fx, &m, "gpt", PD_OPT_ADAMW, 0.01, 8)) {
        check_schedule(fx, &m, PD_SCHED_PIPEDREAM, false, 2, 1, 1);
        check_schedule(fx, &m, PD_SCHED_FLUSH, false, 2, 1, 2);
        free_model(&m);
    }
    return check_summary();
}
