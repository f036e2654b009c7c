/* profile.c - building and validating profiles (struct pd_profile, core/plan.h)
 * and the public accessors of pipedream.h.
 *
 * Loaders and the profiler fill a profile made by pd__profile_new, add edges,
 * then call pd__profile_finish: it checks the costs (finite, non-negative) and
 * the edges (in range, no self-loop), drops duplicate edges, and puts the nodes
 * in a topological order that keeps the given order wherever the DAG allows
 * (Kahn's algorithm, ties broken by the original index), so a profile already
 * in order is left as it is. Edges end up sorted by (producer, consumer).
 */
#include "plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Edge arrays hold room for pd__edge_cap(n_edges) edges: 16, then powers of two. */
static int pd__edge_cap(int n) {
    int c = 16;
    while (c < n) c *= 2;
    return c;
}

pd_status pd__profile_new(int n, pd_profile **out) {
    if (n < 0 || !out) return pd__err(PD_ERR_INVALID, "pd__profile_new: bad arguments (n = %d)", n);
    pd_profile *p = (pd_profile *)PD_CALLOC(1, sizeof *p);
    if (p) p->node = (pd__pnode *)PD_CALLOC((size_t)n + 1, sizeof *p->node);
    if (!p || !p->node) {
        PD_FREE(p);
        return pd__err(PD_ERR_NOMEM, "out of memory for a profile of %d nodes", n);
    }
    p->n = n;
    *out = p;
    return PD_OK;
}

pd_status pd__profile_add_edge(pd_profile *p, int a, int b) {
    if (a < 0 || a >= p->n || b < 0 || b >= p->n)
        return pd__err(PD_ERR_INVALID, "profile edge %d -> %d: node index out of range [0, %d)", a, b, p->n);
    if (!p->edge || p->n_edges == pd__edge_cap(p->n_edges)) {
        if (p->n_edges > INT32_MAX / 4) return pd__err(PD_ERR_NOMEM, "too many profile edges");
        int *e = (int *)PD_REALLOC(p->edge, sizeof(int) * 2 * (size_t)pd__edge_cap(p->n_edges + 1));
        if (!e) return pd__err(PD_ERR_NOMEM, "out of memory for profile edges");
        p->edge = e;
    }
    p->edge[2 * p->n_edges] = a;
    p->edge[2 * p->n_edges + 1] = b;
    p->n_edges++;
    return PD_OK;
}

static int pd__edge_cmp(const void *x, const void *y) {
    const int *a = (const int *)x, *b = (const int *)y;
    if (a[0] != b[0]) return a[0] < b[0] ? -1 : 1;
    return (a[1] > b[1]) - (a[1] < b[1]);
}

/* A binary min-heap of node indices (the ready set of Kahn's algorithm). */
static void pd__heap_push(int *h, int *len, int v) {
    int i = (*len)++;
    while (i > 0 && h[(i - 1) / 2] > v) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = v;
}

static int pd__heap_pop(int *h, int *len) {
    int top = h[0], v = h[--(*len)], i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= *len) break;
        if (c + 1 < *len && h[c + 1] < h[c]) c++;
        if (h[c] >= v) break;
        h[i] = h[c];
        i = c;
    }
    if (*len > 0) h[i] = v;
    return top;
}

static const char *pd__pname(const pd_profile *p, int i) { return p->node[i].name ? p->node[i].name : "?"; }

