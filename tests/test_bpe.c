/* Byte-level BPE tests: a hand-built vocabulary with hand-computed ids for
 * every pre-tokenizer (merge order, whitespace and digit rules,
 * contractions, Llama 3's whole-word rule, GPT-4o's case splits), special tokens (leftmost, then
 * longest; decode rules), byte fallback to <unk>, invalid UTF-8, malformed
 * metadata, the synthetic vocabulary generator (exact size, speed) and byte
 * exact round trips over every shared text with encode speed in MB/s.
 * Env: SUBQ_SHARED (texts), SUBQ_TMP (scratch files). */
#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/rng.h"
#include "base/timer.h"
#include "gguf/gguf.h"
#include "test_util.h"
#include "lab/bpe_synth.h"
#include "tokenize/bpe.h"
#include "tokenize/tokenizer.h"
#include "tokenize/utf8.h"

/* Speed limits are checked in optimised builds only (sanitizers are ~5x slower). */
#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

static const char *tmp_dir(void) {
    const char *s = getenv("SUBQ_TMP");
    return (s && *s) ? s : "/tmp";
}

static bool one_line(const subq_error *e) { return e->msg[0] && !strchr(e->msg, '\n'); }

/* ---- GPT-2 byte alphabet, written out independently of bpe.c ------------- */

/* Code point for byte b, from the definition: printable Latin-1 bytes stand
 * for themselves, the rest take U+0100.. in increasing byte order. */
