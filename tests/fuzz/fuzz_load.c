/* fuzz_load.c - libFuzzer harness for the ONNX model reader: any byte string
 * given to pd_graph_load_memory must give a graph or an error, never a crash,
 * a leak or a hang. Loading runs shape inference and constant folding, so the
 * shape rules and CPU kernels are fuzzed through it too.
 *
 *   CC=clang meson setup build-fuzz -Dfuzz=true --buildtype=debugoptimized \
 *       -Db_sanitize=address,undefined -Db_lundef=false
 *   tests/fuzz/run.sh build-fuzz 600      seeds: fixtures + a sample of ONNX's test models
 *
 * Built with -DPD_FUZZ_STANDALONE (no libFuzzer) it is a replayer instead:
 * `fuzz_load FILE...` runs each file through the harness once, for gcc,
 * valgrind and regression tests of saved crash inputs. */
#include <stddef.h>
#include <stdint.h>

#include "../../pipedream.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    pd_load_options o = PD_LOAD_OPTIONS_INIT;
    o.batch = 2; /* binds symbolic batch dims so that loading gets past the inputs */
    pd_graph *g = NULL;
    if (pd_graph_load_memory(data, size, "fuzz.onnx", NULL, &o, &g) == PD_OK) {
        /* touch what the CLI's `info` reads */
        for (int i = 0; i < pd_graph_num_nodes(g); i++) {
            pd_node_info ni;
            (void)pd_graph_node(g, i, &ni);
        }
        (void)pd_graph_param_bytes(g);
        pd_graph_destroy(g);
    }
    return 0;
}

#ifdef PD_FUZZ_STANDALONE
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (!f) {
            perror(argv[i]);
            return 1;
        }
        size_t cap = 1 << 16, n = 0;
        uint8_t *buf = malloc(cap);
        size_t r;
        while (buf && (r = fread(buf + n, 1, cap - n, f)) > 0) {
            n += r;
            if (n == cap) {
                uint8_t *nb = realloc(buf, cap *= 2);
                if (!nb) free(buf);
                buf = nb;
            }
        }
        fclose(f);
        if (!buf) {
            fprintf(stderr, "%s: out of memory\n", argv[i]);
            return 1;
        }
        LLVMFuzzerTestOneInput(buf, n);
        free(buf);
    }
    printf("replayed %d inputs\n", argc - 1);
    return 0;
}
#endif
