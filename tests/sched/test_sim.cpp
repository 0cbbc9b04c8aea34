// Simulated devices: capacity parsing, the capped arena (out_of_memory naming the device and
// bytes, free = cap - used), buffers that are not host memory, the async stream with events
// and waits across streams, and the device registry (make/select/list).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "loom/backend/registry.h"
#include "sched_test_util.h"

namespace loom::test {
namespace {

TEST(SimSizes, ParsesListsCountsAndUnits) {
  EXPECT_EQ(sim::parse_sim_sizes("8GiB,8GiB"), (std::vector<size_t>{8ull << 30, 8ull << 30}));
  EXPECT_EQ(sim::parse_sim_sizes("2x24GiB"), (std::vector<size_t>{24ull << 30, 24ull << 30}));
  EXPECT_EQ(sim::parse_sim_sizes("512MiB"), (std::vector<size_t>{512ull << 20}));
  EXPECT_EQ(sim::parse_sim_sizes("3x64MiB"), (std::vector<size_t>(3, 64ull << 20)));
  EXPECT_EQ(sim::parse_sim_sizes("2x1k, 1.5GiB, 4096"), (std::vector<size_t>{1024, 1024, 3ull << 29, 4096}));
  EXPECT_TRUE(sim::parse_sim_sizes("").empty());
}

TEST(SimSizes, BadStringsAreUsageErrorsNamingTheString) {
  for (const char* bad : {"8GB", "x8GiB", "0x8GiB", "8GiB,", ",8GiB", "abc", "1.2.3MiB", "0MiB", "2xx4GiB", "-1GiB"}) {
    try {
      sim::parse_sim_sizes(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::usage) << bad;
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
  // more devices than the registry takes: said so, not "bad size"
  try {
    sim::parse_sim_sizes("99x1GiB");
    ADD_FAILURE() << "accepted 99 devices";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("more than 64 devices"), std::string::npos) << e.what();
  }
}

TEST(SimDevice, ArenaHasAHardCapAndReportsFree) {
  sim::SimDevice dev(3, 1000);
  EXPECT_EQ(dev.name(), "SIM3");
  EXPECT_EQ(dev.memory().total, 1000u);
  EXPECT_EQ(dev.memory().free, 1000u);
  EXPECT_FALSE(dev.buffer_type().is_host());
  EXPECT_TRUE(dev.caps().async && dev.caps().events);
  std::unique_ptr<Buffer> a, b;
  ASSERT_TRUE(dev.buffer_type().alloc(600, a));
  EXPECT_EQ(dev.memory().free, 400u);
  Status st = dev.buffer_type().alloc(500, b);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.kind(), ErrorKind::out_of_memory);
  EXPECT_NE(st.message().find("SIM3"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("500 bytes"), std::string::npos) << st.message();
  a.reset();
  EXPECT_EQ(dev.memory().free, 1000u);
  EXPECT_TRUE(dev.buffer_type().alloc(1000, b));
}

TEST(SimDevice, ReadsOnlyItsOwnBuffers) {
  Devices devs(2);
  EXPECT_TRUE(devs.sim(0).supports_buffer_type(devs.sim(0).buffer_type()));
  EXPECT_FALSE(devs.sim(0).supports_buffer_type(devs.sim(1).buffer_type()));
  EXPECT_FALSE(devs.sim(0).supports_buffer_type(devs.cpu->buffer_type()));
  EXPECT_FALSE(devs.cpu->supports_buffer_type(devs.sim(0).buffer_type()));
}

TEST(SimDevice, OpFilterRestrictsSupport) {
  sim::SimDevice dev(0, 1 << 20);
  Context c;
  Tensor* a = c.new_tensor(DType::F32, {4});
  Tensor* s = ops::silu(c, a);
  Tensor* m = ops::scale(c, a, 2.0f);
  ASSERT_TRUE(dev.supports_op(s));
  dev.set_op_filter([](const Tensor* t) { return t->op != OpKind::SILU; });
  EXPECT_FALSE(dev.supports_op(s));
  EXPECT_TRUE(dev.supports_op(m));
}

// x (on SIM0) = scale(w, 2); copied to SIM1 after an event; y = scale(x1, 3) on SIM1.
TEST(SimStream, EventsOrderWorkAcrossStreams) {
  setenv("LOOM_SIM_LATENCY_US", "300", 1);
  Devices devs(2);
  unsetenv("LOOM_SIM_LATENCY_US");
  ASSERT_EQ(devs.sim(0).latency_us(), 300);
  Context c;
  Tensor* w = c.new_tensor(DType::F32, {64});
  Tensor* x = ops::scale(c, w, 2.0f);
  Tensor* x1 = c.new_tensor(DType::F32, {64});
  Tensor* y = ops::scale(c, x1, 3.0f);
  std::vector<std::unique_ptr<Buffer>> bufs;
  ASSERT_TRUE(place(w, devs.sim(0), bufs));
  ASSERT_TRUE(place(x, devs.sim(0), bufs));
  ASSERT_TRUE(place(x1, devs.sim(1), bufs));
  ASSERT_TRUE(place(y, devs.sim(1), bufs));
  std::vector<float> ones(64, 1.0f);
  write(w, ones.data(), 256);
  Graph g;
  g.build_forward(x);
  auto s0 = devs.sim(0).create_stream();
  auto s1 = devs.sim(1).create_stream();
  Tensor* nx[] = {x};
  Tensor* ny[] = {y};
  for (int round = 0; round < 5; ++round) {
    ASSERT_TRUE(s0->compute(g, nx));
    auto e0 = s0->record();
    ASSERT_TRUE(e0);
    s1->wait(*e0);
    ASSERT_TRUE(s1->copy(x, x1));
    ASSERT_TRUE(s1->compute(g, ny));
    auto e1 = s1->record();
    e1->synchronize();
    EXPECT_TRUE(e1->is_complete());
    EXPECT_TRUE(e0->is_complete());
    const std::vector<uint32_t> bits = read_bits(y);
    float v;
    std::memcpy(&v, &bits[63], 4);
    EXPECT_EQ(v, 6.0f);
  }
  s0->synchronize();
  s1->synchronize();
}

TEST(SimStream, ComputeOfAnUnsupportedNodeFails) {
  sim::SimDevice dev(0, 1 << 20);
  dev.set_op_filter([](const Tensor* t) { return t->op != OpKind::SILU; });
  Context c;
  Tensor* s = ops::silu(c, c.new_tensor(DType::F32, {4}));
  Graph g;
  g.build_forward(s);
  auto stream = dev.create_stream();
  Tensor* nodes[] = {s};
  Status st = stream->compute(g, nodes);
  EXPECT_EQ(st.kind(), ErrorKind::unsupported);
  EXPECT_NE(st.message().find("SIM0"), std::string::npos);
}

TEST(Devices, MakeSelectAndList) {
  DeviceSet set = make_devices("2x64MiB", 1);
  ASSERT_EQ(set.all.size(), 3u);
  EXPECT_EQ(set.all[0]->name(), "SIM0");
  EXPECT_EQ(set.all[1]->name(), "SIM1");
  EXPECT_EQ(set.all[2]->name(), "CPU");
  EXPECT_EQ(set.cpu, set.all[2]);
  const auto sel = select_devices(set, "SIM1");
  ASSERT_EQ(sel.size(), 2u);
  EXPECT_EQ(sel[0]->name(), "SIM1");
  EXPECT_EQ(sel[1]->name(), "CPU");
  EXPECT_EQ(select_devices(set, "none").size(), 1u);
  try {
    select_devices(set, "SIM0,GPU7");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::usage);
    EXPECT_NE(std::string(e.what()).find("GPU7"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("SIM0, SIM1, CPU"), std::string::npos) << e.what();
  }
  const std::string text = list_devices(set.all);
  EXPECT_NE(text.find("NAME  KIND  TOTAL MiB  FREE MiB  CAPS\n"), std::string::npos);
  EXPECT_NE(text.find("SIM0  sim  64  64  async,events\n"), std::string::npos) << text;
  EXPECT_NE(text.find("CPU  cpu  "), std::string::npos);
}

TEST(Devices, EnvSimDevices) {
  setenv("LOOM_SIM_DEVICES", "3x1MiB", 1);
  DeviceSet set = make_devices("", 1);
  unsetenv("LOOM_SIM_DEVICES");
  EXPECT_EQ(set.all.size(), 4u);
  EXPECT_THROW(make_devices("3xfoo", 1), Error);
}

}  // namespace
}  // namespace loom::test
