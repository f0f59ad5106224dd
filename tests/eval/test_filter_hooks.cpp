// Custom filters in filter_list (tests/data/lm_eval_hooks/filter_hooks.yaml,
// filter_calls.yaml and extras.py): `function: !function extras.LastWord` with its
// keyword argument, lm-eval's `function: custom` with `filter_fn`, a filter whose
// result has the wrong length, and filters that report how many documents one call
// received (lm-eval calls a filter once per task with every document). Expected
// values are hand-computed from the outputs below and extras.py.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/filters.hpp"
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
    CHECK(drops.note == "4 documents left out: " + hooks_dir() +
                            "/filter_hooks.yaml:25: filter_list[2].filter[0].function: extras.Drops returned a list of 0, "
                            "expected one filtered entry per document (4)");
  }

  TEST_CASE("a custom filter is called once per pipeline with every document's responses and document") {
    const EvalSpec s = load({{"lm_eval_yaml", "filter_calls.yaml"}});
    const auto& t = s.tasks[0];
    REQUIRE(t.filter_list.size() == 2);
    const char* outputs[] = {"France", "x", "Italy", "Peru"};  // the four targets
    std::vector<std::optional<std::vector<std::string>>> resps(4);
    for (size_t i = 0; i < 4; ++i) resps[i] = std::vector<std::string>{outputs[i]};
    // SeenDocs appends "|<documents it received>|<its call number>"
    const auto first = kveval::eval::filter_docs(t.filter_list[0], resps, t.docs, true);
    REQUIRE(first.size() == 4);
    REQUIRE(first[0]);
    REQUIRE(first[0]->error.empty());
    const std::string r0 = first[0]->filtered.items.at(0);
    REQUIRE(r0.rfind("France|4|", 0) == 0);
    const int call = std::stoi(r0.substr(9));
    for (size_t i = 0; i < 4; ++i) {
      REQUIRE(first[i]);
      CHECK(first[i]->error.empty());
      CHECK(!first[i]->filtered.is_list);
      CHECK(first[i]->filtered.items == std::vector<std::string>{std::string(outputs[i]) + "|4|" + std::to_string(call)});
    }
    // a document left out (its requests failed) is not passed on; the next run is the next single call
    resps[1].reset();
    const auto second = kveval::eval::filter_docs(t.filter_list[0], resps, t.docs, true);
    CHECK(!second[1]);
    for (size_t i : {0, 2, 3})
      CHECK(second[i]->filtered.items == std::vector<std::string>{std::string(outputs[i]) + "|3|" + std::to_string(call + 1)});
    // exact_match through compute_metrics: keep_if_four_docs keeps the outputs only when it saw all four documents
    std::vector<DocOutcome> o(4);
    for (size_t i = 0; i < 4; ++i) o[i].ok = true, o[i].output = outputs[i];
    const auto ms = compute_metrics(t, o);
    CHECK(*find(ms, "four").value == 1.0);
    CHECK(*find(ms, "seen").value == 0.0);
    o[3].ok = false;  // three documents: "[saw 3]" for each
    CHECK(*find(compute_metrics(t, o), "four").value == 0.0);
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
