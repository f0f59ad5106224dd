// Lexer of the Jinja2 subset, after jinja2/lexer.py (Jinja 3.1): data up to
// the first "{{", "{%" or "{#"; "-" after an opening delimiter strips the
// whitespace before it (str.rstrip), "-" before a closing one strips the
// whitespace after it (\s*); "+" keeps the whitespace that lstrip_blocks and
// trim_blocks would drop. Those two are off in lm-eval's environment and on in
// Hugging Face's chat one. Closing delimiters only count when (), [] and {} are
// balanced.
#include <algorithm>
#include <cctype>
#include <cstring>
#include <string_view>

#include <fmt/format.h>

#include "eval/template/ast.hpp"
#include "eval/template/template.hpp"
#include "eval/template/text.hpp"

namespace kveval::eval::tmpl {

namespace {

struct Lexer {
  Lexer(const std::string& source, bool hf_chat) : src(source), trim_blocks(hf_chat), lstrip_blocks(hf_chat) {}
  const std::string& src;
  bool trim_blocks = false;    ///< drop the first newline after a block or comment tag
  bool lstrip_blocks = false;  ///< drop spaces and tabs from a line's start to a block or comment tag
  size_t pos = 0;
  std::vector<Token> out;
  /// Line/column bookkeeping: the position last resolved and its line and column.
  /// Tokens come in source order, so each call only steps over the text since
  /// the previous one (the whole lexing is linear in the source).
  size_t lc_at = 0;
  int lc_line = 1, lc_col = 1;
  uint64_t lc_scanned = 0;  ///< characters stepped over by line_col

  [[noreturn]] void fail(size_t at, const std::string& msg) {
    auto [l, c] = line_col(at);
    throw TemplateError(l, c, msg);
  }
  /// 1-based line and column (in code points) of byte offset `at`.
  std::pair<int, int> line_col(size_t at) {
    at = std::min(at, src.size());
    if (at < lc_at) lc_at = 0, lc_line = 1, lc_col = 1;  // a position behind the last one: count again
    for (; lc_at < at; ++lc_at, ++lc_scanned) {
      if (src[lc_at] == '\n') ++lc_line, lc_col = 1;
      else if ((static_cast<unsigned char>(src[lc_at]) & 0xC0) != 0x80) ++lc_col;
    }
    return {lc_line, lc_col};
  }
  void push(TokKind k, size_t at, std::string text = {}) {
    Token t;
    t.kind = k;
    t.text = std::move(text);
    auto [l, c] = line_col(at);
    t.line = l, t.col = c;
    out.push_back(std::move(t));
  }
  bool starts(size_t at, std::string_view s) const { return src.compare(at, s.size(), s) == 0; }

  /// Python whitespace (\s) starting at `at`: returns the first position after it.
  size_t skip_space(size_t at) const {
    while (at < src.size()) {
      size_t len = 1;
      unsigned char c = static_cast<unsigned char>(src[at]);
      char32_t cp = c;
      if (c >= 0x80) {
        len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
        try {
          std::u32string u = utf8_decode(std::string_view(src).substr(at, len));
          cp = u.empty() ? 0 : u[0];
        } catch (const std::exception&) {
          return at;
        }
      }
      if (!py_isspace(cp)) return at;
      at += len;
    }
    return at;
  }

  /// Emits text data before a tag whose sign ('-', '+' or none) is `sign`:
  /// rstrip() for '-'; with lstrip_blocks and a block or comment tag (`lstrip`)
  /// not marked '+', the whitespace between the line's start and the tag goes
  /// (jinja2/lexer.py: when the text after its last newline is all \s, and the
  /// text starts a line when it has no newline).
  void data(size_t from, size_t to, char sign, bool lstrip = false) {
    std::string d = src.substr(from, to - from);
    if (sign == '-') {
      d = py_strip(d, false, true);
    } else if (sign != '+' && lstrip && lstrip_blocks) {
      size_t l_pos = d.rfind('\n');
      l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
      bool line_starting = from == 0 || src[from - 1] == '\n';
      if ((l_pos > 0 || line_starting) && l_pos < d.size() && py_strip(d.substr(l_pos), true, true).empty())
        d.resize(l_pos);
    }
    if (!d.empty()) push(TokKind::Data, from, std::move(d));
  }
  /// After a `%}` or `#}` without a sign: trim_blocks drops one newline.
  void trim_newline() {
    if (trim_blocks && pos < src.size() && src[pos] == '\n') ++pos;
  }

