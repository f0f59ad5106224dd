// Tokenizer::from_gguf: reads tokenizer.ggml.* (llama.cpp's key names and
// defaults, llama_vocab::impl::load in src/llama-vocab.cpp).
#include <fmt/format.h>

#include "model/gguf.hpp"
#include "model/tokenizer.hpp"
#include "util/error.hpp"

namespace kveval {

Tokenizer Tokenizer::from_gguf(const gguf::File& file) {
  const std::string model = file.get_string_or("tokenizer.ggml.model", "");
  if (model != "llama" && model != "gpt2")
    throw FormatError(fmt::format("{}: tokenizer model '{}' is not supported, expected 'llama' (SentencePiece) or "
                                  "'gpt2' (byte-level BPE) (key 'tokenizer.ggml.model')",
                                  file.path(), model));
  std::vector<std::string> tokens = file.get_string_array("tokenizer.ggml.tokens");
  std::vector<int32_t> types(tokens.size(), static_cast<int32_t>(TokenType::Normal));
  if (file.find("tokenizer.ggml.token_type")) {
    std::vector<int64_t> t = file.get_int_array("tokenizer.ggml.token_type");
    if (t.size() != tokens.size())
      throw FormatError(fmt::format("{}: {} token types for {} tokens (key 'tokenizer.ggml.token_type')", file.path(),
                                    t.size(), tokens.size()));
    for (size_t i = 0; i < t.size(); ++i) types[i] = static_cast<int32_t>(t[i]);
  }
  // A special id: the key's value (checked against the vocabulary), or `def` when absent.
  auto id = [&](const char* key, int64_t def) -> int32_t {
    if (!file.find(key)) return static_cast<int32_t>(def);
    const uint64_t v = file.get_uint(key);
    if (v >= tokens.size())
      throw FormatError(fmt::format("{}: token id {} outside the vocabulary of {} (key '{}')", file.path(), v,
                                    tokens.size(), key));
    return static_cast<int32_t>(v);
  };
  const int32_t eot = id("tokenizer.ggml.eot_token_id", -1);

  if (model == "llama") {
    std::vector<float> scores = file.find("tokenizer.ggml.scores") ? file.get_float_array("tokenizer.ggml.scores")
                                                                   : std::vector<float>(tokens.size(), 0.0f);
    const int32_t bos = id("tokenizer.ggml.bos_token_id", 1);
    const int32_t eos = id("tokenizer.ggml.eos_token_id", 2);
    const int32_t unk = id("tokenizer.ggml.unknown_token_id", 0);
    const bool prefix = file.get_bool_or("tokenizer.ggml.add_space_prefix", true);
    const bool add_bos = file.get_bool_or("tokenizer.ggml.add_bos_token", true);  // names the file itself
    try {
      Tokenizer t(std::move(tokens), std::move(scores), std::move(types), bos, eos, unk, prefix);
      t.add_bos_ = add_bos;
      if (eot >= 0) t.eot_ = eot;
      return t;
    } catch (const FormatError& e) {
      throw FormatError(fmt::format("{}: {}", file.path(), e.what()));
    }
  }

  const std::string pre = file.get_string_or("tokenizer.ggml.pre", "");
  std::vector<std::string> merges = file.get_string_array("tokenizer.ggml.merges");
  SpecialTokens sp;
  sp.bos = id("tokenizer.ggml.bos_token_id", -1);
  sp.eos = id("tokenizer.ggml.eos_token_id", -1);
  sp.eot = eot;
  sp.unk = id("tokenizer.ggml.unknown_token_id", -1);
  // llama.cpp: add_bos defaults to true for the Llama 3 pre-tokenizer, false for other BPE.
  const bool llama3 = pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3";
  sp.add_bos = file.get_bool_or("tokenizer.ggml.add_bos_token", llama3);
  try {
    return Tokenizer::bpe(std::move(tokens), std::move(types), merges, pre, sp);
  } catch (const FormatError& e) {
    throw FormatError(fmt::format("{}: {}", file.path(), e.what()));
  }
}

}  // namespace kveval
