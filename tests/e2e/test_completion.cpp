// Bash completion generated from the tools' flag definitions: the script is valid bash, offers
// the tool's own flags (llama.cpp's multi-letter spellings included) and completes them in bash.
#include <gtest/gtest.h>

#include <string>

#include "tool_runner.h"

namespace {

using loom::test::quote;
using loom::test::run_tool;

TEST(Completion, ScriptsAreValidAndOfferTheToolsFlags) {
  const auto dir = loom::test::scratch_dir("loom-e2e-completion");
  for (const char* tool : {"run", "bench", "gguf", "train", "fit-params", "split-inspect", "bench-ops"}) {
    SCOPED_TRACE(tool);
    const auto r = run_tool(std::string("loom-") + tool + " --completion-bash");
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.out.find(std::string("loom-") + tool + "\n"), std::string::npos) << r.out;
    const auto syntax = loom::test::run_command("printf '%s' " + quote(r.out) + " | bash -n", dir);
    EXPECT_EQ(syntax.rc, 0) << syntax.err;
  }
  const auto run = run_tool("loom-run --completion-bash");
  for (const char* flag : {"--temp", "-ctk", "--cache-type-k", "-ngl", "--perplexity", "-m"})
    EXPECT_NE(run.out.find(std::string(" ") + flag + " "), std::string::npos) << flag;
  // in bash: what `loom-run --pe<TAB>` offers
  const std::string script = "source <(" + quote(std::string(LOOM_BIN_DIR) + "/loom-run") +
                             " --completion-bash); COMP_WORDS=(loom-run --pe); COMP_CWORD=1; _loom_run; "
                             "echo \"${COMPREPLY[@]}\"";
  const auto done = loom::test::run_command("bash -c " + quote(script), dir);
  ASSERT_EQ(done.rc, 0) << done.err;
  EXPECT_EQ(done.out, "--perplexity\n");
  loom::test::remove_scratch(dir);
}

}  // namespace
