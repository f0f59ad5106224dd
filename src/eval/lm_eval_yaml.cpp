#include "eval/lm_eval_yaml.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <new>
#include <vector>

#include <fmt/format.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <yaml-cpp/yaml.h>

#include "eval/data_files.hpp"
#include "eval/json_input.hpp"
#include "eval/lm_eval_task_keys.hpp"
#include "eval/task_hooks.hpp"
#include "eval/template/template.hpp"
#include "eval/yaml_scalar.hpp"
#include "util/error.hpp"
#include "util/input_file.hpp"

namespace kveval::eval {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct Keyed {
  json value;
  std::string where;  // "file:line"
};
using Config = std::vector<std::pair<std::string, Keyed>>;  // ordered top-level keys

std::string at(const std::string& file, const YAML::Mark& m) { return fmt::format("{}:{}", file, m.line + 1); }

/// A pattern that must match the whole string (PCRE2, anchored at both ends).
/// The patterns are ASCII and the subject is matched as bytes (no UTF mode),
/// so a scalar that is not valid UTF-8 simply does not match.
class WholeMatch {
 public:
  explicit WholeMatch(const char* pattern) {
    int err = 0;
    PCRE2_SIZE off = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED, PCRE2_ANCHORED | PCRE2_ENDANCHORED,
                          &err, &off, nullptr);
    if (!code_) throw Error(fmt::format("PCRE2 cannot compile /{}/ (error {} at offset {})", pattern, err, off));
  }
  ~WholeMatch() { pcre2_code_free(code_); }
  WholeMatch(const WholeMatch&) = delete;
  WholeMatch& operator=(const WholeMatch&) = delete;

  /// Whether the pattern matches all of `s`. Throws Error on a PCRE2 match error.
  bool operator()(const std::string& s) const {
    std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(pcre2_match_data_create(1, nullptr),
                                                                           &pcre2_match_data_free);
    if (!md) throw std::bad_alloc();
    const int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, 0, md.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) return false;
    if (rc < 0) throw Error(fmt::format("PCRE2 match error {}", rc));
    return true;
  }

 private:
  pcre2_code* code_ = nullptr;
};

/// PyYAML's implicit resolution of a plain scalar (yaml/resolver.py, YAML 1.1).
json resolve_plain(const std::string& s) {
  static const WholeMatch null_re("~|null|Null|NULL|");
  static const WholeMatch true_re("yes|Yes|YES|true|True|TRUE|on|On|ON");
  static const WholeMatch false_re("no|No|NO|false|False|FALSE|off|Off|OFF");
  static const WholeMatch int_re("[-+]?(0|[1-9][0-9_]*)");
  static const WholeMatch hex_re("[-+]?0x[0-9a-fA-F_]+");
  static const WholeMatch oct_re("[-+]?0[0-7_]+");
  static const WholeMatch float_re("[-+]?([0-9][0-9_]*)?\\.[0-9_]*([eE][-+][0-9]+)?");
  static const WholeMatch inf_re("[-+]?\\.(inf|Inf|INF)");
  static const WholeMatch nan_re("\\.(nan|NaN|NAN)");
  if (null_re(s)) return nullptr;
  if (true_re(s)) return true;
  if (false_re(s)) return false;
  std::string t;
  for (char c : s)
    if (c != '_') t += c;
  try {
    if (int_re(s)) return std::stoll(t);
    if (hex_re(s)) return std::stoll(t, nullptr, 16);
    if (oct_re(s)) return std::stoll(t, nullptr, 8);
  } catch (const std::out_of_range&) {
    throw SpecError("integer out of range (64-bit integers only)");
  }
  if (float_re(s) && s.find_first_of("0123456789") != std::string::npos) {
    // strtod, not stod: underflow is 0.0 as in PyYAML; overflow (PyYAML's inf) is an input error
    const double x = std::strtod(t.c_str(), nullptr);
    if (std::isinf(x)) throw SpecError(fmt::format("number {} is out of range (beyond the 64-bit float range)", s));
    return x;
  }
  if (inf_re(s)) return s[0] == '-' ? -INFINITY : INFINITY;
  if (nan_re(s)) throw SpecError("'.nan' is not a usable value");
  return s;
}

/// The bytes of a YAML file: a regular file within the input limit (util/input_file.hpp).
std::string read_text_file(const std::string& path) { return util::read_input_file(path, util::InputKind::Text); }

