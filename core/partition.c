/* partition.c - the planners: cut a profiled DAG into pipeline stages.
 *   pipedream    PipeDream's dynamic programme over cut states and per-stage
 *                replication (cost models "pipedream", number for number
 *                PipeDream's optimizer, and "default", which counts transfers)
 *   2bw          PipeDream-2BW: d x w equal-width pipelines under a memory limit
 *   bipartition  separate forward and backward cut points per worker
 *   uniform      equal node counts;  params  equal parameter bytes
 *   avgpipe      AvgPipe's tuner: K pipelines and the microbatch count
 * Every plan is then evaluated the same way (pd__plan_evaluate). The cost
 * models and the bisection: docs/INTERNALS.md, "core/partition.c". */
#include "plan.h"
#include "schedule.h"

#include <math.h>
#include <string.h>

static inline double pd__max(double a, double b) { return a > b ? a : b; }

typedef struct pd__ctx {
    const pd_profile *p;
    const pd_plan_options *o;
    bool pd_model;          /* cost model "pipedream" */
    int levels;
    int lw[8];              /* workers per level, innermost first */
    double lb[8];           /* bandwidth per level, bytes/s */
    int workers;
    double mem;             /* per-worker limit, 0 = none */
    double compress;
    bool twobw;             /* memory as 2BW keeps it: two weight versions, no per-microbatch stash */
    bool recompute;         /* 2BW with activation recomputation: the backward redoes the forward */
} pd__ctx;

/* A stage candidate between cut states a and b. */
typedef struct pd__range {
    double c, w, act, opt, in, out; /* compute ms, param, act, optim, bytes in/out */
} pd__range;

static pd__range pd__rng(const pd__ctx *x, const pd__cuts *c, int a, int b) {
    pd__range r;
    r.c = (c->fwd[b] - c->fwd[a]) * (x->recompute ? 2 : 1) + (c->bwd_in[b] - c->bwd_in[a]) + (c->bwd_w[b] - c->bwd_w[a]);
    r.w = c->param[b] - c->param[a];
    r.act = c->act[b] - c->act[a];
    r.opt = c->optim[b] - c->optim[a];
    r.in = c->cross_bytes[a];
    r.out = b == c->n_states - 1 ? 0 : c->cross_bytes[b];
    return r;
}

/* ---- the default model's stage cost -------------------------------------------- */

/* Per-worker memory of a stage replica with `down` workers after it: weights,
 * gradients and optimizer state, plus, for each microbatch in flight
 * (ceil(down/r) + 1 under 1F1B), its activations and (PipeDream) a stashed
 * weight version; 2BW keeps two versions instead, and with recomputation
 * stashes only each microbatch's stage input plus one microbatch's
 * activations. */
static double pd__stage_mem(const pd__ctx *x, const pd__range *g, int r, int down) {
    double inflight = ceil((double)down / r) + 1;
    if (x->twobw)
        return 3 * g->w + g->opt + (x->recompute ? inflight * g->in + g->act : inflight * g->act);
    return 2 * g->w + g->opt + inflight * g->act + (inflight - 1) * g->w;
}

/* Time per microbatch of a stage replicated r ways: compute plus the gradient
 * all-reduce, or the boundary transfers when they take longer. */
static double pd__stage_time(const pd__range *g, int r, double bw) {
    double wt = 4.0 * g->w / bw * 1e3;
    double t = (g->c + wt - wt / r) / r;
    double x = 2.0 * pd__max(g->in, g->out) / bw * 1e3 / r;
    return pd__max(t, x);
}

/* The fewest replicas for which the stage meets time T and the memory limit
 * with `down` workers after it; INT32_MAX when none up to `left`. */
static int pd__min_replicas(const pd__ctx *x, const pd__range *g, double T, int down, int left) {
    double bw = x->lb[0];
    if (left < 1) return INT32_MAX;
    bool mem_ok1 = x->mem <= 0 || pd__stage_mem(x, g, 1, down) <= x->mem;
    if (mem_ok1 && pd__stage_time(g, 1, bw) <= T) return 1;
    if (x->o->straight || left < 2) return INT32_MAX;
    double r = 2;
    /* compute: T r^2 - (C + 4W') r + 4W' >= 0 for r above the larger root */
    double wt = 4.0 * g->w / bw * 1e3, a = g->c + wt;
    if (T <= 0) return INT32_MAX;
    double disc = a * a - 4 * T * wt;
    if (disc > 0) r = pd__max(r, ceil((a + sqrt(disc)) / (2 * T) - 1e-9));
    /* transfers */
    double xt = 2.0 * pd__max(g->in, g->out) / bw * 1e3;
    r = pd__max(r, ceil(xt / T - 1e-9));
    /* memory: ceil(down/r) <= q */
    if (x->mem > 0) {
        double q = floor((x->mem - 2 * g->w - g->opt - g->act) / (g->act + g->w));
        if (q < 0) return INT32_MAX;
        if (q == 0) {
            if (down > 0) return INT32_MAX;
        } else {
            r = pd__max(r, ceil(down / q));
        }
    }
    if (r > left) return INT32_MAX;
    /* the closed forms round up; settle on the exact smallest r by checking */
    int ri = (int)r;
    while (ri > 2 && pd__stage_time(g, ri - 1, bw) <= T && (x->mem <= 0 || pd__stage_mem(x, g, ri - 1, down) <= x->mem))
        ri--;
    for (int k = 0; k < 3 && ri <= left; k++, ri++)
        if (pd__stage_time(g, ri, bw) <= T && (x->mem <= 0 || pd__stage_mem(x, g, ri, down) <= x->mem)) return ri;
    return INT32_MAX;
}

/* Suffix DP at bottleneck T: need[a] = fewest workers for the stages after cut
 * a; choice[a] = (next cut, replicas). Returns need[0]. */
static int pd__feasible(const pd__ctx *x, const pd__cuts *c, const int *sstart, const int *succ, const double *tot,
                        double T, int *need, int *nxt, int *rep) {
    int S = c->n_states;
    need[S - 1] = 0;
    for (int a = S - 2; a >= 0; a--) {
        int best = INT32_MAX, bb = -1, br = 0;
        for (int k = sstart[a + 1] - 1; k >= sstart[a]; k--) { /* larger cuts first: fewer stages on ties */
            int b = succ[k];
            int left = x->workers - need[b];
            if (left <= 0) continue;
            /* a stage of compute C needs at least C/T replicas: skip what cannot beat `best` */
            double C = tot[b] - tot[a];
            if (C > T * left || (best != INT32_MAX && C > T * (double)(best - need[b] - 1) && best - need[b] - 1 < left))
                continue;
            pd__range g = pd__rng(x, c, a, b);
            int r = pd__min_replicas(x, &g, T, need[b], left);
            if (r == INT32_MAX) continue;
            if (r + need[b] < best) {
                best = r + need[b];
                bb = b;
                br = r;
            }
        }
        need[a] = best;
        nxt[a] = bb;
        rep[a] = br;
    }
    return need[0];
}

typedef struct pd__cut_plan {
    int n;          /* stages */
    int *cut;       /* n+1 cut states */
    int *rep;       /* n replica counts */
    double time_ms; /* the objective's value */
} pd__cut_plan;

static void pd__cut_plan_free(pd__cut_plan *cp) {
    PD_FREE(cp->cut);
    PD_FREE(cp->rep);
    memset(cp, 0, sizeof *cp);
}

/* The bottleneck of the plan recorded in nxt/rep. */
static double pd__actual(const pd__ctx *x, const pd__cuts *c, const int *nxt, const int *rep) {
    double t = 0;
    for (int a = 0; a != c->n_states - 1; a = nxt[a]) {
        pd__range g = pd__rng(x, c, a, nxt[a]);
        t = fmax(t, pd__stage_time(&g, rep[a], x->lb[0]));
    }
    return t;
}

/* The cut states' successors as CSR (succ[sstart[a] .. sstart[a + 1]]:
 * the states whose ideal contains a's), ascending. */
static pd_status pd__fast_succ(const pd__cuts *c, int *sstart, int *succ) {
    int S = c->n_states;
    for (int b = 0; b < S; b++)
        for (int k = c->pred_start[b]; k < c->pred_start[b + 1]; k++) sstart[c->pred[k] + 1]++;
    for (int a = 0; a < S; a++) sstart[a + 1] += sstart[a];
    int *fill = (int *)PD_MALLOC(sizeof(int) * ((size_t)S + 1));
    if (!fill) return pd__err(PD_ERR_NOMEM, "plan: out of memory");
    memcpy(fill, sstart, sizeof(int) * ((size_t)S + 1));
    for (int b = 0; b < S; b++) /* ascending b: succ lists come out ascending */
        for (int k = c->pred_start[b]; k < c->pred_start[b + 1]; k++) succ[fill[c->pred[k]]++] = b;
    PD_FREE(fill);
    return PD_OK;
}

/* No plan fits the memory even with no time limit: say what one node needs. */
static pd_status pd__fast_no_fit(const pd__ctx *x) {
    double need1 = 0;
    for (int i = 0; i < x->p->n; i++) {
        const pd__pnode *nd = &x->p->node[i];
        need1 = fmax(need1, 3 * nd->param_bytes + nd->optim_bytes + nd->act_bytes);
    }
    return pd__err(PD_ERR_INVALID,
                   "plan: no plan fits opt->memory %.0f bytes per worker on %d workers (the largest single "
                   "node alone needs about %.0f bytes); raise opt->memory or add workers",
                   x->mem, x->workers, need1);
}

/* The plan the chain nxt (state a's stage ends at nxt[a]) with replicas rep
 * describes, and its bottleneck stage time. */
