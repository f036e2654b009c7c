/* sim.c - the simulated device: the CUDA API of cuda.h (PD_CUDA_API) on the
 * CPU, so that everything on the GPU path but the kernels and the library
 * calls runs, and is tested, on every machine (meson suite devsim).
 *
 * How it works: docs/INTERNALS.md, "runtime/cuda/sim.c".
 */
#include "cuda.h"
#include "dcache.h"
#include "../loss.h"
#include "../optim.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define PD_SIM_MAXDEV 8
#define PD_SIM_ARENA ((size_t)4 << 30) /* address space per device; pages are only used where written */
#define PD_SIM_ALIGN ((size_t)256)

/* ---- devices: arenas ------------------------------------------------------------------------------ */

typedef struct pd__sim_dev {
    char *dview; /* what callers hold: no access */
    char *wview; /* the streams' view: read-write */
    pthread_mutex_t mu;
    size_t top; /* bump pointer */
    /* blocks given back, reused by exact size */
    struct pd__sim_blk {
        size_t off, n;
    } * freed;
    int nfreed, capfreed;
} pd__sim_dev;

static pd__sim_dev pd__sim_devs[PD_SIM_MAXDEV];
static int pd__sim_ndev;
static int pd__sim_jitter_us; /* PDONNX_SIM_JITTER=US: each stream sleeps up to US microseconds before each task */

