/* test_schedule.c - the schedule generator and the simulator against closed
 * forms: bubbles of GPipe/1F1B ((p-1)/(m+p-1)), interleaved ((p-1)/(v*m) of
 * the ideal), zero-bubble H1 (a third of 1F1B's idle time), activation and
 * weight-version peaks, the asynchronous steady state (the bottleneck stage),
 * transfers; validation of hand-broken schedules; pd_simulate on a plan built
 * here; Chrome trace and SVG output. */
#include "../core/schedule.h"
#include "check.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bool near(double a, double b) { return fabs(a - b) <= 1e-9 * (1 + fabs(b)); }

static double ones[64];

static pd__schedule *build(pd__sched_kind k, int p, int v, int m, int n, const int *replicas) {
    pd__schedule *s = NULL;
    if (pd__schedule_build(k, p, v, m, n, replicas, &s) != PD_OK) {
        printf("# build failed: %s\n", pd_last_error());
        return NULL;
    }
    return s;
}

/* Simulates with the same f, b, w on every virtual stage and no transfers. */
static bool sim(pd__sched_kind k, int p, int v, int m, int n, double f, double b, double w, pd_sim_result *r) {
    pd__schedule *s = build(k, p, v, m, n, NULL);
    double fa[64], ba[64], wa[64];
    for (int i = 0; i < 64; i++) fa[i] = f, ba[i] = b, wa[i] = w;
    bool ok = s && pd__simulate_schedule(s, fa, ba, wa, NULL, ones, NULL, r, NULL) == PD_OK;
    if (!ok) printf("# simulate failed: %s\n", pd_last_error());
    pd__schedule_free(s);
    return ok;
}

static void test_parse(void) {
    const char *names[] = {"gpipe", "flush", "pipedream", "2bw", "interleaved", "zb-h1", "avgpipe"};
    bool ok = true;
    pd__sched_kind k;
    for (int i = 0; i < 7; i++) ok = ok && pd__sched_kind_parse(names[i], &k) == PD_OK && (int)k == i;
    ok = ok && pd__sched_kind_parse("1f1b", &k) == PD_OK && k == PD_SCHED_FLUSH;
    CHECK(ok, "kind names parse (1f1b is flush)");
    CHECK(pd__sched_kind_parse("zb-h2", &k) == PD_ERR_INVALID && strstr(pd_last_error(), "'zb-h2'") &&
              strstr(pd_last_error(), "gpipe, flush (1f1b), pipedream, 2bw, interleaved, zb-h1 or avgpipe"),
          "an unknown kind is refused, listing the valid ones (%s)", pd_last_error());
}

/* GPipe and 1F1B with F = B and no transfers: bubble (p-1)/(m+p-1), makespan
 * (m+p-1)(F+B); activations held: m everywhere for GPipe, min(p-s, m) at
 * stage s for 1F1B; one weight version. */
static void test_flush_closed_forms(void) {
    bool bub = true, mem = true, per = true;
    for (int p = 1; p <= 6; p++) {
        for (int m = 1; m <= 12; m++) {
            for (int k = PD_SCHED_GPIPE; k <= PD_SCHED_FLUSH; k++) {
                pd_sim_result r;
                if (!sim(k, p, 1, m, 1, 1, 0.5, 0.5, &r)) {
                    bub = false;
                    continue;
                }
                double want = (double)(p - 1) / (m + p - 1);
                if (!near(r.bubble, want) || !near(r.time_ms, 2.0 * (m + p - 1))) {
                    printf("# %s p=%d m=%d: bubble %.6f (want %.6f), time %.3f\n", pd__sched_kind_name(k), p, m,
                           r.bubble, want, r.time_ms);
                    bub = false;
                }
                for (int s = 0; s < p; s++) {
                    int held = k == PD_SCHED_GPIPE ? m : (p - s < m ? p - s : m);
                    if (r.stage[s].peak_act_mbs != held || !near(r.stage[s].peak_act_bytes, held) ||
                        r.stage[s].peak_versions != 1 || !near(r.stage[s].busy_ms, 2.0 * m))
                        mem = false;
                }
                pd_sim_result_free(&r);
                /* a flush makes every minibatch a copy of the first */
                if (m % 4 == 0 && sim(k, p, 1, m, 3, 1, 0.5, 0.5, &r)) {
                    per = per && near(r.time_ms, 2.0 * (m + p - 1)) && near(r.makespan_ms, 3 * 2.0 * (m + p - 1));
                    pd_sim_result_free(&r);
                }
            }
        }
    }
    CHECK(bub, "gpipe and flush: bubble (p-1)/(m+p-1) and time (m+p-1)(F+B) for p 1..6, m 1..12");
    CHECK(mem, "gpipe holds m microbatches on every stage, flush min(p-s, m); one weight version");
    CHECK(per, "three flushed minibatches take three times one");
}

/* Megatron's interleaved 1F1B, v chunks of cost f = b = 1: the bubble is
 * (p-1)(f+b) per worker, a fraction (p-1)/(v*m) of the ideal m*v*(f+b). */
