// Groups as lm-eval computes them (evaluator_utils.consolidate_group_results,
// api/metrics.py aggregate_subtask_metrics and pooled_sample_stderr): values
// checked against hand-computed means and pooled stderrs, the members a group
// YAML gives (tags, nested groups, inline dicts) and lm-eval's row order.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "eval/groups.hpp"
#include "eval/spec.hpp"
#include "eval/task_index.hpp"
#include "eval_test_util.hpp"
#include "util/error.hpp"

using kveval::test::task_tree;
using kveval::test::TempDir;
using namespace kveval::eval;
using kveval::test::message_of;
using Names = std::vector<std::string>;

namespace {

MetricValue acc(double v, std::optional<double> se, int n) {
  MetricValue m;
  m.name = "acc";
  m.value = v;
  m.stderr_ = se;
  m.n = n;
  return m;
}

GroupSpec group(const std::string& name, Names members, std::optional<bool> weight_by_size) {
  GroupSpec g;
  g.name = name;
  g.members = std::move(members);
  if (weight_by_size) g.aggregate_metric_list = std::vector<AggregateMetric>{{"acc", *weight_by_size, {"none"}}};
  return g;
}

/// Tasks a (acc 0.5 ± 0.2 over 10), b (0.8 ± 0.1 over 30), c (0.2 ± 0.05 over 20).
struct ThreeTasks {
  EvalSpec spec;
  RunResult res;
  ThreeTasks() {
    for (const char* n : {"a", "b", "c"}) {
      TaskSpec t;
      t.name = n;
      spec.tasks.push_back(t);
    }
    res.metrics = {{acc(0.5, 0.2, 10)}, {acc(0.8, 0.1, 30)}, {acc(0.2, 0.05, 20)}};
  }
};

}  // namespace

