#include "eval/filters.hpp"

#include <algorithm>
#include <cstring>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <fmt/format.h>
#include <pcre2.h>

#include "eval/task_hooks.hpp"
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

std::string PyRegex::remove_all(const std::string& text) const { return sub(text, ""); }

namespace {

/// One piece of a parsed replacement: literal text, or a group number (>= 0).
struct ReplPiece {
  std::string text;
  int group = -1;
};

std::vector<ReplPiece> parse_repl(const std::string& repl, void* code, int groups, const std::string& pattern) {
  std::vector<ReplPiece> out;
  auto lit = [&](const std::string& s) {
    if (out.empty() || out.back().group >= 0) out.push_back({});
    out.back().text += s;
  };
  auto group = [&](int g) {
    if (g > groups) throw SpecError(fmt::format("regex \"{}\": invalid group reference {} in the replacement", pattern, g));
    out.push_back({"", g});
  };
  auto is_oct = [](char c) { return c >= '0' && c <= '7'; };
  for (size_t i = 0; i < repl.size(); ++i) {
    char c = repl[i];
    if (c != '\\' || i + 1 == repl.size()) {
      if (c == '\\') throw SpecError(fmt::format("regex \"{}\": bad escape (end of pattern) in the replacement", pattern));
      lit(std::string(1, c));
      continue;
    }
    char e = repl[++i];
    if (e == 'g') {
      size_t close = repl.find('>', i + 1);
      if (i + 1 >= repl.size() || repl[i + 1] != '<' || close == std::string::npos)
        throw SpecError(fmt::format("regex \"{}\": missing group name in \\g<...> in the replacement", pattern));
      std::string name = repl.substr(i + 2, close - i - 2);
      i = close;
      if (!name.empty() && std::all_of(name.begin(), name.end(), ::isdigit) && name.size() < 6) {
        group(std::stoi(name));
      } else {
        int n = pcre2_substring_number_from_name(code_of(code), reinterpret_cast<PCRE2_SPTR>(name.c_str()));
        if (n < 0) throw SpecError(fmt::format("regex \"{}\": unknown group name '{}' in the replacement", pattern, name));
        group(n);
      }
    } else if (e == '0' || (is_oct(e) && i + 2 < repl.size() && is_oct(repl[i + 1]) && is_oct(repl[i + 2]))) {
      // octal: \0, \0o, \0oo, or three octal digits
      size_t j = i, end = std::min(repl.size(), i + (e == '0' ? 3 : 3));
      int v = 0;
      while (j < end && is_oct(repl[j])) v = v * 8 + (repl[j++] - '0');
      if (v > 0377) throw SpecError(fmt::format("regex \"{}\": octal escape value > 0o377 in the replacement", pattern));
      i = j - 1;
      std::string u;  // the code point v as UTF-8
      if (v < 0x80) u += static_cast<char>(v);
      else u += static_cast<char>(0xC0 | (v >> 6)), u += static_cast<char>(0x80 | (v & 0x3F));
      lit(u);
    } else if (e >= '1' && e <= '9') {
      int g = e - '0';
      if (i + 1 < repl.size() && ::isdigit(static_cast<unsigned char>(repl[i + 1]))) g = g * 10 + (repl[++i] - '0');
      group(g);
    } else {
      static const std::string from = "ntrfvab\\", to = "\n\t\r\f\v\a\b\\";
      size_t k = from.find(e);
      if (k != std::string::npos) {
        lit(std::string(1, to[k]));
      } else if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) {
        throw SpecError(fmt::format("regex \"{}\": bad escape \\{} in the replacement", pattern, e));
      } else {
        lit(std::string{'\\', e});
      }
    }
  }
  return out;
}

}  // namespace

