// `kveval run` on task YAMLs with `!function` hooks (tests/data/lm_eval_hooks/):
// the metrics process_results returns, and hook errors as one line, exit 2,
// before the model loads.
#include <doctest/doctest.h>

#include <string>

#include "cli_run.hpp"

namespace {
std::string hooks_dir() { return kveval::test::source_dir() + "/tests/data/lm_eval_hooks"; }
}  // namespace

TEST_SUITE("cli.python_hooks") {
  TEST_CASE("kveval run: process_docs, doc_to_* and process_results hooks give their metrics" * kveval::test::needs_model()) {
    TempDir d;
    const Run r = run_kveval(d, "run " + quote(hooks_dir() + "/hooks_mc.yaml") + " --model " +
                                    quote(kveval::test::model_path()) + " --quiet --output " + quote(d.file("results.json")));
    INFO(r.err);
    REQUIRE(r.code == 0);
    const json res = json::parse(slurp(d.file("results.json")));
    const json& m = res["results"]["hooks_mc"];
    CHECK(m["n_choices,none"].get<double>() == doctest::Approx(7.0 / 3).epsilon(1e-15));  // 3, 2, 2 choices
    CHECK(m["acc,none"].get<double>() >= 0.0);
    CHECK(m["acc,none"].get<double>() <= 1.0);
    CHECK(m["ll_gold,none"].get<double>() < 0.0);
    CHECK(m["margin,none"].is_number());
    CHECK(res["n-samples"]["hooks_mc"]["effective"] == 3);  // process_docs dropped one document
  }

  TEST_CASE("kveval run: a missing module and a hook past its time limit are one line, exit 2" * kveval::test::needs_model()) {
    TempDir d;
    const std::string model = " --model " + quote(kveval::test::model_path()) + " --quiet";
    Run r = run_kveval(d, "run " + quote(hooks_dir() + "/bad_missing.yaml") + model);
    CHECK(r.code == 2);
    CHECK(count_lines(r.err) == 1);
    CHECK(r.err.find("bad_missing.yaml:3: process_docs: helpers.py: import kveval_missing_module_for_tests failed") !=
          std::string::npos);
    r = run_kveval(d, "run " + quote(hooks_dir() + "/bad_loop.yaml") + model, "KVEVAL_HOOK_TIMEOUT=1 ");
    CHECK(r.code == 2);
    CHECK(count_lines(r.err) == 1);
    CHECK(r.err.find("bad_loop.yaml:3: process_docs: utils.forever did not return within 1 s") != std::string::npos);
  }
}
