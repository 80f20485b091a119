/* Tokenizer tests: stories260K vocabulary facts, byte-exact round trips over
 * every shared text file, the merge rule against an independent O(n^2)
 * reference, edge cases, invalid UTF-8 and malformed vocabulary metadata.
 * Env: SUBQ_SHARED (read-only models and data), SUBQ_TMP (scratch files).
 * A missing model or text file is a failure, never a skip. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/rng.h"
#include "base/timer.h"
#include "gguf/gguf.h"
#include "tokenize/tokenizer.h"

static int g_pass, g_fail;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (cond) {                                                                                \
            g_pass++;                                                                              \
        } else {                                                                                   \
            g_fail++;                                                                              \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

static const char *shared_dir(void) {
    const char *s = getenv("SUBQ_SHARED");
    if (s && *s) return s;
    if (access("../shared/models", R_OK) == 0) return "../shared";
    return "/work/shared";
}

static const char *tmp_dir(void) {
    const char *s = getenv("SUBQ_TMP");
    return (s && *s) ? s : "/tmp";
}

static char *read_file(const char *path, size_t *len) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    char *buf = NULL;
    if (fseek(fp, 0, SEEK_END) == 0) {
        long sz = ftell(fp);
        if (sz >= 0 && fseek(fp, 0, SEEK_SET) == 0) {
            buf = malloc((size_t)sz + 1);
            if (buf && fread(buf, 1, (size_t)sz, fp) != (size_t)sz) {
                free(buf);
                buf = NULL;
            }
            if (buf) buf[sz] = '\0', *len = (size_t)sz;
        }
    }
    fclose(fp);
    return buf;
}

static bool one_line(const subq_error *e) { return e->msg[0] && !strchr(e->msg, '\n'); }

/* Encode (into an array of exactly the right size), encode again into that
 * array, decode, compare. */
static bool roundtrip(const tokenizer *t, const char *s, size_t len, bool add_bos) {
    subq_error err = {0};
    size_t n = 0;
    int32_t *ids = NULL;
    if (tokenizer_encode_alloc(t, s, len, add_bos, false, &ids, &n, &err) != SUBQ_OK) {
        fprintf(stderr, "  encode failed: %s\n", err.msg);
        return false;
    }
    size_t n2 = 0;
    bool ok = tokenizer_encode(t, s, len, add_bos, ids, n, &n2, &err) == SUBQ_OK && n2 == n;
    char *dec = NULL;
    size_t dlen = 0;
    if (ok) ok = tokenizer_decode(t, ids, n, &dec, &dlen, &err) == SUBQ_OK;
    if (ok) ok = dlen == len && memcmp(dec, s, len) == 0 && dec[dlen] == '\0';
    free(dec);
    free(ids);
    return ok;
}

/* ---- independent reference: the merge rule by brute force ---------------- */

typedef struct ref_vocab {
    int n;
    char **s;
    size_t *len;
    float *score;
    int *type;
    int unk, bos;
    bool add_space_prefix;
    int *sorted; /* ids ordered by (text, id) */
} ref_vocab;

static const ref_vocab *g_sort_vocab; /* qsort has no context argument */

static int cmp_text(const char *a, size_t na, const char *b, size_t nb) {
    size_t m = na < nb ? na : nb;
    int c = memcmp(a, b, m);
    if (c) return c;
    return na < nb ? -1 : na > nb;
}

static int cmp_ids(const void *pa, const void *pb) {
    int a = *(const int *)pa, b = *(const int *)pb;
    const ref_vocab *v = g_sort_vocab;
    int c = cmp_text(v->s[a], v->len[a], v->s[b], v->len[b]);
    return c ? c : (a > b) - (a < b);
}

/* Last id with this text (later duplicates win), or -1. */
static int ref_lookup(const ref_vocab *v, const char *s, size_t n) {
    int lo = 0, hi = v->n; /* first index whose text is > s */
    while (lo < hi) {
        int mid = (lo + hi) / 2, id = v->sorted[mid];
        if (cmp_text(v->s[id], v->len[id], s, n) <= 0) lo = mid + 1;
        else hi = mid;
    }
    if (lo == 0) return -1;
    int id = v->sorted[lo - 1];
    return cmp_text(v->s[id], v->len[id], s, n) == 0 ? id : -1;
}

static bool ref_mergeable(const ref_vocab *v, int id) {
    return id >= 0 && v->type[id] != TOKEN_TYPE_CONTROL && v->type[id] != TOKEN_TYPE_UNKNOWN &&
           v->type[id] != TOKEN_TYPE_BYTE;
}

