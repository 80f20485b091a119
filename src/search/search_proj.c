/* Search projections: the object, applying it, and its GGUF file. */
#include "search/search_proj.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/rng.h"
#include "kernels/kernels.h"
#include "model/derived.h"
#include "model/model.h"
#include "quant/types.h"

void search_proj_tensor_names(int layer, char *q_name, char *k_name, size_t cap) {
    if (q_name) snprintf(q_name, cap, "blk.%d.indexer.proj.weight", layer);
    if (k_name) snprintf(k_name, cap, "blk.%d.indexer.attn_k.weight", layer);
}

void search_proj_free(search_proj *p) {
    if (!p) return;
    free(p->layers);
    free(p->wq); /* and wk */
    free(p->data);
    free(p);
}

static const char *const gran_names[SUBQ_SEARCH_GRANULARITY_COUNT] = {"layer", "kv-head", "head"};

const char *search_granularity_name(subq_search_granularity g) {
    return (int)g >= 0 && g < SUBQ_SEARCH_GRANULARITY_COUNT ? gran_names[g] : "?";
}

int search_granularity_parse(const char *name) {
    for (int i = 0; name && i < SUBQ_SEARCH_GRANULARITY_COUNT; i++)
        if (!strcmp(name, gran_names[i])) return i;
    return -1;
}

void search_heads_of(subq_search_granularity g, int n_head, int n_head_kv, int *n_qhead, int *n_khead) {
    *n_qhead = g == SUBQ_SEARCH_HEAD ? n_head : g == SUBQ_SEARCH_KV_HEAD ? n_head_kv : 1;
    *n_khead = g == SUBQ_SEARCH_LAYER ? 1 : n_head_kv;
}

/* Search heads a file or a caller may give: query heads a multiple of key
 * heads (one of each for a layer's shared set), 4096 at most, and
 * SEARCH_PROJ_MAX_D dims in all. 64-bit, so that a file's u32 counts are
 * checked before any narrowing. */
static int heads_plausible(int gran, uint64_t n_qhead, uint64_t n_khead, uint64_t d_search) {
    return gran >= 0 && gran < SUBQ_SEARCH_GRANULARITY_COUNT && n_qhead >= 1 && n_khead >= 1 &&
           n_qhead % n_khead == 0 && n_qhead <= 4096 && n_qhead * d_search <= SEARCH_PROJ_MAX_D &&
           (gran != SUBQ_SEARCH_LAYER || n_qhead == 1);
}

subq_status search_proj_new_heads(int n_layer, int n_embd, int d_search, subq_search_granularity gran, int n_qhead,
                                  int n_khead, const int *layers, int n_sel, uint64_t fp, search_proj **out,
                                  subq_error *err) {
    *out = NULL;
    if (n_layer <= 0 || n_embd <= 0 || n_sel <= 0 || n_sel > n_layer)
        return subq_fail(err, SUBQ_ERR_ARG, "search projections need at least one layer of a model with layers");
    if (d_search <= 0 || d_search > SEARCH_PROJ_MAX_D)
        return subq_fail(err, SUBQ_ERR_ARG, "d_search %d out of range [1, %d]", d_search, SEARCH_PROJ_MAX_D);
    /* (a negative count turns into a huge one: refused as well) */
    if (!heads_plausible((int)gran, (uint64_t)n_qhead, (uint64_t)n_khead, (uint64_t)d_search))
        return subq_fail(err, SUBQ_ERR_ARG, "search heads %d / %d (granularity %d, d_search %d): query heads must be "
                         "a multiple of key heads, one of each for a layer's shared set, %d dims at most in all",
                         n_qhead, n_khead, (int)gran, d_search, SEARCH_PROJ_MAX_D);
    search_proj *p = calloc(1, sizeof *p);
    if (!p) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    p->n_layer = n_layer;
    p->n_embd = n_embd;
    p->d_search = d_search;
    p->gran = gran;
    p->n_qhead = n_qhead;
    p->n_khead = n_khead;
    p->rope = (search_rope){.n_rot = 0, .base = 10000.0, .scale = 1.0};
    p->model_fingerprint = fp;
    p->n_sel = n_sel;
    const size_t per_q = (size_t)n_qhead * d_search * n_embd, per_k = (size_t)n_khead * d_search * n_embd;
    p->layers = malloc((size_t)n_sel * sizeof(int));
    p->wq = calloc(2 * (size_t)n_layer, sizeof(float *));
    p->data = calloc((per_q + per_k) * (size_t)n_sel, sizeof(float));
    if (!p->layers || !p->wq || !p->data) {
        search_proj_free(p);
        return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for %d x %d x %d search projections", n_sel,
                         (n_qhead + n_khead) * d_search, n_embd);
    }
    p->wk = p->wq + n_layer;
    subq_status s = derived_sort_layers(layers, n_sel, n_layer, "search projection", p->layers, err);
    if (s) {
        search_proj_free(p);
        return s;
    }
    for (int i = 0; i < n_sel; i++) {
        int l = p->layers[i];
        p->wq[l] = p->data + (size_t)i * (per_q + per_k);
        p->wk[l] = p->wq[l] + per_q;
    }
    *out = p;
    return SUBQ_OK;
}

