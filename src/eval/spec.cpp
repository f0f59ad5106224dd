#include "eval/spec.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "util/error.hpp"

namespace kveval::eval {

namespace fs = std::filesystem;
using nlohmann::json;

const char* to_string(OutputType t) {
  switch (t) {
    case OutputType::Loglikelihood: return "loglikelihood";
    case OutputType::MultipleChoice: return "multiple_choice";
    case OutputType::LoglikelihoodRolling: return "loglikelihood_rolling";
    case OutputType::GenerateUntil: return "generate_until";
  }
  return "?";
}

const std::vector<std::string>& metrics_for(OutputType t) {
  static const std::vector<std::string> ll = {"acc", "perplexity"};
  static const std::vector<std::string> mc = {"acc", "acc_norm"};
  static const std::vector<std::string> roll = {"word_perplexity", "byte_perplexity", "bits_per_byte",
                                                "token_perplexity"};
  static const std::vector<std::string> gen = {"exact_match"};
  switch (t) {
    case OutputType::Loglikelihood: return ll;
    case OutputType::MultipleChoice: return mc;
    case OutputType::LoglikelihoodRolling: return roll;
    case OutputType::GenerateUntil: return gen;
  }
  return ll;
}

int edit_distance(std::string_view a, std::string_view b) {
  std::vector<int> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string closest(std::string_view word, const std::vector<std::string>& candidates) {
  std::string best;
  int best_d = std::numeric_limits<int>::max();
  for (const auto& c : candidates) {
    int d = edit_distance(word, c);
    if (d < best_d) best_d = d, best = c;
  }
  int limit = std::max<int>(2, static_cast<int>(word.size()) / 3);
  return best_d <= limit ? best : "";
}

namespace {

/// A JSON value shown in a message: compact, at most ~40 bytes.
std::string show(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

/// Where in the spec we are: the origin (file) and the JSON path.
struct Where {
  std::string origin;
  std::string path;
  Where key(std::string_view k) const { return {origin, path.empty() ? std::string(k) : path + "." + std::string(k)}; }
  Where index(size_t i) const { return {origin, fmt::format("{}[{}]", path, i)}; }
  [[noreturn]] void fail(const std::string& msg) const {
    throw SpecError(path.empty() ? fmt::format("{}: {}", origin, msg) : fmt::format("{}: {}: {}", origin, path, msg));
  }
};

void check_keys(const json& obj, const Where& w, const std::vector<std::string>& allowed) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    if (std::find(allowed.begin(), allowed.end(), it.key()) != allowed.end()) continue;
    std::string hint = closest(it.key(), allowed);
    w.key(it.key()).fail(hint.empty() ? std::string("unknown key") : fmt::format("unknown key (did you mean '{}'?)", hint));
  }
}

const json& expect_object(const json& v, const Where& w) {
  if (!v.is_object()) w.fail(fmt::format("expected an object, got {}", show(v)));
  return v;
}

std::string expect_string(const json& v, const Where& w) {
  if (!v.is_string()) w.fail(fmt::format("expected a string, got {}", show(v)));
  return v.get<std::string>();
}

int64_t expect_int(const json& v, const Where& w, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) w.fail(fmt::format("expected an integer, got {}", show(v)));
  int64_t x = v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
                  ? std::numeric_limits<int64_t>::max()
                  : v.get<int64_t>();
  if (x < lo || x > hi) w.fail(fmt::format("expected an integer in [{}, {}], got {}", lo, hi, x));
  return x;
}

/// A file path from the spec: a string without NUL bytes (which the OS would silently cut at).
std::string expect_path(const json& v, const Where& w) {
  std::string p = expect_string(v, w);
  if (p.find('\0') != std::string::npos) w.fail("path contains a NUL byte");
  return p;
}

std::string resolve_path(const std::string& base_dir, const std::string& p) {
  if (p.empty() || fs::path(p).is_absolute() || base_dir.empty()) return p;
  return (fs::path(base_dir) / p).lexically_normal().string();
}

std::pair<int, int> line_col(std::string_view text, size_t byte) {
  int line = 1, col = 1;
  for (size_t i = 0; i < byte && i < text.size(); ++i) {
    if (text[i] == '\n') ++line, col = 1;
    else ++col;
  }
  return {line, col};
}

/// nlohmann's message without its "[json.exception.parse_error.101] parse error at line 1, column 2: " prefix.
std::string short_parse_message(const std::string& what) {
  std::string s = what;
  auto p = s.find("] ");
  if (p != std::string::npos) s = s.substr(p + 2);
  auto c = s.find(": ");
  if (s.rfind("parse error", 0) == 0 && c != std::string::npos) s = s.substr(c + 2);
  return s;
}

const json* lookup_field(const json& doc, const std::string& field) {
  const json* cur = &doc;
  size_t start = 0;
  while (true) {
    size_t dot = field.find('.', start);
    std::string part = field.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (cur->is_object()) {
      auto it = cur->find(part);
      if (it == cur->end()) return nullptr;
      cur = &*it;
    } else if (cur->is_array() && !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit)) {
      size_t i = std::stoul(part);
      if (i >= cur->size()) return nullptr;
      cur = &(*cur)[i];
    } else {
      return nullptr;
    }
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t");
  size_t b = s.find_last_not_of(" \t");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

[[noreturn]] void field_missing(const json& doc, const std::string& field, const std::string& origin,
                                const std::string& key) {
  std::vector<std::string> names;
  if (doc.is_object())
    for (auto it = doc.begin(); it != doc.end(); ++it) names.push_back(it.key());
  std::string hint = closest(field, names);
  std::string fields;
  for (const auto& n : names) fields += (fields.empty() ? "" : ", ") + n;
  throw SpecError(fmt::format("{}: {}: field '{}' not found{} (fields: {})", origin, key, field,
                              hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint), fields));
}

std::string value_text(const json& v, const std::string& origin, const std::string& key) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer() || v.is_boolean()) return v.dump();
  if (v.is_number_float()) return v.dump();
  throw SpecError(fmt::format("{}: {}: expected text, got {}", origin, key, show(v)));
}

}  // namespace

