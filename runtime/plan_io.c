/* plan_io.c - plans as JSON on disk (cJSON), read back for `pdonnx simulate`
 * and the pipeline runtime.
 *
 * How it works: docs/INTERNALS.md, "runtime/plan_io.c".
 */
#include "../core/plan.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <string.h>

static cJSON *pd__names(const pd_plan *p, const int *which, int s) {
    cJSON *a = cJSON_CreateArray();
    for (int v = 0; a && v < p->n_nodes; v++)
        if (!which || which[v] == s) cJSON_AddItemToArray(a, cJSON_CreateString(p->node_name[v]));
    return a;
}

char *pd__plan_to_json(const pd_plan *p) {
    cJSON *r = cJSON_CreateObject();
    if (!r) return NULL;
    cJSON_AddStringToObject(r, "format", "pdonnx-plan");
    cJSON_AddNumberToObject(r, "version", 1);
    if (p->model) cJSON_AddStringToObject(r, "model", p->model);
    cJSON_AddStringToObject(r, "algo", p->algo_name ? p->algo_name : "pipedream");
    cJSON_AddStringToObject(r, "cost_model", p->cost_model ? p->cost_model : "default");
    cJSON_AddNumberToObject(r, "workers", p->workers);
    cJSON_AddNumberToObject(r, "microbatches", p->microbatches);
    cJSON_AddNumberToObject(r, "microbatch_size", (double)p->microbatch_size);
    if (p->profile_batch != p->microbatch_size || pd__plan_has_call(p))
        cJSON_AddNumberToObject(r, "profile_batch", (double)p->profile_batch);
    cJSON_AddNumberToObject(r, "width", p->width);
    if (p->algo == PD_ALGO_AVGPIPE) cJSON_AddNumberToObject(r, "parallel_pipelines", p->width);
    cJSON_AddNumberToObject(r, "chunks", p->chunks);
    cJSON_AddBoolToObject(r, "recompute", p->recompute);
    cJSON_AddNumberToObject(r, "bandwidth", p->bandwidth);
    cJSON_AddNumberToObject(r, "predicted_time_ms", p->time_ms);
    cJSON_AddNumberToObject(r, "predicted_speedup", p->speedup);
    cJSON_AddNumberToObject(r, "dp_speedup", p->dp_speedup);
    cJSON_AddNumberToObject(r, "single_ms", p->single_ms);
    cJSON_AddNumberToObject(r, "dp_ms", p->dp_ms);
    cJSON_AddNumberToObject(r, "bubble", p->bubble);
    cJSON_AddNumberToObject(r, "throughput", p->throughput);
    cJSON_AddItemToObject(r, "nodes", pd__names(p, NULL, 0));
    cJSON *stages = cJSON_AddArrayToObject(r, "stages");
    cJSON *map = cJSON_AddObjectToObject(r, "stage_to_rank_map");
    for (int s = 0; stages && map && s < p->n_stages; s++) {
        const pd__stage *st = &p->stage[s];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToArray(stages, o);
        cJSON_AddNumberToObject(o, "id", s);
        cJSON_AddNumberToObject(o, "replicas", st->replicas);
        if (st->has_device) cJSON_AddNumberToObject(o, "device", st->device);
        cJSON *ranks = cJSON_AddArrayToObject(o, "ranks");
        cJSON *mr = cJSON_CreateArray();
        for (int k = 0; k < st->replicas; k++) {
            cJSON_AddItemToArray(ranks, cJSON_CreateNumber(st->first_rank + k));
            cJSON_AddItemToArray(mr, cJSON_CreateNumber(st->first_rank + k));
        }
        char key[16];
        snprintf(key, sizeof key, "%d", s);
        cJSON_AddItemToObject(map, key, mr);
        cJSON_AddItemToObject(o, "nodes", pd__names(p, p->fwd_stage, s));
        if (memcmp(p->fwd_stage, p->bwd_stage, sizeof(int) * (size_t)p->n_nodes) != 0)
            cJSON_AddItemToObject(o, "bwd_nodes", pd__names(p, p->bwd_stage, s));
        const struct {
            const char *k;
            double v;
        } num[] = {{"fwd_ms", st->fwd_ms},         {"bwd_in_ms", st->bwd_in_ms},     {"bwd_w_ms", st->bwd_w_ms},
                   {"param_bytes", st->param_bytes}, {"optim_bytes", st->optim_bytes}, {"act_bytes", st->act_bytes},
                   {"in_bytes", st->in_bytes},     {"out_bytes", st->out_bytes},     {"send_ms", st->send_ms},
                   {"allreduce_ms", st->allreduce_ms}, {"time_ms", st->time_ms},     {"memory_bytes", st->memory_bytes}};
        for (size_t k = 0; k < sizeof num / sizeof num[0]; k++) cJSON_AddNumberToObject(o, num[k].k, num[k].v);
        /* per-call parts only where the profile had them: other plans read as before */
        const char *ck[] = {"fwd_call_ms", "bwd_in_call_ms", "bwd_w_call_ms"};
        double cv[] = {st->fwd_call_ms, st->bwd_in_call_ms, st->bwd_w_call_ms};
        for (int k = 0; k < 3; k++)
            if (cv[k] > 0) cJSON_AddNumberToObject(o, ck[k], cv[k]);
    }
    char *text = cJSON_Print(r);
    cJSON_Delete(r);
    return text;
}

