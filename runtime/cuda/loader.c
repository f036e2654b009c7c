/* loader.c - libpipedream's side of the CUDA module: every function of
 * PD_CUDA_API (cuda.h) as a stub forwarding to libpdcuda.so, loaded with
 * dlopen on the first call, so libpipedream links no CUDA library and a
 * process that never asks for a GPU never maps cuBLAS or cuDNN. The module
 * is process-wide state, as dlopen's own: loaded at most once (pthread_once),
 * never unloaded, written only inside that once. Looked for in
 * $PDONNX_CUDA_MODULE, beside libpipedream, in its installed libdir, then by
 * name (LD_LIBRARY_PATH); details: docs/INTERNALS.md, "runtime/cuda/loader.c". */
#include "cuda.h"
#include "host.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#ifndef PD_CUDA_MODULE_LIBDIR
#error "PD_CUDA_MODULE_LIBDIR (the installed libdir) is defined by meson.build"
#endif

static pthread_once_t pd__cuda_once = PTHREAD_ONCE_INIT;

/* What the module calls back in this library (host.h): it links no copy of
 * libpipedream, so a program linking the static library loads it too. */
static const pd__cuda_host pd__cuda_host_table = {
    .size = sizeof(pd__cuda_host),
    .err = pd__err,
    .err_prefix = pd__err_prefix,
    .last_error = pd_last_error,
    .dtype_name = pd_dtype_name,
    .dtype_size = pd_dtype_size,
    .ops = pd__ops,
    .attr_get = pd__attr_get,
    .attr_i = pd__attr_i,
    .attr_f = pd__attr_f,
    .attr_s = pd__attr_s,
    .attr_ints = pd__attr_ints,
    .bn_training = pd__bn_training,
    .loss_reduction = pd__loss_reduction,
    .norm_axis = pd__norm_axis,
    .shape_numel = pd__shape_numel,
    .softmax_split = pd__softmax_split,
    .transpose_perm = pd__transpose_perm,
    .win_make = pd__win_make,
    .dcache_class = pd__dcache_class,
    .dcache_take = pd__dcache_take,
    .dcache_track = pd__dcache_track,
    .dcache_give = pd__dcache_give,
    .dcache_drain = pd__dcache_drain,
    .dcache_release = pd__dcache_release,
    .mpi_relayed = pd__mpi_relayed,
    .mpi_transport_check = pd__mpi_transport_check,
    .mpi_use = pd__mpi_use,
};
/* The simulated device (sim.c) instead of the module: its device count, 0
 * when not asked for (pd__cuda_use_sim, or PDONNX_CUDA_MODULE=sim[:N]) */
extern const pd__cuda_api pd__sim_api;
pd_status pd__sim_init(int ndev);
static pthread_mutex_t pd__cuda_sim_mu = PTHREAD_MUTEX_INITIALIZER;
static int pd__cuda_sim_want;
static bool pd__cuda_opened;
static const pd__cuda_api *pd__cuda_mod; /* NULL: not loaded (pd__cuda_why says why) */
static char pd__cuda_path[PATH_MAX];
static char pd__cuda_why[768];

/* libpdcuda.so in the directory of the object `addr` is in; false when it has none */
static bool pd__cuda_beside(const void *addr, char *out, size_t n) {
    Dl_info info;
    if (!dladdr(addr, &info) || !info.dli_fname) return false;
    const char *slash = strrchr(info.dli_fname, '/');
    if (!slash) return false;
    return snprintf(out, n, "%.*s/%s", (int)(slash - info.dli_fname), info.dli_fname, PD_CUDA_MODULE_NAME) <
           (int)n;
}

static void pd__cuda_choose(void) {
    const char *env = getenv("PDONNX_CUDA_MODULE");
    if (env && *env) {
        snprintf(pd__cuda_path, sizeof pd__cuda_path, "%s", env);
        return;
    }
    char beside[PATH_MAX];
    bool have_beside = pd__cuda_beside(&pd__cuda_once, beside, sizeof beside);
    const char *installed = PD_CUDA_MODULE_LIBDIR "/" PD_CUDA_MODULE_NAME;
    const char *pick = have_beside && access(beside, F_OK) == 0 ? beside
                       : access(installed, F_OK) == 0      ? installed
                                                           : PD_CUDA_MODULE_NAME; /* dlopen's search path */
    snprintf(pd__cuda_path, sizeof pd__cuda_path, "%s", pick);
}

