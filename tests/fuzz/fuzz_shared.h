/* The fuzz targets' path to stories260K: $SUBQ_SHARED (make fuzz sets it),
 * else ../shared when it holds models/, else /work/shared. */
#ifndef SUBQ_FUZZ_SHARED_H
#define SUBQ_FUZZ_SHARED_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void fuzz_stories_path(char *path, size_t cap) {
    const char *dir = getenv("SUBQ_SHARED");
    if (!dir || !*dir) dir = access("../shared/models", R_OK) == 0 ? "../shared" : "/work/shared";
    snprintf(path, cap, "%s/models/stories260K.gguf", dir);
}

#endif
