/* data.c - minibatches from in-memory arrays and a prefetching thread.
 * The semantics of the stream are in data.h. */
#include "data.h"

#include <pthread.h>
#include <string.h>
#include <time.h>

static uint64_t pd__splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

pd_status pd__data_init(pd__data *d, const pd_tensor *x, const pd_tensor *y, int64_t batch, bool shuffle,
                        uint64_t seed) {
    memset(d, 0, sizeof *d);
    if (x->ndim < 1 || y->ndim < 1) return pd__err(PD_ERR_SHAPE, "data and labels need a first (sample) axis");
    if (x->shape[0] != y->shape[0])
        return pd__err(PD_ERR_SHAPE, "the data has %lld rows but the labels have %lld", (long long)x->shape[0],
                       (long long)y->shape[0]);
    if (x->shape[0] < 1) return pd__err(PD_ERR_SHAPE, "the data set is empty");
    if (batch < 1) return pd__err(PD_ERR_INVALID, "the batch size must be >= 1");
    d->x = *x;
    d->y = *y;
    d->rows = x->shape[0];
    d->batch = batch;
    d->shuffle = shuffle;
    d->seed = seed;
    d->perm_epoch = -1;
    if (shuffle) {
        d->perm = PD_MALLOC(sizeof(int64_t) * (size_t)d->rows);
        if (!d->perm) return pd__err(PD_ERR_NOMEM, "out of memory for the shuffle");
    }
    return PD_OK;
}

pd_status pd__data_init_parts(pd__data *d, int n, const pd_tensor *xs, const pd_tensor *ys, int64_t batch,
                              bool shuffle, uint64_t seed) {
    if (n < 1) return pd__err(PD_ERR_INVALID, "no data files");
    int64_t *first = PD_MALLOC(sizeof(int64_t) * ((size_t)n + 1));
    if (!first) return pd__err(PD_ERR_NOMEM, "out of memory for the data's parts");
    first[0] = 0;
    for (int i = 0; i < n; i++) {
        bool same = xs[i].dtype == xs[0].dtype && ys[i].dtype == ys[0].dtype && xs[i].ndim == xs[0].ndim &&
                    ys[i].ndim == ys[0].ndim && xs[i].ndim >= 1 && ys[i].ndim >= 1;
        for (int a = 1; same && a < xs[i].ndim; a++) same = xs[i].shape[a] == xs[0].shape[a];
        for (int a = 1; same && a < ys[i].ndim; a++) same = ys[i].shape[a] == ys[0].shape[a];
        if (!same || xs[i].shape[0] != ys[i].shape[0]) {
            PD_FREE(first);
            return pd__err(PD_ERR_SHAPE, "data part %d: %s", i + 1,
                           same ? "its data and labels have different row counts"
                                : "its rows differ in dtype or shape from the first part's");
        }
        first[i + 1] = first[i] + xs[i].shape[0];
    }
    pd_tensor x = xs[0], y = ys[0];
    x.shape[0] = y.shape[0] = first[n];
    pd_status st = pd__data_init(d, &x, &y, batch, shuffle, seed);
    if (st != PD_OK) {
        PD_FREE(first);
        return st;
    }
    d->nparts = n;
    d->xp = xs;
    d->yp = ys;
    d->part_first = first;
    return PD_OK;
}

void pd__data_free(pd__data *d) {
    PD_FREE(d->perm);
    PD_FREE(d->part_first);
    d->perm = NULL;
    d->part_first = NULL;
}

/* row r's bytes in x (or y): its part's, found by bisection */
static const char *pd__data_at(const pd__data *d, bool labels, int64_t r, size_t row_bytes) {
    const pd_tensor *t = labels ? &d->y : &d->x;
    if (!d->xp) return (const char *)t->data + row_bytes * (size_t)r;
    int lo = 0, hi = d->nparts - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (d->part_first[mid] <= r) lo = mid;
        else hi = mid - 1;
    }
    const pd_tensor *p = labels ? &d->yp[lo] : &d->xp[lo];
    return (const char *)p->data + row_bytes * (size_t)(r - d->part_first[lo]);
}

int64_t pd__data_row(pd__data *d, int64_t p) {
    int64_t e = p / d->rows, i = p % d->rows;
    if (!d->shuffle) return i;
    if (e != d->perm_epoch) { /* Fisher-Yates from (seed, epoch) */
        uint64_t st = d->seed ^ (0xd1b54a32d192ed03ull * (uint64_t)(e + 1));
        for (int64_t k = 0; k < d->rows; k++) d->perm[k] = k;
        for (int64_t k = d->rows - 1; k > 0; k--) {
            int64_t j = (int64_t)(pd__splitmix(&st) % (uint64_t)(k + 1));
            int64_t t = d->perm[k];
            d->perm[k] = d->perm[j];
            d->perm[j] = t;
        }
        d->perm_epoch = e;
    }
    return d->perm[i];
}

