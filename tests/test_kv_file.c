/* The KV cache in a file (subq_context_params.kv_file), through the public
 * API on stories260K, against a context whose cache is in memory:
 *   - the same tokens give bit-identical logits (full attention and exact
 *     retrieval over random projections);
 *   - the file is the session: freed after A, reopened, resumed, then C
 *     decoded gives the logits of an uninterrupted A + C in memory; the
 *     resumed tokens and last logits are A's; another selector over the
 *     same projections resumes too;
 *   - for every KV type, over several KV heads (file slot-major, memory
 *     head-major), the same logits again, and a session saved from the
 *     file continues in memory alike; a plan's dense layers head-major in
 *     the file beside its slot-major sparse ones, alike, also decoding one
 *     token at a time across windows of small pages (kv_file_will_write)
 *     with the dense layers' latest rows staged (kv_cache_store), which the
 *     gathered dots of quest and oracle read as the file's;
 *   - refusals: another model's file, another KV type, another context
 *     size, other projections (set_plan and decoding both say so), damaged
 *     and truncated headers, files of the older layouts (versions
 *     1 to 3; a version 4 file reads); a reset drops the tokens (file included);
 *   - crashes: a child that decodes and commits over and over (truncating
 *     back each round), killed with SIGKILL at a random moment, leaves a
 *     file whose committed tokens resume and continue exactly as the
 *     in-memory reference does from the same prefix;
 *   - a truncate below the committed tokens lowers the header before the
 *     rows are overwritten;
 *   - periodic commits flush on the file's syncer thread, between decodes,
 *     a second commit and a truncate: a sync then finds the header on disk,
 *     and the file verifies, resumes and continues as memory does;
 *   - integrity: a flipped byte in a row, a non-finite row and damaged
 *     logits are refused on resume and by subq_kv_file_inspect's verify
 *     (CRC-32C against its published check value);
 *   - one writer: a second context on the file, in this process or
 *     another, is SUBQ_ERR_BUSY naming the holder's pid; a reader beside
 *     the writer reads (and verifies) what it committed, naming it, and a
 *     reader holds no lock a writer would meet;
 *   - header slots: a damaged newest slot (a field, the magic, the
 *     sequence number) reads the older slot and says what it loses;
 *     verify fails, a writer refuses it unless kv_recover, which resumes
 *     the older slot's tokens; a damaged older slot loses nothing;
 *   - a text or empty file is "not a subq KV file" to writer and reader. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/crc32c.h"
#include "kv/kv_file.h"
#include "model/context.h"
#include "subq_lab.h"
#include "test_util.h"

enum { NA = 150, NC = 20, N_CTX = 512 };

static subq_model *model;
static subq_model_info info;
static subq_search *search, *other_search;
static char dir[600];

static int32_t token(int i) { return (int32_t)(1 + (i * 7919 + 13) % (info.n_vocab - 1)); }

static subq_context *open_ctx(const char *file, int kind, const subq_search *s, subq_kv_type kv, int n_ctx,
                              subq_status *st, subq_error *err) {
    subq_context_params p = subq_context_default_params();
    p.n_ctx = n_ctx;
    p.n_threads = 1;
    p.kv_type = kv;
    p.kv_file = file;
    subq_context *c = NULL;
    *st = subq_context_new(model, &p, &c, err);
    if (*st || kind < 0) return c;
    subq_attn_plan plan = subq_attn_plan_default();
    plan.selector = (subq_selector_kind)kind;
    plan.layers = "all";
    plan.top_k = 8;
    plan.n_sink = 2;
    plan.n_tail = 4;
    if ((*st = subq_context_set_plan(c, &plan, s, NULL, err))) {
        subq_context_free(c);
        return NULL;
    }
    return c;
}

static subq_context *must_open(const char *file, int kind, const subq_search *s) {
    subq_status st;
    subq_error err;
    subq_context *c = open_ctx(file, kind, s, SUBQ_KV_F16, N_CTX, &st, &err);
    if (!c) {
        fprintf(stderr, "FAIL open %s: %s\n", file ? file : "(memory)", err.msg);
        exit(1);
    }
    return c;
}

/* Decode tokens [from, to): a batch (when it holds a token), then one by
 * one; logits of the last. */
static int run(subq_context *c, int from, int to, float *logits) {
    subq_error err;
    int32_t buf[N_CTX];
    for (int i = from; i < to; i++) buf[i - from] = token(i);
    int half = from + (to - from) / 2;
    if (half > from && subq_decode(c, buf, half - from, logits, 0, &err)) return 0;
    for (int i = half; i < to; i++)
        if (subq_decode(c, &buf[i - from], 1, logits, 0, &err)) return 0;
    return 1;
}

/* Make the next forward's end commit, as if a second had passed. */
static void make_commit_due(subq_context *c) { c->commit_at = -1e30; }

static int same(const float *a, const float *b) { return !memcmp(a, b, (size_t)info.n_vocab * sizeof(float)); }

static void path_of(char *buf, size_t cap, const char *name) { snprintf(buf, cap, "%s/%s", dir, name); }

static void test_same_logits_and_resume(int kind) {
    const char *name = kind < 0 ? "full" : subq_selector_name((subq_selector_kind)kind);
    char file[700];
    path_of(file, sizeof file, kind < 0 ? "full.kv" : "sparse.kv");
    unlink(file);
    float *la = malloc((size_t)info.n_vocab * sizeof(float)), *lb = malloc((size_t)info.n_vocab * sizeof(float));
    subq_context *mem = must_open(NULL, kind, search), *fc = must_open(file, kind, search);
    CHECK(run(mem, 0, NA, la) && run(fc, 0, NA, lb) && same(la, lb), "%s: a file-backed cache gives other logits",
          name);
    subq_context_free(fc); /* commits */
    subq_error err;
    /* reopened: resume A, then C */
    fc = must_open(file, kind, search);
    CHECK(subq_context_n_past(fc) == 0, "%s: a reopened context is empty until it resumes", name);
    CHECK(subq_context_resume(fc, &err) == SUBQ_OK, "%s: resume: %s", name, err.msg);
    CHECK(subq_context_n_past(fc) == NA, "%s: resumed %d tokens, want %d", name, subq_context_n_past(fc), NA);
    const int32_t *tk = subq_context_tokens(fc);
    int tok_ok = 1;
    for (int i = 0; i < NA; i++) tok_ok &= tk[i] == token(i);
    CHECK(tok_ok, "%s: resumed token ids", name);
    const float *last = subq_context_last_logits(fc);
    CHECK(last && same(last, la), "%s: resumed last logits", name);
    CHECK(run(mem, NA, NA + NC, la) && run(fc, NA, NA + NC, lb) && same(la, lb),
          "%s: C after resume differs from C after A in memory", name);
    subq_context_free(fc);
    if (kind == SUBQ_SELECT_EXACT) { /* the same projections under another selector resume too */
        subq_context *h = must_open(file, SUBQ_SELECT_HNSW, search);
        CHECK(subq_context_resume(h, &err) == SUBQ_OK && subq_context_n_past(h) == NA + NC,
              "hnsw over exact's file: %s (%d tokens)", err.msg, subq_context_n_past(h));
        subq_context_free(h);
    }
    subq_context_free(mem);
    free(la);
    free(lb);
}

