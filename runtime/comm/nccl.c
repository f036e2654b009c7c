/* nccl.c - the NCCL transport (nccl.h): device buffers between the
 * pipeline's processes with ncclSend/ncclRecv on a stream per link and
 * direction, replicated stages' gradients summed with ncclAllReduce in a
 * communicator of their own; communicators bootstrapped over MPI. The
 * pipeline's GPU stages use it between processes (docs/DISTRIBUTED.md,
 * "NCCL"). One thread per process calls it (as the MPI transport).
 *
 * How it works: docs/INTERNALS.md, "runtime/comm/nccl.c".
 */
#include "nccl.h"

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define PD_CUDA_TRY(call)                                                                                     \
    do {                                                                                                      \
        cudaError_t e_ = (call);                                                                              \
        if (e_ != cudaSuccess)                                                                                \
            return pd__err(PD_ERR_IO, "CUDA: %s (%s:%d): %s", #call, __FILE__, __LINE__, cudaGetErrorString(e_)); \
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

#define PD__TOLD 1 /* on mcomm: "my NCCL set-up failed", with its message */

typedef struct pd__ncx {
    pd__transport base;
    MPI_Comm mcomm;          /* the pipeline's processes (bootstrap, set-up failures) */
    int me, n;               /* in it */
    /* every communicator: [0] all the processes, [1 + 2 l + dir] link l's
     * direction dir, [1 + 2 nlinks + w] worker w's replicas (NULL where this
     * process is not one); all NULL once aborted */
    ncclComm_t *cm;
    int ncm;
    cudaStream_t *cs;        /* per link and direction: its sends and receives */
    cudaStream_t stream;     /* compute */
    pd__transport *watch;    /* the MPI transport whose notices end the waits (may be NULL) */
    int nthreads, nlinks, nworkers, device;
    int *rank_of;
    pd__dpool *pool;         /* per link and direction */
    bool aborted, setup;
    /* set-up failures (pd__nc_agree): this process's notice to the others
     * (told: 2 its own failure, 1 an NCCL error a peer's abort may have
     * caused, 0 none), and per process whether its notice came, and what */
    char toldmsg[512];
    int told, ntells, *flags;
    MPI_Request *tells;
    bool heard;
    unsigned char *got;
    char (*msgs)[512];
} pd__ncx;

#define PD__ALL(x) ((x)->cm[0])
#define PD__CHAN(x, l, dir) ((x)->cm[1 + 2 * (l) + (dir)])
#define PD__GROUP(x, w) ((x)->cm[1 + 2 * (x)->nlinks + (w)])

int pd__nccl_devices(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
    return n;
}

/* Every communicator aborted: kernels still waiting for a peer return and
 * the streams drain. The transport is unusable after (the job is meant to
 * end, as after the MPI transport's failure). */
static void pd__nc_abort(pd__ncx *x) {
    x->aborted = true;
    for (int i = 0; x->cm && i < x->ncm; i++)
        if (x->cm[i]) {
            (void)ncclCommAbort(x->cm[i]);
            x->cm[i] = NULL;
        }
}

static pd_status pd__nc_aborted(void) {
    return pd__err(PD_ERR_IO, "NCCL: the communicators were aborted after a failure");
}

/* A set-up failure notice from process r. */
static void pd__nc_recv_told(pd__ncx *x, int r) {
    MPI_Recv(x->msgs[r], (int)sizeof x->msgs[r], MPI_CHAR, r, PD__TOLD, x->mcomm, MPI_STATUS_IGNORE);
    x->msgs[r][sizeof x->msgs[r] - 1] = 0;
    x->got[r] = 1;
}

/* During the set-up: whether another process said its set-up failed. */
static pd_status pd__nc_heard(pd__ncx *x) {
    int flag = 0;
    MPI_Status s;
    if (MPI_Iprobe(MPI_ANY_SOURCE, PD__TOLD, x->mcomm, &flag, &s) != MPI_SUCCESS || !flag) return PD_OK;
    pd__nc_recv_told(x, s.MPI_SOURCE);
    x->heard = true;
    return pd__err(PD_ERR_IO, "MPI: rank %d failed: %s", s.MPI_SOURCE, x->msgs[s.MPI_SOURCE]); /* as relayed */
}

/* During the set-up: this process failed (pd_last_error says how; level:
 * as x->told); the others hear of it polling, or at the next
 * pd__nc_agree. Once. */
static void pd__nc_tell(pd__ncx *x, int level) {
    if (x->told) return;
    x->told = level;
    snprintf(x->toldmsg, sizeof x->toldmsg, "%s", pd_last_error());
    for (int r = 0; r < x->n; r++)
        if (r != x->me && MPI_Isend(x->toldmsg, (int)strlen(x->toldmsg) + 1, MPI_CHAR, r, PD__TOLD, x->mcomm,
                                    &x->tells[x->ntells]) == MPI_SUCCESS)
            x->ntells++;
}

/* Another process's failure, one look: during the set-up its notice on
 * mcomm, later the watch transport's (or a stop, or a run failed here). */
static pd_status pd__nc_notice(pd__ncx *x) { return x->setup ? pd__nc_heard(x) : pd__mpi_transport_check(x->watch); }

/* NCCL failed here (st; secondary: an error a peer's abort may cause, a
 * remote or network one): every communicator aborted. During the set-up
 * the others are told at once (they may be in NCCL's initialization with
 * this one); pd__nc_agree then prefers a process's own failure to a
 * secondary one. During a run, a peer that failed tells by the MPI
 * transport before it aborts, and its abort may be what failed here: a
 * notice that comes within a moment is the cause, and wins. */
static pd_status pd__nc_failed(pd__ncx *x, pd_status st, bool secondary) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", pd_last_error());
    for (int k = 0; !x->setup && k < 200; k++) { /* 1 s */
        if (pd__nc_notice(x) != PD_OK) {
            if (!pd__mpi_relayed(pd_last_error())) break; /* a stop, or this process failed already */
            pd__nc_abort(x);
            return PD_ERR_IO;
        }
        nanosleep(&(struct timespec){0, 5000000}, NULL);
    }
    pd__err(st, "%s", msg);
    if (x->setup) pd__nc_tell(x, secondary ? 1 : 2);
    pd__nc_abort(x);
    return st;
}

/* One look, never a wait: another process's failure (pd__nc_notice), or a
 * communicator's asynchronous error (a peer died, the network failed).
 * Either aborts every communicator; the error names the cause. */
static pd_status pd__nc_watch(pd__ncx *x) {
    if (x->aborted) return pd__nc_aborted();
    pd_status st = pd__nc_notice(x);
    if (st != PD_OK) {
        pd__nc_abort(x);
        return st;
    }
    for (int i = 0; x->cm && i < x->ncm; i++) {
        ncclResult_t r = ncclSuccess;
        if (!x->cm[i] || ncclCommGetAsyncError(x->cm[i], &r) != ncclSuccess || r == ncclSuccess || r == ncclInProgress)
            continue;
        char what[64];
        if (i == 0) snprintf(what, sizeof what, "the pipeline's");
        else if (i <= 2 * x->nlinks)
            snprintf(what, sizeof what, "link %d's %s", (i - 1) / 2, (i - 1) % 2 ? "gradients'" : "activations'");
        else snprintf(what, sizeof what, "stage %d's replicas'", i - 1 - 2 * x->nlinks);
        return pd__nc_failed(x, pd__err(PD_ERR_IO, "NCCL: %s communicator: %s", what, ncclGetErrorString(r)),
                             r == ncclRemoteError || r == ncclSystemError);
    }
    return PD_OK;
}

/* NCCL's answer r to a call on communicator c (non-blocking: ncclInProgress
 * is polled until it is not, watching between looks). Not done: every
 * communicator aborted, the error says what. */
static pd_status pd__nc_done(pd__ncx *x, ncclComm_t c, ncclResult_t r, const char *what) {
    for (unsigned spins = 0; r == ncclInProgress; spins++) {
        PD_TRY(pd__nc_watch(x));
        if (spins > 64) sched_yield();
        ncclResult_t q = ncclCommGetAsyncError(c, &r);
        if (q != ncclSuccess) r = q;
    }
    if (r == ncclSuccess) return PD_OK;
    const char *why = ncclGetLastError(NULL);
    return pd__nc_failed(x, pd__err(PD_ERR_IO, "NCCL: %s: %s%s%s%s", what, ncclGetErrorString(r),
                                    why && *why ? " (" : "", why ? why : "", why && *why ? ")" : ""),
                         r == ncclRemoteError || r == ncclSystemError);
}

/* Waits for event ev (or, ev NULL, stream s) polled, watching between looks. */
static pd_status pd__nc_wait(pd__ncx *x, cudaEvent_t ev, cudaStream_t s, const char *what) {
    for (unsigned spins = 0;; spins++) {
        cudaError_t e = ev ? cudaEventQuery(ev) : cudaStreamQuery(s);
        if (e == cudaSuccess) return PD_OK;
        if (e != cudaErrorNotReady) return pd__err(PD_ERR_IO, "CUDA: waiting for %s: %s", what, cudaGetErrorString(e));
        PD_TRY(pd__nc_watch(x));
        if (spins > 64) sched_yield(); /* a core shared with the stage's host work */
    }
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
    /* the event first: undoing a cudaMalloc (cudaFree) with sends in flight would wait for their receivers */
    if (cudaEventCreateWithFlags(&b->ev, cudaEventDisableTiming) != cudaSuccess) return NULL;
    if (cudaMalloc(&b->p, n ? n : 1) != cudaSuccess) {
        cudaEventDestroy(b->ev);
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

/* Enqueued, not waited for: the link's stream alone waits for the receiver
 * (flush waits for it, polled). */
static pd_status pd__nc_send(pd__transport *t, int from, int to, int l, int dir, int mb, void *buf, size_t n,
                             bool *stop) {
    (void)from, (void)stop;
    pd__ncx *x = (pd__ncx *)t;
    if (x->aborted) return pd__nc_aborted();
    cudaStream_t s = x->cs[l * 2 + dir];
    ncclComm_t c = PD__CHAN(x, l, dir);
    PD_TRY(pd__after_compute(x, s));
    char what[96];
    snprintf(what, sizeof what, "sending the %s of microbatch %d to rank %d", dir ? "gradients" : "activations", mb,
             x->rank_of[to]);
    pd_status st = pd__nc_done(x, c, ncclSend(buf, n, ncclChar, x->rank_of[to], c, s), what);
    pd_status gs = pd__dgive(x, l, dir, buf, s); /* after the send, now on the stream */
    return st != PD_OK ? st : gs;
}

/* Returns once the message has arrived (polled, as the MPI transport's
 * receive waits): the compute stream, which also waits for it, then never
 * depends on a message that may not come, so no later host wait on it (a
 * loss read back, a CPU node's inputs) can outlast a failed peer. */
static pd_status pd__nc_recv(pd__transport *t, int from, int to, int l, int dir, int mb, size_t n, void **buf,
                             bool *stop) {
    (void)to, (void)stop;
    pd__ncx *x = (pd__ncx *)t;
    if (x->aborted) return pd__nc_aborted();
    cudaStream_t s = x->cs[l * 2 + dir];
    ncclComm_t c = PD__CHAN(x, l, dir);
    void *b = pd__nc_get(t, l, dir, n);
    if (!b) return pd__err(PD_ERR_NOMEM, "NCCL: no device memory for a %zu-byte message", n);
    char what[96];
    snprintf(what, sizeof what, "receiving the %s of microbatch %d from rank %d", dir ? "gradients" : "activations",
             mb, x->rank_of[from]);
    /* the buffer's last reader (compute) is done before NCCL writes it: get checked its event */
    pd_status st = pd__nc_done(x, c, ncclRecv(b, n, ncclChar, x->rank_of[from], c, s), what);
    cudaEvent_t ev = NULL; /* compute waits for the receive */
    cudaError_t e = st == PD_OK ? cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) : cudaSuccess;
    if (st == PD_OK && e == cudaSuccess) e = cudaEventRecord(ev, s);
    if (st == PD_OK && e == cudaSuccess) e = cudaStreamWaitEvent(x->stream, ev, 0);
    if (e != cudaSuccess) st = pd__err(PD_ERR_IO, "CUDA: ordering compute after a receive: %s", cudaGetErrorString(e));
    if (st == PD_OK) st = pd__nc_wait(x, ev, NULL, what);
    if (ev) cudaEventDestroy(ev);
    if (st != PD_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", pd_last_error());
        (void)pd__dgive(x, l, dir, b, s);
        return pd__err(st, "%s", msg);
    }
    *buf = b;
    return PD_OK;
}

/* Waited for (polled) too: a replica that failed must not leave the
 * compute stream, and a host wait behind it, stuck. */
static pd_status pd__nc_allreduce(pd__transport *t, int g, void *data, int64_t n, bool f64) {
    pd__ncx *x = (pd__ncx *)t;
    if (x->aborted) return pd__nc_aborted();
    ncclComm_t c = g < 0 ? PD__ALL(x) : PD__GROUP(x, g);
    if (!c) return PD_OK; /* not one of worker g's replicas */
    char what[64];
    snprintf(what, sizeof what, "summing %lld values across %s", (long long)n, g < 0 ? "the pipeline" : "the replicas");
    PD_TRY(pd__nc_done(x, c, ncclAllReduce(data, data, (size_t)n, f64 ? ncclDouble : ncclFloat, ncclSum, c, x->stream),
                       what));
    return pd__nc_wait(x, NULL, x->stream, what);
}

/* allreduce has waited already. */
static pd_status pd__nc_wait_all(pd__transport *t, int g) {
    (void)t, (void)g;
    return PD_OK;
}

/* Receives and all-reduces are waited for before they return: only sends
 * are left running, on the links' streams. */
bool pd__nccl_pending(void *t) {
    pd__ncx *x = (pd__ncx *)t;
    for (int i = 0; x && x->cs && i < 2 * x->nlinks; i++)
        if (x->cs[i] && cudaStreamQuery(x->cs[i]) != cudaSuccess) return true; /* not ready, or an error: maybe */
    return false;
}

pd_status pd__nccl_sync(pd__transport *t) {
    return pd__nc_wait((pd__ncx *)t, NULL, ((pd__ncx *)t)->stream, "the compute stream");
}

static pd_status pd__nc_flush(pd__transport *t) {
    pd__ncx *x = (pd__ncx *)t;
    for (int i = 0; i < 2 * x->nlinks; i++) PD_TRY(pd__nc_wait(x, NULL, x->cs[i], "a link's transfers"));
    return pd__nc_wait(x, NULL, x->stream, "the compute stream");
}

/* This process failed: its peers hear of it by the MPI transport; here the
 * communicators are aborted, so that its own streams drain. */
static void pd__nc_fail(pd__transport *t, const char *msg) {
    (void)msg;
    pd__nc_abort((pd__ncx *)t);
}

/* A clean shutdown's end of the communicators: each finalized, then
 * destroyed. ncclCommFinalize flushes the communicator's operations and
 * leaves it ncclInProgress until every process of it has finalized too (an
 * intra-node barrier); ncclCommDestroy then only frees what is local.
 * ncclCommDestroy alone would do that finalization inside NCCL, where
 * nothing here looks at a peer's failure notice. So the finalizations are
 * all started (one does not wait behind another), then polled as every
 * wait here (pd__nc_done): a notice or a communicator's error (a peer that
 * died: its sockets close) aborts every communicator instead. */
static void pd__nc_finalize(pd__ncx *x) {
    for (int i = 0; x->cm && !x->aborted && i < x->ncm; i++) {
        ncclResult_t r = x->cm[i] ? ncclCommFinalize(x->cm[i]) : ncclSuccess;
        if (r != ncclSuccess && r != ncclInProgress) (void)pd__nc_done(x, x->cm[i], r, "ncclCommFinalize");
    }
    for (int i = 0; x->cm && !x->aborted && i < x->ncm; i++)
        if (x->cm[i]) (void)pd__nc_done(x, x->cm[i], ncclInProgress, "finalizing a communicator");
    for (int i = 0; x->cm && !x->aborted && i < x->ncm; i++)
        if (x->cm[i]) {
            (void)ncclCommDestroy(x->cm[i]);
            x->cm[i] = NULL;
        }
}

static void pd__nc_destroy(pd__transport *t) {
    pd__ncx *x = (pd__ncx *)t;
    if (!x) return;
    /* a transfer still running (no flush, a failed run) could wait for ever: abort instead (the compute stream
     * is its owner's, who drained it) */
    for (int i = 0; x->cs && !x->aborted && i < 2 * x->nlinks; i++)
        if (x->cs[i] && cudaStreamQuery(x->cs[i]) != cudaSuccess) pd__nc_abort(x);
    for (int i = 0; x->cs && i < 2 * x->nlinks; i++)
        if (x->cs[i]) cudaStreamSynchronize(x->cs[i]); /* idle, or its NCCL kernels aborted */
    char msg[1024]; /* the caller's last error, which a failed finalization would overwrite */
    snprintf(msg, sizeof msg, "%s", pd_last_error());
    pd__nc_finalize(x); /* aborted already: nothing left to finalize */
    pd__err(PD_ERR_IO, "%s", msg);
    /* the buffers after the communicators: no NCCL kernel is left for cudaFree's device-wide wait */
    for (int i = 0; x->pool && i < 2 * x->nlinks; i++) {
        for (int k = 0; k < x->pool[i].n; k++) {
            cudaFree(x->pool[i].b[k].p);
            cudaEventDestroy(x->pool[i].b[k].ev);
        }
        PD_FREE(x->pool[i].b);
    }
    PD_FREE(x->pool);
    for (int i = 0; x->cs && i < 2 * x->nlinks; i++)
        if (x->cs[i]) cudaStreamDestroy(x->cs[i]);
    for (int i = 0; i < x->ntells; i++) MPI_Request_free(&x->tells[i]); /* only after an MPI failure */
    if (x->mcomm != MPI_COMM_NULL) MPI_Comm_free(&x->mcomm);
    PD_FREE(x->cm);
    PD_FREE(x->cs);
    PD_FREE(x->rank_of);
    PD_FREE(x->tells);
    PD_FREE(x->flags);
    PD_FREE(x->got);
    PD_FREE(x->msgs);
    PD_FREE(x);
}

static const pd__transport_i pd__nccl_vt = {"nccl",        pd__nc_get,   pd__nc_send,    pd__nc_recv, pd__nc_put,
                                            pd__nc_allreduce, pd__nc_flush, pd__nc_destroy, pd__nc_fail,
                                            pd__nc_allreduce, pd__nc_wait_all};

/* Collective over mcomm, after each part of the set-up: a process that
 * failed there and has not told yet tells the others now, then every
 * process learns who failed and how (pd__nc_tell's levels), all the
 * notices are received, and each returns PD_OK, or its own error if it is
 * the one that counts (the lowest rank among those that failed on their
 * own, else among those with a secondary error), or that one's as a
 * relayed failure reads ("MPI: rank 1 failed: ..."): a set-up problem is
 * reported once, by its rank, not as the errors it caused elsewhere. */
static pd_status pd__nc_agree(pd__ncx *x, pd_status st) {
    if (st != PD_OK && !x->told && !x->heard) pd__nc_tell(x, 2); /* failed here, outside NCCL */
    int mine = x->told;
    if (MPI_Allgather(&mine, 1, MPI_INT, x->flags, 1, MPI_INT, x->mcomm) != MPI_SUCCESS)
        return st != PD_OK ? st : pd__err(PD_ERR_IO, "MPI: agreeing on the NCCL set-up failed");
    int who = -1;
    for (int r = 0; r < x->n; r++) {
        if (x->flags[r] && r != x->me && !x->got[r]) pd__nc_recv_told(x, r); /* sent before r's Allgather */
        if (x->flags[r] && (who < 0 || x->flags[r] > x->flags[who])) who = r;
    }
    MPI_Waitall(x->ntells, x->tells, MPI_STATUSES_IGNORE); /* every one received by now */
    x->ntells = 0;
    if (who < 0 || who == x->me) return st;
    return pd__err(PD_ERR_IO, "MPI: rank %d failed: %s", who, x->msgs[who]);
}

/* The processes holding replicas of worker w, in rank order: how many, and
 * where this one is among them (*mine; -1: not one). */
static int pd__nc_members(const pd__ncx *x, const int *worker_of, int w, int *mine) {
    int k = 0;
    *mine = -1;
    for (int r = 0; r < x->n; r++) {
        bool has = false;
        for (int i = 0; i < x->nthreads; i++) has |= worker_of[i] == w && x->rank_of[i] == r;
        if (!has) continue;
        if (r == x->me) *mine = k;
        k++;
    }
    return k;
}

/* Everything collective, in the same order on every process. Each
 * communicator is initialized from its own id (rank 0 makes them all, one
 * MPI_Bcast), not split from another: a non-blocking ncclCommSplit gives
 * its communicator only once done, so nothing could be polled meanwhile. */
static pd_status pd__nc_setup(pd__ncx *x, const int *worker_of, int color) {
    int world_me;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_me);
    PD_MPI_OK(MPI_Comm_split(MPI_COMM_WORLD, color, world_me, &x->mcomm), "splitting the pipeline's processes");
    MPI_Comm_rank(x->mcomm, &x->me);
    MPI_Comm_size(x->mcomm, &x->n);
    ncclUniqueId *id = PD_CALLOC((size_t)x->ncm, sizeof *id);
    pd_status st = id ? PD_OK : pd__err(PD_ERR_NOMEM, "out of memory");
    cudaError_t e = st == PD_OK ? cudaSetDevice(x->device) : cudaSuccess;
    if (e != cudaSuccess)
        st = pd__err(PD_ERR_IO, "CUDA: rank %d: device %d: %s", x->me, x->device, cudaGetErrorString(e));
    for (int i = 0; st == PD_OK && x->me == 0 && i < x->ncm; i++) {
        int mine;
        if (i > 2 * x->nlinks && pd__nc_members(x, worker_of, i - 1 - 2 * x->nlinks, &mine) < 2) continue;
        ncclResult_t r = ncclGetUniqueId(&id[i]);
        if (r != ncclSuccess) st = pd__err(PD_ERR_IO, "NCCL: ncclGetUniqueId: %s", ncclGetErrorString(r));
    }
    st = pd__nc_agree(x, st); /* one process's failure must not leave the others in NCCL's initialization */
    if (st == PD_OK && MPI_Bcast(id, (int)(sizeof *id * (size_t)x->ncm), MPI_BYTE, 0, x->mcomm) != MPI_SUCCESS)
        st = pd__err(PD_ERR_IO, "MPI: broadcasting the NCCL ids failed");
    if (st != PD_OK) {
        PD_FREE(id);
        return st;
    }
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0; /* every call returns at once; the waits are polled here */
    x->setup = true;
    for (int i = 0; st == PD_OK && i < x->ncm; i++) {
        int nr = x->n, r = x->me;
        if (i > 2 * x->nlinks && ((nr = pd__nc_members(x, worker_of, i - 1 - 2 * x->nlinks, &r)) < 2 || r < 0))
            continue; /* a stage without replicas, or not one of them */
        ncclResult_t q = ncclCommInitRankConfig(&x->cm[i], nr, id[i], r, &cfg); /* sets x->cm[i] at once */
        st = pd__nc_done(x, x->cm[i], q, "ncclCommInitRankConfig"); /* in progress: its state, polled */
    }
    for (int i = 0; st == PD_OK && i < 2 * x->nlinks; i++) {
        cudaError_t ce = cudaStreamCreateWithFlags(&x->cs[i], cudaStreamNonBlocking);
        if (ce != cudaSuccess) st = pd__err(PD_ERR_IO, "CUDA: a stream for link %d: %s", i / 2, cudaGetErrorString(ce));
    }
    st = pd__nc_agree(x, st);
    x->setup = false;
    if (st != PD_OK) pd__nc_abort(x);
    PD_FREE(id);
    return st;
}

pd_status pd__nccl_transport_create(int nthreads, const int *rank_of, const int *worker_of, int nworkers, int nlinks,
                                    int color, int device, void *stream, pd__transport *watch, pd__transport **out) {
    PD_TRY(pd__mpi_use());
    int world = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    pd__ncx *x = PD_CALLOC(1, sizeof *x);
    if (!x) return pd__err(PD_ERR_NOMEM, "out of memory");
    x->base.vt = &pd__nccl_vt;
    x->mcomm = MPI_COMM_NULL;
    x->stream = (cudaStream_t)stream;
    x->watch = watch;
    x->nthreads = nthreads;
    x->nlinks = nlinks > 0 ? nlinks : 1;
    x->nworkers = nworkers;
    x->device = device;
    x->ncm = 1 + 2 * x->nlinks + nworkers;
    x->rank_of = PD_MALLOC(sizeof(int) * (size_t)nthreads);
    x->pool = PD_CALLOC(2 * (size_t)x->nlinks, sizeof *x->pool);
    x->cm = PD_CALLOC((size_t)x->ncm, sizeof *x->cm);
    x->cs = PD_CALLOC(2 * (size_t)x->nlinks, sizeof *x->cs);
    x->tells = PD_CALLOC((size_t)world, sizeof *x->tells); /* the pipeline's processes are some of the world's */
    x->flags = PD_CALLOC((size_t)world, sizeof *x->flags);
    x->got = PD_CALLOC((size_t)world, 1);
    x->msgs = PD_CALLOC((size_t)world, sizeof *x->msgs);
    if (!x->rank_of || !x->pool || !x->cm || !x->cs || !x->tells || !x->flags || !x->got || !x->msgs) {
        pd__nc_destroy(&x->base);
        return pd__err(PD_ERR_NOMEM, "out of memory");
    }
    memcpy(x->rank_of, rank_of, sizeof(int) * (size_t)nthreads);
    pd_status st = pd__nc_setup(x, worker_of, color);
    if (st != PD_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", pd_last_error());
        pd__nc_destroy(&x->base);
        return pd__err(st, "%s", msg);
    }
    *out = &x->base;
    return PD_OK;
}
