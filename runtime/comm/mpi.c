/* mpi.c - the MPI transport (transport.h): messages between the pipeline's
 * threads in different processes, and the job-wide helpers `mpirun pdonnx
 * train` needs (docs/DISTRIBUTED.md).
 *
 * How it works: docs/INTERNALS.md, "runtime/comm/mpi.c".
 */
#include "transport.h"

#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>

#ifdef PD_HAVE_MPI
#include <mpi.h>

static bool pd__mpi_on;    /* MPI is up and pdonnx may use it */
static bool pd__mpi_owned; /* pdonnx initialized it, so pdonnx finalizes it */

#define PD_MPI_TRY(call, what)                                                                  \
    do {                                                                                        \
        int rc_ = (call);                                                                       \
        if (rc_ != MPI_SUCCESS) {                                                               \
            char s_[MPI_MAX_ERROR_STRING];                                                      \
            int n_ = 0;                                                                         \
            MPI_Error_string(rc_, s_, &n_);                                                     \
            return pd__err(PD_ERR_IO, "MPI %s failed (%s:%d): %s", what, __FILE__, __LINE__, s_); \
        }                                                                                       \
    } while (0)

static int pd__env_int(const char *name) {
    const char *v = getenv(name);
    return v ? atoi(v) : 0;
}

pd_status pd__mpi_init(int *rank, int *size) {
    *rank = 0;
    *size = 1;
    /* started by mpirun (Open MPI, MPICH/Hydra) or srun */
    int world = pd__env_int("OMPI_COMM_WORLD_SIZE");
    if (!world) world = pd__env_int("PMI_SIZE");
    if (!world) world = pd__env_int("SLURM_NTASKS");
    if (world <= 1) return PD_OK;
    return pd_mpi_init(rank, size);
}

/* MPI initialized by the program itself: usable when it allows calls from
 * any thread, one at a time (the pipeline's stage threads make them). */
static pd_status pd__mpi_adopt(void) {
    int provided = 0;
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_SERIALIZED)
        return pd__err(PD_ERR_UNSUPPORTED, "MPI: the program initialized MPI with thread level %d; pdonnx's stage "
                       "threads need MPI_THREAD_SERIALIZED (MPI_Init_thread) or let pd_mpi_init initialize it",
                       provided);
    pd__mpi_on = true;
    return PD_OK;
}

pd_status pd_mpi_init(int *rank, int *size) {
    int inited = 0, done = 0;
    MPI_Finalized(&done);
    if (done) return pd__err(PD_ERR_INVALID, "pd_mpi_init: MPI was already finalized");
    MPI_Initialized(&inited);
    if (!pd__mpi_on && inited) PD_TRY(pd__mpi_adopt());
    if (!inited) {
        int provided = 0;
        PD_MPI_TRY(MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided), "init");
        if (provided < MPI_THREAD_SERIALIZED) {
            MPI_Finalize();
            return pd__err(PD_ERR_UNSUPPORTED, "MPI: this MPI library gives no MPI_THREAD_SERIALIZED (got %d)",
                           provided);
        }
        pd__mpi_on = pd__mpi_owned = true;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int r = 0, n = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (rank) *rank = r;
    if (size) *size = n;
    return PD_OK;
}

void pd_mpi_finalize(void) { pd__mpi_finalize(); }

pd_status pd__mpi_use(void) {
    if (pd__mpi_on) return PD_OK;
    int inited = 0, done = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&done);
    if (!inited || done)
        return pd__err(PD_ERR_INVALID, "MPI is not initialized: call pd_mpi_init first (or MPI_Init_thread with "
                       "MPI_THREAD_SERIALIZED)");
    PD_TRY(pd__mpi_adopt());
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    return PD_OK;
}

bool pd__mpi_active(void) { return pd__mpi_on; }

void pd__mpi_finalize(void) {
    int done = 0;
    MPI_Finalized(&done);
    if (pd__mpi_owned && !done) MPI_Finalize();
    pd__mpi_on = pd__mpi_owned = false;
}

void pd__mpi_abort(int code) {
    if (pd__mpi_on) MPI_Abort(MPI_COMM_WORLD, code);
}

pd_status pd__mpi_bcast(void **buf, size_t *len) {
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    unsigned long long n = rank == 0 ? (unsigned long long)*len : 0;
    PD_MPI_TRY(MPI_Bcast(&n, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD), "broadcast");
    if (n > (unsigned long long)INT32_MAX) return pd__err(PD_ERR_UNSUPPORTED, "MPI: a %llu-byte broadcast", n);
    if (rank != 0) {
        *buf = PD_MALLOC((size_t)n + 1);
        if (!*buf) return pd__err(PD_ERR_NOMEM, "out of memory");
        *len = (size_t)n;
    }
    PD_MPI_TRY(MPI_Bcast(*buf, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD), "broadcast");
    return PD_OK;
}

