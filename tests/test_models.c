/* test_models.c - PyTorch-exported models (tests/fixtures/<name>/) reproduce
 * PyTorch's outputs through the public API: |ours - torch| <= 1e-4 * (|torch| + s),
 * s = the mean |torch| of the output (so values near zero are held to the
 * output's own scale). Also binds a different batch (2) to the symbolic batch
 * dim and checks the first two rows. */
#include "../pipedream.h"
#include "check.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static double max_rel_err(const float *got, const float *want, int64_t n) {
    double scale = 0;
    for (int64_t i = 0; i < n; i++) scale += fabs(want[i]);
    scale = n ? scale / (double)n : 0;
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]) / (fabs(want[i]) + scale);
        if (!(e <= worst)) worst = e; /* NaN counts as worst */
    }
    return worst;
}

static void run_fixture(const char *dir, const char *name, int64_t batch) {
    char mp[1024], xp[1024], yp[1024];
    snprintf(mp, sizeof mp, "%s/%s/model.onnx", dir, name);
    snprintf(xp, sizeof xp, "%s/%s/x.npy", dir, name);
    snprintf(yp, sizeof yp, "%s/%s/y.npy", dir, name);
    pd_tensor x, y;
    if (pd_npy_load(xp, &x) != PD_OK || pd_npy_load(yp, &y) != PD_OK) {
        CHECK(0, "%s: fixture files readable (%s)", name, pd_last_error());
        return;
    }
    /* the first `batch` rows of x and y */
    int64_t xrow = pd_tensor_numel(&x) / x.shape[0], yrow = pd_tensor_numel(&y) / y.shape[0];
    x.shape[0] = batch;
    y.shape[0] = batch;
    pd_load_options lo = PD_LOAD_OPTIONS_INIT;
    lo.batch = batch;
    pd_graph *g = NULL;
    pd_engine *e = NULL;
    pd_tensor out;
    pd_status st = pd_graph_load_file(mp, &lo, &g);
    CHECK(st == PD_OK, "%s: loads with batch %lld (%s)", name, (long long)batch, st ? pd_last_error() : "");
    if (st == PD_OK) st = pd_engine_create(g, NULL, &e);
    if (st == PD_OK) st = pd_engine_set_input(e, "x", &x);
    if (st == PD_OK) st = pd_engine_run(e);
    if (st == PD_OK) st = pd_engine_get_output(e, "y", &out);
    CHECK(st == PD_OK, "%s: runs (%s)", name, st ? pd_last_error() : "");
    if (st == PD_OK) {
        bool shape_ok = out.dtype == PD_FLOAT && out.ndim == y.ndim;
        for (int i = 0; shape_ok && i < y.ndim; i++) shape_ok = out.shape[i] == y.shape[i];
        CHECK(shape_ok, "%s: output shape matches PyTorch's", name);
        if (shape_ok) {
            double err = max_rel_err(out.data, y.data, batch * yrow);
            CHECK(err <= 1e-4, "%s batch %lld: matches PyTorch, max relative error %.3g", name, (long long)batch, err);
        }
    }
    (void)xrow;
    pd_engine_destroy(e);
    pd_graph_destroy(g);
    pd_tensor_free(&x);
    pd_tensor_free(&y);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_models FIXTURES_DIR\n");
        return 2;
    }
    const char *names[] = {"mlp", "cnn_bn", "resnet", "gpt"};
    for (int i = 0; i < 4; i++) {
        run_fixture(argv[1], names[i], 4);
        run_fixture(argv[1], names[i], 2);
    }
    return check_summary();
}
