#pragma once
// Pre-tokenizer of byte-level BPE vocabularies: the regular expressions that
// cut text into words before merging, chosen by GGUF's `tokenizer.ggml.pre`,
// plus the Unicode NFC normalization of the Qwen2 family.
//
// Facts (not code) from llama.cpp src/llama-vocab.cpp (llm_tokenizer_bpe: the
// regex list of each pre type; the pre-name table in llama_vocab::impl::load)
// and src/unicode.cpp (unicode_regex_split: each expression refines the pieces
// of the previous one; matches and the text between matches both become
// pieces; an expression never looks past the piece it splits). Where
// llama.cpp rewrote a tokenizer.json expression for std::regex (case-
// insensitive contractions), the original Hugging Face expression is used.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kveval {

/// One pre-tokenizer family: its regexes (PCRE2, UTF + UCP) and flags.
class PreTokenizer {
 public:
  /// The family named `pre` (a `tokenizer.ggml.pre` value; "" means "default",
  /// as llama.cpp). Throws FormatError "tokenizer.ggml.pre 'X' is not supported
  /// (supported: ...)" for an unknown name; the caller prefixes the file.
  explicit PreTokenizer(const std::string& pre);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  /// The canonical family name (e.g. "llama-bpe" for "llama3").
  const std::string& name() const { return name_; }
  /// Hugging Face `ignore_merges`: a word that is itself a vocabulary token is
  /// emitted whole without running merges (Llama 3).
  bool ignore_merges() const { return ignore_merges_; }
  /// Whether the input is NFC-normalized first (Qwen2's tokenizer.json
  /// normalizer; llama.cpp skips it).
  bool nfc() const { return nfc_; }

  /// Splits `text` (UTF-8; invalid bytes never match a class and are kept as
  /// pieces of their own) into words, in order; their concatenation is `text`.
  /// Pieces are views into `text`.
  std::vector<std::string_view> split(std::string_view text) const;

  /// The `tokenizer.ggml.pre` values this build accepts (comma-separated).
  static std::string supported();

 private:
  struct Regex;
  std::string name_;
  bool ignore_merges_ = false;
  bool nfc_ = false;
  std::vector<std::unique_ptr<Regex>> regexes_;
};

/// Unicode NFC of `text` (ICU's Normalizer2::getNFCInstance). Maximal valid
/// UTF-8 runs are normalized; invalid bytes are copied unchanged. Throws Error
/// when ICU fails (a run over 2 GiB, missing ICU data).
std::string nfc_normalize(std::string_view text);

/// Rewrites `\s` and `\S` of a Hugging Face / Rust-regex pattern so that PCRE2
/// (whose UCP `\s` is Z + \t\n\v\f\r) also treats U+0085 as white space, as
/// Unicode's White_Space property (Rust's `\s`) does. Exposed for tests.
std::string pcre2_whitespace_pattern(std::string_view pattern);

}  // namespace kveval
