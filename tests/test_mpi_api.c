/* test_mpi_api.c - the public trainer under MPI (opt->mpi), driven by
 * tests/test_mpi_api.sh: the same program in one process and under mpirun
 * must print the same per-step results and save the same model, bitwise.
 *
 *   test_mpi_api MODEL PLAN SCHEDULE MICROBATCHES STEPS OUT.onnx MODE [CKPT_DIR]
 *
 * Launched by mpirun (size > 1) it trains with opt->mpi; else in one process.
 * Rank 0 prints each step's loss and gradient norm exactly (%a) and saves
 * OUT. Every process prints the errors it gets as "rank R: error: MESSAGE".
 * MODE: ok; bad-arg (rank 1 alone passes NULL labels to a first call, then
 * other steps to a second: every process must get each error, then train
 * on as in ok); nan (step 3's rows
 * are NaN: the last stage's loss fails mid-run, every process must return
 * an error; exit 3 without finalizing, as a program would end the job);
 * fail (the test sets PDONNX_TEST_FAIL: one stage's instruction fails
 * mid-run; every process must get the error, then destroy, finalize and
 * exit 1: the job ends cleanly, no MPI_Abort);
 * ckpt (checkpoints into CKPT_DIR every 10 steps, all kept); ckpt-auto
 * (the same with PD_CHECKPOINT_AUTO: the interval agreed); resume
 * (pd_trainer_resume from CKPT_DIR first, prints "resumed at step S", then
 * repeats the call the checkpoint was taken in: the steps after S print);
 * lazy (the graph loaded with lazy_weights, an external-data model: each
 * process holds its stages' weights only; pd_trainer_save writes the model,
 * every process its stages' files; then, after pd_trainer_destroy,
 * pd_graph_save on rank 0 prints "rank 0: refused: MESSAGE" under MPI, and
 * pd_session_create "rank 0: session refused: MESSAGE").
 * PD_TEST_DEVICE (cuda, cuda:N) trains on the GPU: the plan's stages name
 * their devices (tests/test_nccl_pipe.sh, messages over NCCL).
 */
