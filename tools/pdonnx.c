/* pdonnx.c - the command-line tool: info, run, conformance.
 *
 * The only place that turns a pd_status into an exit code: every error is one
 * line on stderr ("pdonnx: <message>") and exit status 1 (2 for bad usage).
 */
#include "../pipedream.h"
#include "../core/plan.h"
#include "cli.h"
#include "ckpt.h"
#include "program_env.h"
#include "../runtime/comm/transport.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The library names option fields (opt->cost_model), which a program
 * embedding it sets; the command line shows the flags that set them. */
static const char *const pd__field_flags[][2] = {
    {"opt->level_bandwidth", "--bandwidth"}, {"opt->level_workers", "--topology"},
    {"opt->clip_grad_norm", "--clip-grad-norm"}, {"opt->checkpoint_every", "--checkpoint-every"},
    {"opt->checkpoint_dir", "--checkpoint-dir"}, {"opt->vertical_sync", "--vertical-sync"}, {"plan->recompute", "--recompute"},
    {"opt->microbatches", "--microbatches"}, {"opt->microbatch_size", "--microbatch-size"}, {"opt->cost_model", "--cost-model"},
    {"opt->max_states", "--max-states"}, {"opt->max_constant_bytes", "--max-constant-bytes"}, {"opt->batch", "--batch"}, {"opt->bandwidth", "--bandwidth"}, {"opt->schedule", "--schedule"},
    {"opt->workers", "--workers"}, {"opt->memory", "--memory"}, {"opt->algo", "--algo"},
};

const char *pd_cli_error(void) {
    static _Thread_local char out[2048];
    const char *m = pd_last_error();
    size_t o = 0;
    while (*m && o + 1 < sizeof out) {
        const char *flag = NULL;
        size_t len = 0;
        for (size_t k = 0; !flag && k < sizeof pd__field_flags / sizeof pd__field_flags[0]; k++) {
            len = strlen(pd__field_flags[k][0]);
            char next = m[len < strlen(m) ? len : strlen(m)];
            if (!strncmp(m, pd__field_flags[k][0], len) && !(next == '_' || (next >= 'a' && next <= 'z')))
                flag = pd__field_flags[k][1];
        }
        if (flag) {
            o += (size_t)snprintf(out + o, sizeof out - o, "%s", flag);
            m += len;
        } else {
            out[o++] = *m++;
        }
    }
    out[o < sizeof out ? o : sizeof out - 1] = 0;
    return out;
}

int pd_cli_fail(void) {
    const char *msg = pd_cli_error();
    int r;
    char colon;
    /* an agreed error (pd__mpi_agree_status) names its rank already */
    bool named = sscanf(msg, "rank %d%c", &r, &colon) == 2 && colon == ':';
    if (pd__mpi_active() && !named) fprintf(stderr, "pdonnx: rank %d: %s\n", pd__mpi_rank(), msg);
    else fprintf(stderr, "pdonnx: %s\n", msg);
    return 1;
}

pd_status pd_cli_share_plan(int rank, pd_status made, pd_plan **plan) {
    char *pj = rank == 0 && made == PD_OK && *plan ? pd__plan_to_json(*plan) : NULL;
    if (rank == 0 && made == PD_OK && !pj) made = pd__err(PD_ERR_NOMEM, "out of memory");
    size_t len = pj ? strlen(pj) : 0; /* 0: rank 0 has none */
    void *buf = pj;
    if (pd__mpi_bcast(&buf, &len) != PD_OK) {
        pd_cli_fail();
        pd__mpi_abort(1);
    }
    if (rank == 0) {
        free(pj);
        return made;
    }
    pd_plan_destroy(*plan);
    *plan = NULL;
    pd_status st = len ? pd__plan_from_json(buf, len, "rank 0's plan", plan) : pd__err(PD_ERR_INVALID, "rank 0 has no plan");
    PD_FREE(buf);
    return st;
}

bool pd_cli_parse_double(const char *flag, const char *s, double lo, double *out) {
    char *end;
    errno = 0;
    double v = s ? strtod(s, &end) : 0;
    if (!s || !*s || *end || errno || !isfinite(v) || v < lo) {
        fprintf(stderr, "pdonnx: %s expects a number >= %g, got '%s'\n", flag, lo, s ? s : "");
        return false;
    }
    *out = v;
    return true;
}

int pd_cli_usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "pdonnx: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (see pdonnx --help)\n");
    return 2;
}

