#pragma once
// UTF-8 validation (RFC 3629 / Unicode 15 Table 3-7, "well-formed UTF-8 byte
// sequences"): no overlong forms, no surrogates (U+D800..U+DFFF), nothing above U+10FFFF.
#include <cstddef>
#include <string_view>

namespace kveval {

/// Byte offset of the first byte that does not start a well-formed UTF-8
/// sequence in `s` (a truncated sequence at the end counts at its first byte),
/// or std::string_view::npos when all of `s` is valid UTF-8.
size_t first_invalid_utf8(std::string_view s);

}  // namespace kveval