/* Read the vocabulary straight from the GGUF metadata (not via the tokenizer). */
static bool ref_load(const gguf_file *f, ref_vocab *v) {
    memset(v, 0, sizeof *v);
    subq_error err = {0};
    const gguf_value *toks = NULL, *scores = NULL, *types = NULL;
    if (gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &toks, &err) != SUBQ_OK ||
        gguf_get_arr(f, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, &scores, &err) != SUBQ_OK ||
        gguf_get_arr(f, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, &types, &err) != SUBQ_OK) {
        fprintf(stderr, "  reference vocab: %s\n", err.msg);
        return false;
    }
    v->n = (int)toks->v.arr.n;
    v->s = calloc((size_t)v->n, sizeof *v->s);
    v->len = calloc((size_t)v->n, sizeof *v->len);
    v->score = calloc((size_t)v->n, sizeof *v->score);
    v->type = calloc((size_t)v->n, sizeof *v->type);
    v->sorted = calloc((size_t)v->n, sizeof *v->sorted);
    for (int i = 0; i < v->n; i++) {
        gguf_str s = toks->v.arr.items[i].v.str;
        v->s[i] = malloc(s.len + 1);
        memcpy(v->s[i], s.data, s.len);
        v->len[i] = s.len;
        v->score[i] = (float)gguf_arr_get_f64(scores, (uint64_t)i);
        v->type[i] = (int)gguf_arr_get_i64(types, (uint64_t)i);
        v->sorted[i] = i;
    }
    uint32_t u = 0;
    v->unk = gguf_get_u32_or(f, "tokenizer.ggml.unknown_token_id", 0xFFFFFFFFu, &u, &err) == SUBQ_OK &&
                     u < (uint32_t)v->n ? (int)u : -1;
    v->bos = gguf_get_u32_or(f, "tokenizer.ggml.bos_token_id", 0xFFFFFFFFu, &u, &err) == SUBQ_OK &&
                     u < (uint32_t)v->n ? (int)u : -1;
    v->add_space_prefix = true;
    gguf_get_bool_or(f, "tokenizer.ggml.add_space_prefix", true, &v->add_space_prefix, &err);
    g_sort_vocab = v;
    qsort(v->sorted, (size_t)v->n, sizeof *v->sorted, cmp_ids);
    return true;
}

static void ref_free(ref_vocab *v) {
    for (int i = 0; i < v->n; i++) free(v->s[i]);
    free(v->s), free(v->len), free(v->score), free(v->type), free(v->sorted);
}

/* Brute force: scan every adjacent pair, merge the best (highest score,
 * leftmost on ties), repeat. Input must be valid UTF-8. Returns the count. */
static size_t ref_encode(const ref_vocab *v, const char *text, size_t len, bool add_bos,
                         int32_t *out) {
    size_t count = 0;
    if (add_bos && v->bos >= 0) out[count++] = v->bos;
    if (len == 0) return count;
    char *buf = malloc(3 * len + 3);
    size_t blen = 0;
    if (v->add_space_prefix) memcpy(buf, "\xE2\x96\x81", 3), blen = 3;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') memcpy(buf + blen, "\xE2\x96\x81", 3), blen += 3;
        else buf[blen++] = text[i];
    }
    size_t *st = malloc(blen * sizeof *st), *sn = malloc(blen * sizeof *sn), ns = 0;
    for (size_t i = 0; i < blen;) {
        size_t l = 1;
        while (i + l < blen && ((unsigned char)buf[i + l] & 0xC0) == 0x80) l++;
        st[ns] = i, sn[ns] = l, ns++;
        i += l;
    }
    for (;;) {
        size_t best = 0;
        int best_id = -1;
        for (size_t i = 0; i + 1 < ns; i++) {
            int id = ref_lookup(v, buf + st[i], sn[i] + sn[i + 1]);
            if (!ref_mergeable(v, id)) continue;
            if (best_id < 0 || v->score[id] > v->score[best_id]) best = i, best_id = id;
        }
        if (best_id < 0) break;
        sn[best] += sn[best + 1];
        memmove(st + best + 1, st + best + 2, (ns - best - 2) * sizeof *st);
        memmove(sn + best + 1, sn + best + 2, (ns - best - 2) * sizeof *sn);
        ns--;
    }
    for (size_t i = 0; i < ns; i++) {
        int id = ref_lookup(v, buf + st[i], sn[i]);
        if (ref_mergeable(v, id)) {
            out[count++] = id;
            continue;
        }
        for (size_t j = 0; j < sn[i]; j++) {
            char name[8];
            snprintf(name, sizeof name, "<0x%02X>", (unsigned char)buf[st[i] + j]);
            int b = ref_lookup(v, name, 6);
            out[count++] = (b >= 0 && v->type[b] == TOKEN_TYPE_BYTE) ? b : v->unk;
        }
    }
    free(st), free(sn), free(buf);
    return count;
}

/* Random valid UTF-8 text over a small alphabet, biased to common letters and
 * spaces so that many merges happen. */
static size_t random_text(uint64_t *rng, const char *const *alpha, int n_alpha, char *buf,
                          size_t max_elems) {
    size_t n_el = rng_next_u64(rng) % (max_elems + 1), len = 0;
    for (size_t i = 0; i < n_el; i++) {
        const char *e = alpha[rng_next_u64(rng) % (uint64_t)n_alpha];
        size_t l = strlen(e);
        memcpy(buf + len, e, l);
        len += l;
    }
    buf[len] = '\0';
    return len;
}

static void compare_with_reference(const tokenizer *t, const ref_vocab *v, const char *const *alpha,
                                   int n_alpha, int n_strings, size_t max_elems, uint64_t seed,
                                   const char *what, bool check_roundtrip) {
    uint64_t rng = rng_seed(seed);
    static char buf[2048];
    static int32_t got[2048], want[2048];
    int bad = 0;
    for (int k = 0; k < n_strings; k++) {
        size_t len = random_text(&rng, alpha, n_alpha, buf, max_elems);
        bool bos = k & 1;
        size_t n = 0;
        subq_error err = {0};
        subq_status st = tokenizer_encode(t, buf, len, bos, got, 2048, &n, &err);
        size_t nw = ref_encode(v, buf, len, bos, want);
        bool same = st == SUBQ_OK && n == nw && memcmp(got, want, n * sizeof *got) == 0;
        if (!same && bad++ < 5) {
            fprintf(stderr, "  %s mismatch on \"%s\" (bos %d): got", what, buf, (int)bos);
            for (size_t i = 0; i < n && i < 2048; i++) fprintf(stderr, " %d", got[i]);
            fprintf(stderr, " / want");
            for (size_t i = 0; i < nw; i++) fprintf(stderr, " %d", want[i]);
            fputc('\n', stderr);
        }
        if (same && check_roundtrip && !roundtrip(t, buf, len, bos)) {
            if (bad++ < 5) fprintf(stderr, "  %s round trip failed on \"%s\"\n", what, buf);
        }
    }
    CHECK(bad == 0, "%s: %d of %d random strings differ from the brute-force reference", what, bad,
          n_strings);
    printf("%s: %d random strings match the brute-force reference\n", what, n_strings - bad);
}

