// SentencePiece BPE, a port of llama.cpp's llm_tokenizer_spm
// (src/llama-vocab.cpp): symbols are UTF-8 characters; a priority queue of
// adjacent pairs whose concatenation is a vocabulary piece repeatedly merges
// the highest-scoring pair (leftmost on ties); then every final symbol is
// resegmented: a piece in the vocabulary is emitted, otherwise split back into
// the pair that formed it, or into byte tokens <0xXX>.
#include <queue>
#include <unordered_map>

#include <fmt/format.h>

#include "model/tokenizer.hpp"
#include "util/error.hpp"

namespace kveval {

namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581 "▁"

/// Length of the UTF-8 sequence from its first byte, as llama.cpp's utf8_len
/// (continuation or invalid lead bytes count as 1).
size_t utf8_len(unsigned char c) {
  static const size_t lookup[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return lookup[c >> 4];
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

void Tokenizer::encode_spm(std::string_view raw, std::vector<int32_t>& out) const {
  // llama.cpp: escape every ' ' as "▁" (the caller added the prefix space).
  std::string text;
  text.reserve(raw.size() * 3);
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
    const int32_t id = index_.find(piece);
    if (id < 0) return;
    queue.push(Bigram{left, right, scores_[static_cast<size_t>(id)], piece.size()});
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
    if (const int32_t id = index_.find(piece); id >= 0) {
      out.push_back(id);
      return;
    }
    if (auto p = rev_merge.find(piece); p != rev_merge.end()) {
      self(self, symbols[p->second.first]);
      self(self, symbols[p->second.second]);
      return;
    }
    for (unsigned char c : piece) {
      if (byte_token_[c] < 0)
        throw FormatError(fmt::format("the model's tokenizer cannot encode byte 0x{:02X}: neither <0x{:02X}> nor the byte "
                                      "itself is in its vocabulary (SentencePiece byte fallback)", c, c));
      out.push_back(byte_token_[c]);
    }
  };
  if (!symbols.empty())
    for (int i = 0; i != -1; i = symbols[i].next) resegment(resegment, symbols[i]);
}

}  // namespace kveval
