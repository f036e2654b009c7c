/* schedule.c - the schedule generator: per worker, the ordered instruction
 * list (F, B, W, SEND/RECV, ALLREDUCE, STEP) of every kind (GPipe, Flush,
 * PipeDream, 2BW, interleaved, zero-bubble H1, AvgPipe); validation of any
 * list, hand-made ones included; text and CSV output. Each kind is the order
 * of compute ops on one worker; the emitters add the receive before and the
 * send after each op that crosses a stage boundary, so communication mirrors
 * compute. docs/SCHEDULES.md gives the orders with examples. */
#include "schedule.h"

#include <string.h>

static const char *const pd__kind_names[] = {"gpipe", "flush", "pipedream", "2bw", "interleaved", "zb-h1", "avgpipe"};

pd_status pd__sched_kind_parse(const char *s, pd__sched_kind *out) {
    if (s && strcmp(s, "1f1b") == 0) s = "flush";
    for (int k = 0; s && k < (int)(sizeof pd__kind_names / sizeof *pd__kind_names); k++) {
        if (strcmp(s, pd__kind_names[k]) == 0) {
            *out = (pd__sched_kind)k;
            return PD_OK;
        }
    }
    return pd__err(PD_ERR_INVALID,
                   "unknown schedule '%s' (expected gpipe, flush (1f1b), pipedream, 2bw, interleaved, zb-h1 or avgpipe)",
                   s ? s : "(null)");
}

const char *pd__sched_kind_name(pd__sched_kind k) {
    return (unsigned)k < sizeof pd__kind_names / sizeof *pd__kind_names ? pd__kind_names[k] : "?";
}

bool pd__sched_async(pd__sched_kind k) { return k == PD_SCHED_PIPEDREAM || k == PD_SCHED_2BW; }

const char *pd__op_name(int op) {
    static const char *const names[] = {"F",         "B",         "W",         "SEND_ACT", "RECV_ACT",
                                        "SEND_GRAD", "RECV_GRAD", "ALLREDUCE", "STEP",     "SNAPSHOT"};
    return op >= 0 && op < (int)(sizeof names / sizeof *names) ? names[op] : "?";
}

/* ---- building ----------------------------------------------------------------- */

/* One worker's list under construction. */
typedef struct pd__bld {
    int p, v, s;    /* workers, chunks, this worker */
    bool allreduce; /* replicated: ALLREDUCE before STEP */
    pd__instr *ins;
    int n, cap;
    bool oom;
    int *fver; /* version each (chunk, mb)'s F used: fver[chunk * M + mb] (workers are built in turn) */
    int M;     /* microbatches in all */
    int rep;   /* replicas of this worker */
} pd__bld;

static void pd__emit(pd__bld *b, int op, int chunk, int mb, int version, int peer, int split) {
    if (b->oom) return;
    if (b->n == b->cap) {
        int cap = b->cap ? b->cap * 2 : 64;
        pd__instr *ni = (pd__instr *)PD_REALLOC(b->ins, sizeof(pd__instr) * (size_t)cap);
        if (!ni) {
            b->oom = true;
            return;
        }
        b->ins = ni;
        b->cap = cap;
    }
    pd__instr in = {(uint8_t)op, (uint8_t)split, (int16_t)chunk, mb, version, peer};
    b->ins[b->n++] = in;
}

/* F of mb on chunk with weight version `version`, between its receive and send. */
static void pd__F(pd__bld *b, int chunk, int mb, int version) {
    int k = chunk * b->p + b->s, last = b->p * b->v - 1;
    if (k > 0) pd__emit(b, PD_I_RECV_ACT, chunk, mb, -1, k - 1, 0);
    pd__emit(b, PD_I_F, chunk, mb, version, -1, 0);
    if (k < last) pd__emit(b, PD_I_SEND_ACT, chunk, mb, -1, k + 1, 0);
    b->fver[chunk * b->M + mb] = version;
}

/* B of mb on chunk (split: the weight gradient is a later W), with its F's version. */
static void pd__B(pd__bld *b, int chunk, int mb, bool split) {
    int k = chunk * b->p + b->s, last = b->p * b->v - 1;
    if (k < last) pd__emit(b, PD_I_RECV_GRAD, chunk, mb, -1, k + 1, 0);
    pd__emit(b, PD_I_B, chunk, mb, b->fver[chunk * b->M + mb], -1, split);
    if (k > 0) pd__emit(b, PD_I_SEND_GRAD, chunk, mb, -1, k - 1, 0);
}

