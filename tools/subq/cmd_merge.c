/* subq merge / subq split: search projections into and out of a model file,
 * in the layout ann-sparseattention's llama.cpp runtime loads. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const char *merge_help =
    "usage: subq merge -m MODEL.gguf --search S.gguf -o MERGED.gguf [--topk K] [--type f16|f32|bf16] [--force]\n"
    "Write the model with search projections merged in, in the layout of the\n"
    "ann-sparseattention llama.cpp runtime (branch feat/llama-ann-runtime):\n"
    "blk.N.indexer.proj.weight / blk.N.indexer.attn_k.weight and\n"
    "{arch}.attention.indexer.{head_count,key_length,top_k}, ann_sparse.layers.\n"
    "Every tensor and key of the model stays as it is; subq runs the result\n"
    "sparse with no --search flag, and subq split writes the projections back.\n\n"
    "  -m, --model FILE     model GGUF (projections it already carries are replaced)\n"
    "  --search FILE        projections for this model (subq train-search, or a merged model)\n"
    "  -o, --output FILE    merged model (written atomically)\n"
    "  --topk K             the runtime's top-K, {arch}.attention.indexer.top_k (default 128)\n"
    "  --type T             element type of the merged matrices: f16 (default, as the\n"
    "                       runtime's merge script), f32 (exact) or bf16\n"
    "  --force              replace an existing output file (without it, one is refused)\n";

static const char *split_help =
    "usage: subq split -m MERGED.gguf -o S.gguf [--force]\n"
    "Write the search projections merged into a model file (by subq merge or the\n"
    "ann-sparseattention merge script) as a projection file for --search.\n\n"
    "  -m, --model FILE     model GGUF with merged projections\n"
    "  -o, --output FILE    projection file (written atomically)\n"
    "  --force              replace an existing output file (without it, one is refused)\n";

int cmd_merge(int argc, char **argv) {
    const char *cmd = "merge";
    const char *model = NULL, *search = NULL, *out = NULL;
    subq_merge_params p = subq_merge_default_params();
    int force = 0;
    const cli_flag flags[] = {
        CLI_STRING("-m", "--model", &model), CLI_STRING(NULL, "--search", &search),
        CLI_STRING("-o", "--output", &out),  CLI_INT(NULL, "--topk", &p.top_k, 1, 1 << 20),
        CLI_STRING(NULL, "--type", &p.type), CLI_SET(NULL, "--force", &force),
    };
    int rc;
    if (!cli_parse_flags(cmd, merge_help, argc, argv, flags, sizeof flags / sizeof flags[0], &rc)) return rc;
    if (strcmp(p.type, "f16") && strcmp(p.type, "f32") && strcmp(p.type, "bf16"))
        return cli_error(cmd, "--type expects f16, f32 or bf16, got '%s'", p.type);
    if (!model || !search || !out) return cli_error(cmd, "-m MODEL, --search FILE and -o OUT are required");
    if (!cli_output_ok(cmd, out, force)) return 1;
    subq_error err = {0};
    if (subq_search_merge(model, search, &p, out, &err)) return cli_error(cmd, "%s", err.msg);
    subq_search_info si;
    if (subq_search_info_file(out, &si, &err)) return cli_error(cmd, "%s", err.msg);
    fprintf(stderr, "subq merge: wrote %s: layers %s, d_search %d, %s, top-k %d\n", out, si.layers, si.d_search,
            si.type, si.top_k);
    /* the runtime's loader reads the indexer tensors of Qwen3 models only */
    if (strcmp(si.arch, "qwen3"))
        fprintf(stderr, "subq merge: note: the ann-sparseattention runtime reads them for qwen3 models only; this "
                "one is %s\n", si.arch);
    return 0;
}

int cmd_split(int argc, char **argv) {
    const char *cmd = "split";
    const char *model = NULL, *out = NULL;
    int force = 0;
    const cli_flag flags[] = {
        CLI_STRING("-m", "--model", &model),
        CLI_STRING("-o", "--output", &out),
        CLI_SET(NULL, "--force", &force),
    };
    int rc;
    if (!cli_parse_flags(cmd, split_help, argc, argv, flags, sizeof flags / sizeof flags[0], &rc)) return rc;
    if (!model || !out) return cli_error(cmd, "-m MERGED and -o OUT are required");
    if (!cli_output_ok(cmd, out, force)) return 1;
    subq_error err = {0};
    if (subq_search_split(model, out, &err)) return cli_error(cmd, "%s", err.msg);
    subq_search_info si;
    if (subq_search_info_file(out, &si, &err)) return cli_error(cmd, "%s", err.msg);
    fprintf(stderr, "subq split: wrote %s: layers %s, d_search %d\n", out, si.layers, si.d_search);
    return 0;
}