static uint32_t gpt2_cp(int b) {
    int n = 0;
    for (int c = 0; c < 256; c++) {
        bool printable = (c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE;
        if (c == b) return printable ? (uint32_t)c : 0x100u + (uint32_t)n;
        if (!printable) n++;
    }
    return 0;
}

/* Id of byte b in a vocabulary that starts with the 256 byte symbols in
 * GPT-2 order (printable ones by value, then the others by value). */
static int byte_id(int b) {
    if (b >= 0x21 && b <= 0x7E) return b - 0x21;
    if (b >= 0xA1 && b <= 0xAC) return 94 + b - 0xA1;
    if (b >= 0xAE) return 106 + b - 0xAE;
    if (b <= 0x20) return 188 + b;
    if (b >= 0x7F && b <= 0xA0) return 221 + b - 0x7F;
    return 255; /* 0xAD */
}

static void put_cp(char **p, uint32_t cp) {
    if (cp < 0x80) {
        *(*p)++ = (char)cp;
    } else {
        *(*p)++ = (char)(0xC0 | (cp >> 6));
        *(*p)++ = (char)(0x80 | (cp & 0x3F));
    }
}

static void test_byte_map(void) {
    bool ok = true, inv = true;
    bool seen[0x200] = {false};
    for (int b = 0; b < 256; b++) {
        uint32_t cp = bpe_byte_to_cp((uint8_t)b);
        ok &= cp == gpt2_cp(b);
        inv &= bpe_cp_to_byte(cp) == b;
        if (cp < 0x200) seen[cp] = true;
    }
    CHECK(ok, "bpe_byte_to_cp matches GPT-2's bytes_to_unicode");
    CHECK(inv, "bpe_cp_to_byte inverts it");
    int others = 0;
    for (uint32_t cp = 0; cp < 0x200; cp++)
        if (!seen[cp] && bpe_cp_to_byte(cp) != -1) others++;
    CHECK(others == 0 && bpe_cp_to_byte(0x4E2D) == -1, "no other code point maps to a byte");
    CHECK(bpe_byte_to_cp(' ') == 0x120 && bpe_byte_to_cp('\n') == 0x10A && bpe_byte_to_cp(0xAD) == 0x143,
          "space -> U+0120, newline -> U+010A, 0xAD -> U+0143");
}

/* ---- a hand-built vocabulary --------------------------------------------- */

#define HV_MAX 320
typedef struct hand_vocab {
    int n, n_merges;
    char *tok[HV_MAX];
    int32_t type[HV_MAX];
    char *merge[HV_MAX];
} hand_vocab;

/* Token text in the byte alphabet of the raw bytes s. */
static char *mapped(const char *s) {
    char *out = malloc(2 * strlen(s) + 1), *p = out;
    for (const char *q = s; *q; q++) put_cp(&p, gpt2_cp((uint8_t)*q));
    *p = '\0';
    return out;
}

static int hv_add(hand_vocab *v, char *text, int32_t type) {
    v->tok[v->n] = text;
    v->type[v->n] = type;
    return v->n++;
}

/* Merge raw a + raw b (both already tokens): adds the merge and the token. */
static int hv_merge(hand_vocab *v, const char *a, const char *b) {
    char *ma = mapped(a), *mb = mapped(b);
    char *m = malloc(strlen(ma) + strlen(mb) + 2);
    sprintf(m, "%s %s", ma, mb);
    v->merge[v->n_merges++] = m;
    char *t = malloc(strlen(ma) + strlen(mb) + 1);
    sprintf(t, "%s%s", ma, mb);
    free(ma), free(mb);
    return hv_add(v, t, TOKEN_TYPE_NORMAL);
}

static void hv_free(hand_vocab *v) {
    for (int i = 0; i < v->n; i++) free(v->tok[i]);
    for (int i = 0; i < v->n_merges; i++) free(v->merge[i]);
}

/* Ids of the hand vocabulary's merged tokens, filled by hv_build. */
static int T_Gt, T_he, T_Gthe, T_in, T_Gin, T_GG, T_NN, T_12, T_123, T_s, T_aT, T_Eacute, T_EacuteC, T_Gzebra;
static int T_eot, T_ims, T_tool, T_toolxy, T_olz, T_unk, T_pad;

static void hv_build(hand_vocab *v, bool drop_z) {
    memset(v, 0, sizeof *v);
    for (int i = 0; i < 256; i++) { /* GPT-2 order */
        int b = -1;
        for (int c = 0; c < 256; c++)
            if (byte_id(c) == i) b = c;
        char *s = malloc(3), *p = s;
        put_cp(&p, gpt2_cp(b));
        *p = '\0';
        if (drop_z && b == 'z') strcpy(s, "?z"); /* no token for byte 'z' */
        hv_add(v, s, TOKEN_TYPE_NORMAL);
    }
    T_Gt = hv_merge(v, " ", "t");    /* rank 0 */
    T_he = hv_merge(v, "h", "e");    /* rank 1 */
    T_Gthe = hv_merge(v, " t", "he"); /* rank 2 */
    T_in = hv_merge(v, "i", "n");
    T_Gin = hv_merge(v, " ", "in");
    T_GG = hv_merge(v, " ", " ");
    T_NN = hv_merge(v, "\n", "\n");
    T_12 = hv_merge(v, "1", "2");
    T_123 = hv_merge(v, "12", "3");
    T_s = hv_merge(v, "'", "s");
    /* Merges across GPT-4o's case cuts: they fire only where a word spans the cut. */
    T_aT = hv_merge(v, "a", "T");
    T_Eacute = hv_merge(v, "\xC3", "\x89");       /* U+00C9 */
    T_EacuteC = hv_merge(v, "\xC3\x89", "C");
    T_Gzebra = hv_add(v, mapped(" zebra"), TOKEN_TYPE_NORMAL); /* no merges build it */
    T_eot = hv_add(v, strdup("<|endoftext|>"), TOKEN_TYPE_CONTROL);
    T_ims = hv_add(v, strdup("<|im_start|>"), TOKEN_TYPE_CONTROL);
    T_tool = hv_add(v, strdup("<tool>"), TOKEN_TYPE_USER_DEFINED);
    T_toolxy = hv_add(v, strdup("<tool>xy"), TOKEN_TYPE_USER_DEFINED);
    T_olz = hv_add(v, strdup("ol>z"), TOKEN_TYPE_USER_DEFINED);
    T_unk = hv_add(v, strdup("<unk>"), TOKEN_TYPE_UNKNOWN);
    T_pad = hv_add(v, strdup("[PAD999]"), TOKEN_TYPE_UNUSED);
}

/* Writer with the vocabulary; callers adjust keys before loading. */
static gguf_writer *hv_writer(const hand_vocab *v, const char *pre) {
    gguf_writer *w = gguf_writer_new();
    gguf_writer_set_str(w, "general.architecture", "qwen2");
    gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    if (pre) gguf_writer_set_str(w, "tokenizer.ggml.pre", pre);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tok, (uint64_t)v->n);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, v->type, (uint64_t)v->n);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v->merge,
                            (uint64_t)v->n_merges);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)T_eot);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)T_eot);
    return w;
}

/* Write, reopen, build. Returns tokenizer_from_gguf's status (SUBQ_ERR_IO
 * when the file itself could not be written or read). */
