/* session.c - training on one stage: forward with every activation kept,
 * the loss, reverse-mode autodiff over the graph, one optimizer update.
 *
 * Which initializers are trained: the float32 ones from which a path of
 * differentiable op inputs (the grad masks of core/ops.h) leads to the loss,
 * that the model allows (pd__train_rule: its training_info, or not a single
 * element) or the trainable pattern names, minus those the freeze pattern
 * matches. BatchNorm running statistics, masks and shape constants never
 * reach the loss that way; the ones the rules exclude are listed
 * (pd_session_untrained).
 *
 * Memory (STYLE.md, after llm.c): parameters, their gradients and each
 * optimizer state live in one slab apiece with the same table of offsets, so
 * zeroing the gradients is one memset and an update is one loop over the
 * slab. The graph's initializers point into the parameter slab while the
 * session lives (the graph sees the trained values; pd_graph_save writes
 * them). Activations and their gradients are two more slabs, planned once:
 * the step allocates nothing.
 *
 * On CUDA (pd_train_options.device, docs/CUDA.md) every slab has a device
 * twin of the same layout (struct pd__sdev, runtime/session_dev.c): nodes run
 * through pd__cuda_run/_bwd on the device views, the loss, gradient norm,
 * clipping and optimizer on the device; the host slabs stay as the mirror the
 * CPU fallbacks, pd_session_param, snapshots and the graph's weights read
 * (pd__sdev_pull). A node the CUDA table refuses runs on the CPU with its
 * tensors copied down and its results copied up (pd__dev_cpu_node). The
 * pipeline's GPU stages run activation contexts' device twins (pd__dactx,
 * session_dev.c too) through the same kernels and the same fallback. The
 * session's layout is in session_impl.h.
 */
#include "session_impl.h"
#include "checkpoint.h"
#include "loss.h"
#include "optim.h"
#ifdef PD_HAVE_CUDA
#include "cuda/cuda.h"
#endif

#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>




int pd_session_num_params(const pd_session *s) { return s ? s->np : 0; }
int pd_session_num_untrained(const pd_session *s) { return s ? s->nuntrained : 0; }

pd_status pd_session_untrained(const pd_session *s, int i, pd_value_info *info, const char **why) {
    if (!s) return pd__err(PD_ERR_INVALID, "pd_session_untrained: session is NULL");
    if (i < 0 || i >= s->nuntrained)
        return pd__err(PD_ERR_INVALID, "pd_session_untrained: index %d out of range [0, %d)", i, s->nuntrained);
    const pd__tensor *t = &s->g->tensors[s->untrained[i]];
    if (info) PD_TRY(pd_graph_value(s->g, t->name, info));
    if (why)
        *why = s->frozen[i]                 ? "the freeze pattern matches it"
               : t->train == PD_TR_SCALAR   ? "one element: an exporter's constant"
               : t->train == PD_TR_EXPORTER ? "the exporter's graph signature: a buffer or constant, not a parameter"
                                            : "the model's training_info does not list it";
    return PD_OK;
}
int64_t pd_session_step_count(const pd_session *s) { return s ? s->step : 0; }

pd_status pd_session_sync(pd_session *s) {
    if (!s) return pd__err(PD_ERR_INVALID, "pd_session_sync: session is NULL");
    return s->dev ? pd__sdev_pull(s, false) : PD_OK;
}

pd_status pd_session_param(pd_session *s, int i, const char **name, pd_tensor *value, pd_tensor *grad) {
    if (!s) return pd__err(PD_ERR_INVALID, "pd_session_param: session is NULL");
    if (i < 0 || i >= s->np)
        return pd__err(PD_ERR_INVALID, "pd_session_param: index %d out of range [0, %d)", i, s->np);
    if (s->dev) PD_TRY(pd__sdev_pull(s, grad != NULL));
    const pd__tensor *t = &s->g->tensors[s->param[i]];
    if (name) *name = t->name;
    if (value) *value = pd__view(t);
    if (grad) {
        *grad = pd__view(t);
        grad->data = s->grads + s->poff[i];
    }
    return PD_OK;
}

void pd_session_destroy(pd_session *s) {
    if (!s) return;
    if (s->dev) {
        if (pd__sdev_ready(s)) (void)pd__sdev_pull(s, false); /* the graph gets the trained values */
        pd__sdev_destroy(s);
    }
    /* give the graph its own copies of the trained values back */
    for (int i = 0; i < s->np; i++) {
        pd__tensor *t = &s->g->tensors[s->param[i]];
        size_t bytes = (size_t)t->numel * sizeof(float);
        void *d = PD_MALLOC(bytes ? bytes : 1);
        if (d) memcpy(d, t->data, bytes);
        t->data = d; /* on allocation failure the graph loses this tensor's data, not memory safety */
        t->borrowed = false;
    }
    PD_FREE(s->param);
    PD_FREE(s->untrained);
    PD_FREE(s->frozen);
    PD_FREE(s->poff);
    PD_FREE(s->params);
    PD_FREE(s->grads);
    PD_FREE(s->state0);
    PD_FREE(s->state1);
    PD_FREE(s->act);
    PD_FREE(s->gact);
    PD_FREE(s->views);
    PD_FREE(s->gviews);
    PD_FREE(s->needs_grad);
    PD_FREE(s->args);
    PD_FREE(s->gargs);
    PD_FREE(s->arg_start);
    pd__zplan_free(&s->zp);
    PD_FREE(s->labels.data);
    PD_FREE(s->fed);
    PD_FREE(s->x.scratch);
    PD_FREE(s);
}

/* reach[t]: t depends on a trainable candidate through differentiable inputs.
 * need[t]: the loss depends on t through differentiable inputs. */
static void pd__flow(const pd_graph *g, const bool *seed, int loss, bool *reach, bool *need) {
    for (int t = 0; t < g->ntensors; t++) {
        reach[t] = seed[t];
        need[t] = t == loss;
    }
    for (int i = 0; i < g->nnodes; i++) {
        const pd__node *n = &g->nodes[i];
        uint32_t m = pd__ops[n->op].grad;
        bool r = false;
        for (int j = 0; j < n->nin && j < 32; j++)
            if (n->in[j] >= 0 && ((m >> j) & 1) && reach[n->in[j]]) r = true;
        if (!r) continue;
        for (int j = 0; j < n->nout; j++) {
            int t = n->out[j];
            if (t >= 0 && (g->tensors[t].dtype == PD_FLOAT || g->tensors[t].dtype == PD_DOUBLE)) reach[t] = true;
        }
    }
    for (int i = g->nnodes - 1; i >= 0; i--) {
        const pd__node *n = &g->nodes[i];
        /* only through outputs the flow reaches: an output no gradient can be
         * carried in (an int8 or float8 Cast) must not make its inputs look
         * trainable, or they would train on a gradient that is always 0 */
        bool u = false;
        for (int j = 0; j < n->nout; j++)
            if (n->out[j] >= 0 && need[n->out[j]] && reach[n->out[j]]) u = true;
        if (!u) continue;
        uint32_t m = pd__ops[n->op].grad;
        for (int j = 0; j < n->nin && j < 32; j++)
            if (n->in[j] >= 0 && ((m >> j) & 1)) need[n->in[j]] = true;
    }
}

