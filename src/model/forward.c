/* The transformer forward pass (llama family): embeddings, per-layer
 * RMSNorm -> q/k/v -> RoPE -> KV cache -> attention stage -> output
 * projection -> RMSNorm -> SwiGLU FFN, final norm and logits. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "base/error.h"
#include "base/timer.h"
#include "kernels/kernels.h"
#include "model/context.h"
#include "model/matmul.h"

/* out = x / sqrt(mean(x^2) + eps) * w, for each of n rows of length d */
static void rmsnorm(float *out, const float *x, const float *w, int n, int d, float eps) {
    for (int t = 0; t < n; t++) {
        const float *xr = x + (size_t)t * d;
        float *o = out + (size_t)t * d;
        double ss = 0.0;
        for (int i = 0; i < d; i++) ss += (double)xr[i] * xr[i];
        float inv = (float)(1.0 / sqrt(ss / d + eps));
        for (int i = 0; i < d; i++) o[i] = xr[i] * inv * w[i];
    }
}

/* Rotate each head's first n_rot dims, pair i by angle pos * freq[i]
 * (frequencies with any scaling applied, computed at load: rope.c):
 *   adjacent pairs (x[2i], x[2i+1])        (llama, neox = 0)
 *   split halves   (x[i], x[i + n_rot/2])  (qwen,  neox = 1)
 * [x0, x1] <- mscale [x0 cos - x1 sin, x0 sin + x1 cos]. */
static void rope(float *x, int n, int n_heads, int head_dim, const int32_t *pos, const model_hparams *hp) {
    const rope_hparams *r = &hp->rope;
    int half = r->n_rot / 2;
    for (int t = 0; t < n; t++) {
        for (int i = 0; i < half; i++) {
            double theta = (double)pos[t] * r->freq[i];
            float c = (float)(cos(theta) * r->mscale), s = (float)(sin(theta) * r->mscale);
            int i0 = r->neox ? i : 2 * i;
            int i1 = r->neox ? i + half : 2 * i + 1;
            for (int h = 0; h < n_heads; h++) {
                float *v = x + ((size_t)t * n_heads + h) * head_dim;
                float x0 = v[i0], x1 = v[i1];
                v[i0] = x0 * c - x1 * s;
                v[i1] = x0 * s + x1 * c;
            }
        }
    }
}

