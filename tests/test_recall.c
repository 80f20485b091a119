/* Needle-in-a-haystack prompts and scoring (subq recall) through the public
 * API: exact lengths, the needle where the depth says (checked by decoding
 * the prompt back to text), the question last, seeds that reproduce, answer
 * parsing, bad input. Runs on stories260K (SentencePiece) and a synthesised
 * byte-level BPE model. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "subq_lab.h"

static int failures = 0;
#define CHECK(cond, ...)                                                                                    \
    do {                                                                                                    \
        if (!(cond)) {                                                                                      \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                     \
            printf(__VA_ARGS__);                                                                            \
            printf("\n");                                                                                   \
            failures++;                                                                                     \
        }                                                                                                   \
    } while (0)

static const char *hay_text =
    "The old mill stood by the river. Every morning the miller opened the doors and the wheel began to turn.\n"
    "Children came to watch the water, and the baker waited for flour. In winter the river froze, and the mill "
    "rested until spring returned with its rains and its long bright days.\n";

/* Text of tokens [from, to) of a prompt. */
static void detok(const subq_model *m, const int32_t *t, int from, int to, char *buf, size_t cap) {
    size_t n = 0;
    for (int i = from; i < to; i++) {
        char piece[64];
        size_t len = 0;
        if (subq_token_to_piece(m, i ? t[i - 1] : -1, t[i], piece, sizeof piece, &len, NULL) != SUBQ_OK) len = 0;
        for (size_t b = 0; b < len && n + 1 < cap; b++) buf[n++] = piece[b];
    }
    buf[n] = '\0';
}

