// Built-in methods (Python str/list), global functions (range), filters and
// tests of the Jinja2 subset, with the semantics of CPython 3 and
// jinja2/filters.py, jinja2/tests.py (Jinja 3.1).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "eval/filters.hpp"
#include "eval/template/runtime.hpp"
#include "eval/template/text.hpp"

namespace kveval::eval::tmpl {

namespace {

/// py_replace, refused (check_size) before it builds a result over the limit.
std::string checked_replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count) {
  size_t n = 0;  // replacements py_replace will make
  if (old.empty()) {
    n = utf8_length(s) + 1;
  } else {
    for (size_t pos = s.find(old); pos != std::string_view::npos; pos = s.find(old, pos + old.size())) ++n;
  }
  if (count >= 0) n = std::min(n, static_cast<size_t>(count));
  if (repl.size() > old.size()) check_size(s.size() + n * (repl.size() - old.size()), "str.replace()'s result");
  return py_replace(s, old, repl, count);
}

void arity(const std::string& what, const std::vector<Value>& args, size_t lo, size_t hi) {
  if (args.size() < lo || args.size() > hi) {
    std::string want = lo == hi ? std::to_string(lo) : fmt::format("{} to {}", lo, hi);
    fail(fmt::format("{} takes {} argument{}, got {}", what, want, hi == 1 ? "" : "s", args.size()));
  }
}

const std::string& str_arg(const std::string& what, const Value& v) {
  const json& j = v.get();
  if (!j.is_string()) fail(fmt::format("{}: expected a str argument, got {}", what, py_type(j)));
  return j.get_ref<const std::string&>();
}

int64_t int_arg(const std::string& what, const Value& v) {
  auto i = as_int(v.get());
  if (!i) fail(fmt::format("{}: expected an int argument, got {}", what, py_type(v.get())));
  return *i;
}

/// str.find / str.index / str.count over s[start:end] (code point bounds).
int64_t str_find(const std::string& s, const std::string& sub, const std::vector<Value>& args, const std::string& what, bool count) {
  std::u32string u = utf8_decode(s), su = utf8_decode(sub);
  int64_t n = static_cast<int64_t>(u.size());
  auto bound = [&](size_t k, int64_t dflt) {
    if (args.size() <= k || args[k].get().is_null()) return dflt;
    int64_t x = int_arg(what, args[k]);
    if (x < 0) x = std::max<int64_t>(0, x + n);
    return std::min(x, n);
  };
  int64_t a = bound(1, 0), b = bound(2, n);
  if (b - a < static_cast<int64_t>(su.size())) return count ? 0 : -1;
  std::u32string_view hay = std::u32string_view(u).substr(static_cast<size_t>(a), static_cast<size_t>(b - a));
  if (count) {
    if (su.empty()) return static_cast<int64_t>(hay.size()) + 1;
    int64_t c = 0;
    for (size_t p = hay.find(su); p != std::u32string_view::npos; p = hay.find(su, p + su.size())) ++c;
    return c;
  }
  size_t p = hay.find(su);
  return p == std::u32string_view::npos ? -1 : a + static_cast<int64_t>(p);
}

Value str_method(const std::string& s, const std::string& name, const std::vector<Value>& args) {
  std::string what = "str." + name + "()";
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    arity(what, args, 0, 1);
    std::u32string chars;
    bool has = !args.empty() && !args[0].get().is_null();
    if (has) chars = utf8_decode(str_arg(what, args[0]));
    return py_strip(s, name != "rstrip", name != "lstrip", has ? &chars : nullptr);
  }
  if (name == "split") {
    arity(what, args, 0, 2);
    std::string sep;
    bool has = !args.empty() && !args[0].get().is_null();
    if (has) {
      sep = str_arg(what, args[0]);
      if (sep.empty()) fail("str.split(): empty separator");
    }
    int64_t maxsplit = args.size() > 1 ? int_arg(what, args[1]) : -1;
    json out = json::array();
    for (auto& p : py_split(s, has ? &sep : nullptr, maxsplit)) out.push_back(std::move(p));
    return out;
  }
  if (name == "lower") return arity(what, args, 0, 0), Value(py_lower(s));
  if (name == "upper") return arity(what, args, 0, 0), Value(py_upper(s));
  if (name == "capitalize") return arity(what, args, 0, 0), Value(py_capitalize(s));
  if (name == "replace") {
    arity(what, args, 2, 3);
    int64_t count = args.size() > 2 ? int_arg(what, args[2]) : -1;
    return checked_replace(s, str_arg(what, args[0]), str_arg(what, args[1]), count);
  }
  if (name == "index" || name == "find" || name == "count") {
    arity(what, args, 1, 3);
    int64_t r = str_find(s, str_arg(what, args[0]), args, what, name == "count");
    if (name == "index" && r < 0) fail(fmt::format("str.index(): substring {} not found", py_repr(args[0].get())));
    return r;
  }
  if (name == "startswith" || name == "endswith") {
    arity(what, args, 1, 1);
    const json& p = args[0].get();
    std::vector<std::string> cands;
    if (p.is_string()) cands.push_back(p.get<std::string>());
    else if (p.is_array())
      for (const auto& e : p) {
        if (!e.is_string()) fail(fmt::format("{}: expected str items, got {}", what, py_type(e)));
        cands.push_back(e.get<std::string>());
      }
    else fail(fmt::format("{}: expected a str argument, got {}", what, py_type(p)));
    for (const auto& c : cands) {
      if (c.size() > s.size()) continue;
      if (name == "startswith" ? s.compare(0, c.size(), c) == 0 : s.compare(s.size() - c.size(), c.size(), c) == 0) return true;
    }
    return false;
  }
  if (name == "join") {
    arity(what, args, 1, 1);
    std::string out;
    size_t k = 0;
    for (const auto& e : iterate(args[0])) {
      if (!e.is_string()) fail(fmt::format("str.join(): sequence item {}: expected str instance, {} found", k, py_type(e)));
      if (k++) out += s;
      out += e.get_ref<const std::string&>();
      check_size(out.size(), "str.join()'s result");
    }
    return out;
  }
  fail(fmt::format("the str method '{}' is not supported (supported: strip, lstrip, rstrip, split, lower, upper, capitalize, "
                   "replace, index, find, count, startswith, endswith, join)", name));
}

}  // namespace

