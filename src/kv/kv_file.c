/* The KV cache file (kv_file.h): layout, header slots, commit protocol. */
#include "kv/kv_file.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "base/error.h"
#include "base/fingerprint.h"

#define PAGE ((uint32_t)KV_FILE_HEADER_BYTES)
#define HEADER_SLOTS 2
#define DATA_START (HEADER_SLOTS * PAGE)
#define MAGIC "SUBQKVF"
/* 3: a slot's keys and values adjacent, [n_ctx][2][n_head_kv][row_bytes]
 * per layer (version 1 files, head-major, and 2, keys then values slot-major,
 * are refused: their rows would be read misplaced) */
#define VERSION 3
#define MAX_CTX (1u << 30)
#define KV_FILE_STREAM_BYTES (1u << 20) /* kv_file_write */

/* One header slot as it lies on disk. */
typedef struct disk_header {
    char magic[8];
    uint32_t version, n_search;
    uint64_t seq;               /* the valid slot with the higher seq is current */
    uint64_t model_fingerprint;
    uint32_t kv_type, n_layer, n_head_kv, head_dim, n_ctx, n_vocab;
    uint64_t row_bytes;
    uint64_t fixed_bytes, total_bytes;
    uint64_t n_committed, reserved0;
    uint32_t has_logits, reserved;
    kv_file_search search[KV_FILE_MAX_SEARCH];
    uint64_t checksum;          /* FNV-1a of every byte before it */
} disk_header;

_Static_assert(sizeof(disk_header) <= PAGE, "a header slot is one page");

struct kv_file {
    int fd;
    char *path;
    kv_file_geometry g;
    disk_header h;              /* the current header */
    unsigned char *map;         /* [0, fixed_bytes) */
    size_t map_bytes;
    unsigned char *smap;        /* [fixed_bytes, total_bytes): search keys */
    size_t smap_bytes;
    uint64_t per_layer, meta_stride;
};

static uint64_t round_page(uint64_t x) { return (x + PAGE - 1) / PAGE * PAGE; }

