/* The training driver (trainer.h, task.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/rng.h"
#include "base/timer.h"
#include "train/adamw.h"
#include "train/task.h"

subq_train_params train_default_config(void) {
    subq_train_params c = {
        .batch = 1,
        .grad_accum = 1,
        .beta1 = 0.9f,
        .beta2 = 0.999f,
        .eps = 1e-8f,
        .grad_clip = 1.0f,
        .seed = 1,
    };
    return c;
}

static subq_status check_config(const subq_model *m, const subq_corpus *data, const subq_train_params *c,
                                subq_error *err) {
    if (c->n_layers <= 0) return subq_fail(err, SUBQ_ERR_ARG, "no layers to train");
    for (int i = 0; i < c->n_layers; i++)
        if (c->layers[i] < 0 || c->layers[i] >= m->hp.n_layer)
            return subq_fail(err, SUBQ_ERR_ARG, "layer %d is outside 0..%d", c->layers[i], m->hp.n_layer - 1);
    if (c->batch < 1 || c->grad_accum < 1)
        return subq_fail(err, SUBQ_ERR_ARG, "batch and gradient accumulation must be >= 1");
    if (c->steps < 1) return subq_fail(err, SUBQ_ERR_ARG, "steps must be >= 1");
    if (c->warmup < 0) return subq_fail(err, SUBQ_ERR_ARG, "warmup must be >= 0");
    if (!(c->lr >= 0) || !(c->weight_decay >= 0))
        return subq_fail(err, SUBQ_ERR_ARG, "learning rate and weight decay must be >= 0");
    if (!(c->beta1 >= 0 && c->beta1 < 1) || !(c->beta2 >= 0 && c->beta2 < 1) || !(c->eps > 0))
        return subq_fail(err, SUBQ_ERR_ARG, "Adam betas must be in [0, 1) and eps > 0");
    if (!c->out_path || !*c->out_path) return subq_fail(err, SUBQ_ERR_ARG, "no output path");
    if (data->train.n_seq < 1) return subq_fail(err, SUBQ_ERR_ARG, "no training sequences");
    return SUBQ_OK;
}

void trainer_free(trainer *t) {
    if (t->task.ops) t->task.ops->free(t->task.self);
    subq_context_free(t->ctx);
    train_capture_free(t->cap);
    free(t->ckpt_path);
    free(t->tok);
    free(t->pos);
    free(t->seg);
    free(t->perm);
    free(t->m);
    free(t->v);
    free(t->grad);
    free(t->gd);
    free(t->sums);
    free(t->ev);
    free(t->reduce);
    memset(t, 0, sizeof *t);
}

subq_status trainer_init(trainer *t, subq_model *m, const subq_corpus *data, const subq_train_params *cfg,
                         const train_task *task, subq_error *err) {
    memset(t, 0, sizeof *t);
    t->model = m;
    t->data = data;
    t->cfg = cfg;
    t->task = *task;
    t->rank = cfg->comm ? cfg->comm->rank : 0;
    t->n_ranks = cfg->comm ? cfg->comm->size : 1;
    subq_status s = check_config(m, data, cfg, err);
    if (s) return s;
    if (t->n_ranks < 1 || t->rank < 0 || t->rank >= t->n_ranks || (t->n_ranks > 1 && (!cfg->comm->sum || !cfg->comm->bcast)))
        return subq_fail(err, SUBQ_ERR_ARG, "data-parallel rank %d of %d is not a valid rank", t->rank, t->n_ranks);
    const int seq = data->p.seq;
    subq_context_params cp = subq_context_default_params();
    cp.n_ctx = seq;
    cp.n_threads = cfg->n_threads;
    cp.kv_type = SUBQ_KV_F32; /* the teacher is rebuilt in fp32 */
    /* one forward batch by default: a task's layer_loss can stand in for attention */
    cp.n_batch = cfg->n_ubatch > 0 && cfg->n_ubatch < seq ? cfg->n_ubatch : seq;
    if ((s = subq_context_new(m, &cp, &t->ctx, err))) return s;
    t->n_threads = t->ctx->n_threads;
    if ((s = task->ops->create(task->self, t, err))) return s;
    if ((s = train_capture_new(m, t->layers, t->n_sel, seq, &t->cap, err))) return s;
    const size_t L = strlen(cfg->out_path) + 6;
    t->ckpt_path = malloc(L);
    t->tok = malloc((size_t)seq * sizeof(int32_t));
    t->pos = malloc((size_t)seq * sizeof(int32_t));
    t->seg = malloc((size_t)seq * sizeof(int32_t));
    t->perm = malloc((size_t)data->train.n_seq * sizeof(int));
    t->m = calloc(t->n_params, sizeof(float));
    t->v = calloc(t->n_params, sizeof(float));
    t->grad = calloc(t->n_params, sizeof(float));
    t->gd = task->ops->grad_f64 ? calloc(t->n_params, sizeof(double)) : NULL;
    t->sums = calloc((size_t)t->n_sel, sizeof(train_sums));
    t->ev = calloc((size_t)t->n_sel, sizeof(subq_train_eval_layer));
    if (!t->ckpt_path || !t->tok || !t->pos || !t->seg || !t->perm || !t->m || !t->v || !t->grad ||
        (task->ops->grad_f64 && !t->gd) || !t->sums || !t->ev)
        return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for the trainer");
    snprintf(t->ckpt_path, L, "%s.ckpt", cfg->out_path);
    t->perm_epoch = UINT64_MAX;
    t->rng = rng_seed(cfg->seed);
    return task->ops->init(task->self, t, err);
}

