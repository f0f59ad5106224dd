#include "eval/json_input.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <unordered_set>

#include <fmt/format.h>

#include "util/error.hpp"
#include "util/input_file.hpp"

namespace kveval::eval {

using nlohmann::json;

/// A JSON value shown in a message: compact, at most ~40 bytes.
std::string json_excerpt(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

int edit_distance(std::string_view a, std::string_view b) {
  std::vector<int> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string closest(std::string_view word, const std::vector<std::string>& candidates) {
  std::string best;
  int best_d = std::numeric_limits<int>::max();
  int limit = std::max<int>(2, static_cast<int>(word.size()) / 3);
  if (word.size() > 256) return "";  // no suggestion for a huge word (keeps this O(256 x |candidate|))
  for (const auto& c : candidates) {
    const size_t diff = word.size() > c.size() ? word.size() - c.size() : c.size() - word.size();
    if (diff > static_cast<size_t>(limit)) continue;  // the distance is at least the length difference
    int d = edit_distance(word, c);
    if (d < best_d) best_d = d, best = c;
  }
  return best_d <= limit ? best : "";
}

namespace {

/// Where a piece of JSON text comes from, for messages: a whole file (the
/// spec, a baseline; positions are "file:line:col", JSON paths "file: path")
/// or one line of a JSONL file (positions "file:N:col", paths "file:N: path").
struct Source {
  const std::string& file;
  int jsonl_line = 0;  ///< 0 for a whole file
  std::string origin() const { return jsonl_line ? fmt::format("{}:{}", file, jsonl_line) : file; }
  [[noreturn]] void fail_at(std::string_view text, size_t byte, const std::string& msg) const {
    int line = 1, col = 1;
    for (size_t i = 0; i < byte && i < text.size(); ++i) {
      if (text[i] == '\n') ++line, col = 1;
      else ++col;
    }
    throw SpecError(fmt::format("{}:{}:{}: {}", file, jsonl_line ? jsonl_line : line, col, msg));
  }
  [[noreturn]] void fail_path(const std::string& path, const std::string& msg) const {
    throw SpecError(path.empty() ? fmt::format("{}: {}", origin(), msg) : fmt::format("{}: {}: {}", origin(), path, msg));
  }
};

/// One linear pass over the text, before nlohmann builds anything: refuses
/// nesting deeper than kMaxJsonDepth and numbers beyond the double range
/// (nlohmann would throw out_of_range.406 without a position), each with the
/// line and column. Anything else that is not JSON is left to the parser.
void prescan(std::string_view text, const Source& src) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth)
        src.fail_at(text, i, fmt::format("nested deeper than {} levels (kveval's limit for JSON input)", kMaxJsonDepth));
    } else if (c == ']' || c == '}') {
      if (depth > 0) --depth;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      size_t j = i;
      while (j < text.size() && (std::isdigit(static_cast<unsigned char>(text[j])) || text[j] == '-' ||
                                 text[j] == '+' || text[j] == '.' || text[j] == 'e' || text[j] == 'E'))
        ++j;
      const std::string num(text.substr(i, j - i));
      if (std::isinf(std::strtod(num.c_str(), nullptr)))
        src.fail_at(text, i, fmt::format("number {} is out of range (JSON numbers must fit a 64-bit float, |x| < 1.8e308)",
                                         num.size() > 40 ? num.substr(0, 37) + "..." : num));
      i = j - 1;
    }
  }
}

/// The JSON path of the value being parsed, kept per nesting level so that the
/// work and memory stay linear in the input (no path string per level).
struct PathTracker {
  struct Frame {
    bool object;
    std::string key;                       // object: key of the member being parsed
    size_t index = 0;                      // array: index of the element being parsed
    std::unordered_set<std::string> keys;  // object: keys seen so far
  };
  std::vector<Frame> frames;
  /// Path of the innermost open container, or with `with_child` of the
  /// member/element being parsed in it ("tasks[0].limit").
  std::string path(bool with_child) const {
    std::string p;
    const size_t n = frames.size();
    for (size_t k = 0; k + 1 < n + (with_child ? 1 : 0); ++k) {
      const Frame& f = frames[k];
      if (f.object) p += (p.empty() ? "" : ".") + f.key;
      else p += fmt::format("[{}]", f.index);
    }
    return p;
  }
};

json parse_checked(std::string_view text, const Source& src) {
  prescan(text, src);
  PathTracker pt;
  json::parser_callback_t cb = [&](int, json::parse_event_t ev, json& parsed) -> bool {
    switch (ev) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        pt.frames.push_back({ev == json::parse_event_t::object_start, {}, 0, {}});
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!pt.frames.empty()) pt.frames.pop_back();
        if (!pt.frames.empty() && !pt.frames.back().object) ++pt.frames.back().index;
        break;
      case json::parse_event_t::key: {
        auto& f = pt.frames.back();
        f.key = parsed.get<std::string>();
        if (!f.keys.insert(f.key).second) src.fail_path(pt.path(false), fmt::format("duplicate key '{}'", f.key));
        break;
      }
      case json::parse_event_t::value:
        if (!pt.frames.empty() && !pt.frames.back().object) ++pt.frames.back().index;
        break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), cb);
  } catch (const json::parse_error& e) {
    // e.byte is the 1-based position of the last character read.
    src.fail_at(text, e.byte > 0 ? e.byte - 1 : 0, short_parse_message(e.what()));
  } catch (const json::exception& e) {
    // e.g. out_of_range.406 (number overflow) if the prescan missed it: the path of the value
    src.fail_path(pt.path(true), short_parse_message(e.what()));
  }
}

}  // namespace

std::string short_parse_message(const std::string& what) {
  std::string s = what;
  auto p = s.find("] ");
  if (p != std::string::npos) s = s.substr(p + 2);
  auto c = s.find(": ");
  if (s.rfind("parse error", 0) == 0 && c != std::string::npos) s = s.substr(c + 2);
  return s;
}

json parse_json_text(std::string_view text, const std::string& origin) { return parse_checked(text, Source{origin}); }

std::vector<std::pair<int, json>> read_jsonl(const std::string& path) {
  util::InputFile f(path, util::InputKind::Data);
  std::vector<std::pair<int, json>> out;
  std::string line;
  int n = 0;
  while (f.getline(line)) {
    ++n;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    // blank: JSON's own whitespace (RFC 8259), not the text predicate
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    json j = parse_checked(line, Source{path, n});
    if (!j.is_object())
      throw SpecError(fmt::format("{}:{}: expected a JSON object, got {}", path, n, json_excerpt(j)));
    out.emplace_back(n, std::move(j));
  }
  return out;
}

}  // namespace kveval::eval