subq_status search_proj_new(int n_layer, int n_embd, int d_search, const int *layers, int n_sel, uint64_t fp,
                            search_proj **out, subq_error *err) {
    return search_proj_new_heads(n_layer, n_embd, d_search, SUBQ_SEARCH_LAYER, 1, 1, layers, n_sel, fp, out, err);
}

void search_proj_init_normal(search_proj *p, float std, uint64_t *rng_state) {
    const size_t per = (size_t)p->d_search * (size_t)p->n_embd;
    for (int i = 0; i < p->n_sel; i++) {
        int l = p->layers[i];
        for (size_t e = 0; e < per * p->n_qhead; e++) p->wq[l][e] = std * rng_normal(rng_state);
        for (size_t e = 0; e < per * p->n_khead; e++) p->wk[l][e] = std * rng_normal(rng_state);
    }
}

subq_status search_proj_random(const subq_model *m, const int *layers, int n_sel, int d_search, uint64_t seed,
                               search_proj **out, subq_error *err) {
    return search_proj_random_heads(m, layers, n_sel, d_search, SUBQ_SEARCH_LAYER, seed, out, err);
}

subq_status search_proj_random_heads(const subq_model *m, const int *layers, int n_sel, int d_search,
                                     subq_search_granularity g, uint64_t seed, search_proj **out, subq_error *err) {
    int nq, nk;
    search_heads_of(g, m->hp.n_head, m->hp.n_head_kv, &nq, &nk);
    subq_status s = search_proj_new_heads(m->hp.n_layer, m->hp.n_embd, d_search, g, nq, nk, layers, n_sel,
                                          model_fingerprint(m), out, err);
    if (s) return s;
    uint64_t rng = rng_seed(seed);
    search_proj_init_normal(*out, 1.0f / sqrtf((float)m->hp.n_embd), &rng);
    return SUBQ_OK;
}

void search_proj_apply(const search_proj *p, int layer, const float *h, int n, float *q_s, float *k_s,
                       int n_threads) {
    const int d = p->n_embd, dq = p->n_qhead * p->d_search, dk = p->n_khead * p->d_search;
    const float *wq = p->wq[layer], *wk = p->wk[layer];
    const kernels *K = kernels_get();
    /* q_s[t][a] = sum_i W_Qs[a][i] h[t][i]  (and the same with W_Ks) */
#pragma omp parallel for num_threads(n_threads) schedule(static) if ((size_t)n * dq * d >= (1u << 16))
    for (int t = 0; t < n; t++) {
        const float *ht = h + (size_t)t * d;
        for (int a = 0; q_s && a < dq; a++) q_s[(size_t)t * dq + a] = K->dot_f32(wq + (size_t)a * d, ht, d);
        for (int a = 0; k_s && a < dk; a++) k_s[(size_t)t * dk + a] = K->dot_f32(wk + (size_t)a * d, ht, d);
    }
}

