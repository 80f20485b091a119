/* Session files (format in session.h). */
#include "api/session.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attn.h"
#include "base/error.h"
#include "quant/types.h"

/* Bytes of the latest committed slots a resume verifies (kv_file_verify):
 * a second's read at worst, so a 1M-token file (71 GB) still opens at once. */
#define KV_RESUME_VERIFY_BYTES ((size_t)1 << 30)

/* "L3: sparse exact k=64 ...\n" for each sparse layer, or "full" (malloc'd). */
static char *plan_text(const subq_context *c) {
    const int n_layer = c->model->hp.n_layer;
    enum { LINE = 512 };
    char *s = malloc((size_t)n_layer * (LINE + 16) + 8), line[LINE];
    if (!s) return NULL;
    size_t n = 0;
    for (int l = 0; l < n_layer; l++) {
        attn_stage_describe(c->stages[l], line, sizeof line);
        if (line[0]) n += (size_t)sprintf(s + n, "L%d: %s\n", l, line);
    }
    if (n == 0) strcpy(s, "full");
    else s[n - 1] = '\0';
    return s;
}

/* attn_stage_restore from a saved index when there is one; an index that
 * does not check out (damaged, stale, another plan's) is only a cache of
 * what the keys give: the stage is rebuilt from them. */
static subq_status restore_stage(attn_stage *st, const kv_cache *kv, const float *keys, int n, const gguf_tensor *index,
                                 subq_error *err) {
    if (index && keys && !attn_stage_restore(st, kv, keys, n, index->data, (size_t)index->n_bytes, err)) return SUBQ_OK;
    return attn_stage_restore(st, kv, keys, n, NULL, 0, err);
}

subq_status subq_context_save(const subq_context *c, const char *path, subq_error *err) {
    const kv_cache *kv = &c->kv;
    const model_hparams *hp = &c->model->hp;
    const int n = kv->n_used;
    if (n == 0) return subq_fail(err, SUBQ_ERR_ARG, "the context holds no tokens to save");
    for (int t = 0; t < n; t++)
        if (c->tok[t] < 0 || kv->pos[t] != t || kv->seg[t] != 0)
            return subq_fail(err, SUBQ_ERR_UNSUPPORTED,
                             "only contexts filled by decoding one sequence can be saved (slot %d is not)", t);
    gguf_writer *w = gguf_writer_new();
    char *plan = plan_text(c);
    if (!w || !plan) {
        gguf_writer_free(w);
        free(plan);
        return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    }
    subq_status s = SUBQ_OK;
    if (gguf_writer_set_u32(w, "subq.session.version", SESSION_VERSION) ||
        gguf_writer_set_u64(w, "subq.session.model_fingerprint", model_fingerprint(c->model)) ||
        gguf_writer_set_u32(w, "subq.session.n_ctx", (uint32_t)kv->n_ctx) ||
        gguf_writer_set_u32(w, "subq.session.n_past", (uint32_t)n) ||
        gguf_writer_set_str(w, "subq.session.kv_type", subq_kv_type_name(kv->type)) ||
        gguf_writer_set_str(w, "subq.session.plan", plan))
        s = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    free(plan);
    uint64_t ne[2] = {(uint64_t)n, 1};
    if (!s) s = gguf_writer_add_tensor(w, "tokens", GGML_TYPE_I32, 1, ne, c->tok, (uint64_t)n * 4, 0, err);
    const float *lg = subq_context_last_logits(c);
    ne[0] = (uint64_t)hp->n_vocab;
    if (!s && lg) s = gguf_writer_add_tensor(w, "logits", GGML_TYPE_F32, 1, ne, lg, ne[0] * 4, 0, err);
    /* each KV head's rows as one tensor: the first n, or a sliding layer's
     * latest n - held_lo (its ring); written in place where they are
     * contiguous (head-major, in memory, not wrapped), else gathered into a
     * copy the writer frees (slot-major, a file cache; a ring) */
    uint32_t type;
    kv_cache_row_tensor(kv, &type, &ne[0]);
    char name[64];
    for (int l = 0; l < kv->n_layer && !s; l++) {
        const int lo = kv->layers[l].held_lo;
        const int in_place = kv_cache_rows_adjacent(kv, l) && kv_cache_run(kv, l, lo, n - lo) == n - lo;
        ne[1] = (uint64_t)(n - lo);
        for (int h = 0; h < kv->n_head_kv && !s; h++)
            for (int v = 0; v < 2 && !s; v++) {
                uint64_t bytes = ne[1] * kv->row_bytes;
                snprintf(name, sizeof name, "kv.%d.%d.%c", l, h, v ? 'v' : 'k');
                if (!in_place) {
                    void *copy = malloc((size_t)bytes);
                    if (!copy) {
                        s = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for a KV head's rows (%d)", n - lo);
                        break;
                    }
                    kv_cache_read_rows(kv, l, h, v, lo, n - lo, copy);
                    s = gguf_writer_add_tensor(w, name, type, 2, ne, copy, bytes, 1, err); /* frees it, failing too */
                } else {
                    s = gguf_writer_add_tensor(w, name, type, 2, ne, kv_cache_row(kv, l, h, v, lo), bytes, 0, err);
                }
            }
    }
    for (int l = 0; l < hp->n_layer && !s; l++) {
        int d = attn_stage_search_width(c->stages[l]);
        if (d == 0) continue;
        float *keys = malloc((size_t)n * d * sizeof(float));
        if (!keys) {
            s = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for %d search keys", n);
            break;
        }
        s = attn_stage_get_keys(c->stages[l], n, keys, err);
        uint64_t kne[2] = {(uint64_t)d, (uint64_t)n};
        snprintf(name, sizeof name, "search.%d", l);
        if (!s) s = gguf_writer_add_tensor(w, name, GGML_TYPE_F32, 2, kne, keys, kne[0] * kne[1] * 4, 1, err);
        else free(keys);
    }
    int n_index = 0;
    if (!s) s = context_add_indexes(w, c, &n_index, err);
    if (!s) s = gguf_writer_write(w, path, err);
    gguf_writer_free(w);
    return s;
}

