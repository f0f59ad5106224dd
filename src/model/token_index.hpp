#pragma once
// Token text -> id for a vocabulary of up to a few hundred thousand tokens:
// one open-addressing table of 8-byte slots over a single copy of the texts,
// instead of one heap node per token (128,256 Llama 3 tokens: 3 MiB, built
// without a memory allocation per token).
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kveval {

class TokenIndex {
 public:
  TokenIndex() = default;
  /// Indexes texts[i] -> i. A text given more than once maps to its last id
  /// when `last_wins` (SentencePiece vocabularies, as llama.cpp), else to its
  /// first; first_duplicate() names the first repeat either way. Throws
  /// FormatError when the texts exceed 4 GiB together.
  TokenIndex(std::span<const std::string> texts, bool last_wins);

  /// The id of `text`, or -1 when it is not a token.
  int32_t find(std::string_view text) const;
  /// (earlier id, later id) of the first text given twice, or (-1, -1).
  std::pair<int32_t, int32_t> first_duplicate() const { return duplicate_; }

 private:
  struct Slot {
    uint32_t hash = 0;
    int32_t id = -1;  ///< -1: empty
  };
  std::string_view text(int32_t id) const {
    const auto i = static_cast<size_t>(id);
    return std::string_view(blob_).substr(offset_[i], offset_[i + 1] - offset_[i]);
  }
  std::string blob_;               ///< every text back to back
  std::vector<uint32_t> offset_;   ///< [n + 1]: text i is blob_[offset_[i], offset_[i + 1])
  std::vector<Slot> slots_;        ///< a power of two, at most 2/3 full; linear probing
  std::pair<int32_t, int32_t> duplicate_{-1, -1};
};

}  // namespace kveval
