/* Shared helpers for the subq subcommands. */
#ifndef SUBQ_CLI_H
#define SUBQ_CLI_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "subq.h"

/* A subcommand (main.c's table): argv[0] is its name; returns the exit code. */
typedef int cli_command(int argc, char **argv);
cli_command cmd_info, cmd_generate, cmd_perplexity, cmd_tokenize, cmd_logits, cmd_synth, cmd_dequant, cmd_bench,
    cmd_eval, cmd_train_search, cmd_train_phi, cmd_serve, cmd_recall, cmd_merge, cmd_split, cmd_convert;

/* Seconds on a monotonic clock. */
double cli_now_s(void);

/* Print "subq CMD: error: MSG" as one line on stderr; returns 1 (the exit code). */
int cli_error(const char *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Whether the command may write its output `path` (checked before any work
 * is done): yes when nothing is there; an existing file or symbolic link
 * only with `force` (--force; the link itself is then replaced, never the
 * file it leads to); a directory, FIFO or device never. 0 after a one-line
 * error naming the path. */
int cli_output_ok(const char *cmd, const char *path, int force);
/* Whether anything (a dangling symbolic link too) is at path; opens nothing,
 * so a FIFO there cannot block. */
int cli_path_exists(const char *path);
/* The directory of outputs like --svg-dir exists: 0 after a one-line error naming flag. */
int cli_output_dir_ok(const char *cmd, const char *flag, const char *dir);

/* Parse helpers: print a one-line error and return 0 on bad input. */
int cli_parse_int(const char *cmd, const char *flag, const char *s, long lo, long hi, int *out);
int cli_parse_u64(const char *cmd, const char *flag, const char *s, uint64_t *out);
int cli_parse_float(const char *cmd, const char *flag, const char *s, float *out);
/* Value of the option at argv[*i] (advances *i); NULL + error when missing. */
const char *cli_value(const char *cmd, int argc, char **argv, int *i);
int cli_is_help(const char *a);
/* The programs' malloc policy, set first thing in main: freed heap memory
 * is kept and blocks up to 32 MiB come from the heap (cli.c says why). */
void cli_malloc_policy(void);
/* A command's exit code once stdout is flushed: output that never reached
 * stdout (a full disk, /dev/full) is an error, not a success: one line,
 * status 1 (a command that failed has said why). */
int cli_finish_stdout(const char *cmd, int rc);
/* Print a command's help on stdout; returns 0 (the exit code). */
int cli_help(const char *help);

/* A command's options as a table: each row's names (short_name may be
 * NULL), what it takes and where it goes: STRING const char **; SET int *
 * set to 1; INT int * and I64 int64_t * within [lo, hi]; U64 uint64_t *;
 * FLOAT float *; INT_LIST "8,16,32", at most hi integers >= lo into the
 * int array dst, their count into *n. */
typedef enum cli_flag_kind {
    CLI_FLAG_STRING, CLI_FLAG_SET, CLI_FLAG_INT, CLI_FLAG_I64, CLI_FLAG_U64, CLI_FLAG_FLOAT, CLI_FLAG_INT_LIST
} cli_flag_kind;
typedef struct cli_flag {
    const char *short_name, *long_name;
    cli_flag_kind kind;
    void *dst;
    long lo, hi;
    int *n;
} cli_flag;
/* The rows; each destination passes through a pointer of its kind's type,
 * so that the compiler checks it. */
#define CLI_FLAG_ROW(s, l, k, to) .short_name = (s), .long_name = (l), .kind = (k), .dst = (to)
#define CLI_STRING(s, l, to) {CLI_FLAG_ROW(s, l, CLI_FLAG_STRING, (const char **){to})}
#define CLI_SET(s, l, to) {CLI_FLAG_ROW(s, l, CLI_FLAG_SET, (int *){to})}
#define CLI_INT(s, l, to, lo_, hi_) {CLI_FLAG_ROW(s, l, CLI_FLAG_INT, (int *){to}), .lo = (lo_), .hi = (hi_)}
#define CLI_I64(s, l, to, lo_, hi_) {CLI_FLAG_ROW(s, l, CLI_FLAG_I64, (int64_t *){to}), .lo = (lo_), .hi = (hi_)}
#define CLI_U64(s, l, to) {CLI_FLAG_ROW(s, l, CLI_FLAG_U64, (uint64_t *){to})}
#define CLI_FLOAT(s, l, to) {CLI_FLAG_ROW(s, l, CLI_FLAG_FLOAT, (float *){to})}
#define CLI_INT_LIST(s, l, to, count, lo_, cap) \
    {CLI_FLAG_ROW(s, l, CLI_FLAG_INT_LIST, (int *){to}), .lo = (lo_), .hi = (cap), .n = (count)}
/* If argv[*i] is one of the table's options, parse it (advancing *i) and
 * return 1; 0 when it is none of them; -1 after a one-line error. */
int cli_flag_take(const char *cmd, const cli_flag *flags, int n_flags, int argc, char **argv, int *i);
/* Parse all of argv[1..] by the table: -h/--help prints help; an unknown
 * option or a bad value is one line. Returns 1 to go on, or 0 with
 * *exit_code the command's exit code (0 after the help, 1 after an error). */
int cli_parse_flags(const char *cmd, const char *help, int argc, char **argv, const cli_flag *flags, int n_flags,
                    int *exit_code);

/* Tokenise text into a malloc'd array of exactly the right size (*toks, *n);
 * `special`: the text of special tokens becomes them (subq_tokenize_special). */
subq_status cli_tokenize(const subq_model *m, const char *text, size_t len, int add_bos, int special, int32_t **toks,
                         size_t *n, subq_error *err);
/* The text of token tok (after prev), whatever its length: in `small` (cap
 * bytes) when it fits, else in a malloc'd *heap (the caller frees it; NULL
 * otherwise). *n gets the length; NULL and err on failure. */
const char *cli_piece(const subq_model *m, int32_t prev, int32_t tok, char *small, size_t cap, char **heap, size_t *n,
                      subq_error *err);
/* Write the text of token tok (after prev) to f, whatever its length. */
subq_status cli_write_piece(FILE *f, const subq_model *m, int32_t prev, int32_t tok, subq_error *err);

/* The JSON writer of every --json output, so that it is always valid JSON:
 * a string literal with control characters escaped and bytes that are not
 * valid UTF-8 replaced by U+FFFD, and a number, or null when it is not finite. */
void cli_json_string(FILE *f, const char *s, size_t len);
void cli_json_num(FILE *f, double v);

/* Parse "f32", "f16", "q8_0", "q4_0" into a KV type. */
int cli_parse_kv_type(const char *cmd, const char *s, subq_kv_type *out);



/* Options shared by the commands that run a model. */
typedef struct cli_model_opts {
    const char *model;
    int n_threads;
    int n_ctx;
    int n_batch;
    subq_kv_type kv_type;
    subq_load_mode load_mode;
    const char *kv_file;
    int kv_reset;     /* --kv-reset: the tokens the --kv-file holds may be dropped */
    int kv_recover;   /* --kv-recover: continue from the older header slot when the newest is damaged */
    int kv_continues; /* set by the command: it continues from what a --kv-file holds (generate,
                         logits); else cli_load refuses a file that holds tokens without --kv-reset */
    int swa_full;
    int far_keys;     /* set by the command: its plan reads past the trained context with far keys at
                         trained distances (--far-pos), so a longer context is not warned about */
} cli_model_opts;

#define CLI_MODEL_OPTS_HELP                                                        \
    "  -m, --model FILE     GGUF model (required)\n"                               \
    "  -t, --threads N      threads (default: all cores)\n"                        \
    "  -c, --ctx-size N     context size in tokens (default: model's)\n"          \
    "  -b, --batch-size N   tokens per forward step; longer prompts run in batches (default 512)\n" \
    "  --kv TYPE            KV cache type: f32, f16, q8_0, q4_0 (default f32)\n"            \
    "  --kv-file FILE       keep the KV cache in FILE, mapped and read from disk only where\n" \
    "                       queries attend, so the context may exceed RAM (-c tokens, reserved\n" \
    "                       on disk at once); the file is the session: generate and serve\n" \
    "                       continue from the tokens it holds. A dense layer reads all of its\n" \
    "                       rows every token (from disk once they leave the page cache): make\n" \
    "                       every layer sparse, or give dense ones --topk-layers L:K\n" \
    "  --kv-reset           let this run drop the tokens the --kv-file holds (generate, logits:\n" \
    "                       replace them; the other commands refuse a file that holds tokens\n" \
    "                       without it)\n" \
    "  --kv-recover         continue from the older header slot of a --kv-file whose newest one\n" \
    "                       is damaged (without it such a file is refused, saying what it loses)\n" \
    "  --swa-full           sliding-window layers keep every token's keys, not just their\n" \
    "                       window plus a batch (more memory; prompts may then reuse any\n" \
    "                       cached prefix)\n" \
    "  --mmap, --no-mmap    map the model file, or read it into memory in 2 MiB pages\n" \
    "                       (faster decode); default: read in when it takes at most\n"   \
    "                       half the available memory\n"

/* If argv[*i] is one of the shared options, parse it (advancing *i) and
 * return 1; return 0 if it is not one; -1 after printing an error. */
int cli_parse_model_opt(const char *cmd, int argc, char **argv, int *i, cli_model_opts *o);
/* "8,16,32": up to cap integers in [lo, hi] into out, their count into *n
 * (at least one); 0 after a one-line error naming flag. */
int cli_parse_int_list(const char *cmd, const char *flag, const char *s, long lo, long hi, int cap, int *out, int *n);
/* Load the model and create a context; prints the error and returns 0 on
 * failure. With a --kv-file: a warning line when it was read from its older
 * header slot (--kv-recover); and unless o->kv_continues, a file that holds
 * tokens is refused without --kv-reset, and emptied with it. */
int cli_load(const char *cmd, const cli_model_opts *o, subq_model **m, subq_context **c);
/* The warning line of a context whose --kv-file was read from its older
 * header slot (nothing otherwise). */
void cli_kv_warn(const char *cmd, const char *path, const subq_context *c);
#endif
