// --override-kv: the parser's accepted and refused forms, and a model loaded with overrides
// reading them in place of its file's values (hyper-parameters, tokenizer) while the file's
// identity and checksum still describe its bytes.
#include <gtest/gtest.h>

#include "gguf_test_util.h"
#include "loom/core/error.h"
#include "loom/model/arch.h"
#include "loom/model/model.h"
#include "loom/model/model_file.h"

namespace loom {
namespace {

TEST(KvOverride, ParsesEveryTypeAndCommaLists) {
  const std::vector<KvOverride> o =
      parse_kv_overrides("a.b=int:-42,c=float:0.5,d=bool:true,e=bool:false,f=str:hello world,g=str:");
  ASSERT_EQ(o.size(), 6u);
  EXPECT_EQ(o[0].key, "a.b");
  EXPECT_EQ(o[0].value, gguf::Value::integer(gguf::ValueType::I64, -42));
  EXPECT_EQ(o[1].value, gguf::Value::floating(gguf::ValueType::F64, 0.5));
  EXPECT_EQ(o[2].value, gguf::Value::boolean(true));
  EXPECT_EQ(o[3].value, gguf::Value::boolean(false));
  EXPECT_EQ(o[4].value, gguf::Value::string("hello world"));
  EXPECT_EQ(o[5].value, gguf::Value::string(""));
  // a value may hold '=' and ':' (only the first of each separates)
  EXPECT_EQ(parse_kv_overrides("k=str:a=b:c")[0].value, gguf::Value::string("a=b:c"));
}

TEST(KvOverride, RefusesMalformedEntriesAsUsage) {
  for (const char* bad : {"", "k", "k=int", "=int:1", "k=int:", "k=int:1.5", "k=int:99999999999999999999", "k=int:0x10",
                          "k=float:nan", "k=float:inf", "k=float:1e999", "k=float:", "k=float:1x", "k=bool:1",
                          "k=bool:yes", "k=flt:1", "k=int:1,", "k=int:1,,j=int:2"}) {
    try {
      parse_kv_overrides(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::usage) << bad;
      EXPECT_NE(std::string(e.what()).find("--override-kv"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(parse_kv_overrides("k=str:" + std::string(128, 'x')), Error);
  EXPECT_THROW(parse_kv_overrides(std::string(128, 'k') + "=int:1"), Error);
  EXPECT_NO_THROW(parse_kv_overrides("k=str:" + std::string(127, 'x')));
}

TEST(KvOverride, ModelReadsTheOverriddenValues) {
  test::ScratchDir dir("kv-override");
  NewModelOptions n;
  n.hparams = preset_hparams(Arch::llama, "tiny");
  n.output = dir.file("m.gguf");
  make_random_model(n);
  ModelLoadOptions lo;
  lo.need_data = false;
  const std::unique_ptr<Model> plain = Model::load(n.output, lo);
  const uint64_t identity = plain->file().identity();
  EXPECT_NE(plain->hparams().n_ctx_train, 64);

  lo.kv_overrides = parse_kv_overrides(
      "llama.context_length=int:64,tokenizer.ggml.add_bos_token=bool:true,"
      "general.note=str:added");
  const std::unique_ptr<Model> m = Model::load(n.output, lo);
  EXPECT_EQ(m->hparams().n_ctx_train, 64);
  EXPECT_TRUE(m->tokenizer().add_bos());
  EXPECT_EQ(m->file().get_string("general.note"), "added");  // a key the file lacks is added
  EXPECT_EQ(m->file().identity(), identity);                 // the file is what it was

  // a value of the wrong kind for its key is the loader's invalid_input, naming the key
  lo.kv_overrides = parse_kv_overrides("llama.context_length=str:long");
  try {
    Model::load(n.output, lo);
    ADD_FAILURE() << "loaded a string context length";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_input);
    EXPECT_NE(std::string(e.what()).find("llama.context_length"), std::string::npos) << e.what();
  }
  lo.kv_overrides = parse_kv_overrides("llama.block_count=int:100000");
  EXPECT_THROW(Model::load(n.output, lo), Error);
}

}  // namespace
}  // namespace loom
