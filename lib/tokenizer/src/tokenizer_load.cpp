// Building a Tokenizer: reading tokenizer.ggml.* from GGUF into a Spec, then applying
// llama.cpp's load-time rules (default special ids, add_bos per family, end-of-generation
// tokens found by text, per-model strip attributes) and precomputing the lookup tables.
#include <algorithm>
#include <cstdlib>

#include "loom/core/error.h"
#include "loom/gguf/gguf.h"
#include "tokenizer_impl.h"

namespace loom {

namespace {

using tok::kAttrByte;
using tok::kAttrControl;
using tok::kAttrLstrip;
using tok::kAttrNormal;
using tok::kAttrRstrip;
using tok::kAttrUnknown;
using tok::kAttrUnused;
using tok::kAttrUserDefined;

uint32_t attr_for(Tokenizer::TokenType t) {
  switch (t) {
    case Tokenizer::TokenType::normal: return kAttrNormal;
    case Tokenizer::TokenType::unknown: return kAttrUnknown;
    case Tokenizer::TokenType::control: return kAttrControl;
    case Tokenizer::TokenType::user_defined: return kAttrUserDefined;
    case Tokenizer::TokenType::unused: return kAttrUnused;
    case Tokenizer::TokenType::byte: return kAttrByte;
    default: return tok::kAttrUndefined;
  }
}

const gguf::Value* find_array(const gguf::File& f, std::string_view key, gguf::ValueType elem, bool required) {
  const gguf::Value* v = f.find(key);
  LOOM_CHECK(v != nullptr || !required, invalid_input, "[tokenizer] {}: missing {}", f.path(), key);
  if (v == nullptr) return nullptr;
  LOOM_CHECK(v->type == gguf::ValueType::ARRAY && v->array_type == elem, invalid_input,
             "[tokenizer] {}: {} must be an array of {}", f.path(), key, gguf::value_type_name(elem));
  return v;
}

std::optional<bool> find_bool(const gguf::File& f, std::string_view key) {
  if (f.find(key) == nullptr) return std::nullopt;
  return f.get_bool(key);
}

std::optional<int32_t> find_id(const gguf::File& f, std::string_view key) {
  auto v = f.find_int(key);
  if (!v) return std::nullopt;
  LOOM_CHECK(*v >= INT32_MIN && *v <= INT32_MAX, invalid_input, "[tokenizer] {}: {} = {} is out of range", f.path(),
             key, *v);
  return static_cast<int32_t>(*v);
}

std::string lower_ascii(std::string s) {
  for (char& c : s) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return s;
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const gguf::File& file) {
  Spec spec;
  const auto model = file.find_string("tokenizer.ggml.model");
  LOOM_CHECK(model.has_value(), invalid_input, "[tokenizer] {}: missing tokenizer.ggml.model", file.path());
  if (*model == "llama") {
    spec.kind = Kind::spm;
  } else if (*model == "gpt2") {
    spec.kind = Kind::bpe;
  } else {
    fail(ErrorKind::unsupported, "[tokenizer] {}: tokenizer model '{}' is not supported (llama, gpt2)", file.path(),
         *model);
  }
  spec.tokens = find_array(file, "tokenizer.ggml.tokens", gguf::ValueType::STRING, true)->strings;
  const size_t n = spec.tokens.size();
  if (const gguf::Value* v = file.find("tokenizer.ggml.scores")) {
    LOOM_CHECK(v->type == gguf::ValueType::ARRAY &&
                   (v->array_type == gguf::ValueType::F32 || v->array_type == gguf::ValueType::I32),
               invalid_input, "[tokenizer] {}: tokenizer.ggml.scores must be an array of f32", file.path());
    LOOM_CHECK(v->array_size() >= n, invalid_input, "[tokenizer] {}: {} scores for {} tokens", file.path(),
               v->array_size(), n);
    spec.scores.resize(n);
    for (size_t i = 0; i < n; ++i) {
      spec.scores[i] = v->array_type == gguf::ValueType::F32 ? static_cast<float>(v->floats[i])
                                                             : static_cast<float>(v->ints[i]);
    }
  }
  if (const gguf::Value* v = find_array(file, "tokenizer.ggml.token_type", gguf::ValueType::I32, false)) {
    LOOM_CHECK(v->ints.size() >= n, invalid_input, "[tokenizer] {}: {} token types for {} tokens", file.path(),
               v->ints.size(), n);
    spec.types.resize(n);
    for (size_t i = 0; i < n; ++i) {
      const int64_t t = v->ints[i];
      spec.types[i] = t >= 1 && t <= 6 ? static_cast<TokenType>(t) : TokenType::undefined;
    }
  }
  if (spec.kind == Kind::bpe) {
    spec.merges = find_array(file, "tokenizer.ggml.merges", gguf::ValueType::STRING, true)->strings;
  }
  spec.pre = file.find_string("tokenizer.ggml.pre").value_or("");
  spec.name = file.find_string("general.name").value_or("");
  spec.bos_id = find_id(file, "tokenizer.ggml.bos_token_id");
  spec.eos_id = find_id(file, "tokenizer.ggml.eos_token_id");
  spec.eot_id = find_id(file, "tokenizer.ggml.eot_token_id");
  spec.eom_id = find_id(file, "tokenizer.ggml.eom_token_id");
  spec.unk_id = find_id(file, "tokenizer.ggml.unknown_token_id");
  spec.pad_id = find_id(file, "tokenizer.ggml.padding_token_id");
  spec.add_bos = find_bool(file, "tokenizer.ggml.add_bos_token");
  spec.add_eos = find_bool(file, "tokenizer.ggml.add_eos_token");
  spec.add_space_prefix = find_bool(file, "tokenizer.ggml.add_space_prefix");
  try {
    return from_spec(std::move(spec));
  } catch (const Error& e) {
    throw Error(e.kind(), fmt::format("{} ({})", e.what(), file.path()));
  }
}

std::unique_ptr<Tokenizer> Tokenizer::from_spec(Spec spec) {
  auto impl = std::make_unique<Impl>();
  Impl& t = *impl;
  const size_t n = spec.tokens.size();
  LOOM_CHECK(n > 0, invalid_input, "[tokenizer] the vocabulary is empty");
  LOOM_CHECK(n < static_cast<size_t>(INT32_MAX), invalid_input, "[tokenizer] {} tokens is too many", n);
  LOOM_CHECK(spec.scores.empty() || spec.scores.size() == n, invalid_input, "[tokenizer] {} scores for {} tokens",
             spec.scores.size(), n);
  LOOM_CHECK(spec.types.empty() || spec.types.size() == n, invalid_input, "[tokenizer] {} token types for {} tokens",
             spec.types.size(), n);
  t.kind = spec.kind;

  // 1. Vocabulary.
  t.vocab.resize(n);
  t.token_to_id.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    auto& d = t.vocab[i];
    d.text = spec.tokens[i].empty() ? fmt::format("[EMPTY_{}]", i) : std::move(spec.tokens[i]);
    d.score = spec.scores.empty() ? 0.0f : spec.scores[i];
    d.type = spec.types.empty() ? TokenType::normal : spec.types[i];
    d.attr = attr_for(d.type);
    const auto [it, fresh] = t.token_to_id.emplace(d.text, static_cast<int32_t>(i));
    LOOM_CHECK(fresh, invalid_input, "[tokenizer] duplicate token in vocabulary: '{}' has ids {} and {}", d.text,
               it->second, i);
  }
  const auto in_range = [&](int32_t id) { return id >= 0 && static_cast<size_t>(id) < n; };

