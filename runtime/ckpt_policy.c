/* ckpt_policy.c - when a run takes its checkpoints, and the writer that
 * persists them (ckpt_policy.h, docs/CHECKPOINT.md): the public trainer's
 * and `pdonnx train`'s one policy.
 *
 * How it works: docs/INTERNALS.md, "runtime/ckpt_policy.c".
 */
#include "ckpt_policy.h"
#include "session.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { PD_AUTO_FIRST = 3 }; /* steps timed before auto's first checkpoint */

struct pd__ckpol {
    pd__ckpol_opts o;
    pd__ckpol_costs costs; /* given (o.costs), else unused */
    char *info;            /* the run's JSON, in every manifest */
    pd__ckpt_writer *w;
    pd__pipe *pipe;
    int64_t offset;        /* the pipeline's boundary b is step offset + b */
    int nparts;
    const void **part;
    size_t *len;
    /* one stage: the snapshot buffer, busy while the writer reads it */
    pd__recw buf;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool busy;
    double pause_ms;       /* one stage: waits and copies; a pipeline's: its pause before this run */
    int64_t taken, taken0; /* ... and its snapshots before */
    /* when */
    int64_t first, last_taken, every;
    double t_prev;         /* the clock at the last boundary seen */
    int64_t b_prev;
    double step_ms;        /* the latest estimate */
    /* auto under MPI (pd__due_dist) */
    bool agreed;           /* the interval after the last checkpoint is agreed */
    int64_t lag, next_lag, min_lag;
    int here;              /* parts this process writes (none: a replica's process only agrees) */
    double *votes;         /* per process its proposal */
    void (*progress)(void *ctx, int64_t step);
    void *pctx;
};

static double pd__ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

static void pd__ckpol_free(pd__ckpol *c) {
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    PD_FREE(c->buf.buf);
    PD_FREE(c->votes);
    PD_FREE(c->part);
    PD_FREE(c->len);
    PD_FREE(c->info);
    PD_FREE(c);
}