static void test_interleaved(void) {
    bool ok = true, err = true;
    for (int p = 1; p <= 6; p++) {
        for (int v = 2; v <= 3; v++) {
            for (int m = p; m <= 12; m += p) {
                pd_sim_result r;
                if (!sim(PD_SCHED_INTERLEAVED, p, v, m, 1, 1, 1, 0, &r)) {
                    ok = false;
                    continue;
                }
                double ideal = 2.0 * m * v, idle = r.makespan_ms - ideal;
                if (!near(idle / ideal, (double)(p - 1) / (v * m))) {
                    printf("# interleaved p=%d v=%d m=%d: idle %.3f of ideal %.3f\n", p, v, m, idle, ideal);
                    ok = false;
                }
                pd_sim_result_free(&r);
            }
        }
    }
    CHECK(ok, "interleaved: bubble / ideal = (p-1)/(v*m) for p 1..6, v 2..3, m multiples of p up to 12");
    pd__schedule *s = NULL;
    err = pd__schedule_build(PD_SCHED_INTERLEAVED, 4, 2, 6, 1, NULL, &s) == PD_ERR_INVALID && !s &&
          strstr(pd_last_error(), "multiple of the pipeline stages");
    CHECK(err, "interleaved refuses m not a multiple of p (%s)", pd_last_error());
    err = pd__schedule_build(PD_SCHED_INTERLEAVED, 4, 1, 8, 1, NULL, &s) == PD_ERR_INVALID &&
          pd__schedule_build(PD_SCHED_FLUSH, 4, 2, 8, 1, NULL, &s) == PD_ERR_INVALID && !s;
    CHECK(err, "chunks: at least 2 for interleaved, 1 for the others");
    /* Megatron's order on the first worker of p=2, v=2, m=4: 4 warm-up forwards
     * (chunk 0 mbs 0,1, chunk 1 mbs 0,1), then 1F1B over mirrored chunks */
    s = build(PD_SCHED_INTERLEAVED, 2, 2, 4, 1, NULL);
    char buf[512] = "";
    FILE *f = tmpfile();
    if (s && f && pd__schedule_write(s, f, false) == PD_OK) {
        rewind(f);
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        buf[n] = 0;
    }
    if (f) fclose(f);
    CHECK(
        strstr(buf, "stage 0: F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0 STEP\n"),
        "interleaved order on stage 0 of p=2 v=2 m=4 is Megatron's");
    pd__schedule_free(s);
}

/* Zero-bubble H1 with F = B = W = 1: makespan 3m + p - 1, idle (p-1) per
 * worker against 1F1B's 3(p-1); in-flight microbatches p on every worker,
 * 1F1B's peak (its first worker). */
static void test_zb_h1(void) {
    bool ok = true, mem = true;
    for (int p = 1; p <= 6; p++) {
        for (int m = p; m <= 12; m++) {
            pd_sim_result zb, fl;
            if (!sim(PD_SCHED_ZB_H1, p, 1, m, 1, 1, 1, 1, &zb)) {
                ok = false;
                continue;
            }
            if (!sim(PD_SCHED_FLUSH, p, 1, m, 1, 1, 1, 1, &fl)) {
                pd_sim_result_free(&zb);
                ok = false;
                continue;
            }
            double idle_zb = zb.makespan_ms - 3 * m, idle_fl = fl.makespan_ms - 3 * m;
            if (!near(zb.makespan_ms, 3 * m + p - 1) || !near(idle_zb * 3, idle_fl)) ok = false;
            int peak = 0;
            for (int s = 0; s < p; s++) {
                if (zb.stage[s].peak_act_mbs != p) mem = false;
                if (fl.stage[s].peak_act_mbs > peak) peak = fl.stage[s].peak_act_mbs;
            }
            if (peak != p) mem = false;
            pd_sim_result_free(&zb);
            pd_sim_result_free(&fl);
        }
    }
    CHECK(ok, "zb-h1: makespan 3m+p-1, a third of 1F1B's idle time (F = B = W, m >= p)");
    CHECK(mem, "zb-h1: p microbatches in flight on every stage, the peak of 1F1B");
    pd_sim_result zb, fl;
    if (sim(PD_SCHED_ZB_H1, 4, 1, 12, 1, 1, 1, 1, &zb) && sim(PD_SCHED_FLUSH, 4, 1, 12, 1, 1, 1, 1, &fl)) {
        double ratio = zb.bubble / fl.bubble;
        CHECK(near(zb.bubble, 3.0 / 39) && near(fl.bubble, 3.0 / 15) && ratio > 0.3 && ratio < 0.4,
              "zb-h1 p=4 m=12: bubble 3/39 against 1F1B's 3/15 (ratio %.3f)", ratio);
        pd_sim_result_free(&zb);
        pd_sim_result_free(&fl);
    }
    /* the order on the last stage of p=3, m=4: W deferred by s = 2 microbatches */
    pd__schedule *s = build(PD_SCHED_ZB_H1, 3, 1, 4, 1, NULL);
    char buf[512] = "";
    FILE *f = tmpfile();
    if (s && f && pd__schedule_write(s, f, false) == PD_OK) {
        rewind(f);
        buf[fread(buf, 1, sizeof buf - 1, f)] = 0;
    }
    if (f) fclose(f);
    CHECK(strstr(buf, "stage 0: F0 F1 F2 B0 W0 F3 B1 W1 B2 W2 B3 W3 STEP\n") &&
              strstr(buf, "stage 2: F0 B0 F1 B1 F2 B2 W0 F3 B3 W1 W2 W3 STEP\n"),
          "zb-h1 orders on p=3 m=4");
    pd__schedule_free(s);
}

/* PipeDream (async, stashing): stage s holds p-s weight versions and p-s
 * microbatches in the steady state; 2BW at most two versions; both run at the
 * bottleneck stage's F+B per microbatch. */
