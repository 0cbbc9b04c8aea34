// loom-bench's sweeps, as llama-bench has them: value lists and ranges for its flags, one row per
// (settings, test) measured, and the md / csv / json / jsonl / sql printers of those rows.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "loom/model/bench.h"

namespace loom {

// llama-bench's number lists: "a,b,c", with ranges "first-last" (step 1), "first-last+step" and
// "first-last*mult" among them. Throws Error(usage) naming the flag for anything else (negative
// values included).
std::vector<int64_t> parse_bench_ints(std::string_view text, const char* flag);
// Comma-separated words (none empty).
std::vector<std::string> parse_bench_words(std::string_view text, const char* flag);
// -pg: "pp,tg" pairs, several separated by ';' or given as "pp1,tg1;pp2,tg2".
std::vector<std::pair<int64_t, int64_t>> parse_bench_pairs(std::string_view text, const char* flag);

// The settings one row ran with, and its measurement.
struct BenchRow {
  std::string model_filename, model_type, backend;  // backend: the devices that held the weights
  size_t model_size = 0, model_n_params = 0;
  int n_threads = 0;
  int64_t n_batch = 0, n_ubatch = 0;
  std::string n_gpu_layers, flash_attn, type_k, type_v, devices;
  bool no_kv_offload = false;  // -nkvo 1: the KV cache in host memory
  bool use_mmap = false;       // -mmp 1: CPU weights used in place in the file mapping
  BenchTest test;
};

// Settings shown as markdown columns beyond model/size/params/backend/threads/test/t/s: those
// given more than one value (csv/json/sql always carry every field).
struct BenchColumns {
  bool n_batch = false, n_ubatch = false, n_gpu_layers = false, no_kv_offload = false, flash_attn = false,
       use_mmap = false, type_k = false, type_v = false, devices = false;
  bool bandwidth = false;  // --bandwidth: the weights' read rate against the probe's, per tg test
};

class BenchPrinter {
 public:
  virtual ~BenchPrinter() = default;
  virtual void header() {}
  virtual void row(const BenchRow& r) = 0;
  virtual void footer() {}
};
// format: md, csv, json, jsonl or sql (throws Error(usage) otherwise). Rows go to out as they come
// (json: the array closes in footer()).
std::unique_ptr<BenchPrinter> make_bench_printer(std::string_view format, const BenchColumns& columns, FILE* out);
bool is_bench_format(std::string_view format);

}  // namespace loom
