// PyRandom against CPython 3.11's random module: every expected value below was
// printed by /usr/bin/python3 (Debian 12), e.g.
//   r = random.Random(1234); [r.random() for _ in range(3)]
#include <doctest/doctest.h>

#include <vector>

#include "util/error.hpp"
#include "util/py_random.hpp"

using kveval::PyRandom;

TEST_SUITE("util.py_random") {
  TEST_CASE("random() equals CPython's for seeds 0, 1234, 42") {
    struct Case {
      uint64_t seed;
      double v[3];
    };
    for (const Case& c : {Case{0, {0.8444218515250481, 0.7579544029403025, 0.420571580830845}},
                          Case{1234, {0.9664535356921388, 0.4407325991753527, 0.007491470058587191}},
                          Case{42, {0.6394267984578837, 0.025010755222666936, 0.27502931836911926}}}) {
      CAPTURE(c.seed);
      PyRandom r(c.seed);
      for (double v : c.v) CHECK(r.random() == v);  // bit-exact
    }
  }

  TEST_CASE("getrandbits(1, 32, 40, 64) equals CPython's") {
    PyRandom a(0), b(1234), c(42);
    CHECK(std::vector<uint64_t>{a.getrandbits(1), a.getrandbits(32), a.getrandbits(40), a.getrandbits(64)} ==
          std::vector<uint64_t>{1, 1654615998, 978212965548ULL, 746805015404516437ULL});
    CHECK(std::vector<uint64_t>{b.getrandbits(1), b.getrandbits(32), b.getrandbits(40), b.getrandbits(64)} ==
          std::vector<uint64_t>{1, 3342196574ULL, 126446983711ULL, 1672079305790387732ULL});
    CHECK(std::vector<uint64_t>{c.getrandbits(1), c.getrandbits(32), c.getrandbits(40), c.getrandbits(64)} ==
          std::vector<uint64_t>{1, 478163327, 811856239313ULL, 4517457392071889495ULL});
    CHECK_THROWS_AS(a.getrandbits(65), kveval::ArgumentError);
  }

  TEST_CASE("_randbelow(1, 2, 3, 10, 1000, 2**33+5) equals CPython's") {
    const std::vector<uint64_t> ns = {1, 2, 3, 10, 1000, (1ULL << 33) + 5};
    auto draw = [&](uint64_t seed) {
      PyRandom r(seed);
      std::vector<uint64_t> out;
      for (uint64_t n : ns) out.push_back(r.randbelow(n));
      return out;
    };
    CHECK(draw(0) == std::vector<uint64_t>{0, 1, 0, 4, 988, 6490875490ULL});
    CHECK(draw(1234) == std::vector<uint64_t>{0, 0, 0, 1, 932, 2976787804ULL});
    CHECK(draw(42) == std::vector<uint64_t>{0, 0, 2, 4, 250, 958682846ULL});
  }

  TEST_CASE("sample(range(10), 3), sample(range(100), 8) (the set path), sample(range(5), 5) equal CPython's") {
    auto draw = [](uint64_t seed) {
      PyRandom r(seed);
      std::vector<std::vector<size_t>> out;
      out.push_back(r.sample(10, 3));
      out.push_back(r.sample(100, 8));
      out.push_back(r.sample(5, 5));
      return out;
    };
    using V = std::vector<std::vector<size_t>>;
    CHECK(draw(0) == V{{6, 9, 0}, {33, 65, 62, 51, 38, 61, 45, 74}, {1, 4, 3, 0, 2}});
    CHECK(draw(1234) == V{{7, 1, 0}, {11, 74, 4, 85, 88, 10, 12, 98}, {2, 1, 0, 4, 3}});
    CHECK(draw(42) == V{{1, 0, 4}, {31, 28, 17, 94, 13, 86, 69, 11}, {4, 3, 0, 2, 1}});
    PyRandom r(0);
    CHECK_THROWS_AS(r.sample(3, 4), kveval::ArgumentError);
    CHECK(r.sample(0, 0).empty());
  }

  TEST_CASE("choices(range(7), k=10) equals CPython's (the bootstrap's resampling)") {
    CHECK(PyRandom(0).choices(7, 10) == std::vector<size_t>{5, 5, 2, 1, 3, 2, 5, 2, 3, 4});
    CHECK(PyRandom(1234).choices(7, 10) == std::vector<size_t>{6, 3, 0, 6, 6, 4, 4, 0, 5, 1});
    CHECK(PyRandom(42).choices(7, 10) == std::vector<size_t>{4, 0, 1, 1, 5, 4, 6, 0, 2, 0});
  }
}
