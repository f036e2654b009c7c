/* test_dcache.c - the CUDA backend's caching allocator, its bookkeeping
 * (runtime/cuda/dcache.c: plain C, so it runs here without a GPU), driven by
 * a fake device (malloc) as context.cu drives it with cudaMalloc/cudaFree:
 * the size classes' rounding; no device allocation in the steady state of a
 * training-like loop (issue 6: "no cudaMalloc in the steady-state loop");
 * 200000 random allocations and frees checked against a plain list of the
 * live blocks (no block handed out twice, stale and foreign frees refused,
 * the byte counts and the peak exact, the table's backward-shift deletion
 * under growth); trim and release give every device block back once. */
#include "../runtime/cuda/dcache.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

/* the fake device: every block it gave and whether it was given back */
static void **dev_blocks;
static unsigned char *dev_freed;
static int64_t ndev, ndropped, bad_drops;

static void *dev_malloc(size_t bytes) {
    void *p = malloc(bytes);
    dev_blocks = realloc(dev_blocks, sizeof(void *) * (size_t)(ndev + 1));
    dev_freed = realloc(dev_freed, (size_t)ndev + 1);
    dev_blocks[ndev] = p;
    dev_freed[ndev++] = 0;
    return p;
}

static void dev_drop(void *ctx, void *p) {
    (void)ctx;
    for (int64_t i = ndev - 1; i >= 0; i--)
        if (dev_blocks[i] == p && !dev_freed[i]) {
            dev_freed[i] = 1;
            ndropped++;
            free(p);
            return;
        }
    bad_drops++; /* never given, or given back twice */
}

/* as pd__cuda_alloc */
static void *alloc(pd__dcache *d, size_t bytes, int *cls_out) {
    size_t rounded;
    int cls = pd__dcache_class(bytes, &rounded);
    void *p = pd__dcache_take(d, cls);
    bool fresh = !p;
    if (fresh) p = dev_malloc(rounded);
    if (!pd__dcache_track(d, p, cls, fresh)) return NULL;
    if (cls_out) *cls_out = cls;
    return p;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}
/* sizes as a model's tensors have them: mostly small, some large */
static size_t some_size(void) {
    int e = (int)(next() % 22);
    return (size_t)(next() % ((uint64_t)1 << e)) + 1;
}

static void classes(void) {
    int bad = 0, monotone = 1, prev = -1;
    size_t worst = 0;
    for (size_t b = 0; b < (1u << 20); b += 1 + b / 97) {
        size_t r;
        int c = pd__dcache_class(b, &r);
        if (r < b || r != pd__dcache_class_bytes(c) || (b > 512 && (r - b) * 4 > b)) bad++;
        if (b > 512 && (r - b) * 1000 / b > worst) worst = (r - b) * 1000 / b;
        if (c < prev) monotone = 0;
        prev = c;
    }
    CHECK(bad == 0 && monotone, "classes: every size up to 1 MiB rounds up to its class's size, at most 25%% over "
                                "(worst %.1f%%), classes grow with the size", worst / 10.0);
    size_t r;
    int exact = 1;
    for (int c = 1; c < 120; c++) exact &= pd__dcache_class(pd__dcache_class_bytes(c), &r) == c && r == pd__dcache_class_bytes(c);
    int c0 = pd__dcache_class(0, &r);
    CHECK(exact && c0 == 0 && r == 512 && pd__dcache_class(513, &r) == 1 && r == 640,
          "classes: a class's own size is its class (512 B for 0 bytes, 640 B for 513)");
    size_t top = pd__dcache_class_bytes(PD_CU_NCLASS - 1); /* 2^58 + 3 2^56 */
    CHECK(top == ((size_t)1 << 58) + 3 * ((size_t)1 << 56) && pd__dcache_class(top, &r) == PD_CU_NCLASS - 1 &&
              pd__dcache_class(top + 1, &r) >= PD_CU_NCLASS,
          "classes: the last class holds 1.75 x 2^58 bytes, one more byte is too large");
}

