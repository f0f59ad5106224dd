#include "cli/lm_eval_args.hpp"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "util/error.hpp"

namespace kveval::cli {

namespace {

std::string strip(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

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

/// Python's float() of a stripped string: decimal or exponent forms, inf, nan (any case).
std::optional<double> python_float(const std::string& raw) {
  std::string v = strip(raw), clean;
  if (v.empty()) return std::nullopt;
  for (size_t k = 0; k < v.size(); ++k) {
    if (v[k] == '_') {
      if (k == 0 || k + 1 >= v.size() || !std::isdigit(static_cast<unsigned char>(v[k - 1])) ||
          !std::isdigit(static_cast<unsigned char>(v[k + 1])))
        return std::nullopt;
      continue;
    }
    if (!std::isdigit(static_cast<unsigned char>(v[k])) && std::string("+-.eE").find(v[k]) == std::string::npos) {
      const std::string l = lower(v[0] == '+' || v[0] == '-' ? v.substr(1) : v);
      if (l == "inf" || l == "infinity") return v[0] == '-' ? -HUGE_VAL : HUGE_VAL;
      if (l == "nan") return std::nan("");
      return std::nullopt;
    }
    clean += v[k];
  }
  char* end = nullptr;
  const double d = std::strtod(clean.c_str(), &end);
  if (end != clean.c_str() + clean.size() || clean.find_first_of("0123456789") == std::string::npos) return std::nullopt;
  return d;
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
    throw ArgumentError("--seed: expected 4 integers or None, separated by ',' (or one integer for all four)");
  Seeds s = {items[0], items[1], items[2], items.size() == 4 ? items[3] : std::optional<int64_t>(1234)};
  return s;
}

nlohmann::json parse_gen_kwargs_arg(const std::string& value) {
  nlohmann::json out = nlohmann::json::object();
  const std::string v = strip(value);
  size_t start = 0;
  while (start <= v.size()) {
    size_t comma = v.find(',', start);
    if (comma == std::string::npos) comma = v.size();
    const std::string item = v.substr(start, comma - start);
    start = comma + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0)
      throw ArgumentError(fmt::format("--gen-kwargs: '{}': expected key=value", item));
    const std::string key = item.substr(0, eq), val = item.substr(eq + 1);
    const std::string l = lower(val);
    if (l == "true" || l == "false") out[key] = l == "true";
    else if (int64_t n = 0; !val.empty() && val.find_first_not_of("0123456789") == std::string::npos &&
                            std::from_chars(val.data(), val.data() + val.size(), n).ec == std::errc())
      out[key] = n;
    else if (auto d = python_float(val)) out[key] = *d;
    else out[key] = val;
  }
  return out;
}

}  // namespace kveval::cli
