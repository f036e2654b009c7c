/* profiler.c - pd_profile_measure: per-node forward, input-gradient (B) and
 * weight-gradient (W) times and sizes of a pd_graph, measured by running the
 * training session's own steps on the CPU backend.
 *
 * How it works: docs/INTERNALS.md, "runtime/profiler.c".
 */
#include "../core/plan.h"
#include "optim.h"
#include "session.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static int pd__dcmp(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* Median of v[0], v[stride], ... (n values); sorts a copy in tmp. */
static double pd__median(const double *v, int n, int stride, double *tmp) {
    for (int r = 0; r < n; r++) tmp[r] = v[(size_t)r * (size_t)stride];
    qsort(tmp, (size_t)n, sizeof *tmp, pd__dcmp);
    return n % 2 ? tmp[n / 2] : 0.5 * (tmp[n / 2 - 1] + tmp[n / 2]);
}

/* A tensor of the graph tensor's dtype and shape, filled as the header says. */
static pd_status pd__synthetic(const pd__tensor *t, pd_dtype dtype, int ndim, const int64_t *shape, pd_tensor *out) {
    memset(out, 0, sizeof *out);
    out->dtype = dtype;
    out->ndim = ndim;
    for (int d = 0; d < ndim; d++) out->shape[d] = shape[d];
    int64_t n = pd_tensor_numel(out);
    size_t es = pd_dtype_size(dtype);
    if (n < 0 || es == 0)
        return pd__err(PD_ERR_UNSUPPORTED, "input '%s': cannot make a %s tensor to profile with", t->name,
                       pd_dtype_name(dtype));
    out->data = PD_CALLOC((size_t)n + 1, es);
    if (!out->data) return pd__err(PD_ERR_NOMEM, "out of memory for input '%s'", t->name);
    if (dtype == PD_FLOAT || dtype == PD_DOUBLE || dtype == PD_FLOAT16 || dtype == PD_BFLOAT16)
        for (int64_t i = 0; i < n; i++)
            pd__set_f(dtype, out->data, i, (double)((uint64_t)(i + 1) * 2654435761u % 2048) / 1024.0 - 1.0);
    return PD_OK;
}

/* Feeds every graph input and the labels. */
static pd_status pd__feed(pd_session *s, const pd_graph *g, pd_loss_kind loss) {
    int lab = pd__session_labels_input(s);
    pd_tensor t;
    for (int i = 0; i < g->ninputs; i++) {
        const pd__tensor *x = &g->tensors[g->inputs[i]];
        if (g->inputs[i] == lab) continue;
        PD_TRY(pd__synthetic(x, x->dtype, x->ndim, x->shape, &t));
        pd_status st = pd_session_set_input(s, x->name, &t);
        PD_FREE(t.data);
        PD_TRY(st);
    }
    const pd__tensor *pred = &g->tensors[pd__session_loss_tensor(s)];
    bool ce = loss == PD_LOSS_CROSS_ENTROPY ||
              (loss == PD_LOSS_AUTO && pred->ndim >= 2 && pred->shape[pred->ndim - 1] >= 2);
    if (lab >= 0) {
        const pd__tensor *x = &g->tensors[lab];
        PD_TRY(pd__synthetic(x, x->dtype, x->ndim, x->shape, &t));
    } else if (ce && pred->ndim >= 1) {
        PD_TRY(pd__synthetic(pred, PD_INT64, pred->ndim - 1, pred->shape, &t));
    } else {
        PD_TRY(pd__synthetic(pred, pred->dtype, pred->ndim, pred->shape, &t));
        memset(t.data, 0, (size_t)pd_tensor_numel(&t) * pd_dtype_size(t.dtype));
    }
    pd_status st = pd_session_set_labels(s, &t);
    PD_FREE(t.data);
    return st;
}

/* Runs the steps; samples: 3 * repeats * nnodes times (fwd, bwd_in, bwd_w per
 * step) and repeats loss times. */
