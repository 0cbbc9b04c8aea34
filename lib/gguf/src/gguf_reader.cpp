// Strict GGUF v3 reader. The head of the file (metadata and tensor infos) is read, not mapped,
// and parsed through a bounds-checked cursor: every count and length is checked against the
// bytes that remain in the file before anything is allocated, so a corrupt or hostile file fails
// with one clear message, never a crash or a huge allocation. The tensor data is mapped only
// when a tool asks for it, so planning tools work under an address-space limit smaller than the
// file; a mapped file that shrinks later ends the process with exit 3 (SIGBUS guard), not a crash.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <unordered_set>

#include "loom/core/error.h"
#include "loom/core/files.h"
#include "loom/core/hash.h"
#include "loom/gguf/gguf.h"

namespace loom::gguf {

namespace {

// Smallest encodings, used to bound claimed counts by the bytes left in the file.
constexpr size_t kMinKvBytes = 8 + 1 + 4 + 1;       // key length, 1-byte key, type, 1-byte value
constexpr size_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;  // name length, n_dims, type, offset

std::string printable_magic(const uint8_t* p, size_t n) {
  std::string s;
  for (size_t k = 0; k < n; ++k) {
    unsigned char c = p[k];
    s += (c >= 0x20 && c < 0x7f) ? fmt::format("{}", (char)c) : fmt::format("\\x{:02x}", c);
  }
  return s;
}

// Thrown when the parse needs more of the file than was read: the caller reads more and retries.
struct NeedMore {};

constexpr size_t kFirstRead = 1u << 20;

// Bus errors come from a mapped file that shrank under us (truncated or rewritten in place):
// one error line, the temporaries removed, exit 3. The message is built before mapping.
char g_bus_message[1024];
size_t g_bus_len = 0;

extern "C" void on_bus_error(int) {
  if (::write(STDERR_FILENO, g_bus_message, g_bus_len) < 0) {
  }
  remove_registered_temps();
  ::_exit(3);
}

void guard_bus_errors(const std::string& path) {
  const std::string msg = fmt::format(
      "{}: error: {}: the file shrank or was rewritten while in use (bus error reading its mapping)\n",
      program_invocation_short_name, path);
  g_bus_len = std::min(msg.size(), sizeof(g_bus_message));
  std::memcpy(g_bus_message, msg.data(), g_bus_len);
  struct sigaction sa {};
  sa.sa_handler = on_bus_error;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGBUS, &sa, nullptr);
}

// Reads n bytes at offset; a short read means the file shrank since it was opened.
void pread_all(int fd, uint8_t* dst, size_t n, size_t offset, const std::string& path) {
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd, dst + done, n - done, (off_t)(offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fail(ErrorKind::io, "{}: read error: {}", path, std::strerror(errno));
    if (r == 0)
      fail(ErrorKind::invalid_input, "{}: the file shrank while being read ({} bytes expected, {} found)", path,
           offset + n, offset + done);
    done += (size_t)r;
  }
}

}  // namespace

// Parses a file image into a File: `avail` bytes of it are at `data`, `size` is the whole file
// (bounds are checked against size; NeedMore asks for more of the head). Errors name the file (path_) and the item being read.
class Reader {
 public:
  Reader(File& file, const uint8_t* data, size_t avail, size_t size)
      : f_(file), p_(data), avail_(avail), size_(size) {}

  void parse() {
    read_header();
    read_metadata();
    read_alignment();
    read_tensor_infos();
    layout_data();
  }

 private:
  File& f_;
  const uint8_t* p_;
  size_t avail_;
  size_t size_;
  size_t pos_ = 0;
  std::string ctx_;  // "key 'x'" / "tensor 'y'": what is being read, for messages
  int64_t n_tensors_ = 0;
  int64_t n_kv_ = 0;

  const std::string& path() const { return f_.path_; }
  size_t remaining() const { return size_ - pos_; }
  std::string where() const { return ctx_.empty() ? std::string() : ctx_ + ": "; }

  // The next n bytes must have been read (they are known to be in the file).
  void ensure(size_t n) {
    if (n > avail_ - pos_) throw NeedMore{};
  }

  void need(size_t n, const char* what) {
    if (n <= remaining()) return ensure(n);
    fail(ErrorKind::invalid_input, "{}: {}truncated file: {} needs {} bytes at offset {} but only {} remain",
         path(), where(), what, n, pos_, remaining());
  }

