// `loom-gguf quantize` as a user runs it: a tiny f16 llama to every type of the acceptance list,
// each file read back (types per tensor, file type id) and run by loom-run; the exit codes for a
// missing output folder (3, no file), an unknown type (2), requantizing without the flag (2) and
// a source block with a NaN scale (3, naming the tensor); no temporary file left behind; gpt-oss's
// experts kept MXFP4 in every mix; --imatrix with a llama-imatrix .dat file and its flags.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>

#include "loom/gguf/gguf.h"
#include "tool_runner.h"

namespace {

namespace fs = std::filesystem;

using loom::test::quote;

class QuantizeTool : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = loom::test::scratch_dir("loom-e2e-quantize");
    bin_ = std::string(LOOM_BIN_DIR) + "/";
    if (!fs::exists(bin_ + "loom-gguf")) GTEST_SKIP() << "loom-gguf is not built";
    f16_ = file("f16.gguf");
    const auto r = run("loom-gguf", "new --arch llama --preset tiny --type f16 --seed 2 -o " + quote(f16_));
    ASSERT_EQ(r.rc, 0) << r.err;
  }
  void TearDown() override { loom::test::remove_scratch(dir_); }

  loom::test::ToolResult run(const std::string& tool, const std::string& args) {
    return loom::test::run_command(quote(bin_ + tool) + " " + args, dir_);
  }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  bool no_leftovers() const {
    for (const auto& e : fs::directory_iterator(dir_))
      if (e.path().extension() == ".tmp") return false;
    return true;
  }

  fs::path dir_;
  std::string bin_, f16_;
};

TEST_F(QuantizeTool, EveryTypeLoadsAndRuns) {
  const bool can_run = fs::exists(bin_ + "loom-run");
  const std::pair<const char*, int> types[] = {{"Q4_1", 3},   {"Q5_0", 8},   {"Q5_1", 9},   {"Q2_K", 10},
                                               {"Q3_K_M", 12}, {"Q4_K_M", 15}, {"Q5_K_M", 17}, {"Q6_K", 18},
                                               {"IQ4_NL", 25}, {"IQ4_XS", 30}, {"Q8_0", 7},   {"Q4_0", 2}};
  for (const auto& [type, id] : types) {
    SCOPED_TRACE(type);
    const std::string out = file(std::string("q-") + type + ".gguf");
    auto r = run("loom-gguf", "quantize " + quote(f16_) + " " + quote(out) + " " + type + " 2");
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.out.find("converting to"), std::string::npos) << r.out;  // progress lines
    r = run("loom-gguf", "info --json " + quote(out));
    ASSERT_EQ(r.rc, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["metadata"]["general.file_type"], id);
    EXPECT_EQ(j["metadata"]["general.quantization_version"], 2);
    for (const auto& t : j["tensors"]) {
      const std::string name = t["name"];
      if (name.find("norm") != std::string::npos) EXPECT_EQ(t["type"], "f32") << name;
      else EXPECT_NE(t["type"], "f16") << name;  // every weight converted (fallbacks included)
    }
    if (can_run) {
      r = run("loom-run", "-m " + quote(out) + " -p hello -n 4 --temp 0");
      EXPECT_EQ(r.rc, 0) << r.err;
    }
  }
  EXPECT_TRUE(no_leftovers());
}

// The i-quant mixes on a llama of width 256 (their blocks): the file type id, the mix's base type
// in the file, and a perplexity near the f16 file's (a random model's is near its vocabulary size;
// quantizing moves it by a few percent, a wrong decode by far more).
TEST_F(QuantizeTool, IQuantMixesLoadAndRun) {
  if (!fs::exists(bin_ + "loom-run")) GTEST_SKIP() << "loom-run is not built";
  const std::string f16 = file("w256.gguf"), text = file("text.txt");
  auto r =
      run("loom-gguf", "new --arch llama --preset tiny --n-embd 256 --n-ff 512 --type f16 --seed 1 -o " + quote(f16));
  ASSERT_EQ(r.rc, 0) << r.err;
  {
    std::ofstream f(text);
    for (int i = 0; i < 60; ++i) f << "The quick brown fox jumps over the lazy dog " << i << " times, said the owl. ";
  }
  auto ppl = [&](const std::string& model) {
    const auto p =
        run("loom-run", "-m " + quote(model) + " -t 2 --perplexity -f " + quote(text) + " -c 128 --chunks 3");
    EXPECT_EQ(p.rc, 0) << p.err;
    const std::string all = p.out + p.err;
    const size_t at = all.find("PPL = ");
    return at == std::string::npos ? -1.0 : std::stod(all.substr(at + 6));
  };
  const double base = ppl(f16);
  ASSERT_GT(base, 1.0);
  const std::tuple<const char*, int, const char*> types[] = {
      {"IQ1_S", 24, "iq1_s"},  {"IQ1_M", 31, "iq1_m"}, {"IQ2_XXS", 19, "iq2_xxs"}, {"IQ2_XS", 20, "iq2_xs"},
      {"IQ2_S", 28, "iq2_xs"}, {"IQ2_M", 29, "iq2_s"}, {"IQ3_XXS", 23, "iq3_xxs"}, {"IQ3_XS", 22, "iq3_s"},
      {"IQ3_S", 26, "iq3_s"},  {"IQ3_M", 27, "iq3_s"}};
  for (const auto& [type, id, base_type] : types) {
    SCOPED_TRACE(type);
    const std::string out = file(std::string("q-") + type + ".gguf");
    r = run("loom-gguf", "quantize " + quote(f16) + " " + quote(out) + " " + type + " 2");
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_NE((r.out + r.err).find("without an importance matrix"), std::string::npos);
    EXPECT_NE((r.out + r.err).find("0 fallbacks"), std::string::npos) << r.out << r.err;
    r = run("loom-gguf", "info --json " + quote(out));
    ASSERT_EQ(r.rc, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["metadata"]["general.file_type"], id);
    int n_base = 0;
    for (const auto& t : j["tensors"]) n_base += t["type"] == base_type;
    EXPECT_GE(n_base, 4);
    const double p = ppl(out);
    EXPECT_NEAR(p / base, 1.0, 0.15) << p << " against f16's " << base;
  }
  EXPECT_TRUE(no_leftovers());
}

