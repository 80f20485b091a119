/* The recall experiment: lengths x depths x trials x methods on the same
 * prompts (subq recall's grid). In lab/ because each method sets a public
 * attention plan with its projections and maps. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "subq_lab.h"

subq_status subq_recall_method_parse(const char *name, subq_recall_method *out, int *complete, subq_error *err) {
    const char *form = "is not full or SELECTOR@K[+phi][:FAR] (selectors: exact, hnsw, faiss, quest, oracle, "
                       "window; FAR: none, window, order, group)";
    *complete = 0;
    out->far_pos = -1;
    if (strlen(name) >= sizeof out->name) return subq_fail(err, SUBQ_ERR_ARG, "method '%.60s...' is too long", name);
    if (!strcmp(name, "full")) {
        snprintf(out->name, sizeof out->name, "full");
        out->full = 1;
        return SUBQ_OK;
    }
    char sel[48];
    const char *at = strchr(name, '@');
    if (!at || at == name || (size_t)(at - name) >= sizeof sel) return subq_fail(err, SUBQ_ERR_ARG, "'%s' %s", name, form);
    memcpy(sel, name, (size_t)(at - name));
    sel[at - name] = '\0';
    char *end;
    long k = strtol(at + 1, &end, 10);
    int plus_phi = !strncmp(end, "+phi", 4);
    const char *far = plus_phi ? end + 4 : end; /* ":SCHEME" or nothing */
    int kind = subq_selector_parse(sel);
    if (*far == ':' && (out->far_pos = subq_far_parse(far + 1)) < 0)
        return subq_fail(err, SUBQ_ERR_ARG, "'%s': unknown far-key scheme '%s' (none, window, order, group)", name,
                         far + 1);
    if (kind < 0 || end == at + 1 || k < 0 || k > (1 << 20) || (*far && *far != ':'))
        return subq_fail(err, SUBQ_ERR_ARG, "'%s' %s", name, form);
    if (!subq_selector_available((subq_selector_kind)kind))
        return subq_fail(err, SUBQ_ERR_UNSUPPORTED, "selector '%s' is not in this build (see subq info --features)", sel);
    snprintf(out->name, sizeof out->name, "%s", name);
    out->full = 0;
    out->plan.selector = (subq_selector_kind)kind;
    out->plan.top_k = (int)k;
    *complete = plus_phi;
    return SUBQ_OK;
}

/* Put method me's plan on c (empty first). */
static subq_status set_method(subq_context *c, const subq_recall_method *me, int sparse_prefill, subq_error *err) {
    subq_context_clear_plan(c);
    subq_context_reset(c);
    if (me->full) return SUBQ_OK;
    subq_attn_plan plan = me->plan;
    plan.sparse_prefill = sparse_prefill;
    return subq_context_set_plan(c, &plan, me->search, me->complete, err);
}

/* The context of the shared dense prefill: c's sizes, and the plan of the
 * first method with projections (without completion), so that its cache
 * carries the search keys every such method copies. */
static subq_status new_prefill_context(subq_context *c, const subq_recall_grid_params *p, subq_context **out,
                                       subq_error *err) {
    subq_context_params cp = subq_context_default_params();
    cp.n_ctx = subq_context_n_ctx(c);
    cp.n_threads = subq_context_n_threads(c);
    cp.n_batch = subq_context_n_batch(c);
    cp.kv_type = subq_context_kv_type(c);
    cp.kv_file = p->prefill_kv_file;
    if (cp.kv_file && access(cp.kv_file, F_OK) == 0) /* never a file someone keeps: it is removed at the end */
        return subq_fail(err, SUBQ_ERR_ARG, "%s exists; the recall grid's dense prefill makes its own KV file there",
                         cp.kv_file);
    subq_status s = subq_context_new((subq_model *)subq_context_model(c), &cp, out, err);
    for (int i = 0; i < p->n_methods && !s; i++) {
        const subq_recall_method *me = &p->methods[i];
        if (me->full || !subq_selector_needs_search(me->plan.selector)) continue;
        subq_recall_method donor = *me;
        donor.complete = NULL;
        donor.plan.complete_min_entropy = -1;
        s = set_method(*out, &donor, 0, err);
        break;
    }
    return s;
}

