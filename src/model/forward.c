/* The transformer forward pass, as the model's architecture describes it
 * (model/arch.h): embeddings (times a scale), per layer RMSNorm -> q/k/v
 * (+ biases, + RMSNorm per head) -> RoPE of the layer (or none) -> KV cache
 * -> attention stage (the layer's scale, window, soft cap) -> output
 * projection (-> RMSNorm) -> residual -> RMSNorm -> gated FFN (SiLU or
 * GELU) (-> RMSNorm) -> residual; final norm and logits (soft-capped). */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "base/error.h"
#include "base/timer.h"
#include "kernels/kernels.h"
#include "model/context.h"
#include "model/matmul.h"

/* The per-row steps of a layer (norms, RoPE, SwiGLU, residuals) run on the
 * pool in pieces of rows: the rows of a batch are independent, and left on
 * one thread they kept the other idle for a tenth of a prefill. */
typedef struct rows_job {
    float *out, *y;          /* out: rmsnorm, swiglu, the rope table; y: rope and residual (in place) */
    const float *x, *w;      /* rmsnorm: x, w; swiglu: x = up; residual: x */
    const float *cs;         /* rope: [n][n_rot] cos, sin pairs */
    int d, n_heads, head_dim;
    float eps, cap;          /* rmsnorm's eps; softcap's c */
    const rope_hparams *rope;
    const double *freq;      /* the rope table's frequencies: rope->freq, or the context's choice */
    const int32_t *pos;
} rows_job;
typedef void (*rows_fn)(const rows_job *j, int t0, int t1);

/* out = x / sqrt(mean(x^2) + eps) * w, for rows of length d */
static void rmsnorm_rows(const rows_job *j, int t0, int t1) {
    const int d = j->d;
    for (int t = t0; t < t1; t++) {
        const float *xr = j->x + (size_t)t * d;
        float *o = j->out + (size_t)t * d;
        double ss = 0.0;
        for (int i = 0; i < d; i++) ss += (double)xr[i] * xr[i];
        float inv = (float)(1.0 / sqrt(ss / d + j->eps));
        for (int i = 0; i < d; i++) o[i] = xr[i] * inv * j->w[i];
    }
}

/* out[t] = mscale [cos, sin](pos[t] * freq[i]) for the n_rot / 2 pairs
 * (frequencies with any scaling applied, computed at load: rope.c): one
 * table for all layers and for q and k */
static void rope_table_rows(const rows_job *j, int t0, int t1) {
    const rope_hparams *r = j->rope;
    for (int t = t0; t < t1; t++)
        for (int i = 0; i < r->n_rot / 2; i++) {
            double theta = (double)j->pos[t] * j->freq[i];
            j->out[(size_t)t * r->n_rot + 2 * i] = (float)(cos(theta) * r->mscale);
            j->out[(size_t)t * r->n_rot + 2 * i + 1] = (float)(sin(theta) * r->mscale);
        }
}

/* Rotate each head's first n_rot dims, pair i by the table's angle:
 *   adjacent pairs (x[2i], x[2i+1])        (llama, neox = 0)
 *   split halves   (x[i], x[i + n_rot/2])  (qwen,  neox = 1)
 * [x0, x1] <- [x0 cos - x1 sin, x0 sin + x1 cos]. */
static void rope_rows(const rows_job *j, int t0, int t1) {
    const rope_hparams *r = j->rope;
    const int half = r->n_rot / 2;
    for (int t = t0; t < t1; t++)
        for (int h = 0; h < j->n_heads; h++) {
            float *v = j->y + ((size_t)t * j->n_heads + h) * j->head_dim;
            const float *cs = j->cs + (size_t)t * r->n_rot;
            for (int i = 0; i < half; i++) {
                const int i0 = r->neox ? i : 2 * i, i1 = r->neox ? i + half : 2 * i + 1;
                const float c = cs[2 * i], sn = cs[2 * i + 1], x0 = v[i0], x1 = v[i1];
                v[i0] = x0 * c - x1 * sn;
                v[i1] = x0 * sn + x1 * c;
            }
        }
}

