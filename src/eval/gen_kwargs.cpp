// generation_kwargs, repeats and the selection filters of a task; lm-eval's --gen_kwargs.
#include "eval/gen_kwargs.hpp"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>

#include "eval/json_input.hpp"
#include "util/whitespace.hpp"

namespace kveval::eval {

namespace {

/// generation_kwargs.until: one stop string or a list of them, none empty.
void parse_until(const json& u, const Where& uw, std::vector<std::string>& until) {
  until.clear();
  if (u.is_string()) {
    if (u.get<std::string>().empty()) uw.fail("empty stop string");
    until.push_back(u.get<std::string>());
    return;
  }
  if (!u.is_array()) uw.fail(fmt::format("expected a list of strings, got {}", json_excerpt(u)));
  for (size_t i = 0; i < u.size(); ++i) {
    std::string s = expect_string(u[i], uw.index(i));
    if (s.empty()) uw.index(i).fail("empty stop string");
    until.push_back(s);
  }
}

/// A finite number in [lo, hi] (`lo_open`: lo itself refused); `range` names it in the message.
double expect_number(const json& v, const Where& w, double lo, double hi, bool lo_open, const char* range) {
  if (!v.is_number()) w.fail(fmt::format("expected a number, got {}", json_excerpt(v)));
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi || (lo_open && x == lo)) w.fail(fmt::format("{} is outside {}", v.dump(), range));
  return x;
}

/// The sampling keys of one generation_kwargs object into `g`.
void parse_sampling_keys(const json& j, const Where& gw, GenerationKwargs& g) {
  SamplingParams& p = g.sampling;
  if (j.contains("do_sample")) {
    if (!j["do_sample"].is_boolean()) gw.key("do_sample").fail(fmt::format("expected a boolean, got {}", json_excerpt(j["do_sample"])));
    p.do_sample = j["do_sample"].get<bool>();
  }
  if (j.contains("temperature"))
    p.temperature = expect_number(j["temperature"], gw.key("temperature"), 0.0, 1e300, false, "[0, inf) (temperature must be >= 0)");
  if (j.contains("top_k")) p.top_k = static_cast<int>(expect_int(j["top_k"], gw.key("top_k"), 0, 1 << 30));
  if (j.contains("top_p")) p.top_p = expect_number(j["top_p"], gw.key("top_p"), 0.0, 1.0, true, "(0, 1]");
  if (j.contains("min_p") && !j["min_p"].is_null()) p.min_p = expect_number(j["min_p"], gw.key("min_p"), 0.0, 1.0, false, "[0, 1]");
  if (j.contains("seed")) {
    const json& s = j["seed"];
    if (!s.is_number_integer() || (s.is_number_integer() && !s.is_number_unsigned() && s.get<int64_t>() < 0))
      gw.key("seed").fail(fmt::format("expected a non-negative integer, got {}", json_excerpt(s)));
    p.seed = s.get<uint64_t>();
  }
}

/// One generation_kwargs object (the task's or the override) into t.generation_kwargs.
void parse_kwargs_object(const json& g, const Where& gw, const EvalSpec& spec, TaskSpec& t) {
  check_keys(g, gw, {"until", "max_gen_toks", "do_sample", "temperature", "top_k", "top_p", "min_p", "seed"});
  if (g.contains("until")) parse_until(g["until"], gw.key("until"), t.generation_kwargs.until);
  if (g.contains("max_gen_toks")) {
    int64_t hi = spec.max_length ? *spec.max_length - 1 : (1 << 24);
    const json& m = g["max_gen_toks"];
    if (m.is_number_integer() && spec.max_length && m.get<int64_t>() >= *spec.max_length)
      gw.key("max_gen_toks").fail(fmt::format("{} tokens do not fit max_length {} (the prompt needs at least BOS)",
                                              m.get<int64_t>(), *spec.max_length));
    t.generation_kwargs.max_gen_toks = static_cast<int>(expect_int(m, gw.key("max_gen_toks"), 0, hi));
  }
  parse_sampling_keys(g, gw, t.generation_kwargs);
}

}  // namespace

void parse_generation_kwargs(const json& tj, const Where& w, const EvalSpec& spec, TaskSpec& t) {
  bool given_until = false;
  t.generation_kwargs.sampling.seed = spec.seed;
  if (tj.contains("generation_kwargs")) {
    Where gw = w.key("generation_kwargs");
    if (t.output_type != OutputType::GenerateUntil) gw.fail("only generate_until tasks take generation_kwargs");
    const json& g = expect_object(tj["generation_kwargs"], gw);
    parse_kwargs_object(g, gw, spec, t);
    given_until = g.contains("until");
  }
  if (t.output_type == OutputType::GenerateUntil && spec.gen_kwargs.is_object()) {
    parse_kwargs_object(spec.gen_kwargs, Where{"--gen-kwargs", ""}, spec, t);
    given_until |= spec.gen_kwargs.contains("until");
  }
  // lm-eval (lm_eval/config/task.py): a generate_until task without `until` stops at its fewshot_delimiter
  if (t.output_type == OutputType::GenerateUntil && !given_until) t.generation_kwargs.until = {t.fewshot_delimiter};
}

