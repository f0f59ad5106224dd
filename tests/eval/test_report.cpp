// compare_baseline: strict comparison of two results documents; the groups
// table printed after the metrics table; the phase table and its summary lines.
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

/// A run with one request of each of `kinds` and the runner's seven phases in their order (load, requests,
/// loglikelihood, cache setup, prefill, decode, cache teardown), each taking `seconds` and counting `tokens`.
RunResult phase_run(const std::vector<RequestKind>& kinds, const std::vector<double>& seconds,
                    const std::vector<int64_t>& tokens) {
  RunResult res;
  for (RequestKind k : kinds) res.requests.emplace_back().kind = k;
  const char* names[] = {"load", "requests", "loglikelihood", "cache setup", "prefill", "decode", "cache teardown"};
  REQUIRE(seconds.size() == 7);
  REQUIRE(tokens.size() == 7);
  for (size_t i = 0; i < 7; ++i) res.phases.push_back({names[i], seconds[i], tokens[i]});
  return res;
}

constexpr RequestKind kLL = RequestKind::Loglikelihood, kGen = RequestKind::Generate;
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

  TEST_CASE("the phase table: no cache phases without a generate_until request, said in the cache line; counts agree in number") {
    RunResult res = phase_run({kLL, kLL}, {0.5, 0.25, 1.0, 0, 0, 0, 0}, {0, 10, 8, 0, 0, 0, 0});
    res.ll_forward_calls = 1, res.ll_tokens_requested = 8, res.ll_tokens_computed = 8, res.ll_logit_rows = 1;
    CHECK_FALSE(has_generation(res));
    CHECK(format_phase_table(res) ==
          "| phase         |  seconds | tokens | tokens/s |\n"
          "|---------------|----------|--------|----------|\n"
          "| load          | 0.500000 |      - |        - |\n"
          "| requests      | 0.250000 |     10 |     40.0 |\n"
          "| loglikelihood | 1.000000 |      8 |      8.0 |\n"
          "cache bytes: 0 before the run, 0 after (no generate_until request: no generation cache, no cache phases)\n"
          "loglikelihood phase: 1 forward pass, 0 with caches set up, 0 cached; 8 tokens requested, 8 computed, 1 logit row\n");

    // one generate_until request in a 1-row cache: every phase shown, the cache line with its shape
    res.requests.emplace_back().kind = kGen;
    res.phases[4] = {"prefill", 0.5, 5};
    res.phases[5] = {"decode", 0.25, 1};
    res.cache_bytes_setup = 640, res.cache_rows = 1, res.cache_positions = 6;
    res.ll_forward_calls = 2, res.ll_tokens_requested = 1, res.ll_tokens_computed = 1, res.ll_logit_rows = 2;
    CHECK(has_generation(res));
    const std::string t = format_phase_table(res);
    for (const char* phase : {"| cache setup    |", "| prefill        | 0.500000 |      5 |     10.0 |",
                              "| decode         | 0.250000 |      1 |      4.0 |", "| cache teardown |"})
      CHECK(t.find(phase) != std::string::npos);
    CHECK(t.find("cache bytes: 0 before generation, 640 at setup (1 row x 6 positions), 0 after teardown\n") !=
          std::string::npos);
    CHECK(t.find("loglikelihood phase: 2 forward passes, 0 with caches set up, 0 cached; 1 token requested, 1 computed, "
                 "2 logit rows\n") != std::string::npos);
  }

  TEST_CASE("the phase table: no loglikelihood row without a scoring request, said in the loglikelihood line") {
    RunResult res = phase_run({kGen}, {0.5, 0.25, 0.125, 0.5, 0.5, 0.25, 0.5}, {0, 5, 0, 0, 5, 1, 0});
    res.cache_bytes_setup = 640, res.cache_rows = 1, res.cache_positions = 6;
    CHECK(has_generation(res));
    CHECK_FALSE(has_scoring(res));
    CHECK(format_phase_table(res) ==
          "| phase          |  seconds | tokens | tokens/s |\n"
          "|----------------|----------|--------|----------|\n"
          "| load           | 0.500000 |      - |        - |\n"
          "| requests       | 0.250000 |      5 |     20.0 |\n"
          "| cache setup    | 0.500000 |      - |        - |\n"
          "| prefill        | 0.500000 |      5 |     10.0 |\n"
          "| decode         | 0.250000 |      1 |      4.0 |\n"
          "| cache teardown | 0.500000 |      - |        - |\n"
          "cache bytes: 0 before generation, 640 at setup (1 row x 6 positions), 0 after teardown\n"
          "loglikelihood phase: 0 forward passes (no loglikelihood, multiple_choice or loglikelihood_rolling request: "
          "nothing to score)\n");
    // a rolling window is a scoring request: the row is back
    res.requests.emplace_back().kind = RequestKind::RollingWindow;
    CHECK(has_scoring(res));
    CHECK(format_phase_table(res).find("| loglikelihood  | 0.125000 |      - |        - |\n") != std::string::npos);
    // one format per column at any magnitude: fixed seconds (no 3.532e-05 beside 0.0015), fixed tokens/s
    res.phases[3].seconds = 3.532e-05, res.phases[5] = {"decode", 1e-7, 1};
    const std::string small = format_phase_table(res);
    CHECK(small.find("| cache setup    | 0.000035 |      - |          - |\n") != std::string::npos);
    CHECK(small.find("| decode         | 0.000000 |      1 | 10000000.0 |\n") != std::string::npos);
  }

  TEST_CASE("the metrics table counts failed requests in the right number") {
    EvalSpec spec;
    TaskSpec t;
    t.name = "ll";
    spec.tasks.push_back(t);
    RunResult res;
    res.requests.resize(2);
    res.requests[0].error = "too long";
    res.metrics = {{}};
    res.task_errors = {1};
    res.n_request_errors = 1;
    const std::string one = format_metrics_table(spec, res);
    CHECK(one.find("1 request failed: ll: 1;\n  too long\n") != std::string::npos);
    res.requests[1].error = "too long";
    res.task_errors = {2};
    res.n_request_errors = 2;
    CHECK(format_metrics_table(spec, res).find("2 requests failed: ll: 2;\n") != std::string::npos);
  }
}
