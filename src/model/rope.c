/* RoPE hyper-parameters as llama.cpp reads them from a GGUF file, and the
 * per-pair angular frequencies they imply, computed once at load.
 *
 * Pair i (0 <= i < n_rot/2) of a head rotates by angle p * freq[i] at
 * position p, with cos and sin multiplied by mscale, where
 *
 *   theta_i   = base^(-2i/n_rot) / ff_i          ff_i: rope_freqs.weight, else 1
 *   s         = 1 / factor                       linear and yarn, else 1
 *   linear:     freq_i = s * theta_i,            mscale = attn_factor
 *   yarn:       freq_i = theta_i * (s (1 - r_i) + r_i),
 *               mscale = attn_factor * (1 + 0.1 ln factor)    (ext_factor != 0)
 *
 * YaRN keeps the fast pairs (many rotations within the original context)
 * as trained and interpolates the slow ones, with a linear ramp between:
 *   dim(b)  = n_rot ln(n_ctx_orig / (2 pi b)) / (2 ln base)   pair doing b turns
 *   lo      = max(0, floor(dim(beta_fast))),  hi = min(n_rot - 1, ceil(dim(beta_slow)))
 *   r_i     = ext_factor * (1 - clamp((i - lo) / max(0.001, hi - lo), 0, 1))
 * (Peng et al. 2023, "YaRN"; ggml's rope_yarn; Llama 3.1's frequency
 * factors arrive precomputed in rope_freqs.weight.)
 *
 * Phi-3's LongRoPE brings two sets of ff_i (rope_factors_short/long.weight)
 * and so two tables, freq and freq_long; a context takes one for its life
 * by its size (rope_freq_for). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "model/model.h"
#include "attn/attn_far.h"
#include "kernels/kernels.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

/* f32 key {arch}.suffix, or def when absent; must be finite and in [lo, hi] */
static subq_status get_f32(const gguf_file *f, const char *arch, const char *suffix, float def, float lo, float hi,
                           float *out, subq_error *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    subq_status s = gguf_get_f32_or(f, key, def, out, err);
    if (s) return s;
    if (!(*out >= lo && *out <= hi))
        return subq_fail(err, SUBQ_ERR_FORMAT, "%s = %g is out of range [%g, %g]", key, (double)*out, (double)lo,
                         (double)hi);
    return SUBQ_OK;
}

static int has_key(const gguf_file *f, const char *arch, const char *suffix) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return gguf_find_kv(f, key) != NULL;
}

/* The scaling type and its parameters. llama.cpp's default type is "linear"
 * with factor 1, so a factor without a type scales linearly. */
