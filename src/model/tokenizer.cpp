// SentencePiece BPE tokenizer, a port of llama.cpp's llm_tokenizer_spm
// (src/llama-vocab.cpp): symbols are UTF-8 characters; a priority queue of
// adjacent pairs whose concatenation is a vocabulary piece repeatedly merges
// the highest-scoring pair (leftmost on ties); then every final symbol is
// resegmented: a piece in the vocabulary is emitted, otherwise split back into
// the pair that formed it, or into byte tokens <0xXX>.
#include "model/tokenizer.hpp"

#include <cstdio>
#include <queue>

#include <fmt/format.h>

#include "model/gguf.hpp"
#include "util/error.hpp"

namespace kveval {

namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";        // U+2581 "▁"
constexpr std::string_view kUnknownGlyph = "\xE2\x96\x85";  // U+2585, llama.cpp's rendering of <unk>
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";   // U+FFFD

/// Length of the UTF-8 sequence from its first byte, as llama.cpp's utf8_len
/// (continuation or invalid lead bytes count as 1).
size_t utf8_len(unsigned char c) {
  static const size_t lookup[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return lookup[c >> 4];
}

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (true) {
    size_t j = s.find(from, i);
    if (j == std::string::npos) break;
    out.append(s, i, j - i);
    out.append(to);
    i = j + from.size();
  }
  out.append(s, i, std::string::npos);
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

struct Symbol {
  size_t start;  // byte offset into the text
  size_t n;      // bytes; 0 once merged into its left neighbour
  int prev, next;
};

struct Bigram {
  int left, right;
  float score;
  size_t size;
};

/// llama.cpp's llm_bigram_spm::comparator: highest score first, then leftmost.
struct BigramLess {
  bool operator()(const Bigram& l, const Bigram& r) const {
    return l.score < r.score || (l.score == r.score && l.left > r.left);
  }
};

}  // namespace

Tokenizer::Tokenizer(std::vector<std::string> tokens, std::vector<float> scores, std::vector<int32_t> types,
                     int32_t bos_id, int32_t eos_id, int32_t unk_id, bool add_space_prefix)
    : tokens_(std::move(tokens)),
      scores_(std::move(scores)),
      types_(std::move(types)),
      bos_(bos_id),
      eos_(eos_id),
      unk_(unk_id),
      add_space_prefix_(add_space_prefix) {
  const auto n = static_cast<int64_t>(tokens_.size());
  if (n == 0) throw FormatError("tokenizer: empty vocabulary");
  if (n > INT32_MAX) throw FormatError(fmt::format("tokenizer: vocabulary of {} tokens is too large", n));
  if (scores_.size() != tokens_.size())
    throw FormatError(fmt::format("tokenizer: {} scores for {} tokens", scores_.size(), tokens_.size()));
  if (types_.size() != tokens_.size())
    throw FormatError(fmt::format("tokenizer: {} token types for {} tokens", types_.size(), tokens_.size()));
  if (bos_ < 0 || bos_ >= n) throw FormatError(fmt::format("tokenizer: BOS id {} outside [0, {})", bos_, n));
  if (eos_ < 0 || eos_ >= n) throw FormatError(fmt::format("tokenizer: EOS id {} outside [0, {})", eos_, n));
  if (unk_ < -1 || unk_ >= n) throw FormatError(fmt::format("tokenizer: unknown-token id {} outside [0, {})", unk_, n));
  index_.reserve(tokens_.size());
  for (int32_t i = 0; i < static_cast<int32_t>(n); ++i) index_[tokens_[i]] = i;  // last wins, as llama.cpp
  for (int b = 0; b < 256; ++b) {
    auto it = index_.find(fmt::format("<0x{:02X}>", b));
    byte_token_[b] = it == index_.end() ? -1 : it->second;
  }
}

Tokenizer Tokenizer::from_gguf(const gguf::File& file) {
  const std::string model = file.get_string_or("tokenizer.ggml.model", "");
  if (model != "llama")
    throw FormatError(fmt::format("{}: tokenizer model '{}' is not supported, expected 'llama' (SentencePiece) "
                                  "(key 'tokenizer.ggml.model')",
                                  file.path(), model));
  std::vector<std::string> tokens = file.get_string_array("tokenizer.ggml.tokens");
  std::vector<float> scores = file.find("tokenizer.ggml.scores") ? file.get_float_array("tokenizer.ggml.scores")
                                                                 : std::vector<float>(tokens.size(), 0.0f);
  std::vector<int32_t> types(tokens.size(), static_cast<int32_t>(TokenType::Normal));
  if (file.find("tokenizer.ggml.token_type")) {
    std::vector<int64_t> t = file.get_int_array("tokenizer.ggml.token_type");
    if (t.size() != tokens.size())
      throw FormatError(fmt::format("{}: {} token types for {} tokens (key 'tokenizer.ggml.token_type')", file.path(),
                                    t.size(), tokens.size()));
    for (size_t i = 0; i < t.size(); ++i) types[i] = static_cast<int32_t>(t[i]);
  }
  auto id = [&](const char* key, uint64_t def) -> int32_t {
    uint64_t v = file.get_uint_or(key, def);
    if (v >= tokens.size())
      throw FormatError(fmt::format("{}: token id {} outside the vocabulary of {} (key '{}')", file.path(), v,
                                    tokens.size(), key));
    return static_cast<int32_t>(v);
  };
  const int32_t bos = id("tokenizer.ggml.bos_token_id", 1);
  const int32_t eos = id("tokenizer.ggml.eos_token_id", 2);
  const int32_t unk = id("tokenizer.ggml.unknown_token_id", 0);
  const bool prefix = file.get_bool_or("tokenizer.ggml.add_space_prefix", true);
  try {
    return Tokenizer(std::move(tokens), std::move(scores), std::move(types), bos, eos, unk, prefix);
  } catch (const FormatError& e) {
    throw FormatError(fmt::format("{}: {}", file.path(), e.what()));
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view raw, bool add_bos) const {
  std::vector<int32_t> out;
  if (add_bos) out.push_back(bos_);
  if (raw.empty()) return out;

  // llama.cpp: prefix " " (add_space_prefix), then escape every ' ' as "▁".
  std::string text;
  text.reserve(raw.size() * 3 + 3);
  if (add_space_prefix_) text += kSpace;
  for (char c : raw) {
    if (c == ' ') text += kSpace;
    else text += c;
  }

  // Split into UTF-8 characters.
  std::vector<Symbol> symbols;
  for (size_t offs = 0; offs < text.size();) {
    const size_t len = std::min(utf8_len(static_cast<unsigned char>(text[offs])), text.size() - offs);
    const int idx = static_cast<int>(symbols.size());
    symbols.push_back(Symbol{offs, len, idx - 1, offs + len == text.size() ? -1 : idx + 1});
    offs += len;
  }

  std::priority_queue<Bigram, std::vector<Bigram>, BigramLess> queue;
  std::unordered_map<std::string, std::pair<int, int>> rev_merge;
  auto try_add_bigram = [&](int left, int right) {
    if (left == -1 || right == -1) return;
    std::string piece = text.substr(symbols[left].start, symbols[left].n + symbols[right].n);
    auto it = index_.find(piece);
    if (it == index_.end()) return;
    queue.push(Bigram{left, right, scores_[it->second], piece.size()});
    rev_merge[piece] = {left, right};
  };
  for (size_t i = 1; i < symbols.size(); ++i) try_add_bigram(static_cast<int>(i) - 1, static_cast<int>(i));

  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = symbols[b.left];
    Symbol& r = symbols[b.right];
    // Stale entry: one side was merged away or changed size since it was queued.
    if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = b.left;
    try_add_bigram(l.prev, b.left);
    try_add_bigram(b.left, l.next);
  }

  // Resegment: pieces in the vocabulary are emitted; others split back into
  // the pair that formed them, else into byte tokens.
  auto resegment = [&](auto& self, const Symbol& s) -> void {
    std::string piece = text.substr(s.start, s.n);
    if (auto it = index_.find(piece); it != index_.end()) {
      out.push_back(it->second);
      return;
    }
    if (auto p = rev_merge.find(piece); p != rev_merge.end()) {
      self(self, symbols[p->second.first]);
      self(self, symbols[p->second.second]);
      return;
    }
    for (unsigned char c : piece) {
      if (byte_token_[c] < 0)
        throw FormatError(fmt::format("tokenizer: no byte token <0x{:02X}> in the vocabulary for byte fallback", c));
      out.push_back(byte_token_[c]);
    }
  };
  if (!symbols.empty())
    for (int i = 0; i != -1; i = symbols[i].next) resegment(resegment, symbols[i]);
  return out;
}

std::string Tokenizer::token_to_piece(int32_t id) const {
  if (id < 0 || id >= n_vocab())
    throw ArgumentError(fmt::format("tokenizer: token id {} outside [0, {})", id, n_vocab()));
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
  if (!ids.empty() && ids[0] == bos_ && add_space_prefix_ && !out.empty() && out[0] == ' ') out.erase(0, 1);
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
