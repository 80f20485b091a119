/* Training data and optimiser pieces: the JSON-lines "text" reader, corpus
 * loading (files, directories, JSONL), cutting long documents into pieces
 * with BOS, packing with positions restarting and segment ids, --no-pack,
 * the deterministic held-out split, epoch permutations, AdamW and the
 * learning-rate schedule. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/model.h"
#include "test_util.h"
#include "train/adamw.h"
#include "data/corpus.h"
#include "data/corpus_file.h"
#include "gguf/gguf.h"
#include "quant/types.h"
#include "data/jsonl.h"
#include "tokenize/vocab_gguf.h"
#include "base/fingerprint.h"

static void test_jsonl(void) {
    struct {
        const char *line, *want; /* want NULL: error; "" with found 0: no text member */
        int found;
    } cases[] = {
        {"{\"text\": \"hello\"}", "hello", 1},
        {"  {\"id\": 3, \"text\": \"a\\nb\\t\\\"q\\\" \\\\ \\/\"}  ", "a\nb\t\"q\" \\ /", 1},
        {"{\"meta\": {\"x\": [1, 2.5e-3, true, null, {\"text\": \"inner\"}]}, \"text\": \"outer\"}", "outer", 1},
        {"{\"text\": \"caf\\u00e9 \\ud83d\\ude00\"}", "caf\xc3\xa9 \xf0\x9f\x98\x80", 1},
        {"{\"title\": \"x\"}", "", 0},
        {"{}", "", 0},
        {"{\"text\": 5}", NULL, 0},
        {"{\"text\": \"unterminated}", NULL, 0},
        {"[\"text\"]", NULL, 0},
        {"{\"text\": \"a\"} trailing", NULL, 0},
        {"{\"text\": \"\\ud83d alone\"}", NULL, 0},
        {"{\"text\": \"bad \\x escape\"}", NULL, 0},
        {"{\"a\": -, \"text\": \"x\"}", NULL, 0},
        {"{\"text\": \"raw\ttab\"}", NULL, 0},
        {"{\"text\": \"raw \xff\xfe bytes\"}", NULL, 0},  /* JSON text is UTF-8 (found by fuzz_jsonl) */
        {"{\"text\": \"cut \xc3\"}", NULL, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out;
        size_t n;
        int found;
        subq_error err = {0};
        subq_status s = jsonl_text(cases[i].line, strlen(cases[i].line), &out, &n, &found, &err);
        if (!cases[i].want) {
            CHECK(s == SUBQ_ERR_FORMAT && !out && err.msg[0] && !strchr(err.msg, '\n'), "case %zu should fail: %s", i,
                  cases[i].line);
        } else {
            CHECK(s == SUBQ_OK && found == cases[i].found, "case %zu: status %d found %d (%s)", i, (int)s, found, err.msg);
            if (found) CHECK(out && n == strlen(cases[i].want) && !memcmp(out, cases[i].want, n), "case %zu text", i);
        }
        free(out);
    }
    /* deep nesting is refused, not a stack overflow */
    char deep[2100];
    strcpy(deep, "{\"a\": ");
    for (int i = 0; i < 1000; i++) strcat(deep, "[");
    char *out;
    size_t n;
    int found;
    CHECK(jsonl_text(deep, strlen(deep), &out, &n, &found, NULL) == SUBQ_ERR_FORMAT, "deep nesting");
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* A hand-made corpus file: docs of the given lengths and held-out marks,
 * tokens t = 1 + (i % 200) (or bad_token at index bad_at). */
static void write_corpus_file(const char *path, uint64_t vocab_fp, const int32_t *len, const int8_t *ev, int n_docs,
                              int64_t n_tok, int bad_at, int32_t bad_token) {
    gguf_writer *w = gguf_writer_new();
    char hex[17];
    fingerprint_hex(vocab_fp, hex);
    gguf_writer_set_u32(w, "subq.corpus.version", 1);
    gguf_writer_set_str(w, "subq.corpus.vocab_fingerprint", hex);
    gguf_writer_set_str(w, "subq.corpus.tokens_fingerprint", "0123456789abcdef");
    int32_t *tok = malloc((size_t)n_tok * sizeof(int32_t));
    for (int64_t i = 0; i < n_tok; i++) tok[i] = i == bad_at ? bad_token : (int32_t)(1 + i % 200);
    const uint64_t nd = (uint64_t)n_docs, nt = (uint64_t)n_tok;
    gguf_writer_add_tensor(w, "corpus.doc_len", GGML_TYPE_I32, 1, &nd, len, nd * 4, 0, NULL);
    gguf_writer_add_tensor(w, "corpus.doc_eval", GGML_TYPE_I8, 1, &nd, ev, nd, 0, NULL);
    gguf_writer_add_tensor(w, "corpus.tokens", GGML_TYPE_I32, 1, &nt, tok, nt * 4, 1, NULL);
    subq_error err = {0};
    CHECK(!gguf_writer_write(w, path, &err), "write %s: %s", path, err.msg);
    gguf_writer_free(w);
}

/* Open path as the only data of a fresh corpus; the status of open + finish. */
static subq_status open_file_corpus(const subq_model *m, const subq_corpus_params *p, const char *path,
                                    subq_corpus **out, subq_error *err) {
    subq_status s = corpus_new(m, p, out, err);
    if (!s) s = corpus_add_path(*out, m, path, 0, err);
    if (!s) s = corpus_finish(*out, err);
    return s;
}

/* Pre-tokenised corpus files: the same sequences, split, packing and
 * fingerprint as the text they were made from; only the tokens of the
 * sequences asked for are read; foreign and malformed files refused. */
static void test_corpus_file(const subq_model *m, const char *dir) {
    char sub[600], longp[700], evalp[700], out[700];
    snprintf(sub, sizeof sub, "%s/sub", dir);
    snprintf(longp, sizeof longp, "%s/c_long.txt", dir);
    snprintf(evalp, sizeof evalp, "%s/b.txt", dir);
    snprintf(out, sizeof out, "%s/corpus.gguf", dir);
    subq_error err = {0};
    subq_corpus_params wide = {.seq = 1 << 30, .eval_only = 1};
    subq_corpus *src = NULL;
    CHECK(!corpus_new(m, &wide, &src, &err) && !corpus_add_path(src, m, sub, 0, &err) &&
              !corpus_add_path(src, m, longp, 0, &err) &&
              !corpus_add_path(src, m, evalp, 1, &err) && !corpus_finish(src, &err) && !corpus_file_save(src, out, &err),
          "save: %s", err.msg);
    corpus_free(src);
    CHECK(!corpus_file_is_tokens(evalp) && corpus_file_is_tokens(out), "GGUF magic tells a corpus file from text");
    for (int pack = 0; pack < 2; pack++) {
        subq_corpus_params p = {.seq = 48, .pack = pack, .eval_frac = 0.2f, .seed = 7};
        subq_corpus *text = NULL, *file = NULL;
        CHECK(!corpus_new(m, &p, &text, &err) && !corpus_add_path(text, m, sub, 0, &err) &&
                  !corpus_add_path(text, m, longp, 0, &err) &&
                  !corpus_add_path(text, m, evalp, 1, &err) && !corpus_finish(text, &err),
              "text corpus: %s", err.msg);
        CHECK(!open_file_corpus(m, &p, out, &file, &err), "file corpus: %s", err.msg);
        if (!text || !file || !file->file) {
            corpus_free(text);
            corpus_free(file);
            return;
        }
        CHECK(text->fingerprint == file->fingerprint && text->n_docs == file->n_docs &&
                  text->n_eval_docs == file->n_eval_docs && text->n_tok == file->n_tok,
              "file and text: the same documents and fingerprint");
        CHECK(corpus_file_tokens_read(file) == 0, "opening reads no token");
        /* one training sequence: exactly its tokens are read */
        const corpus_split *sps[2][2] = {{&text->train, &file->train}, {&text->eval, &file->eval}};
        int32_t ta[64], pa[64], sa[64], tb[64], pb[64], sb[64];
        int na = 0, nb = 0;
        CHECK(!corpus_get(file, &file->train, 1, tb, pb, sb, &nb, &err), "get: %s", err.msg);
        CHECK(corpus_file_tokens_read(file) == nb - (file->bos >= 0) * (sb[nb - 1] + 1), "read %lld for %d tokens",
              (long long)corpus_file_tokens_read(file), nb);
        for (int k = 0; k < 2; k++) {
            CHECK(sps[k][0]->n_seq == sps[k][1]->n_seq, "split %d: %d vs %d sequences", k, sps[k][0]->n_seq,
                  sps[k][1]->n_seq);
            for (int i = 0; i < sps[k][0]->n_seq && i < sps[k][1]->n_seq; i++) {
                CHECK(!corpus_get(text, sps[k][0], i, ta, pa, sa, &na, &err) &&
                          !corpus_get(file, sps[k][1], i, tb, pb, sb, &nb, &err),
                      "get: %s", err.msg);
                CHECK(na == nb && !memcmp(ta, tb, (size_t)na * 4) && !memcmp(pa, pb, (size_t)na * 4) &&
                          !memcmp(sa, sb, (size_t)na * 4),
                      "split %d sequence %d: the same tokens, positions and segments", k, i);
            }
        }
        corpus_free(text);
        corpus_free(file);
    }

    /* refused: mixed with text, given as held-out, a model file, another
     * vocabulary, inconsistent tables; a token outside the vocabulary is
     * refused where it is read */
    subq_corpus_params p = {.seq = 48, .pack = 1, .eval_frac = 0.2f, .seed = 7};
    subq_corpus *c = NULL;
    CHECK(!corpus_new(m, &p, &c, &err), "corpus_new");
    CHECK(!corpus_add_path(c, m, evalp, 0, &err) && corpus_add_path(c, m, out, 0, &err) == SUBQ_ERR_ARG &&
              strstr(err.msg, "only --data path"),
          "text, then a corpus file: %s", err.msg);
    corpus_free(c);
    CHECK(!corpus_new(m, &p, &c, &err), "corpus_new");
    CHECK(!corpus_add_path(c, m, out, 0, &err) && corpus_add_path(c, m, evalp, 0, &err) == SUBQ_ERR_ARG,
          "a corpus file, then text: %s", err.msg);
    corpus_free(c);
    /* given as evaluation data (subq eval --eval-file): every document held out */
    subq_corpus_params pe = p;
    pe.eval_only = 1;
    CHECK(!corpus_new(m, &pe, &c, &err) && !corpus_add_path(c, m, out, 1, &err) && !corpus_finish(c, &err),
          "a corpus file as held-out data: %s", err.msg);
    CHECK(c && c->n_docs == 0 && c->n_eval_docs > 0 && c->train.n_seq == 0 && c->eval.n_seq > 0,
          "a corpus file as held-out data: all of it held out");
    corpus_free(c);
    c = NULL;
    char model_path[1024];
    test_shared_path("models/stories260K.gguf", model_path, sizeof model_path);
    CHECK(open_file_corpus(m, &p, model_path, &c, &err) == SUBQ_ERR_FORMAT && strstr(err.msg, "no pre-tokenised corpus"),
          "a model file as data: %s", err.msg);
    corpus_free(c);
    const int32_t len[3] = {40, 100, 60};
    const int8_t ev[3] = {0, 0, 1}, bad_ev[3] = {0, 2, 0};
    struct {
        uint64_t fp_xor;
        const int8_t *ev;
        int64_t n_tok;
        int bad_at;
        int32_t bad_token;
        subq_status want_open; /* else corpus_get of every sequence fails with want_get */
        subq_status want_get;
        const char *msg;
    } cases[] = {
        {1, ev, 200, -1, 0, SUBQ_ERR_MISMATCH, 0, "another vocabulary"},
        {0, bad_ev, 200, -1, 0, SUBQ_ERR_FORMAT, 0, "held-out mark 2"},
        {0, ev, 199, -1, 0, SUBQ_ERR_FORMAT, 0, "hold 200 tokens"},
        {0, ev, 200, 150, 512, SUBQ_OK, SUBQ_ERR_FORMAT, "outside the vocabulary"},
        {0, ev, 200, 10, -3, SUBQ_OK, SUBQ_ERR_FORMAT, "outside the vocabulary"},
    };
    char bad[700];
    snprintf(bad, sizeof bad, "%s/bad.gguf", dir);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_corpus_file(bad, vocab_fingerprint(m->file) ^ cases[i].fp_xor, len, cases[i].ev, 3, cases[i].n_tok,
                          cases[i].bad_at, cases[i].bad_token);
        c = NULL;
        subq_status s = open_file_corpus(m, &p, bad, &c, &err);
        if (cases[i].want_open) {
            CHECK(s == cases[i].want_open && strstr(err.msg, cases[i].msg) && strstr(err.msg, "bad.gguf"),
                  "case %zu: %d %s", i, s, err.msg);
        } else {
            CHECK(!s, "case %zu opens: %s", i, err.msg);
            int32_t tok[64], pos[64], seg[64];
            int n, failed = 0;
            for (int k = 0; !s && k < 2; k++) {
                const corpus_split *sp = k ? &c->eval : &c->train;
                for (int j = 0; j < sp->n_seq; j++)
                    failed |= corpus_get(c, sp, j, tok, pos, seg, &n, &err) == cases[i].want_get &&
                              strstr(err.msg, cases[i].msg) != NULL;
            }
            CHECK(failed, "case %zu: reading the bad token fails: %s", i, err.msg);
        }
        corpus_free(c);
    }
    /* truncated: the GGUF reader refuses it */
    write_corpus_file(bad, vocab_fingerprint(m->file), len, ev, 3, 200, -1, 0);
    CHECK(truncate(bad, 300) == 0, "truncate");
    c = NULL;
    CHECK(open_file_corpus(m, &p, bad, &c, &err) == SUBQ_ERR_FORMAT && strstr(err.msg, "bad.gguf"), "truncated: %s",
          err.msg);
    corpus_free(c);
}

