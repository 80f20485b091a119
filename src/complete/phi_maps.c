/* Completion feature maps: layout, initialisation, the float forward and
 * the GGUF file (phi_maps.h). */
#include "complete/phi_maps.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/rng.h"
#include "model/derived.h"
#include "model/model.h"
#include "quant/types.h"

static const char *suffixes[PHI_N_TENSORS] = {"ws.weight", "ws.bias", "w1.weight", "w1.bias", "w2.weight",
                                              "w2.bias",   "alpha",   "wo.weight", "wo.bias"};

const char *phi_tensor_suffix(int t) { return t >= 0 && t < PHI_N_TENSORS ? suffixes[t] : "?"; }

void phi_tensor_name(int layer, int which, int t, char *buf, size_t cap) {
    snprintf(buf, cap, "blk.%d.phi_%c.%s", layer, which == PHI_Q ? 'q' : 'k', phi_tensor_suffix(t));
}

/* rows x cols of tensor t of one map (biases and alpha: one row) */
static void tensor_shape(const phi_dims *d, int t, int *rows, int *cols) {
    const int D = d->head_dim, E = d->d_emb, H = d->d_hidden, F = d->d_phi;
    int r = 1, c = 1;
    switch (t) {
    case PHI_WS: r = E, c = D; break;
    case PHI_BS: c = E; break;
    case PHI_W1: r = H, c = E; break;
    case PHI_B1: c = H; break;
    case PHI_W2: r = E, c = H; break;
    case PHI_B2: c = E; break;
    case PHI_ALPHA: c = 1; break;
    case PHI_WO: r = F, c = E; break;
    case PHI_BO: c = F; break;
    }
    *rows = r;
    *cols = c;
}

size_t phi_tensor_size(const phi_dims *d, int t) {
    int r, c;
    tensor_shape(d, t, &r, &c);
    return (size_t)r * (size_t)c;
}

size_t phi_map_size(const phi_dims *d) {
    size_t n = 0;
    for (int t = 0; t < PHI_N_TENSORS; t++) n += phi_tensor_size(d, t);
    return n;
}

size_t phi_layer_size(const phi_dims *d) { return (size_t)(d->n_head + d->n_head_kv) * phi_map_size(d); }

size_t phi_param_offset(const phi_dims *d, int which, int t, int head) {
    const int n = phi_n_maps(d, which);
    size_t off = which == PHI_K ? (size_t)d->n_head * phi_map_size(d) : 0;
    for (int u = 0; u < t; u++) off += (size_t)n * phi_tensor_size(d, u);
    return off + (size_t)head * phi_tensor_size(d, t);
}

subq_status phi_dims_check(const phi_dims *d, subq_error *err) {
    const int v[4] = {d->head_dim, d->d_emb, d->d_hidden, d->d_phi};
    const char *name[4] = {"head_dim", "d_emb", "d_hidden", "d_phi"};
    for (int i = 0; i < 4; i++)
        if (v[i] < 1 || v[i] > PHI_MAX_DIM)
            return subq_fail(err, SUBQ_ERR_ARG, "completion maps: %s %d out of range [1, %d]", name[i], v[i], PHI_MAX_DIM);
    if (d->n_head < 1 || d->n_head_kv < 1 || d->n_head % d->n_head_kv != 0 || d->n_head > 4096)
        return subq_fail(err, SUBQ_ERR_ARG, "completion maps: %d query heads over %d KV heads is not a valid grouping",
                         d->n_head, d->n_head_kv);
    return SUBQ_OK;
}

void phi_maps_free(phi_maps *p) {
    if (!p) return;
    free(p->layers); /* and sel_of_layer */
    free(p->h_mid);
    free(p->data);
    free(p);
}

