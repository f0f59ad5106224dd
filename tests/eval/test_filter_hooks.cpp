// Custom filters in filter_list (tests/data/lm_eval_hooks/filter_hooks.yaml and
// extras.py): `function: !function extras.LastWord` with its keyword argument,
// lm-eval's `function: custom` with `filter_fn`, and a filter whose result has
// the wrong length. Expected exact_match values are hand-computed from the
// outputs below and extras.py.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/metrics.hpp"
#include "eval/spec.hpp"
#include "eval_test_util.hpp"
#include "util/error.hpp"

using kveval::SpecError;
using kveval::eval::DocOutcome;
using kveval::eval::EvalSpec;
using kveval::eval::MetricValue;
using nlohmann::json;

namespace {

std::string hooks_dir() { return kveval::test::source_dir() + "/tests/data/lm_eval_hooks"; }

EvalSpec load(const json& entry) {
  return kveval::eval::parse_spec({{"model", "m.gguf"}, {"tasks", {entry}}}, "spec.json", hooks_dir());
}

std::string load_error(const json& entry) {
  try {
    load(entry);
  } catch (const SpecError& e) {
    return e.what();
  }
  FAIL("no SpecError");
  return "";
}

const MetricValue& find(const std::vector<MetricValue>& ms, const std::string& filter) {
  for (const auto& m : ms)
    if (m.name == "exact_match" && m.filter == filter) return m;
  FAIL("no exact_match," << filter);
  static MetricValue none;
  return none;
}

}  // namespace

TEST_SUITE("eval.filter_hooks") {
  TEST_CASE("a Filter class with keyword arguments and a custom filter_fn, each document with its doc") {
    const EvalSpec s = load({{"lm_eval_yaml", "filter_hooks.yaml"}});
    const auto& t = s.tasks[0];
    REQUIRE(t.filter_list.size() == 3);
    CHECK(t.filter_list[0].steps[0].kwargs == json{{"strip", "!"}});
    // targets: France, x, Italy, Peru
    std::vector<DocOutcome> o(4);
    const char* outputs[] = {"I think France!", "x", "Italy", "Peru!!"};
    for (size_t i = 0; i < 4; ++i) o[i].ok = true, o[i].output = outputs[i];
    const auto ms = compute_metrics(t, o);
    // last word without '!': France, x, Italy, Peru -> all four
    CHECK(*find(ms, "last_word").value == 1.0);
    // kept when it is one of the document's endings: [other], x, Italy, [other] -> two
    CHECK(*find(ms, "ending").value == 0.5);
    const MetricValue& drops = find(ms, "drops");
    CHECK(!drops.value);
    CHECK(drops.note == "4 document(s) left out: " + hooks_dir() + "/docs.jsonl:1: " + hooks_dir() +
                            "/filter_hooks.yaml:25: filter_list[2].filter[0].function: extras.Drops returned list, "
                            "expected one filtered entry per document");
  }

  TEST_CASE("custom without filter_fn, and a '!function' filter in a JSON spec, are one line") {
    CHECK(load_error({{"lm_eval_yaml", "bad_custom.yaml"}}) ==
          hooks_dir() + "/bad_custom.yaml:9: filter_list[0].filter[0]: 'custom' needs filter_fn: !function module.function "
                        "(lm-eval's CustomFilter)");
    const json task = {{"name", "g"},
                       {"output_type", "generate_until"},
                       {"doc_to_text", "q"},
                       {"docs", {{{"q", "a"}}}},
                       {"filter_list", {{{"name", "f"}, {"filter", {{{"function", "!function extras.LastWord"}}}}}}}};
    CHECK(load_error(task) == "spec.json: tasks[0].filter_list[0].filter[0].function: \"!function extras.LastWord\" is not "
                              "a Python hook of this task (write '!function module.name' in a task YAML)");
  }
}