static pd_status pd__find_outputs(pd_session *s) {
    pd_graph *g = s->g;
    if (g->noutputs == 0) return pd__err(PD_ERR_INVALID, "%s: the model has no outputs", g->path);
    s->labels_input = -1;
    if (s->o.output) {
        s->pred = -1;
        for (int i = 0; i < g->noutputs; i++)
            if (strcmp(g->tensors[g->outputs[i]].name, s->o.output) == 0) s->pred = g->outputs[i];
        if (s->pred < 0) return pd__err(PD_ERR_INVALID, "%s: the model has no output named '%s'", g->path, s->o.output);
    } else {
        s->pred = g->outputs[0];
    }
    if (s->o.loss != PD_LOSS_GRAPH) return PD_OK;
    /* the model computes its own loss: find the loss node and its labels input */
    const pd__node *ln = NULL;
    for (int i = 0; i < g->nnodes; i++) {
        const pd__node *n = &g->nodes[i];
        if ((n->op == PD_OP_SOFTMAX_CE_LOSS || n->op == PD_OP_NLL_LOSS) && n->nout > 0 &&
            (s->o.output ? n->out[0] == s->pred : true))
            ln = n;
    }
    if (!ln)
        return pd__err(PD_ERR_INVALID,
                       "%s: the graph's own loss (PD_LOSS_GRAPH) needs a SoftmaxCrossEntropyLoss or NegativeLogLikelihoodLoss node; the model "
                       "has none",
                       g->path);
    s->pred = ln->out[0];
    if (g->tensors[s->pred].numel != 1)
        return pd__err(PD_ERR_SHAPE, "%s: node '%s' must reduce to a scalar loss (reduction mean or sum)", g->path,
                       ln->name);
    int lt = ln->nin > 1 ? ln->in[1] : -1;
    if (s->o.labels_input) lt = pd__graph_find(g, s->o.labels_input);
    if (lt < 0 || g->tensors[lt].kind != PD_T_INPUT)
        return pd__err(PD_ERR_INVALID, "%s: node '%s': its labels are not a graph input the session can feed", g->path,
                       ln->name);
    s->labels_input = lt;
    return PD_OK;
}

/* A pattern option compiled (*have false when it is NULL or empty). */
static pd_status pd__regex(const char *field, const char *pat, regex_t *re, bool *have) {
    *have = false;
    if (!pat || !pat[0]) return PD_OK;
    int rc = regcomp(re, pat, REG_EXTENDED | REG_NOSUB);
    if (rc != 0) {
        char buf[256];
        regerror(rc, re, buf, sizeof buf);
        return pd__err(PD_ERR_INVALID, "%s '%s': %s", field, pat, buf);
    }
    *have = true;
    return PD_OK;
}

/* Where the flow from the initializers stops short of the loss: the first
 * node a reached tensor enters that passes no gradient on, because the op has
 * none for that input (QuantizeLinear) or its output is no float that could
 * carry one (a Cast to int8 or float8). Written as "; ..." into buf. */
static void pd__flow_stop(const pd_graph *g, const bool *reach, char *buf, size_t n) {
    buf[0] = '\0';
    for (int i = 0; i < g->nnodes; i++) {
        const pd__node *nd = &g->nodes[i];
        uint32_t m = pd__ops[nd->op].grad;
        for (int j = 0; j < nd->nin && j < 32; j++) {
            int t = nd->in[j];
            if (t < 0 || !reach[t]) continue;
            if (!((m >> j) & 1)) {
                snprintf(buf, n, "; the flow stops at node '%s' (%s), which has no gradient for '%s'", nd->name,
                         nd->op_type, g->tensors[t].name);
                return;
            }
            for (int k = 0; k < nd->nout; k++) {
                int o = nd->out[k];
                if (o >= 0 && !reach[o]) {
                    snprintf(buf, n, "; the flow stops at node '%s' (%s): its output '%s' is %s, which carries no gradient",
                             nd->name, nd->op_type, g->tensors[o].name, pd_dtype_name(g->tensors[o].dtype));
                    return;
                }
            }
        }
    }
}

static pd_status pd__choose_params(pd_session *s) {
    pd_graph *g = s->g;
    bool *seed = PD_CALLOC((size_t)g->ntensors + 1, sizeof(bool));
    bool *reach = PD_CALLOC((size_t)g->ntensors + 1, sizeof(bool));
    bool *all = PD_CALLOC((size_t)g->ntensors + 1, sizeof(bool));
    bool *frozen = PD_CALLOC((size_t)g->ntensors + 1, sizeof(bool));
    s->needs_grad = PD_CALLOC((size_t)g->ntensors + 1, sizeof(bool));
    s->param = PD_MALLOC(sizeof(int) * ((size_t)g->ntensors + 1));
    s->untrained = PD_MALLOC(sizeof(int) * ((size_t)g->ntensors + 1));
    s->frozen = PD_CALLOC((size_t)g->ntensors + 1, sizeof(bool));
    s->poff = PD_MALLOC(sizeof(int64_t) * ((size_t)g->ntensors + 1));
    pd_status st = PD_OK;
    regex_t re, tre;
    bool have_re = false, have_tre = false;
    if (!seed || !reach || !all || !frozen || !s->needs_grad || !s->param || !s->untrained || !s->frozen || !s->poff) {
        st = pd__err(PD_ERR_NOMEM, "out of memory");
        goto done;
    }
    if ((st = pd__regex("freeze", s->o.freeze, &re, &have_re)) != PD_OK ||
        (st = pd__regex("trainable", s->o.trainable, &tre, &have_tre)) != PD_OK)
        goto done;
    /* all: every float initializer the loss could train; seed: those the rules and patterns allow */
    for (int t = 0; t < g->ntensors; t++) {
        const pd__tensor *x = &g->tensors[t];
        all[t] = x->kind == PD_T_INIT && x->dtype == PD_FLOAT && x->data && x->numel > 0;
        bool allowed = x->train == PD_TR_DEFAULT || x->train == PD_TR_LISTED ||
                       (have_tre && regexec(&tre, x->name, 0, NULL, 0) == 0);
        frozen[t] = have_re && regexec(&re, x->name, 0, NULL, 0) == 0;
        seed[t] = all[t] && allowed && !frozen[t];
    }
    /* the untrained: what the whole set's flow reaches that the chosen set
     * leaves out (needs_grad is the scratch here; the chosen set's flow below
     * writes it for good) */
    pd__flow(g, all, s->pred, reach, s->needs_grad);
    s->nuntrained = 0;
    for (int t = 0; t < g->ntensors; t++)
        if (all[t] && !seed[t] && reach[t] && s->needs_grad[t]) {
            s->frozen[s->nuntrained] = frozen[t];
            s->untrained[s->nuntrained++] = t;
        }
    pd__flow(g, seed, s->pred, reach, s->needs_grad);
    s->np = 0;
    s->ptotal = 0;
    for (int t = 0; t < g->ntensors; t++) {
        s->needs_grad[t] = s->needs_grad[t] && reach[t];
        if (seed[t] && s->needs_grad[t]) {
            g->tensors[t].trained = true;
            s->param[s->np] = t;
            s->poff[s->np++] = s->ptotal;
            s->ptotal += (g->tensors[t].numel + 15) & ~(int64_t)15;
        }
    }
    if (s->np == 0) {
        char why[512];
        pd__flow_stop(g, reach, why, sizeof why);
        st = pd__err(PD_ERR_INVALID, "%s: nothing to train: no float32 initializer reaches the loss%s%s", g->path,
                     s->nuntrained ? " that the model and the freeze pattern allow" : "", why);
    }
done:
    if (have_re) regfree(&re);
    if (have_tre) regfree(&tre);
    PD_FREE(seed);
    PD_FREE(reach);
    PD_FREE(all);
    PD_FREE(frozen);
    return st;
}

static void *pd__slab(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) return NULL;
    memset(p, 0, bytes ? bytes : 64);
    return p;
}

/* Whether a node's backward runs: it has an output gradient to read and an
 * input gradient to add into (ga: its gradient arguments, outputs' first).
 * pd__backward's rule, which the planning below follows. */
bool pd__bwd_runs_of(const pd__node *n, pd_tensor *const *ga) {
    bool any_out = false, any_in = false;
    for (int j = 0; j < n->nout; j++) any_out |= ga[j] != NULL;
    for (int j = 0; j < n->nin; j++) any_in |= ga[n->nout + j] != NULL;
    return any_out && any_in;
}

