/* test_plan.c - the planners against brute force and hand-derived figures.
 *
 * - The pipedream DP (both cost models) finds the optimum over every chain of
 *   valid cuts and every replica assignment of small random DAGs, enumerated
 *   here independently (subsets closed under predecessors).
 * - PipeDream's published profiles: plans are valid cuts of the DAG, their
 *   figures match sums taken by hand, and VGG-16's famous replicated
 *   configuration comes out.
 * - 2bw, bipartition, uniform and params on profiles whose answers are worked
 *   out in the comments; bad input gives errors naming the flag.
 *
 * argv[1]: ../shared/pipedream-profiles (skipped when absent).
 */
#include "../core/plan.h"
#include "check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static bool near(double a, double b, double rel) { return fabs(a - b) <= rel * (fabs(a) + fabs(b)) + 1e-12; }

static uint64_t rng_state = 88172645463325252ull;
static double urand(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}

/* A profile built by hand (names n0, n1, ...; nodes already in topological order). */
static pd_profile *mk_profile(int n) {
    pd_profile *p;
    if (pd__profile_new(n, &p) != PD_OK) return NULL;
    for (int i = 0; i < n; i++) {
        char nm[16];
        snprintf(nm, sizeof nm, "n%d", i);
        p->node[i].name = pd__strdup(nm);
        p->node[i].desc = pd__strdup("Layer");
    }
    return p;
}

/* ---- brute force ----------------------------------------------------------- */

typedef struct bf {
    const pd_profile *p;
    int n, M;
    double bw, mem;
    bool pd_model, straight;
    int n_ideals;
    unsigned ideal[256];
    double best;
} bf;

static double sum_over(const pd_profile *p, unsigned set, int what) {
    double s = 0;
    for (int v = 0; v < p->n; v++)
        if (set >> v & 1) {
            const pd__pnode *d = &p->node[v];
            s += what == 0 ? d->fwd_ms + d->bwd_in_ms + d->bwd_w_ms : what == 1 ? d->param_bytes : d->act_bytes;
        }
    return s;
}

/* bytes of the outputs of nodes in `set` with a consumer outside it */
static double crossing(const pd_profile *p, unsigned set) {
    double s = 0;
    for (int v = 0; v < p->n; v++) {
        if (!(set >> v & 1)) continue;
        bool out = false;
        for (int e = 0; e < p->n_edges; e++)
            if (p->edge[2 * e] == v && !(set >> p->edge[2 * e + 1] & 1)) out = true;
        if (out) s += p->node[v].act_bytes;
    }
    return s;
}

/* stages so far: cuts[0..k], reps[0..k-1] */
static void bf_eval(bf *b, const unsigned *cuts, const int *reps, int k) {
    unsigned full = (1u << b->n) - 1;
    int used = 0, total = 0;
    for (int i = 0; i < k; i++) total += reps[i];
    if (b->pd_model ? total != b->M : total > b->M) return;
    double worst = 0;
    for (int i = 0; i < k; i++) {
        unsigned st = cuts[i + 1] & ~cuts[i];
        double C = sum_over(b->p, st, 0), W = sum_over(b->p, st, 1), A = sum_over(b->p, st, 2);
        int r = reps[i];
        used += r;
        double t = (C + 4.0 * (r - 1) * W / (b->bw * r) * 1e3) / r;
        if (!b->pd_model) {
            double in = crossing(b->p, cuts[i]), out = cuts[i + 1] == full ? 0 : crossing(b->p, cuts[i + 1]);
            t = fmax(t, 2.0 * fmax(in, out) / (b->bw * r) * 1e3);
        }
        if (b->mem > 0) {
            double m;
            if (b->pd_model) {
                m = ceil((double)(b->M - used) / r) * (A + W);
            } else {
                double inflight = ceil((double)(total - used) / r) + 1;
                m = 2 * W + inflight * A + (inflight - 1) * W;
            }
            if (m > b->mem) return;
        }
        worst = fmax(worst, t);
    }
    if (worst < b->best) b->best = worst;
}

static void bf_rec(bf *b, unsigned *cuts, int *reps, int k, int left) {
    unsigned full = (1u << b->n) - 1;
    if (cuts[k] == full) {
        bf_eval(b, cuts, reps, k);
        return;
    }
    for (int i = 0; i < b->n_ideals; i++) {
        unsigned nx = b->ideal[i];
        if ((nx & cuts[k]) != cuts[k] || nx == cuts[k]) continue;
        for (int r = 1; r <= (b->straight ? 1 : left); r++) {
            cuts[k + 1] = nx;
            reps[k] = r;
            bf_rec(b, cuts, reps, k + 1, left - r);
        }
    }
}

static double brute_force(const pd_profile *p, int M, double bw, double mem, bool pd_model, bool straight) {
    bf b = {p, p->n, M, bw, mem, pd_model, straight, 0, {0}, INFINITY};
    for (unsigned s = 0; s < (1u << p->n); s++) {
        bool closed = true;
        for (int e = 0; e < p->n_edges; e++)
            if ((s >> p->edge[2 * e + 1] & 1) && !(s >> p->edge[2 * e] & 1)) closed = false;
        if (closed) b.ideal[b.n_ideals++] = s;
    }
    unsigned cuts[32] = {0};
    int reps[32];
    bf_rec(&b, cuts, reps, 0, M);
    return b.best;
}

