// lm-eval's output conventions for tasks read from lm-eval YAML: task_alias
// in the table and the results' alias, versions "Yaml" without
// metadata.version, and samples that keep the document's key order and log
// doc_to_target's value.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "eval/eval_test_util.hpp"
#include "eval/lm_eval_format.hpp"
#include "eval/report.hpp"
#include "eval/runner.hpp"
#include "eval/spec.hpp"

using namespace kveval::eval;
using kveval::test::kYamlTaskHead;
using kveval::test::TempDir;
using nlohmann::json;

TEST_SUITE("eval.lm_eval_output") {
  TEST_CASE("task_alias names the table row and results' alias; versions is \"Yaml\" without metadata.version") {
    TempDir d;
    d.write("test.jsonl", "{\"q\": \"x\", \"a\": \"y\"}\n");
    std::string y = d.write("task.yaml", std::string(kYamlTaskHead) + R"(task_alias: "My task alias"
dataset_kwargs:
  data_files: {test: test.jsonl}
test_split: test
)");
    EvalSpec s = parse_spec({{"model", "m.gguf"}, {"tasks", {{{"lm_eval_yaml", y}}}}}, "spec.json", d.path.string());
    CHECK(s.tasks[0].name == "t");
    CHECK(s.tasks[0].task_alias == "My task alias");
    RunResult r;
    MetricValue m;
    m.name = "exact_match";
    m.value = 1.0;
    m.n = 1;
    r.metrics = {{m}};
    r.docs = {{}};
    r.task_errors = {0};
    r.chunked.resize(1);
    const std::string table = format_metrics_table(s, r);
    CHECK(table.find("My task alias") != std::string::npos);
    auto j = results_json(s, r, "");
    CHECK(j["results"]["t"]["alias"] == "My task alias");
    CHECK(j["versions"]["t"] == "Yaml");
  }
}

TEST_SUITE("eval.lm_eval_output") {
  TEST_CASE("samples keep the document's key order and log doc_to_target's value as lm-eval") {
    TempDir d;
    d.write("test.jsonl", "{\"zeta\": \"Which?\", \"choices\": [\"p\", \"q\"], \"answer\": \"q\", \"alpha\": 1}\n");
    std::string y = d.write("mc.yaml", R"(task: mc
output_type: multiple_choice
dataset_path: json
dataset_kwargs:
  data_files: {test: test.jsonl}
test_split: test
doc_to_text: zeta
doc_to_choice: choices
doc_to_target: answer
)");
    EvalSpec s = parse_spec({{"model", "m.gguf"}, {"tasks", {{{"lm_eval_yaml", y}}}}}, "spec.json", d.path.string());
    RunResult r;
    r.docs = {{DocOutcome{}}};
    r.metrics = {{}};
    r.task_errors = {0};
    r.chunked.resize(1);
    auto samples = sample_records(s, r);
    REQUIRE(samples.size() == 1);
    std::vector<std::string> keys;
    for (auto it = samples[0]["doc"].begin(); it != samples[0]["doc"].end(); ++it) keys.push_back(it.key());
    CHECK(keys == std::vector<std::string>{"zeta", "choices", "answer", "alpha"});
    CHECK(samples[0]["target"] == "q");  // the choice's text, as doc_to_target gives it (gold index 1)
    CHECK(s.tasks[0].docs[0].gold == 1);
  }
}