pd_status pd_plan_save(const pd_plan *p, const char *path) {
    if (!p || !path) return pd__err(PD_ERR_INVALID, "pd_plan_save: %s is NULL", !p ? "plan" : "path");
    char *text = pd__plan_to_json(p);
    if (!text) return pd__err(PD_ERR_NOMEM, "%s: out of memory writing the plan", path);
    size_t n = strlen(text);
    text[n] = '\n'; /* cJSON's buffer ends in a NUL we may overwrite: write n+1 bytes */
    pd_status st = pd__write_atomic(path, text, n + 1);
    cJSON_free(text);
    return st;
}

/* ---- reading -------------------------------------------------------------------- */

static pd_status pd__num(const char *path, const cJSON *o, const char *key, bool required, double lo, double hi,
                         double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v) {
        if (required) return pd__err(PD_ERR_PARSE, "%s: plan: missing \"%s\"", path, key);
        return PD_OK;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < lo || v->valuedouble > hi)
        return pd__err(PD_ERR_PARSE, "%s: plan: \"%s\" must be a number in [%g, %g]", path, key, lo, hi);
    *out = v->valuedouble;
    return PD_OK;
}

static pd_status pd__str(const char *path, const cJSON *o, const char *key, char **out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v) return PD_OK;
    if (!cJSON_IsString(v)) return pd__err(PD_ERR_PARSE, "%s: plan: \"%s\" must be a string", path, key);
    if (!(*out = pd__strdup(v->valuestring))) return pd__err(PD_ERR_NOMEM, "%s: out of memory", path);
    return PD_OK;
}

static int pd__find_name(const pd_plan *p, const char *s) {
    for (int v = 0; v < p->n_nodes; v++)
        if (strcmp(p->node_name[v], s) == 0) return v;
    return -1;
}

/* The alias entry for a name "nodes" lacks, made on first sight (-1: no memory). */
static int pd__alias(pd_plan *p, const char *name) {
    for (int k = 0; k < p->n_alias; k++)
        if (strcmp(p->alias_name[k], name) == 0) return k;
    int n = p->n_alias + 1;
    char **nm = PD_REALLOC(p->alias_name, sizeof(char *) * (size_t)n);
    if (nm) p->alias_name = nm;
    int *f = nm ? PD_REALLOC(p->alias_fwd, sizeof(int) * (size_t)n) : NULL;
    if (f) p->alias_fwd = f;
    int *b = f ? PD_REALLOC(p->alias_bwd, sizeof(int) * (size_t)n) : NULL;
    if (b) p->alias_bwd = b;
    char *copy = b ? pd__strdup(name) : NULL;
    if (!copy) return -1;
    p->alias_name[p->n_alias] = copy;
    p->alias_fwd[p->n_alias] = p->alias_bwd[p->n_alias] = -1;
    return p->n_alias++;
}

