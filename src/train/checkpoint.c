/* Writing a training run's output and checkpoint, and resuming from it
 * (the format is described in task.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/fingerprint.h"
#include "model/model.h"
#include "quant/types.h"
#include "search/search_proj.h"
#include "train/task.h"

/* Options that shape the result, the driver's then the task's. */
static int options(const trainer *t, train_option *o) {
    const subq_train_params *c = t->cfg;
    const subq_corpus_params *d = &t->data->p;
    int n = 0;
    o[n++] = train_opt_u64("seq", (uint64_t)d->seq);
    o[n++] = train_opt_u64("pack", (uint64_t)d->pack);
    o[n++] = train_opt_f32("eval_frac", d->eval_frac);
    o[n++] = train_opt_u64("batch", (uint64_t)c->batch);
    o[n++] = train_opt_u64_since("grad_accum", (uint64_t)c->grad_accum, 1);
    o[n++] = train_opt_f32("lr", c->lr);
    o[n++] = train_opt_f32("weight_decay", c->weight_decay);
    o[n++] = train_opt_f32("adam_beta1", c->beta1);
    o[n++] = train_opt_f32("adam_beta2", c->beta2);
    o[n++] = train_opt_f32("adam_eps", c->eps);
    o[n++] = train_opt_f32("grad_clip", c->grad_clip);
    o[n++] = train_opt_u64("warmup", (uint64_t)c->warmup);
    o[n++] = train_opt_u64("steps", (uint64_t)c->steps);
    o[n++] = train_opt_u64("seed", c->seed);
    return n + t->task.ops->options(t->task.self, o + n);
}

static subq_status set_losses(gguf_writer *w, const char *prefix, const char *which, double loss, const double *part,
                              const train_task_ops *ops) {
    char key[160];
    snprintf(key, sizeof key, "%s.loss.%s", prefix, which);
    subq_status s = gguf_writer_set_f32(w, key, (float)loss);
    for (int i = 0; i < ops->n_parts && !s; i++) {
        snprintf(key, sizeof key, "%s.loss.%s_%s", prefix, which, ops->part_names[i]);
        s = gguf_writer_set_f32(w, key, (float)part[i]);
    }
    return s;
}

/* The shortest %g form of f that reads back as f. */
static void shortest_float(float f, char *buf, size_t cap) {
    for (int digits = 6; digits <= 9; digits++) {
        snprintf(buf, cap, "%.*g", digits, f);
        if (strtof(buf, NULL) == f) return;
    }
}

size_t train_describe(const trainer *t, char *buf, size_t cap) {
    train_option o[TRAIN_MAX_OPTIONS];
    const int n = options(t, o);
    char fp[17];
    size_t len = 0;
    fingerprint_hex(model_fingerprint(t->model), fp);
    len += (size_t)snprintf(buf + len, len < cap ? cap - len : 0, "model fingerprint=%s\n", fp);
    fingerprint_hex(t->data->fingerprint, fp);
    len += (size_t)snprintf(buf + len, len < cap ? cap - len : 0, "data fingerprint=%s\n", fp);
    for (int i = 0; i < n; i++) {
        const size_t room = len < cap ? cap - len : 0;
        if (o[i].type == TRAIN_OPT_STR) len += (size_t)snprintf(buf + len, room, "%s=%s\n", o[i].key, o[i].s);
        else if (o[i].type == TRAIN_OPT_F32) {
            char f[32];
            shortest_float(o[i].f, f, sizeof f);
            len += (size_t)snprintf(buf + len, room, "%s=%s\n", o[i].key, f);
        }
        else len += (size_t)snprintf(buf + len, room, "%s=%llu\n", o[i].key, (unsigned long long)o[i].u);
    }
    return len;
}

static subq_status write_one(const trainer *t, const char *path, int ckpt, subq_error *err) {
    const train_task_ops *ops = t->task.ops;
    const char *prefix = ops->prefix;
    gguf_writer *w = gguf_writer_new();
    if (!w) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    subq_status s = ops->write_weights(t->task.self, w, err);
    if (s) goto done;
    train_option o[TRAIN_MAX_OPTIONS];
    const int n = options(t, o);
    char key[160], fp[17];
    for (int i = 0; i < n && !s; i++) {
        snprintf(key, sizeof key, "%s.config.%s", prefix, o[i].key);
        if (o[i].type == TRAIN_OPT_STR) s = gguf_writer_set_str(w, key, o[i].s);
        else if (o[i].type == TRAIN_OPT_F32) s = gguf_writer_set_f32(w, key, o[i].f);
        else s = gguf_writer_set_u64(w, key, o[i].u);
    }
    fingerprint_hex(t->data->fingerprint, fp);
    snprintf(key, sizeof key, "%s.data_fingerprint", prefix);
    s = s ? s : gguf_writer_set_str(w, key, fp);
    snprintf(key, sizeof key, "%s.data_train_tokens", prefix);
    s = s ? s : gguf_writer_set_u64(w, key, (uint64_t)t->data->train.n_tokens);
    snprintf(key, sizeof key, "%s.step", prefix);
    s = s ? s : gguf_writer_set_u64(w, key, (uint64_t)t->step);
    s = s ? s : set_losses(w, prefix, "train", t->train_loss, t->train_part, ops);
    if (t->have_eval) s = s ? s : set_losses(w, prefix, "eval", t->eval_loss, t->eval_part, ops);
    if (ckpt) {
        s = s ? s : gguf_writer_set_u64(w, "subq.train.cursor", t->cursor);
        s = s ? s : gguf_writer_set_u64(w, "subq.train.rng", t->rng);
    }
    if (s) {
        s = subq_fail(err, s, "out of memory building the metadata of %s", path);
        goto done;
    }
    const int nb = ckpt ? ops->n_blocks(t->task.self) : 0;
    for (int i = 0; i < nb && !s; i++) {
        train_block b;
        ops->block(t->task.self, i, &b);
        for (int is_v = 0; is_v < 2 && !s; is_v++) {
            char name[160];
            snprintf(name, sizeof name, "%s.adam_%c", b.name, is_v ? 'v' : 'm');
            s = gguf_writer_add_tensor(w, name, GGML_TYPE_F32, b.n_dims, b.ne, (is_v ? t->v : t->m) + b.offset,
                                       b.count * sizeof(float), 0, err);
        }
    }
    if (!s) s = gguf_writer_write(w, path, err);
done:
    gguf_writer_free(w);
    return s;
}

