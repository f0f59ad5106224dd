#pragma once
// Checks shared by the Q8_0/Q4_0 and file-block suites: long products against
// the naive reference and rows alone against rows in a batch; a warm engine's
// block products create no oneDNN primitive and allocate no buffer.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <vector>

#include "backend/backend.hpp"
#include "backend/random_values.hpp"

namespace kveval::test {

/// y = x [M, n_in] · Wᵀ for `mat` (a test matrix with weight() and ref(n, x) -> {value, sum of |terms|}) of
/// shape [n_out, n_in] on `eng`: every 7th row and 13th output within 1e-6 relative of the reference, and
/// each row of a batch-invariant product bit-identical to the row alone. `x` holds M rows.
template <class Mat>
void check_long_products(backend::Engine& eng, const Mat& mat, const backend::Weight& w,
                                       const std::vector<float>& x, int64_t M, int64_t n_out, int64_t n_in) {
  using backend::matmul;
  std::vector<float> y(static_cast<size_t>(M * n_out));
  matmul(eng, x.data(), M, w, y.data());
  double worst = 0;
  for (int64_t r = 0; r < M; r += 7)
    for (int64_t n = 0; n < n_out; n += 13) {
      const auto [e, a] = mat.ref(n, x.data() + r * n_in);
      worst = std::max(worst, std::fabs(double(y[static_cast<size_t>(r * n_out + n)]) - e) / (a + 1e-30));
    }
  CHECK(worst < 1e-6);
  std::vector<float> batch(y.size()), alone(y.size());
  matmul(eng, x.data(), M, w, batch.data(), false, true);
  for (int64_t r = 0; r < M; ++r) matmul(eng, x.data() + r * n_in, 1, w, alone.data() + r * n_out, false, true);
  CHECK(std::memcmp(batch.data(), alone.data(), sizeof(float) * batch.size()) == 0);
}

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