static pd_status pd__fast_emit(const pd__ctx *x, const pd__cuts *c, const int *nxt, const int *rep,
                               pd__cut_plan *out) {
    int S = c->n_states, n = 0;
    for (int a = 0; a != S - 1; a = nxt[a]) n++;
    out->n = n;
    out->cut = (int *)PD_MALLOC(sizeof(int) * ((size_t)n + 1));
    out->rep = (int *)PD_MALLOC(sizeof(int) * (size_t)n);
    if (!out->cut || !out->rep) {
        pd__cut_plan_free(out);
        return pd__err(PD_ERR_NOMEM, "plan: out of memory");
    }
    n = 0;
    out->time_ms = 0;
    for (int a = 0; a != S - 1; a = nxt[a]) {
        pd__range g = pd__rng(x, c, a, nxt[a]);
        out->time_ms = fmax(out->time_ms, pd__stage_time(&g, rep[a], x->lb[0]));
        out->cut[n] = a;
        out->rep[n++] = rep[a];
    }
    out->cut[n] = S - 1;
    return PD_OK;
}

static pd_status pd__fast(const pd__ctx *x, const pd__cuts *c, pd__cut_plan *out) {
    int S = c->n_states;
    int np = c->pred_start[S];
    int *sstart = (int *)PD_CALLOC((size_t)S + 1, sizeof(int)), *succ = (int *)PD_CALLOC((size_t)np + 1, sizeof(int));
    int *need = (int *)PD_MALLOC(sizeof(int) * (size_t)S), *nxt = (int *)PD_MALLOC(sizeof(int) * (size_t)S),
        *rep = (int *)PD_MALLOC(sizeof(int) * (size_t)S);
    double *tot = (double *)PD_CALLOC((size_t)S, sizeof(double));
    int *bnxt = (int *)PD_MALLOC(sizeof(int) * (size_t)S), *brep = (int *)PD_MALLOC(sizeof(int) * (size_t)S);
    pd_status st = PD_OK;
    double hi, lo;
    if (!sstart || !succ || !need || !nxt || !rep || !tot || !bnxt || !brep) {
        st = pd__err(PD_ERR_NOMEM, "plan: out of memory");
        goto done;
    }
    if ((st = pd__fast_succ(c, sstart, succ)) != PD_OK) goto done;
    for (int b = 0; b < S; b++) tot[b] = c->fwd[b] * (x->recompute ? 2 : 1) + c->bwd_in[b] + c->bwd_w[b];
    /* an upper bound: memory alone decides (no time limit) */
    if (pd__feasible(x, c, sstart, succ, tot, INFINITY, need, nxt, rep) > x->workers) {
        st = pd__fast_no_fit(x);
        goto done;
    }
    /* Bisection on the bottleneck T, tightened by real plans: a feasible probe
     * moves hi down to the bottleneck its plan actually has; once the bracket
     * is narrow, probing just below hi either finds a better plan or proves
     * hi optimal. lo starts at total compute / workers, a lower bound. */
    hi = pd__actual(x, c, nxt, rep);
    lo = 0;
    for (int b = 0; b < S; b++) lo = fmax(lo, (c->fwd[b] + c->bwd_in[b] + c->bwd_w[b]) / x->workers);
    lo = fmin(lo, hi) * (1 - 1e-12);
    memcpy(bnxt, nxt, sizeof(int) * (size_t)S);
    memcpy(brep, rep, sizeof(int) * (size_t)S);
    /* the optimum is usually near the bound: bracket it by doubling up from lo */
    for (double step = pd__max(lo * 0.25, hi * 1e-6); lo + step < hi; step *= 2) {
        double t = lo + step;
        if (pd__feasible(x, c, sstart, succ, tot, t, need, nxt, rep) <= x->workers) {
            hi = pd__actual(x, c, nxt, rep);
            memcpy(bnxt, nxt, sizeof(int) * (size_t)S);
            memcpy(brep, rep, sizeof(int) * (size_t)S);
            break;
        }
        lo = t;
    }
    for (int it = 0; it < 200 && lo < hi * (1 - 1e-12); it++) {
        double mid = hi - lo > 1e-6 * hi ? 0.5 * (lo + hi) : hi * (1 - 1e-12);
        if (pd__feasible(x, c, sstart, succ, tot, mid, need, nxt, rep) <= x->workers) {
            double t = pd__actual(x, c, nxt, rep);
            if (t < hi) {
                hi = t;
                memcpy(bnxt, nxt, sizeof(int) * (size_t)S);
                memcpy(brep, rep, sizeof(int) * (size_t)S);
            }
            if (mid < hi) hi = mid; /* (the best plan stays the one kept) */
        } else {
            lo = mid;
        }
    }
    st = pd__fast_emit(x, c, bnxt, brep, out);
done:
    PD_FREE(tot);
    PD_FREE(sstart);
    PD_FREE(succ);
    PD_FREE(need);
    PD_FREE(nxt);
    PD_FREE(rep);
    PD_FREE(bnxt);
    PD_FREE(brep);
    return st;
}

/* ---- PipeDream's dynamic programme, level by level ------------------------------ */

typedef struct pd__cell {
    double t;     /* NAN: none */
    int k, m;     /* split: previous cut and machines before it (-1: a single stage) */
    int r;        /* machines of the last stage */
} pd__cell;

/* The cost of stage (k, b] with r machines at level `lv` (M machines on the
 * level, `used` machines up to and including this stage, K machines inside
 * each); `cl` is the stage's compute time at this level. */
static double pd__pd_stage(const pd__ctx *x, const pd__cuts *c, int lv, int k, int b, int r, int M, int used,
                           double cl, int K, bool base) {
    double bw = x->lb[lv];
    pd__range g = pd__rng(x, c, k, b);
    if (x->mem > 0) {
        double stash = ceil((double)(M - used) / r) * (g.act + g.w);
        if (x->pd_model ? stash > x->mem : pd__stage_mem(x, &g, r, (M - used) * K) > x->mem) return NAN;
    }
    double dp = 4.0 * (r - 1) * g.w / (bw * r) * 1e3;
    double t;
    if (x->pd_model) {
        t = (cl + (base ? dp / K : dp)) / r;
        if (x->compress > 0) {
            double in = 2.0 * c->antichain_bytes[k] / (bw * r) * 1e3 / x->compress;
            double out = b < c->n_states - 1 ? 2.0 * c->antichain_bytes[b] / (bw * r) * 1e3 / x->compress : 0;
            if (!base) t = fmax(t, fmax(in, out));
        }
    } else {
        t = (cl + dp / K) / r;
        t = fmax(t, 2.0 * fmax(g.in, g.out) / (bw * r * K) * 1e3);
    }
    return t;
}

/* A[a][b][m] for rows a in `rows` (row list; the final level needs only row 0).
 * cl(a,b): the compute time of a range at this level (NAN when invalid). */
static pd_status pd__pd_level(const pd__ctx *x, const pd__cuts *c, int lv, int K, const double *cl, bool final,
                              pd__cell *A) {
    int S = c->n_states, M = x->lw[lv];
    int rows = final ? 1 : S;
    bool fewer = !x->pd_model;
    uint8_t *sub = NULL; /* sub[a*S+k]: ideal a strictly inside ideal k */
    if (!final) {
        if (!(sub = (uint8_t *)PD_CALLOC((size_t)S * (size_t)S, 1))) return pd__err(PD_ERR_NOMEM, "plan: out of memory (%d cut states)", S);
        for (int k = 0; k < S; k++)
            for (int q = c->pred_start[k]; q < c->pred_start[k + 1]; q++) sub[(size_t)c->pred[q] * S + k] = 1;
    }
#define CELL(a, b, m) A[((size_t)(a) * S + (size_t)(b)) * (size_t)M + (size_t)(m)]
    for (int a = 0; a < rows; a++)
        for (int b = 0; b < S; b++)
            for (int m = 0; m < M; m++) {
                pd__cell *e = &CELL(a, b, m);
                e->t = NAN;
                e->k = e->m = -1;
                e->r = 0;
                if (b <= a || isnan(cl[(size_t)a * S + b])) continue;
                if (m > 0 && x->o->straight) continue;
                e->t = pd__pd_stage(x, c, lv, a, b, m + 1, M, m + 1, cl[(size_t)a * S + b], K, true);
                e->r = m + 1;
            }
    for (int a = 0; a < rows; a++) {
        for (int m = 1; m < M; m++)
            for (int b = a + 1; b < S; b++) {
                if (a > 0 && !sub[(size_t)a * S + b]) continue; /* no stage chain from a to b: stays NAN */
                pd__cell best = CELL(a, b, m);
                if (fewer && (isnan(best.t) || CELL(a, b, m - 1).t < best.t) && !isnan(CELL(a, b, m - 1).t))
                    best = CELL(a, b, m - 1);
                for (int q = c->pred_start[b]; q < c->pred_start[b + 1]; q++) {
                    int k = c->pred[q];
                    if (k <= a) continue;
                    if (a > 0 && !sub[(size_t)a * S + k]) continue; /* k must contain a */
                    double ck = cl[(size_t)k * S + b];
                    if (isnan(ck)) continue;
                    int maxr = x->o->straight ? 1 : m;
                    for (int r = 1; r <= maxr; r++) {
                        const pd__cell *prev = &CELL(a, k, m - r);
                        if (isnan(prev->t)) continue;
                        double t = pd__pd_stage(x, c, lv, k, b, r, M, m + 1, ck, K, false);
                        if (isnan(t)) continue;
                        t = fmax(prev->t, t);
                        if (isnan(best.t) || best.t > t) {
                            best.t = t;
                            best.k = k;
                            best.m = m - r;
                            best.r = r;
                        }
                    }
                }
                CELL(a, b, m) = best;
            }
    }
#undef CELL
    PD_FREE(sub);
    return PD_OK;
}

