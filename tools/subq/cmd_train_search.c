/* subq train-search: learn search projections (W_Qs, W_Ks per layer) by
 * distillation from the frozen model's own attention. The work is done by
 * train_search_run (src/train/train_search.h); this file parses options,
 * loads the data, prints progress and writes the JSON-lines log. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/layers.h"
#include "base/progress.h"
#include "cli.h"
#include "model/model.h"
#include "train/corpus.h"
#include "train/train_search.h"

static const char *help =
    "usage: subq train-search -m MODEL -o OUT.gguf [options] DATA...\n"
    "Learn per-layer search projections W_Qs, W_Ks (d_search x d_model) that map the normed\n"
    "hidden state entering attention to a space where a query's nearest keys are the keys\n"
    "the frozen model attends to. The teacher is the model's own attention (fp32, block-causal,\n"
    "aggregated over query heads); losses are InfoNCE over the teacher's top keys plus\n"
    "KL(teacher || student). Ctrl-C saves a checkpoint and exits; --resume continues.\n\n"
    "model and data:\n"
    "  -m, --model FILE     GGUF model (required)\n"
    "  -t, --threads N      threads (default: all cores)\n"
    "  -f, --data PATH      training text: a UTF-8 file (one document), a .jsonl file\n"
    "                       ({\"text\": ...} per line, one document each) or a directory of\n"
    "                       them (recursive, name order); repeatable; bare arguments count too\n"
    "  --eval-data PATH     held-out text, same forms (repeatable); default: hold out\n"
    "                       --eval-frac of the training pieces\n"
    "  --eval-frac F        held-out fraction of the pieces, deterministic (default 0.05)\n"
    "  --seq N              tokens per sequence, BOS included (default 512); longer\n"
    "                       documents are cut into pieces of N tokens, each starting at position 0\n"
    "  --no-pack            one piece per sequence (default: pack pieces into sequences of\n"
    "                       --seq tokens with block-causal masking and positions restarting per piece)\n"
    "layers and search space:\n"
    "  --layers LIST        layers to learn: 'all' or e.g. '1,3,5-7,-1' (negative = from the end)\n"
    "                       (default all)\n"
    "  --reserve LIST       layers left on full attention, removed from --layers (default 0;\n"
    "                       'none' for no reserve), e.g. '0,1,2,-1'\n"
    "  --d-search N         width of the search space (default 32)\n"
    "losses:\n"
    "  --k-pos N            InfoNCE positives: the teacher's top N keys (default 16)\n"
    "  --tau T              InfoNCE temperature on cosine similarity (default 0.07)\n"
    "  --tau-kl T           KL student temperature on q_s.k_s/sqrt(d_search) (default 1.0)\n"
    "  --alpha A            InfoNCE weight (default 1)\n"
    "  --beta B             KL weight (default 1)\n"
    "  --head-agg max|mean  teacher aggregation over query heads (default max)\n"
    "  --sink N             leave each document's first N keys out of every query's key set\n"
    "                       (default 0)\n"
    "  --tail N             leave each query's N most recent keys, itself included, out of its key\n"
    "                       set (default 0). The sparse runtime always attends these keys and\n"
    "                       retrieves only among keys [doc start + sink, t - tail]; --sink 4\n"
    "                       --tail 16 matches its defaults (--sink / --tail of generate, eval...)\n"
    "                       and trains on exactly the keys it searches. Both losses use that\n"
    "                       set, with the teacher renormalised over it; queries with fewer than\n"
    "                       2 such keys are skipped. Evaluation uses the same set (below)\n"
    "optimisation:\n"
    "  --steps N            optimiser steps (default 1000)\n"
    "  --batch N            sequences per step (default 1)\n"
    "  --lr F               peak AdamW learning rate (default 1e-4)\n"
    "  --wd F               AdamW weight decay (default 0.01)\n"
    "  --warmup N           linear warm-up steps, then cosine decay to 0 (default 100)\n"
    "  --clip F             global gradient-norm clip, 0 = off (default 1.0)\n"
    "  --init-std F         initial weights ~ N(0, F^2) (default 0.02)\n"
    "  -s, --seed N         seed for the initial weights and the data order (default 1)\n"
    "evaluation (held-out split):\n"
    "  --eval-every N       evaluate before training and every N steps; 0 = only at the end\n"
    "                       (default 200)\n"
    "  --eval-k LIST        K values for mass@K / recall@K of the learned space, the raw-QK\n"
    "                       oracle and the recency window (default 8,16,32,64); with --sink /\n"
    "                       --tail, over the retrieval-eligible keys only: mass@K is the teacher\n"
    "                       mass within that set captured by the top K, renormalised over the set,\n"
    "                       and the window is the K most recent keys before the tail\n"
    "  --eval-tokens N      held-out tokens per evaluation, 0 = all (default 32768)\n"
    "output:\n"
    "  -o, --output FILE    projection GGUF (required); the checkpoint is FILE.ckpt\n"
    "  --save-every N       write FILE and FILE.ckpt every N steps (default 200; always at the end)\n"
    "  --resume             continue from FILE.ckpt (same options and data required)\n"
    "  --stop-after N       stop after step N with a checkpoint, as if interrupted (the\n"
    "                       learning-rate schedule still spans --steps)\n"
    "  --log FILE           JSON-lines log of train and eval metrics (default FILE.log.jsonl;\n"
    "                       appended to on --resume)\n"
    "  --json               print a JSON summary on stdout at the end\n"
    "  --dump-teacher FILE  testing: write the capture, teacher, losses and metrics of the first\n"
    "                       training sequence (initial weights) to FILE and exit\n";

#define MAX_PATHS 256

/* The CLI owns the Ctrl-C flag; the library only polls it. */
static volatile sig_atomic_t g_stop;
static void on_sigint(int sig) {
    (void)sig;
    g_stop = 1;
}

