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
//   (stderr: lm-eval's mean_stderr for mean, none for a custom aggregation);
// - fewshot_config's doc_to_text / doc_to_target / doc_to_choice(doc) as the
//   few-shot examples' mappings, and `samples: !function f` called as f() once at
//   load (lm-eval's FewshotConfig: a callable returning the list of examples);
// - a filter_list step `function: !function m.Class` (m.Class(**the step's other
//   keys).apply(resps, docs), lm-eval's get_filter of a callable) or lm-eval's
//   `function: custom` with `filter_fn: !function m.f` (f(resps, docs)) at scoring.
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
struct Where;
struct FilterStep;
struct DocOutcome;
struct MetricValue;

/// The hooks of one task.
struct TaskHooks {
  std::optional<PythonHook> process_docs, doc_to_text, doc_to_target, doc_to_choice, process_results;
  std::vector<std::pair<std::string, PythonHook>> metrics;  ///< metric_list `metric: !function`: name -> function
  std::map<std::string, PythonHook> aggregations;           ///< metric name -> `aggregation: !function`
  std::map<std::string, bool> higher_is_better;             ///< metric_list's higher_is_better of hook metrics
  /// fewshot_config's doc_to_text / doc_to_target / doc_to_choice hooks (the few-shot examples' mappings).
  std::optional<PythonHook> fewshot_doc_to_text, fewshot_doc_to_target, fewshot_doc_to_choice;
  /// filter_list hooks by their placeholder text "!function m.name": a filter class (PythonHook::key
  /// "filter") or a `custom` step's filter_fn (key "filter_fn").
  std::map<std::string, PythonHook> filters;
  /// Metrics come from Python (process_results or metric functions).
  bool scores() const { return process_results.has_value() || !metrics.empty(); }
  /// Any hook at all.
  bool any() const {
    return process_docs || doc_to_text || doc_to_target || doc_to_choice || scores() || fewshot_doc_to_text ||
           fewshot_doc_to_target || fewshot_doc_to_choice || !filters.empty();
  }
  /// The hooks with fewshot_config's doc_to_* hooks in place of the task's (what the few-shot
  /// examples' mappings call).
  TaskHooks for_fewshot() const;
};

/// The JSON value the YAML loader gives a `!function NAME` tag written in
/// `yaml` at `where` ("task.yaml:10: process_docs").
nlohmann::json function_marker(const std::string& name, const std::string& yaml, const std::string& where);
/// True for a value made by function_marker.
bool is_function_marker(const nlohmann::json& v);

/// Takes the hooks out of a task YAML's top-level keys (includes merged):
/// process_docs and process_results are removed, a doc_to_* hook leaves the
/// placeholder text "!function module.name", metric_list entries get the
/// function's name and lose their hook keys; fewshot_config's doc_to_* hooks leave
/// their placeholder text and `samples: !function f` is replaced by f()'s list;
/// filter_list hooks leave their placeholder text. Imports every hook (check_python_hook).
/// `where(key)` gives "file:line" of a key. A `!function` anywhere else is refused.
/// Throws SpecError naming file:line and key.
TaskHooks take_task_hooks(std::map<std::string, nlohmann::json>& values,
                          const std::map<std::string, std::string>& where, const std::string& yaml);

/// The documents after process_docs (`docs` are objects in their key order);
/// errors name `origin` (the data file) and the hook.
std::vector<nlohmann::ordered_json> run_process_docs(const PythonHook& hook, std::vector<nlohmann::ordered_json> docs,
                                                     const std::string& origin);

/// A custom filter step (FilterStep::hook) on a task's documents, called once as lm-eval's
/// apply_filters calls it on a task's instances: Filter.apply(resps, docs) with resps[i] the
/// responses of docs[i] (the same length). Returns one result per document, each a string or a
/// list of strings. Throws SpecError naming the hook (it raised, or gave a result of another
/// length or type).
nlohmann::json run_filter_hook(const PythonHook& hook, const nlohmann::json& kwargs,
                               const std::vector<std::vector<std::string>>& responses, const std::vector<const Doc*>& docs);

/// A filter_list step whose function is Python: `function: "!function m.Class"` (the
/// placeholder take_task_hooks left; the step's other keys become FilterStep::kwargs) or
/// `function: custom` with `filter_fn: "!function m.f"` (no other key). False for any
/// other function. Throws SpecError naming `sw` when the hook is not the task's
/// (a JSON spec has none) or `custom` lacks filter_fn.
bool parse_hook_filter_step(const nlohmann::json& st, const Where& sw, const TaskHooks* hooks, FilterStep& fs);

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
