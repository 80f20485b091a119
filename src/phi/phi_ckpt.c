/* Writing the completion-map trainer's output and checkpoint, and resuming
 * from it (phi_train.h). Same scheme as the search-projection trainer
 * (train/checkpoint.c): options that shape the result are recorded as
 * subq.phi.config.* and must match on --resume. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/fingerprint.h"
#include "model/model.h"
#include "phi/phi_train.h"
#include "quant/types.h"

typedef struct cfg_item {
    const char *key, *flag;
    int is_float;
    float f;
    uint64_t u;
} cfg_item;

#define MAX_CFG_ITEMS 32

static int cfg_items(const phi_train_config *c, const train_corpus *d, cfg_item *it) {
    int n = 0;
#define F(k, fl, v) it[n++] = (cfg_item){k, fl, 1, (float)(v), 0}
#define U(k, fl, v) it[n++] = (cfg_item){k, fl, 0, 0.0f, (uint64_t)(v)}
    U("seq", "--seq", d->p.seq);
    U("pack", "--no-pack", d->p.pack);
    F("eval_frac", "--eval-frac", d->p.eval_frac);
    U("batch", "--batch", c->batch);
    U("n_sink", "--n-sink", c->loss.n_sink);
    U("n_tail", "--n-tail", c->loss.n_tail);
    F("tau", "--tau", c->loss.tau);
    F("l_kl", "--l-kl", c->loss.l_kl);
    F("l_top", "--l-top", c->loss.l_top);
    F("l_fp", "--l-fp", c->loss.l_fp);
    F("l_z", "--l-z", c->loss.l_z);
    F("band", "--band", c->loss.band);
    F("huber", "--huber", c->loss.huber);
    F("lr", "--lr", c->lr);
    F("weight_decay", "--wd", c->weight_decay);
    F("adam_beta1", "(adam beta1)", c->beta1);
    F("adam_beta2", "(adam beta2)", c->beta2);
    F("adam_eps", "(adam eps)", c->eps);
    F("grad_clip", "--clip", c->grad_clip);
    F("wo_std", "--wo-std", c->wo_std);
    U("warmup", "--warmup", c->warmup);
    U("steps", "--steps", c->steps);
    U("seed", "--seed", c->seed);
#undef F
#undef U
    return n;
}

static const char *part_key[PHI_N_PARTS] = {"kl", "top", "fp", "z", "lse_err"};

/* "<weight name>.adam_m" / ".adam_v" */
static void moment_name(int layer, int which, int t, int is_v, char *buf, size_t cap) {
    char base[96];
    phi_tensor_name(layer, which, t, base, sizeof base);
    snprintf(buf, cap, "%s.adam_%c", base, is_v ? 'v' : 'm');
}

