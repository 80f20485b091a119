/* Search projections merged into a model GGUF, in the layout of
 * ann-sparseattention's llama.cpp runtime (github.com/unixsysdev/
 * ann-sparseattention, branch feat/llama-ann-runtime): its script
 * runtime/scripts/merge_ann_checkpoint_to_gguf.py writes it, and its Qwen3
 * loader (src/models/qwen3.cpp) and decode graph (build_attn_ann in
 * src/llama-graph.cpp) read it. Everything this file knows about that layout
 * is here:
 *
 *   {arch}.attention.indexer.head_count  u32  1
 *   {arch}.attention.indexer.key_length  u32  d_search; the loader creates the
 *                                             indexer tensors only when > 0
 *   {arch}.attention.indexer.top_k       u32  K of its decode-time top-K
 *                                             (128 when absent)
 *   ann_sparse.layers                    i32 array: the layers with projections
 *   ann_sparse.checkpoint, ann_sparse.config   strings (provenance only)
 *   blk.{i}.indexer.proj.weight    W_Qs  \  f16, ne = {d_model, d_search}
 *   blk.{i}.indexer.attn_k.weight  W_Ks  /  (a PyTorch [d_search, d_model] weight)
 *
 * The runtime computes q_s = W_Qs h and k_s = W_Ks h from the attn_norm
 * output h, as subq does; every other tensor and key is the base model's,
 * unchanged. subq reads the matrices in any element type it can dequantise
 * (f16 as written, or whatever llama-quantize made of them) and writes f16
 * by default (as the script does), f32 or bf16. The runtime ignores subq.search.* keys, so a merge
 * carries the projection file's training metadata along for a later split. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/fingerprint.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "quant/quant.h"
#include "quant/types.h"
#include "search/search_proj.h"

#define KEY_HEAD_COUNT "%s.attention.indexer.head_count"
#define KEY_KEY_LENGTH "%s.attention.indexer.key_length"
#define KEY_TOP_K "%s.attention.indexer.top_k"
#define KEY_LAYERS "ann_sparse.layers"
#define KEY_CHECKPOINT "ann_sparse.checkpoint"
#define KEY_CONFIG "ann_sparse.config"
#define PREFIX_ANN "ann_sparse."
#define PREFIX_SUBQ "subq.search."

static void arch_key(char *buf, size_t cap, const char *fmt, const char *arch) { snprintf(buf, cap, fmt, arch); }

int search_merged_present(const gguf_file *f) {
    char arch[64], key[128];
    subq_error e = {0};
    if (!gguf_get_str(f, "general.architecture", arch, sizeof arch, &e)) {
        arch_key(key, sizeof key, KEY_KEY_LENGTH, arch);
        if (gguf_find_kv(f, key)) return 1;
    }
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (fingerprint_skips_tensor(f->tensors[i].name)) return 1;
    return 0;
}

/* What a merged file holds, checked: the model's sizes, d_search, the top-K,
 * the layers (ascending), the element type, and each layer's two tensors. */
typedef struct merged_scan {
    int n_layer, n_embd, d_search, top_k, n_sel;
    uint32_t type;                  /* of the matrices; GGML_TYPE_COUNT when they differ */
    int *layers;                    /* [n_sel] */
    const gguf_tensor **wq, **wk;   /* [n_layer] */
} merged_scan;

static void scan_free(merged_scan *sc) {
    free(sc->layers);
    free(sc->wq);
    free(sc->wk);
}

/* Layer and matrix (0: W_Qs, 1: W_Ks) of an indexer tensor name; -1 when it
 * is none subq reads. */
static int parse_name(const char *name, int *layer) {
    long l = 0;
    const char *p = name + 4; /* fingerprint_skips_tensor: "blk.<digits>.indexer." */
    while (*p >= '0' && *p <= '9' && l < 1000000) l = l * 10 + (*p++ - '0');
    *layer = (int)l;
    if (!strcmp(p, ".indexer.proj.weight")) return 0;
    if (!strcmp(p, ".indexer.attn_k.weight")) return 1;
    return -1;
}

