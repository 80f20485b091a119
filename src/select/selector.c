/* Selector factory, parameter defaults, kind names and the timed, counted
 * wrappers around each kind's ops. */
#include "select/selector.h"

#include <string.h>

#include "base/error.h"
#include "base/timer.h"
#include "kernels/scan_codes.h"
#include "select/select_internal.h"

#ifdef SUBQ_HAVE_FAISS
#define FAISS_NEW select_faiss_new
#else
#define FAISS_NEW NULL
#endif

/* The kinds: what each needs, and its constructor (NULL: not in this build). */
static const struct kind_info {
    const char *name;
    subq_status (*create)(const selector_params *p, const selector_env *env, selector **out, subq_error *err);
    int needs_search;    /* ranks search vectors: needs projections and d_search */
    int ann;             /* approximate graph index: HNSW parameters, recall measured against exact */
    int native_keys;     /* reads the layer's native keys from the KV cache */
    const char *package; /* the optional dependency, named when the build lacks it */
} kinds[SUBQ_SELECT_COUNT] = {
    [SUBQ_SELECT_EXACT] = {.name = "exact", .create = select_exact_new, .needs_search = 1},
    [SUBQ_SELECT_HNSW] = {.name = "hnsw", .create = select_hnsw_new, .needs_search = 1, .ann = 1},
    [SUBQ_SELECT_FAISS] =
        {.name = "faiss", .create = FAISS_NEW, .needs_search = 1, .ann = 1, .package = "libfaiss-dev"},
    [SUBQ_SELECT_QUEST] = {.name = "quest", .create = select_quest_new, .native_keys = 1},
    [SUBQ_SELECT_ORACLE] = {.name = "oracle", .create = select_oracle_new, .native_keys = 1},
    [SUBQ_SELECT_WINDOW] = {.name = "window", .create = select_window_new},
};

static const struct kind_info *kind_info(subq_selector_kind k) {
    return (int)k >= 0 && k < SUBQ_SELECT_COUNT ? &kinds[k] : NULL;
}

int selector_kind_parse(const char *name) {
    for (int i = 0; name && i < SUBQ_SELECT_COUNT; i++)
        if (!strcmp(name, kinds[i].name)) return i;
    return -1;
}

static const char *const score_names[SUBQ_SCORE_COUNT] = {"cosine", "dot"};
static const char *const scan_names[SUBQ_SCAN_COUNT] = {"full", "int8", "int4", "auto"};

static int parse_name(const char *const *names, int n, const char *name) {
    for (int i = 0; name && i < n; i++)
        if (!strcmp(name, names[i])) return i;
    return -1;
}

int select_score_parse(const char *name) { return parse_name(score_names, SUBQ_SCORE_COUNT, name); }
int select_scan_parse(const char *name) { return parse_name(scan_names, SUBQ_SCAN_COUNT, name); }
const char *select_score_name(subq_score s) { return (int)s >= 0 && s < SUBQ_SCORE_COUNT ? score_names[s] : "?"; }
const char *select_scan_name(subq_scan s) { return (int)s >= 0 && s < SUBQ_SCAN_COUNT ? scan_names[s] : "?"; }

const char *selector_kind_name(subq_selector_kind k) { return kind_info(k) ? kinds[k].name : "?"; }
int selector_kind_available(subq_selector_kind k) { return kind_info(k) && kinds[k].create; }
int selector_kind_needs_search(subq_selector_kind k) { return kind_info(k) && kinds[k].needs_search; }
int selector_kind_is_ann(subq_selector_kind k) { return kind_info(k) && kinds[k].ann; }

/* Codes pay once a scan of the keys costs more than their fixed cost (the
 * re-rank of K + min(3K, 1536) slots and a wider buffer, about 20 us a
 * query): from about 1 MiB of 64-wide keys, 2 MiB of 128-wide f16 ones
 * (bench_select). SELECT_AUTO_CODE_BYTES is 2 MiB so that a 4096-token
 * context of 64-wide f32 keys (1 MiB) still reads its keys: its evals stay
 * batched on the full scan (attn_sparse.c, teacher_batchable). */
