/* subq info: metadata and tensor table of a GGUF file. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const char *help =
    "usage: subq info -m FILE [--json] | --kv-file FILE [--verify] [--json] | --features\n"
    "Show a GGUF file's header, metadata and tensor table, or what a KV file holds.\n\n"
    "  -m, --model FILE     GGUF file\n"
    "  --kv-file FILE       a KV file (generate --kv-file): its model, shape and tokens held; a\n"
    "                       file a process writes reads as that process last committed it\n"
    "  --verify             with --kv-file: check every committed slot's checksum and that its\n"
    "                       rows are finite (a resume checks the latest 1 GiB of slots only), and\n"
    "                       that the newest header slot is whole (else: what the older one loses)\n"
    "  --json               machine-readable output\n"
    "  --features           list the optional features this build has\n";

/* Text from the file, at most max bytes of it, for a terminal: control
 * characters (C0, DEL and the UTF-8 forms of C1, which a crafted file could
 * use to drive the terminal) as \xNN / \u00NN; padded with spaces to
 * width columns. */
static void print_text(const char *s, size_t n, size_t max, int width) {
    int cols = 0;
    for (size_t i = 0; i < n && i < max; i++) {
        const unsigned char b = (unsigned char)s[i];
        if (b < 0x20 || b == 0x7f) {
            cols += printf("\\x%02x", b);
        } else if (b == 0xc2 && i + 1 < n && (unsigned char)s[i + 1] >= 0x80 && (unsigned char)s[i + 1] <= 0x9f) {
            cols += printf("\\u00%02x", (unsigned char)s[++i]);
        } else {
            putchar(b);
            cols += (b & 0xc0) != 0x80; /* one column per character */
        }
    }
    if (n > max) cols += printf("...");
    for (; cols < width; cols++) putchar(' ');
}

static void print_scalar(const subq_value *v, int json) {
    switch (v->kind) {
    case SUBQ_VALUE_UINT: printf("%" PRIu64, v->u); break;
    case SUBQ_VALUE_INT: printf("%" PRId64, v->i); break;
    case SUBQ_VALUE_FLOAT:
        if (json) cli_json_num(stdout, v->f);
        else printf("%.9g", v->f);
        break;
    case SUBQ_VALUE_BOOL: fputs(v->u ? "true" : "false", stdout); break;
    case SUBQ_VALUE_STRING:
        if (json) cli_json_string(stdout, v->str, v->str_len);
        else {
            putchar('"');
            print_text(v->str, v->str_len, 60, 0);
            putchar('"');
        }
        break;
    default: /* an array inside an array: its type and count only */
        if (json) printf("{\"array\": \"%s\", \"n\": %" PRIu64 ", \"head\": []}", v->elem_type, v->n);
        else printf("[%s x %" PRIu64 "]", v->elem_type, v->n);
    }
}

/* Pair i's value; arrays: element type, count and the first few elements. */
static void print_value(const subq_gguf *g, uint64_t i, const subq_value *v, int json) {
    if (v->kind != SUBQ_VALUE_ARRAY) {
        print_scalar(v, json);
        return;
    }
    uint64_t show = v->n < 8 ? v->n : 8;
    if (json) printf("{\"array\": \"%s\", \"n\": %" PRIu64 ", \"head\": [", v->elem_type, v->n);
    else printf("[%s x %" PRIu64 "] [", v->elem_type, v->n);
    for (uint64_t j = 0; j < show; j++) {
        subq_value e;
        if (j) fputs(", ", stdout);
        if (subq_gguf_kv_item(g, i, j, &e, NULL) == SUBQ_OK) print_scalar(&e, json);
    }
    if (json) fputs("]}", stdout);
    else printf("%s]", show < v->n ? ", ..." : "");
}