/* "sim" or "sim:N" (N from 1 to 99): N, else 0 */
static int pd__cuda_sim_count(const char *s) {
    if (!s || strncmp(s, "sim", 3)) return 0;
    if (!s[3]) return 1;
    if (s[3] != ':' || s[4] < '1' || s[4] > '9' || (s[5] && (s[5] < '0' || s[5] > '9' || s[6]))) return 0;
    return atoi(s + 4);
}

static void pd__cuda_open(void) {
    pthread_mutex_lock(&pd__cuda_sim_mu);
    pd__cuda_opened = true;
    int sim = pd__cuda_sim_want ? pd__cuda_sim_want : pd__cuda_sim_count(getenv("PDONNX_CUDA_MODULE"));
    pd__cuda_sim_want = sim;
    pthread_mutex_unlock(&pd__cuda_sim_mu);
    if (sim) { /* the simulated device: no module to load */
        snprintf(pd__cuda_path, sizeof pd__cuda_path, "sim:%d", sim);
        if (pd__sim_init(sim) == PD_OK) pd__cuda_mod = &pd__sim_api;
        else snprintf(pd__cuda_why, sizeof pd__cuda_why, "cannot start the simulated device: %s", pd_last_error());
        return;
    }
    pd__cuda_choose();
    const char *path = pd__cuda_path;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        /* dlerror() names the file it could not load: the module itself
         * (said once, not twice) or a library the module needs */
        const char *e = dlerror();
        size_t n = strlen(path);
        if (e && !strncmp(e, path, n) && !strncmp(e + n, ": ", 2)) e += n + 2;
        snprintf(pd__cuda_why, sizeof pd__cuda_why, "cannot load the CUDA module %s: %s", path, e ? e : "dlopen failed");
        return;
    }
    const pd__cuda_api *api = (const pd__cuda_api *)dlsym(h, PD_CUDA_MODULE_SYMBOL);
    const char *bad = NULL;
    if (!api) bad = "not a pdonnx CUDA module (no " PD_CUDA_MODULE_SYMBOL ")";
    else if (api->size != sizeof *api || strcmp(api->version, PD_VERSION_STRING) ||
             strcmp(api->signature, PD_CUDA_API_SIGNATURE))
        bad = "built from another pdonnx (its API differs from this libpipedream's " PD_VERSION_STRING
              "): install the two from one build";
    if (bad) {
        snprintf(pd__cuda_why, sizeof pd__cuda_why, "cannot load the CUDA module %s: %s", path, bad);
        dlclose(h);
        return;
    }
    api->bind_host(&pd__cuda_host_table);
    pd__cuda_mod = api;
}

static const pd__cuda_api *pd__cuda_get(void) {
    pthread_once(&pd__cuda_once, pd__cuda_open);
    return pd__cuda_mod;
}

pd_status pd__cuda_use_sim(int ndevices) {
    pthread_mutex_lock(&pd__cuda_sim_mu);
    pd_status s = PD_OK;
    if (!pd__cuda_opened) pd__cuda_sim_want = ndevices;
    else if (pd__cuda_sim_want != ndevices)
        s = pd__err(PD_ERR_UNSUPPORTED,
                    pd__cuda_sim_want ? "device sim:%d: this process already simulates %d devices"
                                      : "device sim:%d: this process already uses the CUDA module (real GPUs and the "
                                        "simulated device do not mix in one process)",
                    ndevices, pd__cuda_sim_want);
    pthread_mutex_unlock(&pd__cuda_sim_mu);
    return s;
}

bool pd__cuda_is_sim(void) { return pd__cuda_get() == &pd__sim_api; }

pd_status pd__cuda_load(void) {
    return pd__cuda_get() ? PD_OK : pd__err(PD_ERR_UNSUPPORTED, "%s", pd__cuda_why);
}

/* The stubs: pd__cuda_NAME forwards to the module's NAME, or answers
 * `fallback` without the module. */
#define PD__CUDA_FORWARD(ret, name, params, args, fallback) \
    ret pd__cuda_##name params {                            \
        const pd__cuda_api *m = pd__cuda_get();             \
        return m ? m->name args : (fallback);               \
    }
#define PD__CUDA_FORWARD_V(name, params, args) \
    void pd__cuda_##name params {              \
        const pd__cuda_api *m = pd__cuda_get(); \
        if (m) m->name args;                   \
    }
PD_CUDA_API(PD__CUDA_FORWARD, PD__CUDA_FORWARD_V)
