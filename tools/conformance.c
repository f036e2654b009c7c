/* conformance.c - `pdonnx conformance`: runs ONNX backend test cases.
 *
 * How it works: docs/INTERNALS.md, "tools/conformance.c".
 */
#include "../core/pd_internal.h"
#include "../onnx/onnx_io.h"
#include "../pipedream.h"
#include "cli.h"
#include "onnx.pb-c.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define PD_CONF_MAX_IO 32

/* How an output is compared: exactly (within tolerance), or as a random draw. */
typedef enum { PD__CMP_VALUES, PD__CMP_UNIFORM, PD__CMP_NORMAL, PD__CMP_DISCRETE } pd__cmp_kind;
typedef struct {
    pd__cmp_kind kind;
    double lo, hi; /* PD__CMP_UNIFORM: [lo, hi) */
} pd__cmp;

typedef struct {
    int passed, failed, unsupported, xfailed, xpassed;
    char **xfail;
    int nxfail;
    bool quiet;
} pd__conf;

static bool pd__is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool pd__exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

static int pd__cmpstr(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Sorted names of the entries of `dir` starting with `prefix` (NULL: all, no dot-files). */
static int pd__list(const char *dir, const char *prefix, char ***out) {
    DIR *d = opendir(dir);
    *out = NULL;
    if (!d) return 0;
    int n = 0, cap = 0;
    char **v = NULL;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        if (prefix && strncmp(de->d_name, prefix, strlen(prefix)) != 0) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **nv = realloc(v, sizeof(char *) * (size_t)cap);
            if (!nv) break;
            v = nv;
        }
        v[n++] = strdup(de->d_name);
    }
    closedir(d);
    qsort(v, (size_t)n, sizeof(char *), pd__cmpstr);
    *out = v;
    return n;
}

static void pd__free_list(char **v, int n) {
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
}

static bool pd__is_random_op(const Onnx__NodeProto *nd) {
    static const char *ops[] = {"Bernoulli", "RandomUniform", "RandomUniformLike", "RandomNormal",
                                "RandomNormalLike", "Multinomial"};
    if (!nd->op_type || (nd->domain && nd->domain[0] && strcmp(nd->domain, "ai.onnx") != 0)) return false;
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (strcmp(nd->op_type, ops[i]) == 0) return true;
    return false;
}

static double pd__node_attr_f(const Onnx__NodeProto *nd, const char *name, double def) {
    for (size_t k = 0; k < nd->n_attribute; k++)
        if (nd->attribute[k]->name && strcmp(nd->attribute[k]->name, name) == 0) return nd->attribute[k]->f;
    return def;
}

/* How each graph output is compared (the header's "Random outputs"). */
static void pd__output_checks(const Onnx__GraphProto *g, char **out, int nout, pd__cmp *cmp) {
    bool random = false;
    for (size_t j = 0; j < g->n_node && !random; j++) random = pd__is_random_op(g->node[j]);
    for (int i = 0; i < nout; i++) {
        cmp[i] = (pd__cmp){random ? PD__CMP_DISCRETE : PD__CMP_VALUES, 0, 0};
        for (size_t j = 0; random && j < g->n_node; j++) {
            const Onnx__NodeProto *nd = g->node[j];
            bool makes = false;
            for (size_t k = 0; k < nd->n_output && !makes; k++)
                makes = nd->output[k] && strcmp(nd->output[k], out[i]) == 0;
            if (!makes || !pd__is_random_op(nd)) continue;
            if (strncmp(nd->op_type, "RandomUniform", 13) == 0)
                cmp[i] = (pd__cmp){PD__CMP_UNIFORM, pd__node_attr_f(nd, "low", 0), pd__node_attr_f(nd, "high", 1)};
            else if (strncmp(nd->op_type, "RandomNormal", 12) == 0)
                cmp[i].kind = PD__CMP_NORMAL;
        }
    }
}

/* The model's runtime inputs (graph inputs that are not initializers) and
 * outputs, in order, and how each output is compared. */