/* train_capture_run's seam: the task's loss of one layer */
typedef struct layer_seam {
    trainer *t;
    int train;
} layer_seam;

static subq_status seam_layer_loss(void *user, int i, float *attn_out, subq_error *err) {
    const layer_seam *ls = user;
    trainer *t = ls->t;
    return t->task.ops->layer_loss(t->task.self, t, i, ls->train, t->sums, attn_out, err);
}

subq_status trainer_capture(trainer *t, const corpus_split *sp, int i, int train, subq_error *err) {
    subq_status s = corpus_get(t->data, sp, i, t->tok, t->pos, t->seg, &t->n, err);
    if (s) return s;
    layer_seam ls = {t, train};
    const int seam = t->task.ops->layer_loss != NULL;
    return train_capture_run(t->cap, t->ctx, t->tok, t->pos, t->seg, t->n, seam ? seam_layer_loss : NULL, &ls, err);
}

subq_status trainer_capture_train(trainer *t, uint64_t cursor, subq_error *err) {
    int si = corpus_train_index(t->data, cursor, t->cfg->seed, t->perm, &t->perm_epoch);
    return trainer_capture(t, &t->data->train, si, 1, err);
}

/* grad = (gradient sums) * scale, its global norm clipped to grad_clip;
 * returns the norm before clipping. Double sums are scaled and clipped in
 * double and rounded once. */
static double finish_gradient(trainer *t, double scale) {
    const size_t n = t->n_params;
    const float clip = t->cfg->grad_clip;
    double g2 = 0.0;
    if (t->gd) {
        for (size_t i = 0; i < n; i++) {
            t->gd[i] *= scale;
            g2 += t->gd[i] * t->gd[i];
        }
        const double gnorm = sqrt(g2), c = clip > 0 && gnorm > clip ? clip / gnorm : 1.0;
        for (size_t i = 0; i < n; i++) t->grad[i] = (float)(t->gd[i] * c);
        return gnorm;
    }
    const float fs = (float)scale;
    for (size_t i = 0; i < n; i++) {
        t->grad[i] *= fs;
        g2 += (double)t->grad[i] * t->grad[i];
    }
    const double gnorm = sqrt(g2);
    if (clip > 0 && gnorm > clip) {
        const float c = (float)(clip / gnorm);
        for (size_t i = 0; i < n; i++) t->grad[i] *= c;
    }
    return gnorm;
}

/* ---- data-parallel ranks (subq_train_comm) ------------------------------ */

/* x[0..n) summed over the ranks (nothing to do alone). */
static subq_status comm_sum(trainer *t, double *x, size_t n, subq_error *err) {
    if (t->n_ranks <= 1 || n == 0) return SUBQ_OK;
    const subq_train_comm *c = t->cfg->comm;
    const double t0 = time_now_s();
    const int failed = c->sum(c->user, x, n);
    t->comm_s += time_now_s() - t0;
    if (failed)
        return subq_fail(err, SUBQ_ERR_IO, "rank %d: the other training processes cannot be reached (one of them "
                         "ended or stopped answering)", t->rank);
    return SUBQ_OK;
}