/* ---- stories260K ---------------------------------------------------------- */

static int find_piece(const tokenizer *t, const char *piece) {
    char buf[64];
    for (int i = 0; i < tokenizer_n_vocab(t); i++) {
        int n = tokenizer_token_to_piece(t, 100, i, buf, sizeof buf); /* 100: not BOS */
        if (n == (int)strlen(piece) && memcmp(buf, piece, (size_t)n) == 0) return i;
    }
    return -1;
}

static void test_vocab_facts(const tokenizer *t) {
    CHECK(tokenizer_get_kind(t) == TOKENIZER_SPM, "kind");
    CHECK(tokenizer_n_vocab(t) == 512, "n_vocab %d", tokenizer_n_vocab(t));
    CHECK(tokenizer_bos(t) == 1, "bos %d", tokenizer_bos(t));
    CHECK(tokenizer_eos(t) == 2, "eos %d", tokenizer_eos(t));
    CHECK(tokenizer_add_bos(t), "add_bos default");
    char buf[16];
    CHECK(tokenizer_token_to_piece(t, -1, 0, buf, sizeof buf) == 0, "<unk> piece is empty");
    CHECK(tokenizer_token_to_piece(t, -1, 1, buf, sizeof buf) == 0, "<s> piece is empty");
    CHECK(tokenizer_token_to_piece(t, -1, 2, buf, sizeof buf) == 0, "</s> piece is empty");
    int bytes_ok = 1;
    for (int b = 0; b < 256; b++) {
        int n = tokenizer_token_to_piece(t, 100, 3 + b, buf, sizeof buf);
        if (n != 1 || (unsigned char)buf[0] != b) bytes_ok = 0;
    }
    CHECK(bytes_ok, "tokens 3..258 decode to bytes 0x00..0xFF");
    /* Leading-space rule: dropped after nothing or BOS, kept after text. */
    int little = find_piece(t, " little");
    CHECK(little > 258, "' little' is a token (%d)", little);
    CHECK(tokenizer_token_to_piece(t, -1, little, buf, sizeof buf) == 6 &&
              memcmp(buf, "little", 6) == 0, "space dropped at start");
    CHECK(tokenizer_token_to_piece(t, 1, little, buf, sizeof buf) == 6, "space dropped after BOS");
    CHECK(tokenizer_token_to_piece(t, 2, little, buf, sizeof buf) == 7, "space kept after EOS");

    /* A known encoding: each word is a whole token in this vocabulary. */
    const char *words[] = {" Once", " upon", " a", " time"};
    int32_t want[5] = {1};
    for (int i = 0; i < 4; i++) want[i + 1] = find_piece(t, words[i]);
    int32_t got[16];
    size_t n = 0;
    subq_error err = {0};
    subq_status st = tokenizer_encode(t, "Once upon a time", 16, true, got, 16, &n, &err);
    CHECK(st == SUBQ_OK && n == 5 && memcmp(got, want, sizeof want) == 0,
          "\"Once upon a time\" -> [1 %d %d %d %d], got n=%zu [%d %d %d %d %d]", want[1], want[2],
          want[3], want[4], n, got[0], got[1], got[2], got[3], got[4]);
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void test_text_files(const tokenizer *t) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/data/text", shared_dir());
    DIR *d = opendir(dir);
    CHECK(d != NULL, "cannot open text directory %s (set SUBQ_SHARED)", dir);
    if (!d) return;
    char *names[64];
    int n_files = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n_files < 64) {
        size_t l = strlen(e->d_name);
        if (l > 4 && strcmp(e->d_name + l - 4, ".txt") == 0) names[n_files++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n_files, sizeof *names, cmp_names);
    CHECK(n_files > 0, "no *.txt files in %s", dir);
    double best_rate = 0, largest_rate = 0;
    size_t largest = 0;
    for (int i = 0; i < n_files; i++) {
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        size_t len = 0;
        char *text = read_file(path, &len);
        CHECK(text != NULL, "cannot read %s", path);
        if (!text) continue;
        /* Each character gives at most one token per byte, plus prefix and BOS. */
        size_t cap = len + 8;
        int32_t *ids = malloc(cap * sizeof *ids);
        for (int bos = 0; bos < 2; bos++) {
            subq_error err = {0};
            size_t n = 0;
            double t0 = time_now_s();
            subq_status st = tokenizer_encode(t, text, len, bos, ids, cap, &n, &err);
            double dt = time_now_s() - t0;
            CHECK(st == SUBQ_OK && n <= cap, "%s: encode: %s", names[i], err.msg);
            if (st != SUBQ_OK || n > cap) continue;
            char *dec = NULL;
            size_t dlen = 0;
            st = tokenizer_decode(t, ids, n, &dec, &dlen, &err);
            CHECK(st == SUBQ_OK && dlen == len && memcmp(dec, text, len) == 0,
                  "%s: round trip (bos %d) differs (%zu vs %zu bytes)", names[i], bos, dlen, len);
            if (bos) CHECK(n > 0 && ids[0] == 1, "%s: BOS first", names[i]);
            free(dec);
            double rate = n / (dt > 0 ? dt : 1e-9);
            printf("%-40s %8zu bytes -> %8zu tokens (bos %d) in %.3f s: %.2f M tokens/s\n",
                   names[i], len, n, bos, dt, rate / 1e6);
            if (rate > best_rate) best_rate = rate;
            if (len >= largest) largest = len, largest_rate = rate;
        }
        free(ids);
        free(text);
        free(names[i]);
    }
    printf("largest text (%zu bytes): %.2f M tokens/s\n", largest, largest_rate / 1e6);
}