/* The one agreement of the processes (the CLI's, the trainer's, the GPU
 * set-up's): each gives its rank when it failed (plus n when it only heard
 * of another's failure), 2n when fine; the minimum names the lowest failing
 * rank, one that failed itself first. -1: none failed; -2: MPI could not
 * tell (this process's own failure then stands). */
static int pd__mpi_lowest_failing(bool ok, bool relayed) {
    int me = 0, n = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    int v = ok ? 2 * n : relayed ? n + me : me, best = 2 * n;
    if (MPI_Allreduce(&v, &best, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD) != MPI_SUCCESS) return -2;
    return best == 2 * n ? -1 : best % n;
}

int pd__mpi_agree(bool ok) {
    int low = pd__mpi_lowest_failing(ok, false), me = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    return low == -2 ? me : low;
}

#define PD__RELAYED "MPI: rank %d failed: "

bool pd__mpi_relayed(const char *msg) {
    const char *at = msg ? strstr(msg, "MPI: rank ") : NULL;
    int r;
    char c;
    return at && sscanf(at, "MPI: rank %d faile%c", &r, &c) == 2;
}

bool pd__mpi_same(int64_t v) {
    long long lo = (long long)v, hi = (long long)v, mine = (long long)v;
    if (MPI_Allreduce(&mine, &lo, 1, MPI_LONG_LONG, MPI_MIN, MPI_COMM_WORLD) != MPI_SUCCESS) return false;
    if (MPI_Allreduce(&mine, &hi, 1, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD) != MPI_SUCCESS) return false;
    return lo == hi;
}

pd_status pd__mpi_agree_status(pd_status st) {
    int me = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    int low = pd__mpi_lowest_failing(st == PD_OK, st != PD_OK && pd__mpi_relayed(pd_last_error()));
    if (low == -2) return st != PD_OK ? st : pd__err(PD_ERR_IO, "rank %d: MPI: cannot agree on the outcome", me);
    if (low == -1) return PD_OK;
    struct {
        int code;
        char msg[1024];
    } m;
    memset(&m, 0, sizeof m);
    m.code = (int)st;
    if (me == low) snprintf(m.msg, sizeof m.msg, "%s", pd_last_error());
    if (MPI_Bcast(&m, (int)sizeof m, MPI_BYTE, low, MPI_COMM_WORLD) != MPI_SUCCESS)
        return pd__err(st != PD_OK ? st : PD_ERR_IO, "rank %d failed (MPI could not tell why)", low);
    m.msg[sizeof m.msg - 1] = 0;
    if (me == low && st != PD_OK) return pd__err(st, "rank %d: %s", me, m.msg);
    return pd__err(m.code != PD_OK ? (pd_status)m.code : PD_ERR_INTERNAL, "rank %d: %s", low, m.msg);
}

pd_status pd__mpi_gather_text(const char *buf, size_t len, const char *sep, char **all, size_t *alllen) {
    int me, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    *all = NULL;
    *alllen = 0;
    if (len > (size_t)INT32_MAX / 2) return pd__err(PD_ERR_UNSUPPORTED, "MPI: a %zu-byte gather", len);
    int mine = (int)len, *lens = me == 0 ? PD_CALLOC((size_t)n, sizeof(int)) : NULL,
        *offs = me == 0 ? PD_CALLOC((size_t)n, sizeof(int)) : NULL;
    if (me == 0 && (!lens || !offs)) return pd__err(PD_ERR_NOMEM, "out of memory");
    PD_MPI_TRY(MPI_Gather(&mine, 1, MPI_INT, lens, 1, MPI_INT, 0, MPI_COMM_WORLD), "gather");
    char *tmp = NULL;
    int64_t total = 0;
    for (int i = 0; me == 0 && i < n; i++) offs[i] = (int)total, total += lens[i];
    if (me == 0 && !(tmp = PD_MALLOC((size_t)total + 1))) return pd__err(PD_ERR_NOMEM, "out of memory");
    PD_MPI_TRY(MPI_Gatherv(buf, mine, MPI_CHAR, tmp, lens, offs, MPI_CHAR, 0, MPI_COMM_WORLD), "gather");
    if (me != 0) return PD_OK;
    size_t sl = strlen(sep), cap = (size_t)total + (size_t)n * sl + 1, at = 0;
    char *out = PD_MALLOC(cap);
    for (int i = 0; out && i < n; i++) {
        if (lens[i] == 0) continue;
        if (at > 0) memcpy(out + at, sep, sl), at += sl;
        memcpy(out + at, tmp + offs[i], (size_t)lens[i]);
        at += (size_t)lens[i];
    }
    PD_FREE(tmp);
    PD_FREE(lens);
    PD_FREE(offs);
    if (!out) return pd__err(PD_ERR_NOMEM, "out of memory");
    out[at] = 0;
    *all = out;
    *alllen = at;
    return PD_OK;
}

