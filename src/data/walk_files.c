/* Walk a file or a directory tree in a fixed order, so that a corpus or a
 * haystack made of a directory reads the same on every machine. */
#define _POSIX_C_SOURCE 200809L
#include "subq_lab.h"
#include "data/walk_files.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/error.h"

#define MAX_DIR_DEPTH 16

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static subq_status walk(const char *path, walk_file_fn on_file, void *user, int depth, subq_error *err) {
    struct stat st;
    if (stat(path, &st) != 0) return subq_fail(err, SUBQ_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    if (!S_ISDIR(st.st_mode)) {
        if (!S_ISREG(st.st_mode) && depth > 0) return SUBQ_OK; /* a socket or FIFO inside a directory */
        return on_file(user, path, err);
    }
    if (depth >= MAX_DIR_DEPTH)
        return subq_fail(err, SUBQ_ERR_IO, "%s: directories nested deeper than %d", path, MAX_DIR_DEPTH);
    DIR *d = opendir(path);
    if (!d) return subq_fail(err, SUBQ_ERR_IO, "cannot open directory %s: %s", path, strerror(errno));
    char **names = NULL;
    size_t n = 0, cap = 0;
    subq_status s = SUBQ_OK;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            size_t nc = cap ? 2 * cap : 64;
            char **grown = realloc(names, nc * sizeof *names);
            if (!grown) {
                s = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory listing %s", path);
                break;
            }
            names = grown, cap = nc;
        }
        if (!(names[n] = strdup(e->d_name))) {
            s = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory listing %s", path);
            break;
        }
        n++;
    }
    closedir(d);
    if (!s) qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 0; i < n && !s; i++) {
        size_t len = strlen(path) + strlen(names[i]) + 2;
        char *full = malloc(len);
        if (!full) {
            s = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
            break;
        }
        snprintf(full, len, "%s/%s", path, names[i]);
        s = walk(full, on_file, user, depth + 1, err);
        free(full);
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    return s;
}

subq_status walk_files(const char *path, walk_file_fn on_file, void *user, subq_error *err) {
    return walk(path, on_file, user, 0, err);
}

/* ---- subq_read_texts: the files of a path joined into one text ---------- */

typedef struct joined {
    char *buf;
    size_t len;
} joined;

static subq_status append_file(void *user, const char *path, subq_error *err) {
    joined *j = user;
    char *text;
    size_t n;
    subq_status s = subq_read_file(path, 0, &text, &n, err);
    if (s) return s;
    char *grown = realloc(j->buf, j->len + n + 3);
    if (!grown) {
        free(text);
        return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory reading %s", path);
    }
    j->buf = grown;
    if (j->len && n) { /* documents apart */
        memcpy(j->buf + j->len, "\n\n", 2);
        j->len += 2;
    }
    memcpy(j->buf + j->len, text, n);
    j->len += n;
    j->buf[j->len] = '\0';
    free(text);
    return SUBQ_OK;
}

subq_status subq_read_texts(const char *path, char **out, size_t *len, subq_error *err) {
    joined j = {NULL, 0};
    subq_status s = walk_files(path, append_file, &j, err);
    if (!s && !j.buf && !(j.buf = calloc(1, 1))) s = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    if (s) {
        free(j.buf);
        j.buf = NULL, j.len = 0;
    }
    *out = j.buf;
    *len = j.len;
    return s;
}
