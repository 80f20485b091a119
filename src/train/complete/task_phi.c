/* The distillation loop for the completion maps (phi_train.h). */
#include "train/complete/phi_train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/rng.h"
#include "base/timer.h"
#include "model/context.h"
#include "quant/types.h"
#include "train/adamw.h"
#include "train/capture.h"

phi_train_config phi_train_default_config(void) {
    phi_train_config c = {
        .d_emb = 32,
        .d_hidden = 64,
        .d_phi = 32,
        .loss = phi_loss_default_params(),
        .batch = 1,
        .lr = 1e-3f,
        .weight_decay = 0.0f,
        .beta1 = 0.9f,
        .beta2 = 0.999f,
        .eps = 1e-8f,
        .grad_clip = 1.0f,
        .wo_std = 0.5f,
        .warmup = 50,
        .seed = 1,
        .eval_every = 100,
        .eval_tokens = 16384,
        .save_every = 100,
    };
    return c;
}

typedef struct trainer {
    subq_model *model;
    const train_corpus *data;
    const phi_train_config *cfg;
    subq_context *ctx;
    train_capture *cap;
    phi_train_state st;
    double *wd, *gd;            /* double mirror of the weights, gradient */
    float *gf;                  /* float gradient for AdamW */
    int32_t *tok, *pos, *seg;
    int *perm;
    uint64_t perm_epoch;
    phi_eval_layer *ev;
    int n_threads;
} trainer;

static void trainer_free(trainer *t) {
    subq_context_free(t->ctx);
    train_capture_free(t->cap);
    phi_maps_free(t->st.maps);
    free(t->st.m);
    free(t->st.v);
    free(t->wd);
    free(t->gd);
    free(t->gf);
    free(t->tok);
    free(t->pos);
    free(t->seg);
    free(t->perm);
    free(t->ev);
}

static subq_status check_config(const subq_model *m, const train_corpus *data, const phi_train_config *c,
                                subq_error *err) {
    if (c->n_layers <= 0) return subq_fail(err, SUBQ_ERR_ARG, "no layers to train (check --layers)");
    for (int i = 0; i < c->n_layers; i++)
        if (c->layers[i] < 0 || c->layers[i] >= m->hp.n_layer)
            return subq_fail(err, SUBQ_ERR_ARG, "layer %d is outside 0..%d", c->layers[i], m->hp.n_layer - 1);
    if (c->batch < 1) return subq_fail(err, SUBQ_ERR_ARG, "batch must be >= 1");
    if (c->steps < 1) return subq_fail(err, SUBQ_ERR_ARG, "steps must be >= 1");
    if (c->warmup < 0) return subq_fail(err, SUBQ_ERR_ARG, "warmup must be >= 0");
    const phi_loss_params *l = &c->loss;
    if (l->n_sink < 0 || l->n_tail < 1)
        return subq_fail(err, SUBQ_ERR_ARG, "n_sink must be >= 0 and n_tail >= 1 (got %d, %d)", l->n_sink, l->n_tail);
    if (!(l->tau > 0) || !(l->band > 0) || !(l->huber > 0) || !(l->l_kl >= 0 && l->l_kl <= 1) || !(l->l_top >= 0) ||
        !(l->l_fp >= 0) || !(l->l_z >= 0))
        return subq_fail(err, SUBQ_ERR_ARG, "loss options: tau, band and huber must be > 0, l_kl in [0, 1], weights >= 0");
    if (!(c->lr >= 0) || !(c->wo_std >= 0)) return subq_fail(err, SUBQ_ERR_ARG, "lr and wo_std must be >= 0");
    if (!c->out_path || !*c->out_path) return subq_fail(err, SUBQ_ERR_ARG, "no output path");
    if (data->train.n_seq < 1) return subq_fail(err, SUBQ_ERR_ARG, "no training sequences");
    return SUBQ_OK;
}

/* Mean over (head, query) of LSE_{j in M_t}(log z(q_t, k_j)) - log |M_t|
 * for the current maps of `layer` (float features, double sums). */
