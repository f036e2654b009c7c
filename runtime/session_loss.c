/* session_loss.c - the losses a session appends to the model's output
 * (runtime/loss.c's formulas), and where they run: cross-entropy on int64
 * labels on the device, only its sums coming back; the others (MSE, the
 * model's own loss) on the host, the prediction copied down and its
 * gradient up. On the CPU the copies are no copies. The session's step,
 * the pipeline's CPU activation contexts and their device twins all call
 * pd__loss_run. */
#include "session_impl.h"
#include "loss.h"

/* The loss of pred against labels on the host; d (when not NULL) receives dLoss/dpred. */
pd_status pd__loss_of(const pd_session *s, const pd_tensor *pred, const pd_tensor *labels, float *d, int64_t rows,
                      pd_step_result *r) {
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

/* g *= scale on the host (the losses' gradients are float32: one pass the
 * compiler vectorizes; another dtype element by element). */
static void pd__host_scale(pd_tensor *d, double scale) {
    int64_t n = pd_tensor_numel(d);
    if (d->dtype == PD_FLOAT) {
        float *p = d->data, f = (float)scale;
        for (int64_t i = 0; i < n; i++) p[i] *= f;
    } else {
        for (int64_t i = 0; i < n; i++) pd__set_f(d->dtype, d->data, i, scale * pd__get_f(d->dtype, d->data, i));
    }
}

pd_status pd__loss_run(const pd_session *s, const pd__dev *dev, pd_tensor *v, pd_tensor *gv, pd_tensor *hv,
                       pd_tensor *hgv, const pd_tensor *labels, const pd_tensor *dlabels, bool grad, int64_t rows,
                       double scale, pd_step_result *r) {
    const pd_graph *g = s->g;
    int p = s->pred;
    pd_loss_kind k = s->o.loss;
    if (k == PD_LOSS_AUTO) k = labels->dtype == PD_INT64 ? PD_LOSS_CROSS_ENTROPY : PD_LOSS_MSE;
    if (k == PD_LOSS_CROSS_ENTROPY && labels->dtype == PD_INT64 && dlabels && dlabels->data) {
        float *dz = grad ? gv[p].data : NULL;
        r->correct = 0;
        r->count = 0;
        pd_status st = dev->i->cross_entropy(dev->c, &v[p], dlabels, rows, dz, &r->loss, &r->correct, &r->count);
        if (st != PD_OK) {
            pd__err_prefix("%s: output '%s'", g->path, g->tensors[p].name);
            return st;
        }
        return dz && scale != 1.0 ? dev->i->scale(dev->c, dz, pd_tensor_numel(&gv[p]), (float)scale) : PD_OK;
    }
    PD_TRY(pd__dev_tdown(dev, g, hv, v, p));
    PD_TRY(pd__loss_of(s, &hv[p], labels, grad ? hgv[p].data : NULL, rows, r));
    if (!grad || !hgv[p].data) return PD_OK;
    if (scale != 1.0) pd__host_scale(&hgv[p], scale);
    return pd__dev_tup(dev, g, hgv, gv, p);
}