static pd_status pd__run_steps(pd_session *s, int nnodes, int warmup, int repeats, double *samples, double *loss) {
    for (int r = -warmup; r < repeats; r++) {
        int k = r < 0 ? 0 : r;
        double *base = samples + (size_t)3 * (size_t)k * (size_t)nnodes;
        pd__step_times t = {base, base + nnodes, base + 2 * nnodes, 0};
        PD_TRY(pd__session_timed_step(s, &t));
        loss[k] = t.loss_ms;
    }
    return PD_OK;
}

static pd_status pd__build(const pd_graph *g, pd_session *s, const pd_profile_options *o, const double *samples,
                           const double *loss, pd_profile **out) {
    int nn = g->nnodes, R = o->repeats;
    pd_profile *p = NULL;
    double *tmp = PD_MALLOC(sizeof(double) * ((size_t)R + 1));
    bool *is_param = PD_CALLOC((size_t)g->ntensors + 1, sizeof(bool));
    bool *counted = PD_CALLOC((size_t)g->ntensors + 1, sizeof(bool));
    pd_status st = tmp && is_param && counted ? pd__profile_new(nn, &p) : pd__err(PD_ERR_NOMEM, "out of memory");
    if (st != PD_OK) goto done;
    for (int i = 0; i < pd_session_num_params(s); i++) {
        const char *name;
        if (pd_session_param(s, i, &name, NULL, NULL) != PD_OK) continue;
        int t = pd__graph_find(g, name);
        if (t >= 0) is_param[t] = true;
    }
    const pd__tensor *lt = &g->tensors[pd__session_loss_tensor(s)];
    double loss_ms = pd__median(loss, R, 1, tmp);
    int slabs = pd__optim_state_slabs(o->optimizer);
    for (int i = 0; i < nn && st == PD_OK; i++) {
        const pd__node *n = &g->nodes[i];
        pd__pnode *d = &p->node[i];
        d->name = pd__strdup(n->name);
        d->desc = pd__strdup(n->op_type);
        if (!d->name || !d->desc) {
            st = pd__err(PD_ERR_NOMEM, "out of memory");
            break;
        }
        d->fwd_ms = pd__median(samples + i, R, 3 * nn, tmp) + (lt->producer == i ? loss_ms : 0);
        d->bwd_in_ms = pd__median(samples + nn + i, R, 3 * nn, tmp);
        d->bwd_w_ms = pd__median(samples + 2 * nn + i, R, 3 * nn, tmp);
        for (int j = 0; j < n->nout; j++)
            if (n->out[j] >= 0) {
                const pd__tensor *t = &g->tensors[n->out[j]];
                d->act_bytes += (double)t->numel * (double)pd_dtype_size(t->dtype);
            }
        for (int j = 0; j < n->nin; j++) {
            int t = n->in[j];
            if (t < 0) continue;
            if (is_param[t] && !counted[t]) {
                counted[t] = true;
                d->param_bytes += (double)g->tensors[t].numel * (double)pd_dtype_size(g->tensors[t].dtype);
            }
            int from = g->tensors[t].producer;
            if (from >= 0 && from != i && st == PD_OK) st = pd__profile_add_edge(p, from, i);
        }
        d->optim_bytes = slabs * d->param_bytes;
    }
    if (st != PD_OK) goto done;
    const pd__tensor *x0 = g->ninputs > 0 ? &g->tensors[g->inputs[0]] : NULL;
    p->batch = x0 && x0->ndim > 0 ? x0->shape[0] : 0;
    p->model = pd__strdup(g->path);
    p->device = pd__strdup(o->device ? o->device : "cpu");
    st = p->model && p->device ? pd__profile_finish(p, g->path) : pd__err(PD_ERR_NOMEM, "out of memory");
done:
    PD_FREE(tmp);
    PD_FREE(is_param);
    PD_FREE(counted);
    if (st == PD_OK) *out = p;
    else pd_profile_destroy(p);
    return st;
}