/* The file's rows are slot-major (a slot's rows of every KV head side by
 * side), the memory's head-major: for each KV type, full attention and
 * exact retrieval (prefill batch, then decode) give the memory's logits
 * bit for bit over several KV heads; a session saved from the file loads
 * into memory and continues alike (the session format is head-major). */
static void test_layouts(void) {
    CHECK(info.n_head_kv > 1, "the model has %d KV heads: the layouts would not differ", info.n_head_kv);
    const subq_kv_type types[] = {SUBQ_KV_F32, SUBQ_KV_F16, SUBQ_KV_Q8_0, SUBQ_KV_Q4_0};
    float *la = malloc((size_t)info.n_vocab * sizeof(float)), *lb = malloc((size_t)info.n_vocab * sizeof(float));
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (int ki = 0; ki < 4; ki++) {
            /* quest and oracle score a KV head's keys a slot stride apart */
            const int kinds[4] = {-1, SUBQ_SELECT_EXACT, SUBQ_SELECT_QUEST, SUBQ_SELECT_ORACLE}, kind = kinds[ki];
            const char *tn = subq_kv_type_name(types[ti]);
            const char *kn = kind < 0 ? "full" : subq_selector_name((subq_selector_kind)kind);
            char file[700], sess[700];
            path_of(file, sizeof file, "layout.kv");
            path_of(sess, sizeof sess, "layout.session");
            unlink(file);
            subq_status st;
            subq_error err;
            subq_context *mem = open_ctx(NULL, kind, search, types[ti], N_CTX, &st, &err);
            subq_context *fc = mem ? open_ctx(file, kind, search, types[ti], N_CTX, &st, &err) : NULL;
            if (!mem || !fc) {
                CHECK(0, "%s %s: open: %s", tn, kn, err.msg);
                subq_context_free(mem);
                continue;
            }
            CHECK(run(mem, 0, NA, la) && run(fc, 0, NA, lb) && same(la, lb), "%s %s: file logits differ from memory's",
                  tn, kn);
            CHECK(subq_context_save(fc, sess, &err) == SUBQ_OK, "%s %s: save: %s", tn, kn, err.msg);
            subq_context *m2 = open_ctx(NULL, kind, search, types[ti], N_CTX, &st, &err);
            CHECK(m2 && subq_context_load(m2, sess, &err) == SUBQ_OK, "%s %s: load: %s", tn, kn, err.msg);
            CHECK(m2 && run(mem, NA, NA + NC, la) && run(m2, NA, NA + NC, lb) && same(la, lb),
                  "%s %s: a session saved from the file continues otherwise", tn, kn);
            subq_context_free(m2);
            subq_context_free(fc);
            subq_context_free(mem);
            unlink(file);
            unlink(sess);
        }
    free(la);
    free(lb);
}

/* Layers 1 and 3 sparse (exact, K 8), the others dense, over a q8_0 cache
 * of n_ctx slots on one thread; opened in memory (file NULL) or on file. */
static subq_attn_plan mixed_plan(void) {
    subq_attn_plan plan = subq_attn_plan_default();
    plan.selector = SUBQ_SELECT_EXACT;
    plan.layers = "1,3";
    plan.top_k = 8;
    plan.n_sink = 2;
    plan.n_tail = 4;
    return plan;
}

static subq_context_params mixed_params(int n_ctx, const char *file) {
    subq_context_params p = subq_context_default_params();
    p.n_ctx = n_ctx;
    p.n_threads = 1;
    p.kv_type = SUBQ_KV_Q8_0;
    p.kv_file = file;
    return p;
}

static subq_status open_mixed(int n_ctx, const char *file, subq_context **c, subq_error *err) {
    const subq_context_params p = mixed_params(n_ctx, file);
    const subq_attn_plan plan = mixed_plan();
    *c = NULL;
    subq_status s = subq_context_new(model, &p, c, err);
    return s ? s : subq_context_set_plan(*c, &plan, search, NULL, err);
}

/* The layers a plan runs dense are head-major in a new file (streamed as
 * in memory), its sparse layers slot-major; with both kinds the logits are
 * memory's bit for bit, the file verifies, and it resumes alike. Reopened,
 * under full attention until its plan is set, a file of committed tokens
 * keeps its layout. */
static void test_mixed_layout(void) {
    char file[700];
    path_of(file, sizeof file, "mixed.kv");
    unlink(file);
    const subq_context_params p = mixed_params(N_CTX, file);
    const subq_attn_plan plan = mixed_plan();
    subq_error err;
    subq_context *mem = NULL, *fc = NULL;
    CHECK(open_mixed(N_CTX, NULL, &mem, &err) == SUBQ_OK, "memory context: %s", err.msg);
    CHECK(open_mixed(N_CTX, file, &fc, &err) == SUBQ_OK, "file context: %s", err.msg);
    if (!mem || !fc) goto done;
    int laid = 1;
    for (int l = 0; l < info.n_layer; l++) laid &= kv_file_head_major(fc->kv.file, l) == (l != 1 && l != 3);
    CHECK(laid, "dense layers head-major, sparse layers slot-major");
    float *la = malloc((size_t)info.n_vocab * sizeof(float)), *lb = malloc((size_t)info.n_vocab * sizeof(float));
    CHECK(run(mem, 0, NA, la) && run(fc, 0, NA, lb) && same(la, lb), "mixed layouts: file logits differ from memory's");
    subq_context_free(fc); /* commits */
    subq_kv_file_info ki;
    CHECK(subq_kv_file_inspect(file, 1, &ki, &err) == SUBQ_OK && ki.n_committed == NA &&
              ki.n_head_major_layers == info.n_layer - 2,
          "mixed layouts verify (%d head-major): %s", ki.n_head_major_layers, err.msg);
    fc = NULL;
    CHECK(subq_context_new(model, &p, &fc, &err) == SUBQ_OK, "reopened: %s", err.msg);
    laid = 1; /* under full attention as it opens: the committed tokens keep their layout */
    for (int l = 0; fc && l < info.n_layer; l++) laid &= kv_file_head_major(fc->kv.file, l) == (l != 1 && l != 3);
    CHECK(laid, "a file of committed tokens keeps its layout");
    CHECK(fc && subq_context_set_plan(fc, &plan, search, NULL, &err) == SUBQ_OK &&
              subq_context_resume(fc, &err) == SUBQ_OK,
          "resumed: %s", err.msg);
    CHECK(fc && run(mem, NA, NA + NC, la) && run(fc, NA, NA + NC, lb) && same(la, lb),
          "the mixed file continues otherwise than memory");
    free(la);
    free(lb);
done:
    subq_context_free(fc);
    subq_context_free(mem);
    unlink(file);
}

