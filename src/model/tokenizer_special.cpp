// Special tokens: cutting text at control / user-defined tokens before the
// tokenizer runs, and finding the end-of-turn token.
//
// Which tokens are matched is llama.cpp's tokenizer_st_partition
// (src/llama-vocab.cpp): user-defined tokens always (Hugging Face matches its
// added tokens before normalization and pre-tokenization), control and unknown
// tokens only with parse_special. Overlapping candidates are resolved
// leftmost-longest, as Hugging Face's AddedVocabulary (an Aho-Corasick
// LeftmostLongest automaton); llama.cpp instead matches longest texts first
// over the whole input, which agrees except for overlapping distinct tokens.
#include <algorithm>

#include "model/tokenizer.hpp"

namespace kveval {

/// A byte trie of special-token texts.
struct Tokenizer::Trie {
  struct Node {
    int32_t id = -1;                                  // token ending here
    std::vector<std::pair<unsigned char, int32_t>> kids;  // (byte, node)
  };
  std::vector<Node> nodes{Node{}};

  void insert(std::string_view text, int32_t id) {
    int32_t n = 0;
    for (unsigned char c : text) {
      int32_t next = -1;
      for (const auto& [b, k] : nodes[n].kids)
        if (b == c) next = k;
      if (next < 0) {
        next = static_cast<int32_t>(nodes.size());
        nodes[n].kids.emplace_back(c, next);
        nodes.emplace_back();
      }
      n = next;
    }
    if (nodes[n].id < 0) nodes[n].id = id;  // the first id of a text wins
  }

  /// The longest token that `s` starts with: (id, length), or (-1, 0).
  std::pair<int32_t, size_t> longest_prefix(std::string_view s) const {
    std::pair<int32_t, size_t> best{-1, 0};
    int32_t n = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      int32_t next = -1;
      for (const auto& [b, k] : nodes[n].kids)
        if (b == static_cast<unsigned char>(s[i])) next = k;
      if (next < 0) break;
      n = next;
      if (nodes[n].id >= 0) best = {nodes[n].id, i + 1};
    }
    return best;
  }
};

void Tokenizer::init_specials() {
  auto user = std::make_shared<Trie>();
  auto all = std::make_shared<Trie>();
  for (int32_t id = 0; id < n_vocab(); ++id) {
    const TokenType t = static_cast<TokenType>(types_[id]);
    const std::string& text = tokens_[id];
    if (text.empty()) continue;
    if (t == TokenType::UserDefined) user->insert(text, id);
    if (t == TokenType::UserDefined || t == TokenType::Control || t == TokenType::Unknown) all->insert(text, id);
  }
  user_trie_ = std::move(user);
  special_trie_ = std::move(all);

  // End of turn: the GGUF key, else the first of these texts in the
  // vocabulary (llama.cpp's list in llama_vocab::impl::load, in this order).
  if (eot_ < 0) {
    static const char* const kEot[] = {"<|eot_id|>",   "<|im_end|>", "<|end|>", "<end_of_turn>",
                                       "<|endoftext|>", "<|end_of_text|>", "<EOT>", "_<EOT>",
                                       "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
                                       "<end_of_utterance>"};
    for (const char* s : kEot) {
      if (const int32_t id = index_.find(s); id >= 0) {
        eot_ = id;
        break;
      }
    }
  }
}

std::vector<Tokenizer::Fragment> Tokenizer::partition(std::string_view text, bool parse_special) const {
  const Trie& trie = parse_special ? *special_trie_ : *user_trie_;
  std::vector<Fragment> out;
  if (trie.nodes[0].kids.empty()) {
    out.push_back({-1, text});
    return out;
  }
  size_t start = 0;  // start of the pending raw text
  for (size_t i = 0; i < text.size();) {
    const auto [id, len] = trie.longest_prefix(text.substr(i));
    if (id < 0) {
      ++i;
      continue;
    }
    if (i > start) out.push_back({-1, text.substr(start, i - start)});
    out.push_back({id, text.substr(i, len)});
    i += len;
    start = i;
  }
  if (start < text.size()) out.push_back({-1, text.substr(start)});
  return out;
}

}  // namespace kveval
