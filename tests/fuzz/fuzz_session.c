/* libFuzzer target: session files (subq_context_load's reader). Arbitrary
 * bytes are opened as GGUF in memory and loaded into a stories260K context
 * with full attention and one with a window plan, and into a context of
 * synth's tiny-gemma3 (seed 1, f32) whose sliding layers keep rings of 12
 * rows (files may hold those layers' latest rows only); a load either
 * succeeds or leaves the context empty, and nothing may crash. A seed
 * corpus comes from `subq generate --prompt-cache` (make_corpus.py). The
 * model comes from $SUBQ_SHARED (default ../shared, else /work/shared). */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "api/session.h"
#include "fuzz_shared.h"

static subq_model *g_model;
static subq_model *g_sliding;
static subq_context *g_ctx[3];

static void load(void) {
    g_model = fuzz_stories_model("fuzz_session");
    subq_error err = {0};
    subq_context_params p = subq_context_default_params();
    p.n_ctx = 128;
    p.n_threads = 1;
    subq_attn_plan plan = subq_attn_plan_default();
    plan.selector = SUBQ_SELECT_WINDOW;
    plan.top_k = 8;
    if (subq_context_new(g_model, &p, &g_ctx[0], &err) ||
        subq_context_new(g_model, &p, &g_ctx[1], &err) || subq_context_set_plan(g_ctx[1], &plan, NULL, NULL, &err)) {
        fprintf(stderr, "fuzz_session: %s\n", err.msg);
        abort();
    }
    char path[1024];
    const char *tmp = getenv("SUBQ_TMP");
    snprintf(path, sizeof path, "%s/fuzz_session_%d.gguf", tmp && *tmp ? tmp : "/tmp", (int)getpid());
    p.n_ctx = 64;
    p.n_batch = 4;
    if (subq_synth_model("tiny-gemma3", "f32", 1, path, &err) || subq_model_load(path, &g_sliding, &err) ||
        subq_context_new(g_sliding, &p, &g_ctx[2], &err)) {
        fprintf(stderr, "fuzz_session: %s\n", err.msg);
        abort();
    }
    unlink(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_model) load();
    gguf_file *f;
    subq_error err;
    if (gguf_open_memory(data, size, &f, &err)) return 0;
    for (int i = 0; i < 3; i++)
        if (session_load_gguf(g_ctx[i], f, &err) && subq_context_n_past(g_ctx[i]) != 0) abort();
    gguf_close(f);
    return 0;
}