/* ---- a lazily loaded graph: measured in pieces -----------------------------
 * With lazy_weights a process that will hold one stage plans without holding
 * the whole model: the nodes are cut, in order, into PD__PIECES pieces of
 * about equal parameter bytes, and each piece is measured by a session that
 * reads and trains that piece's parameters only. The other parameters read
 * as zeros from one read-only mapping of zero pages (resident nowhere), so
 * every node still runs at its real shapes; only the piece's gradients and
 * weights are ever resident. A node's forward and weight-gradient times come
 * from its piece's round; its input-gradient time from there, or, for nodes
 * ahead of their piece's first parameter (whose input gradients that round
 * does not need), from the round before. */
#define PD__PIECES 4

typedef struct pd__pieces {
    bool *isp, *mask, *was_deferred; /* per tensor */
    int *ppiece, *npiece;            /* per tensor (its first reader's piece), per node */
    const float *zero;
    size_t zbytes;
} pd__pieces;

static pd_status pd__pieces_cut(pd_graph *g, const pd_train_options *to, pd__pieces *P) {
    pd_session *s;
    PD_TRY(pd__session_create_ex(g, to, true, &s)); /* sparse, nothing read: which tensors are parameters */
    double total = 0, seen = 0;
    for (int i = 0; i < pd_session_num_params(s); i++) {
        const char *name;
        int t = pd_session_param(s, i, &name, NULL, NULL) == PD_OK ? pd__graph_find(g, name) : -1;
        if (t < 0) continue;
        P->isp[t] = true;
        total += (double)g->tensors[t].numel;
        P->zbytes = sizeof(float) * (size_t)g->tensors[t].numel > P->zbytes ? sizeof(float) * (size_t)g->tensors[t].numel : P->zbytes;
    }
    pd_session_destroy(s);
    for (int t = 0; t < g->ntensors; t++) P->ppiece[t] = -1, P->was_deferred[t] = pd__deferred(&g->tensors[t]);
    for (int i = 0; i < g->nnodes; i++) {
        int piece = total > 0 ? (int)(seen * PD__PIECES / total) : 0;
        P->npiece[i] = piece < PD__PIECES ? piece : PD__PIECES - 1;
        const pd__node *n = &g->nodes[i];
        for (int j = 0; j < n->nin; j++) {
            int t = n->in[j];
            if (t < 0 || !P->isp[t] || P->ppiece[t] >= 0) continue;
            P->ppiece[t] = P->npiece[i];
            seen += (double)g->tensors[t].numel;
        }
    }
    void *z = mmap(NULL, P->zbytes ? P->zbytes : 64, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (z == MAP_FAILED) return pd__err(PD_ERR_NOMEM, "%s: out of memory profiling", g->path);
    P->zero = z;
    return PD_OK;
}

/* Round r: the piece's parameters trained, the other deferred ones zeros. */
static pd_status pd__piece_round(pd_graph *g, const pd_train_options *to, const pd_profile_options *o, pd__pieces *P,
                                 int r, double *samples, double *loss) {
    for (int t = 0; t < g->ntensors; t++) {
        P->mask[t] = P->isp[t] && P->ppiece[t] == r;
        if (P->was_deferred[t] && P->isp[t] && !P->mask[t]) {
            g->tensors[t].data = (void *)P->zero; /* read only: none of the round's parameters */
        }
    }
    pd_session *s = NULL;
    pd_status st = pd__session_create_only(g, to, true, P->mask, &s);
    for (int i = 0; st == PD_OK && i < pd_session_num_params(s); i++) st = pd__session_load_param(s, i);
    if (st == PD_OK) st = pd__feed(s, g, o->loss);
    if (st == PD_OK) st = pd__run_steps(s, g->nnodes, o->warmup, o->repeats, samples, loss);
    pd_session_destroy(s); /* the piece's weights come back to the graph: deferred again below */
    for (int t = 0; t < g->ntensors; t++) {
        pd__tensor *x = &g->tensors[t];
        if (!P->was_deferred[t] || !P->isp[t]) continue;
        if (x->data != (const void *)P->zero && !x->borrowed) PD_FREE(x->data);
        x->data = NULL;
        x->borrowed = false;
    }
    return st;
}

static pd_status pd__measure_pieces(pd_graph *g, const pd_train_options *to, const pd_profile_options *o,
                                    double *samples, double *loss) {
    int nt = g->ntensors, nn = g->nnodes, R = o->repeats;
    size_t ns = (size_t)3 * (size_t)R * (size_t)nn;
    pd__pieces P = {0};
    P.isp = PD_CALLOC((size_t)nt + 1, sizeof(bool));
    P.mask = PD_CALLOC((size_t)nt + 1, sizeof(bool));
    P.was_deferred = PD_CALLOC((size_t)nt + 1, sizeof(bool));
    P.ppiece = PD_MALLOC(sizeof(int) * ((size_t)nt + 1));
    P.npiece = PD_MALLOC(sizeof(int) * ((size_t)nn + 1));
    double *cur = PD_MALLOC(sizeof(double) * (ns + 1)), *prev = PD_CALLOC(ns + 1, sizeof(double));
    pd_status st = P.isp && P.mask && P.was_deferred && P.ppiece && P.npiece && cur && prev
                       ? pd__pieces_cut(g, to, &P)
                       : pd__err(PD_ERR_NOMEM, "%s: out of memory profiling", g->path);
    for (int r = 0; r < PD__PIECES && st == PD_OK; r++) {
        if ((st = pd__piece_round(g, to, o, &P, r, cur, loss)) != PD_OK) break;
        for (int i = 0; i < nn; i++) {
            if (P.npiece[i] != r) continue;
            double in = 0;
            for (int k = 0; k < R; k++) in += cur[(size_t)3 * k * nn + nn + i];
            for (int k = 0; k < R; k++) {
                size_t b = (size_t)3 * (size_t)k * (size_t)nn;
                samples[b + i] = cur[b + i];
                samples[b + nn + i] = in > 0 ? cur[b + nn + i] : prev[b + nn + i];
                samples[b + 2 * nn + i] = cur[b + 2 * nn + i];
            }
        }
        double *sw = prev;
        prev = cur, cur = sw;
    }
    if (P.zero) munmap((void *)P.zero, P.zbytes ? P.zbytes : 64);
    PD_FREE(P.isp), PD_FREE(P.mask), PD_FREE(P.was_deferred), PD_FREE(P.ppiece), PD_FREE(P.npiece);
    PD_FREE(cur), PD_FREE(prev);
    return st;
}

/* Whether the graph defers parameters (lazy_weights): measured in pieces. */
static bool pd__lazy_graph(const pd_graph *g) {
    for (int t = 0; t < g->ntensors; t++)
        if (pd__deferred(&g->tensors[t])) return true;
    return false;
}

static pd_status pd__profile_measure(pd_graph *g, const pd_profile_options *opt, pd_profile **out) {
    pd_profile_options o = PD_PROFILE_OPTIONS_INIT;
    PD_TRY(pd__opts_read(&o, opt, sizeof o, "pd_profile_measure: opt"));
    pd_train_options to = PD_TRAIN_OPTIONS_INIT;
    /* cpu, cuda or cuda:N; on CUDA the session times nodes with CUDA events */
    PD_TRY(pd_train_options_set_device(&to, o.device ? o.device : "cpu", NULL));
    if (o.warmup < 0 || o.repeats < 1 || o.threads < 0 || (unsigned)o.optimizer > PD_OPT_ADAMW ||
        (unsigned)o.loss > PD_LOSS_GRAPH)
        return pd__err(PD_ERR_INVALID, "profile options out of range (warmup >= 0, repeats >= 1, threads >= 0)");
    if (g->nnodes == 0) return pd__err(PD_ERR_INVALID, "%s: the model has no nodes to profile", g->path);
    to.loss = o.loss;
    to.optimizer = o.optimizer;
    to.threads = o.threads;
    pd_session *s = NULL;
    bool pieces = pd__lazy_graph(g) && to.device == PD_DEVICE_CPU;
    if (pieces) to.device = PD_DEVICE_CPU;
    PD_TRY(pd__session_create_ex(g, &to, pieces, &s)); /* pieces: sparse, read by pd__measure_pieces */
    if (pieces) { /* measured without this session holding a weight; it gives pd__build the parameter list */
        pd_session_destroy(s);
        s = NULL;
    }
    /* what a training forward writes besides activations: the initializers the
     * session does not own (BatchNorm running statistics), kept to restore */
    int nt = g->ntensors, nn = g->nnodes;
    void **saved = PD_CALLOC((size_t)nt + 1, sizeof *saved);
    double *samples = PD_MALLOC(sizeof(double) * 3 * (size_t)nn * (size_t)o.repeats);
    double *loss = PD_MALLOC(sizeof(double) * (size_t)o.repeats);
    pd_status st = saved && samples && loss ? PD_OK : pd__err(PD_ERR_NOMEM, "%s: out of memory profiling", g->path);
    for (int t = 0; t < nt && st == PD_OK; t++) {
        pd__tensor *x = &g->tensors[t];
        if (x->kind != PD_T_INIT || !x->data || x->borrowed) continue;
        size_t bytes = (size_t)x->numel * pd_dtype_size(x->dtype);
        saved[t] = PD_MALLOC(bytes + 1);
        if (!saved[t]) st = pd__err(PD_ERR_NOMEM, "%s: out of memory profiling", g->path);
        else memcpy(saved[t], x->data, bytes);
    }
    if (st == PD_OK && pieces) st = pd__measure_pieces(g, &to, &o, samples, loss);
    if (st == PD_OK && pieces) st = pd__session_create_ex(g, &to, true, &s);
    if (st == PD_OK && !pieces) st = pd__feed(s, g, o.loss);
    if (st == PD_OK && !pieces) st = pd__run_steps(s, nn, o.warmup, o.repeats, samples, loss);
    if (st == PD_OK) st = pd__build(g, s, &o, samples, loss, out);
    pd_session_destroy(s);
    for (int t = 0; t < nt && saved; t++)
        if (saved[t]) {
            pd__tensor *x = &g->tensors[t];
            memcpy(x->data, saved[t], (size_t)x->numel * pd_dtype_size(x->dtype));
            PD_FREE(saved[t]);
        }
    PD_FREE(saved);
    PD_FREE(samples);
    PD_FREE(loss);
    return st;
}

/* A profile trains nothing: its sessions mark the parameters they take as
 * trained (what pd_graph_save lists in training_info), so the marks are put
 * back, or a pipeline planned from it under --freeze would save its frozen
 * tensors as trained. */
pd_status pd_profile_measure(pd_graph *g, const pd_profile_options *opt, pd_profile **out) {
    if (!g || !out) return pd__err(PD_ERR_INVALID, "pd_profile_measure: graph and out must not be NULL");
    bool *was = PD_MALLOC((size_t)g->ntensors + 1);
    if (!was) return pd__err(PD_ERR_NOMEM, "%s: out of memory profiling", g->path);
    for (int t = 0; t < g->ntensors; t++) was[t] = g->tensors[t].trained;
    pd_status st = pd__profile_measure(g, opt, out);
    for (int t = 0; t < g->ntensors; t++) g->tensors[t].trained = was[t];
    PD_FREE(was);
    return st;
}