/* A scratch of n doubles for the sums. */
static double *reduce_buf(trainer *t, size_t n, subq_error *err) {
    double *b = realloc(t->reduce, (n ? n : 1) * sizeof(double));
    if (!b) subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for the sums over ranks");
    else t->reduce = b;
    return b;
}

/* Every rank's options, model and data equal rank 0's: rank 0's
 * description goes to all, each compares it line by line with its own;
 * then the first rank that differs tells every rank how (its line as
 * bytes in a sum the others add zeros to), so the error names it
 * everywhere. */
static subq_status comm_agree(trainer *t, subq_error *err) {
    if (t->n_ranks <= 1) return SUBQ_OK;
    enum { DESC = 16384, LINE = 384 };
    char *mine = calloc(1, DESC), *theirs = calloc(1, DESC);
    double *bad = reduce_buf(t, (size_t)t->n_ranks + LINE, err);
    subq_status s = mine && theirs && bad ? SUBQ_OK : subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    if (!s) {
        train_describe(t, mine, DESC);
        memcpy(theirs, mine, DESC);
        if (t->cfg->comm->bcast(t->cfg->comm->user, theirs, DESC))
            s = subq_fail(err, SUBQ_ERR_IO, "rank %d: the other training processes cannot be reached", t->rank);
    }
    char diff[LINE] = "";
    for (const char *a = mine, *b = theirs; !s && !diff[0] && *a;) { /* the first line that differs */
        const char *ea = strchr(a, '\n'), *eb = strchr(b, '\n');
        if (!ea || !eb || ea - a != eb - b || memcmp(a, b, (size_t)(ea - a)))
            snprintf(diff, sizeof diff, "rank %d's %.*s, rank 0's %.*s", t->rank, (int)(ea ? ea - a : 0), a,
                     (int)(eb ? eb - b : 0), b);
        a = ea ? ea + 1 : a + strlen(a), b = eb ? eb + 1 : b + strlen(b);
    }
    int first = -1; /* the first rank that differs */
    if (!s) {
        for (int r = 0; r < t->n_ranks; r++) bad[r] = r == t->rank && diff[0];
        s = comm_sum(t, bad, (size_t)t->n_ranks, err);
        for (int r = 0; !s && r < t->n_ranks && first < 0; r++)
            if (bad[r] > 0) first = r;
    }
    if (!s && first >= 0) {
        double *line = bad + t->n_ranks;
        for (int i = 0; i < LINE; i++) line[i] = t->rank == first ? (double)(unsigned char)diff[i] : 0.0;
        s = comm_sum(t, line, LINE, err);
        for (int i = 0; !s && i < LINE; i++) diff[i] = (char)(int)line[i];
        diff[LINE - 1] = '\0';
        if (!s) s = subq_fail(err, SUBQ_ERR_MISMATCH, "ranks disagree: %s", diff);
    }
    free(mine);
    free(theirs);
    return s;
}

/* Sum over the ranks the step's gradient, loss sums, tokens, counted work
 * and stop requests. */
static subq_status comm_sum_step(trainer *t, int64_t *n_tok, double *flops, int *stop, subq_error *err) {
    if (t->n_ranks <= 1) return SUBQ_OK;
    const int per = SUBQ_TRAIN_MAX_PARTS + 3, nl = t->n_sel;
    const size_t n = t->n_params + (size_t)nl * per + 3;
    double *b = reduce_buf(t, n, err);
    if (!b) return SUBQ_ERR_NOMEM;
    for (size_t i = 0; i < t->n_params; i++) b[i] = t->gd ? t->gd[i] : (double)t->grad[i];
    double *x = b + t->n_params;
    for (int l = 0; l < nl; l++, x += per) {
        x[0] = t->sums[l].loss, x[1] = (double)t->sums[l].n_queries, x[2] = t->sums[l].flops;
        memcpy(x + 3, t->sums[l].part, sizeof t->sums[l].part);
    }
    x[0] = (double)*n_tok, x[1] = *flops, x[2] = *stop;
    subq_status s = comm_sum(t, b, n, err);
    if (s) return s;
    for (size_t i = 0; i < t->n_params; i++) {
        if (t->gd) t->gd[i] = b[i];
        else t->grad[i] = (float)b[i];
    }
    x = b + t->n_params;
    for (int l = 0; l < nl; l++, x += per) {
        t->sums[l].loss = x[0], t->sums[l].n_queries = (int64_t)x[1], t->sums[l].flops = x[2];
        memcpy(t->sums[l].part, x + 3, sizeof t->sums[l].part);
    }
    *n_tok = (int64_t)x[0], *flops = x[1], *stop = x[2] > 0;
    return SUBQ_OK;
}