/// A quoted scalar as PyYAML reads it, from the file's bytes at the node's position.
std::string quoted_scalar(const YAML::Node& n, const std::string& file, const std::string& src, const std::string& key) {
  const size_t pos = static_cast<size_t>(n.Mark().pos);
  if (pos >= src.size() || (src[pos] != '"' && src[pos] != '\'')) return n.Scalar();  // a tagged "!" plain scalar
  try {
    return read_quoted_scalar(src, pos);
  } catch (const SpecError& e) {
    throw SpecError(fmt::format("{}: {}: {}", at(file, n.Mark()), key, e.what()));
  }
}

/// Values one file may expand to: an alias (*a) repeats the whole value it
/// names, so a few hundred bytes of nested aliases can stand for billions of
/// values ("billion laughs"); PyYAML shares them, kveval copies them into JSON.
constexpr size_t kMaxYamlValues = 1000000;

/// The value of node `n` as JSON; `values` counts the values converted so far
/// in this file (kMaxYamlValues). Throws SpecError naming file:line and key.
/// `src` is the file's text: quoted scalars are re-read from it (yaml_scalar.hpp).
json to_json(const YAML::Node& n, const std::string& file, const std::string& src, const std::string& key, size_t& values,
             int depth = 0) {
  if (depth > 64) throw SpecError(fmt::format("{}: {}: nested deeper than 64 levels", at(file, n.Mark()), key));
  if (++values > kMaxYamlValues)
    throw SpecError(fmt::format("{}: {}: the file expands to more than {} values (YAML aliases repeat what they name; "
                                "kveval's limit)", at(file, n.Mark()), key, kMaxYamlValues));
  const std::string& tag = n.Tag();
  if (tag == "!function") {  // lm-eval's import_function: a Python function of <module>.py next to `file`
    if (n.Type() != YAML::NodeType::Scalar)
      throw SpecError(fmt::format("{}: {}: '!function' expects module.function", at(file, n.Mark()), key));
    return function_marker(n.Scalar(), file, fmt::format("{}: {}", at(file, n.Mark()), key));
  }
  bool std_tag = tag.empty() || tag == "?" || tag == "!" || tag.rfind("tag:yaml.org,2002:", 0) == 0;
  if (!std_tag) throw SpecError(fmt::format("{}: {}: YAML tag '{}' is not supported", at(file, n.Mark()), key, tag));
  switch (n.Type()) {
    case YAML::NodeType::Null: case YAML::NodeType::Undefined: return nullptr;
    case YAML::NodeType::Scalar: {
      if (tag == "!") return quoted_scalar(n, file, src, key);
      if (tag == "tag:yaml.org,2002:str") return n.Scalar();
      try {
        return resolve_plain(n.Scalar());
      } catch (const SpecError& e) {
        throw SpecError(fmt::format("{}: {}: {}", at(file, n.Mark()), key, e.what()));
      }
    }
    case YAML::NodeType::Sequence: {
      json a = json::array();
      for (size_t i = 0; i < n.size(); ++i) a.push_back(to_json(n[i], file, src, fmt::format("{}[{}]", key, i), values, depth + 1));
      return a;
    }
    case YAML::NodeType::Map: {
      json o = json::object();
      for (auto it = n.begin(); it != n.end(); ++it) {
        std::string k = it->first.Scalar();
        if (k == "<<") throw SpecError(fmt::format("{}: {}: YAML merge keys ('<<') are not supported", at(file, it->first.Mark()), key));
        if (o.contains(k)) throw SpecError(fmt::format("{}: {}: duplicate key '{}'", at(file, it->first.Mark()), key, k));
        o[k] = to_json(it->second, file, src, key.empty() ? k : key + "." + k, values, depth + 1);
      }
      return o;
    }
  }
  return nullptr;
}

/// `k` for a message when it looks like a key name (letters, digits, '_', '-',
/// '.', at most 64 bytes), else only its size: a file that is not YAML parses
/// as keys that are whole lines of its text, which must not reach logs.
std::string shown_key(const std::string& k) {
  const bool name = !k.empty() && k.size() <= 64 && std::all_of(k.begin(), k.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  });
  return name ? k : fmt::format("a key of {} bytes that is not a key name (not shown)", k.size());
}

