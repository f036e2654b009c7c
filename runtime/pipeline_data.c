/* pipeline_data.c - the data a stage reads: a microbatch's rows of the
 * run's inputs and labels (directly or through the ring of steps the
 * trainer fills), its Dropout seed, and the last stage's loss into its
 * minibatch's result. */
#include "pipeline_impl.h"

/* ---- the instructions ------------------------------------------------------------ */

/* Rows of microbatch mb of a tensor holding every microbatch of the run. */
pd_tensor pd__rows(const pd_tensor *all, int64_t rows, int mb) {
    pd_tensor v = *all;
    size_t row = v.shape[0] > 0 ? (size_t)(pd_tensor_numel(all) / v.shape[0]) * pd_dtype_size(v.dtype) : 0;
    v.shape[0] = rows;
    v.data = (char *)all->data + row * (size_t)rows * (size_t)mb;
    return v;
}


/* ---- compute ---- */


/* Microbatch mb's Dropout seed, the same on the CPU and the GPU. */
uint64_t pd__mb_seed(const pd__pipe *p, int mb) {
    return p->o.seed ^ ((uint64_t)(p->steps * p->nmicro + mb) * 0x9e3779b97f4a7c15ull);
}

/* The last stage's loss of microbatch mb into its minibatch's result
 * (replicas of the last stage share the results). */
pd_status pd__mb_result(pd__pipe *p, int mb, const pd_step_result *r) {
    if (!isfinite(r->loss)) return pd__err(PD_ERR_NUMERIC, "the loss is %g", r->loss);
    /* the step's loss: its microbatches' added in their order (a replicated
     * last stage's replicas finish them in any order), once all are in; under
     * MPI after the run, once the processes' losses are in (pd__run_remote_end).
     * Counted without results too: the data ring refills a step's slot only
     * once its losses are all in (pd__ring_take). */
    pthread_mutex_lock(&p->mu);
    p->mbloss[mb] = r->loss / p->nmicro;
    bool all_in = ++p->mbn[mb / p->nmicro] == p->nmicro;
    if (p->res) {
        pd_step_result *R = &p->res[mb / p->nmicro];
        if (all_in && !p->remote)
            for (int i = 0; i < p->nmicro; i++) R->loss += p->mbloss[mb / p->nmicro * p->nmicro + i];
        R->correct += r->correct;
        R->count += r->count;
    }
    pthread_mutex_unlock(&p->mu);
    return PD_OK;
}

/* With a ring: step k into its slot unless there already. The step it
 * replaces must be done with: no later step there, and (where this process
 * runs the last stage) every microbatch's loss taken. */
static pd_status pd__ring_take(pd__pipe *p, int64_t k, int slot) {
    pthread_mutex_lock(&p->mu);
    int64_t had = p->ring_at[slot];
    pd_status st = PD_OK;
    if (had != k) {
        bool busy = had > k || (had >= 0 && !p->remote && p->mbn[had] < p->nmicro);
        st = busy ? pd__err(PD_ERR_INTERNAL, "pipeline: step %lld's rows are needed after step %lld's replaced them "
                            "(a ring of %d steps is too short)", (long long)(had > k ? k : had),
                            (long long)(had > k ? had : k), p->ring)
                  : p->ring_fill(p->ring_ctx, k, slot);
        p->ring_at[slot] = st == PD_OK ? k : -1;
    }
    pthread_mutex_unlock(&p->mu);
    return st;
}

pd_status pd__mb_rows(pd__pipe *p, int i, int mb, pd_tensor *out) {
    const pd_tensor *all = i < 0 || p->g->inputs[i] == p->labels_input ? p->labels : &p->inputs[i];
    if (p->ring) {
        int64_t k = mb / p->nmicro;
        int slot = (int)(k % p->ring);
        PD_TRY(pd__ring_take(p, k, slot));
        mb = slot * p->nmicro + mb % p->nmicro;
    }
    *out = pd__rows(all, p->rows, mb);
    return PD_OK;
}

pd_status pd__pipe_set_ring(pd__pipe *p, int steps, pd__ring_fill fill, void *ctx) {
    if (steps != 0 && (steps < pd__pipe_ring_steps(p) || !fill))
        return pd__err(PD_ERR_INVALID, "pipeline: a ring of %d steps (at least %d, with a fill function)", steps,
                       pd__pipe_ring_steps(p));
    PD_FREE(p->ring_at);
    p->ring_at = NULL;
    if (steps && !(p->ring_at = PD_MALLOC(sizeof(int64_t) * (size_t)steps)))
        return pd__err(PD_ERR_NOMEM, "out of memory");
    p->ring = steps;
    p->ring_fill = fill;
    p->ring_ctx = ctx;
    return PD_OK;
}

/* A stage reads microbatch mb + nslots only once its slot of mb is free,
 * after every stage is done with mb: the steps read at once span at most
 * nslots microbatches, plus the step a replica may lead its peers by. */
int pd__pipe_ring_steps(const pd__pipe *p) { return (p->nslots + p->nmicro - 1) / p->nmicro + 2; }
int pd__pipe_ring(const pd__pipe *p) { return p ? p->ring : 0; }

/* The graph inputs a context's nodes read: microbatch mb's rows copied in. */
pd_status pd__feed_inputs(pd__pipe *p, pd__actx *c, int mb) {
    const pd_graph *g = p->g;
    for (int i = 0; i < g->ninputs; i++) {
        int t = g->inputs[i];
        pd_tensor rows;
        if (!pd__actx_value(c, t)->data) continue;
        PD_TRY(pd__mb_rows(p, i, mb, &rows));
        memcpy(pd__actx_value(c, t)->data, rows.data, pd__tbytes(g, t));
    }
    return PD_OK;
}
