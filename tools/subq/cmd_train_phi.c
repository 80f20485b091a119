/* subq train-phi: learn the completion feature maps (phi_q per query head,
 * phi_k per KV head) by distillation from the frozen model's attention
 * logits over the mid region; and, with --diagnose, measure what the
 * completion does (attention-output error of selection-only vs hybrid per
 * layer/head and by entropy quartile, completion mass share, perplexity).
 * The work is in src/phi; this file parses options, prints progress and
 * writes the JSON-lines log. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attn_plan.h"
#include "base/layers.h"
#include "base/progress.h"
#include "base/timer.h"
#include "cli.h"
#include "complete/phi_cache.h"
#include "eval/eval.h"
#include "model/context.h"
#include "model/model.h"
#include "phi/phi_diag.h"
#include "phi/phi_train.h"
#include "search/search_proj.h"
#include "train/capture.h"
#include "train/corpus.h"

static const char *help =
    "usage: subq train-phi -m MODEL -o PHI.gguf [options] DATA...\n"
    "       subq train-phi -m MODEL --diagnose PHI.gguf -f TEXT [options]\n"
    "Learn the completion feature maps of top-K retrieval with linear-attention completion:\n"
    "per layer, phi_q (per query head) and phi_k (per KV head), R^head_dim -> R^d_phi, with\n"
    "<phi_q(q), phi_k(k)> ~ exp(q.k/sqrt(head_dim)) on post-RoPE vectors; stem, ReZero GELU\n"
    "(tanh) block, exp output. Distilled on the model's own logits over each query's mid\n"
    "region (prefix minus the first --n-sink and last --n-tail tokens): tau^2 KL + Huber\n"
    "penalties on the top band, far keys entering the band, and log-partition overestimation.\n"
    "Ctrl-C saves a checkpoint and exits; --resume continues.\n\n"
    "model and data:\n"
    "  -m, --model FILE     GGUF model (required)\n"
    "  -t, --threads N      threads (default: all cores)\n"
    "  -f, --data PATH      training text: a UTF-8 file, a .jsonl file ({\"text\": ...} per line)\n"
    "                       or a directory of them; repeatable; bare arguments count too\n"
    "  --eval-data PATH     held-out text, same forms (repeatable); default: hold out\n"
    "                       --eval-frac of the training pieces\n"
    "  --eval-frac F        held-out fraction of the pieces, deterministic (default 0.05)\n"
    "  --seq N              tokens per sequence, BOS included (default 512)\n"
    "  --no-pack            one piece per sequence (default: pack, block-causal)\n"
    "maps:\n"
    "  --layers LIST        layers to learn: 'all' or e.g. '1-4', '1,3,-1' (default 1--1: all but\n"
    "                       layer 0)\n"
    "  --d-phi N            feature width (default 32)\n"
    "  --d-emb N            stem width (default 32)\n"
    "  --d-hidden N         ReZero block hidden width (default 64)\n"
    "  --wo-std F           initial Wo ~ N(0, F^2/d_emb) (default 0.5)\n"
    "partition and losses:\n"
    "  --n-sink N           anchors at the start of each document (default 4)\n"
    "  --n-tail N           anchors at the end, the query included (default 16)\n"
    "  --tau T              KL temperature (default 1)\n"
    "  --l-kl F             KL weight; the Huber terms get 1 - F (default 0.99)\n"
    "  --l-top F, --l-fp F, --l-z F   Huber term weights (default 1, 2, 4)\n"
    "  --band F             top band r >= -F (Delta, default 8)\n"
    "  --huber F            Huber delta (default 1)\n"
    "optimisation:\n"
    "  --steps N            optimiser steps (default 500)\n"
    "  --batch N            sequences per step (default 1)\n"
    "  --lr F               peak AdamW learning rate (default 1e-3)\n"
    "  --wd F               AdamW weight decay (default 0)\n"
    "  --warmup N           linear warm-up steps, then cosine decay to 0 (default 50)\n"
    "  --clip F             global gradient-norm clip, 0 = off (default 1.0)\n"
    "  -s, --seed N         seed for the initial weights and the data order (default 1)\n"
    "evaluation (held-out split):\n"
    "  --eval-every N       evaluate before training and every N steps; 0 = only at the end\n"
    "                       (default 100)\n"
    "  --eval-tokens N      held-out tokens per evaluation, 0 = all (default 16384)\n"
    "output:\n"
    "  -o, --output FILE    maps GGUF (required); the checkpoint is FILE.ckpt\n"
    "  --save-every N       write FILE and FILE.ckpt every N steps (default 100; always at the end)\n"
    "  --resume             continue from FILE.ckpt (same options and data required)\n"
    "  --stop-after N       stop after step N with a checkpoint, as if interrupted\n"
    "  --log FILE           JSON-lines log (default FILE.log.jsonl; appended to on --resume)\n"
    "  --json               print a JSON summary on stdout at the end\n"
    "  --dump FILE          testing: write the capture, features, losses and gradient of the\n"
    "                       first training sequence (initial maps) to FILE and exit\n"
    "diagnostics (instead of training):\n"
    "  --diagnose FILE      evaluate the maps in FILE on the held-out windows of the data\n"
    "                       (-f: its held-out split; --eval-data: all of it), --seq tokens each:\n"
    "                       attention-output error vs full attention of selection-only and hybrid\n"
    "                       (oracle top-K), per layer/head and by mid-region entropy quartile,\n"
    "                       completion mass share, and the K selection-only needs to match\n"
    "  --windows N          at most N windows (default 32)\n"
    "  --k-sweep LIST       K of the hybrid comparison (default 8,16,32)\n"
    "  --sel-sweep LIST     K of the selection-only sweep (default 8,16,24,32,48,64,96,128,192)\n"
    "  --ppl                also perplexity: full, selection-only and hybrid at each K, and\n"
    "                       selection-only at K + the cache's fetch (matched budget)\n"
    "  --annotate           store each head's mean mid-region entropy in FILE (for\n"
    "                       --complete-heads entropy>=X in eval and generate)\n";

#define MAX_PATHS 256
#define MAX_LIST PHI_DIAG_MAX_K

static volatile sig_atomic_t g_stop;
static void on_sigint(int sig) {
    (void)sig;
    g_stop = 1;
}

static const char *part_name[PHI_N_PARTS] = {"kl", "top", "fp", "z", "lse_err"};

typedef struct run_ui {
    FILE *log;
    progress bar;
    int bar_started;
    int64_t steps;
    int have_eval;
    phi_eval_stats ev;
    phi_eval_layer *ev_layers;
    int n_layers;
} run_ui;

static void json_parts(FILE *f, const double *part) {
    for (int k = 0; k < PHI_N_PARTS; k++) fprintf(f, ", \"%s\": %.6f", part_name[k], part[k]);
}

static void json_eval(FILE *f, const phi_eval_stats *e) {
    fprintf(f, "{\"type\": \"eval\", \"step\": %lld, \"n_seq\": %d, \"n_tokens\": %lld, \"loss\": %.6f", (long long)e->step,
            e->n_seq, (long long)e->n_tokens, e->loss);
    json_parts(f, e->part);
    fprintf(f, ", \"seconds\": %.3f, \"layers\": [", e->seconds);
    for (int i = 0; i < e->n_layers; i++) {
        const phi_eval_layer *L = &e->layers[i];
        fprintf(f, "%s{\"layer\": %d, \"loss\": %.6f", i ? ", " : "", L->layer, L->loss);
        json_parts(f, L->part);
        fprintf(f, ", \"n_queries\": %lld}", (long long)L->n_queries);
    }
    fprintf(f, "]}");
}

static void ui_start(void *user, const phi_start_info *info) {
    run_ui *u = user;
    fprintf(stderr, "subq train-phi: %s step %lld of %lld; %zu parameters; %d train sequences (%lld tokens), "
                    "%d held-out (%lld tokens), %d threads\n",
            info->resumed ? "resuming at" : "starting at", (long long)info->start_step, (long long)u->steps,
            info->n_params, info->n_train_seq, (long long)info->train_tokens, info->n_eval_seq,
            (long long)info->eval_tokens, info->n_threads);
    if (u->log) {
        fprintf(u->log, "{\"type\": \"start\", \"step\": %lld, \"resumed\": %s, \"n_params\": %zu, \"n_train_seq\": %d, "
                        "\"train_tokens\": %lld, \"n_eval_seq\": %d, \"eval_tokens\": %lld, \"threads\": %d}\n",
                (long long)info->start_step, info->resumed ? "true" : "false", info->n_params, info->n_train_seq,
                (long long)info->train_tokens, info->n_eval_seq, (long long)info->eval_tokens, info->n_threads);
        fflush(u->log);
    }
    progress_begin(&u->bar, "train-phi", u->steps);
    u->bar_started = 1;
}

static void ui_step(void *user, const phi_step_stats *s) {
    run_ui *u = user;
    char extra[160];
    snprintf(extra, sizeof extra, "%.0f tok/s loss %.4f (kl %.4f |dlogZ| %.3f) lr %.2e", s->tok_per_s, s->loss,
             s->part[PHI_PART_KL], s->part[PHI_PART_LSE], (double)s->lr);
    progress_update(&u->bar, s->step, extra);
    if (u->log) {
        fprintf(u->log, "{\"type\": \"train\", \"step\": %lld, \"lr\": %.6e, \"loss\": %.6f", (long long)s->step,
                (double)s->lr, s->loss);
        json_parts(u->log, s->part);
        fprintf(u->log, ", \"grad_norm\": %.6f, \"tokens\": %lld, \"queries\": %lld, \"tok_per_s\": %.1f, \"elapsed_s\": %.3f}\n",
                s->grad_norm, (long long)s->tokens, (long long)s->queries, s->tok_per_s, s->elapsed_s);
        fflush(u->log);
    }
}

static void ui_eval(void *user, const phi_eval_stats *e) {
    run_ui *u = user;
    if (u->bar.enabled) fputc('\n', stderr);
    fprintf(stderr, "eval @ step %lld: loss %.4f (kl %.4f top %.3f fp %.3f z %.3f |dlogZ| %.3f) on %d sequences, %.1f s\n",
            (long long)e->step, e->loss, e->part[0], e->part[1], e->part[2], e->part[3], e->part[4], e->n_seq, e->seconds);
    for (int i = 0; i < e->n_layers; i++) {
        const phi_eval_layer *L = &e->layers[i];
        fprintf(stderr, "  layer %2d  loss %.4f  kl %.4f  top %.3f  fp %.3f  z %.3f  |dlogZ| %.3f\n", L->layer, L->loss,
                L->part[0], L->part[1], L->part[2], L->part[3], L->part[4]);
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

/* "8,16,32" -> ints >= lo */
static int parse_list(const char *cmd, const char *flag, const char *s, int lo, int *out, int *n) {
    *n = 0;
    for (const char *p = s; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < lo || v > (1 << 20) || *n >= MAX_LIST || (*end && *end != ',')) {
            cli_error(cmd, "%s expects up to %d comma-separated integers >= %d, got '%s'", flag, MAX_LIST, lo, s);
            return 0;
        }
        out[(*n)++] = (int)v;
        p = *end == ',' ? end + 1 : end;
    }
    if (*n == 0) {
        cli_error(cmd, "%s expects a list of integers", flag);
        return 0;
    }
    return 1;
}

