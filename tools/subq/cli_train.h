/* What `subq train-search` and `subq train-phi` share: the options of the
 * training driver (subq_train_params in include/subq.h), loading the model, layers and data, and
 * running the library's trainer with progress on stderr, a JSON-lines log
 * (FILE.log.jsonl, created once the run has started) and Ctrl-C. */
#ifndef SUBQ_CLI_TRAIN_H
#define SUBQ_CLI_TRAIN_H

#include <stdio.h>

#include "cli.h"
#include "subq_lab.h"

#define CLI_TRAIN_MAX_PATHS 256

typedef struct cli_train {
    const char *cmd;            /* "train-search" */
    subq_train_params *cfg;          /* the command's config.train */
    const char *model, *out, *log_path;
    const char *layers;         /* --layers spec */
    const char *reserve;        /* layers removed from --layers (NULL: none) */
    const char *data[CLI_TRAIN_MAX_PATHS], *eval_data[CLI_TRAIN_MAX_PATHS];
    int n_data, n_eval;
    int json;
    int force;                  /* --force: replace an existing output and checkpoint */
    int mpi_timeout;            /* --mpi-timeout: seconds a rank waits for the others */
    subq_corpus_params corpus;       /* --seq, --no-pack, --eval-frac (seed: the run's) */
    /* filled by cli_train_load */
    subq_model *m;
    subq_corpus *data_set;
    int *layer_ids;
} cli_train;

/* Defaults for the command `cmd` training with cfg. */
void cli_train_init(cli_train *o, const char *cmd, subq_train_params *cfg, const char *layers);
/* If argv[*i] is a driver option or a data path, parse it (advancing *i)
 * and return 1; 0 if it is not one; -1 after printing an error. */
int cli_train_option(cli_train *o, int argc, char **argv, int *i);
/* The whole command line: each argument a driver option (cli_train_option)
 * or one of the command's own (flags); 0 after a one-line error (an
 * unknown option too). -h / --help is the caller's, before. */
int cli_train_parse(cli_train *o, int argc, char **argv, const cli_flag *flags, int n_flags);
/* Checks after parsing (output, data, ranges); prints the error and returns
 * 0 on failure. need_out: an output path is required. */
int cli_train_check(cli_train *o, int need_out, int need_data);
/* Load the model, resolve the layers (into cfg) and load the data
 * (eval_only: no training split needed); prints the error and returns 0 on
 * failure. */
int cli_train_load(cli_train *o, int eval_only);
void cli_train_free(cli_train *o);

/* Help sections for the shared options, with the defaults of cfg. */
void cli_train_help_data(void);
void cli_train_help_optim(const subq_train_params *d);
void cli_train_help_eval(const subq_train_params *d);
void cli_train_help_output(const subq_train_params *d);

/* How a command shows its task's numbers. */
typedef struct cli_train_ui {
    /* the figures after the progress bar, e.g. "loss 1.2 (nce .. kl ..)" */
    void (*step_text)(char *buf, size_t cap, const subq_train_step_stats *s);
    /* an evaluation: lines on stderr, and one JSON object (log and --json) */
    void (*print_eval)(const subq_train_eval_stats *e, const void *arg);
    void (*json_eval)(FILE *f, const subq_train_eval_stats *e);
    const void *arg;            /* for print_eval */
    const char *start_note;     /* a line printed after the start line, or NULL */
    char extra_json[256];       /* fields added to the start record and the --json summary */
} cli_train_ui;

/* The library's entry point for the command's config. */
typedef subq_status (*cli_train_fn)(subq_model *m, const subq_corpus *data, const void *cfg, const subq_train_hooks *hooks,
                                    subq_train_result *res, subq_error *err);

/* Run the training and report; returns the exit code. */
int cli_train_run(cli_train *o, const cli_train_ui *ui, cli_train_fn run, const void *cfg);

#endif