int pd__mpi_rank(void) {
    int me = 0;
    if (pd__mpi_on) MPI_Comm_rank(MPI_COMM_WORLD, &me);
    return me;
}

int pd__mpi_local_rank(void) {
    static int local = -1; /* the node's processes do not change: split once */
    if (!pd__mpi_on) return 0;
    if (local < 0) {
        MPI_Comm node;
        int me = 0;
        MPI_Comm_rank(MPI_COMM_WORLD, &me);
        if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, me, MPI_INFO_NULL, &node) != MPI_SUCCESS)
            return 0;
        MPI_Comm_rank(node, &local);
        MPI_Comm_free(&node);
    }
    return local;
}

pd_status pd__mpi_allreduce_f64(double *v, int64_t n) {
    if (n > INT32_MAX) return pd__err(PD_ERR_UNSUPPORTED, "MPI: an all-reduce of %lld values", (long long)n);
    PD_MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, v, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), "all-reduce");
    return PD_OK;
}

/* ---- the transport ---- */

typedef struct pd__pending {
    MPI_Request req;
    void *buf;
    int l, dir;
} pd__pending;

typedef struct pd__pool {
    void **b;
    int n, cap;
} pd__pool;

typedef struct pd__arq { /* one group's all-reduces started: only its one thread here touches them */
    MPI_Request *r;
    int n, cap;
} pd__arq;

typedef struct pd__mpix {
    pd__transport base;
    MPI_Comm comm;
    MPI_Comm ckcomm; /* comm's processes again, for sums made beside the stages' (checkpoints' agreement) */
    MPI_Comm *group; /* per worker: its replicas' processes (MPI_COMM_NULL where this one is not) */
    MPI_Comm tied;   /* the processes holding a stage that reads a tied parameter (PD__TIED) */
    int nworkers, nthreads, nlinks, window;
    int *rank_of;
    pd__pending *pend;
    int npend, cap;
    pd__pool *pool; /* per link and direction */
    int abort_tag;  /* above every message tag: "a process failed" */
    bool failed;    /* this run failed (here or elsewhere): the communicators may hold unmatched operations */
    MPI_Request *fails; /* the failure notices this process sent (never waited for) */
    char failmsg[1024]; /* what they say */
    pd__arq *ar;        /* per worker: the all-reduces started in its group (iallreduce), completed by wait_all */
    int nfails;
    /* several stages (threads) of one process may call the transport: one
     * at a time inside MPI (MPI_THREAD_SERIALIZED) and in its lists; a wait
     * lets go of it between polls */
    pthread_mutex_t mu;
    const int *stopped; /* the pipeline was stopped here (another thread failed): waits give up */
} pd__mpix;

/* One look for what ends every wait: another process's failure notice (the
 * transport is then marked failed and the error names the rank that failed
 * and its message), or a stop here (x->stopped). PD_OK: neither. x->mu held. */
static pd_status pd__heard(pd__mpix *x) {
    int flag = 0;
    MPI_Status ps;
    PD_MPI_TRY(MPI_Iprobe(MPI_ANY_SOURCE, x->abort_tag, x->comm, &flag, &ps), "probe");
    if (flag) {
        char msg[sizeof x->failmsg] = "";
        MPI_Recv(msg, (int)sizeof msg - 1, MPI_CHAR, ps.MPI_SOURCE, x->abort_tag, x->comm, MPI_STATUS_IGNORE);
        msg[sizeof msg - 1] = 0;
        x->failed = true;
        return pd__err(PD_ERR_IO, PD__RELAYED "%s", ps.MPI_SOURCE, msg);
    }
    if (x->stopped && __atomic_load_n(x->stopped, __ATOMIC_ACQUIRE)) { /* another thread here failed: it told */
        x->failed = true;
        return pd__err(PD_ERR_IO, "MPI: stopped (another stage of this process failed)");
    }
    return PD_OK;
}

/* Waits for req while watching for another process's failure notice (a
 * blocking call would wait for ever for a message that process never
 * sends). On a notice or a stop: req is cancelled where MPI can (a
 * receive) and pd__heard's error returned. */
