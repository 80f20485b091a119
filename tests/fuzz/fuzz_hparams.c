/* libFuzzer target for the model hyper-parameter and RoPE parser
 * (model_hparams_load, rope.c) over arbitrary GGUF bytes: it must either
 * fail with one line or give a frequency table that is finite, positive
 * and of the size it claims. */
#include <math.h>
#include <string.h>

#include "gguf/gguf.h"
#include "model/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gguf_file *f = NULL;
    subq_error err;
    if (gguf_open_memory(data, size, &f, &err) != SUBQ_OK) return 0;
    model_hparams hp;
    if (model_hparams_load(f, &hp, &err) != SUBQ_OK) {
        if (err.msg[0] == '\0' || strchr(err.msg, '\n') || hp.rope.freq != NULL) __builtin_trap();
    } else {
        const rope_hparams *r = &hp.rope;
        if (r->n_rot < 0 || r->n_rot > hp.head_dim || r->n_rot % 2 || !(r->mscale > 0.0f) || !isfinite(r->mscale))
            __builtin_trap();
        for (int i = 0; i < r->n_rot / 2; i++)
            if (!(r->freq[i] > 0.0) || !isfinite(r->freq[i])) __builtin_trap();
        char line[512];
        rope_describe(r, line, sizeof line);
        if (strchr(line, '\n')) __builtin_trap();
    }
    model_hparams_free(&hp);
    gguf_close(f);
    return 0;
}