  // 2. Family defaults (llama.cpp's), then what the file says.
  tok::BpePre pre;
  if (t.kind == Kind::spm) {
    t.bos = 1, t.eos = 2, t.unk = 0;
    t.add_space_prefix = true, t.add_bos = true, t.add_eos = false;
    t.pre_name = "default";
  } else {
    LOOM_CHECK(tok::bpe_pre_for(spec.pre, pre), unsupported, "[tokenizer] unknown pre-tokenizer type: '{}'", spec.pre);
    t.pre_name = spec.pre.empty() ? "default" : spec.pre;
    t.bos = pre.no_bos ? -1 : 11, t.eos = 11, t.unk = -1;
    t.add_space_prefix = false, t.add_bos = pre.add_bos, t.add_eos = false;
    t.ignore_merges = pre.ignore_merges, t.clean_spaces = pre.clean_spaces;
  }
  if (spec.add_space_prefix) t.add_space_prefix = *spec.add_space_prefix;
  for (int32_t* id : {&t.bos, &t.eos, &t.unk}) {
    if (!in_range(*id)) *id = -1;
  }
  const std::pair<const std::optional<int32_t>*, int32_t*> ids[] = {
      {&spec.bos_id, &t.bos}, {&spec.eos_id, &t.eos}, {&spec.eot_id, &t.eot},
      {&spec.eom_id, &t.eom}, {&spec.unk_id, &t.unk}, {&spec.pad_id, &t.pad}};
  for (const auto& [given, id] : ids) {
    if (given->has_value() && in_range(**given)) *id = **given;  // out of range: keep the default, as llama.cpp
  }
  if (spec.add_bos) t.add_bos = *spec.add_bos;
  if (spec.add_eos) t.add_eos = *spec.add_eos;
  LOOM_CHECK(!t.add_bos || t.bos >= 0, invalid_input, "[tokenizer] add_bos_token is true, but bos_token_id is not set");
  LOOM_CHECK(!t.add_eos || t.eos >= 0, invalid_input, "[tokenizer] add_eos_token is true, but eos_token_id is not set");

