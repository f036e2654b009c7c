/* session_dev.c - the training session's device side (session_impl.h):
 * the device twin of the session's slabs, the step, evaluation and timed
 * step on a GPU (or the simulated device), the CPU fallback's copies, and
 * the device activation contexts of the pipeline's GPU stages (pd__dactx,
 * session.h). Without the CUDA backend: stubs, and pd_session_create
 * refuses PD_DEVICE_CUDA, so s->dev is always NULL. */
#include "session_impl.h"
#include "checkpoint.h"
#include "loss.h"
#include "optim.h"
#ifdef PD_HAVE_CUDA
#include "cuda/cuda.h"
#endif

#include <math.h>
#include <stdio.h>
#include <string.h>

#ifdef PD_HAVE_CUDA

/* The device twin of the session's memory. Every device slab has the host
 * slab's layout, so a tensor's device address is its host address's offset
 * in the twin: a CPU fallback copies a tensor down or up with one call. */
struct pd__sdev {
    pd__cuda_ctx *c;
    float *params, *grads, *state0, *state1; /* the parameter, gradient and optimizer-state slabs */
    void *act, *gact;                         /* activations (inputs included) and their gradients */
    void *consts;                             /* the other initializers and the constants, uploaded once */
    pd_tensor *views, *gviews;                /* per graph tensor: its device data (NULL: none) */
    pd_tensor **args, **gargs;                /* the session's argument tables over the device views */
    bool *cpu;                                /* per node: runs on the CPU (pd__cuda_supports_op false) */
    int ncpu;
    void *stage;                              /* pinned staging of the graph inputs (host act layout) */
    size_t stage_bytes;
    pd_tensor labels;                         /* device copy of the labels (data from the allocator) */
    bool ready;                               /* created whole (the device holds the weights) */
};

static size_t pd__tb(const pd__tensor *x) { return (size_t)(x->numel > 0 ? x->numel : 0) * pd_dtype_size(x->dtype); }

void pd__sdev_destroy(pd_session *s) {
    pd__sdev *d = s->dev;
    if (!d) return;
    if (d->c) {
        (void)pd__cuda_bind(d->c);
        pd__cuda_free(d->c, d->params);
        pd__cuda_free(d->c, d->grads);
        pd__cuda_free(d->c, d->state0);
        pd__cuda_free(d->c, d->state1);
        pd__cuda_free(d->c, d->act);
        pd__cuda_free(d->c, d->gact);
        pd__cuda_free(d->c, d->consts);
        pd__cuda_free(d->c, d->labels.data);
        pd__cuda_ctx_destroy(d->c);
    }
    pd__cuda_host_free(d->stage);
    PD_FREE(d->views);
    PD_FREE(d->gviews);
    PD_FREE(d->args);
    PD_FREE(d->gargs);
    PD_FREE(d->cpu);
    PD_FREE(d);
    s->dev = NULL;
}

static pd_status pd__sdev_alloc(pd__sdev *d, size_t bytes, void **p) {
    PD_TRY(pd__cuda_alloc(d->c, bytes, p));
    return pd__cuda_memset0(d->c, *p, bytes);
}