static subq_status student_level(const phi_maps *p, int layer, const float *q, const float *k, const int32_t *seg, int T,
                                 const phi_loss_params *lp, double *out, subq_error *err) {
    const phi_dims *d = &p->dims;
    const int D = d->head_dim, F = d->d_phi, nh = d->n_head, nkv = d->n_head_kv, grp = nh / nkv;
    float *lk = malloc((size_t)T * nkv * F * sizeof(float)), *lq = malloc((size_t)F * sizeof(float));
    double *sh = malloc((size_t)T * sizeof(double));
    if (!lk || !lq || !sh) {
        free(lk);
        free(lq);
        free(sh);
        return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    }
    for (int t = 0; t < T; t++)
        for (int g = 0; g < nkv; g++)
            phi_log_features(p, layer, PHI_K, g, k + ((size_t)t * nkv + g) * D, lk + ((size_t)t * nkv + g) * F);
    double sum = 0.0;
    int64_t cnt = 0;
    int d0 = 0;
    for (int t = 0; t < T; t++) {
        if (t > 0 && seg && seg[t] != seg[t - 1]) d0 = t;
        const int lo = d0 + lp->n_sink, hi = t - lp->n_tail;
        if (hi < lo) continue;
        for (int h = 0; h < nh; h++) {
            phi_log_features(p, layer, PHI_Q, h, q + ((size_t)t * nh + h) * D, lq);
            /* sh_j = LSE_f(lq_f + lk_jf); then LSE_j sh_j - log |M| */
            double mx = -INFINITY, z = 0.0;
            for (int j = lo; j <= hi; j++) {
                const float *kj = lk + ((size_t)j * nkv + h / grp) * F;
                double m2 = -INFINITY, acc = 0.0;
                for (int f = 0; f < F; f++) m2 = lq[f] + kj[f] > m2 ? lq[f] + kj[f] : m2;
                for (int f = 0; f < F; f++) acc += exp((double)lq[f] + kj[f] - m2);
                sh[j - lo] = m2 + log(acc);
                mx = sh[j - lo] > mx ? sh[j - lo] : mx;
            }
            for (int j = 0; j <= hi - lo; j++) z += exp(sh[j] - mx);
            sum += mx + log(z) - log((double)(hi - lo + 1));
            cnt++;
        }
    }
    free(lk);
    free(lq);
    free(sh);
    *out = cnt ? sum / (double)cnt : 0.0;
    return SUBQ_OK;
}

