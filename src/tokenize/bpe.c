/* Byte-level BPE (tokenizer.ggml.model = "gpt2"); see bpe.h for the outline.
 *
 * Pre-split regexes per tokenizer.ggml.pre, as llama.cpp's llama-vocab.cpp
 * spells them (itself adapted from each model's tokenizer.json):
 *   gpt2 / default : OpenAI GPT-2's pattern (with its final |\s+, which
 *                    llama.cpp leaves to its unmatched-text rule: same words;
 *                    llama.cpp's "default" runs four patterns in turn instead)
 *   qwen2          : Qwen2's pattern, (?i:'s|...) spelled out as '[sS]|...
 *   llama3         : Qwen2's pattern with digits in groups of \p{N}{1,3}
 *   smollm         : every \p{N} character on its own, then GPT-2's pattern
 *                    on the spans between (HF: Digits(individual) + ByteLevel)
 *   gpt-4o         : o200k's pattern as llama.cpp rewrites it (see RE_GPT4O)
 * Text that no alternative matches becomes a word of its own (llama.cpp
 * does the same); these patterns cover every character, so it cannot occur.
 * \s is PCRE2's, which matches U+180E too; llama.cpp's does not (every
 * pattern: U+180E then joins a punctuation run there, a space run here).
 *
 * Merging runs on token ids: a word's bytes start as their single-byte
 * tokens; the pair table maps (left id, right id) -> (rank, merged id), and
 * a min-heap keyed (rank, left position) picks the next merge. An entry is
 * stale unless the pair now at its left position still has its rank (a rank
 * names exactly one pair, so that means the same two tokens).
 * This is the priority-queue BPE of HF tokenizers and llama.cpp, which can
 * differ from GPT-2's original "merge every occurrence of the best pair"
 * loop when a merge list uses a token before the merge that creates it.
 *
 * Words repeat a lot in real text, so one encode call memoises the ids of
 * short words in a small hash table (per call: the vocabulary stays
 * read-only and may be shared between threads). */
#include "tokenize/bpe.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "tokenize/merge_heap.h"
#include "tokenize/tokenizer.h"
#include "tokenize/utf8.h"
#include "tokenize/vocab_gguf.h"

/* Same bounds as the SentencePiece loader (see tokenizer.c). */
#define BPE_MAX_VOCAB (1 << 24)
#define BPE_MAX_TOKEN_LEN (1 << 16)
#define BPE_MAX_TEXT ((size_t)INT32_MAX - 8)
/* Words up to this many bytes are memoised during one encode call. */
#define BPE_CACHE_WORD_MAX 48

/* ---- pre-tokenizer regexes ------------------------------------------------- */

static const char RE_GPT2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char RE_QWEN2[] =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RE_LLAMA3[] =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/* GPT-4o (o200k; Phi-4-mini). tokenizer.json has
 *   [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|...)?
 *   |[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|...)?
 *   |\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * llama.cpp runs its own rewrite instead, with "upper" = ((?=\p{L})[^a-z])
 * and "lower" = ((?=\p{L})[^A-Z]), on text where each non-ASCII character
 * is one byte for its category. So, unlike HF, only ASCII letters have a
 * case: any other letter is in both classes ("ÉCOLE" -> "É" "COLE", where
 * HF keeps one word), combining marks (\p{M}) are in neither (they end a
 * word and join the punctuation run), and the contraction suffix is ASCII
 * [sS] etc. rather than Unicode (?i). We follow llama.cpp: "upper" is
 * [^\P{L}a-z] (a letter, not a-z), "lower" [^\P{L}A-Z]; single classes,
 * not lookahead groups, so a long run costs no backtracking frames. */
static const char RE_GPT4O[] =
    "[^\\r\\n\\p{L}\\p{N}]?[^\\P{L}a-z]*[^\\P{L}A-Z]+"
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|"
    "[^\\r\\n\\p{L}\\p{N}]?[^\\P{L}a-z]+[^\\P{L}A-Z]*"
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RE_DIGIT[] = "\\p{N}";

typedef struct bpe_pre_def {
    const char *name;     /* value of tokenizer.ggml.pre */
    const char *canon;    /* what bpe_pre_name reports */
    const char *re_main;
    const char *re_isolate; /* matches become words of their own first; NULL: none */
    bool ignore_merges;   /* a word that is itself a token is emitted whole (Llama 3) */
    bool add_bos;         /* default of tokenizer.ggml.add_bos_token */
} bpe_pre_def;