static subq_status load_writer(gguf_writer *w, const char *name, gguf_file **fo, tokenizer **to,
                               subq_error *err) {
    char path[1024];
    snprintf(path, sizeof path, "%s/test_bpe_%s.gguf", tmp_dir(), name);
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

static bool utf8_ok(const char *s, size_t n) { return utf8_validate(s, n) == n; }

static bool roundtrip(const tokenizer *t, const char *s, size_t len) {
    subq_error err = {0};
    size_t n = 0;
    int32_t *ids = NULL;
    if (tokenizer_encode_alloc(t, s, len, false, false, &ids, &n, &err) != SUBQ_OK) {
        fprintf(stderr, "  encode failed: %s\n", err.msg);
        return false;
    }
    size_t n2 = 0;
    bool ok = tokenizer_encode(t, s, len, false, ids, n, &n2, &err) == SUBQ_OK && n2 == n && n <= len;
    char *dec = NULL;
    size_t dlen = 0;
    if (ok) ok = tokenizer_decode(t, ids, n, &dec, &dlen, &err) == SUBQ_OK;
    if (ok) ok = dlen == len && memcmp(dec, s, len) == 0;
    free(dec);
    free(ids);
    return ok;
}

/* Encode s and compare with want[0..nw) (terminated by -1 in the table). */
static void expect_ids(const tokenizer *t, const char *pre, const char *s, size_t len, const int *want) {
    int nw = 0;
    while (want[nw] >= 0) nw++;
    int32_t got[64];
    size_t n = 0;
    subq_error err = {0};
    subq_status st = tokenizer_encode(t, s, len, false, got, 64, &n, &err);
    bool same = st == SUBQ_OK && n == (size_t)nw;
    for (int i = 0; same && i < nw; i++) same = got[i] == want[i];
    if (!same) {
        char buf[512];
        int p = snprintf(buf, sizeof buf, "got");
        for (size_t i = 0; i < n && i < 64 && p < 400; i++) p += snprintf(buf + p, sizeof buf - (size_t)p, " %d", got[i]);
        p += snprintf(buf + p, sizeof buf - (size_t)p, " / want");
        for (int i = 0; i < nw && p < 480; i++) p += snprintf(buf + p, sizeof buf - (size_t)p, " %d", want[i]);
        CHECK(false, "pre %s, text \"%.*s\": %s (%s)", pre, (int)len, s, buf, st ? err.msg : "ok");
    } else {
        CHECK(true, "ids");
    }
}

#define B(c) byte_id((uint8_t)(c))
#define END (-1)

static void test_hand_vocab(void) {
    static hand_vocab v;
    hv_build(&v, false);
    static const char *const pres[] = {"qwen2", "llama-bpe", "gpt2", "smollm", "gpt-4o", NULL};
    for (int k = 0; k < 6; k++) {
        const char *pre = pres[k] ? pres[k] : "(none)";
        gguf_file *f;
        tokenizer *t;
        subq_error err = {0};
        char name[32];
        snprintf(name, sizeof name, "hand_%d", k);
        subq_status st = load_writer(hv_writer(&v, pres[k]), name, &f, &t, &err);
        CHECK(st == SUBQ_OK && t, "hand vocab, pre %s: %s", pre, err.msg);
        if (!t) {
            gguf_close(f);
            continue;
        }
        bool qwen = k == 0, llama3 = k == 1, gpt2 = k == 2 || k == 5, smollm = k == 3, gpt4o = k == 4;
        CHECK(tokenizer_get_kind(t) == TOKENIZER_BPE && tokenizer_n_vocab(t) == v.n, "kind/n_vocab");
        CHECK(tokenizer_bos(t) == T_eot && tokenizer_eos(t) == T_eot, "bos/eos");
        CHECK(tokenizer_add_bos(t) == llama3, "add_bos default for pre %s", pre);

        /* Merge order: "Ġ t" (rank 0) before "h e" (1), then "Ġt he" (2). */
        expect_ids(t, pre, "the", 3, (int[]){B('t'), T_he, END});
        expect_ids(t, pre, " the", 4, (int[]){T_Gthe, END});
        expect_ids(t, pre, " in the", 7, (int[]){T_Gin, T_Gthe, END});
        /* Two spaces before a word: the first stands alone. */
        expect_ids(t, pre, "  the", 5, (int[]){B(' '), T_Gthe, END});
        /* Trailing spaces are one word; "Ġ Ġ" merges leftmost first. */
        expect_ids(t, pre, "a   ", 4, (int[]){B('a'), T_GG, B(' '), END});
        /* Letters glue to one leading non-letter (qwen2/llama3/gpt-4o) or only a space (gpt2). */
        if (qwen || llama3 || gpt4o)
            expect_ids(t, pre, "(the", 4, (int[]){B('('), B('t'), T_he, END}); /* one word "(the" */
        /* Newlines: "\s*[\r\n]+" keeps runs (qwen2/llama3/gpt-4o); gpt2 splits before the last. */
        if (qwen || llama3 || gpt4o)
            expect_ids(t, pre, "a\n\n\n", 4, (int[]){B('a'), T_NN, B('\n'), END});
        else
            expect_ids(t, pre, "a\n\n\nb", 5, (int[]){B('a'), T_NN, B('\n'), B('b'), END});
        /* Digits: one per word (qwen2, smollm), groups of 3 (llama3, gpt-4o), runs (gpt2). */
        if (qwen || smollm)
            expect_ids(t, pre, "123456", 6, (int[]){B('1'), B('2'), B('3'), B('4'), B('5'), B('6'), END});
        if (llama3 || gpt4o)
            expect_ids(t, pre, "123412", 6, (int[]){T_123, B('4'), T_12, END}); /* "123" "412" */
        if (gpt2)
            expect_ids(t, pre, "123456", 6, (int[]){T_123, B('4'), B('5'), B('6'), END});
        /* smollm: the space before a digit is its own word (digits are cut out first). */
        if (smollm) expect_ids(t, pre, " 12", 3, (int[]){B(' '), B('1'), B('2'), END});
        if (gpt2) expect_ids(t, pre, " 12", 3, (int[]){B(' '), T_12, END}); /* " 12" one word, no "Ġ1" */
        if (gpt4o) expect_ids(t, pre, " 12", 3, (int[]){B(' '), T_12, END}); /* " " "12" */
        /* GPT-4o cuts where lower case meets upper case ("a" "The"), and
         * (as llama.cpp) counts only A-Z as upper case: U+00C9 is both, so
         * U*L+ takes it alone ("\u00c9" "COLE"); the others keep one word. */
        if (gpt4o) {
            expect_ids(t, pre, "aThe", 4, (int[]){B('a'), B('T'), T_he, END});
            expect_ids(t, pre, "\xC3\x89" "COLE", 6, (int[]){T_Eacute, B('C'), B('O'), B('L'), B('E'), END});
        } else {
            expect_ids(t, pre, "aThe", 4, (int[]){T_aT, T_he, END});
            expect_ids(t, pre, "\xC3\x89" "COLE", 6, (int[]){T_EacuteC, B('O'), B('L'), B('E'), END});
        }
        /* Contractions: "'s" is a word; upper case only for qwen2/llama3. */
        expect_ids(t, pre, "it's", 4, (int[]){B('i'), B('t'), T_s, END});
        /* Whole-word rule (llama3 only): " zebra" is a token no merge reaches. */
        if (llama3)
            expect_ids(t, pre, " zebra", 6, (int[]){T_Gzebra, END});
        else
            expect_ids(t, pre, " zebra", 6, (int[]){B(' '), B('z'), B('e'), B('b'), B('r'), B('a'), END});

        /* Special tokens: cut out first, leftmost then longest; a span
         * between them is pre-split on its own ("he" after the special
         * starts a word, so no space joins it). */
        expect_ids(t, pre, "<|im_start|>the<|endoftext|>", 28, (int[]){T_ims, B('t'), T_he, T_eot, END});
        expect_ids(t, pre, "<tool>xy", 8, (int[]){T_toolxy, END});
        expect_ids(t, pre, "<tool>x", 7, (int[]){T_tool, B('x'), END});
        expect_ids(t, pre, "<tool>z", 7, (int[]){T_tool, B('z'), END}); /* not "ol>z" */
        expect_ids(t, pre, "tol>z", 5, (int[]){B('t'), T_olz, END});
        expect_ids(t, pre, "<unk>", 5, (int[]){B('<'), B('u'), B('n'), B('k'), B('>'), END}); /* UNKNOWN: plain text */
        expect_ids(t, pre, "<|im_start|><|im_start|>", 24, (int[]){T_ims, T_ims, END});

        /* Decode: EOS/BOS, UNKNOWN and UNUSED give nothing, other specials their text. */
        char buf[32];
        CHECK(tokenizer_token_to_piece(t, -1, T_eot, buf, sizeof buf) == 0, "EOS piece empty");
        CHECK(tokenizer_token_to_piece(t, -1, T_unk, buf, sizeof buf) == 0, "UNKNOWN piece empty");
        CHECK(tokenizer_token_to_piece(t, -1, T_pad, buf, sizeof buf) == 0, "UNUSED piece empty");
        CHECK(tokenizer_token_to_piece(t, -1, T_ims, buf, sizeof buf) == 12 && memcmp(buf, "<|im_start|>", 12) == 0,
              "CONTROL piece is its text");
        CHECK(tokenizer_token_to_piece(t, -1, T_tool, buf, sizeof buf) == 6, "USER_DEFINED piece is its text");
        CHECK(tokenizer_token_to_piece(t, -1, T_Gthe, buf, sizeof buf) == 4 && memcmp(buf, " the", 4) == 0,
              "'Ġthe' decodes to ' the'");
        CHECK(tokenizer_token_to_piece(t, -1, B('\n'), buf, sizeof buf) == 1 && buf[0] == '\n', "'Ċ' -> newline");
        CHECK(tokenizer_token_to_piece(t, -1, B(0xE4), buf, sizeof buf) == 1 && (uint8_t)buf[0] == 0xE4,
              "byte symbol -> raw byte 0xE4");
        CHECK(tokenizer_token_to_piece(t, -1, v.n, buf, sizeof buf) == -1, "out of range piece");

        /* Round trips (no BOS/EOS text inside). */
#define LIT(x) {x, sizeof x - 1}
        static const struct {
            const char *s;
            size_t len;
        } rt[] = {
            LIT(""), LIT(" "), LIT("  "), LIT("\n"), LIT("\r\n"), LIT("\t\tx"), LIT("a\0b"),
            LIT("caf\xC3\xA9 \xE4\xB8\xAD\xF0\x9F\x98\x80"), LIT("IT'S it's WE'LL we've"),
            LIT("x = 12345678 + 3.14;\n    return x;\n"), LIT("<|im_start|>user\nhi<tool>xy"),
            LIT("\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7"),
            LIT("\xC2\x85\xE1\xA0\x8E\xE3\x80\x80 x"), LIT("\xFF is not here, but \xC3\xBF is"),
        };
#undef LIT
        for (size_t i = 0; i < sizeof rt / sizeof rt[0]; i++) {
            if (utf8_ok(rt[i].s, rt[i].len))
                CHECK(roundtrip(t, rt[i].s, rt[i].len), "pre %s: round trip case %zu", pre, i);
        }

        /* Invalid UTF-8: the byte offset, nothing written. */
        int32_t ids[16];
        size_t n = 99;
        err = (subq_error){0};
        st = tokenizer_encode(t, "ab \xC3(", 5, false, ids, 16, &n, &err);
        CHECK(st == SUBQ_ERR_TOKENIZE && n == 0 && one_line(&err) && strstr(err.msg, "invalid UTF-8 at byte 3"),
              "invalid UTF-8: %d '%s'", (int)st, err.msg);
        st = tokenizer_encode(t, "<tool>\xED\xA0\x80", 9, false, ids, 16, &n, &err);
        CHECK(st == SUBQ_ERR_TOKENIZE && strstr(err.msg, "byte 6"), "surrogate after a special: '%s'", err.msg);

        /* Count-only call and a short buffer report the full count. */
        const char *s = "<|im_start|> the the the 12345 zebra";
        size_t full = 0, part = 0;
        int32_t few[3] = {-7, -7, -7};
        CHECK(tokenizer_encode(t, s, strlen(s), true, NULL, 0, &full, &err) == SUBQ_ERR_RANGE && full > 8, "count only");
        CHECK(tokenizer_encode(t, s, strlen(s), true, few, 2, &part, &err) == SUBQ_ERR_RANGE && part == full &&
                  few[0] == T_eot && few[1] == T_ims && few[2] == -7,
              "cap 2: count %zu of %zu, BOS first", part, full);

        tokenizer_free(t);
        gguf_close(f);
    }

    /* add_bos_token present overrides the pre's default. */
    gguf_file *f;
    tokenizer *t;
    subq_error err = {0};
    gguf_writer *w = hv_writer(&v, "qwen2");
    gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true);
    CHECK(load_writer(w, "addbos", &f, &t, &err) == SUBQ_OK && t && tokenizer_add_bos(t), "add_bos_token true");
    tokenizer_free(t);
    gguf_close(f);
    hv_free(&v);

    /* A byte with no token: <unk> if there is one, else a clean error. */
    hv_build(&v, true);
    w = hv_writer(&v, "qwen2");
    gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)T_unk);
    CHECK(load_writer(w, "unk", &f, &t, &err) == SUBQ_OK && t, "vocab without 'z': %s", err.msg);
    if (t) expect_ids(t, "qwen2+unk", "zaz", 3, (int[]){T_unk, B('a'), T_unk, END});
    tokenizer_free(t);
    gguf_close(f);
    CHECK(load_writer(hv_writer(&v, "qwen2"), "nounk", &f, &t, &err) == SUBQ_OK && t, "vocab without 'z'");
    if (t) {
        int32_t ids[8];
        size_t n = 0;
        err = (subq_error){0};
        subq_status st = tokenizer_encode(t, "az", 2, false, ids, 8, &n, &err);
        CHECK(st == SUBQ_ERR_TOKENIZE && one_line(&err) && strstr(err.msg, "0x7A"), "no token for 'z': '%s'", err.msg);
    }
    tokenizer_free(t);
    gguf_close(f);
    hv_free(&v);
}