static void pd__W(pd__bld *b, int chunk, int mb) { pd__emit(b, PD_I_W, chunk, mb, b->fver[chunk * b->M + mb], -1, 0); }

/* The update closing the microbatches up to `mb`, producing `version`. */
static void pd__STEP(pd__bld *b, int mb, int version) {
    if (b->allreduce) pd__emit(b, PD_I_ALLREDUCE, 0, mb, -1, -1, 0);
    pd__emit(b, PD_I_STEP, 0, mb, version, -1, 0);
}

static int pd__min(int a, int b) { return a < b ? a : b; }

/* GPipe: all forwards, then all backwards in reverse microbatch order (the
 * last forward's backward first, as GPipe's autograd does), then the update. */
static void pd__gpipe(pd__bld *b, int m, int N) {
    for (int t = 0; t < N; t++) {
        for (int i = 0; i < m; i++) pd__F(b, 0, t * m + i, t);
        for (int i = m - 1; i >= 0; i--) pd__B(b, 0, t * m + i, false);
        pd__STEP(b, t * m + m - 1, t + 1);
    }
}

/* 1F1B with a flush: min(p-s-1, m) warm-up forwards, then one forward and one
 * backward in turn, then the remaining backwards and the update. zb (ZB-H1):
 * B is split and W of microbatch k-s follows B of microbatch k, so worker s
 * defers s weight gradients into the cool-down, where 1F1B idles. depth: p
 * for 1F1B; AvgPipe's advance forward propagation is the same order with
 * depth = its in-flight bound L, i.e. min(L-s-1, m) warm-up forwards: L-p
 * forwards of later microbatches run ahead of 1F1B's warm-up on every stage,
 * so a stage has work queued while its activations and gradients travel,
 * and holds at most min(L-s, m) microbatches (AvgPipe, Chen et al., PPoPP
 * 2023, section "advance forward propagation"). */
static void pd__flush(pd__bld *b, int m, int N, bool zb, int depth) {
    int w = pd__min(depth - b->s - 1 > 0 ? depth - b->s - 1 : 0, m);
    for (int t = 0; t < N; t++) {
        int o = t * m, nw = 0;
        for (int i = 0; i < w; i++) pd__F(b, 0, o + i, t);
        for (int k = 0; k < m; k++) {
            if (k + w < m) pd__F(b, 0, o + k + w, t);
            pd__B(b, 0, o + k, zb);
            if (zb && k >= b->s) pd__W(b, 0, o + nw++);
        }
        while (zb && nw < m) pd__W(b, 0, o + nw++);
        pd__STEP(b, o + m - 1, t + 1);
    }
}

/* 1F1B without a flush over all M = m*N microbatches. pipedream: an update
 * after every backward; an F uses the latest version (the updates done so
 * far), its B the same stashed version. A pipedream worker with r replicas
 * (PipeDream's hybrid plans: replica j takes microbatches j, j+r, ... in
 * turn) updates once per round of r microbatches, after the backward of its
 * last (or of the run's last microbatch), with the round's gradients
 * averaged by the ALLREDUCE before it. 2bw: an update after the last
 * backward of every m microbatches; minibatch t's microbatches all use
 * version max(t-1, 0) (W(t+1) = W(t) - lr*grad f(W(t-1))); the warm-up is
 * capped at m so that at most two versions are ever live. */
static void pd__async(pd__bld *b, int m, int N, bool twobw) {
    int M = m * N, w = pd__min(b->p - b->s - 1, M), steps = 0;
    if (twobw) w = pd__min(w, m);
    for (int k = -w; k < M; k++) {
        int j = k + w;
        if (j < M) pd__F(b, 0, j, twobw ? (j / m > 0 ? j / m - 1 : 0) : steps);
        if (k < 0) continue;
        pd__B(b, 0, k, false);
        if (!twobw) {
            if (k % b->rep == b->rep - 1 || k == M - 1) pd__STEP(b, k, ++steps);
        }
        else if (k % m == m - 1)
            pd__STEP(b, k, k / m + 1);
    }
}

/* Megatron's interleaved 1F1B (forward_backward_pipelining_with_interleaving):
 * the i-th forward of a minibatch runs chunk (i mod pv) / p on microbatch
 * (i / pv) * p + i mod p, the i-th backward the same microbatch on the
 * mirrored chunk v-1-chunk; (p-s-1)*2 + (v-1)*p warm-up forwards (at most
 * m*v), then one forward and one backward in turn, then the cool-down. */
