// argv as llama.cpp reads it, rewritten for CLI11: multi-letter single-dash flags are one flag,
// a flag's value is always the next argument (even one starting with '-'), the last repetition
// of a flag wins, and flags loom refuses (-hf) say why.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "loom/core/error.h"
#include "loom/tools/main.h"

namespace loom::tools {

namespace {

// llama.cpp's multi-letter single-dash spellings whose long name differs. Any other `-name`
// means `--name` where the tool has that flag (so `-epochs`, `-pg` need no entry here).
constexpr std::pair<const char*, const char*> kAliases[] = {
    {"-ngl", "--n-gpu-layers"},
    {"-ub", "--ubatch-size"},
    {"-ts", "--tensor-split"},
    {"-sm", "--split-mode"},
    {"-mg", "--main-gpu"},
    {"-dev", "--device"},
    {"-ot", "--override-tensor"},
    {"-cmoe", "--cpu-moe"},
    {"-ncmoe", "--n-cpu-moe"},
    {"-fa", "--flash-attn"},
    {"-ctk", "--cache-type-k"},
    {"-ctv", "--cache-type-v"},
    {"-opt", "--optimizer"},
    {"-lr", "--learning-rate"},
    {"-wd", "--weight-decay"},
    {"-nr", "--no-repack"},
    {"-cnv", "--conversation"},
    {"-no-cnv", "--no-conversation"},
    {"-sys", "--system-prompt"},
    {"-sysf", "--system-prompt-file"},
    {"-st", "--single-turn"},
    {"-tb", "--threads-batch"},
    {"-lv", "--verbosity"},
    {"-mli", "--multiline-input"},
    {"-sp", "--special"},
    {"-jf", "--json-schema-file"},
    {"-np", "--parallel"},
    {"-nkvo", "--no-kv-offload"},
    {"-ctxcp", "--ctx-checkpoints"},
    {"-kvu", "--kv-unified"},
    {"-mmp", "--mmap"},
    {"-Cr", "--cpu-range"},
    {"-oe", "--output-err"},
};

// llama.cpp flags loom does not take, with the reason (docs/CLI.md lists them all).
constexpr std::pair<const char*, const char*> kRefused[] = {
    {"-tb", "only loom-run takes a separate count for batches; this tool uses -t for every step"},
    {"--threads-batch", "only loom-run takes a separate count for batches; this tool uses -t for every step"},
    {"-np", "a session runs one sequence"},
    {"--parallel", "a session runs one sequence"},
    {"--grammar", "grammars constrain loom-run's generation"},
    {"--grammar-file", "grammars constrain loom-run's generation"},
    {"--json-schema", "grammars constrain loom-run's generation"},
    {"--json-schema-file", "grammars constrain loom-run's generation"},
    {"-Cb", "one CPU placement serves both thread counts: give -C, -Cr, --cpu-strict, --poll, --prio"},
    {"--cpu-mask-batch", "one CPU placement serves both thread counts: give -C, -Cr, --cpu-strict, --poll, --prio"},
    {"-Crb", "one CPU placement serves both thread counts: give -C, -Cr, --cpu-strict, --poll, --prio"},
    {"--cpu-range-batch", "one CPU placement serves both thread counts: give -C, -Cr, --cpu-strict, --poll, --prio"},
    {"--cpu-strict-batch", "one CPU placement serves both thread counts: give -C, -Cr, --cpu-strict, --poll, --prio"},
    {"--prio-batch", "one CPU placement serves both thread counts: give -C, -Cr, --cpu-strict, --poll, --prio"},
    {"--poll-batch", "one CPU placement serves both thread counts: give -C, -Cr, --cpu-strict, --poll, --prio"},
};

// Model download flags: loom reads local files only.
constexpr const char* kDownload[] = {"-hf", "-hfr", "--hf-repo", "-hff", "--hf-file", "-mu", "--model-url",
                                     "-hft", "--hf-token", "-dr", "--docker-repo"};

// The option this spelling names in app or an app above it (flags of the parent apply in a
// subcommand when it falls through); null when none.
const CLI::Option* find_option(const CLI::App* app, const std::string& name) {
  for (; app != nullptr; app = app->get_parent())
    if (const CLI::Option* o = app->get_option_no_throw(name)) return o;
  return nullptr;
}

// The long flag a multi-letter single-dash spelling stands for: its alias, else -NAME as --NAME.
std::string long_alias(const std::string& name) {
  for (const auto& [from, to] : kAliases)
    if (name == from) return to;
  return name.size() > 1 && name[1] == '-' ? name : "-" + name;
}

bool is_single_dash_word(const std::string& a) {
  return a.size() > 2 && a[0] == '-' && a[1] != '-' && !(a[1] >= '0' && a[1] <= '9') && a[1] != '.';
}

}  // namespace

std::vector<std::pair<std::string, std::string>> llama_aliases() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [from, to] : kAliases) out.emplace_back(from, to);
  return out;
}