/* Work of the frozen forward over the captured sequence, which stops once
 * the last target layer is captured: per full layer 2 per weight and token
 * through its matrices and, per query head and causal key, a dot and an
 * accumulation of head_dim (4 head_dim); the last layer's q, k, v only. A
 * target layer whose attention the task's layer_loss gave counts the
 * accumulation only: the task counts the dots (its teacher's logits). */
static double forward_flops(const trainer *t) {
    const model_hparams *hp = &t->ctx->model->hp;
    const double d = hp->n_embd, dq = (double)hp->n_head * hp->head_dim, dkv = (double)hp->n_head_kv * hp->head_dim;
    const double qkv = d * (dq + 2 * dkv), layer_params = qkv + dq * d + 3.0 * d * hp->n_ff;
    double causal = 0;
    for (int i = 0, start = 0; i < t->n; i++) {
        if (i > 0 && t->seg[i] != t->seg[i - 1]) start = i;
        causal += i - start + 1;
    }
    int last = 0;
    for (int i = 0; i < t->n_sel; i++) last = t->layers[i] > last ? t->layers[i] : last;
    return last * (2.0 * layer_params * t->n + 4.0 * dq * causal) - t->cap->n_fused * 2.0 * dq * causal +
           2.0 * qkv * t->n;
}

/* One optimiser step over batch x grad_accum sequences (this rank's share
 * of them); fills the stats. *stop: in, this rank was asked to stop; out,
 * some rank was (every rank then stops after the same step). */
static subq_status train_step(trainer *t, subq_train_step_stats *ss, int *stop, subq_error *err) {
    const subq_train_params *cfg = t->cfg;
    const train_task_ops *ops = t->task.ops;
    if (ops->sync) ops->sync(t->task.self, t);
    if (t->gd) memset(t->gd, 0, t->n_params * sizeof(double));
    else memset(t->grad, 0, t->n_params * sizeof(float));
    memset(t->sums, 0, (size_t)t->n_sel * sizeof(train_sums));
    const int64_t n_seq = (int64_t)cfg->batch * cfg->grad_accum;
    int64_t n_tok = 0;
    double flops = 0;
    for (int64_t b = t->rank; b < n_seq; b += t->n_ranks) {
        subq_status s = trainer_capture_train(t, t->cursor + (uint64_t)b, err);
        if (s || (s = ops->loss(t->task.self, t, 1, t->sums, err))) return s;
        n_tok += t->n;
        flops += forward_flops(t);
    }
    t->cursor += (uint64_t)n_seq;
    subq_status rs = comm_sum_step(t, &n_tok, &flops, stop, err);
    if (rs) return rs;
    /* objective = sum over layers and queries of the loss terms / their count */
    train_sums tot = {0};
    for (int i = 0; i < t->n_sel; i++) {
        tot.loss += t->sums[i].loss;
        for (int k = 0; k < ops->n_parts; k++) tot.part[k] += t->sums[i].part[k];
        tot.n_queries += t->sums[i].n_queries;
        flops += t->sums[i].flops;
    }
    const double inv = 1.0 / (double)(tot.n_queries > 0 ? tot.n_queries : 1);
    const double gnorm = finish_gradient(t, inv);
    const float lr = lr_schedule(t->step, cfg->steps, cfg->warmup, cfg->lr);
    const adamw_params ap = {cfg->beta1, cfg->beta2, cfg->eps, cfg->weight_decay};
    adamw_update(t->w, t->grad, t->m, t->v, t->n_params, &ap, lr, t->step + 1);
    t->step++;
    memset(ss, 0, sizeof *ss);
    ss->step = t->step;
    ss->steps = cfg->steps;
    ss->lr = lr;
    ss->loss = tot.loss * inv;
    for (int k = 0; k < ops->n_parts; k++) ss->part[k] = tot.part[k] * inv;
    ss->grad_norm = gnorm;
    ss->tokens = n_tok;
    ss->queries = tot.n_queries;
    ss->gflop_per_s = flops; /* this step's count; the caller makes it a rate */
    t->train_loss = ss->loss;
    memcpy(t->train_part, ss->part, sizeof ss->part);
    return SUBQ_OK;
}

