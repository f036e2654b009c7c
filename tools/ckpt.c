/* ckpt.c - `pdonnx train`'s checkpoints and `pdonnx export` (ckpt.h,
 * docs/CHECKPOINT.md).
 *
 * How it works: docs/INTERNALS.md, "tools/ckpt.c".
 */
#include "ckpt.h"
#include "../runtime/session.h"
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { PD_AUTO_FIRST = 3 }; /* steps timed before auto's first checkpoint */

struct pd_cli_ckpt {
    pd_cli_ckpt_opts o;
    char *info;          /* the run's JSON, in every manifest */
    pd__ckpt_writer *w;
    pd__pipe *pipe;
    int nparts;
    const void *part[1024];
    size_t len[1024];
    /* one stage: the snapshot buffer, busy while the writer reads it */
    pd__recw buf;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool busy;
    double pause_ms;     /* one stage: waits and copies */
    int64_t taken;
    /* when */
    int64_t first, last_taken, every;
    double t_prev;       /* the clock at the last boundary seen */
    int64_t b_prev;
    double step_ms;      /* the latest estimate */
    /* auto under MPI (pd__due_dist) */
    bool agreed;         /* the interval after the last checkpoint is agreed */
    int64_t lag, next_lag, min_lag;
    int here;            /* parts this process writes (none: a replica's process only agrees) */
    double *votes;       /* per process its proposal */
    void (*progress)(void *ctx, int64_t b);
    void *pctx;
};

static double pd__ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

pd_status pd_cli_ckpt_start(const pd_cli_ckpt_opts *o, cJSON *info, int64_t first, pd_cli_ckpt **out) {
    pd_cli_ckpt *c = PD_CALLOC(1, sizeof *c);
    char *text = cJSON_PrintUnformatted(info);
    cJSON_Delete(info);
    if (!c || !text) {
        PD_FREE(c);
        free(text);
        return pd__err(PD_ERR_NOMEM, "out of memory");
    }
    c->o = *o;
    c->info = text;
    c->first = c->last_taken = c->b_prev = first;
    c->every = o->every;
    c->t_prev = pd__ms();
    c->agreed = true;
    if (o->processes > 1 && o->every < 0 && !(c->votes = PD_CALLOC((size_t)o->processes, sizeof(double)))) {
        free(c->info);
        PD_FREE(c);
        return pd__err(PD_ERR_NOMEM, "out of memory");
    }
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    pd_status st = o->processes > 1 ? pd__ckpt_writer_start_dist(o->dir, o->keep, o->parts, o->rank == 0, &c->w)
                                     : pd__ckpt_writer_start(o->dir, o->keep, &c->w);
    if (st != PD_OK) {
        pthread_mutex_destroy(&c->mu);
        pthread_cond_destroy(&c->cv);
        free(c->info);
        PD_FREE(c->votes);
        PD_FREE(c);
        return st;
    }
    *out = c;
    return PD_OK;
}

/* CheckFreq's auto across processes. Each process measures its own costs
 * (its snapshot pause, its writer's persist: rank 0's includes waiting for
 * the others' parts and the manifest, its step time), but a checkpoint is
 * whole only if every process takes the same boundaries, so the interval is
 * agreed: after checkpoint c, at boundary c + lag (a rule of the step, the
 * same on every process), each waits until its part of c is persisted,
 * proposes pd__ckpt_auto_every from its measurements, and all take the
 * largest proposal E (the most conservative); the next checkpoint is
 * c + max(E, lag). lag is the previous E, so in the steady state the persist
 * is over by then and nobody waits; at least the pipeline's snapshot gap + 1,
 * so that every process's snapshot of c is taken before any process waits
 * (the deciding thread waits before its first instruction of minibatch
 * c + lag - 1, which no process needs to reach its snapshot of c, under
 * pipedream and 2bw either: they run at most P microbatches ahead). */