static subq_status trainer_init(trainer *t, subq_model *m, const train_corpus *data, const phi_train_config *cfg,
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
    cp.kv_type = SUBQ_KV_F32;
    if ((s = subq_context_new(m, &cp, &t->ctx, err))) return s;
    t->n_threads = t->ctx->n_threads;
    const model_hparams *hp = &m->hp;
    phi_dims d = {.head_dim = hp->head_dim, .d_emb = cfg->d_emb, .d_hidden = cfg->d_hidden, .d_phi = cfg->d_phi,
                  .n_head = hp->n_head, .n_head_kv = hp->n_head_kv};
    if ((s = phi_maps_new(&d, hp->n_layer, cfg->layers, cfg->n_layers, model_fingerprint(m), &t->st.maps, err)))
        return s;
    phi_maps *p = t->st.maps;
    p->n_sink = cfg->loss.n_sink;
    p->n_tail = cfg->loss.n_tail;
    if ((s = train_capture_new(m, p->layers, p->n_sel, seq, &t->cap, err))) return s;
    t->st.n_params = p->layer_size * (size_t)p->n_sel;
    t->st.m = calloc(t->st.n_params, sizeof(float));
    t->st.v = calloc(t->st.n_params, sizeof(float));
    t->wd = malloc(t->st.n_params * sizeof(double));
    t->gd = malloc(t->st.n_params * sizeof(double));
    t->gf = malloc(t->st.n_params * sizeof(float));
    t->tok = malloc((size_t)seq * sizeof(int32_t));
    t->pos = malloc((size_t)seq * sizeof(int32_t));
    t->seg = malloc((size_t)seq * sizeof(int32_t));
    t->perm = malloc((size_t)data->train.n_seq * sizeof(int));
    t->ev = calloc((size_t)p->n_sel, sizeof(phi_eval_layer));
    if (!t->st.m || !t->st.v || !t->wd || !t->gd || !t->gf || !t->tok || !t->pos || !t->seg || !t->perm || !t->ev)
        return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for the trainer");
    t->perm_epoch = UINT64_MAX;
    t->st.rng = rng_seed(cfg->seed);
    phi_maps_init(p, cfg->wo_std, &t->st.rng);
    /* Output biases at the teacher's level: on the first training sequence
     * (a peek: the data cursor does not move), per layer the mean over
     * (head, query) of LSE_M(s) - log|M| for the teacher and for the initial
     * student; bo += (teacher - student) / 2 in phi_q and phi_k (log z moves
     * by the sum) so log z starts at the teacher's level instead of spending
     * the first hundreds of steps moving it there. */
    int si = corpus_train_index(data, 0, cfg->seed, t->perm, &t->perm_epoch);
    int n = corpus_get(data, &data->train, si, t->tok, t->pos, t->seg);
    if ((s = train_capture_run(t->cap, t->ctx, t->tok, t->pos, t->seg, n, err))) return s;
    for (int i = 0; i < p->n_sel; i++) {
        double st_lvl = 0.0;
        const double te_lvl = phi_teacher_level(&p->dims, t->cap->q[i], t->cap->k[i], t->seg, n, cfg->loss.n_sink,
                                                cfg->loss.n_tail);
        if ((s = student_level(p, p->layers[i], t->cap->q[i], t->cap->k[i], t->seg, n, &cfg->loss, &st_lvl, err)))
            return s;
        float *L = p->data + (size_t)i * p->layer_size;
        for (int w = 0; w < 2; w++)
            for (int h = 0; h < phi_n_maps(&p->dims, w); h++)
                for (int f = 0; f < p->dims.d_phi; f++)
                    L[phi_param_offset(&p->dims, w, PHI_BO, h) + f] += (float)((te_lvl - st_lvl) / 2);
    }
    return SUBQ_OK;
}

/* the double mirror of the current float weights */
static void mirror(trainer *t) {
    for (size_t i = 0; i < t->st.n_params; i++) t->wd[i] = t->st.maps->data[i];
}

/* Loss sums (and gradient when grad != NULL) of every target layer over the
 * sequence just captured; sums[i] per layer. */
static subq_status layers_loss(trainer *t, int n, double *grad, phi_loss_sums *sums, subq_error *err) {
    const phi_maps *p = t->st.maps;
    for (int i = 0; i < p->n_sel; i++) {
        const size_t off = (size_t)i * p->layer_size;
        subq_status s = phi_loss_layer(&p->dims, t->wd + off, t->cap->q[i], t->cap->k[i], t->seg, n, &t->cfg->loss,
                                       grad ? grad + off : NULL, &sums[i], t->n_threads, err);
        if (s) return s;
    }
    return SUBQ_OK;
}

