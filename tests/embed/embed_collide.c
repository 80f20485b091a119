/* A program that embeds subq and also defines names subq uses internally
 * (as a program linking ggml, or with its own helpers, would): it must link
 * against the public libsubq.a and run. Built against include/subq.h only. */
#include <stdio.h>
#include <stdlib.h>

#include "subq.h"

/* Same names as internal functions of subq (and of ggml). */
int gguf_find_tensor(int x) { return x + 1; }
int ggml_row_size(int x) { return x + 2; }
int matmul(int x) { return x + 3; }
int dot_rows(int x) { return x + 4; }
int lr_schedule(int x) { return x + 5; }
int tokenizer_encode(int x) { return x + 6; }

int main(void) {
    const char *shared = getenv("SUBQ_SHARED");
    char path[4096];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", shared ? shared : "../shared");
    subq_model *m = NULL;
    subq_error err = {0};
    if (subq_model_load(path, &m, &err)) {
        printf("FAIL: %s\n", err.msg);
        return 1;
    }
    subq_model_info info;
    subq_model_get_info(m, &info);
    int ours = gguf_find_tensor(0) + ggml_row_size(0) + matmul(0) + dot_rows(0) + lr_schedule(0) + tokenizer_encode(0);
    int ok = info.n_layer == 5 && info.n_vocab == 512 && ours == 21;
    subq_model_free(m);
    printf("%s: embedded subq beside same-named functions (layers %d, vocab %d)\n", ok ? "ok" : "FAIL", info.n_layer,
           info.n_vocab);
    return ok ? 0 : 1;
}
