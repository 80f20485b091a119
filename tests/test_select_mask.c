/* Eligibility property test over every selector kind: for thousands of
 * random cases (sequence length, documents, sinks/tail exclusions, query
 * position, K) every returned slot satisfies select_mask_allows (never the
 * future, never another document, never a sink or tail slot), no slot comes
 * twice, at most K come back; exact, oracle and quest return exactly
 * min(K, #eligible) slots, hence the whole eligible set when K covers it;
 * window returns the most recent eligible slots. The same selectors are reset and reused across
 * cases, as a context does between sequences. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "kv/kv_cache.h"
#include "select/selector.h"
#include "test_util.h"

enum { N_CTX = 1600, D = 8, N_HEAD = 4, N_HEAD_KV = 2, HD = 8, Q_PER_CASE = 4 };
/* sequences (each queried Q_PER_CASE times with fresh masks); ASan/UBSan
 * builds run ~10x slower, so fewer there */
#if defined(__SANITIZE_ADDRESS__)
enum { N_CASES = 600, LONG_EXTRA = 600 };
#else
enum { N_CASES = 1500, LONG_EXTRA = 1000 };
#endif

typedef struct stats {
    int cases, bad_elig, bad_dup, bad_k, bad_count, bad_order, short_ann, queries;
} stats;

/* one random mask for a query at position t of a sequence of n slots */
static void make_mask(uint64_t *rng, int n, int32_t *seg, int seg_mode, select_mask *m) {
    memset(m, 0, sizeof *m);
    int t = n > 0 ? (int)(rng_next_u64(rng) % (uint64_t)n) : 0;
    int style = (int)(rng_next_u64(rng) % 3);
    m->seg = seg_mode ? seg : NULL;
    if (style == 0 || n == 0) {
        /* as attention builds it: causal prefix, sinks at the document start, tail before t */
        m->n_slots = n > 0 ? t + 1 : 0;
        m->query_seg = m->seg ? seg[t] : 0;
        int doc0 = t;
        while (m->seg && doc0 > 0 && seg[doc0 - 1] == seg[t]) doc0--;
        if (!m->seg) doc0 = 0;
        int n_sink = (int)(rng_next_u64(rng) % 5), n_tail = (int)(rng_next_u64(rng) % 20);
        m->ex0_lo = doc0;
        m->ex0_hi = doc0 + n_sink < t + 1 ? doc0 + n_sink : t + 1;
        m->ex1_lo = t + 1 - n_tail > m->ex0_hi ? t + 1 - n_tail : m->ex0_hi;
        m->ex1_hi = t + 1;
    } else {
        /* anything: n_slots past the appended keys, overlapping or empty ranges */
        m->n_slots = (int)(rng_next_u64(rng) % (uint64_t)(n + 4));
        m->query_seg = (int32_t)(rng_next_u64(rng) % 4);
        m->ex0_lo = (int)(rng_next_u64(rng) % (uint64_t)(n + 10)) - 5;
        m->ex0_hi = m->ex0_lo + (int)(rng_next_u64(rng) % 30) - 3;
        m->ex1_lo = (int)(rng_next_u64(rng) % (uint64_t)(n + 10)) - 5;
        m->ex1_hi = m->ex1_lo + (int)(rng_next_u64(rng) % 300);
    }
}

