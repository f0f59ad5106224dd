// Tokenizer: the common part (vocabulary, special ids, encode dispatch,
// pieces, decode) and the incremental detokenizer. The algorithms live in
// tokenizer_spm.cpp, tokenizer_bpe.cpp, tokenizer_pretok.cpp and
// tokenizer_special.cpp; GGUF reading in tokenizer_gguf.cpp.
#include "model/tokenizer.hpp"

#include <cstdio>

#include <fmt/format.h>

#include "model/tokenizer_bpe.hpp"
#include "model/tokenizer_pretok.hpp"
#include "util/error.hpp"

namespace kveval {

namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";        // U+2581 "▁"
constexpr std::string_view kUnknownGlyph = "\xE2\x96\x85";  // U+2585, llama.cpp's rendering of <unk>
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";   // U+FFFD

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (true) {
    size_t j = s.find(from, i);
    if (j == std::string_view::npos) break;
    out.append(s, i, j - i);
    out.append(to);
    i = j + from.size();
  }
  out.append(s.substr(i));
  return out;
}

/// Validates the UTF-8 sequence at s[i]: returns its length if complete and
/// valid, 0 if it is a valid but incomplete prefix that runs to the end of
/// `s`, or -k if the first k >= 1 bytes form an invalid (maximal) subpart.
int utf8_check(std::string_view s, size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  int len;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 < 0x80) return 1;
  if (b0 >= 0xC2 && b0 <= 0xDF) len = 2;
  else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return -1;
  }
  for (int k = 1; k < len; ++k) {
    if (i + k >= s.size()) return 0;
    const auto b = static_cast<unsigned char>(s[i + k]);
    const bool ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) return -k;
  }
  return len;
}

}  // namespace

Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::Tokenizer(const Tokenizer&) = default;
Tokenizer& Tokenizer::operator=(const Tokenizer&) = default;
Tokenizer::~Tokenizer() = default;

Tokenizer::Tokenizer(std::vector<std::string> tokens, std::vector<float> scores, std::vector<int32_t> types,
                     int32_t bos_id, int32_t eos_id, int32_t unk_id, bool add_space_prefix)
    : kind_(TokenizerKind::Spm),
      tokens_(std::move(tokens)),
      scores_(std::move(scores)),
      types_(std::move(types)),
      bos_(bos_id),
      eos_(eos_id),
      unk_(unk_id),
      has_bos_(true),
      add_bos_(true),
      add_space_prefix_(add_space_prefix) {
  const auto n = static_cast<int64_t>(tokens_.size());
  if (scores_.size() != tokens_.size())
    throw FormatError(fmt::format("tokenizer: {} scores for {} tokens", scores_.size(), tokens_.size()));
  init_vocab(/*allow_duplicates=*/true);
  if (bos_ < 0 || bos_ >= n) throw FormatError(fmt::format("tokenizer: BOS id {} outside [0, {})", bos_, n));
  if (eos_ < 0 || eos_ >= n) throw FormatError(fmt::format("tokenizer: EOS id {} outside [0, {})", eos_, n));
  if (unk_ < -1 || unk_ >= n) throw FormatError(fmt::format("tokenizer: unknown-token id {} outside [0, {})", unk_, n));
  for (int b = 0; b < 256; ++b) {  // llama.cpp's byte_to_token: <0xXX>, else the byte itself as a token
    const int32_t id = index_.find(fmt::format("<0x{:02X}>", b));
    byte_token_[b] = id >= 0 ? id : index_.find(std::string(1, static_cast<char>(b)));
  }
  init_specials();
}

Tokenizer Tokenizer::bpe(std::vector<std::string> tokens, std::vector<int32_t> types,
                         const std::vector<std::string>& merges, const std::string& pre, SpecialTokens sp) {
  Tokenizer t;
  t.kind_ = TokenizerKind::Bpe;
  t.tokens_ = std::move(tokens);
  t.types_ = std::move(types);
  t.scores_.assign(t.tokens_.size(), 0.0f);
  t.init_vocab(/*allow_duplicates=*/false);
  const auto n = static_cast<int64_t>(t.tokens_.size());
  auto check = [&](int32_t id, const char* key) {
    if (id < -1 || id >= n)
      throw FormatError(fmt::format("token id {} outside the vocabulary of {} (key '{}')", id, n, key));
  };
  check(sp.bos, "tokenizer.ggml.bos_token_id");
  check(sp.eos, "tokenizer.ggml.eos_token_id");
  check(sp.eot, "tokenizer.ggml.eot_token_id");
  check(sp.unk, "tokenizer.ggml.unknown_token_id");
  if (sp.add_bos && sp.bos < 0)
    throw FormatError("tokenizer.ggml.add_bos_token is true but there is no BOS id (key 'tokenizer.ggml.bos_token_id')");
  t.pretok_ = std::make_shared<const PreTokenizer>(pre);
  t.merges_ = std::make_shared<const BpeMerges>(merges, t.index_);
  t.has_bos_ = sp.bos >= 0;
  t.add_bos_ = sp.add_bos;
  t.eos_ = sp.eos;
  t.eot_ = sp.eot;
  t.unk_ = sp.unk;
  std::fill(std::begin(t.byte_token_), std::end(t.byte_token_), -1);
  t.init_specials();
  t.bos_ = sp.bos >= 0 ? sp.bos : t.eos_ >= 0 ? t.eos_ : t.eot_;
  if (t.bos_ < 0)
    throw FormatError("the vocabulary has no BOS, EOS or end-of-turn token to start sequences with "
                      "(keys 'tokenizer.ggml.bos_token_id', 'tokenizer.ggml.eos_token_id')");
  auto pieces = std::make_shared<std::vector<std::string>>(t.tokens_.size());
  for (size_t i = 0; i < t.tokens_.size(); ++i) {
    switch (static_cast<TokenType>(t.types_[i])) {
      case TokenType::Control: break;
      case TokenType::Unknown: (*pieces)[i] = kUnknownGlyph; break;
      case TokenType::UserDefined: (*pieces)[i] = t.tokens_[i]; break;
      default: (*pieces)[i] = unicode_to_bytes(t.tokens_[i]);
    }
  }
  t.bpe_pieces_ = std::move(pieces);
  return t;
}

