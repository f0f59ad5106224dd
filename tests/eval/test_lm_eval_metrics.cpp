// lm-eval's metric conventions: the bootstrap stderr of perplexity to the last
// bit (CPython 3.11 values), generate_until stopping at the fewshot_delimiter
// without `until`, and exact_match on the strings as they are.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "eval/metrics.hpp"
#include "eval/spec.hpp"

using namespace kveval::eval;
using nlohmann::json;

TEST_SUITE("eval.lm_eval_metrics") {
  TEST_CASE("the stderr of perplexity is lm-eval's bootstrap, to the last bit (CPython 3.11 values)") {
    // bootstrap_stderr(perplexity, xs, iters) computed by /usr/bin/python3 with lm-eval's code
    const std::vector<double> xs = {-1.5, -2.25, -0.75, -3.0, -1.0};
    CHECK(*bootstrap_stderr_perplexity(xs, 1000) == 2.326463526139502);
    CHECK(*bootstrap_stderr_perplexity(xs, 2500) == 2.3159588745660904);
    CHECK(*bootstrap_stderr_perplexity(xs, 100000) == 2.2983589919012326);
    // 10^6 resamples are kept for the second pass; 1001000 are drawn again instead (same values, no 8 MB)
    CHECK(*bootstrap_stderr_perplexity(xs, 1000999) == 2.301864444987364);
    CHECK(*bootstrap_stderr_perplexity(xs, 1001000) == 2.3019749246654766);
    CHECK(!bootstrap_stderr_perplexity(xs, 1).has_value());  // one resample: no standard deviation
    CHECK(!bootstrap_stderr_perplexity(xs, 0).has_value());
    CHECK(!bootstrap_stderr_perplexity({}, 1000).has_value());
  }

  TEST_CASE("generate_until without until stops at the fewshot_delimiter (lm-eval's default)") {
    json task = {{"name", "g"}, {"output_type", "generate_until"}, {"docs", json::array({{{"p", "x"}}})},
                 {"doc_to_text", "p"}, {"fewshot_delimiter", "\n##\n"}};
    EvalSpec s = parse_spec({{"model", "m.gguf"}, {"tasks", json::array({task})}}, "t.json", ".");
    CHECK(s.tasks[0].generation_kwargs.until == std::vector<std::string>{"\n##\n"});
    task["generation_kwargs"] = {{"max_gen_toks", 4}};
    s = parse_spec({{"model", "m.gguf"}, {"tasks", json::array({task})}}, "t.json", ".");
    CHECK(s.tasks[0].generation_kwargs.until == std::vector<std::string>{"\n##\n"});
    task["generation_kwargs"] = {{"until", json::array({"."})}};
    s = parse_spec({{"model", "m.gguf"}, {"tasks", json::array({task})}}, "t.json", ".");
    CHECK(s.tasks[0].generation_kwargs.until == std::vector<std::string>{"."});
  }

  TEST_CASE("exact_match compares the strings as they are (no whitespace stripping, as lm-eval)") {
    TaskSpec t;
    t.name = "g";
    t.output_type = OutputType::GenerateUntil;
    t.metric_list = {"exact_match"};
    Doc d;
    d.target = "42";
    d.has_target = true;
    t.docs = {d, d};
    DocOutcome a, b;
    a.ok = b.ok = true;
    a.output = "42";
    b.output = " 42";
    auto ms = compute_metrics(t, std::vector<DocOutcome>{a, b});
    REQUIRE(ms.size() == 1);
    CHECK(*ms[0].value == 0.5);
    auto none = compute_metrics(t, std::vector<DocOutcome>{a, b}, 0);
    CHECK(!none[0].stderr_.has_value());  // bootstrap_iters 0: lm-eval computes no stderr
  }
}
