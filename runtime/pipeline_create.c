/* pipeline_create.c - a pipeline's set-up and teardown: the plan's stages
 * checked and assigned to workers, virtual stages, links and the tensors
 * each travels, parameters per stage, per-chunk activation contexts. */
#include "pipeline_impl.h"

/* ---- creation ------------------------------------------------------------------ */

void pd__pipe_destroy(pd__pipe *p) {
    if (!p) return;
    pd__dev_teardown(p); /* GPU stages: their device twins first, while the host contexts they mirror live */
    PD_FREE(p->ring_at);
    for (int i = 0; p->wk && i < p->nwk; i++) {
        pd__wk *W = &p->wk[i];
        for (int c = 0; W->ch && c < p->nchunks; c++) {
            pd__chunk *C = &W->ch[c];
            for (int k = 0; C->slot && k < p->nslots; k++) pd__actx_destroy(C->slot[k]);
            PD_FREE(C->slot);
            PD_FREE(C->slot_ver);
            for (int k = 0; C->stash && k < C->nstash; k++) PD_FREE(C->stash[k].w);
            PD_FREE(C->stash);
            PD_FREE(C->need_until);
            PD_FREE(C->sg);
            for (int k = 0; C->held && k < 2 * p->nslots; k++) PD_FREE(C->held[k]);
            PD_FREE(C->held);
            PD_FREE(C->orig);
            PD_FREE(C->sent);
            PD_FREE(C->rc_vals);
            PD_FREE(C->rc_bufs);
            PD_FREE(C->rep_bufs);
        }
        PD_FREE(W->ch);
        PD_FREE(W->grads);
        PD_FREE(W->ev);
        PD_FREE(W->x.scratch);
        PD_FREE(W->kfirst);
        PD_FREE(W->klast);
        PD_FREE(W->ared);
        PD_FREE(W->gnpart);
        PD_FREE(W->arfirst);
        PD_FREE(W->tup);
    }
    PD_FREE(p->tie);
    PD_FREE(p->tbuf);
    for (int w = 0; p->part && w < p->nworkers; w++) PD_FREE(p->part[w]);
    PD_FREE(p->part);
    PD_FREE(p->part_cap);
    PD_FREE(p->part_pre);
    PD_FREE(p->part_len);
    PD_FREE(p->want);
    PD_FREE(p->mbloss);
    PD_FREE(p->mbn);
    for (int i = 0; i < 4; i++) PD_FREE(p->gn[i].part);
    for (int k = 0; p->vs && k < p->nvstages; k++) {
        PD_FREE(p->vs[k].nodes);
        PD_FREE(p->vs[k].bnodes);
        PD_FREE(p->vs[k].params);
        PD_FREE(p->vs[k].pk);
        PD_FREE(p->vs[k].bufs);
        PD_FREE(p->vs[k].sp);
        PD_FREE(p->vs[k].spk);
    }
    for (int l = 0; p->link && l < p->nvstages - 1; l++) {
        pd__q_drain(&p->link[l].fwd);
        pd__q_drain(&p->link[l].bwd);
        PD_FREE(p->link[l].fwd.ring);
        PD_FREE(p->link[l].bwd.ring);
        pd__q_free_pool(&p->link[l].fwd);
        pd__q_free_pool(&p->link[l].bwd);
        PD_FREE(p->link[l].t);
        PD_FREE(p->link[l].gt);
        PD_FREE(p->link[l].bt);
    }
    PD_FREE(p->gneed);
    PD_FREE(p->gdev);
    PD_FREE(p->gfix);
    if (p->remote) p->remote->vt->destroy(p->remote);
    PD_FREE(p->rank_of);
    PD_FREE(p->wbase);
    PD_FREE(p->first_rank);
    PD_FREE(p->wk);
    PD_FREE(p->vs);
    PD_FREE(p->rep);
    PD_FREE(p->bar);
    PD_FREE(p->link);
    pd_session_destroy(p->s);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    PD_FREE(p);
}

/* Per tensor, the virtual stages that compute, read and differentiate it
 * (pd__assign): one allocation, five arrays of ntensors. */