/* Marks each node named in `arr` with stage s in `which` (fwd_stage or
 * bwd_stage); a name "nodes" lacks goes to the aliases (pd__plan_match). */
static pd_status pd__assign(const char *path, pd_plan *p, const cJSON *arr, int s, int *which, const char *key) {
    if (!cJSON_IsArray(arr)) return pd__err(PD_ERR_PARSE, "%s: plan: stage %d: \"%s\" must be an array of node names", path, s, key);
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) {
        if (!cJSON_IsString(it)) return pd__err(PD_ERR_PARSE, "%s: plan: stage %d: \"%s\" holds a non-string", path, s, key);
        int v = pd__find_name(p, it->valuestring), *at = v >= 0 ? &which[v] : NULL;
        if (v < 0) {
            int a = pd__alias(p, it->valuestring);
            if (a < 0) return pd__err(PD_ERR_NOMEM, "%s: out of memory", path);
            at = which == p->fwd_stage ? &p->alias_fwd[a] : &p->alias_bwd[a];
        }
        if (*at >= 0) return pd__err(PD_ERR_PARSE, "%s: plan: node '%s' is in stages %d and %d", path, it->valuestring, *at, s);
        *at = s;
    }
    return PD_OK;
}

/* The plan's scalars: its model, algorithm, shape and predictions. */
static pd_status plan_header(const char *path, const cJSON *r, pd_plan *p) {
    if (!cJSON_IsObject(r)) return pd__err(PD_ERR_PARSE, "%s: plan: not a JSON object", path);
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(r, "format");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "pdonnx-plan") != 0)
        return pd__err(PD_ERR_PARSE, "%s: not a pdonnx plan (\"format\" is not \"pdonnx-plan\")", path);
    double d = 0;
    PD_TRY(pd__str(path, r, "model", &p->model));
    PD_TRY(pd__str(path, r, "algo", &p->algo_name));
    PD_TRY(pd__str(path, r, "cost_model", &p->cost_model));
    p->algo = PD_ALGO_PIPEDREAM;
    if (p->algo_name) (void)pd__algo_parse(p->algo_name, &p->algo); /* an unknown name stays pipedream */
    PD_TRY(pd__num(path, r, "workers", true, 1, 1 << 20, &d));
    p->workers = (int)d;
    d = 1;
    PD_TRY(pd__num(path, r, "microbatches", false, 1, 1 << 20, &d));
    p->microbatches = (int)d;
    d = 0;
    PD_TRY(pd__num(path, r, "microbatch_size", false, 0, 1e12, &d));
    p->microbatch_size = (int64_t)d;
    PD_TRY(pd__num(path, r, "profile_batch", false, 0, 1e12, &d)); /* default: the microbatch size */
    p->profile_batch = (int64_t)d;
    d = 1;
    PD_TRY(pd__num(path, r, "width", false, 1, 1 << 20, &d));
    p->width = (int)d;
    if (cJSON_GetObjectItemCaseSensitive(r, "parallel_pipelines")) { /* avgpipe's K: the width */
        PD_TRY(pd__num(path, r, "parallel_pipelines", true, 1, 1 << 20, &d));
        if ((int)d != p->width && cJSON_GetObjectItemCaseSensitive(r, "width"))
            return pd__err(PD_ERR_PARSE, "%s: plan: \"parallel_pipelines\" %d differs from \"width\" %d", path, (int)d,
                           p->width);
        p->width = (int)d;
    }
    d = 1;
    PD_TRY(pd__num(path, r, "chunks", false, 1, 1024, &d));
    p->chunks = (int)d;
    p->recompute = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "recompute"));
    PD_TRY(pd__num(path, r, "bandwidth", false, 0, INFINITY, &p->bandwidth));
    PD_TRY(pd__num(path, r, "predicted_time_ms", false, 0, INFINITY, &p->time_ms));
    PD_TRY(pd__num(path, r, "predicted_speedup", false, 0, INFINITY, &p->speedup));
    PD_TRY(pd__num(path, r, "dp_speedup", false, 0, INFINITY, &p->dp_speedup));
    PD_TRY(pd__num(path, r, "single_ms", false, 0, INFINITY, &p->single_ms));
    PD_TRY(pd__num(path, r, "dp_ms", false, 0, INFINITY, &p->dp_ms));
    PD_TRY(pd__num(path, r, "bubble", false, 0, 1, &p->bubble));
    PD_TRY(pd__num(path, r, "throughput", false, 0, INFINITY, &p->throughput));
    return PD_OK;
}

