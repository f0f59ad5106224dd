#include "eval/task_hooks.hpp"

#include <cmath>
#include <filesystem>

#include <fmt/format.h>

#include "eval/filters.hpp"
#include "eval/json_input.hpp"
#include "eval/metrics.hpp"
#include "eval/spec.hpp"
#include "eval/spec_check.hpp"
#include "util/error.hpp"

namespace kveval::eval {

namespace fs = std::filesystem;
using nlohmann::json;
using ojson = nlohmann::ordered_json;

json function_marker(const std::string& name, const std::string& yaml, const std::string& where) {
  return {{"!function", name}, {"!yaml", yaml}, {"!where", where}};
}

bool is_function_marker(const json& v) {
  return v.is_object() && v.size() == 3 && v.contains("!function") && v.contains("!yaml") && v.contains("!where");
}

namespace {

const char* const kHookKeys =
    "process_docs, doc_to_text, doc_to_target, doc_to_choice, process_results, metric_list's metric and aggregation, "
    "fewshot_config's samples and doc_to_*, and filter_list's function and filter_fn";

/// The hook a marker names (lm-eval's import_function: `module.name` -> <YAML's folder>/<module>.py), imported.
PythonHook hook_of(const json& marker, const std::string& key) {
  const std::string name = marker["!function"].is_string() ? marker["!function"].get<std::string>() : "";
  const std::string where = marker["!where"].get<std::string>();
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == name.size())
    throw SpecError(fmt::format("{}: '!function {}': expected module.function (a function of <module>.py next to the YAML)",
                                where, name));
  PythonHook h;
  h.module = name.substr(0, dot);
  h.function = name.substr(dot + 1);
  h.module_file = (fs::path(marker["!yaml"].get<std::string>()).parent_path() / (h.module + ".py")).string();
  h.key = key;
  h.where = where;
  check_python_hook(h);
  return h;
}

/// A `!function` left anywhere in `v` is refused.
void refuse_markers(const json& v) {
  if (is_function_marker(v))
    throw SpecError(fmt::format("{}: '!function' is not supported here (kveval calls Python in {})",
                                v["!where"].get<std::string>(), kHookKeys));
  if (v.is_structured())
    for (const auto& e : v) refuse_markers(e);
}

/// One metric_list entry: a `metric: !function`, and the aggregation / higher_is_better of metrics Python computes.
void take_metric_hooks(json& e, TaskHooks& hooks, const std::string& w) {
  if (!e.is_object() || !e.contains("metric")) return;
  const bool fn_metric = is_function_marker(e["metric"]);
  if (fn_metric) {
    PythonHook h = hook_of(e["metric"], "metric");
    e["metric"] = h.function;  // lm-eval names the metric by the function's __name__
    hooks.metrics.emplace_back(h.function, h);
  }
  if (!(fn_metric || hooks.process_results) || !e["metric"].is_string()) return;
  const std::string name = e["metric"].get<std::string>();
  if (e.contains("aggregation")) {
    const json& a = e["aggregation"];
    if (is_function_marker(a)) hooks.aggregations.emplace(name, hook_of(a, "aggregation"));
    else if (a != json("mean"))
      throw SpecError(fmt::format("{}: metric_list: aggregation {} of '{}': kveval aggregates the metrics of Python hooks "
                                  "with mean or an '!function'", w, json_excerpt(a), name));
    e.erase("aggregation");
  }
  if (e.contains("higher_is_better")) {
    if (!e["higher_is_better"].is_boolean())
      throw SpecError(fmt::format("{}: metric_list: higher_is_better of '{}': expected true or false", w, name));
    hooks.higher_is_better[name] = e["higher_is_better"].get<bool>();
    e.erase("higher_is_better");
  }
}

/// fewshot_config's hooks: doc_to_* leave their placeholder text, `samples: !function f` becomes f()'s list.
void take_fewshot_hooks(json& fc, TaskHooks& hooks) {
  for (const char* k : {"doc_to_text", "doc_to_target", "doc_to_choice"}) {
    if (!fc.contains(k) || !is_function_marker(fc[k])) continue;
    PythonHook h = hook_of(fc[k], k);
    fc[k] = "!function " + h.name();
    (std::string(k) == "doc_to_text"     ? hooks.fewshot_doc_to_text
     : std::string(k) == "doc_to_target" ? hooks.fewshot_doc_to_target
                                         : hooks.fewshot_doc_to_choice) = std::move(h);
  }
  if (fc.contains("samples") && is_function_marker(fc["samples"])) {
    const PythonHook h = hook_of(fc["samples"], "samples");
    fc["samples"] = json::parse(call_python_hook(h, HookCall::Samples, ojson::array()).dump());
  }
}

/// filter_list's hooks: a step's `function: !function m.Class` and a custom step's
/// `filter_fn: !function m.f` leave their placeholder text.
void take_filter_hooks(json& fl, TaskHooks& hooks) {
  for (auto& p : fl) {
    if (!p.is_object() || !p.contains("filter") || !p["filter"].is_array()) continue;
    for (auto& st : p["filter"]) {
      if (!st.is_object()) continue;
      for (const char* k : {"function", "filter_fn"}) {
        if (!st.contains(k) || !is_function_marker(st[k])) continue;
        PythonHook h = hook_of(st[k], std::string(k) == "function" ? "filter" : "filter_fn");
        st[k] = "!function " + h.name();
        hooks.filters.emplace(st[k].get<std::string>(), std::move(h));
      }
    }
  }
}

}  // namespace

TaskHooks TaskHooks::for_fewshot() const {
  TaskHooks h = *this;
  if (fewshot_doc_to_text) h.doc_to_text = fewshot_doc_to_text;
  if (fewshot_doc_to_target) h.doc_to_target = fewshot_doc_to_target;
  if (fewshot_doc_to_choice) h.doc_to_choice = fewshot_doc_to_choice;
  return h;
}