  template <typename T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  // A string whose length is checked against the file (and max_len) before it is allocated.
  std::string read_string(const char* what, uint64_t max_len = UINT64_MAX) {
    const uint64_t len = read<uint64_t>(what);
    if (len > max_len)
      fail(ErrorKind::invalid_input, "{}: {}{} is {} bytes long (must be < {})", path(), where(), what, len, max_len + 1);
    if (len > remaining())
      fail(ErrorKind::invalid_input, "{}: {}{} claims {} bytes at offset {} but only {} remain in the file",
           path(), where(), what, len, pos_, remaining());
    ensure((size_t)len);
    std::string s(reinterpret_cast<const char*>(p_ + pos_), (size_t)len);
    pos_ += (size_t)len;
    return s;
  }

  void read_header() {
    need(4, "magic");
    if (std::memcmp(p_, "GGUF", 4) != 0)
      fail(ErrorKind::invalid_input, "{}: not a GGUF file: bad magic '{}' (expected 'GGUF')", path(),
           printable_magic(p_, 4));
    pos_ = 4;
    const uint32_t version = read<uint32_t>("version");
    if (version == 1 || version == 2)
      fail(ErrorKind::unsupported, "{}: GGUF version {} is not supported (only version 3; re-convert the model)",
           path(), version);
    if (version != kVersion && version != 0 && (version & 0xFFFF) == 0)
      fail(ErrorKind::unsupported, "{}: GGUF version {:#x} looks byte-swapped (big-endian file?); only little-endian v3 is supported",
           path(), version);
    if (version != kVersion)
      fail(ErrorKind::invalid_input, "{}: unsupported GGUF version {} (expected 3)", path(), version);
    f_.version_ = version;

    n_tensors_ = read<int64_t>("tensor count");
    n_kv_ = read<int64_t>("metadata count");
    if (n_tensors_ < 0)
      fail(ErrorKind::invalid_input, "{}: negative tensor count {}", path(), n_tensors_);
    if (n_kv_ < 0)
      fail(ErrorKind::invalid_input, "{}: negative metadata count {}", path(), n_kv_);
    if ((uint64_t)n_tensors_ > remaining() / kMinTensorInfoBytes)
      fail(ErrorKind::invalid_input,
           "{}: header claims {} tensors but only {} bytes remain (each tensor info needs at least {})", path(),
           n_tensors_, remaining(), kMinTensorInfoBytes);
    if ((uint64_t)n_kv_ > remaining() / kMinKvBytes)
      fail(ErrorKind::invalid_input,
           "{}: header claims {} metadata keys but only {} bytes remain (each key needs at least {})", path(), n_kv_,
           remaining(), kMinKvBytes);
    // Both bounds hold separately; together they must still fit.
    if ((uint64_t)n_tensors_ * kMinTensorInfoBytes + (uint64_t)n_kv_ * kMinKvBytes > remaining())
      fail(ErrorKind::invalid_input, "{}: header claims {} keys and {} tensors but only {} bytes remain", path(), n_kv_,
           n_tensors_, remaining());
  }

  ValueType read_value_type(const char* what) {
    const int32_t t = read<int32_t>(what);
    if (t < 0 || t > (int32_t)ValueType::F64)
      fail(ErrorKind::invalid_input, "{}: {}unknown value type {}", path(), where(), t);
    return (ValueType)t;
  }

  int64_t read_int(ValueType t) {
    switch (t) {
      case ValueType::U8: return read<uint8_t>("u8 value");
      case ValueType::I8: return read<int8_t>("i8 value");
      case ValueType::U16: return read<uint16_t>("u16 value");
      case ValueType::I16: return read<int16_t>("i16 value");
      case ValueType::U32: return read<uint32_t>("u32 value");
      case ValueType::I32: return read<int32_t>("i32 value");
      case ValueType::U64: return (int64_t)read<uint64_t>("u64 value");
      case ValueType::I64: return read<int64_t>("i64 value");
      case ValueType::BOOL: return read<uint8_t>("bool value") != 0 ? 1 : 0;
      default: LOOM_ASSERT(false, "read_int of {}", value_type_name(t)); return 0;
    }
  }

  double read_float(ValueType t) {
    if (t == ValueType::F32) return read<float>("f32 value");
    return read<double>("f64 value");
  }

