/* dcache.c - the caching device allocator's bookkeeping (dcache.h). */
#include "dcache.h"

#include "../../core/pd_internal.h"

int pd__dcache_class(size_t bytes, size_t *rounded) {
    if (bytes <= 512) {
        *rounded = 512;
        return 0;
    }
    int e = 63 - __builtin_clzll((unsigned long long)(bytes - 1)); /* 2^e <= bytes-1 < 2^(e+1), e >= 9 */
    size_t step = (size_t)1 << (e - 2);
    size_t j = (bytes - 1 - ((size_t)1 << e)) / step + 1; /* 1..4 */
    *rounded = ((size_t)1 << e) + j * step;
    return 1 + (e - 9) * 4 + (int)(j - 1);
}

size_t pd__dcache_class_bytes(int cls) {
    if (cls == 0) return 512;
    int e = (cls - 1) / 4 + 9, j = (cls - 1) % 4 + 1;
    return ((size_t)1 << e) + (size_t)j * ((size_t)1 << (e - 2));
}

static size_t pd__dc_hash(const void *p, int cap) {
    uint64_t h = (uint64_t)(uintptr_t)p;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return (size_t)(h & (uint64_t)(cap - 1));
}

static bool pd__dc_grow(pd__dcache *d) {
    int cap = d->live_cap ? d->live_cap * 2 : 256;
    void **p = PD_CALLOC((size_t)cap, sizeof *p);
    int *k = PD_CALLOC((size_t)cap, sizeof *k);
    if (!p || !k) {
        PD_FREE(p);
        PD_FREE(k);
        return false;
    }
    for (int i = 0; i < d->live_cap; i++) {
        if (!d->live_p[i]) continue;
        size_t h = pd__dc_hash(d->live_p[i], cap);
        while (p[h]) h = (h + 1) & (size_t)(cap - 1);
        p[h] = d->live_p[i];
        k[h] = d->live_cls[i];
    }
    PD_FREE(d->live_p);
    PD_FREE(d->live_cls);
    d->live_p = p;
    d->live_cls = k;
    d->live_cap = cap;
    return true;
}

/* Removes p from the live table; its class, or -1 when p is not live. */
static int pd__dc_untrack(pd__dcache *d, void *p) {
    if (!d->live_cap || !p) return -1;
    size_t mask = (size_t)(d->live_cap - 1), h = pd__dc_hash(p, d->live_cap);
    while (d->live_p[h] && d->live_p[h] != p) h = (h + 1) & mask;
    if (!d->live_p[h]) return -1;
    int cls = d->live_cls[h];
    d->live_p[h] = NULL;
    d->live_n--;
    /* backward shift: re-place the entries after the hole of this cluster */
    for (size_t i = (h + 1) & mask; d->live_p[i]; i = (i + 1) & mask) {
        void *q = d->live_p[i];
        int qc = d->live_cls[i];
        d->live_p[i] = NULL;
        size_t j = pd__dc_hash(q, d->live_cap);
        while (d->live_p[j]) j = (j + 1) & mask;
        d->live_p[j] = q;
        d->live_cls[j] = qc;
    }
    return cls;
}

void *pd__dcache_take(pd__dcache *d, int cls) {
    pd__cu_freelist *fl = &d->free[cls];
    if (fl->n == 0) return NULL;
    d->stats.cached -= pd__dcache_class_bytes(cls);
    d->stats.reuses++;
    return fl->p[--fl->n];
}

bool pd__dcache_track(pd__dcache *d, void *p, int cls, bool fresh) {
    if ((d->live_n + 1) * 2 > d->live_cap && !pd__dc_grow(d)) return false;
    size_t h = pd__dc_hash(p, d->live_cap);
    while (d->live_p[h]) h = (h + 1) & (size_t)(d->live_cap - 1);
    d->live_p[h] = p;
    d->live_cls[h] = cls;
    d->live_n++;
    d->stats.allocs++;
    d->stats.device_mallocs += fresh;
    d->stats.in_use += pd__dcache_class_bytes(cls);
    if (d->stats.in_use > d->stats.peak) d->stats.peak = d->stats.in_use;
    return true;
}

int pd__dcache_give(pd__dcache *d, void *p) {
    int cls = pd__dc_untrack(d, p);
    if (cls < 0) return -1;
    size_t bytes = pd__dcache_class_bytes(cls);
    d->stats.in_use -= bytes;
    pd__cu_freelist *fl = &d->free[cls];
    if (fl->n == fl->cap) {
        int cap = fl->cap ? fl->cap * 2 : 8;
        void **np = PD_REALLOC(fl->p, sizeof(void *) * (size_t)cap);
        if (!np) return 0;
        fl->p = np;
        fl->cap = cap;
    }
    fl->p[fl->n++] = p;
    d->stats.cached += bytes;
    return 1;
}

void pd__dcache_drain(pd__dcache *d, void (*drop)(void *ctx, void *p), void *ctx) {
    for (int k = 0; k < PD_CU_NCLASS; k++) {
        pd__cu_freelist *fl = &d->free[k];
        for (int i = 0; i < fl->n; i++) drop(ctx, fl->p[i]);
        d->stats.cached -= (size_t)fl->n * pd__dcache_class_bytes(k);
        fl->n = 0;
    }
}

void pd__dcache_release(pd__dcache *d, void (*drop)(void *ctx, void *p), void *ctx) {
    for (int i = 0; i < d->live_cap; i++)
        if (d->live_p[i]) drop(ctx, d->live_p[i]);
    pd__dcache_drain(d, drop, ctx);
    for (int k = 0; k < PD_CU_NCLASS; k++) PD_FREE(d->free[k].p);
    PD_FREE(d->live_p);
    PD_FREE(d->live_cls);
    *d = (pd__dcache){0};
}