json resolve_mapping(const json& doc, const std::string& mapping, const std::string& origin, const std::string& key) {
  size_t open = mapping.find("{{");
  if (open == std::string::npos) {
    const json* v = lookup_field(doc, mapping);
    if (!v) field_missing(doc, mapping, origin, key);
    return *v;
  }
  // exactly one placeholder covering the whole string: raw value
  size_t close = mapping.find("}}", open);
  if (open == 0 && close != std::string::npos && close + 2 == mapping.size() &&
      mapping.find("{{", open + 2) == std::string::npos) {
    std::string f = trim(mapping.substr(2, close - 2));
    const json* v = lookup_field(doc, f);
    if (!v) field_missing(doc, f, origin, key);
    return *v;
  }
  std::string out;
  size_t pos = 0;
  while (true) {
    size_t o = mapping.find("{{", pos);
    if (o == std::string::npos) {
      out += mapping.substr(pos);
      break;
    }
    size_t c = mapping.find("}}", o + 2);
    if (c == std::string::npos)
      throw SpecError(fmt::format("{}: {}: unterminated '{{{{' in template \"{}\"", origin, key, mapping));
    out += mapping.substr(pos, o - pos);
    std::string f = trim(mapping.substr(o + 2, c - o - 2));
    const json* v = lookup_field(doc, f);
    if (!v) field_missing(doc, f, origin, key);
    out += value_text(*v, origin, key);
    pos = c + 2;
  }
  return out;
}