/* ---- malformed metadata ---------------------------------------------------- */

static void expect_bad(gguf_writer *w, const char *name, subq_status want, const char *needle) {
    gguf_file *f;
    tokenizer *t;
    subq_error err = {0};
    subq_status st = load_writer(w, name, &f, &t, &err);
    CHECK(st == want && !t && one_line(&err) && (!needle || strstr(err.msg, needle)),
          "bad vocab '%s': status %d (want %d), message '%s'", name, (int)st, (int)want, err.msg);
    tokenizer_free(t);
    gguf_close(f);
}

static void test_bad_metadata(void) {
    static hand_vocab v;
    hv_build(&v, false);
    gguf_writer *w;

    /* A merge naming a token that does not exist. */
    char *saved = v.merge[3];
    v.merge[3] = strdup("i q2");
    expect_bad(hv_writer(&v, "qwen2"), "merge_unknown", SUBQ_ERR_FORMAT, "merges[3]");
    free(v.merge[3]);
    /* Without a space. */
    v.merge[3] = strdup("in");
    expect_bad(hv_writer(&v, "qwen2"), "merge_nospace", SUBQ_ERR_FORMAT, "merges[3]");
    free(v.merge[3]);
    /* A space at the very end / start only. */
    v.merge[3] = strdup("in ");
    expect_bad(hv_writer(&v, "qwen2"), "merge_trailing_space", SUBQ_ERR_FORMAT, "merges[3]");
    free(v.merge[3]);
    /* Merging into a text that is not a token. */
    v.merge[3] = strdup("x y");
    expect_bad(hv_writer(&v, "qwen2"), "merge_result", SUBQ_ERR_FORMAT, "'xy'");
    free(v.merge[3]);
    v.merge[3] = saved;

    expect_bad(hv_writer(&v, "klingon"), "pre_unknown", SUBQ_ERR_UNSUPPORTED, "'klingon'");
    w = hv_writer(&v, "klingon");
    {
        gguf_file *f;
        tokenizer *t;
        subq_error err = {0};
        load_writer(w, "pre_list", &f, &t, &err);
        CHECK(strstr(err.msg, "qwen2") && strstr(err.msg, "llama-bpe") && strstr(err.msg, "smollm") &&
                  strstr(err.msg, "gpt-4o"),
              "unknown pre lists the supported ones: '%s'", err.msg);
        tokenizer_free(t);
        gguf_close(f);
    }
    w = hv_writer(&v, "qwen2");
    gguf_writer_set_u32(w, "tokenizer.ggml.pre", 3);
    expect_bad(w, "pre_type", SUBQ_ERR_FORMAT, "tokenizer.ggml.pre");

    w = gguf_writer_new();
    gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v.tok, (uint64_t)v.n);
    expect_bad(w, "no_merges", SUBQ_ERR_FORMAT, "tokenizer.ggml.merges");

    w = hv_writer(&v, "qwen2");
    gguf_writer_set_arr(w, "tokenizer.ggml.merges", GGUF_TYPE_INT32, v.type, 4);
    expect_bad(w, "merges_type", SUBQ_ERR_FORMAT, NULL);

    w = hv_writer(&v, "qwen2");
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, v.type, 5);
    expect_bad(w, "types_count", SUBQ_ERR_FORMAT, "token_type");

    w = hv_writer(&v, "qwen2");
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)v.n);
    expect_bad(w, "bos_range", SUBQ_ERR_FORMAT, "bos_token_id");

    w = hv_writer(&v, "qwen2");
    gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", 1u << 30);
    expect_bad(w, "pad_range", SUBQ_ERR_FORMAT, "padding_token_id");

    w = hv_writer(&v, "qwen2");
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 0xFFFFFFFFu);
    gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true);
    expect_bad(w, "add_bos_without_bos", SUBQ_ERR_FORMAT, "add_bos_token");

    w = hv_writer(&v, "qwen2");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v.tok, 0);
    expect_bad(w, "empty_tokens", SUBQ_ERR_FORMAT, "empty");

    /* A duplicate merge keeps its first rank; an empty merge list is valid. */
    w = hv_writer(&v, "qwen2");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v.merge, 0);
    {
        gguf_file *f;
        tokenizer *t;
        subq_error err = {0};
        CHECK(load_writer(w, "no_merge_entries", &f, &t, &err) == SUBQ_OK && t, "empty merges: %s", err.msg);
        if (t) expect_ids(t, "qwen2 (no merges)", " the", 4, (int[]){B(' '), B('t'), B('h'), B('e'), END});
        tokenizer_free(t);
        gguf_close(f);
    }
    hv_free(&v);
}