/* a * b, saturating at UINT64_MAX */
static uint64_t mul_sat(uint64_t a, uint64_t b) { return b && a > UINT64_MAX / b ? UINT64_MAX : a * b; }
static uint64_t add_sat(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

/* The fixed part's layout for a geometry: bytes per layer's keys and
 * values, per metadata array, and the end of the fixed part. */
static uint64_t layout(const kv_file_geometry *g, uint64_t *per_layer, uint64_t *meta_stride) {
    *per_layer = round_page(mul_sat(mul_sat(2 * (uint64_t)g->n_head_kv, g->n_ctx), g->row_bytes));
    *meta_stride = round_page((uint64_t)g->n_ctx * 4);
    uint64_t end = add_sat(DATA_START, mul_sat(g->n_layer, *per_layer));
    end = add_sat(end, 3 * *meta_stride);
    return add_sat(end, round_page((uint64_t)g->n_vocab * 4));
}

static uint64_t search_bytes(uint32_t n_ctx, uint32_t d) { return round_page(mul_sat(mul_sat(n_ctx, d), 4)); }

subq_status kv_file_check_header(const void *slot, size_t n, const kv_file_geometry *g, uint64_t file_bytes,
                                 subq_error *err) {
    disk_header h;
    if (n < sizeof h) return subq_fail(err, SUBQ_ERR_FORMAT, "KV file header is truncated");
    memcpy(&h, slot, sizeof h);
    if (memcmp(h.magic, MAGIC, sizeof MAGIC)) return subq_fail(err, SUBQ_ERR_FORMAT, "not a subq KV file");
    if (h.checksum != fnv1a(FNV_OFFSET, &h, offsetof(disk_header, checksum)))
        return subq_fail(err, SUBQ_ERR_FORMAT, "KV file header is damaged (checksum)");
    if (h.version != VERSION)
        return subq_fail(err, SUBQ_ERR_UNSUPPORTED, "KV file version %u; this build reads version %d (the rows' layout "
                         "changed: make the file again)", h.version,
                         VERSION);
    if (h.model_fingerprint != g->model_fingerprint)
        return subq_fail(err, SUBQ_ERR_MISMATCH, "KV file belongs to another model (fingerprint %016" PRIx64
                         ", this model %016" PRIx64 ")", h.model_fingerprint, g->model_fingerprint);
    if (h.kv_type != g->kv_type)
        return subq_fail(err, SUBQ_ERR_MISMATCH, "KV file holds a %s cache, this context %s",
                         subq_kv_type_name((subq_kv_type)h.kv_type), subq_kv_type_name((subq_kv_type)g->kv_type));
    if (h.n_layer != g->n_layer || h.n_head_kv != g->n_head_kv || h.head_dim != g->head_dim ||
        h.n_vocab != g->n_vocab || h.row_bytes != g->row_bytes)
        return subq_fail(err, SUBQ_ERR_MISMATCH, "KV file has another shape (%u layers x %u KV heads x %u)", h.n_layer,
                         h.n_head_kv, h.head_dim);
    if (h.n_ctx == 0 || h.n_ctx > MAX_CTX) return subq_fail(err, SUBQ_ERR_FORMAT, "KV file context %u", h.n_ctx);
    if (g->n_ctx && h.n_ctx != g->n_ctx)
        return subq_fail(err, SUBQ_ERR_MISMATCH, "KV file holds a context of %u tokens, this context %u (give -c %u)",
                         h.n_ctx, g->n_ctx, h.n_ctx);
    kv_file_geometry fg = *g;
    fg.n_ctx = h.n_ctx;
    uint64_t per_layer, stride;
    if (h.fixed_bytes != layout(&fg, &per_layer, &stride))
        return subq_fail(err, SUBQ_ERR_FORMAT, "KV file layout does not match its shape");
    if (h.n_committed > h.n_ctx)
        return subq_fail(err, SUBQ_ERR_FORMAT, "KV file counts %" PRIu64 " tokens in a context of %u", h.n_committed,
                         h.n_ctx);
    if (h.n_search > KV_FILE_MAX_SEARCH || h.n_search > h.n_layer)
        return subq_fail(err, SUBQ_ERR_FORMAT, "KV file lists %u layers with search keys", h.n_search);
    uint64_t end = h.fixed_bytes;
    for (uint32_t i = 0; i < h.n_search; i++) {
        const kv_file_search *s = &h.search[i];
        if (s->layer >= h.n_layer || s->d == 0 || s->d > 65536 || s->offset != end ||
            (i > 0 && s->layer <= h.search[i - 1].layer))
            return subq_fail(err, SUBQ_ERR_FORMAT, "KV file search region %u is malformed", i);
        end = add_sat(end, search_bytes(h.n_ctx, s->d));
    }
    if (h.total_bytes != end) return subq_fail(err, SUBQ_ERR_FORMAT, "KV file size field does not match its regions");
    if (h.total_bytes > file_bytes)
        return subq_fail(err, SUBQ_ERR_FORMAT, "KV file is truncated (%" PRIu64 " bytes, %" PRIu64 " expected)",
                         file_bytes, h.total_bytes);
    return SUBQ_OK;
}

void kv_file_seal_header(void *slot) {
    uint64_t sum = fnv1a(FNV_OFFSET, slot, offsetof(disk_header, checksum));
    memcpy((unsigned char *)slot + offsetof(disk_header, checksum), &sum, sizeof sum);
}

/* Write the header in the next slot (sequence number + 1) and flush. */
static subq_status write_header(kv_file *f, subq_error *err) {
    f->h.seq++;
    f->h.checksum = fnv1a(FNV_OFFSET, &f->h, offsetof(disk_header, checksum));
    unsigned char page[PAGE] = {0};
    memcpy(page, &f->h, sizeof f->h);
    off_t at = (off_t)(f->h.seq % HEADER_SLOTS) * PAGE;
    if (pwrite(f->fd, page, PAGE, at) != (ssize_t)PAGE || fdatasync(f->fd) != 0)
        return subq_fail(err, SUBQ_ERR_IO, "cannot write the header of %s: %s", f->path, strerror(errno));
    return SUBQ_OK;
}

/* Room on disk for the file's size, reserved so that a write through the
 * mapping never meets a full disk (which would end the process). */
static subq_status reserve(kv_file *f, uint64_t bytes, subq_error *err) {
    int e = posix_fallocate(f->fd, 0, (off_t)bytes);
    if (e == EOPNOTSUPP || e == EINVAL) e = ftruncate(f->fd, (off_t)bytes) ? errno : 0;
    if (!e) return SUBQ_OK;
    struct statvfs vs;
    double free_gb = fstatvfs(f->fd, &vs) == 0 ? (double)vs.f_bavail * vs.f_frsize / 1e9 : -1;
    return subq_fail(err, e == ENOSPC ? SUBQ_ERR_NOMEM : SUBQ_ERR_IO,
                     "cannot reserve %.2f GB for %s (%.2f GB free): %s", bytes / 1e9, f->path, free_gb, strerror(e));
}

static subq_status map_fixed(kv_file *f, subq_error *err) {
    f->map_bytes = f->h.fixed_bytes;
    void *p = mmap(NULL, f->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, f->fd, 0);
    if (p == MAP_FAILED)
        return subq_fail(err, SUBQ_ERR_NOMEM, "cannot map %s (%.2f GB): %s", f->path, f->map_bytes / 1e9,
                         strerror(errno));
    f->map = p;
    /* rows are read where retrieval points: no read-ahead around them */
    madvise(f->map + DATA_START, (size_t)(f->g.n_layer * f->per_layer), MADV_RANDOM);
    return SUBQ_OK;
}

static subq_status map_search(kv_file *f, subq_error *err) {
    if (f->smap) munmap(f->smap, f->smap_bytes);
    f->smap = NULL;
    f->smap_bytes = (size_t)(f->h.total_bytes - f->h.fixed_bytes);
    if (f->smap_bytes == 0) return SUBQ_OK;
    void *p = mmap(NULL, f->smap_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, f->fd, (off_t)f->h.fixed_bytes);
    if (p == MAP_FAILED) return subq_fail(err, SUBQ_ERR_NOMEM, "cannot map the search keys of %s", f->path);
    f->smap = p;
    return SUBQ_OK;
}

static subq_status create_file(kv_file *f, subq_error *err) {
    memset(&f->h, 0, sizeof f->h);
    memcpy(f->h.magic, MAGIC, sizeof MAGIC);
    f->h.version = VERSION;
    f->h.model_fingerprint = f->g.model_fingerprint;
    f->h.kv_type = f->g.kv_type, f->h.n_layer = f->g.n_layer, f->h.n_head_kv = f->g.n_head_kv;
    f->h.head_dim = f->g.head_dim, f->h.n_ctx = f->g.n_ctx, f->h.n_vocab = f->g.n_vocab;
    f->h.row_bytes = f->g.row_bytes;
    f->h.fixed_bytes = f->h.total_bytes = layout(&f->g, &f->per_layer, &f->meta_stride);
    subq_status s = reserve(f, f->h.fixed_bytes, err);
    if (!s) s = write_header(f, err);
    return s;
}

/* Read both header slots; the valid one with the higher sequence number. */
static subq_status read_header(kv_file *f, uint64_t file_bytes, subq_error *err) {
    unsigned char page[PAGE];
    int found = 0;
    subq_error first = {0};
    for (int i = 0; i < HEADER_SLOTS; i++) {
        subq_error e = {0};
        if (pread(f->fd, page, PAGE, (off_t)i * PAGE) != (ssize_t)PAGE) {
            snprintf(e.msg, sizeof e.msg, "KV file header is truncated");
            e.code = SUBQ_ERR_FORMAT;
        } else {
            kv_file_check_header(page, PAGE, &f->g, file_bytes, &e);
        }
        if (e.code) {
            /* a slot of another model or shape is an answer, not damage */
            if (!first.code || (e.code != SUBQ_ERR_FORMAT && first.code == SUBQ_ERR_FORMAT)) first = e;
            continue;
        }
        disk_header h;
        memcpy(&h, page, sizeof h);
        if (!found || h.seq > f->h.seq) f->h = h;
        found = 1;
    }
    if (!found) return subq_fail(err, first.code, "%s: %s", f->path, first.msg);
    f->g.n_ctx = f->h.n_ctx;
    layout(&f->g, &f->per_layer, &f->meta_stride);
    return SUBQ_OK;
}

subq_status kv_file_open(const char *path, const kv_file_geometry *g, kv_file **out, subq_error *err) {
    *out = NULL;
    kv_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        free(f);
        return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    }
    f->g = *g;
    f->fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    int created = f->fd >= 0;
    if (!created && errno == EEXIST) f->fd = open(path, O_RDWR | O_CLOEXEC);
    subq_status s = SUBQ_OK;
    struct stat st;
    if (f->fd < 0) s = subq_fail(err, SUBQ_ERR_IO, "cannot open KV file %s: %s", path, strerror(errno));
    else if (fstat(f->fd, &st) != 0 || !S_ISREG(st.st_mode))
        s = subq_fail(err, SUBQ_ERR_IO, "KV file %s is not a regular file", path);
    else if (created && g->n_ctx == 0)
        s = subq_fail(err, SUBQ_ERR_ARG, "a new KV file needs the context size");
    else if (created)
        s = create_file(f, err);
    else
        s = read_header(f, (uint64_t)st.st_size, err);
    if (!s) s = map_fixed(f, err);
    if (!s) s = map_search(f, err);
    if (s) {
        if (created) unlink(path); /* nothing of ours was in it */
        kv_file_close(f);
        return s;
    }
    *out = f;
    return SUBQ_OK;
}

