/* initcmp.c - whether two models hold the same initializers, bit for bit.
 *
 *   initcmp A.onnx B.onnx
 *
 * Loads both (external data read) and compares every initializer: the same
 * names, types, shapes, bytes and training_info listing (the tensor's train
 * rule), in any layout (inline or external data, in any order). Prints the
 * count and exits 0, or names the first difference and exits 1:
 * tests/test_export.sh checks that `pdonnx export`'s streamed model (weights
 * in OUT.onnx.data) is the self-contained one it wrote before, tensor for
 * tensor. */
#include "../core/pd_internal.h"

#include <stdio.h>
#include <string.h>

static int inits(const pd_graph *g) {
    int n = 0;
    for (int t = 0; t < g->ntensors; t++) n += g->tensors[t].kind == PD_T_INIT;
    return n;
}

/* x (of a) and y (of b) the same tensor; why not in *why. */
static bool same(const pd__tensor *x, const pd__tensor *y, const char **why) {
    *why = x->dtype != y->dtype ? "type"
           : x->ndim != y->ndim || memcmp(x->shape, y->shape, sizeof(int64_t) * (size_t)(x->ndim > 0 ? x->ndim : 0))
               ? "shape"
           : x->train != y->train ? "training_info listing"
           : (!x->data) != (!y->data) ? "presence of data"
           : x->data && memcmp(x->data, y->data, (size_t)x->numel * pd_dtype_size(x->dtype)) ? "bytes"
           : NULL;
    return !*why;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: initcmp A.onnx B.onnx\n");
        return 2;
    }
    pd_graph *g[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) {
        pd_load_options lo = PD_LOAD_OPTIONS_INIT;
        lo.batch = 1; /* a symbolic batch dim: the values do not depend on it */
        if (pd_graph_load_file(argv[1 + i], &lo, &g[i]) != PD_OK) {
            fprintf(stderr, "initcmp: %s\n", pd_last_error());
            pd_graph_destroy(g[0]);
            return 2;
        }
    }
    int rc = 0, n = 0;
    int64_t bytes = 0;
    for (int t = 0; t < g[0]->ntensors && rc == 0; t++) {
        const pd__tensor *x = &g[0]->tensors[t];
        if (x->kind != PD_T_INIT) continue;
        int u = pd__graph_find(g[1], x->name);
        const char *why = "absence";
        if (u < 0 || g[1]->tensors[u].kind != PD_T_INIT || !same(x, &g[1]->tensors[u], &why)) {
            printf("initcmp: '%s' differs (%s) between %s and %s\n", x->name, why, argv[1], argv[2]);
            rc = 1;
        }
        n++;
        bytes += x->numel * (int64_t)pd_dtype_size(x->dtype);
    }
    if (rc == 0 && n != inits(g[1])) printf("initcmp: %s has %d initializers, %s %d\n", argv[1], n, argv[2], inits(g[1])), rc = 1;
    if (rc == 0) printf("initcmp: %d initializers equal (%lld bytes)\n", n, (long long)bytes);
    pd_graph_destroy(g[0]);
    pd_graph_destroy(g[1]);
    return rc;
}
