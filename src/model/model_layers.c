/* Layer lists that know the model: sliding-window layers (Gemma's local
 * ones) read a bounded window already, so sparse attention and its
 * projections apply to the global layers, and a list keeps those of its
 * layers. */
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "base/layers.h"
#include "model/model.h"

subq_status model_layers_parse(const model_hparams *hp, const char *list, unsigned char *mask, subq_error *err) {
    const int all = !list || !strcmp(list, "all"), global = list && !strcmp(list, "global");
    if (all || global) {
        for (int l = 0; l < hp->n_layer; l++) mask[l] = hp->layer[l].window == 0;
        return SUBQ_OK;
    }
    subq_status s = layers_parse(list, hp->n_layer, mask, err);
    int listed = 0, kept = 0, slide = 0;
    for (int l = 0; !s && l < hp->n_layer; l++) {
        listed += mask[l];
        if (mask[l] && hp->layer[l].window) slide = hp->layer[l].window, mask[l] = 0;
        kept += mask[l];
    }
    if (!s && listed && !kept)
        return subq_fail(err, SUBQ_ERR_ARG, "layers '%s' all attend to a sliding window of %d keys; sparse attention "
                         "applies to the global layers (\"global\" lists them)", list, slide);
    return s;
}

subq_status subq_model_parse_layers(const subq_model *m, const char *list, unsigned char *mask, subq_error *err) {
    return model_layers_parse(&m->hp, list, mask, err);
}

/* appends " (3, 7, 11)" to buf at *o: the layers that slide (want_window 1),
 * or do not (0), or either (-1), and with want_rope, only those without RoPE */
static void append_layers(const model_hparams *hp, int want_window, int want_rope, char *buf, size_t cap, size_t *o) {
    const char *sep = " (";
    for (int l = 0; l < hp->n_layer && *o < cap; l++) {
        const layer_attn *a = &hp->layer[l];
        if (want_window >= 0 && (a->window > 0) != want_window) continue;
        if (want_rope && a->rope != LAYER_ROPE_NONE) continue;
        *o += (size_t)snprintf(buf + *o, cap - *o, "%s%d", sep, l);
        sep = ", ";
    }
    if (*o < cap) *o += (size_t)snprintf(buf + *o, cap - *o, ")");
}

void model_describe_layers(const model_hparams *hp, char *buf, size_t cap) {
    int sliding = 0, no_rope = 0, window = 0;
    for (int l = 0; l < hp->n_layer; l++) {
        sliding += hp->layer[l].window > 0;
        no_rope += hp->layer[l].rope == LAYER_ROPE_NONE;
        if (hp->layer[l].window > window) window = hp->layer[l].window;
    }
    size_t o = (size_t)snprintf(buf, cap, "%d layers at scale %.6g", hp->n_layer, (double)hp->layer[0].scale);
    if (sliding == hp->n_layer && o < cap)
        o += (size_t)snprintf(buf + o, cap - o, ", all sliding over %d keys", window);
    else if (sliding && o < cap) {
        o += (size_t)snprintf(buf + o, cap - o, ", %d sliding over %d keys", sliding, window);
        if (hp->rope_local.n_rot && o < cap)
            o += (size_t)snprintf(buf + o, cap - o, " (RoPE base %.10g, no scaling)", (double)hp->rope_local.base);
        if (o < cap) o += (size_t)snprintf(buf + o, cap - o, ", %d global", hp->n_layer - sliding);
        append_layers(hp, 0, 0, buf, cap, &o);
    }
    if (no_rope && o < cap) {
        o += (size_t)snprintf(buf + o, cap - o, ", %d without RoPE", no_rope);
        append_layers(hp, -1, 1, buf, cap, &o);
    }
    if (hp->layer[0].softcap > 0.0f && o < cap)
        o += (size_t)snprintf(buf + o, cap - o, ", scores capped at %g", (double)hp->layer[0].softcap);
    if (hp->final_softcap > 0.0f && o < cap)
        snprintf(buf + o, cap - o, ", logits capped at %g", (double)hp->final_softcap);
}