static bool pd__model_io(const char *path, char **in, int *nin, char **out, int *nout, pd__cmp *cmp) {
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(len > 0 ? (size_t)len : 1);
    bool ok = buf && fread(buf, 1, (size_t)len, f) == (size_t)len;
    fclose(f);
    Onnx__ModelProto *m = ok ? onnx__model_proto__unpack(NULL, (size_t)len, buf) : NULL;
    free(buf);
    if (!m || !m->graph) {
        if (m) onnx__model_proto__free_unpacked(m, NULL);
        return false;
    }
    Onnx__GraphProto *g = m->graph;
    *nin = *nout = 0;
    for (size_t i = 0; i < g->n_input && *nin < PD_CONF_MAX_IO; i++) {
        bool init = false;
        for (size_t j = 0; j < g->n_initializer && !init; j++)
            init = g->initializer[j]->name && strcmp(g->initializer[j]->name, g->input[i]->name) == 0;
        if (!init) in[(*nin)++] = strdup(g->input[i]->name ? g->input[i]->name : "");
    }
    for (size_t i = 0; i < g->n_output && *nout < PD_CONF_MAX_IO; i++)
        out[(*nout)++] = strdup(g->output[i]->name ? g->output[i]->name : "");
    pd__output_checks(g, out, *nout, cmp);
    onnx__model_proto__free_unpacked(m, NULL);
    return true;
}

static bool pd__is_int(pd_dtype t) {
    return t == PD_INT64 || t == PD_INT32 || t == PD_INT16 || t == PD_INT8 || t == PD_UINT8 || t == PD_UINT16 ||
           t == PD_UINT32 || t == PD_UINT64 || t == PD_BOOL;
}

static double pd__elem(const pd_tensor *t, int64_t i) {
    switch (t->dtype) {
    case PD_FLOAT: return ((const float *)t->data)[i];
    case PD_DOUBLE: return ((const double *)t->data)[i];
    case PD_INT64: return (double)((const int64_t *)t->data)[i];
    case PD_INT32: return ((const int32_t *)t->data)[i];
    case PD_INT16: return ((const int16_t *)t->data)[i];
    case PD_INT8: return ((const int8_t *)t->data)[i];
    case PD_UINT8: case PD_BOOL: return ((const uint8_t *)t->data)[i];
    case PD_UINT16: return ((const uint16_t *)t->data)[i];
    case PD_UINT32: return ((const uint32_t *)t->data)[i];
    case PD_UINT64: return (double)((const uint64_t *)t->data)[i];
    case PD_FLOAT16: case PD_BFLOAT16: {
        uint16_t h = ((const uint16_t *)t->data)[i];
        if (t->dtype == PD_BFLOAT16) {
            uint32_t b = (uint32_t)h << 16;
            float f;
            memcpy(&f, &b, 4);
            return f;
        }
        int e = (h >> 10) & 0x1f, m = h & 0x3ff;
        double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m | 0x400, e - 25);
        return (h & 0x8000) ? -v : v;
    }
    default: return pd__get_f(t->dtype, t->data, i); /* the low-bit types, decoded */
    }
}

/* Whether got has want's dtype and shape; if not, writes why into msg. */
static bool pd__same_form(const char *name, const pd_tensor *got, const pd_tensor *want, char *msg, size_t n) {
    if (got->dtype != want->dtype) {
        snprintf(msg, n, "output '%s' is %s, expected %s", name, pd_dtype_name(got->dtype), pd_dtype_name(want->dtype));
        return false;
    }
    bool same = got->ndim == want->ndim;
    for (int i = 0; same && i < got->ndim; i++) same = got->shape[i] == want->shape[i];
    if (!same) {
        char a[128] = "", b[128] = "";
        size_t ka = 0, kb = 0;
        for (int i = 0; i < got->ndim; i++) ka += (size_t)snprintf(a + ka, sizeof a - ka, "%s%lld", i ? "," : "", (long long)got->shape[i]);
        for (int i = 0; i < want->ndim; i++) kb += (size_t)snprintf(b + kb, sizeof b - kb, "%s%lld", i ? "," : "", (long long)want->shape[i]);
        snprintf(msg, n, "output '%s' has shape [%s], expected [%s]", name, a, b);
        return false;
    }
    return true;
}

/* A random draw: each value of got in [lo, hi), finite, or one of want's values. */
static bool pd__compare_draw(const char *name, const pd_tensor *got, const pd_tensor *want, const pd__cmp *c,
                             char *msg, size_t n) {
    int64_t cnt = pd_tensor_numel(got), nw = pd_tensor_numel(want);
    for (int64_t i = 0; i < cnt; i++) {
        double g = pd__elem(got, i);
        bool ok = isfinite(g);
        if (c->kind == PD__CMP_UNIFORM) ok = g >= c->lo && g < c->hi;
        for (int64_t j = 0; c->kind == PD__CMP_DISCRETE && !(ok = g == pd__elem(want, j)) && j + 1 < nw; j++) {}
        if (!ok) {
            if (c->kind == PD__CMP_UNIFORM)
                snprintf(msg, n, "output '%s' (random): value %lld is %.8g, outside [%g, %g)", name, (long long)i, g,
                         c->lo, c->hi);
            else if (c->kind == PD__CMP_NORMAL)
                snprintf(msg, n, "output '%s' (random): value %lld is %g", name, (long long)i, g);
            else
                snprintf(msg, n, "output '%s' (random): value %lld is %.8g, which the expected draw never takes", name,
                         (long long)i, g);
            return false;
        }
    }
    return true;
}