/* A decode step makes the next KV_FILE_SMALL_SLOTS slots of every region
 * small pages (zeroed on disk, blocks kept): a prompt, then one token at a
 * time across three such windows, with dense layers head-major (their
 * decode rows staged, committed midway) beside sparse slot-major ones,
 * gives memory's logits bit for bit; the gathered dots read the staged
 * rows; the file keeps every block it reserved, verifies, and resumes
 * alike. */
static void test_decode_windows(void) {
    enum { CTX = 3 * KV_FILE_SMALL_SLOTS, PROMPT = 200, END = PROMPT + 2 * KV_FILE_SMALL_SLOTS + 100 };
    char file[700];
    path_of(file, sizeof file, "windows.kv");
    unlink(file);
    subq_error err;
    subq_context *mem = NULL, *fc = NULL;
    float *la = malloc((size_t)info.n_vocab * sizeof(float)), *lb = malloc((size_t)info.n_vocab * sizeof(float));
    int32_t *toks = malloc(CTX * sizeof(int32_t));
    for (int i = 0; i < CTX; i++) toks[i] = token(i);
    CHECK(open_mixed(CTX, NULL, &mem, &err) == SUBQ_OK, "memory context: %s", err.msg);
    CHECK(open_mixed(CTX, file, &fc, &err) == SUBQ_OK, "file context: %s", err.msg);
    struct stat before, after;
    CHECK(stat(file, &before) == 0, "stat %s", file);
    int ok = mem && fc && !subq_decode(mem, toks, PROMPT, la, 0, &err) && !subq_decode(fc, toks, PROMPT, lb, 0, &err);
    for (int i = PROMPT; ok && i < END; i++) {
        if (i == END - 1) ok = subq_context_sync(fc, &err) == SUBQ_OK; /* the last token alone staged */
        ok = ok && !subq_decode(mem, toks + i, 1, la, 0, &err) && !subq_decode(fc, toks + i, 1, lb, 0, &err) &&
             same(la, lb);
    }
    CHECK(ok, "decoding across small-page windows: file logits differ from memory's (%s)", err.msg);
    /* a dense layer's staged rows (the latest, from a multiple of 64 on)
     * read by the gathered dot (quest, oracle) as the rows in the file,
     * against per-row dots in double */
    const kv_cache *kv = fc ? &fc->kv : NULL;
    CHECK(kv && kv->layers[0].stage_from < END && kv->layers[0].stage_from % KV_RUN_ALIGN == 0,
          "layer 0 (dense) stages its latest rows (from %d)", kv ? kv->layers[0].stage_from : -1);
    int32_t *idx = malloc(END * sizeof(int32_t));
    float *got = malloc(END * sizeof(float)), *q = malloc(2 * (size_t)(kv ? kv->head_dim : 1) * sizeof(float));
    int dots_ok = kv && idx && got && q;
    for (int h = 0; dots_ok && h < kv->n_head_kv; h++) {
        float *row = q + kv->head_dim;
        for (int c = 0; c < kv->head_dim; c++) q[c] = (float)((h * 31 + c * 7) % 13) / 13.0f - 0.5f;
        for (int j = 0; j < END; j++) idx[j] = j;
        kv_cache_gather_dot(kv, 0, h, q, idx, END, got);
        for (int j = 0; dots_ok && j < END; j++) {
            kv_cache_row_f32(kv, kv_cache_key(kv, 0, h, j), row);
            double ref = 0.0;
            for (int c = 0; c < kv->head_dim; c++) ref += (double)q[c] * row[c];
            dots_ok = fabs(got[j] - ref) <= 1e-4 * (1.0 + fabs(ref));
            if (!dots_ok) fprintf(stderr, "head %d slot %d: gathered %g, rows %g\n", h, j, got[j], ref);
        }
    }
    CHECK(dots_ok, "gathered dots over a dense layer with staged rows");
    free(idx);
    free(got);
    free(q);
    subq_context_free(fc); /* commits */
    fc = NULL;
    CHECK(stat(file, &after) == 0 && after.st_blocks >= before.st_blocks,
          "the file gave back reserved blocks: %lld then %lld", (long long)before.st_blocks,
          (long long)after.st_blocks);
    subq_kv_file_info ki;
    CHECK(subq_kv_file_inspect(file, 1, &ki, &err) == SUBQ_OK && ki.n_committed == END, "verify: %d tokens, %s",
          ki.n_committed, err.msg);
    CHECK(open_mixed(CTX, file, &fc, &err) == SUBQ_OK && subq_context_resume(fc, &err) == SUBQ_OK, "resumed: %s",
          err.msg);
    ok = fc != NULL;
    for (int i = END; ok && i < END + NC; i++)
        ok = !subq_decode(mem, toks + i, 1, la, 0, &err) && !subq_decode(fc, toks + i, 1, lb, 0, &err) && same(la, lb);
    CHECK(ok, "the resumed file continues otherwise than memory (%s)", err.msg);
    subq_context_free(fc);
    subq_context_free(mem);
    free(la);
    free(lb);
    free(toks);
    unlink(file);
}

/* A version 4 file (every layer slot-major, its header without the layout
 * field, the checksum where that field now starts) opens, resumes and
 * continues as memory does. */
static void test_version4(void) {
    char file[700];
    path_of(file, sizeof file, "v4.kv");
    unlink(file);
    float *la = malloc((size_t)info.n_vocab * sizeof(float)), *lb = malloc((size_t)info.n_vocab * sizeof(float));
    subq_context *mem = must_open(NULL, SUBQ_SELECT_EXACT, search), *c = must_open(file, SUBQ_SELECT_EXACT, search);
    CHECK(run(mem, 0, NA, la) && run(c, 0, NA, lb), "decoding");
    subq_context_free(c);
    FILE *fp = fopen(file, "r+b");
    CHECK(fp != NULL, "reopening %s", file);
    static unsigned char slot[KV_FILE_HEADER_BYTES];
    const uint32_t version = 4;
    for (long at = 0; fp && at < 2 * KV_FILE_HEADER_BYTES; at += KV_FILE_HEADER_BYTES) {
        int ok = fseek(fp, at, SEEK_SET) == 0 && fread(slot, 1, sizeof slot, fp) == sizeof slot;
        if (ok && memcmp(slot, "SUBQKVF", 8) != 0) continue;
        memcpy(slot + 8, &version, sizeof version);
        kv_file_seal_header(slot); /* version 4's checksum place */
        ok = ok && fseek(fp, at, SEEK_SET) == 0 && fwrite(slot, 1, sizeof slot, fp) == sizeof slot;
        CHECK(ok, "rewriting header slot at %ld", at);
    }
    if (fp) fclose(fp);
    subq_error err;
    c = must_open(file, SUBQ_SELECT_EXACT, search);
    CHECK(subq_context_resume(c, &err) == SUBQ_OK && subq_context_n_past(c) == NA, "a version 4 file resumes: %s",
          err.msg);
    CHECK(run(mem, NA, NA + NC, la) && run(c, NA, NA + NC, lb) && same(la, lb),
          "a version 4 file continues otherwise than memory");
    subq_context_free(c);
    subq_kv_file_info ki;
    CHECK(subq_kv_file_inspect(file, 1, &ki, &err) == SUBQ_OK && ki.n_committed == NA + NC,
          "after a commit it verifies as version 5: %s", err.msg);
    subq_context_free(mem);
    free(la);
    free(lb);
    unlink(file);
}

