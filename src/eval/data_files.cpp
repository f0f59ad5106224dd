#include "eval/data_files.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include <fmt/format.h>

#include "eval/json_input.hpp"
#include "eval/python_hooks.hpp"
#include "util/error.hpp"
#include "util/input_file.hpp"

namespace kveval::eval {

namespace fs = std::filesystem;
using nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {

/// JSON Lines (read_jsonl); `text` is each row's line as written (its key order).
std::vector<DataRow> read_json_lines(const std::string& path) {
  std::vector<DataRow> out;
  for (auto& [line, j] : read_jsonl(path)) out.push_back({fmt::format("{}:{}", path, line), std::move(j), ""});
  std::ifstream f(path, std::ios::binary);
  std::string text;
  size_t k = 0;
  for (int n = 1; k < out.size() && std::getline(f, text); ++n)
    if (out[k].origin == fmt::format("{}:{}", path, n)) out[k++].text = std::move(text);
  return out;
}

/// A file holding one JSON array of objects.
std::vector<DataRow> read_json_array(const std::string& path, const std::string& text) {
  const ojson a = ojson::parse(parse_json_text(text, path).dump());  // checked parse first (messages, limits)
  const ojson kept = ojson::parse(text);                              // then the key order
  std::vector<DataRow> out;
  for (size_t i = 0; i < kept.size(); ++i) {
    if (!kept[i].is_object())
      throw SpecError(fmt::format("{}: [{}]: expected a JSON object, got {}", path, i, json_excerpt(json::parse(a[i].dump()))));
    std::string t = kept[i].dump();
    out.push_back({fmt::format("{}: [{}]", path, i), json::parse(t), std::move(t)});
  }
  return out;
}

/// fnmatch/fsspec glob syntax as an ECMAScript regex over '/'-separated relative paths.
std::string glob_regex(const std::string& pat) {
  std::string r;
  for (size_t i = 0; i < pat.size(); ++i) {
    const char c = pat[i];
    if (c == '*' && i + 1 < pat.size() && pat[i + 1] == '*') {
      ++i;
      if (i + 1 < pat.size() && pat[i + 1] == '/') ++i, r += "(?:.*/)?";
      else r += ".*";
    } else if (c == '*') {
      r += "[^/]*";
    } else if (c == '?') {
      r += "[^/]";
    } else if (c == '[' && pat.find(']', i + 2) != std::string::npos) {
      const size_t j = pat.find(']', i + 2);  // a ']' first in the class is literal
      std::string cls = pat.substr(i + 1, j - i - 1);
      r += '[';
      if (cls[0] == '!') r += '^', cls.erase(0, 1);
      for (char x : cls) r += (x == '\\' || x == '^' || x == '[' || x == ']') ? std::string("\\") + x : std::string(1, x);
      r += ']';
      i = j;
    } else {
      if (std::strchr(".^$|()[]+{}\\", c)) r += '\\';
      r += c;
    }
  }
  return r;
}

/// How many parts of `parts` (all but the last when `dirs_only`) start with `prefix`
/// ("." parts made only of dots excepted).
size_t count_parts(const std::vector<std::string>& parts, const std::string& prefix, bool dirs_only) {
  size_t n = 0;
  for (size_t i = 0; i + (dirs_only ? 1 : 0) < parts.size(); ++i)
    if (parts[i].rfind(prefix, 0) == 0 && parts[i].find_first_not_of('.') != std::string::npos) ++n;
  return n;
}

std::vector<std::string> split_parts(const std::string& p) {
  std::vector<std::string> out;
  for (const auto& part : fs::path(p)) out.push_back(part.string());
  return out;
}

}  // namespace

bool has_glob_magic(const std::string& pattern) { return pattern.find_first_of("*?[") != std::string::npos; }

std::vector<std::string> glob_data_files(const std::string& pattern, const std::string& base_dir) {
  const fs::path full = fs::path(pattern).is_absolute() || base_dir.empty() ? fs::path(pattern) : fs::path(base_dir) / pattern;
  fs::path root;  // the folder before the first component with magic
  std::string rest;
  bool magic = false;
  for (const auto& part : full.lexically_normal()) {
    const std::string s = part.string();
    if (!magic && !has_glob_magic(s)) {
      root /= part;
      continue;
    }
    magic = true;
    rest += (rest.empty() ? "" : "/") + s;
  }
  std::error_code ec;
  if (rest.empty()) return fs::is_regular_file(root, ec) ? std::vector<std::string>{root.string()} : std::vector<std::string>{};
  if (root.empty()) root = ".";
  if (!fs::is_directory(root, ec)) return {};
  const std::regex re(glob_regex(rest));
  const std::vector<std::string> pat_parts = split_parts(rest);
  static const std::set<std::string> kIgnored = {"README.md",          "config.json",    "dataset_info.json",
                                                 "dataset_infos.json", "dummy_data.zip", "dataset_dict.json"};
  const bool deep = rest.find("**") != std::string::npos;
  std::vector<std::string> out;
  for (auto it = fs::recursive_directory_iterator(root, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (!deep && it.depth() + 1 >= static_cast<int>(pat_parts.size())) it.disable_recursion_pending();
    if (!it->is_regular_file(ec)) continue;
    const std::string rel = it->path().lexically_relative(root).generic_string();
    if (!std::regex_match(rel, re)) continue;
    const std::vector<std::string> parts = split_parts(rel);
    if (kIgnored.count(parts.back()) && pat_parts.back() != parts.back()) continue;
    if (count_parts(parts, ".", false) != count_parts(pat_parts, ".", false)) continue;
    if (count_parts(parts, "__", true) != count_parts(pat_parts, "__", true)) continue;
    out.push_back(it->path().lexically_normal().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string data_file_format(const std::string& path) {
  const std::string ext = fs::path(path).extension().string();
  if (ext == ".csv") return "csv";
  if (ext == ".parquet") return "parquet";
  return "json";
}

std::vector<DataRow> read_data_file(const std::string& path) {
  const std::string format = data_file_format(path);
  if (format != "json") {
    util::InputFile check(path, util::InputKind::Data);  // a regular file within the input limit
    std::vector<DataRow> out;
    for (auto& [line, row] : read_table_with_python(path, format)) {
      std::string t = row.dump();
      out.push_back({fmt::format("{}:{}", path, line), json::parse(t), std::move(t)});
    }
    return out;
  }
  std::string head;
  {
    util::InputFile f(path, util::InputKind::Data);
    for (std::string line; head.empty() && f.getline(line);) head = line.substr(std::min(line.size(), line.find_first_not_of(" \t\r")));
  }
  // parsed whole into memory: the Text limit, as a spec's JSON
  if (!head.empty() && head[0] == '[') return read_json_array(path, util::read_input_file(path, util::InputKind::Text));
  return read_json_lines(path);
}

}  // namespace kveval::eval
