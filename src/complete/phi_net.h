/* One completion feature map over a batch of rows, in double, with its
 * hand-written backward pass (training; phi_maps.h has the float forward for
 * inference and the definition of the map). Parameters and gradients are a
 * layer block in the phi_maps layout, as doubles.
 *
 * Forward, for rows X [n][head_dim]:
 *   G0  = X Ws^T + bs            [n][d_emb]
 *   A1  = G0 W1^T + b1           [n][d_hidden]
 *   H1  = GELU(A1)
 *   MLP = H1 W2^T + b2           [n][d_emb]
 *   G1  = G0 + alpha MLP
 *   OUT = G1 Wo^T + bo           [n][d_phi]    (log phi)
 * Backward, given dOUT = dL/dOUT:
 *   dWo += dOUT^T G1, dbo += colsum dOUT, dG1 = dOUT Wo
 *   dalpha += sum(dG1 * MLP), dMLP = alpha dG1
 *   dW2 += dMLP^T H1, db2 += colsum dMLP, dA1 = (dMLP W2) * GELU'(A1)
 *   dW1 += dA1^T G0, db1 += colsum dA1, dG0 = dG1 + dA1 W1
 *   dWs += dG0^T X, dbs += colsum dG0 */
#ifndef SUBQ_PHI_NET_H
#define SUBQ_PHI_NET_H

#include <stddef.h>

#include "complete/phi_maps.h"

/* Doubles of the activations kept for the backward pass of n rows
 * (G0, A1, H1, MLP, G1 and the GELU's tanh), and of the backward's scratch. */
size_t phi_acts_doubles(const phi_dims *d, int n);
size_t phi_backward_doubles(const phi_dims *d, int n);

/* OUT [n][d_phi] = log phi(X) of map (which, head) with layer parameters L;
 * acts receives the activations (phi_acts_doubles). */
void phi_map_forward_d(const phi_dims *d, const double *L, int which, int head, const double *X, int n, double *acts,
                       double *out);

/* Adds dL/dparams of map (which, head) into the layer gradient block G
 * (only that map's slices are touched, so different maps may run in
 * parallel); scratch holds phi_backward_doubles(d, n). */
void phi_map_backward_d(const phi_dims *d, const double *L, int which, int head, const double *X, int n,
                        const double *acts, const double *dout, double *G, double *scratch);

#endif
