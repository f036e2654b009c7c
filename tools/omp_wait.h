/* omp_wait.h - pdonnx's programs run with libgomp's idle workers spinning
 * briefly, then asleep.
 *
 * How it works: docs/INTERNALS.md, "tools/omp_wait.h".
 */
#ifndef PD_OMP_WAIT_H
#define PD_OMP_WAIT_H

#include <stdlib.h>
#include <unistd.h>

/* libgomp's spin before a worker sleeps: about 20-50 us of pauses (libgomp's
 * default is 300000, ~10 ms; passive, 0, pays a futex wake of ~90 us on
 * every parallel region here). */
#define PD_OMP_SPINCOUNT "1000"

/* Returns when no new execution was needed (a policy is set) or it failed
 * (no /proc: libgomp's default then). */
static inline void pd_omp_wait_policy(char **argv) {
    const char *policy = getenv("OMP_WAIT_POLICY"), *spin = getenv("GOMP_SPINCOUNT");
    if ((policy && *policy) || (spin && *spin)) return;
    if (setenv("GOMP_SPINCOUNT", PD_OMP_SPINCOUNT, 1) != 0) return;
    execv("/proc/self/exe", argv);
}

#endif
