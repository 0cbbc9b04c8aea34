// A conversation over one Session: each user turn is rendered with the chat template, only the
// text the KV cache does not hold yet is evaluated (the history is never re-evaluated while it
// fits), and the reply is streamed until end-of-generation, -n, a reverse prompt, an interrupt
// or a full context. Without a template (plain -i) the user's text is appended as typed.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "loom/model/chat.h"
#include "loom/model/sampler.h"
#include "loom/model/session.h"

namespace loom {

struct ConversationParams {
  std::optional<ChatTemplate> tmpl;  // nullopt: plain interactive text
  std::string system_prompt;
  int64_t n_predict = -1;            // per reply; -1: until end-of-generation or a full context
  std::vector<std::string> reverse_prompts;
  std::string in_prefix, in_suffix;  // around each user message
  bool in_prefix_bos = false;        // a BOS token before each later user turn (--in-prefix-bos)
};

struct TurnResult {
  std::string prompt;        // the text evaluated for this turn (rendered, new part only)
  std::string reply;
  int64_t n_past_before = 0; // tokens the KV cache already held (kept, not re-evaluated)
  int64_t n_prompt = 0;      // tokens evaluated for the prompt
  int64_t n_gen = 0;
  double prompt_ms = 0, eval_ms = 0;
  std::string stop;          // "eog", "limit", "reverse_prompt", "interrupt", "context_full"
  bool context_shifted = false;  // older turns were dropped to make room
};

class Conversation {
 public:
  Conversation(Session& session, Sampler& sampler, ConversationParams params);

  // One user message and the model's reply (on_piece gets each piece as it is produced).
  // interrupt: when it becomes nonzero the reply ends at the next token.
  TurnResult turn(std::string_view user_text, const std::function<void(std::string_view)>& on_piece,
                  const std::atomic<int>* interrupt = nullptr);
  // The whole conversation as the template renders it (the KV cache holds all but the last
  // reply's closing, which the next turn evaluates first).
  const std::string& rendered() const { return rendered_; }
  const std::vector<ChatMessage>& messages() const { return messages_; }

 private:
  void evaluate(std::string_view text, TurnResult& r);
  void shift_context(TurnResult& r);

  Session& session_;
  Sampler& sampler_;
  ConversationParams p_;
  std::vector<ChatMessage> messages_;
  std::string rendered_;  // the conversation as rendered so far
  std::string pending_;   // its tail the KV cache does not hold yet (the last reply's closing)
};

}  // namespace loom