static int print_features(int json) {
    const char *names[] = {"openblas", "openmp", "faiss", "hnsw"};
    /* faiss is optional at build time; hnswlib is required by the build */
    const int have[] = {1, 1, subq_selector_available(SUBQ_SELECT_FAISS), subq_selector_available(SUBQ_SELECT_HNSW)};
    for (size_t i = 0; i < 4; i++) {
        if (json) printf("%s\"%s\": %s", i ? ", " : "{", names[i], have[i] ? "true" : "false");
        else printf("%-10s %s\n", names[i], have[i] ? "yes" : "no");
    }
    if (json) printf("}\n");
    return 0;
}

/* --kv-file: the header, and every slot verified with --verify (a damaged
 * newest header slot fails it; without --verify it is a warning line). */
static int print_kv_file(const char *cmd, const char *path, int verify, int json) {
    subq_kv_file_info k;
    subq_error err = {0};
    if (subq_kv_file_inspect(path, verify, &k, &err))
        return strstr(err.msg, path) ? cli_error(cmd, "%s", err.msg) : cli_error(cmd, "%s: %s", path, err.msg);
    if (k.header_damaged) {
        char lost[96] = "how many the newest counted cannot be read";
        if (k.n_committed_newest > k.n_committed)
            snprintf(lost, sizeof lost, "%d fewer than the newest (%d)", k.n_committed_newest - k.n_committed,
                     k.n_committed_newest);
        else if (k.n_committed_newest >= 0)
            snprintf(lost, sizeof lost, "the newest counted %d", k.n_committed_newest);
        fprintf(stderr, "subq %s: warning: KV file %s: the newest header slot is damaged; the older slot counts %d "
                "committed tokens, %s (resuming from it needs --kv-recover)\n", cmd, path, k.n_committed, lost);
    }
    char fp[17];
    snprintf(fp, sizeof fp, "%016" PRIx64, k.model_fingerprint);
    if (json) {
        printf("{\"kv_file\": ");
        cli_json_string(stdout, path, strlen(path));
        printf(", \"model_fingerprint\": \"%s\", \"kv_type\": \"%s\", \"n_ctx\": %d, \"n_committed\": %d, "
               "\"has_logits\": %s, \"n_layer\": %d, \"n_head_kv\": %d, \"head_dim\": %d, \"n_vocab\": %d, "
               "\"n_search_layers\": %d, \"n_head_major_layers\": %d, \"file_bytes\": %" PRIu64,
               fp, subq_kv_type_name(k.kv_type), k.n_ctx, k.n_committed, k.has_logits ? "true" : "false", k.n_layer,
               k.n_head_kv, k.head_dim, k.n_vocab, k.n_search_layers, k.n_head_major_layers, k.file_bytes);
        if (verify) printf(", \"verified\": true, \"verify_s\": %.3f", k.verify_s);
        printf(", \"header_damaged\": %s", k.header_damaged ? "true" : "false");
        if (k.header_damaged && k.n_committed_newest >= 0) printf(", \"n_committed_newest\": %d", k.n_committed_newest);
        if (k.writer_pid) printf(", \"writer_pid\": %ld", k.writer_pid);
        printf(", \"n_graph_layers\": %d, \"n_graph_tokens\": %d}\n", k.n_graph_layers, k.n_graph_tokens);
        return 0;
    }
    printf("%s: KV file of model %s, %s cache, %d of %d tokens committed%s, %.2f GB\n", path, fp,
           subq_kv_type_name(k.kv_type), k.n_committed, k.n_ctx, k.has_logits ? " (with the last logits)" : "",
           k.file_bytes / 1e9);
    printf("  %d layers x %d KV heads x %d, vocabulary %d, search keys of %d sparse layers\n", k.n_layer, k.n_head_kv,
           k.head_dim, k.n_vocab, k.n_search_layers);
    printf("  rows: %d layers head-major (read whole), %d slot-major (read where retrieval points)\n",
           k.n_head_major_layers, k.n_layer - k.n_head_major_layers);
    if (k.n_graph_layers > 0)
        printf("  HNSW graphs of %d layers over %d tokens in %s.hnsw (%s)\n", k.n_graph_layers, k.n_graph_tokens,
               path, k.n_graph_tokens > k.n_committed ? "more than committed: a resume rebuilds them"
                     : k.n_graph_tokens < k.n_committed ? "a resume reads them and inserts the tokens after"
                                                         : "a resume reads them");
    if (k.writer_pid > 0) printf("  in use by process %ld: what it has committed so far\n", k.writer_pid);
    else if (k.writer_pid) printf("  in use by another process: what it has committed so far\n");
    if (verify) printf("  verified: %d slots in %.2f s\n", k.n_committed, k.verify_s);
    return 0;
}

