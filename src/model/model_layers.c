/* Layer lists that know the model: sliding-window layers (Gemma's local
 * ones) read a bounded window already, so sparse attention and its
 * projections apply to the global layers, and a list keeps those of its
 * layers. */
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
