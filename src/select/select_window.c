/* window: the StreamingLLM baseline. Attention keeps the sinks and the recent
 * tail anyway; this selector returns the K most recent eligible slots, so
 * window@K attends sinks + the n_tail + K most recent tokens: the same number
 * of keys as any other selector at K, chosen by position alone. */
#include <stdlib.h>

#include "base/error.h"
#include "select/select_internal.h"

typedef struct window_sel {
    selector base;
    int count;
} window_sel;

static subq_status window_append(selector *s, const float *k_search, int n, int slot0, subq_error *err) {
    window_sel *w = (window_sel *)s;
    subq_status rc = select_check_append(s, w->count, n, slot0, err);
    if (!rc) w->count += n;
    return rc;
}

static int window_query(selector *s, const float *q_search, const float *q_native, int k, const select_mask *m,
                        int32_t *out) {
    const int n_slots = m->n_slots < ((window_sel *)s)->count ? m->n_slots : ((window_sel *)s)->count;
    int got = 0;
    /* newest first: walks the n_tail excluded slots, then K eligible ones
     * (further only when the document has fewer than K eligible slots) */
    for (int j = n_slots - 1; j >= 0 && got < k; j--)
        if (select_mask_allows(m, j)) out[got++] = j;
    return got;
}

static void window_reset(selector *s) { ((window_sel *)s)->count = 0; }

static subq_status window_truncate(selector *s, int n_keep, subq_error *err) {
    return select_truncate_count(s, &((window_sel *)s)->count, n_keep, err);
}

static void window_free(selector *s) { free(s); }

static const selector_ops window_ops = {window_append, window_query, window_reset, window_free,
                                        window_truncate, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                                        NULL, NULL};

subq_status select_window_new(const selector_params *p, const selector_env *env, selector **out, subq_error *err) {
    window_sel *w = calloc(1, sizeof *w);
    if (!w) return subq_fail(err, SUBQ_ERR_NOMEM, "selector window: out of memory");
    w->base.ops = &window_ops;
    w->base.stats.bytes = sizeof *w;
    *out = &w->base;
    return SUBQ_OK;
}
