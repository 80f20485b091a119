/* The KV cache file (kv_file.h): layout, header slots, commit protocol. */
#include "kv/kv_file.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "base/bigmem.h"
#include "base/crc32c.h"
#include "base/error.h"
#include "base/fingerprint.h"
#include "kernels/kernels.h"

#define PAGE ((uint32_t)KV_FILE_HEADER_BYTES)
#define HEADER_SLOTS 2
#define DATA_START (HEADER_SLOTS * PAGE)
#define MAGIC "SUBQKVF"
/* 5: a layer's rows slot-major or head-major (head_major); 4: every layer
 * slot-major, read as such. Version 3 files have no checksums, 1 and 2 laid
 * rows out otherwise: they are refused, to be made again. */
#define VERSION 5
#define VERSION_SLOT_MAJOR 4
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
    uint64_t n_committed;
    uint64_t logits_slot;       /* which of the two logits regions holds the committed ones */
    uint32_t has_logits, logits_sum; /* logits_sum: CRC-32C of the logits */
    kv_file_search search[KV_FILE_MAX_SEARCH];
    uint64_t head_major[KV_FILE_MAX_LAYOUT / 64]; /* bit l: layer l's rows head-major (version 5) */
    uint64_t checksum;          /* FNV-1a of every byte before it */
} disk_header;

/* A version 4 slot ends where head_major starts: its checksum lies there. */
#define V4_CHECKSUM_AT offsetof(disk_header, head_major)

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
    int writable;               /* opened for writing (an exclusive lock) */
    long writer;                /* a reader: the pid of the writer that held the file as it was opened
                                   (-1: one did, its pid unknown; 0: none) */
    int small_lo, small_hi;     /* the slots whose pages were made small last (kv_file_will_write) */
    int newest_damaged;         /* the newest header slot is damaged: h is the older one */
    int64_t newest_committed;   /* the tokens the damaged slot counts as it reads (-1: not a count) */
    /* a commit's flushes on a thread of their own (kv_file_commit, durable 0) */
    pthread_t syncer;
    int syncing;                /* the syncer runs: joined before the header is written again */
    disk_header sync_header;    /* the header it writes once the data is on disk */
    subq_error sync_err;        /* what it met */
};

static uint64_t round_page(uint64_t x) { return (x + PAGE - 1) / PAGE * PAGE; }

