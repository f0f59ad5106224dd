#include "eval/groups.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>

#include "eval/group_spec.hpp"
#include "eval/json_input.hpp"
#include "util/error.hpp"

namespace kveval::eval {

using nlohmann::json;

namespace {

/// One aggregate_metric_list entry of `file` (entry i).
AggregateMetric parse_aggregate_metric(const json& e, const std::string& file, size_t i) {
  const std::string at = fmt::format("{}: aggregate_metric_list[{}]", file, i);
  if (!e.is_object()) throw SpecError(fmt::format("{}: expected a mapping, got {}", at, json_excerpt(e)));
  AggregateMetric m;
  for (auto it = e.begin(); it != e.end(); ++it) {
    const std::string& k = it.key();
    const json& v = it.value();
    if (k == "metric") {
      if (!v.is_string()) throw SpecError(fmt::format("{}.metric: expected a metric name, got {}", at, json_excerpt(v)));
      m.metric = v.get<std::string>();
    } else if (k == "aggregation") {
      // lm-eval AggMetricConfig: 'mean' is the only pre-defined aggregation across a group's subtasks
      if (v != json("mean"))
        throw SpecError(fmt::format("{}.aggregation: {}: only 'mean' aggregates a group's subtasks", at, json_excerpt(v)));
    } else if (k == "weight_by_size") {
      if (!v.is_boolean() && !v.is_null()) throw SpecError(fmt::format("{}.weight_by_size: expected true or false, got {}", at, json_excerpt(v)));
      m.weight_by_size = v.is_boolean() && v.get<bool>();
    } else if (k == "filter_list") {
      m.filter_list.clear();
      const std::vector<json> items = v.is_array() ? std::vector<json>(v.begin(), v.end()) : std::vector<json>{v};
      for (const json& f : items) {
        if (!f.is_string()) throw SpecError(fmt::format("{}.filter_list: expected filter names, got {}", at, json_excerpt(f)));
        m.filter_list.push_back(f.get<std::string>());
      }
    } else {
      throw SpecError(fmt::format("{}.{}: unknown key (metric, aggregation, weight_by_size, filter_list)", at, k));
    }
  }
  if (m.metric.empty()) throw SpecError(fmt::format("{}: missing required key 'metric'", at));
  return m;
}

}  // namespace

GroupSpec parse_group_config(const json& c, const std::string& file) {
  GroupSpec g;
  g.source = file;
  if (!c.contains("group") || !c["group"].is_string())
    throw SpecError(fmt::format("{}: group: a group needs a name (a string), got {}", file,
                                c.contains("group") ? json_excerpt(c["group"]) : std::string("none")));
  g.name = c["group"].get<std::string>();
  for (auto it = c.begin(); it != c.end(); ++it) {
    const std::string& k = it.key();
    const json& v = it.value();
    if (k == "group" || k == "task") continue;
    if (k == "group_alias") {
      if (!v.is_string() && !v.is_null()) throw SpecError(fmt::format("{}: group_alias: expected a string, got {}", file, json_excerpt(v)));
      if (v.is_string()) g.group_alias = v.get<std::string>();
    } else if (k == "metadata") {
      if (v.is_null()) continue;
      if (!v.is_object()) throw SpecError(fmt::format("{}: metadata: expected a mapping, got {}", file, json_excerpt(v)));
      g.has_metadata = true;
      if (v.contains("version")) g.version = v["version"];
    } else if (k == "aggregate_metric_list") {
      if (v.is_null()) continue;
      const std::vector<json> items = v.is_array() ? std::vector<json>(v.begin(), v.end()) : std::vector<json>{v};
      g.aggregate_metric_list.emplace();
      for (size_t i = 0; i < items.size(); ++i) g.aggregate_metric_list->push_back(parse_aggregate_metric(items[i], file, i));
    }
    // any other key is a task key lm-eval sets on the group's members (TaskIndex::expand_group)
  }
  return g;
}

double aggregate_subtask_metrics(std::span<const double> metrics, std::span<const int> sizes, bool weight_by_size) {
  double num = 0, den = 0;
  for (size_t i = 0; i < metrics.size(); ++i) {
    const double w = weight_by_size ? static_cast<double>(sizes[i]) : 1.0;
    num += metrics[i] * w;
    den += w;
  }
  return num / den;
}

std::optional<double> pooled_sample_stderr(std::span<const double> stderrs, std::span<const int> sizes) {
  double var = 0, total = 0;
  for (size_t i = 0; i < stderrs.size(); ++i) {
    const double n = static_cast<double>(sizes[i]);
    var += (n - 1) * stderrs[i] * stderrs[i] * n;
    total += n;
  }
  const double dof = total - static_cast<double>(stderrs.size());
  if (dof <= 0) return std::nullopt;
  return std::sqrt(var / dof / total);
}

namespace {

std::optional<size_t> task_index_of(const EvalSpec& spec, const std::string& name) {
  for (size_t t = 0; t < spec.tasks.size(); ++t)
    if (spec.tasks[t].name == name) return t;
  return std::nullopt;
}

std::optional<size_t> group_index_of(const EvalSpec& spec, const std::string& name) {
  for (size_t g = 0; g < spec.groups.size(); ++g)
    if (spec.groups[g].name == name) return g;
  return std::nullopt;
}

void leaf_tasks(const EvalSpec& spec, size_t g, std::vector<size_t>& stack, std::vector<size_t>& out) {
  if (std::find(stack.begin(), stack.end(), g) != stack.end()) return;  // the index refuses cycles; never loop
  stack.push_back(g);
  for (const std::string& m : spec.groups[g].members) {
    if (auto sub = group_index_of(spec, m)) leaf_tasks(spec, *sub, stack, out);
    else if (auto t = task_index_of(spec, m)) out.push_back(*t);
  }
  stack.pop_back();
}

/// The group metric "metric,filter" over `leaves` (nullopt when no leaf reports it).
std::optional<MetricValue> group_metric(const EvalSpec& spec, const RunResult& res, const std::vector<size_t>& leaves,
                                        const AggregateMetric& a, const std::string& filter) {
  std::vector<double> values, stderrs;
  std::vector<int> sizes;
  std::string missing_value, missing_stderr;
  bool any = false, hib = true;
  for (size_t t : leaves) {
    if (t >= res.metrics.size()) continue;
    for (const MetricValue& m : res.metrics[t]) {
      if (m.name != a.metric || m.filter != filter) continue;
      any = true;
      hib = m.higher_is_better;
      if (!m.value) {
        if (missing_value.empty()) missing_value = spec.tasks[t].name;
        continue;
      }
      values.push_back(*m.value);
      sizes.push_back(m.n);
      if (m.stderr_) stderrs.push_back(*m.stderr_);
      else if (missing_stderr.empty()) missing_stderr = spec.tasks[t].name;
    }
  }
  if (!any) return std::nullopt;
  MetricValue out;
  out.name = a.metric;
  out.filter = filter;
  out.higher_is_better = hib;
  for (int n : sizes) out.n += n;
  if (!missing_value.empty()) {
    out.note = fmt::format("no value for subtask {}", missing_value);
    return out;
  }
  out.value = aggregate_subtask_metrics(values, sizes, a.weight_by_size);
  if (missing_stderr.empty()) out.stderr_ = pooled_sample_stderr(stderrs, sizes);
  if (!out.stderr_) out.note = missing_stderr.empty() ? "no stderr: too few documents" : fmt::format("no stderr for subtask {}", missing_stderr);
  return out;
}

}  // namespace

std::vector<size_t> group_leaf_tasks(const EvalSpec& spec, size_t g) {
  std::vector<size_t> stack, out;
  leaf_tasks(spec, g, stack, out);
  return out;
}

std::vector<std::vector<MetricValue>> compute_group_metrics(const EvalSpec& spec, const RunResult& res) {
  std::vector<std::vector<MetricValue>> out(spec.groups.size());
  for (size_t g = 0; g < spec.groups.size(); ++g) {
    if (!spec.groups[g].aggregate_metric_list) continue;
    const std::vector<size_t> leaves = group_leaf_tasks(spec, g);
    for (const AggregateMetric& a : *spec.groups[g].aggregate_metric_list)
      for (const std::string& f : a.filter_list)
        if (auto m = group_metric(spec, res, leaves, a, f)) out[g].push_back(std::move(*m));
  }
  return out;
}

namespace {

std::string indented(const std::string& alias, int depth) {
  return depth > 0 ? std::string(static_cast<size_t>(depth), ' ') + "- " + alias : alias;
}

void add_rows(const EvalSpec& spec, bool is_group, size_t index, int depth, std::set<std::string>& shown,
              std::vector<ReportRow>& out) {
  if (!is_group) {
    const TaskSpec& t = spec.tasks[index];
    if (!shown.insert(t.name).second) return;
    out.push_back({false, index, depth, indented(t.task_alias.empty() ? t.name : t.task_alias, depth)});
    return;
  }
  const GroupSpec& g = spec.groups[index];
  if (!shown.insert(g.name).second) return;
  out.push_back({true, index, depth, indented(g.group_alias.empty() ? g.name : g.group_alias, depth)});
  std::vector<std::string> members = g.members;
  std::sort(members.begin(), members.end());  // lm-eval's _sort_task_dict
  members.erase(std::unique(members.begin(), members.end()), members.end());
  for (const std::string& m : members) {
    if (auto sub = group_index_of(spec, m)) add_rows(spec, true, *sub, depth + 1, shown, out);
    else if (auto t = task_index_of(spec, m)) add_rows(spec, false, *t, depth + 1, shown, out);
  }
}

}  // namespace

std::vector<ReportRow> report_rows(const EvalSpec& spec) {
  std::set<std::string> member;  // names listed by some group
  for (const GroupSpec& g : spec.groups) member.insert(g.members.begin(), g.members.end());
  std::vector<size_t> top_groups;
  std::vector<std::vector<size_t>> top_leaves;
  for (size_t g = 0; g < spec.groups.size(); ++g)
    if (!member.count(spec.groups[g].name)) {
      top_groups.push_back(g);
      top_leaves.push_back(group_leaf_tasks(spec, g));
    }
  std::set<std::string> shown;
  std::vector<ReportRow> out;
  for (size_t t = 0; t < spec.tasks.size(); ++t) {
    if (!member.count(spec.tasks[t].name)) {
      add_rows(spec, false, t, 0, shown, out);
      continue;
    }
    for (size_t k = 0; k < top_groups.size(); ++k)
      if (std::find(top_leaves[k].begin(), top_leaves[k].end(), t) != top_leaves[k].end())
        add_rows(spec, true, top_groups[k], 0, shown, out);
  }
  for (size_t g : top_groups) add_rows(spec, true, g, 0, shown, out);  // a group without tasks
  return out;
}

}  // namespace kveval::eval
