// lm-eval's multiple-input tasks (Winogrande): doc_to_choice gives one context
// per option, doc_to_text the gold index, doc_to_target the text scored after
// every context. The task folder tests/data/winogrande_like/ was written for
// these tests; expected values are hand-computed, and the model case compares
// with a naive computation (each context + continuation as a plain
// loglikelihood request, argmax in the test).
#include <doctest/doctest.h>

#include <cmath>

#include <nlohmann/json.hpp>

#include "context_support.hpp"
#include "eval/metrics.hpp"
#include "eval/runner.hpp"
#include "eval/spec.hpp"
#include "eval_test_util.hpp"
#include "test_support.hpp"
#include "util/error.hpp"

using namespace kveval;
using namespace kveval::eval;
using nlohmann::json;

namespace {

std::string wino_dir() { return kveval::test::source_dir() + "/tests/data/winogrande_like"; }

EvalSpec yaml_spec(const std::string& yaml, const json& extra = json::object()) {
  json entry = {{"lm_eval_yaml", wino_dir() + "/" + yaml}};
  entry.update(extra);
  return parse_spec({{"model", "m.gguf"}, {"tasks", {entry}}}, "spec.json", ".");
}

std::string spec_error(const json& task) {
  return kveval::test::spec_error([&] { parse_spec({{"model", "m.gguf"}, {"tasks", {task}}}, "spec.json", "."); });
}

const MetricValue& find(const std::vector<MetricValue>& ms, const std::string& name) {
  for (const auto& m : ms)
    if (m.name == name) return m;
  FAIL("metric not found: " << name);
  static MetricValue none;
  return none;
}

}  // namespace

