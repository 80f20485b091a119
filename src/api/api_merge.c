/* Search projection files through the public API: what a file carries,
 * merging projections into a model file and splitting them out (the
 * layout: search/search_merge.c), and projections made from matrices and
 * written (checkpoint converters). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api/api.h"
#include "base/error.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "quant/types.h"
#include "search/search_proj.h"

subq_status subq_search_info_file(const char *path, subq_search_info *out, subq_error *err) {
    memset(out, 0, sizeof *out);
    gguf_file *f;
    subq_status s = gguf_open(path, &f, err);
    if (s) return s;
    search_file_info si;
    s = search_file_info_read(f, path, &si, err);
    gguf_close(f);
    if (s) return s;
    out->merged = si.merged;
    out->d_search = si.d_search;
    out->n_layers = si.n_layers;
    out->top_k = si.top_k;
    memcpy(out->layers, si.layers, sizeof out->layers);
    memcpy(out->arch, si.arch, sizeof out->arch);
    out->rope_dims = si.rope.n_rot;
    out->rope_base = (float)si.rope.base;
    out->rope_scale = (float)si.rope.scale;
    out->granularity = si.gran;
    out->n_query_heads = si.n_qhead;
    out->n_key_heads = si.n_khead;
    const ggml_type_traits *tr = ggml_type_get(si.type);
    snprintf(out->type, sizeof out->type, "%s", tr ? tr->name : "mixed");
    return SUBQ_OK;
}

subq_merge_params subq_merge_default_params(void) {
    subq_merge_params p = {.top_k = 128, .type = "f16"};
    return p;
}

subq_status subq_search_merge(const char *model_path, const char *search_path, const subq_merge_params *p,
                              const char *out_path, subq_error *err) {
    search_merge_opts o = {.top_k = p->top_k, .source = search_path};
    if (!p->type || !strcasecmp(p->type, "f16")) o.type = GGML_TYPE_F16;
    else if (!strcasecmp(p->type, "f32")) o.type = GGML_TYPE_F32;
    else if (!strcasecmp(p->type, "bf16")) o.type = GGML_TYPE_BF16;
    else return subq_fail(err, SUBQ_ERR_ARG, "merged projections are f16, f32 or bf16, not '%s'", p->type);
    subq_model *m;
    subq_status s = subq_model_load_ex(model_path, SUBQ_LOAD_MMAP, &m, err);
    if (s) return s;
    search_proj *proj = NULL;
    gguf_file *extra = NULL;
    s = search_proj_load(search_path, m, &proj, err);
    if (!s) s = gguf_open(search_path, &extra, err);
    o.extra = extra;
    if (!s) s = search_merge_write(m, proj, &o, out_path, err);
    gguf_close(extra);
    search_proj_free(proj);
    subq_model_free(m);
    return s;
}

subq_status subq_search_split(const char *merged_path, const char *out_path, subq_error *err) {
    subq_model *m;
    subq_status s = subq_model_load_ex(merged_path, SUBQ_LOAD_MMAP, &m, err);
    if (s) return s;
    s = search_split_write(m, out_path, err);
    if (s == SUBQ_ERR_RANGE) s = subq_fail(err, s, "%s carries no merged search projections", merged_path);
    subq_model_free(m);
    return s;
}

subq_status subq_search_from_matrices(const subq_model *m, const int *layers, int n_layers, int d_search,
                                      const float *const *wq, const float *const *wk, const char *origin,
                                      subq_search **out, subq_error *err) {
    *out = NULL;
    const int n_layer = m->hp.n_layer, n_embd = m->hp.n_embd;
    if (n_layers <= 0 || n_layers > n_layer || d_search <= 0 || d_search > SUBQ_SEARCH_MAX_D || !layers || !wq || !wk)
        return subq_fail(err, SUBQ_ERR_ARG, "projections from matrices: %d layers of width %d (the model has %d layers; "
                         "width 1..%d)", n_layers, d_search, n_layer, SUBQ_SEARCH_MAX_D);
    for (int i = 0; i < n_layers; i++) {
        if (layers[i] < 0 || layers[i] >= n_layer)
            return subq_fail(err, SUBQ_ERR_ARG, "projections from matrices: layer %d is not a layer of the model (0..%d)",
                             layers[i], n_layer - 1);
        if (!wq[i] || !wk[i]) return subq_fail(err, SUBQ_ERR_ARG, "projections from matrices: layer %d has no matrix",
                                               layers[i]);
        for (size_t j = 0; j < (size_t)d_search * n_embd; j++)
            if (!isfinite(wq[i][j]) || !isfinite(wk[i][j]))
                return subq_fail(err, SUBQ_ERR_ARG, "projections from matrices: layer %d holds a value that is not a "
                                 "finite number", layers[i]);
    }
    search_proj *p;
    subq_status s = search_proj_new(n_layer, n_embd, d_search, layers, n_layers, model_fingerprint(m), &p, err);
    if (s) return s;
    for (int i = 0; i < n_layers; i++) {
        memcpy(p->wq[layers[i]], wq[i], (size_t)d_search * n_embd * sizeof(float));
        memcpy(p->wk[layers[i]], wk[i], (size_t)d_search * n_embd * sizeof(float));
    }
    if (origin) snprintf(p->origin, sizeof p->origin, "%s", origin);
    subq_search *h = malloc(sizeof *h);
    if (!h) {
        search_proj_free(p);
        return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    }
    h->proj = p;
    *out = h;
    return SUBQ_OK;
}

subq_status subq_search_get_matrices(const subq_search *s, int layer, float *wq, float *wk, subq_error *err) {
    const search_proj *p = s->proj;
    if (layer < 0 || layer >= p->n_layer || !p->wq[layer])
        return subq_fail(err, SUBQ_ERR_ARG, "layer %d has no search projections", layer);
    if (wq) memcpy(wq, p->wq[layer], (size_t)p->n_qhead * p->d_search * p->n_embd * sizeof(float));
    if (wk) memcpy(wk, p->wk[layer], (size_t)p->n_khead * p->d_search * p->n_embd * sizeof(float));
    return SUBQ_OK;
}

subq_status subq_search_save(const subq_search *s, const char *path, subq_error *err) {
    if (s->proj->merged)
        return subq_fail(err, SUBQ_ERR_UNSUPPORTED, "these projections were read from a model file and keep no "
                         "fingerprint: write them with subq split (subq_search_split) instead");
    return search_proj_save(s->proj, path, err);
}
