// KL divergence of a model's next-token distributions from a base model's (llama-perplexity's
// --kl-divergence), over the base logits file a --perplexity run wrote with --kl-divergence-base.
//   The file is llama.cpp's, byte for byte, so either tool's file serves the other: "_logits_",
// n_ctx (u32), n_vocab (i32), n_chunk (i32), the n_chunk * n_ctx tokens of the text (i32), then
// per chunk, for each scored position (n_ctx / 2 .. n_ctx - 2), its log-probabilities: a float
// scale and a float offset, then n_vocab uint16 steps above the offset (rounded up to an even
// count). Log-probabilities more than 16 below the largest are stored as the offset.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "loom/core/files.h"
#include "loom/model/session.h"

namespace loom {

struct LogitsFileHeader {
  int64_t n_ctx = 0, n_vocab = 0, n_chunk = 0;
  int64_t n_scored() const { return n_ctx - 1 - n_ctx / 2; }          // positions per chunk
  int64_t row_values() const { return 2 * ((n_vocab + 1) / 2) + 4; }  // uint16 per position
};

// Reads and checks the header: the magic, sizes in range, the file's length exactly what they
// make, every token below n_vocab. Throws Error(invalid_input) naming the file.
LogitsFileHeader read_logits_header(const std::string& path, std::vector<int32_t>* tokens = nullptr);

// Writes the header and the n_chunk * n_ctx tokens that start a file (the rows follow).
void write_logits_header(AtomicFile& out, const LogitsFileHeader& h, std::span<const int32_t> tokens);

// One position's row of the file from its logits (n_vocab floats); returns its negative
// log-likelihood of `next`.
double encode_log_probs(std::span<const float> logits, int32_t next, std::span<uint16_t> row);

struct KlDivergenceResult {
  int64_t n_chunks = 0, count = 0;  // chunks and positions scored
  double ppl = 0, ppl_err = 0, ppl_base = 0, ppl_base_err = 0;
  double log_ratio = 0, log_ratio_err = 0, ppl_correlation = 0;  // ln(PPL(Q) / PPL(base))
  double ppl_ratio = 0, ppl_ratio_err = 0, ppl_diff = 0, ppl_diff_err = 0;
  double kld = 0, kld_err = 0;
  double p_diff = 0, p_diff_err = 0, p_diff_rms = 0, p_diff_rms_err = 0;
  double same_top = 0, same_top_err = 0;         // the share of positions whose most likely token agrees
  std::vector<float> kld_values, p_diff_values;  // per position, sorted
  double kld_percentile(double fraction) const;
  double p_diff_percentile(double fraction) const;
};

// Evaluates the file's chunks (BOS first when the vocab adds it) and sets every scored position's
// distribution against the base's. The session's context must be the file's n_ctx and its vocab
// the file's n_vocab (Error(invalid_input) otherwise). on_chunk sees the running result.
KlDivergenceResult kl_divergence(Session& session, const std::string& base_path,
                                 const std::function<void(const KlDivergenceResult&)>& on_chunk);

}  // namespace loom
