/* fuzz_profile.c - libFuzzer harness for the profile readers (our JSON and
 * PipeDream's graph.txt) and the planners behind them: any byte string gives
 * a profile or an error, and a profile gives a plan or an error, never a
 * crash, a leak or a hang.
 *
 *   tests/fuzz/run.sh BUILD_DIR SECONDS     (fuzzes the loader, then this)
 *
 * Built with -DPD_FUZZ_STANDALONE it replays files instead. */
#include <stddef.h>
#include <stdint.h>

#include "../../core/plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    pd_profile *p = NULL;
    if (pd__profile_parse("fuzz.txt", (const char *)data, size, &p) != PD_OK) return 0;
    static const char *algos[] = {"pipedream", "bipartition", "2bw", "uniform"};
    for (int a = 0; a < 4; a++) {
        pd_plan_options o = PD_PLAN_OPTIONS_INIT;
        o.algo = algos[a];
        o.workers = 1 + (int)(size % 4);
        o.max_states = 256;
        o.memory = size % 3 == 0 ? 1e9 : 0;
        pd_plan *pl = NULL;
        if (pd_plan_create(p, &o, &pl) == PD_OK) pd_plan_destroy(pl);
    }
    pd_profile_destroy(p);
    return 0;
}

#ifdef PD_FUZZ_STANDALONE
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (!f) continue;
        static uint8_t buf[1 << 20];
        size_t n = fread(buf, 1, sizeof buf, f);
        fclose(f);
        LLVMFuzzerTestOneInput(buf, n);
    }
    return 0;
}
#endif
