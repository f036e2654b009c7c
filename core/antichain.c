/* antichain.c - the valid cuts of a layer DAG, as PipeDream's planner sees
 * them: a cut is valid when the nodes before it form an ideal (every node's
 * predecessors before it too), named by its antichain; a stage is the
 * difference of two nested ideals. States are every ideal, found breadth-first
 * and ordered by size; past `max_states` ideals each size keeps the `beam`
 * cuts crossing the fewest bytes. Costs are prefix sums, so a stage's totals
 * are one subtraction. Details: docs/INTERNALS.md, "core/antichain.c". */
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

/* The DAG as the beam walks it: forwards, or reversed (node v is the
 * profile's n-1-v, edges turned round) to grow cuts from the end. */
typedef struct {
    int n;
    const pd__pnode *node;
    const int *pstart, *preds, *sstart, *succs;
} pd__dag;

/* What a cut state's candidate is ranked by: the bytes crossing it, then the
 * compute and parameters before it (equal triples cost a stage the same, so
 * only the first is kept). */
typedef struct {
    double cross, work, param;
    int at; /* its bits: cand + at * words */
} pd__cand;

static int pd__cand_cmp(const void *a, const void *b) {
    const pd__cand *x = (const pd__cand *)a, *y = (const pd__cand *)b;
    if (x->cross != y->cross) return x->cross < y->cross ? -1 : 1;
    if (x->work != y->work) return x->work < y->work ? -1 : 1;
    if (x->param != y->param) return x->param < y->param ? -1 : 1;
    return (x->at > y->at) - (x->at < y->at);
}

/* Whether b holds exactly nodes 0 .. k-1. */
static bool pd__is_prefix(const uint64_t *b, int words, int k) {
    for (int w = 0; w < words; w++) {
        uint64_t want = w < k / 64 ? ~0ull : w == k / 64 && (k & 63) ? (1ull << (k & 63)) - 1 : 0;
        if (b[w] != want) return false;
    }
    return true;
}

/* The cut states of one size: from each state of the size below, every ready
 * node added (crossing bytes updated by that node's edges only). Returns the
 * candidates, deduplicated by bits, in *out (bits in *cbits). */
static int pd__level_cands(const pd__dag *p, int words, const uint64_t *prev, const pd__cand *prevc, int nprev, pd__set *set,
                           pd__cand **out) {
    int cap = 64, nc = 0;
    pd__cand *c = (pd__cand *)PD_MALLOC(sizeof *c * (size_t)cap);
    uint64_t *tmp = (uint64_t *)PD_MALLOC(sizeof(uint64_t) * (size_t)words);
    if (!c || !tmp) goto fail;
    for (int i = 0; i < nprev; i++) {
        const uint64_t *b = prev + (size_t)i * words;
        for (int v = 0; v < p->n; v++) {
            if (pd__has(b, v)) continue;
            bool ready = true;
            for (int k = p->pstart[v]; k < p->pstart[v + 1] && ready; k++) ready = pd__has(b, p->preds[k]);
            if (!ready) continue;
            memcpy(tmp, b, sizeof(uint64_t) * (size_t)words);
            tmp[v >> 6] |= 1ull << (v & 63);
            bool added;
            int at = pd__set_add(set, tmp, INT32_MAX, &added);
            if (at < 0) goto fail;
            if (!added) continue;
            const pd__pnode *nd = &p->node[v];
            pd__cand x = {prevc[i].cross, prevc[i].work + nd->fwd_ms + nd->bwd_in_ms + nd->bwd_w_ms,
                          prevc[i].param + nd->param_bytes, at};
            if (p->sstart[v + 1] > p->sstart[v]) x.cross += nd->act_bytes; /* its consumers are all outside */
            for (int k = p->pstart[v]; k < p->pstart[v + 1]; k++) {
                int u = p->preds[k];
                bool still = false; /* u keeps a consumer outside */
                for (int e = p->sstart[u]; e < p->sstart[u + 1] && !still; e++) still = !pd__has(tmp, p->succs[e]);
                for (int j = p->pstart[v]; j < k && !still; j++) still = p->preds[j] == u; /* counted once */
                if (!still) x.cross -= p->node[u].act_bytes;
            }
            if (nc == cap) {
                pd__cand *nc2 = (pd__cand *)PD_REALLOC(c, sizeof *c * (size_t)cap * 2);
                if (!nc2) goto fail;
                c = nc2, cap *= 2;
            }
            c[nc++] = x;
        }
    }
    PD_FREE(tmp);
    *out = c;
    return nc;
fail:
    PD_FREE(tmp);
    PD_FREE(c);
    return -1;
}