/* ---- diagnostics -------------------------------------------------------- */

typedef struct diag_opts {
    const char *maps_path;
    int windows, ppl, json, n_threads, annotate;
    int ks[MAX_LIST], n_k;
    int sel_ks[MAX_LIST], n_sel_k;
    int n_sink, n_tail;
} diag_opts;

static void json_num(FILE *f, double v) {
    if (isfinite(v)) fprintf(f, "%.6g", v);
    else fprintf(f, "null");
}

static void json_cell(FILE *f, const phi_diag_cell *c, int nk, int nsk) {
    fprintf(f, "{\"n\": %lld, \"hmid\": ", (long long)c->n);
    json_num(f, c->hmid);
    const char *names[5] = {"err_sel", "err_hyb", "share", "hybrid_better", "harm"};
    const double *arr[5] = {c->err_sel, c->err_hyb, c->share, c->win, c->harm};
    for (int a = 0; a < 5; a++) {
        fprintf(f, ", \"%s\": [", names[a]);
        for (int k = 0; k < nk; k++) {
            fprintf(f, "%s", k ? ", " : "");
            json_num(f, arr[a][k]);
        }
        fprintf(f, "]");
    }
    fprintf(f, ", \"err_sel_sweep\": [");
    for (int k = 0; k < nsk; k++) {
        fprintf(f, "%s", k ? ", " : "");
        json_num(f, c->err_sweep[k]);
    }
    fprintf(f, "]}");
}