pd_status pd__sdev_create(pd_session *s) {
    const pd_graph *g = s->g;
    pd__sdev *d = PD_CALLOC(1, sizeof *d);
    if (!d) return pd__err(PD_ERR_NOMEM, "out of memory");
    s->dev = d;
    PD_TRY(pd__cuda_ctx_create(s->o.device_index, &d->c));
    pd__cuda_set_precision(d->c, s->o.precision == PD_PRECISION_BF16   ? PD_CUDA_BF16
                                 : s->o.precision == PD_PRECISION_TF32 ? PD_CUDA_TF32
                                                                       : PD_CUDA_FP32);
    size_t pbytes = sizeof(float) * (size_t)s->ptotal;
    int ns = pd__optim_state_slabs(s->o.optimizer);
    PD_TRY(pd__sdev_alloc(d, pbytes, (void **)&d->params));
    PD_TRY(pd__sdev_alloc(d, pbytes, (void **)&d->grads));
    if (ns > 0) PD_TRY(pd__sdev_alloc(d, pbytes, (void **)&d->state0));
    if (ns > 1) PD_TRY(pd__sdev_alloc(d, pbytes, (void **)&d->state1));
    PD_TRY(pd__cuda_upload(d->c, d->params, s->params, pbytes));
    /* the host slabs' sizes, and the constants' */
    size_t abytes = 0, cbytes = 0, ibytes = 0;
    for (int t = 0; t < g->ntensors; t++) {
        const pd__tensor *x = &g->tensors[t];
        size_t b = pd__align64(pd__tb(x));
        if ((x->kind == PD_T_ACT || x->kind == PD_T_INPUT) && x->ndim >= 0) abytes += b;
        if (x->kind == PD_T_INPUT && x->ndim >= 0) { /* the staging buffer spans the inputs' part of the act layout */
            size_t end = (size_t)((char *)s->views[t].data - (char *)s->act) + b;
            if (end > ibytes) ibytes = end;
        }
        if ((x->kind == PD_T_INIT || x->kind == PD_T_CONST) && s->views[t].data &&
            !((char *)s->views[t].data >= (char *)s->params && (char *)s->views[t].data < (char *)(s->params + s->ptotal)))
            cbytes += b;
    }
    PD_TRY(pd__sdev_alloc(d, abytes, &d->act));
    PD_TRY(pd__sdev_alloc(d, s->gact_bytes, &d->gact));
    PD_TRY(pd__sdev_alloc(d, cbytes, &d->consts));
    PD_TRY(pd__cuda_host_alloc(ibytes, &d->stage));
    d->stage_bytes = ibytes;
    d->views = PD_CALLOC((size_t)g->ntensors + 1, sizeof(pd_tensor));
    d->gviews = PD_CALLOC((size_t)g->ntensors + 1, sizeof(pd_tensor));
    d->cpu = PD_CALLOC((size_t)g->nnodes + 1, sizeof(bool));
    int nargs = s->arg_start[g->nnodes - 1] + g->nodes[g->nnodes - 1].nin + g->nodes[g->nnodes - 1].nout;
    d->args = PD_CALLOC((size_t)nargs + 1, sizeof(pd_tensor *));
    d->gargs = PD_CALLOC((size_t)nargs + 1, sizeof(pd_tensor *));
    if (!d->views || !d->gviews || !d->cpu || !d->args || !d->gargs) return pd__err(PD_ERR_NOMEM, "out of memory");
    size_t co = 0;
    for (int t = 0; t < g->ntensors; t++) {
        const pd__tensor *x = &g->tensors[t];
        char *h = s->views[t].data;
        d->views[t] = s->views[t];
        d->gviews[t] = s->gviews[t];
        if (!h) d->views[t].data = NULL;
        else if ((char *)h >= (char *)s->params && (char *)h < (char *)(s->params + s->ptotal))
            d->views[t].data = d->params + ((float *)(void *)h - s->params);
        else if ((x->kind == PD_T_ACT || x->kind == PD_T_INPUT) && x->ndim >= 0)
            d->views[t].data = (char *)d->act + (h - (char *)s->act);
        else {
            d->views[t].data = (char *)d->consts + co;
            PD_TRY(pd__cuda_upload(d->c, d->views[t].data, h, pd__tb(x)));
            co += pd__align64(pd__tb(x));
        }
        char *gh = s->gviews[t].data;
        if (!gh) d->gviews[t].data = NULL;
        else if (gh >= (char *)s->grads && gh < (char *)(s->grads + s->ptotal))
            d->gviews[t].data = d->grads + ((float *)(void *)gh - s->grads);
        else
            d->gviews[t].data = (char *)d->gact + (gh - (char *)s->gact);
    }
    for (int k = 0; k < nargs; k++) {
        d->args[k] = s->args[k] ? d->views + (s->args[k] - s->views) : NULL;
        d->gargs[k] = s->gargs[k] ? d->gviews + (s->gargs[k] - s->gviews) : NULL;
    }
    for (int i = 0; i < g->nnodes; i++) {
        d->cpu[i] = !pd__cuda_supports_op(g, &g->nodes[i]);
        d->ncpu += d->cpu[i];
    }
    PD_TRY(pd__cuda_sync(d->c));
    d->ready = true;
    return PD_OK;
}

/* Tensor t between a host view table and a device one (either data NULL: nothing to copy). */
static pd_status pd__dev_down(pd__cuda_ctx *c, const pd_graph *g, const pd_tensor *v, const pd_tensor *dv, int t) {
    if (!v[t].data || !dv[t].data) return PD_OK;
    return pd__cuda_download(c, v[t].data, dv[t].data, pd__tb(&g->tensors[t]));
}
static pd_status pd__dev_up(pd__cuda_ctx *c, const pd_graph *g, const pd_tensor *v, const pd_tensor *dv, int t) {
    if (!v[t].data || !dv[t].data) return PD_OK;
    return pd__cuda_upload(c, dv[t].data, v[t].data, pd__tb(&g->tensors[t]));
}

