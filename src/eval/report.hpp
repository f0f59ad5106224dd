#pragma once
// Reports of a run: the metrics and phase tables (stdout), the results file
// (`--output`), the per-request samples file (`--log-samples`) and the
// comparison with a baseline results file (`--baseline`, `--tolerance`).
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/lm_eval_format.hpp"
#include "eval/runner.hpp"
#include "eval/spec.hpp"

namespace kveval::eval {

/// Metrics table: one row per (task, metric): task, metric, value, "± stderr", n;
/// missing values print "n/a" followed by the reason. Groups as lm-eval's
/// make_table shows them (report_rows): the group's row (its aggregated metrics,
/// or the name alone when it has no aggregate_metric_list), then its members
/// sorted by name, their names indented " - ". Ends with a line counting
/// per-request errors when there are any.
std::string format_metrics_table(const EvalSpec& spec, const RunResult& res);

/// lm-eval's second table (make_table(results, "groups"), printed after the tasks
/// table when some group aggregates a metric): the rows of the groups that have an
/// aggregate_metric_list, in report order and indentation, with the metrics
/// table's columns (the first named "group"); a group whose list is empty shows
/// its name alone. "" when no group aggregates a metric.
std::string format_groups_table(const EvalSpec& spec, const RunResult& res);

/// One phase of a distributed run (RunResult::n_ranks > 1) across its ranks.
struct DistributedPhase {
  std::string name;
  double wall_seconds = 0;            ///< the slowest rank's seconds
  double cpu_seconds = 0;             ///< sum over ranks (seconds)
  int64_t tokens = 0;                 ///< all ranks' tokens
  std::optional<double> imbalance;    ///< max / mean of the ranks' seconds (1 = balanced); none when all are 0
  std::vector<double> rank_seconds;   ///< per rank, rank order
};
/// Per-phase figures of a distributed run from RunResult::rank_phases (empty list on other ranks).
std::vector<DistributedPhase> distributed_phases(const RunResult& res);

/// True when the run has a generate_until request (its spec a generation task).
bool has_generation(const RunResult& res);
/// True when the run has a scoring request (loglikelihood, multiple_choice or loglikelihood_rolling).
bool has_scoring(const RunResult& res);

/// Phase table: phase, wall seconds, tokens, tokens/s (tokens / seconds; "-"
/// where tokens do not apply), in execution order, then the cache bytes at
/// set-up and after teardown and the log-likelihood instrumentation counters.
/// A run without a generate_until request (has_generation) has no cache
/// phases in the table and says so in the cache line; one without a scoring
/// request (has_scoring) has no loglikelihood row and says so in the
/// loglikelihood line. RunResult::phases (and the results file) keeps every
/// phase, at 0 when it did not run.
std::string format_phase_table(const RunResult& res);

/// Writes `lines` as JSONL to `path`, all or nothing (util::AtomicFile).
/// Throws IoError naming the path and the reason when it cannot be written.
void write_jsonl(const std::string& path, const std::vector<nlohmann::ordered_json>& lines);
/// Writes `j` (indented) to `path`, all or nothing (util::AtomicFile).
/// Throws IoError naming the path and the reason when it cannot be written.
void write_json(const std::string& path, const nlohmann::ordered_json& j);

/// A metric that got worse than its baseline by more than the tolerance.
struct Regression {
  std::string task, metric;
  double baseline = 0, current = 0;
};
/// Outcome of a baseline comparison.
struct BaselineCheck {
  std::vector<Regression> regressions;  ///< metrics worse than the baseline by more than the tolerance
  std::vector<std::string> failures;    ///< one line per value that could not be compared (a failure too)
  std::vector<std::string> warnings;    ///< one line per n-samples mismatch (not a failure)
  /// True when every metric was compared and none regressed.
  bool ok() const { return regressions.empty() && failures.empty(); }
};
/// Compares `current` with `baseline` (results documents of this version or of
/// kveval 0.1, read through baseline_metrics), strictly:
/// - the task sets must match: a baseline task missing from the run, or a run
///   task missing from the baseline, is a failure;
/// - for a task in both, every metric (keys other than alias, *_stderr, *_note)
///   must be present with a numeric value on both sides; missing, n/a (null)
///   or non-numeric on either side is a failure;
/// - a compared metric regresses when it moved in its bad direction (lower
///   for acc/acc_norm/exact_match, higher for perplexities and bits_per_byte)
///   by more than `tolerance` (absolute);
/// - differing "n-samples" (original/effective) is a warning.
/// Throws SpecError for a baseline without a "results" object.
BaselineCheck compare_baseline(const nlohmann::json& baseline, const nlohmann::json& current, double tolerance);

}  // namespace kveval::eval
