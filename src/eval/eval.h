/* Evaluation helpers shared by perplexity and subq eval. */
#ifndef SUBQ_EVAL_H
#define SUBQ_EVAL_H

/* -log softmax(logits)[target], computed in double. */
double eval_token_nll(const float *logits, int n_vocab, int target);

#endif
