/* pipeline_devmem.c - the device side of the pipeline's device stages
 * (pipeline_devmem.h): a stage thread's device context, its packed weight,
 * gradient, optimizer-state and stash slabs, the device twins of its
 * activation contexts, and the links' message buffers ordered by events.
 * Written once against the device interface (runtime/device.h): the CUDA
 * module's table, the simulated device, or the CPU's plain copies and
 * loops. Nothing here waits on the host except where it says so. */
#include "pipeline_devmem.h"

#include "device.h"
#include "optim.h"
#ifdef PD_HAVE_CUDA
#include "cuda/cuda.h" /* pd__gpu_check's device count, and the NCCL transport's stream hooks */
#endif

#include <math.h>
#include <pthread.h>
#include <string.h>

typedef struct pd__gchunk {
    const int *params;
    const int64_t *pk;
    int np;
    int64_t packed;
    float *w, *g, *s0, *s1; /* live weights, gradients, optimizer state: packed */
    float **stash;          /* nstash packed versions */
    int nstash;
    const int *sp; /* tied weights it reads, an earlier stage's: their copy and gradients (pd__gpu_chunk) */
    const int64_t *spk;
    int nsp;
    int64_t spacked;
    float *sw, *sg;
    pd__actx *hslot; /* its host slot 0, whose buffers (BatchNorm statistics) pull and push copy */
    pd__dactx **slot;
} pd__gchunk;

struct pd__gpu {
    pd__dev dev; /* the stage's device: its interface and context (one stream) */
    int device, nchunks, nslots;
    pd__gchunk *ch;
    const pd_graph *g;
    const int *param; /* the session's: graph tensor of each parameter */
    const int64_t *poff;
    float *hparams, *hs0, *hs1; /* the session's host slabs */
    float *htmp;                /* pd__gpu_grad_add's host scratch (htmp_n floats), kept between steps */
    int64_t htmp_n;
};

void pd__gpu_destroy(pd__gpu *d) {
    if (!d) return;
    if (d->dev.c) (void)d->dev.i->bind(d->dev.c);
    for (int c = 0; d->ch && c < d->nchunks; c++) {
        pd__gchunk *C = &d->ch[c];
        for (int k = 0; C->slot && k < d->nslots; k++)
            pd__dactx_destroy(C->slot[k]);
        if (d->dev.c) {
            for (int k = 0; C->stash && k < C->nstash; k++)
                d->dev.i->free(d->dev.c, C->stash[k]);
            d->dev.i->free(d->dev.c, C->w);
            d->dev.i->free(d->dev.c, C->g);
            d->dev.i->free(d->dev.c, C->s0);
            d->dev.i->free(d->dev.c, C->s1);
            d->dev.i->free(d->dev.c, C->sw);
            d->dev.i->free(d->dev.c, C->sg);
        }
        PD_FREE(C->slot);
        PD_FREE(C->stash);
    }
    PD_FREE(d->ch);
    PD_FREE(d->htmp);
    if (d->dev.c && d->dev.i->close) d->dev.i->close(d->dev.c);
    PD_FREE(d);
}

#ifdef PD_HAVE_CUDA
pd_status pd__gpu_check(int device) {
    int n = pd__cuda_device_count();
    if (n == 0) return pd__err(PD_ERR_UNSUPPORTED, "device cuda: no CUDA GPU found (no device, or no driver)");
    if (device < 0 || device >= n)
        return pd__err(PD_ERR_INVALID, "device cuda:%d: this machine has %d GPU%s (cuda:0..%d)", device, n,
                       n == 1 ? "" : "s", n - 1);
    return PD_OK;
}
#else
pd_status pd__gpu_check(int device) {
    (void)device;
    return pd__err(PD_ERR_UNSUPPORTED, "device cuda: this build has no CUDA backend (meson setup -Dcuda=enabled)");
}
#endif

