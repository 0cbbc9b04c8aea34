// A plan as text (loom-split-inspect, golden tests), JSON (--json) and Graphviz (--dot).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "loom/sched/plan.h"

namespace loom::sched {

// Devices with compute bytes, one line per split ("split 3  SIM0  nodes 112-187 (76)  inputs:
// x <- CPU (16.0 KiB)"), the syncs, one line per node with device and cause, and totals.
std::string describe(const ExecutionPlan& plan);
// {"devices", "splits":[{id, device, first_node, n_nodes, uid, inputs:[{tensor, from, bytes}],
// reused}], "nodes":[{id, name, op, device, cause}], "syncs", "totals":{n_splits, n_copies,
// copy_bytes, pipeline_copies}}.
nlohmann::json to_json(const ExecutionPlan& plan);
// Graphviz text: one cluster per split, edges between nodes, copies as dashed edges.
std::string to_dot(const ExecutionPlan& plan);
// Per split whose device's stream records barriers (Vulkan): [{split, device, nodes,
// barriers_before, barriers_after}] around that device's optimize_graph.
nlohmann::json split_barriers(const ExecutionPlan& plan);
// Graphviz, one cluster per split and one box per layer inside it (node count, top ops): an 8B
// model's step on one page. to_dot draws every node.
std::string to_dot_grouped(const ExecutionPlan& plan);
// "16.0 KiB", "512 B", "1.5 GiB".
std::string format_bytes(size_t bytes);

}  // namespace loom::sched
