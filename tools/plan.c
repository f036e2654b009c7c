/* plan.c - `pdonnx plan`: cut a model into pipeline stages and predict what
 * the plan achieves.
 *
 *   pdonnx plan MODEL.onnx --batch N --workers 4            profiles the model first (CPU)
 *   pdonnx plan --profile graph.txt --topology 4x4 --bandwidth 10e9,1.25e9
 *
 * Prints a table (stage, nodes, replicas, compute, communication, memory per
 * worker) and the predictions; -o writes the plan as JSON, `--json -`
 * prints the JSON on stdout instead of the table.
 */
#include "../core/plan.h"
#include "cli.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* "16e9", "16G" (decimal), "16Gi" (binary) */
static bool pd__parse_bytes(const char *flag, const char *s, double *out) {
    char *end;
    double v = strtod(s, &end);
    double mul = 1;
    if (*end) {
        const char *u = "kMGT";
        const char *k = strchr(u, end[0] == 'K' ? 'k' : end[0]);
        if (!k || !end[0]) goto bad;
        bool bin = end[1] == 'i';
        mul = pow(bin ? 1024 : 1000, (double)(k - u + 1));
        if (end[1 + bin] && strcmp(end + 1 + bin, "B") != 0) goto bad;
    }
    if (end == s || !isfinite(v) || v <= 0) goto bad;
    *out = v * mul;
    return true;
bad:
    fprintf(stderr, "pdonnx: %s expects a positive byte count (e.g. 16e9, 16G, 16Gi), got '%s'\n", flag, s);
    return false;
}

static void pd__bytes_str(char *buf, size_t n, double v) {
    const char *u[] = {"B", "KB", "MB", "GB", "TB"};
    int k = 0;
    while (v >= 1000 && k < 4) {
        v /= 1000;
        k++;
    }
    snprintf(buf, n, k ? "%.2f %s" : "%.0f %s", v, u[k]);
}

double pd_cli_one_worker_ms(const pd_plan *pl, int m, int64_t *rows, double *extra) {
    int n = m * (pl->width > 0 ? pl->width : 1);
    double t = 0, c = 0;
    for (int s = 0; s < pl->n_stages; s++) {
        const pd__stage *st = &pl->stage[s];
        t += st->fwd_ms + st->bwd_in_ms + st->bwd_w_ms;
        c += st->fwd_call_ms + st->bwd_in_call_ms + st->bwd_w_call_ms;
    }
    if (rows) *rows = pl->microbatch_size * n;
    if (extra) *extra = c * (n - 1);
    return t * n - c * (n - 1);
}

void pd_cli_print_extra_calls(const pd_plan *pl, int m) {
    int64_t rows;
    double extra, one = pd_cli_one_worker_ms(pl, m, &rows, &extra);
    long long b = (long long)pl->microbatch_size, n = b > 0 ? rows / b : 0;
    if (n < 2 || !pd__plan_has_call(pl) || one <= 0) return;
    printf("microbatches: %lld calls of %lld rows per node where one worker makes one of %lld: the extra calls cost "
           "%.3g ms a step, %.1f%% of one worker's\n",
           n, b, (long long)rows, extra, 100 * extra / one);
}

