/* profile.c - `pdonnx profile`: measure a model's per-node costs (forward,
 * input-gradient and weight-gradient times, activation and parameter bytes)
 * on a backend, or convert a PipeDream graph.txt; writes our profile JSON and,
 * on request, a graph.txt, and prints the per-node table with totals.
 *
 *   pdonnx profile MODEL.onnx [--batch N] [--device cpu|cuda[:N]] [--warmup N] [--repeats N]
 *                  [--threads N] [--optimizer KIND] [--loss KIND] -o PROFILE.json [--pipedream GRAPH.txt]
 *   pdonnx profile --import GRAPH.txt|PROFILE.json -o PROFILE.json [--pipedream GRAPH.txt]
 */
#include "../core/plan.h"
#include "../runtime/optim.h"
#include "cli.h"

#include <stdio.h>
#include <string.h>

static void pd__bytes(char *buf, size_t n, double v) {
    const char *pre[] = {"B", "KB", "MB", "GB", "TB", "PB"};
    int k = 0;
    while (v >= 1000 && k < 5) {
        v /= 1000;
        k++;
    }
    snprintf(buf, n, k ? "%.2f %s" : "%.0f %s", v, pre[k]);
}

static void pd__print_table(const pd_profile *p) {
    double f = 0, bi = 0, bw = 0, act = 0, par = 0, opt = 0;
    char a[32], b[32];
    printf("%5s  %-32s %-18s %10s %10s %10s %12s %12s\n", "#", "node", "op", "fwd ms", "bwd-in ms", "bwd-w ms",
           "activation", "params");
    for (int i = 0; i < p->n; i++) {
        const pd__pnode *d = &p->node[i];
        pd__bytes(a, sizeof a, d->act_bytes);
        pd__bytes(b, sizeof b, d->param_bytes);
        char e1[256], e2[256]; /* names from the model or a profile file: escaped, one line each */
        printf("%5d  %-32.32s %-18.18s %10.3f %10.3f %10.3f %12s %12s\n", i, pd__escape(e1, sizeof e1, d->name),
               pd__escape(e2, sizeof e2, d->desc), d->fwd_ms, d->bwd_in_ms, d->bwd_w_ms, a, b);
        f += d->fwd_ms;
        bi += d->bwd_in_ms;
        bw += d->bwd_w_ms;
        act += d->act_bytes;
        par += d->param_bytes;
        opt += d->optim_bytes;
    }
    pd__bytes(a, sizeof a, act);
    pd__bytes(b, sizeof b, par);
    printf("%5s  %-32s %-18s %10.3f %10.3f %10.3f %12s %12s\n", "", "total", "", f, bi, bw, a, b);
    pd__bytes(a, sizeof a, opt);
    printf("\n%d nodes, %d edges, batch %lld, device %s: forward %.3f ms + backward %.3f ms = %.3f ms per "
           "microbatch; optimizer state %s\n",
           p->n, p->n_edges, (long long)p->batch, p->device ? p->device : "?", f, bi + bw, f + bi + bw, a);
    if (p->n_fit == 0) return;
    double call = 0;
    for (int i = 0; i < p->n; i++) call += p->node[i].fwd_call_ms + p->node[i].bwd_in_call_ms + p->node[i].bwd_w_call_ms;
    printf("per-call costs fitted from batches %lld", (long long)p->batch);
    for (int k = 0; k < p->n_fit; k++) printf(", %lld", (long long)p->fit_batch[k]);
    printf(": %.3f ms of the %.3f ms per microbatch does not shrink with the rows\n", call, f + bi + bw);
}

static int pd__flag_profile_device(void *ctx, const char *cmd, const pd_flag *f, char **v) {
    (void)cmd, (void)f;
    pd_train_options t = PD_TRAIN_OPTIONS_INIT;
    if (pd_train_options_set_device(&t, v[0], NULL) != PD_OK)
        return pd_cli_usage_error("profile: --device: %s", pd_cli_error());
    ((pd_profile_options *)ctx)->device = v[0];
    return 0;
}

/* --fit-batches N[,N...]: the batch sizes to measure besides --batch. */
static int pd__flag_fit(void *ctx, const char *cmd, const pd_flag *f, char **v) {
    (void)cmd, (void)f;
    int64_t *b = (int64_t *)ctx; /* b[0]: how many, then the sizes */
    b[0] = 0;
    for (const char *s = v[0]; *s;) {
        char *end;
        long long k = strtoll(s, &end, 10);
        if (end == s || k < 1 || k > INT32_MAX || (*end && *end != ',') || b[0] == PD_MAX_FIT_BATCHES)
            return pd_cli_usage_error("profile: --fit-batches: '%s' is not a list of at most 8 batch sizes", v[0]);
        b[++b[0]] = k;
        s = *end ? end + 1 : end;
    }
    return b[0] ? 0 : pd_cli_usage_error("profile: --fit-batches: %s", "no batch size given");
}

