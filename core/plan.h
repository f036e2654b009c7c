/* plan.h - profiles, plans and schedules: what the profiler measures, the
 * planner cuts and the schedule generator turns into per-stage instruction
 * lists that the simulator and the runtime execute. Not installed;
 * pipedream.h exposes these through opaque handles. Units: milliseconds for
 * times, bytes for sizes, bytes/s for bandwidth; a profile's times are for
 * one microbatch (the profile's batch). Which file implements what:
 * docs/ARCHITECTURE.md. */
#ifndef PD_PLAN_H
#define PD_PLAN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "pd_internal.h"

/* ---- profiles ------------------------------------------------------------- */

typedef struct pd__pnode {
    char *name;          /* ONNX node name, or PipeDream's "nodeN" */
    char *desc;          /* op type or PipeDream's layer description */
    double fwd_ms;       /* forward of one microbatch */
    double bwd_in_ms;    /* backward: gradient of the inputs (zero-bubble's B) */
    double bwd_w_ms;     /* backward: gradient of the weights (zero-bubble's W) */
    double act_bytes;    /* bytes of its outputs (one microbatch) */
    double param_bytes;  /* bytes of the trainable parameters it owns */
    double optim_bytes;  /* optimizer state for those parameters */
    /* the part of fwd_ms, bwd_in_ms, bwd_w_ms that does not shrink with the
     * rows (a per-call overhead, fitted from measurements at other batch
     * sizes; 0: the time scales linearly): at b rows a time t measured at the
     * profile's batch B costs call + (t - call) * b / B (pd__pnode_at) */
    double fwd_call_ms, bwd_in_call_ms, bwd_w_call_ms;
} pd__pnode;

#define PD_MAX_FIT_BATCHES 8

struct pd_profile {
    int n;               /* nodes, in a topological order */
    pd__pnode *node;
    int n_edges;
    int *edge;           /* 2*n_edges ints: producer, consumer (node indices, producer < consumer) */
    int64_t batch;       /* microbatch the times are for (0: unknown) */
    char *model;         /* where it came from (for messages); may be NULL */
    char *device;        /* "cpu", "cuda", "pipedream" (imported) ... ; may be NULL */
    int n_fit;           /* the other batch sizes the per-call costs were fitted from (0: none) */
    int64_t fit_batch[PD_MAX_FIT_BATCHES];
};

/* An empty profile with room for n nodes (names NULL, costs 0). */
pd_status pd__profile_new(int n, pd_profile **out);
/* Adds an edge a -> b (checked: indices in range). */
pd_status pd__profile_add_edge(pd_profile *p, int a, int b);
/* Checks: finite non-negative costs, edges in range, acyclic; reorders nodes
 * topologically (stable) when needed. `what` names the profile in errors. */
pd_status pd__profile_finish(pd_profile *p, const char *what);

/* Parses a profile held in memory (JSON or PipeDream graph.txt); `name` names
 * it in errors (runtime/profile_io.c). */
pd_status pd__profile_parse(const char *name, const char *data, size_t len, pd_profile **out);

/* Node d's costs at `ratio` times the profile's batch: times call + (t -
 * call) * ratio, activation bytes times ratio, parameters as they are. */
void pd__pnode_at(const pd__pnode *d, double ratio, pd__pnode *out);
/* A copy of p with every node at b rows (p->batch must be known); names are
 * shared with p, so free it with pd__profile_free_shallow before p goes. */
pd_status pd__profile_at(const pd_profile *p, int64_t b, pd_profile **out);
void pd__profile_free_shallow(pd_profile *p);

/* ---- cut states (antichains) ------------------------------------------------ */

/* A valid cut of the DAG: the set of nodes before it is closed under
 * predecessors (an "ideal"). States are in a topological order of the
 * antichain DAG; state 0 is the empty cut and state n_states-1 the whole
 * graph. The stage between states a and b (a before b, ideal[a] inside
 * ideal[b]) holds the nodes ideal[b] \ ideal[a]. */
