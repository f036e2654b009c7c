/* session_dactx.c - device twins of the pipeline's activation contexts
 * (pd__dactx, session.h): a device stage's microbatch memory on a device
 * context, over the device interface (runtime/device.h), and pd__actx_*'s
 * forward, backward and loss on it: the same code as the CPU contexts'
 * (session_nodes.c), nodes the device refuses on the CPU. The pipeline
 * hands it its stage's device (pipeline_devmem.c). */
#include "session_impl.h"

#include <string.h>

struct pd__dactx {
    pd__dev dev;                /* the stage's device and context */
    pd__actx *h;                /* the host context: its layout, zeroing lists, and the CPU fallback's memory */
    void *act, *gact;           /* device twins of h->act, h->gact */
    void *consts;               /* the initializers and constants it reads (NULL: the base's) */
    pd_tensor *views, *gviews;  /* per graph tensor: its device data (NULL: none, or a parameter not bound yet) */
    pd_tensor **args, **gargs;  /* the session's argument tables over views, gviews */
    bool *cpu;                  /* per node: runs on the CPU (supports_op false); the base's when shared */
    const pd__dactx *base;
    void *labels;               /* a microbatch's labels on the device (cross-entropy), labels_cap bytes */
    size_t labels_cap;
};

void pd__dactx_destroy(pd__dactx *d) {
    if (!d) return;
    if (d->dev.c) {
        void *own[] = {d->act, d->gact, d->consts, d->labels};
        for (size_t k = 0; k < sizeof own / sizeof own[0]; k++) d->dev.i->free(d->dev.c, own[k]);
    }
    if (!d->base) PD_FREE(d->cpu);
    PD_FREE(d->views);
    PD_FREE(d->gviews);
    PD_FREE(d->args);
    PD_FREE(d->gargs);
    PD_FREE(d);
}

static bool pd__within(const void *p, const void *base, size_t bytes) {
    return base && (const char *)p >= (const char *)base && (const char *)p < (const char *)base + bytes;
}

pd_status pd__dactx_create(const pd_session *s, const pd__dev *dev, pd__actx *h, const bool *need,
                           const pd__dactx *base, pd__dactx **out) {
    const pd_graph *g = s->g;
    size_t pbytes = sizeof(float) * (size_t)s->ptotal;
    pd__dactx *d = PD_CALLOC(1, sizeof *d);
    if (!d) return pd__err(PD_ERR_NOMEM, "out of memory");
    d->dev = *dev;
    const pd__dev_i *di = d->dev.i;
    void *c = d->dev.c;
    d->h = h;
    d->base = base;
    int nargs = s->arg_start[g->nnodes - 1] + g->nodes[g->nnodes - 1].nin + g->nodes[g->nnodes - 1].nout;
    d->views = PD_CALLOC((size_t)g->ntensors + 1, sizeof(pd_tensor));
    d->gviews = PD_CALLOC((size_t)g->ntensors + 1, sizeof(pd_tensor));
    d->args = PD_CALLOC((size_t)nargs + 1, sizeof(pd_tensor *));
    d->gargs = PD_CALLOC((size_t)nargs + 1, sizeof(pd_tensor *));
    d->cpu = base ? base->cpu : PD_CALLOC((size_t)g->nnodes + 1, sizeof(bool));
    pd_status st =
        d->views && d->gviews && d->args && d->gargs && d->cpu ? PD_OK : pd__err(PD_ERR_NOMEM, "out of memory");
    /* the constants this context reads that are not trained parameters (BatchNorm's statistics among them) */
    size_t cbytes = 0;
    for (int t = 0; t < g->ntensors && !base; t++) {
        const char *hp = h->views[t].data;
        if (hp && (!need || need[t]) && !pd__within(hp, h->act, h->abytes) && !pd__within(hp, s->params, pbytes))
            cbytes += pd__align64(pd__tbytes(&g->tensors[t]));
    }
    if (st == PD_OK) st = di->alloc(c, h->abytes, &d->act);
    if (st == PD_OK) st = di->memset0(c, d->act, h->abytes);
    if (st == PD_OK) st = di->alloc(c, h->gbytes, &d->gact);
    if (st == PD_OK) st = di->memset0(c, d->gact, h->gbytes);
    if (st == PD_OK && !base) st = di->alloc(c, cbytes, &d->consts);
    size_t co = 0;
    for (int t = 0; t < g->ntensors && st == PD_OK; t++) {
        const char *hp = h->views[t].data, *gp = h->gviews[t].data;
        d->views[t] = h->views[t];
        d->gviews[t] = h->gviews[t];
        d->views[t].data = NULL; /* parameters and their gradients: bound by the caller (a weight version) */
        d->gviews[t].data = NULL;
        if (!hp || (need && !need[t])) {
        } else if (pd__within(hp, h->act, h->abytes)) {
            d->views[t].data = (char *)d->act + (hp - (const char *)h->act);
        } else if (!pd__within(hp, s->params, pbytes)) {
            if (base) {
                d->views[t].data = base->views[t].data;
            } else {
                d->views[t].data = (char *)d->consts + co;
                st = di->upload(c, d->views[t].data, hp, pd__tbytes(&g->tensors[t]));
                co += pd__align64(pd__tbytes(&g->tensors[t]));
            }
        }
        if (gp && pd__within(gp, h->gact, h->gbytes))
            d->gviews[t].data = (char *)d->gact + (gp - (const char *)h->gact);
    }
    for (int k = 0; k < nargs && st == PD_OK; k++) {
        d->args[k] = h->args[k] ? d->views + (h->args[k] - h->views) : NULL;
        d->gargs[k] = h->gargs[k] ? d->gviews + (h->gargs[k] - h->gviews) : NULL;
    }
    for (int i = 0; i < g->nnodes && st == PD_OK && !base; i++) d->cpu[i] = !di->supports_op(g, &g->nodes[i]);
    if (st != PD_OK) {
        pd__dactx_destroy(d);
        return st;
    }
    *out = d;
    return PD_OK;
}