std::vector<json> iterate(const Value& v) {
  const json& j = v.get();
  std::vector<json> out;
  if (j.is_array()) {
    for (const auto& e : j) out.push_back(e);
  } else if (j.is_string()) {
    for (char32_t c : utf8_decode(j.get_ref<const std::string&>())) out.push_back(utf8_encode(std::u32string(1, c)));
  } else if (j.is_object()) {
    fail("iterating over a mapping is not supported (a JSON object does not keep its key order)");
  } else {
    fail(fmt::format("'{}' object is not iterable", py_type(j)));
  }
  return out;
}

Value call_method(const Value& objv, const std::string& name, const std::vector<Value>& args) {
  const json& obj = objv.get();
  if (!objv.range_repr.empty()) fail("methods of range() objects are not supported");
  if (obj.is_string()) return str_method(obj.get_ref<const std::string&>(), name, args);
  if (obj.is_array()) {
    std::string what = "list." + name + "()";
    if (name == "index") {
      arity(what, args, 1, 1);
      for (size_t i = 0; i < obj.size(); ++i)
        if (py_equal(obj[i], args[0].get())) return static_cast<int64_t>(i);
      fail(fmt::format("list.index(): {} is not in list", py_repr(args[0].get())));
    }
    if (name == "count") {
      arity(what, args, 1, 1);
      int64_t c = 0;
      for (const auto& e : obj) c += py_equal(e, args[0].get()) ? 1 : 0;
      return c;
    }
    fail(fmt::format("the list method '{}' is not supported (supported: index, count)", name));
  }
  if (obj.is_object()) {
    auto it = obj.find(name);
    if (it != obj.end() && !(name == "get" || name == "items" || name == "keys" || name == "values"))
      fail(fmt::format("'{}' is a {} value, not callable", name, py_type(*it)));
    fail(fmt::format("calling '{}' on a mapping is not supported (dict methods are outside the subset)", name));
  }
  fail(fmt::format("'{}' object has no method '{}'", py_type(obj), name));
}

