// Chat templates without a Jinja engine, as llama.cpp's built-in ones: the family of a GGUF's
// tokenizer.chat_template is recognized by marker substrings of the template text, and each
// family renders messages in its documented prompt format.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace loom {

enum class ChatTemplate {
  chatml,             // <|im_start|>role\n...<|im_end|>\n (Qwen, Hermes, many fine-tunes)
  llama2,             // [INST] ... [/INST] without a system block
  llama2_sys,         // with <<SYS>>\n...\n<</SYS>>\n\n in the first turn
  llama2_sys_bos,     // and <s> before each later [INST]
  llama2_sys_strip,   // and messages stripped of surrounding whitespace
  mistral_v1,         // " [INST] ... [/INST]"
  mistral_v3,         // "[INST] ...[/INST]", assistant text trimmed
  mistral_v3_tekken,  // "[INST]...[/INST]"
  mistral_v7,         // [SYSTEM_PROMPT] ... [/SYSTEM_PROMPT][INST] ... [/INST]
  mistral_v7_tekken,  // the same without the spaces (by name only, as in llama.cpp)
  phi3,               // <|user|>\n...<|end|>\n<|assistant|>\n
  phi4,               // <|im_start|>role<|im_sep|>...<|im_end|>
  gemma,              // <start_of_turn>user\n...<end_of_turn>\n<start_of_turn>model\n
  llama3,             // <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>
  llama4,             // <|header_start|>role<|header_end|>\n\n...<|eot|>
  deepseek,           // ### Instruction:\n...\n### Response:\n (deepseek-coder)
  deepseek2,          // User: ...\n\nAssistant:
  deepseek3,          // <｜User｜>...<｜Assistant｜>
  gpt_oss,            // OpenAI harmony: <|start|>role<|message|>...<|end|>
  granite,            // IBM Granite: <|start_of_role|>role<|end_of_role|>...<|end_of_text|>\n
  chatglm4,           // GLM-4 / GLM-4.5: [gMASK]<sop><|role|>\n...<|assistant|>\n
  command_r,          // Cohere: <|START_OF_TURN_TOKEN|><|USER_TOKEN|>...<|END_OF_TURN_TOKEN|>
  falcon3,            // <|role|>\n...\n
  glmedge,            // <|role|>\n... (OLMo 2 Instruct's template is detected as this one)
  zephyr,             // <|role|>\n...<|endoftext|>\n
  exaone3,            // LG EXAONE: [|role|]...[|endofturn|]\n, a user turn closed by \n alone
  exaone4,            // EXAONE 4.0: exaone3 with a tool role
  seed_oss,           // ByteDance Seed-OSS: <seed:bos>role\n...<seed:eos>
};

struct ChatMessage {
  std::string role;  // system, user or assistant
  std::string content;
};

// --chat-template NAME: llama.cpp's names (chatml, llama2, llama2-sys, llama3, gemma, phi3,
// mistral-v7, deepseek3, gpt-oss, ...). nullopt for an unknown name.
std::optional<ChatTemplate> chat_template_from_name(std::string_view name);
const char* chat_template_name(ChatTemplate t);
std::string chat_template_names();  // "chatml, llama2, ..." for error messages

// The family of a template text (a name is accepted too); nullopt when no marker matches.
std::optional<ChatTemplate> detect_chat_template(std::string_view text);

// The prompt text of messages; add_assistant: end with the opening of the assistant's reply.
// BOS is not included (the tokenizer adds it).
std::string render_chat(ChatTemplate t, std::span<const ChatMessage> messages, bool add_assistant);

}  // namespace loom