/// The one line for a YAML file whose top level is not a mapping: what it holds instead.
std::string not_a_task_yaml(const std::string& path, const YAML::Node& root) {
  const char* what = root.IsSequence() ? "it holds a YAML list"
                     : root.IsScalar() ? "it holds a single YAML value"
                                       : "it holds no value (an empty file, or comments only)";
  return fmt::format("{}: not an lm-eval task YAML: {}, not a mapping of task keys (task: NAME, dataset_path: ..., ...)",
                     path, what);
}

/// One file with its includes merged (lm-eval load_yaml: includes in order, then local keys).
Config load_config(const std::string& path, std::vector<std::string>& stack, const std::string& included_from) {
  std::error_code ec;
  std::string canon = fs::weakly_canonical(path, ec).string();
  if (std::find(stack.begin(), stack.end(), canon) != stack.end())
    throw SpecError(fmt::format("{}: include cycle: {} includes itself (through {})", included_from, path, stack.back()));
  if (!fs::is_regular_file(path, ec))
    throw SpecError(included_from.empty() ? fmt::format("{}: not found", path)
                                          : fmt::format("{}: include: file \"{}\" not found", included_from, path));
  std::string text;
  try {  // a regular file within the input limit (not /proc/self/mem, /dev/zero, a FIFO)
    text = util::read_input_file(path, util::InputKind::Text);
  } catch (const SpecError& e) {
    if (included_from.empty()) throw;
    throw SpecError(fmt::format("{}: include: {}", included_from, e.what()));
  }
  YAML::Node root;
  std::string src;
  try {
    src = text;
    root = YAML::Load(src);
  } catch (const YAML::ParserException& e) {
    throw SpecError(fmt::format("{}:{}:{}: {}", path, e.mark.line + 1, e.mark.column + 1, e.msg));
  } catch (const YAML::Exception& e) {
    throw SpecError(fmt::format("{}: {}", path, e.msg));
  }
  if (!root.IsMap()) throw SpecError(not_a_task_yaml(path, root));
  stack.push_back(canon);
  Config local, merged;
  YAML::Node include;
  size_t values = 0;  // to_json's count for this file
  bool has_include = false;
  std::string include_at;
  for (auto it = root.begin(); it != root.end(); ++it) {
    std::string k = it->first.Scalar();
    std::string w = at(path, it->first.Mark());
    if (k == "include") {
      include = it->second;
      has_include = true;
      include_at = w;
      continue;
    }
    for (const auto& [lk, lv] : local)
      if (lk == k) throw SpecError(fmt::format("{}: duplicate key '{}'", w, k));
    local.push_back({k, {to_json(it->second, path, src, k, values), w}});
  }
  if (has_include) {
    std::vector<std::string> files;
    json inc = to_json(include, path, src, "include", values);
    if (inc.is_string()) files.push_back(inc.get<std::string>());
    else if (inc.is_array())
      for (const auto& f : inc) {
        if (!f.is_string()) throw SpecError(fmt::format("{}: include: expected file names, got {}", include_at, json_excerpt(f)));
        files.push_back(f.get<std::string>());
      }
    else throw SpecError(fmt::format("{}: include: expected a file name or a list of them, got {}", include_at, json_excerpt(inc)));
    std::string dir = fs::path(path).parent_path().string();
    for (const auto& f : files) {
      // lm-eval includes task YAML files; any other file is not read (its text never reaches a message)
      if (!is_yaml_path(f))
        throw SpecError(fmt::format("{}: include: \"{}\" is not a YAML file (expected a .yaml or .yml task file)", include_at, f));
      std::string p = fs::path(f).is_absolute() || dir.empty() ? f : (fs::path(dir) / f).lexically_normal().string();
      for (auto& [k, v] : load_config(p, stack, include_at)) {
        auto e = std::find_if(merged.begin(), merged.end(), [&key = k](const auto& x) { return x.first == key; });
        if (e != merged.end()) e->second = std::move(v);
        else merged.push_back({k, std::move(v)});
      }
    }
  }
  for (auto& [k, v] : local) {
    auto e = std::find_if(merged.begin(), merged.end(), [&key = k](const auto& x) { return x.first == key; });
    if (e != merged.end()) e->second = std::move(v);
    else merged.push_back({k, std::move(v)});
  }
  stack.pop_back();
  return merged;
}