static bool pd__bwd_runs(const pd_session *s, int i) { return pd__bwd_runs_of(&s->g->nodes[i], s->gargs + s->arg_start[i]); }

/* The activation gradients of a backward: when each is zeroed, and where it
 * lives.
 *
 * Backward kernels add into their gradients, so each activation gradient
 * must be 0 before the first kernel that touches it. Rather than clearing
 * the whole slab before the backward (a pass over memory that leaves none of
 * it in cache), each is cleared just before the first node of the backward
 * order that touches it: an output gradient no later node added into, or an
 * input gradient this node adds into first (zp, by node). Better still, a
 * gradient the node's kernel writes whole is not zeroed at all: the kernel
 * is told it is fresh (pd__exec.fresh) and writes rather than adds.
 *
 * A gradient then lives from that node to the last backward that touches it
 * (its producer's, which reads it); gradients whose lives do not overlap
 * share bytes (pd__life), so the backward works in a slab a few layers deep
 * rather than one the size of every activation, and stays in cache.
 *
 * The backward runs over nodes[0..n) (NULL: the graph's, in order) in
 * reverse; steps count its order. has: the tensors given a buffer (NULL:
 * all), of those that need a gradient and are not initializers. role (NULL:
 * none) marks PD__G_SET gradients, written before the backward (the loss's
 * prediction, those a pipeline stage receives): never zeroed here, alive
 * from the start; and PD__G_KEEP ones, read after it (those a stage sends):
 * alive to the end. split: the backward may run in two passes (zero-bubble's
 * B then W, which reads every output gradient again), so nothing shares. One
 * touched nowhere lives nowhere (step -2). On return l holds each buffer's
 * offset in a slab of *total bytes (the caller's to allocate and free l). */
static pd_status pd__plan_grads_over(const pd_session *s, pd_tensor *const *gargs, const int *nodes, int n,
                                     const bool *has, const uint8_t *role, bool split, pd__zplan *zp, pd__life *l,
                                     size_t *total) {
    const pd_graph *g = s->g;
    int nargs = g->nnodes ? s->arg_start[g->nnodes - 1] + g->nodes[g->nnodes - 1].nin + g->nodes[g->nnodes - 1].nout : 0;
    zp->at = PD_CALLOC(3 * (size_t)g->nnodes + 1, sizeof(int));
    zp->list = PD_CALLOC((size_t)nargs + 1, sizeof(int));
    zp->fresh = PD_CALLOC((size_t)g->nnodes + 1, sizeof(uint32_t));
    if (!zp->at || !zp->list || !zp->fresh || pd__life_init(l, g->ntensors) != PD_OK) {
        pd__zplan_free(zp);
        return pd__err(PD_ERR_NOMEM, "%s: out of memory planning the training buffers", g->path);
    }
    enum { UNTOUCHED = INT32_MAX };
    for (int t = 0; t < g->ntensors; t++) {
        const pd__tensor *x = &g->tensors[t];
        if (!s->needs_grad[t] || x->kind == PD_T_INIT || (has && !has[t])) continue;
        int r = role ? role[t] : 0;
        pd__life_add(l, t, r & PD__G_SET ? -1 : UNTOUCHED, r & PD__G_KEEP ? n : -1,
                     (size_t)(x->numel > 0 ? x->numel : 0) * pd_dtype_size(x->dtype));
    }
    int nz = 0;
    for (int k = n - 1; k >= 0; k--) {
        int i = nodes ? nodes[k] : k;
        const pd__node *nd = &g->nodes[i];
        pd_tensor *const *ga = gargs + s->arg_start[i];
        int step = n - 1 - k;
        zp->at[3 * i] = zp->at[3 * i + 1] = zp->at[3 * i + 2] = nz;
        if (!pd__bwd_runs_of(nd, ga)) continue;
        /* first touches: zeroed (pass 0), or written whole by the kernel
         * (pass 1: an input gradient the node adds into through one
         * argument only, not also an output's) */
        int first[64], nf = 0;
        for (int j = 0; j < nd->nout + nd->nin; j++) {
            int t = j < nd->nout ? nd->out[j] : nd->in[j - nd->nout], b = ga[j] ? l->at[t] : -1;
            if (b < 0) continue; /* no gradient asked for, or a parameter's */
            if (l->first[b] == UNTOUCHED) {
                l->first[b] = step;
                if (nf < 64) first[nf++] = j;
                else zp->list[nz++] = t;
            }
            if (l->last[b] < step) l->last[b] = step;
        }
        for (int pass = 0; pass < 2; pass++) {
            for (int f = 0; f < nf; f++) {
                int j = first[f], q = j - nd->nout, t = j < nd->nout ? nd->out[j] : nd->in[q], uses = 0;
                for (int a = 0; a < nd->nout + nd->nin; a++)
                    uses += ga[a] && (a < nd->nout ? nd->out[a] : nd->in[a - nd->nout]) == t;
                bool fresh = q >= 0 && q < 32 && uses == 1;
                if (fresh != (pass == 1)) continue;
                zp->list[nz++] = t;
                if (fresh) zp->fresh[i] |= 1u << q;
            }
            zp->at[3 * i + 1 + pass] = nz;
        }
    }
    for (int b = 0; b < l->n; b++)
        if (l->first[b] == UNTOUCHED) l->first[b] = l->last[b] = -2;
        else if (split || l->last[b] < l->first[b]) l->last[b] = split ? n : l->first[b];
    if (pd__life_pack(l, total) != PD_OK) {
        pd__life_free(l);
        pd__zplan_free(zp);
        return pd__err(PD_ERR_NOMEM, "%s: out of memory planning the training buffers", g->path);
    }
    return PD_OK;
}

void pd__zplan_free(pd__zplan *zp) {
    PD_FREE(zp->at);
    PD_FREE(zp->list);
    PD_FREE(zp->fresh);
    memset(zp, 0, sizeof *zp);
}

/* Before node i's backward: zeroes the activation gradients it touches
 * first, except those its kernel writes whole (x->fresh, which the CPU's
 * pd__cpu_run_bwd honours or zeroes itself); gv: the gradients' views. */
static void pd__zplan_run(const pd_graph *g, const pd__zplan *zp, const pd_tensor *gv, int i, pd__exec *x) {
    for (int k = zp->at[3 * i]; k < zp->at[3 * i + 1]; k++) {
        const pd__tensor *t = &g->tensors[zp->list[k]];
        memset(gv[zp->list[k]].data, 0, (size_t)t->numel * pd_dtype_size(t->dtype));
    }
    x->fresh = zp->fresh[i];
}

/* The session's activation gradients (pd__plan_grads_over over the whole
 * graph); the prediction's is written by the loss. */
static pd_status pd__plan_grads(pd_session *s) {
    const pd_graph *g = s->g;
    uint8_t *role = PD_CALLOC((size_t)g->ntensors + 1, 1);
    if (!role) return pd__err(PD_ERR_NOMEM, "%s: out of memory planning the training buffers", g->path);
    role[s->pred] = PD__G_SET;
    pd__life l;
    size_t total;
    pd_status st = pd__plan_grads_over(s, s->gargs, NULL, g->nnodes, NULL, role, false, &s->zp, &l, &total);
    PD_FREE(role);
    if (st != PD_OK) return st;
    s->gact = s->o.device == PD_DEVICE_CUDA ? PD_CALLOC(1, total + 64) : pd__slab(total); /* see s->act */
    s->gact_bytes = total;
    if (s->gact)
        for (int b = 0; b < l.n; b++) s->gviews[l.id[b]].data = (char *)s->gact + l.off[b];
    pd__life_free(&l);
    return s->gact ? PD_OK : pd__err(PD_ERR_NOMEM, "%s: out of memory for the activation gradients", g->path);
}