static void test_edge_cases(const tokenizer *t) {
    int32_t ids[64];
    size_t n = 99;
    subq_error err = {0};

    CHECK(tokenizer_encode(t, "", 0, false, ids, 64, &n, &err) == SUBQ_OK && n == 0,
          "empty text, no BOS -> no tokens (n=%zu)", n);
    CHECK(tokenizer_encode(t, NULL, 0, true, ids, 64, &n, &err) == SUBQ_OK && n == 1 &&
              ids[0] == 1, "empty text with BOS -> [BOS]");
    char *dec = NULL;
    size_t dlen = 99;
    CHECK(tokenizer_decode(t, ids, 0, &dec, &dlen, &err) == SUBQ_OK && dec && dlen == 0 &&
              dec[0] == '\0', "decode of nothing is \"\"");
    free(dec);

    /* "\n\n": newline is not in the vocabulary -> byte tokens <0x0A> (id 13). */
    CHECK(tokenizer_encode(t, "\n\n", 2, false, ids, 64, &n, &err) == SUBQ_OK && n >= 2 &&
              ids[n - 1] == 13 && ids[n - 2] == 13, "\"\\n\\n\" ends in two <0x0A> tokens");
    /* NUL inside the text (length-based) -> <0x00> (id 3). */
    CHECK(tokenizer_encode(t, "a\0b", 3, false, ids, 64, &n, &err) == SUBQ_OK && n == 3 &&
              ids[1] == 3, "\"a\\0b\" -> [' a', <0x00>, 'b'] (n=%zu)", n);

    static const struct { const char *s; size_t len; } rt[] = {
        {" ", 1}, {"  ", 2}, {"\n\n", 2}, {"a", 1}, {" hello", 6}, {"hello ", 6},
        {"   many   spaces   ", 19}, {"a\0b", 3}, {"\0", 1}, {"\t\r\n", 3},
        {"caf\xC3\xA9 \xE4\xB8\xAD\xF0\x9F\x98\x80", 13}, {"\xF4\x8F\xBF\xBF", 4},
        {"\xED\x9F\xBF\xEE\x80\x80", 6}, {"\xEF\xBF\xBF", 3}, {"<s></s><unk><0x41>", 18},
        {"Once upon a time, there was a little girl named Lily.", 53},
    };
    for (size_t i = 0; i < sizeof rt / sizeof rt[0]; i++) {
        CHECK(roundtrip(t, rt[i].s, rt[i].len, false), "round trip case %zu (no BOS)", i);
        CHECK(roundtrip(t, rt[i].s, rt[i].len, true), "round trip case %zu (BOS)", i);
    }

    /* Every class of invalid UTF-8, with the offset of the bad byte. */
    static const struct { const char *s; size_t len; size_t at; } bad[] = {
        {"\x80", 1, 0},             /* lone continuation */
        {"ab\xBF", 3, 2},           /* lone continuation after ASCII */
        {"a\xC3", 2, 1},            /* truncated 2-byte at the end */
        {"a\xE4\xB8", 3, 1},        /* truncated 3-byte */
        {"a\xF0\x9F\x98", 4, 1},    /* truncated 4-byte */
        {"\xC3\x28", 2, 0},         /* bad continuation */
        {"\xC0\xAF", 2, 0},         /* overlong 2-byte */
        {"\xC1\xBF", 2, 0},         /* overlong 2-byte */
        {"\xE0\x80\xAF", 3, 0},     /* overlong 3-byte */
        {"\xF0\x80\x80\xAF", 4, 0}, /* overlong 4-byte */
        {"x\xED\xA0\x80", 4, 1},    /* surrogate U+D800 */
        {"\xED\xBF\xBF", 3, 0},     /* surrogate U+DFFF */
        {"\xF4\x90\x80\x80", 4, 0}, /* > U+10FFFF */
        {"\xF5\x80\x80\x80", 4, 0}, /* > U+10FFFF lead */
        {"\xFF", 1, 0},
        {"\xFE", 1, 0},
        {"ok \xE2\x96", 5, 3},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        subq_error e = {0};
        n = 99;
        subq_status st = tokenizer_encode(t, bad[i].s, bad[i].len, true, ids, 64, &n, &e);
        char want[64];
        snprintf(want, sizeof want, "invalid UTF-8 at byte %zu", bad[i].at);
        CHECK(st == SUBQ_ERR_TOKENIZE && e.code == SUBQ_ERR_TOKENIZE && one_line(&e) &&
                  strstr(e.msg, want) && n == 0,
              "invalid UTF-8 case %zu: status %d, message '%s' (want '%s')", i, (int)st, e.msg, want);
    }

    /* cap smaller than the count: SUBQ_ERR_RANGE with the count needed,
     * nothing written past cap. */
    const char *s = "Once upon a time, there was a little girl.";
    size_t full = 0;
    CHECK(tokenizer_encode(t, s, strlen(s), true, NULL, 0, &full, &err) == SUBQ_ERR_RANGE && full > 4 &&
              one_line(&err),
          "count-only call: SUBQ_ERR_RANGE and the count");
    int32_t all[64], part[8];
    for (int i = 0; i < 8; i++) part[i] = -7;
    CHECK(tokenizer_encode(t, s, strlen(s), true, all, 64, &n, &err) == SUBQ_OK && n == full, "cap 64 fits");
    CHECK(tokenizer_encode(t, s, strlen(s), true, part, 3, &n, &err) == SUBQ_ERR_RANGE && n == full,
          "cap 3: SUBQ_ERR_RANGE, count %zu of %zu", n, full);
    CHECK(part[3] == -7 && part[7] == -7, "cap 3: nothing written past the buffer");
    CHECK(tokenizer_encode(t, s, strlen(s), true, all, full, &n, &err) == SUBQ_OK && n == full, "exact cap");

    /* token_to_piece bounds and truncation. */
    char buf[16];
    memset(buf, 'Z', sizeof buf);
    CHECK(tokenizer_token_to_piece(t, -1, 512, buf, sizeof buf) == -1, "tok 512 -> -1");
    CHECK(tokenizer_token_to_piece(t, -1, -1, buf, sizeof buf) == -1, "tok -1 -> -1");
    CHECK(tokenizer_token_to_piece(t, -1, INT32_MAX, buf, sizeof buf) == -1, "tok max -> -1");
    int little = find_piece(t, " little");
    memset(buf, 'Z', sizeof buf);
    CHECK(tokenizer_token_to_piece(t, 100, little, buf, 3) == 7 && memcmp(buf, " li", 3) == 0 &&
              buf[3] == 'Z', "piece truncated to cap, full length returned");
    CHECK(tokenizer_token_to_piece(t, 100, little, NULL, 0) == 7, "length query with cap 0");

    /* decode rejects out-of-range ids. */
    int32_t badids[2] = {5, 600};
    subq_error e = {0};
    dec = NULL;
    CHECK(tokenizer_decode(t, badids, 2, &dec, &dlen, &e) == SUBQ_ERR_RANGE && !dec && one_line(&e),
          "decode of id 600: %s", e.msg);

    /* Argument errors. */
    CHECK(tokenizer_encode(t, "x", 1, false, NULL, 0, NULL, &e) == SUBQ_ERR_ARG, "n_out NULL");
    CHECK(tokenizer_encode(t, NULL, 3, false, ids, 64, &n, &e) == SUBQ_ERR_ARG, "text NULL");
}