/* "nodes": the model's node names, each in no stage yet. */
static pd_status plan_nodes(const char *path, const cJSON *r, pd_plan *p) {
    const cJSON *nodes = cJSON_GetObjectItemCaseSensitive(r, "nodes");
    if (!cJSON_IsArray(nodes) || cJSON_GetArraySize(nodes) < 1)
        return pd__err(PD_ERR_PARSE, "%s: plan: \"nodes\" must be a non-empty array of node names", path);
    p->n_nodes = cJSON_GetArraySize(nodes);
    p->node_name = PD_CALLOC((size_t)p->n_nodes, sizeof(char *));
    p->fwd_stage = PD_MALLOC(sizeof(int) * (size_t)p->n_nodes);
    p->bwd_stage = PD_MALLOC(sizeof(int) * (size_t)p->n_nodes);
    if (!p->node_name || !p->fwd_stage || !p->bwd_stage) return pd__err(PD_ERR_NOMEM, "%s: out of memory", path);
    int v = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, nodes) {
        if (!cJSON_IsString(it)) return pd__err(PD_ERR_PARSE, "%s: plan: \"nodes\"[%d] is not a string", path, v);
        if (!(p->node_name[v] = pd__strdup(it->valuestring))) return pd__err(PD_ERR_NOMEM, "%s: out of memory", path);
        p->fwd_stage[v] = p->bwd_stage[v] = -1;
        v++;
    }
    return PD_OK;
}

/* A stage's "ranks" (stage_to_rank): its replicas on consecutive ranks, each
 * in a process of its own; without it the ranks follow the previous stage's. */
static pd_status plan_ranks(const char *path, const cJSON *it, int s, pd__stage *st) {
    const cJSON *rk = cJSON_GetObjectItem(it, "ranks");
    if (!rk) return PD_OK;
    if (!cJSON_IsArray(rk) || cJSON_GetArraySize(rk) != st->replicas)
        return pd__err(PD_ERR_PARSE, "%s: plan: stage %d's \"ranks\" must list its %d replicas' ranks", path, s,
                       st->replicas);
    for (int q = 0; q < st->replicas; q++) {
        const cJSON *v = cJSON_GetArrayItem(rk, q);
        for (int e = 0; e < q && cJSON_IsNumber(v); e++) /* several threads of one stage per process: no */
            if (cJSON_GetArrayItem(rk, e)->valuedouble == v->valuedouble)
                return pd__err(PD_ERR_PARSE, "%s: plan: stage %d's replicas %d and %d are both on rank %g (a "
                               "stage's replicas each need a process of their own)", path, s, e, q,
                               v->valuedouble);
        if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 1 << 20 ||
            (q > 0 && v->valuedouble != (double)st->first_rank + q))
            return pd__err(PD_ERR_PARSE,
                           "%s: plan: stage %d's \"ranks\" must be consecutive whole numbers (a stage's "
                           "replicas sit on consecutive ranks)",
                           path, s);
        if (q == 0) st->first_rank = (int)v->valuedouble;
    }
    return PD_OK;
}

