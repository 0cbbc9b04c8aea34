// Chat template families: detection by marker substrings and rendering per family.
#include "loom/model/chat.h"

#include <string_view>
#include <utility>

namespace loom {

namespace {

constexpr std::pair<const char*, ChatTemplate> kNames[] = {
    {"chatml", ChatTemplate::chatml},
    {"llama2", ChatTemplate::llama2},
    {"llama2-sys", ChatTemplate::llama2_sys},
    {"llama2-sys-bos", ChatTemplate::llama2_sys_bos},
    {"llama2-sys-strip", ChatTemplate::llama2_sys_strip},
    {"mistral-v1", ChatTemplate::mistral_v1},
    {"mistral-v3", ChatTemplate::mistral_v3},
    {"mistral-v3-tekken", ChatTemplate::mistral_v3_tekken},
    {"mistral-v7", ChatTemplate::mistral_v7},
    {"mistral-v7-tekken", ChatTemplate::mistral_v7_tekken},
    {"phi3", ChatTemplate::phi3},
    {"phi4", ChatTemplate::phi4},
    {"gemma", ChatTemplate::gemma},
    {"llama3", ChatTemplate::llama3},
    {"llama4", ChatTemplate::llama4},
    {"deepseek", ChatTemplate::deepseek},
    {"deepseek2", ChatTemplate::deepseek2},
    {"deepseek3", ChatTemplate::deepseek3},
    {"gpt-oss", ChatTemplate::gpt_oss},
    {"granite", ChatTemplate::granite},
    {"chatglm4", ChatTemplate::chatglm4},
    {"command-r", ChatTemplate::command_r},
    {"falcon3", ChatTemplate::falcon3},
    {"glmedge", ChatTemplate::glmedge},
    {"zephyr", ChatTemplate::zephyr},
    {"exaone3", ChatTemplate::exaone3},
    {"exaone4", ChatTemplate::exaone4},
    {"seed_oss", ChatTemplate::seed_oss},
};

std::string trim(std::string_view s) {
  const char* ws = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  return std::string(s.substr(b, s.find_last_not_of(ws) - b + 1));
}

// [INST] families (Llama 2 and Mistral): the variant from the template's details.
ChatTemplate detect_inst(std::string_view text) {
  auto has = [&](std::string_view m) { return text.find(m) != std::string_view::npos; };
  if (has("[SYSTEM_PROMPT]")) return ChatTemplate::mistral_v7;
  if (has("' [INST] ' + system_message") || has("[AVAILABLE_TOOLS]")) {  // Mistral's official templates
    if (has(" [INST]")) return ChatTemplate::mistral_v1;
    if (has("\"[INST]\"")) return ChatTemplate::mistral_v3_tekken;
    return ChatTemplate::mistral_v3;
  }
  if (has("content.strip()")) return ChatTemplate::llama2_sys_strip;
  if (has("bos_token + '[INST]")) return ChatTemplate::llama2_sys_bos;
  if (has("<<SYS>>")) return ChatTemplate::llama2_sys;
  return ChatTemplate::llama2;
}

void render_llama2(ChatTemplate t, std::span<const ChatMessage> messages, std::string& s) {
  const bool system_block = t != ChatTemplate::llama2;
  const bool strip = t == ChatTemplate::llama2_sys_strip;
  bool in_turn = true;  // the first [INST] has no <s>: the tokenizer's BOS is there
  s += "[INST] ";
  for (const ChatMessage& m : messages) {
    const std::string content = strip ? trim(m.content) : m.content;
    if (!in_turn) {
      s += t == ChatTemplate::llama2_sys_bos ? "<s>[INST] " : "[INST] ";
      in_turn = true;
    }
    if (m.role == "system") {
      s += system_block ? "<<SYS>>\n" + content + "\n<</SYS>>\n\n" : content + "\n";
    } else if (m.role == "user") {
      s += content + " [/INST]";
    } else {
      s += content + "</s>";
      in_turn = false;
    }
  }
}

void render_mistral(ChatTemplate t, std::span<const ChatMessage> messages, std::string& s) {
  if (t == ChatTemplate::mistral_v7 || t == ChatTemplate::mistral_v7_tekken) {
    const std::string sp = t == ChatTemplate::mistral_v7 ? " " : "";
    for (const ChatMessage& m : messages) {
      if (m.role == "system")
        s += "[SYSTEM_PROMPT]" + sp + m.content + "[/SYSTEM_PROMPT]";
      else if (m.role == "user")
        s += "[INST]" + sp + m.content + "[/INST]";
      else
        s += sp + m.content + "</s>";
    }
    return;
  }
  const std::string lead = t == ChatTemplate::mistral_v1 ? " " : "";
  const std::string space = t == ChatTemplate::mistral_v3_tekken ? "" : " ";
  bool in_turn = false;
  for (const ChatMessage& m : messages) {
    if (!in_turn) {
      s += lead + "[INST]" + space;
      in_turn = true;
    }
    if (m.role == "system") {
      s += m.content + "\n\n";
    } else if (m.role == "user") {
      s += m.content + lead + "[/INST]";
    } else {
      s += space + (t == ChatTemplate::mistral_v3 ? trim(m.content) : m.content) + "</s>";
      in_turn = false;
    }
  }
}

// The <|role|> families (phi3, chatglm4, falcon3, glmedge, zephyr): "<|role|>\n" + content + end per
// message, then the assistant's opening.
void render_role_tags(std::span<const ChatMessage> messages, std::string_view end, bool add_assistant,
                      std::string_view opening, std::string& s) {
  for (const ChatMessage& m : messages) s += "<|" + m.role + "|>\n" + m.content + std::string(end);
  if (add_assistant) s += opening;
}

// The header families (llama3, llama4): open + role + close + "\n\n" + the trimmed content + eot per
// message, then the assistant's header.
void render_headers(std::span<const ChatMessage> messages, std::string_view open, std::string_view close,
                    std::string_view eot, bool add_assistant, std::string& s) {
  for (const ChatMessage& m : messages)
    s += std::string(open) + m.role + std::string(close) + "\n\n" + trim(m.content) + std::string(eot);
  if (add_assistant) s += std::string(open) + "assistant" + std::string(close) + "\n\n";
}

void render_gemma(std::span<const ChatMessage> messages, bool add_assistant, std::string& s) {
  std::string system;  // Gemma has no system role: it opens the next user turn
  for (const ChatMessage& m : messages) {
    if (m.role == "system") {
      system += trim(m.content);
      continue;
    }
    const std::string role = m.role == "assistant" ? "model" : m.role;
    s += "<start_of_turn>" + role + "\n";
    if (!system.empty() && role != "model") {
      s += system + "\n\n";
      system.clear();
    }
    s += trim(m.content) + "<end_of_turn>\n";
  }
  if (add_assistant) s += "<start_of_turn>model\n";
}

}  // namespace

std::optional<ChatTemplate> chat_template_from_name(std::string_view name) {
  for (const auto& [n, t] : kNames)
    if (name == n) return t;
  return std::nullopt;
}

const char* chat_template_name(ChatTemplate t) {
  for (const auto& [n, v] : kNames)
    if (v == t) return n;
  return "?";
}

std::string chat_template_names() {
  std::string s;
  for (const auto& [n, t] : kNames) s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}

std::optional<ChatTemplate> detect_chat_template(std::string_view text) {
  if (auto named = chat_template_from_name(text)) return named;
  auto has = [&](std::string_view m) { return text.find(m) != std::string_view::npos; };
  if (has("<|im_start|>")) return has("<|im_sep|>") ? ChatTemplate::phi4 : ChatTemplate::chatml;
  if (text.starts_with("mistral") || has("[INST]")) return detect_inst(text);
  if (has("<|assistant|>") && has("<|end|>")) return ChatTemplate::phi3;
  if (has("[gMASK]<sop>")) return ChatTemplate::chatglm4;
  // <|user|> turns: llama.cpp's order (OLMo 2's <|endoftext|><|user|> template is glmedge there)
  if (has("<|assistant|>") && has("<|user|>")) return has("</s>") ? ChatTemplate::falcon3 : ChatTemplate::glmedge;
  if (has("<|user|>") && has("<|endoftext|>")) return ChatTemplate::zephyr;
  if (has("<start_of_turn>")) return ChatTemplate::gemma;
  if (has("### Instruction:") && has("<|EOT|>")) return ChatTemplate::deepseek;
  if (has("<|start_header_id|>") && has("<|end_header_id|>")) return ChatTemplate::llama3;
  if (has("'Assistant: ' + message['content'] + eos_token")) return ChatTemplate::deepseek2;
  if (has("<｜Assistant｜>") && has("<｜User｜>") && has("<｜end▁of▁sentence｜>")) return ChatTemplate::deepseek3;
  if (has("<|channel|>") && has("<|start|>")) return ChatTemplate::gpt_oss;
  if (has("<|start_of_role|>")) return ChatTemplate::granite;
  if (has("<|START_OF_TURN_TOKEN|>") && has("<|USER_TOKEN|>")) return ChatTemplate::command_r;
  if (has("[|system|]") && has("[|assistant|]") && has("[|endofturn|]"))
    return has("[|tool|]") ? ChatTemplate::exaone4 : ChatTemplate::exaone3;
  if (has("<|header_start|>") && has("<|header_end|>")) return ChatTemplate::llama4;
  if (has("<seed:bos>")) return ChatTemplate::seed_oss;
  return std::nullopt;
}

std::string render_chat(ChatTemplate t, std::span<const ChatMessage> messages, bool add_assistant) {
  std::string s;
  switch (t) {
    case ChatTemplate::chatml:
      for (const ChatMessage& m : messages) s += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      if (add_assistant) s += "<|im_start|>assistant\n";
      break;
    case ChatTemplate::phi4:
      for (const ChatMessage& m : messages) s += "<|im_start|>" + m.role + "<|im_sep|>" + m.content + "<|im_end|>";
      if (add_assistant) s += "<|im_start|>assistant<|im_sep|>";
      break;
    case ChatTemplate::llama2:
    case ChatTemplate::llama2_sys:
    case ChatTemplate::llama2_sys_bos:
    case ChatTemplate::llama2_sys_strip:
      render_llama2(t, messages, s);
      break;
    case ChatTemplate::mistral_v1:
    case ChatTemplate::mistral_v3:
    case ChatTemplate::mistral_v3_tekken:
    case ChatTemplate::mistral_v7:
    case ChatTemplate::mistral_v7_tekken:
      render_mistral(t, messages, s);
      break;
    case ChatTemplate::phi3:
      render_role_tags(messages, "<|end|>\n", add_assistant, "<|assistant|>\n", s);
      break;
    case ChatTemplate::gemma:
      render_gemma(messages, add_assistant, s);
      break;
    case ChatTemplate::llama3:
      render_headers(messages, "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", add_assistant, s);
      break;
    case ChatTemplate::llama4:
      render_headers(messages, "<|header_start|>", "<|header_end|>", "<|eot|>", add_assistant, s);
      break;
    case ChatTemplate::deepseek:
      for (const ChatMessage& m : messages) {
        if (m.role == "system") s += m.content;
        else if (m.role == "user") s += "### Instruction:\n" + m.content + "\n";
        else s += "### Response:\n" + m.content + "\n<|EOT|>\n";
      }
      if (add_assistant) s += "### Response:\n";
      break;
    case ChatTemplate::deepseek2:
      for (const ChatMessage& m : messages) {
        if (m.role == "system") s += m.content + "\n\n";
        else if (m.role == "user") s += "User: " + m.content + "\n\n";
        else s += "Assistant: " + m.content + "<｜end▁of▁sentence｜>";
      }
      if (add_assistant) s += "Assistant:";
      break;
    case ChatTemplate::deepseek3:
      for (const ChatMessage& m : messages) {
        if (m.role == "system") s += m.content + "\n\n";
        else if (m.role == "user") s += "<｜User｜>" + m.content;
        else s += "<｜Assistant｜>" + m.content + "<｜end▁of▁sentence｜>";
      }
      if (add_assistant) s += "<｜Assistant｜>";
      break;
    case ChatTemplate::gpt_oss:
      // harmony: earlier replies are the assistant's final channel, closed with <|end|>
      for (const ChatMessage& m : messages) {
        if (m.role == "assistant") s += "<|start|>assistant<|channel|>final<|message|>" + m.content + "<|end|>";
        else s += "<|start|>" + m.role + "<|message|>" + m.content + "<|end|>";
      }
      if (add_assistant) s += "<|start|>assistant";
      break;
    case ChatTemplate::granite:
      for (const ChatMessage& m : messages)
        s += "<|start_of_role|>" + m.role + "<|end_of_role|>" + m.content + "<|end_of_text|>\n";
      if (add_assistant) s += "<|start_of_role|>assistant<|end_of_role|>\n";
      break;
    case ChatTemplate::chatglm4:
      s += "[gMASK]<sop>";
      render_role_tags(messages, "", add_assistant, "<|assistant|>\n", s);
      break;
    case ChatTemplate::command_r:
      for (const ChatMessage& m : messages) {
        const std::string role = m.role == "system" ? "SYSTEM" : m.role == "user" ? "USER" : "CHATBOT";
        s += "<|START_OF_TURN_TOKEN|><|" + role + "_TOKEN|>" + trim(m.content) + "<|END_OF_TURN_TOKEN|>";
      }
      if (add_assistant) s += "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>";
      break;
    case ChatTemplate::falcon3:
      render_role_tags(messages, "\n", add_assistant, "<|assistant|>\n", s);
      break;
    case ChatTemplate::glmedge:
      render_role_tags(messages, "", add_assistant, "<|assistant|>", s);
      break;
    case ChatTemplate::zephyr:
      render_role_tags(messages, "<|endoftext|>\n", add_assistant, "<|assistant|>\n", s);
      break;
    case ChatTemplate::exaone3:
    case ChatTemplate::exaone4:  // the same for loom's roles (exaone4 adds a tool role)
      for (const ChatMessage& m : messages)
        s += "[|" + m.role + "|]" + trim(m.content) + (m.role == "user" ? "\n" : "[|endofturn|]\n");
      if (add_assistant) s += "[|assistant|]";
      break;
    case ChatTemplate::seed_oss:
      for (const ChatMessage& m : messages)
        s += "<seed:bos>" + m.role + "\n" + (m.role == "assistant" ? trim(m.content) : m.content) + "<seed:eos>";
      if (add_assistant) s += "<seed:bos>assistant\n";
      break;
  }
  return s;
}

}  // namespace loom
