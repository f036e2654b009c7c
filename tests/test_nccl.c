/* test_nccl.c - the NCCL transport (runtime/comm/nccl.c) between two
 * processes, one GPU each, driven by tests/test_nccl.sh:
 *
 *   test_nccl --devices        prints the CUDA devices visible (0 without a driver)
 *   mpirun -np 2 test_nccl     the checks below; prints OK / NOT OK lines
 *   ... test_nccl --bad-device rank 1 names a device that does not exist: the
 *                              set-up fails on both processes, rank 1 with its
 *                              own error, rank 0 with one naming rank 1
 *   ... test_nccl --fail       rank 1 fails after two of four microbatches
 *                              (a notice by the MPI transport, exit 3): rank 0,
 *                              waiting for gradients that never come, gets an
 *                              error naming rank 1 within seconds, no hang
 *
 * Rank 0 sends four microbatches of activations (device buffers it fills)
 * on link 0, rank 1 receives them in order and checks every value, then
 * sends gradients back the other way; a stage replicated on both
 * processes all-reduces floats in its own communicator and every process
 * all-reduces doubles; the sums are checked exactly (small integers). The
 * NCCL transports watch an MPI transport for failure notices, as the
 * pipeline's do. */
#include "../runtime/comm/transport.h"
#include "../runtime/cuda/cuda.h" /* the NCCL transport, through the CUDA module */

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N 4099 /* floats per message: not a multiple of anything */
#define MBS 4

static int fails;
static void check(bool ok, const char *what) {
    printf("%s %s\n", ok ? "OK" : "NOT OK", what);
    if (!ok) fails++;
}

static float pattern(int rank, int dir, int mb, int i) { return (float)(rank * 100000 + dir * 10000 + mb * 1000 + i % 997); }

