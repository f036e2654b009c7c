/* omp_wait.h - pdonnx's programs run with OpenMP's idle workers spinning
 * briefly, then asleep (GNU libgomp, and LLVM's libomp in clang builds).
 *
 * How it works: docs/INTERNALS.md, "tools/omp_wait.h".
 */
#ifndef PD_OMP_WAIT_H
#define PD_OMP_WAIT_H

#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

/* libgomp's spin before a worker sleeps: about 20-50 us of pauses (libgomp's
 * default is 300000, ~10 ms; passive, 0, pays a futex wake of ~90 us on
 * every parallel region here). */
#define PD_OMP_SPINCOUNT "1000"
/* libomp's (clang's -fopenmp) spin before a worker sleeps, in ms (its
 * default, 200, keeps a core busy through every pause of a step). */
#define PD_KMP_BLOCKTIME "1"

static inline bool pd__omp_unset(const char *name) {
    const char *v = getenv(name);
    return !v || !*v;
}

/* Returns when no new execution was needed (a policy is set) or it failed
 * (no /proc: the runtime's default then). */
static inline void pd_omp_wait_policy(char **argv) {
    if (!pd__omp_unset("OMP_WAIT_POLICY")) return;
    bool again = false;
    if (pd__omp_unset("GOMP_SPINCOUNT")) again |= setenv("GOMP_SPINCOUNT", PD_OMP_SPINCOUNT, 1) == 0;
    if (pd__omp_unset("KMP_BLOCKTIME")) again |= setenv("KMP_BLOCKTIME", PD_KMP_BLOCKTIME, 1) == 0;
    if (again) execv("/proc/self/exe", argv);
}

#endif
