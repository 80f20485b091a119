/* Testing aid (train_search.h): everything the library computes on one
 * sequence, written out so an independent numpy reference can recompute it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/rng.h"
#include "model/context.h"
#include "quant/types.h"
#include "train/search/search_eval.h"
#include "train/search/search_loss.h"
#include "train/capture.h"
#include "train/search/train_search.h"

subq_status train_search_dump_teacher(subq_model *m, const train_corpus *data, const train_search_config *cfg,
                                      const char *path, subq_error *err) {
    subq_context *ctx = NULL;
    train_capture *cap = NULL;
    search_proj *proj = NULL;
    gguf_writer *w = NULL;
    const int seq = data->p.seq;
    int32_t *tok = malloc((size_t)seq * sizeof(int32_t)), *pos = malloc((size_t)seq * sizeof(int32_t));
    int32_t *seg = malloc((size_t)seq * sizeof(int32_t));
    float *dense = NULL;
    subq_status s = SUBQ_OK;
    if (!tok || !pos || !seg) {
        s = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
        goto done;
    }
    subq_context_params cp = subq_context_default_params();
    cp.n_ctx = seq;
    cp.n_threads = cfg->n_threads;
    if ((s = subq_context_new(m, &cp, &ctx, err))) goto done;
    if ((s = search_proj_new(m->hp.n_layer, m->hp.n_embd, cfg->d_search, cfg->layers, cfg->n_layers,
                             model_fingerprint(m), &proj, err)))
        goto done;
    uint64_t rng = rng_seed(cfg->seed);
    search_proj_init_normal(proj, cfg->init_std, &rng);
    if ((s = train_capture_new(m, proj->layers, proj->n_sel, seq, &cap, err))) goto done;
    int T = corpus_get(data, &data->train, 0, tok, pos, seg);
    if ((s = train_capture_run(cap, ctx, tok, pos, seg, T, err))) goto done;

    if (!(w = gguf_writer_new()) || !(dense = calloc((size_t)proj->n_sel * T * T, sizeof(float)))) {
        s = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
        goto done;
    }
    s = gguf_writer_set_str(w, "general.architecture", "subq-teacher-dump");
    s = s ? s : gguf_writer_set_arr(w, "dump.tokens", GGUF_TYPE_INT32, tok, (uint64_t)T);
    s = s ? s : gguf_writer_set_arr(w, "dump.pos", GGUF_TYPE_INT32, pos, (uint64_t)T);
    s = s ? s : gguf_writer_set_arr(w, "dump.seg", GGUF_TYPE_INT32, seg, (uint64_t)T);
    s = s ? s : gguf_writer_set_arr(w, "dump.layers", GGUF_TYPE_INT32, proj->layers, (uint64_t)proj->n_sel);
    s = s ? s : gguf_writer_set_str(w, "dump.head_agg", teacher_agg_name(cfg->loss.agg));
    s = s ? s : gguf_writer_set_f32(w, "dump.tau", cfg->loss.tau);
    s = s ? s : gguf_writer_set_f32(w, "dump.tau_kl", cfg->loss.tau_kl);
    s = s ? s : gguf_writer_set_u32(w, "dump.k_pos", (uint32_t)cfg->loss.k_pos);
    s = s ? s : gguf_writer_set_u32(w, "dump.n_sink", (uint32_t)cfg->loss.n_sink);
    s = s ? s : gguf_writer_set_u32(w, "dump.n_tail", (uint32_t)cfg->loss.n_tail);
    s = s ? s : gguf_writer_set_arr(w, "dump.eval_k", GGUF_TYPE_INT32, cfg->eval_k, (uint64_t)cfg->n_eval_k);
    if (s) {
        s = subq_fail(err, s, "out of memory");
        goto done;
    }
    for (int i = 0; i < proj->n_sel && !s; i++) {
        int l = proj->layers[i];
        search_layer_data x = train_capture_layer(cap, i, seg);
        /* dense teacher: row t holds p over its retrieval-eligible keys [start + n_sink, t - n_tail]
         * (renormalised over them), zeros elsewhere; a row with no such key is all zeros */
        float *P = dense + (size_t)i * T * T, *scratch = malloc((size_t)T * sizeof(float));
        float *kt = malloc((size_t)T * cap->dk * sizeof(float));
        if (!scratch || !kt) {
            free(scratch);
            free(kt);
            s = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
            break;
        }
        teacher_keys_transpose(x.k, T, &x.shape, kt);
        for (int t = 0; t < T; t++) {
            int s0 = t;
            while (s0 > 0 && seg[s0 - 1] == seg[t]) s0--;
            const int lo = s0 + cfg->loss.n_sink, hi = t - cfg->loss.n_tail;
            if (lo > hi) continue;
            teacher_row_mid(x.q + (size_t)t * cap->dq, kt, T, &x.shape, s0, t, lo, hi, cfg->loss.agg, scratch,
                            P + (size_t)t * T + lo);
        }
        free(scratch);
        free(kt);
        search_loss_sums sums;
        search_eval_acc acc;
        search_eval_init(&acc, cfg->eval_k, cfg->n_eval_k);
        if ((s = search_loss_layer(&x, proj->wq[l], proj->wk[l], proj->d_search, &cfg->loss, 1.0f, NULL, NULL, &sums,
                                   0, ctx->n_threads, err)) ||
            (s = search_eval_layer(&x, proj->wq[l], proj->wk[l], proj->d_search, cfg->loss.agg, cfg->loss.n_sink,
                                   cfg->loss.n_tail, &acc, ctx->n_threads, err)))
            break;
        char key[128];
        double ml[SEARCH_EVAL_MAX_K], mo[SEARCH_EVAL_MAX_K], rl[SEARCH_EVAL_MAX_K], ro[SEARCH_EVAL_MAX_K];
        double mw[SEARCH_EVAL_MAX_K], rw[SEARCH_EVAL_MAX_K];
        int64_t nq[SEARCH_EVAL_MAX_K];
        for (int k = 0; k < acc.n_k; k++) {
            double d = acc.n_queries[k] > 0 ? (double)acc.n_queries[k] : 1.0;
            ml[k] = acc.mass_learned[k] / d;
            mo[k] = acc.mass_oracle[k] / d;
            rl[k] = acc.recall_learned[k] / d;
            ro[k] = acc.recall_oracle[k] / d;
            mw[k] = acc.mass_window[k] / d;
            rw[k] = acc.recall_window[k] / d;
            nq[k] = acc.n_queries[k];
        }
        struct {
            const char *name;
            const void *v;
            gguf_type type;
        } arrs[] = {{"mass_learned", ml, GGUF_TYPE_FLOAT64}, {"mass_oracle", mo, GGUF_TYPE_FLOAT64},
                    {"recall_learned", rl, GGUF_TYPE_FLOAT64}, {"recall_oracle", ro, GGUF_TYPE_FLOAT64},
                    {"mass_window", mw, GGUF_TYPE_FLOAT64},    {"recall_window", rw, GGUF_TYPE_FLOAT64},
                    {"n_queries_k", nq, GGUF_TYPE_INT64}};
        for (size_t a = 0; a < sizeof arrs / sizeof arrs[0] && !s; a++) {
            snprintf(key, sizeof key, "dump.l%d.%s", l, arrs[a].name);
            s = gguf_writer_set_arr(w, key, arrs[a].type, arrs[a].v, (uint64_t)acc.n_k);
        }
        snprintf(key, sizeof key, "dump.l%d.nce_sum", l);
        s = s ? s : gguf_writer_set_arr(w, key, GGUF_TYPE_FLOAT64, &sums.nce, 1);
        snprintf(key, sizeof key, "dump.l%d.kl_sum", l);
        s = s ? s : gguf_writer_set_arr(w, key, GGUF_TYPE_FLOAT64, &sums.kl, 1);
        snprintf(key, sizeof key, "dump.l%d.n_queries", l);
        s = s ? s : gguf_writer_set_u32(w, key, (uint32_t)sums.n_queries);
        if (s) {
            s = subq_fail(err, s, "out of memory");
            break;
        }
        struct {
            const char *name;
            const float *data;
            uint64_t cols, rows;
        } tens[] = {{"h", x.h, (uint64_t)cap->d, (uint64_t)T},           {"q", x.q, (uint64_t)cap->dq, (uint64_t)T},
                    {"k", x.k, (uint64_t)cap->dk, (uint64_t)T},           {"teacher", P, (uint64_t)T, (uint64_t)T},
                    {"wq", proj->wq[l], (uint64_t)cap->d, (uint64_t)proj->d_search},
                    {"wk", proj->wk[l], (uint64_t)cap->d, (uint64_t)proj->d_search}};
        for (size_t a = 0; a < sizeof tens / sizeof tens[0] && !s; a++) {
            char name[64];
            snprintf(name, sizeof name, "l%d.%s", l, tens[a].name);
            uint64_t ne[2] = {tens[a].cols, tens[a].rows};
            s = gguf_writer_add_tensor(w, name, GGML_TYPE_F32, 2, ne, tens[a].data, ne[0] * ne[1] * sizeof(float), 0,
                                       err);
        }
    }
    if (!s) s = gguf_writer_write(w, path, err);
done:
    gguf_writer_free(w);
    free(dense);
    free(tok);
    free(pos);
    free(seg);
    train_capture_free(cap);
    search_proj_free(proj);
    subq_context_free(ctx);
    return s;
}