bool pd_cli_parse_int(const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = s ? strtoll(s, &end, 10) : 0;
    if (!s || !*s || *end || errno || v < lo || v > hi) {
        fprintf(stderr, "pdonnx: %s expects an integer in [%lld, %lld], got '%s'\n", flag, (long long)lo,
                (long long)hi, s ? s : "");
        return false;
    }
    *out = v;
    return true;
}

static void pd__usage(FILE *f) {
    fprintf(f,
            "pdonnx %s - train ONNX models with pipeline parallelism\n"
            "\n"
            "usage (pdonnx COMMAND --help lists a command's flags):\n"
            "  pdonnx info MODEL.onnx [--batch N] [--max-constant-bytes N]\n"
            "      print the layer DAG: nodes, output shapes, parameters and FLOPs\n"
            "  pdonnx run MODEL.onnx [--batch N] [--threads N] [--max-constant-bytes N] --input NAME=X.npy ...\n"
            "         [--output NAME=Y.npy ...]\n"
            "      run inference; without --output, print a summary of each output\n"
            "      (--max-constant-bytes: cap on the constants folding may make, default 1 GiB)\n"
            "  pdonnx train MODEL.onnx --data X.npy --labels Y.npy [--val XV.npy YV.npy]\n"
            "         [--loss auto|cross_entropy|mse|graph] [--output NAME]\n"
            "         [--optimizer sgd|momentum|nesterov|adam|adamw] [--lr F] [--momentum F]\n"
            "         [--beta1 F] [--beta2 F] [--eps F] [--weight-decay F] [--clip-grad-norm F]\n"
            "         [--warmup N] [--cosine] [--min-lr F] [--freeze REGEX] [--trainable REGEX] [--untie]\n"
            "         [--batch N] [--steps N | --epochs N] [--no-shuffle] [--seed N] [--threads N]\n"
            "         [--device cpu|cuda[:N]|sim[:N]] [--precision fp32|tf32|bf16] (cuda: a stage per thread on the GPU;\n"
            "          sim: the CUDA path on N simulated devices, on the CPU, for testing)\n"
            "         [--metrics FILE.jsonl] [--save OUT.onnx] [--max-constant-bytes N] [--quiet]\n"
            "         [--stages N | --plan PLAN.json] [--schedule gpipe|flush|pipedream|2bw|interleaved|zb-h1|avgpipe]\n"
            "         [--microbatches M] [--virtual-stages V] [--vertical-sync] [--recompute] [--trace OUT.json]\n"
            "         [--parallel-pipelines K [--elastic-alpha A] [--average-every N]]\n"
            "         [--checkpoint-dir DIR] [--checkpoint-every N|auto] [--checkpoint-keep K (3)]\n"
            "         [--checkpoint-overhead F (0.035)] [--resume DIR]\n"
            "      train on one stage, or as a pipeline of stages (one thread each, or one process\n"
            "      each under mpirun), or as K such pipelines kept close by elastic averaging\n"
            "      (AvgPipe; --save writes the centre);\n"
            "      MODEL.flags beside the model gives default flags\n"
            "  pdonnx export CHECKPOINT_DIR -o OUT.onnx [--model MODEL.onnx]\n"
            "      write the trained model of the newest valid checkpoint\n"
            "  pdonnx profile MODEL.onnx --batch N [--device cpu|cuda[:N]|sim[:N]] [--warmup N] [--repeats N] [--threads N]\n"
            "         [--optimizer KIND] [--loss KIND] [--fit-batches N[,N]] -o PROFILE.json [--pipedream graph.txt] [--quiet]\n"
            "  pdonnx profile --import graph.txt -o PROFILE.json\n"
            "      measure per-node forward, backward (input and weight gradient) times and bytes\n"
            "  pdonnx plan MODEL.onnx|--profile FILE --workers N [--topology AxB] [--bandwidth B[,B]]\n"
            "         [--memory BYTES] [--microbatches M] [--microbatch-size N]\n"
            "         [--algo pipedream|2bw|bipartition|uniform|params|avgpipe]\n"
            "         [--cost-model default|pipedream] [--straight] [--activation-compression R]\n"
            "         [--max-states N] [--batch N] [-o PLAN.json] [--json FILE|-]\n"
            "      cut the model into pipeline stages and predict throughput\n"
            "  pdonnx simulate PLAN.json --schedule gpipe|flush|pipedream|2bw|interleaved|zb-h1|avgpipe\n"
            "         [--microbatches M] [--minibatches N] [--chunks V] [--trace OUT.json] [--svg OUT.svg]\n"
            "         [--instructions OUT.csv]\n"
            "      run the schedule's instruction lists through an event simulator\n"
            "  pdonnx schedule --stages P --microbatches M --schedule KIND [--chunks V] [--minibatches N]\n"
            "         [--max-inflight L] [--csv]\n"
            "      print the per-stage instruction lists (F, B, W, SEND/RECV, ALLREDUCE, STEP)\n"
            "  pdonnx conformance DIR... [--xfail FILE] [--quiet]\n"
            "      run ONNX backend test cases (folders with model.onnx and test_data_set_*)\n"
            "  pdonnx --version\n",
            PD_VERSION_STRING);
}

