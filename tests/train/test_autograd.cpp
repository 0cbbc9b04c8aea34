// Every gradient rule against central finite differences (grad_check.h): element-wise ops with
// broadcasting, norms, reductions, matrix products (batched, broadcast, quantized frozen
// weights), experts, rows, RoPE, masked softmax, cross-entropy, views/permutes/copies, reuse of
// a tensor (gradients add up), and the whole MoE routing block.
#include <gtest/gtest.h>

#include <limits>

#include "grad_check.h"

namespace loom::test {
namespace {

using namespace ops;

void fill_ids(Tensor* t, std::mt19937& r, int32_t hi) {
  std::uniform_int_distribution<int32_t> d(0, hi - 1);
  for (int64_t i = 0; i < t->nelements(); ++i) static_cast<int32_t*>(t->data)[i] = d(r);
}
auto ids_in(int32_t hi) {
  return [hi](Tensor* t, std::mt19937& r) { fill_ids(t, r, hi); };
}

TEST(Autograd, BinaryOpsWithBroadcasting) {
  for (OpKind op : {OpKind::ADD, OpKind::SUB, OpKind::MUL, OpKind::DIV}) {
    SCOPED_TRACE(op_name(op));
    GradCase gc;
    Tensor* a = gc.param({6, 4, 3});
    Tensor* b = op == OpKind::DIV ? gc.param({6, 1, 3}, 0, 0.5f, 2.0f) : gc.param({6, 1, 3});
    Tensor* y = op == OpKind::ADD   ? add(gc.ctx, a, b)
                : op == OpKind::SUB ? sub(gc.ctx, a, b)
                : op == OpKind::MUL ? mul(gc.ctx, a, b)
                                    : div(gc.ctx, a, b);
    check_gradients(gc, y);
  }
}

TEST(Autograd, SameTensorTwiceSumsGradients) {
  GradCase gc;
  Tensor* a = gc.param({5, 3});
  check_gradients(gc, mul(gc.ctx, a, add(gc.ctx, a, scale(gc.ctx, a, 3.0f))));  // 4 a^2
}

TEST(Autograd, UnaryOps) {
  struct U {
    const char* name;
    Tensor* (*fn)(Context&, Tensor*);
    float lo, hi;
  };
  const U cases[] = {
      {"scale", [](Context& c, Tensor* x) { return scale(c, x, -1.5f, 0.25f); }, -2, 2},
      {"silu", [](Context& c, Tensor* x) { return silu(c, x); }, -3, 3},
      {"gelu", [](Context& c, Tensor* x) { return gelu(c, x); }, -3, 3},
      {"tanh", [](Context& c, Tensor* x) { return tanh(c, x); }, -2, 2},
      {"softcap", [](Context& c, Tensor* x) { return scale(c, tanh(c, scale(c, x, 1.0f / 1.5f)), 1.5f); }, -3, 3},
      {"sigmoid", [](Context& c, Tensor* x) { return sigmoid(c, x); }, -3, 3},
      {"softplus", [](Context& c, Tensor* x) { return softplus(c, x); }, -3, 3},
      {"exp", [](Context& c, Tensor* x) { return exp(c, x); }, -1, 1},
      {"log", [](Context& c, Tensor* x) { return log(c, x); }, 0.5f, 2},
      {"sqr", [](Context& c, Tensor* x) { return sqr(c, x); }, -2, 2},
      {"sqrt", [](Context& c, Tensor* x) { return sqrt(c, x); }, 0.5f, 2},
  };
  for (const U& u : cases) {
    SCOPED_TRACE(u.name);
    GradCase gc;
    check_gradients(gc, u.fn(gc.ctx, gc.param({7, 5}, 0, u.lo, u.hi)));
  }
}

TEST(Autograd, Swiglu) {
  GradCase gc;
  check_gradients(gc, swiglu(gc.ctx, gc.param({8, 3}), gc.param({8, 3})));
}

// gpt-oss's activation, its clamps crossed: values keep clear of +-limit by more than the
// finite-difference step (the derivative jumps there).
TEST(Autograd, SwigluOai) {
  GradCase gc;
  const float limit = 1.5f;
  auto clear_of_kinks = [limit](Tensor* t, std::mt19937& r) {
    std::uniform_real_distribution<float> d(-3.0f, 3.0f);
    std::vector<float> v((size_t)t->nelements());
    for (float& x : v)
      do x = d(r);
      while (std::fabs(std::fabs(x) - limit) < 0.1f);
    GradCase::set(t, v);
  };
  Tensor* a = gc.param({8, 3});
  gc.fills.back().second = clear_of_kinks;
  Tensor* b = gc.param({8, 3});
  gc.fills.back().second = clear_of_kinks;
  check_gradients(gc, swiglu_oai(gc.ctx, a, b, 1.702f, limit));
}

TEST(Autograd, NormsTimesWeight) {
  for (bool rms : {true, false}) {
    GradCase gc;
    Tensor* x = gc.param({16, 3, 2});
    Tensor* w = gc.param({16});
    Tensor* n = rms ? rms_norm(gc.ctx, x, 1e-5f) : norm(gc.ctx, x, 1e-5f);
    check_gradients(gc, mul(gc.ctx, n, w));
  }
}

TEST(Autograd, Reductions) {
  {
    GradCase gc;
    check_gradients(gc, sum(gc.ctx, gc.param({5, 4})));
  }
  {
    GradCase gc;
    check_gradients(gc, sum_rows(gc.ctx, gc.param({5, 4, 2})));
  }
  {
    GradCase gc;
    check_gradients(gc, mean(gc.ctx, gc.param({5, 4, 2})));
  }
}

TEST(Autograd, MulMatPlainAndBatchedBroadcast) {
  {
    GradCase gc;
    check_gradients(gc, mul_mat(gc.ctx, gc.param({8, 5}), gc.param({8, 3})));
  }
  {  // a's batches broadcast over b's in dims 2 and 3 (GQA-like)
    GradCase gc;
    check_gradients(gc, mul_mat(gc.ctx, gc.param({8, 5, 2, 1}), gc.param({8, 3, 4, 2})));
  }
  {  // transposed (non-contiguous) operand
    GradCase gc;
    Tensor* bt = transpose(gc.ctx, gc.param({3, 8}));
    check_gradients(gc, mul_mat(gc.ctx, gc.param({8, 5}), bt));
  }
}

// A quantized weight is frozen; the gradient reaching its input is W^T g with W dequantized.
// (Against a double reference, not finite differences: a kernel may quantize the activations.)
TEST(Autograd, MulMatWithFrozenQuantizedWeight) {
  Context c;
  Tensor* w = c.new_tensor(DType::Q8_0, {32, 6});
  Tensor* x = c.new_tensor(DType::F32, {32, 3});
  x->flags |= kFlagParam;
  Tensor* r = c.new_tensor(DType::F32, {6, 3});
  Tensor* loss = sum(c, mul(c, mul_mat(c, w, x), r));
  Graph fwd;
  fwd.build_forward(loss);
  Gradients grads = build_backward(c, fwd, loss);
  Tensor* gx = grads.of(x);
  ASSERT_NE(gx, nullptr);
  EXPECT_EQ(grads.of(w), nullptr);  // frozen: not a parameter, and not float
  Graph g;
  g.build_forward(gx);
  cpu::CpuDevice dev(2);
  auto buf = cpu::alloc_all(c, dev.buffer_type());
  std::mt19937 rng(5);
  for (Tensor* t : {w, x, r}) GradCase::fill_float(t, rng, 1.0f);
  cpu::compute_graph(g, dev.pool());
  const std::vector<double> wd = GradCase::get(w), rv = GradCase::get(r), got = GradCase::get(gx);
  double num = 0, den = 0;
  for (int n = 0; n < 3; ++n)
    for (int k = 0; k < 32; ++k) {
      double want = 0;
      for (int m = 0; m < 6; ++m) want += wd[(size_t)(m * 32 + k)] * rv[(size_t)(n * 6 + m)];
      num += (got[(size_t)(n * 32 + k)] - want) * (got[(size_t)(n * 32 + k)] - want);
      den += want * want;
    }
  EXPECT_LE(num / den, 1e-10);
}

TEST(Autograd, MulMatId) {
  for (int64_t bn : {2, 1}) {
    SCOPED_TRACE(bn);
    GradCase gc;
    const int64_t K = 6, M = 5, E = 4, n_used = 2, T = 3;
    Tensor* as = gc.param({K, M, E});
    Tensor* b = gc.param({K, bn, T});
    Tensor* ids = gc.input(DType::I32, {n_used, T}, [](Tensor* t, std::mt19937&) {
      const int32_t v[] = {0, 2, 3, 1, 2, 2};  // one token picks expert 2 twice
      std::memcpy(t->data, v, sizeof(v));
    });
    check_gradients(gc, mul_mat_id(gc.ctx, as, b, ids));
  }
}

TEST(Autograd, GetRows) {
  {  // 2-D, repeated ids accumulate
    GradCase gc;
    Tensor* ids = gc.input(DType::I32, {7}, ids_in(4));
    check_gradients(gc, get_rows(gc.ctx, gc.param({5, 4}), ids));
  }
  {  // batched (the MoE routing weights)
    GradCase gc;
    Tensor* ids = gc.input(DType::I32, {2, 3}, ids_in(4));
    check_gradients(gc, get_rows(gc.ctx, gc.param({3, 4, 3}), ids));
  }
}

TEST(Autograd, GetRowsBackAndSetRows) {
  {
    GradCase gc;
    Tensor* ids = gc.input(DType::I32, {6}, ids_in(3));
    Tensor* like = gc.ctx.new_tensor(DType::F32, {4, 3});
    check_gradients(gc, get_rows_back(gc.ctx, gc.param({4, 6}), ids, like));
  }
  {
    GradCase gc;
    Tensor* ids = gc.input(DType::I32, {2}, [](Tensor* t, std::mt19937&) {
      static_cast<int32_t*>(t->data)[0] = 3;
      static_cast<int32_t*>(t->data)[1] = 0;
    });
    Tensor* dst = gc.param({4, 5});
    // set_rows writes in place: into a copy, so that dst itself is still read by the mul
    check_gradients(gc, mul(gc.ctx, set_rows(gc.ctx, dup(gc.ctx, dst), gc.param({4, 2}), ids), dst));
  }
}

TEST(Autograd, AddId) {
  GradCase gc;
  Tensor* ids = gc.input(DType::I32, {2, 3}, ids_in(4));
  check_gradients(gc, add_id(gc.ctx, gc.param({5, 2, 3}), gc.param({5, 4}), ids));
}

TEST(Autograd, Rope) {
  for (int mode : {kRopeNormal, kRopeNeox}) {
    GradCase gc;
    Tensor* pos = gc.input(DType::I32, {3}, ids_in(50));
    RopeParams p;
    p.n_dims = 6;  // of head size 8: two dims pass through
    p.mode = mode;
    p.freq_base = 100.0f;
    check_gradients(gc, rope(gc.ctx, gc.param({8, 2, 3}), pos, nullptr, p));
  }
}

// Llama 3 / phi3 frequency divisors, linear scaling, YaRN with its magnitude (the factors are
// constants: loom-train does not train them).
TEST(Autograd, RopeWithFactorsAndScaling) {
  for (bool yarn : {false, true}) {
    SCOPED_TRACE(yarn ? "yarn" : "linear");
    GradCase gc;
    Tensor* pos = gc.input(DType::I32, {3}, ids_in(50));
    Tensor* factors = gc.input(DType::F32, {4}, [](Tensor* t, std::mt19937& r) { GradCase::fill_float(t, r, 0, 1, 8); });
    RopeParams p;
    p.n_dims = 8;
    p.mode = kRopeNeox;
    p.freq_base = 1000.0f;
    p.freq_scale = 0.25f;
    p.n_ctx_orig = 16;
    p.attn_factor = 1.2f;
    p.ext_factor = yarn ? 1.0f : 0.0f;
    check_gradients(gc, rope(gc.ctx, gc.param({8, 2, 3}), pos, factors, p));
  }
}

// A {5, 4} mask: query i sees keys 0..i+1.
Tensor* causal_mask(GradCase& gc) {
  return gc.input(DType::F32, {5, 4}, [](Tensor* t, std::mt19937&) {
    auto* m = static_cast<float*>(t->data);
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 5; ++j) m[i * 5 + j] = j <= i + 1 ? 0.0f : -std::numeric_limits<float>::infinity();
  });
}

TEST(Autograd, SoftMaxWithMaskAndScale) {
  GradCase gc;
  Tensor* mask = causal_mask(gc);
  check_gradients(gc, soft_max(gc.ctx, gc.param({5, 4, 3, 2}), mask, 0.7f));
}

// gpt-oss's attention sinks: one more logit per head in each row's sum; the sinks train too.
TEST(Autograd, SoftMaxWithSinks) {
  GradCase gc;
  Tensor* mask = causal_mask(gc);
  Tensor* logits = gc.param({5, 4, 3, 2});
  Tensor* sinks = gc.param({3});
  check_gradients(gc, soft_max(gc.ctx, logits, mask, 0.7f, 0.0f, sinks));
}

TEST(Autograd, CrossEntropyLoss) {
  GradCase gc;
  Tensor* labels = gc.input(DType::F32, {6, 4}, [](Tensor* t, std::mt19937& r) {
    std::vector<float> v(24, 0.0f);
    std::uniform_int_distribution<int> d(0, 5);
    for (int i = 0; i < 4; ++i) v[(size_t)(i * 6 + d(r))] = 1.0f;
    GradCase::set(t, v);
  });
  check_gradients(gc, cross_entropy_loss(gc.ctx, gc.param({6, 4}, 2.0f), labels));
}

TEST(Autograd, ViewsPermutesAndCopies) {
  {  // reshape, permute, transpose, cont
    GradCase gc;
    Tensor* x = gc.param({4, 6});
    Tensor* y = cont(gc.ctx, permute(gc.ctx, reshape(gc.ctx, x, {2, 2, 6}), 2, 0, 1, 3));
    check_gradients(gc, mul(gc.ctx, y, cont(gc.ctx, transpose(gc.ctx, gc.param({6, 2, 2})))));
  }
  {  // two partial views of one tensor used differently (scatter + accumulation)
    GradCase gc;
    Tensor* x = gc.param({4, 6});
    Tensor* top = view_2d(gc.ctx, x, 4, 3, x->nb[1], 0);
    Tensor* bottom = view_2d(gc.ctx, x, 4, 3, x->nb[1], 3 * x->nb[1]);
    Tensor* strided = view_2d(gc.ctx, x, 2, 6, x->nb[1], sizeof(float));  // columns 1..2 of every row
    Tensor* y = add(gc.ctx, mul(gc.ctx, top, bottom), sqr(gc.ctx, cont(gc.ctx, view_2d(gc.ctx, cont(gc.ctx, strided), 4, 3, 4 * sizeof(float), 0))));
    check_gradients(gc, y);
  }
  {  // cpy converting to f16 (the gradient passes through the conversion)
    GradCase gc;
    Tensor* h = cpy(gc.ctx, gc.param({8, 2}), gc.ctx.new_tensor(DType::F16, {16}));
    check_gradients(gc, scale(gc.ctx, cont(gc.ctx, h), 2.0f), {.eps = 5e-2, .max_rel_err = 5e-3});
  }
  {  // dup, cpy into a tensor of another shape, concat, repeat, repeat_back
    GradCase gc;
    Tensor* x = gc.param({4, 3});
    Tensor* h = cpy(gc.ctx, dup(gc.ctx, x), gc.ctx.new_tensor(DType::F32, {6, 2}));
    Tensor* hf = scale(gc.ctx, cont(gc.ctx, h), 1.0f);                                  // {6, 2}
    Tensor* y = concat(gc.ctx, reshape(gc.ctx, hf, {4, 3}), gc.param({4, 2}), 1);        // {4, 5}
    Tensor* rep = repeat(gc.ctx, gc.param({2, 5}), y);
    Tensor* back = repeat_back(gc.ctx, gc.param({4, 10}), y);
    check_gradients(gc, add(gc.ctx, mul(gc.ctx, y, rep), back));
  }
}

// Rules of the backward helpers themselves (second-order use, and loom-bench-ops grad cases).
TEST(Autograd, BackwardHelperOps) {
  {  // out_prod, batched with a broadcast over b's batches
    GradCase gc;
    check_gradients(gc, out_prod(gc.ctx, gc.param({5, 4, 1, 1}), gc.param({3, 4, 2, 1})));
  }
  {
    GradCase gc;
    check_gradients(gc, silu_back(gc.ctx, gc.param({6, 3}), gc.param({6, 3}, 0, -3, 3)));
  }
  {
    GradCase gc;
    Tensor* pos = gc.input(DType::I32, {3}, ids_in(40));
    RopeParams p;
    p.n_dims = 8;
    p.mode = kRopeNeox;
    check_gradients(gc, rope_back(gc.ctx, gc.param({8, 2, 3}), pos, nullptr, p));
  }
  {  // both inputs of soft_max_back
    GradCase gc;
    check_gradients(gc, soft_max_back(gc.ctx, gc.param({6, 3}), gc.param({6, 3}, 0, 0.1f, 1.0f), 0.8f));
  }
  {  // linear in the upstream gradient (x stays an input)
    GradCase gc;
    Tensor* x = gc.input(DType::F32, {16, 3}, [](Tensor* t, std::mt19937& r) { GradCase::fill_float(t, r, 1.0f); });
    check_gradients(gc, rms_norm_back(gc.ctx, gc.param({16, 3}), x, 1e-5f));
  }
  {
    GradCase gc;
    Tensor* logits = gc.input(DType::F32, {6, 4}, [](Tensor* t, std::mt19937& r) { GradCase::fill_float(t, r, 1.0f); });
    Tensor* labels = gc.input(DType::F32, {6, 4}, [](Tensor* t, std::mt19937& r) { GradCase::fill_float(t, r, 0, 0, 0.3f); });
    check_gradients(gc, cross_entropy_loss_back(gc.ctx, gc.param({1}), logits, labels));
  }
}

// The routing block of qwen3moe's FFN: softmax, top-k, gathered and renormalized weights, experts.
TEST(Autograd, MoeRoutingBlock) {
  GradCase gc;
  Context& c = gc.ctx;
  const int64_t n_embd = 8, n_ff = 6, E = 4, k = 2, T = 5;
  Tensor* x = gc.param({n_embd, T});
  Tensor* router = gc.param({n_embd, E}, 1.0f);
  Tensor* gate = gc.param({n_embd, n_ff, E}, 0.5f);
  Tensor* up = gc.param({n_embd, n_ff, E}, 0.5f);
  Tensor* down = gc.param({n_ff, n_embd, E}, 0.5f);
  Tensor* probs = soft_max(c, mul_mat(c, router, x), nullptr, 1.0f);
  Tensor* ids = top_k(c, probs, k);
  Tensor* w = get_rows(c, reshape(c, probs, {1, E, T}), ids);
  w = div(c, w, reshape(c, sum_rows(c, reshape(c, w, {k, T})), {1, 1, T}));
  Tensor* xe = reshape(c, x, {n_embd, 1, T});
  Tensor* d = mul_mat_id(c, down, swiglu(c, mul_mat_id(c, gate, xe, ids), mul_mat_id(c, up, xe, ids)), ids);
  d = mul(c, d, w);
  Tensor* out = add(c, view_2d(c, d, n_embd, T, d->nb[2], 0), view_2d(c, d, n_embd, T, d->nb[2], d->nb[1]));
  // small steps: a larger one could change which experts top_k picks
  check_gradients(gc, out, {.eps = 1e-3, .max_rel_err = 1e-2});
}

TEST(Autograd, EveryForwardOpHasARule) {
  for (OpKind op : {OpKind::GET_ROWS, OpKind::MUL_MAT, OpKind::MUL_MAT_ID, OpKind::ADD, OpKind::SUB, OpKind::MUL,
                    OpKind::DIV, OpKind::SCALE, OpKind::RMS_NORM, OpKind::ROPE, OpKind::SOFT_MAX, OpKind::SILU,
                    OpKind::SWIGLU, OpKind::RESHAPE, OpKind::VIEW, OpKind::PERMUTE, OpKind::TRANSPOSE, OpKind::CONT,
                    OpKind::CPY, OpKind::CROSS_ENTROPY_LOSS, OpKind::SUM, OpKind::SUM_ROWS, OpKind::MEAN,
                    OpKind::SQR, OpKind::SQRT, OpKind::EXP, OpKind::LOG, OpKind::SIGMOID, OpKind::SOFTPLUS,
                    OpKind::GELU, OpKind::TANH, OpKind::SWIGLU_OAI, OpKind::ADD_ID, OpKind::CONCAT, OpKind::REPEAT,
                    OpKind::ALL_REDUCE})
    EXPECT_TRUE(op_has_grad_rule(op)) << op_name(op);
  EXPECT_FALSE(op_has_grad_rule(OpKind::FLASH_ATTN_EXT));  // training uses the unfused path
  EXPECT_FALSE(op_has_grad_rule(OpKind::TOP_K));
}

TEST(Autograd, MissingRuleIsAnUnsupportedErrorNamingTheOp) {
  Context c;
  Tensor* q = c.new_tensor(DType::F32, {8, 2, 2});
  q->flags |= kFlagParam;
  Tensor* k = c.new_tensor(DType::F32, {8, 3, 2});
  Tensor* v = c.new_tensor(DType::F32, {8, 3, 2});
  Tensor* loss = sum(c, flash_attn_ext(c, q, k, v, nullptr, 0.5f));
  Graph g;
  g.build_forward(loss);
  try {
    build_backward(c, g, loss);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::unsupported);
    EXPECT_NE(std::string(e.what()).find("FLASH_ATTN_EXT"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace loom::test