typedef struct pd__tstages {
    int *tstage; /* the stage computing it (-1: none) */
    int *vlast;  /* the last stage needing its value (a forward reading it, a backward reading or producing it, the loss) */
    int *gfirst; /* the stage running its producer's backward, which consumes its gradient */
    int *glast;  /* the last stage adding to its gradient (its consumers' backwards, the loss) */
    int *bfirst; /* the first stage whose backward needs its value */
} pd__tstages;

static bool pd__tstages_alloc(pd__tstages *ts, int nt) {
    int *all = PD_MALLOC(sizeof(int) * (5 * (size_t)nt + 1));
    *ts = (pd__tstages){all, all + nt, all + 2 * (size_t)nt, all + 3 * (size_t)nt, all + 4 * (size_t)nt};
    return all != NULL;
}

/* Fills ts; checks the plan fits the graph. */
static pd_status pd__assign(pd__pipe *p, const pd_plan *plan, const pd__tstages *ts) {
    const pd_graph *g = p->g;
    int nt = g->ntensors, *tstage = ts->tstage, *vlast = ts->vlast, *gfirst = ts->gfirst, *glast = ts->glast,
        *bfirst = ts->bfirst;
    if (plan->n_nodes != g->nnodes)
        return pd__err(PD_ERR_INVALID, "%s: the plan has %d nodes, the model %d", g->path, plan->n_nodes, g->nnodes);
    for (int t = 0; t < nt; t++) {
        int v = g->tensors[t].producer;
        tstage[t] = v >= 0 ? plan->fwd_stage[v] : -1;
        gfirst[t] = v >= 0 && plan->bwd_stage ? plan->bwd_stage[v] : tstage[t];
        vlast[t] = glast[t] = -1;
        bfirst[t] = INT32_MAX;
    }
    for (int i = 0; i < g->nnodes; i++) {
        const pd__node *n = &g->nodes[i];
        int s = plan->fwd_stage[i], b = plan->bwd_stage ? plan->bwd_stage[i] : s;
        if (s < 0 || s >= p->nvstages) return pd__err(PD_ERR_INVALID, "plan: node %d has stage %d of %d", i, s, p->nvstages);
        if (b < 0 || b >= p->nvstages)
            return pd__err(PD_ERR_INVALID, "plan: node %d has its backward on stage %d of %d", i, b, p->nvstages);
        if (b != s && p->nchunks > 1)
            return pd__err(PD_ERR_UNSUPPORTED,
                           "pipeline: node '%s' has its backward on another stage (bipartition) in a plan with chunks; "
                           "not supported",
                           n->name);
        for (int j = 0; j < n->nin; j++) {
            int t = n->in[j];
            if (t < 0) continue;
            if (tstage[t] > s)
                return pd__err(PD_ERR_INVALID, "plan: node '%s' (stage %d) reads '%s' of a later stage %d", n->name, s,
                               g->tensors[t].name, tstage[t]);
            if (b != s && g->tensors[t].kind == PD_T_INIT && pd__session_needs_grad(p->s, t))
                return pd__err(PD_ERR_UNSUPPORTED,
                               "pipeline: node '%s' reads the parameter '%s' but runs its backward on stage %d, not on "
                               "its forward's stage %d (bipartition moves only nodes without parameters)",
                               n->name, g->tensors[t].name, b, s);
            if (s > vlast[t]) vlast[t] = s;
            if (b > vlast[t]) vlast[t] = b;
            if (b < bfirst[t]) bfirst[t] = b;
            if (tstage[t] >= 0 && pd__session_needs_grad(p->s, t)) {
                if (b < gfirst[t])
                    return pd__err(PD_ERR_INVALID,
                                   "plan: the backward of node '%s' (stage %d) runs before that of '%s', which "
                                   "produces its input '%s' (stage %d): gradients flow only to earlier stages",
                                   n->name, b, g->nodes[g->tensors[t].producer].name, g->tensors[t].name, gfirst[t]);
                if (b > glast[t]) glast[t] = b;
            }
        }
        for (int j = 0; j < n->nout; j++) {
            int t = n->out[j];
            if (t < 0) continue;
            if (b > vlast[t]) vlast[t] = b;
            if (b < bfirst[t]) bfirst[t] = b;
        }
    }
    vlast[p->pred] = glast[p->pred] = p->nvstages - 1; /* the last stage computes the loss and its gradient */
    return PD_OK;
}

