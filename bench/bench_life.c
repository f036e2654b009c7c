/* bench_life.c - how long the memory planner (pd__life_pack, runtime/engine.c)
 * takes as graphs grow.
 *
 *   bench_life [--alive] [N]...   default: 10000 100000 300000
 *
 * The engine's case: a chain of N nodes, tensor i produced by node i and read
 * by node i+1 (alive [i, i+1]), sizes varying so the packer's order matters;
 * plus the graph's input and output, alive throughout. --alive: every other
 * tensor is kept to the end instead (as zero-bubble's split backward keeps
 * the gradients for its weight pass), so about N/2 are alive together.
 * Prints one JSON line per case: {"case", "tensors", "ms", "arena_bytes"}. */
#include "../runtime/session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int run(int n, bool alive) {
    pd__life l;
    if (pd__life_init(&l, n + 2) != PD_OK) return 1;
    pd__life_add(&l, 0, -1, n, 4096);
    pd__life_add(&l, 1, -1, n, 4096);
    for (int i = 0; i < n; i++)
        pd__life_add(&l, i + 2, i, alive && i % 2 == 0 ? n : i + 1, (size_t)1024 * (1 + (size_t)(i * 7919) % 64));
    size_t total = 0;
    double t0 = bench_now();
    pd_status st = pd__life_pack(&l, &total);
    double ms = (bench_now() - t0) * 1e3;
    pd__life_free(&l);
    if (st != PD_OK) return 1;
    printf("{\"case\": \"%s\", \"tensors\": %d, \"ms\": %.1f, \"arena_bytes\": %zu}\n", alive ? "alive" : "chain", n + 2,
           ms, total);
    return 0;
}

int main(int argc, char **argv) {
    bool alive = argc > 1 && !strcmp(argv[1], "--alive");
    int first = alive ? 2 : 1;
    if (argc > first) {
        for (int a = first; a < argc; a++)
            if (run(atoi(argv[a]), alive)) return 1;
        return 0;
    }
    int grid[] = {10000, 100000, 300000};
    for (size_t k = 0; k < sizeof grid / sizeof grid[0]; k++)
        if (run(grid[k], alive)) return 1;
    return 0;
}
