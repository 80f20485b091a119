/* The shared parts of the training commands (cli_train.h). */
#include "cli_train.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"
#include "progress.h"
#include "cli.h"
#include "cli_mpi.h"

void cli_train_init(cli_train *o, const char *cmd, subq_train_params *cfg, const char *layers) {
    memset(o, 0, sizeof *o);
    o->cmd = cmd;
    o->cfg = cfg;
    o->layers = layers;
    o->corpus = (subq_corpus_params){.seq = 512, .pack = 1, .eval_frac = 0.05f};
}

int cli_train_option(cli_train *o, int argc, char **argv, int *i) {
    const char *cmd = o->cmd, *a = argv[*i];
    subq_train_params *c = o->cfg;
    if (a[0] != '-' || a[1] == '\0' || !strcmp(a, "-f") || !strcmp(a, "--data") || !strcmp(a, "--eval-data")) {
        const int is_eval = !strcmp(a, "--eval-data");
        const char *v = a;
        if (a[0] == '-' && a[1] != '\0' && !(v = cli_value(cmd, argc, argv, i))) return -1;
        if ((is_eval ? o->n_eval : o->n_data) >= CLI_TRAIN_MAX_PATHS) {
            cli_error(cmd, "more than %d data paths", CLI_TRAIN_MAX_PATHS);
            return -1;
        }
        if (is_eval) o->eval_data[o->n_eval++] = v;
        else o->data[o->n_data++] = v;
        return 1;
    }
    if (!strcmp(a, "--no-pack")) return o->corpus.pack = 0, 1;
    const cli_flag flags[] = {
        CLI_STRING("-m", "--model", &o->model),
        CLI_INT("-t", "--threads", &c->n_threads, 1, 1024),
        CLI_INT("-ub", "--ubatch", &c->n_ubatch, 1, 1 << 20),
        CLI_STRING("-o", "--output", &o->out),
        CLI_STRING(NULL, "--log", &o->log_path),
        CLI_STRING(NULL, "--layers", &o->layers),
        CLI_INT(NULL, "--seq", &o->corpus.seq, 2, 1 << 20),
        CLI_FLOAT(NULL, "--eval-frac", &o->corpus.eval_frac),
        CLI_INT(NULL, "--batch", &c->batch, 1, 1 << 16),
        CLI_INT(NULL, "--grad-accum", &c->grad_accum, 1, 1 << 16),
        CLI_FLOAT(NULL, "--lr", &c->lr),
        CLI_FLOAT(NULL, "--wd", &c->weight_decay),
        CLI_FLOAT(NULL, "--beta2", &c->beta2),
        CLI_FLOAT(NULL, "--clip", &c->grad_clip),
        CLI_INT(NULL, "--warmup", &c->warmup, 0, 1 << 30),
        CLI_I64(NULL, "--steps", &c->steps, 1, 2000000000),
        CLI_I64(NULL, "--stop-after", &c->stop_after, 1, 2000000000),
        CLI_INT(NULL, "--eval-every", &c->eval_every, 0, 1 << 30),
        CLI_I64(NULL, "--eval-tokens", &c->eval_tokens, 0, 2000000000),
        CLI_INT(NULL, "--save-every", &c->save_every, 0, 1 << 30),
        CLI_SET(NULL, "--resume", &c->resume),
        CLI_SET(NULL, "--json", &o->json),
        CLI_SET(NULL, "--force", &o->force),
        CLI_INT(NULL, "--mpi-timeout", &o->mpi_timeout, 1, 1 << 20),
        CLI_U64("-s", "--seed", &c->seed),
    };
    return cli_flag_take(cmd, flags, sizeof flags / sizeof flags[0], argc, argv, i);
}

int cli_train_parse(cli_train *o, int argc, char **argv, const cli_flag *flags, int n_flags) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r = cli_train_option(o, argc, argv, &i);
        if (!r) r = cli_flag_take(o->cmd, flags, n_flags, argc, argv, &i);
        if (!r) cli_error(o->cmd, "unknown option '%s' (see subq %s --help)", a, o->cmd);
        if (r <= 0) return 0;
    }
    return 1;
}

