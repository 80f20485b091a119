/* Minimal test harness shared by the C unit tests: CHECK counts failures,
 * and every test program ends with "N passed, M failed". */
#ifndef SUBQ_TEST_UTIL_H
#define SUBQ_TEST_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int test_passed, test_failed;

#define CHECK(cond, ...)                                              \
    do {                                                              \
        if (cond) {                                                   \
            test_passed++;                                            \
        } else {                                                      \
            test_failed++;                                            \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);      \
            fprintf(stderr, __VA_ARGS__);                             \
            fprintf(stderr, "\n");                                    \
        }                                                             \
    } while (0)

/* A program that checked nothing fails: it cannot pass vacuously. */
static inline int test_summary(void) {
    printf("%d passed, %d failed\n", test_passed, test_failed);
    if (test_passed + test_failed == 0) fprintf(stderr, "FAIL: no checks ran\n");
    return test_failed || test_passed == 0 ? 1 : 0;
}

/* Path of a file under $SUBQ_SHARED; exits with a failure message when the
 * variable is unset (tests never skip). */
static inline const char *test_shared_path(const char *rel, char *buf, size_t cap) {
    const char *dir = getenv("SUBQ_SHARED");
    if (!dir || !*dir) {
        fprintf(stderr, "FAIL: SUBQ_SHARED is not set (run through ctest / make test)\n");
        printf("0 passed, 1 failed\n");
        exit(1);
    }
    snprintf(buf, cap, "%s/%s", dir, rel);
    return buf;
}

/* The query as the quantised-key scores see it (kernels.h): per block of B
 * values, d = max |x| / 127 and codes x * (1 / d) rounded to nearest even,
 * in float as specified; qv = d * code, and half a step per value in err. */
static inline void test_quantised_query(const float *x, int hd, int B, double *qv, double *err) {
    for (int c0 = 0; c0 < hd; c0 += B) {
        float amax = 0.0f;
        for (int c = c0; c < c0 + B; c++) amax = fmaxf(amax, fabsf(x[c]));
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        for (int c = c0; c < c0 + B; c++) {
            qv[c] = (double)d * nearbyintf(x[c] * id);
            err[c] = d / 2.0;
        }
    }
}

#endif
