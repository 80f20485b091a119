/* Files derived from a model (search projections, completion maps): the
 * layers they cover and the fingerprint of their model, as the GGUF keys
 * PREFIX.layers and PREFIX.model_fingerprint, and the check that such a
 * file belongs to a model. */
#ifndef SUBQ_MODEL_DERIVED_H
#define SUBQ_MODEL_DERIVED_H

#include <stdint.h>

#include "gguf/gguf.h"
#include "model/model.h"

/* Copy n of layers into out sorted; SUBQ_ERR_ARG "<what> layer L is out of
 * range or repeated" unless each is in 0..n_layer-1 and none repeats. */
subq_status derived_sort_layers(const int *layers, int n, int n_layer, const char *what, int *out, subq_error *err);

/* PREFIX.layers (int32) and PREFIX.model_fingerprint (16 hex digits). */
subq_status derived_write_ident(gguf_writer *w, const char *prefix, const int *layers, int n, uint64_t fp);
/* The same read back: *layers points at the array (checked by the two
 * functions below), *fp gets the fingerprint; SUBQ_ERR_FORMAT naming path. */
subq_status derived_read_ident(const gguf_file *f, const char *path, const char *prefix, const gguf_value **layers,
                               uint64_t *fp, subq_error *err);
/* The array holds 1 to n_layer entries, for a model of 1 to 4096 layers. */
subq_status derived_check_count(const gguf_value *layers, uint32_t n_layer, const char *path, const char *prefix,
                                subq_error *err);
/* Entry i of the array, a layer of 0..n_layer-1, into *layer. */
subq_status derived_layer(const gguf_value *layers, uint64_t i, uint32_t n_layer, const char *path, const char *prefix,
                          int *layer, subq_error *err);

/* SUBQ_ERR_MISMATCH (naming both fingerprints) unless the file at path,
 * made for the model of fingerprint fp, belongs to m; the message ends
 * "train <them> again for this model" ("them": the maps or projections of
 * a file, "it": a training run's output). */
subq_status derived_check_model(const char *path, uint64_t fp, const subq_model *m, const char *them,
                                subq_error *err);

#endif