int64_t selector_scan_codes_from(const selector_params *p) {
    if (p->plan.selector != SUBQ_SELECT_EXACT || p->plan.scan == SUBQ_SCAN_FULL) return INT64_MAX;
    if (p->plan.scan != SUBQ_SCAN_AUTO) return 0;
    if (p->d_search <= 0 || p->d_search > SCAN_CODES_MAX_D) return INT64_MAX;
    const int64_t row = (int64_t)p->d_search * (p->plan.search_f16 ? 2 : 4);
    return (SELECT_AUTO_CODE_BYTES + row - 1) / row;
}

int selector_params_approximate(const selector_params *p, int64_t n_keys) {
    if (selector_kind_is_ann(p->plan.selector)) return 1;
    if (p->plan.selector != SUBQ_SELECT_EXACT) return 0;
    const int64_t codes_from = selector_scan_codes_from(p);
    return p->plan.search_f16 || (codes_from < INT64_MAX && n_keys >= codes_from);
}

void selector_params_default(selector_params *p, subq_selector_kind kind, int d_search) {
    memset(p, 0, sizeof *p);
    subq_attn_plan *s = &p->plan;
    s->selector = kind;
    s->score = SUBQ_SCORE_COSINE;
    s->scan = SUBQ_SCAN_AUTO;
    s->hnsw_m = 32;
    s->hnsw_ef_construction = 40;
    s->hnsw_ef_search = 64;
    s->quest_page = 16;
    s->oracle = SUBQ_ORACLE_HEADMEAN_DOT;
    s->block_keys = 64;
    s->nprobe = 64;
    s->probe_from = 8192;
    s->group_blocks = 16;
    s->group_probe = 32;
    s->group_from = 131072;
    s->clusters = 2048;
    s->cluster_probe = 96;
    s->cluster_from = 8192;
    s->seed = 100; /* hnswlib's own default level seed */
    p->d_search = d_search;
    p->n_threads = 1;
}

/* Quest and oracle read the layer's native keys from the KV cache. */
static subq_status check_env(const selector_params *p, const selector_env *env, subq_error *err) {
    const char *name = selector_kind_name(p->plan.selector);
    if (!env || !env->kv)
        return subq_fail(err, SUBQ_ERR_ARG, "selector %s needs the KV cache (env->kv)", name);
    const kv_cache *kv = env->kv;
    if (env->layer < 0 || env->layer >= kv->n_layer)
        return subq_fail(err, SUBQ_ERR_ARG, "selector %s: layer %d outside the KV cache's %d layers", name,
                         env->layer, kv->n_layer);
    if (env->n_head_kv != kv->n_head_kv || env->head_dim != kv->head_dim)
        return subq_fail(err, SUBQ_ERR_SHAPE,
                         "selector %s: %d KV heads of %d dims do not match the KV cache's %d x %d", name,
                         env->n_head_kv, env->head_dim, kv->n_head_kv, kv->head_dim);
    if (env->n_head <= 0 || env->n_head_kv <= 0 || env->n_head % env->n_head_kv)
        return subq_fail(err, SUBQ_ERR_SHAPE, "selector %s: %d query heads are not a multiple of %d KV heads", name,
                         env->n_head, env->n_head_kv);
    return SUBQ_OK;
}

