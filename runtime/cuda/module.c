/* module.c - the CUDA module's one exported symbol (module.map): the table
 * of the API's functions (cuda.h, PD_CUDA_API) that libpipedream's loader
 * (loader.c) reads after dlopen. Everything else in libpdcuda.so is local to
 * it, so the module's own calls never reach the loader's stubs of the same
 * names.
 */
#include "cuda.h"

#define PD__CUDA_ENTRY(ret, name, params, args, fallback) .name = pd__cuda_##name,
#define PD__CUDA_ENTRY_V(name, params, args) .name = pd__cuda_##name,

extern const pd__cuda_api pd__cuda_module_api;
const pd__cuda_api pd__cuda_module_api = {
    .size = sizeof(pd__cuda_api),
    .version = PD_VERSION_STRING,
    .signature = PD_CUDA_API_SIGNATURE,
    .err = pd__err,
    PD_CUDA_API(PD__CUDA_ENTRY, PD__CUDA_ENTRY_V)
};
