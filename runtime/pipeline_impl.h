/* pipeline_impl.h - private to the pipeline executor: its types (the
 * threads, chunks, links, queues and the pipeline itself) and the functions
 * its files share. runtime/pipeline*.c hold the schedule's executor, one
 * concern each (pipeline.c's opening comment lists them);
 * runtime/pipeline_dev.c the GPU stages' side of each instruction
 * (pd__dev_*), over runtime/pipeline_devmem.c's device memory, which is
 * written against the device interface (runtime/device.h). */
#ifndef PD_PIPELINE_IMPL_H
#define PD_PIPELINE_IMPL_H

#include "pipeline.h"
#include "../core/schedule.h"
#include "checkpoint.h"
#include "comm/transport.h"
#ifdef PD_HAVE_NCCL
#include "cuda/cuda.h" /* pd__cuda_nccl_transport_create: the transport is in the CUDA module */
#endif
#include "optim.h"
#include "pipeline_devmem.h"
#include "session.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct pd__msg {
    int32_t mb;
    void *buf;
} pd__msg;

typedef struct pd__queue {
    pd__msg *ring;
    int cap, head, n;
    void **pool;        /* spent message buffers, reused (all of one link's size): no malloc per message */
    int npool;
} pd__queue;

typedef struct pd__link {
    int *t;            /* tensors carried forward (values) */
    int nt;
    int *gt, ngt;      /* tensors whose gradients are carried backward */
    int *bt, nbt;      /* tensors whose values are carried backward (bipartition) */
    size_t act_bytes;  /* one forward message */
    size_t grad_bytes; /* one backward message: those gradients, then those values */
    pd__queue fwd, bwd;
} pd__link;

typedef struct pd__stash {
    int32_t version;    /* -1: free */
    float *w;           /* the stage's parameters, packed */
} pd__stash;

typedef struct pd__vstage { /* virtual stage k: what it computes */
    int *nodes, nnodes; /* forwards, in topological order */
    int *bnodes, nbnodes; /* backwards (the same nodes unless bipartition) */
    int *params, np;    /* session parameter indices owned */
    int *bufs, nbufs;   /* tensors its training forward writes (BatchNorm running statistics) */
    int *sp, nsp;       /* parameters an earlier stage owns that it reads too (tied weights) */
    int64_t *spk, spacked; /* their offsets in a chunk's gradient buffer (sg); floats in it */
    int64_t *pk, packed; /* offset of each in a stash; floats in one */
    double act_bytes;   /* one microbatch's activations: its nodes' outputs and what it receives */
    double keep_bytes;  /* of them, what it receives (kept per microbatch under recomputation) */
} pd__vstage;

typedef struct pd__chunk { /* a virtual stage on one replica of its worker */
    int k;              /* the virtual stage */
    pd__actx **slot;
    int32_t *slot_ver;  /* version of the F in each slot; -1: none in flight */
    pd__stash *stash;
    int nstash;
    int32_t live;       /* version of the live weights (STEPs this run) */
    int *need_until;    /* per version: index of the last F/B/W naming it (this run) */
    int peak_versions;  /* most versions held at once (this run) */
    float *sg;          /* gradients of the shared parameters it reads (vstage sp) */
    /* in-process messages are handed over, not unpacked: while microbatch
     * mb is in flight, the views of what it received point into the message
     * buffers held[2*slot] (activations, link k-1) and held[2*slot+1]
     * (gradients, link k); back to the pool when its B (W) and SEND_GRAD
     * are done. orig: the views' own pointers, per slot, link k-1's then k's */
    void **held;
    void **orig;
    int norig;          /* per slot */
    bool *sent;         /* per slot: its SEND_GRAD ran */
    bool dev;           /* a GPU stage's: its weights and stashes are on the device (pd__dev_*), stash[].w unused */
    /* activation recomputation (pd__pipe.recompute): the activations every
     * slot's context reads but does not own, of the one microbatch whose
     * forward last ran into them (rc_owner: its slot, -1 none); rc_bufs
     * saves the BatchNorm statistics a forward run again must not update */
    void *rc_vals;
    int rc_owner;
    void *rc_bufs;
    /* a replica r > 0's BatchNorm statistics (every slot's views): its own,
     * as each replica's device twin keeps; replica 0's are the session's,
     * the model's (two replicas updating those in place would race) */
    void *rep_bufs;
} pd__chunk;

