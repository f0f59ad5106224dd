// The JSON of a spec file, and the one line that names what a file given as
// the spec holds when it is not a spec: nothing (an empty file), JSON lines (a
// .jsonl data file), a JSON array or scalar, YAML text, or a document-like object.
#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "eval/json_input.hpp"
#include "eval/spec.hpp"
#include "eval/spec_check.hpp"
#include "util/error.hpp"

namespace kveval::eval {

namespace {

/// What a spec looks like, the end of every "not a kveval spec" line.
constexpr const char* kSpecShape = "a spec is one JSON object {\"model\": ..., \"tasks\": [...]} (see docs/spec.md)";

/// The non-blank lines of `text` that are not YAML comments or document markers, at most `n`.
std::vector<std::string_view> leading_lines(std::string_view text, size_t n) {
  std::vector<std::string_view> out;
  size_t pos = 0;
  while (pos < text.size() && out.size() < n) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string_view::npos) continue;
    line = line.substr(first);
    if (line.starts_with('#') || line.starts_with("---")) continue;
    out.push_back(line);
  }
  return out;
}

/// True when `line` reads as a YAML mapping key ("task: x", "dataset_path:") or a list item ("- x").
bool yaml_like(std::string_view line) {
  if (line.starts_with("- ")) return true;
  size_t k = 0;
  while (k < line.size() && (std::isalnum(static_cast<unsigned char>(line[k])) || line[k] == '_' || line[k] == '-' ||
                             line[k] == '.'))
    ++k;
  return k > 0 && k < line.size() && line[k] == ':' && (k + 1 == line.size() || line[k + 1] == ' ' || line[k + 1] == '\t');
}

/// True when `line` alone is a JSON object or array (the first line of a JSONL file).
bool json_value_line(std::string_view line, const std::string& path) {
  try {
    const json v = parse_json_text(line, path);
    return v.is_object() || v.is_array();
  } catch (const SpecError&) {
    return false;
  }
}

/// "not a kveval spec" for parsed JSON that cannot be a spec; "" when it may be one.
std::string not_a_spec_value(const json& j) {
  if (!j.is_object()) return fmt::format("it holds a JSON {}, not an object (a data file?)", j.type_name());
  if (j.empty()) return {};
  const std::vector<std::string>& keys = spec_top_keys();
  std::vector<std::string> seen;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (std::find(keys.begin(), keys.end(), it.key()) != keys.end() || !closest(it.key(), keys).empty()) return {};
    if (seen.size() < 3) seen.push_back("'" + it.key() + "'");
  }
  return fmt::format("it holds a JSON object with none of a spec's keys ({}{}: a document of a data file?)",
                     fmt::join(seen, ", "), j.size() > seen.size() ? ", ..." : "");
}

}  // namespace

nlohmann::json parse_spec_text(std::string_view text, const std::string& path) {
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos)
    throw SpecError(fmt::format("{}: not a kveval spec: the file is empty{}; {}", path,
                                text.empty() ? "" : " (only whitespace)", kSpecShape));
  json j;
  try {
    j = parse_json_text(text, path);
  } catch (const SpecError&) {
    const std::vector<std::string_view> lines = leading_lines(text, 2);
    if (lines.size() == 2 && json_value_line(lines[0], path))
      throw SpecError(fmt::format("{}: not a kveval spec: it holds JSON lines, one value per line (a .jsonl data "
                                  "file?); {}",
                                  path, kSpecShape));
    if (!lines.empty() && yaml_like(lines[0]))
      throw SpecError(fmt::format("{}: not a kveval spec: it looks like YAML (an lm-eval task YAML is read as the spec "
                                  "when its name ends in .yaml or .yml); {}",
                                  path, kSpecShape));
    throw;  // a spec with a syntax error: the parser's line and column
  }
  if (const std::string what = not_a_spec_value(j); !what.empty())
    throw SpecError(fmt::format("{}: not a kveval spec: {}; {}", path, what, kSpecShape));
  return j;
}

}  // namespace kveval::eval