static const bpe_pre_def pre_defs[] = {
    {"default", "gpt2", RE_GPT2, NULL, false, false},
    {"gpt2", "gpt2", RE_GPT2, NULL, false, false},
    {"gpt-2", "gpt2", RE_GPT2, NULL, false, false},
    {"qwen2", "qwen2", RE_QWEN2, NULL, false, false},
    {"llama-bpe", "llama3", RE_LLAMA3, NULL, true, true},
    {"llama3", "llama3", RE_LLAMA3, NULL, true, true},
    {"llama-v3", "llama3", RE_LLAMA3, NULL, true, true},
    {"smollm", "smollm", RE_GPT2, RE_DIGIT, false, false},
    {"gpt-4o", "gpt-4o", RE_GPT4O, NULL, false, false},
};
#define PRE_SUPPORTED "default, gpt2, gpt-2, qwen2, llama-bpe, llama3, llama-v3, smollm, gpt-4o"

/* ---- GPT-2 bytes_to_unicode ------------------------------------------------
 * Printable Latin-1 bytes ('!'..'~', 0xA1..0xAC, 0xAE..0xFF) stand for
 * themselves; the other 68 bytes, in increasing order, for U+0100.. U+0143. */

uint32_t bpe_byte_to_cp(uint8_t b) {
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) return b;
    if (b <= 0x20) return 0x100u + b;                  /* 33 bytes: U+0100..U+0120 */
    if (b >= 0x7F && b <= 0xA0) return 0x121u + (b - 0x7F); /* 34 bytes: U+0121..U+0142 */
    return 0x143;                                      /* 0xAD */
}

int bpe_cp_to_byte(uint32_t cp) {
    if ((cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF))
        return (int)cp;
    if (cp >= 0x100 && cp <= 0x120) return (int)(cp - 0x100);
    if (cp >= 0x121 && cp <= 0x142) return (int)(cp - 0x121 + 0x7F);
    if (cp == 0x143) return 0xAD;
    return -1;
}

/* UTF-8 of the code point standing for byte b (all are < U+0800). */
static int byte_utf8(uint8_t b, char out[2]) {
    uint32_t cp = bpe_byte_to_cp(b);
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

/* ---- the vocabulary ---------------------------------------------------------- */

/* One merge in the pair table. */
typedef struct bpe_pair {
    uint64_t key;                  /* left << 32 | right; UINT64_MAX empty */
    int32_t rank, res;
} bpe_pair;

struct bpe_vocab {
    int n_vocab;
    int bos, eos, unk, pad;        /* -1 when absent */
    bool add_bos;
    const bpe_pre_def *pre;

    vocab_texts v;                 /* token texts (byte alphabet / raw for specials), types, text -> id */

    int n_merges;
    bpe_pair *pairs;               /* (left, right) -> (rank, result), open addressing */
    size_t pair_mask;

    int32_t byte_tok[256];         /* token of each single byte, -1 if none */

    int32_t *special;              /* CONTROL/USER_DEFINED ids by (first byte, length desc, id) */
    int n_special;
    int32_t special_start[257];    /* special[special_start[c] .. [c + 1]) start with byte c */

    pcre2_code *re_main, *re_isolate;
};

static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 31;
    x *= 0x7fb5d329728ea185ull;
    x ^= x >> 27;
    x *= 0x81dadef4bc2dd44dull;
    x ^= x >> 33;
    return x;
}

/* Rank and result of merging (l, r); false if no merge joins them. */
static inline bool pair_find(const bpe_vocab *b, int32_t l, int32_t r, int32_t *rank,
                             int32_t *res) {
    uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
    size_t i = (size_t)mix64(key) & b->pair_mask;
    for (;;) {
        uint64_t k = b->pairs[i].key;
        if (k == key) {
            *rank = b->pairs[i].rank;
            *res = b->pairs[i].res;
            return true;
        }
        if (k == UINT64_MAX) return false;
        i = (i + 1) & b->pair_mask;
    }
}

/* First occurrence wins (llama.cpp keeps the first rank of a repeated pair). */
static void pair_insert(bpe_vocab *b, int32_t l, int32_t r, int32_t rank, int32_t res) {
    uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
    size_t i = (size_t)mix64(key) & b->pair_mask;
    for (;;) {
        uint64_t k = b->pairs[i].key;
        if (k == key) return;
        if (k == UINT64_MAX) {
            b->pairs[i] = (bpe_pair){key, rank, res};
            return;
        }
        i = (i + 1) & b->pair_mask;
    }
}

/* ---- loading ------------------------------------------------------------------ */

/* Printable copy of at most 48 bytes of s (non-printable bytes as '?'), so a
 * hostile string cannot break a one-line message. */
static const char *printable(const char *s, size_t n, char buf[64]) {
    size_t m = n < 48 ? n : 48;
    for (size_t i = 0; i < m; i++) {
        unsigned char c = (unsigned char)s[i];
        buf[i] = (c >= 0x20 && c < 0x7F) ? (char)c : '?';
    }
    if (n > m) memcpy(buf + m, "...", 3), m += 3;
    buf[m] = '\0';
    return buf;
}