subq_status selector_new(const selector_params *params, const selector_env *env, selector **out, subq_error *err) {
    *out = NULL;
    const selector_params *p = params;
    const struct kind_info *ki = kind_info(p->plan.selector);
    if (!ki) return subq_fail(err, SUBQ_ERR_ARG, "unknown selector kind %d", (int)p->plan.selector);
    const char *name = ki->name;
    if (!ki->create)
        return subq_fail(err, SUBQ_ERR_UNSUPPORTED, "selector %s is not in this build (install %s and rebuild)",
                         name, ki->package);
    if ((int)p->plan.score < 0 || p->plan.score >= SUBQ_SCORE_COUNT || (int)p->plan.scan < 0 ||
        p->plan.scan >= SUBQ_SCAN_COUNT)
        return subq_fail(err, SUBQ_ERR_ARG, "selector %s: unknown score %d or scan %d", name, (int)p->plan.score,
                         (int)p->plan.scan);
    if (ki->needs_search && p->d_search <= 0)
        return subq_fail(err, SUBQ_ERR_ARG, "selector %s needs search vectors (d_search %d)", name, p->d_search);
    if (p->plan.selector == SUBQ_SELECT_EXACT && (p->plan.scan == SUBQ_SCAN_INT8 || p->plan.scan == SUBQ_SCAN_INT4) &&
        p->d_search > SCAN_CODES_MAX_D)
        return subq_fail(err, SUBQ_ERR_ARG, "selector exact: an %s scan takes search vectors of at most %d values (got %d)",
                         select_scan_name(p->plan.scan), SCAN_CODES_MAX_D, p->d_search);
    if (ki->ann && (p->plan.hnsw_m < 2 || p->plan.hnsw_m > 1024 || p->plan.hnsw_ef_construction <= 0 ||
                    p->plan.hnsw_ef_search <= 0))
        return subq_fail(err, SUBQ_ERR_ARG,
                         "selector %s: invalid HNSW parameters (M %d, efConstruction %d, efSearch %d)",
                         name, p->plan.hnsw_m, p->plan.hnsw_ef_construction, p->plan.hnsw_ef_search);
    if (p->plan.selector == SUBQ_SELECT_EXACT &&
        (p->plan.nprobe < 0 ||
         (p->plan.nprobe > 0 && (p->plan.block_keys < 1 || p->plan.block_keys > SELECT_MAX_BLOCK_KEYS ||
                                 p->plan.probe_from < 0 || p->plan.probe_check < 0))))
        return subq_fail(err, SUBQ_ERR_ARG,
                         "selector exact: invalid block scan (nprobe %d; %d keys per block, 1 to %d; from %d keys, "
                         "check every %d; none may be negative)",
                         p->plan.nprobe, p->plan.block_keys, SELECT_MAX_BLOCK_KEYS, p->plan.probe_from,
                         p->plan.probe_check);
    if (p->plan.selector == SUBQ_SELECT_EXACT && p->plan.nprobe > 0 &&
        (p->plan.group_blocks < 0 || p->plan.group_blocks > SELECT_MAX_BLOCK_KEYS ||
         (p->plan.group_blocks > 0 && (p->plan.group_probe < 1 || p->plan.group_from < 0))))
        return subq_fail(err, SUBQ_ERR_ARG,
                         "selector exact: invalid groups of blocks (%d blocks per group, 0 to %d; %d groups probed, "
                         "at least 1; from %d keys, not negative)", p->plan.group_blocks, SELECT_MAX_BLOCK_KEYS,
                         p->plan.group_probe, p->plan.group_from);
    if (p->plan.selector == SUBQ_SELECT_EXACT && p->plan.nprobe > 0 &&
        (p->plan.block_reps < 0 || p->plan.block_reps > SELECT_MAX_REPS || p->plan.block_reps > p->plan.block_keys))
        return subq_fail(err, SUBQ_ERR_ARG, "selector exact: %d representative keys a block: 0 to %d, and at most the "
                         "%d keys of a block", p->plan.block_reps, SELECT_MAX_REPS, p->plan.block_keys);
    if (p->plan.selector == SUBQ_SELECT_EXACT &&
        (p->plan.clusters < 0 || p->plan.clusters > SELECT_MAX_CLUSTERS ||
         (p->plan.clusters > 0 && (p->plan.cluster_probe < 1 || p->plan.cluster_from < 0))))
        return subq_fail(err, SUBQ_ERR_ARG,
                         "selector exact: invalid clusters (%d lists, 0 to %d; %d probed, at least 1; from %d keys, "
                         "not negative)", p->plan.clusters, SELECT_MAX_CLUSTERS, p->plan.cluster_probe,
                         p->plan.cluster_from);
    if (p->plan.selector == SUBQ_SELECT_QUEST && p->plan.quest_page <= 0)
        return subq_fail(err, SUBQ_ERR_ARG, "selector quest: page size must be positive (got %d)", p->plan.quest_page);
    subq_status rc;
    if (ki->native_keys && (rc = check_env(p, env, err))) return rc;
    selector_env e0 = {0};
    if (!env) env = &e0;
    const int heads = selector_key_heads(p) > 1 || selector_query_heads_of(p) > 1;
    if (heads && !ki->needs_search)
        return subq_fail(err, SUBQ_ERR_ARG, "selector %s ranks native keys: search heads apply to exact, hnsw and faiss",
                         name);
    if ((rc = (heads ? select_heads_new : ki->create)(p, env, out, err))) return rc;
    (*out)->params = *p;
    (*out)->env = *env;
    return SUBQ_OK;
}