  // 3. Merges: "left right", split at the first space after the first byte; the first rank wins.
  if (t.kind == Kind::bpe) {
    t.bpe_ranks.reserve(spec.merges.size());
    for (size_t i = 0; i < spec.merges.size(); ++i) {
      const std::string& m = spec.merges[i];
      if (m.find(' ', 1) == std::string::npos) continue;
      t.bpe_ranks.emplace(m, static_cast<int32_t>(std::min<size_t>(i, INT32_MAX)));
    }
  }

  // 4. End-of-generation tokens, found by text like llama.cpp; such tokens become control tokens.
  auto make_control = [&](int32_t id) { t.vocab[id].attr |= kAttrControl; };
  auto first_of = [&](std::initializer_list<std::string_view> texts) {
    for (auto s : texts) {
      if (int32_t id = t.find(s); id >= 0) return id;
    }
    return int32_t{-1};
  };
  if (t.eot < 0) {
    t.eot = first_of({"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
                      "<EOT>", "_<EOT>", "[EOT]", "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
                      "<end_of_utterance>"});
    if (t.eot >= 0) make_control(t.eot);
  }
  if (t.eom < 0) {
    t.eom = t.find("<|eom_id|>");
    if (t.eom >= 0) make_control(t.eom);
  }
  t.eog.assign(n, false);
  for (auto s : {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", "<|fim_repo|>", "<|repo_name|>",
                 "<fim-repo>", "<REPO>", "<reponame>", "<|file_sep|>"}) {
    if (int32_t id = t.find(s); id >= 0) t.eog[id] = true, make_control(id);
  }
  for (auto& d : t.vocab) {
    if ((d.attr & kAttrControl) && d.text.find("unused") != std::string::npos) d.attr |= kAttrUnused;
  }
  for (auto s : {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
                 "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
                 "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
                 "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>", "[e~["}) {
    if (int32_t id = t.find(s); id >= 0) t.eog[id] = true, make_control(id);
  }
  for (auto s : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"}) {  // gpt-oss renders these
    if (int32_t id = t.find(s); id >= 0) t.vocab[id].attr = kAttrUserDefined;
  }
  for (int32_t id : {t.eos, t.eot, t.eom}) {
    if (id >= 0) t.eog[id] = true;
  }
  auto is_eog_text = [&](std::string_view s) { int32_t id = t.find(s); return id >= 0 && t.eog[id]; };
  if (const int32_t end = t.find("<|end|>"); end >= 0 && t.eog[end] &&
      ((is_eog_text("<|return|>") && (is_eog_text("<|call|>") || is_eog_text("<|calls|>"))) ||
       ((is_eog_text("<|call|>") || is_eog_text("<|calls|>")) && is_eog_text("<|flush|>")))) {
    t.eog[end] = false;  // o200k_harmony / solar-open: <|end|> ends a message, not generation
    t.vocab[end].attr = kAttrUserDefined;
  }
  if (const int32_t s = t.find("</s>"); s >= 0 && t.eog[s] && is_eog_text("<|tool_response>")) {
    t.eog[s] = false;  // gemma4
    t.vocab[s].attr = kAttrNormal;
  }

