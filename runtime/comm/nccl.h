/* nccl.h - private: the NCCL transport (runtime/comm/nccl.c) for device
 * tensors between the pipeline's processes, one GPU each
 * (docs/DISTRIBUTED.md, "NCCL"). Built into the CUDA module (libpdcuda.so)
 * with -Dnccl (CUDA backend + NCCL + MPI; PD_HAVE_NCCL); the pipeline's GPU
 * stages use it between processes, on plain device pointers and the stage's
 * stream, through the module's table (cuda.h: pd__cuda_nccl_*, which
 * forward here).
 *
 * How it works: docs/INTERNALS.md, "runtime/comm/nccl.h".
 */
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
