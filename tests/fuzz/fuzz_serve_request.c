/* libFuzzer target: the request bodies of subq serve. Arbitrary bytes go
 * through serve_parse_request as a completions and as a chat completions
 * body; a body that parses is formatted with every chat template. Nothing
 * may crash or leak; a refused body must come with a message. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tools/subq/serve/serve.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    for (int chat = 0; chat < 2; chat++) {
        serve_request r;
        char msg[512] = "", param[64];
        if (serve_parse_request((const char *)data, size, chat, &r, msg, sizeof msg, param, sizeof param)) {
            if (!msg[0]) abort();
            continue;
        }
        for (int t = 0; chat && t < CHAT_COUNT; t++) free(chat_template_apply((chat_tmpl)t, r.msgs, r.n_msgs, 1));
        serve_request_free(&r);
    }
    return 0;
}