static pd_profile *random_dag(int n, bool chain) {
    pd_profile *p = mk_profile(n);
    for (int v = 0; v < n; v++) {
        pd__pnode *d = &p->node[v];
        d->fwd_ms = 1 + 9 * urand();
        d->bwd_in_ms = d->fwd_ms * (0.5 + urand());
        d->bwd_w_ms = urand() < 0.6 ? d->fwd_ms * urand() : 0;
        d->param_bytes = d->bwd_w_ms > 0 ? 1e6 * (1 + 50 * urand()) : 0;
        d->act_bytes = 1e6 * (1 + 20 * urand());
    }
    for (int v = 1; v < n; v++) {
        if (chain) {
            pd__profile_add_edge(p, v - 1, v);
            continue;
        }
        /* one or two predecessors among the earlier nodes: branches and joins */
        int a = (int)(urand() * v);
        pd__profile_add_edge(p, a, v);
        if (v > 2 && urand() < 0.4) {
            int b = (int)(urand() * v);
            if (b != a) pd__profile_add_edge(p, b, v);
        }
    }
    pd__profile_finish(p, "random");
    return p;
}

static void test_optimal(void) {
    int cases = 0, bad_default = 0, bad_pd = 0, bad_mem = 0, bad_straight = 0, feasible = 0;
    double worst_gap = 0;
    for (int t = 0; t < 60; t++) {
        int n = 3 + t % 5; /* 3..7 nodes */
        pd_profile *p = random_dag(n, t % 3 == 0);
        int M = 1 + t % 4;
        double bw = t % 2 ? 1e9 : 5e10;
        for (int model = 0; model < 2; model++) {
            pd_plan_options o = PD_PLAN_OPTIONS_INIT;
            o.workers = M;
            o.bandwidth = bw;
            o.cost_model = model ? "pipedream" : "default";
            pd_plan *pl = NULL;
            double want = brute_force(p, M, bw, 0, model, false);
            if (pd_plan_create(p, &o, &pl) != PD_OK) {
                if (model) bad_pd++; else bad_default++;
                continue;
            }
            if (!near(pl->time_ms, want, 1e-8)) {
                if (model) bad_pd++; else bad_default++;
                printf("# case %d model %d: plan %.9g, brute force %.9g\n", t, model, pl->time_ms, want);
            }
            worst_gap = fmax(worst_gap, fabs(pl->time_ms - want) / want);
            pd_plan_destroy(pl);
            cases++;

            /* straight pipelines */
            o.straight = 1;
            want = brute_force(p, M, bw, 0, model, true);
            if (pd_plan_create(p, &o, &pl) == PD_OK) {
                if (!near(pl->time_ms, want, 1e-8)) bad_straight++;
                pd_plan_destroy(pl);
            } else if (!isinf(want) || model == 0) {
                bad_straight++;
            }
            o.straight = 0;

            /* a memory limit that binds: 60% of the single-stage need */
            double single = 0;
            for (int v = 0; v < n; v++) single += p->node[v].act_bytes + 2 * p->node[v].param_bytes;
            o.memory = 0.6 * single;
            want = brute_force(p, M, bw, o.memory, model, false);
            pd_status st = pd_plan_create(p, &o, &pl);
            if (isinf(want)) {
                if (st == PD_OK) {
                    bad_mem++;
                    pd_plan_destroy(pl);
                } else if (!strstr(pd_last_error(), "opt->memory")) {
                    bad_mem++;
                }
            } else {
                feasible++;
                if (st != PD_OK || !near(pl->time_ms, want, 1e-8)) {
                    printf("# memory case %d model %d: %s %.9g vs %.9g\n", t, model, st ? pd_last_error() : "plan",
                           st ? 0 : pl->time_ms, want);
                    bad_mem++;
                }
                if (st == PD_OK) pd_plan_destroy(pl);
            }
        }
        pd_profile_destroy(p);
    }
    CHECK(bad_default == 0, "default cost model: DP equals brute force over all cuts and replications (%d cases, worst gap %.1e)",
          cases, worst_gap);
    CHECK(bad_pd == 0, "pipedream cost model (exactly M workers): DP equals brute force");
    CHECK(bad_straight == 0, "--straight: DP equals brute force over unreplicated pipelines");
    CHECK(bad_mem == 0 && feasible > 10, "--memory: DP equals brute force, infeasible limits are errors (%d feasible)", feasible);
}

