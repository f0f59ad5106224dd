#pragma once
// doc_to_* mappings with lm-evaluation-harness's rules (lm_eval/api/task.py
// ConfigurableTask.doc_to_text / doc_to_target / doc_to_choice, and
// lm_eval/utils.py apply_template: Jinja2 with StrictUndefined):
// - a string that is a key of the document yields that field's value;
// - otherwise it is a Jinja template (src/eval/template/) rendered with the
//   document's fields as variables; doc_to_text/doc_to_target text of ASCII
//   digits becomes an int when the task has choices (a doc_to_text int makes a
//   multiple-input task); doc_to_target text
//   "[...]" is read with ast.literal_eval when it parses; doc_to_choice text is
//   always read with ast.literal_eval (it must be a list);
// - kveval additions: a plain string with no template syntax that looks like a
//   field reference (letters, digits, '_', '.') names a field, dotted for nested
//   objects ("meta.title", "choices.0"), and is an error when missing (lm-eval
//   would print the name itself); an int (YAML `doc_to_target: 0`) is a fixed value.
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "eval/template/template.hpp"

namespace kveval::eval {

struct PythonHook;  // eval/python_hooks.hpp

/// Which doc_to_* a mapping is (the rules differ).
enum class MappingKind { Text, Target, Choice };

/// One compiled doc_to_* mapping: parse once, resolve per document.
class Mapping {
 public:
  Mapping() = default;
  /// Compiles `spec` (a string, or an int for doc_to_target). `where` names the
  /// mapping in messages ("spec.json: tasks[0].doc_to_text", "arc.yaml:9:
  /// doc_to_text"); `has_choices`: the task has doc_to_choice (lm-eval's digit rule).
  /// Throws SpecError "where: template line L, column C: message; template: \"...\"".
  static Mapping compile(const nlohmann::json& spec, MappingKind kind, const std::string& where, bool has_choices);
  /// A `!function` mapping: resolve() calls `hook(doc)` and returns its value as lm-eval uses it.
  static Mapping python(const PythonHook& hook, MappingKind kind);
  /// The mapping's value for `doc` (lm-eval's result: str, int, list, ...). Errors
  /// name `origin` (the document, "data.jsonl:17") and the key:
  /// "data.jsonl:17: doc_to_text: template line 1, column 4: 'qustion' is undefined (did you mean 'question'?)".
  /// `raw_text` (the document's JSONL line, if any) gives a Python hook the document's key order.
  nlohmann::json resolve(const nlohmann::json& doc, const std::string& origin, std::string_view raw_text = {}) const;
  bool empty() const { return !fixed_ && !tmpl_ && !hook_; }
  const std::string& source() const { return source_; }

 private:
  MappingKind kind_ = MappingKind::Text;
  std::string key_;      ///< doc_to_text / doc_to_target / doc_to_choice
  std::string source_;
  std::string where_;
  bool has_choices_ = false;
  bool field_like_ = false;  ///< no template syntax and looks like a (dotted) field name
  std::optional<nlohmann::json> fixed_;
  std::shared_ptr<const tmpl::Template> tmpl_;
  std::shared_ptr<const PythonHook> hook_;
};

/// Resolves a mapping string once (compile + resolve; for tests and one-off use).
nlohmann::json resolve_mapping(const nlohmann::json& doc, const std::string& mapping, const std::string& origin,
                               const std::string& key, bool has_choices = false);

/// Text of a resolved value as Python's str() gives it (lm-eval formats values
/// with f-strings): strings as they are, 5 -> "5", 2.5 -> "2.5", true -> "True".
/// Throws SpecError "origin: key: expected text, got ..." for objects, arrays and null.
std::string value_text(const nlohmann::json& v, const std::string& origin, const std::string& key);

}  // namespace kveval::eval
