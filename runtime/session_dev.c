/* session_dev.c - the step's memory on its device (struct pd__sdev,
 * session_impl.h), over the device interface (runtime/device.h): on the
 * CPU the host slabs themselves; on CUDA (or the simulated device) their
 * device twins, the pinned staging of the inputs, the copies between the
 * host mirror and the device (pull, push), and the CPU fallback of a node
 * the device refuses, which the pipeline's device contexts use too. */
#include "session_impl.h"
#include "optim.h"

#include <string.h>

void pd__sdev_destroy(pd_session *s) {
    pd__sdev *d = &s->dev;
    if (d->d.c && !d->d.i->host_memory) {
        const pd__dev_i *i = d->d.i;
        (void)i->bind(d->d.c);
        void *own[] = {d->params, d->grads, d->state0, d->state1, d->act, d->gact, d->consts, d->labels.data};
        for (size_t k = 0; k < sizeof own / sizeof own[0]; k++) i->free(d->d.c, own[k]);
        i->host_free(d->d.c, d->stage);
        PD_FREE(d->views);
        PD_FREE(d->gviews);
        PD_FREE(d->args);
        PD_FREE(d->gargs);
    }
    if (d->d.c && d->d.i->close) d->d.i->close(d->d.c);
    PD_FREE(d->cpu);
    memset(d, 0, sizeof *d);
}

static pd_status pd__sdev_alloc(pd__sdev *d, size_t bytes, void **p) {
    PD_TRY(d->d.i->alloc(d->d.c, bytes, p));
    return d->d.i->memset0(d->d.c, *p, bytes);
}

static bool pd__in_params(const pd_session *s, const void *p) {
    return p && (const char *)p >= (const char *)s->params && (const char *)p < (const char *)(s->params + s->ptotal);
}

/* Device tensor views at the host views' offsets in the twins; the other
 * initializers and the constants uploaded into d->consts. */
static pd_status pd__sdev_views(pd_session *s, pd__sdev *d) {
    const pd_graph *g = s->g;
    size_t co = 0;
    for (int t = 0; t < g->ntensors; t++) {
        const pd__tensor *x = &g->tensors[t];
        char *h = s->views[t].data, *gh = s->gviews[t].data;
        d->views[t] = s->views[t];
        d->gviews[t] = s->gviews[t];
        if (!h) d->views[t].data = NULL;
        else if (pd__in_params(s, h)) d->views[t].data = d->params + ((float *)(void *)h - s->params);
        else if ((x->kind == PD_T_ACT || x->kind == PD_T_INPUT) && x->ndim >= 0)
            d->views[t].data = (char *)d->act + (h - (char *)s->act);
        else {
            d->views[t].data = (char *)d->consts + co;
            PD_TRY(d->d.i->upload(d->d.c, d->views[t].data, h, pd__tbytes(x)));
            co += pd__align64(pd__tbytes(x));
        }
        if (!gh) d->gviews[t].data = NULL;
        else if (gh >= (char *)s->grads && gh < (char *)(s->grads + s->ptotal))
            d->gviews[t].data = d->grads + ((float *)(void *)gh - s->grads);
        else d->gviews[t].data = (char *)d->gact + (gh - (char *)s->gact);
    }
    int nargs = s->arg_start[g->nnodes - 1] + g->nodes[g->nnodes - 1].nin + g->nodes[g->nnodes - 1].nout;
    for (int k = 0; k < nargs; k++) {
        d->args[k] = s->args[k] ? d->views + (s->args[k] - s->views) : NULL;
        d->gargs[k] = s->gargs[k] ? d->gviews + (s->gargs[k] - s->gviews) : NULL;
    }
    return PD_OK;
}

/* The twins of a device with its own memory: slabs of the host's sizes,
 * the weights uploaded, the views, which nodes it refuses. */