/* Every edge goes forward (or stays) in stage order; replicas add up. */
static bool valid_plan(const pd_profile *p, const pd_plan *pl) {
    for (int e = 0; e < p->n_edges; e++)
        if (pl->fwd_stage[p->edge[2 * e]] > pl->fwd_stage[p->edge[2 * e + 1]]) return false;
    for (int s = 0; s < pl->n_stages; s++) {
        bool any = false;
        for (int v = 0; v < p->n; v++) any |= pl->fwd_stage[v] == s;
        if (!any || pl->stage[s].replicas < 1) return false;
    }
    return true;
}

static void test_pipedream_profiles(const char *dir) {
    char path[4096];
    struct stat sb;
    if (!dir || stat(dir, &sb) != 0) {
        printf("# no PipeDream profiles at %s: skipped\n", dir ? dir : "(none)");
        return;
    }
    const char *models[] = {"vgg16", "resnet50", "gnmt", "inception_v3", "alexnet", "densenet121"};
    for (size_t m = 0; m < sizeof models / sizeof models[0]; m++) {
        snprintf(path, sizeof path, "%s/%s/graph.txt", dir, models[m]);
        pd_profile *p;
        if (pd_profile_load(path, &p) != PD_OK) {
            CHECK(0, "%s loads: %s", models[m], pd_last_error());
            continue;
        }
        /* one worker's time and data parallelism, summed by hand from the profile
         * (PipeDream zeroes its Input layers) */
        double single = 0, W = 0;
        for (int v = 0; v < p->n; v++) {
            if (p->node[v].desc && strncmp(p->node[v].desc, "Input", 5) == 0) continue;
            single += p->node[v].fwd_ms + p->node[v].bwd_in_ms + p->node[v].bwd_w_ms;
            W += p->node[v].param_bytes;
        }
        for (int model = 0; model < 2; model++) {
            pd_plan_options o = PD_PLAN_OPTIONS_INIT;
            int lw[2] = {4, 4};
            double lb[2] = {10e9, 1.25e9};
            o.n_levels = 2;
            o.level_workers = lw;
            o.level_bandwidth = lb;
            o.cost_model = model ? "pipedream" : "default";
            pd_plan *pl;
            if (pd_plan_create(p, &o, &pl) != PD_OK) {
                CHECK(0, "%s 4x4 %s: %s", models[m], o.cost_model, pd_last_error());
                continue;
            }
            int used = 0;
            for (int s = 0; s < pl->n_stages; s++) used += pl->stage[s].replicas;
            /* PipeDream's data-parallel time: level 1: (T + 4*3*W/(10e9*4))/4, level 2: (T1 + 4*3*W/(1.25e9*4)/4)/4 */
            double dp1 = (single + 4.0 * 3 * W / (10e9 * 4) * 1e3) / 4;
            double dp2 = (dp1 + 4.0 * 3 * W / (1.25e9 * 4) * 1e3 / 4) / 4;
            CHECK(valid_plan(p, pl) && (model ? used == 16 : used <= 16) && near(pl->single_ms, single, 1e-9) &&
                      near(pl->dp_ms, dp2, 1e-9) && pl->time_ms >= single / 16 * (1 - 1e-9) &&
                      near(pl->speedup, single / pl->time_ms, 1e-9),
                  "%s on 4x4 workers, %s cost model: %d stages on %d workers, speedup %.2fx, %.2fx over DP", models[m],
                  o.cost_model, pl->n_stages, used, pl->speedup, pl->dp_speedup);
            pd_plan_destroy(pl);
        }
        pd_profile_destroy(p);
    }

    /* VGG-16, 4 workers at 10 GB/s, PipeDream's cost model: PipeDream's "3-1"
     * configuration. Worked out by hand from graph.txt: node2..node16 (the
     * first nine conv layers; node1 is the Input, zeroed) take C1 = 508.686 ms
     * forward+backward with W1 = 6,941,952 bytes of weights; replicated 3 ways
     * they cost (C1 + 4*2*W1/(3*10e9 B/s))/3 = 170.1790624 ms; node17..node41
     * take C2 = 163.849 ms on one worker. The whole model on one worker:
     * 672.535 ms, so the speedup is 672.535/170.1790624 = 3.95193. */
    snprintf(path, sizeof path, "%s/vgg16/graph.txt", dir);
    pd_profile *p;
    if (pd_profile_load(path, &p) == PD_OK) {
        pd_plan_options o = PD_PLAN_OPTIONS_INIT;
        o.workers = 4;
        o.bandwidth = 10e9;
        o.cost_model = "pipedream";
        pd_plan *pl;
        if (pd_plan_create(p, &o, &pl) == PD_OK) {
            bool split = pl->n_stages == 2;
            for (int v = 0; split && v < p->n; v++) {
                int id = atoi(p->node[v].name + 4);
                split = pl->fwd_stage[v] == (id <= 16 ? 0 : 1);
            }
            CHECK(split && pl->stage[0].replicas == 3 && pl->stage[1].replicas == 1 &&
                      near(pl->time_ms, 170.1790624, 1e-9) && near(pl->speedup, 672.535 / 170.1790624, 1e-6),
                  "vgg16, 4 workers: 3-1 split after node16, %.7f ms (by hand 170.1790624), speedup %.5f (3.95193)",
                  pl->time_ms, pl->speedup);
            pd_plan_destroy(pl);
        } else {
            CHECK(0, "vgg16 plan: %s", pd_last_error());
        }
        pd_profile_destroy(p);
    }
}