void kv_file_close(kv_file *f) {
    if (!f) return;
    if (f->map) munmap(f->map, f->map_bytes);
    if (f->smap) munmap(f->smap, f->smap_bytes);
    if (f->fd >= 0) close(f->fd);
    free(f->path);
    free(f);
}

const kv_file_geometry *kv_file_geom(const kv_file *f) { return &f->g; }
int kv_file_committed(const kv_file *f) { return (int)f->h.n_committed; }
int kv_file_has_logits(const kv_file *f) { return f->h.has_logits != 0; }

void *kv_file_keys(kv_file *f, int layer) { return f->map + DATA_START + (uint64_t)layer * f->per_layer; }
void *kv_file_values(kv_file *f, int layer) {
    return (unsigned char *)kv_file_keys(f, layer) + (uint64_t)f->g.n_head_kv * f->g.row_bytes;
}
static unsigned char *meta(kv_file *f, int i) {
    return f->map + DATA_START + (uint64_t)f->g.n_layer * f->per_layer + (uint64_t)i * f->meta_stride;
}
int32_t *kv_file_pos(kv_file *f) { return (int32_t *)meta(f, 0); }
int32_t *kv_file_seg(kv_file *f) { return (int32_t *)meta(f, 1); }
int32_t *kv_file_tok(kv_file *f) { return (int32_t *)meta(f, 2); }
float *kv_file_logits(kv_file *f) { return (float *)meta(f, 3); }

