/* subq tokenize: token ids of a text (one line, space separated), or a
 * training corpus tokenised once into a file (--data ... -o FILE). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "subq_lab.h"

#define MAX_PATHS 256

static const char *help =
    "usage: subq tokenize -m MODEL (-p TEXT | -f FILE) [--no-bos] [--pieces]\n"
    "       subq tokenize -m MODEL --data PATH... [--eval-data PATH...] -o FILE [--force]\n"
    "Print the token ids of a text, space separated, on one line; or tokenise a\n"
    "training corpus once into a file that train-search, train-phi and eval take\n"
    "as their only --data: they then tokenise nothing, and each data-parallel rank\n"
    "reads only the tokens of its own sequences. --seq, packing and the held-out\n"
    "split are chosen when the file is used, as for text.\n\n"
    "  -m, --model FILE     GGUF model whose vocabulary to use (required; the file\n"
    "                       serves every model with the same tokenizer)\n"
    "  -p, --prompt TEXT    text to tokenise\n"
    "  -f, --file FILE      read the text from a file\n"
    "  --no-bos             do not prepend BOS\n"
    "  --pieces             print id:'piece' pairs, one per line\n"
    "  --data PATH          corpus text: a UTF-8 file (one document), a .jsonl file\n"
    "                       (one document per {\"text\": ...} line) or a directory\n"
    "                       of them (repeatable)\n"
    "  --eval-data PATH     held-out text, same forms (repeatable)\n"
    "  -o, --output FILE    the pre-tokenised corpus (GGUF, written atomically)\n"
    "  --force              replace an existing output file (without it, one is refused)\n";

/* --data/--eval-data ... -o FILE */
static int tokenize_corpus(const char *cmd, const char *model, const char *const *data, int n_data,
                           const char *const *eval_data, int n_eval, const char *out) {
    subq_error err = {0};
    subq_model *m = NULL;
    if (subq_model_load(model, &m, &err)) return cli_error(cmd, "%s", err.msg);
    /* the widest pieces: they are cut again when the file is used */
    const subq_corpus_params p = {.seq = 1 << 30, .pack = 0, .eval_frac = 0.0f, .eval_only = 1};
    subq_corpus *c = NULL;
    int rc = 0;
    if (subq_corpus_load(m, &p, data, n_data, eval_data, n_eval, &c, &err) || subq_corpus_save(c, out, &err)) {
        rc = cli_error(cmd, "%s", err.msg);
    } else {
        subq_corpus_info info;
        subq_corpus_get_info(c, &info);
        printf("wrote %s: %d documents (%d held out), %lld tokens\n", out, info.n_docs + info.n_eval_docs,
               info.n_eval_docs, (long long)info.n_tokens);
    }
    subq_corpus_free(c);
    subq_model_free(m);
    return rc;
}

int cmd_tokenize(int argc, char **argv) {
    const char *cmd = "tokenize";
    const char *model = NULL, *text = NULL, *file = NULL, *out = NULL;
    const char *data[MAX_PATHS], *eval_data[MAX_PATHS];
    int no_bos = 0, pieces = 0, n_data = 0, n_eval = 0, force = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (cli_is_help(a)) return cli_help(help);
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(model = cli_value(cmd, argc, argv, &i))) return 1;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            if (!(text = cli_value(cmd, argc, argv, &i))) return 1;
        } else if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            if (!(file = cli_value(cmd, argc, argv, &i))) return 1;
        } else if (!strcmp(a, "--data") || !strcmp(a, "--eval-data")) {
            const int is_eval = !strcmp(a, "--eval-data");
            const char *v = cli_value(cmd, argc, argv, &i);
            if (!v) return 1;
            if (n_data + n_eval == MAX_PATHS) return cli_error(cmd, "more than %d data paths", MAX_PATHS);
            if (is_eval) eval_data[n_eval++] = v;
            else data[n_data++] = v;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (!(out = cli_value(cmd, argc, argv, &i))) return 1;
        } else if (!strcmp(a, "--no-bos")) {
            no_bos = 1;
        } else if (!strcmp(a, "--pieces")) {
            pieces = 1;
        } else if (!strcmp(a, "--force")) {
            force = 1;
        } else {
            return cli_error(cmd, "unknown option '%s' (see subq tokenize --help)", a);
        }
    }
    if (!model) return cli_error(cmd, "no model given; use -m FILE.gguf");
    if (n_data + n_eval > 0 || out) {
        if (text || file || no_bos || pieces)
            return cli_error(cmd, "--data/--eval-data/-o make a corpus file; -p, -f, --no-bos and --pieces print tokens");
        if (!out) return cli_error(cmd, "no output given for the corpus; use -o FILE");
        if (n_data + n_eval == 0) return cli_error(cmd, "no corpus text given; use --data PATH");
        if (!cli_output_ok(cmd, out, force)) return 1;
        return tokenize_corpus(cmd, model, data, n_data, eval_data, n_eval, out);
    }
    if (!text && !file) return cli_error(cmd, "no text given; use -p TEXT or -f FILE");
    subq_error err = {0};
    char *buf = NULL;
    size_t len = text ? strlen(text) : 0;
    if (file) {
        if (subq_read_file(file, 0, &buf, &len, &err)) return cli_error(cmd, "%s", err.msg);
        text = buf;
    }
    subq_model *m = NULL;
    if (subq_model_load(model, &m, &err)) {
        free(buf);
        return cli_error(cmd, "%s", err.msg);
    }
    subq_model_info info;
    subq_model_get_info(m, &info);
    int32_t *toks = NULL;
    size_t n = 0;
    int rc = 0;
    if (cli_tokenize(m, text, len, !no_bos && info.add_bos, 0, &toks, &n, &err)) {
        rc = cli_error(cmd, "%s", err.msg);
    } else if (pieces) {
        for (size_t i = 0; i < n && !rc; i++) {
            printf("%d:'", toks[i]);
            if (cli_write_piece(stdout, m, -2, toks[i], &err)) rc = cli_error(cmd, "%s", err.msg);
            printf("'\n");
        }
    } else {
        for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", toks[i]);
        printf("\n");
    }
    free(toks);
    free(buf);
    subq_model_free(m);
    return rc;
}