/* 2bw on 8 equal layers: F = 1, B = 2 ms, 10 MB of weights, 1 MB of
 * activations each; 8 workers; 1 GB/s. Depth d, width w = 8/d, m = d:
 * step = d * 3*8/d + all-reduce 4(w-1)(80/d MB)/(w GB/s) = 24 + 320(w-1)/(d w) ms
 * -> d = 8 (no all-reduce) is fastest; with memory that fits two versions of
 * at most 20 MB of weights plus stashes, d = 8 is also the only... see below. */
static void test_2bw(void) {
    pd_profile *p = mk_profile(8);
    for (int v = 0; v < 8; v++) {
        p->node[v].fwd_ms = 1;
        p->node[v].bwd_in_ms = 1;
        p->node[v].bwd_w_ms = 1;
        p->node[v].param_bytes = 10e6;
        p->node[v].act_bytes = 1e6;
        if (v) pd__profile_add_edge(p, v - 1, v);
    }
    pd__profile_finish(p, "eight");
    pd_plan_options o = PD_PLAN_OPTIONS_INIT;
    o.algo = "2bw";
    o.workers = 8;
    o.bandwidth = 1e9;
    pd_plan *pl;
    if (pd_plan_create(p, &o, &pl) == PD_OK) {
        CHECK(pl->n_stages == 8 && pl->width == 1 && near(pl->time_ms, 8 * 3.0 + 0, 1e-9),
              "2bw: slow network -> depth 8, width 1, 8 microbatches of 3 ms (%d x %d, %.3f ms)", pl->n_stages,
              pl->width, pl->time_ms);
        pd_plan_destroy(pl);
    }
    /* Pipeline transfers now dominate: 100 MB activations at 10 GB/s cost
     * 2*100e6/10e9 = 20 ms per boundary per microbatch, so a stage takes
     * max(3 * 8/d, 20) ms and any d > 1 pays 20 ms per microbatch for 24/d ms
     * of compute; d = 1, w = 8: step = 1 * 24 + 4*7*80e6/(8*10e9) s = 24 + 28 ms,
     * throughput 8 / 52 ms; d = 2, w = 4: 2 * 20 + 4*3*40e6/(4*10e9) = 40 + 12 ms,
     * 4*2 / 52; d = 8: 8 * 20 = 160 ms for 8 -> 1/20. d=1 and d=2 tie at 8/52
     * per ms; the planner keeps the first (d = 1). */
    for (int v = 0; v < 8; v++) p->node[v].act_bytes = 100e6;
    o.bandwidth = 10e9;
    if (pd_plan_create(p, &o, &pl) == PD_OK) {
        CHECK(pl->n_stages == 1 && pl->width == 8 && near(pl->time_ms, 24 + 28, 1e-9),
              "2bw: heavy activations -> depth 1, width 8, 52 ms per step (%d x %d, %.3f ms)", pl->n_stages, pl->width,
              pl->time_ms);
        pd_plan_destroy(pl);
        /* memory: depth 1 needs 3*80 MB weights+grads + 1 stash of 800 MB = 1.04 GB;
         * depth 2 stage 0: 3*40 + 2*400 = 920 MB; limit 1 GB -> d = 2 */
        o.memory = 1e9;
        if (pd_plan_create(p, &o, &pl) == PD_OK) {
            CHECK(pl->n_stages == 2 && pl->width == 4 && near(pl->time_ms, 52, 1e-9),
                  "2bw: a 1 GB memory limit moves to depth 2, width 4 (%d x %d, %.3f ms)", pl->n_stages, pl->width,
                  pl->time_ms);
            pd_plan_destroy(pl);
        } else {
            CHECK(0, "2bw with memory: %s", pd_last_error());
        }
        o.memory = 1e6;
        pd_status st = pd_plan_create(p, &o, &pl);
        CHECK(st == PD_ERR_INVALID && strstr(pd_last_error(), "opt->memory"), "2bw: an impossible limit is an error: %s",
              pd_last_error());
    }
    pd_profile_destroy(p);
}

