/* profile.c - placeholder while being written this session. */
#include "cli.h"
int pd_cli_profile(int argc, char **argv) {
    (void)argc;
    (void)argv;
    return pd_cli_usage_error("profile: %s", "not built yet");
}