int main(void) {
    uint64_t rng = rng_seed(2024);
    subq_error err = {0};
    kv_cache kv;
    CHECK(kv_cache_init(&kv, 1, N_HEAD_KV, HD, N_CTX, SUBQ_KV_F16, &err) == SUBQ_OK, "kv: %s", err.msg);
    /* native keys and values of every slot, search keys, query vectors */
    float *kn = malloc((size_t)N_CTX * N_HEAD_KV * HD * sizeof(float));
    float *ks = malloc((size_t)N_CTX * D * sizeof(float));
    for (size_t i = 0; i < (size_t)N_CTX * N_HEAD_KV * HD; i++) kn[i] = rng_normal(&rng);
    for (size_t i = 0; i < (size_t)N_CTX * D; i++) ks[i] = rng_normal(&rng);
    kv_cache_store(&kv, 0, 0, N_CTX, kn, kn, NULL);
    kv.n_used = N_CTX;

    selector_env env = {.kv = &kv, .layer = 0, .n_head = N_HEAD, .n_head_kv = N_HEAD_KV, .head_dim = HD};
    selector *sel[SUBQ_SELECT_COUNT] = {0};
    for (int kind = 0; kind < SUBQ_SELECT_COUNT; kind++) {
        if (!selector_kind_available((subq_selector_kind)kind)) continue;
        selector_params p;
        selector_params_default(&p, (subq_selector_kind)kind, D);
        /* a narrow beam makes the ANN selectors use their graph search (not
         * the small-set scan) on sequences of a few hundred slots */
        p.plan.hnsw_ef_search = 4;
        p.plan.hnsw_m = 8;
        p.plan.quest_page = kind == SUBQ_SELECT_QUEST ? 5 : 16;
        p.plan.search_f16 = 1;
        CHECK(selector_new(&p, &env, &sel[kind], &err) == SUBQ_OK, "%s: %s", selector_kind_name(kind), err.msg);
    }

    int32_t *seg = malloc(N_CTX * sizeof(int32_t)), *out = malloc(N_CTX * sizeof(int32_t));
    int *stamp = calloc(N_CTX, sizeof(int)), stamp_id = 0;
    float q_s[D], q_n[N_HEAD * HD];
    stats st[SUBQ_SELECT_COUNT] = {{0}};
    int bad_append = 0;
    for (int c = 0; c < N_CASES; c++) {
        /* mostly short sequences; every 50th a long one */
        int n = c % 50 == 49 ? 400 + (int)(rng_next_u64(&rng) % LONG_EXTRA) : (int)(rng_next_u64(&rng) % 220);
        int seg_mode = (int)(rng_next_u64(&rng) % 3); /* none, contiguous documents, scattered ids */
        int s_id = 0;
        for (int j = 0; j < n; j++) {
            if (seg_mode == 1 && rng_uniform(&rng) < 0.03f) s_id++;
            seg[j] = seg_mode == 2 ? (int32_t)(rng_next_u64(&rng) % 4) : s_id;
        }
        for (int kind = 0; kind < SUBQ_SELECT_COUNT; kind++) {
            if (!sel[kind]) continue;
            selector_reset(sel[kind]);
            for (int at = 0; at < n;) {
                int chunk = 1 + (int)(rng_next_u64(&rng) % 64);
                if (chunk > n - at) chunk = n - at;
                bad_append += selector_append(sel[kind], ks + (size_t)at * D, chunk, at, &err) != SUBQ_OK;
                at += chunk;
            }
        }
        for (int qi = 0; qi < Q_PER_CASE; qi++) {
            select_mask m;
            make_mask(&rng, n, seg, seg_mode, &m);
            int k = qi % 2 ? 1 + (int)(rng_next_u64(&rng) % 8) : 1 + (int)(rng_next_u64(&rng) % 400);
            for (int i = 0; i < D; i++) q_s[i] = rng_normal(&rng);
            for (int i = 0; i < N_HEAD * HD; i++) q_n[i] = rng_normal(&rng);
            int n_elig = 0;
            for (int j = 0; j < n; j++) n_elig += select_mask_allows(&m, j);
            int want = k < n_elig ? k : n_elig;
            for (int kind = 0; kind < SUBQ_SELECT_COUNT; kind++) {
                if (!sel[kind]) continue;
                stats *x = &st[kind];
                int got = selector_query(sel[kind], q_s, q_n, k, &m, out);
                x->queries++;
                x->bad_k += got < 0 || got > k;
                stamp_id++;
                for (int i = 0; i < got && i <= k; i++) {
                    int j = out[i];
                    int ok = j >= 0 && j < n && select_mask_allows(&m, j);
                    x->bad_elig += !ok;
                    if (j >= 0 && j < N_CTX) {
                        x->bad_dup += stamp[j] == stamp_id;
                        stamp[j] = stamp_id;
                    }
                }
                if (selector_kind_is_ann(kind)) x->short_ann += got < want;
                else x->bad_count += got != want;
                if (kind == SUBQ_SELECT_WINDOW) /* the most recent eligible slots, newest first */
                    for (int j = (m.n_slots < n ? m.n_slots : n) - 1, i = 0; j >= 0 && i < got; j--)
                        if (select_mask_allows(&m, j)) x->bad_order += out[i++] != j;
            }
        }
    }
    CHECK(bad_append == 0, "%d appends failed (last: %s)", bad_append, err.msg);
    for (int kind = 0; kind < SUBQ_SELECT_COUNT; kind++) {
        if (!sel[kind]) continue;
        const stats *x = &st[kind];
        const char *name = selector_kind_name(kind);
        printf("%-7s %d queries: %d ineligible, %d duplicates, %d over K, %d wrong counts, %d short (ANN)\n", name,
               x->queries, x->bad_elig, x->bad_dup, x->bad_k, x->bad_count, x->short_ann);
        CHECK(x->bad_elig == 0, "%s returned %d ineligible slots", name, x->bad_elig);
        CHECK(x->bad_dup == 0, "%s returned %d duplicate slots", name, x->bad_dup);
        CHECK(x->bad_k == 0, "%s returned more than K %d times", name, x->bad_k);
        CHECK(x->bad_count == 0, "%s returned the wrong count %d times", name, x->bad_count);
        CHECK(x->bad_order == 0, "%s: %d slots are not the most recent eligible ones", name, x->bad_order);
        /* ANN may fall short only rarely (the filtered search walks through
         * ineligible nodes, then retries with a 4x wider beam) */
        CHECK(x->short_ann * 100 <= x->queries, "%s fell short of min(K, eligible) in %d of %d queries", name,
              x->short_ann, x->queries);
        selector_free(sel[kind]);
    }
    kv_cache_free(&kv);
    free(kn);
    free(ks);
    free(seg);
    free(out);
    free(stamp);
    return test_summary();
}
