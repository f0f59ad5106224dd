#pragma once
// Internal: run-time values and Python semantics of the Jinja2 subset
// (str(), repr(), truthiness, ==, <, arithmetic) and its built-in filters,
// tests and methods. Errors are thrown as EvalFailure and positioned by the
// evaluator. Not part of the eval API.
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

namespace kveval::eval::tmpl {

using json = nlohmann::json;

/// An evaluation error without a position (the evaluator adds the node's).
struct EvalFailure {
  std::string message;
};
[[noreturn]] void fail(std::string message);

/// Largest string (bytes) or list (items) a template may build, and the
/// largest rendered text: 16 Mi. Python has no such limit; kveval has one so
/// that a hostile template (`('x' * 2**20) * 2**20`, `s.replace('', big)`) fails
/// with a message instead of exhausting memory.
inline constexpr size_t kMaxTemplateValueSize = size_t(1) << 24;
/// Fails with "<what> would be longer than 16 MiB ..." when `size` (bytes of a
/// string, items of a list) exceeds kMaxTemplateValueSize.
void check_size(size_t size, const char* what);

/// A value: JSON data, or Jinja's (strict) Undefined with the reason it is undefined.
struct Value {
  json v;
  bool undefined = false;
  std::string why;           ///< undefined: "'x' is undefined", ...
  std::string range_repr;    ///< non-empty for a range() result: how Python prints it
  int ns = -1;               ///< >= 0: a namespace() object, the evaluator's index of it

  Value() = default;
  /// Implicit from anything a json can be built from (strings, numbers, bools, json).
  template <typename T, typename = std::enable_if_t<!std::is_same_v<std::decay_t<T>, Value> &&
                                                    std::is_constructible_v<json, T&&>>>
  Value(T&& x) : v(std::forward<T>(x)) {}  // NOLINT: implicit on purpose
  static Value undef(std::string why) {
    Value u;
    u.undefined = true;
    u.why = std::move(why);
    return u;
  }
  /// The data, or EvalFailure with `why` (StrictUndefined refuses every use).
  const json& get() const;
};

/// Python type name of a JSON value: int, float, str, bool, NoneType, list, dict.
const char* py_type(const json& v);
/// Python str(): strings as they are, numbers and lists as Python prints them;
/// printing a dict fails (a JSON object does not keep key order).
std::string py_str(const json& v);
/// Python repr().
std::string py_repr(const json& v);
bool py_truthy(const json& v);
/// Python ==.
bool py_equal(const json& a, const json& b);
/// Python ordering (<0, 0, >0) of numbers, strings or lists; TypeError otherwise.
int py_compare(const json& a, const json& b, const char* op);
/// Binary operator + - * / // % ** on Python values.
json py_binary(const std::string& op, const json& a, const json& b);
/// Unary minus / plus.
json py_negate(const json& a, bool minus);
/// `a in b`.
bool py_contains(const json& container, const json& item);
/// Integer value of an int or bool (Python ints); nullopt otherwise.
std::optional<int64_t> as_int(const json& v);
bool is_number(const json& v);

/// obj[key] / obj.attr as Jinja's environment.getitem/getattr: a missing
/// item or attribute is Undefined. `attr_syntax` selects getattr (a.b).
Value get_item(const Value& obj, const json& key, bool attr_syntax);
/// obj[start:stop:step] of a str or list (Python slice semantics); slicing a
/// range() result fails (Python would give a range, printed differently).
Value get_slice(const Value& obj, const std::optional<int64_t>& start, const std::optional<int64_t>& stop,
                const std::optional<int64_t>& step);

/// Calls method `name` of `obj` (str or list methods) with positional args.
Value call_method(const Value& obj, const std::string& name, const std::vector<Value>& args);
/// Global function call: range().
Value call_global(const std::string& name, const std::vector<Value>& args);
/// Applies filter `name`.
Value apply_filter(const std::string& name, const Value& v, const std::vector<Value>& args);
/// Applies test `name`.
bool apply_test(const std::string& name, const Value& v, const std::vector<Value>& args);
/// Items of an iterable for `for` and filters: list elements or the code points of a str.
std::vector<json> iterate(const Value& v);

/// Keyword arguments of a call, in order.
using KwArgs = std::vector<std::pair<std::string, Value>>;
/// Hugging Face's chat environment (hf_builtins.cpp): its filters (tojson as
/// transformers defines it, items, selectattr, rejectattr, map, dictsort,
/// indent, title, safe, reverse); nullopt for the other filters.
std::optional<Value> apply_hf_filter(const std::string& name, const Value& v, const std::vector<Value>& args, const KwArgs& kw);
/// Its tests (equalto/eq/==, ne/!=, in, iterable, true, false, odd, even,
/// divisibleby, lower, upper); nullopt for the others.
std::optional<bool> apply_hf_test_opt(const std::string& name, const Value& v, const std::vector<Value>& args);
/// apply_hf_test_opt, else apply_test.
bool apply_hf_test(const std::string& name, const Value& v, const std::vector<Value>& args);
/// dict.get/items/keys/values and str.title; nullopt for the other methods.
std::optional<Value> call_hf_method(const Value& obj, const std::string& name, const std::vector<Value>& args);
/// Global functions raise_exception(msg) (fails with msg) and strftime_now(fmt)
/// (local time, C strftime), else call_global.
Value call_hf_global(const std::string& name, const std::vector<Value>& args);

}  // namespace kveval::eval::tmpl