/* The plan's shape against the schedule: workers, chunks, replicas. */
static pd_status pd__shape(pd__pipe *p, const pd_plan *plan) {
    int V = plan->chunks > 1 ? plan->chunks : 1;
    if (plan->n_stages < 1 || plan->n_stages % V != 0)
        return pd__err(PD_ERR_INVALID, "plan: %d stages is not a multiple of its %d chunks", plan->n_stages, V);
    if (p->kind == PD_SCHED_INTERLEAVED && V < 2)
        return pd__err(PD_ERR_INVALID,
                       "pipeline: interleaved needs a plan with chunks: P*V virtual stages and chunks = V (virtual "
                       "stage k on worker k %% P); this plan has %d stages and no chunks",
                       plan->n_stages);
    if (p->kind != PD_SCHED_INTERLEAVED && V > 1)
        return pd__err(PD_ERR_INVALID, "pipeline: a plan with %d chunks per worker runs only under interleaved, not %s",
                       V, pd__sched_kind_name(p->kind));
    p->nchunks = V;
    p->nvstages = plan->n_stages;
    p->nworkers = p->nvstages / V;
    p->rep = PD_CALLOC((size_t)p->nworkers, sizeof(int));
    p->bar = PD_CALLOC((size_t)p->nworkers, sizeof(pd__bar));
    if (!p->rep || !p->bar) return pd__err(PD_ERR_NOMEM, "out of memory");
    p->nwk = 0;
    /* PipeDream-2BW's width: w pipelines whose stages all-reduce their
     * gradients, which is every stage replicated w times */
    int width = plan->algo == PD_ALGO_2BW && plan->width > 1 ? plan->width : 1;
    for (int w = 0; w < p->nworkers; w++) {
        int r = plan->stage ? plan->stage[w].replicas : 1;
        if (r < 1) r = 1;
        r *= width;
        for (int c = 1; c < V; c++)
            if (plan->stage && plan->stage[c * p->nworkers + w].replicas > 1) r = 2;
        if (r > 256) return pd__err(PD_ERR_INVALID, "plan: stage %d has %d replicas", w, r);
        p->rep[w] = r;
        p->nwk += r;
    }
    /* the plan's stage_to_rank, unless a worker runs other replicas than its
     * stage names (2BW's width, a replicated chunk): then one process each */
    bool as_planned = plan->stage != NULL;
    for (int w = 0; as_planned && w < p->nworkers; w++) as_planned = plan->stage[w].replicas == p->rep[w];
    p->first_rank = PD_CALLOC((size_t)p->nworkers + 1, sizeof(int));
    for (int w = 0; p->first_rank && w < p->nworkers; w++)
        p->first_rank[w] = as_planned && plan->stage[w].first_rank >= 0 ? plan->stage[w].first_rank : -1;
    p->wbase = PD_CALLOC((size_t)p->nworkers + 1, sizeof(int));
    p->rank_of = PD_CALLOC((size_t)p->nwk + 1, sizeof(int)); /* every thread here until pd__pipe_set_ranks */
    if (!p->wbase || !p->rank_of) return pd__err(PD_ERR_NOMEM, "out of memory");
    for (int w = 1; w <= p->nworkers; w++) p->wbase[w] = p->wbase[w - 1] + p->rep[w - 1];
    return PD_OK;
}

/* Recomputation: chunk C's shared activation slab (the values of need its
 * slots do not own) and the save area of its BatchNorm statistics. */
static pd_status pd__rc_alloc(pd__pipe *p, pd__chunk *C, const bool *need, const bool *own) {
    const pd__vstage *S = &p->vs[C->k];
    size_t nb = 0;
    for (int j = 0; j < S->nbufs; j++) nb += pd__tbytes(p->g, S->bufs[j]);
    C->rc_owner = -1;
    if (posix_memalign(&C->rc_vals, 64, pd__actx_shared_bytes(p->s, need, own) + 64) != 0) C->rc_vals = NULL;
    C->rc_bufs = PD_MALLOC(nb + 1);
    if (!C->rc_vals || !C->rc_bufs) return pd__err(PD_ERR_NOMEM, "%s: out of memory building the pipeline", p->g->path);
    return PD_OK;
}