int cli_train_check(cli_train *o, int need_out, int need_data) {
    const char *cmd = o->cmd;
    const subq_train_params *c = o->cfg;
    if (!o->model) return !cli_error(cmd, "no model given; use -m FILE.gguf");
    if (need_out && !o->out) return !cli_error(cmd, "no output given; use -o FILE.gguf");
    if (need_out && !c->resume) { /* a finished or interrupted run is never lost by accident */
        char ckpt[4096], log[4096];
        snprintf(ckpt, sizeof ckpt, "%s.ckpt", o->out);
        snprintf(log, sizeof log, "%s.log.jsonl", o->out);
        const char *outs[3] = {o->out, ckpt, o->log_path ? o->log_path : log};
        for (int k = 0; k < 3; k++) {
            struct stat st; /* a symbolic link counts: --force replaces the link, never its target */
            if (!o->force && lstat(outs[k], &st) == 0 && (S_ISREG(st.st_mode) || S_ISLNK(st.st_mode)))
                return !cli_error(cmd, "%s exists: continue that run with --resume, or start over with --force",
                                  outs[k]);
            if (!cli_output_ok(cmd, outs[k], 1)) return 0; /* a directory, FIFO or device: never */
        }
    }
    if (need_data && o->n_data == 0)
        return !cli_error(cmd, "no training data given; pass text files, directories or .jsonl files");
    if (!(c->lr >= 0) || !(c->weight_decay >= 0)) return !cli_error(cmd, "--lr and --wd must be >= 0");
    if (!(c->beta2 >= 0 && c->beta2 < 1)) return !cli_error(cmd, "--beta2 must be in [0, 1)");
    if (!(o->corpus.eval_frac >= 0 && o->corpus.eval_frac < 1)) return !cli_error(cmd, "--eval-frac must be in [0, 1)");
    return 1;
}

/* the layers of --layers minus those of --reserve, ascending */
static int parse_layers(cli_train *o) {
    const char *cmd = o->cmd;
    subq_model_info info;
    subq_model_get_info(o->m, &info);
    const int L = info.n_layer;
    subq_error err = {0};
    unsigned char *mask = malloc((size_t)L), *rmask = calloc((size_t)L, 1);
    int ok = 1;
    o->layer_ids = malloc((size_t)L * sizeof(int));
    if (!mask || !rmask || !o->layer_ids) ok = !cli_error(cmd, "out of memory");
    else if (subq_model_parse_layers(o->m, o->layers, mask, &err)) ok = !cli_error(cmd, "--layers: %s", err.msg);
    else if (o->reserve && subq_parse_layers(o->reserve, L, rmask, &err)) ok = !cli_error(cmd, "--reserve: %s", err.msg);
    int n = 0;
    for (int l = 0; ok && l < L; l++)
        if (mask[l] && !rmask[l]) o->layer_ids[n++] = l;
    if (ok && n == 0) {
        if (o->reserve)
            ok = !cli_error(cmd, "--layers %s minus --reserve %s leaves no layer to train", o->layers, o->reserve);
        else ok = !cli_error(cmd, "--layers %s leaves no layer to train", o->layers);
    }
    o->cfg->layers = o->layer_ids;
    o->cfg->n_layers = n;
    free(mask);
    free(rmask);
    return ok;
}

int cli_train_load(cli_train *o, int eval_only) {
    subq_error err = {0};
    if (subq_model_load(o->model, &o->m, &err)) return !cli_error(o->cmd, "%s", err.msg);
    if (!parse_layers(o)) return 0;
    subq_corpus_params cp = o->corpus;
    cp.seed = o->cfg->seed;
    cp.eval_only = eval_only;
    if (subq_corpus_load(o->m, &cp, o->data, o->n_data, o->eval_data, o->n_eval, &o->data_set, &err))
        return !cli_error(o->cmd, "%s", err.msg);
    return 1;
}

void cli_train_free(cli_train *o) {
    subq_corpus_free(o->data_set);
    subq_model_free(o->m);
    free(o->layer_ids);
}

/* ---- help ------------------------------------------------------------------ */