pd_status pd_session_create(pd_graph *g, const pd_train_options *opt, pd_session **out) {
    if (!g || !out) return pd__err(PD_ERR_INVALID, "pd_session_create: graph and out must not be NULL");
    pd_train_options o = PD_TRAIN_OPTIONS_INIT;
    PD_TRY(pd__opts_read(&o, opt, sizeof o, "pd_session_create: opt"));
    if (!(o.lr > 0) || !isfinite(o.lr)) return pd__err(PD_ERR_INVALID, "the learning rate must be > 0, not %g", o.lr);
    if (o.momentum < 0 || o.beta1 < 0 || o.beta1 >= 1 || o.beta2 < 0 || o.beta2 >= 1 || !(o.eps > 0) ||
        o.weight_decay < 0 || o.clip_grad_norm < 0 || o.warmup_steps < 0 || o.cosine_steps < 0 || o.min_lr < 0)
        return pd__err(PD_ERR_INVALID, "optimizer options out of range (momentum/betas in [0,1), eps > 0, the rest >= 0)");
    if ((unsigned)o.optimizer > PD_OPT_ADAMW) return pd__err(PD_ERR_INVALID, "unknown optimizer %d", (int)o.optimizer);
    if ((unsigned)o.device > PD_DEVICE_CUDA || (unsigned)o.precision > PD_PRECISION_BF16)
        return pd__err(PD_ERR_INVALID, "unknown device %d or precision %d", (int)o.device, (int)o.precision);
    if (o.device == PD_DEVICE_CUDA) {
#ifndef PD_HAVE_CUDA
        return pd__err(PD_ERR_UNSUPPORTED, "device cuda: this build has no CUDA backend (meson setup -Dcuda=enabled)");
#else
        if (pd__cuda_load() != PD_OK) { /* the module or a CUDA library it needs is missing: say which */
            pd__err_prefix("device cuda");
            return PD_ERR_UNSUPPORTED;
        }
#endif
        int n = pd_cuda_device_count();
        if (n == 0) return pd__err(PD_ERR_UNSUPPORTED, "device cuda: no CUDA GPU found (no device, or no driver)");
        if (o.device_index < 0 || o.device_index >= n)
            return pd__err(PD_ERR_INVALID, "device cuda:%d: this machine has %d GPU%s (cuda:0..%d)", o.device_index,
                           n, n == 1 ? "" : "s", n - 1);
    }
    for (int t = 0; t < g->ntensors; t++)
        if (g->tensors[t].borrowed)
            return pd__err(PD_ERR_INVALID, "%s: the graph is already being trained by another session", g->path);
    pd_session *s = PD_CALLOC(1, sizeof *s);
    if (!s) return pd__err(PD_ERR_NOMEM, "out of memory creating the session");
    s->g = g;
    s->o = o;
    s->x.g = g;
    s->x.threads = pd__threads_default(o.threads);
    pd_status st = pd__find_outputs(s);
    if (st == PD_OK) st = pd__choose_params(s);
    if (st != PD_OK) goto fail;
    for (int i = 0; i < g->nnodes; i++) {
        const pd__node *n = &g->nodes[i];
        bool needed = false;
        for (int j = 0; j < n->nout; j++) needed |= n->out[j] >= 0 && s->needs_grad[n->out[j]];
        if (needed && !pd__ops[n->op].grad) {
            st = pd__node_err(g, n, PD_ERR_UNSUPPORTED, "operator %s has no gradient", n->op_type);
            goto fail;
        }
    }
    /* the parameter, gradient and optimizer slabs */
    size_t pbytes = sizeof(float) * (size_t)s->ptotal;
    s->params = pd__slab(pbytes);
    s->grads = pd__slab(pbytes);
    int ns = pd__optim_state_slabs(o.optimizer);
    if (ns > 0) s->state0 = pd__slab(pbytes);
    if (ns > 1) s->state1 = pd__slab(pbytes);
    if (!s->params || !s->grads || (ns > 0 && !s->state0) || (ns > 1 && !s->state1)) goto nomem;
    /* the activation slab: everything is kept for the backward; the
     * activation gradients' slab is planned below, once the backward is */
    size_t abytes = 0;
    for (int t = 0; t < g->ntensors; t++) {
        const pd__tensor *x = &g->tensors[t];
        size_t b = pd__align64((size_t)(x->numel > 0 ? x->numel : 0) * pd_dtype_size(x->dtype));
        if ((x->kind == PD_T_ACT || x->kind == PD_T_INPUT) && x->ndim >= 0) abytes += b;
    }
    /* on CUDA the host slabs are a mirror few pages of which are ever touched:
     * calloc's pages are committed on first use, not here */
    s->act = o.device == PD_DEVICE_CUDA ? PD_CALLOC(1, abytes + 64) : pd__slab(abytes);
    s->views = PD_CALLOC((size_t)g->ntensors + 1, sizeof(pd_tensor));
    s->gviews = PD_CALLOC((size_t)g->ntensors + 1, sizeof(pd_tensor));
    s->fed = PD_CALLOC((size_t)g->ntensors + 1, sizeof(bool));
    if (!s->act || !s->views || !s->gviews || !s->fed) goto nomem;
    /* parameters move into the slab; the graph borrows them back */
    for (int i = 0; i < s->np; i++) {
        pd__tensor *t = &g->tensors[s->param[i]];
        memcpy(s->params + s->poff[i], t->data, sizeof(float) * (size_t)t->numel);
        PD_FREE(t->data);
        t->data = s->params + s->poff[i];
        t->borrowed = true;
    }
    size_t ao = 0;
    for (int t = 0; t < g->ntensors; t++) {
        pd__tensor *x = &g->tensors[t];
        s->views[t] = pd__view(x);
        size_t b = pd__align64((size_t)(x->numel > 0 ? x->numel : 0) * pd_dtype_size(x->dtype));
        if ((x->kind == PD_T_ACT || x->kind == PD_T_INPUT) && x->ndim >= 0) {
            s->views[t].data = (char *)s->act + ao;
            ao += b;
        }
        if (s->needs_grad[t]) {
            s->gviews[t] = pd__view(x);
            if (x->kind == PD_T_INIT) {
                for (int i = 0; i < s->np; i++)
                    if (s->param[i] == t) s->gviews[t].data = s->grads + s->poff[i];
            }
        }
    }
    int nargs = 0;
    for (int i = 0; i < g->nnodes; i++) nargs += g->nodes[i].nin + g->nodes[i].nout;
    s->args = PD_CALLOC((size_t)nargs + 1, sizeof(pd_tensor *));
    s->gargs = PD_CALLOC((size_t)nargs + 1, sizeof(pd_tensor *));
    s->arg_start = PD_CALLOC((size_t)g->nnodes + 1, sizeof(int));
    if (!s->args || !s->gargs || !s->arg_start) goto nomem;
    for (int i = 0, k = 0; i < g->nnodes; i++) {
        const pd__node *n = &g->nodes[i];
        uint32_t m = pd__ops[n->op].grad;
        s->arg_start[i] = k;
        for (int j = 0; j < n->nin; j++) {
            int t = n->in[j];
            s->args[k] = t >= 0 ? &s->views[t] : NULL;
            /* gargs: output gradients first, then input gradients */
            s->gargs[s->arg_start[i] + n->nout + j] =
                (t >= 0 && j < 32 && ((m >> j) & 1) && s->needs_grad[t]) ? &s->gviews[t] : NULL;
            k++;
        }
        for (int j = 0; j < n->nout; j++) {
            int t = n->out[j];
            s->args[k++] = t >= 0 ? &s->views[t] : NULL;
            s->gargs[s->arg_start[i] + j] = (t >= 0 && s->needs_grad[t]) ? &s->gviews[t] : NULL;
        }
    }
    if ((st = pd__plan_grads(s)) != PD_OK) goto fail;
    const pd__tensor *p = &g->tensors[s->pred];
    if (o.loss != PD_LOSS_GRAPH && p->dtype != PD_FLOAT) {
        st = pd__err(PD_ERR_SHAPE, "%s: output '%s' is %s; the losses need float32", g->path, p->name,
                     pd_dtype_name(p->dtype));
        goto fail;
    }
    if (o.device == PD_DEVICE_CUDA && (st = pd__sdev_create(s)) != PD_OK) goto fail;
    *out = s;
    return PD_OK;
nomem:
    st = pd__err(PD_ERR_NOMEM, "%s: out of memory planning the training buffers", g->path);
fail:
    pd_session_destroy(s);
    return st;
}

