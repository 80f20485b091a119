/* Search projections that reproduce the model's own attention scores: the
 * starting point `train-search --init native` gives a search space as wide
 * as the model's heads (search_native.h). */
#include "search/search_native.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "kernels/kernels.h"
#include "model/model.h"

/* The search rotation that turns a head's pairs as layer l's RoPE does: its
 * frequencies freq[i] = scale * base^(-2i / n_rot) for every pair. */
static subq_status native_rope_of(const model_hparams *hp, int l, search_rope *out, subq_error *err) {
    const rope_hparams *r = layer_rope(hp, l);
    if (!r) return subq_fail(err, SUBQ_ERR_UNSUPPORTED, "--init native: layer %d has no RoPE", l);
    if (r->freq_long)
        return subq_fail(err, SUBQ_ERR_UNSUPPORTED, "--init native: the model's RoPE switches frequencies with length");
    *out = (search_rope){.n_rot = r->n_rot, .base = r->base, .scale = r->freq[0]};
    for (int i = 0; i < r->n_rot / 2; i++) {
        const double want = out->scale * pow(out->base, -2.0 * i / r->n_rot);
        if (fabs(r->freq[i] - want) > 1e-6 * want)
            return subq_fail(err, SUBQ_ERR_UNSUPPORTED, "--init native: layer %d's RoPE frequencies are not a "
                             "scaled power of its base (frequency factors or YaRN)", l);
    }
    return SUBQ_OK;
}

subq_status search_native_rope(const subq_model *m, const int *layers, int n_sel, int d_search, search_rope *out,
                               subq_error *err) {
    const model_hparams *hp = &m->hp;
    if (d_search != hp->head_dim)
        return subq_fail(err, SUBQ_ERR_ARG, "--init native needs --d-search %d (the model's head width), got %d",
                         hp->head_dim, d_search);
    for (int i = 0; i < n_sel; i++) {
        const int l = layers[i];
        const layer_weights *L = &m->layers[l];
        if (L->q_norm || L->k_norm || L->bq || L->bk)
            return subq_fail(err, SUBQ_ERR_UNSUPPORTED, "--init native: layer %d %s, which a linear search projection "
                             "cannot reproduce", l, L->bq || L->bk ? "adds a bias to q or k" : "normalises q and k");
        search_rope r;
        subq_status s = native_rope_of(hp, l, &r, err);
        if (s) return s;
        if (i > 0 && !search_rope_same(&r, out))
            return subq_fail(err, SUBQ_ERR_UNSUPPORTED, "--init native: the layers rotate differently");
        *out = r;
    }
    return SUBQ_OK;
}

/* The model row of a head that search dim j takes. The search rotates its
 * last n_rot dims in adjacent pairs; the model rotates its first n_rot, in
 * adjacent pairs (2i, 2i + 1) or, NeoX, in pairs (i, i + n_rot/2), and
 * passes the rest through. */
static int model_row(int j, int hd, int n_rot, int neox) {
    const int o = hd - n_rot;
    if (j < o) return n_rot + j;
    const int i = (j - o) / 2, second = (j - o) % 2;
    return neox ? i + second * n_rot / 2 : 2 * i + second;
}

subq_status search_proj_init_native(search_proj *p, const subq_model *m, subq_error *err) {
    const model_hparams *hp = &m->hp;
    const int hd = hp->head_dim;
    if (p->gran == SUBQ_SEARCH_LAYER && hp->n_head_kv > 1)
        return subq_fail(err, SUBQ_ERR_UNSUPPORTED, "--init native: one set a layer spans %d KV heads; use "
                         "--granularity kv-head or head", hp->n_head_kv);
    if (p->n_khead != hp->n_head_kv || hp->n_head % p->n_qhead)
        return subq_fail(err, SUBQ_ERR_ARG, "--init native: %d / %d search heads do not fit the model's %d / %d",
                         p->n_qhead, p->n_khead, hp->n_head, hp->n_head_kv);
    search_rope r;
    subq_status s = search_native_rope(m, p->layers, p->n_sel, p->d_search, &r, err);
    if (s) return s;
    if (!search_rope_same(&r, &p->rope))
        return subq_fail(err, SUBQ_ERR_ARG, "--init native needs the model's rotation: --rope-dims %d --rope-base %g "
                         "--rope-scale %g", r.n_rot, r.base, r.scale);
    float *row = malloc((size_t)hp->n_embd * sizeof(float));
    if (!row) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    const int per_q = hp->n_head / p->n_qhead; /* model query heads a query search head averages */
    const int neox = layer_rope(hp, p->layers[0])->neox, n_rot = r.n_rot;
    for (int i = 0; i < p->n_sel; i++) {
        const int l = p->layers[i];
        const matrix *wq = &m->layers[l].wq, *wk = &m->layers[l].wk;
        /* W_Qs[a] = mean over a's query heads h of W_q[h], W_Ks[b] = W_k[b],
         * rows in search order, so that R(t) W_Qs[a] h_t . R(j) W_Ks[b] h_j
         * is the mean of the heads' q . k before the model's 1/sqrt(d) */
        float *q = p->wq[l], *k = p->wk[l];
        memset(q, 0, (size_t)p->n_qhead * hd * hp->n_embd * sizeof(float));
        for (int h = 0; h < hp->n_head; h++)
            for (int j = 0; j < hd; j++) {
                const size_t row_i = (size_t)h * hd + model_row(j, hd, n_rot, neox);
                dequant_row(wq->type, (const char *)wq->data + row_i * wq->row_bytes, row, hp->n_embd);
                float *dst = q + ((size_t)(h / per_q) * hd + j) * hp->n_embd;
                for (int c = 0; c < hp->n_embd; c++) dst[c] += row[c] / (float)per_q;
            }
        for (int b = 0; b < hp->n_head_kv; b++)
            for (int j = 0; j < hd; j++) {
                const size_t row_i = (size_t)b * hd + model_row(j, hd, n_rot, neox);
                dequant_row(wk->type, (const char *)wk->data + row_i * wk->row_bytes,
                            k + ((size_t)b * hd + j) * hp->n_embd, hp->n_embd);
            }
    }
    free(row);
    return SUBQ_OK;
}
