/* Prompt caches through the public API, on stories260K with every selector:
 *   - truncate: decode A + B, truncate to A + B[:k], decode C; the logits
 *     must equal those of a fresh context that decoded A + B[:k] + C in the
 *     same steps (bit for bit: the kept state is the state those steps
 *     leave; faiss rebuilds its graph in one batch, so it is held to a
 *     tolerance instead);
 *   - session files: save after A + B, load into a fresh context of the same
 *     plan, then both decode C with equal logits; the loaded tokens and last
 *     logits are the saved ones; HNSW's graphs are read from the file
 *     (index_tokens_linked), not rebuilt;
 *   - refusals: another plan, KV type or model is SUBQ_ERR_MISMATCH, too
 *     small a context SUBQ_ERR_RANGE, a damaged file a format error; the
 *     context is left empty;
 *   - copies: A + B prefilled densely under the exact plan, copied into a
 *     context of every selector's plan, then C decoded: logits equal those
 *     of a context that prefilled A + B itself under that plan (HNSW and
 *     faiss graphs are built in another order: a tolerance); from an HNSW
 *     context into one of the same plan the graphs are linked as they are
 *     and the logits equal bit for bit; a source without the projections is
 *     SUBQ_ERR_MISMATCH and leaves dst empty;
 *   - special tokens: "<s>" in text becomes BOS with subq_tokenize_special
 *     and not with subq_tokenize;
 *   - Phi-3's LongRoPE: sessions and copies only between contexts that take
 *     the same factors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "subq_lab.h"
#include "test_util.h"

enum { NA = 96, NB = 24, KB = 7, NC = 12 };

static subq_model *model;
static subq_model_info info;
static subq_search *search;
static char tmpdir[512];
static subq_far_pos far_pos; /* the plans' far-key scheme (new_ctx), from distance 40 */

static int32_t token(int i) { return (int32_t)(1 + (i * 7919 + 13) % (info.n_vocab - 1)); }

static subq_context *new_ctx(int kind, int top_k, subq_kv_type kv, int n_ctx) {
    subq_context_params p = subq_context_default_params();
    p.n_ctx = n_ctx;
    p.n_threads = 1;
    p.kv_type = kv;
    subq_context *c = NULL;
    subq_error err;
    if (subq_context_new(model, &p, &c, &err)) {
        fprintf(stderr, "FAIL context: %s\n", err.msg);
        exit(1);
    }
    if (kind >= 0) {
        subq_attn_plan plan = subq_attn_plan_default();
        plan.selector = (subq_selector_kind)kind;
        plan.layers = "all";
        plan.top_k = top_k;
        plan.n_sink = 2;
        plan.n_tail = 4;
        plan.hnsw_m = 8;
        plan.far_pos = far_pos;
        plan.far_from = far_pos ? 40 : 0;
        if (subq_context_set_plan(c, &plan, search, NULL, &err)) {
            fprintf(stderr, "FAIL plan %s: %s\n", subq_selector_name(plan.selector), err.msg);
            exit(1);
        }
    }
    return c;
}

/* A synthetic fill longer than its random block (4096 slots, repeated)
 * leaves a context that decodes; a KV cache of 64 MiB or more reads at a
 * positive rate, a smaller one is not timed. */
static void test_synthetic_fill(void) {
    subq_context *c = new_ctx(SUBQ_SELECT_EXACT, 8, SUBQ_KV_F16, 5000);
    subq_error err;
    CHECK(subq_context_kv_read_gbs(c, 1) == 0.0, "an empty cache reads nothing");
    CHECK(subq_context_fill_synthetic(c, 4500, 3, &err) == SUBQ_OK, "fill 4500 slots");
    CHECK(subq_context_kv_read_gbs(c, 1) == 0.0, "a cache under 64 MiB is not timed");
    subq_context *big = new_ctx(-1, 8, SUBQ_KV_F32, 60000); /* 60000 x 1280 bytes: 73 MiB */
    CHECK(subq_context_fill_synthetic(big, 60000, 3, &err) == SUBQ_OK, "fill 60000 slots");
    CHECK(subq_context_kv_read_gbs(big, 1) > 0.0, "the filled 73 MiB cache reads at a positive rate");
    subq_context_free(big);
    CHECK(subq_context_fill_synthetic(c, 10, 3, &err) == SUBQ_ERR_ARG, "a second fill is refused");
    float *logits = malloc((size_t)info.n_vocab * sizeof(float));
    int32_t tok = token(1);
    CHECK(logits && subq_decode(c, &tok, 1, logits, 0, &err) == SUBQ_OK, "decode after the fill");
    int finite = 1;
    for (int i = 0; logits && i < info.n_vocab; i++) finite &= isfinite(logits[i]) != 0;
    CHECK(finite, "finite logits after the fill");
    free(logits);
    subq_context_free(c);
}

