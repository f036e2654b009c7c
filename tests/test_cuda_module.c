/* test_cuda_module.c - the CUDA module (libpdcuda.so) is loaded on demand,
 * and its absence is one line, never a crash. The public API only
 * (pipedream.h); what the process has loaded is read from /proc/self/maps.
 *
 *   test_cuda_module lazy MODEL.onnx [DIR]  a build with the CUDA backend: a CPU
 *       session trains without mapping the module or any CUDA library; the
 *       first pd_cuda_device_count() loads the module (found beside
 *       libpipedream: the build tree's root, or DIR/libpdcuda.so when given,
 *       tests/test_install.sh's installed copy) and, through it, cuBLAS; a
 *       CUDA session then trains (a GPU) or says that no GPU was found.
 *   test_cuda_module missing MODEL.onnx     $PDONNX_CUDA_MODULE names a file
 *       that does not exist: 0 devices, and a CUDA session is refused with one
 *       line naming that path and dlopen's reason; no CUDA library mapped.
 *   test_cuda_module missing-lib MODEL.onnx MODULE WORKDIR   a copy of the
 *       module in WORKDIR whose cuBLAS dependency names a library that does
 *       not exist (libcublaX.so.N): 0 devices, one line naming the copy and
 *       the missing library, and nothing of it left mapped.
 *   test_cuda_module none MODEL.onnx        a build without the backend: 0
 *       devices, "no CUDA backend", nothing CUDA mapped.
 */
#include "pipedream.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#define B 8
#define D 64
#define K 10

/* whether a file whose name contains `lib` is mapped into this process;
 * its path into `path` (may be NULL) */
static int mapped_at(const char *lib, char *path, size_t n) {
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return -1;
    char line[4096];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        const char *slash = strrchr(line, '/');
        found = slash && strstr(slash, lib) != NULL;
        if (found && path) snprintf(path, n, "%.*s", (int)strcspn(strchr(line, '/'), "\n"), strchr(line, '/'));
    }
    fclose(f);
    return found;
}
static int mapped(const char *lib) { return mapped_at(lib, NULL, 0); }

static const char *const cuda_libs[] = {"libpdcuda", "libcudart", "libcublas", "libcublasLt", "libcudnn"};

/* none of the CUDA libraries (nor the module) is mapped */
static void check_nothing_mapped(const char *when) {
    for (size_t i = 0; i < sizeof cuda_libs / sizeof *cuda_libs; i++)
        CHECK(mapped(cuda_libs[i]) == 0, "%s: %s is not mapped", when, cuda_libs[i]);
}

static pd_graph *load(const char *model) {
    pd_load_options lo = PD_LOAD_OPTIONS_INIT;
    lo.batch = B;
    pd_graph *g = NULL;
    if (pd_graph_load_file(model, &lo, &g) != PD_OK) printf("# load %s: %s\n", model, pd_last_error());
    return g;
}

/* a session on `device` trains three steps; the status of the first failure */
static pd_status train(pd_graph *g, pd_device_kind device, double *first, double *last) {
    pd_train_options to = PD_TRAIN_OPTIONS_INIT;
    to.lr = 0.1;
    to.threads = 1;
    to.device = device;
    pd_session *s = NULL;
    pd_status st = pd_session_create(g, &to, &s);
    static float x[B * D];
    static int64_t y[B];
    for (int i = 0; i < B * D; i++) x[i] = (float)((i * 37) % 101) / 101.0f;
    for (int i = 0; i < B; i++) y[i] = (i * 3) % K;
    pd_tensor xt = {PD_FLOAT, 2, {B, D}, x}, yt = {PD_INT64, 1, {B}, y};
    for (int k = 0; st == PD_OK && k < 3; k++) {
        pd_step_result r;
        st = pd_session_set_input(s, "x", &xt);
        if (st == PD_OK) st = pd_session_set_labels(s, &yt);
        if (st == PD_OK) st = pd_session_step(s, &r);
        if (st == PD_OK && k == 0) *first = r.loss;
        if (st == PD_OK) *last = r.loss;
    }
    pd_session_destroy(s);
    return st;
}

/* a CUDA session is refused with one line that contains every string of `want` */
static void check_refused(pd_graph *g, const char *what, const char *const *want, int nwant) {
    double a, b;
    pd_status st = train(g, PD_DEVICE_CUDA, &a, &b);
    const char *e = pd_last_error();
    int all = st == PD_ERR_UNSUPPORTED && !strchr(e, '\n') && !strncmp(e, "device cuda: ", 13);
    for (int i = 0; all && i < nwant; i++) all = strstr(e, want[i]) != NULL;
    CHECK(all, "%s: a CUDA session is refused in one line: %s", what, e);
}