static pd_status pd__pipe_nomem(const pd__pipe *p) {
    return pd__err(PD_ERR_NOMEM, "%s: out of memory building the pipeline", p->g->path);
}

/* What no pipeline can run: the schedule, microbatches and options checked. */
static pd_status pd__pipe_check(const pd_train_options *o, pd__sched_kind kind, int microbatches) {
    if (microbatches < 1) return pd__err(PD_ERR_INVALID, "pipeline: %d microbatches", microbatches);
    if ((unsigned)kind > PD_SCHED_AVGPIPE) return pd__err(PD_ERR_INVALID, "pipeline: unknown schedule %d", (int)kind);
    if (kind == PD_SCHED_PIPEDREAM && microbatches != 1)
        return pd__err(PD_ERR_INVALID, "pipeline: pipedream updates after every microbatch, so a minibatch is one "
                       "microbatch: use 1 microbatch, not %d", microbatches);
    if (o && o->clip_grad_norm > 0 && pd__sched_async(kind))
        return pd__err(PD_ERR_UNSUPPORTED, "pipeline: opt->clip_grad_norm needs every stage's gradients of one update at "
                       "once; %s updates each stage on its own (use gpipe, flush, zb-h1 or interleaved)",
                       pd__sched_kind_name(kind));
    return PD_OK;
}

/* Each virtual stage's forward and backward nodes, the BatchNorm statistics
 * its nodes update in place (ops.h: state), the bytes its outputs take. */
static pd_status pd__pipe_vstages(pd__pipe *p, const pd_plan *plan) {
    const pd_graph *g = p->g;
    for (int k = 0; k < p->nvstages; k++) {
        pd__vstage *S = &p->vs[k];
        S->nodes = PD_MALLOC(sizeof(int) * ((size_t)g->nnodes + 1));
        S->bnodes = PD_MALLOC(sizeof(int) * ((size_t)g->nnodes + 1));
        S->params = PD_MALLOC(sizeof(int) * ((size_t)p->sl.np + 1));
        S->pk = PD_MALLOC(sizeof(int64_t) * ((size_t)p->sl.np + 1));
        S->bufs = PD_MALLOC(sizeof(int) * (2 * (size_t)g->nnodes + 1));
        if (!S->nodes || !S->bnodes || !S->params || !S->pk || !S->bufs) return pd__pipe_nomem(p);
        for (int i = 0; i < g->nnodes; i++)
            if ((plan->bwd_stage ? plan->bwd_stage[i] : plan->fwd_stage[i]) == k) S->bnodes[S->nbnodes++] = i;
        for (int i = 0; i < g->nnodes; i++)
            if (plan->fwd_stage[i] == k) {
                S->nodes[S->nnodes++] = i;
                const pd__node *n = &g->nodes[i]; /* BatchNorm's running statistics: updated in place (ops.h: state) */
                for (int j = 0; j < n->nin; j++)
                    if (pd__state_input(n, j) && n->in[j] >= 0 && g->tensors[n->in[j]].kind == PD_T_INIT)
                        S->bufs[S->nbufs++] = n->in[j];
                for (int j = 0; j < g->nodes[i].nout; j++)
                    if (g->nodes[i].out[j] >= 0) S->act_bytes += (double)pd__tbytes(g, g->nodes[i].out[j]);
            }
    }
    return PD_OK;
}

/* Parameters: each belongs to the first virtual stage that reads it; a
 * later stage reading it too (tied weights) shares it: its backward adds
 * into a gradient buffer of its own, which the owner sums into the
 * parameter's at STEP, once every stage has met there. */
