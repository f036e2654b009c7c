/* test_header_only.c - the planner and simulator from the single header alone.
 *
 * Built from pipedream.h with PIPEDREAM_IMPLEMENTATION and nothing else (no
 * libpipedream, no protobuf, cJSON or OpenBLAS): a profile made in memory
 * with pd_profile_create, planned on 2 workers, simulated; the numbers are
 * checked against the ones worked out by hand below.
 *
 * The model: a chain of 4 nodes with (forward, input-gradient, weight-gradient)
 * times in ms of (1,2,0) (2,3,1) (1,1,1) (1,1,0), so each costs 3, 6, 3, 2 per
 * microbatch and 14 in all, and no bytes, so transfers and all-reduce are
 * free. The best 2-stage cut of 3 | 6 | 3 | 2 is {0,1} | {2,3}: 9 and 5 ms, a
 * bottleneck of 9 ms per microbatch. With 4 microbatches the planner predicts
 * 4 * 9 = 36 ms per minibatch, a speedup of 4 * 14 / 36 = 14/9 and an idle
 * fraction of 1 - 56 / (2 * 36) = 2/9.
 *
 * GPipe on that plan (F: 3 and 2 ms, B: 6 and 3 ms): stage 0's forwards end at
 * 3, 6, 9, 12; stage 1's at 5, 8, 11, 14; stage 1's backwards run 14..26
 * (the first ends at 17); stage 0's four backwards then run back to back from
 * 17 to 41. One minibatch takes 41 ms, with 56 ms of work on 2 workers.
 *
 * PipeDream-Flush (1F1B): stage 0 runs F0 F1 B0 F2 B1 F3 B2 B3, stage 1
 * F0 B0 F1 B1 F2 B2 F3 B3; stage 0 ends at 38 (F0 0-3, F1 3-6, B0 8-14, F2
 * 14-17, B1 17-23, F3 23-26, B2 26-32, B3 32-38).
 */
#define PIPEDREAM_IMPLEMENTATION
#include "pipedream.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static int failures;

#define CHECK(cond)                                                    \
    do {                                                               \
        if (!(cond)) {                                                 \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            failures++;                                                \
        }                                                              \
    } while (0)

