/* Deterministic byte-level BPE vocabularies for synthetic models (see bpe_synth.h).
 *
 * Layout: ids 0..255 are the byte symbols in GPT-2's order (the printable
 * bytes '!'..'~', 0xA1..0xAC, 0xAE..0xFF, then the others), as in the real
 * GPT-2 / Qwen / Llama 3 vocabularies; then one token per merge, in rank
 * order; then the family's special tokens (CONTROL). Every merge "A B" joins
 * two existing tokens into a new one (a token is made before any merge uses
 * it). A word is added by first running BPE over it with the merges so far
 * and then joining the resulting pieces left to right with new merges, so
 * that encoding the word really gives the new token; fill merges are only
 * taken when BPE of "A"+"B" ends in exactly A, B (while that still finds
 * enough candidates).
 * Stages, each only while room is left: frequent English letter pairs,
 * " "+letter, frequent words (bare, " w", " W"), whitespace runs, punctuation
 * and code pieces, a few CJK characters and emoji, digit pairs and triples,
 * then "prefix + letters" merges of existing tokens until the count is
 * reached. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "lab/bpe_synth.h"
#include "tokenize/bpe.h"
#include "tokenize/tokenizer.h"
#include "tokenize/vocab_gguf.h"

#define SYN_MAX_FILL_LEN 24 /* fill merges make tokens of at most this many bytes */
#define SYN_MAX_WORD 64     /* longest word syn_bpe segments */

typedef struct syn {
    char **tok;
    int32_t *type;
    int n, limit;        /* tokens so far; merges stop at `limit` (room for the specials) */
    char **merge;
    int n_merges;
    int32_t *map;        /* text -> id, open addressing, -1 empty */
    size_t mask;
    uint64_t *pkey;      /* merge (a << 32 | b), UINT64_MAX empty; same capacity as map */
    int32_t *pres;       /* merged id; ids grow with the rank, so the lowest id is the best merge */
    int32_t byte_tok[256];
    bool oom;
} syn;

static int32_t syn_find(const syn *v, const char *s, size_t n) {
    for (size_t i = (size_t)vocab_hash(s, n) & v->mask;; i = (i + 1) & v->mask) {
        int32_t id = v->map[i];
        if (id < 0) return -1;
        if (strlen(v->tok[id]) == n && memcmp(v->tok[id], s, n) == 0) return id;
    }
}

static int32_t syn_add(syn *v, const char *s, size_t n, int32_t type) {
    char *c = malloc(n + 1);
    if (!c) {
        v->oom = true;
        return -1;
    }
    memcpy(c, s, n);
    c[n] = '\0';
    int32_t id = v->n++;
    v->tok[id] = c;
    v->type[id] = type;
    size_t i = (size_t)vocab_hash(s, n) & v->mask;
    while (v->map[i] >= 0) i = (i + 1) & v->mask;
    v->map[i] = id;
    return id;
}

static inline size_t syn_pslot(uint64_t key, size_t mask) {
    key ^= key >> 31;
    key *= 0x7fb5d329728ea185ull;
    key ^= key >> 27;
    return (size_t)key & mask;
}

/* Result of the merge "a b", or -1. */
static int32_t syn_pair(const syn *v, int32_t a, int32_t b) {
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (size_t i = syn_pslot(key, v->mask);; i = (i + 1) & v->mask) {
        if (v->pkey[i] == key) return v->pres[i];
        if (v->pkey[i] == UINT64_MAX) return -1;
    }
}

/* BPE of the raw bytes s[0..n) (n <= SYN_MAX_WORD) with the merges so far:
 * the pieces go to seg, their count is returned. O(n^2), words are short. */
