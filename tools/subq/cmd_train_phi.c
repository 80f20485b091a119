/* subq train-phi: learn the completion feature maps (phi_q per query head,
 * phi_k per KV head) by distillation from the frozen model's attention
 * logits over the mid region; and, with --diagnose, measure what the
 * completion does. The work is in subq_train_phi
 * (src/train/complete/phi_train.h) and subq_complete_diagnose
 * (src/eval/complete_diag.h); this file parses options and prints. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "progress.h"
#include "cli.h"
#include "cli_train.h"

/* Print the help (defaults from d) on stdout; returns 0 (the exit code). */
static int help(const subq_train_phi_params *d) {
    fputs("usage: subq train-phi -m MODEL -o PHI.gguf [options] DATA...\n"
          "       subq train-phi -m MODEL --diagnose PHI.gguf -f TEXT [options]\n"
          "Learn the completion feature maps of top-K retrieval with linear-attention completion:\n"
          "per layer, phi_q (per query head) and phi_k (per KV head), R^head_dim -> R^d_phi, with\n"
          "<phi_q(q), phi_k(k)> ~ exp(q.k/sqrt(head_dim)) on post-RoPE vectors; stem, ReZero GELU\n"
          "(tanh) block, exp output. Distilled on the model's own logits over each query's mid\n"
          "region (prefix minus the first --n-sink and last --n-tail tokens): tau^2 KL + Huber\n"
          "penalties on the top band, far keys entering the band, and log-partition overestimation.\n"
          "Ctrl-C saves a checkpoint and exits; --resume continues.\n\n",
          stdout);
    cli_train_help_data();
    const subq_phi_loss_params *l = &d->loss;
    printf("maps:\n"
           "  --layers LIST        layers to learn: 'all' or e.g. '1-4', '1,3,-1' (default 1--1: all but\n"
           "                       layer 0)\n"
           "  --d-phi N            feature width (default %d)\n"
           "  --d-emb N            stem width (default %d)\n"
           "  --d-hidden N         ReZero block hidden width (default %d)\n"
           "  --wo-std F           initial Wo ~ N(0, F^2/d_emb) (default %g)\n"
           "partition and losses:\n"
           "  --n-sink N           anchors at the start of each document (default %d)\n"
           "  --n-tail N           anchors at the end, the query included (default %d)\n"
           "  --tau T              KL temperature (default %g)\n"
           "  --l-kl F             KL weight; the Huber terms get 1 - F (default %g)\n"
           "  --l-top F, --l-fp F, --l-z F   Huber term weights (default %g, %g, %g)\n"
           "  --band F             top band r >= -F (Delta, default %g)\n"
           "  --huber F            Huber delta (default %g)\n",
           d->d_phi, d->d_emb, d->d_hidden, (double)d->wo_std, l->n_sink, l->n_tail, l->tau, l->l_kl, l->l_top,
           l->l_fp, l->l_z, l->band, l->huber);
    cli_train_help_optim(&d->train);
    cli_train_help_eval(&d->train);
    cli_train_help_output(&d->train);
    fputs("  --dump FILE          testing: write the capture, features, losses and gradient of the\n"
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
          "                       --complete-heads entropy>=X in eval and generate)\n",
          stdout);
    return 0;
}

/* ---- training ------------------------------------------------------------- */

static void step_text(char *buf, size_t cap, const subq_train_step_stats *s) {
    snprintf(buf, cap, "loss %.4f (kl %.4f |dlogZ| %.3f)", s->loss, s->part[SUBQ_PHI_PART_KL], s->part[SUBQ_PHI_PART_LSE]);
}

static const char *const part_name[SUBQ_PHI_N_PARTS] = {"kl", "top", "fp", "z", "lse_err"};

static void json_parts(FILE *f, const double *part) {
    for (int k = 0; k < SUBQ_PHI_N_PARTS; k++) fprintf(f, ", \"%s\": %.6f", part_name[k], part[k]);
}

