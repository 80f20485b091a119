/* Whole files in and out (subq_read_file, subq_write_file in
 * include/subq.h). Reads have a bound: the text inputs of every command
 * and of training corpora. A regular file is
 * checked against its size before anything is allocated; a stream is read
 * in growing pieces up to its cap, with poll() between pieces so that an
 * idle writer (or none at all) ends in an error instead of a hang. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "subq.h"
#include "base/atomic_file.h"
#include "base/bigmem.h"
#include "base/error.h"

subq_status subq_read_file(const char *path, size_t limit, char **out, size_t *len, subq_error *err) {
    *out = NULL;
    *len = 0;
    /* O_NONBLOCK: opening a FIFO does not wait for its writer (poll does, bounded) */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return subq_fail(err, SUBQ_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return subq_fail(err, SUBQ_ERR_IO, "cannot read %s: %s", path, strerror(e));
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return subq_fail(err, SUBQ_ERR_ARG, "%s is a directory, not a file", path);
    }
    if (limit == 0) {
        const char *source;
        uint64_t avail = bigmem_available(&source);
        limit = avail == UINT64_MAX || avail / 2 > SIZE_MAX / 2 ? SIZE_MAX / 2 : (size_t)(avail / 2);
    }
    const int regular = S_ISREG(st.st_mode);
    if (regular && (uint64_t)st.st_size > limit) {
        close(fd);
        return subq_fail(err, SUBQ_ERR_RANGE, "%s holds %lld bytes, more than the %zu this reader takes (half the "
                         "memory available)", path, (long long)st.st_size, limit);
    }
    if (!regular && limit > SUBQ_READ_STREAM_MAX) limit = SUBQ_READ_STREAM_MAX;
    const char *idle_env = getenv("SUBQ_READ_IDLE_S"); /* tests wait less */
    const int idle_s = idle_env && atoi(idle_env) > 0 ? atoi(idle_env) : SUBQ_READ_IDLE_S;
    size_t cap = regular ? (size_t)st.st_size + 1 : (size_t)1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    subq_status s = buf ? SUBQ_OK : subq_fail(err, SUBQ_ERR_NOMEM, "out of memory reading %s", path);
    while (!s) {
        if (n == cap) { /* a stream (or a file that grew): double, up to the limit */
            if (cap >= limit) {
                s = subq_fail(err, SUBQ_ERR_RANGE, "%s: more than %zu bytes, the most this reader takes from %s", path,
                              limit, regular ? "a file (half the memory available)" : "a stream");
                break;
            }
            size_t grown = cap > limit / 2 ? limit : cap * 2;
            char *nb = realloc(buf, grown + 1);
            if (!nb) {
                s = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory reading %s (%zu bytes)", path, grown);
                break;
            }
            buf = nb, cap = grown;
        }
        if (!regular) { /* a FIFO without a writer reads as end of file: wait for data or a hang-up first */
            struct pollfd pfd = {.fd = fd, .events = POLLIN};
            int r = poll(&pfd, 1, idle_s * 1000);
            if (r == 0)
                s = subq_fail(err, SUBQ_ERR_IO, "%s: no data for %d s (a pipe or FIFO nobody writes to?)", path,
                              idle_s);
            else if (r < 0 && errno != EINTR)
                s = subq_fail(err, SUBQ_ERR_IO, "error reading %s: %s", path, strerror(errno));
            if (r <= 0) continue;
        }
        ssize_t got = read(fd, buf + n, cap - n);
        if (got > 0) n += (size_t)got;
        else if (got == 0) break;
        else if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)
            s = subq_fail(err, SUBQ_ERR_IO, "error reading %s: %s", path, strerror(errno));
    }
    close(fd);
    if (s) {
        free(buf);
        return s;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return SUBQ_OK;
}

/* Written whole through a temporary file and a rename (atomic_file). */
subq_status subq_write_file(const char *path, const void *data, size_t len, subq_error *err) {
    atomic_file af;
    subq_status s = atomic_file_open(&af, path, err);
    if (s) return s;
    errno = 0;
    int e = len && fwrite(data, 1, len, af.fp) != len ? (errno ? errno : EIO) : 0;
    return atomic_file_commit(&af, e, err);
}
