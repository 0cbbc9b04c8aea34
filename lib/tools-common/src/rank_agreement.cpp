// --comm mpi: the ranks compare what they were asked to run before the first collective of the
// job, so a mismatch is one clear line and exit 2 on every rank instead of a hang in a
// collective or a run on mismatched weights.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "loom/core/hash.h"
#include "loom/backend/registry.h"
#include "loom/gguf/gguf.h"
#include "loom/tools/common.h"
#include "loom/tools/main.h"

namespace loom::tools {

namespace {

using Items = std::vector<std::pair<std::string, std::string>>;

std::string serialize(const Items& items) {
  std::string s;
  for (const auto& [k, v] : items) s += k + '\n' + v + '\n';
  return s;
}

Items parse(const std::string& s) {
  Items items;
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t k_end = s.find('\n', pos);
    const size_t v_end = s.find('\n', k_end + 1);
    if (k_end == std::string::npos || v_end == std::string::npos) break;
    items.emplace_back(s.substr(pos, k_end - pos), s.substr(k_end + 1, v_end - k_end - 1));
    pos = v_end + 1;
  }
  return items;
}

// A string every rank receives from rank `root` (length first: the sizes must match in MPI).
std::string broadcast_string(Communicator& world, std::string s, int root) {
  uint64_t n = s.size();
  world.broadcast(&n, sizeof(n), root);
  s.resize((size_t)n);
  if (n > 0) world.broadcast(s.data(), (size_t)n, root);
  return s;
}

const char* split_mode_name(SplitMode m) {
  switch (m) {
    case SplitMode::none: return "none";
    case SplitMode::layer: return "layer";
    case SplitMode::tensor: return "tensor";
  }
  return "?";
}

}  // namespace

std::string text_fingerprint(std::string_view text) {
  return fmt::format("{} bytes, checksum {:016x}", text.size(), hash_bytes(text.data(), text.size()));
}

int check_ranks_agree(const char* tool_name, const CommonOptions& o, const Items& extra) {
  if (o.comm != CommKind::mpi || !registry().collectives().mpi_world) return 0;
  Communicator& world = registry().collectives().mpi_world();
  if (world.size() <= 1) return 0;
  Items mine = {
      {"the model (-m)", fmt::format("{:016x}", gguf::File::open(o.model)->identity())},
      {"-c", std::to_string(o.n_ctx)},
      {"-b", std::to_string(o.n_batch)},
      {"-ub", std::to_string(o.n_ubatch)},
      {"-sm", split_mode_name(o.split_mode)},
      {"-ts", o.tensor_split},
      {"-fa", o.flash_attn},
      {"-ctk", o.cache_type_k},
      {"-ctv", o.cache_type_v},
      {"--reduce-bf16", std::to_string(o.reduce_bf16)},
      {"--override-kv", fmt::format("{}", fmt::join(o.kv_overrides, ","))},
      {"--rope-*, --yarn-*", fmt::format("{} {} {} {} {} {} {} {} {}", o.rope_scaling, o.rope_scale, o.rope_freq_base,
                                         o.rope_freq_scale, o.yarn_orig_ctx, o.yarn.ext_factor, o.yarn.attn_factor,
                                         o.yarn.beta_fast.value_or(-1), o.yarn.beta_slow.value_or(-1))}};
  mine.insert(mine.end(), extra.begin(), extra.end());
  const Items first = parse(broadcast_string(world, serialize(mine), 0));
  std::string problem;
  for (size_t i = 0; i < mine.size() && problem.empty(); ++i) {
    if (i >= first.size() || first[i].first != mine[i].first)
      problem = fmt::format("rank {} runs a different tool or version than rank 0", world.rank());
    else if (first[i].second != mine[i].second)
      problem = fmt::format("{} differs: '{}' on rank {}, '{}' on rank 0", mine[i].first, mine[i].second,
                            world.rank(), first[i].second);
  }
  if (problem.empty() && first.size() != mine.size())
    problem = fmt::format("rank {} runs a different tool or version than rank 0", world.rank());
  // Every rank learns every rank's verdict, so all of them stop (exit 2) without MPI_Abort.
  std::string reported;
  for (int r = 0; r < world.size(); ++r) {
    const std::string theirs = broadcast_string(world, problem, r);
    if (reported.empty()) reported = theirs;
  }
  if (reported.empty()) return 0;
  if (world.rank() == 0) print_error(tool_name, fmt::format("MPI ranks disagree: {}", reported).c_str());
  return 2;
}

}  // namespace loom::tools