static subq_status scan_merged(const gguf_file *f, const char *path, merged_scan *sc, subq_error *err) {
    memset(sc, 0, sizeof *sc);
    subq_error e2 = {0};
    char arch[64], key[128];
    uint32_t n_layer, n_embd, d_search, heads = 1, top_k = 0;
    if (gguf_get_str(f, "general.architecture", arch, sizeof arch, &e2))
        return subq_fail(err, SUBQ_ERR_FORMAT, "%s: merged search projections: %s", path, e2.msg);
    arch_key(key, sizeof key, "%s.block_count", arch);
    if (gguf_get_u32(f, key, &n_layer, &e2)) return subq_fail(err, SUBQ_ERR_FORMAT, "%s: %s", path, e2.msg);
    arch_key(key, sizeof key, "%s.embedding_length", arch);
    if (gguf_get_u32(f, key, &n_embd, &e2)) return subq_fail(err, SUBQ_ERR_FORMAT, "%s: %s", path, e2.msg);
    arch_key(key, sizeof key, KEY_KEY_LENGTH, arch);
    if (!gguf_find_kv(f, key))
        return subq_fail(err, SUBQ_ERR_FORMAT, "%s has indexer tensors but no %s (the runtime would ignore them)",
                         path, key);
    if (gguf_get_u32(f, key, &d_search, &e2)) return subq_fail(err, SUBQ_ERR_FORMAT, "%s: %s", path, e2.msg);
    arch_key(key, sizeof key, KEY_HEAD_COUNT, arch);
    if (gguf_get_u32_or(f, key, 1, &heads, &e2)) return subq_fail(err, SUBQ_ERR_FORMAT, "%s: %s", path, e2.msg);
    if (heads != 1)
        return subq_fail(err, SUBQ_ERR_UNSUPPORTED, "%s: %s is %u; only single-head search projections are supported",
                         path, key, heads);
    arch_key(key, sizeof key, KEY_TOP_K, arch);
    if (gguf_get_u32_or(f, key, 0, &top_k, &e2)) return subq_fail(err, SUBQ_ERR_FORMAT, "%s: %s", path, e2.msg);
    if (d_search == 0 || d_search > SEARCH_PROJ_MAX_D || n_embd == 0 || n_embd > (1u << 20) || n_layer == 0 ||
        n_layer > 4096 || top_k > (1u << 20))
        return subq_fail(err, SUBQ_ERR_FORMAT, "%s: implausible sizes (d_search %u, d_model %u, %u layers, top-k %u)",
                         path, d_search, n_embd, n_layer, top_k);
    sc->n_layer = (int)n_layer, sc->n_embd = (int)n_embd, sc->d_search = (int)d_search, sc->top_k = (int)top_k;
    sc->wq = calloc(n_layer, sizeof *sc->wq);
    sc->wk = calloc(n_layer, sizeof *sc->wk);
    sc->layers = malloc(n_layer * sizeof(int));
    if (!sc->wq || !sc->wk || !sc->layers) {
        scan_free(sc);
        return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    }
    subq_status s = SUBQ_OK;
    int n_seen = 0;
    for (uint64_t i = 0; i < f->n_tensors && !s; i++) {
        const gguf_tensor *t = &f->tensors[i];
        if (!fingerprint_skips_tensor(t->name)) continue;
        int l, w = parse_name(t->name, &l);
        if (w < 0)
            s = subq_fail(err, SUBQ_ERR_UNSUPPORTED, "%s: indexer tensor %s is not a search projection subq reads",
                          path, t->name);
        else if (l >= (int)n_layer)
            s = subq_fail(err, SUBQ_ERR_FORMAT, "%s: tensor %s is past the model's %u layers", path, t->name, n_layer);
        else if (!ggml_type_get(t->type) || !ggml_type_get(t->type)->can_dequant)
            s = subq_fail(err, SUBQ_ERR_UNSUPPORTED, "%s: tensor %s is of a type subq cannot read (%s)", path,
                          t->name, ggml_type_get(t->type) ? ggml_type_get(t->type)->name : "unknown");
        else if (t->n_dims != 2 || t->ne[0] != n_embd || t->ne[1] != d_search)
            s = subq_fail(err, SUBQ_ERR_SHAPE, "%s: tensor %s has shape %" PRIu64 " x %" PRIu64 ", expected %u x %u "
                          "(d_model x d_search)%s", path, t->name, t->ne[0], t->n_dims > 1 ? t->ne[1] : 1, n_embd,
                          d_search, t->ne[0] == d_search && t->ne[1] == n_embd ? "; it is transposed" : "");
        else {
            if (n_seen++ == 0) sc->type = t->type;
            else if (t->type != sc->type) sc->type = GGML_TYPE_COUNT;
            *(w ? &sc->wk[l] : &sc->wq[l]) = t;
        }
    }
    for (int l = 0; l < (int)n_layer && !s; l++) {
        if (!sc->wq[l] != !sc->wk[l])
            s = subq_fail(err, SUBQ_ERR_FORMAT, "%s: layer %d has only one of its two search projections", path, l);
        else if (sc->wq[l])
            sc->layers[sc->n_sel++] = l;
    }
    if (!s && sc->n_sel == 0) s = subq_fail(err, SUBQ_ERR_FORMAT, "%s: no search projection tensors", path);
    /* the layer list the script writes must name exactly those layers */
    const gguf_value *arr;
    if (!s && gguf_find_kv(f, KEY_LAYERS)) {
        if (gguf_get_arr(f, KEY_LAYERS, GGUF_TYPE_INT32, &arr, &e2))
            s = subq_fail(err, SUBQ_ERR_FORMAT, "%s: %s", path, e2.msg);
        int same = !s && arr->v.arr.n == (uint64_t)sc->n_sel;
        for (int i = 0; same && i < sc->n_sel; i++) same = gguf_arr_get_i64(arr, (uint64_t)i) == sc->layers[i];
        if (!s && !same)
            s = subq_fail(err, SUBQ_ERR_FORMAT, "%s: %s does not list the %d layers that have projections", path,
                          KEY_LAYERS, sc->n_sel);
    }
    if (s) scan_free(sc);
    return s;
}

