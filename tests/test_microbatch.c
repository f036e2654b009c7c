/* test_microbatch.c - per-call costs: what a microbatch costs beyond its
 * rows (issue 23: flush with small microbatches ran slower than the linearly
 * scaled profile predicted).
 *
 * A synthetic 2-node chain whose every time is t(b) = call + row * b, with
 * dyadic constants so every step is exact in doubles:
 *
 *   phase       call   row    t(8)   t(2)   linear from 8 to 2 rows
 *   forward     0.5    0.25   2.5    1.0    0.625
 *   input grad  0.5    0.5    4.5    1.5    1.125
 *   weight grad 0      0.25   2      0.5    0.5
 *
 * - pd_profile_fit from the profile at 8 and one at 2 rows (and 2 and 4)
 *   recovers call exactly; a time that shrinks faster than the rows has no
 *   call part, one that grows as the rows fall is all call;
 * - a plan at microbatches of 2 rows (2 straight stages, free transfers) has
 *   each stage at F 1, B 2 ms; flush with m = 4 takes (m + p - 1)(F + B) =
 *   15 ms, linear scaling (pd__plan_linear) 5 * 2.25 = 11.25 ms; one worker
 *   runs the minibatch's 8 rows as one call (18 ms, speedup 1.5), a
 *   data-parallel worker its 4 rows (10 ms);
 * - without per-call costs the scaled plan is the linear one, and a plan at
 *   the profile's own batch is the same JSON as one without the option, with
 *   no new keys (old plans and profiles read and write as before);
 * - profile and plan files keep the per-call costs exactly; a call part over
 *   its time, a profile without a batch, mismatched profiles are refused.
 */
#include "../core/plan.h"
#include "../core/schedule.h"
#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The chain at b rows: node times call + row * b (node 1 the same as node 0). */
static pd_profile *chain(int64_t b, bool fitted) {
    pd_profile_node_info n[2];
    memset(n, 0, sizeof n);
    for (int i = 0; i < 2; i++) {
        n[i].name = i ? "n1" : "n0";
        n[i].desc = "Gemm";
        n[i].fwd_ms = 0.5 + 0.25 * (double)b;
        n[i].bwd_in_ms = 0.5 + 0.5 * (double)b;
        n[i].bwd_w_ms = 0.25 * (double)b;
        n[i].param_bytes = 1024;
    }
    int e[2] = {0, 1};
    pd_profile *p = NULL;
    if (pd_profile_create(n, 2, e, 1, b, &p) != PD_OK) return NULL;
    if (!fitted) return p;
    pd_profile *at = chain(2, false);
    const pd_profile *list[1] = {at};
    pd_status st = at ? pd_profile_fit(p, list, 1) : PD_ERR_NOMEM;
    pd_profile_destroy(at);
    if (st != PD_OK) {
        pd_profile_destroy(p);
        return NULL;
    }
    return p;
}

static void test_fit(void) {
    pd_profile *p = chain(8, true);
    double c[3] = {-1, -1, -1};
    bool ok = p && pd_profile_node_call(p, 1, c) == PD_OK;
    CHECK(ok && c[0] == 0.5 && c[1] == 0.5 && c[2] == 0, "fit from 8 and 2 rows: per-call 0.5, 0.5, 0 ms (got %g, %g, %g)",
          c[0], c[1], c[2]);
    CHECK(p && p->node[0].fwd_ms == 2.5 && p->n_fit == 1 && p->fit_batch[0] == 2,
          "fit keeps the times at the profile's batch (forward 2.5 ms) and records batch 2");
    /* two other sizes on the same line: the least-squares line is that line */
    pd_profile *q = chain(8, false), *a2 = chain(2, false), *a4 = chain(4, false);
    const pd_profile *two[2] = {a2, a4};
    ok = q && a2 && a4 && pd_profile_fit(q, two, 2) == PD_OK && pd_profile_node_call(q, 0, c) == PD_OK;
    CHECK(ok && c[0] == 0.5 && c[1] == 0.5 && c[2] == 0, "fit from 8, 2 and 4 rows: per-call 0.5, 0.5, 0 ms (got %g, %g, %g)",
          c[0], c[1], c[2]);
    /* clamps: forward 0.1 ms at 2 rows (faster than linear: no call part), input
     * gradient 5 ms at 2 rows against 4.5 at 8 (all call) */
    a2->node[0].fwd_ms = 0.1;
    a2->node[0].bwd_in_ms = 5;
    const pd_profile *one[1] = {a2};
    ok = pd_profile_fit(q, one, 1) == PD_OK && pd_profile_node_call(q, 0, c) == PD_OK;
    CHECK(ok && c[0] == 0 && c[1] == 4.5, "fit clamps to [0, t]: forward call 0, input-gradient call 4.5 (got %g, %g)",
          c[0], c[1]);
    /* refused: the profile's own batch, another model, a profile without a batch */
    const pd_profile *self[1] = {q};
    CHECK(pd_profile_fit(q, self, 1) == PD_ERR_INVALID && strstr(pd_last_error(), "own batch"),
          "fit refuses a profile at its own batch: %s", pd_last_error());
    free(a4->node[1].name);
    a4->node[1].name = pd__strdup("other");
    const pd_profile *bad[1] = {a4};
    CHECK(pd_profile_fit(q, bad, 1) == PD_ERR_INVALID && strstr(pd_last_error(), "'other'"),
          "fit refuses another model's nodes: %s", pd_last_error());
    q->batch = 0;
    CHECK(pd_profile_fit(q, one, 1) == PD_ERR_INVALID && strstr(pd_last_error(), "batch"),
          "fit refuses a profile without a batch: %s", pd_last_error());
    pd_profile_destroy(p);
    pd_profile_destroy(q);
    pd_profile_destroy(a2);
    pd_profile_destroy(a4);
}