/* out = silu(out) * up = out / (1 + exp(-out)) * up, rows of length d */
static void swiglu_rows(const rows_job *j, int t0, int t1) {
    const size_t a = (size_t)t0 * j->d;
    kernels_get()->silu_mul(j->out + a, j->x + a, (size_t)(t1 - t0) * j->d);
}

/* out = gelu(out) * up (GELU's tanh form), rows of length d */
static void geglu_rows(const rows_job *j, int t0, int t1) {
    const size_t a = (size_t)t0 * j->d;
    kernels_get()->gelu_mul(j->out + a, j->x + a, (size_t)(t1 - t0) * j->d);
}

/* y = c tanh(y / c), rows of length d (gemma2's final logits) */
static void softcap_rows(const rows_job *j, int t0, int t1) {
    kernels_get()->softcap(j->y + (size_t)t0 * j->d, (size_t)(t1 - t0) * j->d, j->cap);
}

/* y += x, rows of length d */
static void residual_rows(const rows_job *j, int t0, int t1) {
    for (size_t i = (size_t)t0 * j->d; i < (size_t)t1 * j->d; i++) j->y[i] += j->x[i];
}

typedef struct rows_split {
    rows_fn fn;
    const rows_job *job;
    int n, chunks;
} rows_split;

static void rows_chunk(void *ctx, int b, int thread) {
    (void)thread;
    const rows_split *r = ctx;
    r->fn(r->job, (int)((int64_t)r->n * b / r->chunks), (int)((int64_t)r->n * (b + 1) / r->chunks));
}

/* fn over rows [0, n) of `width` floats each, in pieces on the pool
 * (one piece below 16K floats: a decode step's rows stay on its thread) */
static void for_rows(pool *p, int n, int width, rows_fn fn, const rows_job *j) {
    int chunks = pool_chunks(p, (int64_t)n * width, 1 << 14);
    rows_split r = {fn, j, n, chunks < n ? chunks : n};
    pool_run(r.chunks > 1 ? p : NULL, r.chunks, rows_chunk, &r);
}

static void rmsnorm(pool *p, float *out, const float *x, const float *w, int n, int d, float eps) {
    for_rows(p, n, d, rmsnorm_rows, &(rows_job){.out = out, .x = x, .w = w, .d = d, .eps = eps});
}

static void rope(pool *p, float *x, int n, int n_heads, int head_dim, const float *cs, const rope_hparams *r) {
    for_rows(p, n, n_heads * head_dim, rope_rows,
             &(rows_job){.y = x, .n_heads = n_heads, .head_dim = head_dim, .cs = cs, .rope = r});
}

/* y[t][:] += b for each of n rows of width d (qwen2 q/k/v biases) */
static void add_bias(float *y, const float *b, int n, int d) {
    for (int t = 0; t < n; t++)
        for (int i = 0; i < d; i++) y[(size_t)t * d + i] += b[i];
}

/* Bytes a forward reads (weights, and the KV rows its attention scores)
 * under which it runs on the calling thread alone: about a quarter of a
 * millisecond of one core's reading, less than the pool's hand-offs of a
 * token's few hundred calls would save (measured in bench/notes). */
#define FORWARD_SERIAL_BYTES ((int64_t)4 << 20)

/* The search keys the layers' stages left out of their indexes until
 * every layer had attended (attn_stage has_late_key: graph inserts of a
 * decode step, or of a batch no query of it searched), one layer a chunk
 * across the pool; the first failure is reported. Timed by the wall clock
 * into t_attn_s, and noted so that the stats count the inserts' wall time,
 * not their sum over threads. */
typedef struct late_job {
    attn_stage **stages;
    atomic_int failed;
    subq_error err;
} late_job;

static void index_late_layer(void *ctx, int l, int thread) {
    (void)thread;
    late_job *j = ctx;
    subq_error e = {0};
    if (attn_stage_index_late(j->stages[l], &e) && !atomic_exchange(&j->failed, 1)) j->err = e;
}

