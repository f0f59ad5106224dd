#include "eval/spec.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "eval/chat_context.hpp"
#include "eval/filters.hpp"
#include "eval/gen_kwargs.hpp"
#include "eval/json_input.hpp"
#include "eval/lm_eval_yaml.hpp"
#include "eval/spec_check.hpp"
#include "eval/task_hooks.hpp"
#include "eval/task_index.hpp"
#include "eval/task_docs.hpp"
#include "util/error.hpp"
#include "util/input_file.hpp"

namespace kveval::eval {

namespace fs = std::filesystem;


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
  static const std::vector<std::string> mc = {"acc", "acc_norm", "acc_bytes"};
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

const std::vector<std::string>& default_metrics_for(OutputType t) {
  static const std::vector<std::string> ll = {"perplexity", "acc"};
  static const std::vector<std::string> mc = {"acc", "acc_norm"};
  static const std::vector<std::string> roll = {"word_perplexity", "byte_perplexity", "bits_per_byte"};
  static const std::vector<std::string> gen = {"exact_match"};
  switch (t) {
    case OutputType::Loglikelihood: return ll;
    case OutputType::MultipleChoice: return mc;
    case OutputType::LoglikelihoodRolling: return roll;
    case OutputType::GenerateUntil: return gen;
  }
  return ll;
}

namespace {

TaskSpec parse_task(const json& tj, const Where& w, const std::string& base_dir, const EvalSpec& spec,
                    std::optional<bool> fewshot_same_split = std::nullopt,
                    std::shared_ptr<const TaskHooks> hooks = nullptr, const DocKeyOrder* order = nullptr);

/// lm-eval's higher_is_better of each metric kveval reports.
bool higher_is_better_metric(const std::string& m) { return m == "acc" || m == "acc_norm" || m == "exact_match"; }

/// lm-eval's aggregation of each metric (lm_eval/api/metrics.py registrations).
std::string default_aggregation(const std::string& metric) {
  if (metric == "perplexity") return "perplexity";
  if (metric == "word_perplexity" || metric == "byte_perplexity") return "weighted_perplexity";
  if (metric == "bits_per_byte") return "bits_per_byte";
  return "mean";
}

/// A metric_list object's options: aggregation and higher_is_better must be
/// lm-eval's for that metric (kveval computes no other); exact_match's text options.
void parse_metric_options(TaskSpec& t, const std::string& name, const json& m, const Where& w) {
  if (m.contains("aggregation")) {
    std::string a = expect_string(m["aggregation"], w.key("aggregation"));
    if (a != default_aggregation(name))
      w.key("aggregation").fail(fmt::format("aggregation \"{}\" for {} is not supported (kveval aggregates {} with \"{}\")", a,
                                            name, name, default_aggregation(name)));
  }
  if (m.contains("higher_is_better")) {
    if (!m["higher_is_better"].is_boolean()) w.key("higher_is_better").fail("expected true or false");
    if (m["higher_is_better"].get<bool>() != higher_is_better_metric(name))
      w.key("higher_is_better").fail(fmt::format("{} for {} contradicts the metric (it is {})", m["higher_is_better"].dump(), name,
                                                 higher_is_better_metric(name) ? "true" : "false"));
  }
  for (const char* k : {"ignore_case", "ignore_punctuation", "regexes_to_ignore"}) {
    if (!m.contains(k)) continue;
    if (name != "exact_match") w.key(k).fail(fmt::format("only exact_match takes '{}'", k));
    if (std::string(k) == "regexes_to_ignore") {
      const json& r = m[k];
      if (!r.is_array()) w.key(k).fail(fmt::format("expected a list of regexes, got {}", json_excerpt(r)));
      for (size_t i = 0; i < r.size(); ++i) t.exact_match.regexes_to_ignore.push_back(expect_string(r[i], w.key(k).index(i)));
    } else {
      if (!m[k].is_boolean()) w.key(k).fail(fmt::format("expected true or false, got {}", json_excerpt(m[k])));
      (std::string(k) == "ignore_case" ? t.exact_match.ignore_case : t.exact_match.ignore_punctuation) = m[k].get<bool>();
    }
  }
}

/// fewshot_config (lm-eval's sampler, samples and few-shot mappings).
void parse_fewshot_config(TaskSpec& t, const json& tj, const Where& w) {
  if (!tj.contains("fewshot_config") || tj["fewshot_config"].is_null()) return;
  Where fw = w.key("fewshot_config");
  const json& f = expect_object(tj["fewshot_config"], fw);
  check_keys(f, fw, {"sampler", "samples", "doc_to_text", "doc_to_target", "doc_to_choice", "target_delimiter",
                     "fewshot_delimiter", "gen_prefix"});
  if (f.contains("sampler")) {
    t.fewshot_sampler = expect_string(f["sampler"], fw.key("sampler"));
    if (t.fewshot_sampler != "default" && t.fewshot_sampler != "first_n")
      fw.key("sampler").fail(fmt::format("unknown sampler \"{}\" (lm-eval's samplers: default, first_n)", t.fewshot_sampler));
  }
  if (f.contains("samples")) {
    const json& s = f["samples"];
    if (!s.is_array()) fw.key("samples").fail(fmt::format("expected a list of documents, got {}", json_excerpt(s)));
    for (size_t i = 0; i < s.size(); ++i) expect_object(s[i], fw.key("samples").index(i));
    t.fewshot_samples = s;
  }
  for (const char* k : {"doc_to_text", "doc_to_target", "target_delimiter", "fewshot_delimiter"})
    if (f.contains(k)) expect_string(f[k], fw.key(k));
  if (f.contains("doc_to_text")) t.fewshot_doc_to_text = f["doc_to_text"].get<std::string>();
  if (f.contains("doc_to_target")) t.fewshot_doc_to_target = f["doc_to_target"].get<std::string>();
  if (f.contains("target_delimiter")) t.fewshot_target_delimiter = f["target_delimiter"].get<std::string>();
  if (f.contains("fewshot_delimiter")) t.fewshot_fewshot_delimiter = f["fewshot_delimiter"].get<std::string>();
  // null is lm-eval's None: the examples have no prefix, as with ""
  if (f.contains("gen_prefix"))
    t.fewshot_gen_prefix = f["gen_prefix"].is_null() ? "" : expect_string(f["gen_prefix"], fw.key("gen_prefix"));
  if (f.contains("doc_to_choice")) {
    const json& c = f["doc_to_choice"];
    if (c.is_array()) {
      for (size_t i = 0; i < c.size(); ++i) expect_string(c[i], fw.key("doc_to_choice").index(i));
    } else {
      expect_string(c, fw.key("doc_to_choice"));
    }
    t.fewshot_doc_to_choice = c;
  }
}

/// metadata: only its numeric `version`.
void parse_metadata(TaskSpec& t, const json& tj, const Where& w) {
  if (!tj.contains("metadata") || tj["metadata"].is_null()) return;
  const json& m = expect_object(tj["metadata"], w.key("metadata"));
  check_keys(m, w.key("metadata"), {"version"});
  if (m.contains("version")) {
    if (!m["version"].is_number()) w.key("metadata").key("version").fail(fmt::format("expected a number, got {}", json_excerpt(m["version"])));
    t.version = m["version"].get<double>();
  }
}

/// One step {"function": ..., regex options} of a filter pipeline (`hooks`: the task's, for custom filters).
FilterStep parse_filter_step(const json& step, const Where& sw, const TaskHooks* hooks) {
  const json& st = expect_object(step, sw);
  if (!st.contains("function")) sw.fail("missing required key 'function'");
  FilterStep fs;
  fs.function = expect_string(st["function"], sw.key("function"));
  if (parse_hook_filter_step(st, sw, hooks, fs)) return fs;
  static const std::vector<std::string> fns = {"regex", "take_first", "take_first_k", "majority_vote", "lowercase",
                                               "uppercase", "remove_whitespace"};
  if (std::find(fns.begin(), fns.end(), fs.function) == fns.end())
    sw.key("function").fail(fmt::format("filter function \"{}\" is not supported (supported: regex, take_first, take_first_k, "
                                        "majority_vote, lowercase, uppercase, remove_whitespace, custom, and "
                                        "'!function module.Class' in a task YAML)", fs.function));
  if (parse_selection_step(st, sw, fs)) return fs;
  if (fs.function == "regex") {
    check_keys(st, sw, {"function", "regex_pattern", "group_select", "fallback"});
    if (st.contains("regex_pattern")) fs.regex_pattern = expect_string(st["regex_pattern"], sw.key("regex_pattern"));
    if (st.contains("group_select")) fs.group_select = static_cast<int>(expect_int(st["group_select"], sw.key("group_select"), -1000, 1000));
    if (st.contains("fallback")) fs.fallback = expect_string(st["fallback"], sw.key("fallback"));
  } else {
    check_keys(st, sw, {"function"});
  }
  return fs;
}

/// filter_list: named pipelines of filter steps (generate_until tasks only).
void parse_filter_list(TaskSpec& t, const json& tj, const Where& w) {
  if (!tj.contains("filter_list") || tj["filter_list"].is_null()) return;
  Where lw = w.key("filter_list");
  if (t.output_type != OutputType::GenerateUntil) lw.fail("only generate_until tasks take filters");
  const json& fl = tj["filter_list"];
  if (!fl.is_array() || fl.empty()) lw.fail(fmt::format("expected a non-empty list of filters, got {}", json_excerpt(fl)));
  for (size_t i = 0; i < fl.size(); ++i) {
    Where pw = lw.index(i);
    const json& p = expect_object(fl[i], pw);
    check_keys(p, pw, {"name", "filter"});
    FilterPipeline fp;
    if (!p.contains("name")) pw.fail("missing required key 'name'");
    fp.name = expect_string(p["name"], pw.key("name"));
    if (fp.name.empty() || fp.name.find_first_of(",|") != std::string::npos) pw.key("name").fail("must be non-empty, without ',' or '|'");
    for (const auto& other : t.filter_list)
      if (other.name == fp.name) pw.key("name").fail(fmt::format("duplicate filter name \"{}\"", fp.name));
    if (!p.contains("filter") || !p["filter"].is_array() || p["filter"].empty()) pw.key("filter").fail("expected a non-empty list of steps");
    for (size_t k = 0; k < p["filter"].size(); ++k)
      fp.steps.push_back(parse_filter_step(p["filter"][k], pw.key("filter").index(k), t.hooks.get()));
    t.filter_list.push_back(std::move(fp));
  }
}

/// fewshot_config, metadata, filter_list (lm-eval task keys).
void parse_lm_eval_extras(TaskSpec& t, const json& tj, const Where& w) {
  parse_fewshot_config(t, tj, w);
  parse_metadata(t, tj, w);
  parse_filter_list(t, tj, w);
}

/// `rolling_method` ("lm-eval" default, "llama.cpp") and `context_length`
/// (required with "llama.cpp", refused otherwise); rolling tasks only.
void parse_rolling_method(const json& tj, const Where& w, TaskSpec& t) {
  const bool rolling = t.output_type == OutputType::LoglikelihoodRolling;
  if (tj.contains("rolling_method")) {
    Where rw = w.key("rolling_method");
    if (!rolling) rw.fail(fmt::format("only loglikelihood_rolling tasks take a rolling_method (this task is {})",
                                      to_string(t.output_type)));
    const std::string m = expect_string(tj["rolling_method"], rw);
    if (m == "llama.cpp") t.rolling_method = RollingMethod::LlamaCpp;
    else if (m != "lm-eval") rw.fail(fmt::format("unknown rolling_method \"{}\"; expected \"lm-eval\" or \"llama.cpp\"", m));
  }
  if (t.rolling_method == RollingMethod::LlamaCpp) {
    if (!tj.contains("context_length"))
      w.fail("rolling_method \"llama.cpp\" needs 'context_length' (tokens per chunk, llama-perplexity's -c)");
    // >= 4: llama.cpp scores tokens first+1 .. n_ctx-1 of each chunk, first = n_ctx/2
    t.context_length = static_cast<int>(expect_int(tj["context_length"], w.key("context_length"), 4, 1 << 24));
  } else if (tj.contains("context_length")) {
    w.key("context_length").fail("only rolling_method \"llama.cpp\" takes a context_length");
  }
}

/// `name` (required, printable, without '|') and the optional `task_alias`.
void parse_task_name(const json& tj, const Where& w, TaskSpec& t) {
  if (!tj.contains("name")) w.fail("missing required key 'name'");
  t.name = expect_string(tj["name"], w.key("name"));
  if (t.name.empty()) w.key("name").fail("must not be empty");
  for (unsigned char c : t.name)
    if (c < 0x20 || c == 0x7F || c == '|')
      w.key("name").fail(fmt::format("{} (task names are printable text without '|', they head table rows)",
                                     c == '|' ? std::string("contains '|'") : fmt::format("contains control byte 0x{:02x}", c)));
  if (tj.contains("task_alias") && !tj["task_alias"].is_null()) {
    t.task_alias = expect_string(tj["task_alias"], w.key("task_alias"));
    for (unsigned char c : t.task_alias)
      if (c < 0x20 || c == 0x7F || c == '|')
        w.key("task_alias").fail("contains '|' or a control byte (an alias heads table rows)");
  }
}

/// The required `output_type`, one of lm-eval's four (a close misspelling is named).
OutputType parse_output_type(const json& tj, const Where& w) {
  if (!tj.contains("output_type"))
    w.fail("missing required key 'output_type' (one of loglikelihood, multiple_choice, loglikelihood_rolling, generate_until)");
  std::string ot = expect_string(tj["output_type"], w.key("output_type"));
  std::vector<std::string> names;
  for (OutputType o : {OutputType::Loglikelihood, OutputType::MultipleChoice, OutputType::LoglikelihoodRolling,
                       OutputType::GenerateUntil}) {
    names.push_back(to_string(o));
    if (ot == to_string(o)) return o;
  }
  std::string hint = closest(ot, names);
  w.key("output_type").fail(fmt::format("unknown output_type \"{}\"{}; expected one of loglikelihood, multiple_choice, loglikelihood_rolling, generate_until",
                                        ot, hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint)));
}

/// The prompt mappings and delimiters (doc_to_text, doc_to_target,
/// doc_to_choice, target_delimiter, description, fewshot_delimiter,
/// gen_prefix), `limit` and `num_fewshot`.
void parse_prompt_fields(const json& tj, const Where& w, TaskSpec& t) {
  auto opt_string = [&](const char* k, std::string& dst) {
    if (tj.contains(k)) dst = expect_string(tj[k], w.key(k));
  };
  opt_string("doc_to_text", t.doc_to_text);
  opt_string("doc_to_target", t.doc_to_target);
  opt_string("target_delimiter", t.target_delimiter);
  opt_string("description", t.description);
  opt_string("fewshot_delimiter", t.fewshot_delimiter);
  if (tj.contains("gen_prefix") && !tj["gen_prefix"].is_null()) t.gen_prefix = expect_string(tj["gen_prefix"], w.key("gen_prefix"));
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
  if (tj.contains("limit")) t.limit = expect_limit(tj["limit"], w.key("limit"));
  if (tj.contains("num_fewshot") && !tj["num_fewshot"].is_null())
    t.num_fewshot = static_cast<int>(expect_int(tj["num_fewshot"], w.key("num_fewshot"), 0, 1 << 20));
}

/// The mappings each output type requires; doc_to_choice only on multiple_choice.
void check_required_mappings(const json& tj, const Where& w, const TaskSpec& t, const EvalSpec& spec) {
  switch (t.output_type) {
    case OutputType::Loglikelihood:
      if (!tj.contains("doc_to_text")) w.fail("loglikelihood task needs 'doc_to_text' (the context)");
      if (t.doc_to_target.empty()) w.fail("loglikelihood task needs 'doc_to_target' (the continuation)");
      break;
    case OutputType::MultipleChoice:
      if (!tj.contains("doc_to_text")) w.fail("multiple_choice task needs 'doc_to_text'");
      if (t.doc_to_choice.is_null()) w.fail("multiple_choice task needs 'doc_to_choice'");
      if (t.doc_to_target.empty()) w.fail("multiple_choice task needs 'doc_to_target' (gold index or gold choice)");
      break;
    case OutputType::LoglikelihoodRolling:
      if (t.doc_to_target.empty() && t.doc_to_text.empty())
        w.fail("loglikelihood_rolling task needs 'doc_to_target' (the text to score; lm-eval convention) or 'doc_to_text'");
      if (t.num_fewshot > 0)
        task_key_where(w, spec.set_by, "num_fewshot", t.name).fail("loglikelihood_rolling tasks take no few-shot examples");
      break;
    case OutputType::GenerateUntil:
      if (!tj.contains("doc_to_text")) w.fail("generate_until task needs 'doc_to_text' (the prompt)");
      break;
  }
  if (!t.doc_to_choice.is_null() && t.output_type != OutputType::MultipleChoice)
    w.key("doc_to_choice").fail(fmt::format("only multiple_choice tasks take choices (this task is {})", to_string(t.output_type)));
}

/// metric_list: metric names or objects with options, each available for the
/// output type (duplicates kept once); without it, the type's default metrics.
void parse_metric_list(const json& tj, const Where& w, TaskSpec& t) {
  if (!tj.contains("metric_list")) {
    t.metric_list = default_metrics_for(t.output_type);
    if (t.rolling_method == RollingMethod::LlamaCpp) t.metric_list.push_back(kPerplexityLlamaCpp);
    return;
  }
  Where mw = w.key("metric_list");
  const json& ml = tj["metric_list"];
  if (!ml.is_array()) mw.fail(fmt::format("expected a list, got {}", json_excerpt(ml)));
  std::vector<std::string> allowed = metrics_for(t.output_type);
  if (t.rolling_method == RollingMethod::LlamaCpp) allowed.push_back(kPerplexityLlamaCpp);
  for (size_t i = 0; i < ml.size(); ++i) {
    const Where ew = mw.index(i);  // the entry; iw: its metric name
    Where iw = ew;
    std::string name;
    if (ml[i].is_object()) {
      check_keys(ml[i], ew, {"metric", "aggregation", "higher_is_better", "ignore_case", "ignore_punctuation", "regexes_to_ignore"});
      if (!ml[i].contains("metric")) ew.fail("missing required key 'metric'");
      iw = ew.key("metric");
      name = expect_string(ml[i]["metric"], iw);
    } else {
      name = expect_string(ml[i], iw);
    }
    if (name == kPerplexityLlamaCpp && t.rolling_method != RollingMethod::LlamaCpp)
      iw.fail(fmt::format("metric \"{}\" needs \"rolling_method\": \"llama.cpp\" and \"context_length\" "
                          "on a loglikelihood_rolling task", name));
    const bool from_python = t.hooks && t.hooks->scores();  // process_results / metric functions name their metrics
    if (!from_python && std::find(allowed.begin(), allowed.end(), name) == allowed.end()) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      std::string hint = closest(name, allowed);
      iw.fail(fmt::format("metric \"{}\" is not available for {}{}; available: {}", name, to_string(t.output_type),
                          hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint), list));
    }
    if (ml[i].is_object()) parse_metric_options(t, name, ml[i], ew);  // after the name is known to be a metric
    if (std::find(t.metric_list.begin(), t.metric_list.end(), name) == t.metric_list.end()) t.metric_list.push_back(name);
  }
  if (t.metric_list.empty()) mw.fail("empty metric list");
}

