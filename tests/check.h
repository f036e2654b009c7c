/* check.h - the tiny assertion harness of the C test programs: each check
 * prints "OK name" or "NOT OK name: why"; main returns check_summary(). */
#ifndef PD_CHECK_H
#define PD_CHECK_H

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

static inline int check_summary(void) {
    printf("%d passed, %d failed\n", check_count - check_failures, check_failures);
    return check_failures ? 1 : 0;
}

#endif