TEST_SUITE("eval.groups") {
  TEST_CASE("aggregate_subtask_metrics and pooled_sample_stderr equal hand-computed values") {
    const std::vector<double> m = {0.5, 0.8}, se = {0.2, 0.1};
    const std::vector<int> n = {10, 30};
    // (0.5*10 + 0.8*30) / 40 = 0.725; unweighted (0.5 + 0.8) / 2 = 0.65
    CHECK(aggregate_subtask_metrics(m, n, true) == doctest::Approx(0.725).epsilon(1e-15));
    CHECK(aggregate_subtask_metrics(m, n, false) == doctest::Approx(0.65).epsilon(1e-15));
    // sqrt((9*0.04*10 + 29*0.01*30) / (40 - 2) / 40) = sqrt(12.3 / 1520)
    CHECK(*pooled_sample_stderr(se, n) == doctest::Approx(0.0899561296586169).epsilon(1e-13));
    // no degrees of freedom: one document per subtask
    CHECK_FALSE(pooled_sample_stderr(std::vector<double>{0.0, 0.0}, std::vector<int>{1, 1}));
  }

  TEST_CASE("a nested group aggregates all its leaf tasks; weighted and unweighted; the pooled stderr") {
    ThreeTasks f;
    f.spec.groups = {group("top", {"a", "sub"}, true), group("sub", {"b", "c"}, true), group("flat", {"a", "b", "c"}, false)};
    const auto gm = compute_group_metrics(f.spec, f.res);
    REQUIRE(gm.size() == 3);
    REQUIRE(gm[0].size() == 1);
    // top: over a, b, c (not over sub's value): (5 + 24 + 4) / 60 = 0.55
    CHECK(*gm[0][0].value == doctest::Approx(0.55).epsilon(1e-15));
    CHECK(gm[0][0].n == 60);
    // sqrt((9*0.04*10 + 29*0.01*30 + 19*0.0025*20) / 57 / 60)
    CHECK(*gm[0][0].stderr_ == doctest::Approx(0.0622436262266905).epsilon(1e-13));
    CHECK(*gm[1][0].value == doctest::Approx(0.56).epsilon(1e-15));  // (24 + 4) / 50
    CHECK(*gm[1][0].stderr_ == doctest::Approx(0.06341004126582267).epsilon(1e-13));
    // unweighted: (0.5 + 0.8 + 0.2) / 3 = 0.5; the stderr is pooled by size all the same (lm-eval)
    CHECK(*gm[2][0].value == doctest::Approx(0.5).epsilon(1e-15));
    CHECK(*gm[2][0].stderr_ == doctest::Approx(0.0622436262266905).epsilon(1e-13));
  }

  TEST_CASE("a subtask without stderr gives none; without a value, n/a naming it; no aggregate list, no metrics") {
    ThreeTasks f;
    f.res.metrics[1][0].stderr_.reset();
    f.spec.groups = {group("g", {"a", "b"}, true), group("plain", {"a"}, std::nullopt)};
    auto gm = compute_group_metrics(f.spec, f.res);
    CHECK(*gm[0][0].value == doctest::Approx(0.725));
    CHECK_FALSE(gm[0][0].stderr_);
    CHECK(gm[0][0].note == "no stderr for subtask b");
    CHECK(gm[1].empty());
    f.res.metrics[0][0].value.reset();
    gm = compute_group_metrics(f.spec, f.res);
    CHECK_FALSE(gm[0][0].value);
    CHECK(gm[0][0].note == "no value for subtask a");
    // a filter no subtask reports gives no entry
    f.spec.groups[0].aggregate_metric_list->at(0).filter_list = {"strict-match"};
    CHECK(compute_group_metrics(f.spec, f.res)[0].empty());
  }

  TEST_CASE("rows: a group, then its members sorted by name, indented as lm-eval's prepare_print_tasks") {
    ThreeTasks f;
    f.spec.tasks[2].task_alias = "Cee";
    TaskSpec lone;
    lone.name = "lone";
    f.spec.tasks.insert(f.spec.tasks.begin(), lone);
    f.spec.groups = {group("top", {"sub", "a"}, true), group("sub", {"c", "b"}, std::nullopt)};
    f.spec.groups[1].group_alias = "Sub";
    Names got;
    for (const ReportRow& r : report_rows(f.spec)) got.push_back(r.alias);
    CHECK(got == Names{"lone", "top", " - a", " - Sub", "  - b", "  - Cee"});
  }

  TEST_CASE("a group YAML's members: a tag becomes its tasks, nested groups, inline dicts") {
    const TaskIndex idx = TaskIndex::build({{"--include-path", task_tree()}});
    TaskTree tree;
    idx.expand_tree("all_of_it", "--tasks", tree);
    REQUIRE(tree.groups.size() == 2);
    CHECK(tree.groups[0].name == "all_of_it");
    CHECK(tree.groups[0].members == Names{"daily", "last_word"});  // `words` is a tag: its task
    CHECK_FALSE(tree.groups[0].aggregate_metric_list);
    CHECK(tree.groups[1].name == "daily");
    CHECK(tree.groups[1].members == Names{"pets", "pets_fewshot", "chores"});  // the tag `everyday` and a task
    REQUIRE(tree.groups[1].aggregate_metric_list);
    CHECK(tree.groups[1].aggregate_metric_list->at(0).weight_by_size);
    CHECK(tree.groups[1].version == 1.0);

    TempDir d;
    d.write("t.yaml", "task: t\noutput_type: loglikelihood\n");
    d.write("g.yaml",
            "group: g\ngroup_alias: Gee\ntask:\n  - task: t\n    num_fewshot: 2\n  - group: inner\n    task: [t]\n"
            "aggregate_metric_list:\n  metric: acc\n  filter_list: strict\n");
    const TaskIndex di = TaskIndex::build({{"--include-path", d.path.string()}});
    TaskTree t2;
    di.expand_tree("g", "x", t2);
    REQUIRE(t2.tasks.size() == 1);
    CHECK(t2.tasks[0].second == nlohmann::json{{"num_fewshot", 2}});
    REQUIRE(t2.groups.size() == 2);
    CHECK(t2.groups[0].group_alias == "Gee");
    CHECK(t2.groups[0].members == Names{"t", "inner"});
    CHECK(t2.groups[1].members == Names{"t"});
    CHECK(t2.groups[0].aggregate_metric_list->at(0).filter_list == Names{"strict"});
    CHECK_FALSE(t2.groups[0].aggregate_metric_list->at(0).weight_by_size);  // lm-eval's default
  }

  TEST_CASE("bad group YAMLs are one line naming the file and key; task dicts are inline configs or overrides") {
    TempDir d;
    d.write("t.yaml", "task: t\noutput_type: loglikelihood\n");
    d.write("a.yaml", "group: a\ntask: [t]\naggregate_metric_list:\n  - metric: acc\n    aggregation: median\n");
    d.write("b.yaml", "group: b\ntask: [t]\nnum_fewshot: 3\n");
    d.write("c.yaml", "group: c\ntask:\n  - task: nowhere\n    doc_to_text: q\n");
    d.write("e.yaml", "group: e\ntask:\n  - task: t\n    doc_to_text: q\n");
    const TaskIndex idx = TaskIndex::build({{"--include-path", d.path.string()}});
    TaskTree tree;
    CHECK(message_of([&] { idx.expand_tree("a", "x", tree); }) ==
          d.file("a.yaml") + ": aggregate_metric_list[0].aggregation: \"median\": only 'mean' aggregates a group's subtasks");
    // an inline task config and a dict of task keys over an indexed task (lm-eval's TaskFactory)
    idx.expand_tree("c", "x", tree);
    idx.expand_tree("e", "x", tree);
    REQUIRE(tree.tasks.size() == 2);
    CHECK(tree.tasks[0].first == "c::nowhere");
    CHECK(tree.tasks[0].second == nlohmann::json{{"!inline", {{"task", "nowhere"}, {"doc_to_text", "q"}}}, {"!file", d.file("c.yaml")}});
    CHECK(tree.tasks[1].first == "t");
    CHECK(tree.tasks[1].second == nlohmann::json{{"lm_eval_overrides", {{"doc_to_text", "q"}}}});
  }

  TEST_CASE("a group's task keys are set on its members, under the keys of a member's dict and of enclosing groups") {
    TempDir d;
    d.write("t.yaml", "task: t\noutput_type: loglikelihood\n");
    d.write("u.yaml", "task: u\noutput_type: loglikelihood\n");
    d.write("v.yaml", "task: v\noutput_type: loglikelihood\n");
    // lm-eval's TaskFactory._build_group: keys that are no GroupConfig field are {**group's, **caller's}
    d.write("inner.yaml", "group: inner\ntask: [v]\nnum_fewshot: 1\ndoc_to_text: inner\n");
    d.write("b.yaml", "group: b\nnum_fewshot: 3\ndescription: D\nmetadata: {version: 2}\ntask:\n  - t\n"
                      "  - task: u\n    num_fewshot: 0\n  - group: inner\n    doc_to_text: outer\n"
                      "  - task: w\n    output_type: loglikelihood\n");
    const TaskIndex idx = TaskIndex::build({{"--include-path", d.path.string()}});
    TaskTree tree;
    idx.expand_tree("b", "x", tree);
    REQUIRE(tree.tasks.size() == 4);
    CHECK(tree.tasks[0].first == "t");
    CHECK(tree.tasks[0].second == nlohmann::json{{"num_fewshot", 3}, {"lm_eval_overrides", {{"description", "D"}}}});
    CHECK(tree.tasks[1].first == "u");  // the dict's own num_fewshot wins
    CHECK(tree.tasks[1].second == nlohmann::json{{"num_fewshot", 0}, {"lm_eval_overrides", {{"description", "D"}}}});
    CHECK(tree.tasks[2].first == "v");  // the caller's keys win over the inner group's own
    CHECK(tree.tasks[2].second ==
          nlohmann::json{{"num_fewshot", 3}, {"lm_eval_overrides", {{"description", "D"}, {"doc_to_text", "outer"}}}});
    CHECK(tree.tasks[3].first == "b::w");  // an inline task config gets them too
    CHECK(tree.tasks[3].second["!inline"] == nlohmann::json{{"task", "w"}, {"output_type", "loglikelihood"}, {"num_fewshot", 3},
                                                            {"description", "D"}});
    REQUIRE(tree.groups.size() == 2);
    CHECK(tree.groups[0].version == nlohmann::json(2));  // metadata stays the group's
  }

  TEST_CASE("an inline task config runs as '<group>::<task>'; a dict's task keys replace the indexed YAML's") {
    TempDir d;
    d.write("data.jsonl", "{\"q\": \"a\", \"x\": \"b\"}\n{\"q\": \"c\", \"x\": \"d\"}\n");
    d.write("t.yaml", "task: t\noutput_type: loglikelihood\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
                      "    test: data.jsonl\ntest_split: test\ndoc_to_text: q\ndoc_to_target: x\n");
    d.write("g.yaml", "group: g\ntask:\n  - task: t\n    doc_to_text: \"Q: {{q}}\"\n    task_alias: Tee\n"
                      "  - task: own\n    output_type: loglikelihood\n    dataset_path: json\n    dataset_kwargs:\n"
                      "      data_files: data.jsonl\n    validation_split: train\n    doc_to_text: \"{{q}}!\"\n"
                      "    doc_to_target: x\naggregate_metric_list:\n  - metric: acc\n");
    const EvalSpec s = parse_spec({{"model", "m.gguf"}, {"include_path", d.path.string()}, {"tasks", {"g"}}}, "spec.json", ".");
    REQUIRE(s.tasks.size() == 2);
    CHECK(s.tasks[0].name == "t");
    CHECK(s.tasks[0].task_alias == "Tee");
    CHECK(s.tasks[0].docs[1].context == "Q: c");
    CHECK(s.tasks[1].name == "g::own");
    CHECK(s.tasks[1].docs[0].context == "a!");  // its data file is found next to the group's YAML
    CHECK(s.tasks[1].source == d.file("g.yaml"));
    REQUIRE(s.groups.size() == 1);
    CHECK(s.groups[0].members == Names{"t", "g::own"});
    // an inline config is checked as a task YAML is: one line naming the group's file
    d.write("g.yaml", "group: g\ntask:\n  - task: own\n    output_type: loglikelihood\n    include: t.yaml\n");
    CHECK(message_of([&] { parse_spec({{"model", "m.gguf"}, {"include_path", d.path.string()}, {"tasks", {"g"}}}, "spec.json", "."); }) ==
          d.file("g.yaml") + " (an inline task config): include: not allowed in an inline task config");
  }
}
