// The quantize driver: reads a GGUF model (mapped), chooses each tensor's type
// (quantize_mix.cpp), converts the rows on a thread pool through f32 with the reference
// conversions of lib/core, and streams the new file through gguf::Writer (temporary file +
// rename). Source and result blocks are checked for NaN / infinite scales on the way.
#include "loom/model/quantize.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstring>
#include <memory>
#include <vector>

#include "loom/core/error.h"
#include "loom/core/quants.h"
#include "loom/core/thread_pool.h"

namespace loom {
namespace {

volatile std::sig_atomic_t g_quantize_signal = 0;
extern "C" void on_quantize_signal(int sig) { g_quantize_signal = sig; }

// SIGINT / SIGTERM only set a flag while the file is written; the row callback then stops the
// write, which removes the temporary file.
struct InterruptFlag {
  struct sigaction old_int {}, old_term {};
  InterruptFlag() {
    g_quantize_signal = 0;
    struct sigaction sa {};
    sa.sa_handler = on_quantize_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
  }
  ~InterruptFlag() {
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
  }
};
struct Interrupted {};

double mib(size_t bytes) { return (double)bytes / (1024.0 * 1024.0); }

std::string shape_text(const gguf::TensorInfo& t) {
  std::string s = "[";
  for (int d = 0; d < 4; ++d) s += fmt::format("{}{:>5}", d ? ", " : "", t.ne[d]);
  return s + "]";
}

void check_blocks(DType type, const uint8_t* p, size_t nbytes, const std::string& tensor, const char* what) {
  const int64_t bad = first_bad_block(type, p, nbytes);
  LOOM_CHECK(bad < 0, invalid_input, "tensor {}: {} {} block {} has a NaN or infinite scale or value", tensor, what,
             dtype_name(type), bad);
}

// Converts rows of one tensor: src rows of type `from` -> dst rows of type `to`, split between
// the pool's threads (one f32 row buffer each). imp: the tensor's importance (ne0 values per
// matrix of a stack), or nullptr.
class RowConverter {
 public:
  RowConverter(ThreadPool& pool, int64_t ne0) : pool_(pool), bufs_((size_t)pool.size()) {
    for (auto& b : bufs_) b.resize((size_t)ne0);
  }
  // Rows row0 .. row0 + n_rows of the tensor, from `in` to `out`.
  void run(const gguf::TensorInfo& src, DType to, const float* imp, const uint8_t* in, uint8_t* out, int64_t row0,
           int64_t n_rows) {
    const DTypeInfo& fi = dtype_info(src.type);
    const DTypeInfo& ti = dtype_info(to);
    const FromFloatImportanceFn weighted = imp ? importance_quantizer(to) : nullptr;
    const int64_t ne0 = src.ne[0], ne1 = src.ne[1];
    const size_t in_row = row_size(src.type, ne0), out_row = row_size(to, ne0);
    pool_.run([&](int ith, int) {
      float* f = bufs_[(size_t)ith].data();
      int64_t first, last;
      while (pool_.claim(n_rows, 1, first, last))
        for (int64_t r = first; r < last; ++r) {
          fi.to_float(in + (size_t)r * in_row, f, ne0);
          if (weighted)  // rows of matrix k of a stack take the k-th run of the importance
            weighted(f, out + (size_t)r * out_row, ne0, imp + (row0 + r) / ne1 * ne0);
          else
            ti.from_float(f, out + (size_t)r * out_row, ne0);
        }
    });
  }