  Value read_array() {
    Value v;
    v.type = ValueType::ARRAY;
    v.array_type = read_value_type("array element type");
    if (v.array_type == ValueType::ARRAY)
      fail(ErrorKind::invalid_input, "{}: {}nested arrays are not allowed", path(), where());
    const uint64_t n = read<uint64_t>("array length");
    const size_t elem_min = v.array_type == ValueType::STRING ? 8 : value_type_size(v.array_type);
    if (n > remaining() / elem_min)
      fail(ErrorKind::invalid_input, "{}: {}array of {} {} elements needs at least {} bytes but only {} remain", path(),
           where(), n, value_type_name(v.array_type), n > UINT64_MAX / elem_min ? UINT64_MAX : n * elem_min,
           remaining());
    const size_t reserve = (size_t)std::min<uint64_t>(n, 1 << 16);  // grows with what is really read
    if (v.array_type == ValueType::STRING) {
      v.strings.reserve(reserve);
      for (uint64_t k = 0; k < n; ++k) v.strings.push_back(read_string("array string"));
    } else if (is_float_type(v.array_type)) {
      v.floats.reserve(reserve);
      for (uint64_t k = 0; k < n; ++k) v.floats.push_back(read_float(v.array_type));
    } else {
      v.ints.reserve(reserve);
      for (uint64_t k = 0; k < n; ++k) v.ints.push_back(read_int(v.array_type));
    }
    return v;
  }

  void read_metadata() {
    std::unordered_set<std::string> seen;
    for (int64_t k = 0; k < n_kv_; ++k) {
      ctx_ = fmt::format("metadata key {}", k);
      std::string key = read_string("key");
      if (key.empty()) fail(ErrorKind::invalid_input, "{}: metadata key {} is empty", path(), k);
      ctx_ = fmt::format("key '{}'", key);
      if (!seen.insert(key).second) fail(ErrorKind::invalid_input, "{}: duplicate key '{}'", path(), key);
      Value v;
      const ValueType t = read_value_type("value type");
      f_.value_offsets_.push_back(pos_);
      if (t == ValueType::ARRAY) {
        v = read_array();
      } else if (t == ValueType::STRING) {
        v.type = t;
        v.s = read_string("string value");
      } else if (is_float_type(t)) {
        v.type = t;
        v.f = read_float(t);
      } else {
        v.type = t;
        v.i = read_int(t);
      }
      f_.kv_.emplace_back(std::move(key), std::move(v));
    }
    ctx_.clear();
  }

  void read_alignment() {
    const Value* a = f_.find("general.alignment");
    if (!a) return;
    if (a->type != ValueType::U32)
      fail(ErrorKind::invalid_input, "{}: general.alignment must be of type u32, not {}", path(), format_value_type(*a));
    const uint64_t al = (uint64_t)a->i;
    if (al == 0 || (al & (al - 1)) != 0)
      fail(ErrorKind::invalid_input, "{}: general.alignment {} is not a power of two", path(), al);
    f_.alignment_ = (size_t)al;
  }

  void read_tensor_infos() {
    std::unordered_set<std::string> seen;
    for (int64_t k = 0; k < n_tensors_; ++k) {
      ctx_ = fmt::format("tensor {}", k);
      TensorInfo t;
      t.name = read_string("tensor name", kMaxTensorName - 1);
      ctx_ = fmt::format("tensor '{}'", t.name);
      if (!seen.insert(t.name).second) fail(ErrorKind::invalid_input, "{}: duplicate tensor name '{}'", path(), t.name);
      const uint32_t n_dims = read<uint32_t>("n_dims");
      if (n_dims > (uint32_t)kMaxDims)
        fail(ErrorKind::invalid_input, "{}: tensor '{}' has {} dimensions (at most {})", path(), t.name, n_dims,
             kMaxDims);
      t.n_dims = (int)n_dims;
      for (uint32_t d = 0; d < n_dims; ++d) {
        t.ne[d] = read<int64_t>("dimension");
        if (t.ne[d] < 0)
          fail(ErrorKind::invalid_input, "{}: tensor '{}' dimension {} is negative ({})", path(), t.name, d, t.ne[d]);
      }
      const int32_t type_id = read<int32_t>("tensor type");
      const std::optional<DType> type = dtype_from_id(type_id);
      if (!type) {
        if (const char* name = ggml_type_name(type_id))
          fail(ErrorKind::unsupported, "{}: tensor '{}' has type {} (id {}), which loom does not support", path(),
               t.name, name, type_id);
        fail(ErrorKind::invalid_input, "{}: tensor '{}' has unknown tensor type id {}", path(), t.name, type_id);
      }
      t.type = *type;
      t.nbytes = tensor_nbytes(t.type, t.ne, fmt::format("{}: tensor '{}'", path(), t.name));
      t.offset = read<uint64_t>("tensor offset");
      f_.tensors_.push_back(std::move(t));
    }
    ctx_.clear();
  }