static void json_eval(FILE *f, const subq_train_eval_stats *e) {
    fprintf(f, "{\"type\": \"eval\", \"step\": %lld, \"n_seq\": %d, \"n_tokens\": %lld, \"loss\": %.6f", (long long)e->step,
            e->n_seq, (long long)e->n_tokens, e->loss);
    json_parts(f, e->part);
    fprintf(f, ", \"seconds\": %.3f, \"layers\": [", e->seconds);
    for (int i = 0; i < e->n_layers; i++) {
        const subq_train_eval_layer *L = &e->layers[i];
        fprintf(f, "%s{\"layer\": %d, \"loss\": %.6f", i ? ", " : "", L->layer, L->loss);
        json_parts(f, L->part);
        fprintf(f, ", \"n_queries\": %lld}", (long long)L->n_queries);
    }
    fprintf(f, "]}");
}

static void print_eval(const subq_train_eval_stats *e, const void *arg) {
    (void)arg;
    fprintf(stderr, "eval @ step %lld: loss %.4f (kl %.4f top %.3f fp %.3f z %.3f |dlogZ| %.3f) on %d sequences, %.1f s\n",
            (long long)e->step, e->loss, e->part[0], e->part[1], e->part[2], e->part[3], e->part[4], e->n_seq, e->seconds);
    for (int i = 0; i < e->n_layers; i++) {
        const subq_train_eval_layer *L = &e->layers[i];
        fprintf(stderr, "  layer %2d  loss %.4f  kl %.4f  top %.3f  fp %.3f  z %.3f  |dlogZ| %.3f\n", L->layer, L->loss,
                L->part[0], L->part[1], L->part[2], L->part[3], L->part[4]);
    }
}

static subq_status run(subq_model *m, const subq_corpus *data, const void *cfg, const subq_train_hooks *hooks,
                       subq_train_result *res, subq_error *err) {
    return subq_train_phi(m, data, cfg, hooks, res, err);
}

/* ---- diagnostics ------------------------------------------------------------ */

static void json_num(FILE *f, double v) {
    if (isfinite(v)) fprintf(f, "%.6g", v);
    else fprintf(f, "null");
}

static void json_list(FILE *f, const char *name, const double *v, int n) {
    fprintf(f, ", \"%s\": [", name);
    for (int k = 0; k < n; k++) {
        fprintf(f, "%s", k ? ", " : "");
        json_num(f, v[k]);
    }
    fprintf(f, "]");
}

static void json_ints(FILE *f, const char *name, const int *v, int n) {
    fprintf(f, ", \"%s\": [", name);
    for (int k = 0; k < n; k++) fprintf(f, "%s%d", k ? ", " : "", v[k]);
    fprintf(f, "]");
}

static void json_cell(FILE *f, const subq_complete_diag_cell *c, int nk, int nsk) {
    fprintf(f, "{\"n\": %lld, \"hmid\": ", (long long)c->n);
    json_num(f, c->hmid);
    json_list(f, "err_sel", c->err_sel, nk);
    json_list(f, "err_hyb", c->err_hyb, nk);
    json_list(f, "share", c->share, nk);
    json_list(f, "hybrid_better", c->win, nk);
    json_list(f, "harm", c->harm, nk);
    json_list(f, "err_sel_sweep", c->err_sweep, nsk);
    fprintf(f, "}");
}

