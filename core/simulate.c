/* simulate.c - the event simulator: replays a schedule's instruction lists
 * (the runtime's) with per-stage costs instead of kernels, then reports time
 * per minibatch, throughput, the bubble, busy times, peak activations and
 * weight versions, with a Chrome trace and an SVG timeline. A worker runs its
 * list in order; a RECV waits for its SEND's data; a SEND costs its worker
 * nothing, and one link's transfers in one direction go one after another
 * (send_ms each). A replicated stage is one worker with r times the
 * throughput. */
#include "schedule.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the replay ------------------------------------------------------------------ */

/* Link k (virtual stages k and k+1): channel 2k carries activations up, 2k+1 gradients down. */
static int pd__channel(const pd__instr *in, int k) {
    switch (in->op) {
    case PD_I_SEND_ACT: return 2 * k;
    case PD_I_RECV_ACT: return 2 * (k - 1);
    case PD_I_SEND_GRAD: return 2 * (k - 1) + 1;
    case PD_I_RECV_GRAD: return 2 * k + 1;
    default: return -1;
    }
}

typedef struct pd__sent {
    double arrive;
    int mb, stage, index;
} pd__sent;

static double pd__cost(const double *a, int k) { return a ? a[k] : 0; }

/* The replay's state: per channel its queue of sends (q, cap, nsent,
 * nrecv) and when its link is next free (chfree); per worker its next
 * instruction (pos) and clock (t); per stage, under recomputation, the
 * microbatch whose activations it holds (owner). */
typedef struct pd__replay {
    int p, V, nch;
    int *cap, *nsent, *nrecv, *pos, *owner;
    double *chfree, *t;
    pd__sent **q;
} pd__replay;

static void pd__replay_free(pd__replay *r) {
    for (int ch = 0; r->q && ch < r->nch; ch++) PD_FREE(r->q[ch]);
    PD_FREE(r->q);
    PD_FREE(r->cap);
    PD_FREE(r->nsent);
    PD_FREE(r->nrecv);
    PD_FREE(r->pos);
    PD_FREE(r->chfree);
    PD_FREE(r->t);
    PD_FREE(r->owner);
}

/* Allocates the state and sizes the channel queues by counting the sends,
 * checking each instruction's op, chunk and link on the way. */
static pd_status pd__replay_init(pd__replay *r, const pd__schedule *s) {
    int p = s->n_stages, V = p * s->chunks, nch = 2 * (V > 1 ? V - 1 : 0);
    memset(r, 0, sizeof *r);
    r->p = p, r->V = V, r->nch = nch;
    r->cap = (int *)PD_CALLOC((size_t)nch + 1, sizeof(int));
    r->nsent = (int *)PD_CALLOC((size_t)nch + 1, sizeof(int));
    r->nrecv = (int *)PD_CALLOC((size_t)nch + 1, sizeof(int));
    r->pos = (int *)PD_CALLOC((size_t)p, sizeof(int));
    r->chfree = (double *)PD_CALLOC((size_t)nch + 1, sizeof(double));
    r->t = (double *)PD_CALLOC((size_t)p, sizeof(double));
    r->owner = (int *)PD_MALLOC(sizeof(int) * ((size_t)V + 1));
    r->q = (pd__sent **)PD_CALLOC((size_t)nch + 1, sizeof(pd__sent *));
    if (!r->cap || !r->nsent || !r->nrecv || !r->pos || !r->chfree || !r->t || !r->q || !r->owner)
        return pd__err(PD_ERR_NOMEM, "simulate: out of memory");
    for (int k = 0; k < V; k++) r->owner[k] = -1;
    for (int w = 0; w < p; w++) {
        for (int i = 0; i < s->len[w]; i++) {
            const pd__instr *in = &s->ins[w][i];
            int k = in->chunk * p + w, ch = pd__channel(in, k);
            bool comm = in->op >= PD_I_SEND_ACT && in->op <= PD_I_RECV_GRAD;
            if (in->op > PD_I_SNAPSHOT || in->chunk < 0 || in->chunk >= s->chunks || (comm && (ch < 0 || ch >= nch)))
                return pd__err(PD_ERR_INVALID,
                               "schedule: stage %d, instruction %d (%s mb %d): op, chunk or link out of range", w, i,
                               pd__op_name(in->op), (int)in->mb);
            if (in->op == PD_I_SEND_ACT || in->op == PD_I_SEND_GRAD) r->cap[ch]++;
        }
    }
    for (int ch = 0; ch < nch; ch++)
        if (r->cap[ch] && !(r->q[ch] = (pd__sent *)PD_MALLOC(sizeof(pd__sent) * (size_t)r->cap[ch])))
            return pd__err(PD_ERR_NOMEM, "simulate: out of memory");
    return PD_OK;
}