static pd_status pd__pipe_params(pd__pipe *p, const pd_plan *plan) {
    const pd_graph *g = p->g;
    pd__sched_kind kind = p->kind;
    for (int i = 0; i < p->sl.np; i++) {
        int t = p->sl.param[i], owner = INT32_MAX;
        for (int k = 0; k < g->nnodes; k++)
            for (int j = 0; j < g->nodes[k].nin; j++)
                if (g->nodes[k].in[j] == t && plan->fwd_stage[k] < owner) owner = plan->fwd_stage[k];
        if (owner == INT32_MAX) continue;
        pd__vstage *S = &p->vs[owner];
        S->pk[S->np] = S->packed;
        S->params[S->np++] = i;
        S->packed += g->tensors[t].numel;
        for (int k = owner + 1; k < p->nvstages; k++) {
            bool reads = false;
            for (int v = 0; v < g->nnodes && !reads; v++)
                for (int j = 0; j < g->nodes[v].nin; j++) reads |= g->nodes[v].in[j] == t && plan->fwd_stage[v] == k;
            if (!reads) continue;
            if (pd__sched_async(kind) || p->rep[owner % p->nworkers] > 1 || p->rep[k % p->nworkers] > 1) {
                return pd__err(PD_ERR_UNSUPPORTED,
                             "pipeline: parameter '%s' is read by stages %d and %d (tied weights): shared across "
                             "stages only under gpipe, flush, zb-h1 and interleaved, without replicas, so far",
                             g->tensors[t].name, owner, k);
            }
            pd__vstage *K = &p->vs[k];
            if (!K->sp && !(K->sp = PD_MALLOC(sizeof(int) * ((size_t)p->sl.np + 1)))) return pd__pipe_nomem(p);
            if (!K->spk && !(K->spk = PD_MALLOC(sizeof(int64_t) * ((size_t)p->sl.np + 1)))) return pd__pipe_nomem(p);
            K->spk[K->nsp] = K->spacked;
            K->sp[K->nsp++] = i;
            K->spacked += g->tensors[t].numel;
            p->shared = true;
        }
    }
    return PD_OK;
}

/* Links: activations made at or before virtual stage l (not graph inputs:
 * every stage reads those itself) and read after it; gradients added to
 * after and used here or before; what a backward here needs from after. */
static pd_status pd__pipe_links(pd__pipe *p, const pd__tstages *ts) {
    const pd_graph *g = p->g;
    const int *tstage = ts->tstage, *vlast = ts->vlast, *gfirst = ts->gfirst, *glast = ts->glast, *bfirst = ts->bfirst;
    for (int l = 0; l + 1 < p->nvstages; l++) {
        pd__link *L = &p->link[l];
        L->t = PD_MALLOC(sizeof(int) * ((size_t)g->ntensors + 1));
        L->gt = PD_MALLOC(sizeof(int) * ((size_t)g->ntensors + 1));
        L->bt = PD_MALLOC(sizeof(int) * ((size_t)g->ntensors + 1));
        L->fwd.cap = L->bwd.cap = p->nmicro + p->nvstages;
        L->fwd.ring = PD_CALLOC((size_t)L->fwd.cap, sizeof(pd__msg));
        L->bwd.ring = PD_CALLOC((size_t)L->bwd.cap, sizeof(pd__msg));
        L->fwd.pool = PD_CALLOC((size_t)L->fwd.cap + 2, sizeof(void *));
        L->bwd.pool = PD_CALLOC((size_t)L->bwd.cap + 2, sizeof(void *));
        if (!L->t || !L->gt || !L->bt || !L->fwd.ring || !L->bwd.ring) return pd__pipe_nomem(p);
        for (int t = 0; t < g->ntensors; t++) {
            if (tstage[t] < 0) continue;
            if (tstage[t] <= l && vlast[t] > l) { /* made here or before, needed after */
                L->t[L->nt++] = t;
                L->act_bytes += pd__tbytes(g, t);
            }
            /* a gradient added to after, used here or before */
            if (pd__session_needs_grad(p->s, t) && gfirst[t] <= l && glast[t] > l) {
                L->gt[L->ngt++] = t;
                L->grad_bytes += pd__tbytes(g, t);
            }
            if (bfirst[t] <= l && tstage[t] > l) { /* made after, a backward here or before needs it */
                L->bt[L->nbt++] = t;
                L->grad_bytes += pd__tbytes(g, t);
                p->vs[l].act_bytes += (double)pd__tbytes(g, t);
                p->vs[l].keep_bytes += (double)pd__tbytes(g, t);
                if (tstage[t] == l + 1) p->vs[l + 1].keep_bytes += (double)pd__tbytes(g, t); /* made there, sent back */
            }
        }
        p->vs[l + 1].act_bytes += (double)L->act_bytes;
        p->vs[l + 1].keep_bytes += (double)L->act_bytes;
    }
    return PD_OK;
}

