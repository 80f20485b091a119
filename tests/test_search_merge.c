/* Search projections merged into model files (ann-sparseattention runtime
 * layout, search/search_merge.c):
 * - merge (f32) and read back from the merged model: the same bits; the
 *   merged model keeps the base model's fingerprint; f16 and bf16 merges hold
 *   the values rounded to the type (within half a unit in the last place);
 * - split: a projection file that loads for the base model with the same bits;
 * - the merged file as --search for the base model loads, for another model
 *   it is refused; merging into a merged model replaces its projections;
 * - malformed merged files are refused with their error code and one line
 *   (and, under ASan, without touching memory they do not own). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/fingerprint.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "lab/synth.h"
#include "quant/quant.h"
#include "quant/types.h"
#include "search/search_proj.h"
#include "test_util.h"

enum { D = 8 };

static char dir[512];

static const char *tmp_path(const char *name, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/test_search_merge.%d.%s", dir, (int)getpid(), name);
    return buf;
}

static int same_bits(const search_proj *a, const search_proj *b) {
    if (a->n_sel != b->n_sel || a->d_search != b->d_search || a->n_embd != b->n_embd) return 0;
    size_t n = (size_t)a->d_search * a->n_embd;
    for (int i = 0; i < a->n_sel; i++) {
        int l = a->layers[i];
        if (b->layers[i] != l || memcmp(a->wq[l], b->wq[l], n * sizeof(float)) ||
            memcmp(a->wk[l], b->wk[l], n * sizeof(float)))
            return 0;
    }
    return 1;
}

/* |x - y| <= half an ulp of the type at |x| (mantissa bits mb; f16 has
 * subnormals below 2^-14, spaced 2^-24) for every element */
static int rounded(const search_proj *a, const search_proj *b, int mb) {
    size_t n = (size_t)a->d_search * a->n_embd;
    for (int i = 0; i < a->n_sel; i++) {
        int l = a->layers[i];
        for (size_t e = 0; e < n; e++)
            for (int w = 0; w < 2; w++) {
                float x = (w ? a->wk : a->wq)[l][e], y = (w ? b->wk : b->wq)[l][e];
                int ex;
                frexpf(x, &ex);
                float tol = ldexpf(1.0f, ex - mb - 2);
                if (mb == 10 && tol < ldexpf(1.0f, -25)) tol = ldexpf(1.0f, -25);
                if (fabsf(x - y) > tol * 1.0001f) return 0;
            }
    }
    return 1;
}

/* A copy of src with one malformation (case `which`); returns its name. */
static const char *variant(int which, const gguf_file *src, const char *path, subq_error *err) {
    static const char *names[] = {"key length 7",           "head count 2",       "one matrix missing",
                                  "i32 matrix",             "layer list wrong",   "no key length",
                                  "layer past the model",   "unknown indexer tensor", "mixed types (read)",
                                  "transposed",             "says it rotates by position"};
    gguf_writer *w = gguf_writer_new();
    const char *k_len = "qwen3.attention.indexer.key_length";
    for (uint64_t i = 0; i < src->n_kv; i++) {
        if (which == 5 && src->kv[i].key.len == strlen(k_len) && !memcmp(src->kv[i].key.data, k_len, strlen(k_len)))
            continue;
        gguf_writer_copy_kv(w, src, i);
    }
    if (which == 0) gguf_writer_set_u32(w, k_len, 7);
    if (which == 1) gguf_writer_set_u32(w, "qwen3.attention.indexer.head_count", 2);
    if (which == 10) gguf_writer_set_u32(w, "subq.search.rope_dims", 4);
    if (which == 4) {
        int32_t one[1] = {0};
        gguf_writer_set_arr(w, "ann_sparse.layers", GGUF_TYPE_INT32, one, 1);
    }
    static unsigned char zeros[1 << 16];
    for (uint64_t i = 0; i < src->n_tensors; i++) {
        const gguf_tensor *t = &src->tensors[i];
        int is_q0 = !strcmp(t->name, "blk.0.indexer.proj.weight");
        if (which == 2 && !strcmp(t->name, "blk.1.indexer.attn_k.weight")) continue;
        if (is_q0 && which == 3) {
            uint64_t ne[2] = {t->ne[0], t->ne[1]};
            gguf_writer_add_tensor(w, t->name, GGML_TYPE_I32, 2, ne, zeros, t->ne[0] * t->ne[1] * 4, 0, err);
        } else if (is_q0 && which == 8) {
            uint64_t ne[2] = {t->ne[0], t->ne[1]};
            gguf_writer_add_tensor(w, t->name, GGML_TYPE_F16, 2, ne, zeros, t->ne[0] * t->ne[1] * 2, 0, err);
        } else if (is_q0 && which == 9) {
            uint64_t ne[2] = {t->ne[1], t->ne[0]};
            gguf_writer_add_tensor(w, t->name, t->type, 2, ne, t->data, t->n_bytes, 0, err);
        } else {
            gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->n_bytes, 0, err);
        }
    }
    uint64_t ne[2] = {256, D};
    if (which == 6) gguf_writer_add_tensor(w, "blk.5.indexer.proj.weight", GGML_TYPE_F32, 2, ne, zeros, 256 * D * 4, 0, err);
    if (which == 7) gguf_writer_add_tensor(w, "blk.0.indexer.k_norm.weight", GGML_TYPE_F32, 1, ne, zeros, 256 * 4, 0, err);
    gguf_writer_write(w, path, err);
    gguf_writer_free(w);
    return names[which];
}