pd_status pd_session_set_input(pd_session *s, const char *name, const pd_tensor *t) {
    if (!s || !name || !t || !t->data)
        return pd__err(PD_ERR_INVALID, "pd_session_set_input: %s is NULL",
                       !s ? "session" : !name ? "name" : !t ? "tensor" : "the tensor's data");
    const pd_graph *g = s->g;
    int k = pd__graph_find(g, name);
    if (k < 0 || g->tensors[k].kind != PD_T_INPUT)
        return pd__err(PD_ERR_INVALID, "%s: the model has no input named '%s'", g->path, name);
    const pd__tensor *x = &g->tensors[k];
    char want[256], got[256];
    pd__format_shape(want, sizeof want, x->ndim, x->shape);
    pd__format_shape(got, sizeof got, t->ndim, t->shape);
    bool same = t->ndim == x->ndim && t->dtype == x->dtype;
    for (int i = 0; same && i < x->ndim; i++) same = t->shape[i] == x->shape[i];
    if (!same)
        return pd__err(PD_ERR_SHAPE, "%s: input '%s' must be %s%s, got %s%s", g->path, name, pd_dtype_name(x->dtype),
                       want, pd_dtype_name(t->dtype), got);
    memcpy(s->views[k].data, t->data, (size_t)x->numel * pd_dtype_size(x->dtype));
    if (s->dev) PD_TRY(pd__sdev_input(s, k));
    s->fed[k] = true;
    return PD_OK;
}

pd_status pd_session_set_labels(pd_session *s, const pd_tensor *labels) {
    if (!s || !labels || !labels->data)
        return pd__err(PD_ERR_INVALID, "pd_session_set_labels: %s is NULL",
                       !s ? "session" : !labels ? "labels" : "the labels' data");
    if (labels->ndim < 0 || labels->ndim > PD_MAX_DIMS || pd_tensor_numel(labels) < 0)
        return pd__err(PD_ERR_INVALID, "pd_session_set_labels: labels: bad shape (ndim %d)", labels->ndim);
    if (s->labels_input >= 0) {
        PD_TRY(pd_session_set_input(s, s->g->tensors[s->labels_input].name, labels));
        s->labels_fed = true;
        return PD_OK;
    }
    size_t bytes = (size_t)pd_tensor_numel(labels) * pd_dtype_size(labels->dtype);
    bool same = s->labels.data && labels->dtype == s->labels.dtype && labels->ndim == s->labels.ndim;
    for (int i = 0; same && i < labels->ndim; i++) same = labels->shape[i] == s->labels.shape[i];
    if (!same) {
        void *d = PD_MALLOC(bytes ? bytes : 1);
        if (!d) return pd__err(PD_ERR_NOMEM, "out of memory for the labels");
        PD_FREE(s->labels.data);
        s->labels = *labels;
        s->labels.data = d;
    }
    memcpy(s->labels.data, labels->data, bytes);
    if (s->dev) PD_TRY(pd__sdev_labels(s));
    s->labels_fed = true;
    return PD_OK;
}

static pd_status pd__check_fed(const pd_session *s) {
    const pd_graph *g = s->g;
    for (int i = 0; i < g->ninputs; i++)
        if (!s->fed[g->inputs[i]])
            return pd__err(PD_ERR_INVALID, "%s: input '%s' has not been set", g->path, g->tensors[g->inputs[i]].name);
    if (!s->labels_fed) return pd__err(PD_ERR_INVALID, "%s: no labels have been set", g->path);
    return PD_OK;
}

