/* Completion maps as a task of the training driver (phi_train.h). */
#include "train/complete/phi_train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "kernels/kernels.h"
#include "model/derived.h"
#include "quant/types.h"
#include "train/task.h"

subq_train_phi_params phi_train_default_config(void) {
    subq_train_phi_params c = {
        .train = train_default_config(),
        .d_emb = 32,
        .d_hidden = 64,
        .d_phi = 32,
        .loss = phi_loss_default_params(),
        .wo_std = 0.5f,
    };
    c.train.lr = 1e-3f;
    c.train.weight_decay = 0.0f;
    c.train.warmup = 50;
    c.train.steps = 500;
    c.train.eval_every = 100;
    c.train.eval_tokens = 16384;
    c.train.save_every = 100;
    return c;
}

typedef struct phi_task {
    const subq_train_phi_params *cfg;
    phi_maps *maps;
    double *wd;                 /* double mirror of the weights, for the loss */
} phi_task;

static const char *const part_names[SUBQ_PHI_N_PARTS] = {"kl", "top", "fp", "z", "lse_err"};

static subq_status create(void *self, trainer *t, subq_error *err) {
    phi_task *k = self;
    const subq_train_phi_params *c = k->cfg;
    const subq_phi_loss_params *l = &c->loss;
    if (l->n_sink < 0 || l->n_tail < 1)
        return subq_fail(err, SUBQ_ERR_ARG, "n_sink must be >= 0 and n_tail >= 1 (got %d, %d)", l->n_sink, l->n_tail);
    if (!(l->tau > 0) || !(l->band > 0) || !(l->huber > 0) || !(l->l_kl >= 0 && l->l_kl <= 1) || !(l->l_top >= 0) ||
        !(l->l_fp >= 0) || !(l->l_z >= 0))
        return subq_fail(err, SUBQ_ERR_ARG, "loss options: tau, band and huber must be > 0, l_kl in [0, 1], weights >= 0");
    if (!(c->wo_std >= 0)) return subq_fail(err, SUBQ_ERR_ARG, "wo_std must be >= 0");
    const model_hparams *hp = &t->model->hp;
    const phi_dims d = {.head_dim = hp->head_dim, .d_emb = c->d_emb, .d_hidden = c->d_hidden, .d_phi = c->d_phi,
                        .n_head = hp->n_head, .n_head_kv = hp->n_head_kv};
    subq_status s = phi_maps_new(&d, hp->n_layer, c->train.layers, c->train.n_layers, model_fingerprint(t->model),
                                 &k->maps, err);
    if (s) return s;
    phi_maps *p = k->maps;
    p->n_sink = l->n_sink;
    p->n_tail = l->n_tail;
    t->w = p->data;
    t->n_params = p->layer_size * (size_t)p->n_sel;
    t->layers = p->layers;
    t->n_sel = p->n_sel;
    if (!(k->wd = malloc(t->n_params * sizeof(double)))) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    return SUBQ_OK;
}

/* Mean over (head, query) of LSE_{j in M_t}(log z(q_t, k_j)) - log |M_t|
 * for the current maps of `layer` (float features, double sums). */
static subq_status student_level(const phi_maps *p, int layer, const float *q, const float *k, const int32_t *seg, int T,
                                 const subq_phi_loss_params *lp, double *out, subq_error *err) {
    const phi_dims *d = &p->dims;
    const int D = d->head_dim, F = d->d_phi, nh = d->n_head, nkv = d->n_head_kv, grp = nh / nkv;
    float *lk = malloc((size_t)T * nkv * F * sizeof(float)), *lq = malloc((size_t)F * sizeof(float));
    double *sh = malloc((size_t)T * sizeof(double)), *e = malloc((size_t)F * sizeof(double));
    const kernels *K = kernels_get();
    if (!lk || !lq || !sh || !e) {
        free(lk);
        free(lq);
        free(sh);
        free(e);
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
                for (int f = 0; f < F; f++) e[f] = (double)lq[f] + kj[f] - m2;
                K->exp_f64(e, F);
                for (int f = 0; f < F; f++) acc += e[f];
                sh[j - lo] = m2 + log(acc);
                mx = sh[j - lo] > mx ? sh[j - lo] : mx;
            }
            for (int j = 0; j <= hi - lo; j++) sh[j] -= mx;
            K->exp_f64(sh, hi - lo + 1);
            for (int j = 0; j <= hi - lo; j++) z += sh[j];
            sum += mx + log(z) - log((double)(hi - lo + 1));
            cnt++;
        }
    }
    free(lk);
    free(lq);
    free(sh);
    free(e);
    *out = cnt ? sum / (double)cnt : 0.0;
    return SUBQ_OK;
}

