// GGUF v3 files: a strict, overflow-safe reader (metadata read, tensor data mapped on demand), and a writer that
// writes to a temporary name and renames (optionally leaving the data section as a sparse hole,
// "header-only"). Byte-compatible with llama.cpp's gguf.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "loom/core/dtype.h"

namespace loom::gguf {

inline constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
inline constexpr uint32_t kVersion = 3;
inline constexpr uint32_t kDefaultAlignment = 32;
inline constexpr size_t kMaxTensorName = 64;  // names must be shorter (llama.cpp's GGML_MAX_NAME)
inline constexpr int kMaxDims = 4;

enum class ValueType : int32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};
const char* value_type_name(ValueType t);  // "u32", "str", "arr", ... (llama.cpp's spelling)
bool is_integer_type(ValueType t);         // U8..I64 (not BOOL)
bool is_float_type(ValueType t);           // F32, F64
size_t value_type_size(ValueType t);       // bytes of one scalar on disk; 0 for STRING/ARRAY

// Name of a ggml tensor type id ("q5_K", as ggml prints it), also for the ones loom does not support; nullptr if
// the id is not a ggml type at all.
const char* ggml_type_name(int64_t id);

// One metadata value. Scalars use the field matching their type family; arrays keep their
// element type in array_type and their elements in ints (all integer types and bool),
// floats (F32/F64) or strings.
struct Value {
  ValueType type = ValueType::U8;
  ValueType array_type = ValueType::U8;
  int64_t i = 0;  // signed and unsigned integers (U64 above 2^63 stored as its bit pattern), bool
  double f = 0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;

  static Value u32(uint32_t v);
  static Value i32(int32_t v);
  static Value u64(uint64_t v);
  static Value f32(float v);
  static Value boolean(bool v);
  static Value string(std::string v);
  static Value string_array(std::vector<std::string> v);
  static Value f32_array(std::vector<double> v);
  static Value i32_array(std::vector<int64_t> v);
  // Any integer or bool scalar type (the value is truncated to the type's width on write).
  static Value integer(ValueType t, int64_t v);
  static Value floating(ValueType t, double v);  // F32 or F64
  // Arrays of any element type: integer/bool types in ints, F32/F64 in floats.
  static Value int_array(ValueType elem, std::vector<int64_t> v);
  static Value float_array(ValueType elem, std::vector<double> v);

  size_t array_size() const;  // elements of an array value, 0 otherwise
  bool operator==(const Value&) const = default;
};

// Text for a value as `loom-gguf info` prints it; arrays longer than max_elems are abbreviated
// (`[1, 2, 3, ... 128253 more]`). Strings are quoted and escaped.
std::string format_value(const Value& v, size_t max_elems = 8);
// "u32", "str", "arr[str,151936]".
std::string format_value_type(const Value& v);

struct TensorInfo {
  std::string name;
  DType type = DType::F32;
  int n_dims = 0;
  int64_t ne[4] = {1, 1, 1, 1};
  uint64_t offset = 0;  // relative to the data section
  size_t nbytes = 0;
  int64_t nelements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
};

// Bytes of a tensor of this type and shape; throws invalid_input when ne[0] is not a multiple of
// the block size or the size overflows (what names the tensor in the message).
size_t tensor_nbytes(DType type, const int64_t ne[4], std::string_view what);

// A parsed GGUF file. open() validates everything it reads and throws loom::Error
// (invalid_input for a malformed file, unsupported for a valid one loom cannot use, io for an
// unreadable one) naming the file and the problem.
// Tensor data is mapped, not read: planning tools never touch the data pages.
class File {
 public:
  // what: how an error that the file cannot be opened names it ("model file 'PATH': ...").
  static std::unique_ptr<File> open(const std::string& path, std::string_view what = "model file");
  // Parses a copy of bytes held in memory (fuzzing, tests); name stands for the path in errors.
  static std::unique_ptr<File> open_memory(const void* data, size_t size, const std::string& name);
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  size_t alignment() const { return alignment_; }
  size_t data_offset() const { return data_offset_; }
  size_t data_size() const { return data_size_; }  // padded sum of all tensors
  size_t file_size() const { return file_size_; }

  const std::vector<std::pair<std::string, Value>>& metadata() const { return kv_; }
  const Value* find(std::string_view key) const;
  // Typed getters: throw invalid_input naming the key if missing or of the wrong type family.
  std::string get_string(std::string_view key) const;
  int64_t get_int(std::string_view key) const;
  double get_float(std::string_view key) const;  // accepts integer values too
  bool get_bool(std::string_view key) const;
  std::optional<std::string> find_string(std::string_view key) const;
  std::optional<int64_t> find_int(std::string_view key) const;
  std::optional<double> find_float(std::string_view key) const;

