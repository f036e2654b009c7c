/* train.c - `pdonnx train`: single-stage training from .npy data.
 *
 * A model may come with default flags in a file beside it, MODEL.flags
 * (MODEL.onnx -> MODEL.flags): whitespace-separated flags, '#' comments,
 * data paths relative to that file. Flags on the command line come after
 * them and win. That is how `pdonnx train examples/digits_mlp.onnx` trains
 * the bundled model on the bundled digits with nothing else given.
 */
#include "../core/schedule.h"
#include "../runtime/data.h"
#include "../runtime/optim.h"
#include "../runtime/pipeline.h"
#include "../runtime/comm/transport.h"
#include "../runtime/session.h"
#include "../runtime/trainer.h"
#include "ckpt.h"
#include "cli.h"
#include "train_pipe.h"
#include "train_avgpipe.h"

#include <errno.h>
#include <glob.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PD_MAX_ARGS 256

typedef struct {
    const char *model, *data, *labels, *val_x, *val_y, *metrics, *save;
    const char *plan, *schedule, *trace; /* pipeline training */
    const char *trace_all;               /* under MPI: rank 0's --trace, gathered from every process */
    const char *stage_save;              /* under MPI: every process's --save (pd_trainer_save is collective) */
    bool lazy;                           /* each process reads its stages' weights only (docs/DISTRIBUTED.md) */
    const char *ckpt_dir, *resume;       /* checkpoints */
    int64_t ckpt_every, ckpt_keep;       /* every: PD_CHECKPOINT_AUTO */
    double ckpt_overhead;
    int64_t stages, microbatches, virtual_stages;
    int64_t max_constant_bytes; /* 0: the loader's default */
    pd_load_options lo;         /* how the model was loaded (its input shapes left out) */
    pd_train_options o;
    int64_t batch, steps, epochs, seed;
    bool shuffle, cosine, quiet, vertical_sync, untie, recompute;
    char *owned[PD_MAX_ARGS]; /* strings we allocated */
    int nowned;
} pd__targs;

static double pd__now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}


/* Flags that name a path pdonnx writes: a .flags file that came with a
 * downloaded model must not choose what gets overwritten. */
static const char *const pd__flags_writers[] = {"--save", "--metrics", "--trace", "--checkpoint-dir", "--resume", NULL};

/* Reads MODEL.flags into argv-style tokens; data paths are made relative to
 * its folder. -1 (after a one-line error) when the file sets an output path. */
static int pd__read_flags(pd__targs *a, const char *model, char **tok, int max) {
    size_t n = strlen(model);
    if (n < 5 || strcmp(model + n - 5, ".onnx") != 0) return 0;
    char path[4096];
    snprintf(path, sizeof path, "%.*s.flags", (int)(n - 5), model);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    const char *slash = strrchr(path, '/');
    int dirlen = slash ? (int)(slash - path) : 0;
    int nt = 0;
    char line[1024];
    bool path_next = false;
    int path_left = 0;
    while (fgets(line, sizeof line, f)) {
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        for (char *w = strtok(line, " \t\r\n"); w && nt < max; w = strtok(NULL, " \t\r\n")) {
            for (int k = 0; pd__flags_writers[k]; k++)
                if (!strcmp(w, pd__flags_writers[k])) {
                    fclose(f);
                    fprintf(stderr,
                            "pdonnx: %s: %s names a file pdonnx writes; a .flags file may set only training "
                            "settings (give %s on the command line)\n",
                            path, w, w);
                    return -1;
                }
            char *t;
            if (path_next && w[0] != '/' && dirlen) {
                t = malloc((size_t)dirlen + strlen(w) + 2);
                sprintf(t, "%.*s/%s", dirlen, path, w);
            } else {
                t = strdup(w);
            }
            if (path_left > 0 && --path_left == 0) path_next = false;
            if (!strcmp(w, "--data") || !strcmp(w, "--labels")) path_next = true, path_left = 1;
            if (!strcmp(w, "--val")) path_next = true, path_left = 2;
            if (a->nowned < PD_MAX_ARGS) a->owned[a->nowned++] = t;
            tok[nt++] = t;
        }
    }
    fclose(f);
    if (!a->quiet) printf("using default flags from %s\n", path);
    return nt;
}

/* ---- flags: one row each (tools/flags.c parses them and prints --help) ---- */

static int pd__flag_val(void *ctx, const char *cmd, const pd_flag *f, char **v) {
    (void)cmd, (void)f;
    pd__targs *a = ctx;
    a->val_x = v[0], a->val_y = v[1];
    return 0;
}

/* --steps and --epochs: the last one given counts */
static int pd__flag_length(void *ctx, const char *cmd, const pd_flag *f, char **v) {
    (void)cmd;
    pd__targs *a = ctx;
    bool steps = !strcmp(f->name, "--steps");
    if (!pd_cli_parse_int(f->name, v[0], 1, steps ? INT64_MAX / 2 : INT32_MAX, steps ? &a->steps : &a->epochs))
        return 2;
    if (steps) a->epochs = 0;
    else a->steps = 0;
    return 0;
}

static int pd__flag_device(void *ctx, const char *cmd, const pd_flag *f, char **v) { /* docs/CUDA.md */
    (void)cmd;
    pd__targs *a = ctx;
    bool dev = !strcmp(f->name, "--device");
    if (pd_train_options_set_device(&a->o, dev ? v[0] : NULL, dev ? NULL : v[0]) != PD_OK)
        return pd_cli_usage_error("train: %s", pd_cli_error());
    return 0;
}

static int pd__flag_ckpt_every(void *ctx, const char *cmd, const pd_flag *f, char **v) {
    (void)cmd;
    pd__targs *a = ctx;
    if (!strcmp(v[0], "auto")) return a->ckpt_every = PD_CHECKPOINT_AUTO, 0;
    return pd_cli_parse_int(f->name, v[0], 1, INT64_MAX / 4, &a->ckpt_every) ? 0 : 2;
}

#define PD__STR(nm, dst, mv, help) {nm, PD_FLAG_STR, dst, 0, 0, 0, mv, help, NULL, 0}
#define PD__INT(nm, dst, lo, hi, help) {nm, PD_FLAG_INT, dst, lo, hi, 0, "N", help, NULL, 0}
#define PD__INT32(nm, dst, lo, hi, help) {nm, PD_FLAG_INT32, dst, lo, hi, 0, "N", help, NULL, 0}
#define PD__NUM(nm, dst, min, help) {nm, PD_FLAG_DOUBLE, dst, 0, 0, min, "F", help, NULL, 0}
#define PD__SET(nm, dst, help) {nm, PD_FLAG_SET, dst, 0, 0, 0, NULL, help, NULL, 0}
#define PD__FN(nm, fn, k, mv, help) {nm, PD_FLAG_FN, NULL, 0, 0, 0, mv, help, fn, k}

/* train's flags, pointing into *a; returns how many */
static int pd__train_flags(pd__targs *a, pd_flag *t) {
    const pd_flag rows[] = {
        PD__STR("--data", &a->data, "X.npy", "training inputs, rows first; a pattern ('x-*.npy') reads shards in order"),
        PD__STR("--labels", &a->labels, "Y.npy", "labels, one row per input row (a pattern as for --data)"),
        PD__FN("--val", pd__flag_val, 2, "XV.npy YV.npy", "validation inputs and labels, scored after each epoch"),
        {"--loss", PD_FLAG_CHOICE, &a->o.loss, 0, 0, 0, "auto|cross_entropy|mse|graph", "the loss (graph: the model's own)", NULL, 0},
        PD__STR("--output", &a->o.output, "NAME", "the output the loss reads (default: the first)"),
        {"--optimizer", PD_FLAG_CHOICE, &a->o.optimizer, 0, 0, 0, "sgd|momentum|nesterov|adam|adamw", "the optimizer (default sgd)", NULL, 0},
        PD__NUM("--lr", &a->o.lr, 0, "learning rate"),
        PD__NUM("--momentum", &a->o.momentum, 0, "momentum (momentum, nesterov)"),
        PD__NUM("--beta1", &a->o.beta1, 0, "Adam's beta1"),
        PD__NUM("--beta2", &a->o.beta2, 0, "Adam's beta2"),
        PD__NUM("--eps", &a->o.eps, 0, "Adam's epsilon"),
        PD__NUM("--weight-decay", &a->o.weight_decay, 0, "weight decay (decoupled under adamw)"),
        PD__NUM("--clip-grad-norm", &a->o.clip_grad_norm, 0, "clip the global gradient norm to F (0: off)"),
        PD__NUM("--min-lr", &a->o.min_lr, 0, "the cosine schedule's floor"),
        PD__INT("--warmup", &a->o.warmup_steps, 0, INT32_MAX, "linear warm-up over N steps"),
        PD__SET("--cosine", &a->cosine, "cosine decay of the learning rate over the run"),
        PD__STR("--freeze", &a->o.freeze, "REGEX", "do not train the initializers whose names match"),
        PD__STR("--trainable", &a->o.trainable, "REGEX", "train these too (an exporter's constants the default leaves out)"),
        PD__SET("--untie", &a->untie, "give initializers an exporter tied their own copies"),
        PD__INT("--batch", &a->batch, 1, INT32_MAX, "rows per step (default 32)"),
        PD__FN("--steps", pd__flag_length, 1, "N", "train N steps"),
        PD__FN("--epochs", pd__flag_length, 1, "N", "train N passes over the data (default 1)"),
        {"--no-shuffle", PD_FLAG_CLEAR, &a->shuffle, 0, 0, 0, NULL, "read the rows in order (default: shuffled per epoch)", NULL, 0},
        PD__SET("--shuffle", &a->shuffle, "shuffle the rows per epoch (the default)"),
        PD__INT("--seed", &a->seed, 0, INT64_MAX, "the shuffle's and initial state's seed"),
        PD__INT32("--threads", &a->o.threads, 1, 1024, "compute threads (default: the cores this process may use)"),
        PD__FN("--device", pd__flag_device, 1, "cpu|cuda[:N]", "where to train (docs/CUDA.md)"),
        PD__FN("--precision", pd__flag_device, 1, "fp32|tf32|bf16", "a GPU's math"),
        PD__STR("--metrics", &a->metrics, "FILE.jsonl", "one JSON line per step"),
        PD__STR("--save", &a->save, "OUT.onnx", "the trained model"),
        PD__INT("--stages", &a->stages, 1, 4096, "a pipeline of N stages (profiled and planned)"),
        PD__STR("--plan", &a->plan, "PLAN.json", "a pipeline from a plan (pdonnx plan)"),
        PD__STR("--schedule", &a->schedule, "KIND", "gpipe, flush (default), pipedream, 2bw, interleaved or zb-h1"),
        PD__INT("--microbatches", &a->microbatches, 1, 1 << 20, "microbatches per step"),
        PD__INT("--virtual-stages", &a->virtual_stages, 2, 64, "chunks per stage (interleaved)"),
        PD__SET("--vertical-sync", &a->vertical_sync, "pipedream: every stage uses stage 0's weight version"),
        PD__SET("--recompute", &a->recompute, "keep only what each stage receives per microbatch, redo its forward before its backward"),
        PD__STR("--trace", &a->trace, "OUT.json", "a Chrome trace of the pipeline's steps"),
        PD__STR("--checkpoint-dir", &a->ckpt_dir, "DIR", "take checkpoints there"),
        PD__FN("--checkpoint-every", pd__flag_ckpt_every, 1, "N|auto", "a checkpoint every N steps (auto: CheckFreq's rate)"),
        PD__INT("--checkpoint-keep", &a->ckpt_keep, 0, INT32_MAX, "keep the newest N checkpoints (0: all)"),
        PD__NUM("--checkpoint-overhead", &a->ckpt_overhead, 1e-6, "auto's budget: checkpoints cost at most this share of the time"),
        PD__STR("--resume", &a->resume, "DIR", "continue from the newest valid checkpoint there"),
        PD__INT("--max-constant-bytes", &a->max_constant_bytes, 1, INT64_MAX, "cap on what constant folding may create"),
        PD__SET("--quiet", &a->quiet, "print only errors"),
    };
    int n = (int)(sizeof rows / sizeof rows[0]);
    if (t) memcpy(t, rows, sizeof rows);
    return n;
}

