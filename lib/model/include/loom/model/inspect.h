// The plan of one forward step of a model (prompt ubatch or single-token decode), printed for
// loom-split-inspect: devices with model/context/compute bytes, splits, copies, causes.
#pragma once

#include <string>

#include "loom/model/session.h"

namespace loom {

// dot: one box per layer and split (readable for big models); dot_detail: every node.
enum class InspectFormat { text, json, dot, dot_detail };

// Plans (never allocates) the step; the session params must allow plan-only use.
std::string inspect_splits(Model& model, const SessionParams& params, bool decode, InspectFormat format);

}  // namespace loom