static void diag_json(const subq_complete_diag_options *o, const subq_complete_diag_report *r) {
    FILE *f = stdout;
    fprintf(f, "{\"maps\": ");
    cli_json_string(f, o->maps_path, strlen(o->maps_path));
    fprintf(f, ", \"d_phi\": %d, \"head_dim\": %d, \"n_sink\": %d, \"n_tail\": %d, \"windows\": %d, \"tokens\": %lld, "
               "\"records\": %lld, \"min_mid\": %d, \"cache_fetch_tokens\": %.3f, \"seconds\": %.1f",
            r->d_phi, r->head_dim, o->n_sink, o->n_tail, r->n_windows, (long long)r->n_tokens, (long long)r->n_records,
            r->min_mid, r->fetch_tokens, r->seconds);
    json_ints(f, "ks", o->ks, o->n_k);
    json_ints(f, "sel_ks", o->sel_ks, o->n_sel_k);
    json_ints(f, "sel_k_matching_hybrid", r->match_k, o->n_k);
    fprintf(f, ", \"all\": ");
    json_cell(f, &r->all, o->n_k, o->n_sel_k);
    fprintf(f, ", \"quartiles\": [");
    for (int b = 0; b < 4; b++) {
        fprintf(f, "%s{\"hmid_lo\": ", b ? ", " : "");
        json_num(f, r->quartile_bounds[b]);
        fprintf(f, ", \"hmid_hi\": ");
        json_num(f, r->quartile_bounds[b + 1]);
        fprintf(f, ", \"cell\": ");
        json_cell(f, &r->quartile[b], o->n_k, o->n_sel_k);
        fprintf(f, "}");
    }
    fprintf(f, "], \"heads\": [");
    for (int li = 0; li < r->n_sel; li++)
        for (int h = 0; h < r->n_head; h++) {
            fprintf(f, "%s{\"layer\": %d, \"head\": %d, \"cell\": ", li || h ? ", " : "", r->layers[li], h);
            json_cell(f, &r->heads[li * r->n_head + h], o->n_k, o->n_sel_k);
            fprintf(f, "}");
        }
    fprintf(f, "]");
    if (o->ppl) {
        fprintf(f, ", \"ppl\": {\"scored\": %lld, \"full\": ", (long long)r->n_scored);
        json_num(f, r->ppl_full);
        json_list(f, "selection", r->ppl_sel, o->n_k);
        json_list(f, "hybrid", r->ppl_hyb, o->n_k);
        json_list(f, "selection_k_plus_fetch", r->ppl_match, o->n_k);
        json_list(f, "hybrid_share", r->share, o->n_k);
        fprintf(f, ", \"fetch_k\": %d}", r->fetch_k);
    }
    fprintf(f, "}\n");
}

static void diag_text(const subq_complete_diag_options *o, const subq_complete_diag_report *r) {
    printf("completion diagnostics: %s on %d windows (%lld tokens), %lld (layer, head, query) records with |M| > %d, "
           "n_sink %d, n_tail %d, oracle top-K; %.1f s\n",
           o->maps_path, r->n_windows, (long long)r->n_tokens, (long long)r->n_records, r->min_mid, o->n_sink, o->n_tail,
           r->seconds);
    printf("\nattention-output rel. L1 error vs full attention (mean over records)\n");
    printf("%6s %12s %12s %10s %14s %10s %12s\n", "K", "selection", "hybrid", "share", "hybrid better", "harm",
           "sel. needs K");
    for (int i = 0; i < o->n_k; i++) {
        char mk[32];
        if (r->match_k[i] < 0) snprintf(mk, sizeof mk, "> %d", o->sel_ks[o->n_sel_k - 1]);
        else snprintf(mk, sizeof mk, "%d", r->match_k[i]);
        printf("%6d %12.4f %12.4f %10.4f %13.1f%% %10.4f %12s\n", o->ks[i], r->all.err_sel[i], r->all.err_hyb[i],
               r->all.share[i], 100 * r->all.win[i], r->all.harm[i], mk);
    }
    printf("(harm: mean over records of max(0, hybrid err - selection err))\n");
    printf("\nselection-only sweep:");
    for (int j = 0; j < o->n_sel_k; j++) printf(" K=%d %.4f", o->sel_ks[j], r->all.err_sweep[j]);
    printf("\n\nby mid-region entropy quartile (H_mid, normalised)\n%-16s %8s", "H_mid range", "n");
    for (int i = 0; i < o->n_k; i++) printf("   sel@%-3d hyb@%-3d shr@%-3d", o->ks[i], o->ks[i], o->ks[i]);
    printf("\n");
    const double *qb = r->quartile_bounds;
    for (int b = 0; b < 4; b++) {
        char rg[32];
        snprintf(rg, sizeof rg, "Q%d [%.2f,%.2f)", b + 1, b ? qb[b] : 0.0, b < 3 ? qb[b + 1] : 1.0);
        printf("%-16s %8lld", rg, (long long)r->quartile[b].n);
        for (int i = 0; i < o->n_k; i++)
            printf("   %7.4f %7.4f %7.4f", r->quartile[b].err_sel[i], r->quartile[b].err_hyb[i], r->quartile[b].share[i]);
        printf("\n");
    }
    printf("\nper layer and head (K = %d): H_mid, selection err, hybrid err, share\n", o->ks[0]);
    for (int li = 0; li < r->n_sel; li++) {
        printf("layer %2d:", r->layers[li]);
        for (int h = 0; h < r->n_head; h++) {
            const subq_complete_diag_cell *x = &r->heads[li * r->n_head + h];
            printf("  h%d %.2f %.3f/%.3f %.2f", h, x->hmid, x->err_sel[0], x->err_hyb[0], x->share[0]);
        }
        printf("\n");
    }
    if (o->ppl) {
        printf("\nperplexity over %lld tokens: full %.4f\n", (long long)r->n_scored, r->ppl_full);
        printf("%6s %12s %12s %16s %10s\n", "K", "selection", "hybrid", "selection@K+fetch", "share");
        for (int i = 0; i < o->n_k; i++)
            printf("%6d %12.4f %12.4f %12.4f@%-3d %10.4f\n", o->ks[i], r->ppl_sel[i], r->ppl_hyb[i], r->ppl_match[i],
                   o->ks[i] + r->fetch_k, r->share[i]);
    }
}

