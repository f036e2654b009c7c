/* profile_io.c - profiles on disk: our JSON and PipeDream's graph.txt
 * (pd_profile_load, pd_profile_save, pd_profile_save_pipedream).
 *
 * How it works: docs/INTERNALS.md, "runtime/profile_io.c".
 */
#include "../core/plan.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- files ------------------------------------------------------------------ */

/* Writes what `f` (an open_memstream) holds to path through pd__write_atomic
 * (a temporary name, fsync, rename); closes f and frees the buffer. */
static pd_status pd__finish_write(const char *path, FILE *f, char **buf, size_t *len) {
    bool bad = ferror(f) != 0;
    if (fclose(f) != 0) bad = true;
    pd_status st = bad ? pd__err(PD_ERR_NOMEM, "%s: out of memory formatting the profile", path)
                       : pd__write_atomic(path, *buf, *len);
    free(*buf); /* open_memstream's buffer comes from malloc */
    return st;
}

/* ---- node names ---------------------------------------------------------------- */

typedef struct pd__named {
    const char *name;
    int i;
} pd__named;

static int pd__named_cmp(const void *x, const void *y) {
    const pd__named *a = x, *b = y;
    int c = strcmp(a->name, b->name);
    return c ? c : (a->i > b->i) - (a->i < b->i);
}

/* The n names sorted (ties by index); *dup: the later index of a repeated name, or -1. */
static pd__named *pd__sort_names(char *const *names, int n, int *dup) {
    pd__named *s = PD_MALLOC(sizeof *s * ((size_t)n + 1));
    if (!s) return NULL;
    for (int i = 0; i < n; i++) s[i] = (pd__named){names[i] ? names[i] : "", i};
    qsort(s, (size_t)n, sizeof *s, pd__named_cmp);
    *dup = -1;
    for (int i = 1; i < n && *dup < 0; i++)
        if (strcmp(s[i].name, s[i - 1].name) == 0) *dup = s[i].i;
    return s;
}

static int pd__find_name(const pd__named *s, int n, const char *name) {
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2, c = strcmp(s[mid].name, name);
        if (c == 0) return s[mid].i;
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

/* ---- PipeDream's graph.txt ----------------------------------------------------- */

typedef struct pd__gline {
    char *name, *desc;
    double fwd, bwd, act, param;
    int line;
} pd__gline;

typedef struct pd__gedge {
    char *a, *b;
    int line;
} pd__gedge;

static char *pd__trim(char *s) {
    while (*s && isspace((unsigned char)*s)) s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = 0;
    return s;
}

static bool pd__is_id(const char *s) {
    if (!*s) return false;
    for (; *s; s++)
        if (isspace((unsigned char)*s)) return false;
    return true;
}

/* A number, or for activation_size a list "[a; b; c]" (summed). */
static bool pd__parse_cost(const char *v, bool list_ok, double *out) {
    char *end;
    if (list_ok && v[0] == '[') {
        double sum = 0, neg = 0;
        const char *q = v + 1;
        for (;;) {
            errno = 0;
            double x = strtod(q, &end);
            if (end == q || errno || !isfinite(x)) return false;
            if (x < 0) neg = x;
            sum += x;
            q = end;
            while (*q == ' ') q++;
            if (*q == ']' && q[1] == 0) break;
            if (*q != ';') return false;
            q++;
        }
        *out = neg < 0 ? neg : sum; /* a negative entry is reported as such */
        return true;
    }
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || *end || errno || !isfinite(x)) return false;
    *out = x;
    return true;
}