void selector_free(selector *s) {
    if (s) s->ops->free(s);
}

subq_status selector_append(selector *s, const float *k_search, int n, int slot0, subq_error *err) {
    double t0 = time_now_s();
    subq_status rc = s->ops->append(s, k_search, n, slot0, err);
    s->stats.t_append_s += time_now_s() - t0;
    if (!rc) s->stats.n_appended += n;
    return rc;
}

/* One query that asked for k slots and got `got`. */
static void count_query(selector *s, int k, int got) {
    s->stats.n_queries++;
    s->stats.n_returned += got;
    s->stats.n_filler += k - got;
}

int selector_query(selector *s, const float *q_search, const float *q_native, int k, const select_mask *m,
                   int32_t *out) {
    if (k <= 0) return 0;
    double t0 = time_now_s();
    int got = s->ops->query(s, q_search, q_native, k, m, out);
    s->stats.t_query_s += time_now_s() - t0;
    if (got >= 0) count_query(s, k, got);
    return got < 0 ? -1 : got;
}

/* selector_query_ahead's preparation, run beside the query */
typedef struct ahead_job {
    selector *s;
    const float *k_next;
    int slot;
} ahead_job;

static void prepare_ahead(void *ctx) {
    ahead_job *j = ctx;
    j->s->ops->prepare_append(j->s, j->k_next, j->slot);
}

int selector_query_ahead(selector *s, const float *q_search, const float *q_native, int k, const select_mask *m,
                         int32_t *out, const float *k_next, int slot, pool *p) {
    if (!s->ops->prepare_append || !s->ops->query_beside || !k_next || k <= 0)
        return selector_query(s, q_search, q_native, k, m, out);
    ahead_job j = {.s = s, .k_next = k_next, .slot = slot};
    const double t0 = time_now_s();
    double t_query = 0;
    const int got = s->ops->query_beside(s, q_search, q_native, k, m, out, prepare_ahead, &j, p, &t_query);
    s->stats.t_query_s += t_query;
    if (got >= 0) count_query(s, k, got);
    const double past = (time_now_s() - t0) - t_query;
    if (past > 0) s->stats.t_append_s += past;
    return got < 0 ? -1 : got;
}