int main(void) {
    const char *t = getenv("SUBQ_TMP");
    snprintf(dir, sizeof dir, "%s", t && *t ? t : ".");
    char base_path[1024], other_path[1024], proj_path[1024], merged_path[1024], split_path[1024], m2_path[1024],
        bad_path[1024];
    subq_error err = {0};
    subq_model *m = NULL, *other = NULL, *merged = NULL;
    int ok = !synth_write_model(synth_find_shape("tiny-qwen3"), GGML_TYPE_Q8_0, 3, tmp_path("base.gguf", base_path,
                                                                                             sizeof base_path), &err) &&
             !synth_write_model(synth_find_shape("tiny-qwen3"), GGML_TYPE_Q8_0, 4,
                                tmp_path("other.gguf", other_path, sizeof other_path), &err) &&
             !subq_model_load(base_path, &m, &err) && !subq_model_load(other_path, &other, &err);
    CHECK(ok, "models: %s", err.msg);
    if (!ok) return test_summary();
    int layers[2] = {0, 1};
    search_proj *p = NULL, *q = NULL;
    CHECK(!search_proj_random(m, layers, 2, D, 11, &p, &err) && !search_proj_save(p, tmp_path("proj.gguf", proj_path,
                                                                                              sizeof proj_path), &err),
          "projections: %s", err.msg);

    /* f32 merge: the same bits back, the base model's fingerprint */
    gguf_file *src = NULL;
    CHECK(!gguf_open(proj_path, &src, &err), "open projections: %s", err.msg);
    search_merge_opts o = {.top_k = 33, .type = GGML_TYPE_F32, .source = proj_path, .extra = src};
    CHECK(!search_merge_write(m, p, &o, tmp_path("merged.gguf", merged_path, sizeof merged_path), &err),
          "merge: %s", err.msg);
    CHECK(!subq_model_load(merged_path, &merged, &err), "merged model loads: %s", err.msg);
    CHECK(merged && model_fingerprint(merged) == model_fingerprint(m), "merged model keeps the fingerprint");
    CHECK(merged && !search_proj_from_model(merged, &q, &err) && same_bits(p, q) && q->top_k == 33 &&
              q->model_fingerprint == p->model_fingerprint,
          "projections read back from the merged model: %s", err.msg);
    search_proj_free(q);
    q = NULL;
    CHECK(search_proj_from_model(m, &q, &err) == SUBQ_ERR_RANGE && !q, "a model without projections has none");
    /* as --search: for the base model yes, for another no */
    CHECK(!search_proj_load(merged_path, m, &q, &err) && same_bits(p, q), "merged file as --search: %s", err.msg);
    search_proj_free(q);
    q = NULL;
    CHECK(search_proj_load(merged_path, other, &q, &err) == SUBQ_ERR_MISMATCH && !q,
          "merged file for another model refused: %s", err.msg);
    /* split */
    CHECK(merged && !search_split_write(merged, tmp_path("split.gguf", split_path, sizeof split_path), &err) &&
              !search_proj_load(split_path, m, &q, &err) && same_bits(p, q),
          "split loads for the base model with the same bits: %s", err.msg);
    search_proj_free(q);
    q = NULL;

    /* f16 and bf16: rounded values; merging into a merged model replaces */
    const uint32_t types[2] = {GGML_TYPE_F16, GGML_TYPE_BF16};
    for (int ti = 0; ti < 2 && merged; ti++) {
        int one_layer[1] = {1};
        search_proj *r = NULL, *back = NULL, *from_merged = NULL;
        search_merge_opts o2 = {.top_k = 128, .type = types[ti]};
        ok = !search_merge_write(merged, p, &o2, tmp_path("m2.gguf", m2_path, sizeof m2_path), &err) &&
             !search_proj_load(m2_path, m, &back, &err);
        CHECK(ok && rounded(p, back, ti ? 7 : 10), "%s merge holds the rounded values: %s", ti ? "bf16" : "f16", err.msg);
        search_proj_free(back);
        back = NULL;
        /* into the merged model, one layer: only that layer afterwards */
        subq_model *mm = NULL;
        ok = !search_proj_random(m, one_layer, 1, D + 1, 12, &r, &err) &&
             !search_merge_write(merged, r, &o2, m2_path, &err) && !subq_model_load(m2_path, &mm, &err) &&
             !search_proj_from_model(mm, &from_merged, &err);
        CHECK(ok && from_merged->n_sel == 1 && from_merged->layers[0] == 1 && from_merged->d_search == D + 1 &&
                  model_fingerprint(mm) == model_fingerprint(m),
              "re-merge replaces the projections: %s", err.msg);
        search_proj_free(r);
        search_proj_free(from_merged);
        subq_model_free(mm);
    }
    /* projections that rotate by position are not merged: the runtime of
     * that layout would rank with unrotated keys; nothing is written */
    p->rope = (search_rope){.n_rot = 4, .base = 10000, .scale = 1};
    unlink(m2_path);
    CHECK(search_merge_write(m, p, &o, m2_path, &err) == SUBQ_ERR_UNSUPPORTED && strstr(err.msg, "rotate") &&
              strstr(err.msg, "llama.cpp runtime") && !strchr(err.msg, '\n') && access(m2_path, F_OK) != 0,
          "rotated projections must not be merged: %s", err.msg);
    p->rope.n_rot = 0;
    /* nor are projections with a set per head: that runtime ranks one set a layer */
    search_proj *heads = NULL;
    CHECK(!search_proj_new_heads(m->hp.n_layer, m->hp.n_embd, D, SUBQ_SEARCH_KV_HEAD, m->hp.n_head_kv,
                                 m->hp.n_head_kv, layers, 2, model_fingerprint(m), &heads, &err) &&
              search_merge_write(m, heads, &o, m2_path, &err) == SUBQ_ERR_UNSUPPORTED && strstr(err.msg, "per kv-head") &&
              !strchr(err.msg, '\n') && access(m2_path, F_OK) != 0,
          "per-head projections must not be merged: %s", err.msg);
    search_proj_free(heads);
    /* projections of another model are not merged */
    search_proj *foreign = NULL;
    CHECK(!search_proj_random(other, layers, 2, D, 1, &foreign, &err) &&
              search_merge_write(m, foreign, &o, m2_path, &err) == SUBQ_ERR_MISMATCH,
          "another model's projections refused");
    search_proj_free(foreign);

    /* malformed merged files */
    gguf_file *mf = NULL;
    CHECK(!gguf_open(merged_path, &mf, &err), "open merged: %s", err.msg);
    const subq_status want[] = {SUBQ_ERR_SHAPE, SUBQ_ERR_UNSUPPORTED, SUBQ_ERR_FORMAT, SUBQ_ERR_UNSUPPORTED,
                                SUBQ_ERR_FORMAT, SUBQ_ERR_FORMAT, SUBQ_ERR_FORMAT, SUBQ_ERR_UNSUPPORTED,
                                SUBQ_OK, SUBQ_ERR_SHAPE, SUBQ_ERR_UNSUPPORTED};
    for (int v = 0; mf && v < (int)(sizeof want / sizeof want[0]); v++) {
        const char *what = variant(v, mf, tmp_path("bad.gguf", bad_path, sizeof bad_path), &err);
        gguf_file *bf = NULL;
        search_proj *bp = NULL;
        subq_error e = {0};
        subq_status s = gguf_open(bad_path, &bf, &e);
        if (!s) s = search_proj_read(bf, bad_path, &bp, &e);
        if (want[v] == SUBQ_OK) { /* element types may differ: an f16 zero matrix beside f32 ones */
            const size_t n = (size_t)D * 256;
            int zero = 1;
            for (size_t i = 0; bp && i < n; i++) zero &= bp->wq[0][i] == 0.0f;
            CHECK(!s && zero && !memcmp(bp->wk[0], p->wk[0], n * sizeof(float)) &&
                      !memcmp(bp->wq[1], p->wq[1], n * sizeof(float)),
                  "%s: %s", what, e.msg);
        } else {
            CHECK(s == want[v] && !bp && e.msg[0] && !strchr(e.msg, '\n'), "%s: got %d (%s), want %d", what, (int)s,
                  e.msg, (int)want[v]);
        }
        search_proj_free(bp);
        gguf_close(bf);
    }
    gguf_close(mf);
    gguf_close(src);
    search_proj_free(p);
    subq_model_free(merged);
    subq_model_free(m);
    subq_model_free(other);
    const char *files[] = {base_path, other_path, proj_path, merged_path, split_path, m2_path, bad_path};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) unlink(files[i]);
    return test_summary();
}