/* A tensor of exactly this type and shape, or a format error naming it. */
static subq_status want_tensor(const gguf_file *f, const char *name, uint32_t type, uint64_t ne0, uint64_t ne1,
                               const gguf_tensor **out, subq_error *err) {
    const gguf_tensor *t = gguf_find_tensor(f, name);
    if (!t) return subq_fail(err, SUBQ_ERR_FORMAT, "session file has no tensor %s", name);
    if (t->type != type || t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != 1 || t->ne[3] != 1)
        return subq_fail(err, SUBQ_ERR_FORMAT, "session tensor %s has the wrong type or shape", name);
    *out = t;
    return SUBQ_OK;
}

/* Where two plans first differ, for the error message: the layer and the field. */
static void first_difference(const char *a, const char *b, char *la, char *lb, size_t cap) {
    size_t i = 0;
    while (a[i] && a[i] == b[i]) i++;
    size_t line = i, field = i;
    while (line > 0 && a[line - 1] != '\n') line--; /* both share the text before i */
    while (field > line && a[field - 1] != ' ') field--;
    /* the layer ("L3") and the first field that differs ("k=8"): a plan's
     * lines are longer than an error message */
    const int wa = (int)strcspn(a + field, " \n"), wb = (int)strcspn(b + field, " \n");
    if (field == line) { /* the lines differ in their first field */
        snprintf(la, cap, "%.*s", wa, a + field);
        snprintf(lb, cap, "%.*s", wb, b + field);
        return;
    }
    const int n_label = (int)strcspn(a + line, ":\n");
    snprintf(la, cap, "%.*s: %.*s", n_label, a + line, wa, a + field);
    snprintf(lb, cap, "%.*s: %.*s", n_label, b + line, wb, b + field);
}

