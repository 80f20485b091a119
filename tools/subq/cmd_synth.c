/* subq synth: random-weight model of a named real shape. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "subq_lab.h"

static const char *help =
    "usage: subq synth --shape NAME --type TYPE -o OUT.gguf [-s SEED] [--force]\n"
    "Write a random-weight GGUF model of a real shape (for tests and speed work).\n\n"
    "  --shape NAME         model shape: %s\n"
    "  --type TYPE          weight type of 2-D tensors: f32, f16, bf16, q8_0, q4_0,\n"
    "                       q4_K, q5_K, q6_K (default f32)\n"
    "  -s, --seed N         random seed (default 1)\n"
    "  -o, --output FILE    output file (required; written atomically)\n"
    "  --force              replace an existing output file (without it, one is refused)\n";

int cmd_synth(int argc, char **argv) {
    const char *cmd = "synth";
    const char *shape = NULL, *type_name = "f32", *out = NULL;
    uint64_t seed = 1;
    int force = 0;
    char help_text[2048];
    snprintf(help_text, sizeof help_text, help, subq_synth_shapes());
    const cli_flag flags[] = {
        CLI_STRING(NULL, "--shape", &shape), CLI_STRING(NULL, "--type", &type_name), CLI_U64("-s", "--seed", &seed),
        CLI_STRING("-o", "--output", &out),  CLI_SET(NULL, "--force", &force),
    };
    int rc;
    if (!cli_parse_flags(cmd, help_text, argc, argv, flags, sizeof flags / sizeof flags[0], &rc)) return rc;
    if (!shape || !out) return cli_error(cmd, "--shape and -o are required (shapes: %s)", subq_synth_shapes());
    if (!cli_output_ok(cmd, out, force)) return 1;
    subq_error err = {0};
    if (subq_synth_model(shape, type_name, seed, out, &err)) return cli_error(cmd, "%s", err.msg);
    fprintf(stderr, "subq synth: wrote %s (%s, %s weights, seed %llu)\n", out, shape, type_name,
            (unsigned long long)seed);
    return 0;
}