/* Tensor t's data between the host mirror and the device (view tables v/dv). */
static pd_status pd__sdev_down(const pd_session *s, const pd_tensor *v, const pd_tensor *dv, int t) {
    return pd__dev_down(s->dev->c, s->g, v, dv, t);
}
static pd_status pd__sdev_up(const pd_session *s, const pd_tensor *v, const pd_tensor *dv, int t) {
    return pd__dev_up(s->dev->c, s->g, v, dv, t);
}

/* The trained values (and with grads, the gradients), the optimizer state
 * and the initializers a training forward writes (BatchNorm statistics), from
 * the device into the host mirror. */
pd_status pd__sdev_pull(const pd_session *s, bool grads) {
    pd__sdev *d = s->dev;
    const pd_graph *g = s->g;
    size_t pbytes = sizeof(float) * (size_t)s->ptotal;
    PD_TRY(pd__cuda_bind(d->c));
    PD_TRY(pd__cuda_download(d->c, s->params, d->params, pbytes));
    if (grads) PD_TRY(pd__cuda_download(d->c, s->grads, d->grads, pbytes));
    if (s->state0) PD_TRY(pd__cuda_download(d->c, s->state0, d->state0, pbytes));
    if (s->state1) PD_TRY(pd__cuda_download(d->c, s->state1, d->state1, pbytes));
    for (int t = 0; t < g->ntensors; t++) {
        const pd__tensor *x = &g->tensors[t];
        bool param = (char *)s->views[t].data >= (char *)s->params &&
                     (char *)s->views[t].data < (char *)(s->params + s->ptotal);
        if (x->kind == PD_T_INIT && !param) PD_TRY(pd__sdev_down(s, s->views, d->views, t));
    }
    return PD_OK;
}

/* The host mirror's weights, optimizer state and statistics up (a restore). */
pd_status pd__sdev_push(pd_session *s) {
    pd__sdev *d = s->dev;
    const pd_graph *g = s->g;
    size_t pbytes = sizeof(float) * (size_t)s->ptotal;
    PD_TRY(pd__cuda_bind(d->c));
    PD_TRY(pd__cuda_upload(d->c, d->params, s->params, pbytes));
    if (s->state0) PD_TRY(pd__cuda_upload(d->c, d->state0, s->state0, pbytes));
    if (s->state1) PD_TRY(pd__cuda_upload(d->c, d->state1, s->state1, pbytes));
    for (int t = 0; t < g->ntensors; t++) {
        bool param = (char *)s->views[t].data >= (char *)s->params &&
                     (char *)s->views[t].data < (char *)(s->params + s->ptotal);
        if (g->tensors[t].kind == PD_T_INIT && !param) PD_TRY(pd__sdev_up(s, s->views, d->views, t));
    }
    return pd__cuda_sync(d->c);
}

/* Graph input t, just copied into the host mirror: through the pinned
 * staging buffer to the device. The staging bytes are rewritten only by the
 * next pd_session_set_input of t; the stream runs this copy before anything
 * queued after it, and every step waits for its stream before returning. */
pd_status pd__sdev_input(pd_session *s, int t) {
    pd__sdev *d = s->dev;
    size_t off = (size_t)((char *)s->views[t].data - (char *)s->act), n = pd__tb(&s->g->tensors[t]);
    PD_TRY(pd__cuda_bind(d->c));
    if (!d->stage || off + n > d->stage_bytes) return pd__sdev_up(s, s->views, d->views, t);
    memcpy((char *)d->stage + off, s->views[t].data, n);
    return pd__cuda_upload(d->c, d->views[t].data, (char *)d->stage + off, n);
}

pd_status pd__sdev_labels(pd_session *s) {
    pd__sdev *d = s->dev;
    size_t n = (size_t)pd_tensor_numel(&s->labels) * pd_dtype_size(s->labels.dtype);
    bool same = d->labels.data && d->labels.dtype == s->labels.dtype && d->labels.ndim == s->labels.ndim;
    for (int i = 0; same && i < s->labels.ndim; i++) same = d->labels.shape[i] == s->labels.shape[i];
    PD_TRY(pd__cuda_bind(d->c));
    if (!same) {
        void *p;
        PD_TRY(pd__cuda_alloc(d->c, n, &p));
        pd__cuda_free(d->c, d->labels.data);
        d->labels = s->labels;
        d->labels.data = p;
    }
    return pd__cuda_upload(d->c, d->labels.data, s->labels.data, n);
}

/* A node the CUDA table refuses, on the CPU: its tensors down, the kernel,
 * its results up (the outputs; backward, the input gradients it adds into).
 * v/gv: the host views (and a, ga the host argument tables of node i) the
 * CPU kernel runs on; dv/dgv: their device twins. The session and the
 * pipeline's device contexts (pd__dactx) both fall back through it. */
