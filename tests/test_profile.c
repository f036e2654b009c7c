/* test_profile.c - profiles: building and validation, PipeDream graph.txt and
 * JSON read/write, and measuring a model on the CPU backend.
 *
 * argv[1]: tests/fixtures (the mlp and cnn_bn models are measured);
 * argv[2]: PipeDream's published profiles (../shared/pipedream-profiles), each
 * <model>/graph.txt imported, checked against a line scan of the file and
 * round-tripped through graph.txt and JSON. Either may be missing: those
 * parts are skipped, the rest still runs.
 */
#include "../core/plan.h"
#include "../runtime/session.h"
#include "check.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[256];

static const char *tmp_path(const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static const char *write_file(const char *name, const char *text) {
    const char *p = tmp_path(name);
    FILE *f = fopen(p, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    return p;
}

static bool near(double a, double b, double tol) { return fabs(a - b) <= tol * (1 + fabs(b)); }

/* Same nodes (names, descs; costs within tol) and the same edges. */
static bool same_profile(const pd_profile *a, const pd_profile *b, double tol, char *why, size_t n) {
    if (a->n != b->n || a->n_edges != b->n_edges) {
        snprintf(why, n, "%d nodes / %d edges vs %d / %d", a->n, a->n_edges, b->n, b->n_edges);
        return false;
    }
    for (int i = 0; i < a->n; i++) {
        const pd__pnode *x = &a->node[i], *y = &b->node[i];
        if (strcmp(x->name, y->name) || strcmp(x->desc, y->desc) || !near(x->fwd_ms, y->fwd_ms, tol) ||
            !near(x->bwd_in_ms, y->bwd_in_ms, tol) || !near(x->bwd_w_ms, y->bwd_w_ms, tol) ||
            !near(x->act_bytes, y->act_bytes, tol) || !near(x->param_bytes, y->param_bytes, tol) ||
            !near(x->optim_bytes, y->optim_bytes, tol)) {
            snprintf(why, n, "node %d: '%s' fwd %g bwd %g+%g vs '%s' fwd %g bwd %g+%g", i, x->name, x->fwd_ms,
                     x->bwd_in_ms, x->bwd_w_ms, y->name, y->fwd_ms, y->bwd_in_ms, y->bwd_w_ms);
            return false;
        }
    }
    for (int e = 0; e < 2 * a->n_edges; e++)
        if (a->edge[e] != b->edge[e]) {
            snprintf(why, n, "edge %d differs", e / 2);
            return false;
        }
    snprintf(why, n, "same");
    return true;
}

static int edge_index(const pd_profile *p, const char *a, const char *b) {
    for (int e = 0; e < p->n_edges; e++)
        if (!strcmp(p->node[p->edge[2 * e]].name, a) && !strcmp(p->node[p->edge[2 * e + 1]].name, b)) return e;
    return -1;
}

/* ---- building and validating ------------------------------------------------- */

static void test_finish(void) {
    pd_profile *p;
    pd__profile_new(4, &p);
    const char *names[] = {"d", "a", "c", "b"};
    for (int i = 0; i < 4; i++) p->node[i].name = pd__strdup(names[i]);
    /* a -> b -> c -> d, plus a -> c and a duplicate b -> c */
    pd__profile_add_edge(p, 1, 3);
    pd__profile_add_edge(p, 3, 2);
    pd__profile_add_edge(p, 2, 0);
    pd__profile_add_edge(p, 1, 2);
    pd__profile_add_edge(p, 3, 2);
    pd_status st = pd__profile_finish(p, "t");
    bool order = st == PD_OK && !strcmp(p->node[0].name, "a") && !strcmp(p->node[1].name, "b") &&
                 !strcmp(p->node[2].name, "c") && !strcmp(p->node[3].name, "d");
    CHECK(order && p->n_edges == 4, "finish: topological order, duplicate edge dropped (%d edges)", p->n_edges);
    bool sorted = true;
    for (int e = 0; e < p->n_edges; e++) sorted = sorted && p->edge[2 * e] < p->edge[2 * e + 1];
    CHECK(sorted && p->edge[0] == 0 && p->edge[1] == 1, "finish: edges remapped, producer < consumer");
    CHECK(pd__profile_add_edge(p, 0, 4) == PD_ERR_INVALID, "add_edge: index out of range refused");
    pd_profile_destroy(p);

    /* independent nodes keep their order (stable) */
    pd__profile_new(3, &p);
    for (int i = 0; i < 3; i++) p->node[i].name = pd__strdup(names[i]);
    pd__profile_add_edge(p, 2, 1);
    st = pd__profile_finish(p, "t");
    CHECK(st == PD_OK && !strcmp(p->node[0].name, "d") && !strcmp(p->node[1].name, "c") &&
              !strcmp(p->node[2].name, "a"),
          "finish: stable (ties by original index)");
    pd_profile_destroy(p);

    pd__profile_new(3, &p);
    for (int i = 0; i < 3; i++) p->node[i].name = pd__strdup(names[i]);
    pd__profile_add_edge(p, 0, 1);
    pd__profile_add_edge(p, 1, 2);
    pd__profile_add_edge(p, 2, 1);
    st = pd__profile_finish(p, "cyc");
    CHECK(st == PD_ERR_INVALID && strstr(pd_last_error(), "cycle") &&
              (strstr(pd_last_error(), "'a'") || strstr(pd_last_error(), "'c'")),
          "finish: a cycle names a node on it (%s)", pd_last_error());
    pd_profile_destroy(p);

    pd__profile_new(1, &p);
    p->node[0].name = pd__strdup("x");
    p->node[0].bwd_w_ms = NAN;
    st = pd__profile_finish(p, "nan");
    CHECK(st == PD_ERR_INVALID && strstr(pd_last_error(), "bwd_w_ms"), "finish: a NaN cost refused (%s)",
          pd_last_error());
    pd_profile_destroy(p);
    pd_profile_destroy(NULL);
    CHECK(pd_profile_num_nodes(NULL) == 0, "destroy and num_nodes accept NULL");
}

/* ---- PipeDream's graph.txt ----------------------------------------------------- */

static void test_graph_txt(void) {
    /* nodes out of order, an edge to a node defined later, a description with
     * " -- " inside, an activation list, a stage_id field, a duplicate edge */
    const char *path = write_file("small.txt",
                                  "node3 -- Linear(in_features=4, out_features=2, bias=True) -- "
                                  "forward_compute_time=0.500, backward_compute_time=1.000, activation_size=32.0, "
                                  "parameter_size=40.000\n"
                                  "\tnode1 -- node2\n"
                                  "node1 -- Input0 -- forward_compute_time=0.000, backward_compute_time=0.000, "
                                  "activation_size=0.0, parameter_size=0.000\n"
                                  "node2 -- Conv2d(3, 4, kernel_size=(3, 3)) -- odd -- forward_compute_time=1.250, "
                                  "backward_compute_time=2.5, activation_size=[64.0; 16.0], parameter_size=0 -- "
                                  "stage_id=0\n"
                                  "\tnode2 -- node3\n"
                                  "\tnode1 -- node2\n"
                                  "\tnode1 -- node3");
    pd_profile *p = NULL;
    pd_status st = pd_profile_load(path, &p);
    CHECK(st == PD_OK, "graph.txt: hand-written file loads (%s)", st ? pd_last_error() : "ok");
    if (st != PD_OK) return;
    pd_profile_node_info a, b, c;
    CHECK(pd_profile_node(p, 0, &a) == PD_OK && pd_profile_node(p, 1, &b) == PD_OK && pd_profile_node(p, 2, &c) == PD_OK,
          "graph.txt: three nodes");
    CHECK(p->n == 3 && !strcmp(a.name, "node1") && !strcmp(b.name, "node2") && !strcmp(c.name, "node3"),
          "graph.txt: topological order node1, node2, node3");
    CHECK(!strcmp(b.desc, "Conv2d(3, 4, kernel_size=(3, 3)) -- odd") &&
              !strcmp(c.desc, "Linear(in_features=4, out_features=2, bias=True)") && !strcmp(a.desc, "Input0"),
          "graph.txt: descriptions kept whole ('%s')", b.desc);
    CHECK(b.fwd_ms == 1.25 && b.bwd_in_ms == 2.5 && b.bwd_w_ms == 0 && b.act_bytes == 80 && b.param_bytes == 0,
          "graph.txt: a layer without parameters: bwd all input-gradient, activation list summed");
    CHECK(c.fwd_ms == 0.5 && c.bwd_in_ms == 0.5 && c.bwd_w_ms == 0.5 && c.act_bytes == 32 && c.param_bytes == 40 &&
              c.optim_bytes == 0,
          "graph.txt: a layer with parameters: bwd split in halves");
    CHECK(p->n_edges == 3 && edge_index(p, "node1", "node2") >= 0 && edge_index(p, "node2", "node3") >= 0 &&
              edge_index(p, "node1", "node3") >= 0,
          "graph.txt: three edges, the duplicate dropped");
    CHECK(p->device && !strcmp(p->device, "pipedream") && p->batch == 0, "graph.txt: device 'pipedream'");

    /* export: backward = in + w, three decimals; reads back the same */
    const char *out = tmp_path("small.out.txt");
    pd_profile *q = NULL;
    char why[256];
    st = pd_profile_save_pipedream(p, out);
    if (st == PD_OK) st = pd_profile_load(out, &q);
    CHECK(st == PD_OK && same_profile(p, q, 1e-9, why, sizeof why), "graph.txt: export and re-import (%s)",
          st ? pd_last_error() : why);
    FILE *f = fopen(out, "r");
    char line[512] = "";
    while (f && fgets(line, sizeof line, f) && strncmp(line, "node3", 5) != 0) {
    }
    if (f) fclose(f);
    CHECK(strstr(line, "forward_compute_time=0.500, backward_compute_time=1.000, activation_size=32.000, "
                       "parameter_size=40.000"),
          "graph.txt: exported line in PipeDream's form: %.*s", (int)strcspn(line, "\n"), line);
    pd_profile_destroy(q);

    /* JSON round trip, exact */
    q = NULL;
    st = pd_profile_save(p, tmp_path("small.json"));
    if (st == PD_OK) st = pd_profile_load(tmp_path("small.json"), &q);
    CHECK(st == PD_OK && same_profile(p, q, 0, why, sizeof why) && !strcmp(q->device, "pipedream"),
          "json: save and load give the same profile (%s)", st ? pd_last_error() : why);
    pd_profile_destroy(q);
    pd_profile_destroy(p);
}

static void test_json_forms(void) {
    /* edges by index and by name, costs defaulting to 0 */
    const char *path = write_file("hand.json",
                                  "  {\"format\": \"pdonnx-profile\", \"version\": 1, \"batch\": 8,\n"
                                  "   \"nodes\": [{\"name\": \"c\", \"fwd_ms\": 3, \"act_bytes\": 12},\n"
                                  "             {\"name\": \"a\", \"desc\": \"MatMul\", \"fwd_ms\": 1.5, "
                                  "\"bwd_in_ms\": 1, \"bwd_w_ms\": 2, \"param_bytes\": 64, \"optim_bytes\": 128},\n"
                                  "             {\"name\": \"b\", \"fwd_ms\": 0}],\n"
                                  "   \"edges\": [[1, 2], [\"b\", \"c\"], [\"a\", 0]]}\n");
    pd_profile *p = NULL;
    pd_status st = pd_profile_load(path, &p);
    CHECK(st == PD_OK, "json: hand-written profile loads (%s)", st ? pd_last_error() : "ok");
    if (st != PD_OK) return;
    CHECK(p->n == 3 && !strcmp(p->node[0].name, "a") && !strcmp(p->node[2].name, "c") && p->n_edges == 3 &&
              p->batch == 8 && p->node[0].optim_bytes == 128 && p->node[2].act_bytes == 12 &&
              p->node[2].bwd_in_ms == 0 && !strcmp(p->node[0].desc, "MatMul") && !strcmp(p->node[1].desc, ""),
          "json: edges by index and by name, missing costs read as 0, nodes sorted");
    pd_profile_destroy(p);
}

/* Loads `text` (written to `name`) and expects status `want` and a message with each of `needles`. */
static void expect_error(const char *name, const char *text, pd_status want, const char *needle, const char *what) {
    const char *path = write_file(name, text);
    pd_profile *p = NULL;
    pd_status st = pd_profile_load(path, &p);
    const char *msg = pd_last_error();
    CHECK(st == want && p == NULL && strstr(msg, path) && (!needle || strstr(msg, needle)), "%s: %s (%s)", what,
          pd_status_name(st), st ? msg : "loaded");
    pd_profile_destroy(p);
}

static void test_malformed(void) {
#define N1                                                                                                  \
    "node1 -- Input0 -- forward_compute_time=0.000, backward_compute_time=0.000, activation_size=0.0, " \
    "parameter_size=0.000\n"
#define N2                                                                                                  \
    "node2 -- ReLU() -- forward_compute_time=1.0, backward_compute_time=1.0, activation_size=4.0, "     \
    "parameter_size=0.000\n"
    expect_error("bad_num.txt",
                 N1 "node2 -- ReLU() -- forward_compute_time=fast, backward_compute_time=1.0, activation_size=4.0, "
                    "parameter_size=0.000\n",
                 PD_ERR_PARSE, ":2: forward_compute_time", "graph.txt: a bad number");
    expect_error("neg.txt",
                 N1 "\tnode1 -- node2\n"
                    "node2 -- ReLU() -- forward_compute_time=1.0, backward_compute_time=1.0, activation_size=-4.0, "
                    "parameter_size=0.000\n",
                 PD_ERR_PARSE, ":3: negative activation_size", "graph.txt: a negative size");
    expect_error("missing.txt",
                 N1 "node2 -- ReLU() -- forward_compute_time=1.0, backward_compute_time=1.0, activation_size=4.0\n",
                 PD_ERR_PARSE, ":2: missing parameter_size", "graph.txt: a missing field");
    expect_error("unknown_edge.txt", N1 N2 "\tnode1 -- node2\n\tnode2 -- node9\n", PD_ERR_PARSE, ":4:",
                 "graph.txt: an edge to an unknown node");
    expect_error("dup.txt", N1 N2 N1, PD_ERR_PARSE, ":3: duplicate node 'node1'", "graph.txt: a duplicate node");
    expect_error("cycle.txt", N1 N2 "\tnode1 -- node2\n\tnode2 -- node1\n", PD_ERR_INVALID, "cycle",
                 "graph.txt: a cycle");
    expect_error("noise.txt", N1 "this is not a profile\n", PD_ERR_PARSE, ":2:", "graph.txt: a line of noise");
    expect_error("empty.txt", "\n\n", PD_ERR_PARSE, "no nodes", "graph.txt: an empty file");
#undef N1
#undef N2
    expect_error("trunc.json", "{\"format\": \"pdonnx-profile\", \"version\": 1,\n \"nodes\": [{\"name\": \"a\",",
                 PD_ERR_PARSE, ":2:", "json: truncated");
    expect_error("type.json",
                 "{\"format\": \"pdonnx-profile\", \"version\": 1,\n \"nodes\": [{\"name\": \"a\", \"fwd_ms\": "
                 "\"fast\"}]}",
                 PD_ERR_PARSE, "nodes[0] ('a'): \"fwd_ms\" must be a number", "json: a string for a number");
    expect_error("type2.json", "{\"format\": \"pdonnx-profile\", \"version\": 1, \"nodes\": {}}", PD_ERR_PARSE,
                 "\"nodes\"", "json: nodes not an array");
    expect_error("edge.json",
                 "{\"format\": \"pdonnx-profile\", \"version\": 1, \"nodes\": [{\"name\": \"a\", \"fwd_ms\": 1}], "
                 "\"edges\": [[\"a\", \"zz\"]]}",
                 PD_ERR_PARSE, "no node named 'zz'", "json: an edge to an unknown node");
    expect_error("neg.json",
                 "{\"format\": \"pdonnx-profile\", \"version\": 1, \"nodes\": [{\"name\": \"a\", \"fwd_ms\": -1}]}",
                 PD_ERR_INVALID, "fwd_ms", "json: a negative time");
    expect_error("fmt.json", "{\"format\": \"other\", \"version\": 1, \"nodes\": []}", PD_ERR_PARSE, "pdonnx-profile",
                 "json: another format");
    expect_error("ver.json", "{\"format\": \"pdonnx-profile\", \"version\": 7, \"nodes\": []}", PD_ERR_UNSUPPORTED,
                 "version 7", "json: a later version");
    pd_profile *p = NULL;
    CHECK(pd_profile_load(tmp_path("does-not-exist"), &p) == PD_ERR_IO && !p, "load: a missing file is PD_ERR_IO");
}

/* ---- PipeDream's published profiles --------------------------------------------- */

static bool test_pipedream_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) {
        printf("# no PipeDream profiles at %s: skipped\n", dir);
        return false;
    }
    struct dirent *e;
    int models = 0;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s/graph.txt", dir, e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        /* our own count of the file: node lines, edge lines, total forward time */
        int nodes = 0, edges = 0;
        double fwd = 0, params = 0;
        char line[8192];
        while (fgets(line, sizeof line, f)) {
            if (line[0] == '\t') edges++;
            else if (line[0] != '\n') {
                nodes++;
                const char *t = strstr(line, "forward_compute_time="), *s = strstr(line, "parameter_size=");
                if (t) fwd += atof(t + 21);
                if (s) params += atof(s + 15);
            }
        }
        fclose(f);
        models++;
        pd_profile *p = NULL, *q = NULL, *r = NULL;
        pd_status st = pd_profile_load(path, &p);
        double pf = 0, pp = 0;
        for (int i = 0; p && i < p->n; i++) pf += p->node[i].fwd_ms, pp += p->node[i].param_bytes;
        CHECK(st == PD_OK && p->n == nodes && p->n_edges == edges && near(pf, fwd, 1e-9) && near(pp, params, 1e-9),
              "%s: %d nodes, %d edges, forward %.3f ms (%s)", e->d_name, p ? p->n : 0, p ? p->n_edges : 0, pf,
              st ? pd_last_error() : "ok");
        if (st != PD_OK) continue;
        char why[256] = "";
        const char *txt = tmp_path("rt.txt"), *js = tmp_path("rt.json");
        st = pd_profile_save_pipedream(p, txt);
        if (st == PD_OK) st = pd_profile_load(txt, &q);
        CHECK(st == PD_OK && same_profile(q, p, 1e-9, why, sizeof why), "%s: graph.txt round trip (%s)", e->d_name,
              st ? pd_last_error() : why);
        st = pd_profile_save(p, js);
        if (st == PD_OK) st = pd_profile_load(js, &r);
        CHECK(st == PD_OK && same_profile(r, p, 0, why, sizeof why), "%s: JSON round trip (%s)", e->d_name,
              st ? pd_last_error() : why);
        pd_profile_destroy(p);
        pd_profile_destroy(q);
        pd_profile_destroy(r);
    }
    closedir(d);
    CHECK(models > 0, "found %d PipeDream profiles in %s", models, dir);
    return true;
}