static pd_status pd__gzeros(const pd__dev *v, int64_t n, float **out) {
    PD_TRY(v->i->alloc(v->c, sizeof(float) * (size_t)n, (void **)out));
    return v->i->memset0(v->c, *out, sizeof(float) * (size_t)n);
}

/* The packed floats of chunk C between the host slab h (the session's
 * layout, offsets poff) and device memory dv; up or down (down waits). */
static pd_status pd__gpack(pd__gpu *d, const pd__gchunk *C, float *h, float *dv, bool up) {
    for (int j = 0; j < C->np; j++) {
        int i = C->params[j];
        size_t b = sizeof(float) * (size_t)d->g->tensors[d->param[i]].numel;
        if (up)
            PD_TRY(d->dev.i->upload(d->dev.c, dv + C->pk[j], h + d->poff[i], b));
        else
            PD_TRY(d->dev.i->download(d->dev.c, h + d->poff[i], dv + C->pk[j], b));
    }
    return PD_OK;
}

pd_status pd__gpu_create(pd_session *s, const pd_graph *g, const pd__slabs *sl, const pd__dev_i *di, int device,
                         pd_precision prec, int nchunks, const pd__gpu_chunk *ch, int nslots, pd__gpu **out) {
    pd__gpu *d = PD_CALLOC(1, sizeof *d);
    if (!d) return pd__err(PD_ERR_NOMEM, "out of memory");
    d->device = device;
    d->nchunks = nchunks;
    d->nslots = nslots;
    d->g = g;
    d->param = sl->param;
    d->poff = sl->poff;
    d->hparams = sl->params;
    d->hs0 = sl->state0;
    d->hs1 = sl->state1;
    d->ch = PD_CALLOC((size_t)nchunks, sizeof *d->ch);
    d->dev.i = di;
    pd_status st = d->ch ? di->open(device, prec, &d->dev.c) : pd__err(PD_ERR_NOMEM, "out of memory");
    if (st != PD_OK) goto fail;
    for (int c = 0; c < nchunks && st == PD_OK; c++) {
        pd__gchunk *C = &d->ch[c];
        const pd__gpu_chunk *in = &ch[c];
        C->params = in->params;
        C->pk = in->pk;
        C->np = in->np;
        C->packed = in->packed;
        C->nstash = in->nstash;
        C->sp = in->sp;
        C->spk = in->spk;
        C->nsp = in->nsp;
        C->spacked = in->spacked;
        C->hslot = in->slot[0];
        C->slot = PD_CALLOC((size_t)nslots, sizeof *C->slot);
        C->stash = PD_CALLOC((size_t)in->nstash + 1, sizeof *C->stash);
        if (!C->slot || !C->stash) {
            st = pd__err(PD_ERR_NOMEM, "out of memory");
            break;
        }
        int ns = pd__optim_state_slabs(pd__session_options(s)->optimizer);
        st = pd__gzeros(&d->dev, C->packed, &C->w);
        if (st == PD_OK) st = pd__gzeros(&d->dev, C->packed, &C->g);
        if (st == PD_OK && ns > 0) st = pd__gzeros(&d->dev, C->packed, &C->s0);
        if (st == PD_OK && ns > 1) st = pd__gzeros(&d->dev, C->packed, &C->s1);
        for (int k = 0; k < C->nstash && st == PD_OK; k++)
            st = pd__gzeros(&d->dev, C->packed, &C->stash[k]);
        if (st == PD_OK && C->nsp > 0) st = pd__gzeros(&d->dev, C->spacked, &C->sw);
        if (st == PD_OK && C->nsp > 0) st = pd__gzeros(&d->dev, C->spacked, &C->sg);
        if (st == PD_OK && C->nsp > 0) st = pd__gpu_shared_up(d, c); /* the owner's weights, as the host slab holds them */
        if (st == PD_OK) st = pd__gpack(d, C, d->hparams, C->w, true);
        if (st == PD_OK && C->s0) st = pd__gpack(d, C, d->hs0, C->s0, true);
        if (st == PD_OK && C->s1) st = pd__gpack(d, C, d->hs1, C->s1, true);
        for (int k = 0; k < nslots && st == PD_OK; k++)
            st = pd__dactx_create(s, &d->dev, in->slot[k], in->need, k ? C->slot[0] : NULL, &C->slot[k]);
    }
    if (st == PD_OK) st = d->dev.i->sync(d->dev.c);
    if (st != PD_OK) goto fail;
    *out = d;
    return PD_OK;
fail:
    pd__gpu_destroy(d);
    return st;
}

