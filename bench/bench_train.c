/* bench_train.c - times pdonnx training steps (forward, backward, SGD update)
 * of a model, the C side of bench/run_train.sh. One JSON line like
 * bench/torch_train.py:
 *
 *   bench_train MODEL.onnx X.npy --batch B --threads T --iters I --warmup W [--name NAME]
 *
 * Inputs are X.npy's rows repeated to fill B; labels are fixed pseudo-random
 * classes. The median step time after W warm-up steps is reported.
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
        fprintf(stderr, "usage: bench_train MODEL.onnx X.npy [--batch B] [--threads T] [--iters I] [--warmup W] [--name N]\n");
        return 2;
    }
    const char *model = argv[1], *xpath = argv[2], *name = model;
    int batch = 64, threads = 1, iters = 30, warmup = 5;
    for (int i = 3; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--batch")) batch = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--iters")) iters = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--warmup")) warmup = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--name")) name = argv[i + 1];
        else {
            fprintf(stderr, "bench_train: unknown flag %s\n", argv[i]);
            return 2;
        }
    }
    if (batch < 1 || threads < 1 || iters < 1 || warmup < 0) return 2;
    pd_tensor x0, x, y;
    pd_graph *g;
    pd_session *s;
    if (pd_npy_load(xpath, &x0) != PD_OK) goto fail;
    size_t row = (size_t)(pd_tensor_numel(&x0) / x0.shape[0]) * pd_dtype_size(x0.dtype);
    x = x0;
    x.shape[0] = batch;
    x.data = malloc(row * (size_t)batch);
    for (int b = 0; b < batch; b++)
        memcpy((char *)x.data + row * (size_t)b, (char *)x0.data + row * (size_t)(b % x0.shape[0]), row);
    pd_load_options lo = PD_LOAD_OPTIONS_INIT;
    lo.batch = batch;
    if (pd_graph_load_file(model, &lo, &g) != PD_OK) goto fail;
    pd_train_options o = PD_TRAIN_OPTIONS_INIT;
    o.loss = PD_LOSS_CROSS_ENTROPY;
    o.threads = threads;
    if (pd_session_create(g, &o, &s) != PD_OK) goto fail;
    pd_value_info in, out;
    pd_graph_input(g, 0, &in);
    pd_graph_output(g, 0, &out);
    y.dtype = PD_INT64;
    y.ndim = out.ndim - 1;
    int64_t ny = 1;
    for (int i = 0; i < y.ndim; i++) ny *= (y.shape[i] = out.shape[i]);
    y.data = malloc(sizeof(int64_t) * (size_t)ny);
    for (int64_t i = 0; i < ny; i++) ((int64_t *)y.data)[i] = (i * 7919) % out.shape[out.ndim - 1];
    if (pd_session_set_input(s, in.name, &x) != PD_OK || pd_session_set_labels(s, &y) != PD_OK) goto fail;
    double *t = malloc(sizeof(double) * (size_t)iters);
    for (int i = 0; i < warmup + iters; i++) {
        double t0 = now();
        if (pd_session_step(s, NULL) != PD_OK) goto fail;
        if (i >= warmup) t[i - warmup] = now() - t0;
    }
    qsort(t, (size_t)iters, sizeof(double), cmp);
    double med = t[iters / 2];
    printf("{\"model\": \"%s\", \"batch\": %d, \"threads\": %d, \"samples_per_s\": %.1f, \"ms_per_step\": %.4f}\n", name,
           batch, threads, batch / med, med * 1e3);
    free(t);
    free(x.data);
    free(y.data);
    pd_tensor_free(&x0);
    pd_session_destroy(s);
    pd_graph_destroy(g);
    return 0;
fail:
    fprintf(stderr, "bench_train: %s\n", pd_last_error());
    return 1;
}
