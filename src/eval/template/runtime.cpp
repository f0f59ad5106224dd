// Python semantics of values: str(), repr(), truth, ==, ordering, operators,
// item/attribute access and slices (CPython 3 behaviour; Jinja passes these
// operations straight to Python).
#include "eval/template/runtime.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "eval/template/text.hpp"

namespace kveval::eval::tmpl {

void fail(std::string message) { throw EvalFailure{std::move(message)}; }

const json& Value::get() const {
  if (undefined) fail(why);
  return v;
}

const char* py_type(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "NoneType";
    case json::value_t::boolean: return "bool";
    case json::value_t::number_integer: case json::value_t::number_unsigned: return "int";
    case json::value_t::number_float: return "float";
    case json::value_t::string: return "str";
    case json::value_t::array: return "list";
    case json::value_t::object: return "dict";
    default: return "object";
  }
}

std::optional<int64_t> as_int(const json& v) {
  if (v.is_boolean()) return v.get<bool>() ? 1 : 0;
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) fail(fmt::format("integer {} is out of range (64-bit integers only)", u));
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  return std::nullopt;
}

bool is_number(const json& v) { return v.is_number() || v.is_boolean(); }

static double as_double(const json& v) {
  if (v.is_number_float()) return v.get<double>();
  return static_cast<double>(*as_int(v));
}

std::string py_str(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  return py_repr(v);
}

std::string py_repr(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "None";
    case json::value_t::boolean: return v.get<bool>() ? "True" : "False";
    case json::value_t::number_integer: return std::to_string(v.get<int64_t>());
    case json::value_t::number_unsigned: return std::to_string(v.get<uint64_t>());
    case json::value_t::number_float: return py_float_repr(v.get<double>());
    case json::value_t::string: return py_repr_str(v.get<std::string>());
    case json::value_t::array: {
      std::string s = "[";
      for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + py_repr(v[i]);
      return s + "]";
    }
    case json::value_t::object:
      fail("printing a mapping is not supported (a JSON object does not keep the key order Python would print)");
    default: fail("cannot print this value");
  }
}

bool py_truthy(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return false;
    case json::value_t::boolean: return v.get<bool>();
    case json::value_t::number_integer: case json::value_t::number_unsigned: return *as_int(v) != 0;
    case json::value_t::number_float: return v.get<double>() != 0.0;
    case json::value_t::string: return !v.get_ref<const std::string&>().empty();
    case json::value_t::array: case json::value_t::object: return !v.empty();
    default: return true;
  }
}

bool py_equal(const json& a, const json& b) {
  if (is_number(a) && is_number(b)) {
    if (a.is_number_float() || b.is_number_float()) return as_double(a) == as_double(b);
    return *as_int(a) == *as_int(b);
  }
  if (a.type() != b.type()) return false;
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (!py_equal(a[i], b[i])) return false;
    return true;
  }
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (auto it = a.begin(); it != a.end(); ++it) {
      auto f = b.find(it.key());
      if (f == b.end() || !py_equal(it.value(), *f)) return false;
    }
    return true;
  }
  return a == b;
}

int py_compare(const json& a, const json& b, const char* op) {
  if (is_number(a) && is_number(b)) {
    if (a.is_number_float() || b.is_number_float()) {
      double x = as_double(a), y = as_double(b);
      if (std::isnan(x) || std::isnan(y)) return 2;  // every ordering is false; callers treat 2 as "unordered"
      return x < y ? -1 : x > y ? 1 : 0;
    }
    int64_t x = *as_int(a), y = *as_int(b);
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    int c = a.get_ref<const std::string&>().compare(b.get_ref<const std::string&>());  // UTF-8 byte order = code point order
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_array() && b.is_array()) {
    for (size_t i = 0; i < a.size() && i < b.size(); ++i)
      if (!py_equal(a[i], b[i])) return py_compare(a[i], b[i], op);
    return a.size() < b.size() ? -1 : a.size() > b.size() ? 1 : 0;
  }
  fail(fmt::format("'{}' not supported between instances of '{}' and '{}'", op, py_type(a), py_type(b)));
}

