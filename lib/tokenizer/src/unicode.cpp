// UTF-8 decoding/encoding with llama.cpp's lenient conventions, GPT-2's byte alphabet, and the
// PCRE2 splitter behind the BPE pre-tokenizers (see unicode.h for the exact semantics).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "unicode.h"

#include <pcre2.h>

#include <array>

#include "loom/core/error.h"

namespace loom::unicode {

size_t utf8_len(uint8_t lead) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[lead >> 4];
}

std::vector<uint32_t> decode_utf8(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  const size_t n = s.size();
  auto cont = [&](size_t i) { return i < n && (static_cast<uint8_t>(s[i]) & 0xC0) == 0x80; };
  auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<uint8_t>(s[i])); };
  size_t i = 0;
  while (i < n) {
    const uint32_t c = b(i);
    if (!(c & 0x80)) {
      out.push_back(c);
      i += 1;
    } else if (!(c & 0x40)) {
      out.push_back(0xFFFD), i += 1;
    } else if (!(c & 0x20)) {
      if (cont(i + 1)) {
        out.push_back(((c & 0x1F) << 6) | (b(i + 1) & 0x3F)), i += 2;
      } else {
        out.push_back(0xFFFD), i += 1;
      }
    } else if (!(c & 0x10)) {
      if (cont(i + 1) && cont(i + 2)) {
        out.push_back(((c & 0x0F) << 12) | ((b(i + 1) & 0x3F) << 6) | (b(i + 2) & 0x3F)), i += 3;
      } else {
        out.push_back(0xFFFD), i += 1;
      }
    } else if (!(c & 0x08)) {
      if (cont(i + 1) && cont(i + 2) && cont(i + 3)) {
        out.push_back(((c & 0x07) << 18) | ((b(i + 1) & 0x3F) << 12) | ((b(i + 2) & 0x3F) << 6) |
                      (b(i + 3) & 0x3F));
        i += 4;
      } else {
        out.push_back(0xFFFD), i += 1;
      }
    } else {
      out.push_back(0xFFFD), i += 1;
    }
  }
  return out;
}