/* ---- file I/O ------------------------------------------------------------ */

subq_status search_proj_to_writer(const search_proj *p, gguf_writer *w, subq_error *err) {
    subq_status s = gguf_writer_set_str(w, "general.architecture", SEARCH_PROJ_ARCH);
    s = s ? s : gguf_writer_set_u32(w, "subq.search.d_search", (uint32_t)p->d_search);
    s = s ? s : derived_write_ident(w, "subq.search", p->layers, p->n_sel, p->model_fingerprint);
    s = s ? s : gguf_writer_set_u32(w, "subq.search.model_n_embd", (uint32_t)p->n_embd);
    s = s ? s : gguf_writer_set_u32(w, "subq.search.model_n_layer", (uint32_t)p->n_layer);
    s = s ? s : gguf_writer_set_u32(w, "subq.search.rope_dims", (uint32_t)p->rope.n_rot);
    s = s ? s : gguf_writer_set_f32(w, "subq.search.rope_base", (float)p->rope.base);
    s = s ? s : gguf_writer_set_f32(w, "subq.search.rope_scale", (float)p->rope.scale);
    if (!s && p->gran != SUBQ_SEARCH_LAYER) { /* one-head files stay as they were */
        s = gguf_writer_set_str(w, "subq.search.granularity", search_granularity_name(p->gran));
        s = s ? s : gguf_writer_set_u32(w, "subq.search.query_heads", (uint32_t)p->n_qhead);
        s = s ? s : gguf_writer_set_u32(w, "subq.search.key_heads", (uint32_t)p->n_khead);
    }
    if (!s && p->origin[0]) s = gguf_writer_set_str(w, "subq.search.origin", p->origin);
    if (s) return subq_fail(err, s, "out of memory building search projection metadata");
    uint64_t ne_q[2] = {(uint64_t)p->n_embd, (uint64_t)p->n_qhead * p->d_search};
    uint64_t ne_k[2] = {(uint64_t)p->n_embd, (uint64_t)p->n_khead * p->d_search};
    for (int i = 0; i < p->n_sel; i++) {
        int l = p->layers[i];
        char qn[96], kn[96];
        search_proj_tensor_names(l, qn, kn, sizeof qn);
        if ((s = gguf_writer_add_tensor(w, qn, GGML_TYPE_F32, 2, ne_q, p->wq[l], ne_q[0] * ne_q[1] * sizeof(float), 0,
                                        err)))
            return s;
        if ((s = gguf_writer_add_tensor(w, kn, GGML_TYPE_F32, 2, ne_k, p->wk[l], ne_k[0] * ne_k[1] * sizeof(float), 0,
                                        err)))
            return s;
    }
    return SUBQ_OK;
}

static subq_status fill(const void *p, gguf_writer *w, subq_error *err) { return search_proj_to_writer(p, w, err); }

subq_status search_proj_save(const search_proj *p, const char *path, subq_error *err) {
    return gguf_save(path, fill, p, err);
}