static void test_async(void) {
    bool vers = true, two = true;
    for (int p = 1; p <= 6; p++) {
        for (int m = 1; m <= 12; m++) {
            pd_sim_result r;
            /* 12 microbatches at least: stage s reaches p-s versions once 2(p-s-1) have started */
            if (sim(PD_SCHED_PIPEDREAM, p, 1, m, 12, 1, 1, 0, &r)) {
                for (int s = 0; s < p; s++) {
                    int want = p - s;
                    if (r.stage[s].peak_versions != want || r.stage[s].peak_act_mbs != want) vers = false;
                }
                pd_sim_result_free(&r);
            } else {
                vers = false;
            }
            if (sim(PD_SCHED_2BW, p, 1, m, 6, 1, 1, 0, &r)) {
                int most = 0;
                for (int s = 0; s < p; s++)
                    if (r.stage[s].peak_versions > most) most = r.stage[s].peak_versions;
                if (most > 2 || (p > 1 && most != 2)) two = false;
                pd_sim_result_free(&r);
            } else {
                two = false;
            }
        }
    }
    CHECK(vers, "pipedream: stage s holds p-s weight versions and p-s microbatches");

    /* the whole run, fill and drain included (what `pdonnx train` measures and
     * sets beside the simulator's): PipeDream's N minibatches of one
     * microbatch, F = B, no transfers, leave a worker idle as a flush of N
     * microbatches does, (p-1)/(N+p-1) of the makespan (N + p - 1)(F + B),
     * where the steady state (the simulator's window, p + 1 minibatches in from
     * each end) has no bubble */
    bool run = true;
    for (int p = 1; p <= 5; p++)
        for (int n = 1; n <= 16; n++) {
            pd_sim_result r;
            if (!sim(PD_SCHED_PIPEDREAM, p, 1, 1, n, 1, 0.5, 0.5, &r)) {
                run = false;
                continue;
            }
            double busy = 0, want = (double)(p - 1) / (n + p - 1);
            for (int w = 0; w < p; w++) busy += r.stage[w].busy_ms;
            double whole = 1 - busy / (p * r.makespan_ms);
            if (!near(whole, want) || !near(r.makespan_ms, 2.0 * (n + p - 1)) || (n >= 2 * p + 4 && !near(r.bubble, 0))) {
                printf("# pipedream p=%d N=%d: whole-run idle %.6f (want %.6f), makespan %.3f, steady %.6f\n", p, n,
                       whole, want, r.makespan_ms, r.bubble);
                run = false;
            }
            pd_sim_result_free(&r);
        }
    CHECK(run, "pipedream over N minibatches of one microbatch: idle (p-1)/(N+p-1) of the run, none in the steady state");
    CHECK(two, "2bw: never more than two weight versions (two once p > 1)");

    /* unequal stages: the bottleneck is stage 1 with F+B = 2+3 */
    double f[4] = {1, 2, 1, 0.5}, b[4] = {2, 3, 1, 2};
    for (int k = PD_SCHED_PIPEDREAM; k <= PD_SCHED_2BW; k++) {
        for (int m = 4; m <= 8; m += 4) {
            pd__schedule *s = build(k, 4, 1, m, 16, NULL);
            pd_sim_result r;
            bool ok = s && pd__simulate_schedule(s, f, b, NULL, NULL, NULL, NULL, &r, NULL) == PD_OK;
            CHECK(ok && near(r.time_ms, 5.0 * m) && near(r.throughput, m / (5.0 * m / 1000)) &&
                      near(r.bubble, 1 - (3 + 5 + 2 + 2.5) / (4 * 5.0)),
                  "%s m=%d: steady state at the bottleneck, %.4f ms per minibatch (want %.1f), bubble %.4f",
                  pd__sched_kind_name(k), m, ok ? r.time_ms : -1, 5.0 * m, ok ? r.bubble : -1);
            if (ok) pd_sim_result_free(&r);
            pd__schedule_free(s);
        }
    }
}

/* Versions the builders assign: pipedream's F uses the updates done so far;
 * 2bw's minibatch t uses version max(t-1, 0); flushing kinds use t. */
static void test_versions(void) {
    pd__schedule *pd = build(PD_SCHED_PIPEDREAM, 3, 1, 2, 4, NULL), *bw = build(PD_SCHED_2BW, 3, 1, 3, 4, NULL);
    pd__schedule *fl = build(PD_SCHED_FLUSH, 3, 1, 3, 4, NULL);
    bool a = pd && bw && fl, b = a, c = a;
    for (int w = 0; a && w < 3; w++) {
        int steps = 0;
        for (int i = 0; i < pd->len[w]; i++) {
            const pd__instr *in = &pd->ins[w][i];
            if (in->op == PD_I_STEP) steps++;
            if (in->op == PD_I_F && in->version != steps) a = false;
        }
        for (int i = 0; i < bw->len[w]; i++) {
            const pd__instr *in = &bw->ins[w][i];
            int t = in->mb / 3;
            if ((in->op == PD_I_F || in->op == PD_I_B) && in->version != (t > 0 ? t - 1 : 0)) b = false;
            if (in->op == PD_I_STEP && (in->version != t + 1 || in->mb % 3 != 2)) b = false;
        }
        for (int i = 0; i < fl->len[w]; i++) {
            const pd__instr *in = &fl->ins[w][i];
            if ((in->op == PD_I_F || in->op == PD_I_B) && in->version != in->mb / 3) c = false;
        }
    }
    CHECK(a, "pipedream: an F uses the version after the updates so far (its B the same, validated)");
    CHECK(b, "2bw: minibatch t computes on version max(t-1, 0); the step after it makes t+1");
    CHECK(c, "flush: minibatch t uses version t");
    pd__schedule_free(pd);
    pd__schedule_free(bw);
    pd__schedule_free(fl);
}

