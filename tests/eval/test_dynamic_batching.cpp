// The generation phase with dynamic batching (the default) against static
// batching and batch size 1: every request's output, ids, stop reason and
// token count, the samples and the results document are the same.
#include <doctest/doctest.h>

#include <set>

#include "eval/lm_eval_format.hpp"
#include "eval/runner.hpp"
#include "eval_test_util.hpp"
#include "test_support.hpp"
#include "context_support.hpp"

using kveval::test::real_context;
using namespace kveval;
using namespace kveval::eval;
using nlohmann::json;
using kveval::test::gen_task;

namespace {

/// 11 generation requests in three tasks: stops at ".", at "\n" or at "Lily", lengths 1..96.
EvalSpec spec(int batch_size) {
  json tasks = json::array();
  tasks.push_back(gen_task("dot", {"Once upon a time", "Tom had a red ball", "The sun", "Lily and Ben"}, 48, {"."}));
  tasks.push_back(gen_task("one", {"Once", "The dog"}, 1, {}));
  tasks.push_back(gen_task("long", {"Lily went to the park. She saw a", "One day", "Max", "The bird sang", "Mom said"}, 96,
                           {"Lily", "\n"}));
  json j = {{"batch_size", batch_size}, {"max_length", 128}, {"tasks", tasks}};
  j["model"] = kveval::test::model_path();
  return parse_spec(j, "test.json", ".");
}

RunResult run(int batch_size, Batching b) {
  RunOptions o;
  o.batching = b;
  return run_eval(spec(batch_size), real_context(), o);
}

void check_same(const RunResult& got, const RunResult& want) {
  REQUIRE(got.outcomes.size() == want.outcomes.size());
  for (size_t i = 0; i < got.outcomes.size(); ++i) {
    CAPTURE(i);
    const RequestOutcome &a = got.outcomes[i], &b = want.outcomes[i];
    CHECK(a.ran == b.ran);
    CHECK(a.output == b.output);
    CHECK(a.output_ids == b.output_ids);
    CHECK(a.stop_reason == b.stop_reason);
    CHECK(a.tokens == b.tokens);
    CHECK(a.error == b.error);
  }
  CHECK(got.n_request_errors == want.n_request_errors);
}

}  // namespace

TEST_SUITE("eval.dynamic_batching") {
  TEST_CASE("run: dynamic = static = batch size 1 for every generation request, sample and metric" *
            kveval::test::needs_model()) {
    const RunResult one = run(1, Batching::Static);
    const RunResult dyn = run(3, Batching::Dynamic);
    const RunResult stat = run(3, Batching::Static);
    check_same(dyn, one);
    check_same(stat, one);
    CHECK(dyn.cache_rows == 3);
    // the workload has every kind of ending
    std::set<std::string> reasons;
    for (const auto& o : one.outcomes) reasons.insert(o.stop_reason);
    CHECK(reasons.count("until") == 1);
    CHECK(reasons.count("max_gen_toks") == 1);
    // the same tokens went through the model, in fewer passes
    auto phase = [](const RunResult& r, const std::string& name) {
      for (const auto& p : r.phases)
        if (p.name == name) return p.tokens;
      return int64_t{-1};
    };
    CHECK(phase(dyn, "decode") == phase(one, "decode"));
    CHECK(phase(dyn, "prefill") == phase(one, "prefill"));
    // samples (order, responses, per-request stop reasons and token counts) and results are the same documents
    const EvalSpec s = spec(3);
    auto a = sample_records(s, dyn), b = sample_records(s, stat);
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      CHECK(a[i].dump() == b[i].dump());
    }
    auto results = [&](const RunResult& r) { return json::parse(results_json(s, r, "")["results"].dump()); };
    CHECK(results(dyn) == results(stat));
  }
}