/* What each virtual stage's contexts hold (need, per stage and tensor): its
 * nodes' (forward and backward) inputs and outputs, what its links carry in
 * and out, and the loss's prediction on the last; the rest has no memory there. */
static void pd__pipe_need(const pd__pipe *p, bool *need) {
    const pd_graph *g = p->g;
    for (int k = 0; k < p->nvstages; k++) {
        bool *nd = need + (size_t)k * (size_t)g->ntensors;
        const pd__vstage *S = &p->vs[k];
        for (int pass = 0; pass < 2; pass++)
            for (int q = 0; q < (pass ? S->nbnodes : S->nnodes); q++) {
                const pd__node *n = &g->nodes[pass ? S->bnodes[q] : S->nodes[q]];
                for (int j = 0; j < n->nin; j++)
                    if (n->in[j] >= 0) nd[n->in[j]] = true;
                for (int j = 0; j < n->nout; j++)
                    if (n->out[j] >= 0) nd[n->out[j]] = true;
            }
        for (int l = k - 1; l <= k; l++) {
            if (l < 0 || l + 1 >= p->nvstages) continue;
            const pd__link *L = &p->link[l];
            for (int q = 0; q < L->nt; q++) nd[L->t[q]] = true;
            for (int q = 0; q < L->ngt; q++) nd[L->gt[q]] = true;
            for (int q = 0; q < L->nbt; q++) nd[L->bt[q]] = true;
        }
        if (k == p->nvstages - 1) nd[p->pred] = true;
        if (p->labels_input >= 0) nd[p->labels_input] = nd[p->labels_input] || k == p->nvstages - 1;
    }
}

/* Replica r > 0 of chunk C: its BatchNorm statistics in memory of its own
 * (rep_bufs), from the session's, for every slot. */
static pd_status pd__rep_bufs(pd__pipe *p, pd__chunk *C, const pd__vstage *S) {
    size_t nb = 0;
    for (int j = 0; j < S->nbufs; j++) nb += pd__tbytes(p->g, S->bufs[j]);
    if (nb == 0) return PD_OK;
    if (!(C->rep_bufs = PD_MALLOC(nb))) return pd__pipe_nomem(p);
    for (int j = 0, off = 0; j < S->nbufs; off += (int)pd__tbytes(p->g, S->bufs[j]), j++) {
        char *mine = (char *)C->rep_bufs + off;
        memcpy(mine, pd__actx_value(C->slot[0], S->bufs[j])->data, pd__tbytes(p->g, S->bufs[j]));
        for (int k = 0; k < p->nslots; k++) pd__actx_value(C->slot[k], S->bufs[j])->data = mine;
    }
    return PD_OK;
}

/* Chunk c of thread W: its slots' activation contexts (role: which
 * gradients are written before its backward, read after; own: what a slot
 * keeps under recomputation), its weight stashes, and where each slot's
 * link buffers first point (orig). */