void Tokenizer::init_vocab(bool allow_duplicates) {
  const auto n = static_cast<int64_t>(tokens_.size());
  if (n == 0) throw FormatError("tokenizer: empty vocabulary (key 'tokenizer.ggml.tokens')");
  if (n > INT32_MAX) throw FormatError(fmt::format("tokenizer: vocabulary of {} tokens is too large", n));
  if (types_.size() != tokens_.size())
    throw FormatError(fmt::format("tokenizer: {} token types for {} tokens (key 'tokenizer.ggml.token_type')",
                                  types_.size(), tokens_.size()));
  index_ = TokenIndex(tokens_, /*last_wins=*/allow_duplicates);  // SPM: the last wins (llama.cpp)
  if (const auto [first, again] = index_.first_duplicate(); !allow_duplicates && first >= 0)
    throw FormatError(fmt::format("token \"{}\" appears twice in the vocabulary, ids {} and {} "
                                  "(key 'tokenizer.ggml.tokens')",
                                  tokens_[static_cast<size_t>(again)], first, again));
}

std::string Tokenizer::describe() const {
  if (kind_ == TokenizerKind::Spm) return "spm";
  std::string s = "bpe/";
  s += pretok_->name();
  return s;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
  std::vector<int32_t> out;
  if (add_bos) out.push_back(bos_);
  if (text.empty()) return out;
  bool prev_special = true;  // SPM: the space prefix goes before the first fragment too
  for (const Fragment& f : partition(text, parse_special)) {
    if (f.id >= 0) {
      out.push_back(f.id);
      prev_special = true;
      continue;
    }
    if (kind_ == TokenizerKind::Spm) {
      std::string frag;
      if (add_space_prefix_ && prev_special) frag += ' ';
      frag += f.text;
      encode_spm(frag, out);
    } else if (pretok_->nfc()) {
      const std::string norm = nfc_normalize(f.text);
      encode_bpe(norm, out);
    } else {
      encode_bpe(f.text, out);
    }
    prev_special = false;
  }
  return out;
}

void Tokenizer::encode_bpe(std::string_view text, std::vector<int32_t>& out) const {
  std::string word;
  for (std::string_view w : pretok_->split(text)) {
    word.clear();
    for (char c : w) word += byte_to_unicode(static_cast<uint8_t>(c));
    merges_->encode_word(word, index_, pretok_->ignore_merges(), out);
  }
}

std::string Tokenizer::token_to_piece(int32_t id) const {
  if (id < 0 || id >= n_vocab())
    throw ArgumentError(fmt::format("tokenizer: token id {} outside [0, {})", id, n_vocab()));
  if (kind_ == TokenizerKind::Bpe) return (*bpe_pieces_)[static_cast<size_t>(id)];
  const std::string& t = tokens_[id];
  switch (static_cast<TokenType>(types_[id])) {
    case TokenType::Control: return {};
    case TokenType::Unknown: return std::string(kUnknownGlyph);
    case TokenType::UserDefined: return t;
    case TokenType::Byte: {
      unsigned v = 0;
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && std::sscanf(t.c_str() + 3, "%2x", &v) == 1)
        return std::string(1, static_cast<char>(v));
      return replace_all(t, kSpace, " ");  // malformed byte token: treat as text
    }
    default: return replace_all(t, kSpace, " ");
  }
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) out += token_to_piece(id);
  if (kind_ == TokenizerKind::Spm && !ids.empty() && ids[0] == bos_ && add_space_prefix_ && !out.empty() &&
      out[0] == ' ')
    out.erase(0, 1);
  return out;
}

std::string IncrementalDetokenizer::push(int32_t id) {
  pending_ += tok_->token_to_piece(id);
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    const int r = utf8_check(pending_, i);
    if (r == 0) break;  // incomplete character at the end: hold it back
    if (r > 0) {
      out.append(pending_, i, static_cast<size_t>(r));
      i += static_cast<size_t>(r);
    } else {
      out += kReplacement;
      i += static_cast<size_t>(-r);
    }
  }
  pending_.erase(0, i);
  return out;
}

std::string IncrementalDetokenizer::flush() {
  std::string out = pending_.empty() ? std::string() : std::string(kReplacement);
  pending_.clear();
  return out;
}

}  // namespace kveval
