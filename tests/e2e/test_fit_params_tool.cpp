// loom-fit-params as a user runs it, and its contract: loom-run with the printed flags allocates
// per device exactly the bytes --json predicted and keeps the target free; caps equal to the
// prediction still run (one byte less does not); the printed flags fed back change nothing;
// no-fit cases exit 1 with nothing on stdout; fixed flags are never changed.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tool_runner.h"

namespace {

namespace fs = std::filesystem;
using Result = loom::test::ToolResult;
using nlohmann::json;

Result run(const std::string& args) { return loom::test::run_tool(args); }

class FitParamsTool : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("loom-e2e-fit-" + std::to_string(getpid()));
    fs::create_directories(dir_);
    for (const auto& [name, flags] : std::vector<std::pair<std::string, std::string>>{
             {"layers", "--arch llama --preset tiny --n-layer 8 --seed 5"},
             {"longctx", "--arch llama --preset tiny --n-layer 4 --n-ctx-train 8192 --seed 4"},
             {"moe", "--arch qwen3moe --preset tiny --n-layer 6 --n-expert 8 --n-ff-exp 256 --seed 3"},
         }) {
      Result r = run("loom-gguf new " + flags + " -o " + model(name));
      ASSERT_EQ(r.rc, 0) << r.err;
    }
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static std::string model(const std::string& name) { return (dir_ / (name + ".gguf")).string(); }
  static fs::path dir_;
};
fs::path FitParamsTool::dir_;

struct Case {
  std::string model;
  std::string caps;    // --sim-devices
  std::string fit;     // fit-only flags
  std::string common;  // flags both tools get
  std::string expect;  // a flag the answer must change (e.g. "-ngl", "-c", "-ot")
};

json device(const json& list, const std::string& name) {
  for (const json& d : list)
    if (d["name"] == name) return d;
  return json();
}

// The answer as explicit flags (so that other caps do not change the default split).
std::string explicit_flags(const json& fit, const std::string& caps_mib, bool with_ctx) {
  std::vector<std::string> parts;
  if (with_ctx) parts.push_back(fmt::format("-c {}", fit["n_ctx"].get<int64_t>()));
  parts.push_back(fmt::format("-ngl {}", fit["n_gpu_layers"].get<int64_t>()));
  std::vector<int64_t> ts;
  for (const json& v : fit["tensor_split"]) ts.push_back((int64_t)v.get<double>());
  parts.push_back(ts.empty() ? "-ts " + caps_mib : fmt::format("-ts {}", fmt::join(ts, ",")));
  std::vector<std::string> ot = fit["overrides"];
  if (!ot.empty()) parts.push_back(fmt::format("-ot '{}'", fmt::join(ot, ",")));
  return fmt::format("{}", fmt::join(parts, " "));
}

