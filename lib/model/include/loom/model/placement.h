// Where each weight of a model lives: layers split contiguously across the selected devices
// (-ngl, -sm, -ts, -mg), the output layer on the last device when every layer is offloaded,
// token embeddings on the CPU, then -ot / -cmoe overrides by tensor name.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "loom/backend/device.h"
#include "loom/model/arch.h"

namespace loom {

struct Tensor;
class Communicator;

// -sm: one device (none), whole layers across devices (layer), every layer split across
// tensor-parallel members (tensor).
enum class SplitMode { none, layer, tensor };
// "none", "layer", "tensor"; throws usage naming -sm.
SplitMode parse_split_mode(std::string_view name);

struct PlacementParams {
  std::vector<Device*> devices;    // selected devices, the CPU last (empty: CPU only)
  int64_t n_gpu_layers = -1;       // -1: all (layers + output); otherwise the last N layers
  SplitMode split_mode = SplitMode::layer;
  std::vector<float> tensor_split;   // proportions per non-CPU device (empty: by free memory)
  int main_gpu = 0;                  // split mode none: the one device used
  std::vector<std::string> overrides;  // "REGEX=DEVICE[,REGEX=DEVICE...]" (-ot)
  bool cpu_moe = false;                // -cmoe: every expert tensor on the CPU
  int64_t n_cpu_moe = 0;               // -ncmoe N: the expert tensors of layers 0 .. N-1 on the CPU
  // --mmap: the CPU's weights stay in the file mapping (page cache, 4 KiB pages) instead of a
  // loaded copy in huge-page-backed memory, which decode streams ~10% faster.
  bool mmap = false;
  // The CPU's loaded quantized matrices (a tied token embedding too) repacked in groups of 8 rows for
  // its kernels (same bytes; decode ~1.5-2x faster); --no-repack keeps the file's layout.
  bool repack = true;
  // split mode tensor: the member devices, in rank order (empty: every selected device but the
  // CPU, or the CPU alone); tensor_split then has one proportion per member.
  std::vector<Device*> tp_members;
  // split mode tensor across processes (MPI): this process is member tp_rank of tp_size and
  // holds only its own shard, on tp_members[0]; tensor_split has tp_size proportions (or none).
  int tp_rank = -1;
  int tp_size = 0;
};

struct WeightPlacement {
  std::vector<Device*> devices;  // every device the run uses, CPU last
  std::vector<int> layer_device;  // per layer: index into devices (attention, FFN and KV cache)
  int output_device = 0;          // output_norm and output
  std::unordered_map<std::string, int> tensor_device;  // every weight by name
  Device* cpu() const { return devices.back(); }
};

// Throws usage for bad proportions, unknown device names or regexes.
WeightPlacement place_weights(const HParams& hp, const std::vector<std::string>& tensor_names,
                              const PlacementParams& p);

// -sm tensor: the members are the devices named in `named` (-dev, in its order; the host only
// when named), or every selected device but the host (the host alone when there is none).
// Moves the host last in p.devices and sets p.tp_members; with world (--comm mpi) this process
// is member world->rank() of world->size() and holds only tp_members[0].
void set_tensor_parallel_members(PlacementParams& p, std::string_view named, const Communicator* world);

// "3,1" -> {3, 1}; throws usage naming the flag.
std::vector<float> parse_tensor_split(const std::string& s);

}  // namespace loom
