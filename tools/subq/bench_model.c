/* Model speed measurements behind `subq bench` (bench.h): timed prefill and
 * decode through the public API, with the context's own counters saying
 * where the time went. Printing and the bounds are the command's. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"

int32_t bench_random_token(uint64_t *state, int n_vocab) {
    uint64_t x = *state;
    x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
    *state = x;
    return (int32_t)((x * 0x2545F4914F6CDD1Dull >> 33) % (uint64_t)n_vocab);
}

static void split_between(const subq_context_stats *a, const subq_context_stats *b, double seconds, double per,
                          bench_split *out) {
    out->seconds = seconds * per;
    out->select_s = (b->t_select_s - a->t_select_s) * per;
    out->insert_s = (b->t_append_s - a->t_append_s) * per;
    out->attn_s = (b->t_attn_s - a->t_attn_s) * per - out->select_s - out->insert_s;
}

subq_status bench_prefill(subq_context *c, const int32_t *toks, int n, float *logits, bench_split *out,
                          subq_error *err) {
    subq_context_stats s0, s1;
    subq_context_get_stats(c, &s0);
    const double t0 = bench_now_s();
    subq_status s = subq_decode(c, toks, n, logits, 0, err);
    const double dt = bench_now_s() - t0;
    subq_context_get_stats(c, &s1);
    split_between(&s0, &s1, dt, 1.0, out);
    return s;
}

double bench_prefill_flops(const subq_model_info *info, int T) {
    const double t = T, out_params = (double)info->n_vocab * info->n_embd;
    return 2.0 * ((double)info->matmul_params - out_params) * t +
           2.0 * t * t * info->n_head * info->head_dim * info->n_layer + 2.0 * out_params;
}

subq_status bench_decode_steps(subq_context *c, int n_steps, int cold, uint64_t *rng, float *logits, double *tok_s,
                               bench_split *per_step, subq_context_stats *st0, subq_context_stats *st1,
                               subq_error *err) {
    subq_model_info info;
    subq_model_get_info(subq_context_model(c), &info);
    int32_t tok = bench_random_token(rng, info.n_vocab);
    subq_status s = subq_decode(c, &tok, 1, logits, 0, err);
    if (!s && cold) s = subq_context_kv_evict(c, err);
    subq_context_get_stats(c, st0);
    const double t0 = bench_now_s();
    for (int i = 0; i < n_steps && !s; i++) {
        tok = bench_random_token(rng, info.n_vocab);
        s = subq_decode(c, &tok, 1, logits, 0, err);
    }
    const double dt = bench_now_s() - t0;
    subq_context_get_stats(c, st1);
    *tok_s = n_steps > 0 ? n_steps / dt : 0.0;
    split_between(st0, st1, dt, n_steps > 0 ? 1.0 / n_steps : 0.0, per_step);
    return s;
}

double bench_rss_anon(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "RssAnon: %lf kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb * 1024;
}

subq_status bench_decode_at(subq_context *c, int ctx, int n_steps, int cold, uint64_t seed, uint64_t *rng,
                            float *logits, bench_decode_row *out, subq_error *err) {
    memset(out, 0, sizeof *out);
    subq_context_stats before, after;
    subq_context_get_stats(c, &before);
    double t0 = bench_now_s();
    subq_status s = subq_context_fill_synthetic(c, ctx, seed, err);
    if (s) return s;
    out->fill_s = bench_now_s() - t0;
    subq_context_get_stats(c, &after);
    out->kv_fill_s = after.t_fill_kv_s - before.t_fill_kv_s;
    t0 = bench_now_s();
    if ((s = subq_context_sync(c, err))) return s;
    out->sync_s = bench_now_s() - t0;
    const double cache_bw_before = subq_context_kv_read_gbs(c, 2);
    subq_context_stats st0, st1;
    bench_split per;
    if ((s = bench_decode_steps(c, n_steps, cold, rng, logits, &out->tok_s, &per, &st0, &st1, err))) return s;
    out->rss_anon = bench_rss_anon();
    out->select_ms = 1e3 * per.select_s;
    out->insert_ms = 1e3 * per.insert_s;
    out->attn_ms = 1e3 * per.attn_s;
    out->kv_bytes = (double)st1.kv_bytes;
    out->index_bytes = (double)st1.index_bytes;
    /* timed step i sees the fill, the untimed step and i earlier steps, and itself */
    for (int i = 0; i < n_steps; i++) out->kv_read += (double)subq_context_decode_kv_bytes(c, ctx + 2 + i);
    out->kv_read /= n_steps > 0 ? n_steps : 1;
    out->select_read = (double)(st1.select_bytes_read - st0.select_bytes_read) / (n_steps > 0 ? n_steps : 1);
    const double cache_bw_after = subq_context_kv_read_gbs(c, 2);
    out->cache_bw = cache_bw_before > cache_bw_after ? cache_bw_before : cache_bw_after;
    return SUBQ_OK;
}