void check_contract(const Case& c) {
  SCOPED_TRACE(c.model + " on " + c.caps + " " + c.fit + " " + c.common);
  const std::string base = " -m " + c.model + " --sim-devices " + c.caps + " " + c.common;
  const Result fr = run("loom-fit-params" + base + " " + c.fit + " --json");
  ASSERT_EQ(fr.rc, 0) << fr.err;
  const json fit = json::parse(fr.out);
  ASSERT_EQ(fit["status"], "fit");
  const std::string args = fit["args"];
  EXPECT_NE(args.find(c.expect + " "), std::string::npos) << args;

  // 1. loom-run with the printed flags allocates exactly the prediction, on every device.
  const Result rr = run("loom-run" + base + " " + args + " -p hi -n 2 --temp 0 --json");
  ASSERT_EQ(rr.rc, 0) << args << ": " << rr.err;
  const json ran = json::parse(rr.out);
  ASSERT_EQ(ran["devices"].size(), fit["devices"].size());
  for (const json& p : fit["devices"]) {
    const std::string name = p["name"];
    const json r = device(ran["devices"], name);
    ASSERT_FALSE(r.is_null()) << name;
    for (const char* k : {"model_bytes", "context_bytes", "compute_bytes"}) EXPECT_EQ(p[k], r[k]) << name << " " << k;
    const int64_t used =
        p["model_bytes"].get<int64_t>() + p["context_bytes"].get<int64_t>() + p["compute_bytes"].get<int64_t>();
    if (name != "CPU" && used > 0) {
      EXPECT_GE(p["total_bytes"].get<int64_t>() - used, p["target_bytes"].get<int64_t>())
          << name << " keeps its target";
      EXPECT_EQ(p["projected_free_bytes"].get<int64_t>(), p["free_bytes"].get<int64_t>() - used) << name;
    }
  }
  // 2. Fed back, the flags change nothing.
  const Result again = run("loom-fit-params" + base + " " + c.fit + " " + args);
  EXPECT_EQ(again.rc, 0) << again.err;
  EXPECT_EQ(again.out, "-c 0 -ngl -1\n");

  // 3. Caps equal to the prediction (target 0) still run: nothing is padded. One byte less does not.
  std::string exact, short_by_one, caps_mib;
  int64_t fullest = -1;
  std::string fullest_name;
  for (const json& p : fit["devices"]) {
    if (p["name"] == "CPU") continue;
    const int64_t used =
        p["model_bytes"].get<int64_t>() + p["context_bytes"].get<int64_t>() + p["compute_bytes"].get<int64_t>();
    if (used > fullest) {
      fullest = used;
      fullest_name = p["name"];
    }
  }
  for (const json& p : fit["devices"]) {
    if (p["name"] == "CPU") continue;
    const int64_t used =
        p["model_bytes"].get<int64_t>() + p["context_bytes"].get<int64_t>() + p["compute_bytes"].get<int64_t>();
    const int64_t cap = used > 0 ? used : p["total_bytes"].get<int64_t>();
    exact += (exact.empty() ? "" : ",") + std::to_string(cap) + "B";
    short_by_one += (short_by_one.empty() ? "" : ",") + std::to_string(cap - (p["name"] == fullest_name)) + "B";
    caps_mib += (caps_mib.empty() ? "" : ",") + std::to_string((int64_t)p["free_mib"].get<double>());
  }
  const std::string flags = explicit_flags(fit, caps_mib, c.common.find("-c ") == std::string::npos);
  const Result tight = run("loom-fit-params -m " + c.model + " --sim-devices " + exact + " " + c.common + " " + flags +
                           " --fit-target 0");
  EXPECT_EQ(tight.rc, 0) << tight.err;
  EXPECT_EQ(tight.out, "-c 0 -ngl -1\n") << "exact caps fit exactly";
  const Result fits = run("loom-run -m " + c.model + " --sim-devices " + exact + " " + c.common + " " + flags +
                          " -p hi -n 2 --temp 0 --json");
  ASSERT_EQ(fits.rc, 0) << flags << ": " << fits.err;
  const json ran2 = json::parse(fits.out);
  for (const json& p : fit["devices"])
    for (const char* k : {"model_bytes", "context_bytes", "compute_bytes"})
      EXPECT_EQ(p[k], device(ran2["devices"], p["name"])[k]) << p["name"] << " " << k;
  const Result over = run("loom-run -m " + c.model + " --sim-devices " + short_by_one + " " + c.common + " " + flags +
                          " -p hi -n 2 --temp 0");
  EXPECT_EQ(over.rc, 4) << "one byte short on " << fullest_name << " must not fit: " << over.err;
}

TEST_F(FitParamsTool, LayersOnOneToFourDevices) {
  const std::string m = model("layers");
  for (const char* caps : {"9MiB", "9MiB,6MiB", "6MiB,9MiB,5MiB", "5MiB,5MiB,6MiB,7MiB"})
    check_contract({m, caps, "--fit-target 1", "-ub 32 -c 256", "-ngl"});
}

