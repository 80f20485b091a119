/* Diagnostics of the completion per (layer, query head), measured on the
 * attention outputs of a full-attention (teacher-forced) run: every layer
 * sees the model's own inputs, so the errors are each layer's local error.
 *
 * For each query t with more than min_mid mid-region keys (M_t as in
 * phi_loss.h) and each query head:
 *   H_mid   normalised entropy of the full softmax restricted to M_t:
 *           -sum_{j in M} p_j log p_j / log |M|, p renormalised over M
 *   for K in ks (top-K of M by the oracle selector: head-mean native q.k):
 *     err_sel  |o_sel - o_full|_1 / |o_full|_1, o_sel = exact softmax over
 *              sinks + tail + top-K
 *     err_hyb  the same for the hybrid output (completion of M \ top-K)
 *     share    Z_hat / (Z_E + Z_hat)
 *   for K' in sel_ks: err_sel at K' (to find the K selection-only needs to
 *   match the hybrid's error).
 * Records are kept per (layer, head, query) for quartiles and summaries. */
#ifndef SUBQ_EVAL_COMPLETE_DIAG_H
#define SUBQ_EVAL_COMPLETE_DIAG_H

#include <stdint.h>

#include "complete/phi_maps.h"
#include "model/context.h"
#include "train/corpus.h"

#define PHI_DIAG_MAX_K 16

typedef struct phi_diag_config {
    int n_sink, n_tail;          /* 4, 16 */
    int ks[PHI_DIAG_MAX_K];      /* hybrid vs selection-only at these K */
    int n_k;
    int sel_ks[PHI_DIAG_MAX_K];  /* selection-only sweep */
    int n_sel_k;
    int min_mid;                 /* queries need |M_t| > min_mid (default: max of ks) */
    double eps;                  /* PHI_EPS_DEFAULT */
} phi_diag_config;

typedef struct phi_diag_records {
    int n_k, n_sel_k;
    int64_t n, cap;
    int16_t *layer, *head;       /* [n] model layer, query head */
    int32_t *n_mid;              /* [n] |M_t| */
    float *hmid;                 /* [n] */
    float *err_sel, *err_hyb, *share; /* [n][n_k] */
    float *err_sweep;            /* [n][n_sel_k] */
} phi_diag_records;

void phi_diag_records_free(phi_diag_records *r);

/* Measure one window: ctx has just run the window with full attention
 * (its KV cache holds the window's keys and values, f32 or f16) and
 * q[i] [T][n_head*head_dim] are the captured post-RoPE queries of layer
 * maps->layers[i]; seg [T] segment ids. Appends the records. */
subq_status phi_diag_window(phi_diag_records *r, const subq_context *ctx, const phi_maps *maps, const float *const *q,
                            const int32_t *seg, int T, const phi_diag_config *cfg, subq_error *err);

/* Summaries over the records. */
typedef struct phi_diag_cell {
    int64_t n;
    double hmid, err_sel[PHI_DIAG_MAX_K], err_hyb[PHI_DIAG_MAX_K], share[PHI_DIAG_MAX_K];
    double win[PHI_DIAG_MAX_K];  /* fraction of records where hybrid < selection-only */
    double harm[PHI_DIAG_MAX_K]; /* mean of max(0, err_hyb - err_sel): what completion costs where it hurts */
    double err_sweep[PHI_DIAG_MAX_K];
} phi_diag_cell;

/* Means over the records of `layer` and `head` (< 0: any) with
 * hmid_lo <= H_mid < hmid_hi. */
void phi_diag_mean(const phi_diag_records *r, int layer, int head, double hmid_lo, double hmid_hi, phi_diag_cell *out);
/* Quartile bins of H_mid over all records: bin i is [q[i], q[i+1]) with
 * q[0] = -inf, q[1..3] the quartiles, q[4] = +inf. */
void phi_diag_quartiles(const phi_diag_records *r, double q[5]);

/* ---- the whole measurement (behind `subq train-phi --diagnose`) ---------- */

typedef struct phi_diag_options {
    const char *maps_path;       /* the maps to measure */
    int windows;                 /* at most this many held-out windows (32) */
    int ks[PHI_DIAG_MAX_K];      /* hybrid vs selection-only (8, 16, 32) */
    int n_k;
    int sel_ks[PHI_DIAG_MAX_K];  /* selection-only sweep (8, 16, 24, 32, 48, 64, 96, 128, 192) */
    int n_sel_k;
    int n_sink, n_tail;          /* 4, 16 */
    int ppl;                     /* also perplexities */
    int annotate;                /* store each head's mean H_mid in the maps file */
    int n_threads;               /* <= 0: all cores */
} phi_diag_options;

typedef struct phi_diag_report {
    int d_phi, head_dim, n_head, n_sel;
    int *layers;                 /* [n_sel] */
    int n_windows;
    int64_t n_tokens, n_records;
    int min_mid;
    double fetch_tokens;         /* the cache's one-time fetch in token-equivalent reads (phi_budget_tokens) */
    int fetch_k;                 /* ceil(fetch_tokens) */
    double seconds;
    phi_diag_cell all, quartile[4];
    double quartile_bounds[5];   /* phi_diag_quartiles */
    phi_diag_cell *heads;        /* [n_sel][n_head] */
    /* the smallest swept K' whose mean selection-only error is <= the
     * hybrid's at ks[i]; -1 when none is */
    int match_k[PHI_DIAG_MAX_K];
    /* perplexity (ppl): full, then per K selection-only, hybrid, selection-only
     * at K + fetch_k (the same reads when the fetch is paid every step: the
     * pessimistic matched budget) and the hybrid's mean completion share */
    int64_t n_scored;
    double ppl_full, ppl_sel[PHI_DIAG_MAX_K], ppl_hyb[PHI_DIAG_MAX_K], ppl_match[PHI_DIAG_MAX_K];
    double share[PHI_DIAG_MAX_K];
} phi_diag_report;

typedef struct phi_diag_hooks {
    void *user;
    void (*on_stage)(void *user, const char *name, int64_t total);
    void (*on_progress)(void *user, int64_t done);
} phi_diag_hooks;

/* Measure the maps of o->maps_path on the held-out sequences of `corpus`
 * (windows of corpus->p.seq tokens, teacher-forced full attention, oracle
 * top-K); with o->ppl also perplexities; with o->annotate store the
 * per-head entropies in the maps file. hooks may be NULL. */
subq_status phi_diag_run(subq_model *m, const train_corpus *corpus, const phi_diag_options *o,
                         const phi_diag_hooks *hooks, phi_diag_report *out, subq_error *err);
void phi_diag_report_free(phi_diag_report *r);

#endif
