/* The distillation loop for search projections (train_search.h). */
#include "train/search/train_search.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/rng.h"
#include "base/timer.h"
#include "model/context.h"
#include "train/adamw.h"
#include "train/capture.h"
#include "train/checkpoint.h"

train_search_config train_search_default_config(void) {
    train_search_config c = {
        .d_search = 32,
        .batch = 1,
        .loss = {.tau = 0.07f, .tau_kl = 1.0f, .alpha = 1.0f, .beta = 1.0f, .k_pos = 16, .agg = TEACHER_AGG_MAX,
                 .n_sink = 0, .n_tail = 0},
        .lr = 1e-4f,
        .weight_decay = 0.01f,
        .beta1 = 0.9f,
        .beta2 = 0.999f,
        .eps = 1e-8f,
        .grad_clip = 1.0f,
        .init_std = 0.02f,
        .warmup = 100,
        .seed = 1,
        .eval_every = 200,
        .eval_k = {8, 16, 32, 64},
        .n_eval_k = 4,
        .eval_tokens = 32768,
        .save_every = 200,
    };
    return c;
}

/* Everything one run holds. */
typedef struct trainer {
    subq_model *model;
    const train_corpus *data;
    const train_search_config *cfg;
    subq_context *ctx;
    train_capture *cap;
    train_state st;
    float *grad;
    int32_t *tok, *pos, *seg;
    int *perm;
    uint64_t perm_epoch;
    train_eval_layer *ev;
    int n_threads;
} trainer;

static void trainer_free(trainer *t) {
    subq_context_free(t->ctx);
    train_capture_free(t->cap);
    search_proj_free(t->st.proj);
    free(t->st.m);
    free(t->st.v);
    free(t->grad);
    free(t->tok);
    free(t->pos);
    free(t->seg);
    free(t->perm);
    free(t->ev);
}

static subq_status check_config(const subq_model *m, const train_corpus *data, const train_search_config *c,
                                subq_error *err) {
    if (c->n_layers <= 0) return subq_fail(err, SUBQ_ERR_ARG, "no layers to train (check --layers / --reserve)");
    for (int i = 0; i < c->n_layers; i++)
        if (c->layers[i] < 0 || c->layers[i] >= m->hp.n_layer)
            return subq_fail(err, SUBQ_ERR_ARG, "layer %d is outside 0..%d", c->layers[i], m->hp.n_layer - 1);
    if (c->d_search < 1 || c->d_search > SEARCH_PROJ_MAX_D) return subq_fail(err, SUBQ_ERR_ARG, "bad d_search %d", c->d_search);
    if (c->batch < 1) return subq_fail(err, SUBQ_ERR_ARG, "batch must be >= 1");
    if (c->steps < 1) return subq_fail(err, SUBQ_ERR_ARG, "steps must be >= 1");
    if (c->warmup < 0) return subq_fail(err, SUBQ_ERR_ARG, "warmup must be >= 0");
    if (!(c->lr >= 0) || !(c->loss.tau > 0) || !(c->loss.tau_kl > 0) || c->loss.k_pos < 1)
        return subq_fail(err, SUBQ_ERR_ARG, "lr must be >= 0, temperatures > 0 and k_pos >= 1");
    if (c->loss.n_sink < 0 || c->loss.n_tail < 0) return subq_fail(err, SUBQ_ERR_ARG, "sink and tail must be >= 0");
    if (c->n_eval_k < 0 || c->n_eval_k > SEARCH_EVAL_MAX_K) return subq_fail(err, SUBQ_ERR_ARG, "too many eval K values");
    for (int i = 0; i < c->n_eval_k; i++)
        if (c->eval_k[i] < 1) return subq_fail(err, SUBQ_ERR_ARG, "eval K values must be >= 1");
    if (!c->out_path || !*c->out_path) return subq_fail(err, SUBQ_ERR_ARG, "no output path");
    if (data->train.n_seq < 1) return subq_fail(err, SUBQ_ERR_ARG, "no training sequences");
    return SUBQ_OK;
}

