#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/timer.h"
#include "model/context.h"

#define DEFAULT_N_BATCH 512

subq_context_params subq_context_default_params(void) {
    subq_context_params p = {.n_ctx = 0, .n_threads = 0, .kv_type = SUBQ_KV_F32, .n_batch = DEFAULT_N_BATCH};
    return p;
}

void subq_context_free(subq_context *c) {
    if (!c) return;
    subq_error ignored;
    if (c->kv.file && c->stages) {
        context_commit(c, 1, &ignored); /* what a last commit cannot save is lost */
        context_save_indexes(c, &ignored); /* a cache: without it, a resume rebuilds the indexes */
    }
    if (c->stages) {
        for (int l = 0; l < c->model->hp.n_layer; l++)
            if (c->stages[l] && c->stages[l]->free) c->stages[l]->free(c->stages[l]);
        free(c->stages);
    }
    pool_free(c->pool);
    free(c->x); /* and the other work buffers */
    free(c->posbuf);
    free(c->rope_cs);
    free(c->rope_cs_local);
    matmul_scratch_free(&c->mm);
    if (!c->kv.file) free(c->tok); /* else the file's token region */
    kv_cache_free(&c->kv);
    free(c->logits_last);
    free(c);
}

/* The KV cache in p->kv_file: a new file of n_ctx slots (the model's
 * training context when not given), or an existing one of this model. */
static subq_status open_kv_file(subq_context *c, const subq_context_params *p, subq_error *err) {
    const model_hparams *hp = &c->model->hp;
    subq_status s = kv_cache_check_type(p->kv_type, hp->head_dim, err);
    if (s) return s;
    kv_file_geometry g = {
        .model_fingerprint = model_fingerprint(c->model), .kv_type = (uint32_t)p->kv_type,
        .n_layer = (uint32_t)hp->n_layer, .n_head_kv = (uint32_t)hp->n_head_kv, .head_dim = (uint32_t)hp->head_dim,
        .n_vocab = (uint32_t)hp->n_vocab, .row_bytes = kernels_kv_row_bytes(p->kv_type, hp->head_dim),
    };
    g.n_ctx = p->n_ctx > 0 ? (uint32_t)p->n_ctx : access(p->kv_file, F_OK) == 0 ? 0 : (uint32_t)hp->n_ctx_train;
    kv_file *f;
    if ((s = kv_file_open(p->kv_file, &g, p->kv_recover, &f, err)) || (s = kv_cache_init_file(&c->kv, f, err))) return s;
    /* the context starts under full attention: it may write unless the
     * file's tokens carry search keys (set their plan, or reset, first) */
    if ((s = context_file_plan(c, NULL, NULL, err))) kv_cache_free(&c->kv);
    return s;
}

/* Each layer: 1 where the plan reads its rows in runs (dense, or a
 * window: head-major rows stream), 0 where it retrieves rows (slot-major)
 * (malloc'd; NULL: out of memory) */
static unsigned char *head_major_layers(const subq_context *c) {
    const int n_layer = c->model->hp.n_layer;
    unsigned char *head_major = malloc((size_t)n_layer);
    for (int l = 0; head_major && l < n_layer; l++)
        head_major[l] = !c->stages || !attn_stage_reads_scattered(c->stages[l]);
    return head_major;
}

void context_lay_out(subq_context *c) {
    if (c->kv.file || c->kv.n_used) return;
    unsigned char *head_major = head_major_layers(c);
    if (head_major) kv_cache_set_layout(&c->kv, head_major); /* out of memory: the layout it has serves too */
    free(head_major);
}

subq_status context_file_plan(subq_context *c, const int *d, const uint64_t *made_by, subq_error *err) {
    if (!c->kv.file) return SUBQ_OK;
    const int n_layer = c->model->hp.n_layer;
    int *zd = d ? NULL : calloc((size_t)n_layer, sizeof(int));
    uint64_t *zb = made_by ? NULL : calloc((size_t)n_layer, sizeof(uint64_t));
    int ok = 0;
    subq_status s = (d || zd) && (made_by || zb) ? kv_file_set_search(c->kv.file, d ? d : zd, made_by ? made_by : zb, &ok, err)
                                                  : subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    free(zd);
    free(zb);
    c->file_writable = !s && ok;
    /* laid out as in memory (a file of committed tokens keeps its layout) */
    unsigned char *head_major = !s && c->kv.n_used == 0 ? head_major_layers(c) : NULL;
    int laid = 0;
    if (head_major && !(s = kv_file_set_layout(c->kv.file, head_major, &laid, err)) && laid)
        kv_cache_file_layout(&c->kv);
    free(head_major);
    return s;
}