  // The data section starts at the next multiple of the alignment (llama.cpp pads only when
  // there are tensors); each tensor must sit at the running padded sum and lie inside the file.
  void layout_data() {
    const size_t al = f_.alignment_;
    size_t start = pos_;
    if (n_tensors_ > 0) {
      const size_t rem = pos_ % al;
      if (rem) {
        if (al - rem > remaining())
          fail(ErrorKind::invalid_input, "{}: truncated file: data section would start at {} but the file has {} bytes",
               path(), pos_ + (al - rem), size_);
        start = pos_ + (al - rem);
      }
    }
    f_.data_offset_ = start;
    const size_t avail = size_ - start;
    size_t running = 0;
    for (const TensorInfo& t : f_.tensors_) {
      if (t.offset != running)
        fail(ErrorKind::invalid_input, "{}: tensor '{}': offset {} out of order (expected {})", path(), t.name,
             t.offset, running);
      if (t.nbytes > avail || running > avail - t.nbytes)
        fail(ErrorKind::invalid_input,
             "{}: tensor '{}': data at offset {} + {} bytes extends past the end of the file ({} bytes of data)",
             path(), t.name, t.offset, t.nbytes, avail);
      const size_t padded_extra = (al - t.nbytes % al) % al;
      size_t next = 0;
      if (__builtin_add_overflow(running, t.nbytes, &next) || __builtin_add_overflow(next, padded_extra, &next))
        fail(ErrorKind::invalid_input, "{}: tensor '{}': data section size overflows", path(), t.name);
      running = next;
    }
    f_.data_size_ = running;
  }
};

// ---- File ---------------------------------------------------------------------------------

std::unique_ptr<File> File::open(const std::string& path, std::string_view what) {
  const int fd = open_regular_file(path, what);  // a FIFO or device never blocks here
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    fail(ErrorKind::io, "{}: cannot stat: {}", path, std::strerror(e));
  }
  const size_t size = (size_t)st.st_size;
  std::unique_ptr<File> f;
  std::vector<uint8_t> head;
  try {
    if (size == 0) fail(ErrorKind::invalid_input, "{}: empty file, not GGUF", path);
    // Metadata first: the head of the file, read again larger while the parse needs more.
    for (size_t want = std::min(size, kFirstRead);; want = std::min(size, want * 4)) {
      head.resize(want);
      pread_all(fd, head.data(), want, 0, path);
      f.reset(new File());
      f->path_ = path;
      f->file_size_ = size;
      try {
        Reader(*f, head.data(), want, size).parse();
        break;
      } catch (const NeedMore&) {
        LOOM_ASSERT(want < size, "{}: parse asked for bytes past the end", path);
      }
    }
  } catch (...) {
    ::close(fd);
    throw;
  }
  f->fd_ = fd;
  return f;
}

std::unique_ptr<File> File::open_memory(const void* data, size_t size, const std::string& name) {
  std::unique_ptr<File> f(new File());
  f->path_ = name;
  f->owned_.assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + size);
  f->file_size_ = size;
  if (size == 0) fail(ErrorKind::invalid_input, "{}: empty file, not GGUF", name);
  Reader(*f, f->owned_.data(), size, size).parse();
  f->data_ = f->owned_.data() + f->data_offset_;
  return f;
}

File::~File() {
  if (map_) ::munmap(map_, map_size_);
  if (fd_ >= 0) ::close(fd_);
}

void File::map_data() const {
  const size_t page = (size_t)::sysconf(_SC_PAGESIZE);
  const size_t start = data_offset_ / page * page;
  const size_t len = file_size_ - start;
  if (len == 0) return;
  guard_bus_errors(path_);
  void* map = ::mmap(nullptr, len, PROT_READ, MAP_PRIVATE, fd_, (off_t)start);
  if (map == MAP_FAILED)
    fail(ErrorKind::out_of_memory, "{}: cannot map {} bytes ({:.1f} MiB) of tensor data: {}", path_, len,
         (double)len / (1 << 20), std::strerror(errno));
  map_ = map;
  map_size_ = len;
  data_ = static_cast<const uint8_t*>(map) + (data_offset_ - start);
}

const uint8_t* File::data_section() const {
  if (fd_ >= 0) std::call_once(map_once_, [this] { map_data(); });
  return data_;
}

bool File::data_is_hole() const {
  if (fd_ < 0 || data_size_ == 0) return false;
  // The header's last block holds data; look past it.
  const size_t block = 1u << 16;
  const size_t from = (data_offset_ + block - 1) / block * block;
  if (from >= file_size_) return false;
  return ::lseek(fd_, (off_t)from, SEEK_DATA) < 0 && errno == ENXIO;
}