static pd_status pd__dev_cpu_node(const pd_session *s, pd__cuda_ctx *c, pd__exec *x, const pd_tensor *v,
                                  const pd_tensor *gv, const pd_tensor *dv, const pd_tensor *dgv, pd_tensor **a,
                                  pd_tensor **ga, int i, bool bwd, pd_tensor **din) {
    const pd_graph *g = s->g;
    const pd__node *n = &g->nodes[i];
    for (int j = 0; j < n->nin; j++)
        if (n->in[j] >= 0) PD_TRY(pd__dev_down(c, g, v, dv, n->in[j]));
    if (!bwd) {
        PD_TRY(pd__cpu_run(x, g, n, a, a + n->nin));
        for (int j = 0; j < n->nout; j++)
            if (n->out[j] >= 0) PD_TRY(pd__dev_up(c, g, v, dv, n->out[j]));
        /* an in-place update of an initializer input (running statistics) */
        for (int j = 0; j < n->nin; j++)
            if (n->in[j] >= 0 && g->tensors[n->in[j]].kind == PD_T_INIT && !s->needs_grad[n->in[j]])
                PD_TRY(pd__dev_up(c, g, v, dv, n->in[j]));
        return PD_OK;
    }
    for (int j = 0; j < n->nout; j++) {
        int t = n->out[j];
        if (t < 0) continue;
        PD_TRY(pd__dev_down(c, g, v, dv, t));
        if (ga[j]) PD_TRY(pd__dev_down(c, g, gv, dgv, t));
    }
    for (int j = 0; j < n->nin; j++)
        if (din[j]) PD_TRY(pd__dev_down(c, g, gv, dgv, n->in[j]));
    PD_TRY(pd__cpu_run_bwd(x, g, n, a, a + n->nin, ga, din));
    for (int j = 0; j < n->nin; j++)
        if (din[j]) PD_TRY(pd__dev_up(c, g, gv, dgv, n->in[j]));
    return PD_OK;
}

static pd_status pd__sdev_cpu_node(pd_session *s, int i, bool bwd, pd_tensor **din) {
    pd__sdev *d = s->dev;
    return pd__dev_cpu_node(s, d->c, &s->x, s->views, s->gviews, d->views, d->gviews, s->args + s->arg_start[i],
                            s->gargs + s->arg_start[i], i, bwd, din);
}

/* ms: NULL, or per node its forward's GPU time (CUDA events). */
static pd_status pd__sdev_forward(pd_session *s, double *ms) {
    pd__sdev *d = s->dev;
    const pd_graph *g = s->g;
    for (int i = 0; i < g->nnodes; i++) {
        const pd__node *n = &g->nodes[i];
        pd_tensor **a = d->args + s->arg_start[i];
        if (ms) PD_TRY(pd__cuda_timer_start(d->c));
        if (d->cpu[i]) PD_TRY(pd__sdev_cpu_node(s, i, false, NULL));
        else PD_TRY(pd__cuda_run(d->c, &s->x, g, n, a, a + n->nin));
        if (ms) PD_TRY(pd__cuda_timer_stop(d->c, &ms[i]));
    }
    return PD_OK;
}

/* The backward; part -1: every gradient at once; 0: the input gradients
 * only; 1: the parameters' only (the profiler's split, timed into ms). */
static pd_status pd__sdev_backward(pd_session *s, double *in_ms, double *w_ms) {
    pd__sdev *d = s->dev;
    const pd_graph *g = s->g;
    pd_tensor *din[64], *hdin[64];
    for (int i = g->nnodes - 1; i >= 0; i--) {
        const pd__node *n = &g->nodes[i];
        pd_tensor **a = d->args + s->arg_start[i], **ga = d->gargs + s->arg_start[i];
        pd_tensor **hga = s->gargs + s->arg_start[i];
        if (in_ms) in_ms[i] = w_ms[i] = 0;
        if (n->nin > 64) return pd__node_err(g, n, PD_ERR_UNSUPPORTED, "more than 64 inputs on CUDA");
        bool any_out = false;
        for (int j = 0; j < n->nout; j++) any_out |= ga[j] != NULL;
        if (!any_out) continue;
        for (int k = s->zp.at[3 * i]; k < s->zp.at[3 * i + 2]; k++) { /* as pd__zplan_run, fresh ones too */
            const pd__tensor *t = &g->tensors[s->zp.list[k]];
            PD_TRY(pd__cuda_memset0(d->c, d->gviews[s->zp.list[k]].data, (size_t)t->numel * pd_dtype_size(t->dtype)));
        }
        for (int part = in_ms ? 0 : -1; part < (in_ms ? 2 : 0); part++) {
            bool any = false;
            for (int j = 0; j < n->nin; j++) {
                bool w = ga[n->nout + j] && g->tensors[n->in[j]].kind == PD_T_INIT;
                bool take = ga[n->nout + j] && (part < 0 || w == (part == 1));
                din[j] = take ? ga[n->nout + j] : NULL;
                hdin[j] = take ? hga[n->nout + j] : NULL;
                any |= take;
            }
            if (!any) continue;
            if (in_ms) PD_TRY(pd__cuda_timer_start(d->c));
            if (d->cpu[i]) PD_TRY(pd__sdev_cpu_node(s, i, true, hdin));
            else PD_TRY(pd__cuda_run_bwd(d->c, &s->x, g, n, a, a + n->nin, ga, din));
            if (in_ms) PD_TRY(pd__cuda_timer_stop(d->c, part ? &w_ms[i] : &in_ms[i]));
        }
    }
    return PD_OK;
}