/* a * b, saturating at UINT64_MAX */
static uint64_t mul_sat(uint64_t a, uint64_t b) { return b && a > UINT64_MAX / b ? UINT64_MAX : a * b; }
static uint64_t add_sat(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

/* The fixed part's layout for a geometry: bytes per layer's keys and
 * values, per metadata array (pos, seg, tok, sum), and the end of the
 * fixed part. */
static uint64_t layout(const kv_file_geometry *g, uint64_t *per_layer, uint64_t *meta_stride) {
    *per_layer = round_page(mul_sat(mul_sat(2 * (uint64_t)g->n_head_kv, g->n_ctx), g->row_bytes));
    *meta_stride = round_page((uint64_t)g->n_ctx * 4);
    uint64_t end = add_sat(DATA_START, mul_sat(g->n_layer, *per_layer));
    end = add_sat(end, 4 * *meta_stride);
    return add_sat(end, 2 * round_page((uint64_t)g->n_vocab * 4));
}

static uint64_t search_bytes(uint32_t n_ctx, uint32_t d) { return round_page(mul_sat(mul_sat(n_ctx, d), 4)); }

/* Where a slot of this version keeps its checksum (a version 4 slot's ends
 * before head_major). */
static size_t checksum_at(const void *slot) {
    uint32_t version;
    memcpy(&version, (const unsigned char *)slot + offsetof(disk_header, version), sizeof version);
    return version == VERSION_SLOT_MAJOR ? V4_CHECKSUM_AT : offsetof(disk_header, checksum);
}

/* A header slot as this version's struct: a version 4 slot's fields, every
 * layer slot-major. 1 when its checksum holds. */
static int header_of(const void *slot, disk_header *h) {
    const size_t at = checksum_at(slot);
    memset(h, 0, sizeof *h);
    memcpy(h, slot, at);
    memcpy(&h->checksum, (const unsigned char *)slot + at, sizeof h->checksum);
    return h->checksum == fnv1a(FNV_OFFSET, slot, at);
}

subq_status kv_file_check_header(const void *slot, size_t n, const kv_file_geometry *g, uint64_t file_bytes,
                                 subq_error *err) {
    disk_header h;
    if (n < sizeof h) return subq_fail(err, SUBQ_ERR_FORMAT, "KV file header is truncated");
    if (memcmp(slot, MAGIC, sizeof MAGIC)) return subq_fail(err, SUBQ_ERR_FORMAT, "not a subq KV file");
    if (!header_of(slot, &h)) return subq_fail(err, SUBQ_ERR_FORMAT, "KV file header is damaged (checksum)");
    if (h.version != VERSION && h.version != VERSION_SLOT_MAJOR)
        return subq_fail(err, SUBQ_ERR_UNSUPPORTED, "KV file version %u; this build reads versions %d and %d (the "
                         "rows' layout changed: make the file again)", h.version, VERSION_SLOT_MAJOR, VERSION);
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
    if (h.logits_slot > 1) return subq_fail(err, SUBQ_ERR_FORMAT, "KV file logits slot %" PRIu64, h.logits_slot);
    if (h.n_committed > h.n_ctx)
        return subq_fail(err, SUBQ_ERR_FORMAT, "KV file counts %" PRIu64 " tokens in a context of %u", h.n_committed,
                         h.n_ctx);
    for (uint32_t l = h.n_layer; l < KV_FILE_MAX_LAYOUT; l++)
        if (h.head_major[l / 64] >> (l % 64) & 1)
            return subq_fail(err, SUBQ_ERR_FORMAT, "KV file lays out layer %u of %u", l, h.n_layer);
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
    const size_t at = checksum_at(slot);
    uint64_t sum = fnv1a(FNV_OFFSET, slot, at);
    memcpy((unsigned char *)slot + at, &sum, sizeof sum);
}

/* The next header slot's contents: sequence number + 1, checksummed. */
static void seal_header(disk_header *h) {
    h->seq++;
    h->version = VERSION; /* a version 4 file's layout is version 5's with no layer head-major */
    h->checksum = fnv1a(FNV_OFFSET, h, offsetof(disk_header, checksum));
}

/* Write a sealed header into its slot and flush. */
static subq_status put_header(kv_file *f, const disk_header *h, subq_error *err) {
    unsigned char page[PAGE] = {0};
    memcpy(page, h, sizeof *h);
    off_t at = (off_t)(h->seq % HEADER_SLOTS) * PAGE;
    if (pwrite(f->fd, page, PAGE, at) != (ssize_t)PAGE || fdatasync(f->fd) != 0)
        return subq_fail(err, SUBQ_ERR_IO, "cannot write the header of %s: %s", f->path, strerror(errno));
    return SUBQ_OK;
}

/* A commit's flushes: the data written before it on disk, then the header
 * that counts it (f->sync_header), so the header never counts rows that
 * are not on disk. Run by the syncer thread or in line. */
static void *sync_commit(void *arg) {
    kv_file *f = arg;
    if (fdatasync(f->fd) != 0) subq_fail(&f->sync_err, SUBQ_ERR_IO, "cannot flush %s: %s", f->path, strerror(errno));
    else put_header(f, &f->sync_header, &f->sync_err);
    return NULL;
}

/* (kv_file.h) the syncer joined: its error, once */
subq_status kv_file_wait(kv_file *f, subq_error *err) {
    if (f->syncing) pthread_join(f->syncer, NULL);
    f->syncing = 0;
    const subq_status s = f->sync_err.code;
    if (s && err) *err = f->sync_err;
    f->sync_err = (subq_error){0};
    return s;
}

/* Write the header in the next slot (sequence number + 1) and flush, after
 * the syncer's: slots alternate, and the reader takes the higher number. */
static subq_status write_header(kv_file *f, subq_error *err) {
    subq_status s = kv_file_wait(f, err);
    if (s) return s;
    seal_header(&f->h);
    return put_header(f, &f->h, err);
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

/* Slot-major rows are read where retrieval points: no read-ahead around
 * them. A head-major layer is read whole (full attention): the kernel's
 * read-ahead serves it. */
static void advise_layers(kv_file *f) {
    for (uint32_t l = 0; l < f->g.n_layer; l++)
        madvise(f->map + DATA_START + l * f->per_layer, (size_t)f->per_layer,
                kv_file_head_major(f, (int)l) ? MADV_NORMAL : MADV_RANDOM);
}

static subq_status map_fixed(kv_file *f, subq_error *err) {
    f->map_bytes = f->h.fixed_bytes;
    const int prot = f->writable ? PROT_READ | PROT_WRITE : PROT_READ;
    void *p = mmap(NULL, f->map_bytes, prot, MAP_SHARED, f->fd, 0);
    if (p == MAP_FAILED)
        return subq_fail(err, SUBQ_ERR_NOMEM, "cannot map %s (%.2f GB): %s", f->path, f->map_bytes / 1e9,
                         strerror(errno));
    f->map = p;
    advise_layers(f);
    return SUBQ_OK;
}

static subq_status map_search(kv_file *f, subq_error *err) {
    if (f->smap) munmap(f->smap, f->smap_bytes);
    f->smap = NULL;
    f->smap_bytes = (size_t)(f->h.total_bytes - f->h.fixed_bytes);
    if (f->smap_bytes == 0) return SUBQ_OK;
    const int prot = f->writable ? PROT_READ | PROT_WRITE : PROT_READ;
    void *p = mmap(NULL, f->smap_bytes, prot, MAP_SHARED, f->fd, (off_t)f->h.fixed_bytes);
    if (p == MAP_FAILED) return subq_fail(err, SUBQ_ERR_NOMEM, "cannot map the search keys of %s", f->path);
    f->smap = p;
    return SUBQ_OK;
}

/* A new region's rows (a new file's, a new file's search keys) enter the
 * page cache as 2 MiB folios, so that the mapping maps them with 2 MiB
 * entries. Where the file system gives the page cache large folios (ext4
 * on Linux 6.18), a write makes folios no larger than itself: a prefill's
 * runs of rows (34-557 KB) would leave most of the mapping in 4 KiB
 * entries, and a decode step then pays a page walk
 * for each page it streams and each random slot it reads (on the VM of
 * bench/notes/2026-12-04-kv-file-folios.md: 0.6-0.8x the speed of the cache
 * in memory at 128K). Read once through a mapping advised MADV_HUGEPAGE,
 * the reserved blocks come back as zeros in 2 MiB folios without a disk
 * read, and the rows written later fill them. At most half the memory
 * available, from the region's start (the rest is written as before), and
 * only when the whole file fits in it: the page cache evicts a larger one
 * as it is written, and reads it back page by page. Advice only: where the
 * kernel cannot, pages stay small. The search keys matter too: a step's
 * selection reads hundreds of scattered rows of them a layer. */
static void populate_huge(kv_file *f, uint64_t from, uint64_t to) {
    const char *source;
    const uint64_t avail = bigmem_available(&source), half = avail / 2 / BIGMEM_HUGE_PAGE * BIGMEM_HUGE_PAGE;
    if (f->h.total_bytes > avail || to <= from) return;
    const size_t bytes = (size_t)(to - from < half ? to - from : half);
    void *p = mmap(NULL, bytes, PROT_READ, MAP_SHARED, f->fd, (off_t)from);
    if (p == MAP_FAILED) return;
#ifdef MADV_HUGEPAGE
    if (madvise(p, bytes, MADV_HUGEPAGE) == 0) (void)madvise(p, bytes, MADV_POPULATE_READ);
#endif
    munmap(p, bytes);
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
    if (!s) populate_huge(f, 0, f->h.fixed_bytes);
    return s;
}

/* The geometry a header slot claims: what a reader without a model
 * (kv_file_open_read) checks the slot against. */
static kv_file_geometry claimed_geometry(const unsigned char *page) {
    disk_header h;
    header_of(page, &h);
    return (kv_file_geometry){.model_fingerprint = h.model_fingerprint, .kv_type = h.kv_type, .n_layer = h.n_layer,
                              .n_head_kv = h.n_head_kv, .head_dim = h.head_dim, .n_vocab = h.n_vocab,
                              .row_bytes = h.row_bytes};
}

/* A claimed shape a model could have: rows of its KV type's width. */
static subq_status check_shape(const kv_file_geometry *g, subq_error *err) {
    if (g->kv_type >= SUBQ_KV_TYPE_COUNT || g->head_dim == 0 || g->head_dim > 65536 || g->n_layer == 0 ||
        g->n_head_kv == 0 || g->n_vocab == 0 ||
        g->row_bytes != kernels_kv_row_bytes((subq_kv_type)g->kv_type, (int)g->head_dim))
        return subq_fail(err, SUBQ_ERR_FORMAT, "KV file shape is malformed (%u layers x %u KV heads x %u, rows of "
                         "%" PRIu64 " bytes)", g->n_layer, g->n_head_kv, g->head_dim, g->row_bytes);
    return SUBQ_OK;
}

static int all_zero(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i]) return 0;
    return 1;
}