/* uniform / params / bipartition on a chain worked out by hand. */
static void test_baselines(void) {
    /* 6 nodes: params 0,10,0,30,0,20 MB; F 1..6 ms; B = 2F (all input-gradient for
     * parameter-free nodes, half and half otherwise) */
    pd_profile *p = mk_profile(6);
    double par[6] = {0, 10e6, 0, 30e6, 0, 20e6};
    for (int v = 0; v < 6; v++) {
        p->node[v].fwd_ms = v + 1;
        p->node[v].param_bytes = par[v];
        p->node[v].bwd_in_ms = par[v] > 0 ? v + 1 : 2 * (v + 1);
        p->node[v].bwd_w_ms = par[v] > 0 ? v + 1 : 0;
        p->node[v].act_bytes = 1e3;
        if (v) pd__profile_add_edge(p, v - 1, v);
    }
    pd__profile_finish(p, "six");
    pd_plan_options o = PD_PLAN_OPTIONS_INIT;
    o.workers = 3;
    o.algo = "uniform";
    pd_plan *pl;
    if (pd_plan_create(p, &o, &pl) == PD_OK) {
        CHECK(pl->n_stages == 3 && pl->fwd_stage[1] == 0 && pl->fwd_stage[2] == 1 && pl->fwd_stage[4] == 2,
              "uniform: 6 nodes on 3 workers -> 2 each");
        /* stage times 3*(1+2), 3*(3+4), 3*(5+6) = 9, 21, 33 ms */
        CHECK(near(pl->time_ms, 33, 1e-6), "uniform: bottleneck 33 ms (%.3f)", pl->time_ms);
        pd_plan_destroy(pl);
    }
    /* params: balance 10,30,20 MB over 3 -> {n0,n1,n2}, {n3,n4}, {n5} */
    o.algo = "params";
    if (pd_plan_create(p, &o, &pl) == PD_OK) {
        CHECK(pl->n_stages == 3 && pl->stage[0].param_bytes == 10e6 && pl->stage[1].param_bytes == 30e6 &&
                  pl->stage[2].param_bytes == 20e6,
              "params: one parameterised layer per stage (%g, %g, %g)", pl->stage[0].param_bytes,
              pl->n_stages > 1 ? pl->stage[1].param_bytes : 0, pl->n_stages > 2 ? pl->stage[2].param_bytes : 0);
        pd_plan_destroy(pl);
    }
    pd_profile_destroy(p);

    /* bipartition, 2 workers, 3 nodes: n0 F 1 B 2 (weights), n1 F 5 B 10 (no
     * weights), n2 F 1 B 2 (weights); 21 ms in all. One cut: {n0} | {n1, n2} =
     * 3 | 18 or {n0, n1} | {n2} = 18 | 3 -> 18 ms. Separate cuts may only move
     * n1's backward: forward {n0, n1} and backward {n0} on worker 0 = 6 + 2 = 8,
     * forward {n2} and backward {n1, n2} on worker 1 = 1 + 12 = 13 -> 13 ms
     * (the mirror image gives 13 too). */
    p = mk_profile(3);
    double f3[3] = {1, 5, 1}, b3[3] = {2, 10, 2};
    for (int v = 0; v < 3; v++) {
        p->node[v].fwd_ms = f3[v];
        p->node[v].bwd_in_ms = v == 1 ? b3[v] : b3[v] / 2;
        p->node[v].bwd_w_ms = v == 1 ? 0 : b3[v] / 2;
        p->node[v].param_bytes = v == 1 ? 0 : 1e6;
        p->node[v].act_bytes = 1e3;
        if (v) pd__profile_add_edge(p, v - 1, v);
    }
    pd__profile_finish(p, "three");
    o.algo = "bipartition";
    o.workers = 2;
    if (pd_plan_create(p, &o, &pl) == PD_OK) {
        double worst = 0;
        for (int s = 0; s < pl->n_stages; s++)
            worst = fmax(worst, pl->stage[s].fwd_ms + pl->stage[s].bwd_in_ms + pl->stage[s].bwd_w_ms);
        CHECK(pl->n_stages == 2 && near(worst, 13, 1e-9) && pl->fwd_stage[1] != pl->bwd_stage[1] &&
                  pl->fwd_stage[0] == pl->bwd_stage[0] && pl->fwd_stage[2] == pl->bwd_stage[2],
              "bipartition: worst worker 13 ms (one cut: 18) by moving n1's backward (%.3f ms)", worst);
        pd_plan_destroy(pl);
    } else {
        CHECK(0, "bipartition: %s", pd_last_error());
    }
    pd_profile_destroy(p);
}

static void test_errors(void) {
    pd_profile *p = mk_profile(3);
    for (int v = 0; v < 3; v++) {
        p->node[v].fwd_ms = 1;
        p->node[v].param_bytes = 1e6;
        p->node[v].act_bytes = 1e6;
        if (v) pd__profile_add_edge(p, v - 1, v);
    }
    pd__profile_finish(p, "three");
    pd_plan_options o = PD_PLAN_OPTIONS_INIT;
    pd_plan *pl = NULL;
    o.workers = 4;
    o.algo = "uniform";
    pd_status st = pd_plan_create(p, &o, &pl);
    CHECK(st == PD_ERR_INVALID && strstr(pd_last_error(), "only 3 nodes") && strstr(pd_last_error(), "opt->workers to 3"),
          "more stages than nodes: %s", pd_last_error());
    o.algo = "nope";
    st = pd_plan_create(p, &o, &pl);
    CHECK(st == PD_ERR_INVALID && strstr(pd_last_error(), "opt->algo"), "unknown algo: %s", pd_last_error());
    o.algo = NULL;
    o.memory = 1000;
    st = pd_plan_create(p, &o, &pl);
    CHECK(st == PD_ERR_INVALID && strstr(pd_last_error(), "opt->memory"), "impossible memory: %s", pd_last_error());
    o.memory = 0;
    o.cost_model = "fancy";
    st = pd_plan_create(p, &o, &pl);
    CHECK(st == PD_ERR_INVALID && strstr(pd_last_error(), "opt->cost_model"), "unknown cost model: %s", pd_last_error());
    o.cost_model = NULL;
    o.workers = 0;
    st = pd_plan_create(p, &o, &pl);
    CHECK(st == PD_ERR_INVALID && strstr(pd_last_error(), "opt->workers"), "zero workers: %s", pd_last_error());
    CHECK(pl == NULL, "failed calls leave the out-parameter untouched");
    pd_profile_destroy(p);
}

