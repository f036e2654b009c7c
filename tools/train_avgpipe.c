/* train_avgpipe.c - `pdonnx train MODEL --stages P --parallel-pipelines K
 * [--elastic-alpha A] [--average-every N] [--schedule avgpipe|flush|...]`:
 * K pipelines of P stages each (runtime/avgpipe.c), every one on its own
 * minibatches of the data stream, pulled toward a centre by elastic
 * averaging; the centre is what --save writes and --val measures.
 */
#include "train_avgpipe.h"

#include "../core/schedule.h"
#include "../runtime/avgpipe.h"
#include "../runtime/comm/transport.h"
#include "../runtime/optim.h"
#include "../runtime/pipeline.h"
#include "cli.h"
#include "train_pipe.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int pd_cli_avg_take_flags(int *argc, char **argv, pd_cli_avg_args *av) {
    memset(av, 0, sizeof *av);
    av->K = 1;
    av->every = 1;
    int n = 0;
    for (int i = 0; i < *argc; i++) {
        const char *f = argv[i];
        bool ours = !strcmp(f, "--parallel-pipelines") || !strcmp(f, "--elastic-alpha") || !strcmp(f, "--average-every");
        if (!ours) {
            argv[n++] = argv[i];
            continue;
        }
        if (i + 1 >= *argc) return pd_cli_usage_error("train: %s needs a value", f);
        const char *v = argv[++i];
        av->given = true;
        if (!strcmp(f, "--parallel-pipelines")) {
            if (!pd_cli_parse_int(f, v, 1, 256, &av->K)) return 2;
        } else if (!strcmp(f, "--average-every")) {
            if (!pd_cli_parse_int(f, v, 0, INT32_MAX, &av->every)) return 2;
        } else {
            if (!pd_cli_parse_double(f, v, 0, &av->alpha)) return 2;
            av->alpha_given = true;
        }
    }
    *argc = n;
    if (!av->alpha_given) av->alpha = 0.9 / (double)av->K;
    if (av->alpha * (double)av->K > 1)
        return pd_cli_usage_error("train: %s", "--elastic-alpha times --parallel-pipelines must be at most 1");
    return 0;
}

static double pd__avg_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The plan every pipeline runs (train_pipe.h), profiled on one thread. */
static pd_status pd__avg_plan(const pd_cli_avg_ctx *c, pd_plan **out) {
    pd_cli_plan_args pa = {c->plan, c->stages, c->microbatches, 1, 1, c->o, c->model, c->lo, c->batch, c->quiet};
    return pd_cli_pipe_plan(&pa, c->g, out);
}

/* One AvgPipe run's buffers: the K graphs (0 the caller's), each local
 * pipeline's ring of rows and the tensors over them (inp, lab), the step
 * results (res: the mean, per: per pipeline). */
typedef struct avg_run {
    int K, nin, here; /* here: pipelines in this process (under mpirun, one stage of one) */
    int64_t steps, B, rows;
    pd_graph **g;
    pd_cli_ring *ring;
    pthread_mutex_t mu; /* the data stream, one fill at a time */
    pd_tensor *ins, *lab;
    const pd_tensor **inp;
    pd_step_result *res, *per;
} avg_run;

static bool avg_alloc(avg_run *r, int K, int nin, int64_t steps) {
    r->K = K, r->nin = nin, r->steps = steps;
    r->g = calloc((size_t)K, sizeof *r->g);
    r->ins = calloc((size_t)K * ((size_t)nin + 1), sizeof *r->ins), r->lab = calloc((size_t)K, sizeof *r->lab);
    r->inp = calloc((size_t)K, sizeof *r->inp);
    r->res = calloc((size_t)steps, sizeof *r->res), r->per = calloc((size_t)(K * steps), sizeof *r->per);
    r->ring = calloc((size_t)K, sizeof *r->ring);
    pthread_mutex_init(&r->mu, NULL);
    return r->g && r->ins && r->lab && r->inp && r->res && r->per && r->ring;
}

