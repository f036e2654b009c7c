/* antichain.c - the valid cuts of a layer DAG, as PipeDream's planner sees them.
 *
 * A pipeline cut is valid when every node before it has all its
 * predecessors before it too: the set of nodes before the cut is an
 * "ideal" of the DAG (PipeDream names it by its antichain, the ideal's
 * maximal nodes). A stage is the difference of two nested ideals. For a
 * chain there are n+1 ideals; branches multiply them (a diamond has one
 * per subset of the branch prefixes).
 *
 * States are every ideal, found breadth-first by adding one ready node at a
 * time, then ordered by size (a topological order of containment). When a
 * very branchy DAG has more than `max_states` ideals, the cuts fall back to
 * the prefixes of the profile's topological order: still valid, fewer
 * choices (the planner says so).
 *
 * Costs are prefix sums over each ideal, so a stage's totals are one
 * subtraction; `cross_bytes` counts every tensor that crosses the cut (the
 * outputs of nodes inside with a consumer outside), since all of them must
 * travel forward as activations and back as gradients.
 */
#include "plan.h"

#include <string.h>

typedef struct pd__set {
    int words, cap, n;
    uint64_t *bits;   /* n * words */
    int *slot;        /* hash table of indices, cap entries, -1 empty */
} pd__set;

static uint64_t pd__hash_bits(const uint64_t *b, int words) {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < words; i++) {
        h ^= b[i];
        h *= 1099511628211ull;
        h ^= h >> 29;
    }
    return h;
}

/* Adds b if absent; returns its index, or -1 on allocation failure; *added says which. */
static int pd__set_add(pd__set *s, const uint64_t *b, int limit, bool *added) {
    *added = false;
    if (s->n * 2 >= s->cap) {
        int ncap = s->cap ? s->cap * 2 : 1024;
        int *ns = (int *)PD_MALLOC(sizeof(int) * (size_t)ncap);
        if (!ns) return -1;
        for (int i = 0; i < ncap; i++) ns[i] = -1;
        for (int i = 0; i < s->n; i++) {
            uint64_t h = pd__hash_bits(s->bits + (size_t)i * s->words, s->words) & (uint64_t)(ncap - 1);
            while (ns[h] >= 0) h = (h + 1) & (uint64_t)(ncap - 1);
            ns[h] = i;
        }
        PD_FREE(s->slot);
        s->slot = ns;
        s->cap = ncap;
    }
    uint64_t h = pd__hash_bits(b, s->words) & (uint64_t)(s->cap - 1);
    while (s->slot[h] >= 0) {
        if (memcmp(s->bits + (size_t)s->slot[h] * s->words, b, sizeof(uint64_t) * (size_t)s->words) == 0)
            return s->slot[h];
        h = (h + 1) & (uint64_t)(s->cap - 1);
    }
    if (s->n >= limit) return -2;
    if ((s->n & (s->n - 1)) == 0 || s->n == 0) {
        size_t want = (size_t)(s->n ? s->n * 2 : 64) * (size_t)s->words;
        uint64_t *nb = (uint64_t *)PD_REALLOC(s->bits, sizeof(uint64_t) * want);
        if (!nb) return -1;
        s->bits = nb;
    }
    memcpy(s->bits + (size_t)s->n * s->words, b, sizeof(uint64_t) * (size_t)s->words);
    s->slot[h] = s->n;
    *added = true;
    return s->n++;
}

static inline bool pd__has(const uint64_t *b, int i) { return (b[i >> 6] >> (i & 63)) & 1; }

void pd__cuts_free(pd__cuts *c) {
    if (!c) return;
    PD_FREE(c->ideal);
    PD_FREE(c->fwd);
    PD_FREE(c->bwd_in);
    PD_FREE(c->bwd_w);
    PD_FREE(c->act);
    PD_FREE(c->param);
    PD_FREE(c->optim);
    PD_FREE(c->cross_bytes);
    PD_FREE(c->antichain_bytes);
    PD_FREE(c->pred_start);
    PD_FREE(c->pred);
    PD_FREE(c);
}