pd_status pd__sim_init(int ndev) {
    if (ndev < 1 || ndev > PD_SIM_MAXDEV)
        return pd__err(PD_ERR_INVALID, "device sim:%d: from 1 to %d simulated devices", ndev, PD_SIM_MAXDEV);
    for (int d = 0; d < ndev; d++) {
        pd__sim_dev *v = &pd__sim_devs[d];
        int fd = memfd_create("pdonnx-sim-device", MFD_CLOEXEC);
        if (fd < 0 || ftruncate(fd, (off_t)PD_SIM_ARENA) != 0) {
            if (fd >= 0) close(fd);
            return pd__err(PD_ERR_NOMEM, "simulated device %d: cannot create its memory (memfd_create)", d);
        }
        void *a = mmap(NULL, PD_SIM_ARENA, PROT_NONE, MAP_SHARED | MAP_NORESERVE, fd, 0);
        void *b = mmap(NULL, PD_SIM_ARENA, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
        close(fd);
        if (a == MAP_FAILED || b == MAP_FAILED) {
            if (a != MAP_FAILED) munmap(a, PD_SIM_ARENA);
            if (b != MAP_FAILED) munmap(b, PD_SIM_ARENA);
            return pd__err(PD_ERR_NOMEM, "simulated device %d: cannot map its memory", d);
        }
        v->dview = a;
        v->wview = b;
        v->top = PD_SIM_ALIGN; /* no block at offset 0 */
        pthread_mutex_init(&v->mu, NULL);
    }
    pd__sim_ndev = ndev;
    const char *j = getenv("PDONNX_SIM_JITTER");
    pd__sim_jitter_us = j ? atoi(j) : 0;
    if (pd__sim_jitter_us < 0 || pd__sim_jitter_us > 100000) pd__sim_jitter_us = 0;
    return PD_OK;
}

/* The device p points into, or -1 (a host pointer, NULL). */
static int pd__sim_dev_of(const void *p) {
    for (int d = 0; d < pd__sim_ndev; d++)
        if ((const char *)p >= pd__sim_devs[d].dview && (const char *)p < pd__sim_devs[d].dview + PD_SIM_ARENA)
            return d;
    return -1;
}

/* What a stream reads and writes for the address a caller holds. */
static void *pd__sim_w(const void *p) {
    int d = pd__sim_dev_of(p);
    return d < 0 ? (void *)p : pd__sim_devs[d].wview + ((const char *)p - pd__sim_devs[d].dview);
}

/* The arena's "cudaMalloc": a block of the device, or NULL when it is full. */
static void *pd__sim_malloc(int d, size_t bytes) {
    pd__sim_dev *v = &pd__sim_devs[d];
    size_t n = (bytes + PD_SIM_ALIGN - 1) / PD_SIM_ALIGN * PD_SIM_ALIGN;
    if (n == 0) n = PD_SIM_ALIGN;
    void *p = NULL;
    pthread_mutex_lock(&v->mu);
    for (int i = 0; i < v->nfreed; i++)
        if (v->freed[i].n == n) {
            p = v->dview + v->freed[i].off;
            v->freed[i] = v->freed[--v->nfreed];
            break;
        }
    if (!p && n <= PD_SIM_ARENA - v->top) {
        p = v->dview + v->top;
        v->top += n;
    }
    pthread_mutex_unlock(&v->mu);
    return p;
}

/* The arena's "cudaFree" of a block of `bytes` (as asked of pd__sim_malloc). */
static void pd__sim_mfree(void *p, size_t bytes) {
    int d = pd__sim_dev_of(p);
    if (d < 0) return;
    pd__sim_dev *v = &pd__sim_devs[d];
    size_t n = (bytes + PD_SIM_ALIGN - 1) / PD_SIM_ALIGN * PD_SIM_ALIGN;
    if (n == 0) n = PD_SIM_ALIGN;
    pthread_mutex_lock(&v->mu);
    if (v->nfreed == v->capfreed) {
        int cap = v->capfreed ? 2 * v->capfreed : 64;
        struct pd__sim_blk *q = realloc(v->freed, sizeof *q * (size_t)cap);
        if (q) {
            v->freed = q;
            v->capfreed = cap;
        }
    }
    if (v->nfreed < v->capfreed) v->freed[v->nfreed++] = (struct pd__sim_blk){(size_t)((char *)p - v->dview), n};
    pthread_mutex_unlock(&v->mu); /* (a block the list cannot hold stays used: address space, not memory) */
}

/* ---- streams ------------------------------------------------------------------------------------------ */

typedef struct pd__sim_task pd__sim_task;
typedef pd_status (*pd__sim_fn)(pd__cuda_ctx *c, pd__sim_task *t);

struct pd__sim_task {
    pd__sim_task *next;
    pd__sim_fn fn;
    /* what the task reads; the fields a kind does not use stay 0 */
    void *dst;
    const void *src;
    size_t bytes;
    const pd_graph *g;
    const pd__node *n;
    pd__exec x;
    int nt;
    pd_train_options o;
    int64_t t64, rows;
    double lr;
    float s;
    struct pd__sim_event *ev;
    void *p[4]; /* the optimizer's and the norm's slabs, in the stream's view */
    int64_t ticket;
    /* what it gives back (read by the caller after a sync) */
    double r_loss;
    int64_t r_correct, r_count;
    pd_status r_status;
    pd_tensor ts[]; /* tensors, by value, their data translated (nt of them); or the staged bytes */
};

typedef struct pd__sim_event {
    int device;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int64_t recorded, completed; /* records queued, and of them reached by their stream */
} pd__sim_event;

struct pd__cuda_ctx {
    int device;
    pd__cuda_precision precision;
    pd__dcache mem;
    bool (*pending)(void *arg);
    void *pending_arg;
    pthread_t worker;
    pthread_mutex_t mu;
    pthread_cond_t cv;   /* the queue changed, or a task finished */
    pd__sim_task *head, *tail;
    int64_t queued, done; /* tasks queued and run so far */
    bool quit;
    pd_status err;        /* the stream's first error since the last wait, */
    char why[512];        /* with its message */
    void *scratch;        /* the CPU kernels' scratch, the stream's own */
    size_t scratch_size;
    struct timespec t0, t1; /* the profiler's marks */
};

static void *pd__sim_run_stream(void *arg) {
    pd__cuda_ctx *c = arg;
    unsigned seed = (unsigned)(uintptr_t)c ^ 0x9e3779b9u;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->head && !c->quit) pthread_cond_wait(&c->cv, &c->mu);
        if (!c->head) break;
        pd__sim_task *t = c->head;
        pthread_mutex_unlock(&c->mu);
        sched_yield(); /* let the host thread run ahead, as it does of a GPU */
        if (pd__sim_jitter_us) /* streams at uneven speeds: an order missing an event shows */
            usleep((useconds_t)(rand_r(&seed) % (unsigned)pd__sim_jitter_us));
        pd_status s = t->fn(c, t);
        t->r_status = s;
        pthread_mutex_lock(&c->mu);
        if (s != PD_OK && c->err == PD_OK) {
            c->err = s;
            snprintf(c->why, sizeof c->why, "%s", pd_last_error());
        }
        c->head = t->next;
        if (!c->head) c->tail = NULL;
        c->done++;
        /* a task someone waits for a value of is freed by them */
        if (t->ticket >= 0) free(t);
        else t->ticket = -2; /* done */
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

static pd__sim_task *pd__sim_task_new(pd__sim_fn fn, int nt, size_t extra) {
    pd__sim_task *t = calloc(1, sizeof *t + sizeof(pd_tensor) * (size_t)nt + extra);
    if (!t) return NULL;
    t->fn = fn;
    t->nt = nt;
    return t;
}

/* Queues t; keep: the caller waits for it (pd__sim_wait_task) and frees it. */
static pd_status pd__sim_push(pd__cuda_ctx *c, pd__sim_task *t, bool keep) {
    if (!t) return pd__err(PD_ERR_NOMEM, "simulated device: out of host memory for a stream task");
    t->ticket = keep ? -1 : 0;
    pthread_mutex_lock(&c->mu);
    if (c->tail) c->tail->next = t;
    else c->head = t;
    c->tail = t;
    c->queued++;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return PD_OK;
}

/* Waits until the stream has run everything queued so far; its first error
 * since the last wait comes back, with its message. */
static pd_status pd__sim_wait(pd__cuda_ctx *c) {
    pthread_mutex_lock(&c->mu);
    int64_t target = c->queued;
    while (c->done < target) pthread_cond_wait(&c->cv, &c->mu);
    pd_status e = c->err;
    char why[sizeof c->why];
    memcpy(why, c->why, sizeof why);
    c->err = PD_OK;
    pthread_mutex_unlock(&c->mu);
    return e == PD_OK ? PD_OK : pd__err(e, "%s", why);
}

/* Waits for a kept task (and everything before it); its own status. */
static pd_status pd__sim_wait_task(pd__cuda_ctx *c, pd__sim_task *t) {
    pthread_mutex_lock(&c->mu);
    while (t->ticket != -2) pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
    return pd__sim_wait(c);
}

/* ---- contexts ----------------------------------------------------------------------------------------- */

static int sim_device_count(void) { return pd__sim_ndev; }

static pd_status sim_ctx_create(int device, pd__cuda_ctx **out) {
    if (!out) return pd__err(PD_ERR_INVALID, "pd__cuda_ctx_create: out is NULL");
    if (device < 0 || device >= pd__sim_ndev)
        return pd__err(PD_ERR_INVALID, "CUDA device %d does not exist (%d simulated device%s)", device, pd__sim_ndev,
                       pd__sim_ndev == 1 ? "" : "s");
    pd__cuda_ctx *c = calloc(1, sizeof *c);
    if (!c) return pd__err(PD_ERR_NOMEM, "cannot allocate a simulated device context");
    c->device = device;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    if (pthread_create(&c->worker, NULL, pd__sim_run_stream, c) != 0) {
        pthread_cond_destroy(&c->cv);
        pthread_mutex_destroy(&c->mu);
        free(c);
        return pd__err(PD_ERR_INTERNAL, "simulated device %d: cannot start its stream's thread", device);
    }
    *out = c;
    return PD_OK;
}

static void pd__sim_drop_block(void *ctx, void *p);

static void sim_ctx_destroy(pd__cuda_ctx *c) {
    if (!c) return;
    (void)pd__sim_wait(c);
    pthread_mutex_lock(&c->mu);
    c->quit = true;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->worker, NULL);
    pd__dcache_release(&c->mem, pd__sim_drop_block, NULL);
    free(c->scratch);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static void sim_set_precision(pd__cuda_ctx *c, pd__cuda_precision p) { c->precision = p; }
static pd__cuda_precision sim_get_precision(const pd__cuda_ctx *c) { return c->precision; }
static int sim_device(const pd__cuda_ctx *c) { return c ? c->device : -1; }
static pd_status sim_bind(pd__cuda_ctx *c) { return c ? PD_OK : pd__err(PD_ERR_INVALID, "pd__cuda_bind: no context"); }
static void *sim_stream(pd__cuda_ctx *c) { return c; }
static pd_status sim_sync(pd__cuda_ctx *c) { return pd__sim_wait(c); }

static pd_status pd__sim_mark(pd__cuda_ctx *c, pd__sim_task *t) {
    clock_gettime(CLOCK_MONOTONIC, t->bytes ? &c->t1 : &c->t0);
    return PD_OK;
}

static pd_status sim_timer_start(pd__cuda_ctx *c) { return pd__sim_push(c, pd__sim_task_new(pd__sim_mark, 0, 0), false); }

static pd_status sim_timer_stop(pd__cuda_ctx *c, double *ms) {
    pd__sim_task *t = pd__sim_task_new(pd__sim_mark, 0, 0);
    if (t) t->bytes = 1;
    PD_TRY(pd__sim_push(c, t, false));
    PD_TRY(pd__sim_wait(c));
    *ms = (double)(c->t1.tv_sec - c->t0.tv_sec) * 1e3 + (double)(c->t1.tv_nsec - c->t0.tv_nsec) / 1e6;
    return PD_OK;
}

static pd_status sim_host_alloc(size_t bytes, void **out) {
    *out = malloc(bytes ? bytes : 1);
    return *out ? PD_OK : pd__err(PD_ERR_NOMEM, "cannot allocate %zu bytes of host memory", bytes);
}
static void sim_host_free(void *p) { free(p); }

/* ---- the caching allocator over the arena ----------------------------------------------------------- */

static void sim_set_pending(pd__cuda_ctx *c, bool (*pending)(void *arg), void *arg) {
    c->pending = pending;
    c->pending_arg = arg;
}

static bool pd__sim_pending(pd__cuda_ctx *c) { return c->pending && c->pending(c->pending_arg); }

/* dcache hands blocks back without their size: the arena keeps it beside the block */
static void pd__sim_drop_block(void *ctx, void *p) {
    (void)ctx;
    size_t *hdr = pd__sim_w((char *)p - PD_SIM_ALIGN);
    pd__sim_mfree((char *)p - PD_SIM_ALIGN, *hdr);
}

static void *pd__sim_block(int d, size_t rounded) {
    char *p = pd__sim_malloc(d, rounded + PD_SIM_ALIGN);
    if (!p) return NULL;
    *(size_t *)pd__sim_w(p) = rounded + PD_SIM_ALIGN;
    return p + PD_SIM_ALIGN;
}

static pd_status sim_mem_trim(pd__cuda_ctx *c) {
    if (pd__sim_pending(c))
        return pd__err(PD_ERR_NOMEM, "CUDA: the %zu cached bytes are not given back while transfers to other "
                                     "processes are in flight (cudaFree would wait for them)",
                       c->mem.stats.cached);
    PD_TRY(pd__sim_wait(c));
    pd__dcache_drain(&c->mem, pd__sim_drop_block, NULL);
    return PD_OK;
}

static pd_status sim_alloc(pd__cuda_ctx *c, size_t bytes, void **out) {
    size_t rounded;
    int cls = pd__dcache_class(bytes, &rounded);
    if (cls >= PD_CU_NCLASS) return pd__err(PD_ERR_NOMEM, "device allocation of %zu bytes is too large", bytes);
    void *p = pd__dcache_take(&c->mem, cls);
    bool fresh = !p;
    if (fresh) {
        p = pd__sim_block(c->device, rounded);
        if (!p) {
            if (pd__sim_pending(c))
                return pd__err(PD_ERR_NOMEM,
                               "CUDA: out of device memory for %zu bytes; the %zu cached are not given back while "
                               "transfers to other processes are in flight (cudaFree would wait for them)",
                               bytes, c->mem.stats.cached);
            PD_TRY(sim_mem_trim(c));
            p = pd__sim_block(c->device, rounded);
        }
        if (!p)
            return pd__err(PD_ERR_NOMEM, "simulated device %d: out of device memory for %zu bytes", c->device, bytes);
    }
    if (!pd__dcache_track(&c->mem, p, cls, fresh)) {
        pd__sim_drop_block(NULL, p);
        return pd__err(PD_ERR_NOMEM, "cannot grow the device allocator's table");
    }
    *out = p;
    return PD_OK;
}

static void sim_free(pd__cuda_ctx *c, void *p) {
    if (!c || !p) return;
    if (pd__dcache_give(&c->mem, p) == 0) {
        (void)pd__sim_wait(c);
        pd__sim_drop_block(NULL, p);
    }
}

static void sim_mem_get_stats(const pd__cuda_ctx *c, pd__cuda_mem_stats *s) { *s = c->mem.stats; }

/* ---- copies ------------------------------------------------------------------------------------------- */

static pd_status pd__sim_copy_fn(pd__cuda_ctx *c, pd__sim_task *t) {
    (void)c;
    if (t->src) memmove(pd__sim_w(t->dst), pd__sim_w(t->src), t->bytes);
    else memset(pd__sim_w(t->dst), 0, t->bytes);
    return PD_OK;
}

static pd_status pd__sim_upload_fn(pd__cuda_ctx *c, pd__sim_task *t) {
    (void)c;
    memcpy(pd__sim_w(t->dst), (const char *)t->ts, t->bytes);
    return PD_OK;
}

/* A device address range: the whole of it on one simulated device. */
static pd_status pd__sim_check(const void *p, size_t bytes, const char *what) {
    int d = pd__sim_dev_of(p);
    if (d < 0 || (const char *)p + bytes > pd__sim_devs[d].dview + PD_SIM_ARENA)
        return pd__err(PD_ERR_INVALID, "simulated device: %s of %zu bytes at %p: not device memory", what, bytes, p);
    return PD_OK;
}

static pd_status sim_upload(pd__cuda_ctx *c, void *dst, const void *src, size_t bytes) {
    if (!bytes) return PD_OK;
    PD_TRY(pd__sim_check(dst, bytes, "an upload's destination"));
    if (pd__sim_dev_of(src) >= 0) return pd__err(PD_ERR_INVALID, "simulated device: an upload from device memory");
    pd__sim_task *t = pd__sim_task_new(pd__sim_upload_fn, 0, bytes); /* staged: src may change on return */
    if (t) {
        t->dst = dst;
        t->bytes = bytes;
        memcpy(t->ts, src, bytes);
    }
    return pd__sim_push(c, t, false);
}

static pd_status sim_download(pd__cuda_ctx *c, void *dst, const void *src, size_t bytes) {
    if (!bytes) return pd__sim_wait(c);
    PD_TRY(pd__sim_check(src, bytes, "a download's source"));
    if (pd__sim_dev_of(dst) >= 0) return pd__err(PD_ERR_INVALID, "simulated device: a download into device memory");
    pd__sim_task *t = pd__sim_task_new(pd__sim_copy_fn, 0, 0);
    if (t) {
        t->dst = dst;
        t->src = src;
        t->bytes = bytes;
    }
    PD_TRY(pd__sim_push(c, t, false));
    return pd__sim_wait(c);
}

static pd_status pd__sim_copy(pd__cuda_ctx *c, void *dst, const void *src, size_t bytes) {
    if (!bytes) return PD_OK;
    PD_TRY(pd__sim_check(dst, bytes, "a copy's destination"));
    if (src) PD_TRY(pd__sim_check(src, bytes, "a copy's source"));
    pd__sim_task *t = pd__sim_task_new(pd__sim_copy_fn, 0, 0);
    if (t) {
        t->dst = dst;
        t->src = src;
        t->bytes = bytes;
    }
    return pd__sim_push(c, t, false);
}

static pd_status sim_copy(pd__cuda_ctx *c, void *dst, const void *src, size_t bytes) {
    if (dst == src) return PD_OK;
    return pd__sim_copy(c, dst, src, bytes);
}

static pd_status sim_memset0(pd__cuda_ctx *c, void *dst, size_t bytes) { return pd__sim_copy(c, dst, NULL, bytes); }

static pd_status sim_copy_peer(pd__cuda_ctx *c, void *dst, int ddev, const void *src, int sdev, size_t bytes) {
    if (!bytes) return PD_OK;
    if (pd__sim_dev_of(dst) != ddev || pd__sim_dev_of(src) != sdev)
        return pd__err(PD_ERR_INVALID, "simulated device: a peer copy from device %d to %d names memory of devices %d "
                                       "and %d",
                       sdev, ddev, pd__sim_dev_of(src), pd__sim_dev_of(dst));
    return pd__sim_copy(c, dst, src, bytes);
}

static pd_status sim_malloc_on(int device, size_t bytes, void **out) {
    if (device < 0 || device >= pd__sim_ndev) return pd__err(PD_ERR_INVALID, "CUDA device %d does not exist", device);
    void *p = pd__sim_block(device, bytes ? bytes : 1);
    if (!p) return pd__err(PD_ERR_NOMEM, "simulated device %d: out of device memory for %zu bytes", device, bytes);
    *out = p;
    return PD_OK;
}

static void sim_free_on(int device, void *p) {
    (void)device;
    if (p) pd__sim_drop_block(NULL, p);
}

/* ---- events ------------------------------------------------------------------------------------------- */

static pd_status sim_event_create(int device, void **out) {
    if (device < 0 || device >= pd__sim_ndev) return pd__err(PD_ERR_INVALID, "CUDA device %d does not exist", device);
    pd__sim_event *e = calloc(1, sizeof *e);
    if (!e) return pd__err(PD_ERR_NOMEM, "cannot allocate an event");
    e->device = device;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    *out = e;
    return PD_OK;
}

static void sim_event_destroy(void *ev) {
    pd__sim_event *e = ev;
    if (!e) return;
    pthread_mutex_lock(&e->mu); /* a record still queued completes first */
    while (e->completed < e->recorded) pthread_cond_wait(&e->cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

static pd_status pd__sim_record_fn(pd__cuda_ctx *c, pd__sim_task *t) {
    (void)c;
    pd__sim_event *e = t->ev;
    pthread_mutex_lock(&e->mu);
    if (t->t64 > e->completed) e->completed = t->t64;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return PD_OK;
}

static pd_status pd__sim_wait_fn(pd__cuda_ctx *c, pd__sim_task *t) {
    (void)c;
    pd__sim_event *e = t->ev;
    pthread_mutex_lock(&e->mu);
    while (e->completed < t->t64) pthread_cond_wait(&e->cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
    return PD_OK;
}

static pd_status sim_event_record(pd__cuda_ctx *c, void *ev) {
    pd__sim_event *e = ev;
    pd__sim_task *t = pd__sim_task_new(pd__sim_record_fn, 0, 0);
    if (!t) return pd__err(PD_ERR_NOMEM, "simulated device: out of host memory for a stream task");
    t->ev = e;
    pthread_mutex_lock(&e->mu);
    t->t64 = ++e->recorded;
    pthread_mutex_unlock(&e->mu);
    return pd__sim_push(c, t, false);
}

static pd_status sim_event_wait(pd__cuda_ctx *c, void *ev) {
    pd__sim_event *e = ev;
    pthread_mutex_lock(&e->mu);
    int64_t last = e->recorded; /* the last record so far; none: no wait */
    pthread_mutex_unlock(&e->mu);
    if (last == 0) return PD_OK;
    pd__sim_task *t = pd__sim_task_new(pd__sim_wait_fn, 0, 0);
    if (t) {
        t->ev = e;
        t->t64 = last;
    }
    return pd__sim_push(c, t, false);
}

/* ---- tensors ------------------------------------------------------------------------------------------ */

static pd_status sim_tensor_upload(pd__cuda_ctx *c, const pd_tensor *host, pd_tensor *dev) {
    size_t bytes = (size_t)pd_tensor_numel(host) * pd_dtype_size(host->dtype);
    void *p;
    PD_TRY(sim_alloc(c, bytes, &p));
    pd_status s = sim_upload(c, p, host->data, bytes);
    if (s != PD_OK) {
        sim_free(c, p);
        return s;
    }
    *dev = *host;
    dev->data = p;
    return PD_OK;
}

static pd_status sim_tensor_zeros(pd__cuda_ctx *c, pd_dtype dt, int ndim, const int64_t *shape, pd_tensor *dev) {
    pd_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = dt;
    t.ndim = ndim;
    for (int i = 0; i < ndim; i++) t.shape[i] = shape[i];
    size_t bytes = (size_t)pd_tensor_numel(&t) * pd_dtype_size(dt);
    PD_TRY(sim_alloc(c, bytes, &t.data));
    pd_status s = sim_memset0(c, t.data, bytes);
    if (s != PD_OK) {
        sim_free(c, t.data);
        return s;
    }
    *dev = t;
    return PD_OK;
}

static pd_status sim_tensor_download(pd__cuda_ctx *c, const pd_tensor *dev, void *host) {
    return sim_download(c, host, dev->data, (size_t)pd_tensor_numel(dev) * pd_dtype_size(dev->dtype));
}

static void sim_tensor_free(pd__cuda_ctx *c, pd_tensor *dev) {
    if (!dev) return;
    sim_free(c, dev->data);
    dev->data = NULL;
}

/* ---- ops ---------------------------------------------------------------------------------------------- */

/* The CUDA module's rule (runtime/cuda/ops.c) without its kernel table:
 * every op the CPU backend runs, with float32 outputs and float32 or index
 * inputs; the rest stays on the CPU backend. */
static bool sim_supports_op(const pd_graph *g, const pd__node *n) {
    if (!n || n->op < 0 || n->op >= PD_OP_COUNT || !pd__cpu_kernels[n->op]) return false;
    if (!g) return true;
    for (int i = 0; i < n->nin; i++) {
        if (n->in[i] < 0) continue;
        const pd__tensor *t = &g->tensors[n->in[i]];
        if (t->dtype != PD_FLOAT && t->dtype != PD_INT64 && t->dtype != PD_INT32) return false;
    }
    for (int j = 0; j < n->nout; j++)
        if (n->out[j] >= 0 && g->tensors[n->out[j]].dtype != PD_FLOAT) return false;
    return true;
}

/* every op, with its CPU kernels: forward, and backward where it has one */
static int sim_op_kernels(int op) {
    if (op < 0 || op >= PD_OP_COUNT) return 0;
    return 1 | (pd__ops[op].grad ? 2 : 0);
}

static pd_status pd__sim_node_fn(pd__cuda_ctx *c, pd__sim_task *t) {
    const pd__node *n = t->n;
    if (t->x.scratch_size > c->scratch_size) {
        void *p = realloc(c->scratch, t->x.scratch_size);
        if (!p) return pd__err(PD_ERR_NOMEM, "simulated device: out of host memory for the kernels' scratch");
        c->scratch = p;
        c->scratch_size = t->x.scratch_size;
    }
    t->x.scratch = c->scratch;
    pd_tensor **ptr = (pd_tensor **)((char *)t->ts + sizeof(pd_tensor) * (size_t)t->nt);
    for (int i = 0; i < t->nt; i++) ptr[i] = t->p[0] && !((const bool *)t->p[0])[i] ? NULL : &t->ts[i];
    pd_status st = !t->bytes ? pd__cpu_run(&t->x, t->g, n, ptr, ptr + n->nin)
                             : pd__cpu_run_bwd(&t->x, t->g, n, ptr, ptr + n->nin, ptr + n->nin + n->nout,
                                               ptr + n->nin + 2 * n->nout);
    /* a kernel that needed more scratch (pd__scratch) freed the stream's and made a larger one: the stream's now */
    c->scratch = t->x.scratch;
    c->scratch_size = t->x.scratch_size;
    return st;
}

/* A node's call queued: its tensors copied by value (a missing one stays
 * NULL), their data translated to the stream's view. Behind the tensors:
 * their pointer table, then which are present. */
static pd_status pd__sim_node(pd__cuda_ctx *c, const pd__exec *x, const pd_graph *g, const pd__node *n,
                              pd_tensor *const *lists[4], const int counts[4], bool bwd) {
    int nt = counts[0] + counts[1] + counts[2] + counts[3];
    pd__sim_task *t = pd__sim_task_new(pd__sim_node_fn, nt, (sizeof(pd_tensor *) + sizeof(bool)) * (size_t)nt);
    if (!t) return pd__err(PD_ERR_NOMEM, "simulated device: out of host memory for a stream task");
    bool *have = (bool *)((char *)t->ts + (sizeof(pd_tensor) + sizeof(pd_tensor *)) * (size_t)nt);
    t->g = g;
    t->n = n;
    t->x = *x;
    t->x.g = g;
    t->bytes = bwd;
    t->p[0] = have;
    int k = 0;
    for (int l = 0; l < 4; l++)
        for (int i = 0; i < counts[l]; i++, k++) {
            const pd_tensor *src = lists[l] ? lists[l][i] : NULL;
            have[k] = src != NULL;
            if (src) {
                t->ts[k] = *src;
                t->ts[k].data = pd__sim_w(src->data);
            }
        }
    return pd__sim_push(c, t, false);
}

static pd_status sim_run(pd__cuda_ctx *c, const pd__exec *x, const pd_graph *g, const pd__node *n,
                         pd_tensor *const *in, pd_tensor *const *out) {
    if (!sim_supports_op(g, n))
        return pd__err(PD_ERR_UNSUPPORTED, "%s: node '%s' (%s): no simulated-device kernel for this form",
                       g && g->path ? g->path : "<graph>", n->name, n->op_type);
    pd_tensor *const *lists[4] = {in, out, NULL, NULL};
    int counts[4] = {n->nin, n->nout, 0, 0};
    return pd__sim_node(c, x, g, n, lists, counts, false);
}

static pd_status sim_run_bwd(pd__cuda_ctx *c, const pd__exec *x, const pd_graph *g, const pd__node *n,
                             pd_tensor *const *in, pd_tensor *const *out, pd_tensor *const *dout,
                             pd_tensor *const *din) {
    if (!sim_supports_op(g, n) || !pd__cpu_grads[n->op])
        return pd__err(PD_ERR_UNSUPPORTED, "%s: node '%s' (%s): no simulated-device backward for this form",
                       g && g->path ? g->path : "<graph>", n->name, n->op_type);
    pd_tensor *const *lists[4] = {in, out, dout, din};
    int counts[4] = {n->nin, n->nout, n->nout, n->nin};
    return pd__sim_node(c, x, g, n, lists, counts, true);
}

/* ---- optimizer, norms and loss ----------------------------------------------------------------------- */

static pd_status pd__sim_optim_fn(pd__cuda_ctx *c, pd__sim_task *t) {
    (void)c;
    pd__optim_step(&t->o, t->t64, t->lr, t->p[0], t->p[1], t->p[2], t->p[3], t->rows);
    return PD_OK;
}

static pd_status sim_optim_step(pd__cuda_ctx *c, const pd_train_options *o, int64_t t, double lr, float *w,
                                const float *g, float *s0, float *s1, int64_t n) {
    if (n <= 0) return PD_OK;
    pd__sim_task *k = pd__sim_task_new(pd__sim_optim_fn, 0, 0);
    if (k) {
        k->o = *o;
        k->o.freeze = NULL; /* (the caller's strings need not outlive the call; the step reads none) */
        k->t64 = t;
        k->lr = lr;
        k->p[0] = pd__sim_w(w);
        k->p[1] = pd__sim_w(g);
        k->p[2] = pd__sim_w(s0);
        k->p[3] = pd__sim_w(s1);
        k->rows = n;
    }
    return pd__sim_push(c, k, false);
}

static pd_status pd__sim_sumsq_fn(pd__cuda_ctx *c, pd__sim_task *t) {
    (void)c;
    t->r_loss = pd__sq_sum(t->p[0], t->rows);
    return PD_OK;
}

static pd_status sim_sumsq(pd__cuda_ctx *c, const float *g, int64_t n, double *sq) {
    pd__sim_task *t = pd__sim_task_new(pd__sim_sumsq_fn, 0, 0);
    if (t) {
        t->p[0] = pd__sim_w(g);
        t->rows = n;
    }
    PD_TRY(pd__sim_push(c, t, true));
    pd_status s = pd__sim_wait_task(c, t);
    if (s == PD_OK) *sq = t->r_loss;
    free(t);
    return s;
}

static pd_status pd__sim_scale_fn(pd__cuda_ctx *c, pd__sim_task *t) {
    (void)c;
    float *g = t->p[0];
    for (int64_t i = 0; i < t->rows; i++) g[i] *= t->s;
    return PD_OK;
}

static pd_status sim_scale(pd__cuda_ctx *c, float *g, int64_t n, float s) {
    pd__sim_task *t = pd__sim_task_new(pd__sim_scale_fn, 0, 0);
    if (t) {
        t->p[0] = pd__sim_w(g);
        t->rows = n;
        t->s = s;
    }
    return pd__sim_push(c, t, false);
}

static pd_status pd__sim_loss_fn(pd__cuda_ctx *c, pd__sim_task *t) {
    (void)c;
    return pd__loss_cross_entropy(&t->ts[0], &t->ts[1], t->rows, t->p[0], &t->r_loss, &t->r_correct, &t->r_count);
}

static pd_status sim_loss_cross_entropy(pd__cuda_ctx *c, const pd_tensor *logits, const pd_tensor *labels,
                                        int64_t rows, float *dlogits, double *loss, int64_t *correct,
                                        int64_t *count) {
    pd__sim_task *t = pd__sim_task_new(pd__sim_loss_fn, 2, 0);
    if (t) {
        t->ts[0] = *logits;
        t->ts[0].data = pd__sim_w(logits->data);
        t->ts[1] = *labels;
        t->ts[1].data = pd__sim_w(labels->data);
        t->rows = rows;
        t->p[0] = pd__sim_w(dlogits);
    }
    PD_TRY(pd__sim_push(c, t, true));
    pd_status s = pd__sim_wait_task(c, t);
    if (s == PD_OK) {
        *loss = t->r_loss;
        if (correct) *correct = t->r_correct;
        if (count) *count = t->r_count;
    }
    free(t);
    return s;
}

/* ---- NCCL: none ------------------------------------------------------------------------------------- */

static pd_status sim_nccl_transport_create(int nthreads, const int *rank_of, const int *worker_of, int nworkers,
                                           int nlinks, int color, int device, void *stream,
                                           struct pd__transport *watch, struct pd__transport **out) {
    (void)nthreads, (void)rank_of, (void)worker_of, (void)nworkers, (void)nlinks, (void)color, (void)device;
    (void)stream, (void)watch, (void)out;
    return pd__err(PD_ERR_UNSUPPORTED, "the simulated device (sim) has no NCCL transport: GPU stages in "
                                       "several processes need real GPUs");
}
static pd_status sim_nccl_sync(struct pd__transport *t) {
    (void)t;
    return pd__err(PD_ERR_UNSUPPORTED, "the simulated device (sim) has no NCCL transport");
}
static bool sim_nccl_pending(void *t) {
    (void)t;
    return false;
}
static int sim_nccl_devices(void) { return 0; }

/* ---- the table the loader hands out -------------------------------------------------------------------- */

#define PD__SIM_ENTRY(ret, name, params, args, fallback) sim_##name,
#define PD__SIM_ENTRY_V(name, params, args) sim_##name,
/* in libpipedream itself: nothing to bind */
static void sim_bind_host(const struct pd__cuda_host *host) { (void)host; }
const pd__cuda_api pd__sim_api = {sizeof(pd__cuda_api), PD_VERSION_STRING, PD_CUDA_API_SIGNATURE, sim_bind_host,
                                  PD_CUDA_API(PD__SIM_ENTRY, PD__SIM_ENTRY_V)};
