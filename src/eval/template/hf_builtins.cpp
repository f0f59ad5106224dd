// What Hugging Face's chat-template environment adds to the Jinja2 subset
// (transformers' _compile_jinja_template: ImmutableSandboxedEnvironment with
// its own tojson filter and the globals raise_exception and strftime_now), and
// the jinja2 filters, tests and dict/str methods real chat templates use, with
// the semantics of jinja2/filters.py and jinja2/tests.py (Jinja 3.1) and CPython.
#include <algorithm>
#include <cmath>
#include <ctime>

#include <fmt/format.h>

#include "eval/template/runtime.hpp"
#include "eval/template/text.hpp"

namespace kveval::eval::tmpl {

namespace {

/// A mapping's items in Python's order: only defined when that order is
/// known, i.e. for at most one key (a JSON object here keeps its keys sorted).
json ordered_items(const json& obj, const std::string& what) {
  if (obj.size() > 1)
    fail(fmt::format("{} of a mapping with more than one key is not supported (a JSON object does not keep the key order "
                     "Python would give)", what));
  json out = json::array();
  for (auto it = obj.begin(); it != obj.end(); ++it) out.push_back(json::array({it.key(), it.value()}));
  return out;
}

/// Python's json.dumps string encoding with ensure_ascii=False.
std::string json_string(const std::string& s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\r': o += "\\r"; break;
      case '\t': o += "\\t"; break;
      case '\b': o += "\\b"; break;
      case '\f': o += "\\f"; break;
      default:
        if (c < 0x20) o += fmt::format("\\u{:04x}", c);
        else o += static_cast<char>(c);
    }
  }
  return o + "\"";
}

struct JsonDumps {
  const std::string* indent;  ///< null: one line
  std::string item_sep, key_sep;
  bool sort_keys;
  std::string out;

  void newline(int level) {
    out += '\n';
    for (int k = 0; k < level; ++k) out += *indent;
  }
  void value(const json& v, int level) {
    check_size(out.size(), "tojson's result");
    if (v.is_string()) return void(out += json_string(v.get_ref<const std::string&>()));
    if (v.is_null()) return void(out += "null");
    if (v.is_boolean()) return void(out += v.get<bool>() ? "true" : "false");
    if (v.is_number_float()) {
      double d = v.get<double>();
      out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : py_float_repr(d);
      return;
    }
    if (v.is_number()) return void(out += py_repr(v));
    if (v.empty()) return void(out += v.is_array() ? "[]" : "{}");
    if (v.is_object() && v.size() > 1 && !sort_keys)
      fail("tojson of a mapping with more than one key is not supported without sort_keys=true (a JSON object does not keep "
           "the key order Python would print)");
    out += v.is_array() ? '[' : '{';
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!first) out += item_sep;
      first = false;
      if (indent) newline(level + 1);
      if (v.is_object()) out += json_string(it.key()) + key_sep;
      value(it.value(), level + 1);
    }
    if (indent) newline(level);
    out += v.is_array() ? ']' : '}';
  }
};

/// transformers' tojson: json.dumps(x, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys).
Value tojson(const Value& v, const std::vector<Value>& args, const KwArgs& kw) {
  json indent = nullptr, separators = nullptr;
  bool sort_keys = false;
  if (!args.empty()) indent = args[0].get();
  for (const auto& [k, val] : kw) {
    if (k == "indent") indent = val.get();
    else if (k == "separators") separators = val.get();
    else if (k == "sort_keys") sort_keys = py_truthy(val.get());
    else if (k != "ensure_ascii" || py_truthy(val.get())) fail(fmt::format("tojson: the argument '{}' is not supported", k));
  }
  std::string ind;
  if (indent.is_string()) ind = indent.get<std::string>();
  else if (auto n = as_int(indent)) ind = std::string(static_cast<size_t>(std::max<int64_t>(0, std::min<int64_t>(*n, 64))), ' ');
  else if (!indent.is_null()) fail("tojson: indent must be an int or a str");
  JsonDumps d{indent.is_null() ? nullptr : &ind, indent.is_null() ? ", " : ",", ": ", sort_keys, {}};
  if (!separators.is_null()) {
    if (!separators.is_array() || separators.size() != 2 || !separators[0].is_string() || !separators[1].is_string())
      fail("tojson: separators must be a pair of strings");
    d.item_sep = separators[0].get<std::string>(), d.key_sep = separators[1].get<std::string>();
  }
  d.value(v.get(), 0);
  return d.out;
}

