/* Search projections as a task of the training driver (train_search.h). */
#include "train/search/train_search.h"
#include "train/search/search_heads.h"
#include "search/search_native.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "model/derived.h"
#include "quant/types.h"
#include "train/task.h"

subq_train_search_params train_search_default_config(void) {
    subq_train_search_params c = {
        .train = train_default_config(),
        .d_search = 32,
        .rope_dims = -1, /* half of d_search */
        .rope_base = 10000.0f,
        .rope_scale = 1.0f,
        /* sink / tail: the sparse runtime's defaults (attn_plan_default), so the
         * space is trained on the keys it will be asked to rank */
        .loss = {.tau = 0.07f, .tau_kl = 1.0f, .alpha = 1.0f, .beta = 1.0f, .k_pos = 16, .agg = SUBQ_TEACHER_AGG_MAX,
                 .n_sink = 4, .n_tail = 16},
        .init_std = 0.02f,
        .eval_k = {8, 16, 32, 64},
        .n_eval_k = 4,
    };
    c.train.lr = 1e-4f;
    c.train.weight_decay = 0.01f;
    c.train.warmup = 100;
    c.train.steps = 1000;
    c.train.eval_every = 200;
    c.train.eval_tokens = 32768;
    c.train.save_every = 200;
    return c;
}

typedef struct search_task {
    const subq_train_search_params *cfg;
    search_proj *proj;
    subq_retrieval_eval *acc;       /* [n_sel]: retrieval metrics of the evaluation */
} search_task;

static const char *const part_names[] = {"nce", "kl"};

static int init_native(const subq_train_search_params *c) { return c->init_from && !strcmp(c->init_from, "native"); }

/* --init native rotates as the model does: the --rope-* flags may only say
 * the same (or be left at their defaults). */
static subq_status native_rope(const subq_train_search_params *c, const subq_model *m, search_rope *out,
                               subq_error *err) {
    subq_status s = search_native_rope(m, c->train.layers, c->train.n_layers, c->d_search, out, err);
    if (s) return s;
    const subq_train_search_params d = train_search_default_config();
    if ((c->rope_dims >= 0 && c->rope_dims != out->n_rot) ||
        (c->rope_base != d.rope_base && c->rope_base != (float)out->base) ||
        (c->rope_scale != d.rope_scale && c->rope_scale != (float)out->scale))
        return subq_fail(err, SUBQ_ERR_ARG, "--init native rotates as the model does (--rope-dims %d --rope-base %g "
                         "--rope-scale %g); leave the --rope-* flags out", out->n_rot, out->base, out->scale);
    return SUBQ_OK;
}