subq_status train_save(const trainer *t, int ckpt, subq_error *err) {
    subq_status s = write_one(t, t->cfg->out_path, 0, err);
    return s || !ckpt ? s : write_one(t, t->ckpt_path, 1, err);
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

/* Does the recorded value of option o match this run's? was/now describe both. */
static int same_option(const gguf_kv *kv, const train_option *o, char was[64], char now[64]) {
    snprintf(was, 64, "?");
    switch (o->type) {
    case TRAIN_OPT_STR: {
        const size_t n = strlen(o->s);
        snprintf(now, 64, "%s", o->s);
        if (!kv || kv->value.type != GGUF_TYPE_STRING) return 0;
        const gguf_str *v = &kv->value.v.str;
        snprintf(was, 64, "%.*s", (int)(v->len < 32 ? v->len : 32), v->data);
        return v->len == n && !memcmp(v->data, o->s, n);
    }
    case TRAIN_OPT_F32:
        snprintf(now, 64, "%g", (double)o->f);
        if (!kv || kv->value.type != GGUF_TYPE_FLOAT32) return 0;
        snprintf(was, 64, "%g", kv->value.v.f64);
        return (float)kv->value.v.f64 == o->f;
    default:
        snprintf(now, 64, "%" PRIu64, o->u);
        if (!kv && o->has_absent) {
            snprintf(was, 64, "%" PRIu64 " (not recorded)", o->absent);
            return o->u == o->absent;
        }
        if (!kv || kv->value.type != GGUF_TYPE_UINT64) return 0;
        snprintf(was, 64, "%" PRIu64, kv->value.v.u64);
        return kv->value.v.u64 == o->u;
    }
}

subq_status train_load(trainer *t, const char *path, subq_error *err) {
    const train_task_ops *ops = t->task.ops;
    const char *prefix = ops->prefix;
    gguf_file *f;
    subq_status s = gguf_open(path, &f, err);
    if (s) return s;
    if ((s = ops->read_weights(t->task.self, t, f, path, err))) goto done;
    train_option o[TRAIN_MAX_OPTIONS];
    const int n = options(t, o);
    char key[160];
    for (int i = 0; i < n; i++) {
        char was[64], now[64];
        snprintf(key, sizeof key, "%s.config.%s", prefix, o[i].key);
        if (!same_option(gguf_find_kv(f, key), &o[i], was, now)) {
            s = subq_fail(err, SUBQ_ERR_ARG, "%s was written with option %s = %s but this run has %s; resume with the same options",
                          path, o[i].key, was, now);
            goto done;
        }
    }
    char fp[17], want_fp[17];
    subq_error e2 = {0};
    fingerprint_hex(t->data->fingerprint, want_fp);
    snprintf(key, sizeof key, "%s.data_fingerprint", prefix);
    if (gguf_get_str(f, key, fp, sizeof fp, &e2) || strcmp(fp, want_fp) != 0) {
        s = subq_fail(err, SUBQ_ERR_ARG, "%s was trained on other data (data fingerprint %s, this run %s); resume with the same data files",
                      path, e2.code ? "missing" : fp, want_fp);
        goto done;
    }
    uint64_t step = 0, cursor = 0, rng = 0;
    snprintf(key, sizeof key, "%s.step", prefix);
    if ((s = get_u64(f, path, key, &step, err)) || (s = get_u64(f, path, "subq.train.cursor", &cursor, err)) ||
        (s = get_u64(f, path, "subq.train.rng", &rng, err)))
        goto done;
    const int nb = ops->n_blocks(t->task.self);
    for (int i = 0; i < nb; i++) {
        train_block b;
        ops->block(t->task.self, i, &b);
        for (int is_v = 0; is_v < 2; is_v++) {
            char name[160];
            snprintf(name, sizeof name, "%s.adam_%c", b.name, is_v ? 'v' : 'm');
            const gguf_tensor *gt = gguf_find_tensor(f, name);
            if (!gt || gt->type != GGML_TYPE_F32 || gt->n_elements != b.count) {
                s = subq_fail(err, SUBQ_ERR_FORMAT, "%s: optimiser tensor %s is missing or malformed (not a checkpoint?)",
                              path, name);
                goto done;
            }
            memcpy((is_v ? t->v : t->m) + b.offset, gt->data, b.count * sizeof(float));
        }
    }
    t->step = (int64_t)step;
    t->cursor = cursor;
    t->rng = rng;
done:
    gguf_close(f);
    return s;
}
