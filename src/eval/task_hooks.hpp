#pragma once
// Internal to src/eval: the `!function` hooks of one lm-eval task YAML and
// where kveval calls them (lm_eval/api/task.py ConfigurableTask):
// - process_docs(dataset) on the evaluated documents and on the few-shot file's,
//   before any mapping (load time);
// - doc_to_text / doc_to_target / doc_to_choice(doc) as mappings (load time);
// - process_results(doc, results) -> {metric: value} per document, or a
//   generate_until `metric: !function` called as f(references=[gold],
//   predictions=[output]) (scoring time, per filter pipeline);
// - `aggregation: !function` over the metric's per-document values, else mean
//   (stderr: lm-eval's mean_stderr for mean, none for a custom aggregation).
// The Python side is python_hooks.hpp.
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/python_hooks.hpp"

namespace kveval::eval {

struct TaskSpec;
struct Doc;
struct DocOutcome;
struct MetricValue;

/// The hooks of one task.
struct TaskHooks {
  std::optional<PythonHook> process_docs, doc_to_text, doc_to_target, doc_to_choice, process_results;
  std::vector<std::pair<std::string, PythonHook>> metrics;  ///< metric_list `metric: !function`: name -> function
  std::map<std::string, PythonHook> aggregations;           ///< metric name -> `aggregation: !function`
  std::map<std::string, bool> higher_is_better;             ///< metric_list's higher_is_better of hook metrics
  /// Metrics come from Python (process_results or metric functions).
  bool scores() const { return process_results.has_value() || !metrics.empty(); }
};

/// The JSON value the YAML loader gives a `!function NAME` tag written in
/// `yaml` at `where` ("task.yaml:10: process_docs").
nlohmann::json function_marker(const std::string& name, const std::string& yaml, const std::string& where);
/// True for a value made by function_marker.
bool is_function_marker(const nlohmann::json& v);

/// Takes the hooks out of a task YAML's top-level keys (includes merged):
/// process_docs and process_results are removed, a doc_to_* hook leaves the
/// placeholder text "!function module.name", metric_list entries get the
/// function's name and lose their hook keys. Imports every hook (check_python_hook).
/// `where(key)` gives "file:line" of a key. A `!function` anywhere else is refused.
/// Throws SpecError naming file:line and key.
TaskHooks take_task_hooks(std::map<std::string, nlohmann::json>& values,
                          const std::map<std::string, std::string>& where, const std::string& yaml);

/// The documents after process_docs (`docs` are objects in their key order);
/// errors name `origin` (the data file) and the hook.
std::vector<nlohmann::ordered_json> run_process_docs(const PythonHook& hook, std::vector<nlohmann::ordered_json> docs,
                                                     const std::string& origin);

/// A document in its key order: `raw_text` (its JSONL line) when it holds `doc`, else `doc`.
nlohmann::ordered_json ordered_doc(const nlohmann::json& doc, const std::string& raw_text);

/// Per-document metric values of a task whose metrics come from Python, in
/// metric_list order; `filtered` is the generate_until output after one filter
/// pipeline (null: the raw output). Throws Error naming the document and hook.
std::vector<std::pair<std::string, nlohmann::json>> hook_doc_values(const TaskSpec& task, const Doc& doc,
                                                                    const DocOutcome& o, const std::string* filtered);

/// Metrics of a task whose metrics come from Python: each metric_list name per
/// filter pipeline, aggregated by its `aggregation: !function` or the mean. A
/// document whose hook fails is left out and counted in the note ("N document(s)
/// left out: <first error>"). bootstrap_iters 0: no stderr (as compute_metrics).
std::vector<MetricValue> hook_metrics(const TaskSpec& task, std::span<const DocOutcome> outcomes, int bootstrap_iters);

}  // namespace kveval::eval
