// `loom-gguf new`: random-init model files. Every row of every weight has its own RNG stream
// (seeded from the run seed, the tensor index and the row), so the bytes do not depend on the
// thread count; header-only files never generate data at all.
#include "loom/model/model_file.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <system_error>
#include <thread>
#include <vector>

#include "loom/core/error.h"
#include "loom/core/thread_pool.h"
#include "loom/gguf/gguf.h"

namespace loom {

// ---- RNG ----------------------------------------------------------------------------------

NormalRng::NormalRng(uint64_t seed) : rng_(seed) {}

float NormalRng::next() {
  if (have_spare_) {
    have_spare_ = false;
    return spare_;
  }
  constexpr double kTwoPi = 6.283185307179586476925;
  // u1 in (0, 1], u2 in [0, 1), 53 random bits each
  const double u1 = (double)((rng_() >> 11) + 1) * 0x1.0p-53;
  const double u2 = (double)(rng_() >> 11) * 0x1.0p-53;
  const double r = std::sqrt(-2.0 * std::log(u1));
  spare_ = (float)(r * std::sin(kTwoPi * u2));
  have_spare_ = true;
  return (float)(r * std::cos(kTwoPi * u2));
}

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t row_seed(uint64_t seed, uint64_t tensor, uint64_t row) {
  return splitmix64(splitmix64(splitmix64(seed) ^ tensor) ^ row);
}

bool use_more_bits(int64_t i, int64_t n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

DType fit_block(DType type, int64_t ne0) {
  while (ne0 % dtype_info(type).block_size != 0) {
    switch (type) {
      case DType::Q4_K: type = DType::Q4_0; break;
      case DType::Q6_K: type = DType::Q8_0; break;
      default: type = DType::F16; break;
    }
  }
  return type;
}

// Runs fn(first, last) over [0, n) split across threads; rethrows the first error.
template <typename Fn>
void parallel_rows(int64_t n, Fn fn) {
  const int64_t n_threads = std::clamp<int64_t>((int64_t)std::thread::hardware_concurrency(), 1, 16);
  const int64_t per = std::max<int64_t>(1, (n + n_threads - 1) / n_threads);
  if (n_threads == 1 || n <= 1) {
    fn(0, n);
    return;
  }
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors((size_t)n_threads);
  auto run = [&](int64_t t) {
    try {
      fn(t * per, std::min(n, (t + 1) * per));
    } catch (...) {
      errors[(size_t)t] = std::current_exception();
    }
  };
  for (int64_t t = 0; t < n_threads && t * per < n; ++t) {
    try {
      threads.emplace_back([&, t] {
        unpin_current_thread();  // not on the one CPU a pinned caller may have
        run(t);
      });
    } catch (const std::system_error&) {
      run(t);  // no thread to be had (ulimit): this share on the calling thread
    }
  }
  for (std::thread& th : threads) th.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

bool is_rope_factors(TensorRole role) {
  return role == TensorRole::rope_freqs || role == TensorRole::rope_factors_long ||
         role == TensorRole::rope_factors_short;
}

// The divisor of RoPE pair i: Llama 3.1's (factor 8, low/high frequency factors 1 and 4 over an
// original 8192 context: 1 for short wavelengths, 8 for long ones, smooth between), or
// Phi-3-like long (1 -> 4) and short (1 -> 1.1) ramps.
float rope_factor(TensorRole role, const HParams& hp, int64_t i) {
  const int64_t half = hp.rot_dims() / 2;
  if (role == TensorRole::rope_factors_long) return 1.0f + 3.0f * (float)i / (float)half;
  if (role == TensorRole::rope_factors_short) return 1.0f + 0.1f * (float)i / (float)half;
  constexpr double kFactor = 8, kLow = 1, kHigh = 4, kOrig = 8192, kTwoPi = 6.283185307179586476925;
  const double wavelen = kTwoPi / std::pow((double)hp.rope_theta, -2.0 * (double)i / (double)hp.rot_dims());
  if (wavelen < kOrig / kHigh) return 1.0f;
  if (wavelen > kOrig / kLow) return (float)kFactor;
  const double smooth = (kOrig / wavelen - kLow) / (kHigh - kLow);
  return (float)(1.0 / ((1.0 - smooth) / kFactor + smooth));
}

}  // namespace

// ---- types --------------------------------------------------------------------------------

DType tensor_type_for(const TensorSpec& t, const HParams& hp, DType requested) {
  if (tensor_role_is_vector(t.role) || t.role == TensorRole::ffn_gate_inp || t.n_dims < 2) return DType::F32;
  DType type = requested;
  if (requested == DType::Q4_K) {
    const bool tied_embd = t.role == TensorRole::token_embd && hp.tied_embeddings;
    const bool more_bits_layer = (t.role == TensorRole::attn_v || t.role == TensorRole::ffn_down ||
                                  t.role == TensorRole::ffn_down_exps) &&
                                 use_more_bits(t.layer, hp.n_layer);
    if (t.role == TensorRole::output || tied_embd || more_bits_layer) type = DType::Q6_K;
  }
  return fit_block(type, t.ne[0]);
}

uint32_t file_type_for(DType requested) {
  switch (requested) {
    case DType::F32: return 0;
    case DType::F16: return 1;
    case DType::Q4_0: return 2;
    case DType::Q8_0: return 7;
    case DType::Q4_K: return 15;
    case DType::Q6_K: return 18;
    case DType::BF16: return 32;
    case DType::I32:  // not a weight type; the rest are written by `loom-gguf quantize`, not `new`
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q5_K:
    case DType::IQ4_NL:
    case DType::IQ4_XS:
    case DType::IQ2_XXS:
    case DType::IQ2_XS:
    case DType::IQ2_S:
    case DType::IQ3_XXS:
    case DType::IQ3_S:
    case DType::IQ1_S:
    case DType::IQ1_M:
    case DType::MXFP4: break;
  }
  fail(ErrorKind::usage, "--type {}: not a weight type (use f32, f16, bf16, q8_0, q4_0, q4_k or q6_k)",
       dtype_name(requested));
}

// ---- vocabularies -------------------------------------------------------------------------

std::string byte_to_unicode(uint8_t b) {
  // Printable bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for themselves; the other 68 map, in
  // byte order, to U+0100 onwards.
  auto printable = [](int c) { return (c >= 0x21 && c <= 0x7e) || (c >= 0xa1 && c <= 0xac) || (c >= 0xae && c <= 0xff); };
  uint32_t cp = b;
  if (!printable(b)) {
    int n = 0;
    for (int c = 0; c < b; ++c)
      if (!printable(c)) ++n;
    cp = 256 + (uint32_t)n;
  }
  std::string s;
  if (cp < 0x80) {
    s += (char)cp;
  } else {  // all code points here are below U+0800: two UTF-8 bytes
    s += (char)(0xc0 | (cp >> 6));
    s += (char)(0x80 | (cp & 0x3f));
  }
  return s;
}

void write_byte_vocab(gguf::Writer& w, int64_t n_vocab) {
  using gguf::Value;
  LOOM_CHECK(n_vocab >= 257, usage,
             "n_vocab = {} is too small for the byte-level vocabulary (256 bytes + <|endoftext|>): use --n-vocab 257 or more, or --vocab FILE",
             n_vocab);
  std::vector<std::string> tokens;
  std::vector<int64_t> types;
  tokens.reserve((size_t)n_vocab);
  types.reserve((size_t)n_vocab);
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(byte_to_unicode((uint8_t)b));
    types.push_back(1);  // normal
  }
  tokens.push_back("<|endoftext|>");
  types.push_back(3);  // control
  for (int64_t k = 0; (int64_t)tokens.size() < n_vocab; ++k) {
    tokens.push_back(fmt::format("<|extra_{}|>", k));
    types.push_back(5);  // unused
  }
  w.set("tokenizer.ggml.model", Value::string("gpt2"));
  w.set("tokenizer.ggml.pre", Value::string("gpt-2"));  // llama.cpp's name for the GPT-2 regex
  w.set("tokenizer.ggml.tokens", Value::string_array(std::move(tokens)));
  w.set("tokenizer.ggml.token_type", Value::i32_array(std::move(types)));
  w.set("tokenizer.ggml.merges", Value::string_array({}));
  w.set("tokenizer.ggml.bos_token_id", Value::u32(256));
  w.set("tokenizer.ggml.eos_token_id", Value::u32(256));
  w.set("tokenizer.ggml.add_bos_token", Value::boolean(true));
  w.set("tokenizer.ggml.add_eos_token", Value::boolean(false));
}

int64_t graft_vocab(gguf::Writer& w, const gguf::File& vocab) {
  const gguf::Value* tokens = vocab.find("tokenizer.ggml.tokens");
  LOOM_CHECK(tokens && tokens->type == gguf::ValueType::ARRAY && tokens->array_type == gguf::ValueType::STRING,
             invalid_input, "{}: no tokenizer.ggml.tokens string array (not a vocabulary file)", vocab.path());
  LOOM_CHECK(vocab.find("tokenizer.ggml.model"), invalid_input, "{}: no tokenizer.ggml.model", vocab.path());
  for (const auto& [key, value] : vocab.metadata())
    if (key.rfind("tokenizer.", 0) == 0) w.set(key, value);
  return (int64_t)tokens->array_size();
}

// ---- the model ----------------------------------------------------------------------------

NewModelResult make_random_model(const NewModelOptions& opts) {
  using gguf::Value;
  LOOM_CHECK(!opts.output.empty(), usage, "no output file (-o)");
  (void)file_type_for(opts.type);  // rejects I32 with a usage error
  HParams hp = opts.hparams;
  gguf::Writer w;
  std::unique_ptr<gguf::File> vocab;
  if (!opts.vocab_path.empty()) {
    vocab = gguf::File::open(opts.vocab_path);
    const gguf::Value* tokens = vocab->find("tokenizer.ggml.tokens");
    if (tokens && tokens->type == gguf::ValueType::ARRAY) hp.n_vocab = (int64_t)tokens->array_size();
  }
  validate_hparams(hp);
  write_hparams(w, hp);
  w.set("general.name", Value::string(opts.name.empty() ? std::string(arch_name(hp.arch)) : opts.name));
  w.set("general.file_type", Value::u32(file_type_for(opts.type)));
  if (dtype_info(opts.type).is_quantized) w.set("general.quantization_version", Value::u32(2));
  if (vocab) graft_vocab(w, *vocab);
  else write_byte_vocab(w, hp.n_vocab);

  NewModelResult result;
  result.hparams = hp;
  std::vector<TensorSpec> specs = arch_tensors(hp);
  std::erase_if(specs, [](const TensorSpec& t) { return t.optional; });
  for (size_t ti = 0; ti < specs.size(); ++ti) {
    const TensorSpec& t = specs[ti];
    const DType type = tensor_type_for(t, hp, opts.type);
    result.n_params += t.nelements();
    const int64_t ne0 = t.ne[0];
    if (tensor_role_is_norm(t.role) || is_rope_factors(t.role)) {  // norms 1, RoPE divisors by formula
      const TensorRole role = t.role;
      const float jitter = opts.norm_jitter;
      const uint64_t seed = opts.seed;
      w.add_tensor_rows(t.name, type, t.n_dims, t.ne, [=](uint8_t* dst, int64_t row0, int64_t n_rows) {
        auto* f = reinterpret_cast<float*>(dst);
        for (int64_t r = 0; r < n_rows; ++r) {
          NormalRng rng(row_seed(seed, ti, (uint64_t)(row0 + r)));
          for (int64_t i = 0; i < ne0; ++i)
            f[r * ne0 + i] = is_rope_factors(role) ? rope_factor(role, hp, r * ne0 + i) : 1.0f + jitter * rng.next();
        }
      });
      continue;
    }
    // biases small like the weights; sinks (logits) near 1; the router's selection bias as wide as
    // the spread of its gates, so that it changes which experts are picked
    const float sigma = t.role == TensorRole::attn_sinks ? 1.0f : t.role == TensorRole::ffn_exp_probs_b ? 0.1f : 0.02f;
    const uint64_t seed = opts.seed;
    const DTypeInfo& info = dtype_info(type);
    const size_t row_bytes = row_size(type, ne0);
    w.add_tensor_rows(t.name, type, t.n_dims, t.ne, [=, &info](uint8_t* dst, int64_t row0, int64_t n_rows) {
      parallel_rows(n_rows, [&](int64_t first, int64_t last) {
        std::vector<float> row((size_t)ne0);
        for (int64_t r = first; r < last; ++r) {
          NormalRng rng(row_seed(seed, ti, (uint64_t)(row0 + r)));
          for (float& x : row) x = sigma * rng.next();
          info.from_float(row.data(), dst + (size_t)r * row_bytes, ne0);
        }
      });
    });
  }
  result.n_tensors = (int64_t)specs.size();
  w.write(opts.output, opts.header_only);
  result.file_size = w.file_size();
  for (const TensorSpec& t : specs) result.tensor_bytes += gguf::tensor_nbytes(tensor_type_for(t, hp, opts.type), t.ne, t.name);
  return result;
}

}  // namespace loom
