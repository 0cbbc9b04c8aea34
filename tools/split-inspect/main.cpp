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
  bool dot = false;
  app.add_option("--phase", phase, "prompt (a full ubatch) or decode (one token)");
  app.add_flag("--dot", dot, "Graphviz output, one cluster per split");

  return tools::run_main("split-inspect", argc, argv, app, [&]() -> int {
    if (common.list_devices) {
      tools::print_devices(common);
      return 0;
    }
    LOOM_CHECK(phase == "prompt" || phase == "decode", usage, "--phase '{}': prompt or decode", phase);
    LOOM_CHECK(!(dot && common.json), usage, "give --json or --dot, not both");
    tools::RunDevices devices = tools::make_run_devices(common);
    std::unique_ptr<Model> model = tools::load_model(common, devices, /*need_data=*/false);
    SessionParams sp = tools::session_params(common);
    sp.plan_only = true;
    const InspectFormat fmt = common.json ? InspectFormat::json : dot ? InspectFormat::dot : InspectFormat::text;
    fmt::print("{}", inspect_splits(*model, sp, phase == "decode", fmt));
    return 0;
  });
}