pd_status pd__profile_finish(pd_profile *p, const char *what) {
    if (!what) what = p->model ? p->model : "profile";
    for (int i = 0; i < p->n; i++) {
        const pd__pnode *d = &p->node[i];
        const char *field[] = {"fwd_ms",      "bwd_in_ms",      "bwd_w_ms",      "act_bytes",     "param_bytes",
                               "optim_bytes", "fwd_call_ms", "bwd_in_call_ms", "bwd_w_call_ms"};
        double v[] = {d->fwd_ms,      d->bwd_in_ms,   d->bwd_w_ms,       d->act_bytes,    d->param_bytes,
                      d->optim_bytes, d->fwd_call_ms, d->bwd_in_call_ms, d->bwd_w_call_ms};
        for (int k = 0; k < 9; k++)
            if (!isfinite(v[k]) || v[k] < 0)
                return pd__err(PD_ERR_INVALID, "%s: node '%s': %s is %g (costs must be finite and non-negative)", what,
                               pd__pname(p, i), field[k], v[k]);
        for (int k = 0; k < 3; k++) /* a call part is a part of its time */
            if (v[6 + k] > v[k])
                return pd__err(PD_ERR_INVALID, "%s: node '%s': %s %g exceeds %s %g", what, pd__pname(p, i),
                               field[6 + k], v[6 + k], field[k], v[k]);
    }
    for (int e = 0; e < p->n_edges; e++) {
        int a = p->edge[2 * e], b = p->edge[2 * e + 1];
        if (a < 0 || a >= p->n || b < 0 || b >= p->n)
            return pd__err(PD_ERR_INVALID, "%s: edge %d -> %d: node index out of range [0, %d)", what, a, b, p->n);
        if (a == b) return pd__err(PD_ERR_INVALID, "%s: cycle: node '%s' is its own input", what, pd__pname(p, a));
    }
    /* duplicate edges go */
    if (p->n_edges > 0) qsort(p->edge, (size_t)p->n_edges, 2 * sizeof(int), pd__edge_cmp); /* edge may be NULL */
    int ne = 0;
    for (int e = 0; e < p->n_edges; e++)
        if (ne == 0 || pd__edge_cmp(p->edge + 2 * e, p->edge + 2 * (ne - 1)) != 0) {
            p->edge[2 * ne] = p->edge[2 * e];
            p->edge[2 * ne + 1] = p->edge[2 * e + 1];
            ne++;
        }
    p->n_edges = ne;
    /* Kahn: successors in CSR (edges are sorted by producer), ready set a min-heap */
    size_t n1 = (size_t)p->n + 1;
    int *start = (int *)PD_CALLOC(n1, sizeof(int)), *indeg = (int *)PD_CALLOC(n1, sizeof(int));
    int *heap = (int *)PD_MALLOC(n1 * sizeof(int)), *order = (int *)PD_MALLOC(n1 * sizeof(int)), *pos = (int *)PD_MALLOC(n1 * sizeof(int));
    int *edge = (int *)PD_MALLOC(sizeof(int) * 2 * (size_t)pd__edge_cap(ne));
    pd__pnode *node = (pd__pnode *)PD_MALLOC(n1 * sizeof(pd__pnode));
    pd_status st = PD_OK;
    int hl = 0, k = 0;
    if (!start || !indeg || !heap || !order || !pos || !edge || !node) {
        st = pd__err(PD_ERR_NOMEM, "%s: out of memory sorting %d nodes", what, p->n);
        goto done;
    }
    for (int e = 0; e < ne; e++) {
        start[p->edge[2 * e] + 1]++;
        indeg[p->edge[2 * e + 1]]++;
    }
    for (int i = 0; i < p->n; i++) start[i + 1] += start[i];
    for (int i = 0; i < p->n; i++)
        if (indeg[i] == 0) pd__heap_push(heap, &hl, i);
    while (hl > 0) {
        int v = pd__heap_pop(heap, &hl);
        pos[v] = k;
        order[k++] = v;
        for (int e = start[v]; e < start[v + 1]; e++)
            if (--indeg[p->edge[2 * e + 1]] == 0) pd__heap_push(heap, &hl, p->edge[2 * e + 1]);
    }
    if (k < p->n) {
        /* the nodes left (indeg > 0) each have a predecessor left: walking back
         * n steps from one of them lands on a cycle */
        int *back = heap, v = 0;
        for (int e = 0; e < ne; e++)
            if (indeg[p->edge[2 * e]] > 0) back[p->edge[2 * e + 1]] = p->edge[2 * e];
        while (indeg[v] == 0) v++;
        for (int step = 0; step < p->n; step++) v = back[v];
        st = pd__err(PD_ERR_INVALID, "%s: the graph has a cycle through node '%s'", what, pd__pname(p, v));
        goto done;
    }
    for (int i = 0; i < p->n; i++) node[i] = p->node[order[i]];
    for (int e = 0; e < ne; e++) {
        edge[2 * e] = pos[p->edge[2 * e]];
        edge[2 * e + 1] = pos[p->edge[2 * e + 1]];
    }
    qsort(edge, (size_t)ne, 2 * sizeof(int), pd__edge_cmp);
    PD_FREE(p->node);
    PD_FREE(p->edge);
    p->node = node;
    p->edge = edge;
    node = NULL;
    edge = NULL;
done:
    PD_FREE(start);
    PD_FREE(indeg);
    PD_FREE(heap);
    PD_FREE(order);
    PD_FREE(pos);
    PD_FREE(edge);
    PD_FREE(node);
    return st;
}

void pd_profile_destroy(pd_profile *p) {
    if (!p) return;
    for (int i = 0; i < p->n; i++) {
        PD_FREE(p->node[i].name);
        PD_FREE(p->node[i].desc);
    }
    PD_FREE(p->node);
    PD_FREE(p->edge);
    PD_FREE(p->model);
    PD_FREE(p->device);
    PD_FREE(p);
}

int pd_profile_num_nodes(const pd_profile *p) { return p ? p->n : 0; }