static int64_t pd__now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ms: NULL, or per node the time its forward took (the profiler's hook). */
static pd_status pd__forward(pd_session *s, double *ms) {
    const pd_graph *g = s->g;
    for (int i = 0; i < g->nnodes; i++) {
        const pd__node *n = &g->nodes[i];
        pd_tensor **a = s->args + s->arg_start[i];
        int64_t t0 = ms ? pd__now_ns() : 0;
        PD_TRY(pd__cpu_run(&s->x, g, n, a, a + n->nin));
        if (ms) ms[i] = 1e-6 * (double)(pd__now_ns() - t0);
    }
    return PD_OK;
}

/* The loss of pred against labels; d (when not NULL) receives dLoss/dpred. */
static pd_status pd__loss_of(const pd_session *s, const pd_tensor *pred, const pd_tensor *labels, float *d,
                             int64_t rows, pd_step_result *r) {
    r->correct = 0;
    r->count = 0;
    pd_loss_kind k = s->o.loss;
    if (k == PD_LOSS_AUTO) k = labels->dtype == PD_INT64 ? PD_LOSS_CROSS_ENTROPY : PD_LOSS_MSE;
    pd_status st;
    switch (k) {
    case PD_LOSS_GRAPH:
        r->loss = pd__get_f(pred->dtype, pred->data, 0);
        r->count = 1;
        if (d) pd__set_f(pred->dtype, d, 0, 1.0);
        return PD_OK;
    case PD_LOSS_CROSS_ENTROPY:
        st = pd__loss_cross_entropy(pred, labels, rows, d, &r->loss, &r->correct, &r->count);
        break;
    default:
        st = pd__loss_mse(pred, labels, rows, d, &r->loss, &r->count);
        break;
    }
    if (st != PD_OK) pd__err_prefix("%s: output '%s'", s->g->path, s->g->tensors[s->pred].name);
    return st;
}

/* The loss of the current forward; with grad, writes dLoss/dpred. */
pd_status pd__loss(pd_session *s, bool grad, int64_t rows, pd_step_result *r) {
    return pd__loss_of(s, &s->views[s->pred], &s->labels, grad ? s->gviews[s->pred].data : NULL, rows, r);
}

/* Names the first computed float tensor holding a NaN or Inf. */
pd_status pd__numeric_error(pd_session *s, const char *what, double v) {
    const pd_graph *g = s->g;
    for (int i = 0; i < g->nnodes; i++) {
        const pd__node *n = &g->nodes[i];
        for (int j = 0; j < n->nout; j++) {
            int t = n->out[j];
            if (t < 0 || g->tensors[t].dtype != PD_FLOAT) continue;
            const float *p = s->views[t].data;
            for (int64_t e = 0; e < g->tensors[t].numel; e++)
                if (!isfinite(p[e]))
                    return pd__err(PD_ERR_NUMERIC,
                                   "%s: step %lld: %s is %g; the first non-finite tensor is '%s' (output of node '%s', "
                                   "%s), element %lld = %g",
                                   g->path, (long long)s->step + 1, what, v, g->tensors[t].name, n->name, n->op_type,
                                   (long long)e, (double)p[e]);
        }
    }
    return pd__err(PD_ERR_NUMERIC, "%s: step %lld: %s is %g", g->path, (long long)s->step + 1, what, v);
}

static pd_status pd__backward(pd_session *s) {
    const pd_graph *g = s->g;
    for (int i = g->nnodes - 1; i >= 0; i--) {
        const pd__node *n = &g->nodes[i];
        pd_tensor **a = s->args + s->arg_start[i], **ga = s->gargs + s->arg_start[i];
        if (!pd__bwd_runs(s, i)) continue;
        pd__zplan_run(g, &s->zp, s->gviews, i, &s->x);
        PD_TRY(pd__cpu_run_bwd(&s->x, g, n, a, a + n->nin, ga, ga + n->nout));
    }
    return PD_OK;
}

/* The backward of pd__backward, each node's run as two kernel calls, timed:
 * the input gradients (din only for inputs that are not parameters), then the
 * weight gradients (din only for parameters). Gradients are added (+=), so the
 * result is the same as one call asking for both. */
static pd_status pd__backward_split(pd_session *s, double *in_ms, double *w_ms) {
    const pd_graph *g = s->g;
    int maxin = 0;
    for (int i = 0; i < g->nnodes; i++) {
        maxin = g->nodes[i].nin > maxin ? g->nodes[i].nin : maxin;
        in_ms[i] = w_ms[i] = 0;
    }
    pd_tensor **din = PD_CALLOC((size_t)maxin + 1, sizeof *din);
    if (!din) return pd__err(PD_ERR_NOMEM, "out of memory");
    pd_status st = PD_OK;
    for (int i = g->nnodes - 1; i >= 0 && st == PD_OK; i--) {
        const pd__node *n = &g->nodes[i];
        pd_tensor **a = s->args + s->arg_start[i], **ga = s->gargs + s->arg_start[i];
        bool any_out = false;
        for (int j = 0; j < n->nout; j++) any_out |= ga[j] != NULL;
        pd__zplan_run(g, &s->zp, s->gviews, i, &s->x); /* fresh: part 0's, the activations' gradients */
        for (int part = 0; part < 2 && any_out && st == PD_OK; part++) {
            bool any = false;
            for (int j = 0; j < n->nin; j++) {
                pd_tensor *d = ga[n->nout + j];
                bool w = d && g->tensors[n->in[j]].kind == PD_T_INIT;
                din[j] = (d && w == (part == 1)) ? d : NULL;
                any |= din[j] != NULL;
            }
            if (!any) continue;
            int64_t t0 = pd__now_ns();
            st = pd__cpu_run_bwd(&s->x, g, n, a, a + n->nin, ga, din);
            (part ? w_ms : in_ms)[i] = 1e-6 * (double)(pd__now_ns() - t0);
        }
        s->x.fresh = 0;
    }
    PD_FREE(din);
    return st;
}

uint64_t pd__mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

pd_status pd_session_step(pd_session *s, pd_step_result *r) {
    if (!s) return pd__err(PD_ERR_INVALID, "pd_session_step: session is NULL");
    PD_TRY(pd__check_fed(s));
    if (s->dev) return pd__sdev_step(s, r);
    pd_step_result res;
    memset(&res, 0, sizeof res);
    s->x.training = true;
    s->x.seed = pd__mix(s->o.seed ^ pd__mix((uint64_t)s->step));
    PD_TRY(pd__forward(s, NULL));
    memset(s->grads, 0, sizeof(float) * (size_t)s->ptotal);
    const pd__tensor *pt = &s->g->tensors[s->pred]; /* the other activation gradients: pd__backward */
    if (s->gviews[s->pred].data) memset(s->gviews[s->pred].data, 0, (size_t)pt->numel * pd_dtype_size(pt->dtype));
    PD_TRY(pd__loss(s, true, INT64_MAX, &res));
    if (!isfinite(res.loss)) return pd__numeric_error(s, "the loss", res.loss);
    PD_TRY(pd__backward(s));
    res.grad_norm = pd__grad_norm(s->grads, s->ptotal);
    if (!isfinite(res.grad_norm)) return pd__numeric_error(s, "the gradient norm", res.grad_norm);
    if (s->o.clip_grad_norm > 0 && res.grad_norm > s->o.clip_grad_norm) {
        float c = (float)(s->o.clip_grad_norm / (res.grad_norm + 1e-6));
        for (int64_t i = 0; i < s->ptotal; i++) s->grads[i] *= c;
    }
    res.lr = pd__lr_at(&s->o, s->step + 1);
    pd__optim_step(&s->o, s->step + 1, res.lr, s->params, s->grads, s->state0, s->state1, s->ptotal);
    s->step++;
    if (r) *r = res;
    return PD_OK;
}

pd_status pd_session_eval_rows(pd_session *s, int64_t rows, pd_step_result *r) {
    if (!s) return pd__err(PD_ERR_INVALID, "pd_session_eval: session is NULL");
    PD_TRY(pd__check_fed(s));
    if (s->dev) return pd__sdev_eval(s, rows, r);
    pd_step_result res;
    memset(&res, 0, sizeof res);
    s->x.training = false;
    PD_TRY(pd__forward(s, NULL));
    PD_TRY(pd__loss(s, false, rows, &res));
    if (r) *r = res;
    return PD_OK;
}

pd_status pd_session_eval(pd_session *s, pd_step_result *r) { return pd_session_eval_rows(s, INT64_MAX, r); }

int64_t pd_session_batch(const pd_session *s) {
    if (!s) return 0;
    const pd__tensor *p = &s->g->tensors[s->pred];
    return p->ndim > 0 ? p->shape[0] : 1;
}

/* ---- the profiler's hooks (session.h) ----------------------------------------- */

int pd__session_loss_tensor(const pd_session *s) { return s->pred; }
int pd__session_labels_input(const pd_session *s) { return s->labels_input; }

pd_status pd__session_timed_step(pd_session *s, pd__step_times *t) {
    if (!s || !t) return pd__err(PD_ERR_INVALID, "pd__session_timed_step: NULL argument");
    PD_TRY(pd__check_fed(s));
    if (s->dev) return pd__sdev_timed_step(s, t);
    pd_step_result res;
    memset(&res, 0, sizeof res);
    s->x.training = true;
    s->x.seed = pd__mix(s->o.seed ^ pd__mix((uint64_t)s->step));
    PD_TRY(pd__forward(s, t->fwd_ms));
    memset(s->grads, 0, sizeof(float) * (size_t)s->ptotal);
    const pd__tensor *pt = &s->g->tensors[s->pred]; /* the other activation gradients: pd__backward_split */
    if (s->gviews[s->pred].data) memset(s->gviews[s->pred].data, 0, (size_t)pt->numel * pd_dtype_size(pt->dtype));
    int64_t t0 = pd__now_ns();
    PD_TRY(pd__loss(s, true, INT64_MAX, &res));
    t->loss_ms = 1e-6 * (double)(pd__now_ns() - t0);
    if (!isfinite(res.loss)) return pd__numeric_error(s, "the loss", res.loss);
    return pd__backward_split(s, t->bwd_in_ms, t->bwd_w_ms);
}

/* ---- activation contexts for the pipeline (session.h) ------------------------- */

void pd__actx_destroy(pd__actx *c) {
    if (!c) return;
    PD_FREE(c->act);
    PD_FREE(c->gact);
    PD_FREE(c->views);
    PD_FREE(c->gviews);
    PD_FREE(c->args);
    PD_FREE(c->gargs);
    pd__zplan_free(&c->zp);
    PD_FREE(c);
}

/* Whether tensor t is an activation a context holds: in need, and (mine)
 * in its own slab, or (!mine) in the shared one. */
static bool pd__actx_holds(const pd_graph *g, const bool *need, const bool *own, int t, bool mine) {
    const pd__tensor *x = &g->tensors[t];
    if ((need && !need[t]) || !(x->kind == PD_T_ACT || x->kind == PD_T_INPUT) || x->ndim < 0) return false;
    return (!own || own[t]) == mine;
}

static size_t pd__actx_tbytes(const pd__tensor *x) {
    return pd__align64((size_t)(x->numel > 0 ? x->numel : 0) * pd_dtype_size(x->dtype));
}

size_t pd__actx_shared_bytes(const pd_session *s, const bool *need, const bool *own) {
    size_t n = 0;
    for (int t = 0; own && t < s->g->ntensors; t++)
        if (pd__actx_holds(s->g, need, own, t, false)) n += pd__actx_tbytes(&s->g->tensors[t]);
    return n;
}

pd_status pd__actx_create(const pd_session *s, const bool *need, const int *bnodes, int nb, const uint8_t *role,
                          bool split, pd__actx **out) {
    return pd__actx_create_in(s, need, NULL, NULL, bnodes, nb, role, split, out);
}

pd_status pd__actx_create_in(const pd_session *s, const bool *need, const bool *own, void *shared, const int *bnodes,
                             int nb, const uint8_t *role, bool split, pd__actx **out) {
    const pd_graph *g = s->g;
    pd__actx *c = PD_CALLOC(1, sizeof *c);
    if (!c) return pd__err(PD_ERR_NOMEM, "out of memory");
    size_t abytes = 0;
    for (int t = 0; t < g->ntensors; t++)
        if (pd__actx_holds(g, need, own, t, true)) abytes += pd__actx_tbytes(&g->tensors[t]);
    int nargs = s->arg_start[g->nnodes - 1] + g->nodes[g->nnodes - 1].nin + g->nodes[g->nnodes - 1].nout;
    c->act = pd__slab(abytes);
    c->abytes = abytes;
    c->views = PD_CALLOC((size_t)g->ntensors + 1, sizeof(pd_tensor));
    c->gviews = PD_CALLOC((size_t)g->ntensors + 1, sizeof(pd_tensor));
    c->args = PD_CALLOC((size_t)nargs + 1, sizeof(pd_tensor *));
    c->gargs = PD_CALLOC((size_t)nargs + 1, sizeof(pd_tensor *));
    if (!c->act || !c->views || !c->gviews || !c->args || !c->gargs) {
        pd__actx_destroy(c);
        return pd__err(PD_ERR_NOMEM, "%s: out of memory for a microbatch's activations", g->path);
    }
    size_t ao = 0, so = 0;
    for (int t = 0; t < g->ntensors; t++) {
        const pd__tensor *x = &g->tensors[t];
        c->views[t] = s->views[t]; /* parameters and constants: shared with the session */
        c->gviews[t] = s->gviews[t]; /* parameter gradients: the session's slab */
        if ((x->kind == PD_T_ACT || x->kind == PD_T_INPUT) && x->ndim >= 0) {
            c->views[t].data = NULL; /* not needed: no memory */
            if (pd__actx_holds(g, need, own, t, true)) {
                c->views[t].data = (char *)c->act + ao;
                ao += pd__actx_tbytes(x);
            } else if (pd__actx_holds(g, need, own, t, false)) {
                c->views[t].data = (char *)shared + so;
                so += pd__actx_tbytes(x);
            }
        }
        if (s->needs_grad[t] && x->kind != PD_T_INIT) c->gviews[t].data = NULL; /* planned below */
    }
    /* the session's argument tables, re-pointed at this context's views */
    for (int k = 0; k < nargs; k++) {
        c->args[k] = s->args[k] ? c->views + (s->args[k] - s->views) : NULL;
        c->gargs[k] = s->gargs[k] ? c->gviews + (s->gargs[k] - s->gviews) : NULL;
    }
    pd__life l;
    size_t total;
    pd_status st = pd__plan_grads_over(s, c->gargs, bnodes, nb, need, role, split, &c->zp, &l, &total);
    if (st == PD_OK) {
        c->gbytes = total;
        if ((c->gact = pd__slab(total)))
            for (int b = 0; b < l.n; b++) c->gviews[l.id[b]].data = (char *)c->gact + l.off[b];
        else st = pd__err(PD_ERR_NOMEM, "%s: out of memory for a microbatch's gradients", g->path);
        pd__life_free(&l);
    }
    if (st != PD_OK) {
        pd__actx_destroy(c);
        return st;
    }
    *out = c;
    return PD_OK;
}

pd_tensor *pd__actx_value(pd__actx *c, int t) { return &c->views[t]; }
pd_tensor *pd__actx_grad(pd__actx *c, int t) { return &c->gviews[t]; }

pd_status pd__actx_forward(const pd_session *s, pd__exec *x, pd__actx *c, const int *nodes, int n) {
    const pd_graph *g = s->g;
    for (int k = 0; k < n; k++) {
        const pd__node *nd = &g->nodes[nodes[k]];
        pd_tensor **a = c->args + s->arg_start[nodes[k]];
        PD_TRY(pd__cpu_run(x, g, nd, a, a + nd->nin));
    }
    return PD_OK;
}

pd_status pd__actx_backward(const pd_session *s, pd__exec *x, pd__actx *c, const int *nodes, int n) {
    const pd_graph *g = s->g;
    for (int k = n - 1; k >= 0; k--) {
        const pd__node *nd = &g->nodes[nodes[k]];
        pd_tensor **a = c->args + s->arg_start[nodes[k]], **ga = c->gargs + s->arg_start[nodes[k]];
        if (!pd__bwd_runs_of(nd, ga)) continue;
        pd__zplan_run(g, &c->zp, c->gviews, nodes[k], x);
        PD_TRY(pd__cpu_run_bwd(x, g, nd, a, a + nd->nin, ga, ga + nd->nout));
    }
    return PD_OK;
}

pd_status pd__actx_backward_part(const pd_session *s, pd__exec *x, pd__actx *c, const int *nodes, int n,
                                 bool weights) {
    const pd_graph *g = s->g;
    pd_tensor *din[64];
    for (int k = n - 1; k >= 0; k--) {
        const pd__node *nd = &g->nodes[nodes[k]];
        pd_tensor **a = c->args + s->arg_start[nodes[k]], **ga = c->gargs + s->arg_start[nodes[k]];
        if (nd->nin > 64) return pd__node_err(g, nd, PD_ERR_UNSUPPORTED, "a split backward of more than 64 inputs");
        bool any_out = false, any = false;
        for (int j = 0; j < nd->nout; j++) any_out |= ga[j] != NULL;
        for (int j = 0; j < nd->nin; j++) {
            pd_tensor *d = ga[nd->nout + j];
            bool w = d && g->tensors[nd->in[j]].kind == PD_T_INIT;
            din[j] = d && w == weights ? d : NULL;
            any |= din[j] != NULL;
        }
        /* the B pass zeroes for both, and its kernel writes the fresh ones (activations' gradients) */
        if (!weights && pd__bwd_runs_of(nd, ga)) pd__zplan_run(g, &c->zp, c->gviews, nodes[k], x);
        if (!any_out || !any) {
            x->fresh = 0;
            continue;
        }
        PD_TRY(pd__cpu_run_bwd(x, g, nd, a, a + nd->nin, ga, din));
    }
    return PD_OK;
}

pd_status pd__actx_loss(const pd_session *s, pd__actx *c, const pd_tensor *labels, double scale, pd_step_result *r) {
    pd_tensor *d = &c->gviews[s->pred];
    PD_TRY(pd__loss_of(s, &c->views[s->pred], labels, d->data, INT64_MAX, r));
    if (d->data && scale != 1.0) {
        int64_t n = pd_tensor_numel(d);
        if (d->dtype == PD_FLOAT) { /* the losses' gradients are float32; one pass the compiler vectorizes */
            float *p = d->data, f = (float)scale;
            for (int64_t i = 0; i < n; i++) p[i] *= f;
        } else {
            for (int64_t i = 0; i < n; i++) pd__set_f(d->dtype, d->data, i, scale * pd__get_f(d->dtype, d->data, i));
        }
    }
    return PD_OK;
}

bool pd__session_needs_grad(const pd_session *s, int t) { return s->needs_grad[t]; }
const pd_train_options *pd__session_options(const pd_session *s) { return &s->o; }

pd_status pd__session_slabs(pd_session *s, pd__slabs *out) {
    if (!s || !out) return pd__err(PD_ERR_INVALID, "pd__session_slabs: NULL argument");
    out->np = s->np;
    out->param = s->param;
    out->poff = s->poff;
    out->total = s->ptotal;
    out->params = s->params;
    out->grads = s->grads;
    out->state0 = s->state0;
    out->state1 = s->state1;
    return PD_OK;
}

/* ---- checkpoints: the session as one stage's records (checkpoint.h) ---- */

/* BatchNorm's running statistics: the initializers a training forward writes. */
static bool pd__is_buffer(const pd_graph *g, int t) {
    for (int i = 0; i < g->nnodes; i++) {
        const pd__node *n = &g->nodes[i];
        for (int j = 0; j < n->nin; j++)
            if (pd__state_input(n, j) && n->in[j] == t) return g->tensors[t].kind == PD_T_INIT;
    }
    return false;
}

void pd__session_snapshot(const pd_session *s, pd__recw *w) {
    const pd_graph *g = s->g;
    /* on CUDA, the device's values into the host mirror first (an error here
     * leaves the mirror as the last pull: the records' checksums still hold) */
    if (s->dev) (void)pd__sdev_pull(s, false);
    for (int i = 0; i < g->nnodes; i++) {
        const pd__node *n = &g->nodes[i];
        for (int j = 0; j < n->nin; j++) {
            int t = n->in[j];
            if (pd__state_input(n, j) && t >= 0 && g->tensors[t].kind == PD_T_INIT)
                pd__rec_put(w, PD_REC_BUFFER, 0, g->tensors[t].name, s->views[t].data,
                            (uint64_t)g->tensors[t].numel * pd_dtype_size(g->tensors[t].dtype));
        }
    }
    int64_t u = s->step;
    pd__rec_put(w, PD_REC_META, 0, "updates", &u, sizeof u);
    pd__rec_put(w, PD_REC_META, 0, "live/0", NULL, 0);
    for (int i = 0; i < s->np; i++) {
        const pd__tensor *x = &g->tensors[s->param[i]];
        uint64_t b = (uint64_t)x->numel * sizeof(float);
        pd__rec_put(w, PD_REC_WEIGHT, 0, x->name, s->params + s->poff[i], b);
        if (s->state0) pd__rec_put(w, PD_REC_STATE0, 0, x->name, s->state0 + s->poff[i], b);
        if (s->state1) pd__rec_put(w, PD_REC_STATE1, 0, x->name, s->state1 + s->poff[i], b);
    }
}

pd_status pd__session_restore(pd_session *s, const void *part, size_t len) {
    const pd_graph *g = s->g;
    int64_t want = 2, got = 0;
    for (int i = 0; i < g->nnodes; i++)
        for (int j = 0; j < g->nodes[i].nin; j++)
            want += pd__state_input(&g->nodes[i], j) && g->nodes[i].in[j] >= 0 &&
                    g->tensors[g->nodes[i].in[j]].kind == PD_T_INIT;
    want += (int64_t)s->np * (1 + (s->state0 != NULL) + (s->state1 != NULL));
    size_t off = 0;
    for (;;) {
        pd__rec r;
        bool end;
        PD_TRY(pd__rec_next(part, len, &off, &r, &end, "the checkpoint's part"));
        if (end) break;
        if (r.kind == PD_REC_META) {
            if (pd__rec_is(&r, "updates") && r.bytes == 8) memcpy(&s->step, r.data, 8), got++;
            else if (pd__rec_is(&r, "live/0") && r.version == 0) got++;
            else return pd__err(PD_ERR_INVALID, "the checkpoint has weight versions a single stage does not keep");
            continue;
        }
        char name[512];
        snprintf(name, sizeof name, "%.*s", (int)(r.name_len < 511 ? r.name_len : 511), r.name);
        int t = pd__graph_find(g, name);
        if (t < 0) return pd__err(PD_ERR_INVALID, "the checkpoint holds '%s', which %s does not have", name, g->path);
        int i = 0;
        while (i < s->np && s->param[i] != t) i++;
        void *dst = NULL;
        if (r.kind == PD_REC_BUFFER && pd__is_buffer(g, t)) dst = s->views[t].data;
        else if (i < s->np && r.kind == PD_REC_WEIGHT) dst = s->params + s->poff[i];
        else if (i < s->np && r.kind == PD_REC_STATE0 && s->state0) dst = s->state0 + s->poff[i];
        else if (i < s->np && r.kind == PD_REC_STATE1 && s->state1) dst = s->state1 + s->poff[i];
        if (!dst)
            return pd__err(PD_ERR_INVALID, "the checkpoint's '%s' (record kind %u) has no place in this session "
                           "(another optimizer, or other tensors frozen?)", name, r.kind);
        if (r.bytes != (uint64_t)g->tensors[t].numel * pd_dtype_size(g->tensors[t].dtype))
            return pd__err(PD_ERR_INVALID, "the checkpoint's '%s' has %llu bytes, the model's %lld", name,
                           (unsigned long long)r.bytes,
                           (long long)(g->tensors[t].numel * (int64_t)pd_dtype_size(g->tensors[t].dtype)));
        memcpy(dst, r.data, (size_t)r.bytes);
        got++;
    }
    if (got != want)
        return pd__err(PD_ERR_INVALID, "the checkpoint is incomplete: %lld of the %lld records a session needs",
                       (long long)got, (long long)want);
    return s->dev ? pd__sdev_push(s) : PD_OK;
}

/* ---- the session on CUDA (pd_train_options.device; docs/CUDA.md) -------------------------------- */

pd_status pd_train_options_set_device(pd_train_options *o, const char *device, const char *precision) {
    if (!o) return pd__err(PD_ERR_INVALID, "pd_train_options_set_device: o is NULL");
    pd_device_kind dk = o->device;
    int di = o->device_index;
    pd_precision pr = o->precision;
    if (device) {
        char *end = NULL;
        long n = 0;
        if (!strcmp(device, "cpu")) dk = PD_DEVICE_CPU, di = 0;
        else if (!strcmp(device, "cuda")) dk = PD_DEVICE_CUDA, di = 0;
        else if (!strncmp(device, "cuda:", 5) && device[5] >= '0' && device[5] <= '9' &&
                 (n = strtol(device + 5, &end, 10), *end == '\0') && n < 1024)
            dk = PD_DEVICE_CUDA, di = (int)n;
        else if (!strcmp(device, "sim") || (!strncmp(device, "sim:", 4) && device[4] >= '1' && device[4] <= '9' &&
                                            (n = strtol(device + 4, &end, 10), *end == '\0'))) {
            /* the simulated device (runtime/cuda/sim.c): the process's CUDA API
             * becomes it, with N devices; the session then is a CUDA one */
            if (device[3] && n > 8) return pd__err(PD_ERR_INVALID, "device %s: from 1 to 8 simulated devices", device);
#ifdef PD_HAVE_CUDA
            PD_TRY(pd__cuda_use_sim(device[3] ? (int)n : 1));
            dk = PD_DEVICE_CUDA, di = 0;
#else
            return pd__err(PD_ERR_UNSUPPORTED, "device %s: this build has no CUDA backend, which the simulated device "
                                               "comes with (meson setup -Dcuda=enabled)",
                           device);
#endif
        } else
            return pd__err(PD_ERR_INVALID, "device must be cpu, cuda, cuda:N, sim or sim:N, not '%s'", device);
    }
    if (precision) {
        if (!strcmp(precision, "fp32")) pr = PD_PRECISION_FP32;
        else if (!strcmp(precision, "tf32")) pr = PD_PRECISION_TF32;
        else if (!strcmp(precision, "bf16")) pr = PD_PRECISION_BF16;
        else return pd__err(PD_ERR_INVALID, "precision must be fp32, tf32 or bf16, not '%s'", precision);
    }
    o->device = dk;
    o->device_index = di;
    o->precision = pr;
    return PD_OK;
}

int pd_cuda_device_count(void) {
#ifdef PD_HAVE_CUDA
    return pd__cuda_device_count();
#else
    return 0;
#endif
}