  void run() {
    while (pos < src.size()) {
      size_t tag = src.find('{', pos);
      while (tag != std::string::npos && !(tag + 1 < src.size() && (src[tag + 1] == '{' || src[tag + 1] == '%' || src[tag + 1] == '#')))
        tag = src.find('{', tag + 1);
      if (tag == std::string::npos) {
        data(pos, src.size(), '\0');
        break;
      }
      char kind = src[tag + 1];
      char sign = tag + 2 < src.size() ? src[tag + 2] : '\0';
      size_t body = tag + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      if (kind == '#') {
        data(pos, tag, sign, true);
        size_t end = src.find("#}", body);
        if (end == std::string::npos) fail(tag, "missing end of comment tag '#}'");
        pos = end + 2;
        if (end > body && src[end - 1] == '-') pos = skip_space(pos);
        else if (!(end > body && src[end - 1] == '+')) trim_newline();
        continue;
      }
      if (kind == '%') {
        // {% raw %} ... {% endraw %}: verbatim data
        size_t p = skip_space(body);
        if (starts(p, "raw")) {
          size_t q = skip_space(p + 3);
          bool dash = starts(q, "-%}");
          if (dash || starts(q, "%}")) {
            data(pos, tag, sign, true);
            size_t content = q + (dash ? 3 : 2);
            if (dash) content = skip_space(content);
            size_t search = content;
            while (true) {
              size_t e = src.find("{%", search);
              if (e == std::string::npos) fail(tag, "missing end of raw directive '{% endraw %}'");
              char esign = e + 2 < src.size() ? src[e + 2] : '\0';
              size_t r = skip_space(e + 2 + ((esign == '-' || esign == '+') ? 1 : 0));
              if (starts(r, "endraw")) {
                size_t r2 = skip_space(r + 6);
                bool edash = starts(r2, "-%}");
                if (edash || starts(r2, "%}") || starts(r2, "+%}")) {
                  data(content, e, esign, true);
                  pos = r2 + (edash || starts(r2, "+%}") ? 3 : 2);
                  if (edash) pos = skip_space(pos);
                  else if (!starts(r2, "+%}")) trim_newline();
                  break;
                }
              }
              search = e + 2;
            }
            continue;
          }
        }
      }
      bool is_var = kind == '{';
      data(pos, tag, sign, !is_var);
      push(is_var ? TokKind::VarBegin : TokKind::BlockBegin, tag);
      pos = body;
      tag_tokens(is_var, tag);
    }
    push(TokKind::Eof, src.size());
  }

  void tag_tokens(bool is_var, size_t open_at) {
    std::string balance;
    while (true) {
      if (pos >= src.size()) fail(open_at, fmt::format("unexpected end of template: '{}' is never closed", is_var ? "{{" : "{%"));
      if (balance.empty()) {
        if (is_var) {
          if (starts(pos, "-}}")) return push(TokKind::VarEnd, pos), void(pos = skip_space(pos + 3));
          if (starts(pos, "}}")) return push(TokKind::VarEnd, pos), void(pos += 2);
        } else {
          if (starts(pos, "-%}")) return push(TokKind::BlockEnd, pos), void(pos = skip_space(pos + 3));
          if (starts(pos, "+%}")) return push(TokKind::BlockEnd, pos), void(pos += 3);
          if (starts(pos, "%}")) return push(TokKind::BlockEnd, pos), void(pos += 2), trim_newline();
        }
      }
      size_t sp = skip_space(pos);
      if (sp != pos) {
        pos = sp;
        continue;
      }
      unsigned char c = static_cast<unsigned char>(src[pos]);
      if (std::isdigit(c)) {
        number();
      } else if (std::isalpha(c) || c == '_') {
        size_t e = pos;
        while (e < src.size() && (std::isalnum(static_cast<unsigned char>(src[e])) || src[e] == '_')) ++e;
        push(TokKind::Name, pos, src.substr(pos, e - pos));
        pos = e;
      } else if (c == '\'' || c == '"') {
        string_literal();
      } else {
        op(balance);
      }
    }
  }

