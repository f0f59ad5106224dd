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

  /// Distinct merges (a pair listed again at a later rank counts once).
  size_t size() const { return size_; }

  /// Appends the ids of one pre-tokenized word, given as its byte-encoded text
  /// (byte_to_unicode of each byte). `ignore_merges`: a word that is a token
  /// is emitted whole. Symbols that end up outside the vocabulary (only
  /// possible for characters without a token) emit the tokens of their single
  /// bytes, when those exist, as llama.cpp.
  void encode_word(std::string_view word, const TokenIndex& index, bool ignore_merges,
                   std::vector<int32_t>& out) const;

 private:
  /// One merge in an open-addressing table (linear probing, at most 2/3 full).
  struct Entry {
    uint64_t key = kEmpty;  ///< key(left id, right id)
    int32_t rank = 0;
    int32_t id = 0;  ///< token of the concatenation
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};  // no pair of ids in [0, 2^31) has it
  static uint64_t key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  /// Home slot of `k`: Fibonacci hashing (Knuth, TAOCP 6.4) of the pair into the table's power of two.
  size_t slot(uint64_t k) const {
    return static_cast<size_t>((k * 0x9E3779B97F4A7C15ull) >> 32) & (table_.size() - 1);
  }
  /// The merge of (a, b), or nullptr.
  const Entry* find(int32_t a, int32_t b) const;
  std::vector<Entry> table_;
  size_t size_ = 0;
};

}  // namespace kveval
