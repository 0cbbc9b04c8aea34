// loom-fit-params: the flags that make a model's run fit the free memory of its devices, exactly
// (docs/FIT-PARAMS.md). Parses flags, notes which ones the user fixed, calls fit::fit_params.
#include "loom/tools/main.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>

#include "loom/core/error.h"
#include "loom/fit/fit.h"
#include "loom/tools/common.h"

using namespace loom;

int main(int argc, char** argv) {
  CLI::App app{"loom-fit-params: the flags that make a run fit the free memory of its devices"};
  tools::CommonOptions common;
  tools::add_common_flags(app, common);
  std::string targets = "1024", reserves;
  int64_t fit_ctx = 4096;
  bool fit_print = false;
  app.add_option("--fit-target", targets,
                 "MiB to keep free on each device: one value, or one per device (default 1024)");
  app.add_option("--fit-ctx", fit_ctx, "smallest context the fit may choose (default 4096)");
  app.add_option("--fit-reserve", reserves,
                 "MiB other things will take: one value, or one per device, optionally plus one for the host");
  app.add_flag("--fit-print", fit_print, "print the predicted memory per device (stderr)");

  return tools::run_main("fit-params", argc, argv, app, [&]() -> int {
    if (common.list_devices) {
      tools::print_devices(common);
      return 0;
    }
    LOOM_CHECK(!common.model.empty(), usage, "no model given (-m FILE)");
    LOOM_CHECK(common.comm != tools::CommKind::mpi, usage, "--comm mpi: fit-params sizes one process; give -sm tensor without it");
    fit::FitRequest req;
    req.model_path = common.model;
    tools::RunDevices devices = tools::make_run_devices(common);
    req.placement = tools::placement_params(common, devices);
    req.session = tools::session_params(common);
    req.kv_overrides = tools::kv_overrides(common);
    req.adapters = tools::lora_adapters(common);
    req.control_vectors = tools::control_vectors(common);
    // As in llama.cpp, the defaults given explicitly (-c 0, -ngl -1 or auto) leave the fit free.
    req.fixed_ctx = app.count("--ctx-size") > 0 && common.n_ctx != 0;
    req.fixed_ngl =
        app.count("--n-gpu-layers") > 0 && (req.placement.n_gpu_layers != -1 || common.n_gpu_layers == "all");
    req.fixed_split = app.count("--tensor-split") > 0;
    req.fixed_experts = app.count("--override-tensor") > 0 || common.cpu_moe || common.n_cpu_moe > 0;
    req.targets = fit::parse_mib_list(targets, "--fit-target");
    if (!reserves.empty()) req.reserves = fit::parse_mib_list(reserves, "--fit-reserve");
    req.fit_ctx = fit_ctx;

    const fit::FitReport r = fit::fit_params(req);
    if (fit_print) fmt::print(stderr, "{}", fit::format_table(r));
    if (common.json)
      fmt::print("{}", fit::format_json(r));
    else if (r.status != fit::FitStatus::no_fit)
      fmt::print("{}\n", r.args);
    if (r.status == fit::FitStatus::no_fit) {
      tools::print_error("fit-params", fmt::format("no fit: {}", r.message).c_str());
      return 1;
    }
    return 0;
  });
}
