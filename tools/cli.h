/* cli.h - shared helpers of the pdonnx command-line tool. */
#ifndef PD_CLI_H
#define PD_CLI_H

#include "../pipedream.h"

#include <stdbool.h>
#include <stdint.h>

/* Prints "pdonnx: <fmt with arg> (see pdonnx --help)" and returns 2. */
int pd_cli_usage_error(const char *fmt, const char *arg);
/* Parses an integer flag value in [lo, hi]; prints the error and returns false otherwise. */
bool pd_cli_parse_int(const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *out);

/* Prints "pdonnx: <pd_last_error()>" and returns 1. */
int pd_cli_fail(void);
/* Parses a finite number >= lo; prints the error and returns false otherwise. */
bool pd_cli_parse_double(const char *flag, const char *s, double lo, double *out);

/* Under mpirun: rank 0's plan (made with status `made`; a profile measured on
 * each rank would differ) for every rank. On rank 0 *plan is its own; on the
 * others it is replaced by rank 0's. Returns this rank's status (rank 0's
 * failure is every rank's); a broken broadcast ends the job. */
struct pd_plan;
pd_status pd_cli_share_plan(int rank, pd_status made, struct pd_plan **plan);

int pd_cli_conformance(int argc, char **argv);
int pd_cli_train(int argc, char **argv);
int pd_cli_profile(int argc, char **argv);
int pd_cli_plan(int argc, char **argv);
int pd_cli_simulate(int argc, char **argv);
int pd_cli_schedule(int argc, char **argv);

#endif