static int pd__cand_by_work(const void *a, const void *b) {
    const pd__cand *x = (const pd__cand *)a, *y = (const pd__cand *)b;
    if (x->work != y->work) return x->work < y->work ? -1 : 1;
    return (x->at > y->at) - (x->at < y->at);
}

/* Keeps (moved to the front, in rank order) the prefix, the first half of the
 * beam by crossing bytes and the other half spread evenly over the compute
 * before the cut: the fewest bytes make cheap cuts, the spread lets stages
 * balance where the cheapest cuts of a size all hold the same work. cand is
 * sorted by pd__cand_cmp; equal triples count once. Returns the count kept. */
static int pd__beam_select(pd__cand *cand, int nc, int beam, int prefix) {
    uint8_t *take = (uint8_t *)PD_CALLOC((size_t)nc + 1, 1);
    pd__cand *rest = (pd__cand *)PD_MALLOC(sizeof *rest * ((size_t)nc + 1));
    if (!take || !rest) {
        PD_FREE(take);
        PD_FREE(rest);
        return -1;
    }
    int by_cross = (beam + 1) / 2, taken = 0, nr = 0, keep = 0;
    for (int i = 0; i < nc; i++) {
        bool same = i && cand[i].cross == cand[i - 1].cross && cand[i].work == cand[i - 1].work &&
                    cand[i].param == cand[i - 1].param;
        if (same) continue;
        if (taken < by_cross) take[i] = 1, taken++;
        else rest[nr] = cand[i], rest[nr++].at = i; /* at: its rank, for now */
    }
    if (prefix >= 0) take[prefix] = 1;
    qsort(rest, (size_t)nr, sizeof *rest, pd__cand_by_work);
    int spread = beam - by_cross < nr ? beam - by_cross : nr;
    for (int j = 0; j < spread; j++) take[rest[(int)(((double)j + 0.5) * nr / spread)].at] = 1;
    for (int i = 0; i < nc; i++)
        if (take[i]) cand[keep++] = cand[i];
    PD_FREE(take);
    PD_FREE(rest);
    return keep;
}

/* Cut states size by size, `beam` (plus the topological prefix) per size;
 * set receives them in that order. Returns the count, -1 on allocation failure. */
static int pd__enumerate_beam(const pd__dag *p, int words, int beam, pd__set *set) {
    int n = p->n, nprev = 1, total = 0, ok = 0;
    size_t wb = sizeof(uint64_t) * (size_t)words;
    uint64_t *prev = (uint64_t *)PD_CALLOC((size_t)words, sizeof(uint64_t)), *next = NULL;
    pd__cand *prevc = (pd__cand *)PD_CALLOC(1, sizeof *prevc), *cand = NULL;
    pd__set level = {words, 0, 0, NULL, NULL};
    bool added;
    if (!prev || !prevc || pd__set_add(set, prev, INT32_MAX, &added) < 0) goto done;
    total = 1;
    for (int k = 1; k <= n; k++) {
        level.n = 0;
        if (level.slot)
            for (int i = 0; i < level.cap; i++) level.slot[i] = -1;
        int nc = pd__level_cands(p, words, prev, prevc, nprev, &level, &cand);
        if (nc < 0) goto done;
        qsort(cand, (size_t)nc, sizeof *cand, pd__cand_cmp);
        /* the topological prefix of size k is a candidate, as that of size k-1 was kept */
        int prefix = -1;
        for (int i = 0; i < nc && prefix < 0; i++)
            if (pd__is_prefix(level.bits + (size_t)cand[i].at * words, words, k)) prefix = i;
        int keep = pd__beam_select(cand, nc, beam, prefix);
        if (keep < 0) goto done;
        next = (uint64_t *)PD_MALLOC(wb * (size_t)(keep + 1));
        if (!next) goto done;
        for (int i = 0; i < keep; i++) {
            memcpy(next + (size_t)i * words, level.bits + (size_t)cand[i].at * words, wb);
            if (pd__set_add(set, next + (size_t)i * words, INT32_MAX, &added) < 0) goto done;
        }
        PD_FREE(prev);
        prev = next, next = NULL;
        PD_FREE(prevc);
        prevc = cand, cand = NULL;
        nprev = keep;
        total += keep;
    }
    ok = 1;
done:
    PD_FREE(prev);
    PD_FREE(next);
    PD_FREE(prevc);
    PD_FREE(cand);
    PD_FREE(level.bits);
    PD_FREE(level.slot);
    return ok ? total : -1;
}

