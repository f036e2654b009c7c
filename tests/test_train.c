/* test_train.c - single-stage training reproduces PyTorch's trajectories.
 *
 * For each tests/fixtures/<model>/train/cases.txt line (written by
 * tests/fixtures/gen_train_fixtures.py): train the fixture model with the
 * same optimizer on the same data stream (no shuffle: step k takes rows
 * (k*N + j) mod R) and compare every step's loss with PyTorch's losses.npy,
 * and every initializer afterwards (weights and BatchNorm statistics) with
 * PyTorch's trained.onnx: |ours - torch| <= 1e-4 * (|torch| + mean |torch|).
 * On the CPU the losses are held to 1e-6 relative (2.1e-7 at most is seen;
 * PyTorch itself, started 1e-6 off, lands up to 6e-7 away): Adam and AdamW
 * with the moments' 1-beta rounded as 1.0f - beta (issue 22) were 2e-6 to
 * 1.8e-5 off, inside 1e-4.
 * mlp_loss has its loss inside the model (SoftmaxCrossEntropyLoss): --loss graph.
 *
 * On a GPU (suite cuda): test_train --device cuda[:N] [--precision fp32|tf32|bf16]
 * [--tol X] [--spread FILE] FIXTURES_DIR [MODEL...]: the same cases on the
 * CUDA session, the same bound in fp32, a looser one (--tol) for tf32 and
 * bf16; exits 77 (skipped) without a GPU or a CUDA build. With --spread
 * (tests/fixtures/reduced_precision_spread.txt: how far PyTorch itself lands
 * from the fp32 reference in that precision on a GPU), a case listed there
 * is bound by 3x PyTorch's own distance instead, losses and weights each:
 * TF32 rounding flips ReLUs and Adam's signs of near-zero gradients, so
 * resnet's weights land 0.2-0.4 away in PyTorch too, and a fixed bound would
 * be either loose for gpt or failing for resnet.
 */
#include "../core/pd_internal.h"
#include "../runtime/data.h"
#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *kv(const char *line, const char *key, char *buf, size_t n) {
    char pat[64];
    snprintf(pat, sizeof pat, " %s=", key);
    const char *p = strstr(line, pat); /* lines are passed with a leading space */
    if (!p) return NULL;
    p += strlen(pat);
    size_t k = strcspn(p, " \n");
    snprintf(buf, n, "%.*s", (int)k, p);
    return buf;
}

static double kvf(const char *line, const char *key) {
    char b[64];
    return kv(line, key, b, sizeof b) ? atof(b) : 0;
}

static const char *dev_name = NULL, *prec_name = NULL; /* --device, --precision */
static double tol = 1e-4;
static const double cpu_loss_tol = 1e-6; /* the losses on the CPU session (fp32) */
static const char *spread_file = NULL; /* --spread */

/* PyTorch's own loss and weight distances for model/case in --precision,
 * from --spread; false when the file has no such line. */
static bool spread_of(const char *model, const char *cname, double *ls, double *ws) {
    if (!spread_file || !prec_name) return false;
    FILE *f = fopen(spread_file, "r");
    if (!f) return false;
    char line[512], m[64], c[64], mode[16];
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        found = line[0] != '#' && sscanf(line, "%63s %63s %15s %lf %lf", m, c, mode, ls, ws) == 5 &&
                !strcmp(m, model) && !strcmp(c, cname) && !strcmp(mode, prec_name);
    fclose(f);
    return found;
}

