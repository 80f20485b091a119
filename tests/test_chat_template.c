/* Chat templates (tools/subq/serve/chat_template.c): detection from the
 * tokenizer.chat_template texts real models ship (excerpts of the official
 * templates: the markers are what matters), and the prompts of a fixed
 * conversation, written out by hand from each family's published format
 * (Qwen/ChatML, Llama-3, Llama-2 with <<SYS>>, Mistral v1/v3/v7, Gemma,
 * Phi-3). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/subq/serve/chat_template.h"
#include "test_util.h"

static chat_msg conv[] = {
    {"system", "You are a helpful assistant"},
    {"user", "Hello"},
    {"assistant", "Hi there"},
    {"user", "Who are you"},
};
#define N_CONV 4

static void expect(chat_tmpl t, const char *want) {
    char *got = chat_template_apply(t, conv, N_CONV, 1);
    CHECK(got && !strcmp(got, want), "%s:\n  got  %s\n  want %s", chat_template_name(t), got ? got : "(null)", want);
    free(got);
}

int main(void) {
    /* detection */
    struct {
        const char *text;
        int want;
    } det[] = {
        {"{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
         "'<|im_end|>' + '\\n'}}{% endfor %}", CHAT_CHATML},
        {"{%- if tools %}{{- '<|im_start|>system\\n' }}...Qwen...<|im_end|>", CHAT_CHATML},
        {"{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + "
         "message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + "
         "eos_token}}{% endif %}{% endfor %}", CHAT_LLAMA2},
        {"{% if messages[0]['role'] == 'system' %}...{{ bos_token + '[INST] ' + '<<SYS>>\\n' + content.strip() + "
         "'\\n<</SYS>>\\n\\n' }}", CHAT_LLAMA2_SYS_STRIP},
        {"...{{- '[AVAILABLE_TOOLS] [' }}...{{- '[INST] ' + message['content'] + '[/INST]' }}", CHAT_MISTRAL_V3},
        {"...{{- bos_token }}{{- '[SYSTEM_PROMPT]' + system_message + '[/SYSTEM_PROMPT]' }}{{- '[INST]' }}",
         CHAT_MISTRAL_V7},
        {"{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
         "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + "
         "'<|eot_id|>' %}", CHAT_LLAMA3},
        {"{{ bos_token }}{% for message in messages %}{{ '<start_of_turn>' + role + '\\n' + message['content'] | "
         "trim + '<end_of_turn>\\n' }}{% endfor %}", CHAT_GEMMA},
        {"{% for message in messages %}{{'<|' + message['role'] + '|>' + '\\n' + message['content'] + "
         "'<|end|>\\n' }}{% endfor %}{{ '<|assistant|>\\n' }}", CHAT_PHI3},
        {"llama3", CHAT_LLAMA3},
        {"{% for m in messages %}{{ m['content'] }}{% endfor %}", -1},
        {"<|im_start|>{{ role }}<|im_sep|>", -1}, /* Phi-4: not ChatML's layout */
    };
    for (size_t i = 0; i < sizeof det / sizeof det[0]; i++)
        CHECK(chat_template_detect(det[i].text) == det[i].want, "detect #%zu: got %d, want %d", i,
              chat_template_detect(det[i].text), det[i].want);
    CHECK(chat_template_from_name("nope") == -1, "unknown name");

    expect(CHAT_CHATML, "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"
                        "<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n"
                        "<|im_start|>assistant\n");
    expect(CHAT_LLAMA3, "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant<|eot_id|>"
                        "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
                        "<|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|>"
                        "<|start_header_id|>user<|end_header_id|>\n\nWho are you<|eot_id|>"
                        "<|start_header_id|>assistant<|end_header_id|>\n\n");
    expect(CHAT_LLAMA2_SYS, "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s>"
                            "[INST] Who are you [/INST]");
    expect(CHAT_LLAMA2, "[INST] You are a helpful assistant\nHello [/INST]Hi there</s>[INST] Who are you [/INST]");
    expect(CHAT_LLAMA2_SYS_BOS, "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s>"
                                "<s>[INST] Who are you [/INST]");
    expect(CHAT_MISTRAL_V1, " [INST] You are a helpful assistant\n\nHello [/INST] Hi there</s> [INST] Who are you [/INST]");
    expect(CHAT_MISTRAL_V3, "[INST] You are a helpful assistant\n\nHello[/INST] Hi there</s>[INST] Who are you[/INST]");
    expect(CHAT_MISTRAL_V3_TEKKEN, "[INST]You are a helpful assistant\n\nHello[/INST]Hi there</s>[INST]Who are you[/INST]");
    expect(CHAT_MISTRAL_V7, "[SYSTEM_PROMPT] You are a helpful assistant[/SYSTEM_PROMPT][INST] Hello[/INST] Hi there</s>"
                            "[INST] Who are you[/INST]");
    expect(CHAT_GEMMA, "<start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n"
                       "<start_of_turn>model\nHi there<end_of_turn>\n<start_of_turn>user\nWho are you<end_of_turn>\n"
                       "<start_of_turn>model\n");
    expect(CHAT_PHI3, "<|system|>\nYou are a helpful assistant<|end|>\n<|user|>\nHello<|end|>\n<|assistant|>\nHi there"
                      "<|end|>\n<|user|>\nWho are you<|end|>\n<|assistant|>\n");
    CHECK(!strcmp(chat_template_end_of_turn(CHAT_LLAMA3), "<|eot_id|>"), "llama3 end of turn");
    CHECK(!strcmp(chat_template_end_of_turn(CHAT_CHATML), "<|im_end|>"), "chatml end of turn");
    return test_summary();
}