static subq_status load_scaling(const gguf_file *f, const char *arch, model_hparams *hp, subq_error *err) {
    rope_hparams *r = &hp->rope;
    char key[128], type[32] = "linear";
    subq_status s;
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    if (gguf_find_kv(f, key) && (s = gguf_get_str(f, key, type, sizeof type, err))) return s;
    if (!strcmp(type, "none")) r->scaling = ROPE_SCALING_NONE;
    else if (!strcmp(type, "linear")) r->scaling = ROPE_SCALING_LINEAR;
    else if (!strcmp(type, "yarn")) r->scaling = ROPE_SCALING_YARN;
    else
        return subq_fail(err, SUBQ_ERR_UNSUPPORTED,
                         "%s = '%s' is not supported (supported: none, linear, yarn); refusing to run with "
                         "positions the model was not trained on",
                         key, type);
    /* factor 0 means unset, as in llama.cpp; the old key name is rope.scale_linear */
    const char *fkey = has_key(f, arch, "rope.scaling.factor") ? "rope.scaling.factor" : "rope.scale_linear";
    if ((s = get_f32(f, arch, fkey, 0.0f, 0.0f, 1024.0f, &r->factor, err))) return s;
    if (r->factor == 0.0f) r->factor = 1.0f;
    if (r->factor < 1.0f)
        return subq_fail(err, SUBQ_ERR_FORMAT, "%s.%s = %g is out of range [1, 1024]", arch, fkey, (double)r->factor);
    if (r->scaling == ROPE_SCALING_NONE) r->factor = 1.0f;
    if (r->scaling == ROPE_SCALING_LINEAR && r->factor == 1.0f) r->scaling = ROPE_SCALING_NONE;
    if ((s = get_f32(f, arch, "rope.scaling.attn_factor", 1.0f, 1e-3f, 1e3f, &r->attn_factor, err))) return s;

    uint32_t orig;
    snprintf(key, sizeof key, "%s.rope.scaling.original_context_length", arch);
    if ((s = gguf_get_u32_or(f, key, (uint32_t)hp->n_ctx_train, &orig, err))) return s;
    if (orig < 1 || orig > (1u << 24))
        return subq_fail(err, SUBQ_ERR_FORMAT, "%s = %u is out of range [1, %u]", key, orig, 1u << 24);
    r->n_ctx_orig = (int)orig;
    r->ext_factor = 0.0f;
    r->beta_fast = 32.0f;
    r->beta_slow = 1.0f;
    if (r->scaling != ROPE_SCALING_YARN) return SUBQ_OK;
    /* YaRN knobs: llama.cpp's defaults (ext_factor 1, beta 32 / 1) unless the
     * file gives them (convert_hf_to_gguf.py writes them from the HF config;
     * a negative ext_factor means unset). llama.cpp reads these keys only for
     * some architectures and keeps the defaults for llama, qwen2 and qwen3;
     * here they apply wherever given, as in transformers (the model's own). */
    if ((s = get_f32(f, arch, "rope.scaling.yarn_ext_factor", -1.0f, -INFINITY, 1.0f, &r->ext_factor, err))) return s;
    if (r->ext_factor < 0.0f) r->ext_factor = 1.0f;
    if ((s = get_f32(f, arch, "rope.scaling.yarn_beta_fast", 32.0f, 1e-3f, 1e6f, &r->beta_fast, err)) ||
        (s = get_f32(f, arch, "rope.scaling.yarn_beta_slow", 1.0f, 1e-3f, 1e6f, &r->beta_slow, err)))
        return s;
    if (!(r->beta_fast > r->beta_slow))
        return subq_fail(err, SUBQ_ERR_FORMAT, "%s.rope.scaling.yarn_beta_fast %g must exceed yarn_beta_slow %g", arch,
                         (double)r->beta_fast, (double)r->beta_slow);
    /* keys whose meaning differs between HF and llama.cpp: refuse rather than guess */
    static const char *const unsupported[] = {"rope.scaling.yarn_attn_factor", "rope.scaling.yarn_log_multiplier"};
    for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++)
        if (has_key(f, arch, unsupported[i]))
            return subq_fail(err, SUBQ_ERR_UNSUPPORTED, "%s.%s is not supported (YaRN attention scaling is "
                             "1 + 0.1 ln(factor) here, times rope.scaling.attn_factor)", arch, unsupported[i]);
    return SUBQ_OK;
}

/* Tensor `name` (present): [half] positive finite divisors of each pair's
 * frequency, in f32, f16 or bf16, as a new array *ff; their range in
 * *lo, *hi. */
static subq_status load_factors(const gguf_tensor *t, const char *name, int half, float **ff, float *lo, float *hi,
                                subq_error *err) {
    *ff = NULL;
    if (t->n_dims != 1 || (int64_t)t->ne[0] != half)
        return subq_fail(err, SUBQ_ERR_SHAPE, "tensor '%s' has %llu elements in %u dims, expected [%d] "
                         "(rope.dimension_count / 2)", name, (unsigned long long)t->n_elements, t->n_dims, half);
    const ggml_type_traits *tr = ggml_type_get(t->type);
    if (!tr || !tr->can_dequant || tr->block_size != 1)
        return subq_fail(err, SUBQ_ERR_UNSUPPORTED, "tensor '%s' has type %s; expected f32, f16 or bf16", name,
                         tr ? tr->name : "unknown");
    *ff = malloc((size_t)(half > 0 ? half : 1) * sizeof(float));
    if (!*ff) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    dequant_row(t->type, t->data, *ff, half);
    *lo = INFINITY;
    *hi = 0.0f;
    for (int i = 0; i < half; i++) {
        float v = (*ff)[i];
        if (!(v > 0.0f) || !isfinite(v)) {
            free(*ff);
            *ff = NULL;
            return subq_fail(err, SUBQ_ERR_FORMAT, "%s[%d] = %g; frequency factors must be finite and positive", name,
                             i, (double)v);
        }
        if (v < *lo) *lo = v;
        if (v > *hi) *hi = v;
    }
    return SUBQ_OK;
}

/* rope_freqs.weight: [n_rot/2] positive finite divisors of each pair's
 * frequency (Llama 3.1+). Absent: all 1. *ff is NULL or a new array. */
static subq_status load_freq_factors(const gguf_file *f, model_hparams *hp, float **ff, subq_error *err) {
    rope_hparams *r = &hp->rope;
    *ff = NULL;
    const gguf_tensor *t = gguf_find_tensor(f, "rope_freqs.weight");
    if (!t) return SUBQ_OK;
    subq_status s = load_factors(t, "rope_freqs.weight", r->n_rot / 2, ff, &r->freq_factor_min, &r->freq_factor_max,
                                 err);
    if (s) return s;
    r->has_freq_factors = 1;
    return SUBQ_OK;
}