static subq_status check_header(const subq_context *c, const gguf_file *f, int *n_out, subq_error *err) {
    uint32_t version, n_past;
    subq_status s = gguf_get_u32(f, "subq.session.version", &version, err);
    if (s) return subq_fail(err, SUBQ_ERR_FORMAT, "not a subq session file (no subq.session.version)");
    if (version != SESSION_VERSION)
        return subq_fail(err, SUBQ_ERR_UNSUPPORTED, "session file version %u; this build reads version %d", version,
                         SESSION_VERSION);
    const gguf_kv *fp = gguf_find_kv(f, "subq.session.model_fingerprint");
    if (!fp || fp->value.type != GGUF_TYPE_UINT64)
        return subq_fail(err, SUBQ_ERR_FORMAT, "session file has no model fingerprint");
    uint64_t mine = model_fingerprint(c->model);
    if (fp->value.v.u64 != mine)
        return subq_fail(err, SUBQ_ERR_MISMATCH, "session file belongs to another model (fingerprint %016" PRIx64
                         ", this model %016" PRIx64 ")", fp->value.v.u64, mine);
    char kvt[8];
    if ((s = gguf_get_str(f, "subq.session.kv_type", kvt, sizeof kvt, err))) return s;
    if (strcmp(kvt, subq_kv_type_name(c->kv.type)))
        return subq_fail(err, SUBQ_ERR_MISMATCH, "session file has a %s KV cache, this context %s", kvt,
                         subq_kv_type_name(c->kv.type));
    if ((s = gguf_get_u32(f, "subq.session.n_past", &n_past, err))) return s;
    if (n_past == 0 || n_past > (uint32_t)c->kv.n_ctx)
        return subq_fail(err, SUBQ_ERR_RANGE, "session file holds %u tokens, the context has room for %d", n_past,
                         c->kv.n_ctx);
    /* its keys were rotated by the saving context's RoPE: under LongRoPE
     * that context's size chose the factors */
    const rope_hparams *rope = &c->model->hp.rope;
    if (rope->freq_long) {
        uint32_t n_ctx;
        if ((s = gguf_get_u32(f, "subq.session.n_ctx", &n_ctx, err))) return s;
        const int theirs_long = rope_freq_for(rope, n_ctx > INT_MAX ? INT_MAX : (int)n_ctx) == rope->freq_long;
        if (theirs_long != (c->rope_freq == rope->freq_long))
            return subq_fail(err, SUBQ_ERR_MISMATCH, "session file was made in a context of %u tokens, with "
                             "LongRoPE's %s factors; this context of %d tokens takes the %s ones (original "
                             "context %d)", n_ctx, theirs_long ? "long" : "short", c->kv.n_ctx,
                             theirs_long ? "short" : "long", rope->n_ctx_orig);
    }
    const gguf_kv *pk = gguf_find_kv(f, "subq.session.plan");
    if (!pk || pk->value.type != GGUF_TYPE_STRING)
        return subq_fail(err, SUBQ_ERR_FORMAT, "session file has no attention plan");
    char *mine_plan = plan_text(c);
    if (!mine_plan) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    const gguf_str *ps = &pk->value.v.str;
    if (strlen(mine_plan) != ps->len || memcmp(mine_plan, ps->data, ps->len)) {
        char *theirs = malloc(ps->len + 1);
        char a[256] = "?", b[256] = "?";
        if (theirs) {
            memcpy(theirs, ps->data, ps->len);
            theirs[ps->len] = '\0';
            first_difference(theirs, mine_plan, a, b, sizeof a);
        }
        free(theirs);
        free(mine_plan);
        return subq_fail(err, SUBQ_ERR_MISMATCH,
                         "session file was made with another attention plan (file: '%s'; this context: '%s')", a, b);
    }
    free(mine_plan);
    *n_out = (int)n_past;
    return SUBQ_OK;
}

