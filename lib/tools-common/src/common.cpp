// Shared model flags: registration, validation, and mapping to SessionParams.
#include "loom/tools/common.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "loom/core/error.h"
#include "loom/core/log.h"
#include "loom/core/thread_pool.h"

namespace loom::tools {

namespace {
Communicator& mpi_world() {
  const auto& world = registry().collectives().mpi_world;
  LOOM_CHECK(world, unsupported, "--comm mpi: no communicators registered in this binary");
  return world();
}
}  // namespace

void add_common_flags(CLI::App& app, CommonOptions& o) {
  app.add_option("-m,--model", o.model, "GGUF model file");
  app.add_option("-c,--ctx-size", o.n_ctx, "context size (0 = the model's training context)");
  app.add_option("-b,--batch-size", o.n_batch, "logical batch size");
  app.add_option("--ubatch-size", o.n_ubatch, "physical batch size (-ub)");
  app.add_option("-t,--threads", o.n_threads, "CPU threads (default, -1 or 0: all cores)");
  app.add_option("-C,--cpu-mask", o.cpu_mask, "CPUs the threads may run on: a hex mask, bit i for CPU i (0xff)");
  app.add_option("--cpu-range", o.cpu_range, "CPUs the threads may run on: lo-hi, with -C's (-Cr)");
  app.add_option("--cpu-strict", o.cpu_strict, "1: each thread on one CPU of -C/-Cr's, in turn (default 0)");
  app.add_option("--poll", o.poll, "how long waiting threads spin before they sleep: 0 (never) to 100 (default 50)");
  app.add_option("--numa", o.numa,
                 "distribute: threads spread over the NUMA nodes in turn; isolate: on the node the run starts on; "
                 "numactl: on the CPUs numactl gave the process");
  app.add_option("--prio", o.prio, "process priority: -1 low, 0 normal, 1 medium, 2 high, 3 realtime (default 0)");
  app.add_option("--n-gpu-layers", o.n_gpu_layers, "layers on non-CPU devices: N, auto or all (-ngl)");
  app.add_option("--split-mode", o.split_mode, "none, layer or tensor (-sm)")
      ->transform(CLI::CheckedTransformer(
          std::map<std::string, SplitMode>{{"none", SplitMode::none}, {"layer", SplitMode::layer}, {"tensor", SplitMode::tensor}}));
  app.add_option("--tensor-split", o.tensor_split, "proportions per device, e.g. 3,1 (-ts)");
  app.add_option("--main-gpu", o.main_gpu, "device for split mode none (-mg)");
  app.add_option("--device", o.devices, "devices to use, comma separated (-dev)");
  app.add_option("--override-tensor", o.overrides, "REGEX=DEVICE,... weight placement (-ot)");
  app.add_option("--override-kv", o.kv_overrides,
                 "KEY=TYPE:VALUE,... metadata used instead of the file's (TYPE int, float, bool or str)");
  app.add_option("--rope-scaling", o.rope_scaling,
                 "RoPE frequency scaling: none, linear or yarn (the file's by default)");
  app.add_option("--rope-scale", o.rope_scale, "RoPE context scaling factor: the context grows by N");
  app.add_option("--rope-freq-base", o.rope_freq_base, "RoPE base frequency (the file's by default)");
  app.add_option("--rope-freq-scale", o.rope_freq_scale, "RoPE frequency scaling factor: the context grows by 1/N");
  app.add_option("--yarn-orig-ctx", o.yarn_orig_ctx, "YaRN: the model's original training context");
  app.add_option("--yarn-ext-factor", o.yarn.ext_factor,
                 "YaRN: extrapolation mix factor (default -1: 1 with YaRN scaling, else 0; 0 = full interpolation)");
  app.add_option("--yarn-attn-factor", o.yarn.attn_factor, "YaRN: multiplies the attention magnitude (default 1)");
  app.add_option("--yarn-beta-slow", o.yarn.beta_slow,
                 "YaRN: high correction dim or alpha (default: the file's, else 1)");
  app.add_option("--yarn-beta-fast", o.yarn.beta_fast,
                 "YaRN: low correction dim or beta (default: the file's, else 32)");
  app.add_option("--lora", o.lora, "LoRA adapter GGUF applied with scale 1 (repeat, or comma separate, for several)")
      ->delimiter(',');
  app.add_option("--lora-scaled", o.lora_scaled, "FNAME SCALE: a LoRA adapter with its scale (repeatable)")
      ->expected(2)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  // llama.cpp's cache layouts that are loom's only one: accepted, nothing to change
  app.add_flag("--swa-full", o.swa_full, "sliding-window layers keep the whole context's cache (loom's layout always)");
  app.add_flag("--kv-unified", o.kv_unified,
               "one KV buffer for every sequence (-kvu; a loom session has one sequence)");
  app.add_option("--control-vector", o.cvec, "control vector GGUF added to the layers' outputs (repeatable)");
  app.add_option("--control-vector-scaled", o.cvec_scaled, "FNAME SCALE: a control vector with its scale (repeatable)")
      ->expected(2)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--control-vector-layer-range", o.cvec_range, "START END: the layers that take the control vectors")
      ->expected(2);
  app.add_flag("--cpu-moe", o.cpu_moe, "keep all MoE expert weights on the CPU (-cmoe)");
  app.add_option("--n-cpu-moe", o.n_cpu_moe, "keep the MoE expert weights of the first N layers on the CPU (-ncmoe)");
  app.add_flag("--mmap,!--no-mmap", o.mmap,
               "use the CPU's weights in place in the file mapping (less RAM, slower decode); default "
               "(--no-mmap): read them into huge-page-backed memory");
  app.add_flag("--mlock", o.mlock, "lock the loaded weights in RAM (never swapped out)");
  app.add_flag("--repack,!--no-repack", o.repack,
               "store the CPU's quantized matrices in the kernels' 8-row layout (default; -nr: keep the file's)");
  app.add_option("--flash-attn", o.flash_attn, "on, off or auto; 1 and 0 as on and off (-fa)");
  app.add_flag("--no-op-offload", o.no_op_offload,
               "ops whose weights are in host memory stay on the CPU, even where a device would take them");
  app.add_flag("--no-kv-offload", o.no_kv_offload,
               "keep every layer's KV cache in host memory and run its attention on the CPU (-nkvo)");
  app.add_option("--cache-type-k", o.cache_type_k, "K cache type: f16, f32, bf16, q8_0, q4_0, q4_1, q5_0, q5_1 (-ctk)");
  app.add_option("--cache-type-v", o.cache_type_v, "V cache type as -ctk; quantized needs flash attention (-ctv)");
  app.add_flag("--list-devices", o.list_devices, "print the devices and exit");
  app.add_option("--pipeline-copies", o.n_copies, "pipeline parallelism: input copies per split (1-8)");
  app.add_option("--sim-devices", o.sim_devices, "simulated devices, e.g. 8GiB,8GiB or 2x24GiB");
  app.add_option("--comm", o.comm, "-sm tensor collectives: auto, inproc, mpi (one member per rank) or nccl")
      ->transform(CLI::CheckedTransformer(std::map<std::string, CommKind>{
          {"auto", CommKind::auto_select}, {"inproc", CommKind::inproc}, {"mpi", CommKind::mpi}, {"nccl", CommKind::nccl}}));
  app.add_option("--reduce-bf16", o.reduce_bf16,
                 "-sm tensor: AllReduce tensors of at least N elements in BF16 (half the bytes; -1 = never)");
  app.add_flag("--json", o.json, "machine-readable result on stdout");
}

namespace {
// -fa as llama.cpp takes it: on/off/auto, and 1/0 (older builds' spelling). auto is on here:
// flash attention handles every cache type.
std::optional<bool> flash_attn_on(const std::string& v) {
  if (v == "on" || v == "1" || v == "auto" || v == "true") return true;
  if (v == "off" || v == "0" || v == "false") return false;
  return std::nullopt;
}

DType cache_type(const std::string& name, const char* flag) {
  const std::optional<DType> t = kv_cache_type(name);
  LOOM_CHECK(t, usage, "{}: unknown KV cache type '{}' ({})", flag, name, kv_cache_type_names());
  return *t;
}
}  // namespace

void validate_common(const CommonOptions& o) {
  LOOM_CHECK(o.n_ctx >= 0 && o.n_ctx <= (1 << 24), usage, "-c {}: must be between 0 and 16777216", o.n_ctx);
  LOOM_CHECK(o.n_batch >= 1 && o.n_batch <= (1 << 20), usage, "-b {}: must be between 1 and 1048576", o.n_batch);
  LOOM_CHECK(o.n_ubatch >= 1 && o.n_ubatch <= (1 << 20), usage, "-ub {}: must be between 1 and 1048576", o.n_ubatch);
  LOOM_CHECK(o.n_threads >= -1 && o.n_threads <= 1024, usage, "-t {}: must be between 1 and 1024 (-1 or 0: all cores)",
             o.n_threads);
  LOOM_CHECK(flash_attn_on(o.flash_attn).has_value(), usage, "-fa '{}': expected on, off, auto, 1 or 0",
             o.flash_attn);
  LOOM_CHECK(o.comm == CommKind::auto_select || o.comm == CommKind::inproc || o.split_mode == SplitMode::tensor,
             usage, "--comm {}: only with -sm tensor", o.comm == CommKind::mpi ? "mpi" : "nccl");
  LOOM_CHECK(o.comm != CommKind::nccl, unsupported,
             "--comm nccl: NCCL groups need CUDA devices, which this build does not drive yet (use inproc or mpi)");
  cache_type(o.cache_type_k, "-ctk");
  cache_type(o.cache_type_v, "-ctv");
  (void)cpu_placement(o);
  LOOM_CHECK(std::isfinite(o.yarn.ext_factor) && std::isfinite(o.yarn.attn_factor), usage,
             "--yarn-ext-factor / --yarn-attn-factor: must be finite numbers");
  for (const auto& [flag, beta] :
       {std::pair{"--yarn-beta-fast", o.yarn.beta_fast}, {"--yarn-beta-slow", o.yarn.beta_slow}})
    LOOM_CHECK(!beta || (*beta > 0 && std::isfinite(*beta)), usage, "{} {}: must be positive", flag, beta.value_or(0));
  LOOM_CHECK(o.prio >= -1 && o.prio <= 3, usage,
             "--prio {}: expected -1 (low), 0 (normal), 1 (medium), 2 (high) or 3 (realtime)", o.prio);
  LOOM_CHECK(o.n_cpu_moe >= 0, usage, "-ncmoe {}: must be 0 or more", o.n_cpu_moe);
  kv_overrides(o);
  lora_adapters(o);
  control_vectors(o);
  if (o.n_gpu_layers != "auto" && o.n_gpu_layers != "all") {
    try {
      size_t pos = 0;
      (void)std::stol(o.n_gpu_layers, &pos);
      LOOM_CHECK(pos == o.n_gpu_layers.size(), usage, "");
    } catch (const std::exception&) {
      fail(ErrorKind::usage, "-ngl '{}': expected a number, auto or all", o.n_gpu_layers);
    }
  }
}

SessionParams session_params(const CommonOptions& o) {
  validate_common(o);
  SessionParams p;
  p.n_ctx = o.n_ctx;
  p.n_batch = o.n_batch;
  p.n_ubatch = o.n_ubatch;
  p.n_threads = o.n_threads;
  p.type_k = cache_type(o.cache_type_k, "-ctk");
  p.type_v = cache_type(o.cache_type_v, "-ctv");
  // flash attention reads every cache type; "off" uses the plain path (a quantized K, not V: Session checks)
  p.flash_attn = *flash_attn_on(o.flash_attn);
  p.kv_offload = !o.no_kv_offload;
  p.op_offload = !o.no_op_offload;
  p.n_copies = o.n_copies;
  if (o.comm == CommKind::mpi) p.comm = &mpi_world();
  LOOM_CHECK(o.reduce_bf16 >= -1, usage, "--reduce-bf16 {}: must be -1 (never) or a number of elements", o.reduce_bf16);
  if (o.reduce_bf16 >= 0) p.reduce_bf16_min = (size_t)o.reduce_bf16;
  return p;
}

// A directory, FIFO or device is refused (it would read as an empty prompt, or block).

bool is_output_rank(const CommonOptions& o) { return o.comm != CommKind::mpi || mpi_world().rank() == 0; }

void print_devices(const CommonOptions& o) {
  RunDevices d = make_run_devices(o);
  fmt::print("{}", list_devices(d.set));
}

RunDevices make_run_devices(const CommonOptions& o) {
  RunDevices d;
  const int threads = o.n_threads > 0 ? o.n_threads : ThreadPool::default_threads();
  d.set = make_devices(o.sim_devices, threads, cpu_placement(o));
  apply_priority(o.prio);
  d.selected = o.devices.empty() ? d.set.all : select_devices(d.set, o.devices);
  return d;
}

PlacementParams placement_params(const CommonOptions& o, const RunDevices& devices) {
  validate_common(o);
  PlacementParams p;
  p.devices = devices.selected;
  if (o.n_gpu_layers == "all" || o.n_gpu_layers == "auto") {
    p.n_gpu_layers = -1;
  } else {
    p.n_gpu_layers = std::stol(o.n_gpu_layers);
    LOOM_CHECK(p.n_gpu_layers >= -1, usage, "-ngl {}: must be -1 (all) or more", p.n_gpu_layers);
  }
  p.split_mode = o.split_mode;
  if (!o.tensor_split.empty()) p.tensor_split = parse_tensor_split(o.tensor_split);
  if (o.split_mode == SplitMode::tensor)
    set_tensor_parallel_members(p, o.devices, o.comm == CommKind::mpi ? &mpi_world() : nullptr);
  p.main_gpu = o.main_gpu;
  p.overrides = o.overrides;
  p.cpu_moe = o.cpu_moe;
  p.n_cpu_moe = o.n_cpu_moe;
  p.mmap = o.mmap;
  p.repack = o.repack;
  return p;
}

std::vector<KvOverride> kv_overrides(const CommonOptions& o) {
  std::vector<KvOverride> out;
  for (const std::string& spec : o.kv_overrides)
    for (KvOverride& kv : parse_kv_overrides(spec)) out.push_back(std::move(kv));
  // The RoPE flags win over --override-kv, as llama.cpp's context parameters win over the model's.
  auto positive = [](double v, const char* flag) {
    LOOM_CHECK(v == 0 || (std::isfinite(v) && v > 0), usage, "{} {}: must be a positive number", flag, v);
    return v > 0;
  };
  auto set = [&](const char* key, gguf::Value v) { out.push_back({std::string("{arch}.") + key, std::move(v)}); };
  if (!o.rope_scaling.empty()) {
    LOOM_CHECK(o.rope_scaling == "none" || o.rope_scaling == "linear" || o.rope_scaling == "yarn", usage,
               "--rope-scaling '{}': expected none, linear or yarn", o.rope_scaling);
    set("rope.scaling.type", gguf::Value::string(o.rope_scaling));
  }
  LOOM_CHECK(o.rope_scale == 0 || o.rope_freq_scale == 0, usage, "give --rope-scale or --rope-freq-scale, not both");
  if (positive(o.rope_scale, "--rope-scale"))
    set("rope.scaling.factor", gguf::Value::floating(gguf::ValueType::F64, o.rope_scale));
  if (positive(o.rope_freq_scale, "--rope-freq-scale"))
    set("rope.scaling.factor", gguf::Value::floating(gguf::ValueType::F64, 1.0 / o.rope_freq_scale));
  if (positive(o.rope_freq_base, "--rope-freq-base"))
    set("rope.freq_base", gguf::Value::floating(gguf::ValueType::F64, o.rope_freq_base));
  LOOM_CHECK(o.yarn_orig_ctx >= 0 && o.yarn_orig_ctx <= (int64_t)1 << 24, usage,
             "--yarn-orig-ctx {}: must be between 0 and 16777216", o.yarn_orig_ctx);
  if (o.yarn_orig_ctx > 0)
    set("rope.scaling.original_context_length", gguf::Value::integer(gguf::ValueType::U32, o.yarn_orig_ctx));
  return out;
}

namespace {
// A SCALE argument of --lora-scaled / --control-vector-scaled.
float parse_scale(const char* flag, const std::string& file, const std::string& v) {
  float scale = 0;
  size_t pos = 0;
  try {
    scale = std::stof(v, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  LOOM_CHECK(pos == v.size() && pos > 0 && std::isfinite(scale), usage, "{} {} '{}': the scale must be a finite number",
             flag, file, v);
  return scale;
}
}  // namespace

std::vector<LoraAdapterSpec> lora_adapters(const CommonOptions& o) {
  std::vector<LoraAdapterSpec> out;
  for (const std::string& path : o.lora) {
    LOOM_CHECK(!path.empty(), usage, "--lora: an empty file name");
    out.push_back({path, 1.0f});
  }
  LOOM_CHECK(o.lora_scaled.size() % 2 == 0, usage, "--lora-scaled: expected FNAME SCALE");
  for (size_t i = 0; i < o.lora_scaled.size(); i += 2)
    out.push_back({o.lora_scaled[i], parse_scale("--lora-scaled", o.lora_scaled[i], o.lora_scaled[i + 1])});
  return out;
}

ControlVectorOptions control_vectors(const CommonOptions& o) {
  ControlVectorOptions out;
  for (const std::string& path : o.cvec) out.files.push_back({path, 1.0f});
  LOOM_CHECK(o.cvec_scaled.size() % 2 == 0, usage, "--control-vector-scaled: expected FNAME SCALE");
  for (size_t i = 0; i < o.cvec_scaled.size(); i += 2)
    out.files.push_back(
        {o.cvec_scaled[i], parse_scale("--control-vector-scaled", o.cvec_scaled[i], o.cvec_scaled[i + 1])});
  if (!o.cvec_range.empty()) {
    LOOM_CHECK(o.cvec_range.size() == 2 && o.cvec_range[0] >= 0 && o.cvec_range[1] >= 0, usage,
               "--control-vector-layer-range: expected START END, layers 0 or more");
    LOOM_CHECK(!out.files.empty(), usage, "--control-vector-layer-range: give --control-vector FILE too");
    out.layer_start = o.cvec_range[0];
    out.layer_end = o.cvec_range[1];
  }
  return out;
}

std::unique_ptr<Model> load_model(const CommonOptions& o, const RunDevices& devices, bool need_data) {
  LOOM_CHECK(!o.model.empty(), usage, "no model given (-m FILE)");
  ModelLoadOptions lo;
  lo.need_data = need_data;
  lo.kv_overrides = kv_overrides(o);
  lo.adapters = lora_adapters(o);
  lo.control_vectors = control_vectors(o);
  lo.yarn = o.yarn;
  lo.placement = placement_params(o, devices);
  // A progress line while big weights are copied (a terminal only: logs and pipes stay clean).
  int shown = -1;
  if (isatty(STDERR_FILENO))
    lo.progress = [&shown](size_t done, size_t total) {
      if (total < (size_t(256) << 20)) return;
      const int pct = (int)(100 * done / total);
      if (pct == shown) return;
      shown = pct;
      fmt::print(stderr, "\rloading weights: {:3d}% ({:.2f} / {:.2f} GiB){}", pct, (double)done / (1 << 30),
                 (double)total / (1 << 30), done == total ? "\n" : "");
      std::fflush(stderr);
    };
  std::unique_ptr<Model> model = Model::load(o.model, lo);
  log_model(*model, o.model);
  if (o.mlock && mlockall(MCL_CURRENT) != 0)
    logger().warn("--mlock: cannot lock {:.2f} MiB in RAM ({}); raise the limit (ulimit -l) or run without --mlock",
                  (double)model->n_bytes() / (1 << 20), std::strerror(errno));
  return model;
}

void log_model(const Model& model, const std::string& path) {
  spdlog::logger& log = logger();
  if (!log.should_log(spdlog::level::info)) return;
  const HParams& hp = model.hparams();
  const gguf::File& f = model.file();
  log.info("load: file = {} (GGUF v{}, {:.2f} MiB, {} tensors)", path, f.version(), (double)f.file_size() / (1 << 20),
           model.weight_tensors().size());
  log.info("load: arch = {}, type = {}, params = {:.2f} M", arch_name(hp.arch), model.type_name(),
           (double)model.n_params() / 1e6);
  log.info("load: n_layer = {}, n_embd = {}, n_head = {}, n_head_kv = {}, head_dim = {}, n_ff = {}, n_vocab = {}, "
           "n_ctx_train = {}", hp.n_layer, hp.n_embd, hp.n_head, hp.n_head_kv, hp.head_dim, hp.n_ff, hp.n_vocab,
           hp.n_ctx_train);
  if (hp.n_rot > 0) log.info("load: n_rot = {} (rotated dims per head)", hp.n_rot);
  if (hp.n_expert > 0) log.info("load: n_expert = {}, n_expert_used = {}, n_ff_exp = {}", hp.n_expert, hp.n_expert_used, hp.n_ff_exp);
  if (hp.arch == Arch::glm4moe)
    log.info("load: n_expert_shared = {}, n_layer_dense_lead = {}, gating = {}, weights {}normalized, scale {}",
             hp.n_expert_shared, hp.n_layer_dense_lead,
             hp.expert_gating == ExpertGating::sigmoid ? "sigmoid" : "softmax", hp.expert_weights_norm ? "" : "not ",
             hp.expert_weights_scale);
  if (hp.n_layer_nextn > 0)
    log.info("load: {} multi-token-prediction layer{} after the others: in the file, not run (as llama.cpp)",
             hp.n_layer_nextn, hp.n_layer_nextn == 1 ? "" : "s");
  std::map<std::string, int> types;
  for (const Tensor* t : model.weight_tensors()) ++types[dtype_name(t->type)];
  for (const auto& [name, n] : types) log.info("load: type {:>6}: {:4d} tensors", name, n);
  for (size_t d = 0; d < model.devices().size(); ++d)
    log.info("load: {:>8} model buffer = {:10.2f} MiB", model.devices()[d]->name(),
             (double)model.device_bytes()[d] / (1 << 20));
  log.info("load: CPU weights {}", model.cpu_weights_mapped() ? "used in place in the file mapping (--mmap)"
                                                               : "read into memory (--no-mmap)");
}

void log_session(const Session& session) {
  spdlog::logger& log = logger();
  if (!log.should_log(spdlog::level::info)) return;
  const SessionParams& p = session.params();
  log.info("context: n_ctx = {}, n_batch = {}, n_ubatch = {}, flash_attn = {}, type_k = {}, type_v = {}", p.n_ctx,
           p.n_batch, p.n_ubatch, p.flash_attn ? "on" : "off", dtype_name(p.type_k), dtype_name(p.type_v));
  for (const MemoryBreakdown& m : session.memory_breakdown())
    log.info("context: {:>8} KV buffer = {:10.2f} MiB, compute buffer = {:10.2f} MiB", m.device,
             (double)m.context_bytes / (1 << 20), (double)m.compute_bytes / (1 << 20));
}

}  // namespace loom::tools