static void check_model(const char *path, const char *label) {
    subq_model *m = NULL;
    subq_error err = {0};
    if (subq_model_load(path, &m, &err)) {
        printf("FAIL: %s: %s\n", label, err.msg);
        failures++;
        return;
    }
    subq_model_info info;
    subq_model_get_info(m, &info);
    subq_recall_params p = subq_recall_default_params();
    p.haystack = hay_text;
    p.haystack_len = strlen(hay_text);
    p.seed = 7;
    subq_recall *r = NULL;
    if (subq_recall_new(m, &p, &r, &err)) {
        printf("FAIL: %s: recall_new: %s\n", label, err.msg);
        failures++;
        subq_model_free(m);
        return;
    }
    const int L = info.n_ctx_train < 384 ? info.n_ctx_train : 384;
    char text[65536];
    /* passkey at several depths */
    const double depths[] = {0.0, 0.3, 0.5, 1.0};
    char first_value[16] = "";
    for (int di = 0; di < 4; di++) {
        subq_recall_prompt pr;
        if (subq_recall_make_prompt(r, L, depths[di], 2, &pr, &err)) {
            printf("FAIL: %s: make_prompt: %s\n", label, err.msg);
            failures++;
            continue;
        }
        CHECK(pr.n_tokens == L, "%s: prompt has %d tokens, want %d", label, pr.n_tokens, L);
        int bos = info.add_bos && info.bos_id >= 0;
        CHECK(!bos || pr.tokens[0] == info.bos_id, "%s: prompt does not start with BOS", label);
        /* the needle's text, decoded from where the prompt says it is */
        detok(m, pr.tokens, pr.needle_pos, pr.needle_pos + pr.needle_len, text, sizeof text);
        char want[128];
        snprintf(want, sizeof want, "The pass key is %s. Remember it. %s is the pass key.", pr.values[0], pr.values[0]);
        CHECK(strstr(text, want) != NULL, "%s depth %g: needle tokens decode to '%s', want '%s'", label, depths[di],
              text, want);
        /* the needle sits at the depth of the filler, within the snap window */
        double want_pos = bos + depths[di] * pr.n_filler;
        CHECK(pr.needle_pos >= want_pos - 16.5 && pr.needle_pos <= want_pos + 16.5,
              "%s depth %g: needle at token %d, depth says %.0f", label, depths[di], pr.needle_pos, want_pos);
        CHECK(pr.n_filler > 0 && pr.n_filler < L - pr.needle_len, "%s: filler count %d inconsistent", label,
              pr.n_filler);
        /* the question is last; the whole prompt reads as haystack + needle + question */
        detok(m, pr.tokens, 0, pr.n_tokens, text, sizeof text);
        const char *q = "What is the pass key? The pass key is";
        size_t tl = strlen(text), ql = strlen(q);
        CHECK(tl >= ql && !strcmp(text + tl - ql, q), "%s: prompt does not end with the question: '...%s'", label,
              tl > 60 ? text + tl - 60 : text);
        CHECK(strstr(text, "mill") != NULL, "%s: no haystack text in the prompt", label);
        /* the same key at every depth of a trial; a 5-digit key */
        if (di == 0) snprintf(first_value, sizeof first_value, "%s", pr.values[0]);
        CHECK(!strcmp(first_value, pr.values[0]) && strlen(pr.values[0]) == 5, "%s: key %s at depth %g, %s at 0",
              label, pr.values[0], depths[di], first_value);
        /* reproducible */
        subq_recall_prompt again;
        if (!subq_recall_make_prompt(r, L, depths[di], 2, &again, &err)) {
            CHECK(again.n_tokens == pr.n_tokens && !memcmp(again.tokens, pr.tokens, (size_t)pr.n_tokens * 4),
                  "%s: the same trial gave another prompt", label);
            subq_recall_prompt_free(&again);
        }
        subq_recall_prompt_free(&pr);
    }
    /* another trial: another key */
    subq_recall_prompt t3;
    if (!subq_recall_make_prompt(r, L, 0.5, 3, &t3, &err)) {
        CHECK(strcmp(t3.values[0], first_value) != 0, "%s: trials 2 and 3 share key %s", label, first_value);
        subq_recall_prompt_free(&t3);
    }
    /* bad input */
    subq_recall_prompt bad;
    CHECK(subq_recall_make_prompt(r, 12, 0.5, 0, &bad, &err) == SUBQ_ERR_ARG, "%s: 12 tokens accepted", label);
    /* past the trained context: built (read through far keys, the caller allows it), at that length */
    if (!subq_recall_make_prompt(r, 2 * info.n_ctx_train, 0.5, 0, &bad, &err)) {
        CHECK(bad.n_tokens == 2 * info.n_ctx_train, "%s: a prompt of %d tokens for %d", label, bad.n_tokens,
              2 * info.n_ctx_train);
        subq_recall_prompt_free(&bad);
    } else {
        CHECK(0, "%s: a length past the trained context refused: %s", label, err.msg);
    }
    CHECK(subq_recall_make_prompt(r, 0, 0.5, 0, &bad, &err) == SUBQ_ERR_ARG, "%s: length 0 accepted", label);
    CHECK(subq_recall_make_prompt(r, L, 1.5, 0, &bad, &err) == SUBQ_ERR_ARG, "%s: depth 1.5 accepted", label);
    subq_recall_free(r);

    /* multi-key: every needle in the prompt, distinct keys, the asked one at the depth */
    p.task = SUBQ_RECALL_MULTIKEY;
    p.n_keys = 4;
    if (!subq_recall_new(m, &p, &r, &err)) {
        subq_recall_prompt pr;
        if (!subq_recall_make_prompt(r, L, 0.25, 0, &pr, &err)) {
            detok(m, pr.tokens, 0, pr.n_tokens, text, sizeof text);
            int n = 0;
            for (const char *s = text; (s = strstr(s, "The special magic number for ")); s++) n++;
            CHECK(n == 5, "%s: %d multi-key sentences, want 4 needles + the question", label, n);
            detok(m, pr.tokens, pr.needle_pos, pr.needle_pos + pr.needle_len, text, sizeof text);
            CHECK(strstr(text, pr.values[0]) != NULL && strlen(pr.values[0]) == 7, "%s: asked needle '%s' lacks %s",
                  label, text, pr.values[0]);
            subq_recall_prompt_free(&pr);
        } else {
            printf("FAIL: %s: multikey: %s\n", label, err.msg);
            failures++;
        }
        subq_recall_free(r);
    }
    /* empty haystack */
    p.haystack = "";
    p.haystack_len = 0;
    CHECK(subq_recall_new(m, &p, &r, &err) == SUBQ_ERR_ARG, "%s: empty haystack accepted", label);
    /* no haystack: the pass-key filler, the key its only number, reading the
     * same across the point where its tokens wrap around */
    p = subq_recall_default_params();
    if (subq_recall_new(m, &p, &r, &err)) {
        printf("FAIL: %s: recall_new without a haystack: %s\n", label, err.msg);
        failures++;
    } else {
        subq_recall_prompt pr;
        if (!subq_recall_make_prompt(r, L, 0.5, 0, &pr, &err)) {
            const char *sentence = "The grass is green. The sky is blue. The sun is yellow. Here we go. "
                                   "There and back again.";
            char repeated[2048] = "";
            for (int i = 0; i < 8; i++) strcat(strcat(repeated, sentence), " ");
            int bos = info.add_bos && info.bos_id >= 0;
            detok(m, pr.tokens, bos, pr.needle_pos, text, sizeof text);
            char *t = text + strspn(text, " "); /* the filler before the needle, from a word start */
            size_t tl = strlen(t);
            while (tl && t[tl - 1] == ' ') t[--tl] = 0;
            CHECK(tl > 100 && strstr(repeated, t) != NULL,
                  "%s: the filler before the needle is not the pass-key filler: '%.120s'", label, t);
            detok(m, pr.tokens, 0, pr.n_tokens, text, sizeof text);
            int digits = 0;
            for (const char *c = text; *c; c++) digits += *c >= '0' && *c <= '9';
            CHECK(digits == 10, "%s: %d digits in a pass-key prompt, want the key's 2 x 5", label, digits);
            subq_recall_prompt_free(&pr);
        } else {
            printf("FAIL: %s: make_prompt without a haystack: %s\n", label, err.msg);
            failures++;
        }
        subq_recall_free(r);
    }
    subq_model_free(m);
}