/* Runs worker w's next instruction: *ran false when it is a receive whose
 * send has not happened yet. */
static pd_status pd__replay_op(pd__replay *r, const pd__schedule *s, const pd__sim_costs *c, int w, double **start,
                               double **end, bool *ran) {
    int i = r->pos[w];
    const pd__instr *in = &s->ins[w][i];
    int k = in->chunk * r->p + w, ch = pd__channel(in, k);
    double t0 = r->t[w], dur = 0;
    *ran = false;
    switch (in->op) {
    case PD_I_F: dur = c ? c->f_ms[k] : 0, r->owner[k] = in->mb; break;
    case PD_I_B: dur = c ? c->b_ms[k] + (in->split ? 0 : pd__cost(c->w_ms, k)) : 0; break;
    case PD_I_W: dur = c ? pd__cost(c->w_ms, k) : 0; break;
    case PD_I_ALLREDUCE: dur = c ? pd__cost(c->allreduce_ms, w) : 0; break;
    case PD_I_SEND_ACT:
    case PD_I_SEND_GRAD: {
        double x = c ? pd__cost(c->send_ms, ch / 2) : 0;
        double a = (t0 > r->chfree[ch] ? t0 : r->chfree[ch]) + x;
        r->chfree[ch] = a;
        pd__sent sent = {a, in->mb, w, i};
        r->q[ch][r->nsent[ch]++] = sent;
        break;
    }
    case PD_I_RECV_ACT:
    case PD_I_RECV_GRAD: {
        if (r->nrecv[ch] == r->nsent[ch]) return PD_OK;
        const pd__sent *e = &r->q[ch][r->nrecv[ch]++];
        if (e->mb != in->mb)
            return pd__err(PD_ERR_INVALID,
                           "schedule: stage %d, instruction %d (%s mb %d from stage %d): the matching send "
                           "(stage %d, instruction %d) carries mb %d",
                           w, i, pd__op_name(in->op), (int)in->mb, (int)in->peer, e->stage, e->index, e->mb);
        if (e->arrive > t0) t0 = e->arrive;
        break;
    }
    default: break;
    }
    if ((in->op == PD_I_B || in->op == PD_I_W) && c && c->in_bytes && r->owner[k] != in->mb)
        dur += c->f_ms[k], r->owner[k] = in->mb; /* the forward again first */
    if (start) start[w][i] = t0;
    if (end) end[w][i] = t0 + dur;
    r->t[w] = t0 + dur;
    *ran = true;
    return PD_OK;
}

/* After the replay: a worker left waiting is a deadlock, a send left in a
 * queue was never received. */
static pd_status pd__replay_leftovers(const pd__replay *r, const pd__schedule *s) {
    for (int w = 0; w < r->p; w++) {
        if (r->pos[w] < s->len[w]) {
            const pd__instr *in = &s->ins[w][r->pos[w]];
            return pd__err(PD_ERR_INVALID,
                           "schedule: stage %d, instruction %d (%s mb %d from stage %d) waits forever: no matching send "
                           "(deadlock)",
                           w, r->pos[w], pd__op_name(in->op), (int)in->mb, (int)in->peer);
        }
    }
    for (int ch = 0; ch < r->nch; ch++) {
        if (r->nrecv[ch] < r->nsent[ch]) {
            const pd__sent *e = &r->q[ch][r->nrecv[ch]];
            return pd__err(PD_ERR_INVALID, "schedule: stage %d, instruction %d (%s mb %d to stage %d): never received",
                           e->stage, e->index, pd__op_name(s->ins[e->stage][e->index].op), e->mb,
                           (int)s->ins[e->stage][e->index].peer);
        }
    }
    return PD_OK;
}