SamplingParams parse_sampling_kwargs(const json& kwargs, const std::string& origin) {
  const Where w{origin, ""};
  expect_object(kwargs, w);
  check_keys(kwargs, w, {"do_sample", "temperature", "top_k", "top_p", "min_p", "seed"});
  GenerationKwargs g;
  parse_sampling_keys(kwargs, w, g);
  return g.sampling;
}

void parse_repeats(const json& tj, const Where& w, TaskSpec& t) {
  if (!tj.contains("repeats")) return;
  t.repeats = static_cast<int>(expect_int(tj["repeats"], w.key("repeats"), 1, 1 << 16));
  if (t.repeats > 1 && t.output_type != OutputType::GenerateUntil)
    w.key("repeats").fail(fmt::format("only generate_until tasks take repeats > 1 (this task is {})", to_string(t.output_type)));
}

bool parse_selection_step(const json& st, const Where& sw, FilterStep& fs) {
  if (fs.function == "take_first_k") {
    check_keys(st, sw, {"function", "k"});
    if (!st.contains("k")) sw.fail("take_first_k needs 'k' (responses to keep)");
    fs.k = static_cast<int>(expect_int(st["k"], sw.key("k"), 1, 1 << 16));
    return true;
  }
  if (fs.function == "take_first" || fs.function == "majority_vote") {
    check_keys(st, sw, {"function"});
    return true;
  }
  return false;
}

namespace {

/// Python's str.strip() (util/whitespace.hpp).
std::string strip(const std::string& s) { return std::string(util::strip(s)); }

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

/// Python's float() of a stripped string: decimal or exponent forms, inf, nan (any case).
std::optional<double> python_float(const std::string& raw) {
  std::string v = strip(raw), clean;
  if (v.empty()) return std::nullopt;
  for (size_t k = 0; k < v.size(); ++k) {
    if (v[k] == '_') {
      if (k == 0 || k + 1 >= v.size() || !std::isdigit(static_cast<unsigned char>(v[k - 1])) ||
          !std::isdigit(static_cast<unsigned char>(v[k + 1])))
        return std::nullopt;
      continue;
    }
    if (!std::isdigit(static_cast<unsigned char>(v[k])) && std::string("+-.eE").find(v[k]) == std::string::npos) {
      const std::string l = lower(v[0] == '+' || v[0] == '-' ? v.substr(1) : v);
      if (l == "inf" || l == "infinity") return v[0] == '-' ? -HUGE_VAL : HUGE_VAL;
      if (l == "nan") return std::nan("");
      return std::nullopt;
    }
    clean += v[k];
  }
  char* end = nullptr;
  const double d = std::strtod(clean.c_str(), &end);
  if (end != clean.c_str() + clean.size() || clean.find_first_of("0123456789") == std::string::npos) return std::nullopt;
  return d;
}

}  // namespace

json parse_gen_kwargs_arg(const std::string& value) {
  const std::string v = strip(value);
  if (!v.empty() && v.front() == '{') {
    try {
      json j = json::parse(v);
      if (!j.is_object()) throw SpecError("--gen-kwargs: expected a JSON object");
      return j;
    } catch (const json::parse_error& e) {
      throw SpecError(fmt::format("--gen-kwargs: not valid JSON at byte {}: {}", e.byte, short_parse_message(e.what())));
    }
  }
  json out = json::object();
  size_t start = 0;
  while (start <= v.size()) {
    size_t comma = v.find(',', start);
    if (comma == std::string::npos) comma = v.size();
    const std::string item = v.substr(start, comma - start);
    start = comma + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0)
      throw SpecError(fmt::format("--gen-kwargs: '{}': expected key=value", item));
    const std::string key = item.substr(0, eq), val = item.substr(eq + 1);
    const std::string l = lower(val);
    if (l == "true" || l == "false") out[key] = l == "true";
    else if (int64_t n = 0; !val.empty() && val.find_first_not_of("0123456789") == std::string::npos &&
                            std::from_chars(val.data(), val.data() + val.size(), n).ec == std::errc())
      out[key] = n;
    else if (auto d = python_float(val)) out[key] = *d;
    else out[key] = val;
  }
  return out;
}

}  // namespace kveval::eval
