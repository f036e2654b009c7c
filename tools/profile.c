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
}

int pd_cli_profile(int argc, char **argv) {
    const char *model = NULL, *import = NULL, *out = NULL, *pipedream = NULL;
    pd_load_options lo = PD_LOAD_OPTIONS_INIT;
    lo.half_as_float = 1; /* profiled as pdonnx train runs it */
    pd_profile_options o = PD_PROFILE_OPTIONS_INIT;
    bool quiet = false;
    for (int i = 0; i < argc; i++) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t n;
        bool takes = !strcmp(f, "-o") || !strcmp(f, "--pipedream") || !strcmp(f, "--import") ||
                     !strcmp(f, "--device") || !strcmp(f, "--batch") || !strcmp(f, "--warmup") ||
                     !strcmp(f, "--repeats") || !strcmp(f, "--threads") || !strcmp(f, "--optimizer") ||
                     !strcmp(f, "--loss");
        if (takes && !v) return pd_cli_usage_error("profile: %s needs a value", f);
        if (takes) i++;
        if (!strcmp(f, "-o")) {
            out = v;
        } else if (!strcmp(f, "--pipedream")) {
            pipedream = v;
        } else if (!strcmp(f, "--import")) {
            import = v;
        } else if (!strcmp(f, "--device")) {
            pd_train_options t = PD_TRAIN_OPTIONS_INIT;
            if (pd_train_options_set_device(&t, v, NULL) != PD_OK)
                return pd_cli_usage_error("profile: --device: %s", pd_cli_error());
            o.device = v;
        } else if (!strcmp(f, "--batch")) {
            if (!pd_cli_parse_int(f, v, 1, INT32_MAX, &lo.batch)) return 2;
        } else if (!strcmp(f, "--warmup")) {
            if (!pd_cli_parse_int(f, v, 0, 1000000, &n)) return 2;
            o.warmup = (int)n;
        } else if (!strcmp(f, "--repeats")) {
            if (!pd_cli_parse_int(f, v, 1, 1000000, &n)) return 2;
            o.repeats = (int)n;
        } else if (!strcmp(f, "--threads")) {
            if (!pd_cli_parse_int(f, v, 0, 1024, &n)) return 2;
            o.threads = (int)n;
        } else if (!strcmp(f, "--optimizer")) {
            int k = -1;
            for (int q = PD_OPT_SGD; q <= PD_OPT_ADAMW; q++)
                if (!strcmp(v, pd__optim_name((pd_optimizer_kind)q))) k = q;
            if (k < 0)
                return pd_cli_usage_error(
                    "profile: --optimizer must be sgd, momentum, nesterov, adam or adamw, not '%s'", v);
            o.optimizer = (pd_optimizer_kind)k;
        } else if (!strcmp(f, "--loss")) {
            if (!strcmp(v, "auto")) o.loss = PD_LOSS_AUTO;
            else if (!strcmp(v, "cross_entropy")) o.loss = PD_LOSS_CROSS_ENTROPY;
            else if (!strcmp(v, "mse")) o.loss = PD_LOSS_MSE;
            else if (!strcmp(v, "graph")) o.loss = PD_LOSS_GRAPH;
            else return pd_cli_usage_error("profile: --loss must be auto, cross_entropy, mse or graph, not '%s'", v);
        } else if (!strcmp(f, "--quiet")) {
            quiet = true;
        } else if (f[0] == '-') {
            return pd_cli_usage_error("profile: unknown flag '%s'", f);
        } else if (!model) {
            model = f;
        } else {
            return pd_cli_usage_error("profile: unexpected argument '%s'", f);
        }
    }
    if (!model && !import) return pd_cli_usage_error("profile: %s", "missing MODEL.onnx (or --import GRAPH.txt)");
    if (model && import) return pd_cli_usage_error("profile: give MODEL.onnx or --import, not both (%s)", model);
    if (!out) return pd_cli_usage_error("profile: %s", "missing -o PROFILE.json");
    pd_profile *p = NULL;
    if (import) {
        if (pd_profile_load(import, &p) != PD_OK) return pd_cli_fail();
    } else {
        pd_graph *g;
        if (pd_graph_load_file(model, &lo, &g) != PD_OK) return pd_cli_fail();
        pd_status st = pd_profile_measure(g, &o, &p);
        pd_graph_destroy(g);
        if (st != PD_OK) return pd_cli_fail();
    }
    if (!quiet) pd__print_table(p);
    pd_status st = pd_profile_save(p, out);
    if (st == PD_OK && pipedream) st = pd_profile_save_pipedream(p, pipedream);
    if (st == PD_OK && !quiet) printf("wrote %s%s%s\n", out, pipedream ? " and " : "", pipedream ? pipedream : "");
    pd_profile_destroy(p);
    return st == PD_OK ? 0 : pd_cli_fail();
}