void cli_train_help_data(void) {
    fputs("model and data:\n"
          "  -m, --model FILE     GGUF model (required)\n"
          "  -t, --threads N      threads (default: all cores)\n"
          "  -ub, --ubatch N      tokens per forward batch of the frozen model (default: the whole\n"
          "                       sequence: train-search's teacher then also gives each target\n"
          "                       layer's attention, which the forward no longer computes)\n"
          "  -f, --data PATH      training text: a UTF-8 file (one document), a .jsonl file\n"
          "                       ({\"text\": ...} per line, one document each) or a directory of\n"
          "                       them (recursive, name order); repeatable; bare arguments count too;\n"
          "                       or, alone, a corpus tokenised once by `subq tokenize --data ... -o\n"
          "                       FILE`: nothing is tokenised and only the tokens trained on are read\n"
          "  --eval-data PATH     held-out text, same forms (repeatable); default: hold out\n"
          "                       --eval-frac of the training pieces\n"
          "  --eval-frac F        held-out fraction of the pieces, deterministic (default 0.05)\n"
          "  --seq N              tokens per sequence, BOS included (default 512); longer\n"
          "                       documents are cut into pieces of N tokens, each starting at position 0\n"
          "  --no-pack            one piece per sequence (default: pack pieces into sequences of\n"
          "                       --seq tokens with block-causal masking and positions restarting per piece)\n",
          stdout);
}

void cli_train_help_optim(const subq_train_params *d) {
    printf("optimisation:\n"
           "  --steps N            optimiser steps (default %lld)\n"
           "  --batch N            sequences per step (default %d)\n"
           "  --grad-accum N       gradient accumulation: each step averages the gradient over\n"
           "                       --batch x N sequences, exactly as --batch (batch x N) would\n"
           "                       (default %d)\n"
           "  --lr F               peak AdamW learning rate (default %g)\n"
           "  --wd F               AdamW weight decay (default %g)\n"
           "  --beta2 F            AdamW second-moment decay, in [0, 1) (default %g)\n"
           "  --warmup N           linear warm-up steps, then cosine decay to 0 (default %d)\n"
           "  --clip F             global gradient-norm clip, 0 = off (default %g)\n"
           "  -s, --seed N         seed for the initial weights and the data order (default %llu)\n",
           (long long)d->steps, d->batch, d->grad_accum, (double)d->lr, (double)d->weight_decay, (double)d->beta2,
           d->warmup, (double)d->grad_clip, (unsigned long long)d->seed);
}

void cli_train_help_eval(const subq_train_params *d) {
    printf("evaluation (held-out split):\n"
           "  --eval-every N       evaluate before training and every N steps; 0 = only at the end\n"
           "                       (default %d)\n"
           "  --eval-tokens N      held-out tokens per evaluation, 0 = all (default %lld)\n",
           d->eval_every, (long long)d->eval_tokens);
}

void cli_train_help_output(const subq_train_params *d) {
    printf("output:\n"
           "  -o, --output FILE    the weights (GGUF, required); the checkpoint is FILE.ckpt\n"
           "  --save-every N       write FILE and FILE.ckpt every N steps (default %d; always at the end)\n"
           "  --resume             continue from FILE.ckpt (same options and data required)\n"
           "  --force              replace an existing FILE, FILE.ckpt and log (without it, a run\n"
           "                       whose outputs exist is refused unless it is resumed)\n"
           "  --stop-after N       stop after step N with a checkpoint, as if interrupted (the\n"
           "                       learning-rate schedule still spans --steps)\n"
           "  --log FILE           JSON-lines log of train and eval metrics (default FILE.log.jsonl;\n"
           "                       appended to on --resume; written once the run has started)\n"
           "  --json               print a JSON summary on stdout at the end\n"
           "data-parallel (mpirun, in a build with Open MPI):\n"
           "  mpirun -np N subq COMMAND ...  N processes, on this machine or several (--hostfile),\n"
           "                       train together: each takes its share of every step's --batch x\n"
           "                       --grad-accum sequences and of the held-out ones and the gradients\n"
           "                       are summed, so any N follows one process's trajectory; rank 0\n"
           "                       alone writes FILE, the checkpoint and the log. Every rank reads the\n"
           "                       model, the data and (--resume, with any N) the checkpoint itself:\n"
           "                       put them where all see them. Text data is tokenised by every rank;\n"
           "                       from a pre-tokenised corpus (subq tokenize -o) each rank reads only\n"
           "                       its own sequences. Ranks with other options or files fail at the start\n"
           "  --mpi-timeout N      seconds a rank waits for the others in one exchange before the run\n"
           "                       ends with an error (default 600)\n",
           d->save_every);
}

/* ---- running -------------------------------------------------------------- */

/* The CLI owns the Ctrl-C flag; the library only polls it. */
static volatile sig_atomic_t g_stop;
static void on_sigint(int sig) {
    (void)sig;
    g_stop = 1;
}

