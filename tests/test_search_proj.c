/* Search projection files: a short real training run on stories260K through
 * the library, the file loads back for stories260K and is refused for a
 * random-weight model of the same shape (SUBQ_ERR_MISMATCH, one line);
 * truncated, garbage and inconsistent files give clean errors; apply, the
 * random constructor and layer lists behave. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/fingerprint.h"
#include "base/layers.h"
#include "base/rng.h"
#include "model/model.h"
#include "lab/synth.h"
#include "quant/types.h"
#include "search/search_proj.h"
#include "test_util.h"
#include "train/search/train_search.h"

static char tmp_dir[512];

static const char *tmp_path(const char *name, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/%s", tmp_dir, name);
    return buf;
}

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)len + 1);
    *n = fread(b, 1, (size_t)len, f);
    fclose(f);
    return b;
}

static void spit(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(data, 1, n, f);
        fclose(f);
    }
}

static int one_line(const char *s) { return s[0] && !strchr(s, '\n'); }

/* Train 3 steps on a little text with the library and return the output path. */
static void train_small(subq_model *m, const char *out) {
    char text_path[1024];
    const char *text =
        "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
        "One day, she saw a big red ball. She ran to the ball and kicked it very hard. The ball went up high "
        "and came down in a tree. Lily was sad. Her friend Tom came and helped her get the ball back.";
    subq_corpus *c = NULL;
    subq_error err = {0};
    subq_corpus_params cp = {.seq = 48, .pack = 1, .eval_frac = 0.0f, .seed = 1};
    CHECK(!corpus_new(m, &cp, &c, &err), "corpus_new: %s", err.msg);
    for (int i = 0; i < 4; i++) {
        snprintf(text_path, sizeof text_path, "doc %d", i);
        CHECK(!corpus_add_text(c, m, text + 20 * i, strlen(text) - 20 * i, 0, text_path, &err), "add_text: %s", err.msg);
    }
    CHECK(!corpus_finish(c, &err), "finish: %s", err.msg);
    subq_train_search_params cfg = train_search_default_config();
    int layers[] = {1, 3};
    cfg.train.layers = layers;
    cfg.train.n_layers = 2;
    cfg.d_search = 8;
    cfg.train.steps = 3;
    cfg.train.warmup = 1;
    cfg.train.lr = 1e-2f;
    cfg.train.eval_every = 0;
    cfg.train.out_path = out;
    cfg.train.n_threads = 2;
    subq_train_result res;
    CHECK(!train_search_run(m, c, &cfg, NULL, &res, &err), "train_search_run: %s", err.msg);
    CHECK(res.step == 3, "trained %lld steps", (long long)res.step);
    corpus_free(c);
}

static void expect_error(const char *what, const char *path, const subq_model *m, subq_status want) {
    search_proj *p = NULL;
    subq_error err = {0};
    subq_status s = search_proj_load(path, m, &p, &err);
    CHECK(s != SUBQ_OK && p == NULL, "%s: loaded", what);
    if (want) CHECK(s == want, "%s: status %s, want %s (%s)", what, subq_status_name(s), subq_status_name(want), err.msg);
    CHECK(one_line(err.msg), "%s: message not one line: '%s'", what, err.msg);
    search_proj_free(p);
}

/* a projection file written with the writer directly, for inconsistent
 * contents; rope: subq.search.rope_dims, _base, _scale (NULL: none, as in
 * files from before the rotation) */
static void write_custom(const char *path, int d_search, int n_embd, const int32_t *layers, int n_layers, int tensor_rows,
                         uint32_t type, const char *fp, const float *rope) {
    gguf_writer *w = gguf_writer_new();
    gguf_writer_set_str(w, "general.architecture", SEARCH_PROJ_ARCH);
    gguf_writer_set_u32(w, "subq.search.d_search", (uint32_t)d_search);
    gguf_writer_set_arr(w, "subq.search.layers", GGUF_TYPE_INT32, layers, (uint64_t)n_layers);
    gguf_writer_set_str(w, "subq.search.model_fingerprint", fp);
    gguf_writer_set_u32(w, "subq.search.model_n_embd", (uint32_t)n_embd);
    gguf_writer_set_u32(w, "subq.search.model_n_layer", 5);
    if (rope) {
        gguf_writer_set_u32(w, "subq.search.rope_dims", (uint32_t)rope[0]);
        gguf_writer_set_f32(w, "subq.search.rope_base", rope[1]);
        gguf_writer_set_f32(w, "subq.search.rope_scale", rope[2]);
    }
    static float data[64 * 64];
    uint64_t ne[2] = {(uint64_t)n_embd, (uint64_t)tensor_rows};
    size_t bytes = (size_t)n_embd * tensor_rows * (type == GGML_TYPE_F32 ? 4 : 2);
    for (int i = 0; i < n_layers; i++) {
        char qn[96], kn[96];
        search_proj_tensor_names(layers[i] >= 0 && layers[i] < 5 ? layers[i] : 0, qn, kn, sizeof qn);
        gguf_writer_add_tensor(w, qn, type, 2, ne, data, bytes, 0, NULL);
        gguf_writer_add_tensor(w, kn, type, 2, ne, data, bytes, 0, NULL);
    }
    subq_error err = {0};
    CHECK(!gguf_writer_write(w, path, &err), "write %s: %s", path, err.msg);
    gguf_writer_free(w);
}

