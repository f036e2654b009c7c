/* bench_plan.c - how long the planners take as profiles and clusters grow.
 *
 *   bench_plan [NODES WORKERS COST_MODEL]...   default: the grid below
 *
 * Profiles are random chains (the worst case for the number of stage
 * candidates per cut state: every earlier state is one). Prints one JSON line
 * per case: {"nodes", "workers", "cost_model", "ms", "stages", "workers_used"}.
 * The default cost model is solved by bisection over the bottleneck with an
 * O(1) replica count per candidate stage: O(S^2/2 * log(1/eps)) for S cut
 * states, independent of the workers. PipeDream's cost model runs PipeDream's
 * own DP, O(S^2 * M^2) on one level, so its grid stops at fewer workers. */
#include "../core/plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double urand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

static int run(int n, int workers, const char *cm) {
    pd_profile *p;
    if (pd__profile_new(n, &p) != PD_OK) return 1;
    for (int v = 0; v < n; v++) {
        char nm[32];
        snprintf(nm, sizeof nm, "n%d", v);
        p->node[v].name = pd__strdup(nm);
        p->node[v].fwd_ms = 0.1 + urand();
        p->node[v].bwd_in_ms = p->node[v].fwd_ms;
        p->node[v].bwd_w_ms = urand() < 0.5 ? p->node[v].fwd_ms : 0;
        p->node[v].param_bytes = p->node[v].bwd_w_ms > 0 ? 4e6 * urand() : 0;
        p->node[v].act_bytes = 1e6 * urand();
        if (v) pd__profile_add_edge(p, v - 1, v);
    }
    if (pd__profile_finish(p, "bench") != PD_OK) return 1;
    pd_plan_options o = PD_PLAN_OPTIONS_INIT;
    o.workers = workers;
    o.cost_model = cm;
    pd_plan *pl;
    double t0 = bench_now();
    pd_status st = pd_plan_create(p, &o, &pl);
    double ms = (bench_now() - t0) * 1e3;
    if (st != PD_OK) {
        fprintf(stderr, "bench_plan: %s\n", pd_last_error());
        pd_profile_destroy(p);
        return 1;
    }
    int used = 0;
    for (int s = 0; s < pl->n_stages; s++) used += pl->stage[s].replicas;
    printf("{\"nodes\": %d, \"workers\": %d, \"cost_model\": \"%s\", \"ms\": %.1f, \"stages\": %d, \"workers_used\": %d}\n",
           n, workers, cm, ms, pl->n_stages, used);
    pd_plan_destroy(pl);
    pd_profile_destroy(p);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1) {
        if ((argc - 1) % 3) {
            fprintf(stderr, "usage: bench_plan [NODES WORKERS default|pipedream]...\n");
            return 2;
        }
        for (int i = 1; i < argc; i += 3)
            if (run(atoi(argv[i]), atoi(argv[i + 1]), argv[i + 2])) return 1;
        return 0;
    }
    static const struct {
        int n, w;
        const char *cm;
    } grid[] = {{100, 16, "default"},    {1000, 16, "default"},   {1000, 128, "default"},  {1000, 1024, "default"},
                {2000, 1024, "default"}, {100, 16, "pipedream"},  {1000, 16, "pipedream"}, {1000, 64, "pipedream"}};
    for (size_t i = 0; i < sizeof grid / sizeof grid[0]; i++)
        if (run(grid[i].n, grid[i].w, grid[i].cm)) return 1;
    return 0;
}