static pd_plan *plan_at(const pd_profile *p, int64_t mbs) {
    pd_plan_options o = PD_PLAN_OPTIONS_INIT;
    o.workers = 2;
    o.straight = 1;
    o.bandwidth = 1e18;
    o.microbatches = 4;
    o.microbatch_size = mbs;
    pd_plan *pl = NULL;
    if (pd_plan_create(p, &o, &pl) != PD_OK) printf("plan: %s\n", pd_last_error());
    return pl;
}

static double sim_ms(const pd_plan *pl, const char *kind) {
    pd_sim_options so = PD_SIM_OPTIONS_INIT;
    so.schedule = kind;
    pd_sim_result r;
    if (pd_simulate(pl, &so, &r) != PD_OK) return -1;
    double t = r.time_ms;
    pd_sim_result_free(&r);
    return t;
}

static void test_plan_and_simulate(void) {
    pd_profile *p = chain(8, true);
    pd_plan *pl = p ? plan_at(p, 2) : NULL;
    bool ok = pl && pl->n_stages == 2 && pl->microbatch_size == 2 && pl->profile_batch == 8;
    for (int s = 0; ok && s < 2; s++) {
        const pd__stage *st = &pl->stage[s];
        ok = st->fwd_ms == 1 && st->bwd_in_ms + st->bwd_w_ms == 2 && st->fwd_call_ms == 0.5 && st->bwd_in_call_ms == 0.5;
    }
    CHECK(ok, "plan at 2 rows from a profile at 8: 2 stages, each F 1 ms, B 2 ms, per-call 0.5 + 0.5 ms");
    /* the planner's steady state: m x the bottleneck, 4 x 3 ms */
    CHECK(pl && pl->time_ms == 12, "planner: 4 microbatches x 3 ms = 12 ms per minibatch (got %g)", pl ? pl->time_ms : -1);
    /* one worker runs the 8 rows as one call per node: 2 x (2.5 + 4.5 + 2); a
     * data-parallel worker its 4 rows: 2 x (1 + 4 x 1); the all-reduce ~0 */
    CHECK(pl && pl->single_ms == 18 && pl->speedup == 1.5 && fabs(pl->dp_ms - 10) < 1e-9,
          "one worker 18 ms (speedup 1.5, not 2), 2-way data parallelism 10 ms (got %g, %g, %g)", pl ? pl->single_ms : -1,
          pl ? pl->speedup : -1, pl ? pl->dp_ms : -1);
    double flush = pl ? sim_ms(pl, "flush") : -1, gpipe = pl ? sim_ms(pl, "gpipe") : -1;
    CHECK(flush == 15 && gpipe == 15, "simulated flush and gpipe: (m + p - 1)(F + B) = 5 x 3 = 15 ms (got %g, %g)", flush,
          gpipe);
    /* the plan file keeps what the simulator needs */
    char *js = pl ? pd__plan_to_json(pl) : NULL;
    pd_plan *back = NULL;
    ok = js && pd__plan_from_json(js, strlen(js), "plan", &back) == PD_OK && back->profile_batch == 8 &&
         back->stage[1].fwd_call_ms == 0.5 && back->stage[1].bwd_in_call_ms == 0.5 && sim_ms(back, "flush") == 15;
    CHECK(ok, "plan JSON keeps profile_batch 8 and the per-call costs: simulated again 15 ms");
    /* linear scaling (what the simulator predicted before): 5 x (0.625 + 1.625) */
    if (pl) pd__plan_linear(pl);
    double lin = pl ? sim_ms(pl, "flush") : -1;
    CHECK(lin == 11.25 && pl && !pd__plan_has_call(pl),
          "linear scaling from 8 rows: 5 x 2.25 = 11.25 ms, the overhead 15 / 11.25 (got %g)", lin);
    pd_plan_destroy(back);
    free(js);
    pd_plan_destroy(pl);
    pd_profile_destroy(p);
}

