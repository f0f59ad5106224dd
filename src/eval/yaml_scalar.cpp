#include "eval/yaml_scalar.hpp"

#include <vector>

#include <fmt/format.h>

#include "eval/template/text.hpp"
#include "util/error.hpp"

namespace kveval::eval {

namespace {

/// PyYAML's scanner state over one quoted scalar.
struct Scanner {
  const std::string& s;
  size_t i;
  bool dbl;

  char peek(size_t k = 0) const { return i + k < s.size() ? s[i + k] : '\0'; }
  bool is_break(size_t k = 0) const { return peek(k) == '\n' || peek(k) == '\r'; }
  bool is_blank(size_t k = 0) const { return peek(k) == ' ' || peek(k) == '\t'; }
  bool at_end() const { return i >= s.size(); }
  /// scan_line_break: \r\n, \r and \n all read as \n.
  void line_break() {
    if (peek() == '\r' && peek(1) == '\n') ++i;
    ++i;
  }

  /// scan_flow_scalar_non_spaces
  void non_spaces(std::string& out) {
    for (;;) {
      while (!at_end() && peek() != '\'' && peek() != '"' && peek() != '\\' && !is_blank() && !is_break())
        out += s[i++];
      if (at_end()) return;
      char c = peek();
      if (!dbl && c == '\'' && peek(1) == '\'') {
        out += '\'';
        i += 2;
      } else if ((dbl && c == '\'') || (!dbl && (c == '"' || c == '\\'))) {
        out += c;
        ++i;
      } else if (dbl && c == '\\') {
        ++i;
        escape(out);
      } else {
        return;
      }
    }
  }

  void escape(std::string& out) {
    char e = peek();
    static const std::string from = "0abt\tnvfre \"/\\", to = std::string("\0\a\b\t\t\n\v\f\r\x1b \"/\\", 14);
    size_t k = from.find(e);
    if (e != '\0' && k != std::string::npos) {
      out += to[k];
      ++i;
    } else if (e == 'N' || e == '_' || e == 'L' || e == 'P') {
      tmpl::utf8_append(out, e == 'N' ? 0x85 : e == '_' ? 0xA0 : e == 'L' ? 0x2028 : 0x2029);
      ++i;
    } else if (e == 'x' || e == 'u' || e == 'U') {
      size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
      ++i;
      uint32_t code = 0;
      for (size_t j = 0; j < n; ++j) {
        char h = peek(j);
        int v = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
        if (v < 0)
          throw SpecError(fmt::format("double-quoted scalar: expected {} hexadecimal digits after \\{}", n, e));
        code = code * 16 + static_cast<uint32_t>(v);
      }
      i += n;
      if ((code >= 0xD800 && code <= 0xDFFF) || code > 0x10FFFF)
        throw SpecError(fmt::format("double-quoted scalar: \\{} escape U+{:X} is not a Unicode scalar value", e, code));
      tmpl::utf8_append(out, code);
    } else if (is_break()) {
      line_break();
      breaks(out);
    } else {
      throw SpecError(fmt::format("double-quoted scalar: unknown escape character '{}'", e));
    }
  }

  /// scan_flow_scalar_spaces
  void spaces(std::string& out) {
    size_t start = i;
    while (is_blank()) ++i;
    if (at_end()) throw SpecError("quoted scalar: no closing quote before the end of the file");
    if (is_break()) {
      line_break();
      std::string b;
      breaks(b);
      out += b.empty() ? std::string(" ") : b;
    } else {
      out.append(s, start, i - start);
    }
  }

  /// scan_flow_scalar_breaks: blanks dropped, each further line break a \n
  void breaks(std::string& out) {
    for (;;) {
      while (is_blank()) ++i;
      if (!is_break()) return;
      line_break();
      out += '\n';
    }
  }
};

}  // namespace

std::string read_quoted_scalar(const std::string& src, size_t pos) {
  if (pos >= src.size() || (src[pos] != '\'' && src[pos] != '"'))
    throw SpecError("internal: a quoted scalar does not start with a quote");
  const char quote = src[pos];
  Scanner sc{src, pos + 1, quote == '"'};
  std::string out;
  sc.non_spaces(out);
  while (sc.peek() != quote || sc.at_end()) {
    if (sc.at_end()) throw SpecError("quoted scalar: no closing quote before the end of the file");
    sc.spaces(out);
    sc.non_spaces(out);
  }
  return out;
}

}  // namespace kveval::eval