/* Every kind builds and validates on a grid; replicated stages all-reduce. */
static void test_grid(void) {
    int bad = 0, n = 0, ar = 0;
    int reps[6] = {2, 1, 3, 1, 1, 2};
    for (int k = PD_SCHED_GPIPE; k <= PD_SCHED_AVGPIPE; k++) {
        for (int p = 1; p <= 6; p++) {
            for (int m = 1; m <= 12; m++) {
                for (int v = 2; v <= (k == PD_SCHED_INTERLEAVED ? 3 : 2); v++) {
                    int chunks = k == PD_SCHED_INTERLEAVED ? v : 1;
                    if (k == PD_SCHED_INTERLEAVED && m % p != 0) continue;
                    pd__schedule *s = NULL;
                    n++;
                    if (pd__schedule_build(k, p, chunks, m, 2, reps, &s) != PD_OK ||
                        pd__schedule_validate(s) != PD_OK) {
                        if (bad++ < 5)
                            printf("# %s p=%d m=%d v=%d: %s\n", pd__sched_kind_name(k), p, m, chunks, pd_last_error());
                    } else {
                        for (int w = 0; w < p; w++)
                            for (int i = 0; i < s->len[w]; i++)
                                if (s->ins[w][i].op == PD_I_ALLREDUCE &&
                                    (reps[w] < 2 || s->ins[w][i + 1].op != PD_I_STEP))
                                    ar++;
                    }
                    pd__schedule_free(s);
                }
            }
        }
    }
    CHECK(bad == 0 && n > 450, "every kind validates for p 1..6, m 1..12, v 2..3 (%d schedules, %d failed)", n, bad);
    CHECK(ar == 0, "ALLREDUCE only on replicated stages, right before STEP");
}

/* AvgPipe's advance forward propagation with bound L (stage s: min(max(L-s-1,
 * 0), m) warm-up forwards). Per stage: m F, m B, one STEP per minibatch, and
 * the sends/receives of its links; at most min(max(L-s, 1), m) microbatches
 * held; L = p is exactly flush. Unit costs (F = B = 1) and no transfers: the
 * makespan is 1F1B's 2(m+p-1) for every L >= p (running ahead costs nothing)
 * and 2(m+p-1) + 2(p-L)(m-1) below (a stage s >= L waits a full round trip
 * per microbatch). With transfers the forwards run ahead hide them: the
 * makespan does not grow with L from p on, and at L = 2p it is below flush's. */
