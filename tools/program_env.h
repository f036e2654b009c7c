/* program_env.h - the environment pdonnx's programs run in, set before the
 * libraries read it: OpenMP's idle workers spin briefly, then sleep (GNU
 * libgomp, for a time measured on this CPU, and LLVM's libomp in clang
 * builds); OpenBLAS takes the kernels of the CPU's vector instructions where
 * its own detection fell short (said in one line when stderr is a terminal).
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
#include <time.h>
#include <unistd.h>

/* How long an idle libgomp worker spins before it sleeps, in ns: longer
 * than most gaps between our parallel regions, short enough not to hold a
 * core another process wants (libgomp's default spins ~10 ms; passive, no
 * spin, pays a futex wake of ~90 us on every parallel region on the 2-core
 * VM where this was tuned, as 1000 pauses of 26 ns). libgomp counts the spin
 * in pauses (GOMP_SPINCOUNT), whose length differs by CPU generation
 * (x86's PAUSE: about 10 cycles before Skylake, 140 on Skylake-SP), so the
 * count is measured at start: pd_omp_spin_count. */
#define PD_OMP_SPIN_NS 26000.0
/* libomp's (clang's -fopenmp) spin before a worker sleeps, in ms (its
 * default, 200, keeps a core busy through every pause of a step). */
#define PD_KMP_BLOCKTIME "1"

/* libgomp's cpu_relax (config/linux/wait.h): PAUSE on x86, a compiler
 * barrier elsewhere; a turn of its spin is a relaxed load and this. */
static inline void pd__cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    __asm__ volatile("" ::: "memory");
#endif
}

/* ns of `turns` turns of the spin, the fastest of three tries (a try the
 * scheduler interrupts only lengthens). */
static inline double pd__spin_ns(long turns) {
    static volatile int never;
    double best = 0;
    for (int r = 0; r < 3; r++) {
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        for (long i = 0; i < turns && !never; i++) pd__cpu_relax();
        clock_gettime(CLOCK_MONOTONIC, &b);
        double ns = 1e9 * (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec);
        if (r == 0 || ns < best) best = ns;
    }
    return best;
}

/* GOMP_SPINCOUNT for a spin of about ns on this CPU: 2000 turns timed (0.1-0.5
 * ms), the count scaled from them, kept within 100 and 10^6. */
static inline long pd_omp_spin_count(double ns) {
    double per = pd__spin_ns(2000) / 2000, n = per > 0 ? ns / per : 1000;
    return n < 100 ? 100 : n > 1e6 ? 1000000 : (long)n;
}

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
        if (pd__env_unset("GOMP_SPINCOUNT")) {
            char count[24];
            snprintf(count, sizeof count, "%ld", pd_omp_spin_count(PD_OMP_SPIN_NS));
            again |= setenv("GOMP_SPINCOUNT", count, 1) == 0;
        }
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
