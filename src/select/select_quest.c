/* quest: Quest-style page selection on native post-RoPE keys.
 *
 * Slots are grouped in pages of P consecutive slots (the last page may be
 * partial). Per page and KV head g we keep the channel-wise max M_g[c] and
 * min m_g[c] of the keys as stored in the cache. A query head h (reading KV
 * head g = g(h)) bounds the score q_h . k of every key in a page by
 *   score_h(page) = sum_c max(q_h[c] M_g[c], q_h[c] m_g[c])
 * (each term bounds q_h[c] k[c] since m <= k <= M). Writing q = q+ + q- (the
 * positive and negative parts), max(q M, q m) = q+ M + q- m: two dots per
 * page.
 *
 * Per head (the default, as in the Quest paper and ann-sparseattention's
 * quest_sweep.py): each query head takes its own best pages and attends its
 * own slot set. Head-mean (quest_headmean): one set per query from the bound
 * of the head-mean q.k,
 *   score(page) = (1/n_head) sum_h score_h(page) = sum_g P_g . M_g + N_g . m_g,
 *   P_g = (1/n_head) sum_{h in g} q_h+,  N_g = (1/n_head) sum_{h in g} q_h-.
 * Both are the same computation over a range of KV heads: all of them with
 * the group sums, or one with one head's parts.
 *
 * Pages holding at least one eligible slot are taken best score first and
 * their eligible slots emitted (best page first, slot order inside a page)
 * until K slots. When the last page taken has more eligible slots than are
 * still needed, its slots are ranked by the exact score the bound is about
 * (q_h . k, or the head-mean q.k) and the best ones kept, so the result never
 * depends on slot order inside a page. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "select/select_internal.h"

typedef struct quest_sel {
    selector base;
    int page, count;
    int pages_cap;          /* pages allocated in mm */
    float *mm;              /* [page][n_head_kv][2][head_dim]: channel max, then channel min */
    float *qpos, *qneg;     /* P_g, N_g: [n_head_kv][head_dim] */
    float *qbar;            /* P_g + N_g: the query the exact rank uses, per KV head */
    float *row;             /* one key decoded to f32 */
    int32_t *pcnt;          /* eligible slots per page (query scratch) */
    int pcnt_cap;
    select_scratch pg;      /* page heap: scores + ids */
    select_scratch sl;      /* last page: slot ids, dots, heap */
    const kernels *K;           /* page bounds: dot_f32 */
} quest_sel;

static size_t page_floats(const selector_env *env) { return (size_t)env->n_head_kv * 2 * env->head_dim; }

static void update_bytes(quest_sel *q) {
    const selector_env *env = &q->base.env;
    q->base.stats.bytes = sizeof *q + (size_t)q->pages_cap * page_floats(env) * sizeof(float) +
                          (3 * (size_t)env->n_head_kv + 1) * env->head_dim * sizeof(float) +
                          (size_t)q->pcnt_cap * sizeof(int32_t) + (q->pg.cap_f + q->sl.cap_f) * sizeof(float) +
                          (q->pg.cap_i + q->sl.cap_i) * sizeof(int32_t);
}