static subq_status compile_re(const char *pattern, pcre2_code **out, subq_error *err) {
    int code = 0;
    PCRE2_SIZE off = 0;
    *out = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &code,
                         &off, NULL);
    if (!*out) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(code, msg, sizeof msg);
        return subq_fail(err, SUBQ_ERR_UNSUPPORTED,
                         "cannot compile the pre-tokenizer regex at offset %zu: %s (PCRE2 %d)",
                         (size_t)off, (const char *)msg, code);
    }
    /* The JIT is several times faster; without it (not built in, no
     * executable memory) pcre2_match interprets the same pattern. */
    (void)pcre2_jit_compile(*out, PCRE2_JIT_COMPLETE);
    return SUBQ_OK;
}

/* Order specials by (first byte, length desc, id): insertion sort per
 * bucket; there are few specials (tens to a few hundred). */
static void sort_specials(bpe_vocab *b) {
    int32_t *s = b->special;
    for (int i = 1; i < b->n_special; i++) {
        int32_t x = s[i];
        uint8_t cx = (uint8_t)vocab_text(&b->v, x)[0];
        size_t lx = vocab_len(&b->v, x);
        int j = i - 1;
        for (; j >= 0; j--) {
            int32_t y = s[j];
            uint8_t cy = (uint8_t)vocab_text(&b->v, y)[0];
            size_t ly = vocab_len(&b->v, y);
            bool after = cy > cx || (cy == cx && (ly < lx || (ly == lx && y > x)));
            if (!after) break;
            s[j + 1] = y;
        }
        s[j + 1] = x;
    }
    int k = 0;
    for (int c = 0; c <= 256; c++) {
        while (k < b->n_special && (uint8_t)vocab_text(&b->v, s[k])[0] < c) k++;
        b->special_start[c] = k;
    }
}

