#pragma once
// A Jinja2 subset for lm-evaluation-harness prompt templates (doc_to_text,
// doc_to_target, doc_to_choice), with Jinja 3.1's documented semantics
// (https://jinja.palletsprojects.com/en/3.1.x/templates/) in the environment
// lm-eval uses (lm_eval/utils.py: StrictUndefined, keep_trailing_newline=True,
// no autoescape, trim_blocks and lstrip_blocks off). Values are
// nlohmann::json; they print as Python's str() does.
//
// Supported:
// - text, {{ expr }}, {# comments #}, {% raw %}, whitespace control {{- -}} {%- -%} {#- -#}
//   (and the no-op '+' markers); \r\n and \r in the source become \n.
// - {% if %}/{% elif %}/{% else %}/{% endif %}; {% for x in xs [if cond] %}...
//   [{% else %}] {% endfor %} with loop.index, index0, revindex, revindex0, first,
//   last, length, previtem, nextitem, depth; {% set x = expr %}, {% set x %}...{% endset %}
//   (a for body is its own scope, renewed every iteration, as in Jinja).
// - literals: strings ('..', "..", Python escapes, adjacent ones joined), integers
//   (0x/0o/0b, '_'), floats, true/false/none (also True/False/None), [lists], {dicts}.
// - a.b, a[i], a['k'], a.0, slices a[i:j:k]; + - * / // % ** ~, comparisons
//   (chained), in / not in, and / or / not, x if c else y, filters, tests.
// - methods: str.strip/lstrip/rstrip/split/lower/upper/capitalize/replace/
//   index/find/count/startswith/endswith/join, list.index/count; global range().
// - filters: join, int, float, length (count), trim, lower, upper, capitalize,
//   replace, first, last, default (d), string, list.
// - tests: defined, undefined, none, string, number, integer, float, boolean,
//   sequence, mapping.
// Everything else (macros, includes, other tags, filters, tests or methods,
// keyword arguments, tuples, printf-style '%', printing or iterating a mapping,
// whose key order a JSON object does not keep) is a TemplateError naming the
// construct and its position.
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "util/error.hpp"

namespace kveval::eval::tmpl {

/// A template that cannot be parsed or rendered. what() is
/// "line L, column C: message" (positions in the template source, 1-based).
struct TemplateError : SpecError {
  TemplateError(int line, int column, const std::string& message);
  int line;
  int column;
  std::string message;  ///< without the position
};

struct Program;  // parsed form (ast.hpp)

/// The Jinja environment a template is parsed and rendered in.
/// LmEval: lm-eval's (above). HfChat: transformers' chat-template environment
/// (_compile_jinja_template): trim_blocks and lstrip_blocks on, loop controls
/// ({% break %}, {% continue %}), jinja2's lenient Undefined (prints as '',
/// false, iterates empty), namespace() with `set ns.attr`, keyword arguments,
/// `for a, b in ...`, {% generation %}...{% endgeneration %} rendered as its
/// body, raise_exception(msg), strftime_now(fmt), HF's tojson
/// (json.dumps with ensure_ascii=False, indent, separators, sort_keys), and
/// the filters items, selectattr, rejectattr, map, dictsort, indent, title,
/// safe, reverse, the tests equalto/eq, ne, in, iterable, true, false, odd,
/// even, divisibleby, lower, upper, dict.get/items/keys/values and str.title.
/// A mapping's key order is not kept: tojson, items and keys/values refuse
/// mappings of more than one key (tojson takes them with sort_keys=true).
enum class Dialect { LmEval, HfChat };

/// A parsed template: parse once, render per document.
class Template {
 public:
  /// Parses `source`. Throws TemplateError (syntax errors and constructs outside the subset).
  static Template parse(std::string_view source, Dialect dialect = Dialect::LmEval);
  /// Renders with the keys of `vars` (a JSON object) as the template's
  /// variables, like jinja2's template.render(**doc). A name that is not
  /// defined, an attribute or item that does not exist (unless tested with
  /// `is defined` or given a `default`), or an operation Python refuses, is a
  /// TemplateError. The result is UTF-8 text.
  std::string render(const nlohmann::json& vars) const;
  /// True when the source has no {{, {% or {# at all (plain text).
  bool is_plain() const { return plain_; }
  const std::string& source() const { return source_; }

 private:
  std::shared_ptr<const Program> prog_;
  std::string source_;
  bool plain_ = true;
  Dialect dialect_ = Dialect::LmEval;
};

/// Python's str() of a JSON value, as `{{ v }}` prints it (5, 2.5, True,
/// None, ['a', 1]). Throws TemplateError for objects (key order is not kept).
std::string python_str(const nlohmann::json& v);

/// Python's ast.literal_eval for the literals a template can print: str
/// (quoted with ' or ", with Python escapes, adjacent literals joined; no
/// prefixes), int, float, True/False/None, lists, tuples (as lists) and dicts
/// with string keys, with a unary minus on numbers. Surrounding whitespace is
/// allowed. Throws ArgumentError naming the column when `text` is anything else.
nlohmann::json literal_eval(std::string_view text);

}  // namespace kveval::eval::tmpl