/* freq[i] (n_rot/2 of them) and r->mscale from the formulas at the top of
 * this file, with divisors ff (NULL: none) */
static void compute_freqs(rope_hparams *r, const float *ff, double *freq) {
    int half = r->n_rot / 2;
    double s = 1.0 / r->factor, lo = 0.0, hi = 0.0;
    int yarn = r->scaling == ROPE_SCALING_YARN && r->ext_factor != 0.0f;
    if (yarn) {
        double den = 2.0 * log((double)r->base);
        double d_fast = r->n_rot * log(r->n_ctx_orig / (2.0 * M_PI * r->beta_fast)) / den;
        double d_slow = r->n_rot * log(r->n_ctx_orig / (2.0 * M_PI * r->beta_slow)) / den;
        lo = fmax(0.0, floor(d_fast));
        hi = fmin((double)(r->n_rot - 1), ceil(d_slow));
    }
    for (int i = 0; i < half; i++) {
        double theta = pow((double)r->base, -2.0 * i / r->n_rot);
        if (ff) theta /= ff[i];
        double keep = 0.0; /* share of the trained (extrapolated) frequency */
        if (yarn) {
            double y = (i - lo) / fmax(0.001, hi - lo);
            keep = r->ext_factor * (1.0 - fmin(1.0, fmax(0.0, y)));
        }
        freq[i] = r->scaling == ROPE_SCALING_NONE ? theta : theta * (s * (1.0 - keep) + keep);
    }
    r->mscale = r->attn_factor * (yarn ? (float)(1.0 + 0.1 * log((double)r->factor)) : 1.0f);
}

/* *turns: freq's turn tables (attn_rope_turns_fill), a new array */
static subq_status make_turns(const rope_hparams *r, const double *freq, double **turns, subq_error *err) {
    const int half = r->n_rot / 2;
    if (!(*turns = malloc(attn_rope_turns_size(half > 0 ? half : 1) * sizeof(double))))
        return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    attn_rope_turns_fill(freq, half, *turns);
    return SUBQ_OK;
}

const double *rope_turns_of(const rope_hparams *r, const double *freq) {
    return freq && freq == r->freq_long ? r->turns_long : freq == r->freq ? r->turns : NULL;
}

subq_status rope_load(const gguf_file *f, const char *arch, model_hparams *hp, subq_error *err) {
    rope_hparams *r = &hp->rope;
    memset(r, 0, sizeof *r);
    char key[128];
    uint32_t n_rot;
    snprintf(key, sizeof key, "%s.rope.dimension_count", arch);
    subq_status s = gguf_get_u32_or(f, key, (uint32_t)hp->head_dim, &n_rot, err);
    if (s) return s;
    /* 0 would leave attention without positions: no model of these
     * architectures is made so (llama.cpp, for llama, wants the whole head) */
    if (n_rot == 0 || n_rot > (uint32_t)hp->head_dim || n_rot % 2)
        return subq_fail(err, SUBQ_ERR_FORMAT, "%s = %u must be even, positive and at most the head size %d", key,
                         n_rot, hp->head_dim);
    r->n_rot = (int)n_rot;
    r->neox = hp->desc->rope_neox;
    if ((s = get_f32(f, arch, "rope.freq_base", 10000.0f, 1e-3f, 1e12f, &r->base, err))) return s;
    if (!(r->base > 1.0f))
        return subq_fail(err, SUBQ_ERR_FORMAT, "%s.rope.freq_base = %g must exceed 1", arch, (double)r->base);
    if ((s = load_scaling(f, arch, hp, err))) return s;
    float *ff;
    if ((s = load_freq_factors(f, hp, &ff, err))) return s;
    r->freq = malloc((size_t)(r->n_rot / 2 > 0 ? r->n_rot / 2 : 1) * sizeof(double));
    if (!r->freq) {
        free(ff);
        return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    }
    compute_freqs(r, ff, r->freq);
    free(ff);
    return make_turns(r, r->freq, &r->turns, err);
}

subq_status rope_load_local(model_hparams *hp, float base, subq_error *err) {
    rope_hparams *r = &hp->rope_local;
    *r = (rope_hparams){.n_rot = hp->rope.n_rot, .neox = hp->rope.neox, .base = base, .factor = 1.0f,
                        .n_ctx_orig = hp->n_ctx_train, .attn_factor = 1.0f};
    r->freq = malloc((size_t)(r->n_rot / 2 > 0 ? r->n_rot / 2 : 1) * sizeof(double));
    if (!r->freq) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    compute_freqs(r, NULL, r->freq);
    return make_turns(r, r->freq, &r->turns, err);
}