static subq_status create(void *self, trainer *t, subq_error *err) {
    search_task *k = self;
    const subq_train_search_params *c = k->cfg;
    const subq_search_loss_params *l = &c->loss;
    if (c->d_search < 1 || c->d_search > SEARCH_PROJ_MAX_D) return subq_fail(err, SUBQ_ERR_ARG, "bad d_search %d", c->d_search);
    if (!(l->tau > 0) || !(l->tau_kl > 0) || l->k_pos < 1)
        return subq_fail(err, SUBQ_ERR_ARG, "temperatures must be > 0 and k_pos >= 1");
    if (!(l->alpha >= 0) || !(l->beta >= 0) || !(c->init_std >= 0))
        return subq_fail(err, SUBQ_ERR_ARG, "loss weights and init_std must be >= 0");
    if (l->n_sink < 0 || l->n_tail < 0) return subq_fail(err, SUBQ_ERR_ARG, "sink and tail must be >= 0");
    if (c->n_eval_k < 0 || c->n_eval_k > SUBQ_SEARCH_EVAL_MAX_K) return subq_fail(err, SUBQ_ERR_ARG, "too many eval K values");
    for (int i = 0; i < c->n_eval_k; i++)
        if (c->eval_k[i] < 1) return subq_fail(err, SUBQ_ERR_ARG, "eval K values must be >= 1");
    /* half the space rotated: measured on the 4K fixture and stories260K
     * (BENCHMARKS.md), as the independent study behind it found */
    const int n_rot = c->rope_dims < 0 ? c->d_search / 2 / 2 * 2 : c->rope_dims;
    search_rope rope = {.n_rot = n_rot, .base = c->rope_base, .scale = c->rope_scale};
    subq_status s = init_native(c) ? native_rope(c, t->model, &rope, err) : SUBQ_OK;
    if (!s) s = search_rope_check(&rope, c->d_search, "search rotation", err);
    if (s) return s;
    const model_hparams *hp = &t->model->hp;
    if ((int)c->granularity < 0 || c->granularity >= SUBQ_SEARCH_GRANULARITY_COUNT)
        return subq_fail(err, SUBQ_ERR_ARG, "unknown search granularity %d", (int)c->granularity);
    int n_qhead, n_khead;
    search_heads_of(c->granularity, hp->n_head, hp->n_head_kv, &n_qhead, &n_khead);
    s = search_proj_new_heads(hp->n_layer, hp->n_embd, c->d_search, c->granularity, n_qhead, n_khead,
                              c->train.layers, c->train.n_layers, model_fingerprint(t->model), &k->proj, err);
    if (s) return s;
    k->proj->rope = rope;
    const search_proj *p = k->proj;
    if (!(k->acc = calloc((size_t)p->n_sel, sizeof *k->acc))) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    t->w = k->proj->data;
    t->n_params = (size_t)p->n_sel * (p->n_qhead + p->n_khead) * p->d_search * p->n_embd;
    t->layers = p->layers;
    t->n_sel = p->n_sel;
    return SUBQ_OK;
}

static subq_status read_weights(void *self, trainer *t, const gguf_file *f, const char *path, subq_error *err);

/* W ~ N(0, init_std^2) from the run's rng (drawn also when starting from a
 * file, so that the data order is the same either way), the model's own
 * W_q / W_k (--init native), or the file's. */
static subq_status init(void *self, trainer *t, subq_error *err) {
    search_task *k = self;
    search_proj_init_normal(k->proj, k->cfg->init_std, &t->rng);
    if (!k->cfg->init_from) return SUBQ_OK;
    if (init_native(k->cfg)) return search_proj_init_native(k->proj, t->model, err);
    gguf_file *f;
    subq_status s = gguf_open(k->cfg->init_from, &f, err);
    if (s) return s;
    s = read_weights(self, t, f, k->cfg->init_from, err);
    gguf_close(f);
    return s;
}

/* Block 2i of the flat arrays is W_Qs of target layer i ([n_qhead * d_search][n_embd]), 2i+1 its W_Ks. */
static size_t block_rows(const search_proj *p, int b) { return (size_t)(b % 2 ? p->n_khead : p->n_qhead) * p->d_search; }
static size_t block_offset(const search_proj *p, int b) {
    return ((size_t)(b / 2) * (block_rows(p, 0) + block_rows(p, 1)) + (b % 2 ? block_rows(p, 0) : 0)) * p->n_embd;
}

/* Target layer i's losses (and gradients) as soon as it is captured, its
 * teacher giving the forward the layer's attention output (attn_out). */
static subq_status layer_loss(void *self, trainer *t, int i, int train, train_sums *sums, float *attn_out,
                              subq_error *err) {
    search_task *k = self;
    const subq_train_search_params *c = k->cfg;
    const search_proj *p = k->proj;
    search_layer_data x = train_capture_layer(t->cap, i, t->pos, t->seg);
    x.attn_out = attn_out;
    const int l = p->layers[i];
    search_loss_sums ls;
    subq_status s = search_loss_heads(&x, p->wq[l], p->wk[l], p->d_search, p->n_qhead, p->n_khead, &p->rope, &c->loss,
                                      train ? t->grad + block_offset(p, 2 * i) : NULL,
                                      train ? t->grad + block_offset(p, 2 * i + 1) : NULL, &ls, t->ctx->pool, err);
    if (s) return s;
    sums[i].loss += c->loss.alpha * ls.nce + c->loss.beta * ls.kl;
    sums[i].part[0] += ls.nce;
    sums[i].part[1] += ls.kl;
    sums[i].n_queries += ls.n_queries;
    sums[i].flops += ls.flops;
    return SUBQ_OK;
}