pd_status pd__data_fill(pd__data *d, int64_t step, void *xb, void *yb) {
    size_t xr = (size_t)(pd_tensor_numel(&d->x) / d->rows) * pd_dtype_size(d->x.dtype);
    size_t yr = (size_t)(pd_tensor_numel(&d->y) / d->rows) * pd_dtype_size(d->y.dtype);
    for (int64_t j = 0; j < d->batch; j++) {
        int64_t r = pd__data_row(d, step * d->batch + j);
        memcpy((char *)xb + xr * (size_t)j, pd__data_at(d, false, r, xr), xr);
        memcpy((char *)yb + yr * (size_t)j, pd__data_at(d, true, r, yr), yr);
    }
    return PD_OK;
}

#define PD__SLOTS 4 /* batches the loader may run ahead */

struct pd__prefetch {
    pd__data *d;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    void *xb[PD__SLOTS], *yb[PD__SLOTS];
    int64_t ready[PD__SLOTS]; /* the step a slot holds, -1: empty */
    int64_t next_fill, next_take, last;
    bool stop;
};

static void *pd__prefetch_main(void *arg) {
    pd__prefetch *p = arg;
    pthread_mutex_lock(&p->mu);
    while (!p->stop && p->next_fill <= p->last) {
        int slot = (int)(p->next_fill % PD__SLOTS);
        while (!p->stop && p->ready[slot] >= 0) pthread_cond_wait(&p->cv, &p->mu);
        if (p->stop) break;
        int64_t k = p->next_fill;
        pthread_mutex_unlock(&p->mu);
        pd__data_fill(p->d, k, p->xb[slot], p->yb[slot]);
        pthread_mutex_lock(&p->mu);
        p->ready[slot] = k;
        p->next_fill++;
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

pd_status pd__prefetch_start(pd__data *d, int64_t first_step, int64_t last_step, pd__prefetch **out) {
    pd__prefetch *p = PD_CALLOC(1, sizeof *p);
    if (!p) return pd__err(PD_ERR_NOMEM, "out of memory for the data loader");
    p->d = d;
    size_t xs = (size_t)(pd_tensor_numel(&d->x) / d->rows) * pd_dtype_size(d->x.dtype) * (size_t)d->batch;
    size_t ys = (size_t)(pd_tensor_numel(&d->y) / d->rows) * pd_dtype_size(d->y.dtype) * (size_t)d->batch;
    for (int i = 0; i < PD__SLOTS; i++) {
        p->xb[i] = PD_MALLOC(xs ? xs : 1);
        p->yb[i] = PD_MALLOC(ys ? ys : 1);
        p->ready[i] = -1;
        if (!p->xb[i] || !p->yb[i]) {
            for (int k = 0; k <= i; k++) {
                PD_FREE(p->xb[k]);
                PD_FREE(p->yb[k]);
            }
            PD_FREE(p);
            return pd__err(PD_ERR_NOMEM, "out of memory for the data loader");
        }
    }
    p->next_fill = p->next_take = first_step;
    p->last = last_step;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    if (pthread_create(&p->thread, NULL, pd__prefetch_main, p) != 0) {
        pthread_mutex_destroy(&p->mu);
        pthread_cond_destroy(&p->cv);
        for (int k = 0; k < PD__SLOTS; k++) {
            PD_FREE(p->xb[k]);
            PD_FREE(p->yb[k]);
        }
        PD_FREE(p);
        return pd__err(PD_ERR_INTERNAL, "cannot start the data loader thread");
    }
    *out = p;
    return PD_OK;
}

static double pd__now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

pd_status pd__prefetch_next(pd__prefetch *p, const void **xb, const void **yb, double *waited) {
    double t0 = pd__now();
    pthread_mutex_lock(&p->mu);
    if (p->next_take > p->last) {
        pthread_mutex_unlock(&p->mu);
        return pd__err(PD_ERR_INVALID, "the data loader has no more batches");
    }
    /* the slot of the previous step is free again */
    int prev = (int)((p->next_take - 1) % PD__SLOTS);
    if (p->next_take > 0 && p->ready[prev] == p->next_take - 1) {
        p->ready[prev] = -1;
        pthread_cond_broadcast(&p->cv);
    }
    int slot = (int)(p->next_take % PD__SLOTS);
    while (p->ready[slot] != p->next_take) pthread_cond_wait(&p->cv, &p->mu);
    *xb = p->xb[slot];
    *yb = p->yb[slot];
    p->next_take++;
    pthread_mutex_unlock(&p->mu);
    if (waited) *waited = pd__now() - t0;
    return PD_OK;
}

void pd__prefetch_stop(pd__prefetch *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thread, NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    for (int k = 0; k < PD__SLOTS; k++) {
        PD_FREE(p->xb[k]);
        PD_FREE(p->yb[k]);
    }
    PD_FREE(p);
}