// Keys of lm-eval's TaskConfig that kveval reads.
const std::vector<std::string> kRead = {
    "task", "output_type", "dataset_path", "dataset_name", "dataset_kwargs", "training_split", "validation_split",
    "test_split", "fewshot_split", "doc_to_text", "doc_to_target", "doc_to_choice", "target_delimiter",
    "fewshot_delimiter", "description", "num_fewshot", "fewshot_config", "generation_kwargs", "metric_list",
    "filter_list", "metadata", "repeats", "gen_prefix", "task_alias", "process_docs", "process_results"};
// Keys that change nothing in what kveval computes (registry labels, decontamination, which lm-eval only runs on request).
const std::vector<std::string> kIgnored = {"tag", "should_decontaminate", "doc_to_decontamination_query",
                                           "unsafe_code"};
// Keys that need Python or features kveval does not have.
const std::vector<std::pair<std::string, std::string>> kRefused = {
    {"custom_dataset", "a Python dataset loader"},
    {"use_prompt", "promptsource prompts"},
    {"doc_to_image", "image inputs"},
    {"doc_to_audio", "audio inputs"},
    {"group", "a group in a task YAML (a group YAML lists its members under `task:`; label a task with `tag:`)"},
    {"task_list", "lm-eval's old task_list groups (write a group YAML with a `task:` list)"},
    {"class", "Python task classes"}};

}  // namespace

json yaml_file_values(const std::string& path) {
  std::string src = read_text_file(path);
  YAML::Node root;
  try {
    root = YAML::Load(src);
  } catch (const YAML::ParserException& e) {
    throw SpecError(fmt::format("{}:{}:{}: {}", path, e.mark.line + 1, e.mark.column + 1, e.msg));
  }
  size_t values = 0;
  return to_json(root, path, src, "", values);
}

bool is_yaml_path(const std::string& path) {
  std::string ext = fs::path(path).extension().string();
  return ext == ".yaml" || ext == ".yml";
}

namespace {

/// A task's keys for `path` from a group's inline config or overrides (lm-eval's
/// TaskFactory: a dict in a group's `task:` list): the keys of `base` (a file's, or none),
/// each of `over` replacing one (a shallow merge, as lm-eval's {**cfg, **overrides});
/// `where` names the overrides in messages. `include` is refused there.
Config overridden(Config base, const json& over, const std::string& where) {
  for (auto it = over.begin(); it != over.end(); ++it) {
    if (it.key() == "include") throw SpecError(fmt::format("{}: include: not allowed in an inline task config", where));
    auto e = std::find_if(base.begin(), base.end(), [&](const auto& x) { return x.first == it.key(); });
    if (e != base.end()) e->second = {it.value(), where};
    else base.push_back({it.key(), {it.value(), where}});
  }
  return base;
}

/// Reads `path` (and its includes) or, for a group's inline config (`entry`'s
/// lm_eval_inline), that config; then `entry`'s lm_eval_overrides. Refuses the
/// keys that need Python (kRefused) and unknown keys (with a close match), and
/// doc_to_text/doc_to_target mappings.
TaskKeys read_task_keys(const std::string& path, const json& entry) {
  std::vector<std::string> stack;
  Config cfg = entry.contains("lm_eval_inline")
                   ? overridden({}, entry["lm_eval_inline"], fmt::format("{} (an inline task config)", path))
                   : load_config(path, stack, "");
  if (entry.contains("lm_eval_overrides"))
    cfg = overridden(std::move(cfg), entry["lm_eval_overrides"], fmt::format("{} (a group's overrides)", path));
  TaskKeys keys;
  keys.path = path;
  for (auto& [k, v] : cfg) {
    for (const auto& [rk, why] : kRefused)
      if (k == rk) throw SpecError(fmt::format("{}: {}: not supported by kveval ({})", v.where, k, why));
    bool known = std::find(kRead.begin(), kRead.end(), k) != kRead.end() ||
                 std::find(kIgnored.begin(), kIgnored.end(), k) != kIgnored.end();
    if (!known) {
      std::vector<std::string> all = kRead;
      all.insert(all.end(), kIgnored.begin(), kIgnored.end());
      std::string hint = closest(k, all);
      throw SpecError(fmt::format("{}: {}: unknown lm-eval task key{}", v.where, shown_key(k),
                                  hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint)));
    }
    if (v.value.is_object() && !v.value.empty() && !is_function_marker(v.value) && (k == "doc_to_text" || k == "doc_to_target"))
      throw SpecError(fmt::format("{}: {}: expected a template or field name", v.where, k));
    (*keys.where)[k] = v.where;
    keys.values[k] = v.value;
  }
  return keys;
}

