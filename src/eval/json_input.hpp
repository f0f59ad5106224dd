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

/// Parses JSON text; a syntax error becomes SpecError "origin:line:column: message",
/// a key repeated in one object SpecError "origin: path: duplicate key 'k'".
nlohmann::json parse_json_text(std::string_view text, const std::string& origin);

/// Reads a JSONL file: one JSON object per non-blank line. Throws SpecError
/// "file:line: ..." for a syntax error or a line that is not an object, and
/// "file: cannot open" when it cannot be read. Returns (line number, object) pairs.
std::vector<std::pair<int, nlohmann::json>> read_jsonl(const std::string& path);

/// A JSON value shown in a message: compact, at most ~40 bytes.
std::string json_excerpt(const nlohmann::json& v);

/// Levenshtein distance (bytes), for "did you mean" suggestions.
int edit_distance(std::string_view a, std::string_view b);
/// The candidate closest to `word` when it is close enough (distance <= max(2, |word|/3)), else "".
std::string closest(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace kveval::eval