static subq_status write_one(const phi_train_state *st, const phi_train_config *cfg, const train_corpus *data,
                             const char *path, int ckpt, subq_error *err) {
    gguf_writer *w = gguf_writer_new();
    if (!w) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    subq_status s = phi_maps_to_writer(st->maps, w, err);
    if (s) goto done;
    cfg_item it[MAX_CFG_ITEMS];
    int n = cfg_items(cfg, data, it);
    char key[128], fp[17];
    for (int i = 0; i < n && !s; i++) {
        snprintf(key, sizeof key, "subq.phi.config.%s", it[i].key);
        s = it[i].is_float ? gguf_writer_set_f32(w, key, it[i].f) : gguf_writer_set_u64(w, key, it[i].u);
    }
    fingerprint_hex(data->fingerprint, fp);
    s = s ? s : gguf_writer_set_str(w, "subq.phi.data_fingerprint", fp);
    s = s ? s : gguf_writer_set_u64(w, "subq.phi.data_train_tokens", (uint64_t)data->train.n_tokens);
    s = s ? s : gguf_writer_set_u64(w, "subq.phi.step", (uint64_t)st->step);
    s = s ? s : gguf_writer_set_f32(w, "subq.phi.loss.train", (float)st->train_loss);
    for (int i = 0; i < PHI_N_PARTS && !s; i++) {
        snprintf(key, sizeof key, "subq.phi.loss.train_%s", part_key[i]);
        s = gguf_writer_set_f32(w, key, (float)st->train_part[i]);
    }
    if (st->have_eval) {
        s = s ? s : gguf_writer_set_f32(w, "subq.phi.loss.eval", (float)st->eval_loss);
        for (int i = 0; i < PHI_N_PARTS && !s; i++) {
            snprintf(key, sizeof key, "subq.phi.loss.eval_%s", part_key[i]);
            s = gguf_writer_set_f32(w, key, (float)st->eval_part[i]);
        }
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
        const phi_maps *p = st->maps;
        const phi_dims *d = &p->dims;
        for (int i = 0; i < p->n_sel && !s; i++)
            for (int which = 0; which < 2 && !s; which++)
                for (int t = 0; t < PHI_N_TENSORS && !s; t++)
                    for (int is_v = 0; is_v < 2 && !s; is_v++) {
                        char name[128];
                        uint64_t ne[3];
                        int nd = phi_tensor_gguf_shape(d, which, t, ne);
                        moment_name(p->layers[i], which, t, is_v, name, sizeof name);
                        size_t off = (size_t)i * p->layer_size + phi_param_offset(d, which, t, 0);
                        size_t cnt = (size_t)phi_n_maps(d, which) * phi_tensor_size(d, t);
                        s = gguf_writer_add_tensor(w, name, GGML_TYPE_F32, (uint32_t)nd, ne, (is_v ? st->v : st->m) + off,
                                                   cnt * sizeof(float), 0, err);
                    }
        if (s) goto done;
    }
    s = gguf_writer_write(w, path, err);
done:
    gguf_writer_free(w);
    return s;
}

subq_status phi_train_save(const phi_train_state *st, const phi_train_config *cfg, const train_corpus *data, int ckpt,
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

static subq_status get_u64(const gguf_file *f, const char *path, const char *key, uint64_t *out, subq_error *err) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return subq_fail(err, SUBQ_ERR_FORMAT, "%s: missing key '%s' (not a checkpoint?)", path, key);
    gguf_type t = kv->value.type;
    if (t != GGUF_TYPE_UINT8 && t != GGUF_TYPE_UINT16 && t != GGUF_TYPE_UINT32 && t != GGUF_TYPE_UINT64)
        return subq_fail(err, SUBQ_ERR_FORMAT, "%s: key '%s' is not an unsigned integer", path, key);
    *out = kv->value.v.u64;
    return SUBQ_OK;
}