static pd_status pd__sdev_twin(pd_session *s, pd__sdev *d) {
    const pd_graph *g = s->g;
    size_t pbytes = sizeof(float) * (size_t)s->ptotal;
    int ns = pd__optim_state_slabs(s->o.optimizer);
    PD_TRY(pd__sdev_alloc(d, pbytes, (void **)&d->params));
    PD_TRY(pd__sdev_alloc(d, pbytes, (void **)&d->grads));
    if (ns > 0) PD_TRY(pd__sdev_alloc(d, pbytes, (void **)&d->state0));
    if (ns > 1) PD_TRY(pd__sdev_alloc(d, pbytes, (void **)&d->state1));
    PD_TRY(d->d.i->upload(d->d.c, d->params, s->params, pbytes));
    /* the host slabs' sizes, and the constants' */
    size_t abytes = 0, cbytes = 0, ibytes = 0;
    for (int t = 0; t < g->ntensors; t++) {
        const pd__tensor *x = &g->tensors[t];
        size_t b = pd__align64(pd__tbytes(x));
        if ((x->kind == PD_T_ACT || x->kind == PD_T_INPUT) && x->ndim >= 0) abytes += b;
        if (x->kind == PD_T_INPUT && x->ndim >= 0) { /* the staging buffer spans the inputs' part of the act layout */
            size_t end = (size_t)((char *)s->views[t].data - (char *)s->act) + b;
            if (end > ibytes) ibytes = end;
        }
        if ((x->kind == PD_T_INIT || x->kind == PD_T_CONST) && s->views[t].data && !pd__in_params(s, s->views[t].data))
            cbytes += b;
    }
    PD_TRY(pd__sdev_alloc(d, abytes, &d->act));
    PD_TRY(pd__sdev_alloc(d, s->gact_bytes, &d->gact));
    PD_TRY(pd__sdev_alloc(d, cbytes, &d->consts));
    PD_TRY(d->d.i->host_alloc(d->d.c, ibytes, &d->stage));
    d->stage_bytes = d->stage ? ibytes : 0;
    int nargs = s->arg_start[g->nnodes - 1] + g->nodes[g->nnodes - 1].nin + g->nodes[g->nnodes - 1].nout;
    d->views = PD_CALLOC((size_t)g->ntensors + 1, sizeof(pd_tensor));
    d->gviews = PD_CALLOC((size_t)g->ntensors + 1, sizeof(pd_tensor));
    d->args = PD_CALLOC((size_t)nargs + 1, sizeof(pd_tensor *));
    d->gargs = PD_CALLOC((size_t)nargs + 1, sizeof(pd_tensor *));
    if (!d->views || !d->gviews || !d->args || !d->gargs) return pd__err(PD_ERR_NOMEM, "out of memory");
    PD_TRY(pd__sdev_views(s, d));
    for (int i = 0; i < g->nnodes; i++) {
        d->cpu[i] = !d->d.i->supports_op(g, &g->nodes[i]);
        d->ncpu += d->cpu[i];
    }
    return d->d.i->sync(d->d.c);
}

pd_status pd__sdev_create(pd_session *s, const pd__dev_i *dev) {
    pd__sdev *d = &s->dev;
#ifdef PD_HAVE_CUDA
    d->d.i = s->o.device == PD_DEVICE_CUDA ? &pd__dev_cuda : &pd__dev_cpu;
#else
    d->d.i = &pd__dev_cpu; /* pd_session_create refused PD_DEVICE_CUDA */
#endif
    if (dev) d->d.i = dev;
    PD_TRY(d->d.i->open(s->o.device_index, s->o.precision, &d->d.c));
    d->cpu = PD_CALLOC((size_t)s->g->nnodes + 1, sizeof(bool));
    if (!d->cpu) return pd__err(PD_ERR_NOMEM, "out of memory");
    if (d->d.i->host_memory) { /* the host slabs are the device's: every node runs where it is */
        d->params = s->params, d->grads = s->grads, d->state0 = s->state0, d->state1 = s->state1;
        d->act = s->act, d->gact = s->gact;
        d->views = s->views, d->gviews = s->gviews, d->args = s->args, d->gargs = s->gargs;
    } else {
        PD_TRY(pd__sdev_twin(s, d));
    }
    d->ready = true;
    return PD_OK;
}

pd_status pd__dev_tdown(const pd__dev *dev, const pd_graph *g, const pd_tensor *v, const pd_tensor *dv, int t) {
    return pd__dev_down(dev, v[t].data, dv[t].data, pd__tbytes(&g->tensors[t]));
}
pd_status pd__dev_tup(const pd__dev *dev, const pd_graph *g, const pd_tensor *v, const pd_tensor *dv, int t) {
    return pd__dev_up(dev, dv[t].data, v[t].data, pd__tbytes(&g->tensors[t]));
}

/* The trained values (and with grads, the gradients), the optimizer state
 * and the initializers a training forward writes (BatchNorm statistics), from
 * the device into the host mirror. */
pd_status pd__sdev_pull(const pd_session *s, bool grads) {
    const pd__sdev *d = &s->dev;
    const pd_graph *g = s->g;
    if (d->d.i->host_memory) return PD_OK;
    size_t pbytes = sizeof(float) * (size_t)s->ptotal;
    PD_TRY(d->d.i->bind(d->d.c));
    PD_TRY(pd__dev_down(&d->d, s->params, d->params, pbytes));
    if (grads) PD_TRY(pd__dev_down(&d->d, s->grads, d->grads, pbytes));
    PD_TRY(pd__dev_down(&d->d, s->state0, d->state0, pbytes));
    PD_TRY(pd__dev_down(&d->d, s->state1, d->state1, pbytes));
    for (int t = 0; t < g->ntensors; t++)
        if (g->tensors[t].kind == PD_T_INIT && !pd__in_params(s, s->views[t].data))
            PD_TRY(pd__dev_tdown(&d->d, g, s->views, d->views, t));
    return PD_OK;
}

