/* subq info: metadata and tensor table of a GGUF file. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "quant/types.h"
#include "select/selector.h"

static const char *help =
    "usage: subq info -m FILE [--json] [--features]\n"
    "Show a GGUF file's header, metadata and tensor table.\n\n"
    "  -m, --model FILE     GGUF file (required unless --features)\n"
    "  --json               machine-readable output\n"
    "  --features           list the optional features this build has\n";

static void print_scalar(FILE *f, const gguf_value *v, int json) {
    switch (v->type) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_UINT16: case GGUF_TYPE_UINT32: case GGUF_TYPE_UINT64:
        fprintf(f, "%" PRIu64, v->v.u64);
        break;
    case GGUF_TYPE_INT8: case GGUF_TYPE_INT16: case GGUF_TYPE_INT32: case GGUF_TYPE_INT64:
        fprintf(f, "%" PRId64, v->v.i64);
        break;
    case GGUF_TYPE_FLOAT32: case GGUF_TYPE_FLOAT64:
        if (json) cli_json_num(f, v->v.f64);
        else fprintf(f, "%.9g", v->v.f64);
        break;
    case GGUF_TYPE_BOOL:
        fputs(v->v.b ? "true" : "false", f);
        break;
    case GGUF_TYPE_STRING:
        if (json) cli_json_string(f, v->v.str.data, (size_t)v->v.str.len);
        else fprintf(f, "\"%.*s\"%s", (int)(v->v.str.len > 60 ? 60 : v->v.str.len), v->v.str.data,
                     v->v.str.len > 60 ? "..." : "");
        break;
    default:
        fputs("null", f);
    }
}

/* Arrays: element type, count and the first few elements. */
static void print_value(FILE *f, const gguf_value *v, int json) {
    if (v->type != GGUF_TYPE_ARRAY) {
        print_scalar(f, v, json);
        return;
    }
    uint64_t n = v->v.arr.n, show = n < 8 ? n : 8;
    if (json) fprintf(f, "{\"array\": \"%s\", \"n\": %" PRIu64 ", \"head\": [", gguf_type_name(v->v.arr.elem_type), n);
    else fprintf(f, "[%s x %" PRIu64 "] ", gguf_type_name(v->v.arr.elem_type), n);
    if (!json) fputc('[', f);
    for (uint64_t i = 0; i < show; i++) {
        if (i) fputs(", ", f);
        if (v->v.arr.items) print_value(f, &v->v.arr.items[i], json);
        else if ((v->v.arr.elem_type == GGUF_TYPE_FLOAT32 || v->v.arr.elem_type == GGUF_TYPE_FLOAT64) && json)
            cli_json_num(f, gguf_arr_get_f64(v, i));
        else if (v->v.arr.elem_type == GGUF_TYPE_FLOAT32 || v->v.arr.elem_type == GGUF_TYPE_FLOAT64)
            fprintf(f, "%.9g", gguf_arr_get_f64(v, i));
        else if (v->v.arr.elem_type == GGUF_TYPE_BOOL)
            fputs(gguf_arr_get_i64(v, i) ? "true" : "false", f);
        else
            fprintf(f, "%" PRId64, gguf_arr_get_i64(v, i));
    }
    if (json) fputs("]}", f);
    else fprintf(f, "%s]", show < n ? ", ..." : "");
}

static int print_features(int json) {
    const char *names[] = {"openblas", "openmp", "faiss", "hnsw"};
    /* faiss is optional at build time; hnswlib is required by the build */
    const int have[] = {1, 1, selector_kind_available(SELECT_FAISS), selector_kind_available(SELECT_HNSW)};
    for (size_t i = 0; i < 4; i++) {
        if (json) printf("%s\"%s\": %s", i ? ", " : "{", names[i], have[i] ? "true" : "false");
        else printf("%-10s %s\n", names[i], have[i] ? "yes" : "no");
    }
    if (json) printf("}\n");
    return 0;
}

/* The rope this build would run a model file with (scaling, frequency
 * factors), or why it would refuse it; NULL for files that are no model. */
static const char *rope_in_use(const gguf_file *g, char *buf, size_t cap) {
    char arch[32];
    subq_error err = {0};
    if (gguf_get_str(g, "general.architecture", arch, sizeof arch, &err)) return NULL;
    int known = 0;
    for (model_arch a = ARCH_LLAMA; a <= ARCH_QWEN3; a++) known |= !strcmp(arch, model_arch_name(a));
    if (!known) return NULL;
    model_hparams hp;
    if (model_hparams_load(g, &hp, &err)) snprintf(buf, cap, "cannot run: %.480s", err.msg);
    else rope_describe(&hp.rope, buf, cap);
    model_hparams_free(&hp);
    return buf;
}

