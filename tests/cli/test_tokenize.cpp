// `kveval tokenize` end to end: --ids equals llama.cpp's ids (the reference
// file of stories260K; Llama 3 and Qwen2 vocab-only files from <shared>),
// the id<TAB>piece listing, -f FILE, --no-bos, --parse-special, and one-line
// errors with their exit codes.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_run.hpp"
#include "model/gguf_writer.hpp"

namespace {

std::vector<int> ids_of(const std::string& json_line) { return nlohmann::json::parse(json_line).get<std::vector<int>>(); }

}  // namespace

TEST_SUITE("cli.tokenize") {
  TEST_CASE("--ids on stories260K equals llama.cpp's ids; listing, -f and --no-bos" * kveval::test::needs_model()) {
    kveval::test::ScratchDir dir("tokcli");
    const std::string model = kveval::test::model_path();
    for (const auto& c : kveval::test::reference_cases("tokenize")) {
      const std::string text = c["text"].get<std::string>();
      if (text.find('\'') != std::string::npos) continue;  // keep the shell quoting simple
      const Run r = run_kveval(dir, "tokenize -m " + model + " --ids '" + text + "'");
      CAPTURE(text);
      CHECK(r.code == 0);
      CHECK(ids_of(r.out) == c["ids"].get<std::vector<int>>());
    }
    const Run list = run_kveval(dir, "tokenize -m " + model + " 'Once upon a time'");
    CHECK(list.code == 0);
    CHECK(list.out == "1\t<s>\n403\t Once\n407\t upon\n261\t a\n378\t time\n");
    const std::string file = (dir.path / "text.txt").string();
    std::ofstream(file, std::ios::binary) << "Once upon a time";
    const Run f = run_kveval(dir, "tokenize -m " + model + " --ids --no-bos -f " + file);
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
    CHECK(run_kveval(dir, "tokenize -m " + llama3 + " --ids 'Hello world'").out == "[128000, 9906, 1917]\n");
    CHECK(run_kveval(dir, "tokenize -m " + llama3 + " --ids --no-bos 'Hello world'").out == "[9906, 1917]\n");
    CHECK(run_kveval(dir, "tokenize -m " + qwen + " --ids 'Hello world'").out == "[9707, 1879]\n");
    const Run plain = run_kveval(dir, "tokenize -m " + qwen + " --ids '<|im_end|>'");
    CHECK(ids_of(plain.out).size() > 1);
    CHECK(run_kveval(dir, "tokenize -m " + qwen + " --ids --parse-special '<|im_end|>'").out == "[151645]\n");
    const Run listing = run_kveval(dir, "tokenize -m " + llama3 + " --parse-special 'Hi<|eot_id|>'");
    CHECK(listing.out == "128000\t<|begin_of_text|>\n13347\tHi\n128009\t<|eot_id|>\n");
  }

  TEST_CASE("errors: one line, exit code" * kveval::test::needs_model()) {
    kveval::test::ScratchDir dir("tokcli3");
    const std::string model = kveval::test::model_path();
    const Run none = run_kveval(dir, "tokenize -m " + model);
    CHECK(none.code == 2);
    CHECK(none.err == "kveval: error: tokenize: give a TEXT or -f FILE\n");
    CHECK(run_kveval(dir, "tokenize -m " + (dir.path / "nowhere.gguf").string() + " x").code == 2);
    // An unknown pre-tokenizer: exit 1, one line naming the file and the key.
    const std::string bad = (dir.path / "bad.gguf").string();
    kveval::gguf::Writer w;
    w.add_string("tokenizer.ggml.model", "gpt2");
    w.add_string("tokenizer.ggml.pre", "klingon");
    w.add_string_array("tokenizer.ggml.tokens", {"a", "b", "ab"});
    w.add_string_array("tokenizer.ggml.merges", {"a b"});
    w.add_uint32("tokenizer.ggml.eos_token_id", 0);
    w.write(bad);
    const Run r = run_kveval(dir, "tokenize -m " + bad + " ab");
    CHECK(r.code == 1);
    CHECK(r.err.rfind("kveval: error: " + bad + ": pre-tokenizer 'klingon' is not supported (supported: ", 0) == 0);
    CHECK(r.err.find("(key 'tokenizer.ggml.pre')\n") != std::string::npos);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  }
}