static int pd__parse(pd__targs *a, int argc, char **argv) {
    pd_flag t[64];
    int n = pd__train_flags(a, t);
    const char *model[1] = {a->model};
    int rc = pd_cli_flags("train", t, n, a, argc, argv, model, a->model ? 0 : 1);
    if (!a->model) a->model = model[0];
    return rc;
}

/* Converts t in place to dtype `to` (numeric casts); false when it cannot.
 * Mapped data (m->base) is copied into memory converted, and unmapped. */
static bool pd__convert(pd_tensor *t, pd_dtype to, pd__map *m) {
    if (t->dtype == to) return true;
    bool to_float = to == PD_FLOAT || to == PD_DOUBLE;
    bool from_float = t->dtype == PD_FLOAT || t->dtype == PD_DOUBLE || t->dtype == PD_FLOAT16;
    if (!to_float && from_float) return false; /* never truncate floats into ids */
    if (t->dtype == PD_BOOL || pd_dtype_size(to) == 0) return false;
    int64_t n = pd_tensor_numel(t);
    void *d = malloc((size_t)n * pd_dtype_size(to) + 1);
    if (!d) return false;
    for (int64_t i = 0; i < n; i++) {
        if (to_float)
            pd__set_f(to, d, i, pd__get_f(t->dtype, t->data, i));
        else
            pd__set_i(to, d, i, pd__get_i(t->dtype, t->data, i));
    }
    if (m->base) pd__npy_unmap(m);
    else free(t->data);
    t->data = d;
    t->dtype = to;
    return true;
}

/* A data file's tensor: mapped (no copy, the prefetch thread reads the rows
 * a batch needs) or, where it cannot be mapped, read. */
static void pd__data_release(pd_tensor *t, pd__map *m) {
    if (m->base) pd__npy_unmap(m);
    else pd_tensor_free(t);
}

/* --data or --labels: one .npy file, or a glob pattern ('train-*.npy') of
 * shards read in order, each mapped. */
typedef struct pd__shards {
    int n;
    pd_tensor *t;
    pd__map *m;
    char **path;
} pd__shards;

static void pd__shards_close(pd__shards *s) {
    for (int i = 0; i < s->n; i++) {
        pd__data_release(&s->t[i], &s->m[i]);
        free(s->path[i]);
    }
    free(s->t), free(s->m), free(s->path);
    memset(s, 0, sizeof *s);
}

/* Opens arg's files; *all: the first's tensor with every part's rows. */
static bool pd__shards_open(const char *arg, pd__shards *s, pd_tensor *all) {
    memset(s, 0, sizeof *s);
    glob_t gl = {0};
    bool pattern = strpbrk(arg, "*?[") != NULL;
    if (pattern && (glob(arg, 0, NULL, &gl) != 0 || gl.gl_pathc == 0)) {
        globfree(&gl);
        fprintf(stderr, "pdonnx: %s: no file matches\n", arg);
        return false;
    }
    int n = pattern ? (int)gl.gl_pathc : 1;
    s->t = calloc((size_t)n, sizeof *s->t), s->m = calloc((size_t)n, sizeof *s->m);
    s->path = calloc((size_t)n, sizeof *s->path);
    bool ok = s->t && s->m && s->path;
    for (int i = 0; ok && i < n; i++) {
        s->path[i] = strdup(pattern ? gl.gl_pathv[i] : arg);
        ok = s->path[i] && pd__npy_map(s->path[i], &s->t[i], &s->m[i]) == PD_OK;
        if (!ok) break;
        s->n = i + 1;
        const pd_tensor *a = &s->t[0], *b = &s->t[i];
        bool same = b->ndim >= 1 && b->ndim == a->ndim && b->dtype == a->dtype;
        for (int d = 1; same && d < a->ndim; d++) same = a->shape[d] == b->shape[d];
        if (!same) {
            char sa[128], sb[128];
            pd__format_shape(sa, sizeof sa, a->ndim - 1, a->shape + 1);
            pd__format_shape(sb, sizeof sb, b->ndim ? b->ndim - 1 : 0, b->shape + 1);
            pd__err(PD_ERR_SHAPE, "%s: rows of %s %s, not the %s %s of %s", s->path[i], pd_dtype_name(b->dtype), sb,
                    pd_dtype_name(a->dtype), sa, s->path[0]);
            ok = false;
        }
    }
    globfree(&gl);
    if (!ok) {
        if (s->t) pd_cli_fail();
        pd__shards_close(s);
        return false;
    }
    *all = s->t[0];
    for (int i = 1; i < n; i++) all->shape[0] += s->t[i].shape[0];
    return true;
}

/* Validation: every row once, in batches of the model's size (the last one partial). */
static pd_status pd__validate(pd_session *s, const char *input, pd_tensor *vx, pd_tensor *vy, double *loss,
                              double *acc, int64_t *correct_out, int64_t *count_out) {
    int64_t N = pd_session_batch(s), rows = vx->shape[0];
    pd__data d;
    PD_TRY(pd__data_init(&d, vx, vy, N, false, 0));
    pd_tensor bx = *vx, by = *vy;
    bx.shape[0] = by.shape[0] = N;
    size_t xr = (size_t)(pd_tensor_numel(vx) / rows) * pd_dtype_size(vx->dtype);
    size_t yr = (size_t)(pd_tensor_numel(vy) / rows) * pd_dtype_size(vy->dtype);
    bx.data = malloc(xr * (size_t)N + 1);
    by.data = malloc(yr * (size_t)N + 1);
    double sum = 0;
    int64_t correct = 0, count = 0;
    pd_status st = (bx.data && by.data) ? PD_OK : pd__err(PD_ERR_NOMEM, "out of memory");
    for (int64_t c = 0; st == PD_OK && c * N < rows; c++) {
        pd__data_fill(&d, c, bx.data, by.data); /* wraps: the tail repeats early rows, not counted */
        pd_step_result r;
        st = pd_session_set_input(s, input, &bx);
        if (st == PD_OK) st = pd_session_set_labels(s, &by);
        if (st == PD_OK) st = pd_session_eval_rows(s, rows - c * N, &r);
        if (st != PD_OK) break;
        sum += r.loss * (double)r.count;
        correct += r.correct;
        count += r.count;
    }
    free(bx.data);
    free(by.data);
    pd__data_free(&d);
    *loss = count ? sum / (double)count : 0;
    *acc = count ? (double)correct / (double)count : 0;
    *correct_out = correct;
    *count_out = count;
    return st;
}

/* The files a run will write, checked before it trains: a bad --save found
 * only after training loses the trained weights. */
static bool pd__outputs_ok(const pd__targs *a) {
    const char *flag[3] = {"--save", "--metrics", "--trace"}, *path[3] = {a->save, a->metrics, a->trace};
    for (int i = 0; i < 3; i++)
        if (path[i] && pd__check_dest(path[i]) != PD_OK) {
            fprintf(stderr, "pdonnx: %s %s\n", flag[i], pd_cli_error());
            return false;
        }
    return true;
}

/* What the loader found an exporter did (pd_graph_note), and the
 * initializers it tied to others: through Identity (equal values stored
 * once) or as a transpose (a tied LM head stored twice). They train as one
 * unless --untie. */
static void pd__report_load(const pd__targs *a, const pd_graph *g) {
    for (int i = 0; i < pd_graph_num_notes(g); i++) printf("note: %s\n", pd_graph_note(g, i));
    int n = pd_graph_num_tied(g);
    if (n == 0) return;
    char list[512] = "", e1[128], e2[128];
    for (int i = 0; i < n && i < 4; i++) {
        const char *alias, *source;
        if (pd_graph_tied(g, i, &alias, &source) != PD_OK) continue;
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s'%s' = '%s'%s", i ? ", " : "",
                 pd__escape(e1, sizeof e1, alias), pd__escape(e2, sizeof e2, source),
                 pd_graph_tied_transposed(g, i) ? " transposed" : "");
    }
    if (a->untie)
        printf("untied %d initializer%s the model ties to others (%s%s): each trains on its own\n", n,
               n == 1 ? "" : "s", list, n > 4 ? ", ..." : "");
    else
        printf("the model ties %d initializer%s to others (%s%s): they train as one, as in PyTorch (--untie gives "
               "each its own copy)\n",
               n, n == 1 ? "" : "s", list, n > 4 ? ", ..." : "");
}

