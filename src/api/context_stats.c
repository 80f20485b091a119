/* Where a context's time went and what it holds (subq_context_get_stats). */
#include "attn/attn.h"
#include "model/context.h"
#include "subq.h"

void subq_context_get_stats(const subq_context *c, subq_context_stats *st) {
    const kv_cache *kv = &c->kv;
    st->t_attn_s = c->t_attn_s;
    st->t_fill_kv_s = c->t_fill_kv_s;
    st->t_select_s = st->t_append_s = 0;
    st->index_bytes = 0;
    st->select_bytes_read = 0;
    st->check_keys = st->check_found = st->index_tokens_linked = 0;
    st->kv_bytes = kv_cache_held_bytes(kv);
    for (int l = 0; l < c->model->hp.n_layer; l++) {
        attn_stage_stats s;
        attn_stage_get_stats(c->stages[l], &s);
        st->t_select_s += s.t_select_s;
        st->t_append_s += s.t_append_s;
        st->index_bytes += s.index_bytes;
        st->select_bytes_read += s.select_bytes_read;
        st->check_keys += s.check_keys;
        st->check_found += s.check_found;
        if (s.linked_saved > st->index_tokens_linked) st->index_tokens_linked = s.linked_saved;
    }
    /* inserts that ran side by side count once, by the wall clock */
    st->t_append_s += c->t_late_wall_s - c->t_late_sum_s;
}
