// detail::simd_exp (the vectorisable exp of SwiGLU and the attention softmax)
// against exp in double precision.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "backend/simd_exp.hpp"

using kveval::backend::detail::simd_exp;

TEST_SUITE("backend.simd_exp") {
  TEST_CASE("simd_exp is within 2 ulp of exp over the normal range") {
    double worst = 0;
    for (double x = -87.3; x <= 88.3; x += 0.000731) {
      const float xf = static_cast<float>(x);
      const double ref = std::exp(static_cast<double>(xf));
      const double ulp = std::ldexp(1.0, std::ilogb(ref) - 23);  // float ulp at ref
      worst = std::max(worst, std::abs(static_cast<double>(simd_exp(xf)) - ref) / ulp);
    }
    CHECK(worst <= 2.0);
    CHECK(simd_exp(0.0f) == 1.0f);
    CHECK(simd_exp(1.0f) == doctest::Approx(2.718281828).epsilon(1e-7));
  }

  TEST_CASE("simd_exp limits: overflow to inf, underflow to 0, NaN stays NaN") {
    CHECK(simd_exp(89.0f) == std::numeric_limits<float>::infinity());
    CHECK(simd_exp(std::numeric_limits<float>::infinity()) == std::numeric_limits<float>::infinity());
    CHECK(simd_exp(-88.0f) == 0.0f);
    CHECK(simd_exp(-std::numeric_limits<float>::infinity()) == 0.0f);
    CHECK(std::isnan(simd_exp(std::numeric_limits<float>::quiet_NaN())));
    // the softmax and SwiGLU extremes: exp(-large) * finite is 0, x / (1 + inf) is -0
    const float g = -100.0f;
    CHECK(g / (1.0f + simd_exp(-g)) == 0.0f);
  }
}