/* The start-up lines: what is trained, and what the model holds that is not
 * (an exporter's constants, what training_info leaves out, --freeze). */
static void pd__report_params(const pd__targs *a, pd_session *s, int64_t rows, int64_t steps) {
    int64_t floats = 0;
    for (int i = 0; i < pd_session_num_params(s); i++) {
        pd_tensor v;
        if (pd_session_param(s, i, NULL, &v, NULL) == PD_OK) floats += pd_tensor_numel(&v);
    }
    printf("training %s: %d parameter tensors (%lld floats), %lld rows, batch %lld, %lld steps, %s lr %g\n", a->model,
           pd_session_num_params(s), (long long)floats, (long long)rows, (long long)a->batch, (long long)steps,
           pd__optim_name(a->o.optimizer), a->o.lr);
    /* one line per reason (an exporter's constants, training_info, --freeze) */
    int nu = pd_session_num_untrained(s);
    for (int r = 0; r < nu; r++) {
        const char *why = "", *w = "";
        bool first = pd_session_untrained(s, r, NULL, &why) == PD_OK; /* the first tensor of its reason */
        for (int i = 0; first && i < r; i++) first = pd_session_untrained(s, i, NULL, &w) != PD_OK || strcmp(w, why);
        if (!first) continue;
        char list[512] = "", shape[128], name[128];
        int count = 0;
        for (int i = 0; i < nu; i++) {
            pd_value_info v;
            const char *w = "";
            if (pd_session_untrained(s, i, &v, &w) != PD_OK || strcmp(w, why)) continue;
            if (count++ >= 6) continue;
            pd__format_shape(shape, sizeof shape, v.ndim, v.shape);
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s %s", count > 1 ? ", " : "",
                     pd__escape(name, sizeof name, v.name), shape);
        }
        printf("not trained: %d float initializer%s (%s%s): %s%s\n", count, count == 1 ? "" : "s", list,
               count > 6 ? ", ..." : "", why, strstr(why, "freeze") ? "" : " (--trainable REGEX trains them)");
    }
}

/* --metrics: false (after a one-line error) once a write to it failed. */
static bool pd__metrics_ok(FILE *f, const char *path) {
    if (fflush(f) == 0 && !ferror(f)) return true;
    fprintf(stderr, "pdonnx: --metrics %s: write failed: %s\n", path, strerror(errno ? errno : EIO));
    return false;
}

/* ---- pipeline training (--stages N | --plan FILE) ---------------------------------- */

/* The run's plan (train_pipe.h): interleaved runs --virtual-stages (2) per stage. */
static pd_status pd__pipe_plan(const pd__targs *a, pd_graph *g, bool interleaved, pd_plan **out) {
    int chunks = interleaved ? (int)(a->virtual_stages ? a->virtual_stages : 2) : 1;
    pd_cli_plan_args pa = {a->plan, (int)a->stages, (int)a->microbatches, chunks, a->o.threads, &a->o,
                           a->model, &a->lo, a->batch, a->quiet};
    return pd_cli_pipe_plan(&pa, g, out);
}

/* ---- under mpirun: one process per stage replica (docs/DISTRIBUTED.md) ----
 * Every process reads the same flags, data and model. Until the pipeline
 * starts, a problem found by several processes is reported once: processes
 * other than rank 0 hold back their error output, and at each agreement
 * point only the lowest failing rank shows it. From the library's agreement
 * on (pd__trainer_create_kind with opt->mpi: the plan fits, every process
 * made its pipeline and took its ranks) every outcome is agreed, the
 * training's by pd_trainer_train itself: each process holds the same error,
 * which the rank it names shows (pd__mp_fail), and every process ends
 * non-zero without ending the job; rank 0 alone works on after the last
 * collective call (the metrics, validation). */
static struct {
    int rank, size;
    int phase;     /* agreements passed: 1 before planning, 2 before training (3: agreed to fail) */
    int saved_err; /* rank > 0 before training: the real stderr */
    FILE *held;    /* ... and what was written to it meanwhile */
} pd__mp = {0, 1, 0, -1, NULL};

static void pd__mp_release(bool show) {
    if (pd__mp.saved_err < 0) return;
    fflush(stderr);
    if (show && pd__mp.held) {
        rewind(pd__mp.held);
        char buf[4096];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, pd__mp.held)) > 0)
            if (write(pd__mp.saved_err, buf, n) < 0) break;
    }
    dup2(pd__mp.saved_err, 2);
    close(pd__mp.saved_err);
    pd__mp.saved_err = -1;
    if (pd__mp.held) fclose(pd__mp.held);
    pd__mp.held = NULL;
}

/* Every process says whether it is fine; false if any is not (the lowest
 * failing one has shown its error). final: training starts after this. */
static bool pd__mp_agree(bool ok, bool final) {
    if (pd__mp.size < 2) return ok;
    int low = pd__mpi_agree(ok);
    pd__mp.phase++;
    if (low >= 0 || final) pd__mp_release(low == pd__mp.rank);
    return low < 0;
}

static bool pd__mp_agree_final(bool ok) { return pd__mp_agree(ok, true); }

/* The library agreed (pd__trainer_create_kind under MPI): every process
 * holds the same outcome, so rank 0 alone reports a failure (3), or
 * training starts (2: every outcome from here is agreed). */
static void pd__mp_agreed(bool ok) {
    pd__mp.phase = ok ? 2 : 3;
    pd__mp_release(false);
}

/* Under mpirun, the outcome every process holds once they agree (st: this
 * process's); in one process, st. */
static pd_status pd__mp_agree_status(pd_status st) { return pd__mp.size > 1 ? pd__mpi_agree_status(st) : st; }

/* An agreed error, shown once: by the rank it names ("rank 1: ..."), or by
 * rank 0 where it names none; in one process, shown. Returns 1. */
static int pd__mp_fail(void) {
    int r = 0;
    char colon = 0;
    if (sscanf(pd_last_error(), "rank %d%c", &r, &colon) != 2 || colon != ':') r = 0;
    if (pd__mp.size < 2 || r == pd__mp.rank) pd_cli_fail();
    return 1;
}

/* Checkpointing a run: the run's description (the manifest's info), and a
 * resume's checkpoint. */
typedef struct pd__ckrun {
    cJSON *info;            /* NULL: no checkpoints */
    pd__ckpt from;          /* --resume: the checkpoint (nparts 0: none) */
    cJSON *from_info;
    int64_t first;          /* the step training starts from */
    pd__ckpol *ck;
    int parts;              /* a checkpoint's parts: the pipeline's stages */
} pd__ckrun;

/* The checkpoint's own plan, which must be g's. */
static pd_status pd__ckpt_plan(const pd__targs *a, pd_graph *g, const cJSON *info, pd_plan **out) {
    char *text = cJSON_PrintUnformatted(cJSON_GetObjectItem(info, "plan"));
    if (!text) return pd__err(PD_ERR_PARSE, "--resume %s: the checkpoint holds no plan", a->resume);
    pd_status st = pd__plan_from_json(text, strlen(text), "the checkpoint's plan", out);
    free(text);
    if (st == PD_OK && (*out)->n_nodes != pd_graph_num_nodes(g)) {
        st = pd__err(PD_ERR_INVALID, "--resume %s: the checkpoint's plan has %d nodes, %s %d", a->resume,
                     (*out)->n_nodes, a->model, pd_graph_num_nodes(g));
        pd_plan_destroy(*out);
        *out = NULL;
    }
    return st;
}

/* The library's checkpoint policy for the run (runtime/ckpt_policy.h). */
static pd_status pd__ckpt_begin(pd__targs *a, pd__ckrun *cr) {
    pd__ckpol_opts co = {a->ckpt_dir ? a->ckpt_dir : a->resume, a->ckpt_every, (int)a->ckpt_keep,
                         a->ckpt_overhead > 0 ? a->ckpt_overhead : 0.035, pd__mp.size, pd__mp.rank, cr->parts, NULL};
    char *info = cJSON_PrintUnformatted(cr->info);
    cJSON_Delete(cr->info);
    cr->info = NULL;
    pd_status st = info ? pd__ckpol_start(&co, info, cr->first, &cr->ck) : pd__err(PD_ERR_NOMEM, "out of memory");
    free(info);
    return st;
}

/* The writer waited for; what checkpointing cost printed (unless --quiet). */
static pd_status pd__ckpt_end(const pd__targs *a, pd__ckrun *cr, double train_s) {
    char line[4600];
    pd_status st = pd__ckpol_finish(cr->ck, train_s, line, sizeof line);
    cr->ck = NULL;
    if (st == PD_OK && !a->quiet) printf("%s\n", line);
    return st;
}

/* The pipeline's metrics, written up to a step as soon as it is done (at
 * each checkpoint, before it is persisted) and at the end. */
typedef struct pd__pmetrics {
    FILE *f;
    const pd_step_result *res;
    int64_t done, batch, rows; /* lines written up to step `done`; rows of the data */
    double t0;
} pd__pmetrics;

static void pd__pmetrics_upto(void *ctx, int64_t b) {
    pd__pmetrics *m = ctx;
    if (!m->f) return;
    double el = pd__now() - m->t0;
    for (int64_t k = m->done; k < b; k++)
        fprintf(m->f,
                "{\"step\": %lld, \"loss\": %.9g, \"lr\": %.9g, \"samples_per_s\": %.1f, \"grad_norm\": %.6g, "
                "\"epoch\": %.4f}\n",
                (long long)k + 1, m->res[k].loss, m->res[k].lr, el > 0 ? (double)((b - m->done) * m->batch) / el : 0,
                m->res[k].grad_norm, (double)((k + 1) * m->batch) / (double)m->rows);
    if (b > m->done) m->done = b;
    fflush(m->f);
}

/* The pipeline of the run: rank 0's plan (a resumed run's own), a trainer
 * on it (made and checked as pd_trainer_create makes one), and under MPI
 * every process agreed and given its ranks; 0, or 1 after printing the
 * error (*plan and *trainer: the caller frees them). */