TEST_F(QuantizeTool, Q4_K_MMixAndOptions) {
  const std::string out = file("m.gguf");
  auto r = run("loom-gguf", "quantize " + quote(f16_) + " " + quote(out) + " q4_k_m");
  ASSERT_EQ(r.rc, 0) << r.err;
  auto f = loom::gguf::File::open(out);
  EXPECT_EQ(f->find_tensor("blk.0.attn_q.weight")->type, loom::DType::Q4_K);
  // 2 layers: only the last is in llama.cpp's "more bits" set (i >= 7 n / 8)
  EXPECT_EQ(f->find_tensor("blk.0.attn_v.weight")->type, loom::DType::Q4_K);
  EXPECT_EQ(f->find_tensor("blk.1.attn_v.weight")->type, loom::DType::Q6_K);
  EXPECT_EQ(f->find_tensor("blk.1.ffn_down.weight")->type, loom::DType::Q6_K);
  const auto* output = f->find_tensor("output.weight");
  const auto* embd = f->find_tensor("token_embd.weight");
  EXPECT_EQ((output ? output : embd)->type, loom::DType::Q6_K);
  r = run("loom-gguf", "quantize --pure --output-tensor-type q8_0 --token-embedding-type Q4_0 " + quote(f16_) + " " +
                           quote(out) + " Q4_K_M");
  ASSERT_EQ(r.rc, 0) << r.err;
  f = loom::gguf::File::open(out);
  EXPECT_EQ(f->find_tensor("blk.1.attn_v.weight")->type, loom::DType::Q4_K);  // --pure
  EXPECT_EQ(f->find_tensor("token_embd.weight")->type, loom::DType::Q4_0);
  if (f->find_tensor("output.weight")) {
    EXPECT_EQ(f->find_tensor("output.weight")->type, loom::DType::Q8_0);
  }
}

// gpt-oss: the expert tensors come out MXFP4 whatever the mix, the rest in the mix's types;
// --pure puts the experts in the requested type too; the file runs.
TEST_F(QuantizeTool, GptOssExpertsStayMxfp4) {
  const std::string oss = file("oss.gguf"), out = file("oss-q.gguf");
  auto r = run("loom-gguf", "new --arch gpt-oss --preset tiny --type f16 --seed 3 -o " + quote(oss));
  ASSERT_EQ(r.rc, 0) << r.err;
  for (const char* type : {"Q4_K_M", "Q8_0"}) {
    SCOPED_TRACE(type);
    r = run("loom-gguf", "quantize " + quote(oss) + " " + quote(out) + " " + type + " 2");
    ASSERT_EQ(r.rc, 0) << r.err;
    const auto f = loom::gguf::File::open(out);
    int n_experts = 0;
    for (const auto& t : f->tensors()) {
      if (t.name.find("_exps.weight") == std::string::npos) continue;
      ++n_experts;
      EXPECT_EQ(t.type, loom::DType::MXFP4) << t.name;
    }
    EXPECT_GT(n_experts, 0);
    const loom::DType base = std::strcmp(type, "Q8_0") == 0 ? loom::DType::Q8_0 : loom::DType::Q4_K;
    EXPECT_EQ(f->find_tensor("blk.0.attn_q.weight")->type, base);
    EXPECT_EQ(f->find_tensor("blk.0.ffn_up_exps.bias")->type, loom::DType::F32);
    if (fs::exists(bin_ + "loom-run")) {
      r = run("loom-run", "-m " + quote(out) + " -p hello -n 4 --temp 0");
      EXPECT_EQ(r.rc, 0) << r.err;
    }
  }
  r = run("loom-gguf", "quantize --pure " + quote(oss) + " " + quote(out) + " Q4_0 2");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(loom::gguf::File::open(out)->find_tensor("blk.0.ffn_up_exps.weight")->type, loom::DType::Q4_0);
  EXPECT_TRUE(no_leftovers());
}

