/* Chat templates (see chat_template.h). Each family's layout follows what
 * its official template renders, in the form llama.cpp's built-in
 * formatter writes it (so the same GGUF gets the same prompt here). */
#include "chat_template.h"

#include <ctype.h>
#include <string.h>

#include "strbuf.h"

static const char *const names[CHAT_COUNT] = {
    "chatml", "llama2", "llama2-sys", "llama2-sys-bos", "llama2-sys-strip", "mistral-v1",
    "mistral-v3", "mistral-v3-tekken", "mistral-v7", "llama3", "gemma", "phi3",
};

int chat_template_from_name(const char *name) {
    for (int i = 0; name && i < CHAT_COUNT; i++)
        if (!strcmp(name, names[i])) return i;
    return -1;
}

const char *chat_template_name(chat_tmpl t) { return (int)t >= 0 && t < CHAT_COUNT ? names[t] : "?"; }

const char *chat_template_names(void) {
    return "chatml, llama2, llama2-sys, llama2-sys-bos, llama2-sys-strip, mistral-v1, mistral-v3, "
           "mistral-v3-tekken, mistral-v7, llama3, gemma, phi3";
}

static int has(const char *text, const char *marker) { return strstr(text, marker) != NULL; }

int chat_template_detect(const char *t) {
    int named = chat_template_from_name(t);
    if (named >= 0) return named;
    if (has(t, "<|im_start|>"))
        /* Phi-4 (<|im_sep|>) and SmolVLM (<end_of_utterance>) use the marker but not the layout */
        return has(t, "<|im_sep|>") || has(t, "<end_of_utterance>") ? -1 : CHAT_CHATML;
    if (!strncmp(t, "mistral", 7) || has(t, "[INST]")) {
        if (has(t, "[SYSTEM_PROMPT]")) return CHAT_MISTRAL_V7;
        if (has(t, "' [INST] ' + system_message") || has(t, "[AVAILABLE_TOOLS]")) { /* official Mistral ones */
            if (has(t, " [INST]")) return CHAT_MISTRAL_V1;
            if (has(t, "\"[INST]\"")) return CHAT_MISTRAL_V3_TEKKEN;
            return CHAT_MISTRAL_V3;
        }
        if (has(t, "content.strip()")) return CHAT_LLAMA2_SYS_STRIP;
        if (has(t, "bos_token + '[INST]")) return CHAT_LLAMA2_SYS_BOS;
        if (has(t, "<<SYS>>")) return CHAT_LLAMA2_SYS;
        return CHAT_LLAMA2;
    }
    if (has(t, "<|assistant|>") && has(t, "<|end|>")) return CHAT_PHI3;
    if (has(t, "<start_of_turn>")) return CHAT_GEMMA;
    if (has(t, "<|start_header_id|>") && has(t, "<|end_header_id|>")) return CHAT_LLAMA3;
    return -1;
}

const char *chat_template_end_of_turn(chat_tmpl t) {
    switch (t) {
    case CHAT_CHATML: return "<|im_end|>";
    case CHAT_LLAMA3: return "<|eot_id|>";
    case CHAT_GEMMA: return "<end_of_turn>";
    case CHAT_PHI3: return "<|end|>";
    default: return "</s>";
    }
}

/* content without leading and trailing white space */
static void put_trimmed(strbuf *b, const char *s) {
    size_t a = 0, n = strlen(s);
    while (a < n && isspace((unsigned char)s[a])) a++;
    while (n > a && isspace((unsigned char)s[n - 1])) n--;
    sb_put(b, s + a, n - a);
}

static int is_role(const chat_msg *m, const char *role) { return !strcmp(m->role, role); }

/* Llama-2 and its variants: one [INST] block per user turn, the system
 * message inside the first one. */
static void llama2(strbuf *b, chat_tmpl t, const chat_msg *msgs, int n) {
    int sys = t != CHAT_LLAMA2, bos_inside = t == CHAT_LLAMA2_SYS_BOS, strip = t == CHAT_LLAMA2_SYS_STRIP;
    int inside = 1; /* the first [INST] follows the BOS the tokenizer adds */
    sb_puts(b, "[INST] ");
    for (int i = 0; i < n; i++) {
        const chat_msg *m = &msgs[i];
        if (!inside) {
            inside = 1;
            sb_puts(b, bos_inside ? "<s>[INST] " : "[INST] ");
        }
        if (is_role(m, "system")) sb_puts(b, sys ? "<<SYS>>\n" : "");
        if (strip) put_trimmed(b, m->content);
        else sb_puts(b, m->content);
        if (is_role(m, "system")) {
            sb_puts(b, sys ? "\n<</SYS>>\n\n" : "\n");
        } else if (is_role(m, "user")) {
            sb_puts(b, " [/INST]");
        } else {
            sb_puts(b, "</s>");
            inside = 0;
        }
    }
}