/* Read both header slots; the valid one with the higher sequence number is
 * current. A reader (not writable) takes the geometry from the slot it
 * picks. A slot that fails its checks is blank when every byte is zero (never
 * written: the file is reserved zeroed and the first header goes to slot 1),
 * else damaged; a damaged slot whose sequence number reads at or past the
 * current one's was the newest (a commit writes seq + 1; an older slot reads
 * seq - 1 or less), and the current one is then the older slot
 * (f->newest_damaged, with the count the damaged slot reads). */
static subq_status read_header(kv_file *f, uint64_t file_bytes, subq_error *err) {
    unsigned char page[PAGE];
    int found = 0, magic = 0, n_damaged = 0;
    uint64_t damaged_seq[HEADER_SLOTS], damaged_committed[HEADER_SLOTS];
    subq_error first = {0};
    kv_file_geometry picked = f->g;
    const kv_file_geometry asked = f->g;
    f->newest_damaged = 0;
    f->newest_committed = -1;
    for (int i = 0; i < HEADER_SLOTS; i++) {
        subq_error e = {0};
        kv_file_geometry g = asked;
        const ssize_t got = pread(f->fd, page, PAGE, (off_t)i * PAGE);
        if (got >= (ssize_t)sizeof MAGIC && !memcmp(page, MAGIC, sizeof MAGIC)) magic++;
        if (got != (ssize_t)PAGE) {
            snprintf(e.msg, sizeof e.msg, "KV file header is truncated");
            e.code = SUBQ_ERR_FORMAT;
        } else {
            if (!f->writable) g = claimed_geometry(page);
            if (!kv_file_check_header(page, PAGE, &g, file_bytes, &e) && !f->writable) check_shape(&g, &e);
            if (e.code == SUBQ_ERR_FORMAT && !all_zero(page, PAGE)) {
                disk_header raw;
                memcpy(&raw, page, sizeof raw);
                damaged_seq[n_damaged] = raw.seq;
                damaged_committed[n_damaged++] = raw.n_committed;
            }
        }
        if (e.code) {
            /* a slot of another model or shape is an answer, not damage */
            if (!first.code || (e.code != SUBQ_ERR_FORMAT && first.code == SUBQ_ERR_FORMAT)) first = e;
            continue;
        }
        disk_header h;
        header_of(page, &h);
        if (!found || h.seq > f->h.seq) f->h = h, picked = g;
        found = 1;
    }
    /* neither slot starts as a KV file does: some other file (text, an empty one) */
    if (!found && !magic) return subq_fail(err, SUBQ_ERR_FORMAT, "%s: not a subq KV file", f->path);
    if (!found) return subq_fail(err, first.code, "%s: %s", f->path, first.msg);
    for (int i = 0; i < n_damaged; i++)
        if (damaged_seq[i] >= f->h.seq) {
            f->newest_damaged = 1;
            f->newest_committed = damaged_committed[i] <= f->h.n_ctx ? (int64_t)damaged_committed[i] : -1;
        }
    f->g = picked;
    f->g.n_ctx = f->h.n_ctx;
    layout(&f->g, &f->per_layer, &f->meta_stride);
    return SUBQ_OK;
}