/* A file of an older layout (version 1: head-major; 2: a layer's keys, then
 * its values) is refused, naming the version: its rows would otherwise be
 * read misplaced. Both header slots are rewritten as that version (it
 * follows the 8-byte magic), each with a valid checksum. */
static void test_old_layout(uint32_t version) {
    char file[700];
    path_of(file, sizeof file, "old.kv");
    unlink(file);
    subq_context *c = must_open(file, -1, NULL);
    float *lg = malloc((size_t)info.n_vocab * sizeof(float));
    CHECK(run(c, 0, 8, lg), "decoding into the file");
    subq_context_free(c);
    free(lg);
    FILE *fp = fopen(file, "r+b");
    CHECK(fp != NULL, "reopening %s", file);
    if (!fp) return;
    static unsigned char slot[KV_FILE_HEADER_BYTES];
    for (long at = 0; at < 2 * KV_FILE_HEADER_BYTES; at += KV_FILE_HEADER_BYTES) {
        int ok = fseek(fp, at, SEEK_SET) == 0 && fread(slot, 1, sizeof slot, fp) == sizeof slot;
        if (ok && memcmp(slot, "SUBQKVF", 8) != 0) continue; /* a slot never written */
        memcpy(slot + 8, &version, sizeof version);
        kv_file_seal_header(slot);
        ok = ok && fseek(fp, at, SEEK_SET) == 0 && fwrite(slot, 1, sizeof slot, fp) == sizeof slot;
        CHECK(ok, "rewriting header slot at %ld", at);
    }
    fclose(fp);
    subq_status st;
    subq_error err;
    c = open_ctx(file, -1, NULL, SUBQ_KV_F16, N_CTX, &st, &err);
    char want[32];
    snprintf(want, sizeof want, "version %u", version);
    CHECK(!c && st == SUBQ_ERR_UNSUPPORTED && strstr(err.msg, want), "a %s file: %d %s", want, st,
          c ? "(opened)" : err.msg);
    subq_context_free(c);
    unlink(file);
}

static void test_refusals(void) {
    char file[700], tmp[4000];
    path_of(file, sizeof file, "sparse.kv"); /* from the test above: exact over `search` */
    subq_error err;
    subq_status st;
    subq_context *c = open_ctx(file, -1, NULL, SUBQ_KV_F32, N_CTX, &st, &err);
    CHECK(!c && st == SUBQ_ERR_MISMATCH && strstr(err.msg, "f16"), "another KV type: %d %s", st, err.msg);
    c = open_ctx(file, -1, NULL, SUBQ_KV_F16, N_CTX * 2, &st, &err);
    CHECK(!c && st == SUBQ_ERR_MISMATCH && strstr(err.msg, "-c 512"), "another context size: %d %s", st, err.msg);
    c = open_ctx(file, SUBQ_SELECT_EXACT, other_search, SUBQ_KV_F16, N_CTX, &st, &err);
    CHECK(!c && st == SUBQ_ERR_MISMATCH && strstr(err.msg, "search keys"), "other projections: %d %s", st, err.msg);
    /* under full attention the context may not write over the sparse tokens */
    c = open_ctx(file, -1, NULL, SUBQ_KV_F16, 0, &st, &err);
    CHECK(c && subq_context_n_ctx(c) == N_CTX, "reopened with the file's own size: %s", err.msg);
    int32_t t = token(0);
    CHECK(c && subq_decode(c, &t, 1, NULL, 0, &err) == SUBQ_ERR_MISMATCH, "full attention over sparse tokens");
    CHECK(c && subq_context_resume(c, &err) == SUBQ_ERR_MISMATCH, "full attention resumes sparse tokens");
    subq_context_free(c);
    /* another model: a synthesised one of another shape */
    char other[700];
    path_of(other, sizeof other, "other.gguf");
    subq_model *m2 = NULL;
    if (subq_synth_model("tiny-qwen2", "f32", 1, other, &err) || subq_model_load(other, &m2, &err)) {
        CHECK(0, "synth: %s", err.msg);
    } else {
        subq_context_params p = subq_context_default_params();
        p.kv_file = file;
        p.kv_type = SUBQ_KV_F16;
        subq_context *c2 = NULL;
        st = subq_context_new(m2, &p, &c2, &err);
        CHECK(st == SUBQ_ERR_MISMATCH && strstr(err.msg, "another model"), "another model: %d %s", st, err.msg);
        subq_context_free(c2);
        subq_model_free(m2);
    }
    unlink(other);
    /* damaged: both header slots with a flipped byte; then truncated */
    snprintf(tmp, sizeof tmp, "cp %s %s.bad && printf '\\x01' | dd of=%s.bad bs=1 seek=100 conv=notrunc 2>/dev/null && "
             "printf '\\x01' | dd of=%s.bad bs=1 seek=4196 conv=notrunc 2>/dev/null", file, file, file, file);
    CHECK(system(tmp) == 0, "damaging a copy");
    snprintf(tmp, sizeof tmp, "%s.bad", file);
    c = open_ctx(tmp, -1, NULL, SUBQ_KV_F16, N_CTX, &st, &err);
    CHECK(!c && st == SUBQ_ERR_FORMAT && strstr(err.msg, "checksum"), "damaged header: %d %s", st, err.msg);
    snprintf(tmp, sizeof tmp, "cp %s %s.short && truncate -s 100000 %s.short", file, file, file);
    CHECK(system(tmp) == 0, "truncating a copy");
    snprintf(tmp, sizeof tmp, "%s.short", file);
    c = open_ctx(tmp, -1, NULL, SUBQ_KV_F16, N_CTX, &st, &err);
    CHECK(!c && st == SUBQ_ERR_FORMAT && strstr(err.msg, "truncated"), "truncated file: %d %s", st, err.msg);
    snprintf(tmp, sizeof tmp, "%s.bad", file);
    unlink(tmp);
    snprintf(tmp, sizeof tmp, "%s.short", file);
    unlink(tmp);
    /* a reset drops the tokens, in the file too */
    c = must_open(file, SUBQ_SELECT_EXACT, search);
    subq_context_reset(c);
    subq_context_free(c);
    c = must_open(file, SUBQ_SELECT_EXACT, search);
    CHECK(subq_context_resume(c, &err) == SUBQ_OK && subq_context_n_past(c) == 0, "after a reset: %d tokens",
          subq_context_n_past(c));
    subq_context_free(c);
}

