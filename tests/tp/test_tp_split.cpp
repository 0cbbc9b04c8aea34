// Tensor-parallel building blocks: the split arithmetic (uneven, zero-size), the in-process
// communicator (sums in rank order, gathers, broadcasts, turns), and the layout of weight
// roles (whole KV-head groups, quant-block granules).
#include <gtest/gtest.h>

#include <thread>

#include "loom/core/error.h"
#include "loom/meta/comm.h"
#include "loom/model/tp_split.h"
#include "loom/model/tp_shard.h"

namespace loom {
namespace {

TEST(TpSplit, UnitsFollowProportionsAndSumExactly) {
  auto r = tp::split_units(8, {3, 2, 2});
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].begin, 0);
  EXPECT_EQ(r[2].end, 8);
  int64_t sum = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    sum += r[i].size();
    if (i) {
      EXPECT_EQ(r[i].begin, r[i - 1].end);
    }
    EXPECT_LT(std::abs((double)r[i].size() - 8.0 * (i == 0 ? 3 : 2) / 7.0), 1.0);
  }
  EXPECT_EQ(sum, 8);
  // more members than units: some get nothing
  auto z = tp::split_units(3, {1, 1, 1, 1});
  int empty = 0;
  for (auto& x : z) empty += x.size() == 0;
  EXPECT_EQ(empty, 1);
  EXPECT_EQ(tp::split_units(5, {0, 1})[0].size(), 0);
  EXPECT_THROW(tp::split_units(5, {0, 0}), Error);
  EXPECT_THROW(tp::split_units(5, {-1, 2}), Error);
}

TEST(TpSplit, AxisRoundsToGranules) {
  auto r = tp::split_axis(224, 32, {1, 1, 1});  // 7 blocks over 3 members
  for (auto& x : r) {
    EXPECT_EQ(x.begin % 32, 0);
    EXPECT_TRUE(x.end % 32 == 0 || x.end == 224);
  }
  EXPECT_EQ(r.back().end, 224);
  auto s = tp::split_axis(100, 32, {1, 1});  // a short last granule
  EXPECT_EQ(s[0].size() + s[1].size(), 100);
}

TEST(TpComm, InProcessSumsGathersAndBroadcastsInRankOrder) {
  meta::InProcessGroup g(3);
  std::vector<std::vector<float>> data = {{1, 2}, {10, 20}, {100, 200}};
  std::vector<std::vector<float>> gathered(3, std::vector<float>(6));
  std::vector<int> bcast = {0, 0, 0};
  std::vector<std::thread> ts;
  for (int r = 0; r < 3; ++r)
    ts.emplace_back([&, r] {
      Communicator& c = g.rank(r);
      c.begin_compute();
      c.all_reduce_sum(data[(size_t)r].data(), 2);
      const float mine[2] = {(float)r, (float)r};
      c.all_gather(mine, {2, 2, 2}, gathered[(size_t)r].data());
      bcast[(size_t)r] = r == 1 ? 42 : -1;
      c.broadcast(&bcast[(size_t)r], sizeof(int), 1);
      c.end_compute();
    });
  for (auto& t : ts) t.join();
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(data[(size_t)r], (std::vector<float>{111, 222}));
    EXPECT_EQ(gathered[(size_t)r], (std::vector<float>{0, 0, 1, 1, 2, 2}));
    EXPECT_EQ(bcast[(size_t)r], 42);
    EXPECT_EQ(g.rank(r).n_all_reduce(), 1u);
  }
}

TEST(TpComm, AbortWakesWaitingRanks) {
  meta::InProcessGroup g(2);
  std::thread t([&] {
    float x = 1;
    EXPECT_THROW(g.rank(0).all_reduce_sum(&x, 1), Error);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  g.abort("member 1 failed");
  t.join();
}

TEST(TpComm, MissingBackendsSayNotCompiledIn) {
  if (!meta::nccl_available()) {
    try {
      meta::nccl_group({0, 1});
      ADD_FAILURE() << "expected unsupported";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::unsupported);
      EXPECT_NE(std::string(e.what()).find("NCCL"), std::string::npos);
    }
  }
}

TEST(TpLayout, RolesSplitTheWayTheArchitectureDeclares) {
  EXPECT_EQ(tp_split_of(TensorRole::attn_q), TpSplit::rows);
  EXPECT_EQ(tp_split_of(TensorRole::ffn_up_exps), TpSplit::rows);
  EXPECT_EQ(tp_split_of(TensorRole::attn_output), TpSplit::rows);  // by embedding rows: no partial sums
  EXPECT_EQ(tp_split_of(TensorRole::ffn_down_exps), TpSplit::rows);
  EXPECT_EQ(tp_split_of(TensorRole::ffn_down_exps_bias), TpSplit::vector_rows);
  EXPECT_EQ(tp_split_of(TensorRole::attn_norm), TpSplit::mirrored);
  EXPECT_EQ(tp_split_of(TensorRole::ffn_gate_inp), TpSplit::mirrored);
  EXPECT_EQ(tp_split_of(TensorRole::token_embd), TpSplit::host);
  EXPECT_EQ(tp_split_of(TensorRole::attn_k_bias), TpSplit::vector_rows);
}

TEST(TpLayout, RowRangesStartOnWholeRepackGroups) {
  HParams hp = preset_hparams(Arch::llama, "tiny");  // 4 KV heads
  const TpLayout l = make_tp_layout(hp, 3, {1, 1, 1});
  EXPECT_EQ(l.row_granule, 16);
  int64_t heads = 0;
  for (auto& r : l.head_kv) heads += r.size();
  EXPECT_EQ(heads, hp.n_head_kv);
  for (const auto* axis : {&l.ff, &l.embd, &l.vocab}) {
    int64_t next = 0;
    for (auto& r : *axis) {
      EXPECT_EQ(r.begin, next);  // contiguous, in member order
      EXPECT_EQ(r.begin % 16, 0);
      next = r.end;
    }
  }
  EXPECT_EQ(l.embd.back().end, hp.n_embd);
  EXPECT_THROW(make_tp_layout(hp, 3, {1, 1}), Error);
}

}  // namespace
}  // namespace loom