json parse_json_text(std::string_view text, const std::string& origin) {
  // nlohmann keeps the last of duplicate keys silently; the callback sees every
  // key and refuses a repeat, naming the JSON path of the object.
  struct Frame {
    bool object;
    std::string path;
    std::set<std::string> keys;
    std::string key;    // object: the key of the value being parsed
    size_t next = 0;    // array: index of the next element
  };
  std::vector<Frame> stack;
  auto child_path = [&stack]() -> std::string {
    if (stack.empty()) return "";
    Frame& f = stack.back();
    if (!f.object) return fmt::format("{}[{}]", f.path, f.next++);
    return f.path.empty() ? f.key : f.path + "." + f.key;
  };
  json::parser_callback_t cb = [&](int, json::parse_event_t ev, json& parsed) -> bool {
    switch (ev) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start: {
        std::string p = child_path();
        stack.push_back({ev == json::parse_event_t::object_start, p, {}, {}, 0});
        break;
      }
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!stack.empty()) stack.pop_back();
        break;
      case json::parse_event_t::key: {
        Frame& f = stack.back();
        f.key = parsed.get<std::string>();
        if (!f.keys.insert(f.key).second)
          throw SpecError(f.path.empty() ? fmt::format("{}: duplicate key '{}'", origin, f.key)
                                         : fmt::format("{}: {}: duplicate key '{}'", origin, f.path, f.key));
        break;
      }
      case json::parse_event_t::value:
        if (!stack.empty() && !stack.back().object) ++stack.back().next;
        break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), cb);
  } catch (const json::parse_error& e) {
    // e.byte is the 1-based position of the last character read.
    size_t byte = e.byte > 0 ? e.byte - 1 : 0;
    auto [line, col] = line_col(text, byte);
    throw SpecError(fmt::format("{}:{}:{}: {}", origin, line, col, short_parse_message(e.what())));
  }
}

std::vector<std::pair<int, json>> read_jsonl(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw SpecError(fmt::format("{}: cannot open data file", path));
  std::vector<std::pair<int, json>> out;
  std::string line;
  int n = 0;
  while (std::getline(f, line)) {
    ++n;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    json j;
    try {
      j = json::parse(line);
    } catch (const json::parse_error& e) {
      size_t col = e.byte > 0 ? e.byte : 1;
      throw SpecError(fmt::format("{}:{}:{}: {}", path, n, col, short_parse_message(e.what())));
    }
    if (!j.is_object()) throw SpecError(fmt::format("{}:{}: expected a JSON object, got {}", path, n, show(j)));
    out.emplace_back(n, std::move(j));
  }
  if (f.bad()) throw SpecError(fmt::format("{}: read error", path));
  return out;
}