/* The model measured at each of fit[1..fit[0]] rows too, and p's per-call costs fitted from them. */
static pd_status pd__profile_fit_at(const char *model, pd_load_options lo, const pd_profile_options *o,
                                    const int64_t *fit, pd_profile *p) {
    pd_profile *at[PD_MAX_FIT_BATCHES] = {NULL};
    pd_status st = PD_OK;
    for (int k = 0; k < fit[0] && st == PD_OK; k++) {
        pd_graph *g;
        lo.batch = fit[k + 1];
        st = pd_graph_load_file(model, &lo, &g);
        if (st != PD_OK) break;
        st = pd_profile_measure(g, o, &at[k]);
        pd_graph_destroy(g);
    }
    if (st == PD_OK) st = pd_profile_fit(p, (const pd_profile *const *)at, (int)fit[0]);
    for (int k = 0; k < fit[0]; k++) pd_profile_destroy(at[k]);
    return st;
}

int pd_cli_profile(int argc, char **argv) {
    const char *model = NULL, *import = NULL, *out = NULL, *pipedream = NULL;
    int64_t fit[PD_MAX_FIT_BATCHES + 1] = {0};
    pd_load_options lo = PD_LOAD_OPTIONS_INIT;
    lo.half_as_float = 1; /* profiled as pdonnx train runs it */
    pd_profile_options o = PD_PROFILE_OPTIONS_INIT;
    bool quiet = false;
    const pd_flag t[] = {
        {"-o", PD_FLAG_STR, &out, 0, 0, 0, "PROFILE.json", "write the profile", NULL, 0},
        {"--pipedream", PD_FLAG_STR, &pipedream, 0, 0, 0, "graph.txt", "also write it in PipeDream's format", NULL, 0},
        {"--import", PD_FLAG_STR, &import, 0, 0, 0, "graph.txt", "read PipeDream's profile instead of measuring", NULL, 0},
        {"--device", PD_FLAG_FN, &o, 0, 0, 0, "cpu|cuda[:N]", "where to measure", pd__flag_profile_device, 1},
        {"--batch", PD_FLAG_INT, &lo.batch, 1, INT32_MAX, 0, "N", "the microbatch size", NULL, 0},
        {"--fit-batches", PD_FLAG_FN, fit, 0, 0, 0, "N[,N]", "also measure at these batch sizes and fit each node's per-call cost", pd__flag_fit, 1},
        {"--warmup", PD_FLAG_INT32, &o.warmup, 0, 1000000, 0, "N", "steps before measuring (default 2)", NULL, 0},
        {"--repeats", PD_FLAG_INT32, &o.repeats, 1, 1000000, 0, "N", "steps measured, the median kept (default 5)", NULL, 0},
        {"--threads", PD_FLAG_INT32, &o.threads, 0, 1024, 0, "N", "compute threads", NULL, 0},
        {"--optimizer", PD_FLAG_CHOICE, &o.optimizer, 0, 0, 0, "sgd|momentum|nesterov|adam|adamw", "the optimizer whose step is timed", NULL, 0},
        {"--loss", PD_FLAG_CHOICE, &o.loss, 0, 0, 0, "auto|cross_entropy|mse|graph", "the loss", NULL, 0},
        {"--quiet", PD_FLAG_SET, &quiet, 0, 0, 0, NULL, "print only errors", NULL, 0},
    };
    int nt = (int)(sizeof t / sizeof t[0]);
    if (pd_cli_wants_help(argc, argv)) return pd_cli_help("pdonnx profile MODEL.onnx --batch N [flags]", t, nt);
    int bad = pd_cli_flags("profile", t, nt, NULL, argc, argv, &model, 1);
    if (bad) return bad;
    if (!model && !import) return pd_cli_usage_error("profile: %s", "missing MODEL.onnx (or --import GRAPH.txt)");
    if (model && import) return pd_cli_usage_error("profile: give MODEL.onnx or --import, not both (%s)", model);
    if (import && fit[0]) return pd_cli_usage_error("profile: %s", "--fit-batches measures MODEL.onnx: not with --import");
    if (!out) return pd_cli_usage_error("profile: %s", "missing -o PROFILE.json");
    pd_profile *p = NULL;
    if (import) {
        if (pd_profile_load(import, &p) != PD_OK) return pd_cli_fail();
    } else {
        pd_graph *g;
        if (pd_graph_load_file(model, &lo, &g) != PD_OK) return pd_cli_fail();
        pd_status st = pd_profile_measure(g, &o, &p);
        pd_graph_destroy(g);
        if (st == PD_OK && fit[0]) st = pd__profile_fit_at(model, lo, &o, fit, p);
        if (st != PD_OK) {
            pd_profile_destroy(p);
            return pd_cli_fail();
        }
    }
    if (!quiet) pd__print_table(p);
    pd_status st = pd_profile_save(p, out);
    if (st == PD_OK && pipedream) st = pd_profile_save_pipedream(p, pipedream);
    if (st == PD_OK && !quiet) printf("wrote %s%s%s\n", out, pipedream ? " and " : "", pipedream ? pipedream : "");
    pd_profile_destroy(p);
    return st == PD_OK ? 0 : pd_cli_fail();
}
