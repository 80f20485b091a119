#include "cli_sparse.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/layers.h"
#include "cli.h"
#include "model/context.h"

void cli_sparse_init(cli_sparse_opts *o) {
    memset(o, 0, sizeof *o);
    attn_plan_default(&o->plan);
}

/* Switch the selector kind, keeping the parameter flags already given. */
static void set_kind(selector_params *sp, selector_kind kind) {
    selector_params keep = *sp;
    selector_params_default(sp, kind, 0);
    sp->f16_keys = keep.f16_keys;
    sp->score = keep.score;
    sp->scan = keep.scan;
    if (keep.hnsw_m) sp->hnsw_m = keep.hnsw_m;
    if (keep.hnsw_ef_construction) sp->hnsw_ef_construction = keep.hnsw_ef_construction;
    if (keep.hnsw_ef_search) sp->hnsw_ef_search = keep.hnsw_ef_search;
    if (keep.quest_page) sp->quest_page = keep.quest_page;
}

attn_plan cli_plan_with_kind(const cli_sparse_opts *o, selector_kind kind) {
    attn_plan plan = o->plan;
    set_kind(&plan.sparse.select, kind);
    return plan;
}

int cli_parse_sparse_opt(const char *cmd, int argc, char **argv, int *i, cli_sparse_opts *o) {
    const char *a = argv[*i], *v;
    sparse_params *sp = &o->plan.sparse;
    int *target = NULL, lo = 0, hi = 1 << 20;
    if (!strcmp(a, "--search")) {
        if (!(o->search_file = cli_value(cmd, argc, argv, i))) return -1;
    } else if (!strcmp(a, "--random-search")) {
        target = &o->random_search, lo = 1, hi = SEARCH_PROJ_MAX_D;
    } else if (!strcmp(a, "--select")) {
        if (!(o->select = cli_value(cmd, argc, argv, i))) return -1;
        int k = selector_kind_parse(o->select);
        if (k < 0) {
            cli_error(cmd, "unknown selector '%s' (exact, hnsw, faiss, quest, oracle, window)", o->select);
            return -1;
        }
        set_kind(&sp->select, (selector_kind)k); /* flags given before --select still count */
    } else if (!strcmp(a, "--sparse-layers")) {
        if (!(o->plan.sparse_layers = cli_value(cmd, argc, argv, i))) return -1;
    } else if (!strcmp(a, "--topk-layers")) {
        if (!(o->plan.topk_layers = cli_value(cmd, argc, argv, i))) return -1;
    } else if (!strcmp(a, "--topk")) {
        target = &sp->top_k, lo = 0;
    } else if (!strcmp(a, "--sink")) {
        target = &sp->n_sink, lo = 0;
    } else if (!strcmp(a, "--tail")) {
        target = &sp->n_tail, lo = 0;
    } else if (!strcmp(a, "--hnsw-m")) {
        target = &sp->select.hnsw_m, lo = 2, hi = 1024;
    } else if (!strcmp(a, "--hnsw-ef-construction")) {
        target = &sp->select.hnsw_ef_construction, lo = 1;
    } else if (!strcmp(a, "--hnsw-ef-search")) {
        target = &sp->select.hnsw_ef_search, lo = 1;
    } else if (!strcmp(a, "--quest-page")) {
        target = &sp->select.quest_page, lo = 1, hi = 1 << 16;
    } else if (!strcmp(a, "--search-f16")) {
        sp->select.f16_keys = 1;
    } else if (!strcmp(a, "--score") || !strcmp(a, "--scan")) {
        const int score = !strcmp(a, "--score");
        if (!(v = cli_value(cmd, argc, argv, i))) return -1;
        int x = score ? select_score_parse(v) : select_scan_parse(v);
        if (x < 0) {
            cli_error(cmd, score ? "--score expects cosine or dot, got '%s'" : "--scan expects full, int8 or int4, got '%s'", v);
            return -1;
        }
        if (score) sp->select.score = (select_score)x;
        else sp->select.scan = (select_scan)x;
    } else if (!strcmp(a, "--complete")) {
        if (!(o->complete_file = cli_value(cmd, argc, argv, i))) return -1;
    } else if (!strcmp(a, "--complete-heads")) {
        if (!(o->complete_heads = cli_value(cmd, argc, argv, i))) return -1;
    } else if (!strcmp(a, "--sparse-prefill")) {
        o->sparse_prefill = 1;
    } else {
        return 0;
    }
    if (target && (!(v = cli_value(cmd, argc, argv, i)) || !cli_parse_int(cmd, a, v, lo, hi, target))) return -1;
    o->enabled = 1;
    return 1;
}

/* --complete-heads entropy>=X: flags from the per-head mid-region entropy
 * that train-phi --diagnose --annotate stored in the maps file. */