namespace {

int64_t checked(bool overflow, int64_t r, const char* op) {
  if (overflow) fail(fmt::format("integer overflow in '{}' (Python integers are unbounded; kveval's are 64-bit)", op));
  return r;
}

/// CPython float_divmod: (floor quotient, modulo with the divisor's sign).
std::pair<double, double> float_divmod(double vx, double wx) {
  if (wx == 0.0) fail("float division by zero");
  double mod = std::fmod(vx, wx);
  double div = (vx - mod) / wx;
  if (mod != 0.0) {
    if ((wx < 0) != (mod < 0)) {
      mod += wx;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, wx);
  }
  double floordiv;
  if (div != 0.0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, vx / wx);
  }
  return {floordiv, mod};
}

}  // namespace

void check_size(size_t size, const char* what) {
  if (size > kMaxTemplateValueSize)
    fail(fmt::format("{} would be longer than 16 MiB ({} {}; kveval's limit for a template value)", what, size,
                     "bytes or items"));
}

namespace {

json repeat(const json& seq, int64_t n) {
  if (n > (1 << 20)) fail(fmt::format("sequence repetition by {} is too large", n));
  const size_t unit = seq.is_string() ? seq.get_ref<const std::string&>().size() : seq.size();
  if (n > 0) check_size(unit * static_cast<size_t>(n), "the repeated sequence");
  if (seq.is_string()) {
    std::string out;
    for (int64_t k = 0; k < n; ++k) out += seq.get_ref<const std::string&>();
    return out;
  }
  json out = json::array();
  for (int64_t k = 0; k < n; ++k)
    for (const auto& e : seq) out.push_back(e);
  return out;
}

[[noreturn]] void operand_type_error(const std::string& op, const json& a, const json& b) {
  fail(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, py_type(a), py_type(b)));
}

/// a + b: ints (overflow refused), numbers, str + str, list + list.
json py_add(const json& a, const json& b) {
  if (as_int(a).has_value() && as_int(b).has_value()) {
    int64_t r = 0;
    bool overflow = __builtin_add_overflow(*as_int(a), *as_int(b), &r);
    return checked(overflow, r, "+");
  }
  if (is_number(a) && is_number(b)) return as_double(a) + as_double(b);
  if (a.is_string() && b.is_string()) {
    check_size(a.get_ref<const std::string&>().size() + b.get_ref<const std::string&>().size(), "the sum of two strings");
    return a.get<std::string>() + b.get<std::string>();
  }
  if (a.is_array() && b.is_array()) {
    check_size(a.size() + b.size(), "the sum of two lists");
    json r = a;
    for (const auto& e : b) r.push_back(e);
    return r;
  }
  operand_type_error("+", a, b);
}

/// a * b: ints (overflow refused), numbers, a str or list repeated by an int.
json py_mul(const json& a, const json& b) {
  if (as_int(a).has_value() && as_int(b).has_value()) {
    int64_t r = 0;
    bool overflow = __builtin_mul_overflow(*as_int(a), *as_int(b), &r);
    return checked(overflow, r, "*");
  }
  if (is_number(a) && is_number(b)) return as_double(a) * as_double(b);
  if ((a.is_string() || a.is_array()) && as_int(b)) return repeat(a, *as_int(b));
  if ((b.is_string() || b.is_array()) && as_int(a)) return repeat(b, *as_int(a));
  operand_type_error("*", a, b);
}

/// a // b and a % b (`op`) with Python's floor semantics; no printf-style str %.
json py_floordiv_mod(const std::string& op, const json& a, const json& b) {
  if (a.is_string() && op == "%") fail("printf-style string formatting ('...' % x) is not supported");
  if (!(is_number(a) && is_number(b))) operand_type_error(op, a, b);
  if (as_int(a).has_value() && as_int(b).has_value()) {
    int64_t x = *as_int(a), y = *as_int(b);
    if (y == 0) fail(op == "//" ? "integer division by zero" : "integer modulo by zero");
    if (x == std::numeric_limits<int64_t>::min() && y == -1) {  // -2^63 // -1 = 2^63 does not fit; the remainder is 0
      if (op == "%") return int64_t{0};
      fail("integer overflow in '//'");
    }
    int64_t q = x / y, r = x % y;
    if (r != 0 && ((r < 0) != (y < 0))) --q, r += y;  // floor toward -inf, remainder with the divisor's sign
    return op == "//" ? q : r;
  }
  auto [q, r] = float_divmod(as_double(a), as_double(b));
  return op == "//" ? q : r;
}