typedef struct pd__ev {
    int64_t t0, t1;     /* ns since the run's start */
    int32_t mb;
    uint8_t op;
    int16_t chunk;
} pd__ev;

typedef struct pd__wk { /* a thread: replica r of worker w */
    struct pd__pipe *p;
    int w, r, nrep;
    pd__chunk *ch;      /* one per chunk */
    pd__exec x;
    float *grads;       /* r > 0: its own gradient slab (the session's layout) */
    int64_t updates;
    pd__ev *ev;
    int nev, evcap;
    int inflight, peak_act;
    int64_t recomputes; /* forwards run again (recomputation) this run */
    double busy_ms;
    /* snapshots: per boundary b of the run, the index of its first
     * instruction of a minibatch >= b and of its last one < b */
    int *kfirst, *klast;
    int64_t next_first, next_last; /* the next boundaries to pass (of kfirst, klast) */
    int64_t copied_boundary;       /* the boundary whose buffers are being copied */
    double snap_ms;        /* time spent on the boundary being taken */
    float *ared;           /* across processes, or a GPU stage's replicas here: the packed gradients summed */
    int64_t ared_n;
    double *gnpart;        /* across processes: per worker its squared gradient norm (P), all-reduced at STEP */
    int *arfirst;          /* across processes, a replica: per parameter of its stage, the backward node after
                            * which its gradient is final (pd__backward_overlapped) */
    bool ar_started;       /* this minibatch's gradient all-reduces are running (ALLREDUCE waits) */
    int *tup, ntup;        /* across processes: tied parameters another process owns whose copy it updates */
    pd__gpu *dev;          /* a GPU stage: its device side (pipeline_devmem.h); NULL on the CPU */
} pd__wk;

typedef struct pd__bar {
    int n, gen;
} pd__bar;

typedef struct pd__tie { /* across processes: a parameter several virtual stages read (tied weights) */
    int i, owner;        /* its session index; the virtual stage owning it */
    int nslot;           /* its slots: one per stage reading it (owner included), or one for two (pd__sum_tied_remote) */
    int64_t off;         /* its slots in pd__pipe.tbuf, in stage order, numel each */
    bool here;           /* a stage of this process reads it: this process keeps a copy up to date */
} pd__tie;

typedef struct pd__qx { /* the in-process transport: the links' queues */
    pd__transport base;
    struct pd__pipe *p;
} pd__qx;

