/* The public evaluation entry points: plain parameters with public handles
 * translated to the evaluation's internal configuration. */
#include <stdlib.h>

#include "api/api.h"
#include "base/error.h"
#include "eval/eval_run.h"
#include "model/context.h"

subq_eval_params subq_eval_default_params(void) {
    eval_config c;
    eval_config_default(&c);
    subq_eval_params p = {
        .ctx = c.ctx, .pack = c.pack, .max_windows = c.max_windows, .eval_frac = c.eval_frac,
        .plan = subq_attn_plan_default(), .static_split = c.static_split, .n_resamples = c.n_resamples,
        .seed = c.seed,
    };
    return p;
}

subq_status subq_eval_run(subq_context *c, const subq_eval_params *p, subq_eval_progress_fn progress, void *user,
                          subq_eval_result **out, subq_error *err) {
    *out = NULL;
    attn_plan ip;
    subq_status s = api_plan_to_internal(&p->plan, &ip, err);
    if (s) return s;
    if (p->n_selectors < 0 || p->n_selectors > SUBQ_SELECT_COUNT * 4)
        return subq_fail(err, SUBQ_ERR_ARG, "%d selectors to evaluate", p->n_selectors);
    int kinds[SUBQ_SELECT_COUNT * 4];
    for (int i = 0; i < p->n_selectors; i++) kinds[i] = (int)p->selectors[i];
    unsigned char *flags = NULL;
    if (p->complete) {
        const model_hparams *hp = &c->model->hp;
        s = api_complete_head_flags(p->complete->maps, hp->n_layer, hp->n_head, p->plan.complete_min_entropy, &flags,
                                    err);
        if (s) return s;
    } else if (p->plan.complete_min_entropy >= 0) {
        return subq_fail(err, SUBQ_ERR_ARG, "a completion entropy threshold needs completion maps");
    }
    eval_config cfg = {
        .files = p->files, .n_files = p->n_files, .eval_files = p->eval_files, .n_eval_files = p->n_eval_files,
        .ctx = p->ctx, .pack = p->pack, .max_windows = p->max_windows, .eval_frac = p->eval_frac,
        .selectors = kinds, .n_selectors = p->n_selectors, .ks = p->ks, .n_k = p->n_k,
        .budgets = p->budgets, .n_budgets = p->n_budgets,
        .plan = ip.plan,
        .proj = p->search ? p->search->proj : NULL, .maps = p->complete ? p->complete->maps : NULL,
        .complete_heads = flags,
        .static_split = p->static_split, .per_layer = p->per_layer, .n_resamples = p->n_resamples, .seed = p->seed,
    };
    s = eval_run(c, &cfg, progress, user, out, err);
    free(flags);
    return s;
}

void subq_eval_result_free(subq_eval_result *r) { eval_result_free(r); }

const char *subq_eval_method_name(const subq_eval_method *m, char *buf, size_t cap) {
    return eval_method_name(m, buf, cap);
}

subq_status subq_eval_compare(const subq_eval_result *r, int a, int b, int n_resamples, uint64_t seed, double *mean,
                              double *lo, double *hi, subq_error *err) {
    return eval_compare(r, a, b, n_resamples, seed, mean, lo, hi, err);
}