static void pd__interleaved(pd__bld *b, int m, int N) {
    int p = b->p, v = b->v, total = m * v;
    int w = pd__min((p - b->s - 1) * 2 + (v - 1) * p, total);
    for (int t = 0; t < N; t++) {
        int o = t * m;
        for (int i = -w; i < total; i++) {
            int j = i + w;
            if (j < total) pd__F(b, (j % (p * v)) / p, o + (j / (p * v)) * p + j % p, t);
            if (i >= 0) pd__B(b, v - 1 - (i % (p * v)) / p, o + (i / (p * v)) * p + i % p, false);
        }
        pd__STEP(b, o + m - 1, t + 1);
    }
}

void pd__schedule_free(pd__schedule *s) {
    if (!s) return;
    for (int i = 0; s->ins && i < s->n_stages; i++) PD_FREE(s->ins[i]);
    PD_FREE(s->ins);
    PD_FREE(s->len);
    PD_FREE(s);
}

int pd__avgpipe_default_inflight(int n_stages) { return n_stages + 1; }

static pd_status pd__build(pd__sched_kind kind, int n_stages, int chunks, int microbatches, int minibatches,
                           const int *replicas, int inflight, pd__schedule **out) {
    const char *name = pd__sched_kind_name(kind);
    if ((unsigned)kind > PD_SCHED_AVGPIPE) return pd__err(PD_ERR_INVALID, "schedule: unknown kind %d", (int)kind);
    if (kind == PD_SCHED_AVGPIPE && (inflight < 1 || inflight > 1 << 20))
        return pd__err(PD_ERR_INVALID, "avgpipe: at most %d microbatches in flight per stage (expected 1 to %d)",
                       inflight, 1 << 20);
    if (n_stages < 1 || n_stages > 4096)
        return pd__err(PD_ERR_INVALID, "%s: %d pipeline stages (expected 1 to 4096)", name, n_stages);
    if (microbatches < 1 || minibatches < 1)
        return pd__err(PD_ERR_INVALID, "%s: needs at least one microbatch and one minibatch (got %d and %d)", name,
                       microbatches, minibatches);
    if (kind == PD_SCHED_INTERLEAVED) {
        if (chunks < 2 || chunks > 1024)
            return pd__err(PD_ERR_INVALID, "interleaved: needs 2 to 1024 chunks per worker, got %d", chunks);
        if (microbatches % n_stages != 0)
            return pd__err(
                PD_ERR_INVALID,
                "interleaved: microbatches per minibatch (%d) must be a multiple of the pipeline stages (%d)",
                microbatches, n_stages);
    } else if (chunks != 1) {
        return pd__err(PD_ERR_INVALID, "%s: %d chunks per worker (only interleaved has more than one)", name, chunks);
    }
    int64_t M = (int64_t)microbatches * minibatches;
    if (M * chunks * n_stages > 100000000 || n_stages * chunks > INT16_MAX)
        return pd__err(PD_ERR_INVALID, "%s: %lld microbatches on %d stages is too large to schedule", name,
                       (long long)M, n_stages * chunks);
    for (int s = 0; replicas && s < n_stages; s++)
        if (replicas[s] < 1) return pd__err(PD_ERR_INVALID, "%s: stage %d has %d replicas", name, s, replicas[s]);

    pd__schedule *sc = (pd__schedule *)PD_MALLOC(sizeof *sc);
    if (!sc) return pd__err(PD_ERR_NOMEM, "schedule: out of memory");
    pd__schedule init = {kind, n_stages, chunks, microbatches, minibatches, NULL, NULL, 0};
    *sc = init;
    if (kind == PD_SCHED_AVGPIPE) sc->inflight = inflight;
    sc->len = (int *)PD_MALLOC(sizeof(int) * (size_t)n_stages);
    sc->ins = (pd__instr **)PD_MALLOC(sizeof(pd__instr *) * (size_t)n_stages);
    int *fver = (int *)PD_MALLOC(sizeof(int) * (size_t)(M * chunks));
    if (!sc->len || !sc->ins || !fver) {
        PD_FREE(fver);
        pd__schedule_free(sc);
        return pd__err(PD_ERR_NOMEM, "schedule: out of memory");
    }
    for (int s = 0; s < n_stages; s++) sc->ins[s] = NULL, sc->len[s] = 0;
    for (int s = 0; s < n_stages; s++) {
        pd__bld b = {n_stages, chunks, s, replicas && replicas[s] > 1, NULL, 0, 0, false, fver, (int)M,
                     replicas ? replicas[s] : 1};
        switch (kind) {
        case PD_SCHED_GPIPE: pd__gpipe(&b, microbatches, minibatches); break;
        case PD_SCHED_FLUSH: pd__flush(&b, microbatches, minibatches, false, n_stages); break;
        case PD_SCHED_ZB_H1: pd__flush(&b, microbatches, minibatches, true, n_stages); break;
        case PD_SCHED_AVGPIPE: pd__flush(&b, microbatches, minibatches, false, inflight); break;
        case PD_SCHED_PIPEDREAM: pd__async(&b, microbatches, minibatches, false); break;
        case PD_SCHED_2BW: pd__async(&b, microbatches, minibatches, true); break;
        case PD_SCHED_INTERLEAVED: pd__interleaved(&b, microbatches, minibatches); break;
        }
        sc->ins[s] = b.ins;
        sc->len[s] = b.n;
        if (b.oom) {
            PD_FREE(fver);
            pd__schedule_free(sc);
            return pd__err(PD_ERR_NOMEM, "schedule: out of memory");
        }
    }
    PD_FREE(fver);
    *out = sc;
    return PD_OK;
}