/// str.splitlines() (without the line ends).
std::vector<std::u32string> splitlines(const std::u32string& s) {
  std::vector<std::u32string> out;
  std::u32string cur;
  for (size_t k = 0; k < s.size(); ++k) {
    char32_t c = s[k];
    bool br = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E || c == 0x85 ||
              c == 0x2028 || c == 0x2029;
    if (!br) {
      cur += c;
      continue;
    }
    if (c == '\r' && k + 1 < s.size() && s[k + 1] == '\n') ++k;
    out.push_back(std::move(cur));
    cur.clear();
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

/// jinja2's indent(s, width=4, first=False, blank=False).
Value indent(const Value& v, const std::vector<Value>& args, const KwArgs& kw) {
  json width = args.size() > 0 ? args[0].get() : json(4);
  bool first = args.size() > 1 && py_truthy(args[1].get()), blank = args.size() > 2 && py_truthy(args[2].get());
  for (const auto& [k, val] : kw) {
    if (k == "width") width = val.get();
    else if (k == "first") first = py_truthy(val.get());
    else if (k == "blank") blank = py_truthy(val.get());
    else fail(fmt::format("indent: unexpected argument '{}'", k));
  }
  std::string ind = width.is_string() ? width.get<std::string>() : std::string(static_cast<size_t>(std::clamp<int64_t>(as_int(width).value_or(4), 0, 256)), ' ');
  std::u32string s = utf8_decode(py_str(v.get())) + U"\n";
  auto lines = splitlines(s);
  // built by appending: GCC 12 -O2 misreads `"\n" + std::string&&` as an overlapping copy (-Wrestrict)
  std::string rv = first ? ind : std::string();
  for (size_t k = 0; k < lines.size(); ++k) {
    if (k > 0) rv += '\n';
    if (k > 0 && (blank || !lines[k].empty())) rv += ind;  // without `blank`, an empty line stays empty
    rv += utf8_encode(lines[k]);
  }
  check_size(rv.size(), "indent's result");
  return rv;
}

/// jinja2's title: words split at runs of [-\s({[<], each first character
/// upper-cased and the rest lower-cased.
std::string jinja_title(const std::string& s) {
  std::u32string u = utf8_decode(s);
  std::string out;
  size_t k = 0;
  auto is_sep = [](char32_t c) { return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py_isspace(c); };
  while (k < u.size()) {
    size_t e = k;
    bool sep = is_sep(u[k]);
    while (e < u.size() && is_sep(u[e]) == sep) ++e;
    std::u32string item = u.substr(k, e - k);
    out += sep ? utf8_encode(item) : py_upper(utf8_encode(item.substr(0, 1))) + py_lower(utf8_encode(item.substr(1)));
    k = e;
  }
  return out;
}

/// Python's str.title(): a cased letter after an uncased character is title-cased, the others lower-cased.
std::string py_title(const std::string& s) {
  std::string out;
  bool prev_cased = false;
  for (char32_t c : utf8_decode(s)) {
    std::string ch = utf8_encode(std::u32string(1, c));
    std::string lo = py_lower(ch), up = py_upper(ch);
    bool cased = lo != up;
    out += cased ? (prev_cased ? lo : up) : ch;
    prev_cased = cased;
  }
  return out;
}

/// Looks up `attr` in an item as environment.getitem does (dotted paths, integer parts).
Value attribute_of(const json& item, const std::string& attr) {
  Value cur(item);
  const std::string dot = ".";
  for (const auto& part : py_split(attr, &dot, -1)) {
    if (cur.undefined) return cur;
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    cur = get_item(cur, digits ? json(std::stoll(part)) : json(part), false);
  }
  return cur;
}

/// selectattr / rejectattr(attr[, test, args...]).
Value select_attr(const Value& v, const std::vector<Value>& args, bool select) {
  if (args.empty()) fail("selectattr/rejectattr need an attribute name");
  std::string attr = args[0].get().is_string() ? args[0].get().get<std::string>() : py_str(args[0].get());
  json out = json::array();
  for (const auto& item : iterate(v)) {
    Value a = attribute_of(item, attr);
    bool ok;
    if (args.size() == 1) ok = !a.undefined && py_truthy(a.v);
    else ok = apply_hf_test(args[1].get().get<std::string>(), a, std::vector<Value>(args.begin() + 2, args.end()));
    if (ok == select) out.push_back(item);
  }
  return out;
}

/// map(attribute=..., default=...) or map('filter', args...).
Value map_filter(const Value& v, const std::vector<Value>& args, const KwArgs& kw) {
  json out = json::array();
  if (!kw.empty() && kw[0].first == "attribute") {
    for (const auto& item : iterate(v)) {
      Value a = attribute_of(item, py_str(kw[0].second.get()));
      if (a.undefined && kw.size() > 1 && kw[1].first == "default") a = kw[1].second;
      out.push_back(a.get());
    }
    return out;
  }
  if (args.empty() || !args[0].get().is_string()) fail("map needs attribute=... or a filter name");
  std::vector<Value> rest(args.begin() + 1, args.end());
  for (const auto& item : iterate(v)) out.push_back(apply_filter(args[0].get().get<std::string>(), Value(item), rest).get());
  return out;
}

/// dictsort(case_sensitive=False, by='key', reverse=False).
Value dictsort(const Value& v, const std::vector<Value>& args, const KwArgs& kw) {
  const json& obj = v.get();
  if (!obj.is_object()) fail(fmt::format("dictsort needs a mapping, got {}", py_type(obj)));
  bool cs = args.size() > 0 && py_truthy(args[0].get()), rev = args.size() > 2 && py_truthy(args[2].get());
  std::string by = args.size() > 1 ? py_str(args[1].get()) : "key";
  for (const auto& [k, val] : kw) {
    if (k == "case_sensitive") cs = py_truthy(val.get());
    else if (k == "by") by = py_str(val.get());
    else if (k == "reverse") rev = py_truthy(val.get());
    else fail(fmt::format("dictsort: unexpected argument '{}'", k));
  }
  std::vector<json> items;
  for (auto it = obj.begin(); it != obj.end(); ++it) items.push_back(json::array({it.key(), it.value()}));
  size_t pos = by == "value" ? 1 : 0;
  auto key = [&](const json& p) { return cs || !p[pos].is_string() ? p[pos] : json(py_lower(p[pos].get<std::string>())); };
  std::stable_sort(items.begin(), items.end(), [&](const json& a, const json& b) {
    int c = py_compare(key(a), key(b), "<");
    return rev ? c > 0 : c < 0;
  });
  return json(items);
}

}  // namespace

std::optional<Value> apply_hf_filter(const std::string& name, const Value& v, const std::vector<Value>& args, const KwArgs& kw) {
  if (name == "tojson") return tojson(v, args, kw);
  if (name == "indent") return indent(v, args, kw);
  if (name == "map") return map_filter(v, args, kw);
  if (name == "dictsort") return dictsort(v, args, kw);
  if (!kw.empty()) fail(fmt::format("the filter '{}' takes no keyword arguments here", name));
  if (name == "items") {
    if (v.undefined) return Value(json::array());
    if (!v.get().is_object()) fail(fmt::format("items needs a mapping, got {}", py_type(v.get())));
    return Value(ordered_items(v.get(), "items"));
  }
  if (name == "selectattr" || name == "rejectattr") return select_attr(v, args, name == "selectattr");
  if (name == "title") return Value(jinja_title(py_str(v.get())));
  if (name == "safe") return Value(py_str(v.get()));
  if (name == "reverse") {
    const json& j = v.get();
    if (j.is_string()) {
      std::u32string u = utf8_decode(j.get<std::string>());
      return Value(utf8_encode(std::u32string(u.rbegin(), u.rend())));
    }
    std::vector<json> items = iterate(v);
    return Value(json(std::vector<json>(items.rbegin(), items.rend())));
  }
  return std::nullopt;
}

std::optional<bool> apply_hf_test_opt(const std::string& name, const Value& v, const std::vector<Value>& args) {
  auto one = [&]() -> const json& {
    if (args.size() != 1) fail(fmt::format("test '{}' takes 1 argument, got {}", name, args.size()));
    return args[0].get();
  };
  if (name == "equalto" || name == "eq" || name == "==") return !v.undefined && py_equal(v.v, one());
  if (name == "ne" || name == "!=") return v.undefined || !py_equal(v.v, one());
  if (name == "in") return py_contains(one(), v.get());
  if (v.undefined) return name == "iterable";
  const json& j = v.v;
  if (name == "iterable") return j.is_array() || j.is_string() || j.is_object();
  if (name == "true") return j.is_boolean() && j.get<bool>();
  if (name == "false") return j.is_boolean() && !j.get<bool>();
  if (name == "odd" || name == "even" || name == "divisibleby") {
    auto n = as_int(j);
    if (!n || j.is_boolean()) fail(fmt::format("test '{}' needs an int, got {}", name, py_type(j)));
    if (name == "divisibleby") {
      auto d = as_int(one());
      if (!d || *d == 0) fail("divisibleby needs a non-zero int");
      return *n % *d == 0;
    }
    return (((*n % 2) + 2) % 2 == 1) == (name == "odd");
  }
  if (name == "lower" || name == "upper") {
    if (!j.is_string()) return false;
    const std::string& s = j.get_ref<const std::string&>();
    std::string lo = py_lower(s), up = py_upper(s);  // str.islower/isupper: some cased character, all of one case
    return lo != up && s == (name == "lower" ? lo : up);
  }
  return std::nullopt;
}

bool apply_hf_test(const std::string& name, const Value& v, const std::vector<Value>& args) {
  if (auto r = apply_hf_test_opt(name, v, args)) return *r;
  return apply_test(name, v, args);
}

std::optional<Value> call_hf_method(const Value& objv, const std::string& name, const std::vector<Value>& args) {
  const json& obj = objv.get();
  if (obj.is_string() && name == "title") {
    if (!args.empty()) fail("str.title() takes no arguments");
    return Value(py_title(obj.get<std::string>()));
  }
  if (!obj.is_object()) return std::nullopt;
  if (name == "get") {
    if (args.empty() || args.size() > 2) fail("dict.get() takes 1 or 2 arguments");
    const json& k = args[0].get();
    if (k.is_string() && obj.contains(k.get<std::string>())) return Value(obj[k.get<std::string>()]);
    return args.size() > 1 ? args[1] : Value(json(nullptr));
  }
  if (name == "items" || name == "keys" || name == "values") {
    if (!args.empty()) fail(fmt::format("dict.{}() takes no arguments", name));
    json items = ordered_items(obj, "dict." + name + "()");
    if (name == "items") return Value(items);
    json out = json::array();
    for (const auto& p : items) out.push_back(p[name == "keys" ? 0 : 1]);
    return Value(out);
  }
  return std::nullopt;
}

Value call_hf_global(const std::string& name, const std::vector<Value>& args) {
  if (name == "raise_exception") {
    if (args.size() != 1) fail("raise_exception() takes 1 argument");
    fail(fmt::format("the template raised an error: {}", py_str(args[0].get())));
  }
  if (name == "strftime_now") {
    if (args.size() != 1 || !args[0].get().is_string()) fail("strftime_now() takes 1 str argument");
    std::time_t t = std::time(nullptr);
    std::tm tm{};
    localtime_r(&t, &tm);
    char buf[512];
    size_t n = std::strftime(buf, sizeof buf, args[0].get().get<std::string>().c_str(), &tm);
    return std::string(buf, n);
  }
  return call_global(name, args);
}

}  // namespace kveval::eval::tmpl
