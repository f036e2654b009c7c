/* pipeline_queue.c - the pipeline's transport within the process: bounded
 * queues between neighbouring stages (one mutex and condition for the whole
 * pipeline), the in-process pd__transport over them, the barriers, the
 * failure that wakes every thread, and SEND/RECV (pack a link's tensors into
 * a message; in process the receiver's views read the message itself). */
#include "pipeline_impl.h"

/* ---- queues: one mutex and condition for the whole pipeline; abort wakes all */

static bool pd__q_push(pd__pipe *p, pd__queue *q, pd__msg m) {
    pthread_mutex_lock(&p->mu);
    while (q->n == q->cap && !p->abort) pthread_cond_wait(&p->cv, &p->mu);
    bool ok = !p->abort;
    if (ok) {
        q->ring[(q->head + q->n) % q->cap] = m;
        q->n++;
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    return ok;
}

/* Takes the message of microbatch mb (the oldest such; a link's messages come
 * in order from one sender, or from a replicated stage's replicas). */
static bool pd__q_pop(pd__pipe *p, pd__queue *q, int mb, pd__msg *m) {
    pthread_mutex_lock(&p->mu);
    int at = -1;
    for (;;) {
        for (int i = 0; i < q->n && at < 0; i++)
            if (q->ring[(q->head + i) % q->cap].mb == mb) at = i;
        if (at >= 0 || p->abort) break;
        pthread_cond_wait(&p->cv, &p->mu);
    }
    bool ok = !p->abort && at >= 0;
    if (ok) {
        *m = q->ring[(q->head + at) % q->cap];
        for (int i = at; i > 0; i--) q->ring[(q->head + i) % q->cap] = q->ring[(q->head + i - 1) % q->cap];
        q->head = (q->head + 1) % q->cap;
        q->n--;
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    return ok;
}

void pd__q_drain(pd__queue *q) {
    for (; q->n > 0; q->n--, q->head = (q->head + 1) % q->cap) PD_FREE(q->ring[q->head].buf);
    q->head = 0;
}

/* A message buffer of n bytes: a spent one of this queue, or a new one. */
static void *pd__q_buf(pd__pipe *p, pd__queue *q, size_t n) {
    void *b = NULL;
    pthread_mutex_lock(&p->mu);
    if (q->npool > 0) b = q->pool[--q->npool];
    pthread_mutex_unlock(&p->mu);
    return b ? b : PD_MALLOC(n ? n : 1);
}

static void pd__q_recycle(pd__pipe *p, pd__queue *q, void *b) {
    pthread_mutex_lock(&p->mu);
    if (q->pool && q->npool < q->cap + 2) {
        q->pool[q->npool++] = b;
        b = NULL;
    }
    pthread_mutex_unlock(&p->mu);
    PD_FREE(b);
}

void pd__q_free_pool(pd__queue *q) {
    while (q->npool > 0) PD_FREE(q->pool[--q->npool]);
    PD_FREE(q->pool);
    q->pool = NULL;
}

/* ---- the in-process transport (comm/transport.h) over the queues ---- */

static pd__queue *pd__lq(pd__transport *t, int l, int dir) {
    pd__pipe *p = ((pd__qx *)t)->p;
    return dir ? &p->link[l].bwd : &p->link[l].fwd;
}

static void *pd__lx_get(pd__transport *t, int l, int dir, size_t n) {
    return pd__q_buf(((pd__qx *)t)->p, pd__lq(t, l, dir), n);
}

static pd_status pd__lx_send(pd__transport *t, int from, int to, int l, int dir, int mb, void *buf, size_t n,
                             bool *stop) {
    (void)from, (void)to, (void)n;
    pd__msg m = {mb, buf};
    if (!pd__q_push(((pd__qx *)t)->p, pd__lq(t, l, dir), m)) { /* aborted: the stage that failed reports */
        PD_FREE(buf);
        *stop = true;
    }
    return PD_OK;
}

static pd_status pd__lx_recv(pd__transport *t, int from, int to, int l, int dir, int mb, size_t n, void **buf,
                             bool *stop) {
    (void)from, (void)to, (void)n;
    pd__msg m;
    if (!pd__q_pop(((pd__qx *)t)->p, pd__lq(t, l, dir), mb, &m)) {
        *stop = true;
        return PD_OK;
    }
    *buf = m.buf;
    return PD_OK;
}

static void pd__lx_put(pd__transport *t, int l, int dir, void *buf) { pd__q_recycle(((pd__qx *)t)->p, pd__lq(t, l, dir), buf); }

static pd_status pd__lx_allreduce(pd__transport *t, int g, void *data, int64_t n, bool f64) {
    (void)t, (void)g, (void)data, (void)n, (void)f64; /* one process: the sums are made in place (pd__do_allreduce) */
    return PD_OK;
}

static pd_status pd__lx_flush(pd__transport *t) {
    (void)t;
    return PD_OK;
}

static void pd__lx_destroy(pd__transport *t) { (void)t; }

const pd__transport_i pd__local_vt = {"in-process", pd__lx_get, pd__lx_send, pd__lx_recv, pd__lx_put,
                                             pd__lx_allreduce, pd__lx_flush, pd__lx_destroy, NULL, NULL, NULL};

/* n threads meet at barrier b; false when the pipeline was aborted. */
bool pd__meet(pd__pipe *p, pd__bar *b, int n) {
    pthread_mutex_lock(&p->mu);
    int gen = b->gen;
    if (++b->n == n) {
        b->n = 0;
        b->gen++;
        pthread_cond_broadcast(&p->cv);
    } else {
        while (b->gen == gen && !p->abort) pthread_cond_wait(&p->cv, &p->mu);
    }
    bool ok = !p->abort;
    pthread_mutex_unlock(&p->mu);
    return ok;
}

/* The replicas of worker w meet. */
bool pd__barrier(pd__pipe *p, int w) { return pd__meet(p, &p->bar[w], p->rep[w]); }

void pd__pipe_stop(pd__pipe *p, pd_status st, const char *msg) {
    pthread_mutex_lock(&p->mu);
    bool first = !p->abort, tell = first && p->running; /* after the run the caller's thread may be inside MPI */
    if (first) {
        p->abort = true;
        __atomic_store_n(&p->stopped, 1, __ATOMIC_RELEASE);
        p->err = st;
        snprintf(p->errmsg, sizeof p->errmsg, "%s", msg);
    }
    pthread_cond_broadcast(&p->cv);
    if (tell && p->remote && p->remote->vt->fail) p->remote->vt->fail(p->remote, p->errmsg);
    pthread_mutex_unlock(&p->mu);
}

/* The first error stops every stage. */
void pd__fail(pd__pipe *p, const pd__wk *W, const pd__instr *in, pd_status st) {
    pthread_mutex_lock(&p->mu);
    bool first = !p->abort;
    if (first) {
        char who[64];
        if (W->nrep > 1) snprintf(who, sizeof who, "stage %d (replica %d)", W->w, W->r);
        else snprintf(who, sizeof who, "stage %d", W->w);
        char chunk[32] = "";
        if (p->nchunks > 1) snprintf(chunk, sizeof chunk, " (chunk %d)", (int)in->chunk);
        p->abort = true;
        __atomic_store_n(&p->stopped, 1, __ATOMIC_RELEASE);
        p->err = st;
        snprintf(p->errmsg, sizeof p->errmsg, "%s, step %lld, %s of microbatch %d%s: %s", who,
                 (long long)(p->steps + in->mb / p->nmicro + 1), pd__op_name(in->op), (int)in->mb, chunk, pd_last_error());
    }
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    /* under MPI the other processes hear of it instead of waiting for ever */
    if (first && p->remote && p->remote->vt->fail) p->remote->vt->fail(p->remote, p->errmsg);
}


/* The replica of worker w that runs microbatch mb: i mod replicas for the
 * i-th microbatch of a minibatch; under pipedream (a minibatch is one
 * microbatch) mb mod replicas, PipeDream's round robin. */
int pd__replica_of(const pd__pipe *p, int w, int mb) {
    return (p->kind == PD_SCHED_PIPEDREAM ? mb : mb % p->nmicro) % p->rep[w];
}

/* The thread at the other end of link l for microbatch mb: the one that
 * receives what a send makes (grad: backward, to virtual stage l), or sends
 * what a receive takes (grad: from l+1). */
int pd__peer(const pd__pipe *p, int l, bool grad, bool sending, int mb) {
    int k = grad == sending ? l : l + 1, w = k % p->nworkers;
    return p->wbase[w] + pd__replica_of(p, w, mb);
}

pd__transport *pd__via(pd__pipe *p, const pd__wk *W, int peer) {
    return p->remote && p->rank_of[peer] != p->rank_of[W - p->wk] ? p->remote : &p->local.base;
}

/* The in-process message of direction dir (0: activations from link k-1,
 * 1: gradients from link k) that slot's views read, back to its queue's
 * pool; the views point at the context's own memory again. */
void pd__unhold(pd__pipe *p, pd__chunk *C, int slot, int dir) {
    void *b = C->held[2 * slot + dir];
    if (!b) return;
    pd__link *L = &p->link[dir ? C->k : C->k - 1];
    void **o = C->orig + (size_t)slot * (size_t)C->norig + (dir && C->k > 0 ? p->link[C->k - 1].nt : 0);
    pd__actx *c = C->slot[slot];
    for (int q = 0; !dir && q < L->nt; q++) pd__actx_value(c, L->t[q])->data = *o++;
    for (int q = 0; dir && q < L->ngt; q++) pd__actx_grad(c, L->gt[q])->data = *o++;
    for (int q = 0; dir && q < L->nbt; q++) pd__actx_value(c, L->bt[q])->data = *o++;
    C->held[2 * slot + dir] = NULL;
    pd__q_recycle(p, dir ? &L->bwd : &L->fwd, b);
}

/* After the B (W) and the SEND_GRAD of the microbatch in slot: nothing of it
 * reads its messages any more. */
void pd__slot_done(pd__pipe *p, pd__chunk *C, int slot) {
    if (C->slot_ver[slot] >= 0 || (C->k > 0 && !C->sent[slot])) return;
    pd__unhold(p, C, slot, 0);
    pd__unhold(p, C, slot, 1);
}

/* A CPU stage's message: the link's tensors of its host context packed
 * into the transport's buffer, sent to thread `to`. */
static pd_status pd__send_host(pd__wk *W, pd__chunk *C, int l, bool grad, int mb, int to, bool *stop) {
    pd__pipe *p = W->p;
    const pd__link *L = &p->link[l];
    pd__actx *c = C->slot[mb % p->nslots];
    pd__transport *t = pd__via(p, W, to);
    size_t n = grad ? L->grad_bytes : L->act_bytes, off = 0;
    char *buf = t->vt->get(t, l, grad, n);
    if (!buf) return pd__err(PD_ERR_NOMEM, "out of memory for a %zu-byte message", n);
    for (int k = 0; k < (grad ? L->ngt + L->nbt : L->nt); k++) {
        int tt = grad ? (k < L->ngt ? L->gt[k] : L->bt[k - L->ngt]) : L->t[k];
        pd_tensor *v = grad && k < L->ngt ? pd__actx_grad(c, tt) : pd__actx_value(c, tt);
        memcpy(buf + off, v->data, pd__tbytes(p->g, tt));
        off += pd__tbytes(p->g, tt);
    }
    return t->vt->send(t, (int)(W - p->wk), to, l, grad, mb, buf, n, stop);
}

/* SEND: one message to the peer of link l with a context's activations
 * (grad false) or gradients (grad true), one function for both kinds of
 * stage: a CPU stage packs its host context into the transport's buffer
 * (pd__send_host), a GPU stage its device twin into a link buffer on the
 * receiver's device or NCCL's (pd__dev_send). */
pd_status pd__send(pd__wk *W, pd__chunk *C, int l, bool grad, int mb, bool *stop) {
    pd__pipe *p = W->p;
    int to = pd__peer(p, l, grad, true, mb);
    if (W->dev) PD_TRY(pd__gpu_bind(W->dev));
    if (!grad) PD_TRY(pd__rc_ensure(W, C, mb)); /* the values sent back (bipartition) are kept per slot */
    if (W->dev) PD_TRY(pd__dev_send(W, C, l, grad, mb, to, stop));
    else PD_TRY(pd__send_host(W, C, l, grad, mb, to, stop));
    if (grad) { /* the microbatch's last reader of its messages, unless its W is still to come */
        C->sent[mb % p->nslots] = true;
        pd__slot_done(p, C, mb % p->nslots);
    }
    return PD_OK;
}

/* Tensor k of a message at *off into a CPU stage's host context: handed
 * over (the view reads the buffer itself) or copied out. */
static void pd__host_take(pd__pipe *p, pd__chunk *C, const pd__link *L, bool grad, int slot, int k, char *buf,
                          bool hand, size_t *off) {
    int tt = grad ? (k < L->ngt ? L->gt[k] : L->bt[k - L->ngt]) : L->t[k];
    pd_tensor *v = grad && k < L->ngt ? pd__actx_grad(C->slot[slot], tt) : pd__actx_value(C->slot[slot], tt);
    if (hand) v->data = buf + *off;
    else memcpy(v->data, buf + *off, pd__tbytes(p->g, tt));
    *off += pd__tbytes(p->g, tt);
}

/* RECV: link l's message for microbatch mb into the chunk's slot, one
 * function for both kinds of stage. The message is the payload, except
 * between GPU stages of one process, where it is a ticket naming the link
 * buffer on this device that holds it (pd__dev_send). In process a CPU
 * stage's views read the buffer until the microbatch is done (held); a
 * GPU stage copies each tensor into its device twin (pd__dev_take) from
 * the link buffer or, across processes, from NCCL's or (without NCCL) the
 * MPI transport's host message. */
pd_status pd__recv(pd__wk *W, pd__chunk *C, int l, bool grad, int mb, bool *stop) {
    pd__pipe *p = W->p;
    const pd__link *L = &p->link[l];
    int from = pd__peer(p, l, grad, false, mb), slot = mb % p->nslots, e = -1;
    bool local = pd__via(p, W, from) == &p->local.base, ticket = W->dev && local, hand = local && !W->dev;
    pd__transport *t = W->dev && !local && p->dremote ? p->dremote : pd__via(p, W, from);
    size_t n = ticket ? sizeof(int32_t) : grad ? L->grad_bytes : L->act_bytes, off = 0;
    void *buf = NULL;
    if (W->dev) PD_TRY(pd__gpu_bind(W->dev)); /* NCCL's receive is queued on this stream */
    PD_TRY(t->vt->recv(t, from, (int)(W - p->wk), l, grad, mb, n, &buf, stop));
    if (*stop) return PD_OK;
    if (ticket) {
        memcpy(&e, buf, sizeof(int32_t));
        t->vt->put(t, l, grad, buf);
        buf = NULL;
        PD_TRY(pd__glink_recv_begin(p->glink[l], grad, W->dev, e));
    }
    if (hand) pd__unhold(p, C, slot, grad);
    pd_status st = PD_OK;
    for (int k = 0; k < (grad ? L->ngt + L->nbt : L->nt) && st == PD_OK; k++) {
        if (W->dev) st = pd__dev_take(W, C, l, grad, slot, k, e, buf, &off);
        else pd__host_take(p, C, L, grad, slot, k, buf, hand, &off);
    }
    if (hand) C->held[2 * slot + grad] = buf;
    else if (buf) t->vt->put(t, l, grad, buf); /* copied out (a GPU stage: reused once its queued copies ran) */
    if (ticket && st == PD_OK) st = pd__glink_recv_end(p->glink[l], grad, W->dev, e);
    return st;
}
