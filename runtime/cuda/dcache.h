/* dcache.h - the CUDA backend's caching allocator, its bookkeeping alone:
 * size classes, the live blocks' table and the free lists, in plain C with
 * no CUDA in it, so that it runs and is tested on any machine
 * (tests/test_dcache.c). context.cu pairs it with cudaMalloc/cudaFree:
 *
 * How it works: docs/INTERNALS.md, "runtime/cuda/dcache.h".
 */
#ifndef PD_DCACHE_H
#define PD_DCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda.h" /* pd__cuda_mem_stats */

#define PD_CU_NCLASS 200 /* size classes: 512 B, then 4 per power of two, the last 1.75 x 2^58 B */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pd__cu_freelist {
    void **p;
    int n, cap;
} pd__cu_freelist;

typedef struct pd__dcache {
    pd__cu_freelist free[PD_CU_NCLASS];
    /* live blocks: an open-addressing table (pointer -> class), linear
     * probing, deletion by backward shift */
    void **live_p;
    int *live_cls;
    int live_cap, live_n;
    pd__cuda_mem_stats stats; /* what pd__cuda_mem_get_stats reports */
} pd__dcache;

/* The class of a request of `bytes` (0 counts as 1) and its rounded size:
 * 512 B, then 2^e + j 2^(e-2), j = 1..4 (at most 25% over); PD_CU_NCLASS
 * or more when it is too large. */
int pd__dcache_class(size_t bytes, size_t *rounded);
size_t pd__dcache_class_bytes(int cls);
/* A cached block of class cls (counted as a reuse), or NULL. */
void *pd__dcache_take(pd__dcache *d, int cls);
/* p (of class cls; fresh: from the device, not from pd__dcache_take) is
 * live; false when the table cannot grow (p is then not tracked). */
bool pd__dcache_track(pd__dcache *d, void *p, int cls, bool fresh);
/* p is freed: cached, 1; not cached (its free list cannot grow: the caller
 * gives it back to the device), 0; not a live block of d (never allocated
 * here, or freed already), -1. */
int pd__dcache_give(pd__dcache *d, void *p);
/* Every cached block handed to drop (then forgotten). */
void pd__dcache_drain(pd__dcache *d, void (*drop)(void *ctx, void *p), void *ctx);
/* Every block, live and cached, handed to drop; the tables freed. */
void pd__dcache_release(pd__dcache *d, void (*drop)(void *ctx, void *p), void *ctx);

#ifdef __cplusplus
}
#endif
#endif