/* every sequence: positions restart at each segment change, BOS at every
 * piece start, segment ids 0,1,2,... */
static int check_sequences(const subq_corpus *c, const corpus_split *sp, int bos) {
    int32_t tok[4096], pos[4096], seg[4096];
    int64_t total = 0;
    for (int i = 0; i < sp->n_seq; i++) {
        int n = 0;
        if (corpus_get(c, sp, i, tok, pos, seg, &n, NULL)) return 0;
        if (n < 2 || n > c->p.seq) return 0;
        total += n;
        for (int t = 0; t < n; t++) {
            int new_piece = t == 0 || seg[t] != seg[t - 1];
            if (new_piece && (pos[t] != 0 || tok[t] != bos)) return 0;
            if (!new_piece && (pos[t] != pos[t - 1] + 1 || seg[t] != seg[t - 1])) return 0;
            if (t > 0 && new_piece && seg[t] != seg[t - 1] + 1) return 0;
        }
        if (!c->p.pack && seg[n - 1] != 0) return 0;
    }
    return total == sp->n_tokens;
}

static void test_corpus(const subq_model *m) {
    const char *tmp = getenv("SUBQ_TMP");
    char dir[512], sub[600], path[700];
    snprintf(dir, sizeof dir, "%s/test_train_data.%d", tmp && *tmp ? tmp : "/tmp", (int)getpid());
    snprintf(sub, sizeof sub, "%s/sub", dir);
    mkdir(dir, 0755);
    mkdir(sub, 0755);
    snprintf(path, sizeof path, "%s/b.txt", dir);
    write_file(path, "The cat sat on the mat. The dog ran in the sun.");
    snprintf(path, sizeof path, "%s/.hidden", dir);
    write_file(path, "\xff\xfe not utf-8 and must be skipped");
    snprintf(path, sizeof path, "%s/a.jsonl", sub);
    write_file(path, "{\"text\": \"Lily saw a bird.\"}\n\n{\"text\": \"Tom had a red ball and a blue hat.\"}\n"
                     "{\"text\": \"\"}\n{\"text\": \"Sam ran.\"}\n{\"text\": \"A big dog.\"}\n"
                     "{\"text\": \"The sun was hot.\"}\n{\"text\": \"Mia and Ben played.\"}\n"
                     "{\"text\": \"It was fun!\"}\n{\"text\": \"The end.\"}\n");
    /* a long document, cut into pieces */
    char *longdoc = malloc(20000);
    longdoc[0] = '\0';
    for (int i = 0; i < 200; i++) strcat(longdoc, "Once upon a time there was a girl. ");
    snprintf(path, sizeof path, "%s/c_long.txt", dir);
    write_file(path, longdoc);
    free(longdoc);

    const int bos = tokenizer_bos(m->tok);
    for (int pack = 0; pack < 2; pack++) {
        subq_corpus *c = NULL;
        subq_error err = {0};
        subq_corpus_params p = {.seq = 64, .pack = pack, .eval_frac = 0.2f, .seed = 5};
        CHECK(!corpus_new(m, &p, &c, &err), "corpus_new: %s", err.msg);
        CHECK(!corpus_add_path(c, m, dir, 0, &err), "add dir: %s", err.msg);
        CHECK(!corpus_finish(c, &err), "finish: %s", err.msg);
        /* documents: b.txt, c_long.txt, 8 jsonl records (the empty one is no document) */
        CHECK(c->n_docs == 10, "documents %d", c->n_docs);
        int long_pieces = 0;
        for (int i = 0; i < c->n_pieces; i++) {
            CHECK(c->piece_len[i] <= 64, "piece %d: len %d", i, c->piece_len[i]);
            long_pieces += c->piece_len[i] == 64;
        }
        CHECK(long_pieces >= 10, "long document cut into full pieces (%d)", long_pieces);
        int n_eval_pieces = c->eval.first[c->eval.n_seq];
        CHECK(n_eval_pieces == (int)(0.2 * c->n_pieces + 0.5), "held-out pieces %d of %d", n_eval_pieces, c->n_pieces);
        CHECK(c->train.n_tokens + c->eval.n_tokens == (int64_t)c->n_tok + (bos >= 0) * c->n_pieces, "splits cover the corpus");
        CHECK(check_sequences(c, &c->train, bos) && check_sequences(c, &c->eval, bos), "sequence layout (pack %d)", pack);
        if (pack) {
            /* short documents only: next-fit packing must share sequences */
            subq_corpus *cs = NULL;
            CHECK(!corpus_new(m, &p, &cs, &err) && !corpus_add_path(cs, m, sub, 0, &err) && !corpus_finish(cs, &err),
                  "short corpus: %s", err.msg);
            int multi = 0;
            int32_t tok[64], pos[64], seg[64];
            for (int i = 0; i < cs->train.n_seq; i++) {
                int n = 0;
                CHECK(!corpus_get(cs, &cs->train, i, tok, pos, seg, &n, &err), "get: %s", err.msg);
                multi |= seg[n - 1] > 0;
            }
            CHECK(multi, "packing puts several pieces in a sequence");
            CHECK(cs->train.n_seq < cs->train.first[cs->train.n_seq], "packed: fewer sequences than pieces");
            CHECK(check_sequences(cs, &cs->train, bos), "short corpus layout");
            corpus_free(cs);
        } else {
            CHECK(c->train.n_seq == c->train.first[c->train.n_seq], "unpacked: one piece per sequence");
        }
        /* the split does not depend on the training seed; the fingerprint does (order) */
        subq_corpus *c2 = NULL;
        subq_corpus_params p2 = p;
        p2.seed = 6;
        CHECK(!corpus_new(m, &p2, &c2, &err) && !corpus_add_path(c2, m, dir, 0, &err) && !corpus_finish(c2, &err),
              "second corpus: %s", err.msg);
        CHECK(c2->eval.n_seq == c->eval.n_seq && !memcmp(c2->eval.order, c->eval.order, (size_t)n_eval_pieces * sizeof(int)),
              "held-out split independent of --seed");
        subq_corpus *c3 = NULL;
        CHECK(!corpus_new(m, &p, &c3, &err) && !corpus_add_path(c3, m, dir, 0, &err) && !corpus_finish(c3, &err),
              "third corpus: %s", err.msg);
        CHECK(c3->fingerprint == c->fingerprint, "same inputs, same fingerprint");
        /* epoch permutations: each epoch visits every sequence once, epochs differ */
        int n = c->train.n_seq, *perm = malloc((size_t)n * sizeof(int)), *seen = calloc((size_t)n, sizeof(int));
        uint64_t pe = UINT64_MAX;
        int first_epoch[64], differs = 0;
        for (uint64_t cur = 0; cur < 2 * (uint64_t)n; cur++) {
            int idx = corpus_train_index(c, cur, 1, perm, &pe);
            seen[idx]++;
            if (cur < (uint64_t)n && cur < 64) first_epoch[cur] = idx;
            else if (cur - n < 64) differs |= first_epoch[cur - n] != idx;
        }
        int all_twice = 1;
        for (int i = 0; i < n; i++) all_twice &= seen[i] == 2;
        CHECK(all_twice, "every sequence once per epoch");
        if (n > 2) CHECK(differs, "epochs use different orders");
        free(perm);
        free(seen);
        corpus_free(c);
        corpus_free(c2);
        corpus_free(c3);
    }

    /* explicit eval files replace the random split */
    subq_corpus *c = NULL;
    subq_error err = {0};
    subq_corpus_params p = {.seq = 64, .pack = 1, .eval_frac = 0.5f, .seed = 1};
    snprintf(path, sizeof path, "%s/b.txt", dir);
    CHECK(!corpus_new(m, &p, &c, &err) && !corpus_add_path(c, m, sub, 0, &err) && !corpus_add_path(c, m, path, 1, &err) &&
              !corpus_finish(c, &err),
          "eval files: %s", err.msg);
    CHECK(c->eval.first[c->eval.n_seq] == 1 && c->train.first[c->train.n_seq] == 8, "eval pieces from --eval-data only");
    corpus_free(c);

    /* errors name the file and line */
    snprintf(path, sizeof path, "%s/bad.jsonl", dir);
    write_file(path, "{\"text\": \"ok\"}\n{\"txt\": \"no\"}\n");
    CHECK(!corpus_new(m, &p, &c, &err), "corpus_new");
    subq_status s = corpus_add_path(c, m, path, 0, &err);
    CHECK(s == SUBQ_ERR_FORMAT && strstr(err.msg, "bad.jsonl:2"), "jsonl error names file:line: %s", err.msg);
    s = corpus_add_path(c, m, "/nonexistent/x.txt", 0, &err);
    CHECK(s == SUBQ_ERR_IO && strstr(err.msg, "/nonexistent/x.txt"), "missing file: %s", err.msg);
    snprintf(path, sizeof path, "%s/.hidden", dir);
    s = corpus_add_path(c, m, path, 0, &err);
    CHECK(s == SUBQ_ERR_TOKENIZE && strstr(err.msg, ".hidden"), "invalid UTF-8 names the file: %s", err.msg);
    corpus_free(c);
    CHECK(!corpus_new(m, &p, &c, &err), "corpus_new");
    CHECK(corpus_finish(c, &err) == SUBQ_ERR_ARG, "empty corpus refused");
    corpus_free(c);

    test_corpus_file(m, dir);

    char cmd[1400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "cleanup");
}