Value call_global(const std::string& name, const std::vector<Value>& args) {
  if (name == "range") {
    arity("range()", args, 1, 3);
    int64_t a = 0, b, step = 1;
    if (args.size() == 1) b = int_arg("range()", args[0]);
    else a = int_arg("range()", args[0]), b = int_arg("range()", args[1]);
    if (args.size() == 3) step = int_arg("range()", args[2]);
    if (step == 0) fail("range() arg 3 must not be zero");
    json out = json::array();
    for (int64_t i = a; step > 0 ? i < b : i > b; i += step) {
      if (out.size() >= (1u << 20)) fail("range() with more than 2^20 items is not supported");
      out.push_back(i);
    }
    Value v(out);
    v.range_repr = step == 1 ? fmt::format("range({}, {})", a, b) : fmt::format("range({}, {}, {})", a, b, step);
    return v;
  }
  static const std::vector<std::string> jinja_globals = {"dict", "lipsum", "cycler", "joiner", "namespace"};
  for (const auto& g : jinja_globals)
    if (g == name) fail(fmt::format("the Jinja global '{}()' is not supported (supported: range)", name));
  fail(fmt::format("calling '{}' is not supported (the only global function is range())", name));
}

namespace {

/// Python int(str): optional whitespace, sign, decimal digits with single '_' between digits.
std::optional<int64_t> parse_py_int(const std::string& s0) {
  std::string s = py_strip(s0, true, true);
  size_t i = 0;
  bool neg = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
  if (i >= s.size()) return std::nullopt;
  uint64_t v = 0;
  bool prev_digit = false;
  for (; i < s.size(); ++i) {
    if (s[i] == '_') {
      if (!prev_digit || i + 1 >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i + 1]))) return std::nullopt;
      prev_digit = false;
      continue;
    }
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(s[i] - '0');
    if (v > static_cast<uint64_t>(INT64_MAX) + 1) fail(fmt::format("integer {} is out of range (64-bit integers only)", s));
    prev_digit = true;
  }
  if (!neg && v > static_cast<uint64_t>(INT64_MAX)) fail(fmt::format("integer {} is out of range (64-bit integers only)", s));
  return neg ? static_cast<int64_t>(0 - v) : static_cast<int64_t>(v);
}

/// Python float(str): whitespace, sign, digits with '_', '.', exponent, inf/infinity/nan.
std::optional<double> parse_py_float(const std::string& s0) {
  std::string s = py_strip(s0, true, true), t;
  std::string low = py_lower(s);
  size_t k = (!low.empty() && (low[0] == '+' || low[0] == '-')) ? 1 : 0;
  std::string body = low.substr(k);
  if (body == "inf" || body == "infinity" || body == "nan") {
    double v = body == "nan" ? NAN : INFINITY;
    return !low.empty() && low[0] == '-' ? -v : v;
  }
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '_') {
      if (i == 0 || i + 1 >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i - 1])) || !std::isdigit(static_cast<unsigned char>(s[i + 1])))
        return std::nullopt;
      continue;
    }
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-')) return std::nullopt;
    t += c;
  }
  if (t.empty()) return std::nullopt;
  char* end = nullptr;
  double v = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size()) return std::nullopt;
  // strtod accepts forms Python does not ("1e", hex): require a digit and no stray sign
  bool digit = false;
  for (char c : t) digit |= std::isdigit(static_cast<unsigned char>(c)) != 0;
  if (!digit) return std::nullopt;
  return v;
}

int64_t float_to_int(double d) {
  if (std::isinf(d)) fail("cannot convert float infinity to integer");
  double tr = std::trunc(d);
  if (tr >= 9223372036854775808.0 || tr < -9223372036854775808.0) fail(fmt::format("integer {} is out of range (64-bit integers only)", py_float_repr(d)));
  return static_cast<int64_t>(tr);
}

