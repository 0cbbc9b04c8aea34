// loom-bench's sweep: value lists for the swept flags, every combination run in llama-bench's order
// (model, -ngl, -dev, -mmp, -b, -ub, -nkvo, -ctk, -ctv, -fa, -t, -d, then the tests -p, -n, -pg), one
// row each.
#include "loom/tools/bench.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <thread>
#include <utility>

#include "loom/core/error.h"
#include "loom/core/thread_pool.h"
#include "loom/model/bench_sweep.h"
#include "loom/testing/limits.h"

namespace loom::tools {

void add_bench_flags(CLI::App& app, CommonOptions& common, BenchOptions& b) {
  add_common_flags(app, common);
  // the swept flags take lists here: their single-value forms make way
  for (const char* name : {"--threads", "--batch-size", "--ubatch-size", "--n-gpu-layers", "--no-kv-offload", "--mmap",
                           "--flash-attn", "--cache-type-k", "--cache-type-v", "--device"})
    if (CLI::Option* o = app.get_option_no_throw(name)) app.remove_option(o);
  const char* list = " (a list: 1,2,4; ranges first-last[+step|*mult])";
  app.add_option("-t,--threads", b.threads, std::string("CPU threads") + list);
  app.add_option("-b,--batch-size", b.n_batch, std::string("logical batch size") + list);
  app.add_option("--ubatch-size", b.n_ubatch, std::string("physical batch size (-ub)") + list);
  app.add_option("--n-gpu-layers", b.n_gpu_layers, "layers on non-CPU devices (-ngl), comma separated");
  app.add_option("--no-kv-offload", b.no_kv_offload,
                 "1: the KV cache in host memory, attention on the CPU (-nkvo): 0 or 1, comma separated");
  app.add_option("--mmap", b.use_mmap,
                 "1: the CPU's weights used in place in the file mapping (-mmp; loom's default 0: read into memory), "
                 "0 or 1, comma separated");
  app.add_option("--flash-attn", b.flash_attn, "fused attention (-fa): on/off/auto or 1/0, comma separated");
  app.add_option("--cache-type-k", b.type_k, "K cache types (-ctk), comma separated");
  app.add_option("--cache-type-v", b.type_v, "V cache types (-ctv), comma separated");
  app.add_option("--device", b.devices, "device sets (-dev): CPU,SIM0/SIM1 is two sets, the second of two devices");
  app.add_option("-p,--n-prompt", b.n_prompt, std::string("prompt tokens, 0 = no pp test") + list);
  app.add_option("-n,--n-gen", b.n_gen, std::string("generated tokens, 0 = no tg test") + list);
  app.add_option("--pg", b.prompt_gen, "prompt then generation, timed together: pp,tg (several: pp,tg;pp,tg)");
  app.add_option("-d,--n-depth", b.n_depth, std::string("tokens in the context before each test, not timed") + list);
  app.add_option("-r,--repetitions", b.reps, "repetitions of each test");
  app.add_option("-o,--output", b.output, "md, csv, json, jsonl or sql");
  app.add_option("--output-err", b.output_err,
                 "the rows on stderr too, in this format (-oe): md, csv, json, jsonl or sql");
  app.add_option("--delay", b.delay, "seconds of rest before each test (a cooled-down machine)");
  app.add_flag("--progress", b.progress, "print each test's phases on stderr as they start");
  app.add_flag("--bandwidth", b.bandwidth,
               "tg tests: read 512 MiB after each token and show the weight bytes decode reads per second "
               "against that read bandwidth (weights on the CPU)");
  app.add_flag("--bandwidth-control", b.bandwidth_control,
               "with --bandwidth: time a plain read of as many bytes as each token's weights instead of the "
               "token (what a decode that only read would score)");
}

namespace {

std::vector<std::string> words_or(const std::string& list, const std::string& fallback, const char* flag) {
  return list.empty() ? std::vector<std::string>{fallback} : parse_bench_words(list, flag);
}
std::vector<int64_t> ints_or(const std::string& list, int64_t fallback, const char* flag) {
  return list.empty() ? std::vector<int64_t>{fallback} : parse_bench_ints(list, flag);
}
std::string fa_word(const std::string& v) { return v == "1" ? "on" : v == "0" ? "off" : v; }

// The settings that shape a Session (one per combination; the model is loaded once per
// model/-ngl/-dev) and the tests each runs.
struct Sweep {
  std::vector<std::string> models, ngl, devices, fa, type_k, type_v;
  std::vector<int64_t> n_batch, n_ubatch, threads, depth, nkvo, mmap;
  std::vector<std::pair<int64_t, int64_t>> tests;  // (n_prompt, n_gen)
  int64_t max_tokens = 0;                          // depth + test, the context every session needs
};

Sweep make_sweep(const CommonOptions& c, const BenchOptions& b) {
  Sweep s;
  s.models = parse_bench_words(c.model, "-m");
  s.ngl = words_or(b.n_gpu_layers, c.n_gpu_layers, "-ngl");
  s.devices = words_or(b.devices, c.devices, "-dev");
  for (std::string& d : s.devices) std::replace(d.begin(), d.end(), '/', ',');  // llama-bench: CUDA0/CUDA1
  s.fa = words_or(b.flash_attn, c.flash_attn, "-fa");
  s.nkvo = ints_or(b.no_kv_offload, 0, "-nkvo");
  for (int64_t v : s.nkvo) LOOM_CHECK(v == 0 || v == 1, usage, "-nkvo {}: expected 0 or 1", v);
  s.mmap = ints_or(b.use_mmap, c.mmap ? 1 : 0, "-mmp");
  for (int64_t v : s.mmap) LOOM_CHECK(v == 0 || v == 1, usage, "-mmp {}: expected 0 or 1", v);
  s.type_k = words_or(b.type_k, c.cache_type_k, "-ctk");
  s.type_v = words_or(b.type_v, c.cache_type_v, "-ctv");
  s.n_batch = ints_or(b.n_batch, c.n_batch, "-b");
  s.n_ubatch = ints_or(b.n_ubatch, c.n_ubatch, "-ub");
  s.threads = ints_or(b.threads, c.n_threads, "-t");
  s.depth = parse_bench_ints(b.n_depth, "-d");
  for (int64_t p : parse_bench_ints(b.n_prompt, "-p"))
    if (p > 0) s.tests.emplace_back(p, 0);
  for (int64_t n : parse_bench_ints(b.n_gen, "-n"))
    if (n > 0) s.tests.emplace_back(0, n);
  if (!b.prompt_gen.empty())
    for (auto pg : parse_bench_pairs(b.prompt_gen, "-pg")) s.tests.push_back(pg);
  LOOM_CHECK(!s.tests.empty(), usage, "no test to run: -p, -n and -pg are all 0 or empty");
  int64_t longest = 0;
  for (auto [p, n] : s.tests) longest = std::max(longest, p + n);
  s.max_tokens = *std::max_element(s.depth.begin(), s.depth.end()) + longest;
  return s;
}

// Calls f(options) for every combination of the sweep's session settings, in llama-bench's order.
template <class F>
void for_each_setting(const CommonOptions& c, const Sweep& s, F&& f) {
  for (const std::string& m : s.models)
    for (const std::string& ngl : s.ngl)
      for (const std::string& dev : s.devices)
        for (int64_t mmp : s.mmap)
          for (int64_t nb : s.n_batch)
            for (int64_t nub : s.n_ubatch)
              for (int64_t nkvo : s.nkvo)
                for (const std::string& tk : s.type_k)
                  for (const std::string& tv : s.type_v)
                    for (const std::string& fa : s.fa)
                      for (int64_t t : s.threads) {
                        CommonOptions o = c;
                        o.model = m;
                        o.n_gpu_layers = ngl;
                        o.devices = dev;
                        o.n_batch = nb;
                        o.n_ubatch = nub;
                        o.cache_type_k = tk;
                        o.cache_type_v = tv;
                        o.flash_attn = fa_word(fa);
                        o.no_kv_offload = nkvo != 0;
                        o.mmap = mmp != 0;
                        LOOM_CHECK(t >= 0 && t <= 1024, usage, "-t {}: must be between 1 and 1024", t);
                        o.n_threads = (int)t;
                        f(o);
                      }
}

BenchColumns varying_columns(const Sweep& s) {
  BenchColumns c;
  c.n_batch = s.n_batch.size() > 1;
  c.n_ubatch = s.n_ubatch.size() > 1;
  c.n_gpu_layers = s.ngl.size() > 1;
  c.flash_attn = s.fa.size() > 1;
  // as llama-bench: a column for a setting given several values or one other than the default
  c.no_kv_offload = s.nkvo.size() > 1 || s.nkvo[0] != 0;
  c.use_mmap = s.mmap.size() > 1 || s.mmap[0] != 0;
  c.type_k = s.type_k.size() > 1;
  c.type_v = s.type_v.size() > 1;
  c.devices = s.devices.size() > 1;
  return c;
}

// The devices that hold the model's weights, as the backend column names them.
std::string weight_devices(const Model& m) {
  std::string out;
  for (size_t i = 0; i < m.devices().size(); ++i)
    if (m.device_bytes()[i] > 0) out += (out.empty() ? "" : ",") + m.devices()[i]->name();
  return out.empty() ? "CPU" : out;
}

}  // namespace

int run_bench(const CommonOptions& common, const BenchOptions& b) {
  if (common.list_devices) {
    print_devices(common);
    return 0;
  }
  LOOM_CHECK(!common.model.empty(), usage, "no model given (-m FILE[,FILE])");
  LOOM_CHECK(b.reps >= 1 && b.reps <= 1000, usage, "-r {}: must be between 1 and 1000", b.reps);
  LOOM_CHECK(is_bench_format(b.output), usage, "-o '{}': expected md, csv, json, jsonl or sql", b.output);
  LOOM_CHECK(b.output_err.empty() || is_bench_format(b.output_err), usage,
             "-oe '{}': expected md, csv, json, jsonl or sql", b.output_err);
  LOOM_CHECK(b.delay >= 0 && b.delay <= 86400, usage, "--delay {}: must be between 0 and 86400 seconds", b.delay);
  const Sweep s = make_sweep(common, b);
  LOOM_CHECK(common.n_ctx == 0 || common.n_ctx >= s.max_tokens, usage,
             "-c {} holds fewer than the deepest -d plus the longest test ({} tokens)", common.n_ctx, s.max_tokens);
  for_each_setting(common, s, [](const CommonOptions& o) { (void)session_params(o); });  // usage errors before any row
  if (common.comm == CommKind::mpi) {  // every rank must run the same sweep (checked before any collective)
    if (!is_output_rank(common)) std::freopen("/dev/null", "w", stdout);  // rank 0 prints the rows
    CommonOptions first = common;  // the identity checked is the first model's; the list is compared too
    first.model = common.model.substr(0, common.model.find(','));
    const int disagree = check_ranks_agree("bench", first,
                                           {{"-m", common.model},
                                            {"-p", b.n_prompt},
                                            {"-n", b.n_gen},
                                            {"-pg", b.prompt_gen},
                                            {"-d", b.n_depth},
                                            {"-t", b.threads},
                                            {"-b", b.n_batch},
                                            {"-ub", b.n_ubatch},
                                            {"-ngl", b.n_gpu_layers},
                                            {"-fa", b.flash_attn},
                                            {"-nkvo", b.no_kv_offload},
                                            {"-mmp", b.use_mmap},
                                            {"-ctk", b.type_k},
                                            {"-ctv", b.type_v},
                                            {"-dev", b.devices},
                                            {"-r", std::to_string(b.reps)}});
    if (disagree) return disagree;
  }

  BenchColumns columns = varying_columns(s);
  columns.bandwidth = b.bandwidth;
  std::unique_ptr<BenchPrinter> out = make_bench_printer(b.output, columns, stdout);
  std::unique_ptr<BenchPrinter> err_out =
      b.output_err.empty() ? nullptr : make_bench_printer(b.output_err, columns, stderr);
  size_t n_settings = 0, done = 0;
  for_each_setting(common, s, [&](const CommonOptions&) { ++n_settings; });
  const size_t n_tests = n_settings * s.depth.size() * s.tests.size();
  bool started = false;  // the header goes out with the first row: an error before it prints nothing
  struct Loaded {
    std::string key;
    RunDevices devices;
    std::unique_ptr<Model> model;
  } loaded;
  std::unique_ptr<testing::ReadProbe> probe;  // --bandwidth: made once per thread count
  std::unique_ptr<testing::ReadProbe> control;  // --bandwidth-control: one per model and thread count
  int probe_threads = 0, control_threads = 0;
  size_t control_for = 0;  // the bytes per token it was made for
  LOOM_CHECK(!b.bandwidth_control || b.bandwidth, usage, "--bandwidth-control needs --bandwidth");
  for_each_setting(common, s, [&](const CommonOptions& o) {
    const std::string key = o.model + "\n" + o.n_gpu_layers + "\n" + o.devices + "\n" + (o.mmap ? "mmap" : "");
    if (key != loaded.key) {
      loaded.model.reset();
      loaded.devices = make_run_devices(o);
      loaded.model = load_model(o, loaded.devices);
      loaded.key = key;
    }
    const Model& model = *loaded.model;
    SessionParams sp = session_params(o);
    if (sp.n_ctx == 0) sp.n_ctx = s.max_tokens;
    Session session(*loaded.model, sp);
    BenchRow row;
    row.model_filename = o.model;
    row.model_type = model.type_name();
    row.model_size = model.n_bytes();
    row.model_n_params = model.n_params();
    row.backend = weight_devices(model);
    row.n_threads = o.n_threads > 0 ? o.n_threads : ThreadPool::default_threads();
    row.n_batch = o.n_batch;
    row.n_ubatch = o.n_ubatch;
    row.n_gpu_layers = o.n_gpu_layers;
    row.flash_attn = o.flash_attn;
    row.no_kv_offload = o.no_kv_offload;
    row.use_mmap = o.mmap;
    row.type_k = o.cache_type_k;
    row.type_v = o.cache_type_v;
    row.devices = o.devices.empty() ? "all" : o.devices;
    ReadProbeFn probe_fn;
    if (b.bandwidth) {
      LOOM_CHECK(row.backend == "CPU" && !model.tensor_parallel(), usage,
                 "--bandwidth reads the host's memory, but the weights are on {}", row.backend);
      if (!probe || probe_threads != row.n_threads) {
        probe.reset();  // one buffer at a time
        // its threads on the decode's CPUs (-C, --cpu-strict: else they share the main thread's)
        probe = std::make_unique<testing::ReadProbe>(row.n_threads, size_t(512) << 20, cpu_placement(o));
        probe_threads = row.n_threads;
      }
      probe_fn.gbps = [&probe]() { return probe->gbps(); };
      probe_fn.bytes_per_token = model.bytes_read_per_token();
      if (b.bandwidth_control) {
        if (!control || control_threads != row.n_threads || control_for != probe_fn.bytes_per_token) {
          control.reset();  // one buffer at a time
          control = std::make_unique<testing::ReadProbe>(row.n_threads, probe_fn.bytes_per_token, cpu_placement(o));
          control_threads = row.n_threads;
          control_for = probe_fn.bytes_per_token;
        }
        probe_fn.bytes_per_token = control->bytes();  // its whole MiB
        probe_fn.instead_of_decode = [&control]() { control->gbps(); };
      }
    }
    for (int64_t d : s.depth)
      for (auto [p, n] : s.tests) {
        ++done;
        auto note = [&](const std::string& what) {
          fmt::print(stderr, "loom-bench: benchmark {}/{}: {}\n", done, n_tests, what);
        };
        if (b.progress) note("starting");
        if (b.delay > 0) std::this_thread::sleep_for(std::chrono::seconds(b.delay));  // cool off
        row.test = bench_run(session, p, n, b.reps, d, b.bandwidth && p == 0 ? &probe_fn : nullptr,
                             b.progress ? std::function<void(const std::string&)>(note) : nullptr);
        if (!std::exchange(started, true)) {
          out->header();
          if (err_out) err_out->header();
        }
        out->row(row);
        std::fflush(stdout);
        if (err_out) err_out->row(row);
      }
  });
  if (!started) out->header();
  out->footer();
  if (err_out) {
    if (!started) err_out->header();
    err_out->footer();
  }
  return 0;
}

}  // namespace loom::tools