/* The host mirror's weights, optimizer state and statistics up (a restore). */
pd_status pd__sdev_push(pd_session *s) {
    const pd__sdev *d = &s->dev;
    const pd_graph *g = s->g;
    if (d->d.i->host_memory) return PD_OK;
    size_t pbytes = sizeof(float) * (size_t)s->ptotal;
    PD_TRY(d->d.i->bind(d->d.c));
    PD_TRY(pd__dev_up(&d->d, d->params, s->params, pbytes));
    PD_TRY(pd__dev_up(&d->d, d->state0, s->state0, pbytes));
    PD_TRY(pd__dev_up(&d->d, d->state1, s->state1, pbytes));
    for (int t = 0; t < g->ntensors; t++)
        if (g->tensors[t].kind == PD_T_INIT && !pd__in_params(s, s->views[t].data))
            PD_TRY(pd__dev_tup(&d->d, g, s->views, d->views, t));
    return d->d.i->sync(d->d.c);
}

/* Graph input t, just copied into the host mirror: through the pinned
 * staging buffer to the device. The staging bytes are rewritten only by the
 * next pd_session_set_input of t; the stream runs this copy before anything
 * queued after it, and every step waits for its stream before returning. */
pd_status pd__sdev_input(pd_session *s, int t) {
    pd__sdev *d = &s->dev;
    if (d->d.i->host_memory) return PD_OK;
    size_t off = (size_t)((char *)s->views[t].data - (char *)s->act), n = pd__tbytes(&s->g->tensors[t]);
    PD_TRY(d->d.i->bind(d->d.c));
    if (!d->stage || off + n > d->stage_bytes) return pd__dev_tup(&d->d, s->g, s->views, d->views, t);
    memcpy((char *)d->stage + off, s->views[t].data, n);
    return d->d.i->upload(d->d.c, d->views[t].data, (char *)d->stage + off, n);
}

pd_status pd__sdev_labels(pd_session *s) {
    pd__sdev *d = &s->dev;
    if (d->d.i->host_memory) { /* the host's copy is the device's */
        d->labels = s->labels;
        return PD_OK;
    }
    size_t n = (size_t)pd_tensor_numel(&s->labels) * pd_dtype_size(s->labels.dtype);
    bool same = d->labels.data && d->labels.dtype == s->labels.dtype && d->labels.ndim == s->labels.ndim;
    for (int i = 0; same && i < s->labels.ndim; i++) same = d->labels.shape[i] == s->labels.shape[i];
    PD_TRY(d->d.i->bind(d->d.c));
    if (!same) {
        void *p;
        PD_TRY(d->d.i->alloc(d->d.c, n, &p));
        d->d.i->free(d->d.c, d->labels.data);
        d->labels = s->labels;
        d->labels.data = p;
    }
    return d->d.i->upload(d->d.c, d->labels.data, s->labels.data, n);
}

/* A node the device refuses, on the CPU: its tensors down, the kernel, its
 * results up (the outputs; backward, the input gradients it adds into).
 * The session and the pipeline's device contexts (pd__dactx) both fall back
 * through it. */
pd_status pd__dev_cpu_node(const pd_session *s, const pd__dev *dev, pd__exec *x, const pd_tensor *v,
                           const pd_tensor *gv, const pd_tensor *dv, const pd_tensor *dgv, pd_tensor **a,
                           pd_tensor **ga, int i, bool bwd, pd_tensor **din) {
    const pd_graph *g = s->g;
    const pd__node *n = &g->nodes[i];
    for (int j = 0; j < n->nin; j++)
        if (n->in[j] >= 0) PD_TRY(pd__dev_tdown(dev, g, v, dv, n->in[j]));
    if (!bwd) {
        PD_TRY(pd__cpu_run(x, g, n, a, a + n->nin));
        for (int j = 0; j < n->nout; j++)
            if (n->out[j] >= 0) PD_TRY(pd__dev_tup(dev, g, v, dv, n->out[j]));
        /* an in-place update of an initializer input (running statistics) */
        for (int j = 0; j < n->nin; j++)
            if (n->in[j] >= 0 && g->tensors[n->in[j]].kind == PD_T_INIT && !s->needs_grad[n->in[j]])
                PD_TRY(pd__dev_tup(dev, g, v, dv, n->in[j]));
        return PD_OK;
    }
    for (int j = 0; j < n->nout; j++) {
        int t = n->out[j];
        if (t < 0) continue;
        PD_TRY(pd__dev_tdown(dev, g, v, dv, t));
        if (ga[j]) PD_TRY(pd__dev_tdown(dev, g, gv, dgv, t));
    }
    for (int j = 0; j < n->nin; j++)
        if (din[j]) PD_TRY(pd__dev_tdown(dev, g, gv, dgv, n->in[j]));
    PD_TRY(pd__cpu_run_bwd(x, g, n, a, a + n->nin, ga, din));
    for (int j = 0; j < n->nin; j++)
        if (din[j]) PD_TRY(pd__dev_tup(dev, g, gv, dgv, n->in[j]));
    return PD_OK;
}

int pd__session_cpu_nodes(const pd_session *s) { return s->dev.ncpu; }