static pd_status pd__parse_node_line(const char *path, int ln, char *line, pd__gline *out) {
    static const char *const key[] = {"forward_compute_time", "backward_compute_time", "activation_size",
                                      "parameter_size"};
    char *sep = strstr(line, " -- ");
    if (!sep)
        return pd__err(PD_ERR_PARSE,
                       "%s:%d: expected 'nodeN -- description -- forward_compute_time=...' or a tab-indented edge "
                       "'nodeA -- nodeB'",
                       path, ln);
    /* the costs: the last " -- " field that starts with forward_compute_time= */
    char *meta = NULL;
    for (char *q = sep; (q = strstr(q, " -- ")) != NULL; q++)
        if (strncmp(q + 4, "forward_compute_time=", 21) == 0) meta = q;
    if (!meta) return pd__err(PD_ERR_PARSE, "%s:%d: missing forward_compute_time", path, ln);
    char *desc = sep + 4 <= meta ? sep + 4 : meta;
    *sep = 0;
    *meta = 0;
    meta += 4;
    char *more = strstr(meta, " -- "); /* PipeDream's optional " -- stage_id=N" */
    if (more) *more = 0;
    out->name = pd__trim(line);
    out->desc = pd__trim(desc);
    out->line = ln;
    if (!pd__is_id(out->name))
        return pd__err(PD_ERR_PARSE, "%s:%d: bad node name '%s' (empty or with spaces)", path, ln, out->name);
    double *val[] = {&out->fwd, &out->bwd, &out->act, &out->param};
    bool seen[4] = {false, false, false, false};
    for (char *tok = meta; tok;) {
        char *next = strstr(tok, ", ");
        if (next) *next = 0;
        tok = pd__trim(tok);
        char *eq = strchr(tok, '=');
        int k = -1;
        for (int j = 0; j < 4 && eq; j++)
            if ((size_t)(eq - tok) == strlen(key[j]) && strncmp(tok, key[j], (size_t)(eq - tok)) == 0) k = j;
        if (k < 0) return pd__err(PD_ERR_PARSE, "%s:%d: unknown field '%s'", path, ln, tok);
        if (!pd__parse_cost(eq + 1, k == 2, val[k]))
            return pd__err(PD_ERR_PARSE, "%s:%d: %s: '%s' is not a number", path, ln, key[k], eq + 1);
        if (*val[k] < 0) return pd__err(PD_ERR_PARSE, "%s:%d: negative %s (%s)", path, ln, key[k], eq + 1);
        seen[k] = true;
        tok = next ? next + 2 : NULL;
    }
    for (int k = 0; k < 4; k++)
        if (!seen[k]) return pd__err(PD_ERR_PARSE, "%s:%d: missing %s", path, ln, key[k]);
    return PD_OK;
}

static pd_status pd__parse_edge_line(const char *path, int ln, char *line, pd__gedge *out) {
    char *sep = strstr(line, " -- ");
    if (sep) *sep = 0;
    out->a = pd__trim(line);
    out->b = sep ? pd__trim(sep + 4) : NULL;
    out->line = ln;
    if (!sep || !pd__is_id(out->a) || !pd__is_id(out->b))
        return pd__err(PD_ERR_PARSE, "%s:%d: expected an edge '\\tnodeA -- nodeB'", path, ln);
    return PD_OK;
}