static void pd__print_plan(const pd_plan *pl, const char *src) {
    printf("plan for %s: algo %s, cost model %s, %d workers, %d stage%s", src, pl->algo_name, pl->cost_model,
           pl->workers, pl->n_stages, pl->n_stages == 1 ? "" : "s");
    if (pl->width > 1) printf(" x %d parallel pipelines", pl->width);
    printf(", %d microbatch%s per minibatch%s\n", pl->microbatches, pl->microbatches == 1 ? "" : "es",
           pl->recompute ? ", activations recomputed" : "");
    if (pl->profile_batch > 0 && pl->profile_batch != pl->microbatch_size)
        printf("microbatches of %lld rows: the profile's times at %lld rows scaled%s\n", (long long)pl->microbatch_size,
               (long long)pl->profile_batch, pd__plan_has_call(pl) ? " with its per-call costs" : " linearly");
    if (pl->n_cut_states > 0)
    {
        printf("searched %d cut states", pl->n_cut_states);
        if (pl->prefix_only)
            printf(" (prefixes of one topological order: the DAG has too many; see --max-states)");
        else if (pl->beam)
            printf(" (the DAG has too many: a beam of %d per size from each end, and the topological prefix; "
                   "see --max-states)", pl->beam);
        printf("\n");
    }
    printf("%-5s %-40s %8s %12s %10s %12s\n", "stage", "nodes (forward)", "replicas", "compute ms", "comm ms",
           "memory/wkr");
    for (int s = 0; s < pl->n_stages; s++) {
        const pd__stage *st = &pl->stage[s];
        int first = -1, last = -1, count = 0;
        for (int v = 0; v < pl->n_nodes; v++)
            if (pl->fwd_stage[v] == s) {
                if (first < 0) first = v;
                last = v;
                count++;
            }
        char range[128], mem[32], e1[256], e2[256]; /* node names from the model: escaped */
        pd__escape(e1, sizeof e1, first >= 0 ? pl->node_name[first] : "");
        pd__escape(e2, sizeof e2, last >= 0 ? pl->node_name[last] : "");
        if (count == 0) snprintf(range, sizeof range, "(none)");
        else if (count == 1) snprintf(range, sizeof range, "%.38s", e1);
        else snprintf(range, sizeof range, "%.16s .. %.16s (%d)", e1, e2, count);
        pd__bytes_str(mem, sizeof mem, st->memory_bytes);
        printf("%-5d %-40s %8d %12.3f %10.3f %12s\n", s, range, st->replicas, st->fwd_ms + st->bwd_in_ms + st->bwd_w_ms,
               2 * st->send_ms, mem);
    }
    printf("predicted time per minibatch: %.4f ms   throughput: %.1f samples/s   bubble: %.1f%%\n", pl->time_ms,
           pl->throughput, 100 * pl->bubble);
    printf("speedup over 1 worker: %.3fx   over %d-worker data parallelism: %.3fx\n", pl->speedup, pl->workers,
           pl->dp_speedup);
    if (pl->algo == PD_ALGO_AVGPIPE)
        printf("avgpipe: %d parallel pipeline%s, %d microbatch%s (simulated under the avgpipe schedule); train with "
               "--stages %d --schedule avgpipe --parallel-pipelines %d --microbatches %d --batch %lld\n",
               pl->width, pl->width == 1 ? "" : "s", pl->microbatches, pl->microbatches == 1 ? "" : "es", pl->n_stages,
               pl->width, pl->microbatches,
               (long long)(pl->microbatch_size > 0 ? pl->microbatch_size : 1) * pl->microbatches);
}

/* --topology AxB and --bandwidth B[,B] into o (levels innermost first, as
 * PipeDream's -n and -b; lw and lb hold the levels); 0, or a usage error's code. */
static int pd__plan_topology(const char *topology, const char *bandwidth, int64_t workers, int *lw, double *lb,
                             pd_plan_options *o) {
    int levels = 0;
    if (topology) {
        const char *s = topology;
        while (*s) {
            char *end;
            long k = strtol(s, &end, 10);
            if (end == s || k < 1 || k > 1 << 20 || levels == 8 || (*end && *end != 'x'))
                return pd_cli_usage_error("plan: --topology expects levels like 4x4 (1 to 8 levels), got '%s'", topology);
            lw[levels++] = (int)k;
            s = *end ? end + 1 : end;
        }
    }
    int nb = 0;
    if (bandwidth) {
        const char *s = bandwidth;
        while (*s) {
            char *end;
            double b = strtod(s, &end);
            if (end == s || !isfinite(b) || b <= 0 || nb == 8 || (*end && *end != ','))
                return pd_cli_usage_error("plan: --bandwidth expects bytes/s per level like 10e9,1.25e9, got '%s'", bandwidth);
            lb[nb++] = b;
            s = *end ? end + 1 : end;
        }
    }
    if (levels > 0) {
        if (nb != levels) {
            char msg[128];
            snprintf(msg, sizeof msg, "%d topology levels but %d bandwidths", levels, nb);
            return pd_cli_usage_error("plan: --bandwidth needs one value per --topology level (%s)", msg);
        }
        o->n_levels = levels;
        o->level_workers = lw;
        o->level_bandwidth = lb;
        o->workers = (int)workers;
    } else {
        if (nb > 1) return pd_cli_usage_error("plan: several --bandwidth values need --topology (%s)", bandwidth);
        if (nb == 1) o->bandwidth = lb[0];
        o->workers = (int)workers;
    }

    return 0;
}

static int pd__flag_memory(void *ctx, const char *cmd, const pd_flag *f, char **v) {
    (void)cmd;
    return pd__parse_bytes(f->name, v[0], (double *)ctx) ? 0 : 2;
}