static int pd__pipeline_setup(pd__targs *a, pd_graph *g, pd__sched_kind kind, int M, pd__ckrun *cr, pd_plan **out_plan,
                              pd_trainer **out_trainer, pd__pipe **out_pipe) {
    if (pd__mp.size > 1) { /* rank 0 plans; the others take its plan */
        pd_status ps = pd__mp.rank != 0 ? PD_OK
                       : cr->from.nparts  ? pd__ckpt_plan(a, g, cr->from_info, out_plan)
                                          : pd__pipe_plan(a, g, kind == PD_SCHED_INTERLEAVED, out_plan);
        if (pd_cli_share_plan(pd__mp.rank, ps, out_plan) != PD_OK) {
            pd_cli_fail();
            return 1;
        }
    } else if ((cr->from.nparts ? pd__ckpt_plan(a, g, cr->from_info, out_plan)
                                : pd__pipe_plan(a, g, kind == PD_SCHED_INTERLEAVED, out_plan)) != PD_OK) {
        pd_cli_fail();
        return 1;
    }
    if (a->recompute) (*out_plan)->recompute = true; /* or the plan's own "recompute": true */
    pd_trainer_options to = PD_TRAINER_OPTIONS_INIT;
    to.train = &a->o;
    to.microbatches = M;
    to.vertical_sync = a->vertical_sync;
    to.mpi = pd__mp.size > 1; /* the library's agreement: the plan fits, every process ready, ranks taken */
    pd_status ts = pd__trainer_create_kind(g, *out_plan, &to, kind, out_trainer);
    if (pd__mp.size > 1) pd__mp_agreed(ts == PD_OK); /* the error, if any, is every process's: rank 0 shows it */
    if (ts != PD_OK) return pd__mp.rank == 0 ? pd_cli_fail() : 1;
    *out_pipe = pd__trainer_pipe(*out_trainer);
    if (pd__mp.size > 1) {
        int T = pd__pipe_threads(*out_pipe);
        char how[96] = "one per stage replica"; /* or several per process: the plan's stage_to_rank */
        if (T > pd__mp.size) snprintf(how, sizeof how, "its stage_to_rank puts %d stage replicas on them", T);
        if (!a->quiet)
            printf("%d processes (mpirun), %s; rank 0 writes the metrics and the model\n", pd__mp.size, how);
    }
    return 0;
}

/* The run summary's step time, measured and simulated, beside one worker's
 * simulated time for the whole step run as one call per node: with the
 * per-call costs pd_cli_pipe_plan fits when a step has several microbatches,
 * that counts what their extra calls cost, which the next line says. */
static void pd__report_step(const pd_plan *plan, int M, double step_ms, double sim_ms) {
    printf("step: %.3g ms measured, %.3g ms simulated", step_ms, sim_ms);
    int64_t rows;
    double one = pd_cli_one_worker_ms(plan, M, &rows, NULL);
    if (one > 0 && sim_ms > 0 && (rows == plan->microbatch_size || pd__plan_has_call(plan)))
        printf("; one worker on all %lld rows at once: %.3g ms simulated (the pipeline %.2fx as fast)",
               (long long)rows, one, one / sim_ms);
    printf("\n");
    pd_cli_print_extra_calls(plan, M);
}

/* The run summary's table: per stage its nodes, busy time, peak activations
 * and weight versions, beside the simulator's prediction for the same plan,
 * schedule and number of minibatches (this run's, up to PD_REPORT_SIM_MB);
 * the bubble over the whole run, fill and drain included, measured and
 * simulated, and pipedream's and 2bw's simulated steady state; the forwards
 * recomputation ran again. */
#define PD_REPORT_SIM_MB 1000 /* 8 stages x 8 microbatches: 20 MB, 0.03 s */
static void pd__report_stages(pd__pipe *pipe, const pd_plan *plan, pd__sched_kind kind, int M, int64_t minibatches) {
    pd_sim_options so = PD_SIM_OPTIONS_INIT;
    so.schedule = pd__sched_kind_name(kind);
    so.microbatches = M;
    so.minibatches = (int)(minibatches < 1 ? 1 : minibatches > PD_REPORT_SIM_MB ? PD_REPORT_SIM_MB : minibatches);
    pd_sim_result sr;
    int P = pd__pipe_stages(pipe);
    bool sim = pd_simulate(plan, &so, &sr) == PD_OK && sr.n_stages == P;
    double wall = pd__pipe_last_run_ms(pipe), busy_all = 0, sim_busy = 0;
    long long redone = 0;
    printf("%5s %10s %10s %7s %18s %9s %10s %10s\n", "stage", "nodes", "busy ms", "busy", "peak activations",
           "versions", "sim busy", "sim vers");
    for (int st = 0; st < P; st++) {
        pd__pipe_stats ps;
        pd__pipe_stats_get(pipe, st, &ps);
        busy_all += ps.busy_ms;
        redone += (long long)ps.recomputes;
        char simb[32] = "-", simv[16] = "-";
        if (sim) {
            sim_busy += sr.stage[st].busy_ms;
            snprintf(simb, sizeof simb, "%.1f%%", sr.makespan_ms > 0 ? 100 * sr.stage[st].busy_ms / sr.makespan_ms : 0);
            snprintf(simv, sizeof simv, "%d", sr.stage[st].peak_versions);
        }
        char act[48];
        double ab = ps.peak_act_bytes;
        snprintf(act, sizeof act, "%d mb, %.1f %s", ps.peak_act_mbs, ab >= 1e6 ? ab / 1e6 : ab / 1e3,
                 ab >= 1e6 ? "MB" : "KB");
        /* its nodes: "first-last" when one run of the graph's order, else how many */
        int first = -1, last = -1, count = 0;
        for (int i = 0; i < plan->n_nodes; i++)
            if (plan->fwd_stage[i] % P == st) {
                if (first < 0) first = i;
                last = i;
                count++;
            }
        char nodes[32];
        if (count == last - first + 1) snprintf(nodes, sizeof nodes, "%d-%d", first, last);
        else snprintf(nodes, sizeof nodes, "%d of them", count);
        printf("%5d %10s %10.1f %6.1f%% %18s %9d %10s %10s\n", st, nodes, ps.busy_ms,
               wall > 0 ? 100 * ps.busy_ms / wall : 0, act, ps.peak_versions, simb, simv);
    }
    printf("bubble: %.1f%% measured", wall > 0 ? 100 * (1 - busy_all / (P * wall)) : 0);
    if (sim) {
        printf(", %.1f%% simulated", sr.makespan_ms > 0 ? 100 * (1 - sim_busy / (P * sr.makespan_ms)) : 0);
        /* the simulator's own bubble leaves an asynchronous schedule's fill and drain out */
        if (pd__sched_async(kind)) printf(" (%.1f%% in the steady state)", 100 * sr.bubble);
    }
    printf("\n");
    if (sim) pd__report_step(plan, M, wall / (double)minibatches, sr.makespan_ms / so.minibatches);
    if (plan->recompute) printf("recomputation: %lld forwards run again before their backward\n", redone);
    if (sim) pd_sim_result_free(&sr);
}

/* --trace: this process's tracks, or under MPI every process's joined on
 * rank 0 (collective: the caller agrees on the status). */
static pd_status pd__write_traces(const pd__targs *a, pd__pipe *pipe) {
    if (pd__mp.size > 1 && a->trace_all) {
        char *mine = NULL, *all = NULL;
        size_t n = 0, total = 0;
        pd_status ts = pd__pipe_trace_events(pipe, &mine, &n);
        if (ts == PD_OK) ts = pd__mpi_gather_text(mine, n, ",\n", &all, &total);
        free(mine);
        if (ts == PD_OK && pd__mp.rank == 0) {
            char *doc = malloc(total + 8);
            if (doc) snprintf(doc, total + 8, "[\n%s\n]\n", all);
            ts = doc ? pd__write_atomic(a->trace_all, doc, strlen(doc)) : pd__err(PD_ERR_NOMEM, "out of memory");
            free(doc);
            if (ts == PD_OK && !a->quiet) printf("trace: %s (every process)\n", a->trace_all);
        }
        PD_FREE(all);
        return ts;
    }
    if (!a->trace) return PD_OK;
    PD_TRY(pd__pipe_write_trace(pipe, a->trace));
    if (!a->quiet) printf("trace: %s\n", a->trace);
    return PD_OK;
}

/* The run's checkpoints: the plan goes into every one (a resume runs the
 * same), the writer attached to the pipe, and a resume's state restored
 * (under mpirun the caller agrees on the status). */
static pd_status pd__pipe_ckpt_start(pd__targs *a, pd__ckrun *cr, const pd_plan *plan, pd__pipe *pipe,
                                     pd__pmetrics *pm) {
    cr->parts = pd__pipe_stages(pipe);
    if (cr->info) {
        char *pj = pd__plan_to_json(plan);
        cJSON_AddItemToObject(cr->info, "plan", pj ? cJSON_Parse(pj) : cJSON_CreateNull());
        free(pj);
        /* under MPI rank 0 knows the losses only after the run: the metrics are written then */
        PD_TRY(pd__ckpt_begin(a, cr));
        PD_TRY(pd__ckpol_attach(cr->ck, pipe, 0, pd__mp.size > 1 ? NULL : pd__pmetrics_upto, pm));
    }
    pd_status st = cr->from.nparts ? pd__pipe_resume(pipe, cr->first, cr->from.nparts,
                                                     (const void *const *)cr->from.parts, cr->from.lens)
                                   : PD_OK;
    if (st != PD_OK) pd__err_prefix("--resume %s", cr->from.path);
    return st;
}

/* The progress lines of the steps trained (about ten) and the total's. */
static void pd__report_steps(const pd_step_result *res, int64_t first, int64_t steps, int64_t B, double total) {
    int64_t every = steps / 10 > 0 ? steps / 10 : 1;
    for (int64_t k = first; k < steps; k++)
        if ((k + 1) % every == 0 || k + 1 == steps)
            printf("step %lld/%lld  loss %.6f  lr %.4g\n", (long long)k + 1, (long long)steps, res[k].loss, res[k].lr);
    double rate = (double)((steps - first) * B) / total;
    printf("trained %lld steps in %.2f s: %.*f samples/s, final loss %.6f\n", (long long)steps, total,
           pd_cli_rate_digits(rate), rate, res[steps - 1].loss);
}

