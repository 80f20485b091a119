/* libFuzzer target for the model hyper-parameter and RoPE parser
 * (model_hparams_load, rope.c, the architecture units) over arbitrary GGUF
 * bytes: it must either fail with one line, holding nothing, or give
 * frequency tables (LongRoPE's long one too) that are finite, positive and
 * of the size they claim,
 * and a per-layer attention spec a forward can run (positive finite scale,
 * cap and window not negative, a RoPE that exists). */
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
        if (err.msg[0] == '\0' || strchr(err.msg, '\n') || hp.rope.freq || hp.rope.freq_long || hp.rope_local.freq ||
            hp.layer)
            __builtin_trap();
    } else {
        for (int which = 0; which < 2; which++) {
            const rope_hparams *r = which ? &hp.rope_local : &hp.rope;
            if (which && r->n_rot == 0) continue;
            if (r->n_rot < 0 || r->n_rot > hp.head_dim || r->n_rot % 2 || !(r->mscale > 0.0f) || !isfinite(r->mscale))
                __builtin_trap();
            for (int i = 0; i < r->n_rot / 2; i++)
                if (!(r->freq[i] > 0.0) || !isfinite(r->freq[i]) ||
                    (r->freq_long && (!(r->freq_long[i] > 0.0) || !isfinite(r->freq_long[i]))))
                    __builtin_trap();
            if (which && r->freq_long) __builtin_trap(); /* LongRoPE is the global RoPE's */
            char line[512];
            rope_describe(r, line, sizeof line);
            if (strchr(line, '\n')) __builtin_trap();
        }
        for (int l = 0; l < hp.n_layer; l++) {
            const layer_attn *a = &hp.layer[l];
            if (!(a->scale > 0.0f) || !isfinite(a->scale) || !(a->softcap >= 0.0f) || a->window < 0 ||
                (a->rope == LAYER_ROPE_LOCAL && hp.rope_local.n_rot == 0) || a->rope < LAYER_ROPE_NONE ||
                a->rope > LAYER_ROPE_LOCAL)
                __builtin_trap();
        }
        if (!(hp.final_softcap >= 0.0f) || !(hp.embd_scale > 0.0f) || !isfinite(hp.embd_scale)) __builtin_trap();
    }
    model_hparams_free(&hp);
    gguf_close(f);
    return 0;
}