static int head_flags(const char *cmd, cli_sparse_opts *o, const subq_model *m) {
    const char *prefix = "entropy>=";
    char *end = NULL;
    double x = NAN;
    if (!strncmp(o->complete_heads, prefix, strlen(prefix))) x = strtod(o->complete_heads + strlen(prefix), &end);
    if (isnan(x) || end == o->complete_heads + strlen(prefix) || *end) {
        cli_error(cmd, "--complete-heads expects entropy>=X with X in [0, 1], got '%s'", o->complete_heads);
        return 0;
    }
    if (!o->maps->h_mid) {
        cli_error(cmd, "%s holds no per-head entropies; run subq train-phi --diagnose %s --annotate first",
                  o->complete_file, o->complete_file);
        return 0;
    }
    const int n_head = m->hp.n_head;
    o->head_flags = calloc((size_t)m->hp.n_layer * n_head, 1);
    if (!o->head_flags) {
        cli_error(cmd, "out of memory");
        return 0;
    }
    for (int i = 0; i < o->maps->n_sel; i++)
        for (int h = 0; h < n_head; h++)
            o->head_flags[(size_t)o->maps->layers[i] * n_head + h] = o->maps->h_mid[(size_t)i * n_head + h] >= x;
    return 1;
}

int cli_sparse_load(const char *cmd, cli_sparse_opts *o, subq_model *m, search_proj **proj) {
    subq_error err = {0};
    *proj = NULL;
    if (o->search_file && o->random_search) {
        cli_error(cmd, "give either --search FILE or --random-search D, not both");
        return 0;
    }
    if (o->search_file) {
        if (search_proj_load(o->search_file, m, proj, &err)) {
            cli_error(cmd, "%s", err.msg);
            return 0;
        }
    } else if (o->random_search) {
        /* the --sparse-layers, else layers 2 .. L-3 (first and last layers stay dense, as is usual),
         * and those of --topk-layers */
        int n_layer = m->hp.n_layer, n = 0;
        int *layers = malloc((size_t)n_layer * sizeof(int));
        unsigned char *mask = calloc((size_t)n_layer, 1);
        subq_status s = !layers || !mask ? subq_fail(&err, SUBQ_ERR_NOMEM, "out of memory") : SUBQ_OK;
        if (!s && o->plan.sparse_layers) s = layers_parse(o->plan.sparse_layers, n_layer, mask, &err);
        else if (!s)
            for (int l = 2; l <= n_layer - 3; l++) mask[l] = 1;
        if (!s && o->plan.topk_layers) { /* and the layers of --topk-layers */
            int *topk = malloc((size_t)n_layer * sizeof(int));
            s = topk ? attn_topk_layers_parse(o->plan.topk_layers, n_layer, topk, &err)
                     : subq_fail(&err, SUBQ_ERR_NOMEM, "out of memory");
            for (int l = 0; !s && l < n_layer; l++) mask[l] |= topk[l] >= 0;
            free(topk);
        }
        for (int l = 0; !s && l < n_layer; l++)
            if (mask[l]) layers[n++] = l;
        if (!s && n == 0) s = subq_fail(&err, SUBQ_ERR_ARG, "no layers for --random-search; give --sparse-layers");
        if (!s) s = search_proj_random(m, layers, n, o->random_search, 1, proj, &err);
        free(mask);
        free(layers);
        if (s) {
            cli_error(cmd, "%s", err.msg);
            return 0;
        }
    }
    if (o->complete_heads && !o->complete_file) {
        cli_error(cmd, "--complete-heads needs --complete FILE");
        goto fail;
    }
    if (o->complete_file && !o->maps) {
        if (phi_maps_load(o->complete_file, m, &o->maps, &err)) {
            cli_error(cmd, "%s", err.msg);
            goto fail;
        }
        if (o->complete_heads && !head_flags(cmd, o, m)) goto fail;
    }
    o->plan.sparse.complete = o->maps;
    o->plan.sparse.complete_heads = o->head_flags;
    return 1;
fail:
    search_proj_free(*proj);
    *proj = NULL;
    cli_sparse_free(o);
    return 0;
}

int cli_apply_sparse(const char *cmd, cli_sparse_opts *o, subq_model *m, subq_context *c, search_proj **proj) {
    subq_error err = {0};
    *proj = NULL;
    if (!o->enabled) return 1;
    if (!cli_sparse_load(cmd, o, m, proj)) return 0;
    o->plan.sparse.dense_prefill = !o->sparse_prefill;
    if (context_set_plan(c, &o->plan, *proj, &err)) {
        cli_error(cmd, "%s", err.msg);
        search_proj_free(*proj);
        *proj = NULL;
        cli_sparse_free(o);
        return 0;
    }
    return 1;
}

void cli_sparse_free(cli_sparse_opts *o) {
    phi_maps_free(o->maps);
    free(o->head_flags);
    o->maps = NULL;
    o->head_flags = NULL;
    o->plan.sparse.complete = NULL;
    o->plan.sparse.complete_heads = NULL;
}