 private:
  ThreadPool& pool_;
  std::vector<std::vector<float>> bufs_;
};

// Each tensor's importance, where the matrix has an entry for it and its new type uses one;
// an entry of another size than the tensor's columns (times its matrices) is an error, as in
// llama-quantize.
std::vector<const float*> importance_of(const QuantizeOptions& o, const std::vector<const gguf::TensorInfo*>& order,
                                        const std::vector<DType>& types) {
  std::vector<const float*> out(order.size(), nullptr);
  if (!o.imatrix) return out;
  for (size_t i = 0; i < order.size(); ++i) {
    const gguf::TensorInfo& t = *order[i];
    const auto it = o.imatrix->entries.find(t.name);
    if (it == o.imatrix->entries.end() || types[i] == t.type || !importance_quantizer(types[i])) continue;
    const int64_t want = t.ne[0] * t.ne[2] * t.ne[3];
    LOOM_CHECK((int64_t)it->second.size() == want, invalid_input,
               "importance matrix '{}': entry {} has {} values, the tensor needs {} (another model's matrix?)",
               o.imatrix->path, t.name, it->second.size(), want);
    out[i] = it->second.data();
  }
  return out;
}

}  // namespace

QuantizeResult quantize_model(const QuantizeOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::optional<FileType> ft = file_type_from_name(o.type);
  if (!ft) {
    std::string names;
    for (const FileType& t : file_types()) names += fmt::format("{}{}", names.empty() ? "" : ", ", t.name);
    fail(ErrorKind::usage, "unknown type '{}' (one of {})", o.type, names);
  }
  LOOM_CHECK(o.input != o.output, usage, "the output file must not be the input file");
  LOOM_CHECK(o.n_threads <= 1024, usage, "NTHREADS {}: must be at most 1024 (0 or less: all cores)", o.n_threads);
  const std::unique_ptr<gguf::File> in = gguf::File::open(o.input);
  const MixModel m = mix_model_of(*in);
  const std::vector<const gguf::TensorInfo*> order = quantize_order(in->tensors());
  QuantizeResult res;
  const std::vector<DType> types = choose_tensor_types(*ft, m, o, order, &res.n_fallback);

  for (size_t i = 0; i < order.size(); ++i) {
    const gguf::TensorInfo& t = *order[i];
    if (types[i] == t.type) continue;
    const DTypeInfo& src = dtype_info(t.type);
    LOOM_CHECK(src.to_float != nullptr, unsupported, "tensor {}: cannot convert {} to {}", t.name, src.name,
               dtype_name(types[i]));
    LOOM_CHECK(!src.is_quantized || o.allow_requantize, usage,
               "tensor {} is already {}: requantizing loses quality; pass --allow-requantize to do it anyway", t.name,
               src.name);
  }

  const std::vector<const float*> importance = importance_of(o, order, types);
  // llama-quantize refuses the i-quants without an importance matrix; loom writes them, saying so.
  const bool has_imatrix = o.imatrix && !o.imatrix->entries.empty();
  if (o.log && !has_imatrix && std::any_of(types.begin(), types.end(), [](DType t) { return is_iq_grid_type(t); }))
    std::fprintf(o.log,
                 "warning: %s quantizes without an importance matrix: expect more error than llama-quantize --imatrix "
                 "gives (docs/QUANTS.md)\n",
                 ft->name);
  for (size_t i = 0; i < order.size() && has_imatrix && o.log; ++i)
    if (is_iq_grid_type(types[i]) && types[i] != order[i]->type && !importance[i])
      std::fprintf(o.log, "warning: no importance matrix entry for %s: %s without one\n", order[i]->name.c_str(),
                   dtype_name(types[i]));

  gguf::Writer w;
  for (const auto& [key, value] : in->metadata())
    if (key.rfind("split.", 0) != 0) w.set(key, value);
  w.set("general.quantization_version", gguf::Value::u32(2));
  w.set("general.file_type", gguf::Value::u32((uint32_t)ft->id));
  if (has_imatrix) {  // as llama-quantize records it (strings cut at 127 bytes)
    w.set("quantize.imatrix.file", gguf::Value::string(o.imatrix->path.substr(0, 127)));
    if (!o.imatrix->datasets.empty())
      w.set("quantize.imatrix.dataset", gguf::Value::string(o.imatrix->datasets[0].substr(0, 127)));
    w.set("quantize.imatrix.entries_count", gguf::Value::u32((uint32_t)o.imatrix->entries.size()));
    if (o.imatrix->chunks > 0) w.set("quantize.imatrix.chunks_count", gguf::Value::u32((uint32_t)o.imatrix->chunks));
  }

  const int nth = o.n_threads > 0 ? o.n_threads : ThreadPool::default_threads();
  ThreadPool pool(nth);
  InterruptFlag interrupt;
  for (size_t i = 0; i < order.size(); ++i) {
    const gguf::TensorInfo& t = *order[i];
    const DType to = types[i];
    const size_t out_bytes = gguf::tensor_nbytes(to, t.ne, t.name);
    res.bytes_in += t.nbytes;
    res.bytes_out += out_bytes;
    res.n_converted += to != t.type;
    const uint8_t* data = in->tensor_data(t);
    const size_t in_row = t.ne[1] * t.ne[2] * t.ne[3] > 0 ? t.nbytes / (size_t)(t.ne[1] * t.ne[2] * t.ne[3]) : 0;
    const size_t out_row = row_size(to, t.ne[0]);
    auto converter = std::make_shared<RowConverter>(pool, to != t.type ? t.ne[0] : 0);
    const float* imp = importance[i];
    auto fill = [&, i, to, imp, data, in_row, out_row, converter, out_bytes](uint8_t* dst, int64_t row0,
                                                                             int64_t n_rows) {
      if (g_quantize_signal) throw Interrupted{};
      if (row0 == 0 && o.log) {
        const std::string conv = to == t.type ? "" : fmt::format(", converting to {}", dtype_name(to));
        std::fprintf(o.log, "[%4zu/%4zu] %-36s - %s, type = %6s%s .. size = %8.2f MiB -> %8.2f MiB\n", i + 1,
                     order.size(), t.name.c_str(), shape_text(t).c_str(), dtype_name(t.type), conv.c_str(),
                     mib(t.nbytes), mib(out_bytes));
        std::fflush(o.log);
      }
      const uint8_t* src = data + (size_t)row0 * in_row;
      check_blocks(t.type, src, (size_t)n_rows * in_row, t.name, "source");
      if (to == t.type) {
        std::memcpy(dst, src, (size_t)n_rows * in_row);
        return;
      }
      converter->run(t, to, imp, src, dst, row0, n_rows);
      check_blocks(to, dst, (size_t)n_rows * out_row, t.name, "converted");
    };
    w.add_tensor_rows(t.name, to, t.n_dims, t.ne, fill);
  }
  res.n_tensors = (int64_t)order.size();
  try {
    w.write(o.output);
  } catch (const Interrupted&) {
    res.exit_code = g_quantize_signal == SIGTERM ? 143 : 130;
    if (o.log) std::fprintf(o.log, "interrupted: %s not written\n", o.output.c_str());
    return res;
  }
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (o.log)
    std::fprintf(o.log, "quantized %s -> %s (%s): %lld tensors, %lld converted, %d fallbacks, %.2f MiB -> %.2f MiB in %.1f s\n",
                 o.input.c_str(), o.output.c_str(), ft->name, (long long)res.n_tensors, (long long)res.n_converted,
                 res.n_fallback, mib(res.bytes_in), mib(res.bytes_out), res.seconds);
  return res;
}

}  // namespace loom
