// Summary statistics over benchmark repetitions (see stats.hpp).
#include "bench/stats.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "util/error.hpp"

namespace kveval::bench {

namespace {
void require_samples(std::span<const double> x, const char* what) {
  if (x.empty()) throw ArgumentError(std::string(what) + ": no samples");
}
}  // namespace

double median(std::span<const double> x) {
  require_samples(x, "median");
  std::vector<double> v(x.begin(), x.end());
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double stddev(std::span<const double> x) {
  require_samples(x, "stddev");
  if (x.size() == 1) return 0.0;
  double mean = 0;
  for (double v : x) mean += v;
  mean /= static_cast<double>(x.size());
  double ss = 0;
  for (double v : x) ss += (v - mean) * (v - mean);
  return std::sqrt(ss / static_cast<double>(x.size() - 1));
}

Summary summarize(std::span<const double> x) {
  require_samples(x, "summarize");
  for (double v : x) {
    if (!std::isfinite(v)) throw ArgumentError("summarize: sample is not finite (" + std::to_string(v) + ")");
  }
  Summary s;
  s.n = static_cast<int>(x.size());
  s.median = median(x);
  s.stddev = stddev(x);
  double sum = 0;
  for (double v : x) sum += v;
  s.mean = sum / static_cast<double>(x.size());
  s.min = *std::min_element(x.begin(), x.end());
  s.max = *std::max_element(x.begin(), x.end());
  return s;
}

Summary exact(double v) {
  const double one[1] = {v};
  return summarize(one);
}

}  // namespace kveval::bench
