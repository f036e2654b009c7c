/* bench_infer.c - times pdonnx CPU inference of a model, the C side of
 * bench/run_infer.sh. Prints one JSON line like bench/torch_infer.py:
 *
 *   bench_infer MODEL.onnx X.npy --batch B --threads T --iters I --warmup W [--name NAME]
 *
 * The input is X.npy's rows repeated to fill B. Each of I runs after W
 * untimed ones is timed alone (CLOCK_MONOTONIC); the median is reported.
 */
#include "bench_common.h"
#include "../tools/program_env.h"

int main(int argc, char **argv) {
    pd_program_env(argv);
    bench_args a;
    if (!bench_parse("bench_infer", argc, argv, 50, &a)) return 2;
    pd_tensor x;
    pd_graph *g;
    pd_engine *e;
    pd_load_options lo = PD_LOAD_OPTIONS_INIT;
    lo.batch = a.batch;
    pd_engine_options eo = PD_ENGINE_OPTIONS_INIT;
    eo.threads = a.threads;
    if (bench_input(a.xpath, a.batch, &x) != PD_OK || pd_graph_load_file(a.model, &lo, &g) != PD_OK ||
        pd_engine_create(g, &eo, &e) != PD_OK)
        goto fail;
    pd_value_info in;
    if (pd_graph_input(g, 0, &in) != PD_OK) goto fail;
    if (pd_engine_set_input(e, in.name, &x) != PD_OK) goto fail;
    double *t = malloc(sizeof(double) * (size_t)a.iters);
    for (int i = 0; i < a.warmup + a.iters; i++) {
        double t0 = bench_now();
        if (pd_engine_run(e) != PD_OK) goto fail;
        if (i >= a.warmup) t[i - a.warmup] = bench_now() - t0;
    }
    double med = bench_median(t, a.iters);
    printf("{\"model\": \"%s\", \"batch\": %d, \"threads\": %d, \"samples_per_s\": %.1f, \"ms_per_batch\": %.4f}\n",
           a.name, a.batch, a.threads, a.batch / med, med * 1e3);
    free(t);
    free(x.data);
    pd_engine_destroy(e);
    pd_graph_destroy(g);
    return 0;
fail:
    fprintf(stderr, "bench_infer: %s\n", pd_last_error());
    return 1;
}
