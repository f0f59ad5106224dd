// Fidelity report arithmetic, on hand-made runs whose
// numbers are checked by hand: per-token |Δ log-prob| and the documents whose
// acc / acc_norm / exact_match / generated text differ between two runs; and
// decode_logprobs (teacher-forced through the cache) against cache-free scoring.
#include <doctest/doctest.h>

#include <cmath>
#include <span>
#include <vector>

#include "eval/fidelity.hpp"
#include "context_support.hpp"
#include "eval/metrics.hpp"
#include "test_support.hpp"
#include "util/error.hpp"

using namespace kveval;
using namespace kveval::eval;

namespace {

Doc mc_doc(std::vector<std::string> choices, int gold) {
  Doc d;
  d.choices = std::move(choices);
  d.gold = gold;
  return d;
}

DocOutcome mc(std::vector<double> lp) {
  DocOutcome o;
  o.ok = true;
  o.choice_logprobs = std::move(lp);
  return o;
}

DocOutcome gen(const std::string& text) {
  DocOutcome o;
  o.ok = true;
  o.output = text;
  return o;
}

}  // namespace

TEST_SUITE("eval.fidelity") {
  TEST_CASE("token deltas: max and mean |a - b| over every token of every request") {
    const std::vector<std::vector<double>> a = {{-1.0, -2.0}, {-0.5}, {}};
    const std::vector<std::vector<double>> b = {{-1.25, -2.0}, {-0.125}, {}};
    const TokenDeltas d = token_deltas(a, b);
    CHECK(d.requests == 3);
    CHECK(d.tokens == 3);
    CHECK(d.max_abs == 0.375);                  // |-0.5 - -0.125|
    CHECK(d.mean_abs == (0.25 + 0.0 + 0.375) / 3);  // 0.208333...
    const TokenDeltas none = token_deltas(std::vector<std::vector<double>>{}, std::vector<std::vector<double>>{});
    CHECK(none.tokens == 0);
    CHECK(none.mean_abs == 0.0);
    CHECK_THROWS_AS(token_deltas(a, std::vector<std::vector<double>>{{-1.0}, {-0.5}, {}}), ArgumentError);
    CHECK_THROWS_AS(token_deltas(a, std::vector<std::vector<double>>{{-1.0, -2.0}}), ArgumentError);
  }

  TEST_CASE("flips: acc and acc_norm per document, exact_match and greedy text, failed documents skipped") {
    EvalSpec spec;
    TaskSpec mct;
    mct.name = "mc";
    mct.output_type = OutputType::MultipleChoice;
    mct.metric_list = {"acc", "acc_norm"};
    mct.docs = {mc_doc({"aa", "b"}, 0), mc_doc({"x", "y"}, 1), mc_doc({"p", "q"}, 0)};
    TaskSpec gt;
    gt.name = "gen";
    gt.output_type = OutputType::GenerateUntil;
    gt.metric_list = {"exact_match"};
    for (const char* t : {"cat", "dog", "emu", "x"}) {
      Doc d;
      d.target = t;
      d.has_target = true;
      gt.docs.push_back(d);
    }
    spec.tasks = {mct, gt};
    RunResult a, b;
    // doc 0 ("aa"/"b", gold 0): a {-1.0, -1.5}: acc 1, acc_norm (-0.5 vs -1.5) 1;
    //                            b {-1.6, -1.5}: acc 0 (flip),  acc_norm (-0.8 vs -1.5) 1.
    // doc 1 ("x"/"y", gold 1): both runs pick y. doc 2: failed in b, not compared.
    DocOutcome failed;
    a.docs.push_back({mc({-1.0, -1.5}), mc({-2.0, -1.0}), mc({-1.0, -2.0})});
    b.docs.push_back({mc({-1.6, -1.5}), mc({-2.0, -1.1}), failed});
    // exact_match a: 1 0 1 0, b: 1 1 0 0 -> 2 flips; texts differ in docs 1, 2, 3 -> 3 flips.
    a.docs.push_back({gen("cat"), gen("dot"), gen("emu"), gen("y")});
    b.docs.push_back({gen("cat"), gen("dog"), gen("emus"), gen("z")});
    const auto f = metric_flips(spec, a, b);
    REQUIRE(f.size() == 4);
    CHECK((f[0].task == "mc" && f[0].metric == "acc" && f[0].compared == 2 && f[0].flipped == 1));
    CHECK((f[1].task == "mc" && f[1].metric == "acc_norm" && f[1].compared == 2 && f[1].flipped == 0));
    CHECK((f[2].task == "gen" && f[2].metric == "exact_match" && f[2].compared == 4 && f[2].flipped == 2));
    CHECK((f[3].task == "gen" && f[3].metric == "greedy_text" && f[3].compared == 4 && f[3].flipped == 3));
    // runs of another spec are refused
    b.docs.pop_back();
    CHECK_THROWS_AS(metric_flips(spec, a, b), ArgumentError);
  }
  TEST_CASE("decode_logprobs: teacher-forced through the cache, within 1e-4 of cache-free scoring" * kveval::test::needs_model()) {
    Context& c = kveval::test::real_context();
    const ScoreRequest r{{1, 40, 81, 7, 300, 12, 95, 4}, 3};
    const auto want = score(c, std::span<const ScoreRequest>(&r, 1), 1)[0].logprobs;
    const auto got = decode_logprobs(c, r);
    REQUIRE(got.size() == 5);
    REQUIRE(want.size() == got.size());
    for (size_t i = 0; i < got.size(); ++i) CHECK(std::abs(got[i] - want[i]) < 1e-4);
    CHECK(!c.caches_are_setup());  // released after
    CHECK_THROWS_AS(decode_logprobs(c, ScoreRequest{{1, 2}, 2}), ArgumentError);
  }
}
