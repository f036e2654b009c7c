/* transport.h - private: how the pipeline's threads exchange messages
 * (docs/DISTRIBUTED.md). One interface, pd__transport_i, two
 * implementations: in-process queues between the threads of one process
 * (runtime/pipeline.c) and MPI point-to-point between processes
 * (runtime/comm/mpi.c). The pipeline picks, for every message, the one that
 * reaches its peer. Under MPI a pipeline's processes are those of one color
 * (a communicator split from the world: AvgPipe runs K pipelines side by side);
 * rank_of numbers them within it.
 *
 * How it works: docs/INTERNALS.md, "runtime/comm/transport.h".
 */
#ifndef PD_TRANSPORT_H
#define PD_TRANSPORT_H

#include "../../core/pd_internal.h"

typedef struct pd__transport pd__transport;

typedef struct pd__transport_i {
    const char *name;
    void *(*get)(pd__transport *t, int l, int dir, size_t n);
    pd_status (*send)(pd__transport *t, int from, int to, int l, int dir, int mb, void *buf, size_t n, bool *stop);
    pd_status (*recv)(pd__transport *t, int from, int to, int l, int dir, int mb, size_t n, void **buf, bool *stop);
    void (*put)(pd__transport *t, int l, int dir, void *buf);
    /* Sums n values (floats, or doubles when f64) in place across the
     * members of group g (-1: every process; PD__TIED: the processes
     * holding a stage that reads a tied parameter; PD__CKPT: every process,
     * on a communicator of its own, so that a sum started by one thread in
     * the middle of a run, the same on every process, cannot be matched with
     * the stages' own; else the processes holding worker g's replicas). A
     * process outside g returns at once. */
    pd_status (*allreduce)(pd__transport *t, int g, void *data, int64_t n, bool f64);
    /* The run is over: every send has completed. */
    pd_status (*flush)(pd__transport *t);
    void (*destroy)(pd__transport *t);
    /* This process's run failed (msg says where): the transport tells the
     * processes it talks to, whose waits then fail naming this one, instead
     * of waiting for ever. NULL: nothing to tell (one process). */
    void (*fail)(pd__transport *t, const char *msg);
    /* allreduce started and left running, for a worker's group g >= 0
     * (NULL: none; the pipeline then sums at ALLREDUCE): the data is not to
     * be touched until wait_all(g) has completed every sum started in g.
     * Every member of the group starts the same sums in the same order. The
     * sums are the allreduce's, element by element. Each group's sums are
     * kept apart, so that threads of one process running replicas of
     * different stages wait only for their own. */
    pd_status (*iallreduce)(pd__transport *t, int g, void *data, int64_t n, bool f64);
    pd_status (*wait_all)(pd__transport *t, int g);
} pd__transport_i;

enum { PD__TIED = -2, PD__CKPT = -3 }; /* allreduce's groups: the tied parameters' holders; every process, for checkpoints (MPI) */

struct pd__transport {
    const pd__transport_i *vt;
};

/* ---- MPI (runtime/comm/mpi.c; stubs that fail when built without MPI) ---- */

/* Initializes MPI when this process was started by mpirun/srun (a world of
 * more than one process) and returns its rank and size; else 0 and 1.
 * (pd_mpi_init, public, initializes it whatever the world, or adopts the
 * program's.) pd__mpi_finalize finalizes only an MPI pdonnx initialized. */
pd_status pd__mpi_init(int *rank, int *size);
bool pd__mpi_active(void);
void pd__mpi_finalize(void);
/* Ends every process of the job with this exit code (after a message). */
void pd__mpi_abort(int code);
/* Rank 0's bytes to every rank (*len and *buf set on the others; PD_FREE it). */
pd_status pd__mpi_bcast(void **buf, size_t *len);
/* Every process says whether it is fine; the lowest rank that is not (-1: none). */
int pd__mpi_agree(bool ok);
/* The same for a status (collective over every process): PD_OK where every
 * process had PD_OK; otherwise every process returns the lowest failing
 * rank's status and message, prefixed with that rank ("rank 1: ..."); a
 * rank that failed itself is preferred to one that only heard of another's
 * failure through the transport (pd__mpi_relayed: its message says so). */
pd_status pd__mpi_agree_status(pd_status st);
bool pd__mpi_relayed(const char *msg);
/* Whether every process gave the same v (collective over every process). */
bool pd__mpi_same(int64_t v);
/* MPI up for the public API: initialized by pd_mpi_init, or by the program
 * itself at MPI_THREAD_SERIALIZED or above (adopted, never finalized here). */
pd_status pd__mpi_use(void);
int pd__mpi_rank(void);
/* This process's rank among the processes on its machine (MPI-3's shared-
 * memory split, made once; collective the first time); 0 without MPI. */
int pd__mpi_local_rank(void);
/* Rank 0 receives every process's bytes, in rank order, joined by `sep`
 * (*all malloc'd there; NULL elsewhere). */
pd_status pd__mpi_gather_text(const char *buf, size_t len, const char *sep, char **all, size_t *alllen);
/* Sums n doubles in place across every process. */
pd_status pd__mpi_allreduce_f64(double *v, int64_t n);

/* The MPI transport of a pipeline with nthreads threads, thread i run by
 * process rank_of[i]; workers: per thread its worker (for the allreduce
 * groups); tied (NULL: none): per thread whether its stage reads a tied
 * parameter (the PD__TIED group); links and window: tags are (mb mod window, dir, link), so a
 * window larger than the microbatches in flight on a link cannot collide.
 * Several threads of this process (stages) may use it at once; stopped (may
 * be NULL), when it reads non-zero (atomically), makes every wait give up:
 * another thread of this process failed and told the others. */
pd_status pd__mpi_transport_create(int nthreads, const int *rank_of, const int *worker_of, const bool *tied,
                                   int nworkers, int nlinks, int window, int color, const int *stopped,
                                   pd__transport **out);

/* One look, never a wait, at what ends the MPI transport t's waits:
 * another process's failure notice (the error names that rank: "MPI: rank
 * 1 failed: ..."), a stop here, or a run that already failed; PD_OK
 * otherwise, and for a t that is not an MPI transport. The NCCL
 * transport's waits on the GPU poll it (nccl.h). */
pd_status pd__mpi_transport_check(pd__transport *t);

/* A communicator of the processes that give the same color (collective over
 * every process), ranked by key: AvgPipe's processes holding the same stage
 * of the K pipelines. */
typedef struct pd__mpi_group pd__mpi_group;
pd_status pd__mpi_group_split(int color, int key, pd__mpi_group **out);
/* Sums n values (floats, or doubles when f64) in place across the group. */
pd_status pd__mpi_group_allreduce(pd__mpi_group *g, void *data, int64_t n, bool f64);
void pd__mpi_group_free(pd__mpi_group *g);

#endif