static subq_status quest_append(selector *s, const float *k_search, int n, int slot0, subq_error *err) {
    quest_sel *q = (quest_sel *)s;
    const selector_env *env = &s->env;
    const kv_cache *kv = env->kv;
    const int hd = env->head_dim, nkv = env->n_head_kv, P = q->page;
    subq_status rc = select_check_append(s, q->count, n, slot0, err);
    if (rc) return rc;
    if (slot0 + n > kv->n_ctx)
        return subq_fail(err, SUBQ_ERR_RANGE, "selector quest: slot %d beyond the KV cache (%d slots)", slot0 + n - 1,
                         kv->n_ctx);
    int need = (slot0 + n + P - 1) / P;
    if (need > q->pages_cap) {
        int cap = q->pages_cap ? q->pages_cap : 64;
        while (cap < need) cap *= 2;
        float *mm = realloc(q->mm, (size_t)cap * page_floats(env) * sizeof(float));
        if (!mm) return subq_fail(err, SUBQ_ERR_NOMEM, "selector quest: out of memory for %d pages", cap);
        q->mm = mm;
        q->pages_cap = cap;
    }
    for (int j = slot0; j < slot0 + n; j++) {
        for (int g = 0; g < nkv; g++) {
            const float *k = q->row;
            kv_cache_row_f32(kv, kv_cache_key(kv, env->layer, g, j), q->row);
            float *mx = q->mm + ((size_t)(j / P) * nkv + g) * 2 * hd, *mn = mx + hd;
            if (j % P == 0) { /* first slot of a page starts its bounds */
                memcpy(mx, k, (size_t)hd * sizeof(float));
                memcpy(mn, k, (size_t)hd * sizeof(float));
                continue;
            }
            for (int c = 0; c < hd; c++) {
                mx[c] = k[c] > mx[c] ? k[c] : mx[c];
                mn[c] = k[c] < mn[c] ? k[c] : mn[c];
            }
        }
    }
    q->count += n;
    update_bytes(q);
    return SUBQ_OK;
}

/* P_g, N_g and qbar_g = P_g + N_g of query heads [h0, h1), each weighted w,
 * into the slots of their KV heads (the others are left as they are). */
static void prepare_query(quest_sel *q, const float *q_native, int h0, int h1, float w) {
    const selector_env *env = &q->base.env;
    const int hd = env->head_dim, grp = env->n_head / env->n_head_kv;
    const size_t g0 = (size_t)(h0 / grp) * hd, g1 = (size_t)((h1 - 1) / grp + 1) * hd;
    memset(q->qpos + g0, 0, (g1 - g0) * sizeof(float));
    memset(q->qneg + g0, 0, (g1 - g0) * sizeof(float));
    for (int h = h0; h < h1; h++) {
        float *qp = q->qpos + (size_t)(h / grp) * hd, *qm = q->qneg + (size_t)(h / grp) * hd;
        for (int c = 0; c < hd; c++) {
            float v = q_native[(size_t)h * hd + c] * w;
            if (v > 0.0f) qp[c] += v;
            else qm[c] += v;
        }
    }
    for (size_t i = g0; i < g1; i++) q->qbar[i] = q->qpos[i] + q->qneg[i];
}

/* score(page) = sum_{g in [g0, g1)} P_g . M_g + N_g . m_g */
static float page_score(const quest_sel *q, int p, int g0, int g1) {
    const selector_env *env = &q->base.env;
    const int hd = env->head_dim;
    const float *mx = q->mm + (size_t)p * page_floats(env) + (size_t)g0 * 2 * hd;
    float sc = 0.0f;
    for (int g = g0; g < g1; g++, mx += 2 * hd)
        sc += q->K->dot_f32(q->qpos + (size_t)g * hd, mx, hd) +
              q->K->dot_f32(q->qneg + (size_t)g * hd, mx + hd, hd);
    return sc;
}

float select_quest_page_score(selector *s, const float *q_native, int page) {
    quest_sel *q = (quest_sel *)s;
    if (page < 0 || page * q->page >= q->count) return 0.0f;
    prepare_query(q, q_native, 0, s->env.n_head, 1.0f / (float)s->env.n_head);
    return page_score(q, page, 0, s->env.n_head_kv);
}

/* Best `need` eligible slots of page p by the exact sum_{g in [g0, g1)}
 * qbar_g . k_g, best first (-1: out of memory). */
