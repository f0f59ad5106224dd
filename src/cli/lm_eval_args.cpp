#include "cli/lm_eval_args.hpp"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "util/error.hpp"
#include "util/whitespace.hpp"

namespace kveval::cli {

namespace {

/// Python's str.strip() (util/whitespace.hpp).
std::string strip(const std::string& s) { return std::string(util::strip(s)); }

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

/// One --seed value: an integer (Python int(): optional sign, digits, '_' between digits) or None.
std::optional<int64_t> seed_value(const std::string& raw) {
  const std::string v = strip(raw);
  if (lower(v) == "none") return std::nullopt;
  std::string digits;
  size_t i = v.size() > 0 && (v[0] == '+' || v[0] == '-') ? 1 : 0;
  bool ok = i < v.size();
  for (size_t k = i; k < v.size() && ok; ++k) {
    if (std::isdigit(static_cast<unsigned char>(v[k]))) digits += v[k];
    else ok = v[k] == '_' && k > i && k + 1 < v.size() && std::isdigit(static_cast<unsigned char>(v[k - 1])) &&
              std::isdigit(static_cast<unsigned char>(v[k + 1]));
  }
  if (!ok) throw ArgumentError(fmt::format("--seed: {} is not an integer or None", lower(v)));
  if (v[0] == '-' && digits.find_first_not_of('0') != std::string::npos)
    throw ArgumentError(fmt::format("--seed: {}: a seed must be >= 0", v));
  int64_t out = 0;
  auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), out);
  if (ec != std::errc() || p != digits.data() + digits.size())
    throw ArgumentError(fmt::format("--seed: {}: too large (at most {})", v, INT64_MAX));
  return out;
}

}  // namespace

Seeds parse_seed_arg(const std::string& value) {
  std::vector<std::optional<int64_t>> items;
  size_t start = 0;
  while (true) {
    const size_t comma = value.find(',', start);
    items.push_back(seed_value(value.substr(start, comma == std::string::npos ? std::string::npos : comma - start)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (items.size() == 1) return {items[0], items[0], items[0], items[0]};
  if (items.size() < 3 || items.size() > 4)
    throw ArgumentError(fmt::format("--seed: expected three or four integers or None, separated by ',' (a missing fourth "
                                    "is 1234), or one integer for all four; got {} values",
                                    items.size()));
  Seeds s = {items[0], items[1], items[2], items.size() == 4 ? items[3] : std::optional<int64_t>(1234)};
  return s;
}

}  // namespace kveval::cli