static void test_avgpipe(void) {
    bool counts = true, peak = true, same = true, mk = true, comm = true, def = true;
    for (int p = 1; p <= 5; p++) {
        for (int m = 1; m <= 9; m++) {
            for (int L = 1; L <= 2 * p + 2; L++) {
                pd__schedule *s = NULL;
                if (pd__schedule_build_avgpipe(p, m, 2, NULL, L, &s) != PD_OK || pd__schedule_validate(s) != PD_OK) {
                    printf("# avgpipe p=%d m=%d L=%d: %s\n", p, m, L, pd_last_error());
                    counts = false;
                    pd__schedule_free(s);
                    continue;
                }
                for (int w = 0; w < p; w++) {
                    int c[PD_I_SNAPSHOT + 1] = {0};
                    for (int i = 0; i < s->len[w]; i++) c[s->ins[w][i].op]++;
                    int links = (w > 0) + (w < p - 1);
                    if (c[PD_I_F] != 2 * m || c[PD_I_B] != 2 * m || c[PD_I_W] || c[PD_I_STEP] != 2 ||
                        c[PD_I_ALLREDUCE] || s->len[w] != 2 * (2 * m + 2 * m * links + 1))
                        counts = false;
                }
                pd_sim_result r;
                double fa[8], ba[8], xa[8];
                for (int i = 0; i < 8; i++) fa[i] = ba[i] = 1, xa[i] = 0;
                pd__schedule_free(s);
                s = NULL;
                if (pd__schedule_build_avgpipe(p, m, 1, NULL, L, &s) != PD_OK ||
                    pd__simulate_schedule(s, fa, ba, NULL, xa, ones, NULL, &r, NULL) != PD_OK) {
                    counts = false;
                    pd__schedule_free(s);
                    continue;
                }
                for (int w = 0; w < p; w++) {
                    int want = L - w > 1 ? L - w : 1;
                    if (r.stage[w].peak_act_mbs != (want < m ? want : m)) peak = false;
                }
                double want = 2.0 * (m + p - 1) + (L < p ? 2.0 * (p - L) * (m - 1) : 0);
                if (!near(r.makespan_ms, want)) {
                    if (mk) printf("# avgpipe p=%d m=%d L=%d: makespan %.3f, want %.3f\n", p, m, L, r.makespan_ms, want);
                    mk = false;
                }
                pd_sim_result_free(&r);
                if (L == p) { /* the same instructions as flush */
                    pd__schedule *fl = build(PD_SCHED_FLUSH, p, 1, m, 1, NULL);
                    for (int w = 0; fl && w < p; w++)
                        same = same && fl->len[w] == s->len[w] &&
                               memcmp(fl->ins[w], s->ins[w], sizeof(pd__instr) * (size_t)s->len[w]) == 0;
                    same = same && fl;
                    pd__schedule_free(fl);
                }
                pd__schedule_free(s);
            }
            /* transfers of 0.5 and 1 (F = B = 1) */
            for (int h = 1; h <= 2 && p >= 2 && m >= 4; h++) {
                double fa[8], ba[8], xa[8], prev = 0, fl = 0;
                for (int i = 0; i < 8; i++) fa[i] = ba[i] = 1, xa[i] = 0.5 * h;
                for (int L = p; L <= 2 * p; L++) {
                    pd__schedule *s = NULL;
                    pd_sim_result r;
                    if (pd__schedule_build_avgpipe(p, m, 1, NULL, L, &s) != PD_OK ||
                        pd__simulate_schedule(s, fa, ba, NULL, xa, ones, NULL, &r, NULL) != PD_OK) {
                        comm = false;
                        pd__schedule_free(s);
                        break;
                    }
                    if (L == p) fl = r.makespan_ms;
                    if (L > p && r.makespan_ms > prev + 1e-9) comm = false;
                    if (L == 2 * p && !(r.makespan_ms < fl - 0.5)) {
                        printf("# avgpipe p=%d m=%d send %.1f: L=2p %.3f, flush %.3f\n", p, m, 0.5 * h, r.makespan_ms,
                               fl);
                        comm = false;
                    }
                    prev = r.makespan_ms;
                    pd_sim_result_free(&r);
                    pd__schedule_free(s);
                }
            }
        }
    }
    pd__schedule *s = build(PD_SCHED_AVGPIPE, 4, 1, 8, 1, NULL);
    def = s && s->inflight == 5 && pd__avgpipe_default_inflight(4) == 5;
    char buf[1024] = "";
    FILE *f = tmpfile();
    if (def && f && pd__schedule_write(s, f, false) == PD_OK) rewind(f), buf[fread(buf, 1, sizeof buf - 1, f)] = 0;
    def = def && strstr(buf, "at most 5 in flight per stage") && strstr(buf, "stage 0: F0 F1 F2 F3 F4 B0 F5 B1") &&
          strstr(buf, "stage 3: F0 F1 B0 F2 B1");
    if (f) fclose(f);
    pd__schedule_free(s);
    s = NULL;
    def = def && pd__schedule_build_avgpipe(3, 4, 1, NULL, 0, &s) == PD_ERR_INVALID && !s &&
          strstr(pd_last_error(), "in flight");
    CHECK(counts, "avgpipe validates (p 1..5, m 1..9, L 1..2p+2): m F, m B and one STEP per minibatch per stage");
    CHECK(peak, "avgpipe: stage s holds at most min(max(L-s, 1), m) microbatches");
    CHECK(same, "avgpipe with L = p is flush, instruction for instruction");
    CHECK(mk, "avgpipe, F = B = 1, no transfers: makespan 2(m+p-1), plus 2(p-L)(m-1) when L < p");
    CHECK(comm, "avgpipe with transfers: the makespan does not grow with L >= p and is below flush's at L = 2p");
    CHECK(def, "avgpipe: default bound p + 1, printed; a bound of 0 is refused");
}

/* ---- hand-broken schedules --------------------------------------------------- */

static int find(const pd__schedule *s, int w, int op, int mb) {
    for (int i = 0; i < s->len[w]; i++)
        if (s->ins[w][i].op == op && s->ins[w][i].mb == mb) return i;
    return -1;
}

static void drop(pd__schedule *s, int w, int i) {
    memmove(&s->ins[w][i], &s->ins[w][i + 1], sizeof(pd__instr) * (size_t)(s->len[w] - i - 1));
    s->len[w]--;
}

static bool says(const char *a, const char *b, const char *c) {
    const char *e = pd_last_error();
    bool ok = strstr(e, a) && (!b || strstr(e, b)) && (!c || strstr(e, c));
    if (!ok) printf("# message: %s\n", e);
    return ok;
}