/* ---- measuring on the CPU ------------------------------------------------------- */

/* The profiler's split backward (input gradients, then weight gradients, as two
 * kernel calls) gives the gradients of the session's ordinary step. */
static void test_split_grads(pd_graph *g, const char *xpath) {
    pd_tensor x;
    if (pd_npy_load(xpath, &x) != PD_OK) return;
    int64_t lab[64] = {0};
    for (int i = 0; i < 64; i++) lab[i] = i % 10;
    pd_tensor y = {PD_INT64, 1, {x.shape[0]}, lab};
    pd_train_options o = PD_TRAIN_OPTIONS_INIT;
    o.threads = 1;
    pd_session *s = NULL;
    int n = pd_graph_num_nodes(g);
    double t[3 * 64];
    pd__step_times st = {t, t + n, t + 2 * n, 0};
    bool ok = x.shape[0] <= 64 && n <= 64 && pd_session_create(g, &o, &s) == PD_OK &&
              pd_session_set_input(s, "x", &x) == PD_OK && pd_session_set_labels(s, &y) == PD_OK &&
              pd__session_timed_step(s, &st) == PD_OK;
    float *split[16] = {0};
    int np = ok ? pd_session_num_params(s) : 0;
    for (int i = 0; ok && i < np && i < 16; i++) {
        pd_tensor gr;
        if (pd_session_param(s, i, NULL, NULL, &gr) != PD_OK) { ok = 0; break; }
        size_t bytes = (size_t)pd_tensor_numel(&gr) * sizeof(float);
        split[i] = malloc(bytes);
        memcpy(split[i], gr.data, bytes);
    }
    pd_step_result r;
    ok = ok && np <= 16 && pd_session_step(s, &r) == PD_OK; /* sgd, no decay: the gradients are left as computed */
    double worst = ok ? 0 : 1;
    for (int i = 0; ok && i < np; i++) {
        pd_tensor gr;
        if (pd_session_param(s, i, NULL, NULL, &gr) != PD_OK) { ok = 0; break; }
        for (int64_t k = 0; k < pd_tensor_numel(&gr); k++)
            worst = fmax(worst, fabs(((float *)gr.data)[k] - split[i][k]));
    }
    CHECK(ok && worst == 0, "split backward: the same gradients as pd_session_step (max diff %g)", worst);
    for (int i = 0; i < 16; i++) free(split[i]);
    pd_session_destroy(s);
    pd_tensor_free(&x);
}

