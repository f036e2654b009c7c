/* gen_mlp.c - writes a wide MLP whose weights are ONNX external data, and data to train it on.
 *
 *   gen_mlp DIR LAYERS WIDTH ROWS [tied]
 *
 * DIR/mlp.onnx: x [N, WIDTH] -> LAYERS x (Gemm WIDTH x WIDTH, Relu) -> Gemm WIDTH x 10 -> y [N, 10];
 * every weight and bias in DIR/mlp.bin (external data, one tensor after another), so a model of
 * hundreds of MB is made at test time from this small file (tests/test_mpi.sh measures per-process
 * memory on it: docs/DISTRIBUTED.md, "Per-stage loading"). DIR/x.npy (float32 [ROWS, WIDTH]) and
 * DIR/y.npy (int64 [ROWS], 10 classes). Values come from a fixed LCG: the same files every time.
 * `tied`: fc1.weight is stored as fc0.weight's transpose, bit for bit (an exporter's tied
 * head: the loader ties them when it reads both, tests/test_export.sh).
 * The protobuf is written by hand (a few fields of ModelProto), with no dependency. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct buf {
    uint8_t *p;
    size_t n, cap;
} buf;

static void put(buf *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        if (!b->p) {
            fprintf(stderr, "gen_mlp: out of memory\n");
            exit(1);
        }
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}

static void varint(buf *b, uint64_t v) {
    uint8_t c[10];
    int n = 0;
    do {
        c[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    put(b, c, (size_t)n);
}

static void fvarint(buf *b, int field, uint64_t v) { varint(b, (uint64_t)field << 3), varint(b, v); }
static void fbytes(buf *b, int field, const void *d, size_t n) {
    varint(b, (uint64_t)field << 3 | 2), varint(b, n), put(b, d, n);
}
static void fstr(buf *b, int field, const char *s) { fbytes(b, field, s, strlen(s)); }
static void fmsg(buf *b, int field, buf *m) { /* appends m as a length-delimited field and frees it */
    fbytes(b, field, m->p, m->n);
    free(m->p);
    *m = (buf){0};
}

static uint64_t lcg = 0x9e3779b97f4a7c15ull;
static float rnd(float scale) { /* uniform in [-scale, scale) */
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return scale * ((float)(lcg >> 40) / (float)(1u << 24) * 2 - 1);
}

/* A float initializer of shape dims in the external file at its current end:
 * random, or tr's transpose (2-D, tr of dims reversed); keep: the values (caller frees). */
static void initializer(buf *graph, FILE *bin, long *off, const char *name, int ndim, const int64_t *dims,
                        float scale, const float *tr, float **keep) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= dims[i];
    float *v = malloc(sizeof(float) * (size_t)n);
    if (!v) exit(1);
    for (int64_t i = 0; i < n; i++) v[i] = tr ? tr[(i % dims[1]) * dims[0] + i / dims[1]] : rnd(scale);
    fwrite(v, sizeof(float), (size_t)n, bin);
    if (keep) *keep = v;
    else free(v);
    buf t = {0}, kv = {0};
    char s[32];
    for (int i = 0; i < ndim; i++) fvarint(&t, 1, (uint64_t)dims[i]);
    fvarint(&t, 2, 1); /* FLOAT */
    fstr(&t, 8, name);
    const char *keys[3] = {"location", "offset", "length"};
    for (int k = 0; k < 3; k++) {
        if (k == 0) snprintf(s, sizeof s, "mlp.bin");
        if (k == 1) snprintf(s, sizeof s, "%ld", *off);
        if (k == 2) snprintf(s, sizeof s, "%lld", (long long)n * 4);
        fstr(&kv, 1, keys[k]), fstr(&kv, 2, s);
        fmsg(&t, 13, &kv);
    }
    fvarint(&t, 14, 1); /* EXTERNAL */
    fmsg(graph, 5, &t);
    *off += (long)n * 4;
}

static void node(buf *graph, const char *op, const char *name, int nin, const char **in, const char *out) {
    buf n = {0};
    for (int i = 0; i < nin; i++) fstr(&n, 1, in[i]);
    fstr(&n, 2, out), fstr(&n, 3, name), fstr(&n, 4, op);
    fmsg(graph, 1, &n);
}

/* ValueInfoProto: float [N, d] (N symbolic). */
static void value_info(buf *graph, int field, const char *name, int64_t d) {
    buf v = {0}, type = {0}, tt = {0}, shape = {0}, dim = {0};
    fstr(&dim, 2, "N"), fmsg(&shape, 1, &dim);
    fvarint(&dim, 1, (uint64_t)d), fmsg(&shape, 1, &dim);
    fvarint(&tt, 1, 1), fmsg(&tt, 2, &shape);
    fmsg(&type, 1, &tt);
    fstr(&v, 1, name), fmsg(&v, 2, &type);
    fmsg(graph, field, &v);
}