/* ---- synthetic vocabularies and real text ---------------------------------- */

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Every shared text: byte-exact round trip; prints MB/s. Returns the total
 * MB/s over all files (bytes / seconds). */
static double text_roundtrips(const tokenizer *t, const char *label) {
    char dir[1024];
    test_shared_path("data/text", dir, sizeof dir);
    DIR *d = opendir(dir);
    CHECK(d != NULL, "cannot open text directory %s", dir);
    if (!d) return 0;
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
    size_t total_bytes = 0, total_tokens = 0;
    double total_s = 0;
    for (int i = 0; i < n_files; i++) {
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        FILE *fp = fopen(path, "rb");
        CHECK(fp != NULL, "cannot read %s", path);
        if (!fp) continue;
        fseek(fp, 0, SEEK_END);
        size_t len = (size_t)ftell(fp);
        fseek(fp, 0, SEEK_SET);
        char *text = malloc(len + 1);
        size_t got = fread(text, 1, len, fp);
        fclose(fp);
        CHECK(got == len, "short read of %s", path);
        int32_t *ids = malloc((len + 1) * sizeof *ids);
        subq_error err = {0};
        size_t n = 0;
        double t0 = time_now_s();
        subq_status st = tokenizer_encode(t, text, len, false, ids, len + 1, &n, &err);
        double dt = time_now_s() - t0;
        CHECK(st == SUBQ_OK && n <= len, "%s %s: encode: %s", label, names[i], err.msg);
        if (st == SUBQ_OK) {
            char *dec = NULL;
            size_t dlen = 0;
            st = tokenizer_decode(t, ids, n, &dec, &dlen, &err);
            CHECK(st == SUBQ_OK && dlen == len && memcmp(dec, text, len) == 0,
                  "%s %s: round trip differs (%zu vs %zu bytes)", label, names[i], dlen, len);
            free(dec);
            printf("%-10s %-40s %8zu bytes -> %8zu tokens (%.2f bytes/token) in %.3f s: %.1f MB/s\n", label,
                   names[i], len, n, (double)len / (double)(n ? n : 1), dt, (double)len / 1e6 / (dt > 0 ? dt : 1e-9));
            total_bytes += len, total_tokens += n, total_s += dt;
        }
        free(ids);
        free(text);
        free(names[i]);
    }
    double rate = (double)total_bytes / 1e6 / (total_s > 0 ? total_s : 1e-9);
    printf("%-10s all texts: %zu bytes -> %zu tokens in %.3f s: %.1f MB/s\n", label, total_bytes, total_tokens,
           total_s, rate);
    return rate;
}