/* Compares got with want; on mismatch writes why into msg and returns false. */
static bool pd__compare(const char *name, const pd_tensor *got, const pd_tensor *want, const pd__cmp *c, char *msg,
                        size_t n) {
    if (!pd__same_form(name, got, want, msg, n)) return false;
    if (c->kind != PD__CMP_VALUES) return pd__compare_draw(name, got, want, c, msg, n);
    const double rtol = 1e-3, atol = 1e-5;
    int64_t cnt = pd_tensor_numel(want), bad = 0, first = -1;
    double worst = 0;
    /* the low-bit types compare as their decoded values, exactly (NaN with NaN):
     * a conversion into them is right only to the last bit */
    bool low = pd__dtype_lowbit(want->dtype), exact = pd__is_int(want->dtype) && !low;
    for (int64_t i = 0; i < cnt; i++) {
        double g = pd__elem(got, i), w = pd__elem(want, i);
        bool ok;
        if (exact && (want->dtype == PD_INT64 || want->dtype == PD_UINT64))
            ok = ((const int64_t *)got->data)[i] == ((const int64_t *)want->data)[i];
        else if (exact)
            ok = g == w;
        else if (low)
            ok = g == w || (isnan(g) && isnan(w));
        else if (isnan(w))
            ok = isnan(g);
        else if (isinf(w))
            ok = g == w;
        else
            ok = fabs(g - w) <= atol + rtol * fabs(w);
        if (!ok) {
            if (first < 0) first = i;
            bad++;
            double d = fabs(g - w);
            if (d > worst || isnan(d)) worst = d;
        }
    }
    if (bad) {
        snprintf(msg, n, "output '%s': %lld of %lld values differ, max |diff| %.3g, first at %lld: got %.8g, want %.8g",
                 name, (long long)bad, (long long)cnt, worst, (long long)first, pd__elem(got, first), pd__elem(want, first));
        return false;
    }
    return true;
}

typedef enum { PD__PASS, PD__FAIL, PD__UNSUPPORTED } pd__verdict;

typedef struct {
    pd_tensor t[PD_CONF_MAX_IO];
    char *name[PD_CONF_MAX_IO];
    int n;
} pd__pbset;

static void pd__pbset_free(pd__pbset *s) {
    for (int i = 0; i < s->n; i++) {
        pd_tensor_free(&s->t[i]);
        free(s->name[i]);
    }
    s->n = 0;
}

/* Reads prefix_0.pb, prefix_1.pb, ... from dir. */
static pd__verdict pd__read_pbs(const char *dir, const char *prefix, pd__pbset *s, char *msg, size_t n) {
    s->n = 0;
    for (int i = 0; i < PD_CONF_MAX_IO; i++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s_%d.pb", dir, prefix, i);
        if (!pd__exists(p)) break;
        pd_status st = pd__tensor_pb_load(p, &s->t[s->n], &s->name[s->n]);
        if (st != PD_OK) {
            snprintf(msg, n, "%s", pd_last_error());
            return st == PD_ERR_UNSUPPORTED ? PD__UNSUPPORTED : PD__FAIL;
        }
        s->n++;
    }
    return PD__PASS;
}

static const char *pd__match(const char *pbname, int pos, char **names, int nnames) {
    if (pbname && pbname[0])
        for (int i = 0; i < nnames; i++)
            if (strcmp(names[i], pbname) == 0) return names[i];
    return pos < nnames ? names[pos] : NULL;
}