/* Appends the stages of range (a, b] solved at level lv with m+1 machines. */
typedef struct pd__stage_list {
    int n, cap;
    int *lo, *hi, *rep;
} pd__stage_list;

static pd_status pd__push(pd__stage_list *L, int lo, int hi, int rep) {
    if (L->n == L->cap) {
        int nc = L->cap ? L->cap * 2 : 16;
        int *a = (int *)PD_REALLOC(L->lo, sizeof(int) * (size_t)nc);
        if (!a) return pd__err(PD_ERR_NOMEM, "plan: out of memory");
        L->lo = a;
        int *b = (int *)PD_REALLOC(L->hi, sizeof(int) * (size_t)nc);
        if (!b) return pd__err(PD_ERR_NOMEM, "plan: out of memory");
        L->hi = b;
        int *r = (int *)PD_REALLOC(L->rep, sizeof(int) * (size_t)nc);
        if (!r) return pd__err(PD_ERR_NOMEM, "plan: out of memory");
        L->rep = r;
        L->cap = nc;
    }
    L->lo[L->n] = lo;
    L->hi[L->n] = hi;
    L->rep[L->n++] = rep;
    return PD_OK;
}

static pd_status pd__unwind(const pd__ctx *x, const pd__cuts *c, pd__cell **As, int lv, int a, int b, int mult,
                            pd__stage_list *L) {
    int S = c->n_states, M = x->lw[lv];
    int row = lv == x->levels - 1 ? 0 : a;
    /* the splits of this range, last stage first */
    pd__stage_list here;
    memset(&here, 0, sizeof here);
    pd_status st = PD_OK;
    const pd__cell *e = &As[lv][((size_t)row * S + (size_t)b) * (size_t)M + (size_t)(M - 1)];
    int hi = b;
    for (;;) {
        if (isnan(e->t)) {
            st = pd__err(PD_ERR_INTERNAL, "plan: no solution recorded");
            break;
        }
        if ((st = pd__push(&here, e->k >= 0 ? e->k : a, hi, e->r)) != PD_OK || e->k < 0) break;
        hi = e->k;
        e = &As[lv][((size_t)row * S + (size_t)e->k) * (size_t)M + (size_t)e->m];
    }
    for (int i = here.n - 1; i >= 0 && st == PD_OK; i--) {
        if (lv == 0) st = pd__push(L, here.lo[i], here.hi[i], here.rep[i] * mult);
        else st = pd__unwind(x, c, As, lv - 1, here.lo[i], here.hi[i], here.rep[i] * mult, L);
    }
    PD_FREE(here.lo);
    PD_FREE(here.hi);
    PD_FREE(here.rep);
    return st;
}

static pd_status pd__pipedream_dp(const pd__ctx *x, const pd__cuts *c, pd__cut_plan *out) {
    int S = c->n_states;
    pd_status st = PD_OK;
    pd__cell *As[8] = {0};
    pd__stage_list L;
    memset(&L, 0, sizeof L);
    const pd__cell *top;
    double *cl = (double *)PD_MALLOC(sizeof(double) * (size_t)S * (size_t)S);
    if (!cl) return pd__err(PD_ERR_NOMEM, "plan: out of memory (%d cut states)", S);
    for (int a = 0; a < S; a++)
        for (int b = 0; b < S; b++) cl[(size_t)a * S + b] = NAN;
    for (int b = 0; b < S; b++)
        for (int q = c->pred_start[b]; q < c->pred_start[b + 1]; q++) {
            pd__range g = pd__rng(x, c, c->pred[q], b);
            cl[(size_t)c->pred[q] * S + b] = g.c;
        }
    int K = 1;
    for (int lv = 0; lv < x->levels; lv++) {
        bool final = lv == x->levels - 1;
        size_t cells = (size_t)(final ? 1 : S) * (size_t)S * (size_t)x->lw[lv];
        As[lv] = (pd__cell *)PD_MALLOC(sizeof(pd__cell) * cells);
        if (!As[lv]) {
            st = pd__err(PD_ERR_NOMEM, "plan: out of memory for the DP table (%zu cells)", cells);
            goto done;
        }
        if ((st = pd__pd_level(x, c, lv, K, cl, final, As[lv])) != PD_OK) goto done;
        if (!final)
            for (int a = 0; a < S; a++)
                for (int b = 0; b < S; b++)
                    if (!isnan(cl[(size_t)a * S + b]))
                        cl[(size_t)a * S + b] = As[lv][((size_t)a * S + b) * (size_t)x->lw[lv] + (size_t)(x->lw[lv] - 1)].t;
        K *= x->lw[lv];
    }
    top = &As[x->levels - 1][(size_t)(S - 1) * (size_t)x->lw[x->levels - 1] + (size_t)(x->lw[x->levels - 1] - 1)];
    if (isnan(top->t)) {
        st = pd__err(PD_ERR_INVALID,
                     "plan: no plan uses exactly %d workers within opt->memory %.0f bytes%s; raise opt->memory, "
                     "change opt->workers, or use opt->cost_model default",
                     x->workers, x->mem, x->o->straight ? " as a straight pipeline" : "");
        goto done;
    }
    out->time_ms = top->t;
    if ((st = pd__unwind(x, c, As, x->levels - 1, 0, S - 1, 1, &L)) != PD_OK) goto done;
    out->n = L.n;
    out->cut = (int *)PD_MALLOC(sizeof(int) * ((size_t)L.n + 1));
    out->rep = (int *)PD_MALLOC(sizeof(int) * (size_t)L.n);
    if (!out->cut || !out->rep) {
        pd__cut_plan_free(out);
        st = pd__err(PD_ERR_NOMEM, "plan: out of memory");
        goto done;
    }
    for (int i = 0; i < L.n; i++) {
        out->cut[i] = L.lo[i];
        out->rep[i] = L.rep[i];
    }
    out->cut[L.n] = S - 1;
done:
    for (int lv = 0; lv < 8; lv++) PD_FREE(As[lv]);
    PD_FREE(L.lo);
    PD_FREE(L.hi);
    PD_FREE(L.rep);
    PD_FREE(cl);
    return st;
}

/* ---- contiguous splits of the topological order ----------------------------------- */

/* Cuts nodes 0..n-1 into at most p contiguous ranges minimising the largest
 * sum of `w` (bisection over the answer, greedy check). cut[0..p]. */
static int pd__minmax_split(const double *w, int n, int p, int *cut) {
    double lo = 0, hi = 0;
    for (int i = 0; i < n; i++) {
        lo = fmax(lo, w[i]);
        hi += w[i];
    }
    for (int it = 0; it < 100 && hi - lo > 1e-12 * (hi + 1e-300); it++) {
        double mid = 0.5 * (lo + hi), s = 0;
        int k = 1;
        for (int i = 0; i < n; i++) {
            if (s + w[i] > mid) {
                k++;
                s = 0;
            }
            s += w[i];
        }
        if (k <= p) hi = mid;
        else lo = mid;
    }
    int k = 0;
    double s = 0;
    cut[0] = 0;
    for (int i = 0; i < n; i++) {
        if (s + w[i] > hi * (1 + 1e-12) && i > cut[k]) {
            cut[++k] = i;
            s = 0;
        }
        s += w[i];
    }
    /* use every worker: split the largest ranges while there are spare workers and nodes */
    while (k + 1 < p && k + 1 < n) {
        int best = -1;
        double bw = -1;
        for (int j = 0; j <= k; j++) {
            int lo2 = cut[j], hi2 = j == k ? n : cut[j + 1];
            if (hi2 - lo2 < 2) continue;
            double t = 0;
            for (int i = lo2; i < hi2; i++) t += w[i];
            if (t > bw) {
                bw = t;
                best = j;
            }
        }
        if (best < 0) break;
        int lo2 = cut[best], hi2 = best == k ? n : cut[best + 1];
        double t = 0, half = bw / 2;
        int at = lo2 + 1;
        for (int i = lo2; i < hi2 - 1; i++) {
            t += w[i];
            at = i + 1;
            if (t >= half) break;
        }
        memmove(cut + best + 2, cut + best + 1, sizeof(int) * (size_t)(k - best));
        cut[best + 1] = at;
        k++;
    }
    cut[k + 1] = n;
    return k + 1;
}

/* ---- evaluation: per-stage numbers and predictions --------------------------------- */

static int pd__level_of(const pd__ctx *x, int r1, int r2) {
    int lv = 0, g = 1;
    for (int l = 0; l < x->levels; l++) {
        g *= x->lw[l];
        if (r1 / g == r2 / g) return lv;
        lv = l + 1;
    }
    return x->levels - 1;
}

/* Each stage's sums of its nodes' costs (forward where its forward runs,
 * backward where its backward runs) and its first rank. */
static void pd__eval_sums(pd_plan *pl, const pd_profile *p) {
    int ns = pl->n_stages, rank = 0;
    for (int s = 0; s < ns; s++) {
        pd__stage *st = &pl->stage[s];
        int r = st->replicas;
        memset(st, 0, sizeof *st);
        st->replicas = r;
        st->first_rank = rank;
        rank += r;
    }
    for (int v = 0; v < p->n; v++) {
        const pd__pnode *nd = &p->node[v];
        pd__stage *f = &pl->stage[pl->fwd_stage[v]], *b = &pl->stage[pl->bwd_stage[v]];
        f->fwd_ms += nd->fwd_ms;
        b->bwd_in_ms += nd->bwd_in_ms;
        b->bwd_w_ms += nd->bwd_w_ms;
        f->fwd_call_ms += nd->fwd_call_ms;
        b->bwd_in_call_ms += nd->bwd_in_call_ms;
        b->bwd_w_call_ms += nd->bwd_w_call_ms;
        f->param_bytes += nd->param_bytes;
        f->optim_bytes += nd->optim_bytes;
        f->act_bytes += nd->act_bytes;
    }
}