static bool pd__due_dist(pd_cli_ckpt *c, int64_t b) {
    if (c->taken == 0) return b - c->first >= PD_AUTO_FIRST; /* the first measures what one costs */
    int64_t since = b - c->last_taken;
    if (!c->agreed) {
        if (since < c->lag) return false;
        while (c->here && pd__ckpt_writer_done(c->w) < c->last_taken && !pd__pipe_aborted(c->pipe)) {
            struct timespec nap = {0, 1000000};
            nanosleep(&nap, NULL);
        }
        int64_t n, k;
        double persist, pause;
        pd__ckpt_writer_stats(c->w, &n, &persist, NULL);
        pd__pipe_snap_stats(c->pipe, &k, &pause);
        memset(c->votes, 0, sizeof(double) * (size_t)c->o.processes);
        c->votes[c->o.rank] = (double)pd__ckpt_auto_every(c->step_ms, k > 0 ? pause / (double)k : 0, persist,
                                                          c->o.overhead);
        int64_t e = 1;
        if (pd__pipe_snap_agree(c->pipe, c->votes, c->o.processes) != PD_OK)
            e = INT64_MAX / 4; /* the run is failing (a process stopped): no more checkpoints */
        for (int r = 0; e < INT64_MAX / 4 && r < c->o.processes; r++)
            if (c->votes[r] > (double)e) e = (int64_t)c->votes[r];
        c->every = e > c->lag ? e : c->lag;
        c->next_lag = e > c->min_lag ? e : c->min_lag;
        c->agreed = true;
    }
    return since >= c->every;
}

/* Is boundary b (the state after b steps) to be taken? Called in order of b. */
static bool pd__due(pd_cli_ckpt *c, int64_t b) {
    double now = pd__ms();
    if (b > c->b_prev) { /* the step time: the latest interval, smoothed */
        double dt = (now - c->t_prev) / (double)(b - c->b_prev);
        c->step_ms = c->step_ms > 0 ? 0.7 * c->step_ms + 0.3 * dt : dt;
        c->t_prev = now;
        c->b_prev = b;
    }
    if (c->o.every > 0) return b % c->o.every == 0;
    if (c->votes) return pd__due_dist(c, b);
    if (c->taken == 0) return b - c->first >= PD_AUTO_FIRST; /* the first measures what one costs */
    int64_t n, k = c->taken;
    double persist, pause = c->pause_ms;
    pd__ckpt_writer_stats(c->w, &n, &persist, NULL);
    if (c->pipe) pd__pipe_snap_stats(c->pipe, &k, &pause);
    if (n == 0 || k == 0) return false; /* the first one's costs are not known yet */
    pause /= (double)k;
    c->every = pd__ckpt_auto_every(c->step_ms, pause, persist, c->o.overhead);
    return b - c->last_taken >= c->every;
}

/* ---- pipeline ---- */

static bool pd__want(void *ctx, int64_t b) {
    pd_cli_ckpt *c = ctx;
    bool w = pd__due(c, b);
    if (w) c->last_taken = b, c->taken++;
    if (w && c->votes) c->agreed = false, c->lag = c->next_lag;
    return w;
}

static void pd__release_pipe(void *ctx) { pd__pipe_snap_release(ctx); }

static void pd__ready(void *ctx, int64_t b) {
    pd_cli_ckpt *c = ctx;
    if (c->progress) c->progress(c->pctx, b);
    for (int w = 0; w < c->nparts; w++) pd__pipe_snap_part(c->pipe, w, &c->part[w], &c->len[w]);
    pd__ckpt_writer_submit(c->w, b, c->info, c->nparts, c->part, c->len, pd__release_pipe, c->pipe);
}