std::string PyRegex::sub(const std::string& text, const std::string& repl, int64_t count, size_t max_bytes) const {
  const std::vector<ReplPiece> pieces = parse_repl(repl, code_, groups_, pattern_);
  std::string out;
  MatchData m(code_of(code_));
  PCRE2_SIZE start = 0, kept = 0;
  uint32_t opts = 0;
  int64_t done = 0;
  while (start <= text.size() && (count == 0 || done < count)) {
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
    for (const auto& p : pieces) {
      if (p.group < 0) {
        out += p.text;
      } else if (p.group < rc && ov[2 * p.group] != PCRE2_UNSET) {
        out.append(text, ov[2 * p.group], ov[2 * p.group + 1] - ov[2 * p.group]);
      }
    }
    if (out.size() > max_bytes)
      throw SpecError(fmt::format("regex \"{}\": the result would be longer than {} bytes", pattern_, max_bytes));
    ++done;
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

namespace {

/// Built-in steps on one generated text (one response per document).
std::string apply_builtin_steps(const std::vector<FilterStep>& steps, const std::string& output) {
  std::string r = output;
  for (const auto& s : steps) {
    if (s.hook) {
      throw Error("internal: a custom filter step runs on one text (filter_task calls it on the task)");
    } else if (s.function == "regex") {
      PyRegex re(s.regex_pattern);
      auto matches = re.findall(r);
      if (matches.empty()) {
        r = s.fallback;
        continue;
      }
      int n = static_cast<int>(matches.size()), g = s.group_select < 0 ? s.group_select + n : s.group_select;
      if (g < 0 || g >= n) {  // too few matches for group_select: the fallback (lm-eval PR #3997)
        r = s.fallback;
        continue;
      }
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

/// A built-in step on one document's responses, with lm-eval's list semantics.
void builtin_list_step(const FilterStep& s, FilteredResponses& f) {
  if (!f.is_list) {  // after take_first the response is one string: the remaining steps act on it
    if (s.function != "take_first" && s.function != "take_first_k" && s.function != "majority_vote")
      f.items[0] = apply_builtin_steps({s}, f.items[0]);
    return;
  }
  if (s.function == "take_first") {
    f.items.resize(std::min<size_t>(f.items.size(), 1));
    f.is_list = false;
  } else if (s.function == "take_first_k") {
    f.items.resize(std::min(f.items.size(), static_cast<size_t>(s.k)));
  } else if (s.function == "majority_vote") {  // Counter(resp).most_common(1)[0][0]
    std::vector<std::pair<std::string, int>> counts;  // first-seen order
    for (const auto& r : f.items) {
      auto it = std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == r; });
      if (it == counts.end()) counts.emplace_back(r, 1);
      else ++it->second;
    }
    size_t best = 0;
    for (size_t j = 1; j < counts.size(); ++j)
      if (counts[j].second > counts[best].second) best = j;
    f.items = counts.empty() ? std::vector<std::string>{} : std::vector<std::string>{counts[best].first};
  } else {
    for (auto& r : f.items) r = apply_builtin_steps({s}, r);
  }
}

/// A custom filter step on every document of `out` not yet failed: one call with all their
/// responses and documents; each result mapped back to its document (a string ends its list;
/// with `one_response` a list keeps its first item). A failing call fails all of them.
void custom_step(const FilterStep& s, const std::vector<DocResponses>& docs, bool one_response,
                 std::vector<FilterOutcome>& out) {
  std::vector<size_t> live;
  std::vector<std::vector<std::string>> resps;
  std::vector<const Doc*> ds;
  for (size_t i = 0; i < docs.size(); ++i) {
    if (!out[i].error.empty()) continue;
    if (!docs[i].doc) throw Error("internal: a custom filter step runs without its document");
    live.push_back(i);
    resps.push_back(out[i].filtered.items);
    ds.push_back(docs[i].doc);
  }
  if (live.empty()) return;
  nlohmann::json r;
  try {
    r = run_filter_hook(*s.hook, s.kwargs, resps, ds);
  } catch (const std::exception& e) {
    for (size_t i : live) out[i].error = e.what();
    return;
  }
  for (size_t j = 0; j < live.size(); ++j) {
    FilterOutcome& o = out[live[j]];
    const bool was_list = o.filtered.is_list;
    if (r[j].is_string()) o.filtered = {{r[j].get<std::string>()}, false};
    else o.filtered = {r[j].get<std::vector<std::string>>(), was_list};
    if (!was_list || one_response) {
      if (o.filtered.items.empty()) o.error = fmt::format("{}: {} gave an empty list", docs[live[j]].doc->origin, s.function);
      else o.filtered.items.resize(1);
    }
  }
}

}  // namespace

std::vector<FilterOutcome> filter_task(const FilterPipeline& p, const std::vector<DocResponses>& docs, bool one_response) {
  std::vector<FilterOutcome> out(docs.size());
  for (size_t i = 0; i < docs.size(); ++i) out[i].filtered = {docs[i].responses, true};
  std::vector<FilterStep> steps = p.steps;
  if (steps.empty()) steps.push_back({.function = "take_first"});  // lm-eval's "none" pipeline
  for (const FilterStep& s : steps) {
    if (s.hook) {
      custom_step(s, docs, one_response, out);
      continue;
    }
    for (auto& o : out) {
      if (!o.error.empty()) continue;
      try {
        builtin_list_step(s, o.filtered);
      } catch (const std::exception& e) {  // e.g. a regex the PCRE2 matcher cannot run on this text
        o.error = e.what();
      }
    }
  }
  if (one_response)
    for (auto& o : out)
      if (o.error.empty()) o.filtered.is_list = false;
  return out;
}

std::vector<std::optional<FilterOutcome>> filter_docs(const FilterPipeline& p,
                                                      const std::vector<std::optional<std::vector<std::string>>>& responses,
                                                      const std::vector<Doc>& docs, bool one_response) {
  std::vector<DocResponses> in;
  std::vector<size_t> at;
  for (size_t i = 0; i < responses.size() && i < docs.size(); ++i)
    if (responses[i]) in.push_back({*responses[i], &docs[i]}), at.push_back(i);
  std::vector<FilterOutcome> got = filter_task(p, in, one_response);
  std::vector<std::optional<FilterOutcome>> out(responses.size());
  for (size_t j = 0; j < at.size(); ++j) out[at[j]] = std::move(got[j]);
  return out;
}

std::string apply_filter_pipeline(const FilterPipeline& p, const std::string& output, const Doc* doc) {
  FilterOutcome o = filter_task(p, {{{output}, doc}}, true).at(0);
  if (!o.error.empty()) throw SpecError(o.error);
  return o.filtered.items.at(0);
}

FilteredResponses apply_filter_pipeline(const FilterPipeline& p, const std::vector<std::string>& responses,
                                        const Doc* doc) {
  FilterOutcome o = filter_task(p, {{responses, doc}}, false).at(0);
  if (!o.error.empty()) throw SpecError(o.error);
  return o.filtered;
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