TEST_F(FitParamsTool, ContextShrinksToFit) {
  const std::string m = model("longctx");
  check_contract({m, "20MiB", "--fit-target 0 --fit-ctx 1024", "-ub 64", "-c"});
  check_contract({m, "12MiB,8MiB", "--fit-target 0 --fit-ctx 512", "-ub 64", "-c"});
  const Result r = run("loom-fit-params -m " + m + " --sim-devices 20MiB --fit-target 0 --fit-ctx 1024 -ub 64 --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  const int64_t n_ctx = json::parse(r.out)["n_ctx"];
  EXPECT_EQ(n_ctx % 256, 0);
  EXPECT_GE(n_ctx, 1024);
  EXPECT_LT(n_ctx, 8192);
  // 256 more would not fit whole: the largest context was found, not a safe guess
  const Result more = run("loom-fit-params -m " + m + " --sim-devices 20MiB --fit-target 0 -ub 64 -ngl 99 -c " +
                          std::to_string(n_ctx + 256));
  EXPECT_EQ(more.rc, 1) << more.out;
}

// -nkvo: the KV cache (and the attention reading it) stays on the host, so the prediction puts
// no context bytes on the devices, the run allocates exactly that, and as many layers fit or more.
TEST_F(FitParamsTool, NoKvOffloadKeepsTheCacheOnTheHost) {
  const std::string m = model("layers");
  check_contract({m, "6MiB,5MiB", "--fit-target 1", "-ub 32 -c 2048 -nkvo", "-ngl"});
  auto fit = [&](const std::string& extra) {
    const Result r =
        run("loom-fit-params -m " + m + " --sim-devices 6MiB,5MiB --fit-target 1 -ub 32 -c 2048 --json " + extra);
    EXPECT_EQ(r.rc, 0) << r.err;
    return json::parse(r.out);
  };
  const json off = fit("-nkvo"), on = fit("");
  for (const json& d : off["devices"])
    if (d["name"] == "CPU")
      EXPECT_GT(d["context_bytes"].get<int64_t>(), 0);
    else
      EXPECT_EQ(d["context_bytes"].get<int64_t>(), 0) << d["name"];
  EXPECT_GT(off["n_gpu_layers"].get<int64_t>(), on["n_gpu_layers"].get<int64_t>())
      << "the cache's bytes on the devices go to layers";
}

TEST_F(FitParamsTool, MoeExpertsMoveToTheCpu) {
  const std::string m = model("moe");
  check_contract({m, "36MiB", "--fit-target 0", "-ub 64", "-ot"});
  check_contract({m, "20MiB,16MiB", "--fit-target 1", "-ub 64", "-ot"});
}

TEST_F(FitParamsTool, NothingToChange) {
  const Result r = run("loom-fit-params -m " + model("layers") + " --sim-devices 64MiB --fit-target 1 -ub 32 --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["status"], "unchanged");
  EXPECT_EQ(j["args"], "-c 0 -ngl -1");
  EXPECT_EQ(j["probes"], 1);
  for (const char* k : {"n_ctx", "n_gpu_layers", "tensor_split", "overrides", "devices", "host", "elapsed_ms"})
    EXPECT_TRUE(j.contains(k)) << k;
  for (const char* k : {"total", "free", "target", "model", "context", "compute", "projected_free"}) {
    EXPECT_TRUE(j["devices"][0].contains(std::string(k) + "_mib")) << k;
    EXPECT_TRUE(j["devices"][0].contains(std::string(k) + "_bytes")) << k;
  }
  EXPECT_EQ(j["devices"][0]["target_mib"], 1.0);
}

TEST_F(FitParamsTool, NoFitExitsOneWithNothingOnStdout) {
  // the compute buffer alone is too big for the device, and the user fixed -ngl
  Result r = run("loom-fit-params -m " + model("layers") + " --sim-devices 1MiB -ngl 99 --fit-target 0");
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("SIM0 lacks"), std::string::npos) << r.err;
  // the host's RAM is all reserved: what stays on the CPU cannot fit
  r = run("loom-fit-params -m " + model("layers") + " --sim-devices 1MiB --fit-reserve 0,1073741824");
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("CPU lacks"), std::string::npos) << r.err;
  // --json still answers, with status no_fit and no flags
  r = run("loom-fit-params -m " + model("layers") + " --sim-devices 1MiB -ngl 99 --fit-target 0 --json");
  EXPECT_EQ(r.rc, 1);
  const json j = json::parse(r.out);
  EXPECT_EQ(j["status"], "no_fit");
  EXPECT_EQ(j["args"], "");
}

TEST_F(FitParamsTool, FixedFlagsAreNeverChanged) {
  const std::string base = "loom-fit-params -m " + model("layers") + " --sim-devices 9MiB,6MiB --fit-target 1 -ub 32 ";
  Result r = run(base + "-c 256");  // -c given: only -ngl/-ts may change
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out.find("-c "), std::string::npos) << r.out;
  r = run(base + "-c 256 -ts 1,1");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out.find("-ts"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("-ngl "), std::string::npos) << r.out;
  r = run(base + "-c 0 -ngl -1");  // the defaults, given explicitly, leave the fit free (as llama.cpp)
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("-ngl "), std::string::npos) << r.out;
  r = run(base + "-c 256 -ngl 8");  // all 8 layers cannot fit and -ngl is fixed
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.out, "");
}

TEST_F(FitParamsTool, BadFlagsAndTensorSplitMode) {
  const std::string m = model("layers");
  Result r = run("loom-fit-params -m " + m + " --sim-devices 8MiB,8MiB --fit-target 1,2,3");
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("--fit-target"), std::string::npos) << r.err;
  r = run("loom-fit-params -m " + m + " --fit-target abc");
  EXPECT_EQ(r.rc, 2) << r.err;
  // -sm tensor is sized per member; with the default 1 GiB target nothing fits 8 MiB devices
  r = run("loom-fit-params -m " + m + " --sim-devices 8MiB,8MiB -sm tensor");
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.err.find("SIM0 lacks"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
  r = run("loom-fit-params -m " + (dir_ / "missing.gguf").string());
  EXPECT_EQ(r.rc, 3) << r.err;
}

TEST_F(FitParamsTool, FitPrintTableOnStderr) {
  const Result r =
      run("loom-fit-params -m " + model("layers") + " --sim-devices 9MiB,6MiB --fit-target 1 -ub 32 --fit-print");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out.find("NAME"), std::string::npos) << "stdout holds the flags alone";
  EXPECT_NE(r.err.find("model MiB"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("SIM1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Host"), std::string::npos) << r.err;
}

}  // namespace