subq_status subq_recall_run_grid(subq_context *c, const subq_recall *r, const subq_recall_grid_params *p,
                                 subq_recall_grid *out, subq_error *err) {
    memset(out, 0, sizeof *out);
    if (p->n_methods <= 0 || p->n_lengths <= 0 || p->n_depths <= 0 || p->trials <= 0 || p->max_new <= 0)
        return subq_fail(err, SUBQ_ERR_ARG, "an empty recall grid (%d methods, %d lengths, %d depths, %d trials)",
                         p->n_methods, p->n_lengths, p->n_depths, p->trials);
    const int n_cells = p->n_lengths * p->n_depths;
    out->n_methods = p->n_methods;
    out->n_cells = n_cells;
    out->full_method = -1;
    for (int i = 0; i < p->n_methods && out->full_method < 0; i++)
        if (p->methods[i].full) out->full_method = i;
    const size_t n = (size_t)p->n_methods * n_cells;
    out->score = calloc(n, sizeof *out->score);
    out->exact = calloc(n, sizeof *out->exact);
    out->agree = out->full_method >= 0 ? calloc(n, sizeof *out->agree) : NULL;
    if (!out->score || !out->exact || (out->full_method >= 0 && !out->agree)) {
        subq_recall_grid_free(out);
        return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    }
    /* full attention answers first, so the others can be compared with it */
    int *order = malloc((size_t)p->n_methods * sizeof *order), n_order = 0;
    if (!order) {
        subq_recall_grid_free(out);
        return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    }
    if (out->full_method >= 0) order[n_order++] = out->full_method;
    for (int i = 0; i < p->n_methods; i++)
        if (i != out->full_method) order[n_order++] = i;
    subq_context *pre = NULL; /* the shared dense prefill */
    const int own_file = !p->sparse_prefill && p->prefill_kv_file && access(p->prefill_kv_file, F_OK) != 0;
    subq_status s = p->sparse_prefill ? SUBQ_OK : new_prefill_context(c, p, &pre, err);
    subq_model_info info;
    subq_model_get_info(subq_context_model(c), &info);
    float *logits = malloc((size_t)info.n_vocab * sizeof(float));
    if (!s && !logits) s = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    for (int li = 0; li < p->n_lengths && !s; li++)
        for (int di = 0; di < p->n_depths && !s; di++)
            for (int t = 0; t < p->trials && !s; t++) {
                subq_recall_prompt pr;
                if ((s = subq_recall_make_prompt(r, p->lengths[li], p->depths[di], t, &pr, err))) break;
                if (pre) {
                    subq_context_reset(pre);
                    s = subq_decode(pre, pr.tokens, pr.n_tokens, logits, 0, err);
                }
                char full_answer[1024] = "";
                const int cell = li * p->n_depths + di;
                for (int oi = 0; oi < n_order && !s; oi++) {
                    const int mi = order[oi];
                    const subq_recall_method *me = &p->methods[mi];
                    char answer[1024];
                    double score = 0;
                    s = set_method(c, me, p->sparse_prefill, err);
                    if (!s && pre) s = subq_context_copy(c, pre, err);
                    if (!s)
                        s = pre ? subq_recall_continue(c, &pr, p->max_new, answer, sizeof answer, &score, err)
                                : subq_recall_answer(c, &pr, p->max_new, answer, sizeof answer, &score, err);
                    if (s) {
                        subq_error inner = *err;
                        subq_fail(err, inner.code, "%s: %s", me->name, inner.msg);
                        break;
                    }
                    if (mi == out->full_method) snprintf(full_answer, sizeof full_answer, "%s", answer);
                    const size_t at = (size_t)mi * n_cells + cell;
                    out->score[at] += score;
                    out->exact[at] += score == 1.0;
                    if (out->agree) out->agree[at] += subq_recall_same_answer(answer, full_answer, pr.n_values);
                    if (p->on_answer) p->on_answer(p->user, mi, li, di, t, &pr, answer, score);
                }
                subq_recall_prompt_free(&pr);
            }
    free(logits);
    free(order);
    subq_context_free(pre);
    if (own_file) unlink(p->prefill_kv_file); /* made for this grid */
    if (s) subq_recall_grid_free(out);
    return s;
}

void subq_recall_grid_free(subq_recall_grid *g) {
    free(g->score);
    free(g->exact);
    free(g->agree);
    g->score = NULL, g->exact = NULL, g->agree = NULL;
}
