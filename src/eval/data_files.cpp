#include "eval/data_files.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>

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

}  // namespace

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
