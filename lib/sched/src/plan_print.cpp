// Printing a plan: text for loom-split-inspect and golden tests, JSON, and Graphviz.
#include <algorithm>
#include <map>

#include "loom/sched/describe.h"
#include "plan_internal.h"

namespace loom::sched {

namespace {

const std::string& dev_name(const ExecutionPlan& p, int d) { return p.devices[(size_t)d]->name(); }

std::string job_name(const ExecutionPlan& p, int j) {
  const Job& job = p.jobs[(size_t)j];
  if (job.kind == JobKind::compute) return fmt::format("split {} ({})", job.index, dev_name(p, job.device));
  const CopyPlan& c = p.copies[(size_t)job.index];
  return fmt::format("copy {} ({} -> {})", c.tensor->name, dev_name(p, c.from), dev_name(p, c.to));
}

std::string input_list(const ExecutionPlan& p, const std::vector<int>& copies) {
  std::string out;
  for (int c : copies) {
    const CopyPlan& cp = p.copies[(size_t)c];
    out += fmt::format("{}{} <- {} ({})", out.empty() ? "" : ", ", cp.tensor->name, dev_name(p, cp.from),
                       format_bytes(cp.bytes));
  }
  return out;
}

}  // namespace

std::string format_bytes(size_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = (double)bytes / 1024.0;
  int u = 0;
  while (v >= 1024.0 && u < 3) v /= 1024.0, ++u;
  return fmt::format("{:.1f} {}", v, units[u]);
}

std::string describe(const ExecutionPlan& p) {
  std::string out = "devices:\n";
  for (size_t d = 0; d < p.devices.size(); ++d)
    out += fmt::format("  {}  {}  compute {}\n", p.devices[d]->name(), device_kind_name(p.devices[d]->kind()),
                       format_bytes(p.compute_bytes((int)d)));
  for (const Split& s : p.splits) {
    out += fmt::format("split {}  {}  nodes {}-{} ({})", s.id, dev_name(p, s.device), s.first_node,
                       s.first_node + s.n_nodes - 1, s.n_nodes);
    if (!s.inputs.empty()) out += "  inputs: " + input_list(p, s.inputs);
    if (!s.reused.empty()) {
      out += "  reused:";
      for (int c : s.reused) out += " " + p.copies[(size_t)c].tensor->name;
    }
    out += "\n";
  }
  out += "syncs:\n";
  for (size_t j = 0; j < p.jobs.size(); ++j) {
    if (p.jobs[j].waits.empty()) continue;
    out += fmt::format("  {} waits for", job_name(p, (int)j));
    for (size_t k = 0; k < p.jobs[j].waits.size(); ++k)
      out += fmt::format("{} {}", k ? "," : "", job_name(p, p.jobs[j].waits[k]));
    out += "\n";
  }
  out += "nodes:\n";
  std::map<std::string, int> causes;
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    const NodePlan& n = p.nodes[i];
    out += fmt::format("  {}  {}  {}  {}  {}\n", i, n.tensor->name, op_name(n.tensor->op), dev_name(p, n.device),
                       cause_name(n.cause));
    ++causes[cause_name(n.cause)];
  }
  out += "leafs:\n";
  for (const LeafPlan& l : p.leafs)
    out += fmt::format("  {}  {}  {}\n", l.tensor->name, dev_name(p, l.device), cause_name(l.cause));
  out += fmt::format("totals: {} splits, {} copies, {} copied per step, {} syncs, {} pipeline copies\n",
                     p.splits.size(), p.copies.size(), format_bytes(p.copy_bytes()), p.n_waits(), p.n_copies);
  out += "causes:";
  for (auto& [name, n] : causes) out += fmt::format(" {} {}", name, n);
  out += "\n";
  return out;
}

nlohmann::json to_json(const ExecutionPlan& p) {
  using nlohmann::json;
  json devices = json::array();
  for (size_t d = 0; d < p.devices.size(); ++d)
    devices.push_back({{"name", p.devices[d]->name()},
                       {"kind", device_kind_name(p.devices[d]->kind())},
                       {"compute_bytes", p.compute_bytes((int)d)}});
  json splits = json::array();
  for (const Split& s : p.splits) {
    json inputs = json::array(), reused = json::array();
    for (int c : s.inputs) {
      const CopyPlan& cp = p.copies[(size_t)c];
      inputs.push_back({{"tensor", cp.tensor->name}, {"from", dev_name(p, cp.from)}, {"bytes", cp.bytes}});
    }
    for (int c : s.reused) reused.push_back(p.copies[(size_t)c].tensor->name);
    splits.push_back({{"id", s.id},
                      {"device", dev_name(p, s.device)},
                      {"first_node", s.first_node},
                      {"n_nodes", s.n_nodes},
                      {"uid", s.uid},
                      {"inputs", inputs},
                      {"reused", reused}});
  }
  json nodes = json::array();
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    const NodePlan& n = p.nodes[i];
    nodes.push_back({{"id", i},
                     {"name", n.tensor->name},
                     {"op", op_name(n.tensor->op)},
                     {"device", dev_name(p, n.device)},
                     {"cause", cause_name(n.cause)}});
  }
  json syncs = json::array();
  for (size_t j = 0; j < p.jobs.size(); ++j) {
    if (p.jobs[j].waits.empty()) continue;
    json waits = json::array();
    for (int w : p.jobs[j].waits) waits.push_back(job_name(p, w));
    syncs.push_back({{"job", job_name(p, (int)j)}, {"waits", waits}});
  }
  return {{"devices", devices},
          {"splits", splits},
          {"nodes", nodes},
          {"syncs", syncs},
          {"totals",
           {{"n_splits", p.splits.size()},
            {"n_copies", p.copies.size()},
            {"copy_bytes", p.copy_bytes()},
            {"n_syncs", p.n_waits()},
            {"pipeline_copies", p.n_copies}}}};
}

