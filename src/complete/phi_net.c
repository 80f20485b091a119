/* Batched double forward / backward of one feature map (phi_net.h). */
#include "complete/phi_net.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

#define GELU_C 0.7978845608028654 /* sqrt(2/pi) */

/* GELU'(x) = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) c (1 + 3 * 0.044715 x^2), given th = tanh u */
static double gelu_grad_th(double x, double th) {
    return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * GELU_C * (1.0 + 3.0 * 0.044715 * x * x);
}

size_t phi_acts_doubles(const phi_dims *d, int n) {
    return (size_t)n * (3 * (size_t)d->d_emb + 3 * (size_t)d->d_hidden);
}

size_t phi_backward_doubles(const phi_dims *d, int n) { return (size_t)n * (2 * (size_t)d->d_emb + (size_t)d->d_hidden); }

/* Y [n][m] = X [n][k] W^T (W [m][k]) + b, b broadcast over rows */
static void linear(double *Y, const double *X, const double *W, const double *b, int n, int k, int m) {
    for (int t = 0; t < n; t++) memcpy(Y + (size_t)t * m, b, (size_t)m * sizeof(double));
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, m, k, 1.0, X, k, W, k, 1.0, Y, m);
}

/* dW [m][k] += dY^T X, db [m] += colsum dY, dX [n][k] (= or +=) dY W */
static void linear_back(double *dX, int dx_accumulate, double *dW, double *db, const double *dY, const double *X,
                        const double *W, int n, int k, int m) {
    cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, m, k, n, 1.0, dY, m, X, k, 1.0, dW, k);
    for (int t = 0; t < n; t++)
        for (int j = 0; j < m; j++) db[j] += dY[(size_t)t * m + j];
    if (dX) cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, k, m, 1.0, dY, m, W, k, dx_accumulate ? 1.0 : 0.0, dX, k);
}

#define P(t) (L + phi_param_offset(d, which, (t), head))
#define PG(t) (G + phi_param_offset(d, which, (t), head))

void phi_map_forward_d(const phi_dims *d, const double *L, int which, int head, const double *X, int n, double *acts,
                       double *out) {
    const int D = d->head_dim, E = d->d_emb, H = d->d_hidden, F = d->d_phi;
    double *G0 = acts, *A1 = G0 + (size_t)n * E, *H1 = A1 + (size_t)n * H, *MLP = H1 + (size_t)n * H,
           *G1 = MLP + (size_t)n * E, *TH = G1 + (size_t)n * E;
    const double alpha = *P(PHI_ALPHA);
    linear(G0, X, P(PHI_WS), P(PHI_BS), n, D, E);
    linear(A1, G0, P(PHI_W1), P(PHI_B1), n, E, H);
    /* H1 = GELU(A1) = 0.5 A1 (1 + TH), TH = tanh(c (A1 + 0.044715 A1^3)) kept for the backward */
    for (size_t i = 0; i < (size_t)n * H; i++) {
        const double x = A1[i];
        TH[i] = tanh(GELU_C * (x + 0.044715 * x * x * x));
        H1[i] = 0.5 * x * (1.0 + TH[i]);
    }
    linear(MLP, H1, P(PHI_W2), P(PHI_B2), n, H, E);
    for (size_t i = 0; i < (size_t)n * E; i++) G1[i] = G0[i] + alpha * MLP[i];
    linear(out, G1, P(PHI_WO), P(PHI_BO), n, E, F);
}

void phi_map_backward_d(const phi_dims *d, const double *L, int which, int head, const double *X, int n,
                        const double *acts, const double *dout, double *G, double *scratch) {
    const int D = d->head_dim, E = d->d_emb, H = d->d_hidden, F = d->d_phi;
    const double *G0 = acts, *A1 = G0 + (size_t)n * E, *H1 = A1 + (size_t)n * H, *MLP = H1 + (size_t)n * H,
                 *G1 = MLP + (size_t)n * E, *TH = G1 + (size_t)n * E;
    double *dG1 = scratch, *dMLP = dG1 + (size_t)n * E, *dA1 = dMLP + (size_t)n * E;
    const double alpha = *P(PHI_ALPHA);
    /* output layer: dWo, dbo, dG1 = dOUT Wo */
    linear_back(dG1, 0, PG(PHI_WO), PG(PHI_BO), dout, G1, P(PHI_WO), n, E, F);
    /* ReZero gate: dalpha = sum dG1 * MLP, dMLP = alpha dG1 */
    double da = 0.0;
    for (size_t i = 0; i < (size_t)n * E; i++) {
        da += dG1[i] * MLP[i];
        dMLP[i] = alpha * dG1[i];
    }
    *PG(PHI_ALPHA) += da;
    /* block: dW2, db2, dH1 = dMLP W2 (into dA1), then dA1 = dH1 * GELU'(A1) */
    linear_back(dA1, 0, PG(PHI_W2), PG(PHI_B2), dMLP, H1, P(PHI_W2), n, H, E);
    for (size_t i = 0; i < (size_t)n * H; i++) dA1[i] *= gelu_grad_th(A1[i], TH[i]);
    /* dW1, db1, and the residual path: dG0 = dG1 + dA1 W1 (in place in dG1) */
    linear_back(dG1, 1, PG(PHI_W1), PG(PHI_B1), dA1, G0, P(PHI_W1), n, E, H);
    /* stem: dWs, dbs (the input needs no gradient) */
    linear_back(NULL, 0, PG(PHI_WS), PG(PHI_BS), dG1, X, P(PHI_WS), n, D, E);
}