pd_status pd__schedule_build(pd__sched_kind kind, int n_stages, int chunks, int microbatches, int minibatches,
                             const int *replicas, pd__schedule **out) {
    return pd__build(kind, n_stages, chunks, microbatches, minibatches, replicas,
                     kind == PD_SCHED_AVGPIPE ? pd__avgpipe_default_inflight(n_stages) : 0, out);
}

pd_status pd__schedule_build_avgpipe(int n_stages, int microbatches, int minibatches, const int *replicas,
                                     int inflight, pd__schedule **out) {
    return pd__build(PD_SCHED_AVGPIPE, n_stages, 1, microbatches, minibatches, replicas, inflight, out);
}

/* ---- validation ------------------------------------------------------------------ */

/* What has happened to one (virtual stage, microbatch) on its worker. */
enum { PD__RA = 1, PD__F = 2, PD__SA = 4, PD__RG = 8, PD__B = 16, PD__W = 32, PD__SG = 64, PD__SPLIT = 128 };

static pd_status pd__bad(int s, int i, const pd__instr *in, const char *msg) {
    if (in->op == PD_I_STEP || in->op == PD_I_ALLREDUCE || in->op == PD_I_SNAPSHOT)
        return pd__err(PD_ERR_INVALID, "schedule: stage %d, instruction %d (%s): %s", s, i, pd__op_name(in->op), msg);
    return pd__err(PD_ERR_INVALID, "schedule: stage %d, instruction %d (%s mb %d, chunk %d): %s", s, i,
                   pd__op_name(in->op), (int)in->mb, (int)in->chunk, msg);
}

/* Instruction i of worker w (a microbatch's F, B, W or message, on virtual
 * stage k) against what its microbatch did before there: f its flags so
 * far, fv the version its F used; produced the newest version. */