static void add_inplace(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

/* y[t][:] += b for each of n rows of width d (qwen2 q/k/v biases) */
static void add_bias(float *y, const float *b, int n, int d) {
    for (int t = 0; t < n; t++) add_inplace(y + (size_t)t * d, b, (size_t)d);
}

/* silu(g) * u = g / (1 + exp(-g)) * u */
static void swiglu(float *g, const float *u, size_t n) {
    for (size_t i = 0; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static subq_status forward_chunk(subq_context *c, const int32_t *tokens, int n, const int32_t *pos,
                                 const int32_t *seg, float *logits, int all_logits, subq_error *err) {
    subq_model *m = c->model;
    const model_hparams *hp = &m->hp;
    kv_cache *kv = &c->kv;
    const int d = hp->n_embd;
    const int slot0 = kv->n_used, nt = c->n_threads;

    int32_t *posbuf = c->posbuf;
    for (int t = 0; t < n; t++) {
        posbuf[t] = pos ? pos[t] : slot0 + t;
        kv->pos[slot0 + t] = posbuf[t];
        kv->seg[slot0 + t] = seg ? seg[t] : 0;
        dequant_row(m->token_embd.type, (const char *)m->token_embd.data + (size_t)tokens[t] * m->token_embd.row_bytes,
                    c->x + (size_t)t * d, d);
    }

    for (int l = 0; l < hp->n_layer; l++) {
        const layer_weights *L = &m->layers[l];
        rmsnorm(c->xn, c->x, L->attn_norm, n, d, hp->norm_eps);
        matmul_shared_input((float *const[]){c->q, c->k, c->v}, (const matrix *const[]){&L->wq, &L->wk, &L->wv}, 3,
                            c->xn, n, &c->mm, c->pool);
        if (L->bq) {
            add_bias(c->q, L->bq, n, hp->n_head * hp->head_dim);
            add_bias(c->k, L->bk, n, hp->n_head_kv * hp->head_dim);
            add_bias(c->v, L->bv, n, hp->n_head_kv * hp->head_dim);
        }
        if (L->q_norm) { /* qwen3: RMSNorm over each head's vector, in place */
            rmsnorm(c->q, c->q, L->q_norm, n * hp->n_head, hp->head_dim, hp->norm_eps);
            rmsnorm(c->k, c->k, L->k_norm, n * hp->n_head_kv, hp->head_dim, hp->norm_eps);
        }
        rope(c->q, n, hp->n_head, hp->head_dim, posbuf, hp);
        rope(c->k, n, hp->n_head_kv, hp->head_dim, posbuf, hp);
        subq_status stored = kv_cache_store(kv, l, slot0, n, c->k, c->v, err);
        if (stored) return stored;
        if (c->capture) c->capture(c->capture_user, l, n, slot0, c->xn, c->q, c->k);
        if (c->capture && l == c->capture_last) { /* a capture that needs nothing further */
            kv->n_used += n;
            return SUBQ_OK;
        }

        attn_step step = {
            .layer = l, .n_tokens = n, .slot0 = slot0,
            .n_head = hp->n_head, .n_head_kv = hp->n_head_kv, .head_dim = hp->head_dim,
            .scale = 1.0f / sqrtf((float)hp->head_dim),
            .q = c->q, .h_norm = c->xn, .n_embd = d, .out = c->att, .n_threads = nt, .pool = c->pool,
        };
        attn_stage *st = c->stages[l];
        double t0 = time_now_s();
        subq_status s = st->forward(st, &step, kv, err);
        c->t_attn_s += time_now_s() - t0;
        if (s) return s;

        matmul(c->proj, c->att, &L->wo, n, &c->mm, c->pool);
        add_inplace(c->x, c->proj, (size_t)n * d);

        rmsnorm(c->xn, c->x, L->ffn_norm, n, d, hp->norm_eps);
        matmul_shared_input((float *const[]){c->gate, c->up}, (const matrix *const[]){&L->w_gate, &L->w_up}, 2,
                            c->xn, n, &c->mm, c->pool);
        swiglu(c->gate, c->up, (size_t)n * hp->n_ff);
        matmul(c->proj, c->gate, &L->w_down, n, &c->mm, c->pool);
        add_inplace(c->x, c->proj, (size_t)n * d);
    }
    kv->n_used += n;

    if (logits) {
        /* only the rows whose logits are wanted go through the output matrix */
        int first = all_logits ? 0 : n - 1, rows = n - first;
        rmsnorm(c->xn, c->x + (size_t)first * d, m->output_norm, rows, d, hp->norm_eps);
        matmul(logits, c->xn, &m->output, rows, &c->mm, c->pool);
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
    subq_status ws = c->kv.file ? kv_file_will_write(c->kv.file, c->kv.n_used, err) : SUBQ_OK;
    if (ws) return ws;
    c->file_dirty = c->kv.file != NULL;
    memcpy(c->tok + c->kv.n_used, tokens, (size_t)n * sizeof(int32_t));
    c->logits_at = -1;
    /* a forward that waited on the disk makes the next ones prefetch (KV_PREFETCH_STEPS) */
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
        if (!s && !last) s = context_commit(c, 0, err); /* a long prompt's progress survives a crash */
        if (s) return s;
        done += chunk;
    }
    if (c->kv.file && getrusage(RUSAGE_SELF, &ru1) == 0 && ru1.ru_majflt - ru0.ru_majflt >= 8)
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
