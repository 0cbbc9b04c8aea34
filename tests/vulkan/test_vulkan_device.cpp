// The Vulkan backend on whatever Vulkan device the machine has (Mesa's lavapipe in CI): devices
// and limits, buffers (round trip, pinned host type, out-of-memory as a Status), command-buffer
// reuse, optimize_graph's barriers, and every op case the backend claims against the CPU.
// Every test skips when the build has no Vulkan backend or the machine no Vulkan device.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>

#include "loom/graph/ops.h"
#include "loom/backend/registry.h"
#include "loom/testing/op_case.h"
#include "loom/testing/runner.h"
#ifdef LOOM_HAVE_VULKAN
#include "loom/vulkan/vulkan.h"
#endif

namespace loom {
namespace {

#ifdef LOOM_HAVE_VULKAN

class VulkanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string note;
    devices_ = vulkan::make_devices(note);
    if (devices_.empty()) GTEST_SKIP() << "no Vulkan device: " << note;
    dev_ = devices_.front().get();
  }
  std::vector<std::unique_ptr<Device>> devices_;
  Device* dev_ = nullptr;
};

TEST_F(VulkanTest, DevicesAreNamedInOrderWithMemoryAndCaps) {
  for (size_t i = 0; i < devices_.size(); ++i) EXPECT_EQ(devices_[i]->name(), "Vulkan" + std::to_string(i));
  const MemoryInfo m = dev_->memory();
  EXPECT_GT(m.total, 0u);
  EXPECT_LE(m.free, m.total);
  EXPECT_TRUE(dev_->caps().async && dev_->caps().events && dev_->caps().host_buffer);
  EXPECT_GE(dev_->buffer_type().alignment(), 4u);
  EXPECT_GT(dev_->buffer_type().max_size(), 0u);
  EXPECT_NE(vulkan::describe(*dev_).find("max binding"), std::string::npos);
}

TEST_F(VulkanTest, BufferBytesRoundTripAndOutOfMemoryIsAStatus) {
  std::unique_ptr<Buffer> buf;
  ASSERT_TRUE(dev_->buffer_type().alloc(4096, buf));
  EXPECT_FALSE(buf->type().is_host());
  Context ctx;
  Tensor* t = ctx.new_tensor(DType::F32, {100});
  ASSERT_TRUE(buf->init_tensor(t, 256));
  std::vector<float> in(100), out(100, 0.0f);
  std::iota(in.begin(), in.end(), 1.0f);
  buf->set(t, in.data(), 0, 400);
  buf->get(t, out.data(), 0, 400);
  EXPECT_EQ(in, out);
  std::unique_ptr<Buffer> huge;
  const Status st = dev_->buffer_type().alloc(dev_->memory().total + (size_t(1) << 30), huge);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.kind(), ErrorKind::out_of_memory);
  EXPECT_NE(st.message().find(dev_->name()), std::string::npos) << st.message();
}

// x -> three independent two-step chains -> sum: in graph order the chains interleave so each
// second step needs its own barrier; grouped, one barrier serves all first steps.
struct Chains {
  Context ctx;
  Graph g;
  Tensor *x = nullptr, *out = nullptr;
  std::vector<Tensor*> nodes;
  std::unique_ptr<Buffer> buf;

  explicit Chains(Device& dev) {
    x = ctx.new_tensor(DType::F32, {64, 4});
    Tensor* sum = nullptr;
    for (int c = 0; c < 3; ++c) {
      Tensor* a = ops::scale(ctx, x, 1.0f + (float)c);
      Tensor* b = ops::silu(ctx, a);
      sum = sum ? ops::add(ctx, sum, b) : b;
    }
    out = sum;
    g.build_forward(out);
    nodes = g.nodes();
    size_t total = 0;
    for (Tensor& t : ctx.tensors()) total += (t.nbytes() + 255) / 256 * 256;
    dev.buffer_type().alloc(total, buf).throw_if_error();
    size_t off = 0;
    for (Tensor& t : ctx.tensors()) {
      buf->init_tensor(&t, off).throw_if_error();
      off += (t.nbytes() + 255) / 256 * 256;
    }
    std::vector<float> v(256);
    for (size_t i = 0; i < v.size(); ++i) v[i] = (float)i / 64.0f - 2.0f;
    buf->set(x, v.data(), 0, v.size() * 4);
  }
  std::vector<float> run(Stream& s, const std::vector<Tensor*>& order) {
    EXPECT_TRUE(s.compute(g, std::span<Tensor* const>(order.data(), order.size())));
    s.synchronize();
    std::vector<float> r(256);
    buf->get(out, r.data(), 0, r.size() * 4);
    return r;
  }
};

