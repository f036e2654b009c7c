/* program_env.h - the environment pdonnx's programs run in, set before the
 * libraries read it: OpenMP's idle workers spin briefly, then sleep (GNU
 * libgomp, and LLVM's libomp in clang builds); OpenBLAS takes the kernels of
 * the CPU's vector instructions where its own detection fell short (said in
 * one line when stderr is a terminal).
 *
 * How it works: docs/INTERNALS.md, "tools/program_env.h".
 */
#ifndef PD_PROGRAM_ENV_H
#define PD_PROGRAM_ENV_H

#include "../pipedream.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* libgomp's spin before a worker sleeps: about 20-50 us of pauses (libgomp's
 * default is 300000, ~10 ms; passive, 0, pays a futex wake of ~90 us on
 * every parallel region here). */
#define PD_OMP_SPINCOUNT "1000"
/* libomp's (clang's -fopenmp) spin before a worker sleeps, in ms (its
 * default, 200, keeps a core busy through every pause of a step). */
#define PD_KMP_BLOCKTIME "1"

static inline bool pd__env_unset(const char *name) {
    const char *v = getenv(name);
    return !v || !*v;
}

/* The first call of main. Returns when nothing needed setting (the user set
 * it) or the new execution failed (no /proc: the libraries' defaults then);
 * otherwise the program starts again, the same process and arguments. */
static inline void pd_program_env(char **argv) {
    bool again = false;
    if (pd__env_unset("OMP_WAIT_POLICY")) {
        if (pd__env_unset("GOMP_SPINCOUNT")) again |= setenv("GOMP_SPINCOUNT", PD_OMP_SPINCOUNT, 1) == 0;
        if (pd__env_unset("KMP_BLOCKTIME")) again |= setenv("KMP_BLOCKTIME", PD_KMP_BLOCKTIME, 1) == 0;
    }
    const char *core = pd_blas_coretype_advice();
    const char *slash = strrchr(argv[0], '/'), *name = slash ? slash + 1 : argv[0];
    if (core && setenv("OPENBLAS_CORETYPE", core, 1) == 0) {
        /* at a terminal only: a script's or a log's stderr keeps the lines it expects */
        if (isatty(STDERR_FILENO))
            fprintf(stderr, "%s: OpenBLAS chose kernels for older vector instructions than this CPU has; running with "
                    "OPENBLAS_CORETYPE=%s (set OPENBLAS_CORETYPE to choose)\n", name, core);
        again = true;
    }
    if (!again) return;
    execv("/proc/self/exe", argv);
    if (core) fprintf(stderr, "%s: could not start again (%s): OpenBLAS keeps its kernels\n", name, strerror(errno));
}

#endif