subq_status phi_maps_new(const phi_dims *d, int n_layer, const int *layers, int n_sel, uint64_t fp, phi_maps **out,
                         subq_error *err) {
    *out = NULL;
    subq_status s = phi_dims_check(d, err);
    if (s) return s;
    if (n_layer <= 0 || n_layer > 4096 || n_sel <= 0 || n_sel > n_layer)
        return subq_fail(err, SUBQ_ERR_ARG, "completion maps need at least one layer of a model with layers");
    phi_maps *p = calloc(1, sizeof *p);
    if (!p) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    p->dims = *d;
    p->n_layer = n_layer;
    p->model_fingerprint = fp;
    p->n_sel = n_sel;
    p->n_sink = 4;
    p->n_tail = 16;
    p->layer_size = phi_layer_size(d);
    p->layers = malloc(((size_t)n_sel + n_layer) * sizeof(int));
    p->data = calloc(p->layer_size * (size_t)n_sel, sizeof(float));
    if (!p->layers || !p->data) {
        phi_maps_free(p);
        return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory for completion maps of %d layers", n_sel);
    }
    p->sel_of_layer = p->layers + n_sel;
    if ((s = derived_sort_layers(layers, n_sel, n_layer, "completion map", p->layers, err))) {
        phi_maps_free(p);
        return s;
    }
    for (int l = 0; l < n_layer; l++) p->sel_of_layer[l] = -1;
    for (int i = 0; i < n_sel; i++) p->sel_of_layer[p->layers[i]] = i;
    *out = p;
    return SUBQ_OK;
}

float *phi_layer_params(const phi_maps *p, int layer) {
    if (layer < 0 || layer >= p->n_layer || p->sel_of_layer[layer] < 0) return NULL;
    return p->data + (size_t)p->sel_of_layer[layer] * p->layer_size;
}

void phi_maps_init(phi_maps *p, float wo_std, uint64_t *rng_state) {
    const phi_dims *d = &p->dims;
    for (int i = 0; i < p->n_sel; i++) {
        float *L = p->data + (size_t)i * p->layer_size;
        for (int w = 0; w < 2; w++) {
            const int n = phi_n_maps(d, w);
            for (int t = 0; t < PHI_N_TENSORS; t++) {
                float *x = L + phi_param_offset(d, w, t, 0);
                size_t cnt = (size_t)n * phi_tensor_size(d, t);
                float std = t == PHI_WS ? 1.0f / sqrtf((float)d->head_dim)
                          : t == PHI_W1 ? 1.0f / sqrtf((float)d->d_emb)
                          : t == PHI_W2 ? 1.0f / sqrtf((float)d->d_hidden)
                          : t == PHI_WO ? wo_std / sqrtf((float)d->d_emb) : 0.0f;
                float fill = t == PHI_BO ? -0.5f * logf((float)d->d_phi) : 0.0f;
                for (size_t e = 0; e < cnt; e++) x[e] = std > 0 ? std * rng_normal(rng_state) : fill;
            }
        }
    }
}

/* GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
static inline float gelu_f(float x) {
    const float c = 0.7978845608028654f;
    return 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x)));
}

void phi_log_features(const phi_maps *p, int layer, int which, int head, const float *x, float *logphi) {
    const phi_dims *d = &p->dims;
    const int D = d->head_dim, E = d->d_emb, H = d->d_hidden, F = d->d_phi;
    const float *L = phi_layer_params(p, layer);
    if (!L || head < 0 || head >= phi_n_maps(d, which)) {
        for (int f = 0; f < F; f++) logphi[f] = -INFINITY;
        return;
    }
    const float *ws = L + phi_param_offset(d, which, PHI_WS, head), *bs = L + phi_param_offset(d, which, PHI_BS, head);
    const float *w1 = L + phi_param_offset(d, which, PHI_W1, head), *b1 = L + phi_param_offset(d, which, PHI_B1, head);
    const float *w2 = L + phi_param_offset(d, which, PHI_W2, head), *b2 = L + phi_param_offset(d, which, PHI_B2, head);
    const float alpha = L[phi_param_offset(d, which, PHI_ALPHA, head)];
    const float *wo = L + phi_param_offset(d, which, PHI_WO, head), *bo = L + phi_param_offset(d, which, PHI_BO, head);
    float g0[PHI_MAX_DIM], h1[PHI_MAX_DIM], g1[PHI_MAX_DIM];
    /* g0[e] = bs[e] + sum_c Ws[e][c] x[c] */
    for (int e = 0; e < E; e++) {
        float a = bs[e];
        for (int c = 0; c < D; c++) a += ws[(size_t)e * D + c] * x[c];
        g0[e] = a;
    }
    /* h1[j] = GELU(b1[j] + sum_e W1[j][e] g0[e]) */
    for (int j = 0; j < H; j++) {
        float a = b1[j];
        for (int e = 0; e < E; e++) a += w1[(size_t)j * E + e] * g0[e];
        h1[j] = gelu_f(a);
    }
    /* g1[e] = g0[e] + alpha (b2[e] + sum_j W2[e][j] h1[j]) */
    for (int e = 0; e < E; e++) {
        float a = b2[e];
        for (int j = 0; j < H; j++) a += w2[(size_t)e * H + j] * h1[j];
        g1[e] = g0[e] + alpha * a;
    }
    /* log phi[f] = bo[f] + sum_e Wo[f][e] g1[e] */
    for (int f = 0; f < F; f++) {
        float a = bo[f];
        for (int e = 0; e < E; e++) a += wo[(size_t)f * E + e] * g1[e];
        logphi[f] = a;
    }
}