static void test_synth(void) {
    static const struct {
        const char *pre;
        int n_vocab;
        const char *special;
        bool add_bos;
    } fams[] = {
        {"qwen2", 151936, "<|im_start|>", false},
        {"llama-bpe", 128256, "<|begin_of_text|>", true},
        {"smollm", 49152, "<|im_end|>", false},
        {"gpt2", 320, "<|endoftext|>", false},
        {"gpt-4o", 200064, "<|end|>", false}, /* phi4-mini's size */
    };
    for (size_t k = 0; k < sizeof fams / sizeof fams[0]; k++) {
        bpe_synth sv;
        subq_error err = {0};
        double t0 = time_now_s();
        subq_status st = bpe_synth_make(fams[k].n_vocab, fams[k].pre, &sv, &err);
        double dt = time_now_s() - t0;
        CHECK(st == SUBQ_OK, "synth %s: %s", fams[k].pre, err.msg);
        if (st != SUBQ_OK) continue;
        printf("synth vocab %-9s %6d tokens, %6d merges in %.3f s\n", fams[k].pre, sv.n_vocab, sv.n_merges, dt);
        CHECK(SANITIZED || dt < 2.0, "synth %s took %.2f s (limit 2 s)", fams[k].pre, dt);
        CHECK(sv.n_vocab == fams[k].n_vocab, "synth size");
        /* Distinct texts; specials at the end; one merge per normal token above 256. */
        int n_special = 0;
        for (int i = 0; i < sv.n_vocab; i++) n_special += sv.types[i] == TOKEN_TYPE_CONTROL;
        CHECK(sv.n_merges == sv.n_vocab - 256 - n_special, "merges %d = tokens %d - 256 - specials %d",
              sv.n_merges, sv.n_vocab, n_special);
        CHECK(sv.types[sv.bos] == TOKEN_TYPE_CONTROL && sv.types[sv.eos] == TOKEN_TYPE_CONTROL &&
                  sv.add_bos == fams[k].add_bos, "bos/eos are specials");

        gguf_writer *w = gguf_writer_new();
        st = bpe_synth_write(&sv, w, &err);
        CHECK(st == SUBQ_OK, "synth write: %s", err.msg);
        gguf_file *f;
        tokenizer *t;
        char name[32];
        snprintf(name, sizeof name, "synth_%zu", k);
        st = load_writer(w, name, &f, &t, &err);
        CHECK(st == SUBQ_OK && t, "synth %s loads: %s", fams[k].pre, err.msg);
        if (t) {
            CHECK(tokenizer_n_vocab(t) == fams[k].n_vocab && tokenizer_add_bos(t) == fams[k].add_bos &&
                      tokenizer_bos(t) == sv.bos, "synth %s facts", fams[k].pre);
            /* No text twice (a duplicate would shadow the earlier id). */
            char **sorted = malloc((size_t)sv.n_vocab * sizeof *sorted);
            memcpy(sorted, sv.tokens, (size_t)sv.n_vocab * sizeof *sorted);
            qsort(sorted, (size_t)sv.n_vocab, sizeof *sorted, cmp_names);
            int dup = 0;
            for (int i = 1; i < sv.n_vocab; i++) dup += strcmp(sorted[i], sorted[i - 1]) == 0;
            free(sorted);
            CHECK(dup == 0, "synth %s: %d duplicate token texts", fams[k].pre, dup);
            /* Frequent words are single tokens (their merges fire). */
            if (sv.n_vocab > 10000) {
                static const char *const words[] = {" the", " and", " people", " Elizabeth", "ing", " The"};
                for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
                    int32_t ids[8];
                    size_t n = 0;
                    tokenizer_encode(t, words[i], strlen(words[i]), false, ids, 8, &n, &err);
                    CHECK(n == 1, "synth %s: '%s' is one token (got %zu)", fams[k].pre, words[i], n);
                }
            }
            /* Specials are matched. */
            int32_t ids[8];
            size_t n = 0;
            tokenizer_encode(t, fams[k].special, strlen(fams[k].special), false, ids, 8, &n, &err);
            CHECK(n == 1 && sv.types[ids[0]] == TOKEN_TYPE_CONTROL, "synth %s: %s is one special", fams[k].pre,
                  fams[k].special);
            if (k == 0) {
                double rate = text_roundtrips(t, "qwen2");
                CHECK(SANITIZED || rate > 2.0, "encode speed %.1f MB/s (want > 2)", rate);
            } else if (k == 1) {
                text_roundtrips(t, "llama3");
            } else if (k == 2) {
                text_roundtrips(t, "smollm");
            } else if (k == 3) {
                text_roundtrips(t, "gpt2-320");
            } else {
                text_roundtrips(t, "gpt-4o");
            }
        }
        tokenizer_free(t);
        gguf_close(f);
        bpe_synth_free(&sv);
    }
    bpe_synth sv;
    subq_error err = {0};
    CHECK(bpe_synth_make(100, "qwen2", &sv, &err) == SUBQ_ERR_ARG && one_line(&err), "too small: %s", err.msg);
    CHECK(bpe_synth_make(1000, "nope", &sv, &err) == SUBQ_ERR_ARG && strstr(err.msg, "nope"), "unknown family");
}

