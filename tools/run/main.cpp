// loom-run: generate text from a GGUF model, hold a conversation, or measure perplexity over a
// text file. Flags: lib/tools-common (run_flags.cpp); the work is in lib/model.
#include "loom/tools/main.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "loom/core/error.h"
#include "loom/core/files.h"
#include "loom/core/log.h"
#include "loom/core/thread_pool.h"
#include "loom/model/generate.h"
#include "loom/model/hellaswag.h"
#include "loom/model/report.h"
#include "loom/model/winogrande.h"
#include "loom/tools/common.h"
#include "loom/tools/run.h"

using namespace loom;

int main(int argc, char** argv) {
  CLI::App app{"loom-run: text generation, conversation and perplexity with GGUF models"};
  tools::CommonOptions common;
  tools::add_common_flags(app, common);
  tools::RunOptions ro;
  tools::add_run_flags(app, ro);

  return tools::run_main("run", argc, argv, app, [&]() -> int {
    if (common.list_devices) {
      tools::print_devices(common);
      return 0;
    }
    LOOM_CHECK(!common.model.empty(), usage, "no model given (-m FILE)");
    LOOM_CHECK(ro.n_predict >= -2, usage, "-n {}: must be -1 or -2 (until the context is full) or more", ro.n_predict);
    LOOM_CHECK(ro.prompt.empty() || ro.prompt_file.empty(), usage, "give -p or -f, not both");
    LOOM_CHECK(!ro.jinja, usage,
               "--jinja: Jinja templates are not supported; loom renders the built-in families (--chat-template NAME)");
    const std::shared_ptr<const Grammar> grammar = tools::run_grammar(ro);  // a bad grammar stops before the load
    SessionParams params = tools::session_params(common);
    if (ro.n_threads_batch) {
      LOOM_CHECK(*ro.n_threads_batch <= 1024, usage, "-tb {}: must be at most 1024 (0 or less: all cores)",
                 *ro.n_threads_batch);
      params.n_threads_batch = *ro.n_threads_batch > 0 ? *ro.n_threads_batch : ThreadPool::default_threads();
    }
    LOOM_CHECK(!ro.kl_divergence || !ro.kl_base.empty(), usage, "--kl-divergence needs --kl-divergence-base FILE");
    LOOM_CHECK(ro.ppl_stride >= 0 && ro.ppl_stride <= (1 << 24), usage,
               "--ppl-stride {}: must be 0 (off) to 16777216 tokens", ro.ppl_stride);
    LOOM_CHECK(ro.ppl_output_type == 0 || ro.ppl_output_type == 1, usage, "--ppl-output-type {}: expected 0 or 1",
               ro.ppl_output_type);
    LOOM_CHECK(ro.ppl_stride == 0 || (ro.perplexity && !ro.kl_divergence && ro.kl_base.empty()), usage,
               "--ppl-stride: with --perplexity -f TEXT (not with --kl-divergence or its base file)");
    LOOM_CHECK(ro.kl_base.empty() || ro.kl_divergence || ro.perplexity, usage,
               "--kl-divergence-base: with --perplexity -f TEXT (writes it) or --kl-divergence (reads it)");
    LOOM_CHECK(ro.kl_base.empty() || common.comm != tools::CommKind::mpi, usage,
               "--kl-divergence-base: not with --comm mpi");
    if (ro.kl_divergence) {  // the text and the context come from the base file
      const LogitsFileHeader h = read_logits_header(ro.kl_base);
      LOOM_CHECK(params.n_ctx == 0 || params.n_ctx == h.n_ctx, usage,
                 "-c {}: '{}' was made with a context of {} tokens (leave -c out or give -c {})", params.n_ctx,
                 ro.kl_base, h.n_ctx, h.n_ctx);
      params.n_ctx = h.n_ctx;
      ro.perplexity = true;
    }
    const int n_modes =
        (int)ro.hellaswag + (int)ro.winogrande + (int)ro.multiple_choice + (int)(ro.perplexity || ro.kl_divergence);
    LOOM_CHECK(n_modes <= 1, usage,
               "--hellaswag, --winogrande, --multiple-choice, --perplexity and --kl-divergence: give one");
    // llama-perplexity reads its texts as they are: escapes only with an explicit -e
    if (n_modes > 0 && app.count("--escape") == 0) ro.escape = false;
    LOOM_CHECK(!(ro.hellaswag || ro.winogrande || ro.multiple_choice) || common.comm != tools::CommKind::mpi, usage,
               "--hellaswag, --winogrande, --multiple-choice: not with --comm mpi");
    LOOM_CHECK(ro.hellaswag_tasks >= 1, usage, "--hellaswag-tasks {}: must be 1 or more", ro.hellaswag_tasks);
    LOOM_CHECK(ro.winogrande_tasks >= 0, usage, "--winogrande-tasks {}: must be 0 (all) or more", ro.winogrande_tasks);
    LOOM_CHECK(ro.multiple_choice_tasks >= 0, usage, "--multiple-choice-tasks {}: must be 0 (all) or more",
               ro.multiple_choice_tasks);
    // the task file is read before the model loads: a bad file costs nothing
    const tools::TaskScore scores = tools::read_task_score(ro);
    if (!tools::is_output_rank(common)) std::freopen("/dev/null", "w", stdout);  // MPI: rank 0 prints
    if (common.comm == tools::CommKind::mpi) {  // every rank must run the same job (checked before any collective)
      const SamplerParams& s = ro.sampling;
      const std::string text = tools::prompt_text(ro);
      const int disagree =
          tools::check_ranks_agree("run", common,
                                   {{"the mode", ro.perplexity ? "--perplexity" : "generate"},
                                    {"the prompt", tools::text_fingerprint(text)},
                                    {"-n", std::to_string(ro.n_predict)},
                                    {"--chunks", std::to_string(ro.n_chunks)},
                                    {"--temp", fmt::format("{}", s.temp)},
                                    {"--top-k", std::to_string(s.top_k)},
                                    {"--top-p", fmt::format("{}", s.top_p)},
                                    {"--min-p", fmt::format("{}", s.min_p)},
                                    {"--seed", std::to_string(ro.seed)},
                                    {"--samplers", ro.samplers + ro.sampling_seq},
                                    {"--grammar", tools::text_fingerprint(ro.grammar + "\n" + ro.grammar_file)}});
      if (disagree) return disagree;
    }

    const auto t0 = std::chrono::steady_clock::now();
    tools::RunDevices devices = tools::make_run_devices(common);
    std::unique_ptr<Model> model = tools::load_model(common, devices);
    const bool chat = n_modes == 0 && tools::wants_conversation(ro, *model);
    LOOM_CHECK(ro.prompt_cache.empty() || (!chat && n_modes == 0), usage,
               "--prompt-cache: for generation from -p or -f (not a conversation, --perplexity or a task score)");
    LOOM_CHECK((!ro.prompt_cache_all && !ro.prompt_cache_ro) || !ro.prompt_cache.empty(), usage,
               "--prompt-cache-all and --prompt-cache-ro need --prompt-cache FILE");
    LOOM_CHECK(ro.prompt_cache.empty() || common.comm != tools::CommKind::mpi, usage,
               "--prompt-cache: not with --comm mpi");
    LOOM_CHECK(chat || n_modes > 0 || !(ro.prompt.empty() && ro.prompt_file.empty()), usage,
               "no prompt given (-p TEXT or -f FILE; -cnv for a conversation)");
    const SamplerParams sp = tools::sampler_params(ro, model->tokenizer());
    if (ro.ppl_stride > 0) {  // llama-perplexity's window (its -fa pads more; its default is off)
      const std::string& fa = common.flash_attn;
      params.n_ctx = strided_perplexity_ctx(params.n_ctx > 0 ? params.n_ctx : model->hparams().n_ctx_train,
                                            params.n_batch, ro.ppl_stride, fa == "on" || fa == "1" || fa == "true");
    }
    std::optional<ImatrixCollector> imatrix;
    if (!ro.imatrix_out.empty()) {
      LOOM_CHECK(ro.perplexity && ro.ppl_stride == 0 && ro.kl_base.empty(), usage,
                 "--imatrix-out: with --perplexity -f TEXT (not --ppl-stride or --kl-divergence-base)");
      LOOM_CHECK(common.split_mode != SplitMode::tensor, usage, "--imatrix-out: not with -sm tensor");
      check_output_path(ro.imatrix_out, "--imatrix-out");
      imatrix.emplace(ro.process_output);
      params.imatrix = &*imatrix;
    }
    LOOM_CHECK(!ro.process_output || imatrix, usage, "--process-output: with --imatrix-out FILE");
    Session session(*model, params);
    tools::log_session(session);
    const double load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

    if (ro.kl_divergence) {
      const auto tp = std::chrono::steady_clock::now();
      if (!common.json) fmt::print("{}", kl_divergence_header());
      const KlDivergenceResult r = kl_divergence(session, ro.kl_base, [&](const KlDivergenceResult& run) {
        if (common.json) return;
        fmt::print("{}", kl_divergence_chunk_line(run));
        std::fflush(stdout);
      });
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - tp).count();
      if (common.json)
        fmt::print("{}\n", kl_divergence_json(r, secs).dump(2));
      else
        fmt::print("\n{}", kl_divergence_summary(r));
      return 0;
    }
    if (ro.hellaswag || ro.winogrande || ro.multiple_choice) return tools::run_task_score(session, scores, common.json);
    if (ro.perplexity && ro.ppl_stride > 0) {
      LOOM_CHECK(!ro.prompt_file.empty(), usage, "--perplexity needs -f TEXT");
      const std::string text = tools::prompt_text(ro);
      const auto tp = std::chrono::steady_clock::now();
      PerplexityResult r =
          strided_perplexity(session, text, ro.ppl_stride, ro.n_chunks, [&](int64_t i, int64_t start, double ppl) {
            if (common.json) return;
            if (ro.ppl_output_type == 0)
              fmt::print("[{}]{:.4f},", i, ppl);
            else
              fmt::print("{:8d}  {:.4f}\n", start, ppl);
            std::fflush(stdout);
          });
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - tp).count();
      if (common.json) {
        nlohmann::json j = perplexity_json(r, session, secs);
        j["ppl_stride"] = ro.ppl_stride;
        fmt::print("{}\n", j.dump(2));
      } else {
        fmt::print("\n");  // llama-perplexity prints no final estimate in this mode
      }
      return 0;
    }
    if (ro.perplexity) {
      LOOM_CHECK(!ro.prompt_file.empty(), usage, "--perplexity needs -f TEXT");
      const std::string text = tools::prompt_text(ro);
      const auto tp = std::chrono::steady_clock::now();
      PerplexityResult r = perplexity(
          session, text, ro.n_chunks,
          [&](int64_t i, double ppl) {
            if (common.json) return;
            fmt::print("[{}]{:.4f},", i, ppl);
            std::fflush(stdout);
          },
          ro.kl_base);
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - tp).count();
      if (common.json) {
        fmt::print("{}\n", perplexity_json(r, session, secs).dump(2));
      } else {
        fmt::print("\nFinal estimate: PPL = {:.4f} +/- {:.5f}\n", r.ppl, r.ppl_err);
      }
      if (imatrix) {
        imatrix->write(ro.imatrix_out, {ro.prompt_file}, (int64_t)r.running_ppl.size(), session.n_ctx());
        fmt::print(stderr, "imatrix: {} entries from {} chunks of {} tokens written to {}\n", imatrix->n_entries(),
                   r.running_ppl.size(), session.n_ctx(), ro.imatrix_out);
      }
      return 0;
    }

    fmt::print(stderr, "sampler seed: {}\n", ro.seed);
    if (chat) return tools::run_conversation(session, ro, sp, grammar, common.json, load_ms);

    Sampler sampler(sp);
    if (grammar) sampler.set_constraint(std::make_shared<GrammarMatcher>(grammar, model->tokenizer()));
    const std::string prompt = tools::prompt_text(ro);
    if (ro.verbose_prompt) {  // llama-cli's listing
      const Tokenizer& tok = model->tokenizer();
      const std::vector<int32_t> ids = tok.tokenize(prompt, /*add_special=*/true, /*parse_special=*/true);
      fmt::print(stderr, "prompt: '{}'\nnumber of tokens in prompt = {}\n", prompt, ids.size());
      for (int32_t id : ids) fmt::print(stderr, "{:6d} -> '{}'\n", id, tok.token_to_piece(id));
    }
    const bool stream = !common.json;
    // The prompt is echoed once it has been evaluated (a bad --prompt-cache file stops before any output).
    bool echoed = !stream || ro.no_echo;
    auto echo = [&] {
      if (echoed) return;
      echoed = true;
      fmt::print("{}", prompt);
      std::fflush(stdout);
    };
    const int64_t n_predict = ro.n_predict < 0 ? session.n_ctx() : ro.n_predict;
    const PromptCache cache{ro.prompt_cache, ro.prompt_cache_ro, ro.prompt_cache_all};
    GenerateResult r = generate(
        session, prompt, n_predict, sampler,
        [&](std::string_view piece) {
          if (!stream) return;
          echo();
          fmt::print("{}", piece);
          std::fflush(stdout);
        },
        ro.prompt_cache.empty() ? nullptr : &cache);
    echo();
    if (!ro.prompt_cache.empty())
      logger().info("prompt cache: {} of {} prompt tokens from '{}'", r.n_cached, r.n_cached + r.n_prompt,
                    ro.prompt_cache);
    if (common.json) {
      nlohmann::json j = generate_json(r, load_ms, session);
      j["seed"] = ro.seed;
      fmt::print("{}\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
    } else {
      fmt::print("\n");
    }
    std::fflush(stdout);
    if (!ro.no_perf) tools::print_perf(load_ms, r.prompt_ms, r.n_prompt, r.eval_ms, r.n_gen);
    return 0;
  });
}
