#pragma once
// The results file (`--output`) and the samples file (`--log-samples`) in the
// shapes lm-evaluation-harness writes, so that tools built around lm-eval read
// kveval's files: lm_eval/result_schema.py (EvalResults), lm_eval/evaluator.py
// (the per-document sample), lm_eval/loggers/evaluation_tracker.py
// (save_results_samples: arguments as gen_args_i/arg_j, target as a string).
// Everything kveval-specific (phases, cache, instrumentation, notes, warnings,
// request errors, ranks) sits under one "kveval" key. Keys are in a stable,
// readable order (nlohmann::ordered_json). The JSON Schema of the results file
// is tests/data/results.schema.json. The results file is written by
// lm_eval_format.cpp, the samples by lm_eval_samples.cpp.
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/runner.hpp"
#include "eval/spec.hpp"

namespace kveval::eval {

/// "metric,filter", lm-eval's key of a metric in "results" ("acc,none").
std::string results_key(std::string_view metric, std::string_view filter);

/// Hex SHA-256 of a UTF-8 string: lm-eval's hash_string (lm_eval/utils.py).
std::string hash_string(std::string_view s);

/// The results document:
/// {"results": {task: {"alias", "<metric>,<filter>": value|null,
///   "<metric>_stderr,<filter>": value|"N/A", ...}}, "group_subtasks", "configs",
///   "versions", "n-shot", "higher_is_better", "n-samples", "config" (model,
///   model_args, batch_size, limit, bootstrap_iters, gen_kwargs, seeds),
///   "git_hash", "date" (UNIX seconds), "total_evaluation_time_seconds" (a
///   string, as lm-eval), "kveval" {...}}.
/// `model_sha256` is the loaded model's hash (the caller's choice).
nlohmann::ordered_json results_json(const EvalSpec& spec, const RunResult& res, const std::string& model_sha256);

/// One lm-eval sample per (task, document), tasks in spec order, documents in
/// order: doc_id, doc, target (a string), arguments ({"gen_args_i": {"arg_j"}}),
/// resps, filtered_resps, filter, metrics (names), doc_hash, prompt_hash,
/// target_hash, each metric's per-document value, then "task" and "kveval"
/// (per-request token counts, stop reasons, truncation and errors).
/// A document whose requests failed has "error" and no metric values.
std::vector<nlohmann::ordered_json> sample_records(const EvalSpec& spec, const RunResult& res);

/// The metrics of a results document, for --baseline: task -> metric -> value,
/// from this shape ("acc,none") or kveval 0.1's ("acc"); stderr, alias, name,
/// sample_len and note keys are left out. The filter part is kept when it is
/// not "none" ("exact_match,strict-match"). Throws SpecError when `doc` has no
/// "results" object.
nlohmann::json baseline_metrics(const nlohmann::json& doc);

}  // namespace kveval::eval