static int syn_bpe(const syn *v, const uint8_t *s, int n, int32_t *seg) {
    int32_t res[SYN_MAX_WORD]; /* res[i]: merge of seg[i], seg[i+1], or -1 */
    for (int i = 0; i < n; i++) seg[i] = v->byte_tok[s[i]];
    for (int i = 0; i + 1 < n; i++) res[i] = syn_pair(v, seg[i], seg[i + 1]);
    for (;;) {
        int best = -1;
        for (int i = 0; i + 1 < n; i++)
            if (res[i] >= 0 && (best < 0 || res[i] < res[best])) best = i;
        if (best < 0) return n;
        seg[best] = res[best];
        memmove(seg + best + 1, seg + best + 2, (size_t)(n - best - 2) * sizeof *seg);
        memmove(res + best + 1, res + best + 2, (size_t)(n - best - 2) * sizeof *res);
        n--;
        if (best > 0) res[best - 1] = syn_pair(v, seg[best - 1], seg[best]);
        if (best + 1 < n) res[best] = syn_pair(v, seg[best], seg[best + 1]);
    }
}

/* New token a+b made by the merge "a b"; -1 if a+b is already a token, the
 * vocabulary is full or memory ran out. */
static int32_t syn_merge(syn *v, int32_t a, int32_t b) {
    if (v->oom || v->n >= v->limit) return -1;
    size_t la = strlen(v->tok[a]), lb = strlen(v->tok[b]);
    char buf[256];
    if (la + lb > sizeof buf) return -1;
    memcpy(buf, v->tok[a], la);
    memcpy(buf + la, v->tok[b], lb);
    int32_t id = syn_find(v, buf, la + lb);
    if (id >= 0) return -1;
    char *m = malloc(la + lb + 2);
    if (!m) {
        v->oom = true;
        return -1;
    }
    memcpy(m, v->tok[a], la);
    m[la] = ' ';
    memcpy(m + la + 1, v->tok[b], lb);
    m[la + lb + 1] = '\0';
    id = syn_add(v, buf, la + lb, TOKEN_TYPE_NORMAL);
    if (id < 0) {
        free(m);
        return -1;
    }
    v->merge[v->n_merges++] = m;
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    size_t i = syn_pslot(key, v->mask);
    while (v->pkey[i] != UINT64_MAX) i = (i + 1) & v->mask;
    v->pkey[i] = key;
    v->pres[i] = id;
    return id;
}

/* Make the raw byte string w a token: BPE it with the merges so far, then
 * join the pieces left to right (each join a new merge, so the prefixes it
 * passes through become tokens too). Stops early if a join's text already
 * is a token that BPE did not reach, or the vocabulary is full. */
static void syn_word(syn *v, const char *w) {
    size_t n = strlen(w);
    if (n < 2 || n > SYN_MAX_WORD) return;
    int32_t seg[SYN_MAX_WORD];
    int k = syn_bpe(v, (const uint8_t *)w, (int)n, seg);
    int32_t cur = seg[0];
    for (int i = 1; i < k && cur >= 0; i++) cur = syn_merge(v, cur, seg[i]);
}

/* Whether BPE of text(a)+text(b) gives exactly a, b (then the merge "a b"
 * will fire on that text). */
static bool syn_reaches(const syn *v, int32_t a, int32_t b) {
    size_t la = strlen(v->tok[a]), lb = strlen(v->tok[b]);
    uint8_t raw[SYN_MAX_WORD];
    int n = 0;
    for (int t = 0; t < 2; t++) { /* tokens are in the byte alphabet: map back to bytes */
        const uint8_t *s = (const uint8_t *)v->tok[t ? b : a];
        size_t l = t ? lb : la;
        for (size_t j = 0; j < l; j++) {
            uint32_t cp = s[j];
            if (cp >= 0xC0) cp = ((cp & 0x1F) << 6) | (s[++j] & 0x3F);
            if (n == SYN_MAX_WORD) return false;
            raw[n++] = (uint8_t)bpe_cp_to_byte(cp);
        }
    }
    int32_t seg[SYN_MAX_WORD];
    return syn_bpe(v, raw, n, seg) == 2 && seg[0] == a && seg[1] == b;
}

/* Letters only, after an optional leading mapped space (U+0120 = C4 A0). */
static bool is_letters(const char *s, bool allow_space) {
    if (allow_space && (uint8_t)s[0] == 0xC4 && (uint8_t)s[1] == 0xA0) s += 2;
    if (!*s) return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z'))) return false;
    return true;
}

