/* nccl.c - the NCCL transport (nccl.h): device buffers between the
 * pipeline's processes with ncclSend/ncclRecv on a stream per link and
 * direction, replicated stages' gradients summed with ncclAllReduce in a
 * communicator of their own; communicators bootstrapped over MPI. The
 * pipeline's GPU stages use it between processes (docs/DISTRIBUTED.md,
 * "NCCL"). One thread per process calls it (as the MPI transport). */
#include "nccl.h"

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>
#include <stdio.h>
#include <string.h>

#define PD_CUDA_TRY(call)                                                                                     \
    do {                                                                                                      \
        cudaError_t e_ = (call);                                                                              \
        if (e_ != cudaSuccess)                                                                                \
            return pd__err(PD_ERR_IO, "CUDA: %s (%s:%d): %s", #call, __FILE__, __LINE__, cudaGetErrorString(e_)); \
    } while (0)
#define PD_NCCL_TRY(call)                                                                                     \
    do {                                                                                                      \
        ncclResult_t r_ = (call);                                                                             \
        if (r_ != ncclSuccess)                                                                                \
            return pd__err(PD_ERR_IO, "NCCL: %s (%s:%d): %s", #call, __FILE__, __LINE__, ncclGetErrorString(r_)); \
    } while (0)
#define PD_MPI_OK(call, what)                                                           \
    do {                                                                                \
        if ((call) != MPI_SUCCESS) return pd__err(PD_ERR_IO, "MPI: %s failed (%s:%d)", what, __FILE__, __LINE__); \
    } while (0)

/* A device buffer of a link and direction: in use (handed out), or free
 * once its event (the last send or the last reader) has completed. */
typedef struct pd__dbuf {
    void *p;
    size_t cap;
    cudaEvent_t ev;
    bool used;
} pd__dbuf;

typedef struct pd__dpool {
    pd__dbuf *b;
    int n, cap;
} pd__dpool;

typedef struct pd__ncx {
    pd__transport base;
    MPI_Comm mcomm;          /* the pipeline's processes (bootstrap) */
    ncclComm_t comm;         /* all of them */
    ncclComm_t *chan;        /* per link and direction */
    cudaStream_t *cs;        /* per link and direction: its sends and receives */
    ncclComm_t *group;       /* per worker: its replicas' processes (NULL where this one is not) */
    cudaStream_t stream;     /* compute */
    int nthreads, nlinks, nworkers, device;
    int *rank_of;
    pd__dpool *pool;         /* per link and direction */
} pd__ncx;

int pd__nccl_devices(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
    return n;
}

static pd__dbuf *pd__dfind(pd__ncx *x, int l, int dir, const void *p) {
    pd__dpool *q = &x->pool[l * 2 + dir];
    for (int i = 0; i < q->n; i++)
        if (q->b[i].p == p) return &q->b[i];
    return NULL;
}

static void *pd__nc_get(pd__transport *t, int l, int dir, size_t n) {
    pd__ncx *x = (pd__ncx *)t;
    pd__dpool *q = &x->pool[l * 2 + dir];
    for (int i = 0; i < q->n; i++)
        if (!q->b[i].used && q->b[i].cap >= n && cudaEventQuery(q->b[i].ev) == cudaSuccess) {
            q->b[i].used = true;
            return q->b[i].p;
        }
    if (q->n == q->cap) {
        int cap = q->cap ? 2 * q->cap : 8;
        pd__dbuf *nb = PD_REALLOC(q->b, sizeof *nb * (size_t)cap);
        if (!nb) return NULL;
        q->b = nb;
        q->cap = cap;
    }
    pd__dbuf *b = &q->b[q->n];
    memset(b, 0, sizeof *b);
    if (cudaMalloc(&b->p, n ? n : 1) != cudaSuccess) return NULL;
    if (cudaEventCreateWithFlags(&b->ev, cudaEventDisableTiming) != cudaSuccess) {
        cudaFree(b->p);
        return NULL;
    }
    b->cap = n ? n : 1;
    b->used = true;
    q->n++;
    return b->p;
}

/* The buffer is free again once the work now on stream s (its last use) is done. */
static pd_status pd__dgive(pd__ncx *x, int l, int dir, void *p, cudaStream_t s) {
    pd__dbuf *b = pd__dfind(x, l, dir, p);
    if (!b) return pd__err(PD_ERR_INTERNAL, "NCCL: a buffer of link %d not from its pool", l);
    PD_CUDA_TRY(cudaEventRecord(b->ev, s));
    b->used = false;
    return PD_OK;
}

static void pd__nc_put(pd__transport *t, int l, int dir, void *buf) {
    pd__ncx *x = (pd__ncx *)t;
    (void)pd__dgive(x, l, dir, buf, x->stream); /* the readers on the compute stream */
}

/* The link's stream waits for what the compute stream has enqueued so far. */
static pd_status pd__after_compute(pd__ncx *x, cudaStream_t s) {
    cudaEvent_t ev;
    PD_CUDA_TRY(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    cudaError_t e = cudaEventRecord(ev, x->stream);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(s, ev, 0);
    cudaEventDestroy(ev); /* released once the wait is satisfied */
    if (e != cudaSuccess) return pd__err(PD_ERR_IO, "CUDA: ordering a transfer after compute: %s", cudaGetErrorString(e));
    return PD_OK;
}

static pd_status pd__nc_send(pd__transport *t, int from, int to, int l, int dir, int mb, void *buf, size_t n,
                             bool *stop) {
    (void)from, (void)stop;
    pd__ncx *x = (pd__ncx *)t;
    cudaStream_t s = x->cs[l * 2 + dir];
    PD_TRY(pd__after_compute(x, s));
    ncclResult_t r = ncclSend(buf, n, ncclChar, x->rank_of[to], x->chan[l * 2 + dir], s);
    pd_status st = pd__dgive(x, l, dir, buf, s);
    if (r != ncclSuccess)
        return pd__err(PD_ERR_IO, "NCCL: sending the %s of microbatch %d to rank %d: %s",
                       dir ? "gradients" : "activations", mb, x->rank_of[to], ncclGetErrorString(r));
    return st;
}

static pd_status pd__nc_recv(pd__transport *t, int from, int to, int l, int dir, int mb, size_t n, void **buf,
                             bool *stop) {
    (void)to, (void)stop;
    pd__ncx *x = (pd__ncx *)t;
    cudaStream_t s = x->cs[l * 2 + dir];
    void *b = pd__nc_get(t, l, dir, n);
    if (!b) return pd__err(PD_ERR_NOMEM, "NCCL: no device memory for a %zu-byte message", n);
    /* the buffer's last reader (compute) is done before NCCL writes it: get checked its event */
    ncclResult_t r = ncclRecv(b, n, ncclChar, x->rank_of[from], x->chan[l * 2 + dir], s);
    if (r != ncclSuccess) {
        pd__dgive(x, l, dir, b, s);
        return pd__err(PD_ERR_IO, "NCCL: receiving the %s of microbatch %d from rank %d: %s",
                       dir ? "gradients" : "activations", mb, x->rank_of[from], ncclGetErrorString(r));
    }
    cudaEvent_t ev; /* compute waits for the receive */
    PD_CUDA_TRY(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    cudaError_t e = cudaEventRecord(ev, s);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(x->stream, ev, 0);
    cudaEventDestroy(ev);
    if (e != cudaSuccess) return pd__err(PD_ERR_IO, "CUDA: ordering compute after a receive: %s", cudaGetErrorString(e));
    *buf = b;
    return PD_OK;
}

static pd_status pd__nc_allreduce(pd__transport *t, int g, void *data, int64_t n, bool f64) {
    pd__ncx *x = (pd__ncx *)t;
    ncclComm_t c = g < 0 ? x->comm : x->group[g];
    if (!c) return PD_OK; /* not one of worker g's replicas */
    PD_NCCL_TRY(ncclAllReduce(data, data, (size_t)n, f64 ? ncclDouble : ncclFloat, ncclSum, c, x->stream));
    return PD_OK;
}

/* In stream order already: started is enough, the compute stream's next
 * kernels (the update) come after the sum. */
static pd_status pd__nc_wait_all(pd__transport *t) {
    (void)t;
    return PD_OK;
}

pd_status pd__nccl_sync(pd__transport *t) {
    PD_CUDA_TRY(cudaStreamSynchronize(((pd__ncx *)t)->stream));
    return PD_OK;
}

static pd_status pd__nc_flush(pd__transport *t) {
    pd__ncx *x = (pd__ncx *)t;
    for (int i = 0; i < 2 * x->nlinks; i++) PD_CUDA_TRY(cudaStreamSynchronize(x->cs[i]));
    PD_CUDA_TRY(cudaStreamSynchronize(x->stream));
    return PD_OK;
}

static void pd__nc_destroy(pd__transport *t) {
    pd__ncx *x = (pd__ncx *)t;
    if (!x) return;
    if (x->cs) pd__nc_flush(t);
    for (int i = 0; x->pool && i < 2 * x->nlinks; i++) {
        for (int k = 0; k < x->pool[i].n; k++) {
            cudaFree(x->pool[i].b[k].p);
            cudaEventDestroy(x->pool[i].b[k].ev);
        }
        PD_FREE(x->pool[i].b);
    }
    PD_FREE(x->pool);
    for (int i = 0; x->chan && i < 2 * x->nlinks; i++)
        if (x->chan[i]) ncclCommDestroy(x->chan[i]);
    for (int i = 0; x->cs && i < 2 * x->nlinks; i++)
        if (x->cs[i]) cudaStreamDestroy(x->cs[i]);
    for (int w = 0; x->group && w < x->nworkers; w++)
        if (x->group[w]) ncclCommDestroy(x->group[w]);
    if (x->comm) ncclCommDestroy(x->comm);
    if (x->mcomm != MPI_COMM_NULL) MPI_Comm_free(&x->mcomm);
    PD_FREE(x->chan);
    PD_FREE(x->cs);
    PD_FREE(x->group);
    PD_FREE(x->rank_of);
    PD_FREE(x);
}

static const pd__transport_i pd__nccl_vt = {"nccl",        pd__nc_get,   pd__nc_send,    pd__nc_recv, pd__nc_put,
                                            pd__nc_allreduce, pd__nc_flush, pd__nc_destroy, NULL,
                                            pd__nc_allreduce, pd__nc_wait_all};

/* Everything collective, in the same order on every process. */
static pd_status pd__nc_setup(pd__ncx *x, const int *worker_of, int color) {
    int world_me, me, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_me);
    PD_MPI_OK(MPI_Comm_split(MPI_COMM_WORLD, color, world_me, &x->mcomm), "splitting the pipeline's processes");
    MPI_Comm_rank(x->mcomm, &me);
    MPI_Comm_size(x->mcomm, &n);
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    pd_status st = PD_OK;
    cudaError_t e = cudaSetDevice(x->device);
    if (e != cudaSuccess)
        st = pd__err(PD_ERR_IO, "CUDA: rank %d: device %d: %s", me, x->device, cudaGetErrorString(e));
    if (st == PD_OK && me == 0) {
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess) st = pd__err(PD_ERR_IO, "NCCL: ncclGetUniqueId: %s", ncclGetErrorString(r));
    }
    /* one process's failure here must not leave the others in ncclCommInitRank */
    int bad = st != PD_OK ? me : n, low = n;
    PD_MPI_OK(MPI_Allreduce(&bad, &low, 1, MPI_INT, MPI_MIN, x->mcomm), "agreeing on the NCCL set-up");
    if (low < n) return st != PD_OK ? st : pd__err(PD_ERR_IO, "NCCL: rank %d of the pipeline could not set up", low);
    PD_MPI_OK(MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, x->mcomm), "broadcasting the NCCL id");
    PD_NCCL_TRY(ncclCommInitRank(&x->comm, n, id, me));
    for (int i = 0; i < 2 * x->nlinks; i++) {
        PD_NCCL_TRY(ncclCommSplit(x->comm, 0, me, &x->chan[i], NULL)); /* a copy per link and direction */
        PD_CUDA_TRY(cudaStreamCreateWithFlags(&x->cs[i], cudaStreamNonBlocking));
    }
    for (int w = 0; w < x->nworkers; w++) {
        int mine = 0, members = 0;
        for (int i = 0; i < x->nthreads; i++)
            if (worker_of[i] == w) members++, mine |= x->rank_of[i] == me;
        PD_NCCL_TRY(ncclCommSplit(x->comm, mine && members > 1 ? w : NCCL_SPLIT_NOCOLOR, me, &x->group[w], NULL));
    }
    return PD_OK;
}

pd_status pd__nccl_transport_create(int nthreads, const int *rank_of, const int *worker_of, int nworkers, int nlinks,
                                    int color, int device, void *stream, pd__transport **out) {
    PD_TRY(pd__mpi_use());
    pd__ncx *x = PD_CALLOC(1, sizeof *x);
    if (!x) return pd__err(PD_ERR_NOMEM, "out of memory");
    x->base.vt = &pd__nccl_vt;
    x->mcomm = MPI_COMM_NULL;
    x->stream = (cudaStream_t)stream;
    x->nthreads = nthreads;
    x->nlinks = nlinks > 0 ? nlinks : 1;
    x->nworkers = nworkers;
    x->device = device;
    x->rank_of = PD_MALLOC(sizeof(int) * (size_t)nthreads);
    x->pool = PD_CALLOC(2 * (size_t)x->nlinks, sizeof *x->pool);
    x->chan = PD_CALLOC(2 * (size_t)x->nlinks, sizeof *x->chan);
    x->cs = PD_CALLOC(2 * (size_t)x->nlinks, sizeof *x->cs);
    x->group = PD_CALLOC((size_t)nworkers + 1, sizeof *x->group);
    if (!x->rank_of || !x->pool || !x->chan || !x->cs || !x->group) {
        pd__nc_destroy(&x->base);
        return pd__err(PD_ERR_NOMEM, "out of memory");
    }
    memcpy(x->rank_of, rank_of, sizeof(int) * (size_t)nthreads);
    pd_status st = pd__nc_setup(x, worker_of, color);
    if (st != PD_OK) {
        pd__nc_destroy(&x->base);
        return st;
    }
    *out = &x->base;
    return PD_OK;
}
