// The NCCL communicator on real GPUs: one rank per CUDA device of this process, each driven
// from its own thread as NCCL requires. Skips (saying why) in builds without NCCL and on
// machines without a CUDA device; CI compiles it, a GPU machine runs it.
#include <gtest/gtest.h>

#include <numeric>
#include <thread>
#include <vector>

#include "loom/meta/comm.h"

namespace loom {
namespace {

// One NCCL rank per GPU of this machine (skips without NCCL or a GPU).
class TpNccl : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!meta::nccl_available()) GTEST_SKIP() << "built without NCCL (configure with -DLOOM_CUDA=ON and NCCL installed)";
    n = meta::nccl_device_count();
    if (n == 0) GTEST_SKIP() << "no CUDA device on this machine";
    std::vector<int> devices(n);
    std::iota(devices.begin(), devices.end(), 0);
    comms = meta::nccl_group(devices);
  }
  int n = 0;
  std::vector<std::unique_ptr<Communicator>> comms;
};

TEST_F(TpNccl, OneRankPerGpuSumsGathersAndBroadcasts) {
  ASSERT_EQ((int)comms.size(), n);

  // Rank r: sums 1000 values (r + 1 + i/2, exact in f32), gathers blocks of r + 2 values, and
  // receives rank 0's bytes.
  const size_t len = 1000;
  std::vector<std::vector<float>> sums(n), gathered(n);
  std::vector<std::string> received(n);
  std::vector<size_t> counts;
  for (int r = 0; r < n; ++r) counts.push_back((size_t)r + 2);
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      Communicator& c = *comms[(size_t)r];
      EXPECT_EQ(c.rank(), r);
      EXPECT_EQ(c.size(), n);
      sums[(size_t)r].resize(len);
      for (size_t i = 0; i < len; ++i) sums[(size_t)r][i] = (float)(r + 1) + 0.5f * (float)i;
      c.all_reduce_sum(sums[(size_t)r].data(), len);
      std::vector<float> local(counts[(size_t)r], (float)(10 * r));
      gathered[(size_t)r].assign(total, -1.0f);
      c.all_gather(local.data(), counts, gathered[(size_t)r].data());
      std::string bytes = r == 0 ? std::string("from rank zero") : std::string(14, '?');
      c.broadcast(bytes.data(), bytes.size(), 0);
      received[(size_t)r] = bytes;
    });
  for (auto& t : threads) t.join();

  const float rank_sum = (float)(n * (n + 1) / 2);
  std::vector<float> expect_gather;
  for (int r = 0; r < n; ++r) expect_gather.insert(expect_gather.end(), counts[(size_t)r], (float)(10 * r));
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < len; ++i) ASSERT_EQ(sums[(size_t)r][i], rank_sum + (float)n * 0.5f * (float)i) << "rank " << r;
    EXPECT_EQ(gathered[(size_t)r], expect_gather) << "rank " << r;
    EXPECT_EQ(received[(size_t)r], "from rank zero") << "rank " << r;
    EXPECT_EQ(comms[(size_t)r]->n_all_reduce(), 1u);
  }
}

// --reduce-bf16 under NCCL: the same bits as the in-process group (each contribution rounded to
// BF16, summed in f32 in rank order), with half the bytes counted.
TEST_F(TpNccl, Bf16SumsEqualTheInProcessGroup) {
  meta::InProcessGroup host(n);
  const size_t len = 4096;
  auto values = [&](int r) {
    std::vector<float> v(len);
    for (size_t i = 0; i < len; ++i) v[i] = 1.001f * (float)(r + 1) + 0.37f * (float)i - 700.0f;
    return v;
  };
  std::vector<std::vector<float>> gpu(n), cpu(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      comms[(size_t)r]->set_bf16_min_elements(len);
      host.rank(r).set_bf16_min_elements(len);
      gpu[(size_t)r] = values(r);
      cpu[(size_t)r] = values(r);
      comms[(size_t)r]->all_reduce_sum(gpu[(size_t)r].data(), len);
      host.rank(r).all_reduce_sum(cpu[(size_t)r].data(), len);
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(gpu[(size_t)r], cpu[(size_t)r]) << "rank " << r;
    EXPECT_EQ(comms[(size_t)r]->bytes_reduced(), len * sizeof(uint16_t));
  }
}

}  // namespace
}  // namespace loom
