/* Layer lists as given on the command line and in plans: "all", "none", or
 * comma-separated indices and ranges ("1,3,5-7"); negative indices count
 * from the end (-1 = last layer; "2--1" = 2 to the last). */
#ifndef SUBQ_BASE_LAYERS_H
#define SUBQ_BASE_LAYERS_H

#include "subq.h"

/* Sets mask[l] = 1 for each listed layer of a model of n_layer layers (mask
 * is cleared first); SUBQ_ERR_ARG naming the list when it is malformed. */
subq_status layers_parse(const char *s, int n_layer, unsigned char *mask, subq_error *err);

#endif
