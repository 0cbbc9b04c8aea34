// A backend registered from this file alone (no edit anywhere else): the registry lists it in
// --list-devices, and a tiny llama runs on it through loom-run's code path (tools-common device
// selection and loading, Session, generate, the --json report) with the tokens of a CPU run.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "loom/backend/registry.h"
#include "loom/model/generate.h"
#include "loom/model/model_file.h"
#include "loom/model/report.h"
#include "loom/tools/common.h"

namespace loom {
namespace {

// The factory offers FAKE0 only while a test here asks for it, so other suites' device lists
// stay as they are.
bool g_offer_fake = false;
std::atomic<int> g_fake_computes{0};
constexpr size_t kFakeCapacity = size_t(256) << 20;

class FakeBuffer final : public Buffer {
 public:
  FakeBuffer(const BufferType& type, void* base, size_t size) : Buffer(type, base, size) {}
  ~FakeBuffer() override { std::free(base_); }
  void set(Tensor* t, const void* src, size_t offset, size_t n) override {
    std::memcpy(static_cast<char*>(t->data) + offset, src, n);
  }
  void get(const Tensor* t, void* dst, size_t offset, size_t n) const override {
    std::memcpy(dst, static_cast<const char*>(t->data) + offset, n);
  }
  void clear(uint8_t value) override { std::memset(base_, value, size_); }
};

class FakeDevice;

// Memory the host cannot use directly (is_host false): the planner must copy inputs and outputs.
class FakeBufferType final : public BufferType {
 public:
  explicit FakeBufferType(FakeDevice& d) : device_(d) {}
  const char* name() const override { return "FAKE"; }
  size_t alignment() const override { return 64; }
  bool is_host() const override { return false; }
  Status alloc(size_t size, std::unique_ptr<Buffer>& out) const override;
  Device& device() const override;

 private:
  FakeDevice& device_;
};

// Runs its nodes with the host device's kernels (the memory is ordinary host memory) and counts them.
class FakeStream final : public Stream {
 public:
  explicit FakeStream(std::unique_ptr<Stream> host) : host_(std::move(host)) {}
  Status compute(const Graph& graph, std::span<Tensor* const> nodes) override {
    g_fake_computes += (int)nodes.size();
    return host_->compute(graph, nodes);
  }
  void synchronize() override { host_->synchronize(); }

 private:
  std::unique_ptr<Stream> host_;
};

class FakeDevice final : public Device {
 public:
  FakeDevice() : host_(registry().host_device({.n_threads = 1})), bt_(*this) {}
  const std::string& name() const override { return name_; }
  DeviceKind kind() const override { return DeviceKind::gpu; }
  MemoryInfo memory() const override { return {kFakeCapacity - used, kFakeCapacity}; }
  DeviceCaps caps() const override { return {}; }
  bool supports_op(const Tensor* node) const override { return host_->supports_op(node); }
  bool supports_buffer_type(const BufferType& bt) const override { return &bt == &bt_; }
  const BufferType& buffer_type() const override { return bt_; }
  std::unique_ptr<Stream> create_stream() override { return std::make_unique<FakeStream>(host_->create_stream()); }

  size_t used = 0;

