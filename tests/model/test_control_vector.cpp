// Control vectors (--control-vector): the file's rules as llama.cpp reads them, files adding up
// with their scales, the layer range, and bad files refused naming the tensor.
#include <gtest/gtest.h>

#include <cstring>

#include "gguf_test_util.h"
#include "loom/core/error.h"
#include "loom/gguf/gguf.h"
#include "loom/model/control_vector.h"
#include "loom/model/model.h"
#include "loom/model/model_file.h"
#include "loom/model/session.h"

namespace loom {
namespace {

// Writes direction tensors (name, values) of F32 (1-D unless two_d).
std::string write_cvec(const std::string& path, const std::vector<std::pair<std::string, std::vector<float>>>& dirs,
                       DType type = DType::F32, bool two_d = false) {
  gguf::Writer w;
  w.set("general.architecture", gguf::Value::string("controlvector"));
  std::vector<std::vector<uint8_t>> keep;  // the writer reads them at write()
  for (const auto& [name, v] : dirs) {
    const int64_t ne[2] = {(int64_t)v.size() / (two_d ? 2 : 1), two_d ? 2 : 1};
    keep.emplace_back(v.size() * dtype_info(type).type_size / dtype_info(type).block_size);
    if (type == DType::F32) std::memcpy(keep.back().data(), v.data(), keep.back().size());
    w.add_tensor(name, type, two_d ? 2 : 1, ne, keep.back().data());
  }
  w.write(path);
  return path;
}

TEST(ControlVector, FilesAddUpWithTheirScales) {
  test::ScratchDir dir("cvec");
  const std::string a = write_cvec(dir.file("a.gguf"), {{"direction.1", {1, 2}}, {"direction.3", {3, 4}}});
  const std::string b = write_cvec(dir.file("b.gguf"), {{"direction.3", {10, 20}}});
  const ControlVectorData d = load_control_vectors({{a, 1.0f}, {b, 0.5f}}, 2);
  ASSERT_EQ(d.has.size(), 4u);
  EXPECT_TRUE(d.has[1]);
  EXPECT_FALSE(d.has[2]);
  EXPECT_TRUE(d.has[3]);
  EXPECT_EQ(d.data, (std::vector<float>{1, 2, 0, 0, 8, 14}));  // layer N at (N - 1) * n_embd
}

TEST(ControlVector, BadFilesAreRefusedNamingTheTensor) {
  test::ScratchDir dir("cvec-bad");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {write_cvec(dir.file("zero.gguf"), {{"direction.0", {1, 2}}}), "'direction.0' is not a direction.N with N >= 1"},
      {write_cvec(dir.file("name.gguf"), {{"dir.1", {1, 2}}}), "'dir.1' is not a direction.N"},
      {write_cvec(dir.file("junk.gguf"), {{"direction.1x", {1, 2}}}), "'direction.1x' is not a direction.N"},
      {write_cvec(dir.file("size.gguf"), {{"direction.1", {1, 2, 3}}}), "has 3 values, the model's n_embd is 2"},
      {write_cvec(dir.file("f16.gguf"), {{"direction.1", {1, 2}}}, DType::F16), "must be a 1-D f32 tensor"},
      {write_cvec(dir.file("2d.gguf"), {{"direction.1", {1, 2, 3, 4}}}, DType::F32, true), "must be a 1-D f32 tensor"},
      {write_cvec(dir.file("none.gguf"), {}), "no direction tensors"},
  };
  for (const auto& [path, needle] : cases) {
    try {
      load_control_vectors({{path, 1.0f}}, 2);
      ADD_FAILURE() << path << " loaded";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::invalid_input) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
}

std::vector<float> logits_with(const std::string& model, const ControlVectorOptions& cv) {
  ModelLoadOptions lo;
  lo.control_vectors = cv;
  std::unique_ptr<Model> m = Model::load(model, lo);
  SessionParams sp;
  sp.n_ctx = 32;
  Session s(*m, sp);
  const std::vector<int32_t> toks = {1, 2, 3, 4, 5};
  s.decode(toks);
  return std::vector<float>(s.logits(0).begin(), s.logits(0).end());
}

TEST(ControlVector, LayersInTheRangeTakeTheirDirections) {
  test::ScratchDir dir("cvec-model");
  NewModelOptions n;
  n.hparams = preset_hparams(Arch::llama, "tiny");
  n.hparams.n_layer = 3;
  n.output = dir.file("m.gguf");
  make_random_model(n);
  make_random_control_vector(n.output, dir.file("cv.gguf"), 0.5f, 1);
  const std::string cv = dir.file("cv.gguf");
  const std::vector<float> base = logits_with(n.output, {});
  const std::vector<float> with = logits_with(n.output, {{{cv, 1.0f}}});
  EXPECT_NE(with, base);
  EXPECT_EQ(logits_with(n.output, {{{cv, 0.0f}}}), base);        // x + 0 is x
  EXPECT_EQ(logits_with(n.output, {{{cv, 1.0f}}, 3, 0}), base);  // layer 3 does not exist
  EXPECT_EQ(logits_with(n.output, {{{cv, 2.0f}}}), logits_with(n.output, {{{cv, 1.0f}, {cv, 1.0f}}}));  // 2v both ways
  const std::vector<float> only2 = logits_with(n.output, {{{cv, 1.0f}}, 2, 2});
  EXPECT_NE(only2, base);
  EXPECT_NE(only2, with);
  EXPECT_EQ(logits_with(n.output, {{{cv, 1.0f}}, 1, 2}), with);  // directions exist for layers 1 and 2 only
}

}  // namespace
}  // namespace loom