TEST_SUITE("eval.multiple_input") {
  TEST_CASE("Python hooks: one context per option with the few-shot prefix, the part after the blank scored") {
    const EvalSpec s = yaml_spec("blanks.yaml", {{"num_fewshot", 1}});
    const TaskSpec& t = s.tasks[0];
    CHECK(t.multiple_input);
    REQUIRE(t.docs.size() == 4);
    // first_n from the training split: its first example shows its gold context (option 2), then its target
    const std::string shot = "Mom hugged Lily because Lily was sad.\n\n";
    const Doc& d = t.docs[0];
    CHECK(d.choices == std::vector<std::string>{"Lily gave the ball to Tom because Lily", "Lily gave the ball to Tom because Tom"});
    CHECK(d.contexts == std::vector<std::string>{shot + d.choices[0], shot + d.choices[1]});
    CHECK(d.context == shot);
    CHECK(d.target == "did not want to play anymore.");
    CHECK(d.target_value == "did not want to play anymore.");
    CHECK(d.gold == 0);
    CHECK(t.docs[2].gold == 1);  // answer "2"
    CHECK(t.docs[2].target == "was too small.");
  }

  TEST_CASE("field mappings: acc over the contexts' log-likelihoods, acc_norm by the contexts' characters") {
    const EvalSpec s = yaml_spec("blanks_fields.yaml");
    const TaskSpec& t = s.tasks[0];
    CHECK(t.multiple_input);
    REQUIRE(t.docs.size() == 3);
    CHECK(t.docs[0].contexts == std::vector<std::string>{"Lily gave the ball to Lily", "Lily gave the ball to Tom"});
    CHECK(t.docs[2].contexts == std::vector<std::string>{"A", "Bee"});
    CHECK(t.docs[2].target == "flew away.");
    std::vector<DocOutcome> o(3);
    for (auto& x : o) x.ok = true;
    // doc 0 (gold 1, 26 and 25 characters): argmax 0; -0.1 vs -0.2 per character: 0 -> acc 0, acc_norm 0
    o[0].choice_logprobs = {-2.6, -5.0};
    // doc 1 (gold 0, 15 and 16 characters): argmax 0; -0.2 vs -0.25: 0 -> 1, 1
    o[1].choice_logprobs = {-3.0, -4.0};
    // doc 2 (gold 1, 1 and 3 characters): argmax 0; -1.0 vs -0.8: 1 -> acc 0, acc_norm 1
    o[2].choice_logprobs = {-1.0, -2.4};
    const auto ms = compute_metrics(t, o);
    CHECK(*find(ms, "acc").value == doctest::Approx(1.0 / 3).epsilon(1e-15));
    CHECK(*find(ms, "acc_norm").value == doctest::Approx(2.0 / 3).epsilon(1e-15));
    // lm-eval's per-document values, as in the samples file
    const auto v = doc_metric_values(t, t.docs[2], o[2]);
    REQUIRE(v.size() == 2);
    CHECK(v[0].second == 0.0);
    CHECK(v[1].second == 1.0);
  }

  TEST_CASE("a template giving digits is the index; a later document without an index is one line") {
    json task = {{"name", "w"},
                 {"output_type", "multiple_choice"},
                 {"doc_to_text", "{{ label + 0 }}"},
                 {"doc_to_target", "rest"},
                 {"doc_to_choice", "fills"},
                 {"docs", {{{"fills", {"a b", "a c"}}, {"rest", "d"}, {"label", 1}}}}};
    const EvalSpec s = parse_spec({{"model", "m.gguf"}, {"tasks", {task}}}, "spec.json", ".");
    CHECK(s.tasks[0].multiple_input);
    CHECK(s.tasks[0].docs[0].gold == 1);
    CHECK(s.tasks[0].docs[0].contexts == std::vector<std::string>{"a b", "a c"});

    task["doc_to_text"] = "label";
    task["docs"].push_back({{"fills", {"x", "y"}}, {"rest", "z"}, {"label", "first"}});
    CHECK(spec_error(task) ==
          "spec.json: tasks[0].docs[1]: doc_to_text: expected a context index, got \"first\" (the task's first document "
          "gave an int, so it is a multiple-input task as in lm-eval: doc_to_choice gives the contexts)");
    task["docs"][1]["label"] = 2;
    CHECK(spec_error(task) == "spec.json: tasks[0].docs[1]: doc_to_text: context index 2 out of range [0, 2)");
    task["docs"][1]["label"] = 0;
    task["docs"][1]["rest"] = json::array({"z"});
    CHECK(spec_error(task) == "spec.json: tasks[0].docs[1]: doc_to_target: expected the text scored after each context "
                              "(a multiple-input task), got [\"z\"]");
    task["doc_to_text"] = "{{ '0' ~ label }}";
    task["docs"] = {{{"fills", {"a b", "a c"}}, {"rest", "d"}, {"label", 1}}};
    CHECK(spec_error(task) == "spec.json: tasks[0].docs[0]: doc_to_text: the template gave \"01\", which lm-eval reads with "
                              "ast.literal_eval: leading zeros in decimal integer literals are not permitted");
  }

  TEST_CASE("acc equals the argmax of each context's own log-likelihood, scored as plain requests" *
            kveval::test::needs_model()) {
    EvalSpec s = yaml_spec("blanks.yaml", {{"num_fewshot", 1}});
    s.model = kveval::test::model_path();
    // the naive computation: every (context, " " + target) of every document as its own loglikelihood request
    json pairs = json::array();
    for (const Doc& d : s.tasks[0].docs)
      for (const std::string& c : d.contexts) pairs.push_back({{"c", c}, {"x", " " + d.target}});
    EvalSpec naive = parse_spec({{"model", kveval::test::model_path()},
                                 {"tasks",
                                  {{{"name", "pairs"}, {"output_type", "loglikelihood"}, {"docs", pairs},
                                    {"doc_to_text", "c"}, {"doc_to_target", "x"}, {"target_delimiter", ""}}}}},
                                "naive.json", ".");
    const RunResult r = run_eval(s, kveval::test::real_context());
    const RunResult n = run_eval(naive, kveval::test::real_context());
    REQUIRE(r.n_request_errors == 0);
    REQUIRE(n.n_request_errors == 0);
    double hits = 0;
    size_t k = 0;
    for (size_t di = 0; di < s.tasks[0].docs.size(); ++di) {
      const Doc& d = s.tasks[0].docs[di];
      std::vector<double> ll;
      for (size_t c = 0; c < d.contexts.size(); ++c, ++k) {
        ll.push_back(n.docs[0][k].logprob);
        CHECK(r.docs[0][di].choice_logprobs[c] == doctest::Approx(ll.back()).epsilon(1e-6));
      }
      int best = 0;
      for (int c = 1; c < static_cast<int>(ll.size()); ++c)
        if (ll[static_cast<size_t>(c)] > ll[static_cast<size_t>(best)]) best = c;
      hits += best == d.gold ? 1.0 : 0.0;
    }
    CHECK(*find(r.metrics[0], "acc").value == doctest::Approx(hits / 4).epsilon(1e-15));
  }
}
