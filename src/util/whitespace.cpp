#include "util/whitespace.hpp"

namespace kveval::util {

bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

size_t space_length_at(std::string_view s, size_t i) {
  // Every whitespace character is below U+3001, so 1 to 3 UTF-8 bytes. A match
  // starts with an ASCII byte or a lead byte (C2, E1, E2, E3), never with a
  // continuation byte, so scanning byte by byte cannot match inside another
  // character of valid UTF-8.
  const size_t n = s.size();
  if (i >= n) return 0;
  auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c0 = b(0);
  if (c0 < 0x80) return is_space(c0) ? 1 : 0;
  if (c0 == 0xC2 && i + 1 < n) return (b(1) == 0x85 || b(1) == 0xA0) ? 2 : 0;
  if (c0 >= 0xE1 && c0 <= 0xE3 && i + 2 < n) {
    const unsigned char c1 = b(1), c2 = b(2);
    if (c1 < 0x80 || c1 > 0xBF || c2 < 0x80 || c2 > 0xBF) return 0;
    const char32_t cp = (char32_t(c0 & 0x0F) << 12) | (char32_t(c1 & 0x3F) << 6) | char32_t(c2 & 0x3F);
    return is_space(cp) ? 3 : 0;
  }
  return 0;
}

std::string_view lstrip(std::string_view s) {
  size_t i = 0;
  while (size_t l = space_length_at(s, i)) i += l;
  return s.substr(i);
}

std::string_view rstrip(std::string_view s) {
  size_t i = 0, end = 0;  // end: one past the last non-whitespace byte
  while (i < s.size()) {
    if (size_t l = space_length_at(s, i)) {
      i += l;
    } else {
      ++i;
      end = i;
    }
  }
  return s.substr(0, end);
}

std::string_view strip(std::string_view s) { return rstrip(lstrip(s)); }

int64_t split_count(std::string_view s) {
  int64_t runs = 0;
  bool in_run = false;
  size_t i = 0;
  while (i < s.size()) {
    if (size_t l = space_length_at(s, i)) {
      if (!in_run) ++runs;
      in_run = true;
      i += l;
    } else {
      in_run = false;
      ++i;
    }
  }
  return runs + 1;
}

}  // namespace kveval::util
