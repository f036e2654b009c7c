/* flags.c - the command line's flags from a table (cli.h, pd_flag): one row
 * per flag with its name, kind, destination and help, so a command's parser
 * is its table and `pdonnx CMD --help` prints that same table. */
#include "cli.h"

#include <stdio.h>
#include <string.h>

static const pd_flag *pd__flag_find(const pd_flag *t, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(t[i].name, name)) return &t[i];
    return NULL;
}

/* the values a flag takes: 0 for a switch */
static int pd__flag_arity(const pd_flag *f) {
    if (f->kind == PD_FLAG_SET || f->kind == PD_FLAG_CLEAR) return 0;
    return f->kind == PD_FLAG_FN ? f->nvalues : 1;
}

static int pd__flag_set(const char *cmd, const pd_flag *f, void *ctx, char **v) {
    int64_t n;
    switch (f->kind) {
    case PD_FLAG_SET: *(bool *)f->dst = true; return 0;
    case PD_FLAG_CLEAR: *(bool *)f->dst = false; return 0;
    case PD_FLAG_STR: *(const char **)f->dst = v[0]; return 0;
    case PD_FLAG_INT: return pd_cli_parse_int(f->name, v[0], f->lo, f->hi, (int64_t *)f->dst) ? 0 : 2;
    case PD_FLAG_INT32:
        if (!pd_cli_parse_int(f->name, v[0], f->lo, f->hi, &n)) return 2;
        *(int *)f->dst = (int)n;
        return 0;
    case PD_FLAG_DOUBLE: return pd_cli_parse_double(f->name, v[0], f->min, (double *)f->dst) ? 0 : 2;
    case PD_FLAG_FN: return f->fn(f->dst ? f->dst : ctx, cmd, f, v); /* dst: the flag's own context */
    case PD_FLAG_CHOICE: {
        /* metavar lists the choices, '|'-separated, in the order of their values */
        const char *c = f->metavar;
        for (int k = 0; c && *c; k++) {
            size_t len = strcspn(c, "|");
            if (strlen(v[0]) == len && !strncmp(c, v[0], len)) return *(int *)f->dst = k, 0;
            c += len + (c[len] == '|');
        }
        char msg[256];
        snprintf(msg, sizeof msg, "%s: %s must be one of %s, not '%s'", cmd, f->name, f->metavar, v[0]);
        return pd_cli_usage_error("%s", msg);
    }
    }
    return 2;
}

int pd_cli_flags(const char *cmd, const pd_flag *t, int n, void *ctx, int argc, char **argv, const char **pos,
                 int npos) {
    char msg[256];
    int got = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        bool dash = a[0] == '-' && a[1]; /* "-" alone is an argument (standard input) */
        const pd_flag *f = dash ? pd__flag_find(t, n, a) : NULL;
        if (!f && dash) {
            snprintf(msg, sizeof msg, "%s: unknown flag '%s'", cmd, a);
            return pd_cli_usage_error("%s", msg);
        }
        if (!f) {
            if (got == npos) {
                snprintf(msg, sizeof msg, "%s: unexpected argument '%s'", cmd, a);
                return pd_cli_usage_error("%s", msg);
            }
            pos[got++] = a;
            continue;
        }
        int k = pd__flag_arity(f);
        if (i + k >= argc) {
            if (k == 1) snprintf(msg, sizeof msg, "%s: %s needs a value", cmd, a);
            else snprintf(msg, sizeof msg, "%s: %s needs %s", cmd, a, f->metavar);
            return pd_cli_usage_error("%s", msg);
        }
        int rc = pd__flag_set(cmd, f, ctx, argv + i + 1);
        if (rc != 0) return rc;
        i += k;
    }
    return 0;
}

bool pd_cli_wants_help(int argc, char **argv) {
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return true;
    return false;
}

int pd_cli_help(const char *usage, const pd_flag *t, int n) {
    printf("usage: %s\n\n", usage);
    pd_cli_flags_help(stdout, t, n);
    return 0;
}

void pd_cli_flags_help(FILE *out, const pd_flag *t, int n) {
    for (int i = 0; i < n; i++) {
        char head[64];
        snprintf(head, sizeof head, "%s%s%s", t[i].name, pd__flag_arity(&t[i]) ? " " : "",
                 pd__flag_arity(&t[i]) ? (t[i].metavar ? t[i].metavar : "VALUE") : "");
        fprintf(out, "  %-28s %s\n", head, t[i].help);
    }
}