/// a ** b: exact for an int base and non-negative int exponent (overflow refused), else pow().
json py_pow(const json& a, const json& b) {
  if (!(is_number(a) && is_number(b))) operand_type_error("**", a, b);
  if (as_int(a).has_value() && as_int(b).has_value() && *as_int(b) >= 0) {
    int64_t base = *as_int(a), e = *as_int(b), r = 1;
    while (e > 0) {
      if (e & 1) checked(__builtin_mul_overflow(r, base, &r), 0, "**");
      e >>= 1;
      if (e > 0) checked(__builtin_mul_overflow(base, base, &base), 0, "**");
    }
    return r;
  }
  double x = as_double(a), y = as_double(b);
  if (x == 0.0 && y < 0) fail("0.0 cannot be raised to a negative power");
  if (x < 0 && y != std::floor(y)) fail("a negative number raised to a fractional power is complex (not supported)");
  double r = std::pow(x, y);
  if (std::isinf(r) && std::isfinite(x) && std::isfinite(y)) fail("numerical result out of range in '**'");
  return r;
}

}  // namespace

json py_binary(const std::string& op, const json& a, const json& b) {
  const bool ints = as_int(a).has_value() && as_int(b).has_value();
  const bool nums = is_number(a) && is_number(b);
  if (op == "+") return py_add(a, b);
  if (op == "-") {
    if (ints) {
      int64_t r = 0;
      bool overflow = __builtin_sub_overflow(*as_int(a), *as_int(b), &r);
      return checked(overflow, r, "-");
    }
    if (nums) return as_double(a) - as_double(b);
    operand_type_error(op, a, b);
  }
  if (op == "*") return py_mul(a, b);
  if (op == "/") {
    if (!nums) operand_type_error(op, a, b);
    if (as_double(b) == 0.0) fail("division by zero");
    return as_double(a) / as_double(b);
  }
  if (op == "//" || op == "%") return py_floordiv_mod(op, a, b);
  if (op == "**") return py_pow(a, b);
  fail(fmt::format("unknown operator '{}'", op));
}

json py_negate(const json& a, bool minus) {
  if (auto i = as_int(a)) {
    if (minus && *i == std::numeric_limits<int64_t>::min()) fail("integer overflow in unary '-'");
    return minus ? -*i : *i;
  }
  if (a.is_number_float()) return minus ? -a.get<double>() : a.get<double>();
  fail(fmt::format("bad operand type for unary {}: '{}'", minus ? '-' : '+', py_type(a)));
}

bool py_contains(const json& c, const json& item) {
  if (c.is_string()) {
    if (!item.is_string()) fail(fmt::format("'in <string>' requires string as left operand, not {}", py_type(item)));
    return c.get_ref<const std::string&>().find(item.get_ref<const std::string&>()) != std::string::npos;
  }
  if (c.is_array()) {
    for (const auto& e : c)
      if (py_equal(e, item)) return true;
    return false;
  }
  if (c.is_object()) {
    if (item.is_array() || item.is_object()) fail(fmt::format("unhashable type: '{}'", py_type(item)));
    return item.is_string() && c.contains(item.get<std::string>());
  }
  fail(fmt::format("argument of type '{}' is not iterable", py_type(c)));
}

namespace {

const std::vector<std::string>& methods_of(const json& v) {
  static const std::vector<std::string> str_m = {
      "capitalize", "casefold", "center", "count", "encode", "endswith", "expandtabs", "find", "format", "format_map",
      "index", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier", "islower", "isnumeric",
      "isprintable", "isspace", "istitle", "isupper", "join", "ljust", "lower", "lstrip", "maketrans", "partition",
      "removeprefix", "removesuffix", "replace", "rfind", "rindex", "rjust", "rpartition", "rsplit", "rstrip", "split",
      "splitlines", "startswith", "strip", "swapcase", "title", "translate", "upper", "zfill"};
  static const std::vector<std::string> list_m = {"append", "clear", "copy", "count", "extend", "index",
                                                  "insert", "pop", "remove", "reverse", "sort"};
  static const std::vector<std::string> dict_m = {"clear", "copy", "fromkeys", "get", "items", "keys",
                                                  "pop", "popitem", "setdefault", "update", "values"};
  static const std::vector<std::string> none;
  if (v.is_string()) return str_m;
  if (v.is_array()) return list_m;
  if (v.is_object()) return dict_m;
  return none;
}

bool is_method(const json& v, const std::string& name) {
  const auto& m = methods_of(v);
  return std::find(m.begin(), m.end(), name) != m.end();
}

}  // namespace