subq_status context_commit(subq_context *c, int force, subq_error *err) {
    kv_file *f = c->kv.file;
    if (!f) return SUBQ_OK;
    const int n = c->kv.n_used, has_logits = n > 0 && c->logits_at == n;
    const double now = time_now_s();
    if (!c->file_dirty || (!force && now - c->commit_at < 1.0)) return force ? kv_file_wait(f, err) : SUBQ_OK;
    c->commit_at = now;
    c->file_dirty = 0;
    subq_status s = kv_cache_flush(&c->kv, err); /* the decode rows waiting in stages */
    /* forced (a sync, a close): on disk on return; else the flushes overlap the next steps */
    return s ? s : kv_file_commit(f, n, has_logits ? c->logits_last : NULL, force, err);
}

subq_status subq_context_sync(subq_context *c, subq_error *err) { return context_commit(c, 1, err); }

/* Each layer's sliding window as the KV cache sizes its rings: none when
 * the context keeps every slot (swa_full; a KV file) (malloc'd). */
static int *context_windows(const model_hparams *hp, const subq_context_params *p) {
    int *window = calloc((size_t)hp->n_layer, sizeof(int));
    for (int l = 0; window && !p->swa_full && !p->kv_file && l < hp->n_layer; l++) window[l] = hp->layer[l].window;
    return window;
}

uint64_t subq_kv_cache_bytes(const subq_model *m, const subq_context_params *p) {
    const model_hparams *hp = &m->hp;
    const int n_ctx = p->n_ctx > 0 ? p->n_ctx : hp->n_ctx_train;
    const int n_batch = p->n_batch > 0 ? p->n_batch : DEFAULT_N_BATCH;
    int *window = context_windows(hp, p);
    const size_t bytes = window ? kv_cache_bytes(hp->n_layer, hp->n_head_kv, hp->head_dim, n_ctx, p->kv_type, window,
                                                 n_batch)
                                : SIZE_MAX;
    free(window);
    return bytes;
}

subq_status subq_context_new(subq_model *m, const subq_context_params *p, subq_context **out, subq_error *err) {
    *out = NULL;
    const model_hparams *hp = &m->hp;
    subq_context_params def = subq_context_default_params();
    if (!p) p = &def;
    int n_ctx = p->n_ctx > 0 ? p->n_ctx : hp->n_ctx_train;
    subq_context *c = calloc(1, sizeof *c);
    if (!c) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    c->model = m;
    c->n_threads = p->n_threads > 0 ? p->n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (c->n_threads < 1) c->n_threads = 1;
    int n_batch = p->n_batch > 0 ? p->n_batch : DEFAULT_N_BATCH;
    int *window = context_windows(hp, p);
    subq_status s = !window       ? subq_fail(err, SUBQ_ERR_NOMEM, "out of memory")
                    : p->kv_file ? open_kv_file(c, p, err)
                                 : kv_cache_init_windows(&c->kv, hp->n_layer, hp->n_head_kv, hp->head_dim, n_ctx,
                                                         p->kv_type, window, n_batch, err);
    free(window);
    if (s) {
        free(c);
        return s;
    }
    n_ctx = c->kv.n_ctx;
    c->rope_freq = rope_freq_for(&hp->rope, n_ctx);
    for (int l = 0; l < hp->n_layer; l++) /* what a query reads, whether or not the layer keeps a ring */
        c->kv.layers[l].window = hp->layer[l].window;
    c->n_batch = n_ctx < n_batch ? n_ctx : n_batch;
    if ((s = pool_new(c->n_threads, &c->pool, err))) {
        kv_cache_free(&c->kv);
        free(c);
        return s;
    }
    size_t B = (size_t)c->n_batch;
    size_t dq = (size_t)hp->n_head * hp->head_dim, dkv = (size_t)hp->n_head_kv * hp->head_dim;
    size_t widest = (size_t)hp->n_embd > (size_t)hp->n_ff ? (size_t)hp->n_embd : (size_t)hp->n_ff;
    if (dq > widest) widest = dq;
    const size_t d = (size_t)hp->n_embd, ff = (size_t)hp->n_ff;
    c->x = malloc(B * (3 * d + 2 * dq + 2 * dkv + 2 * ff) * sizeof(float));
    if (c->x) {
        c->xn = c->x + B * d;
        c->proj = c->xn + B * d;
        c->q = c->proj + B * d;
        c->att = c->q + B * dq;
        c->k = c->att + B * dq;
        c->v = c->k + B * dkv;
        c->gate = c->v + B * dkv;
        c->up = c->gate + B * ff;
    }
    c->posbuf = malloc(B * sizeof(int32_t));
    c->rope_cs = malloc((B * (size_t)hp->rope.n_rot + 1) * sizeof(float));
    c->rope_cs_local = hp->rope_local.n_rot ? malloc(B * (size_t)hp->rope_local.n_rot * sizeof(float)) : NULL;
    int mm_ok = matmul_scratch_init(&c->mm, c->n_batch, (int64_t)widest);
    c->stages = calloc((size_t)hp->n_layer, sizeof(attn_stage *));
    c->tok = c->kv.file ? kv_file_tok(c->kv.file) : malloc((size_t)n_ctx * sizeof(int32_t));
    c->logits_last = malloc((size_t)hp->n_vocab * sizeof(float));
    c->logits_at = -1;
    c->capture_last = -1;
    if (!c->tok || !c->logits_last || !c->x || !c->posbuf || !c->rope_cs || (hp->rope_local.n_rot && !c->rope_cs_local) ||
        !mm_ok || !c->stages) {
        subq_context_free(c);
        return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory allocating work buffers");
    }
    for (int l = 0; l < hp->n_layer; l++) c->stages[l] = attn_full_stage();
    *out = c;
    return SUBQ_OK;
}

