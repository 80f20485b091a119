/* Every file a path names: the file itself, or each regular file under a
 * directory in name order (hidden names skipped, at most 16 levels deep). */
#ifndef SUBQ_DATA_WALK_FILES_H
#define SUBQ_DATA_WALK_FILES_H

#include "subq.h"

typedef subq_status (*walk_file_fn)(void *user, const char *path, subq_error *err);
/* Calls on_file for each file; stops at its first error. A path that is
 * neither a file nor a directory is SUBQ_ERR_IO. */
subq_status walk_files(const char *path, walk_file_fn on_file, void *user, subq_error *err);

#endif
