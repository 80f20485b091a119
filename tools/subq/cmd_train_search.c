/* subq train-search: learn search projections (W_Qs, W_Ks per layer) by
 * distillation from the frozen model's own attention. The work is done by
 * subq_train_search (src/train/search/train_search.h); this file parses
 * options and prints the task's figures (cli_train.h does the rest). */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "cli_train.h"

/* Print the help (defaults from d) on stdout; returns 0 (the exit code). */
static int help(const subq_train_search_params *d) {
    fputs("usage: subq train-search -m MODEL -o OUT.gguf [options] DATA...\n"
          "Learn per-layer search projections W_Qs, W_Ks (d_search x d_model) that map the normed\n"
          "hidden state entering attention to a space where a query's nearest keys are the keys\n"
          "the frozen model attends to. The teacher is the model's own attention (fp32, block-causal,\n"
          "aggregated over query heads); losses are InfoNCE over the teacher's top keys plus\n"
          "KL(teacher || student). Ctrl-C saves a checkpoint and exits; --resume continues.\n\n",
          stdout);
    cli_train_help_data();
    printf("layers and search space:\n"
           "  --layers LIST        layers to learn: 'all' or e.g. '1,3,5-7,-1' (negative = from the end)\n"
           "                       (default all)\n"
           "  --reserve LIST       layers left on full attention, removed from --layers (default 0;\n"
           "                       'none' for no reserve), e.g. '0,1,2,-1'\n"
           "  --d-search N         width of the search space (default %d; 128 recommended for\n"
           "                       d_model >= 1024)\n"
           "  --granularity G      layer (one key set a layer shares, default) | kv-head (one set per\n"
           "                       KV head, its query heads' together) | head (one per query head);\n"
           "                       --d-search is then each search head's width\n"
           "  --rope-dims R        rotate the last R dims of q_s and k_s by the token's position in its\n"
           "                       document, as RoPE does, so that the search can rank by distance\n"
           "                       (\"recent\"); even, at most d_search; 0 = position-free (default:\n"
           "                       half of --d-search)\n"
           "  --rope-base B        frequency base of that rotation: pair i turns by\n"
           "                       pos * scale * B^(-2i/R) (default %g)\n"
           "  --rope-scale S       positions multiplied by S (position interpolation) (default %g)\n"
           "  --init FILE          start from the projections in FILE (same width, layers and\n"
           "                       rotation), e.g. trained at a shorter --seq, with a fresh optimiser\n"
           "                       and schedule (default: random weights, --init-std)\n"
           "  --init native        start from the model's own W_q / W_k (granularity kv-head or head,\n"
           "                       --d-search = the head width, the model's rotation): ranked with\n"
           "                       --score dot, the per-head (per KV head: group-mean) raw-QK oracle\n"
           "losses:\n"
           "  --k-pos N            InfoNCE positives: the teacher's top N keys (default %d)\n"
           "  --tau T              InfoNCE temperature on cosine similarity (default %g)\n"
           "  --tau-kl T           KL student temperature on q_s.k_s/sqrt(d_search) (default %g)\n"
           "  --alpha A            InfoNCE weight (default %g)\n"
           "  --beta B             KL weight (default %g)\n"
           "  --head-agg max|mean  teacher aggregation over query heads (default %s)\n"
           "  --sink N             leave each document's first N keys out of every query's key set\n"
           "                       (default %d, the sparse runtime's --sink)\n"
           "  --tail N             leave each query's N most recent keys, itself included, out of its key\n"
           "                       set (default %d, the runtime's --tail). The sparse runtime always\n"
           "                       attends these keys and retrieves only among keys [doc start + sink,\n"
           "                       t - tail], so the defaults train on exactly the keys it searches;\n"
           "                       --sink 0 --tail 0 trains over every causal key. Both losses use that\n"
           "                       set, with the teacher renormalised over it; queries with fewer than\n"
           "                       2 such keys are skipped. Evaluation uses the same set (below)\n"
           "  --init-std F         initial weights ~ N(0, F^2) (default %g)\n",
           d->d_search, (double)d->rope_base, (double)d->rope_scale, d->loss.k_pos, (double)d->loss.tau,
           (double)d->loss.tau_kl, (double)d->loss.alpha, (double)d->loss.beta, subq_teacher_agg_name(d->loss.agg), d->loss.n_sink, d->loss.n_tail, (double)d->init_std);
    cli_train_help_optim(&d->train);
    cli_train_help_eval(&d->train);
    fputs("  --eval-k LIST        K values for mass@K / recall@K of the learned space, the raw-QK\n"
          "                       oracle and the recency window (default 8,16,32,64), over the\n"
          "                       retrieval-eligible keys (--sink / --tail): mass@K is the teacher\n"
          "                       mass within that set captured by the top K, renormalised over the set,\n"
          "                       and the window is the K most recent keys before the tail\n",
          stdout);
    cli_train_help_output(&d->train);
    fputs("  --dump-teacher FILE  testing: write the capture, teacher, losses and metrics of the first\n"
          "                       training sequence (initial weights) to FILE and exit\n",
          stdout);
    return 0;
}

