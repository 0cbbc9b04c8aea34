// loom-train: train or fine-tune a model on a text file (flags per docs/CLI.md; the work is
// loom::train::run). -b and -ub count windows of -c tokens here (see docs/TRAINING.md).
#include <CLI/CLI.hpp>

#include "loom/core/error.h"
#include "loom/tools/common.h"
#include "loom/tools/main.h"
#include "loom/train/run.h"

using namespace loom;

int main(int argc, char** argv) {
  CLI::App app{"loom-train: train a model from scratch or fine-tune one on a text file"};
  tools::CommonOptions common;
  tools::add_common_flags(app, common);
  train::RunOptions o;
  std::string optimizer = "adamw", schedule;
  app.add_option("-f,--file", o.text_file, "training text");
  app.add_option("--init", o.init, "make the model from scratch: ARCH[:PRESET] (llama, qwen2, qwen3, qwen3moe; tiny)");
  app.add_option("--vocab-size", o.vocab_size, "with --init: learn a byte-level BPE vocabulary of N tokens");
  app.add_option("--n-layer", o.n_layer, "with --init: layers");
  app.add_option("--n-embd", o.n_embd, "with --init: embedding width");
  app.add_option("--n-head", o.n_head, "with --init: attention heads");
  app.add_option("--n-head-kv", o.n_head_kv, "with --init: key/value heads");
  app.add_option("--n-ff", o.n_ff, "with --init: feed-forward width");
  app.add_option("-o,--output", o.output, "output model (written atomically)");
  app.add_option("--out-type", o.out_type, "type of the trained matrices in the output (default: as loaded)");
  app.add_option("--optimizer", optimizer, "adamw or sgd (-opt)");
  app.add_option("--learning-rate", o.opt.lr, "learning rate (-lr)");
  app.add_option("--lr-min", o.opt.lr_min, "final learning rate of the decay (-lr-min; implies --lr-schedule cosine)");
  app.add_option("--lr-schedule", schedule, "constant, cosine or exp (decay to -lr-min)");
  app.add_option("--warmup", o.opt.warmup, "steps of linear learning-rate warmup");
  app.add_option("--weight-decay", o.opt.wd, "decoupled weight decay (-wd)");
  app.add_option("--grad-clip", o.opt.grad_clip, "clip the global gradient norm to this (0 = off)");
  app.add_option("--epochs", o.epochs, "passes over the training windows (-epochs)");
  app.add_option("--steps", o.steps, "optimizer steps in all (overrides -epochs)");
  app.add_option("--stride", o.stride, "tokens between window starts (default: -c)");
  app.add_option("--val-split", o.val_split, "fraction of the windows held out for validation");
  app.add_option("--train-tensors", o.train_tensors, "regex: train only the float tensors whose name matches");
  app.add_option("--checkpoint", o.checkpoint, "checkpoint file (written atomically)");
  app.add_option("--checkpoint-every", o.checkpoint_every, "write the checkpoint every N steps");
  app.add_option("--resume", o.resume, "continue from a checkpoint");
  app.add_flag("--allow-nan", o.allow_nan, "keep training when the loss is NaN or Inf (default: stop, exit 3)");
  app.add_option("--seed", o.seed, "random seed (initialization and shuffling)");
  app.add_option("--log-csv", o.log_csv, "write step,epoch,loss,accuracy,lr,grad_norm,val_loss per step to this CSV");

  return tools::run_main("train", argc, argv, app, [&]() -> int {
    if (common.list_devices) {
      tools::print_devices(common);
      return 0;
    }
    tools::validate_common(common);
    // the trained model is written with the base file's metadata: an override would not be in it
    LOOM_CHECK(common.rope_scaling.empty() && common.rope_scale == 0 && common.rope_freq_base == 0 &&
                   common.rope_freq_scale == 0 && common.yarn_orig_ctx == 0 &&
                   common.yarn.ext_factor == HParams::YarnTuning{}.ext_factor &&
                   common.yarn.attn_factor == HParams::YarnTuning{}.attn_factor && !common.yarn.beta_fast &&
                   !common.yarn.beta_slow,
               usage, "--rope-* and --yarn-*: loom-train trains with the file's RoPE settings");
    LOOM_CHECK(common.kv_overrides.empty(), usage,
               "--override-kv: loom-train trains the file's model as it is (set the key in the file instead)");
    LOOM_CHECK(common.lora.empty() && common.lora_scaled.empty() && common.cvec.empty() && common.cvec_scaled.empty(),
               usage,
               "--lora, --control-vector: loom-train trains the model's own weights (adapters apply to inference)");
    o.base_model = common.model;
    o.n_ctx = common.n_ctx > 0 ? common.n_ctx : 256;
    o.n_batch = app.count("--batch-size") ? common.n_batch : 8;
    o.n_ubatch = app.count("--ubatch-size") ? common.n_ubatch : 0;
    o.json = common.json;
    // Devices as every tool makes them (-dev, --sim-devices, -t); -ngl and friends place layers.
    const tools::RunDevices devices = tools::make_run_devices(common);
    o.placement = tools::placement_params(common, devices);
    o.opt.kind = train::optimizer_from_name(optimizer);
    if (!schedule.empty()) o.opt.schedule = train::schedule_from_name(schedule);
    else if (o.opt.lr_min >= 0) o.opt.schedule = train::LrSchedule::cosine;
    return train::run(o);
  });
}
