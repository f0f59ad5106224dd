#pragma once
// Python `str` semantics on UTF-8 text, for the Jinja2 subset (src/eval/template/)
// and lm-eval's filters: code points, Unicode whitespace (str.isspace), case
// mapping (str.lower/upper/capitalize, full Unicode mappings via ICU, as
// CPython's), str.isprintable and repr() escaping.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace kveval::eval::tmpl {

/// Code points of valid UTF-8 `s`. Invalid UTF-8 throws ArgumentError ("invalid UTF-8 at byte N").
std::u32string utf8_decode(std::string_view s);
/// UTF-8 of code points `s` (surrogates throw ArgumentError).
std::string utf8_encode(std::u32string_view s);
/// Appends the UTF-8 of one code point.
void utf8_append(std::string& out, char32_t c);
/// Number of code points of valid UTF-8 `s` (Python len()).
size_t utf8_length(std::string_view s);

/// A malformed backslash escape in a string literal; the message names it.
struct EscapeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
/// Decodes the backslash escape at `s[i]` (a '\\' followed by at least one
/// byte) as a Python string literal does (Python Language Reference, "String
/// and Bytes literals"; also the "unicode-escape" codec Jinja's lexer uses):
/// \<newline> is dropped; \\ \' \" \a \b \f \n \r \t \v; \ooo (one to three
/// octal digits); \xhh, \uxxxx, \Uxxxxxxxx (exactly 2, 4, 8 hex digits); any
/// other escape is kept with its backslash. Appends the UTF-8 to `out` and
/// moves `i` past the escape. Throws EscapeError, with `i` where decoding
/// stopped, for a truncated \x/\u/\U, a code point UTF-8 cannot hold (a surrogate
/// or above U+10FFFF) and \N{name} (not supported).
void decode_python_escape(std::string_view s, size_t& i, std::string& out);

/// Python's str.isspace() for one code point: \t \n \v \f \r, U+001C..U+001F,
/// space, U+0085, U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029, U+202F,
/// U+205F, U+3000 (the characters of bidirectional class WS, B or S, or
/// category Zs; CPython's _PyUnicode_IsWhitespace). It is util::is_space,
/// kveval's one whitespace predicate (util/whitespace.hpp).
bool py_isspace(char32_t c);
/// Python str.isprintable() for one code point: false for categories Cc, Cf,
/// Cs, Co, Cn, Zl, Zp and Zs other than U+0020.
bool py_isprintable(char32_t c);

/// str.strip()/lstrip()/rstrip(): `chars` empty-optional means whitespace (py_isspace).
std::string py_strip(std::string_view s, bool left, bool right, const std::u32string* chars = nullptr);
/// str.lower(), str.upper() (full case mappings, final sigma), str.capitalize()
/// (first code point title-cased, the rest lower-cased).
std::string py_lower(std::string_view s);
std::string py_upper(std::string_view s);
std::string py_capitalize(std::string_view s);
/// str.split(): `sep` null splits on runs of whitespace and drops empty
/// strings; else splits on every occurrence of *sep (non-empty). At most
/// `maxsplit` splits when maxsplit >= 0.
std::vector<std::string> py_split(std::string_view s, const std::string* sep, int64_t maxsplit = -1);
/// str.replace(old, new, count): count < 0 replaces all; an empty `old`
/// inserts `repl` before every code point and at the end (Python).
std::string py_replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count = -1);
/// repr() of a str: single quotes unless the text has ' and no ", escapes
/// \\ \n \r \t, the quote, and non-printable code points as \xhh, \uhhhh, \Uhhhhhhhh.
std::string py_repr_str(std::string_view s);
/// repr() of a float: shortest round-trip digits; fixed notation when the
/// decimal exponent is in [-4, 16), else d.ddde+XX; "inf", "-inf", "nan"; always a
/// '.' or exponent ("1.0", "1e+16", "1e-05"): CPython float_repr_style 'short'.
std::string py_float_repr(double x);

}  // namespace kveval::eval::tmpl
