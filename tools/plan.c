/* plan.c - placeholder while being written this session. */
#include "cli.h"
int pd_cli_plan(int argc, char **argv) {
    (void)argc;
    (void)argv;
    return pd_cli_usage_error("plan: %s", "not built yet");
}