/* After the capture (the losses are in): an evaluation's retrieval metrics. */
static subq_status loss(void *self, trainer *t, int train, train_sums *sums, subq_error *err) {
    (void)sums;
    search_task *k = self;
    const subq_train_search_params *c = k->cfg;
    const search_proj *p = k->proj;
    for (int i = 0; !train && i < p->n_sel; i++) {
        const search_layer_data x = train_capture_layer(t->cap, i, t->pos, t->seg);
        const int l = p->layers[i];
        subq_status s = search_eval_heads(&x, p->wq[l], p->wk[l], p->d_search, p->n_qhead, p->n_khead, &p->rope,
                                          &c->loss, &k->acc[i], t->ctx->pool, err);
        if (s) return s;
    }
    return SUBQ_OK;
}

static void eval_begin(void *self, trainer *t, subq_train_eval_stats *es) {
    search_task *k = self;
    for (int i = 0; i < k->proj->n_sel; i++) search_eval_init(&k->acc[i], k->cfg->eval_k, k->cfg->n_eval_k);
    es->retrieval = k->acc;
}

/* The retrieval sums of every layer and K, in and out of a flat array. */
static size_t eval_sums(void *self, double *buf, size_t cap, int to_buf) {
    search_task *k = self;
    size_t n = 0;
    for (int i = 0; i < k->proj->n_sel; i++) {
        subq_retrieval_eval *a = &k->acc[i];
        for (int j = 0; j < a->n_k; j++) {
            double *f[] = {&a->mass_learned[j], &a->mass_oracle[j], &a->recall_learned[j], &a->recall_oracle[j],
                           &a->mass_window[j], &a->recall_window[j]};
            for (size_t x = 0; x < sizeof f / sizeof f[0]; x++, n++) {
                if (n >= cap) continue;
                if (to_buf) buf[n] = *f[x];
                else *f[x] = buf[n];
            }
            if (n < cap) {
                if (to_buf) buf[n] = (double)a->n_queries[j];
                else a->n_queries[j] = (int64_t)buf[n];
            }
            n++;
        }
    }
    return n;
}

static int options(const void *self, train_option *o) {
    const search_task *k = self;
    const subq_search_loss_params *l = &k->cfg->loss;
    int n = 0;
    o[n++] = train_opt_u64("k_pos", (uint64_t)l->k_pos);
    o[n++] = train_opt_str("head_agg", teacher_agg_name(l->agg));
    o[n++] = train_opt_f32("tau", l->tau);
    o[n++] = train_opt_f32("tau_kl", l->tau_kl);
    o[n++] = train_opt_f32("alpha", l->alpha);
    o[n++] = train_opt_f32("beta", l->beta);
    o[n++] = train_opt_f32("init_std", k->cfg->init_std);
    /* the retrieval-eligible key set (keys the runtime always attends are left out) */
    o[n++] = train_opt_u64_since("n_sink", (uint64_t)l->n_sink, 0);
    o[n++] = train_opt_u64_since("n_tail", (uint64_t)l->n_tail, 0);
    if (k->cfg->granularity != SUBQ_SEARCH_LAYER) /* files of one shared set say nothing */
        o[n++] = train_opt_str("granularity", search_granularity_name(k->cfg->granularity));
    return n;
}

static int n_blocks(const void *self) { return 2 * ((const search_task *)self)->proj->n_sel; }

static void block(const void *self, int b, train_block *out) {
    const search_proj *p = ((const search_task *)self)->proj;
    snprintf(out->name, sizeof out->name, "blk.%d.indexer.%s", p->layers[b / 2], b % 2 ? "attn_k" : "proj");
    out->offset = block_offset(p, b);
    out->count = block_rows(p, b) * p->n_embd;
    out->n_dims = 2;
    out->ne[0] = (uint64_t)p->n_embd;
    out->ne[1] = (uint64_t)block_rows(p, b);
    out->ne[2] = 1;
}

