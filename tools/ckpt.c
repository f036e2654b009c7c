/* ckpt.c - what of checkpoints is the CLI's (ckpt.h, docs/CHECKPOINT.md):
 * --resume's checks and `pdonnx export`. When `pdonnx train` takes its
 * checkpoints is the library's (runtime/ckpt_policy.c). */
#include "ckpt.h"
#include "../runtime/session.h"
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- resume ---- */

static void pd__warn(void *ctx, const char *msg) {
    (void)ctx;
    fprintf(stderr, "pdonnx: warning: %s\n", msg);
}

pd_status pd_cli_ckpt_load(const char *dir, const cJSON *expect, pd__ckpt *out, cJSON **info) {
    pd__ckpt c;
    pd_status st = pd__ckpt_read_latest(dir, &c, pd__warn, NULL);
    if (st != PD_OK) return pd__err(st, "--resume %s", pd_last_error()); /* "DIR: what is wrong" */
    cJSON *got = cJSON_Parse(c.info_json);
    if (!got) {
        pd__ckpt_free(&c);
        return pd__err(PD_ERR_PARSE, "--resume %s: the manifest's info is not JSON", dir);
    }
    /* every field of the run the state depends on must be as it was; where the
     * model lies may change, and the graph's batch follows from batch and microbatches */
    static const char *const skip[] = {"plan", "model", "graph_batch", NULL};
    char was[256], now[256];
    const char *field = pd__ckpt_info_diff(expect, got, skip, was, now, sizeof was);
    if (field) {
        st = pd__err(PD_ERR_INVALID, "--resume %s: %s was taken with %s %s, this run has %s (resume with the same "
                     "settings)", dir, c.path, field, was, now);
        cJSON_Delete(got);
        pd__ckpt_free(&c);
        return st;
    }
    *out = c;
    *info = got;
    return PD_OK;
}

/* ---- pdonnx export ----
 * Streams (docs/CHECKPOINT.md, "Export streams"): the model is loaded with
 * lazy weights and the checkpoint opened with no part held; each record's
 * value goes into the graph when the model holds it inline, else in 1 MiB
 * chunks to OUT.onnx.data; frozen initializers are copied from the model's
 * file one at a time. The peak is the graph, a chunk and the largest frozen
 * tensor, never a part. PDONNX_LAZY_WEIGHTS=0: everything in memory, a
 * self-contained OUT.onnx (the test's baseline). */

enum { PD_EXPORT_CHUNK = 1 << 20 };

typedef struct pd__export {
    pd_graph *g;
    const char *model; /* for messages */
    bool *got;         /* per tensor: a record gave its value */
    int64_t *src_off;  /* per deferred tensor: its offset in the model's file (ext_off moves to data's) */
    int fd;            /* data's temporary; -1 until the first deferred tensor */
    char data[4200];   /* OUT.onnx.data */
    char tmp[4300];
    const char *loc;   /* data's name beside OUT.onnx: the location the model refers to */
    int64_t off;       /* bytes written to data */
    int64_t weights;   /* WEIGHT records applied */
    bool untie;        /* the run untied its ties (--untie): none to follow */
    char what[4300];   /* the part being read, for messages */
    char *chunk;       /* PD_EXPORT_CHUNK bytes: a deferred tensor's value on its way to data */
} pd__export;

/* x refers to the data file from its end on (what is appended next is its value). */
static pd_status pd__export_point(pd__export *e, pd__tensor *x) {
    if (e->fd < 0 && (e->fd = open(e->tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644)) < 0)
        return pd__err(PD_ERR_IO, "%s: cannot write: %s", e->data, strerror(errno));
    PD_FREE(x->ext_loc);
    if (!(x->ext_loc = pd__strdup(e->loc))) return pd__err(PD_ERR_NOMEM, "out of memory");
    x->ext_off = e->off;
    return PD_OK;
}

