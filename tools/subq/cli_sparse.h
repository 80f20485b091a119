/* Flags shared by the commands that can run sparse attention: they fill a
 * public attention plan (include/subq.h) and load what it needs. */
#ifndef SUBQ_CLI_SPARSE_H
#define SUBQ_CLI_SPARSE_H

#include "cli.h"
#include "subq.h"

typedef struct cli_sparse_opts {
    int enabled;                 /* any sparse flag was given */
    const char *search_file;     /* --search FILE (or the model file when it carries projections) */
    int model_search;            /* search_file is the model's own merged projections */
    int no_search;               /* --no-search: ignore projections merged into the model */
    int topk_set;                /* --topk given */
    int random_search;           /* --random-search D: random projections on layers 2..L-3 */
    int random_search_heads;     /* --random-search-heads G: their granularity (subq_search_granularity) */
    float search_rope_scale;     /* --search-rope-scale S: replaces the file's position scale (0: keep) */
    const char *complete_file;   /* --complete FILE: completion maps from subq train-phi */
    const char *complete_heads;  /* --complete-heads entropy>=X */
    subq_attn_plan plan;
    subq_search *search;         /* loaded by cli_sparse_load; freed by cli_sparse_free */
    subq_complete *complete;
} cli_sparse_opts;

#define CLI_SPARSE_OPTS_HELP                                                                     \
    "sparse attention (retrieve-then-attend):\n"                                                 \
    "  --search FILE        search projections from subq train-search (default: those\n"      \
    "                       merged into the model file, if any; see subq merge)\n"           \
    "  --no-search          ignore the projections merged into the model file\n"            \
    "  --random-search D    random projections of width D on layers 2..L-3 (speed work)\n"      \
    "  --random-search-heads G  their search heads: layer (one set a layer, default) |\n"      \
    "                       kv-head | head (one set per KV head / query head, D each)\n"       \
    "  --search-rope-scale S  projections that rotate by position (train-search --rope-dims):\n" \
    "                       positions x S instead of the file's scale (position interpolation,\n" \
    "                       e.g. 0.25 at 4x the trained length)\n"                              \
    "  --select KIND        exact | hnsw | faiss | quest | oracle | window (default exact)\n"   \
    "  --sparse-layers L    layers to substitute: all, 1-4, 2--3 (default: layers with\n"      \
    "                       projections; all layers for quest/oracle/window)\n"                \
    "  --topk K             candidates retrieved per query (default 64)\n"                     \
    "  --topk-layers L:K,...  these layers (or ranges) retrieve K keys by exact selection\n"  \
    "                       whatever --select says, e.g. 0-1:2048,-2--1:2048 for layers\n"   \
    "                       otherwise dense\n"                                                \
    "  --sink N             first tokens always kept (default 4)\n"                            \
    "  --tail N             most recent tokens always kept (default 16; --sink 0 --tail 0:\n" \
    "                       exactly the K retrieved keys)\n"                                  \
    "  --hnsw-m N, --hnsw-ef-construction N, --hnsw-ef-search N   (defaults 32, 40, 64)\n"     \
    "  --quest-page N       Quest page size in tokens (default 16)\n"                          \
    "  --quest-mode M       per-head (each query head its own pages, default) | headmean\n"  \
    "  --oracle S           headmean-dot (default) | headmean-cosine (the seed's raw-QK\n"   \
    "                       oracle) | per-head (each query head its own exact top-K) |\n"    \
    "                       per-kv-head (each KV head one top-K of its group's mean logit)\n" \
    "  --search-f16         store search keys in f16 (exact, hnsw)\n"                         \
    "  --score cosine|dot   rank search keys by cosine (default) or raw inner product\n"       \
    "  --scan full|int8|int4|auto  exact: scan the stored keys, or int8 / int4 codes of\n"    \
    "                       them with their best K + min(3K, 1536) re-ranked on the stored\n" \
    "                       keys; auto: the keys below 2 MiB a scan, int4 codes from there\n" \
    "                       (default auto)\n"                                                \
    "  --nprobe N           exact, sparse prefill: rank blocks of keys by their mean key and\n" \
    "                       scan the keys of the N best only (default 64; 0: every key)\n"    \
    "  --block-keys N       keys per block of --nprobe (default 64)\n"                         \
    "  --probe-from N       use --nprobe once a prompt token sees N keys (default 8192)\n"   \
    "  --group-blocks N     past --group-from keys, rank groups of N blocks by their mean\n"  \
    "                       key first, and only the blocks of the best groups (default 16;\n" \
    "                       0: one level)\n"                                                  \
    "  --group-probe N      groups whose blocks are ranked (default 32)\n"                    \
    "  --block-reps N       rank each block and group by its mean and its N keys farthest\n"   \
    "                       from it, the best of them (default 0: the mean)\n"               \
    "  --group-from N       use --group-blocks once a prompt token sees N keys (default\n"    \
    "                       131072)\n"                                                        \
    "  --clusters N         with --far-pos, past --cluster-from keys: find a prompt token's\n"   \
    "                       far keys in N content clusters (k-means, an inverted file as\n" \
    "                       FAISS's IVF) instead of the block scan (default 2048; 0: blocks)\n" \
    "  --cluster-probe N    clusters whose far keys a token scans (default 96)\n"            \
    "  --cluster-from N     train the clusters once a prompt token sees N keys (default\n"   \
    "                       8192); fewer until 16 keys a cluster, trained again as the\n" \
    "                       keys double, and probed in proportion\n"                    \
    "  --probe-check N      every Nth token of --nprobe also runs the full scan and counts\n" \
    "                       its recall (bench prints it; costs time) (default 0: none)\n"     \
    "  --far-pos S          keys farther than --far-from attended at trained distances:\n"   \
    "                       none (default) | window (all at --far-from, InfLLM) | order\n"    \
    "                       (contiguous in their order, ReAttention) | group (distances\n"   \
    "                       divided into the trained ones, Self-Extend); dense layers\n"    \
    "                       attend the sinks + the keys within --far-from once past it\n"  \
    "  --far-from N         distance beyond which keys are far (default: the model's\n"      \
    "                       trained context less --tail)\n"                                 \
    "  --complete FILE      add the linear-attention completion of the unretrieved tokens\n" \
    "                       (maps from subq train-phi) on the layers the file covers\n"       \
    "  --complete-heads entropy>=X   complete only heads whose mid-region entropy (measured\n" \
    "                       by subq train-phi --diagnose --annotate) is at least X\n"

