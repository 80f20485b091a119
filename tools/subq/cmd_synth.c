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
    const char *shape = NULL, *type_name = "f32", *out = NULL, *v;
    uint64_t seed = 1;
    int force = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (cli_is_help(a)) {
            printf(help, subq_synth_shapes());
            return 0;
        } else if (!strcmp(a, "--shape")) {
            if (!(shape = cli_value(cmd, argc, argv, &i))) return 1;
        } else if (!strcmp(a, "--type")) {
            if (!(type_name = cli_value(cmd, argc, argv, &i))) return 1;
        } else if (!strcmp(a, "-s") || !strcmp(a, "--seed")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) || !cli_parse_u64(cmd, a, v, &seed)) return 1;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (!(out = cli_value(cmd, argc, argv, &i))) return 1;
        } else if (!strcmp(a, "--force")) {
            force = 1;
        } else {
            return cli_error(cmd, "unknown option '%s' (see subq synth --help)", a);
        }
    }
    if (!shape || !out) return cli_error(cmd, "--shape and -o are required (shapes: %s)", subq_synth_shapes());
    if (!cli_output_ok(cmd, out, force)) return 1;
    subq_error err = {0};
    if (subq_synth_model(shape, type_name, seed, out, &err)) return cli_error(cmd, "%s", err.msg);
    fprintf(stderr, "subq synth: wrote %s (%s, %s weights, seed %llu)\n", out, shape, type_name,
            (unsigned long long)seed);
    return 0;
}