/* The loss on the device (cross-entropy), or on the host with the prediction
 * copied down and its gradient up (MSE, the model's own loss). */
static pd_status pd__sdev_loss(pd_session *s, bool grad, int64_t rows, pd_step_result *r) {
    pd__sdev *d = s->dev;
    pd_loss_kind k = s->o.loss;
    if (k == PD_LOSS_AUTO) k = s->labels.dtype == PD_INT64 ? PD_LOSS_CROSS_ENTROPY : PD_LOSS_MSE;
    r->correct = 0;
    r->count = 0;
    if (k == PD_LOSS_CROSS_ENTROPY && s->labels.dtype == PD_INT64 && d->labels.data) {
        pd_status st = pd__cuda_loss_cross_entropy(d->c, &d->views[s->pred], &d->labels, rows,
                                                   grad ? d->gviews[s->pred].data : NULL, &r->loss, &r->correct,
                                                   &r->count);
        if (st != PD_OK) pd__err_prefix("%s: output '%s'", s->g->path, s->g->tensors[s->pred].name);
        return st;
    }
    PD_TRY(pd__sdev_down(s, s->views, d->views, s->pred));
    PD_TRY(pd__loss(s, grad, rows, r));
    if (grad) PD_TRY(pd__sdev_up(s, s->gviews, d->gviews, s->pred));
    return PD_OK;
}

/* A non-finite loss or norm: the activations down, then the host's search. */
static pd_status pd__sdev_numeric_error(pd_session *s, const char *what, double v) {
    size_t abytes = 0;
    for (int t = 0; t < s->g->ntensors; t++) {
        const pd__tensor *x = &s->g->tensors[t];
        if ((x->kind == PD_T_ACT || x->kind == PD_T_INPUT) && x->ndim >= 0) abytes += pd__align64(pd__tb(x));
    }
    PD_TRY(pd__cuda_download(s->dev->c, s->act, s->dev->act, abytes));
    return pd__numeric_error(s, what, v);
}

static pd_status pd__sdev_begin(pd_session *s) {
    pd__sdev *d = s->dev;
    PD_TRY(pd__cuda_bind(d->c)); /* a caller may step from another thread than the creator */
    s->x.training = true;
    s->x.seed = pd__mix(s->o.seed ^ pd__mix((uint64_t)s->step));
    return PD_OK;
}

pd_status pd__sdev_step(pd_session *s, pd_step_result *r) {
    pd__sdev *d = s->dev;
    pd_step_result res;
    memset(&res, 0, sizeof res);
    PD_TRY(pd__sdev_begin(s));
    PD_TRY(pd__sdev_forward(s, NULL));
    PD_TRY(pd__cuda_memset0(d->c, d->grads, sizeof(float) * (size_t)s->ptotal));
    const pd__tensor *pt = &s->g->tensors[s->pred]; /* the other activation gradients: pd__sdev_backward */
    if (d->gviews[s->pred].data)
        PD_TRY(pd__cuda_memset0(d->c, d->gviews[s->pred].data, (size_t)pt->numel * pd_dtype_size(pt->dtype)));
    PD_TRY(pd__sdev_loss(s, true, INT64_MAX, &res));
    if (!isfinite(res.loss)) return pd__sdev_numeric_error(s, "the loss", res.loss);
    PD_TRY(pd__sdev_backward(s, NULL, NULL));
    PD_TRY(pd__cuda_grad_norm(d->c, d->grads, s->ptotal, &res.grad_norm));
    if (!isfinite(res.grad_norm)) return pd__sdev_numeric_error(s, "the gradient norm", res.grad_norm);
    if (s->o.clip_grad_norm > 0 && res.grad_norm > s->o.clip_grad_norm)
        PD_TRY(pd__cuda_scale(d->c, d->grads, s->ptotal, (float)(s->o.clip_grad_norm / (res.grad_norm + 1e-6))));
    res.lr = pd__lr_at(&s->o, s->step + 1);
    PD_TRY(pd__cuda_optim_step(d->c, &s->o, s->step + 1, res.lr, d->params, d->grads, d->state0, d->state1,
                               s->ptotal));
    PD_TRY(pd__cuda_sync(d->c));
    s->step++;
    if (r) *r = res;
    return PD_OK;
}

