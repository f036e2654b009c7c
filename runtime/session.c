/* session.c - training on one stage: forward with every activation kept,
 * the loss, reverse-mode autodiff over the graph, one optimizer update.
 * This file is its lifecycle (create, destroy, accessors); session_impl.h
 * lists the others. Which initializers train, the slabs, and the device
 * twins: docs/INTERNALS.md, "runtime/session.c".
 */
#include "session_impl.h"
#include "optim.h"
#ifdef PD_HAVE_CUDA
#include "cuda/cuda.h"
#endif

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>


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
    return pd__sdev_pull(s, false);
}

pd_status pd_session_param(pd_session *s, int i, const char **name, pd_tensor *value, pd_tensor *grad) {
    if (!s) return pd__err(PD_ERR_INVALID, "pd_session_param: session is NULL");
    if (i < 0 || i >= s->np)
        return pd__err(PD_ERR_INVALID, "pd_session_param: index %d out of range [0, %d)", i, s->np);
    PD_TRY(pd__sdev_pull(s, grad != NULL));
    const pd__tensor *t = &s->g->tensors[s->param[i]];
    if (name) *name = t->name;
    if (value) *value = pd__view(t);
    if (grad) {
        *grad = pd__view(t);
        grad->data = s->grads + s->poff[i];
    }
    return PD_OK;
}

static void pd__free_slab(const pd_session *s, float *p) {
    if (!p) return;
    if (s->sparse_bytes) munmap(p, s->sparse_bytes);
    else PD_FREE(p);
}

void pd_session_destroy(pd_session *s) {
    if (!s) return;
    if (s->dev.ready) (void)pd__sdev_pull(s, false); /* the graph gets the trained values (a device's) */
    pd__sdev_destroy(s);
    /* give the graph its own copies of the trained values back (one never
     * read stays deferred: lazy_weights) */
    for (int i = 0; s->moved && i < s->np; i++) {
        pd__tensor *t = &s->g->tensors[s->param[i]];
        if (!s->loaded[i]) {
            t->data = NULL;
            t->borrowed = false;
            continue;
        }
        size_t bytes = (size_t)t->numel * sizeof(float);
        void *d = PD_MALLOC(bytes ? bytes : 1);
        if (d) memcpy(d, t->data, bytes);
        t->data = d; /* on allocation failure the graph loses this tensor's data, not memory safety */
        t->borrowed = false;
    }
    PD_FREE(s->param);
    PD_FREE(s->loaded);
    PD_FREE(s->untrained);
    PD_FREE(s->frozen);
    PD_FREE(s->poff);
    pd__free_slab(s, s->params);
    pd__free_slab(s, s->grads);
    pd__free_slab(s, s->state0);
    pd__free_slab(s, s->state1);
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

void *pd__slab(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) return NULL;
    memset(p, 0, bytes ? bytes : 64);
    return p;
}

/* A sparse session's slab: anonymous pages straight from mmap (zero, and
 * never resident until touched: malloc's debugging fills, MALLOC_PERTURB_,
 * would touch them all), so the ranges of other processes' stages cost no
 * memory; pd__free_slab unmaps it. */
