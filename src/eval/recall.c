/* Needle-in-a-haystack prompts, greedy answers and their scores (subq
 * recall). Prompts are built with the model's tokenizer, answers come
 * through subq_generate. Prompt construction works in tokens, so a prompt
 * has exactly the length asked for and the needle sits exactly where the
 * depth says (snapped to a word start). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/rng.h"
#include "model/model.h"
#include "subq_lab.h"
#include "tokenize/tokenizer.h"

#define MAX_NEEDLES 8
#define SNAP_WINDOW 16 /* tokens searched either side of a depth for a word start */

/* Keys of the multi-key tasks: short, common words, one token or two in
 * most vocabularies. */
static const char *const key_words[] = {"apple", "river", "window", "garden", "silver", "forest", "candle", "harbor",
                                        "meadow", "pencil", "rocket", "violin", "marble", "lantern", "orchard", "tiger"};
#define N_KEY_WORDS ((int)(sizeof key_words / sizeof key_words[0]))

/* The filler of the pass-key test (Mohtashami & Jaggi 2023; llama.cpp's
 * passkey example, InfLLM), used when no haystack is given: the only number
 * in the prompt is the key. */
static const char *const passkey_filler =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";
#define PASSKEY_FILLER_REPEATS 64

static const char *const task_names[] = {"passkey", "niah-multikey", "niah-multivalue"};

int subq_recall_task_parse(const char *name) {
    for (int i = 0; name && i < 3; i++)
        if (!strcmp(name, task_names[i])) return i;
    return -1;
}

const char *subq_recall_task_name(subq_recall_task t) { return (int)t >= 0 && (int)t < 3 ? task_names[t] : "?"; }

subq_recall_params subq_recall_default_params(void) {
    subq_recall_params p = {.task = SUBQ_RECALL_PASSKEY, .n_keys = 4, .n_values = 4, .seed = 1};
    return p;
}

void subq_recall_prompt_free(subq_recall_prompt *pr) {
    if (!pr) return;
    free(pr->tokens);
    memset(pr, 0, sizeof *pr);
}

/* Tokens of text (no BOS) into a malloc'd array of the right size. */
static subq_status tokenize(const subq_model *m, const char *text, size_t len, int32_t **out, int *n,
                            subq_error *err) {
    size_t got = 0;
    subq_status s = tokenizer_encode_alloc(m->tok, text, len, false, false, out, &got, err);
    if (s) return s;
    if (got > (size_t)1 << 30) {
        free(*out);
        *out = NULL;
        return subq_fail(err, SUBQ_ERR_RANGE, "text too long (%zu tokens)", got);
    }
    *n = (int)got;
    return SUBQ_OK;
}

/* Whether token `tok` following `prev` starts a new word in the text (its
 * bytes begin with a space or follow a newline). */
static int word_start(const subq_model *m, int32_t prev, int32_t tok) {
    char a[64], b[64];
    int lb = tokenizer_token_to_piece(m->tok, prev, tok, b, sizeof b);
    if (lb > 0 && (b[0] == ' ' || b[0] == '\n')) return 1;
    int la = tokenizer_token_to_piece(m->tok, -1, prev, a, sizeof a);
    return la > 0 && la <= (int)sizeof a && a[la - 1] == '\n';
}

/* The prompt's pieces as text. A needle or question begins with a space
 * when the tokenizer does not add one itself (byte-level BPE), so that it
 * starts a word after the filler. */
typedef struct pieces {
    char needle[MAX_NEEDLES][160];
    int n_needles;
    char question[200];
    int n_values;
    char values[MAX_NEEDLES][16];
} pieces;

