#include "util/py_random.hpp"

#include <bit>
#include <cmath>
#include <unordered_set>

#include <fmt/format.h>

#include "util/error.hpp"

namespace kveval {

namespace {
constexpr int N = 624, M = 397;
constexpr uint32_t kMatrixA = 0x9908b0dfU, kUpper = 0x80000000U, kLower = 0x7fffffffU;
}  // namespace

void PyRandom::init_genrand(uint32_t s) {
  mt_[0] = s;
  for (mti_ = 1; mti_ < N; ++mti_)
    mt_[static_cast<size_t>(mti_)] =
        1812433253U * (mt_[static_cast<size_t>(mti_ - 1)] ^ (mt_[static_cast<size_t>(mti_ - 1)] >> 30)) +
        static_cast<uint32_t>(mti_);
}

PyRandom::PyRandom(uint64_t seed) {
  // the key: the seed's 32-bit words, least significant first, at least one (random_seed in _randommodule.c)
  std::vector<uint32_t> key;
  for (uint64_t v = seed; v != 0; v >>= 32) key.push_back(static_cast<uint32_t>(v & 0xffffffffU));
  if (key.empty()) key.push_back(0);
  // init_by_array
  init_genrand(19650218U);
  size_t i = 1, j = 0;
  const size_t len = key.size();
  for (size_t k = std::max<size_t>(N, len); k > 0; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1664525U)) + key[j] + static_cast<uint32_t>(j);
    ++i, ++j;
    if (i >= N) mt_[0] = mt_[N - 1], i = 1;
    if (j >= len) j = 0;
  }
  for (size_t k = N - 1; k > 0; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1566083941U)) - static_cast<uint32_t>(i);
    ++i;
    if (i >= N) mt_[0] = mt_[N - 1], i = 1;
  }
  mt_[0] = 0x80000000U;
}

uint32_t PyRandom::genrand_uint32() {
  static constexpr uint32_t mag01[2] = {0x0U, kMatrixA};
  uint32_t y;
  if (mti_ >= N) {
    int kk = 0;
    for (; kk < N - M; ++kk) {
      y = (mt_[static_cast<size_t>(kk)] & kUpper) | (mt_[static_cast<size_t>(kk + 1)] & kLower);
      mt_[static_cast<size_t>(kk)] = mt_[static_cast<size_t>(kk + M)] ^ (y >> 1) ^ mag01[y & 0x1U];
    }
    for (; kk < N - 1; ++kk) {
      y = (mt_[static_cast<size_t>(kk)] & kUpper) | (mt_[static_cast<size_t>(kk + 1)] & kLower);
      mt_[static_cast<size_t>(kk)] = mt_[static_cast<size_t>(kk + (M - N))] ^ (y >> 1) ^ mag01[y & 0x1U];
    }
    y = (mt_[N - 1] & kUpper) | (mt_[0] & kLower);
    mt_[N - 1] = mt_[M - 1] ^ (y >> 1) ^ mag01[y & 0x1U];
    mti_ = 0;
  }
  y = mt_[static_cast<size_t>(mti_++)];
  y ^= (y >> 11);
  y ^= (y << 7) & 0x9d2c5680U;
  y ^= (y << 15) & 0xefc60000U;
  y ^= (y >> 18);
  return y;
}

double PyRandom::random() {
  uint32_t a = genrand_uint32() >> 5, b = genrand_uint32() >> 6;
  return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
}

uint64_t PyRandom::getrandbits(int k) {
  if (k < 0 || k > 64) throw ArgumentError(fmt::format("getrandbits: k = {} outside [0, 64]", k));
  if (k == 0) return 0;
  if (k <= 32) return genrand_uint32() >> (32 - k);
  uint64_t lo = genrand_uint32();
  uint64_t hi = genrand_uint32() >> (64 - k);
  return lo | (hi << 32);
}

uint64_t PyRandom::randbelow(uint64_t n) {
  if (n == 0) throw ArgumentError("randbelow: n must be >= 1");
  const int k = std::bit_width(n);
  uint64_t r = getrandbits(k);
  while (r >= n) r = getrandbits(k);
  return r;
}

std::vector<size_t> PyRandom::sample(size_t n, size_t k) {
  if (k > n) throw ArgumentError(fmt::format("sample: {} items requested from a population of {}", k, n));
  std::vector<size_t> result(k);
  size_t setsize = 21;  // Lib/random.py: size of a small set minus size of an empty list
  if (k > 5) setsize += static_cast<size_t>(std::pow(4.0, std::ceil(std::log(static_cast<double>(k) * 3) / std::log(4.0))));
  if (n <= setsize) {
    std::vector<size_t> pool(n);
    for (size_t i = 0; i < n; ++i) pool[i] = i;
    for (size_t i = 0; i < k; ++i) {
      size_t j = static_cast<size_t>(randbelow(n - i));
      result[i] = pool[j];
      pool[j] = pool[n - i - 1];
    }
  } else {
    std::unordered_set<size_t> selected;
    for (size_t i = 0; i < k; ++i) {
      size_t j = static_cast<size_t>(randbelow(n));
      while (selected.count(j)) j = static_cast<size_t>(randbelow(n));
      selected.insert(j);
      result[i] = j;
    }
  }
  return result;
}

std::vector<size_t> PyRandom::choices(size_t n, size_t k) {
  std::vector<size_t> out(k);
  const double dn = static_cast<double>(n);
  for (size_t i = 0; i < k; ++i) out[i] = static_cast<size_t>(std::floor(random() * dn));
  return out;
}

}  // namespace kveval