/* Losses (and the task's metrics) on the held-out split, up to eval_tokens. */
static subq_status evaluate(trainer *t, subq_train_eval_stats *es, subq_error *err) {
    const train_task_ops *ops = t->task.ops;
    const corpus_split *sp = &t->data->eval;
    const double t0 = time_now_s();
    memset(es, 0, sizeof *es);
    if (ops->sync) ops->sync(t->task.self, t);
    if (ops->eval_begin) ops->eval_begin(t->task.self, t, es);
    memset(t->sums, 0, (size_t)t->n_sel * sizeof(train_sums));
    /* the sequences within the token budget, then this rank's share of them */
    int n_use = 0;
    for (int64_t tokens = 0; n_use < sp->n_seq && !(t->cfg->eval_tokens > 0 && tokens >= t->cfg->eval_tokens); n_use++)
        for (int p = sp->first[n_use]; p < sp->first[n_use + 1]; p++) tokens += t->data->piece_len[sp->order[p]];
    for (int si = t->rank; si < n_use; si += t->n_ranks) {
        subq_status s = trainer_capture(t, sp, si, 0, err);
        if (s || (s = ops->loss(t->task.self, t, 0, t->sums, err))) return s;
        es->n_tokens += t->n;
        es->n_seq++;
    }
    if (t->n_ranks > 1) { /* losses, counts and the task's metrics summed over the ranks */
        const int per = SUBQ_TRAIN_MAX_PARTS + 2;
        const size_t n_task = ops->eval_sums ? ops->eval_sums(t->task.self, NULL, 0, 1) : 0;
        size_t n = (size_t)t->n_sel * per + 2;
        double *b = reduce_buf(t, n + n_task, err);
        if (!b) return SUBQ_ERR_NOMEM;
        for (int l = 0; l < t->n_sel; l++) {
            b[l * per] = t->sums[l].loss, b[l * per + 1] = (double)t->sums[l].n_queries;
            memcpy(b + l * per + 2, t->sums[l].part, sizeof t->sums[l].part);
        }
        b[n - 2] = (double)es->n_tokens, b[n - 1] = es->n_seq;
        if (ops->eval_sums) n += ops->eval_sums(t->task.self, b + n, n_task, 1);
        subq_status s = comm_sum(t, b, n, err);
        if (s) return s;
        for (int l = 0; l < t->n_sel; l++) {
            t->sums[l].loss = b[l * per], t->sums[l].n_queries = (int64_t)b[l * per + 1];
            memcpy(t->sums[l].part, b + l * per + 2, sizeof t->sums[l].part);
        }
        const size_t base = (size_t)t->n_sel * per + 2;
        es->n_tokens = (int64_t)b[base - 2], es->n_seq = (int)b[base - 1];
        if (ops->eval_sums) ops->eval_sums(t->task.self, b + base, n_task, 0);
    }
    for (int i = 0; i < t->n_sel; i++) {
        subq_train_eval_layer *L = &t->ev[i];
        const double nq = t->sums[i].n_queries > 0 ? (double)t->sums[i].n_queries : 1.0;
        L->layer = t->layers[i];
        L->n_queries = t->sums[i].n_queries;
        L->loss = t->sums[i].loss / nq;
        es->loss += L->loss / t->n_sel;
        for (int k = 0; k < ops->n_parts; k++) {
            L->part[k] = t->sums[i].part[k] / nq;
            es->part[k] += L->part[k] / t->n_sel;
        }
    }
    es->step = t->step;
    es->n_layers = t->n_sel;
    es->layers = t->ev;
    es->seconds = time_now_s() - t0;
    t->have_eval = 1;
    t->eval_loss = es->loss;
    memcpy(t->eval_part, es->part, sizeof es->part);
    return SUBQ_OK;
}

static subq_status eval_and_report(trainer *t, const subq_train_hooks *hooks, subq_error *err) {
    if (t->data->eval.n_seq == 0) return SUBQ_OK;
    subq_train_eval_stats es;
    subq_status s = evaluate(t, &es, err);
    if (!s && hooks && hooks->on_eval) hooks->on_eval(hooks->user, &es);
    return s;
}