static void run_case(const char *fx, const char *line) {
    char model[64], cname[64], opt[64], p[1024];
    kv(line, "model", model, sizeof model);
    kv(line, "case", cname, sizeof cname);
    kv(line, "optimizer", opt, sizeof opt);
    int64_t steps = (int64_t)kvf(line, "steps"), batch = (int64_t)kvf(line, "batch");
    double ltol = tol, wtol = tol, lsp = 0, wsp = 0;
    char bound[96] = "";
    if (spread_of(model, cname, &lsp, &wsp)) {
        ltol = 3 * lsp > 1e-4 ? 3 * lsp : 1e-4;
        wtol = 3 * wsp > 1e-4 ? 3 * wsp : 1e-4;
        snprintf(bound, sizeof bound, " (PyTorch %s: %.3g / %.3g)", prec_name, lsp, wsp);
    }
    pd_tensor X = {0}, Y = {0}, L = {0};
    pd_graph *g = NULL, *ref = NULL;
    pd_session *s = NULL;
    pd__data d = {0};
    /* the data: the case's own, or the model's shared one */
    snprintf(p, sizeof p, "%s/%s/train/%s/X.npy", fx, model, cname);
    FILE *own = fopen(p, "rb");
    if (own) fclose(own);
    const char *where = own ? cname : ".";
    snprintf(p, sizeof p, "%s/%s/train/%s/X.npy", fx, model, where);
    pd_status st = pd_npy_load(p, &X);
    snprintf(p, sizeof p, "%s/%s/train/%s/Y.npy", fx, model, where);
    if (st == PD_OK) st = pd_npy_load(p, &Y);
    snprintf(p, sizeof p, "%s/%s/train/%s/losses.npy", fx, model, cname);
    if (st == PD_OK) st = pd_npy_load(p, &L);
    pd_load_options lo = PD_LOAD_OPTIONS_INIT;
    lo.batch = batch;
    snprintf(p, sizeof p, "%s/%s/model.onnx", fx, model);
    if (st == PD_OK) st = pd_graph_load_file(p, &lo, &g);
    pd_train_options o = PD_TRAIN_OPTIONS_INIT;
    char lossk[32];
    o.loss = kv(line, "loss", lossk, sizeof lossk) && !strcmp(lossk, "graph") ? PD_LOSS_GRAPH : PD_LOSS_CROSS_ENTROPY;
    o.lr = kvf(line, "lr");
    o.momentum = kvf(line, "momentum");
    o.weight_decay = kvf(line, "weight_decay");
    o.clip_grad_norm = kvf(line, "clip");
    char freeze[256];
    o.freeze = kv(line, "freeze", freeze, sizeof freeze); /* parameters whose true gradient is zero */
    o.threads = 1;
    if (st == PD_OK) st = pd_train_options_set_device(&o, dev_name, prec_name);
    if (st == PD_OK && o.device == PD_DEVICE_CPU && ltol > cpu_loss_tol) ltol = cpu_loss_tol;
    if (!strcmp(opt, "sgd")) o.optimizer = PD_OPT_SGD;
    else if (!strcmp(opt, "momentum")) o.optimizer = PD_OPT_MOMENTUM;
    else if (!strcmp(opt, "nesterov")) o.optimizer = PD_OPT_NESTEROV;
    else if (!strcmp(opt, "adam")) o.optimizer = PD_OPT_ADAM;
    else if (!strcmp(opt, "adamw")) o.optimizer = PD_OPT_ADAMW;
    if (o.optimizer == PD_OPT_ADAM || o.optimizer == PD_OPT_ADAMW) {
        o.beta1 = kvf(line, "beta1");
        o.beta2 = kvf(line, "beta2");
        o.eps = kvf(line, "eps");
    }
    if (st == PD_OK) st = pd_session_create(g, &o, &s);
    if (st == PD_OK) st = pd__data_init(&d, &X, &Y, batch, false, 0);
    CHECK(st == PD_OK, "%s/%s: set up (%s)", model, cname, st ? pd_last_error() : "");
    if (st != PD_OK) goto done;
    pd_tensor bx = X, by = Y;
    bx.shape[0] = by.shape[0] = batch;
    size_t xr = (size_t)(pd_tensor_numel(&X) / X.shape[0]) * pd_dtype_size(X.dtype);
    size_t yr = (size_t)(pd_tensor_numel(&Y) / Y.shape[0]) * pd_dtype_size(Y.dtype);
    bx.data = malloc(xr * (size_t)batch);
    by.data = malloc(yr * (size_t)batch);
    pd_value_info in;
    if (pd_graph_input(g, 0, &in) != PD_OK) in.name = "";
    double worst = 0;
    int64_t worst_step = 0;
    for (int64_t k = 0; k < steps && st == PD_OK; k++) {
        pd__data_fill(&d, k, bx.data, by.data);
        pd_step_result r;
        st = pd_session_set_input(s, in.name, &bx);
        if (st == PD_OK) st = pd_session_set_labels(s, &by);
        if (st == PD_OK) st = pd_session_step(s, &r);
        if (st != PD_OK) break;
        double want = ((double *)L.data)[k], e = fabs(r.loss - want) / fabs(want);
        if (!(e <= worst)) {
            worst = e;
            worst_step = k + 1;
        }
    }
    free(bx.data);
    free(by.data);
    CHECK(st == PD_OK && worst <= ltol,
          "%s/%s: %lld per-step losses match PyTorch's, max relative error %.3g (step %lld, bound %.3g%s)%s%s", model,
          cname, (long long)steps, worst, (long long)worst_step, ltol, bound, st ? ": " : "", st ? pd_last_error() : "");
    if (st != PD_OK) goto done;
    st = pd_session_sync(s); /* on a GPU: the trained values into the graph */
    CHECK(st == PD_OK, "%s/%s: pd_session_sync (a GPU's weights into the graph; nothing on the CPU)%s%s", model, cname, st ? ": " : "",
          st ? pd_last_error() : "");
    if (st != PD_OK) goto done;
    /* every initializer after training */
    snprintf(p, sizeof p, "%s/%s/train/%s/trained.onnx", fx, model, cname);
    st = pd_graph_load_file(p, &lo, &ref);
    CHECK(st == PD_OK, "%s/%s: trained.onnx loads (%s)", model, cname, st ? pd_last_error() : "");
    if (st != PD_OK) goto done;
    int compared = 0, bad = 0;
    double wworst = 0;
    const char *wname = "";
    for (int t = 0; t < ref->ntensors; t++) {
        const pd__tensor *rt = &ref->tensors[t];
        if (rt->kind != PD_T_INIT || rt->dtype != PD_FLOAT || !rt->data) continue;
        int u = pd__graph_find(g, rt->name);
        if (u < 0 || g->tensors[u].numel != rt->numel) {
            bad++;
            continue;
        }
        double e = check_rel_err(g->tensors[u].data, rt->data, rt->numel);
        if (!(e <= wworst)) {
            wworst = e;
            wname = rt->name;
        }
        compared++;
    }
    /* pd_graph_save writes exactly the trained values, the batch dim still symbolic */
    char saved[256];
    snprintf(saved, sizeof saved, "/tmp/pd_test_train_%d_%s_%s.onnx", (int)getpid(), model, cname);
    pd_graph *back = NULL;
    pd_load_options lo2 = PD_LOAD_OPTIONS_INIT;
    lo2.batch = batch + 1;
    st = pd_graph_save(g, saved);
    if (st == PD_OK) st = pd_graph_load_file(saved, &lo2, &back);
    int same = 0, differ = 0;
    for (int t = 0; st == PD_OK && t < g->ntensors; t++) {
        const pd__tensor *a = &g->tensors[t];
        if (a->kind != PD_T_INIT || !a->data) continue;
        int u = pd__graph_find(back, a->name);
        if (u >= 0 && back->tensors[u].numel == a->numel &&
            memcmp(back->tensors[u].data, a->data, (size_t)a->numel * pd_dtype_size(a->dtype)) == 0)
            same++;
        else
            differ++;
    }
    CHECK(st == PD_OK && same > 0 && differ == 0,
          "%s/%s: pd_graph_save round trip: %d initializers bit for bit, reloads with another batch%s%s", model, cname,
          same, st ? ": " : "", st ? pd_last_error() : "");
    pd_graph_destroy(back);
    remove(saved);
    CHECK(bad == 0 && compared > 0 && wworst <= wtol,
          "%s/%s: %d trained initializers match PyTorch's, max relative error %.3g ('%s', bound %.3g%s)%s", model, cname,
          compared, wworst, wname, wtol, bound, bad ? ", some missing" : "");
done:
    pd__data_free(&d);
    pd_session_destroy(s);
    pd_graph_destroy(g);
    pd_graph_destroy(ref);
    pd_tensor_free(&X);
    pd_tensor_free(&Y);
    pd_tensor_free(&L);
}