/* A pipeline run's state in pd__train_pipeline. */
typedef struct pd__prun {
    pd_plan *plan;
    pd_trainer *trainer;
    pd__pipe *pipe;
    pd_tensor *ins, ty;
    pd_step_result *res;
    pd_cli_ring rg;
    pd__pmetrics pm;
} pd__prun;

/* Before the steps: checkpoints (and a resume's state), the steps' results,
 * the ring the steps' minibatches stream through, from the same stream as
 * one stage reads. This process's status (the caller agrees on it). */
static pd_status pd__pipe_prepare(pd__targs *a, pd_graph *g, const char *input, pd_tensor *X, pd_tensor *Y,
                                  int64_t steps, pd__ckrun *cr, pd__prun *r) {
    PD_TRY(pd__pipe_ckpt_start(a, cr, r->plan, r->pipe, &r->pm));
    r->ins = calloc((size_t)pd_graph_num_inputs(g) + 1, sizeof *r->ins);
    r->res = calloc((size_t)steps, sizeof *r->res);
    if (!r->ins || !r->res) return pd__err(PD_ERR_NOMEM, "out of memory for the pipeline's data");
    int ring = pd_trainer_ring_steps(r->trainer);
    PD_TRY(pd_cli_ring_open(&r->rg, ring, g, input, X, Y, r->ins, &r->ty));
    return pd_trainer_set_ring(r->trainer, ring, pd_cli_ring_fill, &r->rg);
}

/* After the steps: the final checkpoint, the traces and --save, each agreed
 * under mpirun; --save is pd_trainer_save's (every stage's weights on rank
 * 0, or each process's stages in files beside the model), after which
 * rank 0 has no model left to save (a->save). */
static pd_status pd__pipe_after(pd__targs *a, pd__ckrun *cr, pd__prun *r, int64_t steps, bool trained, double total) {
    if (cr->ck) {
        pd_status cs = pd__ckpol_final(cr->ck, r->pipe, NULL, steps);
        pd_status fs = pd__ckpt_end(a, cr, total);
        PD_TRY(pd__mp_agree_status(cs != PD_OK ? cs : fs));
    }
    if (trained) PD_TRY(pd__mp_agree_status(pd__write_traces(a, r->pipe)));
    if (pd__mp.size < 2 || !a->stage_save) return PD_OK;
    PD_TRY(pd_trainer_save(r->trainer, a->stage_save)); /* agreed */
    if (!a->quiet) printf("saved %s\n", a->stage_save);
    a->save = NULL;
    return PD_OK;
}

static int pd__train_pipeline(pd__targs *a, pd_graph *g, const char *input, pd_tensor *X, pd_tensor *Y,
                              pd__data *data, int64_t steps, pd__sched_kind kind, FILE *mf, pd__ckrun *cr) {
    int M = (int)a->microbatches;
    int64_t first = cr->first, B = a->batch;
    pd__prun r;
    memset(&r, 0, sizeof r);
    r.rg = (pd_cli_ring){data, a->batch, 1, 0, NULL, NULL, 0, 0, NULL, NULL};
    r.pm = (pd__pmetrics){mf, NULL, first, a->batch, X->shape[0], 0};
    if (pd__pipeline_setup(a, g, kind, M, cr, &r.plan, &r.trainer, &r.pipe) != 0) {
        pd_trainer_destroy(r.trainer);
        pd_plan_destroy(r.plan);
        return 1;
    }
    /* from here every outcome is every process's: none waits for one that stopped */
    pd_status st = pd__mp_agree_status(pd__pipe_prepare(a, g, input, X, Y, steps, cr, &r));
    if (st == PD_OK && !a->quiet)
        printf("training %s as a pipeline: %d stages%s, %s schedule, %d microbatch%s of %lld rows per step, %lld steps, "
               "%s lr %g%s\n",
               a->model, pd__pipe_stages(r.pipe), r.plan->chunks > 1 ? " (each with several virtual stages)" : "",
               pd__sched_kind_name(kind), M, M == 1 ? "" : "es", (long long)(B / M),
               (long long)steps, pd__optim_name(a->o.optimizer), a->o.lr,
               r.plan->recompute ? ", activations recomputed" : "");
    if (st == PD_OK && !a->quiet && cr->from.nparts)
        printf("resuming from %s at step %lld\n", cr->from.path, (long long)first);
    double t0 = pd__now();
    r.pm.res = r.res;
    r.pm.t0 = t0;
    if (st == PD_OK && first < steps) st = pd_trainer_train(r.trainer, steps, r.ins, &r.ty, r.res); /* agreed */
    double total = pd__now() - t0;
    if (st == PD_OK) st = pd__pipe_after(a, cr, &r, steps, first < steps, total);
    if (st == PD_OK && first == steps && !a->quiet)
        printf("the checkpoint is at the last step: nothing left to train\n");
    if (st == PD_OK && first < steps) {
        pd__pmetrics_upto(&r.pm, steps);
        if (!a->quiet) pd__report_steps(r.res, first, steps, B, total);
        if (!a->quiet && pd__mp.size < 2) /* under MPI each process knows its own stage only */
            pd__report_stages(r.pipe, r.plan, kind, M, steps - first);
    }
    if (st != PD_OK) pd__mp_fail();
    if (cr->ck) { /* an error: what was taken is still written, a checkpoint waiting for a failed process's part not */
        pd__ckpol_cancel(cr->ck);
        pd__ckpt_end(a, cr, 0);
    }
    cr->ck = NULL;
    pd_trainer_destroy(r.trainer); /* the trained weights go back into g */
    pd_plan_destroy(r.plan);
    free(r.ins);
    free(r.res);
    pd_cli_ring_free(&r.rg);
    return st == PD_OK ? 0 : 1;
}

/* The run as checkpoints record it: what a resume must match (docs/CHECKPOINT.md). */
static cJSON *pd__run_info(const pd__targs *a, int64_t graph_batch, int64_t steps, int64_t rows, bool piped,
                           pd__sched_kind kind) {
    cJSON *j = cJSON_CreateObject();
    if (!j) return NULL;
    char *abs = realpath(a->model, NULL);
    cJSON_AddStringToObject(j, "mode", piped ? "pipeline" : "single");
    cJSON_AddStringToObject(j, "model", abs ? abs : a->model);
    free(abs);
    cJSON_AddNumberToObject(j, "graph_batch", (double)graph_batch);
    cJSON_AddNumberToObject(j, "steps", (double)steps);
    cJSON_AddNumberToObject(j, "batch", (double)a->batch);
    cJSON_AddNumberToObject(j, "rows", (double)rows);
    cJSON_AddBoolToObject(j, "shuffle", a->shuffle);
    cJSON_AddNumberToObject(j, "seed", (double)a->seed);
    cJSON_AddStringToObject(j, "optimizer", pd__optim_name(a->o.optimizer));
    cJSON_AddNumberToObject(j, "lr", a->o.lr);
    cJSON_AddNumberToObject(j, "momentum", a->o.momentum);
    cJSON_AddNumberToObject(j, "weight_decay", a->o.weight_decay);
    cJSON_AddNumberToObject(j, "loss", (double)a->o.loss);
    cJSON_AddStringToObject(j, "freeze", a->o.freeze ? a->o.freeze : "");
    if (a->untie) cJSON_AddBoolToObject(j, "untie", true);
    if (a->o.trainable) cJSON_AddStringToObject(j, "trainable", a->o.trainable);
    if (piped) {
        cJSON_AddStringToObject(j, "schedule", pd__sched_kind_name(kind));
        cJSON_AddNumberToObject(j, "microbatches", (double)a->microbatches);
        cJSON_AddBoolToObject(j, "vertical_sync", a->vertical_sync);
    }
    return j;
}

/* --metrics: a resumed run keeps the lines of the steps up to its checkpoint and appends. */
static FILE *pd__metrics_open(const char *path, int64_t first) {
    FILE *f;
    if (first > 0 && (f = fopen(path, "r"))) {
        char *kept = NULL, line[8192];
        size_t n = 0;
        FILE *m = open_memstream(&kept, &n);
        while (m && fgets(line, sizeof line, f)) {
            long long step = -1;
            const char *at = strstr(line, "\"step\": ");
            if (at) step = strtoll(at + 8, NULL, 10);
            size_t n2 = strlen(line);
            bool whole = n2 >= 2 && line[n2 - 1] == '\n' && line[n2 - 2] == '}';
            if (whole && step >= 0 && step <= first) fputs(line, m);
        }
        fclose(f);
        if (m) fclose(m);
        pd_status st = kept ? pd__write_atomic(path, kept, n) : pd__err(PD_ERR_NOMEM, "out of memory");
        free(kept);
        if (st != PD_OK) {
            pd_cli_fail();
            return NULL;
        }
        f = fopen(path, "a");
    } else {
        f = fopen(path, "w");
    }
    if (!f) fprintf(stderr, "pdonnx: --metrics %s: %s\n", path, strerror(errno));
    return f;
}

/* ---- AvgPipe hook: --parallel-pipelines K (tools/train_avgpipe.c) ------------------- */

static int pd__train_avgpipe_hook(pd__targs *a, const pd_cli_avg_args *av, pd_graph *g, const char *input,
                                  pd_tensor *X, pd_tensor *Y, pd__data *data, int64_t steps, pd__sched_kind kind,
                                  FILE *mf) {
    pd_cli_avg_ctx c = {a->model, a->plan, (int)a->stages, (int)a->microbatches, a->batch, steps, &a->o, kind,
                        a->quiet, a->trace, g, &a->lo, input, X, Y, data, mf, pd__mp.rank, pd__mp.size,
                        pd__mp_agree_final, a->recompute};
    return pd_cli_train_avgpipe(av, &c);
}

/* cross_entropy's labels: the output's shape without the class axis, each
 * a class of it; false after printing the first that is not. */