static subq_status train_step(trainer *t, phi_step_stats *ss, subq_error *err) {
    const phi_train_config *cfg = t->cfg;
    const phi_maps *p = t->st.maps;
    mirror(t);
    memset(t->gd, 0, t->st.n_params * sizeof(double));
    phi_loss_sums *sums = calloc((size_t)p->n_sel, sizeof(phi_loss_sums));
    if (!sums) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    int64_t n_tok = 0;
    subq_status s = SUBQ_OK;
    for (int b = 0; b < cfg->batch && !s; b++) {
        int si = corpus_train_index(t->data, t->st.cursor, cfg->seed, t->perm, &t->perm_epoch);
        t->st.cursor++;
        int n = corpus_get(t->data, &t->data->train, si, t->tok, t->pos, t->seg);
        if (!(s = train_capture_run(t->cap, t->ctx, t->tok, t->pos, t->seg, n, err)))
            s = layers_loss(t, n, t->gd, sums, err);
        n_tok += n;
    }
    if (s) {
        free(sums);
        return s;
    }
    /* objective = sum_{layer, head, query} L_t / N */
    phi_loss_sums tot = {0};
    for (int i = 0; i < p->n_sel; i++) {
        tot.loss += sums[i].loss;
        for (int k = 0; k < PHI_N_PARTS; k++) tot.part[k] += sums[i].part[k];
        tot.n_queries += sums[i].n_queries;
    }
    free(sums);
    const double inv = 1.0 / (double)(tot.n_queries > 0 ? tot.n_queries : 1);
    double g2 = 0.0;
    for (size_t i = 0; i < t->st.n_params; i++) {
        t->gd[i] *= inv;
        g2 += t->gd[i] * t->gd[i];
    }
    const double gnorm = sqrt(g2);
    const double clip = cfg->grad_clip > 0 && gnorm > cfg->grad_clip ? cfg->grad_clip / gnorm : 1.0;
    for (size_t i = 0; i < t->st.n_params; i++) t->gf[i] = (float)(t->gd[i] * clip);
    float lr = lr_schedule(t->st.step, cfg->steps, cfg->warmup, cfg->lr);
    adamw_params ap = {cfg->beta1, cfg->beta2, cfg->eps, cfg->weight_decay};
    adamw_update(t->st.maps->data, t->gf, t->st.m, t->st.v, t->st.n_params, &ap, lr, t->st.step + 1);
    t->st.step++;
    ss->step = t->st.step;
    ss->steps = cfg->steps;
    ss->lr = lr;
    ss->loss = tot.loss * inv;
    for (int k = 0; k < PHI_N_PARTS; k++) ss->part[k] = tot.part[k] * inv;
    ss->grad_norm = gnorm;
    ss->tokens = n_tok;
    ss->queries = tot.n_queries;
    t->st.train_loss = ss->loss;
    memcpy(t->st.train_part, ss->part, sizeof ss->part);
    return SUBQ_OK;
}

static subq_status evaluate(trainer *t, phi_eval_stats *es, subq_error *err) {
    const phi_train_config *cfg = t->cfg;
    const phi_maps *p = t->st.maps;
    const corpus_split *sp = &t->data->eval;
    double t0 = time_now_s();
    mirror(t);
    phi_loss_sums *sums = calloc((size_t)p->n_sel, sizeof(phi_loss_sums));
    if (!sums) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    int64_t n_tok = 0;
    int n_seq = 0;
    subq_status s = SUBQ_OK;
    for (int si = 0; si < sp->n_seq && !s; si++) {
        if (cfg->eval_tokens > 0 && n_tok >= cfg->eval_tokens) break;
        int n = corpus_get(t->data, sp, si, t->tok, t->pos, t->seg);
        if (!(s = train_capture_run(t->cap, t->ctx, t->tok, t->pos, t->seg, n, err))) s = layers_loss(t, n, NULL, sums, err);
        n_tok += n;
        n_seq++;
    }
    if (s) {
        free(sums);
        return s;
    }
    memset(es, 0, sizeof *es);
    es->step = t->st.step;
    es->n_layers = p->n_sel;
    es->layers = t->ev;
    es->n_seq = n_seq;
    es->n_tokens = n_tok;
    for (int i = 0; i < p->n_sel; i++) {
        phi_eval_layer *L = &t->ev[i];
        const double nq = sums[i].n_queries > 0 ? (double)sums[i].n_queries : 1.0;
        L->layer = p->layers[i];
        L->n_queries = sums[i].n_queries;
        L->loss = sums[i].loss / nq;
        es->loss += L->loss / p->n_sel;
        for (int k = 0; k < PHI_N_PARTS; k++) {
            L->part[k] = sums[i].part[k] / nq;
            es->part[k] += L->part[k] / p->n_sel;
        }
    }
    free(sums);
    es->seconds = time_now_s() - t0;
    t->st.have_eval = 1;
    t->st.eval_loss = es->loss;
    memcpy(t->st.eval_part, es->part, sizeof es->part);
    return SUBQ_OK;
}