static pd_status pd__wait(pd__mpix *x, MPI_Request *req, MPI_Status *s, bool cancellable) {
    for (unsigned spins = 0;; spins++) { /* x->mu held, but between polls */
        int done = 0;
        PD_MPI_TRY(MPI_Test(req, &done, s), "wait");
        if (done) return PD_OK;
        pd_status st = pd__heard(x);
        if (st != PD_OK) {
            if (cancellable) {
                MPI_Cancel(req);
                MPI_Wait(req, MPI_STATUS_IGNORE);
            }
            return st;
        }
        pthread_mutex_unlock(&x->mu);
        if (spins > 64) sched_yield(); /* a core shared with the stage computing next door */
        pthread_mutex_lock(&x->mu);
    }
}

static void pd__pool_put(pd__pool *q, void *b) {
    if (q->n == q->cap) {
        int cap = q->cap ? 2 * q->cap : 8;
        void **nb = realloc(q->b, sizeof(void *) * (size_t)cap);
        if (!nb) {
            PD_FREE(b);
            return;
        }
        q->b = nb;
        q->cap = cap;
    }
    q->b[q->n++] = b;
}

/* Completed sends give their buffers back. */
static pd_status pd__progress(pd__mpix *x, bool wait) {
    for (int i = 0; i < x->npend;) {
        int done = 0;
        MPI_Status s;
        if (wait) PD_TRY(pd__wait(x, &x->pend[i].req, &s, false));
        else PD_MPI_TRY(MPI_Test(&x->pend[i].req, &done, &s), "send completion");
        if (wait || done) {
            pd__pool_put(&x->pool[x->pend[i].l * 2 + x->pend[i].dir], x->pend[i].buf);
            x->pend[i] = x->pend[--x->npend];
        } else {
            i++;
        }
    }
    return PD_OK;
}

static int pd__tag(const pd__mpix *x, int l, int dir, int mb) { return ((mb % x->window) * 2 + dir) * x->nlinks + l; }

static void *pd__mx_get_in(pd__transport *t, int l, int dir, size_t n) {
    pd__mpix *x = (pd__mpix *)t;
    pd__progress(x, false);
    pd__pool *q = &x->pool[l * 2 + dir];
    return q->n > 0 ? q->b[--q->n] : PD_MALLOC(n ? n : 1);
}

static void pd__mx_put_in(pd__transport *t, int l, int dir, void *buf) {
    pd__mpix *x = (pd__mpix *)t;
    pd__pool_put(&x->pool[l * 2 + dir], buf);
}

static pd_status pd__mx_send_in(pd__transport *t, int from, int to, int l, int dir, int mb, void *buf, size_t n,
                             bool *stop) {
    (void)from;
    (void)stop;
    pd__mpix *x = (pd__mpix *)t;
    if (n > (size_t)INT32_MAX) {
        PD_FREE(buf);
        return pd__err(PD_ERR_UNSUPPORTED, "MPI: a %zu-byte message", n);
    }
    if (x->npend == x->cap) {
        int cap = x->cap ? 2 * x->cap : 16;
        pd__pending *np = realloc(x->pend, sizeof *np * (size_t)cap);
        if (!np) {
            PD_FREE(buf);
            return pd__err(PD_ERR_NOMEM, "out of memory");
        }
        x->pend = np;
        x->cap = cap;
    }
    pd__pending *p = &x->pend[x->npend];
    int rc = MPI_Isend(buf, (int)n, MPI_BYTE, x->rank_of[to], pd__tag(x, l, dir, mb), x->comm, &p->req);
    if (rc != MPI_SUCCESS) {
        PD_FREE(buf);
        return pd__err(PD_ERR_IO, "MPI: sending microbatch %d to rank %d failed", mb, x->rank_of[to]);
    }
    p->buf = buf;
    p->l = l;
    p->dir = dir;
    x->npend++;
    return pd__progress(x, false);
}

static pd_status pd__mx_recv_in(pd__transport *t, int from, int to, int l, int dir, int mb, size_t n, void **buf,
                             bool *stop) {
    (void)to;
    (void)stop;
    pd__mpix *x = (pd__mpix *)t;
    void *b = pd__mx_get_in(t, l, dir, n);
    if (!b) return pd__err(PD_ERR_NOMEM, "out of memory for a %zu-byte message", n);
    MPI_Status s;
    MPI_Request req;
    int rc = MPI_Irecv(b, (int)n, MPI_BYTE, x->rank_of[from], pd__tag(x, l, dir, mb), x->comm, &req);
    if (rc == MPI_SUCCESS && pd__wait(x, &req, &s, true) != PD_OK) {
        pd__pool_put(&x->pool[l * 2 + dir], b);
        return PD_ERR_IO; /* another process failed: pd__wait said which */
    }
    int got = 0;
    if (rc == MPI_SUCCESS) MPI_Get_count(&s, MPI_BYTE, &got);
    if (rc != MPI_SUCCESS || (size_t)got != n) {
        pd__pool_put(&x->pool[l * 2 + dir], b);
        return pd__err(PD_ERR_IO, "MPI: receiving the %s of microbatch %d from rank %d failed (%d of %zu bytes)",
                       dir ? "gradients" : "activations", mb, x->rank_of[from], got, n);
    }
    *buf = b;
    return PD_OK;
}

