// TokenIndex against std::unordered_map on the same texts, and by hand:
// prefixes, the empty text, texts that differ in one byte, duplicates.
#include <doctest/doctest.h>

#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/token_index.hpp"

using kveval::TokenIndex;

TEST_SUITE("model.token_index") {
  TEST_CASE("hand-made vocabulary: prefixes, one-byte differences, the empty text, absent texts") {
    const std::vector<std::string> texts = {"a", "ab", "abc", "", "b", "ba", std::string("a\0b", 3), "\xC4\xA0the"};
    const TokenIndex index(texts, false);
    for (size_t i = 0; i < texts.size(); ++i) CHECK(index.find(texts[i]) == static_cast<int32_t>(i));
    CHECK(index.find("abcd") == -1);
    CHECK(index.find("c") == -1);
    CHECK(index.find(std::string("a\0", 2)) == -1);
    CHECK(index.find("\xC4\xA0") == -1);
    CHECK(index.first_duplicate() == std::pair<int32_t, int32_t>{-1, -1});
    CHECK(TokenIndex().find("a") == -1);
  }

  TEST_CASE("a text given twice: the first id, or the last with last_wins; the first repeat is named") {
    const std::vector<std::string> texts = {"x", "y", "x", "z", "y", "x"};
    const TokenIndex first(texts, false), last(texts, true);
    CHECK(first.find("x") == 0);
    CHECK(first.find("y") == 1);
    CHECK(last.find("x") == 5);
    CHECK(last.find("y") == 4);
    CHECK(last.find("z") == 3);
    CHECK(first.first_duplicate() == std::pair<int32_t, int32_t>{0, 2});
    CHECK(last.first_duplicate() == std::pair<int32_t, int32_t>{0, 2});
  }

  TEST_CASE("100,000 random texts: the same ids as std::unordered_map, absent texts absent") {
    std::mt19937 rng(7);
    std::uniform_int_distribution<int> len(1, 12), byte(0, 255);
    std::vector<std::string> texts;
    std::unordered_map<std::string, int32_t> ref;
    while (texts.size() < 100000) {
      std::string t;
      for (int k = len(rng); k > 0; --k) t += static_cast<char>(byte(rng));
      if (ref.emplace(t, static_cast<int32_t>(texts.size())).second) texts.push_back(t);
    }
    const TokenIndex index(texts, false);
    for (const auto& [t, id] : ref) REQUIRE(index.find(t) == id);
    int absent = 0;
    for (int i = 0; i < 20000; ++i) {
      std::string t;
      for (int k = len(rng); k > 0; --k) t += static_cast<char>(byte(rng));
      if (!ref.count(t)) {
        ++absent;
        CHECK(index.find(t) == -1);
      }
    }
    CHECK(absent > 15000);
  }
}
