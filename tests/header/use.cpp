// use.cpp - a C++ program on the public API; the implementation comes from a
// C translation unit built with PIPEDREAM_IMPLEMENTATION.
#include "pipedream.h"

#include <cstdio>
#include <vector>

int main() {
    std::vector<pd_profile_node_info> nodes(4);
    const double cost[4] = {1, 4, 1, 2};
    for (size_t i = 0; i < nodes.size(); i++) {
        nodes[i] = pd_profile_node_info();
        nodes[i].fwd_ms = cost[i];
        nodes[i].bwd_in_ms = 2 * cost[i];
    }
    const int edges[] = {0, 1, 1, 2, 2, 3};
    pd_profile *p = nullptr;
    pd_plan *plan = nullptr;
    pd_plan_options po = PD_PLAN_OPTIONS_INIT;
    po.workers = 2;
    po.straight = 1;
    po.microbatches = 1;
    if (pd_profile_create(nodes.data(), 4, edges, 3, 1, &p) != PD_OK || pd_plan_create(p, &po, &plan) != PD_OK) {
        std::printf("NOT OK: %s\n", pd_last_error());
        return 1;
    }
    pd_plan_info info;
    // 3, 12, 3, 6: the best cut is {0,1} | {2,3}, a bottleneck of 15 ms
    bool ok = pd_plan_info_get(plan, &info) == PD_OK && info.n_stages == 2 && info.time_ms == 15.0;
    std::printf("%s: %d stages, %.1f ms per minibatch\n", ok ? "OK" : "NOT OK", info.n_stages, info.time_ms);
    pd_plan_destroy(plan);
    pd_profile_destroy(p);
    return ok ? 0 : 1;
}