static bool test_measure(const char *fixtures) {
    char path[1024];
    snprintf(path, sizeof path, "%s/mlp/x.npy", fixtures);
    pd_tensor x;
    if (pd_npy_peek(path, &x) != PD_OK) {
        printf("# no fixtures at %s: measuring skipped\n", fixtures);
        return false;
    }
    pd_load_options lo = PD_LOAD_OPTIONS_INIT;
    lo.batch = x.shape[0];
    snprintf(path, sizeof path, "%s/mlp/model.onnx", fixtures);
    pd_graph *g = NULL;
    pd_status st = pd_graph_load_file(path, &lo, &g);
    CHECK(st == PD_OK, "measure: mlp loads (%s)", st ? pd_last_error() : "ok");
    if (st != PD_OK) return true;
    int w = pd__graph_find(g, "fc1.weight");
    float w0 = w >= 0 ? ((float *)g->tensors[w].data)[7] : 0;

    pd_profile_options o = PD_PROFILE_OPTIONS_INIT;
    o.warmup = 1;
    o.repeats = 3;
    o.threads = 1;
    pd_profile *p = NULL;
    st = pd_profile_measure(g, &o, &p);
    CHECK(st == PD_OK, "measure: mlp, warmup 1, repeats 3 (%s)", st ? pd_last_error() : "ok");
    if (st != PD_OK) {
        pd_graph_destroy(g);
        return true;
    }
    CHECK(p->n == pd_graph_num_nodes(g) && p->n_edges == p->n - 1 && p->batch == x.shape[0] &&
              !strcmp(p->device, "cpu"),
          "measure: one node per graph node (%d), a chain of %d edges, batch %lld", p->n, p->n_edges,
          (long long)p->batch);
    bool names = true, timed = true, noparam = true, acts = true, pbytes = true;
    double total = 0;
    int gemms = 0;
    for (int i = 0; i < p->n; i++) {
        pd_node_info ni;
        if (pd_graph_node(g, i, &ni) != PD_OK) continue;
        const pd__pnode *d = &p->node[i];
        names = names && !strcmp(d->name, ni.name) && !strcmp(d->desc, ni.op_type);
        if (!strcmp(ni.op_type, "Gemm") || !strcmp(ni.op_type, "MatMul")) {
            gemms++;
            timed = timed && d->fwd_ms > 0 && d->bwd_w_ms > 0 && (i == 0 || d->bwd_in_ms > 0);
        }
        if (ni.param_bytes == 0) noparam = noparam && d->bwd_w_ms == 0 && d->param_bytes == 0;
        acts = acts && d->act_bytes == (double)ni.output_bytes;
        pbytes = pbytes && d->param_bytes == (double)ni.param_bytes && d->optim_bytes == 0;
        total += d->param_bytes;
    }
    CHECK(names, "measure: names and op types as the graph's");
    CHECK(gemms == 3 && timed, "measure: positive forward and backward times for the %d Gemm nodes", gemms);
    CHECK(p->node[0].bwd_in_ms == 0, "measure: the first layer needs no input gradient (bwd_in_ms 0)");
    CHECK(noparam, "measure: nodes without parameters: bwd_w_ms 0, param_bytes 0");
    CHECK(acts, "measure: act_bytes = the node's output bytes");
    CHECK(pbytes && total == (double)pd_graph_param_bytes(g), "measure: param_bytes sum to %.0f (graph: %lld)", total,
          (long long)pd_graph_param_bytes(g));
    CHECK(w >= 0 && ((float *)g->tensors[w].data)[7] == w0, "measure: the weights are left as they were");
    pd_profile *q = NULL;
    char why[256] = "";
    st = pd_profile_save(p, tmp_path("mlp.json"));
    if (st == PD_OK) st = pd_profile_load(tmp_path("mlp.json"), &q);
    CHECK(st == PD_OK && same_profile(q, p, 0, why, sizeof why), "measure: the profile round-trips through JSON (%s)",
          st ? pd_last_error() : why);
    pd_profile_destroy(q);
    pd_profile_destroy(p);

    p = NULL;
    o.optimizer = PD_OPT_ADAM;
    o.warmup = 0;
    o.repeats = 1;
    st = pd_profile_measure(g, &o, &p);
    bool adam = st == PD_OK;
    for (int i = 0; adam && i < p->n; i++) adam = p->node[i].optim_bytes == 2 * p->node[i].param_bytes;
    CHECK(adam, "measure: adam keeps two floats of state per parameter");
    pd_profile_destroy(p);
    p = NULL;
    o.device = "cuda";
    CHECK(pd_profile_measure(g, &o, &p) == PD_ERR_UNSUPPORTED && !p && strstr(pd_last_error(), "CUDA"),
          "measure: --device cuda without the CUDA backend: %s", pd_last_error());
    snprintf(path, sizeof path, "%s/mlp/x.npy", fixtures);
    test_split_grads(g, path);
    pd_graph_destroy(g);

    /* BatchNorm: its running statistics are not parameters and are left unchanged */
    snprintf(path, sizeof path, "%s/cnn_bn/model.onnx", fixtures);
    g = NULL;
    if (pd_graph_load_file(path, &lo, &g) != PD_OK) return true;
    int bn = -1, rm = -1;
    for (int i = 0; i < g->nnodes && bn < 0; i++)
        if (!strcmp(g->nodes[i].op_type, "BatchNormalization")) bn = i, rm = g->nodes[i].in[3];
    double stats = 0;
    for (int i = 0; i < g->nnodes; i++)
        if (!strcmp(g->nodes[i].op_type, "BatchNormalization"))
            stats += 4.0 * (double)(g->tensors[g->nodes[i].in[3]].numel + g->tensors[g->nodes[i].in[4]].numel);
    float m0 = rm >= 0 ? ((float *)g->tensors[rm].data)[0] : 0;
    o = (pd_profile_options)PD_PROFILE_OPTIONS_INIT;
    o.warmup = 0;
    o.repeats = 1;
    o.threads = 1;
    p = NULL;
    st = pd_profile_measure(g, &o, &p);
    total = 0;
    for (int i = 0; p && i < p->n; i++) total += p->node[i].param_bytes;
    CHECK(st == PD_OK && bn >= 0 && total == (double)pd_graph_param_bytes(g) - stats &&
              ((float *)g->tensors[rm].data)[0] == m0,
          "measure: cnn_bn: parameters %.0f B = initializers minus BN statistics, running mean unchanged (%s)", total,
          st ? pd_last_error() : "ok");
    pd_profile_destroy(p);
    pd_graph_destroy(g);
    return true;
}

static void cleanup(void) {
    DIR *d = opendir(tmpdir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        if (e->d_name[0] != '.') unlink(tmp_path(e->d_name));
    if (d) closedir(d);
    rmdir(tmpdir);
}

int main(int argc, char **argv) {
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/pd_profile_XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) {
        printf("# cannot make a temporary folder: skipped\n");
        return 77;
    }
    test_finish();
    test_graph_txt();
    test_json_forms();
    test_malformed();
    if (argc > 2) test_pipedream_dir(argv[2]);
    if (argc > 1) test_measure(argv[1]);
    cleanup();
    return check_summary();
}