static double append_seconds(const subq_context *c) {
    double sum = 0;
    for (int l = 0; l < c->model->hp.n_layer; l++) {
        attn_stage_stats s;
        attn_stage_get_stats(c->stages[l], &s);
        sum += s.t_append_s;
    }
    return sum;
}

static subq_status index_late(subq_context *c, pool *pl, subq_error *err) {
    const int n_layer = c->model->hp.n_layer;
    int n_late = 0;
    for (int l = 0; l < n_layer; l++) n_late += attn_stage_has_late_key(c->stages[l]);
    if (!n_late) return SUBQ_OK;
    const double sum0 = append_seconds(c), t0 = time_now_s();
    late_job j = {.stages = c->stages};
    atomic_init(&j.failed, 0);
    pool_run(n_late > 1 ? pl : NULL, n_layer, index_late_layer, &j);
    const double wall = time_now_s() - t0;
    c->t_attn_s += wall;
    c->t_late_wall_s += wall;
    c->t_late_sum_s += append_seconds(c) - sum0;
    if (atomic_load(&j.failed)) {
        if (err) *err = j.err;
        return j.err.code;
    }
    return SUBQ_OK;
}

static subq_status forward_chunk(subq_context *c, const int32_t *tokens, int n, const int32_t *pos,
                                 const int32_t *seg, float *logits, int all_logits, subq_error *err) {
    subq_model *m = c->model;
    const model_hparams *hp = &m->hp;
    kv_cache *kv = &c->kv;
    const int d = hp->n_embd;
    const int slot0 = kv->n_used;
    /* a forward that reads little (a tiny model's token) runs on this thread
     * alone: a second one saves less than waking it costs, and under a
     * competing load it only takes a core's time from the first */
    const int64_t reads = (int64_t)n * ((int64_t)m->weight_bytes +
                                        (int64_t)slot0 * hp->n_layer * 2 * hp->n_head_kv * (int64_t)kv->row_bytes);
    pool *pl = reads < FORWARD_SERIAL_BYTES ? NULL : c->pool;
    const int nt = pl ? c->n_threads : 1;

    int32_t *posbuf = c->posbuf;
    for (int t = 0; t < n; t++) {
        posbuf[t] = pos ? pos[t] : slot0 + t;
        kv->pos[slot0 + t] = posbuf[t];
        kv->seg[slot0 + t] = seg ? seg[t] : 0;
        float *xt = c->x + (size_t)t * d;
        dequant_row(m->token_embd.type, (const char *)m->token_embd.data + (size_t)tokens[t] * m->token_embd.row_bytes,
                    xt, d);
        if (hp->embd_scale != 1.0f)
            for (int i = 0; i < d; i++) xt[i] *= hp->embd_scale;
    }

    /* one cos/sin table per RoPE the layers use (gemma3: global and local) */
    for_rows(pl, n, hp->rope.n_rot, rope_table_rows,
             &(rows_job){.out = c->rope_cs, .rope = &hp->rope, .freq = c->rope_freq, .pos = posbuf});
    if (hp->rope_local.n_rot)
        for_rows(pl, n, hp->rope_local.n_rot, rope_table_rows,
                 &(rows_job){.out = c->rope_cs_local, .rope = &hp->rope_local, .freq = hp->rope_local.freq,
                             .pos = posbuf});

    for (int l = 0; l < hp->n_layer; l++) {
        const layer_weights *L = &m->layers[l];
        const layer_attn *A = &hp->layer[l];
        rmsnorm(pl, c->xn, c->x, L->attn_norm, n, d, hp->norm_eps);
        matmul_shared_input((float *const[]){c->q, c->k, c->v}, (const matrix *const[]){&L->wq, &L->wk, &L->wv}, 3,
                            c->xn, n, &c->mm, pl);
        if (L->bq) {
            add_bias(c->q, L->bq, n, hp->n_head * hp->head_dim);
            add_bias(c->k, L->bk, n, hp->n_head_kv * hp->head_dim);
            add_bias(c->v, L->bv, n, hp->n_head_kv * hp->head_dim);
        }
        if (L->q_norm) { /* RMSNorm over each head's vector, in place */
            rmsnorm(pl, c->q, c->q, L->q_norm, n * hp->n_head, hp->head_dim, hp->norm_eps);
            rmsnorm(pl, c->k, c->k, L->k_norm, n * hp->n_head_kv, hp->head_dim, hp->norm_eps);
        }
        const rope_hparams *R = layer_rope(hp, l);
        /* the rotation alone (no mscale), for keys attended at another distance */
        const double *freq = A->rope == LAYER_ROPE_LOCAL ? hp->rope_local.freq : c->rope_freq;
        const attn_rope rot = {.n_rot = R ? R->n_rot : 0, .neox = R ? R->neox : 0, .freq = freq,
                               .turns = R ? rope_turns_of(R, freq) : NULL};
        if (R) {
            const float *cs = A->rope == LAYER_ROPE_LOCAL ? c->rope_cs_local : c->rope_cs;
            rope(pl, c->q, n, hp->n_head, hp->head_dim, cs, R);
            rope(pl, c->k, n, hp->n_head_kv, hp->head_dim, cs, R);
        }
        subq_status stored = kv_cache_store(kv, l, slot0, n, c->k, c->v, err);
        if (stored) return stored;
        if (c->capture) c->capture(c->capture_user, l, n, slot0, c->xn, c->q, c->k, c->v);
        if (c->capture && l == c->capture_last) { /* a capture that needs nothing further */
            subq_status late = index_late(c, pl, err);
            if (!late) kv->n_used += n;
            return late;
        }

        attn_step step = {
            .layer = l, .n_tokens = n, .slot0 = slot0,
            .n_head = hp->n_head, .n_head_kv = hp->n_head_kv, .head_dim = hp->head_dim,
            .scale = A->scale, .softcap = A->softcap, .window = A->window,
            .q = c->q, .h_norm = c->xn, .n_embd = d, .out = c->att, .n_threads = nt, .pool = pl,
            .rope = R ? &rot : NULL,
        };
        attn_stage *st = c->stages[l];
        double t0 = time_now_s();
        subq_status s = st->forward(st, &step, kv, err);
        c->t_attn_s += time_now_s() - t0;
        if (s) return s;

        matmul(c->proj, c->att, &L->wo, n, &c->mm, pl);
        if (L->post_attn_norm) rmsnorm(pl, c->proj, c->proj, L->post_attn_norm, n, d, hp->norm_eps);
        for_rows(pl, n, d, residual_rows, &(rows_job){.y = c->x, .x = c->proj, .d = d});

        rmsnorm(pl, c->xn, c->x, L->ffn_norm, n, d, hp->norm_eps);
        matmul_shared_input((float *const[]){c->gate, c->up}, (const matrix *const[]){&L->w_gate, &L->w_up}, 2,
                            c->xn, n, &c->mm, pl);
        for_rows(pl, n, hp->n_ff, hp->desc->act == FFN_GELU ? geglu_rows : swiglu_rows,
                 &(rows_job){.out = c->gate, .x = c->up, .d = hp->n_ff});
        matmul(c->proj, c->gate, &L->w_down, n, &c->mm, pl);
        if (L->post_ffn_norm) rmsnorm(pl, c->proj, c->proj, L->post_ffn_norm, n, d, hp->norm_eps);
        for_rows(pl, n, d, residual_rows, &(rows_job){.y = c->x, .x = c->proj, .d = d});
    }
    subq_status late = index_late(c, pl, err);
    if (late) return late;
    kv->n_used += n;

    if (logits) {
        /* only the rows whose logits are wanted go through the output matrix */
        int first = all_logits ? 0 : n - 1, rows = n - first;
        rmsnorm(pl, c->xn, c->x + (size_t)first * d, m->output_norm, rows, d, hp->norm_eps);
        matmul(logits, c->xn, &m->output, rows, &c->mm, pl);
        if (hp->final_softcap > 0.0f)
            for_rows(pl, rows, hp->n_vocab, softcap_rows,
                     &(rows_job){.y = logits, .d = hp->n_vocab, .cap = hp->final_softcap});
    }
    return SUBQ_OK;
}

