#pragma once
// CPython's random.Random, bit for bit, so that kveval draws the same few-shot
// examples and bootstrap resamples as lm-evaluation-harness for the same seed.
// Sources: CPython Modules/_randommodule.c (MT19937 of Matsumoto & Nishimura,
// init_by_array seeding from the integer's 32-bit words, genrand_res53,
// getrandbits) and Lib/random.py (_randbelow_with_getrandbits, sample,
// choices), as of CPython 3.11.
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kveval {

/// random.Random(seed) for a non-negative integer seed.
class PyRandom {
 public:
  explicit PyRandom(uint64_t seed);
  /// One 32-bit output of MT19937 (genrand_uint32).
  uint32_t genrand_uint32();
  /// random.random(): a double in [0, 1) with 53 random bits.
  double random();
  /// random.getrandbits(k) for 0 <= k <= 64 (words least significant first, as CPython).
  uint64_t getrandbits(int k);
  /// random._randbelow(n) for n >= 1: getrandbits(n.bit_length()) until below n.
  uint64_t randbelow(uint64_t n);
  /// random.sample(range(n), k): k distinct indices in draw order. Throws
  /// ArgumentError when k > n (Python: ValueError).
  std::vector<size_t> sample(size_t n, size_t k);
  /// random.choices(range(n), k=k) without weights: floor(random() * n) each.
  std::vector<size_t> choices(size_t n, size_t k);

 private:
  void init_genrand(uint32_t s);
  std::array<uint32_t, 624> mt_{};
  int mti_ = 625;
};

}  // namespace kveval