pd_status pd__schedule_replay(const pd__schedule *s, const pd__sim_costs *c, double **start, double **end) {
    pd__replay r;
    pd_status rc = pd__replay_init(&r, s);
    for (bool progress = rc == PD_OK; progress;) {
        progress = false;
        for (int w = 0; rc == PD_OK && w < r.p; w++) {
            bool ran = true;
            for (; rc == PD_OK && ran && r.pos[w] < s->len[w];) {
                rc = pd__replay_op(&r, s, c, w, start, end, &ran);
                if (ran) r.pos[w]++, progress = true;
            }
        }
        if (rc != PD_OK) progress = false;
    }
    if (rc == PD_OK) rc = pd__replay_leftovers(&r, s);
    pd__replay_free(&r);
    return rc;
}

/* ---- measuring ------------------------------------------------------------------- */

/* Asynchronous schedules: minibatches left out at each end of the steady-state
 * window (the pipeline fills within about V microbatches). */
static int pd__warm(int V, int m) { return (V + m - 1) / m + 1; }

static bool pd__compute(int op) { return op == PD_I_F || op == PD_I_B || op == PD_I_W; }

/* "F3", or "F3.1" (mb 3, chunk 1) when workers hold several chunks. */
static void pd__label(char *buf, size_t n, const pd__schedule *s, const pd__instr *in) {
    if (s->chunks > 1)
        snprintf(buf, n, "%s%d.%d", pd__op_name(in->op), (int)in->mb, (int)in->chunk);
    else
        snprintf(buf, n, "%s%d", pd__op_name(in->op), (int)in->mb);
}

/* Walks worker w's list in order: in-flight microbatches (F done, last
 * backward op not) and live weight versions (those in-flight microbatches
 * use, plus the newest). Fills the peaks; with a trace, emits counters. */
static pd_status pd__memory(const pd__schedule *s, const pd__sim_costs *c, int w, double *const *en, int max_version,
                            pd_sim_stage *out, pd__trace *trace) {
    int *ref = (int *)PD_CALLOC((size_t)max_version + 1, sizeof(int));
    if (!ref) return pd__err(PD_ERR_NOMEM, "simulate: out of memory");
    int p = s->n_stages, count = 0, live = 0, current = 0;
    double bytes = 0, params = 0;
    int *held = (int *)PD_CALLOC((size_t)s->chunks + 1, sizeof(int)); /* per chunk: microbatches in flight */
    if (!held) {
        PD_FREE(ref);
        return pd__err(PD_ERR_NOMEM, "simulate: out of memory");
    }
    for (int ch = 0; ch < s->chunks; ch++) params += pd__cost(c->param_bytes, ch * p + w);
    out->peak_act_mbs = 0, out->peak_act_bytes = 0, out->peak_versions = 1;
    for (int i = 0; i < s->len[w]; i++) {
        const pd__instr *in = &s->ins[w][i];
        int k = in->chunk * p + w, v = in->version;
        /* per microbatch its activations, or under recomputation what it received */
        double per_mb = c->in_bytes ? c->in_bytes[k] : pd__cost(c->act_bytes, k);
        if (in->op == PD_I_F) {
            count++, bytes += per_mb, held[in->chunk]++;
            if (v >= 0 && v <= max_version && ref[v]++ == 0) live++;
        } else if (in->op == PD_I_W || (in->op == PD_I_B && !in->split)) {
            count--, bytes -= per_mb, held[in->chunk]--;
            if (v >= 0 && v <= max_version && --ref[v] == 0) live--;
        } else if (in->op == PD_I_STEP) {
            current = v;
        } else {
            continue;
        }
        int versions = live + (current >= 0 && current <= max_version && ref[current] == 0);
        double all = bytes; /* recomputation: plus one microbatch's rest per chunk with one in flight */
        for (int ch = 0; c->in_bytes && ch < s->chunks; ch++)
            if (held[ch] > 0) all += pd__cost(c->act_bytes, ch * p + w);
        if (count > out->peak_act_mbs) out->peak_act_mbs = count;
        if (all > out->peak_act_bytes) out->peak_act_bytes = all;
        if (versions > out->peak_versions) out->peak_versions = versions;
        if (trace) {
            char name[32], args[96];
            snprintf(name, sizeof name, "memory stage %d", w);
            snprintf(args, sizeof args, "\"activations\":%.0f,\"weights\":%.0f", all > 0 ? all : 0,
                     versions * params);
            pd__trace_counter(trace, name, en[w][i] * 1000, 0, args);
        }
    }
    PD_FREE(ref);
    PD_FREE(held);
    return PD_OK;
}