static bool pd__check_labels(const pd__targs *a, const pd_value_info *out, const pd__shards *ys, const pd_tensor *Y,
                             const pd_tensor *VY) {
    char en1[256];
    int64_t V = out->shape[out->ndim - 1];
    bool ok = Y->ndim == out->ndim - 1;
    for (int i = 1; ok && i < Y->ndim; i++) ok = Y->shape[i] == out->shape[i];
    if (!ok) {
        char os[128], yshape[128];
        pd__format_shape(os, sizeof os, out->ndim, out->shape);
        pd__format_shape(yshape, sizeof yshape, Y->ndim, Y->shape);
        fprintf(stderr,
                "pdonnx: %s: labels of shape %s do not fit output '%s' %s for cross_entropy (one class id per "
                "position of the output without its last axis)\n",
                a->labels, yshape, pd__escape(en1, sizeof en1, out->name), os);
        return false;
    }
    int nl = ys->n + (a->val_x ? 1 : 0);
    for (int k = 0; k < nl; k++) {
        const pd_tensor *lt = k < ys->n ? &ys->t[k] : VY;
        const char *path = k < ys->n ? ys->path[k] : a->val_y;
        int64_t n = pd_tensor_numel(lt), per = n / lt->shape[0];
        for (int64_t e = 0; e < n; e++) {
            int64_t l = ((const int64_t *)lt->data)[e];
            if (l < 0 || l >= V) {
                fprintf(stderr, "pdonnx: %s: label %lld at row %lld is out of range [0, %lld) (output '%s' has %lld classes)\n",
                        path, (long long)l, (long long)(e / per), (long long)V,
                        pd__escape(en1, sizeof en1, out->name), (long long)V);
                return false;
            }
        }
    }
    return true;
}

/* --data, --labels and --val's files, mapped (pd__shards), their rows checked
 * against each other; false after printing what is wrong. */
static bool pd__open_data(const pd__targs *a, pd__shards *xs, pd_tensor *X, pd__shards *ys, pd_tensor *Y,
                          pd_tensor *VX, pd__map *mvx, pd_tensor *VY, pd__map *mvy) {
    if (!pd__shards_open(a->data, xs, X) || !pd__shards_open(a->labels, ys, Y)) return false;
    if (xs->n != ys->n) {
        fprintf(stderr, "pdonnx: --data %s names %d files but --labels %s %d\n", a->data, xs->n, a->labels, ys->n);
        return false;
    }
    for (int i = 0; i < xs->n && xs->n > 1; i++)
        if (xs->t[i].shape[0] != ys->t[i].shape[0]) {
            fprintf(stderr, "pdonnx: %s has %lld rows but %s has %lld\n", xs->path[i], (long long)xs->t[i].shape[0],
                    ys->path[i], (long long)ys->t[i].shape[0]);
            return false;
        }
    if (a->val_x && (pd__npy_map(a->val_x, VX, mvx) != PD_OK || pd__npy_map(a->val_y, VY, mvy) != PD_OK)) {
        pd_cli_fail();
        return false;
    }
    if (X->ndim < 1 || Y->ndim < 1 || X->shape[0] != Y->shape[0]) {
        fprintf(stderr, "pdonnx: %s has %lld rows but %s has %lld\n", a->data, (long long)(X->ndim ? X->shape[0] : 0),
                a->labels, (long long)(Y->ndim ? Y->shape[0] : 0));
        return false;
    }
    if (a->val_x && (VX->ndim < 1 || VY->ndim < 1 || VX->shape[0] != VY->shape[0])) {
        fprintf(stderr, "pdonnx: %s and %s have different row counts\n", a->val_x, a->val_y);
        return false;
    }
    if (X->shape[0] == 0 || (a->val_x && VX->shape[0] == 0)) {
        fprintf(stderr, "pdonnx: %s: no rows (its first dimension is 0)\n", X->shape[0] == 0 ? a->data : a->val_x);
        return false;
    }
    return true;
}

/* A pipeline's flags (--stages or --plan given): the schedule, the
 * microbatches (by default enough to fill the pipeline) and what goes with
 * which; 0, or 2 after the usage error. */
static int pd__pipe_flags(pd__targs *a, pd__sched_kind *kind_out) {
    pd__sched_kind kind = PD_SCHED_FLUSH;
    if (a->schedule && pd__sched_kind_parse(a->schedule, &kind) != PD_OK)
        return pd_cli_usage_error("train: %s", pd_cli_error());
    if (!a->microbatches) {
        /* enough microbatches to fill the pipeline: the smallest divisor of the batch >= the stages */
        int64_t want = a->stages ? a->stages : 4;
        a->microbatches = a->batch;
        for (int64_t m = want; m <= a->batch; m++)
            if (a->batch % m == 0) {
                a->microbatches = m;
                break;
            }
        if (kind == PD_SCHED_PIPEDREAM) a->microbatches = 1;
    }
    if (a->vertical_sync && kind != PD_SCHED_PIPEDREAM)
        return pd_cli_usage_error("train: %s", "--vertical-sync goes with --schedule pipedream");
    if (a->virtual_stages && (kind != PD_SCHED_INTERLEAVED || a->plan))
        return pd_cli_usage_error("train: %s", "--virtual-stages goes with --stages N --schedule interleaved");
    if (kind == PD_SCHED_PIPEDREAM && a->microbatches != 1)
        return pd_cli_usage_error("train: %s", "--schedule pipedream updates after every microbatch: use --microbatches 1");
    if (a->batch % a->microbatches) {
        char msg[96];
        snprintf(msg, sizeof msg, "--batch %lld is not a multiple of --microbatches %lld", (long long)a->batch,
                 (long long)a->microbatches);
        return pd_cli_usage_error("train: %s", msg);
    }
    *kind_out = kind;
    return 0;
}

/* train's arguments: MODEL.flags's, then the command line's, checked against
 * each other; 0, or the exit code after printing the usage error. */
static int pd__train_args(int argc, char **argv, const pd_cli_avg_args *av, pd__targs *a, bool *piped_out,
                          pd__sched_kind *kind_out) {
    memset(a, 0, sizeof *a);
    pd_train_options o0 = PD_TRAIN_OPTIONS_INIT;
    a->o = o0;
    a->shuffle = true;
    a->batch = 32;
    a->epochs = 1;
    a->ckpt_keep = 3;
    int rc = 2;
    if (pd__mp.rank > 0) a->quiet = true; /* under mpirun rank 0 speaks */
    /* the model comes first so its default flags can be read before the rest */
    const char *model = NULL;
    for (int i = 0; i < argc; i++) {
        size_t n = strlen(argv[i]);
        if (!model && argv[i][0] != '-' && n > 5 && strcmp(argv[i] + n - 5, ".onnx") == 0) model = argv[i];
        if (strcmp(argv[i], "--quiet") == 0) a->quiet = true;
    }
    char *tok[PD_MAX_ARGS];
    int nt = model ? pd__read_flags(a, model, tok, PD_MAX_ARGS) : 0;
    if (nt < 0) return rc;
    if ((rc = pd__parse(a, nt, tok)) != 0 || (rc = pd__parse(a, argc, argv)) != 0) return rc;
    rc = 2;
    if (!a->model) {
        pd_cli_usage_error("train: %s", "missing MODEL.onnx");
        return rc;
    }
    if (!a->data || !a->labels) {
        pd_cli_usage_error("train: %s", "give --data X.npy --labels Y.npy (or a MODEL.flags file beside the model)");
        return rc;
    }
    if (av->given && (a->ckpt_dir || a->resume || a->ckpt_every)) {
        pd_cli_usage_error("train: %s", "--parallel-pipelines runs without checkpoints so far");
        return rc;
    }
    if (pd__mp.size > 1) { /* mpirun: rank 0 reports and writes; a pipeline of one process per stage replica */
        if (!a->stages && !a->plan) {
            pd_cli_usage_error("train: %s", "under mpirun, give --stages N or --plan FILE (one process per stage replica)");
            return rc;
        }
        a->trace_all = a->trace;
        a->stage_save = a->save;
        if (pd__mp.rank > 0) {
            a->quiet = true;
            a->metrics = a->save = a->trace = NULL;
            a->val_x = a->val_y = NULL;
        }
    }
    /* per-stage loading under mpirun: not with AvgPipe's parallel pipelines
     * (their elastic update reads every weight); PDONNX_LAZY_WEIGHTS=0 turns
     * it off, =1 on in one process too (bench/stage_memory.sh's comparisons) */
    const char *lz = getenv("PDONNX_LAZY_WEIGHTS");
    a->lazy = !av->given && (pd__mp.size > 1 ? !(lz && strcmp(lz, "0") == 0) : lz && strcmp(lz, "1") == 0);
    if (!pd__outputs_ok(a)) return rc;
    if (a->ckpt_every && !a->ckpt_dir && !a->resume) {
        pd_cli_usage_error("train: %s", "--checkpoint-every needs --checkpoint-dir DIR");
        return rc;
    }
    if ((a->ckpt_dir || a->resume) && !a->ckpt_every) a->ckpt_every = PD_CHECKPOINT_AUTO; /* a folder alone: CheckFreq's auto */
    bool piped = *piped_out = a->stages || a->plan;
    if (av->given && !piped) { /* AvgPipe hook */
        pd_cli_usage_error("train: %s", "--parallel-pipelines, --elastic-alpha and --average-every need --stages N or --plan FILE");
        return rc;
    }
    pd__sched_kind kind = PD_SCHED_FLUSH;
    if (!piped && (a->schedule || a->microbatches || a->trace || a->virtual_stages || a->vertical_sync || a->recompute)) {
        pd_cli_usage_error("train: %s", "--schedule, --microbatches, --virtual-stages, --trace and --recompute need "
                                        "--stages N or --plan FILE");
        return rc;
    }
    if (a->stages && a->plan) {
        pd_cli_usage_error("train: %s", "give --stages N or --plan FILE, not both");
        return rc;
    }
    if (piped && pd__pipe_flags(a, &kind) != 0) return rc;
    *kind_out = kind;
    return 0;
}

/* One `pdonnx train` run: its arguments, data, model and what it writes. */
typedef struct pd__trun {
    pd__targs a;
    bool piped;                        /* --stages or --plan: a pipeline */
    pd__sched_kind kind;
    pd_tensor X, Y, VX, VY;
    pd__shards xs, ys;                 /* X and Y's files: X and Y are the first's, with every file's rows */
    pd__map mvx, mvy;                  /* VX's and VY's mappings (.npy data is mapped, not read) */
    int64_t graph_batch, rows, steps;  /* the graph's batch (a pipeline's: one microbatch) */
    pd_graph *g;
    pd_session *s;
    const char *input;                 /* the graph input the data feeds */
    pd_value_info in, out;             /* that input; the output the loss reads */
    pd__data data;
    pd__prefetch *pf;
    FILE *mf;
    pd__ckrun cr;
} pd__trun;