cli_sparse_opts cli_sparse_default(void);
/* 1: consumed argv[*i] (and its value); 0: not a sparse flag; -1: error printed. */
int cli_parse_sparse_opt(const char *cmd, int argc, char **argv, int *i, cli_sparse_opts *o);
/* The options every model command shares: the model's (cli_parse_model_opt),
 * the sparse plan's (when so is not NULL) and -h / --help (help printed).
 * In a command's option loop:
 *     const int r = cli_common_opt(cmd, help, argc, argv, &i, &mo, &so);
 *     if (r == CLI_OPT_TAKEN) continue;
 *     if (r != CLI_OPT_NONE) return r == CLI_OPT_HELP ? 0 : 1;
 * then the command's own options. */
enum { CLI_OPT_NONE, CLI_OPT_TAKEN, CLI_OPT_HELP, CLI_OPT_ERROR };
int cli_common_opt(const char *cmd, const char *help, int argc, char **argv, int *i, cli_model_opts *mo,
                   cli_sparse_opts *so);
/* A whole command line: the shared options (cli_common_opt), then the
 * command's own table (cli_flag_take); an unknown option is one line.
 * Returns 1 to go on, or 0 with *exit_code the command's exit code (0
 * after the help, 1 after an error). */
int cli_parse_command(const char *cmd, const char *help, int argc, char **argv, cli_model_opts *mo,
                      cli_sparse_opts *so, const cli_flag *flags, int n_flags, int *exit_code);
/* After the flags: with no --search, --random-search or --no-search, a
 * model file that carries merged search projections (subq merge, or
 * ann-sparseattention's merge script) runs sparse on them, with its top-K
 * unless --topk is given. Prints the error and returns 0 when the model's
 * projections are malformed. */
int cli_sparse_model_default(const char *cmd, cli_sparse_opts *o, const char *model_path);
/* Load or create the projections and load the completion maps into o.
 * Prints the error and returns 0 on failure, having freed what it loaded. */
int cli_sparse_load(const char *cmd, cli_sparse_opts *o, const subq_model *m);
/* When any sparse flag was given: cli_sparse_load, then set the plan on an
 * empty context. Prints the error and returns 0 on failure. */
int cli_apply_sparse(const char *cmd, cli_sparse_opts *o, const subq_model *m, subq_context *c);
/* The plan with another selector kind and K (eval, bench and recall sweep
 * them); the other flags are kept. */
subq_attn_plan cli_plan_with(const cli_sparse_opts *o, subq_selector_kind kind, int top_k);
/* Set the plan of the flags with `kind` / `top_k` (and the completion only
 * when `complete`) on an empty context. Prints the error, returns 0. */
int cli_set_plan(const char *cmd, const cli_sparse_opts *o, subq_context *c, subq_selector_kind kind, int top_k,
                 int complete);
void cli_sparse_free(cli_sparse_opts *o);
/* The end of a model command: its context, the plan's handles, the model
 * (each may be NULL). */
void cli_unload(subq_model *m, subq_context *c, cli_sparse_opts *so);

#endif