/* ---- file I/O ------------------------------------------------------------ */

int phi_tensor_gguf_shape(const phi_dims *d, int which, int t, uint64_t ne[3]) {
    int r, c;
    tensor_shape(d, t, &r, &c);
    const int n = phi_n_maps(d, which);
    const int is_matrix = t == PHI_WS || t == PHI_W1 || t == PHI_W2 || t == PHI_WO;
    ne[0] = (uint64_t)c;
    if (is_matrix) {
        ne[1] = (uint64_t)r;
        ne[2] = (uint64_t)n;
        return 3;
    }
    ne[1] = (uint64_t)n;
    ne[2] = 1;
    return 2;
}

subq_status phi_maps_to_writer(const phi_maps *p, gguf_writer *w, subq_error *err) {
    const phi_dims *d = &p->dims;
    subq_status s = gguf_writer_set_str(w, "general.architecture", PHI_ARCH);
    s = s ? s : gguf_writer_set_u32(w, "subq.phi.d_phi", (uint32_t)d->d_phi);
    s = s ? s : gguf_writer_set_u32(w, "subq.phi.d_emb", (uint32_t)d->d_emb);
    s = s ? s : gguf_writer_set_u32(w, "subq.phi.d_hidden", (uint32_t)d->d_hidden);
    s = s ? s : gguf_writer_set_u32(w, "subq.phi.head_dim", (uint32_t)d->head_dim);
    s = s ? s : gguf_writer_set_u32(w, "subq.phi.n_head", (uint32_t)d->n_head);
    s = s ? s : gguf_writer_set_u32(w, "subq.phi.n_head_kv", (uint32_t)d->n_head_kv);
    s = s ? s : derived_write_ident(w, "subq.phi", p->layers, p->n_sel, p->model_fingerprint);
    s = s ? s : gguf_writer_set_u32(w, "subq.phi.model_n_layer", (uint32_t)p->n_layer);
    s = s ? s : gguf_writer_set_str(w, "subq.phi.gelu", "tanh");
    s = s ? s : gguf_writer_set_u32(w, "subq.phi.n_sink", (uint32_t)p->n_sink);
    s = s ? s : gguf_writer_set_u32(w, "subq.phi.n_tail", (uint32_t)p->n_tail);
    if (p->h_mid)
        s = s ? s : gguf_writer_set_arr(w, "subq.phi.h_mid", GGUF_TYPE_FLOAT32, p->h_mid, (uint64_t)p->n_sel * d->n_head);
    if (s) return subq_fail(err, s, "out of memory building completion map metadata");
    for (int i = 0; i < p->n_sel; i++) {
        const float *L = p->data + (size_t)i * p->layer_size;
        for (int which = 0; which < 2; which++) {
            const int n = phi_n_maps(d, which);
            for (int t = 0; t < PHI_N_TENSORS; t++) {
                char name[96];
                uint64_t ne[3];
                int nd = phi_tensor_gguf_shape(d, which, t, ne);
                phi_tensor_name(p->layers[i], which, t, name, sizeof name);
                uint64_t bytes = (uint64_t)n * phi_tensor_size(d, t) * sizeof(float);
                if ((s = gguf_writer_add_tensor(w, name, GGML_TYPE_F32, (uint32_t)nd, ne,
                                                L + phi_param_offset(d, which, t, 0), bytes, 0, err)))
                    return s;
            }
        }
    }
    return SUBQ_OK;
}

static subq_status fill(const void *p, gguf_writer *w, subq_error *err) { return phi_maps_to_writer(p, w, err); }

subq_status phi_maps_save(const phi_maps *p, const char *path, subq_error *err) {
    return gguf_save(path, fill, p, err);
}