/* The file's committed tokens resume and continue as the in-memory
 * reference does from the same prefix (A as run() splits it, then one
 * token at a time, which are the child's steps); returns the count. */
static int check_resumes_as_memory(const char *file, const char *when) {
    subq_error err;
    subq_context *c = must_open(file, SUBQ_SELECT_EXACT, search);
    CHECK(subq_context_resume(c, &err) == SUBQ_OK, "resume after %s: %s", when, err.msg);
    const int n = subq_context_n_past(c);
    CHECK(n >= NA && n < N_CTX, "after %s: %d tokens committed (synced %d)", when, n, NA);
    float *la = malloc((size_t)info.n_vocab * sizeof(float)), *lb = malloc((size_t)info.n_vocab * sizeof(float));
    subq_context *mem = must_open(NULL, SUBQ_SELECT_EXACT, search);
    const int end = n + 8 < N_CTX ? n + 8 : N_CTX;
    int ok = run(mem, 0, NA, la);
    for (int i = NA; ok && i < n; i++) {
        int32_t t = token(i);
        ok = subq_decode(mem, &t, 1, la, 0, &err) == SUBQ_OK;
    }
    CHECK(ok && run(mem, n, end, la) && run(c, n, end, lb) && same(la, lb),
          "continuing after %s (%d tokens) differs from the reference", when, n);
    subq_context_free(c);
    subq_context_free(mem);
    free(la);
    free(lb);
    return n;
}

/* The child's work: A, committed, then the same tokens one at a time up to
 * n_ctx - 1, committing every 10, truncating back to A each round; with
 * once, it stops after the first round's last commit (n_ctx - 1 tokens). */
static void decode_rounds(const char *file, int write_fd, int once) {
    subq_context *c = must_open(file, SUBQ_SELECT_EXACT, search);
    float *lg = malloc((size_t)info.n_vocab * sizeof(float));
    subq_error err;
    run(c, 0, NA, lg);
    subq_context_sync(c, &err);
    if (write_fd >= 0 && write(write_fd, "x", 1) != 1) _exit(3);
    for (;;) {
        for (int i = NA; i < N_CTX - 1; i++) {
            int32_t t = token(i);
            subq_decode(c, &t, 1, lg, 0, &err);
            if (i % 10 == 0) subq_context_sync(c, &err);
        }
        if (once) raise(SIGKILL);
        subq_context_truncate(c, NA, &err);
    }
}

/* See the top: killed while decoding, the file resumes what it counts. */
static void test_kill(void) {
    char file[700];
    path_of(file, sizeof file, "killed.kv");
    unlink(file);
    int pipefd[2];
    CHECK(pipe(pipefd) == 0, "pipe");
    pid_t pid = fork();
    if (pid == 0) {
        close(pipefd[0]);
        decode_rounds(file, pipefd[1], 0);
    }
    close(pipefd[1]);
    char x;
    CHECK(read(pipefd[0], &x, 1) == 1, "the child synced");
    usleep(1000 * (50 + rand() % 200));
    kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
    close(pipefd[0]);
    check_resumes_as_memory(file, "a kill at a random moment");
    /* the kill right after the commit of n_ctx - 1 tokens, every time */
    unlink(file);
    pid = fork();
    if (pid == 0) decode_rounds(file, -1, 1);
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status), "the child decoded to n_ctx - 1 and was killed");
    CHECK(check_resumes_as_memory(file, "a kill at n_ctx - 1") == N_CTX - 1, "the file holds n_ctx - 1 tokens");
    subq_error err;
    float *lb = malloc((size_t)info.n_vocab * sizeof(float));
    /* a truncate below the commit, then a kill before the next commit: the header was lowered first */
    pid = fork();
    if (pid == 0) {
        subq_context *cc = must_open(file, SUBQ_SELECT_EXACT, search);
        int32_t t = token(7);
        if (subq_context_resume(cc, &err) || subq_context_truncate(cc, NA / 2, &err) ||
            subq_decode(cc, &t, 1, lb, 0, &err))
            _exit(1);
        raise(SIGKILL);
    }
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status), "the child truncated, decoded and was killed");
    subq_context *c2 = must_open(file, SUBQ_SELECT_EXACT, search);
    CHECK(subq_context_resume(c2, &err) == SUBQ_OK && subq_context_n_past(c2) <= NA / 2 + 1,
          "after a truncate to %d the file counts %d", NA / 2, subq_context_n_past(c2));
    subq_context_free(c2);
    free(lb);
}

/* A long prompt in many batches commits as it goes (at most once a
 * second): at the start of every batch the file holds every earlier batch
 * that was due, which is what a kill there would leave. The capture hook
 * notes the count at each batch's first layer and makes the next commit due
 * at once, as if a second had passed (it once held the first batch only). */
typedef struct commit_probe {
    subq_context *c;
    int seen[64], n;
} commit_probe;

static void note_commits(void *user, int layer, int n, int slot0, const float *h, const float *q, const float *k,
                         const float *v) {
    (void)n, (void)slot0, (void)h, (void)q, (void)k, (void)v;
    commit_probe *p = user;
    if (layer != 0 || p->n >= 64) return;
    p->seen[p->n++] = kv_file_committed(p->c->kv.file);
    make_commit_due(p->c);
}

static void test_long_prompt_commits(void) {
    char file[700];
    path_of(file, sizeof file, "long_prompt.kv");
    unlink(file);
    subq_status st;
    subq_error err;
    subq_context_params p = subq_context_default_params();
    p.n_ctx = N_CTX;
    p.n_threads = 1;
    p.n_batch = 16;
    p.kv_file = file;
    subq_context *c = NULL;
    st = subq_context_new(model, &p, &c, &err);
    CHECK(!st, "open %s: %s", file, err.msg);
    if (st) return;
    commit_probe probe = {.c = c};
    c->capture = note_commits;
    c->capture_user = &probe;
    c->capture_last = -1;
    int32_t buf[N_CTX];
    for (int i = 0; i < 128; i++) buf[i] = token(i);
    CHECK(context_forward(c, buf, 128, NULL, NULL, NULL, 0, &err) == SUBQ_OK, "prompt: %s", err.msg);
    int grows = probe.n == 8;
    for (int b = 0; grows && b < probe.n; b++) grows = probe.seen[b] == 16 * b;
    CHECK(grows, "a prompt of 8 batches of 16: the file held %d %d %d %d %d %d %d %d tokens at their starts, want "
          "0 16 32 ... 112", probe.seen[0], probe.seen[1], probe.seen[2], probe.seen[3], probe.seen[4], probe.seen[5],
          probe.seen[6], probe.seen[7]);
    c->capture = NULL;
    subq_context_free(c);
}

