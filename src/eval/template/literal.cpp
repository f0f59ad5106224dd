// Python's ast.literal_eval for what templates print (lm-eval applies it to
// rendered doc_to_choice / doc_to_target text, lm_eval/api/task.py).
#include <cctype>

#include <fmt/format.h>

#include "eval/template/template.hpp"
#include "eval/template/text.hpp"

namespace kveval::eval::tmpl {

namespace {

struct Lit {
  std::string_view s;
  size_t i = 0;
  int depth = 0;

  [[noreturn]] void fail(const std::string& msg) const {
    throw ArgumentError(fmt::format("not a Python literal at column {}: {}", i + 1, msg));
  }
  void ws() {
    while (i < s.size()) {
      unsigned char c = static_cast<unsigned char>(s[i]);
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') ++i;
      else if (c == '\\' && i + 1 < s.size() && s[i + 1] == '\n') i += 2;  // explicit line joining
      else break;
    }
  }
  bool eat(char c) {
    ws();
    if (i < s.size() && s[i] == c) {
      ++i;
      return true;
    }
    return false;
  }

  nlohmann::json value() {
    ws();
    if (i >= s.size()) fail("unexpected end");
    if (++depth > 200) fail("nested too deeply");
    nlohmann::json v = value_inner();
    --depth;
    return v;
  }

  nlohmann::json value_inner() {
    char c = s[i];
    if (c == '[' || c == '(') {
      char close = c == '[' ? ']' : ')';
      ++i;
      nlohmann::json a = nlohmann::json::array();
      bool comma = false;
      while (!eat(close)) {
        if (!a.empty()) {
          if (!eat(',')) fail(fmt::format("expected ',' or '{}'", close));
          comma = true;
          if (eat(close)) break;
        }
        a.push_back(value());
      }
      if (c == '(' && a.size() == 1 && !comma) return a[0];  // (x) is x, not a tuple
      return a;
    }
    if (c == '{') {
      ++i;
      nlohmann::json o = nlohmann::json::object();
      bool first = true;
      while (!eat('}')) {
        if (!first && !eat(',')) fail("expected ',' or '}'");
        if (!first && eat('}')) break;
        first = false;
        nlohmann::json k = value();
        if (!k.is_string()) fail("only string keys are supported in dicts");
        if (!eat(':')) fail("expected ':'");
        o[k.get<std::string>()] = value();
      }
      return o;
    }
    if (c == '\'' || c == '"') {
      std::string out;
      while (i < s.size() && (s[i] == '\'' || s[i] == '"')) {
        out += string();
        ws();
      }
      return out;
    }
    if (c == '-' || c == '+') {
      ++i;
      ws();
      nlohmann::json n = value();
      if (!n.is_number()) fail("unary sign on a non-number");
      if (c == '+') return n;
      if (n.is_number_float()) return -n.get<double>();
      if (n.is_number_unsigned() && n.get<uint64_t>() == 9223372036854775808ull) return INT64_MIN;
      return -n.get<int64_t>();
    }
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') return number();
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t a = i;
      while (i < s.size() && (std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '_')) ++i;
      std::string_view w = s.substr(a, i - a);
      if (w == "True") return true;
      if (w == "False") return false;
      if (w == "None") return nullptr;
      if (i < s.size() && (s[i] == '\'' || s[i] == '"')) fail(fmt::format("string prefix '{}' is not supported", w));
      i = a;
      fail(fmt::format("name '{}' is not a literal", w));
    }
    fail(fmt::format("unexpected character '{}'", c));
  }

  nlohmann::json number() {
    size_t a = i;
    bool is_float = false;
    while (i < s.size() && (std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '.' || s[i] == '_' ||
                            ((s[i] == '+' || s[i] == '-') && i > a && (s[i - 1] == 'e' || s[i - 1] == 'E')))) {
      if (s[i] == '.' || s[i] == 'e' || s[i] == 'E') is_float = true;
      ++i;
    }
    std::string t;
    for (size_t k = a; k < i; ++k)
      if (s[k] != '_') t += s[k];
    if (t.size() > 1 && t[0] == '0' && (t[1] == 'x' || t[1] == 'X' || t[1] == 'o' || t[1] == 'O' || t[1] == 'b' || t[1] == 'B')) {
      int base = (t[1] == 'x' || t[1] == 'X') ? 16 : (t[1] == 'o' || t[1] == 'O') ? 8 : 2;
      errno = 0;
      char* end = nullptr;
      unsigned long long v = std::strtoull(t.c_str() + 2, &end, base);
      if (errno || *end || t.size() == 2 || v > static_cast<unsigned long long>(INT64_MAX)) fail(fmt::format("bad integer '{}'", t));
      return static_cast<int64_t>(v);
    }
    if (is_float || t.find_first_of("eE") != std::string::npos) {
      char* end = nullptr;
      double d = std::strtod(t.c_str(), &end);
      if (*end || t.find_first_of("xXpP") != std::string::npos) fail(fmt::format("bad number '{}'", t));
      return d;
    }
    for (char ch : t)
      if (!std::isdigit(static_cast<unsigned char>(ch))) fail(fmt::format("bad number '{}'", t));
    if (t.size() > 1 && t[0] == '0' && t.find_first_not_of('0') != std::string::npos) fail("leading zeros in an integer");
    errno = 0;
    unsigned long long v = std::strtoull(t.c_str(), nullptr, 10);
    if (errno || v > 9223372036854775808ull) fail(fmt::format("integer {} is out of range (64-bit integers only)", t));
    if (v == 9223372036854775808ull) return nlohmann::json(static_cast<uint64_t>(v));  // only valid after '-'
    return static_cast<int64_t>(v);
  }

  std::string string() {
    char q = s[i];
    bool triple = s.substr(i, 3) == std::string(3, q);
    i += triple ? 3 : 1;
    std::string out;
    while (true) {
      if (i >= s.size()) fail("unterminated string");
      char c = s[i];
      if (triple ? s.substr(i, 3) == std::string(3, q) : c == q) {
        i += triple ? 3 : 1;
        return out;
      }
      if (c == '\n' && !triple) fail("newline in a string");
      if (c != '\\') {
        out += c;
        ++i;
        continue;
      }
      if (i + 1 >= s.size()) fail("unterminated string");
      try {
        decode_python_escape(s, i, out);
      } catch (const EscapeError& e) {
        fail(e.what());
      }
    }
  }
};

}  // namespace

nlohmann::json literal_eval(std::string_view text) {
  Lit p{text};
  nlohmann::json v = p.value();
  p.ws();
  if (p.i != text.size()) p.fail("unexpected text after the literal");
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    throw ArgumentError("not a Python literal: integer out of range (64-bit integers only)");
  return v;
}

}  // namespace kveval::eval::tmpl