const char* kFilters =
    "join, int, float, length, count, trim, lower, upper, capitalize, replace, first, last, default, d, string, list, "
    "regex_replace";

/// A filter of a defined value `v` (json `j`), called as `what` ("filter 'name'").
using FilterFn = Value (*)(const std::string& what, const Value& v, const json& j, const std::vector<Value>& args);

Value filter_join(const std::string& what, const Value& v, const json&, const std::vector<Value>& args) {
  arity(what, args, 0, 1);
  std::string sep = args.empty() ? "" : py_str(args[0].get());
  std::string out;
  size_t k = 0;
  for (const auto& e : iterate(v)) {
    if (k++) out += sep;
    out += py_str(e);
    check_size(out.size(), "the join filter's result");
  }
  return out;
}

Value filter_int(const std::string& what, const Value&, const json& j, const std::vector<Value>& args) {
  arity(what, args, 0, 2);
  if (args.size() > 1 && int_arg(what, args[1]) != 10) fail("filter 'int': only base 10 is supported");
  json dflt = args.empty() ? json(0) : args[0].get();
  if (auto i = as_int(j)) return *i;
  if (j.is_number_float()) return std::isnan(j.get<double>()) ? dflt : json(float_to_int(j.get<double>()));
  if (j.is_string()) {
    if (auto i = parse_py_int(j.get<std::string>())) return *i;
    if (auto d = parse_py_float(j.get<std::string>())) return std::isnan(*d) ? dflt : json(float_to_int(*d));
  }
  return dflt;
}

Value filter_float(const std::string& what, const Value&, const json& j, const std::vector<Value>& args) {
  arity(what, args, 0, 1);
  json dflt = args.empty() ? json(0.0) : args[0].get();
  if (is_number(j)) return j.is_number_float() ? j.get<double>() : static_cast<double>(*as_int(j));
  if (j.is_string())
    if (auto d = parse_py_float(j.get<std::string>())) return *d;
  return dflt;
}

/// length and count: len() of a str (code points), list or dict.
Value filter_length(const std::string& what, const Value&, const json& j, const std::vector<Value>& args) {
  arity(what, args, 0, 0);
  if (j.is_string()) return static_cast<int64_t>(utf8_length(j.get_ref<const std::string&>()));
  if (j.is_array() || j.is_object()) return static_cast<int64_t>(j.size());
  fail(fmt::format("object of type '{}' has no len()", py_type(j)));
}

Value filter_trim(const std::string& what, const Value&, const json& j, const std::vector<Value>& args) {
  arity(what, args, 0, 1);
  std::u32string chars;
  bool has = !args.empty() && !args[0].get().is_null();
  if (has) chars = utf8_decode(str_arg(what, args[0]));
  return py_strip(py_str(j), true, true, has ? &chars : nullptr);
}

Value filter_lower(const std::string& what, const Value&, const json& j, const std::vector<Value>& args) {
  return arity(what, args, 0, 0), Value(py_lower(py_str(j)));
}

Value filter_upper(const std::string& what, const Value&, const json& j, const std::vector<Value>& args) {
  return arity(what, args, 0, 0), Value(py_upper(py_str(j)));
}

/// Jinja's do_capitalize: soft_str(s).capitalize()
Value filter_capitalize(const std::string& what, const Value&, const json& j, const std::vector<Value>& args) {
  arity(what, args, 0, 0);
  return py_capitalize(py_str(j));
}

Value filter_replace(const std::string& what, const Value&, const json& j, const std::vector<Value>& args) {
  arity(what, args, 2, 3);
  int64_t count = args.size() > 2 && !args[2].get().is_null() ? int_arg(what, args[2]) : -1;
  return checked_replace(py_str(j), py_str(args[0].get()), py_str(args[1].get()), count);
}

