#include "train/checkpoint.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/fingerprint.h"
#include "model/model.h"
#include "quant/types.h"

/* Options that shape the result: a resumed run must use the same ones.
 * absent_is_zero: files written before the option existed lack the key and
 * were trained as with value 0, so a missing key matches 0 (and only 0). */
typedef struct cfg_item {
    const char *key, *flag;
    int is_float;
    float f;
    uint64_t u;
    int absent_is_zero;
} cfg_item;

static int cfg_items(const train_search_config *c, const train_corpus *d, cfg_item *it) {
    int n = 0;
#define F(k, fl, v) it[n++] = (cfg_item){k, fl, 1, (float)(v), 0, 0}
#define U(k, fl, v) it[n++] = (cfg_item){k, fl, 0, 0.0f, (uint64_t)(v), 0}
#define U0(k, fl, v) it[n++] = (cfg_item){k, fl, 0, 0.0f, (uint64_t)(v), 1}
    U("seq", "--seq", d->p.seq);
    U("pack", "--no-pack", d->p.pack);
    F("eval_frac", "--eval-frac", d->p.eval_frac);
    U("batch", "--batch", c->batch);
    U("k_pos", "--k-pos", c->loss.k_pos);
    U("head_agg", "--head-agg", c->loss.agg);
    F("tau", "--tau", c->loss.tau);
    F("tau_kl", "--tau-kl", c->loss.tau_kl);
    F("alpha", "--alpha", c->loss.alpha);
    F("beta", "--beta", c->loss.beta);
    F("lr", "--lr", c->lr);
    F("weight_decay", "--wd", c->weight_decay);
    F("adam_beta1", "(adam beta1)", c->beta1);
    F("adam_beta2", "(adam beta2)", c->beta2);
    F("adam_eps", "(adam eps)", c->eps);
    F("grad_clip", "--clip", c->grad_clip);
    F("init_std", "--init-std", c->init_std);
    U("warmup", "--warmup", c->warmup);
    U("steps", "--steps", c->steps);
    U("seed", "--seed", c->seed);
    /* the retrieval-eligible key set (keys the runtime always attends are left out) */
    U0("n_sink", "--sink", c->loss.n_sink);
    U0("n_tail", "--tail", c->loss.n_tail);
#undef F
#undef U
#undef U0
    return n;
}
#define MAX_CFG_ITEMS 32

static void mv_names(int layer, char names[4][96]) {
    snprintf(names[0], 96, "blk.%d.indexer.proj.adam_m", layer);
    snprintf(names[1], 96, "blk.%d.indexer.proj.adam_v", layer);
    snprintf(names[2], 96, "blk.%d.indexer.attn_k.adam_m", layer);
    snprintf(names[3], 96, "blk.%d.indexer.attn_k.adam_v", layer);
}