void context_forget(subq_context *c) {
    kv_cache_clear(&c->kv);
    context_lay_out(c);
    c->logits_at = -1;
    for (int l = 0; l < c->model->hp.n_layer; l++)
        if (c->stages[l]->reset) c->stages[l]->reset(c->stages[l]);
}

void subq_context_reset(subq_context *c) {
    subq_error ignored; /* a header that cannot be lowered: the next write fails the same way */
    if (c->kv.file) {
        kv_file_will_write(c->kv.file, 0, 0, &ignored); /* the file forgets them too */
        int all_full = 1; /* under full attention the file's table can now be emptied */
        for (int l = 0; l < c->model->hp.n_layer; l++) all_full &= c->stages[l] == attn_full_stage();
        if (!c->file_writable && all_full) context_file_plan(c, NULL, NULL, &ignored);
    }
    context_forget(c);
}

int subq_context_n_past(const subq_context *c) { return c->kv.n_used; }

int subq_context_n_ctx(const subq_context *c) { return c->kv.n_ctx; }

int subq_context_min_keep(const subq_context *c) { return kv_cache_min_keep(&c->kv); }

int subq_context_n_threads(const subq_context *c) { return c->n_threads; }

int subq_context_n_batch(const subq_context *c) { return c->n_batch; }

subq_kv_type subq_context_kv_type(const subq_context *c) { return c->kv.type; }

const subq_model *subq_context_model(const subq_context *c) { return c->model; }

const int32_t *subq_context_tokens(const subq_context *c) { return c->tok; }

const float *subq_context_last_logits(const subq_context *c) {
    return c->kv.n_used > 0 && c->logits_at == c->kv.n_used ? c->logits_last : NULL;
}

/* The KV rows of the kept slots stay where they are; every sparse layer
 * drops the rest from its index (see the sparse stage's truncate for the costs). */
subq_status subq_context_truncate(subq_context *c, int n_keep, subq_error *err) {
    if (n_keep < 0 || n_keep > c->kv.n_used)
        return subq_fail(err, SUBQ_ERR_RANGE, "cannot keep %d of the %d cached tokens", n_keep, c->kv.n_used);
    if (n_keep == c->kv.n_used) return SUBQ_OK;
    const int min_keep = kv_cache_min_keep(&c->kv);
    if (n_keep > 0 && n_keep < min_keep)
        return subq_fail(err, SUBQ_ERR_RANGE,
                         "cannot go back to %d of the %d cached tokens: the sliding-window layers no longer hold "
                         "the keys it needs (keep at least %d, or none; a context with swa_full keeps every token)",
                         n_keep, c->kv.n_used, min_keep);
    for (int l = 0; l < c->model->hp.n_layer; l++) {
        attn_stage *st = c->stages[l];
        subq_status s = st->truncate ? st->truncate(st, &c->kv, n_keep, err) : SUBQ_OK;
        if (s) { /* an index that failed to rebuild must not be used: start over */
            subq_context_reset(c);
            return s;
        }
    }
    if (n_keep == 0) kv_cache_clear(&c->kv); /* every ring row is free again */
    c->kv.n_used = n_keep;
    c->file_dirty = c->kv.file != NULL;
    return SUBQ_OK;
}