TaskSpec parse_task(const json& tj, const Where& w, const std::string& base_dir, const EvalSpec& spec,
                    std::optional<bool> fewshot_same_split, std::shared_ptr<const TaskHooks> hooks, const DocKeyOrder* order) {
  expect_object(tj, w);
  static const std::vector<std::string> keys = {
      "name", "output_type", "dataset_path", "docs", "doc_to_text", "doc_to_target", "doc_to_choice",
      "target_delimiter", "description", "generation_kwargs", "metric_list", "num_fewshot", "fewshot_split",
      "fewshot_docs", "fewshot_delimiter", "fewshot_config", "filter_list", "metadata", "limit", "rolling_method", "context_length",
      "gen_prefix", "task_alias", "repeats"};
  check_keys(tj, w, keys);
  TaskSpec t;
  t.hooks = std::move(hooks);
  parse_task_name(tj, w, t);
  t.output_type = parse_output_type(tj, w);
  parse_prompt_fields(tj, w, t);
  parse_lm_eval_extras(t, tj, w);
  if (tj.contains("fewshot_split")) {
    t.fewshot_files = expect_paths(tj["fewshot_split"], w.key("fewshot_split"), base_dir);
    t.fewshot_split = t.fewshot_files[0];
  }
  parse_rolling_method(tj, w, t);
  if (t.context_length > 0 && spec.max_length && t.context_length > *spec.max_length)
    w.key("context_length").fail(fmt::format("{} tokens per chunk do not fit max_length {}", t.context_length, *spec.max_length));
  check_required_mappings(tj, w, t, spec);
  parse_generation_kwargs(tj, w, spec, t);
  parse_repeats(tj, w, t);
  parse_metric_list(tj, w, t);
  validate_filters(t, w.text());
  t.fewshot_same_split = fewshot_same_split;
  build_task_docs(t, tj, w, base_dir, spec, order);
  return t;
}