pd_tensor *pd__dactx_value(pd__dactx *d, int t) { return &d->views[t]; }
pd_tensor *pd__dactx_grad(pd__dactx *d, int t) { return &d->gviews[t]; }

/* The context's nodes on its device; the host context's tables for the fallback. */
static pd__where pd__dactx_where(pd__dactx *d) {
    pd__actx *h = d->h;
    return (pd__where){&d->dev, d->views, d->gviews, d->args, d->gargs, h->views, h->gviews, h->args, h->gargs,
                       d->cpu, &h->zp};
}

pd_status pd__dactx_forward(const pd_session *s, pd__exec *x, pd__dactx *d, const int *nodes, int n) {
    pd__where w = pd__dactx_where(d);
    return pd__nodes_forward(s, x, &w, nodes, n, NULL);
}

/* pd__actx_backward (part -1) and pd__actx_backward_part (0: input
 * gradients, 1: weight gradients) on the device: the same code. */
pd_status pd__dactx_backward(const pd_session *s, pd__exec *x, pd__dactx *d, const int *nodes, int n, int part) {
    pd__where w = pd__dactx_where(d);
    return pd__nodes_backward(s, x, &w, nodes, n, part, NULL, NULL);
}

pd_status pd__dactx_loss(const pd_session *s, pd__dactx *d, const pd_tensor *labels, double scale, pd_step_result *r) {
    const pd__dev_i *di = d->dev.i;
    pd_loss_kind k = s->o.loss;
    if (k == PD_LOSS_AUTO) k = labels->dtype == PD_INT64 ? PD_LOSS_CROSS_ENTROPY : PD_LOSS_MSE;
    pd_tensor dl = *labels; /* int64 labels to the device, for cross-entropy there */
    dl.data = NULL;
    if (k == PD_LOSS_CROSS_ENTROPY && labels->dtype == PD_INT64) {
        size_t n = (size_t)pd_tensor_numel(labels) * sizeof(int64_t);
        if (n > d->labels_cap) {
            di->free(d->dev.c, d->labels);
            d->labels = NULL;
            d->labels_cap = 0;
            PD_TRY(di->alloc(d->dev.c, n, &d->labels));
            d->labels_cap = n;
        }
        PD_TRY(di->upload(d->dev.c, d->labels, labels->data, n));
        dl.data = d->labels;
    }
    pd__actx *h = d->h;
    return pd__loss_run(s, &d->dev, d->views, d->gviews, h->views, h->gviews, labels, &dl, true, INT64_MAX, scale, r);
}