static void *pd__slab_sparse(size_t bytes, bool sparse) {
    if (!sparse) return pd__slab(bytes);
    void *p = mmap(NULL, bytes ? bytes : 64, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void pd__session_mark_loaded(pd_session *s, int i) { s->loaded[i] = true; }

pd_status pd__session_load_param(pd_session *s, int i) {
    if (s->loaded[i]) return PD_OK;
    pd__tensor *t = &s->g->tensors[s->param[i]];
    float *at = s->params + s->poff[i];
    size_t n = (size_t)t->numel;
    void *d = t->data;
    t->data = NULL; /* deferred again for the read */
    pd_status st = pd__tensor_read(t, at);
    t->data = d;
    if (st != PD_OK) return st;
    memset(s->grads + s->poff[i], 0, sizeof(float) * n);
    if (s->state0) memset(s->state0 + s->poff[i], 0, sizeof(float) * n);
    if (s->state1) memset(s->state1 + s->poff[i], 0, sizeof(float) * n);
    s->loaded[i] = true;
    return PD_OK;
}

/* The graph's deferred initializers that are not parameters (a BatchNorm's
 * statistics, a float constant that does not reach the loss) are read now. */
static pd_status pd__load_nonparams(pd_session *s) {
    pd_graph *g = s->g;
    for (int t = 0; t < g->ntensors; t++) {
        bool param = false;
        for (int i = 0; i < s->np && !param; i++) param = s->param[i] == t;
        if (!param) PD_TRY(pd__tensor_load(&g->tensors[t]));
    }
    return PD_OK;
}

/* Parameters move into the slab (a deferred one is read there, or, in a
 * sparse session, later); the graph borrows them back. */
static pd_status pd__move_params(pd_session *s, bool sparse) {
    pd_graph *g = s->g;
    for (int i = 0; i < s->np; i++) {
        pd__tensor *t = &g->tensors[s->param[i]];
        if (!pd__deferred(t)) {
            memcpy(s->params + s->poff[i], t->data, sizeof(float) * (size_t)t->numel);
            s->loaded[i] = true;
        } else if (!sparse) {
            PD_TRY(pd__tensor_read(t, s->params + s->poff[i]));
            s->loaded[i] = true;
        }
    }
    for (int i = 0; i < s->np; i++) {
        pd__tensor *t = &g->tensors[s->param[i]];
        PD_FREE(t->data);
        t->data = s->params + s->poff[i];
        t->borrowed = true;
    }
    s->moved = true;
    for (int i = 0; sparse && i < s->np; i++) /* gradients and state start at zero (a deferred one's when loaded) */
        if (s->loaded[i]) {
            size_t n = sizeof(float) * (size_t)g->tensors[s->param[i]].numel;
            memset(s->grads + s->poff[i], 0, n);
            if (s->state0) memset(s->state0 + s->poff[i], 0, n);
            if (s->state1) memset(s->state1 + s->poff[i], 0, n);
        }
    return PD_OK;
}

/* opt read into *o and checked; on CUDA, the module loaded and the device there. */
static pd_status pd__session_options_check(pd_train_options *o, const pd_train_options *opt) {
    PD_TRY(pd__opts_read(o, opt, sizeof *o, "pd_session_create: opt"));
    if (!(o->lr > 0) || !isfinite(o->lr)) return pd__err(PD_ERR_INVALID, "the learning rate must be > 0, not %g", o->lr);
    if (o->momentum < 0 || o->beta1 < 0 || o->beta1 >= 1 || o->beta2 < 0 || o->beta2 >= 1 || !(o->eps > 0) ||
        o->weight_decay < 0 || o->clip_grad_norm < 0 || o->warmup_steps < 0 || o->cosine_steps < 0 || o->min_lr < 0)
        return pd__err(PD_ERR_INVALID, "optimizer options out of range (momentum/betas in [0,1), eps > 0, the rest >= 0)");
    if ((unsigned)o->optimizer > PD_OPT_ADAMW) return pd__err(PD_ERR_INVALID, "unknown optimizer %d", (int)o->optimizer);
    if ((unsigned)o->device > PD_DEVICE_CUDA || (unsigned)o->precision > PD_PRECISION_BF16)
        return pd__err(PD_ERR_INVALID, "unknown device %d or precision %d", (int)o->device, (int)o->precision);
    if (o->device == PD_DEVICE_CUDA) {
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
        if (o->device_index < 0 || o->device_index >= n)
            return pd__err(PD_ERR_INVALID, "device cuda:%d: this machine has %d GPU%s (cuda:0..%d)", o->device_index,
                           n, n == 1 ? "" : "s", n - 1);
    }
    return PD_OK;
}

/* The views of every tensor into the slabs (activations in layout order,
 * parameters and their gradients at their offsets) and the nodes' argument
 * tables over them (gargs: output gradients first, then input gradients). */
static pd_status pd__session_views(pd_session *s) {
    pd_graph *g = s->g;
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
    if (!s->args || !s->gargs || !s->arg_start) return PD_ERR_NOMEM;
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
    return PD_OK;
}

pd_status pd_session_create(pd_graph *g, const pd_train_options *opt, pd_session **out) {
    return pd__session_create_full(g, opt, NULL, false, NULL, out);
}

pd_status pd__session_create_on(pd_graph *g, const pd_train_options *opt, const struct pd__dev_i *dev,
                                pd_session **out) {
    return pd__session_create_full(g, opt, dev, false, NULL, out);
}

pd_status pd__session_create_ex(pd_graph *g, const pd_train_options *opt, bool sparse, pd_session **out) {
    return pd__session_create_full(g, opt, NULL, sparse, NULL, out);
}

pd_status pd__session_create_only(pd_graph *g, const pd_train_options *opt, bool sparse, const bool *only,
                                  pd_session **out) {
    return pd__session_create_full(g, opt, NULL, sparse, only, out);
}

pd_status pd__session_create_full(pd_graph *g, const pd_train_options *opt, const struct pd__dev_i *dev, bool sparse,
                                  const bool *only, pd_session **out) {
    if (!g || !out) return pd__err(PD_ERR_INVALID, "pd_session_create: graph and out must not be NULL");
    pd_train_options o = PD_TRAIN_OPTIONS_INIT;
    PD_TRY(pd__session_options_check(&o, opt));
    for (int t = 0; t < g->ntensors; t++) {
        const pd__tensor *x = &g->tensors[t];
        if (x->borrowed)
            return pd__err(PD_ERR_INVALID, "%s: the graph is already being trained by another session", g->path);
        if (x->kind == PD_T_INIT && x->trained && !x->data && !pd__deferred(x)) /* after a trainer under MPI */
            return pd__err(PD_ERR_INVALID, "%s: initializer '%s' was trained by another process (per-stage loading): "
                           "its values are not in this process", g->path, x->name);
    }
    pd_session *s = PD_CALLOC(1, sizeof *s);
    if (!s) return pd__err(PD_ERR_NOMEM, "out of memory creating the session");
    s->g = g;
    s->o = o;
    s->only = only;
    s->x.g = g;
    s->x.threads = pd__threads_default(o.threads);
    pd_status st = pd__find_outputs(s);
    if (st == PD_OK) st = pd__choose_params(s);
    if (st == PD_OK) st = pd__load_nonparams(s);
    s->only = NULL; /* the caller's, read by pd__choose_params only */
    if (st != PD_OK) goto fail;
    if (o.device == PD_DEVICE_CUDA || dev) sparse = false;
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
    if (sparse) s->sparse_bytes = pbytes ? pbytes : 64;
    s->params = pd__slab_sparse(pbytes, sparse);
    s->grads = pd__slab_sparse(pbytes, sparse);
    int ns = pd__optim_state_slabs(o.optimizer);
    if (ns > 0) s->state0 = pd__slab_sparse(pbytes, sparse);
    if (ns > 1) s->state1 = pd__slab_sparse(pbytes, sparse);
    s->loaded = PD_CALLOC((size_t)s->np + 1, sizeof(bool));
    if (!s->params || !s->grads || (ns > 0 && !s->state0) || (ns > 1 && !s->state1) || !s->loaded) goto nomem;
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
    if ((st = pd__move_params(s, sparse)) != PD_OK) goto fail;
    if (pd__session_views(s) != PD_OK) goto nomem;
    if ((st = pd__plan_grads(s)) != PD_OK) goto fail;
    const pd__tensor *p = &g->tensors[s->pred];
    if (o.loss != PD_LOSS_GRAPH && p->dtype != PD_FLOAT) {
        st = pd__err(PD_ERR_SHAPE, "%s: output '%s' is %s; the losses need float32", g->path, p->name,
                     pd_dtype_name(p->dtype));
        goto fail;
    }
    if ((st = pd__sdev_create(s, dev)) != PD_OK) goto fail;
    *out = s;
    return PD_OK;
nomem:
    st = pd__err(PD_ERR_NOMEM, "%s: out of memory planning the training buffers", g->path);
fail:
    pd_session_destroy(s);
    return st;
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