/* cross[k]: the bytes crossing boundary k|k+1: tensors made at or before k
 * with a consumer after, and (bipartition) the stash a node whose backward
 * runs elsewhere sends there. */
static pd_status pd__eval_cross(const pd_plan *pl, const pd_profile *p, double *cross) {
    int n = p->n;
    int *last = (int *)PD_MALLOC(sizeof(int) * (size_t)n);
    if (!last) return pd__err(PD_ERR_NOMEM, "plan: out of memory");
    for (int v = 0; v < n; v++) last[v] = pl->fwd_stage[v];
    for (int e = 0; e < p->n_edges; e++) {
        int u = p->edge[2 * e], v = p->edge[2 * e + 1];
        if (pl->fwd_stage[v] > last[u]) last[u] = pl->fwd_stage[v];
    }
    for (int v = 0; v < n; v++)
        for (int k = pl->fwd_stage[v]; k < last[v]; k++) cross[k] += p->node[v].act_bytes;
    for (int v = 0; v < n; v++)
        if (pl->bwd_stage[v] != pl->fwd_stage[v]) {
            int lo = pl->fwd_stage[v] < pl->bwd_stage[v] ? pl->fwd_stage[v] : pl->bwd_stage[v];
            int hi = pl->fwd_stage[v] ^ pl->bwd_stage[v] ^ lo;
            for (int k = lo; k < hi; k++) cross[k] += p->node[v].act_bytes;
        }
    PD_FREE(last);
    return PD_OK;
}

/* The plan's totals from its bottleneck stage time tmax and the stages'
 * busy time: one worker's and pure data parallelism's time (level by level
 * as PipeDream computes it), the minibatch's time, speedups, bubble and
 * throughput. */
static void pd__eval_totals(pd_plan *pl, const pd_profile *p, const pd__ctx *x, double tmax, double busy, int used) {
    double single = 0, wtot = 0, call = 0;
    for (int v = 0; v < p->n; v++) {
        single += p->node[v].fwd_ms + p->node[v].bwd_in_ms + p->node[v].bwd_w_ms;
        wtot += p->node[v].param_bytes;
        call += p->node[v].fwd_call_ms + p->node[v].bwd_in_call_ms + p->node[v].bwd_w_call_ms;
    }
    double dp = single;
    int inner = 1;
    for (int l = 0; l < x->levels; l++) {
        int M = x->lw[l];
        dp = (dp + 4.0 * (M - 1) * wtot / (x->lb[l] * M) * 1e3 / inner) / M;
        inner = M;
    }
    int width = pl->width > 0 ? pl->width : 1;
    int m = pl->microbatches > 0 ? pl->microbatches : 1;
    pl->single_ms = single * m * width;
    pl->dp_ms = dp * m * width;
    if (call > 0) { /* per-call costs: one worker runs the minibatch as one call per node, a data-parallel one its share */
        pl->single_ms -= call * (m * width - 1);
        pl->dp_ms -= call * ((double)m * width / x->workers - 1);
    }
    pl->workers = x->workers;
    if (pl->algo == PD_ALGO_2BW) {
        double ar = 0;
        for (int s = 0; s < pl->n_stages; s++)
            ar = fmax(ar, width > 1 ? 4.0 * (width - 1) * pl->stage[s].param_bytes / (x->lb[x->levels - 1] * width) * 1e3 : 0);
        pl->time_ms = m * tmax + ar;
    } else if (pl->time_ms <= 0) {
        pl->time_ms = m * tmax;
    }
    pl->speedup = pl->single_ms / pl->time_ms;
    pl->dp_speedup = pl->dp_ms / pl->time_ms;
    /* steady-state idle: each worker's share of the bottleneck it does not fill */
    pl->bubble = used > 0 ? 1 - busy * m / (used * pl->time_ms) : 0;
    if (pl->bubble < 0) pl->bubble = 0;
    int64_t mbs = pl->microbatch_size > 0 ? pl->microbatch_size : 1;
    pl->throughput = (double)mbs * m * width / (pl->time_ms / 1e3);
}

static pd_status pd__plan_evaluate(pd_plan *pl, const pd_profile *p, const pd__ctx *x) {
    pd__ctx xx = *x;
    xx.twobw = pl->algo == PD_ALGO_2BW;
    xx.recompute = pl->recompute;
    int ns = pl->n_stages;
    pd__eval_sums(pl, p);
    double *cross = (double *)PD_CALLOC((size_t)ns + 1, sizeof(double));
    if (!cross) return pd__err(PD_ERR_NOMEM, "plan: out of memory");
    pd_status st0 = pd__eval_cross(pl, p, cross);
    if (st0 != PD_OK) {
        PD_FREE(cross);
        return st0;
    }
    double tmax = 0, busy = 0;
    int used = 0;
    for (int s = 0; s < ns; s++) {
        pd__stage *st = &pl->stage[s];
        int r = st->replicas;
        st->in_bytes = s > 0 ? cross[s - 1] : 0;
        st->out_bytes = s < ns - 1 ? cross[s] : 0;
        double bw = x->lb[0];
        if (s < ns - 1) bw = x->lb[pd__level_of(x, st->first_rank + r - 1, pl->stage[s + 1].first_rank)];
        st->send_ms = st->out_bytes / bw * 1e3;
        double abw = x->lb[pd__level_of(x, st->first_rank, st->first_rank + r - 1)];
        st->allreduce_ms = r > 1 ? 4.0 * (r - 1) * st->param_bytes / (abw * r) * 1e3 : 0;
        pd__range g = {st->fwd_ms * (xx.recompute ? 2 : 1) + st->bwd_in_ms + st->bwd_w_ms, st->param_bytes,
                       st->act_bytes, st->optim_bytes, st->in_bytes, st->out_bytes};
        int down = 0;
        for (int q = s + 1; q < ns; q++) down += pl->stage[q].replicas;
        st->time_ms = pd__stage_time(&g, r, bw);
        st->memory_bytes = pd__stage_mem(&xx, &g, r, down);
        tmax = fmax(tmax, st->time_ms);
        busy += (st->fwd_ms + st->bwd_in_ms + st->bwd_w_ms + (pl->recompute ? st->fwd_ms : 0)) ;
        used += r;
    }
    PD_FREE(cross);
    pd__eval_totals(pl, p, x, tmax, busy, used);
    return PD_OK;
}

/* ---- plan assembly ----------------------------------------------------------------- */

void pd__plan_free(pd_plan *pl) {
    if (!pl) return;
    if (pl->node_name)
        for (int i = 0; i < pl->n_nodes; i++) PD_FREE(pl->node_name[i]);
    PD_FREE(pl->node_name);
    PD_FREE(pl->fwd_stage);
    PD_FREE(pl->bwd_stage);
    for (int i = 0; i < pl->n_alias; i++) PD_FREE(pl->alias_name[i]);
    PD_FREE(pl->alias_name);
    PD_FREE(pl->alias_fwd);
    PD_FREE(pl->alias_bwd);
    PD_FREE(pl->stage);
    PD_FREE(pl->algo_name);
    PD_FREE(pl->cost_model);
    PD_FREE(pl->model);
    PD_FREE(pl);
}

void pd_plan_destroy(pd_plan *p) { pd__plan_free(p); }

static pd_status pd__plan_alloc(const pd_profile *p, int n_stages, pd_plan **out) {
    pd_plan *pl = (pd_plan *)PD_CALLOC(1, sizeof *pl);
    if (!pl) return pd__err(PD_ERR_NOMEM, "plan: out of memory");
    pl->n_nodes = p->n;
    pl->node_name = (char **)PD_CALLOC((size_t)p->n, sizeof(char *));
    pl->fwd_stage = (int *)PD_CALLOC((size_t)p->n, sizeof(int));
    pl->bwd_stage = (int *)PD_CALLOC((size_t)p->n, sizeof(int));
    pl->n_stages = n_stages;
    pl->stage = (pd__stage *)PD_CALLOC((size_t)n_stages, sizeof(pd__stage));
    pl->chunks = 1;
    pl->width = 1;
    pl->microbatches = 1;
    if (!pl->node_name || !pl->fwd_stage || !pl->bwd_stage || !pl->stage) {
        pd__plan_free(pl);
        return pd__err(PD_ERR_NOMEM, "plan: out of memory");
    }
    for (int i = 0; i < p->n; i++) {
        const char *nm = p->node[i].name ? p->node[i].name : "";
        if (!(pl->node_name[i] = pd__strdup(nm))) {
            pd__plan_free(pl);
            return pd__err(PD_ERR_NOMEM, "plan: out of memory");
        }
    }
    pl->microbatch_size = p->batch;
    pl->profile_batch = p->batch;
    if (p->model && !(pl->model = pd__strdup(p->model))) {
        pd__plan_free(pl);
        return pd__err(PD_ERR_NOMEM, "plan: out of memory");
    }
    *out = pl;
    return PD_OK;
}

/* PipeDream leaves its input layers and unused "__getitem__" sinks out of the
 * search (they have no cost and would only waste a stage); they join the
 * first stage / their producer's stage. */