static void make_pieces(const subq_recall_params *p, uint64_t *rng, const char *lead, pieces *pc) {
    memset(pc, 0, sizeof *pc);
    if (p->task == SUBQ_RECALL_PASSKEY) {
        unsigned key = 10000u + (unsigned)(rng_next_u64(rng) % 90000u);
        snprintf(pc->values[0], sizeof pc->values[0], "%u", key);
        snprintf(pc->needle[0], sizeof pc->needle[0], "%sThe pass key is %u. Remember it. %u is the pass key.", lead,
                 key, key);
        snprintf(pc->question, sizeof pc->question, "%sWhat is the pass key? The pass key is", lead);
        pc->n_needles = pc->n_values = 1;
        return;
    }
    /* distinct key words, the asked one first */
    int order[N_KEY_WORDS];
    for (int i = 0; i < N_KEY_WORDS; i++) order[i] = i;
    for (int i = N_KEY_WORDS - 1; i > 0; i--) {
        int j = (int)(rng_next_u64(rng) % (uint64_t)(i + 1)), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    int multivalue = p->task == SUBQ_RECALL_MULTIVALUE;
    pc->n_needles = multivalue ? p->n_values : p->n_keys;
    pc->n_values = multivalue ? p->n_values : 1;
    for (int i = 0; i < pc->n_needles; i++) {
        const char *word = key_words[order[multivalue ? 0 : i]];
        unsigned num = 1000000u + (unsigned)(rng_next_u64(rng) % 9000000u);
        if (i < pc->n_values) snprintf(pc->values[i], sizeof pc->values[i], "%u", num);
        snprintf(pc->needle[i], sizeof pc->needle[i], "%sThe special magic number for %s is %u.", lead, word, num);
    }
    if (multivalue)
        snprintf(pc->question, sizeof pc->question,
                 "%sWhat are all the special magic numbers for %s? The special magic numbers for %s are", lead,
                 key_words[order[0]], key_words[order[0]]);
    else
        snprintf(pc->question, sizeof pc->question,
                 "%sWhat is the special magic number for %s? The special magic number for %s is", lead,
                 key_words[order[0]], key_words[order[0]]);
}

/* Insertion point in the filler: the word start nearest to `at` within the
 * snap window (the ends of the filler always qualify). */
static int snap(const subq_model *m, const int32_t *fill, int n_fill, int at) {
    for (int d = 0; d <= SNAP_WINDOW; d++) {
        int cand[2] = {at - d, at + d};
        for (int i = 0; i < 2; i++) {
            int k = cand[i];
            if (k < 0 || k > n_fill) continue;
            if (k == 0 || k == n_fill || word_start(m, fill[k - 1], fill[k])) return k;
        }
    }
    return at;
}

struct subq_recall {
    const subq_model *m;
    subq_recall_params p;
    subq_model_info info;
    int32_t *hay;      /* the haystack's tokens */
    int n_hay;
    int spm_space;     /* the tokenizer puts a space before the first word itself */
};

void subq_recall_free(subq_recall *r) {
    if (!r) return;
    free(r->hay);
    free(r);
}

subq_status subq_recall_new(const subq_model *m, const subq_recall_params *p, subq_recall **out, subq_error *err) {
    *out = NULL;
    if ((int)p->task < 0 || (int)p->task > 2) return subq_fail(err, SUBQ_ERR_ARG, "unknown recall task %d", p->task);
    if ((p->task == SUBQ_RECALL_MULTIKEY && (p->n_keys < 1 || p->n_keys > MAX_NEEDLES)) ||
        (p->task == SUBQ_RECALL_MULTIVALUE && (p->n_values < 1 || p->n_values > MAX_NEEDLES)))
        return subq_fail(err, SUBQ_ERR_ARG, "needles per prompt must be in [1, %d]", MAX_NEEDLES);
    subq_recall *r = calloc(1, sizeof *r);
    if (!r) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    r->m = m;
    r->p = *p;
    r->p.haystack = NULL; /* only its tokens are kept */
    subq_model_get_info(m, &r->info);
    int32_t *probe = NULL;
    int n_probe = 0;
    /* does the tokenizer put a space before the first word itself (SentencePiece)? */
    subq_status s = tokenize(m, "a", 1, &probe, &n_probe, err);
    if (!s) {
        char piece[16];
        r->spm_space = n_probe > 0 && tokenizer_token_to_piece(m->tok, probe[0], probe[0], piece, sizeof piece) > 0 &&
                       piece[0] == ' ';
    }
    free(probe);
    /* no haystack: the pass-key filler, each sentence group starting a word,
     * so that the filler reads the same where its tokens wrap around */
    char *filler = NULL;
    const char *hay = p->haystack;
    size_t hay_len = p->haystack_len;
    if (!s && !hay) {
        const size_t n1 = strlen(passkey_filler) + 1;
        filler = malloc(n1 * PASSKEY_FILLER_REPEATS + 1);
        hay_len = 0;
        if (!filler) s = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
        for (int i = 0; filler && i < PASSKEY_FILLER_REPEATS; i++)
            hay_len += (size_t)sprintf(filler + hay_len, "%s%s", r->spm_space && i == 0 ? "" : " ", passkey_filler);
        hay = filler;
    }
    int text = 0; /* something besides white space */
    for (size_t i = 0; !s && i < hay_len && !text; i++)
        text = !strchr(" \t\r\n\f\v", hay[i]);
    if (!s) s = tokenize(m, hay ? hay : "", hay ? hay_len : 0, &r->hay, &r->n_hay, err);
    free(filler);
    if (!s && (r->n_hay == 0 || !text)) s = subq_fail(err, SUBQ_ERR_ARG, "the haystack holds no text");
    if (s) {
        subq_recall_free(r);
        return s;
    }
    *out = r;
    return SUBQ_OK;
}

subq_status subq_recall_make_prompt(const subq_recall *r, int length, double depth, int trial,
                                    subq_recall_prompt *out, subq_error *err) {
    memset(out, 0, sizeof *out);
    const subq_model *m = r->m;
    const subq_recall_params *p = &r->p;
    const subq_model_info info = r->info;
    if (!(depth >= 0.0 && depth <= 1.0)) return subq_fail(err, SUBQ_ERR_ARG, "depth %g is outside [0, 1]", depth);
    if (length < 1 || length > (1 << 30))
        return subq_fail(err, SUBQ_ERR_ARG, "length %d is outside [1, 2^30]", length);
    const int32_t *hay = r->hay;
    const int n_hay = r->n_hay, spm_space = r->spm_space;
    int32_t *needle[MAX_NEEDLES] = {0}, *question = NULL, *fill = NULL;
    int n_needle[MAX_NEEDLES] = {0}, n_question = 0;
    subq_status s = SUBQ_OK;
    /* keys, filler offset and distractor depths depend on (seed, length,
     * trial), not on the depth: across depths only the needle moves */
    uint64_t rng = rng_seed(p->seed ^ rng_seed((uint64_t)length << 32 ^ (uint64_t)(uint32_t)trial));
    pieces pc;
    make_pieces(p, &rng, spm_space ? "" : " ", &pc);
    int n_fixed = info.add_bos && info.bos_id >= 0 ? 1 : 0;
    for (int i = 0; i < pc.n_needles && !s; i++) {
        s = tokenize(m, pc.needle[i], strlen(pc.needle[i]), &needle[i], &n_needle[i], err);
        n_fixed += n_needle[i];
    }
    if (!s) s = tokenize(m, pc.question, strlen(pc.question), &question, &n_question, err);
    if (s) goto done;
    n_fixed += n_question;
    const int n_fill = length - n_fixed;
    if (n_fill < 0) {
        s = subq_fail(err, SUBQ_ERR_ARG, "the needles and the question take %d tokens, more than the length %d",
                      n_fixed, length);
        goto done;
    }
    /* filler: the haystack's tokens from a seeded offset, repeated to length */
    fill = malloc((size_t)(n_fill > 0 ? n_fill : 1) * sizeof(int32_t));
    if (!fill) {
        s = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
        goto done;
    }
    int off = (int)(rng_next_u64(&rng) % (uint64_t)n_hay);
    for (int i = 0; i < n_fill; i++) fill[i] = hay[(off + i) % n_hay];
    /* where each needle goes: the asked one (needle 0) at the depth, the
     * others at random depths; ascending insertion points, ties in needle order */
    int at[MAX_NEEDLES], idx[MAX_NEEDLES];
    for (int i = 0; i < pc.n_needles; i++) {
        double d = i == 0 ? depth : (double)rng_uniform(&rng);
        at[i] = snap(m, fill, n_fill, (int)(d * n_fill + 0.5));
        idx[i] = i;
    }
    for (int i = 1; i < pc.n_needles; i++) /* insertion sort by point */
        for (int j = i; j > 0 && (at[idx[j]] < at[idx[j - 1]] || (at[idx[j]] == at[idx[j - 1]] && idx[j] < idx[j - 1])); j--) {
            int t = idx[j];
            idx[j] = idx[j - 1];
            idx[j - 1] = t;
        }
    out->tokens = malloc((size_t)length * sizeof(int32_t));
    if (!out->tokens) {
        s = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
        goto done;
    }
    int n = 0, f = 0;
    if (info.add_bos && info.bos_id >= 0) out->tokens[n++] = info.bos_id;
    for (int k = 0; k < pc.n_needles; k++) {
        int i = idx[k];
        while (f < at[i]) out->tokens[n++] = fill[f++];
        if (i == 0) out->needle_pos = n, out->needle_len = n_needle[0];
        memcpy(out->tokens + n, needle[i], (size_t)n_needle[i] * sizeof(int32_t));
        n += n_needle[i];
    }
    while (f < n_fill) out->tokens[n++] = fill[f++];
    memcpy(out->tokens + n, question, (size_t)n_question * sizeof(int32_t));
    n += n_question;
    out->n_tokens = n;
    out->n_filler = n_fill;
    out->n_values = pc.n_values;
    memcpy(out->values, pc.values, sizeof out->values);
done:
    if (s) subq_recall_prompt_free(out);
    for (int i = 0; i < MAX_NEEDLES; i++) free(needle[i]);
    free(question);
    free(fill);
    return s;
}

double subq_recall_score(const subq_recall_prompt *pr, const char *text, size_t len) {
    if (pr->n_values <= 0) return 0.0;
    int found = 0;
    for (int v = 0; v < pr->n_values; v++) {
        const size_t vl = strlen(pr->values[v]);
        /* every maximal run of digits in the text, compared whole */
        for (size_t i = 0; i < len;) {
            if (text[i] < '0' || text[i] > '9') {
                i++;
                continue;
            }
            size_t j = i;
            while (j < len && text[j] >= '0' && text[j] <= '9') j++;
            if (j - i == vl && !memcmp(text + i, pr->values[v], vl)) {
                found++;
                break;
            }
            i = j;
        }
    }
    return (double)found / pr->n_values;
}

/* The answer as it streams: up to the first newline after some text. */
typedef struct answer_text {
    char *buf;
    size_t cap, n;
} answer_text;

static int on_piece(void *user, int32_t tok, const char *piece, size_t len) {
    answer_text *a = user;
    (void)tok;
    for (size_t b = 0; b < len; b++) {
        if (piece[b] == '\n' && a->n > 0) return 1;
        if (a->n + 1 < a->cap) a->buf[a->n] = piece[b];
        a->n++;
    }
    return 0;
}

/* Greedy answer of at most max_new tokens, ended by end-of-sequence or a
 * newline; subq_generate prefills what the context lacks of the prompt. */
static subq_status answer(subq_context *c, const subq_recall_prompt *pr, int max_new, char *text, size_t cap,
                          double *score, subq_error *err) {
    subq_model_info mi;
    subq_model_get_info(subq_context_model(c), &mi);
    answer_text a = {text, cap, 0};
    subq_generate_params gp = subq_generate_default_params();
    gp.n_predict = max_new;
    gp.sampler.temp = 0;
    gp.end_tokens[0] = mi.eos_id;
    gp.on_token = on_piece;
    gp.user = &a;
    subq_generate_result res;
    subq_status s = subq_generate(c, pr->tokens, pr->n_tokens, &gp, &res, err);
    if (cap) text[a.n < cap ? a.n : cap - 1] = '\0';
    if (!s) *score = subq_recall_score(pr, text, strlen(text));
    return s;
}

subq_status subq_recall_answer(subq_context *c, const subq_recall_prompt *pr, int max_new, char *text, size_t cap,
                               double *score, subq_error *err) {
    *score = 0.0;
    if (cap) text[0] = '\0';
    if (subq_context_n_past(c) != 0) return subq_fail(err, SUBQ_ERR_ARG, "recall needs an empty context");
    return answer(c, pr, max_new, text, cap, score, err);
}

subq_status subq_recall_continue(subq_context *c, const subq_recall_prompt *pr, int max_new, char *text, size_t cap,
                                 double *score, subq_error *err) {
    *score = 0.0;
    if (cap) text[0] = '\0';
    const int n = pr->n_tokens;
    if (subq_context_n_past(c) != n || memcmp(subq_context_tokens(c), pr->tokens, (size_t)n * sizeof(int32_t)) ||
        !subq_context_last_logits(c))
        return subq_fail(err, SUBQ_ERR_ARG, "the context does not hold the prompt and its last logits");
    return answer(c, pr, max_new, text, cap, score, err);
}

/* The first n maximal digit runs of two texts, in order, compared whole:
 * an answer's numbers, whatever the decoding went on to say after them. */
int subq_recall_same_answer(const char *a, const char *b, int n) {
    for (int i = 0; i < n; i++) {
        while (*a && (*a < '0' || *a > '9')) a++;
        while (*b && (*b < '0' || *b > '9')) b++;
        if (!*a || !*b) return !*a && !*b;
        size_t la = 0, lb = 0;
        while (a[la] >= '0' && a[la] <= '9') la++;
        while (b[lb] >= '0' && b[lb] <= '9') lb++;
        if (la != lb || memcmp(a, b, la)) return 0;
        a += la, b += lb;
    }
    return 1;
}