/* NLL of every next token in the same document over the windows */
static int64_t run_ppl(subq_context *c, const train_corpus *corpus, int n_windows, int32_t *tok, int32_t *pos,
                       int32_t *seg, float *logits, double *nll_sum, subq_error *err) {
    int64_t n = 0;
    *nll_sum = 0;
    for (int w = 0; w < n_windows; w++) {
        int len = corpus_get(corpus, &corpus->eval, w, tok, pos, seg);
        subq_context_reset(c);
        if (context_forward(c, tok, len, pos, seg, logits, 1, err)) return -1;
        for (int t = 0; t + 1 < len; t++)
            if (seg[t + 1] == seg[t]) {
                *nll_sum += eval_token_nll(logits + (size_t)t * c->model->hp.n_vocab, c->model->hp.n_vocab, tok[t + 1]);
                n++;
            }
    }
    return n;
}

static int diagnose(const char *cmd, const diag_opts *o, subq_model *m, train_corpus *corpus) {
    subq_error err = {0};
    phi_maps *maps = NULL;
    subq_context *c = NULL;
    train_capture *cap = NULL;
    phi_diag_records rec = {0};
    int32_t *tok = NULL, *pos = NULL, *seg = NULL;
    float *logits = NULL;
    const float **qs = NULL;
    int rc = 0;
    const int seq = corpus->p.seq;
    if (phi_maps_load(o->maps_path, m, &maps, &err)) return cli_error(cmd, "%s", err.msg);
    const int n_windows = corpus->eval.n_seq < o->windows ? corpus->eval.n_seq : o->windows;
    if (n_windows == 0) {
        rc = cli_error(cmd, "the held-out split is empty; give more text, --eval-data or a larger --eval-frac");
        goto done;
    }
    subq_context_params cp = subq_context_default_params();
    cp.n_ctx = seq;
    cp.n_threads = o->n_threads;
    if (subq_context_new(m, &cp, &c, &err) || train_capture_new(m, maps->layers, maps->n_sel, seq, &cap, &err)) {
        rc = cli_error(cmd, "%s", err.msg);
        goto done;
    }
    tok = malloc((size_t)seq * sizeof(int32_t));
    pos = malloc((size_t)seq * sizeof(int32_t));
    seg = malloc((size_t)seq * sizeof(int32_t));
    qs = malloc((size_t)maps->n_sel * sizeof(float *));
    logits = o->ppl ? malloc((size_t)seq * m->hp.n_vocab * sizeof(float)) : NULL;
    if (!tok || !pos || !seg || !qs || (o->ppl && !logits)) {
        rc = cli_error(cmd, "out of memory");
        goto done;
    }
    /* the K selection-only gets for the same reads when the cache's fetch is
     * paid every step (no amortisation: the pessimistic matched budget) */
    const double fetch = maps->dims.d_phi / 2.0 + (double)maps->dims.d_phi / maps->dims.head_dim;
    const int extra = (int)ceil(fetch);
    phi_diag_config dc = {.n_sink = o->n_sink, .n_tail = o->n_tail, .n_k = o->n_k, .n_sel_k = o->n_sel_k,
                          .eps = PHI_EPS_DEFAULT};
    memcpy(dc.ks, o->ks, sizeof dc.ks);
    memcpy(dc.sel_ks, o->sel_ks, sizeof dc.sel_ks);
    for (int i = 0; i < o->n_k; i++) dc.min_mid = o->ks[i] > dc.min_mid ? o->ks[i] : dc.min_mid;
    progress bar;
    progress_begin(&bar, "diagnose", n_windows);
    double t0 = time_now_s();
    int64_t n_tok = 0;
    for (int w = 0; w < n_windows; w++) {
        int len = corpus_get(corpus, &corpus->eval, w, tok, pos, seg);
        if (train_capture_run(cap, c, tok, pos, seg, len, &err)) {
            rc = cli_error(cmd, "%s", err.msg);
            goto done;
        }
        for (int i = 0; i < maps->n_sel; i++) qs[i] = cap->q[i];
        if (phi_diag_window(&rec, c, maps, qs, seg, len, &dc, &err)) {
            rc = cli_error(cmd, "%s", err.msg);
            goto done;
        }
        n_tok += len;
        progress_update(&bar, w + 1, NULL);
    }
    progress_end(&bar);
    const double diag_s = time_now_s() - t0;
    /* perplexity: full, then per K selection-only / hybrid / selection-only at K + fetch */
    double ppl_full = NAN, ppl_sel[MAX_LIST], ppl_hyb[MAX_LIST], ppl_match[MAX_LIST], share_ppl[MAX_LIST];
    int64_t n_scored = 0;
    if (o->ppl) {
        double s;
        progress_begin(&bar, "perplexity", 1 + 3 * o->n_k);
        if ((n_scored = run_ppl(c, corpus, n_windows, tok, pos, seg, logits, &s, &err)) < 0) {
            rc = cli_error(cmd, "%s", err.msg);
            goto done;
        }
        ppl_full = exp(s / (double)n_scored);
        progress_update(&bar, 1, NULL);
        char layer_list[1024] = "";
        for (int li = 0, at = 0; li < maps->n_sel && at < (int)sizeof layer_list - 16; li++)
            at += snprintf(layer_list + at, sizeof layer_list - at, li ? ",%d" : "%d", maps->layers[li]);
        for (int i = 0; i < o->n_k; i++)
            for (int mode = 0; mode < 3; mode++) {
                attn_plan plan;
                attn_plan_default(&plan);
                plan.sparse_layers = layer_list;
                plan.sparse.top_k = o->ks[i] + (mode == 2 ? extra : 0);
                plan.sparse.n_sink = o->n_sink;
                plan.sparse.n_tail = o->n_tail;
                plan.sparse.complete = mode == 1 ? maps : NULL;
                selector_params_default(&plan.sparse.select, SELECT_ORACLE, 0);
                subq_context_reset(c);
                context_clear_plan(c);
                if (context_set_plan(c, &plan, NULL, &err) ||
                    run_ppl(c, corpus, n_windows, tok, pos, seg, logits, &s, &err) < 0) {
                    rc = cli_error(cmd, "%s", err.msg);
                    goto done;
                }
                double p = exp(s / (double)n_scored);
                if (mode == 0) ppl_sel[i] = p;
                else if (mode == 1) ppl_hyb[i] = p;
                else ppl_match[i] = p;
                if (mode == 1) {
                    double sum = 0;
                    int64_t nh = 0;
                    for (int li = 0; li < maps->n_sel; li++) {
                        const sparse_metrics *sm = attn_sparse_get_metrics(c->stages[maps->layers[li]]);
                        if (sm) sum += sm->share_sum, nh += sm->n_share;
                    }
                    share_ppl[i] = nh ? sum / nh : NAN;
                }
                progress_update(&bar, 2 + 3 * i + mode, NULL);
            }
        context_clear_plan(c);
        progress_end(&bar);
    }
    /* ---- report ---- */
    phi_diag_cell all, quart[4], *ph = calloc((size_t)maps->n_sel * maps->dims.n_head, sizeof(phi_diag_cell));
    if (!ph) {
        rc = cli_error(cmd, "out of memory");
        goto done;
    }
    double qb[5];
    phi_diag_mean(&rec, -1, -1, -INFINITY, INFINITY, &all);
    phi_diag_quartiles(&rec, qb);
    for (int b = 0; b < 4; b++) phi_diag_mean(&rec, -1, -1, qb[b], qb[b + 1], &quart[b]);
    for (int li = 0; li < maps->n_sel; li++)
        for (int h = 0; h < maps->dims.n_head; h++)
            phi_diag_mean(&rec, maps->layers[li], h, -INFINITY, INFINITY, &ph[li * maps->dims.n_head + h]);
    if (o->annotate) {
        const int n_h = maps->n_sel * maps->dims.n_head;
        float *h_mid = malloc((size_t)n_h * sizeof(float));
        for (int i = 0; h_mid && i < n_h; i++) h_mid[i] = ph[i].n ? (float)ph[i].hmid : 0.0f;
        if (!h_mid || phi_maps_annotate_entropy(o->maps_path, h_mid, &err)) {
            rc = cli_error(cmd, "%s", h_mid ? err.msg : "out of memory");
            free(h_mid);
            free(ph);
            goto done;
        }
        free(h_mid);
        fprintf(stderr, "%s: per-head mid-region entropies stored in %s\n", cmd, o->maps_path);
    }
    /* selection-only K matching the hybrid: the smallest swept K' whose mean error is <= the hybrid's */
    int match_k[MAX_LIST];
    for (int i = 0; i < o->n_k; i++) {
        match_k[i] = -1;
        for (int j = 0; j < o->n_sel_k; j++)
            if (all.err_sweep[j] <= all.err_hyb[i] && (match_k[i] < 0 || o->sel_ks[j] < match_k[i])) match_k[i] = o->sel_ks[j];
    }
    if (o->json) {
        FILE *f = stdout;
        fprintf(f, "{\"maps\": ");
        cli_json_string(f, o->maps_path, strlen(o->maps_path));
        fprintf(f, ", \"d_phi\": %d, \"head_dim\": %d, \"n_sink\": %d, \"n_tail\": %d, \"windows\": %d, \"tokens\": %lld, "
                   "\"records\": %lld, \"min_mid\": %d, \"cache_fetch_tokens\": %.3f, \"seconds\": %.1f, \"ks\": [",
                maps->dims.d_phi, maps->dims.head_dim, o->n_sink, o->n_tail, n_windows, (long long)n_tok, (long long)rec.n,
                dc.min_mid, fetch, diag_s);
        for (int i = 0; i < o->n_k; i++) fprintf(f, "%s%d", i ? ", " : "", o->ks[i]);
        fprintf(f, "], \"sel_ks\": [");
        for (int i = 0; i < o->n_sel_k; i++) fprintf(f, "%s%d", i ? ", " : "", o->sel_ks[i]);
        fprintf(f, "], \"sel_k_matching_hybrid\": [");
        for (int i = 0; i < o->n_k; i++) fprintf(f, "%s%d", i ? ", " : "", match_k[i]);
        fprintf(f, "], \"all\": ");
        json_cell(f, &all, o->n_k, o->n_sel_k);
        fprintf(f, ", \"quartiles\": [");
        for (int b = 0; b < 4; b++) {
            fprintf(f, "%s{\"hmid_lo\": ", b ? ", " : "");
            json_num(f, qb[b]);
            fprintf(f, ", \"hmid_hi\": ");
            json_num(f, qb[b + 1]);
            fprintf(f, ", \"cell\": ");
            json_cell(f, &quart[b], o->n_k, o->n_sel_k);
            fprintf(f, "}");
        }
        fprintf(f, "], \"heads\": [");
        for (int li = 0; li < maps->n_sel; li++)
            for (int h = 0; h < maps->dims.n_head; h++) {
                fprintf(f, "%s{\"layer\": %d, \"head\": %d, \"cell\": ", li || h ? ", " : "", maps->layers[li], h);
                json_cell(f, &ph[li * maps->dims.n_head + h], o->n_k, o->n_sel_k);
                fprintf(f, "}");
            }
        fprintf(f, "]");
        if (o->ppl) {
            fprintf(f, ", \"ppl\": {\"scored\": %lld, \"full\": ", (long long)n_scored);
            json_num(f, ppl_full);
            const char *nm[4] = {"selection", "hybrid", "selection_k_plus_fetch", "hybrid_share"};
            const double *arr[4] = {ppl_sel, ppl_hyb, ppl_match, share_ppl};
            for (int a = 0; a < 4; a++) {
                fprintf(f, ", \"%s\": [", nm[a]);
                for (int i = 0; i < o->n_k; i++) {
                    fprintf(f, "%s", i ? ", " : "");
                    json_num(f, arr[a][i]);
                }
                fprintf(f, "]");
            }
            fprintf(f, ", \"fetch_k\": %d}", extra);
        }
        fprintf(f, "}\n");
    } else {
        printf("completion diagnostics: %s on %d windows (%lld tokens), %lld (layer, head, query) records with |M| > %d, "
               "n_sink %d, n_tail %d, oracle top-K; %.1f s\n",
               o->maps_path, n_windows, (long long)n_tok, (long long)rec.n, dc.min_mid, o->n_sink, o->n_tail, diag_s);
        printf("\nattention-output rel. L1 error vs full attention (mean over records)\n");
        printf("%6s %12s %12s %10s %14s %10s %12s\n", "K", "selection", "hybrid", "share", "hybrid better", "harm",
               "sel. needs K");
        for (int i = 0; i < o->n_k; i++) {
            char mk[32];
            if (match_k[i] < 0) snprintf(mk, sizeof mk, "> %d", o->sel_ks[o->n_sel_k - 1]);
            else snprintf(mk, sizeof mk, "%d", match_k[i]);
            printf("%6d %12.4f %12.4f %10.4f %13.1f%% %10.4f %12s\n", o->ks[i], all.err_sel[i], all.err_hyb[i],
                   all.share[i], 100 * all.win[i], all.harm[i], mk);
        }
        printf("(harm: mean over records of max(0, hybrid err - selection err))\n");
        printf("\nselection-only sweep:");
        for (int j = 0; j < o->n_sel_k; j++) printf(" K=%d %.4f", o->sel_ks[j], all.err_sweep[j]);
        printf("\n\nby mid-region entropy quartile (H_mid, normalised)\n%-16s %8s", "H_mid range", "n");
        for (int i = 0; i < o->n_k; i++) printf("   sel@%-3d hyb@%-3d shr@%-3d", o->ks[i], o->ks[i], o->ks[i]);
        printf("\n");
        for (int b = 0; b < 4; b++) {
            char rg[32];
            snprintf(rg, sizeof rg, "Q%d [%.2f,%.2f)", b + 1, b ? qb[b] : 0.0, b < 3 ? qb[b + 1] : 1.0);
            printf("%-16s %8lld", rg, (long long)quart[b].n);
            for (int i = 0; i < o->n_k; i++)
                printf("   %7.4f %7.4f %7.4f", quart[b].err_sel[i], quart[b].err_hyb[i], quart[b].share[i]);
            printf("\n");
        }
        printf("\nper layer and head (K = %d): H_mid, selection err, hybrid err, share\n", o->ks[0]);
        for (int li = 0; li < maps->n_sel; li++) {
            printf("layer %2d:", maps->layers[li]);
            for (int h = 0; h < maps->dims.n_head; h++) {
                const phi_diag_cell *x = &ph[li * maps->dims.n_head + h];
                printf("  h%d %.2f %.3f/%.3f %.2f", h, x->hmid, x->err_sel[0], x->err_hyb[0], x->share[0]);
            }
            printf("\n");
        }
        if (o->ppl) {
            printf("\nperplexity over %lld tokens: full %.4f\n", (long long)n_scored, ppl_full);
            printf("%6s %12s %12s %16s %10s\n", "K", "selection", "hybrid", "selection@K+fetch", "share");
            for (int i = 0; i < o->n_k; i++)
                printf("%6d %12.4f %12.4f %12.4f@%-3d %10.4f\n", o->ks[i], ppl_sel[i], ppl_hyb[i], ppl_match[i],
                       o->ks[i] + extra, share_ppl[i]);
        }
    }
    free(ph);
done:
    phi_diag_records_free(&rec);
    free(tok);
    free(pos);
    free(seg);
    free(logits);
    free(qs);
    train_capture_free(cap);
    subq_context_free(c);
    phi_maps_free(maps);
    return rc;
}