namespace {

struct RawDoc {
  std::string origin;
  json doc;
};

/// Renders text/target/choices/gold of one raw document (no few-shot yet).
Doc render_doc(const TaskSpec& t, const RawDoc& rd) {
  Doc d;
  d.origin = rd.origin;
  auto text_of = [&](const std::string& mapping, const char* key) {
    return value_text(resolve_mapping(rd.doc, mapping, rd.origin, key), rd.origin, key);
  };
  if (!t.doc_to_text.empty()) d.context = text_of(t.doc_to_text, "doc_to_text");
  json target_raw;
  if (!t.doc_to_target.empty()) {
    target_raw = resolve_mapping(rd.doc, t.doc_to_target, rd.origin, "doc_to_target");
    d.target = value_text(target_raw, rd.origin, "doc_to_target");
    d.has_target = true;
  }
  if (t.output_type == OutputType::MultipleChoice) {
    json choices;
    if (t.doc_to_choice.is_array()) {
      choices = json::array();
      for (const auto& c : t.doc_to_choice) {
        std::string m = c.get<std::string>();
        // a literal choice without "{{" is text, not a field name
        choices.push_back(m.find("{{") == std::string::npos ? json(m) : resolve_mapping(rd.doc, m, rd.origin, "doc_to_choice"));
      }
    } else {
      choices = resolve_mapping(rd.doc, t.doc_to_choice.get<std::string>(), rd.origin, "doc_to_choice");
    }
    if (!choices.is_array() || choices.empty())
      throw SpecError(fmt::format("{}: doc_to_choice: expected a non-empty list of strings, got {}", rd.origin, show(choices)));
    for (size_t i = 0; i < choices.size(); ++i) {
      if (!choices[i].is_string())
        throw SpecError(fmt::format("{}: doc_to_choice[{}]: expected a string, got {} (choices must be a list of strings)",
                                    rd.origin, i, show(choices[i])));
      std::string c = value_text(choices[i], rd.origin, fmt::format("doc_to_choice[{}]", i));
      if (c.empty()) throw SpecError(fmt::format("{}: doc_to_choice[{}]: empty choice", rd.origin, i));
      d.choices.push_back(std::move(c));
    }
    // gold: an integer index, a string of digits (an index, as lm-eval), or the gold choice's text
    int64_t gold = -1;
    if (target_raw.is_number_integer()) {
      gold = target_raw.get<int64_t>();
    } else if (!d.target.empty() && std::all_of(d.target.begin(), d.target.end(), ::isdigit) && d.target.size() < 10) {
      gold = std::stoll(d.target);
    } else {
      auto it = std::find(d.choices.begin(), d.choices.end(), d.target);
      if (it == d.choices.end())
        throw SpecError(fmt::format("{}: doc_to_target: \"{}\" is neither a choice index nor one of the {} choices",
                                    rd.origin, d.target, d.choices.size()));
      gold = it - d.choices.begin();
    }
    if (gold < 0 || gold >= static_cast<int64_t>(d.choices.size()))
      throw SpecError(fmt::format("{}: doc_to_target: gold index {} out of range [0, {})", rd.origin, gold,
                                  d.choices.size()));
    d.gold = static_cast<int>(gold);
    d.target = d.choices[static_cast<size_t>(d.gold)];
  }
  return d;
}

std::vector<RawDoc> load_docs_file(const std::string& path) {
  std::vector<RawDoc> out;
  for (auto& [line, j] : read_jsonl(path)) out.push_back({fmt::format("{}:{}", path, line), std::move(j)});
  if (out.empty()) throw SpecError(fmt::format("{}: no documents (the file is empty or blank)", path));
  return out;
}

/// Deterministic choice of `k` distinct indices out of [0, n) minus `exclude`:
/// partial Fisher-Yates driven by std::mt19937_64 (whose output the C++
/// standard fixes), so every platform picks the same examples.
std::vector<size_t> sample_indices(size_t n, size_t k, long exclude, uint64_t seed) {
  std::vector<size_t> pool;
  for (size_t i = 0; i < n; ++i)
    if (static_cast<long>(i) != exclude) pool.push_back(i);
  std::mt19937_64 rng(seed);
  k = std::min(k, pool.size());
  for (size_t i = 0; i < k; ++i) {
    size_t j = i + static_cast<size_t>(rng() % (pool.size() - i));
    std::swap(pool[i], pool[j]);
  }
  pool.resize(k);
  return pool;
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

TaskSpec parse_task(const json& tj, const Where& w, const std::string& base_dir, const EvalSpec& spec) {
  expect_object(tj, w);
  static const std::vector<std::string> keys = {
      "name", "output_type", "dataset_path", "docs", "doc_to_text", "doc_to_target", "doc_to_choice",
      "target_delimiter", "description", "generation_kwargs", "metric_list", "num_fewshot", "fewshot_split",
      "fewshot_delimiter", "limit"};
  check_keys(tj, w, keys);
  TaskSpec t;
  if (!tj.contains("name")) w.fail("missing required key 'name'");
  t.name = expect_string(tj["name"], w.key("name"));
  if (t.name.empty()) w.key("name").fail("must not be empty");
  for (unsigned char c : t.name)
    if (c < 0x20 || c == 0x7F || c == '|')
      w.key("name").fail(fmt::format("{} (task names are printable text without '|', they head table rows)",
                                     c == '|' ? std::string("contains '|'") : fmt::format("contains control byte 0x{:02x}", c)));
  if (!tj.contains("output_type"))
    w.fail("missing required key 'output_type' (one of loglikelihood, multiple_choice, loglikelihood_rolling, generate_until)");
  {
    std::string ot = expect_string(tj["output_type"], w.key("output_type"));
    std::vector<std::string> names;
    bool found = false;
    for (OutputType o : {OutputType::Loglikelihood, OutputType::MultipleChoice, OutputType::LoglikelihoodRolling,
                         OutputType::GenerateUntil}) {
      names.push_back(to_string(o));
      if (ot == to_string(o)) t.output_type = o, found = true;
    }
    if (!found) {
      std::string hint = closest(ot, names);
      w.key("output_type").fail(fmt::format("unknown output_type \"{}\"{}; expected one of loglikelihood, multiple_choice, loglikelihood_rolling, generate_until",
                                            ot, hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint)));
    }
  }
  auto opt_string = [&](const char* k, std::string& dst) {
    if (tj.contains(k)) dst = expect_string(tj[k], w.key(k));
  };
  opt_string("doc_to_text", t.doc_to_text);
  opt_string("doc_to_target", t.doc_to_target);
  opt_string("target_delimiter", t.target_delimiter);
  opt_string("description", t.description);
  opt_string("fewshot_delimiter", t.fewshot_delimiter);
  if (tj.contains("doc_to_choice")) {
    const json& c = tj["doc_to_choice"];
    if (c.is_array()) {
      if (c.empty()) w.key("doc_to_choice").fail("expected a non-empty list");
      for (size_t i = 0; i < c.size(); ++i) expect_string(c[i], w.key("doc_to_choice").index(i));
    } else {
      expect_string(c, w.key("doc_to_choice"));
    }
    t.doc_to_choice = c;
  }
  if (tj.contains("limit")) t.limit = static_cast<int>(expect_int(tj["limit"], w.key("limit"), 0, 1 << 30));
  if (tj.contains("num_fewshot"))
    t.num_fewshot = static_cast<int>(expect_int(tj["num_fewshot"], w.key("num_fewshot"), 0, 1 << 20));
  if (tj.contains("fewshot_split")) {
    std::string p = expect_path(tj["fewshot_split"], w.key("fewshot_split"));
    t.fewshot_split = resolve_path(base_dir, p);
  }

  // required mappings per output type
  switch (t.output_type) {
    case OutputType::Loglikelihood:
      if (t.doc_to_text.empty()) w.fail("loglikelihood task needs 'doc_to_text' (the context)");
      if (t.doc_to_target.empty()) w.fail("loglikelihood task needs 'doc_to_target' (the continuation)");
      break;
    case OutputType::MultipleChoice:
      if (t.doc_to_text.empty()) w.fail("multiple_choice task needs 'doc_to_text'");
      if (t.doc_to_choice.is_null()) w.fail("multiple_choice task needs 'doc_to_choice'");
      if (t.doc_to_target.empty()) w.fail("multiple_choice task needs 'doc_to_target' (gold index or gold choice)");
      break;
    case OutputType::LoglikelihoodRolling:
      if (t.doc_to_target.empty() && t.doc_to_text.empty())
        w.fail("loglikelihood_rolling task needs 'doc_to_target' (the text to score; lm-eval convention) or 'doc_to_text'");
      if (t.num_fewshot > 0) w.key("num_fewshot").fail("loglikelihood_rolling tasks take no few-shot examples");
      break;
    case OutputType::GenerateUntil:
      if (t.doc_to_text.empty()) w.fail("generate_until task needs 'doc_to_text' (the prompt)");
      break;
  }
  if (!t.doc_to_choice.is_null() && t.output_type != OutputType::MultipleChoice)
    w.key("doc_to_choice").fail(fmt::format("only multiple_choice tasks take choices (this task is {})", to_string(t.output_type)));

  if (tj.contains("generation_kwargs")) {
    Where gw = w.key("generation_kwargs");
    if (t.output_type != OutputType::GenerateUntil) gw.fail("only generate_until tasks take generation_kwargs");
    const json& g = expect_object(tj["generation_kwargs"], gw);
    check_keys(g, gw, {"until", "max_gen_toks", "do_sample", "temperature"});
    if (g.contains("until")) {
      const json& u = g["until"];
      if (u.is_string()) {
        if (u.get<std::string>().empty()) gw.key("until").fail("empty stop string");
        t.generation_kwargs.until.push_back(u.get<std::string>());
      } else {
        if (!u.is_array()) gw.key("until").fail(fmt::format("expected a list of strings, got {}", show(u)));
        for (size_t i = 0; i < u.size(); ++i) {
          std::string s = expect_string(u[i], gw.key("until").index(i));
          if (s.empty()) gw.key("until").index(i).fail("empty stop string");
          t.generation_kwargs.until.push_back(s);
        }
      }
    }
    if (g.contains("max_gen_toks")) {
      int64_t hi = spec.max_length ? *spec.max_length - 1 : (1 << 24);
      const json& m = g["max_gen_toks"];
      if (m.is_number_integer() && spec.max_length && m.get<int64_t>() >= *spec.max_length)
        gw.key("max_gen_toks").fail(fmt::format("{} tokens do not fit max_length {} (the prompt needs at least BOS)",
                                                m.get<int64_t>(), *spec.max_length));
      t.generation_kwargs.max_gen_toks = static_cast<int>(expect_int(m, gw.key("max_gen_toks"), 0, hi));
    }
    if (g.contains("do_sample") && !(g["do_sample"].is_boolean() && !g["do_sample"].get<bool>()))
      gw.key("do_sample").fail("only greedy decoding is supported (do_sample must be false)");
    if (g.contains("temperature") && !(g["temperature"].is_number() && g["temperature"].get<double>() == 0.0))
      gw.key("temperature").fail("only greedy decoding is supported (temperature must be 0)");
  }

  if (tj.contains("metric_list")) {
    Where mw = w.key("metric_list");
    const json& ml = tj["metric_list"];
    if (!ml.is_array()) mw.fail(fmt::format("expected a list, got {}", show(ml)));
    const auto& allowed = metrics_for(t.output_type);
    for (size_t i = 0; i < ml.size(); ++i) {
      Where iw = mw.index(i);
      std::string name;
      if (ml[i].is_object()) {
        check_keys(ml[i], iw, {"metric", "aggregation", "higher_is_better"});
        if (!ml[i].contains("metric")) iw.fail("missing required key 'metric'");
        name = expect_string(ml[i]["metric"], iw.key("metric"));
        iw = iw.key("metric");
      } else {
        name = expect_string(ml[i], iw);
      }
      if (std::find(allowed.begin(), allowed.end(), name) == allowed.end()) {
        std::string list;
        for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
        std::string hint = closest(name, allowed);
        iw.fail(fmt::format("metric \"{}\" is not available for {}{}; available: {}", name, to_string(t.output_type),
                            hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint), list));
      }
      if (std::find(t.metric_list.begin(), t.metric_list.end(), name) == t.metric_list.end()) t.metric_list.push_back(name);
    }
    if (t.metric_list.empty()) mw.fail("empty metric list");
  } else {
    t.metric_list = metrics_for(t.output_type);
  }

