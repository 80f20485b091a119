/* The fuzz targets' stories260K: $SUBQ_SHARED (make fuzz sets it), else
 * ../shared when it holds models/, else /work/shared. */
#ifndef SUBQ_FUZZ_SHARED_H
#define SUBQ_FUZZ_SHARED_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "subq_lab.h"

static inline void fuzz_stories_path(char *path, size_t cap) {
    const char *dir = getenv("SUBQ_SHARED");
    if (!dir || !*dir) dir = access("../shared/models", R_OK) == 0 ? "../shared" : "/work/shared";
    snprintf(path, cap, "%s/models/stories260K.gguf", dir);
}

/* The model itself, loaded once by a target (`who` names it if that fails:
 * a fuzzer without its model cannot run). */
static inline subq_model *fuzz_stories_model(const char *who) {
    char path[1024];
    fuzz_stories_path(path, sizeof path);
    subq_model *m = NULL;
    subq_error err = {0};
    if (subq_model_load(path, &m, &err)) {
        fprintf(stderr, "%s: %s\n", who, err.msg);
        abort();
    }
    return m;
}

#endif