int cmd_info(int argc, char **argv) {
    const char *cmd = "info";
    const char *path = NULL;
    int json = 0, features = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (cli_is_help(a)) {
            fputs(help, stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(path = cli_value(cmd, argc, argv, &i))) return 1;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--features")) {
            features = 1;
        } else {
            return cli_error(cmd, "unknown option '%s' (see subq info --help)", a);
        }
    }
    if (features) return print_features(json);
    if (!path) return cli_error(cmd, "no file given; use -m FILE.gguf");
    subq_error err = {0};
    gguf_file *g;
    if (gguf_open(path, &g, &err)) return cli_error(cmd, "%s", err.msg);
    const uint64_t total = gguf_tensor_bytes(g);
    char rope_buf[512];
    const char *rope = rope_in_use(g, rope_buf, sizeof rope_buf);
    /* search projections the file carries (a projection file, or merged into a model) */
    subq_search_info si;
    char search_buf[600];
    subq_status ss = subq_search_info_file(path, &si, &err);
    if (!ss)
        snprintf(search_buf, sizeof search_buf, "%s, layers %s (%d), d_search %d, %s%s", si.merged ? "merged into the "
                 "model (ann-sparseattention runtime layout; runs sparse with no --search)" : "projection file",
                 si.layers, si.n_layers, si.d_search, si.type, si.merged && si.top_k ? ", top-k " : "");
    else if (ss != SUBQ_ERR_RANGE)
        snprintf(search_buf, sizeof search_buf, "unusable: %.500s", err.msg);
    if (!ss && si.merged && si.top_k)
        snprintf(search_buf + strlen(search_buf), sizeof search_buf - strlen(search_buf), "%d", si.top_k);
    const char *search = ss == SUBQ_ERR_RANGE ? NULL : search_buf;
    if (json) {
        printf("{\"file\": ");
        cli_json_string(stdout, path, strlen(path));
        if (rope) {
            printf(", \"rope\": ");
            cli_json_string(stdout, rope, strlen(rope));
        }
        if (!ss) {
            printf(", \"search\": {\"merged\": %s, \"layers\": ", si.merged ? "true" : "false");
            cli_json_string(stdout, si.layers, strlen(si.layers));
            printf(", \"n_layers\": %d, \"d_search\": %d, \"type\": \"%s\", \"top_k\": %d}", si.n_layers,
                   si.d_search, si.type, si.top_k);
        } else if (search) {
            printf(", \"search_error\": ");
            cli_json_string(stdout, err.msg, strlen(err.msg));
        }
        printf(", \"version\": %u, \"n_kv\": %" PRIu64 ", \"n_tensors\": %" PRIu64 ", \"alignment\": %" PRIu64
               ", \"tensor_bytes\": %" PRIu64 ",\n \"metadata\": {",
               g->version, g->n_kv, g->n_tensors, g->alignment, total);
        for (uint64_t i = 0; i < g->n_kv; i++) {
            printf("%s\n  ", i ? "," : "");
            cli_json_string(stdout, g->kv[i].key.data, (size_t)g->kv[i].key.len);
            printf(": ");
            print_value(stdout, &g->kv[i].value, 1);
        }
        printf("},\n \"tensors\": [");
        for (uint64_t i = 0; i < g->n_tensors; i++) {
            const gguf_tensor *t = &g->tensors[i];
            const ggml_type_traits *tr = ggml_type_get(t->type);
            printf("%s\n  {\"name\": ", i ? "," : "");
            cli_json_string(stdout, t->name, strlen(t->name));
            printf(", \"type\": \"%s\", \"shape\": [", tr ? tr->name : "?");
            for (uint32_t d = 0; d < t->n_dims; d++) printf("%s%" PRIu64, d ? ", " : "", t->ne[d]);
            printf("], \"offset\": %" PRIu64 ", \"bytes\": %" PRIu64 "}", t->offset, t->n_bytes);
        }
        printf("]}\n");
    } else {
        printf("%s: GGUF v%u, %" PRIu64 " metadata keys, %" PRIu64 " tensors, %.2f MiB of tensor data\n", path,
               g->version, g->n_kv, g->n_tensors, total / 1048576.0);
        if (rope) printf("  rope in use: %s\n", rope);
        if (search) printf("  search projections: %s\n", search);
        for (uint64_t i = 0; i < g->n_kv; i++) {
            printf("  %-44.*s ", (int)g->kv[i].key.len, g->kv[i].key.data);
            print_value(stdout, &g->kv[i].value, 0);
            printf("\n");
        }
        printf("\n  %-36s %-6s %-24s %12s\n", "tensor", "type", "shape", "bytes");
        for (uint64_t i = 0; i < g->n_tensors; i++) {
            const gguf_tensor *t = &g->tensors[i];
            const ggml_type_traits *tr = ggml_type_get(t->type);
            char shape[64] = "";
            size_t o = 0;
            for (uint32_t d = 0; d < t->n_dims && o < sizeof shape; d++)
                o += (size_t)snprintf(shape + o, sizeof shape - o, "%s%" PRIu64, d ? " x " : "", t->ne[d]);
            printf("  %-36s %-6s %-24s %12" PRIu64 "\n", t->name, tr ? tr->name : "?", shape, t->n_bytes);
        }
    }
    gguf_close(g);
    return 0;
}