typedef struct run_ui {
    FILE *log;
    int json;
    progress bar;
    int bar_started;
    int64_t steps;
    train_step_stats last;
    /* copy of the last evaluation, for --json */
    int have_eval;
    train_eval_stats ev;
    train_eval_layer *ev_layers;
    int n_layers;
    int n_sink, n_tail;         /* retrieval-eligible key set, for the messages */
} run_ui;

static void json_k_array(FILE *f, const char *name, const train_eval_layer *L, int what) {
    fprintf(f, "\"%s\": [", name);
    for (int k = 0; k < L->acc.n_k; k++) {
        double n = L->acc.n_queries[k] > 0 ? (double)L->acc.n_queries[k] : 1.0;
        const double *src[] = {L->acc.mass_learned, L->acc.mass_oracle, L->acc.mass_window,
                               L->acc.recall_learned, L->acc.recall_oracle, L->acc.recall_window};
        double v = src[what][k] / n;
        fprintf(f, "%s%.6f", k ? ", " : "", v);
    }
    fprintf(f, "]");
}

static void json_eval(FILE *f, const train_eval_stats *e) {
    fprintf(f, "{\"type\": \"eval\", \"step\": %lld, \"n_seq\": %d, \"n_tokens\": %lld, \"loss\": %.6f, \"nce\": %.6f, "
               "\"kl\": %.6f, \"seconds\": %.3f, \"layers\": [",
            (long long)e->step, e->n_seq, (long long)e->n_tokens, e->loss, e->nce, e->kl, e->seconds);
    for (int i = 0; i < e->n_layers; i++) {
        const train_eval_layer *L = &e->layers[i];
        fprintf(f, "%s{\"layer\": %d, \"nce\": %.6f, \"kl\": %.6f, \"n_queries\": %lld, \"k\": [", i ? ", " : "",
                L->layer, L->nce, L->kl, (long long)L->n_queries);
        for (int k = 0; k < L->acc.n_k; k++) fprintf(f, "%s%d", k ? ", " : "", L->acc.k[k]);
        fprintf(f, "], \"n_queries_k\": [");
        for (int k = 0; k < L->acc.n_k; k++) fprintf(f, "%s%lld", k ? ", " : "", (long long)L->acc.n_queries[k]);
        fprintf(f, "], ");
        static const char *names[] = {"mass_learned", "mass_oracle", "mass_window",
                                      "recall_learned", "recall_oracle", "recall_window"};
        for (int w = 0; w < 6; w++) {
            fprintf(f, "%s", w ? ", " : "");
            json_k_array(f, names[w], L, w);
        }
        fprintf(f, "}");
    }
    fprintf(f, "]}");
}