static void test_adamw(void) {
    /* two steps by hand */
    float w[2] = {1.0f, -2.0f}, g[2] = {0.5f, -1.0f}, m[2] = {0}, v[2] = {0};
    adamw_params p = {0.9f, 0.999f, 1e-8f, 0.01f};
    adamw_update(w, g, m, v, 2, &p, 0.1f, 1);
    /* step 1: mhat = g, vhat = g^2 -> update = sign(g) (+ eps) */
    CHECK(fabsf(w[0] - (1.0f - 0.1f * (1.0f + 0.01f * 1.0f))) < 1e-6f, "adamw step 1: %f", w[0]);
    CHECK(fabsf(w[1] - (-2.0f - 0.1f * (-1.0f + 0.01f * -2.0f))) < 1e-6f, "adamw step 1: %f", w[1]);
    float w0 = w[0];
    adamw_update(w, g, m, v, 2, &p, 0.1f, 2);
    double mm = 0.9 * 0.05 + 0.1 * 0.5, vv = 0.999 * 0.00025 + 0.001 * 0.25;
    double mh = mm / (1 - 0.81), vh = vv / (1 - 0.999 * 0.999);
    double want = w0 - 0.1 * (mh / (sqrt(vh) + 1e-8) + 0.01 * w0);
    CHECK(fabs(w[0] - want) < 1e-6, "adamw step 2: %f vs %f", w[0], want);

    CHECK(fabsf(lr_schedule(0, 100, 10, 1.0f) - 0.1f) < 1e-7f, "warmup start");
    CHECK(fabsf(lr_schedule(9, 100, 10, 1.0f) - 1.0f) < 1e-7f, "warmup end");
    CHECK(fabsf(lr_schedule(10, 100, 10, 1.0f) - 1.0f) < 1e-7f, "cosine start");
    CHECK(fabsf(lr_schedule(55, 100, 10, 1.0f) - 0.5f) < 1e-6f, "cosine middle");
    CHECK(lr_schedule(99, 100, 10, 1.0f) < 0.001f && lr_schedule(99, 100, 10, 1.0f) > 0, "cosine end");
    CHECK(fabsf(lr_schedule(5, 5, 10, 1.0f) - 0.6f) < 1e-6f, "warmup longer than the run");
}

int main(void) {
    char model_path[1024];
    test_shared_path("models/stories260K.gguf", model_path, sizeof model_path);
    subq_model *m = NULL;
    subq_error err = {0};
    test_jsonl();
    test_adamw();
    if (subq_model_load(model_path, &m, &err)) {
        CHECK(0, "load model: %s", err.msg);
        return test_summary();
    }
    test_corpus(m);
    subq_model_free(m);
    return test_summary();
}