subq_status bpe_from_gguf(const gguf_file *f, bpe_vocab **out, subq_error *err) {
    if (!out) return subq_fail(err, SUBQ_ERR_ARG, "bpe_from_gguf: out is NULL");
    *out = NULL;
    if (!f) return subq_fail(err, SUBQ_ERR_ARG, "bpe_from_gguf: file is NULL");
    subq_status st;

    /* Pre-tokenizer first: an unsupported one is the most useful message. */
    const bpe_pre_def *pre = &pre_defs[0];
    const gguf_kv *pkv = gguf_find_kv(f, "tokenizer.ggml.pre");
    if (pkv) {
        if (pkv->value.type != GGUF_TYPE_STRING)
            return subq_fail(err, SUBQ_ERR_FORMAT,
                             "tokenizer.ggml.pre has type %s, expected string",
                             gguf_type_name(pkv->value.type));
        gguf_str p = pkv->value.v.str;
        pre = NULL;
        for (size_t i = 0; i < sizeof pre_defs / sizeof pre_defs[0]; i++) {
            if (p.len == strlen(pre_defs[i].name) && memcmp(p.data, pre_defs[i].name, p.len) == 0) {
                pre = &pre_defs[i];
                break;
            }
        }
        if (!pre) {
            char buf[64];
            return subq_fail(err, SUBQ_ERR_UNSUPPORTED,
                             "pre-tokenizer tokenizer.ggml.pre = '%s' is not supported "
                             "(supported: %s)",
                             printable(p.data, (size_t)p.len, buf), PRE_SUPPORTED);
        }
    }

    /* Tokens and types. */
    const gguf_value *toks = NULL, *types = NULL;
    int n = 0;
    if ((st = vocab_tokens_arr(f, BPE_MAX_VOCAB, &toks, &n, err)) != SUBQ_OK) return st;
    if ((st = vocab_types_arr(f, n, &types, err)) != SUBQ_OK) return st;

    /* Merges (required: without them byte-level BPE is just bytes). */
    if (!gguf_find_kv(f, "tokenizer.ggml.merges"))
        return subq_fail(err, SUBQ_ERR_FORMAT,
                         "missing key tokenizer.ggml.merges (needed by gpt2 vocabularies)");
    const gguf_value *merges = NULL;
    if ((st = gguf_get_arr(f, "tokenizer.ggml.merges", GGUF_TYPE_STRING, &merges, err)) != SUBQ_OK)
        return st;
    if (merges->v.arr.n > BPE_MAX_VOCAB)
        return subq_fail(err, SUBQ_ERR_FORMAT, "tokenizer.ggml.merges has %llu entries (max %d)",
                         (unsigned long long)merges->v.arr.n, BPE_MAX_VOCAB);
    int n_merges = (int)merges->v.arr.n;

    int bos, eos, unk, pad;
    if ((st = vocab_special_id(f, "tokenizer.ggml.bos_token_id", n, &bos, err)) != SUBQ_OK) return st;
    if ((st = vocab_special_id(f, "tokenizer.ggml.eos_token_id", n, &eos, err)) != SUBQ_OK) return st;
    if ((st = vocab_special_id(f, "tokenizer.ggml.unknown_token_id", n, &unk, err)) != SUBQ_OK) return st;
    if ((st = vocab_special_id(f, "tokenizer.ggml.padding_token_id", n, &pad, err)) != SUBQ_OK) return st;
    bool add_bos = pre->add_bos;
    if ((st = gguf_get_bool_or(f, "tokenizer.ggml.add_bos_token", pre->add_bos, &add_bos, err)) !=
        SUBQ_OK)
        return st;
    if (add_bos && bos < 0)
        return subq_fail(err, SUBQ_ERR_FORMAT,
                         "tokenizer.ggml.add_bos_token is true but there is no bos_token_id");

    bpe_vocab *b = calloc(1, sizeof *b);
    if (!b) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory allocating the tokenizer");
    b->n_vocab = n;
    b->bos = bos, b->eos = eos, b->unk = unk, b->pad = pad;
    b->add_bos = add_bos;
    b->pre = pre;
    b->n_merges = n_merges;
    char *mbuf = NULL;
    if ((st = vocab_texts_load(toks, types, n, BPE_MAX_TOKEN_LEN, &b->v, err)) != SUBQ_OK) goto fail;

    size_t pcap = 1;
    while (pcap < (size_t)n_merges * 2 + 2) pcap <<= 1;
    b->pair_mask = pcap - 1;
    b->pairs = malloc(pcap * sizeof *b->pairs);
    b->special = malloc((size_t)n * sizeof *b->special);
    if (!b->pairs || !b->special) {
        st = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory loading a vocabulary of %d tokens", n);
        goto fail;
    }

    /* Single-byte symbols. */
    for (int c = 0; c < 256; c++) {
        char u[2];
        int l = byte_utf8((uint8_t)c, u);
        b->byte_tok[c] = vocab_lookup(&b->v, u, (size_t)l);
    }

    /* Merges "A B" -> (id(A), id(B)) with rank = index and result id(AB). */
    memset(b->pairs, 0xFF, pcap * sizeof *b->pairs); /* every key UINT64_MAX */
    size_t mcap = 0;
    for (int i = 0; i < n_merges; i++) {
        gguf_str m = merges->v.arr.items[i].v.str;
        char pb[64], qb[64];
        size_t sp = 1; /* as llama.cpp: the first space after the first byte */
        while (sp < m.len && m.data[sp] != ' ') sp++;
        if (m.len < 3 || sp >= m.len - 1) {
            st = subq_fail(err, SUBQ_ERR_FORMAT,
                           "tokenizer.ggml.merges[%d] = '%s' is not two tokens separated by a "
                           "space",
                           i, printable(m.data, (size_t)m.len, pb));
            goto fail;
        }
        const char *rs = m.data + sp + 1;
        size_t ln = sp, rn = (size_t)m.len - sp - 1;
        int32_t l = vocab_lookup(&b->v, m.data, ln), r = vocab_lookup(&b->v, rs, rn);
        if (l < 0 || r < 0) {
            st = subq_fail(err, SUBQ_ERR_FORMAT,
                           "tokenizer.ggml.merges[%d] = '%s' names '%s', which is not a token", i,
                           printable(m.data, (size_t)m.len, pb),
                           l < 0 ? printable(m.data, ln, qb) : printable(rs, rn, qb));
            goto fail;
        }
        if (ln + rn > mcap) {
            size_t nc = (ln + rn) * 2;
            char *nb = realloc(mbuf, nc);
            if (!nb) {
                st = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory loading merges");
                goto fail;
            }
            mbuf = nb, mcap = nc;
        }
        memcpy(mbuf, m.data, ln);
        memcpy(mbuf + ln, rs, rn);
        int32_t res = vocab_lookup(&b->v, mbuf, ln + rn);
        if (res < 0) {
            st = subq_fail(err, SUBQ_ERR_FORMAT,
                           "tokenizer.ggml.merges[%d] = '%s' makes '%s', which is not a token", i,
                           printable(m.data, (size_t)m.len, pb), printable(mbuf, ln + rn, qb));
            goto fail;
        }
        pair_insert(b, l, r, (int32_t)i, res);
    }
    free(mbuf);
    mbuf = NULL;

    /* Special tokens, matched in the raw text before the pre-split. Only
     * canonical ids (a duplicate text maps to its last id) and valid UTF-8
     * texts: a match then starts and ends on character boundaries, so the
     * spans left for the regex stay valid UTF-8. */
    b->n_special = 0;
    for (int i = 0; i < n; i++) {
        if (b->v.type[i] != TOKEN_TYPE_CONTROL && b->v.type[i] != TOKEN_TYPE_USER_DEFINED) continue;
        size_t len = vocab_len(&b->v, i);
        const char *s = vocab_text(&b->v, i);
        if (len == 0 || utf8_validate(s, len) != len || vocab_lookup(&b->v, s, len) != i) continue;
        b->special[b->n_special++] = i;
    }
    sort_specials(b);

    /* Decoded pieces. */
    size_t poff = 0;
    for (int i = 0; i < n; i++) {
        const char *s = vocab_text(&b->v, i);
        size_t len = vocab_len(&b->v, i);
        int ty = b->v.type[i];
        b->v.piece_off[i] = poff;
        if (ty == TOKEN_TYPE_UNKNOWN || ty == TOKEN_TYPE_UNUSED ||
            (ty == TOKEN_TYPE_CONTROL && (i == bos || i == eos))) {
            /* nothing: BOS/EOS/unk are not text; UNUSED are padding ("[PAD151665]"
             * in Qwen files), which llama.cpp prints as nothing too */
        } else if (ty == TOKEN_TYPE_CONTROL || ty == TOKEN_TYPE_USER_DEFINED) {
            memcpy(b->v.piece + poff, s, len); /* matched in raw text, so stored raw */
            poff += len;
        } else {
            /* Each character of the byte alphabet -> its byte; anything else
             * (not produced by a GPT-2 style converter) is copied as is. */
            for (size_t j = 0; j < len;) {
                uint32_t cp = 0;
                int cl = utf8_decode((const uint8_t *)s + j, len - j, &cp);
                int byte = cl > 0 ? bpe_cp_to_byte(cp) : -1;
                if (byte >= 0) {
                    b->v.piece[poff++] = (char)byte;
                    j += (size_t)cl;
                } else {
                    size_t k = cl > 0 ? (size_t)cl : 1;
                    memcpy(b->v.piece + poff, s + j, k);
                    poff += k, j += k;
                }
            }
        }
    }
    b->v.piece_off[n] = poff;

    if ((st = compile_re(pre->re_main, &b->re_main, err)) != SUBQ_OK) goto fail;
    if (pre->re_isolate && (st = compile_re(pre->re_isolate, &b->re_isolate, err)) != SUBQ_OK)
        goto fail;

    *out = b;
    return SUBQ_OK;
fail:
    free(mbuf);
    bpe_free(b);
    return st;
}

