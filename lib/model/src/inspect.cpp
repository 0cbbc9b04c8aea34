// loom-split-inspect's report: the session's memory per device, then the plan of one step.
#include "loom/model/inspect.h"

#include <fmt/format.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "loom/graph/fusion.h"
#include "loom/sched/describe.h"

namespace loom {

namespace {
// Fused groups each split's device would run (the same matcher the CPU backend uses).
nlohmann::json fused_groups(const sched::ExecutionPlan& plan) {
  nlohmann::json out = nlohmann::json::array();
  if (std::getenv("LOOM_DISABLE_FUSION")) return out;
  for (const sched::Split& s : plan.splits) {
    if (s.nodes.empty()) continue;
    const Graph& g = plan.device_plans[(size_t)s.device].graph;
    for (const FusedGroup& f : find_fusions(g, s.nodes[0])) {
      nlohmann::json names = nlohmann::json::array();
      for (const Tensor* t : f.nodes) names.push_back(t->name);
      out.push_back({{"split", s.id}, {"device", plan.devices[(size_t)s.device]->name()},
                     {"kind", fusion_name(f.kind)}, {"nodes", names}});
    }
  }
  return out;
}
// -sm tensor: each member's ranges and weight bytes, and the AllReduce nodes of one step
// (the plan printed below is member 0's; every member's graph has the same shape).
nlohmann::json tensor_parallel_json(const Model& model, const Session::StepPlan& step) {
  const TpLayout& lay = model.tp_layout();
  nlohmann::json members = nlohmann::json::array();
  auto range = [](const tp::Range& r) { return nlohmann::json::array({r.begin, r.end}); };
  for (int r = 0; r < lay.n_members; ++r) {
    nlohmann::json m = {{"rank", r},
                        {"head_kv", range(lay.head_kv[(size_t)r])},
                        {"ff", range(lay.ff[(size_t)r])},
                        {"ff_exp", range(lay.ff_exp[(size_t)r])},
                        {"ff_shexp", range(lay.ff_shexp[(size_t)r])},
                        {"embd", range(lay.embd[(size_t)r])},
                        {"vocab", range(lay.vocab[(size_t)r])}};
    for (const auto& sh : model.tp_shards())
      if (sh->rank == r) {
        m["device"] = sh->device->name();
        m["weight_bytes"] = sh->bytes;
      }
    members.push_back(m);
  }
  int n_all_reduce = 0;
  for (const Tensor* t : step.graph->nodes()) n_all_reduce += t->op == OpKind::ALL_REDUCE ? 1 : 0;
  // "META": the group presents its members as one device (CLI.md's device name under -sm tensor)
  return {{"device", "META"},
          {"n_members", lay.n_members},
          {"row_granule", lay.row_granule},
          {"all_reduce_per_step", n_all_reduce},
          {"members", members}};
}

}  // namespace

std::string inspect_splits(Model& model, const SessionParams& params, bool decode, InspectFormat format) {
  Session session(model, params);
  Session::StepPlan step = session.plan_step(decode);
  const std::vector<MemoryBreakdown> mem = session.memory_breakdown();
  if (format == InspectFormat::dot) return sched::to_dot_grouped(step.plan);
  if (format == InspectFormat::dot_detail) return sched::to_dot(step.plan);
  if (format == InspectFormat::json) {
    nlohmann::json j = sched::to_json(step.plan);
    nlohmann::json devs = nlohmann::json::array();
    for (const MemoryBreakdown& m : mem)
      devs.push_back({{"name", m.device},
                      {"model_bytes", m.model_bytes},
                      {"context_bytes", m.context_bytes},
                      {"compute_bytes", m.compute_bytes}});
    j["devices"] = devs;
    j["phase"] = decode ? "decode" : "prompt";
    j["fused"] = fused_groups(step.plan);
    j["barriers"] = sched::split_barriers(step.plan);
    if (model.tensor_parallel()) j["tensor_parallel"] = tensor_parallel_json(model, step);
    return j.dump(2) + "\n";
  }
  std::string out = fmt::format("{} {} ({} layers), phase {}, n_ctx {}, ubatch {}\n", arch_name(model.hparams().arch),
                                model.type_name(), model.hparams().n_layer, decode ? "decode" : "prompt",
                                session.n_ctx(), decode ? 1 : std::min(params.n_ubatch, session.n_ctx()));
  out += "devices:\n";
  const nlohmann::json fused = fused_groups(step.plan);
  for (const MemoryBreakdown& m : mem)
    out += fmt::format("  {:<6}  model {:>10}  context {:>10}  compute {:>10}\n", m.device,
                       sched::format_bytes(m.model_bytes), sched::format_bytes(m.context_bytes),
                       sched::format_bytes(m.compute_bytes));
  if (model.tensor_parallel()) {
    const nlohmann::json tp = tensor_parallel_json(model, step);
    out += fmt::format("tensor parallel: META over {} members, {} AllReduce (row joins) per step; the plan below is member 0's\n",
                       tp["n_members"].get<int>(), tp["all_reduce_per_step"].get<int>());
    for (const auto& m : tp["members"])
      out += fmt::format("  member {}  {:<6}  kv heads {}-{}  ffn rows {}-{}  embd rows {}-{}  vocab rows {}-{}\n",
                         m["rank"].get<int>(), m.value("device", std::string("?")), m["head_kv"][0].get<int64_t>(),
                         m["head_kv"][1].get<int64_t>(), m["ff"][0].get<int64_t>(), m["ff"][1].get<int64_t>(),
                         m["embd"][0].get<int64_t>(), m["embd"][1].get<int64_t>(), m["vocab"][0].get<int64_t>(),
                         m["vocab"][1].get<int64_t>());
  }
  // the plan's own device list repeats what the lines above say with more detail: skip it
  const std::string plan_text = sched::describe(step.plan);
  size_t pos = 0;
  bool in_devices = false;
  while (pos < plan_text.size()) {
    size_t end = plan_text.find('\n', pos);
    if (end == std::string::npos) end = plan_text.size();
    const std::string line = plan_text.substr(pos, end - pos);
    if (line == "devices:") in_devices = true;
    else if (!line.empty() && line[0] != ' ') in_devices = false;
    if (!in_devices) out += line + "\n";
    pos = end + 1;
  }
  out += fmt::format("fused groups: {}\n", fused.size());
  for (const auto& f : fused)
    out += fmt::format("  {}  split {}  {}  {} nodes\n", f["kind"].get<std::string>(), f["split"].get<int>(),
                       f["device"].get<std::string>(), f["nodes"].size());
  for (const auto& b : sched::split_barriers(step.plan))
    out += fmt::format("barriers: split {}  {}  {} in graph order, {} after optimize_graph\n", b["split"].get<int>(),
                       b["device"].get<std::string>(), b["barriers_before"].get<int>(), b["barriers_after"].get<int>());
  return out;
}

}  // namespace loom