/* The communicator of allreduce's group g (transport.h). */
static MPI_Comm pd__mx_comm(const pd__mpix *x, int g) {
    return g == PD__TIED ? x->tied : g == PD__CKPT ? x->ckcomm : g < 0 ? x->comm : x->group[g];
}

static pd_status pd__mx_allreduce_in(pd__transport *t, int g, void *data, int64_t n, bool f64) {
    pd__mpix *x = (pd__mpix *)t;
    MPI_Comm c = pd__mx_comm(x, g);
    if (c == MPI_COMM_NULL) return PD_OK;
    for (int64_t off = 0; off < n;) { /* counts are ints */
        int k = n - off > (1 << 30) ? 1 << 30 : (int)(n - off);
        void *at = (char *)data + (size_t)off * (f64 ? 8 : 4);
        MPI_Request req;
        PD_MPI_TRY(MPI_Iallreduce(MPI_IN_PLACE, at, k, f64 ? MPI_DOUBLE : MPI_FLOAT, MPI_SUM, c, &req), "all-reduce");
        PD_TRY(pd__wait(x, &req, MPI_STATUS_IGNORE, false));
        off += k;
    }
    return PD_OK;
}

static pd_status pd__mx_iallreduce_in(pd__transport *t, int g, void *data, int64_t n, bool f64) {
    pd__mpix *x = (pd__mpix *)t;
    if (g < 0 || g >= x->nworkers) return pd__mx_allreduce_in(t, g, data, n, f64); /* not a worker's: at once */
    MPI_Comm c = pd__mx_comm(x, g);
    if (c == MPI_COMM_NULL) return PD_OK;
    pd__arq *q = &x->ar[g];
    for (int64_t off = 0; off < n;) {
        int k = n - off > (1 << 30) ? 1 << 30 : (int)(n - off);
        if (q->n == q->cap) {
            int cap = q->cap ? 2 * q->cap : 64; /* grows in the first minibatch, then is kept */
            MPI_Request *nr = realloc(q->r, sizeof *nr * (size_t)cap);
            if (!nr) return pd__err(PD_ERR_NOMEM, "out of memory");
            q->r = nr;
            q->cap = cap;
        }
        void *at = (char *)data + (size_t)off * (f64 ? 8 : 4);
        PD_MPI_TRY(MPI_Iallreduce(MPI_IN_PLACE, at, k, f64 ? MPI_DOUBLE : MPI_FLOAT, MPI_SUM, c, &q->r[q->n]),
                   "all-reduce");
        q->n++;
        off += k;
    }
    for (int i = 0; i < q->n; i++) { /* MPI moves non-blocking collectives on inside its calls: one test */
        if (q->r[i] == MPI_REQUEST_NULL) continue;
        int done = 0;
        PD_MPI_TRY(MPI_Test(&q->r[i], &done, MPI_STATUS_IGNORE), "all-reduce");
        break;
    }
    return PD_OK;
}

/* Group g's sums only: another stage's thread here may be summing in its
 * own group meanwhile (its collectives are on another communicator, and
 * every wait polls, letting go of the lock, so neither holds the other up). */
static pd_status pd__mx_wait_all_in(pd__transport *t, int g) {
    pd__mpix *x = (pd__mpix *)t;
    if (g < 0 || g >= x->nworkers) return PD_OK;
    pd__arq *q = &x->ar[g];
    for (int i = 0; i < q->n; i++) /* only this group's thread touches q, waits included */
        if (q->r[i] != MPI_REQUEST_NULL) PD_TRY(pd__wait(x, &q->r[i], MPI_STATUS_IGNORE, false));
    q->n = 0;
    return PD_OK;
}

/* This process failed: every other process of the pipeline hears of it at
 * its next wait. The notices are never waited for (a process that already
 * failed may never receive one). */
static void pd__mx_fail_in(pd__transport *t, const char *msg) {
    pd__mpix *x = (pd__mpix *)t;
    if (x->failed) return; /* it heard of another's failure, or already told */
    x->failed = true;
    int n = 0, me = 0;
    MPI_Comm_size(x->comm, &n);
    MPI_Comm_rank(x->comm, &me);
    if (!(x->fails = PD_CALLOC((size_t)n + 1, sizeof(MPI_Request)))) return;
    snprintf(x->failmsg, sizeof x->failmsg, "%s", msg);
    int len = (int)strlen(x->failmsg) + 1;
    for (int r = 0; r < n; r++)
        if (r != me && MPI_Isend(x->failmsg, len, MPI_CHAR, r, x->abort_tag, x->comm, &x->fails[x->nfails]) == MPI_SUCCESS)
            x->nfails++;
}

