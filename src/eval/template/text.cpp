#include "eval/template/text.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <iterator>
#include <memory>

#include <fmt/format.h>
#include <unicode/uchar.h>
#include <unicode/ucasemap.h>
#include <unicode/ustring.h>

#include "util/error.hpp"
#include "util/utf8.hpp"
#include "util/whitespace.hpp"

namespace kveval::eval::tmpl {

std::u32string utf8_decode(std::string_view s) {
  // validated by kveval's one UTF-8 validator (util/utf8.hpp), then decoded
  if (const size_t bad = first_invalid_utf8(s); bad != std::string_view::npos)
    throw ArgumentError(fmt::format("invalid UTF-8 at byte {}", bad));
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    char32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + static_cast<size_t>(k)]) & 0x3F);
    out.push_back(cp);
    i += static_cast<size_t>(n);
  }
  return out;
}

void utf8_append(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    if (c >= 0xD800 && c <= 0xDFFF) throw ArgumentError(fmt::format("surrogate code point U+{:04X}", static_cast<uint32_t>(c)));
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c <= 0x10FFFF) {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    throw ArgumentError(fmt::format("code point 0x{:X} out of range", static_cast<uint32_t>(c)));
  }
}

std::string utf8_encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) utf8_append(out, c);
  return out;
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (char c : s)
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;
  return n;
}

void decode_python_escape(std::string_view s, size_t& i, std::string& out) {
  const char e = s[i + 1];
  i += 2;
  auto hex = [&](int n) {
    uint32_t cp = 0;
    for (int k = 0; k < n; ++k, ++i) {
      if (i >= s.size() || !std::isxdigit(static_cast<unsigned char>(s[i])))
        throw EscapeError(fmt::format("truncated \\{} escape in string literal", e));
      const char h = s[i];
      cp = cp * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0'
                                                                                      : std::tolower(static_cast<unsigned char>(h)) - 'a' + 10);
    }
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      throw EscapeError(fmt::format("escape \\{} gives code point 0x{:X}, which UTF-8 cannot hold", e, cp));
    utf8_append(out, cp);
  };
  switch (e) {
    case '\n': break;
    case '\\': out += '\\'; break;
    case '\'': out += '\''; break;
    case '"': out += '"'; break;
    case 'a': out += '\a'; break;
    case 'b': out += '\b'; break;
    case 'f': out += '\f'; break;
    case 'n': out += '\n'; break;
    case 'r': out += '\r'; break;
    case 't': out += '\t'; break;
    case 'v': out += '\v'; break;
    case 'x': hex(2); break;
    case 'u': hex(4); break;
    case 'U': hex(8); break;
    case 'N': throw EscapeError("\\N{...} escapes are not supported");
    default:
      if (e >= '0' && e <= '7') {
        uint32_t cp = static_cast<uint32_t>(e - '0');
        for (int k = 0; k < 2 && i < s.size() && s[i] >= '0' && s[i] <= '7'; ++k) cp = cp * 8 + static_cast<uint32_t>(s[i++] - '0');
        utf8_append(out, cp);
      } else {
        out += '\\';  // an unknown escape stays as it is
        out += e;
      }
  }
}

bool py_isspace(char32_t c) { return util::is_space(c); }  // kveval's one whitespace predicate

bool py_isprintable(char32_t c) {
  if (c == ' ') return true;
  switch (u_charType(static_cast<UChar32>(c))) {
    case U_CONTROL_CHAR: case U_FORMAT_CHAR: case U_SURROGATE: case U_PRIVATE_USE_CHAR: case U_UNASSIGNED:
    case U_LINE_SEPARATOR: case U_PARAGRAPH_SEPARATOR: case U_SPACE_SEPARATOR:
      return false;
    default:
      return true;
  }
}

std::string py_strip(std::string_view s, bool left, bool right, const std::u32string* chars) {
  std::u32string u = utf8_decode(s);
  auto strip_it = [&](char32_t c) { return chars ? chars->find(c) != std::u32string::npos : py_isspace(c); };
  size_t a = 0, b = u.size();
  if (left)
    while (a < b && strip_it(u[a])) ++a;
  if (right)
    while (b > a && strip_it(u[b - 1])) --b;
  return utf8_encode(std::u32string_view(u).substr(a, b - a));
}