  /// End of a run of decimal digits with single underscores between them,
  /// `(\d+_)*\d+`, starting at `at`; npos when `at` holds no digit.
  size_t digits_end(size_t at) const {
    auto dec = [](char ch) { return ch >= '0' && ch <= '9'; };
    size_t e = at;
    if (e >= src.size() || !dec(src[e])) return std::string::npos;
    while (true) {
      while (e < src.size() && dec(src[e])) ++e;
      if (e + 1 < src.size() && src[e] == '_' && dec(src[e + 1])) {
        ++e;
        continue;
      }
      return e;
    }
  }

  /// End of a float literal at `start` whose integer digits end at `ip`:
  /// `(\d+_)*\d+ ( (\.(\d+_)*\d+)? e[+-]?(\d+_)*\d+ | \.(\d+_)*\d+ )`; npos when it is no float.
  size_t float_end(size_t ip) const {
    size_t e = ip;
    bool frac = false;
    if (e < src.size() && src[e] == '.') {
      size_t f = digits_end(e + 1);
      if (f != std::string::npos) e = f, frac = true;
    }
    size_t ex = std::string::npos;
    if (e < src.size() && (src[e] == 'e' || src[e] == 'E')) {
      size_t s = e + 1;
      if (s < src.size() && (src[s] == '+' || src[s] == '-')) ++s;
      ex = digits_end(s);
    }
    if (ex != std::string::npos) return ex;
    return frac ? e : std::string::npos;
  }

  /// Appends `tok` as the literal src[start, end) and moves past it.
  void push_literal(Token tok, size_t start, size_t end) {
    auto [l, c] = line_col(start);
    tok.line = l, tok.col = c, tok.text = src.substr(start, end - start);
    out.push_back(tok);
    pos = end;
  }

  /// End of an integer literal at `start` (`ip`: where its decimal digits end):
  /// 0b / 0o / 0x prefixes, [1-9](_?\d)*, 0(_?0)*; sets `base` and `d0`, where its digits start.
  size_t integer_end(size_t start, size_t ip, int& base, size_t& d0) {
    base = 10;
    d0 = start;
    size_t end;
    if (src[start] == '0' && start + 1 < src.size() && src[start + 1] != '\0' && std::strchr("bBoOxX", src[start + 1])) {
      char p = static_cast<char>(std::tolower(static_cast<unsigned char>(src[start + 1])));
      base = p == 'b' ? 2 : p == 'o' ? 8 : 16;
      d0 = start + 2;
      end = d0;
      while (end < src.size()) {
        char ch = src[end];
        bool ok = ch == '_' || (base == 2 ? (ch == '0' || ch == '1') : base == 8 ? (ch >= '0' && ch <= '7') : std::isxdigit(static_cast<unsigned char>(ch)));
        if (!ok) break;
        ++end;
      }
      if (end == d0) fail(start, "invalid integer literal");
    } else if (src[start] == '0') {
      end = start + 1;
      while (end < src.size()) {
        if (src[end] == '0') ++end;
        else if (src[end] == '_' && end + 1 < src.size() && src[end + 1] == '0') end += 2;
        else break;
      }
    } else {
      end = ip;
    }
    return end;
  }