typedef struct pd__cuts {
    int n_states;
    bool prefix_only;      /* too many ideals: only the prefixes of the topological order */
    int beam;              /* too many ideals: the cuts kept per size and way (0: every ideal; antichain.c) */
    int words;             /* 64-bit words per ideal bitset */
    uint64_t *ideal;       /* n_states * words */
    /* prefix sums over each ideal (so a stage's totals are differences) */
    double *fwd, *bwd_in, *bwd_w, *act, *param, *optim;
    /* bytes of every tensor crossing the cut (outputs of nodes inside with a
     * consumer outside): sent forward as activations, back as gradients */
    double *cross_bytes;
    /* PipeDream's own measure: activation bytes of the cut's maximal nodes */
    double *antichain_bytes;
    /* pred[b] lists the states a with ideal[a] strictly inside ideal[b] (ascending) */
    int *pred_start, *pred;   /* CSR: pred[pred_start[b] .. pred_start[b+1]) */
} pd__cuts;

/* max_states bounds the enumeration; over it, a beam of cuts per size from
 * each end (beam < 0: as wide as max_states allows; 0: the prefixes of the
 * topological order only, for DPs cubic in the states). */
pd_status pd__cuts_build(const pd_profile *p, int max_states, int beam, pd__cuts **out);
void pd__cuts_free(pd__cuts *c);

/* ---- plans ---------------------------------------------------------------- */

typedef struct pd__stage {
    int replicas;
    int first_rank;        /* ranks first_rank .. first_rank+replicas-1 */
    bool has_device;       /* the plan puts it on CUDA device `device` (GPU stages); else --device's index */
    int device;
    /* per microbatch, on one replica */
    double fwd_ms, bwd_in_ms, bwd_w_ms;
    double param_bytes, optim_bytes, act_bytes;  /* act: activations stashed per microbatch */
    double in_bytes;       /* activation bytes received per microbatch (gradient bytes sent back) */
    double out_bytes;      /* activation bytes sent per microbatch (gradient bytes received) */
    double send_ms;        /* time to send out_bytes to the next stage (and the gradient back) */
    double fwd_call_ms, bwd_in_call_ms, bwd_w_call_ms; /* the per-call parts of fwd_ms ... (pd__pnode) */
    double allreduce_ms;   /* gradient all-reduce among the replicas, per minibatch */
    double time_ms;        /* the stage's cost in the planner's model (per minibatch per replica) */
    double memory_bytes;   /* predicted peak per worker */
} pd__stage;

typedef enum pd__algo {
    PD_ALGO_PIPEDREAM = 0,
    PD_ALGO_2BW,
    PD_ALGO_BIPARTITION,
    PD_ALGO_UNIFORM,
    PD_ALGO_PARAMS,
    PD_ALGO_AVGPIPE        /* AvgPipe's tuner: K parallel pipelines and the microbatches */
} pd__algo;

struct pd_plan {
    int n_nodes;
    char **node_name;      /* copies of the profile's names */
    int *fwd_stage;        /* per node: the stage that runs its forward */
    int *bwd_stage;        /* per node: the stage that runs its backward (== fwd_stage except bipartition) */
    int n_alias;           /* names the stages give that "nodes" lacks: the file's nodes a */
    char **alias_name;     /* loader fused away (a plan edited by hand); pd__plan_match */
    int *alias_fwd, *alias_bwd; /* places the fused node by them, or finds them unknown */
    int n_stages;          /* stages (virtual stages when chunks > 1) */
    pd__stage *stage;
    int chunks;            /* virtual stages per worker: stage k runs on worker k % (n_stages / chunks) */
    int workers;           /* workers given; sum of replicas may be fewer */
    int microbatches;      /* per minibatch (per pipeline) */
    int64_t microbatch_size;
    int64_t profile_batch; /* the batch the profile measured (0: unknown); stage times are scaled from it */
    int width;             /* 2bw, avgpipe: parallel pipelines (data-parallel width; avgpipe's K); 1 otherwise */
    bool recompute;        /* activation recomputation (the 2bw planner's choice; the runtime honours it under every schedule) */
    pd__algo algo;
    char *algo_name, *cost_model, *model;
    double bandwidth;      /* between adjacent stages (the slowest level crossed) */
    /* predictions */
    double time_ms;        /* per minibatch in steady state (the bottleneck stage) */
    double single_ms;      /* one worker, whole model */
    double dp_ms;          /* pure data parallelism on the same workers */
    double speedup;        /* single_ms / time_ms */
    double dp_speedup;     /* dp_ms / time_ms */
    double bubble;         /* predicted idle fraction for the plan's default schedule */
    double throughput;     /* samples per second */
    int n_cut_states;      /* cut states the planner searched (0: not a DAG search) */
    bool prefix_only;      /* they were the prefixes of one topological order */
    int beam;              /* else the cuts kept per size and way (0: every ideal) */
};