static int pd__popcount(const uint64_t *b, int words) {
    int c = 0;
    for (int i = 0; i < words; i++) c += __builtin_popcountll(b[i]);
    return c;
}

/* The beam from the start and, complemented, from the end (a cut that
 * leaves a late branch undone, as attention's V before Q and K are done,
 * is near the end's beam but far from the start's): both into set. */
static int pd__beam_both(const pd_profile *p, const int *pstart, const int *preds, const int *sstart,
                         const int *succs, int words, int beam, pd__set *set) {
    int n = p->n, ne = pstart[n], S = -1;
    pd__dag fw = {n, p->node, pstart, preds, sstart, succs};
    pd__pnode *rnode = (pd__pnode *)PD_MALLOC(sizeof *rnode * (size_t)n);
    int *rps = (int *)PD_MALLOC(sizeof(int) * ((size_t)n + 1)), *rp = (int *)PD_MALLOC(sizeof(int) * ((size_t)ne + 1));
    int *rss = (int *)PD_MALLOC(sizeof(int) * ((size_t)n + 1)), *rs = (int *)PD_MALLOC(sizeof(int) * ((size_t)ne + 1));
    uint64_t *tmp = (uint64_t *)PD_MALLOC(sizeof(uint64_t) * (size_t)words);
    pd__set back = {words, 0, 0, NULL, NULL};
    pd__dag bw = {n, rnode, rps, rp, rss, rs};
    if (!rnode || !rps || !rp || !rss || !rs || !tmp) goto done;
    rps[0] = rss[0] = 0;
    for (int r = 0; r < n; r++) {
        int v = n - 1 - r;
        rnode[r] = p->node[v];
        rps[r + 1] = rps[r], rss[r + 1] = rss[r];
        for (int k = sstart[v]; k < sstart[v + 1]; k++) rp[rps[r + 1]++] = n - 1 - succs[k];
        for (int k = pstart[v]; k < pstart[v + 1]; k++) rs[rss[r + 1]++] = n - 1 - preds[k];
    }
    if (pd__enumerate_beam(&fw, words, beam, set) < 0 || pd__enumerate_beam(&bw, words, beam, &back) < 0) goto done;
    for (int i = 0; i < back.n; i++) {
        const uint64_t *b = back.bits + (size_t)i * words;
        memset(tmp, 0, sizeof(uint64_t) * (size_t)words);
        for (int v = 0; v < n; v++)
            if (!pd__has(b, n - 1 - v)) tmp[v >> 6] |= 1ull << (v & 63);
        bool added;
        if (pd__set_add(set, tmp, INT32_MAX, &added) < 0) goto done;
    }
    S = set->n;
done:
    PD_FREE(rnode), PD_FREE(rps), PD_FREE(rp), PD_FREE(rss), PD_FREE(rs), PD_FREE(tmp);
    PD_FREE(back.bits), PD_FREE(back.slot);
    return S;
}

/* The profile's edges as CSR both ways: v's predecessors preds[pstart[v] ..
 * pstart[v + 1]], its successors likewise; false when out of memory. */
static bool pd__cuts_csr(const pd_profile *p, int *pstart, int *preds, int *sstart, int *succs) {
    int n = p->n;
    for (int e = 0; e < p->n_edges; e++) {
        pstart[p->edge[2 * e + 1] + 1]++;
        sstart[p->edge[2 * e] + 1]++;
    }
    for (int v = 0; v < n; v++) {
        pstart[v + 1] += pstart[v];
        sstart[v + 1] += sstart[v];
    }
    int *pf = (int *)PD_MALLOC(sizeof(int) * (size_t)n), *sf = (int *)PD_MALLOC(sizeof(int) * (size_t)n);
    if (!pf || !sf) {
        PD_FREE(pf);
        PD_FREE(sf);
        return false;
    }
    memcpy(pf, pstart, sizeof(int) * (size_t)n);
    memcpy(sf, sstart, sizeof(int) * (size_t)n);
    for (int e = 0; e < p->n_edges; e++) {
        preds[pf[p->edge[2 * e + 1]]++] = p->edge[2 * e];
        succs[sf[p->edge[2 * e]]++] = p->edge[2 * e + 1];
    }
    PD_FREE(pf);
    PD_FREE(sf);
    return true;
}

