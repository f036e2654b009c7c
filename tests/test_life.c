/* test_life.c - the lifetime packer (pd__life_pack, runtime/engine.c).
 *
 *   test_life [FIXTURES ZOO] [--seed N]
 *
 * Random lifetimes (the seed is printed; --seed gives it back): every two
 * buffers alive at the same time are disjoint, offsets are 64-byte aligned,
 * the total covers them, and the offsets are the quadratic greedy's (the
 * packer before it visited only the buffers alive together: the same
 * placements, so no slab grows). Real models: the engine's slab and the
 * session's activation-gradient slab are no larger than measured with the
 * quadratic packer. */
#include "../runtime/session_impl.h"
#include "check.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t rng;
static uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* The reference: for each buffer by decreasing size (ties by index), every
 * placed buffer alive at the same time, by offset; the lowest gap that fits. */
static size_t ref_pack(int n, const int *first, const int *last, const size_t *size, size_t *off) {
    int *ord = malloc(sizeof(int) * (size_t)n + 1), *placed = malloc(sizeof(int) * (size_t)n + 1);
    for (int k = 0; k < n; k++) ord[k] = k;
    for (int i = 1; i < n; i++) /* insertion sort: stable, no comparator state */
        for (int j = i; j > 0 && pd__align64(size[ord[j]]) > pd__align64(size[ord[j - 1]]); j--) {
            int t = ord[j];
            ord[j] = ord[j - 1], ord[j - 1] = t;
        }
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        int k = ord[i], np = 0;
        size_t sz = pd__align64(size[k]), o = 0;
        for (int j = 0; j < i; j++)
            if (!(last[ord[j]] < first[k] || last[k] < first[ord[j]])) placed[np++] = ord[j];
        for (int a = 1; a < np; a++)
            for (int b = a; b > 0 && off[placed[b]] < off[placed[b - 1]]; b--) {
                int t = placed[b];
                placed[b] = placed[b - 1], placed[b - 1] = t;
            }
        for (int j = 0; j < np; j++) {
            if (off[placed[j]] >= o + sz) break;
            size_t end = off[placed[j]] + pd__align64(size[placed[j]]);
            if (end > o) o = end;
        }
        off[k] = o;
        if (o + sz > total) total = o + sz;
    }
    free(ord);
    free(placed);
    return total;
}

/* One way of packing l against the reference's offsets off and total want. */
static int check_pack(pd__life *l, uint64_t seed, int steps, int span, const int *first, const int *last,
                      const size_t *size, const size_t *off, size_t want, bool quiet) {
    static const char *const way[] = {"chosen", "pairs", "blocks"};
    int n = l->n;
    size_t total = 0;
    int bad = pd__life_pack(l, &total) != PD_OK, overlaps = 0, moved = 0, outside = 0;
    for (int a = 0; a < n && !bad; a++) {
        size_t ea = l->off[a] + pd__align64(size[a]);
        outside += l->off[a] % 64 != 0 || ea > total;
        moved += l->off[a] != off[a];
        for (int b = a + 1; b < n; b++) {
            bool together = !(last[a] < first[b] || last[b] < first[a]);
            size_t eb = l->off[b] + pd__align64(size[b]);
            overlaps += together && size[a] && size[b] && l->off[a] < eb && l->off[b] < ea;
        }
    }
    int wrong = bad || overlaps || outside || moved || total != want;
    if (!quiet) {
        CHECK(!bad && !overlaps && !outside, "seed %llu (%d buffers, %d steps, span %d), %s: no two alive together "
              "overlap (%d), all aligned inside %zu bytes (%d outside)", (unsigned long long)seed, n, steps, span,
              way[l->method], overlaps, total, outside);
        CHECK(!bad && !moved && total == want, "seed %llu, %s: the quadratic greedy's offsets (%d differ) and total (%zu, "
              "want %zu)", (unsigned long long)seed, way[l->method], moved, total, want);
    }
    return wrong;
}

/* One random case: n buffers over `steps` steps, lifetimes of up to `span`
 * steps, a few alive throughout, and some at step -2 (touched nowhere).
 * span < 0: most kept to the end (zero-bubble's split backward keeps every
 * gradient), the rest short; the packer's worst case before. */
static int random_case(uint64_t seed, int n, int steps, int span, bool quiet) {
    rng = seed ? seed : 1;
    pd__life l;
    if (pd__life_init(&l, n) != PD_OK) return 1;
    int *first = malloc(sizeof(int) * (size_t)n + 1), *last = malloc(sizeof(int) * (size_t)n + 1);
    size_t *size = malloc(sizeof(size_t) * (size_t)n + 1), *off = malloc(sizeof(size_t) * (size_t)n + 1);
    for (int k = 0; k < n; k++) {
        int kind = (int)(next() % 16);
        first[k] = (int)(next() % (uint64_t)steps);
        last[k] = span < 0 ? (next() % 4 ? steps : first[k] + (int)(next() % 3)) : first[k] + (int)(next() % (uint64_t)span);
        if (kind == 0) first[k] = -1, last[k] = steps;
        if (kind == 1) first[k] = last[k] = -2;
        size[k] = next() % 4 == 0 ? 64 * (1 + next() % 4) : next() % 5000; /* ties, zero sizes, odd sizes */
        pd__life_add(&l, k, first[k], last[k], size[k]);
    }
    size_t want = ref_pack(n, first, last, size, off);
    int wrong = 0;
    for (l.method = 0; l.method <= 2; l.method++) /* the packer's choice, then each way */
        wrong |= check_pack(&l, seed, steps, span, first, last, size, off, want, quiet);
    free(first), free(last), free(size), free(off);
    pd__life_free(&l);
    return wrong;
}