void bpe_free(bpe_vocab *b) {
    if (!b) return;
    vocab_texts_free(&b->v);
    free(b->pairs);
    free(b->special);
    pcre2_code_free(b->re_main);
    pcre2_code_free(b->re_isolate);
    free(b);
}

int bpe_n_vocab(const bpe_vocab *b) { return b->n_vocab; }
int bpe_bos(const bpe_vocab *b) { return b->bos; }
int bpe_eos(const bpe_vocab *b) { return b->eos; }
bool bpe_add_bos(const bpe_vocab *b) { return b->add_bos; }
const char *bpe_pre_name(const bpe_vocab *b) { return b->pre->canon; }

const char *bpe_piece(const bpe_vocab *b, int32_t tok, size_t *n) {
    *n = b->v.piece_off[tok + 1] - b->v.piece_off[tok];
    return b->v.piece + b->v.piece_off[tok];
}

/* ---- encode -------------------------------------------------------------------- */

typedef struct bpe_sym {
    int32_t tok;  /* -1: a byte without a token; -2: merged into its left neighbour */
    int32_t prev, next;
} bpe_sym;

/* Memo of short words -> ids for one encode call: open addressing over
 * entries whose bytes and ids live in two growing pools. */
typedef struct bpe_centry {
    uint32_t word_off, ids_off;
    uint8_t word_len, n_ids; /* both <= BPE_CACHE_WORD_MAX */
} bpe_centry;

typedef struct bpe_cache {
    uint32_t *slot; /* 0 empty, else entry index + 1 */
    size_t mask;
    bpe_centry *ent;
    size_t n, ent_cap;
    char *words;
    size_t words_n, words_cap;
    int32_t *ids;
    size_t ids_n, ids_cap;
} bpe_cache;