static subq_status write_weights(const void *self, gguf_writer *w, subq_error *err) {
    return search_proj_to_writer(((const search_task *)self)->proj, w, err);
}

static subq_status read_weights(void *self, trainer *t, const gguf_file *f, const char *path, subq_error *err) {
    const search_proj *q = ((search_task *)self)->proj;
    search_proj *p = NULL;
    subq_status s = search_proj_read(f, path, &p, err);
    if (!s) s = derived_check_model(path, p->model_fingerprint, t->model, "it", err);
    int same_layers = !s && p->n_sel == q->n_sel;
    for (int i = 0; same_layers && i < q->n_sel; i++) same_layers = p->layers[i] == q->layers[i];
    if (!s && (p->d_search != q->d_search || !same_layers || p->n_embd != q->n_embd))
        s = subq_fail(err, SUBQ_ERR_ARG,
                      "%s has d_search %d over %d layers; this run asks for d_search %d over %d layers "
                      "(resume or --init with the same search width and layers)",
                      path, p->d_search, p->n_sel, q->d_search, q->n_sel);
    if (!s && (p->gran != q->gran || p->n_qhead != q->n_qhead || p->n_khead != q->n_khead))
        s = subq_fail(err, SUBQ_ERR_ARG, "%s picks keys per %s; this run asks for %s (resume or --init with the same "
                      "--granularity)", path, search_granularity_name(p->gran), search_granularity_name(q->gran));
    if (!s && !search_rope_same(&p->rope, &q->rope))
        s = subq_fail(err, SUBQ_ERR_ARG,
                      "%s rotates %d dims (base %g, scale %g); this run asks for %d (base %g, scale %g): resume or "
                      "--init with the same --rope-dims, --rope-base and --rope-scale",
                      path, p->rope.n_rot, p->rope.base, p->rope.scale, q->rope.n_rot, q->rope.base, q->rope.scale);
    if (!s) memcpy(t->w, p->data, t->n_params * sizeof(float));
    search_proj_free(p);
    return s;
}

static void task_free(void *self) {
    search_task *k = self;
    search_proj_free(k->proj);
    free(k->acc);
}

static const train_task_ops search_ops = {
    .prefix = "subq.search",
    .n_parts = 2,
    .part_names = part_names,
    .grad_f64 = 0,
    .create = create,
    .init = init,
    .loss = loss,
    .layer_loss = layer_loss,
    .eval_begin = eval_begin,
    .eval_sums = eval_sums,
    .options = options,
    .n_blocks = n_blocks,
    .block = block,
    .write_weights = write_weights,
    .read_weights = read_weights,
    .free = task_free,
};

subq_status train_search_run(subq_model *m, const subq_corpus *data, const subq_train_search_params *cfg,
                             const subq_train_hooks *hooks, subq_train_result *res, subq_error *err) {
    search_task k = {.cfg = cfg};
    const train_task task = {&search_ops, &k};
    return trainer_run(m, data, &cfg->train, &task, hooks, res, err);
}

/* ---- testing aid ----------------------------------------------------------- */

