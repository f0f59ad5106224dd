#include "eval/mapping.hpp"

#include <algorithm>
#include <cctype>
#include <vector>

#include <fmt/format.h>

#include "eval/json_input.hpp"
#include "eval/task_hooks.hpp"
#include "eval/template/text.hpp"
#include "util/error.hpp"

namespace kveval::eval {

using nlohmann::json;

namespace {

const char* key_name(MappingKind k) {
  switch (k) {
    case MappingKind::Text: return "doc_to_text";
    case MappingKind::Target: return "doc_to_target";
    case MappingKind::Choice: return "doc_to_choice";
  }
  return "?";
}

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
    } else if (cur->is_array() && !part.empty() && part.size() < 10 && std::all_of(part.begin(), part.end(), ::isdigit)) {
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

std::vector<std::string> field_names(const json& doc) {
  std::vector<std::string> names;
  if (doc.is_object())
    for (auto it = doc.begin(); it != doc.end(); ++it) names.push_back(it.key());
  return names;
}

[[noreturn]] void field_missing(const json& doc, const std::string& field, const std::string& origin, const std::string& key) {
  std::vector<std::string> names = field_names(doc);
  std::string hint = closest(field, names);
  std::string fields;
  for (const auto& n : names) fields += (fields.empty() ? "" : ", ") + n;
  throw SpecError(fmt::format("{}: {}: field '{}' not found{} (fields: {})", origin, key, field,
                              hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint), fields));
}

/// A template excerpt for messages: one line, at most ~60 bytes (UTF-8 safe).
std::string excerpt(const std::string& s) {
  std::string e;
  for (char c : s) {
    if (c == '\n') e += "\\n";
    else if (c == '\t') e += "\\t";
    else e += c;
  }
  if (e.size() > 60) {
    size_t cut = 57;
    while (cut > 0 && (static_cast<unsigned char>(e[cut]) & 0xC0) == 0x80) --cut;
    e = e.substr(0, cut) + "...";
  }
  return e;
}

bool looks_like_field(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-')) return false;
  return true;
}

bool all_ascii_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

std::string value_text(const json& v, const std::string& origin, const std::string& key) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number() || v.is_boolean()) return tmpl::python_str(v);
  throw SpecError(fmt::format("{}: {}: expected text, got {}", origin, key, json_excerpt(v)));
}

Mapping Mapping::compile(const json& spec, MappingKind kind, const std::string& where, bool has_choices) {
  Mapping m;
  m.kind_ = kind;
  m.key_ = key_name(kind);
  m.where_ = where;
  m.has_choices_ = has_choices;
  if (spec.is_number_integer() && kind == MappingKind::Target) {
    m.fixed_ = spec;
    m.source_ = spec.dump();
    return m;
  }
  if (!spec.is_string()) throw SpecError(fmt::format("{}: expected a string, got {}", where, json_excerpt(spec)));
  m.source_ = spec.get<std::string>();
  try {
    m.tmpl_ = std::make_shared<const tmpl::Template>(tmpl::Template::parse(m.source_));
  } catch (const tmpl::TemplateError& e) {
    throw SpecError(fmt::format("{}: template line {}, column {}: {}; template: \"{}\"", where, e.line, e.column, e.message,
                                excerpt(m.source_)));
  }
  m.field_like_ = m.tmpl_->is_plain() && looks_like_field(m.source_);
  return m;
}

Mapping Mapping::python(const PythonHook& hook, MappingKind kind) {
  Mapping m;
  m.kind_ = kind;
  m.key_ = key_name(kind);
  m.where_ = hook.where;
  m.source_ = "!function " + hook.name();
  m.hook_ = std::make_shared<const PythonHook>(hook);
  return m;
}

json Mapping::resolve(const json& doc, const std::string& origin, std::string_view raw_text) const {
  if (fixed_) return *fixed_;
  if (hook_) {
    try {
      auto args = nlohmann::ordered_json::array({ordered_doc(doc, std::string(raw_text))});
      return json::parse(call_python_hook(*hook_, HookCall::Doc, args).dump());
    } catch (const SpecError& e) {
      throw SpecError(fmt::format("{}: {}", origin, e.what()));
    }
  }
  if (!tmpl_) throw SpecError(fmt::format("{}: {}: no mapping", origin, key_));
  // lm-eval: a key of the document is that field
  if (doc.is_object()) {
    auto it = doc.find(source_);
    if (it != doc.end()) return *it;
  }
  if (field_like_) {
    const json* v = lookup_field(doc, source_);
    if (!v) field_missing(doc, source_, origin, key_);
    return *v;
  }
  std::string text;
  try {
    text = tmpl_->render(doc);
  } catch (const tmpl::TemplateError& e) {
    std::string msg = e.message;
    const std::string undef = "' is undefined";
    if (msg.size() > undef.size() && msg.front() == '\'' && msg.compare(msg.size() - undef.size(), undef.size(), undef) == 0) {
      std::string name = msg.substr(1, msg.size() - undef.size() - 1);
      std::vector<std::string> names = field_names(doc);
      std::string hint = closest(name, names);
      std::string fields;
      for (const auto& n : names) fields += (fields.empty() ? "" : ", ") + n;
      msg += hint.empty() ? fmt::format(" (fields: {})", fields) : fmt::format(" (did you mean '{}'?)", hint);
    }
    throw SpecError(fmt::format("{}: {}: template line {}, column {}: {} (template from {})", origin, key_, e.line, e.column, msg, where_));
  }
  switch (kind_) {
    case MappingKind::Text:
      if (all_ascii_digits(text) && has_choices_) {  // lm-eval: ast.literal_eval, an index (multiple-input tasks)
        if (text.size() > 1 && text.find_first_not_of('0') != std::string::npos && text[0] == '0')
          throw SpecError(fmt::format("{}: doc_to_text: the template gave \"{}\", which lm-eval reads with ast.literal_eval: "
                                      "leading zeros in decimal integer literals are not permitted", origin, text));
        if (text.size() > 9) throw SpecError(fmt::format("{}: doc_to_text: index {} is out of range", origin, text));
        return std::stoll(text);
      }
      return text;
    case MappingKind::Target:
      if (all_ascii_digits(text) && has_choices_) {
        if (text.size() > 9) throw SpecError(fmt::format("{}: doc_to_target: index {} is out of range", origin, text));
        return std::stoll(text);
      }
      if (text.size() >= 2 && text.front() == '[' && text.back() == ']') {
        try {
          return tmpl::literal_eval(text);
        } catch (const ArgumentError&) {
          return text;  // lm-eval keeps the text when literal_eval fails
        }
      }
      return text;
    case MappingKind::Choice:
      try {
        return tmpl::literal_eval(text);
      } catch (const ArgumentError& e) {
        throw SpecError(fmt::format("{}: doc_to_choice: the template gave \"{}\", which lm-eval reads with ast.literal_eval: {}",
                                    origin, excerpt(text), e.what()));
      }
  }
  return text;
}

json resolve_mapping(const json& doc, const std::string& mapping, const std::string& origin, const std::string& key,
                     bool has_choices) {
  MappingKind kind = key == "doc_to_choice" ? MappingKind::Choice : key == "doc_to_target" ? MappingKind::Target : MappingKind::Text;
  return Mapping::compile(mapping, kind, key, has_choices).resolve(doc, origin);
}

}  // namespace kveval::eval