typedef struct diag_bar {
    progress bar;
    int started;
} diag_bar;

static void diag_stage(void *user, const char *name, int64_t total) {
    diag_bar *b = user;
    if (b->started) progress_end(&b->bar);
    progress_begin(&b->bar, name, total);
    b->started = 1;
}

static void diag_progress(void *user, int64_t done) { progress_update(&((diag_bar *)user)->bar, done, NULL); }

static int diagnose(const char *cmd, const cli_train *o, const subq_complete_diag_options *dg) {
    diag_bar bar = {0};
    const subq_complete_diag_hooks hooks = {.user = &bar, .on_stage = diag_stage, .on_progress = diag_progress};
    subq_complete_diag_report r;
    subq_error err = {0};
    const subq_status s = subq_complete_diagnose(o->m, o->data_set, dg, &hooks, &r, &err);
    if (bar.started) progress_end(&bar.bar);
    if (s) return cli_error(cmd, "%s", err.msg);
    if (dg->annotate) fprintf(stderr, "%s: per-head mid-region entropies stored in %s\n", cmd, dg->maps_path);
    if (o->json) diag_json(dg, &r);
    else diag_text(dg, &r);
    subq_complete_diag_report_free(&r);
    return 0;
}

int cmd_train_phi(int argc, char **argv) {
    const char *cmd = "train-phi", *dump = NULL;
    subq_train_phi_params cfg = subq_train_phi_default_params();
    float tau = (float)cfg.loss.tau, l_kl = (float)cfg.loss.l_kl, l_top = (float)cfg.loss.l_top;
    float l_fp = (float)cfg.loss.l_fp, l_z = (float)cfg.loss.l_z, band = (float)cfg.loss.band, hub = (float)cfg.loss.huber;
    subq_complete_diag_options dg = {.windows = 32, .ks = {8, 16, 32}, .n_k = 3, .sel_ks = {8, 16, 24, 32, 48, 64, 96, 128, 192},
                           .n_sel_k = 9};
    cli_train o;
    cli_train_init(&o, cmd, &cfg.train, "1--1");
    const cli_flag flags[] = {
        CLI_INT(NULL, "--d-phi", &cfg.d_phi, 1, SUBQ_PHI_MAX_DIM),
        CLI_INT(NULL, "--d-emb", &cfg.d_emb, 1, SUBQ_PHI_MAX_DIM),
        CLI_INT(NULL, "--d-hidden", &cfg.d_hidden, 1, SUBQ_PHI_MAX_DIM),
        CLI_FLOAT(NULL, "--wo-std", &cfg.wo_std),
        CLI_INT(NULL, "--n-sink", &cfg.loss.n_sink, 0, 1 << 20),
        CLI_INT(NULL, "--n-tail", &cfg.loss.n_tail, 1, 1 << 20),
        CLI_FLOAT(NULL, "--tau", &tau),
        CLI_FLOAT(NULL, "--l-kl", &l_kl),
        CLI_FLOAT(NULL, "--l-top", &l_top),
        CLI_FLOAT(NULL, "--l-fp", &l_fp),
        CLI_FLOAT(NULL, "--l-z", &l_z),
        CLI_FLOAT(NULL, "--band", &band),
        CLI_FLOAT(NULL, "--huber", &hub),
        CLI_STRING(NULL, "--dump", &dump),
        CLI_STRING(NULL, "--diagnose", &dg.maps_path),
        CLI_INT(NULL, "--windows", &dg.windows, 1, 1 << 20),
        CLI_INT_LIST(NULL, "--k-sweep", dg.ks, &dg.n_k, 0, SUBQ_PHI_DIAG_MAX_K),
        CLI_INT_LIST(NULL, "--sel-sweep", dg.sel_ks, &dg.n_sel_k, 0, SUBQ_PHI_DIAG_MAX_K),
        CLI_SET(NULL, "--ppl", &dg.ppl),
        CLI_SET(NULL, "--annotate", &dg.annotate),
    };
    for (int i = 1; i < argc; i++)
        if (cli_is_help(argv[i])) return help(&cfg);
    if (!cli_train_parse(&o, argc, argv, flags, sizeof flags / sizeof flags[0])) return 1;
    if (!cli_train_check(&o, !dump && !dg.maps_path, !(dg.maps_path && o.n_eval > 0))) return 1;
    if (dump && !dg.maps_path && !cli_output_ok(cmd, dump, o.force)) return 1;
    if (!(tau > 0) || !(band > 0) || !(hub > 0)) return cli_error(cmd, "--tau, --band and --huber must be > 0");
    if (!(l_kl >= 0 && l_kl <= 1)) return cli_error(cmd, "--l-kl must be in [0, 1]");
    if (!(l_top >= 0) || !(l_fp >= 0) || !(l_z >= 0) || !(cfg.wo_std >= 0))
        return cli_error(cmd, "--l-top, --l-fp, --l-z and --wo-std must be >= 0");
    cfg.loss.tau = tau;
    cfg.loss.l_kl = l_kl;
    cfg.loss.l_top = l_top;
    cfg.loss.l_fp = l_fp;
    cfg.loss.l_z = l_z;
    cfg.loss.band = band;
    cfg.loss.huber = hub;
    cfg.train.out_path = o.out ? o.out : dump; /* --dump writes nothing else */
    int rc = 1;
    if (cli_train_load(&o, dg.maps_path != NULL)) {
        subq_error err = {0};
        if (dg.maps_path) {
            dg.n_threads = cfg.train.n_threads;
            dg.n_sink = cfg.loss.n_sink;
            dg.n_tail = cfg.loss.n_tail;
            rc = diagnose(cmd, &o, &dg);
        } else if (dump) {
            rc = subq_train_phi_dump(o.m, o.data_set, &cfg, dump, &err) ? cli_error(cmd, "%s", err.msg) : 0;
        } else {
            cli_train_ui ui = {.step_text = step_text, .print_eval = print_eval, .json_eval = json_eval};
            snprintf(ui.extra_json, sizeof ui.extra_json, "\"d_phi\": %d, \"d_emb\": %d, \"d_hidden\": %d", cfg.d_phi,
                     cfg.d_emb, cfg.d_hidden);
            rc = cli_train_run(&o, &ui, run, &cfg);
        }
    }
    cli_train_free(&o);
    return rc;
}
