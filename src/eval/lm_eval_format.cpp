// The results file (--output): see lm_eval_format.hpp; the samples file is lm_eval_samples.cpp.
#include "eval/lm_eval_format.hpp"

#include <algorithm>
#include <chrono>
#include <functional>
#include <cmath>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "eval/chat_context.hpp"
#include "eval/groups.hpp"
#include "eval/lm_eval_format_impl.hpp"
#include "eval/metrics.hpp"
#include "eval/report.hpp"
#include "util/error.hpp"
#include "util/hash.hpp"

namespace kveval::eval {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

std::string results_key(std::string_view metric, std::string_view filter) {
  return fmt::format("{},{}", metric, filter);
}

std::string hash_string(std::string_view s) { return sha256_hex(s); }

namespace detail {

/// A task's generation_kwargs as lm-eval logs them: until, max_gen_toks,
/// do_sample, and with do_sample the sampling keys and seed.
ojson generation_kwargs_json(const GenerationKwargs& g) {
  ojson j = {{"until", g.until}, {"max_gen_toks", g.max_gen_toks}, {"do_sample", g.sampling.do_sample}};
  if (g.sampling.do_sample)
    j.update({{"temperature", g.sampling.temperature},
              {"top_k", g.sampling.top_k},
              {"top_p", g.sampling.top_p},
              {"min_p", g.sampling.min_p},
              {"seed", g.sampling.seed}});
  return j;
}


}  // namespace detail

namespace {

using detail::generation_kwargs_json;

/// torch's name of a KV-cache element type ("f32" -> "float32", "bf16" ->
/// "bfloat16", "f16" -> "float16"), as vLLM's `kv_cache_dtype` model argument;
/// "" when the run built no cache type.
std::string torch_dtype_name(const std::string& d) {
  if (d == "bf16") return "bfloat16";
  if (d == "f16") return "float16";
  if (d == "f32") return "float32";
  return d;
}

ojson finite_or(const std::optional<double>& v, ojson otherwise) {
  return v && std::isfinite(*v) ? ojson(*v) : otherwise;
}

/// The task's configuration with lm-eval's TaskConfig keys.
ojson task_config(const TaskSpec& t) {
  ojson c;
  c["task"] = t.name;
  // a split of several files is their list
  c["dataset_path"] = t.dataset_files.size() > 1 ? ojson(t.dataset_files)
                      : t.dataset_path.empty()   ? ojson(nullptr)
                                                 : ojson(t.dataset_path);
  c["fewshot_split"] = t.fewshot_files.size() > 1 ? ojson(t.fewshot_files)
                       : t.fewshot_split.empty()  ? ojson(nullptr)
                                                  : ojson(t.fewshot_split);
  c["doc_to_text"] = t.doc_to_text;
  c["doc_to_target"] = t.doc_to_target;
  c["doc_to_choice"] = ojson::parse(t.doc_to_choice.dump());
  c["description"] = t.description;
  c["target_delimiter"] = t.target_delimiter;
  c["fewshot_delimiter"] = t.fewshot_delimiter;
  c["num_fewshot"] = t.num_fewshot;
  ojson ml = ojson::array();
  for (const auto& m : t.metric_list)
    ml.push_back({{"metric", m},
                  {"aggregation", m == "perplexity" ? "perplexity"
                                  : (m.find("perplexity") != std::string::npos ? "weighted_perplexity"
                                                                               : (m == "bits_per_byte" ? "bits_per_byte" : "mean"))},
                  {"higher_is_better", higher_is_better(m)}});
  c["metric_list"] = ml;
  c["output_type"] = to_string(t.output_type);
  if (t.rolling_method == RollingMethod::LlamaCpp) {  // kveval's extension: llama-perplexity's chunking
    c["rolling_method"] = "llama.cpp";
    c["context_length"] = t.context_length;
  }
  if (t.output_type == OutputType::GenerateUntil) c["generation_kwargs"] = generation_kwargs_json(t.generation_kwargs);
  if (t.fewshot_sampler != "default") c["fewshot_config"]["sampler"] = t.fewshot_sampler;
  if (t.fewshot_target_delimiter) c["fewshot_config"]["target_delimiter"] = *t.fewshot_target_delimiter;
  if (t.fewshot_fewshot_delimiter) c["fewshot_config"]["fewshot_delimiter"] = *t.fewshot_fewshot_delimiter;
  if (!t.filter_list.empty()) {
    ojson fl = ojson::array();
    for (const auto& p : t.filter_list) {
      ojson steps = ojson::array();
      for (const auto& st : p.steps) {
        ojson sj = {{"function", st.function}};
        if (st.hook) sj.update(ojson::parse(st.kwargs.dump()));  // a custom filter's keyword arguments
        if (st.function == "take_first_k") sj["k"] = st.k;
        if (st.function == "regex")
          sj.update({{"regex_pattern", st.regex_pattern}, {"group_select", st.group_select}, {"fallback", st.fallback}});
        steps.push_back(sj);
      }
      fl.push_back({{"name", p.name}, {"filter", steps}});
    }
    c["filter_list"] = fl;
  }
  c["repeats"] = t.repeats;
  c["should_decontaminate"] = false;
  c["metadata"] = {{"version", t.version ? ojson(*t.version) : ojson(nullptr)}};
  if (!t.source.empty()) c["lm_eval_yaml"] = t.source;
  return c;
}

/// The per-task tables of lm-eval's results file (each keyed by task name),
/// with kveval's per-task metric notes and request-error counts.
struct TaskTables {
  ojson results = ojson::object(), groups = ojson::object(), group_subtasks = ojson::object(), configs = ojson::object(),
        versions = ojson::object(), n_shot = ojson::object(), hib = ojson::object(), n_samples = ojson::object(),
        notes = ojson::object(), errors = ojson::object();
  std::map<std::string, json> versions_by_name;  ///< sorted by name, as lm-eval writes "versions"
  bool show_groups = false;  ///< a group aggregates some metric: lm-eval writes "groups"
};

/// A results entry of `ms` (lm-eval's "metric,filter" and "metric_stderr,filter" keys),
/// with each metric's note in `notes` and its higher_is_better in `hib`.
void add_metric_entries(const std::vector<MetricValue>& ms, ojson& r, ojson& notes, ojson& hib) {
  for (const auto& m : ms) {
    r[results_key(m.name, m.filter)] = finite_or(m.value, nullptr);
    r[results_key(m.name + "_stderr", m.filter)] = finite_or(m.stderr_, "N/A");
    if (!m.note.empty()) notes[results_key(m.name, m.filter)] = m.note;
    hib[m.name] = m.higher_is_better;
  }
}

/// lm-eval's group_subtasks (evaluator_utils.get_subtask_list, written reversed):
/// a top-level task lists nothing, a group its direct members.
ojson group_subtasks(const EvalSpec& spec, const std::vector<ReportRow>& rows) {
  std::vector<std::pair<std::string, std::vector<std::string>>> order;
  std::function<void(size_t)> add_group = [&](size_t g) {
    std::vector<std::string> members;
    for (const auto& m : spec.groups[g].members)
      if (std::find(members.begin(), members.end(), m) == members.end()) members.push_back(m);
    order.emplace_back(spec.groups[g].name, members);
    for (const auto& m : members)
      for (size_t k = 0; k < spec.groups.size(); ++k)
        if (spec.groups[k].name == m) add_group(k);
  };
  for (auto it = rows.rbegin(); it != rows.rend(); ++it) {  // lm-eval's task_dict holds the top level reversed
    if (it->depth != 0) continue;
    if (it->is_group) add_group(it->index);
    else order.emplace_back(spec.tasks[it->index].name, std::vector<std::string>{});
  }
  ojson out = ojson::object();
  for (auto it = order.rbegin(); it != order.rend(); ++it)
    if (!out.contains(it->first)) out[it->first] = it->second;
  return out;
}

/// lm-eval's higher_is_better of a group: one dict shared by every group with
/// members (evaluator.py), each metric's value from the first member task that
/// reports it, null where two member tasks disagree.
ojson groups_higher_is_better(const EvalSpec& spec, const ojson& task_hib) {
  ojson shared = ojson::object();
  for (const GroupSpec& g : spec.groups)
    for (const auto& m : g.members) {
      if (!task_hib.contains(m)) continue;
      for (auto it = task_hib[m].begin(); it != task_hib[m].end(); ++it) {
        if (!shared.contains(it.key())) shared[it.key()] = it.value();
        else if (!shared[it.key()].is_null() && shared[it.key()] != it.value()) shared[it.key()] = nullptr;
      }
    }
  return shared;
}

/// Adds the group rows to `tt`: results (metrics then alias; " ": " " for a group
/// without aggregate_metric_list, as lm-eval), "groups" (aggregating groups),
/// versions (metadata.version of an aggregating group with metadata),
/// higher_is_better and notes.
void add_group_tables(const EvalSpec& spec, const RunResult& res, const ReportRow& row, TaskTables& tt) {
  const GroupSpec& g = spec.groups[row.index];
  ojson r = ojson::object(), notes = ojson::object(), hib = ojson::object();
  if (!g.aggregate_metric_list) {
    r[" "] = " ";
  } else if (row.index < res.group_metrics.size()) {
    add_metric_entries(res.group_metrics[row.index], r, notes, hib);
  }
  r["alias"] = row.alias;
  tt.results[g.name] = r;
  if (g.aggregate_metric_list) {
    tt.groups[g.name] = r;
    if (!g.aggregate_metric_list->empty()) tt.show_groups = true;
    if (g.has_metadata && row.index < res.group_metrics.size() && !res.group_metrics[row.index].empty())
      tt.versions_by_name[g.name] = g.version;
  }
  if (!notes.empty()) tt.notes[g.name] = notes;
}

/// The per-task and per-group tables of the run `res` of `spec`.
TaskTables task_tables(const EvalSpec& spec, const RunResult& res) {
  TaskTables tt;
  const std::vector<ReportRow> rows = report_rows(spec);
  std::map<std::string, ojson> configs, hibs, nshots;  // lm-eval writes these sorted by name
  for (const ReportRow& row : rows) {
    if (row.is_group) {
      add_group_tables(spec, res, row, tt);
      continue;
    }
    const size_t t = row.index;
    const TaskSpec& task = spec.tasks[t];
    ojson r;
    r["alias"] = row.alias;  // lm-eval: task_alias, else the name; indented under a group
    ojson tn = ojson::object(), th = ojson::object();
    if (t < res.metrics.size()) add_metric_entries(res.metrics[t], r, tn, th);
    tt.results[task.name] = r;
    configs[task.name] = task_config(task);
    // lm-eval's ConfigurableTask.VERSION: "Yaml" for a YAML task without metadata.version
    tt.versions_by_name[task.name] = task.version ? json(*task.version) : !task.source.empty() ? json("Yaml") : json(nullptr);
    nshots[task.name] = task.num_fewshot;
    hibs[task.name] = th;
    tt.n_samples[task.name] = {{"original", task.n_docs_total}, {"effective", static_cast<int>(task.docs.size())}};
    if (!tn.empty()) tt.notes[task.name] = tn;
    tt.errors[task.name] = t < res.task_errors.size() ? res.task_errors[t] : 0;
  }
  tt.group_subtasks = group_subtasks(spec, rows);
  ojson task_hib = ojson::object();
  for (auto& [name, h] : hibs) task_hib[name] = h;
  const ojson shared = groups_higher_is_better(spec, task_hib);
  for (const GroupSpec& g : spec.groups)
    if (!g.members.empty()) hibs[g.name] = shared;
  for (auto& [name, c] : configs) tt.configs[name] = std::move(c);
  for (auto& [name, v] : tt.versions_by_name) tt.versions[name] = ojson::parse(v.dump());
  for (auto& [name, n] : nshots) tt.n_shot[name] = std::move(n);
  for (auto& [name, h] : hibs) tt.hib[name] = std::move(h);
  return tt;
}

/// lm-eval's "config": the model arguments and the run's settings.
ojson run_config(const EvalSpec& spec, const RunResult& res) {
  return {{"model", "kveval"},
          {"model_args", fmt::format("pretrained={},dtype={},kv_cache_dtype={},threads={}", res.model_path,
                                     res.dtype == "bf16" ? "bfloat16" : "float32",
                                     torch_dtype_name(res.kv_cache_dtype), res.threads)},
          {"model_dtype", res.dtype == "bf16" ? "bfloat16" : "float32"},
          {"batch_size", spec.batch_size_auto ? ojson("auto") : ojson(spec.batch_size)},
          {"batch_sizes", spec.batch_size_auto ? ojson::array({res.batch_size}) : ojson::array()},
          {"device", "cpu"},
          {"use_cache", nullptr},
          {"limit", spec.limit            ? ojson(*spec.limit)
                    : spec.limit_fraction ? ojson(*spec.limit_fraction)
                                          : ojson(nullptr)},
          {"bootstrap_iters", spec.bootstrap_iters},
          {"gen_kwargs", spec.gen_kwargs.is_null() ? ojson(nullptr) : ojson::parse(spec.gen_kwargs.dump())},
          {"random_seed", spec.random_seed ? ojson(*spec.random_seed) : ojson(nullptr)},
          {"numpy_seed", spec.numpy_seed ? ojson(*spec.numpy_seed) : ojson(nullptr)},
          {"torch_seed", spec.torch_seed ? ojson(*spec.torch_seed) : ojson(nullptr)},
          {"fewshot_seed", spec.seed}};
}

/// kveval's "model": file, sha256 and the load summary.
ojson model_json(const RunResult& res, const std::string& model_sha256) {
  ojson m = {{"path", res.model_path}, {"sha256", model_sha256}};
  ojson types = ojson::object();
  for (const auto& [name, n] : res.load.tensor_types) types[name] = n;
  m["architecture"] = res.load.architecture;
  m["parameters"] = res.load.parameters;
  m["tensor_types"] = types;
  m["compute_dtype"] = res.dtype;  // the resolved --dtype row ("blocks-bf16", ...): model_dtype alone cannot tell
  m["weight_dtype"] = res.load.weight_dtype;
  m["matmul"] = res.load.matmul;
  m["resident_weight_bytes"] = res.load.resident_bytes;
  m["mapped_weight_bytes"] = res.load.mapped_bytes;  // of them, read in place from the file (--mmap); 0: all copied
  m["context_length"] = res.load.context_length;
  m["tokenizer"] = {{"model", res.load.tokenizer_model}, {"pre", res.load.tokenizer_pre}};
  return m;
}

/// kveval's "phases": seconds, tokens and tokens per second of each phase.
ojson phases_json(const RunResult& res) {
  ojson phases = ojson::array();
  for (const auto& p : res.phases)
    phases.push_back({{"name", p.name},
                      {"seconds", p.seconds},
                      {"tokens", p.tokens},
                      {"tokens_per_second", p.tokens > 0 && p.seconds > 0 ? ojson(static_cast<double>(p.tokens) / p.seconds)
                                                                         : ojson(nullptr)}});
  return phases;
}

/// kveval's "distributed" (runs over several ranks): ranks, hosts, each
/// phase's wall and CPU seconds over the ranks, and the inputs every rank read.
ojson distributed_json(const RunResult& res) {
  ojson dp = ojson::array();
  for (const auto& d : distributed_phases(res))
    dp.push_back({{"name", d.name},
                  {"wall_seconds", d.wall_seconds},
                  {"cpu_seconds", d.cpu_seconds},
                  {"tokens", d.tokens},
                  {"tokens_per_second", d.tokens > 0 && d.wall_seconds > 0
                                            ? ojson(static_cast<double>(d.tokens) / d.wall_seconds)
                                            : ojson(nullptr)},
                  {"imbalance", d.imbalance ? ojson(*d.imbalance) : ojson(nullptr)},
                  {"rank_seconds", d.rank_seconds}});
  ojson inputs = ojson::array();  // what every rank read, byte for byte (Shard::same_inputs)
  for (const auto& f : res.agreed_inputs)
    inputs.push_back({{"file", f.what}, {"path", f.path}, {"bytes", f.size}, {"sha256", f.sha256}});
  return {{"ranks", res.n_ranks}, {"hosts", res.hosts}, {"phases", dp}, {"inputs", inputs}};
}

/// Everything kveval-specific in the results file ("kveval").
ojson kveval_json(const EvalSpec& spec, const RunResult& res, const std::string& model_sha256, const TaskTables& tt) {
  ojson k;
  k["version"] = version();
  k["git_hash"] = git_hash();
  k["model"] = model_json(res, model_sha256);
  k["spec"] = spec.path;
  k["threads"] = res.threads;
  k["max_length"] = res.max_length;
  k["request_errors"] = {{"total", res.n_request_errors}, {"per_task", tt.errors}};
  k["notes"] = tt.notes;
  k["phases"] = phases_json(res);
  k["cache"] = {{"bytes_before_generation", res.cache_bytes_before},
                {"bytes_at_setup", res.cache_bytes_setup},
                {"bytes_after_teardown", res.cache_bytes_after},
                {"rows", res.cache_rows},
                {"positions", res.cache_positions},
                {"dtype", res.kv_cache_dtype}};
  k["memory"] = {{"resident_weight_bytes", res.load.resident_bytes},
                 {"planned_kv_cache_bytes", res.planned_kv_cache},
                 {"planned_activation_bytes", res.planned_activations},
                 {"peak_rss_bytes", res.peak_rss}};
  k["instrumentation"] = {{"loglikelihood_forward_calls", res.ll_forward_calls},
                          {"loglikelihood_forward_with_cache_setup", res.ll_forward_with_cache_setup},
                          {"loglikelihood_forward_cached", res.ll_forward_cached},
                          {"loglikelihood_tokens_requested", res.ll_tokens_requested},
                          {"loglikelihood_tokens_computed", res.ll_tokens_computed},
                          {"loglikelihood_logit_rows", res.ll_logit_rows}};
  k["warnings"] = res.warnings;
  if (res.n_ranks > 1) k["distributed"] = distributed_json(res);
  return k;
}

}  // namespace

ojson results_json(const EvalSpec& spec, const RunResult& res, const std::string& model_sha256) {
  ojson j;
  const TaskTables tt = task_tables(spec, res);
  j["results"] = tt.results;
  if (tt.show_groups && !tt.groups.empty()) j["groups"] = tt.groups;
  j["group_subtasks"] = tt.group_subtasks;
  j["configs"] = tt.configs;
  j["versions"] = tt.versions;
  j["n-shot"] = tt.n_shot;
  j["higher_is_better"] = tt.hib;
  j["n-samples"] = tt.n_samples;
  j["config"] = run_config(spec, res);
  j["git_hash"] = git_hash();
  double total = 0;
  for (const auto& p : res.phases) total += p.seconds;
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  j["date"] = now - total;
  add_chat_results_keys(spec.chat, j);  // lm-eval's EvaluationTracker keys, in its order
  j["total_evaluation_time_seconds"] = fmt::format("{}", total);
  j["kveval"] = kveval_json(spec, res, model_sha256, tt);
  return j;
}

json baseline_metrics(const json& doc) {
  if (!doc.is_object() || !doc.contains("results") || !doc["results"].is_object())
    throw SpecError("baseline: not a kveval results file (no \"results\" object)");
  auto ends = [](const std::string& s, std::string_view suf) {
    return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
  };
  json out = json::object();
  for (auto t = doc["results"].begin(); t != doc["results"].end(); ++t) {
    if (!t.value().is_object()) {
      out[t.key()] = t.value();  // compare_baseline reports it
      continue;
    }
    json m = json::object();
    for (auto k = t.value().begin(); k != t.value().end(); ++k) {
      std::string name = k.key(), filter;
      if (size_t comma = name.find(','); comma != std::string::npos) {
        filter = name.substr(comma + 1);
        name.resize(comma);
      }
      if (name == "alias" || name == " " || name == "name" || name == "sample_len" || name == "sample_count" || ends(name, "_stderr") ||
          ends(name, "_note"))
        continue;
      m[filter.empty() || filter == detail::kNoFilter ? name : name + "," + filter] = k.value();
    }
    out[t.key()] = m;
  }
  return out;
}

}  // namespace kveval::eval