static subq_status trainer_init(trainer *t, subq_model *m, const train_corpus *data, const train_search_config *cfg,
                                subq_error *err) {
    memset(t, 0, sizeof *t);
    t->model = m;
    t->data = data;
    t->cfg = cfg;
    subq_status s = check_config(m, data, cfg, err);
    if (s) return s;
    const int seq = data->p.seq;
    subq_context_params cp = subq_context_default_params();
    cp.n_ctx = seq;
    cp.n_threads = cfg->n_threads;
    cp.kv_type = SUBQ_KV_F32; /* the teacher is rebuilt in fp32 */
    if ((s = subq_context_new(m, &cp, &t->ctx, err))) return s;
    t->n_threads = t->ctx->n_threads;
    if ((s = search_proj_new(m->hp.n_layer, m->hp.n_embd, cfg->d_search, cfg->layers, cfg->n_layers,
                             model_fingerprint(m), &t->st.proj, err)))
        return s;
    const search_proj *p = t->st.proj;
    if ((s = train_capture_new(m, p->layers, p->n_sel, seq, &t->cap, err))) return s;
    t->st.n_params = 2 * (size_t)p->n_sel * p->d_search * p->n_embd;
    t->st.m = calloc(t->st.n_params, sizeof(float));
    t->st.v = calloc(t->st.n_params, sizeof(float));
    t->grad = calloc(t->st.n_params, sizeof(float));
    t->tok = malloc((size_t)seq * sizeof(int32_t));
    t->pos = malloc((size_t)seq * sizeof(int32_t));
    t->seg = malloc((size_t)seq * sizeof(int32_t));
    t->perm = malloc((size_t)data->train.n_seq * sizeof(int));
    t->ev = calloc((size_t)p->n_sel, sizeof(train_eval_layer));
    if (!t->st.m || !t->st.v || !t->grad || !t->tok || !t->pos || !t->seg || !t->perm || !t->ev)
        return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for the trainer");
    t->perm_epoch = UINT64_MAX;
    /* W ~ N(0, init_std^2) from the run's rng */
    t->st.rng = rng_seed(cfg->seed);
    search_proj_init_normal(t->st.proj, cfg->init_std, &t->st.rng);
    return SUBQ_OK;
}

/* Offsets of layer i's matrices in the flat parameter / gradient arrays. */
static float *block(float *base, const search_proj *p, int i, int is_k) {
    return base + (2 * (size_t)i + (size_t)is_k) * p->d_search * p->n_embd;
}

/* One optimiser step over `batch` sequences; fills the stats. */
static subq_status train_step(trainer *t, train_step_stats *ss, subq_error *err) {
    const train_search_config *cfg = t->cfg;
    const search_proj *p = t->st.proj;
    memset(t->grad, 0, t->st.n_params * sizeof(float));
    double nce = 0, kl = 0;
    int64_t n_q = 0, n_tok = 0;
    for (int b = 0; b < cfg->batch; b++) {
        int si = corpus_train_index(t->data, t->st.cursor, cfg->seed, t->perm, &t->perm_epoch);
        t->st.cursor++;
        int n = corpus_get(t->data, &t->data->train, si, t->tok, t->pos, t->seg);
        subq_status s = train_capture_run(t->cap, t->ctx, t->tok, t->pos, t->seg, n, err);
        if (s) return s;
        for (int i = 0; i < p->n_sel; i++) {
            search_layer_data x = train_capture_layer(t->cap, i, t->seg);
            search_loss_sums sums;
            int l = p->layers[i];
            s = search_loss_layer(&x, p->wq[l], p->wk[l], p->d_search, &cfg->loss, 1.0f, block(t->grad, p, i, 0),
                                  block(t->grad, p, i, 1), &sums, 0, t->n_threads, err);
            if (s) return s;
            nce += sums.nce;
            kl += sums.kl;
        }
        n_q += search_count_queries(t->seg, n, cfg->loss.n_sink, cfg->loss.n_tail);
        n_tok += n;
    }
    /* objective = (1/L) sum_layers (alpha sum_t nce + beta sum_t kl) / N */
    const double denom = (double)(n_q > 0 ? n_q : 1) * p->n_sel;
    const float scale = (float)(1.0 / denom);
    double g2 = 0.0;
    for (size_t i = 0; i < t->st.n_params; i++) {
        t->grad[i] *= scale;
        g2 += (double)t->grad[i] * t->grad[i];
    }
    double gnorm = sqrt(g2);
    if (cfg->grad_clip > 0 && gnorm > cfg->grad_clip) {
        float c = (float)(cfg->grad_clip / gnorm);
        for (size_t i = 0; i < t->st.n_params; i++) t->grad[i] *= c;
    }
    float lr = lr_schedule(t->st.step, cfg->steps, cfg->warmup, cfg->lr);
    adamw_params ap = {cfg->beta1, cfg->beta2, cfg->eps, cfg->weight_decay};
    adamw_update(t->st.proj->data, t->grad, t->st.m, t->st.v, t->st.n_params, &ap, lr, t->st.step + 1);
    t->st.step++;
    ss->step = t->st.step;
    ss->steps = cfg->steps;
    ss->lr = lr;
    ss->nce = nce / denom;
    ss->kl = kl / denom;
    ss->loss = cfg->loss.alpha * ss->nce + cfg->loss.beta * ss->kl;
    ss->grad_norm = gnorm;
    ss->tokens = n_tok;
    t->st.train_loss = ss->loss;
    t->st.train_nce = ss->nce;
    t->st.train_kl = ss->kl;
    return SUBQ_OK;
}