/* ---- synthetic vocabularies through the GGUF writer ---------------------- */

#define SYN_MAX 400
typedef struct syn_vocab {
    int n;
    const char *tok[SYN_MAX];
    char byte_names[256][8];
    float score[SYN_MAX];
    int32_t type[SYN_MAX];
} syn_vocab;

static void syn_add(syn_vocab *v, const char *s, float score, int32_t type) {
    v->tok[v->n] = s, v->score[v->n] = score, v->type[v->n] = type, v->n++;
}

/* <unk> <s> </s>, the 256 byte tokens, then the given normal tokens. */
static void syn_init(syn_vocab *v) {
    v->n = 0;
    syn_add(v, "<unk>", 0, TOKEN_TYPE_UNKNOWN);
    syn_add(v, "<s>", 0, TOKEN_TYPE_CONTROL);
    syn_add(v, "</s>", 0, TOKEN_TYPE_CONTROL);
    for (int b = 0; b < 256; b++) {
        snprintf(v->byte_names[b], 8, "<0x%02X>", b);
        syn_add(v, v->byte_names[b], 0, TOKEN_TYPE_BYTE);
    }
}

static gguf_writer *syn_writer(const syn_vocab *v, bool with_tokens) {
    gguf_writer *w = gguf_writer_new();
    if (!w) return NULL;
    gguf_writer_set_str(w, "general.architecture", "llama");
    gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    if (with_tokens) gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", v->tok, (uint64_t)v->n);
    gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, v->score, (uint64_t)v->n);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, v->type, (uint64_t)v->n);
    gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    return w;
}

/* Write, reopen and build a tokenizer; returns the status of tokenizer_from_gguf
 * (or SUBQ_ERR_IO if writing/reading failed, which the caller reports). */
static subq_status syn_load(gguf_writer *w, const char *name, gguf_file **fo, tokenizer **to,
                            subq_error *err) {
    char path[1024];
    snprintf(path, sizeof path, "%s/test_tokenizer_%s.gguf", tmp_dir(), name);
    *fo = NULL, *to = NULL;
    subq_status st = gguf_writer_write(w, path, err);
    gguf_writer_free(w);
    if (st != SUBQ_OK) {
        fprintf(stderr, "  writing %s: %s\n", path, err->msg);
        return SUBQ_ERR_IO;
    }
    st = gguf_open(path, fo, err);
    unlink(path); /* the mapping stays valid */
    if (st != SUBQ_OK) {
        fprintf(stderr, "  reopening %s: %s\n", path, err->msg);
        return SUBQ_ERR_IO;
    }
    return tokenizer_from_gguf(*fo, to, err);
}

static void expect_bad(gguf_writer *w, const char *name, subq_status want, const char *needle) {
    gguf_file *f;
    tokenizer *t;
    subq_error err = {0};
    subq_status st = syn_load(w, name, &f, &t, &err);
    CHECK(st == want && !t && one_line(&err) && (!needle || strstr(err.msg, needle)),
          "bad vocab '%s': status %d (want %d), message '%s'", name, (int)st, (int)want, err.msg);
    tokenizer_free(t);
    gguf_close(f);
}