static void test_validation(void) {
    /* B before its F on the last stage */
    pd__schedule *s = build(PD_SCHED_FLUSH, 3, 1, 4, 1, NULL);
    int f = find(s, 2, PD_I_F, 1), b = find(s, 2, PD_I_B, 1);
    pd__instr t = s->ins[2][f];
    s->ins[2][f] = s->ins[2][b], s->ins[2][b] = t;
    char where[64];
    snprintf(where, sizeof where, "stage 2, instruction %d (B mb 1", f);
    CHECK(pd__schedule_validate(s) == PD_ERR_INVALID && says(where, "before its F", NULL),
          "validation: a B before its F is named by stage, instruction and mb");
    pd__schedule_free(s);

    /* a dropped RECV_ACT */
    s = build(PD_SCHED_FLUSH, 3, 1, 4, 1, NULL);
    drop(s, 1, find(s, 1, PD_I_RECV_ACT, 2));
    CHECK(pd__schedule_validate(s) == PD_ERR_INVALID && says("stage 1, instruction", "(F mb 2", "no RECV_ACT"),
          "validation: a dropped RECV_ACT");
    pd__schedule_free(s);

    /* a dropped SEND_GRAD: the receive waits forever */
    s = build(PD_SCHED_GPIPE, 3, 1, 4, 1, NULL);
    drop(s, 2, find(s, 2, PD_I_SEND_GRAD, 3));
    CHECK(pd__schedule_validate(s) == PD_ERR_INVALID && says("stage 2", "never runs SEND_GRAD of mb 3", NULL),
          "validation: a dropped SEND_GRAD");
    pd__schedule_free(s);

    /* a W missing after a split B */
    s = build(PD_SCHED_ZB_H1, 3, 1, 4, 1, NULL);
    drop(s, 1, find(s, 1, PD_I_W, 0));
    CHECK(pd__schedule_validate(s) == PD_ERR_INVALID && says("never runs W of mb 0", NULL, NULL),
          "validation: a missing W");
    pd__schedule_free(s);

    /* receives in another order than the sends: stage 1 takes mb 1 first */
    s = build(PD_SCHED_GPIPE, 2, 1, 2, 1, NULL);
    int r0 = find(s, 1, PD_I_RECV_ACT, 0), r1 = find(s, 1, PD_I_RECV_ACT, 1);
    int f0 = find(s, 1, PD_I_F, 0), f1 = find(s, 1, PD_I_F, 1);
    t = s->ins[1][r0], s->ins[1][r0] = s->ins[1][r1], s->ins[1][r1] = t;
    t = s->ins[1][f0], s->ins[1][f0] = s->ins[1][f1], s->ins[1][f1] = t;
    CHECK(pd__schedule_validate(s) == PD_ERR_INVALID && says("(RECV_ACT mb 1 from stage 0)", "carries mb 0", NULL),
          "validation: receives out of the sends' order");
    pd__schedule_free(s);

    /* a deadlock: stage 0 waits for gradient 0 before sending activation 1,
     * stage 1 wants activation 1 before its first backward */
    pd__instr a[] = {
        {PD_I_F, 0, 0, 0, 0, -1},         {PD_I_SEND_ACT, 0, 0, 0, -1, 1}, {PD_I_RECV_GRAD, 0, 0, 0, -1, 1},
        {PD_I_B, 0, 0, 0, 0, -1},         {PD_I_F, 0, 0, 1, 0, -1},        {PD_I_SEND_ACT, 0, 0, 1, -1, 1},
        {PD_I_RECV_GRAD, 0, 0, 1, -1, 1}, {PD_I_B, 0, 0, 1, 0, -1},        {PD_I_STEP, 0, 0, 1, 1, -1}};
    pd__instr c[] = {
        {PD_I_RECV_ACT, 0, 0, 0, -1, 0}, {PD_I_F, 0, 0, 0, 0, -1},         {PD_I_RECV_ACT, 0, 0, 1, -1, 0},
        {PD_I_F, 0, 0, 1, 0, -1},        {PD_I_B, 0, 0, 0, 0, -1},         {PD_I_SEND_GRAD, 0, 0, 0, -1, 0},
        {PD_I_B, 0, 0, 1, 0, -1},        {PD_I_SEND_GRAD, 0, 0, 1, -1, 0}, {PD_I_STEP, 0, 0, 1, 1, -1}};
    int len[2] = {9, 9};
    pd__instr *ins[2] = {a, c};
    pd__schedule h = {PD_SCHED_FLUSH, 2, 1, 2, 1, len, ins, 0};
    CHECK(pd__schedule_validate(&h) == PD_ERR_INVALID && says("waits forever", "deadlock", NULL),
          "validation: a hand-made deadlock");
    /* the same lists in a consistent order pass */
    pd__instr a2[9] = {a[0], a[1], a[4], a[5], a[2], a[3], a[6], a[7], a[8]};
    ins[0] = a2;
    CHECK(pd__schedule_validate(&h) == PD_OK, "validation: the reordered hand-made schedule passes");
    /* a B using another version than its F */
    c[4].version = 1;
    CHECK(pd__schedule_validate(&h) == PD_ERR_INVALID && says("(B mb 0", "another weight version", NULL),
          "validation: weight stashing (a B on its F's version)");
}

/* Transfers: each takes send_ms, one at a time per link direction. */
static void test_transfers(void) {
    double f[2] = {1, 1}, b[2] = {1, 1}, x[2] = {0.5, 0};
    pd__schedule *s = build(PD_SCHED_FLUSH, 2, 1, 1, 1, NULL);
    pd_sim_result r;
    bool ok = s && pd__simulate_schedule(s, f, b, NULL, x, NULL, NULL, &r, NULL) == PD_OK;
    CHECK(ok && near(r.makespan_ms, 5), "one microbatch on two stages: 1 + 0.5 + 1 + 1 + 0.5 + 1 = 5 ms (%.3f)",
          ok ? r.makespan_ms : -1);
    if (ok) pd_sim_result_free(&r);
    pd__schedule_free(s);
    /* gpipe, 3 microbatches, send 3: activations arrive at 4, 7, 10; gradients
     * (B2 first) leave at 12, 13, 14 and arrive at 15, 18, 21; B0 ends at 22 */
    x[0] = 3;
    s = build(PD_SCHED_GPIPE, 2, 1, 3, 1, NULL);
    ok = s && pd__simulate_schedule(s, f, b, NULL, x, NULL, NULL, &r, NULL) == PD_OK;
    CHECK(ok && near(r.makespan_ms, 22), "a link carries one transfer at a time (makespan %.3f, want 22)",
          ok ? r.makespan_ms : -1);
    if (ok) pd_sim_result_free(&r);
    pd__schedule_free(s);
}

