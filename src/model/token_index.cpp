// TokenIndex: linear probing over a power-of-two table at most 2/3 full.
#include "model/token_index.hpp"

#include <functional>

#include <fmt/format.h>

#include "util/error.hpp"

namespace kveval {

namespace {

size_t text_hash(std::string_view s) { return std::hash<std::string_view>{}(s); }

}  // namespace

TokenIndex::TokenIndex(std::span<const std::string> texts, bool last_wins) {
  size_t total = 0;
  for (const std::string& t : texts) total += t.size();
  if (total > UINT32_MAX)
    throw FormatError(fmt::format("tokenizer: the {} token texts take {} bytes, more than 4 GiB", texts.size(), total));
  blob_.reserve(total);
  offset_.reserve(texts.size() + 1);
  offset_.push_back(0);
  for (const std::string& t : texts) {
    blob_ += t;
    offset_.push_back(static_cast<uint32_t>(blob_.size()));
  }
  size_t cap = 16;
  while (2 * cap < 3 * texts.size()) cap *= 2;  // at most 2/3 full
  slots_.assign(cap, Slot{});
  const size_t mask = cap - 1;
  for (int32_t id = 0; id < static_cast<int32_t>(texts.size()); ++id) {
    const std::string_view t = text(id);
    const size_t h = text_hash(t);
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      Slot& s = slots_[i];
      if (s.id < 0) {
        s = {static_cast<uint32_t>(h), id};
        break;
      }
      if (s.hash == static_cast<uint32_t>(h) && text(s.id) == t) {
        if (duplicate_.first < 0) duplicate_ = {s.id, id};
        if (last_wins) s.id = id;
        break;
      }
    }
  }
}

int32_t TokenIndex::find(std::string_view t) const {
  if (slots_.empty()) return -1;
  const size_t h = text_hash(t), mask = slots_.size() - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.id < 0) return -1;
    if (s.hash == static_cast<uint32_t>(h) && text(s.id) == t) return s.id;
  }
}

}  // namespace kveval
