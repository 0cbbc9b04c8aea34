// The loom-train run: checks of every flag and output path before any work -> model (base,
// --init or checkpoint) -> dataset -> training loop with progress lines, validation per epoch,
// checkpoints (every N steps and on SIGINT/SIGTERM: the step finishes, the checkpoint is written,
// exit 130/143) -> output model through AtomicFile (an interrupted run leaves no output file).
// Outside the training loop a signal ends the run at once (run_main's handlers: temporaries
// removed, exit 130/143): vocabulary learning, loading and writing never leave a partial file.
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <sys/stat.h>
#include <fstream>
#include <memory>
#include <sstream>

#include "loom/core/error.h"
#include "loom/core/files.h"
#include "loom/core/hash.h"
#include "loom/gguf/gguf.h"
#include "loom/model/model_file.h"
#include "loom/train/bpe.h"
#include "loom/train/checkpoint.h"
#include "loom/train/dataset.h"
#include "loom/train/run.h"
#include "loom/train/trainer.h"

namespace loom::train {

namespace {

namespace fs = std::filesystem;

// --json: one object per optimizer step on stdout (the mean loss and accuracy of its batches).
void print_step_json(int64_t step, int64_t epoch, const StepResult& r, float lr, double elapsed_s) {
  double loss = 0;
  int64_t correct = 0, tokens = 0;
  for (const BatchResult& b : r.batches) {
    loss += b.loss;
    correct += b.n_correct;
    tokens += b.n_tokens;
  }
  const nlohmann::json j = {{"step", step},
                            {"epoch", epoch},
                            {"loss", r.batches.empty() ? 0.0 : loss / (double)r.batches.size()},
                            {"acc", tokens > 0 ? (double)correct / (double)tokens : 0.0},
                            {"lr", lr},
                            {"grad_norm", r.grad_norm},
                            {"tokens", tokens},
                            {"elapsed_s", elapsed_s}};
  fmt::print("{}\n", j.dump());
  std::fflush(stdout);
}

std::string read_text(const std::string& path) {
  LOOM_CHECK(!path.empty(), usage, "no training text (-f FILE)");
  std::string text = read_regular_file(path, "-f");
  LOOM_CHECK(!text.empty(), invalid_input, "-f '{}': the text is empty", path);
  return text;
}

// A temporary path next to `near` (same file system as the output).
std::string temp_path(const std::string& near, const char* what) {
  const fs::path dir = fs::path(near).parent_path();
  return (dir / fmt::format(".{}.{}.{}.tmp", fs::path(near).filename().string(), what, ::getpid())).string();
}

// --init ARCH[:PRESET]: a random model (as `loom-gguf new` makes it) with the learned vocabulary.
std::unique_ptr<TrainModel> init_model(const RunOptions& o, const std::string& text, const TrainModelOptions& mo) {
  const size_t colon = o.init.find(':');
  const std::string arch_s = o.init.substr(0, colon);
  const std::string preset = colon == std::string::npos ? "tiny" : o.init.substr(colon + 1);
  const auto arch = arch_from_name(arch_s);
  LOOM_CHECK(arch, usage, "--init '{}': unknown architecture '{}' (llama, qwen2, qwen3, qwen3moe)", o.init, arch_s);
  NewModelOptions nm;
  nm.hparams = preset_hparams(*arch, preset);
  HParams& hp = nm.hparams;
  if (o.n_layer) hp.n_layer = o.n_layer;
  if (o.n_embd) hp.n_embd = o.n_embd;
  if (o.n_head) hp.n_head = o.n_head;
  if (o.n_head_kv) hp.n_head_kv = o.n_head_kv;
  if (o.n_ff) hp.n_ff = o.n_ff;
  if (o.n_embd || o.n_head) hp.head_dim = hp.n_embd / std::max<int64_t>(hp.n_head, 1);
  if (o.n_head && !o.n_head_kv) hp.n_head_kv = hp.n_head;
  hp.n_ctx_train = std::max(hp.n_ctx_train, o.n_ctx);
  nm.seed = o.seed;
  nm.name = fmt::format("{}-loom-train", arch_s);
  // Both scratch files are removed when this returns, or by the signal handler.
  const ScopedTempPath init_file(temp_path(o.output, "init"));
  const ScopedTempPath vocab_file(temp_path(o.output, "vocab"));
  nm.output = init_file.path();
  if (o.vocab_size > 0) {
    const BpeVocab v = train_bpe(text, o.vocab_size);
    gguf::Writer w;
    write_bpe_vocab(w, v);
    nm.vocab_path = vocab_file.path();
    w.write(nm.vocab_path);
    if ((int64_t)v.tokens.size() < o.vocab_size)
      fmt::print(stderr, "loom-train: the text has repeated pairs for only {} tokens (--vocab-size {})\n",
                 v.tokens.size(), o.vocab_size);
  }
  make_random_model(nm);
  std::unique_ptr<TrainModel> m;
  try {
    m = TrainModel::open(nm.output, mo);  // the file stays mapped after it is removed
  } catch (const Error& e) {  // name what the user gave, not the temporary file
    std::string msg = e.what();
    if (const size_t at = msg.find(nm.output); at != std::string::npos)
      msg.replace(at, nm.output.size(), "--init " + o.init);
    throw Error(e.kind(), msg);
  }
  // Untied token embeddings start at unit scale instead of loom-gguf new's N(0, 0.02): every
  // layer input is RMS-normalized, so only their size relative to the attention and FFN
  // outputs added to the residual stream matters, and at 0.02 those outputs (~0.1) drown the
  // token's identity; small models then sit on the unigram plateau for many steps.
  const Model& w = m->model();
  if (w.output != w.tok_embd && w.tok_embd->has_flag(kFlagParam)) {
    std::vector<float> e = read_f32(w.tok_embd);
    for (float& x : e) x *= 50.0f;
    write_f32(w.tok_embd, e);
  }
  return m;
}

void check_same(const char* flag, int64_t given, int64_t saved) {
  LOOM_CHECK(given == saved, usage, "{} {} differs from the checkpoint's {} (resume with the same flags)", flag, given,
             saved);
}

std::optional<DType> parse_out_type(const std::string& name) {
  if (name.empty()) return std::nullopt;
  const std::optional<DType> t = dtype_from_name(name);
  LOOM_CHECK(t && *t != DType::I32, usage, "--out-type '{}': expected f32, f16, bf16, q8_0, q4_0, q4_k or q6_k", name);
  return t;
}

// The same file (by device and inode when both exist, else by path).
bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {}, sb {};
  if (::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  std::error_code ec;
  return fs::weakly_canonical(a, ec) == fs::weakly_canonical(b, ec);
}

// Everything that can be known wrong before the text is read or a step is run.
void check_paths(const RunOptions& o, const std::string& ck_path) {
  (void)parse_out_type(o.out_type);
  check_output_path(o.output, "-o");
  check_output_path(ck_path, "--checkpoint");
  for (const auto& [flag, input] : {std::pair{"-m", o.base_model}, std::pair{"-f", o.text_file}}) {
    if (input.empty()) continue;
    LOOM_CHECK(!same_file(ck_path, input), usage, "--checkpoint '{}' is the {} file: it would be overwritten", ck_path,
               flag);
    LOOM_CHECK(!same_file(o.output, input), usage, "-o '{}' is the {} file: it would be overwritten", o.output, flag);
  }
  LOOM_CHECK(!same_file(ck_path, o.output), usage, "--checkpoint and -o are the same file '{}'", o.output);
}

std::string base_identity(const RunOptions& o) {
  if (!o.init.empty()) return "init " + o.init;
  return fmt::format("model {:016x}", gguf::File::open(o.base_model)->identity());
}

void write_output(const RunOptions& o, const TrainModel& model) {
  gguf::Writer w;
  for (const auto& [key, value] : model.model_metadata()) w.set(key, value);
  const std::optional<DType> out_type = parse_out_type(o.out_type);
  if (out_type) {
    w.set("general.file_type", gguf::Value::u32(file_type_for(*out_type)));
    if (dtype_info(*out_type).is_quantized) w.set("general.quantization_version", gguf::Value::u32(2));
  }
  model.add_tensors(w, /*checkpoint=*/false, out_type);
  w.write(o.output);
}

// "SIM0 1.25 MiB, CPU 0.31 MiB": weight bytes per device used.
std::string placement_summary(const Model& m) {
  std::string out;
  for (size_t d = 0; d < m.devices().size(); ++d)
    if (m.device_bytes()[d] > 0)
      out += fmt::format("{}{} {:.2f} MiB", out.empty() ? "" : ", ", m.devices()[d]->name(),
                         (double)m.device_bytes()[d] / (1 << 20));
  return out;
}

std::string human(int64_t n) {
  return n >= 1000000 ? fmt::format("{:.2f}M", (double)n / 1e6) : fmt::format("{:.1f}K", (double)n / 1e3);
}

}  // namespace

int run(const RunOptions& o) {
  LOOM_CHECK(!o.output.empty(), usage, "no output file (-o OUT.gguf)");
  LOOM_CHECK(o.resume.empty() || fs::exists(o.resume), io, "--resume '{}': no such file", o.resume);
  LOOM_CHECK(!o.resume.empty() || (o.base_model.empty() != o.init.empty()), usage,
             "give the model to train: -m BASE.gguf or --init ARCH[:PRESET] (one of them)");
  LOOM_CHECK(o.vocab_size == 0 || !o.init.empty() || !o.resume.empty(), usage,
             "--vocab-size needs --init (a base model keeps its vocabulary)");
  LOOM_CHECK(o.epochs >= 1 && o.steps >= 0, usage, "-epochs {} / --steps {}: must be positive", o.epochs, o.steps);
  LOOM_CHECK(o.n_batch >= 1 && o.n_ubatch >= 0, usage, "-b {} / -ub {}: must be positive", o.n_batch, o.n_ubatch);
  LOOM_CHECK(o.checkpoint_every >= 0, usage, "--checkpoint-every {}: must be 0 or more", o.checkpoint_every);
  LOOM_CHECK(o.opt.lr > 0 && std::isfinite(o.opt.lr), usage, "-lr {}: must be positive", o.opt.lr);
  // NaN or infinite optimizer settings turn every weight into NaN at the first step
  LOOM_CHECK(std::isfinite(o.opt.lr_min), usage, "-lr-min {}: must be a finite number", o.opt.lr_min);
  LOOM_CHECK(o.opt.wd >= 0 && std::isfinite(o.opt.wd), usage, "-wd {}: must be 0 or more", o.opt.wd);
  LOOM_CHECK(o.opt.warmup >= 0, usage, "--warmup {}: must be 0 or more", o.opt.warmup);
  LOOM_CHECK(o.opt.grad_clip >= 0, usage, "--grad-clip {}: must be 0 or more", o.opt.grad_clip);
  const std::string ck_path = o.checkpoint.empty() ? o.output + ".ckpt" : o.checkpoint;
  check_paths(o, ck_path);
  const std::string text = read_text(o.text_file);
  const uint64_t text_hash = hash_bytes(text.data(), text.size());

  // ---- model and state ----
  TrainState state;
  std::unique_ptr<TrainModel> model;
  std::unique_ptr<gguf::File> resume_file;
  if (!o.resume.empty()) {
    resume_file = gguf::File::open(o.resume);
    state = read_train_state(*resume_file);
    check_same("-c", o.n_ctx, state.n_ctx);
    check_same("--seed", (int64_t)o.seed, (int64_t)state.seed);
    LOOM_CHECK(o.val_split == state.val_split, usage, "--val-split {} differs from the checkpoint's {} (resume with the same flags)",
               o.val_split, state.val_split);
    LOOM_CHECK(text_hash == state.text_hash, usage,
               "-f '{}' is not the text the checkpoint was trained on (resume with the same -f)", o.text_file);
    if (!o.base_model.empty() || !o.init.empty()) {
      const std::string base = base_identity(o);
      LOOM_CHECK(base == state.base, usage, "{} is not what the checkpoint was trained from ({}; resume with the same {})",
                 o.init.empty() ? fmt::format("-m '{}'", o.base_model) : fmt::format("--init {}", o.init), state.base,
                 o.init.empty() ? "-m" : "--init");
    }
    TrainModelOptions mo;
    mo.placement = o.placement;
    mo.trainable = state.trainable;
    model = TrainModel::open(o.resume, mo);
  } else {
    TrainModelOptions mo;
    mo.placement = o.placement;
    mo.train_tensors = o.train_tensors;
    model = o.init.empty() ? TrainModel::open(o.base_model, mo) : init_model(o, text, mo);
    state.seed = o.seed;
    state.text_hash = text_hash;
    state.base = base_identity(o);
    state.n_ctx = o.n_ctx;
    state.stride = o.stride;
    state.val_split = o.val_split;
    state.optimizer = o.opt.kind == OptimizerKind::adamw ? "adamw" : "sgd";
    for (const TrainTensor& t : model->tensors())
      if (t.trainable) state.trainable.emplace_back(t.spec.name, t.source_type);
  }

  // ---- data ----
  DatasetOptions dopt;
  dopt.n_ctx = state.n_ctx;
  dopt.stride = o.resume.empty() ? o.stride : state.stride;
  dopt.val_split = o.resume.empty() ? o.val_split : state.val_split;
  dopt.seed = state.seed;
  const std::vector<int32_t> tokens = model->tokenizer().tokenize(text, false, false);
  Dataset data(tokens, dopt);

  // ---- geometry ----
  int64_t n_batch = std::min(o.n_batch, data.n_train());
  int64_t n_ubatch = o.n_ubatch > 0 ? std::min(o.n_ubatch, n_batch) : n_batch;
  if (!o.resume.empty()) {
    check_same("-b", n_batch, state.n_batch);
    check_same("-ub", n_ubatch, state.n_ubatch);
    LOOM_CHECK(state.optimizer == (o.opt.kind == OptimizerKind::adamw ? "adamw" : "sgd"), usage,
               "-opt differs from the checkpoint's {}", state.optimizer);
  }
  LOOM_CHECK(n_batch % n_ubatch == 0, usage, "-b {} must be a multiple of -ub {}", n_batch, n_ubatch);
  state.n_batch = n_batch;
  state.n_ubatch = n_ubatch;
  // A position past this text's windows (a checkpoint from a longer text) would index past them.
  LOOM_CHECK(state.epoch_pos + n_batch <= data.n_train(), invalid_input,
             "--resume '{}': the checkpoint is at window {} of an epoch, this text has {} training windows", o.resume,
             state.epoch_pos, data.n_train());
  const int64_t steps_per_epoch = data.n_train() / n_batch;
  const int64_t total_steps = o.steps > 0 ? o.steps : o.epochs * steps_per_epoch;

  TrainerConfig cfg;
  cfg.n_ctx = state.n_ctx;
  cfg.n_batch = n_batch;
  cfg.n_ubatch = n_ubatch;
  cfg.opt = o.opt;
  Trainer trainer(*model, cfg);
  if (resume_file) load_optimizer_state(*resume_file, trainer.params());

  const HParams& hp = model->hparams();
  fmt::print(stderr, "loom-train: {} {} params ({} trained), vocab {}, {} tokens: {} windows of {} ({} held out)\n",
             arch_name(hp.arch), human(model->n_params()), human(model->n_trainable()), hp.n_vocab, tokens.size(),
             data.n_train(), state.n_ctx, data.n_val());
  fmt::print(stderr, "loom-train: weights on {}\n", placement_summary(model->model()));
  if (const std::string q = model->frozen_quantized(); !q.empty())
    fmt::print(stderr, "loom-train: frozen: {} — quantized weights do not train (the float tensors do)\n", q);
  fmt::print(stderr, "loom-train: {} steps of {} windows ({} per physical batch), {} per epoch{}\n", total_steps,
             n_batch, n_ubatch, steps_per_epoch,
             o.resume.empty() ? "" : fmt::format(", resuming at step {}", state.step));

  // ---- loop ----
  const bool tty = o.progress >= 0 ? o.progress == 1 : ::isatty(STDERR_FILENO) != 0;
  using clock = std::chrono::steady_clock;
  auto epoch_t0 = clock::now() - std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(state.elapsed_s));
  auto elapsed = [&] { return std::chrono::duration<double>(clock::now() - epoch_t0).count(); };
  std::vector<int64_t> order = data.epoch_order(state.epoch);
  // The bar is redrawn in place as ggml-opt does (line, " \r"; "\n" at the end of the epoch), so
  // each epoch is one line; on a terminal after every step, otherwise (a log file) after the
  // first step and then at most every 10 s.
  auto last_print = clock::now();
  EpochStats last_val;
  bool printed = false;
  auto line = [&](bool final) {
    const double t = elapsed();
    const int64_t done = state.epoch_pos, total = steps_per_epoch * n_batch;
    const double eta = done > 0 ? t / (double)done * (double)(total - done) : 0.0;
    // in place on a terminal; elsewhere a plain line (no '\r' in logs and pipes)
    const std::string text = format_progress("train", done, total, state.stats, t, eta);
    if (tty) fmt::print(stderr, "{} \r{}", text, final ? "\n" : "");
    else fmt::print(stderr, "{}\n", text);
    std::fflush(stderr);
    last_print = clock::now();
    printed = true;
  };
  auto validate = [&]() -> double {  // the validation loss (NaN without validation windows)
    if (data.n_val() == 0) return std::nan("");
    const auto t0 = clock::now();
    std::vector<const int32_t*> in, tg;
    for (int64_t i = 0; i < data.n_val(); ++i) {
      in.push_back(data.val_inputs(i));
      tg.push_back(data.val_targets(i));
    }
    EpochStats vs;
    const size_t k = (size_t)n_ubatch;
    for (size_t first = 0; first < in.size() && !pending_signal(); first += k) {  // a signal ends it early
      const size_t last = std::min(in.size(), first + k);
      for (const BatchResult& b : trainer.evaluate({in.begin() + (ptrdiff_t)first, in.begin() + (ptrdiff_t)last},
                                                   {tg.begin() + (ptrdiff_t)first, tg.begin() + (ptrdiff_t)last}))
        vs.add(b.loss, b.n_correct, b.n_tokens);
    }
    if (pending_signal()) return std::nan("");  // interrupted: no validation loss
    fmt::print(stderr, "{}{}\n",
               format_progress("val", data.n_val(), data.n_val(), vs,
                               std::chrono::duration<double>(clock::now() - t0).count(), 0.0),
               tty ? " \r" : "");
    last_val = vs;
    return vs.loss();
  };
  auto checkpoint = [&](const std::string& path) {
    state.elapsed_s = elapsed();
    save_checkpoint(path, *model, trainer.params(), state);
  };

