/* bench_infer.c - times pdonnx CPU inference of a model, the C side of
 * bench/run_infer.sh. Prints one JSON line like bench/torch_infer.py:
 *
 *   bench_infer MODEL.onnx X.npy --batch B --threads T --iters I --warmup W [--name NAME]
 *
 * The input is X.npy's rows repeated to fill B. Each of I runs after W
 * untimed ones is timed alone (CLOCK_MONOTONIC); the median is reported.
 */
#include "../pipedream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: bench_infer MODEL.onnx X.npy [--batch B] [--threads T] [--iters I] [--warmup W] [--name N]\n");
        return 2;
    }
    const char *model = argv[1], *xpath = argv[2], *name = model;
    int batch = 64, threads = 1, iters = 50, warmup = 5;
    for (int i = 3; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--batch")) batch = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--iters")) iters = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--warmup")) warmup = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--name")) name = argv[i + 1];
        else {
            fprintf(stderr, "bench_infer: unknown flag %s\n", argv[i]);
            return 2;
        }
    }
    if (batch < 1 || threads < 1 || iters < 1 || warmup < 0) {
        fprintf(stderr, "bench_infer: batch, threads, iters must be >= 1\n");
        return 2;
    }
    pd_tensor x0, x;
    if (pd_npy_load(xpath, &x0) != PD_OK) goto fail;
    size_t row = (size_t)(pd_tensor_numel(&x0) / x0.shape[0]) * pd_dtype_size(x0.dtype);
    x = x0;
    x.shape[0] = batch;
    x.data = malloc(row * (size_t)batch);
    for (int b = 0; b < batch; b++) memcpy((char *)x.data + row * (size_t)b, (char *)x0.data + row * (size_t)(b % x0.shape[0]), row);

    pd_load_options lo = PD_LOAD_OPTIONS_INIT;
    lo.batch = batch;
    pd_graph *g;
    pd_engine *e;
    pd_engine_options eo = PD_ENGINE_OPTIONS_INIT;
    eo.threads = threads;
    if (pd_graph_load_file(model, &lo, &g) != PD_OK) goto fail;
    if (pd_engine_create(g, &eo, &e) != PD_OK) goto fail;
    pd_value_info in;
    pd_graph_input(g, 0, &in);
    if (pd_engine_set_input(e, in.name, &x) != PD_OK) goto fail;
    double *t = malloc(sizeof(double) * (size_t)iters);
    for (int i = 0; i < warmup + iters; i++) {
        double t0 = now();
        if (pd_engine_run(e) != PD_OK) goto fail;
        if (i >= warmup) t[i - warmup] = now() - t0;
    }
    qsort(t, (size_t)iters, sizeof(double), cmp);
    double med = t[iters / 2];
    printf("{\"model\": \"%s\", \"batch\": %d, \"threads\": %d, \"samples_per_s\": %.1f, \"ms_per_batch\": %.4f}\n", name,
           batch, threads, batch / med, med * 1e3);
    free(t);
    free(x.data);
    pd_tensor_free(&x0);
    pd_engine_destroy(e);
    pd_graph_destroy(g);
    return 0;
fail:
    fprintf(stderr, "bench_infer: %s\n", pd_last_error());
    return 1;
}