static pd__verdict pd__run_set(const char *model, const char *setdir, char **in_names, int nin_names,
                               char **out_names, int nout_names, const pd__cmp *cmp, char *msg, size_t n) {
    pd__pbset ins = {0}, outs = {0};
    pd__verdict v = pd__read_pbs(setdir, "input", &ins, msg, n);
    if (v == PD__PASS) v = pd__read_pbs(setdir, "output", &outs, msg, n);
    pd_graph *g = NULL;
    pd_engine *e = NULL;
    if (v != PD__PASS) goto done;

    pd_input_shape shapes[PD_CONF_MAX_IO];
    const char *names[PD_CONF_MAX_IO], *cnames[PD_CONF_MAX_IO];
    pd_tensor cvals[PD_CONF_MAX_IO];
    for (int i = 0; i < ins.n; i++) {
        names[i] = pd__match(ins.name[i], i, in_names, nin_names);
        if (!names[i]) {
            snprintf(msg, n, "input_%d.pb matches no model input", i);
            v = PD__FAIL;
            goto done;
        }
        shapes[i].name = names[i];
        shapes[i].ndim = ins.t[i].ndim;
        shapes[i].dtype = ins.t[i].dtype;
        memcpy(shapes[i].shape, ins.t[i].shape, sizeof shapes[i].shape);
    }
    for (int attempt = 0; attempt < 2; attempt++) {
        int nc = 0;
        for (int i = 0; i < ins.n; i++) {
            if (attempt == 1 || pd__is_int(ins.t[i].dtype)) {
                cnames[nc] = names[i];
                cvals[nc++] = ins.t[i];
            }
        }
        pd_load_options lo = PD_LOAD_OPTIONS_INIT;
        lo.n_input_shapes = ins.n;
        lo.input_shapes = shapes;
        lo.n_const_inputs = nc;
        lo.const_input_names = cnames;
        lo.const_inputs = cvals;
        pd_status st = pd_graph_load_file(model, &lo, &g);
        if (st == PD_OK) break;
        g = NULL;
        snprintf(msg, n, "%s", pd_last_error());
        if (st == PD_ERR_UNSUPPORTED && attempt == 0 && strstr(msg, "constant")) continue;
        v = st == PD_ERR_UNSUPPORTED ? PD__UNSUPPORTED : PD__FAIL;
        goto done;
    }
    if (pd_engine_create(g, NULL, &e) != PD_OK) {
        snprintf(msg, n, "%s", pd_last_error());
        v = PD__FAIL;
        goto done;
    }
    for (int i = 0; i < ins.n; i++) {
        bool runtime = false;
        for (int k = 0; k < pd_graph_num_inputs(g); k++) {
            pd_value_info vi;
            if (pd_graph_input(g, k, &vi) != PD_OK) continue;
            runtime |= strcmp(vi.name, names[i]) == 0;
        }
        if (runtime && pd_engine_set_input(e, names[i], &ins.t[i]) != PD_OK) {
            snprintf(msg, n, "%s", pd_last_error());
            v = PD__FAIL;
            goto done;
        }
    }
    if (pd_engine_run(e) != PD_OK) {
        snprintf(msg, n, "%s", pd_last_error());
        v = PD__FAIL;
        goto done;
    }
    for (int i = 0; i < outs.n; i++) {
        const char *on = pd__match(outs.name[i], i, out_names, nout_names);
        int oi = 0;
        while (on && oi < nout_names && out_names[oi] != on) oi++;
        pd_tensor got;
        if (!on || pd_engine_get_output(e, on, &got) != PD_OK) {
            snprintf(msg, n, "no output for output_%d.pb ('%s')", i, on ? on : "?");
            v = PD__FAIL;
            goto done;
        }
        if (!pd__compare(on, &got, &outs.t[i], &cmp[oi], msg, n)) {
            v = PD__FAIL;
            goto done;
        }
    }
done:
    pd_engine_destroy(e);
    pd_graph_destroy(g);
    pd__pbset_free(&ins);
    pd__pbset_free(&outs);
    return v;
}

static const char *pd__base(const char *p) {
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/') n--;
    const char *b = p + n;
    while (b > p && b[-1] != '/') b--;
    return b;
}