static pd_status pd__load_graph_txt(const char *path, char *text, pd_profile **out) {
    int nn = 0, ne = 0, lines = 1;
    for (const char *c = text; *c; c++) lines += *c == '\n';
    pd__gline *nodes = PD_MALLOC(sizeof *nodes * (size_t)lines);
    pd__gedge *edges = PD_MALLOC(sizeof *edges * (size_t)lines);
    char **names = PD_MALLOC(sizeof *names * (size_t)lines);
    pd__named *sorted = NULL;
    pd_profile *p = NULL;
    pd_status st = PD_OK;
    if (!nodes || !edges || !names) {
        st = pd__err(PD_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }
    char *line = text;
    for (int ln = 1; line && st == PD_OK; ln++) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        size_t len = strlen(line);
        if (len && line[len - 1] == '\r') line[len - 1] = 0;
        if (*pd__trim(line) == 0) {
            /* blank */
        } else if (line[0] == '\t' || line[0] == ' ') {
            st = pd__parse_edge_line(path, ln, line, &edges[ne++]);
        } else {
            st = pd__parse_node_line(path, ln, line, &nodes[nn]);
            names[nn] = nodes[nn].name;
            nn++;
        }
        line = nl ? nl + 1 : NULL;
    }
    if (st != PD_OK) goto done;
    if (nn == 0) {
        st = pd__err(PD_ERR_PARSE, "%s: no nodes (not a PipeDream graph.txt?)", path);
        goto done;
    }
    int dup;
    sorted = pd__sort_names(names, nn, &dup);
    if (!sorted) {
        st = pd__err(PD_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }
    if (dup >= 0) {
        st = pd__err(PD_ERR_PARSE, "%s:%d: duplicate node '%s'", path, nodes[dup].line, nodes[dup].name);
        goto done;
    }
    if ((st = pd__profile_new(nn, &p)) != PD_OK) goto done;
    for (int i = 0; i < nn; i++) {
        pd__pnode *d = &p->node[i];
        d->name = pd__strdup(nodes[i].name);
        d->desc = pd__strdup(nodes[i].desc);
        if (!d->name || !d->desc) {
            st = pd__err(PD_ERR_NOMEM, "%s: out of memory", path);
            goto done;
        }
        d->fwd_ms = nodes[i].fwd;
        d->bwd_in_ms = nodes[i].param > 0 ? nodes[i].bwd / 2 : nodes[i].bwd;
        d->bwd_w_ms = nodes[i].param > 0 ? nodes[i].bwd / 2 : 0;
        d->act_bytes = nodes[i].act;
        d->param_bytes = nodes[i].param;
    }
    for (int e = 0; e < ne && st == PD_OK; e++) {
        int a = pd__find_name(sorted, nn, edges[e].a), b = pd__find_name(sorted, nn, edges[e].b);
        if (a < 0 || b < 0)
            st = pd__err(PD_ERR_PARSE, "%s:%d: edge names unknown node '%s'", path, edges[e].line,
                         a < 0 ? edges[e].a : edges[e].b);
        else
            st = pd__profile_add_edge(p, a, b);
    }
    if (st != PD_OK) goto done;
    p->model = pd__strdup(path);
    p->device = pd__strdup("pipedream");
    if (!p->model || !p->device) st = pd__err(PD_ERR_NOMEM, "%s: out of memory", path);
    if (st == PD_OK) st = pd__profile_finish(p, path);
done:
    PD_FREE(nodes);
    PD_FREE(edges);
    PD_FREE(names);
    PD_FREE(sorted);
    if (st == PD_OK) *out = p;
    else pd_profile_destroy(p);
    return st;
}

/* ---- JSON ------------------------------------------------------------------------ */

static void pd__line_col(const char *text, const char *at, int *line, int *col) {
    *line = 1;
    *col = 1;
    for (const char *c = text; c < at && *c; c++) {
        if (*c == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}

static pd_status pd__json_type(const char *path, const char *where, const char *key, const char *want) {
    return pd__err(PD_ERR_PARSE, "%s: %s: \"%s\" must be %s", path, where, key, want);
}

/* An optional string member into *out (a copy; NULL when absent or null). */
static pd_status pd__json_str(const char *path, const char *where, const cJSON *o, const char *key, char **out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    *out = NULL;
    if (!v || cJSON_IsNull(v)) return PD_OK;
    if (!cJSON_IsString(v)) return pd__json_type(path, where, key, "a string");
    *out = pd__strdup(v->valuestring);
    return *out ? PD_OK : pd__err(PD_ERR_NOMEM, "%s: out of memory", path);
}

static pd_status pd__json_num(const char *path, const char *where, const cJSON *o, const char *key, bool required,
                              double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v && !required) return PD_OK;
    if (!v) return pd__err(PD_ERR_PARSE, "%s: %s: missing \"%s\"", path, where, key);
    if (!cJSON_IsNumber(v)) return pd__json_type(path, where, key, "a number");
    *out = v->valuedouble;
    return PD_OK;
}

/* One end of an edge: a node index or a node name. */
static int pd__json_end(const cJSON *v, const pd_profile *p, const pd__named *sorted) {
    if (cJSON_IsNumber(v)) {
        double d = v->valuedouble;
        return d >= 0 && d < p->n && d == floor(d) ? (int)d : -1;
    }
    if (cJSON_IsString(v) && sorted) return pd__find_name(sorted, p->n, v->valuestring);
    return -1;
}

/* The document's header: format, version, the nodes and edges arrays. */
static pd_status json_header(const char *path, const cJSON *root, const cJSON **nodes, const cJSON **edges) {
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(root, "version");
    *nodes = cJSON_GetObjectItemCaseSensitive(root, "nodes");
    *edges = cJSON_GetObjectItemCaseSensitive(root, "edges");
    if (!cJSON_IsObject(root) || !cJSON_IsString(fmt) || strcmp(fmt->valuestring, "pdonnx-profile") != 0)
        return pd__err(PD_ERR_PARSE, "%s: not a pdonnx profile (\"format\" must be \"pdonnx-profile\")", path);
    if (!cJSON_IsNumber(ver)) return pd__json_type(path, "profile", "version", "a number");
    if (ver->valuedouble != 1)
        return pd__err(PD_ERR_UNSUPPORTED, "%s: profile version %g is not supported (this pdonnx reads version 1)",
                       path, ver->valuedouble);
    if (!cJSON_IsArray(*nodes) || cJSON_GetArraySize(*nodes) == 0)
        return pd__err(PD_ERR_PARSE, "%s: \"nodes\" must be a non-empty array", path);
    if (*edges && !cJSON_IsArray(*edges)) return pd__json_type(path, "profile", "edges", "an array of [from, to] pairs");
    return PD_OK;
}

/* The profile's batch, model and device. */
static pd_status json_meta(const char *path, const cJSON *root, pd_profile *p) {
    double batch = 0;
    PD_TRY(pd__json_num(path, "profile", root, "batch", false, &batch));
    if (batch < 0 || batch != floor(batch) || batch > 9e15)
        return pd__json_type(path, "profile", "batch", "a non-negative integer");
    p->batch = (int64_t)batch;
    const cJSON *fit = cJSON_GetObjectItemCaseSensitive(root, "fit_batches"), *it;
    if (fit && (!cJSON_IsArray(fit) || cJSON_GetArraySize(fit) > PD_MAX_FIT_BATCHES))
        return pd__json_type(path, "profile", "fit_batches", "an array of at most 8 batch sizes");
    cJSON_ArrayForEach(it, fit) {
        double b = cJSON_IsNumber(it) ? it->valuedouble : 0;
        if (b < 1 || b != floor(b) || b > 9e15)
            return pd__json_type(path, "profile", "fit_batches", "an array of at most 8 batch sizes");
        p->fit_batch[p->n_fit++] = (int64_t)b;
    }
    PD_TRY(pd__json_str(path, "profile", root, "model", &p->model));
    return pd__json_str(path, "profile", root, "device", &p->device);
}

/* nodes[i]: its name, description and costs. */
static pd_status json_node(const char *path, const cJSON *nd, int i, pd__pnode *d) {
    char where[128];
    snprintf(where, sizeof where, "nodes[%d]", i);
    if (!cJSON_IsObject(nd)) return pd__err(PD_ERR_PARSE, "%s: %s must be an object", path, where);
    PD_TRY(pd__json_str(path, where, nd, "name", &d->name));
    if (!d->name) return pd__err(PD_ERR_PARSE, "%s: %s: missing \"name\"", path, where);
    snprintf(where, sizeof where, "nodes[%d] ('%.80s')", i, d->name);
    PD_TRY(pd__json_str(path, where, nd, "desc", &d->desc));
    PD_TRY(pd__json_num(path, where, nd, "fwd_ms", true, &d->fwd_ms));
    PD_TRY(pd__json_num(path, where, nd, "bwd_in_ms", false, &d->bwd_in_ms));
    PD_TRY(pd__json_num(path, where, nd, "bwd_w_ms", false, &d->bwd_w_ms));
    PD_TRY(pd__json_num(path, where, nd, "act_bytes", false, &d->act_bytes));
    PD_TRY(pd__json_num(path, where, nd, "param_bytes", false, &d->param_bytes));
    PD_TRY(pd__json_num(path, where, nd, "optim_bytes", false, &d->optim_bytes));
    PD_TRY(pd__json_num(path, where, nd, "fwd_call_ms", false, &d->fwd_call_ms));
    PD_TRY(pd__json_num(path, where, nd, "bwd_in_call_ms", false, &d->bwd_in_call_ms));
    PD_TRY(pd__json_num(path, where, nd, "bwd_w_call_ms", false, &d->bwd_w_call_ms));
    if (!d->desc && !(d->desc = pd__strdup(""))) return pd__err(PD_ERR_NOMEM, "%s: out of memory", path);
    return PD_OK;
}

/* edges[k]: a pair [from, to] of node names (unique ones) or indices. */
static pd_status json_edge(const char *path, const cJSON *e, int k, pd_profile *p, const pd__named *sorted, int dup) {
    const cJSON *a = cJSON_GetArrayItem(e, 0), *b = cJSON_GetArrayItem(e, 1);
    if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) != 2 || !(cJSON_IsString(a) || cJSON_IsNumber(a)) ||
        !(cJSON_IsString(b) || cJSON_IsNumber(b)))
        return pd__err(PD_ERR_PARSE, "%s: edges[%d] must be a pair [from, to] of node names or indices", path, k);
    if (dup >= 0 && (cJSON_IsString(a) || cJSON_IsString(b)))
        return pd__err(PD_ERR_PARSE, "%s: edges[%d] names node '%s', but two nodes have that name (use indices)",
                       path, k, p->node[dup].name);
    int ia = pd__json_end(a, p, sorted), ib = pd__json_end(b, p, sorted);
    if (ia < 0 || ib < 0) {
        const cJSON *bad = ia < 0 ? a : b;
        if (cJSON_IsString(bad))
            return pd__err(PD_ERR_PARSE, "%s: edges[%d]: no node named '%s'", path, k, bad->valuestring);
        return pd__err(PD_ERR_PARSE, "%s: edges[%d]: node index %g is not in [0, %d)", path, k, bad->valuedouble, p->n);
    }
    return pd__profile_add_edge(p, ia, ib);
}