/// A task entry {"lm_eval_yaml": "x.yaml", ...}: the YAML read into a task entry, then checked as one.
TaskSpec parse_yaml_task(const json& tj, const Where& w, const std::string& base_dir, const EvalSpec& spec) {
  check_keys(tj, w, {"lm_eval_yaml", "dataset_path", "fewshot_split", "num_fewshot", "limit", "name", "task_alias",
                     "lm_eval_inline", "lm_eval_overrides"});
  std::string yaml = resolve_path(base_dir, expect_path(tj["lm_eval_yaml"], w.key("lm_eval_yaml")));
  std::error_code ec;
  if (!fs::is_regular_file(yaml, ec)) w.key("lm_eval_yaml").fail(fmt::format("file \"{}\" not found", yaml));
  json entry = json::object();
  for (const char* k : {"dataset_path", "fewshot_split"})
    if (tj.contains(k)) entry[k] = resolve_path(base_dir, expect_path(tj[k], w.key(k)));
  if (tj.contains("num_fewshot")) entry["num_fewshot"] = expect_int(tj["num_fewshot"], w.key("num_fewshot"), 0, 1 << 30);
  if (tj.contains("limit")) entry["limit"] = expect_limit(tj["limit"], w.key("limit"));
  for (const char* k : {"name", "task_alias"})
    if (tj.contains(k)) entry[k] = expect_string(tj[k], w.key(k));
  for (const char* k : {"lm_eval_inline", "lm_eval_overrides"})  // a group's inline task dict (TaskIndex)
    if (tj.contains(k)) entry[k] = expect_object(tj[k], w.key(k));
  LmEvalTask lt = load_lm_eval_yaml(yaml, entry);
  // entry overrides are reported at the spec's path
  auto lines = std::make_shared<std::map<std::string, std::string>>(*lt.where);
  for (const char* k : {"dataset_path", "fewshot_split", "num_fewshot", "limit"})
    if (tj.contains(k)) (*lines)[k] = w.key(k).text();
  for (const char* k : {"name", "task_alias"})
    if (tj.contains(k)) (*lines)[k] = w.key(k).text();
  Where yw{yaml, "", lines};
  TaskSpec t = parse_task(lt.task, yw, "", spec, lt.fewshot_same_split, lt.hooks, &lt.order);
  t.source = yaml;
  t.loglikelihood_delimiter = false;  // lm-eval: loglikelihood arguments are (context, doc_to_target)
  return t;
}

