#pragma once
// How numbers are written in the tables kveval prints (JSON keeps the full double).
#include <string>

namespace kveval {

/// Formats `v` for a table cell: |v| >= 1e6 or 0 < |v| < 1e-4 in scientific
/// notation with 4 significant digits ("2.718e+170", "3.142e-07"), otherwise
/// fixed-point with `decimals` digits after the point ("243.4882" for 4).
/// With decimals <= 4 the result is at most 12 characters (sign included) for
/// every finite v; NaN and infinities give "n/a". Throws nothing.
std::string format_table_number(double v, int decimals);

}  // namespace kveval
