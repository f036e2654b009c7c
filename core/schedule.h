/* schedule.h - private: the schedule generator (core/schedule.c) and the
 * event simulator that replays its instruction lists (core/simulate.c).
 *
 * Indexing: a schedule has p = n_stages workers (physical stages) and v =
 * chunks virtual stages per worker; virtual stage k = chunk * p + worker, so
 * without interleaving the virtual stage is the worker. Cost arrays are per
 * virtual stage. docs/SCHEDULES.md describes every kind's order.
 */
#ifndef PD_SCHEDULE_H
#define PD_SCHEDULE_H

#include "plan.h"

/* "gpipe", "flush" (or "1f1b"), "pipedream", "2bw", "interleaved", "zb-h1", "avgpipe". */
pd_status pd__sched_kind_parse(const char *s, pd__sched_kind *out);
const char *pd__sched_kind_name(pd__sched_kind k);
/* pipedream and 2bw: no flush, the pipeline runs across minibatches. */
bool pd__sched_async(pd__sched_kind k);
/* "F", "B", "W", "SEND_ACT", ... ("?" when out of range). */
const char *pd__op_name(int op);

/* Builds the instruction lists of `minibatches` minibatches of `microbatches`
 * each. chunks: 1, or >= 2 for interleaved. replicas: per worker (NULL: all
 * 1); a worker with replicas > 1 all-reduces its gradients before each STEP
 * (pipedream: one STEP per round of r microbatches, replica j taking the
 * microbatches j mod r).
 * Microbatch indices are global (minibatch t: t*m .. t*m+m-1); STEP and
 * ALLREDUCE carry the last microbatch of the update they close; peer is -1
 * and version -1 where they do not apply. */
pd_status pd__schedule_build(pd__sched_kind kind, int n_stages, int chunks, int microbatches, int minibatches,
                             const int *replicas, pd__schedule **out);
/* AvgPipe's advance forward propagation with an explicit bound: stage s
 * issues min(max(inflight-s-1, 0), m) forwards before its first backward
 * (1F1B as if the pipeline were `inflight` stages deep), so it holds at most
 * min(max(inflight-s, 1), m) microbatches' activations; inflight = p is flush's
 * order. pd__schedule_build(PD_SCHED_AVGPIPE, ...) uses
 * pd__avgpipe_default_inflight(p): p + 1, one forward ahead on every stage. */
pd_status pd__schedule_build_avgpipe(int n_stages, int microbatches, int minibatches, const int *replicas,
                                     int inflight, pd__schedule **out);
int pd__avgpipe_default_inflight(int n_stages);
/* PipeDream's vertical sync on a pipedream schedule: every stage runs
 * microbatch k on the version stage 0's forward of k used. */
pd_status pd__schedule_vertical_sync(pd__schedule *s);
void pd__schedule_free(pd__schedule *s);
/* F before B before W per (virtual stage, microbatch), each exactly once;
 * every F/B past the pipeline's ends preceded by its RECV and followed by its
 * SEND; sends and receives pair up in order on every link; versions consistent
 * (a B/W uses its F's version, an F no version not yet produced); and a
 * zero-cost replay retires every instruction (no deadlock). Errors name the
 * stage, the instruction index and the microbatch. */
pd_status pd__schedule_validate(const pd__schedule *s);
/* Per-stage lines ("stage 0: F0 F1 B0 ...", compute and updates only) or CSV
 * with every instruction: stage,index,op,chunk,mb,version,peer. */
pd_status pd__schedule_write(const pd__schedule *s, FILE *f, bool csv);

/* Costs of one microbatch per virtual stage (NULL arrays: zero, except f_ms
 * and b_ms which are required). */
typedef struct pd__sim_costs {
    const double *f_ms;         /* forward */
    const double *b_ms;         /* input gradient (an unsplit B costs b_ms + w_ms) */
    const double *w_ms;         /* weight gradient */
    const double *send_ms;      /* one transfer over the link k -> k+1, either direction */
    const double *allreduce_ms; /* per worker: one ALLREDUCE */
    const double *act_bytes;    /* activations stashed per microbatch */
    const double *param_bytes;  /* one weight version */
    /* activation recomputation (NULL: off): per virtual stage, what a
     * microbatch in flight keeps (what it receives); the rest of act_bytes
     * is held once, and a B or W whose microbatch's activations are not the
     * last its stage computed first runs its forward again (f_ms more) */
    const double *in_bytes;
} pd__sim_costs;

/* Replays the lists in order per worker: an instruction starts when its
 * worker is free and, for a RECV, when the matching SEND's data has arrived
 * (sends do not block; transfers on one link direction go one at a time).
 * start/end: per worker, arrays of len[s] (NULL: not wanted). Fails naming the
 * instruction on a send/receive mismatch or a deadlock. pd__schedule_validate
 * runs it with NULL costs (all zero) after its own checks. */
pd_status pd__schedule_replay(const pd__schedule *s, const pd__sim_costs *c, double **start, double **end);

/* Validates and simulates s with synthetic costs (arrays per virtual stage,
 * as in pd__sim_costs; no all-reduce cost) and fills out (free with
 * pd_sim_result_free); throughput counts one sample per microbatch.
 * trace: when not NULL, a Chrome trace is written to it. */
pd_status pd__simulate_schedule(const pd__schedule *s, const double *f_ms, const double *b_ms, const double *w_ms,
                                const double *send_ms, const double *act_bytes, const double *param_bytes,
                                pd_sim_result *out, FILE *trace);
/* The same with every cost (all-reduce included) and an optional SVG timeline. */
pd_status pd__simulate_costs(const pd__schedule *s, const pd__sim_costs *c, pd_sim_result *out, FILE *trace, FILE *svg);

/* The schedule pd_simulate runs for this plan and these options, with the
 * per-virtual-stage costs it uses (arrays of n_stages*chunks, freed by
 * pd__sim_plan_free). */
typedef struct pd__sim_plan {
    pd__schedule *sched;
    double *f_ms, *b_ms, *w_ms, *send_ms, *act_bytes, *param_bytes; /* per virtual stage */
    double *in_bytes;  /* per virtual stage under plan->recompute; else NULL */
    double *allreduce_ms;                                           /* per worker */
    int *replicas;                                                  /* per worker */
    bool split_chunks; /* interleaved on a plan without chunks: stages split evenly */
    int64_t samples;   /* samples per minibatch: microbatch size * microbatches * width */
} pd__sim_plan;

pd_status pd__sim_plan_make(const pd_plan *p, const pd_sim_options *opt, pd__sim_plan *out);
void pd__sim_plan_free(pd__sim_plan *sp);

#endif
