#pragma once
// SentencePiece-style BPE tokenizer ("llama" model in GGUF's tokenizer.ggml.*):
// merges by piece score, byte fallback to <0xXX> tokens, dummy space prefix.
// Behaviour matches llama.cpp's llm_tokenizer_spm.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kveval::gguf { class File; }

namespace kveval {

/// Token type ids as in GGUF's tokenizer.ggml.token_type.
enum class TokenType : int32_t { Undefined = 0, Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };

class Tokenizer {
 public:
  /// `tokens[i]` is piece i (UTF-8, "▁" for space), `scores[i]` its merge
  /// priority, `types[i]` its TokenType. Throws kveval::FormatError if sizes
  /// differ, ids are out of range, or a byte token <0xXX> is missing for some byte
  /// (only when byte fallback is needed, i.e. reported lazily at encode time).
  Tokenizer(std::vector<std::string> tokens, std::vector<float> scores, std::vector<int32_t> types,
            int32_t bos_id, int32_t eos_id, int32_t unk_id = 0, bool add_space_prefix = true);

  /// Reads tokenizer.ggml.{model,tokens,scores,token_type,bos_token_id,
  /// eos_token_id,unknown_token_id,add_space_prefix}. Throws FormatError if
  /// tokenizer.ggml.model is not "llama" (naming the model found) or a key is bad.
  static Tokenizer from_gguf(const gguf::File& file);

  /// Token ids of `text`: optional BOS, then SentencePiece BPE of
  /// ("▁" + text with spaces as "▁"); the prefix is added only for non-empty text.
  std::vector<int32_t> encode(std::string_view text, bool add_bos) const;

  /// Text of `ids`: pieces concatenated, "▁" -> ' ', byte tokens as raw bytes,
  /// control tokens (BOS/EOS) skipped. If ids[0] is BOS and add_space_prefix,
  /// one leading space is removed, so decode(encode(s, true)) == s.
  /// Throws ArgumentError for an id outside [0, n_vocab).
  std::string decode(std::span<const int32_t> ids) const;

  /// Raw bytes of one token ("▁" -> ' ', <0xXX> -> that byte, control -> "").
  std::string token_to_piece(int32_t id) const;

  int32_t bos() const { return bos_; }
  int32_t eos() const { return eos_; }
  int32_t n_vocab() const { return static_cast<int32_t>(tokens_.size()); }
  const std::string& piece(int32_t id) const { return tokens_.at(static_cast<size_t>(id)); }

 private:
  std::vector<std::string> tokens_;
  std::vector<float> scores_;
  std::vector<int32_t> types_;
  std::unordered_map<std::string, int32_t> index_;
  int32_t bos_, eos_, unk_;
  bool add_space_prefix_;
  int32_t byte_token_[256];
};

/// Streams generated tokens to text without ever emitting a broken UTF-8
/// sequence: bytes of an incomplete character are held back until it completes.
class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(const Tokenizer& tok) : tok_(&tok) {}
  /// Appends token `id`; returns the newly complete UTF-8 text (may be empty).
  std::string push(int32_t id);
  /// Returns whatever is held back (invalid bytes replaced by U+FFFD) and clears it.
  std::string flush();

 private:
  const Tokenizer* tok_;
  std::string pending_;
};

}  // namespace kveval
