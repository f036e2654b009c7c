/* bench_common.h - what the benchmark programs share: the clock, the
 * flags, the median, and the input batch made of X.npy's rows (inline, so
 * a program that uses some of them builds without warnings). */
#ifndef PD_BENCH_COMMON_H
#define PD_BENCH_COMMON_H

#include "../pipedream.h"

#include <stdbool.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    const char *model, *xpath, *name;
    int batch, threads, iters, warmup;
    const char *device, *precision; /* bench_train: cpu|cuda[:N], fp32|tf32|bf16 (NULL: cpu, fp32) */
    const char *optimizer;          /* bench_train: sgd (default), momentum, adam */
} bench_args;

static inline double bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline int bench_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of n timings (sorts them). */
static inline double bench_median(double *t, int n) {
    qsort(t, (size_t)n, sizeof(double), bench_cmp);
    return t[n / 2];
}

/* PROG MODEL.onnx X.npy [--batch B] [--threads T] [--iters I] [--warmup W] [--name N]
 * [--device D] [--precision P] [--optimizer sgd|momentum|adam]; false on bad usage. */
static inline bool bench_parse(const char *prog, int argc, char **argv, int iters, bench_args *a) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL.onnx X.npy [--batch B] [--threads T] [--iters I] [--warmup W] [--name N]\n", prog);
        return false;
    }
    *a = (bench_args){argv[1], argv[2], argv[1], 64, 1, iters, 5, NULL, NULL, "sgd"};
    for (int i = 3; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--batch")) a->batch = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads")) a->threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--iters")) a->iters = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--warmup")) a->warmup = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--name")) a->name = argv[i + 1];
        else if (!strcmp(argv[i], "--device")) a->device = argv[i + 1];
        else if (!strcmp(argv[i], "--precision")) a->precision = argv[i + 1];
        else if (!strcmp(argv[i], "--optimizer")) a->optimizer = argv[i + 1];
        else {
            fprintf(stderr, "%s: unknown flag %s\n", prog, argv[i]);
            return false;
        }
    }
    if (a->batch < 1 || a->threads < 1 || a->iters < 1 || a->warmup < 0) {
        fprintf(stderr, "%s: batch, threads and iters must be >= 1\n", prog);
        return false;
    }
    return true;
}

/* x: `batch` rows, X.npy's rows repeated (x->data is malloc'd). */
static inline pd_status bench_input(const char *path, int batch, pd_tensor *x) {
    pd_tensor x0;
    pd_status st = pd_npy_load(path, &x0);
    if (st != PD_OK) return st;
    size_t row = (size_t)(pd_tensor_numel(&x0) / x0.shape[0]) * pd_dtype_size(x0.dtype);
    *x = x0;
    x->shape[0] = batch;
    x->data = malloc(row * (size_t)batch);
    for (int b = 0; b < batch; b++)
        memcpy((char *)x->data + row * (size_t)b, (char *)x0.data + row * (size_t)(b % x0.shape[0]), row);
    pd_tensor_free(&x0);
    return PD_OK;
}

#endif