/* Periodic commits flush on the file's syncer thread while decode goes on
 * (kv_file_commit, durable 0). Interleaved with decodes, a second commit
 * and a truncate (each of which waits for the syncer), then a sync that has
 * nothing new to commit: the header on disk counts what the context holds,
 * the file verifies (the logits in the region its header names), and it
 * resumes and continues as the same tokens in memory do. */
static void test_async_commits(void) {
    char file[700];
    path_of(file, sizeof file, "async.kv");
    unlink(file);
    subq_context *c = must_open(file, -1, NULL), *mem = must_open(NULL, -1, NULL);
    float *la = malloc((size_t)info.n_vocab * sizeof(float)), *lb = malloc((size_t)info.n_vocab * sizeof(float));
    subq_error err = {0};
    int ok = 1;
    for (int k = 0; k < 2; k++) { /* the file, then the same steps in memory */
        subq_context *x = k ? mem : c;
        float *lg = k ? la : lb;
        ok = ok && run(x, 0, 40, lg);
        make_commit_due(x);
        ok = ok && run(x, 40, 41, lg); /* commits 41 on the syncer */
        make_commit_due(x);
        ok = ok && run(x, 41, 42, lg); /* the next commit waits for it */
        ok = ok && run(x, 42, 50, lg);
        /* the next forward lowers the header to 30, after the syncer's */
        ok = ok && subq_context_truncate(x, 30, &err) == SUBQ_OK && run(x, 30, 35, lg);
        make_commit_due(x);
        ok = ok && run(x, 35, 36, lg); /* 36 committed on the syncer: the sync has nothing new */
        if (!k)
            CHECK(subq_context_sync(c, &err) == SUBQ_OK && !kv_file_header_moved(c->kv.file),
                  "a sync returned before the syncer's header was on disk: %s", err.msg);
    }
    CHECK(ok && same(la, lb), "decoding with commits on the syncer: %s", err.msg);
    subq_kv_file_info ki;
    subq_status st = subq_kv_file_inspect(file, 1, &ki, &err);
    CHECK(st == SUBQ_OK && ki.n_committed == 36 && ki.has_logits && !ki.header_damaged,
          "after the sync the file counts %d tokens (want 36, with logits): %d %s", ki.n_committed, st, err.msg);
    subq_context_free(c);
    c = must_open(file, -1, NULL);
    CHECK(subq_context_resume(c, &err) == SUBQ_OK && subq_context_n_past(c) == 36, "resume: %s", err.msg);
    const float *resumed = subq_context_last_logits(c);
    CHECK(resumed && same(resumed, la), "the resumed last logits differ from memory's");
    CHECK(run(mem, 36, 44, la) && run(c, 36, 44, lb) && same(la, lb), "continuing the resumed file differs");
    subq_context_free(mem);
    subq_context_free(c);
    free(la);
    free(lb);
    unlink(file);
}

/* Flip one byte of file at `at`. */
static int flip_byte(const char *file, long at) {
    FILE *fp = fopen(file, "r+b");
    int ok = fp && fseek(fp, at, SEEK_SET) == 0;
    int b = ok ? fgetc(fp) : EOF;
    ok = ok && b != EOF && fseek(fp, at, SEEK_SET) == 0 && fputc(b ^ 0x10, fp) != EOF;
    if (fp) ok = (fclose(fp) == 0) && ok;
    return ok;
}

static void test_integrity(void) {
    /* CRC-32C's check value (RFC 3720's polynomial): "123456789" -> e3069283 */
    CHECK(crc32c(0, "123456789", 9) == 0xE3069283u && crc32c(crc32c(0, "1234", 4), "56789", 5) == 0xE3069283u,
          "crc32c check value: %08x", crc32c(0, "123456789", 9));
    char file[700], copy[800], cmd[2000];
    path_of(file, sizeof file, "integrity.kv");
    unlink(file);
    subq_context *c = must_open(file, SUBQ_SELECT_EXACT, search);
    float *lg = malloc((size_t)info.n_vocab * sizeof(float));
    CHECK(run(c, 0, 40, lg), "decoding into the file");
    subq_context_free(c);
    subq_error err;
    subq_kv_file_info ki;
    CHECK(subq_kv_file_inspect(file, 1, &ki, &err) == SUBQ_OK && ki.n_committed == 40 && ki.n_search_layers > 0 &&
          ki.kv_type == SUBQ_KV_F16 && ki.has_logits, "an intact file verifies: %s", err.msg);
    /* a byte of slot 17's rows in layer 1, of its search keys, of the logits:
     * each refused on resume (the file is small: every slot is checked) and by verify */
    kv_file *f = NULL;
    CHECK(kv_file_open_read(file, &f, &err) == SUBQ_OK, "read-only open: %s", err.msg);
    if (!f) return;
    /* file offsets: rows past the two header pages; search regions at the
     * end, one per sparse layer, page-rounded [n_ctx][d] floats each */
    const size_t slot_bytes = 2 * (size_t)info.n_head_kv * kv_file_geom(f)->row_bytes;
    const unsigned char *base = kv_file_keys(f, 0);
    int d = 0;
    kv_file_search_rows(f, 0, &d);
    const long region = ((long)N_CTX * d * 4 + 4095) / 4096 * 4096;
    struct stat sb;
    CHECK(stat(file, &sb) == 0 && d > 0, "stat");
    const long at[3] = {(long)((const unsigned char *)kv_file_keys(f, 1) - base) + 8192 + 17 * (long)slot_bytes + 3,
                        (long)sb.st_size - (long)kv_file_n_search(f) * region + 17L * d * 4 + 5,
                        (long)((const unsigned char *)kv_file_logits(f) - base) + 8192 + 40};
    kv_file_close(f);
    const char *what[3] = {"a KV row", "search keys", "the logits"};
    for (int i = 0; i < 3; i++) {
        snprintf(copy, sizeof copy, "%s.%d", file, i);
        snprintf(cmd, sizeof cmd, "cp %s %s", file, copy);
        CHECK(system(cmd) == 0 && flip_byte(copy, at[i]), "damaging %s", what[i]);
        c = must_open(copy, SUBQ_SELECT_EXACT, search);
        subq_status st = subq_context_resume(c, &err);
        CHECK(st == SUBQ_ERR_FORMAT && strstr(err.msg, i == 2 ? "logits" : "slot 17"), "%s damaged: resume %d %s",
              what[i], st, err.msg);
        CHECK(subq_context_n_past(c) == 0, "a refused resume holds nothing");
        subq_context_free(c);
        st = subq_kv_file_inspect(copy, 1, &ki, &err);
        CHECK(st == SUBQ_ERR_FORMAT, "%s damaged: verify %d %s", what[i], st, err.msg);
        CHECK(subq_kv_file_inspect(copy, 0, &ki, &err) == SUBQ_OK, "the header alone still reads");
        unlink(copy);
    }
    /* a writer that produced a NaN row: its checksum is right, the row is refused */
    c = must_open(file, SUBQ_SELECT_EXACT, search);
    CHECK(subq_context_resume(c, &err) == SUBQ_OK, "resume: %s", err.msg);
    const uint16_t nan16 = 0x7E00;
    void *row = (unsigned char *)kv_file_values(c->kv.file, 3) + 5 * slot_bytes;
    CHECK(kv_file_will_write(c->kv.file, 5, 0, &err) == SUBQ_OK &&
              kv_file_write(c->kv.file, row, &nan16, 2, &err) == SUBQ_OK,
          "writing a NaN: %s", err.msg);
    c->file_dirty = 1;
    subq_context_free(c); /* commits 40 tokens: slot 5 with a NaN value */
    subq_status st = subq_kv_file_inspect(file, 1, &ki, &err);
    CHECK(st == SUBQ_ERR_FORMAT && strstr(err.msg, "slot 5") && strstr(err.msg, "not finite"), "a NaN row: %d %s", st,
          err.msg);
    c = must_open(file, SUBQ_SELECT_EXACT, search);
    st = subq_context_resume(c, &err);
    CHECK(st == SUBQ_ERR_FORMAT && strstr(err.msg, "not finite"), "a NaN row resumed: %d %s", st, err.msg);
    subq_context_free(c);
    free(lg);
    unlink(file);
}

