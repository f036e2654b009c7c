/* omp_passive.h - pdonnx's programs run with libgomp's idle workers asleep.
 *
 * libgomp's workers spin for up to ~10 ms (GOMP_SPINCOUNT 300000 pauses)
 * after each parallel region before they sleep. Between our many short
 * regions that keeps every worker's core busy, and when another process
 * wants a core the spinning takes it: two threads under one competing
 * process ran at a third of their quiet speed, passive at two thirds
 * (docs/PERF.md, "Threads"). libgomp reads the policy once, in its
 * constructor, before main and before an executable's .preinit_array can
 * set it (glibc's environ is not set up there yet), so main calls this
 * first: without a policy from the user (OMP_WAIT_POLICY or
 * GOMP_SPINCOUNT), it sets passive and executes the program again, the same
 * process id and arguments. A program embedding the library sets it in its
 * own environment (docs/API.md, "Threads"). */
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
