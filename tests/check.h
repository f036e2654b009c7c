/* check.h - the tiny assertion harness of the C test programs: each check
 * prints "OK name" or "NOT OK name: why"; main returns check_summary(). */
#ifndef PD_CHECK_H
#define PD_CHECK_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>

static int check_failures, check_count;

#define CHECK(cond, ...)                                   \
    do {                                                   \
        check_count++;                                     \
        if (cond) {                                        \
            printf("OK ");                                 \
            printf(__VA_ARGS__);                           \
            printf("\n");                                  \
        } else {                                           \
            check_failures++;                              \
            printf("NOT OK ");                             \
            printf(__VA_ARGS__);                           \
            printf("  [%s:%d: %s]\n", __FILE__, __LINE__, #cond); \
        }                                                  \
    } while (0)

/* The largest |got - want| / (|want| + mean |want|) over n values: each
 * element held to its own size plus the tensor's mean, so values near zero
 * are judged on the tensor's scale; NaN counts as worst. */
static inline double check_rel_err(const float *got, const float *want, int64_t n) {
    double scale = 0, worst = 0;
    for (int64_t i = 0; i < n; i++) scale += fabs(want[i]);
    scale = n ? scale / (double)n : 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]) / (fabs(want[i]) + scale + 1e-12);
        if (!(e <= worst)) worst = e;
    }
    return worst;
}

static inline int check_summary(void) {
    printf("%d passed, %d failed\n", check_count - check_failures, check_failures);
    return check_failures ? 1 : 0;
}

#endif
