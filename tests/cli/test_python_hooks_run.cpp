// `kveval run` on task YAMLs with `!function` hooks (tests/data/lm_eval_hooks/,
// tests/data/winogrande_like/): the metrics process_results returns, a
// multiple-input task's requests and acc as lm-eval logs them, and hook errors
// as one line, exit 2, before the model loads.
#include <doctest/doctest.h>

#include <fstream>
#include <string>
#include <vector>

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

  TEST_CASE("kveval run: a multiple-input task logs one (context, target) pair per option; acc is the argmax's" *
            kveval::test::needs_model()) {
    TempDir d;
    const std::string dir = kveval::test::source_dir() + "/tests/data/winogrande_like";
    const Run r = run_kveval(d, "run " + quote(dir + "/blanks.yaml") + " --model " + quote(kveval::test::model_path()) +
                                    " --quiet --output " + quote(d.file("results.json")) + " --log-samples " +
                                    quote(d.file("samples.jsonl")));
    INFO(r.err);
    REQUIRE(r.code == 0);
    std::ifstream in(d.file("samples.jsonl"));
    double hits = 0;
    int n = 0;
    for (std::string line; std::getline(in, line); ++n) {
      const json s = json::parse(line);
      const std::string sentence = s["doc"]["sentence"];
      const size_t blank = sentence.find('_');
      const int gold = s["doc"]["answer"] == "1" ? 0 : 1;
      std::vector<double> ll;
      for (int k = 0; k < 2; ++k) {
        const json& args = s["arguments"]["gen_args_" + std::to_string(k)];
        const std::string option = s["doc"][k == 0 ? "option1" : "option2"];
        CHECK(args["arg_0"] == sentence.substr(0, blank) + option);  // the option in the blank
        CHECK(args["arg_1"] == " " + s["target"].get<std::string>());  // the rest of the sentence after each
        ll.push_back(s["resps"][k][0][0].get<double>());
      }
      const std::string rest = sentence.substr(blank + 1);
      CHECK(s["target"] == rest.substr(rest.find_first_not_of(' ')));  // utils.after_blank: the rest, stripped
      const double hit = (ll[1] > ll[0] ? 1 : 0) == gold ? 1.0 : 0.0;
      CHECK(s["acc"] == hit);
      hits += hit;
    }
    CHECK(n == 4);
    const json res = json::parse(slurp(d.file("results.json")));
    CHECK(res["results"]["blanks"]["acc,none"].get<double>() == doctest::Approx(hits / 4).epsilon(1e-15));
  }
}