/* n elements of a stored matrix to f32 (f32, f16, bf16 read with memcpy: a
 * file in memory need not align them; block types through the kernels). */
static void to_f32(const gguf_tensor *t, float *dst, size_t n) {
    const unsigned char *b = t->data;
    if (t->type == GGML_TYPE_F32) {
        memcpy(dst, b, n * sizeof(float));
    } else if (t->type == GGML_TYPE_F16 || t->type == GGML_TYPE_BF16) {
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, b + 2 * i, 2);
            dst[i] = t->type == GGML_TYPE_F16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
        }
    } else {
        dequant_row(t->type, b, dst, (int64_t)n);
    }
}

subq_status search_merged_read(const gguf_file *f, const char *path, search_proj **out, subq_error *err) {
    *out = NULL;
    /* the runtime's layout has no rotary part: a file that says its
     * projections had one would be misread */
    uint32_t rope_dims = 0;
    subq_error e2 = {0};
    if (gguf_get_u32_or(f, PREFIX_SUBQ "rope_dims", 0, &rope_dims, &e2))
        return subq_fail(err, SUBQ_ERR_FORMAT, "%s: %s", path, e2.msg);
    if (rope_dims)
        return subq_fail(err, SUBQ_ERR_UNSUPPORTED, "%s: its merged search projections say they rotate %u dims by "
                         "position (subq.search.rope_dims), which the merged layout cannot carry", path, rope_dims);
    merged_scan sc;
    subq_status s = scan_merged(f, path, &sc, err);
    if (s) return s;
    search_proj *p;
    s = search_proj_new(sc.n_layer, sc.n_embd, sc.d_search, sc.layers, sc.n_sel, 0, &p, err);
    if (!s) {
        const size_t n = (size_t)sc.n_embd * (size_t)sc.d_search;
        for (int i = 0; i < p->n_sel; i++) {
            int l = p->layers[i];
            to_f32(sc.wq[l], p->wq[l], n);
            to_f32(sc.wk[l], p->wk[l], n);
        }
        p->merged = 1;
        p->top_k = sc.top_k;
        *out = p;
    }
    scan_free(&sc);
    return s;
}

subq_status search_proj_from_model(const subq_model *m, search_proj **out, subq_error *err) {
    *out = NULL;
    if (!search_merged_present(m->file)) return subq_fail(err, SUBQ_ERR_RANGE, "the model file carries no search projections");
    subq_status s = search_merged_read(m->file, "the model file", out, err);
    if (s) return s;
    if ((*out)->n_embd != m->hp.n_embd || (*out)->n_layer != m->hp.n_layer) { /* the file's keys say otherwise */
        search_proj_free(*out);
        *out = NULL;
        return subq_fail(err, SUBQ_ERR_FORMAT, "the model file's search projections do not fit its d_model %d and %d "
                         "layers", m->hp.n_embd, m->hp.n_layer);
    }
    (*out)->model_fingerprint = model_fingerprint(m);
    return SUBQ_OK;
}

/* Copy the pairs of f whose key starts with `prefix` (all when NULL), except
 * those starting with one of the `drop` prefixes. */