#include <pipedream.h>

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc < 8) {
        fprintf(stderr, "usage: test_mpi_api MODEL PLAN SCHEDULE MICROBATCHES STEPS OUT MODE\n");
        return 2;
    }
    const char *model = argv[1], *planf = argv[2], *sched = argv[3], *out = argv[6], *mode = argv[7];
    int M = atoi(argv[4]), steps = atoi(argv[5]);
    int rank = 0, size = 1;
    const char *launched = getenv("OMPI_COMM_WORLD_SIZE");
    if (launched && atoi(launched) > 1 && pd_mpi_init(&rank, &size) != PD_OK) {
        printf("rank ?: error: %s\n", pd_last_error());
        return strstr(pd_last_error(), "without MPI") ? 77 : 1;
    }
    pd_load_options lo = PD_LOAD_OPTIONS_INIT;
    lo.batch = 8;
    bool lazy = !strcmp(mode, "lazy");
    lo.lazy_weights = lazy;
    pd_graph *g = NULL;
    pd_plan *plan = NULL;
    pd_trainer *t = NULL;
    pd_status st = pd_graph_load_file(model, &lo, &g);
    if (st == PD_OK) st = pd_plan_load(planf, &plan);
    pd_train_options tr = PD_TRAIN_OPTIONS_INIT;
    tr.optimizer = PD_OPT_MOMENTUM;
    tr.lr = 0.05;
    tr.threads = 1;
    pd_trainer_options to = PD_TRAINER_OPTIONS_INIT;
    to.train = &tr;
    to.schedule = sched;
    to.microbatches = M;
    to.mpi = size > 1;
    bool ck = !strcmp(mode, "ckpt") || !strcmp(mode, "resume") || !strcmp(mode, "ckpt-auto");
    if (ck && argc > 8) {
        to.checkpoint_dir = argv[8];
        to.checkpoint_every = !strcmp(mode, "ckpt-auto") ? PD_CHECKPOINT_AUTO : 10;
        to.checkpoint_keep = 0;
    }
    const char *dev = getenv("PD_TEST_DEVICE");
    if (st == PD_OK && dev) st = pd_train_options_set_device(&tr, dev, NULL);
    if (st == PD_OK) st = pd_trainer_create(g, plan, &to, &t);
    int64_t B = st == PD_OK ? pd_trainer_batch(t) : 0, rows = B * steps;
    float *x = calloc((size_t)rows * 64 + 1, sizeof(float));
    int64_t *y = calloc((size_t)rows + 1, sizeof(int64_t));
    pd_step_result *r = calloc((size_t)steps, sizeof *r);
    uint64_t s = 88172645463325252ull;
    for (int64_t i = 0; x && y && i < rows; i++) {
        y[i] = (i * 7) % 10;
        for (int j = 0; j < 64; j++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            x[i * 64 + j] = (j % 10 == y[i] ? 1.0f : 0.0f) + (float)(s % 1000) / 4000.0f;
            if (!strcmp(mode, "nan") && i / B == 2) x[i * 64 + j] = NAN;
        }
    }
    pd_tensor xt = {PD_FLOAT, 2, {rows, 64}, x}, yt = {PD_INT64, 1, {rows}, y};
    if (st == PD_OK && !strcmp(mode, "bad-arg")) {
        pd_status bad = pd_trainer_train(t, steps, &xt, rank == 1 ? NULL : &yt, r);
        printf("rank %d: error: %s\n", rank, bad != PD_OK ? pd_last_error() : "(none: NOT OK)");
        bad = pd_trainer_train(t, rank == 1 ? steps - 1 : steps, &xt, &yt, r); /* steps that differ */
        printf("rank %d: error: %s\n", rank, bad != PD_OK ? pd_last_error() : "(none: NOT OK)");
    }
    pd_resume_info ri = {0, 0, 0};
    if (st == PD_OK && !strcmp(mode, "resume")) {
        st = pd_trainer_resume(t, argv[8], &ri);
        if (st == PD_OK && rank == 0) printf("resumed at step %lld of a call of %lld steps from %lld\n",
                                             (long long)ri.step, (long long)ri.run_steps, (long long)ri.run_first);
    }
    if (st == PD_OK) st = pd_trainer_train(t, steps, &xt, &yt, r);
    if (st == PD_OK && rank == 0) {
        for (int i = (int)ri.step; i < steps; i++) printf("step %d loss %a grad_norm %a lr %a\n", i + 1, r[i].loss, r[i].grad_norm, r[i].lr);
        if (!lazy) st = pd_graph_save(g, out);
    }
    if (st == PD_OK && lazy) st = pd_trainer_save(t, out); /* collective */
    if (st != PD_OK) printf("rank %d: error: %s\n", rank, pd_last_error());
    fflush(stdout);
    free(x);
    free(y);
    free(r);
    if (st != PD_OK && !strcmp(mode, "nan")) return 3; /* a failed run under MPI: end the job */
    pd_trainer_destroy(t);
    if (st == PD_OK && lazy && size > 1 && rank == 0) {
        char again[4096];
        snprintf(again, sizeof again, "%s.again.onnx", out);
        printf("rank 0: %s: %s\n", pd_graph_save(g, again) != PD_OK ? "refused" : "saved (NOT OK)", pd_last_error());
        pd_session *vs = NULL; /* a session (validation) on it: refused too, not a crash on a missing weight */
        printf("rank 0: session %s: %s\n", pd_session_create(g, &tr, &vs) != PD_OK ? "refused" : "made (NOT OK)",
               pd_last_error());
        pd_session_destroy(vs);
    }
    pd_plan_destroy(plan);
    pd_graph_destroy(g);
    pd_mpi_finalize();
    return st == PD_OK ? 0 : 1;
}