TaskHooks take_task_hooks(std::map<std::string, json>& values, const std::map<std::string, std::string>& where,
                          const std::string& yaml) {
  TaskHooks hooks;
  auto w = [&](const std::string& k) { return where.count(k) ? where.at(k) : yaml; };
  for (const char* k : {"process_docs", "process_results", "doc_to_text", "doc_to_target", "doc_to_choice"}) {
    auto it = values.find(k);
    if (it == values.end()) continue;
    const bool whole = std::string(k).rfind("process_", 0) == 0;
    if (!is_function_marker(it->second)) {
      if (whole && !it->second.is_null())
        throw SpecError(fmt::format("{}: {}: expected '!function module.name', got {}", w(k), k, json_excerpt(it->second)));
      if (whole) values.erase(it);
      continue;
    }
    PythonHook h = hook_of(it->second, k);
    std::optional<PythonHook>& slot = std::string(k) == "process_docs"      ? hooks.process_docs
                                      : std::string(k) == "process_results" ? hooks.process_results
                                      : std::string(k) == "doc_to_text"     ? hooks.doc_to_text
                                      : std::string(k) == "doc_to_target"   ? hooks.doc_to_target
                                                                            : hooks.doc_to_choice;
    if (whole) values.erase(it);
    else it->second = "!function " + h.name();  // the mapping's text; task_docs calls the hook
    slot = std::move(h);
  }
  if (auto fc = values.find("fewshot_config"); fc != values.end() && fc->second.is_object())
    take_fewshot_hooks(fc->second, hooks);
  if (auto fl = values.find("filter_list"); fl != values.end() && fl->second.is_array()) take_filter_hooks(fl->second, hooks);
  auto ml = values.find("metric_list");
  if (ml != values.end() && ml->second.is_array()) {
    for (auto& e : ml->second) take_metric_hooks(e, hooks, w("metric_list"));
    if (!hooks.metrics.empty() && !hooks.process_results) {
      auto ot = values.find("output_type");
      if (ot != values.end() && ot->second != json("generate_until"))
        throw SpecError(fmt::format("{}: metric_list: 'metric: !function' is called for generate_until tasks only (as "
                                    "lm-eval); use process_results for {}", w("metric_list"), json_excerpt(ot->second)));
      if (hooks.metrics.size() != ml->second.size())
        throw SpecError(fmt::format("{}: metric_list: kveval does not mix built-in metrics with 'metric: !function' "
                                    "(write them all as functions, or use process_results)", w("metric_list")));
    }
  }
  for (const auto& [k, v] : values) refuse_markers(v);
  return hooks;
}

json run_filter_hook(const PythonHook& hook, const json& kwargs, const std::vector<std::vector<std::string>>& responses,
                     const std::vector<const Doc*>& docs) {
  ojson resps = ojson::array(), ds = ojson::array();
  for (const auto& r : responses) resps.push_back(ojson(r));
  for (const Doc* d : docs) ds.push_back(ordered_doc(d->raw, d->raw_text));
  ojson args = ojson::array({std::move(resps), std::move(ds), ojson::parse(kwargs.is_object() ? kwargs.dump() : std::string("{}"))});
  return json::parse(call_python_hook(hook, HookCall::Filter, args).dump());
}

bool parse_hook_filter_step(const json& st, const Where& sw, const TaskHooks* hooks, FilterStep& fs) {
  const bool custom = fs.function == "custom", cls = fs.function.rfind("!function ", 0) == 0;
  if (!custom && !cls) return false;
  const std::string name = custom ? (st.contains("filter_fn") && st["filter_fn"].is_string() ? st["filter_fn"].get<std::string>() : "")
                                  : fs.function;
  if (custom && name.empty()) sw.fail("'custom' needs filter_fn: !function module.function (lm-eval's CustomFilter)");
  const PythonHook* h = nullptr;
  if (hooks)
    if (auto it = hooks->filters.find(name); it != hooks->filters.end()) h = &it->second;
  if (!h)
    sw.key(custom ? "filter_fn" : "function").fail(fmt::format("\"{}\" is not a Python hook of this task (write '!function "
                                                              "module.name' in a task YAML)", name));
  fs.hook = std::make_shared<const PythonHook>(*h);
  fs.kwargs = json::object();
  for (auto e = st.begin(); e != st.end(); ++e)
    if (e.key() != "function" && e.key() != "filter_fn") fs.kwargs[e.key()] = e.value();
  if (custom && !fs.kwargs.empty()) sw.fail("'custom' takes only filter_fn (lm-eval's CustomFilter passes nothing else on)");
  return true;
}

ojson ordered_doc(const json& doc, const std::string& raw_text) {
  if (!raw_text.empty()) {
    try {
      ojson o = ojson::parse(raw_text);
      if (json::parse(raw_text) == doc) return o;
    } catch (const std::exception&) {
    }
  }
  return ojson::parse(doc.dump());
}

std::vector<ojson> run_process_docs(const PythonHook& hook, std::vector<ojson> docs, const std::string& origin) {
  ojson args = ojson::array();
  args.push_back(ojson(std::move(docs)));
  ojson out;
  try {
    out = call_python_hook(hook, HookCall::ProcessDocs, args);
  } catch (const SpecError& e) {
    throw SpecError(fmt::format("{}: {}", origin, e.what()));
  }
  if (out.empty()) throw SpecError(fmt::format("{}: {}: {} returned no documents", origin, hook.where, hook.name()));
  return std::vector<ojson>(out.begin(), out.end());
}

}  // namespace kveval::eval