/* The profile's nodes, then its edges by name or index, then checked whole. */
static pd_status json_profile(const char *path, const cJSON *root, pd_profile **out) {
    const cJSON *nodes, *edges, *it;
    PD_TRY(json_header(path, root, &nodes, &edges));
    pd_profile *p = NULL;
    pd__named *sorted = NULL;
    PD_TRY(pd__profile_new(cJSON_GetArraySize(nodes), &p));
    pd_status st = json_meta(path, root, p);
    int i = 0, dup = -1;
    cJSON_ArrayForEach(it, nodes) {
        if (st == PD_OK) st = json_node(path, it, i, &p->node[i]);
        i++;
    }
    char **names = st == PD_OK ? PD_MALLOC(sizeof *names * ((size_t)p->n + 1)) : NULL;
    if (names) {
        for (int k = 0; k < p->n; k++) names[k] = p->node[k].name;
        sorted = pd__sort_names(names, p->n, &dup);
        PD_FREE(names);
    }
    if (st == PD_OK && !sorted) st = pd__err(PD_ERR_NOMEM, "%s: out of memory", path);
    int k = 0;
    cJSON_ArrayForEach(it, edges) {
        if (st == PD_OK) st = json_edge(path, it, k, p, sorted, dup);
        k++;
    }
    if (st == PD_OK) st = pd__profile_finish(p, path);
    PD_FREE(sorted);
    if (st == PD_OK) *out = p;
    else pd_profile_destroy(p);
    return st;
}