/* A second writer, here or in another process, is refused naming the pid. */
static void test_lock(void) {
    char file[700], pid_text[32];
    path_of(file, sizeof file, "locked.kv");
    unlink(file);
    subq_context *c = must_open(file, -1, NULL);
    subq_status st;
    subq_error err;
    snprintf(pid_text, sizeof pid_text, "process %d", (int)getpid());
    subq_context *c2 = open_ctx(file, -1, NULL, SUBQ_KV_F16, N_CTX, &st, &err);
    CHECK(!c2 && st == SUBQ_ERR_BUSY && strstr(err.msg, pid_text), "a second writer here: %d %s", st, err.msg);
    /* a reader beside the writer reads what it committed, naming it */
    float *lg = malloc((size_t)info.n_vocab * sizeof(float));
    CHECK(run(c, 0, 30, lg) && subq_context_sync(c, &err) == SUBQ_OK, "decoding into the file: %s", err.msg);
    subq_kv_file_info ki;
    st = subq_kv_file_inspect(file, 1, &ki, &err);
    CHECK(st == SUBQ_OK && ki.n_committed == 30 && ki.writer_pid == (long)getpid() && !ki.header_damaged,
          "a reader beside a writer: %d %s, %d tokens, writer %ld", st, err.msg, ki.n_committed, ki.writer_pid);
    free(lg);
    pid_t pid = fork();
    if (pid == 0) {
        subq_context *cc = open_ctx(file, -1, NULL, SUBQ_KV_F16, N_CTX, &st, &err);
        _exit(!cc && st == SUBQ_ERR_BUSY && strstr(err.msg, pid_text) ? 0 : 1);
    }
    int status = 1;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "a second writer in another process is refused");
    subq_context_free(c);
    /* a reader holds no lock: a writer opens the file while it is open */
    kv_file *r = NULL;
    CHECK(kv_file_open_read(file, &r, &err) == SUBQ_OK && kv_file_writer(r) == 0, "a reader alone: %s", err.msg);
    c = open_ctx(file, -1, NULL, SUBQ_KV_F16, N_CTX, &st, &err);
    CHECK(c != NULL, "a writer beside an open reader, once the writer closed: %s", err.msg);
    kv_file_close(r);
    subq_context_free(c);
    unlink(file);
}

/* The sequence number of header slot i of a file. */
static uint64_t slot_seq(const char *file, int i) {
    uint64_t seq = 0;
    FILE *fp = fopen(file, "rb");
    if (fp && fseek(fp, i * 4096L + 16, SEEK_SET) == 0 && fread(&seq, sizeof seq, 1, fp) != 1) seq = 0;
    if (fp) fclose(fp);
    return seq;
}

static int copy_file(const char *from, const char *to) {
    char cmd[2000];
    snprintf(cmd, sizeof cmd, "cp %s %s", from, to);
    return system(cmd) == 0;
}

/* A damaged newest header slot is told apart from an older slot: inspect
 * says what the older one loses, verify fails, a writer refuses the file
 * unless kv_recover (then it resumes the older slot's tokens); a damaged
 * older slot, or one never written, is no loss. */