static void pd__trace_events(const pd__schedule *s, double *const *st, double *const *en, pd__trace *t) {
    char name[64], args[96];
    snprintf(name, sizeof name, "pdonnx simulate: %s", pd__sched_kind_name(s->kind));
    pd__trace_name(t, 0, -1, name);
    for (int w = 0; w < s->n_stages; w++) {
        snprintf(name, sizeof name, "stage %d", w);
        pd__trace_name(t, 0, w, name);
    }
    for (int w = 0; w < s->n_stages; w++) {
        for (int i = 0; i < s->len[w]; i++) {
            const pd__instr *in = &s->ins[w][i];
            double ts = st[w][i] * 1000, dur = (en[w][i] - st[w][i]) * 1000;
            if (pd__compute(in->op)) {
                const char *cat = in->op == PD_I_F ? "forward" : in->op == PD_I_B ? "backward" : "weight-gradient";
                pd__label(name, sizeof name, s, in);
                snprintf(args, sizeof args, "\"mb\":%d,\"chunk\":%d,\"version\":%d", (int)in->mb, (int)in->chunk,
                         (int)in->version);
                pd__trace_event(t, name, cat, ts, dur, 0, w, args);
            } else if (in->op == PD_I_ALLREDUCE && en[w][i] > st[w][i]) {
                pd__trace_event(t, "allreduce", "allreduce", ts, dur, 0, w, NULL);
            } else if (in->op == PD_I_STEP) {
                snprintf(args, sizeof args, "\"version\":%d", (int)in->version);
                pd__trace_event(t, "step", "step", ts, -1, 0, w, args);
            }
        }
    }
}

/* 1, 2 or 5 times a power of ten, about x/8. */
static double pd__tick(double x) {
    double e = pow(10, floor(log10(x / 8))), r = x / 8 / e;
    return e * (r < 1.5 ? 1 : r < 3.5 ? 2 : r < 7.5 ? 5 : 10);
}

static void pd__svg(const pd__schedule *s, double *const *st, double *const *en, const pd_sim_result *r, FILE *f) {
    const double left = 70, width = 1000, top = 34, row = 26, gap = 6;
    int p = s->n_stages;
    double span = r->makespan_ms > 0 ? r->makespan_ms : 1, sx = width / span, axis = top + p * (row + gap) + 4;
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" "
            "font-size=\"11\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n",
            left + width + 30, axis + 56);
    char chunks[32] = "";
    if (s->chunks > 1) snprintf(chunks, sizeof chunks, " x %d chunks", s->chunks);
    fprintf(f,
            "<text x=\"%.0f\" y=\"20\" font-size=\"13\">%s: %d stages%s, %d microbatches x %d minibatches; "
            "%.4g ms per minibatch, bubble %.1f%%</text>\n",
            left, pd__sched_kind_name(s->kind), p, chunks, s->microbatches, s->minibatches, r->time_ms,
            100 * r->bubble);
    for (int w = 0; w < p; w++) {
        double y = top + w * (row + gap);
        fprintf(f, "<text x=\"8\" y=\"%.1f\">stage %d</text>\n", y + row / 2 + 4, w);
        for (int i = 0; i < s->len[w]; i++) {
            const pd__instr *in = &s->ins[w][i];
            if (!pd__compute(in->op) && in->op != PD_I_ALLREDUCE) continue;
            double x = left + st[w][i] * sx, dx = (en[w][i] - st[w][i]) * sx;
            if (dx <= 0) continue;
            const char *fill = in->op == PD_I_F           ? "#4e79a7"
                               : in->op == PD_I_W         ? "#f28e2b"
                               : in->op == PD_I_ALLREDUCE ? "#9c9c9c"
                               : in->split                ? "#76b7b2"
                                                          : "#59a14f";
            double shade = s->chunks > 1 ? 1 - 0.45 * in->chunk / (s->chunks - 1) : 1;
            fprintf(f,
                    "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.0f\" fill=\"%s\" fill-opacity=\"%.2f\" "
                    "stroke=\"#fff\" stroke-width=\"0.5\"/>\n",
                    x, y, dx, row, fill, shade);
            if (dx >= 12 && in->op != PD_I_ALLREDUCE)
                fprintf(f, "<text x=\"%.2f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"10\">%d</text>\n",
                        x + dx / 2, y + row / 2 + 4, (int)in->mb);
        }
    }
    fprintf(f, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#000\"/>\n", left, axis, left + width,
            axis);
    double tick = pd__tick(span);
    for (int i = 0; i * tick <= span * (1 + 1e-9); i++) {
        double x = left + i * tick * sx;
        fprintf(f, "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"#000\"/>\n", x, axis, x, axis + 5);
        fprintf(f, "<text x=\"%.2f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n", x, axis + 17, i * tick);
    }
    fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">ms</text>\n", left + width + 25, axis + 17);
    const char *key[][2] = {{"#4e79a7", "F forward"},
                            {"#59a14f", "B backward"},
                            {"#76b7b2", "B input gradient"},
                            {"#f28e2b", "W weight gradient"},
                            {"#9c9c9c", "all-reduce"}};
    for (int i = 0; i < 5; i++)
        fprintf(f,
                "<rect x=\"%.0f\" y=\"%.1f\" width=\"10\" height=\"10\" fill=\"%s\"/><text x=\"%.0f\" "
                "y=\"%.1f\">%s</text>\n",
                left + 150 * i, axis + 30, key[i][0], left + 150 * i + 14, axis + 39, key[i][1]);
    fprintf(f, "</svg>\n");
}

