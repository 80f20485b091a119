/* A KV cache in a file (subq_context_params.kv_file): the keys and values
 * of every layer, the slots' positions, segments and token ids, the last
 * logits and the sparse layers' search keys live in one file mapped into
 * memory, so that a context larger than RAM reads from disk only the rows
 * its queries attend. The file is also the session: its header says how
 * many tokens are committed, and a context reopened on it continues from
 * them.
 *
 * Layout (offsets page-aligned, little-endian):
 *   0, 4096        two header slots; the valid one with the higher sequence
 *                  number is current (a torn header write leaves the other)
 *   8192           layer l, slot-major: [n_ctx][keys, values][n_head_kv][row_bytes]
 *                  (a slot's key and value rows of every KV head adjacent,
 *                  so a retrieved slot costs one page read, not one per
 *                  head and kind), or head-major: [keys, values][n_head_kv]
 *                  [n_ctx][row_bytes] (as in memory: full attention
 *                  streams a head's rows). The header says which, per
 *                  layer: head-major for the layers the plan runs dense,
 *                  chosen while the file counts no tokens.
 *   ...            pos, seg, tok: int32 [n_ctx] each; sum: uint32 [n_ctx], the
 *                  CRC-32C of each committed slot (kv_file_verify);
 *                  logits: f32 [n_vocab] twice, the header naming the
 *                  committed one (and its CRC)
 *   fixed_bytes    search keys of sparse layers: f32 [n_ctx][d] each, in the
 *                  stored form of the selectors (unit vectors for cosine)
 *
 * Commit protocol: rows past n_committed are written freely; a commit
 * flushes the data (fdatasync), then writes the next header slot and
 * flushes again, so the header never counts rows that are not on disk.
 * A periodic commit does both flushes on a thread (the syncer) while decode
 * goes on past n_committed; any later header write waits for it first.
 * Before a row below n_committed is overwritten (after a truncate or a
 * reset), the header is lowered to that row first.
 *
 * A damaged newest header slot (a checksum that fails over bytes that are
 * not the zeros of a slot never written, with a sequence number at or past
 * the other's) is told apart from an older one: the file is not continued
 * from the older slot unless asked (kv_file_open's recover).
 *
 * Locking: a writer holds an exclusive flock(2) until it closes the file; a
 * second writer is SUBQ_ERR_BUSY naming the pid. A reader takes no lock and
 * reads the header the writer last committed. */
#ifndef SUBQ_KV_FILE_H
#define SUBQ_KV_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "subq.h"

#define KV_FILE_MAX_SEARCH 128 /* sparse layers with search keys */
#define KV_FILE_MAX_LAYOUT 256 /* layers that can be head-major (the rest are slot-major) */

/* What the file must match: the model and the cache's shape. */
typedef struct kv_file_geometry {
    uint64_t model_fingerprint;
    uint32_t kv_type, n_layer, n_head_kv, head_dim, n_ctx, n_vocab;
    uint64_t row_bytes;
} kv_file_geometry;

/* A sparse layer's search keys: width, where they lie, and a hash of what
 * made them (the projections and the score), so that a context resumes
 * only with keys its own projections would have computed. */
typedef struct kv_file_search {
    uint32_t layer, d;
    uint64_t offset;
    uint64_t made_by;
} kv_file_search;

typedef struct kv_file kv_file;

/* Open `path` (created, with its full size reserved on disk, when it does
 * not exist). An existing file must have the same geometry
 * (SUBQ_ERR_MISMATCH naming the difference); a damaged one is
 * SUBQ_ERR_FORMAT, and so is one whose newest header slot is damaged
 * unless `recover` (then the older slot is read: kv_file_damage says what
 * that lost). n_ctx 0 in g: the file's own. */
subq_status kv_file_open(const char *path, const kv_file_geometry *g, int recover, kv_file **out, subq_error *err);
/* Open an existing file for reading alone (its own geometry): inspection
 * and verification without a model. It takes no lock, so a writer is
 * neither refused nor held up by it; a writer that holds the file as it is
 * opened is noted (kv_file_writer), and the header read is the one it last
 * committed. A reader reads the older slot when the newest is damaged. */
subq_status kv_file_open_read(const char *path, kv_file **out, subq_error *err);
/* Commit what is pending and close. */
void kv_file_close(kv_file *f);

const kv_file_geometry *kv_file_geom(const kv_file *f);
/* Tokens the header counts; whether it holds the last one's logits. */
int kv_file_committed(const kv_file *f);
const char *kv_file_path(const kv_file *f);
int kv_file_has_logits(const kv_file *f);

/* Regions in the mapping. A layer's rows: bytes from one KV head's row to
 * the next head's, and from a slot's row to the next slot's. */