static pd_status pd__pipe_chunk(pd__pipe *p, pd__wk *W, int c, const bool *need, uint8_t *role, bool *own) {
    const pd_graph *g = p->g;
    int w = W->w, r = W->r;
    pd__chunk *C = &W->ch[c];
    const pd__vstage *S = &p->vs[c * p->nworkers + w];
    C->k = c * p->nworkers + w;
    C->slot = PD_CALLOC((size_t)p->nslots, sizeof *C->slot);
    C->slot_ver = PD_MALLOC(sizeof(int32_t) * (size_t)p->nslots);
    C->nstash = pd__sched_async(p->kind) ? p->nworkers + 1 : 0;
    C->stash = PD_CALLOC((size_t)C->nstash + 1, sizeof *C->stash);
    if (!C->slot || !C->slot_ver || !C->stash) return pd__pipe_nomem(p);
    if (S->nsp > 0 && !(C->sg = PD_CALLOC((size_t)S->spacked + 1, sizeof(float)))) return pd__pipe_nomem(p);
    /* the gradients it receives (link k's) and the loss's are
     * written before its backward; those it sends (link k-1's)
     * are read after (pd__actx_create) */
    memset(role, 0, (size_t)g->ntensors);
    const pd__link *Lr = C->k + 1 < p->nvstages ? &p->link[C->k] : NULL, *Ls = C->k > 0 ? &p->link[C->k - 1] : NULL;
    for (int q = 0; Lr && q < Lr->ngt; q++) role[Lr->gt[q]] |= PD__G_SET;
    for (int q = 0; Ls && q < Ls->ngt; q++) role[Ls->gt[q]] |= PD__G_KEEP;
    if (C->k == p->nvstages - 1) role[p->pred] |= PD__G_SET;
    /* recomputation: a slot keeps the values it received and those sent back (bipartition) */
    memset(own, 0, (size_t)g->ntensors);
    for (int q = 0; Ls && q < Ls->nt; q++) own[Ls->t[q]] = true;
    for (int q = 0; Ls && q < Ls->nbt; q++) own[Ls->bt[q]] = true;
    for (int q = 0; Lr && q < Lr->nbt; q++) own[Lr->bt[q]] = true;
    const bool *cneed = need + (size_t)C->k * (size_t)g->ntensors;
    if (p->recompute) PD_TRY(pd__rc_alloc(p, C, cneed, own));
    for (int k = 0; k < p->nslots; k++) {
        PD_TRY(pd__actx_create_in(p->s, cneed, p->recompute ? own : NULL, C->rc_vals, S->bnodes, S->nbnodes, role,
                                  p->kind == PD_SCHED_ZB_H1, &C->slot[k]));
        for (int j = 0; r > 0 && j < S->np; j++) { /* the replica's own gradients */
            int pi = S->params[j];
            pd__actx_grad(C->slot[k], p->sl.param[pi])->data = W->grads + p->sl.poff[pi];
        }
        for (int j = 0; j < S->nsp; j++) /* a shared parameter's: its own buffer */
            pd__actx_grad(C->slot[k], p->sl.param[S->sp[j]])->data = C->sg + S->spk[j];
    }
    if (r > 0) PD_TRY(pd__rep_bufs(p, C, S));
    for (int k = 0; k < C->nstash; k++) {
        C->stash[k].version = -1;
        C->stash[k].w = PD_MALLOC(sizeof(float) * ((size_t)S->packed + 1));
        if (!C->stash[k].w) return pd__pipe_nomem(p);
    }
    const pd__link *La = C->k > 0 ? &p->link[C->k - 1] : NULL;
    const pd__link *Lg = C->k + 1 < p->nvstages ? &p->link[C->k] : NULL;
    C->norig = (La ? La->nt : 0) + (Lg ? Lg->ngt + Lg->nbt : 0);
    C->held = PD_CALLOC(2 * (size_t)p->nslots, sizeof(void *));
    C->orig = PD_CALLOC((size_t)p->nslots * (size_t)C->norig + 1, sizeof(void *));
    C->sent = PD_CALLOC((size_t)p->nslots, sizeof(bool));
    if (!C->held || !C->orig || !C->sent) return pd__pipe_nomem(p);
    for (int k = 0; k < p->nslots; k++) {
        void **o = C->orig + (size_t)k * (size_t)C->norig;
        for (int q = 0; La && q < La->nt; q++) *o++ = pd__actx_value(C->slot[k], La->t[q])->data;
        for (int q = 0; Lg && q < Lg->ngt; q++) *o++ = pd__actx_grad(C->slot[k], Lg->gt[q])->data;
        for (int q = 0; Lg && q < Lg->nbt; q++) *o++ = pd__actx_value(C->slot[k], Lg->bt[q])->data;
    }
    return PD_OK;
}

