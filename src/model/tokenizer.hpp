#pragma once
// The tokenizer of a GGUF file, one interface for two algorithms:
//  - SentencePiece-style BPE (tokenizer.ggml.model = "llama"): merges by
//    piece score, byte fallback to <0xXX> tokens, dummy space prefix
//    (tokenizer_spm.cpp; llama.cpp's llm_tokenizer_spm);
//  - byte-level BPE (tokenizer.ggml.model = "gpt2"): a pre-tokenizer regex
//    chosen by tokenizer.ggml.pre, GPT-2's byte-to-unicode mapping, merges by
//    rank (tokenizer_bpe.cpp, tokenizer_pretok.cpp).
// Both first cut the text at special tokens (tokenizer_special.cpp): user-
// defined tokens always, control tokens only when special parsing is asked for.
// Files are read by tokenizer_gguf.cpp.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/token_index.hpp"

namespace kveval::gguf { class File; }

namespace kveval {

/// Token type ids as in GGUF's tokenizer.ggml.token_type.
enum class TokenType : int32_t { Undefined = 0, Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };

/// Which algorithm a Tokenizer runs.
enum class TokenizerKind { Spm, Bpe };

class PreTokenizer;
class BpeMerges;

/// Special ids and flags of a vocabulary (-1: none).
struct SpecialTokens {
  int32_t bos = -1;   ///< tokenizer.ggml.bos_token_id
  int32_t eos = -1;   ///< tokenizer.ggml.eos_token_id
  int32_t eot = -1;   ///< tokenizer.ggml.eot_token_id, else found by text (see tokenizer_special.cpp)
  int32_t unk = -1;   ///< tokenizer.ggml.unknown_token_id
  bool add_bos = false;  ///< tokenizer.ggml.add_bos_token (llama.cpp defaults: SPM true, llama-bpe true, other BPE false)
};

class Tokenizer {
 public:
  /// SentencePiece vocabulary. `tokens[i]` is piece i (UTF-8, "▁" for space),
  /// `scores[i]` its merge priority, `types[i]` its TokenType. Throws
  /// kveval::FormatError if sizes differ or ids are out of range; a missing
  /// byte token <0xXX> is reported when byte fallback needs it (at encode time).
  /// BOS is added by encode(…, true); EOT is found by text (llama.cpp's list).
  Tokenizer(std::vector<std::string> tokens, std::vector<float> scores, std::vector<int32_t> types,
            int32_t bos_id, int32_t eos_id, int32_t unk_id = 0, bool add_space_prefix = true);

  /// Byte-level BPE vocabulary: `tokens` in byte-encoded form (GPT-2's
  /// bytes_to_unicode; user-defined and control tokens as raw text), `types`
  /// their TokenType, `merges` "left right" by rank, `pre` the
  /// tokenizer.ggml.pre family ("" = "default"). `special.eot` < 0 is looked up
  /// by text. Throws FormatError (naming the key) for an unknown `pre`, a merge
  /// naming a token not in the vocabulary, a duplicate token, bad special ids,
  /// or add_bos without a BOS id.
  static Tokenizer bpe(std::vector<std::string> tokens, std::vector<int32_t> types,
                       const std::vector<std::string>& merges, const std::string& pre, SpecialTokens special);

  /// Reads tokenizer.ggml.{model,pre,tokens,scores,token_type,merges,
  /// bos_token_id,eos_token_id,eot_token_id,unknown_token_id,add_bos_token,
  /// add_space_prefix}; needs no tensors (vocab-only files work). Throws
  /// FormatError "<file>: ... (key 'K')" for an unsupported model or pre value,
  /// or a bad key.
  static Tokenizer from_gguf(const gguf::File& file);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  Tokenizer(const Tokenizer&);
  Tokenizer& operator=(const Tokenizer&);
  ~Tokenizer();