typedef struct run_state {
    const cli_train *o;
    const cli_train_ui *ui;
    FILE *log;
    int log_failed;             /* errno of the log's open */
    progress bar;
    int bar_started;
    int n_parts;
    const char *const *part_names;
    double sgemm;               /* the machine's sgemm rate, GFLOP/s: the bound of the counted work */
    int n_threads;              /* the run's, for that rate */
    /* copy of the last evaluation, for --json */
    int have_eval;
    subq_train_eval_stats ev;
    subq_train_eval_layer *ev_layers;
    subq_retrieval_eval *ev_acc;
} run_state;

/* The bound of the counted work: the best of sgemm's rates at the prefill
 * shape on n_threads threads and on one (each the best of >= 0.25 s). Beside
 * another busy process, OpenMP's default (spinning) wait leaves a
 * multi-threaded sgemm waiting on its threads a time slice at a time: a few
 * GFLOP/s where one thread runs ~100. n threads can do what one does, so the
 * 1-thread rate is a floor of the bound. *many and *one receive the two rates. */
static double sgemm_bound(const subq_model_info *mi, int n_threads, double *many, double *one) {
    *many = bench_sgemm_gflops(512, mi->n_ff, mi->n_embd, n_threads, 2);
    *one = n_threads > 1 ? bench_sgemm_gflops(512, mi->n_ff, mi->n_embd, 1, 2) : *many;
    return *many > *one ? *many : *one;
}

static int on_start(void *user, const subq_train_start_info *info) {
    run_state *u = user;
    const char *cmd = u->o->cmd;
    /* opened only now: a run that fails to start (a refused --resume) leaves no log behind. Never through
     * a symbolic link (a new run replaces one: --force was given), never a FIFO or device (no wait) */
    const char *path = u->o->log_path;
    struct stat st;
    if (!info->resumed && lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) unlink(path);
    int fd = open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | (info->resumed ? O_APPEND : 0),
                  0644);
    int e = fd < 0 ? errno : 0;
    if (!e && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) e = EINVAL; /* not a regular file */
    if (!e && !info->resumed && ftruncate(fd, 0) != 0) e = errno;
    if (!e && !(u->log = fdopen(fd, info->resumed ? "a" : "w"))) e = errno;
    if (e) {
        u->log_failed = e;
        if (fd >= 0) close(fd);
        return 1;
    }
    u->n_parts = info->n_parts;
    u->part_names = info->part_names;
    subq_model_info mi;
    subq_model_get_info(u->o->m, &mi);
    u->n_threads = info->n_threads;
    double many, one;
    u->sgemm = sgemm_bound(&mi, info->n_threads, &many, &one);
    fprintf(stderr, "subq %s: %s step %lld of %lld; %zu parameters; %d train sequences (%lld tokens), "
                    "%d held-out (%lld tokens), %d threads\n",
            cmd, info->resumed ? "resuming at" : "starting at", (long long)info->start_step,
            (long long)u->o->cfg->steps, info->n_params, info->n_train_seq, (long long)info->train_tokens,
            info->n_eval_seq, (long long)info->eval_tokens, info->n_threads);
    if (info->n_threads > 1)
        fprintf(stderr, "subq %s: sgemm runs at %.1f GFLOP/s here (%d threads %.1f, 1 thread %.1f): the bound of the "
                        "GFLOP/s below\n", cmd, u->sgemm, info->n_threads, many, one);
    else
        fprintf(stderr, "subq %s: sgemm runs at %.1f GFLOP/s here (1 thread): the bound of the GFLOP/s below\n", cmd,
                u->sgemm);
    fprintf(u->log, "{\"type\": \"start\", \"step\": %lld, \"resumed\": %s, \"n_params\": %zu, \"n_train_seq\": %d, "
                    "\"train_tokens\": %lld, \"n_eval_seq\": %d, \"eval_tokens\": %lld, \"threads\": %d, "
                    "\"sgemm_gflops\": %.2f%s%s}\n",
            (long long)info->start_step, info->resumed ? "true" : "false", info->n_params, info->n_train_seq,
            (long long)info->train_tokens, info->n_eval_seq, (long long)info->eval_tokens, info->n_threads, u->sgemm,
            u->ui->extra_json[0] ? ", " : "", u->ui->extra_json);
    fflush(u->log);
    if (u->ui->start_note) fprintf(stderr, "subq %s: %s\n", cmd, u->ui->start_note);
    progress_begin(&u->bar, cmd, u->o->cfg->steps);
    u->bar_started = 1;
    return 0;
}