static pd_status pd__load_json(const char *path, const char *text, pd_profile **out) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
    if (!root) {
        int line, col;
        const char *at = end ? end : text;
        pd__line_col(text, at, &line, &col);
        const char *c = at;
        while (*c && isspace((unsigned char)*c)) c++;
        return pd__err(PD_ERR_PARSE, "%s:%d:%d: %s", path, line, col,
                       *c ? "invalid JSON" : "invalid JSON: the file ends early (truncated?)");
    }
    pd_status st = json_profile(path, root, out);
    cJSON_Delete(root);
    return st;
}

pd_status pd__profile_parse(const char *name, const char *data, size_t len, pd_profile **out) {
    if (memchr(data, 0, len)) return pd__err(PD_ERR_PARSE, "%s: binary data (a NUL byte) in a profile", name);
    char *text = PD_MALLOC(len + 1);
    if (!text) return pd__err(PD_ERR_NOMEM, "%s: out of memory reading the profile", name);
    memcpy(text, data, len);
    text[len] = 0;
    const char *c = text;
    while (isspace((unsigned char)*c)) c++;
    pd_status st = *c == '{' ? pd__load_json(name, text, out) : pd__load_graph_txt(name, text, out);
    PD_FREE(text);
    return st;
}

pd_status pd_profile_load(const char *path, pd_profile **out) {
    if (!path || !out) return pd__err(PD_ERR_INVALID, "pd_profile_load: NULL %s", path ? "out" : "path");
    unsigned char *text = NULL;
    size_t len = 0;
    PD_TRY(pd__read_file(path, &text, &len));
    pd_status st = pd__profile_parse(path, (const char *)text, len, out);
    PD_FREE(text);
    return st;
}