static pd_status pd__mx_flush_in(pd__transport *t) { return pd__progress((pd__mpix *)t, true); }

/* The entry points: one thread at a time inside (x->mu). */
static void *pd__mx_get(pd__transport *t, int l, int dir, size_t n) {
    pd__mpix *x = (pd__mpix *)t;
    pthread_mutex_lock(&x->mu);
    void *b = pd__mx_get_in(t, l, dir, n);
    pthread_mutex_unlock(&x->mu);
    return b;
}
static void pd__mx_put(pd__transport *t, int l, int dir, void *buf) {
    pd__mpix *x = (pd__mpix *)t;
    pthread_mutex_lock(&x->mu);
    pd__mx_put_in(t, l, dir, buf);
    pthread_mutex_unlock(&x->mu);
}
static pd_status pd__mx_send(pd__transport *t, int from, int to, int l, int dir, int mb, void *buf, size_t n,
                             bool *stop) {
    pd__mpix *x = (pd__mpix *)t;
    pthread_mutex_lock(&x->mu);
    pd_status st = pd__mx_send_in(t, from, to, l, dir, mb, buf, n, stop);
    pthread_mutex_unlock(&x->mu);
    return st;
}
static pd_status pd__mx_recv(pd__transport *t, int from, int to, int l, int dir, int mb, size_t n, void **buf,
                             bool *stop) {
    pd__mpix *x = (pd__mpix *)t;
    pthread_mutex_lock(&x->mu);
    pd_status st = pd__mx_recv_in(t, from, to, l, dir, mb, n, buf, stop);
    pthread_mutex_unlock(&x->mu);
    return st;
}
static pd_status pd__mx_allreduce(pd__transport *t, int g, void *data, int64_t n, bool f64) {
    pd__mpix *x = (pd__mpix *)t;
    pthread_mutex_lock(&x->mu);
    pd_status st = pd__mx_allreduce_in(t, g, data, n, f64);
    pthread_mutex_unlock(&x->mu);
    return st;
}
static pd_status pd__mx_iallreduce(pd__transport *t, int g, void *data, int64_t n, bool f64) {
    pd__mpix *x = (pd__mpix *)t;
    pthread_mutex_lock(&x->mu);
    pd_status st = pd__mx_iallreduce_in(t, g, data, n, f64);
    pthread_mutex_unlock(&x->mu);
    return st;
}
static pd_status pd__mx_wait_all(pd__transport *t, int g) {
    pd__mpix *x = (pd__mpix *)t;
    pthread_mutex_lock(&x->mu);
    pd_status st = pd__mx_wait_all_in(t, g);
    pthread_mutex_unlock(&x->mu);
    return st;
}
static void pd__mx_fail(pd__transport *t, const char *msg) {
    pd__mpix *x = (pd__mpix *)t;
    pthread_mutex_lock(&x->mu);
    pd__mx_fail_in(t, msg);
    pthread_mutex_unlock(&x->mu);
}
static pd_status pd__mx_flush(pd__transport *t) {
    pd__mpix *x = (pd__mpix *)t;
    pthread_mutex_lock(&x->mu);
    pd_status st = pd__mx_flush_in(t);
    pthread_mutex_unlock(&x->mu);
    return st;
}

static void pd__mx_destroy(pd__transport *t) {
    pd__mpix *x = (pd__mpix *)t;
    if (!x) return;
    if (!x->failed) pd__mx_flush(t);
    for (int i = 0; x->pool && i < 2 * x->nlinks; i++) {
        while (x->pool[i].n > 0) PD_FREE(x->pool[i].b[--x->pool[i].n]);
        free(x->pool[i].b);
    }
    PD_FREE(x->pool);
    /* After a failure, sends to a process that stopped may never complete,
     * and a collective may be left open: their requests are released, their
     * buffers and the communicators kept (MPI may still touch them). */
    for (int i = 0; x->failed && i < x->npend; i++) MPI_Request_free(&x->pend[i].req);
    for (int i = 0; i < x->nfails; i++) MPI_Request_free(&x->fails[i]);
    PD_FREE(x->fails);
    for (int w = 0; x->ar && w < x->nworkers; w++) free(x->ar[w].r);
    PD_FREE(x->ar);
    free(x->pend);
    for (int w = 0; !x->failed && x->group && w < x->nworkers; w++)
        if (x->group[w] != MPI_COMM_NULL) MPI_Comm_free(&x->group[w]);
    PD_FREE(x->group);
    if (!x->failed && x->tied != MPI_COMM_NULL) MPI_Comm_free(&x->tied);
    if (!x->failed && x->comm != MPI_COMM_NULL) MPI_Comm_free(&x->comm);
    if (!x->failed && x->ckcomm != MPI_COMM_NULL) MPI_Comm_free(&x->ckcomm);
    PD_FREE(x->rank_of);
    pthread_mutex_destroy(&x->mu);
    PD_FREE(x);
}

