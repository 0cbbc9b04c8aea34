// The per-tensor type choice of `loom-gguf quantize` against llama.cpp's rules, worked out by
// hand for small tensor lists: the file-type names, the visiting order, Q4_K_M's and Q3_K_M's
// layer patterns, the tied output, GQA and 8-expert rules, --pure / --output-tensor-type /
// --token-embedding-type, and the fallbacks for rows the block does not divide.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "loom/core/error.h"
#include "loom/model/quantize.h"

namespace loom {
namespace {

gguf::TensorInfo tensor(std::string name, std::vector<int64_t> ne, DType type = DType::F16) {
  gguf::TensorInfo t;
  t.name = std::move(name);
  t.type = type;
  t.n_dims = (int)ne.size();
  for (size_t d = 0; d < ne.size(); ++d) t.ne[d] = ne[d];
  return t;
}

// A llama-shaped model: n_layer blocks of width 256 (ffn 512), output optional.
std::vector<gguf::TensorInfo> llama(int n_layer, bool with_output, int64_t width = 256) {
  std::vector<gguf::TensorInfo> ts;
  ts.push_back(tensor("token_embd.weight", {width, 1000}));
  ts.push_back(tensor("output_norm.weight", {width}, DType::F32));
  if (with_output) ts.push_back(tensor("output.weight", {width, 1000}));
  for (int i = n_layer - 1; i >= 0; --i) {  // reversed: the order must not come from the file
    const std::string b = "blk." + std::to_string(i) + ".";
    for (const char* n : {"attn_q", "attn_k", "attn_v", "attn_output"}) ts.push_back(tensor(b + n + ".weight", {width, width}));
    ts.push_back(tensor(b + "ffn_gate.weight", {width, 2 * width}));
    ts.push_back(tensor(b + "ffn_up.weight", {width, 2 * width}));
    ts.push_back(tensor(b + "ffn_down.weight", {2 * width, width}));
    ts.push_back(tensor(b + "attn_norm.weight", {width}, DType::F32));
    ts.push_back(tensor(b + "ffn_norm.weight", {width}, DType::F32));
  }
  return ts;
}

std::map<std::string, DType> choose(const std::string& type, const std::vector<gguf::TensorInfo>& ts, MixModel m,
                                    QuantizeOptions o = {}, int* n_fallback = nullptr) {
  o.log = nullptr;
  const std::optional<FileType> ft = file_type_from_name(type);
  EXPECT_TRUE(ft.has_value()) << type;
  const auto order = quantize_order(ts);
  const std::vector<DType> types = choose_tensor_types(*ft, m, o, order, n_fallback);
  std::map<std::string, DType> out;
  for (size_t i = 0; i < order.size(); ++i) out[order[i]->name] = types[i];
  return out;
}

MixModel llama_model(int n_layer, int n_head = 8, int n_head_kv = 8) { return {"llama", n_layer, n_head, n_head_kv, 0}; }

TEST(QuantizeMix, FileTypeNames) {
  EXPECT_EQ(file_type_from_name("Q4_K_M")->id, 15);
  EXPECT_EQ(file_type_from_name("q4_k_m")->id, 15);
  EXPECT_EQ(file_type_from_name("Q4_K")->id, 15);  // llama-quantize's alias
  EXPECT_EQ(file_type_from_name("Q3_K")->id, 12);
  EXPECT_EQ(file_type_from_name("Q8_0")->id, 7);
  EXPECT_EQ(file_type_from_name("IQ4_XS")->base, DType::IQ4_XS);
  EXPECT_EQ(file_type_from_name("F16")->id, 1);
  EXPECT_FALSE(file_type_from_name("Q4_K_X").has_value());
  EXPECT_EQ(file_type_from_name("IQ2_XXS")->id, 19);
  EXPECT_EQ(file_type_from_name("IQ2_S")->base, DType::IQ2_XS);  // llama.cpp's base types
  EXPECT_EQ(file_type_from_name("IQ2_M")->base, DType::IQ2_S);
  EXPECT_EQ(file_type_from_name("iq3_m")->id, 27);
  EXPECT_EQ(file_type_from_name("IQ3_XS")->base, DType::IQ3_S);
  EXPECT_EQ(file_type_from_name("IQ1_M")->id, 31);
  EXPECT_FALSE(file_type_from_name("TQ1_0").has_value());
}

// The i-quant mixes, as llama-quantize chose them for a 2-layer llama (checked against its
// files) and by its rules for longer ones: output Q5_K below 3 bits, the token embedding, attn_v
// and the first eighth of ffn_down in more bits.
TEST(QuantizeMix, IQuantMixes) {
  auto types = choose("IQ2_M", llama(16, true), llama_model(16));
  EXPECT_EQ(types.at("output.weight"), DType::Q5_K);
  EXPECT_EQ(types.at("token_embd.weight"), DType::IQ3_S);
  EXPECT_EQ(types.at("blk.3.attn_v.weight"), DType::IQ3_S);
  EXPECT_EQ(types.at("blk.3.attn_output.weight"), DType::IQ3_S);
  EXPECT_EQ(types.at("blk.1.ffn_down.weight"), DType::IQ3_S);  // i < n / 8
  EXPECT_EQ(types.at("blk.2.ffn_down.weight"), DType::IQ2_S);
  EXPECT_EQ(types.at("blk.2.ffn_up.weight"), DType::IQ2_S);
  types = choose("IQ1_S", llama(16, true), llama_model(16, 32, 8));
  EXPECT_EQ(types.at("token_embd.weight"), DType::Q2_K);
  EXPECT_EQ(types.at("blk.0.attn_v.weight"), DType::Q4_K);  // GQA >= 4
  EXPECT_EQ(types.at("blk.0.attn_output.weight"), DType::IQ2_XXS);
  EXPECT_EQ(types.at("blk.0.ffn_down.weight"), DType::Q2_K);
  EXPECT_EQ(types.at("blk.9.attn_q.weight"), DType::IQ1_S);
  types = choose("IQ3_XS", llama(16, true), llama_model(16));
  EXPECT_EQ(types.at("output.weight"), DType::Q6_K);
  EXPECT_EQ(types.at("blk.0.attn_q.weight"), DType::IQ3_XXS);
  EXPECT_EQ(types.at("blk.0.attn_k.weight"), DType::IQ3_XXS);
  EXPECT_EQ(types.at("blk.1.ffn_up.weight"), DType::IQ3_S);  // the first eighth keeps the base
  EXPECT_EQ(types.at("blk.2.ffn_gate.weight"), DType::IQ3_XXS);
  EXPECT_EQ(types.at("blk.14.ffn_up.weight"), DType::IQ3_S);  // so does the last
  types = choose("IQ3_M", llama(16, true), llama_model(16));
  EXPECT_EQ(types.at("blk.5.attn_v.weight"), DType::Q4_K);
  EXPECT_EQ(types.at("blk.5.attn_output.weight"), DType::Q4_K);
  EXPECT_EQ(types.at("blk.1.ffn_down.weight"), DType::Q4_K);
  EXPECT_EQ(types.at("blk.2.ffn_down.weight"), DType::IQ3_S);
  // IQ3_XXS by llama.cpp's rules for a run without an importance matrix
  types = choose("IQ3_XXS", llama(16, true), llama_model(16));
  EXPECT_EQ(types.at("output.weight"), DType::Q5_K);
  EXPECT_EQ(types.at("token_embd.weight"), DType::IQ3_S);
  EXPECT_EQ(types.at("blk.4.attn_q.weight"), DType::IQ2_S);
  EXPECT_EQ(types.at("blk.4.attn_v.weight"), DType::IQ3_S);
  EXPECT_EQ(types.at("blk.1.ffn_down.weight"), DType::Q4_K);
  EXPECT_EQ(types.at("blk.4.ffn_down.weight"), DType::Q3_K);
  EXPECT_EQ(types.at("blk.4.attn_output.weight"), DType::IQ3_S);
  EXPECT_EQ(types.at("blk.4.ffn_up.weight"), DType::IQ3_XXS);
}

// With an importance matrix llama.cpp keeps IQ3_XXS for attn_v and ffn_down and IQ4_XS for the
// first eighth of ffn_down, and guards Q4_0's / Q5_0's first eighth with Q4_1 / Q5_1.
TEST(QuantizeMix, WithAnImportanceMatrix) {
  ImportanceMatrix m;
  m.entries["blk.0.attn_q.weight"] = std::vector<float>(256, 1.0f);
  QuantizeOptions o;
  o.imatrix = &m;
  auto types = choose("IQ3_XXS", llama(16, true), llama_model(16), o);
  EXPECT_EQ(types.at("blk.4.attn_v.weight"), DType::IQ3_XXS);
  EXPECT_EQ(types.at("blk.1.ffn_down.weight"), DType::IQ3_XXS);
  EXPECT_EQ(types.at("blk.4.ffn_down.weight"), DType::IQ3_XXS);
  EXPECT_EQ(types.at("blk.4.attn_output.weight"), DType::IQ3_S);  // as without
  types = choose("IQ4_XS", llama(16, true), llama_model(16), o);
  EXPECT_EQ(types.at("blk.1.ffn_down.weight"), DType::IQ4_XS);
  EXPECT_EQ(choose("IQ4_XS", llama(16, true), llama_model(16)).at("blk.1.ffn_down.weight"), DType::Q5_K);
  types = choose("Q4_0", llama(16, true), llama_model(16), o);
  EXPECT_EQ(types.at("blk.1.ffn_down.weight"), DType::Q4_1);
  EXPECT_EQ(types.at("blk.2.ffn_down.weight"), DType::Q4_0);
  EXPECT_EQ(types.at("blk.1.ffn_up.weight"), DType::Q4_0);
  EXPECT_EQ(choose("Q4_0", llama(16, true), llama_model(16)).at("blk.1.ffn_down.weight"), DType::Q4_0);
  EXPECT_EQ(choose("Q5_0", llama(16, true), llama_model(16), o).at("blk.0.ffn_down.weight"), DType::Q5_1);
  // an empty matrix (every entry filtered out) is no matrix
  m.entries.clear();
  EXPECT_EQ(choose("Q4_0", llama(16, true), llama_model(16), o).at("blk.1.ffn_down.weight"), DType::Q4_0);
}

TEST(QuantizeMix, OrderIsLlamaCpps) {
  const auto ts = llama(12, true);
  const auto order = quantize_order(ts);
  EXPECT_EQ(order[0]->name, "output.weight");  // outside blocks, by name
  EXPECT_EQ(order[1]->name, "output_norm.weight");
  EXPECT_EQ(order[2]->name, "token_embd.weight");
  EXPECT_EQ(order[3]->name, "blk.0.attn_k.weight");
  EXPECT_EQ(order[3 + 9]->name, "blk.1.attn_k.weight");  // blk.1 before blk.10 (by number)
  EXPECT_EQ(order.back()->name, "blk.11.ffn_up.weight");
}

TEST(QuantizeMix, Q4_K_MPattern) {
  const int n = 16;  // more bits: i < 2, i >= 14, (i - 2) % 3 == 2 -> 4, 7, 10, 13
  const auto types = choose("Q4_K_M", llama(n, true), llama_model(n));
  const std::vector<int> more = {0, 1, 4, 7, 10, 13, 14, 15};
  for (int i = 0; i < n; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    const bool m = std::find(more.begin(), more.end(), i) != more.end();
    EXPECT_EQ(types.at(b + "attn_v.weight"), m ? DType::Q6_K : DType::Q4_K) << i;
    EXPECT_EQ(types.at(b + "ffn_down.weight"), m ? DType::Q6_K : DType::Q4_K) << i;
    EXPECT_EQ(types.at(b + "attn_q.weight"), DType::Q4_K);
    EXPECT_EQ(types.at(b + "ffn_up.weight"), DType::Q4_K);
    EXPECT_EQ(types.at(b + "attn_norm.weight"), DType::F32);  // norms are not quantized
  }
  EXPECT_EQ(types.at("output.weight"), DType::Q6_K);
  EXPECT_EQ(types.at("token_embd.weight"), DType::Q4_K);
  EXPECT_EQ(types.at("output_norm.weight"), DType::F32);
}

TEST(QuantizeMix, TiedOutputAndOverrides) {
  auto types = choose("Q4_0", llama(2, false), llama_model(2));
  EXPECT_EQ(types.at("token_embd.weight"), DType::Q6_K);  // it is also the output
  EXPECT_EQ(types.at("blk.0.attn_v.weight"), DType::Q4_0);
  types = choose("Q8_0", llama(2, false), llama_model(2));
  EXPECT_EQ(types.at("token_embd.weight"), DType::Q8_0);
  QuantizeOptions o;
  o.output_tensor_type = DType::Q8_0;
  o.token_embedding_type = DType::Q4_1;
  types = choose("Q4_K_M", llama(2, true), llama_model(2), o);
  EXPECT_EQ(types.at("output.weight"), DType::Q8_0);
  EXPECT_EQ(types.at("token_embd.weight"), DType::Q4_1);
  o = {};
  o.pure = true;
  types = choose("Q4_K_M", llama(8, true), llama_model(8), o);
  for (const auto& [name, t] : types)
    if (name.find("norm") == std::string::npos) {
      EXPECT_EQ(t, DType::Q4_K) << name;
    }
  types = choose("F16", llama(2, true), llama_model(2));
  EXPECT_EQ(types.at("output.weight"), DType::F16);
  EXPECT_EQ(types.at("blk.1.ffn_down.weight"), DType::F16);
}

TEST(QuantizeMix, Q3_K_MAndGqaRules) {
  const int n = 32;
  auto types = choose("Q3_K_M", llama(n, true), llama_model(n));
  EXPECT_EQ(types.at("blk.0.attn_v.weight"), DType::Q5_K);
  EXPECT_EQ(types.at("blk.1.attn_v.weight"), DType::Q5_K);
  EXPECT_EQ(types.at("blk.2.attn_v.weight"), DType::Q4_K);
  EXPECT_EQ(types.at("blk.1.ffn_down.weight"), DType::Q5_K);  // i < n / 16
  EXPECT_EQ(types.at("blk.2.ffn_down.weight"), DType::Q4_K);  // not falcon: Q4_K
  EXPECT_EQ(types.at("blk.5.attn_output.weight"), DType::Q4_K);
  EXPECT_EQ(types.at("blk.5.attn_q.weight"), DType::Q3_K);
  // IQ4_XS with n_head / n_head_kv = 4: attn_v Q5_K; ffn_down Q5_K in the first eighth
  types = choose("IQ4_XS", llama(n, true), llama_model(n, 32, 8));
  EXPECT_EQ(types.at("blk.9.attn_v.weight"), DType::Q5_K);
  EXPECT_EQ(types.at("blk.3.ffn_down.weight"), DType::Q5_K);
  EXPECT_EQ(types.at("blk.4.ffn_down.weight"), DType::IQ4_XS);
  // Q2_K: attn_v Q4_K with GQA >= 4, Q3_K without; ffn_down and attn_output Q3_K
  types = choose("Q2_K", llama(4, true), llama_model(4, 32, 8));
  EXPECT_EQ(types.at("blk.0.attn_v.weight"), DType::Q4_K);
  EXPECT_EQ(types.at("blk.0.ffn_down.weight"), DType::Q3_K);
  EXPECT_EQ(types.at("blk.0.attn_output.weight"), DType::Q3_K);
  types = choose("Q2_K", llama(4, true), llama_model(4));
  EXPECT_EQ(types.at("blk.0.attn_v.weight"), DType::Q3_K);
}

TEST(QuantizeMix, EightExpertsAndMxfp4) {
  std::vector<gguf::TensorInfo> ts = llama(2, true);
  ts.push_back(tensor("blk.0.ffn_up_exps.weight", {256, 512, 8}));
  ts.push_back(tensor("blk.0.ffn_gate_inp.weight", {256, 8}, DType::F32));
  const MixModel moe{"llama", 2, 8, 8, 8};
  auto types = choose("Q4_K_M", ts, moe);
  EXPECT_EQ(types.at("blk.0.attn_v.weight"), DType::Q8_0);
  EXPECT_EQ(types.at("blk.1.attn_k.weight"), DType::Q8_0);
  EXPECT_EQ(types.at("blk.0.attn_output.weight"), DType::Q5_K);
  EXPECT_EQ(types.at("blk.0.ffn_gate_inp.weight"), DType::F32);  // routers stay
  types = choose("MXFP4_MOE", ts, moe);
  EXPECT_EQ(types.at("blk.0.ffn_up_exps.weight"), DType::MXFP4);
  EXPECT_EQ(types.at("blk.0.attn_q.weight"), DType::Q8_0);
  EXPECT_EQ(types.at("output.weight"), DType::Q8_0);
}

// gpt-oss: the expert tensors are MXFP4 in every quantized mix (as published gpt-oss files);
// the rest follows the mix; --pure and the float types put everything in the requested type.
TEST(QuantizeMix, GptOssExpertsStayMxfp4) {
  std::vector<gguf::TensorInfo> ts = llama(2, true);
  for (int i = 0; i < 2; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    for (const char* n : {"ffn_gate_exps", "ffn_up_exps"}) ts.push_back(tensor(b + n + ".weight", {256, 512, 4}));
    ts.push_back(tensor(b + "ffn_down_exps.weight", {512, 256, 4}));
    ts.push_back(tensor(b + "ffn_up_exps.bias", {512, 4}, DType::F32));
    ts.push_back(tensor(b + "ffn_gate_inp.weight", {256, 4}, DType::F32));
  }
  const MixModel oss{"gpt-oss", 2, 8, 2, 4};
  for (const char* type : {"Q4_K_M", "Q8_0", "Q4_0", "Q3_K_S", "IQ4_XS", "MXFP4_MOE"}) {
    SCOPED_TRACE(type);
    const auto types = choose(type, ts, oss);
    for (const char* n : {"blk.0.ffn_gate_exps.weight", "blk.1.ffn_up_exps.weight", "blk.1.ffn_down_exps.weight"})
      EXPECT_EQ(types.at(n), DType::MXFP4) << n;
    EXPECT_EQ(types.at("blk.0.ffn_up_exps.bias"), DType::F32);
    EXPECT_EQ(types.at("blk.0.ffn_gate_inp.weight"), DType::F32);
  }
  auto types = choose("Q4_K_M", ts, oss);
  EXPECT_EQ(types.at("blk.0.attn_q.weight"), DType::Q4_K);
  EXPECT_EQ(types.at("blk.1.attn_v.weight"), DType::Q6_K);  // the mix's own rules for the rest (last layer)
  EXPECT_EQ(types.at("output.weight"), DType::Q6_K);
  types = choose("Q8_0", ts, oss);
  EXPECT_EQ(types.at("blk.1.ffn_gate.weight"), DType::Q8_0);
  QuantizeOptions pure;
  pure.pure = true;
  types = choose("Q4_0", ts, oss, pure);  // --pure: no mix, the experts too
  EXPECT_EQ(types.at("blk.0.ffn_up_exps.weight"), DType::Q4_0);
  types = choose("F16", ts, oss);
  EXPECT_EQ(types.at("blk.0.ffn_up_exps.weight"), DType::F16);
  // other MoE architectures keep the mix's type for their experts
  types = choose("Q4_K_M", ts, MixModel{"qwen3moe", 2, 8, 2, 4});
  EXPECT_EQ(types.at("blk.0.ffn_up_exps.weight"), DType::Q4_K);
}

TEST(QuantizeMix, Fallbacks) {
  const auto ts = llama(2, true, 96);  // width 96: no 256-element blocks; 2 * 96 = 192 neither
  int n_fallback = 0;
  auto types = choose("Q4_K_M", ts, llama_model(2), {}, &n_fallback);
  EXPECT_EQ(types.at("blk.0.attn_q.weight"), DType::Q5_0);  // Q4_K -> Q5_0
  EXPECT_EQ(types.at("blk.0.attn_v.weight"), DType::Q5_0);
  EXPECT_EQ(types.at("blk.1.attn_v.weight"), DType::Q8_0);  // (last layer: Q6_K) -> Q8_0
  EXPECT_EQ(types.at("output.weight"), DType::Q8_0);        // 96 % 256: Q8_0 by the output rule
  EXPECT_EQ(n_fallback, 2 * 7 + 1);                         // every block tensor and token_embd
  types = choose("IQ4_XS", ts, llama_model(2));
  EXPECT_EQ(types.at("blk.1.ffn_up.weight"), DType::IQ4_NL);
  types = choose("IQ2_M", ts, llama_model(2));  // every i-quant falls back to IQ4_NL
  EXPECT_EQ(types.at("blk.1.ffn_up.weight"), DType::IQ4_NL);
  QuantizeOptions o;
  o.output_tensor_type = DType::F16;  // (Q8_0 would have no fallback for 80 columns)
  types = choose("Q3_K_S", llama(2, true, 80), llama_model(2), o);  // 80 % 32 != 0 either: F16
  EXPECT_EQ(types.at("blk.1.ffn_up.weight"), DType::F16);
  EXPECT_EQ(types.at("token_embd.weight"), DType::F16);
  // types without a fallback: an error naming the tensor (as llama.cpp)
  EXPECT_THROW(choose("Q4_0", llama(2, true, 80), llama_model(2)), Error);
}

}  // namespace
}  // namespace loom
