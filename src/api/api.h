/* The public handles that wrap internal objects (include/subq.h), for the
 * library code that takes them from a caller: the api layer sits above every
 * other engine module and, with the lab above it, is the only one that
 * translates public types. */
#ifndef SUBQ_API_H
#define SUBQ_API_H

#include "sparse/attn_plan.h"
#include "complete/phi_maps.h"
#include "search/search_proj.h"
#include "subq.h"

struct subq_search {
    search_proj *proj;
};

struct subq_complete {
    phi_maps *maps;
};

/* The internal plan of a public one (the layer list and selector parameters;
 * completion maps and head flags are the caller's to add). SUBQ_ERR_ARG for
 * an unknown selector. */
subq_status api_plan_to_internal(const subq_attn_plan *p, attn_plan *out, subq_error *err);

/* Head flags [n_layer][n_head] of the heads whose stored mid-region entropy
 * is at least min_entropy (malloc'd into *out; NULL when min_entropy < 0). */
subq_status api_complete_head_flags(const phi_maps *maps, int n_layer, int n_head, float min_entropy,
                                    unsigned char **out, subq_error *err);

#endif
