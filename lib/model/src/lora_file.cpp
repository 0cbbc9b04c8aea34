// `loom-gguf new-lora`: random LoRA adapters in llama.cpp's adapter GGUF layout (lora.h).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <set>

#include "loom/core/error.h"
#include "loom/core/fp16.h"
#include "loom/gguf/gguf.h"
#include "loom/model/arch.h"
#include "loom/model/lora.h"
#include "loom/model/model_file.h"

namespace loom {

namespace {

constexpr const char* kRoles[] = {"attn_q", "attn_k",   "attn_v", "attn_qkv",       "attn_output",  "ffn_gate",
                                  "ffn_up", "ffn_down", "output", "ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp"};

// The role of a matrix name ("blk.3.attn_q.weight" -> "attn_q", "output.weight" -> "output").
std::string role_of(const std::string& name) {
  std::string s = name;
  if (s.rfind("blk.", 0) == 0) {
    const size_t dot = s.find('.', 4);
    if (dot == std::string::npos) return "";
    s = s.substr(dot + 1);
  }
  const std::string suffix = ".weight";
  if (s.size() <= suffix.size() || s.compare(s.size() - suffix.size(), suffix.size(), suffix) != 0) return "";
  return s.substr(0, s.size() - suffix.size());
}

// The layer of "blk.N...." (-1 for a global tensor).
int64_t layer_of(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  return std::strtoll(name.c_str() + 4, nullptr, 10);
}

// Fills n values of `type` from N(0, sigma^2) draws of rng.
void fill_random(uint8_t* dst, size_t n, DType type, float sigma, NormalRng& rng) {
  for (size_t i = 0; i < n; ++i) {
    const float v = sigma * rng.next();
    if (type == DType::F32) {
      std::memcpy(dst + 4 * i, &v, 4);
    } else {
      const uint16_t h = type == DType::F16 ? f32_to_fp16(v) : f32_to_bf16(v);
      std::memcpy(dst + 2 * i, &h, 2);
    }
  }
}

}  // namespace

NewLoraResult make_random_lora(const NewLoraOptions& o) {
  LOOM_CHECK(o.type == DType::F32 || o.type == DType::F16 || o.type == DType::BF16, usage,
             "--type {}: an adapter's matrices are f32, f16 or bf16", dtype_name(o.type));
  LOOM_CHECK(o.rank >= 1 && o.rank <= 4096, usage, "--rank {}: must be between 1 and 4096", o.rank);
  LOOM_CHECK(std::isfinite(o.alpha) && std::isfinite(o.sigma) && o.sigma >= 0, usage,
             "--alpha and --sigma must be finite (sigma >= 0)");
  LOOM_CHECK(!o.targets.empty(), usage, "--targets: give at least one role");
  const std::set<std::string> known(std::begin(kRoles), std::end(kRoles));
  for (const std::string& t : o.targets)
    LOOM_CHECK(known.count(t), usage, "--targets {}: not a role adapters apply to ({})", t,
               fmt::join(std::begin(kRoles), std::end(kRoles), ", "));
  std::unique_ptr<gguf::File> base = gguf::File::open(o.base);
  const std::string arch = base->get_string("general.architecture");

  gguf::Writer w;
  w.set("general.architecture", gguf::Value::string(arch));
  w.set("general.type", gguf::Value::string("adapter"));
  w.set("general.name", gguf::Value::string(fmt::format("random LoRA r{} of {}", o.rank, arch)));
  w.set("adapter.type", gguf::Value::string("lora"));
  w.set("adapter.lora.alpha", gguf::Value::floating(gguf::ValueType::F32, o.alpha));
  std::set<std::string> found;
  NewLoraResult r;
  uint64_t pair = 0;
  const int64_t n_layer = read_hparams(*base).n_layer;  // glm4moe's prediction layers after it are never run
  for (const gguf::TensorInfo& t : base->tensors()) {
    const std::string role = role_of(t.name);
    if (t.n_dims != 2 || std::find(o.targets.begin(), o.targets.end(), role) == o.targets.end()) continue;
    if (layer_of(t.name) >= n_layer) continue;
    LOOM_CHECK(o.rank <= t.ne[0], usage, "--rank {}: more than '{}' has inputs ({})", o.rank, t.name, t.ne[0]);
    found.insert(role);
    const int64_t a_ne[2] = {t.ne[0], o.rank}, b_ne[2] = {o.rank, t.ne[1]};
    for (int k = 0; k < 2; ++k) {
      const uint64_t seed = o.seed * 0x9e3779b97f4a7c15ull + 2 * pair + (uint64_t)k;
      const float sigma = o.sigma;
      const DType type = o.type;
      w.add_tensor(t.name + (k == 0 ? ".lora_a" : ".lora_b"), o.type, 2, k == 0 ? a_ne : b_ne,
                   [seed, sigma, type](uint8_t* dst, size_t nbytes) {
                     NormalRng rng(seed);
                     fill_random(dst, nbytes / dtype_info(type).type_size, type, sigma, rng);
                   });
    }
    ++pair;
  }
  for (const std::string& t : o.targets)
    LOOM_CHECK(found.count(t), usage, "--targets {}: {} has no such matrix", t, o.base);
  w.write(o.output);
  r.n_pairs = (int64_t)pair;
  r.file_size = w.file_size();
  return r;
}

}  // namespace loom
