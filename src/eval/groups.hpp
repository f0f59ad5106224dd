#pragma once
// Group rows as lm-evaluation-harness computes and prints them:
// lm_eval/evaluator_utils.py consolidate_group_results (a group aggregates all
// its leaf tasks, nested groups' included), lm_eval/api/metrics.py
// aggregate_subtask_metrics and pooled_sample_stderr, and prepare_print_tasks
// (members sorted by name under their group, aliases indented " - ").
#include <span>
#include <string>
#include <vector>

#include "eval/metrics.hpp"
#include "eval/runner.hpp"
#include "eval/spec.hpp"

namespace kveval::eval {

/// lm-eval's aggregate_subtask_metrics: sum(m_i * w_i) / sum(w_i) with w_i =
/// sizes[i] when weight_by_size, else 1. `metrics` and `sizes` have the same
/// length (at least one).
double aggregate_subtask_metrics(std::span<const double> metrics, std::span<const int> sizes, bool weight_by_size);

/// lm-eval's pooled_sample_stderr: sqrt(sum((n_i - 1) * se_i^2 * n_i) /
/// (sum(n_i) - k) / sum(n_i)) over k subtasks (pooled variance). nullopt when
/// sum(n_i) <= k (no degrees of freedom).
std::optional<double> pooled_sample_stderr(std::span<const double> stderrs, std::span<const int> sizes);

/// The leaf tasks of group `g` (indices into spec.tasks), nested groups'
/// included, in member order (a task reached twice counts twice, as lm-eval).
std::vector<size_t> group_leaf_tasks(const EvalSpec& spec, size_t g);

/// Each group's metrics (spec.groups order) from the tasks' res.metrics: for
/// every aggregate_metric_list entry and filter, over the leaf tasks that report
/// "metric,filter": value = aggregate_subtask_metrics(values, n, weight_by_size),
/// stderr = pooled_sample_stderr (none when a leaf has none), n = sum of n. A
/// leaf without a value makes the group's value n/a with a note naming it. A
/// group without aggregate_metric_list gets no metrics.
std::vector<std::vector<MetricValue>> compute_group_metrics(const EvalSpec& spec, const RunResult& res);

/// One row of the report: a task or a group, at its depth in the group tree.
struct ReportRow {
  bool is_group = false;
  size_t index = 0;  ///< into spec.tasks or spec.groups
  int depth = 0;     ///< 0 at the top level
  /// The name shown: alias (task_alias / group_alias, else the name), prefixed
  /// with depth spaces and "- " below the top level (lm-eval's prepare_print_tasks).
  std::string alias;
};

/// The rows in lm-eval's order: top-level tasks and groups in spec order (a
/// group where its first task is), each group followed by its members sorted
/// by name, recursively. A task or group already shown is not repeated.
std::vector<ReportRow> report_rows(const EvalSpec& spec);

}  // namespace kveval::eval