int main(int argc, char **argv) {
    while (argc > 2 && argv[1][0] == '-' && argv[1][1] == '-') {
        if (!strcmp(argv[1], "--device")) dev_name = argv[2];
        else if (!strcmp(argv[1], "--precision")) prec_name = argv[2];
        else if (!strcmp(argv[1], "--tol")) tol = atof(argv[2]);
        else if (!strcmp(argv[1], "--spread")) spread_file = argv[2];
        else break;
        argc -= 2;
        argv += 2;
    }
    if (argc < 2 || !(tol > 0)) {
        fprintf(stderr, "usage: test_train [--device cpu|cuda[:N]] [--precision fp32|tf32|bf16] [--tol X] [--spread FILE] "
                        "FIXTURES_DIR [MODEL...]\n");
        return 2;
    }
    if (dev_name && strncmp(dev_name, "cuda", 4) == 0 && pd_cuda_device_count() == 0) {
        printf("no CUDA device (or a build without the CUDA backend): skipped\n");
        return 77;
    }
    const char *models[] = {"mlp", "cnn_bn", "resnet", "gpt", "mlp_loss"};
    for (int m = 0; m < 5; m++) {
        bool chosen = argc == 2;
        for (int i = 2; i < argc; i++) chosen |= strcmp(argv[i], models[m]) == 0;
        if (!chosen) continue;
        char p[1024], line[1024];
        snprintf(p, sizeof p, "%s/%s/train/cases.txt", argv[1], models[m]);
        FILE *f = fopen(p, "r");
        CHECK(f != NULL, "%s: %s exists", models[m], p);
        if (!f) continue;
        while (fgets(line + 1, sizeof line - 1, f)) {
            line[0] = ' ';
            if (line[1] != '#' && strstr(line, " model=")) run_case(argv[1], line);
        }
        fclose(f);
    }
    return check_summary();
}
