/* Sliding-window layers in rings (window + batch rows), through the public
 * API on synth's tiny-gemma3 (five of six layers slide over 8 keys):
 *   - the reference is the same model with swa_full (every slot kept: the
 *     cache checked against numpy and llama.cpp, check_logits and
 *     check_llamacpp): logits equal bit for bit, in batches and one by one,
 *     past several wraps;
 *   - memory: subq_kv_cache_bytes and the context's own count equal the
 *     rows a ring and a whole layer hold, counted here;
 *   - truncate: below subq_context_min_keep (the first slot whose window a
 *     ring lost) SUBQ_ERR_RANGE and nothing lost; at it, the logits of a
 *     context that decoded the kept tokens in the same steps; to 0, a fresh
 *     start; subq_generate reuses a prefix only where the ring still holds it;
 *   - session files hold a ring's rows only, and load into ring and
 *     swa_full contexts alike, which then decode as the saved one; copies
 *     between the two kinds too;
 *   - a synthetic fill of a ring context decodes;
 *   - a KV file, whose decode rows wait in a stage, decodes as swa_full
 *     memory bit for bit past a commit and a truncate. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "subq_lab.h"
#include "test_util.h"

enum { WINDOW = 8, BATCH = 4, N_CTX = 128, N_A = 60, N_C = 10 };

static subq_model *model;
static subq_model_info info;

static int32_t token(int i) { return (int32_t)(1 + (i * 7919 + 13) % (info.n_vocab - 1)); }

/* A context of N_CTX slots in batches of BATCH, f16 KV, one thread: rings
 * unless swa_full, every slot kept in a KV file when file is given. */
static subq_context *new_ctx_on(int swa_full, const char *file) {
    subq_context_params p = subq_context_default_params();
    p.n_ctx = N_CTX;
    p.n_threads = 1;
    p.n_batch = BATCH;
    p.kv_type = SUBQ_KV_F16;
    p.swa_full = swa_full;
    p.kv_file = file;
    subq_context *c = NULL;
    subq_error err;
    if (subq_context_new(model, &p, &c, &err)) {
        fprintf(stderr, "FAIL context: %s\n", err.msg);
        exit(1);
    }
    return c;
}

static subq_context *new_ctx(int swa_full) { return new_ctx_on(swa_full, NULL); }

/* tokens [from, to) in one subq_decode (cut into batches of BATCH) or one
 * by one; logits of the last into lg */
static int run(subq_context *c, int from, int to, int batch, float *lg) {
    int32_t buf[N_CTX];
    subq_error err;
    for (int i = from; i < to; i++) buf[i - from] = token(i);
    if (batch) return subq_decode(c, buf, to - from, lg, 0, &err) == SUBQ_OK;
    for (int i = from; i < to; i++)
        if (subq_decode(c, &buf[i - from], 1, lg, 0, &err)) return 0;
    return 1;
}

static int same(const float *a, const float *b) { return memcmp(a, b, (size_t)info.n_vocab * sizeof(float)) == 0; }

/* layers that slide: all but the "global" ones */
static int n_sliding(void) {
    unsigned char mask[64] = {0};
    subq_error err;
    if (info.n_layer > 64 || subq_model_parse_layers(model, "global", mask, &err)) return -1;
    int n = info.n_layer;
    for (int l = 0; l < info.n_layer; l++) n -= mask[l];
    return n;
}

