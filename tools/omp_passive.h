/* omp_passive.h - pdonnx's programs run with libgomp's idle workers asleep.
 *
 * How it works: docs/INTERNALS.md, "tools/omp_passive.h".
 */
#ifndef PD_OMP_PASSIVE_H
#define PD_OMP_PASSIVE_H

#include <stdlib.h>
#include <unistd.h>

/* Returns when no new execution was needed (a policy is set) or it failed
 * (no /proc: libgomp's default then). */
static inline void pd_omp_passive(char **argv) {
    const char *policy = getenv("OMP_WAIT_POLICY"), *spin = getenv("GOMP_SPINCOUNT");
    if ((policy && *policy) || (spin && *spin)) return;
    if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0) return;
    execv("/proc/self/exe", argv);
}

#endif
