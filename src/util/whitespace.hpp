#pragma once
// The one whitespace predicate of kveval, used wherever text is split or
// stripped (word counts, the context/continuation split, exact_match, template
// placeholders). It is Python's: the characters for which `str.isspace()` is
// true, which is also what `re`'s `\s` matches in a str pattern, so
// len(re.split(r"\s+", s)), s.rstrip() and s.strip() in lm-evaluation-harness
// have exact counterparts here:
//   U+0009..U+000D (\t \n \v \f \r), U+001C..U+001F, U+0020, U+0085, U+00A0,
//   U+1680, U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000.
// (Not U+180E, U+200B or U+FEFF, which Python does not count either.)
// Text is UTF-8; a byte that does not start a valid UTF-8 sequence is one
// non-whitespace character, so invalid input never throws and is never split.
// JSON syntax (blank JSONL lines) keeps JSON's own four whitespace bytes.
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kveval::util {

/// True when code point `c` is whitespace in Python's sense (the set above).
bool is_space(char32_t c);

/// Byte length of the whitespace character that starts at byte `i` of `s`
/// (1 to 3 bytes), or 0 when the character there is not whitespace or `i` is
/// at or past the end.
size_t space_length_at(std::string_view s, size_t i);

/// `s` without leading whitespace (Python `s.lstrip()`).
std::string_view lstrip(std::string_view s);
/// `s` without trailing whitespace (Python `s.rstrip()`).
std::string_view rstrip(std::string_view s);
/// `s` without leading and trailing whitespace (Python `s.strip()`).
std::string_view strip(std::string_view s);

/// Number of items of Python's `re.split(r"\s+", s)`: maximal whitespace runs
/// + 1 (so "" gives 1 and leading/trailing whitespace each add an empty item).
/// This is how lm-eval counts words (Task.count_words, lm_eval/api/task.py).
int64_t split_count(std::string_view s);

}  // namespace kveval::util
