// Chat templates: family detection from template texts (llama.cpp's marker rules) and the
// rendered prompt of a two-turn conversation per family, against the families' documented formats.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "loom/model/chat.h"

namespace {

using loom::ChatMessage;
using loom::ChatTemplate;

const std::vector<ChatMessage> kChat = {{"system", "You are helpful."},
                                        {"user", "hello"},
                                        {"assistant", "hi there"},
                                        {"user", "how are you"}};

std::string render(const char* name, bool add_assistant = true) {
  auto t = loom::chat_template_from_name(name);
  EXPECT_TRUE(t.has_value()) << name;
  return t ? loom::render_chat(*t, kChat, add_assistant) : "";
}

TEST(ChatTemplate, ChatMl) {
  EXPECT_EQ(render("chatml"),
            "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nhello<|im_end|>\n"
            "<|im_start|>assistant\nhi there<|im_end|>\n<|im_start|>user\nhow are you<|im_end|>\n"
            "<|im_start|>assistant\n");
  const std::string closed = render("chatml", false);
  EXPECT_TRUE(closed.ends_with("how are you<|im_end|>\n")) << "without the assistant's opening: " << closed;
}

TEST(ChatTemplate, Llama2) {
  EXPECT_EQ(render("llama2-sys"), "[INST] <<SYS>>\nYou are helpful.\n<</SYS>>\n\nhello [/INST]hi there</s>[INST] how are you [/INST]");
  EXPECT_EQ(render("llama2"), "[INST] You are helpful.\nhello [/INST]hi there</s>[INST] how are you [/INST]");
  EXPECT_EQ(render("llama2-sys-bos"),
            "[INST] <<SYS>>\nYou are helpful.\n<</SYS>>\n\nhello [/INST]hi there</s><s>[INST] how are you [/INST]");
}

TEST(ChatTemplate, Llama3) {
  EXPECT_EQ(render("llama3"),
            "<|start_header_id|>system<|end_header_id|>\n\nYou are helpful.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nhello<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nhi there<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nhow are you<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, Llama4) {
  EXPECT_EQ(render("llama4"),
            "<|header_start|>system<|header_end|>\n\nYou are helpful.<|eot|>"
            "<|header_start|>user<|header_end|>\n\nhello<|eot|>"
            "<|header_start|>assistant<|header_end|>\n\nhi there<|eot|>"
            "<|header_start|>user<|header_end|>\n\nhow are you<|eot|>"
            "<|header_start|>assistant<|header_end|>\n\n");
}

TEST(ChatTemplate, Mistral) {
  EXPECT_EQ(render("mistral-v7"),
            "[SYSTEM_PROMPT] You are helpful.[/SYSTEM_PROMPT][INST] hello[/INST] hi there</s>[INST] how are you[/INST]");
  EXPECT_EQ(render("mistral-v3"), "[INST] You are helpful.\n\nhello[/INST] hi there</s>[INST] how are you[/INST]");
  EXPECT_EQ(render("mistral-v1"), " [INST] You are helpful.\n\nhello [/INST] hi there</s> [INST] how are you [/INST]");
  EXPECT_EQ(render("mistral-v3-tekken"), "[INST]You are helpful.\n\nhello[/INST]hi there</s>[INST]how are you[/INST]");
  EXPECT_EQ(render("mistral-v7-tekken"),
            "[SYSTEM_PROMPT]You are helpful.[/SYSTEM_PROMPT][INST]hello[/INST]hi there</s>[INST]how are you[/INST]");
}

TEST(ChatTemplate, Gemma) {
  // no system role: the system text opens the first user turn
  EXPECT_EQ(render("gemma"),
            "<start_of_turn>user\nYou are helpful.\n\nhello<end_of_turn>\n<start_of_turn>model\nhi there<end_of_turn>\n"
            "<start_of_turn>user\nhow are you<end_of_turn>\n<start_of_turn>model\n");
}

TEST(ChatTemplate, Phi) {
  EXPECT_EQ(render("phi3"),
            "<|system|>\nYou are helpful.<|end|>\n<|user|>\nhello<|end|>\n<|assistant|>\nhi there<|end|>\n"
            "<|user|>\nhow are you<|end|>\n<|assistant|>\n");
  EXPECT_EQ(render("phi4"),
            "<|im_start|>system<|im_sep|>You are helpful.<|im_end|><|im_start|>user<|im_sep|>hello<|im_end|>"
            "<|im_start|>assistant<|im_sep|>hi there<|im_end|><|im_start|>user<|im_sep|>how are you<|im_end|>"
            "<|im_start|>assistant<|im_sep|>");
}

TEST(ChatTemplate, DeepSeek) {
  EXPECT_EQ(render("deepseek"),
            "You are helpful.### Instruction:\nhello\n### Response:\nhi there\n<|EOT|>\n### Instruction:\nhow are "
            "you\n### Response:\n");
  EXPECT_EQ(render("deepseek2"), "You are helpful.\n\nUser: hello\n\nAssistant: hi there<｜end▁of▁sentence｜>User: how are you\n\nAssistant:");
  EXPECT_EQ(render("deepseek3"),
            "You are helpful.\n\n<｜User｜>hello<｜Assistant｜>hi there<｜end▁of▁sentence｜><｜User｜>how are you<｜Assistant｜>");
}

TEST(ChatTemplate, GptOssHarmony) {
  EXPECT_EQ(render("gpt-oss"),
            "<|start|>system<|message|>You are helpful.<|end|><|start|>user<|message|>hello<|end|>"
            "<|start|>assistant<|channel|>final<|message|>hi there<|end|><|start|>user<|message|>how are you<|end|>"
            "<|start|>assistant");
}

TEST(ChatTemplate, Granite) {
  EXPECT_EQ(render("granite"),
            "<|start_of_role|>system<|end_of_role|>You are helpful.<|end_of_text|>\n"
            "<|start_of_role|>user<|end_of_role|>hello<|end_of_text|>\n"
            "<|start_of_role|>assistant<|end_of_role|>hi there<|end_of_text|>\n"
            "<|start_of_role|>user<|end_of_role|>how are you<|end_of_text|>\n"
            "<|start_of_role|>assistant<|end_of_role|>\n");
}

// GLM-4 / GLM-4.5 as llama.cpp's built-in chatglm4 renders it: no closing tag, the next role's tag
// ends a turn.
TEST(ChatTemplate, Chatglm4) {
  EXPECT_EQ(render("chatglm4"),
            "[gMASK]<sop><|system|>\nYou are helpful.<|user|>\nhello<|assistant|>\nhi there<|user|>\nhow are you"
            "<|assistant|>\n");
}

// Cohere's Command R as llama.cpp's built-in command-r renders it: every message trimmed.
TEST(ChatTemplate, CommandR) {
  EXPECT_EQ(render("command-r"),
            "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>You are helpful.<|END_OF_TURN_TOKEN|>"
            "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>hello<|END_OF_TURN_TOKEN|>"
            "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>hi there<|END_OF_TURN_TOKEN|>"
            "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>how are you<|END_OF_TURN_TOKEN|>"
            "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>");
}

// EXAONE 3/4 and Seed-OSS as llama.cpp's built-in exaone3/exaone4 and seed_oss render them: EXAONE
// trims every message and closes a user turn with a newline alone; Seed-OSS trims the assistant's.
TEST(ChatTemplate, ExaoneAndSeedOss) {
  const std::string exaone =
      "[|system|]You are helpful.[|endofturn|]\n[|user|]hello\n[|assistant|]hi there[|endofturn|]\n"
      "[|user|]how are you\n[|assistant|]";
  EXPECT_EQ(render("exaone4"), exaone);
  EXPECT_EQ(render("exaone3"), exaone);
  const std::vector<ChatMessage> padded = {{"user", " hello "}, {"assistant", " hi there\n"}};
  EXPECT_EQ(loom::render_chat(ChatTemplate::seed_oss, padded, true),
            "<seed:bos>user\n hello <seed:eos><seed:bos>assistant\nhi there<seed:eos><seed:bos>assistant\n");
  EXPECT_EQ(loom::render_chat(ChatTemplate::exaone4, padded, false),
            "[|user|]hello\n[|assistant|]hi there[|endofturn|]\n");
}

// The <|role|> families: Falcon 3, GLM-Edge (what llama.cpp makes of OLMo 2 Instruct's template), Zephyr.
TEST(ChatTemplate, RoleTagFamilies) {
  EXPECT_EQ(render("zephyr"),
            "<|system|>\nYou are helpful.<|endoftext|>\n<|user|>\nhello<|endoftext|>\n<|assistant|>\nhi there"
            "<|endoftext|>\n<|user|>\nhow are you<|endoftext|>\n<|assistant|>\n");
  EXPECT_EQ(render("falcon3"),
            "<|system|>\nYou are helpful.\n<|user|>\nhello\n<|assistant|>\nhi there\n<|user|>\nhow are you\n"
            "<|assistant|>\n");
  EXPECT_EQ(render("glmedge"),
            "<|system|>\nYou are helpful.<|user|>\nhello<|assistant|>\nhi there<|user|>\nhow are you<|assistant|>");
}

TEST(ChatTemplate, EveryNameRoundTrips) {
  // clang-format off
  for (const char* n : {"chatml",           "llama2",     "llama2-sys", "llama2-sys-bos",
                        "llama2-sys-strip", "mistral-v1", "mistral-v3", "mistral-v3-tekken",
                        "mistral-v7",       "phi3",       "phi4",       "gemma",
                        "llama3",           "deepseek",   "deepseek2",  "deepseek3",
                        "gpt-oss",          "granite",    "chatglm4",   "command-r",
                        "falcon3",          "glmedge",    "zephyr",     "exaone3",
                        "exaone4",          "seed_oss",   "mistral-v7-tekken", "llama4"}) {
    // clang-format on
    auto t = loom::chat_template_from_name(n);
    ASSERT_TRUE(t.has_value()) << n;
    EXPECT_STREQ(loom::chat_template_name(*t), n);
  }
  EXPECT_FALSE(loom::chat_template_from_name("vicuna-9000").has_value());
}

// Template texts cut down to the parts the detection looks at.
TEST(ChatTemplate, DetectsFamiliesFromTemplateText) {
  auto detect = [](const std::string& text) {
    auto t = loom::detect_chat_template(text);
    return t ? std::string(loom::chat_template_name(*t)) : std::string("none");
  };
  EXPECT_EQ(detect("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
                   "'<|im_end|>' + '\\n'}}{% endfor %}"),
            "chatml");
  EXPECT_EQ(detect("{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | "
                   "trim + '<|eot_id|>' }}"),
            "llama3");
  EXPECT_EQ(detect("{% if message['role'] == 'system' %}{{ '<<SYS>>\\n' + content + '\\n<</SYS>>\\n\\n' }}{% endif "
                   "%}{{ '[INST] ' + content + ' [/INST]' }}"),
            "llama2-sys");
  EXPECT_EQ(detect("{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"), "llama2-sys-strip");
  EXPECT_EQ(detect("{{ '[SYSTEM_PROMPT]' + system + '[/SYSTEM_PROMPT]' }}{{ '[INST]' + m + '[/INST]' }}"), "mistral-v7");
  EXPECT_EQ(detect("{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}"), "gemma");
  EXPECT_EQ(detect("{{'<|user|>' + '\\n' + message['content'] + '<|end|>' + '\\n' + '<|assistant|>' + '\\n'}}"), "phi3");
  EXPECT_EQ(detect("{{- '<|start|>assistant<|channel|>final<|message|>' + content + '<|end|>' }}"), "gpt-oss");
  EXPECT_EQ(detect("{{- '<|start_of_role|>' + message['role'] + '<|end_of_role|>' + message['content'] + "
                   "'<|end_of_text|>\n' }}"),
            "granite");
  EXPECT_EQ(detect("{{'<｜User｜>' + content + '<｜Assistant｜>'}}{{ content + '<｜end▁of▁sentence｜>' }}"), "deepseek3");
  EXPECT_EQ(detect("{{ '### Instruction:\\n' + content + '\\n' }}{{ '### Response:\\n' + content + '\\n<|EOT|>\\n' }}"),
            "deepseek");
  // GLM-4.5's template opens with [gMASK]<sop> and uses <|user|> / <|assistant|> without <|end|>
  EXPECT_EQ(detect("[gMASK]<sop>{%- for m in messages %}{{ '<|' + m.role + '|>\n' + m.content }}{%- endfor %}"
                   "{{ '<|assistant|>' }}"),
            "chatglm4");
  EXPECT_EQ(detect("{{ '<|START_OF_TURN_TOKEN|><|USER_TOKEN|>' + content | trim + '<|END_OF_TURN_TOKEN|>' }}"),
            "command-r");
  // EXAONE: a tool role tells 4.0 from 3.x
  EXPECT_EQ(detect("{{ '[|system|]' + s + '[|endofturn|]\n' }}{{ '[|assistant|]' }}"), "exaone3");
  EXPECT_EQ(detect("{{ '[|system|]' + s + '[|endofturn|]\n' }}{{ '[|tool|]' }}{{ '[|assistant|]' }}"), "exaone4");
  EXPECT_EQ(detect("{{ '<seed:bos>' + message.role + '\n' + content + '<seed:eos>' }}"), "seed_oss");
  EXPECT_EQ(detect("{{- '<|header_start|>' + message['role'] + '<|header_end|>\n\n' + content | trim + '<|eot|>' }}"),
            "llama4");
  // OLMo 2 Instruct: <|user|> and <|assistant|> without </s> (glmedge, as in llama.cpp); with </s> Falcon 3
  EXPECT_EQ(detect("{{ bos_token }}{% for m in messages %}{{ '<|user|>\n' + m.content }}{% endfor %}"
                   "{{ '<|assistant|>\n' + m.content + eos_token }}"),
            "glmedge");
  EXPECT_EQ(detect("{{ '<|user|>\n' + c + '\n' }}{{ '<|assistant|>\n' + c + '</s>' }}"), "falcon3");
  EXPECT_EQ(detect("{{ '<|user|>\n' + message['content'] + '<|endoftext|>' }}"), "zephyr");
  EXPECT_EQ(detect("llama3"), "llama3") << "a name is accepted as the template";
  EXPECT_EQ(detect("{% for m in messages %}{{ m.content }}{% endfor %}"), "none");
}

}  // namespace
