// Distributed runs without MPI: the cost balance, the rank-report format, and
// ranks simulated one after another in this process (rank 0 last, receiving
// the reports the others "sent"), whose results must equal a one-process run.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <limits>

#include "eval/report.hpp"
#include "eval/runner.hpp"
#include "model/context.hpp"
#include "eval/shard.hpp"
#include "test_support.hpp"
#include "util/error.hpp"

using namespace kveval;
using namespace kveval::eval;
using nlohmann::json;

TEST_SUITE("eval.shard") {
  TEST_CASE("balance_by_cost: longest first to the least-loaded rank (hand-computed)") {
    // costs 7,5,4,3,1 on 2 ranks: 7->r0, 5->r1, 4->r1 (5 < 7), 3->r0 (7 < 9), 1->r1 (10 > 9)
    std::vector<int> o = balance_by_cost({4, 7, 1, 5, 3}, 2);
    CHECK(o == std::vector<int>{1, 0, 1, 1, 0});
    // ties: equal costs go round-robin, index order
    CHECK(balance_by_cost({1, 1, 1, 1, 1}, 3) == std::vector<int>{0, 1, 2, 0, 1});
    // one rank owns everything; no items is fine
    CHECK(balance_by_cost({3, 2}, 1) == std::vector<int>{0, 0});
    CHECK(balance_by_cost({}, 4).empty());
    CHECK_THROWS_AS(balance_by_cost({1}, 0), ArgumentError);
    CHECK_THROWS_AS(balance_by_cost({std::nan("")}, 2), ArgumentError);
    CHECK_THROWS_AS(balance_by_cost({-1}, 2), ArgumentError);
  }

  TEST_CASE("forward_cost: products linear, attention quadratic in positions") {
    // P = 1000 weights, 2 layers of width 8: 2*1000*n + 2*2*8*n^2
    CHECK(forward_cost(10, 1000, 2, 8) == doctest::Approx(2 * 1000 * 10 + 32 * 100));
    CHECK(forward_cost(0, 1000, 2, 8) == 0);
    CHECK(forward_cost(-3, 1000, 2, 8) == 0);
  }

  TEST_CASE("assign_requests balances tokens, not counts, and keeps failed requests on rank 0") {
    std::vector<Request> reqs(5);
    for (int i = 0; i < 4; ++i) reqs[static_cast<size_t>(i)].score.tokens.assign(i == 0 ? 301 : 101, 1);
    reqs[4].error = "empty continuation";
    reqs[4].score.tokens.assign(1000, 1);
    // no attention term: costs 300, 100, 100, 100 -> the long one alone on one rank
    std::vector<int> o = assign_requests(reqs, 2, 1.0, 1, 0);
    CHECK(o[0] == 0);
    CHECK(o[1] == 1);
    CHECK(o[2] == 1);
    CHECK(o[3] == 1);
    CHECK(o[4] == 0);
  }

  TEST_CASE("rank reports round-trip exactly (doubles by their bits) and reject corrupt buffers") {
    RankReport r;
    RequestOutcome a;
    a.ran = true;
    a.logprob = -0.0;
    a.is_greedy = true;
    a.tokens = 7;
    RequestOutcome b;
    b.ran = true;
    b.logprob = std::nextafter(-12.5, 0.0);
    b.logprob_sq = 78.125;
    b.tokens = 3;
    b.output_ids = {5, -1, 2147483647};
    b.output = std::string("a\0b\xff", 4);
    b.stop_reason = "until";
    b.error = "non-finite logits";
    r.outcomes = {{3, a}, {9, b}, {11, RequestOutcome{}}};
    r.phases = {{"loglikelihood", 0.125, 42}, {"decode", 1e-9, 0}};
    r.ll_forward_calls = 5;
    r.ll_forward_with_cache_setup = 1;
    r.ll_forward_cached = 2;
    r.cache_bytes_setup = 123456789012ULL;
    std::string bytes = encode_rank_report(r);
    RankReport d = decode_rank_report(bytes);
    REQUIRE(d.outcomes.size() == 3);
    CHECK(d.outcomes[0].first == 3);
    CHECK(std::signbit(d.outcomes[0].second.logprob));
    CHECK(d.outcomes[0].second.is_greedy);
    CHECK(d.outcomes[1].second.logprob == b.logprob);
    CHECK(d.outcomes[1].second.logprob_sq == 78.125);
    CHECK(d.outcomes[1].second.output_ids == b.output_ids);
    CHECK(d.outcomes[1].second.output == b.output);
    CHECK(d.outcomes[1].second.stop_reason == "until");
    CHECK(d.outcomes[1].second.error == "non-finite logits");
    CHECK(d.outcomes[0].second.error.empty());
    CHECK_FALSE(d.outcomes[2].second.ran);
    REQUIRE(d.phases.size() == 2);
    CHECK(d.phases[0].name == "loglikelihood");
    CHECK(d.phases[0].seconds == 0.125);
    CHECK(d.phases[0].tokens == 42);
    CHECK(d.ll_forward_calls == 5);
    CHECK(d.ll_forward_with_cache_setup == 1);
    CHECK(d.ll_forward_cached == 2);
    CHECK(d.cache_bytes_setup == 123456789012ULL);
    for (size_t cut : {size_t{0}, size_t{7}, size_t{8}, bytes.size() / 2, bytes.size() - 1})
      CHECK_THROWS_AS(decode_rank_report(bytes.substr(0, cut)), Error);
    CHECK_THROWS_AS(decode_rank_report(bytes + "x"), Error);
    std::string huge = bytes;
    huge[8] = '\xff';  // outcome count far beyond the buffer
    CHECK_THROWS_AS(decode_rank_report(huge), Error);
  }

  TEST_CASE("2 and 3 simulated ranks give the one-process metrics and samples, byte for byte" * kveval::test::needs_model()) {
    const std::string model_path = kveval::test::model_path();
    if (!std::filesystem::exists(model_path)) {
      MESSAGE("skipped: model not found at " << model_path << " (run scripts/fetch-model.sh)");
      return;
    }
    std::unique_ptr<Model> model = Model::load(model_path, ModelOptions{1});
    Context ctx(*model);
    EvalSpec spec = load_spec(kveval::test::source_dir() + "/tasks/demo.json", model_path);
    RunResult single = run_eval(spec, ctx);
    const nlohmann::ordered_json single_results = results_json(spec, single, "");
    std::string single_samples;
    for (const auto& s : sample_records(spec, single)) single_samples += s.dump() + "\n";

    for (int size : {2, 3}) {
      CAPTURE(size);
      std::vector<std::string> sent(static_cast<size_t>(size));
      // ranks size-1 .. 1 run first and "send" their reports; rank 0 receives them
      for (int rank = size - 1; rank >= 0; --rank) {
        RunOptions o;
        o.shard.rank = rank;
        o.shard.size = size;
        o.shard.gather = [&sent, rank](const std::string& mine) {
          sent[static_cast<size_t>(rank)] = mine;
          return rank == 0 ? sent : std::vector<std::string>{};
        };
        RunResult r = run_eval(spec, ctx, o);
        CHECK(r.rank == rank);
        CHECK(r.n_ranks == size);
        if (rank != 0) {
          CHECK_FALSE(r.is_root());
          CHECK(r.metrics.empty());
          continue;
        }
        REQUIRE(r.is_root());
        nlohmann::ordered_json jr = results_json(spec, r, "");
        CHECK(jr["results"] == single_results["results"]);
        CHECK(jr["n-samples"] == single_results["n-samples"]);
        CHECK(jr["kveval"]["request_errors"] == single_results["kveval"]["request_errors"]);
        std::string samples;
        for (const auto& s : sample_records(spec, r)) samples += s.dump() + "\n";
        CHECK(samples == single_samples);
        // every rank's phases, and the per-phase figures of the results file
        REQUIRE(r.rank_phases.size() == static_cast<size_t>(size));
        REQUIRE(jr["kveval"].contains("distributed"));
        CHECK(jr["kveval"]["distributed"]["ranks"] == size);
        // tokens of the work phases add up to the one-process figures; replicated phases count once
        for (const auto& name : {"loglikelihood", "prefill", "decode", "requests"}) {
          int64_t a = 0, b = 0;
          for (const auto& p : r.phases) if (p.name == name) a = p.tokens;
          for (const auto& p : single.phases) if (p.name == name) b = p.tokens;
          CHECK_MESSAGE(a == b, name);
        }
        CHECK(r.ll_forward_with_cache_setup == 0);
        CHECK(r.ll_forward_cached == 0);
        // each scoring request ran on exactly one rank: the ranks' loglikelihood tokens sum to the total
        int64_t ll_sum = 0;
        for (const auto& ph : r.rank_phases)
          for (const auto& p : ph) if (p.name == "loglikelihood") ll_sum += p.tokens;
        int64_t ll_single = 0;
        for (const auto& p : single.phases) if (p.name == "loglikelihood") ll_single = p.tokens;
        CHECK(ll_sum == ll_single);
      }
    }
  }

  TEST_CASE("an invalid shard is refused" * kveval::test::needs_model()) {
    const std::string model_path = kveval::test::model_path();
    if (!std::filesystem::exists(model_path)) {
      MESSAGE("skipped: model not found at " << model_path);
      return;
    }
    std::unique_ptr<Model> model = Model::load(model_path, ModelOptions{1});
    Context ctx(*model);
    EvalSpec spec = load_spec(kveval::test::source_dir() + "/tasks/demo.json", model_path);
    RunOptions o;
    o.shard.rank = 2;
    o.shard.size = 2;
    CHECK_THROWS_AS(run_eval(spec, ctx, o), ArgumentError);
    o.shard.rank = 1;  // no gather function
    CHECK_THROWS_AS(run_eval(spec, ctx, o), ArgumentError);
  }
}