/* ---- info ------------------------------------------------------------------ */

static void pd__human(char *buf, size_t n, double v, const char *unit) {
    const char *pre[] = {"", "K", "M", "G", "T", "P", "E", "Z", "Y"};
    int k = 0;
    while (v >= 1000 && k < 8) {
        v /= 1000;
        k++;
    }
    snprintf(buf, n, k ? "%.2f %s%s" : "%.0f %s%s", v, pre[k], unit);
}

static void pd__shape_str(char *buf, size_t n, const pd_value_info *v) {
    size_t k = (size_t)snprintf(buf, n, "%s[", pd_dtype_name(v->dtype));
    for (int i = 0; i < v->ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? "," : "", (long long)v->shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

static int pd__cmd_info(int argc, char **argv) {
    const char *path = NULL;
    pd_load_options lo = PD_LOAD_OPTIONS_INIT;
    lo.half_as_float = 1; /* the model as pdonnx train runs it (a note says so) */
    const pd_flag t[] = {
        {"--batch", PD_FLAG_INT, &lo.batch, 1, INT32_MAX, 0, "N", "binds a symbolic batch dimension", NULL, 0},
        {"--max-constant-bytes", PD_FLAG_INT, &lo.max_constant_bytes, 1, INT64_MAX, 0, "N", "cap on what constant folding may create", NULL, 0},
    };
    int nt = (int)(sizeof t / sizeof t[0]);
    if (pd_cli_wants_help(argc, argv)) return pd_cli_help("pdonnx info MODEL.onnx [flags]", t, nt);
    int bad = pd_cli_flags("info", t, nt, NULL, argc, argv, &path, 1);
    if (bad) return bad;
    if (!path) return pd_cli_usage_error("info: %s", "missing MODEL.onnx");
    pd_graph *g;
    if (pd_graph_load_file(path, &lo, &g) != PD_OK) return pd_cli_fail();
    /* names come from the file: escaped (pd__escape), so one is one line and sends no terminal codes */
    char a[128], b[64], c[64], e1[256], e2[256];
    printf("%s: %d nodes, %d inputs, %d outputs\n", pd__escape(e1, sizeof e1, path), pd_graph_num_nodes(g),
           pd_graph_num_inputs(g), pd_graph_num_outputs(g));
    for (int i = 0; i < pd_graph_num_notes(g); i++) printf("  note: %s\n", pd__escape(e1, sizeof e1, pd_graph_note(g, i)));
    for (int i = 0; i < pd_graph_num_inputs(g); i++) {
        pd_value_info v;
        if (pd_graph_input(g, i, &v) != PD_OK) continue;
        pd__shape_str(a, sizeof a, &v);
        printf("  input  %-24s %s\n", pd__escape(e1, sizeof e1, v.name), a);
    }
    for (int i = 0; i < pd_graph_num_outputs(g); i++) {
        pd_value_info v;
        if (pd_graph_output(g, i, &v) != PD_OK) continue;
        pd__shape_str(a, sizeof a, &v);
        printf("  output %-24s %s\n", pd__escape(e1, sizeof e1, v.name), a);
    }
    printf("\n%4s  %-28s %-20s %-26s %12s %12s %12s\n", "#", "node", "op", "output", "params", "FLOPs",
           "act bytes");
    /* in double: declared shapes can be huge, the sums of counts near INT64_MAX overflow */
    double tf = 0, ta = 0;
    bool over = false;
    for (int i = 0; i < pd_graph_num_nodes(g); i++) {
        pd_node_info ni;
        if (pd_graph_node(g, i, &ni) != PD_OK) continue;
        pd_value_info v;
        const char *o = pd_graph_node_output(g, i, 0);
        a[0] = 0;
        if (o && pd_graph_value(g, o, &v) == PD_OK) pd__shape_str(a, sizeof a, &v);
        pd__human(b, sizeof b, (double)ni.param_bytes, "B");
        /* INT64_MAX: the count stopped there (a huge declared shape) */
        bool at_max = ni.flops == INT64_MAX;
        over |= at_max;
        pd__human(c + at_max, sizeof c - at_max, (double)ni.flops, "");
        if (at_max) c[0] = '>';
        printf("%4d  %-28.28s %-20.20s %-26.26s %12s %12s %12lld\n", i, pd__escape(e1, sizeof e1, ni.name),
               pd__escape(e2, sizeof e2, ni.op_type), a, b, c, (long long)ni.output_bytes);
        tf += (double)ni.flops;
        ta += (double)ni.output_bytes;
    }
    pd__human(b, sizeof b, (double)pd_graph_param_bytes(g), "B");
    pd__human(c + over, sizeof c - over, tf, "FLOPs");
    if (over) c[0] = '>';
    pd__human(a, sizeof a, ta, "B");
    printf("\ntotal: %d nodes, parameters %s (%lld floats), forward %s, activations %s\n", pd_graph_num_nodes(g), b,
           (long long)(pd_graph_param_bytes(g) / 4), c, a);
    pd_graph_destroy(g);
    return 0;
}

/* ---- run ------------------------------------------------------------------------- */

typedef struct {
    const char *name; /* NULL: the model's only input / first output */
    const char *file;
} pd__binding;

static bool pd__split_binding(const char *flag, const char *arg, pd__binding *b) {
    const char *eq = strchr(arg, '=');
    if (!eq) {
        b->name = NULL;
        b->file = arg;
        return true;
    }
    if (eq == arg || !eq[1]) {
        fprintf(stderr, "pdonnx: %s expects NAME=FILE.npy, got '%s'\n", flag, arg);
        return false;
    }
    char *name = strndup(arg, (size_t)(eq - arg));
    b->name = name;
    b->file = eq + 1;
    return name != NULL;
}

/* --input and --output: up to 64 each */
typedef struct {
    pd__binding *b;
    int *n;
} pd__bindings;

static int pd__flag_binding(void *ctx, const char *cmd, const pd_flag *f, char **v) {
    pd__bindings *s = ctx;
    if (*s->n == 64) {
        char msg[64];
        snprintf(msg, sizeof msg, "%s: too many %s flags", cmd, f->name);
        return pd_cli_usage_error("%s", msg);
    }
    return pd__split_binding(f->name, v[0], &s->b[(*s->n)++]) ? 0 : 2;
}

static void pd__summarize(const char *name, const pd_tensor *t) {
    pd_value_info v = {name, t->dtype, t->ndim, {0}};
    for (int i = 0; i < t->ndim; i++) v.shape[i] = t->shape[i];
    char s[128], e[256];
    pd__shape_str(s, sizeof s, &v);
    printf("%s %s", pd__escape(e, sizeof e, name), s);
    int64_t n = pd_tensor_numel(t);
    if (t->dtype == PD_FLOAT || t->dtype == PD_DOUBLE) {
        double mn = 0, mx = 0, sum = 0;
        for (int64_t i = 0; i < n; i++) {
            double x = t->dtype == PD_FLOAT ? ((float *)t->data)[i] : ((double *)t->data)[i];
            if (i == 0 || x < mn) mn = x;
            if (i == 0 || x > mx) mx = x;
            sum += x;
        }
        printf(" min %.6g max %.6g mean %.6g first [", mn, mx, n ? sum / (double)n : 0.0);
        for (int64_t i = 0; i < n && i < 6; i++)
            printf("%s%.6g", i ? ", " : "", t->dtype == PD_FLOAT ? ((float *)t->data)[i] : ((double *)t->data)[i]);
        printf("%s]", n > 6 ? ", ..." : "");
    } else if (t->dtype == PD_INT64) {
        printf(" first [");
        for (int64_t i = 0; i < n && i < 6; i++) printf("%s%lld", i ? ", " : "", (long long)((int64_t *)t->data)[i]);
        printf("%s]", n > 6 ? ", ..." : "");
    }
    printf("\n");
}

/* The outputs: printed (none named), or each --output written; false after
 * printing the error. */
static bool pd__run_outputs(const pd_graph *g, pd_engine *e, const pd__binding *outs, int nout) {
    if (nout == 0) {
        for (int i = 0; i < pd_graph_num_outputs(g); i++) {
            pd_value_info v;
            pd_tensor t;
            if (pd_graph_output(g, i, &v) != PD_OK) continue;
            if (pd_engine_get_output(e, v.name, &t) != PD_OK) {
                pd_cli_fail();
                return false;
            }
            pd__summarize(v.name, &t);
        }
    }
    for (int i = 0; i < nout; i++) {
        const char *name = outs[i].name;
        pd_value_info v;
        if (!name) {
            if (pd_graph_output(g, 0, &v) != PD_OK) v.name = "";
            name = v.name;
        }
        pd_tensor t;
        if (pd_engine_get_output(e, name, &t) != PD_OK || pd_npy_save(outs[i].file, &t) != PD_OK) {
            pd_cli_fail();
            return false;
        }
        char e1[256], e2[256];
        printf("wrote %s to %s\n", pd__escape(e1, sizeof e1, name), pd__escape(e2, sizeof e2, outs[i].file));
    }
    return true;
}

/* The input files fix the shapes: symbolic dims bind to a named input's
 * file, and an unnamed input's first axis binds a symbolic batch. */
static int run_shapes(const pd__binding *ins, const pd_tensor *data, int nin, pd_input_shape *shapes,
                      pd_load_options *lo) {
    int nshapes = 0;
    for (int i = 0; i < nin; i++) {
        if (!ins[i].name) continue;
        shapes[nshapes].name = ins[i].name;
        shapes[nshapes].ndim = data[i].ndim;
        shapes[nshapes].dtype = data[i].dtype;
        memcpy(shapes[nshapes].shape, data[i].shape, sizeof data[i].shape);
        nshapes++;
    }
    lo->n_input_shapes = nshapes;
    lo->input_shapes = shapes;
    for (int i = 0; i < nin; i++)
        if (!ins[i].name && lo->batch == 0 && data[i].ndim > 0) lo->batch = data[i].shape[0];
    return nshapes;
}

/* Loads the model; an unnamed input is the model's only input, named now,
 * and the model is loaded again with its file's shape bound. 0 or 1. */
static int run_load(const char *path, pd_load_options *lo, pd__binding *ins, const pd_tensor *data, int nin,
                    pd_input_shape *shapes, pd_graph **g) {
    if (pd_graph_load_file(path, lo, g) != PD_OK) return pd_cli_fail();
    for (int i = 0; i < nin; i++) {
        if (ins[i].name) continue;
        if (pd_graph_num_inputs(*g) != 1) {
            fprintf(stderr, "pdonnx: %s: the model has %d inputs; name them: --input NAME=%s\n", path,
                    pd_graph_num_inputs(*g), ins[i].file);
            return 1;
        }
        pd_value_info v;
        if (pd_graph_input(*g, 0, &v) != PD_OK) return 1;
        if (!(ins[i].name = strdup(v.name))) return pd_cli_usage_error("run: %s", "out of memory");
        pd_graph_destroy(*g);
        *g = NULL;
        shapes[0].name = ins[i].name;
        shapes[0].ndim = data[i].ndim;
        shapes[0].dtype = data[i].dtype;
        memcpy(shapes[0].shape, data[i].shape, sizeof data[i].shape);
        lo->n_input_shapes = 1;
        lo->input_shapes = shapes;
        if (pd_graph_load_file(path, lo, g) != PD_OK) return pd_cli_fail();
    }
    return 0;
}

/* Every model input is given: 0, or 1 naming the first that is not. */
static int run_all_given(const char *path, const pd_graph *g, const pd__binding *ins, int nin) {
    for (int i = 0; i < pd_graph_num_inputs(g); i++) {
        pd_value_info v;
        if (pd_graph_input(g, i, &v) != PD_OK) continue;
        bool given = false;
        for (int j = 0; j < nin; j++) given |= strcmp(ins[j].name, v.name) == 0;
        if (!given) {
            char e1[256], e2[256];
            fprintf(stderr, "pdonnx: %s: input '%s' is not given: add --input %s=FILE.npy\n",
                    pd__escape(e1, sizeof e1, path), pd__escape(e2, sizeof e2, v.name), e2);
            return 1;
        }
    }
    return 0;
}

static int pd__cmd_run(int argc, char **argv) {
    const char *path = NULL;
    pd_load_options lo = PD_LOAD_OPTIONS_INIT;
    pd_engine_options eo = PD_ENGINE_OPTIONS_INIT;
    pd__binding ins[64], outs[64];
    int nin = 0, nout = 0, rc = 1;
    pd__bindings bi = {ins, &nin}, bo = {outs, &nout};
    const pd_flag t[] = {
        {"--batch", PD_FLAG_INT, &lo.batch, 1, INT32_MAX, 0, "N", "binds a symbolic batch dimension", NULL, 0},
        {"--max-constant-bytes", PD_FLAG_INT, &lo.max_constant_bytes, 1, INT64_MAX, 0, "N", "cap on what constant folding may create", NULL, 0},
        {"--threads", PD_FLAG_INT32, &eo.threads, 1, 1024, 0, "N", "compute threads", NULL, 0},
        {"--input", PD_FLAG_FN, &bi, 0, 0, 0, "[NAME=]X.npy", "an input's values (repeat for each input)", pd__flag_binding, 1},
        {"--output", PD_FLAG_FN, &bo, 0, 0, 0, "[NAME=]Y.npy", "write an output (default: print them)", pd__flag_binding, 1},
    };
    int nt = (int)(sizeof t / sizeof t[0]);
    if (pd_cli_wants_help(argc, argv)) return pd_cli_help("pdonnx run MODEL.onnx --input [NAME=]X.npy ... [flags]", t, nt);
    int bad = pd_cli_flags("run", t, nt, NULL, argc, argv, &path, 1);
    if (bad) return bad;
    if (!path) return pd_cli_usage_error("run: %s", "missing MODEL.onnx");

    pd_tensor data[64];
    pd_input_shape shapes[64];
    int loaded = 0;
    pd_graph *g = NULL;
    pd_engine *e = NULL;
    for (; loaded < nin; loaded++)
        if (pd_npy_load(ins[loaded].file, &data[loaded]) != PD_OK) {
            pd_cli_fail();
            goto out;
        }
    run_shapes(ins, data, nin, shapes, &lo);
    if (run_load(path, &lo, ins, data, nin, shapes, &g) != 0 || run_all_given(path, g, ins, nin) != 0) goto out;
    if (pd_engine_create(g, &eo, &e) != PD_OK) {
        pd_cli_fail();
        goto out;
    }
    for (int i = 0; i < nin; i++) {
        if (pd_engine_set_input(e, ins[i].name, &data[i]) != PD_OK) {
            fprintf(stderr, "pdonnx: %s (from %s)\n", pd_cli_error(), ins[i].file);
            goto out;
        }
    }
    if (pd_engine_run(e) != PD_OK) {
        pd_cli_fail();
        goto out;
    }
    if (!pd__run_outputs(g, e, outs, nout)) goto out;
    rc = 0;
out:
    for (int i = 0; i < loaded; i++) pd_tensor_free(&data[i]);
    for (int i = 0; i < nin; i++) free((void *)ins[i].name);
    for (int i = 0; i < nout; i++) free((void *)outs[i].name);
    pd_engine_destroy(e);
    pd_graph_destroy(g);
    return rc;
}

int main(int argc, char **argv) {
    pd_program_env(argv);
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        pd__usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("pdonnx %s\n", pd_version());
        return 0;
    }
    if (strcmp(argv[1], "info") == 0) return pd__cmd_info(argc - 2, argv + 2);
    if (strcmp(argv[1], "run") == 0) return pd__cmd_run(argc - 2, argv + 2);
    if (strcmp(argv[1], "conformance") == 0) return pd_cli_conformance(argc - 2, argv + 2);
    if (strcmp(argv[1], "train") == 0) return pd_cli_train(argc - 2, argv + 2);
    if (strcmp(argv[1], "profile") == 0) return pd_cli_profile(argc - 2, argv + 2);
    if (strcmp(argv[1], "plan") == 0) return pd_cli_plan(argc - 2, argv + 2);
    if (strcmp(argv[1], "simulate") == 0) return pd_cli_simulate(argc - 2, argv + 2);
    if (strcmp(argv[1], "schedule") == 0) return pd_cli_schedule(argc - 2, argv + 2);
    if (strcmp(argv[1], "export") == 0) return pd_cli_export(argc - 2, argv + 2);
    return pd_cli_usage_error("unknown command '%s'", argv[1]);
}