/* Mistral v1 / v3 / v3-tekken: [INST] blocks, system text first inside one. */
static void mistral(strbuf *b, chat_tmpl t, const chat_msg *msgs, int n) {
    const char *lead = t == CHAT_MISTRAL_V1 ? " " : "", *trail = t == CHAT_MISTRAL_V3_TEKKEN ? "" : " ";
    int inside = 0;
    for (int i = 0; i < n; i++) {
        const chat_msg *m = &msgs[i];
        if (!inside) {
            sb_puts(b, lead);
            sb_puts(b, "[INST]");
            sb_puts(b, trail);
            inside = 1;
        }
        if (is_role(m, "system")) {
            sb_puts(b, m->content);
            sb_puts(b, "\n\n");
        } else if (is_role(m, "user")) {
            sb_puts(b, m->content);
            sb_puts(b, lead);
            sb_puts(b, "[/INST]");
        } else {
            sb_puts(b, trail);
            if (t == CHAT_MISTRAL_V3) put_trimmed(b, m->content);
            else sb_puts(b, m->content);
            sb_puts(b, "</s>");
            inside = 0;
        }
    }
}

/* Gemma: no system role (its text opens the next user turn); the
 * assistant is "model"; contents are trimmed. */
static void gemma(strbuf *b, const chat_msg *msgs, int n, int add_assistant) {
    strbuf sys = {0};
    for (int i = 0; i < n; i++) {
        const chat_msg *m = &msgs[i];
        if (is_role(m, "system")) {
            put_trimmed(&sys, m->content);
            continue;
        }
        int model = is_role(m, "assistant");
        sb_puts(b, "<start_of_turn>");
        sb_puts(b, model ? "model" : m->role);
        sb_puts(b, "\n");
        if (sys.n && !model) {
            sb_put(b, sys.p, sys.n);
            sb_puts(b, "\n\n");
            sys.n = 0;
        }
        put_trimmed(b, m->content);
        sb_puts(b, "<end_of_turn>\n");
    }
    b->oom |= sys.oom;
    sb_free(&sys);
    if (add_assistant) sb_puts(b, "<start_of_turn>model\n");
}

/* Templates that frame every message alike: OPEN role MID content CLOSE
 * (content trimmed when `trim`), then ASSISTANT to open the reply. */
typedef struct framed_tmpl {
    const char *open, *mid, *close, *assistant;
    int trim;
} framed_tmpl;

static const framed_tmpl chatml = {"<|im_start|>", "\n", "<|im_end|>\n", "<|im_start|>assistant\n", 0};
static const framed_tmpl llama3 = {"<|start_header_id|>", "<|end_header_id|>\n\n", "<|eot_id|>",
                                   "<|start_header_id|>assistant<|end_header_id|>\n\n", 1};
static const framed_tmpl phi3 = {"<|", "|>\n", "<|end|>\n", "<|assistant|>\n", 0};

static void framed(strbuf *b, const framed_tmpl *f, const chat_msg *msgs, int n, int add_assistant) {
    for (int i = 0; i < n; i++) {
        sb_puts(b, f->open);
        sb_puts(b, msgs[i].role);
        sb_puts(b, f->mid);
        if (f->trim) put_trimmed(b, msgs[i].content);
        else sb_puts(b, msgs[i].content);
        sb_puts(b, f->close);
    }
    if (add_assistant) sb_puts(b, f->assistant);
}

char *chat_template_apply(chat_tmpl t, const chat_msg *msgs, int n, int add_assistant) {
    strbuf b = {0};
    switch (t) {
    case CHAT_CHATML: framed(&b, &chatml, msgs, n, add_assistant); break;
    case CHAT_LLAMA2:
    case CHAT_LLAMA2_SYS:
    case CHAT_LLAMA2_SYS_BOS:
    case CHAT_LLAMA2_SYS_STRIP: llama2(&b, t, msgs, n); break;
    case CHAT_MISTRAL_V1:
    case CHAT_MISTRAL_V3:
    case CHAT_MISTRAL_V3_TEKKEN: mistral(&b, t, msgs, n); break;
    case CHAT_MISTRAL_V7:
        for (int i = 0; i < n; i++) {
            const chat_msg *m = &msgs[i];
            int sys = is_role(m, "system"), user = is_role(m, "user");
            sb_puts(&b, sys ? "[SYSTEM_PROMPT] " : user ? "[INST] " : " ");
            sb_puts(&b, m->content);
            sb_puts(&b, sys ? "[/SYSTEM_PROMPT]" : user ? "[/INST]" : "</s>");
        }
        break;
    case CHAT_LLAMA3: framed(&b, &llama3, msgs, n, add_assistant); break;
    case CHAT_GEMMA: gemma(&b, msgs, n, add_assistant); break;
    case CHAT_PHI3: framed(&b, &phi3, msgs, n, add_assistant); break;
    default: break;
    }
    return sb_take(&b);
}