/* The model, with the data's rows fixing the dims it leaves open (a
 * sequence length); a model.half() export trains in float32. */
static bool pd__train_load(pd__trun *t) {
    pd__targs *a = &t->a;
    pd_load_options lo = PD_LOAD_OPTIONS_INIT;
    lo.batch = t->graph_batch;
    lo.max_constant_bytes = a->max_constant_bytes;
    lo.untie = a->untie;
    lo.half_as_float = 1;
    lo.lazy_weights = t->piped && a->lazy; /* under mpirun: each process reads its stages' weights */
    pd_input_shape rows_shape = {NULL, t->X.ndim, {0}, PD_UNDEFINED};
    for (int i = 1; i < t->X.ndim; i++) rows_shape.shape[i] = t->X.shape[i];
    rows_shape.shape[0] = lo.batch;
    if (!(a->o.loss == PD_LOSS_GRAPH && a->o.labels_input)) lo.n_input_shapes = 1, lo.input_shapes = &rows_shape;
    if (pd_graph_load_file(a->model, &lo, &t->g) != PD_OK) return pd_cli_fail(), false;
    if (!a->quiet) pd__report_load(a, t->g);
    bool deferred = false, half = false; /* per-stage loading applies: the model's weights are external data */
    for (int i = 0; i < t->g->ntensors; i++)
        deferred |= pd__deferred(&t->g->tensors[i]), half |= t->g->tensors[i].file_dtype != 0;
    a->lazy = a->lazy && deferred && !half; /* float16 weights beside them: saved gathered, in their own type */
    a->lo = lo;
    a->lo.n_input_shapes = 0, a->lo.input_shapes = NULL, a->lo.lazy_weights = a->lazy;
    if (a->lazy && a->val_x && pd__mp.size > 1) { /* rank 0 validates, holding its stages' weights only */
        fprintf(stderr, "pdonnx: --val under mpirun with per-stage loading: rank 0 holds only its stages' weights "
                        "(PDONNX_LAZY_WEIGHTS=0 gathers them all)\n");
        return false;
    }
    return true;
}

/* The data input: the one graph input that is not the labels. */
static bool pd__train_input(pd__trun *t) {
    pd__targs *a = &t->a;
    char en1[256], en2[256]; /* the model's names, escaped (pd__escape): one line, no terminal codes */
    for (int i = 0; i < pd_graph_num_inputs(t->g); i++) {
        pd_value_info v;
        if (pd_graph_input(t->g, i, &v) != PD_OK) continue;
        if (a->o.loss == PD_LOSS_GRAPH && (a->o.labels_input ? !strcmp(v.name, a->o.labels_input) : i > 0)) continue;
        if (t->input) {
            fprintf(stderr, "pdonnx: %s: the model has several inputs ('%s', '%s'); pdonnx train feeds one\n", a->model,
                    pd__escape(en1, sizeof en1, t->input), pd__escape(en2, sizeof en2, v.name));
            return false;
        }
        t->input = v.name;
    }
    if (pd_graph_value(t->g, t->input, &t->in) != PD_OK ||
        pd_graph_output(t->g, 0, &t->out) != PD_OK || (a->o.output && pd_graph_value(t->g, a->o.output, &t->out) != PD_OK)) {
        fprintf(stderr, "pdonnx: %s\n", pd_cli_error());
        return false;
    }
    return true;
}

/* Data and labels in the dtypes the model and the loss take, rows of the
 * input's shape, class labels within the output's classes. */
static bool pd__train_fit(pd__trun *t) {
    pd__targs *a = &t->a;
    char en1[256];
    bool conv = true;
    for (int i = 0; i < t->xs.n; i++) conv = conv && pd__convert(&t->xs.t[i], t->in.dtype, &t->xs.m[i]);
    t->X.dtype = t->xs.t[0].dtype, t->X.data = t->xs.t[0].data;
    if (!conv || (a->val_x && !pd__convert(&t->VX, t->in.dtype, &t->mvx))) {
        fprintf(stderr, "pdonnx: %s: %s data cannot feed input '%s' (%s)\n", a->data, pd_dtype_name(t->X.dtype),
                pd__escape(en1, sizeof en1, t->input), pd_dtype_name(t->in.dtype));
        return false;
    }
    pd_dtype ylabel = a->o.loss == PD_LOSS_MSE ? PD_FLOAT : PD_INT64;
    if (a->o.loss == PD_LOSS_GRAPH) {
        pd_value_info lv;
        if (pd_graph_input(t->g, pd_graph_num_inputs(t->g) > 1 ? 1 : 0, &lv) != PD_OK) lv.dtype = ylabel;
        ylabel = lv.dtype;
    }
    for (int i = 0; i < t->ys.n; i++) conv = conv && pd__convert(&t->ys.t[i], ylabel, &t->ys.m[i]);
    t->Y.dtype = t->ys.t[0].dtype, t->Y.data = t->ys.t[0].data;
    if (!conv || (a->val_x && !pd__convert(&t->VY, ylabel, &t->mvy))) {
        fprintf(stderr, "pdonnx: %s: %s labels do not fit --loss %s (it needs %s)\n", a->labels,
                pd_dtype_name(t->Y.dtype), a->o.loss == PD_LOSS_MSE ? "mse" : "cross_entropy", pd_dtype_name(ylabel));
        return false;
    }
    pd_value_info in = t->in;
    bool fits = t->X.ndim == in.ndim;
    for (int i = 1; fits && i < in.ndim; i++) fits = t->X.shape[i] == in.shape[i];
    if (!fits) {
        char want[128], got[128];
        in.shape[0] = t->rows;
        pd__format_shape(want, sizeof want, in.ndim, in.shape);
        pd__format_shape(got, sizeof got, t->X.ndim, t->X.shape);
        fprintf(stderr, "pdonnx: %s: rows of shape %s do not fit input '%s' (it takes %s)\n", a->data, got,
                pd__escape(en1, sizeof en1, t->input), want);
        return false;
    }
    return a->o.loss != PD_LOSS_CROSS_ENTROPY || pd__check_labels(a, &t->out, &t->ys, &t->Y, &t->VY);
}

/* The run's record for checkpoints, and --resume's checkpoint, which must be
 * of this run and within its steps. */
static bool pd__train_resume(pd__trun *t) {
    pd__targs *a = &t->a;
    pd__ckrun *cr = &t->cr;
    if (a->ckpt_dir || a->resume) {
        cr->info = pd__run_info(a, t->graph_batch, t->steps, t->rows, t->piped, t->kind);
        if (!cr->info) return fprintf(stderr, "pdonnx: out of memory\n"), false;
    }
    if (!a->resume) return true;
    if (pd_cli_ckpt_load(a->resume, cr->info, &cr->from, &cr->from_info) != PD_OK) return pd_cli_fail(), false;
    cr->first = cr->from.step;
    if (cr->first > t->steps || (!t->piped && cr->from.nparts != 1)) {
        fprintf(stderr, "pdonnx: --resume %s: %s is at step %lld of %lld%s\n", a->resume, cr->from.path,
                (long long)cr->first, (long long)t->steps, cr->first > t->steps ? "" : ", with several stages");
        return false;
    }
    return true;
}

/* A pipeline (or AvgPipe's pipelines) trains; the weights come back into g,
 * which one stage then validates. */
static bool pd__train_piped(pd__trun *t, const pd_cli_avg_args *av) {
    pd__targs *a = &t->a;
    if ((av->given ? pd__train_avgpipe_hook(a, av, t->g, t->input, &t->X, &t->Y, &t->data, t->steps, t->kind, t->mf)
                   : pd__train_pipeline(a, t->g, t->input, &t->X, &t->Y, &t->data, t->steps, t->kind, t->mf, &t->cr)) != 0)
        return false;
    if (!a->val_x) return true;
    double vloss, vacc;
    int64_t vc, vn;
    if (pd_session_create(t->g, &a->o, &t->s) != PD_OK ||
        pd__validate(t->s, t->input, &t->VX, &t->VY, &vloss, &vacc, &vc, &vn) != PD_OK)
        return pd_cli_fail(), false;
    if (!a->quiet)
        printf("validation: loss %.4f, accuracy %.2f%% (%lld/%lld)\n", vloss, 100 * vacc, (long long)vc, (long long)vn);
    return true;
}

/* One step's metrics line and progress (a bar on a terminal, else a line
 * every tenth of the run and at validations). */
typedef struct pd__tstep {
    int64_t k;
    double dt, waited, elapsed;
    bool did_val;
    double vloss, vacc;
} pd__tstep;

static bool pd__train_report_step(const pd__trun *t, const pd_step_result *r, const pd__tstep *q, bool tty) {
    const pd__targs *a = &t->a;
    int64_t k = q->k, steps = t->steps, every = steps / 10 > 0 ? steps / 10 : 1;
    if (t->mf) {
        fprintf(t->mf, "{\"step\": %lld, \"loss\": %.9g, \"lr\": %.9g, \"samples_per_s\": %.1f, \"grad_norm\": %.6g, "
                       "\"data_wait_s\": %.6f, \"epoch\": %.4f",
                (long long)k + 1, r->loss, r->lr, (double)a->batch / q->dt, r->grad_norm, q->waited,
                (double)((k + 1) * a->batch) / (double)t->rows);
        if (q->did_val) fprintf(t->mf, ", \"val_loss\": %.9g, \"val_accuracy\": %.6f", q->vloss, q->vacc);
        fprintf(t->mf, "}\n");
        if (!pd__metrics_ok(t->mf, a->metrics)) return false; /* flushed: a checkpoint never gets ahead of the metrics */
    }
    double rate = (double)(k + 1) * (double)a->batch / q->elapsed;
    if (tty) {
        int w = 30, fill = (int)((k + 1) * w / steps);
        printf("\rstep %lld/%lld [%.*s%.*s] loss %.4f  %.0f samples/s", (long long)k + 1, (long long)steps, fill,
               "##############################", w - fill, "..............................", r->loss, rate);
        if (q->did_val) printf("  val acc %.2f%%", 100 * q->vacc);
        fflush(stdout);
    } else if (!a->quiet && ((k + 1) % every == 0 || k + 1 == steps || q->did_val)) {
        printf("step %lld/%lld  loss %.6f  lr %.4g  %.0f samples/s", (long long)k + 1, (long long)steps, r->loss, r->lr,
               rate);
        if (q->did_val) printf("  val loss %.4f acc %.2f%%", q->vloss, 100 * q->vacc);
        printf("\n");
    }
    return true;
}

