/* session_nodes.c - a list of nodes forward and backward on a device
 * (runtime/device.h), with the nodes it refuses on the CPU: what the
 * session's step runs over the whole graph, and a pipeline stage's
 * activation contexts (CPU ones, session_actx.c; device twins,
 * session_dactx.c) over its nodes, written once.
 *
 * The backward follows the gradients' plan (pd__zplan, session_grads.c):
 * before a node, the activation gradients it touches first are zeroed,
 * except, on a device whose kernels honour pd__exec.fresh (the CPU), those
 * its kernel writes whole. */
#include "session_impl.h"

/* Node i on its device, or on the CPU when the device refuses it. */
static pd_status pd__node_fwd(const pd_session *s, pd__exec *x, const pd__where *w, int i) {
    const pd__node *n = &s->g->nodes[i];
    int at = s->arg_start[i];
    if (w->cpu && w->cpu[i])
        return pd__dev_cpu_node(s, w->dev, x, w->hviews, w->hgviews, w->views, w->gviews, w->hargs + at,
                                w->hgargs + at, i, false, NULL);
    return w->dev->i->forward(w->dev->c, x, s->g, n, w->args + at, w->args + at + n->nin);
}
/* din: the input gradients asked for; hdin: their host views (the fallback's) */
static pd_status pd__node_bwd(const pd_session *s, pd__exec *x, const pd__where *w, int i, pd_tensor **din,
                              pd_tensor **hdin) {
    const pd__node *n = &s->g->nodes[i];
    int at = s->arg_start[i];
    if (w->cpu && w->cpu[i])
        return pd__dev_cpu_node(s, w->dev, x, w->hviews, w->hgviews, w->views, w->gviews, w->hargs + at,
                                w->hgargs + at, i, true, hdin);
    return w->dev->i->backward(w->dev->c, x, s->g, n, w->args + at, w->args + at + n->nin, w->gargs + at, din);
}

pd_status pd__nodes_forward(const pd_session *s, pd__exec *x, const pd__where *w, const int *nodes, int n,
                            double *ms) {
    const pd__dev *d = w->dev;
    for (int k = 0; k < n; k++) {
        int i = nodes ? nodes[k] : k;
        if (ms) PD_TRY(d->i->timer_start(d->c));
        PD_TRY(pd__node_fwd(s, x, w, i));
        if (ms) PD_TRY(d->i->timer_stop(d->c, &ms[i]));
    }
    return PD_OK;
}

/* Before node i's backward: its first-touched activation gradients zeroed,
 * the fresh ones left to its kernel where the device can (x->fresh). */
static pd_status pd__zero_first(const pd_graph *g, pd__exec *x, const pd__where *w, int i) {
    const pd__zplan *zp = w->zp;
    const pd__dev *d = w->dev;
    bool wf = d->i->writes_fresh;
    for (int k = zp->at[3 * i]; k < zp->at[3 * i + (wf ? 1 : 2)]; k++)
        PD_TRY(d->i->memset0(d->c, w->gviews[zp->list[k]].data, pd__tbytes(&g->tensors[zp->list[k]])));
    x->fresh = wf ? zp->fresh[i] : 0;
    return PD_OK;
}

/* Node i's backward pass p (0: input gradients, 1: weight gradients), timed
 * into in_ms/w_ms when they are given; din, hdin: the caller's scratch. */
static pd_status pd__node_bwd_part(const pd_session *s, pd__exec *x, const pd__where *w, int i, int p,
                                   pd_tensor **din, pd_tensor **hdin, double *in_ms, double *w_ms) {
    const pd_graph *g = s->g;
    const pd__node *nd = &g->nodes[i];
    pd_tensor **ga = w->gargs + s->arg_start[i], **hga = w->hgargs + s->arg_start[i];
    bool any = false;
    for (int j = 0; j < nd->nin; j++) {
        bool wt = ga[nd->nout + j] && g->tensors[nd->in[j]].kind == PD_T_INIT;
        bool take = ga[nd->nout + j] && wt == (p == 1);
        din[j] = take ? ga[nd->nout + j] : NULL;
        hdin[j] = take ? hga[nd->nout + j] : NULL;
        any |= take;
    }
    if (!any) return PD_OK;
    const pd__dev *d = w->dev;
    if (in_ms) PD_TRY(d->i->timer_start(d->c));
    PD_TRY(pd__node_bwd(s, x, w, i, din, hdin));
    return in_ms ? d->i->timer_stop(d->c, p ? &w_ms[i] : &in_ms[i]) : PD_OK;
}

pd_status pd__nodes_backward(const pd_session *s, pd__exec *x, const pd__where *w, const int *nodes, int n, int part,
                             double *in_ms, double *w_ms) {
    const pd_graph *g = s->g;
    int maxin = 0;
    for (int k = 0; k < n; k++) {
        int i = nodes ? nodes[k] : k;
        maxin = g->nodes[i].nin > maxin ? g->nodes[i].nin : maxin;
        if (in_ms) in_ms[i] = w_ms[i] = 0;
    }
    pd_tensor *buf[128], **din = buf, **hdin = buf + 64; /* a split backward's input gradients */
    if (part >= 0 && maxin > 64) {
        if (!(din = PD_CALLOC(2 * (size_t)maxin, sizeof *din))) return pd__err(PD_ERR_NOMEM, "out of memory");
        hdin = din + maxin;
    }
    pd_status st = PD_OK;
    for (int k = n - 1; k >= 0 && st == PD_OK; k--) {
        int i = nodes ? nodes[k] : k;
        const pd__node *nd = &g->nodes[i];
        pd_tensor **ga = w->gargs + s->arg_start[i];
        if (!pd__bwd_runs_of(nd, ga)) continue;
        if (part != 1) st = pd__zero_first(g, x, w, i); /* the W pass finds them zeroed by the B pass */
        if (st == PD_OK && part < 0) st = pd__node_bwd(s, x, w, i, ga + nd->nout, w->hgargs + s->arg_start[i] + nd->nout);
        for (int p = part == 2 ? 0 : part; p >= 0 && p <= (part == 2 ? 1 : part) && st == PD_OK; p++)
            st = pd__node_bwd_part(s, x, w, i, p, din, hdin, in_ms, w_ms);
        x->fresh = 0;
    }
    if (din != buf) PD_FREE(din);
    return st;
}