pd_status pd_profile_node(const pd_profile *p, int i, pd_profile_node_info *out) {
    if (!p || !out || i < 0 || i >= p->n)
        return pd__err(PD_ERR_INVALID, "pd_profile_node: node index %d out of range", i);
    const pd__pnode *d = &p->node[i];
    out->name = d->name ? d->name : "";
    out->desc = d->desc ? d->desc : "";
    out->fwd_ms = d->fwd_ms;
    out->bwd_in_ms = d->bwd_in_ms;
    out->bwd_w_ms = d->bwd_w_ms;
    out->act_bytes = d->act_bytes;
    out->param_bytes = d->param_bytes;
    out->optim_bytes = d->optim_bytes;
    return PD_OK;
}

pd_status pd_profile_create(const pd_profile_node_info *nodes, int n_nodes, const int *edges, int n_edges,
                            int64_t batch, pd_profile **out) {
    if (!out) return pd__err(PD_ERR_INVALID, "pd_profile_create: NULL out");
    if (n_nodes < 1 || !nodes)
        return pd__err(PD_ERR_INVALID, "pd_profile_create: nodes: %s (need at least one node)",
                       nodes ? "n_nodes < 1" : "NULL");
    if (n_edges < 0 || (n_edges > 0 && !edges))
        return pd__err(PD_ERR_INVALID, "pd_profile_create: edges: %s", n_edges < 0 ? "n_edges < 0" : "NULL");
    if (batch < 0) return pd__err(PD_ERR_INVALID, "pd_profile_create: batch is negative (%lld)", (long long)batch);
    pd_profile *p = NULL;
    PD_TRY(pd__profile_new(n_nodes, &p));
    pd_status st = PD_OK;
    for (int i = 0; i < n_nodes && st == PD_OK; i++) {
        const pd_profile_node_info *d = &nodes[i];
        pd__pnode *q = &p->node[i];
        char nm[32];
        if (!d->name) snprintf(nm, sizeof nm, "node%d", i);
        q->name = pd__strdup(d->name ? d->name : nm);
        q->desc = pd__strdup(d->desc ? d->desc : "");
        if (!q->name || !q->desc) st = pd__err(PD_ERR_NOMEM, "pd_profile_create: out of memory");
        q->fwd_ms = d->fwd_ms;
        q->bwd_in_ms = d->bwd_in_ms;
        q->bwd_w_ms = d->bwd_w_ms;
        q->act_bytes = d->act_bytes;
        q->param_bytes = d->param_bytes;
        q->optim_bytes = d->optim_bytes;
    }
    for (int e = 0; e < n_edges && st == PD_OK; e++) {
        st = pd__profile_add_edge(p, edges[2 * e], edges[2 * e + 1]);
        if (st != PD_OK) pd__err_prefix("pd_profile_create: edges[%d]", e);
    }
    p->batch = batch;
    if (st == PD_OK) {
        st = pd__profile_finish(p, "pd_profile_create");
    }
    if (st != PD_OK) {
        pd_profile_destroy(p);
        return st;
    }
    *out = p;
    return PD_OK;
}

/* ---- scaling to a microbatch size --------------------------------------------------------- */

static double pd__scale(double t, double call, double ratio) { return call + (t - call) * ratio; }

void pd__pnode_at(const pd__pnode *d, double ratio, pd__pnode *out) {
    *out = *d;
    out->fwd_ms = pd__scale(d->fwd_ms, d->fwd_call_ms, ratio);
    out->bwd_in_ms = pd__scale(d->bwd_in_ms, d->bwd_in_call_ms, ratio);
    out->bwd_w_ms = pd__scale(d->bwd_w_ms, d->bwd_w_call_ms, ratio);
    out->act_bytes = d->act_bytes * ratio;
}

pd_status pd__profile_at(const pd_profile *p, int64_t b, pd_profile **out) {
    if (p->batch <= 0)
        return pd__err(PD_ERR_INVALID, "the profile does not say its batch, so its times cannot be scaled to %lld rows",
                       (long long)b);
    pd_profile *q = (pd_profile *)PD_MALLOC(sizeof *q);
    pd__pnode *node = (pd__pnode *)PD_MALLOC(sizeof(pd__pnode) * ((size_t)p->n + 1));
    if (!q || !node) {
        PD_FREE(q);
        PD_FREE(node);
        return pd__err(PD_ERR_NOMEM, "out of memory scaling a profile of %d nodes", p->n);
    }
    *q = *p;
    double ratio = (double)b / (double)p->batch;
    for (int v = 0; v < p->n; v++) pd__pnode_at(&p->node[v], ratio, &node[v]);
    q->node = node;
    q->batch = b;
    *out = q;
    return PD_OK;
}

void pd__profile_free_shallow(pd_profile *p) {
    if (!p) return;
    PD_FREE(p->node);
    PD_FREE(p);
}