static void test_apply_and_random(const subq_model *m) {
    int layers[] = {4, 2};
    search_proj *a, *b;
    subq_error err = {0};
    CHECK(!search_proj_random(m, layers, 2, 5, 9, &a, &err) && !search_proj_random(m, layers, 2, 5, 9, &b, &err),
          "random: %s", err.msg);
    CHECK(a->layers[0] == 2 && a->layers[1] == 4 && a->wq[2] && a->wk[4] && !a->wq[0], "layers sorted / mapped");
    CHECK(!memcmp(a->data, b->data, 2 * 2 * 5 * 64 * sizeof(float)), "random projections are deterministic");
    float h[3 * 64], qs[3 * 5], ks[3 * 5];
    uint64_t rng = rng_seed(3);
    for (int i = 0; i < 3 * 64; i++) h[i] = rng_normal(&rng);
    search_proj_apply(a, 4, h, 3, qs, ks, 2);
    double worst = 0;
    for (int t = 0; t < 3; t++)
        for (int r = 0; r < 5; r++) {
            double q = 0, k = 0;
            for (int i = 0; i < 64; i++) {
                q += (double)a->wq[4][r * 64 + i] * h[t * 64 + i];
                k += (double)a->wk[4][r * 64 + i] * h[t * 64 + i];
            }
            worst = fmax(worst, fmax(fabs(q - qs[t * 5 + r]), fabs(k - ks[t * 5 + r])));
        }
    CHECK(worst < 1e-5, "apply differs from W h by %g", worst);
    search_proj_free(a);
    search_proj_free(b);

    unsigned char mask[5];
    CHECK(!layers_parse("all", 5, mask, NULL) && mask[0] && mask[4], "all");
    CHECK(!layers_parse("1,3-4", 5, mask, NULL) && !mask[0] && mask[1] && !mask[2] && mask[3] && mask[4], "1,3-4");
    CHECK(!layers_parse("0,-1", 5, mask, NULL) && mask[0] && mask[4] && !mask[3], "0,-1");
    CHECK(!layers_parse("2--1", 5, mask, NULL) && !mask[1] && mask[2] && mask[4], "2--1");
    CHECK(!layers_parse("none", 5, mask, NULL) && !mask[0] && !mask[4], "none");
    subq_error e = {0};
    CHECK(layers_parse("5", 5, mask, &e) == SUBQ_ERR_ARG && one_line(e.msg), "out of range");
    CHECK(layers_parse("1,x", 5, mask, &e) == SUBQ_ERR_ARG, "garbage");
    CHECK(layers_parse("3-1", 5, mask, &e) == SUBQ_ERR_ARG, "empty range");
}

