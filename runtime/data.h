/* data.h - minibatches from in-memory arrays, and a prefetching thread
 * (runtime/data.c). */
#ifndef PD_DATA_H
#define PD_DATA_H

#include "../core/pd_internal.h"

/* A .npy file's data mapped instead of read (runtime/npy.c): out->data points
 * into the mapping; pd__npy_unmap, not pd_tensor_free. When the file cannot be
 * mapped it is read (m->base NULL: free out with pd_tensor_free). */
typedef struct pd__map {
    void *base;
    size_t len;
} pd__map;
pd_status pd__npy_map(const char *path, pd_tensor *out, pd__map *m);
void pd__npy_unmap(pd__map *m);

/* Samples are rows of x and y (first axis). Step k (0-based) takes stream
 * positions p = k*batch + j, j in [0, batch); position p is row p mod rows
 * without shuffling, and row perm_e[p mod rows] with it, perm_e being a
 * permutation drawn from (seed, e) for epoch e = p / rows. So every row is
 * seen once per epoch, batches run across epoch ends, and where the stream
 * stands is one number (the step): a resumable iterator. */
typedef struct pd__data {
    pd_tensor x, y;      /* not owned; with parts, the first part's (shape[0]: every part's rows) */
    int nparts;          /* the data in shards, in order (pd__data_init_parts), else 1 */
    const pd_tensor *xp, *yp; /* the parts (not owned; NULL: x and y alone) */
    int64_t *part_first; /* part p's first row in the stream of rows; [nparts] = rows */
    int64_t rows, batch;
    bool shuffle;
    uint64_t seed;
    int64_t *perm;       /* the current epoch's permutation (shuffle only) */
    int64_t perm_epoch;
} pd__data;

pd_status pd__data_init(pd__data *d, const pd_tensor *x, const pd_tensor *y, int64_t batch, bool shuffle,
                        uint64_t seed);
/* The same over n shards read in order: xs[i] and ys[i] have equal rows,
 * and every xs (ys) the same dtype and row shape. Keeps the arrays. */
pd_status pd__data_init_parts(pd__data *d, int n, const pd_tensor *xs, const pd_tensor *ys, int64_t batch,
                              bool shuffle, uint64_t seed);
void pd__data_free(pd__data *d);
/* Copies the rows of step k into xb ([batch, ...] of x's dtype) and yb. */
pd_status pd__data_fill(pd__data *d, int64_t step, void *xb, void *yb);
/* The row at stream position p. */
int64_t pd__data_row(pd__data *d, int64_t p);

/* A background thread keeps the next batches ready (a ring of a few buffers). */
typedef struct pd__prefetch pd__prefetch;
pd_status pd__prefetch_start(pd__data *d, int64_t first_step, int64_t last_step, pd__prefetch **out);
/* The next step's batch; valid until the following call. *waited: seconds the
 * caller waited for it (the data stall). */
pd_status pd__prefetch_next(pd__prefetch *p, const void **xb, const void **yb, double *waited);
void pd__prefetch_stop(pd__prefetch *p);

#endif
