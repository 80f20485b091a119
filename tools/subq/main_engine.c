/* subq-generate and subq-serve: `subq generate` and `subq serve` as programs
 * of their own (llama.cpp's llama-cli and llama-server), linked against the
 * engine library alone: what a server needs, none of the lab. The build
 * names the command: SUBQ_ENGINE_NAME ("generate") and SUBQ_ENGINE_RUN
 * (cmd_generate). */
#include <stdio.h>
#include <string.h>

#include "cli.h"

int main(int argc, char **argv) {
    cli_malloc_policy();
    if (argc > 1 && !strcmp(argv[1], "--version")) {
        printf("subq-%s %s (kernels: %s)\n", SUBQ_ENGINE_NAME, subq_version(), subq_isa_name());
        return cli_finish_stdout(SUBQ_ENGINE_NAME, 0);
    }
    return cli_finish_stdout(SUBQ_ENGINE_NAME, SUBQ_ENGINE_RUN(argc, argv));
}
