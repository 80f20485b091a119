/* The public training entry points: the internal parameter structs are the
 * public ones (include/subq_lab.h), so these only forward. */
#include "base/layers.h"
#include "eval/complete_diag.h"
#include "train/complete/phi_train.h"
#include "data/corpus.h"
#include "data/corpus_file.h"
#include "train/search/teacher.h"
#include "train/search/train_search.h"

subq_status subq_corpus_load(const subq_model *m, const subq_corpus_params *p, const char *const *paths, int n_paths,
                             const char *const *eval_paths, int n_eval, subq_corpus **out, subq_error *err) {
    return corpus_load(m, p, paths, n_paths, eval_paths, n_eval, out, err);
}

void subq_corpus_free(subq_corpus *c) { corpus_free(c); }

subq_status subq_corpus_save(const subq_corpus *c, const char *path, subq_error *err) {
    return corpus_file_save(c, path, err);
}

void subq_corpus_get_info(const subq_corpus *c, subq_corpus_info *out) {
    *out = (subq_corpus_info){.n_docs = c->n_docs, .n_eval_docs = c->n_eval_docs, .n_tokens = (int64_t)c->n_tok,
                              .train_tokens = c->train.n_tokens, .eval_tokens = c->eval.n_tokens,
                              .from_file = c->file != NULL, .file_tokens_read = corpus_file_tokens_read(c),
                              .fingerprint = c->fingerprint};
}

const char *subq_teacher_agg_name(subq_teacher_agg a) { return teacher_agg_name(a); }
int subq_teacher_agg_parse(const char *s) { return teacher_agg_parse(s); }

subq_train_search_params subq_train_search_default_params(void) { return train_search_default_config(); }
subq_train_phi_params subq_train_phi_default_params(void) { return phi_train_default_config(); }

subq_status subq_train_search(subq_model *m, const subq_corpus *data, const subq_train_search_params *p,
                              const subq_train_hooks *hooks, subq_train_result *res, subq_error *err) {
    return train_search_run(m, data, p, hooks, res, err);
}

subq_status subq_train_phi(subq_model *m, const subq_corpus *data, const subq_train_phi_params *p,
                           const subq_train_hooks *hooks, subq_train_result *res, subq_error *err) {
    return phi_train_run(m, data, p, hooks, res, err);
}

subq_status subq_train_search_dump(subq_model *m, const subq_corpus *data, const subq_train_search_params *p,
                                   const char *path, subq_error *err) {
    return train_search_dump_teacher(m, data, p, path, err);
}

subq_status subq_train_phi_dump(subq_model *m, const subq_corpus *data, const subq_train_phi_params *p,
                                const char *path, subq_error *err) {
    return phi_train_dump(m, data, p, path, err);
}

subq_status subq_complete_diagnose(subq_model *m, const subq_corpus *data, const subq_complete_diag_options *o,
                                   const subq_complete_diag_hooks *hooks, subq_complete_diag_report *out,
                                   subq_error *err) {
    return phi_diag_run(m, data, o, hooks, out, err);
}

void subq_complete_diag_report_free(subq_complete_diag_report *r) { phi_diag_report_free(r); }