static const char *const syn_pairs[] = {
    "th", "he", "in", "er", "an", "re", "on", "at", "en", "nd", "ti", "es", "or", "te", "of",
    "ed", "is", "it", "al", "ar", "st", "to", "nt", "ng", "se", "ha", "as", "ou", "io", "le",
    "ve", "co", "me", "de", "hi", "ri", "ro", "ic", "ne", "ea", "ra", "ce", "li", "ch", "ll",
    "be", "ma", "si", "om", "ur", "ing", "ion", "ent", "ly", "ther", "ation", "ment", "ness",
};

static const char *const syn_words[] = {
    "the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with", "be",
    "by", "on", "not", "he", "I", "this", "are", "or", "his", "from", "at", "which", "but",
    "have", "an", "had", "they", "you", "were", "their", "one", "all", "we", "can", "her",
    "has", "there", "been", "if", "more", "when", "will", "would", "who", "so", "no", "said",
    "she", "them", "what", "up", "out", "time", "into", "about", "then", "than", "some",
    "could", "my", "other", "its", "only", "him", "new", "over", "first", "also", "after",
    "like", "these", "two", "may", "made", "people", "any", "our", "very", "well", "upon",
    "man", "before", "great", "little", "know", "good", "through", "much", "where", "such",
    "most", "should", "now", "how", "your", "even", "many", "unto", "shall", "thee", "thy",
    "thou", "God", "Lord", "king", "Mr", "Mrs", "Elizabeth", "Darcy", "Bennet", "Bloom",
    "Stephen", "year", "first", "world", "state", "city", "school", "family", "house",
    "once", "upon", "there", "lived", "girl", "named", "Lily", "day", "night", "love",
    "return", "def", "int", "char", "void", "const", "static", "include", "print", "self",
    "import", "class", "while", "else", "true", "false", "null", "None", "function",
};

static const char *const syn_misc[] = {
    "  ", "    ", "        ", "\n\n", "\r\n", "\t\t", " \n", "\n    ", ".\n", ",\n", ".\n\n",
    "...", "--", "''", "\"\n", "),", ").", "();", "{\n", "}\n", "//", "/*", "*/", "==", "!=",
    "->", "::", "<=", ">=", "+=", " =", " ==", " {", " }", " (", " \"", " '", "'s", "'t",
    "'re", "'ve", "'m", "'ll", "'d", " -", " @", "@-@", " =\n", ":\n",
    "\xE7\x9A\x84", "\xE6\x98\xAF", "\xE4\xB8\x80", "\xE4\xBA\x86", "\xE4\xB8\xAD\xE6\x96\x87",
    "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E", "\xE4\xBA\xBA", "\xE5\x9C\xA8", "\xE6\x9C\x89",
    "\xE3\x81\xAE", "\xE3\x81\xAB", "\xE3\x81\xAF", "\xE3\x82\x92", "\xED\x95\x9C\xEA\xB5\xAD",
    "\xF0\x9F\x98\x80", "\xF0\x9F\x8E\x89", "\xF0\x9F\x91\x8D", "\xE2\x80\x8D", "\xE2\x80\x99",
    "\xE2\x80\x9C", "\xE2\x80\x9D", "\xE2\x80\x94",
};

typedef struct syn_family {
    const char *pre;
    const char *const *specials;
    int n_specials;
    int bos, eos; /* indices into specials */
    bool add_bos;
} syn_family;