namespace {

// The group a node belongs to in the grouped picture: its layer ("blk.7" of "blk.7.mul_mat-12"),
// else the first word of its name ("inp_tokens", "result_output").
std::string layer_of(const std::string& name) {
  if (name.rfind("blk.", 0) == 0) return name.substr(0, name.find('.', 4));
  const size_t end = name.find_first_of(".-");
  return name.empty() ? std::string("?") : name.substr(0, end);
}

}  // namespace

std::string to_dot_grouped(const ExecutionPlan& p) {
  // one box per (split, layer): its node count and its most frequent ops; one edge per pair of
  // boxes a tensor flows between, dashed where it crosses devices, labelled with the count
  std::vector<int> group_of(p.nodes.size());
  std::vector<std::pair<int, std::string>> groups;  // (split, layer)
  std::map<std::pair<int, std::string>, int> group_index;
  std::vector<std::map<std::string, int>> ops;
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    const auto key = std::make_pair(p.nodes[i].split, layer_of(p.nodes[i].tensor->name));
    auto [it, added] = group_index.emplace(key, (int)groups.size());
    if (added) {
      groups.push_back(key);
      ops.emplace_back();
    }
    group_of[i] = it->second;
    ++ops[(size_t)it->second][op_name(p.nodes[i].tensor->op)];
  }
  std::string out = "digraph plan {\n  rankdir=TB;\n  node [shape=box, fontsize=10];\n";
  for (const Split& s : p.splits) {
    out += fmt::format("  subgraph cluster_{} {{\n    label=\"split {} {} ({} nodes)\";\n", s.id, s.id,
                       dev_name(p, s.device), s.n_nodes);
    for (size_t g = 0; g < groups.size(); ++g) {
      if (groups[g].first != s.id) continue;
      std::vector<std::pair<int, std::string>> by_count;
      int n = 0;
      for (const auto& [op, count] : ops[g]) {
        by_count.emplace_back(-count, op);
        n += count;
      }
      std::sort(by_count.begin(), by_count.end());
      std::string top;
      for (size_t k = 0; k < std::min<size_t>(3, by_count.size()); ++k)
        top += fmt::format("{}{} x{}", k ? ", " : "", by_count[k].second, -by_count[k].first);
      out += fmt::format("    g{} [label=\"{}\\n{} nodes\\n{}\"];\n", g, groups[g].second, n, top);
    }
    out += "  }\n";
  }
  std::map<std::pair<int, int>, int> edges;
  std::map<const Tensor*, size_t> index;
  for (size_t i = 0; i < p.nodes.size(); ++i) index.emplace(p.nodes[i].tensor, i);
  for (size_t i = 0; i < p.nodes.size(); ++i)
    for (const Tensor* src : p.nodes[i].tensor->src) {
      auto it = src ? index.find(src) : index.end();
      if (it == index.end() || group_of[it->second] == group_of[i]) continue;
      ++edges[{group_of[it->second], group_of[i]}];
    }
  for (const auto& [e, count] : edges) {
    const bool cross = p.splits[(size_t)groups[(size_t)e.first].first].device !=
                       p.splits[(size_t)groups[(size_t)e.second].first].device;
    out += fmt::format("  g{} -> g{}{};\n", e.first, e.second,
                       cross ? fmt::format(" [style=dashed, label=\"{}\"]", count)
                             : count > 1 ? fmt::format(" [label=\"{}\"]", count) : std::string());
  }
  out += "}\n";
  return out;
}

std::string to_dot(const ExecutionPlan& p) {
  std::map<const Tensor*, size_t> index;
  for (size_t i = 0; i < p.nodes.size(); ++i) index.emplace(p.nodes[i].tensor, i);
  std::string out = "digraph plan {\n  rankdir=TB;\n  node [shape=box, fontsize=10];\n";
  for (const Split& s : p.splits) {
    out += fmt::format("  subgraph cluster_{} {{\n    label=\"split {} {}\";\n", s.id, s.id, dev_name(p, s.device));
    for (int i = s.first_node; i < s.first_node + s.n_nodes; ++i) {
      const Tensor* t = p.nodes[(size_t)i].tensor;
      out += fmt::format("    n{} [label=\"{}\\n{}\"];\n", i, t->name, op_name(t->op));
    }
    out += "  }\n";
  }
  for (size_t i = 0; i < p.nodes.size(); ++i)
    for (const Tensor* s : p.nodes[i].tensor->src) {
      auto it = s ? index.find(s) : index.end();
      if (it == index.end()) continue;
      const bool cross = p.nodes[it->second].device != p.nodes[i].device;
      out += fmt::format("  n{} -> n{}{};\n", it->second, i, cross ? " [style=dashed]" : "");
    }
  out += "}\n";
  return out;
}

}  // namespace loom::sched