static void check_scoring(void) {
    subq_recall_prompt pr = {0};
    pr.n_values = 1;
    snprintf(pr.values[0], sizeof pr.values[0], "71432");
    struct {
        const char *text;
        double want;
    } cases[] = {{"71432", 1}, {" 71432.", 1}, {"The pass key is 71432 and 1", 1}, {"714320", 0}, {"7143", 0},
                 {"71 432", 0}, {"", 0}, {"x71432y", 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double s = subq_recall_score(&pr, cases[i].text, strlen(cases[i].text));
        CHECK(s == cases[i].want, "score('%s') = %g, want %g", cases[i].text, s, cases[i].want);
    }
    pr.n_values = 4;
    snprintf(pr.values[1], 16, "1234567");
    snprintf(pr.values[2], 16, "7654321");
    snprintf(pr.values[3], 16, "1111111");
    const char *t = "are 1234567, 71432 and 9999999";
    CHECK(subq_recall_score(&pr, t, strlen(t)) == 0.5, "multi-value partial score %g, want 0.5",
          subq_recall_score(&pr, t, strlen(t)));
    /* agreement: the same first n digit runs in the same order, whatever else */
    struct {
        const char *a, *b;
        int n, want;
    } pairs[] = {{" 71432. Remember", "71432", 1, 1}, {"", "no number", 1, 1},   {"12 34", "12, 34.", 2, 1},
                 {"12 34", "34 12", 2, 0},            {"123", "1234", 1, 0},     {"1234", "123", 1, 0},
                 {"12", "12 3", 2, 0},                {"", "5", 1, 0},           {"12", "12 3", 1, 1},
                 {"71432. 71432 is", "71432. The", 1, 1}, {"7 8 9", "7 8 1", 2, 1}, {"7 8 9", "7 8 1", 3, 0}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
        CHECK(subq_recall_same_answer(pairs[i].a, pairs[i].b, pairs[i].n) == pairs[i].want &&
                  subq_recall_same_answer(pairs[i].b, pairs[i].a, pairs[i].n) == pairs[i].want,
              "same_answer('%s', '%s', %d) != %d", pairs[i].a, pairs[i].b, pairs[i].n, pairs[i].want);
}

/* The grid against the calls it is made of: every method's answer to each
 * prompt equals subq_recall_answer's (sparse prefill) or, after a dense
 * prefill copied over, subq_recall_continue's, in a context of that plan;
 * the scores add up; full attention agrees with itself; method names parse
 * or are refused. */
typedef struct grid_answers {
    char want[2][4][2][64]; /* [method][cell][trial] */
    int n_seen, n_differ;
} grid_answers;

static void on_grid_answer(void *user, int method, int li, int di, int trial, const subq_recall_prompt *pr,
                           const char *answer, double score) {
    grid_answers *g = user;
    (void)pr, (void)score;
    g->n_seen++;
    if (strncmp(g->want[method][li * 2 + di][trial], answer, 63)) g->n_differ++;
}

static void check_grid(const char *path) {
    subq_error err = {0};
    subq_recall_method me;
    int phi;
    struct { const char *name; int ok, full, k, phi; } names[] = {
        {"full", 1, 1, 0, 0}, {"exact@64", 1, 0, 64, 0}, {"window@8+phi", 1, 0, 8, 1}, {"exact", 0, 0, 0, 0},
        {"exact@", 0, 0, 0, 0}, {"nope@4", 0, 0, 0, 0}, {"exact@4+psi", 0, 0, 0, 0}, {"@4", 0, 0, 0, 0}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        memset(&me, 0, sizeof me);
        subq_status s = subq_recall_method_parse(names[i].name, &me, &phi, &err);
        CHECK((s == SUBQ_OK) == names[i].ok, "parse '%s': %d", names[i].name, s);
        if (!s && names[i].ok)
            CHECK(me.full == names[i].full && (me.full || me.plan.top_k == names[i].k) && phi == names[i].phi,
                  "parse '%s': full %d k %d phi %d", names[i].name, me.full, me.plan.top_k, phi);
    }
    subq_model *m = NULL;
    subq_context *c = NULL, *ref = NULL, *dense = NULL;
    subq_recall *r = NULL;
    subq_context_params cp = subq_context_default_params();
    cp.n_ctx = 320;
    cp.n_threads = 1;
    subq_recall_params rp = subq_recall_default_params();
    rp.haystack = hay_text;
    rp.haystack_len = strlen(hay_text);
    float *logits = malloc(sizeof(float) * 512); /* stories260K's vocabulary */
    if (!logits || subq_model_load(path, &m, &err) || subq_context_new(m, &cp, &c, &err) ||
        subq_context_new(m, &cp, &ref, &err) || subq_context_new(m, &cp, &dense, &err) ||
        subq_recall_new(m, &rp, &r, &err)) {
        printf("FAIL: grid setup: %s\n", err.msg);
        failures++;
        goto done;
    }
    subq_recall_method methods[2];
    memset(methods, 0, sizeof methods);
    subq_recall_method_parse("window@8", &methods[0], &phi, &err);
    methods[0].plan = subq_attn_plan_default();
    methods[0].plan.selector = SUBQ_SELECT_WINDOW;
    methods[0].plan.top_k = 8;
    methods[0].plan.n_tail = 4;
    methods[0].plan.layers = "all";
    subq_recall_method_parse("full", &methods[1], &phi, &err);
    const int lengths[2] = {128, 300};
    const double depths[2] = {0.2, 0.8};
    for (int sparse = 0; sparse < 2; sparse++) {
        grid_answers ga = {0};
        double want_score[2][4] = {{0}};
        for (int mi = 0; mi < 2; mi++)
            for (int cell = 0; cell < 4; cell++)
                for (int t = 0; t < 2; t++) {
                    subq_recall_prompt pr;
                    double score = 0;
                    subq_attn_plan plan = methods[mi].plan;
                    plan.sparse_prefill = sparse;
                    subq_context_clear_plan(ref);
                    subq_context_reset(ref);
                    subq_context_reset(dense);
                    char *answer = ga.want[mi][cell][t];
                    subq_status s = methods[mi].full ? SUBQ_OK : subq_context_set_plan(ref, &plan, NULL, NULL, &err);
                    if (!s) s = subq_recall_make_prompt(r, lengths[cell / 2], depths[cell % 2], t, &pr, &err);
                    if (s) {
                        printf("FAIL: reference: %s\n", err.msg);
                        failures++;
                        continue;
                    }
                    if (!sparse && !methods[mi].full) /* the grid's dense prefill, copied */
                        s = subq_decode(dense, pr.tokens, pr.n_tokens, logits, 0, &err) ||
                            subq_context_copy(ref, dense, &err) ||
                            subq_recall_continue(ref, &pr, 8, answer, 64, &score, &err);
                    else
                        s = subq_recall_answer(ref, &pr, 8, answer, 64, &score, &err);
                    CHECK(!s, "reference answer: %s", err.msg);
                    want_score[mi][cell] += score;
                    subq_recall_prompt_free(&pr);
                }
        subq_recall_grid_params gp = {.lengths = lengths, .n_lengths = 2, .depths = depths, .n_depths = 2,
                                      .trials = 2, .max_new = 8, .sparse_prefill = sparse, .methods = methods,
                                      .n_methods = 2, .on_answer = on_grid_answer, .user = &ga};
        subq_recall_grid g;
        if (subq_recall_run_grid(c, r, &gp, &g, &err)) {
            printf("FAIL: grid (sparse prefill %d): %s\n", sparse, err.msg);
            failures++;
            continue;
        }
        int n_text = 0;
        for (int i = 0; i < 16; i++) n_text += ga.want[i / 8][i / 2 % 4][i % 2][0] != '\0';
        CHECK(n_text > 8, "only %d of 16 answers have text: the comparison would be vacuous", n_text);
        CHECK(g.full_method == 1 && g.n_cells == 4 && g.agree, "grid shape");
        CHECK(ga.n_seen == 16 && ga.n_differ == 0, "sparse prefill %d: %d of %d answers differ from the calls'",
              sparse, ga.n_differ, ga.n_seen);
        for (int mi = 0; mi < 2; mi++)
            for (int cell = 0; cell < 4; cell++)
                CHECK(g.score[mi * 4 + cell] == want_score[mi][cell], "score of method %d cell %d", mi, cell);
        for (int cell = 0; cell < 4; cell++) CHECK(g.agree[4 + cell] == 2, "full disagrees with itself");
        subq_recall_grid_free(&g);
    }
done:
    free(logits);
    subq_recall_free(r);
    subq_context_free(dense);
    subq_context_free(ref);
    subq_context_free(c);
    subq_model_free(m);
}

int main(void) {
    const char *shared = getenv("SUBQ_SHARED"), *tmp = getenv("SUBQ_TMP");
    char path[4096], bpe[4096];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", shared ? shared : "../shared");
    check_scoring();
    check_model(path, "stories260K");
    check_grid(path);
    /* a byte-level BPE vocabulary (no SentencePiece space prefix) */
    snprintf(bpe, sizeof bpe, "%s/test_recall_qwen2.gguf", tmp ? tmp : "/tmp");
    subq_error err = {0};
    if (subq_synth_model("tiny-qwen2", "f32", 1, bpe, &err)) {
        printf("FAIL: synth: %s\n", err.msg);
        failures++;
    } else {
        check_model(bpe, "tiny-qwen2");
        remove(bpe);
    }
    if (failures) {
        printf("test_recall: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_recall: ok\n");
    return 0;
}