/// generation_kwargs of the task entry: a generate_until task without `until`
/// stops at the fewshot delimiter (lm-eval, config/task.py).
void set_generation_kwargs(const TaskKeys& c, const std::string& output_type, json& t) {
  if (output_type == "generate_until") {
    json g = c.has("generation_kwargs") ? c.at("generation_kwargs") : json::object();
    if (!g.is_object()) c.fail("generation_kwargs", "expected a mapping");
    if (!g.contains("until")) g["until"] = json::array({c.has("fewshot_delimiter") ? c.at("fewshot_delimiter") : json("\n\n")});
    t["generation_kwargs"] = g;
    if (!c.has("generation_kwargs")) (*c.where)["generation_kwargs"] = c.path;
  } else if (c.has("generation_kwargs")) {
    t["generation_kwargs"] = c.at("generation_kwargs");
  }
}

/// The task entry's keys other than its data: name, output_type (lm-eval's
/// default generate_until), mappings, delimiters, few-shot and metric keys,
/// metadata.version, generation_kwargs; the spec `entry`'s name, num_fewshot
/// and limit win.
json task_fields(const TaskKeys& c, const json& entry) {
  json t = json::object();
  if (!c.has("task"))
    throw SpecError(fmt::format("{}: not an lm-eval task: no 'task' key (an include base, whose keys task YAMLs take "
                                "with `include:`?); give a task YAML, one with `task: NAME`",
                                c.path));
  if (!c.at("task").is_string()) c.fail("task", fmt::format("expected a string, got {}", json_excerpt(c.at("task"))));
  t["name"] = entry.contains("name") ? entry["name"] : c.at("task");
  (*c.where)["name"] = c.w("task");
  std::string output_type = c.has("output_type") ? (c.at("output_type").is_string() ? c.at("output_type").get<std::string>() : "") : "generate_until";
  t["output_type"] = c.has("output_type") ? c.at("output_type") : json("generate_until");  // lm-eval's default
  if (c.has("repeats")) t["repeats"] = c.at("repeats");  // checked by the spec's parse_repeats

  // mappings: lm-eval allows an int doc_to_target (a fixed gold index) and a list/dict doc_to_choice
  for (const char* k : {"doc_to_text", "doc_to_target", "doc_to_choice"}) {
    if (!c.has(k)) continue;
    json v = c.at(k);
    if (std::string(k) == "doc_to_target" && v.is_number_integer()) v = fmt::format("{{{{{}}}}}", v.get<int64_t>());
    if (std::string(k) == "doc_to_choice" && v.is_object()) c.fail(k, "a mapping of choices is not supported (its order is lost); write a list");
    if (std::string(k) == "doc_to_choice" && v.is_array())
      for (auto& e : v)
        if (e.is_number() || e.is_boolean()) e = tmpl::python_str(e);  // lm-eval formats choices with str()
    t[k] = v;
  }
  for (const char* k : {"target_delimiter", "fewshot_delimiter", "description", "fewshot_config", "metric_list", "filter_list",
                        "gen_prefix", "task_alias"})
    if (c.has(k)) t[k] = c.at(k);
  if (c.has("num_fewshot")) t["num_fewshot"] = c.at("num_fewshot");
  if (entry.contains("num_fewshot")) t["num_fewshot"] = entry["num_fewshot"];
  if (entry.contains("limit")) t["limit"] = entry["limit"];
  if (entry.contains("task_alias")) t["task_alias"] = entry["task_alias"];
  if (c.has("metadata")) {
    if (!c.at("metadata").is_object()) c.fail("metadata", "expected a mapping");
    if (c.at("metadata").contains("version")) t["metadata"] = {{"version", c.at("metadata")["version"]}};
  }
  set_generation_kwargs(c, output_type, t);
  return t;
}