  // --override-kv: the key's value from now on (added when the file has none). Only this object
  // changes: identity() and checksum() still describe the file's bytes.
  void set_value(std::string key, Value value);

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;
  // Pointer to the tensor's bytes inside the mapping (valid while the File lives). The data
  // section is mapped on the first call: out_of_memory (exit 4) with the size when it cannot be.
  const uint8_t* tensor_data(const TensorInfo& t) const;
  // A header-only file: the data section is a sparse hole (nothing to read but zeros).
  bool data_is_hole() const;
  // invalid_input when the file is now smaller than when it was opened (truncated under us).
  void check_size() const;
  // Hash of the metadata, tensor infos, file size and 16 small samples of the tensor data (read,
  // not mapped): what MPI ranks and loom-train --resume compare to know they have one model.
  uint64_t identity() const;
  // Checksum of the whole file with the u64 value of `key` counted as zeros (see
  // Writer::set_checksum_key). Reads every byte.
  uint64_t checksum(std::string_view key) const;
  size_t tensor_bytes_total() const;  // sum of nbytes (without padding)

 private:
  File() = default;
  std::string path_;
  uint32_t version_ = 0;
  size_t alignment_ = kDefaultAlignment;
  size_t data_offset_ = 0;
  size_t data_size_ = 0;
  size_t file_size_ = 0;
  std::vector<std::pair<std::string, Value>> kv_;
  std::vector<TensorInfo> tensors_;
  void map_data() const;
  const uint8_t* data_section() const;
  int fd_ = -1;
  std::vector<size_t> value_offsets_;  // file offset of each metadata value (after its type)
  mutable std::once_flag map_once_;
  mutable const uint8_t* data_ = nullptr;  // the data section: in owned_, or in the mapping
  mutable void* map_ = nullptr;
  mutable size_t map_size_ = 0;
  std::vector<uint8_t> owned_;
  friend class Reader;
};

// Builds a GGUF file: metadata in insertion order, tensors packed in insertion order at the
// alignment. Tensor bytes come from a callback so multi-GiB models stream to disk.
class Writer {
 public:
  using FillFn = std::function<void(uint8_t* dst, size_t nbytes)>;
  // Fills rows [row0, row0 + n_rows) of a tensor (a row is ne[0] elements, rows counted over
  // ne[1..3]); dst points at row0's bytes. Called in order with chunks of at most ~16 MiB.
  using FillRowsFn = std::function<void(uint8_t* dst, int64_t row0, int64_t n_rows)>;

  void set(std::string key, Value value);  // replaces an existing key in place
  const Value* find(std::string_view key) const;
  bool remove(std::string_view key);
  // Shape checks (name < 64 bytes, 1..4 dims, ne >= 0, ne[0] a multiple of the block size, no
  // duplicate names) throw invalid_input naming the tensor.
  void add_tensor(std::string name, DType type, int n_dims, const int64_t* ne, FillFn fill);
  void add_tensor(std::string name, DType type, int n_dims, const int64_t* ne, const void* data);
  void add_tensor_rows(std::string name, DType type, int n_dims, const int64_t* ne, FillRowsFn fill);

  const std::vector<std::pair<std::string, Value>>& metadata() const { return kv_; }
  size_t n_tensors() const { return tensors_.size(); }
  // Alignment from general.alignment (validated) or the default.
  size_t alignment() const;
  // Bytes of the header incl. padding to the data section, and the whole file.
  size_t header_size() const;
  size_t file_size() const;

  // Writes through AtomicFile (unique temporary, fsync, rename). header_only: metadata +
  // tensor infos, data section left as a sparse hole of the right size (ftruncate), so the file is full-size but costs no disk.
  // On any error the temporary file is removed and loom::Error (io) names the path.
  void write(const std::string& path, bool header_only = false) const;
  // Adds key (u64) holding the file's checksum: loom::Hasher over every byte of the file with
  // this value's 8 bytes as zeros (File::checksum recomputes it).
  void set_checksum_key(std::string key);

 private:
  struct PendingTensor {
    TensorInfo info;
    FillFn fill;
    FillRowsFn fill_rows;
  };
  // checksum_at: where the checksum key's value sits in the header (when there is one).
  std::vector<uint8_t> encode_header(size_t alignment, size_t* checksum_at = nullptr) const;
  std::string checksum_key_;
  std::vector<std::pair<std::string, Value>> kv_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace loom::gguf
