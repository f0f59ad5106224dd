#include "eval/mapping.hpp"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "eval/json_input.hpp"
#include "util/error.hpp"

namespace kveval::eval {

using nlohmann::json;

namespace {

const json* lookup_field(const json& doc, const std::string& field) {
  const json* cur = &doc;
  size_t start = 0;
  while (true) {
    size_t dot = field.find('.', start);
    std::string part = field.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (cur->is_object()) {
      auto it = cur->find(part);
      if (it == cur->end()) return nullptr;
      cur = &*it;
    } else if (cur->is_array() && !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit)) {
      size_t i = std::stoul(part);
      if (i >= cur->size()) return nullptr;
      cur = &(*cur)[i];
    } else {
      return nullptr;
    }
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t");
  size_t b = s.find_last_not_of(" \t");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

[[noreturn]] void field_missing(const json& doc, const std::string& field, const std::string& origin,
                                const std::string& key) {
  std::vector<std::string> names;
  if (doc.is_object())
    for (auto it = doc.begin(); it != doc.end(); ++it) names.push_back(it.key());
  std::string hint = closest(field, names);
  std::string fields;
  for (const auto& n : names) fields += (fields.empty() ? "" : ", ") + n;
  throw SpecError(fmt::format("{}: {}: field '{}' not found{} (fields: {})", origin, key, field,
                              hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint), fields));
}

}  // namespace

std::string value_text(const json& v, const std::string& origin, const std::string& key) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer() || v.is_boolean()) return v.dump();
  if (v.is_number_float()) return v.dump();
  throw SpecError(fmt::format("{}: {}: expected text, got {}", origin, key, json_excerpt(v)));
}

json resolve_mapping(const json& doc, const std::string& mapping, const std::string& origin, const std::string& key) {
  size_t open = mapping.find("{{");
  if (open == std::string::npos) {
    const json* v = lookup_field(doc, mapping);
    if (!v) field_missing(doc, mapping, origin, key);
    return *v;
  }
  // exactly one placeholder covering the whole string: raw value
  size_t close = mapping.find("}}", open);
  if (open == 0 && close != std::string::npos && close + 2 == mapping.size() &&
      mapping.find("{{", open + 2) == std::string::npos) {
    std::string f = trim(mapping.substr(2, close - 2));
    const json* v = lookup_field(doc, f);
    if (!v) field_missing(doc, f, origin, key);
    return *v;
  }
  std::string out;
  size_t pos = 0;
  while (true) {
    size_t o = mapping.find("{{", pos);
    if (o == std::string::npos) {
      out += mapping.substr(pos);
      break;
    }
    size_t c = mapping.find("}}", o + 2);
    if (c == std::string::npos)
      throw SpecError(fmt::format("{}: {}: unterminated '{{{{' in template \"{}\"", origin, key, mapping));
    out += mapping.substr(pos, o - pos);
    std::string f = trim(mapping.substr(o + 2, c - o - 2));
    const json* v = lookup_field(doc, f);
    if (!v) field_missing(doc, f, origin, key);
    out += value_text(*v, origin, key);
    pos = c + 2;
  }
  return out;
}

}  // namespace kveval::eval
