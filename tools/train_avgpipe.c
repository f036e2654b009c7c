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

/* The plan every pipeline runs: the file's, or one planned on a profile measured now. */
static pd_status pd__avg_plan(const pd_cli_avg_ctx *c, pd_plan **out) {
    if (c->plan) {
        PD_TRY(pd_plan_load(c->plan, out));
        if ((*out)->n_nodes != pd_graph_num_nodes(c->g)) {
            pd_status st = pd__err(PD_ERR_INVALID, "--plan %s has %d nodes but %s has %d: plan this model", c->plan,
                                   (*out)->n_nodes, c->model, pd_graph_num_nodes(c->g));
            pd_plan_destroy(*out);
            *out = NULL;
            return st;
        }
        return PD_OK;
    }
    pd_profile_options po = PD_PROFILE_OPTIONS_INIT;
    po.optimizer = c->o->optimizer;
    po.loss = c->o->loss;
    po.threads = 1;
    po.warmup = 1;
    po.repeats = 3;
    pd_profile *prof;
    PD_TRY(pd_profile_measure(c->g, &po, &prof));
    pd_plan_options o = PD_PLAN_OPTIONS_INIT;
    o.workers = c->stages;
    o.straight = 1;
    o.microbatches = c->microbatches;
    pd_status st = pd_plan_create(prof, &o, out);
    pd_profile_destroy(prof);
    return st;
}