typedef struct bpe_work {
    const bpe_vocab *b;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    bpe_sym *sym;
    size_t sym_cap;
    merge_heap heap;         /* candidate merges: score = -rank */
    char *mapped;          /* word in the byte alphabet (whole-word lookup) */
    size_t mapped_cap;
    int32_t *out;
    size_t cap, count;
    bpe_cache cache;
} bpe_work;

static inline void emit(bpe_work *w, int32_t id) {
    if (w->count < w->cap) w->out[w->count] = id;
    w->count++;
}

static bool try_pair(bpe_work *w, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return true;
    int32_t lt = w->sym[left].tok, rt = w->sym[right].tok, res;
    if (lt < 0 || rt < 0) return true;
    int32_t rank;
    if (!pair_find(w->b, lt, rt, &rank, &res)) return true;
    merge_cand c = {.score = -(float)rank, .left = left, .size = rank};
    return merge_heap_push(&w->heap, c);
}

static subq_status emit_byte(bpe_work *w, uint8_t c, subq_error *err) {
    int32_t id = w->b->byte_tok[c] >= 0 ? w->b->byte_tok[c] : w->b->unk;
    if (id < 0)
        return subq_fail(err, SUBQ_ERR_TOKENIZE,
                         "no token for byte 0x%02X (no byte token and no unknown token)", c);
    emit(w, id);
    return SUBQ_OK;
}

/* Merge one word (raw bytes s[0..n), n > 0) and emit its ids. */
static subq_status bpe_merge_word(bpe_work *w, const uint8_t *s, size_t n, subq_error *err) {
    const bpe_vocab *b = w->b;
    if (b->pre->ignore_merges) {
        /* Llama 3: a word that is a token is taken whole, even when the
         * merges would not build it. */
        if (2 * n > w->mapped_cap) {
            size_t c = w->mapped_cap ? w->mapped_cap : 256;
            while (c < 2 * n) c *= 2;
            char *m = realloc(w->mapped, c);
            if (!m) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory tokenising");
            w->mapped = m, w->mapped_cap = c;
        }
        size_t mn = 0;
        for (size_t i = 0; i < n; i++) mn += (size_t)byte_utf8(s[i], w->mapped + mn);
        int32_t id = vocab_lookup(&b->v, w->mapped, mn);
        if (id >= 0) {
            emit(w, id);
            return SUBQ_OK;
        }
    }
    if (n == 1) return emit_byte(w, s[0], err);

    if (n > w->sym_cap) {
        size_t c = w->sym_cap ? w->sym_cap : 256;
        while (c < n) c *= 2;
        bpe_sym *sym = realloc(w->sym, c * sizeof *sym);
        if (!sym) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory tokenising");
        w->sym = sym, w->sym_cap = c;
    }
    bpe_sym *sym = w->sym;
    for (size_t i = 0; i < n; i++) {
        sym[i].tok = b->byte_tok[s[i]];
        sym[i].prev = (int32_t)i - 1;
        sym[i].next = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    w->heap.n = 0;
    for (size_t i = 1; i < n; i++)
        if (!try_pair(w, (int32_t)i - 1, (int32_t)i)) goto nomem;
    while (w->heap.n > 0) {
        merge_cand c = merge_heap_pop(&w->heap);
        bpe_sym *l = &sym[c.left];
        int32_t rank, res;
        if (l->tok < 0 || l->next < 0) continue; /* merged away, or nothing to its right now */
        bpe_sym *r = &sym[l->next];
        if (r->tok < 0 || !pair_find(b, l->tok, r->tok, &rank, &res) || rank != c.size)
            continue; /* stale: a side changed since the entry was queued */
        l->tok = res;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = c.left;
        r->tok = -2;
        if (!try_pair(w, l->prev, c.left) || !try_pair(w, c.left, l->next)) goto nomem;
    }
    /* Symbol 0 is never absorbed (merges fold right into left). A symbol
     * still at -1 is a byte no token stands for (it never merged). */
    for (int32_t i = 0; i >= 0; i = sym[i].next) {
        if (sym[i].tok >= 0) {
            emit(w, sym[i].tok);
        } else {
            subq_status st = emit_byte(w, s[i], err);
            if (st != SUBQ_OK) return st;
        }
    }
    return SUBQ_OK;
nomem:
    return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory tokenising");
}

/* Cached word: ids of a word seen earlier in this call, or NULL. */
static const int32_t *cache_get(const bpe_cache *c, const char *s, size_t n, uint64_t h,
                                size_t *n_ids) {
    if (!c->slot) return NULL;
    for (size_t i = (size_t)h & c->mask;; i = (i + 1) & c->mask) {
        uint32_t e = c->slot[i];
        if (e == 0) return NULL;
        const bpe_centry *en = &c->ent[e - 1];
        if (en->word_len == n && memcmp(c->words + en->word_off, s, n) == 0) {
            *n_ids = en->n_ids;
            return c->ids + en->ids_off;
        }
    }
}

static bool grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 1024;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return false;
    *p = q, *cap = c;
    return true;
}