  // documents
  std::vector<RawDoc> raw;
  bool has_path = tj.contains("dataset_path"), has_docs = tj.contains("docs");
  if (has_path == has_docs) w.fail("give exactly one of 'dataset_path' (a JSONL file) or 'docs' (inline list)");
  if (has_path) {
    std::string p = expect_path(tj["dataset_path"], w.key("dataset_path"));
    t.dataset_path = resolve_path(base_dir, p);
    std::error_code ec;
    if (!fs::is_regular_file(t.dataset_path, ec))
      w.key("dataset_path").fail(fmt::format("data file \"{}\" not found", t.dataset_path));
    raw = load_docs_file(t.dataset_path);
  } else {
    const json& d = tj["docs"];
    if (!d.is_array()) w.key("docs").fail(fmt::format("expected a list of objects, got {}", show(d)));
    for (size_t i = 0; i < d.size(); ++i) {
      Where dw = w.key("docs").index(i);
      expect_object(d[i], dw);
      raw.push_back({fmt::format("{}: {}", dw.origin, dw.path), d[i]});
    }
  }
  t.n_docs_total = static_cast<int>(raw.size());
  std::optional<int> limit = t.limit ? t.limit : spec.limit;

  // render every document (all data are validated, also those past `limit`)
  std::vector<Doc> rendered;
  rendered.reserve(raw.size());
  for (const auto& rd : raw) rendered.push_back(render_doc(t, rd));