int pd_cli_plan(int argc, char **argv) {
    const char *model = NULL, *profile = NULL, *out = NULL, *json = NULL, *topology = NULL, *bandwidth = NULL;
    pd_plan_options o = PD_PLAN_OPTIONS_INIT;
    int64_t workers = 0, batch = 0;
    bool straight = false;
    int lw[8];
    double lb[8];
    const pd_flag t[] = {
        {"--profile", PD_FLAG_STR, &profile, 0, 0, 0, "FILE", "plan from a profile (pdonnx profile, or PipeDream's graph.txt)", NULL, 0},
        {"--workers", PD_FLAG_INT, &workers, 1, 1 << 20, 0, "N", "workers (GPUs, cores or processes)", NULL, 0},
        {"--batch", PD_FLAG_INT, &batch, 1, INT32_MAX, 0, "N", "the microbatch size to profile MODEL.onnx at", NULL, 0},
        {"--topology", PD_FLAG_STR, &topology, 0, 0, 0, "AxB", "hierarchical workers, innermost level first (4x4)", NULL, 0},
        {"--bandwidth", PD_FLAG_STR, &bandwidth, 0, 0, 0, "B[,B]", "bytes/s between workers, per level (10e9,1.25e9)", NULL, 0},
        {"--memory", PD_FLAG_FN, &o.memory, 0, 0, 0, "BYTES", "memory per worker (16G, 512M...; default: unlimited)", pd__flag_memory, 1},
        {"--microbatches", PD_FLAG_INT32, &o.microbatches, 1, 1 << 20, 0, "M", "microbatches per minibatch", NULL, 0},
        {"--microbatch-size", PD_FLAG_INT, &o.microbatch_size, 1, INT32_MAX, 0, "N", "rows per microbatch (default: the profile's batch; times scaled with its per-call costs)", NULL, 0},
        {"--algo", PD_FLAG_STR, &o.algo, 0, 0, 0, "ALGO", "pipedream (default), 2bw, bipartition, uniform, params or avgpipe", NULL, 0},
        {"--cost-model", PD_FLAG_STR, &o.cost_model, 0, 0, 0, "MODEL", "default or pipedream", NULL, 0},
        {"--straight", PD_FLAG_SET, &straight, 0, 0, 0, NULL, "no replicated stages", NULL, 0},
        {"--activation-compression", PD_FLAG_DOUBLE, &o.activation_compression, 0, 0, 1e-9, "F", "pipedream cost model: transfers divided by F", NULL, 0},
        {"--max-states", PD_FLAG_INT32, &o.max_states, 2, 1 << 20, 0, "N", "bound on a branching DAG's cut states", NULL, 0},
        {"-o", PD_FLAG_STR, &out, 0, 0, 0, "PLAN.json", "write the plan", NULL, 0},
        {"--json", PD_FLAG_STR, &json, 0, 0, 0, "FILE|-", "the plan's summary as JSON", NULL, 0},
    };
    int nt = (int)(sizeof t / sizeof t[0]);
    if (pd_cli_wants_help(argc, argv)) return pd_cli_help("pdonnx plan MODEL.onnx|--profile FILE --workers N [flags]", t, nt);
    int bad = pd_cli_flags("plan", t, nt, NULL, argc, argv, &model, 1);
    if (bad) return bad;
    o.straight = straight;
    if (!model == !profile) return pd_cli_usage_error("plan: %s", "give MODEL.onnx or --profile FILE (one of them)");
    if (!topology && workers == 0) return pd_cli_usage_error("plan: %s", "missing --workers N (or --topology AxB)");

    int bad_topology = pd__plan_topology(topology, bandwidth, workers, lw, lb, &o);
    if (bad_topology) return bad_topology;

    pd_profile *p = NULL;
    const char *src = model ? model : profile;
    if (profile) {
        if (pd_profile_load(profile, &p) != PD_OK) return pd_cli_fail();
    } else {
        pd_load_options lo = PD_LOAD_OPTIONS_INIT;
        lo.batch = batch;
        lo.half_as_float = 1;
        pd_graph *g;
        if (pd_graph_load_file(model, &lo, &g) != PD_OK) return pd_cli_fail();
        pd_profile_options po = PD_PROFILE_OPTIONS_INIT;
        pd_status st = pd_profile_measure(g, &po, &p);
        pd_graph_destroy(g);
        if (st != PD_OK) return pd_cli_fail();
    }
    pd_plan *pl;
    pd_status st = pd_plan_create(p, &o, &pl);
    pd_profile_destroy(p);
    if (st != PD_OK) return pd_cli_fail();
    int rc = 0;
    if (out && pd_plan_save(pl, out) != PD_OK) rc = pd_cli_fail();
    if (json) {
        char *text = pd__plan_to_json(pl);
        if (!text) {
            fprintf(stderr, "pdonnx: out of memory\n");
            rc = 1;
        } else if (strcmp(json, "-") == 0) {
            printf("%s\n", text);
        } else {
            size_t n = strlen(text);
            text[n] = '\n';
            if (pd__write_atomic(json, text, n + 1) != PD_OK) rc = pd_cli_fail();
        }
        cJSON_free(text);
    }
    if (!json || strcmp(json, "-") != 0) {
        pd__print_plan(pl, src);
        if (out && rc == 0) printf("wrote %s\n", out);
    }
    pd_plan_destroy(pl);
    return rc;
}