int cmd_train_phi(int argc, char **argv) {
    const char *cmd = "train-phi";
    phi_train_config cfg = phi_train_default_config();
    cfg.steps = 500;
    const char *model = NULL, *out = NULL, *log_path = NULL, *dump = NULL, *v;
    const char *layers_s = "1--1";
    const char *data[MAX_PATHS], *eval_data[MAX_PATHS];
    int n_data = 0, n_eval = 0, json = 0, seq = 512, pack = 1;
    float eval_frac = 0.05f, tau = 1, l_kl = 0.99f, l_top = 1, l_fp = 2, l_z = 4, band = 8, hub = 1;
    diag_opts dg = {.windows = 32, .ks = {8, 16, 32}, .n_k = 3, .sel_ks = {8, 16, 24, 32, 48, 64, 96, 128, 192},
                    .n_sel_k = 9};
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
        INT_OPT("--d-phi", 1, PHI_MAX_DIM, &cfg.d_phi);
        INT_OPT("--d-emb", 1, PHI_MAX_DIM, &cfg.d_emb);
        INT_OPT("--d-hidden", 1, PHI_MAX_DIM, &cfg.d_hidden);
        INT_OPT("--n-sink", 0, 1 << 20, &cfg.loss.n_sink);
        INT_OPT("--n-tail", 1, 1 << 20, &cfg.loss.n_tail);
        INT_OPT("--batch", 1, 1 << 16, &cfg.batch);
        INT_OPT("--warmup", 0, 1 << 30, &cfg.warmup);
        INT_OPT("--eval-every", 0, 1 << 30, &cfg.eval_every);
        INT_OPT("--save-every", 0, 1 << 30, &cfg.save_every);
        INT_OPT("--windows", 1, 1 << 20, &dg.windows);
        FLOAT_OPT("--tau", &tau);
        FLOAT_OPT("--l-kl", &l_kl);
        FLOAT_OPT("--l-top", &l_top);
        FLOAT_OPT("--l-fp", &l_fp);
        FLOAT_OPT("--l-z", &l_z);
        FLOAT_OPT("--band", &band);
        FLOAT_OPT("--huber", &hub);
        FLOAT_OPT("--lr", &cfg.lr);
        FLOAT_OPT("--wd", &cfg.weight_decay);
        FLOAT_OPT("--clip", &cfg.grad_clip);
        FLOAT_OPT("--wo-std", &cfg.wo_std);
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
        } else if (!strcmp(a, "--k-sweep")) {
            ok = (v = cli_value(cmd, argc, argv, &i)) && parse_list(cmd, a, v, 0, dg.ks, &dg.n_k);
        } else if (!strcmp(a, "--sel-sweep")) {
            ok = (v = cli_value(cmd, argc, argv, &i)) && parse_list(cmd, a, v, 0, dg.sel_ks, &dg.n_sel_k);
        } else if (!strcmp(a, "--no-pack")) {
            pack = 0;
        } else if (!strcmp(a, "--resume")) {
            cfg.resume = 1;
        } else if (!strcmp(a, "--ppl")) {
            dg.ppl = 1;
        } else if (!strcmp(a, "--annotate")) {
            dg.annotate = 1;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--log")) {
            ok = (log_path = cli_value(cmd, argc, argv, &i)) != NULL;
        } else if (!strcmp(a, "--dump")) {
            ok = (dump = cli_value(cmd, argc, argv, &i)) != NULL;
        } else if (!strcmp(a, "--diagnose")) {
            ok = (dg.maps_path = cli_value(cmd, argc, argv, &i)) != NULL;
        } else if (a[0] == '-' && a[1] != '\0') {
            return cli_error(cmd, "unknown option '%s' (see subq train-phi --help)", a);
        } else {
            if (n_data >= MAX_PATHS) return cli_error(cmd, "more than %d data paths", MAX_PATHS);
            data[n_data++] = a;
        }
