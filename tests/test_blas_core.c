/* test_blas_core.c - OpenBLAS's kernels for the CPU (pd_blas_coretype_advice):
 * the rule over OpenBLAS's core names, the CPU's vector level against
 * /proc/cpuinfo's flags, and the public call on this machine. The program
 * start that acts on it is tests/test_blas_core.sh. */
#include "../core/pd_internal.h"
#include "check.h"

#include <stdlib.h>
#include <string.h>

char *openblas_get_corename(void);

static int same(const char *a, const char *b) { return a == b || (a && b && strcmp(a, b) == 0); }

/* the level from the kernel's own account of the CPU's flags: -1 without /proc/cpuinfo */
static int cpuinfo_level(void) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return -1;
    static char line[1 << 14];
    int level = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "flags", 5) == 0) {
            char *tok, *save = NULL;
            int avx = 0, avx2 = 0, fma = 0, f512 = 0, bw = 0, dq = 0, vl = 0;
            for (tok = strtok_r(line, " \t\n", &save); tok; tok = strtok_r(NULL, " \t\n", &save)) {
                avx |= strcmp(tok, "avx") == 0, avx2 |= strcmp(tok, "avx2") == 0, fma |= strcmp(tok, "fma") == 0;
                f512 |= strcmp(tok, "avx512f") == 0, bw |= strcmp(tok, "avx512bw") == 0;
                dq |= strcmp(tok, "avx512dq") == 0, vl |= strcmp(tok, "avx512vl") == 0;
            }
            level = f512 && bw && dq && vl ? 3 : avx2 && fma ? 2 : avx ? 1 : 0;
            break;
        }
    fclose(f);
    return level;
}

int main(void) {
    static const struct {
        const char *detected;
        int level;
        const char *want;
    } cases[] = {
        {"Prescott", 3, "SKYLAKEX"},  /* Debian 12's OpenBLAS on a 5th-generation Xeon */
        {"Prescott", 2, "HASWELL"},   {"Nehalem", 1, "SANDYBRIDGE"}, {"Core2", 0, NULL},
        {"Haswell", 3, "SKYLAKEX"},   {"Zen", 3, "SKYLAKEX"},       {"Sandybridge", 2, "HASWELL"},
        {"Haswell", 2, NULL},         {"Zen", 2, NULL},             {"Cooperlake", 3, NULL},
        {"SapphireRapids", 3, NULL},  {"SkylakeX", 2, NULL},        /* above the CPU: its own business */
        {"HASWELL", 3, "SKYLAKEX"},   /* a one-target build's name */
        {"Unknown", 3, NULL},         {"SomeFutureCore", 3, NULL},  {NULL, 3, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *got = pd__blas_core_advice(cases[i].detected, cases[i].level);
        CHECK(same(got, cases[i].want), "%s at level %d: %s (want %s)", cases[i].detected ? cases[i].detected : "NULL",
              cases[i].level, got ? got : "NULL", cases[i].want ? cases[i].want : "NULL");
    }

    int level = pd__cpu_simd_level(), proc = cpuinfo_level();
    if (proc >= 0)
        CHECK(level == proc, "the CPU's vector level %d, /proc/cpuinfo's flags %d", level, proc);

    const char *detected = openblas_get_corename();
    const char *advice = pd_blas_coretype_advice();
    CHECK(same(advice, pd__blas_core_advice(detected, level)), "this machine: OpenBLAS chose %s, level %d, advice %s",
          detected, level, advice ? advice : "none");
    setenv("OPENBLAS_CORETYPE", "HASWELL", 1);
    CHECK(pd_blas_coretype_advice() == NULL, "OPENBLAS_CORETYPE set by the user: no advice");
    return check_summary();
}
