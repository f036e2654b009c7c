/* session_params.c - what a session trains: the tensor the loss starts
 * from (pd__find_outputs), and the trained parameters (pd__choose_params):
 * the float32 initializers from which a path of differentiable op inputs
 * (the grad masks of core/ops.h) leads to the loss, that the model allows
 * or the trainable pattern names, minus those the freeze pattern matches
 * (session.c's opening comment says more). */
#include "session_impl.h"

#include <regex.h>
#include <stdio.h>
#include <string.h>

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

pd_status pd__find_outputs(pd_session *s) {
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

pd_status pd__choose_params(pd_session *s) {
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
        all[t] = x->kind == PD_T_INIT && x->dtype == PD_FLOAT && (x->data || pd__deferred(x)) && x->numel > 0;
        bool allowed = x->train == PD_TR_DEFAULT || x->train == PD_TR_LISTED ||
                       (have_tre && regexec(&tre, x->name, 0, NULL, 0) == 0);
        frozen[t] = have_re && regexec(&re, x->name, 0, NULL, 0) == 0;
        seed[t] = all[t] && allowed && !frozen[t] && (!s->only || s->only[t]);
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