subq_status search_proj_read(const gguf_file *f, const char *path, search_proj **out, subq_error *err) {
    *out = NULL;
    subq_error e2 = {0};
    char arch[64];
    int is_proj = !gguf_get_str(f, "general.architecture", arch, sizeof arch, &e2) && !strcmp(arch, SEARCH_PROJ_ARCH);
    if (!is_proj && search_merged_present(f)) return search_merged_read(f, path, out, err);
    if (!is_proj)
        return subq_fail(err, SUBQ_ERR_FORMAT, "%s is not a search projection file and carries no merged projections "
                         "(general.architecture is %s%s%s, expected \"%s\" or a model with indexer tensors)",
                         path, e2.code ? "missing" : "\"", e2.code ? "" : arch, e2.code ? "" : "\"", SEARCH_PROJ_ARCH);
    uint32_t d_search, n_embd, n_layer;
    const gguf_value *arr;
    uint64_t fp;
    if (gguf_get_u32(f, "subq.search.d_search", &d_search, &e2) ||
        gguf_get_u32(f, "subq.search.model_n_embd", &n_embd, &e2) ||
        gguf_get_u32(f, "subq.search.model_n_layer", &n_layer, &e2))
        return subq_fail(err, SUBQ_ERR_FORMAT, "%s: %s", path, e2.msg);
    subq_status s = derived_read_ident(f, path, "subq.search", &arr, &fp, err);
    if (s) return s;
    if (d_search == 0 || d_search > SEARCH_PROJ_MAX_D || n_embd == 0 || n_embd > (1u << 20) || n_layer == 0 ||
        n_layer > 4096)
        return subq_fail(err, SUBQ_ERR_FORMAT, "%s: implausible sizes (d_search %u, d_model %u, %u layers)", path,
                         d_search, n_embd, n_layer);
    if ((s = derived_check_count(arr, n_layer, path, "subq.search", err))) return s;
    /* the rotary part; absent in files from before it existed: none */
    uint32_t rope_dims;
    float rope_base, rope_scale;
    if (gguf_get_u32_or(f, "subq.search.rope_dims", 0, &rope_dims, &e2) ||
        gguf_get_f32_or(f, "subq.search.rope_base", 10000.0f, &rope_base, &e2) ||
        gguf_get_f32_or(f, "subq.search.rope_scale", 1.0f, &rope_scale, &e2))
        return subq_fail(err, SUBQ_ERR_FORMAT, "%s: %s", path, e2.msg);
    if (rope_dims > d_search)
        return subq_fail(err, SUBQ_ERR_FORMAT, "%s: subq.search.rope_dims %u is more than d_search %u", path, rope_dims,
                         d_search);
    const search_rope rope = {.n_rot = (int)rope_dims, .base = rope_base, .scale = rope_scale};
    if (search_rope_check(&rope, (int)d_search, path, &e2)) return subq_fail(err, SUBQ_ERR_FORMAT, "%s", e2.msg);
    /* search heads; absent in one-head files */
    char gname[32] = "layer";
    uint32_t n_qhead, n_khead;
    if ((gguf_find_kv(f, "subq.search.granularity") &&
         gguf_get_str(f, "subq.search.granularity", gname, sizeof gname, &e2)) ||
        gguf_get_u32_or(f, "subq.search.query_heads", 1, &n_qhead, &e2) ||
        gguf_get_u32_or(f, "subq.search.key_heads", 1, &n_khead, &e2))
        return subq_fail(err, SUBQ_ERR_FORMAT, "%s: %s", path, e2.msg);
    const int gran = search_granularity_parse(gname);
    if (gran < 0)
        return subq_fail(err, SUBQ_ERR_FORMAT, "%s: unknown search granularity '%s' (layer, kv-head, head)", path,
                         gname);
    if (!heads_plausible(gran, n_qhead, n_khead, d_search))
        return subq_fail(err, SUBQ_ERR_FORMAT, "%s: implausible search heads (%u query, %u key, granularity %s)", path,
                         n_qhead, n_khead, gname);
    uint64_t n_sel = arr->v.arr.n;
    int *layers = malloc(n_sel * sizeof(int));
    if (!layers) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    for (uint64_t i = 0; i < n_sel && !s; i++) {
        if ((s = derived_layer(arr, i, n_layer, path, "subq.search", &layers[i], err))) break;
        /* The tensors before the allocation: a few hostile bytes must not
         * make us reserve gigabytes that the checks then refuse. */
        char names[2][96];
        search_proj_tensor_names(layers[i], names[0], names[1], sizeof names[0]);
        for (int w = 0; w < 2 && !s; w++) {
            const gguf_tensor *t = gguf_find_tensor(f, names[w]);
            if (!t)
                s = subq_fail(err, SUBQ_ERR_FORMAT, "%s: tensor %s is missing", path, names[w]);
            else if (t->type != GGML_TYPE_F32)
                s = subq_fail(err, SUBQ_ERR_UNSUPPORTED, "%s: tensor %s is not f32 (ggml type %u)", path, names[w],
                              t->type);
            else if (t->n_dims != 2 || t->ne[0] != n_embd || t->ne[1] != (uint64_t)(w ? n_khead : n_qhead) * d_search)
                s = subq_fail(err, SUBQ_ERR_SHAPE, "%s: tensor %s has shape %" PRIu64 " x %" PRIu64 ", expected %u x %u",
                              path, names[w], t->ne[0], t->ne[1], n_embd, (w ? n_khead : n_qhead) * d_search);
        }
    }
    search_proj *p = NULL;
    if (!s) {
        s = search_proj_new_heads((int)n_layer, (int)n_embd, (int)d_search, (subq_search_granularity)gran,
                                  (int)n_qhead, (int)n_khead, layers, (int)n_sel, fp, &p, &e2);
        if (s) s = subq_fail(err, s == SUBQ_ERR_NOMEM ? s : SUBQ_ERR_FORMAT, "%s: %s", path, e2.msg);
    }
    free(layers);
    if (s) return s;
    p->rope = rope;
    for (int i = 0; i < p->n_sel; i++) {
        int l = p->layers[i];
        char names[2][96];
        search_proj_tensor_names(l, names[0], names[1], sizeof names[0]);
        for (int w = 0; w < 2; w++)
            memcpy(w == 0 ? p->wq[l] : p->wk[l], gguf_find_tensor(f, names[w])->data,
                   (size_t)n_embd * d_search * (w ? n_khead : n_qhead) * sizeof(float));
    }
    *out = p;
    return SUBQ_OK;
}

