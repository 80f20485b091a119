/* window: the StreamingLLM baseline. Attention keeps the sinks and the recent
 * tail anyway, so this selector retrieves nothing: every query returns 0
 * slots (all K candidate positions are filler). */
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
    return 0;
}

static void window_reset(selector *s) { ((window_sel *)s)->count = 0; }

static void window_free(selector *s) { free(s); }

static const selector_ops window_ops = {"window", window_append, window_query, window_reset, window_free};

subq_status select_window_new(const selector_params *p, const selector_env *env, selector **out, subq_error *err) {
    window_sel *w = calloc(1, sizeof *w);
    if (!w) return subq_fail(err, SUBQ_ERR_NOMEM, "selector window: out of memory");
    w->base.ops = &window_ops;
    w->base.stats.bytes = sizeof *w;
    *out = &w->base;
    return SUBQ_OK;
}
