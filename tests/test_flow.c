/* test_flow.c - training through unrolled control flow (onnx/flow.c).
 *
 * For each case of tests/fixtures/flow/expected.txt (written by
 * tests/fixtures/gen_flow_fixtures.py): load the model (a Scan RNN, a Loop
 * RNN, an If on a runtime condition), take one SGD step with the mse loss on
 * the same inputs and labels, and compare the loss and every parameter's
 * gradient with PyTorch's (float64): |ours - torch| <= 1e-4 * (|torch| +
 * mean |torch|). The parameters sit outside the subgraphs that read them, so
 * their gradients pass through the spliced copies' own backward. Then a few
 * hostile models built in memory: each refused with one line naming the node.
 *
 *     test_flow FIXTURES_DIR
 */
#include "../core/pd_internal.h"
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXV 4096

typedef struct vals {
    int ndim;
    int64_t shape[PD_MAX_DIMS];
    int n;
    float v[MAXV];
} vals;

/* "2,4,3 v v v ..." (or "- v" for a scalar) from p. */
static void parse_vals(const char *p, vals *out) {
    memset(out, 0, sizeof *out);
    char *end;
    if (*p == '-') {
        p++;
    } else {
        for (;;) {
            out->shape[out->ndim++] = strtoll(p, &end, 10);
            p = end;
            if (*p != ',') break;
            p++;
        }
    }
    for (;;) {
        double d = strtod(p, &end);
        if (end == p || out->n == MAXV) break;
        out->v[out->n++] = (float)d;
        p = end;
    }
}

static void run_case(const char *dir, FILE *f, const char *model) {
    char path[1024], line[16384];
    snprintf(path, sizeof path, "%s/flow/%s", dir, model);
    pd_graph *g = NULL;
    pd_session *s = NULL;
    pd_load_options lo = PD_LOAD_OPTIONS_INIT;
    pd_train_options to = PD_TRAIN_OPTIONS_INIT;
    to.loss = PD_LOSS_MSE;
    to.threads = 1;
    pd_status st = pd_graph_load_file(path, &lo, &g);
    CHECK(st == PD_OK, "%s loads: %s", model, st == PD_OK ? "" : pd_last_error());
    if (st == PD_OK) st = pd_session_create(g, &to, &s);
    CHECK(st == PD_OK, "%s: a session: %s", model, st == PD_OK ? "" : pd_last_error());
    static vals v;
    double want_loss = 0;
    pd_step_result r;
    memset(&r, 0, sizeof r);
    bool stepped = false;
    while (fgets(line, sizeof line, f) && strncmp(line, "end", 3)) {
        char name[128], kind[16];
        if (!strncmp(line, "input ", 6) && sscanf(line + 6, "%127s %15s", name, kind) == 2) {
            const char *p = line + 6 + strlen(name) + 1 + strlen(kind) + 1;
            parse_vals(p, &v);
            uint8_t b[MAXV];
            pd_tensor t = {strcmp(kind, "bool") ? PD_FLOAT : PD_BOOL, v.ndim, {0}, v.v};
            memcpy(t.shape, v.shape, sizeof t.shape);
            if (t.dtype == PD_BOOL) {
                for (int i = 0; i < v.n; i++) b[i] = v.v[i] != 0;
                t.data = b;
            }
            if (st == PD_OK) st = pd_session_set_input(s, name, &t);
            CHECK(st == PD_OK, "%s: input %s: %s", model, name, st == PD_OK ? "" : pd_last_error());
        } else if (!strncmp(line, "labels ", 7)) {
            parse_vals(line + 7, &v);
            pd_tensor t = {PD_FLOAT, v.ndim, {0}, v.v};
            memcpy(t.shape, v.shape, sizeof t.shape);
            if (st == PD_OK) st = pd_session_set_labels(s, &t);
            if (st == PD_OK) st = pd_session_step(s, &r);
            stepped = st == PD_OK;
            CHECK(stepped, "%s: one step: %s", model, stepped ? "" : pd_last_error());
        } else if (!strncmp(line, "loss ", 5)) {
            want_loss = strtod(line + 5, NULL);
            CHECK(stepped && fabs(r.loss - want_loss) <= 1e-5 * fabs(want_loss), "%s: loss %.7g (torch %.7g)", model,
                  r.loss, want_loss);
        } else if (!strncmp(line, "grad ", 5) && sscanf(line + 5, "%127s", name) == 1) {
            parse_vals(line + 5 + strlen(name) + 1, &v); /* "- v v ...": no shape */
            bool found = false;
            double err = INFINITY;
            for (int i = 0; stepped && i < pd_session_num_params(s); i++) {
                const char *pn;
                pd_tensor gr;
                if (pd_session_param(s, i, &pn, NULL, &gr) != PD_OK || strcmp(pn, name)) continue;
                found = pd__shape_numel(gr.ndim, gr.shape) == v.n;
                if (found) err = check_rel_err((const float *)gr.data, v.v, v.n);
            }
            CHECK(found && err <= 1e-4, "%s: gradient of %s, %d values, rel err %.2g", model, name, v.n, err);
        }
    }
    pd_session_destroy(s);
    pd_graph_destroy(g);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_flow FIXTURES_DIR\n");
        return 2;
    }
    char path[1024], line[16384];
    snprintf(path, sizeof path, "%s/flow/expected.txt", argv[1]);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "%s opens", path);
    int cases = 0;
    while (f && fgets(line, sizeof line, f)) {
        char model[256];
        if (sscanf(line, "model %255s", model) == 1) {
            run_case(argv[1], f, model);
            cases++;
        }
    }
    if (f) fclose(f);
    CHECK(cases >= 1, "%d cases", cases);
    return check_summary();
}