static const pd__transport_i pd__mpi_vt = {"mpi", pd__mx_get, pd__mx_send, pd__mx_recv, pd__mx_put,
                                           pd__mx_allreduce, pd__mx_flush, pd__mx_destroy, pd__mx_fail,
                                           pd__mx_iallreduce, pd__mx_wait_all};

/* Waits outside this transport (the NCCL transport's, on the GPU) look
 * here between polls, so that a failed peer never leaves them waiting. */
pd_status pd__mpi_transport_check(pd__transport *t) {
    if (!t || t->vt != &pd__mpi_vt) return PD_OK;
    pd__mpix *x = (pd__mpix *)t;
    pthread_mutex_lock(&x->mu);
    pd_status st = x->failed ? pd__err(PD_ERR_IO, "MPI: the pipeline's run failed (here, or a notice came before)")
                             : pd__heard(x);
    pthread_mutex_unlock(&x->mu);
    return st;
}

pd_status pd__mpi_transport_create(int nthreads, const int *rank_of, const int *worker_of, const bool *tied,
                                   int nworkers, int nlinks, int window, int color, const int *stopped,
                                   pd__transport **out) {
    if (!pd__mpi_on) return pd__err(PD_ERR_INVALID, "MPI is not initialized");
    int me, world_me, tag_ub_flag = 0, *tag_ub = NULL;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_me);
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &tag_ub_flag);
    int64_t need = (int64_t)window * 2 * (nlinks > 0 ? nlinks : 1) + 1; /* + the failure notice's */
    if (tag_ub_flag && tag_ub && need > *tag_ub)
        return pd__err(PD_ERR_UNSUPPORTED, "MPI: %lld message tags needed, this MPI has %d", (long long)need, *tag_ub);
    pd__mpix *x = PD_CALLOC(1, sizeof *x);
    if (!x) return pd__err(PD_ERR_NOMEM, "out of memory");
    x->base.vt = &pd__mpi_vt;
    x->comm = x->tied = x->ckcomm = MPI_COMM_NULL;
    x->stopped = stopped;
    pthread_mutex_init(&x->mu, NULL);
    x->nworkers = nworkers;
    x->nthreads = nthreads;
    x->nlinks = nlinks > 0 ? nlinks : 1;
    x->window = window;
    x->abort_tag = (int)need - 1;
    x->rank_of = PD_MALLOC(sizeof(int) * (size_t)nthreads);
    x->pool = PD_CALLOC(2 * (size_t)x->nlinks, sizeof(pd__pool));
    x->group = PD_MALLOC(sizeof(MPI_Comm) * ((size_t)nworkers + 1));
    x->ar = PD_CALLOC((size_t)nworkers + 1, sizeof(pd__arq));
    for (int w = 0; x->group && w < nworkers; w++) x->group[w] = MPI_COMM_NULL;
    if (!x->rank_of || !x->pool || !x->group || !x->ar) {
        pd__mx_destroy(&x->base);
        return pd__err(PD_ERR_NOMEM, "out of memory");
    }
    memcpy(x->rank_of, rank_of, sizeof(int) * (size_t)nthreads);
    pd_status st = PD_OK;
    /* this pipeline's processes: those of its color, numbered as rank_of numbers them */
    if (MPI_Comm_split(MPI_COMM_WORLD, color, world_me, &x->comm) != MPI_SUCCESS)
        st = pd__err(PD_ERR_IO, "MPI: cannot make the pipeline's communicator");
    if (st == PD_OK) MPI_Comm_rank(x->comm, &me);
    if (st == PD_OK && MPI_Comm_dup(x->comm, &x->ckcomm) != MPI_SUCCESS)
        st = pd__err(PD_ERR_IO, "MPI: cannot make the checkpoints' communicator");
    for (int w = 0; st == PD_OK && w < nworkers; w++) { /* collective: every process, every worker */
        int mine = 0, members = 0;
        for (int i = 0; i < nthreads; i++)
            if (worker_of[i] == w) members++, mine |= rank_of[i] == me;
        if (MPI_Comm_split(x->comm, mine && members > 1 ? w : MPI_UNDEFINED, me, &x->group[w]) != MPI_SUCCESS)
            st = pd__err(PD_ERR_IO, "MPI: cannot make the communicator of stage %d's replicas", w);
    }
    int holds = 0, holders = 0; /* collective too, where some thread reads a tied parameter */
    for (int i = 0; tied && i < nthreads; i++) holds |= tied[i] && rank_of[i] == me, holders += tied[i];
    if (st == PD_OK && holders > 0 && MPI_Comm_split(x->comm, holds ? 0 : MPI_UNDEFINED, me, &x->tied) != MPI_SUCCESS)
        st = pd__err(PD_ERR_IO, "MPI: cannot make the communicator of the tied parameters' holders");
    if (st != PD_OK) {
        pd__mx_destroy(&x->base);
        return st;
    }
    *out = &x->base;
    return PD_OK;
}