static bool pd__skip_input(const pd_profile *p, int v, const int *indeg) {
    return indeg[v] == 0 && p->node[v].desc && strncmp(p->node[v].desc, "Input", 5) == 0;
}

/* Nodes left out of the search (fwd_stage -1): inputs join the first stage,
 * sinks their producer's; the backward runs where the forward does. */
static void pd__place_skipped(pd_plan *pl, const pd_profile *p, const int *indeg) {
    for (int v = 0; v < p->n; v++)
        if (pl->fwd_stage[v] < 0) {
            int s = 0;
            for (int e = 0; e < p->n_edges; e++)
                if (p->edge[2 * e + 1] == v && pl->fwd_stage[p->edge[2 * e]] > s) s = pl->fwd_stage[p->edge[2 * e]];
            pl->fwd_stage[v] = indeg[v] == 0 ? 0 : s;
        }
    memcpy(pl->bwd_stage, pl->fwd_stage, sizeof(int) * (size_t)p->n);
}

static pd_status pd__plan_from_cuts(const pd__ctx *x, const pd_profile *rp, const int *map, const pd__cuts *c,
                                    const pd__cut_plan *cp, pd_plan *pl) {
    (void)x;
    for (int s = 0; s < cp->n; s++) {
        pl->stage[s].replicas = cp->rep[s];
        const uint64_t *a = c->ideal + (size_t)cp->cut[s] * c->words, *b = c->ideal + (size_t)cp->cut[s + 1] * c->words;
        for (int v = 0; v < rp->n; v++) {
            bool in_b = (b[v >> 6] >> (v & 63)) & 1, in_a = (a[v >> 6] >> (v & 63)) & 1;
            if (in_b && !in_a) pl->fwd_stage[map[v]] = s;
        }
    }
    return PD_OK;
}

static const char *const pd__algo_names[] = {"pipedream", "2bw", "bipartition", "uniform", "params", "avgpipe"};

const char *pd__algo_name(pd__algo a) { return pd__algo_names[a]; }

pd_status pd__algo_parse(const char *s, pd__algo *out) {
    if (!s) s = "pipedream";
    for (int i = 0; i < (int)(sizeof pd__algo_names / sizeof *pd__algo_names); i++)
        if (strcmp(s, pd__algo_names[i]) == 0) {
            *out = (pd__algo)i;
            return PD_OK;
        }
    return pd__err(PD_ERR_INVALID, "plan: unknown opt->algo '%s' (pipedream, 2bw, bipartition, uniform, params, avgpipe)",
                   s);
}

/* Depth-d straight pipeline for 2bw: fast DP with r = 1 on d workers, 2BW's
 * memory (recomputation: `rc`). */
static pd_status pd__straight(const pd__ctx *x0, const pd__cuts *c, int d, bool rc, pd__cut_plan *cp) {
    pd__ctx x = *x0;
    pd_plan_options o = *x0->o;
    o.straight = 1;
    x.o = &o;
    x.workers = d;
    x.twobw = true;
    x.recompute = rc;
    return pd__fast(&x, c, cp);
}

/* ---- AvgPipe's tuner ------------------------------------------------------------------
 * K parallel pipelines (K divides the workers W) of W/K stages each, m
 * microbatches per pipeline minibatch, under the avgpipe schedule and the
 * memory limit; predicted by pd_simulate (elastic averaging as an all-reduce
 * among the K twins). For each K, m is the fewest microbatches whose
 * throughput is within 2% of that K's best; the chosen K has the highest
 * throughput (ties: fewer pipelines). The memory and cost formulas:
 * docs/INTERNALS.md, "core/partition.c". */

enum { PD__AVG_SLACK_PCT = 2 };

/* Memory, averaging cost and the simulator's prediction for an avgpipe plan
 * of width K with m microbatches (after pd__plan_evaluate). */
static pd_status pd__avgpipe_predict(pd_plan *pl, const pd__ctx *x) {
    int d = pl->n_stages, K = pl->width, m = pl->microbatches, L = pd__avgpipe_default_inflight(d);
    double bw = x->lb[x->levels - 1];
    for (int s = 0; s < d; s++) {
        pd__stage *st = &pl->stage[s];
        int held = L - s > m ? m : L - s;
        st->allreduce_ms = K > 1 ? 4.0 * (K - 1) * st->param_bytes / (bw * K) * 1e3 : 0;
        st->memory_bytes = 3 * st->param_bytes + st->optim_bytes + held * st->act_bytes;
    }
    pd_sim_options so = PD_SIM_OPTIONS_INIT;
    so.schedule = "avgpipe";
    so.microbatches = m;
    so.minibatches = 1;
    pd_sim_result r;
    PD_TRY(pd_simulate(pl, &so, &r));
    pl->time_ms = r.time_ms;
    pl->throughput = r.throughput;
    pl->bubble = r.bubble;
    pl->speedup = pl->time_ms > 0 ? pl->single_ms / pl->time_ms : 0;
    pl->dp_speedup = pl->time_ms > 0 ? pl->dp_ms / pl->time_ms : 0;
    pd_sim_result_free(&r);
    return PD_OK;
}

static bool pd__avgpipe_fits(const pd_plan *pl, const pd__ctx *x) {
    for (int s = 0; s < pl->n_stages && x->mem > 0; s++)
        if (pl->stage[s].memory_bytes > x->mem) return false;
    return true;
}

/* The whole search; *out: the chosen plan, evaluated (p: the evaluation
 * profile, rp/map/inv/indeg as pd_plan_create builds them). */
static pd_status pd__avgpipe_tune(const pd__ctx *x0, const pd_profile *p, const pd_profile *rp, const int *map,
                                  const int *inv, const int *indeg, const pd__cuts *c, pd_plan **out) {
    int W = x0->workers, Mmax = x0->o->microbatches > 0 ? x0->o->microbatches : 4 * W;
    pd_plan *best = NULL;
    pd_status st = PD_OK;
    for (int K = 1; K <= W && st == PD_OK; K++) {
        if (W % K) continue;
        int d = W / K;
        pd__ctx x = *x0;
        pd_plan_options o = *x0->o;
        o.straight = 1;
        x.o = &o;
        x.workers = d;
        x.mem = 0; /* the cut for time; avgpipe's own memory is checked below */
        if (x.levels > 1) { /* the pipelines' stages talk over the level that holds d workers */
            x.levels = 1;
            int lv = 0;
            for (int g = x0->lw[0]; lv + 1 < x0->levels && g < d; g *= x0->lw[++lv]) {}
            x.lb[0] = x0->lb[lv];
            x.lw[0] = d;
        } else {
            x.lw[0] = d;
        }
        pd__cut_plan cp;
        memset(&cp, 0, sizeof cp);
        if (pd__fast(&x, c, &cp) != PD_OK) continue;
        pd_plan *k_best = NULL, **cand = (pd_plan **)PD_CALLOC((size_t)Mmax + 1, sizeof *cand);
        if (!cand) {
            pd__cut_plan_free(&cp);
            st = pd__err(PD_ERR_NOMEM, "plan: out of memory");
            break;
        }
        double top = -1;
        for (int m = 1; m <= Mmax && st == PD_OK; m++) {
            pd_plan *pl;
            if ((st = pd__plan_alloc(p, cp.n, &pl)) != PD_OK) break;
            for (int v = 0; v < p->n; v++) pl->fwd_stage[v] = -1;
            pd__plan_from_cuts(&x, rp, map, c, &cp, pl);
            for (int v = 0; v < p->n; v++)
                if (inv[v] < 0) pl->fwd_stage[v] = -1;
            pd__place_skipped(pl, p, indeg);
            pl->algo = PD_ALGO_AVGPIPE;
            pl->width = K;
            pl->microbatches = m;
            if ((st = pd__plan_evaluate(pl, p, x0)) == PD_OK) st = pd__avgpipe_predict(pl, x0);
            if (st != PD_OK || !pd__avgpipe_fits(pl, x0)) {
                pd__plan_free(pl);
                continue;
            }
            cand[m] = pl;
            if (pl->throughput > top) top = pl->throughput;
        }
        for (int m = 1; m <= Mmax && !k_best; m++)
            if (cand[m] && cand[m]->throughput >= top * (1 - PD__AVG_SLACK_PCT / 100.0)) k_best = cand[m];
        for (int m = 1; m <= Mmax; m++)
            if (cand[m] != k_best) pd__plan_free(cand[m]);
        PD_FREE(cand);
        pd__cut_plan_free(&cp);
        if (k_best && (!best || k_best->throughput > best->throughput * (1 + 1e-9))) {
            pd__plan_free(best);
            best = k_best;
        } else {
            pd__plan_free(k_best);
        }
    }
    if (st != PD_OK) {
        pd__plan_free(best);
        return st;
    }
    if (!best)
        return pd__err(PD_ERR_INVALID,
                       "plan: no avgpipe configuration (pipelines dividing %d workers, 1 to %d microbatches) fits "
                       "opt->memory %.0f bytes per worker; raise opt->memory or add workers",
                       W, Mmax, x0->mem);
    *out = best;
    return PD_OK;
}

/* uniform and params: the nodes in order, cut into workers stages of equal
 * node counts or parameter bytes, no replicas. */
