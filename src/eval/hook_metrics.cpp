// Metrics computed by Python hooks (task_hooks.hpp): per-document values from
// process_results or metric functions, aggregated by mean or an aggregation hook.
#include <cmath>

#include <fmt/format.h>

#include "eval/filters.hpp"
#include "eval/json_input.hpp"
#include "eval/metrics.hpp"
#include "eval/spec.hpp"
#include "eval/task_hooks.hpp"
#include "util/error.hpp"
#include "util/number_format.hpp"

namespace kveval::eval {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {

/// lm-eval's `results` of one document: [(ll, is_greedy)] (loglikelihood), one
/// (ll, is_greedy) per choice (multiple_choice; is_greedy is not computed per
/// choice and is False), [ll] (rolling), [output] (generate_until).
ojson results_of(const TaskSpec& task, const DocOutcome& o, const std::string* filtered) {
  ojson r = ojson::array();
  switch (task.output_type) {
    case OutputType::Loglikelihood: r.push_back(ojson::array({o.logprob, o.is_greedy})); break;
    case OutputType::MultipleChoice:
      for (double ll : o.choice_logprobs) r.push_back(ojson::array({ll, false}));
      break;
    case OutputType::LoglikelihoodRolling: r.push_back(o.logprob); break;
    case OutputType::GenerateUntil: r.push_back(filtered ? *filtered : o.output); break;
  }
  return r;
}

/// The value of `name` in a hook's result dict; errors name the document and hook.
json metric_of(const ojson& r, const std::string& name, const PythonHook& h, const std::string& origin) {
  if (!r.is_object() || !r.contains(name)) {
    std::string keys;
    if (r.is_object())
      for (auto it = r.begin(); it != r.end(); ++it) keys += (keys.empty() ? "" : ", ") + it.key();
    throw Error(fmt::format("{}: {}: {} returned no '{}' (keys: {})", origin, h.where, h.name(), name, keys));
  }
  return json::parse(r[name].dump());
}

/// One metric's per-document values aggregated: the aggregation hook, else the mean (with lm-eval's mean_stderr).
void aggregate(const TaskSpec& task, const std::vector<json>& v, MetricValue& m, int bootstrap_iters) {
  auto agg = task.hooks->aggregations.find(m.name);
  if (agg != task.hooks->aggregations.end()) {
    ojson args = ojson::array({ojson::parse(json(v).dump())});
    const ojson r = call_python_hook(agg->second, HookCall::Aggregation, args);
    if (!std::isfinite(r.get<double>()))
      throw Error(fmt::format("{}: {} returned a value that is not finite", agg->second.where, agg->second.name()));
    m.value = r.get<double>();
    return;  // lm-eval: no stderr for a custom aggregation
  }
  std::vector<double> x;
  for (const json& e : v) {
    if (!e.is_number() && !e.is_boolean())
      throw Error(fmt::format("metric '{}': the mean needs numbers, got {} (give an 'aggregation: !function')", m.name,
                              json_excerpt(e)));
    x.push_back(e.is_boolean() ? (e.get<bool>() ? 1.0 : 0.0) : e.get<double>());
  }
  m.value = mean(x);
  if (bootstrap_iters > 0) m.stderr_ = mean_stderr(x);
}

}  // namespace

std::vector<std::pair<std::string, json>> hook_doc_values(const TaskSpec& task, const Doc& d, const DocOutcome& o,
                                                          const std::string* filtered) {
  std::vector<std::pair<std::string, json>> out;
  if (!o.ok) return out;
  const TaskHooks& hooks = *task.hooks;
  try {
    if (hooks.process_results) {
      ojson args = ojson::array({ordered_doc(d.raw, d.raw_text), results_of(task, o, filtered)});
      const ojson r = call_python_hook(*hooks.process_results, HookCall::ProcessResults, args);
      for (const auto& name : task.metric_list) out.emplace_back(name, metric_of(r, name, *hooks.process_results, d.origin));
      return out;
    }
    const ojson gold = ojson::parse(d.target_value.dump());
    const ojson pred = filtered ? *filtered : o.output;
    for (const auto& [name, h] : hooks.metrics) {
      ojson r = call_python_hook(h, HookCall::Metric, ojson::array({ojson::array({gold}), ojson::array({pred})}));
      out.emplace_back(name, r.is_object() ? metric_of(r, name, h, d.origin) : json::parse(r.dump()));
    }
  } catch (const SpecError& e) {
    throw Error(fmt::format("{}: {}", d.origin, e.what()));
  }
  return out;
}

std::vector<MetricValue> hook_metrics(const TaskSpec& task, std::span<const DocOutcome> outcomes, int bootstrap_iters) {
  std::vector<FilterPipeline> pipes = task.filter_list;
  if (task.output_type != OutputType::GenerateUntil || pipes.empty()) pipes = {FilterPipeline{"none", {}}};
  std::vector<MetricValue> out;
  for (const FilterPipeline& pipe : pipes) {
    std::map<std::string, std::vector<json>> values;
    int failed = 0;
    std::string first;
    const bool gen = task.output_type == OutputType::GenerateUntil;
    std::vector<std::optional<FilterOutcome>> filtered;  // the pipeline on every ok output, in one pass (filter_docs)
    if (gen) {
      std::vector<std::optional<std::vector<std::string>>> responses(task.docs.size());
      for (size_t i = 0; i < outcomes.size() && i < task.docs.size(); ++i)
        if (outcomes[i].ok) responses[i] = std::vector<std::string>{outcomes[i].output};
      filtered = filter_docs(pipe, responses, task.docs, true);
    }
    for (size_t i = 0; i < outcomes.size() && i < task.docs.size(); ++i) {
      if (!outcomes[i].ok) continue;
      try {
        std::string f;
        if (gen && !filtered[i]->error.empty()) throw SpecError(filtered[i]->error);
        if (gen) f = filtered[i]->filtered.items.at(0);
        for (auto& [name, v] : hook_doc_values(task, task.docs[i], outcomes[i], gen ? &f : nullptr))
          values[name].push_back(std::move(v));
      } catch (const std::exception& e) {
        if (failed++ == 0) first = e.what();
      }
    }
    for (const auto& name : task.metric_list) {
      MetricValue m;
      m.name = name;
      m.filter = pipe.name;
      auto hib = task.hooks->higher_is_better.find(name);
      m.higher_is_better = hib == task.hooks->higher_is_better.end() || hib->second;
      const std::vector<json>& v = values[name];
      m.n = static_cast<int>(v.size());
      try {
        if (!v.empty()) aggregate(task, v, m, bootstrap_iters);
        else if (!failed) m.note = "no documents";
      } catch (const std::exception& e) {
        m.value.reset(), m.stderr_.reset();
        m.note = e.what();
      }
      if (failed) m.note = fmt::format("{} left out: {}{}", count_of(failed, "document"), first, m.note.empty() ? "" : "; " + m.note);
      out.push_back(std::move(m));
    }
  }
  return out;
}

}  // namespace kveval::eval