  /// Token ids of `text`. `add_bos` puts bos() first. With `parse_special`
  /// false (the default, as lm-eval's data) control tokens are never produced
  /// from text: "<|im_end|>" is tokenized as plain characters; user-defined
  /// tokens are always matched (as Hugging Face's added tokens). SPM: the
  /// dummy space prefix goes before every text fragment that starts the text or
  /// follows a special token (llama.cpp). BPE: NFC first for `pre` = qwen2.
  std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special = false) const;

  /// Text of `ids`: pieces concatenated (token_to_piece). SPM: if ids[0] is BOS
  /// and add_space_prefix, one leading space is removed, so
  /// decode(encode(s, true)) == s. Throws ArgumentError for an id outside
  /// [0, n_vocab).
  std::string decode(std::span<const int32_t> ids) const;

  /// Raw bytes of one token: SPM "▁" -> ' ', <0xXX> -> that byte; BPE the bytes
  /// behind its byte-encoded text; user-defined tokens as written; control
  /// tokens -> "". Throws ArgumentError for an id outside [0, n_vocab).
  std::string token_to_piece(int32_t id) const;

  /// The token put before every sequence by encode(…, true): the file's BOS;
  /// for a vocabulary without one (Qwen2), lm-eval's prefix_token_id fallback:
  /// EOS (its eot_token_id is the tokenizer's eos), else EOT. Always a valid id.
  int32_t bos() const { return bos_; }
  /// Whether the file names a BOS token (or SPM's default id 1).
  bool has_bos() const { return has_bos_; }
  /// tokenizer.ggml.add_bos_token (what llama.cpp's llama-tokenize follows).
  bool add_bos() const { return add_bos_; }
  /// End of sequence id, or -1 if the vocabulary has none.
  int32_t eos() const { return eos_; }
  /// End of turn id (<|eot_id|>, <|im_end|>, ...), or -1. Generation stops at EOS or EOT.
  int32_t eot() const { return eot_; }
  /// True for EOS and EOT: the tokens that end a generation.
  bool is_eog(int32_t id) const { return id >= 0 && (id == eos_ || id == eot_); }

  int32_t n_vocab() const { return static_cast<int32_t>(tokens_.size()); }
  const std::string& piece(int32_t id) const { return tokens_.at(static_cast<size_t>(id)); }
  TokenType type(int32_t id) const { return static_cast<TokenType>(types_.at(static_cast<size_t>(id))); }
  TokenizerKind kind() const { return kind_; }
  /// "spm", or "bpe/<pre>" (e.g. "bpe/qwen2") for load lines.
  std::string describe() const;

 private:
  Tokenizer() = default;
  void init_vocab(bool allow_duplicates);
  void init_specials();
  /// Cuts `text` at special tokens: (id, -1 for raw text) with raw text spans.
  struct Fragment {
    int32_t id;
    std::string_view text;
  };
  std::vector<Fragment> partition(std::string_view text, bool parse_special) const;
  void encode_spm(std::string_view text, std::vector<int32_t>& out) const;
  void encode_bpe(std::string_view text, std::vector<int32_t>& out) const;

  TokenizerKind kind_ = TokenizerKind::Spm;
  std::vector<std::string> tokens_;
  std::vector<float> scores_;
  std::vector<int32_t> types_;
  TokenIndex index_;
  struct Trie;                                  // special-token texts (tokenizer_special.cpp)
  std::shared_ptr<const Trie> user_trie_;       // user-defined tokens: always matched
  std::shared_ptr<const Trie> special_trie_;    // + control and unknown tokens: parse_special
  int32_t bos_ = -1, eos_ = -1, eot_ = -1, unk_ = -1;
  bool has_bos_ = false, add_bos_ = false;
  bool add_space_prefix_ = false;
  int32_t byte_token_[256] = {};
  // BPE only (shared: immutable after construction).
  std::shared_ptr<const PreTokenizer> pretok_;
  std::shared_ptr<const BpeMerges> merges_;
  std::shared_ptr<const std::vector<std::string>> bpe_pieces_;  // token_to_piece of every id
};

/// Streams generated tokens to text without ever emitting a broken UTF-8
/// sequence: bytes of an incomplete character are held back until it completes
/// (a BPE character split over several byte tokens is emitted with the last).
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