pd_status pd__gpu_bind(pd__gpu *d) { return d->dev.i->bind(d->dev.c); }

pd__dactx *pd__gpu_slot(pd__gpu *d, int c, int slot) { return d->ch[c].slot[slot]; }
#ifdef PD_HAVE_CUDA /* the NCCL transport's hooks: only a CUDA stage runs under it (pipeline_dev.c) */
void *pd__gpu_stream(pd__gpu *d) { return d->dev.i == &pd__dev_cuda ? pd__cuda_stream(d->dev.c) : NULL; }
void pd__gpu_set_pending(pd__gpu *d, bool (*pending)(void *arg), void *arg) {
    if (d->dev.i == &pd__dev_cuda) pd__cuda_set_pending(d->dev.c, pending, arg);
}
#else
void *pd__gpu_stream(pd__gpu *d) { return (void)d, NULL; }
void pd__gpu_set_pending(pd__gpu *d, bool (*pending)(void *arg), void *arg) { (void)d, (void)pending, (void)arg; }
#endif
void pd__gpu_grads(pd__gpu *d, int c, float **g, int64_t *n) {
    *g = d->ch[c].g;
    *n = d->ch[c].packed;
}
pd_status pd__gpu_copy(pd__gpu *d, void *dst, const void *src, size_t n) { return d->dev.i->copy(d->dev.c, dst, src, n); }

void pd__gpu_use(pd__gpu *d, int c, int slot, int h) {
    pd__gchunk *C = &d->ch[c];
    pd__dactx *x = C->slot[slot];
    float *base = h < 0 ? C->w : C->stash[h];
    for (int j = 0; j < C->np; j++) {
        int t = d->param[C->params[j]];
        pd__dactx_value(x, t)->data = base + C->pk[j];
        pd__dactx_grad(x, t)->data = C->g + C->pk[j];
    }
    for (int j = 0; j < C->nsp; j++) { /* tied weights: the copy (sync schedules alone: one version) */
        int t = d->param[C->sp[j]];
        pd__dactx_value(x, t)->data = C->sw + C->spk[j];
        pd__dactx_grad(x, t)->data = C->sg + C->spk[j];
    }
}

pd_status pd__gpu_download(pd__gpu *d, void *dst, const void *src, size_t n) {
    return d->dev.i->download(d->dev.c, dst, src, n);
}

pd_status pd__gpu_upload(pd__gpu *d, void *dst, const void *src, size_t n) {
    return d->dev.i->upload(d->dev.c, dst, src, n);
}

pd_status pd__gpu_stash(pd__gpu *d, int c, int h) {
    pd__gchunk *C = &d->ch[c];
    if (h < 0 || h >= C->nstash) return pd__err(PD_ERR_INTERNAL, "stash %d of %d", h, C->nstash);
    return d->dev.i->copy(d->dev.c, C->stash[h], C->w, sizeof(float) * (size_t)C->packed);
}

pd_status pd__gpu_sqnorm(pd__gpu *d, double *sq) {
    double sum = 0;
    for (int c = 0; c < d->nchunks; c++) {
        double n = 0;
        if (d->ch[c].packed > 0) PD_TRY(d->dev.i->sumsq(d->dev.c, d->ch[c].g, d->ch[c].packed, &n));
        sum += n;
    }
    *sq = sum;
    return PD_OK;
}

