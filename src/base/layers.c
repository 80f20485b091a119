#include "base/layers.h"

#include <string.h>

#include "base/error.h"

/* one signed integer at *s; advances *s. 0 if none */
static int parse_signed(const char **s, long *v) {
    const char *p = *s;
    int neg = 0;
    if (*p == '-') {
        neg = 1;
        p++;
    }
    if (*p < '0' || *p > '9') return 0;
    long x = 0;
    while (*p >= '0' && *p <= '9') {
        x = x * 10 + (*p - '0');
        if (x > 1000000) return 0;
        p++;
    }
    *v = neg ? -x : x;
    *s = p;
    return 1;
}

subq_status layers_parse(const char *s, int n_layer, unsigned char *mask, subq_error *err) {
    memset(mask, 0, (size_t)n_layer);
    if (!strcmp(s, "all")) {
        memset(mask, 1, (size_t)n_layer);
        return SUBQ_OK;
    }
    if (!strcmp(s, "none") || !*s) return SUBQ_OK;
    const char *p = s;
    for (;;) {
        long a, b;
        if (!parse_signed(&p, &a))
            return subq_fail(err, SUBQ_ERR_ARG, "bad layer list '%s': expected 'all', 'none' or e.g. '1,3,5-7,-1'", s);
        b = a;
        if (*p == '-') {
            p++;
            if (!parse_signed(&p, &b))
                return subq_fail(err, SUBQ_ERR_ARG, "bad layer range in '%s': expected e.g. '5-7' or '2--1'", s);
        }
        if (a < 0) a += n_layer;
        if (b < 0) b += n_layer;
        if (a < 0 || b < 0 || a >= n_layer || b >= n_layer || a > b)
            return subq_fail(err, SUBQ_ERR_ARG, "layer list '%s' names layers outside 0..%d (or an empty range)", s,
                             n_layer - 1);
        for (long l = a; l <= b; l++) mask[l] = 1;
        if (*p == '\0') break;
        if (*p != ',')
            return subq_fail(err, SUBQ_ERR_ARG, "bad layer list '%s': unexpected '%c'", s, *p);
        p++;
    }
    return SUBQ_OK;
}
