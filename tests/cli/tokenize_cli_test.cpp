// `kveval tokenize` end to end: --ids equals llama.cpp's ids (the reference
// file of stories260K; Llama 3 and Qwen2 vocab-only files from <shared>),
// the id<TAB>piece listing, -f FILE, --no-bos, --parse-special, and one-line
// errors with their exit codes.
#include <doctest/doctest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "model/gguf_writer.hpp"
#include "test_support.hpp"

namespace {

struct Result {
  int code;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// Runs kveval with `args` (already shell-quoted); captures stdout and stderr.
Result run_kveval(const std::string& args, const kveval::test::ScratchDir& dir) {
  const char* bin = std::getenv("KVEVAL_BIN");
  REQUIRE(bin != nullptr);
  const std::string err = (dir.path / "stderr.txt").string();
  const std::string cmd = std::string(bin) + " " + args + " 2>" + err;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out, slurp(err)};
}

std::vector<int> ids_of(const std::string& json_line) { return nlohmann::json::parse(json_line).get<std::vector<int>>(); }

}  // namespace

TEST_SUITE("cli.tokenize") {
  TEST_CASE("--ids on stories260K equals llama.cpp's ids; listing, -f and --no-bos" * kveval::test::needs_model()) {
    kveval::test::ScratchDir dir("tokcli");
    const std::string model = kveval::test::model_path();
    for (const auto& c : kveval::test::reference_cases("tokenize")) {
      const std::string text = c["text"].get<std::string>();
      if (text.find('\'') != std::string::npos) continue;  // keep the shell quoting simple
      const Result r = run_kveval("tokenize -m " + model + " --ids '" + text + "'", dir);
      CAPTURE(text);
      CHECK(r.code == 0);
      CHECK(ids_of(r.out) == c["ids"].get<std::vector<int>>());
    }
    const Result list = run_kveval("tokenize -m " + model + " 'Once upon a time'", dir);
    CHECK(list.code == 0);
    CHECK(list.out == "1\t<s>\n403\t Once\n407\t upon\n261\t a\n378\t time\n");
    const std::string file = (dir.path / "text.txt").string();
    std::ofstream(file, std::ios::binary) << "Once upon a time";
    const Result f = run_kveval("tokenize -m " + model + " --ids --no-bos -f " + file, dir);
    CHECK(f.code == 0);
    CHECK(f.out == "[403, 407, 261, 378]\n");
  }

  TEST_CASE("vocab-only files: Llama 3 adds BOS, Qwen2 does not; --parse-special") {
    const std::string shared = kveval::test::shared_dir();
    if (shared.empty()) {
      MESSAGE("SKIPPED: no shared fixtures folder (set KVEVAL_SHARED_DIR or place ../shared next to the source)");
      return;
    }
    kveval::test::ScratchDir dir("tokcli2");
    const std::string llama3 = shared + "/tokenizers/ggml-vocab-llama-bpe.gguf";
    const std::string qwen = shared + "/tokenizers/ggml-vocab-qwen2.gguf";
    // Hugging Face ids: Llama 3 "Hello world" = <|begin_of_text|> Hello Ġworld; Qwen2 adds no BOS.
    CHECK(run_kveval("tokenize -m " + llama3 + " --ids 'Hello world'", dir).out == "[128000, 9906, 1917]\n");
    CHECK(run_kveval("tokenize -m " + llama3 + " --ids --no-bos 'Hello world'", dir).out == "[9906, 1917]\n");
    CHECK(run_kveval("tokenize -m " + qwen + " --ids 'Hello world'", dir).out == "[9707, 1879]\n");
    const Result plain = run_kveval("tokenize -m " + qwen + " --ids '<|im_end|>'", dir);
    CHECK(ids_of(plain.out).size() > 1);
    CHECK(run_kveval("tokenize -m " + qwen + " --ids --parse-special '<|im_end|>'", dir).out == "[151645]\n");
    const Result listing = run_kveval("tokenize -m " + llama3 + " --parse-special 'Hi<|eot_id|>'", dir);
    CHECK(listing.out == "128000\t<|begin_of_text|>\n13347\tHi\n128009\t<|eot_id|>\n");
  }

  TEST_CASE("errors: one line, exit code" * kveval::test::needs_model()) {
    kveval::test::ScratchDir dir("tokcli3");
    const std::string model = kveval::test::model_path();
    const Result none = run_kveval("tokenize -m " + model, dir);
    CHECK(none.code == 2);
    CHECK(none.err == "kveval: error: tokenize: give a TEXT or -f FILE\n");
    CHECK(run_kveval("tokenize -m " + (dir.path / "nowhere.gguf").string() + " x", dir).code == 2);
    // An unknown pre-tokenizer: exit 1, one line naming the file and the key.
    const std::string bad = (dir.path / "bad.gguf").string();
    kveval::gguf::Writer w;
    w.add_string("tokenizer.ggml.model", "gpt2");
    w.add_string("tokenizer.ggml.pre", "klingon");
    w.add_string_array("tokenizer.ggml.tokens", {"a", "b", "ab"});
    w.add_string_array("tokenizer.ggml.merges", {"a b"});
    w.add_uint32("tokenizer.ggml.eos_token_id", 0);
    w.write(bad);
    const Result r = run_kveval("tokenize -m " + bad + " ab", dir);
    CHECK(r.code == 1);
    CHECK(r.err.rfind("kveval: error: " + bad + ": pre-tokenizer 'klingon' is not supported (supported: ", 0) == 0);
    CHECK(r.err.find("(key 'tokenizer.ggml.pre')\n") != std::string::npos);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  }
}