  // few-shot examples: from fewshot_split, else the task's own documents (excluding the doc itself)
  std::vector<Doc> shots_own;
  const std::vector<Doc>* shots = &rendered;
  if (!t.fewshot_split.empty()) {
    std::error_code ec;
    if (!fs::is_regular_file(t.fewshot_split, ec))
      w.key("fewshot_split").fail(fmt::format("data file \"{}\" not found", t.fewshot_split));
    for (const auto& rd : load_docs_file(t.fewshot_split)) shots_own.push_back(render_doc(t, rd));
    shots = &shots_own;
  } else if (tj.contains("fewshot_split")) {
    w.key("fewshot_split").fail("empty path");
  }
  if (t.num_fewshot > 0) {
    size_t avail = shots->size() - (shots == &rendered ? 1 : 0);
    if (shots->size() == 0 || avail < static_cast<size_t>(t.num_fewshot))
      w.key("num_fewshot").fail(fmt::format("{} examples requested but only {} available", t.num_fewshot, avail));
  }

  size_t n_use = limit ? std::min<size_t>(rendered.size(), static_cast<size_t>(*limit)) : rendered.size();
  for (size_t i = 0; i < n_use; ++i) {
    Doc d = rendered[i];
    if (t.output_type == OutputType::LoglikelihoodRolling) {
      // lm-eval scores doc_to_target for rolling tasks; doc_to_text when no target mapping is given
      if (!d.has_target) d.target = d.context, d.has_target = true;
      d.context.clear();
    } else {
      std::string prefix = t.description;
      if (t.num_fewshot > 0) {
        uint64_t seed = spec.seed ^ fnv1a(t.name) ^ (0x9E3779B97F4A7C15ull * (i + 1));
        long excl = shots == &rendered ? static_cast<long>(i) : -1;
        for (size_t k : sample_indices(shots->size(), static_cast<size_t>(t.num_fewshot), excl, seed)) {
          const Doc& s = (*shots)[k];
          prefix += s.context + t.target_delimiter + s.target + t.fewshot_delimiter;
        }
      }
      d.context = prefix + d.context;
    }
    t.docs.push_back(std::move(d));
  }
  return t;
}

}  // namespace

