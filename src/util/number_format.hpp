#pragma once
// How numbers are written in the tables kveval prints (JSON keeps the full
// double), and counts in the lines it prints ("1 token", "2 tokens").
#include <cstdint>
#include <string>
#include <string_view>

namespace kveval {

/// Formats `v` for a table cell: |v| >= 1e6 or 0 < |v| < 1e-4 in scientific
/// notation with 4 significant digits ("2.718e+170", "3.142e-07"), otherwise
/// fixed-point with `decimals` digits after the point ("243.4882" for 4).
/// With decimals <= 4 the result is at most 12 characters (sign included) for
/// every finite v; NaN and infinities give "n/a". Throws nothing.
std::string format_table_number(double v, int decimals);

/// The noun for a count of `n`: `singular` when n is 1, else `plural`
/// (`singular` + "s" when `plural` is empty): "token", "tokens", "forward passes".
std::string noun_for(uint64_t n, std::string_view singular, std::string_view plural = {});

/// `n` and its noun: "1 token", "0 tokens", "2 forward passes" (noun_for).
std::string count_of(uint64_t n, std::string_view singular, std::string_view plural = {});

}  // namespace kveval