float *kv_file_search_rows(kv_file *f, int layer, int *d) {
    for (uint32_t i = 0; i < f->h.n_search; i++)
        if (f->h.search[i].layer == (uint32_t)layer) {
            if (d) *d = (int)f->h.search[i].d;
            return (float *)(f->smap + (f->h.search[i].offset - f->h.fixed_bytes));
        }
    if (d) *d = 0;
    return NULL;
}

subq_status kv_file_set_search(kv_file *f, const int *d, const uint64_t *made_by, int *ok, subq_error *err) {
    disk_header want = f->h;
    want.n_search = 0;
    memset(want.search, 0, sizeof want.search);
    uint64_t end = f->h.fixed_bytes;
    *ok = 0;
    for (uint32_t l = 0; l < f->g.n_layer; l++) {
        if (d[l] <= 0) continue;
        if (want.n_search == KV_FILE_MAX_SEARCH || d[l] > 65536)
            return subq_fail(err, SUBQ_ERR_UNSUPPORTED, "a KV file keeps search keys of at most %d layers of width "
                             "65536", KV_FILE_MAX_SEARCH);
        want.search[want.n_search++] = (kv_file_search){l, (uint32_t)d[l], end, made_by[l]};
        end = add_sat(end, search_bytes(f->g.n_ctx, (uint32_t)d[l]));
    }
    want.total_bytes = end;
    if (want.n_search == f->h.n_search && !memcmp(want.search, f->h.search, sizeof want.search)) {
        *ok = 1;
        return SUBQ_OK;
    }
    if (f->h.n_committed > 0) return SUBQ_OK;
    subq_status s = reserve(f, want.total_bytes, err);
    if (s) return s;
    disk_header old = f->h;
    f->h = want;
    if ((s = write_header(f, err)) || (s = map_search(f, err))) f->h = old;
    else *ok = 1;
    return s;
}