/* One element of "stages": its replicas and ranks, its GPU, its costs and nodes. */
static pd_status plan_stage(const char *path, const cJSON *it, int s, int *rank, pd_plan *p) {
    pd__stage *st = &p->stage[s];
    if (!cJSON_IsObject(it)) return pd__err(PD_ERR_PARSE, "%s: plan: stage %d is not an object", path, s);
    double rep = 1;
    PD_TRY(pd__num(path, it, "replicas", false, 1, 1 << 20, &rep));
    st->replicas = (int)rep;
    st->first_rank = *rank;
    PD_TRY(plan_ranks(path, it, s, st));
    *rank += st->replicas;
    if (cJSON_GetObjectItemCaseSensitive(it, "device")) { /* optional: the stage's GPU (--device cuda) */
        double dev = 0;
        PD_TRY(pd__num(path, it, "device", true, 0, 1023, &dev));
        if (dev != floor(dev)) return pd__err(PD_ERR_PARSE, "%s: plan: stage %d's \"device\" must be a GPU index", path, s);
        st->has_device = true;
        st->device = (int)dev;
    }
    const char *keys[] = {"fwd_ms", "bwd_in_ms", "bwd_w_ms", "param_bytes", "optim_bytes", "act_bytes",
                          "in_bytes", "out_bytes", "send_ms", "allreduce_ms", "time_ms", "memory_bytes"};
    double *dst[] = {&st->fwd_ms, &st->bwd_in_ms, &st->bwd_w_ms, &st->param_bytes, &st->optim_bytes, &st->act_bytes,
                     &st->in_bytes, &st->out_bytes, &st->send_ms, &st->allreduce_ms, &st->time_ms, &st->memory_bytes};
    for (int k = 0; k < 12; k++) {
        pd_status e = pd__num(path, it, keys[k], k < 3, 0, INFINITY, dst[k]);
        if (e != PD_OK) {
            pd__err_prefix("stage %d", s);
            return e;
        }
    }
    const char *ck[] = {"fwd_call_ms", "bwd_in_call_ms", "bwd_w_call_ms"};
    double *cd[] = {&st->fwd_call_ms, &st->bwd_in_call_ms, &st->bwd_w_call_ms};
    for (int k = 0; k < 3; k++) {
        pd_status e = pd__num(path, it, ck[k], false, 0, *dst[k], cd[k]); /* a part of its time */
        if (e != PD_OK) {
            pd__err_prefix("stage %d", s);
            return e;
        }
    }
    PD_TRY(pd__assign(path, p, cJSON_GetObjectItemCaseSensitive(it, "nodes"), s, p->fwd_stage, "nodes"));
    const cJSON *bw = cJSON_GetObjectItemCaseSensitive(it, "bwd_nodes");
    if (bw) PD_TRY(pd__assign(path, p, bw, s, p->bwd_stage, "bwd_nodes"));
    return PD_OK;
}

/* Every node has a forward and a backward stage (the forward's when no
 * stage lists "bwd_nodes"), and the ranks fit the plan's processes. */
static pd_status plan_check(const char *path, pd_plan *p) {
    int v;
    bool has_bwd = false;
    for (v = 0; v < p->n_nodes; v++) {
        if (p->fwd_stage[v] < 0 && p->n_alias) /* a name mistyped, most likely */
            return pd__err(PD_ERR_PARSE, "%s: plan: node '%s' is in no stage and the stages name unknown node '%s'",
                           path, p->node_name[v], p->alias_name[0]);
        if (p->fwd_stage[v] < 0) return pd__err(PD_ERR_PARSE, "%s: plan: node '%s' is in no stage", path, p->node_name[v]);
        has_bwd |= p->bwd_stage[v] >= 0;
    }
    for (int a = 0; a < p->n_alias; a++) {
        if (p->alias_fwd[a] < 0) return pd__err(PD_ERR_PARSE, "%s: plan: node '%s' is in no stage", path, p->alias_name[a]);
        has_bwd |= p->alias_bwd[a] >= 0;
    }
    for (int a = 0; a < p->n_alias; a++) {
        if (!has_bwd) p->alias_bwd[a] = p->alias_fwd[a];
        else if (p->alias_bwd[a] < 0) return pd__err(PD_ERR_PARSE, "%s: plan: node '%s' has no backward stage", path, p->alias_name[a]);
    }
    for (v = 0; v < p->n_nodes; v++) {
        if (!has_bwd) p->bwd_stage[v] = p->fwd_stage[v];
        else if (p->bwd_stage[v] < 0) return pd__err(PD_ERR_PARSE, "%s: plan: node '%s' has no backward stage", path, p->node_name[v]);
    }
    /* the workers' ranks (a worker's chunks sit on its ranks) are within
     * 0 .. N-1; stages may share a rank (several stages per process under
     * MPI, a replicated stage's replica among them), a stage's replicas not */
    int workers = p->n_stages / p->chunks, total = 0;
    for (int w = 0; w < workers; w++) total += p->stage[w].replicas;
    for (int k = workers; k < p->n_stages; k++) p->stage[k].first_rank = p->stage[k % workers].first_rank;
    for (int w = 0; w < workers; w++) {
        const pd__stage *a = &p->stage[w];
        if (a->first_rank + a->replicas > total)
            return pd__err(PD_ERR_PARSE, "%s: plan: stage %d's ranks go beyond the %d processes of the plan", path, w,
                           total);
    }
    return PD_OK;
}

