/* Atomic file replacement: write a temporary file beside the destination,
 * fsync it, rename it over the destination, fsync the directory. Readers see
 * the old file or the whole new one, never a part.
 *
 * Temporary files are named DEST.subq-tmp.XXXXXX and their writer holds an
 * exclusive flock on them until the rename. A writer that dies (kill -9, power
 * loss of the process) leaves its file unlocked; the next write to the same
 * destination removes such stale files, so they cannot accumulate. Files that
 * are still locked belong to a live writer and are left alone. */
#ifndef SUBQ_BASE_ATOMIC_FILE_H
#define SUBQ_BASE_ATOMIC_FILE_H

#include <stdio.h>

#include "subq.h"

typedef struct atomic_file {
    FILE *fp;  /* write the contents here ("wb") */
    char *tmp; /* temporary path */
    char *path; /* destination */
} atomic_file;

/* Remove the stale temporaries of `path`, then create and lock a new one.
 * Only a regular file, a symbolic link or a path that names nothing is
 * replaced: the rename replaces a link itself and nothing is ever written
 * through one (the file it leads to stays as it was). A device, FIFO or
 * directory is refused (SUBQ_ERR_ARG), never renamed over. Whether an
 * existing output may be replaced at all is the caller's decision (the CLI
 * refuses one without --force). */
subq_status atomic_file_open(atomic_file *af, const char *path, subq_error *err);
/* Flush, fsync and rename over the destination; `write_errno` is the first
 * errno of the caller's own writes (0: none), which makes it fail instead.
 * On any failure the temporary file is removed and the destination is
 * unchanged. af is closed either way. */
subq_status atomic_file_commit(atomic_file *af, int write_errno, subq_error *err);
/* Give up: close and remove the temporary file. */
void atomic_file_abort(atomic_file *af);

#endif