/* The per-call part of a time t_B at batch B from the times t[k] at batches
 * b[k]: the least-squares line through (B, t_B), so the profile keeps its
 * measured time at B, clamped to [0, t_B] (a time that grows faster than the
 * rows has no call part; one that does not grow is all call). */
static double pd__fit_call(double tB, double B, const double *t, const double *b, int n) {
    double num = 0, den = 0;
    for (int k = 0; k < n; k++) {
        num += (b[k] - B) * (t[k] - tB);
        den += (b[k] - B) * (b[k] - B);
    }
    double slope = num / den, call = tB - (slope > 0 ? slope : 0) * B;
    return call < 0 ? 0 : call > tB ? tB : call;
}

static pd_status pd__fit_check(const pd_profile *p, const pd_profile *const *at, int n) {
    if (!p || !at || n < 1 || n > PD_MAX_FIT_BATCHES)
        return pd__err(PD_ERR_INVALID, "pd_profile_fit: %s",
                       !p ? "NULL profile" : !at ? "NULL at" : "n must be 1 to 8 (other batch sizes)");
    if (p->batch <= 0) return pd__err(PD_ERR_INVALID, "pd_profile_fit: the profile does not say its batch");
    for (int k = 0; k < n; k++) {
        const pd_profile *q = at[k];
        if (!q || q->batch <= 0 || q->batch == p->batch || q->n != p->n)
            return pd__err(PD_ERR_INVALID, "pd_profile_fit: at[%d]: %s", k,
                           !q                     ? "NULL"
                           : q->batch <= 0        ? "the profile does not say its batch"
                           : q->batch == p->batch ? "measured at the profile's own batch"
                                                  : "a different number of nodes");
        for (int v = 0; v < p->n; v++)
            if (strcmp(pd__pname(q, v), pd__pname(p, v)) != 0)
                return pd__err(PD_ERR_INVALID, "pd_profile_fit: at[%d]: node %d is '%s' where the profile has '%s'", k,
                               v, pd__pname(q, v), pd__pname(p, v));
    }
    return PD_OK;
}

pd_status pd_profile_fit(pd_profile *p, const pd_profile *const *at, int n) {
    PD_TRY(pd__fit_check(p, at, n));
    double b[PD_MAX_FIT_BATCHES], t[PD_MAX_FIT_BATCHES], B = (double)p->batch;
    for (int k = 0; k < n; k++) b[k] = (double)at[k]->batch;
    for (int v = 0; v < p->n; v++) {
        pd__pnode *d = &p->node[v];
        for (int k = 0; k < n; k++) t[k] = at[k]->node[v].fwd_ms;
        d->fwd_call_ms = pd__fit_call(d->fwd_ms, B, t, b, n);
        for (int k = 0; k < n; k++) t[k] = at[k]->node[v].bwd_in_ms;
        d->bwd_in_call_ms = pd__fit_call(d->bwd_in_ms, B, t, b, n);
        for (int k = 0; k < n; k++) t[k] = at[k]->node[v].bwd_w_ms;
        d->bwd_w_call_ms = pd__fit_call(d->bwd_w_ms, B, t, b, n);
    }
    p->n_fit = n;
    for (int k = 0; k < n; k++) p->fit_batch[k] = at[k]->batch;
    return PD_OK;
}

pd_status pd_profile_node_call(const pd_profile *p, int i, double out[3]) {
    if (!p || !out || i < 0 || i >= p->n)
        return pd__err(PD_ERR_INVALID, "pd_profile_node_call: node index %d out of range", i);
    out[0] = p->node[i].fwd_call_ms;
    out[1] = p->node[i].bwd_in_call_ms;
    out[2] = p->node[i].bwd_w_call_ms;
    return PD_OK;
}

bool pd__plan_has_call(const pd_plan *p) {
    for (int s = 0; s < p->n_stages; s++)
        if (p->stage[s].fwd_call_ms > 0 || p->stage[s].bwd_in_call_ms > 0 || p->stage[s].bwd_w_call_ms > 0) return true;
    return false;
}

void pd__plan_linear(pd_plan *p) {
    double ratio = p->profile_batch > 0 && p->microbatch_size > 0 ? (double)p->microbatch_size / p->profile_batch : 1;
    for (int s = 0; s < p->n_stages; s++) {
        pd__stage *st = &p->stage[s];
        st->fwd_ms -= st->fwd_call_ms * (1 - ratio);
        st->bwd_in_ms -= st->bwd_in_call_ms * (1 - ratio);
        st->bwd_w_ms -= st->bwd_w_call_ms * (1 - ratio);
        st->fwd_call_ms = st->bwd_in_call_ms = st->bwd_w_call_ms = 0;
    }
}
