/* engine.c - the inference engine: plans memory once, then runs the graph's
 * nodes in order on a backend. The run loop allocates nothing.
 *
 * Every computed tensor and input gets a 64-byte-aligned slot in one slab;
 * constants and initializers are read where the graph holds them.
 */
#include "../core/pd_internal.h"
#include "session.h"

#include <limits.h>
#include <string.h>
#include <unistd.h>


struct pd_engine {
    pd_graph *g;
    const pd_backend_i *be;
    pd__exec x;
    void *slab;
    size_t slab_size;
    pd_tensor *views;   /* one per graph tensor */
    pd_tensor **args;   /* per node: nin input pointers then nout output pointers */
    int *arg_start;     /* per node: index into args */
};

typedef struct {
    int k;           /* the caller's index */
    int first, last; /* steps between which it is alive, inclusive */
    size_t size, off;
} pd__slot;

static int pd__slot_by_size(const void *a, const void *b) {
    const pd__slot *x = a, *y = b;
    if (x->size != y->size) return x->size < y->size ? 1 : -1;
    return x->k - y->k;
}

static int pd__slot_by_off(const void *a, const void *b) {
    const pd__slot *x = *(pd__slot *const *)a, *y = *(pd__slot *const *)b;
    return (x->off > y->off) - (x->off < y->off);
}

/* (first step, slot index) pairs: the rank order of the placed-slot tree. */
static int pd__pair_cmp(const void *a, const void *b) {
    const int *x = a, *y = b;
    if (x[0] != y[0]) return (x[0] > y[0]) - (x[0] < y[0]);
    return (x[1] > y[1]) - (x[1] < y[1]);
}

