// The quantization mixes: which type each tensor of a model gets for a llama.cpp file type. The
// rules are llama.cpp's (llama_tensor_get_type and its fallbacks, for the file types loom has
// quantizers for): output.weight (and a tied token_embd) Q6_K, attn_v / ffn_down with more bits
// in a pattern of layers for the _M mixes, Q8_0 for the 8-expert models' attn_v / attn_k, ...
// One rule of loom's own: gpt-oss's expert tensors stay MXFP4 in every quantized mix.
#include <algorithm>
#include <cctype>
#include <cstdio>

#include "loom/core/error.h"
#include "loom/model/quantize.h"

namespace loom {
namespace {

// llama.cpp's broad tensor categories (by name, for any architecture).
enum class Category { token_embd, attn_q, attn_k, attn_v, attn_qkv, attn_kv_b, attn_output, ffn_up, ffn_gate, ffn_down,
                      output, other };

bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

Category category_of(std::string_view name) {
  if (name == "output.weight") return Category::output;
  if (name == "token_embd.weight" || name == "per_layer_token_embd.weight") return Category::token_embd;
  if (contains(name, "attn_qkv.weight")) return Category::attn_qkv;
  if (contains(name, "attn_kv_b.weight")) return Category::attn_kv_b;
  if (contains(name, "attn_v.weight")) return Category::attn_v;
  if (contains(name, "attn_k.weight")) return Category::attn_k;
  if (contains(name, "attn_q.weight")) return Category::attn_q;
  if (contains(name, "attn_output.weight")) return Category::attn_output;
  if (contains(name, "ffn_up")) return Category::ffn_up;
  if (contains(name, "ffn_gate")) return Category::ffn_gate;
  if (contains(name, "ffn_down")) return Category::ffn_down;
  return Category::other;
}
bool is_attn_v_like(Category c) { return c == Category::attn_v || c == Category::attn_qkv || c == Category::attn_kv_b; }

// Weights, 2-D or more, that are not norms, routers, position tables or tiny special ones.
bool quantizable(const gguf::TensorInfo& t) {
  const std::string_view n = t.name;
  if (t.n_dims < 2 || n.size() < 6 || n.substr(n.size() - 6) != "weight") return false;
  for (std::string_view bad : {"_norm.weight", "ffn_gate_inp.weight", "altup", "laurel", "per_layer_model_proj",
                               "ssm_conv1d", "attn_rel_b.weight", "position_embd", "token_types"})
    if (contains(n, bad)) return false;
  return true;
}

// Layers that keep more bits in the _M mixes: the first and last eighth, and every third between.
bool use_more_bits(int64_t i, int64_t n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

int layer_of(std::string_view name) {
  int layer = -1;
  if (std::sscanf(std::string(name).c_str(), "blk.%d.", &layer) != 1) return -1;
  return layer;
}

// File type ids (llama_ftype).
enum Ft : int {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ8_0 = 7,
  kQ5_0 = 8,
  kQ5_1 = 9,
  kQ2_K = 10,
  kQ3_K_S = 11,
  kQ3_K_M = 12,
  kQ3_K_L = 13,
  kQ4_K_S = 14,
  kQ4_K_M = 15,
  kQ5_K_S = 16,
  kQ5_K_M = 17,
  kQ6_K = 18,
  kIQ2_XXS = 19,
  kIQ2_XS = 20,
  kIQ3_XS = 22,
  kIQ3_XXS = 23,
  kIQ1_S = 24,
  kIQ4_NL = 25,
  kIQ3_S = 26,
  kIQ3_M = 27,
  kIQ2_S = 28,
  kIQ2_M = 29,
  kIQ4_XS = 30,
  kIQ1_M = 31,
  kBF16 = 32,
  kMXFP4_MOE = 38,
};

// The i-quant file types of 2 bits or less per weight, which llama.cpp mixes by rules of their own.
bool low_bit_iq(int f) {
  return f == kIQ2_XXS || f == kIQ2_XS || f == kIQ2_S || f == kIQ2_M || f == kIQ1_S || f == kIQ1_M;
}

struct MixState {
  const FileType& ft;
  const MixModel& m;
  const QuantizeOptions& o;
  bool tied = true;  // no output.weight: token_embd is also the output
  int64_t n_attn_v = 0, i_attn_v = 0, i_ffn_down = 0, i_ffn_gate = 0, i_ffn_up = 0;
  int n_fallback = 0;

  bool has_imatrix() const { return o.imatrix != nullptr && !o.imatrix->entries.empty(); }
  int64_t n_gqa() const { return m.n_head_kv > 0 ? m.n_head / m.n_head_kv : 1; }
  bool is_70b() const { return m.arch == "llama" && m.n_layer == 80; }  // llama.cpp's LLM_TYPE_70B

  // The layer of an ffn tensor: the running count, or for MoE models the name's block number.
  int64_t ffn_layer(int64_t counter, std::string_view name) const {
    if (m.n_expert <= 1) return counter;
    const int layer = layer_of(name);
    LOOM_CHECK(layer >= 0 && layer < m.n_layer, invalid_input, "cannot tell the layer of tensor {}", name);
    return layer;
  }

  DType mixed(DType t, const gguf::TensorInfo& info, Category c);
  DType mixed_low_bit(DType t, const gguf::TensorInfo& info, Category c);
  DType fallback(DType t, const gguf::TensorInfo& info);
};

DType MixState::mixed(DType t, const gguf::TensorInfo& info, Category c) {
  const int f = ft.id;
  if (c == Category::output || (tied && c == Category::token_embd)) {
    if (o.output_tensor_type) return *o.output_tensor_type;
    if (f == kMXFP4_MOE || info.ne[0] % dtype_info(t).block_size != 0) return DType::Q8_0;
    if (low_bit_iq(f) || f == kIQ3_XXS) return DType::Q5_K;
    return t != DType::Q8_0 ? DType::Q6_K : t;
  }
  if (f == kMXFP4_MOE) return info.ne[2] > 1 ? DType::MXFP4 : DType::Q8_0;  // experts : the rest
  // gpt-oss was trained with its experts in MXFP4 and its published GGUFs keep them so in every
  // mix: any quantized mix leaves them MXFP4 (a copy when the source has them MXFP4 already).
  if (m.arch == "gpt-oss" && info.ne[2] > 1 && contains(info.name, "_exps.")) return DType::MXFP4;
  if (c == Category::token_embd) {
    if (o.token_embedding_type) return *o.token_embedding_type;
    if (f == kIQ2_XXS || f == kIQ2_XS || f == kIQ1_S || f == kIQ1_M) return DType::Q2_K;
    if (f == kIQ2_S || f == kIQ2_M || f == kIQ3_XXS) return DType::IQ3_S;
    return t;
  }
  if (low_bit_iq(f)) return mixed_low_bit(t, info, c);
  if (is_attn_v_like(c)) {
    if (f == kQ2_K)
      t = n_gqa() >= 4 ? DType::Q4_K : DType::Q3_K;
    else if (f == kIQ3_XXS)
      t = n_gqa() >= 4 ? DType::Q4_K : has_imatrix() ? DType::IQ3_XXS : DType::IQ3_S;
    else if ((f == kIQ3_XS || f == kIQ3_S) && n_gqa() >= 4)
      t = DType::Q4_K;
    else if (f == kIQ3_M)
      t = DType::Q4_K;
    else if (f == kQ3_K_M) t = i_attn_v < 2 ? DType::Q5_K : DType::Q4_K;
    else if (f == kQ3_K_L) t = DType::Q5_K;
    else if ((f == kIQ4_NL || f == kIQ4_XS) && n_gqa() >= 4) t = DType::Q5_K;
    else if ((f == kQ4_K_M || f == kQ5_K_M) && use_more_bits(i_attn_v, n_attn_v)) t = DType::Q6_K;
    else if (f == kQ4_K_S && i_attn_v < 4) t = DType::Q5_K;
    if (is_70b() && (t == DType::Q3_K || t == DType::Q4_K)) t = DType::Q5_K;
    if (m.n_expert == 8) t = DType::Q8_0;
    ++i_attn_v;
  } else if (c == Category::attn_k) {
    if (m.n_expert == 8) t = DType::Q8_0;
    else if (f == kIQ3_XS)
      t = DType::IQ3_XXS;
    else if (f == kIQ3_XXS)
      t = DType::IQ2_S;
  } else if (c == Category::attn_q) {
    if (f == kIQ3_XS)
      t = DType::IQ3_XXS;
    else if (f == kIQ3_XXS)
      t = DType::IQ2_S;
  } else if (c == Category::ffn_down) {
    const int64_t i = ffn_layer(i_ffn_down, info.name), n = m.n_layer;
    if (f == kQ2_K) t = DType::Q3_K;
    else if (f == kIQ3_XXS && !has_imatrix())
      t = i < n / 8 ? DType::Q4_K : DType::Q3_K;
    else if (f == kIQ3_M && (i < n / 8 || (m.n_expert == 8 && use_more_bits(i, n))))
      t = DType::Q4_K;
    else if (f == kQ3_K_M) t = i < n / 16 ? DType::Q5_K : m.arch != "falcon" || use_more_bits(i, n) ? DType::Q4_K : DType::Q3_K;
    else if (f == kQ3_K_L) t = m.arch == "falcon" ? DType::Q4_K : DType::Q5_K;
    else if (f == kQ4_K_M) {
      if (m.arch == "falcon") t = i < n / 16 ? DType::Q6_K : use_more_bits(i, n) ? DType::Q5_K : DType::Q4_K;
      else if (use_more_bits(i, n)) t = DType::Q6_K;
    } else if (i < n / 8 && (f == kIQ4_NL || f == kIQ4_XS) && !has_imatrix())
      t = DType::Q5_K;
    else if (f == kQ5_K_M && use_more_bits(i, n)) t = DType::Q6_K;
    else if (f == kQ4_K_S && m.arch != "falcon" && i < n / 8) t = DType::Q5_K;
    // llama.cpp guards the first eighth with the _1 types only when an importance matrix is given,
    // so that a run without one keeps its old choice
    else if ((f == kQ4_0 || f == kQ5_0) && has_imatrix() && i < n / 8)
      t = f == kQ4_0 ? DType::Q4_1 : DType::Q5_1;
    ++i_ffn_down;
  } else if (c == Category::attn_output) {
    if (m.arch != "falcon") {
      if (m.n_expert == 8) {
        if (f == kQ2_K || f == kQ3_K_S || f == kQ3_K_M || f == kIQ4_NL || f == kQ4_K_S || f == kQ4_K_M ||
            f == kIQ4_XS || f == kIQ3_XS || f == kIQ3_XXS || f == kIQ3_S || f == kIQ3_M)
          t = DType::Q5_K;
      } else if (f == kQ2_K) t = DType::Q3_K;
      else if (f == kIQ3_XXS)
        t = DType::IQ3_S;
      else if (f == kIQ3_M)
        t = DType::Q4_K;
      else if (f == kQ3_K_M) t = DType::Q4_K;
      else if (f == kQ3_K_L) t = DType::Q5_K;
    } else if (f == kQ3_K_L) t = DType::Q4_K;
  } else if (c == Category::attn_qkv) {  // (unreachable: attn_v-like above, as in llama.cpp)
  } else if (c == Category::ffn_gate || c == Category::ffn_up) {
    int64_t& counter = c == Category::ffn_gate ? i_ffn_gate : i_ffn_up;
    if (f == kIQ3_XS) {
      const int64_t i = ffn_layer(counter, info.name), n = m.n_layer;
      if (i >= n / 8 && i < 7 * n / 8) t = DType::IQ3_XXS;
    }
    ++counter;
  }
  return t;
}

// IQ2_XXS, IQ2_XS, IQ2_S, IQ2_M, IQ1_S, IQ1_M: a few more bits for attn_v, the first eighth of
// ffn_down and attn_output.
DType MixState::mixed_low_bit(DType t, const gguf::TensorInfo& info, Category c) {
  const int f = ft.id;
  const bool iq2_s = f == kIQ2_S || f == kIQ2_M;
  if (c == Category::attn_v) {
    t = n_gqa() >= 4 || m.n_expert >= 4 ? DType::Q4_K : iq2_s ? DType::IQ3_S : DType::Q2_K;
    ++i_attn_v;
  } else if (c == Category::attn_k && m.n_expert == 8) {
    t = DType::Q4_K;
  } else if (c == Category::ffn_down) {
    if (ffn_layer(i_ffn_down, info.name) < m.n_layer / 8) t = iq2_s ? DType::IQ3_S : DType::Q2_K;
    ++i_ffn_down;
  } else if (c == Category::attn_output) {
    if (m.n_expert == 8)
      t = DType::Q5_K;
    else if (f == kIQ1_S || f == kIQ1_M)
      t = DType::IQ2_XXS;
    else if (iq2_s)
      t = DType::IQ3_S;
  }
  return t;
}

// Rows the type's block does not divide get the nearest type with 32-element blocks, else F16.
DType MixState::fallback(DType t, const gguf::TensorInfo& info) {
  const int64_t cols = info.ne[0];
  if (cols % dtype_info(t).block_size == 0) return t;
  ++n_fallback;
  DType r;
  switch (is_iq_grid_type(t) ? DType::IQ4_XS : t) {  // every i-quant falls back as IQ4_XS does
    case DType::IQ4_XS:
      r = DType::IQ4_NL;
      break;
    case DType::Q2_K:
    case DType::Q3_K: r = DType::Q4_0; break;
    case DType::Q4_K: r = DType::Q5_0; break;
    case DType::Q5_K: r = DType::Q5_1; break;
    case DType::Q6_K: r = DType::Q8_0; break;
    default:
      fail(ErrorKind::invalid_input, "{}: {} columns are not a multiple of the {} block ({}) and {} has no fallback",
           info.name, cols, dtype_name(t), dtype_info(t).block_size, dtype_name(t));
  }
  if (cols % dtype_info(r).block_size != 0) r = DType::F16;
  if (o.log)
    std::fprintf(o.log, "warning: %-36s - %lld columns are not a multiple of %lld (required by %s): %s instead\n",
                 info.name.c_str(), (long long)cols, (long long)dtype_info(t).block_size, dtype_name(t), dtype_name(r));
  return r;
}

std::string upper(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = (char)std::toupper((unsigned char)c);
  return r;
}

}  // namespace

const std::vector<FileType>& file_types() {
  static const std::vector<FileType> kTypes = {
      {"Q4_0", kQ4_0, DType::Q4_0},
      {"Q4_1", kQ4_1, DType::Q4_1},
      {"Q5_0", kQ5_0, DType::Q5_0},
      {"Q5_1", kQ5_1, DType::Q5_1},
      {"IQ4_NL", kIQ4_NL, DType::IQ4_NL},
      {"IQ4_XS", kIQ4_XS, DType::IQ4_XS},
      {"Q2_K", kQ2_K, DType::Q2_K},
      {"Q3_K_S", kQ3_K_S, DType::Q3_K},
      {"Q3_K_M", kQ3_K_M, DType::Q3_K},
      {"Q3_K_L", kQ3_K_L, DType::Q3_K},
      {"Q4_K_S", kQ4_K_S, DType::Q4_K},
      {"Q4_K_M", kQ4_K_M, DType::Q4_K},
      {"Q5_K_S", kQ5_K_S, DType::Q5_K},
      {"Q5_K_M", kQ5_K_M, DType::Q5_K},
      {"Q6_K", kQ6_K, DType::Q6_K},
      {"Q8_0", kQ8_0, DType::Q8_0},
      {"MXFP4_MOE", kMXFP4_MOE, DType::MXFP4},
      {"F16", kF16, DType::F16},
      {"BF16", kBF16, DType::BF16},
      {"F32", kF32, DType::F32},
      // The i-quants (llama.cpp's base type for each: IQ2_S is IQ2_XS's, IQ2_M IQ2_S's)
      {"IQ1_S", kIQ1_S, DType::IQ1_S},
      {"IQ1_M", kIQ1_M, DType::IQ1_M},
      {"IQ2_XXS", kIQ2_XXS, DType::IQ2_XXS},
      {"IQ2_XS", kIQ2_XS, DType::IQ2_XS},
      {"IQ2_S", kIQ2_S, DType::IQ2_XS},
      {"IQ2_M", kIQ2_M, DType::IQ2_S},
      {"IQ3_XXS", kIQ3_XXS, DType::IQ3_XXS},
      {"IQ3_XS", kIQ3_XS, DType::IQ3_S},
      {"IQ3_S", kIQ3_S, DType::IQ3_S},
      {"IQ3_M", kIQ3_M, DType::IQ3_S},
  };
  return kTypes;
}

std::optional<FileType> file_type_from_name(std::string_view name) {
  std::string n = upper(name);
  if (n == "Q3_K" || n == "Q4_K" || n == "Q5_K") n += "_M";
  for (const FileType& t : file_types())
    if (n == t.name) return t;
  return std::nullopt;
}

MixModel mix_model_of(const gguf::File& f) {
  MixModel m;
  m.arch = f.find_string("general.architecture").value_or("");
  auto key = [&](const char* k) { return f.find_int(m.arch + "." + k); };
  m.n_layer = key("block_count").value_or(0);
  m.n_head = key("attention.head_count").value_or(0);
  m.n_head_kv = key("attention.head_count_kv").value_or(m.n_head);
  m.n_expert = key("expert_count").value_or(0);
  return m;
}

std::vector<const gguf::TensorInfo*> quantize_order(const std::vector<gguf::TensorInfo>& tensors) {
  std::vector<const gguf::TensorInfo*> order;
  for (const gguf::TensorInfo& t : tensors) order.push_back(&t);
  std::stable_sort(order.begin(), order.end(), [](const gguf::TensorInfo* a, const gguf::TensorInfo* b) {
    const int la = layer_of(a->name), lb = layer_of(b->name);
    return la != lb ? la < lb : a->name < b->name;
  });
  return order;
}

std::vector<DType> choose_tensor_types(const FileType& ft, const MixModel& m, const QuantizeOptions& o,
                                       const std::vector<const gguf::TensorInfo*>& ordered, int* n_fallback) {
  MixState s{ft, m, o};
  for (const gguf::TensorInfo* t : ordered) {
    const Category c = category_of(t->name);
    if (is_attn_v_like(c)) ++s.n_attn_v;
    if (c == Category::output) s.tied = false;
  }
  std::vector<DType> types;
  for (const gguf::TensorInfo* t : ordered) {
    DType type = t->type;
    const Category c = category_of(t->name);
    if (!quantizable(*t)) {
    } else if (o.token_embedding_type && c == Category::token_embd) {
      type = *o.token_embedding_type;
    } else if (o.output_tensor_type && c == Category::output) {
      type = *o.output_tensor_type;
    } else {
      type = ft.base;
      if (dtype_info(type).is_quantized) {
        if (!o.pure) type = s.mixed(type, *t, c);
        type = s.fallback(type, *t);
      }
    }
    types.push_back(type);
  }
  if (n_fallback) *n_fallback = s.n_fallback;
  return types;
}

}  // namespace loom
