// compare_baseline: strict comparison of two results documents; the groups
// table printed after the metrics table.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "eval/groups.hpp"
#include "eval/report.hpp"

using namespace kveval::eval;
using nlohmann::json;

namespace {
json results_doc(json results, json n_samples = json::object()) {
  return {{"results", std::move(results)}, {"n-samples", std::move(n_samples)}};
}
}  // namespace

TEST_SUITE("eval.report") {
  TEST_CASE("compare_baseline: equal numbers pass; worse than tolerance regresses in the metric's bad direction") {
    json base = results_doc({{"t", {{"acc", 0.5}, {"acc_stderr", 0.1}, {"perplexity", 3.0}, {"alias", "t"}}}});
    CHECK(compare_baseline(base, base, 0).ok());
    json cur = results_doc({{"t", {{"acc", 0.4}, {"acc_stderr", 0.1}, {"perplexity", 3.05}, {"alias", "t"}}}});
    BaselineCheck c = compare_baseline(base, cur, 0.06);
    REQUIRE(c.regressions.size() == 1);  // acc fell by 0.1 > 0.06; perplexity rose by 0.05 <= 0.06
    CHECK(c.regressions[0].metric == "acc");
    CHECK(c.failures.empty());
  }

  TEST_CASE("compare_baseline: nothing compared is a failure, one line per problem; n-samples is a warning") {
    json base = results_doc({{"t", {{"acc", 0.5}, {"perplexity", nullptr}, {"alias", "t"}}}, {"gone", {{"acc", 1.0}}}},
                            {{"t", {{"original", 4}, {"effective", 4}}}});
    json cur = results_doc({{"t", {{"acc", nullptr}, {"perplexity", 2.0}, {"exact", 1.0}, {"alias", "t"}}}, {"new", {{"acc", 1.0}}}},
                           {{"t", {{"original", 4}, {"effective", 0}}}});
    BaselineCheck c = compare_baseline(base, cur, 1.0);
    CHECK(!c.ok());
    CHECK(c.regressions.empty());
    std::vector<std::string> want = {"gone: task in the baseline but not in this run",
                                     "t acc: value of this run is n/a",
                                     "t exact: in this run but not in the baseline",
                                     "t perplexity: baseline value is n/a",
                                     "new: task in this run but not in the baseline"};
    std::sort(want.begin(), want.end());
    std::vector<std::string> got = c.failures;
    std::sort(got.begin(), got.end());
    CHECK(got == want);
    REQUIRE(c.warnings.size() == 1);
    CHECK(c.warnings[0].find("t: n-samples differ") == 0);
    // a metric of the baseline missing from the run; a string value
    json b2 = results_doc({{"t", {{"acc", "0.5"}, {"acc_norm", 0.5}}}});
    json c2 = results_doc({{"t", {{"acc", 0.5}}}});
    BaselineCheck k = compare_baseline(b2, c2, 0);
    std::vector<std::string> got2 = k.failures;
    std::sort(got2.begin(), got2.end());
    CHECK(got2 == std::vector<std::string>{"t acc: baseline value is not a number (\"0.5\")",
                                           "t acc_norm: in the baseline but not in this run"});
  }

  TEST_CASE("the groups table: lm-eval's second table, the aggregating groups only, nested ones indented") {
    EvalSpec spec;
    RunResult res;
    for (const char* n : {"a", "b"}) {
      TaskSpec t;
      t.name = n;
      spec.tasks.push_back(t);
    }
    MetricValue acc;
    acc.name = "acc";
    acc.value = 0.5, acc.stderr_ = 0.25, acc.n = 4;
    res.metrics = {{acc}, {acc}};
    GroupSpec top, sub, plain;
    top.name = "top", top.members = {"sub", "a"};
    top.aggregate_metric_list = std::vector<AggregateMetric>{{"acc", false, {"none"}}};
    sub.name = "sub", sub.group_alias = "Sub", sub.members = {"b"};
    sub.aggregate_metric_list = std::vector<AggregateMetric>{{"acc", true, {"none"}}};
    plain.name = "plain", plain.members = {"a"};  // no aggregate_metric_list: not in the groups table
    spec.groups = {top, sub, plain};
    res.group_metrics = compute_group_metrics(spec, res);
    // top: the mean of 0.5 and 0.5; pooled stderr sqrt((3*0.0625*4 + 3*0.0625*4) / (8 - 2) / 8) = sqrt(1/32) = 0.1768;
    // sub: b alone, sqrt(3*0.0625*4 / 3 / 4) = 0.25
    CHECK(format_groups_table(spec, res) ==
          "| group  | metric |  value |   stderr | n | note |\n"
          "|--------|--------|--------|----------|---|------|\n"
          "| top    | acc    | 0.5000 | ± 0.1768 | 8 |      |\n"
          "|  - Sub | acc    | 0.5000 | ± 0.2500 | 4 |      |\n");
    spec.groups[0].aggregate_metric_list.reset();
    spec.groups[1].aggregate_metric_list->clear();
    CHECK(format_groups_table(spec, res).empty());  // no group aggregates a metric: lm-eval prints no groups table
  }
}