/* Random mixes of awkward pieces: round trip with every pre-tokenizer. */
static void test_random_roundtrips(void) {
    static hand_vocab v;
    hv_build(&v, false);
    static const char *const alpha[] = {
        "a", "the", " ", "  ", "\n", "\r\n", "\t", "'s", "'S", "'ll", "1", "234", "\xC2\xB2",
        "\xE4\xB8\xAD", "\xE6\x96\x87", "\xF0\x9F\x98\x80", "\xE2\x80\x8D", "\xF0\x9F\x91\xA9",
        "\xC3\xA9", "<|im_start|>", "<tool>", "<tool>xy", "ol>z", ".", "!!", "(", "\xE3\x80\x80",
        "\xC2\x85", "\xE1\xA0\x8E", "\xC2\xA0", "\x0B", "\0", "\x7F", "\xEF\xBF\xBF", "zebra",
    };
    int na = (int)(sizeof alpha / sizeof alpha[0]);
    static const char *const pres[] = {"qwen2", "llama-bpe", "gpt2", "smollm", "gpt-4o"};
    for (int k = 0; k < 5; k++) {
        gguf_file *f;
        tokenizer *t;
        subq_error err = {0};
        char name[32];
        snprintf(name, sizeof name, "rand_%d", k);
        if (load_writer(hv_writer(&v, pres[k]), name, &f, &t, &err) != SUBQ_OK || !t) {
            CHECK(false, "random vocab %s: %s", pres[k], err.msg);
            gguf_close(f);
            continue;
        }
        uint64_t rng = rng_seed(42 + (uint64_t)k);
        int bad = 0;
        char buf[1024];
        for (int it = 0; it < 2000; it++) {
            size_t len = 0;
            int m = (int)(rng_next_u64(&rng) % 40);
            for (int j = 0; j < m; j++) {
                const char *s = alpha[rng_next_u64(&rng) % (uint64_t)na];
                size_t l = s[0] ? strlen(s) : 1; /* "\0" is one NUL byte */
                memcpy(buf + len, s, l);
                len += l;
            }
            if (!roundtrip(t, buf, len) && bad++ < 3) fprintf(stderr, "  %s: round trip failed (it %d)\n", pres[k], it);
        }
        CHECK(bad == 0, "pre %s: %d of 2000 random round trips failed", pres[k], bad);
        tokenizer_free(t);
        gguf_close(f);
    }
    hv_free(&v);
}

