/* cli.h - shared helpers of the pdonnx command-line tool. */
#ifndef PD_CLI_H
#define PD_CLI_H

#include "../pipedream.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdint.h>

/* Digits after the point that print a throughput to three figures at least
 * (6612, 41.3, 2.65 samples/s): a large model's rate is not rounded away. */
static inline int pd_cli_rate_digits(double r) { return r >= 100 ? 0 : r >= 10 ? 1 : 2; }

/* Prints "pdonnx: <fmt with arg> (see pdonnx --help)" and returns 2. */
int pd_cli_usage_error(const char *fmt, const char *arg);
/* Parses an integer flag value in [lo, hi]; prints the error and returns false otherwise. */
bool pd_cli_parse_int(const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *out);

/* A command's flags as a table (tools/flags.c): one row per flag, which both
 * parses and prints `--help`. */
typedef enum pd_flag_kind {
    PD_FLAG_SET,    /* a switch: *(bool *)dst = true */
    PD_FLAG_CLEAR,  /* a switch: *(bool *)dst = false */
    PD_FLAG_STR,    /* *(const char **)dst = the value */
    PD_FLAG_INT,    /* *(int64_t *)dst, in [lo, hi] */
    PD_FLAG_INT32,  /* *(int *)dst, in [lo, hi] */
    PD_FLAG_DOUBLE, /* *(double *)dst, finite and >= min */
    PD_FLAG_FN,     /* fn(dst, or the parser's ctx, cmd, flag, values): nvalues values; 0, or a usage error's exit code */
    PD_FLAG_CHOICE  /* *(int *)dst (an enum) = the value's index in metavar's "a|b|c" */
} pd_flag_kind;

typedef struct pd_flag {
    const char *name;
    pd_flag_kind kind;
    void *dst;
    int64_t lo, hi;
    double min;
    const char *metavar; /* the value(s) in --help and in "needs ..." */
    const char *help;
    int (*fn)(void *ctx, const char *cmd, const struct pd_flag *f, char **values);
    int nvalues;
} pd_flag;

/* Parses argv by the table (flags anywhere; up to npos other arguments into
 * pos, in order). 0, or 2 after printing a usage error naming the flag. */
int pd_cli_flags(const char *cmd, const pd_flag *t, int n, void *ctx, int argc, char **argv, const char **pos,
                 int npos);
/* --help or -h among the arguments */
bool pd_cli_wants_help(int argc, char **argv);
/* Prints "usage: <usage>" and the table's help; returns 0. */
int pd_cli_help(const char *usage, const pd_flag *t, int n);
/* One line per flag: its name, value and help. */
void pd_cli_flags_help(FILE *out, const pd_flag *t, int n);

/* pd_last_error() with the option fields it names (opt->cost_model) shown
 * as the flags that set them (--cost-model). */
const char *pd_cli_error(void);
/* Prints "pdonnx: <pd_cli_error()>" and returns 1. */
int pd_cli_fail(void);
/* Parses a finite number >= lo; prints the error and returns false otherwise. */
bool pd_cli_parse_double(const char *flag, const char *s, double lo, double *out);

/* Under mpirun: rank 0's plan (made with status `made`; a profile measured on
 * each rank would differ) for every rank. On rank 0 *plan is its own; on the
 * others it is replaced by rank 0's. Returns this rank's status (rank 0's
 * failure is every rank's); a broken broadcast ends the job. */
struct pd_plan;
pd_status pd_cli_share_plan(int rank, pd_status made, struct pd_plan **plan);

/* One worker's simulated time for a step of m microbatches in each of the
 * plan's width pipelines, n = m width microbatches of the plan's rows, run
 * as one call per node (tools/plan.c): n times the stages' compute less the
 * n - 1 extra calls of each node's per-call cost (0 in a plan without
 * them), the planner's single_ms when m is the plan's. *rows gets the
 * step's rows, *extra those extra calls' cost (either may be NULL). */
double pd_cli_one_worker_ms(const struct pd_plan *plan, int m, int64_t *rows, double *extra);
/* The line "microbatches: n calls of b rows per node where one worker makes
 * one of n b: the extra calls cost ... a step" for a plan with per-call
 * costs and n > 1 (n as above); nothing otherwise. */
void pd_cli_print_extra_calls(const struct pd_plan *plan, int m);

int pd_cli_conformance(int argc, char **argv);
int pd_cli_train(int argc, char **argv);
int pd_cli_profile(int argc, char **argv);
int pd_cli_plan(int argc, char **argv);
int pd_cli_simulate(int argc, char **argv);
int pd_cli_schedule(int argc, char **argv);

#endif