static void avg_free(avg_run *r) {
    for (int i = 1; r->g && i < r->K; i++) pd_graph_destroy(r->g[i]);
    for (int i = 0; r->ring && i < r->K; i++) pd_cli_ring_free(&r->ring[i]); /* (empty beyond this process's) */
    free(r->g);
    free(r->ins);
    free(r->lab);
    free(r->inp);
    free(r->res);
    free(r->per);
    free(r->ring);
    pthread_mutex_destroy(&r->mu);
}

/* Pipeline 0 trains the caller's graph; the others copies loaded from the
 * same file as it was (pd_cli_graph_at: its options, and its input shapes
 * with a sequence length bound from the data). */
static int avg_copies(const pd_cli_avg_ctx *c, avg_run *r) {
    r->g[0] = c->g;
    int64_t b = r->B / c->microbatches;
    for (int i = 1; i < r->here; i++)
        if (pd_cli_graph_at(c->model, c->lo, c->g, b, b, &r->g[i]) != PD_OK) return pd_cli_fail();
    return 0;
}

/* The K pipelines; under mpirun every process first checks that the plan's
 * processes per pipeline times K is the run's, before any of them waits. */
static int avg_create(const pd_cli_avg_args *av, const pd_cli_avg_ctx *c, pd_plan *plan, avg_run *r,
                      pd__avg **avg) {
    if (c->size <= 1)
        return pd__avg_create(r->g, r->K, plan, c->o, c->kind, c->microbatches, av->alpha, (int)av->every, avg) != PD_OK
                   ? pd_cli_fail() : 0;
    pd__pipe *probe = NULL;
    bool fits = pd__pipe_create(c->g, plan, c->o, c->kind, c->microbatches, &probe) == PD_OK &&
                (int64_t)pd__pipe_processes(probe) * r->K == c->size;
    if (!fits && probe)
        fprintf(stderr, "pdonnx: %d pipelines of %d processes each run as mpirun -np %d, not %d\n", r->K,
                pd__pipe_processes(probe), pd__pipe_processes(probe) * r->K, c->size);
    else if (!fits)
        pd_cli_fail();
    pd__pipe_destroy(probe);
    if (!c->agree(fits)) return 1;
    if (pd__avg_create_mpi(c->g, r->K, plan, c->o, c->kind, c->microbatches, av->alpha, (int)av->every, c->rank,
                           c->size, avg) != PD_OK)
        return pd_cli_fail();
    return 0;
}

/* Pipeline i's steps stream minibatches i, K + i, 2K + i, ..., read through
 * a ring (under mpirun i is this process's pipeline, pd__avg_mine). */
static int avg_data(const pd_cli_avg_ctx *c, pd__avg *avg, avg_run *r) {
    for (int i = 0; i < r->here; i++) {
        r->ring[i] = (pd_cli_ring){c->data, r->B, r->K, i + pd__avg_mine(avg), avg, &r->mu, 0, 0, NULL, NULL};
        pd_tensor *in = r->ins + (size_t)i * ((size_t)r->nin + 1);
        pd__pipe *pipe = pd__avg_pipe(avg, i);
        int ring = pd__pipe_ring_steps(pipe);
        if (pd_cli_ring_open(&r->ring[i], ring, c->g, c->input, c->X, c->Y, in, &r->lab[i]) != PD_OK)
            return pd_cli_fail();
        if (pd__pipe_set_ring(pipe, ring, pd_cli_ring_fill, &r->ring[i]) != PD_OK) return pd_cli_fail();
        r->inp[i] = in;
    }
    return 0;
}

/* The metrics lines (the mean loss and each pipeline's) and the progress lines. */
static void avg_report(const pd_cli_avg_ctx *c, const avg_run *r, double total) {
    int64_t steps = r->steps, every = steps / 10 > 0 ? steps / 10 : 1;
    for (int64_t k = 0; k < steps; k++) {
        if (c->mf) {
            fprintf(c->mf,
                    "{\"step\": %lld, \"loss\": %.9g, \"lr\": %.9g, \"samples_per_s\": %.1f, \"epoch\": %.4f, "
                    "\"pipeline_loss\": [",
                    (long long)k + 1, r->res[k].loss, r->res[k].lr, (double)(r->K * r->rows) / total,
                    (double)((k + 1) * r->K * r->B) / (double)c->X->shape[0]);
            for (int i = 0; i < r->K; i++) fprintf(c->mf, "%s%.9g", i ? ", " : "", r->per[i * steps + k].loss);
            fprintf(c->mf, "]}\n");
        }
        if (!c->quiet && ((k + 1) % every == 0 || k + 1 == steps))
            printf("step %lld/%lld  loss %.6f (mean of %d pipelines)  lr %.4g\n", (long long)k + 1, (long long)steps,
                   r->res[k].loss, r->K, r->res[k].lr);
    }
}