/* Megabyte-long runs of one class are single words: they must neither trip
 * PCRE2's backtracking limit ("\s*[\r\n]+" scans a whole whitespace run)
 * nor take long. */
static void test_long_runs(void) {
    static hand_vocab v;
    hv_build(&v, false);
    static const char *const unit[] = {" ", " \t", "\n", " \n", "a", "A", ".", "1", "\xE4\xB8\xAD"};
    const size_t len = 1 << 20;
    char *buf = malloc(len + 8);
    static const char *const pres[] = {"qwen2", "llama-bpe", "gpt2", "smollm", "gpt-4o"};
    for (int k = 0; k < 5; k++) {
        gguf_file *f;
        tokenizer *t;
        subq_error err = {0};
        char name[32];
        snprintf(name, sizeof name, "long_%d", k);
        if (load_writer(hv_writer(&v, pres[k]), name, &f, &t, &err) != SUBQ_OK || !t) {
            CHECK(false, "long-run vocab %s: %s", pres[k], err.msg);
            gguf_close(f);
            continue;
        }
        for (size_t u = 0; u < sizeof unit / sizeof unit[0]; u++) {
            size_t ul = strlen(unit[u]), n = 0;
            while (n + ul <= len) memcpy(buf + n, unit[u], ul), n += ul;
            buf[n++] = 'x'; /* a different class at the end */
            double t0 = time_now_s();
            bool ok = roundtrip(t, buf, n);
            double dt = time_now_s() - t0;
            CHECK(ok, "pre %s: 1 MiB run of '%s' round trip", pres[k], unit[u]);
            CHECK(SANITIZED || dt < 5.0, "pre %s: 1 MiB run of '%s' took %.2f s", pres[k], unit[u], dt);
        }
        tokenizer_free(t);
        gguf_close(f);
    }
    free(buf);
    hv_free(&v);
}

int main(void) {
    test_byte_map();
    test_long_runs();
    test_hand_vocab();
    test_bad_metadata();
    test_random_roundtrips();
    test_synth();
    return test_summary();
}