static void test_bad_metadata(void) {
    static syn_vocab v; /* large: keep off the stack */
    syn_init(&v);
    syn_add(&v, "\xE2\x96\x81", -1, TOKEN_TYPE_NORMAL);
    syn_add(&v, "a", -2, TOKEN_TYPE_NORMAL);

    gguf_file *f;
    tokenizer *t;
    subq_error err = {0};
    subq_status st = syn_load(syn_writer(&v, true), "good", &f, &t, &err);
    CHECK(st == SUBQ_OK && t && tokenizer_n_vocab(t) == v.n, "valid synthetic vocab: %s", err.msg);
    if (t) CHECK(roundtrip(t, "a aa", 4, true), "synthetic round trip");
    tokenizer_free(t);
    gguf_close(f);

    gguf_writer *w = syn_writer(&v, true);
    gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, v.score, (uint64_t)v.n - 1);
    expect_bad(w, "scores_count", SUBQ_ERR_FORMAT, "scores");

    w = syn_writer(&v, true);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, v.type, 3);
    expect_bad(w, "types_count", SUBQ_ERR_FORMAT, "token_type");

    w = syn_writer(&v, true);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1000);
    expect_bad(w, "bos_range", SUBQ_ERR_FORMAT, "bos_token_id");

    w = syn_writer(&v, true);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)v.n);
    expect_bad(w, "eos_range", SUBQ_ERR_FORMAT, "eos_token_id");

    w = syn_writer(&v, true);
    gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    expect_bad(w, "gpt2", SUBQ_ERR_FORMAT, "tokenizer.ggml.merges"); /* gpt2 vocabularies need merges */

    w = syn_writer(&v, true);
    gguf_writer_set_str(w, "tokenizer.ggml.model", "foo");
    expect_bad(w, "foo", SUBQ_ERR_UNSUPPORTED, "foo");

    w = syn_writer(&v, false);
    expect_bad(w, "no_tokens", SUBQ_ERR_FORMAT, "tokenizer.ggml.tokens");

    w = syn_writer(&v, true);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", v.tok, 0);
    expect_bad(w, "empty_tokens", SUBQ_ERR_FORMAT, "empty");

    w = syn_writer(&v, true);
    gguf_writer_set_u32(w, "tokenizer.ggml.tokens", 7);
    expect_bad(w, "tokens_not_array", SUBQ_ERR_FORMAT, NULL);

    /* 0xFFFFFFFF means "no such token"; optional arrays may be absent. */
    w = syn_writer(&v, true);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 0xFFFFFFFFu);
    gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", false);
    st = syn_load(w, "no_bos", &f, &t, &err);
    CHECK(st == SUBQ_OK && t && tokenizer_bos(t) == -1 && !tokenizer_add_bos(t),
          "bos 0xFFFFFFFF -> -1: %s", err.msg);
    if (t) {
        int32_t ids[8];
        size_t n = 0;
        CHECK(tokenizer_encode(t, "", 0, true, ids, 8, &n, &err) == SUBQ_OK && n == 0,
              "no BOS token: nothing prepended");
        CHECK(roundtrip(t, " a a", 4, true), "round trip without a BOS token");
    }
    tokenizer_free(t);
    gguf_close(f);

    /* No add_space_prefix: text is taken as is. */
    w = syn_writer(&v, true);
    gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", false);
    st = syn_load(w, "no_prefix", &f, &t, &err);
    CHECK(st == SUBQ_OK && t, "add_space_prefix false: %s", err.msg);
    if (t) {
        int32_t ids[8];
        size_t n = 0;
        CHECK(tokenizer_encode(t, "a", 1, false, ids, 8, &n, &err) == SUBQ_OK && n == 1 &&
                  ids[0] == 260, "no prefix: \"a\" -> [a] (n=%zu)", n);
        CHECK(roundtrip(t, " a ", 3, true) && roundtrip(t, " a ", 3, false), "no-prefix round trip");
    }
    tokenizer_free(t);
    gguf_close(f);
}

/* Ties everywhere: many tokens share a score, so the leftmost rule decides.
 * Also a duplicate text (the later id wins) and a CONTROL token that text
 * must never produce. */
static void test_ties(void) {
    static syn_vocab v;
    syn_init(&v);
    static const char *const normal[] = {
        "\xE2\x96\x81", "a", "b", "aa", "ab", "ba", "bb", "\xE2\x96\x81" "a", "\xE2\x96\x81" "b",
        "aaa", "aab", "aba", "abb", "baa", "bab", "bba", "bbb", "a\xE2\x96\x81", "b\xE2\x96\x81",
        "\xE2\x96\x81\xE2\x96\x81", "\xE2\x96\x81" "aa", "\xE2\x96\x81" "ab", "abab", "aaaa",
        "\xE2\x96\x81" "abab", "bbbb", "ab\xE2\x96\x81",
    };
    int n_normal = (int)(sizeof normal / sizeof normal[0]);
    for (int i = 0; i < n_normal; i++) syn_add(&v, normal[i], (i % 3 == 0) ? -1.0f : 0.0f, 1);
    syn_add(&v, "ab", 0.5f, TOKEN_TYPE_NORMAL);           /* duplicate: this id wins */
    syn_add(&v, "aaab", 5.0f, TOKEN_TYPE_CONTROL);        /* never produced from text */
    syn_add(&v, "ba\xE2\x96\x81", 0.0f, TOKEN_TYPE_USER_DEFINED);

    gguf_file *f;
    tokenizer *t;
    subq_error err = {0};
    subq_status st = syn_load(syn_writer(&v, true), "ties", &f, &t, &err);
    CHECK(st == SUBQ_OK && t, "tie vocab: %s", err.msg);
    if (t) {
        ref_vocab rv;
        CHECK(ref_load(f, &rv), "tie vocab reference");
        static const char *const alpha[] = {"a", "b", " ", "a", "b", "c"};
        compare_with_reference(t, &rv, alpha, 6, 3000, 24, 7, "tie vocabulary", true);
        /* "aaab": the CONTROL token must not appear. */
        int32_t ids[16];
        size_t n = 0;
        tokenizer_encode(t, "aaab", 4, false, ids, 16, &n, &err);
        bool has_control = false;
        for (size_t i = 0; i < n; i++) has_control |= ids[i] == v.n - 2;
        CHECK(!has_control && n > 0, "CONTROL token not produced from text");
        ref_free(&rv);
    }
    tokenizer_free(t);
    gguf_close(f);
}