/// The task entry's dataset_path and fewshot_split: the spec entry's files,
/// else the local json splits, else a Hub dataset's splits as inline documents
/// (load_hub_docs: "docs", "fewshot_docs") (test, else validation split evaluated; few-shot
/// documents from fewshot_split, else fewshot_config.samples, else the training,
/// else the validation split: lm-eval FewshotConfig.get_docs, Task.fewshot_docs);
/// and lm-eval's few-shot rule in out.fewshot_same_split.
void set_data_paths(const TaskKeys& c, const json& entry, json& t, LmEvalTask& out) {
  std::map<std::string, std::vector<std::string>> files;  // split -> files
  const bool local = is_local_builder(c);
  const bool has_samples = c.has("fewshot_config") && c.at("fewshot_config").is_object() &&
                           c.at("fewshot_config").contains("samples") && !c.at("fewshot_config")["samples"].is_null();
  if (local) files = local_data_files(c);
  const bool hub = !local && c.has("dataset_path") && c.at("dataset_path").is_string();
  auto split_name = [&](const char* k) -> std::string {
    if (!c.has(k)) return "";
    if (!c.at(k).is_string()) c.fail(k, fmt::format("expected a split name, got {}", json_excerpt(c.at(k))));
    return c.at(k).get<std::string>();
  };
  std::string test = split_name("test_split"), val = split_name("validation_split"), train = split_name("training_split"),
              fewshot = split_name("fewshot_split");
  // a split's file, or the list of its files
  auto file_of = [&](const std::string& split, const char* key) -> json {
    if (split.empty()) return "";
    auto it = files.find(split);
    if (it == files.end()) {
      std::string have;
      for (const auto& [s, f] : files) have += (have.empty() ? "" : ", ") + s;
      c.fail(key, fmt::format("split '{}' has no file in dataset_kwargs.data_files (splits: {})", split, have));
    }
    return it->second.size() == 1 ? json(it->second[0]) : json(it->second);
  };
  if (entry.contains("dataset_path")) {
    t["dataset_path"] = entry["dataset_path"];
    (*c.where)["dataset_path"] = "spec";
  } else if (local) {
    std::string eval_split = !test.empty() ? test : val;
    if (eval_split.empty()) c.fail("dataset_path", "no test_split or validation_split names the documents to evaluate");
    t["dataset_path"] = file_of(eval_split, !test.empty() ? "test_split" : "validation_split");
  } else if (hub) {
    // the Hub splits the task reads, loaded by the embedded Python's `datasets`
    std::string eval_split = !test.empty() ? test : val;
    std::string shots = entry.contains("fewshot_split") || (fewshot.empty() && has_samples) ? ""
                        : !fewshot.empty() ? fewshot : !train.empty() ? train : val;
    load_hub_docs(c, eval_split, shots == eval_split ? "" : shots, t, out.order);
  } else {
    std::string name = c.has("dataset_path") ? json_excerpt(c.at("dataset_path")) : std::string("none");
    throw SpecError(fmt::format("{}: dataset_path: {} is not a local file: give a local copy of the split as "
                                "\"dataset_path\": \"docs.jsonl\" next to \"lm_eval_yaml\" in the spec, or write "
                                "dataset_path: json with dataset_kwargs.data_files", c.w("dataset_path"), name));
  }
  // few-shot documents: fewshot_split, else fewshot_config.samples, else training, else validation split
  // (lm-eval FewshotConfig.get_docs, Task.fewshot_docs); else the task's own
  if (entry.contains("fewshot_split")) {
    t["fewshot_split"] = entry["fewshot_split"];
  } else if (local && (fewshot.empty() && has_samples)) {
    // the inline samples
  } else if (local) {
    json fs_file = !fewshot.empty() ? file_of(fewshot, "fewshot_split")
                          : !train.empty() ? file_of(train, "training_split")
                          : !val.empty()   ? file_of(val, "validation_split")
                                           : "";
    if (fs_file != "" && fs_file != t["dataset_path"]) t["fewshot_split"] = fs_file;
  }
  // lm-eval's ContextSampler draws one example more, and drops the document, exactly when
  // fewshot_split == test_split as configured names (None == None included)
  out.fewshot_same_split = fewshot == test;
}

}  // namespace

LmEvalTask load_lm_eval_yaml(const std::string& path, const json& entry) {
  TaskKeys keys = read_task_keys(path, entry);
  LmEvalTask out;
  out.file = path;
  auto hooks = std::make_shared<TaskHooks>(take_task_hooks(keys.values, *keys.where, path));
  if (hooks->any()) out.hooks = hooks;
  json t = task_fields(keys, entry);
  set_data_paths(keys, entry, t, out);
  out.task = std::move(t);
  out.where = keys.where;
  return out;
}

json load_lm_eval_yaml_keys(const std::string& path) {
  std::vector<std::string> stack;
  json out = json::object();
  for (auto& [k, v] : load_config(path, stack, "")) out[k] = std::move(v.value);
  return out;
}

}  // namespace kveval::eval
