#pragma once
// Reading JSON input (the spec, JSONL data files, a baseline results file):
// syntax errors, duplicate keys and other malformed input become one-line
// kveval::SpecError messages naming the file and the line/column or JSON path.
// Also the "did you mean" helpers used by every validation message.
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace kveval::eval {

/// Deepest nesting of arrays/objects accepted in JSON input (spec, JSONL line,
/// baseline). Deeper input is refused before anything is built, so hostile
/// input costs one linear scan (and never overflows the stack when dumped).
inline constexpr int kMaxJsonDepth = 512;

/// Parses JSON text. Every problem is one SpecError line:
/// - a syntax error: "origin:line:column: message";
/// - nesting deeper than kMaxJsonDepth: "origin:line:column: nested deeper than 512 levels ...";
/// - a number beyond the double range (1e400): "origin:line:column: number 1e400 is out of range ...";
/// - a key repeated in one object: "origin: tasks[0]: duplicate key 'name'".
/// Linear in the text (the duplicate-key check keeps one key set per open object).
nlohmann::json parse_json_text(std::string_view text, const std::string& origin);

/// Reads a JSONL file: one JSON object per non-blank line (blank: only spaces
/// and tabs). Each line is checked as parse_json_text does, with messages
/// "file:N:column: ..." or "file:N: path: duplicate key 'k'"; a line that is
/// not an object is "file:N: expected a JSON object, got ...", and an
/// file that is not a regular file, unreadable or over its size limit one
/// line from util::InputFile (InputKind::Data). Returns (line number, object) pairs.
std::vector<std::pair<int, nlohmann::json>> read_jsonl(const std::string& path);

/// nlohmann's parse_error text without its "[json.exception.parse_error.101] parse error at
/// line 1, column 2: " prefix ("syntax error while parsing object key - invalid literal; ...").
std::string short_parse_message(const std::string& what);

/// A JSON value shown in a message: compact, at most ~40 bytes.
std::string json_excerpt(const nlohmann::json& v);

/// Levenshtein distance (bytes), for "did you mean" suggestions.
int edit_distance(std::string_view a, std::string_view b);
/// The candidate closest to `word` when it is close enough (distance <= max(2, |word|/3)), else "".
std::string closest(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace kveval::eval