static void ui_start(void *user, const train_start_info *info) {
    run_ui *u = user;
    fprintf(stderr, "subq train-search: %s step %lld of %lld; %d train sequences (%lld tokens), %d held-out (%lld tokens), "
                    "%d threads\n",
            info->resumed ? "resuming at" : "starting at", (long long)info->start_step, (long long)u->steps,
            info->n_train_seq, (long long)info->train_tokens, info->n_eval_seq, (long long)info->eval_tokens,
            info->n_threads);
    if (u->log) {
        fprintf(u->log, "{\"type\": \"start\", \"step\": %lld, \"resumed\": %s, \"n_train_seq\": %d, \"train_tokens\": %lld, "
                        "\"n_eval_seq\": %d, \"eval_tokens\": %lld, \"threads\": %d, \"n_sink\": %d, \"n_tail\": %d}\n",
                (long long)info->start_step, info->resumed ? "true" : "false", info->n_train_seq,
                (long long)info->train_tokens, info->n_eval_seq, (long long)info->eval_tokens, info->n_threads,
                u->n_sink, u->n_tail);
        fflush(u->log);
    }
    if (u->n_sink > 0 || u->n_tail > 0)
        fprintf(stderr, "subq train-search: keys of query t restricted to [doc start + %d, t - %d] (the runtime's "
                        "retrieval set: sinks and tail left out); the teacher, losses and mass/recall@K are "
                        "renormalised over them\n",
                u->n_sink, u->n_tail);
    progress_begin(&u->bar, "train-search", u->steps);
    u->bar_started = 1;
}

static void ui_step(void *user, const train_step_stats *s) {
    run_ui *u = user;
    u->last = *s;
    char extra[160];
    snprintf(extra, sizeof extra, "%.0f tok/s loss %.4f (nce %.4f kl %.4f) lr %.2e", s->tok_per_s, s->loss, s->nce,
             s->kl, (double)s->lr);
    progress_update(&u->bar, s->step, extra);
    /* no terminal, no bar: a status line every ~5% of the run instead */
    int64_t every = u->steps / 20 > 0 ? u->steps / 20 : 1;
    if (!u->bar.enabled && (s->step % every == 0 || s->step == u->steps))
        fprintf(stderr, "step %lld/%lld: %s\n", (long long)s->step, (long long)u->steps, extra);
    if (u->log) {
        fprintf(u->log, "{\"type\": \"train\", \"step\": %lld, \"lr\": %.6e, \"loss\": %.6f, \"nce\": %.6f, \"kl\": %.6f, "
                        "\"grad_norm\": %.6f, \"tokens\": %lld, \"tok_per_s\": %.1f, \"elapsed_s\": %.3f}\n",
                (long long)s->step, (double)s->lr, s->loss, s->nce, s->kl, s->grad_norm, (long long)s->tokens,
                s->tok_per_s, s->elapsed_s);
        fflush(u->log);
    }
}

static void ui_eval(void *user, const train_eval_stats *e) {
    run_ui *u = user;
    if (u->bar.enabled) fputc('\n', stderr);
    fprintf(stderr, "eval @ step %lld: loss %.4f (nce %.4f kl %.4f) on %d sequences, %lld tokens, %.1f s\n",
            (long long)e->step, e->loss, e->nce, e->kl, e->n_seq, (long long)e->n_tokens, e->seconds);
    if (u->n_sink > 0 || u->n_tail > 0)
        fprintf(stderr, "  (keys outside sink %d / tail %d only; mass = share of the teacher mass on those keys)\n",
                u->n_sink, u->n_tail);
    for (int i = 0; i < e->n_layers; i++) {
        const train_eval_layer *L = &e->layers[i];
        fprintf(stderr, "  layer %2d  nce %.3f kl %.3f  mass learned/oracle/window", L->layer, L->nce, L->kl);
        for (int k = 0; k < L->acc.n_k; k++) {
            double n = L->acc.n_queries[k] > 0 ? (double)L->acc.n_queries[k] : 1.0;
            fprintf(stderr, " @%d %.3f/%.3f/%.3f", L->acc.k[k], L->acc.mass_learned[k] / n, L->acc.mass_oracle[k] / n,
                    L->acc.mass_window[k] / n);
        }
        fprintf(stderr, "  recall");
        for (int k = 0; k < L->acc.n_k; k++) {
            double n = L->acc.n_queries[k] > 0 ? (double)L->acc.n_queries[k] : 1.0;
            fprintf(stderr, " @%d %.3f/%.3f/%.3f", L->acc.k[k], L->acc.recall_learned[k] / n,
                    L->acc.recall_oracle[k] / n, L->acc.recall_window[k] / n);
        }
        fputc('\n', stderr);
    }
    if (u->log) {
        json_eval(u->log, e);
        fputc('\n', u->log);
        fflush(u->log);
    }
    if (u->ev_layers && e->n_layers <= u->n_layers) {
        memcpy(u->ev_layers, e->layers, (size_t)e->n_layers * sizeof *e->layers);
        u->ev = *e;
        u->ev.layers = u->ev_layers;
        u->have_eval = 1;
    }
}

