/* A context's indexes saved and found again: in session files, and beside
 * a KV file FILE as FILE.hnsw (format in api/session.h). An index is a
 * cache of what its keys give: whoever reads one rebuilds it from the keys
 * when it does not check out. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "kv/kv_file.h"
#include "model/context.h"
#include "quant/types.h"

#define INDEXES_VERSION 1

subq_status context_add_indexes(gguf_writer *w, const subq_context *c, int *n_added, subq_error *err) {
    subq_status s = SUBQ_OK;
    for (int l = 0; l < c->model->hp.n_layer && !s; l++) {
        void *index;
        size_t bytes;
        if ((s = attn_stage_get_index(c->stages[l], &index, &bytes, err)) || !index) continue;
        char name[64];
        uint64_t ne[2] = {(uint64_t)bytes, 1};
        snprintf(name, sizeof name, "index.%d", l);
        if (!(s = gguf_writer_add_tensor(w, name, GGML_TYPE_I8, 1, ne, index, bytes, 1, err))) ++*n_added;
    }
    return s;
}

const gguf_tensor *context_find_index(const gguf_file *f, int l) {
    char name[64];
    snprintf(name, sizeof name, "index.%d", l);
    const gguf_tensor *t = gguf_find_tensor(f, name);
    return t && t->type == GGML_TYPE_I8 && t->ne[1] == 1 && t->ne[2] == 1 && t->ne[3] == 1 ? t : NULL;
}

/* FILE.hnsw (malloc'd), or NULL when out of memory */
static char *indexes_path(const char *path) {
    const size_t n = strlen(path);
    char *p = malloc(n + sizeof ".hnsw");
    if (p) {
        memcpy(p, path, n);
        memcpy(p + n, ".hnsw", sizeof ".hnsw");
    }
    return p;
}

subq_status context_save_indexes(const subq_context *c, subq_error *err) {
    if (!c->kv.file || !c->file_writable || c->kv.n_used == 0) return SUBQ_OK;
    gguf_writer *w = gguf_writer_new();
    char *path = indexes_path(kv_file_path(c->kv.file));
    int n_index = 0;
    subq_status s = SUBQ_OK;
    if (!w || !path || gguf_writer_set_u32(w, "subq.indexes.version", INDEXES_VERSION) ||
        gguf_writer_set_u32(w, "subq.indexes.n_past", (uint32_t)c->kv.n_used))
        s = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    if (!s) s = context_add_indexes(w, c, &n_index, err);
    if (!s && n_index > 0) s = gguf_writer_write(w, path, err);
    gguf_writer_free(w);
    free(path);
    return s;
}

/* FILE.hnsw of KV file `path` opened, or NULL (none, or not a GGUF file) */
static gguf_file *open_indexes(const char *kv_path) {
    char *path = indexes_path(kv_path);
    gguf_file *f = NULL;
    subq_error ignored;
    if (path && access(path, R_OK) == 0 && gguf_open(path, &f, &ignored)) f = NULL;
    free(path);
    return f;
}

gguf_file *context_open_indexes(const subq_context *c) { return open_indexes(kv_file_path(c->kv.file)); }

void context_indexes_info(const char *kv_path, int *n_layers, int *n_tokens) {
    gguf_file *f = open_indexes(kv_path);
    uint32_t n = 0;
    subq_error ignored;
    *n_layers = *n_tokens = 0;
    if (f && !gguf_get_u32(f, "subq.indexes.n_past", &n, &ignored) && n <= INT32_MAX) {
        for (uint64_t i = 0; i < f->n_tensors; i++)
            *n_layers += !strncmp(f->tensors[i].name, "index.", 6);
        *n_tokens = *n_layers ? (int)n : 0;
    }
    gguf_close(f);
}