int selector_query_group(selector *s, int g, const float *q_search, const float *q_native, int k, const select_mask *m,
                         int32_t *out, int *got) {
    for (int i = 0; i < g; i++) got[i] = 0;
    if (k <= 0) return 0;
    if (g == 1 || !s->ops->query_group) {
        for (int i = 0; i < g; i++) {
            got[i] = selector_query(s, q_search ? q_search + (size_t)i * s->params.d_search : NULL, q_native, k, m,
                                    out + (size_t)i * k);
            if (got[i] < 0) return -1;
        }
        return 0;
    }
    double t0 = time_now_s();
    int rc = s->ops->query_group(s, g, q_search, q_native, k, m, out, got);
    s->stats.t_query_s += time_now_s() - t0;
    for (int i = 0; !rc && i < g; i++) count_query(s, k, got[i]);
    return rc;
}

typedef int (*query_batch_fn)(selector *s, int n, const float *q_search, const float *q_native, size_t q_stride,
                              int k, const select_mask *m, int32_t *out, int *got, int n_threads);

static int query_many(selector *s, query_batch_fn fn, int n, const float *q_search, const float *q_native,
                      size_t q_stride, int k, const select_mask *m, int32_t *out, int *got, int n_threads) {
    if (k <= 0) {
        for (int i = 0; i < n; i++) got[i] = 0;
        return 0;
    }
    int rc = 0;
    if (fn) {
        double t0 = time_now_s();
        rc = fn(s, n, q_search, q_native, q_stride, k, m, out, got, n_threads);
        s->stats.t_query_s += time_now_s() - t0;
        for (int i = 0; !rc && i < n; i++) count_query(s, k, got[i]);
        return rc;
    }
    const int d = s->params.d_search * selector_query_heads_of(&s->params);
    for (int i = 0; i < n && !rc; i++) {
        got[i] = selector_query(s, q_search ? q_search + (size_t)i * d : NULL, q_native + (size_t)i * q_stride, k, &m[i],
                                out + (size_t)i * k);
        rc = got[i] < 0 ? -1 : 0;
    }
    return rc;
}

int selector_query_batch(selector *s, int n, const float *q_search, const float *q_native, size_t q_stride, int k,
                         const select_mask *m, int32_t *out, int *got, int n_threads) {
    return query_many(s, s->ops->query_batch, n, q_search, q_native, q_stride, k, m, out, got, n_threads);
}

int selector_query_prefill(selector *s, int n, const float *q_search, const float *q_native, size_t q_stride, int k,
                           const select_mask *m, int32_t *out, int *got, int n_threads) {
    query_batch_fn fn = s->ops->query_prefill ? s->ops->query_prefill : s->ops->query_batch;
    return query_many(s, fn, n, q_search, q_native, q_stride, k, m, out, got, n_threads);
}

void selector_reset(selector *s) {
    s->ops->reset(s);
}

int selector_per_head(const selector *s) { return s->ops->query_heads != NULL; }

int selector_group_set(const selector *s) {
    if (!selector_per_head(s) || s->env.n_head_kv >= s->env.n_head) return 0;
    switch (s->params.plan.selector) {
    case SUBQ_SELECT_ORACLE: return s->params.plan.oracle == SUBQ_ORACLE_PER_KV_HEAD;
    case SUBQ_SELECT_EXACT:
    case SUBQ_SELECT_HNSW:
    case SUBQ_SELECT_FAISS: return selector_query_heads_of(&s->params) == s->env.n_head_kv;
    default: return 0;
    }
}

int selector_key_heads(const selector_params *p) { return p->search_heads > 1 ? p->search_heads : 1; }
int selector_query_heads_of(const selector_params *p) { return p->search_qheads > 1 ? p->search_qheads : 1; }

int selector_query_heads(selector *s, const float *q_search, const float *q_native, int k, const select_mask *m,
                         int32_t *out, int *n_out) {
    const int nh = s->env.n_head;
    for (int h = 0; h < nh; h++) n_out[h] = 0;
    if (k <= 0) return 0;
    double t0 = time_now_s();
    int rc = s->ops->query_heads(s, q_search, q_native, k, m, out, n_out);
    s->stats.t_query_s += time_now_s() - t0;
    if (rc < 0) return -1;
    s->stats.n_queries++;
    for (int h = 0; h < nh; h++) {
        s->stats.n_returned += n_out[h];
        s->stats.n_filler += k - n_out[h];
    }
    return 0;
}