int cmd_info(int argc, char **argv) {
    const char *cmd = "info";
    const char *path = NULL, *kv_path = NULL;
    int json = 0, features = 0, verify = 0;
    const cli_flag flags[] = {
        CLI_STRING("-m", "--model", &path), CLI_SET(NULL, "--json", &json),
        CLI_SET(NULL, "--features", &features), CLI_STRING(NULL, "--kv-file", &kv_path),
        CLI_SET(NULL, "--verify", &verify),
    };
    int rc;
    if (!cli_parse_flags(cmd, help, argc, argv, flags, sizeof flags / sizeof flags[0], &rc)) return rc;
    if (features) return print_features(json);
    if (verify && !kv_path) return cli_error(cmd, "--verify checks a KV file: give --kv-file FILE");
    if (kv_path && path) return cli_error(cmd, "give one of -m and --kv-file");
    if (kv_path) return print_kv_file(cmd, kv_path, verify, json);
    if (!path) return cli_error(cmd, "no file given; use -m FILE.gguf");
    subq_error err = {0};
    subq_gguf *g;
    if (subq_gguf_open(path, &g, &err)) return cli_error(cmd, "%s", err.msg);
    subq_gguf_header h;
    subq_gguf_get_header(g, &h);
    char rope[512];
    int has_rope = subq_gguf_describe_rope(g, rope, sizeof rope);
    char attention[1024];
    subq_gguf_describe_attention(g, attention, sizeof attention);
    /* search projections the file carries (a projection file, or merged into a model) */
    subq_search_info si;
    subq_error serr = {0};
    char search[600];
    subq_status ss = subq_search_info_file(path, &si, &serr);
    if (!ss)
        snprintf(search, sizeof search, "%s, layers %s (%d), d_search %d, %s", si.merged ? "merged into the model "
                 "(ann-sparseattention runtime layout; runs sparse with no --search)" : "projection file",
                 si.layers, si.n_layers, si.d_search, si.type);
    else if (ss != SUBQ_ERR_RANGE)
        snprintf(search, sizeof search, "unusable: %.500s", serr.msg);
    if (!ss && si.rope_dims)
        snprintf(search + strlen(search), sizeof search - strlen(search),
                 ", the last %d dims rotated by position (base %g, scale %g)", si.rope_dims, (double)si.rope_base,
                 (double)si.rope_scale);
    if (!ss && si.granularity != SUBQ_SEARCH_LAYER)
        snprintf(search + strlen(search), sizeof search - strlen(search), ", one set per %s (%d query / %d key search "
                 "heads)", si.granularity == SUBQ_SEARCH_HEAD ? "query head" : "KV head", si.n_query_heads,
                 si.n_key_heads);
    if (!ss && si.merged && si.top_k)
        snprintf(search + strlen(search), sizeof search - strlen(search), ", top-k %d", si.top_k);
    if (json) {
        printf("{\"file\": ");
        cli_json_string(stdout, path, strlen(path));
        if (has_rope) {
            printf(", \"rope\": ");
            cli_json_string(stdout, rope, strlen(rope));
            printf(", \"attention\": ");
            cli_json_string(stdout, attention, strlen(attention));
        }
        if (!ss) {
            printf(", \"search\": {\"merged\": %s, \"layers\": ", si.merged ? "true" : "false");
            cli_json_string(stdout, si.layers, strlen(si.layers));
            printf(", \"n_layers\": %d, \"d_search\": %d, \"type\": \"%s\", \"top_k\": %d, \"rope_dims\": %d",
                   si.n_layers, si.d_search, si.type, si.top_k, si.rope_dims);
            if (si.rope_dims)
                printf(", \"rope_base\": %g, \"rope_scale\": %g", (double)si.rope_base, (double)si.rope_scale);
            printf(", \"granularity\": \"%s\", \"query_heads\": %d, \"key_heads\": %d",
                   subq_search_granularity_name(si.granularity),
                   si.n_query_heads, si.n_key_heads);
            printf("}");
        } else if (ss != SUBQ_ERR_RANGE) {
            printf(", \"search_error\": ");
            cli_json_string(stdout, serr.msg, strlen(serr.msg));
        }
        printf(", \"version\": %u, \"n_kv\": %" PRIu64 ", \"n_tensors\": %" PRIu64 ", \"alignment\": %" PRIu64
               ", \"tensor_bytes\": %" PRIu64 ",\n \"metadata\": {",
               h.version, h.n_kv, h.n_tensors, h.alignment, h.tensor_bytes);
    } else {
        printf("%s: GGUF v%u, %" PRIu64 " metadata keys, %" PRIu64 " tensors, %.2f MiB of tensor data\n", path, h.version,
               h.n_kv, h.n_tensors, h.tensor_bytes / 1048576.0);
        if (has_rope) printf("  rope in use: %s\n  attention: %s\n", rope, attention);
        printf("  kernels in use: %s\n", subq_isa_name()); /* (their rounding: tests/ref/check_logits.py) */
        if (ss != SUBQ_ERR_RANGE) printf("  search projections: %s\n", search);
    }
    for (uint64_t i = 0; i < h.n_kv; i++) {
        const char *key;
        size_t key_len;
        subq_value v;
        if (subq_gguf_kv(g, i, &key, &key_len, &v, &err)) break;
        if (json) {
            printf("%s\n  ", i ? "," : "");
            cli_json_string(stdout, key, key_len);
            printf(": ");
        } else {
            printf("  ");
            print_text(key, key_len, key_len, 44);
            putchar(' ');
        }
        print_value(g, i, &v, json);
        if (!json) printf("\n");
    }
    if (json) printf("},\n \"tensors\": [");
    else printf("\n  %-36s %-6s %-24s %12s\n", "tensor", "type", "shape", "bytes");
    for (uint64_t i = 0; i < h.n_tensors; i++) {
        subq_gguf_tensor t;
        if (subq_gguf_tensor_info(g, i, &t, &err)) break;
        if (json) {
            printf("%s\n  {\"name\": ", i ? "," : "");
            cli_json_string(stdout, t.name, strlen(t.name));
            printf(", \"type\": \"%s\", \"shape\": [", t.type_name);
            for (uint32_t d = 0; d < t.n_dims; d++) printf("%s%" PRIu64, d ? ", " : "", t.ne[d]);
            printf("], \"offset\": %" PRIu64 ", \"bytes\": %" PRIu64 "}", t.offset, t.n_bytes);
        } else {
            char shape[64] = "";
            size_t o = 0;
            for (uint32_t d = 0; d < t.n_dims && o < sizeof shape; d++)
                o += (size_t)snprintf(shape + o, sizeof shape - o, "%s%" PRIu64, d ? " x " : "", t.ne[d]);
            printf("  ");
            print_text(t.name, strlen(t.name), strlen(t.name), 36);
            printf(" %-6s %-24s %12" PRIu64 "\n", t.type_name, shape, t.n_bytes);
        }
    }
    if (json) printf("]}\n");
    subq_gguf_close(g);
    return 0;
}