pd_status pd__sdev_eval(pd_session *s, int64_t rows, pd_step_result *r) {
    pd_step_result res;
    memset(&res, 0, sizeof res);
    PD_TRY(pd__cuda_bind(s->dev->c));
    s->x.training = false;
    PD_TRY(pd__sdev_forward(s, NULL));
    PD_TRY(pd__sdev_loss(s, false, rows, &res));
    if (r) *r = res;
    return PD_OK;
}

pd_status pd__sdev_timed_step(pd_session *s, pd__step_times *t) {
    pd__sdev *d = s->dev;
    pd_step_result res;
    memset(&res, 0, sizeof res);
    PD_TRY(pd__sdev_begin(s));
    PD_TRY(pd__sdev_forward(s, t->fwd_ms));
    PD_TRY(pd__cuda_memset0(d->c, d->grads, sizeof(float) * (size_t)s->ptotal));
    const pd__tensor *pt = &s->g->tensors[s->pred]; /* the other activation gradients: pd__sdev_backward */
    if (d->gviews[s->pred].data)
        PD_TRY(pd__cuda_memset0(d->c, d->gviews[s->pred].data, (size_t)pt->numel * pd_dtype_size(pt->dtype)));
    PD_TRY(pd__cuda_timer_start(d->c));
    PD_TRY(pd__sdev_loss(s, true, INT64_MAX, &res));
    PD_TRY(pd__cuda_timer_stop(d->c, &t->loss_ms));
    if (!isfinite(res.loss)) return pd__sdev_numeric_error(s, "the loss", res.loss);
    return pd__sdev_backward(s, t->bwd_in_ms, t->bwd_w_ms);
}

/* ---- device twins of activation contexts: the pipeline's GPU stages (session.h) ---- */

struct pd__dactx {
    pd__cuda_ctx *c;
    pd__actx *h;                /* the host context: its layout, zeroing lists, and the CPU fallback's memory */
    void *act, *gact;           /* device twins of h->act, h->gact */
    void *consts;               /* the initializers and constants it reads (NULL: the base's) */
    pd_tensor *views, *gviews;  /* per graph tensor: its device data (NULL: none, or a parameter not bound yet) */
    pd_tensor **args, **gargs;  /* the session's argument tables over views, gviews */
    bool *cpu;                  /* per node: runs on the CPU (pd__cuda_supports_op false); the base's when shared */
    const pd__dactx *base;
    void *labels;               /* a microbatch's labels on the device (cross-entropy), labels_cap bytes */
    size_t labels_cap;
};

void pd__dactx_destroy(pd__dactx *d) {
    if (!d) return;
    if (d->c) {
        pd__cuda_free(d->c, d->act);
        pd__cuda_free(d->c, d->gact);
        pd__cuda_free(d->c, d->consts);
        pd__cuda_free(d->c, d->labels);
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

pd_status pd__dactx_create(const pd_session *s, struct pd__cuda_ctx *c, pd__actx *h, const bool *need,
                           const pd__dactx *base, pd__dactx **out) {
    const pd_graph *g = s->g;
    size_t pbytes = sizeof(float) * (size_t)s->ptotal;
    pd__dactx *d = PD_CALLOC(1, sizeof *d);
    if (!d) return pd__err(PD_ERR_NOMEM, "out of memory");
    d->c = c;
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
            cbytes += pd__align64(pd__tb(&g->tensors[t]));
    }
    if (st == PD_OK) st = pd__cuda_alloc(c, h->abytes, &d->act);
    if (st == PD_OK) st = pd__cuda_memset0(c, d->act, h->abytes);
    if (st == PD_OK) st = pd__cuda_alloc(c, h->gbytes, &d->gact);
    if (st == PD_OK) st = pd__cuda_memset0(c, d->gact, h->gbytes);
    if (st == PD_OK && !base) st = pd__cuda_alloc(c, cbytes, &d->consts);
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
                st = pd__cuda_upload(c, d->views[t].data, hp, pd__tb(&g->tensors[t]));
                co += pd__align64(pd__tb(&g->tensors[t]));
            }
        }
        if (gp && pd__within(gp, h->gact, h->gbytes))
            d->gviews[t].data = (char *)d->gact + (gp - (const char *)h->gact);
    }
    for (int k = 0; k < nargs && st == PD_OK; k++) {
        d->args[k] = h->args[k] ? d->views + (h->args[k] - h->views) : NULL;
        d->gargs[k] = h->gargs[k] ? d->gviews + (h->gargs[k] - h->gviews) : NULL;
    }
    for (int i = 0; i < g->nnodes && st == PD_OK && !base; i++) d->cpu[i] = !pd__cuda_supports_op(g, &g->nodes[i]);
    if (st != PD_OK) {
        pd__dactx_destroy(d);
        return st;
    }
    *out = d;
    return PD_OK;
}