/* Only rank 0 writes: every rank holds the same weights. */
static subq_status save(trainer *t, const subq_train_hooks *hooks, subq_error *err) {
    if (t->rank != 0) return SUBQ_OK;
    subq_status s = train_save(t, 1, err);
    if (!s && hooks && hooks->on_save) hooks->on_save(hooks->user, t->step, t->ckpt_path);
    return s;
}

subq_status trainer_run(subq_model *m, const subq_corpus *data, const subq_train_params *cfg, const train_task *task,
                        const subq_train_hooks *hooks, subq_train_result *res, subq_error *err) {
    memset(res, 0, sizeof *res);
    trainer t;
    subq_status s = trainer_init(&t, m, data, cfg, task, err);
    if (s) goto done;
    const volatile sig_atomic_t *stop_req = hooks ? hooks->stop : NULL; /* every rank's own Ctrl-C */
    if (t.rank != 0) hooks = NULL;                                      /* rank 0 reports for all */
    if ((s = comm_agree(&t, err))) goto done;
    if (cfg->resume) {
        if (access(t.ckpt_path, F_OK) != 0) {
            s = subq_fail(err, SUBQ_ERR_IO, "cannot resume: %s does not exist%s", t.ckpt_path,
                          t.n_ranks > 1 ? " (every rank reads it: put it where all of them see it)" : "");
            goto done;
        }
        if ((s = train_load(&t, t.ckpt_path, err))) goto done;
    }
    if (hooks && hooks->on_start) {
        subq_train_start_info info = {.start_step = t.step, .resumed = cfg->resume, .n_train_seq = data->train.n_seq,
                                 .n_eval_seq = data->eval.n_seq, .train_tokens = data->train.n_tokens,
                                 .eval_tokens = data->eval.n_tokens, .n_threads = t.n_threads,
                                 .n_params = t.n_params, .n_parts = task->ops->n_parts,
                                 .part_names = task->ops->part_names};
        if (hooks->on_start(hooks->user, &info)) {
            s = subq_fail(err, SUBQ_ERR_IO, "the run was stopped before its first step");
            goto done;
        }
    }
    if (!cfg->resume && cfg->eval_every > 0 && (s = eval_and_report(&t, hooks, err))) goto done;

    double train_time = 0.0, train_flops = 0.0;
    int64_t evaluated_at = -1;
    while (t.step < cfg->steps) {
        if (cfg->stop_after > 0 && t.step >= cfg->stop_after) {
            res->stopped_early = 1;
            break;
        }
        /* a stop request reaches every rank: they stop after the same step */
        int stop = stop_req && *stop_req;
        if (stop && t.n_ranks == 1) {
            res->interrupted = 1;
            break;
        }
        subq_train_step_stats ss;
        const double t0 = time_now_s();
        if ((s = train_step(&t, &ss, &stop, err))) goto done;
        if (stop) res->interrupted = 1;
        train_time += time_now_s() - t0;
        res->train_tokens += ss.tokens;
        train_flops += ss.gflop_per_s;
        ss.elapsed_s = train_time;
        ss.tok_per_s = res->train_tokens / (train_time > 0 ? train_time : 1e-9);
        ss.gflop_per_s = train_flops / 1e9 / (train_time > 0 ? train_time : 1e-9);
        if (hooks && hooks->on_step) hooks->on_step(hooks->user, &ss);
        if (cfg->eval_every > 0 && t.step % cfg->eval_every == 0) {
            if ((s = eval_and_report(&t, hooks, err))) goto done;
            evaluated_at = t.step;
        }
        if (cfg->save_every > 0 && t.step % cfg->save_every == 0 && t.step < cfg->steps && (s = save(&t, hooks, err)))
            goto done;
        if (res->interrupted) break;
    }
    /* a finished run ends with an evaluation of the final weights */
    if (!res->interrupted && !res->stopped_early && evaluated_at != t.step && (s = eval_and_report(&t, hooks, err)))
        goto done;
    s = save(&t, hooks, err);
    res->step = t.step;
    res->tok_per_s = res->train_tokens / (train_time > 0 ? train_time : 1e-9);
    res->gflop_per_s = train_flops / 1e9 / (train_time > 0 ? train_time : 1e-9);
    res->train_s = train_time;
    res->comm_s = t.comm_s;
done:
    trainer_free(&t);
    return s;
}