static const char *const sp_chatml[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
static const char *const sp_llama3[] = {"<|begin_of_text|>", "<|end_of_text|>",
                                        "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
static const char *const sp_gpt2[] = {"<|endoftext|>"};
/* Phi-4-mini's added tokens (BOS and EOS are both <|endoftext|>). */
static const char *const sp_phi4[] = {"<|endoftext|>", "<|endofprompt|>", "<|assistant|>", "<|end|>",
                                      "<|user|>", "<|system|>", "<|tool|>", "<|/tool|>",
                                      "<|tool_call|>", "<|/tool_call|>", "<|tool_response|>", "<|tag|>"};

static const syn_family families[] = {
    {"qwen2", sp_chatml, 3, 0, 0, false},
    {"smollm", sp_chatml, 3, 0, 0, false},
    {"llama-bpe", sp_llama3, 5, 0, 1, true},
    {"gpt2", sp_gpt2, 1, 0, 0, false},
    {"gpt-4o", sp_phi4, 12, 0, 0, false},
};

void bpe_synth_free(bpe_synth *v) {
    if (!v) return;
    if (v->tokens)
        for (int i = 0; i < v->n_vocab; i++) free(v->tokens[i]);
    if (v->merges)
        for (int i = 0; i < v->n_merges; i++) free(v->merges[i]);
    free(v->tokens);
    free(v->types);
    free(v->merges);
    memset(v, 0, sizeof *v);
}

subq_status bpe_synth_make(int n_vocab, const char *pre, bpe_synth *out, subq_error *err) {
    memset(out, 0, sizeof *out);
    const syn_family *fam = NULL;
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
        if (pre && strcmp(pre, families[i].pre) == 0) fam = &families[i];
    if (!fam)
        return subq_fail(err, SUBQ_ERR_ARG,
                         "no synthetic byte-level vocabulary for pre '%s' (have: qwen2, smollm, "
                         "llama-bpe, gpt2, gpt-4o)", pre ? pre : "(null)");
    if (n_vocab < 256 + fam->n_specials || n_vocab > (1 << 22))
        return subq_fail(err, SUBQ_ERR_ARG,
                         "a byte-level vocabulary needs %d..%d tokens, not %d",
                         256 + fam->n_specials, 1 << 22, n_vocab);

    subq_status st = SUBQ_OK;
    syn v = {0};
    v.limit = n_vocab - fam->n_specials;
    size_t cap = 1;
    while (cap < (size_t)n_vocab * 2) cap <<= 1;
    v.mask = cap - 1;
    v.tok = calloc((size_t)n_vocab, sizeof *v.tok);
    v.type = calloc((size_t)n_vocab, sizeof *v.type);
    v.merge = calloc((size_t)n_vocab, sizeof *v.merge);
    v.map = malloc(cap * sizeof *v.map);
    v.pkey = malloc(cap * sizeof *v.pkey);
    v.pres = malloc(cap * sizeof *v.pres);
    int32_t *pa = NULL, *pb = NULL;
    if (!v.tok || !v.type || !v.merge || !v.map || !v.pkey || !v.pres) goto nomem;
    memset(v.map, 0xFF, cap * sizeof *v.map);
    memset(v.pkey, 0xFF, cap * sizeof *v.pkey);

    /* The 256 byte symbols in GPT-2 order: printable ones, then the rest. */
    for (int pass = 0; pass < 2; pass++) {
        for (int c = 0; c < 256; c++) {
            bool printable = bpe_byte_to_cp((uint8_t)c) == (uint32_t)c;
            if (printable != (pass == 0)) continue;
            uint32_t cp = bpe_byte_to_cp((uint8_t)c);
            char u[2];
            size_t l = 1;
            if (cp < 0x80) {
                u[0] = (char)cp;
            } else {
                u[0] = (char)(0xC0 | (cp >> 6)), u[1] = (char)(0x80 | (cp & 0x3F)), l = 2;
            }
            if ((v.byte_tok[c] = syn_add(&v, u, l, TOKEN_TYPE_NORMAL)) < 0) goto nomem;
        }
    }

    char w[64];
    for (size_t i = 0; i < sizeof syn_pairs / sizeof syn_pairs[0] && v.n < v.limit; i++)
        syn_word(&v, syn_pairs[i]);
    for (int c = 0; c < 52 && v.n < v.limit; c++) {
        snprintf(w, sizeof w, " %c", c < 26 ? 'a' + c : 'A' + c - 26);
        syn_word(&v, w);
    }
    for (size_t i = 0; i < sizeof syn_words / sizeof syn_words[0] && v.n < v.limit; i++) {
        const char *s = syn_words[i];
        snprintf(w, sizeof w, " %s", s);
        syn_word(&v, w);
        syn_word(&v, s);
        snprintf(w, sizeof w, " %c%s", (s[0] >= 'a' && s[0] <= 'z') ? s[0] - 32 : s[0], s + 1);
        syn_word(&v, w);
    }
    for (size_t i = 0; i < sizeof syn_misc / sizeof syn_misc[0] && v.n < v.limit; i++)
        syn_word(&v, syn_misc[i]);
    for (int d = 0; d < 100 && v.n < v.limit; d++) {
        snprintf(w, sizeof w, "%02d", d);
        syn_word(&v, w);
    }
    for (int d = 0; d < 1000 && v.n < v.limit; d++) {
        snprintf(w, sizeof w, "%03d", d);
        syn_word(&v, w);
    }
    if (v.oom) goto nomem;

    /* Fill: prefix tokens (letters, optionally after a space) + letter-only
     * tokens, suffix-major so every prefix gains common endings first. Each
     * pass sees the tokens of the previous ones, so the pools keep growing
     * until the vocabulary is full; if a pass finds no merge BPE would
     * reach, later passes take any new concatenation. */
    bool strict = true;
    pa = malloc((size_t)n_vocab * sizeof *pa);
    pb = malloc((size_t)n_vocab * sizeof *pb);
    if (!pa || !pb) goto nomem;
    while (v.n < v.limit) {
        int na = 0, nb = 0;
        for (int i = 0; i < v.n; i++) {
            size_t l = strlen(v.tok[i]);
            if (l >= SYN_MAX_FILL_LEN) continue;
            if (is_letters(v.tok[i], true)) pa[na++] = i;
            if (is_letters(v.tok[i], false)) pb[nb++] = i;
        }
        int before = v.n;
        for (int j = 0; j < nb && v.n < v.limit; j++) {
            size_t lb = strlen(v.tok[pb[j]]);
            for (int i = 0; i < na && v.n < v.limit; i++)
                if (strlen(v.tok[pa[i]]) + lb <= SYN_MAX_FILL_LEN &&
                    (!strict || syn_reaches(&v, pa[i], pb[j])))
                    syn_merge(&v, pa[i], pb[j]);
        }
        if (v.oom) goto nomem;
        if (v.n == before && strict) {
            strict = false;
            continue;
        }
        if (v.n == before) { /* cannot happen: the pools only grow */
            st = subq_fail(err, SUBQ_ERR_ARG, "cannot fill a vocabulary of %d tokens", n_vocab);
            goto fail;
        }
    }
    free(pa), free(pb);
    pa = pb = NULL;

    for (int i = 0; i < fam->n_specials; i++) {
        const char *s = fam->specials[i];
        if (syn_add(&v, s, strlen(s), TOKEN_TYPE_CONTROL) < 0) goto nomem;
    }
    free(v.map), free(v.pkey), free(v.pres);
    out->n_vocab = n_vocab;
    out->n_merges = v.n_merges;
    out->tokens = v.tok;
    out->types = v.type;
    out->merges = v.merge;
    out->pre = fam->pre;
    out->bos = v.limit + fam->bos;
    out->eos = v.limit + fam->eos;
    out->add_bos = fam->add_bos;
    return SUBQ_OK;
nomem:
    st = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory building a vocabulary of %d tokens",
                   n_vocab);
fail:
    free(pa), free(pb);
    if (v.tok)
        for (int i = 0; i < v.n; i++) free(v.tok[i]);
    if (v.merge)
        for (int i = 0; i < v.n_merges; i++) free(v.merge[i]);
    free(v.tok), free(v.type), free(v.merge), free(v.map), free(v.pkey), free(v.pres);
    return st;
}

subq_status bpe_synth_write(const bpe_synth *v, gguf_writer *w, subq_error *err) {
    subq_status s;
    if ((s = gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2")) ||
        (s = gguf_writer_set_str(w, "tokenizer.ggml.pre", v->pre)) ||
        (s = gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tokens,
                                     (uint64_t)v->n_vocab)) ||
        (s = gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, v->types,
                                 (uint64_t)v->n_vocab)) ||
        (s = gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v->merges,
                                     (uint64_t)v->n_merges)) ||
        (s = gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)v->bos)) ||
        (s = gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)v->eos)) ||
        (s = gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", v->add_bos)))
        return subq_fail(err, s, "cannot set the tokenizer metadata (out of memory?)");
    return SUBQ_OK;
}