static void npy(const char *path, const char *descr, int ndim, const int64_t *shape, const void *d, size_t bytes) {
    char h[128], dims[64];
    if (ndim == 1) snprintf(dims, sizeof dims, "(%lld,)", (long long)shape[0]);
    else snprintf(dims, sizeof dims, "(%lld, %lld)", (long long)shape[0], (long long)shape[1]);
    int n = snprintf(h, sizeof h, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, dims);
    int total = (10 + n + 1 + 63) / 64 * 64;
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(1);
    }
    uint16_t hl = (uint16_t)(total - 10);
    fwrite("\x93NUMPY\x01\x00", 1, 8, f), fwrite(&hl, 2, 1, f), fwrite(h, 1, (size_t)n, f);
    for (int i = 10 + n; i < total - 1; i++) fputc(' ', f);
    fputc('\n', f);
    fwrite(d, 1, bytes, f);
    fclose(f);
}

int main(int argc, char **argv) {
    bool tied = argc == 6 && !strcmp(argv[5], "tied");
    if (argc != 5 && !tied) {
        fprintf(stderr, "usage: gen_mlp DIR LAYERS WIDTH ROWS [tied]\n");
        return 2;
    }
    const char *dir = argv[1];
    int layers = atoi(argv[2]);
    int64_t width = atoll(argv[3]), rows = atoll(argv[4]);
    if (layers < 1 || width < 1 || rows < 1) {
        fprintf(stderr, "gen_mlp: LAYERS, WIDTH and ROWS must be >= 1\n");
        return 2;
    }
    if (tied && layers < 2) {
        fprintf(stderr, "gen_mlp: tied needs 2 layers or more\n");
        return 2;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/mlp.bin", dir);
    FILE *bin = fopen(path, "wb");
    if (!bin) {
        perror(path);
        return 1;
    }
    buf graph = {0}, model = {0}, opset = {0};
    long off = 0;
    char x[32], y[32], h[32], w[32], b[32], nm[32];
    float *w0 = NULL; /* tied: fc0.weight's values */
    snprintf(x, sizeof x, "x");
    for (int l = 0; l <= layers; l++) {
        int64_t out = l == layers ? 10 : width, wd[2] = {width, out};
        snprintf(w, sizeof w, "fc%d.weight", l), snprintf(b, sizeof b, "fc%d.bias", l);
        initializer(&graph, bin, &off, w, 2, wd, 1.0f / (float)width * 1.7f, tied && l == 1 ? w0 : NULL,
                    tied && l == 0 ? &w0 : NULL);
        initializer(&graph, bin, &off, b, 1, &out, 0.01f, NULL, NULL);
        snprintf(h, sizeof h, l == layers ? "y" : "h%d", l);
        snprintf(nm, sizeof nm, "fc%d", l);
        const char *in[3] = {x, w, b};
        node(&graph, "Gemm", nm, 3, in, h);
        if (l == layers) break;
        snprintf(y, sizeof y, "r%d", l), snprintf(nm, sizeof nm, "relu%d", l);
        const char *rin[1] = {h};
        node(&graph, "Relu", nm, 1, rin, y);
        snprintf(x, sizeof x, "%s", y);
    }
    fclose(bin);
    free(w0);
    fstr(&graph, 2, "mlp");
    value_info(&graph, 11, "x", width);
    value_info(&graph, 12, "y", 10);
    fvarint(&model, 1, 8); /* ir_version */
    fstr(&model, 2, "gen_mlp");
    fmsg(&model, 7, &graph);
    fvarint(&opset, 2, 13);
    fmsg(&model, 8, &opset);
    snprintf(path, sizeof path, "%s/mlp.onnx", dir);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(model.p, 1, model.n, f) != model.n || fclose(f) != 0) {
        perror(path);
        return 1;
    }
    free(model.p);
    float *xs = malloc(sizeof(float) * (size_t)(rows * width));
    int64_t *ys = malloc(sizeof(int64_t) * (size_t)rows);
    if (!xs || !ys) return 1;
    for (int64_t i = 0; i < rows * width; i++) xs[i] = rnd(1.0f);
    for (int64_t i = 0; i < rows; i++) ys[i] = (int64_t)(lcg >> 33) % 10, rnd(1.0f);
    int64_t xsh[2] = {rows, width};
    snprintf(path, sizeof path, "%s/x.npy", dir);
    npy(path, "<f4", 2, xsh, xs, sizeof(float) * (size_t)(rows * width));
    snprintf(path, sizeof path, "%s/y.npy", dir);
    npy(path, "<i8", 1, &rows, ys, sizeof(int64_t) * (size_t)rows);
    free(xs);
    free(ys);
    return 0;
}