/// lm-eval's own filter (lm_eval/utils.py regex_replace): re.sub(pattern, repl, s, count=count)
Value filter_regex_replace(const std::string& what, const Value&, const json& j, const std::vector<Value>& args) {
  arity(what, args, 2, 3);
  int64_t count = args.size() > 2 ? int_arg(what, args[2]) : 0;
  try {
    std::string r = PyRegex(str_arg(what, args[0])).sub(py_str(j), str_arg(what, args[1]), count, kMaxTemplateValueSize);
    check_size(r.size(), "the result of regex_replace");
    return r;
  } catch (const SpecError& e) {
    fail(fmt::format("filter 'regex_replace': {}", e.what()));
  }
}

/// first and last item (undefined, with Jinja's message, when there is none).
Value filter_first_last(const std::string& what, const Value& v, const json&, const std::vector<Value>& args, bool first) {
  arity(what, args, 0, 0);
  std::vector<json> items = iterate(v);
  if (items.empty()) return Value::undef(fmt::format("No {} item, sequence was empty.", first ? "first" : "last"));
  return first ? items.front() : items.back();
}

Value filter_first(const std::string& what, const Value& v, const json& j, const std::vector<Value>& args) {
  return filter_first_last(what, v, j, args, true);
}

Value filter_last(const std::string& what, const Value& v, const json& j, const std::vector<Value>& args) {
  return filter_first_last(what, v, j, args, false);
}

Value filter_string(const std::string& what, const Value&, const json& j, const std::vector<Value>& args) {
  return arity(what, args, 0, 0), Value(py_str(j));
}

Value filter_list(const std::string& what, const Value& v, const json&, const std::vector<Value>& args) {
  arity(what, args, 0, 0);
  json out = json::array();
  for (auto& e : iterate(v)) out.push_back(std::move(e));
  return out;
}

/// The filters of defined values by name ("default"/"d" take undefined values: apply_filter).
const std::vector<std::pair<std::string_view, FilterFn>> kFilterTable = {
    {"join", filter_join},       {"int", filter_int},         {"float", filter_float},
    {"length", filter_length},   {"count", filter_length},    {"trim", filter_trim},
    {"lower", filter_lower},     {"upper", filter_upper},     {"capitalize", filter_capitalize},
    {"replace", filter_replace}, {"regex_replace", filter_regex_replace},
    {"first", filter_first},     {"last", filter_last},       {"string", filter_string},
    {"list", filter_list}};

}  // namespace

Value apply_filter(const std::string& name, const Value& v, const std::vector<Value>& args) {
  std::string what = "filter '" + name + "'";
  if (name == "default" || name == "d") {
    arity(what, args, 0, 2);
    bool boolean = args.size() > 1 && py_truthy(args[1].get());
    if (v.undefined || (boolean && !py_truthy(v.v))) return args.empty() ? Value(json("")) : args[0];
    return v;
  }
  const json& j = v.get();
  for (const auto& [filter, fn] : kFilterTable)
    if (name == filter) return fn(what, v, j, args);
  fail(fmt::format("the filter '{}' is not supported (supported filters: {})", name, kFilters));
}

bool apply_test(const std::string& name, const Value& v, const std::vector<Value>& args) {
  std::string what = "test '" + name + "'";
  arity(what, args, 0, 0);
  if (name == "defined") return !v.undefined;
  if (name == "undefined") return v.undefined;
  if (v.undefined) {
    if (name == "none" || name == "string" || name == "number" || name == "integer" || name == "float" ||
        name == "boolean" || name == "sequence" || name == "mapping")
      return false;
  }
  const json& j = v.v;
  if (name == "none") return j.is_null();
  if (name == "string") return j.is_string();
  if (name == "number") return is_number(j);
  if (name == "integer") return j.is_number_integer();
  if (name == "float") return j.is_number_float();
  if (name == "boolean") return j.is_boolean();
  if (name == "sequence") return j.is_string() || j.is_array() || j.is_object();
  if (name == "mapping") return j.is_object();
  fail(fmt::format("the test '{}' is not supported (supported tests: defined, undefined, none, string, number, integer, float, "
                   "boolean, sequence, mapping)", name));
}

}  // namespace kveval::eval::tmpl
