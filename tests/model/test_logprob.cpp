// token_logprob and argmax directly: hand-computed log-softmax values, logits
// far beyond float's exp range (> 88), and ties.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "model/context.hpp"
#include "util/error.hpp"

using namespace kveval;

namespace {

/// log-softmax in long double, written without max subtraction where it is safe
/// (the caller passes logits shifted so that exp cannot overflow): independent of
/// the float code under test.
long double naive_logprob(const std::vector<float>& logits, size_t token, long double shift) {
  long double sum = 0;
  for (float v : logits) sum += std::exp(static_cast<long double>(v) - shift);
  return static_cast<long double>(logits[token]) - shift - std::log(sum);
}

}  // namespace

TEST_SUITE("model.logprob") {
  TEST_CASE("token_logprob: hand-computed log-softmax") {
    // logits 0, ln 2, ln 3: softmax 1/6, 2/6, 3/6
    const std::vector<float> l = {0.0f, std::log(2.0f), std::log(3.0f)};
    CHECK(token_logprob(l, 0) == doctest::Approx(-std::log(6.0)).epsilon(1e-7));
    CHECK(token_logprob(l, 1) == doctest::Approx(std::log(2.0 / 6)).epsilon(1e-7));
    CHECK(token_logprob(l, 2) == doctest::Approx(-std::log(2.0)).epsilon(1e-7));
    // one logit: probability 1
    CHECK(token_logprob(std::vector<float>{-7.5f}, 0) == 0.0);
    // equal logits over 512 tokens: -ln 512 exactly up to rounding
    const std::vector<float> flat(512, 3.25f);
    CHECK(std::abs(token_logprob(flat, 17) + std::log(512.0)) < 1e-6);
  }

  TEST_CASE("token_logprob: logits beyond float's exp range stay finite and exact") {
    // exp(89) overflows float: a log-softmax without max subtraction gives -inf or NaN here.
    const std::vector<float> big = {100.0f, 90.0f, 0.0f};
    // log p(0) = -log(1 + e^-10 + e^-100); log p(1) = -10 + log p(0)
    const double lp0 = -std::log1p(std::exp(-10.0) + std::exp(-100.0));
    CHECK(std::abs(token_logprob(big, 0) - lp0) < 1e-9);
    CHECK(std::abs(token_logprob(big, 1) - (-10.0 + lp0)) < 1e-6);
    CHECK(std::abs(token_logprob(big, 2) - (-100.0 + lp0)) < 1e-5);
    const std::vector<float> huge = {1000.0f, 1000.0f};
    CHECK(std::abs(token_logprob(huge, 1) + std::log(2.0)) < 1e-9);
    const std::vector<float> tiny = {-1000.0f, -1001.0f, -1000.5f};
    for (size_t t = 0; t < tiny.size(); ++t) {
      CAPTURE(t);
      const double lp = token_logprob(tiny, static_cast<int32_t>(t));
      CHECK(std::isfinite(lp));
      CHECK(std::abs(lp - static_cast<double>(naive_logprob(tiny, t, -1000.0L))) < 1e-6);
    }
    // a realistic row: 512 logits near 89, one at 95
    std::vector<float> row(512);
    for (size_t i = 0; i < row.size(); ++i) row[i] = 88.0f + static_cast<float>(i % 7) * 0.25f;
    row[300] = 95.0f;
    for (size_t t : {size_t(0), size_t(300), size_t(511)}) {
      CAPTURE(t);
      const double lp = token_logprob(row, static_cast<int32_t>(t));
      CHECK(std::isfinite(lp));
      CHECK(std::abs(lp - static_cast<double>(naive_logprob(row, t, 95.0L))) < 1e-6);
    }
  }

  TEST_CASE("token_logprob: a token outside the row is an ArgumentError") {
    const std::vector<float> l = {1.0f, 2.0f};
    CHECK_THROWS_AS(token_logprob(l, 2), ArgumentError);
    CHECK_THROWS_AS(token_logprob(l, -1), ArgumentError);
  }

  TEST_CASE("argmax: the largest logit, the first one on ties") {
    CHECK(argmax(std::vector<float>{1.0f, 3.0f, 3.0f, 2.0f}) == 1);
    CHECK(argmax(std::vector<float>{-5.0f, -1.0f, -3.0f}) == 1);
    CHECK(argmax(std::vector<float>{7.0f}) == 0);
    CHECK(argmax(std::vector<float>{2.0f, 2.0f}) == 0);
    const float inf = std::numeric_limits<float>::infinity();
    CHECK(argmax(std::vector<float>{-inf, -1e30f, -inf}) == 1);
    CHECK(argmax(std::vector<float>{0.0f, 95.0f, 94.99999f, 95.0f}) == 1);
  }
}
