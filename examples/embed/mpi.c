/* mpi.c - a pipeline across processes, embedded through pipedream.h.
 *
 * Trains the bundled MLP on a plan read from a file (one process per stage
 * replica), on data made here in memory; every process runs its own stages
 * and gets every step's results, rank 0 prints them and saves the model.
 * Started without mpirun it trains the same plan as threads of one process:
 * the same losses and the same model, bitwise.
 *
 *     cc mpi.c $(pkg-config --cflags --libs pipedream) -o mpi
 *     pdonnx plan ../digits_mlp.onnx --workers 2 --straight --batch 8 -o plan.json
 *     mpirun -np 2 ./mpi ../digits_mlp.onnx plan.json trained.onnx
 */
#include <pipedream.h>

#include <stdint.h>
#include <stdio.h>

#define MICRO 8  /* rows per microbatch: the batch the model is loaded with */
#define MICROS 4 /* microbatches per step */
#define STEPS 20
#define ROWS (STEPS * MICROS * MICRO)

static float x[ROWS * 64];
static int64_t y[ROWS];

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: mpirun -np N mpi MODEL PLAN OUT.onnx\n");
        return 2;
    }
    int rank = 0, size = 1;
    if (pd_mpi_init(&rank, &size) != PD_OK) /* a libpipedream without MPI: one process */
        fprintf(stderr, "mpi: %s: training in one process\n", pd_last_error());
    uint64_t s = 88172645463325252ull; /* every process makes the same data */
    for (int i = 0; i < ROWS; i++) {
        y[i] = i % 10;
        for (int j = 0; j < 64; j++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            x[i * 64 + j] = (j % 10 == y[i] ? 1.0f : 0.0f) + (float)(s % 1000) / 4000.0f;
        }
    }
    pd_load_options lo = PD_LOAD_OPTIONS_INIT;
    lo.batch = MICRO;
    pd_train_options tr = PD_TRAIN_OPTIONS_INIT;
    tr.optimizer = PD_OPT_MOMENTUM;
    tr.lr = 0.05;
    tr.threads = 1;
    pd_trainer_options to = PD_TRAINER_OPTIONS_INIT;
    to.train = &tr;
    to.microbatches = MICROS;
    to.mpi = size > 1; /* under mpirun: this process's stages only */
    pd_graph *g = NULL;
    pd_plan *plan = NULL;
    pd_trainer *t = NULL;
    pd_step_result r[STEPS];
    pd_tensor xt = {PD_FLOAT, 2, {ROWS, 64}, x}, yt = {PD_INT64, 1, {ROWS}, y};
    pd_status st = pd_graph_load_file(argv[1], &lo, &g);
    if (st == PD_OK) st = pd_plan_load(argv[2], &plan);
    if (st == PD_OK) st = pd_trainer_create(g, plan, &to, &t);      /* collective under MPI */
    if (st == PD_OK) st = pd_trainer_train(t, STEPS, &xt, &yt, r); /* collective: every process gets r */
    if (st == PD_OK && rank == 0) {
        for (int i = 0; i < STEPS; i++) printf("step %2d  loss %.9g  grad norm %.9g\n", i + 1, r[i].loss, r[i].grad_norm);
        st = pd_graph_save(g, argv[3]); /* every process's graph holds the whole model */
    }
    if (st != PD_OK) fprintf(stderr, "mpi: rank %d of %d: %s\n", rank, size, pd_last_error());
    pd_trainer_destroy(t);
    pd_plan_destroy(plan);
    pd_graph_destroy(g);
    pd_mpi_finalize(); /* only when pd_mpi_init initialized MPI */
    return st == PD_OK ? 0 : 1;
}
