// `kveval make-model` with the real-model presets: the options that would
// change a real model's shape are refused with one line and exit 2, before any
// file is written (the presets' headers are checked in model.random_model_presets).
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include "cli_run.hpp"
#include "test_support.hpp"

using kveval::test::quote;
using kveval::test::run_kveval;

TEST_SUITE("cli.make_model") {
  TEST_CASE("real-model presets: --arch and a vocabulary larger than the model's vocab_size are refused") {
    const kveval::test::ScratchDir dir("make_model_cli");
    const std::string out = dir.file("m.gguf");
    auto arch = run_kveval(dir, "make-model --preset llama-3.2-1b --arch qwen2 -o " + quote(out));
    CHECK(arch.code == 2);
    CHECK(arch.err ==
          "kveval: error: --arch qwen2: preset llama-3.2-1b has meta-llama/Llama-3.2-1B's architecture (llama); "
          "--arch applies to the synthetic shapes s15m, s110m, gqa and tiny\n");
    // the default value is refused too when given explicitly: the preset, not --arch, decides
    CHECK(run_kveval(dir, "make-model --preset qwen2.5-0.5b --arch llama -o " + quote(out)).code == 2);
    CHECK_FALSE(std::filesystem::exists(out));

    const std::string shared = kveval::test::shared_dir();
    const std::string qwen = shared + "/tokenizers/ggml-vocab-qwen2.gguf";
    if (shared.empty() || !std::filesystem::exists(qwen)) {
      MESSAGE("skipping the --vocab part: " << qwen << " not found");
      return;
    }
    auto big = run_kveval(dir, "make-model --preset llama-3.2-1b --vocab " + quote(qwen) + " -o " + quote(out));
    CHECK(big.code == 2);
    CHECK(big.err == "kveval: error: --vocab " + qwen +
                         ": 151669 tokens, more than preset llama-3.2-1b's n_vocab 128256 (meta-llama/Llama-3.2-1B's "
                         "vocab_size)\n");
    CHECK_FALSE(std::filesystem::exists(out));
  }
}