struct pd__pipe {
    pd_graph *g;
    pd_session *s;
    pd__slabs sl;
    pd_train_options o;
    pd__sched_kind kind;
    bool vertical_sync; /* pipedream: every stage runs a microbatch on stage 0's version */
    bool recompute;     /* plan->recompute: a slot keeps what it received, its forward redone before its backward */
    bool shared;        /* a parameter read by several virtual stages */
    bool loaded;        /* lazy_weights: this process's stages' parameters are read (stageload.c) */
    pd__bar allbar;     /* every thread meets (STEP with shared parameters) */
    int nworkers, nchunks, nvstages, nmicro, nslots; /* workers, chunks per worker, virtual stages, microbatches */
    int64_t rows;      /* per microbatch */
    int pred, labels_input;
    /* rows on demand (pd__pipe_set_ring): inputs and labels hold ring steps
     * of rows, step k in slot k % ring, written by ring_fill before its first
     * microbatch is read; ring_at[slot]: the step it holds (-1: none) */
    int ring;
    int64_t *ring_at;
    pd__ring_fill ring_fill;
    void *ring_ctx;
    pd__vstage *vs;    /* nvstages virtual stages */
    int *rep;          /* per worker: replicas */
    pd__wk *wk;        /* nwk threads, worker by worker */
    int nwk;
    pd__bar *bar;      /* per worker */
    pd__link *link;    /* nvstages - 1: link s from virtual stage s to s+1 */
    /* GPU stages (--device cuda; the end of the file): set up at the first
     * run, when the ranks are known, for this process's threads only */
    bool gpu, gready, gpush; /* gpush: a resume restored the host side, which the devices take at the next run */
    bool *gneed;          /* per virtual stage and tensor: its contexts hold it (pd__pipe_create's) */
    int *gdev;            /* per worker: its CUDA device */
    bool *gfix;           /* per worker: the plan names it (else under MPI: --device's index + the local rank) */
    int lrank;            /* under MPI: this process's rank on its machine (pd__mpi_local_rank) */
    int gcolor;           /* under MPI: the color of pd__pipe_set_ranks_in */
    pd__glink **glink;    /* per link within the process: its device message buffers (pipeline_devmem.h) */
    pd__transport *dremote; /* across processes: NCCL (comm/nccl.h); NULL: GPU stages go through host memory over MPI */
    int64_t steps;     /* steps done by earlier runs */
    /* transports: threads of this process talk through the queues; with
     * MPI, thread i runs in process rank_of[i] and talks to the others there */
    pd__qx local;
    pd__transport *remote;
    bool ar_overlap;      /* replicas' all-reduces started during the last backward (PDONNX_ALLREDUCE_OVERLAP=0: off) */
    int rank;
    int nlocal;           /* threads this process runs (under MPI several stages may share a process) */
    int stopped;          /* p->abort for the MPI transport's waits (atomic) */
    int *rank_of, *wbase; /* per thread; per worker: its first thread */
    int *first_rank;      /* per worker: the plan's rank of its replica 0 */
    pd__tie *tie;         /* tied parameters across processes (pd__tied_setup) */
    int nties, tie_thread; /* ...; this process's thread that sums them at STEP (-1: it holds no copy) */
    float *tbuf;          /* their slots, all-reduced among the holders */
    int64_t tbuf_n;
    int fail_stage, fail_op, fail_mb; /* test hook: this instruction fails */
    double last_ms;
    /* snapshots (docs/CHECKPOINT.md): part[w] holds worker w's records,
     * its buffers first (part_pre bytes), then its state */
    pd__snap_hooks hooks;
    bool hooks_on;
    char **part;
    size_t *part_cap, *part_pre, *part_len;
    int8_t *want;         /* per boundary of the run */
    int64_t decided, last_taken, snap_b, resume_b;
    int snap_have, snap_need; /* parts deposited; parts this process takes */
    int decider;              /* the thread that decides the boundaries (pd__snap_decide) */
    double snap_cur_ms, snap_pause_ms;
    int64_t snaps_taken;
    /* the global gradient norm of an update (flushing schedules): each
     * worker's sum of squares, added in worker order once all are in */
    struct pd__gn {
        int64_t t;     /* the update the slot holds */
        int arrived;
        bool reduced;  /* under MPI: the parts summed across the processes */
        pd_status st;
        double *part;  /* per worker */
    } gn[4];
    /* one run */
    const pd__schedule *sched;
    int64_t nmb;          /* minibatches */
    const pd_tensor *inputs, *labels;
    pd_step_result *res;
    double *mbloss;       /* per microbatch its loss / M, added in microbatch order once a step's are in (pd__mb_result) */
    int *mbn;             /* per step: its microbatches' losses in */
    int64_t t0;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool abort;
    bool running;   /* the stage threads run (p->mu): a checkpoint writer may then poll the transport */
    pd_status err;
    char errmsg[1024];
};

/* GPU stages (--device cuda): the end of the file */

/* ---- GPU stages (pipeline_dev.c): each the device side of an instruction or a phase ---- */

pd_status pd__dev_prepare(pd__pipe *p, const pd_plan *plan, const pd_train_options *o, bool **need);
pd_status pd__dev_setup(pd__pipe *p);
void pd__dev_teardown(pd__pipe *p);
pd_status pd__dev_allreduce(pd__wk *W, float f);
pd_status pd__dev_grads_down(pd__wk *W);
pd_status pd__dev_grads_up(pd__wk *W, const float *sum);
pd_status pd__dev_use(pd__wk *W, pd__chunk *C, int slot, int32_t v);
pd_status pd__dev_forward(pd__wk *W, pd__chunk *C, int mb, pd_step_result *r);
pd_status pd__dev_backward(pd__wk *W, pd__chunk *C, int mb, int32_t version, int part);
pd_status pd__dev_recompute(pd__wk *W, pd__chunk *C, int mb);
pd_status pd__dev_send(pd__wk *W, pd__chunk *C, int l, bool grad, int mb, int to, bool *stop);
pd_status pd__dev_take(pd__wk *W, pd__chunk *C, int l, bool grad, int slot, int k, int e, const char *buf,
                       size_t *off);