static subq_status read_any(const gguf_file *f, const char *path, void *out, subq_error *err) {
    return search_proj_read(f, path, out, err);
}

subq_status search_proj_load(const char *path, const subq_model *m, search_proj **out, subq_error *err) {
    *out = NULL;
    search_proj *p;
    subq_status s = gguf_load(path, read_any, &p, err);
    if (s) return s;
    if (p->merged) { /* projections belong to the model they are merged into: that model's fingerprint */
        subq_model *owner;
        if ((s = subq_model_load_ex(path, SUBQ_LOAD_MMAP, &owner, err))) {
            search_proj_free(p);
            return s;
        }
        p->model_fingerprint = model_fingerprint(owner);
        subq_model_free(owner);
    }
    if ((s = derived_check_model(path, p->model_fingerprint, m, "them", err))) {
        search_proj_free(p);
        return s;
    }
    if (p->n_embd != m->hp.n_embd || p->n_layer != m->hp.n_layer) {
        int pe = p->n_embd, pl = p->n_layer;
        search_proj_free(p);
        return subq_fail(err, SUBQ_ERR_MISMATCH, "%s is for a model with d_model %d and %d layers, this model has %d and %d",
                         path, pe, pl, m->hp.n_embd, m->hp.n_layer);
    }
    int nq, nk;
    search_heads_of(p->gran, m->hp.n_head, m->hp.n_head_kv, &nq, &nk);
    if (p->n_qhead != nq || p->n_khead != nk) {
        subq_status st = subq_fail(err, SUBQ_ERR_MISMATCH, "%s has %d / %d search heads (%s); this model's %d / %d heads "
                                   "take %d / %d", path, p->n_qhead, p->n_khead, search_granularity_name(p->gran),
                                   m->hp.n_head, m->hp.n_head_kv, nq, nk);
        search_proj_free(p);
        return st;
    }
    *out = p;
    return SUBQ_OK;
}
