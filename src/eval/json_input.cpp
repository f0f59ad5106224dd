#include "eval/json_input.hpp"

#include <algorithm>
#include <fstream>
#include <limits>
#include <set>

#include <fmt/format.h>

#include "util/error.hpp"

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
  for (const auto& c : candidates) {
    int d = edit_distance(word, c);
    if (d < best_d) best_d = d, best = c;
  }
  int limit = std::max<int>(2, static_cast<int>(word.size()) / 3);
  return best_d <= limit ? best : "";
}

namespace {

std::pair<int, int> line_col(std::string_view text, size_t byte) {
  int line = 1, col = 1;
  for (size_t i = 0; i < byte && i < text.size(); ++i) {
    if (text[i] == '\n') ++line, col = 1;
    else ++col;
  }
  return {line, col};
}

/// nlohmann's message without its "[json.exception.parse_error.101] parse error at line 1, column 2: " prefix.
std::string short_parse_message(const std::string& what) {
  std::string s = what;
  auto p = s.find("] ");
  if (p != std::string::npos) s = s.substr(p + 2);
  auto c = s.find(": ");
  if (s.rfind("parse error", 0) == 0 && c != std::string::npos) s = s.substr(c + 2);
  return s;
}

}  // namespace

json parse_json_text(std::string_view text, const std::string& origin) {
  // nlohmann keeps the last of duplicate keys silently; the callback sees every
  // key and refuses a repeat, naming the JSON path of the object.
  struct Frame {
    bool object;
    std::string path;
    std::set<std::string> keys;
    std::string key;    // object: the key of the value being parsed
    size_t next = 0;    // array: index of the next element
  };
  std::vector<Frame> stack;
  auto child_path = [&stack]() -> std::string {
    if (stack.empty()) return "";
    Frame& f = stack.back();
    if (!f.object) return fmt::format("{}[{}]", f.path, f.next++);
    return f.path.empty() ? f.key : f.path + "." + f.key;
  };
  json::parser_callback_t cb = [&](int, json::parse_event_t ev, json& parsed) -> bool {
    switch (ev) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start: {
        std::string p = child_path();
        stack.push_back({ev == json::parse_event_t::object_start, p, {}, {}, 0});
        break;
      }
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!stack.empty()) stack.pop_back();
        break;
      case json::parse_event_t::key: {
        Frame& f = stack.back();
        f.key = parsed.get<std::string>();
        if (!f.keys.insert(f.key).second)
          throw SpecError(f.path.empty() ? fmt::format("{}: duplicate key '{}'", origin, f.key)
                                         : fmt::format("{}: {}: duplicate key '{}'", origin, f.path, f.key));
        break;
      }
      case json::parse_event_t::value:
        if (!stack.empty() && !stack.back().object) ++stack.back().next;
        break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), cb);
  } catch (const json::parse_error& e) {
    // e.byte is the 1-based position of the last character read.
    size_t byte = e.byte > 0 ? e.byte - 1 : 0;
    auto [line, col] = line_col(text, byte);
    throw SpecError(fmt::format("{}:{}:{}: {}", origin, line, col, short_parse_message(e.what())));
  }
}

std::vector<std::pair<int, json>> read_jsonl(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw SpecError(fmt::format("{}: cannot open data file", path));
  std::vector<std::pair<int, json>> out;
  std::string line;
  int n = 0;
  while (std::getline(f, line)) {
    ++n;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    json j;
    try {
      j = json::parse(line);
    } catch (const json::parse_error& e) {
      size_t col = e.byte > 0 ? e.byte : 1;
      throw SpecError(fmt::format("{}:{}:{}: {}", path, n, col, short_parse_message(e.what())));
    }
    if (!j.is_object()) throw SpecError(fmt::format("{}:{}: expected a JSON object, got {}", path, n, json_excerpt(j)));
    out.emplace_back(n, std::move(j));
  }
  if (f.bad()) throw SpecError(fmt::format("{}: read error", path));
  return out;
}

}  // namespace kveval::eval