static double pd__overlap(double a, double b, double lo, double hi) {
    double x = (b < hi ? b : hi) - (a > lo ? a : lo);
    return x > 0 ? x : 0;
}

pd_status pd__simulate_costs(const pd__schedule *s, const pd__sim_costs *c, pd_sim_result *out, FILE *trace,
                             FILE *svg) {
    if (!s || !c || !c->f_ms || !c->b_ms || !out)
        return pd__err(PD_ERR_INVALID, "simulate: NULL schedule, costs or result");
    PD_TRY(pd__schedule_validate(s));
    int p = s->n_stages, V = p * s->chunks, m = s->microbatches, N = s->minibatches;
    const double *arr[] = {c->f_ms, c->b_ms, c->w_ms, c->send_ms, c->act_bytes, c->param_bytes};
    const char *names[] = {"forward", "backward", "weight-gradient", "send", "activation bytes", "parameter bytes"};
    for (int a = 0; a < 6; a++)
        for (int k = 0; arr[a] && k < V; k++)
            if (!isfinite(arr[a][k]) || arr[a][k] < 0)
                return pd__err(PD_ERR_INVALID, "simulate: virtual stage %d: %s cost %g is not a finite value >= 0", k,
                               names[a], arr[a][k]);
    for (int w = 0; c->allreduce_ms && w < p; w++)
        if (!isfinite(c->allreduce_ms[w]) || c->allreduce_ms[w] < 0)
            return pd__err(PD_ERR_INVALID, "simulate: stage %d: all-reduce cost %g is not a finite value >= 0", w,
                           c->allreduce_ms[w]);

    pd_status rc = PD_OK;
    pd__trace tr = {trace, false}, *tp = trace ? &tr : NULL;
    double **st = (double **)PD_CALLOC((size_t)p, sizeof(double *)), **en = (double **)PD_CALLOC((size_t)p, sizeof(double *));
    double *done = (double *)PD_CALLOC((size_t)N, sizeof(double));
    pd_sim_stage *stage = (pd_sim_stage *)PD_CALLOC((size_t)p, sizeof(pd_sim_stage));
    bool ok = st && en && done && stage;
    double makespan, lo, hi, time_ms, busy;
    int max_version;
    pd_sim_result r;
    for (int w = 0; ok && w < p; w++) {
        st[w] = (double *)PD_MALLOC(sizeof(double) * (size_t)(s->len[w] + 1));
        en[w] = (double *)PD_MALLOC(sizeof(double) * (size_t)(s->len[w] + 1));
        ok = st[w] && en[w];
    }
    if (!ok) {
        rc = pd__err(PD_ERR_NOMEM, "simulate: out of memory");
        goto out;
    }
    if ((rc = pd__schedule_replay(s, c, st, en)) != PD_OK) goto out;

    /* makespan, minibatch completions, the newest weight version */
    makespan = 0;
    max_version = 0;
    for (int w = 0; w < p; w++) {
        for (int i = 0; i < s->len[w]; i++) {
            const pd__instr *in = &s->ins[w][i];
            if (en[w][i] > makespan) makespan = en[w][i];
            if (in->version > max_version) max_version = in->version;
            int t = in->mb >= 0 ? in->mb / m : -1;
            if (t >= 0 && t < N && in->op != PD_I_SEND_ACT && in->op != PD_I_SEND_GRAD && en[w][i] > done[t])
                done[t] = en[w][i];
        }
    }
    /* the measured window: the whole run, or for asynchronous schedules from the
     * completion of minibatch a to that of b, leaving out fill and drain */
    lo = 0, hi = makespan, time_ms = makespan / N;
    if (pd__sched_async(s->kind) && N >= 2) {
        int a = pd__warm(V, m), b;
        if (a > (N - 2) / 2) a = (N - 2) / 2;
        b = N - 1 - a;
        lo = done[a], hi = done[b], time_ms = (hi - lo) / (b - a);
    }
    busy = 0;
    for (int w = 0; w < p; w++) {
        for (int i = 0; i < s->len[w]; i++) {
            if (!pd__compute(s->ins[w][i].op)) continue;
            stage[w].busy_ms += en[w][i] - st[w][i];
            busy += pd__overlap(st[w][i], en[w][i], lo, hi);
        }
    }
    if (trace) fputs("[\n", trace);
    if (trace) pd__trace_events(s, st, en, tp);
    for (int w = 0; w < p && rc == PD_OK; w++) rc = pd__memory(s, c, w, en, max_version, &stage[w], tp);
    if (rc != PD_OK) goto out;
    if (trace) fputs("\n]\n", trace);

    memset(&r, 0, sizeof r);
    r.time_ms = time_ms;
    r.makespan_ms = makespan;
    r.throughput = time_ms > 0 ? m / (time_ms / 1000) : 0;
    r.bubble = hi > lo ? 1 - busy / (p * (hi - lo)) : 0;
    if (r.bubble < 0) r.bubble = 0;
    r.n_stages = p;
    r.stage = stage;
    if (svg) pd__svg(s, st, en, &r, svg);
    if ((trace && ferror(trace)) || (svg && ferror(svg))) {
        rc = pd__err(PD_ERR_IO, "simulate: writing the trace or timeline failed");
        goto out;
    }
    *out = r;
    stage = NULL;
out:
    for (int w = 0; w < p && st; w++) PD_FREE(st[w]);
    for (int w = 0; w < p && en; w++) PD_FREE(en[w]);
    PD_FREE(st);
    PD_FREE(en);
    PD_FREE(done);
    PD_FREE(stage);
    return rc;
}