static void on_step(void *user, const subq_train_step_stats *s) {
    run_state *u = user;
    const int64_t steps = u->o->cfg->steps;
    char text[192], extra[384]; /* room for the rate, text and the rest: never cut */
    u->ui->step_text(text, sizeof text, s);
    char rate[64] = "";
    if (s->gflop_per_s > 0 && u->sgemm > 0)
        snprintf(rate, sizeof rate, " (%.1f GFLOP/s, %.0f%% of sgemm)", s->gflop_per_s, 100 * s->gflop_per_s / u->sgemm);
    snprintf(extra, sizeof extra, "%.0f tok/s%s %s lr %.2e", s->tok_per_s, rate, text, (double)s->lr);
    progress_update(&u->bar, s->step, extra);
    /* no terminal, no bar: a status line every ~5% of the run instead */
    const int64_t every = steps / 20 > 0 ? steps / 20 : 1;
    if (!u->bar.enabled && (s->step % every == 0 || s->step == steps))
        fprintf(stderr, "step %lld/%lld: %s\n", (long long)s->step, (long long)steps, extra);
    fprintf(u->log, "{\"type\": \"train\", \"step\": %lld, \"lr\": %.6e, \"loss\": %.6f", (long long)s->step,
            (double)s->lr, s->loss);
    for (int k = 0; k < u->n_parts; k++) fprintf(u->log, ", \"%s\": %.6f", u->part_names[k], s->part[k]);
    fprintf(u->log, ", \"grad_norm\": %.6f, \"tokens\": %lld, \"queries\": %lld, \"tok_per_s\": %.1f, "
                    "\"gflop_per_s\": %.2f, \"elapsed_s\": %.3f}\n",
            s->grad_norm, (long long)s->tokens, (long long)s->queries, s->tok_per_s, s->gflop_per_s, s->elapsed_s);
    fflush(u->log);
}

static void on_eval(void *user, const subq_train_eval_stats *e) {
    run_state *u = user;
    if (u->bar.enabled) fputc('\n', stderr);
    u->ui->print_eval(e, u->ui->arg);
    u->ui->json_eval(u->log, e);
    fputc('\n', u->log);
    fflush(u->log);
    if (u->ev_layers && u->ev_acc && e->n_layers <= u->o->cfg->n_layers) {
        memcpy(u->ev_layers, e->layers, (size_t)e->n_layers * sizeof *e->layers);
        if (e->retrieval) memcpy(u->ev_acc, e->retrieval, (size_t)e->n_layers * sizeof *u->ev_acc);
        u->ev = *e;
        u->ev.layers = u->ev_layers;
        u->ev.retrieval = e->retrieval ? u->ev_acc : NULL;
        u->have_eval = 1;
    }
}

static void on_save(void *user, int64_t step, const char *path) {
    run_state *u = user;
    fprintf(u->log, "{\"type\": \"save\", \"step\": %lld, \"checkpoint\": ", (long long)step);
    cli_json_string(u->log, path, strlen(path));
    fprintf(u->log, "}\n");
    fflush(u->log);
}