EvalSpec parse_spec(const json& j, const std::string& origin, const std::string& base_dir,
                    const std::string& model_override) {
  Where w{origin, ""};
  if (!j.is_object()) w.fail(fmt::format("expected a JSON object at the top level, got {}", show(j)));
  check_keys(j, w, {"model", "threads", "batch_size", "max_length", "seed", "limit", "tasks"});
  EvalSpec s;
  s.path = origin;
  s.raw = j;
  if (j.contains("model")) s.model = resolve_path(base_dir, expect_path(j["model"], w.key("model")));
  if (!model_override.empty()) s.model = model_override;
  if (s.model.empty()) w.fail("missing required key 'model' (or pass --model)");
  if (j.contains("threads")) s.threads = static_cast<int>(expect_int(j["threads"], w.key("threads"), 0, 4096));
  if (j.contains("batch_size")) s.batch_size = static_cast<int>(expect_int(j["batch_size"], w.key("batch_size"), 1, 4096));
  if (j.contains("max_length")) s.max_length = static_cast<int>(expect_int(j["max_length"], w.key("max_length"), 2, 1 << 24));
  if (j.contains("seed")) {
    const json& sd = j["seed"];
    if (!sd.is_number_integer() || (sd.is_number_integer() && !sd.is_number_unsigned() && sd.get<int64_t>() < 0))
      w.key("seed").fail(fmt::format("expected a non-negative integer, got {}", show(sd)));
    s.seed = sd.get<uint64_t>();
  }
  if (j.contains("limit")) s.limit = static_cast<int>(expect_int(j["limit"], w.key("limit"), 0, 1 << 30));
  if (!j.contains("tasks")) w.fail("missing required key 'tasks'");
  const json& tasks = j["tasks"];
  if (!tasks.is_array()) w.key("tasks").fail(fmt::format("expected a list of tasks, got {}", show(tasks)));
  if (tasks.empty()) w.key("tasks").fail("no tasks");
  std::set<std::string> names;
  for (size_t i = 0; i < tasks.size(); ++i) {
    TaskSpec t = parse_task(tasks[i], w.key("tasks").index(i), base_dir, s);
    if (!names.insert(t.name).second)
      w.key("tasks").index(i).key("name").fail(fmt::format("duplicate task name \"{}\"", t.name));
    s.tasks.push_back(std::move(t));
  }
  return s;
}

EvalSpec load_spec(const std::string& path, const std::string& model_override) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw SpecError(fmt::format("{}: is a directory (expected a JSON spec file)", path));
  if (!fs::exists(path, ec)) throw SpecError(fmt::format("{}: not found", path));
  std::ifstream f(path, std::ios::binary);
  if (!f) throw SpecError(fmt::format("{}: cannot open spec file", path));
  std::stringstream ss;
  ss << f.rdbuf();
  std::string text = ss.str();
  json j = parse_json_text(text, path);
  std::string base = fs::path(path).parent_path().string();
  return parse_spec(j, path, base.empty() ? "." : base, model_override);
}

}  // namespace kveval::eval