void append_utf8(std::string& out, uint32_t cpt) {
  if (cpt <= 0x7F) {
    out.push_back(static_cast<char>(cpt));
  } else if (cpt <= 0x7FF) {
    out.push_back(static_cast<char>(0xC0 | ((cpt >> 6) & 0x1F)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else if (cpt <= 0xFFFF) {
    out.push_back(static_cast<char>(0xE0 | ((cpt >> 12) & 0x0F)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else if (cpt <= 0x10FFFF) {
    out.push_back(static_cast<char>(0xF0 | ((cpt >> 18) & 0x07)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else {
    out.append("\xEF\xBF\xBD");
  }
}

bool is_whitespace(uint32_t cpt) {
  if (cpt <= 0x20) return cpt == 0x20 || (cpt >= 0x09 && cpt <= 0x0D);
  switch (cpt) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F:
    case 0x3000:
      return true;
    default:
      return cpt >= 0x2000 && cpt <= 0x200A;
  }
}

namespace {

struct ByteAlphabet {
  std::array<std::string, 256> to_unicode;
  std::array<int16_t, 512> to_byte;
  ByteAlphabet() {
    to_byte.fill(-1);
    auto printable = [](int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE); };
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const uint32_t cpt = printable(b) ? static_cast<uint32_t>(b) : static_cast<uint32_t>(next++);
      append_utf8(to_unicode[b], cpt);
      to_byte[cpt] = static_cast<int16_t>(b);
    }
  }
};

const ByteAlphabet& alphabet() {
  static const ByteAlphabet a;
  return a;
}

}  // namespace

const std::string& byte_to_unicode(uint8_t byte) { return alphabet().to_unicode[byte]; }

int unicode_to_byte(uint32_t cpt) { return cpt < 512 ? alphabet().to_byte[cpt] : -1; }

// ---- regex splitting ----

struct RegexSplitter::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

RegexSplitter::RegexSplitter(const std::vector<std::string>& patterns) {
  for (const auto& p : patterns) {
    int err = 0;
    PCRE2_SIZE err_off = 0;
    auto c = std::make_unique<Compiled>();
    c->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(), PCRE2_UTF | PCRE2_DOLLAR_ENDONLY,
                            &err, &err_off, nullptr);
    if (c->code == nullptr) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof(msg));
      fail(ErrorKind::internal, "[tokenizer] pre-tokenizer regex /{}/ does not compile at {}: {}", p, err_off,
           reinterpret_cast<const char*>(msg));
    }
    pcre2_jit_compile(c->code, PCRE2_JIT_COMPLETE);  // optional: the interpreter is the fallback
    regexes_.push_back(std::move(c));
  }
}

RegexSplitter::~RegexSplitter() = default;

namespace {

size_t count_cpts(const char* p, size_t nbytes) {
  size_t n = 0;
  for (size_t i = 0; i < nbytes; ++i) n += (static_cast<uint8_t>(p[i]) & 0xC0) != 0x80;
  return n;
}

struct MatchData {
  pcre2_match_data* md = pcre2_match_data_create(16, nullptr);
  ~MatchData() { pcre2_match_data_free(md); }
};

}  // namespace

std::vector<size_t> RegexSplitter::split(const std::vector<uint32_t>& cpts) const {
  // The subject the regexes see: valid UTF-8, one codepoint per input codepoint.
  std::string subject;
  subject.reserve(cpts.size() + 16);
  std::vector<size_t> byte_off(cpts.size() + 1);
  for (size_t i = 0; i < cpts.size(); ++i) {
    byte_off[i] = subject.size();
    uint32_t c = cpts[i];
    if (c > 0x7F && is_whitespace(c)) c = 0x0B;
    if ((c >= 0xD800 && c <= 0xDFFF) || c > 0x10FFFF) c = 0xE000;  // keep PCRE2's input valid
    append_utf8(subject, c);
  }
  byte_off[cpts.size()] = subject.size();

  std::vector<size_t> offsets;
  if (!cpts.empty()) offsets.push_back(cpts.size());
  MatchData match;
  LOOM_CHECK(match.md != nullptr, out_of_memory, "[tokenizer] cannot allocate regex match data");

  for (const auto& re : regexes_) {
    std::vector<size_t> next;
    next.reserve(offsets.size() * 2);
    size_t start = 0;
    for (size_t len : offsets) {
      const char* p = subject.data() + byte_off[start];
      const size_t nbytes = byte_off[start + len] - byte_off[start];
      size_t pos = 0, prev_end = 0;
      uint32_t options = PCRE2_NO_UTF_CHECK;
      while (pos < nbytes) {
        const int rc = pcre2_match(re->code, reinterpret_cast<PCRE2_SPTR>(p), nbytes, pos, options, match.md, nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
          if (!(options & PCRE2_NO_JIT)) {  // e.g. JIT stack exhausted: retry interpreted
            options |= PCRE2_NO_JIT;
            continue;
          }
          break;  // give up on this piece: the rest stays one gap
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match.md);
        const size_t ms = ov[0], me = ov[1];
        if (me <= ms) {  // empty match: step over one codepoint
          if (ms >= nbytes) break;
          pos = ms + utf8_len(static_cast<uint8_t>(p[ms]));
          continue;
        }
        if (ms > prev_end) next.push_back(count_cpts(p + prev_end, ms - prev_end));
        next.push_back(count_cpts(p + ms, me - ms));
        prev_end = pos = me;
      }
      if (prev_end < nbytes) next.push_back(count_cpts(p + prev_end, nbytes - prev_end));
      start += len;
    }
    offsets = std::move(next);
  }
  return offsets;
}

}  // namespace loom::unicode