int cli_train_run(cli_train *o, const cli_train_ui *ui, cli_train_fn run, const void *cfg) {
    const char *cmd = o->cmd;
    const subq_train_params *c = o->cfg;
    char default_log[4096];
    if (!o->log_path) {
        snprintf(default_log, sizeof default_log, "%s.log.jsonl", o->out);
        o->log_path = default_log;
    }
    cli_mpi mpi;
    if (!cli_mpi_join(cmd, &mpi, o->mpi_timeout > 0 ? o->mpi_timeout : 600)) return 1;
    if (mpi.size > 1) o->cfg->comm = &mpi.comm;
    run_state u = {.o = o, .ui = ui};
    u.ev_layers = calloc((size_t)c->n_layers, sizeof *u.ev_layers);
    u.ev_acc = calloc((size_t)c->n_layers, sizeof *u.ev_acc);
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sa.sa_flags = SA_RESETHAND; /* a second Ctrl-C kills as usual */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old);
    const subq_train_hooks hooks = {.user = &u, .on_start = on_start, .on_step = on_step, .on_eval = on_eval,
                               .on_save = on_save, .stop = &g_stop};
    subq_train_result res;
    subq_error err = {0};
    const subq_status s = run(o->m, o->data_set, cfg, &hooks, &res, &err);
    sigaction(SIGINT, &old, NULL);
    if (u.bar_started) progress_end(&u.bar);
    int rc = 0;
    if (s) {
        const int e = u.log_failed;
        const char *why = e == ELOOP ? "a symbolic link (not written through)"
                          : e == EINVAL || e == ENXIO ? "not a regular file" : strerror(e);
        rc = e ? cli_error(cmd, "cannot open log file %s for writing: %s", o->log_path, why)
               : cli_error(cmd, "%s", err.msg);
        goto done;
    }
    subq_corpus_info ci;
    subq_corpus_get_info(o->data_set, &ci);
    if (mpi.size > 1 && ci.from_file) /* every rank: how much of the corpus file it read (its share, not the whole) */
        fprintf(stderr, "subq %s: rank %d read %lld of the corpus file's %lld tokens\n", cmd, mpi.rank,
                (long long)ci.file_tokens_read, (long long)ci.n_tokens);
    if (mpi.rank != 0) goto done; /* rank 0 reports for every rank */
    fprintf(u.log, "{\"type\": \"end\", \"step\": %lld, \"interrupted\": %s, \"stopped_early\": %s, \"tok_per_s\": %.1f, "
                   "\"train_tokens\": %lld}\n",
            (long long)res.step, res.interrupted ? "true" : "false", res.stopped_early ? "true" : "false", res.tok_per_s,
            (long long)res.train_tokens);
    if (res.interrupted || res.stopped_early)
        fprintf(stderr, "subq %s: %s at step %lld of %lld; checkpoint %s.ckpt (continue with --resume)\n", cmd,
                res.interrupted ? "interrupted" : "stopped", (long long)res.step, (long long)c->steps, o->out);
    else if (res.train_tokens == 0)
        fprintf(stderr, "subq %s: %s was already at step %lld of %lld: nothing to train\n", cmd, o->out,
                (long long)res.step, (long long)c->steps);
    else {
        /* the bound again: one slow moment of a shared host at the start must not set it */
        subq_model_info mi;
        subq_model_get_info(o->m, &mi);
        double many, one;
        const double again = sgemm_bound(&mi, u.n_threads, &many, &one);
        u.sgemm = again > u.sgemm ? again : u.sgemm;
        fprintf(stderr, "subq %s: %lld steps, %.0f tok/s (%.1f GFLOP/s, %.0f%% of sgemm, the best of its rates at the "
                        "start and the end); wrote %s\n", cmd,
                (long long)res.step, res.tok_per_s, res.gflop_per_s, u.sgemm > 0 ? 100 * res.gflop_per_s / u.sgemm : 0,
                o->out);
    }
    if (mpi.size > 1)
        fprintf(stderr, "subq %s: %d ranks; rank 0 spent %.2f s of %.2f s of training (%.1f%%) in the sums over "
                        "ranks, waits for the slowest rank included\n",
                cmd, mpi.size, res.comm_s, res.train_s, res.train_s > 0 ? 100 * res.comm_s / res.train_s : 0);
    if (o->json) {
        printf("{\"output\": ");
        cli_json_string(stdout, o->out, strlen(o->out));
        printf(", \"step\": %lld, \"steps\": %lld, \"interrupted\": %s, \"stopped_early\": %s, \"tok_per_s\": %.1f, "
               "\"train_tokens\": %lld%s%s, \"layers\": [",
               (long long)res.step, (long long)c->steps, res.interrupted ? "true" : "false",
               res.stopped_early ? "true" : "false", res.tok_per_s, (long long)res.train_tokens,
               ui->extra_json[0] ? ", " : "", ui->extra_json);
        for (int i = 0; i < c->n_layers; i++) printf("%s%d", i ? ", " : "", c->layers[i]);
        printf("], \"eval\": ");
        if (u.have_eval) ui->json_eval(stdout, &u.ev);
        else printf("null");
        printf("}\n");
    }
done:
    cli_mpi_leave(&mpi, rc != 0);
    if (u.log) fclose(u.log);
    free(u.ev_layers);
    free(u.ev_acc);
    return rc;
}
