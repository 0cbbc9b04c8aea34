// Catalog, attention: ROPE and ROPE_BACK (normal/neox, partial rotation, frequency factors,
// linear and YaRN scaling), SOFT_MAX (scale, F32/F16 masks broadcast over heads, ALiBi, sinks;
// limit 1e-6), SOFT_MAX_BACK, FLASH_ATTN_EXT (F32/F16/BF16 and quantized KV cache types for K and
// V, GQA, masks, softcap, ALiBi, sinks; limit 5e-4).
#include <fmt/format.h>

#include <cmath>
#include <string>

#include "catalog_families.h"

namespace loom::testing::detail {

namespace {

constexpr uint32_t kTG = kModeTest | kModeGrad;

struct RopeCase {
  int64_t hd, n_head, tokens;
  int32_t n_dims, mode;
  bool ff;
  float freq_scale, attn_factor;
};

void add_ropes(std::vector<OpCase>& out) {
  const RopeCase cases[] = {
      {64, 4, 5, 64, ops::kRopeNormal, false, 1.0f, 1.0f}, {64, 4, 5, 64, ops::kRopeNeox, false, 1.0f, 1.0f},
      {64, 3, 7, 32, ops::kRopeNormal, false, 1.0f, 1.0f}, {64, 3, 7, 32, ops::kRopeNeox, false, 1.0f, 1.0f},
      {128, 2, 3, 128, ops::kRopeNeox, true, 1.0f, 1.0f},  {32, 5, 9, 32, ops::kRopeNormal, true, 0.5f, 0.8f},
      {80, 2, 4, 64, ops::kRopeNeox, false, 0.25f, 1.0f},  {8, 2, 3, 8, ops::kRopeNormal, false, 1.0f, 1.0f},
  };
  for (bool back : {false, true})
    for (const RopeCase& r : cases) {
      const bool grad = r.hd == 8 || (r.hd == 32 && !back);
      const std::string params =
          fmt::format("type=f32,ne=[{},{},{},1],n_dims={},mode={},ff={},freq_scale={:g},attn_factor={:g}", r.hd, r.n_head,
                      r.tokens, r.n_dims, r.mode == ops::kRopeNeox ? "neox" : "normal", r.ff ? 1 : 0, r.freq_scale,
                      r.attn_factor);
      add_case(out, back ? "ROPE_BACK" : "ROPE", params, grad ? kTG : kModeTest, [=](CaseBuilder& b) {
        ops::RopeParams p;
        p.n_dims = r.n_dims;
        p.mode = r.mode;
        p.n_ctx_orig = 4096;
        p.freq_scale = r.freq_scale;
        p.attn_factor = r.attn_factor;
        Tensor* a = grad ? b.param({r.hd, r.n_head, r.tokens}) : b.input(DType::F32, {r.hd, r.n_head, r.tokens});
        Tensor* pos = b.ids({r.tokens}, 0, 200);
        Tensor* ff = r.ff ? b.input(DType::F32, {r.n_dims / 2}, LeafInit::uniform(0.5, 2.0)) : nullptr;
        back ? ops::rope_back(b.ctx(), a, pos, ff, p) : ops::rope(b.ctx(), a, pos, ff, p);
      });
    }
}

// YaRN (gpt-oss's 32x over 4096, Llama-style 8x over 8192) in both pairings, forward and back.
void add_yarn_ropes(std::vector<OpCase>& out) {
  for (bool back : {false, true})
    for (bool neox : {false, true}) {
      const std::string params = fmt::format("type=f32,ne=[64,4,6,1],n_dims=64,mode={},yarn=1,freq_scale=0.03125",
                                             neox ? "neox" : "normal");
      add_case(out, back ? "ROPE_BACK" : "ROPE", params, neox ? kTG : kModeTest, [=](CaseBuilder& b) {
        ops::RopeParams p;
        p.n_dims = 64;
        p.mode = neox ? ops::kRopeNeox : ops::kRopeNormal;
        p.n_ctx_orig = 4096;
        p.freq_base = 150000.0f;
        p.freq_scale = 1.0f / 32;
        p.ext_factor = 1.0f;
        Tensor* a = neox ? b.param({64, 4, 6}) : b.input(DType::F32, {64, 4, 6});
        Tensor* pos = b.ids({6}, 0, 20000);
        back ? ops::rope_back(b.ctx(), a, pos, nullptr, p) : ops::rope(b.ctx(), a, pos, nullptr, p);
      });
    }
}

struct SoftMaxCase {
  int64_t ne[4];
  float scale, max_bias;
  int mask;  // 0 none, 1 F32, 2 F16
  int64_t mask_rows, mask_h;
};

void add_soft_maxes(std::vector<OpCase>& out) {
  const SoftMaxCase cases[] = {
      {{37, 5, 3, 2}, 1.0f, 0.0f, 0, 0, 0},     {{37, 5, 3, 2}, 0.125f, 0.0f, 0, 0, 0},
      {{16, 16, 4, 1}, 0.25f, 0.0f, 1, 16, 1},  {{16, 16, 4, 1}, 0.25f, 0.0f, 2, 16, 1},
      {{33, 7, 2, 1}, 1.0f, 0.0f, 2, 9, 1},     {{33, 7, 4, 1}, 1.0f, 0.0f, 1, 7, 4},
      {{32, 6, 4, 1}, 0.5f, 8.0f, 2, 6, 1},     {{32, 6, 6, 1}, 0.5f, 8.0f, 1, 8, 1},
      {{4096, 3, 1, 1}, 1.0f, 0.0f, 0, 0, 0},   {{1, 9, 1, 1}, 1.0f, 0.0f, 0, 0, 0},
  };
  for (const SoftMaxCase& s : cases) {
    const std::string params = fmt::format("type=f32,ne={},mask={},scale={:g},max_bias={:g}", ne_str(s.ne),
                                           s.mask == 0 ? "none" : s.mask == 1 ? "f32" : "f16", s.scale, s.max_bias);
    add_case(out, "SOFT_MAX", params, kModeTest, [=](CaseBuilder& b) {
      Tensor* a = b.input(DType::F32, {s.ne[0], s.ne[1], s.ne[2], s.ne[3]});
      Tensor* m = s.mask ? b.input(s.mask == 1 ? DType::F32 : DType::F16, {s.ne[0], s.mask_rows, s.mask_h}) : nullptr;
      ops::soft_max(b.ctx(), a, m, s.scale, s.max_bias);
    }).max_nmse = 1e-6;
  }
  for (int mask : {0, 2})  // attention sinks: one value per head
    add_case(out, "SOFT_MAX", fmt::format("type=f32,ne=[19,6,4,1],mask={},scale=0.25,sinks=1", mask ? "f16" : "none"),
             kModeTest, [=](CaseBuilder& b) {
               Tensor* m = mask ? b.input(DType::F16, {19, 6}) : nullptr;
               ops::soft_max(b.ctx(), b.input(DType::F32, {19, 6, 4}), m, 0.25f, 0.0f,
                             b.input(DType::F32, {4}, LeafInit::normal(0.0, 2.0)));
             }).max_nmse = 1e-6;
  add_case(out, "SOFT_MAX", "type=f32,ne=[9,4,1,1],mask=none,scale=0.5,max_bias=0,grad=1", kModeGrad, [](CaseBuilder& b) {
    ops::soft_max(b.ctx(), b.param({9, 4}), nullptr, 0.5f);
  }).max_nmse = 1e-6;
  for (auto ne : {std::array<int64_t, 4>{17, 5, 2, 1}, {64, 3, 1, 1}})
    add_case(out, "SOFT_MAX_BACK", fmt::format("type=f32,ne={},scale=0.5", ne_str(ne.data())), kModeTest, [=](CaseBuilder& b) {
      ops::soft_max_back(b.ctx(), b.input(DType::F32, {ne[0], ne[1], ne[2], ne[3]}),
                         b.input(DType::F32, {ne[0], ne[1], ne[2], ne[3]}, LeafInit::uniform(0.0, 0.2)), 0.5f);
    });
  add_case(out, "SOFT_MAX", "type=f32,ne=[9,4,3,1],mask=none,scale=0.5,sinks=1,grad=1", kModeGrad, [](CaseBuilder& b) {
    ops::soft_max(b.ctx(), b.param({9, 4, 3}), nullptr, 0.5f, 0.0f, b.param({3}, LeafInit::normal(0.0, 2.0)));
  }).max_nmse = 1e-6;
  add_case(out, "SOFT_MAX_BACK", "type=f32,ne=[6,3,1,1],scale=1,grad=1", kModeGrad, [](CaseBuilder& b) {
    ops::soft_max_back(b.ctx(), b.param({6, 3}), b.param({6, 3}, LeafInit::uniform(0.0, 0.3)), 1.0f);
  });
}

struct FaCase {
  int64_t d, dv, n_q, n_kv, h, h_kv, batch;
  DType kv;
  int mask;  // 0 none, 1 F32, 2 F16
  float max_bias, softcap;
  uint32_t modes;
  bool sinks = false;
  bool cache_rows = false;  // K/V as a model's cache holds them: a row per key with every head in it
};

void add_flash_attn(std::vector<OpCase>& out) {
  const FaCase cases[] = {
      {64, 64, 7, 33, 4, 4, 1, DType::F16, 2, 0.0f, 0.0f, kModeTest},
      {128, 128, 1, 256, 8, 2, 1, DType::F16, 2, 0.0f, 0.0f, kModeTest},
      {64, 64, 5, 40, 4, 2, 1, DType::F32, 1, 0.0f, 0.0f, kModeTest},
      {64, 64, 5, 40, 4, 1, 1, DType::BF16, 2, 0.0f, 0.0f, kModeTest},
      {32, 32, 9, 17, 2, 2, 2, DType::F16, 0, 0.0f, 0.0f, kModeTest},
      {64, 64, 4, 64, 4, 4, 1, DType::F16, 2, 0.0f, 30.0f, kModeTest},
      {64, 64, 4, 64, 6, 6, 1, DType::F16, 2, 8.0f, 0.0f, kModeTest},
      {64, 32, 3, 20, 2, 1, 1, DType::F32, 0, 0.0f, 0.0f, kModeTest},
      {80, 80, 12, 96, 3, 1, 1, DType::F16, 1, 0.0f, 0.0f, kModeTest},
      {64, 64, 6, 48, 4, 2, 1, DType::F16, 2, 0.0f, 0.0f, kModeTest, true},
      {64, 64, 1, 40, 8, 2, 1, DType::F32, 1, 0.0f, 0.0f, kModeTest, true},
      {128, 128, 1, 4096, 32, 8, 1, DType::F16, 2, 0.0f, 0.0f, kModePerf},
      {128, 128, 1, 16384, 32, 8, 1, DType::F16, 2, 0.0f, 0.0f, kModePerf},  // 64 MiB of K/V: past the caches
      {64, 64, 1, 256, 16, 4, 1, DType::F16, 2, 0.0f, 0.0f, kModePerf},  // a decode step of the ~300M llama
      {128, 128, 512, 512, 32, 8, 1, DType::F16, 2, 0.0f, 0.0f, kModePerf},
      {64, 64, 512, 512, 16, 4, 1, DType::F16, 2, 0.0f, 0.0f, kModePerf},  // a 512-token prompt of the ~300M llama
      // decode steps, K/V in the cache's layout: a 1B llama at depth 2048, an 8B at 8192 (past L3)
      // and at 256 (in L2: the walk's own speed)
      {64, 64, 1, 2048, 32, 8, 1, DType::F16, 2, 0.0f, 0.0f, kModePerf, false, true},
      {128, 128, 1, 8192, 32, 8, 1, DType::F16, 2, 0.0f, 0.0f, kModePerf, false, true},
      {128, 128, 1, 256, 32, 8, 1, DType::F16, 2, 0.0f, 0.0f, kModePerf, false, true},
      // a 1B llama's first 64 tokens: one key tile, split by kv heads over the threads
      {64, 64, 1, 64, 32, 8, 1, DType::F16, 2, 0.0f, 0.0f, kModePerf, false, true},
      {64, 64, 1, 67, 8, 2, 1, DType::F16, 2, 0.0f, 0.0f, kModeTest, false, true},
  };
  auto add = [&](const FaCase& f, DType tk, DType tv) {
    const std::string types =
        tk == tv ? fmt::format("type_kv={}", tn(tk)) : fmt::format("type_k={},type_v={}", tn(tk), tn(tv));
    const std::string params = fmt::format(
        "hs={},hs_v={},n_q={},n_kv={},nh={},nh_kv={},nb={},{},mask={},max_bias={:g},softcap={:g}{}{}", f.d, f.dv, f.n_q,
        f.n_kv, f.h, f.h_kv, f.batch, types, f.mask == 0 ? "none" : f.mask == 1 ? "f32" : "f16", f.max_bias, f.softcap,
        f.sinks ? ",sinks=1" : "", f.cache_rows ? ",layout=cache" : "");
    add_case(out, "FLASH_ATTN_EXT", params, f.modes, [=](CaseBuilder& b) {
      Tensor* q = b.input(DType::F32, {f.d, f.n_q, f.h, f.batch});
      Tensor* k = f.cache_rows ? ops::permute(b.ctx(), b.input(tk, {f.d, f.h_kv, f.n_kv, f.batch}), 0, 2, 1, 3)
                               : b.input(tk, {f.d, f.n_kv, f.h_kv, f.batch});
      Tensor* v = f.cache_rows ? ops::permute(b.ctx(), b.input(tv, {f.dv, f.h_kv, f.n_kv, f.batch}), 0, 2, 1, 3)
                               : b.input(tv, {f.dv, f.n_kv, f.h_kv, f.batch});
      Tensor* m = f.mask ? b.input(f.mask == 1 ? DType::F32 : DType::F16, {f.n_kv, f.n_q}) : nullptr;
      Tensor* sinks = f.sinks ? b.input(DType::F32, {f.h}, LeafInit::normal(0.0, 2.0)) : nullptr;
      ops::flash_attn_ext(b.ctx(), q, k, v, m, 1.0f / std::sqrt((float)f.d), f.max_bias, f.softcap, sinks);
    }).max_nmse = 5e-4;
  };
  for (const FaCase& f : cases) add(f, f.kv, f.kv);
  // quantized caches (-ctk/-ctv): decode (streamed tiles, GQA), a prompt (packed panels), a
  // quantized K with a plain V, and the perf of a decode step over a q8_0 / q4_0 cache
  std::vector<DType> quantized = {DType::Q8_0, DType::Q4_0};
  for (const char* name : {"q4_1", "q5_0", "q5_1"})  // the core's other cache types, where it has them
    if (auto t = dtype_from_name(name)) quantized.push_back(*t);
  for (DType t : quantized) {
    add({128, 128, 1, 256, 8, 2, 1, t, 2, 0.0f, 0.0f, kModeTest}, t, t);
    add({64, 64, 7, 100, 4, 2, 1, t, 2, 0.0f, 0.0f, kModeTest}, t, t);
    add({64, 64, 1, 64, 4, 4, 2, t, 0, 0.0f, 0.0f, kModeTest}, t, DType::F16);
  }
  add({64, 64, 3, 40, 4, 1, 1, DType::Q8_0, 1, 0.0f, 0.0f, kModeTest}, DType::F16, DType::Q8_0);
  for (DType t : {DType::Q8_0, DType::Q4_0})
    add({128, 128, 1, 4096, 32, 8, 1, t, 2, 0.0f, 0.0f, kModePerf}, t, t);
}

}  // namespace

void add_attention_cases(std::vector<OpCase>& out) {
  add_ropes(out);
  add_yarn_ropes(out);
  add_soft_maxes(out);
  add_flash_attn(out);
  // perf: a 512-token batch of a 32-head, 128-dim model, both pairings (llama: normal, qwen: neox)
  for (const bool neox : {false, true})
    add_case(out, "ROPE",
             std::string("type=f32,ne=[128,32,512,1],n_dims=128,mode=") + (neox ? "neox" : "normal") +
                 ",ff=0,freq_scale=1,attn_factor=1",
             kModePerf, [=](CaseBuilder& b) {
               ops::RopeParams p;
               p.n_dims = 128;
               p.mode = neox ? ops::kRopeNeox : ops::kRopeNormal;
               ops::rope(b.ctx(), b.input(DType::F32, {128, 32, 512}), b.ids({512}, 0, 4096), nullptr, p);
             });
  add_case(out, "SOFT_MAX", "type=f32,ne=[512,512,32,1],mask=f16,scale=0.0883883,max_bias=0", kModePerf,
           [](CaseBuilder& b) {
             ops::soft_max(b.ctx(), b.input(DType::F32, {512, 512, 32}), b.input(DType::F16, {512, 512}), 0.0883883f);
           }).max_nmse = 1e-6;
}

}  // namespace loom::testing::detail