static int pd__int_cmp(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

pd_status pd__life_init(pd__life *l, int ntensors) {
    size_t m = (size_t)ntensors + 1;
    memset(l, 0, sizeof *l);
    l->id = PD_MALLOC(sizeof(int) * m), l->at = PD_MALLOC(sizeof(int) * m);
    l->first = PD_MALLOC(sizeof(int) * m), l->last = PD_MALLOC(sizeof(int) * m);
    l->size = PD_MALLOC(sizeof(size_t) * m), l->off = PD_MALLOC(sizeof(size_t) * m);
    if (!l->id || !l->at || !l->first || !l->last || !l->size || !l->off) {
        pd__life_free(l);
        return PD_ERR_NOMEM;
    }
    for (int t = 0; t < ntensors; t++) l->at[t] = -1;
    return PD_OK;
}

void pd__life_add(pd__life *l, int t, int first, int last, size_t bytes) {
    int k = l->n++;
    l->id[k] = t, l->at[t] = k, l->first[k] = first, l->last[k] = last, l->size[k] = bytes;
}

void pd__life_free(pd__life *l) {
    PD_FREE(l->id);
    PD_FREE(l->at);
    PD_FREE(l->first);
    PD_FREE(l->last);
    PD_FREE(l->size);
    PD_FREE(l->off);
    memset(l, 0, sizeof *l);
}

/* Offset blocks [a, b) of placed slots, sorted, disjoint, touching ones
 * merged: what a set of slots occupies, whatever their number. */
typedef struct {
    size_t *ab; /* 2n: a0 b0 a1 b1 ... */
    int n, cap;
} pd__blocks;

/* The first block ending after o (or at or after o when `touch`). */
static int pd__blocks_find(const pd__blocks *s, size_t o, bool touch) {
    int lo = 0, hi = s->n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (s->ab[2 * mid + 1] > o || (touch && s->ab[2 * mid + 1] == o)) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

/* The lowest o' >= o where [o', o' + size) meets no block. */
static size_t pd__blocks_next_free(const pd__blocks *s, size_t o, size_t size) {
    for (int i = pd__blocks_find(s, o, false); i < s->n && s->ab[2 * i] < o + size; i++) o = s->ab[2 * i + 1];
    return o;
}

static bool pd__blocks_add(pd__blocks *s, size_t a, size_t b) {
    int i = pd__blocks_find(s, a, true), j = i;
    while (j < s->n && s->ab[2 * j] <= b) j++; /* blocks i .. j-1 meet [a, b): merged into one */
    if (j > i) {
        a = s->ab[2 * i] < a ? s->ab[2 * i] : a;
        b = s->ab[2 * (j - 1) + 1] > b ? s->ab[2 * (j - 1) + 1] : b;
    }
    if (j == i && s->n == s->cap) {
        int nc = s->cap ? 2 * s->cap : 4;
        size_t *ab = PD_REALLOC(s->ab, sizeof(size_t) * 2 * (size_t)nc);
        if (!ab) return false;
        s->ab = ab, s->cap = nc;
    }
    memmove(s->ab + 2 * (i + 1), s->ab + 2 * j, sizeof(size_t) * 2 * (size_t)(s->n - j));
    s->n += 1 - (j - i);
    s->ab[2 * i] = a, s->ab[2 * i + 1] = b;
    return true;
}

/* A segment tree over the (compressed) steps. A placed slot alive over
 * steps [F, L] is in `own` of the O(log n) nodes that cover [F, L] and in
 * `sub` of those and their ancestors. The slots alive during [f, l] are
 * then `own` of the nodes the query only partly covers and `sub` of those
 * it covers whole: O(log n) block lists, whatever the number of slots. */
typedef struct {
    int leaves;
    pd__blocks *own, *sub; /* 2 * leaves each, node 1 the root */
    const pd__blocks **sets; /* a query's lists */
    int nsets;
} pd__ltree;

static bool pd__ltree_add(pd__ltree *t, int node, int lo, int hi, int F, int L, size_t a, size_t b) {
    if (L < lo || F >= hi) return true;
    if (!pd__blocks_add(&t->sub[node], a, b)) return false;
    if (F <= lo && hi - 1 <= L) return pd__blocks_add(&t->own[node], a, b);
    int mid = (lo + hi) / 2;
    return pd__ltree_add(t, 2 * node, lo, mid, F, L, a, b) && pd__ltree_add(t, 2 * node + 1, mid, hi, F, L, a, b);
}

static void pd__ltree_sets(pd__ltree *t, int node, int lo, int hi, int F, int L) {
    if (L < lo || F >= hi) return;
    if (F <= lo && hi - 1 <= L) {
        if (t->sub[node].n) t->sets[t->nsets++] = &t->sub[node];
        return;
    }
    if (t->own[node].n) t->sets[t->nsets++] = &t->own[node];
    int mid = (lo + hi) / 2;
    pd__ltree_sets(t, 2 * node, lo, mid, F, L);
    pd__ltree_sets(t, 2 * node + 1, mid, hi, F, L);
}

/* The lowest offset free in every list: each list moves o past its blocks
 * in the way, until none does (every offset skipped meets a block). */
static size_t pd__ltree_lowest(const pd__ltree *t, size_t size) {
    size_t o = 0;
    for (bool moved = true; moved;) {
        moved = false;
        for (int i = 0; i < t->nsets; i++) {
            size_t n = pd__blocks_next_free(t->sets[i], o, size);
            if (n != o) o = n, moved = true;
        }
    }
    return o;
}

static void pd__ltree_free(pd__ltree *t) {
    for (int i = 0; t->own && i < 2 * t->leaves; i++) PD_FREE(t->own[i].ab);
    for (int i = 0; t->sub && i < 2 * t->leaves; i++) PD_FREE(t->sub[i].ab);
    PD_FREE(t->own), PD_FREE(t->sub), PD_FREE(t->sets);
}

/* The index of step v among the sorted distinct steps. */
static int pd__step_rank(const int *steps, int n, int v) {
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (steps[mid] < v) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* The greedy with the placed slots kept as merged offset blocks in a
 * segment tree over the steps: a slot meets O(log n) lists instead of every
 * slot alive with it (quadratic when most are alive together, as under
 * zero-bubble's split backward), a binary search in each plus the blocks it
 * steps over. The offsets are the scan's: the lowest offset clear of every
 * slot in the way is the same whether they are visited one by one or merged. */
static pd_status pd__life_pack_blocks(pd__life *l, size_t *total) {
    int n = l->n, nsteps = 0, leaves = 1;
    pd__slot *s = PD_CALLOC((size_t)n + 1, sizeof *s);
    int *steps = PD_MALLOC(sizeof(int) * 2 * ((size_t)n + 1));
    pd__ltree t = {0, NULL, NULL, NULL, 0};
    pd_status st = PD_ERR_NOMEM;
    if (!s || !steps) goto done;
    for (int k = 0; k < n; k++) {
        s[k] = (pd__slot){k, l->first[k], l->last[k], pd__align64(l->size[k]), 0};
        steps[2 * k] = l->first[k], steps[2 * k + 1] = l->last[k];
    }
    qsort(s, (size_t)n, sizeof *s, pd__slot_by_size);
    qsort(steps, 2 * (size_t)n, sizeof *steps, pd__int_cmp);
    for (int i = 0; i < 2 * n; i++)
        if (!nsteps || steps[i] != steps[nsteps - 1]) steps[nsteps++] = steps[i];
    while (leaves < nsteps) leaves *= 2;
    int depth = 1;
    for (int w = leaves; w > 1; w /= 2) depth++;
    t.leaves = leaves;
    t.own = PD_CALLOC(2 * (size_t)leaves, sizeof *t.own), t.sub = PD_CALLOC(2 * (size_t)leaves, sizeof *t.sub);
    t.sets = PD_MALLOC(sizeof *t.sets * 4 * (size_t)depth);
    if (!t.own || !t.sub || !t.sets) goto done;
    *total = 0;
    for (int k = 0; k < n; k++) {
        int F = pd__step_rank(steps, nsteps, s[k].first), L = pd__step_rank(steps, nsteps, s[k].last);
        t.nsets = 0;
        if (s[k].size) pd__ltree_sets(&t, 1, 0, leaves, F, L);
        size_t o = s[k].size ? pd__ltree_lowest(&t, s[k].size) : 0;
        l->off[s[k].k] = o;
        if (o + s[k].size > *total) *total = o + s[k].size;
        if (s[k].size && !pd__ltree_add(&t, 1, 0, leaves, F, L, o, o + s[k].size)) goto done;
    }
    st = PD_OK;
done:
    pd__ltree_free(&t);
    PD_FREE(steps), PD_FREE(s);
    return st;
}

/* The placed slots, by rank of first step, in a max tree of their last steps
 * (INT_MIN: not placed yet): the slots alive during [f, l] are those of rank
 * below the first with first > l whose last >= f, found by descending only
 * into subtrees whose max reaches f. */
typedef struct {
    int leaves;  /* a power of two */
    int *mx;     /* 2 * leaves: mx[1] the root */
    int *slot;   /* leaf -> slot index */
} pd__rtree;

static void pd__rtree_set(pd__rtree *t, int rank, int last) {
    int i = rank + t->leaves;
    t->mx[i] = last;
    for (i >>= 1; i; i >>= 1) t->mx[i] = t->mx[2 * i] > t->mx[2 * i + 1] ? t->mx[2 * i] : t->mx[2 * i + 1];
}

/* Appends to live the placed slots of rank < hi with last >= f; returns the new count. */
static int pd__rtree_alive(const pd__rtree *t, pd__slot *s, int node, int lo, int width, int hi, int f,
                           pd__slot **live, int nl) {
    if (lo >= hi || t->mx[node] < f) return nl;
    if (width == 1) {
        live[nl++] = &s[t->slot[lo]];
        return nl;
    }
    nl = pd__rtree_alive(t, s, 2 * node, lo, width / 2, hi, f, live, nl);
    return pd__rtree_alive(t, s, 2 * node + 1, lo + width / 2, width / 2, hi, f, live, nl);
}

/* The same greedy visiting, for each slot, every placed slot alive with it
 * (the tree above): O((n + P) log n) for P pairs of slots alive together,
 * the faster way while P is a few times n, as in a chain. */
static pd_status pd__life_pack_pairs(pd__life *l, size_t *total) {
    int n = l->n, leaves = 1;
    while (leaves < n) leaves *= 2;
    pd__slot *s = PD_CALLOC((size_t)n + 1, sizeof *s);
    pd__slot **live = PD_MALLOC(sizeof(pd__slot *) * ((size_t)n + 1));
    int *byfirst = PD_MALLOC(sizeof(int) * ((size_t)n + 1)), *rank = PD_MALLOC(sizeof(int) * ((size_t)n + 1));
    int *pair = PD_MALLOC(sizeof(int) * 2 * ((size_t)n + 1));
    pd__rtree t = {leaves, PD_MALLOC(sizeof(int) * 2 * (size_t)leaves), byfirst};
    if (!s || !live || !byfirst || !rank || !pair || !t.mx) {
        PD_FREE(s), PD_FREE(live), PD_FREE(byfirst), PD_FREE(rank), PD_FREE(pair), PD_FREE(t.mx);
        return PD_ERR_NOMEM;
    }
    for (int k = 0; k < n; k++) s[k] = (pd__slot){k, l->first[k], l->last[k], pd__align64(l->size[k]), 0};
    qsort(s, (size_t)n, sizeof *s, pd__slot_by_size);
    for (int k = 0; k < n; k++) pair[2 * k] = s[k].first, pair[2 * k + 1] = k;
    qsort(pair, (size_t)n, 2 * sizeof *pair, pd__pair_cmp);
    for (int r = 0; r < n; r++) byfirst[r] = pair[2 * r + 1], rank[pair[2 * r + 1]] = r;
    PD_FREE(pair);
    for (int i = 0; i < 2 * leaves; i++) t.mx[i] = INT_MIN;
    *total = 0;
    for (int k = 0; k < n; k++) {
        /* ranks [0, hi): first step <= this slot's last */
        int lo = 0, hi = n;
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if (s[byfirst[mid]].first <= s[k].last) lo = mid + 1;
            else hi = mid;
        }
        int nl = pd__rtree_alive(&t, s, 1, 0, leaves, lo, s[k].first, live, 0);
        qsort(live, (size_t)nl, sizeof *live, pd__slot_by_off);
        size_t o = 0;
        for (int j = 0; j < nl; j++) {
            if (live[j]->off >= o + s[k].size) break;
            if (live[j]->off + live[j]->size > o) o = live[j]->off + live[j]->size;
        }
        s[k].off = o;
        if (o + s[k].size > *total) *total = o + s[k].size;
        l->off[s[k].k] = o;
        pd__rtree_set(&t, rank[k], s[k].last);
    }
    PD_FREE(t.mx), PD_FREE(rank), PD_FREE(byfirst), PD_FREE(live), PD_FREE(s);
    return PD_OK;
}

/* The pairs of slots alive together, counted in O(n log n): slot k meets
 * those with first <= its last, less those with last < its first. */
static pd_status pd__life_pairs(const pd__life *l, int64_t *pairs) {
    int n = l->n;
    int *fs = PD_MALLOC(sizeof(int) * ((size_t)n + 1)), *ls = PD_MALLOC(sizeof(int) * ((size_t)n + 1));
    if (!fs || !ls) {
        PD_FREE(fs), PD_FREE(ls);
        return PD_ERR_NOMEM;
    }
    memcpy(fs, l->first, sizeof(int) * (size_t)n);
    memcpy(ls, l->last, sizeof(int) * (size_t)n);
    qsort(fs, (size_t)n, sizeof *fs, pd__int_cmp);
    qsort(ls, (size_t)n, sizeof *ls, pd__int_cmp);
    int64_t sum = 0;
    for (int k = 0; k < n; k++) {
        sum += pd__step_rank(fs, n, l->last[k] + 1);  /* first <= last_k */
        sum -= pd__step_rank(ls, n, l->first[k]);     /* last < first_k */
    }
    *pairs = (sum - n) / 2;
    PD_FREE(fs), PD_FREE(ls);
    return PD_OK;
}

/* Greedy by decreasing size, each slot at the lowest offset that fits among
 * the placed slots alive at the same time (TFLite's "greedy by size"; the
 * scan over every placed slot was O(n^2), 8.7 s for 100k tensors). Two ways
 * to the same offsets: visiting the slots alive together, O((n + P) log n)
 * for P such pairs and the faster while P <= 8n (a chain: 0.28 s against
 * 0.70 s for 100k tensors), else merged blocks, O(log n) lists per slot
 * (half of 10k tensors kept to the end: 49 ms against 8.7 s).
 * l->method: 0 chooses, 1 pairs, 2 blocks (tests). */
pd_status pd__life_pack(pd__life *l, size_t *total) {
    int64_t pairs = 0;
    if (l->method == 0) PD_TRY(pd__life_pairs(l, &pairs));
    bool blocks = l->method == 2 || (l->method == 0 && pairs > 8 * (int64_t)l->n);
    return blocks ? pd__life_pack_blocks(l, total) : pd__life_pack_pairs(l, total);
}

/* Places every input and computed tensor in one slab. Tensors whose lifetimes
 * (from the producing node to the last consumer, inclusive) overlap never share
 * bytes; the others may. Greedy by decreasing size, lowest fitting offset. */
static pd_status pd__plan_memory(pd_engine *e) {
    const pd_graph *g = e->g;
    pd__life l;
    PD_TRY(pd__life_init(&l, g->ntensors));
    for (int t = 0; t < g->ntensors; t++) {
        const pd__tensor *x = &g->tensors[t];
        if ((x->kind != PD_T_ACT && x->kind != PD_T_INPUT) || x->ndim < 0) continue;
        int first = x->kind == PD_T_INPUT ? -1 : x->producer;
        pd__life_add(&l, t, first, x->is_output ? g->nnodes : first, (size_t)x->numel * pd_dtype_size(x->dtype));
    }
    for (int i = 0; i < g->nnodes; i++)
        for (int j = 0; j < g->nodes[i].nin; j++) {
            int t = g->nodes[i].in[j], k = t >= 0 ? l.at[t] : -1;
            if (k >= 0 && l.last[k] < i) l.last[k] = i;
        }
    /* graph outputs and inputs stay valid for the caller: keep them alive throughout */
    for (int k = 0; k < l.n; k++)
        if (g->tensors[l.id[k]].is_output || g->tensors[l.id[k]].kind == PD_T_INPUT) {
            l.first[k] = -1;
            l.last[k] = g->nnodes;
        }
    size_t total;
    pd_status st = pd__life_pack(&l, &total);
    if (st == PD_OK) {
        if (total == 0) total = 64; /* zero-size tensors still get a valid pointer */
        e->slab_size = total;
        if (posix_memalign(&e->slab, 64, total) != 0) {
            e->slab = NULL;
            st = PD_ERR_NOMEM;
        }
    }
    if (st == PD_OK) {
        memset(e->slab, 0, total);
        for (int t = 0; t < g->ntensors; t++) e->views[t] = pd__view(&g->tensors[t]);
        for (int k = 0; k < l.n; k++) e->views[l.id[k]].data = (char *)e->slab + l.off[k];
    }
    pd__life_free(&l);
    return st;
}

size_t pd__engine_slab_bytes(const pd_engine *e) { return e ? e->slab_size : 0; }

void pd_engine_destroy(pd_engine *e) {
    if (!e) return;
    PD_FREE(e->slab);
    PD_FREE(e->views);
    PD_FREE(e->args);
    PD_FREE(e->arg_start);
    PD_FREE(e->x.scratch);
    PD_FREE(e);
}

pd_status pd_engine_create(pd_graph *g, const pd_engine_options *opt, pd_engine **out) {
    pd_engine_options o = PD_ENGINE_OPTIONS_INIT;
    PD_TRY(pd__opts_read(&o, opt, sizeof o, "pd_engine_create: opt"));
    if (!g || !out) return pd__err(PD_ERR_INVALID, "pd_engine_create: graph and out must not be NULL");
    if (o.backend && strcmp(o.backend, "cpu") != 0)
        return pd__err(PD_ERR_UNSUPPORTED, "backend '%s' is not available (this build has: cpu)", o.backend);
    if (o.threads < 0) return pd__err(PD_ERR_INVALID, "threads must be >= 0, not %d", o.threads);
    pd_engine *e = PD_CALLOC(1, sizeof *e);
    if (!e) return pd__err(PD_ERR_NOMEM, "out of memory creating the engine");
    e->g = g;
    e->be = &pd__cpu_backend;
    e->x.g = g;
    e->x.threads = pd__threads_default(o.threads);

    int nargs = 0;
    for (int i = 0; i < g->nnodes; i++) {
        if (!e->be->supports_op(&g->nodes[i])) {
            pd_engine_destroy(e);
            return pd__node_err(g, &g->nodes[i], PD_ERR_UNSUPPORTED, "operator %s is not supported by backend %s",
                                g->nodes[i].op_type, e->be->name);
        }
        nargs += g->nodes[i].nin + g->nodes[i].nout;
    }
    e->views = PD_CALLOC((size_t)g->ntensors + 1, sizeof(pd_tensor));
    e->args = PD_CALLOC((size_t)nargs + 1, sizeof(pd_tensor *));
    e->arg_start = PD_CALLOC((size_t)g->nnodes + 1, sizeof(int));
    if (!e->views || !e->args || !e->arg_start) goto nomem;

    if (pd__plan_memory(e) != PD_OK) goto nomem;
    for (int i = 0, k = 0; i < g->nnodes; i++) {
        pd__node *n = &g->nodes[i];
        e->arg_start[i] = k;
        for (int j = 0; j < n->nin; j++) e->args[k++] = n->in[j] >= 0 ? &e->views[n->in[j]] : NULL;
        for (int j = 0; j < n->nout; j++) e->args[k++] = n->out[j] >= 0 ? &e->views[n->out[j]] : NULL;
    }
    *out = e;
    return PD_OK;
nomem:
    pd_engine_destroy(e);
    return pd__err(PD_ERR_NOMEM, "%s: out of memory planning the engine's buffers", g->path);
}

pd_status pd_engine_set_input(pd_engine *e, const char *name, const pd_tensor *t) {
    if (!e || !name || !t || !t->data)
        return pd__err(PD_ERR_INVALID, "pd_engine_set_input: %s is NULL",
                       !e ? "engine" : !name ? "name" : !t ? "tensor" : "the tensor's data");
    const pd_graph *g = e->g;
    int k = -1;
    for (int i = 0; i < g->ninputs; i++)
        if (strcmp(g->tensors[g->inputs[i]].name, name) == 0) k = g->inputs[i];
    if (k < 0) return pd__err(PD_ERR_INVALID, "%s: the model has no input named '%s'", g->path, name);
    const pd__tensor *x = &g->tensors[k];
    char want[256], got[256];
    pd__format_shape(want, sizeof want, x->ndim, x->shape);
    pd__format_shape(got, sizeof got, t->ndim, t->shape);
    if (t->dtype != x->dtype)
        return pd__err(PD_ERR_SHAPE, "%s: input '%s' must be %s%s, got %s%s", g->path, name, pd_dtype_name(x->dtype),
                       want, pd_dtype_name(t->dtype), got);
    bool same = t->ndim == x->ndim;
    for (int i = 0; same && i < x->ndim; i++) same = t->shape[i] == x->shape[i];
    if (!same)
        return pd__err(PD_ERR_SHAPE, "%s: input '%s' must have shape %s, got %s", g->path, name, want, got);
    memcpy(e->views[k].data, t->data, (size_t)x->numel * pd_dtype_size(x->dtype));
    return PD_OK;
}

pd_status pd_engine_run(pd_engine *e) {
    if (!e) return pd__err(PD_ERR_INVALID, "pd_engine_run: engine is NULL");
    const pd_graph *g = e->g;
    for (int i = 0; i < g->nnodes; i++) {
        const pd__node *n = &g->nodes[i];
        pd_tensor **a = e->args + e->arg_start[i];
        PD_TRY(e->be->run_node(&e->x, n, a, a + n->nin));
    }
    return PD_OK;
}

pd_status pd_engine_get_output(pd_engine *e, const char *name, pd_tensor *out) {
    if (!e || !name || !out)
        return pd__err(PD_ERR_INVALID, "pd_engine_get_output: %s is NULL", !e ? "engine" : !name ? "name" : "out");
    int t = pd__graph_find(e->g, name);
    if (t < 0 || !e->views[t].data)
        return pd__err(PD_ERR_INVALID, "%s: no computed tensor named '%s'", e->g->path, name);
    *out = e->views[t];
    return PD_OK;
}
