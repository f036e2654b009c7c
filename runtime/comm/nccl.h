/* nccl.h - private: the NCCL transport (runtime/comm/nccl.c) for device
 * tensors between the pipeline's processes, one GPU each
 * (docs/DISTRIBUTED.md, "NCCL"). Built into the CUDA module (libpdcuda.so)
 * with -Dnccl (CUDA backend + NCCL + MPI; PD_HAVE_NCCL); the pipeline's GPU
 * stages use it between processes, on plain device pointers and the stage's
 * stream, through the module's table (cuda.h: pd__cuda_nccl_*, which
 * forward here).
 *
 * Communicators are bootstrapped over MPI: within the processes of `color`
 * (as pd__mpi_transport_create numbers them), rank 0 calls ncclGetUniqueId
 * and broadcasts it (MPI_Bcast), every process calls ncclCommInitRank. Each
 * link and direction gets a communicator of its own (ncclCommSplit), since
 * NCCL matches a pair's sends and receives in issue order, not by tag: per
 * link and direction the schedules send and receive microbatches in the
 * same (ascending) order, and activations and gradients never wait behind
 * each other. Replicated stages all-reduce in a communicator of their
 * processes (ncclCommSplit, NCCL_SPLIT_NOCOLOR elsewhere).
 *
 * Stream order, never a host wait: buffers are device memory from a pool
 * (cudaMalloc'd once per size class, reused); send enqueues ncclSend on the
 * link's stream after the compute stream's work so far (an event), recv
 * enqueues ncclRecv there and makes the compute stream wait for it, so the
 * returned buffer is ready for kernels launched on the compute stream
 * afterwards; a buffer put back (or sent) is reused only once its event
 * has completed. allreduce takes device pointers (floats or doubles) and
 * runs on the compute stream; it returns once the sum is enqueued (a host
 * reader synchronizes the stream: pd__nccl_sync). flush waits for every
 * send. fail is NULL: failure notices go by the MPI transport. */
#ifndef PD_NCCL_H
#define PD_NCCL_H

#include "transport.h"

/* Collective over every MPI process (the split by color). nthreads,
 * rank_of, worker_of, nworkers, nlinks, color: as for
 * pd__mpi_transport_create. device: this process's CUDA device; stream: the
 * compute stream (a cudaStream_t; NULL: the legacy default stream). */
pd_status pd__nccl_transport_create(int nthreads, const int *rank_of, const int *worker_of, int nworkers, int nlinks,
                                    int color, int device, void *stream, pd__transport **out);
/* Waits for the compute stream (the sums of allreduce, the receives). */
pd_status pd__nccl_sync(pd__transport *t);
/* CUDA devices visible to this process (0 where there is no driver or GPU). */
int pd__nccl_devices(void);

#endif
