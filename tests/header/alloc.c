/* alloc.c - the implementation built with the caller's allocator
 * (PD_MALLOC, PD_CALLOC, PD_REALLOC, PD_FREE): every allocation of a
 * profile -> plan -> simulation round goes through it and is given back. */
#include <stddef.h>

static long live, total;
static void *count_malloc(size_t n);
static void *count_calloc(size_t n, size_t k);
static void *count_realloc(void *p, size_t n);
static void count_free(void *p);
#define PD_MALLOC(sz) count_malloc(sz)
#define PD_CALLOC(n, sz) count_calloc(n, sz)
#define PD_REALLOC(p, sz) count_realloc(p, sz)
#define PD_FREE(p) count_free(p)
#define PIPEDREAM_IMPLEMENTATION
#include "pipedream.h"

#include <stdio.h>
#include <stdlib.h>

static void *count_malloc(size_t n) {
    void *p = malloc(n);
    if (p) live++, total++;
    return p;
}
static void *count_calloc(size_t n, size_t k) {
    void *p = calloc(n, k);
    if (p) live++, total++;
    return p;
}
static void *count_realloc(void *p, size_t n) {
    void *q = realloc(p, n);
    if (q && !p) live++, total++;
    return q;
}
static void count_free(void *p) {
    if (p) live--;
    free(p);
}

int main(void) {
    pd_profile_node_info nodes[3] = {{"a", "", 1, 1, 0, 100, 10, 0}, {"b", "", 2, 2, 0, 100, 10, 0},
                                     {"c", "", 1, 1, 0, 100, 10, 0}};
    int edges[] = {0, 1, 1, 2};
    pd_profile *p = NULL;
    pd_plan *plan = NULL;
    pd_plan_options po = PD_PLAN_OPTIONS_INIT;
    po.workers = 2;
    pd_sim_options so = PD_SIM_OPTIONS_INIT;
    pd_sim_result r;
    if (pd_profile_create(nodes, 3, edges, 2, 1, &p) != PD_OK || pd_plan_create(p, &po, &plan) != PD_OK ||
        pd_simulate(plan, &so, &r) != PD_OK) {
        printf("NOT OK: %s\n", pd_last_error());
        return 1;
    }
    pd_sim_result_free(&r);
    pd_plan_destroy(plan);
    pd_profile_destroy(p);
    if (total == 0 || live != 0) {
        printf("NOT OK: %ld allocations through PD_MALLOC and friends, %ld not freed\n", total, live);
        return 1;
    }
    printf("OK: %ld allocations, all through the caller's allocator and all freed\n", total);
    return 0;
}
