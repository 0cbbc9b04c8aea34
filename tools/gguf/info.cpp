// `loom-gguf info`: a GGUF file's header, metadata and tensor table as text (long arrays
// abbreviated) or as JSON (everything, machine-readable).
#include "info.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>

#include "loom/gguf/gguf.h"

namespace loom::gguf_tool {

using gguf::Value;
using gguf::ValueType;
using Json = nlohmann::ordered_json;

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 4) {
    bytes /= 1024.0;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.2f} {}", bytes, units[u]);
}

std::string format_count(double n) {
  if (n >= 1e9) return fmt::format("{:.2f} B", n / 1e9);
  if (n >= 1e6) return fmt::format("{:.2f} M", n / 1e6);
  if (n >= 1e3) return fmt::format("{:.2f} K", n / 1e3);
  return fmt::format("{:.0f}", n);
}

namespace {

std::string shape_text(const gguf::TensorInfo& t) {
  std::string s = "[";
  for (int d = 0; d < t.n_dims; ++d) s += fmt::format("{}{}", d ? ", " : "", t.ne[d]);
  return s + "]";
}

double total_params(const gguf::File& f) {
  double n = 0;
  for (const gguf::TensorInfo& t : f.tensors()) n += (double)t.nelements();
  return n;
}

// f32 values print as their shortest float text ("1e-05", not 9.99999974738e-06).
Json float_json(ValueType t, double v) {
  if (t == ValueType::F32) return std::stod(fmt::format("{}", (float)v));
  return v;
}

Json int_json(ValueType t, int64_t v) {
  if (t == ValueType::BOOL) return v != 0;
  if (t == ValueType::U64) return (uint64_t)v;
  return v;
}

Json value_json(const Value& v) {
  switch (v.type) {
    case ValueType::STRING: return v.s;
    case ValueType::F32: case ValueType::F64: return float_json(v.type, v.f);
    case ValueType::ARRAY: break;
    default: return int_json(v.type, v.i);
  }
  Json arr = Json::array();
  if (v.array_type == ValueType::STRING) {
    for (const std::string& s : v.strings) arr.push_back(s);
  } else if (gguf::is_float_type(v.array_type)) {
    for (double x : v.floats) arr.push_back(float_json(v.array_type, x));
  } else {
    for (int64_t x : v.ints) arr.push_back(int_json(v.array_type, x));
  }
  return arr;
}

}  // namespace

void print_info_text(const gguf::File& f, std::FILE* out) {
  fmt::print(out, "{}: GGUF v{}, alignment {}, {} bytes, data section at offset {}\n", f.path(), f.version(),
             f.alignment(), f.file_size(), f.data_offset());
  fmt::print(out, "n_kv: {}\n", f.metadata().size());
  size_t key_w = 10;
  for (const auto& [k, v] : f.metadata()) key_w = std::max(key_w, k.size());
  for (const auto& [k, v] : f.metadata())
    fmt::print(out, "  {:<{}}  {:<16} = {}\n", k, key_w, gguf::format_value_type(v), gguf::format_value(v));
  fmt::print(out, "n_tensors: {}\n", f.tensors().size());
  size_t name_w = 10;
  for (const gguf::TensorInfo& t : f.tensors()) name_w = std::max(name_w, t.name.size());
  for (const gguf::TensorInfo& t : f.tensors())
    fmt::print(out, "  {:<{}}  {:<5} {:<24} offset {:>12}  {}\n", t.name, name_w, dtype_name(t.type), shape_text(t),
               t.offset, format_bytes((double)t.nbytes));
  const size_t bytes = f.tensor_bytes_total();
  fmt::print(out, "total: {} tensors, {} params, {} ({} bytes)\n", f.tensors().size(), format_count(total_params(f)),
             format_bytes((double)bytes), bytes);
}

void print_info_json(const gguf::File& f, std::FILE* out) {
  Json j;
  j["path"] = f.path();
  j["version"] = f.version();
  j["alignment"] = f.alignment();
  j["file_size"] = f.file_size();
  j["data_offset"] = f.data_offset();
  j["data_size"] = f.data_size();
  j["n_kv"] = f.metadata().size();
  j["n_tensors"] = f.tensors().size();
  Json meta = Json::object(), types = Json::object();
  for (const auto& [k, v] : f.metadata()) {
    meta[k] = value_json(v);
    types[k] = gguf::format_value_type(v);
  }
  j["metadata"] = std::move(meta);
  j["metadata_types"] = std::move(types);
  Json tensors = Json::array();
  for (const gguf::TensorInfo& t : f.tensors()) {
    Json shape = Json::array();
    for (int d = 0; d < t.n_dims; ++d) shape.push_back(t.ne[d]);
    tensors.push_back(Json{{"name", t.name},
                           {"type", dtype_name(t.type)},
                           {"shape", std::move(shape)},
                           {"n_elements", t.nelements()},
                           {"offset", t.offset},
                           {"nbytes", t.nbytes}});
  }
  j["tensors"] = std::move(tensors);
  j["n_params"] = (int64_t)total_params(f);
  j["tensor_bytes"] = f.tensor_bytes_total();
  j["tensor_bytes_human"] = format_bytes((double)f.tensor_bytes_total());
  const std::string text = j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace);
  fmt::print(out, "{}\n", text);
}

}  // namespace loom::gguf_tool