/* a copy of the module at `out` whose cuBLAS dependency is renamed to one that
 * does not exist: "libcublas.so." becomes "libcublaX.so." (same length, so the
 * string table stays valid) */
static int copy_without_cublas(const char *module, const char *out) {
    FILE *f = fopen(module, "rb");
    if (!f) return 0;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n > 0 ? malloc((size_t)n) : NULL;
    int ok = buf && fread(buf, 1, (size_t)n, f) == (size_t)n;
    fclose(f);
    static const char from[] = "libcublas.so.";
    int renamed = 0;
    for (long i = 0; ok && i + (long)sizeof from - 1 <= n; i++)
        if (!memcmp(buf + i, from, sizeof from - 1)) buf[i + 8] = 'X', renamed++;
    FILE *o = ok && renamed ? fopen(out, "wb") : NULL;
    ok = o && fwrite(buf, 1, (size_t)n, o) == (size_t)n;
    if (o) ok = fclose(o) == 0 && ok;
    free(buf);
    return ok;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: test_cuda_module lazy MODEL.onnx [DIR] | missing|none MODEL.onnx | missing-lib "
                        "MODEL.onnx MODULE WORKDIR\n");
        return 2;
    }
    const char *mode = argv[1];
    pd_graph *g = load(argv[2]);
    if (!g) return 1;
    double first = 0, last = 0;
    pd_status st = train(g, PD_DEVICE_CPU, &first, &last);
    CHECK(st == PD_OK && last < first, "a CPU session trains (loss %g -> %g) %s", first, last,
          st == PD_OK ? "" : pd_last_error());
    check_nothing_mapped("after CPU training");

    if (!strcmp(mode, "lazy")) {
        int n = pd_cuda_device_count();
        char at[4096] = "", want[4096] = "";
        if (argc > 3) snprintf(want, sizeof want, "%s/libpdcuda.so", argv[3]);
        CHECK(mapped_at("libpdcuda.so", at, sizeof at) == 1 && (!*want || !strcmp(at, want)),
              "pd_cuda_device_count() (%d) loaded the module %s%s%s", n, at, *want ? ", wanted " : "", want);
        CHECK(mapped("libcublas") == 1, "and the module's CUDA libraries (cuBLAS)");
        if (n > 0) {
            st = train(g, PD_DEVICE_CUDA, &first, &last);
            CHECK(st == PD_OK && last < first, "a CUDA session trains (loss %g -> %g) %s", first, last,
                  st == PD_OK ? "" : pd_last_error());
        } else {
            const char *want[] = {"no CUDA GPU found"};
            check_refused(g, "no GPU here", want, 1);
        }
    } else if (!strcmp(mode, "missing")) {
        const char *path = getenv("PDONNX_CUDA_MODULE");
        if (!path || !*path) {
            printf("NOT OK PDONNX_CUDA_MODULE is not set\n");
            return 1;
        }
        CHECK(pd_cuda_device_count() == 0, "PDONNX_CUDA_MODULE=%s (missing): 0 devices", path);
        const char *want[] = {"cannot load the CUDA module", path, "No such file"};
        check_refused(g, "module missing", want, 3);
        check_nothing_mapped("after the failed load");
    } else if (!strcmp(mode, "missing-lib") && argc == 5) {
        static char copy[4096];
        snprintf(copy, sizeof copy, "%s/libpdcuda-nocublas.so", argv[4]);
        if (!copy_without_cublas(argv[3], copy)) {
            printf("NOT OK cannot write %s from %s\n", copy, argv[3]);
            return 1;
        }
        setenv("PDONNX_CUDA_MODULE", copy, 1);
        CHECK(pd_cuda_device_count() == 0, "a module whose cuBLAS is missing: 0 devices");
        const char *want[] = {"cannot load the CUDA module", copy, "libcublaX.so."};
        check_refused(g, "cuBLAS missing", want, 3);
        check_nothing_mapped("after the failed load");
        remove(copy);
    } else if (!strcmp(mode, "none")) {
        CHECK(pd_cuda_device_count() == 0, "a build without the CUDA backend: 0 devices");
        const char *want[] = {"no CUDA backend"};
        check_refused(g, "no backend", want, 1);
        check_nothing_mapped("after asking for CUDA");
    } else {
        fprintf(stderr, "test_cuda_module: unknown mode '%s'\n", mode);
        return 2;
    }
    pd_graph_destroy(g);
    return check_summary();
}
