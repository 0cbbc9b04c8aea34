// GGUF metadata values: constructors, type names and sizes, the text form `loom-gguf info`
// prints, and the tensor byte-size rule shared by the reader and the writer.
#include <fmt/format.h>

#include <limits>

#include "loom/core/error.h"
#include "loom/gguf/gguf.h"

namespace loom::gguf {

const char* value_type_name(ValueType t) {
  switch (t) {
    case ValueType::U8: return "u8";
    case ValueType::I8: return "i8";
    case ValueType::U16: return "u16";
    case ValueType::I16: return "i16";
    case ValueType::U32: return "u32";
    case ValueType::I32: return "i32";
    case ValueType::F32: return "f32";
    case ValueType::BOOL: return "bool";
    case ValueType::STRING: return "str";
    case ValueType::ARRAY: return "arr";
    case ValueType::U64: return "u64";
    case ValueType::I64: return "i64";
    case ValueType::F64: return "f64";
  }
  return "?";
}

bool is_integer_type(ValueType t) {
  switch (t) {
    case ValueType::U8: case ValueType::I8: case ValueType::U16: case ValueType::I16:
    case ValueType::U32: case ValueType::I32: case ValueType::U64: case ValueType::I64: return true;
    default: return false;
  }
}

bool is_float_type(ValueType t) { return t == ValueType::F32 || t == ValueType::F64; }

size_t value_type_size(ValueType t) {
  switch (t) {
    case ValueType::U8: case ValueType::I8: case ValueType::BOOL: return 1;
    case ValueType::U16: case ValueType::I16: return 2;
    case ValueType::U32: case ValueType::I32: case ValueType::F32: return 4;
    case ValueType::U64: case ValueType::I64: case ValueType::F64: return 8;
    case ValueType::STRING: case ValueType::ARRAY: return 0;
  }
  return 0;
}

const char* ggml_type_name(int64_t id) {
  // ggml_type ids; empty entries were removed from ggml and are not valid in files.
  static constexpr const char* kNames[] = {
      "f32",     "f16",    "q4_0",    "q4_1",   "",        "",       "q5_0",   "q5_1",
      "q8_0",    "q8_1",   "q2_K",    "q3_K",   "q4_K",    "q5_K",   "q6_K",   "q8_K",
      "iq2_xxs", "iq2_xs", "iq3_xxs", "iq1_s",  "iq4_nl",  "iq3_s",  "iq2_s",  "iq4_xs",
      "i8",      "i16",    "i32",     "i64",    "f64",     "iq1_m",  "bf16",   "",
      "",        "",       "tq1_0",   "tq2_0",  "",        "",       "",       "mxfp4"};
  if (id < 0 || id >= (int64_t)std::size(kNames) || kNames[id][0] == '\0') return nullptr;
  return kNames[id];
}

Value Value::u32(uint32_t v) { return integer(ValueType::U32, v); }
Value Value::i32(int32_t v) { return integer(ValueType::I32, v); }
Value Value::u64(uint64_t v) { return integer(ValueType::U64, (int64_t)v); }
Value Value::f32(float v) { return floating(ValueType::F32, v); }
Value Value::boolean(bool v) { return integer(ValueType::BOOL, v ? 1 : 0); }

Value Value::string(std::string v) {
  Value r;
  r.type = ValueType::STRING;
  r.s = std::move(v);
  return r;
}

Value Value::string_array(std::vector<std::string> v) {
  Value r;
  r.type = ValueType::ARRAY;
  r.array_type = ValueType::STRING;
  r.strings = std::move(v);
  return r;
}

Value Value::f32_array(std::vector<double> v) { return float_array(ValueType::F32, std::move(v)); }
Value Value::i32_array(std::vector<int64_t> v) { return int_array(ValueType::I32, std::move(v)); }

Value Value::integer(ValueType t, int64_t v) {
  LOOM_ASSERT(is_integer_type(t) || t == ValueType::BOOL, "Value::integer of type {}", value_type_name(t));
  Value r;
  r.type = t;
  r.i = v;
  return r;
}

Value Value::floating(ValueType t, double v) {
  LOOM_ASSERT(is_float_type(t), "Value::floating of type {}", value_type_name(t));
  Value r;
  r.type = t;
  r.f = t == ValueType::F32 ? (double)(float)v : v;
  return r;
}

Value Value::int_array(ValueType elem, std::vector<int64_t> v) {
  LOOM_ASSERT(is_integer_type(elem) || elem == ValueType::BOOL, "int_array of {}", value_type_name(elem));
  Value r;
  r.type = ValueType::ARRAY;
  r.array_type = elem;
  r.ints = std::move(v);
  return r;
}

Value Value::float_array(ValueType elem, std::vector<double> v) {
  LOOM_ASSERT(is_float_type(elem), "float_array of {}", value_type_name(elem));
  Value r;
  r.type = ValueType::ARRAY;
  r.array_type = elem;
  r.floats = std::move(v);
  if (elem == ValueType::F32)
    for (double& x : r.floats) x = (double)(float)x;
  return r;
}

size_t Value::array_size() const {
  if (type != ValueType::ARRAY) return 0;
  if (array_type == ValueType::STRING) return strings.size();
  if (is_float_type(array_type)) return floats.size();
  return ints.size();
}

namespace {

std::string quote(std::string_view s, size_t max_len = 256) {
  std::string out = "\"";
  size_t n = 0;
  for (char c : s) {
    if (++n > max_len) {
      out += "...";
      break;
    }
    unsigned char u = (unsigned char)c;
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (u < 0x20 || u == 0x7f) {
      out += fmt::format("\\x{:02x}", u);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string format_int(ValueType t, int64_t v) {
  if (t == ValueType::BOOL) return v ? "true" : "false";
  if (t == ValueType::U64) return fmt::format("{}", (uint64_t)v);
  return fmt::format("{}", v);
}

std::string format_float(ValueType t, double v) {
  if (t == ValueType::F32) return fmt::format("{}", (float)v);
  return fmt::format("{}", v);
}

}  // namespace

std::string format_value_type(const Value& v) {
  if (v.type != ValueType::ARRAY) return value_type_name(v.type);
  return fmt::format("arr[{},{}]", value_type_name(v.array_type), v.array_size());
}

std::string format_value(const Value& v, size_t max_elems) {
  switch (v.type) {
    case ValueType::STRING: return quote(v.s);
    case ValueType::F32: case ValueType::F64: return format_float(v.type, v.f);
    case ValueType::ARRAY: break;
    default: return format_int(v.type, v.i);
  }
  const size_t n = v.array_size();
  const size_t shown = std::min(n, max_elems);
  std::string out = "[";
  for (size_t k = 0; k < shown; ++k) {
    if (k) out += ", ";
    if (v.array_type == ValueType::STRING) out += quote(v.strings[k], 64);
    else if (is_float_type(v.array_type)) out += format_float(v.array_type, v.floats[k]);
    else out += format_int(v.array_type, v.ints[k]);
  }
  if (shown < n) out += fmt::format("{}... {} more", shown ? ", " : "", n - shown);
  return out + "]";
}

size_t tensor_nbytes(DType type, const int64_t ne[4], std::string_view what) {
  const DTypeInfo& info = dtype_info(type);
  int64_t n = 1;
  for (int d = 0; d < kMaxDims; ++d) {
    LOOM_CHECK(ne[d] >= 0, invalid_input, "{}: dimension {} is negative ({})", what, d, ne[d]);
    LOOM_CHECK(!__builtin_mul_overflow(n, ne[d], &n), invalid_input,
               "{}: element count of shape [{}, {}, {}, {}] overflows int64", what, ne[0], ne[1], ne[2], ne[3]);
  }
  LOOM_CHECK(ne[0] % info.block_size == 0, invalid_input,
             "{}: ne[0] = {} is not a multiple of the {} block size {}", what, ne[0], info.name, info.block_size);
  size_t bytes = 0;
  LOOM_CHECK(!__builtin_mul_overflow((size_t)(n / info.block_size), info.type_size, &bytes), invalid_input,
             "{}: byte size of shape [{}, {}, {}, {}] {} overflows", what, ne[0], ne[1], ne[2], ne[3], info.name);
  return bytes;
}

}  // namespace loom::gguf
