/* simulate.c - `pdonnx simulate`: runs a plan's stages through one of the
 * pipeline schedules in the event simulator (core/simulate.c) and prints, per
 * stage, busy time, peak activations and weight versions, then the time per
 * minibatch, throughput and bubble. Optionally writes a Chrome trace, an SVG
 * timeline and the instruction lists as CSV (what the runtime would execute).
 */
#include "../core/schedule.h"
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static void pd__bytes(char *buf, size_t n, double v) {
    const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (v >= 1024 && u < 4) v /= 1024, u++;
    snprintf(buf, n, u ? "%.1f %s" : "%.0f %s", v, unit[u]);
}

/* The instruction lists as CSV, through a temporary file ("-": stdout). */
static int pd__write_csv(const pd__schedule *s, const char *path) {
    if (strcmp(path, "-") == 0) return pd__schedule_write(s, stdout, true) == PD_OK ? 0 : pd_cli_fail();
    char tmp[4096];
    if (pd__check_dest(path) != PD_OK) return pd_cli_fail();
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp) {
        fprintf(stderr, "pdonnx: %s: path too long\n", path);
        return 1;
    }
    FILE *f = fopen(tmp, "w");
    if (!f) {
        fprintf(stderr, "pdonnx: %s: %s\n", path, strerror(errno));
        return 1;
    }
    bool ok = pd__schedule_write(s, f, true) == PD_OK;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        fprintf(stderr, "pdonnx: %s: write failed: %s\n", path, strerror(errno));
        remove(tmp);
        return 1;
    }
    return 0;
}

/* A plan whose profile had per-call costs: one worker's time for the whole
 * minibatch as one call per node against the pipeline's, and what the extra
 * calls of its microbatches cost; when the microbatches are smaller than
 * the profile's batch, per stage what a microbatch costs against the
 * profile's time scaled linearly to the microbatch size, and the minibatch
 * time that linear scaling would predict (the plan, rewritten). */
static int pd__report_overhead(pd_plan *plan, const pd_sim_options *o, const pd_sim_result *r) {
    int64_t b = plan->microbatch_size > 0 ? plan->microbatch_size : 1;
    int m = o->microbatches > 0 ? o->microbatches : plan->microbatches > 0 ? plan->microbatches : 1;
    int64_t rows;
    double one = pd_cli_one_worker_ms(plan, m, &rows, NULL);
    printf("\none worker on all %lld rows at once: %.3f ms (the pipeline %.2fx as fast)\n", (long long)rows, one,
           r->time_ms > 0 ? one / r->time_ms : 0.0);
    pd_cli_print_extra_calls(plan, m);
    if (plan->profile_batch <= 0 || plan->profile_batch == b) return 0; /* the times are the microbatch's own */
    double ratio = (double)b / plan->profile_batch;
    printf("\nper-microbatch overhead: microbatches of %lld rows, the profile measured at %lld rows\n", (long long)b,
           (long long)plan->profile_batch);
    printf("%5s  %12s  %12s  %12s  %9s\n", "stage", "ms per mb", "linear ms", "per-call ms", "overhead");
    for (int k = 0; k < plan->n_stages; k++) {
        const pd__stage *st = &plan->stage[k];
        double rep = st->replicas > 0 ? st->replicas : 1, t = (st->fwd_ms + st->bwd_in_ms + st->bwd_w_ms) / rep;
        double call = (st->fwd_call_ms + st->bwd_in_call_ms + st->bwd_w_call_ms) / rep, lin = t - call * (1 - ratio);
        printf("%5d  %12.3f  %12.3f  %12.3f  %+8.1f%%\n", k, t, lin, call, lin > 0 ? 100 * (t / lin - 1) : 0.0);
    }
    pd_sim_options lo = *o;
    lo.trace = lo.svg = NULL;
    pd_sim_result lr;
    pd__plan_linear(plan);
    if (pd_simulate(plan, &lo, &lr) != PD_OK) return pd_cli_fail();
    printf("linear scaling would predict %.3f ms per minibatch (%.1f samples/s); the per-call costs make it %.2fx that\n",
           lr.time_ms, lr.throughput, lr.time_ms > 0 ? r->time_ms / lr.time_ms : 0.0);
    pd_sim_result_free(&lr);
    return 0;
}

