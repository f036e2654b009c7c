/* omp_gaps.c - an LD_PRELOAD interposer on libgomp's GOMP_parallel that
 * logs, on the first thread to open a parallel region (the caller's), the
 * serial time before each top-level region: where an idle OpenMP worker,
 * past its short spin, goes to sleep and costs the next region a wake-up
 * (docs/PERF.md, "Fewer sleeps"). One line per region: the gap in us, then
 * the file and offset of the caller and of the region's function, then of
 * the previous region's function (addr2line -f -e FILE OFFSET names them).
 *
 *   gcc -O2 -shared -fPIC -o /tmp/omp_gaps.so bench/omp_gaps.c -ldl -lpthread
 *   OMP_GAPS_OUT=/tmp/gaps.txt LD_PRELOAD=/tmp/omp_gaps.so build/bench/bench_train ... --threads 2
 *
 * Not built by meson: a measuring tool, not part of pdonnx. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef void (*par_fn)(void (*)(void *), void *, unsigned, unsigned);

static par_fn real_parallel;
static FILE *out;
static pthread_t caller;
static int have_caller;
static double last_end;
static void *last_fn;
static __thread int depth;

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

static void where(const void *p, const char **file, unsigned long *off) {
    Dl_info d;
    *file = "?", *off = 0;
    if (p && dladdr(p, &d) && d.dli_fname) *file = d.dli_fname, *off = (unsigned long)((const char *)p - (const char *)d.dli_fbase);
}

void GOMP_parallel(void (*fn)(void *), void *data, unsigned nthreads, unsigned flags) {
    if (!real_parallel) {
        real_parallel = (par_fn)dlsym(RTLD_NEXT, "GOMP_parallel");
        const char *path = getenv("OMP_GAPS_OUT");
        out = fopen(path ? path : "/tmp/omp_gaps.txt", "w");
    }
    if (!have_caller) caller = pthread_self(), have_caller = 1;
    int top = depth++ == 0 && pthread_equal(caller, pthread_self());
    double t0 = now_us();
    if (top && last_end > 0 && out) {
        const char *fa, *fb, *fc;
        unsigned long oa, ob, oc;
        where(__builtin_return_address(0), &fa, &oa);
        where((void *)fn, &fb, &ob);
        where(last_fn, &fc, &oc);
        fprintf(out, "%.1f %s 0x%lx %s 0x%lx %s 0x%lx\n", t0 - last_end, fa, oa, fb, ob, fc, oc);
    }
    real_parallel(fn, data, nthreads, flags);
    depth--;
    if (top) last_end = now_us(), last_fn = (void *)fn;
}
