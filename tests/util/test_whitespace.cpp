// The whitespace predicate against Python's: the expected set below is
// [c for c in range(0x110000) if chr(c).isspace()] from CPython 3.11, which
// also equals the code points matched by re's \s in a str pattern.
#include <doctest/doctest.h>

#include <algorithm>
#include <ios>
#include <string>
#include <vector>

#include "util/whitespace.hpp"

using namespace kveval::util;

namespace {

const std::vector<char32_t> kPythonSpaces = {0x9,    0xa,    0xb,    0xc,    0xd,    0x1c,   0x1d,   0x1e,
                                              0x1f,   0x20,   0x85,   0xa0,   0x1680, 0x2000, 0x2001, 0x2002,
                                              0x2003, 0x2004, 0x2005, 0x2006, 0x2007, 0x2008, 0x2009, 0x200a,
                                              0x2028, 0x2029, 0x202f, 0x205f, 0x3000};

std::string utf8(char32_t c) {
  std::string s;
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else if (c < 0x800) {
    s += static_cast<char>(0xC0 | (c >> 6));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    s += static_cast<char>(0xE0 | (c >> 12));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (c >> 18));
    s += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  }
  return s;
}

}  // namespace

TEST_SUITE("util.whitespace") {
  TEST_CASE("every code point: whitespace exactly when Python's str.isspace() says so") {
    int n_space = 0;
    for (char32_t c = 0; c < 0x110000; ++c) {
      if (c >= 0xD800 && c <= 0xDFFF) continue;  // surrogates have no UTF-8 form
      const bool expect = std::find(kPythonSpaces.begin(), kPythonSpaces.end(), c) != kPythonSpaces.end();
      const std::string s = utf8(c);
      if (is_space(c) != expect || (space_length_at(s, 0) != 0) != expect) {
        FAIL_CHECK("code point U+" << std::hex << static_cast<uint32_t>(c));
        break;
      }
      if (expect) {
        CHECK(space_length_at(s, 0) == s.size());
        ++n_space;
      }
    }
    CHECK(n_space == 29);
  }

  TEST_CASE("split_count is len(re.split(r'\\s+', s))") {
    // values from Python: len(re.split(r"\s+", s))
    CHECK(split_count("") == 1);
    CHECK(split_count("word") == 1);
    CHECK(split_count("a b  c") == 3);
    CHECK(split_count(" a b") == 3);
    CHECK(split_count("a\n\tb ") == 3);
    CHECK(split_count("a\u00a0b") == 2);
    CHECK(split_count("One day.\u00a0Lily ran.\u3000The end.\u2029") == 7);
    CHECK(split_count("a\u00a0 \u2003b") == 2);            // one mixed run
    CHECK(split_count("a\u200bb") == 1);                   // zero-width space is not whitespace
    CHECK(split_count("caf\u00e9 na\u00efve") == 2);         // é, ï contain no whitespace byte
    CHECK(split_count("a\x1c" "b\x85" "c") == 2);          // U+001C yes; a lone 0x85 byte is not U+0085
  }

  TEST_CASE("strip, lstrip, rstrip are Python's") {
    CHECK(rstrip("Lily\u00a0") == "Lily");                           // 'Lily\xa0'.rstrip()
    CHECK(rstrip("a\u2028 \u0085") == "a");
    CHECK(rstrip("a b ") == "a b");
    CHECK(lstrip("\u3000\tx y") == "x y");
    CHECK(strip("\u00a0\u001cx\u205f") == "x");
    CHECK(strip("\u00a0 \u3000").empty());
    CHECK(strip("") == "");
    CHECK(rstrip("caf\u00e9") == "caf\u00e9");
    // truncated or invalid UTF-8 is never whitespace and never throws
    CHECK(rstrip("a\xc2") == "a\xc2");
    CHECK(rstrip("a\xe3\x80") == "a\xe3\x80");
    CHECK(rstrip(std::string("a\xff ")) == "a\xff");
  }
}