static void test_write(void) {
    pd__schedule *s = build(PD_SCHED_FLUSH, 2, 1, 2, 1, (const int[]){2, 1});
    char buf[2048] = "";
    FILE *f = tmpfile();
    bool ok = s && f && pd__schedule_write(s, f, false) == PD_OK;
    if (ok) rewind(f), buf[fread(buf, 1, sizeof buf - 1, f)] = 0;
    CHECK(ok && strstr(buf, "stage 0: F0 F1 B0 B1 AR STEP\nstage 1: F0 B0 F1 B1 STEP\n"), "text: per-stage lines");
    if (f) fclose(f);
    f = tmpfile();
    ok = s && f && pd__schedule_write(s, f, true) == PD_OK;
    if (ok) rewind(f), buf[fread(buf, 1, sizeof buf - 1, f)] = 0;
    int lines = 0;
    for (char *c = buf; *c; c++) lines += *c == '\n';
    const char *head = "stage,index,op,chunk,mb,version,peer\n0,0,F,0,0,0,-1\n0,1,SEND_ACT,0,0,-1,1\n";
    CHECK(ok && strncmp(buf, head, strlen(head)) == 0 && lines == 1 + s->len[0] + s->len[1] &&
              strstr(buf, "1,0,RECV_ACT,0,0,-1,0\n"),
          "csv: a header and one row per instruction");
    if (f) fclose(f);
    pd__schedule_free(s);
}

/* ---- pd_simulate on a plan ------------------------------------------------------ */

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *s = malloc((size_t)n + 1);
    if (s) s[fread(s, 1, (size_t)n, f)] = 0;
    fclose(f);
    return s;
}

static void test_plan(void) {
    pd__stage st[3] = {0};
    for (int i = 0; i < 3; i++) {
        st[i].replicas = 1;
        st[i].fwd_ms = 2, st[i].bwd_in_ms = 2, st[i].bwd_w_ms = 2;
        st[i].act_bytes = 1000, st[i].param_bytes = 4000;
    }
    st[0].replicas = 2, st[0].fwd_ms = 4, st[0].bwd_in_ms = 4, st[0].bwd_w_ms = 4, st[0].allreduce_ms = 1;
    struct pd_plan pl = {0};
    pl.n_stages = 3, pl.stage = st, pl.chunks = 1, pl.workers = 4, pl.microbatches = 6, pl.microbatch_size = 8;
    pl.width = 1;
    char dir[] = "/tmp/pd_sched_XXXXXX", trace[64], svg[64], tmp[80];
    bool have_dir = mkdtemp(dir) != NULL;
    snprintf(trace, sizeof trace, "%s/t.json", dir);
    snprintf(svg, sizeof svg, "%s/t.svg", dir);

    pd_sim_options o = PD_SIM_OPTIONS_INIT;
    o.schedule = "1f1b";
    o.trace = have_dir ? trace : NULL;
    o.svg = have_dir ? svg : NULL;
    pd_sim_result r;
    /* stage 0 replicated twice: per worker 2+2+2 like the others; flush: (6+2)*6 + the all-reduce */
    bool ok = pd_simulate(&pl, &o, &r) == PD_OK;
    CHECK(ok && near(r.time_ms, 8 * 6 + 1) && near(r.throughput, 48 / 0.049) && r.n_stages == 3 &&
              r.stage[0].peak_act_mbs == 3 && near(r.stage[0].peak_act_bytes, 3000) && near(r.stage[0].busy_ms, 36),
          "pd_simulate: a replicated stage runs r times faster, all-reduce before the step (%.3f ms)",
          ok ? r.time_ms : -1);
    if (ok) pd_sim_result_free(&r);
    /* pipedream: the two replicas take turns, one all-reduce per two updates:
     * stage 0 costs 6 + 1/2 per microbatch, the bottleneck */
    pd_sim_options po = PD_SIM_OPTIONS_INIT;
    po.schedule = "pipedream";
    ok = pd_simulate(&pl, &po, &r) == PD_OK;
    CHECK(ok && near(r.time_ms, 6.5 * 6), "pd_simulate: pipedream's replicas share an all-reduce (%.3f ms, want 39)",
          ok ? r.time_ms : -1);
    if (ok) pd_sim_result_free(&r);
    /* parallel pipelines: every stage all-reduces with its twins */
    pl.width = 2;
    pd__sim_plan sp;
    int ar = 0;
    if (pd__sim_plan_make(&pl, &po, &sp) == PD_OK) {
        for (int w = 0; w < 3; w++) ar += sp.sched->ins[w][sp.sched->len[w] - 2].op == PD_I_ALLREDUCE;
        CHECK(ar == 3 && sp.samples == 8 * 6 * 2, "width 2: an ALLREDUCE on every worker, twice the samples");
        pd__sim_plan_free(&sp);
    }
    pl.width = 1;

    char *js = have_dir ? slurp(trace) : NULL;
    cJSON *j = js ? cJSON_Parse(js) : NULL;
    int x = 0, named = 0, counters = 0;
    for (cJSON *e = j ? j->child : NULL; e; e = e->next) {
        const char *ph = cJSON_GetStringValue(cJSON_GetObjectItem(e, "ph"));
        const char *nm = cJSON_GetStringValue(cJSON_GetObjectItem(e, "name"));
        if (ph && strcmp(ph, "X") == 0 && nm && (nm[0] == 'F' || nm[0] == 'B')) x++;
        if (ph && strcmp(ph, "M") == 0 && nm && strcmp(nm, "thread_name") == 0) named++;
        if (ph && strcmp(ph, "C") == 0) counters++;
    }
    snprintf(tmp, sizeof tmp, "%s.tmp", trace);
    CHECK(cJSON_IsArray(j) && x == 2 * 3 * 6 && named == 3 && counters > 0 && access(tmp, F_OK) != 0,
          "trace: valid JSON, one X event per F and B (%d), a name per worker, memory counters", x);
    cJSON_Delete(j);
    free(js);
    char *sv = have_dir ? slurp(svg) : NULL;
    int rects = 0;
    for (char *c = sv; c && (c = strstr(c, "stroke=\"#fff\"")); c++) rects++;
    CHECK(sv && strncmp(sv, "<svg", 4) == 0 && strstr(sv, "</svg>") && rects == 2 * 3 * 6 + 1,
          "svg: one rectangle per F and B and one per all-reduce (%d)", rects);
    free(sv);

    /* interleaved on a plan without chunks: each stage split in two */
    o = (pd_sim_options)PD_SIM_OPTIONS_INIT;
    o.schedule = "interleaved";
    st[0].replicas = 1, st[0].fwd_ms = 2, st[0].bwd_in_ms = 2, st[0].bwd_w_ms = 2, st[0].allreduce_ms = 0;
    ok = pd_simulate(&pl, &o, &r) == PD_OK;
    /* per virtual stage f = 1, b = 2 (B + W); bubble (p-1)(f+b) = 6 on 6*2*3 = 36 */
    CHECK(ok && near(r.time_ms, 42), "pd_simulate: interleaved splits a chunk-less plan's stages (%.3f ms, want 42)",
          ok ? r.time_ms : -1);
    if (ok) pd_sim_result_free(&r);
    o.microbatches = 4;
    CHECK(pd_simulate(&pl, &o, &r) == PD_ERR_INVALID && says("multiple of the pipeline stages", NULL, NULL),
          "pd_simulate: interleaved with m = 4 on 3 stages is refused");
    o = (pd_sim_options)PD_SIM_OPTIONS_INIT;
    o.schedule = "pipedream";
    ok = pd_simulate(&pl, &o, &r) == PD_OK;
    CHECK(ok && near(r.time_ms, 6 * 6) && r.stage[0].peak_versions == 3,
          "pd_simulate: pipedream's default run reaches the steady state (%.3f ms per minibatch)", ok ? r.time_ms : -1);
    if (ok) pd_sim_result_free(&r);
    pl.chunks = 3;
    CHECK(pd_simulate(&pl, &o, &r) == PD_ERR_INVALID && says("only the interleaved schedule", NULL, NULL),
          "pd_simulate: a chunked plan needs the interleaved schedule");
    if (have_dir) {
        remove(trace);
        remove(svg);
        rmdir(dir);
    }
}