struct pd__mpi_group {
    MPI_Comm comm;
};

pd_status pd__mpi_group_split(int color, int key, pd__mpi_group **out) {
    pd__mpi_group *g = PD_CALLOC(1, sizeof *g);
    if (!g) return pd__err(PD_ERR_NOMEM, "out of memory");
    if (MPI_Comm_split(MPI_COMM_WORLD, color, key, &g->comm) != MPI_SUCCESS) {
        PD_FREE(g);
        return pd__err(PD_ERR_IO, "MPI: cannot split the world (color %d)", color);
    }
    *out = g;
    return PD_OK;
}

pd_status pd__mpi_group_allreduce(pd__mpi_group *g, void *data, int64_t n, bool f64) {
    for (int64_t off = 0; off < n;) {
        int k = n - off > (1 << 30) ? 1 << 30 : (int)(n - off);
        void *at = (char *)data + (size_t)off * (f64 ? 8 : 4);
        PD_MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, at, k, f64 ? MPI_DOUBLE : MPI_FLOAT, MPI_SUM, g->comm), "all-reduce");
        off += k;
    }
    return PD_OK;
}

void pd__mpi_group_free(pd__mpi_group *g) {
    if (!g) return;
    MPI_Comm_free(&g->comm);
    PD_FREE(g);
}

#else /* no MPI */

static pd_status pd__no_mpi(void) {
    return pd__err(PD_ERR_UNSUPPORTED, "this pdonnx was built without MPI (install libopenmpi-dev and rebuild)");
}
pd_status pd__mpi_init(int *rank, int *size) {
    *rank = 0;
    *size = 1;
    const char *v = getenv("OMPI_COMM_WORLD_SIZE");
    if (!v) v = getenv("PMI_SIZE");
    if (v && atoi(v) > 1) return pd__no_mpi();
    return PD_OK;
}
bool pd__mpi_active(void) { return false; }
void pd__mpi_finalize(void) {}
void pd__mpi_abort(int code) { (void)code; }
pd_status pd__mpi_bcast(void **buf, size_t *len) {
    (void)buf;
    (void)len;
    return pd__no_mpi();
}
int pd__mpi_agree(bool ok) { return ok ? -1 : 0; }
pd_status pd__mpi_agree_status(pd_status st) { return st; }
bool pd__mpi_same(int64_t v) {
    (void)v;
    return true;
}
bool pd__mpi_relayed(const char *msg) {
    (void)msg;
    return false;
}
pd_status pd_mpi_init(int *rank, int *size) {
    (void)rank, (void)size;
    return pd__no_mpi();
}
void pd_mpi_finalize(void) {}
pd_status pd__mpi_use(void) { return pd__no_mpi(); }
pd_status pd__mpi_gather_text(const char *buf, size_t len, const char *sep, char **all, size_t *alllen) {
    (void)buf, (void)len, (void)sep, (void)all, (void)alllen;
    return pd__no_mpi();
}
int pd__mpi_rank(void) { return 0; }
int pd__mpi_local_rank(void) { return 0; }
pd_status pd__mpi_allreduce_f64(double *v, int64_t n) {
    (void)v;
    (void)n;
    return pd__no_mpi();
}
pd_status pd__mpi_transport_create(int nthreads, const int *rank_of, const int *worker_of, const bool *tied,
                                   int nworkers, int nlinks, int window, int color, const int *stopped,
                                   pd__transport **out) {
    (void)nthreads, (void)rank_of, (void)worker_of, (void)tied, (void)nworkers, (void)nlinks, (void)window, (void)color;
    (void)stopped, (void)out;
    return pd__no_mpi();
}
pd_status pd__mpi_transport_check(pd__transport *t) {
    (void)t;
    return PD_OK;
}
pd_status pd__mpi_group_split(int color, int key, pd__mpi_group **out) {
    (void)color, (void)key, (void)out;
    return pd__no_mpi();
}
pd_status pd__mpi_group_allreduce(pd__mpi_group *g, void *data, int64_t n, bool f64) {
    (void)g, (void)data, (void)n, (void)f64;
    return pd__no_mpi();
}
void pd__mpi_group_free(pd__mpi_group *g) { (void)g; }

#endif
