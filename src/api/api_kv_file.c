/* subq_kv_file_inspect: a KV file's header and, on request, every
 * committed slot verified, without a model. */
#include <string.h>
#include <sys/stat.h>

#include "base/error.h"
#include "base/timer.h"
#include "kv/kv_file.h"

subq_status subq_kv_file_inspect(const char *path, int verify, subq_kv_file_info *info, subq_error *err) {
    if (!path || !info) return subq_fail(err, SUBQ_ERR_ARG, "subq_kv_file_inspect: NULL argument");
    memset(info, 0, sizeof *info);
    kv_file *f;
    subq_status s = kv_file_open_read(path, &f, err);
    if (s) return s;
    const kv_file_geometry *g = kv_file_geom(f);
    struct stat st;
    info->model_fingerprint = g->model_fingerprint;
    info->file_bytes = stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
    info->kv_type = (subq_kv_type)g->kv_type;
    info->n_ctx = (int)g->n_ctx, info->n_committed = kv_file_committed(f), info->has_logits = kv_file_has_logits(f);
    info->n_layer = (int)g->n_layer, info->n_head_kv = (int)g->n_head_kv, info->head_dim = (int)g->head_dim;
    info->n_vocab = (int)g->n_vocab, info->n_search_layers = kv_file_n_search(f);
    if (verify) {
        const double t0 = time_now_s();
        s = kv_file_verify(f, 0, info->n_committed, err);
        info->verify_s = time_now_s() - t0;
    }
    kv_file_close(f);
    return s;
}