subq_status train_search_dump_teacher(subq_model *m, const subq_corpus *data, const subq_train_search_params *cfg,
                                      const char *path, subq_error *err) {
    search_task st = {.cfg = cfg};
    const train_task task = {&search_ops, &st};
    trainer tr;
    gguf_writer *w = NULL;
    float *dense = NULL;
    subq_status s = trainer_init(&tr, m, data, &cfg->train, &task, err);
    if (!s) s = trainer_capture(&tr, &data->train, 0, 0, err);
    if (s) goto done;
    const search_proj *proj = st.proj;
    if (proj->gran != SUBQ_SEARCH_LAYER) {
        s = subq_fail(err, SUBQ_ERR_UNSUPPORTED, "--dump-teacher writes one shared search head (--granularity layer)");
        goto done;
    }
    const train_capture *cap = tr.cap;
    const int32_t *tok = tr.tok, *pos = tr.pos, *seg = tr.seg;
    const int T = tr.n;
    if (!(w = gguf_writer_new()) || !(dense = calloc((size_t)proj->n_sel * T * T, sizeof(float)))) {
        s = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
        goto done;
    }
    s = gguf_writer_set_str(w, "general.architecture", "subq-teacher-dump");
    s = s ? s : gguf_writer_set_arr(w, "dump.tokens", GGUF_TYPE_INT32, tok, (uint64_t)T);
    s = s ? s : gguf_writer_set_arr(w, "dump.pos", GGUF_TYPE_INT32, pos, (uint64_t)T);
    s = s ? s : gguf_writer_set_arr(w, "dump.seg", GGUF_TYPE_INT32, seg, (uint64_t)T);
    s = s ? s : gguf_writer_set_arr(w, "dump.layers", GGUF_TYPE_INT32, proj->layers, (uint64_t)proj->n_sel);
    s = s ? s : gguf_writer_set_str(w, "dump.head_agg", teacher_agg_name(cfg->loss.agg));
    s = s ? s : gguf_writer_set_f32(w, "dump.tau", cfg->loss.tau);
    s = s ? s : gguf_writer_set_f32(w, "dump.tau_kl", cfg->loss.tau_kl);
    s = s ? s : gguf_writer_set_u32(w, "dump.k_pos", (uint32_t)cfg->loss.k_pos);
    s = s ? s : gguf_writer_set_u32(w, "dump.n_sink", (uint32_t)cfg->loss.n_sink);
    s = s ? s : gguf_writer_set_u32(w, "dump.n_tail", (uint32_t)cfg->loss.n_tail);
    s = s ? s : gguf_writer_set_u32(w, "dump.rope_dims", (uint32_t)proj->rope.n_rot);
    s = s ? s : gguf_writer_set_f32(w, "dump.rope_base", (float)proj->rope.base);
    s = s ? s : gguf_writer_set_f32(w, "dump.rope_scale", (float)proj->rope.scale);
    s = s ? s : gguf_writer_set_arr(w, "dump.eval_k", GGUF_TYPE_INT32, cfg->eval_k, (uint64_t)cfg->n_eval_k);
    if (s) {
        s = subq_fail(err, s, "out of memory");
        goto done;
    }
    for (int i = 0; i < proj->n_sel && !s; i++) {
        int l = proj->layers[i];
        search_layer_data x = train_capture_layer(cap, i, pos, seg);
        /* dense teacher: row t holds p over its retrieval-eligible keys [start + n_sink, t - n_tail]
         * (renormalised over them), zeros elsewhere; a row with no such key is all zeros */
        float *P = dense + (size_t)i * T * T, *scratch = malloc((size_t)T * sizeof(float));
        float *kt = malloc((size_t)T * cap->dk * sizeof(float));
        if (!scratch || !kt) {
            free(scratch);
            free(kt);
            s = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
            break;
        }
        teacher_keys_transpose(x.k, T, &x.shape, kt);
        for (int t = 0; t < T; t++) {
            int s0 = t;
            while (s0 > 0 && seg[s0 - 1] == seg[t]) s0--;
            const int lo = s0 + cfg->loss.n_sink, hi = t - cfg->loss.n_tail;
            if (lo > hi) continue;
            teacher_row_mid(x.q + (size_t)t * cap->dq, kt, T, &x.shape, s0, t, lo, hi, cfg->loss.agg, scratch,
                            P + (size_t)t * T + lo);
        }
        free(scratch);
        free(kt);
        search_loss_sums sums;
        subq_retrieval_eval acc;
        search_eval_init(&acc, cfg->eval_k, cfg->n_eval_k);
        if ((s = search_loss_layer(&x, proj->wq[l], proj->wk[l], proj->d_search, &proj->rope, &cfg->loss, 1.0f, NULL, NULL, &sums,
                                   0, tr.ctx->pool, err)) ||
            (s = search_eval_layer(&x, proj->wq[l], proj->wk[l], proj->d_search, &proj->rope, cfg->loss.agg, cfg->loss.n_sink,
                                   cfg->loss.n_tail, &acc, tr.ctx->pool, err)))
            break;
        char key[128];
        double ml[SUBQ_SEARCH_EVAL_MAX_K], mo[SUBQ_SEARCH_EVAL_MAX_K], rl[SUBQ_SEARCH_EVAL_MAX_K], ro[SUBQ_SEARCH_EVAL_MAX_K];
        double mw[SUBQ_SEARCH_EVAL_MAX_K], rw[SUBQ_SEARCH_EVAL_MAX_K];
        int64_t nq[SUBQ_SEARCH_EVAL_MAX_K];
        for (int k = 0; k < acc.n_k; k++) {
            double d = acc.n_queries[k] > 0 ? (double)acc.n_queries[k] : 1.0;
            ml[k] = acc.mass_learned[k] / d;
            mo[k] = acc.mass_oracle[k] / d;
            rl[k] = acc.recall_learned[k] / d;
            ro[k] = acc.recall_oracle[k] / d;
            mw[k] = acc.mass_window[k] / d;
            rw[k] = acc.recall_window[k] / d;
            nq[k] = acc.n_queries[k];
        }
        struct {
            const char *name;
            const void *v;
            gguf_type type;
        } arrs[] = {{"mass_learned", ml, GGUF_TYPE_FLOAT64}, {"mass_oracle", mo, GGUF_TYPE_FLOAT64},
                    {"recall_learned", rl, GGUF_TYPE_FLOAT64}, {"recall_oracle", ro, GGUF_TYPE_FLOAT64},
                    {"mass_window", mw, GGUF_TYPE_FLOAT64},    {"recall_window", rw, GGUF_TYPE_FLOAT64},
                    {"n_queries_k", nq, GGUF_TYPE_INT64}};
        for (size_t a = 0; a < sizeof arrs / sizeof arrs[0] && !s; a++) {
            snprintf(key, sizeof key, "dump.l%d.%s", l, arrs[a].name);
            s = gguf_writer_set_arr(w, key, arrs[a].type, arrs[a].v, (uint64_t)acc.n_k);
        }
        snprintf(key, sizeof key, "dump.l%d.nce_sum", l);
        s = s ? s : gguf_writer_set_arr(w, key, GGUF_TYPE_FLOAT64, &sums.nce, 1);
        snprintf(key, sizeof key, "dump.l%d.kl_sum", l);
        s = s ? s : gguf_writer_set_arr(w, key, GGUF_TYPE_FLOAT64, &sums.kl, 1);
        snprintf(key, sizeof key, "dump.l%d.n_queries", l);
        s = s ? s : gguf_writer_set_u32(w, key, (uint32_t)sums.n_queries);
        if (s) {
            s = subq_fail(err, s, "out of memory");
            break;
        }
        struct {
            const char *name;
            const float *data;
            uint64_t cols, rows;
        } tens[] = {{"h", x.h, (uint64_t)cap->d, (uint64_t)T},           {"q", x.q, (uint64_t)cap->dq, (uint64_t)T},
                    {"k", x.k, (uint64_t)cap->dk, (uint64_t)T},           {"teacher", P, (uint64_t)T, (uint64_t)T},
                    {"wq", proj->wq[l], (uint64_t)cap->d, (uint64_t)proj->d_search},
                    {"wk", proj->wk[l], (uint64_t)cap->d, (uint64_t)proj->d_search}};
        for (size_t a = 0; a < sizeof tens / sizeof tens[0] && !s; a++) {
            char name[64];
            snprintf(name, sizeof name, "l%d.%s", l, tens[a].name);
            uint64_t ne[2] = {tens[a].cols, tens[a].rows};
            s = gguf_writer_add_tensor(w, name, GGML_TYPE_F32, 2, ne, tens[a].data, ne[0] * ne[1] * sizeof(float), 0,
                                       err);
        }
    }
    if (!s) s = gguf_writer_write(w, path, err);
done:
    gguf_writer_free(w);
    free(dense);
    trainer_free(&tr);
    return s;
}