pd_status pd__gpu_nonfinite(pd__gpu *d, int *param, float *value) {
    *param = -1;
    for (int c = 0; c < d->nchunks && *param < 0; c++) {
        const pd__gchunk *C = &d->ch[c];
        float *h = PD_MALLOC(sizeof(float) * ((size_t)C->packed + 1));
        if (!h) return pd__err(PD_ERR_NOMEM, "out of memory");
        pd_status st = d->dev.i->download(d->dev.c, h, C->g, sizeof(float) * (size_t)C->packed);
        for (int j = 0; j < C->np && st == PD_OK && *param < 0; j++) {
            int64_t n = j + 1 < C->np ? C->pk[j + 1] - C->pk[j] : C->packed - C->pk[j];
            for (int64_t e = 0; e < n && *param < 0; e++)
                if (!isfinite(h[C->pk[j] + e])) *param = C->params[j], *value = h[C->pk[j] + e];
        }
        PD_FREE(h);
        PD_TRY(st);
    }
    return PD_OK;
}

pd_status pd__gpu_scale(pd__gpu *d, float f) {
    for (int c = 0; c < d->nchunks; c++)
        if (d->ch[c].packed > 0) PD_TRY(d->dev.i->scale(d->dev.c, d->ch[c].g, d->ch[c].packed, f));
    return PD_OK;
}

pd_status pd__gpu_update(pd__gpu *d, const pd_train_options *o, int64_t t, double lr) {
    for (int c = 0; c < d->nchunks; c++) {
        pd__gchunk *C = &d->ch[c];
        if (C->packed == 0) continue;
        /* element-wise, so the packed range is one call: the session's update of the same floats */
        PD_TRY(d->dev.i->optim_step(d->dev.c, o, t, lr, C->w, C->g, C->s0, C->s1, C->packed));
        PD_TRY(d->dev.i->memset0(d->dev.c, C->g, sizeof(float) * (size_t)C->packed));
    }
    return PD_OK;
}

pd_status pd__gpu_zero_grads(pd__gpu *d) {
    PD_TRY(d->dev.i->bind(d->dev.c));
    for (int c = 0; c < d->nchunks; c++) {
        PD_TRY(d->dev.i->memset0(d->dev.c, d->ch[c].g, sizeof(float) * (size_t)d->ch[c].packed));
        if (d->ch[c].sg) PD_TRY(d->dev.i->memset0(d->dev.c, d->ch[c].sg, sizeof(float) * (size_t)d->ch[c].spacked));
    }
    return d->dev.i->sync(d->dev.c);
}

pd_status pd__gpu_shared_grads(pd__gpu *d, int c, float *host) {
    pd__gchunk *C = &d->ch[c];
    if (C->nsp == 0) return PD_OK;
    PD_TRY(d->dev.i->download(d->dev.c, host, C->sg, sizeof(float) * (size_t)C->spacked));
    PD_TRY(d->dev.i->memset0(d->dev.c, C->sg, sizeof(float) * (size_t)C->spacked));
    return d->dev.i->sync(d->dev.c);
}

/* j of chunk C's own parameter i, or -1 */
static int pd__gown(const pd__gchunk *C, int i) {
    for (int j = 0; j < C->np; j++)
        if (C->params[j] == i) return j;
    return -1;
}

pd_status pd__gpu_grad_add(pd__gpu *d, int c, int i, const float *add) {
    pd__gchunk *C = &d->ch[c];
    int j = pd__gown(C, i);
    if (j < 0) return pd__err(PD_ERR_INTERNAL, "tied weights: the chunk does not own parameter %d", i);
    int64_t n = d->g->tensors[d->param[i]].numel;
    if (n > d->htmp_n) {
        float *t = PD_REALLOC(d->htmp, sizeof(float) * (size_t)n);
        if (!t) return pd__err(PD_ERR_NOMEM, "out of memory for the tied gradients (%lld floats)", (long long)n);
        d->htmp = t;
        d->htmp_n = n;
    }
    float *tmp = d->htmp;
    PD_TRY(d->dev.i->download(d->dev.c, tmp, C->g + C->pk[j], sizeof(float) * (size_t)n));
    for (int64_t e = 0; e < n; e++) tmp[e] += add[e];
    PD_TRY(d->dev.i->upload(d->dev.c, C->g + C->pk[j], tmp, sizeof(float) * (size_t)n));
    return d->dev.i->sync(d->dev.c);
}