static void steady(void) {
    pd__dcache d = {0};
    enum { N = 60, ITERS = 100 };
    size_t sz[N];
    void *p[N];
    for (int i = 0; i < N; i++) sz[i] = some_size();
    int64_t after_first = 0;
    bool ok = true;
    for (int it = 0; it < ITERS; it++) {
        for (int i = 0; i < N; i++) ok &= (p[i] = alloc(&d, sz[i], NULL)) != NULL; /* a step's activations */
        for (int i = 0; i < N; i++) { /* freed in another order each step */
            int j = (int)((i * 7 + it) % N);
            if (p[j]) ok &= pd__dcache_give(&d, p[j]) == 1, p[j] = NULL;
        }
        if (it == 0) after_first = d.stats.device_mallocs;
        else
            for (int i = 0; i < N; i++) p[i] = NULL;
    }
    CHECK(ok && d.stats.device_mallocs == after_first && after_first <= N && d.stats.allocs == (int64_t)N * ITERS &&
              d.stats.reuses == d.stats.allocs - after_first && d.stats.in_use == 0,
          "steady state: %d steps of %d allocations, %lld device allocations, all in the first step (%lld reuses)",
          ITERS, N, (long long)d.stats.device_mallocs, (long long)d.stats.reuses);
    pd__dcache_release(&d, dev_drop, NULL);
}

static void random_ops(void) {
    pd__dcache d = {0};
    enum { OPS = 200000, MAXLIVE = 3000 };
    void **live = calloc(MAXLIVE, sizeof(void *));
    int *lcls = calloc(MAXLIVE, sizeof(int));
    int nlive = 0, twice = 0, refused = 0, accepted_bad = 0, maxlive = 0;
    size_t peak = 0;
    bool bytes_ok = true;
    for (int op = 0; op < OPS; op++) {
        int want_alloc = nlive == 0 || (nlive < MAXLIVE && next() % 100 < (op < OPS / 2 ? 55 : 45));
        if (want_alloc) {
            int cls = 0;
            void *q = alloc(&d, some_size(), &cls);
            for (int i = 0; i < nlive; i++) twice += live[i] == q;
            live[nlive] = q, lcls[nlive++] = cls;
            if (nlive > maxlive) maxlive = nlive;
        } else {
            int i = (int)(next() % (uint64_t)nlive);
            void *q = live[i];
            pd__dcache_give(&d, q);
            live[i] = live[--nlive], lcls[i] = lcls[nlive];
            if (next() % 50 == 0) { /* a stale free (already freed, now cached), and a foreign pointer */
                refused += pd__dcache_give(&d, q) == -1;
                refused += pd__dcache_give(&d, &nlive) == -1;
                accepted_bad += 2;
            }
        }
        size_t in_use = 0;
        if (op % 97 == 0 || op == OPS - 1) {
            for (int i = 0; i < nlive; i++) in_use += pd__dcache_class_bytes(lcls[i]);
            size_t cached = 0;
            for (int k = 0; k < PD_CU_NCLASS; k++) cached += (size_t)d.free[k].n * pd__dcache_class_bytes(k);
            bytes_ok &= d.stats.in_use == in_use && d.stats.cached == cached && d.live_n == nlive;
        }
        if (d.stats.in_use > peak) peak = d.stats.in_use;
    }
    CHECK(twice == 0, "random: %d allocations and frees, up to %d blocks live: no block handed out twice", OPS, maxlive);
    CHECK(refused == accepted_bad && accepted_bad > 0, "random: %d stale or foreign frees, all refused", accepted_bad);
    CHECK(bytes_ok && d.stats.peak == peak, "random: bytes in use and cached, live count and peak (%zu B) exact", d.stats.peak);
    int64_t cached_blocks = 0;
    for (int k = 0; k < PD_CU_NCLASS; k++) cached_blocks += d.free[k].n;
    int64_t before = ndropped;
    pd__dcache_drain(&d, dev_drop, NULL);
    CHECK(ndropped - before == cached_blocks && d.stats.cached == 0 && d.live_n == nlive,
          "trim: the %lld cached blocks given back, the live ones kept", (long long)cached_blocks);
    bool still = true; /* the live blocks are still found and freed after a trim */
    for (int i = 0; i < nlive / 2; i++) still &= pd__dcache_give(&d, live[i]) == 1;
    pd__dcache_release(&d, dev_drop, NULL);
    CHECK(still && d.live_p == NULL && d.stats.in_use == 0, "release: the tables freed");
    free(live);
    free(lcls);
}

int main(void) {
    classes();
    steady();
    random_ops();
    CHECK(ndropped == ndev && bad_drops == 0,
          "every device block given back once: %lld allocated, %lld given back, %lld bad", (long long)ndev,
          (long long)ndropped, (long long)bad_drops);
    free(dev_blocks);
    free(dev_freed);
    return check_summary();
}
