// loom-gguf: inspect GGUF files (info), make random-init or header-only models (new), convert
// a model's weights to another type (quantize), and tokenize text with a file's vocabulary
// (tokenize). Flags per docs/CLI.md; the work is in lib/model.
#include "loom/tools/main.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "info.h"
#include "loom/core/error.h"
#include "loom/gguf/gguf.h"
#include "loom/model/arch.h"
#include "loom/model/control_vector.h"
#include "loom/model/imatrix.h"
#include "loom/model/lora.h"
#include "loom/model/model_file.h"
#include "loom/model/quantize.h"
#include "loom/tokenizer/tokenizer.h"

namespace {

struct Options {
  // info
  std::string info_file;
  bool json = false;
  // tokenize
  std::string tok_model;
  std::string tok_prompt;
  bool ids = false;
  // new
  std::string arch = "llama";
  std::string preset = "tiny";
  std::string type = "f32";
  std::string vocab;
  std::string output;
  bool header_only = false;
  bool rope_freqs = false;
  bool tied = false;
  uint64_t seed = 42;
  // quantize
  loom::QuantizeOptions q;
  std::string q_output_type, q_embd_type, q_imatrix;
  std::vector<std::string> q_include, q_exclude;
  loom::ImportanceMatrix q_matrix;
  // new-lora
  loom::NewLoraOptions lora;
  std::string lora_type = "f32";
  // new-control-vector
  std::string cvec_base, cvec_output;
  float cvec_sigma = 0.05f;
  int64_t n_layer = 0, n_embd = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_rot = 0, n_ff = 0, n_expert = 0,
          n_expert_used = 0, n_ff_exp = 0, n_vocab = 0, n_ctx_train = 0, n_expert_shared = 0, n_dense_lead = 0,
          n_nextn = 0, n_swa = 0, n_ff_shared = 0;
  bool qk_norm = false;
};

int run_info(const Options& o) {
  auto f = loom::gguf::File::open(o.info_file);
  if (o.json) loom::gguf_tool::print_info_json(*f, stdout);
  else loom::gguf_tool::print_info_text(*f, stdout);
  return 0;
}

int run_tokenize(const Options& o) {
  auto f = loom::gguf::File::open(o.tok_model);
  auto tok = loom::Tokenizer::from_gguf(*f);
  const std::vector<int32_t> ids = tok->tokenize(o.tok_prompt, /*add_special=*/false, /*parse_special=*/false);
  if (o.json) {
    nlohmann::json pieces = nlohmann::json::array();
    for (int32_t id : ids) pieces.push_back(tok->token_to_piece(id));
    const nlohmann::json j = {{"tokens", ids}, {"pieces", pieces}, {"n_tokens", ids.size()}};
    fmt::print("{}\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  } else if (o.ids) {
    std::string line;
    for (size_t k = 0; k < ids.size(); ++k) line += fmt::format("{}{}", k ? " " : "", ids[k]);
    fmt::print("{}\n", line);
  } else {
    for (int32_t id : ids) fmt::print("{:>6} -> '{}'\n", id, tok->token_to_piece(id));
  }
  return 0;
}

int run_new(const Options& o, const CLI::App& cmd) {
  const std::optional<loom::Arch> arch = loom::arch_from_name(o.arch);
  LOOM_CHECK(arch.has_value(), usage, "--arch {}: unknown architecture ({})", o.arch, loom::arch_names());
  LOOM_CHECK(!o.rope_freqs || loom::arch_reads_rope_freqs(*arch), usage,
             "--rope-freqs: only llama, mistral3 and exaone4 files have rope_freqs.weight");
  const std::optional<loom::DType> type = loom::dtype_from_name(o.type);
  LOOM_CHECK(type.has_value() && *type != loom::DType::I32, usage,
             "--type {}: unknown weight type (f32, f16, bf16, q8_0, q4_0, q4_K, q6_K)", o.type);
  loom::NewModelOptions opts;
  opts.hparams = loom::preset_hparams(*arch, o.preset);
  loom::HParams& hp = opts.hparams;
  auto take = [&](const char* flag, int64_t value, int64_t& field) {
    if (cmd.count(flag) > 0) field = value;
  };
  take("--n-layer", o.n_layer, hp.n_layer);
  take("--n-embd", o.n_embd, hp.n_embd);
  take("--n-head", o.n_head, hp.n_head);
  take("--n-head-kv", o.n_head_kv, hp.n_head_kv);
  take("--n-ff", o.n_ff, hp.n_ff);
  take("--n-expert", o.n_expert, hp.n_expert);
  take("--n-expert-used", o.n_expert_used, hp.n_expert_used);
  take("--n-ff-exp", o.n_ff_exp, hp.n_ff_exp);
  take("--n-expert-shared", o.n_expert_shared, hp.n_expert_shared);
  take("--n-ff-shared", o.n_ff_shared, hp.n_ff_shared);
  if (*arch == loom::Arch::granitemoe || *arch == loom::Arch::ernie4_5_moe) hp.n_expert_shared = hp.n_ff_shared > 0;
  take("--n-dense-lead", o.n_dense_lead, hp.n_layer_dense_lead);
  take("--n-nextn", o.n_nextn, hp.n_layer_nextn);
  if (o.qk_norm) hp.qk_norm = true;
  if (cmd.count("--n-swa") > 0) {  // the window; olmo2 gets OLMo 3's pattern with it, exaone4 EXAONE 4.0 32B's
    const bool exaone = *arch == loom::Arch::exaone4;
    LOOM_CHECK(o.n_swa > 0 && (hp.swa_period > 0 || *arch == loom::Arch::olmo2 || exaone), usage,
               "--n-swa {}: a window of at least 1 position, in gemma2, gemma3, gpt-oss, cohere2, olmo2 or exaone4",
               o.n_swa);
    LOOM_CHECK(!exaone || hp.n_layer == 64, usage,
               "--n-swa: llama.cpp applies exaone4's window with 64 layers only (give --n-layer 64)");
    hp.n_swa = o.n_swa;
    if (*arch == loom::Arch::olmo2 || exaone) hp.swa_period = 4;
  }
  take("--n-vocab", o.n_vocab, hp.n_vocab);
  take("--n-ctx-train", o.n_ctx_train, hp.n_ctx_train);
  if (cmd.count("--n-ctx-train") > 0 && hp.n_ctx_orig > 0) loom::set_original_context(hp);
  if (o.rope_freqs) {  // Llama 3: its RoPE base and the per-pair divisors of its long-context scaling
    hp.rope_freqs = true;
    if (*arch == loom::Arch::llama) hp.rope_theta = 500000.0f;
  }
  if (o.tied) hp.tied_embeddings = true;                // no output.weight: token_embd is the output matrix too
  if (loom::arch_experts_optional(*arch) && hp.n_expert > 0) {  // Mixtral: experts as wide as n_ff
    hp.n_ff_exp = hp.n_ff;
    if (cmd.count("--n-expert-used") == 0) hp.n_expert_used = std::min<int64_t>(2, hp.n_expert);
  }
  if (loom::arch_is_moe(*arch) && loom::arch_experts_n_ff_wide(*arch)) hp.n_ff_exp = hp.n_ff;  // granitemoe, olmoe
  if (*arch == loom::Arch::llama4) {  // the shared expert as wide as a routed one; q/k norms by the expert count
    hp.n_ff_shared = hp.n_ff_exp;
    loom::set_llama4_fixed(hp);
  }
  if (*arch == loom::Arch::olmoe && cmd.count("--n-head-kv") == 0) hp.n_head_kv = hp.n_head;
  if (cmd.count("--head-dim") > 0) {
    hp.head_dim = o.head_dim;
  } else if (cmd.count("--n-embd") > 0 || cmd.count("--n-head") > 0) {
    LOOM_CHECK(hp.n_head > 0 && hp.n_embd % hp.n_head == 0, usage,
               "--n-embd {} is not a multiple of --n-head {} (or give --head-dim)", hp.n_embd, hp.n_head);
    hp.head_dim = hp.n_embd / hp.n_head;
  }
  if (*arch == loom::Arch::glm4moe || *arch == loom::Arch::glm4) hp.n_rot = hp.head_dim / 2;  // half of each head
  take("--n-rot", o.n_rot, hp.n_rot);
  if (hp.n_rot == hp.head_dim) hp.n_rot = 0;
  try {
    loom::validate_hparams(hp);
  } catch (const loom::Error& e) {
    throw loom::Error(loom::ErrorKind::usage, fmt::format("bad model shape: {}", e.what()));
  }
  opts.type = *type;
  opts.vocab_path = o.vocab;
  opts.header_only = o.header_only;
  opts.seed = o.seed;
  opts.output = o.output;
  opts.name = fmt::format("{}-{}", o.arch, o.preset);
  const auto t0 = std::chrono::steady_clock::now();
  const loom::NewModelResult r = loom::make_random_model(opts);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  fmt::print("wrote {}: {} {}, {} layers, {} params, {}, tensors {}, file {}{} in {:.0f} ms\n", o.output, o.arch,
             o.preset, r.hparams.n_layer, loom::gguf_tool::format_count((double)r.n_params), o.type,
             loom::gguf_tool::format_bytes((double)r.tensor_bytes), loom::gguf_tool::format_bytes((double)r.file_size),
             o.header_only ? " (header-only, sparse)" : "", ms);
  return 0;
}

int run_new_lora(const Options& o) {
  loom::NewLoraOptions opts = o.lora;
  const std::optional<loom::DType> type = loom::dtype_from_name(o.lora_type);
  LOOM_CHECK(type.has_value(), usage, "--type {}: expected f32, f16 or bf16", o.lora_type);
  opts.type = *type;
  const loom::NewLoraResult r = loom::make_random_lora(opts);
  fmt::print("wrote {}: {} LoRA pairs of rank {} (alpha {}), {}, file {}\n", opts.output, r.n_pairs, opts.rank,
             opts.alpha, o.lora_type, loom::gguf_tool::format_bytes((double)r.file_size));
  return 0;
}

int run_quantize(Options& o) {
  auto type_flag = [](const std::string& name, const char* flag) -> std::optional<loom::DType> {
    if (name.empty()) return std::nullopt;
    const std::optional<loom::DType> t = loom::dtype_from_name(name);
    LOOM_CHECK(t && *t != loom::DType::I32, usage, "{} {}: unknown tensor type", flag, name);
    return t;
  };
  o.q.output_tensor_type = type_flag(o.q_output_type, "--output-tensor-type");
  o.q.token_embedding_type = type_flag(o.q_embd_type, "--token-embedding-type");
  LOOM_CHECK(o.q_include.empty() || o.q_exclude.empty(), usage,
             "--include-weights and --exclude-weights cannot be used together");
  LOOM_CHECK(!o.q_imatrix.empty() || (o.q_include.empty() && o.q_exclude.empty()), usage,
             "--include-weights / --exclude-weights need --imatrix");
  if (!o.q_imatrix.empty()) {
    o.q_matrix = loom::read_importance_matrix(o.q_imatrix);
    const size_t n_read = o.q_matrix.entries.size();
    loom::filter_importance_matrix(o.q_matrix, o.q_include, o.q_exclude);
    if (o.q.log)
      std::fprintf(o.q.log, "importance matrix %s: %zu of %zu entries used, computed on %lld chunks\n",
                   o.q_imatrix.c_str(), o.q_matrix.entries.size(), n_read, (long long)o.q_matrix.chunks);
    o.q.imatrix = &o.q_matrix;
  }
  return loom::quantize_model(o.q).exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"loom-gguf: inspect, create and tokenize with GGUF model files"};
  app.require_subcommand(1);
  Options o;

  CLI::App* info = app.add_subcommand("info", "print a GGUF file's metadata and tensors");
  info->add_option("FILE", o.info_file, "GGUF file")->required();
  info->add_flag("--json", o.json, "machine-readable output");

  CLI::App* tok = app.add_subcommand("tokenize", "tokenize text with a file's vocabulary (no special tokens)");
  tok->add_option("-m,--model", o.tok_model, "GGUF file with a tokenizer")->required();
  tok->add_option("-p,--prompt", o.tok_prompt, "text to tokenize")->required();
  tok->add_flag("--ids", o.ids, "print only the ids, space separated");
  tok->add_flag("--json", o.json, "{\"tokens\":[ids], \"pieces\":[text], \"n_tokens\"} on stdout");

  CLI::App* nw = app.add_subcommand("new", "write a random-init (or header-only) model");
  nw->add_option(
        "--arch", o.arch,
        "llama | qwen2 | qwen2moe | qwen3 | qwen3moe | gemma | gemma2 | gemma3 | phi3 | gpt-oss | granite | "
        "granitemoe | glm4 | glm4moe | smollm3 | command-r | cohere2 | olmo2 | olmoe | ernie4_5 | ernie4_5-moe | "
        "exaone4 | seed_oss")
      ->required();
  nw->add_option(
        "--preset", o.preset,
        "tiny | small | llama-8b | llama-70b | qwen3-8b | qwen3-30b-a3b | gemma3-27b | gpt-oss-20b | glm-4.5-air")
      ->capture_default_str();
  nw->add_option("--n-layer", o.n_layer, "layers");
  nw->add_option("--n-embd", o.n_embd, "embedding width");
  nw->add_option("--n-head", o.n_head, "attention heads");
  nw->add_option("--n-head-kv", o.n_head_kv, "key/value heads");
  nw->add_option("--head-dim", o.head_dim, "head size (default n_embd / n_head when those change)");
  nw->add_option("--n-rot", o.n_rot, "dims rotated per head (rope.dimension_count; default the head size)");
  nw->add_option("--n-ff", o.n_ff, "feed-forward width");
  nw->add_option("--n-expert", o.n_expert, "experts (qwen3moe, gpt-oss; a llama with experts is Mixtral-shaped)");
  nw->add_option("--n-expert-used", o.n_expert_used, "experts used per token");
  nw->add_option("--n-ff-exp", o.n_ff_exp, "expert feed-forward width (qwen2moe, qwen3moe, gpt-oss, glm4moe)");
  nw->add_option("--n-expert-shared", o.n_expert_shared, "glm4moe: shared experts (one FFN n_ff_exp times as wide)");
  nw->add_option("--n-ff-shared", o.n_ff_shared,
                 "qwen2moe, granitemoe, ernie4_5-moe: the shared expert's width (granitemoe: 0, none, by default)");
  nw->add_option("--n-dense-lead", o.n_dense_lead,
                 "glm4moe, ernie4_5-moe: leading dense layers (leading_dense_block_count)");
  nw->add_option("--n-nextn", o.n_nextn, "glm4moe: multi-token-prediction layers after the others (never run)");
  nw->add_flag("--qk-norm", o.qk_norm, "glm4moe: attn_q_norm / attn_k_norm (GLM-4.5; Air has none)");
  nw->add_option("--n-swa", o.n_swa,
                 "sliding window (attention.sliding_window); olmo2: OLMo 3's 3 local layers of 4 (with --n-layer "
                 "4+); exaone4: EXAONE 4.0 32B's (with --n-layer 64)");
  nw->add_flag("--rope-freqs", o.rope_freqs,
               "llama, exaone4: Llama 3's RoPE scaling (rope_freqs.weight; llama: RoPE base 500000)");
  nw->add_flag("--tied", o.tied,
               "no output.weight: token_embd is also the output matrix (Llama 3.2 1B/3B; gemma always)");
  nw->add_option("--n-vocab", o.n_vocab, "vocabulary size");
  nw->add_option("--n-ctx-train", o.n_ctx_train, "training context length");
  nw->add_option("--type", o.type, "f32 | f16 | bf16 | q8_0 | q4_0 | q4_K | q6_K")->capture_default_str();
  nw->add_option("--vocab", o.vocab, "take the tokenizer (and n_vocab) from this GGUF");
  nw->add_flag("--header-only", o.header_only, "metadata and tensor infos only; data left as a sparse hole");
  nw->add_option("--seed", o.seed, "RNG seed")->capture_default_str();
  nw->add_option("-o,--output", o.output, "output file")->required();

  CLI::App* nl = app.add_subcommand("new-lora", "write a random LoRA adapter for a model (llama.cpp's adapter layout)");
  nl->add_option("-m,--model", o.lora.base, "the base model")->required();
  nl->add_option("--targets", o.lora.targets, "roles to adapt, comma separated")->delimiter(',')->capture_default_str();
  nl->add_option("--rank", o.lora.rank, "rank r")->capture_default_str();
  nl->add_option("--alpha", o.lora.alpha, "adapter.lora.alpha (the product's factor is scale * alpha / r)")
      ->capture_default_str();
  nl->add_option("--type", o.lora_type, "f32 | f16 | bf16")->capture_default_str();
  nl->add_option("--sigma", o.lora.sigma, "standard deviation of A's and B's values")->capture_default_str();
  nl->add_option("--seed", o.lora.seed, "RNG seed")->capture_default_str();
  nl->add_option("-o,--output", o.lora.output, "output file")->required();

  CLI::App* ncv =
      app.add_subcommand("new-control-vector", "write random control vectors for a model (llama.cpp's layout)");
  ncv->add_option("-m,--model", o.cvec_base, "the base model")->required();
  ncv->add_option("--sigma", o.cvec_sigma, "standard deviation of the directions' values")->capture_default_str();
  ncv->add_option("--seed", o.seed, "RNG seed")->capture_default_str();
  ncv->add_option("-o,--output", o.cvec_output, "output file")->required();

  CLI::App* qz = app.add_subcommand("quantize", "write a model with its weights in another type, as llama-quantize");
  qz->add_option("IN", o.q.input, "input GGUF file")->required();
  qz->add_option("OUT", o.q.output, "output GGUF file (written via a temporary file + rename)")->required();
  qz->add_option("TYPE", o.q.type,
                 "Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K_S/M/L Q4_K_S/M Q5_K_S/M Q6_K IQ4_NL IQ4_XS "
                 "IQ1_S IQ1_M IQ2_XXS IQ2_XS IQ2_S IQ2_M IQ3_XXS IQ3_XS IQ3_S IQ3_M MXFP4_MOE "
                 "F16 BF16 F32")
      ->required();
  qz->add_option("NTHREADS", o.q.n_threads, "threads (default: all)");
  qz->add_flag("--pure", o.q.pure, "every tensor in TYPE's base type (no mix)");
  qz->add_option("--output-tensor-type", o.q_output_type, "type of output.weight");
  qz->add_option("--token-embedding-type", o.q_embd_type, "type of token_embd.weight");
  qz->add_flag("--allow-requantize", o.q.allow_requantize, "convert tensors that are already quantized");
  qz->add_option("--imatrix", o.q_imatrix, "importance matrix from llama-imatrix (GGUF or .dat)");
  qz->add_option("--include-weights", o.q_include,
                 "use the matrix only for tensors whose name contains this (repeatable)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  qz->add_option("--exclude-weights", o.q_exclude,
                 "do not use the matrix for tensors whose name contains this (repeatable)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);

  return loom::tools::run_main("gguf", argc, argv, app, [&]() -> int {
    if (qz->parsed()) return run_quantize(o);
    if (nl->parsed()) return run_new_lora(o);
    if (ncv->parsed()) {
      loom::make_random_control_vector(o.cvec_base, o.cvec_output, o.cvec_sigma, o.seed);
      fmt::print("wrote {}: control vectors for layers 1 and up\n", o.cvec_output);
      return 0;
    }
    if (info->parsed()) return run_info(o);
    if (tok->parsed()) return run_tokenize(o);
    return run_new(o, *nw);
  });
}
