// loom as a library: load a GGUF model, greedily continue a prompt, print the text.
// Usage: loom-consumer MODEL.gguf [PROMPT]
#include <cstdio>
#include <exception>
#include <string>

#include "loom/model/generate.h"
#include "loom/model/model.h"
#include "loom/model/session.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL.gguf [PROMPT]\n", argv[0]);
    return 2;
  }
  try {
    std::unique_ptr<loom::Model> model = loom::Model::load(argv[1]);
    loom::SessionParams params;
    params.n_ctx = 128;
    loom::Session session(*model, params);
    loom::SamplerParams sp;
    sp.temp = 0.0f;  // greedy
    loom::Sampler sampler(sp);
    const std::string prompt = argc > 2 ? argv[2] : "The";
    loom::GenerateResult r = loom::generate(session, prompt, 8, sampler, [](std::string_view) {});
    std::printf("%s%s\n", prompt.c_str(), r.text.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom-consumer: %s\n", e.what());
    return 1;
  }
}