static void test_bytes(void) {
    subq_context_params p = subq_context_default_params();
    p.n_ctx = N_CTX;
    p.n_batch = BATCH;
    p.kv_type = SUBQ_KV_F16;
    const uint64_t row = 2 * (uint64_t)info.head_dim, meta = N_CTX * 8, kinds = 2 * (uint64_t)info.n_head_kv;
    const int slide = n_sliding();
    CHECK(slide == 5, "tiny-gemma3 slides in 5 of its layers (%d)", slide);
    const uint64_t ring = subq_kv_cache_bytes(model, &p);
    p.swa_full = 1;
    const uint64_t full = subq_kv_cache_bytes(model, &p);
    CHECK(full == kinds * info.n_layer * N_CTX * row + meta, "swa_full: %llu bytes", (unsigned long long)full);
    CHECK(ring == kinds * ((uint64_t)slide * (WINDOW + BATCH) + (uint64_t)(info.n_layer - slide) * N_CTX) * row + meta,
          "rings: %llu bytes", (unsigned long long)ring);
    subq_context *c = new_ctx(0);
    subq_context_stats st;
    subq_context_get_stats(c, &st);
    CHECK(st.kv_bytes == ring, "the context holds %llu bytes, %llu predicted", (unsigned long long)st.kv_bytes,
          (unsigned long long)ring);
    subq_context_free(c);
}

/* ring and swa_full contexts decode alike, in batches and one by one */
static void test_equal(void) {
    float *a = malloc((size_t)info.n_vocab * sizeof(float)), *b = malloc((size_t)info.n_vocab * sizeof(float));
    subq_context *ring = new_ctx(0), *full = new_ctx(1);
    int ok = 1;
    for (int at = 0; at < N_A && ok; at += 7) { /* 7 tokens: a batch of 4, then 3 */
        const int to = at + 7 < N_A ? at + 7 : N_A;
        ok = run(ring, at, to, 1, a) && run(full, at, to, 1, b) && same(a, b);
    }
    CHECK(ok, "ring and swa_full logits equal over %d tokens in batches", N_A);
    for (int i = N_A; i < N_A + N_C && ok; i++) ok = run(ring, i, i + 1, 0, a) && run(full, i, i + 1, 0, b) && same(a, b);
    CHECK(ok, "ring and swa_full logits equal one by one");
    CHECK(subq_context_min_keep(full) == 0, "swa_full keeps every token (min keep %d)", subq_context_min_keep(full));
    subq_context_free(ring);
    subq_context_free(full);
    free(a);
    free(b);
}

static void test_truncate(void) {
    float *a = malloc((size_t)info.n_vocab * sizeof(float)), *b = malloc((size_t)info.n_vocab * sizeof(float));
    subq_error err;
    subq_context *c = new_ctx(0);
    CHECK(run(c, 0, N_A, 1, a), "prefill");
    /* batches of 4: slot 59 overwrote slot 59 - 12 = 47, so 48 on are held;
     * the query at slot n reads n - 7 .. n */
    const int min_keep = subq_context_min_keep(c);
    CHECK(min_keep == (N_A - (WINDOW + BATCH)) + WINDOW - 1, "min keep %d", min_keep);
    CHECK(subq_context_truncate(c, min_keep - 1, &err) == SUBQ_ERR_RANGE && subq_context_n_past(c) == N_A,
          "truncate below min keep is refused and loses nothing");
    CHECK(strstr(err.msg, "swa_full") != NULL, "the refusal names the way out: %s", err.msg);
    CHECK(subq_context_truncate(c, min_keep, &err) == SUBQ_OK, "truncate to min keep: %s", err.msg);
    /* the reference: a swa_full context through the same steps (it holds
     * every slot, so its truncation loses nothing) */
    subq_context *ref = new_ctx(1);
    CHECK(run(ref, 0, N_A, 1, b) && subq_context_truncate(ref, min_keep, &err) == SUBQ_OK, "reference prefix");
    int ok = 1;
    for (int i = min_keep; i < min_keep + N_C && ok; i++) ok = run(c, i, i + 1, 0, a) && run(ref, i, i + 1, 0, b) && same(a, b);
    CHECK(ok, "after truncating to %d, logits equal those of a context that kept every slot", min_keep);
    CHECK(subq_context_truncate(c, 0, &err) == SUBQ_OK && subq_context_min_keep(c) == 0, "truncate to 0");
    subq_context_reset(ref);
    ok = run(c, 0, 20, 1, a) && run(ref, 0, 20, 1, b) && same(a, b);
    CHECK(ok, "after truncating to 0, logits equal a fresh context's");
    subq_context_free(ref);

    /* subq_generate: a prompt sharing the first 30 tokens with 60 cached
     * ones cannot reuse them (the rings moved on: min keep 55) and starts over */
    subq_context_reset(c);
    CHECK(run(c, 0, N_A, 1, a), "prefill");
    int32_t prompt[40];
    for (int i = 0; i < 40; i++) prompt[i] = i < 30 ? token(i) : token(1000 + i);
    subq_generate_params gp = subq_generate_default_params();
    gp.n_predict = 0;
    subq_generate_result res;
    CHECK(subq_generate(c, prompt, 40, &gp, &res, &err) == SUBQ_OK && res.n_reused == 0,
          "generate past the rings starts over (reused %d): %s", res.n_reused, err.msg);
    /* the cache now holds that prompt (40 tokens, held from slot 28): one
     * sharing its first 39 reuses them */
    prompt[39] = token(2000);
    CHECK(subq_generate(c, prompt, 40, &gp, &res, &err) == SUBQ_OK && res.n_reused == 39,
          "generate of a prompt sharing 39 tokens reuses them (reused %d): %s", res.n_reused, err.msg);
    subq_context_free(c);
    free(a);
    free(b);
}