int pd_cli_train_avgpipe(const pd_cli_avg_args *av, const pd_cli_avg_ctx *c) {
    int K = (int)av->K, rc = 1;
    int64_t steps = c->steps, B = c->batch, rows = steps * B;
    pd_plan *plan = NULL;
    pd__avg *avg = NULL;
    pd_graph **g = calloc((size_t)K, sizeof *g);
    void **bx = calloc((size_t)K, sizeof *bx), **by = calloc((size_t)K, sizeof *by);
    int nin = pd_graph_num_inputs(c->g);
    pd_tensor *ins = calloc((size_t)K * ((size_t)nin + 1), sizeof *ins), *lab = calloc((size_t)K, sizeof *lab);
    const pd_tensor **inp = calloc((size_t)K, sizeof *inp);
    pd_step_result *res = calloc((size_t)steps, sizeof *res), *per = calloc((size_t)(K * steps), sizeof *per);
    if (!g || !bx || !by || !ins || !lab || !inp || !res || !per) {
        fprintf(stderr, "pdonnx: out of memory for %d pipelines\n", K);
        goto out;
    }
    if (pd__sched_async(c->kind)) {
        rc = pd_cli_usage_error("train: --parallel-pipelines runs flushing schedules (avgpipe, flush, gpipe, zb-h1, "
                                "interleaved), not %s", pd__sched_kind_name(c->kind));
        goto out;
    }
    if (c->size > 1) { /* rank 0 plans; every process runs its plan */
        if (pd_cli_share_plan(c->rank, c->rank == 0 ? pd__avg_plan(c, &plan) : PD_OK, &plan) != PD_OK) {
            pd_cli_fail();
            goto out;
        }
    } else if (pd__avg_plan(c, &plan) != PD_OK) {
        pd_cli_fail();
        goto out;
    }
    /* pipeline 0 trains the caller's graph; the others copies loaded from the same file */
    g[0] = c->g;
    pd_load_options lo = PD_LOAD_OPTIONS_INIT;
    lo.batch = B / c->microbatches;
    lo.half_as_float = 1;
    /* the copies take the first graph's input shapes (a sequence length bound from the data) */
    pd_input_shape shapes[8];
    for (int k = 0; k < pd_graph_num_inputs(c->g) && k < 8; k++) {
        pd_value_info vi;
        if (pd_graph_input(c->g, k, &vi) != PD_OK) continue;
        shapes[lo.n_input_shapes].name = vi.name;
        shapes[lo.n_input_shapes].ndim = vi.ndim;
        memcpy(shapes[lo.n_input_shapes].shape, vi.shape, sizeof vi.shape);
        shapes[lo.n_input_shapes++].dtype = PD_UNDEFINED;
    }
    lo.input_shapes = shapes;
    int here = c->size > 1 ? 1 : K; /* pipelines in this process: under mpirun, one stage of one */
    for (int i = 1; i < here; i++)
        if (pd_graph_load_file(c->model, &lo, &g[i]) != PD_OK) {
            pd_cli_fail();
            goto out;
        }
    if (plan->chunks > 1 && c->kind != PD_SCHED_INTERLEAVED) plan->chunks = 1;
    if (c->recompute) plan->recompute = true;
    if (c->size > 1) {
        pd__pipe *probe = NULL; /* the plan's processes per pipeline, checked by every process before any waits */
        bool fits = pd__pipe_create(c->g, plan, c->o, c->kind, c->microbatches, &probe) == PD_OK &&
                    (int64_t)pd__pipe_processes(probe) * K == c->size;
        if (!fits && probe)
            fprintf(stderr, "pdonnx: %d pipelines of %d processes each run as mpirun -np %d, not %d\n",
                    K, pd__pipe_processes(probe), pd__pipe_processes(probe) * K, c->size);
        else if (!fits)
            pd_cli_fail();
        pd__pipe_destroy(probe);
        if (!c->agree(fits)) goto out;
        if (pd__avg_create_mpi(c->g, K, plan, c->o, c->kind, c->microbatches, av->alpha, (int)av->every, c->rank,
                               c->size, &avg) != PD_OK) {
            pd_cli_fail();
            goto out;
        }
    } else if (pd__avg_create(g, K, plan, c->o, c->kind, c->microbatches, av->alpha, (int)av->every, &avg) != PD_OK) {
        pd_cli_fail();
        goto out;
    }
    int mine = pd__avg_mine(avg);
    /* pipeline i's steps: stream minibatches i, K + i, 2K + i, ... */
    size_t xr = (size_t)(pd_tensor_numel(c->X) / c->X->shape[0]) * pd_dtype_size(c->X->dtype);
    size_t yr = (size_t)(pd_tensor_numel(c->Y) / c->Y->shape[0]) * pd_dtype_size(c->Y->dtype);
    for (int i = 0; i < here; i++) {
        bx[i] = malloc(xr * (size_t)rows + 1);
        by[i] = malloc(yr * (size_t)rows + 1);
        if (!bx[i] || !by[i]) {
            fprintf(stderr, "pdonnx: out of memory holding %lld steps of data for %d pipelines\n", (long long)steps, K);
            goto out;
        }
        for (int64_t k = 0; k < steps; k++)
            if (pd__data_fill(c->data, k * K + i + mine, (char *)bx[i] + xr * (size_t)(k * B),
                              (char *)by[i] + yr * (size_t)(k * B)) != PD_OK) {
                pd_cli_fail();
                goto out;
            }
        pd_tensor tx = *c->X, ty = *c->Y;
        tx.shape[0] = ty.shape[0] = rows;
        tx.data = bx[i];
        ty.data = by[i];
        pd_tensor *in = ins + (size_t)i * ((size_t)nin + 1);
        for (int j = 0; j < nin; j++) {
            pd_value_info v;
            in[j] = pd_graph_input(c->g, j, &v) == PD_OK && strcmp(v.name, c->input) == 0 ? tx : ty;
        }
        lab[i] = ty;
        inp[i] = in;
    }
    if (!c->quiet)
        printf("training %s as %d parallel pipelines of %d stages (AvgPipe): %s schedule, %d microbatch%s of %lld rows "
               "per step, %lld steps each, elastic alpha %g every %lld step%s, %s lr %g\n",
               c->model, K, pd__pipe_stages(pd__avg_pipe(avg, 0)), pd__sched_kind_name(c->kind), c->microbatches,
               c->microbatches == 1 ? "" : "es", (long long)(B / c->microbatches), (long long)steps, av->alpha,
               (long long)av->every, av->every == 1 ? "" : "s", pd__optim_name(c->o->optimizer), c->o->lr);
    double t0 = pd__avg_now();
    if (pd__avg_run(avg, steps, inp, lab, res, per) != PD_OK) {
        pd_cli_fail();
        goto out;
    }
    double total = pd__avg_now() - t0;
    if (c->size > 1 && pd__avg_gather(avg) != PD_OK) { /* the centre of every stage, for --save */
        pd_cli_fail();
        goto out;
    }
    int64_t every = steps / 10 > 0 ? steps / 10 : 1;
    for (int64_t k = 0; k < steps; k++) {
        if (c->mf) {
            fprintf(c->mf,
                    "{\"step\": %lld, \"loss\": %.9g, \"lr\": %.9g, \"samples_per_s\": %.1f, \"epoch\": %.4f, "
                    "\"pipeline_loss\": [",
                    (long long)k + 1, res[k].loss, res[k].lr, (double)(K * rows) / total,
                    (double)((k + 1) * K * B) / (double)c->X->shape[0]);
            for (int i = 0; i < K; i++) fprintf(c->mf, "%s%.9g", i ? ", " : "", per[i * steps + k].loss);
            fprintf(c->mf, "]}\n");
        }
        if (!c->quiet && ((k + 1) % every == 0 || k + 1 == steps))
            printf("step %lld/%lld  loss %.6f (mean of %d pipelines)  lr %.4g\n", (long long)k + 1, (long long)steps,
                   res[k].loss, K, res[k].lr);
    }
    if (!c->quiet)
        printf("trained %lld steps x %d pipelines in %.2f s: %.0f samples/s, %lld elastic updates, final loss %.6f\n",
               (long long)steps, K, total, (double)(K * rows) / total, (long long)pd__avg_updates(avg),
               res[steps - 1].loss);
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
    for (int i = 1; g && i < K; i++) pd_graph_destroy(g[i]);
    for (int i = 0; bx && by && i < K; i++) free(bx[i]), free(by[i]); /* (NULL beyond this process's) */
    free(g);
    free(bx);
    free(by);
    free(ins);
    free(lab);
    free(inp);
    free(res);
    free(per);
    return rc;
}