static void step_text(char *buf, size_t cap, const subq_train_step_stats *s) {
    snprintf(buf, cap, "loss %.4f (nce %.4f kl %.4f)", s->loss, s->part[0], s->part[1]);
}

/* mass / recall @K of one layer: learned, oracle, window */
static const char *const metric_names[] = {"mass_learned", "mass_oracle", "mass_window",
                                           "recall_learned", "recall_oracle", "recall_window"};
static double metric(const subq_retrieval_eval *a, int what, int k) {
    const double *src[] = {a->mass_learned, a->mass_oracle, a->mass_window,
                           a->recall_learned, a->recall_oracle, a->recall_window};
    return src[what][k] / (a->n_queries[k] > 0 ? (double)a->n_queries[k] : 1.0);
}

static void json_eval(FILE *f, const subq_train_eval_stats *e) {
    fprintf(f, "{\"type\": \"eval\", \"step\": %lld, \"n_seq\": %d, \"n_tokens\": %lld, \"loss\": %.6f, \"nce\": %.6f, "
               "\"kl\": %.6f, \"seconds\": %.3f, \"layers\": [",
            (long long)e->step, e->n_seq, (long long)e->n_tokens, e->loss, e->part[0], e->part[1], e->seconds);
    for (int i = 0; i < e->n_layers; i++) {
        const subq_train_eval_layer *L = &e->layers[i];
        const subq_retrieval_eval *a = &e->retrieval[i];
        fprintf(f, "%s{\"layer\": %d, \"nce\": %.6f, \"kl\": %.6f, \"n_queries\": %lld, \"k\": [", i ? ", " : "",
                L->layer, L->part[0], L->part[1], (long long)L->n_queries);
        for (int k = 0; k < a->n_k; k++) fprintf(f, "%s%d", k ? ", " : "", a->k[k]);
        fprintf(f, "], \"n_queries_k\": [");
        for (int k = 0; k < a->n_k; k++) fprintf(f, "%s%lld", k ? ", " : "", (long long)a->n_queries[k]);
        fprintf(f, "]");
        for (int w = 0; w < 6; w++) {
            fprintf(f, ", \"%s\": [", metric_names[w]);
            for (int k = 0; k < a->n_k; k++) fprintf(f, "%s%.6f", k ? ", " : "", metric(a, w, k));
            fprintf(f, "]");
        }
        fprintf(f, "}");
    }
    fprintf(f, "]}");
}

static void print_eval(const subq_train_eval_stats *e, const void *arg) {
    const subq_search_loss_params *l = arg;
    fprintf(stderr, "eval @ step %lld: loss %.4f (nce %.4f kl %.4f) on %d sequences, %lld tokens, %.1f s\n",
            (long long)e->step, e->loss, e->part[0], e->part[1], e->n_seq, (long long)e->n_tokens, e->seconds);
    if (l->n_sink > 0 || l->n_tail > 0)
        fprintf(stderr, "  (keys outside sink %d / tail %d only; mass = share of the teacher mass on those keys)\n",
                l->n_sink, l->n_tail);
    for (int i = 0; i < e->n_layers; i++) {
        const subq_train_eval_layer *L = &e->layers[i];
        const subq_retrieval_eval *a = &e->retrieval[i];
        fprintf(stderr, "  layer %2d  nce %.3f kl %.3f  mass learned/oracle/window", L->layer, L->part[0], L->part[1]);
        for (int k = 0; k < a->n_k; k++)
            fprintf(stderr, " @%d %.3f/%.3f/%.3f", a->k[k], metric(a, 0, k), metric(a, 1, k), metric(a, 2, k));
        fprintf(stderr, "  recall");
        for (int k = 0; k < a->n_k; k++)
            fprintf(stderr, " @%d %.3f/%.3f/%.3f", a->k[k], metric(a, 3, k), metric(a, 4, k), metric(a, 5, k));
        fputc('\n', stderr);
    }
}

static subq_status run(subq_model *m, const subq_corpus *data, const void *cfg, const subq_train_hooks *hooks,
                       subq_train_result *res, subq_error *err) {
    return subq_train_search(m, data, cfg, hooks, res, err);
}