  /// A number literal at pos: a float (not right after a '.', where digits
  /// are an attribute such as x.0) or a 64-bit integer.
  void number() {
    const size_t start = pos;
    const bool after_dot = start > 0 && src[start - 1] == '.';
    const size_t ip = digits_end(start);
    if (!after_dot) {
      if (const size_t end = float_end(ip); end != std::string::npos) {
        std::string t;
        for (size_t i = start; i < end; ++i)
          if (src[i] != '_') t += src[i];
        Token tok;
        tok.kind = TokKind::Float;
        tok.fval = std::strtod(t.c_str(), nullptr);
        return push_literal(tok, start, end);
      }
    }
    int base;
    size_t d0;
    const size_t end = integer_end(start, ip, base, d0);
    uint64_t v = 0;
    for (size_t i = d0; i < end; ++i) {
      if (src[i] == '_') continue;
      int dv = std::isdigit(static_cast<unsigned char>(src[i])) ? src[i] - '0' : std::tolower(static_cast<unsigned char>(src[i])) - 'a' + 10;
      if (v > (static_cast<uint64_t>(INT64_MAX) - static_cast<uint64_t>(dv)) / static_cast<uint64_t>(base))
        fail(start, fmt::format("integer literal {} is out of range (64-bit integers only)", src.substr(start, end - start)));
      v = v * static_cast<uint64_t>(base) + static_cast<uint64_t>(dv);
    }
    Token tok;
    tok.kind = TokKind::Integer;
    tok.ival = static_cast<int64_t>(v);
    push_literal(tok, start, end);
  }

  void string_literal() {
    char q = src[pos];
    size_t start = pos, i = pos + 1;
    std::string raw;
    while (true) {
      if (i >= src.size()) fail(start, "unterminated string literal");
      if (src[i] == '\\') {
        if (i + 1 >= src.size()) fail(start, "unterminated string literal");
        raw += src[i];
        raw += src[i + 1];
        i += 2;
        continue;
      }
      if (src[i] == q) break;
      raw += src[i++];
    }
    pos = i + 1;
    // Jinja decodes the body with Python's "unicode-escape" codec; non-ASCII text is kept as is
    std::string v;
    for (size_t k = 0; k < raw.size();) {
      if (raw[k] != '\\') {
        v += raw[k++];
        continue;
      }
      try {
        decode_python_escape(raw, k, v);
      } catch (const EscapeError& e) {
        fail(start, e.what());
      }
    }
    push(TokKind::String, start, std::move(v));
  }

  void op(std::string& balance) {
    static const char* two[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* t : two)
      if (starts(pos, t)) {
        push(TokKind::Op, pos, t);
        pos += 2;
        return;
      }
    char c = src[pos];
    if (!std::strchr("+-/*%~[](){}><=.:|,;", c) || c == '\0') {
      std::string shown = c >= 0x20 && static_cast<unsigned char>(c) < 0x7F ? std::string(1, c) : fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
      fail(pos, fmt::format("unexpected character '{}'", shown));
    }
    if (c == '(' || c == '[' || c == '{') {
      balance += c == '(' ? ')' : c == '[' ? ']' : '}';
    } else if (c == ')' || c == ']' || c == '}') {
      if (balance.empty()) fail(pos, fmt::format("unexpected '{}'", c));
      if (balance.back() != c) fail(pos, fmt::format("unexpected '{}', expected '{}'", c, balance.back()));
      balance.pop_back();
    }
    push(TokKind::Op, pos, std::string(1, c));
    ++pos;
  }
};

}  // namespace

std::vector<Token> lex(const std::string& source, uint64_t* chars_scanned, bool hf_chat) {
  Lexer lx{source, hf_chat};
  lx.run();
  if (chars_scanned) *chars_scanned = lx.lc_scanned;
  return std::move(lx.out);
}

std::string describe(const Token& k) {
  switch (k.kind) {
    case TokKind::Data: return "template text";
    case TokKind::VarBegin: return "'{{'";
    case TokKind::VarEnd: return "'}}'";
    case TokKind::BlockBegin: return "'{%'";
    case TokKind::BlockEnd: return "'%}'";
    case TokKind::Name: return fmt::format("'{}'", k.text);
    case TokKind::String: return "a string";
    case TokKind::Integer: case TokKind::Float: return fmt::format("number {}", k.text);
    case TokKind::Op: return fmt::format("'{}'", k.text);
    case TokKind::Eof: return "end of template";
  }
  return "?";
}

}  // namespace kveval::eval::tmpl