static subq_status eval_and_report(trainer *t, const phi_train_hooks *hooks, subq_error *err) {
    if (t->data->eval.n_seq == 0) return SUBQ_OK;
    phi_eval_stats es;
    subq_status s = evaluate(t, &es, err);
    if (!s && hooks && hooks->on_eval) hooks->on_eval(hooks->user, &es);
    return s;
}

static subq_status save(trainer *t, const phi_train_hooks *hooks, subq_error *err) {
    subq_status s = phi_train_save(&t->st, t->cfg, t->data, 1, err);
    if (!s && hooks && hooks->on_save) {
        char path[4096];
        snprintf(path, sizeof path, "%s.ckpt", t->cfg->out_path);
        hooks->on_save(hooks->user, t->st.step, path);
    }
    return s;
}

subq_status phi_train_run(subq_model *m, const train_corpus *data, const phi_train_config *cfg,
                          const phi_train_hooks *hooks, phi_train_result *res, subq_error *err) {
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
        if ((s = phi_train_load_checkpoint(path, m, cfg, data, &t.st, err))) goto done;
        resumed = 1;
    }
    if (hooks && hooks->on_start) {
        phi_start_info info = {.start_step = t.st.step, .resumed = resumed, .n_train_seq = data->train.n_seq,
                               .n_eval_seq = data->eval.n_seq, .train_tokens = data->train.n_tokens,
                               .eval_tokens = data->eval.n_tokens, .n_threads = t.n_threads,
                               .n_params = t.st.n_params};
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
        phi_step_stats ss;
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
    if (!res->interrupted && !res->stopped_early && evaluated_at != t.st.step && (s = eval_and_report(&t, hooks, err)))
        goto done;
    s = save(&t, hooks, err);
    res->step = t.st.step;
    res->tok_per_s = res->train_tokens / (train_time > 0 ? train_time : 1e-9);
done:
    trainer_free(&t);
    return s;
}

/* ---- testing aid ----------------------------------------------------------- */

/* Hand `data` to the writer as an f32 tensor ne = {n0, n1, n2} (trailing
 * 1s dropped); after an earlier failure s, just free it. */
static subq_status add_f32(gguf_writer *w, subq_status s, const char *name, float *data, uint64_t n0, uint64_t n1,
                           uint64_t n2, subq_error *err) {
    if (s) {
        free(data);
        return s;
    }
    uint64_t ne[3] = {n0, n1, n2};
    uint32_t nd = n2 > 1 ? 3 : n1 > 1 ? 2 : 1;
    return gguf_writer_add_tensor(w, name, GGML_TYPE_F32, nd, ne, data, n0 * n1 * n2 * sizeof(float), 1, err);
}