/* A profile with one size: scaled linearly, and at its own batch unchanged. */
static void test_one_size(void) {
    pd_profile *p = chain(8, false);
    pd_plan *pl = p ? plan_at(p, 2) : NULL;
    double t = pl ? sim_ms(pl, "flush") : -1;
    CHECK(t == 11.25 && pl && !pd__plan_has_call(pl), "one size, 2 rows from 8: linear, 11.25 ms (got %g)", t);
    char *js = pl ? pd__plan_to_json(pl) : NULL;
    CHECK(js && strstr(js, "\"profile_batch\":\t8") && !strstr(js, "call"),
          "the scaled plan says profile_batch 8, no per-call keys");
    free(js);
    pd_plan_destroy(pl);
    pd_plan *a = p ? plan_at(p, 0) : NULL, *b = p ? plan_at(p, 8) : NULL;
    char *ja = a ? pd__plan_to_json(a) : NULL, *jb = b ? pd__plan_to_json(b) : NULL;
    CHECK(ja && jb && strcmp(ja, jb) == 0 && !strstr(ja, "profile_batch") && !strstr(ja, "call"),
          "microbatch size 8 (the profile's) plans byte for byte as no size, without new keys");
    free(ja);
    free(jb);
    pd_plan_destroy(a);
    pd_plan_destroy(b);
    p->batch = 0; /* PipeDream's profiles: no batch, nothing to scale from */
    pd_plan_options o = PD_PLAN_OPTIONS_INIT;
    o.workers = 2;
    o.microbatch_size = 2;
    pd_plan *c = NULL;
    CHECK(pd_plan_create(p, &o, &c) == PD_ERR_INVALID && !c && strstr(pd_last_error(), "opt->microbatch_size"),
          "no batch in the profile: refused naming opt->microbatch_size: %s", pd_last_error());
    pd_profile_destroy(p);
}

static void test_files(const char *dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/microbatch_profile.json", dir);
    pd_profile *p = chain(8, true), *q = NULL;
    bool ok = p && pd_profile_save(p, path) == PD_OK && pd_profile_load(path, &q) == PD_OK;
    double c[3] = {-1, -1, -1};
    ok = ok && pd_profile_node_call(q, 0, c) == PD_OK && q->n_fit == 1 && q->fit_batch[0] == 2;
    CHECK(ok && c[0] == 0.5 && c[1] == 0.5 && c[2] == 0, "profile JSON keeps per-call 0.5, 0.5, 0 and fit_batches [2]");
    pd_profile_destroy(q);
    q = NULL;
    /* a per-call cost larger than its time */
    const char *bad = "{\"format\":\"pdonnx-profile\",\"version\":1,\"batch\":8,\"nodes\":["
                      "{\"name\":\"a\",\"fwd_ms\":1,\"fwd_call_ms\":2}]}";
    CHECK(pd__profile_parse("bad.json", bad, strlen(bad), &q) == PD_ERR_INVALID && !q &&
              strstr(pd_last_error(), "'a'") && strstr(pd_last_error(), "fwd_call_ms"),
          "a call part over its time is refused: %s", pd_last_error());
    pd_profile_destroy(p);
    remove(path);
}

int main(int argc, char **argv) {
    test_fit();
    test_plan_and_simulate();
    test_one_size();
    test_files(argc > 1 ? argv[1] : ".");
    return check_summary();
}