/* All ideals, breadth-first; returns the count, 0 when over `limit`, -1 on allocation failure. */
static int pd__enumerate(const pd_profile *p, const int *pstart, const int *preds, int words, int limit,
                         pd__set *set) {
    uint64_t *tmp = (uint64_t *)PD_CALLOC((size_t)words, sizeof(uint64_t));
    if (!tmp) return -1;
    bool added;
    int r = pd__set_add(set, tmp, limit, &added);
    if (r < 0) {
        PD_FREE(tmp);
        return -1;
    }
    for (int head = 0; head < set->n; head++) {
        for (int v = 0; v < p->n; v++) {
            const uint64_t *b = set->bits + (size_t)head * words;
            if (pd__has(b, v)) continue;
            bool ready = true;
            for (int k = pstart[v]; k < pstart[v + 1] && ready; k++) ready = pd__has(b, preds[k]);
            if (!ready) continue;
            memcpy(tmp, b, sizeof(uint64_t) * (size_t)words);
            tmp[v >> 6] |= 1ull << (v & 63);
            r = pd__set_add(set, tmp, limit, &added);
            if (r < 0) {
                PD_FREE(tmp);
                return r == -2 ? 0 : -1;
            }
        }
    }
    PD_FREE(tmp);
    return set->n;
}

static int pd__popcount(const uint64_t *b, int words) {
    int c = 0;
    for (int i = 0; i < words; i++) c += __builtin_popcountll(b[i]);
    return c;
}