subq_status phi_train_load_checkpoint(const char *path, const subq_model *m, const phi_train_config *cfg,
                                      const train_corpus *data, phi_train_state *st, subq_error *err) {
    gguf_file *f;
    subq_status s = gguf_open(path, &f, err);
    if (s) return s;
    phi_maps *p = NULL;
    if ((s = phi_maps_read(f, path, &p, err))) goto done;
    uint64_t mine = model_fingerprint(m);
    if (p->model_fingerprint != mine) {
        char a[17], b[17];
        fingerprint_hex(p->model_fingerprint, a);
        fingerprint_hex(mine, b);
        s = subq_fail(err, SUBQ_ERR_MISMATCH,
                      "%s was trained for another model (fingerprint %s, this model %s); retrain with subq train-phi -m MODEL",
                      path, a, b);
        goto done;
    }
    const phi_maps *q = st->maps;
    int same = p->n_sel == q->n_sel && p->dims.d_phi == q->dims.d_phi && p->dims.d_emb == q->dims.d_emb &&
               p->dims.d_hidden == q->dims.d_hidden && p->layer_size == q->layer_size;
    for (int i = 0; same && i < q->n_sel; i++) same = p->layers[i] == q->layers[i];
    if (!same) {
        s = subq_fail(err, SUBQ_ERR_ARG,
                      "%s has d_phi %d, d_emb %d, d_hidden %d over %d layers; this run asks for %d, %d, %d over %d layers "
                      "(resume with the same --d-phi / --d-emb / --d-hidden / --layers)",
                      path, p->dims.d_phi, p->dims.d_emb, p->dims.d_hidden, p->n_sel, q->dims.d_phi, q->dims.d_emb,
                      q->dims.d_hidden, q->n_sel);
        goto done;
    }
    cfg_item it[MAX_CFG_ITEMS];
    int n = cfg_items(cfg, data, it);
    for (int i = 0; i < n; i++) {
        char key[128], was[64] = "?", now[64];
        snprintf(key, sizeof key, "subq.phi.config.%s", it[i].key);
        const gguf_kv *kv = gguf_find_kv(f, key);
        int ok;
        if (it[i].is_float) {
            ok = kv && kv->value.type == GGUF_TYPE_FLOAT32 && (float)kv->value.v.f64 == it[i].f;
            if (kv && kv->value.type == GGUF_TYPE_FLOAT32) snprintf(was, sizeof was, "%g", kv->value.v.f64);
            snprintf(now, sizeof now, "%g", (double)it[i].f);
        } else {
            ok = kv && kv->value.type == GGUF_TYPE_UINT64 && kv->value.v.u64 == it[i].u;
            if (kv && kv->value.type == GGUF_TYPE_UINT64) snprintf(was, sizeof was, "%" PRIu64, kv->value.v.u64);
            snprintf(now, sizeof now, "%" PRIu64, it[i].u);
        }
        if (!ok) {
            s = subq_fail(err, SUBQ_ERR_ARG, "%s was written with %s %s but this run has %s %s; resume with the same options",
                          path, it[i].flag, was, it[i].flag, now);
            goto done;
        }
    }
    char fp[17], want_fp[17];
    subq_error e2 = {0};
    fingerprint_hex(data->fingerprint, want_fp);
    if (gguf_get_str(f, "subq.phi.data_fingerprint", fp, sizeof fp, &e2) || strcmp(fp, want_fp) != 0) {
        s = subq_fail(err, SUBQ_ERR_ARG, "%s was trained on other data (data fingerprint %s, this run %s); resume with the same data files",
                      path, e2.code ? "missing" : fp, want_fp);
        goto done;
    }
    uint64_t step = 0, cursor = 0, rng = 0;
    if ((s = get_u64(f, path, "subq.phi.step", &step, err)) || (s = get_u64(f, path, "subq.train.cursor", &cursor, err)) ||
        (s = get_u64(f, path, "subq.train.rng", &rng, err)))
        goto done;
    const phi_dims *d = &q->dims;
    for (int i = 0; i < q->n_sel; i++)
        for (int which = 0; which < 2; which++)
            for (int t = 0; t < PHI_N_TENSORS; t++)
                for (int is_v = 0; is_v < 2; is_v++) {
                    char name[128];
                    moment_name(q->layers[i], which, t, is_v, name, sizeof name);
                    size_t off = (size_t)i * q->layer_size + phi_param_offset(d, which, t, 0);
                    size_t cnt = (size_t)phi_n_maps(d, which) * phi_tensor_size(d, t);
                    const gguf_tensor *gt = gguf_find_tensor(f, name);
                    if (!gt || gt->type != GGML_TYPE_F32 || gt->n_elements != cnt) {
                        s = subq_fail(err, SUBQ_ERR_FORMAT, "%s: optimiser tensor %s is missing or malformed (not a checkpoint?)",
                                      path, name);
                        goto done;
                    }
                    memcpy((is_v ? st->v : st->m) + off, gt->data, cnt * sizeof(float));
                }
    memcpy(st->maps->data, p->data, st->n_params * sizeof(float));
    st->step = (int64_t)step;
    st->cursor = cursor;
    st->rng = rng;
done:
    phi_maps_free(p);
    gguf_close(f);
    return s;
}
