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
#include "subq_lab.h"

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
    /* methods: each selector (subq_selector_kind) at each K, or at the K each
     * KV-read budget (% of the window, rounded up to whole tokens) leaves
     * after sinks and tail; selection only, and with completion when maps */
    const int *selectors;
    int n_selectors;
    const int *ks;
    int n_k;
    const double *budgets; /* n_budgets > 0 replaces ks and needs maps */
    int n_budgets;
    /* the public plan every method runs: its layers (NULL: the projections'
     * layers, all without projections) and topk_layers, sinks, tail and
     * selector settings; each method sets the selector kind and K, and
     * prompts run token by token (teacher forcing) */
    subq_attn_plan plan;
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

/* Run the evaluation on context c (its KV cache holds at least cfg->ctx
 * tokens; its attention plan is cleared on return). *out is freed with
 * eval_result_free. */
subq_status eval_run(subq_context *c, const eval_config *cfg, subq_eval_progress_fn progress, void *user,
                     subq_eval_result **out, subq_error *err);
void eval_result_free(subq_eval_result *r);

/* "exact@64", "quest@32+phi", "exact@41+phiA" (amortised budget),
 * "exact@21+phi1" (worst-case budget). */
const char *eval_method_name(const subq_eval_method *m, char *buf, size_t cap);

/* Mean per-token NLL difference of methods a and b (-1: full attention)
 * and its 95% block-bootstrap interval. */
subq_status eval_compare(const subq_eval_result *r, int a, int b, int n_resamples, uint64_t seed, double *mean, double *lo,
                         double *hi, subq_error *err);

#endif