/* Appends n bytes to the data file. */
static pd_status pd__export_append(pd__export *e, const void *d, size_t n) {
    for (size_t off = 0; off < n;) {
        ssize_t w = write(e->fd, (const char *)d + off, n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return pd__err(PD_ERR_IO, "%s: write failed: %s", e->data, strerror(errno));
        off += (size_t)w;
    }
    e->off += (int64_t)n;
    return PD_OK;
}

static pd_status pd__export_put(pd__export *e, pd__tensor *x, const void *d, size_t n) {
    PD_TRY(pd__export_point(e, x));
    return pd__export_append(e, d, n);
}

/* The tensor a weight or buffer record r of part `what` is the value of (NULL
 * for other records), or an error naming both. */
static pd_status pd__export_target(pd__export *e, const pd__rec *r, const char *what, int *t) {
    *t = -1;
    if (r->kind != PD_REC_WEIGHT && r->kind != PD_REC_BUFFER) return PD_OK;
    char name[512];
    snprintf(name, sizeof name, "%.*s", (int)(r->name_len < 511 ? r->name_len : 511), r->name);
    int k = pd__graph_find(e->g, name);
    pd__tensor *x = k >= 0 ? &e->g->tensors[k] : NULL;
    if (!x || x->kind != PD_T_INIT || (!x->data && !pd__deferred(x)) ||
        r->bytes != (uint64_t)x->numel * pd_dtype_size(x->dtype))
        return pd__err(PD_ERR_INVALID, "%s: '%s' is not an initializer of that size in %s (another model?)", what, name,
                       e->model);
    *t = k;
    e->got[k] = true;
    e->weights += r->kind == PD_REC_WEIGHT;
    if (r->kind == PD_REC_WEIGHT) x->trained = true; /* the saved model's training_info lists it */
    return PD_OK;
}

/* A record streamed from a part (pd__ckpt_part_stream): into the graph when
 * its tensor is inline, else appended to the data file in chunks. */
static pd_status pd__export_streamed(void *ctx, const pd__rec *r, pd__ckpt_stream *s) {
    pd__export *e = ctx;
    int t;
    PD_TRY(pd__export_target(e, r, e->what, &t));
    if (t < 0) return PD_OK;
    pd__tensor *x = &e->g->tensors[t];
    if (x->data) return pd__ckpt_stream_read(s, x->data, (size_t)r->bytes);
    PD_TRY(pd__export_point(e, x));
    for (uint64_t left = r->bytes; left > 0;) {
        size_t n = left < PD_EXPORT_CHUNK ? (size_t)left : PD_EXPORT_CHUNK;
        PD_TRY(pd__ckpt_stream_read(s, e->chunk, n));
        PD_TRY(pd__export_append(e, e->chunk, n));
        left -= n;
    }
    return PD_OK;
}

/* Part i: streamed, or (whole) from memory, then freed. */
static pd_status pd__export_part(pd__export *e, pd__ckpt *c, int i) {
    snprintf(e->what, sizeof e->what, "%s/part-%d.bin", c->path, i);
    if (!c->parts[i]) return pd__ckpt_part_stream(c, i, pd__export_streamed, e);
    size_t off = 0;
    pd_status st = PD_OK;
    for (;;) {
        pd__rec r;
        bool end;
        int t;
        if ((st = pd__rec_next(c->parts[i], c->lens[i], &off, &r, &end, e->what)) != PD_OK || end) break;
        if ((st = pd__export_target(e, &r, e->what, &t)) != PD_OK) break;
        if (t >= 0) memcpy(e->g->tensors[t].data, r.data, (size_t)r.bytes); /* whole: nothing is deferred */
    }
    PD_FREE(c->parts[i]);
    c->parts[i] = NULL;
    return st;
}

/* A 2-D x whose values v could be a tie's (pd__tie_candidate's rule: not all
 * equal, not a symmetric square, not a constant by its train rule). */
static bool pd__export_candidate(const pd__tensor *x, const float *v) {
    if (x->ndim != 2 || x->numel < 2 || x->train == PD_TR_SCALAR || x->train == PD_TR_UNLISTED ||
        x->train == PD_TR_EXPORTER)
        return false;
    const uint32_t *u = (const uint32_t *)v;
    bool same = true, sym = x->shape[0] == x->shape[1];
    for (int64_t i = 1; i < x->numel && same; i++) same = u[i] == u[0];
    for (int64_t i = 0; i < x->shape[0] && sym; i++)
        for (int64_t j = 0; j < i && sym; j++) sym = u[i * x->shape[1] + j] == u[j * x->shape[1] + i];
    return !same && !sym;
}

/* Whether B (c x r, its file's values) may be the transpose of A (r x c,
 * values va): its first column, up to 8 elements read one at a time, is A's
 * first row (so that only a likely tie costs a read of B: frozen layers
 * against trained ones of the same shape would read each pair). */
static pd_status pd__export_probe(const pd__tensor *B, const float *va, int64_t c, bool *maybe) {
    pd__tensor one = *B;
    one.numel = 1;
    *maybe = true;
    for (int64_t j = 0; j < c && j < 8 && *maybe; j++) {
        float v;
        one.ext_off = B->ext_off + (int64_t)sizeof(float) * j * B->shape[1];
        PD_TRY(pd__tensor_read(&one, &v));
        *maybe = memcmp(&v, &va[j], sizeof v) == 0;
    }
    return PD_OK;
}

/* The recorded deferred initializer that a (unrecorded, deferred, values va)
 * is stored as the transpose of in the model's file, -1 if none: the tie the
 * loader makes when it reads every weight (pd__tie_transposes; lazy_weights
 * does not look), under which the run trained that one alone. */
static pd_status pd__export_tie(pd__export *e, int a, const float *va, float *vb, int *src) {
    const pd__tensor *A = &e->g->tensors[a];
    *src = -1;
    if (e->untie || !pd__export_candidate(A, va)) return PD_OK;
    int64_t r = A->shape[0], c = A->shape[1];
    for (int b = 0; b < e->g->ntensors && *src < 0; b++) {
        pd__tensor B = e->g->tensors[b];
        if (!e->got[b] || !B.ext_loc || B.data || B.ndim != 2 || B.shape[0] != c || B.shape[1] != r) continue;
        B.ext_off = e->src_off[b]; /* its value in the model's file, before training */
        bool maybe;
        PD_TRY(pd__export_probe(&B, va, c, &maybe));
        if (!maybe) continue;
        PD_TRY(pd__tensor_read(&B, vb));
        bool eq = true;
        for (int64_t i = 0; i < r && eq; i++)
            for (int64_t j = 0; j < c && eq; j++) eq = memcmp(&va[i * c + j], &vb[j * r + i], sizeof(float)) == 0;
        if (eq) *src = b;
    }
    return PD_OK;
}

/* Deferred initializer t, which no part holds: its value from the model's
 * file, or the transpose of its tie's trained one (read back from data). */
static pd_status pd__export_copy(pd__export *e, int t, float *v, float *w) {
    pd__tensor *x = &e->g->tensors[t];
    int src;
    PD_TRY(pd__tensor_read(x, v));
    PD_TRY(pd__export_tie(e, t, v, w, &src));
    size_t n = sizeof(float) * (size_t)x->numel;
    if (src >= 0) {
        int64_t r = x->shape[0], c = x->shape[1];
        PD_TRY(pd__pread_all(e->fd, e->data, w, n, e->g->tensors[src].ext_off));
        for (int64_t i = 0; i < r; i++)
            for (int64_t j = 0; j < c; j++) v[i * c + j] = w[j * r + i];
    }
    return pd__export_put(e, x, v, n);
}

/* Deferred initializers no part holds, one at a time (two buffers of the largest). */
static pd_status pd__export_rest(pd__export *e) {
    int64_t most = 1;
    for (int t = 0; t < e->g->ntensors; t++)
        if (!e->got[t] && pd__deferred(&e->g->tensors[t]) && e->g->tensors[t].numel > most)
            most = e->g->tensors[t].numel;
    float *v = PD_MALLOC(sizeof(float) * (size_t)most), *w = PD_MALLOC(sizeof(float) * (size_t)most);
    pd_status st = v && w ? PD_OK
                          : pd__err(PD_ERR_NOMEM, "out of memory for a %lld-element initializer", (long long)most);
    for (int t = 0; t < e->g->ntensors && st == PD_OK; t++)
        if (!e->got[t] && pd__deferred(&e->g->tensors[t])) st = pd__export_copy(e, t, v, w);
    PD_FREE(v);
    PD_FREE(w);
    return st;
}

/* The data file into place (fsynced), then the model; nothing is left at
 * either path when one fails. */
static pd_status pd__export_write(pd__export *e, const char *outp) {
    bool placed = e->fd >= 0;
    if (placed) {
        int fd = e->fd;
        e->fd = -1;
        bool ok = fsync(fd) == 0;
        ok = close(fd) == 0 && ok;
        if (!ok) return pd__err(PD_ERR_IO, "%s: write failed: %s", e->data, strerror(errno));
        if (rename(e->tmp, e->data) != 0)
            return pd__err(PD_ERR_IO, "%s: cannot rename into place: %s", e->data, strerror(errno));
    }
    pd_status st = pd_graph_save(e->g, outp);
    if (st != PD_OK && placed) unlink(e->data);
    return st;
}

/* The checkpoint: DIR itself when it holds a manifest, else DIR's newest
 * valid one; whole: every part read and kept. */
static pd_status pd__export_open(const char *dir, bool whole, pd__ckpt *c) {
    char mf[4200];
    snprintf(mf, sizeof mf, "%s/manifest.json", dir);
    FILE *f = fopen(mf, "r");
    if (f) fclose(f);
    if (f) return whole ? pd__ckpt_read(dir, c) : pd__ckpt_open(dir, c);
    return whole ? pd__ckpt_read_latest(dir, c, pd__warn, NULL) : pd__ckpt_open_latest(dir, c, pd__warn, NULL);
}

/* The model trained (model, else the one info names), loaded as pdonnx train
 * loaded it (with --untie's ties untied, so that each copy's record has its tensor). */
static pd_status pd__export_load(const char *model, const pd__ckpt *c, const cJSON *info, bool whole, pd_graph **g) {
    const cJSON *m = cJSON_GetObjectItem(info, "model"), *b = cJSON_GetObjectItem(info, "graph_batch");
    if (!model) model = cJSON_IsString(m) ? m->valuestring : NULL;
    if (!model) return pd__err(PD_ERR_INVALID, "%s names no model: give --model MODEL.onnx", c->path);
    pd_load_options lo = PD_LOAD_OPTIONS_INIT;
    lo.half_as_float = 1;
    lo.lazy_weights = !whole;
    lo.untie = cJSON_IsTrue(cJSON_GetObjectItem(info, "untie"));
    if (!pd__ckpt_json_int(b, 0, INT32_MAX, &lo.batch)) lo.batch = 0;
    return pd_graph_load_file(model, &lo, g);
}

/* Checkpoint c's weights into the model, written to outp (and outp.data). */
static pd_status pd__export_run(pd__export *e, pd__ckpt *c, const char *outp) {
    if (strlen(outp) > 4000) return pd__err(PD_ERR_INVALID, "%s: path too long", outp);
    snprintf(e->data, sizeof e->data, "%s.data", outp);
    snprintf(e->tmp, sizeof e->tmp, "%s.tmp.%ld", e->data, (long)getpid());
    const char *slash = strrchr(e->data, '/');
    e->loc = slash ? slash + 1 : e->data;
    PD_TRY(pd__check_dest(outp));
    bool deferred = false;
    for (int t = 0; t < e->g->ntensors && !deferred; t++) deferred = pd__deferred(&e->g->tensors[t]);
    if (deferred) PD_TRY(pd__check_dest(e->data));
    e->got = PD_CALLOC((size_t)e->g->ntensors + 1, sizeof(bool));
    e->src_off = PD_CALLOC((size_t)e->g->ntensors + 1, sizeof(int64_t));
    e->chunk = PD_MALLOC(PD_EXPORT_CHUNK);
    if (!e->got || !e->src_off || !e->chunk) return pd__err(PD_ERR_NOMEM, "out of memory");
    for (int t = 0; t < e->g->ntensors; t++) e->src_off[t] = e->g->tensors[t].ext_off;
    for (int i = 0; i < c->nparts; i++) PD_TRY(pd__export_part(e, c, i));
    PD_TRY(pd__export_rest(e));
    return pd__export_write(e, outp);
}

int pd_cli_export(int argc, char **argv) {
    const char *dir = NULL, *outp = NULL, *model = NULL;
    const pd_flag t[] = {
        {"-o", PD_FLAG_STR, &outp, 0, 0, 0, "OUT.onnx",
         "the model with the checkpoint's weights (external ones in OUT.onnx.data)", NULL, 0},
        {"--output", PD_FLAG_STR, &outp, 0, 0, 0, "OUT.onnx", "the same as -o", NULL, 0},
        {"--model", PD_FLAG_STR, &model, 0, 0, 0, "MODEL.onnx", "the model trained (default: the one the checkpoint names)", NULL, 0},
    };
    int nt = (int)(sizeof t / sizeof t[0]);
    if (pd_cli_wants_help(argc, argv)) return pd_cli_help("pdonnx export CHECKPOINT_DIR -o OUT.onnx [flags]", t, nt);
    int bad = pd_cli_flags("export", t, nt, NULL, argc, argv, &dir, 1);
    if (bad) return bad;
    if (!dir || !outp) return pd_cli_usage_error("export: %s", "usage: pdonnx export CHECKPOINT_DIR -o MODEL.onnx");
    const char *lz = getenv("PDONNX_LAZY_WEIGHTS");
    bool whole = lz && strcmp(lz, "0") == 0;
    pd__ckpt c;
    memset(&c, 0, sizeof c);
    if (pd__export_open(dir, whole, &c) != PD_OK) return pd_cli_fail();
    pd__export e = {.model = model, .fd = -1};
    cJSON *info = cJSON_Parse(c.info_json);
    pd_status st = pd__export_load(model, &c, info, whole, &e.g);
    e.untie = cJSON_IsTrue(cJSON_GetObjectItem(info, "untie"));
    if (!e.model) e.model = e.g ? e.g->path : "the model";
    if (st == PD_OK) st = pd__export_run(&e, &c, outp);
    if (e.fd >= 0) close(e.fd);
    if (st != PD_OK) unlink(e.tmp);
    if (st == PD_OK) {
        printf("exported %s (step %lld, %lld trained tensors) to %s", c.path, (long long)c.step, (long long)e.weights,
               outp);
        if (e.off > 0) printf(" (weights as external data: %s, %lld bytes)", e.data, (long long)e.off);
        printf("\n");
    }
    pd_graph_destroy(e.g);
    PD_FREE(e.got);
    PD_FREE(e.src_off);
    PD_FREE(e.chunk);
    cJSON_Delete(info);
    pd__ckpt_free(&c);
    return st == PD_OK ? 0 : pd_cli_fail();
}