subq_status kv_file_write(kv_file *f, const void *at, const void *src, size_t n, subq_error *err) {
    const unsigned char *p = at;
    if (p < f->map || (size_t)(p - f->map) > f->map_bytes || n > f->map_bytes - (size_t)(p - f->map))
        return subq_fail(err, SUBQ_ERR_RANGE, "a write outside the rows of %s", f->path);
    off_t off = (off_t)(p - f->map);
    for (size_t done = 0; done < n;) {
        ssize_t w = pwrite(f->fd, (const unsigned char *)src + done, n - done, off + (off_t)done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0)
            return subq_fail(err, SUBQ_ERR_IO, "cannot write %s: %s", f->path, w < 0 ? strerror(errno) : "no progress");
        done += (size_t)w;
    }
    /* A long run's pages are sent to the disk as they are written. Left to
     * the kernel's flusher, a fill stalls on the dirty-page limit at a
     * third of the disk's rate (16 GB here: 0.43 GB/s, against 1.5 with
     * direct I/O); started at once, buffered writes stream at the disk's
     * rate and stay in the page cache. They are also mapped now, while
     * resident: else a decode step's first read of each page takes a
     * fault. Short writes (a decode step's rows) wait for the commit, as
     * a page may be written again. */
    if (n >= KV_FILE_STREAM_BYTES) {
        const uint64_t lo = round_page((uint64_t)off), hi = ((uint64_t)off + n) / PAGE * PAGE;
        if (hi > lo) {
            sync_file_range(f->fd, (off_t)lo, (off_t)(hi - lo), SYNC_FILE_RANGE_WRITE);
            madvise(f->map + lo, (size_t)(hi - lo), MADV_POPULATE_READ); /* (a hint: Linux >= 5.14) */
        }
    }
    return SUBQ_OK;
}

subq_status kv_file_will_write(kv_file *f, int slot, subq_error *err) {
    if ((uint64_t)slot >= f->h.n_committed) return SUBQ_OK;
    f->h.n_committed = (uint64_t)slot;
    f->h.has_logits = 0;
    return write_header(f, err);
}

subq_status kv_file_commit(kv_file *f, int n, int has_logits, subq_error *err) {
    if (fdatasync(f->fd) != 0) return subq_fail(err, SUBQ_ERR_IO, "cannot flush %s: %s", f->path, strerror(errno));
    f->h.n_committed = (uint64_t)n;
    f->h.has_logits = has_logits != 0;
    return write_header(f, err);
}

subq_status kv_file_evict(kv_file *f, subq_error *err) {
    if (fdatasync(f->fd) != 0) return subq_fail(err, SUBQ_ERR_IO, "cannot flush %s: %s", f->path, strerror(errno));
    /* unmapped from this process first: the page cache drops only pages nobody maps */
    if (madvise(f->map, f->map_bytes, MADV_DONTNEED) != 0 ||
        (f->smap && madvise(f->smap, f->smap_bytes, MADV_DONTNEED) != 0))
        return subq_fail(err, SUBQ_ERR_IO, "cannot drop the mapping of %s: %s", f->path, strerror(errno));
    int e = posix_fadvise(f->fd, 0, 0, POSIX_FADV_DONTNEED);
    if (e) return subq_fail(err, SUBQ_ERR_IO, "cannot drop %s from the page cache: %s", f->path, strerror(e));
    madvise(f->map + DATA_START, (size_t)(f->g.n_layer * f->per_layer), MADV_RANDOM);
    return SUBQ_OK;
}