static void pd__run_case(pd__conf *c, const char *dir) {
    char name[512];
    snprintf(name, sizeof name, "%s", pd__base(dir));
    char *slash = strchr(name, '/');
    if (slash) *slash = 0;
    char model[4096], msg[2048] = "";
    snprintf(model, sizeof model, "%s/model.onnx", dir);
    char *in_names[PD_CONF_MAX_IO], *out_names[PD_CONF_MAX_IO];
    pd__cmp cmp[PD_CONF_MAX_IO];
    int nin = 0, nout = 0;
    pd__verdict v = PD__PASS;
    if (!pd__model_io(model, in_names, &nin, out_names, &nout, cmp)) {
        v = PD__FAIL;
        snprintf(msg, sizeof msg, "%s: cannot read the model", model);
    }
    char **sets = NULL;
    int nsets = v == PD__PASS ? pd__list(dir, "test_data_set_", &sets) : 0;
    if (v == PD__PASS && nsets == 0) {
        v = PD__UNSUPPORTED;
        snprintf(msg, sizeof msg, "no test_data_set_* folder");
    }
    for (int s = 0; s < nsets && v == PD__PASS; s++) {
        char sd[4096];
        snprintf(sd, sizeof sd, "%s/%s", dir, sets[s]);
        v = pd__run_set(model, sd, in_names, nin, out_names, nout, cmp, msg, sizeof msg);
    }
    pd__free_list(sets, nsets);
    for (int i = 0; i < nin; i++) free(in_names[i]);
    for (int i = 0; i < nout; i++) free(out_names[i]);

    bool listed = false;
    for (int i = 0; i < c->nxfail && !listed; i++) listed = strcmp(c->xfail[i], name) == 0;
    if (v == PD__PASS) {
        c->passed++;
        if (listed) {
            c->xpassed++;
            printf("PASS %s (listed as a known failure: remove it from the list)\n", name);
        } else if (!c->quiet) {
            printf("PASS %s\n", name);
        }
    } else if (v == PD__UNSUPPORTED) {
        c->unsupported++;
        if (!c->quiet) printf("UNSUPPORTED %s: %s\n", name, msg);
    } else if (listed) {
        c->xfailed++;
        if (!c->quiet) printf("XFAIL %s: %s\n", name, msg);
    } else {
        c->failed++;
        printf("FAIL %s: %s\n", name, msg);
    }
    fflush(stdout);
}

static bool pd__load_xfail(pd__conf *c, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "pdonnx: %s: cannot open the known-failure list\n", path);
        return false;
    }
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        if (*p == '#' || *p == '\n' || !*p) continue;
        size_t k = strcspn(p, " \t\n");
        char **nx = realloc(c->xfail, sizeof(char *) * (size_t)(c->nxfail + 1));
        if (!nx) break;
        c->xfail = nx;
        c->xfail[c->nxfail++] = strndup(p, k);
    }
    fclose(f);
    return true;
}

static int pd__flag_xfail(void *ctx, const char *cmd, const pd_flag *f, char **v) {
    (void)cmd, (void)f;
    return pd__load_xfail((pd__conf *)ctx, v[0]) ? 0 : 2;
}

int pd_cli_conformance(int argc, char **argv) {
    pd__conf c = {0};
    int ndirs = 0, rc = 0;
    const pd_flag t[] = {
        {"--xfail", PD_FLAG_FN, &c, 0, 0, 0, "FILE", "cases known to fail, one per line (a listed case that passes is reported)", pd__flag_xfail, 1},
        {"--quiet", PD_FLAG_SET, &c.quiet, 0, 0, 0, NULL, "print only the totals and what fails", NULL, 0},
    };
    int nt = (int)(sizeof t / sizeof t[0]);
    if (pd_cli_wants_help(argc, argv)) return pd_cli_help("pdonnx conformance DIR... [flags]", t, nt);
    const char **dirs = calloc((size_t)argc + 1, sizeof *dirs);
    if (!dirs) return pd_cli_usage_error("conformance: %s", "out of memory");
    int bad = pd_cli_flags("conformance", t, nt, NULL, argc, argv, dirs, argc);
    for (ndirs = 0; !bad && dirs[ndirs]; ndirs++) {}
    if (!bad && !ndirs) bad = pd_cli_usage_error("conformance: %s", "give one or more case folders");
    if (bad) {
        free(dirs);
        return bad;
    }
    for (int i = 0; i < ndirs; i++) {
        const char *dir = dirs[i];
        char model[4096];
        snprintf(model, sizeof model, "%s/model.onnx", dir);
        if (pd__exists(model)) {
            pd__run_case(&c, dir);
            continue;
        }
        if (!pd__is_dir(dir)) {
            fprintf(stderr, "pdonnx: %s: not a test case folder or a folder of them\n", dir);
            rc = 1;
            continue;
        }
        char **sub;
        int ns = pd__list(dir, NULL, &sub);
        for (int s = 0; s < ns; s++) {
            char d[4096];
            snprintf(d, sizeof d, "%s/%s", dir, sub[s]);
            snprintf(model, sizeof model, "%s/model.onnx", d);
            if (pd__exists(model)) pd__run_case(&c, d);
        }
        pd__free_list(sub, ns);
    }
    printf("known failures: %d, unsupported: %d\n", c.xfailed, c.unsupported);
    printf("%d passed, %d failed, %d skipped\n", c.passed, c.failed, c.unsupported + c.xfailed);
    for (int i = 0; i < c.nxfail; i++) free(c.xfail[i]);
    free(c.xfail);
    free(dirs);
    return (c.failed || rc) ? 1 : 0;
}