static void test_header_damage(void) {
    char file[700], copy[800];
    path_of(file, sizeof file, "header.kv");
    unlink(file);
    subq_error err;
    subq_kv_file_info ki;
    subq_context *c = must_open(file, -1, NULL);
    float *lg = malloc((size_t)info.n_vocab * sizeof(float));
    CHECK(run(c, 0, 40, lg) && subq_context_sync(c, &err) == SUBQ_OK, "40 tokens: %s", err.msg);
    subq_context_free(c);
    /* one commit after the creation: the other slot holds the empty header */
    CHECK(subq_kv_file_inspect(file, 1, &ki, &err) == SUBQ_OK && !ki.header_damaged && ki.n_committed == 40,
          "one commit: %s", err.msg);
    c = must_open(file, -1, NULL);
    CHECK(subq_context_resume(c, &err) == SUBQ_OK && run(c, 40, 60, lg) && subq_context_sync(c, &err) == SUBQ_OK,
          "20 more: %s", err.msg);
    subq_context_free(c);
    const int newest = slot_seq(file, 0) > slot_seq(file, 1) ? 0 : 1;
    /* byte 40 (a field), byte 0 (the magic), byte 16 (the sequence number: + 16 here) of the newest slot;
     * the older slot counts the 40, or what a commit during the 20 more counted */
    const long at[3] = {40, 0, 16};
    for (int i = 0; i < 3; i++) {
        snprintf(copy, sizeof copy, "%s.%d", file, i);
        CHECK(copy_file(file, copy) && flip_byte(copy, newest * 4096L + at[i]), "damaging byte %ld", at[i]);
        subq_status st = subq_kv_file_inspect(copy, 0, &ki, &err);
        const int older = ki.n_committed;
        CHECK(st == SUBQ_OK && ki.header_damaged && older >= 40 && older < 60 && ki.n_committed_newest == 60,
              "byte %ld: inspect %d: damaged %d, %d tokens, newest %d", at[i], st, ki.header_damaged, older,
              ki.n_committed_newest);
        char want[96];
        snprintf(want, sizeof want, "older slot counts %d committed tokens, %d fewer", older, 60 - older);
        st = subq_kv_file_inspect(copy, 1, &ki, &err);
        CHECK(st == SUBQ_ERR_FORMAT && strstr(err.msg, want), "byte %ld: verify %d %s", at[i], st, err.msg);
        st = SUBQ_OK;
        c = open_ctx(copy, -1, NULL, SUBQ_KV_F16, N_CTX, &st, &err);
        CHECK(!c && st == SUBQ_ERR_FORMAT && strstr(err.msg, want) && strstr(err.msg, "--kv-recover"),
              "byte %ld: a writer: %d %s", at[i], st, err.msg);
        subq_context_free(c);
        subq_context_params p = subq_context_default_params();
        p.n_ctx = N_CTX, p.n_threads = 1, p.kv_type = SUBQ_KV_F16, p.kv_file = copy, p.kv_recover = 1;
        c = NULL;
        st = subq_context_new(model, &p, &c, &err);
        subq_kv_file_info ci = {0};
        CHECK(st == SUBQ_OK && subq_context_kv_file_info(c, &ci, &err) == SUBQ_OK && ci.header_damaged &&
              ci.n_committed == older && ci.n_committed_newest == 60, "byte %ld: kv_recover opens it: %d %s", at[i],
              st, err.msg);
        CHECK(c && subq_context_resume(c, &err) == SUBQ_OK && subq_context_n_past(c) == older,
              "byte %ld: the older slot's tokens resume: %s", at[i], c ? err.msg : "");
        CHECK(c && run(c, older, older + 5, lg), "byte %ld: and continue", at[i]);
        subq_context_free(c);
        CHECK(subq_kv_file_inspect(copy, 1, &ki, &err) == SUBQ_OK && !ki.header_damaged && ki.n_committed == older + 5,
              "byte %ld: the next commit is whole again: %s", at[i], err.msg);
        unlink(copy);
    }
    /* the older slot damaged: the newest is current, nothing lost */
    snprintf(copy, sizeof copy, "%s.old", file);
    CHECK(copy_file(file, copy) && flip_byte(copy, (1 - newest) * 4096L + 40), "damaging the older slot");
    CHECK(subq_kv_file_inspect(copy, 1, &ki, &err) == SUBQ_OK && !ki.header_damaged && ki.n_committed == 60,
          "a damaged older slot: %s", err.msg);
    c = must_open(copy, -1, NULL);
    CHECK(subq_context_resume(c, &err) == SUBQ_OK && subq_context_n_past(c) == 60, "resumes 60: %s", err.msg);
    subq_context_free(c);
    unlink(copy);
    free(lg);
    unlink(file);
}

/* A file that is not a KV file (text, empty) is said to be one thing to a
 * writer and to a reader, and left as it is. */
static void test_not_kv_file(void) {
    char file[700];
    path_of(file, sizeof file, "text.kv");
    const size_t sizes[3] = {12, 0, 6000};
    for (int i = 0; i < 3; i++) {
        FILE *fp = fopen(file, "wb");
        for (size_t k = 0; fp && k < sizes[i]; k++) fputc("hello world\n"[k % 12], fp);
        if (fp) fclose(fp);
        subq_status st;
        subq_error err, rerr;
        subq_context *c = open_ctx(file, -1, NULL, SUBQ_KV_F16, N_CTX, &st, &err);
        subq_kv_file_info ki;
        subq_status rs = subq_kv_file_inspect(file, 1, &ki, &rerr);
        struct stat sb;
        CHECK(!c && st == SUBQ_ERR_FORMAT && strstr(err.msg, "not a subq KV file") && rs == SUBQ_ERR_FORMAT &&
              strstr(rerr.msg, "not a subq KV file") && stat(file, &sb) == 0 && (size_t)sb.st_size == sizes[i],
              "a text file of %zu bytes: writer %d %s; reader %d %s", sizes[i], st, err.msg, rs, rerr.msg);
        subq_context_free(c);
    }
    unlink(file);
}

int main(void) {
    char path[1024];
    subq_error err;
    if (subq_model_load(test_shared_path("models/stories260K.gguf", path, sizeof path), &model, &err)) {
        fprintf(stderr, "FAIL load: %s\n", err.msg);
        return 1;
    }
    subq_model_get_info(model, &info);
    if (subq_search_random(model, "all", 16, 11, &search, &err) ||
        subq_search_random(model, "all", 16, 12, &other_search, &err)) {
        fprintf(stderr, "FAIL search: %s\n", err.msg);
        return 1;
    }
    const char *tmp = getenv("SUBQ_TMP");
    snprintf(dir, sizeof dir, "%s/kvfile_%d", tmp && *tmp ? tmp : "/tmp", (int)getpid());
    mkdir(dir, 0755);
    srand((unsigned)getpid());
    test_same_logits_and_resume(-1);
    test_same_logits_and_resume(SUBQ_SELECT_EXACT);
    test_layouts();
    test_old_layout(1);
    test_old_layout(2);
    test_old_layout(3);
    test_version4();
    test_mixed_layout();
    test_decode_windows();
    test_refusals();
    test_integrity();
    test_lock();
    test_header_damage();
    test_not_kv_file();
    test_kill();
    test_long_prompt_commits();
    test_async_commits();
    /* a search space whose last dims rotate by position: the file keeps the
     * rotated keys and resumes alike; the same matrices unrotated are
     * another plan for it */
    subq_search *flat = search;
    if (subq_search_random(model, "all", 16, 11, &search, &err) || subq_search_set_rope(search, 8, 100.0f, 1.0f, &err)) {
        fprintf(stderr, "FAIL rotated search: %s\n", err.msg);
        return 1;
    }
    test_same_logits_and_resume(SUBQ_SELECT_EXACT);
    {
        char file[700];
        path_of(file, sizeof file, "sparse.kv");
        subq_status st;
        subq_context *c = open_ctx(file, SUBQ_SELECT_EXACT, flat, SUBQ_KV_F16, N_CTX, &st, &err);
        CHECK(!c && st == SUBQ_ERR_MISMATCH, "a file of rotated search keys must refuse the unrotated space: %d %s",
              (int)st, err.msg);
        subq_context_free(c);
    }
    subq_search_free(search);
    search = flat;
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    subq_search_free(search);
    subq_search_free(other_search);
    subq_model_free(model);
    return test_summary();
}