/// True when the YAML at `path` is a group (a `task:` list under a `group:` name).
bool is_group_yaml(const std::string& path) {
  const json c = load_lm_eval_yaml_keys(path);
  return c.contains("group") && c.contains("task") && c["task"].is_array();
}

/// The spec's tasks with task, tag and group names expanded (expand_task_names);
/// the index is built from include_path, then `o.include_paths`, then the
/// environment. An entry {"lm_eval_yaml": GROUP.yaml, ...} naming a group YAML
/// stands for the group's name, with the YAML's folder searched first. The
/// groups met are appended to `groups`, the index's notes on the names used to `notes`.
std::vector<std::pair<size_t, json>> named_tasks(const json& j, const Where& w, const std::string& base_dir,
                                                 const TaskOverrides& o, std::vector<GroupSpec>& groups,
                                                 std::vector<std::string>& notes) {
  json tasks = j["tasks"];
  std::vector<std::pair<std::string, std::string>> group_dirs;
  for (size_t i = 0; i < tasks.size(); ++i) {
    json& e = tasks[i];
    if (!e.is_object() || !e.contains("lm_eval_yaml") || !e["lm_eval_yaml"].is_string()) continue;
    const std::string yaml = resolve_path(base_dir, e["lm_eval_yaml"].get<std::string>());
    std::error_code ec;
    if (!fs::is_regular_file(yaml, ec) || !is_group_yaml(yaml)) continue;
    for (auto it = e.begin(); it != e.end(); ++it)
      if (it.key() != "lm_eval_yaml" && it.key() != "num_fewshot" && it.key() != "limit")
        w.key("tasks").index(i).key(it.key()).fail("not allowed with a group YAML (a group takes num_fewshot and limit)");
    json named = e;
    named.erase("lm_eval_yaml");
    named["task"] = load_lm_eval_yaml_keys(yaml)["group"];
    e = std::move(named);
    const std::string dir = fs::path(yaml).parent_path().string();
    group_dirs.emplace_back(w.key("tasks").index(i).key("lm_eval_yaml").text() + ":", dir.empty() ? "." : dir);
  }
  std::optional<TaskIndex> index;
  auto build = [&]() -> const TaskIndex& {
    if (index) return *index;
    std::vector<std::pair<std::string, std::string>> dirs = group_dirs;
    if (j.contains("include_path")) {
      const json& p = j["include_path"];
      const std::vector<json> items = p.is_array() ? std::vector<json>(p.begin(), p.end()) : std::vector<json>{p};
      for (size_t k = 0; k < items.size(); ++k) {
        Where pw = p.is_array() ? w.key("include_path").index(k) : w.key("include_path");
        dirs.emplace_back(pw.text() + ":", resolve_path(base_dir, expect_path(items[k], pw)));
      }
    }
    for (const auto& d : o.include_paths) dirs.emplace_back("--include-path", d);
    for (const auto& d : include_paths_from_env()) dirs.emplace_back(std::string(kIncludePathEnv) + ":", d);
    index = TaskIndex::build(dirs);
    return *index;
  };
  const bool cli = w.origin == "--tasks";  // `run --tasks`: the names are the option's
  return expand_task_names(tasks, build, [&](size_t i) { return cli ? w.origin : w.key("tasks").index(i).text(); },
                           o.num_fewshot, &groups, &notes);
}

}  // namespace

