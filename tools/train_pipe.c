/* train_pipe.c - the plan and the data ring of `pdonnx train`'s pipeline
 * runs (train_pipe.h). */
#include "train_pipe.h"
#include "cli.h"
#include "../core/plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PD_CLI_MAX_INPUTS 64

pd_status pd_cli_graph_at(const char *model, const pd_load_options *lo, const pd_graph *g, int64_t batch,
                          int64_t rows, pd_graph **out) {
    int n = pd_graph_num_inputs(g);
    if (n > PD_CLI_MAX_INPUTS) return pd__err(PD_ERR_UNSUPPORTED, "%s: more than %d inputs", model, PD_CLI_MAX_INPUTS);
    pd_input_shape shapes[PD_CLI_MAX_INPUTS];
    pd_load_options at = *lo;
    at.batch = rows;
    at.n_input_shapes = 0;
    for (int k = 0; k < n; k++) {
        pd_value_info vi;
        if (pd_graph_input(g, k, &vi) != PD_OK) continue;
        pd_input_shape *s = &shapes[at.n_input_shapes++];
        s->name = vi.name;
        s->ndim = vi.ndim;
        memcpy(s->shape, vi.shape, sizeof vi.shape);
        if (vi.ndim > 0 && vi.shape[0] == batch) s->shape[0] = rows;
        s->dtype = PD_UNDEFINED;
    }
    at.input_shapes = shapes;
    return pd_graph_load_file(model, &at, out);
}

/* prof (g's, at a microbatch's rows) fitted with one at a step's rows. */
static pd_status pd__pipe_fit(const pd_cli_plan_args *pa, const pd_graph *g, const pd_profile_options *po,
                              pd_profile *prof) {
    pd_graph *whole;
    PD_TRY(pd_cli_graph_at(pa->model, pa->lo, g, prof->batch, pa->rows, &whole));
    pd_profile *at = NULL;
    pd_status st = pd_profile_measure(whole, po, &at);
    pd_graph_destroy(whole);
    if (st == PD_OK) st = pd_profile_fit(prof, (const pd_profile *const *)&at, 1);
    pd_profile_destroy(at);
    return st;
}

pd_status pd_cli_pipe_plan(const pd_cli_plan_args *pa, pd_graph *g, pd_plan **out) {
    if (pa->plan) {
        PD_TRY(pd_plan_load(pa->plan, out));
        /* a plan naming the file's nodes, some fused since, maps onto the loaded graph */
        pd_status st = pd__plan_match(*out, g, pa->plan);
        if (st == PD_OK && (st = pd_trainer_check_plan(g, *out)) != PD_OK) pd__err_prefix("--plan %s", pa->plan);
        if (st != PD_OK) {
            pd_plan_destroy(*out);
            *out = NULL;
        }
        return st;
    }
    pd_profile_options po = PD_PROFILE_OPTIONS_INIT;
    po.optimizer = pa->o->optimizer;
    po.loss = pa->o->loss;
    po.threads = pa->threads;
    po.warmup = 1;
    po.repeats = 3;
    pd_profile *prof;
    PD_TRY(pd_profile_measure(g, &po, &prof));
    if (pa->model && pa->lo && !pa->lo->lazy_weights && pa->microbatches > 1 && pa->rows > prof->batch &&
        pd__pipe_fit(pa, g, &po, prof) != PD_OK && !pa->quiet)
        printf("note: the plan's per-call costs were not measured at the step's %lld rows (%s): the run summary "
               "leaves out one worker's time\n",
               (long long)pa->rows, pd_cli_error());
    pd_plan_options o = PD_PLAN_OPTIONS_INIT;
    o.workers = pa->stages * pa->chunks;
    o.straight = 1;
    o.microbatches = pa->microbatches;
    pd_status st = pd_plan_create(prof, &o, out);
    if (st == PD_OK && pa->chunks > 1 && (*out)->n_stages != o.workers) {
        pd_plan_destroy(*out);
        *out = NULL;
        o.algo = "uniform";
        st = pd_plan_create(prof, &o, out);
    }
    if (st == PD_OK) (*out)->chunks = pa->chunks;
    pd_profile_destroy(prof);
    return st;
}

pd_status pd_cli_ring_fill(void *ctx, int64_t step, int slot) {
    pd_cli_ring *r = (pd_cli_ring *)ctx;
    size_t at = (size_t)slot * (size_t)r->batch;
    if (r->mu) pthread_mutex_lock(r->mu);
    int64_t k = ((r->avg ? pd__avg_steps(r->avg) : 0) + step) * r->stride + r->offset;
    pd_status st = pd__data_fill(r->data, k, r->x + r->xrow * at, r->y + r->yrow * at);
    if (r->mu) pthread_mutex_unlock(r->mu);
    return st;
}

pd_status pd_cli_ring_open(pd_cli_ring *r, int ring, const pd_graph *g, const char *input, const pd_tensor *X,
                     const pd_tensor *Y, pd_tensor *ins, pd_tensor *labels) {
    r->xrow = (size_t)(pd_tensor_numel(X) / X->shape[0]) * pd_dtype_size(X->dtype);
    r->yrow = (size_t)(pd_tensor_numel(Y) / Y->shape[0]) * pd_dtype_size(Y->dtype);
    r->x = malloc(r->xrow * (size_t)(ring * r->batch) + 1);
    r->y = malloc(r->yrow * (size_t)(ring * r->batch) + 1);
    if (!r->x || !r->y) return pd__err(PD_ERR_NOMEM, "out of memory for the pipeline's data");
    pd_tensor tx = *X, ty = *Y;
    tx.shape[0] = ty.shape[0] = ring * r->batch;
    tx.data = r->x;
    ty.data = r->y;
    for (int i = 0; i < pd_graph_num_inputs(g); i++) {
        pd_value_info v;
        ins[i] = pd_graph_input(g, i, &v) == PD_OK && strcmp(v.name, input) == 0 ? tx : ty;
    }
    *labels = ty;
    return PD_OK;
}

void pd_cli_ring_free(pd_cli_ring *r) {
    free(r->x);
    free(r->y);
    r->x = r->y = NULL;
}