/* Remember word -> ids. Failing to allocate only loses the memo. */
static void cache_put(bpe_cache *c, const char *s, size_t n, uint64_t h, const int32_t *ids,
                      size_t n_ids) {
    if (c->n >= (1u << 18)) return; /* bounds memory (< 64 MiB); a book has ~30K distinct words */
    if (!c->slot || 2 * (c->n + 1) > c->mask + 1) {
        size_t cap = c->slot ? 2 * (c->mask + 1) : 4096;
        uint32_t *slot = calloc(cap, sizeof *slot);
        if (!slot) return;
        for (size_t e = 0; e < c->n; e++) { /* rehash */
            const bpe_centry *en = &c->ent[e];
            size_t i = (size_t)vocab_hash(c->words + en->word_off, en->word_len) & (cap - 1);
            while (slot[i]) i = (i + 1) & (cap - 1);
            slot[i] = (uint32_t)e + 1;
        }
        free(c->slot);
        c->slot = slot, c->mask = cap - 1;
    }
    if (!grow((void **)&c->ent, &c->ent_cap, c->n + 1, sizeof *c->ent) ||
        !grow((void **)&c->words, &c->words_cap, c->words_n + n, 1) ||
        !grow((void **)&c->ids, &c->ids_cap, c->ids_n + n_ids, sizeof *c->ids))
        return;
    bpe_centry *en = &c->ent[c->n];
    en->word_off = (uint32_t)c->words_n, en->ids_off = (uint32_t)c->ids_n;
    en->word_len = (uint8_t)n, en->n_ids = (uint8_t)n_ids;
    memcpy(c->words + c->words_n, s, n);
    memcpy(c->ids + c->ids_n, ids, n_ids * sizeof *ids);
    c->words_n += n, c->ids_n += n_ids;
    size_t i = (size_t)h & c->mask;
    while (c->slot[i]) i = (i + 1) & c->mask;
    c->slot[i] = (uint32_t)++c->n;
}

static void cache_free(bpe_cache *c) {
    free(c->slot);
    free(c->ent);
    free(c->words);
    free(c->ids);
}

static subq_status bpe_word(bpe_work *w, const char *s, size_t n, subq_error *err) {
    if (n == 0) return SUBQ_OK;
    if (n == 1 || n > BPE_CACHE_WORD_MAX) return bpe_merge_word(w, (const uint8_t *)s, n, err);
    uint64_t h = vocab_hash(s, n);
    size_t n_ids = 0;
    const int32_t *ids = cache_get(&w->cache, s, n, h, &n_ids);
    if (ids) {
        for (size_t i = 0; i < n_ids; i++) emit(w, ids[i]);
        return SUBQ_OK;
    }
    /* Merge into a local buffer first: the caller's buffer may be full. */
    int32_t local[BPE_CACHE_WORD_MAX];
    int32_t *out = w->out;
    size_t cap = w->cap, count = w->count;
    w->out = local, w->cap = BPE_CACHE_WORD_MAX, w->count = 0;
    subq_status st = bpe_merge_word(w, (const uint8_t *)s, n, err);
    size_t got = w->count; /* <= n <= BPE_CACHE_WORD_MAX: one id per byte at most */
    w->out = out, w->cap = cap, w->count = count;
    if (st != SUBQ_OK) return st;
    for (size_t i = 0; i < got; i++) emit(w, local[i]);
    cache_put(&w->cache, s, n, h, local, got);
    return SUBQ_OK;
}

static subq_status re_fail(int rc, size_t at, subq_error *err) {
    PCRE2_UCHAR msg[160];
    pcre2_get_error_message(rc, msg, sizeof msg);
    return subq_fail(err, SUBQ_ERR_TOKENIZE, "pre-tokenizer regex failed at byte %zu: %s", at,
                     (const char *)msg);
}

/* Length of the UTF-8 character at s (s valid, n > 0). */
static size_t char_len(const char *s, size_t n) {
    size_t l = 1;
    while (l < n && ((uint8_t)s[l] & 0xC0) == 0x80) l++;
    return l;
}

/* Cut s[0..n) into words with `re` and merge each. `base` is s's offset in
 * the text, for messages. */