pd_status pd__gpu_grad_io(pd__gpu *d, int c, int i, float *host, bool up) {
    pd__gchunk *C = &d->ch[c];
    int j = pd__gown(C, i);
    if (j < 0) return pd__err(PD_ERR_INTERNAL, "tied weights: the chunk does not own parameter %d", i);
    size_t b = sizeof(float) * (size_t)d->g->tensors[d->param[i]].numel;
    if (up) return d->dev.i->upload(d->dev.c, C->g + C->pk[j], host, b);
    return d->dev.i->download(d->dev.c, host, C->g + C->pk[j], b);
}

pd_status pd__gpu_weight_down(pd__gpu *d, int c, int i) {
    pd__gchunk *C = &d->ch[c];
    int j = pd__gown(C, i);
    if (j < 0) return pd__err(PD_ERR_INTERNAL, "tied weights: the chunk does not own parameter %d", i);
    return d->dev.i->download(d->dev.c, d->hparams + d->poff[i], C->w + C->pk[j],
                             sizeof(float) * (size_t)d->g->tensors[d->param[i]].numel);
}

pd_status pd__gpu_shared_up(pd__gpu *d, int c) {
    pd__gchunk *C = &d->ch[c];
    for (int j = 0; j < C->nsp; j++)
        PD_TRY(d->dev.i->upload(d->dev.c, C->sw + C->spk[j], d->hparams + d->poff[C->sp[j]],
                               sizeof(float) * (size_t)d->g->tensors[d->param[C->sp[j]]].numel));
    return d->dev.i->sync(d->dev.c);
}

pd_status pd__gpu_sync(pd__gpu *d) { return d->dev.i->sync(d->dev.c); }

/* Chunk c's buffers bufs[0..nb) between its device twin of slot 0 and the
 * host slot 0 it mirrors; up or down (down waits). */
static pd_status pd__gbufs(pd__gpu *d, const pd__gchunk *C, const int *bufs, int nb, bool up) {
    for (int j = 0; j < nb; j++) {
        void *dv = pd__dactx_value(C->slot[0], bufs[j])->data, *h = pd__actx_value(C->hslot, bufs[j])->data;
        size_t b = (size_t)d->g->tensors[bufs[j]].numel * pd_dtype_size(d->g->tensors[bufs[j]].dtype);
        if (!dv || !h) continue;
        if (up) PD_TRY(d->dev.i->upload(d->dev.c, dv, h, b));
        else PD_TRY(d->dev.i->download(d->dev.c, h, dv, b));
    }
    return PD_OK;
}

pd_status pd__gpu_pull(pd__gpu *d, int c, const int *bufs, int nb, bool weights) {
    pd__gchunk *C = &d->ch[c];
    PD_TRY(d->dev.i->bind(d->dev.c));
    if (weights) {
        PD_TRY(pd__gpack(d, C, d->hparams, C->w, false));
        if (C->s0) PD_TRY(pd__gpack(d, C, d->hs0, C->s0, false));
        if (C->s1) PD_TRY(pd__gpack(d, C, d->hs1, C->s1, false));
    }
    return pd__gbufs(d, C, bufs, nb, false);
}

/* Stash h of chunk c (packed) between host memory and the device: a
 * snapshot's copy (down, waits), a resume's (up, queued). */
pd_status pd__gpu_pull_stash(pd__gpu *d, int c, int h, float *host) {
    pd__gchunk *C = &d->ch[c];
    if (h < 0 || h >= C->nstash) return pd__err(PD_ERR_INTERNAL, "stash %d of %d", h, C->nstash);
    PD_TRY(d->dev.i->bind(d->dev.c));
    return d->dev.i->download(d->dev.c, host, C->stash[h], sizeof(float) * (size_t)C->packed);
}

