/* bench_train.c - times pdonnx training steps (forward, backward, SGD update)
 * of a model, the C side of bench/run_train.sh. One JSON line like
 * bench/torch_train.py:
 *
 *   bench_train MODEL.onnx X.npy --batch B --threads T --iters I --warmup W [--name NAME]
 *               [--device cpu|cuda[:N]] [--precision fp32|tf32|bf16] [--optimizer sgd|momentum|adam]
 *
 * On CUDA each step ends with the loss and gradient norm read back (the
 * session's pd_session_step waits for its stream), so wall-clock step times
 * are GPU step times plus that one round trip.
 *
 * Inputs are X.npy's rows repeated to fill B; labels are fixed pseudo-random
 * classes. The median step time after W warm-up steps is reported.
 */
#include "bench_common.h"
#include "../tools/program_env.h"

int main(int argc, char **argv) {
    pd_program_env(argv);
    bench_args a;
    if (!bench_parse("bench_train", argc, argv, 30, &a)) return 2;
    pd_tensor x, y;
    pd_graph *g;
    pd_session *s;
    pd_load_options lo = PD_LOAD_OPTIONS_INIT;
    lo.batch = a.batch;
    pd_train_options o = PD_TRAIN_OPTIONS_INIT;
    o.loss = PD_LOSS_CROSS_ENTROPY;
    o.threads = a.threads;
    if (!strcmp(a.optimizer, "momentum")) o.optimizer = PD_OPT_MOMENTUM;
    else if (!strcmp(a.optimizer, "adam")) o.optimizer = PD_OPT_ADAM;
    else if (strcmp(a.optimizer, "sgd")) {
        fprintf(stderr, "bench_train: --optimizer %s: sgd, momentum or adam\n", a.optimizer);
        return 2;
    }
    if (pd_train_options_set_device(&o, a.device, a.precision) != PD_OK) goto fail;
    if (bench_input(a.xpath, a.batch, &x) != PD_OK || pd_graph_load_file(a.model, &lo, &g) != PD_OK ||
        pd_session_create(g, &o, &s) != PD_OK)
        goto fail;
    pd_value_info in, out;
    if (pd_graph_input(g, 0, &in) != PD_OK || pd_graph_output(g, 0, &out) != PD_OK) goto fail;
    y.dtype = PD_INT64;
    y.ndim = out.ndim - 1;
    int64_t ny = 1;
    for (int i = 0; i < y.ndim; i++) ny *= (y.shape[i] = out.shape[i]);
    y.data = malloc(sizeof(int64_t) * (size_t)ny);
    for (int64_t i = 0; i < ny; i++) ((int64_t *)y.data)[i] = (i * 7919) % out.shape[out.ndim - 1];
    if (pd_session_set_input(s, in.name, &x) != PD_OK || pd_session_set_labels(s, &y) != PD_OK) goto fail;
    double *t = malloc(sizeof(double) * (size_t)a.iters);
    for (int i = 0; i < a.warmup + a.iters; i++) {
        double t0 = bench_now();
        if (pd_session_step(s, NULL) != PD_OK) goto fail;
        if (i >= a.warmup) t[i - a.warmup] = bench_now() - t0;
    }
    double med = bench_median(t, a.iters);
    printf("{\"model\": \"%s\", \"batch\": %d, \"threads\": %d, \"device\": \"%s\", \"precision\": \"%s\", "
           "\"samples_per_s\": %.1f, \"ms_per_step\": %.4f, \"gomp_spincount\": \"%s\"}\n",
           a.name, a.batch, a.threads, a.device ? a.device : "cpu", a.precision ? a.precision : "fp32", a.batch / med,
           med * 1e3, getenv("GOMP_SPINCOUNT") ? getenv("GOMP_SPINCOUNT") : "");
    free(t);
    free(x.data);
    free(y.data);
    pd_session_destroy(s);
    pd_graph_destroy(g);
    return 0;
fail:
    fprintf(stderr, "bench_train: %s\n", pd_last_error());
    return 1;
}
