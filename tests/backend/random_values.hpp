#pragma once
// Random inputs shared by the backend suites.
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace kveval::test {

/// n floats uniform in [-scale, scale] from mt19937(seed): the same values for the same seed.
inline std::vector<float> randv(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = u(g);
  return v;
}

}  // namespace kveval::test