#define CHECK_NEAR(a, b)                                                                              \
    do {                                                                                              \
        double a_ = (a), b_ = (b);                                                                    \
        if (!(fabs(a_ - b_) <= 1e-9 * (1 + fabs(b_)))) {                                              \
            fprintf(stderr, "%s:%d: %s = %.12g, expected %.12g\n", __FILE__, __LINE__, #a, a_, b_); \
            failures++;                                                                               \
        }                                                                                             \
    } while (0)

#define CHECK_OK(expr)                                                                              \
    do {                                                                                            \
        pd_status s_ = (expr);                                                                      \
        if (s_ != PD_OK) {                                                                          \
            fprintf(stderr, "%s:%d: %s: %s: %s\n", __FILE__, __LINE__, #expr, pd_status_name(s_),   \
                    pd_last_error());                                                               \
            failures++;                                                                             \
        }                                                                                           \
    } while (0)

static pd_profile_node_info node(const char *name, double f, double bi, double bw) {
    pd_profile_node_info n;
    memset(&n, 0, sizeof n);
    n.name = name;
    n.desc = "Gemm";
    n.fwd_ms = f;
    n.bwd_in_ms = bi;
    n.bwd_w_ms = bw;
    return n;
}

static void test_plan_and_simulate(void) {
    pd_profile_node_info nodes[4] = {node("a", 1, 2, 0), node("b", 2, 3, 1), node("c", 1, 1, 1), node("d", 1, 1, 0)};
    int edges[] = {0, 1, 1, 2, 2, 3};
    pd_profile *prof = NULL;
    CHECK_OK(pd_profile_create(nodes, 4, edges, 3, 8, &prof));
    if (!prof) return;
    CHECK(pd_profile_num_nodes(prof) == 4);
    pd_profile_node_info got;
    CHECK_OK(pd_profile_node(prof, 1, &got));
    CHECK(strcmp(got.name, "b") == 0 && strcmp(got.desc, "Gemm") == 0);
    CHECK_NEAR(got.bwd_w_ms, 1);

    pd_plan_options po = PD_PLAN_OPTIONS_INIT;
    po.workers = 2;
    po.straight = 1;
    po.microbatches = 4;
    pd_plan *plan = NULL;
    CHECK_OK(pd_plan_create(prof, &po, &plan));
    if (!plan) {
        pd_profile_destroy(prof);
        return;
    }
    pd_plan_info pi;
    CHECK_OK(pd_plan_info_get(plan, &pi));
    CHECK(pi.n_stages == 2);
    CHECK(pi.microbatches == 4);
    CHECK_NEAR(pi.time_ms, 36);
    CHECK_NEAR(pi.speedup, 14.0 / 9.0);
    CHECK_NEAR(pi.bubble, 2.0 / 9.0);
    CHECK_NEAR(pi.throughput, 8 * 4 / 0.036); /* samples of 4 microbatches of 8 per 36 ms */
    pd_stage_info st;
    CHECK_OK(pd_plan_stage(plan, 0, &st));
    CHECK(st.first_node == 0 && st.n_nodes == 2 && st.replicas == 1);
    CHECK_NEAR(st.compute_ms, 9);
    CHECK_OK(pd_plan_stage(plan, 1, &st));
    CHECK(st.first_node == 2 && st.n_nodes == 2 && st.replicas == 1);
    CHECK_NEAR(st.compute_ms, 5);
    int bwd = -1;
    CHECK(pd_plan_node_stage(plan, 1, &bwd) == 0 && bwd == 0);
    CHECK(pd_plan_node_stage(plan, 2, &bwd) == 1 && bwd == 1);

    pd_sim_options so = PD_SIM_OPTIONS_INIT;
    pd_sim_result r;
    so.schedule = "gpipe";
    so.minibatches = 1;
    CHECK_OK(pd_simulate(plan, &so, &r));
    if (r.stage) {
        CHECK(r.n_stages == 2);
        CHECK_NEAR(r.makespan_ms, 41);
        CHECK_NEAR(r.bubble, 1 - 56.0 / (2 * 41));
        CHECK_NEAR(r.stage[0].busy_ms, 36);
        CHECK_NEAR(r.stage[1].busy_ms, 20);
        CHECK(r.stage[0].peak_act_mbs == 4); /* GPipe holds every microbatch */
        printf("gpipe: makespan %.1f ms, bubble %.4f\n", r.makespan_ms, r.bubble);
    }
    pd_sim_result_free(&r);

    so.schedule = "flush";
    CHECK_OK(pd_simulate(plan, &so, &r));
    if (r.stage) {
        CHECK_NEAR(r.makespan_ms, 38);
        CHECK(r.stage[0].peak_act_mbs == 2); /* 1F1B: at most p - s in flight */
        CHECK(r.stage[1].peak_act_mbs == 1);
        printf("flush: makespan %.1f ms, bubble %.4f\n", r.makespan_ms, r.bubble);
    }
    pd_sim_result_free(&r);

    pd_plan_destroy(plan);
    pd_profile_destroy(prof);
}

static void test_errors(void) {
    pd_profile_node_info nodes[2] = {node(NULL, 1, 1, 0), node("y", 1, 1, 0)};
    pd_profile *prof = (pd_profile *)&failures; /* must stay untouched on failure */
    pd_profile *const sentinel = prof;
    int cyc[] = {0, 1, 1, 0};
    CHECK(pd_profile_create(nodes, 2, cyc, 2, 1, &prof) == PD_ERR_INVALID);
    CHECK(strstr(pd_last_error(), "cycle") != NULL);
    int bad[] = {0, 5};
    CHECK(pd_profile_create(nodes, 2, bad, 1, 1, &prof) == PD_ERR_INVALID);
    CHECK(strstr(pd_last_error(), "edges[0]") != NULL);
    CHECK(pd_profile_create(NULL, 2, NULL, 0, 1, &prof) == PD_ERR_INVALID);
    CHECK(strstr(pd_last_error(), "nodes") != NULL);
    CHECK(pd_profile_create(nodes, 2, NULL, 1, 1, &prof) == PD_ERR_INVALID);
    CHECK(strstr(pd_last_error(), "edges") != NULL);
    nodes[1].fwd_ms = NAN;
    CHECK(pd_profile_create(nodes, 2, NULL, 0, 1, &prof) == PD_ERR_INVALID);
    CHECK(strstr(pd_last_error(), "fwd_ms") != NULL);
    CHECK(prof == sentinel);
    nodes[1].fwd_ms = 1;
    CHECK(pd_profile_create(nodes, 2, NULL, 0, 1, NULL) == PD_ERR_INVALID);

    CHECK_OK(pd_profile_create(nodes, 2, NULL, 0, 0, &prof));
    pd_profile_node_info got;
    CHECK_OK(pd_profile_node(prof, 0, &got));
    CHECK(strcmp(got.name, "node0") == 0);
    CHECK(pd_profile_node(prof, 2, &got) == PD_ERR_INVALID);
    pd_plan_options po = PD_PLAN_OPTIONS_INIT;
    po.algo = "no-such-planner";
    pd_plan *plan = NULL;
    CHECK(pd_plan_create(prof, &po, &plan) == PD_ERR_INVALID && plan == NULL);
    CHECK(strstr(pd_last_error(), "no-such-planner") != NULL);
    pd_profile_destroy(prof);

    pd_profile_destroy(NULL);
    pd_plan_destroy(NULL);
    pd_sim_result_free(NULL);
}

int main(void) {
    test_plan_and_simulate();
    test_errors();
    if (failures) {
        printf("NOT OK: %d checks failed\n", failures);
        return 1;
    }
    printf("OK\n");
    return 0;
}