/* Losses and retrieval metrics on the held-out split (up to eval_tokens). */
static subq_status evaluate(trainer *t, train_eval_stats *es, subq_error *err) {
    const train_search_config *cfg = t->cfg;
    const search_proj *p = t->st.proj;
    const corpus_split *sp = &t->data->eval;
    double t0 = time_now_s();
    for (int i = 0; i < p->n_sel; i++) {
        memset(&t->ev[i], 0, sizeof t->ev[i]);
        t->ev[i].layer = p->layers[i];
        search_eval_init(&t->ev[i].acc, cfg->eval_k, cfg->n_eval_k);
    }
    int64_t n_tok = 0;
    int n_seq = 0;
    for (int si = 0; si < sp->n_seq; si++) {
        if (cfg->eval_tokens > 0 && n_tok >= cfg->eval_tokens) break;
        int n = corpus_get(t->data, sp, si, t->tok, t->pos, t->seg);
        subq_status s = train_capture_run(t->cap, t->ctx, t->tok, t->pos, t->seg, n, err);
        if (s) return s;
        for (int i = 0; i < p->n_sel; i++) {
            search_layer_data x = train_capture_layer(t->cap, i, t->seg);
            int l = p->layers[i];
            search_loss_sums sums;
            if ((s = search_loss_layer(&x, p->wq[l], p->wk[l], p->d_search, &cfg->loss, 1.0f, NULL, NULL, &sums, 0,
                                       t->n_threads, err)) ||
                (s = search_eval_layer(&x, p->wq[l], p->wk[l], p->d_search, cfg->loss.agg, cfg->loss.n_sink,
                                       cfg->loss.n_tail, &t->ev[i].acc, t->n_threads, err)))
                return s;
            t->ev[i].nce += sums.nce;
            t->ev[i].kl += sums.kl;
            t->ev[i].n_queries += sums.n_queries;
        }
        n_tok += n;
        n_seq++;
    }
    es->step = t->st.step;
    es->n_layers = p->n_sel;
    es->layers = t->ev;
    es->n_seq = n_seq;
    es->n_tokens = n_tok;
    es->nce = es->kl = 0;
    for (int i = 0; i < p->n_sel; i++) {
        double nq = t->ev[i].n_queries > 0 ? (double)t->ev[i].n_queries : 1.0;
        t->ev[i].nce /= nq;
        t->ev[i].kl /= nq;
        es->nce += t->ev[i].nce / p->n_sel;
        es->kl += t->ev[i].kl / p->n_sel;
    }
    es->loss = cfg->loss.alpha * es->nce + cfg->loss.beta * es->kl;
    es->seconds = time_now_s() - t0;
    t->st.have_eval = 1;
    t->st.eval_loss = es->loss;
    t->st.eval_nce = es->nce;
    t->st.eval_kl = es->kl;
    return SUBQ_OK;
}