/* After the rows and selectors of n tokens were restored with status s:
 * on failure an empty context again, else the n tokens in use (a file
 * cache now differs from what its file says it holds). */
static subq_status restored(subq_context *c, int n, subq_status s) {
    if (s) {
        subq_context_reset(c);
        return s;
    }
    c->kv.n_used = n;
    c->file_dirty = c->kv.file != NULL;
    return SUBQ_OK;
}

subq_status session_load_gguf(subq_context *c, const gguf_file *f, subq_error *err) {
    kv_cache *kv = &c->kv;
    const model_hparams *hp = &c->model->hp;
    int n = 0;
    subq_context_reset(c);
    subq_status s = check_header(c, f, &n, err);
    if (s) return s;
    const gguf_tensor *t = NULL;
    if ((s = want_tensor(f, "tokens", GGML_TYPE_I32, (uint64_t)n, 1, &t, err))) return s;
    memcpy(c->tok, t->data, (size_t)n * sizeof(int32_t));
    for (int i = 0; i < n; i++)
        if (c->tok[i] < 0 || c->tok[i] >= hp->n_vocab)
            return subq_fail(err, SUBQ_ERR_FORMAT, "session token %d (id %d) is outside the vocabulary", i,
                             (int)c->tok[i]);
    uint32_t type;
    uint64_t ne0;
    kv_cache_row_tensor(kv, &type, &ne0);
    char name[64];
    for (int l = 0; l < kv->n_layer; l++) {
        /* a sliding layer's file may hold only its latest rows: at least its
         * window's (what the next query reads); of those, this context keeps
         * what its ring holds */
        const int window = hp->layer[l].window, need = window > 0 && window < n ? window : n;
        const int ring = kv->layers[l].ring;
        int rows = 0;
        for (int h = 0; h < kv->n_head_kv; h++)
            for (int v = 0; v < 2; v++) {
                snprintf(name, sizeof name, "kv.%d.%d.%c", l, h, v ? 'v' : 'k');
                if (h == 0 && v == 0) {
                    t = gguf_find_tensor(f, name);
                    rows = t && t->ne[1] >= (uint64_t)need && t->ne[1] <= (uint64_t)n ? (int)t->ne[1] : n;
                }
                if ((s = want_tensor(f, name, type, ne0, (uint64_t)rows, &t, err))) return restored(c, n, s);
                const int keep = rows < ring ? rows : ring;
                kv_cache_write_rows(kv, l, h, v, n - keep, keep, (const char *)t->data + (size_t)(rows - keep) * kv->row_bytes);
            }
        kv->layers[l].held_lo = n - (rows < ring ? rows : ring);
    }
    for (int i = 0; i < n; i++) kv->pos[i] = i, kv->seg[i] = 0;
    /* the indexes and completion summaries are rebuilt over the loaded rows */
    for (int l = 0; l < hp->n_layer && !s; l++) {
        int d = attn_stage_search_width(c->stages[l]);
        const gguf_tensor *keys = NULL;
        snprintf(name, sizeof name, "search.%d", l);
        if (d > 0 && (s = want_tensor(f, name, GGML_TYPE_F32, (uint64_t)d, (uint64_t)n, &keys, err))) break;
        float *rows = NULL;
        if (keys) { /* tensor data is only 32-byte aligned in the file: copy for float access */
            rows = malloc(keys->n_bytes);
            if (!rows) {
                s = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for %d search keys", n);
                break;
            }
            memcpy(rows, keys->data, keys->n_bytes);
        }
        s = restore_stage(c->stages[l], kv, rows, n, context_find_index(f, l), err);
        free(rows);
    }
    if ((s = restored(c, n, s))) return s;
    const gguf_tensor *lg = gguf_find_tensor(f, "logits");
    if (lg) {
        if ((s = want_tensor(f, "logits", GGML_TYPE_F32, (uint64_t)hp->n_vocab, 1, &lg, err))) {
            subq_context_reset(c);
            return s;
        }
        memcpy(c->logits_last, lg->data, lg->n_bytes);
        c->logits_at = n;
    }
    return SUBQ_OK;
}

