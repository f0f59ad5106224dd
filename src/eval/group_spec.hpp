#pragma once
// lm-evaluation-harness task groups (lm_eval/api/group.py GroupConfig and
// AggMetricConfig): a group YAML names its members under `task:` (task names,
// tags, nested groups, inline task or group dicts) and, optionally, how its
// row aggregates them (`aggregate_metric_list`).
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kveval::eval {

/// One entry of a group's aggregate_metric_list (lm-eval AggMetricConfig).
struct AggregateMetric {
  std::string metric;                            ///< e.g. "acc"
  bool weight_by_size = false;                   ///< mean weighted by each subtask's documents (else unweighted)
  std::vector<std::string> filter_list{"none"};  ///< filters aggregated ("metric,filter" keys); a string is a list of one
};

/// A group of the run.
struct GroupSpec {
  std::string name;         ///< `group`
  std::string group_alias;  ///< `group_alias` ("" = the name)
  /// `aggregate_metric_list`; nullopt when absent (lm-eval: no aggregated row, the group prints without numbers).
  std::optional<std::vector<AggregateMetric>> aggregate_metric_list;
  nlohmann::json version;   ///< metadata.version (null when the group has no metadata.version)
  bool has_metadata = false;  ///< `metadata` was given (lm-eval writes versions[group] only then)
  std::string source;       ///< the YAML file that defines it
  /// Direct members, task and group names in lm-eval's order (tags replaced by their tasks).
  std::vector<std::string> members;
};

/// The group keys of `config` (a group YAML's top-level keys or an inline group
/// dict, written in `file`): group, group_alias, metadata, aggregate_metric_list
/// (a dict or a list of dicts with metric, aggregation "mean", weight_by_size,
/// filter_list). `members` is left empty. Throws SpecError "file: key: message"
/// for a missing name, an aggregation other than "mean", or any other key.
GroupSpec parse_group_config(const nlohmann::json& config, const std::string& file);

}  // namespace kveval::eval