static subq_status copy_keys(gguf_writer *w, const gguf_file *f, const char *prefix, const char *const *drop,
                             int n_drop) {
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const gguf_str *k = &f->kv[i].key;
        int keep = !prefix || (k->len >= strlen(prefix) && !memcmp(k->data, prefix, strlen(prefix)));
        for (int d = 0; d < n_drop && keep; d++)
            keep = !(k->len >= strlen(drop[d]) && !memcmp(k->data, drop[d], strlen(drop[d])));
        subq_status s = keep ? gguf_writer_copy_kv(w, f, i) : SUBQ_OK;
        if (s) return s;
    }
    return SUBQ_OK;
}

/* "3-34", "4,8,12": ascending layers as ranges, "..." when they do not fit */
static void format_layers(const int *layers, int n, char *buf, size_t cap) {
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && o + 16 < cap;) {
        int j = i;
        while (j + 1 < n && layers[j + 1] == layers[j] + 1) j++;
        o += (size_t)(j > i ? snprintf(buf + o, cap - o, "%s%d-%d", i ? "," : "", layers[i], layers[j])
                            : snprintf(buf + o, cap - o, "%s%d", i ? "," : "", layers[i]));
        i = j + 1;
        if (i < n && o + 16 >= cap) snprintf(buf + o, cap - o, ",...");
    }
}

/* One matrix in element type `type`, malloc'd (NULL when out of memory). */
static void *convert(const float *src, size_t n, uint32_t type) {
    if (type == GGML_TYPE_F32) {
        float *d = malloc(n * sizeof(float));
        if (d) memcpy(d, src, n * sizeof(float));
        return d;
    }
    uint16_t *d = malloc(n * sizeof(uint16_t));
    for (size_t i = 0; d && i < n; i++) d[i] = type == GGML_TYPE_F16 ? fp32_to_fp16(src[i]) : fp32_to_bf16(src[i]);
    return d;
}

subq_status search_merge_write(const subq_model *m, const search_proj *p, const search_merge_opts *o,
                               const char *path, subq_error *err) {
    const gguf_file *f = m->file;
    if (p->n_embd != m->hp.n_embd || p->n_layer != m->hp.n_layer || p->model_fingerprint != model_fingerprint(m))
        return subq_fail(err, SUBQ_ERR_MISMATCH, "the search projections belong to another model");
    if (o->type != GGML_TYPE_F32 && o->type != GGML_TYPE_F16 && o->type != GGML_TYPE_BF16)
        return subq_fail(err, SUBQ_ERR_ARG, "merged search projections must be f32, f16 or bf16");
    if (p->gran != SUBQ_SEARCH_LAYER)
        return subq_fail(err, SUBQ_ERR_UNSUPPORTED, "these search projections pick keys per %s (%d search heads), "
                         "which ann-sparseattention's llama.cpp runtime does not do: it ranks with one set a layer, "
                         "so they are not merged (use the projection file with --search)",
                         search_granularity_name(p->gran), p->n_qhead);
    if (p->rope.n_rot > 0)
        return subq_fail(err, SUBQ_ERR_UNSUPPORTED, "these search projections rotate their last %d dims by position, "
                         "which ann-sparseattention's llama.cpp runtime does not do: it would rank with unrotated "
                         "keys, so they are not merged (use the projection file with --search)", p->rope.n_rot);
    if (o->top_k <= 0 || o->top_k > (1 << 20))
        return subq_fail(err, SUBQ_ERR_ARG, "top-k %d out of range [1, %d]", o->top_k, 1 << 20);
    const char *arch = model_arch_name(m->hp.arch);
    char k_heads[96], k_len[96], k_top[96], layers_txt[256], config[512];
    arch_key(k_heads, sizeof k_heads, KEY_HEAD_COUNT, arch);
    arch_key(k_len, sizeof k_len, KEY_KEY_LENGTH, arch);
    arch_key(k_top, sizeof k_top, KEY_TOP_K, arch);
    format_layers(p->layers, p->n_sel, layers_txt, sizeof layers_txt);
    snprintf(config, sizeof config, "subq search projections: d_search %d, layers %s", p->d_search, layers_txt);
    int32_t *layers = malloc((size_t)p->n_sel * sizeof(int32_t));
    gguf_writer *w = gguf_writer_new();
    subq_status s = !layers || !w ? SUBQ_ERR_NOMEM : SUBQ_OK;
    for (int i = 0; !s && i < p->n_sel; i++) layers[i] = p->layers[i];
    /* the model's metadata without earlier projections' keys, then the new ones */
    const char *drop[] = {k_heads, k_len, k_top, PREFIX_ANN, PREFIX_SUBQ};
    if (!s) s = copy_keys(w, f, NULL, drop, 5);
    if (!s && o->extra) s = copy_keys(w, o->extra, PREFIX_SUBQ, NULL, 0);
    s = s ? s : gguf_writer_set_u32(w, k_heads, 1);
    s = s ? s : gguf_writer_set_u32(w, k_len, (uint32_t)p->d_search);
    s = s ? s : gguf_writer_set_u32(w, k_top, (uint32_t)o->top_k);
    s = s ? s : gguf_writer_set_arr(w, KEY_LAYERS, GGUF_TYPE_INT32, layers, (uint64_t)p->n_sel);
    s = s ? s : gguf_writer_set_str(w, KEY_CHECKPOINT, o->source ? o->source : "subq");
    s = s ? s : gguf_writer_set_str(w, KEY_CONFIG, config);
    free(layers);
    if (s) {
        gguf_writer_free(w);
        return subq_fail(err, s, "out of memory building the merged model's metadata");
    }
    /* the model's tensors as they are (pointing into its mapping), then the projections */
    for (uint64_t i = 0; i < f->n_tensors && !s; i++) {
        const gguf_tensor *t = &f->tensors[i];
        if (!fingerprint_skips_tensor(t->name))
            s = gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->n_bytes, 0, err);
    }
    const size_t n = (size_t)p->n_embd * (size_t)p->d_search;
    const uint64_t ne[2] = {(uint64_t)p->n_embd, (uint64_t)p->d_search};
    const uint64_t bytes = (uint64_t)n * (o->type == GGML_TYPE_F32 ? 4 : 2);
    for (int i = 0; i < p->n_sel && !s; i++) {
        const int l = p->layers[i];
        char names[2][96];
        search_proj_tensor_names(l, names[0], names[1], sizeof names[0]);
        for (int m2 = 0; m2 < 2 && !s; m2++) {
            void *data = convert(m2 ? p->wk[l] : p->wq[l], n, o->type);
            s = data ? gguf_writer_add_tensor(w, names[m2], o->type, 2, ne, data, bytes, 1, err) /* owns data */
                     : subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
        }
    }
    if (!s) s = gguf_writer_write(w, path, err);
    gguf_writer_free(w);
    return s;
}