int pd_cli_simulate(int argc, char **argv) {
    const char *path = NULL, *csv = NULL;
    bool recompute = false;
    pd_sim_options o = PD_SIM_OPTIONS_INIT;
    o.schedule = NULL;
    const pd_flag t[] = {
        {"--schedule", PD_FLAG_STR, &o.schedule, 0, 0, 0, "KIND", "gpipe, flush, pipedream, 2bw, interleaved, zb-h1 or avgpipe", NULL, 0},
        {"--microbatches", PD_FLAG_INT32, &o.microbatches, 1, 1 << 20, 0, "M", "microbatches per minibatch (default: the plan's)", NULL, 0},
        {"--minibatches", PD_FLAG_INT32, &o.minibatches, 1, 1 << 20, 0, "N", "minibatches simulated", NULL, 0},
        {"--chunks", PD_FLAG_INT32, &o.chunks, 2, 1024, 0, "V", "chunks per stage (interleaved)", NULL, 0},
        {"--trace", PD_FLAG_STR, &o.trace, 0, 0, 0, "OUT.json", "a Chrome trace of the predicted schedule", NULL, 0},
        {"--svg", PD_FLAG_STR, &o.svg, 0, 0, 0, "OUT.svg", "the timeline as a picture", NULL, 0},
        {"--instructions", PD_FLAG_STR, &csv, 0, 0, 0, "OUT.csv", "every stage's instructions with their times", NULL, 0},
        {"--recompute", PD_FLAG_SET, &recompute, 0, 0, 0, NULL, "activation recomputation, as the plan's \"recompute\": true", NULL, 0},
    };
    int n = (int)(sizeof t / sizeof t[0]);
    if (pd_cli_wants_help(argc, argv)) return pd_cli_help("pdonnx simulate PLAN.json --schedule KIND [flags]", t, n);
    int bad = pd_cli_flags("simulate", t, n, NULL, argc, argv, &path, 1);
    if (bad) return bad;
    if (!path) return pd_cli_usage_error("simulate: %s", "missing PLAN.json");
    if (!o.schedule) return pd_cli_usage_error("simulate: %s", "missing --schedule KIND");
    pd__sched_kind kind;
    if (pd__sched_kind_parse(o.schedule, &kind) != PD_OK) return pd_cli_usage_error("simulate: %s", pd_cli_error());

    pd_plan *plan;
    if (pd_plan_load(path, &plan) != PD_OK) return pd_cli_fail();
    if (recompute) plan->recompute = true;
    pd__sim_plan sp;
    pd_sim_result r;
    if (pd__sim_plan_make(plan, &o, &sp) != PD_OK) {
        pd_plan_destroy(plan);
        return pd_cli_fail();
    }
    if (pd_simulate(plan, &o, &r) != PD_OK) {
        pd__sim_plan_free(&sp);
        pd_plan_destroy(plan);
        return pd_cli_fail();
    }
    const pd__schedule *s = sp.sched;
    int rc = csv ? pd__write_csv(s, csv) : 0;
    if (csv && strcmp(csv, "-") == 0) goto out; /* stdout holds the CSV alone */
    printf("%s: %s schedule, %d stages", path, pd__sched_kind_name(kind), s->n_stages);
    if (s->chunks > 1) printf(" x %d chunks", s->chunks);
    printf(", %d microbatch%s x %d minibatch%s, %lld samples per minibatch\n", s->microbatches,
           s->microbatches == 1 ? "" : "es", s->minibatches, s->minibatches == 1 ? "" : "es", (long long)sp.samples);
    if (plan->recompute) printf("activations recomputed: a microbatch in flight keeps what its stage receives\n");
    if (sp.split_chunks)
        printf("(the plan has no chunks: each stage's costs are split evenly into %d chunks)\n", s->chunks);
    printf("\n%5s  %8s  %10s  %6s  %12s  %10s  %8s  %12s\n", "stage", "replicas", "busy ms", "busy", "peak act mbs",
           "peak act", "versions", "version mem");
    for (int w = 0; w < r.n_stages; w++) {
        char b[32];
        pd__bytes(b, sizeof b, r.stage[w].peak_act_bytes);
        /* a worker's weights: its chunks' parameters, one copy per version held */
        double wbytes = 0;
        for (int k = w; k < s->n_stages * s->chunks; k += s->n_stages) wbytes += sp.param_bytes[k];
        char vb[32];
        pd__bytes(vb, sizeof vb, wbytes * r.stage[w].peak_versions);
        printf("%5d  %8d  %10.3f  %5.1f%%  %12d  %10s  %8d  %12s\n", w, sp.replicas[w], r.stage[w].busy_ms,
               r.makespan_ms > 0 ? 100 * r.stage[w].busy_ms / r.makespan_ms : 0.0, r.stage[w].peak_act_mbs, b,
               r.stage[w].peak_versions, vb);
    }
    bool async = pd__sched_async(kind);
    printf("\ntime per minibatch: %.3f ms%s\n", r.time_ms, async ? " (steady state)" : "");
    printf("makespan:           %.3f ms\n", r.makespan_ms);
    printf("throughput:         %.1f samples/s\n", r.throughput);
    printf("bubble:             %.1f%%%s\n", 100 * r.bubble, async ? " (steady state)" : "");
    if (o.trace) printf("trace:              %s\n", o.trace);
    if (o.svg) printf("timeline:           %s\n", o.svg);
    if (csv && rc == 0) printf("instructions:       %s\n", csv);
    if (rc == 0 && pd__plan_has_call(plan)) rc = pd__report_overhead(plan, &o, &r);
out:
    pd_sim_result_free(&r);
    pd__sim_plan_free(&sp);
    pd_plan_destroy(plan);
    return rc;
}