static long file_size(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 ? (long)sb.st_size : -1;
}

static void test_session_and_copy(const char *dir) {
    float *a = malloc((size_t)info.n_vocab * sizeof(float)), *b = malloc((size_t)info.n_vocab * sizeof(float));
    char ring_path[600], full_path[600];
    snprintf(ring_path, sizeof ring_path, "%s/test_kv_ring_%d_ring.bin", dir, (int)getpid());
    snprintf(full_path, sizeof full_path, "%s/test_kv_ring_%d_full.bin", dir, (int)getpid());
    subq_error err;
    subq_context *ring = new_ctx(0), *full = new_ctx(1);
    CHECK(run(ring, 0, N_A, 1, a) && run(full, 0, N_A, 1, a), "prefill");
    CHECK(subq_context_save(ring, ring_path, &err) == SUBQ_OK, "save ring: %s", err.msg);
    CHECK(subq_context_save(full, full_path, &err) == SUBQ_OK, "save swa_full: %s", err.msg);
    /* 5 sliding layers of 12 rows instead of 60, f16 rows of 64 values, K and V */
    const long saved = file_size(full_path) - file_size(ring_path);
    CHECK(saved == 5L * 2 * info.n_head_kv * (N_A - (WINDOW + BATCH)) * 2 * info.head_dim,
          "the ring's session file is smaller by the rows it does not hold (%ld bytes)", saved);
    /* the continuation of the saved context is the reference */
    float *want = malloc((size_t)N_C * info.n_vocab * sizeof(float));
    for (int i = 0; i < N_C; i++) run(ring, N_A + i, N_A + i + 1, 0, want + (size_t)i * info.n_vocab);
    const char *paths[2] = {ring_path, full_path};
    for (int from = 0; from < 2; from++)
        for (int into = 0; into < 2; into++) {
            subq_context *c = new_ctx(into);
            CHECK(subq_context_load(c, paths[from], &err) == SUBQ_OK && subq_context_n_past(c) == N_A,
                  "load %s into %s: %s", from ? "swa_full" : "ring", into ? "swa_full" : "ring", err.msg);
            int ok = 1;
            for (int i = 0; i < N_C && ok; i++) ok = run(c, N_A + i, N_A + i + 1, 0, a) && same(a, want + (size_t)i * info.n_vocab);
            CHECK(ok, "a %s session loaded into a %s context decodes as the saved one", from ? "swa_full" : "ring",
                  into ? "swa_full" : "ring");
            /* a ring's file lost the early rows: cutting back below them is refused in either context */
            if (!from) CHECK(subq_context_min_keep(c) > 0, "min keep after loading a ring's file");
            subq_context_free(c);
        }
    /* copies: the source truncated back to N_A, then copied both ways */
    subq_context_free(ring);
    ring = new_ctx(0);
    CHECK(run(ring, 0, N_A, 1, a), "prefill");
    for (int into = 0; into < 2; into++) {
        subq_context *c = new_ctx(into);
        CHECK(subq_context_copy(c, into ? ring : full, &err) == SUBQ_OK, "copy: %s", err.msg);
        int ok = 1;
        for (int i = 0; i < N_C && ok; i++) ok = run(c, N_A + i, N_A + i + 1, 0, a) && same(a, want + (size_t)i * info.n_vocab);
        CHECK(ok, "a copy %s decodes as the source", into ? "ring -> swa_full" : "swa_full -> ring");
        subq_context_free(c);
    }
    unlink(ring_path);
    unlink(full_path);
    free(want);
    subq_context_free(ring);
    subq_context_free(full);
    free(a);
    free(b);
}