subq_status subq_context_load(subq_context *c, const char *path, subq_error *err) {
    gguf_file *f;
    subq_status s = gguf_open(path, &f, err);
    if (s) {
        subq_context_reset(c);
        return s;
    }
    s = session_load_gguf(c, f, err);
    gguf_close(f);
    if (s && err && strncmp(err->msg, path, strlen(path)) != 0) {
        char msg[SUBQ_ERROR_MSG_MAX];
        snprintf(msg, sizeof msg, "%s", err->msg);
        subq_fail(err, s, "%.200s: %s", path, msg);
    }
    return s;
}

subq_status subq_context_resume(subq_context *c, subq_error *err) {
    kv_cache *kv = &c->kv;
    if (!kv->file) return SUBQ_OK;
    const int n = kv_file_committed(kv->file), n_vocab = c->model->hp.n_vocab;
    context_forget(c);
    if (n == 0) return SUBQ_OK;
    if (!c->file_writable)
        return subq_fail(err, SUBQ_ERR_MISMATCH, "the KV file's %d tokens were made with the search keys of another "
                         "attention plan: give the same --search and --sparse-layers", n);
    /* what the header counts is trusted only as far as it checks out: the
     * checksums and finiteness of the latest slots, up to KV_RESUME_VERIFY_BYTES
     * of them (every slot of a smaller file, or of one read from its older
     * header slot; `subq info --kv-file F --verify` reads all of a larger
     * one), then every slot's token and position */
    const size_t per_slot = kv_file_slot_bytes(kv->file);
    int n_check = per_slot * (size_t)n <= KV_RESUME_VERIFY_BYTES ? n : (int)(KV_RESUME_VERIFY_BYTES / per_slot) + 1;
    if (kv_file_newest_damaged(kv->file)) n_check = n; /* the older header slot (kv_recover): every slot it counts */
    subq_status vs = kv_file_verify(kv->file, n - n_check, n, err);
    if (vs) return vs;
    for (int t = 0; t < n; t++)
        if (c->tok[t] < -1 || c->tok[t] >= n_vocab || kv->pos[t] < 0 || (t > 0 && kv->seg[t] < kv->seg[t - 1]))
            return subq_fail(err, SUBQ_ERR_FORMAT, "the KV file's slot %d is damaged (token %d, position %d)", t,
                             (int)c->tok[t], (int)kv->pos[t]);
    subq_status s = SUBQ_OK;
    gguf_file *indexes = context_open_indexes(c);
    for (int l = 0; l < c->model->hp.n_layer && !s; l++) {
        int d = 0;
        const float *keys = kv_file_search_rows(kv->file, l, &d);
        if (attn_stage_search_width(c->stages[l]) > 0 && !keys)
            s = subq_fail(err, SUBQ_ERR_MISMATCH, "the KV file has no search keys for layer %d", l);
        if (!s) s = restore_stage(c->stages[l], kv, keys, n, indexes ? context_find_index(indexes, l) : NULL, err);
    }
    gguf_close(indexes);
    if (s) {
        context_forget(c);
        return s;
    }
    kv->n_used = n;
    c->prefetch_left = KV_PREFETCH_STEPS; /* a reopened file is likely on the disk only: prefetch */
    if (kv_file_has_logits(kv->file)) {
        memcpy(c->logits_last, kv_file_logits(kv->file), (size_t)n_vocab * sizeof(float));
        c->logits_at = n;
    }
    return SUBQ_OK;
}

/* Whether two stages run the same plan (their describe lines): then one's
 * index is what the other's inserts would build. */
static int same_plan(const attn_stage *a, const attn_stage *b) {
    char la[512], lb[512];
    attn_stage_describe(a, la, sizeof la);
    attn_stage_describe(b, lb, sizeof lb);
    return !strcmp(la, lb);
}