int selector_query_heads_prefill(selector *s, int n, const float *q_search, const float *q_native, size_t q_stride,
                                 int k, const select_mask *m, int32_t *out, int *n_out, int n_threads) {
    const int nh = s->env.n_head;
    if (!s->ops->query_heads_prefill) {
        const int d = s->params.d_search * selector_query_heads_of(&s->params);
        for (int i = 0; i < n; i++)
            if (selector_query_heads(s, q_search ? q_search + (size_t)i * d : NULL, q_native + (size_t)i * q_stride, k,
                                     &m[i], out + (size_t)i * nh * k, n_out + (size_t)i * nh) < 0)
                return -1;
        return 0;
    }
    for (int i = 0; i < n * nh; i++) n_out[i] = 0;
    if (k <= 0) return 0;
    double t0 = time_now_s();
    int rc = s->ops->query_heads_prefill(s, n, q_search, q_native, q_stride, k, m, out, n_out, n_threads);
    s->stats.t_query_s += time_now_s() - t0;
    if (rc < 0) return -1;
    s->stats.n_queries += n;
    for (int i = 0; i < n * nh; i++) {
        s->stats.n_returned += n_out[i];
        s->stats.n_filler += k - n_out[i];
    }
    return 0;
}

subq_status selector_truncate(selector *s, int n_keep, subq_error *err) {
    if (n_keep < 0)
        return subq_fail(err, SUBQ_ERR_ARG, "selector %s: negative slot count %d",
                         selector_kind_name(s->params.plan.selector), n_keep);
    if (!s->ops->truncate)
        return subq_fail(err, SUBQ_ERR_UNSUPPORTED, "selector %s cannot be truncated",
                         selector_kind_name(s->params.plan.selector));
    double t0 = time_now_s();
    subq_status rc = s->ops->truncate(s, n_keep, err);
    s->stats.t_append_s += time_now_s() - t0;
    return rc;
}

subq_status selector_get_keys(const selector *s, int n, float *dst, subq_error *err) {
    return s->ops->get_keys ? s->ops->get_keys(s, n, dst, err) : SUBQ_OK;
}

void selector_stored_form(const selector *s, const float *src, float *dst) {
    const int ds = s->params.d_search;
    for (int b = 0; b < selector_key_heads(&s->params); b++)
        select_prepare(dst + (size_t)b * ds, src + (size_t)b * ds, ds, s->params.plan.score);
}

/* A put of n slots begun at t0 that returned rc, counted as appends. */
static subq_status counted_put(selector *s, int n, double t0, subq_status rc) {
    s->stats.t_append_s += time_now_s() - t0;
    if (!rc) s->stats.n_appended += n;
    return rc;
}

subq_status selector_put_keys(selector *s, const float *keys, int n, int slot0, subq_error *err) {
    double t0 = time_now_s();
    return counted_put(s, n, t0, s->ops->put_keys ? s->ops->put_keys(s, keys, n, slot0, err)
                                                  : s->ops->append(s, NULL, n, slot0, err));
}

subq_status selector_get_index(const selector *s, void **index, size_t *bytes, subq_error *err) {
    *index = NULL;
    *bytes = 0;
    return s->ops->get_index ? s->ops->get_index(s, index, bytes, err) : SUBQ_OK;
}

subq_status selector_put_index(selector *s, const float *keys, int n, const void *index, size_t bytes,
                               subq_error *err) {
    if (!index || !s->ops->put_index) return selector_put_keys(s, keys, n, 0, err);
    double t0 = time_now_s();
    return counted_put(s, n, t0, s->ops->put_index(s, keys, n, index, bytes, err));
}
