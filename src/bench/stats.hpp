#pragma once
// Summary statistics over benchmark repetitions (llama-bench style: the
// figure reported is the median, the spread is the sample standard deviation).
#include <span>

namespace kveval::bench {

/// Median, mean, sample standard deviation (n-1 denominator; 0 when n == 1),
/// min and max of a set of repetitions, in the unit of the samples.
struct Summary {
  int n = 0;
  double median = 0, mean = 0, stddev = 0, min = 0, max = 0;
};

/// Median of `x` (mean of the two middle values for even n). Throws ArgumentError if empty.
double median(std::span<const double> x);
/// Sample standard deviation sqrt(sum (x - mean)^2 / (n - 1)); 0 for n == 1. Throws ArgumentError if empty.
double stddev(std::span<const double> x);
/// All of the above. Throws ArgumentError if empty or a sample is NaN/inf.
Summary summarize(std::span<const double> x);
/// A Summary of one exact value (n = 1, stddev 0), for derived figures.
Summary exact(double v);

}  // namespace kveval::bench