static void ui_save(void *user, int64_t step, const char *path) {
    run_ui *u = user;
    if (u->log) {
        fprintf(u->log, "{\"type\": \"save\", \"step\": %lld, \"checkpoint\": ", (long long)step);
        cli_json_string(u->log, path, strlen(path));
        fprintf(u->log, "}\n");
        fflush(u->log);
    }
}

/* "8,16,32" -> ints */
static int parse_int_list(const char *cmd, const char *flag, const char *s, int *out, int cap, int *n) {
    *n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > (1 << 24) || *n >= cap || (*end && *end != ',')) {
            cli_error(cmd, "%s expects up to %d comma-separated positive integers, got '%s'", flag, cap, s);
            return 0;
        }
        out[(*n)++] = (int)v;
        p = *end ? end + 1 : end;
    }
    if (*n == 0) {
        cli_error(cmd, "%s expects a list of positive integers", flag);
        return 0;
    }
    return 1;
}

int cmd_train_search(int argc, char **argv) {
    const char *cmd = "train-search";
    train_search_config cfg = train_search_default_config();
    cfg.steps = 1000;
    const char *model = NULL, *out = NULL, *log_path = NULL, *dump = NULL, *v;
    const char *layers_s = "all", *reserve_s = "0";
    const char *data[MAX_PATHS], *eval_data[MAX_PATHS];
    int n_data = 0, n_eval = 0, json = 0, seq = 512, pack = 1, agg;
    float eval_frac = 0.05f;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int ok = 1;
#define INT_OPT(flag, lo, hi, dst) \
    else if (!strcmp(a, flag)) ok = (v = cli_value(cmd, argc, argv, &i)) && cli_parse_int(cmd, a, v, lo, hi, dst)
#define FLOAT_OPT(flag, dst) else if (!strcmp(a, flag)) ok = (v = cli_value(cmd, argc, argv, &i)) && cli_parse_float(cmd, a, v, dst)
        if (cli_is_help(a)) {
            fputs(help, stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            ok = (model = cli_value(cmd, argc, argv, &i)) != NULL;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            ok = (v = cli_value(cmd, argc, argv, &i)) && cli_parse_int(cmd, a, v, 1, 1024, &cfg.n_threads);
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            ok = (out = cli_value(cmd, argc, argv, &i)) != NULL;
        } else if (!strcmp(a, "-f") || !strcmp(a, "--data") || !strcmp(a, "--eval-data")) {
            int is_eval = !strcmp(a, "--eval-data");
            if (!(v = cli_value(cmd, argc, argv, &i))) return 1;
            if ((is_eval ? n_eval : n_data) >= MAX_PATHS) return cli_error(cmd, "more than %d data paths", MAX_PATHS);
            if (is_eval) eval_data[n_eval++] = v;
            else data[n_data++] = v;
        }
        INT_OPT("--seq", 2, 1 << 20, &seq);
        INT_OPT("--d-search", 1, SEARCH_PROJ_MAX_D, &cfg.d_search);
        INT_OPT("--batch", 1, 1 << 16, &cfg.batch);
        INT_OPT("--k-pos", 1, 1 << 20, &cfg.loss.k_pos);
        INT_OPT("--sink", 0, 1 << 20, &cfg.loss.n_sink);
        INT_OPT("--tail", 0, 1 << 20, &cfg.loss.n_tail);
        INT_OPT("--warmup", 0, 1 << 30, &cfg.warmup);
        INT_OPT("--eval-every", 0, 1 << 30, &cfg.eval_every);
        INT_OPT("--save-every", 0, 1 << 30, &cfg.save_every);
        FLOAT_OPT("--tau", &cfg.loss.tau);
        FLOAT_OPT("--tau-kl", &cfg.loss.tau_kl);
        FLOAT_OPT("--alpha", &cfg.loss.alpha);
        FLOAT_OPT("--beta", &cfg.loss.beta);
        FLOAT_OPT("--lr", &cfg.lr);
        FLOAT_OPT("--wd", &cfg.weight_decay);
        FLOAT_OPT("--clip", &cfg.grad_clip);
        FLOAT_OPT("--init-std", &cfg.init_std);
        FLOAT_OPT("--eval-frac", &eval_frac);
        else if (!strcmp(a, "--steps") || !strcmp(a, "--stop-after") || !strcmp(a, "--eval-tokens")) {
            int x, is_eval_tokens = !strcmp(a, "--eval-tokens");
            ok = (v = cli_value(cmd, argc, argv, &i)) && cli_parse_int(cmd, a, v, is_eval_tokens ? 0 : 1, 2000000000, &x);
            if (ok && !strcmp(a, "--steps")) cfg.steps = x;
            else if (ok && is_eval_tokens) cfg.eval_tokens = x;
            else if (ok) cfg.stop_after = x;
        } else if (!strcmp(a, "-s") || !strcmp(a, "--seed")) {
            ok = (v = cli_value(cmd, argc, argv, &i)) && cli_parse_u64(cmd, a, v, &cfg.seed);
        } else if (!strcmp(a, "--layers")) {
            ok = (layers_s = cli_value(cmd, argc, argv, &i)) != NULL;
        } else if (!strcmp(a, "--reserve")) {
            ok = (reserve_s = cli_value(cmd, argc, argv, &i)) != NULL;
        } else if (!strcmp(a, "--head-agg")) {
            if (!(v = cli_value(cmd, argc, argv, &i))) return 1;
            if ((agg = teacher_agg_parse(v)) < 0) return cli_error(cmd, "--head-agg expects max or mean, got '%s'", v);
            cfg.loss.agg = (teacher_agg)agg;
        } else if (!strcmp(a, "--eval-k")) {
            ok = (v = cli_value(cmd, argc, argv, &i)) &&
                 parse_int_list(cmd, a, v, cfg.eval_k, SEARCH_EVAL_MAX_K, &cfg.n_eval_k);
        } else if (!strcmp(a, "--no-pack")) {
            pack = 0;
        } else if (!strcmp(a, "--resume")) {
            cfg.resume = 1;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--log")) {
            ok = (log_path = cli_value(cmd, argc, argv, &i)) != NULL;
        } else if (!strcmp(a, "--dump-teacher")) {
            ok = (dump = cli_value(cmd, argc, argv, &i)) != NULL;
        } else if (a[0] == '-' && a[1] != '\0') {
            return cli_error(cmd, "unknown option '%s' (see subq train-search --help)", a);
        } else {
            if (n_data >= MAX_PATHS) return cli_error(cmd, "more than %d data paths", MAX_PATHS);
            data[n_data++] = a;
        }
#undef INT_OPT
#undef FLOAT_OPT
        if (!ok) return 1;
    }
    if (!model) return cli_error(cmd, "no model given; use -m FILE.gguf");
    if (!out && !dump) return cli_error(cmd, "no output given; use -o FILE.gguf");
    if (n_data == 0) return cli_error(cmd, "no training data given; pass text files, directories or .jsonl files");
    if (!(cfg.loss.tau > 0) || !(cfg.loss.tau_kl > 0)) return cli_error(cmd, "--tau and --tau-kl must be > 0");
    if (!(cfg.lr >= 0) || !(cfg.weight_decay >= 0) || !(cfg.init_std >= 0) || !(cfg.loss.alpha >= 0) ||
        !(cfg.loss.beta >= 0))
        return cli_error(cmd, "--lr, --wd, --init-std, --alpha and --beta must be >= 0");
    if (!(eval_frac >= 0 && eval_frac < 1)) return cli_error(cmd, "--eval-frac must be in [0, 1)");
    cfg.out_path = out;

    subq_error err = {0};
    subq_model *m = NULL;
    train_corpus *corpus = NULL;
    int *layers = NULL, rc = 0;
    unsigned char *mask = NULL, *rmask = NULL;
    FILE *logf = NULL;
    run_ui ui = {0};
    if (subq_model_load(model, &m, &err)) return cli_error(cmd, "%s", err.msg);
    const int L = m->hp.n_layer;
    mask = malloc((size_t)L);
    rmask = malloc((size_t)L);
    layers = malloc((size_t)L * sizeof(int));
    if (!mask || !rmask || !layers) {
        rc = cli_error(cmd, "out of memory");
        goto done;
    }
    if (layers_parse(layers_s, L, mask, &err)) {
        rc = cli_error(cmd, "--layers: %s", err.msg);
        goto done;
    }
    if (layers_parse(reserve_s, L, rmask, &err)) {
        rc = cli_error(cmd, "--reserve: %s", err.msg);
        goto done;
    }
    cfg.n_layers = 0;
    for (int l = 0; l < L; l++)
        if (mask[l] && !rmask[l]) layers[cfg.n_layers++] = l;
    if (cfg.n_layers == 0) {
        rc = cli_error(cmd, "--layers %s minus --reserve %s leaves no layer to train", layers_s, reserve_s);
        goto done;
    }
    cfg.layers = layers;

    corpus_params cp = {.seq = seq, .pack = pack, .eval_frac = eval_frac, .seed = cfg.seed};
    if (corpus_new(m, &cp, &corpus, &err)) {
        rc = cli_error(cmd, "%s", err.msg);
        goto done;
    }
    for (int i = 0; i < n_data + n_eval; i++) {
        int is_eval = i >= n_data;
        if (corpus_add_path(corpus, m, is_eval ? eval_data[i - n_data] : data[i], is_eval, &err)) {
            rc = cli_error(cmd, "%s", err.msg);
            goto done;
        }
    }
    if (corpus_finish(corpus, &err)) {
        rc = cli_error(cmd, "%s", err.msg);
        goto done;
    }
    if (dump) {
        if (train_search_dump_teacher(m, corpus, &cfg, dump, &err)) rc = cli_error(cmd, "%s", err.msg);
        goto done;
    }

    char default_log[4096];
    if (!log_path) {
        snprintf(default_log, sizeof default_log, "%s.log.jsonl", out);
        log_path = default_log;
    }
    if (!(logf = fopen(log_path, cfg.resume ? "a" : "w"))) {
        rc = cli_error(cmd, "cannot open log file %s for writing", log_path);
        goto done;
    }
    ui.log = logf;
    ui.json = json;
    ui.steps = cfg.steps;
    ui.n_layers = cfg.n_layers;
    ui.n_sink = cfg.loss.n_sink;
    ui.n_tail = cfg.loss.n_tail;
    ui.ev_layers = calloc((size_t)cfg.n_layers, sizeof(train_eval_layer));

    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sa.sa_flags = SA_RESETHAND; /* a second Ctrl-C kills as usual */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old);
    train_search_hooks hooks = {.user = &ui, .on_start = ui_start, .on_step = ui_step, .on_eval = ui_eval,
                                .on_save = ui_save, .stop = &g_stop};
    train_search_result res;
    subq_status s = train_search_run(m, corpus, &cfg, &hooks, &res, &err);
    sigaction(SIGINT, &old, NULL);
    if (ui.bar_started) progress_end(&ui.bar);
    if (s) {
        rc = cli_error(cmd, "%s", err.msg);
        goto done;
    }
    fprintf(logf, "{\"type\": \"end\", \"step\": %lld, \"interrupted\": %s, \"stopped_early\": %s, \"tok_per_s\": %.1f, "
                  "\"train_tokens\": %lld}\n",
            (long long)res.step, res.interrupted ? "true" : "false", res.stopped_early ? "true" : "false", res.tok_per_s,
            (long long)res.train_tokens);
    if (res.interrupted || res.stopped_early)
        fprintf(stderr, "subq train-search: %s at step %lld of %lld; checkpoint %s.ckpt (continue with --resume)\n",
                res.interrupted ? "interrupted" : "stopped", (long long)res.step, (long long)cfg.steps, out);
    else
        fprintf(stderr, "subq train-search: %lld steps, %.0f tok/s; wrote %s\n", (long long)res.step, res.tok_per_s, out);
    if (json) {
        printf("{\"output\": ");
        cli_json_string(stdout, out, strlen(out));
        printf(", \"step\": %lld, \"steps\": %lld, \"interrupted\": %s, \"stopped_early\": %s, \"tok_per_s\": %.1f, "
               "\"train_tokens\": %lld, \"d_search\": %d, \"n_sink\": %d, \"n_tail\": %d, \"layers\": [",
               (long long)res.step, (long long)cfg.steps, res.interrupted ? "true" : "false",
               res.stopped_early ? "true" : "false", res.tok_per_s, (long long)res.train_tokens, cfg.d_search,
               cfg.loss.n_sink, cfg.loss.n_tail);
        for (int i = 0; i < cfg.n_layers; i++) printf("%s%d", i ? ", " : "", layers[i]);
        printf("], \"eval\": ");
        if (ui.have_eval) json_eval(stdout, &ui.ev);
        else printf("null");
        printf("}\n");
    }
done:
    if (logf) fclose(logf);
    free(ui.ev_layers);
    free(mask);
    free(rmask);
    free(layers);
    corpus_free(corpus);
    subq_model_free(m);
    return rc;
}
