// Byte-level BPE: byte-to-unicode mapping and rank-ordered merges.
#include "model/tokenizer_bpe.hpp"

#include <array>
#include <queue>

#include <fmt/format.h>

#include "util/error.hpp"

namespace kveval {

namespace {

std::string utf8_of(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

/// Code point standing for each byte (GPT-2 bytes_to_unicode).
const std::array<uint32_t, 256>& byte_code_points() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    uint32_t n = 0;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[b] = printable ? b : 256 + n++;
    }
    return t;
  }();
  return table;
}

size_t utf8_len(unsigned char c) {
  static const size_t lookup[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return lookup[c >> 4];
}

}  // namespace

const std::string& byte_to_unicode(uint8_t b) {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    for (int i = 0; i < 256; ++i) t[i] = utf8_of(byte_code_points()[i]);
    return t;
  }();
  return table[b];
}

std::string unicode_to_bytes(std::string_view text) {
  // Code points 0..0x143 cover every image of bytes_to_unicode.
  static const std::array<int, 0x144> back = [] {
    std::array<int, 0x144> t;
    t.fill(-1);
    for (int b = 0; b < 256; ++b) t[byte_code_points()[b]] = b;
    return t;
  }();
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto c0 = static_cast<unsigned char>(text[i]);
    const size_t n = std::min(utf8_len(c0), text.size() - i);
    uint32_t cp = 0x110000;
    if (n == 1 && c0 < 0x80) cp = c0;
    else if (n == 2) cp = ((c0 & 0x1Fu) << 6) | (static_cast<unsigned char>(text[i + 1]) & 0x3Fu);
    if (cp < back.size() && back[cp] >= 0) out += static_cast<char>(back[cp]);
    else out.append(text.substr(i, n));
    i += n;
  }
  return out;
}

BpeMerges::BpeMerges(const std::vector<std::string>& merges, const TokenIndex& index) {
  size_t cap = 16;
  while (2 * cap < 3 * merges.size()) cap *= 2;  // at most 2/3 full
  table_.assign(cap, Entry{});
  std::string joined;
  auto find = [&](size_t r, const std::string& m, std::string_view t) -> int32_t {
    const int32_t id = index.find(t);
    if (id < 0)
      throw FormatError(fmt::format("key 'tokenizer.ggml.merges'[{}] \"{}\": token \"{}\" is not in the vocabulary", r,
                                    m, t));
    return id;
  };
  for (size_t r = 0; r < merges.size(); ++r) {
    const std::string& m = merges[r];
    const size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
    if (sp == std::string::npos || sp + 1 >= m.size())
      throw FormatError(fmt::format("key 'tokenizer.ggml.merges'[{}] \"{}\": expected two tokens separated by a space",
                                    r, m));
    const std::string_view left = std::string_view(m).substr(0, sp), right = std::string_view(m).substr(sp + 1);
    joined.assign(left);
    joined += right;
    const int32_t a = find(r, m, left), b = find(r, m, right), ab = find(r, m, joined);
    const uint64_t k = key(a, b);
    for (size_t i = slot(k);; i = (i + 1) & (table_.size() - 1)) {
      if (table_[i].key == k) break;  // the first (lowest) rank wins
      if (table_[i].key == kEmpty) {
        table_[i] = {k, static_cast<int32_t>(r), ab};
        ++size_;
        break;
      }
    }
  }
}

const BpeMerges::Entry* BpeMerges::find(int32_t a, int32_t b) const {
  if (table_.empty()) return nullptr;
  const uint64_t k = key(a, b);
  for (size_t i = slot(k);; i = (i + 1) & (table_.size() - 1)) {
    if (table_[i].key == k) return &table_[i];
    if (table_[i].key == kEmpty) return nullptr;
  }
}

void BpeMerges::encode_word(std::string_view word, const TokenIndex& index,
                            bool ignore_merges, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges) {
    if (const int32_t id = index.find(word); id >= 0) {
      out.push_back(id);
      return;
    }
  }
  struct Sym {
    int32_t id;  // -1: a character without a token
    uint32_t start, len;
    int prev, next;
  };
  std::vector<Sym> syms;
  syms.reserve(word.size());
  for (size_t i = 0; i < word.size();) {
    const size_t n = std::min(utf8_len(static_cast<unsigned char>(word[i])), word.size() - i);
    const int idx = static_cast<int>(syms.size());
    syms.push_back(Sym{index.find(word.substr(i, n)), static_cast<uint32_t>(i), static_cast<uint32_t>(n), idx - 1,
                       i + n == word.size() ? -1 : idx + 1});
    i += n;
  }

  struct Pair {
    int32_t rank;
    int left, right;
    int32_t left_id, right_id;
  };
  // Lowest rank first, then leftmost (llama.cpp's llm_bigram_bpe::comparator).
  auto worse = [](const Pair& x, const Pair& y) { return x.rank > y.rank || (x.rank == y.rank && x.left > y.left); };
  std::priority_queue<Pair, std::vector<Pair>, decltype(worse)> queue(worse);
  auto add_pair = [&](int l, int r) {
    if (l < 0 || r < 0 || syms[l].id < 0 || syms[r].id < 0) return;
    if (const Entry* e = find(syms[l].id, syms[r].id)) queue.push(Pair{e->rank, l, r, syms[l].id, syms[r].id});
  };
  for (int i = 1; i < static_cast<int>(syms.size()); ++i) add_pair(i - 1, i);

  while (!queue.empty()) {
    const Pair p = queue.top();
    queue.pop();
    Sym& l = syms[p.left];
    Sym& r = syms[p.right];
    // Stale: a side was merged away or into something else since it was queued.
    if (l.len == 0 || r.len == 0 || l.id != p.left_id || r.id != p.right_id || l.next != p.right) continue;
    l.id = find(p.left_id, p.right_id)->id;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) syms[r.next].prev = p.left;
    add_pair(l.prev, p.left);
    add_pair(p.left, l.next);
  }

  for (int i = 0; i != -1; i = syms[i].next) {
    const Sym& s = syms[i];
    if (s.id >= 0) {
      out.push_back(s.id);
      continue;
    }
    for (size_t k = 0; k < s.len; ++k) {  // llama.cpp: the tokens of its single bytes, when they exist
      if (const int32_t id = index.find(word.substr(s.start + k, 1)); id >= 0) out.push_back(id);
    }
  }
}

}  // namespace kveval
