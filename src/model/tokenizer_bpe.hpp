#pragma once
// Byte-level BPE ("gpt2" model in GGUF's tokenizer.ggml.*): the GPT-2
// byte-to-unicode mapping and merges by rank.
//
// Facts from GPT-2's encoder.py (bytes_to_unicode), llama.cpp's
// llm_tokenizer_bpe_session (src/llama-vocab.cpp: lowest rank first, leftmost
// on ties; a final symbol that is not a token falls back to its single bytes)
// and Hugging Face tokenizers' BPE model (`ignore_merges`).
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/tokenizer.hpp"

namespace kveval {

/// GPT-2 bytes_to_unicode: the UTF-8 text of the code point standing for byte `b`
/// (printable Latin-1 bytes stand for themselves, the others for U+0100 + n).
const std::string& byte_to_unicode(uint8_t b);

/// Inverse of byte_to_unicode over a whole string: each code point that stands
/// for a byte becomes that byte; any other code point is kept as its UTF-8.
std::string unicode_to_bytes(std::string_view text);

/// Merge table of a byte-level BPE vocabulary.
class BpeMerges {
 public:
  BpeMerges() = default;
  /// `merges[r]` is "left right" (rank r; split at the first space after the
  /// first byte, as llama.cpp). `index` maps token text to id. Throws
  /// FormatError "key 'tokenizer.ggml.merges'[r] \"...\": ..." when a merge has
  /// no space or names a token (left, right or their concatenation) that is
  /// not in the vocabulary.
  BpeMerges(const std::vector<std::string>& merges, const TokenIndex& index);

  size_t size() const { return table_.size(); }

  /// Appends the ids of one pre-tokenized word, given as its byte-encoded text
  /// (byte_to_unicode of each byte). `ignore_merges`: a word that is a token
  /// is emitted whole. Symbols that end up outside the vocabulary (only
  /// possible for characters without a token) emit the tokens of their single
  /// bytes, when those exist, as llama.cpp.
  void encode_word(std::string_view word, const TokenIndex& index, bool ignore_merges,
                   std::vector<int32_t>& out) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t id;  // token of the concatenation
  };
  static uint64_t key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  std::unordered_map<uint64_t, Merge> table_;
};

}  // namespace kveval