Value get_item(const Value& objv, const json& key, bool attr_syntax) {
  const json& obj = objv.get();
  std::string shown = attr_syntax ? key.get<std::string>() : py_repr(key);
  auto missing = [&]() {
    return Value::undef(attr_syntax ? fmt::format("'{} object' has no attribute '{}'", py_type(obj), key.get<std::string>())
                                    : fmt::format("'{} object' has no item {}", py_type(obj), py_repr(key)));
  };
  // getattr first for a.b (Python attributes, i.e. methods, win over keys)
  if (attr_syntax && is_method(obj, key.get<std::string>()))
    fail(fmt::format("'{}' is a method of {} here (Jinja looks up Python attributes before keys); call it, or write [{}] for the item",
                     key.get<std::string>(), py_type(obj), py_repr_str(key.get<std::string>())));
  if (obj.is_object()) {
    if (key.is_string()) {
      auto it = obj.find(key.get<std::string>());
      if (it != obj.end()) return *it;
      if (!attr_syntax && is_method(obj, key.get<std::string>()))
        fail(fmt::format("'{}' is a method of dict here (the item does not exist)", key.get<std::string>()));
    }
    return missing();
  }
  if (obj.is_array() || obj.is_string()) {
    auto idx = as_int(key);
    if (!idx || key.is_number_float()) {
      if (key.is_string() && is_method(obj, key.get<std::string>()))
        fail(fmt::format("'{}' is a method of {}; call it as .{}()", key.get<std::string>(), py_type(obj), key.get<std::string>()));
      return missing();
    }
    if (obj.is_array()) {
      int64_t n = static_cast<int64_t>(obj.size()), i = *idx < 0 ? *idx + n : *idx;
      if (i < 0 || i >= n) return missing();
      return obj[static_cast<size_t>(i)];
    }
    std::u32string u = utf8_decode(obj.get_ref<const std::string&>());
    int64_t n = static_cast<int64_t>(u.size()), i = *idx < 0 ? *idx + n : *idx;
    if (i < 0 || i >= n) return missing();
    return utf8_encode(u.substr(static_cast<size_t>(i), 1));
  }
  (void)shown;
  return missing();
}

Value get_slice(const Value& objv, const std::optional<int64_t>& start, const std::optional<int64_t>& stop,
                const std::optional<int64_t>& step_opt) {
  const json& obj = objv.get();
  if (!obj.is_array() && !obj.is_string())
    return Value::undef(fmt::format("'{} object' cannot be sliced", py_type(obj)));
  // Python slices a range into a range (printed "range(1, 3)"), which a list here would not print as
  if (!objv.range_repr.empty()) fail("slicing a range() object is not supported (apply |list first)");
  std::u32string u;
  if (obj.is_string()) u = utf8_decode(obj.get_ref<const std::string&>());
  int64_t n = obj.is_string() ? static_cast<int64_t>(u.size()) : static_cast<int64_t>(obj.size());
  int64_t step = step_opt.value_or(1);
  if (step == 0) fail("slice step cannot be zero");
  // PySlice_AdjustIndices
  auto adjust = [&](const std::optional<int64_t>& v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) {
      x += n;
      if (x < 0) x = step < 0 ? -1 : 0;
    } else if (x >= n) {
      x = step < 0 ? n - 1 : n;
    }
    return x;
  };
  int64_t a = adjust(start, step < 0 ? n - 1 : 0), b = adjust(stop, step < 0 ? -1 : n);
  std::vector<int64_t> idx;
  if (step > 0)
    for (int64_t i = a; i < b; i += step) idx.push_back(i);
  else
    for (int64_t i = a; i > b; i += step) idx.push_back(i);
  if (obj.is_string()) {
    std::u32string r;
    for (int64_t i : idx) r.push_back(u[static_cast<size_t>(i)]);
    return utf8_encode(r);
  }
  json r = json::array();
  for (int64_t i : idx) r.push_back(obj[static_cast<size_t>(i)]);
  return r;
}

}  // namespace kveval::eval::tmpl