TEST_F(VulkanTest, OptimizeGraphSharesBarriersAndKeepsResults) {
  Chains ch(*dev_);
  std::unique_ptr<Stream> s = dev_->create_stream();
  const int before = s->count_barriers(ch.nodes);
  std::vector<Tensor*> order = ch.nodes;
  s->optimize_graph(order);
  const int after = s->count_barriers(order);
  EXPECT_EQ(before, 5);  // a1 | b1 a2 | b2 a3 | b3 + | +  (one barrier per '|')
  EXPECT_LT(after, before);
  ASSERT_EQ(order.size(), ch.nodes.size());
  for (size_t i = 0; i < order.size(); ++i)  // every node after its sources
    for (const Tensor* src : order[i]->src) {
      if (src && src->op != OpKind::NONE) {
        EXPECT_LT(std::find(order.begin(), order.end(), src) - order.begin(), (std::ptrdiff_t)i);
      }
    }
  EXPECT_EQ(ch.run(*s, ch.nodes), ch.run(*s, order));
}

TEST_F(VulkanTest, CommandBuffersAreReusedWhileTheSplitIsUnchanged) {
  Chains ch(*dev_);
  std::unique_ptr<Stream> s = dev_->create_stream();
  vulkan::StreamStats a, b, c;
  ASSERT_TRUE(vulkan::stream_stats(*dev_, a));
  const std::vector<float> first = ch.run(*s, ch.nodes);
  ASSERT_TRUE(vulkan::stream_stats(*dev_, b));
  EXPECT_EQ(b.recordings, a.recordings + 1);
  EXPECT_EQ(ch.run(*s, ch.nodes), first);
  ASSERT_TRUE(vulkan::stream_stats(*dev_, c));
  EXPECT_EQ(c.recordings, b.recordings);  // the same split: resubmitted, not recorded
  EXPECT_EQ(c.reuse_hits, b.reuse_hits + 1);
  ch.g.invalidate();  // a new graph uid: recorded again
  ch.run(*s, ch.nodes);
  vulkan::StreamStats d;
  ASSERT_TRUE(vulkan::stream_stats(*dev_, d));
  EXPECT_EQ(d.recordings, c.recordings + 1);
}

TEST_F(VulkanTest, EveryClaimedOpCasePassesAgainstTheCpu) {
  int ok = 0;
  for (const testing::OpCase* c : testing::cases_for(testing::kModeTest)) {
    const testing::CaseResult r = testing::run_test(*c, *dev_);
    EXPECT_TRUE(r.status == testing::CaseStatus::ok || r.status == testing::CaseStatus::not_supported)
        << r.name() << ": " << r.message;
    ok += r.status == testing::CaseStatus::ok;
  }
  EXPECT_GE(ok, 200);
}