static subq_status split_words(bpe_work *w, const pcre2_code *re, const char *s, size_t n,
                               size_t base, subq_error *err) {
    size_t off = 0;
    subq_status st;
    while (off < n) {
        int rc = pcre2_match(re, (PCRE2_SPTR)s, n, off, PCRE2_NO_UTF_CHECK, w->md, w->mctx);
        if (rc == PCRE2_ERROR_NOMATCH) return bpe_word(w, s + off, n - off, err);
        if (rc < 0) return re_fail(rc, base + off, err);
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(w->md);
        size_t ms = (size_t)ov[0], me = (size_t)ov[1];
        if (ms < off || me < ms || me > n) return re_fail(PCRE2_ERROR_INTERNAL, base + off, err);
        if (ms > off && (st = bpe_word(w, s + off, ms - off, err)) != SUBQ_OK) return st;
        if (me == ms) me = ms + char_len(s + ms, n - ms); /* empty match: take one character */
        if ((st = bpe_word(w, s + ms, me - ms, err)) != SUBQ_OK) return st;
        off = me;
    }
    return SUBQ_OK;
}

/* Pre-split one span of text without special tokens. */
static subq_status split_span(bpe_work *w, const char *s, size_t n, size_t base, subq_error *err) {
    const bpe_vocab *b = w->b;
    if (!b->re_isolate) return split_words(w, b->re_main, s, n, base, err);
    /* Isolated matches are words; the main pattern sees each gap alone. */
    size_t off = 0;
    subq_status st;
    while (off < n) {
        int rc =
            pcre2_match(b->re_isolate, (PCRE2_SPTR)s, n, off, PCRE2_NO_UTF_CHECK, w->md, w->mctx);
        if (rc == PCRE2_ERROR_NOMATCH)
            return split_words(w, b->re_main, s + off, n - off, base + off, err);
        if (rc < 0) return re_fail(rc, base + off, err);
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(w->md);
        size_t ms = (size_t)ov[0], me = (size_t)ov[1];
        if (ms < off || me < ms || me > n) return re_fail(PCRE2_ERROR_INTERNAL, base + off, err);
        if (ms > off &&
            (st = split_words(w, b->re_main, s + off, ms - off, base + off, err)) != SUBQ_OK)
            return st;
        if (me == ms) me = ms + char_len(s + ms, n - ms);
        if ((st = bpe_word(w, s + ms, me - ms, err)) != SUBQ_OK) return st;
        off = me;
    }
    return SUBQ_OK;
}

/* Leftmost special token at or after `from` (the longest one there):
 * returns its start, or len if there is none. */
static size_t find_special(const bpe_vocab *b, const char *text, size_t len, size_t from,
                           int32_t *id, size_t *n) {
    for (size_t i = from; i < len; i++) {
        uint8_t c = (uint8_t)text[i];
        int32_t k0 = b->special_start[c], k1 = b->special_start[c + 1];
        for (int32_t k = k0; k < k1; k++) {
            int32_t s = b->special[k];
            size_t l = vocab_len(&b->v, s);
            if (l <= len - i && memcmp(text + i, vocab_text(&b->v, s), l) == 0) {
                *id = s, *n = l;
                return i;
            }
        }
    }
    return len;
}

subq_status bpe_encode(const bpe_vocab *b, const char *text, size_t len, int32_t *out, size_t cap,
                       size_t *count, subq_error *err) {
    if (len > BPE_MAX_TEXT)
        return subq_fail(err, SUBQ_ERR_ARG, "text of %zu bytes is too long to tokenise", len);
    bpe_work w = {0};
    w.b = b;
    w.out = out, w.cap = cap, w.count = *count;
    /* One match block serves both patterns (only the whole match is used). */
    w.md = pcre2_match_data_create(4, NULL);
    /* PCRE2's default match limit (10^7) trips on valid text: "\s*[\r\n]+"
     * backtracks over a whole whitespace run before the next alternative
     * takes it. Every alternative here is a run of one class, so a match
     * costs time linear in the run it covers: no limit is needed. */
    w.mctx = pcre2_match_context_create(NULL);
    if (!w.md || !w.mctx) {
        pcre2_match_data_free(w.md);
        pcre2_match_context_free(w.mctx);
        return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory tokenising");
    }
    pcre2_set_match_limit(w.mctx, UINT32_MAX);
    subq_status st = SUBQ_OK;
    size_t pos = 0;
    while (pos < len && st == SUBQ_OK) {
        int32_t sid = -1;
        size_t sn = 0;
        size_t s = find_special(b, text, len, pos, &sid, &sn);
        if (s > pos) st = split_span(&w, text + pos, s - pos, pos, err);
        if (st == SUBQ_OK && s < len) emit(&w, sid);
        pos = s + sn;
    }
    pcre2_match_data_free(w.md);
    pcre2_match_context_free(w.mctx);
    cache_free(&w.cache);
    free(w.sym);
    merge_heap_free(&w.heap);
    free(w.mapped);
    if (st == SUBQ_OK) *count = w.count;
    return st;
}