/* batch 4; the input's other open dims (a sequence length) from x.npy's rows */
static pd_graph *load(const char *dir) {
    char mp[1100], xp[1100];
    snprintf(mp, sizeof mp, "%s/model.onnx", dir);
    snprintf(xp, sizeof xp, "%s/x.npy", dir);
    pd_load_options lo = PD_LOAD_OPTIONS_INIT;
    lo.batch = 4;
    lo.half_as_float = 1;
    pd_tensor x;
    pd_input_shape rows = {NULL, 0, {0}, PD_UNDEFINED};
    if (pd_npy_peek(xp, &x) == PD_OK) {
        rows.ndim = x.ndim;
        memcpy(rows.shape, x.shape, sizeof rows.shape);
        rows.shape[0] = 4;
        lo.n_input_shapes = 1;
        lo.input_shapes = &rows;
    }
    pd_graph *g = NULL;
    return pd_graph_load_file(mp, &lo, &g) == PD_OK ? g : NULL;
}

/* The slabs of one model: the engine's activations, the session's activation gradients. */
static void model_slabs(const char *root, const char *name, size_t engine_max, size_t grads_max) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    pd_graph *g = load(dir);
    pd_engine *e = NULL;
    pd_session *s = NULL;
    pd_train_options o = PD_TRAIN_OPTIONS_INIT;
    o.threads = 1;
    bool ok = g && pd_engine_create(g, NULL, &e) == PD_OK && pd_session_create(g, &o, &s) == PD_OK;
    size_t eb = pd__engine_slab_bytes(e), gb = s ? s->gact_bytes : 0;
    CHECK(ok && eb <= engine_max && gb <= grads_max, "%s: engine slab %zu bytes (quadratic packer: %zu), gradient slab %zu "
          "(quadratic: %zu)%s%s", name, eb, engine_max, gb, grads_max, ok ? "" : ": ", ok ? "" : pd_last_error());
    pd_session_destroy(s);
    pd_engine_destroy(e);
    pd_graph_destroy(g);
}

int main(int argc, char **argv) {
    uint64_t seed = (uint64_t)time(NULL);
    const char *fixtures = NULL, *zoo = NULL;
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "--seed") && a + 1 < argc) seed = strtoull(argv[++a], NULL, 10);
        else if (!fixtures) fixtures = argv[a];
        else zoo = argv[a];
    }
    printf("# seed %llu (give it back with --seed)\n", (unsigned long long)seed);
    int shapes[][3] = {{1, 1, 1},     {2, 1, 1},       {40, 10, 3},     {200, 50, 5},  {300, 20, 20},
                       {300, 300, 1}, {500, 100, 60},  {500, 100, 100}, {400, 50, -1}, {600, 600, -1},
                       {300, 3, 3},   {1000, 1000, 2}, {800, 40, 400}};
    size_t ns = sizeof shapes / sizeof shapes[0];
    for (size_t c = 0; c < ns; c++)
        random_case(seed + c, shapes[c][0], shapes[c][1], shapes[c][2], false);
    /* many small ones: ties, nesting, one step, every span */
    uint64_t first_bad = 0;
    int nbad = 0;
    for (int c = 0; c < 300; c++) {
        uint64_t sd = seed + ns + (uint64_t)c;
        int span = (int)(sd % 6) - 1;
        if (random_case(sd, 1 + (int)(sd * 2654435761u % 30), 1 + (int)(sd / 7 % 7), span ? span : 1, true) && !nbad++)
            first_bad = sd;
    }
    CHECK(!nbad, "300 small cases (seeds %llu..%llu; 1-30 buffers, 1-7 steps, kept to the end or spans 1-4): the "
          "quadratic greedy's offsets, disjoint (%d wrong, first seed %llu)", (unsigned long long)(seed + ns),
          (unsigned long long)(seed + ns + 299), nbad, (unsigned long long)first_bad);
    if (fixtures) {
        /* measured with the quadratic packer (commit f4bf51b) */
        model_slabs(fixtures, "mlp", 5312, 4096);
        model_slabs(fixtures, "resnet", 110784, 98304);
        model_slabs(fixtures, "gpt", 279040, 73728);
        model_slabs(fixtures, "cnn_bn", 17600, 16384);
    }
    if (zoo) {
        model_slabs(zoo, "gpt2-ts", 47360, 38912);
        model_slabs(zoo, "bert-ts", 49408, 18432);
        model_slabs(zoo, "llama-ts", 26880, 18432);
        model_slabs(zoo, "t5-ts", 33024, 24576);
        model_slabs(zoo, "resnet18-dynamo", 180416, 131072);
        model_slabs(zoo, "densenet-ts", 28992, 16384);
        model_slabs(zoo, "vit-ts", 82112, 34816);
        model_slabs(zoo, "unet-ts", 159744, 131072);
    }
    return check_summary();
}