static int die(const char *what) {
    fprintf(stderr, "test_nccl: %s: %s\n", what, pd_last_error());
    return 1;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* --bad-device: rank 1's device does not exist. */
static int bad_device(int rank, int dev, pd__transport *m) {
    int rank_of[2] = {0, 1}, two[2] = {0, 1};
    pd__transport *t = NULL;
    pd_status st = pd__cuda_nccl_transport_create(2, rank_of, two, 2, 1, 0, rank == 1 ? 1000 : dev, NULL, m, &t);
    const char *e = pd_last_error();
    if (rank == 1)
        check(st != PD_OK && strstr(e, "rank 1: device 1000") && !strstr(e, "MPI: rank"),
              "a device that does not exist: rank 1's own error names it");
    else
        check(st != PD_OK && strstr(e, "MPI: rank 1 failed: ") && strstr(e, "device 1000"),
              "a device that does not exist on rank 1: rank 0's set-up fails too, naming rank 1");
    printf("rank %d: %s\n", rank, st != PD_OK ? e : "(no error)");
    if (st == PD_OK) t->vt->destroy(t);
    return 0;
}

/* --fail: rank 1 stops after two microbatches, rank 0 waits for gradients. */
static int fail_midway(int rank, int dev, pd__transport *m) {
    int rank_of[2] = {0, 1}, two[2] = {0, 1};
    pd__transport *t = NULL;
    static float h[N];
    bool stop = false;
    if (pd__cuda_nccl_transport_create(2, rank_of, two, 2, 1, 0, dev, NULL, m, &t) != PD_OK)
        return die("create");
    if (rank == 0) {
        for (int mb = 0; mb < MBS; mb++) {
            void *b = t->vt->get(t, 0, 0, sizeof h);
            if (!b || cudaMemset(b, 0, sizeof h) != cudaSuccess) return die("fill");
            if (t->vt->send(t, 0, 1, 0, 0, mb, b, sizeof h, &stop) != PD_OK) return die("send");
        }
        double t0 = now();
        void *b = NULL;
        pd_status st = t->vt->recv(t, 1, 0, 0, 1, 0, sizeof h, &b, &stop); /* never sent */
        const char *e = pd_last_error();
        double took = now() - t0;
        check(st != PD_OK && strstr(e, "MPI: rank 1 failed: ") && strstr(e, "injected failure") && took < 30,
              "a peer that failed mid-run ends the wait for its message, naming it");
        printf("rank 0: after %.1f s: %s\n", took, st != PD_OK ? e : "(no error)");
        t->vt->destroy(t); /* aborted: nothing waited for */
        return 0;
    }
    for (int mb = 0; mb < 2; mb++) {
        void *b = NULL;
        if (t->vt->recv(t, 0, 1, 0, 0, mb, sizeof h, &b, &stop) != PD_OK) return die("recv");
        t->vt->put(t, 0, 0, b);
    }
    m->vt->fail(m, "stage 1, step 1, F of microbatch 2: injected failure"); /* as the pipeline's pd__fail */
    t->vt->fail(t, NULL);
    t->vt->destroy(t);
    fprintf(stderr, "test_nccl: rank 1: injected failure\n");
    return 3;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--devices")) {
        printf("%d\n", pd__cuda_nccl_devices());
        return 0;
    }
    int rank, size;
    if (pd_mpi_init(&rank, &size) != PD_OK) return die("MPI");
    if (size != 2) {
        fprintf(stderr, "test_nccl: run me as mpirun -np 2\n");
        pd_mpi_finalize();
        return 2;
    }
    int ndev = pd__cuda_nccl_devices(), dev = ndev > 0 ? rank % ndev : rank;
    int rank_of[2] = {0, 1}, two[2] = {0, 1}, one[2] = {0, 0};
    pd__transport *m = NULL, *t = NULL, *r = NULL; /* m: the failure notices */
    if (pd__mpi_transport_create(2, rank_of, two, NULL, 2, 1, 8, 0, NULL, &m) != PD_OK) return die("MPI transport");
    if (argc > 1) {
        int rc = !strcmp(argv[1], "--fail") ? fail_midway(rank, dev, m) : bad_device(rank, dev, m);
        m->vt->destroy(m);
        pd_mpi_finalize();
        return rc ? rc : fails ? 1 : 0;
    }
    if (pd__cuda_nccl_transport_create(2, rank_of, two, 2, 1, 0, dev, NULL, m, &t) != PD_OK)
        return die("create");
    static float h[N];
    bool stop = false;
    /* activations 0 -> 1, gradients 1 -> 0; several in flight before any is received */
    for (int dir = 0; dir < 2; dir++) {
        int from = dir, to = 1 - dir;
        bool good = true;
        if (rank == from) {
            for (int mb = 0; mb < MBS; mb++) {
                void *b = t->vt->get(t, 0, dir, sizeof h);
                for (int i = 0; i < N; i++) h[i] = pattern(from, dir, mb, i);
                if (!b || cudaMemcpy(b, h, sizeof h, cudaMemcpyHostToDevice) != cudaSuccess) return die("fill");
                if (t->vt->send(t, from, to, 0, dir, mb, b, sizeof h, &stop) != PD_OK) return die("send");
            }
        } else {
            for (int mb = 0; mb < MBS; mb++) {
                void *b = NULL;
                if (t->vt->recv(t, from, to, 0, dir, mb, sizeof h, &b, &stop) != PD_OK) return die("recv");
                if (pd__cuda_nccl_sync(t) != PD_OK) return die("sync");
                if (cudaMemcpy(h, b, sizeof h, cudaMemcpyDeviceToHost) != cudaSuccess) return die("read");
                for (int i = 0; i < N; i++) good = good && h[i] == pattern(from, dir, mb, i);
                t->vt->put(t, 0, dir, b);
            }
            check(good, dir ? "gradients, 4 microbatches from rank 1 to rank 0, every value, in order"
                            : "activations, 4 microbatches from rank 0 to rank 1, every value, in order");
        }
    }
    if (t->vt->flush(t) != PD_OK) return die("flush");
    /* every process: doubles summed */
    double hd[3] = {rank + 1.0, 10.0 * (rank + 1), 0.5}, *dd = NULL;
    if (cudaMalloc((void **)&dd, sizeof hd) != cudaSuccess) return die("cudaMalloc");
    cudaMemcpy(dd, hd, sizeof hd, cudaMemcpyHostToDevice);
    if (t->vt->allreduce(t, -1, dd, 3, true) != PD_OK || pd__cuda_nccl_sync(t) != PD_OK) return die("allreduce");
    cudaMemcpy(hd, dd, sizeof hd, cudaMemcpyDeviceToHost);
    check(hd[0] == 3 && hd[1] == 30 && hd[2] == 1, "all-reduce of doubles over every process");
    t->vt->destroy(t);
    /* one stage replicated on both processes: its communicator */
    if (pd__cuda_nccl_transport_create(2, rank_of, one, 1, 1, 0, dev, NULL, m, &r) != PD_OK)
        return die("create");
    float *df = NULL;
    for (int i = 0; i < N; i++) h[i] = (float)((rank + 1) * (i % 1000));
    if (cudaMalloc((void **)&df, sizeof h) != cudaSuccess) return die("cudaMalloc");
    cudaMemcpy(df, h, sizeof h, cudaMemcpyHostToDevice);
    if (r->vt->allreduce(r, 0, df, N, false) != PD_OK || pd__cuda_nccl_sync(r) != PD_OK) return die("allreduce");
    cudaMemcpy(h, df, sizeof h, cudaMemcpyDeviceToHost);
    bool good = true;
    for (int i = 0; i < N; i++) good = good && h[i] == (float)(3 * (i % 1000));
    check(good, "all-reduce of a replicated stage's floats in its communicator");
    r->vt->destroy(r);
    cudaFree(df);
    cudaFree(dd);
    m->vt->destroy(m);
    pd_mpi_finalize();
    return fails ? 1 : 0;
}
