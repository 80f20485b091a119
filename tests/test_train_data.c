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
#include "train/corpus.h"
#include "train/jsonl.h"

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

/* every sequence: positions restart at each segment change, BOS at every
 * piece start, segment ids 0,1,2,... */
static int check_sequences(const subq_corpus *c, const corpus_split *sp, int bos) {
    int32_t tok[4096], pos[4096], seg[4096];
    int64_t total = 0;
    for (int i = 0; i < sp->n_seq; i++) {
        int n = corpus_get(c, sp, i, tok, pos, seg);
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
            CHECK(c->piece_len[i] <= 64 && c->tok[c->piece_off[i]] == bos, "piece %d: len %d", i, c->piece_len[i]);
            long_pieces += c->piece_len[i] == 64;
        }
        CHECK(long_pieces >= 10, "long document cut into full pieces (%d)", long_pieces);
        int n_eval_pieces = c->eval.first[c->eval.n_seq];
        CHECK(n_eval_pieces == (int)(0.2 * c->n_pieces + 0.5), "held-out pieces %d of %d", n_eval_pieces, c->n_pieces);
        CHECK(c->train.n_tokens + c->eval.n_tokens == (int64_t)c->n_tok, "splits cover the corpus");
        CHECK(check_sequences(c, &c->train, bos) && check_sequences(c, &c->eval, bos), "sequence layout (pack %d)", pack);
        if (pack) {
            /* short documents only: next-fit packing must share sequences */
            subq_corpus *cs = NULL;
            CHECK(!corpus_new(m, &p, &cs, &err) && !corpus_add_path(cs, m, sub, 0, &err) && !corpus_finish(cs, &err),
                  "short corpus: %s", err.msg);
            int multi = 0;
            int32_t tok[64], pos[64], seg[64];
            for (int i = 0; i < cs->train.n_seq; i++) {
                int n = corpus_get(cs, &cs->train, i, tok, pos, seg);
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