subq_status phi_maps_read(const gguf_file *f, const char *path, phi_maps **out, subq_error *err) {
    *out = NULL;
    subq_error e2 = {0};
    char arch[64];
    if (gguf_get_str(f, "general.architecture", arch, sizeof arch, &e2) || strcmp(arch, PHI_ARCH) != 0)
        return subq_fail(err, SUBQ_ERR_FORMAT, "%s is not a completion map file (general.architecture is %s%s%s, expected \"%s\")",
                         path, e2.code ? "missing" : "\"", e2.code ? "" : arch, e2.code ? "" : "\"", PHI_ARCH);
    uint32_t v[6], n_layer, n_sink, n_tail;
    const char *keys[6] = {"subq.phi.head_dim", "subq.phi.d_emb", "subq.phi.d_hidden", "subq.phi.d_phi",
                           "subq.phi.n_head", "subq.phi.n_head_kv"};
    for (int i = 0; i < 6; i++)
        if (gguf_get_u32(f, keys[i], &v[i], &e2)) return subq_fail(err, SUBQ_ERR_FORMAT, "%s: %s", path, e2.msg);
    const gguf_value *arr;
    uint64_t fp;
    if (gguf_get_u32(f, "subq.phi.model_n_layer", &n_layer, &e2) ||
        gguf_get_u32_or(f, "subq.phi.n_sink", 4, &n_sink, &e2) || gguf_get_u32_or(f, "subq.phi.n_tail", 16, &n_tail, &e2))
        return subq_fail(err, SUBQ_ERR_FORMAT, "%s: %s", path, e2.msg);
    subq_status s = derived_read_ident(f, path, "subq.phi", &arr, &fp, err);
    if (s) return s;
    char gelu[16];
    if (!gguf_get_str(f, "subq.phi.gelu", gelu, sizeof gelu, &e2) && strcmp(gelu, "tanh") != 0)
        return subq_fail(err, SUBQ_ERR_UNSUPPORTED, "%s: GELU variant '%s' is not supported (only \"tanh\")", path, gelu);
    for (int i = 0; i < 6; i++) /* before the narrowing below, so the message shows the stored value */
        if (v[i] > (i < 4 ? PHI_MAX_DIM : 4096))
            return subq_fail(err, SUBQ_ERR_FORMAT, "%s: %s = %u is out of range [1, %d]", path, keys[i], v[i],
                             i < 4 ? PHI_MAX_DIM : 4096);
    phi_dims d = {(int)(v[0] > PHI_MAX_DIM ? 0 : v[0]), (int)(v[1] > PHI_MAX_DIM ? 0 : v[1]),
                  (int)(v[2] > PHI_MAX_DIM ? 0 : v[2]), (int)(v[3] > PHI_MAX_DIM ? 0 : v[3]),
                  (int)(v[4] > 4096 ? 0 : v[4]), (int)(v[5] > 4096 ? 0 : v[5])};
    if (phi_dims_check(&d, &e2)) return subq_fail(err, SUBQ_ERR_FORMAT, "%s: %s", path, e2.msg);
    if ((s = derived_check_count(arr, n_layer, path, "subq.phi", err))) return s;
    uint64_t n_sel = arr->v.arr.n;
    const uint64_t need = n_sel * (uint64_t)phi_layer_size(&d) * sizeof(float); /* < 2^63: dims are bounded */
    if (need > gguf_tensor_bytes(f)) /* allocate only what the file can fill */
        return subq_fail(err, SUBQ_ERR_FORMAT, "%s: the dimensions need %" PRIu64 " bytes of tensors, the file holds %" PRIu64,
                         path, need, gguf_tensor_bytes(f));
    int *layers = malloc(n_sel * sizeof(int));
    if (!layers) return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
    for (uint64_t i = 0; i < n_sel && !s; i++) s = derived_layer(arr, i, n_layer, path, "subq.phi", &layers[i], err);
    if (s) {
        free(layers);
        return s;
    }
    phi_maps *p;
    s = phi_maps_new(&d, (int)n_layer, layers, (int)n_sel, fp, &p, &e2);
    free(layers);
    if (s) return subq_fail(err, s == SUBQ_ERR_NOMEM ? s : SUBQ_ERR_FORMAT, "%s: %s", path, e2.msg);
    p->n_sink = (int)(n_sink > 1000000 ? 1000000 : n_sink);
    p->n_tail = (int)(n_tail > 1000000 ? 1000000 : n_tail);
    if (gguf_find_kv(f, "subq.phi.h_mid")) {
        const uint64_t n_h = (uint64_t)p->n_sel * d.n_head;
        if (gguf_get_arr(f, "subq.phi.h_mid", GGUF_TYPE_FLOAT32, &arr, &e2) || arr->v.arr.n != n_h) {
            phi_maps_free(p);
            return subq_fail(err, SUBQ_ERR_FORMAT, "%s: subq.phi.h_mid must be %" PRIu64 " f32 values", path, n_h);
        }
        if (!(p->h_mid = malloc((size_t)n_h * sizeof(float)))) {
            phi_maps_free(p);
            return subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
        }
        memcpy(p->h_mid, arr->v.arr.data, (size_t)n_h * sizeof(float));
    }
    for (int i = 0; i < p->n_sel; i++) {
        float *L = p->data + (size_t)i * p->layer_size;
        for (int which = 0; which < 2; which++) {
            const int n = phi_n_maps(&d, which);
            for (int t = 0; t < PHI_N_TENSORS; t++) {
                char name[96];
                uint64_t ne[3];
                int nd = phi_tensor_gguf_shape(&d, which, t, ne);
                phi_tensor_name(p->layers[i], which, t, name, sizeof name);
                const gguf_tensor *gt = gguf_find_tensor(f, name);
                if (!gt) s = subq_fail(err, SUBQ_ERR_FORMAT, "%s: tensor %s is missing", path, name);
                else if (gt->type != GGML_TYPE_F32)
                    s = subq_fail(err, SUBQ_ERR_UNSUPPORTED, "%s: tensor %s is not f32 (ggml type %u)", path, name, gt->type);
                else if ((int)gt->n_dims != nd || gt->ne[0] != ne[0] || gt->ne[1] != ne[1] || (nd == 3 && gt->ne[2] != ne[2]))
                    s = subq_fail(err, SUBQ_ERR_SHAPE, "%s: tensor %s has shape %" PRIu64 " x %" PRIu64 " x %" PRIu64
                                  ", expected %" PRIu64 " x %" PRIu64 " x %" PRIu64,
                                  path, name, gt->ne[0], gt->ne[1], gt->n_dims > 2 ? gt->ne[2] : 1, ne[0], ne[1], ne[2]);
                if (s) {
                    phi_maps_free(p);
                    return s;
                }
                memcpy(L + phi_param_offset(&d, which, t, 0), gt->data, (size_t)n * phi_tensor_size(&d, t) * sizeof(float));
            }
        }
    }
    *out = p;
    return SUBQ_OK;
}