static subq_status write_one(const train_state *st, const train_search_config *cfg, const train_corpus *data,
                             const char *path, int ckpt, subq_error *err) {
    gguf_writer *w = gguf_writer_new();
    if (!w) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    subq_status s = search_proj_to_writer(st->proj, w, err);
    if (s) goto done;
    cfg_item it[MAX_CFG_ITEMS];
    int n = cfg_items(cfg, data, it);
    char key[128], fp[17];
    for (int i = 0; i < n && !s; i++) {
        snprintf(key, sizeof key, "subq.search.config.%s", it[i].key);
        if (!strcmp(it[i].key, "head_agg")) s = gguf_writer_set_str(w, key, teacher_agg_name((teacher_agg)it[i].u));
        else if (it[i].is_float) s = gguf_writer_set_f32(w, key, it[i].f);
        else s = gguf_writer_set_u64(w, key, it[i].u);
    }
    fingerprint_hex(data->fingerprint, fp);
    s = s ? s : gguf_writer_set_str(w, "subq.search.data_fingerprint", fp);
    s = s ? s : gguf_writer_set_u64(w, "subq.search.data_train_tokens", (uint64_t)data->train.n_tokens);
    s = s ? s : gguf_writer_set_u64(w, "subq.search.step", (uint64_t)st->step);
    s = s ? s : gguf_writer_set_f32(w, "subq.search.loss.train", (float)st->train_loss);
    s = s ? s : gguf_writer_set_f32(w, "subq.search.loss.train_nce", (float)st->train_nce);
    s = s ? s : gguf_writer_set_f32(w, "subq.search.loss.train_kl", (float)st->train_kl);
    if (st->have_eval) {
        s = s ? s : gguf_writer_set_f32(w, "subq.search.loss.eval", (float)st->eval_loss);
        s = s ? s : gguf_writer_set_f32(w, "subq.search.loss.eval_nce", (float)st->eval_nce);
        s = s ? s : gguf_writer_set_f32(w, "subq.search.loss.eval_kl", (float)st->eval_kl);
    }
    if (ckpt) {
        s = s ? s : gguf_writer_set_u64(w, "subq.train.cursor", st->cursor);
        s = s ? s : gguf_writer_set_u64(w, "subq.train.rng", st->rng);
    }
    if (s) {
        s = subq_fail(err, s, "out of memory building the metadata of %s", path);
        goto done;
    }
    if (ckpt) {
        const search_proj *p = st->proj;
        uint64_t ne[2] = {(uint64_t)p->n_embd, (uint64_t)p->d_search};
        size_t per = (size_t)p->n_embd * p->d_search;
        for (int i = 0; i < p->n_sel && !s; i++) {
            char names[4][96];
            mv_names(p->layers[i], names);
            /* same layout as the weights: block 2i is W_Qs, 2i+1 is W_Ks */
            const float *src[4] = {st->m + 2 * i * per, st->v + 2 * i * per, st->m + (2 * i + 1) * per,
                                   st->v + (2 * i + 1) * per};
            for (int k = 0; k < 4 && !s; k++)
                s = gguf_writer_add_tensor(w, names[k], GGML_TYPE_F32, 2, ne, src[k], per * sizeof(float), 0, err);
        }
        if (s) goto done;
    }
    s = gguf_writer_write(w, path, err);
done:
    gguf_writer_free(w);
    return s;
}

subq_status train_save(const train_state *st, const train_search_config *cfg, const train_corpus *data, int ckpt,
                       subq_error *err) {
    subq_status s = write_one(st, cfg, data, cfg->out_path, 0, err);
    if (s || !ckpt) return s;
    size_t L = strlen(cfg->out_path) + 6;
    char *cp = malloc(L);
    if (!cp) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    snprintf(cp, L, "%s.ckpt", cfg->out_path);
    s = write_one(st, cfg, data, cp, 1, err);
    free(cp);
    return s;
}

/* an unsigned integer key of any width */
static subq_status get_u64(const gguf_file *f, const char *path, const char *key, uint64_t *out, subq_error *err) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return subq_fail(err, SUBQ_ERR_FORMAT, "%s: missing key '%s' (not a checkpoint?)", path, key);
    gguf_type t = kv->value.type;
    if (t != GGUF_TYPE_UINT8 && t != GGUF_TYPE_UINT16 && t != GGUF_TYPE_UINT32 && t != GGUF_TYPE_UINT64)
        return subq_fail(err, SUBQ_ERR_FORMAT, "%s: key '%s' is not an unsigned integer", path, key);
    *out = kv->value.v.u64;
    return SUBQ_OK;
}