pd_status pd__simulate_schedule(const pd__schedule *s, const double *f_ms, const double *b_ms, const double *w_ms,
                                const double *send_ms, const double *act_bytes, const double *param_bytes,
                                pd_sim_result *out, FILE *trace) {
    pd__sim_costs c = {f_ms, b_ms, w_ms, send_ms, NULL, act_bytes, param_bytes, NULL};
    return pd__simulate_costs(s, &c, out, trace, NULL);
}

void pd_sim_result_free(pd_sim_result *r) {
    if (!r) return;
    PD_FREE(r->stage);
    r->stage = NULL;
    r->n_stages = 0;
}

/* ---- plans ------------------------------------------------------------------------ */

void pd__sim_plan_free(pd__sim_plan *sp) {
    if (!sp) return;
    pd__schedule_free(sp->sched);
    PD_FREE(sp->f_ms);
    PD_FREE(sp->b_ms);
    PD_FREE(sp->w_ms);
    PD_FREE(sp->send_ms);
    PD_FREE(sp->act_bytes);
    PD_FREE(sp->in_bytes);
    PD_FREE(sp->param_bytes);
    PD_FREE(sp->allreduce_ms);
    PD_FREE(sp->replicas);
    memset(sp, 0, sizeof *sp);
}

pd_status pd__sim_plan_make(const pd_plan *pl, const pd_sim_options *opt, pd__sim_plan *out) {
    pd_sim_options o = PD_SIM_OPTIONS_INIT;
    PD_TRY(pd__opts_read(&o, opt, sizeof o, "pd_simulate: opt"));
    if (!pl || !out) return pd__err(PD_ERR_INVALID, "pd_simulate: NULL plan or result");
    pd__sched_kind kind = PD_SCHED_FLUSH; /* set by the parse; initialized for -Wmaybe-uninitialized in the amalgamation */
    PD_TRY(pd__sched_kind_parse(o.schedule ? o.schedule : "flush", &kind));
    int pc = pl->chunks > 0 ? pl->chunks : 1;
    if (pl->n_stages < 1 || !pl->stage || pl->n_stages % pc != 0)
        return pd__err(PD_ERR_INVALID, "pd_simulate: the plan has %d stages in %d chunks per worker", pl->n_stages, pc);
    int p = pl->n_stages / pc, v = pc;
    bool split = false;
    if (kind == PD_SCHED_INTERLEAVED && pc == 1) {
        v = o.chunks, split = true;
        if (v < 2) return pd__err(PD_ERR_INVALID, "pd_simulate: interleaved needs at least 2 chunks, got %d", v);
    } else if (kind != PD_SCHED_INTERLEAVED && pc > 1) {
        return pd__err(PD_ERR_INVALID,
                       "pd_simulate: the plan has %d chunks per worker: only the interleaved schedule runs it", pc);
    }
    if (o.microbatches < 0 || o.minibatches < 0)
        return pd__err(PD_ERR_INVALID, "pd_simulate: negative microbatch or minibatch count");
    int m = o.microbatches > 0 ? o.microbatches : pl->microbatches > 0 ? pl->microbatches : 1;
    int N = o.minibatches > 0 ? o.minibatches : pd__sched_async(kind) ? 2 * pd__warm(p * v, m) + 8 : 1;
    int V = p * v;
    pd__sim_plan sp;
    memset(&sp, 0, sizeof sp);
    sp.f_ms = (double *)PD_CALLOC((size_t)V, sizeof(double));
    sp.b_ms = (double *)PD_CALLOC((size_t)V, sizeof(double));
    sp.w_ms = (double *)PD_CALLOC((size_t)V, sizeof(double));
    sp.send_ms = (double *)PD_CALLOC((size_t)V, sizeof(double));
    sp.act_bytes = (double *)PD_CALLOC((size_t)V, sizeof(double));
    sp.param_bytes = (double *)PD_CALLOC((size_t)V, sizeof(double));
    sp.allreduce_ms = (double *)PD_CALLOC((size_t)p, sizeof(double));
    sp.replicas = (int *)PD_CALLOC((size_t)p, sizeof(int));
    if (pl->recompute && !(sp.in_bytes = (double *)PD_CALLOC((size_t)V, sizeof(double)))) {
        pd__sim_plan_free(&sp);
        return pd__err(PD_ERR_NOMEM, "pd_simulate: out of memory");
    }
    if (!sp.f_ms || !sp.b_ms || !sp.w_ms || !sp.send_ms || !sp.act_bytes || !sp.param_bytes || !sp.allreduce_ms ||
        !sp.replicas) {
        pd__sim_plan_free(&sp);
        return pd__err(PD_ERR_NOMEM, "pd_simulate: out of memory");
    }
    /* the wrap-around link of a split plan (last worker -> first) costs as the dearest real link */
    double wrap = 0;
    for (int s = 0; s + 1 < p; s++)
        if (pl->stage[s].send_ms > wrap) wrap = pl->stage[s].send_ms;
    for (int k = 0; k < V; k++) {
        int w = k % p;
        const pd__stage *g = split ? &pl->stage[w] : &pl->stage[k];
        double r = g->replicas > 0 ? g->replicas : 1, d = split ? v : 1;
        sp.f_ms[k] = g->fwd_ms / d / r;
        sp.b_ms[k] = g->bwd_in_ms / d / r;
        sp.w_ms[k] = g->bwd_w_ms / d / r;
        sp.act_bytes[k] = g->act_bytes / d;
        if (sp.in_bytes) sp.in_bytes[k] = g->in_bytes / d;
        sp.param_bytes[k] = g->param_bytes / d;
        sp.send_ms[k] = k + 1 == V ? 0 : !split ? g->send_ms : w + 1 < p ? g->send_ms : wrap;
        if ((int)r > sp.replicas[w]) sp.replicas[w] = (int)r;
        /* pipedream's replicas take microbatches in turn and update once per round: one ALLREDUCE a round */
        if (!split || k < p) sp.allreduce_ms[w] += g->allreduce_ms;
    }
    sp.split_chunks = split;
    int width = pl->width > 0 ? pl->width : 1;
    int64_t mbs = pl->microbatch_size > 0 ? pl->microbatch_size : 1;
    sp.samples = mbs * m * width;
    /* copies of a stage all-reduce: its replicas and, with parallel pipelines, their twins */
    int *copies = (int *)PD_MALLOC(sizeof(int) * (size_t)p);
    if (!copies) {
        pd__sim_plan_free(&sp);
        return pd__err(PD_ERR_NOMEM, "pd_simulate: out of memory");
    }
    for (int w = 0; w < p; w++) copies[w] = sp.replicas[w] * width;
    pd_status rc = pd__schedule_build(kind, p, v, m, N, copies, &sp.sched);
    PD_FREE(copies);
    if (rc != PD_OK) {
        pd__err_prefix("pd_simulate");
        pd__sim_plan_free(&sp);
        return rc;
    }
    *out = sp;
    return PD_OK;
}