/* State i's ideal (the set's order[i]-th) and its sums: the costs of its
 * nodes, the bytes of those with an edge leaving it (cross) and of those
 * with no edge inside it (its antichain). */
static void pd__cuts_sums(const pd_profile *p, const pd__set *set, const int *order, const int *sstart,
                          const int *succs, pd__cuts *c) {
    int n = p->n, words = c->words;
    for (int i = 0; i < c->n_states; i++) {
        const uint64_t *b = set->bits + (size_t)order[i] * words;
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
}

/* Containment: pred[pred_start[b] .. pred_start[b + 1]] are the states a
 * before b whose ideal is inside b's (n: the profile's nodes, for messages). */
static pd_status pd__cuts_containment(pd__cuts *c, int n) {
    int S = c->n_states, words = c->words;
    size_t cap = 1024, cnt = 0;
    c->pred = (int *)PD_MALLOC(sizeof(int) * cap);
    if (!c->pred) return pd__err(PD_ERR_NOMEM, "plan: out of memory building the cut states of %d nodes", n);
    for (int b = 0; b < S; b++) {
        const uint64_t *bb = c->ideal + (size_t)b * words;
        for (int a = 0; a < b; a++) {
            const uint64_t *ab = c->ideal + (size_t)a * words;
            bool sub = true;
            for (int w = 0; w < words && sub; w++) sub = (ab[w] & ~bb[w]) == 0;
            if (!sub) continue;
            if (cnt == cap) {
                int *np = (int *)PD_REALLOC(c->pred, sizeof(int) * cap * 2);
                if (!np) return pd__err(PD_ERR_NOMEM, "plan: out of memory building the cut states of %d nodes", n);
                c->pred = np;
                cap *= 2;
            }
            c->pred[cnt++] = a;
        }
        if (cnt > (size_t)INT32_MAX)
            return pd__err(PD_ERR_NOMEM, "plan: too many stage candidates (%d cut states); lower opt->max_states", S);
        c->pred_start[b + 1] = (int)cnt;
    }
    return PD_OK;
}

pd_status pd__cuts_build(const pd_profile *p, int max_states, int beam, pd__cuts **out) {
    if (!p || p->n <= 0) return pd__err(PD_ERR_INVALID, "plan: the profile has no nodes");
    if (max_states <= 0) max_states = 4096;
    int n = p->n, words = (n + 63) / 64;
    pd_status st = PD_ERR_NOMEM;
    pd__cuts *c = (pd__cuts *)PD_CALLOC(1, sizeof *c);
    int *pstart = (int *)PD_CALLOC((size_t)n + 1, sizeof(int)), *preds = (int *)PD_MALLOC(sizeof(int) * ((size_t)p->n_edges + 1));
    int *sstart = (int *)PD_CALLOC((size_t)n + 1, sizeof(int)), *succs = (int *)PD_MALLOC(sizeof(int) * ((size_t)p->n_edges + 1));
    int *order = NULL, *bucket, S;
    pd__set set = {words, 0, 0, NULL, NULL};
    if (!c || !pstart || !preds || !sstart || !succs || !pd__cuts_csr(p, pstart, preds, sstart, succs)) goto fail;
    S = pd__enumerate(p, pstart, preds, words, max_states, &set);
    if (S < 0) goto fail;
    if (S == 0) {
        /* too many ideals: a beam of them per size */
        if (beam < 0) beam = max_states / (2 * (n + 1)) - 1 > 1 ? max_states / (2 * (n + 1)) - 1 : 1;
        c->beam = beam;
        c->prefix_only = beam == 0;
        PD_FREE(set.bits);
        PD_FREE(set.slot);
        set.n = set.cap = 0;
        set.bits = NULL;
        set.slot = NULL;
        S = pd__beam_both(p, pstart, preds, sstart, succs, words, beam, &set);
        if (S < 0) goto fail;
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
    pd__cuts_sums(p, &set, order, sstart, succs, c);
    if ((st = pd__cuts_containment(c, n)) != PD_OK) goto done;
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
