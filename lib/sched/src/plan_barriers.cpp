// Barriers per split before and after the device's optimize_graph (streams that record barriers
// between dependent kernels, like Vulkan's, report them; others report none).
#include <unordered_map>

#include "loom/sched/describe.h"
#include "loom/sched/plan.h"

namespace loom::sched {

nlohmann::json split_barriers(const ExecutionPlan& p) {
  nlohmann::json out = nlohmann::json::array();
  std::unordered_map<int, std::unique_ptr<Stream>> streams;
  for (const Split& s : p.splits) {
    auto& stream = streams[s.device];
    if (!stream) stream = p.devices[(size_t)s.device]->create_stream();
    std::vector<Tensor*> nodes = s.nodes.empty() ? std::vector<Tensor*>{} : s.nodes[0];
    const int before = stream->count_barriers(nodes);
    if (before < 0) continue;
    stream->optimize_graph(nodes);
    out.push_back({{"split", s.id},
                   {"device", p.devices[(size_t)s.device]->name()},
                   {"nodes", nodes.size()},
                   {"barriers_before", before},
                   {"barriers_after", stream->count_barriers(nodes)}});
  }
  return out;
}

}  // namespace loom::sched