static pd_status sched_check(const pd__schedule *s, int w, int i, const pd__instr *in, int k, uint8_t *f, int *fv,
                             int produced) {
    int V = s->n_stages * s->chunks;
    pd_status rc = PD_OK;
    bool comm = in->op >= PD_I_SEND_ACT && in->op <= PD_I_RECV_GRAD;
    int want = in->op == PD_I_SEND_ACT || in->op == PD_I_RECV_GRAD ? k + 1 : k - 1;
    if (comm && in->peer != want) {
        char msg[64];
        snprintf(msg, sizeof msg, "wrong peer stage %d (expected %d)", (int)in->peer, want);
        return pd__bad(w, i, in, msg);
    }
    switch (in->op) {
    case PD_I_RECV_ACT:
        if (k == 0)
            rc = pd__bad(w, i, in, "the first stage receives no activations");
        else if (*f & (PD__RA | PD__F))
            rc = pd__bad(w, i, in, "received after or twice");
        *f |= PD__RA;
        break;
    case PD_I_F:
        if (*f & PD__F)
            rc = pd__bad(w, i, in, "a second forward");
        else if (k > 0 && !(*f & PD__RA))
            rc = pd__bad(w, i, in, "no RECV_ACT before it");
        else if (in->version > produced || in->version < 0)
            rc = pd__bad(w, i, in, "uses a weight version not produced yet");
        *f |= PD__F;
        *fv = in->version;
        break;
    case PD_I_SEND_ACT:
        if (k == V - 1)
            rc = pd__bad(w, i, in, "the last stage sends no activations");
        else if (!(*f & PD__F) || (*f & PD__SA))
            rc = pd__bad(w, i, in, "not after its F, or twice");
        *f |= PD__SA;
        break;
    case PD_I_RECV_GRAD:
        if (k == V - 1)
            rc = pd__bad(w, i, in, "the last stage receives no gradients");
        else if (!(*f & PD__F) || (*f & (PD__RG | PD__B)))
            rc = pd__bad(w, i, in, "not between its F and its B, or twice");
        *f |= PD__RG;
        break;
    case PD_I_B:
        if (!(*f & PD__F))
            rc = pd__bad(w, i, in, "before its F");
        else if (*f & PD__B)
            rc = pd__bad(w, i, in, "a second backward");
        else if (k < V - 1 && !(*f & PD__RG))
            rc = pd__bad(w, i, in, "no RECV_GRAD before it");
        else if (in->version != *fv)
            rc = pd__bad(w, i, in, "uses another weight version than its F");
        *f |= PD__B | (in->split ? PD__SPLIT : 0);
        break;
    case PD_I_W:
        if (!(*f & PD__B) || !(*f & PD__SPLIT) || (*f & PD__W))
            rc = pd__bad(w, i, in, "not after a split B of its microbatch, or twice");
        else if (in->version != *fv)
            rc = pd__bad(w, i, in, "uses another weight version than its F");
        *f |= PD__W;
        break;
    case PD_I_SEND_GRAD:
        if (k == 0)
            rc = pd__bad(w, i, in, "the first stage sends no gradients");
        else if (!(*f & PD__B) || (*f & PD__SG))
            rc = pd__bad(w, i, in, "not after its B, or twice");
        *f |= PD__SG;
        break;
    }
    return rc;
}

/* Every microbatch ran completely on every virtual stage. */
static pd_status sched_check_complete(const pd__schedule *s, const uint8_t *st, int64_t M) {
    int p = s->n_stages, V = p * s->chunks;
    for (int k = 0; k < V; k++) {
        for (int64_t mb = 0; mb < M; mb++) {
            uint8_t f = st[(int64_t)k * M + mb];
            const char *miss = !(f & PD__F)                      ? "F"
                               : !(f & PD__B)                    ? "B"
                               : (f & PD__SPLIT) && !(f & PD__W) ? "W"
                               : k < V - 1 && !(f & PD__SA)      ? "SEND_ACT"
                               : k > 0 && !(f & PD__SG)          ? "SEND_GRAD"
                                                                 : NULL;
            if (miss)
                return pd__err(PD_ERR_INVALID, "schedule: stage %d (chunk %d) never runs %s of mb %lld", k % p, k / p,
                               miss, (long long)mb);
        }
    }
    return PD_OK;
}

pd_status pd__schedule_validate(const pd__schedule *s) {
    if (!s || s->n_stages < 1 || s->chunks < 1 || s->microbatches < 1 || s->minibatches < 1 || !s->len || !s->ins)
        return pd__err(PD_ERR_INVALID, "schedule: empty or malformed");
    int p = s->n_stages, v = s->chunks, V = p * v;
    int64_t M = (int64_t)s->microbatches * s->minibatches;
    if (M * V > 100000000) return pd__err(PD_ERR_INVALID, "schedule: too large to validate");
    uint8_t *st = (uint8_t *)PD_MALLOC((size_t)(M * V));
    int *ver = (int *)PD_MALLOC(sizeof(int) * (size_t)(M * V));
    if (!st || !ver) {
        PD_FREE(st);
        PD_FREE(ver);
        return pd__err(PD_ERR_NOMEM, "schedule: out of memory");
    }
    memset(st, 0, (size_t)(M * V));
    pd_status rc = PD_OK;
    for (int w = 0; w < p && rc == PD_OK; w++) {
        int produced = 0; /* newest weight version on this worker */
        for (int i = 0; i < s->len[w] && rc == PD_OK; i++) {
            const pd__instr *in = &s->ins[w][i];
            if (in->op > PD_I_SNAPSHOT) {
                rc = pd__bad(w, i, in, "unknown op");
            } else if (in->op == PD_I_STEP) {
                if (in->version <= produced) rc = pd__bad(w, i, in, "produces an old weight version");
                produced = in->version;
            } else if (in->op == PD_I_ALLREDUCE || in->op == PD_I_SNAPSHOT) {
                continue;
            } else if (in->chunk < 0 || in->chunk >= v || in->mb < 0 || in->mb >= M) {
                rc = pd__bad(w, i, in, "chunk or microbatch out of range");
            } else {
                int64_t at = (int64_t)(in->chunk * p + w) * M + in->mb;
                rc = sched_check(s, w, i, in, in->chunk * p + w, &st[at], &ver[at], produced);
            }
        }
    }
    if (rc == PD_OK) rc = sched_check_complete(s, st, M);
    PD_FREE(st);
    PD_FREE(ver);
    if (rc != PD_OK) return rc;
    return pd__schedule_replay(s, NULL, NULL, NULL);
}

