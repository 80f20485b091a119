/* subq_kv_file_inspect: a KV file's header and, on request, every
 * committed slot verified, without a model; subq_context_kv_file_info: the
 * same header of a context's own file. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/error.h"
#include "base/timer.h"
#include "kv/kv_file.h"
#include "model/context.h"

/* The header's fields (the file's size aside). */
static void header_info(const kv_file *f, subq_kv_file_info *info) {
    const kv_file_geometry *g = kv_file_geom(f);
    info->model_fingerprint = g->model_fingerprint;
    info->kv_type = (subq_kv_type)g->kv_type;
    info->n_ctx = (int)g->n_ctx, info->n_committed = kv_file_committed(f), info->has_logits = kv_file_has_logits(f);
    info->n_layer = (int)g->n_layer, info->n_head_kv = (int)g->n_head_kv, info->head_dim = (int)g->head_dim;
    info->n_vocab = (int)g->n_vocab, info->n_search_layers = kv_file_n_search(f);
    info->header_damaged = kv_file_newest_damaged(f);
    info->n_committed_newest = kv_file_newest_committed(f);
    for (int l = 0; l < info->n_layer; l++) info->n_head_major_layers += kv_file_head_major(f, l);
}

subq_status subq_kv_file_inspect(const char *path, int verify, subq_kv_file_info *info, subq_error *err) {
    if (!path || !info) return subq_fail(err, SUBQ_ERR_ARG, "subq_kv_file_inspect: NULL argument");
    memset(info, 0, sizeof *info);
    kv_file *f;
    subq_status s = kv_file_open_read(path, &f, err);
    if (s) return s;
    struct stat st;
    header_info(f, info);
    info->file_bytes = stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
    info->writer_pid = kv_file_writer(f);
    context_indexes_info(path, &info->n_graph_layers, &info->n_graph_tokens);
    if (verify) {
        const double t0 = time_now_s();
        s = kv_file_verify(f, 0, info->n_committed, err);
        info->verify_s = time_now_s() - t0;
        /* a writer may have lowered the header and rewritten rows as they were read */
        if (s && kv_file_header_moved(f)) {
            char who[48] = "another process";
            if (info->writer_pid > 0) snprintf(who, sizeof who, "process %ld", info->writer_pid);
            s = subq_fail(err, SUBQ_ERR_BUSY, "KV file %s changed while it was verified (%s writes it): verify it "
                          "again when that is done", path, who);
        }
        char damage[400];
        if (!s && kv_file_damage(f, damage, sizeof damage))
            s = subq_fail(err, SUBQ_ERR_FORMAT, "%s (resuming from it needs --kv-recover)", damage);
    }
    kv_file_close(f);
    return s;
}

subq_status subq_context_kv_file_info(const subq_context *c, subq_kv_file_info *info, subq_error *err) {
    if (!c || !info) return subq_fail(err, SUBQ_ERR_ARG, "subq_context_kv_file_info: NULL argument");
    memset(info, 0, sizeof *info);
    if (!c->kv.file) return subq_fail(err, SUBQ_ERR_ARG, "the context has no KV file");
    header_info(c->kv.file, info);
    context_indexes_info(kv_file_path(c->kv.file), &info->n_graph_layers, &info->n_graph_tokens);
    return SUBQ_OK;
}
