#include "util/number_format.hpp"

#include <cmath>

#include <fmt/format.h>

namespace kveval {

std::string format_table_number(double v, int decimals) {
  if (!std::isfinite(v)) return "n/a";
  const double a = std::fabs(v);
  if (a >= 1e6 || (a > 0 && a < 1e-4)) return fmt::format("{:.3e}", v);
  std::string s = fmt::format("{:.{}f}", v, decimals);
  // 999999.99995 rounds up to "1000000.0000": write it like every value >= 1e6
  if (std::fabs(std::stod(s)) >= 1e6) return fmt::format("{:.3e}", v);
  return s;
}

std::string noun_for(uint64_t n, std::string_view singular, std::string_view plural) {
  if (n == 1) return std::string(singular);
  return plural.empty() ? std::string(singular) + "s" : std::string(plural);
}

std::string count_of(uint64_t n, std::string_view singular, std::string_view plural) {
  return fmt::format("{} {}", n, noun_for(n, singular, plural));
}

}  // namespace kveval