TEST_F(QuantizeTool, ExitCodesAndNoPartialFiles) {
  auto r = run("loom-gguf", "quantize " + quote(f16_) + " " + quote(file("nodir/x.gguf")) + " Q4_0");
  EXPECT_EQ(r.rc, 3) << r.err;
  EXPECT_FALSE(fs::exists(file("nodir")));
  r = run("loom-gguf", "quantize " + quote(f16_) + " " + quote(file("x.gguf")) + " Q4_K_X");
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("Q4_K_M"), std::string::npos) << r.err;  // lists the valid ones
  r = run("loom-gguf", "quantize " + quote(file("missing.gguf")) + " " + quote(file("x.gguf")) + " Q4_0");
  EXPECT_EQ(r.rc, 3) << r.err;
  // an absurd thread count: usage, before any thread starts
  r = run("loom-gguf", "quantize " + quote(f16_) + " " + quote(file("x.gguf")) + " Q4_0 100000");
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("NTHREADS"), std::string::npos) << r.err;
  // requantizing needs the flag
  const std::string q8 = file("q8.gguf");
  ASSERT_EQ(run("loom-gguf", "quantize " + quote(f16_) + " " + quote(q8) + " Q8_0").rc, 0);
  r = run("loom-gguf", "quantize " + quote(q8) + " " + quote(file("x.gguf")) + " Q4_0");
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("--allow-requantize"), std::string::npos) << r.err;
  ASSERT_EQ(run("loom-gguf", "quantize --allow-requantize " + quote(q8) + " " + quote(file("x.gguf")) + " Q4_0").rc, 0);
  // a NaN scale in the source: exit 3 naming the tensor, no output
  size_t at = 0;
  {
    auto f = loom::gguf::File::open(q8);
    const auto* t = f->find_tensor("blk.1.ffn_up.weight");
    ASSERT_NE(t, nullptr);
    at = f->data_offset() + t->offset + 3 * 34;  // block 3's f16 d (Q8_0: 34 bytes per block)
  }
  {
    std::fstream io(q8, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp((std::streamoff)at);
    const char nan16[2] = {0x00, 0x7e};
    io.write(nan16, 2);
  }
  r = run("loom-gguf", "quantize --allow-requantize " + quote(q8) + " " + quote(file("y.gguf")) + " Q4_0");
  EXPECT_EQ(r.rc, 3) << r.err;
  EXPECT_NE(r.err.find("blk.1.ffn_up.weight"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("NaN"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(file("y.gguf")));
  EXPECT_TRUE(no_leftovers());
}

// --imatrix as llama-quantize takes it: a .dat file from llama-imatrix (written here), recorded in
// the output's metadata, used for the i-quants without the no-matrix warning; the include and
// exclude filters; a truncated file or one for another model is exit 3 with no output.
TEST_F(QuantizeTool, ImportanceMatrixFlags) {
  // one entry per weight matrix of the tiny llama (width 256, ffn 512), mean squares 1..2
  std::string dat;
  auto i32 = [&](int32_t v) { dat.append(reinterpret_cast<const char*>(&v), 4); };
  std::vector<std::pair<std::string, int>> entries;
  for (int l = 0; l < 2; ++l)
    for (const char* n : {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"})
      entries.emplace_back("blk." + std::to_string(l) + "." + n + ".weight", std::string(n) == "ffn_down" ? 512 : 256);
  i32((int32_t)entries.size());
  for (const auto& [name, n] : entries) {
    i32((int32_t)name.size());
    dat += name;
    i32(1);
    i32(n);
    for (int i = 0; i < n; ++i) {
      const float v = 1.0f + (float)(i % 7) / 7.0f;
      dat.append(reinterpret_cast<const char*>(&v), 4);
    }
  }
  i32(3);
  i32(8);
  dat += "calib.md";
  const std::string im = file("m.imatrix");
  std::ofstream(im, std::ios::binary) << dat;

  const std::string out = file("iq2.gguf");
  auto r = run("loom-gguf", "quantize --imatrix " + quote(im) + " " + quote(f16_) + " " + quote(out) + " IQ2_XXS");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("14 of 14 entries used, computed on 3 chunks"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("warning"), std::string::npos) << r.out;
  {
    auto f = loom::gguf::File::open(out);
    EXPECT_EQ(f->get_string("quantize.imatrix.dataset"), "calib.md");
    EXPECT_EQ(f->get_int("quantize.imatrix.entries_count"), 14);
    EXPECT_EQ(f->get_int("quantize.imatrix.chunks_count"), 3);
  }
  EXPECT_EQ(run("loom-run", "-m " + quote(out) + " -p hello -n 4 --temp 0").rc, 0);
  r = run("loom-gguf", "quantize --imatrix " + quote(im) + " --include-weights attn_v --include-weights ffn_down " +
                           quote(f16_) + " " + quote(file("q4.gguf")) + " Q4_0");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("4 of 14 entries used"), std::string::npos) << r.out;
  r = run("loom-gguf", "quantize --imatrix " + quote(im) + " --include-weights a --exclude-weights b " + quote(f16_) +
                           " " + quote(file("x.gguf")) + " Q4_0");
  EXPECT_EQ(r.rc, 2) << r.err;
  r = run("loom-gguf", "quantize --exclude-weights b " + quote(f16_) + " " + quote(file("x.gguf")) + " Q4_0");
  EXPECT_EQ(r.rc, 2) << r.err;
  std::ofstream(file("cut.imatrix"), std::ios::binary) << dat.substr(0, dat.size() / 2);
  r = run("loom-gguf", "quantize --imatrix " + quote(file("cut.imatrix")) + " " + quote(f16_) + " " +
                           quote(file("x.gguf")) + " Q4_0");
  EXPECT_EQ(r.rc, 3) << r.err;
  EXPECT_NE(r.err.find("cut.imatrix"), std::string::npos) << r.err;
  // a matrix for a wider model
  const std::string wide = file("wide.gguf");
  ASSERT_EQ(run("loom-gguf", "new --arch llama --preset tiny --n-embd 512 --type f16 -o " + quote(wide)).rc, 0);
  r = run("loom-gguf", "quantize --imatrix " + quote(im) + " " + quote(wide) + " " + quote(file("x.gguf")) + " Q4_K_M");
  EXPECT_EQ(r.rc, 3) << r.err;
  EXPECT_NE(r.err.find("the tensor needs"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(file("x.gguf")));
  EXPECT_TRUE(no_leftovers());
}

// The whole loop without llama.cpp: loom-run --perplexity --imatrix-out computes a matrix over a
// text, loom-gguf quantize --imatrix reads it; the flags' misuses are usage errors.
TEST_F(QuantizeTool, ImatrixFromLoomRunFeedsQuantize) {
  std::string text;
  for (int i = 0; i < 60; ++i) text += "the quick brown fox jumps over the lazy dog " + std::to_string(i) + ". ";
  std::ofstream(file("text.txt")) << text;
  const std::string im = file("run.imatrix");
  auto r = run("loom-run", "-m " + quote(f16_) + " --perplexity -f " + quote(file("text.txt")) +
                               " -c 64 --chunks 3 --imatrix-out " + quote(im));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("14 entries from 3 chunks of 64 tokens"), std::string::npos) << r.err;
  {
    auto f = loom::gguf::File::open(im);
    EXPECT_EQ(f->get_string("general.type"), "imatrix");
    EXPECT_EQ(f->get_int("imatrix.chunk_count"), 3);
    const auto* counts = f->find_tensor("blk.0.ffn_down.weight.counts");
    ASSERT_NE(counts, nullptr);
    float n = 0;
    std::memcpy(&n, f->tensor_data(*counts), 4);
    EXPECT_EQ(n, 3 * 64);  // every token of the 3 chunks
  }
  r = run("loom-gguf",
          "quantize --imatrix " + quote(im) + " " + quote(f16_) + " " + quote(file("q.gguf")) + " IQ3_XXS");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("14 of 14 entries used, computed on 3 chunks"), std::string::npos) << r.out;
  EXPECT_EQ(run("loom-run", "-m " + quote(file("q.gguf")) + " -p hello -n 4 --temp 0").rc, 0);
  // misuses: without --perplexity, --process-output alone, -sm tensor
  EXPECT_EQ(run("loom-run", "-m " + quote(f16_) + " -p hi -n 2 --imatrix-out " + quote(file("x.imatrix"))).rc, 2);
  EXPECT_EQ(
      run("loom-run", "-m " + quote(f16_) + " --perplexity -f " + quote(file("text.txt")) + " --process-output").rc, 2);
  EXPECT_EQ(run("loom-run", "-m " + quote(f16_) + " --perplexity -f " + quote(file("text.txt")) +
                                " -c 64 -sm tensor --sim-devices 2x256MiB --imatrix-out " + quote(file("x.imatrix")))
                .rc,
            2);
  EXPECT_FALSE(fs::exists(file("x.imatrix")));
}

}  // namespace
