// Reading llama-imatrix's files. The GGUF form goes through loom's GGUF reader; the older binary
// form is parsed here with every count checked against the bytes left, so a hostile file ends in
// one error line, never a huge allocation or a read past its end.
#include "loom/model/imatrix.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <memory>

#include "loom/core/error.h"
#include "loom/core/files.h"
#include "loom/gguf/gguf.h"

namespace loom {
namespace {

// A value of the matrix must be a mean square: finite and not negative.
void check_values(const std::string& path, const std::string& name, const std::vector<float>& v) {
  for (size_t i = 0; i < v.size(); ++i)
    LOOM_CHECK(std::isfinite(v[i]) && v[i] >= 0.0f, invalid_input,
               "importance matrix '{}': entry '{}' value {} is {} (must be finite and >= 0)", path, name, i, v[i]);
}

// The binary form: int32 entry count; per entry int32 name length, the name, int32 calls, int32
// value count, float32 values (sums over the calls); then optionally int32 chunks and an int32-
// length dataset name.
class LegacyReader {
 public:
  LegacyReader(const std::string& path, std::string_view bytes) : path_(path), b_(bytes) {}

  ImportanceMatrix read() {
    ImportanceMatrix m;
    const int32_t n = i32("the entry count");
    // an entry takes at least 17 bytes (three counts, a 1-byte name, one value)
    LOOM_CHECK(n >= 1 && (size_t)n <= left() / 17, invalid_input,
               "importance matrix '{}': {} entries in a file of {} bytes", path_, n, b_.size());
    for (int32_t e = 0; e < n; ++e) {
      const int32_t len = i32("a name length");
      LOOM_CHECK(len >= 1 && len <= 4096 && (size_t)len <= left(), invalid_input,
                 "importance matrix '{}': entry {} has a name of {} bytes", path_, e, len);
      std::string name(b_.substr(pos_, (size_t)len));
      pos_ += (size_t)len;
      const int32_t ncall = i32("a call count");
      const int32_t nval = i32("a value count");
      LOOM_CHECK(nval >= 1 && (size_t)nval <= left() / 4, invalid_input,
                 "importance matrix '{}': entry '{}' claims {} values, {} bytes are left", path_, name, nval, left());
      std::vector<float> v((size_t)nval);
      std::memcpy(v.data(), b_.data() + pos_, (size_t)nval * 4);
      pos_ += (size_t)nval * 4;
      if (ncall > 0)
        for (float& x : v) x /= (float)ncall;
      check_values(path_, name, v);
      LOOM_CHECK(m.entries.emplace(name, std::move(v)).second, invalid_input,
                 "importance matrix '{}': entry '{}' appears twice", path_, name);
    }
    if (left() > 0) {  // newer files end with the chunk count and the dataset's name
      m.chunks = std::max(0, i32("the chunk count"));
      const int32_t len = i32("the dataset name's length");
      LOOM_CHECK(len >= 0 && (size_t)len <= left(), invalid_input,
                 "importance matrix '{}': a dataset name of {} bytes, {} are left", path_, len, left());
      m.datasets.emplace_back(b_.substr(pos_, (size_t)len));
      pos_ += (size_t)len;
      LOOM_CHECK(left() == 0, invalid_input, "importance matrix '{}': {} unexpected bytes at the end", path_, left());
    }
    return m;
  }

 private:
  size_t left() const { return b_.size() - pos_; }
  int32_t i32(const char* what) {
    LOOM_CHECK(left() >= 4, invalid_input, "importance matrix '{}': truncated at byte {} (reading {})", path_, pos_,
               what);
    int32_t v;
    std::memcpy(&v, b_.data() + pos_, 4);
    pos_ += 4;
    return v;
  }

