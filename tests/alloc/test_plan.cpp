// plan_graph and check_plan on hand-built graphs: exact offsets worked out by hand, in-place
// reuse where the rule allows it and nowhere else, views, alignment, alloc_size expansion, and
// forged plans that the checker must reject.
#include <gtest/gtest.h>

#include "alloc_test_util.h"
#include "loom/alloc/check.h"

namespace loom::test {
namespace {

using alloc::check_plan;
using alloc::MemoryPlan;
using alloc::plan_graph;

const alloc::Placement* find(const MemoryPlan& plan, const Tensor* t) {
  for (const auto& p : plan.placements)
    if (p.tensor == t) return &p;
  return nullptr;
}

size_t offset_of(const MemoryPlan& plan, const Tensor* t) {
  const alloc::Placement* p = find(plan, t);
  EXPECT_NE(p, nullptr) << t->name;
  return p ? p->offset : SIZE_MAX;
}

Tensor* input(Context& c, std::initializer_list<int64_t> ne, const char* name) {
  Tensor* t = c.new_tensor(DType::F32, ne, name);
  t->flags |= kFlagInput;
  return t;
}

Tensor* output(Tensor* t, const char* name) {
  t->name = name;
  t->flags |= kFlagOutput;
  return t;
}

struct PlanTest : ::testing::Test {
  Context c;
  Graph g;
  TestBufferType bt{64};
  MemoryPlan plan(const alloc::PlanOptions& opt = {}) {
    MemoryPlan p = plan_graph(g, bt, opt);
    Status st = check_plan(g, bt, p, opt);
    EXPECT_TRUE(st) << st.message();
    return p;
  }
};

// x -> scale -> silu -> scale -> silu: every element-wise step after the first runs in place.
TEST_F(PlanTest, ElementwiseChainReusesOneBlock) {
  Tensor* x = input(c, {64, 4}, "x");  // 1024 bytes
  Tensor* s1 = ops::scale(c, x, 2.0f);
  Tensor* a1 = ops::silu(c, s1);
  Tensor* s2 = ops::scale(c, a1, 0.5f);
  Tensor* a2 = output(ops::silu(c, s2), "out");
  g.build_forward(a2);
  MemoryPlan p = plan();
  EXPECT_EQ(offset_of(p, x), 0u);
  EXPECT_EQ(offset_of(p, s1), 1024u);  // x is an input: never taken over
  EXPECT_EQ(offset_of(p, a1), 1024u);
  EXPECT_EQ(offset_of(p, s2), 1024u);
  EXPECT_EQ(offset_of(p, a2), 1024u);  // the output may take over a dead intermediate
  EXPECT_EQ(p.total, 2048u);
}

// An input flagged kFlagRefilled (filled before every compute) is free after its last reader;
// ADD takes over whichever dying operand lies lower (here src[1]).
TEST_F(PlanTest, RefilledInputIsFreedAndAddTakesTheLowerOperand) {
  Tensor* x = input(c, {64, 4}, "x");  // 1024 bytes
  x->flags |= kFlagRefilled;
  Tensor* s1 = ops::scale(c, x, 2.0f);   // x's last reader: [0, 1024) is free after it
  Tensor* t = ops::silu(c, s1);          // s1 is read again below: not in place, into x's bytes
  Tensor* out = output(ops::add(c, s1, t), "out");
  g.build_forward(out);
  MemoryPlan p = plan();
  EXPECT_EQ(offset_of(p, x), 0u);
  EXPECT_EQ(offset_of(p, s1), 1024u);
  EXPECT_EQ(offset_of(p, t), 0u);
  EXPECT_EQ(offset_of(p, out), 0u);  // in place on src[1], the lower of the two
  EXPECT_EQ(p.total, 2048u);
}

// The same graph with a plain input: x keeps its bytes, t goes above, ADD takes src[0].
TEST_F(PlanTest, PlainInputIsKeptAndAddTakesSrc0) {
  Tensor* x = input(c, {64, 4}, "x");
  Tensor* s1 = ops::scale(c, x, 2.0f);
  Tensor* t = ops::silu(c, s1);
  Tensor* out = output(ops::add(c, s1, t), "out");
  g.build_forward(out);
  MemoryPlan p = plan();
  EXPECT_EQ(offset_of(p, t), 2048u);
  EXPECT_EQ(offset_of(p, out), 1024u);
  EXPECT_EQ(p.total, 3072u);
}

TEST_F(PlanTest, InplaceCanBeTurnedOff) {
  Tensor* x = input(c, {64, 4}, "x");
  Tensor* s1 = ops::scale(c, x, 2.0f);
  Tensor* a1 = ops::silu(c, s1);
  Tensor* a2 = output(ops::silu(c, a1), "out");
  g.build_forward(a2);
  MemoryPlan p = plan({.allow_inplace = false});
  EXPECT_NE(offset_of(p, a1), offset_of(p, s1));
  EXPECT_EQ(offset_of(p, a2), offset_of(p, s1));  // s1 was freed after a1: plain reuse
  EXPECT_EQ(p.total, 3072u);
}

// Worked by hand (1024-byte tensors; leaves first, in depth-first order w2, w1, x): w2 0,
// w1 1024, x 2048, a 3072, b 4096; a dies after b, so d (not element-wise) gets a's block.
TEST_F(PlanTest, ReusesMemoryAfterLastReader) {
  Tensor* x = input(c, {16, 16}, "x");
  Tensor* w1 = c.new_tensor(DType::F32, {16, 16}, "w1");
  Tensor* w2 = c.new_tensor(DType::F32, {16, 16}, "w2");
  Tensor* a = ops::scale(c, x, 2.0f);
  Tensor* b = ops::mul_mat(c, w1, a);
  Tensor* d = output(ops::mul_mat(c, w2, b), "d");
  g.build_forward(d);
  MemoryPlan p = plan();
  EXPECT_EQ(offset_of(p, w2), 0u);
  EXPECT_EQ(offset_of(p, w1), 1024u);
  EXPECT_EQ(offset_of(p, x), 2048u);
  EXPECT_EQ(offset_of(p, a), 3072u);
  EXPECT_EQ(offset_of(p, b), 4096u);
  EXPECT_EQ(offset_of(p, d), 3072u);
  EXPECT_EQ(p.total, 5120u);
  EXPECT_EQ(p.placements.size(), 6u);
}

TEST_F(PlanTest, NoInplaceWhenSourceHasAnotherReader) {
  Tensor* x = input(c, {64, 4}, "x");
  Tensor* a = ops::scale(c, x, 2.0f);
  Tensor* b = ops::silu(c, a);                    // a is still read by e
  Tensor* e = output(ops::add(c, b, a), "e");     // last reader of a and b: in place on a (lower)
  g.build_forward(e);
  MemoryPlan p = plan();
  EXPECT_NE(offset_of(p, b), offset_of(p, a));
  EXPECT_LT(offset_of(p, a), offset_of(p, b));
  EXPECT_EQ(offset_of(p, e), offset_of(p, a));
}

TEST_F(PlanTest, NoInplaceWhenAnotherSourceAliasesSrc0) {
  Tensor* x = input(c, {8, 8}, "x");
  Tensor* a = ops::scale(c, x, 2.0f);
  Tensor* b = ops::scale(c, x, 3.0f);
  Tensor* e1 = output(ops::add(c, a, a), "e1");                     // reads a twice
  Tensor* e2 = output(ops::add(c, b, ops::transpose(c, b)), "e2");  // reads b through a transposed view
  g.build_forward(e1);
  g.build_forward(e2);
  MemoryPlan p = plan();
  EXPECT_NE(offset_of(p, e1), offset_of(p, a));
  EXPECT_NE(offset_of(p, e2), offset_of(p, b));
}

TEST_F(PlanTest, NoInplaceOnOutputsInputsOrLeaves) {
  Tensor* x = input(c, {64, 4}, "x");
  Tensor* w = c.new_tensor(DType::F32, {64, 4}, "w");  // a leaf without data: placed, never reused
  Tensor* a = output(ops::scale(c, x, 2.0f), "a");     // src is an input
  Tensor* b = output(ops::silu(c, a), "b");            // src is an output
  Tensor* d = output(ops::silu(c, w), "d");            // src is a leaf
  g.build_forward(b);
  g.build_forward(d);
  MemoryPlan p = plan();
  const size_t offs[] = {offset_of(p, x), offset_of(p, w), offset_of(p, a), offset_of(p, b), offset_of(p, d)};
  for (size_t i = 0; i < 5; ++i)
    for (size_t j = i + 1; j < 5; ++j) EXPECT_NE(offs[i], offs[j]) << i << " " << j;
  EXPECT_EQ(p.total, 5 * 1024u);
}

// A reader of a view keeps the root alive, and a view is never taken over in place.
TEST_F(PlanTest, ViewsExtendTheirRootsLife) {
  Tensor* x = input(c, {64, 4}, "x");
  Tensor* a = ops::scale(c, x, 2.0f);
  Tensor* v = ops::view_1d(c, a, 64, 64 * 4);  // row 1 of a
  Tensor* b = ops::silu(c, a);                 // a is still read later through v: not in place
  Tensor* w = c.new_tensor(DType::F32, {64, 64}, "w");
  Tensor* m = ops::mul_mat(c, w, b);           // {64, 4}: a must stay live here
  Tensor* e = output(ops::add(c, m, v), "e");  // last reader of a (through v)
  Tensor* r = ops::reshape(c, e, {256});
  Tensor* f = output(ops::silu(c, r), "f");    // src is a view: not in place
  g.build_forward(f);
  MemoryPlan p = plan();
  EXPECT_NE(offset_of(p, b), offset_of(p, a));
  EXPECT_NE(offset_of(p, m), offset_of(p, a));
  EXPECT_NE(offset_of(p, f), offset_of(p, e));
  EXPECT_EQ(find(p, v), nullptr);
  ASSERT_EQ(p.views.size(), 2u);
  EXPECT_EQ(p.views[0], v);
  EXPECT_EQ(p.views[1], r);
}

// A node nobody reads is dead right after it runs: the next node takes its block.
TEST_F(PlanTest, UnreadNodeIsFreedRightAfterIt) {
  Tensor* x = input(c, {16, 16}, "x");
  Tensor* w = c.new_tensor(DType::F32, {16, 16}, "w");
  Tensor* dead = ops::mul_mat(c, w, x);
  dead->name = "dead";
  Tensor* e = output(ops::mul_mat(c, w, x), "e");
  g.build_forward(dead);
  g.build_forward(e);
  MemoryPlan p = plan();
  EXPECT_EQ(offset_of(p, dead), 2048u);
  EXPECT_EQ(offset_of(p, e), 2048u);
  EXPECT_EQ(p.total, 3072u);
}

// CPY writes into its destination's memory: the destination stays live through readers of the copy.
TEST_F(PlanTest, CopyIntoPlannedTensorKeepsItAlive) {
  Tensor* x = input(c, {64, 4}, "x");
  Tensor* y = input(c, {64, 4}, "y");
  Tensor* dst = ops::scale(c, x, 2.0f);
  dst->name = "dst";
  Tensor* cp = ops::cpy(c, y, dst);
  Tensor* w = c.new_tensor(DType::F32, {64, 64}, "w");
  Tensor* m = ops::mul_mat(c, w, y);
  Tensor* e = output(ops::add(c, m, cp), "e");
  g.build_forward(e);
  MemoryPlan p = plan();
  EXPECT_EQ(find(p, cp), nullptr);
  EXPECT_NE(offset_of(p, m), offset_of(p, dst));
  EXPECT_NE(offset_of(p, e), offset_of(p, dst));
}

TEST_F(PlanTest, LayoutMismatchPreventsInplace) {
  Tensor* x = c.new_tensor(DType::F16, {64, 4}, "x");
  x->flags |= kFlagInput;
  Tensor* d = ops::dup(c, x);                       // F16 node, 512 bytes
  Tensor* s = output(ops::scale(c, d, 2.0f), "s");  // F32: different type and size
  g.build_forward(s);
  MemoryPlan p = plan();
  EXPECT_NE(offset_of(p, s), offset_of(p, d));
}

TEST_F(PlanTest, LongChainTotalBelowSumOfSizes) {
  Tensor* x = input(c, {32, 8}, "x");
  Tensor* w = c.new_tensor(DType::F32, {32, 32}, "w");
  Tensor* h = x;
  size_t sum = 0;
  for (int i = 0; i < 40; ++i) {
    h = i % 2 ? ops::add(c, ops::mul_mat(c, w, h), x) : ops::silu(c, ops::mul_mat(c, w, h));
    sum += 2 * h->nbytes();
  }
  output(h, "h");
  g.build_forward(h);
  MemoryPlan p = plan();
  EXPECT_EQ(p.placements.size(), 82u);
  // x, w, and at most two activations live at once.
  EXPECT_LE(p.total, x->nbytes() + w->nbytes() + 2 * h->nbytes());
  EXPECT_LT(p.total, sum / 10);
}

TEST_F(PlanTest, OffsetsFollowTheBufferAlignment) {
  TestBufferType wide(256);
  Tensor* x = input(c, {3, 5}, "x");  // 60 bytes
  Tensor* h = x;
  for (int i = 0; i < 6; ++i) h = ops::silu(c, ops::concat(c, h, x, 1));  // 120, 180, ... bytes
  output(h, "h");
  g.build_forward(h);
  MemoryPlan p = plan_graph(g, wide);
  for (const auto& pl : p.placements) EXPECT_EQ(pl.offset % 256, 0u) << pl.tensor->name;
  EXPECT_TRUE(check_plan(g, wide, p));
  EXPECT_EQ(p.total % 256, 0u);
}

TEST_F(PlanTest, DeterministicAndLeavesTensorsUntouched) {
  Tensor* x = input(c, {64, 4}, "x");
  Tensor* a = ops::scale(c, x, 2.0f);
  Tensor* e = output(ops::add(c, ops::silu(c, a), a), "e");
  g.build_forward(e);
  MemoryPlan p1 = plan_graph(g, bt);
  MemoryPlan p2 = plan_graph(g, bt);
  ASSERT_EQ(p1.placements.size(), p2.placements.size());
  for (size_t i = 0; i < p1.placements.size(); ++i) {
    EXPECT_EQ(p1.placements[i].tensor, p2.placements[i].tensor);
    EXPECT_EQ(p1.placements[i].offset, p2.placements[i].offset);
  }
  for (Tensor& t : c.tensors()) {
    EXPECT_EQ(t.data, nullptr);
    EXPECT_EQ(t.buffer, nullptr);
  }
  EXPECT_EQ(x->flags, (uint32_t)kFlagInput);
  EXPECT_EQ(e->flags, (uint32_t)kFlagOutput);
}

TEST_F(PlanTest, TensorsWithDataAreNotPlanned) {
  Tensor* x = input(c, {64, 4}, "x");
  float host[256];
  x->data = host;  // already bound elsewhere
  Tensor* a = output(ops::scale(c, x, 2.0f), "a");
  g.build_forward(a);
  MemoryPlan p = plan();
  ASSERT_EQ(p.placements.size(), 1u);
  EXPECT_EQ(p.placements[0].tensor, a);
  EXPECT_EQ(p.total, 1024u);
}

TEST_F(PlanTest, ApplyBindsTensorsAndViews) {
  Tensor* x = input(c, {64, 4}, "x");
  Tensor* a = ops::scale(c, x, 2.0f);
  Tensor* v = ops::view_1d(c, a, 64, 128 * 4);
  Tensor* e = output(ops::silu(c, v), "e");
  g.build_forward(e);
  MemoryPlan p = plan();
  std::unique_ptr<Buffer> buf;
  ASSERT_TRUE(bt.alloc(p.total, buf));
  ASSERT_TRUE(alloc::apply_plan(p, *buf));
  char* base = static_cast<char*>(buf->base());
  EXPECT_EQ(x->data, base + offset_of(p, x));
  EXPECT_EQ(a->data, base + offset_of(p, a));
  EXPECT_EQ(v->data, static_cast<char*>(a->data) + 512);
  EXPECT_EQ(v->buffer, buf.get());
  EXPECT_EQ(e->buffer, buf.get());
}

TEST_F(PlanTest, ApplyFailsCleanlyOnASmallBuffer) {
  Tensor* x = input(c, {64, 4}, "x");
  Tensor* a = output(ops::scale(c, x, 2.0f), "a");
  g.build_forward(a);
  MemoryPlan p = plan();
  std::unique_ptr<Buffer> buf;
  ASSERT_TRUE(bt.alloc(p.total - 64, buf));
  Status st = alloc::apply_plan(p, *buf);
  EXPECT_FALSE(st);
  EXPECT_EQ(st.kind(), ErrorKind::out_of_memory);
  EXPECT_EQ(x->data, nullptr);
  EXPECT_EQ(a->data, nullptr);
}

// Leaves (weights) may be expanded by a device; SCALE may not: the planner refuses the buffer type.
TEST_F(PlanTest, AllocSizeExpansionOnlyForListedOps) {
  Tensor* x = input(c, {64, 4}, "x");
  Tensor* a = output(ops::scale(c, x, 2.0f), "a");
  g.build_forward(a);
  TestBufferType leaves(64, SIZE_MAX, Expand::leaves, 100);
  MemoryPlan p = plan_graph(g, leaves);
  EXPECT_TRUE(check_plan(g, leaves, p));
  EXPECT_EQ(find(p, x)->size, 1124u);
  EXPECT_EQ(offset_of(p, a), 1152u);

  TestBufferType all(64, SIZE_MAX, Expand::all, 100);
  try {
    plan_graph(g, all);
    FAIL() << "expanding SCALE must be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::internal);
    EXPECT_NE(std::string(e.what()).find("SCALE"), std::string::npos) << e.what();
  }
  // A plan forged with the expanded sizes is rejected by the checker as well.
  MemoryPlan forged = p;
  for (auto& pl : forged.placements) pl.size = all.alloc_size(pl.tensor);
  forged.total += 1024;
  Status st = check_plan(g, all, forged);
  EXPECT_FALSE(st);
  EXPECT_NE(st.message().find("may not expand"), std::string::npos) << st.message();
}

TEST_F(PlanTest, CheckerRejectsForgedPlans) {
  Tensor* x = input(c, {64, 4}, "x");
  Tensor* a = ops::scale(c, x, 2.0f);
  Tensor* b = ops::silu(c, a);
  Tensor* e = output(ops::add(c, b, a), "e");
  g.build_forward(e);
  const MemoryPlan good = plan();
  auto forge = [&](const Tensor* t, size_t offset) {
    MemoryPlan p = good;
    for (auto& pl : p.placements)
      if (pl.tensor == t) pl.offset = offset;
    return p;
  };
  EXPECT_FALSE(check_plan(g, bt, forge(b, offset_of(good, a))));  // in place, but a is read again by e
  EXPECT_FALSE(check_plan(g, bt, forge(a, offset_of(good, x))));  // over a live input
  EXPECT_FALSE(check_plan(g, bt, forge(e, offset_of(good, a) + 64)));  // partial overlap
  EXPECT_FALSE(check_plan(g, bt, forge(e, offset_of(good, e) + 4)));   // misaligned
  EXPECT_FALSE(check_plan(g, bt, forge(e, good.total)));              // beyond total
  MemoryPlan missing = good;
  missing.placements.pop_back();
  EXPECT_FALSE(check_plan(g, bt, missing));
  MemoryPlan twice = good;
  twice.placements.push_back(twice.placements.back());
  EXPECT_FALSE(check_plan(g, bt, twice));
  // In place is legal for e over a (its src[1], the lower) or over b (src[0]), but not when the
  // options forbid it.
  EXPECT_EQ(offset_of(good, e), offset_of(good, a));
  EXPECT_TRUE(check_plan(g, bt, forge(e, offset_of(good, b))));
  EXPECT_FALSE(check_plan(g, bt, good, {.allow_inplace = false}));
}

TEST_F(PlanTest, EmptyGraph) {
  MemoryPlan p = plan();
  EXPECT_EQ(p.total, 0u);
  EXPECT_TRUE(p.placements.empty());
}

}  // namespace
}  // namespace loom::test
