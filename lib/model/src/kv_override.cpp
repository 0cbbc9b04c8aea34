// --override-kv: metadata values given on the command line in place of the file's, parsed the
// way llama.cpp reads the flag (KEY=TYPE:VALUE, comma separated) and checked strictly.
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string>

#include "loom/core/error.h"
#include "loom/model/model.h"

namespace loom {
namespace {

constexpr size_t kMaxKey = 127, kMaxString = 127;  // llama.cpp's limits (128-byte buffers)

KvOverride parse_one(std::string_view item, std::string_view flag) {
  const size_t eq = item.find('='), colon = eq == std::string_view::npos ? eq : item.find(':', eq + 1);
  LOOM_CHECK(colon != std::string_view::npos, usage, "{} '{}': expected KEY=TYPE:VALUE (TYPE int, float, bool or str)",
             flag, item);
  const std::string_view key = item.substr(0, eq), type = item.substr(eq + 1, colon - eq - 1),
                         text = item.substr(colon + 1);
  LOOM_CHECK(!key.empty() && key.size() <= kMaxKey, usage, "{} '{}': the key must have 1 to {} characters", flag, item,
             kMaxKey);
  KvOverride o{std::string(key), {}};
  if (type == "int") {
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    LOOM_CHECK(ec == std::errc() && end == text.data() + text.size() && !text.empty(), usage,
               "{} '{}': '{}' is not a 64-bit integer", flag, item, text);
    o.value = gguf::Value::integer(gguf::ValueType::I64, v);
  } else if (type == "float") {
    const std::string s(text);
    char* end = nullptr;
    const double v = s.empty() ? NAN : std::strtod(s.c_str(), &end);
    LOOM_CHECK(!s.empty() && end == s.c_str() + s.size() && std::isfinite(v), usage,
               "{} '{}': '{}' is not a finite number", flag, item, text);
    o.value = gguf::Value::floating(gguf::ValueType::F64, v);
  } else if (type == "bool") {
    LOOM_CHECK(text == "true" || text == "false", usage, "{} '{}': a bool is true or false", flag, item);
    o.value = gguf::Value::boolean(text == "true");
  } else if (type == "str") {
    LOOM_CHECK(text.size() <= kMaxString, usage, "{} '{}': strings are at most {} bytes", flag, item, kMaxString);
    o.value = gguf::Value::string(std::string(text));
  } else {
    fail(ErrorKind::usage, "{} '{}': unknown type '{}' (int, float, bool or str)", flag, item, type);
  }
  return o;
}

}  // namespace

std::vector<KvOverride> parse_kv_overrides(std::string_view spec, std::string_view flag) {
  std::vector<KvOverride> out;
  for (size_t start = 0;;) {
    const size_t comma = spec.find(',', start);
    out.push_back(parse_one(spec.substr(start, comma == std::string_view::npos ? comma : comma - start), flag));
    if (comma == std::string_view::npos) return out;
    start = comma + 1;
  }
}

}  // namespace loom