static subq_status init(void *self, trainer *t, subq_error *err) {
    phi_task *k = self;
    const subq_train_phi_params *c = k->cfg;
    phi_maps *p = k->maps;
    phi_maps_init(p, c->wo_std, &t->rng);
    /* Output biases at the teacher's level: on the first training sequence
     * (a peek: the data cursor does not move), per layer the mean over
     * (head, query) of LSE_M(s) - log|M| for the teacher and for the initial
     * student; bo += (teacher - student) / 2 in phi_q and phi_k (log z moves
     * by the sum) so log z starts at the teacher's level instead of spending
     * the first hundreds of steps moving it there. */
    subq_status s = trainer_capture_train(t, 0, err);
    for (int i = 0; i < p->n_sel && !s; i++) {
        double st_lvl = 0.0;
        const double te_lvl = phi_teacher_level(&p->dims, t->model->hp.layer[p->layers[i]].scale, t->cap->q[i], t->cap->k[i], t->seg, t->n, c->loss.n_sink,
                                                c->loss.n_tail);
        if ((s = student_level(p, p->layers[i], t->cap->q[i], t->cap->k[i], t->seg, t->n, &c->loss, &st_lvl, err)))
            break;
        float *L = p->data + (size_t)i * p->layer_size;
        for (int w = 0; w < 2; w++)
            for (int h = 0; h < phi_n_maps(&p->dims, w); h++)
                for (int f = 0; f < p->dims.d_phi; f++)
                    L[phi_param_offset(&p->dims, w, PHI_BO, h) + f] += (float)((te_lvl - st_lvl) / 2);
    }
    return s;
}

/* the double mirror of the current float weights */
static void mirror(void *self, trainer *t) {
    phi_task *k = self;
    for (size_t i = 0; i < t->n_params; i++) k->wd[i] = t->w[i];
}

static subq_status loss(void *self, trainer *t, int train, train_sums *sums, subq_error *err) {
    const phi_task *k = self;
    const phi_maps *p = k->maps;
    for (int i = 0; i < p->n_sel; i++) {
        const size_t off = (size_t)i * p->layer_size;
        phi_loss_sums ls = {0};
        subq_status s = phi_loss_layer(&p->dims, t->model->hp.layer[p->layers[i]].scale, k->wd + off, t->cap->q[i], t->cap->k[i], t->seg, t->n, &k->cfg->loss,
                                       train ? t->gd + off : NULL, &ls, t->n_threads, err);
        if (s) return s;
        sums[i].loss += ls.loss;
        for (int j = 0; j < SUBQ_PHI_N_PARTS; j++) sums[i].part[j] += ls.part[j];
        sums[i].n_queries += ls.n_queries;
    }
    return SUBQ_OK;
}

static int options(const void *self, train_option *o) {
    const phi_task *k = self;
    const subq_phi_loss_params *l = &k->cfg->loss;
    int n = 0;
    o[n++] = train_opt_u64("n_sink", (uint64_t)l->n_sink);
    o[n++] = train_opt_u64("n_tail", (uint64_t)l->n_tail);
    o[n++] = train_opt_f32("tau", l->tau);
    o[n++] = train_opt_f32("l_kl", l->l_kl);
    o[n++] = train_opt_f32("l_top", l->l_top);
    o[n++] = train_opt_f32("l_fp", l->l_fp);
    o[n++] = train_opt_f32("l_z", l->l_z);
    o[n++] = train_opt_f32("band", l->band);
    o[n++] = train_opt_f32("huber", l->huber);
    o[n++] = train_opt_f32("wo_std", k->cfg->wo_std);
    return n;
}

/* one block per weight tensor: (layer, phi_q / phi_k, tensor) */
static int n_blocks(const void *self) { return ((const phi_task *)self)->maps->n_sel * 2 * PHI_N_TENSORS; }

