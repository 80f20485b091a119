/* Gemma 2 and Gemma 3: embeddings times sqrt(n_embd), an RMSNorm after each
 * block as well as before it, GELU-gated FFN, RoPE on split halves, and
 * sliding-window layers between global ones (llama.cpp's keys and
 * defaults):
 *   gemma2: every other layer (0, 2, ...) slides over 4096 keys; attention
 *           scores and the final logits are soft-capped, c tanh(s / c), at
 *           50 and 30 (attn_logit_softcapping, final_logit_softcapping)
 *   gemma3: five of every six layers slide (512 or 1024 keys;
 *           attention.sliding_window_pattern may say otherwise) and rotate
 *           with base rope.freq_base_swa (10000) and no scaling; the global
 *           ones (5, 11, ...) use the file's RoPE (base 1e6, linear x8 on
 *           4B+); RMSNorm of each head's q and k; final_logit_softcapping
 *           only when the file gives it
 * The scale of q . k is 1/sqrt(head_dim), but 1/sqrt(n_embd / n_head) in
 * the 27B models (46 and 62 layers: query_pre_attn_scalar). */
#include <math.h>
#include <stdio.h>

#include "base/error.h"
#include "model/arch.h"
#include "model/model.h"

static subq_status get_cap(const gguf_file *f, const char *key, float def, float *out, subq_error *err) {
    subq_status s = gguf_get_f32_or(f, key, def, out, err);
    if (!s && !(*out >= 0.0f && *out <= 1e6f))
        return subq_fail(err, SUBQ_ERR_FORMAT, "%s = %g is out of range [0, 1e6]", key, (double)*out);
    return s;
}

static void big_model_scale(model_hparams *hp, int n_layer_27b) {
    if (hp->n_layer != n_layer_27b) return;
    for (int l = 0; l < hp->n_layer; l++) hp->layer[l].scale = 1.0f / sqrtf((float)(hp->n_embd / hp->n_head));
}

static subq_status load_gemma2(const gguf_file *f, model_hparams *hp, subq_error *err) {
    int window;
    float cap;
    subq_status s;
    if ((s = arch_sliding_window(f, "gemma2", 4096, &window, err)) ||
        (s = get_cap(f, "gemma2.attn_logit_softcapping", 50.0f, &cap, err)) ||
        (s = get_cap(f, "gemma2.final_logit_softcapping", 30.0f, &hp->final_softcap, err)))
        return s;
    if ((s = arch_slide_layers(f, "gemma2", hp, window, 2, err))) return s;
    for (int l = 0; l < hp->n_layer; l++) hp->layer[l].softcap = cap;
    big_model_scale(hp, 46);
    return SUBQ_OK;
}

static subq_status load_gemma3(const gguf_file *f, model_hparams *hp, subq_error *err) {
    int window;
    float local_base;
    subq_status s;
    if ((s = arch_sliding_window(f, "gemma3", 0, &window, err)) ||
        (s = gguf_get_f32_or(f, "gemma3.rope.freq_base_swa", 10000.0f, &local_base, err)))
        return s;
    if (!(local_base > 1.0f && local_base < 1e12f))
        return subq_fail(err, SUBQ_ERR_FORMAT, "gemma3.rope.freq_base_swa = %g is out of range (1, 1e12)",
                         (double)local_base);
    if (window > 0) {
        if ((s = rope_load_local(hp, local_base, err)) || (s = arch_slide_layers(f, "gemma3", hp, window, 6, err)))
            return s;
        for (int l = 0; l < hp->n_layer; l++)
            if (hp->layer[l].window) hp->layer[l].rope = LAYER_ROPE_LOCAL;
    }
    if ((s = get_cap(f, "gemma3.final_logit_softcapping", 0.0f, &hp->final_softcap, err))) return s;
    big_model_scale(hp, 62);
    return SUBQ_OK;
}

const arch_desc arch_gemma2 = {.name = "gemma2", .id = ARCH_GEMMA2, .rope_neox = 1, .post_norms = 1,
                               .act = FFN_GELU, .embd_scale = 1, .load = load_gemma2};
const arch_desc arch_gemma3 = {.name = "gemma3", .id = ARCH_GEMMA3, .rope_neox = 1, .qk_norm = 1, .post_norms = 1,
                               .act = FFN_GELU, .embd_scale = 1, .load = load_gemma3};