pd_status pd__dev_finite(pd__wk *W);
pd_status pd__dev_stash(pd__wk *W, int c, int32_t v);
pd_status pd__dev_tied_grads(pd__wk *W, bool *stop);
pd_status pd__dev_tied_weights(pd__wk *W, bool *stop);
pd_status pd__dev_tied_down(pd__wk *W);
pd_status pd__dev_tied_up(pd__wk *W);
pd_status pd__dev_end(pd__pipe *p, bool ok);
pd_status pd__dev_snap(pd__wk *W, bool pre);
pd_status pd__dev_push(pd__pipe *p);
pd_status pd__dev_push_weights(pd__pipe *p);

/* ---- shared between the pipeline's files (pipeline*.c: one concern each) ---- */

float pd__ared_scale(const pd__wk *W, int mb);
/* W->ared holds at least the thread's chunks' packed gradients
 * (pd__vstage.packed, chunk after chunk); *count (may be NULL): their number. */
pd_status pd__ared_reserve(pd__wk *W, int64_t *count);
pd_status pd__global_norm(pd__wk *W, int64_t t, const float *G, double *norm, bool *stop);
/* Rows of microbatch mb of graph input i (-1: the labels; the labels too for
 * the input they feed), filled on demand when the run's rows are a ring. */
pd_status pd__mb_rows(pd__pipe *p, int i, int mb, pd_tensor *out);
bool pd__meet_all(pd__pipe *p);
int pd__peer(const pd__pipe *p, int l, bool grad, bool sending, int mb);
pd_tensor pd__rows(const pd_tensor *all, int64_t rows, int mb);
pd_status pd__stash_live(pd__pipe *p, pd__chunk *C, int k);
size_t pd__tbytes(const pd_graph *g, int t);
pd__transport *pd__via(pd__pipe *p, const pd__wk *W, int peer);

bool pd__barrier(pd__pipe *p, int w);
pd_status pd__do_allreduce(pd__wk *W, int mb, bool *stop);
pd_status pd__do_backward(pd__wk *W, pd__chunk *C, int mb, int32_t version, int part, bool overlap);
pd_status pd__do_forward(pd__wk *W, pd__chunk *C, int mb, int32_t version);
pd_status pd__do_step(pd__wk *W, int mb, int32_t version, int k, bool *stop);
void pd__fail(pd__pipe *p, const pd__wk *W, const pd__instr *in, pd_status st);
/* The same for a failure outside the stages (msg: the whole message): a
 * checkpoint writer's (pd__pipe_watch_writer). */
void pd__pipe_stop(pd__pipe *p, pd_status st, const char *msg);
pd_status pd__feed_inputs(pd__pipe *p, pd__actx *c, int mb);
float *pd__gslab(const pd__wk *W);
pd_status pd__mb_result(pd__pipe *p, int mb, const pd_step_result *r);
uint64_t pd__mb_seed(const pd__pipe *p, int mb);
bool pd__meet(pd__pipe *p, pd__bar *b, int n);
int64_t pd__ns(void);
pd_status pd__overlapped_wait(pd__wk *W);
void pd__q_drain(pd__queue *q);
void pd__q_free_pool(pd__queue *q);
pd_status pd__rc_ensure(pd__wk *W, pd__chunk *C, int mb);
pd_status pd__recv(pd__wk *W, pd__chunk *C, int l, bool grad, int mb, bool *stop);
void pd__release(pd__chunk *C, int32_t v, int k);
int pd__replica_of(const pd__pipe *p, int w, int mb);
pd_status pd__send(pd__wk *W, pd__chunk *C, int l, bool grad, int mb, bool *stop);
void pd__slot_done(pd__pipe *p, pd__chunk *C, int slot);
void pd__snap_decide(pd__pipe *p, int64_t m);
pd_status pd__snap_post(pd__wk *W, int64_t b, bool *stop);
pd_status pd__snap_pre(pd__wk *W, int64_t b, bool *stop);
bool pd__tied_reader(pd__pipe *p, int k, int i, float **g);
pd_status pd__tied_from_owner(pd__pipe *p, float *const *slabs, int nslab, float *buf);
pd_status pd__tied_weights_remote(pd__pipe *p);
extern const pd__transport_i pd__local_vt;
void pd__unhold(pd__pipe *p, pd__chunk *C, int slot, int dir);

#endif