/* ---- a vocabulary without U+2581 ----------------------------------------- */

/* stories260K with every U+2581 in the token texts turned into U+2582: the
 * escaped space then matches no token and falls back to the three byte
 * tokens <0xE2><0x96><0x81>, so a text needs more ids than it has bytes
 * (tokenize, perplexity, generate and the training corpus once read past
 * buffers sized one id per byte). Writes the whole model (weights too) so
 * the public API can load it. */
static bool write_no_space_model(const gguf_file *f, const char *path) {
    const gguf_value *toks = NULL;
    subq_error err = {0};
    if (gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &toks, &err) != SUBQ_OK) return false;
    uint64_t n = toks->v.arr.n;
    char **texts = calloc(n, sizeof *texts);
    bool ok = texts != NULL;
    for (uint64_t i = 0; ok && i < n; i++) {
        gguf_str str = toks->v.arr.items[i].v.str;
        if (!(texts[i] = malloc(str.len + 1))) {
            ok = false;
            break;
        }
        memcpy(texts[i], str.data, str.len);
        texts[i][str.len] = '\0';
        for (char *p = texts[i]; (p = strstr(p, "\xE2\x96\x81")) != NULL; p += 3) p[2] = '\x82';
    }
    gguf_writer *w = ok ? gguf_writer_new() : NULL;
    ok = w && gguf_writer_copy_kvs(w, f) == SUBQ_OK &&
         gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)texts, n) == SUBQ_OK;
    for (uint64_t i = 0; ok && i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        ok = gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->n_bytes, 0, &err) == SUBQ_OK;
    }
    if (ok) ok = gguf_writer_write(w, path, &err) == SUBQ_OK;
    if (!ok) fprintf(stderr, "  writing %s: %s\n", path, err.msg);
    gguf_writer_free(w);
    for (uint64_t i = 0; texts && i < n; i++) free(texts[i]);
    free(texts);
    return ok;
}