// The mat-mul shaders round the activations exactly as the CPU's kernels do (int8 blocks for
// quantized weights, per expert for MUL_MAT_ID), so every product case is within float summation
// order of the CPU: NMSE 1e-8 where activations kept in f32 give ~1e-5 (the catalog's shared 5e-4
// also serves devices that do not round like the CPU).
TEST_F(VulkanTest, MatMulsRoundActivationsAsTheCpu) {
  int ran = 0;
  for (const testing::OpCase* c : testing::cases_for(testing::kModeTest)) {
    if (c->op != "MUL_MAT" && c->op != "MUL_MAT_ID") continue;
    testing::OpCase strict = *c;
    strict.max_nmse = 1e-8;
    const testing::CaseResult r = testing::run_test(strict, *dev_);
    EXPECT_NE(r.status, testing::CaseStatus::fail) << r.name() << ": " << r.message;
    ran += r.status == testing::CaseStatus::ok;
  }
  EXPECT_GE(ran, 100);
  // Experts of one MUL_MAT_ID on both of the CPU's paths: expert 0 takes 24 columns (its GEMM:
  // 32-value blocks for Q4_K, f32 for Q5_K, bf16 for BF16), experts 1-3 take 8 each (its dots).
  for (DType t : {DType::Q4_K, DType::Q5_K, DType::BF16, DType::Q8_0}) {
    testing::OpCase c;
    c.op = "MUL_MAT_ID";
    c.params = std::string("type_a=") + dtype_name(t) + ",n_expert=4,n_used=2,tokens=24 (experts of 24 and 8 columns)";
    c.max_nmse = 1e-8;
    c.build = [t](testing::CaseBuilder& b) {
      std::vector<float> ids;
      for (int tok = 0; tok < 24; ++tok) ids.insert(ids.end(), {0.0f, (float)(1 + tok % 3)});
      ops::mul_mat_id(b.ctx(), b.input(t, {256, 16, 4}), b.input(DType::F32, {256, 1, 24}),
                      b.input(DType::I32, {2, 24}, testing::LeafInit::values(ids)));
    };
    const testing::CaseResult r = testing::run_test(c, *dev_);
    EXPECT_EQ(r.status, testing::CaseStatus::ok) << r.name() << ": " << r.message;
  }
}

// A weight larger than one binding (lavapipe binds 128 MiB; LOOM_VULKAN_MAX_BINDING pretends
// 64 KiB here) runs on the device in blocks of rows, one dispatch each, and equals the CPU.
TEST_F(VulkanTest, MatMulOfAWeightLargerThanOneBindingRunsInRowBlocks) {
  setenv("LOOM_VULKAN_MAX_BINDING", "65536", 1);
  std::string note;
  std::vector<std::unique_ptr<Device>> small = vulkan::make_devices(note);
  unsetenv("LOOM_VULKAN_MAX_BINDING");
  ASSERT_FALSE(small.empty()) << note;
  int ran = 0;
  for (DType t : {DType::F32, DType::Q8_0, DType::Q4_K}) {
    testing::OpCase c;
    c.op = "MUL_MAT";
    c.params = std::string("type_a=") + dtype_name(t) + ",m=700,n=3,k=1024 (weight > 64 KiB)";
    c.max_nmse = 1e-8;  // activations rounded as the CPU rounds them (above)
    c.build = [t](testing::CaseBuilder& b) {
      ops::mul_mat(b.ctx(), b.input(t, {1024, 700}), b.input(DType::F32, {1024, 3}));
    };
    const testing::CaseResult r = testing::run_test(c, *small.front());
    EXPECT_EQ(r.status, testing::CaseStatus::ok) << r.name() << ": " << r.message;
    ran += r.status == testing::CaseStatus::ok;
  }
  EXPECT_EQ(ran, 3);
}

TEST_F(VulkanTest, SoftwareDevicesAreListedButNotDefaults) {
  DeviceSet set = make_devices("", 1);
  const std::vector<Device*> listed = listed_devices(set);
  ASSERT_GE(listed.size(), 2u);
  EXPECT_EQ(listed.front()->name(), "Vulkan0");
  for (Device* d : set.all) EXPECT_FALSE(vulkan::is_software(*d));
  EXPECT_EQ(select_devices(set, "Vulkan0").front()->name(), "Vulkan0");
  EXPECT_THROW(select_devices(set, "Vulkan7"), Error);
}

#else

TEST(VulkanTest, BuiltWithoutVulkan) {
  DeviceSet set = make_devices("", 1);
  bool noted = false;
  for (const std::string& n : set.notes) noted = noted || n.find("not built") != std::string::npos;
  EXPECT_TRUE(noted);
  GTEST_SKIP() << "this build has no Vulkan backend (LOOM_VULKAN=OFF)";
}

#endif

}  // namespace
}  // namespace loom