/* Recomputation (plan->recompute): 2 stages under 1F1B, 4 microbatches, f 1
 * b 1 w 1 each; activations 1000 and 3000, stage 1 receiving 400. Stage 0
 * holds 2 microbatches: each keeps nothing (it receives nothing) plus one
 * microbatch's 1000, against 2000 without; stage 1 holds one, 400 + 3000.
 * Stage 0 runs F0 F1 B0 F2 B1 F3 B2 B3: every B follows another microbatch's
 * F or B, so each redoes its forward (busy 12 + 4); stage 1's B follow their
 * own F (busy 12). */
static void test_recompute(void) {
    pd__stage st[2] = {0};
    for (int i = 0; i < 2; i++) {
        st[i].replicas = 1;
        st[i].fwd_ms = 1, st[i].bwd_in_ms = 1, st[i].bwd_w_ms = 1, st[i].param_bytes = 100;
    }
    st[0].act_bytes = 1000, st[1].act_bytes = 3000, st[1].in_bytes = 400;
    struct pd_plan pl = {0};
    pl.n_stages = 2, pl.stage = st, pl.chunks = 1, pl.workers = 2, pl.microbatches = 4, pl.microbatch_size = 1;
    pl.width = 1;
    pd_sim_options o = PD_SIM_OPTIONS_INIT;
    pd_sim_result a, b;
    bool oka = pd_simulate(&pl, &o, &a) == PD_OK;
    pl.recompute = true;
    bool okb = pd_simulate(&pl, &o, &b) == PD_OK, ok = oka && okb;
    CHECK(ok && a.stage[0].peak_act_mbs == 2 && near(a.stage[0].peak_act_bytes, 2000) && near(a.stage[1].peak_act_bytes, 3000) &&
              b.stage[0].peak_act_mbs == 2 && near(b.stage[0].peak_act_bytes, 1000) &&
              near(b.stage[1].peak_act_bytes, 3400) && near(a.stage[0].busy_ms, 12) && near(b.stage[0].busy_ms, 16) &&
              near(b.stage[1].busy_ms, 12),
          "pd_simulate, recompute: stage 0 holds %.0f bytes (2000 without), stage 1 %.0f; busy %.0f and %.0f ms (12 without)",
          ok ? b.stage[0].peak_act_bytes : -1, ok ? b.stage[1].peak_act_bytes : -1, ok ? b.stage[0].busy_ms : -1,
          ok ? b.stage[1].busy_ms : -1);
    if (oka) pd_sim_result_free(&a);
    if (okb) pd_sim_result_free(&b);
}

int main(void) {
    for (int i = 0; i < 64; i++) ones[i] = 1;
    test_parse();
    test_flush_closed_forms();
    test_interleaved();
    test_zb_h1();
    test_async();
    test_versions();
    test_grid();
    test_avgpipe();
    test_validation();
    test_transfers();
    test_write();
    test_plan();
    test_recompute();
    return check_summary();
}
