/* Sparse attention vs full attention on held-out windows: plan the methods
 * (every selector x K or KV-read budget, selection only and with completion),
 * run full attention and every method window by window on the same tokens,
 * and aggregate
 *   - fidelity: perplexity and its gap, the paired NLL difference, the mean
 *     KL(p_full || p_method) of the next-token distributions and the top-1
 *     agreement with full attention, with 95% block-bootstrap intervals over
 *     windows; optionally each sparse layer substituted alone;
 *   - retrieval: mass, recall (today's and the seed's definitions, overall
 *     and per layer), ANN recall vs exact, filler rate, completion share;
 *   - a dynamic vs static index comparison on one method of the run.
 * Only the current window's full-attention logits are kept, whatever the
 * number of methods. Config and result are plain data; the caller prints. */
#ifndef SUBQ_EVAL_RUN_H
#define SUBQ_EVAL_RUN_H

#include <stdint.h>

#include "complete/phi_maps.h"
#include "search/search_proj.h"
#include "select/selector.h"
#include "subq.h"

typedef enum eval_completion {
    EVAL_SELECTION = 0,    /* selection only */
    EVAL_HYBRID,           /* with completion, at the same K */
    EVAL_HYBRID_WORST,     /* with completion, the budget paying the cache fetch every step */
    EVAL_HYBRID_AMORTISED, /* with completion, the fetch amortised over the window */
} eval_completion;

typedef struct eval_config {
    /* held-out text: the held-out split (eval_frac of the pieces) of files,
     * plus every piece of eval_files; windows of ctx tokens, pieces packed
     * block-causally when pack; at most max_windows windows */
    const char *const *files;
    int n_files;
    const char *const *eval_files;
    int n_eval_files;
    int ctx, pack, max_windows;
    float eval_frac;
    /* methods: each selector (selector_kind) at each K, or at the K each
     * KV-read budget (% of the window, rounded up to whole tokens) leaves
     * after sinks and tail; selection only, and with completion when maps */
    const int *selectors;
    int n_selectors;
    const int *ks;
    int n_k;
    const double *budgets; /* n_budgets > 0 replaces ks and needs maps */
    int n_budgets;
    int n_sink, n_tail;
    selector_params select;       /* selector parameters (the kind is set per method) */
    const char *sparse_layers;    /* NULL: the projections' layers, all without projections; same for every method */
    const char *topk_layers;      /* per-layer top-K by exact selection (attn_plan.topk_layers); NULL: none */
    const search_proj *proj;      /* NULL: only selectors without a search space */
    const phi_maps *maps;         /* completion maps; NULL: selection only */
    const unsigned char *complete_heads; /* [n_layer][n_head] completion flags; NULL: every head */
    double static_split;          /* > 0: static index frozen at this fraction of each window */
    int per_layer;                /* also every sparse layer substituted alone */
    int n_resamples;              /* bootstrap resamples */
    uint64_t seed;                /* bootstrap seed */
} eval_config;

/* 512-token windows, packed, eval_frac 0.05, 32 windows, sink 4, tail 16,
 * static split 0.5, 1000 resamples; no text and no methods. */
void eval_config_default(eval_config *c);

typedef struct eval_method {
    int select;                    /* selector_kind */
    int k;
    eval_completion completion;
    double budget_pct;             /* NAN without budgets */
    double reads;                  /* token-equivalent KV reads per step, layer and KV head */
    double ppl, gap;               /* gap = ppl / full ppl - 1 */
    double nll_diff, nll_diff_lo, nll_diff_hi; /* mean NLL(method) - NLL(full) per token, 95% interval */
    double kl, kl_lo, kl_hi;       /* mean KL(p_full || p_method) per token in nats, 95% interval */
    double top1;                   /* share of tokens whose argmax equals full attention's */
    double mass, recall, mass_seed, recall_seed, ann_recall, filler, share; /* NAN where not measured */
    double *layer_mass, *layer_recall, *layer_mass_seed, *layer_recall_seed; /* [n_layer], NAN on dense layers */
    /* [n_layer]: this method on that layer alone, the others full; NAN on
     * dense layers and without per_layer */
    double *layer_kl, *layer_kl_lo, *layer_kl_hi, *layer_top1;
    double *win_nll;               /* [n_windows]: NLL summed over each window's scored tokens */
} eval_method;

typedef struct eval_skip {         /* a budget the fixed reads alone exceed */
    double budget_pct, budget_reads;
    eval_completion completion;
    double fixed_reads;
} eval_skip;

typedef struct eval_static {
    int method;                    /* index of the method run with a frozen index; -1: off */
    double split;
    double ppl_full, ppl_dynamic, ppl_static; /* perplexity of the suffix tokens */
    double kl_dynamic, kl_static;  /* their mean KL vs full attention */
} eval_static;

typedef struct eval_result {
    int n_layer, n_windows, ctx;
    unsigned char *sparse_layers;  /* [n_layer] */
    int64_t n_scored;              /* next tokens scored (same document) */
    int64_t *win_n;                /* [n_windows]: scored tokens per window */
    double full_ppl;
    double *full_win_nll;          /* [n_windows] */
    int n_methods;
    eval_method *methods;
    int n_skipped;
    eval_skip *skipped;
    eval_static stat;
    double seconds;
} eval_result;

/* Called after each forward pass over a window: done of total. */
typedef void (*eval_progress_fn)(void *user, int64_t done, int64_t total);

/* Run the evaluation on context c (its KV cache holds at least cfg->ctx
 * tokens; its attention plan is cleared on return). *out is freed with
 * eval_result_free. */
subq_status eval_run(subq_context *c, const eval_config *cfg, eval_progress_fn progress, void *user,
                     eval_result **out, subq_error *err);
void eval_result_free(eval_result *r);

/* "exact@64", "quest@32+phi", "exact@41+phiA" (amortised budget),
 * "exact@21+phi1" (worst-case budget). */
const char *eval_method_name(const eval_method *m, char *buf, size_t cap);

/* Mean per-token NLL difference of methods a and b (-1: full attention)
 * and its 95% block-bootstrap interval. */
subq_status eval_compare(const eval_result *r, int a, int b, int n_resamples, uint64_t seed, double *mean, double *lo,
                         double *hi, subq_error *err);

#endif