  // 5. Special tokens split out of text before tokenizing, longest first.
  for (size_t i = 0; i < n; ++i) {
    if (t.vocab[i].attr & (kAttrControl | kAttrUserDefined | kAttrUnknown)) {
      t.special.push_back(static_cast<int32_t>(i));
    }
  }
  std::stable_sort(t.special.begin(), t.special.end(),
                   [&](int32_t a, int32_t b) { return t.vocab[a].text.size() > t.vocab[b].text.size(); });
  for (size_t slot = 0; slot < t.special.size(); ++slot) {
    t.special_trie.insert(t.vocab[t.special[slot]].text, static_cast<int32_t>(slot));
  }

  // 6. Per-model strip rules llama.cpp keys on general.name / pre.
  const std::string name = lower_ascii(spec.name);
  auto set_attr = [&](std::string_view text, uint32_t a, bool on) {
    if (int32_t id = t.find(text); id >= 0) t.vocab[id].attr = on ? (t.vocab[id].attr | a) : (t.vocab[id].attr & ~a);
  };
  if (spec.pre.find("jina-v2-de") != std::string::npos || spec.pre.find("jina-v2-es") != std::string::npos ||
      spec.pre.find("jina-v2-code") != std::string::npos) {
    set_attr("<mask>", kAttrLstrip, true);
  } else if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos) {
    for (int32_t id : t.special) t.vocab[id].attr |= kAttrRstrip;
    set_attr("</s>", kAttrRstrip, true);
    for (auto s : {"<unk>", "<s>", "<|endoftext|>"}) set_attr(s, kAttrRstrip, false);
  } else if (name.find("modern-bert") != std::string::npos) {
    set_attr("[MASK]", kAttrLstrip, true);
  }

  // 7. Lookup tables.
  if (t.kind == Kind::spm) {
    t.spm_word_split = std::none_of(t.vocab.begin(), t.vocab.end(), [](const tok::TokenData& d) {
      constexpr std::string_view kSpace = "\xE2\x96\x81";
      size_t lead = 0;
      while (d.text.compare(lead, kSpace.size(), kSpace) == 0) lead += kSpace.size();
      return d.text.find(kSpace, lead) != std::string::npos;
    });
    t.byte_tokens.assign(256, -1);
    for (int b = 0; b < 256; ++b) {
      int32_t id = t.find(fmt::format("<0x{:02X}>", b));
      if (id < 0) {
        const char c = static_cast<char>(b);
        id = t.find(std::string_view(&c, 1));
      }
      t.byte_tokens[b] = id;
    }
  } else {
    t.splitter = std::make_unique<unicode::RegexSplitter>(pre.regexes);
  }
  t.pieces.resize(n);
  for (size_t i = 0; i < n; ++i) t.pieces[i] = t.render_piece(static_cast<int32_t>(i), true);
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(impl)));
}

std::string Tokenizer::Impl::render_piece(int32_t id, bool special) const {
  const tok::TokenData& d = vocab[id];
  if (!special && (d.attr & (kAttrUnknown | kAttrControl))) return {};
  if (d.attr & (kAttrUnknown | kAttrControl | kAttrUserDefined)) return d.text;
  if (d.attr & kAttrNormal) {
    std::string out;
    if (kind == Kind::spm) {  // U+2581 back to a space
      for (size_t i = 0; i < d.text.size(); ++i) {
        if (d.text.compare(i, 3, "\xE2\x96\x81") == 0) {
          out += ' ';
          i += 2;
        } else {
          out += d.text[i];
        }
      }
      return out;
    }
    for (uint32_t cpt : unicode::decode_utf8(d.text)) {  // GPT-2 alphabet back to bytes
      const int b = unicode::unicode_to_byte(cpt);
      if (b >= 0) {
        out += static_cast<char>(b);
      } else {
        std::string utf8;
        unicode::append_utf8(utf8, cpt);
        out += "[UNK_BYTE_0x";
        for (char c : utf8) out += fmt::format("{:02x}", static_cast<uint8_t>(c));
        out += d.text + "]";
      }
    }
    return out;
  }
  if (d.attr & kAttrByte) {  // "<0xXX>"
    const std::string hex = d.text.size() >= 5 ? d.text.substr(3, 2) : std::string();
    return std::string(1, static_cast<char>(std::strtol(hex.c_str(), nullptr, 16)));
  }
  return {};
}

}  // namespace loom
