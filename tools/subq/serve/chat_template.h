/* Chat templates: the prompt formats real GGUF models ship in
 * tokenizer.chat_template, recognised from the template text by the same
 * markers llama.cpp's built-in list uses, and applied without a Jinja
 * engine (each family's layout is written out here). */
#ifndef SUBQ_CHAT_TEMPLATE_H
#define SUBQ_CHAT_TEMPLATE_H

#include <stddef.h>

typedef struct chat_msg {
    char *role;     /* "system", "user", "assistant", ... */
    char *content;
} chat_msg;

typedef enum chat_tmpl {
    CHAT_CHATML = 0,         /* Qwen, SmolLM, OpenHermes: <|im_start|>role\n...<|im_end|>\n */
    CHAT_LLAMA2,             /* [INST] ... [/INST], system folded into the first turn */
    CHAT_LLAMA2_SYS,         /* ... with <<SYS>> blocks */
    CHAT_LLAMA2_SYS_BOS,     /* ... and <s> before every later turn */
    CHAT_LLAMA2_SYS_STRIP,   /* ... with messages stripped of surrounding space */
    CHAT_MISTRAL_V1,         /* " [INST] ... [/INST]" */
    CHAT_MISTRAL_V3,         /* "[INST] ...[/INST]", assistant replies trimmed */
    CHAT_MISTRAL_V3_TEKKEN,  /* "[INST]...[/INST]" */
    CHAT_MISTRAL_V7,         /* [SYSTEM_PROMPT] ... [/SYSTEM_PROMPT][INST] ...[/INST] */
    CHAT_LLAMA3,             /* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
    CHAT_GEMMA,              /* <start_of_turn>user|model\n...<end_of_turn>\n */
    CHAT_PHI3,               /* <|role|>\n...<|end|>\n */
    CHAT_COUNT
} chat_tmpl;

/* A template name ("chatml", "llama3", ...) -> kind; -1 when unknown. */
int chat_template_from_name(const char *name);
/* The kind of a tokenizer.chat_template text (a name is accepted too);
 * -1 when no known family's markers are in it. */
int chat_template_detect(const char *text);
const char *chat_template_name(chat_tmpl t);
/* "chatml, llama2, ..." for help and error messages. */
const char *chat_template_names(void);

/* The prompt for n messages, ending with the assistant's turn opened when
 * add_assistant (malloc'd, NUL-terminated; NULL when out of memory). */
char *chat_template_apply(chat_tmpl t, const chat_msg *msgs, int n, int add_assistant);

/* Text of the special token that ends an assistant turn ("<|im_end|>",
 * "<|eot_id|>", ...): generation stops there as at end-of-sequence. */
const char *chat_template_end_of_turn(chat_tmpl t);

#endif