EvalSpec parse_spec(const json& j, const std::string& origin, const std::string& base_dir,
                    const std::string& model_override, const TaskOverrides& o) {
  Where w{origin, ""};
  if (!j.is_object()) w.fail(fmt::format("expected a JSON object at the top level, got {}", json_excerpt(j)));
  check_keys(j, w, spec_top_keys());
  EvalSpec s;
  s.path = origin;
  s.raw = j;
  if (j.contains("model")) s.model = resolve_path(base_dir, expect_path(j["model"], w.key("model")));
  if (!model_override.empty()) s.model = model_override;
  if (s.model.empty()) w.fail("missing required key 'model' (or pass --model)");
  if (j.contains("dtype")) {
    const std::string d = expect_string(j["dtype"], w.key("dtype"));
    try {
      s.dtype = parse_compute_dtype(d);
    } catch (const ArgumentError&) {
      w.key("dtype").fail(fmt::format("\"{}\": expected {}", d, join_names(compute_dtype_name_list(), " or ", "\"")));
    }
  }
  if (j.contains("kv_cache_dtype")) {
    const std::string d = expect_string(j["kv_cache_dtype"], w.key("kv_cache_dtype"));
    try {
      s.kv_cache_dtype = parse_kv_cache_dtype(d);
    } catch (const ArgumentError&) {
      w.key("kv_cache_dtype").fail(
          fmt::format("\"{}\": expected {}", d, join_names(kv_cache_dtype_name_list(), " or ", "\"")));
    }
  }
  if (j.contains("mmap")) {
    if (!j["mmap"].is_boolean()) w.key("mmap").fail(fmt::format("expected true or false, got {}", json_excerpt(j["mmap"])));
    s.map_weights = j["mmap"].get<bool>();
  }
  if (j.contains("threads")) s.threads = static_cast<int>(expect_int(j["threads"], w.key("threads"), 0, 4096));
  if (j.contains("batch_size") && j["batch_size"] == json("auto")) s.batch_size_auto = true;
  else if (j.contains("batch_size")) s.batch_size = static_cast<int>(expect_int(j["batch_size"], w.key("batch_size"), 1, kMaxBatchSize));
  if (j.contains("max_length")) s.max_length = static_cast<int>(expect_int(j["max_length"], w.key("max_length"), 2, 1 << 24));
  if (j.contains("seed")) {
    const json& sd = j["seed"];
    if (!sd.is_number_integer() || (sd.is_number_integer() && !sd.is_number_unsigned() && sd.get<int64_t>() < 0))
      w.key("seed").fail(fmt::format("expected a non-negative integer, got {}", json_excerpt(sd)));
    s.seed = sd.get<uint64_t>();
  }
  if (o.fewshot_seed) s.seed = *o.fewshot_seed;
  if (o.num_fewshot) s.set_by["num_fewshot"] = "--num-fewshot";
  if (j.contains("limit")) s.limit = expect_limit(j["limit"], w.key("limit"));
  if (j.contains("bootstrap_iters"))
    s.bootstrap_iters = static_cast<int>(expect_int(j["bootstrap_iters"], w.key("bootstrap_iters"), 0, 100000000));
  s.gen_kwargs = o.gen_kwargs;
  if (s.gen_kwargs.is_object()) {  // checked even when no task generates
    TaskSpec probe;
    probe.output_type = OutputType::GenerateUntil;
    parse_generation_kwargs(json::object(), w, s, probe);
  }
  if (!j.contains("tasks")) w.fail("missing required key 'tasks'");
  resolve_chat_options(j, w, o, s);  // before the tasks: their contexts are rendered with it
  const json& tasks = j["tasks"];
  if (!tasks.is_array()) w.key("tasks").fail(fmt::format("expected a list of tasks, got {}", json_excerpt(tasks)));
  if (tasks.empty()) w.key("tasks").fail("no tasks");
  std::set<std::string> names;
  const bool selection = origin == "--tasks";  // `run --tasks`: a task met twice (a name and a tag holding it) runs once
  for (const auto& [i, entry] : named_tasks(j, w, base_dir, o, s.groups, s.notes)) {
    TaskSpec t = entry.is_object() && entry.contains("lm_eval_yaml")
                     ? parse_yaml_task(entry, w.key("tasks").index(i), base_dir, s)
                     : parse_task(entry, w.key("tasks").index(i), base_dir, s);
    if (!names.insert(t.name).second) {
      if (selection) continue;
      w.key("tasks").index(i).key("name").fail(fmt::format("duplicate task name \"{}\"", t.name));
    }
    s.tasks.push_back(std::move(t));
  }
  return s;
}

std::string value_origin(const EvalSpec& s, const std::string& key) {
  const auto it = s.set_by.find(key);
  return it != s.set_by.end() ? it->second : fmt::format("{}: {}", s.path, key);
}

EvalSpec load_spec(const std::string& path, const std::string& model_override, const TaskOverrides& o) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw SpecError(fmt::format("{}: is a directory (expected a JSON spec file)", path));
  if (!fs::exists(path, ec)) throw SpecError(fmt::format("{}: not found", path));
  std::string base = fs::path(path).parent_path().string();
  if (is_yaml_path(path)) {
    // an lm-eval task YAML as the whole spec: one task, the model from --model
    if (model_override.empty())
      throw SpecError(fmt::format("{}: an lm-eval task YAML given as the spec needs --model (it names no model)", path));
    json j = {{"model", model_override}, {"tasks", json::array({{{"lm_eval_yaml", fs::path(path).filename().string()}}})}};
    return parse_spec(j, path, base.empty() ? "." : base, model_override, o);
  }
  const std::string text = util::read_input_file(path, util::InputKind::Text);
  json j = parse_spec_text(text, path);
  return parse_spec(j, path, base.empty() ? "." : base, model_override, o);
}

}  // namespace kveval::eval
