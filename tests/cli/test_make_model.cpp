// `kveval make-model` end to end: every --arch with a --vocab taken from
// another model generates the same ids cached and uncached; bad --arch and
// --vocab values are one-line errors that leave no output file; with the
// real-model presets, the options that would change a real model's shape are
// refused with one line and exit 2 before any file is written (the presets'
// headers are checked in model.model_presets), and so is a --type whose blocks
// do not fit the preset's rows.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "cli_run.hpp"
#include "test_support.hpp"

TEST_SUITE("cli.make_model") {
  TEST_CASE("make-model --arch and --vocab write models that generate the same ids cached and uncached") {
    TempDir d;
    // The vocabulary source: a model written by make-model itself (synthetic SentencePiece, 300 pieces).
    const std::string vocab = d.file("vocab_src.gguf");
    REQUIRE(run_kveval(d, "make-model --preset tiny --seed 3 -o " + quote(vocab)).code == 0);
    for (const char* arch : {"llama", "llama3", "qwen2", "qwen3"}) {
      CAPTURE(std::string(arch));
      const std::string m = d.file(std::string(arch) + ".gguf");
      Run w = run_kveval(d, std::string("make-model --preset tiny --arch ") + arch + " --vocab " + quote(vocab) +
                                " --tied --seed 5 -o " + quote(m));
      CHECK(w.code == 0);
      CHECK(w.out.find(std::string("arch ") + arch) != std::string::npos);
      CHECK(w.out.find("n_vocab 300 from " + vocab) != std::string::npos);
      CHECK(w.out.find("tied output") != std::string::npos);
      const std::string gen = "generate -t 1 --ignore-eos -n 12 -p 'once upon a time' -m " + quote(m);
      Run cached = run_kveval(d, gen);
      Run uncached = run_kveval(d, gen + " --no-cache");
      CHECK(cached.code == 0);
      CHECK(uncached.code == 0);
      CHECK(cached.out.find("once upon a time") == 0);
      CHECK(cached.out == uncached.out);
    }
    Run q3 = run_kveval(d, "make-model --preset tiny --arch qwen3 -o " + quote(d.file("q3.gguf")));
    CHECK(q3.code == 0);
    CHECK(q3.out.find("head_dim 128") != std::string::npos);
    Run bad_arch = run_kveval(d, "make-model --preset tiny --arch gemma -o " + quote(d.file("x.gguf")));
    CHECK(bad_arch.code == 2);
    CHECK(bad_arch.err.find("--arch: gemma not in {llama,llama3,qwen2,qwen3,gemma2,gemma3,granite,phi3}") != std::string::npos);
    Run no_vocab = run_kveval(d, "make-model --preset tiny --vocab " + quote(d.file("none.gguf")) + " -o " +
                                     quote(d.file("x.gguf")));
    CHECK(no_vocab.code == 2);
    CHECK(no_vocab.err.find("--vocab " + d.file("none.gguf") + ": no such file") != std::string::npos);
    const std::string not_gguf = d.write("v.txt", "hello");
    Run bad_vocab = run_kveval(d, "make-model --preset tiny --vocab " + quote(not_gguf) + " -o " + quote(d.file("x.gguf")));
    CHECK(bad_vocab.code == 1);
    CHECK(count_lines(bad_vocab.err) == 1);
    CHECK(bad_vocab.err.find(not_gguf) != std::string::npos);
    CHECK(!std::ifstream(d.file("x.gguf")).good());
    // -o naming the --vocab input is refused before anything is written; the vocabulary stays as it was
    const std::string v = d.file("v.gguf");
    REQUIRE(run_kveval(d, "make-model --preset tiny --seed 3 -o " + quote(v)).code == 0);
    auto bytes = [&v] { std::ifstream f(v, std::ios::binary); return std::string(std::istreambuf_iterator<char>(f), {}); };
    const std::string before = bytes();
    Run self = run_kveval(d, "make-model --preset tiny --seed 4 --vocab " + quote(v) + " -o " + quote(v));
    CHECK(self.code == 2);
    CHECK(self.err == "kveval: error: --output " + v + " is the --vocab file: refusing to overwrite an input\n");
    CHECK(bytes() == before);
  }

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
    // an option for a key the architecture does not read: named, with the architectures that read it
    check_one_line(run_kveval(dir, "make-model --preset llama-3.2-1b --sliding-window 8 -o " + quote(out)),
                   "kveval: error: --sliding-window: architecture llama does not take it (architectures that do: "
                   "gemma2, gemma3, phi3)");
    check_one_line(run_kveval(dir, "make-model --preset tiny --arch qwen2 --final-softcap 5 -o " + quote(out)),
                   "kveval: error: --final-softcap: architecture qwen2 does not take it (architectures that do: gemma2, gemma3)");
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

  TEST_CASE("--type whose blocks do not fit the preset's rows: one line naming --type, the preset, the row and the presets that fit") {
    TempDir d;
    const std::string out = d.file("m.gguf");
    // s15m: n_embd 288 = 9 x 32 (Q4_0 fits), not a multiple of the K-quants' 256. Fitting (n_embd, n_ff,
    // n_head x head_dim all multiples of 256): s110m 768/2048/768, gqa 2048/5632/2048, llama-3.2-1b
    // 2048/8192/2048, llama-3.2-3b 3072/8192/3072; tiny (64) and qwen2.5-0.5b (896) do not.
    check_one_line(run_kveval(d, "make-model --preset s15m --type q4_k -o " + quote(out)),
                   "kveval: error: --type q4_k: preset s15m has n_embd 288, not a multiple of q4_k's block size 256 "
                   "(a quantized row holds whole blocks); presets that fit: s110m, gqa, llama-3.2-1b, llama-3.2-3b");
    // with --arch, only the synthetic shapes can take it
    check_one_line(run_kveval(d, "make-model --preset tiny --arch qwen2 --type q6_k -o " + quote(out)),
                   "kveval: error: --type q6_k: preset tiny has n_embd 64, not a multiple of q6_k's block size 256 "
                   "(a quantized row holds whole blocks); presets that fit: s110m, gqa");
    CHECK_FALSE(std::filesystem::exists(out));
    // 64, 96 and 4 x 16 are multiples of Q4_0's 32
    Run q4 = run_kveval(d, "make-model --preset tiny --type q4_0 -o " + quote(out));
    CHECK(q4.code == 0);
    CHECK(q4.out.find("parameters as q4_0") != std::string::npos);
  }
}