static pd_status pd__plan_even(const pd__ctx *x, const pd_profile *p, pd__algo algo, pd_plan **out) {
    if (x->workers > p->n)
        return pd__err(PD_ERR_INVALID, "plan: %d workers but the model has only %d nodes; set opt->workers to %d or fewer", x->workers, p->n, p->n);
    double *w = (double *)PD_MALLOC(sizeof(double) * (size_t)p->n);
    int *cut = (int *)PD_MALLOC(sizeof(int) * ((size_t)x->workers + 2));
    if (!w || !cut) {
        PD_FREE(w);
        PD_FREE(cut);
        return pd__err(PD_ERR_NOMEM, "plan: out of memory");
    }
    for (int v = 0; v < p->n; v++) w[v] = algo == PD_ALGO_UNIFORM ? 1 : p->node[v].param_bytes + 1e-9;
    int ns = pd__minmax_split(w, p->n, x->workers, cut);
    pd_plan *pl = NULL;
    pd_status st = pd__plan_alloc(p, ns, &pl);
    if (st == PD_OK) {
        for (int s = 0; s < ns; s++) {
            pl->stage[s].replicas = 1;
            for (int v = cut[s]; v < cut[s + 1]; v++) pl->fwd_stage[v] = pl->bwd_stage[v] = s;
        }
        pl->algo = algo;
        pl->microbatches = x->o->microbatches > 0 ? x->o->microbatches : 1;
        st = pd__plan_evaluate(pl, p, x);
    }
    PD_FREE(w);
    PD_FREE(cut);
    if (st != PD_OK) {
        pd__plan_free(pl);
        return st;
    }
    pl->algo_name = pd__strdup(pd__algo_name(algo));
    pl->cost_model = pd__strdup("default");
    pl->bandwidth = x->lb[0];
    *out = pl;
    return PD_OK;
}

/* The planner's context from the options: the cost model, the workers per
 * level and their bandwidths, the memory limit; each option checked. */
static pd_status pd__ctx_init(pd__ctx *x, const pd_profile *p, const pd_plan_options *o) {
    const char *cm = o->cost_model ? o->cost_model : "default";
    if (strcmp(cm, "pipedream") == 0) x->pd_model = true;
    else if (strcmp(cm, "default") != 0)
        return pd__err(PD_ERR_INVALID, "plan: unknown opt->cost_model '%s' (default, pipedream)", cm);
    if (p->n <= 0) return pd__err(PD_ERR_INVALID, "plan: the profile has no nodes");
    if (o->n_levels < 0 || o->n_levels > 8) return pd__err(PD_ERR_INVALID, "plan: opt->level_workers has %d levels (1 to 8)", o->n_levels);
    if (o->n_levels > 0) {
        x->levels = o->n_levels;
        int64_t prod = 1;
        for (int l = 0; l < o->n_levels; l++) {
            if (o->level_workers[l] < 1) return pd__err(PD_ERR_INVALID, "plan: opt->level_workers level %d has %d workers", l, o->level_workers[l]);
            if (!(o->level_bandwidth[l] > 0) || !isfinite(o->level_bandwidth[l]))
                return pd__err(PD_ERR_INVALID, "plan: opt->level_bandwidth of level %d must be positive", l);
            x->lw[l] = o->level_workers[l];
            x->lb[l] = o->level_bandwidth[l];
            prod *= x->lw[l];
            if (prod > 1 << 20) return pd__err(PD_ERR_INVALID, "plan: opt->level_workers has more than %d workers", 1 << 20);
        }
        if (o->workers > 1 && o->workers != prod)
            return pd__err(PD_ERR_INVALID, "plan: opt->workers %d differs from the topology's %lld workers", o->workers, (long long)prod);
        x->workers = (int)prod;
    } else {
        if (o->workers < 1 || o->workers > 1 << 20) return pd__err(PD_ERR_INVALID, "plan: opt->workers must be 1 to %d (got %d)", 1 << 20, o->workers);
        if (!(o->bandwidth > 0) || !isfinite(o->bandwidth)) return pd__err(PD_ERR_INVALID, "plan: opt->bandwidth must be positive");
        x->levels = 1;
        x->lw[0] = o->workers;
        x->lb[0] = o->bandwidth;
        x->workers = o->workers;
    }
    if (o->memory < 0 || !isfinite(o->memory)) return pd__err(PD_ERR_INVALID, "plan: opt->memory must be a positive byte count");
    x->mem = o->memory;
    x->compress = o->activation_compression;
    if (o->microbatches < 0) return pd__err(PD_ERR_INVALID, "plan: opt->microbatches must be positive");
    return PD_OK;
}

static pd_status pd__bipartition(const pd__ctx *x, const pd_profile *p, pd_plan **out);

/* The DAG the cuts are made on (rp: without PipeDream's input layers and
 * __getitem__ sinks; map: its node v is p's map[v], inv the other way) and
 * the profile plans are evaluated on (ep: input layers cost nothing). */
static pd_status pd__plan_dag(const pd_profile *p, int *indeg, int *outdeg, int *map, int *inv, pd_profile *rp,
                              pd__pnode *ev_nodes, pd_profile *ep) {
    for (int e = 0; e < p->n_edges; e++) {
        indeg[p->edge[2 * e + 1]]++;
        outdeg[p->edge[2 * e]]++;
    }
    for (int v = 0; v < p->n; v++) {
        inv[v] = -1;
        bool skip = pd__skip_input(p, v, indeg) ||
                    (outdeg[v] == 0 && p->node[v].desc && strncmp(p->node[v].desc, "__getitem__", 11) == 0);
        if (skip) continue;
        inv[v] = rp->n;
        map[rp->n] = v;
        rp->node[rp->n++] = p->node[v];
    }
    if (rp->n == 0) return pd__err(PD_ERR_INVALID, "plan: the profile has only input nodes");
    for (int e = 0; e < p->n_edges; e++) {
        int a = inv[p->edge[2 * e]], b = inv[p->edge[2 * e + 1]];
        if (a < 0 || b < 0) continue;
        rp->edge[2 * rp->n_edges] = a;
        rp->edge[2 * rp->n_edges + 1] = b;
        rp->n_edges++;
    }
    rp->batch = p->batch;
    /* the profile the plan is evaluated on: PipeDream's input layers cost nothing */
    *ep = *p;
    ep->node = ev_nodes;
    memcpy(ev_nodes, p->node, sizeof(pd__pnode) * (size_t)p->n);
    for (int v = 0; v < p->n; v++)
        if (pd__skip_input(p, v, indeg)) {
            pd__pnode *nd = &ev_nodes[v];
            nd->fwd_ms = nd->bwd_in_ms = nd->bwd_w_ms = nd->act_bytes = nd->param_bytes = nd->optim_bytes = 0;
            nd->fwd_call_ms = nd->bwd_in_call_ms = nd->bwd_w_call_ms = 0;
        }
    return PD_OK;
}

/* 2BW: every depth d dividing the workers, with and without recomputation;
 * the fastest that fits opt->memory. */
static pd_status pd__plan_2bw(pd__ctx *x, const pd_profile *p, const pd_profile *rp, const int *map, const int *inv,
                              const int *indeg, const pd__cuts *c, pd_plan **out) {
    pd_status st;
    double best_tp = -1;
    int best_d = 0, best_rc = 0, best_w = 1;
    pd__cut_plan best;
    memset(&best, 0, sizeof best);
    for (int d = 1; d <= x->workers; d++) {
        if (x->workers % d || d > c->n_states - 1) continue;
        for (int rc = 0; rc < 2; rc++) {
            pd__cut_plan t;
            memset(&t, 0, sizeof t);
            if (pd__straight(x, c, d, rc, &t) != PD_OK) continue; /* does not fit at this depth */
            pd_plan *cand;
            if ((st = pd__plan_alloc(p, t.n, &cand)) != PD_OK) {
                pd__cut_plan_free(&t);
                pd__cut_plan_free(&best);
                return st;
            }
            cand->algo = PD_ALGO_2BW;
            cand->recompute = rc;
            cand->width = x->workers / d;
            cand->microbatches = x->o->microbatches > 0 ? x->o->microbatches : t.n;
            pd__plan_from_cuts(x, rp, map, c, &t, cand);
            for (int s = 0; s < t.n; s++) cand->stage[s].replicas = 1;
            for (int v = 0; v < p->n; v++)
                if (inv[v] < 0) cand->fwd_stage[v] = -1;
            pd__place_skipped(cand, p, indeg);
            pd__plan_evaluate(cand, p, x);
            bool fits = true;
            for (int s = 0; s < t.n && x->mem > 0; s++) fits &= cand->stage[s].memory_bytes <= x->mem;
            if (fits && cand->throughput > best_tp * (1 + 1e-12)) {
                best_tp = cand->throughput;
                best_d = t.n;
                best_rc = rc;
                pd__cut_plan_free(&best);
                best.n = t.n;
                best.cut = (int *)PD_MALLOC(sizeof(int) * ((size_t)t.n + 1));
                best.rep = (int *)PD_MALLOC(sizeof(int) * (size_t)t.n);
                if (best.cut && best.rep) {
                    memcpy(best.cut, t.cut, sizeof(int) * ((size_t)t.n + 1));
                    memcpy(best.rep, t.rep, sizeof(int) * (size_t)t.n);
                }
                best_w = x->workers / d;
            }
            pd__plan_free(cand);
            pd__cut_plan_free(&t);
        }
    }
    if (best_tp < 0 || !best.cut) {
        pd__cut_plan_free(&best);
        return pd__err(PD_ERR_INVALID,
                       "plan: no 2bw configuration fits opt->memory %.0f bytes per worker on %d workers; raise "
                       "opt->memory or add workers", x->mem, x->workers);
    }
    pd_plan *pl;
    if ((st = pd__plan_alloc(p, best_d, &pl)) != PD_OK) {
        pd__cut_plan_free(&best);
        return st;
    }
    pl->algo = PD_ALGO_2BW;
    pl->recompute = best_rc;
    pl->width = best_w;
    pl->microbatches = x->o->microbatches > 0 ? x->o->microbatches : best_d;
    for (int v = 0; v < p->n; v++) pl->fwd_stage[v] = -1;
    pd__plan_from_cuts(x, rp, map, c, &best, pl);
    for (int s = 0; s < best_d; s++) pl->stage[s].replicas = 1;
    pd__cut_plan_free(&best);
    *out = pl;
    return PD_OK;
}