pd_status pd_cli_ckpt_attach(pd_cli_ckpt *c, pd__pipe *p, void (*progress)(void *ctx, int64_t b), void *ctx) {
    c->pipe = p;
    c->progress = progress;
    c->pctx = ctx;
    c->nparts = pd__pipe_stages(p);
    c->lag = c->next_lag = c->min_lag = pd__pipe_snap_gap(p) + 1;
    if (c->nparts > 1024) return pd__err(PD_ERR_UNSUPPORTED, "checkpoints: more than 1024 stages");
    pd__snap_hooks h = {pd__want, pd__ready, c};
    PD_TRY(pd__pipe_set_snap_hooks(p, &h));
    pd__pipe_watch_writer(p, c->w); /* under MPI a failed write stops the run everywhere */
    for (int w = 0; w < c->nparts; w++) {
        const void *d;
        size_t n;
        pd__pipe_snap_part(p, w, &d, &n);
        c->here += d != NULL;
    }
    return PD_OK;
}

/* ---- one stage ---- */

static void pd__release_buf(void *ctx) {
    pd_cli_ckpt *c = ctx;
    pthread_mutex_lock(&c->mu);
    c->busy = false;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

/* Copies the session into the buffer (after the last snapshot is written) and hands it over. */
static pd_status pd__snap_session(pd_cli_ckpt *c, pd_session *s, int64_t step) {
    double t0 = pd__ms();
    pthread_mutex_lock(&c->mu);
    while (c->busy) pthread_cond_wait(&c->cv, &c->mu);
    c->busy = true;
    pthread_mutex_unlock(&c->mu);
    pd__recw count = {NULL, 0, 0};
    pd__session_snapshot(s, &count);
    if (count.n > c->buf.cap) {
        PD_FREE(c->buf.buf);
        c->buf.cap = 0;
        if (!(c->buf.buf = PD_MALLOC(count.n))) {
            pd__release_buf(c);
            return pd__err(PD_ERR_NOMEM, "out of memory for a %zu-byte snapshot", count.n);
        }
        c->buf.cap = count.n;
    }
    c->buf.n = 0;
    pd__session_snapshot(s, &c->buf);
    c->part[0] = c->buf.buf;
    c->len[0] = c->buf.n;
    c->nparts = 1;
    c->pause_ms += pd__ms() - t0;
    pd__ckpt_writer_submit(c->w, step, c->info, 1, c->part, c->len, pd__release_buf, c);
    return PD_OK;
}

pd_status pd_cli_ckpt_session(pd_cli_ckpt *c, pd_session *s, int64_t step, double step_ms) {
    (void)step_ms;
    if (!pd__due(c, step)) return PD_OK;
    c->last_taken = step;
    c->taken++;
    return pd__snap_session(c, s, step);
}

pd_status pd_cli_ckpt_final(pd_cli_ckpt *c, pd__pipe *p, pd_session *s, int64_t step) {
    if (c->last_taken == step && c->taken > 0) return PD_OK; /* just taken */
    if (s) return pd__snap_session(c, s, step);
    PD_TRY(pd__pipe_snap_capture(p));
    pd__ready(c, step);
    return PD_OK;
}

void pd_cli_ckpt_cancel(pd_cli_ckpt *c) {
    if (c) pd__ckpt_writer_cancel(c->w);
}

pd_status pd_cli_ckpt_finish(pd_cli_ckpt *c, double train_s) {
    if (!c) return PD_OK;
    double pause = c->pause_ms;
    if (c->pipe) pd__pipe_snap_stats(c->pipe, NULL, &pause);
    pd__ckpt_writer_drain(c->w);
    int64_t n = 0, last = 0;
    double persist = 0;
    pd__ckpt_writer_stats(c->w, &n, &persist, &last);
    pd_status st = pd__ckpt_writer_finish(c->w);
    if (st == PD_OK && !c->o.quiet) {
        printf("checkpoints: %lld written to %s (", (long long)n, c->o.dir);
        if (c->o.every < 0 && c->votes && c->every < 0)
            printf("auto: the run ended before the %d processes agreed on an interval", c->o.processes);
        else if (c->o.every < 0 && c->votes)
            printf("auto, agreed by the %d processes: every %lld steps at the end", c->o.processes,
                   (long long)c->every);
        else if (c->o.every < 0) printf("auto: every %lld steps at the end", (long long)c->every);
        else if (c->o.every > 0) printf("every %lld steps", (long long)c->o.every);
        else printf("the final state");
        printf("), the last at step %lld; snapshot pauses %.1f ms in all (%.2f%% of training), last persist %.1f ms\n",
               (long long)last, pause, train_s > 0 ? 100 * pause / (1e3 * train_s) : 0.0, persist);
    }
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    PD_FREE(c->buf.buf);
    PD_FREE(c->votes);
    free(c->info);
    PD_FREE(c);
    return st;
}

/* ---- resume ---- */

static void pd__warn(void *ctx, const char *msg) {
    (void)ctx;
    fprintf(stderr, "pdonnx: warning: %s\n", msg);
}

pd_status pd_cli_ckpt_load(const char *dir, const cJSON *expect, pd__ckpt *out, cJSON **info) {
    pd__ckpt c;
    pd_status st = pd__ckpt_read_latest(dir, &c, pd__warn, NULL);
    if (st != PD_OK) return pd__err(st, "--resume %s", pd_last_error()); /* "DIR: what is wrong" */
    cJSON *got = cJSON_Parse(c.info_json);
    if (!got) {
        pd__ckpt_free(&c);
        return pd__err(PD_ERR_PARSE, "--resume %s: the manifest's info is not JSON", dir);
    }
    /* every field of the run the state depends on must be as it was; where the
     * model lies may change, and the graph's batch follows from batch and microbatches */
    static const char *const skip[] = {"plan", "model", "graph_batch", NULL};
    char was[256], now[256];
    const char *field = pd__ckpt_info_diff(expect, got, skip, was, now, sizeof was);
    if (field) {
        st = pd__err(PD_ERR_INVALID, "--resume %s: %s was taken with %s %s, this run has %s (resume with the same "
                     "settings)", dir, c.path, field, was, now);
        cJSON_Delete(got);
        pd__ckpt_free(&c);
        return st;
    }
    *out = c;
    *info = got;
    return PD_OK;
}

/* ---- pdonnx export ----
 *
 * Streams (docs/CHECKPOINT.md, "Export streams"): the model is loaded with
 * lazy_weights (its external float32 initializers checked, not read) and the
 * checkpoint opened with every check but no part held; then record by
 * record, each value goes where its tensor lies: into the graph when the
 * model holds it inline, else in 1 MiB chunks to the end of OUT.onnx.data,
 * which the model written last refers to. Initializers no part holds (frozen)
 * are copied there from the model's file one at a time. The peak is the
 * graph, a chunk and the largest frozen tensor, never a part.
 * PDONNX_LAZY_WEIGHTS=0: the whole model and every part in memory, a
 * self-contained OUT.onnx (how export worked before; the test's baseline). */

enum { PD_EXPORT_CHUNK = 1 << 20 };

typedef struct pd__export {
    pd_graph *g;
    const char *model; /* for messages */
    bool *got;         /* per tensor: a record gave its value */
    int64_t *src_off;  /* per deferred tensor: its offset in the model's file (ext_off moves to data's) */
    int fd;            /* data's temporary; -1 until the first deferred tensor */
    char data[4200];   /* OUT.onnx.data */
    char tmp[4300];
    const char *loc;   /* data's name beside OUT.onnx: the location the model refers to */
    int64_t off;       /* bytes written to data */
    int64_t weights;   /* WEIGHT records applied */
    bool untie;        /* the run untied its ties (--untie): none to follow */
    char what[4300];   /* the part being read, for messages */
    char *chunk;       /* PD_EXPORT_CHUNK bytes: a deferred tensor's value on its way to data */
} pd__export;

/* x refers to the data file from its end on (what is appended next is its value). */
static pd_status pd__export_point(pd__export *e, pd__tensor *x) {
    if (e->fd < 0 && (e->fd = open(e->tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644)) < 0)
        return pd__err(PD_ERR_IO, "%s: cannot write: %s", e->data, strerror(errno));
    PD_FREE(x->ext_loc);
    if (!(x->ext_loc = pd__strdup(e->loc))) return pd__err(PD_ERR_NOMEM, "out of memory");
    x->ext_off = e->off;
    return PD_OK;
}

/* Appends n bytes to the data file. */
static pd_status pd__export_append(pd__export *e, const void *d, size_t n) {
    for (size_t off = 0; off < n;) {
        ssize_t w = write(e->fd, (const char *)d + off, n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return pd__err(PD_ERR_IO, "%s: write failed: %s", e->data, strerror(errno));
        off += (size_t)w;
    }
    e->off += (int64_t)n;
    return PD_OK;
}

static pd_status pd__export_put(pd__export *e, pd__tensor *x, const void *d, size_t n) {
    PD_TRY(pd__export_point(e, x));
    return pd__export_append(e, d, n);
}

/* The tensor a weight or buffer record r of part `what` is the value of (NULL
 * for other records), or an error naming both. */
static pd_status pd__export_target(pd__export *e, const pd__rec *r, const char *what, int *t) {
    *t = -1;
    if (r->kind != PD_REC_WEIGHT && r->kind != PD_REC_BUFFER) return PD_OK;
    char name[512];
    snprintf(name, sizeof name, "%.*s", (int)(r->name_len < 511 ? r->name_len : 511), r->name);
    int k = pd__graph_find(e->g, name);
    pd__tensor *x = k >= 0 ? &e->g->tensors[k] : NULL;
    if (!x || x->kind != PD_T_INIT || (!x->data && !pd__deferred(x)) ||
        r->bytes != (uint64_t)x->numel * pd_dtype_size(x->dtype))
        return pd__err(PD_ERR_INVALID, "%s: '%s' is not an initializer of that size in %s (another model?)", what, name,
                       e->model);
    *t = k;
    e->got[k] = true;
    e->weights += r->kind == PD_REC_WEIGHT;
    if (r->kind == PD_REC_WEIGHT) x->trained = true; /* the saved model's training_info lists it */
    return PD_OK;
}

/* A record streamed from a part (pd__ckpt_part_stream): into the graph when
 * its tensor is inline, else appended to the data file in chunks. */
static pd_status pd__export_streamed(void *ctx, const pd__rec *r, pd__ckpt_stream *s) {
    pd__export *e = ctx;
    int t;
    PD_TRY(pd__export_target(e, r, e->what, &t));
    if (t < 0) return PD_OK;
    pd__tensor *x = &e->g->tensors[t];
    if (x->data) return pd__ckpt_stream_read(s, x->data, (size_t)r->bytes);
    PD_TRY(pd__export_point(e, x));
    for (uint64_t left = r->bytes; left > 0;) {
        size_t n = left < PD_EXPORT_CHUNK ? (size_t)left : PD_EXPORT_CHUNK;
        PD_TRY(pd__ckpt_stream_read(s, e->chunk, n));
        PD_TRY(pd__export_append(e, e->chunk, n));
        left -= n;
    }
    return PD_OK;
}

/* Part i: streamed, or (whole) from memory, then freed. */
static pd_status pd__export_part(pd__export *e, pd__ckpt *c, int i) {
    snprintf(e->what, sizeof e->what, "%s/part-%d.bin", c->path, i);
    if (!c->parts[i]) return pd__ckpt_part_stream(c, i, pd__export_streamed, e);
    size_t off = 0;
    pd_status st = PD_OK;
    for (;;) {
        pd__rec r;
        bool end;
        int t;
        if ((st = pd__rec_next(c->parts[i], c->lens[i], &off, &r, &end, e->what)) != PD_OK || end) break;
        if ((st = pd__export_target(e, &r, e->what, &t)) != PD_OK) break;
        if (t >= 0) memcpy(e->g->tensors[t].data, r.data, (size_t)r.bytes); /* whole: nothing is deferred */
    }
    PD_FREE(c->parts[i]);
    c->parts[i] = NULL;
    return st;
}

/* A 2-D x whose values v could be a tie's (pd__tie_candidate's rule: not all
 * equal, not a symmetric square, not a constant by its train rule). */
static bool pd__export_candidate(const pd__tensor *x, const float *v) {
    if (x->ndim != 2 || x->numel < 2 || x->train == PD_TR_SCALAR || x->train == PD_TR_UNLISTED ||
        x->train == PD_TR_EXPORTER)
        return false;
    const uint32_t *u = (const uint32_t *)v;
    bool same = true, sym = x->shape[0] == x->shape[1];
    for (int64_t i = 1; i < x->numel && same; i++) same = u[i] == u[0];
    for (int64_t i = 0; i < x->shape[0] && sym; i++)
        for (int64_t j = 0; j < i && sym; j++) sym = u[i * x->shape[1] + j] == u[j * x->shape[1] + i];
    return !same && !sym;
}

/* Whether B (c x r, its file's values) may be the transpose of A (r x c,
 * values va): its first column, up to 8 elements read one at a time, is A's
 * first row (so that only a likely tie costs a read of B: frozen layers
 * against trained ones of the same shape would read each pair). */
static pd_status pd__export_probe(const pd__tensor *B, const float *va, int64_t c, bool *maybe) {
    pd__tensor one = *B;
    one.numel = 1;
    *maybe = true;
    for (int64_t j = 0; j < c && j < 8 && *maybe; j++) {
        float v;
        one.ext_off = B->ext_off + (int64_t)sizeof(float) * j * B->shape[1];
        PD_TRY(pd__tensor_read(&one, &v));
        *maybe = memcmp(&v, &va[j], sizeof v) == 0;
    }
    return PD_OK;
}

/* The recorded deferred initializer that a (unrecorded, deferred, values va)
 * is stored as the transpose of in the model's file, -1 if none: the tie the
 * loader makes when it reads every weight (pd__tie_transposes; lazy_weights
 * does not look), under which the run trained that one alone. */
static pd_status pd__export_tie(pd__export *e, int a, const float *va, float *vb, int *src) {
    const pd__tensor *A = &e->g->tensors[a];
    *src = -1;
    if (e->untie || !pd__export_candidate(A, va)) return PD_OK;
    int64_t r = A->shape[0], c = A->shape[1];
    for (int b = 0; b < e->g->ntensors && *src < 0; b++) {
        pd__tensor B = e->g->tensors[b];
        if (!e->got[b] || !B.ext_loc || B.data || B.ndim != 2 || B.shape[0] != c || B.shape[1] != r) continue;
        B.ext_off = e->src_off[b]; /* its value in the model's file, before training */
        bool maybe;
        PD_TRY(pd__export_probe(&B, va, c, &maybe));
        if (!maybe) continue;
        PD_TRY(pd__tensor_read(&B, vb));
        bool eq = true;
        for (int64_t i = 0; i < r && eq; i++)
            for (int64_t j = 0; j < c && eq; j++) eq = memcmp(&va[i * c + j], &vb[j * r + i], sizeof(float)) == 0;
        if (eq) *src = b;
    }
    return PD_OK;
}

/* Deferred initializer t, which no part holds: its value from the model's
 * file, or the transpose of its tie's trained one (read back from data). */
static pd_status pd__export_copy(pd__export *e, int t, float *v, float *w) {
    pd__tensor *x = &e->g->tensors[t];
    int src;
    PD_TRY(pd__tensor_read(x, v));
    PD_TRY(pd__export_tie(e, t, v, w, &src));
    size_t n = sizeof(float) * (size_t)x->numel;
    if (src >= 0) {
        int64_t r = x->shape[0], c = x->shape[1];
        PD_TRY(pd__pread_all(e->fd, e->data, w, n, e->g->tensors[src].ext_off));
        for (int64_t i = 0; i < r; i++)
            for (int64_t j = 0; j < c; j++) v[i * c + j] = w[j * r + i];
    }
    return pd__export_put(e, x, v, n);
}

/* Deferred initializers no part holds, one at a time (two buffers of the largest). */
static pd_status pd__export_rest(pd__export *e) {
    int64_t most = 1;
    for (int t = 0; t < e->g->ntensors; t++)
        if (!e->got[t] && pd__deferred(&e->g->tensors[t]) && e->g->tensors[t].numel > most)
            most = e->g->tensors[t].numel;
    float *v = PD_MALLOC(sizeof(float) * (size_t)most), *w = PD_MALLOC(sizeof(float) * (size_t)most);
    pd_status st = v && w ? PD_OK
                          : pd__err(PD_ERR_NOMEM, "out of memory for a %lld-element initializer", (long long)most);
    for (int t = 0; t < e->g->ntensors && st == PD_OK; t++)
        if (!e->got[t] && pd__deferred(&e->g->tensors[t])) st = pd__export_copy(e, t, v, w);
    PD_FREE(v);
    PD_FREE(w);
    return st;
}

/* The data file into place (fsynced), then the model; nothing is left at
 * either path when one fails. */
static pd_status pd__export_write(pd__export *e, const char *outp) {
    bool placed = e->fd >= 0;
    if (placed) {
        int fd = e->fd;
        e->fd = -1;
        bool ok = fsync(fd) == 0;
        ok = close(fd) == 0 && ok;
        if (!ok) return pd__err(PD_ERR_IO, "%s: write failed: %s", e->data, strerror(errno));
        if (rename(e->tmp, e->data) != 0)
            return pd__err(PD_ERR_IO, "%s: cannot rename into place: %s", e->data, strerror(errno));
    }
    pd_status st = pd_graph_save(e->g, outp);
    if (st != PD_OK && placed) unlink(e->data);
    return st;
}

/* The checkpoint: DIR itself when it holds a manifest, else DIR's newest
 * valid one; whole: every part read and kept. */
static pd_status pd__export_open(const char *dir, bool whole, pd__ckpt *c) {
    char mf[4200];
    snprintf(mf, sizeof mf, "%s/manifest.json", dir);
    FILE *f = fopen(mf, "r");
    if (f) fclose(f);
    if (f) return whole ? pd__ckpt_read(dir, c) : pd__ckpt_open(dir, c);
    return whole ? pd__ckpt_read_latest(dir, c, pd__warn, NULL) : pd__ckpt_open_latest(dir, c, pd__warn, NULL);
}

/* The model trained (model, else the one info names), loaded as pdonnx train
 * loaded it (with --untie's ties untied, so that each copy's record has its tensor). */
static pd_status pd__export_load(const char *model, const pd__ckpt *c, const cJSON *info, bool whole, pd_graph **g) {
    const cJSON *m = cJSON_GetObjectItem(info, "model"), *b = cJSON_GetObjectItem(info, "graph_batch");
    if (!model) model = cJSON_IsString(m) ? m->valuestring : NULL;
    if (!model) return pd__err(PD_ERR_INVALID, "%s names no model: give --model MODEL.onnx", c->path);
    pd_load_options lo = PD_LOAD_OPTIONS_INIT;
    lo.half_as_float = 1;
    lo.lazy_weights = !whole;
    lo.untie = cJSON_IsTrue(cJSON_GetObjectItem(info, "untie"));
    if (!pd__ckpt_json_int(b, 0, INT32_MAX, &lo.batch)) lo.batch = 0;
    return pd_graph_load_file(model, &lo, g);
}

/* Checkpoint c's weights into the model, written to outp (and outp.data). */
static pd_status pd__export_run(pd__export *e, pd__ckpt *c, const char *outp) {
    if (strlen(outp) > 4000) return pd__err(PD_ERR_INVALID, "%s: path too long", outp);
    snprintf(e->data, sizeof e->data, "%s.data", outp);
    snprintf(e->tmp, sizeof e->tmp, "%s.tmp.%ld", e->data, (long)getpid());
    const char *slash = strrchr(e->data, '/');
    e->loc = slash ? slash + 1 : e->data;
    PD_TRY(pd__check_dest(outp));
    bool deferred = false;
    for (int t = 0; t < e->g->ntensors && !deferred; t++) deferred = pd__deferred(&e->g->tensors[t]);
    if (deferred) PD_TRY(pd__check_dest(e->data));
    e->got = PD_CALLOC((size_t)e->g->ntensors + 1, sizeof(bool));
    e->src_off = PD_CALLOC((size_t)e->g->ntensors + 1, sizeof(int64_t));
    e->chunk = PD_MALLOC(PD_EXPORT_CHUNK);
    if (!e->got || !e->src_off || !e->chunk) return pd__err(PD_ERR_NOMEM, "out of memory");
    for (int t = 0; t < e->g->ntensors; t++) e->src_off[t] = e->g->tensors[t].ext_off;
    for (int i = 0; i < c->nparts; i++) PD_TRY(pd__export_part(e, c, i));
    PD_TRY(pd__export_rest(e));
    return pd__export_write(e, outp);
}

int pd_cli_export(int argc, char **argv) {
    const char *dir = NULL, *outp = NULL, *model = NULL;
    const pd_flag t[] = {
        {"-o", PD_FLAG_STR, &outp, 0, 0, 0, "OUT.onnx",
         "the model with the checkpoint's weights (external ones in OUT.onnx.data)", NULL, 0},
        {"--output", PD_FLAG_STR, &outp, 0, 0, 0, "OUT.onnx", "the same as -o", NULL, 0},
        {"--model", PD_FLAG_STR, &model, 0, 0, 0, "MODEL.onnx", "the model trained (default: the one the checkpoint names)", NULL, 0},
    };
    int nt = (int)(sizeof t / sizeof t[0]);
    if (pd_cli_wants_help(argc, argv)) return pd_cli_help("pdonnx export CHECKPOINT_DIR -o OUT.onnx [flags]", t, nt);
    int bad = pd_cli_flags("export", t, nt, NULL, argc, argv, &dir, 1);
    if (bad) return bad;
    if (!dir || !outp) return pd_cli_usage_error("export: %s", "usage: pdonnx export CHECKPOINT_DIR -o MODEL.onnx");
    const char *lz = getenv("PDONNX_LAZY_WEIGHTS");
    bool whole = lz && strcmp(lz, "0") == 0;
    pd__ckpt c;
    memset(&c, 0, sizeof c);
    if (pd__export_open(dir, whole, &c) != PD_OK) return pd_cli_fail();
    pd__export e = {.model = model, .fd = -1};
    cJSON *info = cJSON_Parse(c.info_json);
    pd_status st = pd__export_load(model, &c, info, whole, &e.g);
    e.untie = cJSON_IsTrue(cJSON_GetObjectItem(info, "untie"));
    if (!e.model) e.model = e.g ? e.g->path : "the model";
    if (st == PD_OK) st = pd__export_run(&e, &c, outp);
    if (e.fd >= 0) close(e.fd);
    if (st != PD_OK) unlink(e.tmp);
    if (st == PD_OK) {
        printf("exported %s (step %lld, %lld trained tensors) to %s", c.path, (long long)c.step, (long long)e.weights,
               outp);
        if (e.off > 0) printf(" (weights as external data: %s, %lld bytes)", e.data, (long long)e.off);
        printf("\n");
    }
    pd_graph_destroy(e.g);
    PD_FREE(e.got);
    PD_FREE(e.src_off);
    PD_FREE(e.chunk);
    cJSON_Delete(info);
    pd__ckpt_free(&c);
    return st == PD_OK ? 0 : pd_cli_fail();
}
