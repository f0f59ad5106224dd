#pragma once
// Quoted YAML scalars read exactly as PyYAML's scanner reads them
// (yaml/scanner.py scan_flow_scalar and its helpers): line folding (a single
// line break is a space, n + 1 breaks are n newlines, whitespace around breaks
// dropped, trailing blank lines kept), '' in single quotes, and every escape
// of double quotes: \0 \a \b \t \<TAB> \n \v \f \r \e \<space> \" \/ \\ \N
// (U+0085) \_ (U+00A0) \L (U+2028) \P (U+2029) \xXX \uXXXX \UXXXXXXXX and an
// escaped line break. yaml-cpp differs on trailing blank lines and on \N, \_,
// \L, \P, so kveval re-reads every quoted scalar from the file's bytes.
#include <cstddef>
#include <string>

namespace kveval::eval {

/// The value of the quoted scalar starting at byte `pos` of `src` (a `'` or `"`),
/// as UTF-8. Line breaks in the source are \n, \r\n or \r. Throws SpecError
/// (without file or line; the caller adds them) for an unknown escape, a bad
/// hexadecimal code, a code point that is a surrogate or beyond U+10FFFF, or
/// a missing closing quote.
std::string read_quoted_scalar(const std::string& src, size_t pos);

}  // namespace kveval::eval