 private:
  std::string name_ = "FAKE0";
  std::unique_ptr<Device> host_;
  FakeBufferType bt_;
};

Status FakeBufferType::alloc(size_t size, std::unique_ptr<Buffer>& out) const {
  if (device_.used + size > kFakeCapacity) return Status::error(ErrorKind::out_of_memory, "FAKE0 is full");
  void* p = std::aligned_alloc(64, (size + 63) / 64 * 64 + 64);
  if (!p) return Status::error(ErrorKind::out_of_memory, "FAKE0: host allocation failed");
  device_.used += size;
  out = std::make_unique<FakeBuffer>(*this, p, size);
  return Status::ok();
}

Device& FakeBufferType::device() const { return device_; }

const bool registered = registry().add({.name = "FAKE", .order = 10, .host = false, .create = [](const DeviceOptions&) {
  BackendDevices found;
  if (g_offer_fake)
    found.devices.push_back(std::make_unique<FakeDevice>());
  else
    found.note = "no FAKE device (not asked for)";
  return found;
}});

class FakeBackend : public ::testing::Test {
 protected:
  void SetUp() override { g_offer_fake = true; }
  void TearDown() override { g_offer_fake = false; }
};

std::string tiny_llama() {
  static const std::string path = [] {
    NewModelOptions o;
    o.hparams = preset_hparams(Arch::llama, "tiny");
    o.seed = 5;
    o.output = (std::filesystem::temp_directory_path() / ("loom-fake-" + std::to_string(getpid()) + ".gguf")).string();
    make_random_model(o);
    return o.output;
  }();
  return path;
}

// loom-run's path for `loom-run -m M -p "..." -n 8 --temp 0 -t 1 [-dev DEVICES] --json`.
nlohmann::json run_like_loom_run(const std::string& devices) {
  tools::CommonOptions o;
  o.model = tiny_llama();
  o.n_ctx = 64;
  o.n_threads = 1;
  o.devices = devices;
  tools::RunDevices d = tools::make_run_devices(o);
  std::unique_ptr<Model> model = tools::load_model(o, d);
  Session session(*model, tools::session_params(o));
  SamplerParams sp;
  sp.temp = 0;
  Sampler sampler(sp);
  GenerateResult r = generate(session, "the cat sat on the mat", 8, sampler, {});
  return generate_json(r, 0, session);
}

TEST_F(FakeBackend, ListedByTheRegistryAndTheTools) {
  ASSERT_TRUE(registered);
  DeviceSet set = make_devices("1x64MiB", 1);
  ASSERT_EQ(set.all.size(), 3u);
  EXPECT_EQ(set.all[0]->name(), "FAKE0");  // order 10: before SIM (100) and the CPU
  EXPECT_EQ(set.all[1]->name(), "SIM0");
  EXPECT_EQ(set.all.back(), set.cpu);
  EXPECT_EQ(select_devices(set, "FAKE0").front()->name(), "FAKE0");

  tools::CommonOptions o;
  testing::internal::CaptureStdout();
  tools::print_devices(o);
  const std::string text = testing::internal::GetCapturedStdout();
  EXPECT_NE(text.find("FAKE0  gpu  256  256  -\n"), std::string::npos) << text;
  EXPECT_NE(text.find("CPU  cpu  "), std::string::npos) << text;

  g_offer_fake = false;
  const std::string without = list_devices(make_devices("", 1));
  EXPECT_EQ(without.find("FAKE0"), std::string::npos) << without;
  EXPECT_NE(without.find("FAKE: no FAKE device (not asked for)\n"), std::string::npos) << without;
}

TEST_F(FakeBackend, RunsATinyLlamaLikeTheCpu) {
  const nlohmann::json cpu = run_like_loom_run("none");
  g_fake_computes = 0;
  const nlohmann::json fake = run_like_loom_run("FAKE0");
  EXPECT_GT(g_fake_computes.load(), 0);
  EXPECT_EQ(fake["tokens"], cpu["tokens"]);
  ASSERT_EQ(fake["devices"].size(), 2u);
  EXPECT_EQ(fake["devices"][0]["name"], "FAKE0");
  EXPECT_GT(fake["devices"][0]["model_bytes"].get<size_t>(), 0u);
  EXPECT_GT(fake["devices"][0]["context_bytes"].get<size_t>(), 0u);
  // one-token steps after the first run the same graph and plan again (n_gen - 1 decodes, the
  // first of them building)
  const int n_gen = fake["n_gen"].get<int>();
  EXPECT_GE(fake["perf"]["graphs_reused"].get<int>(), n_gen - 2);
}

}  // namespace
}  // namespace loom
