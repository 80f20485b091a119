/* subq bench --prefill-ctx (bench_prefill.c). */
#ifndef SUBQ_BENCH_PREFILL_H
#define SUBQ_BENCH_PREFILL_H

#include <stdint.h>

#include "cli.h"
#include "cli_sparse.h"

typedef struct bench_prefill_opts {
    const int *lengths; /* prompt lengths (--prefill-ctx) */
    int n_len;
    const int *attn; /* -1 = full, else subq_selector_kind */
    int n_attn;
    const char *text_file; /* --prefill-text: prompt tokens from this text; NULL: random ids */
    const char *svg_file;  /* --prefill-svg: the log-log chart of time against length; NULL: none */
    int n_decode;          /* decode steps timed after each prefill */
    int contend;           /* --contend: all of it beside this many busy threads (0: none) */
    uint64_t seed;
    int json;
} bench_prefill_opts;

/* Runs the whole --prefill-ctx benchmark (loads the model with a context
 * that holds the longest prompt) and prints its table or JSON; returns the
 * command's exit status. */
int bench_prefill_run(const char *cmd, bench_prefill_opts *o, const cli_model_opts *mo, cli_sparse_opts *so);

#endif