static int rank_page(quest_sel *q, int p, int n, const select_mask *m, int need, int g0, int g1, int32_t *out) {
    const selector_env *env = &q->base.env;
    const int hd = env->head_dim, P = q->page;
    if (!select_scratch_i(&q->base, &q->sl, 2 * (size_t)P) || !select_scratch_f(&q->base, &q->sl, 3 * (size_t)P))
        return -1;
    int32_t *idx = q->sl.i;
    float *acc = q->sl.f, *tmp = acc + P;
    select_heap h = {.score = tmp + P, .slot = idx + P, .n = 0, .k = need};
    int nb = 0;
    for (int j = p * P; j < p * P + P && j < n; j++)
        if (select_mask_allows(m, j)) idx[nb++] = j;
    for (int i = 0; i < nb; i++) acc[i] = 0.0f;
    for (int g = g0; g < g1; g++) {
        kv_cache_gather_dot(env->kv, env->layer, g, q->qbar + (size_t)g * hd, idx, nb, tmp);
        for (int i = 0; i < nb; i++) acc[i] += tmp[i];
    }
    for (int i = 0; i < nb; i++) select_heap_push(&h, acc[i], idx[i]);
    q->base.stats.n_visited += nb;
    q->base.stats.bytes_read += (uint64_t)nb * (uint64_t)(g1 - g0) * env->kv->row_bytes;
    return select_heap_take(&h, out, NULL);
}

/* Eligible slots per page into q->pcnt (0 when out of memory). */
static int count_eligible(quest_sel *q, const select_mask *m) {
    const int P = q->page, n = q->count, n_pages = (n + P - 1) / P;
    if (n_pages > q->pcnt_cap) {
        int32_t *pc = select_query_realloc(&q->base, q->pcnt, (size_t)n_pages * sizeof(int32_t));
        if (!pc) return 0;
        q->pcnt = pc;
        q->pcnt_cap = n_pages;
    }
    memset(q->pcnt, 0, (size_t)n_pages * sizeof(int32_t));
    int lo[3], hi[3], nr = select_mask_ranges(m, n, lo, hi);
    for (int r = 0; r < nr; r++)
        for (int j = lo[r]; j < hi[r]; j++)
            if (!m->seg || m->seg[j] == m->query_seg) q->pcnt[j / P]++;
    return 1;
}

/* Up to k slots of the best pages by the bound over KV heads [g0, g1) of the
 * prepared query (q->pcnt counted); returns the count, -1 when out of memory. */
static int pick(quest_sel *q, const select_mask *m, int k, int g0, int g1, int32_t *out) {
    selector *s = &q->base;
    const int P = q->page, n = q->count, n_pages = (n + P - 1) / P;
    /* pages with a bounded heap of size k: each page taken holds >= 1 eligible
     * slot, so at most k pages are ever needed */
    int kp = k < n_pages ? k : n_pages;
    if (!select_scratch_f(s, &q->pg, (size_t)kp + (size_t)n_pages) || !select_scratch_i(s, &q->pg, 2 * (size_t)kp))
        return -1;
    float *bound = q->pg.f + kp;
    int64_t scored = 0;
    for (int p = 0; p < n_pages; p++)
        if (q->pcnt[p]) bound[p] = page_score(q, p, g0, g1), scored++;
    s->stats.n_visited += scored;
    s->stats.bytes_read += (uint64_t)scored * (uint64_t)(g1 - g0) * 2 * (uint64_t)s->env.head_dim * sizeof(float);
    /* first a heap of a few more pages than k slots fill when full: if its
     * pages hold k eligible slots, the emission below stops among them (the
     * best pages are the same prefix for any heap size), and sorting up to k
     * pages is spared; else the heap of kp */
    int32_t *pages = q->pg.i + kp;
    int np = 0;
    for (int cap = 2 * ((k + P - 1) / P) + 2 < kp ? 2 * ((k + P - 1) / P) + 2 : kp;; cap = kp) {
        select_heap ph = {.score = q->pg.f, .slot = q->pg.i, .n = 0, .k = cap};
        for (int p = n_pages - 1; p >= 0; p--) /* recent pages first: they tend to bound higher */
            if (q->pcnt[p]) select_heap_push(&ph, bound[p], p);
        np = select_heap_take(&ph, pages, NULL);
        int64_t held = 0;
        for (int i = 0; i < np; i++) held += q->pcnt[pages[i]];
        if (held >= k || cap == kp) break;
    }

    /* emit the eligible slots of the best pages until k */
    int got = 0;
    for (int i = 0; i < np && got < k; i++) {
        int p = pages[i];
        if (q->pcnt[p] > k - got) {
            const int r = rank_page(q, p, n, m, k - got, g0, g1, out + got);
            return r < 0 ? -1 : got + r;
        }
        for (int j = p * P; j < p * P + P && j < n; j++)
            if (select_mask_allows(m, j)) out[got++] = j;
    }
    return got;
}