int pd_cli_train_avgpipe(const pd_cli_avg_args *av, const pd_cli_avg_ctx *c) {
    int K = (int)av->K, rc = 1;
    pd_plan *plan = NULL;
    pd__avg *avg = NULL;
    avg_run r = {0};
    if (!avg_alloc(&r, K, pd_graph_num_inputs(c->g), c->steps)) {
        fprintf(stderr, "pdonnx: out of memory for %d pipelines\n", K);
        goto out;
    }
    r.B = c->batch, r.rows = c->steps * c->batch;
    r.here = c->size > 1 ? 1 : K;
    if (pd__sched_async(c->kind)) {
        rc = pd_cli_usage_error("train: --parallel-pipelines runs flushing schedules (avgpipe, flush, gpipe, zb-h1, "
                                "interleaved), not %s", pd__sched_kind_name(c->kind));
        goto out;
    }
    pd_status ps = c->size > 1 ? pd_cli_share_plan(c->rank, c->rank == 0 ? pd__avg_plan(c, &plan) : PD_OK, &plan)
                               : pd__avg_plan(c, &plan); /* under mpirun rank 0 plans, every process runs it */
    if (ps != PD_OK) {
        pd_cli_fail();
        goto out;
    }
    if (avg_copies(c, &r) != 0) goto out;
    if (plan->chunks > 1 && c->kind != PD_SCHED_INTERLEAVED) plan->chunks = 1;
    if (c->recompute) plan->recompute = true;
    if (avg_create(av, c, plan, &r, &avg) != 0 || avg_data(c, avg, &r) != 0) goto out;
    if (!c->quiet)
        printf("training %s as %d parallel pipelines of %d stages (AvgPipe): %s schedule, %d microbatch%s of %lld rows "
               "per step, %lld steps each, elastic alpha %g every %lld step%s, %s lr %g\n",
               c->model, K, pd__pipe_stages(pd__avg_pipe(avg, 0)), pd__sched_kind_name(c->kind), c->microbatches,
               c->microbatches == 1 ? "" : "es", (long long)(r.B / c->microbatches), (long long)r.steps, av->alpha,
               (long long)av->every, av->every == 1 ? "" : "s", pd__optim_name(c->o->optimizer), c->o->lr);
    double t0 = pd__avg_now();
    if (pd__avg_run(avg, r.steps, r.inp, r.lab, r.res, r.per) != PD_OK) {
        pd_cli_fail();
        goto out;
    }
    double total = pd__avg_now() - t0;
    if (c->size > 1 && pd__avg_gather(avg) != PD_OK) { /* the centre of every stage, for --save */
        pd_cli_fail();
        goto out;
    }
    avg_report(c, &r, total);
    double rate = (double)(K * r.rows) / total;
    if (!c->quiet)
        printf("trained %lld steps x %d pipelines in %.2f s: %.*f samples/s, %lld elastic updates, final loss %.6f\n",
               (long long)r.steps, K, total, pd_cli_rate_digits(rate), rate, (long long)pd__avg_updates(avg),
               r.res[r.steps - 1].loss);
    if (c->trace) {
        if (pd__pipe_write_trace(pd__avg_pipe(avg, 0), c->trace) != PD_OK) {
            pd_cli_fail();
            goto out;
        }
        if (!c->quiet) printf("trace: %s (pipeline 0)\n", c->trace);
    }
    rc = 0;
out:
    pd__avg_destroy(avg); /* every graph, c->g included, gets the centre */
    pd_plan_destroy(plan);
    avg_free(&r);
    return rc;
}