/* One stage: a session steps through the prefetched batches, validating at
 * each epoch's end, checkpointing as the policy says. */
static bool pd__train_stage(pd__trun *t) {
    pd__targs *a = &t->a;
    pd__ckrun *cr = &t->cr;
    if (!a->quiet) pd__report_params(a, t->s, t->rows, t->steps);
    if (cr->from.nparts) {
        if (pd__session_restore(t->s, cr->from.parts[0], cr->from.lens[0]) != PD_OK) {
            fprintf(stderr, "pdonnx: --resume %s: %s\n", cr->from.path, pd_cli_error());
            return false;
        }
        if (!a->quiet) printf("resuming from %s at step %lld\n", cr->from.path, (long long)cr->first);
    }
    if (cr->info && pd__ckpt_begin(a, cr) != PD_OK) return pd_cli_fail(), false;
    if (cr->first < t->steps && pd__prefetch_start(&t->data, cr->first, t->steps - 1, &t->pf) != PD_OK)
        return pd_cli_fail(), false;
    bool tty = isatty(fileno(stdout)) && !a->quiet;
    pd_tensor bx = t->X, by = t->Y;
    bx.shape[0] = by.shape[0] = a->batch;
    double t_start = pd__now(), stall = 0, last_loss = 0;
    pd__tstep q = {0};
    int64_t vcorrect = 0, vcount = 0;
    for (int64_t k = cr->first; k < t->steps; k++) {
        double t0 = pd__now();
        const void *xb, *yb;
        pd_step_result r;
        q.k = k;
        if (pd__prefetch_next(t->pf, &xb, &yb, &q.waited) != PD_OK) return pd_cli_fail(), false;
        stall += q.waited;
        bx.data = (void *)xb;
        by.data = (void *)yb;
        if (pd_session_set_input(t->s, t->input, &bx) != PD_OK || pd_session_set_labels(t->s, &by) != PD_OK ||
            pd_session_step(t->s, &r) != PD_OK) {
            if (tty) printf("\n");
            return pd_cli_fail(), false;
        }
        q.dt = pd__now() - t0;
        last_loss = r.loss;
        /* an epoch ends when the stream passes a multiple of the rows */
        bool epoch_end = ((k + 1) * a->batch) / t->rows > (k * a->batch) / t->rows || k + 1 == t->steps;
        q.did_val = a->val_x && epoch_end;
        if (q.did_val && pd__validate(t->s, t->input, &t->VX, &t->VY, &q.vloss, &q.vacc, &vcorrect, &vcount) != PD_OK)
            return pd_cli_fail(), false;
        q.elapsed = pd__now() - t_start;
        if (!pd__train_report_step(t, &r, &q, tty)) return false;
        if (cr->ck && pd__ckpol_session(cr->ck, t->s, k + 1) != PD_OK) {
            if (tty) printf("\n");
            return pd_cli_fail(), false;
        }
    }
    double total = pd__now() - t_start;
    if (tty) printf("\n");
    if (cr->ck) {
        pd_status cs = pd__ckpol_final(cr->ck, NULL, t->s, t->steps);
        pd_status fs = pd__ckpt_end(a, cr, total);
        if (cs != PD_OK || fs != PD_OK) return pd_cli_fail(), false;
    }
    int64_t trained = t->steps - cr->first;
    if (a->quiet) return true;
    double rate = total > 0 ? (double)trained * (double)a->batch / total : 0;
    printf("trained %lld steps in %.2f s: %.*f samples/s, data stall %.3f s (%.1f%%), final loss %.6f\n",
           (long long)trained, total, pd_cli_rate_digits(rate), rate, stall, total > 0 ? 100 * stall / total : 0,
           last_loss);
    if (a->val_x)
        printf("validation: loss %.4f, accuracy %.2f%% (%lld/%lld)\n", q.vloss, 100 * q.vacc, (long long)vcorrect,
               (long long)vcount);
    return true;
}

/* --save (a CUDA session's weights synced first) and the metrics file closed. */
static bool pd__train_finish(pd__trun *t) {
    pd__targs *a = &t->a;
    if (a->save) {
        if ((t->s && pd_session_sync(t->s) != PD_OK) || pd_graph_save(t->g, a->save) != PD_OK)
            return pd_cli_fail(), false;
        if (!a->quiet) printf("saved %s\n", a->save);
    }
    if (!t->mf) return true;
    bool bad = !pd__metrics_ok(t->mf, a->metrics);
    FILE *f = t->mf;
    t->mf = NULL;
    if (fclose(f) != 0 && !bad) {
        fprintf(stderr, "pdonnx: --metrics %s: write failed: %s\n", a->metrics, strerror(errno));
        bad = true;
    }
    return !bad;
}

static void pd__train_free(pd__trun *t) {
    pd__ckrun *cr = &t->cr;
    if (cr->ck) pd__ckpt_end(&t->a, cr, 0);
    cJSON_Delete(cr->info);
    cJSON_Delete(cr->from_info);
    pd__ckpt_free(&cr->from);
    if (t->mf) fclose(t->mf);
    pd__prefetch_stop(t->pf);
    pd__data_free(&t->data);
    pd_session_destroy(t->s);
    pd_graph_destroy(t->g);
    pd__shards_close(&t->xs);
    pd__shards_close(&t->ys);
    pd__data_release(&t->VX, &t->mvx);
    pd__data_release(&t->VY, &t->mvy);
}

/* Parse, check, load, train, report. */
static int pd__train_main(int argc, char **argv) {
    pd_cli_avg_args av; /* AvgPipe hook: its flags leave argv here */
    if (pd_cli_avg_take_flags(&argc, argv, &av) != 0) return 2;
    pd__trun *t = calloc(1, sizeof *t);
    if (!t) return fprintf(stderr, "pdonnx: out of memory\n"), 1;
    t->kind = PD_SCHED_FLUSH;
    pd__targs *a = &t->a;
    int rc = pd__train_args(argc, argv, &av, a, &t->piped, &t->kind);
    if (rc != 0) goto out;
    rc = 1;
    if (!pd__open_data(a, &t->xs, &t->X, &t->ys, &t->Y, &t->VX, &t->mvx, &t->VY, &t->mvy)) goto done;
    t->graph_batch = t->piped ? a->batch / a->microbatches : a->batch; /* a pipeline's graph takes one microbatch */
    if (!pd__train_load(t)) goto done;
    a->o.seed = (uint64_t)a->seed;
    t->rows = t->X.shape[0];
    t->steps = a->steps ? a->steps : (a->epochs * t->rows + a->batch - 1) / a->batch;
    a->o.cosine_steps = a->cosine ? t->steps : 0;
    bool int_labels = t->Y.dtype == PD_INT64 || t->Y.dtype == PD_INT32 || t->Y.dtype == PD_UINT8 || t->Y.dtype == PD_INT16;
    if (a->o.loss == PD_LOSS_AUTO) a->o.loss = int_labels ? PD_LOSS_CROSS_ENTROPY : PD_LOSS_MSE;
    if (!t->piped && pd_session_create(t->g, &a->o, &t->s) != PD_OK) {
        pd_cli_fail();
        goto done;
    }
    if (!pd__train_input(t) || !pd__train_fit(t)) goto done;
    if ((t->xs.n > 1 ? pd__data_init_parts(&t->data, t->xs.n, t->xs.t, t->ys.t, a->batch, a->shuffle, (uint64_t)a->seed)
                     : pd__data_init(&t->data, &t->X, &t->Y, a->batch, a->shuffle, (uint64_t)a->seed)) != PD_OK) {
        pd_cli_fail();
        goto done;
    }
    if (!pd__train_resume(t)) goto done;
    if (a->metrics && !(t->mf = pd__metrics_open(a->metrics, t->cr.first))) goto done;
    if (pd__mp.size > 1 && !pd__mp_agree(true, false)) goto done; /* every process read its data and model */
    if (!(t->piped ? pd__train_piped(t, &av) : pd__train_stage(t)) || !pd__train_finish(t)) goto done;
    rc = 0;
done:
    pd__train_free(t);
out:
    for (int i = 0; i < a->nowned; i++) free(a->owned[i]);
    free(t);
    return rc;
}

int pd_cli_train(int argc, char **argv) {
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            pd__targs a;
            pd_flag t[64];
            int n = pd__train_flags(&a, t);
            printf("usage: pdonnx train MODEL.onnx --data X.npy --labels Y.npy [flags]\n"
                   "(MODEL.flags beside the model, when there, gives default flags)\n\n");
            pd_cli_flags_help(stdout, t, n);
            printf("  %-28s %s\n  %-28s %s\n  %-28s %s\n", "--parallel-pipelines K",
                   "AvgPipe: K pipelines averaged elastically (docs/SCHEDULES.md)", "--elastic-alpha A",
                   "AvgPipe's elastic weight (default 0.9/K)", "--average-every N", "AvgPipe: average every N steps");
            return 0;
        }
    if (pd__mpi_init(&pd__mp.rank, &pd__mp.size) != PD_OK) return pd_cli_fail();
    if (pd__mp.size > 1 && pd__mp.rank > 0) { /* hold back errors until the processes agree */
        fflush(stderr);
        pd__mp.held = tmpfile();
        pd__mp.saved_err = pd__mp.held ? dup(2) : -1;
        if (pd__mp.saved_err >= 0) dup2(fileno(pd__mp.held), 2);
    }
    int rc = pd__train_main(argc, argv);
    /* before the pipeline (phase < 2) the others wait at the next agreement;
     * after it, every process already holds the outcome */
    while (pd__mp.size > 1 && rc != 0 && pd__mp.phase < 2) pd__mp_agree(false, pd__mp.phase == 1);
    pd__mp_release(true);
    pd__mpi_finalize();
    return rc;
}