/* ---- output ------------------------------------------------------------------------ */

pd_status pd__schedule_write(const pd__schedule *s, FILE *f, bool csv) {
    if (!s || !f) return pd__err(PD_ERR_INVALID, "pd__schedule_write: NULL argument");
    if (csv)
        fprintf(f, "stage,index,op,chunk,mb,version,peer\n");
    else if (s->chunks > 1)
        fprintf(f, "# %s: %d stages x %d chunks, %d microbatches x %d minibatches\n", pd__sched_kind_name(s->kind),
                s->n_stages, s->chunks, s->microbatches, s->minibatches);
    else if (s->kind == PD_SCHED_AVGPIPE)
        fprintf(f, "# %s: %d stages, %d microbatches x %d minibatches, at most %d in flight per stage\n",
                pd__sched_kind_name(s->kind), s->n_stages, s->microbatches, s->minibatches, s->inflight);
    else
        fprintf(f, "# %s: %d stages, %d microbatches x %d minibatches\n", pd__sched_kind_name(s->kind), s->n_stages,
                s->microbatches, s->minibatches);
    for (int w = 0; w < s->n_stages; w++) {
        if (!csv) fprintf(f, "stage %d:", w);
        for (int i = 0; i < s->len[w]; i++) {
            const pd__instr *in = &s->ins[w][i];
            if (csv) {
                fprintf(f, "%d,%d,%s,%d,%d,%d,%d\n", w, i, pd__op_name(in->op), (int)in->chunk, (int)in->mb,
                        (int)in->version, (int)in->peer);
            } else if (in->op == PD_I_F || in->op == PD_I_B || in->op == PD_I_W) {
                fprintf(f, " %s%d", pd__op_name(in->op), (int)in->mb);
                if (s->chunks > 1) fprintf(f, ".%d", (int)in->chunk);
            } else if (in->op == PD_I_STEP) {
                fprintf(f, " STEP");
            } else if (in->op == PD_I_ALLREDUCE) {
                fprintf(f, " AR");
            }
        }
        if (!csv) fprintf(f, "\n");
    }
    if (ferror(f)) return pd__err(PD_ERR_IO, "schedule: write failed");
    return PD_OK;
}

/* PipeDream's vertical sync: every stage runs microbatch k (forward and
 * backward) on weight version v, the version stage 0's forward of k used
 * (version = how many updates the stage has made), instead of its own latest;
 * a stage keeps the older versions it will still need. */
pd_status pd__schedule_vertical_sync(pd__schedule *s) {
    if (s->kind != PD_SCHED_PIPEDREAM)
        return pd__err(PD_ERR_INVALID, "vertical sync applies to the pipedream schedule, not %s", pd__sched_kind_name(s->kind));
    int nmb = 0;
    for (int k = 0; k < s->len[0]; k++)
        if (s->ins[0][k].mb >= nmb) nmb = s->ins[0][k].mb + 1;
    int32_t *v0 = (int32_t *)PD_MALLOC(sizeof(int32_t) * ((size_t)nmb + 1));
    if (!v0) return pd__err(PD_ERR_NOMEM, "out of memory");
    for (int k = 0; k < s->len[0]; k++)
        if (s->ins[0][k].op == PD_I_F) v0[s->ins[0][k].mb] = s->ins[0][k].version;
    for (int q = 0; q < s->n_stages; q++)
        for (int k = 0; k < s->len[q]; k++) {
            pd__instr *in = &s->ins[q][k];
            if ((in->op == PD_I_F || in->op == PD_I_B || in->op == PD_I_W) && in->mb >= 0 && in->mb < nmb)
                in->version = v0[in->mb];
        }
    PD_FREE(v0);
    return PD_OK;
}