/* ---- writing ---------------------------------------------------------------------- */

/* Prints v as compact JSON and frees it; false when out of memory. */
static bool pd__put_json(FILE *f, cJSON *v) {
    char *s = v ? cJSON_PrintUnformatted(v) : NULL;
    cJSON_Delete(v);
    if (!s) return false;
    fputs(s, f);
    cJSON_free(s);
    return true;
}

/* The shortest of %.15g, %.16g, %.17g that reads back as the same double. */
static void pd__put_num(FILE *f, double v) {
    char buf[40];
    if (!isfinite(v)) {
        fputs("null", f);
        return;
    }
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    fputs(buf, f);
}

static bool pd__names_unique(const pd_profile *p) {
    char **names = PD_MALLOC(sizeof *names * ((size_t)p->n + 1));
    bool ok = names != NULL;
    for (int i = 0; ok && i < p->n; i++) ok = (names[i] = p->node[i].name) != NULL;
    int dup = -1;
    pd__named *s = ok ? pd__sort_names(names, p->n, &dup) : NULL;
    ok = s && dup < 0;
    PD_FREE(s);
    PD_FREE(names);
    return ok;
}

pd_status pd_profile_save(const pd_profile *p, const char *path) {
    if (!p || !path) return pd__err(PD_ERR_INVALID, "pd_profile_save: NULL %s", p ? "path" : "profile");
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return pd__err(PD_ERR_NOMEM, "%s: out of memory", path);
    bool ok = true, by_name = pd__names_unique(p);
    fprintf(f, "{\n  \"format\": \"pdonnx-profile\",\n  \"version\": 1,\n  \"model\": ");
    ok = ok && pd__put_json(f, p->model ? cJSON_CreateString(p->model) : cJSON_CreateNull());
    fprintf(f, ",\n  \"device\": ");
    ok = ok && pd__put_json(f, p->device ? cJSON_CreateString(p->device) : cJSON_CreateNull());
    fprintf(f, ",\n  \"batch\": %lld", (long long)p->batch);
    for (int k = 0; k < p->n_fit; k++) /* the sizes the per-call costs were fitted from */
        fprintf(f, "%s%lld", k ? ", " : ",\n  \"fit_batches\": [", (long long)p->fit_batch[k]);
    fprintf(f, "%s,\n  \"nodes\": [\n", p->n_fit ? "]" : "");
    for (int i = 0; i < p->n && ok; i++) {
        const pd__pnode *d = &p->node[i];
        const char *key[] = {"fwd_ms",      "bwd_in_ms",   "bwd_w_ms",       "act_bytes",    "param_bytes",
                             "optim_bytes", "fwd_call_ms", "bwd_in_call_ms", "bwd_w_call_ms"};
        double v[] = {d->fwd_ms,      d->bwd_in_ms,   d->bwd_w_ms,       d->act_bytes,    d->param_bytes,
                      d->optim_bytes, d->fwd_call_ms, d->bwd_in_call_ms, d->bwd_w_call_ms};
        fputs("    {\"name\":", f);
        ok = pd__put_json(f, cJSON_CreateString(d->name ? d->name : ""));
        fputs(",\"desc\":", f);
        ok = ok && pd__put_json(f, cJSON_CreateString(d->desc ? d->desc : ""));
        for (int k = 0; k < 9; k++) {
            if (k >= 6 && v[k] == 0) continue; /* per-call costs only where fitted */
            fprintf(f, ",\"%s\":", key[k]);
            pd__put_num(f, v[k]);
        }
        fputs(i + 1 < p->n ? "},\n" : "}\n", f);
    }
    fprintf(f, "  ],\n  \"edges\": [");
    for (int e = 0; e < p->n_edges && ok; e++) {
        int a = p->edge[2 * e], b = p->edge[2 * e + 1];
        fputs(e ? ",\n    " : "\n    ", f);
        if (by_name) {
            fputc('[', f);
            ok = pd__put_json(f, cJSON_CreateString(p->node[a].name));
            fputc(',', f);
            ok = ok && pd__put_json(f, cJSON_CreateString(p->node[b].name));
            fputc(']', f);
        } else {
            fprintf(f, "[%d,%d]", a, b);
        }
    }
    fprintf(f, "%s]\n}\n", p->n_edges ? "\n  " : "");
    if (!ok) {
        fclose(f);
        free(buf);
        return pd__err(PD_ERR_NOMEM, "%s: out of memory formatting the profile", path);
    }
    return pd__finish_write(path, f, &buf, &len);
}