void *kv_file_keys(kv_file *f, int layer);
void *kv_file_values(kv_file *f, int layer);
int kv_file_head_major(const kv_file *f, int layer);
void kv_file_strides(const kv_file *f, int layer, size_t *head_stride, size_t *slot_stride);
void *kv_file_row(kv_file *f, int layer, int values, int h, int slot);
int32_t *kv_file_pos(kv_file *f);
int32_t *kv_file_seg(kv_file *f);
int32_t *kv_file_tok(kv_file *f);
float *kv_file_logits(kv_file *f); /* the committed last logits (read them only) */
/* Search keys of `layer` (NULL when it has none), [n_ctx][d]. */
float *kv_file_search_rows(kv_file *f, int layer, int *d);

/* The search keys a plan stores (d[layer], 0 for none, and made_by[layer]):
 * 1 when the file's table is this one already or could be made so (it
 * counts no tokens: the regions are laid out again after the fixed part),
 * 0 when its committed tokens were made with other search keys (the file
 * is left as it is). */
subq_status kv_file_set_search(kv_file *f, const int *d, const uint64_t *made_by, int *ok, subq_error *err);

/* Which layers are head-major (head_major[layer] != 0; the rest
 * slot-major): *ok = 1 when the file is laid out so already or could be
 * made so (it counts no tokens; the rows it holds past them are dropped),
 * 0 when its committed tokens keep the layout they were written in. */
subq_status kv_file_set_layout(kv_file *f, const unsigned char *head_major, int *ok, subq_error *err);

/* Write n bytes from src to where `at` lies in the mapping, with pwrite(2)
 * (a store through the mapping first reads, or zero-fills, every page it
 * touches and takes a fault to mark it dirty: a long fill ran at a fifth of
 * the disk's write rate); the pages of a run of 1 MiB or more are sent to
 * the disk at once (sync_file_range). */
subq_status kv_file_write(kv_file *f, const void *at, const void *src, size_t n, subq_error *err);

/* About to write slots [slot, slot + n), those past them holding nothing: a
 * header counting rows at or past `slot` is lowered to it first (durably).
 * A short write (at most KV_FILE_SHORT_WRITE slots: a decode step's) outside
 * the slots made small last zeroes the next KV_FILE_SMALL_SLOTS slots and
 * makes their pages small (kv_file.c). n = 0: nothing about to be written
 * is known. */
#define KV_FILE_SHORT_WRITE 16
#define KV_FILE_SMALL_SLOTS 1024
subq_status kv_file_will_write(kv_file *f, int slot, int n, subq_error *err);
/* Commit n tokens (with the last token's logits, or NULL): checksum the
 * slots written since the last commit, write the logits into the region
 * the header does not name (a kill before the header leaves the committed
 * ones whole), flush, then write the header. durable: return once the
 * header is on disk; else the flush and the header go on a thread of the
 * file's own, while the caller writes slots past n; its error (an I/O
 * failure) is returned by the next call that writes a header. */
subq_status kv_file_commit(kv_file *f, int n, const float *logits, int durable, subq_error *err);
/* The last commit on disk (waiting for the syncer), and its error. */
subq_status kv_file_wait(kv_file *f, subq_error *err);

/* Check the committed slots [from, to): each slot's checksum, every key,
 * value and search row finite, and the last logits when held
 * (SUBQ_ERR_FORMAT naming the first bad slot). Bytes read per slot. */
subq_status kv_file_verify(kv_file *f, int from, int to, subq_error *err);
size_t kv_file_slot_bytes(const kv_file *f);
/* Search layers and the committed header's fields, for inspection. */
int kv_file_n_search(const kv_file *f);

/* The newest header slot is damaged and the header read is the older one:
 * 1 and a one-line description in msg (the path, the older slot's count and
 * how many fewer that is than the damaged slot's, when it reads as a
 * count), else 0. The damaged slot's count (-1: none, or not a count). */
int kv_file_damage(const kv_file *f, char *msg, size_t cap);
int kv_file_newest_damaged(const kv_file *f);
int kv_file_newest_committed(const kv_file *f);
/* A reader: the pid of the writer that held the file as it was opened (-1:
 * one did, its pid unknown; 0: none). */
long kv_file_writer(const kv_file *f);
/* 1 when the current header on disk is no longer the one read (a writer
 * has committed, lowered or reset since), or none checks out. */
int kv_file_header_moved(kv_file *f);

/* Flush, then drop the file's pages from the mapping and the page cache. */
subq_status kv_file_evict(kv_file *f, subq_error *err);

/* Header validation on its own (the fuzz target): a header slot's bytes
 * against a geometry and a file size; and the checksum a slot of at least
 * KV_FILE_HEADER_BYTES bytes needs, written into it (tests). */
#define KV_FILE_HEADER_BYTES 4096
void kv_file_seal_header(void *slot);
subq_status kv_file_check_header(const void *slot, size_t n, const kv_file_geometry *g, uint64_t file_bytes,
                                 subq_error *err);

#endif