int kv_file_damage(const kv_file *f, char *msg, size_t cap) {
    if (!f->newest_damaged) return 0;
    const int64_t old = (int64_t)f->h.n_committed, newest = f->newest_committed;
    char what[160];
    if (newest < 0) snprintf(what, sizeof what, "how many the newest counted cannot be read");
    else if (newest > old) snprintf(what, sizeof what, "%" PRId64 " fewer than the newest (%" PRId64 ")", newest - old, newest);
    else snprintf(what, sizeof what, "the newest counted %" PRId64, newest);
    snprintf(msg, cap, "%s: the newest header slot is damaged (a crash while it was written, or damage since): the "
             "older slot counts %" PRId64 " committed tokens, %s", f->path, old, what);
    return 1;
}

int kv_file_newest_committed(const kv_file *f) {
    return !f->newest_damaged ? -1 : f->newest_committed < 0 ? -1 : (int)f->newest_committed;
}
int kv_file_newest_damaged(const kv_file *f) { return f->newest_damaged; }
long kv_file_writer(const kv_file *f) { return f->writer; }

int kv_file_header_moved(kv_file *f) {
    unsigned char page[PAGE];
    uint64_t seq = 0;
    int found = 0;
    struct stat st;
    if (fstat(f->fd, &st) != 0) return 1;
    for (int i = 0; i < HEADER_SLOTS; i++) {
        kv_file_geometry g = f->g;
        g.n_ctx = 0;
        subq_error e = {0};
        if (pread(f->fd, page, PAGE, (off_t)i * PAGE) != (ssize_t)PAGE ||
            kv_file_check_header(page, PAGE, &g, (uint64_t)st.st_size, &e))
            continue;
        disk_header h;
        header_of(page, &h);
        if (!found || h.seq > seq) seq = h.seq;
        found = 1;
    }
    return !found || seq != f->h.seq;
}

/* The pid holding a lock on the file behind fd, from /proc/locks (0 when
 * it cannot be told: another namespace, no procfs). */
static long lock_holder(int fd) {
    struct stat st;
    FILE *locks = fstat(fd, &st) == 0 ? fopen("/proc/locks", "r") : NULL;
    if (!locks) return 0;
    char line[256];
    long pid = 0;
    while (!pid && fgets(line, sizeof line, locks)) {
        /* "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF" */
        long p;
        unsigned maj, min;
        unsigned long long ino;
        char *at = strstr(line, "FLOCK");
        if (at && sscanf(at, "FLOCK %*s %*s %ld %x:%x:%llu", &p, &maj, &min, &ino) == 4 &&
            ino == (unsigned long long)st.st_ino && maj == major(st.st_dev) && min == minor(st.st_dev))
            pid = p;
    }
    fclose(locks);
    return pid;
}

/* One writer per file: flock(2), exclusive, held until close, so a second
 * process cannot mix its tokens into the file. A reader takes no lock (it
 * would refuse a writer that starts meanwhile): it tries a shared one only to
 * learn whether a writer holds the file (f->writer), and lets it go at once;
 * a writer that meets such a probe tries again for a moment. */
static subq_status take_lock(kv_file *f, subq_error *err) {
    const int want = (f->writable ? LOCK_EX : LOCK_SH) | LOCK_NB;
    int r = flock(f->fd, want);
    for (int tries = 0; r != 0 && errno == EWOULDBLOCK && f->writable && tries < 20; tries++) {
        const struct timespec ms5 = {0, 5000000};
        nanosleep(&ms5, NULL);
        r = flock(f->fd, want);
    }
    if (r == 0) {
        if (!f->writable) flock(f->fd, LOCK_UN);
        return SUBQ_OK;
    }
    /* a file system without locks (some network ones): nothing to enforce with */
    if (errno == ENOLCK || errno == EOPNOTSUPP || errno == ENOSYS || errno == EINVAL) return SUBQ_OK;
    if (errno != EWOULDBLOCK) return subq_fail(err, SUBQ_ERR_IO, "cannot lock KV file %s: %s", f->path, strerror(errno));
    const long pid = lock_holder(f->fd);
    if (!f->writable) {
        f->writer = pid > 0 ? pid : -1;
        return SUBQ_OK;
    }
    char who[48] = "another process";
    if (pid > 0) snprintf(who, sizeof who, "process %ld", pid);
    return subq_fail(err, SUBQ_ERR_BUSY, "KV file %s is in use by %s (one writer at a time)", f->path, who);
}