static pd_status pd__plan_parse(const char *path, const cJSON *r, pd_plan *p) {
    PD_TRY(plan_header(path, r, p));
    PD_TRY(plan_nodes(path, r, p));
    const cJSON *stages = cJSON_GetObjectItemCaseSensitive(r, "stages"), *it;
    if (!cJSON_IsArray(stages) || cJSON_GetArraySize(stages) < 1)
        return pd__err(PD_ERR_PARSE, "%s: plan: \"stages\" must be a non-empty array", path);
    p->n_stages = cJSON_GetArraySize(stages);
    if (p->n_stages % p->chunks) return pd__err(PD_ERR_PARSE, "%s: plan: %d stages do not split into %d chunks per worker", path, p->n_stages, p->chunks);
    p->stage = PD_CALLOC((size_t)p->n_stages, sizeof(pd__stage));
    if (!p->stage) return pd__err(PD_ERR_NOMEM, "%s: out of memory", path);
    int s = 0, rank = 0;
    cJSON_ArrayForEach(it, stages) PD_TRY(plan_stage(path, it, s++, &rank, p));
    return plan_check(path, p);
}

/* A plan from JSON text; `what` names it in messages. */
pd_status pd__plan_from_json(const char *buf, size_t len, const char *what, pd_plan **out) {
    const char *end = NULL;
    cJSON *r = cJSON_ParseWithLengthOpts(buf, len, &end, 0);
    if (!r) {
        size_t off = end ? (size_t)(end - buf) : 0;
        int line = 1;
        for (size_t i = 0; i < off && i < len; i++) line += buf[i] == '\n';
        return pd__err(PD_ERR_PARSE, "%s:%d: invalid JSON", what, line);
    }
    pd_plan *p = PD_CALLOC(1, sizeof *p);
    if (!p) {
        cJSON_Delete(r);
        return pd__err(PD_ERR_NOMEM, "%s: out of memory", what);
    }
    pd_status st = pd__plan_parse(what, r, p);
    cJSON_Delete(r);
    if (st != PD_OK) {
        pd__plan_free(p);
        return st;
    }
    *out = p;
    return PD_OK;
}

pd_status pd_plan_load(const char *path, pd_plan **out) {
    if (!path || !out) return pd__err(PD_ERR_INVALID, "pd_plan_load: %s is NULL", !path ? "path" : "out");
    unsigned char *raw = NULL;
    size_t len = 0;
    PD_TRY(pd__read_file(path, &raw, &len));
    pd_status st = pd__plan_from_json((const char *)raw, len, path, out);
    PD_FREE(raw);
    return st;
}

/* ---- a plan onto a loaded graph ----------------------------------------------------- */

typedef struct pd__named {
    const char *name;
    int node;
} pd__named;

static int pd__named_cmp(const void *a, const void *b) {
    return strcmp(((const pd__named *)a)->name, ((const pd__named *)b)->name);
}

/* g's node names and the names its fused nodes absorbed, sorted for bsearch. */
static pd__named *pd__graph_names(const pd_graph *g, int *n) {
    int total = 0;
    for (int i = 0; i < g->nnodes; i++) total += 1 + g->nodes[i].nabsorbed;
    pd__named *t = PD_MALLOC(sizeof *t * (size_t)(total + 1));
    if (!t) return NULL;
    *n = 0;
    for (int i = 0; i < g->nnodes; i++)
        for (int k = -1; k < g->nodes[i].nabsorbed; k++)
            t[(*n)++] = (pd__named){k < 0 ? g->nodes[i].name : g->nodes[i].absorbed[k], i};
    qsort(t, (size_t)*n, sizeof *t, pd__named_cmp);
    return t;
}