uint64_t File::identity() const {
  // The head (metadata, tensor infos) and 16 evenly spaced 4 KiB samples of the data: two
  // models of one shape with other weights differ, and nothing is mapped.
  constexpr size_t kSamples = 16, kSample = 4096;
  Hasher h;
  h.update_value(file_size_);
  std::vector<uint8_t> buf(std::min(file_size_, std::max(data_offset_, kSample)));
  auto read = [&](size_t off, size_t n) {
    if (fd_ >= 0) pread_all(fd_, buf.data(), n, off, path_);
    else std::memcpy(buf.data(), owned_.data() + off, n);
    h.update(buf.data(), n);
  };
  read(0, std::min(data_offset_, file_size_));
  const size_t data = file_size_ - std::min(data_offset_, file_size_);
  for (size_t k = 0; k < kSamples && data > 0; ++k) {
    const size_t off = data_offset_ + (data - std::min(data, kSample)) * k / (kSamples - 1);
    read(off, std::min(kSample, file_size_ - off));
  }
  return h.digest();
}

uint64_t File::checksum(std::string_view key) const {
  size_t at = SIZE_MAX;
  for (size_t i = 0; i < value_offsets_.size(); ++i)  // the file's keys (set_value may add more)
    if (kv_[i].first == key && kv_[i].second.type == ValueType::U64) at = value_offsets_[i];
  LOOM_CHECK(at != SIZE_MAX, invalid_input, "{}: no checksum (u64 key '{}')", path_, key);
  Hasher h;
  std::vector<uint8_t> buf(std::min<size_t>(file_size_, 4u << 20));
  for (size_t off = 0; off < file_size_; off += buf.size()) {
    const size_t n = std::min(buf.size(), file_size_ - off);
    if (fd_ >= 0) pread_all(fd_, buf.data(), n, off, path_);
    else std::memcpy(buf.data(), owned_.data() + off, n);
    // The checksum's own bytes count as zeros.
    for (size_t k = 0; k < 8; ++k)
      if (at + k >= off && at + k < off + n) buf[at + k - off] = 0;
    h.update(buf.data(), n);
  }
  return h.digest();
}

void File::check_size() const {
  if (fd_ < 0) return;
  struct stat st {};
  LOOM_CHECK(::fstat(fd_, &st) == 0 && (size_t)st.st_size >= file_size_, invalid_input,
             "{}: the file shrank while in use ({} bytes when opened, {} now)", path_, file_size_, (size_t)st.st_size);
}

void File::set_value(std::string key, Value value) {
  for (auto& [k, v] : kv_)
    if (k == key) {
      v = std::move(value);
      return;
    }
  kv_.emplace_back(std::move(key), std::move(value));
}

const Value* File::find(std::string_view key) const {
  for (const auto& [k, v] : kv_)
    if (k == key) return &v;
  return nullptr;
}

namespace {
[[noreturn]] void missing(const std::string& path, std::string_view key) {
  fail(ErrorKind::invalid_input, "{}: missing metadata key '{}'", path, key);
}
[[noreturn]] void wrong_type(const std::string& path, std::string_view key, const Value& v, const char* want) {
  fail(ErrorKind::invalid_input, "{}: metadata key '{}' is {}, expected {}", path, key, format_value_type(v), want);
}
}  // namespace

std::optional<std::string> File::find_string(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != ValueType::STRING) wrong_type(path_, key, *v, "a string");
  return v->s;
}

std::optional<int64_t> File::find_int(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (!is_integer_type(v->type)) wrong_type(path_, key, *v, "an integer");
  return v->i;
}

std::optional<double> File::find_float(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (is_float_type(v->type)) return v->f;
  if (is_integer_type(v->type)) return v->type == ValueType::U64 ? (double)(uint64_t)v->i : (double)v->i;
  wrong_type(path_, key, *v, "a number");
}

std::string File::get_string(std::string_view key) const {
  auto v = find_string(key);
  if (!v) missing(path_, key);
  return *v;
}

int64_t File::get_int(std::string_view key) const {
  auto v = find_int(key);
  if (!v) missing(path_, key);
  return *v;
}

double File::get_float(std::string_view key) const {
  auto v = find_float(key);
  if (!v) missing(path_, key);
  return *v;
}

bool File::get_bool(std::string_view key) const {
  const Value* v = find(key);
  if (!v) missing(path_, key);
  if (v->type != ValueType::BOOL) wrong_type(path_, key, *v, "a bool");
  return v->i != 0;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  for (const TensorInfo& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

const uint8_t* File::tensor_data(const TensorInfo& t) const { return data_section() + t.offset; }

size_t File::tensor_bytes_total() const {
  size_t total = 0;
  for (const TensorInfo& t : tensors_) total += t.nbytes;
  return total;
}

}  // namespace loom::gguf