/* Phi-3's LongRoPE, as convert_hf_to_gguf.py writes it (Phi3MiniModel) and
 * llama.cpp runs it: the HF config's short_factor and long_factor lists as
 * rope_factors_short/long.weight, divisors of each pair's frequency (ggml
 * rope's freq_factors) exactly like rope_freqs.weight; which set applies
 * depends on the context's size, not on positions (get_rope_factors), and
 * rope.scaling.attn_factor (sqrt(1 + ln(ctx / orig) / ln(orig)) from the
 * converter) scales cos and sin under both, already in mscale. */
subq_status rope_load_longrope(const gguf_file *f, model_hparams *hp, subq_error *err) {
    rope_hparams *r = &hp->rope;
    const gguf_tensor *ts = gguf_find_tensor(f, "rope_factors_short.weight");
    const gguf_tensor *tl = gguf_find_tensor(f, "rope_factors_long.weight");
    if (!ts && !tl) return SUBQ_OK;
    if (!ts || !tl)
        return subq_fail(err, SUBQ_ERR_FORMAT, "tensor '%s' without '%s': LongRoPE needs both sets of factors",
                         ts ? "rope_factors_short.weight" : "rope_factors_long.weight",
                         ts ? "rope_factors_long.weight" : "rope_factors_short.weight");
    /* llama.cpp's phi3 loads no rope_freqs and refuses a file holding it */
    if (r->has_freq_factors)
        return subq_fail(err, SUBQ_ERR_FORMAT, "rope_freqs.weight beside rope_factors_short/long.weight: two sets of "
                         "frequency factors for one RoPE");
    const int half = r->n_rot / 2;
    float *fs = NULL, *fl = NULL;
    subq_status s = load_factors(ts, "rope_factors_short.weight", half, &fs, &r->short_factor_min,
                                 &r->short_factor_max, err);
    if (!s) s = load_factors(tl, "rope_factors_long.weight", half, &fl, &r->long_factor_min, &r->long_factor_max, err);
    if (!s && !(r->freq_long = malloc((size_t)(half > 0 ? half : 1) * sizeof(double))))
        s = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    if (!s) {
        compute_freqs(r, fs, r->freq);
        compute_freqs(r, fl, r->freq_long);
        attn_rope_turns_fill(r->freq, half, r->turns); /* the short factors' now */
        s = make_turns(r, r->freq_long, &r->turns_long, err);
    }
    free(fs);
    free(fl);
    return s;
}

const double *rope_freq_for(const rope_hparams *r, int n_ctx) {
    /* llama.cpp compares its context per sequence, rounded up to a multiple
     * of 256, with the original context: the same choice for the released
     * models, whose original contexts (4096) are multiples of 256 */
    return r->freq_long && n_ctx > r->n_ctx_orig ? r->freq_long : r->freq;
}

void rope_describe(const rope_hparams *r, char *buf, size_t cap) {
    int o = snprintf(buf, cap, "base %.10g, %d dims rotated (%s pairs)", (double)r->base, r->n_rot,
                     r->neox ? "split-half" : "adjacent");
    if (o < 0 || (size_t)o >= cap) return;
    if (r->scaling == ROPE_SCALING_LINEAR)
        o += snprintf(buf + o, cap - (size_t)o, ", linear scaling x%g", (double)r->factor);
    else if (r->scaling == ROPE_SCALING_YARN)
        o += snprintf(buf + o, cap - (size_t)o,
                      ", yarn scaling x%g (original context %d, beta_fast %g, beta_slow %g, ext_factor %g)",
                      (double)r->factor, r->n_ctx_orig, (double)r->beta_fast, (double)r->beta_slow,
                      (double)r->ext_factor);
    else if (!r->freq_long)
        o += snprintf(buf + o, cap - (size_t)o, ", no scaling");
    if (o < 0 || (size_t)o >= cap) return;
    if (r->has_freq_factors)
        o += snprintf(buf + o, cap - (size_t)o, ", frequency factors from rope_freqs.weight (%g .. %g)",
                      (double)r->freq_factor_min, (double)r->freq_factor_max);
    if (o < 0 || (size_t)o >= cap) return;
    if (r->freq_long)
        o += snprintf(buf + o, cap - (size_t)o, ", LongRoPE: short factors (%g .. %g) in contexts of up to %d tokens, "
                      "long factors (%g .. %g) in longer ones", (double)r->short_factor_min,
                      (double)r->short_factor_max, r->n_ctx_orig, (double)r->long_factor_min,
                      (double)r->long_factor_max);
    if (o < 0 || (size_t)o >= cap) return;
    if (r->mscale != 1.0f) snprintf(buf + o, cap - (size_t)o, ", cos/sin scaled by %.6g", (double)r->mscale);
}