/* A reader's header: beside a writer (f->writer), a slot may be written as
 * it is read (a torn read fails its checksum), so what does not check out
 * is read again a few times before it counts. */
static subq_status read_header_reader(kv_file *f, uint64_t file_bytes, subq_error *err) {
    subq_status s = read_header(f, file_bytes, err);
    for (int tries = 0; f->writer && (s || f->newest_damaged) && tries < 5; tries++) {
        const struct timespec ms10 = {0, 10000000};
        nanosleep(&ms10, NULL);
        struct stat st;
        if (fstat(f->fd, &st) == 0) file_bytes = (uint64_t)st.st_size;
        f->g = (kv_file_geometry){0};
        s = read_header(f, file_bytes, err);
    }
    return s;
}

static subq_status open_file(const char *path, const kv_file_geometry *g, int writable, int recover, kv_file **out,
                             subq_error *err) {
    *out = NULL;
    kv_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        free(f);
        return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    }
    f->g = *g;
    f->writable = writable;
    f->fd = writable ? open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644) : -1;
    int created = f->fd >= 0;
    if (!created && (!writable || errno == EEXIST)) f->fd = open(path, (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
    subq_status s = SUBQ_OK;
    struct stat st;
    char damage[400];
    if (f->fd < 0) s = subq_fail(err, SUBQ_ERR_IO, "cannot open KV file %s: %s", path, strerror(errno));
    else if (fstat(f->fd, &st) != 0 || !S_ISREG(st.st_mode))
        s = subq_fail(err, SUBQ_ERR_IO, "KV file %s is not a regular file", path);
    else if ((s = take_lock(f, err)))
        ;
    else if (created && g->n_ctx == 0)
        s = subq_fail(err, SUBQ_ERR_ARG, "a new KV file needs the context size");
    else if (created)
        s = create_file(f, err);
    else if (!writable)
        s = read_header_reader(f, (uint64_t)st.st_size, err);
    else if (!(s = read_header(f, (uint64_t)st.st_size, err)) && !recover && kv_file_damage(f, damage, sizeof damage))
        /* the next header would go over the damaged slot: continuing from the older one is asked for */
        s = subq_fail(err, SUBQ_ERR_FORMAT, "%s; give --kv-recover to continue from the older slot", damage);
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

subq_status kv_file_open(const char *path, const kv_file_geometry *g, int recover, kv_file **out, subq_error *err) {
    return open_file(path, g, 1, recover, out, err);
}

subq_status kv_file_open_read(const char *path, kv_file **out, subq_error *err) {
    const kv_file_geometry from_file = {0}; /* read_header takes the file's own */
    return open_file(path, &from_file, 0, 1, out, err);
}

void kv_file_close(kv_file *f) {
    if (!f) return;
    kv_file_wait(f, NULL);
    if (f->map) munmap(f->map, f->map_bytes);
    if (f->smap) munmap(f->smap, f->smap_bytes);
    if (f->fd >= 0) close(f->fd);
    free(f->path);
    free(f);
}

const kv_file_geometry *kv_file_geom(const kv_file *f) { return &f->g; }
const char *kv_file_path(const kv_file *f) { return f->path; }

int kv_file_committed(const kv_file *f) { return (int)f->h.n_committed; }
int kv_file_has_logits(const kv_file *f) { return f->h.has_logits != 0; }
int kv_file_n_search(const kv_file *f) { return (int)f->h.n_search; }

/* A slot's key and value rows of every KV head in one layer. */
static size_t slot_stride(const kv_file *f) { return 2 * (size_t)f->g.n_head_kv * f->g.row_bytes; }

void *kv_file_keys(kv_file *f, int layer) { return f->map + DATA_START + (uint64_t)layer * f->per_layer; }
int kv_file_head_major(const kv_file *f, int layer) {
    return layer < KV_FILE_MAX_LAYOUT && (f->h.head_major[layer / 64] >> (layer % 64) & 1);
}
void kv_file_strides(const kv_file *f, int layer, size_t *head_stride, size_t *slot_stride) {
    const size_t row = (size_t)f->g.row_bytes, n_head = f->g.n_head_kv;
    *head_stride = kv_file_head_major(f, layer) ? (size_t)f->g.n_ctx * row : row;
    *slot_stride = kv_file_head_major(f, layer) ? row : 2 * n_head * row;
}
void *kv_file_values(kv_file *f, int layer) {
    size_t head_stride, slot_stride;
    kv_file_strides(f, layer, &head_stride, &slot_stride);
    return (unsigned char *)kv_file_keys(f, layer) + f->g.n_head_kv * head_stride;
}
void *kv_file_row(kv_file *f, int layer, int values, int h, int slot) {
    size_t head_stride, slot_stride; /* the values follow the keys of every head, in both layouts */
    kv_file_strides(f, layer, &head_stride, &slot_stride);
    const size_t at = ((size_t)values * f->g.n_head_kv + (size_t)h) * head_stride + (size_t)slot * slot_stride;
    return (unsigned char *)kv_file_keys(f, layer) + at;
}
static unsigned char *meta(kv_file *f, int i) {
    return f->map + DATA_START + (uint64_t)f->g.n_layer * f->per_layer + (uint64_t)i * f->meta_stride;
}
int32_t *kv_file_pos(kv_file *f) { return (int32_t *)meta(f, 0); }
int32_t *kv_file_seg(kv_file *f) { return (int32_t *)meta(f, 1); }
int32_t *kv_file_tok(kv_file *f) { return (int32_t *)meta(f, 2); }
static uint32_t *slot_sums(kv_file *f) { return (uint32_t *)meta(f, 3); }
/* logits region i: a commit writes the one the header does not name */
static float *logits_region(kv_file *f, uint64_t i) {
    return (float *)(meta(f, 4) + i * round_page((uint64_t)f->g.n_vocab * 4));
}
float *kv_file_logits(kv_file *f) { return logits_region(f, f->h.logits_slot); }

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
    else *ok = 1, populate_huge(f, f->h.fixed_bytes, f->h.total_bytes);
    return s;
}

subq_status kv_file_set_layout(kv_file *f, const unsigned char *head_major, int *ok, subq_error *err) {
    uint64_t want[KV_FILE_MAX_LAYOUT / 64] = {0};
    for (uint32_t l = 0; l < f->g.n_layer && l < KV_FILE_MAX_LAYOUT; l++)
        if (head_major[l]) want[l / 64] |= 1ull << (l % 64);
    *ok = !memcmp(want, f->h.head_major, sizeof want);
    if (*ok || f->h.n_committed > 0) return SUBQ_OK;
    disk_header old = f->h;
    memcpy(f->h.head_major, want, sizeof want);
    subq_status s = write_header(f, err);
    if (s) f->h = old;
    else *ok = 1, advise_layers(f);
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

/* The whole pages of file bytes [from, to) zeroed and dropped from the page
 * cache, their blocks kept (FALLOC_FL_ZERO_RANGE): written again, they come
 * back as 4 KiB pages. Advice: where the file system cannot, pages stay. */
static void zero_pages(kv_file *f, uint64_t from, uint64_t to) {
    const uint64_t lo = round_page(from), hi = to / PAGE * PAGE;
#ifdef FALLOC_FL_ZERO_RANGE
    if (hi > lo) (void)fallocate(f->fd, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, (off_t)lo, (off_t)(hi - lo));
#else
    (void)f, (void)lo, (void)hi;
#endif
}

/* Slots [lo, hi) (none committed) in small pages in the regions a decode
 * step writes a slot of through the mapping or in one run: each slot-major
 * layer's rows, the positions, segments, tokens and checksums, the search
 * keys. Why: where the page cache holds a region in 2 MiB folios
 * (populate_huge), a pwrite into one walks all 512 of its block buffers
 * (13-25 us, against 1.5-1.9 in 4 KiB pages), and a store through the mapping
 * makes the whole folio dirty, so each commit wrote 2 MiB a region (at 128K
 * on the Qwen3-0.6B shape, 10 MB/s of disk writes; 3-4 so). The page that
 * holds slot lo - 1 is left as it is, but its folio is split. Head-major
 * layers keep their pages: the folio of each head's last prompt rows would
 * be split too, and every step streams those rows, slower from 4 KiB pages
 * (at 128K, 12% of the dense rows so made the dense attention 12-20%
 * slower: bench/notes/2026-12-05-kv-file-small-pages.md; at 32K it would be
 * up to half of them). Their decode rows wait in the cache's stage and go
 * by pwrite in runs (kv_cache_store), whose dirty blocks alone are written
 * back. */
static void make_small(kv_file *f, int lo, int hi) {
    for (uint32_t l = 0; l < f->g.n_layer; l++) {
        if (kv_file_head_major(f, (int)l)) continue;
        const uint64_t from = (uint64_t)((unsigned char *)kv_file_row(f, (int)l, 0, 0, lo) - f->map);
        zero_pages(f, from, from + (uint64_t)(hi - lo) * slot_stride(f));
    }
    for (int i = 0; i < 4; i++) {
        const uint64_t from = (uint64_t)(meta(f, i) - f->map);
        zero_pages(f, from + 4 * (uint64_t)lo, from + 4 * (uint64_t)hi);
    }
    for (uint32_t r = 0; r < f->h.n_search; r++) {
        const uint64_t row = (uint64_t)f->h.search[r].d * sizeof(float);
        zero_pages(f, f->h.search[r].offset + lo * row, f->h.search[r].offset + hi * row);
    }
}

subq_status kv_file_will_write(kv_file *f, int slot, int n, subq_error *err) {
    if ((uint64_t)slot < f->h.n_committed) {
        f->h.n_committed = (uint64_t)slot;
        f->h.has_logits = 0;
        subq_status s = write_header(f, err);
        if (s) return s;
    }
    if (n > 0 && n <= KV_FILE_SHORT_WRITE && (slot < f->small_lo || slot + n > f->small_hi)) {
        f->small_lo = slot;
        f->small_hi = slot + KV_FILE_SMALL_SLOTS < (int)f->g.n_ctx ? slot + KV_FILE_SMALL_SLOTS : (int)f->g.n_ctx;
        make_small(f, f->small_lo, f->small_hi);
    }
    return SUBQ_OK;
}

/* Ask the kernel to read [p, p + n) of the mapping ahead: the mapping is
 * MADV_RANDOM (a retrieved row reads one page), so a pass over many rows
 * would otherwise wait on the disk one page at a time. */
static void read_ahead(const void *p, size_t n) {
    const uintptr_t lo = (uintptr_t)p / PAGE * PAGE;
    madvise((void *)lo, n + ((uintptr_t)p - lo), MADV_WILLNEED);
}

/* read_ahead of slots [t0, t0 + n) of a layer: one run, or one a head and kind */
static void read_ahead_rows(kv_file *f, int layer, int t0, int n) {
    if (!kv_file_head_major(f, layer)) {
        read_ahead(kv_file_row(f, layer, 0, 0, t0), (size_t)n * slot_stride(f));
        return;
    }
    for (int kind = 0; kind < 2; kind++)
        for (uint32_t h = 0; h < f->g.n_head_kv; h++)
            read_ahead(kv_file_row(f, layer, kind, (int)h, t0), (size_t)n * f->g.row_bytes);
}

/* Slots checksummed per pass: a layer's rows of a block are one run. */
#define SUM_BLOCK 4096

/* The CRC-32C of slots [t0, t1) (at most SUM_BLOCK) into crc[]: a slot's
 * key and value rows in every layer, its position, segment and token, its
 * search keys in every sparse layer, in that order. Region by region (each
 * read ahead), each slot's CRC carried from one to the next. */
static void sum_slots(kv_file *f, int t0, int t1, uint32_t *crc) {
    const size_t slot_bytes = slot_stride(f), row_bytes = (size_t)f->g.row_bytes, n = (size_t)(t1 - t0);
    const int n_head = (int)f->g.n_head_kv;
    for (size_t i = 0; i < n; i++) crc[i] = 0;
    /* the next region is asked for while this one is summed: the disk and the CPU overlap */
    read_ahead_rows(f, 0, t0, (int)n);
    for (uint32_t l = 0; l < f->g.n_layer; l++) {
        if (l + 1 < f->g.n_layer) read_ahead_rows(f, (int)l + 1, t0, (int)n);
        /* a slot's key rows of every head, then its value rows: in a
         * slot-major layer, the slot's run of bytes as it lies */
        if (!kv_file_head_major(f, (int)l)) {
            const unsigned char *rows = kv_file_row(f, (int)l, 0, 0, t0);
            for (size_t i = 0; i < n; i++) crc[i] = crc32c(crc[i], rows + i * slot_bytes, slot_bytes);
            continue;
        }
        for (size_t i = 0; i < n; i++)
            for (int kind = 0; kind < 2; kind++)
                for (int h = 0; h < n_head; h++)
                    crc[i] = crc32c(crc[i], kv_file_row(f, (int)l, kind, h, t0 + (int)i), row_bytes);
    }
    const int32_t *meta3[3] = {kv_file_pos(f), kv_file_seg(f), kv_file_tok(f)};
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < 3; k++) crc[i] = crc32c(crc[i], meta3[k] + t0 + i, 4);
    for (uint32_t r = 0; r < f->h.n_search; r++) {
        const size_t row = (size_t)f->h.search[r].d * sizeof(float);
        const unsigned char *rows = f->smap + (f->h.search[r].offset - f->h.fixed_bytes) + (size_t)t0 * row;
        read_ahead(rows, n * row);
        for (size_t i = 0; i < n; i++) crc[i] = crc32c(crc[i], rows + i * row, row);
    }
}

subq_status kv_file_commit(kv_file *f, int n, const float *logits, int durable, subq_error *err) {
    /* the previous commit's header on disk first: until then the header
     * before it names the logits region this commit writes */
    subq_status s = kv_file_wait(f, err);
    if (s) return s;
    /* rows at or past the header's count are the ones written since it
     * (kv_file_will_write lowered it before any earlier row changed) */
    uint32_t *sums = slot_sums(f);
    for (int t = (int)f->h.n_committed; t < n; t += SUM_BLOCK)
        sum_slots(f, t, n - t < SUM_BLOCK ? n : t + SUM_BLOCK, sums + t);
    const uint64_t spare = !f->h.logits_slot;
    const size_t logits_bytes = (size_t)f->g.n_vocab * sizeof(float);
    s = logits ? kv_file_write(f, logits_region(f, spare), logits, logits_bytes, err) : SUBQ_OK;
    if (s) return s;
    f->h.n_committed = (uint64_t)n;
    f->h.has_logits = logits != NULL;
    if (logits) f->h.logits_slot = spare, f->h.logits_sum = crc32c(0, logits, logits_bytes);
    seal_header(&f->h);
    f->sync_header = f->h;
    /* Not durable: the flushes (10-30 ms once a second at 128K on the VM
     * of bench/notes/2026-12-05-kv-file-commit-thread.md) go on beside the
     * next steps, which write only slots past n, until the next header
     * write waits for them. */
    if (!durable && pthread_create(&f->syncer, NULL, sync_commit, f) == 0) {
        f->syncing = 1;
        return SUBQ_OK;
    }
    sync_commit(f);
    return kv_file_wait(f, err);
}

size_t kv_file_slot_bytes(const kv_file *f) {
    size_t bytes = f->g.n_layer * slot_stride(f) + 3 * sizeof(int32_t); /* rows, pos, seg, tok */
    for (uint32_t i = 0; i < f->h.n_search; i++) bytes += (size_t)f->h.search[i].d * sizeof(float);
    return bytes;
}

/* 1 when n floats (f32) hold an infinity or NaN */
static int floats_bad(const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, b + 4 * i, 4);
        if ((u & 0x7F800000u) == 0x7F800000u) return 1;
    }
    return 0;
}