pd_status pd__gpu_push_stash(pd__gpu *d, int c, int h, const float *host) {
    pd__gchunk *C = &d->ch[c];
    if (h < 0 || h >= C->nstash) return pd__err(PD_ERR_INTERNAL, "stash %d of %d", h, C->nstash);
    PD_TRY(d->dev.i->bind(d->dev.c));
    return d->dev.i->upload(d->dev.c, C->stash[h], host, sizeof(float) * (size_t)C->packed);
}

/* pd__gpu_pull's inverse after a resume: the host slabs' live weights and
 * optimizer state, the tied weights' copies and the buffers into chunk c's
 * device memory (waits). */
pd_status pd__gpu_push(pd__gpu *d, int c, const int *bufs, int nb) {
    pd__gchunk *C = &d->ch[c];
    PD_TRY(d->dev.i->bind(d->dev.c));
    PD_TRY(pd__gpack(d, C, d->hparams, C->w, true));
    if (C->s0) PD_TRY(pd__gpack(d, C, d->hs0, C->s0, true));
    if (C->s1) PD_TRY(pd__gpack(d, C, d->hs1, C->s1, true));
    PD_TRY(pd__gpu_shared_up(d, c)); /* tied weights' copies: the owner's restored weights (syncs) */
    PD_TRY(pd__gbufs(d, C, bufs, nb, true));
    return d->dev.i->sync(d->dev.c);
}

/* After AvgPipe's elastic update: the host slab's live weights into chunk
 * c and the tied weights' copies (waits); its optimizer state on the device
 * is what the host holds already. */
pd_status pd__gpu_push_weights(pd__gpu *d, int c) {
    PD_TRY(d->dev.i->bind(d->dev.c));
    PD_TRY(pd__gpack(d, &d->ch[c], d->hparams, d->ch[c].w, true));
    return pd__gpu_shared_up(d, c); /* (syncs) */
}

/* ---- links ---- */

typedef struct pd__gbuf {
    void *p;            /* on the receiver's device */
    void *ready, *done; /* events: on the sender's device, on the receiver's */
    bool taken;
} pd__gbuf;

struct pd__glink {
    pthread_mutex_t mu;
    int n;
    pd__dev end[2][2]; /* per direction: the sender's device, the receiver's */
    size_t bytes[2];
    pd__gbuf *b[2];
};

void pd__glink_destroy(pd__glink *L) {
    if (!L) return;
    for (int dir = 0; dir < 2; dir++)
        for (int k = 0; L->b[dir] && k < L->n; k++) {
            const pd__dev *to = &L->end[dir][1];
            if (L->b[dir][k].p) to->i->free_shared(to->c, L->b[dir][k].p);
            if (L->b[dir][k].ready) L->end[dir][0].i->event_destroy(L->b[dir][k].ready);
            if (L->b[dir][k].done) to->i->event_destroy(L->b[dir][k].done);
        }
    PD_FREE(L->b[0]);
    PD_FREE(L->b[1]);
    pthread_mutex_destroy(&L->mu);
    PD_FREE(L);
}