  std::unique_ptr<FILE, int (*)(FILE*)> csv(nullptr, &std::fclose);
  if (!o.log_csv.empty()) {
    csv.reset(std::fopen(o.log_csv.c_str(), o.resume.empty() ? "w" : "a"));
    LOOM_CHECK(csv, io, "--log-csv: cannot write '{}'", o.log_csv);
    if (std::ftell(csv.get()) == 0) fmt::print(csv.get(), "step,epoch,loss,accuracy,lr,grad_norm,val_loss\n");
  }
  double step_seconds = 0;
  int64_t steps_run = 0;
  // A signal during a step (or validation, or a checkpoint write) is acted on after it: the
  // checkpoint is written and the run ends 130/143, also after the last step.
  std::optional<DeferSignals> defer(std::in_place);
  auto interrupted = [&]() -> int {
    const int sig = take_pending_signal();
    if (!sig) return 0;
    if (printed) fmt::print(stderr, "\n");
    checkpoint(ck_path);
    fmt::print(stderr, "loom-train: {} at step {}: checkpoint written to {} (continue with --resume {})\n",
               sig == SIGINT ? "interrupted" : "terminated", state.step, ck_path, ck_path);
    return 128 + sig;
  };
  auto since = [](clock::time_point t) { return std::chrono::duration<double>(clock::now() - t).count(); };
  while (state.step < total_steps) {
    std::vector<const int32_t*> in, tg;
    for (int64_t i = 0; i < n_batch; ++i) {
      const int64_t w = order[(size_t)(state.epoch_pos + i)];
      in.push_back(data.train_inputs(w));
      tg.push_back(data.train_targets(w));
    }
    const float lr = lr_at(o.opt, state.step, total_steps);
    const auto step_t0 = clock::now();
    const StepResult r = trainer.step(in, tg, lr, state.step + 1);
    step_seconds += std::chrono::duration<double>(clock::now() - step_t0).count();
    ++steps_run;
    for (const BatchResult& b : r.batches) {
      LOOM_CHECK(std::isfinite(b.loss) || o.allow_nan, invalid_input,
                 "step {}: the loss is {}: training diverged (lower -lr, or --allow-nan to go on)", state.step + 1,
                 b.loss);
      state.stats.add(b.loss, b.n_correct, b.n_tokens);
    }
    ++state.step;
    if (o.json) print_step_json(state.step, state.epoch, r, lr, elapsed());
    state.epoch_pos += n_batch;
    const bool epoch_end = state.epoch_pos + n_batch > data.n_train();
    const bool done = state.step >= total_steps;
    if (!epoch_end && !done && (tty || !printed || since(last_print) >= 10.0)) line(false);
    double val_loss = std::nan("");
    if (epoch_end || done) {
      line(true);
      val_loss = validate();
    }
    if (csv) {
      double loss = 0;
      int64_t correct = 0, tokens = 0;
      for (const BatchResult& b : r.batches) {
        loss += b.loss * (double)b.n_tokens;
        correct += b.n_correct;
        tokens += b.n_tokens;
      }
      fmt::print(csv.get(), "{},{},{:.6f},{:.6f},{:.6g},{:.6g},{}\n", state.step, state.epoch,
                 tokens ? loss / (double)tokens : 0.0, tokens ? (double)correct / (double)tokens : 0.0, lr,
                 r.grad_norm, std::isnan(val_loss) ? std::string() : fmt::format("{:.6f}", val_loss));
      std::fflush(csv.get());
    }
    if (epoch_end) {
      ++state.epoch;
      state.epoch_pos = 0;
      state.stats = {};
      state.elapsed_s = 0;
      epoch_t0 = clock::now();
      order = data.epoch_order(state.epoch);
    }
    if (!done && o.checkpoint_every > 0 && state.step % o.checkpoint_every == 0) checkpoint(ck_path);
    if (const int rc = interrupted()) return rc;
  }
  if (const int rc = interrupted()) return rc;
  defer.reset();  // from here a signal removes the temporary output and exits at once
  write_output(o, *model);
  if (o.json) {
    nlohmann::json j = {{"summary", true},          {"steps", state.step}, {"steps_run", steps_run},
                        {"train_seconds", step_seconds}, {"output", o.output}};
    if (last_val.n_batches > 0) j["val_loss"] = last_val.loss(), j["val_acc"] = last_val.acc();
    fmt::print("{}\n", j.dump());
    std::fflush(stdout);
  }
  if (steps_run > 0 && step_seconds > 0) {
    // Model FLOPs per token as PaLM counts them: 6 per weight that multiplies (forward 2,
    // backward 4; the embedding lookup is free) plus attention's 12 * n_layer * n_ctx * n_embd_q.
    // MoE expert tensors count for the experts a token uses.
    const Model& mw = model->model();
    double n_matmul = (double)(model->n_params() - (mw.output == mw.tok_embd ? 0 : mw.tok_embd->nelements()));
    for (const LayerWeights& l : mw.layers)
      for (const Tensor* e : {l.ffn_gate_exps, l.ffn_up_exps, l.ffn_down_exps})
        if (e) n_matmul -= (double)e->nelements() * (1.0 - (double)hp.n_expert_used / (double)hp.n_expert);
    const double tokens = (double)steps_run * (double)(n_batch * state.n_ctx);
    const double flops_tok = 6.0 * n_matmul + 12.0 * (double)(hp.n_layer * state.n_ctx * hp.n_embd_q());
    fmt::print(stderr, "loom-train: {} steps, {:.0f} tokens in {:.2f} s: {:.1f} tokens/s, {:.2f} model GFLOP/s\n",
               steps_run, tokens, step_seconds, tokens / step_seconds, tokens * flops_tok / step_seconds * 1e-9);
  }
  fmt::print(stderr, "loom-train: wrote {}\n", o.output);
  return 0;
}

}  // namespace loom::train
