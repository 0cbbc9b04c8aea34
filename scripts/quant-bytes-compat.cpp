// Developer check (scripts/quant-bytes-compat.sh): quantizes the same rows with loom's reference
// quantizers and with libggml's ggml_quantize_chunk (no importance matrix, what llama-quantize
// runs), and dequantizes libggml's bytes with both (the i-quants: loom's bytes, its quantizer being
// its own); prints per type how many bytes / values
// differ and each side's relative RMSE against the f32 rows. Rows: 64 x 4096 (a real model's
// width), normal (sigma 1 and 0.02) and heavy-tailed (Student t, 4 degrees: real weights have
// outliers). Exit 0 when nothing differs.
// With --imatrix: the importance-weighted quantizers instead (llama-quantize --imatrix): the same
// rows (64 x 4096, Student t) and importance (log-normal per column, sigma 1.5) through loom's
// importance_quantizer and libggml's ggml_quantize_chunk, each side's weighted relative error
// sqrt(sum imp (y - x)^2 / sum imp x^2) and the reference's without a matrix per type. Exit 1 when
// loom's is more than 3% above libggml's for a type.
#include <dlfcn.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "loom/core/dtype.h"
#include "loom/core/quants.h"

namespace {

// The head of ggml's struct ggml_type_traits (name, block size, interleave, type size, quantized, to_float).
struct GgmlTraits {
  const char* name;
  int64_t blck_size;
  int64_t blck_size_interleave;
  size_t type_size;
  bool is_quantized;
  void (*to_float)(const void*, float*, int64_t);
};

// Values whose bits differ (a NaN equals itself, -0 is not 0).
size_t bits_differing(const std::vector<float>& a, const std::vector<float>& b) {
  size_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return n;
}

using QuantizeChunk = size_t (*)(int, const float*, void*, int64_t, int64_t, int64_t, const float*);

int compare_importance(QuantizeChunk quantize_chunk, void (*quantize_init)(int),
                       const GgmlTraits* (*type_traits)(int)) {
  constexpr int64_t K = 4096, R = 64;
  std::mt19937 rng(42);
  std::student_t_distribution<float> heavy(4.0f);
  std::lognormal_distribution<float> spread(0.0f, 1.5f);
  std::vector<float> x(K * R), imp(K);
  for (float& v : x) v = 0.02f * heavy(rng);
  for (float& v : imp) v = spread(rng);
  auto weighted_error = [&](const std::vector<float>& y) {
    double e = 0, s = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double w = imp[i % K];
      e += w * (y[i] - x[i]) * (y[i] - x[i]);
      s += w * x[i] * x[i];
    }
    return std::sqrt(e / s);
  };
  int worse = 0;
  std::printf("%-8s %12s %12s %12s %8s\n", "type", "no matrix", "loom", "llama.cpp", "ratio");
  for (loom::DType t : loom::kAllDTypes) {
    const loom::FromFloatImportanceFn ours = loom::importance_quantizer(t);
    if (!ours) continue;
    const loom::DTypeInfo& info = loom::dtype_info(t);
    const GgmlTraits* tr = type_traits((int)t);
    quantize_init((int)t);
    const size_t rb = loom::row_size(t, K);
    std::vector<uint8_t> plain(rb * R), q_ours(rb * R), q_theirs(rb * R);
    for (int64_t r = 0; r < R; ++r) {
      info.from_float(x.data() + r * K, plain.data() + r * rb, K);
      ours(x.data() + r * K, q_ours.data() + r * rb, K, imp.data());
    }
    quantize_chunk((int)t, x.data(), q_theirs.data(), 0, R, K, imp.data());
    std::vector<float> y(K * R);
    info.to_float(plain.data(), y.data(), K * R);
    const double e_plain = weighted_error(y);
    info.to_float(q_ours.data(), y.data(), K * R);
    const double e_ours = weighted_error(y);
    tr->to_float(q_theirs.data(), y.data(), K * R);
    const double e_theirs = weighted_error(y);
    std::printf("%-8s %12.5f %12.5f %12.5f %8.3f\n", info.name, e_plain, e_ours, e_theirs, e_ours / e_theirs);
    worse += e_ours > 1.03 * e_theirs;
  }
  return worse ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const bool importance = argc == 3 && std::strcmp(argv[2], "--imatrix") == 0;
  if (argc != 2 && !importance) {
    std::fprintf(stderr, "usage: %s libggml-base.so [--imatrix]\n", argv[0]);
    return 2;
  }
  void* lib = dlopen(argv[1], RTLD_NOW);
  if (!lib) {
    std::fprintf(stderr, "dlopen: %s\n", dlerror());
    return 2;
  }
  auto quantize_chunk = reinterpret_cast<QuantizeChunk>(dlsym(lib, "ggml_quantize_chunk"));
  auto quantize_init = reinterpret_cast<void (*)(int)>(dlsym(lib, "ggml_quantize_init"));
  auto type_traits = reinterpret_cast<const GgmlTraits* (*)(int)>(dlsym(lib, "ggml_get_type_traits"));
  if (!quantize_chunk || !quantize_init || !type_traits) {
    std::fprintf(stderr, "%s lacks ggml_quantize_chunk / ggml_quantize_init / ggml_get_type_traits\n", argv[1]);
    return 2;
  }
  if (importance) return compare_importance(quantize_chunk, quantize_init, type_traits);
  constexpr int64_t K = 4096, R = 64;
  int differing = 0;
  for (int dist_kind = 0; dist_kind < 3; ++dist_kind) {
    const char* dname = dist_kind == 0 ? "normal(1)" : dist_kind == 1 ? "normal(0.02)" : "t4(0.02)";
    std::mt19937 rng(42);
    std::normal_distribution<float> normal(0.0f, dist_kind == 0 ? 1.0f : 0.02f);
    std::student_t_distribution<float> heavy(4.0f);
    std::vector<float> x(K * R);
    for (float& v : x) v = dist_kind == 2 ? 0.02f * heavy(rng) : normal(rng);
    for (int r = 0; r < 4; ++r)  // some all-zero groups and sub-blocks
      for (int j = 0; j < 40; ++j) x[r * K + 256 * r + j] = 0.0f;
    for (loom::DType t : loom::kAllDTypes) {
      const loom::DTypeInfo& info = loom::dtype_info(t);
      if (!info.is_quantized) continue;
      const GgmlTraits* tr = type_traits((int)t);
      if (tr->type_size != info.type_size || tr->blck_size != info.block_size) {
        std::printf("%-7s block %lld x %zu bytes, ggml %s %lld x %zu\n", info.name, (long long)info.block_size,
                    info.type_size, tr->name, (long long)tr->blck_size, tr->type_size);
        ++differing;
        continue;
      }
      const size_t rb = loom::row_size(t, K);
      if (loom::is_iq_grid_type(t)) {  // loom's own quantizer (docs/QUANTS.md): its bytes read by both
        std::vector<uint8_t> ours(rb * R);
        for (int64_t r = 0; r < R; ++r) info.from_float(x.data() + r * K, ours.data() + r * rb, K);
        std::vector<float> y_ours(K * R), y_theirs(K * R);
        info.to_float(ours.data(), y_ours.data(), K * R);
        tr->to_float(ours.data(), y_theirs.data(), K * R);
        const size_t values = bits_differing(y_ours, y_theirs);
        std::printf("%-12s %-7s loom's bytes read by both: values differing %6zu / %zu\n", dname, info.name, values,
                    y_ours.size());
        differing += values > 0;
        continue;
      }
      quantize_init((int)t);
      std::vector<uint8_t> ours(rb * R), theirs(rb * R);
      for (int64_t r = 0; r < R; ++r) info.from_float(x.data() + r * K, ours.data() + r * rb, K);
      quantize_chunk((int)t, x.data(), theirs.data(), 0, R, K, nullptr);
      size_t bytes = 0;
      for (size_t i = 0; i < ours.size(); ++i) bytes += ours[i] != theirs[i];
      std::vector<float> y_ours(K * R), y_theirs(K * R);
      info.to_float(theirs.data(), y_ours.data(), K * R);
      tr->to_float(theirs.data(), y_theirs.data(), K * R);
      const size_t values = bits_differing(y_ours, y_theirs);
      std::vector<float> y_self(K * R);
      info.to_float(ours.data(), y_self.data(), K * R);
      double se_ours = 0, se_theirs = 0, ss = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        se_ours += (double)(y_self[i] - x[i]) * (y_self[i] - x[i]);
        se_theirs += (double)(y_theirs[i] - x[i]) * (y_theirs[i] - x[i]);
        ss += (double)x[i] * x[i];
      }
      std::printf("%-12s %-7s bytes differing %6zu / %7zu, values differing %6zu / %zu, rel rmse loom %.5f ggml %.5f\n",
                  dname, info.name, bytes, ours.size(), values, y_ours.size(), std::sqrt(se_ours / ss),
                  std::sqrt(se_theirs / ss));
      differing += bytes > 0 || values > 0;
    }
  }
  return differing ? 1 : 0;
}
