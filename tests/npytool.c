/* npytool.c - makes bad .npy inputs for the CLI tests from good ones:
 *   npytool head IN.npy OUT.npy ROWS          the first ROWS rows
 *   npytool set IN.npy OUT.npy INDEX VALUE    element INDEX (flat) = VALUE (nan, inf ok)
 *   npytool cast IN.npy OUT.npy DTYPE         float32 | float64 | int64 | int32 | uint8
 *   npytool tile IN.npy OUT.npy ROWS          IN's rows repeated to ROWS rows
 *   npytool slice IN.npy OUT.npy FROM TO      rows FROM .. TO-1
 */
#include "../core/pd_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: npytool head|set|cast IN OUT ARGS...\n");
        return 2;
    }
    pd_tensor t;
    if (pd_npy_load(argv[2], &t) != PD_OK) {
        fprintf(stderr, "npytool: %s\n", pd_last_error());
        return 1;
    }
    if (!strcmp(argv[1], "head")) {
        t.shape[0] = atoll(argv[4]);
    } else if (!strcmp(argv[1], "set") && argc > 5) {
        double v = strtod(argv[5], NULL);
        pd__set_f(t.dtype, t.data, atoll(argv[4]), v);
    } else if (!strcmp(argv[1], "cast")) {
        pd_dtype to = !strcmp(argv[4], "float32") ? PD_FLOAT
                      : !strcmp(argv[4], "float64") ? PD_DOUBLE
                      : !strcmp(argv[4], "int64") ? PD_INT64
                      : !strcmp(argv[4], "int32") ? PD_INT32
                                                  : PD_UINT8;
        int64_t n = pd_tensor_numel(&t);
        void *d = malloc((size_t)n * pd_dtype_size(to) + 1);
        for (int64_t i = 0; i < n; i++) pd__set_f(to, d, i, pd__get_f(t.dtype, t.data, i));
        free(t.data);
        t.data = d;
        t.dtype = to;
    } else if (!strcmp(argv[1], "slice") && argc > 5) {
        int64_t from = atoll(argv[4]), to = atoll(argv[5]), row = pd_tensor_numel(&t) / (t.shape[0] ? t.shape[0] : 1);
        if (from < 0 || to > t.shape[0] || from > to) return 2;
        size_t rb = (size_t)row * pd_dtype_size(t.dtype);
        memmove(t.data, (char *)t.data + (size_t)from * rb, (size_t)(to - from) * rb);
        t.shape[0] = to - from;
    } else if (!strcmp(argv[1], "tile")) {
        int64_t rows = atoll(argv[4]), in = t.shape[0], row = pd_tensor_numel(&t) / (in ? in : 1);
        size_t rb = (size_t)row * pd_dtype_size(t.dtype);
        char *d = malloc((size_t)rows * rb + 1);
        if (!d || in < 1) return 1;
        for (int64_t r = 0; r < rows; r++) memcpy(d + (size_t)r * rb, (char *)t.data + (size_t)(r % in) * rb, rb);
        free(t.data);
        t.data = d;
        t.shape[0] = rows;
    } else {
        fprintf(stderr, "npytool: unknown command %s\n", argv[1]);
        return 2;
    }
    if (pd_npy_save(argv[3], &t) != PD_OK) {
        fprintf(stderr, "npytool: %s\n", pd_last_error());
        return 1;
    }
    pd_tensor_free(&t);
    return 0;
}