/* A temporary file beside `path`, renamed into place when the write succeeded. */
static FILE *pd__open_tmp(const char *path, char *tmp, size_t n, pd_status *rc) {
    if (!path) return NULL;
    FILE *f = NULL;
    if ((*rc = pd__check_dest(path)) != PD_OK) return NULL;
    if ((size_t)snprintf(tmp, n, "%s.tmp", path) >= n)
        *rc = pd__err(PD_ERR_IO, "%s: path too long", path);
    else if (!(f = fopen(tmp, "w")))
        *rc = pd__err(PD_ERR_IO, "%s: %s", path, strerror(errno));
    return f;
}

static pd_status pd__close_tmp(FILE *f, const char *tmp, const char *path, pd_status rc) {
    if (!f) return rc;
    bool ok = fclose(f) == 0;
    if (rc == PD_OK && (!ok || rename(tmp, path) != 0))
        rc = pd__err(PD_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    if (rc != PD_OK) remove(tmp);
    return rc;
}

pd_status pd_simulate(const pd_plan *p, const pd_sim_options *opt, pd_sim_result *out) {
    pd_sim_options o = PD_SIM_OPTIONS_INIT;
    PD_TRY(pd__opts_read(&o, opt, sizeof o, "pd_simulate: opt"));
    if (!out) return pd__err(PD_ERR_INVALID, "pd_simulate: NULL result");
    pd__sim_plan sp;
    PD_TRY(pd__sim_plan_make(p, &o, &sp));
    pd__sim_costs c = {sp.f_ms, sp.b_ms, sp.w_ms, sp.send_ms, sp.allreduce_ms, sp.act_bytes, sp.param_bytes, sp.in_bytes};
    char ttmp[4096], stmp[4096];
    pd_status rc = PD_OK;
    FILE *ft = pd__open_tmp(o.trace, ttmp, sizeof ttmp, &rc);
    FILE *fs = rc == PD_OK ? pd__open_tmp(o.svg, stmp, sizeof stmp, &rc) : NULL;
    pd_sim_result r;
    memset(&r, 0, sizeof r);
    if (rc == PD_OK) rc = pd__simulate_costs(sp.sched, &c, &r, ft, fs);
    rc = pd__close_tmp(ft, ttmp, o.trace, rc);
    rc = pd__close_tmp(fs, stmp, o.svg, rc);
    if (rc == PD_OK) {
        r.throughput = r.time_ms > 0 ? (double)sp.samples / (r.time_ms / 1000) : 0;
        *out = r;
    } else {
        pd_sim_result_free(&r);
    }
    pd__sim_plan_free(&sp);
    return rc;
}