/* Decode tokens [from, to) one at a time (batch: all at once); logits of the last. */
static int run(subq_context *c, int from, int to, int batch, float *logits) {
    subq_error err;
    int32_t buf[NA + NB + NC];
    for (int i = from; i < to; i++) buf[i - from] = token(i);
    if (batch) return subq_decode(c, buf, to - from, logits, 0, &err) == SUBQ_OK;
    for (int i = from; i < to; i++)
        if (subq_decode(c, &buf[i - from], 1, logits, 0, &err)) return 0;
    return 1;
}

static double max_diff(const float *a, const float *b, int n) {
    double m = 0;
    for (int i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

static void test_truncate(int kind) {
    const char *name = kind < 0 ? "full" : subq_selector_name((subq_selector_kind)kind);
    const int nv = info.n_vocab;
    float *la = malloc((size_t)nv * sizeof(float)), *lb = malloc((size_t)nv * sizeof(float));
    subq_error err;
    /* reference: A, B[:KB], C */
    subq_context *ref = new_ctx(kind, 8, SUBQ_KV_F32, 256);
    CHECK(run(ref, 0, NA, 1, la) && run(ref, NA, NA + KB, 0, la), "%s: reference prefix", name);
    /* C is the tokens after B in the sequence, renumbered to follow B[:KB] */
    int32_t cbuf[NC];
    for (int i = 0; i < NC; i++) cbuf[i] = token(NA + NB + i);
    for (int i = 0; i < NC; i++) subq_decode(ref, &cbuf[i], 1, la, 0, &err);
    /* A, B, truncate, C */
    subq_context *c = new_ctx(kind, 8, SUBQ_KV_F32, 256);
    CHECK(run(c, 0, NA, 1, lb) && run(c, NA, NA + NB, 0, lb), "%s: prefix", name);
    CHECK(subq_context_truncate(c, NA + NB + 1, &err) == SUBQ_ERR_RANGE, "%s: truncate beyond n_past", name);
    CHECK(subq_context_truncate(c, NA + KB, &err) == SUBQ_OK, "%s: truncate: %s", name, err.msg);
    CHECK(subq_context_n_past(c) == NA + KB, "%s: n_past %d after truncate", name, subq_context_n_past(c));
    CHECK(subq_context_last_logits(c) == NULL, "%s: logits of a truncated context are unknown", name);
    for (int i = 0; i < NC; i++) subq_decode(c, &cbuf[i], 1, lb, 0, &err);
    double d = max_diff(la, lb, nv);
    if (kind == SUBQ_SELECT_FAISS) CHECK(d < 1e-2, "%s: logits after truncate differ by %g", name, d);
    else CHECK(d == 0.0, "%s: logits after truncate differ by %g (want identical)", name, d);
    const int32_t *tk = subq_context_tokens(c);
    CHECK(tk[NA + KB - 1] == token(NA + KB - 1) && tk[NA + KB] == cbuf[0], "%s: token record", name);
    subq_context_free(ref);
    subq_context_free(c);
    free(la);
    free(lb);
}

static void test_copy(int kind) {
    const char *name = kind < 0 ? "full" : subq_selector_name((subq_selector_kind)kind);
    const int nv = info.n_vocab;
    float *la = malloc((size_t)nv * sizeof(float)), *lb = malloc((size_t)nv * sizeof(float));
    subq_error err;
    subq_context *ref = new_ctx(kind, 8, SUBQ_KV_F32, 256), *src = new_ctx(SUBQ_SELECT_EXACT, 8, SUBQ_KV_F32, 256);
    subq_context *dst = new_ctx(kind, 8, SUBQ_KV_F32, 256), *bare = new_ctx(-1, 8, SUBQ_KV_F32, 256);
    CHECK(run(ref, 0, NA + NB, 1, la) && run(src, 0, NA + NB, 1, lb), "%s: prefills", name);
    CHECK(subq_context_copy(dst, src, &err) == SUBQ_OK, "%s: copy: %s", name, err.msg);
    CHECK(subq_context_n_past(dst) == NA + NB && subq_context_last_logits(dst) &&
              max_diff(subq_context_last_logits(dst), la, nv) == 0.0,
          "%s: copied tokens and last logits", name);
    run(ref, NA + NB, NA + NB + NC, 0, la);
    run(dst, NA + NB, NA + NB + NC, 0, lb);
    double d = max_diff(la, lb, nv);
    if (kind == SUBQ_SELECT_HNSW || kind == SUBQ_SELECT_FAISS) CHECK(d < 1e-2, "%s: logits after copy differ by %g", name, d);
    else CHECK(d == 0.0, "%s: logits after copy differ by %g (want identical)", name, d);
    if (kind == SUBQ_SELECT_HNSW) { /* from a context of the same plan: its graph linked, not inserted */
        subq_context *same = new_ctx(kind, 8, SUBQ_KV_F32, 256), *to = new_ctx(kind, 8, SUBQ_KV_F32, 256);
        subq_context_stats st;
        CHECK(run(same, 0, NA + NB, 1, lb) && subq_context_copy(to, same, &err) == SUBQ_OK, "%s: copy of the same "
              "plan: %s", name, err.msg);
        subq_context_get_stats(to, &st);
        CHECK(st.index_tokens_linked == NA + NB, "%s: %lld tokens' graphs linked by the copy, want %d", name,
              (long long)st.index_tokens_linked, NA + NB);
        run(to, NA + NB, NA + NB + NC, 0, lb);
        CHECK(max_diff(la, lb, nv) == 0.0, "%s: logits after a copy of the same plan differ by %g", name,
              max_diff(la, lb, nv));
        subq_context_free(same);
        subq_context_free(to);
    }
    run(bare, 0, NA, 1, la);
    const int needs = kind == SUBQ_SELECT_EXACT || kind == SUBQ_SELECT_HNSW || kind == SUBQ_SELECT_FAISS;
    CHECK(subq_context_copy(dst, bare, &err) == (needs ? SUBQ_ERR_MISMATCH : SUBQ_OK) &&
              subq_context_n_past(dst) == (needs ? 0 : NA),
          "%s: copy from a context without projections", name);
    subq_context_free(ref);
    subq_context_free(src);
    subq_context_free(dst);
    subq_context_free(bare);
    free(la);
    free(lb);
}

static void test_session(int kind, subq_kv_type kvt) {
    const char *name = kind < 0 ? "full" : subq_selector_name((subq_selector_kind)kind);
    const int nv = info.n_vocab;
    float *la = malloc((size_t)nv * sizeof(float)), *lb = malloc((size_t)nv * sizeof(float));
    subq_error err;
    char path[600];
    snprintf(path, sizeof path, "%s/test_session_%d_%d_%d.bin", tmpdir, (int)getpid(), kind + 1, (int)kvt);
    subq_context *a = new_ctx(kind, 8, kvt, 256);
    CHECK(run(a, 0, NA, 1, la) && run(a, NA, NA + NB, 0, la), "%s: prefix", name);
    CHECK(subq_context_save(a, path, &err) == SUBQ_OK, "%s: save: %s", name, err.msg);
    subq_context *b = new_ctx(kind, 8, kvt, 200);
    CHECK(subq_context_load(b, path, &err) == SUBQ_OK, "%s: load: %s", name, err.msg);
    CHECK(subq_context_n_past(b) == NA + NB, "%s: loaded %d tokens", name, subq_context_n_past(b));
    CHECK(memcmp(subq_context_tokens(a), subq_context_tokens(b), (NA + NB) * sizeof(int32_t)) == 0,
          "%s: loaded tokens", name);
    const float *lg = subq_context_last_logits(b);
    CHECK(lg && max_diff(lg, la, nv) == 0.0, "%s: loaded last logits", name);
    subq_context_stats st;
    subq_context_get_stats(b, &st);
    CHECK(st.index_tokens_linked == (kind == SUBQ_SELECT_HNSW ? NA + NB : 0), "%s: %lld tokens' graphs linked from "
          "the file", name, (long long)st.index_tokens_linked);
    for (int i = NA + NB; i < NA + NB + NC; i++) {
        int32_t t = token(i);
        subq_decode(a, &t, 1, la, 0, &err);
        subq_decode(b, &t, 1, lb, 0, &err);
    }
    double d = max_diff(la, lb, nv);
    if (kind == SUBQ_SELECT_FAISS) CHECK(d < 1e-2, "%s: logits after load differ by %g", name, d);
    else CHECK(d == 0.0, "%s: logits after load differ by %g (want identical)", name, d);
    subq_context_free(b);
    /* refusals */
    subq_context *other = new_ctx(kind < 0 ? SUBQ_SELECT_WINDOW : -1, 8, kvt, 256);
    CHECK(subq_context_load(other, path, &err) == SUBQ_ERR_MISMATCH, "%s: another plan: %s", name, err.msg);
    CHECK(subq_context_n_past(other) == 0, "%s: a refused load leaves the context empty", name);
    subq_context_free(other);
    if (kind == SUBQ_SELECT_EXACT) {
        other = new_ctx(kind, 16, SUBQ_KV_F16, 256);
        CHECK(subq_context_load(other, path, &err) == SUBQ_ERR_MISMATCH && strstr(err.msg, "k=16"),
              "another top-k: %s", err.msg);
        subq_context_free(other);
        other = new_ctx(kind, 8, SUBQ_KV_F32, 256);
        CHECK(subq_context_load(other, path, &err) == SUBQ_ERR_MISMATCH, "another KV type: %s", err.msg);
        subq_context_free(other);
        other = new_ctx(kind, 8, SUBQ_KV_F16, 64);
        CHECK(subq_context_load(other, path, &err) == SUBQ_ERR_RANGE, "too small a context: %s", err.msg);
        /* damaged: every prefix of the file fails cleanly */
        FILE *f = fopen(path, "rb");
        fseek(f, 0, SEEK_END);
        long size = ftell(f);
        fseek(f, 0, SEEK_SET);
        char *bytes = malloc((size_t)size);
        CHECK(fread(bytes, 1, (size_t)size, f) == (size_t)size, "read back");
        fclose(f);
        char cut[620];
        snprintf(cut, sizeof cut, "%s.cut", path);
        for (long n = 0; n < size; n += size / 7 + 1) {
            f = fopen(cut, "wb");
            fwrite(bytes, 1, (size_t)n, f);
            fclose(f);
            subq_status s = subq_context_load(other, cut, &err);
            CHECK(s != SUBQ_OK && subq_context_n_past(other) == 0, "%ld-byte prefix: %d", n, (int)s);
        }
        unlink(cut);
        free(bytes);
        subq_context_free(other);
    }
    unlink(path);
    subq_context_free(a);
    free(la);
    free(lb);
}

/* Far keys at trained distances: truncation and sessions keep what a plan
 * of that scheme computes (the prefix reaches past far_from 40), a session
 * refuses a plan of another scheme, and plans a far scheme cannot serve
 * are refused. */
static void test_far(void) {
    far_pos = SUBQ_FAR_WINDOW;
    test_truncate(SUBQ_SELECT_EXACT);
    test_session(SUBQ_SELECT_EXACT, SUBQ_KV_F16);
    char path[600];
    subq_error err;
    float *lg = malloc((size_t)info.n_vocab * sizeof(float));
    snprintf(path, sizeof path, "%.400s/test_session_%d_far.bin", tmpdir, (int)getpid());
    subq_context *a = new_ctx(SUBQ_SELECT_EXACT, 8, SUBQ_KV_F16, 256);
    CHECK(run(a, 0, NA, 1, lg) && subq_context_save(a, path, &err) == SUBQ_OK, "far save: %s", err.msg);
    for (int f = SUBQ_FAR_NONE; f < SUBQ_FAR_COUNT; f++) {
        if (f == SUBQ_FAR_WINDOW) continue;
        far_pos = (subq_far_pos)f;
        subq_context *b = new_ctx(SUBQ_SELECT_EXACT, 8, SUBQ_KV_F16, 256);
        CHECK(subq_context_load(b, path, &err) == SUBQ_ERR_MISMATCH && subq_context_n_past(b) == 0,
              "a session of --far-pos window loaded under %s: %s", subq_far_name((subq_far_pos)f), err.msg);
        subq_context_free(b);
    }
    far_pos = SUBQ_FAR_NONE;
    unlink(path);
    subq_context_free(a);
    /* refused plans, each in one line, the context left as it was */
    struct {
        const char *layers;
        int far_pos, far_from, n_tail;
        const char *want;
    } bad[] = {{"none", SUBQ_FAR_WINDOW, 40, 4, "need a sparse layer"},
               {"all", SUBQ_FAR_WINDOW, info.n_ctx_train, 4, "beyond the model's trained context"},
               {"all", SUBQ_FAR_GROUP, info.n_ctx_train - 1, 4, "smaller --far-from"},
               {"all", SUBQ_FAR_ORDER, 8, 16, "the tail (16 keys) must lie within it"},
               {"all", SUBQ_FAR_COUNT, 40, 4, "unknown far-key scheme"},
               {"all", SUBQ_FAR_WINDOW, -1, 4, "far_from -1"}};
    subq_context *c = new_ctx(-1, 8, SUBQ_KV_F16, 256);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        subq_attn_plan plan = subq_attn_plan_default();
        plan.selector = SUBQ_SELECT_WINDOW;
        plan.layers = bad[i].layers;
        plan.far_pos = (subq_far_pos)bad[i].far_pos;
        plan.far_from = bad[i].far_from;
        plan.n_tail = bad[i].n_tail;
        subq_status s = subq_context_set_plan(c, &plan, NULL, NULL, &err);
        CHECK(s == SUBQ_ERR_ARG && strstr(err.msg, bad[i].want) && !strchr(err.msg, '\n'),
              "plan %zu refused with '%s': %d %s", i, bad[i].want, (int)s, err.msg);
    }
    CHECK(run(c, 0, 8, 1, lg), "a context whose plans were refused still decodes (full attention)");
    subq_context_free(c);
    free(lg);
}

static void test_other_model(void) {
    char path[600], mpath[600];
    snprintf(mpath, sizeof mpath, "%s/test_session_%d_tiny.gguf", tmpdir, (int)getpid());
    snprintf(path, sizeof path, "%s/test_session_%d_full.bin", tmpdir, (int)getpid());
    subq_error err;
    CHECK(subq_synth_model("tiny", "f32", 1, mpath, &err) == SUBQ_OK, "synth: %s", err.msg);
    subq_model *tiny = NULL;
    CHECK(subq_model_load(mpath, &tiny, &err) == SUBQ_OK, "load tiny: %s", err.msg);
    subq_context_params p = subq_context_default_params();
    p.n_ctx = 64;
    subq_context *c = NULL;
    CHECK(tiny && subq_context_new(tiny, &p, &c, &err) == SUBQ_OK, "tiny context");
    CHECK(subq_context_save(c, path, &err) == SUBQ_ERR_ARG, "saving an empty context is refused");
    int32_t t[3] = {1, 2, 3};
    subq_decode(c, t, 3, NULL, 0, &err);
    CHECK(subq_context_save(c, path, &err) == SUBQ_OK, "save tiny: %s", err.msg);
    subq_context *s = new_ctx(-1, 8, SUBQ_KV_F32, 256);
    CHECK(subq_context_load(s, path, &err) == SUBQ_ERR_MISMATCH && strstr(err.msg, "another model"),
          "another model: %s", err.msg);
    subq_context_free(s);
    subq_context_free(c);
    subq_model_free(tiny);
    unlink(path);
    unlink(mpath);
}

/* Phi-3's LongRoPE: a context's size picks the factors its keys carry, so
 * a session or a copy crosses only between contexts on the same side of
 * the original context (tiny-phi3-longrope: 256); the two sides compute
 * different logits. */
static void test_longrope(void) {
    char path[600], mpath[600];
    snprintf(mpath, sizeof mpath, "%s/test_session_%d_longrope.gguf", tmpdir, (int)getpid());
    snprintf(path, sizeof path, "%s/test_session_%d_longrope.bin", tmpdir, (int)getpid());
    subq_error err;
    CHECK(subq_synth_model("tiny-phi3-longrope", "f32", 1, mpath, &err) == SUBQ_OK, "synth: %s", err.msg);
    subq_model *m = NULL;
    CHECK(subq_model_load(mpath, &m, &err) == SUBQ_OK, "load tiny-phi3-longrope: %s", err.msg);
    if (!m) return;
    subq_model_info mi;
    subq_model_get_info(m, &mi);
    const int sizes[4] = {200, 256, 257, 512}; /* short, short, long, long */
    subq_context *c[4] = {NULL, NULL, NULL, NULL};
    float *lg[4];
    int32_t t[12];
    for (int i = 0; i < 12; i++) t[i] = (int32_t)(1 + (i * 37 + 5) % (mi.n_vocab - 1));
    for (int i = 0; i < 4; i++) {
        subq_context_params p = subq_context_default_params();
        p.n_ctx = sizes[i];
        p.n_threads = 1;
        lg[i] = malloc((size_t)mi.n_vocab * sizeof(float));
        CHECK(subq_context_new(m, &p, &c[i], &err) == SUBQ_OK, "context of %d: %s", sizes[i], err.msg);
        CHECK(c[i] && subq_decode(c[i], t, 12, lg[i], 0, &err) == SUBQ_OK, "decode in %d: %s", sizes[i], err.msg);
    }
    CHECK(!memcmp(lg[0], lg[1], (size_t)mi.n_vocab * sizeof(float)) &&
              !memcmp(lg[2], lg[3], (size_t)mi.n_vocab * sizeof(float)),
          "contexts on one side of the original context compute the same logits");
    CHECK(memcmp(lg[1], lg[2], (size_t)mi.n_vocab * sizeof(float)), "256 and 257 tokens: other factors, other logits");
    CHECK(subq_context_save(c[1], path, &err) == SUBQ_OK, "save from 256: %s", err.msg);
    CHECK(subq_context_load(c[0], path, &err) == SUBQ_OK && subq_context_n_past(c[0]) == 12,
          "256 -> 200 (short factors both): %s", err.msg);
    CHECK(subq_context_load(c[2], path, &err) == SUBQ_ERR_MISMATCH && strstr(err.msg, "LongRoPE") &&
              subq_context_n_past(c[2]) == 0,
          "256 -> 257 (short -> long factors) is refused: %s", err.msg);
    CHECK(subq_context_copy(c[3], c[1], &err) == SUBQ_ERR_MISMATCH && strstr(err.msg, "LongRoPE") &&
              subq_context_n_past(c[3]) == 0,
          "copy 256 -> 512 is refused: %s", err.msg);
    CHECK(subq_decode(c[2], t, 12, NULL, 0, &err) == SUBQ_OK && subq_context_copy(c[3], c[2], &err) == SUBQ_OK &&
              subq_context_n_past(c[3]) == 12,
          "copy 257 -> 512 (long factors both): %s", err.msg);
    for (int i = 0; i < 4; i++) {
        subq_context_free(c[i]);
        free(lg[i]);
    }
    subq_model_free(m);
    unlink(path);
    unlink(mpath);
}

/* The model read into memory and the model mapped compute the same logits;
 * an unknown load mode is refused. */
static void test_load_modes(const char *path) {
    subq_error err;
    subq_model *ms[2] = {NULL, NULL};
    float *logits[2] = {malloc((size_t)info.n_vocab * sizeof(float)), malloc((size_t)info.n_vocab * sizeof(float))};
    const subq_load_mode modes[2] = {SUBQ_LOAD_READ, SUBQ_LOAD_MMAP};
    for (int i = 0; i < 2; i++) {
        CHECK(subq_model_load_ex(path, modes[i], &ms[i], &err) == SUBQ_OK, "load mode %d: %s", (int)modes[i], err.msg);
        subq_context_params p = subq_context_default_params();
        p.n_ctx = 64;
        subq_context *c = NULL;
        if (!ms[i] || subq_context_new(ms[i], &p, &c, &err)) continue;
        int32_t t[5] = {1, 403, 200, 31, 9};
        CHECK(subq_decode(c, t, 5, logits[i], 0, &err) == SUBQ_OK, "decode: %s", err.msg);
        subq_context_free(c);
    }
    CHECK(!memcmp(logits[0], logits[1], (size_t)info.n_vocab * sizeof(float)), "read-in and mapped logits are equal");
    subq_model *bad = NULL;
    CHECK(subq_model_load_ex(path, (subq_load_mode)7, &bad, &err) == SUBQ_ERR_ARG && !bad, "bad mode: %s", err.msg);
    for (int i = 0; i < 2; i++) {
        subq_model_free(ms[i]);
        free(logits[i]);
    }
}

static void test_special(void) {
    subq_error err;
    int32_t a[64], b[64];
    size_t na = 0, nb = 0;
    const char *text = "Hi<s>there";
    CHECK(subq_tokenize_special(model, text, strlen(text), 0, a, 64, &na, &err) == SUBQ_OK, "special: %s", err.msg);
    CHECK(subq_tokenize(model, text, strlen(text), 0, b, 64, &nb, &err) == SUBQ_OK, "plain: %s", err.msg);
    int bos_special = 0, bos_plain = 0;
    for (size_t i = 0; i < na; i++) bos_special += a[i] == info.bos_id;
    for (size_t i = 0; i < nb; i++) bos_plain += b[i] == info.bos_id;
    CHECK(bos_special == 1 && bos_plain == 0, "<s> is BOS only with special parsing (%d, %d)", bos_special,
          bos_plain);
    /* the pieces around it are encoded as they are alone (each with the space prefix) */
    int32_t hi[16], there[16];
    size_t nh = 0, nt = 0;
    subq_tokenize(model, "Hi", 2, 0, hi, 16, &nh, &err);
    subq_tokenize(model, "there", 5, 0, there, 16, &nt, &err);
    CHECK(na == nh + 1 + nt && !memcmp(a, hi, nh * 4) && a[nh] == info.bos_id && !memcmp(a + nh + 1, there, nt * 4),
          "split encoding");
    /* a short buffer: SUBQ_ERR_RANGE with the exact count, nothing past it */
    size_t n2 = 0;
    int32_t few[3] = {-7, -7, -7};
    CHECK(subq_tokenize_special(model, text, strlen(text), 1, few, 2, &n2, &err) == SUBQ_ERR_RANGE && n2 == na + 1 &&
              few[2] == -7,
          "count with a short buffer: %zu", n2);
}

int main(void) {
    char path[512];
    subq_error err;
    const char *tmp = getenv("SUBQ_TMP");
    snprintf(tmpdir, sizeof tmpdir, "%s", tmp && *tmp ? tmp : "/tmp");
    if (subq_model_load(test_shared_path("models/stories260K.gguf", path, sizeof path), &model, &err)) {
        fprintf(stderr, "FAIL: %s\n", err.msg);
        return 1;
    }
    subq_model_get_info(model, &info);
    test_load_modes(path);
    test_longrope();
    if (subq_search_random(model, "all", 16, 7, &search, &err)) {
        fprintf(stderr, "FAIL: %s\n", err.msg);
        return 1;
    }
    for (int kind = -1; kind < SUBQ_SELECT_COUNT; kind++) {
        if (kind >= 0 && !subq_selector_available((subq_selector_kind)kind)) continue;
        test_truncate(kind);
        test_copy(kind);
        test_session(kind, SUBQ_KV_F16);
    }
    /* search keys that rotate by position round-trip too; a session of
     * them refuses the same matrices unrotated */
    subq_search *flat = search;
    if (subq_search_random(model, "all", 16, 7, &search, &err) || subq_search_set_rope(search, 8, 100.0f, 1.0f, &err)) {
        fprintf(stderr, "FAIL: %s\n", err.msg);
        return 1;
    }
    test_truncate(SUBQ_SELECT_EXACT);
    test_copy(SUBQ_SELECT_EXACT);
    test_session(SUBQ_SELECT_EXACT, SUBQ_KV_F16);
    test_far();
    {
        float *lg = malloc((size_t)info.n_vocab * sizeof(float));
        subq_context *a = new_ctx(SUBQ_SELECT_EXACT, 8, SUBQ_KV_F16, 256);
        snprintf(path, sizeof path, "%.400s/test_session_%d_rot.bin", tmpdir, (int)getpid());
        CHECK(run(a, 0, NA, 1, lg) && subq_context_save(a, path, &err) == SUBQ_OK, "rotated save: %s", err.msg);
        subq_search *rot = search;
        search = flat;
        subq_context *b = new_ctx(SUBQ_SELECT_EXACT, 8, SUBQ_KV_F16, 256);
        CHECK(subq_context_load(b, path, &err) == SUBQ_ERR_MISMATCH && subq_context_n_past(b) == 0,
              "a session of rotated keys must refuse the unrotated space: %s", err.msg);
        search = rot;
        unlink(path);
        subq_context_free(a);
        subq_context_free(b);
        free(lg);
    }
    subq_search_free(search);
    search = flat;
    /* quantised caches (stories260K's heads of 8: one block per row) round-trip too */
    test_session(-1, SUBQ_KV_Q8_0);
    test_session(-1, SUBQ_KV_Q4_0);
    test_other_model();
    test_special();
    test_synthetic_fill();
    subq_search_free(search);
    subq_model_free(model);
    return test_summary();
}