static void test_fill(void) {
    subq_context *c = new_ctx(0);
    subq_error err;
    float *lg = malloc((size_t)info.n_vocab * sizeof(float));
    CHECK(subq_context_fill_synthetic(c, 100, 3, &err) == SUBQ_OK, "fill: %s", err.msg);
    int32_t tok = token(1);
    CHECK(subq_decode(c, &tok, 1, lg, 0, &err) == SUBQ_OK, "decode after the fill: %s", err.msg);
    int finite = 1;
    for (int i = 0; i < info.n_vocab; i++) finite &= isfinite(lg[i]) != 0;
    CHECK(finite, "finite logits after a fill");
    free(lg);
    subq_context_free(c);
}

/* With a KV file every slot is kept, rows head-major, and a decode's rows
 * wait in a stage (kv_cache_store) that starts at a multiple of 64 slots:
 * one token at a time past slot 64, with a commit midway (the stage
 * written, another started from the file's rows) and a truncate, the file
 * decodes as swa_full memory bit for bit; its head_dim of 64 runs the
 * widest kernels the machine has over the stage's run. */
static void test_file_stage(const char *dir) {
    char file[600];
    snprintf(file, sizeof file, "%s/test_kv_ring_%d.kv", dir, (int)getpid());
    unlink(file);
    subq_context *fc = new_ctx_on(0, file), *full = new_ctx(1);
    subq_error err = {0};
    CHECK(fc && full, "file context and swa_full context open");
    float *a = malloc((size_t)info.n_vocab * sizeof(float)), *b = malloc((size_t)info.n_vocab * sizeof(float));
    int ok = fc && run(fc, 0, 40, 1, a) && run(full, 0, 40, 1, b) && same(a, b);
    for (int i = 40; ok && i < 100; i++) {
        if (i == 90) ok = subq_context_sync(fc, &err) == SUBQ_OK;
        ok = ok && run(fc, i, i + 1, 0, a) && run(full, i, i + 1, 0, b) && same(a, b);
    }
    CHECK(ok, "file and swa_full logits equal one by one past a commit (%s)", err.msg);
    ok = ok && subq_context_truncate(fc, 70, &err) == SUBQ_OK && subq_context_truncate(full, 70, &err) == SUBQ_OK;
    for (int i = 70; ok && i < 110; i++) ok = run(fc, i, i + 1, 0, a) && run(full, i, i + 1, 0, b) && same(a, b);
    CHECK(ok, "after a truncate to 70, file and swa_full logits equal (%s)", err.msg);
    subq_context_free(fc);
    subq_context_free(full);
    free(a);
    free(b);
    unlink(file);
}

int main(void) {
    const char *tmp = getenv("SUBQ_TMP");
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s", tmp && *tmp ? tmp : "/tmp");
    snprintf(path, sizeof path, "%s/test_kv_ring_%d.gguf", dir, (int)getpid());
    subq_error err;
    if (subq_synth_model("tiny-gemma3", "f32", 1, path, &err) || subq_model_load(path, &model, &err)) {
        fprintf(stderr, "FAIL: %s\n", err.msg);
        return 1;
    }
    unlink(path);
    subq_model_get_info(model, &info);
    test_bytes();
    test_equal();
    test_truncate();
    test_session_and_copy(dir);
    test_fill();
    test_file_stage(dir);
    subq_model_free(model);
    return test_summary();
}
