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
#include "data/corpus.h"

typedef struct phi_diag_config {
    int n_sink, n_tail;          /* 4, 16 */
    int ks[SUBQ_PHI_DIAG_MAX_K];      /* hybrid vs selection-only at these K */
    int n_k;
    int sel_ks[SUBQ_PHI_DIAG_MAX_K];  /* selection-only sweep */
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

/* Summaries over the records. Means over the records of `layer` and `head` (< 0: any) with
 * hmid_lo <= H_mid < hmid_hi. */
void phi_diag_mean(const phi_diag_records *r, int layer, int head, double hmid_lo, double hmid_hi, subq_complete_diag_cell *out);
/* Quartile bins of H_mid over all records: bin i is [q[i], q[i+1]) with
 * q[0] = -inf, q[1..3] the quartiles, q[4] = +inf. */
void phi_diag_quartiles(const phi_diag_records *r, double q[5]);

/* ---- the whole measurement (behind `subq train-phi --diagnose`) ---------- */

/* Measure the maps of o->maps_path on the held-out sequences of `corpus`
 * (windows of corpus->p.seq tokens, teacher-forced full attention, oracle
 * top-K); with o->ppl also perplexities; with o->annotate store the
 * per-head entropies in the maps file. hooks may be NULL. */
subq_status phi_diag_run(subq_model *m, const subq_corpus *corpus, const subq_complete_diag_options *o,
                         const subq_complete_diag_hooks *hooks, subq_complete_diag_report *out, subq_error *err);
void phi_diag_report_free(subq_complete_diag_report *r);

#endif