int main(void) {
    char model_path[1024], synth_path[1024], out[600], bad[1024];
    const char *tmp = getenv("SUBQ_TMP");
    snprintf(tmp_dir, sizeof tmp_dir, "%s", tmp && *tmp ? tmp : "/tmp");
    test_shared_path("models/stories260K.gguf", model_path, sizeof model_path);
    subq_model *m = NULL, *other = NULL;
    subq_error err = {0};
    if (subq_model_load(model_path, &m, &err)) {
        CHECK(0, "load %s: %s", model_path, err.msg);
        return test_summary();
    }
    test_apply_and_random(m);

    /* a file really trained for stories260K */
    snprintf(out, sizeof out, "%s/test_search_proj.%d.gguf", tmp_dir, (int)getpid());
    train_small(m, out);
    search_proj *p = NULL;
    CHECK(!search_proj_load(out, m, &p, &err), "load trained file: %s", err.msg);
    if (p) {
        CHECK(p->d_search == 8 && p->n_sel == 2 && p->layers[0] == 1 && p->layers[1] == 3 && p->wq[1] && p->wk[3],
              "trained file contents");
        CHECK(p->model_fingerprint == model_fingerprint(m), "fingerprint recorded");
        search_proj_free(p);
    }

    /* same shape, other weights: refused */
    const synth_shape *sh = synth_find_shape("stories260k");
    tmp_path("test_search_proj_synth.gguf", synth_path, sizeof synth_path);
    CHECK(sh && !synth_write_model(sh, GGML_TYPE_F32, 7, synth_path, &err), "synth: %s", err.msg);
    CHECK(!subq_model_load(synth_path, &other, &err), "load synth: %s", err.msg);
    if (other) {
        p = NULL;
        subq_status s = search_proj_load(out, other, &p, &err);
        CHECK(s == SUBQ_ERR_MISMATCH && !p, "projection file for another model: status %s", subq_status_name(s));
        CHECK(one_line(err.msg) && strstr(err.msg, "trained for another model") && !strstr(err.msg, "subq "),
              "mismatch message: '%s'", err.msg);
        printf("refusal message: %s\n", err.msg);
    }

    /* the checkpoint is also a valid projection file */
    char ckpt[700];
    snprintf(ckpt, sizeof ckpt, "%s.ckpt", out);
    p = NULL;
    CHECK(!search_proj_load(ckpt, m, &p, &err), "checkpoint loads as projections: %s", err.msg);
    search_proj_free(p);

    /* truncations: every prefix up to the end of the header, then a spread of longer ones */
    size_t n = 0;
    unsigned char *blob = slurp(out, &n);
    CHECK(blob && n > 1000, "read back %s", out);
    tmp_path("test_search_proj_bad.gguf", bad, sizeof bad);
    int trunc_ok = 1;
    for (size_t len = 0; blob && len < n; len += len < 1200 ? 7 : 997) {
        spit(bad, blob, len);
        search_proj *q = NULL;
        subq_error e = {0};
        subq_status s = search_proj_load(bad, m, &q, &e);
        if (s == SUBQ_OK || q || !one_line(e.msg)) {
            trunc_ok = 0;
            fprintf(stderr, "truncated to %zu bytes: status %d '%s'\n", len, (int)s, e.msg);
        }
        search_proj_free(q);
    }
    CHECK(trunc_ok, "every truncated file is refused with a one-line error");
    /* garbage */
    unsigned char junk[4096];
    uint64_t rng = rng_seed(11);
    for (size_t i = 0; i < sizeof junk; i++) junk[i] = (unsigned char)rng_next_u64(&rng);
    spit(bad, junk, sizeof junk);
    expect_error("random bytes", bad, m, SUBQ_ERR_FORMAT);
    memcpy(junk, "GGUF", 4);
    spit(bad, junk, sizeof junk);
    expect_error("GGUF magic + random bytes", bad, m, 0);
    expect_error("a model file", model_path, m, SUBQ_ERR_FORMAT);
    expect_error("missing file", "/nonexistent/proj.gguf", m, SUBQ_ERR_IO);

    /* inconsistent contents */
    char fp[17];
    fingerprint_hex(model_fingerprint(m), fp);
    int32_t l13[] = {1, 3}, l9[] = {9}, l11[] = {1, 1};
    write_custom(bad, 8, 64, l13, 2, 8, GGML_TYPE_F32, fp, NULL);
    p = NULL;
    CHECK(!search_proj_load(bad, m, &p, &err), "hand-written good file: %s", err.msg);
    CHECK(p && p->rope.n_rot == 0, "a file without rotation keys rotates nothing");
    search_proj_free(p);
    /* the rotary part: read as written, refused when it cannot be */
    const float rope_ok[3] = {4, 100, 0.5f};
    write_custom(bad, 8, 64, l13, 2, 8, GGML_TYPE_F32, fp, rope_ok);
    p = NULL;
    CHECK(!search_proj_load(bad, m, &p, &err) && p->rope.n_rot == 4 && p->rope.base == 100 && p->rope.scale == 0.5,
          "rotation keys: %s", err.msg);
    if (p) { /* and through the library's own writer */
        p->rope = (search_rope){.n_rot = 8, .base = 5000, .scale = 0.25};
        search_proj *q = NULL;
        CHECK(!search_proj_save(p, bad, &err) && !search_proj_load(bad, m, &q, &err) && q->rope.n_rot == 8 &&
                  q->rope.base == 5000 && q->rope.scale == 0.25,
              "rotation round trip: %s", err.msg);
        search_proj_free(q);
    }
    search_proj_free(p);
    /* search heads: per KV head and per query head round trip bit for bit; a
     * file whose heads do not fit this model is refused */
    for (int g = SUBQ_SEARCH_KV_HEAD; g <= SUBQ_SEARCH_HEAD; g++) {
        int nq, nk;
        search_heads_of((subq_search_granularity)g, m->hp.n_head, m->hp.n_head_kv, &nq, &nk);
        search_proj *hp = NULL, *back = NULL;
        const int lay[] = {1, 3};
        CHECK(!search_proj_new_heads(m->hp.n_layer, m->hp.n_embd, 8, (subq_search_granularity)g, nq, nk, lay, 2,
                                     model_fingerprint(m), &hp, &err),
              "heads: %s", err.msg);
        uint64_t r = rng_seed(5);
        search_proj_init_normal(hp, 1.0f, &r);
        hp->rope = (search_rope){.n_rot = 4, .base = 100, .scale = 1};
        const size_t nw = (size_t)(nq + nk) * 8 * m->hp.n_embd * 2;
        CHECK(!search_proj_save(hp, bad, &err) && !search_proj_load(bad, m, &back, &err) && (int)back->gran == g &&
                  back->n_qhead == nq && back->n_khead == nk && back->d_search == 8 && back->rope.n_rot == 4 &&
                  !memcmp(back->data, hp->data, nw * sizeof(float)),
              "%s heads round trip: %s", search_granularity_name((subq_search_granularity)g), err.msg);
        search_proj_free(back);
        search_proj_free(hp);
    }
    {
        search_proj *hp = NULL;
        const int lay[] = {1};
        CHECK(!search_proj_new_heads(m->hp.n_layer, m->hp.n_embd, 8, SUBQ_SEARCH_HEAD, m->hp.n_head_kv,
                                     m->hp.n_head_kv, lay, 1, model_fingerprint(m), &hp, &err),
              "heads: %s", err.msg);
        CHECK(!search_proj_save(hp, bad, &err), "save: %s", err.msg);
        search_proj_free(hp);
        expect_error("per-query-head file with too few query heads", bad, m, SUBQ_ERR_MISMATCH);
    }
    const float rope_bad[][3] = {{3, 100, 1}, {10, 100, 1}, {4, 1, 1}, {4, 100, 0}, {4, 100, NAN}, {4, INFINITY, 1}};
    for (size_t i = 0; i < sizeof rope_bad / sizeof rope_bad[0]; i++) {
        char what[96];
        snprintf(what, sizeof what, "rotation %g dims, base %g, scale %g", (double)rope_bad[i][0],
                 (double)rope_bad[i][1], (double)rope_bad[i][2]);
        write_custom(bad, 8, 64, l13, 2, 8, GGML_TYPE_F32, fp, rope_bad[i]);
        expect_error(what, bad, m, SUBQ_ERR_FORMAT);
    }
    write_custom(bad, 8, 64, l13, 2, 4, GGML_TYPE_F32, fp, NULL);
    expect_error("tensor rows != d_search", bad, m, SUBQ_ERR_SHAPE);
    write_custom(bad, 8, 64, l13, 2, 8, GGML_TYPE_F16, fp, NULL);
    expect_error("f16 tensors", bad, m, SUBQ_ERR_UNSUPPORTED);
    write_custom(bad, 8, 64, l9, 1, 8, GGML_TYPE_F32, fp, NULL);
    expect_error("layer out of range", bad, m, SUBQ_ERR_FORMAT);
    write_custom(bad, 8, 64, l11, 2, 8, GGML_TYPE_F32, fp, NULL);
    expect_error("repeated layer", bad, m, SUBQ_ERR_FORMAT);
    write_custom(bad, 8, 64, l13, 2, 8, GGML_TYPE_F32, "12345", NULL);
    expect_error("malformed fingerprint", bad, m, SUBQ_ERR_FORMAT);
    write_custom(bad, 8, 32, l13, 2, 8, GGML_TYPE_F32, fp, NULL);
    expect_error("d_model differs", bad, m, SUBQ_ERR_MISMATCH);
    write_custom(bad, 0, 64, l13, 2, 0, GGML_TYPE_F32, fp, NULL);
    expect_error("d_search 0", bad, m, SUBQ_ERR_FORMAT);

    free(blob);
    unlink(bad);
    unlink(synth_path);
    unlink(out);
    unlink(ckpt);
    char logp[700];
    snprintf(logp, sizeof logp, "%s.log.jsonl", out);
    unlink(logp);
    subq_model_free(other);
    subq_model_free(m);
    return test_summary();
}