void take_last_repetition(CLI::App& app) {
  for (CLI::Option* o : app.get_options())
    if (o->get_items_expected_max() <= 1) o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  for (CLI::App* sub : app.get_subcommands({})) take_last_repetition(*sub);
}

std::vector<std::string> normalize_args(const CLI::App& app, int argc, char** argv) {
  std::vector<std::string> out;
  const CLI::App* scope = &app;  // the (sub)command whose flags are being read
  bool rest_positional = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (rest_positional || a.size() < 2 || a[0] != '-') {
      if (!rest_positional && a.size() > 0 && a[0] != '-')
        for (const CLI::App* sub : const_cast<CLI::App*>(scope)->get_subcommands({}))
          if (sub->check_name(a)) scope = sub;
      out.push_back(std::move(a));
      continue;
    }
    if (a == "--") {
      rest_positional = true;
      out.push_back(std::move(a));
      continue;
    }
    const size_t eq = a.find('=');
    std::string name = a.substr(0, eq);
    for (const char* d : kDownload)
      LOOM_CHECK(name != d, usage, "{}: downloading models is not supported: download the GGUF file and pass -m FILE",
                 name);
    for (const auto& [flag, why] : kRefused)
      LOOM_CHECK(name != flag || find_option(scope, name) || find_option(scope, long_alias(name)), usage,
                 "{}: not supported: {}", name, why);
    if (name.size() > 2 && name[1] != '-') {  // -ngl, -cnv, -epochs: one flag, never -c nv
      if (!is_single_dash_word(name)) {
        out.push_back(std::move(a));  // a negative number
        continue;
      }
      std::string long_name = long_alias(name);
      LOOM_CHECK(find_option(scope, long_name) != nullptr, usage,
                 "unknown flag '{}'{}", name,
                 find_option(scope, name.substr(0, 2)) ? fmt::format(" (for {} give the value as its own argument)",
                                                                      name.substr(0, 2))
                                                       : "");
      name = long_name;
    }
    const CLI::Option* opt = find_option(scope, name);
    if (opt == nullptr) {  // CLI11 reports it
      out.push_back(std::move(a));
      continue;
    }
    // An option with its value in the next argument: joined as --long=VALUE so a value that
    // starts with '-' (-r "-- User:", -ngl -1) is taken as the value, as llama.cpp does.
    const bool takes_value = opt->get_type_size_max() > 0 && opt->get_expected_min() > 0;
    if (!takes_value || eq != std::string::npos || i + 1 >= argc) {
      out.push_back(eq == std::string::npos ? name : name + a.substr(eq));
    } else if (name[1] == '-') {
      out.push_back(name + "=" + argv[++i]);
    } else {
      const std::string value = argv[++i];
      if (!value.empty() && value[0] == '-') {
        out.push_back(name + value);  // -xVALUE
      } else {
        out.push_back(name);
        out.push_back(value);
      }
    }
  }
  std::reverse(out.begin(), out.end());  // CLI11 takes a reversed vector
  return out;
}

}  // namespace loom::tools