pd_status pd__cuts_build(const pd_profile *p, int max_states, pd__cuts **out) {
    if (!p || p->n <= 0) return pd__err(PD_ERR_INVALID, "plan: the profile has no nodes");
    if (max_states <= 0) max_states = 4096;
    int n = p->n, words = (n + 63) / 64;
    pd_status st = PD_ERR_NOMEM;
    pd__cuts *c = (pd__cuts *)PD_CALLOC(1, sizeof *c);
    int *pstart = (int *)PD_CALLOC((size_t)n + 1, sizeof(int)), *preds = (int *)PD_MALLOC(sizeof(int) * ((size_t)p->n_edges + 1));
    int *sstart = (int *)PD_CALLOC((size_t)n + 1, sizeof(int)), *succs = (int *)PD_MALLOC(sizeof(int) * ((size_t)p->n_edges + 1));
    int *order = NULL, *bucket, S;
    size_t cap, cnt;
    pd__set set = {words, 0, 0, NULL, NULL};
    if (!c || !pstart || !preds || !sstart || !succs) goto fail;
    for (int e = 0; e < p->n_edges; e++) {
        pstart[p->edge[2 * e + 1] + 1]++;
        sstart[p->edge[2 * e] + 1]++;
    }
    for (int v = 0; v < n; v++) {
        pstart[v + 1] += pstart[v];
        sstart[v + 1] += sstart[v];
    }
    {
        int *pf = (int *)PD_MALLOC(sizeof(int) * (size_t)n), *sf = (int *)PD_MALLOC(sizeof(int) * (size_t)n);
        if (!pf || !sf) {
            PD_FREE(pf);
            PD_FREE(sf);
            goto fail;
        }
        memcpy(pf, pstart, sizeof(int) * (size_t)n);
        memcpy(sf, sstart, sizeof(int) * (size_t)n);
        for (int e = 0; e < p->n_edges; e++) {
            preds[pf[p->edge[2 * e + 1]]++] = p->edge[2 * e];
            succs[sf[p->edge[2 * e]]++] = p->edge[2 * e + 1];
        }
        PD_FREE(pf);
        PD_FREE(sf);
    }

    S = pd__enumerate(p, pstart, preds, words, max_states, &set);
    if (S < 0) goto fail;
    if (S == 0) {
        /* too many ideals: the prefixes of the topological order */
        set.n = 0;
        PD_FREE(set.bits);
        set.bits = (uint64_t *)PD_CALLOC((size_t)(n + 1) * (size_t)words, sizeof(uint64_t));
        if (!set.bits) goto fail;
        for (int s = 1; s <= n; s++) {
            memcpy(set.bits + (size_t)s * words, set.bits + (size_t)(s - 1) * words, sizeof(uint64_t) * (size_t)words);
            set.bits[(size_t)s * words + (size_t)((s - 1) >> 6)] |= 1ull << ((s - 1) & 63);
        }
        S = set.n = n + 1;
        c->prefix_only = true;
    }
    /* states by ideal size, ties by index: a counting sort, as sizes are 0..n
     * (and no qsort_r, which is not standard C: the core builds on libc alone) */
    order = (int *)PD_MALLOC(sizeof(int) * (size_t)S);
    bucket = (int *)PD_CALLOC((size_t)n + 2, sizeof(int));
    if (!order || !bucket) {
        PD_FREE(bucket);
        goto fail;
    }
    for (int i = 0; i < S; i++) bucket[pd__popcount(set.bits + (size_t)i * words, words) + 1]++;
    for (int k = 0; k <= n; k++) bucket[k + 1] += bucket[k];
    for (int i = 0; i < S; i++) order[bucket[pd__popcount(set.bits + (size_t)i * words, words)]++] = i;
    PD_FREE(bucket);

    c->n_states = S;
    c->words = words;
    c->ideal = (uint64_t *)PD_MALLOC(sizeof(uint64_t) * (size_t)S * (size_t)words);
    {
        double **arr[] = {&c->fwd, &c->bwd_in, &c->bwd_w, &c->act, &c->param, &c->optim, &c->cross_bytes, &c->antichain_bytes};
        for (size_t k = 0; k < sizeof arr / sizeof arr[0]; k++)
            if (!(*arr[k] = (double *)PD_CALLOC((size_t)S, sizeof(double)))) goto fail;
    }
    c->pred_start = (int *)PD_CALLOC((size_t)S + 1, sizeof(int));
    if (!c->ideal || !c->pred_start) goto fail;
    for (int i = 0; i < S; i++) {
        const uint64_t *b = set.bits + (size_t)order[i] * words;
        memcpy(c->ideal + (size_t)i * words, b, sizeof(uint64_t) * (size_t)words);
        for (int v = 0; v < n; v++) {
            if (!pd__has(b, v)) continue;
            const pd__pnode *nd = &p->node[v];
            c->fwd[i] += nd->fwd_ms;
            c->bwd_in[i] += nd->bwd_in_ms;
            c->bwd_w[i] += nd->bwd_w_ms;
            c->act[i] += nd->act_bytes;
            c->param[i] += nd->param_bytes;
            c->optim[i] += nd->optim_bytes;
            bool out_edge = false, in_edge = false;
            for (int k = sstart[v]; k < sstart[v + 1]; k++) {
                if (pd__has(b, succs[k])) in_edge = true;
                else out_edge = true;
            }
            if (out_edge) c->cross_bytes[i] += nd->act_bytes;
            if (!in_edge) c->antichain_bytes[i] += nd->act_bytes;
        }
    }
    /* containment: a before b and ideal[a] inside ideal[b] */
    cap = 1024;
    cnt = 0;
    c->pred = (int *)PD_MALLOC(sizeof(int) * cap);
    if (!c->pred) goto fail;
    for (int b = 0; b < S; b++) {
        const uint64_t *bb = c->ideal + (size_t)b * words;
        for (int a = 0; a < b; a++) {
            const uint64_t *ab = c->ideal + (size_t)a * words;
            bool sub = true;
            for (int w = 0; w < words && sub; w++) sub = (ab[w] & ~bb[w]) == 0;
            if (!sub) continue;
            if (cnt == cap) {
                int *np = (int *)PD_REALLOC(c->pred, sizeof(int) * cap * 2);
                if (!np) goto fail;
                c->pred = np;
                cap *= 2;
            }
            c->pred[cnt++] = a;
        }
        if (cnt > (size_t)INT32_MAX) {
            st = pd__err(PD_ERR_NOMEM, "plan: too many stage candidates (%d cut states); lower opt->max_states", S);
            goto done;
        }
        c->pred_start[b + 1] = (int)cnt;
    }
    st = PD_OK;
    *out = c;
    c = NULL;
    goto done;
fail:
    pd__err(st, "plan: out of memory building the cut states of %d nodes", n);
done:
    PD_FREE(order);
    PD_FREE(set.bits);
    PD_FREE(set.slot);
    PD_FREE(pstart);
    PD_FREE(preds);
    PD_FREE(sstart);
    PD_FREE(succs);
    pd__cuts_free(c);
    return st;
}
