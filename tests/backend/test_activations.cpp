// The element-wise ops the architecture recipes use (GeGLU with GELU's tanh
// approximation, scale + soft-cap, scale, scaled residual add) against their
// formulas in double.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "backend/backend.hpp"
#include "backend/random_values.hpp"

using namespace kveval::backend;
using kveval::test::randv;

namespace {

/// GELU, tanh approximation (ggml's ggml_gelu, Gemma's gelu_pytorch_tanh):
/// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
double gelu_tanh_ref(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

}  // namespace

TEST_SUITE("backend.activations") {
  TEST_CASE("geglu_fused: gelu_tanh(gate) * up matches the double formula") {
    const int64_t rows = 3, n = 37;
    auto gu = randv(size_t(rows * 2 * n), 81, 6.0f);
    std::vector<float> out(size_t(rows * n));
    geglu_fused(gu.data(), out.data(), rows, n);
    double worst = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < n; ++i) {
        const double want = gelu_tanh_ref(gu[size_t(r * 2 * n + i)]) * gu[size_t(r * 2 * n + n + i)];
        worst = std::max(worst, std::abs(out[size_t(r * n + i)] - want) / std::max(1.0, std::abs(want)));
      }
    CHECK(worst <= 1e-6);
    // Hand-checked points: gelu(0) = 0; gelu(1) = 0.5 (1 + tanh(0.7978845608 * 1.044715)) = 0.8411920;
    // gelu(-3) = -0.0036373 (the tail GELU's tanh form keeps).
    CHECK(gelu_tanh(0.0f) == 0.0f);
    CHECK(gelu_tanh(1.0f) == doctest::Approx(0.8411920).epsilon(1e-6));
    CHECK(gelu_tanh(-3.0f) == doctest::Approx(-0.0036373).epsilon(1e-4));
  }

  TEST_CASE("scale_softcap: c tanh(s x / c), and exactly s x without a cap") {
    auto x = randv(200, 82, 100.0f);
    std::vector<float> y = x, z = x;
    scale_softcap(y.data(), int64_t(y.size()), 0.5f, 30.0f);
    scale_softcap(z.data(), int64_t(z.size()), 0.5f, 0.0f);
    double worst = 0, largest = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double want = 30.0 * std::tanh(0.5 * x[i] / 30.0);
      worst = std::max(worst, std::abs(y[i] - want) / std::max(1.0, std::abs(want)));
      largest = std::max(largest, std::abs(double(y[i])));
      CHECK(z[i] == x[i] * 0.5f);
    }
    CHECK(worst <= 1e-6);
    CHECK(largest < 30.0);   // capped
    CHECK(largest > 25.0);   // inputs reach |0.5 x| near 50: tanh(5/3) = 0.931
    // Hand-checked: 30 tanh(60 / 30) = 30 * 0.9640276 = 28.920828.
    float one = 120.0f;
    scale_softcap(&one, 1, 0.5f, 30.0f);
    CHECK(one == doctest::Approx(28.920828).epsilon(1e-6));
  }

  TEST_CASE("scale and add_scaled") {
    auto x = randv(100, 83, 3.0f);
    auto y = randv(100, 84, 3.0f);
    std::vector<float> a = x, b = y;
    scale(a.data(), 100, 8.0f);  // sqrt(64): Gemma's embedding scale for n_embd 64
    add_scaled(b.data(), x.data(), 100, 0.25f);
    for (size_t i = 0; i < x.size(); ++i) {
      CHECK(a[i] == x[i] * 8.0f);  // a power of two: exact
      CHECK(b[i] == doctest::Approx(double(y[i]) + 0.25 * x[i]).epsilon(1e-6));
    }
  }
}
