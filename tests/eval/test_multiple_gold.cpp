// A list doc_to_target: generate_until's references (lm-eval multiple_target:
// exact_match 1 when any reference matches after the exact_match options and
// the filters) and multiple_choice's gold indices (AGIEval: acc and acc_norm 1
// when the argmax is any gold index). Expected values are hand-computed.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "eval/metrics.hpp"
#include "eval/spec.hpp"
#include "eval_test_util.hpp"
#include "util/error.hpp"

using namespace kveval;
using namespace kveval::eval;
using nlohmann::json;

namespace {

EvalSpec spec_of(const json& task) { return parse_spec({{"model", "m.gguf"}, {"tasks", {task}}}, "spec.json", "."); }

const MetricValue& find(const std::vector<MetricValue>& ms, const std::string& name) {
  for (const auto& m : ms)
    if (m.name == name) return m;
  FAIL("metric not found: " << name);
  static MetricValue none;
  return none;
}

std::string spec_error(const json& task) {
  return kveval::test::spec_error([&] { spec_of(task); });
}

}  // namespace

TEST_SUITE("eval.multiple_gold") {
  TEST_CASE("generate_until with a list target: exact_match when any reference matches") {
    json task = {{"name", "qa"},
                 {"output_type", "generate_until"},
                 {"doc_to_text", "Q: {{q}}\nA:"},
                 {"doc_to_target", "answers"},
                 {"metric_list", {{{"metric", "exact_match"}, {"ignore_case", true}, {"ignore_punctuation", true}}}},
                 {"docs",
                  {{{"q", "a"}, {"answers", {"Paris", "City of Light"}}},
                   {{"q", "b"}, {"answers", {"Rome"}}},
                   {{"q", "c"}, {"answers", {"Oslo", "Christiania"}}},
                   {{"q", "d"}, {"answers", {"Bern", "Berne"}}}}}};
    TaskSpec t = spec_of(task).tasks[0];
    REQUIRE(t.docs.size() == 4);
    CHECK(t.docs[0].targets == std::vector<std::string>{"Paris", "City of Light"});
    CHECK(t.docs[0].target == "Paris");
    std::vector<DocOutcome> o(4);
    for (auto& x : o) x.ok = true;
    o[0].output = "city of light!";  // the second reference, after ignore_case and ignore_punctuation
    o[1].output = "Rome";
    o[2].output = "Bergen";          // no reference
    o[3].output = "BERNE";           // the second reference
    auto ms = compute_metrics(t, o);
    CHECK(find(ms, "exact_match").n == 4);
    CHECK(*find(ms, "exact_match").value == doctest::Approx(0.75));
    // per document, as in the samples file
    auto v = doc_metric_values(t, t.docs[2], o[2]);
    REQUIRE(v.size() == 1);
    CHECK(v[0].second == 0.0);
    CHECK(doc_metric_values(t, t.docs[3], o[3])[0].second == 1.0);
  }

  TEST_CASE("a list target is compared after the filter pipeline, each reference on its own") {
    json task = {{"name", "qa"},
                 {"output_type", "generate_until"},
                 {"doc_to_text", "q"},
                 {"doc_to_target", "answers"},
                 {"filter_list",
                  {{{"name", "last"},
                    {"filter", {{{"function", "regex"}, {"regex_pattern", "(\\d+)"}, {"group_select", -1}}}}}}},
                 {"docs", {{{"q", "a"}, {"answers", {"3", "4"}}}, {{"q", "b"}, {"answers", {"5", "6"}}}}}};
    TaskSpec t = spec_of(task).tasks[0];
    std::vector<DocOutcome> o(2);
    o[0].ok = o[1].ok = true;
    o[0].output = "1 then 4";    // last match 4: the second reference
    o[1].output = "5 then 7";    // last match 7: none (the first match 5 would hit)
    auto ms = compute_metrics(t, o);
    CHECK(*find(ms, "exact_match").value == doctest::Approx(0.5));
  }

  TEST_CASE("multiple_choice with a list of gold indices: acc and acc_norm are argmax in gold") {
    json task = {{"name", "agi"},
                 {"output_type", "multiple_choice"},
                 {"doc_to_text", "q"},
                 {"doc_to_choice", "choices"},
                 {"doc_to_target", "gold"},
                 {"docs",
                  {{{"q", "a"}, {"choices", {"x", "yyyy", "zz"}}, {"gold", {1, 2}}},
                   {{"q", "b"}, {"choices", {"x", "yyyy", "zz"}}, {"gold", {0}}}}}};
    TaskSpec t = spec_of(task).tasks[0];
    CHECK(t.docs[0].golds == std::vector<int>{1, 2});
    CHECK(t.docs[0].gold == 1);
    CHECK(t.docs[0].target == "1");  // lm-eval's few-shot text of a list target: str(target[0])
    std::vector<DocOutcome> o(2);
    o[0].ok = o[1].ok = true;
    // doc 0: argmax of the log-probs is choice 2 (in gold); per character: -4/1, -6/4, -3/2 -> choice 1 (in gold)
    o[0].choice_logprobs = {-4.0, -6.0, -3.0};
    // doc 1: argmax 2 (not gold 0); per character: -2/1, -8/4, -1.9/2 -> choice 2 again (not gold)
    o[1].choice_logprobs = {-2.0, -8.0, -1.9};
    auto ms = compute_metrics(t, o);
    CHECK(*find(ms, "acc").value == doctest::Approx(0.5));
    CHECK(*find(ms, "acc_norm").value == doctest::Approx(0.5));
    // doc 0 with choice 0 best: not in {1, 2} for acc; per character -1, -1.5, -1.5 -> choice 0 -> 0 for acc_norm
    o[0].choice_logprobs = {-1.0, -6.0, -3.0};
    o[1].choice_logprobs = {-1.0, -8.0, -3.0};  // choice 0 = gold for both
    ms = compute_metrics(t, o);
    CHECK(*find(ms, "acc").value == doctest::Approx(0.5));
    CHECK(*find(ms, "acc_norm").value == doctest::Approx(0.5));
    auto v = doc_metric_values(t, t.docs[1], o[1]);
    REQUIRE(v.size() == 2);
    CHECK(v[0].second == 1.0);
  }

  TEST_CASE("bad list targets name the document and the index") {
    json mc = {{"name", "agi"},
               {"output_type", "multiple_choice"},
               {"doc_to_text", "q"},
               {"doc_to_choice", "choices"},
               {"doc_to_target", "gold"},
               {"docs", {{{"q", "a"}, {"choices", {"x", "y"}}, {"gold", {0, 2}}}}}};
    CHECK(spec_error(mc) == "spec.json: tasks[0].docs[0]: doc_to_target[1]: gold index 2 out of range [0, 2)");
    mc["docs"][0]["gold"] = {"x"};
    CHECK(spec_error(mc).find("doc_to_target[0]: expected a choice index, got \"x\"") != std::string::npos);
    mc["docs"][0]["gold"] = json::array();
    CHECK(spec_error(mc).find("doc_to_target: an empty list of targets") != std::string::npos);
    json ll = {{"name", "ll"},
               {"output_type", "loglikelihood"},
               {"doc_to_text", "q"},
               {"doc_to_target", "a"},
               {"docs", {{{"q", "a"}, {"a", {"x", "y"}}}}}};
    CHECK(spec_error(ll).find("doc_to_target: a list of targets ([\"x\",\"y\"]) needs output_type generate_until or "
                              "multiple_choice") != std::string::npos);
  }
}
