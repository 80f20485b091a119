#include "base/atomic_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"

#define TMP_TAG ".subq-tmp."
#define TMP_RAND "XXXXXX" /* the random part: 6 of [A-Za-z0-9] */

static int same_file(const struct stat *a, const struct stat *b) {
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

/* Directory part of path ("." when none), malloc'd; *base points at the name. */
static char *dir_of(const char *path, const char **base) {
    const char *slash = strrchr(path, '/');
    *base = slash ? slash + 1 : path;
    if (!slash) return strdup(".");
    if (slash == path) return strdup("/");
    return strndup(path, (size_t)(slash - path));
}

/* Remove BASE.subq-tmp.?????? files of dir that no live writer holds: their
 * flock can be taken. Best effort: any doubt leaves the file. */
static void remove_stale(const char *dir, const char *base) {
    DIR *d = opendir(dir);
    if (!d) return;
    size_t nb = strlen(base), nt = strlen(TMP_TAG);
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        const char *nm = de->d_name;
        if (strlen(nm) != nb + nt + strlen(TMP_RAND) || strncmp(nm, base, nb) != 0 ||
            strncmp(nm + nb, TMP_TAG, nt) != 0)
            continue;
        int fd = openat(dirfd(d), nm, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0) continue;
        struct stat held, named;
        /* Locked: a writer is alive. Lockable: its writer is gone. The name
         * must still be the file we locked before it goes. */
        if (fstat(fd, &held) == 0 && S_ISREG(held.st_mode) && flock(fd, LOCK_EX | LOCK_NB) == 0 &&
            fstatat(dirfd(d), nm, &named, AT_SYMLINK_NOFOLLOW) == 0 && same_file(&held, &named))
            unlinkat(dirfd(d), nm, 0);
        close(fd); /* releases the lock */
    }
    closedir(d);
}

/* Whether `path` may be replaced: a regular file, a symbolic link (the
 * rename replaces the link itself, never the file it leads to: nothing is
 * written through it) or nothing at all. Anything else (a device, a FIFO, a
 * directory), which a rename would destroy or which a writer would block
 * on, is refused. */
static subq_status check_replaceable(const char *path, subq_error *err) {
    struct stat ls;
    if (lstat(path, &ls) != 0) {
        if (errno == ENOENT) return SUBQ_OK;
        return subq_fail(err, SUBQ_ERR_IO, "%s: %s", path, strerror(errno));
    }
    if (S_ISREG(ls.st_mode) || S_ISLNK(ls.st_mode)) return SUBQ_OK;
    return subq_fail(err, SUBQ_ERR_ARG, "%s is not a regular file (%s): outputs replace regular files only", path,
                     S_ISDIR(ls.st_mode) ? "a directory" : S_ISFIFO(ls.st_mode) ? "a FIFO" :
                     S_ISCHR(ls.st_mode) || S_ISBLK(ls.st_mode) ? "a device" : "a socket or other special file");
}

subq_status atomic_file_open(atomic_file *af, const char *path, subq_error *err) {
    memset(af, 0, sizeof *af);
    if (!path || !path[0]) return subq_fail(err, SUBQ_ERR_ARG, "atomic write: no path");
    subq_status s = check_replaceable(path, err);
    if (s) return s;
    const char *base;
    char *dir = dir_of(path, &base);
    size_t n = strlen(path) + strlen(TMP_TAG) + strlen(TMP_RAND) + 1;
    af->tmp = malloc(n);
    af->path = strdup(path);
    if (!dir || !af->tmp || !af->path) {
        free(dir);
        atomic_file_abort(af);
        return subq_fail(err, SUBQ_ERR_NOMEM, "%s: out of memory", path);
    }
    remove_stale(dir, base);
    free(dir);
    int fd = -1;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    /* Seed the names from time, process and stack address (no global state);
     * O_EXCL settles any collision. Lock, then check the name is still ours:
     * a cleaner may have taken the unlocked new file for a stale one and
     * removed it in between. */
    uint64_t seed = (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec << 30 ^ (uint64_t)getpid() << 40 ^ (uintptr_t)&ts;
    for (int attempt = 0; attempt < 16 && fd < 0; attempt++) {
        static const char alnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
        char rnd[sizeof TMP_RAND];
        for (size_t i = 0; i + 1 < sizeof rnd; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull; /* LCG step */
            rnd[i] = alnum[(seed >> 33) % 62];
        }
        rnd[sizeof rnd - 1] = '\0';
        snprintf(af->tmp, n, "%s" TMP_TAG "%s", path, rnd);
        /* 0644 through the umask, as a plain create of the destination would be */
        fd = open(af->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0 && errno == EEXIST) continue;
        if (fd < 0) {
            int e = errno;
            atomic_file_abort(af);
            return subq_fail(err, SUBQ_ERR_IO, "%s: cannot create a temporary file: %s", path, strerror(e));
        }
        struct stat held, named;
        /* A file system without locks refuses flock: then nothing can lock
         * the file either, so no cleaner removes it. */
        flock(fd, LOCK_EX);
        if (fstat(fd, &held) != 0 || stat(af->tmp, &named) != 0 || !same_file(&held, &named)) {
            close(fd);
            fd = -1;
        }
    }
    if (fd < 0) {
        atomic_file_abort(af);
        return subq_fail(err, SUBQ_ERR_IO, "%s: cannot keep a temporary file beside it", path);
    }
    af->fp = fdopen(fd, "wb");
    if (!af->fp) {
        int e = errno;
        close(fd);
        unlink(af->tmp);
        atomic_file_abort(af);
        return subq_fail(err, SUBQ_ERR_IO, "%s: %s", path, strerror(e));
    }
    return SUBQ_OK;
}

/* Make the rename durable; failure here does not undo a complete file. */
static void fsync_dir_of(const char *path) {
    const char *base;
    char *dir = dir_of(path, &base);
    if (!dir) return;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(dir);
}

subq_status atomic_file_commit(atomic_file *af, int write_errno, subq_error *err) {
    int e = write_errno;
    errno = 0;
    if (!e && (fflush(af->fp) != 0 || ferror(af->fp))) e = errno ? errno : EIO;
    if (!e && fsync(fileno(af->fp)) != 0) e = errno;
    /* Rename while the lock is held, so no cleaner removes the file first. */
    if (!e && rename(af->tmp, af->path) != 0) e = errno;
    if (e) {
        subq_fail(err, SUBQ_ERR_IO, "%s: cannot write: %s", af->path, strerror(e));
        atomic_file_abort(af);
        return SUBQ_ERR_IO;
    }
    fclose(af->fp); /* the data is on disk already (fsync) */
    af->fp = NULL;
    fsync_dir_of(af->path);
    free(af->tmp);
    free(af->path);
    memset(af, 0, sizeof *af);
    return SUBQ_OK;
}

void atomic_file_abort(atomic_file *af) {
    if (af->fp) {
        unlink(af->tmp); /* before the close drops the lock */
        fclose(af->fp);
    }
    free(af->tmp);
    free(af->path);
    memset(af, 0, sizeof *af);
}
