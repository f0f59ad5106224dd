#include "eval/filters.hpp"

#include <cstring>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <fmt/format.h>
#include <pcre2.h>

#include "eval/template/text.hpp"
#include "util/error.hpp"

namespace kveval::eval {

namespace {

/// Python's \Z (end of string) is PCRE2's \z; everything else we use reads the same.
std::string python_to_pcre2(const std::string& p) {
  std::string out;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == '\\' && i + 1 < p.size()) {
      out += '\\';
      out += p[i + 1] == 'Z' ? 'z' : p[i + 1];
      ++i;
    } else {
      out += p[i];
    }
  }
  return out;
}

pcre2_code* code_of(void* c) { return static_cast<pcre2_code*>(c); }

struct MatchData {
  pcre2_match_data* md;
  explicit MatchData(pcre2_code* c) : md(pcre2_match_data_create_from_pattern(c, nullptr)) {
    if (!md) throw Error("PCRE2: out of memory");
  }
  ~MatchData() { pcre2_match_data_free(md); }
};

}  // namespace

PyRegex::PyRegex(const std::string& pattern) : pattern_(pattern) {
  std::string p = python_to_pcre2(pattern);
  int err = 0;
  PCRE2_SIZE off = 0;
  pcre2_code* c = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(), PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
  if (!c) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(err, buf, sizeof buf);
    throw SpecError(fmt::format("regex \"{}\": {} at offset {}", pattern, reinterpret_cast<const char*>(buf), off));
  }
  code_ = c;
  uint32_t n = 0;
  pcre2_pattern_info(c, PCRE2_INFO_CAPTURECOUNT, &n);
  groups_ = static_cast<int>(n);
}

PyRegex::~PyRegex() { pcre2_code_free(code_of(code_)); }

std::vector<std::vector<std::string>> PyRegex::findall(const std::string& text) const {
  std::vector<std::vector<std::string>> out;
  MatchData m(code_of(code_));
  PCRE2_SIZE start = 0;
  uint32_t opts = 0;
  while (start <= text.size()) {
    int rc = pcre2_match(code_of(code_), reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), start, opts, m.md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) {
      if (opts == 0) break;
      // an empty match was refused here: advance one code point and retry
      opts = 0;
      ++start;
      while (start < text.size() && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) ++start;
      continue;
    }
    if (rc < 0) {
      PCRE2_UCHAR buf[256];
      pcre2_get_error_message(rc, buf, sizeof buf);
      throw SpecError(fmt::format("regex \"{}\": {}", pattern_, reinterpret_cast<const char*>(buf)));
    }
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(m.md);
    std::vector<std::string> groups;
    int first = groups_ == 0 ? 0 : 1, last = groups_ == 0 ? 0 : groups_;
    for (int g = first; g <= last; ++g) {
      PCRE2_SIZE a = ov[2 * g], b = ov[2 * g + 1];
      groups.push_back(g < rc && a != PCRE2_UNSET ? text.substr(a, b - a) : std::string());
    }
    out.push_back(std::move(groups));
    // next search: after an empty match, not empty again at the same place (Python 3.7+ / Perl)
    opts = ov[0] == ov[1] ? (PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED) : 0;
    start = ov[1];
    if (opts) {
      // try a non-empty anchored match first; the NOMATCH branch above advances
    }
  }
  return out;
}

std::string PyRegex::remove_all(const std::string& text) const {
  // re.sub(p, "", s): keep what lies between matches (empty matches remove nothing)
  std::string out;
  MatchData m(code_of(code_));
  PCRE2_SIZE start = 0, kept = 0;
  uint32_t opts = 0;
  while (start <= text.size()) {
    int rc = pcre2_match(code_of(code_), reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), start, opts, m.md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) {
      if (opts == 0) break;
      opts = 0;
      ++start;
      while (start < text.size() && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) ++start;
      continue;
    }
    if (rc < 0) throw SpecError(fmt::format("regex \"{}\": match error {}", pattern_, rc));
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(m.md);
    out.append(text, kept, ov[0] - kept);
    kept = ov[1];
    opts = ov[0] == ov[1] ? (PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED) : 0;
    start = ov[1];
  }
  out.append(text, kept, std::string::npos);
  return out;
}

void validate_filters(const TaskSpec& t, const std::string& where) {
  for (const auto& p : t.filter_list)
    for (const auto& s : p.steps)
      if (s.function == "regex") {
        try {
          PyRegex r(s.regex_pattern);
        } catch (const SpecError& e) {
          throw SpecError(fmt::format("{}: filter_list '{}': {}", where, p.name, e.what()));
        }
      }
  for (const auto& r : t.exact_match.regexes_to_ignore) {
    try {
      PyRegex x(r);
    } catch (const SpecError& e) {
      throw SpecError(fmt::format("{}: metric_list exact_match regexes_to_ignore: {}", where, e.what()));
    }
  }
}

std::string apply_filter_pipeline(const FilterPipeline& p, const std::string& output) {
  std::string r = output;
  for (const auto& s : p.steps) {
    if (s.function == "regex") {
      PyRegex re(s.regex_pattern);
      auto matches = re.findall(r);
      if (matches.empty()) {
        r = s.fallback;
        continue;
      }
      int n = static_cast<int>(matches.size()), g = s.group_select < 0 ? s.group_select + n : s.group_select;
      if (g < 0 || g >= n)
        throw SpecError(fmt::format("filter '{}': group_select {} but the regex found {} match{} (lm-eval raises IndexError)",
                                    p.name, s.group_select, n, n == 1 ? "" : "es"));
      const auto& m = matches[static_cast<size_t>(g)];
      std::string v;
      if (m.size() == 1) {
        v = m[0];
      } else {
        v = s.fallback;
        for (const auto& x : m)
          if (!x.empty()) {
            v = x;
            break;
          }
      }
      r = tmpl::py_strip(v, true, true);
    } else if (s.function == "lowercase") {
      r = tmpl::py_lower(r);
    } else if (s.function == "uppercase") {
      r = tmpl::py_upper(r);
    } else if (s.function == "remove_whitespace") {
      r = tmpl::py_strip(r, true, true);
    }
    // take_first: one response per document, nothing to do
  }
  return r;
}

std::string exact_match_normalize(const ExactMatchOptions& o, const std::string& text) {
  std::string r = text;
  for (const auto& p : o.regexes_to_ignore) r = PyRegex(p).remove_all(r);
  if (o.ignore_case) r = tmpl::py_lower(r);
  if (o.ignore_punctuation) {
    static const char* punct = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";
    std::string k;
    for (char c : r)
      if (!std::strchr(punct, c) || c == '\0') k += c;
    r = std::move(k);
  }
  return r;
}

}  // namespace kveval::eval
