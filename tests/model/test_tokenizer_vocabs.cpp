// The 11 real tokenizers of <shared>/tokenizers/ (vocab-only GGUF files):
// every text of each .inp must give exactly the ids of the .out line
// (llama.cpp's test-tokenizer-0 expectations: no BOS, special parsing off),
// and decoding those ids must give the text back where the tokenizer is
// lossless. Skipped, with a message, when the shared folder is absent.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "model/gguf.hpp"
#include "model/tokenizer.hpp"
#include "model/tokenizer_pretok.hpp"
#include "test_support.hpp"

using namespace kveval;

namespace {

std::string read_all(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  REQUIRE_MESSAGE(f.good(), "cannot read " << p.string());
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// The texts of a .inp file: separated by "\n__ggml_vocab_test__\n", the last
/// one also followed by it (README.md of the shared folder).
std::vector<std::string> read_inputs(const std::filesystem::path& p) {
  const std::string all = read_all(p);
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  size_t i = 0;
  while (i < all.size()) {
    const size_t j = all.find(sep, i);
    REQUIRE_MESSAGE(j != std::string::npos, p.string() << ": text " << out.size() << " has no separator");
    out.push_back(all.substr(i, j - i));
    i = j + sep.size();
  }
  return out;
}

/// One id list per line of a .out file (an empty line: no tokens).
std::vector<std::vector<int32_t>> read_outputs(const std::filesystem::path& p) {
  std::istringstream in(read_all(p));
  std::vector<std::vector<int32_t>> out;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::vector<int32_t> ids;
    int32_t v;
    while (ls >> v) ids.push_back(v);
    out.push_back(std::move(ids));
  }
  return out;
}

struct VocabCase {
  const char* name;
  TokenizerKind kind;
  const char* describe;
};

const VocabCase kVocabs[] = {
    {"llama-spm", TokenizerKind::Spm, "spm"},           {"phi-3", TokenizerKind::Spm, "spm"},
    {"gpt-2", TokenizerKind::Bpe, "bpe/gpt-2"},         {"llama-bpe", TokenizerKind::Bpe, "bpe/llama-bpe"},
    {"qwen2", TokenizerKind::Bpe, "bpe/qwen2"},         {"deepseek-llm", TokenizerKind::Bpe, "bpe/deepseek-llm"},
    {"deepseek-coder", TokenizerKind::Bpe, "bpe/deepseek-coder"}, {"falcon", TokenizerKind::Bpe, "bpe/falcon"},
    {"starcoder", TokenizerKind::Bpe, "bpe/starcoder"}, {"mpt", TokenizerKind::Bpe, "bpe/mpt"},
    {"refact", TokenizerKind::Bpe, "bpe/refact"},
};

}  // namespace

TEST_SUITE("model.tokenizer_vocabs") {
  TEST_CASE("every case of every shared tokenizer file matches llama.cpp's ids") {
    const std::string shared = test::shared_dir();
    if (shared.empty()) {
      MESSAGE("SKIPPED: no shared fixtures folder (set KVEVAL_SHARED_DIR or place ../shared next to the source)");
      return;
    }
    const std::filesystem::path dir = std::filesystem::path(shared) / "tokenizers";
    for (const VocabCase& v : kVocabs) {
      const std::filesystem::path base = dir / (std::string("ggml-vocab-") + v.name + ".gguf");
      CAPTURE(base.string());
      REQUIRE(std::filesystem::exists(base));
      gguf::File f(base.string());
      CHECK(f.tensors().empty());  // vocab-only: no tensors needed
      const Tokenizer tok = Tokenizer::from_gguf(f);
      CHECK(tok.kind() == v.kind);
      CHECK(tok.describe() == v.describe);
      const auto inputs = read_inputs(base.string() + ".inp");
      const auto expected = read_outputs(base.string() + ".out");
      REQUIRE(inputs.size() == 46);  // 46 texts and 46 lines in every file
      REQUIRE(expected.size() == inputs.size());
      int matched = 0;
      for (size_t i = 0; i < inputs.size(); ++i) {
        CAPTURE(i);
        CAPTURE(inputs[i]);
        const auto ids = tok.encode(inputs[i], false);
        CHECK(ids == expected[i]);
        matched += ids == expected[i];
        // Byte-level BPE is lossless (Qwen2 up to its NFC normalization).
        if (v.kind == TokenizerKind::Bpe)
          CHECK(tok.decode(ids) == (std::string(v.name) == "qwen2" ? nfc_normalize(inputs[i]) : inputs[i]));
      }
      MESSAGE(std::string(v.name) << ": " << matched << "/" << inputs.size() << " cases match");
    }
  }
}
