/* subq tokenize: token ids of a text (one line, space separated). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char *help =
    "usage: subq tokenize -m MODEL (-p TEXT | -f FILE) [--no-bos] [--pieces]\n"
    "Print the token ids of a text, space separated, on one line.\n\n"
    "  -m, --model FILE     GGUF model whose vocabulary to use (required)\n"
    "  -p, --prompt TEXT    text to tokenise\n"
    "  -f, --file FILE      read the text from a file\n"
    "  --no-bos             do not prepend BOS\n"
    "  --pieces             print id:'piece' pairs, one per line\n";

int cmd_tokenize(int argc, char **argv) {
    const char *cmd = "tokenize";
    const char *model = NULL, *text = NULL, *file = NULL;
    int no_bos = 0, pieces = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (cli_is_help(a)) {
            fputs(help, stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(model = cli_value(cmd, argc, argv, &i))) return 1;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            if (!(text = cli_value(cmd, argc, argv, &i))) return 1;
        } else if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            if (!(file = cli_value(cmd, argc, argv, &i))) return 1;
        } else if (!strcmp(a, "--no-bos")) {
            no_bos = 1;
        } else if (!strcmp(a, "--pieces")) {
            pieces = 1;
        } else {
            return cli_error(cmd, "unknown option '%s' (see subq tokenize --help)", a);
        }
    }
    if (!model) return cli_error(cmd, "no model given; use -m FILE.gguf");
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