pd_tensor *pd__dactx_value(pd__dactx *d, int t) { return &d->views[t]; }
pd_tensor *pd__dactx_grad(pd__dactx *d, int t) { return &d->gviews[t]; }

pd_status pd__dactx_forward(const pd_session *s, pd__exec *x, pd__dactx *d, const int *nodes, int n) {
    const pd_graph *g = s->g;
    for (int k = 0; k < n; k++) {
        int i = nodes[k];
        const pd__node *nd = &g->nodes[i];
        pd_tensor **a = d->args + s->arg_start[i];
        if (d->cpu[i])
            PD_TRY(pd__dev_cpu_node(s, d->c, x, d->h->views, d->h->gviews, d->views, d->gviews,
                                    d->h->args + s->arg_start[i], d->h->gargs + s->arg_start[i], i, false, NULL));
        else PD_TRY(pd__cuda_run(d->c, x, g, nd, a, a + nd->nin));
    }
    return PD_OK;
}

/* pd__actx_backward (part -1) and pd__actx_backward_part (0: input
 * gradients, 1: weight gradients) on the device, with the same rules: which
 * nodes run, which gradients each is asked for, where each is zeroed. */
pd_status pd__dactx_backward(const pd_session *s, pd__exec *x, pd__dactx *d, const int *nodes, int n, int part) {
    const pd_graph *g = s->g;
    const pd__actx *h = d->h;
    pd_tensor *din[64], *hdin[64];
    for (int k = n - 1; k >= 0; k--) {
        int i = nodes[k];
        const pd__node *nd = &g->nodes[i];
        pd_tensor **a = d->args + s->arg_start[i], **ga = d->gargs + s->arg_start[i];
        pd_tensor **hga = h->gargs + s->arg_start[i];
        if (nd->nin > 64) return pd__node_err(g, nd, PD_ERR_UNSUPPORTED, "a backward of more than 64 inputs on CUDA");
        bool any_out = false, any = false;
        for (int j = 0; j < nd->nout; j++) any_out |= ga[j] != NULL;
        for (int j = 0; j < nd->nin; j++) {
            bool w = ga[nd->nout + j] && g->tensors[nd->in[j]].kind == PD_T_INIT;
            bool take = ga[nd->nout + j] && (part < 0 || w == (part == 1));
            din[j] = take ? ga[nd->nout + j] : NULL;
            hdin[j] = take ? hga[nd->nout + j] : NULL;
            any |= take;
        }
        if (part != 1 && pd__bwd_runs_of(nd, ga)) /* as pd__zplan_run, fresh ones too; the B pass zeroes for both */
            for (int q = h->zp.at[3 * i]; q < h->zp.at[3 * i + 2]; q++) {
                int t = h->zp.list[q];
                PD_TRY(pd__cuda_memset0(d->c, d->gviews[t].data, pd__tb(&g->tensors[t])));
            }
        if (!any_out || !any) continue;
        if (d->cpu[i])
            PD_TRY(pd__dev_cpu_node(s, d->c, x, h->views, h->gviews, d->views, d->gviews, h->args + s->arg_start[i],
                                    h->gargs + s->arg_start[i], i, true, hdin));
        else PD_TRY(pd__cuda_run_bwd(d->c, x, g, nd, a, a + nd->nin, ga, din));
    }
    return PD_OK;
}

