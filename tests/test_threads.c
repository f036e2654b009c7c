/* test_threads.c - one pool of --threads threads, asleep when idle
 * (docs/PERF.md, "Threads").
 *
 *   test_threads MODEL.onnx    (run without OMP_WAIT_POLICY: meson runs it under env -u)
 *
 * A training step with threads = 2 leaves the process with 2 threads: the
 * caller and one libgomp worker that our loops, oneDNN and OpenBLAS share
 * (OpenBLAS's pthreads build would add a pool of its own). Then, idle, the
 * worker sleeps: the process uses almost no CPU while the caller sleeps,
 * where libgomp's default spinning burns ~10 ms per wait. Its main starts
 * as pdonnx's does (tools/program_env.h), whose spin is a time measured on
 * this CPU, checked against this file's own timing of the pauses. */
#include "../pipedream.h"
#include "check.h"
#include "../tools/program_env.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int openblas_get_parallel(void);

static int tasks(void) {
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static double cpu_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return 1e3 * (double)t.tv_sec + 1e-6 * (double)t.tv_nsec;
}

/* ns of n turns of libgomp's spin (a relaxed load, then PAUSE on x86),
 * timed here apart from program_env.h's own timing; the fastest of five. */
static double spin_ns(long n) {
    static volatile int never;
    double best = 0;
    for (int r = 0; r < 5; r++) {
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        for (long i = 0; i < n && !never; i++) {
#if defined(__x86_64__) || defined(__i386__)
            __asm__ volatile("pause" ::: "memory");
#else
            __asm__ volatile("" ::: "memory");
#endif
        }
        clock_gettime(CLOCK_MONOTONIC, &b);
        double ns = 1e9 * (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec);
        if (r == 0 || ns < best) best = ns;
    }
    return best;
}

static int step(const char *model, int threads, int steps) {
    pd_load_options lo = PD_LOAD_OPTIONS_INIT;
    lo.batch = 512;
    pd_graph *g = NULL;
    pd_session *s = NULL;
    pd_train_options o = PD_TRAIN_OPTIONS_INIT;
    o.threads = threads;
    int ok = pd_graph_load_file(model, &lo, &g) == PD_OK && pd_session_create(g, &o, &s) == PD_OK;
    pd_value_info in;
    ok = ok && pd_graph_input(g, 0, &in) == PD_OK;
    pd_tensor x = {0}, y = {0};
    if (ok) {
        x.dtype = PD_FLOAT, x.ndim = 2, x.shape[0] = 512, x.shape[1] = in.shape[1];
        x.data = malloc(sizeof(float) * 512 * (size_t)in.shape[1]);
        y.dtype = PD_INT64, y.ndim = 1, y.shape[0] = 512;
        y.data = malloc(sizeof(int64_t) * 512);
        for (int64_t i = 0; i < 512 * in.shape[1]; i++) ((float *)x.data)[i] = (float)((i * 37) % 17) / 17.0f;
        for (int i = 0; i < 512; i++) ((int64_t *)y.data)[i] = i % 10;
        ok = pd_session_set_input(s, in.name, &x) == PD_OK && pd_session_set_labels(s, &y) == PD_OK;
    }
    for (int i = 0; ok && i < steps; i++) ok = pd_session_step(s, NULL) == PD_OK;
    if (!ok) printf("# %s\n", pd_last_error());
    int n = tasks();
    free(x.data);
    free(y.data);
    pd_session_destroy(s);
    pd_graph_destroy(g);
    return ok ? n : -1;
}

int main(int argc, char **argv) {
    pd_program_env(argv);
    if (argc < 2) {
        fprintf(stderr, "usage: test_threads MODEL.onnx\n");
        return 2;
    }
#ifdef PD_BLAS_OPENMP
    CHECK(openblas_get_parallel() == 2, "OpenBLAS is its OpenMP build (parallel mode %d, 2: OpenMP)",
          openblas_get_parallel());
#endif
    /* the spin is a time, the count measured for this CPU: two targets 20x
     * apart give spins of about those lengths (a fixed count would miss one) */
    long c5 = pd_omp_spin_count(5000), c100 = pd_omp_spin_count(100000);
    double s5 = spin_ns(c5), s100 = spin_ns(c100);
    CHECK(s5 > 2000 && s5 < 10000, "a 5 us spin: %ld turns take %.1f us", c5, s5 / 1e3);
    CHECK(s100 > 50000 && s100 < 200000, "a 100 us spin: %ld turns take %.1f us", c100, s100 / 1e3);
    const char *sc = getenv("GOMP_SPINCOUNT");
    long c = sc ? atol(sc) : 0;
    double sp = spin_ns(c);
    CHECK(c >= 100 && c <= 1000000 && sp > PD_OMP_SPIN_NS / 2 && sp < PD_OMP_SPIN_NS * 2,
          "the program's spin (GOMP_SPINCOUNT=%s, set at start) takes %.1f us, about %.0f us", sc ? sc : "(unset)",
          sp / 1e3, PD_OMP_SPIN_NS / 1e3);

    int n1 = step(argv[1], 1, 3);
    CHECK(n1 == 1, "a step with 1 thread runs on the caller alone (%d threads)", n1);
    int n2 = step(argv[1], 2, 3);
    CHECK(n2 == 2, "a step with 2 threads: the caller and one shared worker (%d threads)", n2);

    /* idle: the worker sleeps (checked over 200 ms, after a step that used it) */
    step(argv[1], 2, 1);
    double c0 = cpu_ms();
    struct timespec nap = {0, 200 * 1000 * 1000};
    nanosleep(&nap, NULL);
    double used = cpu_ms() - c0;
    CHECK(used < 3.0, "idle workers sleep: %.2f ms of CPU over 200 ms idle (GOMP_SPINCOUNT=%s, KMP_BLOCKTIME=%s)",
          used, getenv("GOMP_SPINCOUNT") ? getenv("GOMP_SPINCOUNT") : "(unset)",
          getenv("KMP_BLOCKTIME") ? getenv("KMP_BLOCKTIME") : "(unset)");
    return check_summary();
}
