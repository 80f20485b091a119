/* The stage interface's calls beyond forward (attn.h): a stage's own
 * answer, or a stateless stage's (full attention keeps nothing per slot
 * beyond the KV cache). */
#include <string.h>

#include "attn/attn.h"

void attn_stage_describe(const attn_stage *st, char *buf, size_t cap) {
    if (!cap) return;
    buf[0] = '\0';
    if (st->state && st->state->describe) st->state->describe(st, buf, cap);
}

int attn_stage_search_width(const attn_stage *st) {
    return st->state && st->state->search_width ? st->state->search_width(st) : 0;
}

uint64_t attn_stage_search_made_by(const attn_stage *st) {
    return st->state && st->state->search_made_by ? st->state->search_made_by(st) : 0;
}

int attn_stage_same_search(const attn_stage *a, const attn_stage *b) {
    return a->state && a->state == b->state && a->state->same_search ? a->state->same_search(a, b) : 0;
}

subq_status attn_stage_get_keys(const attn_stage *st, int n, float *dst, subq_error *err) {
    return st->state && st->state->get_keys ? st->state->get_keys(st, n, dst, err) : SUBQ_OK;
}

subq_status attn_stage_get_index(const attn_stage *st, void **index, size_t *bytes, subq_error *err) {
    *index = NULL;
    *bytes = 0;
    return st->state && st->state->get_index ? st->state->get_index(st, index, bytes, err) : SUBQ_OK;
}

subq_status attn_stage_restore(attn_stage *st, const kv_cache *kv, const float *keys, int n, const void *index,
                               size_t index_bytes, subq_error *err) {
    return st->state && st->state->restore ? st->state->restore(st, kv, keys, n, index, index_bytes, err) : SUBQ_OK;
}

subq_status attn_stage_append(attn_stage *st, const kv_cache *kv, const float *ks, int n, int slot0,
                              subq_error *err) {
    return st->state && st->state->append ? st->state->append(st, kv, ks, n, slot0, err) : SUBQ_OK;
}

int attn_stage_rows_attended(const attn_stage *st, int n_keys) {
    if (n_keys <= 0) return 0;
    return st->state && st->state->rows_attended ? st->state->rows_attended(st, n_keys) : n_keys;
}

int attn_stage_reads_scattered(const attn_stage *st) {
    return st->state && st->state->reads_scattered ? st->state->reads_scattered(st) : 0;
}

int attn_stage_has_completion(const attn_stage *st) {
    return st->state && st->state->has_completion ? st->state->has_completion(st) : 0;
}

void attn_stage_get_stats(const attn_stage *st, attn_stage_stats *out) {
    memset(out, 0, sizeof *out);
    if (st->state && st->state->stats) st->state->stats(st, out);
}

subq_status attn_stage_enable_metrics(attn_stage *st, subq_error *err) {
    return st->state && st->state->enable_metrics ? st->state->enable_metrics(st, err) : SUBQ_OK;
}

const sparse_metrics *attn_stage_metrics(const attn_stage *st) {
    return st->state && st->state->metrics ? st->state->metrics(st) : NULL;
}

void attn_stage_freeze(attn_stage *st, int freeze_slot) {
    if (st->state && st->state->freeze) st->state->freeze(st, freeze_slot);
}

int attn_stage_has_late_key(const attn_stage *st) {
    return st->state && st->state->has_late_key ? st->state->has_late_key(st) : 0;
}

subq_status attn_stage_index_late(attn_stage *st, subq_error *err) {
    return st->state && st->state->index_late ? st->state->index_late(st, err) : SUBQ_OK;
}