subq_status subq_context_copy(subq_context *dst, const subq_context *src, subq_error *err) {
    const kv_cache *skv = &src->kv;
    kv_cache *kv = &dst->kv;
    const int n = skv->n_used, n_layer = dst->model->hp.n_layer;
    subq_context_reset(dst);
    if (dst == src) return subq_fail(err, SUBQ_ERR_ARG, "a context cannot be copied into itself");
    if (dst->model != src->model || skv->type != kv->type)
        return subq_fail(err, SUBQ_ERR_MISMATCH, "contexts of different models or KV types");
    if (n > kv->n_ctx) return subq_fail(err, SUBQ_ERR_RANGE, "%d cached tokens, room for %d", n, kv->n_ctx);
    if (dst->rope_freq != src->rope_freq) /* keys rotated by another table */
        return subq_fail(err, SUBQ_ERR_MISMATCH, "contexts of %d and %d tokens take different LongRoPE factors "
                         "(original context %d)", skv->n_ctx, kv->n_ctx, dst->model->hp.rope.n_ctx_orig);
    float *keys = NULL;
    subq_status s = SUBQ_OK;
    for (int l = 0; l < n_layer && !s; l++) {
        const int d = attn_stage_search_width(dst->stages[l]);
        if (d > 0 && !attn_stage_same_search(dst->stages[l], src->stages[l]))
            s = subq_fail(err, SUBQ_ERR_MISMATCH, "layer %d: the source context has no search keys of the same "
                          "projections", l);
        if (d > 0 && !s && !keys && !(keys = malloc((size_t)n * d * sizeof(float) + 1)))
            s = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for %d search keys", n);
    }
    if (s) {
        free(keys);
        return s;
    }
    memcpy(dst->tok, src->tok, (size_t)n * sizeof(int32_t));
    memcpy(kv->pos, skv->pos, (size_t)n * sizeof(int32_t));
    memcpy(kv->seg, skv->seg, (size_t)n * sizeof(int32_t));
    for (int l = 0; l < kv->n_layer; l++) {
        /* the rows the source holds (a ring: its latest) that the destination keeps */
        const int lo = n - kv->layers[l].ring > skv->layers[l].held_lo ? n - kv->layers[l].ring : skv->layers[l].held_lo;
        const int in_line = kv_cache_rows_adjacent(kv, l) && kv_cache_run(kv, l, lo, n - lo) == n - lo;
        for (int h = 0; h < kv->n_head_kv; h++)
            for (int v = 0; v < 2; v++) {
                if (in_line) { /* the source's rows, however laid out, into one run */
                    kv_cache_read_rows(skv, l, h, v, lo, n - lo, (void *)kv_cache_row(kv, l, h, v, lo));
                    continue;
                }
                for (int j = lo; j < n; j++)
                    memcpy((void *)kv_cache_row(kv, l, h, v, j), kv_cache_row(skv, l, h, v, j), kv->row_bytes);
            }
        kv->layers[l].held_lo = lo;
    }
    for (int l = 0; l < n_layer && !s; l++) {
        const int d = attn_stage_search_width(dst->stages[l]);
        void *index = NULL; /* the source's graph, when its plan matches: linked, not inserted again */
        size_t bytes = 0;
        if (d > 0) s = attn_stage_get_keys(src->stages[l], n, keys, err);
        if (!s && d > 0 && same_plan(dst->stages[l], src->stages[l]))
            s = attn_stage_get_index(src->stages[l], &index, &bytes, err);
        if (!s) s = attn_stage_restore(dst->stages[l], kv, d > 0 ? keys : NULL, n, index, bytes, err);
        free(index);
    }
    free(keys);
    if ((s = restored(dst, n, s))) return s;
    if (src->logits_at == n && n > 0) {
        memcpy(dst->logits_last, src->logits_last, (size_t)dst->model->hp.n_vocab * sizeof(float));
        dst->logits_at = n;
    }
    return SUBQ_OK;
}
