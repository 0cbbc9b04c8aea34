// Flags shared by every tool that loads a model (docs/CLI.md "Shared flags"), their
// validation, and the translation into library parameters.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "loom/model/model.h"
#include "loom/model/session.h"
#include "loom/backend/registry.h"

namespace CLI {
class App;
}

namespace loom::tools {

// --comm: how tensor-parallel members meet (auto: in this process, as inproc).
enum class CommKind { auto_select, inproc, mpi, nccl };

struct CommonOptions {
  std::string model;
  int64_t n_ctx = 0;
  int64_t n_batch = 2048;
  int64_t n_ubatch = 512;
  int n_threads = 0;
  // the CPU's threads as llama.cpp places them: -C mask, -Cr lo-hi, --cpu-strict 0|1, --poll 0..100;
  // --prio -1..3 the process's priority
  std::string cpu_mask, cpu_range;
  int cpu_strict = 0, poll = 50, prio = 0;
  std::string numa;  // --numa distribute|isolate|numactl
  std::string n_gpu_layers = "-1";
  SplitMode split_mode = SplitMode::layer;
  std::string tensor_split;
  int main_gpu = 0;
  std::string devices;
  std::vector<std::string> overrides;
  std::vector<std::string> kv_overrides;  // --override-kv KEY=TYPE:VALUE,...
  // llama.cpp's RoPE flags, applied as metadata overrides after --override-kv (0 / empty: the file's)
  std::string rope_scaling;  // --rope-scaling none|linear|yarn
  double rope_scale = 0, rope_freq_base = 0, rope_freq_scale = 0;
  int64_t yarn_orig_ctx = 0;
  HParams::YarnTuning yarn;              // --yarn-ext-factor, --yarn-attn-factor, --yarn-beta-fast, --yarn-beta-slow
  std::vector<std::string> lora;         // --lora FNAME (repeated, or FNAME,FNAME)
  std::vector<std::string> lora_scaled;  // --lora-scaled FNAME SCALE: pairs
  std::vector<std::string> cvec;         // --control-vector FNAME
  std::vector<std::string> cvec_scaled;  // --control-vector-scaled FNAME SCALE: pairs
  std::vector<int64_t> cvec_range;       // --control-vector-layer-range START END
  bool cpu_moe = false;
  bool swa_full = false, kv_unified = false;  // accepted: loom's only cache layout (no effect)
  int64_t n_cpu_moe = 0;  // -ncmoe N
  bool mmap = false;
  bool mlock = false;  // mlockall after loading (--mlock)  // CPU weights used in place in the file mapping (--mmap)
  bool repack = true;  // CPU quantized matrices in the kernels' layout (--no-repack, -nr: as in the file)
  std::string flash_attn = "auto";
  bool no_kv_offload = false;  // -nkvo: the KV cache in host memory, attention on the CPU
  bool no_op_offload = false;  // --no-op-offload: host-weight ops stay on the host
  std::string cache_type_k = "f16";
  std::string cache_type_v = "f16";
  bool list_devices = false;
  int n_copies = 1;
  std::string sim_devices;
  CommKind comm = CommKind::auto_select;  // -sm tensor collectives (docs/TENSOR-PARALLEL.md)
  int64_t reduce_bf16 = -1;   // -sm tensor: AllReduce tensors of at least N elements as BF16 (-1: never)
  bool json = false;
};

// Registers the shared flags. model_required: -m must be given (unless --list-devices).
void add_common_flags(CLI::App& app, CommonOptions& o);
// Checks values a flag parser cannot (ranges, type names); throws Error(usage) naming the flag.
void validate_common(const CommonOptions& o);
SessionParams session_params(const CommonOptions& o);
// Every --override-kv entry, parsed (usage errors name the entry), then the RoPE flags' keys
// (`{arch}.rope...`: the loader puts the file's architecture in place of {arch}).
std::vector<KvOverride> kv_overrides(const CommonOptions& o);
// --lora and --lora-scaled as adapters (--lora's first, each flag's in the order given); throws usage.
std::vector<LoraAdapterSpec> lora_adapters(const CommonOptions& o);
// --control-vector, --control-vector-scaled and --control-vector-layer-range; throws usage.
ControlVectorOptions control_vectors(const CommonOptions& o);
// -C, -Cr, --cpu-strict, --numa and --poll as the CPU device's placement (cpu_flags.cpp); throws
// usage. numa_root: where the NUMA nodes' cpulist files are (sysfs; a test's own folder).
ThreadPlacement cpu_placement(const CommonOptions& o, const std::string& numa_root = "/sys/devices/system/node");
// The CPUs of each NUMA node (node0 first) from numa_root/nodeN/cpulist; none where it has none.
std::vector<std::vector<int>> numa_node_cpus(const std::string& numa_root);
// --prio: the process's niceness as llama.cpp sets it (a level the OS refuses is a warning); throws
// usage out of -1..3.
void apply_priority(int prio);
// Prints `NAME  KIND  TOTAL MiB  FREE MiB` per device.
void print_devices(const CommonOptions& o);

// --comm mpi with more than one rank: compares the model's identity (metadata and size), the
// shared flags and `extra` (the tool's own parameters, in the same order on every rank) with
// rank 0's, before any collective. Returns 0 when they agree; otherwise rank 0 prints one line
// naming what differs and every rank gets 2 (the exit code) — no rank hangs.
int check_ranks_agree(const char* tool_name, const CommonOptions& o,
                      const std::vector<std::pair<std::string, std::string>>& extra);
// "N bytes, checksum X": a prompt or text compared across ranks without sending it.
std::string text_fingerprint(std::string_view text);

// The devices of a run: --sim-devices / LOOM_SIM_DEVICES, then -dev selection (CPU last).
struct RunDevices {
  DeviceSet set;
  std::vector<Device*> selected;
};
RunDevices make_run_devices(const CommonOptions& o);
// -ngl/-sm/-ts/-mg/-ot/-cmoe for Model::load.
PlacementParams placement_params(const CommonOptions& o, const RunDevices& devices);
// --comm mpi: false on every rank but 0 (they compute, rank 0 prints).
bool is_output_rank(const CommonOptions& o);
// Model::load with the placement of these options, then the load log (and --mlock).
std::unique_ptr<Model> load_model(const CommonOptions& o, const RunDevices& devices, bool need_data = true);
// The load log at info level (-lv 3, -v, --log-file): file, arch, shape, tensor types, weight
// bytes per device; and for a session its context settings and KV/compute bytes per device.
void log_model(const Model& model, const std::string& path);
void log_session(const Session& session);

}  // namespace loom::tools