pd_status pd__ckpol_start(const pd__ckpol_opts *o, const char *info, int64_t first, pd__ckpol **out) {
    pd__ckpol *c = (pd__ckpol *)PD_CALLOC(1, sizeof *c);
    if (!c) return pd__err(PD_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    c->o = *o;
    if (o->costs) c->costs = *o->costs;
    c->o.costs = o->costs ? &c->costs : NULL;
    c->first = c->last_taken = c->b_prev = first;
    c->every = o->every;
    c->t_prev = pd__ms();
    c->agreed = true;
    c->info = pd__strdup(info);
    c->part = (const void **)PD_CALLOC(1, sizeof *c->part); /* one stage's; a pipeline's: pd__ckpol_attach */
    c->len = (size_t *)PD_CALLOC(1, sizeof *c->len);
    bool dist_auto = o->processes > 1 && o->every < 0;
    if (dist_auto) c->votes = (double *)PD_CALLOC((size_t)o->processes, sizeof(double));
    if (!c->info || !c->part || !c->len || (dist_auto && !c->votes)) {
        pd__ckpol_free(c);
        return pd__err(PD_ERR_NOMEM, "out of memory");
    }
    pd_status st = o->processes > 1 ? pd__ckpt_writer_start_dist(o->dir, o->keep, o->parts, o->rank == 0, &c->w)
                                     : pd__ckpt_writer_start(o->dir, o->keep, &c->w);
    if (st != PD_OK) {
        pd__ckpol_free(c);
        return st;
    }
    *out = c;
    return PD_OK;
}

/* What auto goes by: the step time, a snapshot's pause, the last persist
 * (given, or measured: false while the first checkpoint's are not known). */
static bool pd__costs(pd__ckpol *c, double *step, double *pause, double *persist) {
    if (c->o.costs) {
        *step = c->costs.step_ms, *pause = c->costs.pause_ms, *persist = c->costs.persist_ms;
        return true;
    }
    int64_t n, k = c->taken;
    *pause = c->pause_ms;
    pd__ckpt_writer_stats(c->w, &n, persist, NULL);
    if (c->pipe) {
        pd__pipe_snap_stats(c->pipe, &k, pause);
        k -= c->taken0, *pause -= c->pause_ms;
    }
    *step = c->step_ms;
    if (k > 0) *pause /= (double)k;
    return n > 0 && k > 0;
}

/* CheckFreq's auto across processes. Each process measures its own costs
 * (its snapshot pause, its writer's persist: rank 0's includes waiting for
 * the others' parts and the manifest, its step time), but a checkpoint is
 * whole only if every process takes the same boundaries, so the interval is
 * agreed: after checkpoint c, at boundary c + lag (the same on every
 * process), each waits until its part of c is persisted, proposes
 * pd__ckpt_auto_every from its measurements, and all take the largest
 * proposal E; the next checkpoint is c + max(E, lag). lag is the previous E
 * (in the steady state the persist is over by then), at least the
 * pipeline's snapshot gap + 1, so that every process's snapshot of c is
 * taken before any process waits. docs/INTERNALS.md says more. */
static bool pd__due_dist(pd__ckpol *c, int64_t b) {
    if (c->taken == 0) return b - c->first >= PD_AUTO_FIRST; /* the first measures what one costs */
    int64_t since = b - c->last_taken;
    if (!c->agreed) {
        if (since < c->lag) return false;
        while (c->here && pd__ckpt_writer_done(c->w) < c->last_taken && !pd__pipe_aborted(c->pipe)) {
            struct timespec nap = {0, 1000000};
            nanosleep(&nap, NULL);
        }
        double step, pause, persist;
        pd__costs(c, &step, &pause, &persist);
        memset(c->votes, 0, sizeof(double) * (size_t)c->o.processes);
        c->votes[c->o.rank] = (double)pd__ckpt_auto_every(step, pause, persist, c->o.overhead);
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

/* Is the state after step b to be taken? Called in order of b. */
static bool pd__due(pd__ckpol *c, int64_t b) {
    double now = pd__ms();
    if (b > c->b_prev) { /* the step time: the latest interval, smoothed */
        double dt = (now - c->t_prev) / (double)(b - c->b_prev);
        c->step_ms = c->step_ms > 0 ? 0.7 * c->step_ms + 0.3 * dt : dt;
        c->t_prev = now;
        c->b_prev = b;
    }
    if (c->o.every > 0) return b % c->o.every == 0;
    if (c->o.every == 0) return false;
    if (c->votes) return pd__due_dist(c, b);
    if (c->taken == 0) return b - c->first >= PD_AUTO_FIRST; /* the first measures what one costs */
    double step, pause, persist;
    if (!pd__costs(c, &step, &pause, &persist)) return false; /* the first one's costs are not known yet */
    c->every = pd__ckpt_auto_every(step, pause, persist, c->o.overhead);
    return b - c->last_taken >= c->every;
}

/* ---- pipeline ---- */

static bool pd__want(void *ctx, int64_t b) {
    pd__ckpol *c = (pd__ckpol *)ctx;
    int64_t step = c->offset + b;
    bool w = pd__due(c, step);
    if (w) c->last_taken = step, c->taken++;
    if (w && c->votes) c->agreed = false, c->lag = c->next_lag;
    return w;
}

static void pd__release_pipe(void *ctx) { pd__pipe_snap_release((pd__pipe *)ctx); }

/* The pipeline's parts of the state after `step`, to the writer. */
static void pd__submit_pipe(pd__ckpol *c, int64_t step) {
    for (int w = 0; w < c->nparts; w++) pd__pipe_snap_part(c->pipe, w, &c->part[w], &c->len[w]);
    pd__ckpt_writer_submit(c->w, step, c->info, c->nparts, c->part, c->len, pd__release_pipe, c->pipe);
}

static void pd__ready(void *ctx, int64_t b) {
    pd__ckpol *c = (pd__ckpol *)ctx;
    if (c->progress) c->progress(c->pctx, c->offset + b);
    pd__submit_pipe(c, c->offset + b);
}

pd_status pd__ckpol_attach(pd__ckpol *c, pd__pipe *p, int64_t offset, void (*progress)(void *ctx, int64_t step),
                           void *ctx) {
    int n = pd__pipe_stages(p);
    if (n > PD_CKPT_MAX_PARTS) return pd__err(PD_ERR_UNSUPPORTED, "checkpoints: more than %d stages", PD_CKPT_MAX_PARTS);
    if (n > 1) {
        PD_FREE(c->part);
        PD_FREE(c->len);
        c->part = (const void **)PD_CALLOC((size_t)n, sizeof *c->part);
        c->len = (size_t *)PD_CALLOC((size_t)n, sizeof *c->len);
        if (!c->part || !c->len) return pd__err(PD_ERR_NOMEM, "out of memory");
    }
    c->pipe = p;
    c->offset = offset;
    c->progress = progress;
    c->pctx = ctx;
    c->nparts = n;
    c->lag = c->next_lag = c->min_lag = pd__pipe_snap_gap(p) + 1;
    pd__pipe_snap_stats(p, &c->taken0, &c->pause_ms); /* an earlier run's (the trainer's calls) */
    pd__snap_hooks h = {pd__want, pd__ready, c};
    PD_TRY(pd__pipe_set_snap_hooks(p, &h));
    pd__pipe_watch_writer(p, c->w); /* under MPI a failed write stops the run everywhere */
    for (int w = 0; w < n; w++) {
        const void *d;
        size_t len;
        pd__pipe_snap_part(p, w, &d, &len);
        c->here += d != NULL;
    }
    return PD_OK;
}

/* ---- one stage ---- */

static void pd__release_buf(void *ctx) {
    pd__ckpol *c = (pd__ckpol *)ctx;
    pthread_mutex_lock(&c->mu);
    c->busy = false;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

/* Copies the session into the buffer (after the last snapshot is written) and hands it over. */
static pd_status pd__snap_session(pd__ckpol *c, pd_session *s, int64_t step) {
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
        if (!(c->buf.buf = (char *)PD_MALLOC(count.n))) {
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

pd_status pd__ckpol_session(pd__ckpol *c, pd_session *s, int64_t step) {
    if (!pd__due(c, step)) return PD_OK;
    c->last_taken = step;
    c->taken++;
    return pd__snap_session(c, s, step);
}

pd_status pd__ckpol_final(pd__ckpol *c, pd__pipe *p, pd_session *s, int64_t step) {
    if (c->last_taken == step && c->taken > 0) return PD_OK; /* just taken */
    if (s) return pd__snap_session(c, s, step);
    if (p != c->pipe) return pd__err(PD_ERR_INTERNAL, "pd__ckpol_final: not the pipeline attached");
    PD_TRY(pd__pipe_snap_capture(p));
    if (c->progress) c->progress(c->pctx, step);
    pd__submit_pipe(c, step);
    return PD_OK;
}

void pd__ckpol_cancel(pd__ckpol *c) {
    if (c) pd__ckpt_writer_cancel(c->w);
}

/* What checkpointing cost, as `pdonnx train` reports it. */
static void pd__summary(const pd__ckpol *c, double train_s, double pause, int64_t n, double persist, int64_t last,
                        char *out, size_t len) {
    char how[160];
    if (c->o.every < 0 && c->votes && c->every < 0)
        snprintf(how, sizeof how, "auto: the run ended before the %d processes agreed on an interval", c->o.processes);
    else if (c->o.every < 0 && c->votes)
        snprintf(how, sizeof how, "auto, agreed by the %d processes: every %lld steps at the end", c->o.processes,
                 (long long)c->every);
    else if (c->o.every < 0) snprintf(how, sizeof how, "auto: every %lld steps at the end", (long long)c->every);
    else if (c->o.every > 0) snprintf(how, sizeof how, "every %lld steps", (long long)c->o.every);
    else snprintf(how, sizeof how, "the final state");
    snprintf(out, len,
             "checkpoints: %lld written to %s (%s), the last at step %lld; snapshot pauses %.1f ms in all (%.2f%% of "
             "training), last persist %.1f ms",
             (long long)n, c->o.dir, how, (long long)last, pause, train_s > 0 ? 100 * pause / (1e3 * train_s) : 0.0,
             persist);
}

pd_status pd__ckpol_finish(pd__ckpol *c, double train_s, char *summary, size_t n) {
    if (!c) return PD_OK;
    double pause = c->pause_ms;
    if (c->pipe) {
        pd__pipe_snap_stats(c->pipe, NULL, &pause);
        pause -= c->pause_ms;
    }
    pd__ckpt_writer_drain(c->w);
    int64_t written = 0, last = 0;
    double persist = 0;
    pd__ckpt_writer_stats(c->w, &written, &persist, &last);
    pd_status st = pd__ckpt_writer_finish(c->w);
    if (st == PD_OK && summary && n) pd__summary(c, train_s, pause, written, persist, last, summary, n);
    pd__ckpol_free(c);
    return st;
}