void pd__plan_free(pd_plan *p);
/* Whether a stage of p has a per-call cost (then microbatch size matters beyond linear scaling). */
bool pd__plan_has_call(const pd_plan *p);
/* Rewrites p's stage times as linear scaling of the profile's batch would
 * give them at the plan's microbatch size: t - call * (1 - b/B), no call
 * part left (what the simulator predicted before per-call costs). */
void pd__plan_linear(pd_plan *p);
/* The --algo names ("pipedream", "2bw", ...) and back; unknown names are an error naming the flag. */
const char *pd__algo_name(pd__algo a);
pd_status pd__algo_parse(const char *s, pd__algo *out);
/* The plan as JSON text (runtime/plan_io.c); free with cJSON_free / free. */
char *pd__plan_to_json(const pd_plan *p);
/* The reverse (runtime/plan_io.c); `what` names the text in messages. */
pd_status pd__plan_from_json(const char *buf, size_t len, const char *what, pd_plan **out);
/* Rewrites p's nodes as g's (runtime/plan_io.c): a plan written for the file's
 * nodes (by hand, or before the loader fused some) names nodes g fused into one;
 * the fused node runs where the last of them did. Names g lacks are an error
 * naming `what` (the plan file). */
pd_status pd__plan_match(pd_plan *p, const pd_graph *g, const char *what);

/* ---- schedules ---------------------------------------------------------------- */

typedef enum pd__sched_kind {
    PD_SCHED_GPIPE = 0,    /* all F, then all B; flush */
    PD_SCHED_FLUSH,        /* PipeDream-Flush / 1F1B; flush */
    PD_SCHED_PIPEDREAM,    /* asynchronous 1F1B with weight stashing; no flush */
    PD_SCHED_2BW,          /* 1F1B, two weight versions, step every m microbatches */
    PD_SCHED_INTERLEAVED,  /* Megatron's interleaved 1F1B with v chunks per worker */
    PD_SCHED_ZB_H1,        /* zero-bubble H1: B and W split, W fills the bubble */
    PD_SCHED_AVGPIPE       /* AvgPipe's advance forward propagation: 1F1B with forwards issued
                              ahead, at most `inflight` microbatches held per stage; flush */
} pd__sched_kind;

typedef enum pd__op_kind {
    PD_I_F = 0,            /* forward of microbatch mb on chunk */
    PD_I_B,                /* backward: input gradient (and weight gradient unless split) */
    PD_I_W,                /* backward: weight gradient (zero-bubble) */
    PD_I_SEND_ACT,
    PD_I_RECV_ACT,
    PD_I_SEND_GRAD,
    PD_I_RECV_GRAD,
    PD_I_ALLREDUCE,        /* gradients among a stage's replicas */
    PD_I_STEP,             /* optimizer update (version: the new weight version) */
    PD_I_SNAPSHOT          /* checkpoint point */
} pd__op_kind;

typedef struct pd__instr {
    uint8_t op;            /* pd__op_kind */
    uint8_t split;         /* PD_I_B: 1 when a separate PD_I_W follows for this mb */
    int16_t chunk;         /* virtual stage on this worker (interleaved), else 0 */
    int32_t mb;            /* microbatch index (global across minibatches) */
    int32_t version;       /* weight version the F/B/W uses; STEP: version produced */
    int32_t peer;          /* SEND/RECV: the other stage (virtual stage index) */
} pd__instr;

typedef struct pd__schedule {
    pd__sched_kind kind;
    int n_stages;          /* physical stages (workers of one pipeline) */
    int chunks;            /* virtual stages per worker (1 unless interleaved) */
    int microbatches;      /* per minibatch */
    int minibatches;       /* how many minibatches the lists cover */
    int *len;              /* instructions per stage */
    pd__instr **ins;       /* ins[s][k] */
    int inflight;          /* avgpipe: most microbatches a stage holds (0 for other kinds) */
} pd__schedule;

#endif