/* `pdonnx schedule --stages P --microbatches M --schedule KIND [--chunks V]
 * [--minibatches N] [--max-inflight L] [--csv]`: prints the per-stage instruction lists the
 * runtime and the simulator execute. */
int pd_cli_schedule(int argc, char **argv) {
    int64_t p = 0, m = 0, v = 2, n = 1, inflight = 0;
    const char *kind_s = NULL;
    bool csv = false;
    const pd_flag t[] = {
        {"--stages", PD_FLAG_INT, &p, 1, 4096, 0, "P", "pipeline stages", NULL, 0},
        {"--microbatches", PD_FLAG_INT, &m, 1, 1 << 16, 0, "M", "microbatches per minibatch", NULL, 0},
        {"--chunks", PD_FLAG_INT, &v, 2, 64, 0, "V", "chunks per stage (interleaved; default 2)", NULL, 0},
        {"--minibatches", PD_FLAG_INT, &n, 1, 1 << 16, 0, "N", "minibatches (default 1)", NULL, 0},
        {"--schedule", PD_FLAG_STR, &kind_s, 0, 0, 0, "KIND", "gpipe, flush, pipedream, 2bw, interleaved, zb-h1 or avgpipe", NULL, 0},
        {"--max-inflight", PD_FLAG_INT, &inflight, 1, 1 << 20, 0, "K", "avgpipe: microbatches in flight", NULL, 0},
        {"--csv", PD_FLAG_SET, &csv, 0, 0, 0, NULL, "one instruction per line, comma-separated", NULL, 0},
    };
    int nt = (int)(sizeof t / sizeof t[0]);
    if (pd_cli_wants_help(argc, argv)) return pd_cli_help("pdonnx schedule --stages P --microbatches M --schedule KIND", t, nt);
    int bad = pd_cli_flags("schedule", t, nt, NULL, argc, argv, NULL, 0);
    if (bad) return bad;
    if (!p || !m || !kind_s) return pd_cli_usage_error("schedule: %s", "needs --stages P --microbatches M --schedule KIND");
    pd__sched_kind kind;
    if (pd__sched_kind_parse(kind_s, &kind) != PD_OK) return pd_cli_usage_error("schedule: %s", pd_cli_error());
    if (inflight && kind != PD_SCHED_AVGPIPE)
        return pd_cli_usage_error("schedule: %s", "--max-inflight goes with --schedule avgpipe");
    pd__schedule *s;
    pd_status st = kind == PD_SCHED_AVGPIPE && inflight
                       ? pd__schedule_build_avgpipe((int)p, (int)m, (int)n, NULL, (int)inflight, &s)
                       : pd__schedule_build(kind, (int)p, kind == PD_SCHED_INTERLEAVED ? (int)v : 1, (int)m, (int)n,
                                            NULL, &s);
    if (st != PD_OK) return pd_cli_fail();
    int rc = pd__schedule_write(s, stdout, csv) == PD_OK ? 0 : pd_cli_fail();
    pd__schedule_free(s);
    return rc;
}