/* Over max_states ideals every cost model takes a beam of cuts (antichain.c;
 * -1: as wide as max_states allows). A topology's inner levels run a DP cubic
 * in the states (O(S^3 M^2)): there the beam gets a quarter of max_states
 * (T5 at 4x2: 495 states, 1.9 s), at least one cut per size and way while
 * that (about 4(n+1) states) fits in max_states and its ~3(n+1) states stay
 * under 1,024 (Inception-v3 at 4x2: 803 states, 25 s, against 2 s for its
 * 326 prefixes; NASNet-mobile's 2,700 would take hours), else the prefixes
 * alone (0). */
static int pd__beam_width(const pd__ctx *x, int n, int max_states) {
    if (x->levels == 1) return -1;
    if (max_states <= 0) max_states = 4096;
    if (max_states < 4 * (n + 1) || 3 * (n + 1) > 1024) return 0;
    int w = max_states / 4 / (2 * (n + 1)) - 1;
    return w > 1 ? w : 1;
}

/* PipeDream's algorithm on the cuts c: the DP (the default model's
 * bisection on one level), the plan evaluated. */
static pd_status pd__plan_dp(const pd__ctx *x, const pd_profile *p, const pd_profile *rp, const int *map,
                             const int *indeg, const pd__cuts *c, pd_plan **out) {
    pd__cut_plan cp;
    memset(&cp, 0, sizeof cp);
    pd_plan *pl = NULL;
    pd_status st = x->levels == 1 && !x->pd_model ? pd__fast(x, c, &cp) : pd__pipedream_dp(x, c, &cp);
    if (st == PD_OK) st = pd__plan_alloc(p, cp.n, &pl);
    if (st == PD_OK) {
        pl->algo = PD_ALGO_PIPEDREAM;
        pl->microbatches = x->o->microbatches > 0 ? x->o->microbatches : 1;
        for (int v = 0; v < p->n; v++) pl->fwd_stage[v] = -1;
        pd__plan_from_cuts(x, rp, map, c, &cp, pl);
        if (x->pd_model) pl->time_ms = cp.time_ms; /* PipeDream's own number */
        pd__place_skipped(pl, p, indeg);
        double dp_time = pl->time_ms;
        st = pd__plan_evaluate(pl, p, x);
        if (st == PD_OK && x->pd_model) {
            pl->time_ms = dp_time;
            pl->speedup = pl->single_ms / pl->time_ms;
            pl->dp_speedup = pl->dp_ms / pl->time_ms;
        }
    }
    pd__cut_plan_free(&cp);
    if (st != PD_OK) {
        pd__plan_free(pl);
        return st;
    }
    *out = pl;
    return PD_OK;
}

/* The default model on a topology: the DP minimises its per-level estimate,
 * which the evaluation can rank differently, so more cuts can evaluate worse
 * (Inception-v3 at 4x2: the beam's plan 482 ms, the prefixes' 289 ms). The
 * prefixes' plan replaces the beam's (*c and *pl) when it evaluates faster:
 * never worse than before the beam. */
static pd_status pd__prefixes_if_better(const pd__ctx *x, const pd_profile *p, const pd_profile *rp, const int *map,
                                        const int *indeg, pd__cuts **c, pd_plan **pl) {
    pd__cuts *c0 = NULL;
    pd_plan *pl0 = NULL;
    pd_status st = pd__cuts_build(rp, x->o->max_states > 0 ? x->o->max_states : 4096, 0, &c0);
    if (st == PD_OK) st = pd__plan_dp(x, p, rp, map, indeg, c0, &pl0);
    if (st == PD_OK && pl0->time_ms < (*pl)->time_ms) {
        pd__plan_free(*pl), pd__cuts_free(*c);
        *pl = pl0, *c = c0;
        return PD_OK;
    }
    pd__plan_free(pl0), pd__cuts_free(c0);
    return st;
}

/* The plan for a profile already at the microbatch size. */
static pd_status pd__plan_create_at(const pd_profile *p, const pd_plan_options *o, pd_plan **out) {
    pd__ctx x;
    memset(&x, 0, sizeof x);
    x.p = p;
    x.o = o;
    pd__algo algo = PD_ALGO_PIPEDREAM;
    PD_TRY(pd__algo_parse(o->algo, &algo));
    PD_TRY(pd__ctx_init(&x, p, o));

    if (algo == PD_ALGO_BIPARTITION) return pd__bipartition(&x, p, out);

    if (algo == PD_ALGO_UNIFORM || algo == PD_ALGO_PARAMS) return pd__plan_even(&x, p, algo, out);

    int *indeg = (int *)PD_CALLOC((size_t)p->n, sizeof(int)), *outdeg = (int *)PD_CALLOC((size_t)p->n, sizeof(int));
    int *map = (int *)PD_MALLOC(sizeof(int) * (size_t)p->n), *inv = (int *)PD_MALLOC(sizeof(int) * (size_t)p->n);
    pd_profile rp;
    memset(&rp, 0, sizeof rp);
    rp.node = (pd__pnode *)PD_MALLOC(sizeof(pd__pnode) * (size_t)p->n);
    rp.edge = (int *)PD_MALLOC(sizeof(int) * 2 * ((size_t)p->n_edges + 1));
    pd_profile ep;
    pd__pnode *ev_nodes = (pd__pnode *)PD_MALLOC(sizeof(pd__pnode) * (size_t)p->n);
    pd__cuts *c = NULL;
    pd_plan *pl = NULL;
    pd_status st = PD_OK;
    if (!indeg || !outdeg || !map || !inv || !rp.node || !rp.edge || !ev_nodes) {
        st = pd__err(PD_ERR_NOMEM, "plan: out of memory");
        goto done;
    }
    if ((st = pd__plan_dag(p, indeg, outdeg, map, inv, &rp, ev_nodes, &ep)) != PD_OK) goto done;
    p = &ep;
    if ((st = pd__cuts_build(&rp, o->max_states > 0 ? o->max_states : 4096, pd__beam_width(&x, rp.n, o->max_states),
                             &c)) != PD_OK)
        goto done;

    if (algo == PD_ALGO_AVGPIPE) {
        if ((st = pd__avgpipe_tune(&x, p, &rp, map, inv, indeg, c, &pl)) != PD_OK) goto done;
    } else if (algo == PD_ALGO_2BW) {
        if ((st = pd__plan_2bw(&x, p, &rp, map, inv, indeg, c, &pl)) != PD_OK) goto done;
    } else {
        if ((st = pd__plan_dp(&x, p, &rp, map, indeg, c, &pl)) != PD_OK) goto done;
        if (x.levels > 1 && !x.pd_model && c->beam > 0 && (st = pd__prefixes_if_better(&x, p, &rp, map, indeg, &c, &pl)))
            goto done;
    }
    if (algo == PD_ALGO_2BW) pd__place_skipped(pl, p, indeg);
    if (algo == PD_ALGO_2BW) {
        double dp_time = pl->time_ms;
        if ((st = pd__plan_evaluate(pl, p, &x)) != PD_OK) goto done;
        if (x.pd_model) {
            pl->time_ms = dp_time;
            pl->speedup = pl->single_ms / pl->time_ms;
            pl->dp_speedup = pl->dp_ms / pl->time_ms;
        }
    }
    pl->algo_name = pd__strdup(pd__algo_name(pl->algo));
    pl->cost_model = pd__strdup(x.pd_model ? "pipedream" : "default");
    pl->bandwidth = x.lb[0];
    pl->beam = c->beam;
    pl->prefix_only = c->prefix_only;
    pl->n_cut_states = c->n_states;
    if (!pl->algo_name || !pl->cost_model) st = pd__err(PD_ERR_NOMEM, "plan: out of memory");
done:
    pd__cuts_free(c);
    PD_FREE(indeg);
    PD_FREE(outdeg);
    PD_FREE(map);
    PD_FREE(inv);
    PD_FREE(rp.node);
    PD_FREE(rp.edge);
    PD_FREE(ev_nodes);
    if (st != PD_OK) {
        pd__plan_free(pl);
        return st;
    }
    *out = pl;
    return PD_OK;
}

/* ---- Bi-Partition ---------------------------------------------------------------------
 * Worker i runs the forward of nodes [f_i, f_i+1) and the backward of nodes
 * [b_i, b_i+1) of the topological order. Letting the two cuts differ
 * balances each worker's F+B load at a finer grain than one cut can. A node
 * whose backward runs on a neighbour must have no parameters (its weights and
 * their gradients stay with its forward), and its stashed activation travels
 * with the boundary gradient. Bisection on the worst load T; for each T a
 * frontier DP keeps, per forward cut, the furthest backward cut reachable. */
/* Bi-Partition's search state: prefix sums of forward (F) and backward (B)
 * time, the parameter-free window around each position, and per stage
 * count i and forward cut f the furthest backward cut reached (reach) and
 * the forward cut it came from (from). */
typedef struct pd__bip {
    int n, workers;
    double *F, *B;
    int *prevp, *nextp, *reach, *from;
} pd__bip;

#define PD__BIP_AT(a, x, i, f) (x)->a[(size_t)(i) * (size_t)((x)->n + 1) + (size_t)(f)]