static void test_no_space_piece(const gguf_file *orig) {
    char path[1024];
    snprintf(path, sizeof path, "%s/test_tokenizer_no_u2581.gguf", tmp_dir());
    CHECK(write_no_space_model(orig, path), "write the vocabulary without U+2581");
    gguf_file *f = NULL;
    tokenizer *t = NULL;
    subq_error err = {0};
    if (gguf_open(path, &f, &err) != SUBQ_OK || tokenizer_from_gguf(f, &t, &err) != SUBQ_OK) {
        CHECK(0, "open %s: %s", path, err.msg);
        gguf_close(f);
        return;
    }
    ref_vocab rv;
    CHECK(ref_load(f, &rv), "reference vocabulary without U+2581");

    /* Twenty spaces: 3 ids each plus the space prefix, far more ids than bytes. */
    const char *text = "a b c d e f g h i j k l m n o p q r s t u";
    const size_t len = strlen(text);
    int32_t want[256];
    size_t nw = ref_encode(&rv, text, len, true, want);
    CHECK(nw > len + 2, "the reference needs %zu ids for %zu bytes", nw, len);
    int b_e2 = -1;
    for (int i = 0; i < rv.n; i++)
        if (rv.len[i] == 6 && memcmp(rv.s[i], "<0xE2>", 6) == 0) b_e2 = i;
    size_t n_e2 = 0;
    for (size_t i = 0; i < nw; i++) n_e2 += want[i] == b_e2;
    CHECK(b_e2 >= 0 && n_e2 == 21, "each space and the prefix become <0xE2><0x96><0x81> (%zu of 21)", n_e2);

    /* The old callers' buffer (one id per byte plus BOS), exactly sized on
     * the heap so ASan sees any write or read past it. */
    int32_t *ids = malloc((len + 2) * sizeof *ids);
    size_t n = 0;
    subq_status st = tokenizer_encode(t, text, len, true, ids, len + 2, &n, &err);
    CHECK(st == SUBQ_ERR_RANGE && n == nw && one_line(&err),
          "one id per byte does not fit: status %d, count %zu (want %zu), '%s'", (int)st, n, nw, err.msg);
    free(ids);
    ids = NULL;
    st = tokenizer_encode_alloc(t, text, len, true, false, &ids, &n, &err);
    CHECK(st == SUBQ_OK && n == nw && memcmp(ids, want, nw * sizeof *ids) == 0,
          "encode_alloc gives the reference ids (%zu of %zu): %s", n, nw, err.msg);
    free(ids);
    /* Byte tokens decode to their bytes (as in llama.cpp): the escaped
     * spaces come back as U+2581, the prefix included. */
    char *dec = NULL;
    size_t dlen = 0;
    CHECK(tokenizer_decode(t, want, nw, &dec, &dlen, &err) == SUBQ_OK && dlen == len + 3 + 2 * 20 &&
              memcmp(dec, "\xE2\x96\x81" "a\xE2\x96\x81" "b", 8) == 0,
          "decode gives U+2581 for each space");
    free(dec);

    static const char *const alpha[] = {"a", "b", "e", "t", "o", " ", " ", " ", "  ", ".", "\n", "the", " Lily",
                                        "\xC3\xA9", "\xE4\xB8\xAD"};
    compare_with_reference(t, &rv, alpha, (int)(sizeof alpha / sizeof alpha[0]), 500, 200, 44, "no U+2581", false);
    const int32_t lily = ref_lookup(&rv, "\xE2\x96\x82Lily", 7); /* was "\u2581Lily" */
    CHECK(lily >= 0, "U+2582Lily is a token");
    ref_free(&rv);
    tokenizer_free(t);
    gguf_close(f);

    /* The public API: subq_tokenize never writes past cap and reports the
     * count needed; subq_token_to_piece likewise. */
    subq_model *m = NULL;
    if (subq_model_load(path, &m, &err) != SUBQ_OK) {
        CHECK(0, "subq_model_load(%s): %s", path, err.msg);
        unlink(path);
        return;
    }
    ids = malloc((len + 3) * sizeof *ids);
    for (size_t i = 0; i < len + 3; i++) ids[i] = -7;
    st = subq_tokenize(m, text, len, 1, ids, len + 2, &n, &err);
    CHECK(st == SUBQ_ERR_RANGE && n == nw && ids[len + 2] == -7, "subq_tokenize: SUBQ_ERR_RANGE, %zu needed, guard intact", n);
    st = subq_tokenize(m, text, len, 1, NULL, 0, &n, &err);
    CHECK(st == SUBQ_ERR_RANGE && n == nw, "subq_tokenize count-only call: %zu", n);
    free(ids);
    ids = malloc(nw * sizeof *ids);
    CHECK(subq_tokenize(m, text, len, 1, ids, nw, &n, &err) == SUBQ_OK && n == nw &&
              memcmp(ids, want, nw * sizeof *ids) == 0,
          "subq_tokenize with the count it asked for: the reference ids");
    free(ids);
    char piece[8] = {'Z', 'Z', 'Z', 'Z', 'Z', 'Z', 'Z', 'Z'};
    st = subq_token_to_piece(m, 100, lily, piece, 2, &n, &err);
    CHECK(st == SUBQ_ERR_RANGE && n == 7 && piece[0] == 'Z', "piece longer than cap: SUBQ_ERR_RANGE, 7 needed, nothing written");
    st = subq_token_to_piece(m, 100, lily, piece, 6, &n, &err);
    CHECK(st == SUBQ_ERR_RANGE && n == 7 && piece[0] == 'Z', "cap 6 < 7: nothing written");
    st = subq_token_to_piece(m, 100, lily, piece, 7, &n, &err);
    CHECK(st == SUBQ_OK && n == 7 && memcmp(piece, "\xE2\x96\x82Lily", 7) == 0 && piece[7] == 'Z',
          "piece of U+2582Lily fits in 7 bytes");
    char p5[5];
    st = subq_token_to_piece(m, -1, 1 << 30, p5, 5, &n, &err);
    CHECK(st == SUBQ_ERR_ARG && one_line(&err), "piece of an id outside the vocabulary: SUBQ_ERR_ARG");
    subq_model_free(m);
    unlink(path);
}

int main(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", shared_dir());
    gguf_file *f = NULL;
    tokenizer *t = NULL;
    subq_error err = {0};
    subq_status st = gguf_open(path, &f, &err);
    CHECK(st == SUBQ_OK, "cannot open model %s: %s (set SUBQ_SHARED)", path, err.msg);
    if (st == SUBQ_OK) {
        st = tokenizer_from_gguf(f, &t, &err);
        CHECK(st == SUBQ_OK && t, "tokenizer_from_gguf(%s): %s", path, err.msg);
    }
    if (t) {
        test_vocab_facts(t);
        test_edge_cases(t);
        test_no_space_piece(f);

        ref_vocab rv;
        bool ok = ref_load(f, &rv);
        CHECK(ok, "reference vocabulary from %s", path);
        if (ok) {
            static const char *const alpha[] = {
                "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "q",
                "r", "s", "t", "u", "v", "w", "x", "y", "z", "T", "L", "O", "S", "I",
                "e", "t", "a", "o", "h", "n", "i", "d", "s", "l", "y", "r", "w",
                " ", " ", " ", " ", " ", " ", ".", ",", "!", "?", "'", "\"", "-", "\n",
                "\xC3\xA9", "\xE4\xB8\xAD", "\xF0\x9F\x98\x80", "the", " the", "ing", "ed",
                " Lily", " was", "ittle",
            };
            compare_with_reference(t, &rv, alpha, (int)(sizeof alpha / sizeof alpha[0]), 4000, 30,
                                   42, "stories260K", true);
            compare_with_reference(t, &rv, alpha, (int)(sizeof alpha / sizeof alpha[0]), 300, 300,
                                   43, "stories260K long strings", true);
            ref_free(&rv);
        }
        /* Close the file first: the tokenizer must own its strings. */
        gguf_close(f);
        f = NULL;
        test_text_files(t);
    }
    tokenizer_free(t);
    gguf_close(f);

    test_bad_metadata();
    test_ties();

    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail || g_pass == 0 ? 1 : 0; /* nothing checked: a failure */
}