pd_status pd__glink_create(const pd__gpu *lo, const pd__gpu *hi, size_t act_bytes, size_t grad_bytes, int n,
                           pd__glink **out) {
    pd__glink *L = PD_CALLOC(1, sizeof *L);
    if (!L) return pd__err(PD_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&L->mu, NULL);
    L->n = n;
    L->end[0][0] = lo->dev, L->end[0][1] = hi->dev;
    L->end[1][0] = hi->dev, L->end[1][1] = lo->dev;
    L->bytes[0] = act_bytes;
    L->bytes[1] = grad_bytes;
    L->b[0] = PD_CALLOC((size_t)n, sizeof(pd__gbuf));
    L->b[1] = PD_CALLOC((size_t)n, sizeof(pd__gbuf));
    pd_status st = L->b[0] && L->b[1] ? PD_OK : pd__err(PD_ERR_NOMEM, "out of memory");
    for (int dir = 0; dir < 2 && st == PD_OK; dir++)
        for (int k = 0; k < n && st == PD_OK; k++) {
            pd__gbuf *b = &L->b[dir][k];
            const pd__dev *from = &L->end[dir][0], *to = &L->end[dir][1];
            st = to->i->alloc_shared(to->c, L->bytes[dir], &b->p);
            if (st == PD_OK) st = from->i->event_create(from->c, &b->ready);
            if (st == PD_OK) st = to->i->event_create(to->c, &b->done);
        }
    if (st != PD_OK) {
        pd__glink_destroy(L);
        return st;
    }
    *out = L;
    return PD_OK;
}

void pd__glink_reset(pd__glink *L) {
    for (int dir = 0; dir < 2; dir++)
        for (int k = 0; k < L->n; k++)
            L->b[dir][k].taken = false;
}

static pd_status pd__gcheck(const pd__glink *L, int dir, int e, size_t off, size_t n) {
    if (dir < 0 || dir > 1 || e < 0 || e >= L->n || off + n > L->bytes[dir])
        return pd__err(PD_ERR_INTERNAL, "message buffer %d (direction %d): %zu bytes at %zu of %zu", e, dir, n, off,
                       dir >= 0 && dir <= 1 ? L->bytes[dir] : 0);
    return PD_OK;
}

pd_status pd__glink_send_begin(pd__glink *L, int dir, pd__gpu *from, int *e) {
    PD_TRY(pd__gcheck(L, dir, 0, 0, 0));
    pthread_mutex_lock(&L->mu);
    int k = 0;
    while (k < L->n && L->b[dir][k].taken)
        k++;
    if (k < L->n) L->b[dir][k].taken = true;
    pthread_mutex_unlock(&L->mu);
    if (k == L->n) return pd__err(PD_ERR_INTERNAL, "all %d message buffers of the link are taken", L->n);
    *e = k;
    /* the buffer's last reader (another stream, maybe another device) is done with it */
    return from->dev.i->event_wait(from->dev.c, L->b[dir][k].done);
}

pd_status pd__glink_put(pd__glink *L, int dir, pd__gpu *from, int e, size_t off, const void *src, size_t n) {
    PD_TRY(pd__gcheck(L, dir, e, off, n));
    return from->dev.i->copy_peer(from->dev.c, (char *)L->b[dir][e].p + off, L->end[dir][1].c, src, n);
}

pd_status pd__glink_send_end(pd__glink *L, int dir, pd__gpu *from, int e) {
    PD_TRY(pd__gcheck(L, dir, e, 0, 0));
    return from->dev.i->event_record(from->dev.c, L->b[dir][e].ready);
}

pd_status pd__glink_recv_begin(pd__glink *L, int dir, pd__gpu *to, int e) {
    PD_TRY(pd__gcheck(L, dir, e, 0, 0));
    return to->dev.i->event_wait(to->dev.c, L->b[dir][e].ready);
}

pd_status pd__glink_take(pd__glink *L, int dir, pd__gpu *to, int e, size_t off, void *dst, size_t n) {
    PD_TRY(pd__gcheck(L, dir, e, off, n));
    return to->dev.i->copy(to->dev.c, dst, (char *)L->b[dir][e].p + off, n);
}

pd_status pd__glink_recv_end(pd__glink *L, int dir, pd__gpu *to, int e) {
    PD_TRY(pd__gcheck(L, dir, e, 0, 0));
    pd_status st = to->dev.i->event_record(to->dev.c, L->b[dir][e].done);
    pthread_mutex_lock(&L->mu); /* free even on an error: the run stops, and pd__glink_reset follows */
    L->b[dir][e].taken = false;
    pthread_mutex_unlock(&L->mu);
    return st;
}