/* Node `name` of the plan runs forward on stage f, backward on b: the graph
 * node that is or absorbed it runs on the latest such stage (its inputs are
 * there by then, its readers come no earlier: the plan stays valid). */
static pd_status pd__place(const pd__named *t, int n, const char *name, int f, int b, int *gf, int *gb,
                           const pd_graph *g, const char *what) {
    pd__named key = {name, 0};
    const pd__named *hit = bsearch(&key, t, (size_t)n, sizeof *t, pd__named_cmp);
    if (!hit) return pd__err(PD_ERR_INVALID, "%s: plan: node '%s' is not in %s: plan this model", what, name, g->path);
    if (f > gf[hit->node]) gf[hit->node] = f;
    if (b > gb[hit->node]) gb[hit->node] = b;
    return PD_OK;
}

static pd_status pd__plan_place_all(const pd_plan *p, const pd_graph *g, const char *what, int *gf, int *gb) {
    int n = 0;
    pd__named *t = pd__graph_names(g, &n);
    if (!t) return pd__err(PD_ERR_NOMEM, "%s: out of memory", what);
    pd_status st = PD_OK;
    for (int v = 0; v < p->n_nodes && st == PD_OK; v++)
        st = pd__place(t, n, p->node_name[v], p->fwd_stage[v], p->bwd_stage[v], gf, gb, g, what);
    for (int a = 0; a < p->n_alias && st == PD_OK; a++)
        st = pd__place(t, n, p->alias_name[a], p->alias_fwd[a], p->alias_bwd[a], gf, gb, g, what);
    for (int i = 0; i < g->nnodes && st == PD_OK; i++)
        if (gf[i] < 0) st = pd__err(PD_ERR_INVALID, "%s: plan: %s's node '%s' is in no stage: plan this model", what,
                                    g->path, g->nodes[i].name);
    PD_FREE(t);
    return st;
}

pd_status pd__plan_match(pd_plan *p, const pd_graph *g, const char *what) {
    bool same = p->n_alias == 0 && p->n_nodes == g->nnodes;
    for (int i = 0; same && i < p->n_nodes; i++) same = strcmp(p->node_name[i], g->nodes[i].name) == 0;
    if (same) return PD_OK;
    int *gf = PD_MALLOC(sizeof(int) * (size_t)(g->nnodes + 1)), *gb = PD_MALLOC(sizeof(int) * (size_t)(g->nnodes + 1));
    char **names = PD_CALLOC((size_t)g->nnodes + 1, sizeof(char *));
    pd_status st = gf && gb && names ? PD_OK : pd__err(PD_ERR_NOMEM, "%s: out of memory", what);
    for (int i = 0; st == PD_OK && i < g->nnodes; i++) gf[i] = gb[i] = -1;
    if (st == PD_OK) st = pd__plan_place_all(p, g, what, gf, gb);
    for (int i = 0; st == PD_OK && i < g->nnodes; i++)
        if (!(names[i] = pd__strdup(g->nodes[i].name))) st = pd__err(PD_ERR_NOMEM, "%s: out of memory", what);
    if (st != PD_OK) {
        for (int i = 0; names && i < g->nnodes; i++) PD_FREE(names[i]);
        PD_FREE(names), PD_FREE(gf), PD_FREE(gb);
        return st;
    }
    for (int v = 0; v < p->n_nodes; v++) PD_FREE(p->node_name[v]);
    for (int a = 0; a < p->n_alias; a++) PD_FREE(p->alias_name[a]);
    PD_FREE(p->node_name), PD_FREE(p->fwd_stage), PD_FREE(p->bwd_stage);
    PD_FREE(p->alias_name), PD_FREE(p->alias_fwd), PD_FREE(p->alias_bwd);
    p->alias_name = NULL, p->alias_fwd = p->alias_bwd = NULL, p->n_alias = 0;
    p->node_name = names, p->fwd_stage = gf, p->bwd_stage = gb, p->n_nodes = g->nnodes;
    return PD_OK;
}
