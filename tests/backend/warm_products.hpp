#pragma once
// A warm engine's block products must create no oneDNN primitive and allocate
// no buffer: the check shared by the Q8_0/Q4_0 and K-quant suites.
#include <doctest/doctest.h>

#include <cstddef>
#include <vector>

#include "backend/backend.hpp"
#include "backend/random_values.hpp"

namespace kveval::test {

/// Warms an engine on `w` ([1024, 256] blocks) with 64-, 1-, 4- and 3-row products (the last
/// batch-invariant), then repeats decode steps and both long forms: primitives_created()
/// and buffer_allocations() must not move.
inline void check_warm_products_allocate_nothing(const backend::Weight& w) {
  using backend::matmul;
  const auto x = randv(static_cast<size_t>(64 * 256), 4);
  std::vector<float> y(static_cast<size_t>(64 * 1024));
  backend::Engine eng(2);
  for (int64_t m : {64, 1, 4}) matmul(eng, x.data(), m, w, y.data(), true);
  matmul(eng, x.data(), 3, w, y.data(), false, true);
  const auto p0 = eng.primitives_created(), a0 = eng.buffer_allocations();
  for (int step = 0; step < 20; ++step) matmul(eng, x.data(), step % 2 ? 1 : 4, w, y.data(), true);
  matmul(eng, x.data(), 64, w, y.data(), true);
  matmul(eng, x.data(), 3, w, y.data(), false, true);
  CHECK(eng.primitives_created() == p0);
  CHECK(eng.buffer_allocations() == a0);
}

}  // namespace kveval::test
