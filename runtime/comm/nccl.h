/* nccl.h - private: the NCCL transport (runtime/comm/nccl.c) for device
 * tensors between the pipeline's processes, one GPU each
 * (docs/DISTRIBUTED.md, "NCCL"). Built into the CUDA module (libpdcuda.so)
 * with -Dnccl (CUDA backend + NCCL + MPI; PD_HAVE_NCCL); the pipeline's GPU
 * stages use it between processes, on plain device pointers and the stage's
 * stream, through the module's table (cuda.h: pd__cuda_nccl_*, which
 * forward here).
 *
 * Communicators are bootstrapped over MPI: within the processes of `color`
 * (as pd__mpi_transport_create numbers them), rank 0 makes an id per
 * communicator (ncclGetUniqueId) and broadcasts them (MPI_Bcast), every
 * process initializes its communicators from them (ncclCommInitRankConfig,
 * non-blocking). Each link and direction gets a communicator of its own,
 * since NCCL matches a pair's sends and receives in issue order, not by
 * tag: per link and direction the schedules send and receive microbatches
 * in the same (ascending) order, and activations and gradients never wait
 * behind each other. Replicated stages all-reduce in a communicator of
 * their processes. The processes agree, before and after NCCL's
 * initialization, that every one got through; one that fails during it
 * tells the others (MPI), which abort theirs: a set-up failure is an error
 * on every process, naming its rank, never a hang.
 *
 * Stream order: buffers are device memory from a pool (cudaMalloc'd once
 * per size class, reused); send enqueues ncclSend on the link's stream
 * after the compute stream's work so far (an event) and returns; recv
 * enqueues ncclRecv there, makes the compute stream wait for it, and
 * returns once the message is there (a host wait, polled, as the MPI
 * transport's receive); a buffer put back (or sent) is reused only once
 * its event has completed. allreduce takes device pointers (floats or
 * doubles), runs on the compute stream and returns once the sum is done.
 * flush waits for every send.
 *
 * No wait blocks inside NCCL or CUDA: every wait (recv, allreduce, flush,
 * pd__nccl_sync, and NCCL's own ncclInProgress) polls, with sched_yield,
 * and between polls looks at the communicators' asynchronous errors and at
 * the watch transport (pd__mpi_transport_check: another process's failure
 * notice, or a stop here). On either, every communicator is aborted
 * (ncclCommAbort: NCCL's kernels still waiting for a peer return, the
 * streams drain) and the wait fails naming the cause ("MPI: rank 1 failed:
 * ..."). fail (this process failed) aborts them too; the notice itself goes
 * by the MPI transport. After an abort every call fails: the job is meant
 * to end. destroy after a clean run finalizes every communicator
 * (ncclCommFinalize, which waits for the other processes of it: polled and
 * watched as the other waits) before destroying it; after a failure they
 * were aborted already. The watch transport must outlive this one. */
#ifndef PD_NCCL_H
#define PD_NCCL_H

#include "transport.h"

/* Collective over every MPI process (the split by color). nthreads,
 * rank_of, worker_of, nworkers, nlinks, color: as for
 * pd__mpi_transport_create. device: this process's CUDA device; stream: the
 * compute stream (a cudaStream_t; NULL: the legacy default stream); watch:
 * the pipeline's MPI transport, whose failure notices end the waits (NULL:
 * none; only the communicators' own errors then). */
pd_status pd__nccl_transport_create(int nthreads, const int *rank_of, const int *worker_of, int nworkers, int nlinks,
                                    int color, int device, void *stream, pd__transport *watch, pd__transport **out);
/* Waits for the compute stream (polled, as every wait here). */
pd_status pd__nccl_sync(pd__transport *t);
/* Whether a transfer of t (a pd__transport) may still be running on the
 * device: a send waits on its link's stream for its receiver. The compute
 * context's hook (pd__cuda_set_pending): cudaFree meanwhile would wait for
 * that receiver. One look, never a wait. */
bool pd__nccl_pending(void *t);
/* CUDA devices visible to this process (0 where there is no driver or GPU). */
int pd__nccl_devices(void);

#endif