subq_status phi_train_dump(subq_model *m, const train_corpus *data, const phi_train_config *cfg, const char *path,
                           subq_error *err) {
    trainer t;
    gguf_writer *w = NULL;
    subq_status s = trainer_init(&t, m, data, cfg, err);
    if (s) goto done;
    const phi_maps *p = t.st.maps;
    const phi_dims *d = &p->dims;
    int si = corpus_train_index(data, 0, cfg->seed, t.perm, &t.perm_epoch);
    int n = corpus_get(data, &data->train, si, t.tok, t.pos, t.seg);
    if ((s = train_capture_run(t.cap, t.ctx, t.tok, t.pos, t.seg, n, err))) goto done;
    mirror(&t);
    memset(t.gd, 0, t.st.n_params * sizeof(double));
    phi_loss_sums *sums = calloc((size_t)p->n_sel, sizeof(phi_loss_sums));
    if (!sums) {
        s = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
        goto done;
    }
    s = layers_loss(&t, n, t.gd, sums, err);
    if (!s && !(w = gguf_writer_new())) s = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    if (!s) s = phi_maps_to_writer(p, w, err);
    /* the sequence */
    float *seqf[3];
    for (int k = 0; k < 3 && !s; k++) {
        seqf[k] = malloc((size_t)n * sizeof(float));
        if (!seqf[k]) {
            s = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
            break;
        }
        for (int i = 0; i < n; i++) seqf[k][i] = (float)(k == 0 ? t.tok[i] : k == 1 ? t.pos[i] : t.seg[i]);
        s = add_f32(w, s, k == 0 ? "tokens" : k == 1 ? "pos" : "seg", seqf[k], (uint64_t)n, 1, 1, err);
    }
    const int nh = d->n_head, nkv = d->n_head_kv, D = d->head_dim, F = d->d_phi;
    for (int i = 0; i < p->n_sel && !s; i++) {
        const int l = p->layers[i];
        char name[96];
        float *qc = malloc((size_t)n * nh * D * sizeof(float)), *kc = malloc((size_t)n * nkv * D * sizeof(float));
        float *fq = malloc((size_t)n * nh * F * sizeof(float)), *fk = malloc((size_t)n * nkv * F * sizeof(float));
        float *g = malloc(p->layer_size * sizeof(float));
        double *sv = malloc(7 * sizeof(double));
        if (!qc || !kc || !fq || !fk || !g || !sv) {
            free(qc);
            free(kc);
            free(fq);
            free(fk);
            free(g);
            free(sv);
            s = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
            break;
        }
        memcpy(qc, t.cap->q[i], (size_t)n * nh * D * sizeof(float));
        memcpy(kc, t.cap->k[i], (size_t)n * nkv * D * sizeof(float));
        for (int r = 0; r < n; r++) {
            for (int h = 0; h < nh; h++)
                phi_log_features(p, l, PHI_Q, h, qc + ((size_t)r * nh + h) * D, fq + ((size_t)r * nh + h) * F);
            for (int h = 0; h < nkv; h++)
                phi_log_features(p, l, PHI_K, h, kc + ((size_t)r * nkv + h) * D, fk + ((size_t)r * nkv + h) * F);
        }
        for (size_t e = 0; e < p->layer_size; e++) g[e] = (float)t.gd[(size_t)i * p->layer_size + e];
        snprintf(name, sizeof name, "cap.%d.q", l);
        s = add_f32(w, s, name, qc, (uint64_t)nh * D, (uint64_t)n, 1, err);
        snprintf(name, sizeof name, "cap.%d.k", l);
        s = add_f32(w, s, name, kc, (uint64_t)nkv * D, (uint64_t)n, 1, err);
        snprintf(name, sizeof name, "feat.%d.q", l);
        s = add_f32(w, s, name, fq, (uint64_t)F, (uint64_t)nh, (uint64_t)n, err);
        snprintf(name, sizeof name, "feat.%d.k", l);
        s = add_f32(w, s, name, fk, (uint64_t)F, (uint64_t)nkv, (uint64_t)n, err);
        snprintf(name, sizeof name, "grad.%d", l);
        s = add_f32(w, s, name, g, (uint64_t)p->layer_size, 1, 1, err);
        sv[0] = sums[i].loss;
        for (int k = 0; k < PHI_N_PARTS; k++) sv[1 + k] = sums[i].part[k];
        sv[6] = (double)sums[i].n_queries;
        snprintf(name, sizeof name, "subq.phi.dump.%d.sums", l);
        if (!s && gguf_writer_set_arr(w, name, GGUF_TYPE_FLOAT64, sv, 7)) s = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
        free(sv);
    }
    if (!s) {
        subq_status s2 = gguf_writer_set_u32(w, "subq.phi.dump.seq_len", (uint32_t)n);
        s2 = s2 ? s2 : gguf_writer_set_f32(w, "subq.phi.config.tau", (float)cfg->loss.tau);
        if (s2) s = subq_fail(err, s2, "out of memory");
    }
    if (!s) s = gguf_writer_write(w, path, err);
    free(sums);
done:
    gguf_writer_free(w);
    trainer_free(&t);
    return s;
}