/* 1,000 nodes for 1,024 workers: the bisection DP (timed in bench/bench_plan). */
static void test_scale(void) {
    pd_profile *p = random_dag(1000, true);
    pd_plan_options o = PD_PLAN_OPTIONS_INIT;
    o.workers = 1024;
    pd_plan *pl;
    if (pd_plan_create(p, &o, &pl) != PD_OK) {
        CHECK(0, "1000 nodes, 1024 workers: %s", pd_last_error());
        pd_profile_destroy(p);
        return;
    }
    int used = 0;
    double worst = 0;
    for (int s = 0; s < pl->n_stages; s++) {
        used += pl->stage[s].replicas;
        worst = fmax(worst, pl->stage[s].time_ms);
    }
    double maxnode = 0;
    for (int v = 0; v < p->n; v++)
        maxnode = fmax(maxnode, p->node[v].fwd_ms + p->node[v].bwd_in_ms + p->node[v].bwd_w_ms);
    CHECK(valid_plan(p, pl) && used <= 1024 && near(worst, pl->time_ms, 1e-12) && pl->time_ms <= maxnode,
          "1000 nodes on 1024 workers: %d stages, %d workers used, bottleneck %.3f ms <= largest node %.3f ms",
          pl->n_stages, used, pl->time_ms, maxnode);
    pd_plan_destroy(pl);
    pd_profile_destroy(p);
}

/* The zoo's transformers and ResNets against an exhaustive search. Their
 * profiles (tests/fixtures/profiles, `pdonnx profile`) have 218 to 8,172
 * ideals: the DP over every ideal (every valid cut; checked against brute
 * force in test_optimal) is the exhaustive optimum. The same planner made to
 * take its beam (antichain.c) must find the same bottleneck at the default
 * --max-states and come within 1% at the narrowest beam (--max-states n+1:
 * one per size from each end; measured worst 0.64%, llama-dynamo on 3
 * workers). "beam 0" is the search over every ideal. T5 has too
 * many ideals to search: its beam holds every prefix of the topological
 * order (so it is never worse than the old prefix-only fallback), and every
 * state is a valid cut. */
static double zoo_plan(const pd_profile *p, int workers, int straight, int max_states, int *beam) {
    pd_plan_options o = PD_PLAN_OPTIONS_INIT;
    o.workers = workers;
    o.straight = straight;
    o.max_states = max_states;
    pd_plan *pl;
    if (pd_plan_create(p, &o, &pl) != PD_OK) return -1;
    double t = valid_plan(p, pl) ? pl->time_ms : -1;
    *beam = pl->prefix_only ? -1 : pl->beam;
    pd_plan_destroy(pl);
    return t;
}

static bool cuts_hold_prefixes(const pd_profile *p, const pd__cuts *c) {
    int w = c->words;
    for (int k = 0; k <= p->n; k++) {
        bool found = false;
        for (int s = 0; s < c->n_states && !found; s++) {
            const uint64_t *b = c->ideal + (size_t)s * w;
            bool is = true;
            for (int v = 0; v < p->n && is; v++) is = ((b[v >> 6] >> (v & 63)) & 1) == (v < k);
            found = is;
        }
        if (!found) return false;
    }
    for (int s = 0; s < c->n_states; s++) /* ideals: every edge into one starts inside it */
        for (int e = 0; e < p->n_edges; e++) {
            int u = p->edge[2 * e], v = p->edge[2 * e + 1];
            const uint64_t *b = c->ideal + (size_t)s * w;
            if (((b[v >> 6] >> (v & 63)) & 1) && !((b[u >> 6] >> (u & 63)) & 1)) return false;
        }
    return true;
}

