// loom-split-inspect: how the scheduler splits a model's graph across devices, and why.
// Plans only: never allocates compute memory and never reads tensor data.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "loom/core/error.h"
#include "loom/model/inspect.h"
#include "loom/tools/common.h"
#include "loom/tools/main.h"

using namespace loom;

int main(int argc, char** argv) {
  CLI::App app{"loom-split-inspect: show how a model's graph is split across devices"};
  tools::CommonOptions common;
  tools::add_common_flags(app, common);
  std::string phase = "prompt";
  bool dot = false, dot_detail = false;
  app.add_option("--phase", phase, "prompt (a full ubatch) or decode (one token)");
  app.add_flag("--dot", dot, "Graphviz output: one cluster per split, one box per layer in it");
  app.add_flag("--dot-detail", dot_detail, "Graphviz output with every node");

  return tools::run_main("split-inspect", argc, argv, app, [&]() -> int {
    if (common.list_devices) {
      tools::print_devices(common);
      return 0;
    }
    LOOM_CHECK(phase == "prompt" || phase == "decode", usage, "--phase '{}': prompt or decode", phase);
    LOOM_CHECK((int)dot + (int)dot_detail + (int)common.json <= 1, usage, "give one of --json, --dot, --dot-detail");
    tools::RunDevices devices = tools::make_run_devices(common);
    std::unique_ptr<Model> model = tools::load_model(common, devices, /*need_data=*/false);
    SessionParams sp = tools::session_params(common);
    sp.plan_only = true;
    const InspectFormat fmt = common.json  ? InspectFormat::json
                              : dot        ? InspectFormat::dot
                              : dot_detail ? InspectFormat::dot_detail
                                           : InspectFormat::text;
    fmt::print("{}", inspect_splits(*model, sp, phase == "decode", fmt));
    return 0;
  });
}