/* One set per query: the head-mean bound. */
static int quest_query(selector *s, const float *q_search, const float *q_native, int k, const select_mask *m,
                       int32_t *out) {
    quest_sel *q = (quest_sel *)s;
    if (!q_native || q->count == 0) return 0;
    if (!count_eligible(q, m)) return -1;
    prepare_query(q, q_native, 0, s->env.n_head, 1.0f / (float)s->env.n_head);
    int got = pick(q, m, k, 0, s->env.n_head_kv, out);
    update_bytes(q);
    return got;
}

/* One set per query head: head h's own bound over its KV head. */
static int quest_query_heads(selector *s, const float *q_search, const float *q_native, int k, const select_mask *m,
                             int32_t *out, int *n_out) {
    (void)q_search;
    quest_sel *q = (quest_sel *)s;
    const int grp = s->env.n_head / s->env.n_head_kv;
    if (q->count == 0) return 0;
    if (!count_eligible(q, m)) return -1;
    for (int h = 0; h < s->env.n_head; h++) {
        prepare_query(q, q_native, h, h + 1, 1.0f);
        int got = pick(q, m, k, h / grp, h / grp + 1, out + (size_t)h * k);
        if (got < 0) return -1;
        n_out[h] = got;
    }
    update_bytes(q);
    return 0;
}

static void quest_reset(selector *s) { ((quest_sel *)s)->count = 0; }

/* Whole pages below n_keep keep their bounds; the page n_keep falls in is
 * rebuilt from the kept keys in the KV cache (at most page - 1 slots). */
static subq_status quest_truncate(selector *s, int n_keep, subq_error *err) {
    quest_sel *q = (quest_sel *)s;
    subq_status rc = select_check_truncate(s, q->count, n_keep, err);
    if (rc) return rc;
    q->count = n_keep / q->page * q->page;
    return quest_append(s, NULL, n_keep - q->count, q->count, err);
}

static void quest_free(selector *s) {
    quest_sel *q = (quest_sel *)s;
    free(q->mm);
    free(q->qpos);
    free(q->qneg);
    free(q->qbar);
    free(q->row);
    free(q->pcnt);
    select_scratch_free(&q->pg);
    select_scratch_free(&q->sl);
    free(q);
}

static const selector_ops quest_headmean_ops = {quest_append, quest_query, quest_reset, quest_free,
                                                quest_truncate, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                                                NULL, NULL};
static const selector_ops quest_head_ops = {quest_append, quest_query, quest_reset, quest_free,
                                            quest_truncate, NULL, NULL, quest_query_heads, NULL, NULL, NULL, NULL,
                                            NULL, NULL, NULL, NULL};

subq_status select_quest_new(const selector_params *p, const selector_env *env, selector **out, subq_error *err) {
    quest_sel *q = calloc(1, sizeof *q);
    if (!q) return subq_fail(err, SUBQ_ERR_NOMEM, "selector quest: out of memory");
    q->base.ops = p->plan.quest_headmean ? &quest_headmean_ops : &quest_head_ops;
    q->page = p->plan.quest_page;
    q->K = kernels_get();
    size_t qn = (size_t)env->n_head_kv * env->head_dim;
    q->qpos = malloc(qn * sizeof(float));
    q->qneg = malloc(qn * sizeof(float));
    q->qbar = malloc(qn * sizeof(float));
    q->row = malloc((size_t)env->head_dim * sizeof(float));
    if (!q->qpos || !q->qneg || !q->qbar || !q->row) {
        quest_free(&q->base);
        return subq_fail(err, SUBQ_ERR_NOMEM, "selector quest: out of memory");
    }
    q->base.stats.bytes = sizeof *q + (3 * qn + (size_t)env->head_dim) * sizeof(float);
    *out = &q->base;
    return SUBQ_OK;
}