static void test_zoo_cuts(const char *dir) {
    const char *models[] = {"resnet18-dynamo", "vit-ts", "gpt2-ts", "bert-ts", "llama-dynamo", "llama-ts"};
    char path[4096];
    for (size_t m = 0; m < sizeof models / sizeof models[0]; m++) {
        snprintf(path, sizeof path, "%s/%s.json", dir, models[m]);
        pd_profile *p;
        if (pd_profile_load(path, &p) != PD_OK) {
            CHECK(0, "%s loads: %s", path, pd_last_error());
            continue;
        }
        bool big = p->n > 120; /* the llamas' 7k-8k ideals: straight only, to keep the test short */
        for (int straight = 1; straight >= (big ? 1 : 0); straight--)
            for (int workers = 2; workers <= 4; workers++) {
                int bfull = 0, bdef = 0, bnarrow = 0;
                double full = zoo_plan(p, workers, straight, 1 << 20, &bfull);
                double def = zoo_plan(p, workers, straight, 4096, &bdef);
                double narrow = zoo_plan(p, workers, straight, p->n + 1, &bnarrow);
                CHECK(full > 0 && bfull == 0 && bnarrow == 1 && near(def, full, 1e-9) && narrow <= full * 1.01 &&
                          narrow >= full * (1 - 1e-9),
                      "%s, %d workers%s: every ideal %.6f ms; default (beam %d) %.6f; narrowest beam %.6f (+%.2f%%)",
                      models[m], workers, straight ? ", straight" : "", full, bdef, def, narrow,
                      100 * (narrow / full - 1));
            }
        pd_profile_destroy(p);
    }
    const char *wide[] = {"t5-ts", "llama-ts"};
    for (size_t m = 0; m < 2; m++) {
        snprintf(path, sizeof path, "%s/%s.json", dir, wide[m]);
        pd_profile *p;
        pd__cuts *c = NULL;
        if (pd_profile_load(path, &p) != PD_OK) {
            CHECK(0, "%s loads: %s", path, pd_last_error());
            continue;
        }
        pd_status st = pd__cuts_build(p, 4096, -1, &c);
        CHECK(st == PD_OK && c->beam > 0 && !c->prefix_only && c->n_states > p->n + 1 && c->n_states <= 4096 &&
                  cuts_hold_prefixes(p, c),
              "%s: %d nodes, a beam of %d: %d cut states, all valid, every topological prefix among them", wide[m],
              p->n, c ? c->beam : 0, c ? c->n_states : 0);
        pd__cuts_free(c);
        pd_profile_destroy(p);
    }
}

/* PipeDream's cost model and --topology take the same beam (partition.c:
 * pd__beam_width; a topology's inner levels a quarter of --max-states, so
 * the narrowest is at 16(n+1)). Against the search over every ideal where
 * that DP is feasible: zoo and PipeDream profiles, 2-4 workers, replicated
 * and straight; the topology 2x2 on both cost models. */
typedef struct {
    const char *cost;
    int levels, straight;
} pd_setup;

static double setup_plan(const pd_profile *p, const pd_setup *u, int workers, int max_states, int *beam) {
    pd_plan_options o = PD_PLAN_OPTIONS_INIT;
    int lw[2] = {2, 2};
    double lb[2] = {10e9, 1.25e9};
    o.cost_model = u->cost;
    o.workers = u->levels > 1 ? 4 : workers;
    o.n_levels = u->levels > 1 ? 2 : 0;
    o.level_workers = lw;
    o.level_bandwidth = lb;
    o.straight = u->straight;
    o.max_states = max_states;
    pd_plan *pl;
    if (pd_plan_create(p, &o, &pl) != PD_OK) return -1;
    double t = valid_plan(p, pl) ? pl->time_ms : -1;
    *beam = pl->prefix_only ? -1 : pl->beam;
    pd_plan_destroy(pl);
    return t;
}

static void beam_vs_every_ideal(const char *path, const char *name) {
    pd_profile *p;
    if (pd_profile_load(path, &p) != PD_OK) {
        CHECK(0, "%s loads: %s", path, pd_last_error());
        return;
    }
    pd_setup setups[] = {{"pipedream", 1, 0}, {"pipedream", 1, 1}, {"pipedream", 2, 0}, {"default", 2, 0}};
    pd__cuts *every = NULL;
    int ideals = pd__cuts_build(p, 1 << 20, -1, &every) == PD_OK ? every->n_states : 0;
    pd__cuts_free(every);
    for (size_t u = 0; u < sizeof setups / sizeof setups[0]; u++) {
        /* the inner level's DP is cubic in the ideals; the narrowest beam needs 4(n+1) states */
        if (setups[u].levels > 1 && (ideals > 1000 || ideals <= 4 * (p->n + 1))) continue;
        for (int workers = 2; workers <= (setups[u].levels > 1 ? 2 : 4); workers++) {
            int bfull = 0, bdef = 0, bnarrow = 0;
            int narrow_states = setups[u].levels > 1 ? 4 * (p->n + 1) : p->n + 1;
            double full = setup_plan(p, &setups[u], workers, 1 << 20, &bfull);
            double def = setup_plan(p, &setups[u], workers, 4096, &bdef);
            double narrow = setup_plan(p, &setups[u], workers, narrow_states, &bnarrow);
            CHECK(full > 0 && bfull == 0 && bnarrow == 1 && near(def, full, 1e-9) && narrow <= full * 1.01 &&
                      narrow >= full * (1 - 1e-9),
                  "%s, %s cost model, %s%s: every ideal %.6f ms; default (beam %d) %.6f; narrowest beam %.6f (+%.2f%%)",
                  name, setups[u].cost, setups[u].levels > 1 ? "topology 2x2" : workers == 2 ? "2 workers" : workers == 3 ? "3 workers" : "4 workers",
                  setups[u].straight ? ", straight" : "", full, bdef, def, narrow, 100 * (narrow / full - 1));
        }
    }
    pd_profile_destroy(p);
}