static void pd__bip_free(pd__bip *x) {
    PD_FREE(x->F);
    PD_FREE(x->B);
    PD_FREE(x->prevp);
    PD_FREE(x->nextp);
    PD_FREE(x->reach);
    PD_FREE(x->from);
}

static pd_status pd__bip_init(pd__bip *x, const pd_profile *p, int workers) {
    int n = p->n;
    size_t cells = (size_t)(workers + 1) * ((size_t)n + 1);
    memset(x, 0, sizeof *x);
    x->n = n;
    x->workers = workers;
    x->F = (double *)PD_CALLOC((size_t)n + 1, sizeof(double));
    x->B = (double *)PD_CALLOC((size_t)n + 1, sizeof(double));
    x->prevp = (int *)PD_MALLOC(sizeof(int) * ((size_t)n + 1));
    x->nextp = (int *)PD_MALLOC(sizeof(int) * ((size_t)n + 1));
    x->reach = (int *)PD_MALLOC(sizeof(int) * cells);
    x->from = (int *)PD_MALLOC(sizeof(int) * cells);
    if (!x->F || !x->B || !x->prevp || !x->nextp || !x->reach || !x->from) return pd__err(PD_ERR_NOMEM, "plan: out of memory");
    for (int v = 0; v < n; v++) {
        x->F[v + 1] = x->F[v] + p->node[v].fwd_ms;
        x->B[v + 1] = x->B[v] + p->node[v].bwd_in_ms + p->node[v].bwd_w_ms;
    }
    /* prevp[k]: 1 + the last node with parameters before position k; nextp[k]: the first at or after k */
    x->prevp[0] = 0;
    for (int k = 1; k <= n; k++) x->prevp[k] = p->node[k - 1].param_bytes > 0 ? k : x->prevp[k - 1];
    x->nextp[n] = n;
    for (int k = n - 1; k >= 0; k--) x->nextp[k] = p->node[k].param_bytes > 0 ? k : x->nextp[k + 1];
    return PD_OK;
}

/* The furthest backward cut after b whose stage's backward fits in rest,
 * inside the parameter-free window of forward cut f2; -1 if none. */
static int pd__bip_furthest(const pd__bip *x, int b, int f2, double rest) {
    int n = x->n;
    int lo = b + 1 > x->prevp[f2] ? b + 1 : x->prevp[f2];
    int hi = f2 == n ? n : (x->nextp[f2] < n ? x->nextp[f2] : n);
    if (f2 == n) lo = lo > n ? lo : n;
    int best = -1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (x->B[mid] - x->B[b] <= rest) {
            best = mid;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    return best;
}

/* The fewest stages (0: none) that split the model with every stage's
 * forward plus backward time at most T; fills reach and from. */
static int pd__bip_fits(pd__bip *x, double T) {
    int n = x->n;
    for (size_t k = 0; k < (size_t)(x->workers + 1) * ((size_t)n + 1); k++) x->reach[k] = -1;
    PD__BIP_AT(reach, x, 0, 0) = 0;
    for (int i = 0; i < x->workers; i++) {
        for (int f = 0; f < n; f++) {
            int b = PD__BIP_AT(reach, x, i, f);
            if (b < 0) continue;
            for (int f2 = f + 1; f2 <= n; f2++) {
                double rest = T - (x->F[f2] - x->F[f]);
                if (rest < 0) break;
                int bb = pd__bip_furthest(x, b, f2, rest);
                if (bb > PD__BIP_AT(reach, x, i + 1, f2)) {
                    PD__BIP_AT(reach, x, i + 1, f2) = bb;
                    PD__BIP_AT(from, x, i + 1, f2) = f;
                }
            }
            if (PD__BIP_AT(reach, x, i + 1, n) == n) return i + 1;
        }
    }
    return 0;
}

/* The plan of the last feasible search: walk the cuts back from the end. */
static pd_status pd__bip_emit(const pd__bip *x, const pd_profile *p, const pd__ctx *c, int used, pd_plan **out) {
    pd_plan *pl;
    PD_TRY(pd__plan_alloc(p, used, &pl));
    pl->algo = PD_ALGO_BIPARTITION;
    pl->microbatches = c->o->microbatches > 0 ? c->o->microbatches : 1;
    for (int i = used, f = x->n; i > 0; i--) {
        int fprev = PD__BIP_AT(from, x, i, f), b = PD__BIP_AT(reach, x, i, f), bprev = PD__BIP_AT(reach, x, i - 1, fprev);
        for (int v = fprev; v < f; v++) pl->fwd_stage[v] = i - 1;
        for (int v = bprev; v < b; v++) pl->bwd_stage[v] = i - 1;
        pl->stage[i - 1].replicas = 1;
        f = fprev;
    }
    pd_status st = pd__plan_evaluate(pl, p, c);
    if (st == PD_OK && (!(pl->algo_name = pd__strdup(pd__algo_name(PD_ALGO_BIPARTITION))) || !(pl->cost_model = pd__strdup("default"))))
        st = pd__err(PD_ERR_NOMEM, "plan: out of memory");
    if (st != PD_OK) {
        pd__plan_free(pl);
        return st;
    }
    pl->bandwidth = c->lb[0];
    *out = pl;
    return PD_OK;
}

/* Bisect the slowest stage's time T; the last of 60 rounds re-runs the DP
 * at the feasible bound, so reach and from describe the plan emitted. */
static pd_status pd__bipartition(const pd__ctx *c, const pd_profile *p, pd_plan **out) {
    int n = p->n, P = c->workers;
    if (P > n) return pd__err(PD_ERR_INVALID, "plan: %d workers but the model has only %d nodes; set opt->workers to %d or fewer", P, n, n);
    pd__bip x;
    pd_status st = pd__bip_init(&x, p, P);
    double lo = 0, hi = st == PD_OK ? x.F[n] + x.B[n] : 0;
    int used = 0;
    for (int it = 0; st == PD_OK && it < 60; it++) {
        double T = it == 59 ? hi : 0.5 * (lo + hi);
        int ok = pd__bip_fits(&x, T);
        if (ok) {
            hi = T;
            used = ok;
        } else {
            lo = T;
        }
        if (it == 59 && !ok) st = pd__err(PD_ERR_INTERNAL, "plan: bipartition found no split");
    }
    if (st == PD_OK) st = pd__bip_emit(&x, p, c, used, out);
    pd__bip_free(&x);
    return st;
}

#undef PD__BIP_AT

/* ---- accessors ------------------------------------------------------------------------ */

pd_status pd_plan_info_get(const pd_plan *p, pd_plan_info *out) {
    if (!p || !out) return pd__err(PD_ERR_INVALID, "pd_plan_info_get: NULL argument");
    pd_plan_info i;
    memset(&i, 0, sizeof i);
    i.n_stages = p->n_stages;
    for (int s = 0; s < p->n_stages; s++) i.workers += p->stage[s].replicas;
    i.workers *= p->width > 0 ? p->width : 1;
    i.microbatches = p->microbatches;
    i.width = p->width;
    i.time_ms = p->time_ms;
    i.speedup = p->speedup;
    i.dp_speedup = p->dp_speedup;
    i.bubble = p->bubble;
    i.throughput = p->throughput;
    *out = i;
    return PD_OK;
}

pd_status pd_plan_stage(const pd_plan *p, int i, pd_stage_info *out) {
    if (!p || !out || i < 0 || i >= p->n_stages) return pd__err(PD_ERR_INVALID, "pd_plan_stage: stage %d out of range", i);
    pd_stage_info s;
    memset(&s, 0, sizeof s);
    s.first_node = -1;
    for (int v = 0; v < p->n_nodes; v++)
        if (p->fwd_stage[v] == i) {
            if (s.first_node < 0) s.first_node = v;
            s.n_nodes++;
        }
    const pd__stage *st = &p->stage[i];
    s.replicas = st->replicas;
    s.compute_ms = st->fwd_ms + st->bwd_in_ms + st->bwd_w_ms;
    s.comm_ms = 2 * st->send_ms;
    s.memory_bytes = st->memory_bytes;
    *out = s;
    return PD_OK;
}

int pd_plan_node_stage(const pd_plan *p, int i, int *bwd) {
    if (!p || i < 0 || i >= p->n_nodes) return -1;
    if (bwd) *bwd = p->bwd_stage[i];
    return p->fwd_stage[i];
}

pd_status pd_plan_create(const pd_profile *p, const pd_plan_options *user, pd_plan **out) {
    if (!p || !out) return pd__err(PD_ERR_INVALID, "pd_plan_create: NULL profile or out");
    pd_plan_options o = PD_PLAN_OPTIONS_INIT;
    PD_TRY(pd__opts_read(&o, user, sizeof o, "pd_plan_create: opt"));
    if (o.microbatch_size < 0 || o.microbatch_size > (int64_t)1 << 40)
        return pd__err(PD_ERR_INVALID, "plan: opt->microbatch_size must be 0 (the profile's batch) or a row count (got %lld)",
                       (long long)o.microbatch_size);
    if (o.microbatch_size == 0 || o.microbatch_size == p->batch) return pd__plan_create_at(p, &o, out);
    /* another microbatch size: plan on the profile scaled to it (per-call costs stay) */
    pd_profile *at = NULL;
    pd_status st = pd__profile_at(p, o.microbatch_size, &at);
    if (st != PD_OK) {
        pd__err_prefix("plan: opt->microbatch_size");
        return st;
    }
    st = pd__plan_create_at(at, &o, out);
    pd__profile_free_shallow(at);
    if (st == PD_OK) (*out)->profile_batch = p->batch;
    return st;
}