static subq_status eval_and_report(trainer *t, const train_search_hooks *hooks, subq_error *err) {
    if (t->data->eval.n_seq == 0) return SUBQ_OK;
    train_eval_stats es;
    subq_status s = evaluate(t, &es, err);
    if (!s && hooks && hooks->on_eval) hooks->on_eval(hooks->user, &es);
    return s;
}

static subq_status save(trainer *t, const train_search_hooks *hooks, subq_error *err) {
    subq_status s = train_save(&t->st, t->cfg, t->data, 1, err);
    if (!s && hooks && hooks->on_save) {
        char path[4096];
        snprintf(path, sizeof path, "%s.ckpt", t->cfg->out_path);
        hooks->on_save(hooks->user, t->st.step, path);
    }
    return s;
}

subq_status train_search_run(subq_model *m, const train_corpus *data, const train_search_config *cfg,
                             const train_search_hooks *hooks, train_search_result *res, subq_error *err) {
    memset(res, 0, sizeof *res);
    trainer t;
    subq_status s = trainer_init(&t, m, data, cfg, err);
    if (s) goto done;
    int resumed = 0;
    if (cfg->resume) {
        char path[4096];
        snprintf(path, sizeof path, "%s.ckpt", cfg->out_path);
        if (access(path, F_OK) != 0) {
            s = subq_fail(err, SUBQ_ERR_IO, "cannot resume: %s does not exist", path);
            goto done;
        }
        if ((s = train_load_checkpoint(path, m, cfg, data, &t.st, err))) goto done;
        resumed = 1;
    }
    if (hooks && hooks->on_start) {
        train_start_info info = {.start_step = t.st.step, .resumed = resumed, .n_train_seq = data->train.n_seq,
                                 .n_eval_seq = data->eval.n_seq, .train_tokens = data->train.n_tokens,
                                 .eval_tokens = data->eval.n_tokens, .n_threads = t.n_threads};
        hooks->on_start(hooks->user, &info);
    }
    if (!resumed && cfg->eval_every > 0 && (s = eval_and_report(&t, hooks, err))) goto done;

    double train_time = 0.0;
    int64_t evaluated_at = -1;
    while (t.st.step < cfg->steps) {
        if (cfg->stop_after > 0 && t.st.step >= cfg->stop_after) {
            res->stopped_early = 1;
            break;
        }
        if (hooks && hooks->stop && *hooks->stop) {
            res->interrupted = 1;
            break;
        }
        train_step_stats ss;
        double t0 = time_now_s();
        if ((s = train_step(&t, &ss, err))) goto done;
        train_time += time_now_s() - t0;
        res->train_tokens += ss.tokens;
        ss.elapsed_s = train_time;
        ss.tok_per_s = res->train_tokens / (train_time > 0 ? train_time : 1e-9);
        if (hooks && hooks->on_step) hooks->on_step(hooks->user, &ss);
        if (cfg->eval_every > 0 && t.st.step % cfg->eval_every == 0) {
            if ((s = eval_and_report(&t, hooks, err))) goto done;
            evaluated_at = t.st.step;
        }
        if (cfg->save_every > 0 && t.st.step % cfg->save_every == 0 && t.st.step < cfg->steps &&
            (s = save(&t, hooks, err)))
            goto done;
    }
    /* a finished run ends with an evaluation of the final weights */
    if (!res->interrupted && !res->stopped_early && evaluated_at != t.st.step && (s = eval_and_report(&t, hooks, err)))
        goto done;
    s = save(&t, hooks, err);
    res->step = t.st.step;
    res->tok_per_s = res->train_tokens / (train_time > 0 ? train_time : 1e-9);
done:
    trainer_free(&t);
    return s;
}