static void test_beam_models(const char *pd_dir, const char *zoo_dir) {
    const char *zoo[] = {"resnet18-dynamo", "vit-ts", "gpt2-ts", "bert-ts", "llama-dynamo", "llama-ts"};
    const char *pdm[] = {"resnet50", "densenet121", "gnmt"};
    char path[4096];
    struct stat sb;
    if (pd_dir && stat(pd_dir, &sb) != 0) pd_dir = NULL; /* skipped, as test_pipedream_profiles says */
    for (size_t m = 0; zoo_dir && m < sizeof zoo / sizeof zoo[0]; m++) {
        snprintf(path, sizeof path, "%s/%s.json", zoo_dir, zoo[m]);
        beam_vs_every_ideal(path, zoo[m]);
    }
    for (size_t m = 0; pd_dir && m < sizeof pdm / sizeof pdm[0]; m++) {
        snprintf(path, sizeof path, "%s/%s/graph.txt", pd_dir, pdm[m]);
        beam_vs_every_ideal(path, pdm[m]);
    }
}

/* A plan survives its JSON round trip. */
static void test_json(void) {
    pd_profile *p = random_dag(7, false);
    pd_plan_options o = PD_PLAN_OPTIONS_INIT;
    o.workers = 3;
    o.algo = "bipartition";
    pd_plan *pl, *back = NULL;
    if (pd_plan_create(p, &o, &pl) != PD_OK) {
        CHECK(0, "bipartition plan: %s", pd_last_error());
        pd_profile_destroy(p);
        return;
    }
    const char *path = "test_plan_roundtrip.json";
    pl->stage[1].has_device = true; /* a GPU stage's device (optional; the others take --device's) */
    pl->stage[1].device = 3;
    pd_status st = pd_plan_save(pl, path);
    if (st == PD_OK) st = pd_plan_load(path, &back);
    bool same = st == PD_OK && back->n_stages == pl->n_stages && back->n_nodes == pl->n_nodes &&
                near(back->time_ms, pl->time_ms, 1e-12);
    for (int v = 0; same && v < pl->n_nodes; v++)
        same = back->fwd_stage[v] == pl->fwd_stage[v] && back->bwd_stage[v] == pl->bwd_stage[v];
    for (int s = 0; same && s < pl->n_stages; s++)
        same = back->stage[s].replicas == pl->stage[s].replicas && near(back->stage[s].fwd_ms, pl->stage[s].fwd_ms, 1e-12) &&
               near(back->stage[s].send_ms, pl->stage[s].send_ms, 1e-12) &&
               back->stage[s].has_device == (s == 1) && back->stage[s].device == (s == 1 ? 3 : 0);
    CHECK(same, "plan JSON round trip keeps stages, nodes, figures and a stage's device%s%s", st ? ": " : "",
          st ? pd_last_error() : "");
    FILE *f = fopen(path, "w");
    fputs("{\"format\": \"pdonnx-plan\", \"workers\": 2, \"nodes\": [\"a\"], \"stages\": [{\"fwd_ms\": 1, \"bwd_in_ms\": 1, "
          "\"bwd_w_ms\": 0, \"nodes\": [\"b\"]}]}",
          f);
    fclose(f);
    pd_plan *bad = NULL;
    st = pd_plan_load(path, &bad);
    CHECK(st == PD_ERR_PARSE && strstr(pd_last_error(), path) && strstr(pd_last_error(), "unknown node 'b'"),
          "a plan naming an unknown node: %s", pd_last_error());
    pd_plan_destroy(bad);
    bad = NULL;
    f = fopen(path, "w");
    fputs("{\"format\": \"pdonnx-plan\", \"workers\": 1, \"nodes\": [\"a\"], \"stages\": [{\"fwd_ms\": 1, \"bwd_in_ms\": 1, "
          "\"bwd_w_ms\": 0, \"device\": -1, \"nodes\": [\"a\"]}]}",
          f);
    fclose(f);
    st = pd_plan_load(path, &bad);
    CHECK(st == PD_ERR_PARSE && strstr(pd_last_error(), "\"device\""), "a stage's device must be a GPU index: %s",
          pd_last_error());
    remove(path);
    pd_plan_destroy(back);
    pd_plan_destroy(pl);
    pd_profile_destroy(p);
}

int main(int argc, char **argv) {
    test_optimal();
    test_pipedream_profiles(argc > 1 ? argv[1] : NULL);
    test_2bw();
    test_baselines();
    test_errors();
    test_scale();
    test_json();
    if (argc > 2) test_zoo_cuts(argv[2]);
    test_beam_models(argc > 1 ? argv[1] : NULL, argc > 2 ? argv[2] : NULL);
    return check_summary();
}