pd_status pd__pipe_create(pd_graph *g, const pd_plan *plan, const pd_train_options *o, pd__sched_kind kind,
                          int microbatches, pd__pipe **out) {
    if (!g || !plan || !out) return pd__err(PD_ERR_INVALID, "pd__pipe_create: NULL argument");
    /* GPU stages (pd__dev_setup): the session keeps the host slabs, each stage its own device memory */
    bool gpu = o && o->size >= sizeof *o && o->device == PD_DEVICE_CUDA;
    PD_TRY(pd__pipe_check(o, kind, microbatches));
    pd_train_options ho;
    if (gpu) ho = *o, ho.device = PD_DEVICE_CPU;
    pd__pipe *p = PD_CALLOC(1, sizeof *p);
    if (!p) return pd__err(PD_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->g = g;
    p->kind = kind;
    p->nmicro = microbatches;
    p->local.base.vt = &pd__local_vt;
    p->local.p = p;
    for (int i = 0; i < 4; i++) p->gn[i].t = -1;
    p->fail_stage = -1;
    pd__pipe_inject_env(p);
    p->recompute = plan->recompute;
    bool *need = NULL; /* per virtual stage and tensor: its contexts hold it */
    uint8_t *role = NULL; /* per tensor, for one chunk's contexts (PD__G_SET, PD__G_KEEP) */
    bool *own = NULL;     /* recomputation: per tensor, for one chunk's contexts, the values each slot keeps */
    pd__tstages ts;
    bool have_ts = pd__tstages_alloc(&ts, g->ntensors);
    pd_status st = have_ts ? pd__shape(p, plan) : pd__err(PD_ERR_NOMEM, "out of memory");
    if (st != PD_OK) goto done;
    if (kind == PD_SCHED_INTERLEAVED && microbatches % p->nworkers != 0) {
        st = pd__err(PD_ERR_INVALID,
                     "pipeline: interleaved needs the microbatches (%d) to be a multiple of the %d workers",
                     microbatches, p->nworkers);
        goto done;
    }
    p->nslots = pd__sched_async(kind) ? microbatches + p->nworkers : microbatches; /* async: at most P in flight */
    bool lazy = false; /* lazy_weights: each process reads its stages' parameters only (stageload.c) */
    for (int t = 0; t < g->ntensors && !lazy; t++) lazy = pd__deferred(&g->tensors[t]);
    if ((st = pd__session_create_ex(g, gpu ? &ho : o, lazy, &p->s)) != PD_OK) goto done;
    p->o = *pd__session_options(p->s);
    pd__session_slabs(p->s, &p->sl);
    p->pred = pd__session_loss_tensor(p->s);
    p->labels_input = pd__session_labels_input(p->s);
    p->rows = g->ninputs > 0 && g->tensors[g->inputs[0]].ndim > 0 ? g->tensors[g->inputs[0]].shape[0] : 1;
    if ((st = pd__assign(p, plan, &ts)) != PD_OK) goto done;
    p->vs = PD_CALLOC((size_t)p->nvstages, sizeof *p->vs);
    p->wk = PD_CALLOC((size_t)p->nwk, sizeof *p->wk);
    p->link = PD_CALLOC((size_t)p->nvstages, sizeof *p->link);
    need = PD_CALLOC((size_t)p->nvstages * (size_t)g->ntensors + 1, sizeof(bool));
    role = PD_MALLOC((size_t)g->ntensors + 1);
    own = PD_MALLOC((size_t)g->ntensors + 1);
    if (!p->vs || !p->wk || !p->link || !need || !role || !own) {
        st = pd__pipe_nomem(p);
        goto done;
    }
    if ((st = pd__pipe_vstages(p, plan)) != PD_OK || (st = pd__pipe_params(p, plan)) != PD_OK ||
        (st = pd__pipe_links(p, &ts)) != PD_OK)
        goto done;
    pd__pipe_need(p, need);
    /* threads: replica r of worker w, each with its chunks' contexts */
    for (int w = 0, i = 0; w < p->nworkers; w++)
        for (int r = 0; r < p->rep[w]; r++, i++) {
            pd__wk *W = &p->wk[i];
            W->p = p;
            W->w = w;
            W->r = r;
            W->nrep = p->rep[w];
            W->x.threads = 1;
            W->x.g = g;
            W->x.training = true;
            W->ch = PD_CALLOC((size_t)p->nchunks, sizeof *W->ch);
            if (!W->ch || (r > 0 && !(W->grads = PD_CALLOC((size_t)p->sl.total + 1, sizeof(float))))) {
                st = pd__pipe_nomem(p);
                goto done;
            }
            for (int c = 0; c < p->nchunks; c++)
                if ((st = pd__pipe_chunk(p, W, c, need, role, own)) != PD_OK) goto done;
        }
    if (gpu) st = pd__dev_prepare(p, plan, o, &need);
done:
    PD_FREE(ts.tstage);
    PD_FREE(need);
    PD_FREE(role);
    PD_FREE(own);
    if (st != PD_OK) {
        pd__pipe_destroy(p);
        return st;
    }
    *out = p;
    return PD_OK;
}