pd_status pd__dactx_loss(const pd_session *s, pd__dactx *d, const pd_tensor *labels, double scale, pd_step_result *r) {
    const pd_graph *g = s->g;
    pd_loss_kind k = s->o.loss;
    if (k == PD_LOSS_AUTO) k = labels->dtype == PD_INT64 ? PD_LOSS_CROSS_ENTROPY : PD_LOSS_MSE;
    pd_tensor *dp = &d->views[s->pred], *dd = &d->gviews[s->pred];
    if (k == PD_LOSS_CROSS_ENTROPY && labels->dtype == PD_INT64) { /* on the device; only the sums come back */
        size_t n = (size_t)pd_tensor_numel(labels) * sizeof(int64_t);
        if (n > d->labels_cap) {
            pd__cuda_free(d->c, d->labels);
            d->labels = NULL;
            d->labels_cap = 0;
            PD_TRY(pd__cuda_alloc(d->c, n, &d->labels));
            d->labels_cap = n;
        }
        PD_TRY(pd__cuda_upload(d->c, d->labels, labels->data, n));
        pd_tensor dl = *labels;
        dl.data = d->labels;
        r->correct = 0;
        r->count = 0;
        pd_status st =
            pd__cuda_loss_cross_entropy(d->c, dp, &dl, INT64_MAX, dd->data, &r->loss, &r->correct, &r->count);
        if (st != PD_OK) {
            pd__err_prefix("%s: output '%s'", g->path, g->tensors[s->pred].name);
            return st;
        }
        if (dd->data && scale != 1.0) PD_TRY(pd__cuda_scale(d->c, dd->data, pd_tensor_numel(dd), (float)scale));
        return PD_OK;
    }
    /* MSE and the model's own loss on the host: the prediction down, its gradient up */
    PD_TRY(pd__dev_down(d->c, g, d->h->views, d->views, s->pred));
    PD_TRY(pd__actx_loss(s, d->h, labels, scale, r));
    return pd__dev_up(d->c, g, d->h->gviews, d->gviews, s->pred);
}

bool pd__sdev_ready(const pd_session *s) { return s->dev && s->dev->ready; }
int pd__session_cpu_nodes(const pd_session *s) { return s->dev ? s->dev->ncpu : 0; }

#else /* no CUDA backend: pd_session_create refuses PD_DEVICE_CUDA, so s->dev is always NULL */

static pd_status pd__sdev_nocuda(void) { return pd__err(PD_ERR_UNSUPPORTED, "this build has no CUDA backend"); }
pd_status pd__sdev_create(pd_session *s) { (void)s; return pd__sdev_nocuda(); }
void pd__sdev_destroy(pd_session *s) { (void)s; }
pd_status pd__sdev_pull(const pd_session *s, bool grads) { (void)s, (void)grads; return pd__sdev_nocuda(); }
pd_status pd__sdev_push(pd_session *s) { (void)s; return pd__sdev_nocuda(); }
pd_status pd__sdev_input(pd_session *s, int t) { (void)s, (void)t; return pd__sdev_nocuda(); }
pd_status pd__sdev_labels(pd_session *s) { (void)s; return pd__sdev_nocuda(); }
pd_status pd__sdev_step(pd_session *s, pd_step_result *r) { (void)s, (void)r; return pd__sdev_nocuda(); }
pd_status pd__sdev_eval(pd_session *s, int64_t rows, pd_step_result *r) {
    (void)s, (void)rows, (void)r;
    return pd__sdev_nocuda();
}
pd_status pd__sdev_timed_step(pd_session *s, pd__step_times *t) { (void)s, (void)t; return pd__sdev_nocuda(); }
bool pd__sdev_ready(const pd_session *s) { (void)s; return false; }
int pd__session_cpu_nodes(const pd_session *s) { (void)s; return 0; }

/* the pipeline makes no GPU stage without the backend (pipeline_cuda.c), so no pd__dactx exists */
pd_status pd__dactx_create(const pd_session *s, struct pd__cuda_ctx *c, pd__actx *h, const bool *need,
                           const pd__dactx *base, pd__dactx **out) {
    (void)s, (void)c, (void)h, (void)need, (void)base, (void)out;
    return pd__sdev_nocuda();
}
void pd__dactx_destroy(pd__dactx *d) { (void)d; }
pd_tensor *pd__dactx_value(pd__dactx *d, int t) { (void)d, (void)t; return NULL; }
pd_tensor *pd__dactx_grad(pd__dactx *d, int t) { (void)d, (void)t; return NULL; }
pd_status pd__dactx_forward(const pd_session *s, pd__exec *x, pd__dactx *d, const int *nodes, int n) {
    (void)s, (void)x, (void)d, (void)nodes, (void)n;
    return pd__sdev_nocuda();
}
pd_status pd__dactx_backward(const pd_session *s, pd__exec *x, pd__dactx *d, const int *nodes, int n, int part) {
    (void)s, (void)x, (void)d, (void)nodes, (void)n, (void)part;
    return pd__sdev_nocuda();
}
pd_status pd__dactx_loss(const pd_session *s, pd__dactx *d, const pd_tensor *labels, double scale, pd_step_result *r) {
    (void)s, (void)d, (void)labels, (void)scale, (void)r;
    return pd__sdev_nocuda();
}

#endif