namespace {

enum class Case { Lower, Upper, Title };

std::string icu_case(std::string_view s, Case which) {
  bool ascii = true;
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) ascii = false;
  if (ascii && which != Case::Title) {
    std::string out(s);
    for (char& c : out) {
      if (which == Case::Lower && c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      if (which == Case::Upper && c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    }
    return out;
  }
  UErrorCode err = U_ZERO_ERROR;
  // Title: the whole string is one "word" whose first code point is title-cased
  // as it stands (no adjustment to the first letter), like Python's capitalize().
  uint32_t options = which == Case::Title ? (U_TITLECASE_WHOLE_STRING | U_TITLECASE_NO_BREAK_ADJUSTMENT) : 0;
  std::unique_ptr<UCaseMap, void (*)(UCaseMap*)> map(ucasemap_open("", options, &err), ucasemap_close);
  if (U_FAILURE(err)) throw Error(fmt::format("ICU ucasemap_open: {}", u_errorName(err)));
  std::string out(s.size() * 3 + 16, '\0');
  for (int attempt = 0; attempt < 2; ++attempt) {
    err = U_ZERO_ERROR;
    int32_t n;
    if (which == Case::Lower)
      n = ucasemap_utf8ToLower(map.get(), out.data(), static_cast<int32_t>(out.size()), s.data(), static_cast<int32_t>(s.size()), &err);
    else if (which == Case::Upper)
      n = ucasemap_utf8ToUpper(map.get(), out.data(), static_cast<int32_t>(out.size()), s.data(), static_cast<int32_t>(s.size()), &err);
    else
      n = ucasemap_utf8ToTitle(map.get(), out.data(), static_cast<int32_t>(out.size()), s.data(), static_cast<int32_t>(s.size()), &err);
    if (err == U_BUFFER_OVERFLOW_ERROR) {
      out.assign(static_cast<size_t>(n) + 1, '\0');
      continue;
    }
    if (U_FAILURE(err)) throw Error(fmt::format("ICU case mapping: {}", u_errorName(err)));
    out.resize(static_cast<size_t>(n));
    return out;
  }
  throw Error("ICU case mapping: buffer size");
}

}  // namespace

std::string py_lower(std::string_view s) { return icu_case(s, Case::Lower); }
std::string py_upper(std::string_view s) { return icu_case(s, Case::Upper); }
std::string py_capitalize(std::string_view s) { return s.empty() ? std::string() : icu_case(s, Case::Title); }

std::vector<std::string> py_split(std::string_view s, const std::string* sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) throw ArgumentError("empty separator");
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      size_t f = s.find(*sep, pos);
      if (f == std::string_view::npos) break;
      out.emplace_back(s.substr(pos, f - pos));
      pos = f + sep->size();
    }
    out.emplace_back(s.substr(pos));
    return out;
  }
  std::u32string u = utf8_decode(s);
  size_t i = 0, n = u.size();
  while (true) {
    while (i < n && py_isspace(u[i])) ++i;
    if (i == n) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      // the rest, with trailing whitespace removed (CPython split_whitespace)
      size_t e = n;
      while (e > i && py_isspace(u[e - 1])) --e;
      out.push_back(utf8_encode(std::u32string_view(u).substr(i, e - i)));
      break;
    }
    size_t j = i;
    while (j < n && !py_isspace(u[j])) ++j;
    out.push_back(utf8_encode(std::u32string_view(u).substr(i, j - i)));
    i = j;
  }
  return out;
}

std::string py_replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count) {
  std::string out;
  if (old.empty()) {
    std::u32string u = utf8_decode(s);
    int64_t done = 0;
    for (char32_t c : u) {
      if (count < 0 || done < count) out += repl, ++done;
      utf8_append(out, c);
    }
    if (count < 0 || done < count) out += repl;
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t f = s.find(old, pos);
    if (f == std::string_view::npos) break;
    out.append(s.substr(pos, f - pos));
    out.append(repl);
    pos = f + old.size();
    ++done;
  }
  out.append(s.substr(pos));
  return out;
}

std::string py_repr_str(std::string_view s) {
  std::u32string u = utf8_decode(s);
  bool has_single = u.find(U'\'') != std::u32string::npos, has_double = u.find(U'"') != std::u32string::npos;
  char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : u) {
    if (c == static_cast<char32_t>(quote) || c == '\\') out += '\\', out += static_cast<char>(c);
    else if (c == '\t') out += "\\t";
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c < 0x20 || c == 0x7F) out += fmt::format("\\x{:02x}", static_cast<uint32_t>(c));
    else if (c < 0x7F) out += static_cast<char>(c);
    else if (py_isprintable(c)) utf8_append(out, c);
    else if (c <= 0xFF) out += fmt::format("\\x{:02x}", static_cast<uint32_t>(c));
    else if (c <= 0xFFFF) out += fmt::format("\\u{:04x}", static_cast<uint32_t>(c));
    else out += fmt::format("\\U{:08x}", static_cast<uint32_t>(c));
  }
  out += quote;
  return out;
}

std::string py_float_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  if (x == 0) return std::signbit(x) ? "-0.0" : "0.0";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string sci(buf, r.ptr);  // "-d.ddde+XX" shortest round-trip
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  int exp = std::stoi(sci.substr(e + 1));
  int decpt = exp + 1;  // value = 0.d1d2... * 10^decpt
  int n = static_cast<int>(digits.size());
  // Built by appending in place (no temporary strings joined with operator+).
  std::string out = neg ? "-" : "";
  if (exp >= -4 && exp < 16) {
    if (decpt <= 0) {
      out.append("0.").append(static_cast<size_t>(-decpt), '0').append(digits);
    } else if (decpt >= n) {
      out.append(digits).append(static_cast<size_t>(decpt - n), '0').append(".0");
    } else {
      const auto d = static_cast<size_t>(decpt);
      out.append(digits, 0, d).append(1, '.').append(digits, d);
    }
  } else {
    out.append(digits, 0, 1);
    if (n > 1) out.append(1, '.').append(digits, 1);
    fmt::format_to(std::back_inserter(out), "e{}{:02d}", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  }
  return out;
}

}  // namespace kveval::eval::tmpl
