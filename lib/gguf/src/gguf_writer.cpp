// GGUF v3 writer: encodes metadata and tensor infos exactly as llama.cpp's gguf does, streams
// tensor bytes from callbacks in bounded chunks, through AtomicFile (a unique temporary, renamed).
// Header-only files end with ftruncate, leaving the data section as a sparse hole.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "loom/core/files.h"
#include "loom/core/hash.h"
#include "loom/core/error.h"
#include "loom/gguf/gguf.h"

namespace loom::gguf {

namespace {

constexpr size_t kChunkBytes = 16u << 20;

class ByteSink {
 public:
  std::vector<uint8_t> buf;
  template <typename T>
  void put(T v) {
    const size_t at = buf.size();
    buf.resize(at + sizeof(T));
    std::memcpy(buf.data() + at, &v, sizeof(T));
  }
  void put_string(std::string_view s) {
    put<uint64_t>(s.size());
    buf.insert(buf.end(), s.begin(), s.end());
  }
  void put_int(ValueType t, int64_t v) {
    switch (t) {
      case ValueType::U8: put<uint8_t>((uint8_t)v); break;
      case ValueType::I8: put<int8_t>((int8_t)v); break;
      case ValueType::U16: put<uint16_t>((uint16_t)v); break;
      case ValueType::I16: put<int16_t>((int16_t)v); break;
      case ValueType::U32: put<uint32_t>((uint32_t)v); break;
      case ValueType::I32: put<int32_t>((int32_t)v); break;
      case ValueType::U64: put<uint64_t>((uint64_t)v); break;
      case ValueType::I64: put<int64_t>(v); break;
      case ValueType::BOOL: put<int8_t>(v ? 1 : 0); break;
      default: LOOM_ASSERT(false, "put_int of {}", value_type_name(t));
    }
  }
  void put_float(ValueType t, double v) {
    if (t == ValueType::F32) put<float>((float)v);
    else put<double>(v);
  }
  void pad(size_t alignment) {
    while (buf.size() % alignment) buf.push_back(0);
  }
};

void check_value(const std::string& key, const Value& v) {
  LOOM_CHECK(!key.empty(), invalid_input, "gguf writer: empty metadata key");
  if (v.type != ValueType::ARRAY) return;
  LOOM_CHECK(v.array_type != ValueType::ARRAY, invalid_input, "gguf writer: key '{}': nested arrays are not allowed",
             key);
  // Elements must sit in the vector matching the element type.
  const bool ok = v.array_type == ValueType::STRING ? (v.ints.empty() && v.floats.empty())
                  : is_float_type(v.array_type)     ? (v.ints.empty() && v.strings.empty())
                                                    : (v.floats.empty() && v.strings.empty());
  LOOM_CHECK(ok, invalid_input, "gguf writer: key '{}': array elements stored for the wrong element type {}", key,
             value_type_name(v.array_type));
}

void put_value(ByteSink& out, const Value& v) {
  out.put<int32_t>((int32_t)v.type);
  switch (v.type) {
    case ValueType::STRING: out.put_string(v.s); return;
    case ValueType::F32: case ValueType::F64: out.put_float(v.type, v.f); return;
    case ValueType::ARRAY: break;
    default: out.put_int(v.type, v.i); return;
  }
  out.put<int32_t>((int32_t)v.array_type);
  out.put<uint64_t>(v.array_size());
  if (v.array_type == ValueType::STRING) {
    for (const std::string& s : v.strings) out.put_string(s);
  } else if (is_float_type(v.array_type)) {
    for (double x : v.floats) out.put_float(v.array_type, x);
  } else {
    for (int64_t x : v.ints) out.put_int(v.array_type, x);
  }
}

size_t pad_to(size_t n, size_t alignment) { return (n + alignment - 1) / alignment * alignment; }

}  // namespace

void Writer::set(std::string key, Value value) {
  check_value(key, value);
  for (auto& [k, v] : kv_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  kv_.emplace_back(std::move(key), std::move(value));
}

const Value* Writer::find(std::string_view key) const {
  for (const auto& [k, v] : kv_)
    if (k == key) return &v;
  return nullptr;
}

bool Writer::remove(std::string_view key) {
  for (auto it = kv_.begin(); it != kv_.end(); ++it) {
    if (it->first == key) {
      kv_.erase(it);
      return true;
    }
  }
  return false;
}

void Writer::add_tensor_rows(std::string name, DType type, int n_dims, const int64_t* ne, FillRowsFn fill) {
  LOOM_CHECK(!name.empty() && name.size() < kMaxTensorName, invalid_input,
             "gguf writer: tensor name '{}' must be 1 to {} bytes", name, kMaxTensorName - 1);
  LOOM_CHECK(n_dims >= 1 && n_dims <= kMaxDims, invalid_input, "gguf writer: tensor '{}': {} dimensions (1 to {})",
             name, n_dims, kMaxDims);
  for (const PendingTensor& t : tensors_)
    LOOM_CHECK(t.info.name != name, invalid_input, "gguf writer: duplicate tensor name '{}'", name);
  PendingTensor t;
  t.info.name = std::move(name);
  t.info.type = type;
  t.info.n_dims = n_dims;
  for (int d = 0; d < n_dims; ++d) t.info.ne[d] = ne[d];
  t.info.nbytes = tensor_nbytes(type, t.info.ne, fmt::format("gguf writer: tensor '{}'", t.info.name));
  t.fill_rows = std::move(fill);
  tensors_.push_back(std::move(t));
}

void Writer::add_tensor(std::string name, DType type, int n_dims, const int64_t* ne, FillFn fill) {
  add_tensor_rows(std::move(name), type, n_dims, ne, nullptr);
  tensors_.back().fill = std::move(fill);
}

void Writer::add_tensor(std::string name, DType type, int n_dims, const int64_t* ne, const void* data) {
  const uint8_t* src = static_cast<const uint8_t*>(data);
  add_tensor_rows(std::move(name), type, n_dims, ne, nullptr);
  const size_t row_bytes = row_size(type, tensors_.back().info.ne[0]);
  tensors_.back().fill_rows = [src, row_bytes](uint8_t* dst, int64_t row0, int64_t n_rows) {
    if (row_bytes) std::memcpy(dst, src + (size_t)row0 * row_bytes, (size_t)n_rows * row_bytes);
  };
}

size_t Writer::alignment() const {
  const Value* a = find("general.alignment");
  if (!a) return kDefaultAlignment;
  LOOM_CHECK(a->type == ValueType::U32, invalid_input, "gguf writer: general.alignment must be u32, not {}",
             format_value_type(*a));
  const uint64_t al = (uint32_t)a->i;
  LOOM_CHECK(al != 0 && (al & (al - 1)) == 0, invalid_input, "gguf writer: general.alignment {} is not a power of two",
             al);
  return (size_t)al;
}

void Writer::set_checksum_key(std::string key) {
  set(key, Value::u64(0));
  checksum_key_ = std::move(key);
}

std::vector<uint8_t> Writer::encode_header(size_t al, size_t* checksum_at) const {
  ByteSink out;
  out.put<uint32_t>(kMagic);
  out.put<uint32_t>(kVersion);
  out.put<int64_t>((int64_t)tensors_.size());
  out.put<int64_t>((int64_t)kv_.size());
  for (const auto& [k, v] : kv_) {
    out.put_string(k);
    if (checksum_at && k == checksum_key_) *checksum_at = out.buf.size() + sizeof(int32_t);  // after the type
    put_value(out, v);
  }
  uint64_t offset = 0;
  for (const PendingTensor& t : tensors_) {
    out.put_string(t.info.name);
    out.put<uint32_t>((uint32_t)t.info.n_dims);
    for (int d = 0; d < t.info.n_dims; ++d) out.put<int64_t>(t.info.ne[d]);
    out.put<int32_t>((int32_t)t.info.type);
    out.put<uint64_t>(offset);
    offset += pad_to(t.info.nbytes, al);
  }
  out.pad(al);  // llama.cpp pads the header even when there are no tensors
  return std::move(out.buf);
}

size_t Writer::header_size() const { return encode_header(alignment()).size(); }

namespace {
template <typename Tensors>
size_t data_end(size_t header_bytes, const Tensors& tensors, size_t al) {
  size_t total = header_bytes;
  for (const auto& t : tensors) {
    LOOM_CHECK(!__builtin_add_overflow(total, pad_to(t.info.nbytes, al), &total), invalid_input,
               "gguf writer: file size overflows");
  }
  return total;
}
}  // namespace

size_t Writer::file_size() const { return data_end(header_size(), tensors_, alignment()); }

void Writer::write(const std::string& path, bool header_only) const {
  const size_t al = alignment();
  size_t checksum_at = 0;
  const std::vector<uint8_t> header = encode_header(al, &checksum_at);
  const size_t total = data_end(header.size(), tensors_, al);
  AtomicFile out(path);
  Hasher hasher;
  struct {
    AtomicFile& f;
    Hasher& h;
    bool hash;
    void write(const uint8_t* p, size_t n) {
      f.write(p, n);
      if (hash) h.update(p, n);
    }
  } file{out, hasher, !checksum_key_.empty()};
  file.write(header.data(), header.size());
  if (header_only) {
    out.truncate(total);
    out.commit();
    return;
  }
  std::vector<uint8_t> chunk;
  const uint8_t zeros[256] = {};
  for (const PendingTensor& t : tensors_) {
    const TensorInfo& info = t.info;
    if (t.fill) {  // whole tensor at once
      chunk.assign(info.nbytes, 0);
      t.fill(chunk.data(), info.nbytes);
      file.write(chunk.data(), info.nbytes);
    } else if (info.nbytes > 0) {
      const int64_t n_rows = info.ne[1] * info.ne[2] * info.ne[3];
      const size_t row_bytes = info.nbytes / (size_t)n_rows;
      const int64_t rows_per_chunk = std::max<int64_t>(1, (int64_t)(kChunkBytes / row_bytes));
      for (int64_t r = 0; r < n_rows; r += rows_per_chunk) {
        const int64_t n = std::min(rows_per_chunk, n_rows - r);
        chunk.assign((size_t)n * row_bytes, 0);
        if (t.fill_rows) t.fill_rows(chunk.data(), r, n);
        file.write(chunk.data(), chunk.size());
      }
    }
    for (size_t pad = pad_to(info.nbytes, al) - info.nbytes; pad > 0;) {
      const size_t n = std::min(pad, sizeof(zeros));
      file.write(zeros, n);
      pad -= n;
    }
  }
  if (!checksum_key_.empty()) {
    const uint64_t sum = hasher.digest();
    LOOM_CHECK(::pwrite(out.fd(), &sum, sizeof(sum), (off_t)checksum_at) == (ssize_t)sizeof(sum), io,
               "{}: cannot write the checksum: {}", path, std::strerror(errno));
  }
  out.commit();
}

}  // namespace loom::gguf
