/* session_step.c - the one-stage step, evaluation and the profiler's timed
 * step, written once against the device interface (runtime/device.h): on
 * the CPU they run the CPU's kernels on the host slabs; on CUDA or the
 * simulated device, the module's kernels on the device twins (struct
 * pd__sdev), with nodes the device refuses on the CPU (pd__dev_cpu_node).
 *
 * A step: forward in training mode, one memset of the parameter gradients,
 * the loss (cross-entropy on the device; the others on the host, the
 * prediction copied down and its gradient up), the backward kernels in
 * reverse order, gradient norm and clipping, one optimizer update over the
 * slab, and a sync (the device's errors come back with the step). */
#include "session_impl.h"
#include "optim.h"

#include <math.h>
#include <string.h>

/* The loss of the current forward on the session's device; with grad,
 * writes dLoss/dpred (the labels on the device: set with them). */
static pd_status pd__step_loss(pd_session *s, bool grad, int64_t rows, pd_step_result *r) {
    pd__sdev *d = &s->dev;
    return pd__loss_run(s, &d->d, d->views, d->gviews, s->views, s->gviews, &s->labels, &d->labels, grad, rows, 1.0,
                        r);
}

/* Names the first computed float tensor holding a NaN or Inf (host views). */
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

/* A non-finite loss or norm: the activations into the host mirror (a
 * device's), then the host's search. */
static pd_status pd__step_numeric_error(pd_session *s, const char *what, double v) {
    size_t abytes = 0;
    for (int t = 0; t < s->g->ntensors; t++) {
        const pd__tensor *x = &s->g->tensors[t];
        if ((x->kind == PD_T_ACT || x->kind == PD_T_INPUT) && x->ndim >= 0) abytes += pd__align64(pd__tbytes(x));
    }
    PD_TRY(pd__dev_down(&s->dev.d, s->act, s->dev.act, abytes));
    return pd__numeric_error(s, what, v);
}

/* The session's nodes on its device (on the CPU, host and device tables are the same). */
static pd__where pd__session_where(pd_session *s) {
    pd__sdev *d = &s->dev;
    return (pd__where){&d->d, d->views, d->gviews, d->args, d->gargs, s->views, s->gviews, s->args, s->gargs,
                       d->cpu, &s->zp};
}

uint64_t pd__mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A training forward and the loss with its gradient: the start of a step
 * and of the timed step (fwd_ms, loss_ms: the latter's times, or NULL). */
static pd_status pd__forward_loss(pd_session *s, pd_step_result *res, double *fwd_ms, double *loss_ms) {
    pd__sdev *d = &s->dev;
    PD_TRY(d->d.i->bind(d->d.c)); /* a caller may step from another thread than the creator */
    s->x.training = true;
    s->x.seed = pd__mix(s->o.seed ^ pd__mix((uint64_t)s->step));
    pd__where w = pd__session_where(s);
    PD_TRY(pd__nodes_forward(s, &s->x, &w, NULL, s->g->nnodes, fwd_ms));
    PD_TRY(d->d.i->memset0(d->d.c, d->grads, sizeof(float) * (size_t)s->ptotal));
    /* the prediction's gradient (the loss writes it); the others: pd__nodes_backward */
    if (d->gviews[s->pred].data)
        PD_TRY(d->d.i->memset0(d->d.c, d->gviews[s->pred].data, pd__tbytes(&s->g->tensors[s->pred])));
    if (loss_ms) PD_TRY(d->d.i->timer_start(d->d.c));
    PD_TRY(pd__step_loss(s, true, INT64_MAX, res));
    if (loss_ms) PD_TRY(d->d.i->timer_stop(d->d.c, loss_ms));
    if (!isfinite(res->loss)) return pd__step_numeric_error(s, "the loss", res->loss);
    return PD_OK;
}

pd_status pd_session_step(pd_session *s, pd_step_result *r) {
    if (!s) return pd__err(PD_ERR_INVALID, "pd_session_step: session is NULL");
    PD_TRY(pd__check_fed(s));
    pd__sdev *d = &s->dev;
    const pd__dev_i *di = d->d.i;
    pd_step_result res;
    memset(&res, 0, sizeof res);
    PD_TRY(pd__forward_loss(s, &res, NULL, NULL));
    pd__where w = pd__session_where(s);
    PD_TRY(pd__nodes_backward(s, &s->x, &w, NULL, s->g->nnodes, -1, NULL, NULL));
    double sq = 0;
    PD_TRY(di->sumsq(d->d.c, d->grads, s->ptotal, &sq));
    res.grad_norm = sqrt(sq);
    if (!isfinite(res.grad_norm)) return pd__step_numeric_error(s, "the gradient norm", res.grad_norm);
    if (s->o.clip_grad_norm > 0 && res.grad_norm > s->o.clip_grad_norm)
        PD_TRY(di->scale(d->d.c, d->grads, s->ptotal, (float)(s->o.clip_grad_norm / (res.grad_norm + 1e-6))));
    res.lr = pd__lr_at(&s->o, s->step + 1);
    PD_TRY(di->optim_step(d->d.c, &s->o, s->step + 1, res.lr, d->params, d->grads, d->state0, d->state1, s->ptotal));
    PD_TRY(di->sync(d->d.c));
    s->step++;
    if (r) *r = res;
    return PD_OK;
}

pd_status pd_session_eval_rows(pd_session *s, int64_t rows, pd_step_result *r) {
    if (!s) return pd__err(PD_ERR_INVALID, "pd_session_eval: session is NULL");
    PD_TRY(pd__check_fed(s));
    pd_step_result res;
    memset(&res, 0, sizeof res);
    PD_TRY(s->dev.d.i->bind(s->dev.d.c));
    s->x.training = false;
    pd__where w = pd__session_where(s);
    PD_TRY(pd__nodes_forward(s, &s->x, &w, NULL, s->g->nnodes, NULL));
    PD_TRY(pd__step_loss(s, false, rows, &res));
    if (r) *r = res;
    return PD_OK;
}

pd_status pd_session_eval(pd_session *s, pd_step_result *r) { return pd_session_eval_rows(s, INT64_MAX, r); }

/* ---- the profiler's hooks (session.h) ----------------------------------------- */

int pd__session_loss_tensor(const pd_session *s) { return s->pred; }
int pd__session_labels_input(const pd_session *s) { return s->labels_input; }

pd_status pd__session_timed_step(pd_session *s, pd__step_times *t) {
    if (!s || !t) return pd__err(PD_ERR_INVALID, "pd__session_timed_step: NULL argument");
    PD_TRY(pd__check_fed(s));
    pd_step_result res;
    memset(&res, 0, sizeof res);
    PD_TRY(pd__forward_loss(s, &res, t->fwd_ms, &t->loss_ms));
    pd__where w = pd__session_where(s);
    return pd__nodes_backward(s, &s->x, &w, NULL, s->g->nnodes, 2, t->bwd_in_ms, t->bwd_w_ms);
}
