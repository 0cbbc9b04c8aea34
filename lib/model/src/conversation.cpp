// Conversation turns over a Session (see conversation.h). The KV cache holds the rendered
// conversation up to the end of the last reply's text; the template's closing of that reply
// (e.g. "<|im_end|>\n") is evaluated with the next turn, so every turn evaluates exactly the
// text the template adds.
#include "loom/model/conversation.h"

#include <chrono>

#include "loom/core/error.h"
#include "loom/core/log.h"

namespace loom {

namespace {
double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// What the template put after the reply's content in `after` (the conversation rendered with
// the reply), given `before` (rendered up to the assistant's opening). Templates that trim
// the content are matched on the trimmed text.
std::string closing_of(const std::string& before, const std::string& after, const std::string& reply) {
  if (!after.starts_with(before)) return {};
  const std::string_view a = std::string_view(after).substr(before.size());
  if (a.starts_with(reply)) return std::string(a.substr(reply.size()));
  const char* ws = " \t\n\r\f\v";
  const size_t b = reply.find_first_not_of(ws);
  if (b == std::string::npos) return std::string(a);
  const std::string trimmed = reply.substr(b, reply.find_last_not_of(ws) - b + 1);
  const size_t at = a.find(trimmed);
  return at == std::string_view::npos ? std::string(a) : std::string(a.substr(at + trimmed.size()));
}
}  // namespace

Conversation::Conversation(Session& session, Sampler& sampler, ConversationParams params)
    : session_(session), sampler_(sampler), p_(std::move(params)) {
  if (p_.tmpl && !p_.system_prompt.empty()) messages_.push_back({"system", p_.system_prompt});
  const Tokenizer& tok = session_.model().tokenizer();
  LOOM_CHECK(!p_.in_prefix_bos || (tok.bos() >= 0 && tok.is_control(tok.bos())), usage,
             "--in-prefix-bos: the model's vocabulary has no BOS control token");
  session_.clear();
}

void Conversation::evaluate(std::string_view text, TurnResult& r) {
  const Tokenizer& tok = session_.model().tokenizer();
  const std::vector<int32_t> ids = tok.tokenize(text, /*add_special=*/session_.n_past() == 0, /*parse_special=*/true);
  LOOM_CHECK(session_.n_past() + (int64_t)ids.size() < session_.n_ctx(), invalid_input,
             "the conversation needs {} tokens, more than the context size {} (raise -c)",
             session_.n_past() + (int64_t)ids.size() + 1, session_.n_ctx());
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t n_batch = session_.params().n_batch;
  for (size_t i = 0; i < ids.size(); i += (size_t)n_batch) {
    const size_t n = std::min(ids.size() - i, (size_t)n_batch);
    session_.decode(std::span<const int32_t>(ids.data() + i, n));
  }
  for (int32_t t : ids) sampler_.accept(t);
  r.n_prompt += (int64_t)ids.size();
  r.prompt_ms += ms_since(t0);
}

// Drops the oldest turns (the system prompt stays) until the conversation takes at most half
// the context, then evaluates it from an empty cache: a context shift by re-evaluation.
void Conversation::shift_context(TurnResult& r) {
  const Tokenizer& tok = session_.model().tokenizer();
  auto tokens_of = [&] {
    return (int64_t)tok.tokenize(render_chat(*p_.tmpl, messages_, true), true, true).size();
  };
  const size_t first = !messages_.empty() && messages_[0].role == "system" ? 1 : 0;
  while (messages_.size() > first + 1 && tokens_of() > session_.n_ctx() / 2)
    messages_.erase(messages_.begin() + (ptrdiff_t)first);
  logger().info("conversation: context full, kept the last {} messages and evaluate them again", messages_.size());
  session_.clear();
  r.context_shifted = true;
  r.n_past_before = 0;
  r.n_prompt = 0;
  r.prompt = render_chat(*p_.tmpl, messages_, true);
  evaluate(r.prompt, r);
  rendered_ = r.prompt;
}

TurnResult Conversation::turn(std::string_view user_text, const std::function<void(std::string_view)>& on_piece,
                              const std::atomic<int>* interrupt) {
  const Tokenizer& tok = session_.model().tokenizer();
  TurnResult r;
  r.n_past_before = session_.n_past();
  const std::string content = p_.in_prefix + std::string(user_text) + p_.in_suffix;
  // --in-prefix-bos: BOS (as its special-token text) before each turn after the first, which has one
  const std::string bos = p_.in_prefix_bos && session_.n_past() > 0 ? tok.token_text(tok.bos()) : "";
  std::string prompt_full;  // the conversation rendered up to the reply's opening
  if (p_.tmpl) {
    messages_.push_back({"user", content});
    prompt_full = render_chat(*p_.tmpl, messages_, true);
    if (!prompt_full.starts_with(rendered_)) {  // the template rewrote earlier text: start over
      session_.clear();
      rendered_.clear();
      pending_.clear();
      r.n_past_before = 0;
    }
    r.prompt = pending_ + bos + prompt_full.substr(rendered_.size());
  } else {
    r.prompt = pending_ + bos + content;
    prompt_full = rendered_ + content;
  }
  const int64_t n_new = (int64_t)tok.tokenize(r.prompt, session_.n_past() == 0, true).size();
  if (session_.n_past() + n_new >= session_.n_ctx()) {
    LOOM_CHECK(p_.tmpl.has_value(), invalid_input, "the context is full ({} tokens; raise -c)", session_.n_ctx());
    shift_context(r);
  } else {
    evaluate(r.prompt, r);
  }
  pending_.clear();
  rendered_ = prompt_full;

  const auto t0 = std::chrono::steady_clock::now();
  sampler_.reset_constraint();  // each reply matches the grammar from its start, as llama-cli's
  r.stop = "limit";
  while (p_.n_predict < 0 || r.n_gen < p_.n_predict) {
    if (interrupt != nullptr && interrupt->load() != 0) {
      r.stop = "interrupt";
      break;
    }
    if (session_.n_past() >= session_.n_ctx()) {
      r.stop = "context_full";
      break;
    }
    const int32_t id = sampler_.sample(session_.logits(0));
    if (tok.is_eog(id)) {
      r.stop = "eog";
      break;
    }
    const std::string piece = tok.token_to_piece(id);
    r.reply += piece;
    ++r.n_gen;
    if (on_piece) on_piece(piece);
    session_.decode(std::span<const int32_t>(&id, 1));
    bool reversed = false;
    for (const std::string& rp : p_.reverse_prompts)
      if (!rp.empty() && r.reply.ends_with(rp)) reversed = true;
    if (reversed) {
      r.stop = "reverse_prompt";
      break;
    }
  }
  r.eval_ms = ms_since(t0);
  if (p_.tmpl) {
    messages_.push_back({"assistant", r.reply});
    const std::string after = render_chat(*p_.tmpl, messages_, false);
    pending_ = closing_of(prompt_full, after, r.reply);
    rendered_ = after;
  } else {
    rendered_ += r.reply;
  }
  return r;
}

}  // namespace loom