int cmd_train_search(int argc, char **argv) {
    const char *cmd = "train-search", *dump = NULL, *agg = NULL, *gran = NULL;
    subq_train_search_params cfg = subq_train_search_default_params();
    cli_train o;
    cli_train_init(&o, cmd, &cfg.train, "all");
    o.reserve = "0";
    const cli_flag flags[] = {
        CLI_STRING(NULL, "--reserve", &o.reserve),
        CLI_INT(NULL, "--d-search", &cfg.d_search, 1, SUBQ_SEARCH_MAX_D),
        CLI_INT(NULL, "--rope-dims", &cfg.rope_dims, 0, SUBQ_SEARCH_MAX_D),
        CLI_FLOAT(NULL, "--rope-base", &cfg.rope_base),
        CLI_FLOAT(NULL, "--rope-scale", &cfg.rope_scale),
        CLI_STRING(NULL, "--init", &cfg.init_from),
        CLI_INT(NULL, "--k-pos", &cfg.loss.k_pos, 1, 1 << 20),
        CLI_FLOAT(NULL, "--tau", &cfg.loss.tau),
        CLI_FLOAT(NULL, "--tau-kl", &cfg.loss.tau_kl),
        CLI_FLOAT(NULL, "--alpha", &cfg.loss.alpha),
        CLI_FLOAT(NULL, "--beta", &cfg.loss.beta),
        CLI_STRING(NULL, "--head-agg", &agg),
        CLI_STRING(NULL, "--granularity", &gran),
        CLI_INT(NULL, "--sink", &cfg.loss.n_sink, 0, 1 << 20),
        CLI_INT(NULL, "--tail", &cfg.loss.n_tail, 0, 1 << 20),
        CLI_FLOAT(NULL, "--init-std", &cfg.init_std),
        CLI_INT_LIST(NULL, "--eval-k", cfg.eval_k, &cfg.n_eval_k, 1, SUBQ_SEARCH_EVAL_MAX_K),
        CLI_STRING(NULL, "--dump-teacher", &dump),
    };
    for (int i = 1; i < argc; i++)
        if (cli_is_help(argv[i])) return help(&cfg);
    if (!cli_train_parse(&o, argc, argv, flags, sizeof flags / sizeof flags[0])) return 1;
    if (gran) {
        const int g = subq_search_granularity_parse(gran);
        if (g < 0) return cli_error(cmd, "--granularity expects layer, kv-head or head, got '%s'", gran);
        cfg.granularity = (subq_search_granularity)g;
    }
    if (agg) {
        const int g = subq_teacher_agg_parse(agg);
        if (g < 0) return cli_error(cmd, "--head-agg expects max or mean, got '%s'", agg);
        cfg.loss.agg = (subq_teacher_agg)g;
    }
    if (!cli_train_check(&o, !dump, 1) || (dump && !cli_output_ok(cmd, dump, o.force))) return 1;
    if (!(cfg.loss.tau > 0) || !(cfg.loss.tau_kl > 0)) return cli_error(cmd, "--tau and --tau-kl must be > 0");
    if (!(cfg.init_std >= 0) || !(cfg.loss.alpha >= 0) || !(cfg.loss.beta >= 0))
        return cli_error(cmd, "--init-std, --alpha and --beta must be >= 0");
    if (cfg.rope_dims >= 0 && (cfg.rope_dims % 2 || cfg.rope_dims > cfg.d_search))
        return cli_error(cmd, "--rope-dims %d must be even and at most --d-search (%d)", cfg.rope_dims, cfg.d_search);
    if (!(cfg.rope_base > 1) || !(cfg.rope_scale > 0) || cfg.rope_base > 1e30f || cfg.rope_scale > 1e30f)
        return cli_error(cmd, "--rope-base must be > 1 and --rope-scale > 0 (finite)");
    cfg.train.out_path = o.out ? o.out : dump; /* --dump-teacher writes nothing else */
    int rc = 1;
    if (cli_train_load(&o, 0)) {
        subq_error err = {0};
        if (dump) {
            rc = subq_train_search_dump(o.m, o.data_set, &cfg, dump, &err) ? cli_error(cmd, "%s", err.msg) : 0;
        } else {
            char note[256];
            cli_train_ui ui = {.step_text = step_text, .print_eval = print_eval, .json_eval = json_eval, .arg = &cfg.loss};
            snprintf(note, sizeof note,
                     "keys of query t restricted to [doc start + %d, t - %d] (the runtime's retrieval set: sinks and "
                     "tail left out); the teacher, losses and mass/recall@K are renormalised over them",
                     cfg.loss.n_sink, cfg.loss.n_tail);
            if (cfg.loss.n_sink > 0 || cfg.loss.n_tail > 0) ui.start_note = note;
            const int rope_dims = cfg.rope_dims < 0 ? cfg.d_search / 2 / 2 * 2 : cfg.rope_dims; /* the default: half */
            snprintf(ui.extra_json, sizeof ui.extra_json,
                     "\"d_search\": %d, \"rope_dims\": %d, \"rope_base\": %g, \"rope_scale\": %g, \"n_sink\": %d, "
                     "\"n_tail\": %d, \"granularity\": \"%s\"",
                     cfg.d_search, rope_dims, (double)cfg.rope_base, (double)cfg.rope_scale, cfg.loss.n_sink,
                     cfg.loss.n_tail, subq_search_granularity_name(cfg.granularity));
            rc = cli_train_run(&o, &ui, run, &cfg);
            if (!rc && cfg.init_from && !strcmp(cfg.init_from, "native"))
                fprintf(stderr, "subq train-search: rank with --score dot (untrained, these are the %s raw-QK "
                        "oracle)\n", cfg.granularity == SUBQ_SEARCH_HEAD ? "per-head" : "group-mean");
        }
    }
    cli_train_free(&o);
    return rc;
}