static void block(const void *self, int b, train_block *out) {
    const phi_maps *p = ((const phi_task *)self)->maps;
    const int i = b / (2 * PHI_N_TENSORS), which = b / PHI_N_TENSORS % 2, tn = b % PHI_N_TENSORS;
    phi_tensor_name(p->layers[i], which, tn, out->name, sizeof out->name);
    out->offset = (size_t)i * p->layer_size + phi_param_offset(&p->dims, which, tn, 0);
    out->count = (size_t)phi_n_maps(&p->dims, which) * phi_tensor_size(&p->dims, tn);
    out->ne[0] = out->ne[1] = out->ne[2] = 1;
    out->n_dims = (uint32_t)phi_tensor_gguf_shape(&p->dims, which, tn, out->ne);
}

static subq_status write_weights(const void *self, gguf_writer *w, subq_error *err) {
    return phi_maps_to_writer(((const phi_task *)self)->maps, w, err);
}

static subq_status read_weights(void *self, trainer *t, const gguf_file *f, const char *path, subq_error *err) {
    const phi_maps *q = ((phi_task *)self)->maps;
    phi_maps *p = NULL;
    subq_status s = phi_maps_read(f, path, &p, err);
    if (!s) s = derived_check_model(path, p->model_fingerprint, t->model, "it", err);
    int same = !s && p->n_sel == q->n_sel && p->dims.d_phi == q->dims.d_phi && p->dims.d_emb == q->dims.d_emb &&
               p->dims.d_hidden == q->dims.d_hidden && p->layer_size == q->layer_size;
    for (int i = 0; same && i < q->n_sel; i++) same = p->layers[i] == q->layers[i];
    if (!s && !same)
        s = subq_fail(err, SUBQ_ERR_ARG,
                      "%s has d_phi %d, d_emb %d, d_hidden %d over %d layers; this run asks for %d, %d, %d over %d layers "
                      "(resume with the same map sizes and layers)",
                      path, p->dims.d_phi, p->dims.d_emb, p->dims.d_hidden, p->n_sel, q->dims.d_phi, q->dims.d_emb,
                      q->dims.d_hidden, q->n_sel);
    if (!s) memcpy(t->w, p->data, t->n_params * sizeof(float));
    phi_maps_free(p);
    return s;
}

static void task_free(void *self) {
    phi_task *k = self;
    phi_maps_free(k->maps);
    free(k->wd);
}

static const train_task_ops phi_ops = {
    .prefix = "subq.phi",
    .n_parts = SUBQ_PHI_N_PARTS,
    .part_names = part_names,
    .grad_f64 = 1,
    .create = create,
    .init = init,
    .sync = mirror,
    .loss = loss,
    .options = options,
    .n_blocks = n_blocks,
    .block = block,
    .write_weights = write_weights,
    .read_weights = read_weights,
    .free = task_free,
};

subq_status phi_train_run(subq_model *m, const subq_corpus *data, const subq_train_phi_params *cfg,
                          const subq_train_hooks *hooks, subq_train_result *res, subq_error *err) {
    phi_task k = {.cfg = cfg};
    const train_task task = {&phi_ops, &k};
    return trainer_run(m, data, &cfg->train, &task, hooks, res, err);
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

subq_status phi_train_dump(subq_model *m, const subq_corpus *data, const subq_train_phi_params *cfg, const char *path,
                           subq_error *err) {
    phi_task pt = {.cfg = cfg};
    const train_task task = {&phi_ops, &pt};
    trainer t;
    gguf_writer *w = NULL;
    subq_status s = trainer_init(&t, m, data, &cfg->train, &task, err);
    if (!s) s = trainer_capture_train(&t, 0, err);
    if (s) goto done;
    const phi_maps *p = pt.maps;
    const phi_dims *d = &p->dims;
    const int n = t.n;
    const train_sums *sums = t.sums;
    mirror(&pt, &t);
    s = loss(&pt, &t, 1, t.sums, err);
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
        for (int k = 0; k < SUBQ_PHI_N_PARTS; k++) sv[1 + k] = sums[i].part[k];
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
done:
    gguf_writer_free(w);
    trainer_free(&t);
    return s;
}
