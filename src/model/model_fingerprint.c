/* A model fingerprint ties files derived from a model (search projections,
 * completion maps) to that model: FNV-1a over the architecture, the shape
 * hyper-parameters, every tensor's name, type and shape, and up to 4 KiB
 * from the start and end of each tensor's data (search projections merged
 * into the file are not the model's: fingerprint_skips_tensor). Cheap (no full read of a
 * multi-GB file) yet it changes with any re-quantisation or fine-tune. */
#include <string.h>

#include "base/fingerprint.h"
#include "model/model.h"

uint64_t model_fingerprint(const subq_model *m) {
    uint64_t h = FNV_OFFSET;
    const model_hparams *hp = &m->hp;
    int32_t dims[] = {(int32_t)hp->arch, hp->n_layer, hp->n_embd, hp->n_head, hp->n_head_kv, hp->head_dim,
                      hp->n_ff, hp->n_vocab};
    h = fnv1a(h, dims, sizeof dims);
    const gguf_file *f = m->file;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        if (fingerprint_skips_tensor(t->name)) continue;
        h = fnv1a(h, t->name, strlen(t->name));
        h = fnv1a(h, &t->type, sizeof t->type);
        h = fnv1a(h, t->ne, sizeof t->ne);
        size_t head = t->n_bytes < 4096 ? (size_t)t->n_bytes : 4096;
        h = fnv1a(h, t->data, head);
        if (t->n_bytes > 4096) h = fnv1a(h, (const char *)t->data + t->n_bytes - 4096, 4096);
    }
    return h;
}
