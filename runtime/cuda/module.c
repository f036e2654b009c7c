/* module.c - the CUDA module's one exported symbol (module.map): the table
 * of the API's functions (cuda.h, PD_CUDA_API) that libpipedream's loader
 * (loader.c) reads after dlopen. Everything else in libpdcuda.so is local to
 * it, so the module's own calls never reach the loader's stubs of the same
 * names.
 */
#include "cuda.h"
#include "host.h"
#ifdef PD_HAVE_NCCL
#include "../comm/nccl.h"
#endif

/* The NCCL transport's entries (cuda.h): runtime/comm/nccl.c, built into
 * this module with NCCL, or one line saying it is not. */
pd_status pd__cuda_nccl_transport_create(int nthreads, const int *rank_of, const int *worker_of, int nworkers,
                                         int nlinks, int color, int device, void *stream, struct pd__transport *watch,
                                         struct pd__transport **out) {
#ifdef PD_HAVE_NCCL
    return pd__nccl_transport_create(nthreads, rank_of, worker_of, nworkers, nlinks, color, device, stream, watch, out);
#else
    (void)nthreads, (void)rank_of, (void)worker_of, (void)nworkers, (void)nlinks, (void)color, (void)device,
        (void)stream, (void)watch, (void)out;
    return pd__err(PD_ERR_UNSUPPORTED, "this build's CUDA module has no NCCL transport (-Dnccl)");
#endif
}

pd_status pd__cuda_nccl_sync(struct pd__transport *t) {
#ifdef PD_HAVE_NCCL
    return pd__nccl_sync(t);
#else
    (void)t;
    return pd__err(PD_ERR_UNSUPPORTED, "this build's CUDA module has no NCCL transport (-Dnccl)");
#endif
}

bool pd__cuda_nccl_pending(void *t) {
#ifdef PD_HAVE_NCCL
    return pd__nccl_pending(t);
#else
    (void)t;
    return false;
#endif
}

int pd__cuda_nccl_devices(void) {
#ifdef PD_HAVE_NCCL
    return pd__nccl_devices();
#else
    return 0;
#endif
}

#define PD__CUDA_ENTRY(ret, name, params, args, fallback) .name = pd__cuda_##name,
#define PD__CUDA_ENTRY_V(name, params, args) .name = pd__cuda_##name,

extern const pd__cuda_api pd__cuda_module_api;
const pd__cuda_api pd__cuda_module_api = {
    .size = sizeof(pd__cuda_api),
    .version = PD_VERSION_STRING,
    .signature = PD_CUDA_API_SIGNATURE,
    .bind_host = pd__cuda_host_bind,
    PD_CUDA_API(PD__CUDA_ENTRY, PD__CUDA_ENTRY_V)
};
