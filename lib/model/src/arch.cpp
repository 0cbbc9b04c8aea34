// Architecture tables: names, presets (tiny/small for tests, real shapes for planning) and
// hyper-parameter validation. The tensor lists are in arch_tensors.cpp, the GGUF keys in
// arch_gguf.cpp.
#include "loom/model/arch.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "loom/core/error.h"
#include "loom/gguf/gguf.h"

namespace loom {

namespace {
// clang-format off
constexpr Arch kArchs[] = {Arch::llama, Arch::qwen2, Arch::qwen3, Arch::qwen3moe, Arch::gemma, Arch::gemma2,
                           Arch::gemma3, Arch::phi3, Arch::gpt_oss, Arch::granite, Arch::glm4moe, Arch::qwen2moe,
                           Arch::smollm3, Arch::glm4, Arch::command_r, Arch::cohere2, Arch::olmo2, Arch::granitemoe,
                           Arch::olmoe, Arch::ernie4_5, Arch::ernie4_5_moe, Arch::exaone4, Arch::seed_oss,
                           Arch::mistral3, Arch::llama4};
// clang-format on
}  // namespace

// clang-format off
const char* arch_name(Arch arch) {
  switch (arch) {
    case Arch::llama: return "llama";
    case Arch::qwen2: return "qwen2";
    case Arch::qwen2moe: return "qwen2moe";
    case Arch::qwen3: return "qwen3";
    case Arch::qwen3moe: return "qwen3moe";
    case Arch::gemma: return "gemma";
    case Arch::gemma2: return "gemma2";
    case Arch::gemma3: return "gemma3";
    case Arch::phi3: return "phi3";
    case Arch::gpt_oss: return "gpt-oss";
    case Arch::granite: return "granite";
    case Arch::glm4moe: return "glm4moe";
    case Arch::smollm3: return "smollm3";
    case Arch::glm4: return "glm4";
    case Arch::command_r: return "command-r";
    case Arch::cohere2: return "cohere2";
    case Arch::olmo2: return "olmo2";
    case Arch::granitemoe: return "granitemoe";
    case Arch::olmoe: return "olmoe";
    case Arch::ernie4_5: return "ernie4_5";
    case Arch::exaone4: return "exaone4";
    case Arch::seed_oss: return "seed_oss";
    case Arch::ernie4_5_moe: return "ernie4_5-moe";
    case Arch::mistral3: return "mistral3";
    case Arch::llama4: return "llama4";
  }
  return "?";
}
// clang-format on

std::optional<Arch> arch_from_name(std::string_view name) {
  for (Arch a : kArchs)
    if (name == arch_name(a)) return a;
  return std::nullopt;
}

std::string arch_names() {
  std::string out;
  for (Arch a : kArchs) out += std::string(out.empty() ? "" : ", ") + arch_name(a);
  return out;
}

bool arch_is_moe(Arch arch) {
  return arch == Arch::qwen2moe || arch == Arch::qwen3moe || arch == Arch::gpt_oss || arch == Arch::glm4moe ||
         arch == Arch::granitemoe || arch == Arch::olmoe || arch == Arch::ernie4_5_moe || arch == Arch::llama4;
}
bool arch_is_granite(Arch arch) { return arch == Arch::granite || arch == Arch::granitemoe; }
bool arch_experts_n_ff_wide(Arch arch) {
  return arch_experts_optional(arch) || arch == Arch::granitemoe || arch == Arch::olmoe;
}
bool arch_experts_optional(Arch arch) { return arch == Arch::llama || arch == Arch::mistral3; }
bool arch_expert_weights_raw(Arch arch) {
  return arch == Arch::qwen2moe || arch == Arch::olmoe || arch == Arch::llama4;
}
bool arch_weights_expert_input(Arch arch) { return arch == Arch::llama4; }
bool arch_has_qk_norm(Arch arch) {
  return arch == Arch::qwen3 || arch == Arch::qwen3moe || arch == Arch::gemma3 || arch == Arch::exaone4;
}
bool arch_has_qkv_bias(Arch arch) {
  return arch == Arch::qwen2 || arch == Arch::qwen2moe || arch == Arch::gpt_oss || arch == Arch::glm4moe ||
         arch == Arch::glm4 || arch == Arch::seed_oss;
}
bool arch_reads_rope_freqs(Arch arch) {
  return arch == Arch::llama || arch == Arch::mistral3 || arch == Arch::llama4 || arch == Arch::exaone4;
}
bool arch_rope_neox(Arch arch) {
  return !arch_experts_optional(arch) && arch != Arch::llama4 && !arch_is_granite(arch) && arch != Arch::smollm3 &&
         arch != Arch::glm4 && arch != Arch::ernie4_5 && arch != Arch::ernie4_5_moe && !arch_is_cohere(arch);
}
bool arch_is_gemma(Arch arch) { return arch == Arch::gemma || arch == Arch::gemma2 || arch == Arch::gemma3; }
bool arch_has_post_norms(Arch arch) {
  return arch == Arch::gemma2 || arch == Arch::gemma3 || arch == Arch::glm4 || arch_post_norms_only(arch);
}
bool arch_fused_gate_up(Arch arch) { return arch == Arch::phi3 || arch == Arch::glm4; }
bool arch_partial_rope(Arch arch) { return arch == Arch::phi3 || arch == Arch::glm4 || arch == Arch::glm4moe; }
bool arch_is_cohere(Arch arch) { return arch == Arch::command_r || arch == Arch::cohere2; }
bool arch_post_norms_only(Arch arch) { return arch == Arch::olmo2 || arch == Arch::exaone4; }
bool arch_whole_qk_norm(Arch arch) { return arch == Arch::olmo2 || arch == Arch::olmoe; }

float HParams::logit_multiplier() const {
  if (logit_scale == 0.0f) return 1.0f;
  return arch_is_granite(arch) ? 1.0f / logit_scale : logit_scale;
}

float HParams::attn_temperature(int64_t pos) const {
  if (attn_temp_scale == 0.0f) return 1.0f;
  const double floor = (double)(attn_temp_floor > 0 ? attn_temp_floor : n_ctx_orig_or_train());
  return (float)(std::log(std::floor(((double)pos + attn_temp_offset) / floor) + 1.0) * attn_temp_scale + 1.0);
}

float HParams::attn_scale() const {
  if (arch_is_granite(arch) && attention_scale != 0.0f) return attention_scale;
  // gemma_pytorch's query_pre_attn_scalar: the 27B sizes scale by n_embd / n_head (llama.cpp
  // tells them by their layer count)
  const bool gemma_27b = (arch == Arch::gemma2 && n_layer == 46) || (arch == Arch::gemma3 && n_layer == 62);
  return 1.0f / std::sqrt(gemma_27b ? (float)(n_embd / n_head) : (float)head_dim);
}

void set_llama4_fixed(HParams& hp) {
  hp.n_swa = 8192;
  hp.swa_period = 4;
  hp.swa_chunked = true;
  hp.n_no_rope_layer_step = 4;
  hp.attn_temp_scale = 0.1f;
  hp.attn_temp_offset = 1.0f;
  hp.attn_temp_floor = 8192;
  hp.attn_temp_nope_only = true;
  hp.qk_rms_norm = hp.n_expert != 128;
}

void set_original_context(HParams& hp) {
  hp.n_ctx_orig = std::max<int64_t>(hp.n_ctx_train / 4, 2);
  // Phi-3's LongRoPE magnitude for a 4x extension
  if (hp.rope_long_short) hp.rope_attn_factor = std::sqrt(1.0f + std::log(4.0f) / std::log((float)hp.n_ctx_orig));
}

namespace {

// What makes the newer architectures themselves, at a preset's size: the sliding window
// (n_swa wide) with each one's layer pattern and RoPE bases, soft-capping, RoPE scaling with the
// long/short factors or YaRN, and tied embeddings for gemma. Experts as at the preset's size.
void add_arch_features(HParams& hp, int64_t n_swa) {
  hp.expert_weights_norm = !arch_expert_weights_raw(hp.arch);
  switch (hp.arch) {
    case Arch::gemma:  // Gemma 1: gemma2 without post norms, soft-capping or windows
      hp.tied_embeddings = true;
      break;
    case Arch::gemma2:  // soft-capped, every other layer local
      hp.n_swa = n_swa;
      hp.swa_period = 2;
      hp.rope_theta_swa = hp.rope_theta;
      hp.attn_softcap = 50.0f;
      hp.final_softcap = 30.0f;
      hp.tied_embeddings = true;
      break;
    case Arch::gemma3:  // five local layers per global one; global RoPE 1M with linear 8x
      hp.n_layer = std::max<int64_t>(hp.n_layer, 6);
      hp.n_swa = n_swa;
      hp.swa_period = 6;
      hp.rope_theta = 1000000.0f;
      hp.rope_theta_swa = 10000.0f;
      hp.rope_scaling = RopeScaling::linear;
      hp.rope_freq_scale = 0.125f;
      hp.tied_embeddings = true;
      break;
    case Arch::phi3:  // Phi-3-128k's long/short factors over a quarter of the training context
      hp.rope_long_short = true;
      set_original_context(hp);
      hp.rms_eps = 1e-5f;
      break;
    case Arch::gpt_oss:  // alternating local/global layers with sinks, YaRN 4x, biased experts
      hp.n_swa = n_swa;
      hp.swa_period = 2;
      hp.rope_theta = 150000.0f;
      hp.rope_theta_swa = hp.rope_theta;
      hp.rope_scaling = RopeScaling::yarn;
      hp.rope_freq_scale = 0.25f;
      hp.rope_freq_scale_swa = 0.25f;
      set_original_context(hp);
      hp.rms_eps = 1e-5f;
      break;
    case Arch::glm4moe:  // GLM-4.5's shape: half of each head rotated, one leading dense layer, one
                         // shared expert, sigmoid routing with a selection bias, weights renormalized
                         // and scaled, one multi-token-prediction layer in the file
      hp.n_rot = hp.head_dim / 2;
      hp.n_layer_dense_lead = 1;
      hp.n_expert_shared = 1;
      hp.n_layer_nextn = 1;
      hp.expert_gating = ExpertGating::sigmoid;
      hp.expert_weights_norm = true;
      hp.expert_weights_scale = 2.5f;
      hp.rms_eps = 1e-5f;
      break;
    case Arch::glm4:  // GLM-4-0414: half of each head rotated (adjacent pairs), post norms, fused gate|up
      hp.n_rot = hp.head_dim / 2;
      break;
    case Arch::smollm3:  // SmolLM3: a llama whose every 4th layer has no RoPE, tied output
      hp.n_layer = std::max<int64_t>(hp.n_layer, 4);
      hp.n_no_rope_layer_step = 4;
      hp.tied_embeddings = true;
      break;
    case Arch::ernie4_5:  // ERNIE 4.5 0.3B: a llama with tied output
      hp.tied_embeddings = true;
      break;
    case Arch::ernie4_5_moe:  // ERNIE-4.5-21B-A3B's layout: a leading dense layer, then experts with a
                              // selection bias and a shared expert twice as wide as one routed expert
      hp.n_layer = std::max<int64_t>(hp.n_layer, 2);
      hp.n_layer_dense_lead = 1;
      hp.n_expert_shared = 1;
      hp.n_ff_shared = 2 * hp.n_ff_exp;
      break;
    case Arch::mistral3:  // Ministral 3: YaRN over a quarter of the training context (16x in the real
                          // ones) with its magnitude cancelled, Llama 4's attention temperature past it
      hp.rope_scaling = RopeScaling::yarn;
      hp.rope_freq_scale = 0.25f;
      set_original_context(hp);
      hp.yarn_log_mul = 1.0f;
      hp.attn_temp_scale = 0.1f;
      break;
    case Arch::llama4:  // Llama 4 Scout's layout: 8192-token chunks on three layers of four, the fourth
                        // without RoPE (temperature-tuned); q/k RMS norms; a shared expert beside one
                        // routed (sigmoid, weighting the input); Maverick's experts every other layer
      hp.n_layer = std::max<int64_t>(hp.n_layer, 4);
      set_llama4_fixed(hp);
      hp.n_moe_layer_step = 2;
      hp.n_expert_used = 1;
      hp.n_expert_shared = 1;
      hp.n_ff_shared = hp.n_ff_exp;
      break;
    case Arch::seed_oss:  // Seed-OSS-36B: q twice as wide as the embedding (80 heads of 128 over 5120)
      hp.head_dim = 2 * hp.n_embd / hp.n_head;
      break;
    case Arch::olmoe:  // OLMoE: experts n_ff wide, as many kv heads as q
      hp.n_ff_exp = hp.n_ff;
      hp.n_head_kv = hp.n_head;
      break;
    case Arch::qwen2moe:  // Qwen1.5-MoE: a gated shared expert
      hp.n_expert_shared = 1;
      hp.n_ff_shared = 2 * hp.n_ff_exp;
      break;
    case Arch::command_r:  // Command R 35B: logits x 0.0625, tied
      hp.logit_scale = 0.0625f;
      hp.rms_eps = 1e-5f;
      hp.tied_embeddings = true;
      break;
    case Arch::cohere2:  // Command R7B: three sliding-window layers (with RoPE) per global one (without)
      hp.n_layer = std::max<int64_t>(hp.n_layer, 4);
      hp.n_swa = n_swa;
      hp.swa_period = 4;
      hp.rope_theta_swa = hp.rope_theta;
      hp.logit_scale = 0.25f;
      hp.rms_eps = 1e-5f;
      hp.tied_embeddings = true;
      break;
    case Arch::granitemoe:  // experts n_ff wide
      hp.n_ff_exp = hp.n_ff;
      [[fallthrough]];
    case Arch::granite:  // Granite 3.x's multipliers (8B: embeddings 12, residuals 0.22, logits / 16; 3B-A800M / 6)
      hp.embedding_scale = 12.0f;
      hp.residual_scale = 0.22f;
      hp.attention_scale = 1.0f / (float)hp.head_dim;
      hp.logit_scale = hp.arch == Arch::granitemoe ? 6.0f : 16.0f;
      hp.tied_embeddings = true;
      break;
    default: break;
  }
}

HParams tiny(Arch arch) {
  HParams hp;
  hp.arch = arch;
  hp.n_layer = 2;
  hp.n_embd = 256;
  hp.n_head = 8;
  hp.n_head_kv = 4;
  hp.head_dim = 32;
  hp.n_ff = 512;
  if (arch_is_moe(arch)) {
    hp.n_expert = 4;
    hp.n_expert_used = 2;
    hp.n_ff_exp = 128;
  }
  hp.n_vocab = 384;  // room for the 256 byte tokens of the default vocabulary plus specials
  hp.n_ctx_train = 512;
  hp.rms_eps = arch == Arch::llama ? 1e-5f : 1e-6f;
  hp.rope_theta = 10000.0f;
  add_arch_features(hp, 16);
  return hp;
}

// ~300M parameters, llama-like proportions (291M for llama; the MoE variant is ~370M).
HParams small(Arch arch) {
  HParams hp;
  hp.arch = arch;
  hp.n_layer = 20;
  hp.n_embd = 1024;
  hp.n_head = 16;
  hp.n_head_kv = 4;
  hp.head_dim = 64;
  hp.n_ff = 2816;
  if (arch_is_moe(arch)) {
    hp.n_expert = 8;
    hp.n_expert_used = 2;
    hp.n_ff_exp = 512;
  }
  hp.n_vocab = 32000;
  hp.n_ctx_train = 2048;
  hp.rms_eps = arch == Arch::llama ? 1e-5f : 1e-6f;
  hp.rope_theta = arch == Arch::llama ? 10000.0f : 1000000.0f;
  add_arch_features(hp, 512);
  return hp;
}

struct RealPreset {
  const char* name;
  Arch arch;
  HParams (*make)();
};

HParams llama3(int64_t n_layer, int64_t n_embd, int64_t n_head, int64_t n_ff) {
  HParams hp;
  hp.arch = Arch::llama;
  hp.n_layer = n_layer;
  hp.n_embd = n_embd;
  hp.n_head = n_head;
  hp.n_head_kv = 8;
  hp.head_dim = 128;
  hp.n_ff = n_ff;
  hp.n_vocab = 128256;
  hp.n_ctx_train = 8192;
  hp.rms_eps = 1e-5f;
  hp.rope_theta = 500000.0f;
  return hp;
}

HParams qwen3_8b() {
  HParams hp;
  hp.arch = Arch::qwen3;
  hp.n_layer = 36;
  hp.n_embd = 4096;
  hp.n_head = 32;
  hp.n_head_kv = 8;
  hp.head_dim = 128;
  hp.n_ff = 12288;
  hp.n_vocab = 151936;
  hp.n_ctx_train = 40960;
  hp.rms_eps = 1e-6f;
  hp.rope_theta = 1000000.0f;
  return hp;
}

HParams qwen3_30b_a3b() {
  HParams hp;
  hp.arch = Arch::qwen3moe;
  hp.n_layer = 48;
  hp.n_embd = 2048;
  hp.n_head = 32;
  hp.n_head_kv = 4;
  hp.head_dim = 128;
  hp.n_ff = 6144;
  hp.n_expert = 128;
  hp.n_expert_used = 8;
  hp.n_ff_exp = 768;
  hp.n_vocab = 151936;
  hp.n_ctx_train = 40960;
  hp.rms_eps = 1e-6f;
  hp.rope_theta = 1000000.0f;
  return hp;
}

HParams gpt_oss_20b() {
  HParams hp;
  hp.arch = Arch::gpt_oss;
  hp.n_layer = 24;
  hp.n_embd = 2880;
  hp.n_head = 64;
  hp.n_head_kv = 8;
  hp.head_dim = 64;
  hp.n_ff = 2880;
  hp.n_expert = 32;
  hp.n_expert_used = 4;
  hp.n_ff_exp = 2880;
  hp.n_vocab = 201088;
  hp.n_ctx_train = 131072;
  hp.rms_eps = 1e-5f;
  add_arch_features(hp, 128);
  hp.rope_freq_scale = hp.rope_freq_scale_swa = 1.0f / 32;  // YaRN 32x over 4096
  hp.n_ctx_orig = 4096;
  return hp;
}

HParams gemma3_27b() {
  HParams hp;
  hp.arch = Arch::gemma3;
  hp.n_layer = 62;
  hp.n_embd = 5376;
  hp.n_head = 32;
  hp.n_head_kv = 16;
  hp.head_dim = 128;
  hp.n_ff = 21504;
  hp.n_vocab = 262208;
  hp.n_ctx_train = 131072;
  hp.rms_eps = 1e-6f;
  add_arch_features(hp, 1024);
  return hp;
}

// GLM-4.5-Air: 46 layers (the first dense) and one multi-token-prediction layer, 128 experts of
// 1408 (8 used) and one shared, 96 query heads of 128 with half of each rotated.
HParams glm45_air() {
  HParams hp;
  hp.arch = Arch::glm4moe;
  hp.n_layer = 46;
  hp.n_embd = 4096;
  hp.n_head = 96;
  hp.n_head_kv = 8;
  hp.head_dim = 128;
  hp.n_ff = 10944;
  hp.n_expert = 128;
  hp.n_expert_used = 8;
  hp.n_ff_exp = 1408;
  hp.n_vocab = 151552;
  hp.n_ctx_train = 131072;
  hp.rope_theta = 1000000.0f;
  add_arch_features(hp, 0);
  hp.expert_weights_scale = 1.0f;  // Air's routed_scaling_factor (GLM-4.5's is 2.5)
  return hp;
}

const RealPreset kRealPresets[] = {
    {"glm-4.5-air", Arch::glm4moe, glm45_air},
    {"gpt-oss-20b", Arch::gpt_oss, gpt_oss_20b},
    {"gemma3-27b", Arch::gemma3, gemma3_27b},
    {"llama-8b", Arch::llama, [] { return llama3(32, 4096, 32, 14336); }},
    {"llama-70b", Arch::llama, [] { return llama3(80, 8192, 64, 28672); }},
    {"qwen3-8b", Arch::qwen3, qwen3_8b},
    {"qwen3-30b-a3b", Arch::qwen3moe, qwen3_30b_a3b},
};

}  // namespace

std::vector<std::string> preset_names(Arch arch) {
  std::vector<std::string> names = {"tiny", "small"};
  for (const RealPreset& p : kRealPresets)
    if (p.arch == arch) names.push_back(p.name);
  return names;
}

HParams preset_hparams(Arch arch, std::string_view name) {
  if (name == "tiny") return tiny(arch);
  if (name == "small") return small(arch);
  for (const RealPreset& p : kRealPresets) {
    if (name != p.name) continue;
    LOOM_CHECK(p.arch == arch, usage, "preset '{}' is a {} model, not {} (use --arch {})", name, arch_name(p.arch),
               arch_name(arch), arch_name(p.arch));
    return p.make();
  }
  fail(ErrorKind::usage, "unknown preset '{}' for {} (choose from: {})", name, arch_name(arch),
       fmt::join(preset_names(arch), ", "));
}

void validate_hparams(const HParams& hp) {
  const char* a = arch_name(hp.arch);
  auto in_range = [&](const char* what, int64_t v, int64_t lo, int64_t hi) {
    LOOM_CHECK(v >= lo && v <= hi, invalid_input, "{}: {} = {} is out of range [{}, {}]", a, what, v, lo, hi);
  };
  in_range("n_layer", hp.n_layer, 1, 4096);
  in_range("n_embd", hp.n_embd, 1, 1 << 20);
  in_range("n_head", hp.n_head, 1, 1 << 14);
  in_range("n_head_kv", hp.n_head_kv, 1, hp.n_head);
  LOOM_CHECK(hp.n_head % hp.n_head_kv == 0, invalid_input, "{}: n_head = {} is not a multiple of n_head_kv = {}", a,
             hp.n_head, hp.n_head_kv);
  in_range("head_dim", hp.head_dim, 1, 1 << 14);
  in_range("n_vocab", hp.n_vocab, 1, 1 << 24);
  in_range("n_ctx_train", hp.n_ctx_train, 1, 1 << 26);
  if (hp.is_moe() || arch_is_moe(hp.arch)) {
    LOOM_CHECK(arch_is_moe(hp.arch) || arch_experts_optional(hp.arch), invalid_input,
               "{}: this architecture has no experts", a);
    in_range("n_ff", hp.n_ff, 0, 1 << 22);
    in_range("n_expert", hp.n_expert, 1, 1 << 12);
    in_range("n_expert_used", hp.n_expert_used, 1, hp.n_expert);
    in_range("n_ff_exp", hp.n_ff_exp, 1, 1 << 20);
  } else {
    in_range("n_ff", hp.n_ff, 1, 1 << 22);
    LOOM_CHECK(hp.n_expert == 0 && hp.n_expert_used == 0 && hp.n_ff_exp == 0, invalid_input,
               "{}: a dense architecture has no experts (n_expert = {}, n_expert_used = {}, n_ff_exp = {})", a,
               hp.n_expert, hp.n_expert_used, hp.n_ff_exp);
  }
  LOOM_CHECK(std::isfinite(hp.rms_eps) && hp.rms_eps > 0 && hp.rms_eps < 1, invalid_input,
             "{}: rms_eps = {} must be in (0, 1)", a, hp.rms_eps);
  LOOM_CHECK(std::isfinite(hp.rope_theta) && hp.rope_theta > 0, invalid_input, "{}: rope_theta = {} must be positive",
             a, hp.rope_theta);
  auto positive = [&](const char* what, float v) {
    LOOM_CHECK(std::isfinite(v) && v > 0, invalid_input, "{}: {} = {} must be positive", a, what, v);
  };
  positive("rope_freq_scale", hp.rope_freq_scale);
  positive("rope_attn_factor", hp.rope_attn_factor);
  positive("rope_theta_swa", hp.rope_theta_swa);
  positive("rope_freq_scale_swa", hp.rope_freq_scale_swa);
  in_range("n_ctx_orig", hp.n_ctx_orig, 0, 1 << 26);
  in_range("n_swa", hp.n_swa, 0, 1 << 26);
  in_range("swa_period", hp.swa_period, 0, 4096);
  for (float cap : {hp.attn_softcap, hp.final_softcap})
    LOOM_CHECK(std::isfinite(cap) && cap >= 0, invalid_input, "{}: soft-capping value {} must be >= 0", a, cap);
  LOOM_CHECK(!hp.rope_freqs || arch_reads_rope_freqs(hp.arch), invalid_input,
             "{}: rope_freqs.weight is llama's, mistral3's and exaone4's", a);
  positive("yarn_beta_fast", hp.yarn_beta_fast);
  positive("yarn_beta_slow", hp.yarn_beta_slow);
  for (float v : {hp.yarn_log_mul, hp.attn_temp_scale})
    LOOM_CHECK(std::isfinite(v), invalid_input, "{}: a YaRN or temperature value of {} must be finite", a, v);
  LOOM_CHECK(
      hp.arch == Arch::mistral3 || (hp.yarn_log_mul == 0 && hp.yarn_beta_fast == 32.0f && hp.yarn_beta_slow == 1.0f),
      invalid_input, "{}: YaRN's keys in the file are mistral3's", a);
  LOOM_CHECK(hp.arch == Arch::mistral3 || hp.arch == Arch::llama4 ||
                 (hp.attn_temp_scale == 0 && hp.attn_temp_offset == 0 && hp.attn_temp_floor == 0),
             invalid_input, "{}: the attention temperature is mistral3's and llama4's", a);
  in_range("attn_temp_floor", hp.attn_temp_floor, 0, 1 << 26);
  LOOM_CHECK(std::isfinite(hp.attn_temp_offset) && hp.attn_temp_offset >= 0, invalid_input,
             "{}: attn_temp_offset = {} must be finite and >= 0", a, hp.attn_temp_offset);
  const bool llama4 = hp.arch == Arch::llama4;
  in_range("n_moe_layer_step", hp.n_moe_layer_step, llama4 ? 1 : 0, llama4 ? hp.n_layer : 0);
  LOOM_CHECK(llama4 || (!hp.swa_chunked && !hp.qk_rms_norm && !hp.attn_temp_nope_only), invalid_input,
             "{}: chunked attention and unweighted q/k norms are llama4's", a);
  LOOM_CHECK(!hp.rope_long_short || hp.arch == Arch::phi3, invalid_input, "{}: long/short RoPE factors are phi3's", a);
  LOOM_CHECK(hp.head_dim % 2 == 0, invalid_input, "{}: head_dim = {} must be even for RoPE", a, hp.head_dim);
  for (float s : {hp.embedding_scale, hp.residual_scale, hp.attention_scale, hp.logit_scale})
    LOOM_CHECK(std::isfinite(s) && s >= 0, invalid_input, "{}: a scale of {} must be finite and >= 0", a, s);
  LOOM_CHECK(arch_is_granite(hp.arch) || (hp.embedding_scale == 0 && hp.residual_scale == 0 &&
                                          hp.attention_scale == 0 && (hp.logit_scale == 0 || arch_is_cohere(hp.arch))),
             invalid_input,
             "{}: embedding, residual and attention scales are granite's, logit scales granite's and Cohere's", a);
  LOOM_CHECK(!arch_is_cohere(hp.arch) || hp.tied_embeddings, invalid_input, "{}: the output is always token_embd", a);
  // llama.cpp's exaone4 loader: attn_output is {n_embd, n_embd}
  LOOM_CHECK(hp.arch != Arch::exaone4 || hp.n_embd_q() == hp.n_embd, invalid_input,
             "{}: head_dim {} x n_head {} must equal n_embd {}", a, hp.head_dim, hp.n_head, hp.n_embd);
  if (arch_whole_qk_norm(hp.arch)) {  // llama.cpp's loader: q as wide as the embedding, output.weight required
    LOOM_CHECK(hp.n_embd_q() == hp.n_embd, invalid_input, "{}: head_dim {} x n_head {} must equal n_embd {}", a,
               hp.head_dim, hp.n_head, hp.n_embd);
    LOOM_CHECK(!hp.tied_embeddings, invalid_input, "{}: output.weight is required", a);
    // olmoe's k norm is n_embd wide in llama.cpp's loader: as many key/value heads as query heads
    LOOM_CHECK(hp.arch != Arch::olmoe || hp.n_head_kv == hp.n_head, invalid_input,
               "{}: n_head_kv {} must equal n_head {}", a, hp.n_head_kv, hp.n_head);
  }
  LOOM_CHECK(!arch_is_granite(hp.arch) || hp.logit_scale > 0, invalid_input, "{}: logit_scale must be positive", a);
  in_range("n_rot", hp.n_rot, 0, hp.head_dim);
  LOOM_CHECK(hp.n_rot % 2 == 0, invalid_input, "{}: n_rot = {} must be even", a, hp.n_rot);
  LOOM_CHECK(arch_partial_rope(hp.arch) || hp.rot_dims() == hp.head_dim, invalid_input,
             "{}: only phi3, glm4 and glm4moe rotate part of each head (n_rot = {}, head_dim = {})", a, hp.n_rot,
             hp.head_dim);
  const bool glm = hp.arch == Arch::glm4moe, qwen2moe = hp.arch == Arch::qwen2moe;
  // a shared expert where n_ff_shared says
  const bool sized_shared = hp.arch == Arch::granitemoe || hp.arch == Arch::ernie4_5_moe || hp.arch == Arch::llama4;
  const bool dense_lead = glm || hp.arch == Arch::ernie4_5_moe;
  in_range("n_layer_dense_lead", hp.n_layer_dense_lead, 0, dense_lead ? hp.n_layer : 0);
  in_range("n_expert_shared", hp.n_expert_shared, qwen2moe ? 1 : 0, glm ? 64 : qwen2moe || sized_shared ? 1 : 0);
  in_range("n_ff_shared", hp.n_ff_shared, qwen2moe ? 1 : 0, qwen2moe || sized_shared ? 1 << 22 : 0);
  LOOM_CHECK(!sized_shared || (hp.n_expert_shared > 0) == (hp.n_ff_shared > 0), invalid_input,
             "{}: a shared expert needs its width (n_ff_shared = {})", a, hp.n_ff_shared);
  // llama.cpp's llama4 loader: the shared expert always there, as wide as a routed one
  LOOM_CHECK(hp.arch != Arch::llama4 || (hp.n_expert_shared == 1 && hp.n_ff_shared == hp.n_ff_exp), invalid_input,
             "{}: the shared expert must be expert_feed_forward_length {} wide (n_ff_shared = {})", a, hp.n_ff_exp,
             hp.n_ff_shared);
  LOOM_CHECK(!arch_experts_n_ff_wide(hp.arch) || !hp.is_moe() || hp.n_ff_exp == hp.n_ff, invalid_input,
             "{}: experts are feed_forward_length wide (n_ff_exp = {}, n_ff = {})", a, hp.n_ff_exp, hp.n_ff);
  in_range("n_layer_nextn", hp.n_layer_nextn, 0, glm ? 16 : 0);
  in_range("n_no_rope_layer_step", hp.n_no_rope_layer_step, 0,
           hp.arch == Arch::smollm3 || hp.arch == Arch::llama4 ? 4096 : 0);
  LOOM_CHECK(glm || (!hp.qk_norm && hp.expert_gating == ExpertGating::softmax && hp.expert_weights_scale == 0.0f),
             invalid_input, "{}: optional q/k norms, sigmoid routing and expert weight scaling are glm4moe's", a);
  // the k weights: as the softmax gave them in qwen2moe and olmoe, renormalized in the others (glm4moe: as its file
  // says)
  LOOM_CHECK(glm || !hp.is_moe() || hp.expert_weights_norm == !arch_expert_weights_raw(hp.arch), invalid_input,
             "{}: expert_weights_norm = {} is not this architecture's", a, hp.expert_weights_norm);
  if (hp.n_layer_dense_lead > 0) in_range("n_ff", hp.n_ff, 1, 1 << 22);
  // glm4moe scales its expert weights (the others must not: checked above)
  LOOM_CHECK(!glm || (std::isfinite(hp.expert_weights_scale) && hp.expert_weights_scale > 0), invalid_input,
             "{}: expert_weights_scale = {} must be finite and positive", a, hp.expert_weights_scale);
  // Each range above keeps every product below 2^63; cap the whole model at 2^46 parameters.
  double total = 0;
  for (const TensorSpec& t : arch_tensors(hp)) total += (double)t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3];
  LOOM_CHECK(total <= std::ldexp(1.0, 46), invalid_input, "{}: {:.3g} parameters is absurd", a, total);
}

}  // namespace loom