subq_status train_load_checkpoint(const char *path, const subq_model *m, const train_search_config *cfg,
                                  const train_corpus *data, train_state *st, subq_error *err) {
    gguf_file *f;
    subq_status s = gguf_open(path, &f, err);
    if (s) return s;
    search_proj *p = NULL;
    if ((s = search_proj_read(f, path, &p, err))) goto done;
    uint64_t mine = model_fingerprint(m);
    if (p->model_fingerprint != mine) {
        char a[17], b[17];
        fingerprint_hex(p->model_fingerprint, a);
        fingerprint_hex(mine, b);
        s = subq_fail(err, SUBQ_ERR_MISMATCH,
                      "%s was trained for another model (fingerprint %s, this model %s); retrain with subq train-search -m MODEL",
                      path, a, b);
        goto done;
    }
    const search_proj *q = st->proj;
    int same_layers = p->n_sel == q->n_sel;
    for (int i = 0; same_layers && i < q->n_sel; i++) same_layers = p->layers[i] == q->layers[i];
    if (p->d_search != q->d_search || !same_layers || p->n_embd != q->n_embd) {
        s = subq_fail(err, SUBQ_ERR_ARG, "%s has d_search %d over %d layers; this run asks for d_search %d over %d layers "
                      "(resume with the same --d-search / --layers / --reserve)",
                      path, p->d_search, p->n_sel, q->d_search, q->n_sel);
        goto done;
    }
    /* training options */
    cfg_item it[MAX_CFG_ITEMS];
    int n = cfg_items(cfg, data, it);
    for (int i = 0; i < n; i++) {
        char key[128];
        snprintf(key, sizeof key, "subq.search.config.%s", it[i].key);
        const gguf_kv *kv = gguf_find_kv(f, key);
        int same;
        char was[64] = "?", now[64];
        if (!strcmp(it[i].key, "head_agg")) {
            const char *want = teacher_agg_name((teacher_agg)it[i].u);
            same = kv && kv->value.type == GGUF_TYPE_STRING && kv->value.v.str.len == strlen(want) &&
                   !memcmp(kv->value.v.str.data, want, strlen(want));
            if (kv && kv->value.type == GGUF_TYPE_STRING)
                snprintf(was, sizeof was, "%.*s", (int)(kv->value.v.str.len < 32 ? kv->value.v.str.len : 32),
                         kv->value.v.str.data);
            snprintf(now, sizeof now, "%s", want);
        } else if (it[i].is_float) {
            same = kv && kv->value.type == GGUF_TYPE_FLOAT32 && (float)kv->value.v.f64 == it[i].f;
            if (kv && kv->value.type == GGUF_TYPE_FLOAT32) snprintf(was, sizeof was, "%g", kv->value.v.f64);
            snprintf(now, sizeof now, "%g", (double)it[i].f);
        } else if (!kv && it[i].absent_is_zero) {
            same = it[i].u == 0;
            snprintf(was, sizeof was, "0 (not recorded)");
            snprintf(now, sizeof now, "%" PRIu64, it[i].u);
        } else {
            same = kv && kv->value.type == GGUF_TYPE_UINT64 && kv->value.v.u64 == it[i].u;
            if (kv && kv->value.type == GGUF_TYPE_UINT64) snprintf(was, sizeof was, "%" PRIu64, kv->value.v.u64);
            snprintf(now, sizeof now, "%" PRIu64, it[i].u);
        }
        if (!same) {
            s = subq_fail(err, SUBQ_ERR_ARG, "%s was written with %s %s but this run has %s %s; resume with the same options",
                          path, it[i].flag, was, it[i].flag, now);
            goto done;
        }
    }
    char fp[17], want_fp[17];
    subq_error e2 = {0};
    fingerprint_hex(data->fingerprint, want_fp);
    if (gguf_get_str(f, "subq.search.data_fingerprint", fp, sizeof fp, &e2) || strcmp(fp, want_fp) != 0) {
        s = subq_fail(err, SUBQ_ERR_ARG, "%s was trained on other data (data fingerprint %s, this run %s); resume with the same data files",
                      path, e2.code ? "missing" : fp, want_fp);
        goto done;
    }
    uint64_t step = 0, cursor = 0, rng = 0;
    if ((s = get_u64(f, path, "subq.search.step", &step, err)) || (s = get_u64(f, path, "subq.train.cursor", &cursor, err)) ||
        (s = get_u64(f, path, "subq.train.rng", &rng, err)))
        goto done;
    /* Adam moments */
    size_t per = (size_t)q->n_embd * q->d_search;
    for (int i = 0; i < q->n_sel; i++) {
        char names[4][96];
        mv_names(q->layers[i], names);
        float *dst[4] = {st->m + 2 * i * per, st->v + 2 * i * per, st->m + (2 * i + 1) * per, st->v + (2 * i + 1) * per};
        for (int k = 0; k < 4; k++) {
            const gguf_tensor *t = gguf_find_tensor(f, names[k]);
            if (!t || t->type != GGML_TYPE_F32 || t->n_elements != per) {
                s = subq_fail(err, SUBQ_ERR_FORMAT, "%s: optimiser tensor %s is missing or malformed (not a checkpoint?)",
                              path, names[k]);
                goto done;
            }
            memcpy(dst[k], t->data, per * sizeof(float));
        }
    }
    memcpy(st->proj->data, p->data, st->n_params * sizeof(float));
    st->step = (int64_t)step;
    st->cursor = cursor;
    st->rng = rng;
done:
    search_proj_free(p);
    gguf_close(f);
    return s;
}