subq_status phi_maps_annotate_entropy(const char *path, const float *h_mid, subq_error *err) {
    gguf_file *f;
    subq_status s = gguf_open(path, &f, err);
    if (s) return s;
    phi_maps *p = NULL;
    gguf_writer *w = NULL;
    if ((s = phi_maps_read(f, path, &p, err))) goto done;
    const size_t n_h = (size_t)p->n_sel * p->dims.n_head;
    free(p->h_mid);
    if (!(p->h_mid = malloc(n_h * sizeof(float))) || !(w = gguf_writer_new()) || gguf_writer_copy_kvs(w, f)) {
        s = subq_fail(err, SUBQ_ERR_NOMEM, "out of memory");
        goto done;
    }
    memcpy(p->h_mid, h_mid, n_h * sizeof(float));
    if (!(s = phi_maps_to_writer(p, w, err))) s = gguf_writer_write(w, path, err);
done:
    gguf_writer_free(w);
    phi_maps_free(p);
    gguf_close(f);
    return s;
}

static subq_status read_any(const gguf_file *f, const char *path, void *out, subq_error *err) {
    return phi_maps_read(f, path, out, err);
}

subq_status phi_maps_load(const char *path, const subq_model *m, phi_maps **out, subq_error *err) {
    *out = NULL;
    phi_maps *p;
    subq_status s = gguf_load(path, read_any, &p, err);
    if (s) return s;
    if ((s = derived_check_model(path, p->model_fingerprint, m, "them", err))) {
        phi_maps_free(p);
        return s;
    }
    const model_hparams *hp = &m->hp;
    if (p->n_layer != hp->n_layer || p->dims.head_dim != hp->head_dim || p->dims.n_head != hp->n_head ||
        p->dims.n_head_kv != hp->n_head_kv) {
        subq_status r = subq_fail(err, SUBQ_ERR_MISMATCH,
                                  "%s is for %d layers of %d/%d heads of width %d; this model has %d layers of %d/%d heads of width %d",
                                  path, p->n_layer, p->dims.n_head, p->dims.n_head_kv, p->dims.head_dim, hp->n_layer,
                                  hp->n_head, hp->n_head_kv, hp->head_dim);
        phi_maps_free(p);
        return r;
    }
    *out = p;
    return SUBQ_OK;
}