#undef INT_OPT
#undef FLOAT_OPT
        if (!ok) return 1;
    }
    if (!model) return cli_error(cmd, "no model given; use -m FILE.gguf");
    if (!out && !dump && !dg.maps_path) return cli_error(cmd, "no output given; use -o FILE.gguf");
    if (n_data == 0 && !(dg.maps_path && n_eval > 0))
        return cli_error(cmd, "no training data given; pass text files, directories or .jsonl files");
    if (!(tau > 0) || !(band > 0) || !(hub > 0)) return cli_error(cmd, "--tau, --band and --huber must be > 0");
    if (!(l_kl >= 0 && l_kl <= 1)) return cli_error(cmd, "--l-kl must be in [0, 1]");
    if (!(l_top >= 0) || !(l_fp >= 0) || !(l_z >= 0) || !(cfg.lr >= 0) || !(cfg.weight_decay >= 0) || !(cfg.wo_std >= 0))
        return cli_error(cmd, "--l-top, --l-fp, --l-z, --lr, --wd and --wo-std must be >= 0");
    if (!(eval_frac >= 0 && eval_frac < 1)) return cli_error(cmd, "--eval-frac must be in [0, 1)");
    cfg.loss.tau = tau;
    cfg.loss.l_kl = l_kl;
    cfg.loss.l_top = l_top;
    cfg.loss.l_fp = l_fp;
    cfg.loss.l_z = l_z;
    cfg.loss.band = band;
    cfg.loss.huber = hub;
    cfg.out_path = out ? out : dump; /* --dump writes nothing else */

    subq_error err = {0};
    subq_model *m = NULL;
    train_corpus *corpus = NULL;
    int *layers = NULL, rc = 0;
    unsigned char *mask = NULL;
    FILE *logf = NULL;
    run_ui ui = {0};
    if (subq_model_load(model, &m, &err)) return cli_error(cmd, "%s", err.msg);
    const int L = m->hp.n_layer;
    mask = malloc((size_t)L);
    layers = malloc((size_t)L * sizeof(int));
    if (!mask || !layers) {
        rc = cli_error(cmd, "out of memory");
        goto done;
    }
    if (layers_parse(layers_s, L, mask, &err)) {
        rc = cli_error(cmd, "--layers: %s", err.msg);
        goto done;
    }
    cfg.n_layers = 0;
    for (int l = 0; l < L; l++)
        if (mask[l]) layers[cfg.n_layers++] = l;
    if (cfg.n_layers == 0) {
        rc = cli_error(cmd, "--layers %s leaves no layer to train", layers_s);
        goto done;
    }
    cfg.layers = layers;
    corpus_params cp = {.seq = seq, .pack = pack, .eval_frac = eval_frac, .seed = dg.maps_path ? 1 : cfg.seed,
                        .eval_only = dg.maps_path != NULL};
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
    /* the corpus wants a training split; --diagnose reads only the held-out one */
    if (dg.maps_path && n_data == 0 && corpus_add_text(corpus, m, "unused", 6, 0, "(placeholder)", &err)) {
        rc = cli_error(cmd, "%s", err.msg);
        goto done;
    }
    if (corpus_finish(corpus, &err)) {
        rc = cli_error(cmd, "%s", err.msg);
        goto done;
    }
    if (dg.maps_path) {
        dg.json = json;
        dg.n_threads = cfg.n_threads;
        dg.n_sink = cfg.loss.n_sink;
        dg.n_tail = cfg.loss.n_tail;
        rc = diagnose(cmd, &dg, m, corpus);
        goto done;
    }
    if (dump) {
        if (phi_train_dump(m, corpus, &cfg, dump, &err)) rc = cli_error(cmd, "%s", err.msg);
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
    ui.steps = cfg.steps;
    ui.n_layers = cfg.n_layers;
    ui.ev_layers = calloc((size_t)cfg.n_layers, sizeof(phi_eval_layer));
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old);
    phi_train_hooks hooks = {.user = &ui, .on_start = ui_start, .on_step = ui_step, .on_eval = ui_eval,
                             .on_save = ui_save, .stop = &g_stop};
    phi_train_result res;
    subq_status s = phi_train_run(m, corpus, &cfg, &hooks, &res, &err);
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
        fprintf(stderr, "subq train-phi: %s at step %lld of %lld; checkpoint %s.ckpt (continue with --resume)\n",
                res.interrupted ? "interrupted" : "stopped", (long long)res.step, (long long)cfg.steps, out);
    else
        fprintf(stderr, "subq train-phi: %lld steps, %.0f tok/s; wrote %s\n", (long long)res.step, res.tok_per_s, out);
    if (json) {
        printf("{\"output\": ");
        cli_json_string(stdout, out, strlen(out));
        printf(", \"step\": %lld, \"steps\": %lld, \"interrupted\": %s, \"stopped_early\": %s, \"tok_per_s\": %.1f, "
               "\"train_tokens\": %lld, \"d_phi\": %d, \"d_emb\": %d, \"d_hidden\": %d, \"layers\": [",
               (long long)res.step, (long long)cfg.steps, res.interrupted ? "true" : "false",
               res.stopped_early ? "true" : "false", res.tok_per_s, (long long)res.train_tokens, cfg.d_phi, cfg.d_emb,
               cfg.d_hidden);
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
    free(layers);
    corpus_free(corpus);
    subq_model_free(m);
    return rc;
}