subq_status search_split_write(const subq_model *m, const char *path, subq_error *err) {
    search_proj *p;
    subq_status s = search_proj_from_model(m, &p, err);
    if (s) return s;
    gguf_writer *w = gguf_writer_new();
    if (!w) s = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    /* the training metadata a merge carried along, then the core keys (which replace stale copies) */
    if (!s && (s = copy_keys(w, m->file, PREFIX_SUBQ, NULL, 0))) s = subq_fail(err, s, "out of memory");
    if (!s) s = search_proj_to_writer(p, w, err);
    if (!s) s = gguf_writer_write(w, path, err);
    gguf_writer_free(w);
    search_proj_free(p);
    return s;
}

subq_status search_file_info_read(const gguf_file *f, const char *path, search_file_info *out, subq_error *err) {
    memset(out, 0, sizeof *out);
    char arch[64];
    subq_error e2 = {0};
    if (!gguf_get_str(f, "general.architecture", arch, sizeof arch, &e2) && !strcmp(arch, SEARCH_PROJ_ARCH)) {
        search_proj *p;
        subq_status s = search_proj_read(f, path, &p, err);
        if (s) return s;
        out->d_search = p->d_search, out->n_layers = p->n_sel, out->type = GGML_TYPE_F32;
        out->rope = p->rope;
        out->gran = p->gran, out->n_qhead = p->n_qhead, out->n_khead = p->n_khead;
        format_layers(p->layers, p->n_sel, out->layers, sizeof out->layers);
        search_proj_free(p);
        return SUBQ_OK;
    }
    if (!search_merged_present(f)) return subq_fail(err, SUBQ_ERR_RANGE, "%s carries no search projections", path);
    merged_scan sc;
    subq_status s = scan_merged(f, path, &sc, err);
    if (s) return s;
    out->merged = 1, out->d_search = sc.d_search, out->n_layers = sc.n_sel, out->top_k = sc.top_k;
    out->gran = SUBQ_SEARCH_LAYER, out->n_qhead = out->n_khead = 1;
    gguf_get_str(f, "general.architecture", out->arch, sizeof out->arch, &e2); /* scan_merged read it */
    out->type = sc.type;
    format_layers(sc.layers, sc.n_sel, out->layers, sizeof out->layers);
    scan_free(&sc);
    return SUBQ_OK;
}