/* A PipeDream node id: no spaces, no " -- " (PipeDream splits lines on it). */
static bool pd__pipedream_ids(const pd_profile *p) {
    for (int i = 0; i < p->n; i++)
        if (!p->node[i].name || !pd__is_id(p->node[i].name) || strstr(p->node[i].name, "--")) return false;
    return pd__names_unique(p);
}

pd_status pd_profile_save_pipedream(const pd_profile *p, const char *path) {
    if (!p || !path) return pd__err(PD_ERR_INVALID, "pd_profile_save_pipedream: NULL %s", p ? "path" : "profile");
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return pd__err(PD_ERR_NOMEM, "%s: out of memory", path);
    /* ids: the names when PipeDream can read them back, else node1, node2, ... */
    bool keep = pd__pipedream_ids(p);
    char ida[32], idb[32];
    for (int i = 0; i < p->n; i++) {
        const pd__pnode *d = &p->node[i];
        snprintf(ida, sizeof ida, "node%d", i + 1);
        fprintf(f, "%s -- ", keep ? d->name : ida);
        for (const char *c = d->desc ? d->desc : ""; *c; c++) /* one line: control characters become spaces */
            fputc(iscntrl((unsigned char)*c) ? ' ' : *c, f);
        fprintf(f,
                " -- forward_compute_time=%.3f, backward_compute_time=%.3f, activation_size=%.3f, "
                "parameter_size=%.3f\n",
                d->fwd_ms, d->bwd_in_ms + d->bwd_w_ms, d->act_bytes, d->param_bytes);
    }
    for (int e = 0; e < p->n_edges; e++) {
        int a = p->edge[2 * e], b = p->edge[2 * e + 1];
        snprintf(ida, sizeof ida, "node%d", a + 1);
        snprintf(idb, sizeof idb, "node%d", b + 1);
        fprintf(f, "\t%s -- %s\n", keep ? p->node[a].name : ida, keep ? p->node[b].name : idb);
    }
    return pd__finish_write(path, f, &buf, &len);
}
