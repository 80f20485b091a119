/* Selector speed and recall on synthetic search keys: per layer-query time,
 * bytes read per query, and recall@K against the exact f32 scan, for the
 * exact selector's scans (full f32 / f16, int8 / int4 codes re-ranked on f32
 * or f16 keys) and the ANN indexes (hnsw over f32 / f16 keys, faiss), at
 * each context length. Each query masks sinks and tail as decode does.
 *
 *   cmake --build build --target bench_select
 *   ./build/bench_select [-n 32768,131072] [-d 128] [-k 128] [-q 200] [-t 2] [-l 8] [-g 1]
 *                        [--data gauss|clustered] [--only NAME,...] [--m 32] [--ef 64] [--efc 40]
 *
 * Keys: "gauss" are N(0, 1) rows, a graph index's hardest case; "clustered"
 * are 256 Gaussian centres plus noise of the same norm, closer to trained
 * search keys, as `subq bench` fills its indexes (subq_context_fill_synthetic). Queries are drawn
 * the same way. Each configuration holds -l selectors over the same keys
 * (layers) queried in turn, so that as in decode a query finds the keys in
 * DRAM, not in the cache the previous query left them in. Times are the
 * median of the per-query times (the machine is shared); exact scans use -t
 * threads as decode does. With -g G > 1 the queries go in groups of G under
 * one mask (selector_query_group: a KV head's query search heads), and the
 * time per query is the group's divided by G; recall is against each
 * query's own exact f32 scan. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/pool.h"
#include "base/rng.h"
#include "base/timer.h"
#include "select/selector.h"

#define MAX_N 8

typedef struct config {
    const char *name;
    subq_selector_kind kind;
    subq_scan scan;
    int f16;
} config;

static const config configs[] = {
    {"exact-f32", SUBQ_SELECT_EXACT, SUBQ_SCAN_FULL, 0},  {"exact-f16", SUBQ_SELECT_EXACT, SUBQ_SCAN_FULL, 1},
    {"int8-f32", SUBQ_SELECT_EXACT, SUBQ_SCAN_INT8, 0},   {"int8-f16", SUBQ_SELECT_EXACT, SUBQ_SCAN_INT8, 1},
    {"int4-f32", SUBQ_SELECT_EXACT, SUBQ_SCAN_INT4, 0},   {"int4-f16", SUBQ_SELECT_EXACT, SUBQ_SCAN_INT4, 1},
    {"hnsw-f32", SUBQ_SELECT_HNSW, SUBQ_SCAN_FULL, 0},    {"hnsw-f16", SUBQ_SELECT_HNSW, SUBQ_SCAN_FULL, 1},
    {"faiss", SUBQ_SELECT_FAISS, SUBQ_SCAN_FULL, 0},
};
#define N_CONFIGS (int)(sizeof configs / sizeof configs[0])

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void make_rows(float *x, int n, int d, int clustered, const float *centres, uint64_t *rng) {
    for (int i = 0; i < n; i++) {
        const float *c = clustered ? centres + (size_t)(rng_next_u64(rng) % 256) * d : NULL;
        for (int j = 0; j < d; j++) x[(size_t)i * d + j] = (c ? c[j] : 0.0f) + rng_normal(rng);
    }
}

static int in_list(const char *list, const char *name) {
    if (!list) return 1;
    size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)); p += n)
        if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == '\0')) return 1;
    return 0;
}

int main(int argc, char **argv) {
    int ns[MAX_N] = {32768, 131072}, n_n = 2, d = 128, k = 128, n_q = 200, threads = 2, n_l = 8;
    int m = 32, ef = 64, efc = 40;
    int clustered = 0, group = 1;
    const char *only = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "-n")) {
            n_n = 0;
            for (char *p = (char *)v; *p && n_n < MAX_N; p += *p == ',') ns[n_n++] = (int)strtol(p, &p, 10);
        } else if (!strcmp(a, "-d")) d = atoi(v);
        else if (!strcmp(a, "-k")) k = atoi(v);
        else if (!strcmp(a, "-q")) n_q = atoi(v);
        else if (!strcmp(a, "-t")) threads = atoi(v);
        else if (!strcmp(a, "-l")) n_l = atoi(v) < 1 ? 1 : atoi(v) > 64 ? 64 : atoi(v);
        else if (!strcmp(a, "-g")) group = atoi(v) < 1 ? 1 : atoi(v) > 64 ? 64 : atoi(v);
        else if (!strcmp(a, "--m")) m = atoi(v);
        else if (!strcmp(a, "--ef")) ef = atoi(v);
        else if (!strcmp(a, "--efc")) efc = atoi(v);
        else if (!strcmp(a, "--data")) clustered = !strcmp(v, "clustered");
        else if (!strcmp(a, "--only")) only = v;
        else {
            fprintf(stderr, "bench_select: unknown option %s (see the comment at the top of bench/bench_select.c)\n", a);
            return 1;
        }
    }
    int n_max = 0;
    for (int i = 0; i < n_n; i++) n_max = ns[i] > n_max ? ns[i] : n_max;
    /* the decode threads a context lends its selectors: long scans split across them */
    pool *threads_pool = NULL;
    subq_error perr = {0};
    if (pool_new(threads, &threads_pool, &perr)) {
        fprintf(stderr, "%s\n", perr.msg);
        return 1;
    }
    const selector_env env = {.pool = threads_pool};
    uint64_t rng = rng_seed(3);
    float *centres = malloc((size_t)256 * d * sizeof(float));
    float *keys = malloc((size_t)n_max * d * sizeof(float)), *qs = malloc((size_t)n_q * d * sizeof(float));
    n_q = (n_q + group - 1) / group * group; /* whole groups */
    int32_t *ref = malloc((size_t)n_q * k * sizeof(int32_t)), *out = malloc((size_t)group * k * sizeof(int32_t));
    int *got = malloc((size_t)group * sizeof(int));
    double *t = malloc((size_t)n_q * sizeof(double));
    if (!centres || !keys || !qs || !ref || !out || !got || !t) return 1;
    for (int i = 0; i < 256 * d; i++) centres[i] = rng_normal(&rng);
    make_rows(keys, n_max, d, clustered, centres, &rng);
    make_rows(qs, n_q, d, clustered, centres, &rng);
    printf("# %s keys, d %d, K %d, %d queries over %d layers in groups of %d, %d threads (exact scans), hnsw M %d "
           "efConstruction %d efSearch %d; sink 4, tail 16\n",
           clustered ? "clustered" : "gauss", d, k, n_q, n_l, group, threads, m, efc, ef);
    printf("%8s %-10s %9s %11s %10s %9s %10s\n", "n", "selector", "ms/query", "KB read/q", "recall@K", "insert us", "MiB");
    for (int ni = 0; ni < n_n; ni++) {
        const int n = ns[ni];
        /* ranges alone, as decode's masks (documents are runs of slots) */
        select_mask mask = {.n_slots = n, .ex0_lo = 0, .ex0_hi = 4, .ex1_lo = n - 16, .ex1_hi = n};
        for (int ci = 0; ci < N_CONFIGS; ci++) {
            const config *cf = &configs[ci];
            if (ci > 0 && !in_list(only, cf->name)) continue; /* exact-f32 always: the reference */
            if (!selector_kind_available(cf->kind)) continue;
            selector_params p;
            selector_params_default(&p, cf->kind, d);
            p.plan.scan = cf->scan;
            p.plan.search_f16 = cf->f16;
            p.n_threads = threads;
            p.plan.hnsw_m = m;
            p.plan.hnsw_ef_search = ef;
            p.plan.hnsw_ef_construction = efc;
            selector *sl[64];
            subq_error err = {0};
            double t0 = time_now_s();
            for (int l = 0; l < n_l; l++) {
                if (selector_new(&p, &env, &sl[l], &err)) {
                    fprintf(stderr, "%s: %s\n", cf->name, err.msg);
                    return 1;
                }
                for (int at = 0; at < n; at += 1024)
                    if (selector_append(sl[l], keys + (size_t)at * d, n - at < 1024 ? n - at : 1024, at, &err)) {
                        fprintf(stderr, "%s: %s\n", cf->name, err.msg);
                        return 1;
                    }
            }
            double t_ins = (time_now_s() - t0) / n_l;
            uint64_t b0 = 0;
            for (int l = 0; l < n_l; l++) b0 += sl[l]->stats.bytes_read;
            double hit = 0;
            const int n_g = n_q / group;
            for (int q0 = 0; q0 < n_q; q0 += group) {
                t0 = time_now_s();
                if (group == 1)
                    got[0] = selector_query(sl[q0 % n_l], qs + (size_t)q0 * d, NULL, k, &mask, out);
                else if (selector_query_group(sl[(q0 / group) % n_l], group, qs + (size_t)q0 * d, NULL, k, &mask, out,
                                              got))
                    return 1;
                t[q0 / group] = (time_now_s() - t0) / group;
                for (int x = 0; x < group; x++) {
                    const int q = q0 + x;
                    const int32_t *o = out + (size_t)x * k;
                    if (ci == 0) memcpy(ref + (size_t)q * k, o, (size_t)k * sizeof(int32_t));
                    for (int i = 0; i < got[x]; i++)
                        for (int j = 0; j < k; j++) hit += o[i] == ref[(size_t)q * k + j];
                }
            }
            uint64_t b1 = 0;
            for (int l = 0; l < n_l; l++) b1 += sl[l]->stats.bytes_read;
            qsort(t, (size_t)n_g, sizeof(double), cmp_double);
            printf("%8d %-10s %9.3f %11.1f %10.4f %9.2f %10.1f\n", n, cf->name, 1e3 * t[n_g / 2],
                   (double)(b1 - b0) / n_q / 1024.0, hit / ((double)n_q * k), 1e6 * t_ins / n,
                   sl[0]->stats.bytes / 1048576.0);
            fflush(stdout);
            for (int l = 0; l < n_l; l++) selector_free(sl[l]);
        }
    }
    pool_free(threads_pool);
    free(centres);
    free(keys);
    free(qs);
    free(ref);
    free(out);
    free(got);
    free(t);
    return 0;
}