/* 1 when n halves (f16) at stride bytes hold an infinity or NaN: the rows
 * of an f16 cache (stride 2) or the block scales of a quantised one */
static int halves_bad(const void *p, size_t n, size_t stride) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        uint16_t u;
        memcpy(&u, b + i * stride, 2);
        if ((u & 0x7C00u) == 0x7C00u) return 1;
    }
    return 0;
}

/* 1 when a KV row of the file's type holds a value that is not finite */
static int row_bad(const kv_file *f, const void *row) {
    const size_t hd = f->g.head_dim;
    switch ((subq_kv_type)f->g.kv_type) {
    case SUBQ_KV_F32: return floats_bad(row, hd);
    case SUBQ_KV_F16: return halves_bad(row, hd, 2);
    default: { /* blocks of a f16 scale and the quants (kernels_kv_row_bytes) */
        const size_t n_block = hd / KV_QBLOCK(hd);
        return halves_bad(row, n_block, f->g.row_bytes / n_block);
    }
    }
}

subq_status kv_file_verify(kv_file *f, int from, int to, subq_error *err) {
    if (from < 0) from = 0;
    if (to > (int)f->h.n_committed) to = (int)f->h.n_committed;
    const uint32_t *sums = slot_sums(f);
    uint32_t crc[SUM_BLOCK];
    for (int t0 = from; t0 < to; t0 += SUM_BLOCK) {
        const int t1 = to - t0 < SUM_BLOCK ? to : t0 + SUM_BLOCK;
        sum_slots(f, t0, t1, crc);
        for (int t = t0; t < t1; t++)
            if (crc[t - t0] != sums[t])
                return subq_fail(err, SUBQ_ERR_FORMAT, "KV file slot %d of %d is damaged (its checksum differs)", t,
                                 to);
        /* then finiteness, region by region as the sums went (the rows are in the page cache now) */
        for (uint32_t l = 0; l < f->g.n_layer; l++)
            for (int t = t0; t < t1; t++)
                for (int kind = 0; kind < 2; kind++)
                    for (uint32_t h = 0; h < f->g.n_head_kv; h++)
                        if (row_bad(f, kv_file_row(f, (int)l, kind, (int)h, t)))
                            return subq_fail(err, SUBQ_ERR_FORMAT, "KV file slot %d holds a %s row that is not "
                                             "finite (layer %u)", t, kind ? "value" : "key", l);
        for (uint32_t i = 0; i < f->h.n_search; i++) {
            const size_t d = f->h.search[i].d;
            for (int t = t0; t < t1; t++)
                if (floats_bad(f->smap + (f->h.search[i].offset - f->h.fixed_bytes) + (size_t)t * d * sizeof(float), d))
                    return subq_fail(err, SUBQ_ERR_FORMAT, "KV file slot %d holds search keys that are not finite "
                                     "(layer %u)", t, f->h.search[i].layer);
        }
    }
    if (f->h.has_logits) {
        const float *logits = kv_file_logits(f);
        const size_t n = f->g.n_vocab;
        if (crc32c(0, logits, n * sizeof(float)) != f->h.logits_sum)
            return subq_fail(err, SUBQ_ERR_FORMAT, "the KV file's last logits are damaged (their checksum differs)");
        if (floats_bad(logits, n))
            return subq_fail(err, SUBQ_ERR_FORMAT, "the KV file's last logits are not finite");
    }
    return SUBQ_OK;
}

subq_status kv_file_evict(kv_file *f, subq_error *err) {
    subq_status s = kv_file_wait(f, err);
    if (s) return s;
    if (fdatasync(f->fd) != 0) return subq_fail(err, SUBQ_ERR_IO, "cannot flush %s: %s", f->path, strerror(errno));
    /* unmapped from this process first: the page cache drops only pages nobody maps */
    if (madvise(f->map, f->map_bytes, MADV_DONTNEED) != 0 ||
        (f->smap && madvise(f->smap, f->smap_bytes, MADV_DONTNEED) != 0))
        return subq_fail(err, SUBQ_ERR_IO, "cannot drop the mapping of %s: %s", f->path, strerror(errno));
    int e = posix_fadvise(f->fd, 0, 0, POSIX_FADV_DONTNEED);
    if (e) return subq_fail(err, SUBQ_ERR_IO, "cannot drop %s from the page cache: %s", f->path, strerror(e));
    advise_layers(f);
    return SUBQ_OK;
}