  const std::string& path_;
  std::string_view b_;
  size_t pos_ = 0;
};

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The GGUF form: per matrix `NAME.in_sum2` (f32 [ne0, n_mat]: sums of squared activations) and
// `NAME.counts` (f32 [1, n_mat]: how many it summed); a matrix that saw no input counts 0 and
// weighs 1 everywhere, as llama-quantize reads it.
ImportanceMatrix read_gguf(const std::string& path, std::string_view bytes) {
  const std::unique_ptr<gguf::File> f =
      gguf::File::open_memory(bytes.data(), bytes.size(), fmt::format("importance matrix '{}'", path));
  ImportanceMatrix m;
  const gguf::Value* datasets = f->find("imatrix.datasets");
  LOOM_CHECK(datasets && f->find_int("imatrix.chunk_count") && f->find_int("imatrix.chunk_size"), invalid_input,
             "importance matrix '{}': missing imatrix.datasets, imatrix.chunk_count or imatrix.chunk_size", path);
  m.datasets = datasets->strings;
  m.chunks = std::max<int64_t>(0, *f->find_int("imatrix.chunk_count"));
  for (const gguf::TensorInfo& sums : f->tensors()) {
    if (!ends_with(sums.name, ".in_sum2")) continue;
    const std::string name = sums.name.substr(0, sums.name.size() - 8);
    const gguf::TensorInfo* counts = f->find_tensor(name + ".counts");
    LOOM_CHECK(counts, invalid_input, "importance matrix '{}': '{}' has no '{}.counts'", path, sums.name, name);
    const int64_t ne0 = sums.ne[0], n_mat = sums.ne[1];
    LOOM_CHECK(sums.type == DType::F32 && counts->type == DType::F32 && sums.ne[2] == 1 && sums.ne[3] == 1 &&
                   counts->ne[0] == 1 && counts->nelements() == n_mat,
               invalid_input, "importance matrix '{}': '{}' is not f32 [n, m] with f32 [1, m] counts", path, name);
    std::vector<float> s((size_t)(ne0 * n_mat)), c((size_t)n_mat), v((size_t)(ne0 * n_mat));
    if (!s.empty()) std::memcpy(s.data(), f->tensor_data(sums), s.size() * 4);  // (an empty one's data() is null)
    if (!c.empty()) std::memcpy(c.data(), f->tensor_data(*counts), c.size() * 4);
    for (int64_t j = 0; j < n_mat; ++j) {
      const float cj = c[(size_t)j];
      LOOM_CHECK(std::isfinite(cj) && cj >= 0.0f, invalid_input, "importance matrix '{}': '{}.counts' value {} is {}",
                 path, name, j, cj);
      for (int64_t i = 0; i < ne0; ++i) {
        const size_t k = (size_t)(j * ne0 + i);
        v[k] = cj > 0.0f ? s[k] / cj : 1.0f;
      }
    }
    check_values(path, name, v);
    m.entries.emplace(name, std::move(v));
  }
  return m;
}

}  // namespace

ImportanceMatrix parse_importance_matrix(std::string_view bytes, const std::string& name) {
  uint32_t magic = 0;
  if (bytes.size() >= 4) std::memcpy(&magic, bytes.data(), 4);
  ImportanceMatrix m = magic == gguf::kMagic ? read_gguf(name, bytes) : LegacyReader(name, bytes).read();
  LOOM_CHECK(!m.entries.empty(), invalid_input, "importance matrix '{}': no entries", name);
  m.path = name;
  return m;
}

ImportanceMatrix read_importance_matrix(const std::string& path) {
  return parse_importance_matrix(read_regular_file(path, "importance matrix"), path);
}

void filter_importance_matrix(ImportanceMatrix& m, const std::vector<std::string>& include,
                              const std::vector<std::string>& exclude) {
  auto contains_any = [](const std::string& name, const std::vector<std::string>& parts) {
    for (const std::string& p : parts)
      if (name.find(p) != std::string::npos) return true;
    return false;
  };
  for (auto it = m.entries.begin(); it != m.entries.end();) {
    const bool keep = (include.empty() || contains_any(it->first, include)) && !contains_any(it->first, exclude);
    it = keep ? std::next(it) : m.entries.erase(it);
  }
}

}  // namespace loom
