/* ckpt.h - `pdonnx train`'s resume checks and `pdonnx export` (tools/ckpt.c);
 * when checkpoints are taken, and their writer, are the library's
 * (runtime/ckpt_policy.h). */
#ifndef PD_CLI_CKPT_H
#define PD_CLI_CKPT_H

#include "../runtime/checkpoint.h"
#include "../runtime/ckpt_policy.h"

#include <cjson/cJSON.h>

/* --resume DIR: the newest valid checkpoint (a skipped one is reported on
 * stderr); its info must match `expect` in every field resume depends on,
 * or the error names the field and both values. *info: its info (caller
 * deletes). */
pd_status pd_cli_ckpt_load(const char *dir, const cJSON *expect, pd__ckpt *out, cJSON **info);

int pd_cli_export(int argc, char **argv);

#endif
