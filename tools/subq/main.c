/* subq: command-line front end. One file per subcommand. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

typedef struct command {
    const char *name;
    cli_command *run;
    const char *help;
} command;

static const command commands[] = {
    {"info", cmd_info, "show a GGUF file's metadata and tensor table"},
    {"generate", cmd_generate, "generate text from a prompt"},
    {"perplexity", cmd_perplexity, "perplexity of a text file (llama.cpp's method)"},
    {"tokenize", cmd_tokenize, "print the token ids of a text"},
    {"logits", cmd_logits, "write the logits of a token sequence (testing)"},
    {"synth", cmd_synth, "write a random-weight model of a named shape"},
    {"dequant", cmd_dequant, "dequantise raw blocks of a ggml type to float32, for testing"},
    {"eval", cmd_eval, "sparse vs full attention quality on held-out text"},
    {"recall", cmd_recall, "needle-in-a-haystack recall over lengths x depths, full vs sparse"},
    {"bench", cmd_bench, "prefill/decode speed vs the machine's bandwidth and sgemm rate"},
    {"train-search", cmd_train_search, "learn search projections by distillation from the model's attention"},
    {"train-phi", cmd_train_phi, "learn completion feature maps (top-K + linear-attention completion); --diagnose"},
    {"serve", cmd_serve, "OpenAI-compatible HTTP server with a reusable prompt cache"},
    {"merge", cmd_merge, "merge search projections into a model file (ann-sparseattention runtime layout)"},
    {"split", cmd_split, "write the search projections merged into a model file as a projection file"},
    {"convert", cmd_convert, "search projections between ann-sparseattention .pt, safetensors and .gguf"},
};

static void usage(FILE *out) {
    fprintf(out, "usage: subq COMMAND [options]   (subq COMMAND --help for its options; subq --version)\n\n"
                 "commands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-12s %s\n", commands[i].name, commands[i].help);
}

int main(int argc, char **argv) {
    cli_malloc_policy();
    if (argc < 2) {
        usage(stderr);
        return 1;
    }
    if (cli_is_help(argv[1])) {
        usage(stdout);
        return cli_finish_stdout("", 0);
    }
    if (!strcmp(argv[1], "--version")) {
        printf("subq %s (kernels: %s)\n", subq_version(), subq_isa_name());
        return cli_finish_stdout("", 0);
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(argv[1], commands[i].name) == 0)
            return cli_finish_stdout(commands[i].name, commands[i].run(argc - 1, argv + 1));
    fprintf(stderr, "subq: error: unknown command '%s' (run subq --help for the list)\n", argv[1]);
    return 1;
}