subq_status context_forward(subq_context *c, const int32_t *tokens, int n, const int32_t *pos,
                            const int32_t *seg, float *logits, int all_logits, subq_error *err) {
    const model_hparams *hp = &c->model->hp;
    if (n <= 0) return subq_fail(err, SUBQ_ERR_ARG, "no tokens to decode");
    if (c->kv.n_used + n > c->kv.n_ctx)
        return subq_fail(err, SUBQ_ERR_RANGE, "context full: %d cached + %d new tokens > context size %d; use a larger -c",
                         c->kv.n_used, n, c->kv.n_ctx);
    for (int t = 0; t < n; t++)
        if (tokens[t] < 0 || tokens[t] >= hp->n_vocab)
            return subq_fail(err, SUBQ_ERR_RANGE, "token id %d at index %d is outside the vocabulary (0..%d)",
                             tokens[t], t, hp->n_vocab - 1);
    /* documents are contiguous runs of slots, which attention relies on
     * (a query's document is the run that ends at it) */
    for (int t = 0; seg && t < n; t++) {
        const int32_t prev = t > 0 ? seg[t - 1] : c->kv.n_used > 0 ? c->kv.seg[c->kv.n_used - 1] : INT32_MIN;
        if (seg[t] < prev)
            return subq_fail(err, SUBQ_ERR_ARG, "segment id %d at index %d follows %d: segment ids must not decrease",
                             (int)seg[t], t, (int)prev);
    }
    if (c->kv.file && !c->file_writable)
        return subq_fail(err, SUBQ_ERR_MISMATCH, "the KV file holds %d tokens made with the search keys of another "
                         "attention plan: set that plan and resume them, or reset the context to drop them",
                         kv_file_committed(c->kv.file));
    /* a KV file stops counting the rows about to be overwritten first */
    subq_status ws = c->kv.file ? kv_file_will_write(c->kv.file, c->kv.n_used, n, err) : SUBQ_OK;
    if (ws) return ws;
    c->file_dirty = c->kv.file != NULL;
    memcpy(c->tok + c->kv.n_used, tokens, (size_t)n * sizeof(int32_t));
    c->logits_at = -1;
    /* a forward that read from the disk makes the next ones prefetch (KV_PREFETCH_STEPS) */
    struct rusage ru0, ru1;
    if (c->kv.file) {
        c->kv.prefetch = c->prefetch_left > 0;
        c->prefetch_left -= c->prefetch_left > 0;
        getrusage(RUSAGE_SELF, &ru0);
    }
    for (int done = 0; done < n;) {
        int chunk = n - done < c->n_batch ? n - done : c->n_batch;
        int last = done + chunk == n;
        float *lg = NULL;
        if (logits && all_logits) lg = logits + (size_t)done * hp->n_vocab;
        else if (logits && last) lg = logits;
        subq_status s = forward_chunk(c, tokens + done, chunk, pos ? pos + done : NULL, seg ? seg + done : NULL,
                                      lg, all_logits, err);
        /* the chunk's rows are new since the last commit (which cleared the
         * flag): without this a prompt committed its first chunk only */
        if (!s) c->file_dirty = c->kv.file != NULL;
        if (!s && !last) s = context_commit(c, 0, err); /* a long prompt's progress survives a crash */
        if (s) return s;
        done += chunk;
    }
    if (c->kv.file && getrusage(RUSAGE_SELF, &ru1) == 0 && ru1.ru_inblock - ru0.ru_inblock >= 64)
        c->prefetch_left = KV_PREFETCH_STEPS;
    return SUBQ_OK;
}

subq_status subq_decode(subq_context *c, const int32_t *tokens, int n, float *logits, int all_logits,
                        subq_error *err) {
    subq_status s = context_forward(c, tokens, n, NULL, NULL, logits, all_logits, err);
    if (!s && logits) { /* kept for prompt caches (subq_context_last_logits) */
        const int nv = c->model->hp.n_vocab;
        memcpy(c->logits_last, logits + (all_logits ? (size_t)(n - 1) * nv : 0), (size_t)nv * sizeof(float));
        c->logits_at = c->kv.n_used;
    }
    return s ? s : context_commit(c, 0, err);
}
