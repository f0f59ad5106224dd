// Statistics over repetitions: hand-computed cases.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "bench/stats.hpp"
#include "util/error.hpp"

using namespace kveval;
using namespace kveval::bench;

TEST_SUITE("bench.stats") {
  TEST_CASE("median of odd and even counts") {
    const std::vector<double> odd = {3, 1, 2};
    const std::vector<double> even = {4, 1, 3, 2};
    CHECK(median(odd) == 2.0);
    CHECK(median(even) == 2.5);
    const std::vector<double> one = {7.5};
    CHECK(median(one) == 7.5);
  }

  TEST_CASE("sample standard deviation uses n-1") {
    // {2,4,4,4,5,5,7,9}: mean 5, sum of squares 32, sample variance 32/7.
    const std::vector<double> x = {2, 4, 4, 4, 5, 5, 7, 9};
    CHECK(stddev(x) == doctest::Approx(std::sqrt(32.0 / 7.0)));
    const std::vector<double> one = {3.0};
    CHECK(stddev(one) == 0.0);
  }

  TEST_CASE("summarize gives n, median, mean, stddev, min, max") {
    const std::vector<double> x = {10, 30, 20, 40};
    const Summary s = summarize(x);
    CHECK(s.n == 4);
    CHECK(s.median == 25.0);
    CHECK(s.mean == 25.0);
    CHECK(s.stddev == doctest::Approx(std::sqrt(500.0 / 3.0)));
    CHECK(s.min == 10.0);
    CHECK(s.max == 40.0);
    const Summary e = exact(3.25);
    CHECK(e.n == 1);
    CHECK(e.median == 3.25);
    CHECK(e.stddev == 0.0);
  }

  TEST_CASE("empty or non-finite samples are refused") {
    const std::vector<double> none;
    CHECK_THROWS_AS(median(none), ArgumentError);
    CHECK_THROWS_AS(stddev(none), ArgumentError);
    CHECK_THROWS_AS(summarize(none), ArgumentError);
    const std::vector<double> nan = {1.0, std::numeric_limits<double>::quiet_NaN()};
    CHECK_THROWS_AS(summarize(nan), ArgumentError);
  }
}
