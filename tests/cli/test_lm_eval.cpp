// `kveval run` on the lm-eval task YAML fixtures (tasks/lm_eval/): a spec
// listing all five, and a YAML given directly as the spec, complete on
// stories260K with their metrics (per filter for the GSM8K-style task).
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "cli_run.hpp"

TEST_SUITE("cli.lm_eval") {
  TEST_CASE("the five lm-eval YAML fixtures run to completion on stories260K" * kveval::test::needs_model()) {
    TempDir d;
    std::string dir = kveval::test::source_dir() + "/tasks/lm_eval";
    const Run r0 = run_kveval(d, "run " + quote(dir + "/all.json") + " --model " + quote(kveval::test::model_path()) +
                                     " --quiet --output " + quote(d.file("results.json")));
    INFO(r0.err);
    REQUIRE(r0.code == 0);
    json r = json::parse(slurp(d.file("results.json")));
    for (const char* t : {"arc_mini", "lambada_mini", "piqa_mini", "truthfulqa_mini"}) {
      CAPTURE(t);
      CHECK(r["results"][t]["acc,none"].is_number());
    }
    CHECK(r["results"]["lambada_mini"]["perplexity,none"].is_number());
    CHECK(r["results"]["gsm8k_mini"]["exact_match,strict-match"].is_number());
    CHECK(r["results"]["gsm8k_mini"]["exact_match,flexible-extract"].is_number());
    CHECK(r["n-samples"]["arc_mini"]["effective"] == 5);
    CHECK(r["configs"]["gsm8k_mini"]["lm_eval_yaml"].get<std::string>().find("gsm8k_mini.yaml") != std::string::npos);
    CHECK(r["configs"]["gsm8k_mini"]["metadata"]["version"] == 3.0);
    CHECK(r["versions"]["gsm8k_mini"] == 3.0);
    CHECK(r0.out.find("exact_match,strict-match") != std::string::npos);
    CHECK(r0.out.find("nan") == std::string::npos);
  }

  TEST_CASE("a YAML given as the spec runs with --model; a refused key is one line, exit 2" * kveval::test::needs_model()) {
    TempDir d;
    std::string dir = kveval::test::source_dir() + "/tasks/lm_eval";
    const Run ok = run_kveval(d, "run " + quote(dir + "/piqa_mini.yaml") + " --model " + quote(kveval::test::model_path()) + " --quiet");
    INFO(ok.err);
    CHECK(ok.code == 0);
    CHECK(ok.out.find("piqa_mini") != std::string::npos);
    std::string bad = d.write("bad.yaml", "task: t\noutput_type: multiple_choice\nprocess_docs: !function utils.process_docs\n");
    const Run r = run_kveval(d, "run " + quote(bad) + " --model " + quote(kveval::test::model_path()));
    const std::string& err = r.err;
    CHECK(r.code == 2);
    std::string msg = bad + ":3: process_docs: " + d.file("utils.py") +
                      ": not found (lm-eval imports 'utils' from the YAML's folder)\n";
    CHECK(err.size() >= msg.size());
    CHECK(err.compare(err.size() - std::min(err.size(), msg.size()), msg.size(), msg) == 0);
    CHECK(std::count(err.begin(), err.end(), '\n') == 1);
  }
}
