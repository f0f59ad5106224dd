// Test "mc" of kveval bench: the synthetic multiple-choice workload's token
// counts (hand-computed), score() over it packed and unpacked (the same bits,
// the counted tokens and logit rows), and `kveval bench --tests mc`'s rows
// (nothing here is timed).
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "bench/run.hpp"
#include "context_support.hpp"
#include "test_support.hpp"

using namespace kveval;
using namespace kveval::bench;
namespace fs = std::filesystem;

namespace {

/// 3 documents, a prefix of 5, own contexts of 4, 3 choices of 2 tokens.
constexpr McShape kShape{3, 5, 4, 3, 2};

/// Runs `cmd` through the shell with stdout to a scratch file; returns the exit status.
int run(const std::string& cmd, std::string& out) {
  static const test::ScratchDir dir("bench_mc");
  const fs::path o = dir.path / "stdout.txt";
  const int rc = std::system((cmd + " > " + o.string() + " 2> " + (dir.path / "stderr.txt").string()).c_str());
  std::ifstream f(o);
  std::stringstream ss;
  ss << f.rdbuf();
  out = ss.str();
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

}  // namespace

TEST_SUITE("bench.mc") {
  TEST_CASE("mc_counts: tokens and logit rows hand-counted, in one row and split") {
    // one row: the prefix once, each document's 4 tokens, each choice's first token; a logits row
    // at each context's end and after each choice's first token
    McCounts c = mc_counts(kShape, 2048);
    CHECK(c.requests == 9);
    CHECK(c.requested == 9 * (5 + 4 + 2 - 1));
    CHECK(c.computed_shared == 5 + 3 * (4 + 3));
    CHECK(c.logit_rows_shared == 3 * (1 + 3));
    CHECK(c.logit_rows_alone == 9 * 2);
    // rows of 12: one document each (5 + 4 + 3 = 12), 36 tokens, 12 logit rows
    c = mc_counts(kShape, 12);
    CHECK(c.computed_shared == 36);
    CHECK(c.logit_rows_shared == 12);
    // rows of 11: 10 + 1 for two choices, the third alone in a row of 10 (its context again):
    // rows 11, 10, 11, 10, 11, 10 = 63 tokens; logit rows 2 + 1 + 2 per row pair, 5 per document
    c = mc_counts(kShape, 11);
    CHECK(c.computed_shared == 63);
    CHECK(c.logit_rows_shared == 15);
  }

  TEST_CASE("mc requests scored packed and unpacked: the same bits, the counted tokens and logit rows" *
            kveval::test::needs_model()) {
    Context& ctx = test::real_context();
    const std::vector<ScoreRequest> reqs = mc_requests(ctx.model(), kShape, 3);
    REQUIRE(reqs.size() == 9);
    for (const ScoreRequest& r : reqs) CHECK(r.tokens.size() == size_t(5 + 4 + 2));
    for (int budget : {2048, 12, 11}) {
      CAPTURE(budget);
      const McCounts n = mc_counts(kShape, budget);
      ContextStats s0 = ctx.stats();
      const auto alone = score(ctx, reqs, 1, {.share_prefixes = false});
      ContextStats s1 = ctx.stats();
      CHECK(s1.tokens_processed - s0.tokens_processed == uint64_t(n.requested));
      CHECK(s1.logit_rows - s0.logit_rows == uint64_t(n.logit_rows_alone));
      const auto packed = score(ctx, reqs, 2, {.row_tokens = budget});
      const ContextStats s2 = ctx.stats();
      CHECK(s2.tokens_processed - s1.tokens_processed == uint64_t(n.computed_shared));
      CHECK(s2.logit_rows - s1.logit_rows == uint64_t(n.logit_rows_shared));
      for (size_t i = 0; i < reqs.size(); ++i) {
        CHECK(packed[i].logprobs == alone[i].logprobs);
        CHECK(packed[i].is_greedy == alone[i].is_greedy);
      }
    }
  }

  TEST_CASE("kveval bench --tests mc reports packed and unpacked rows with their token counts" *
            kveval::test::needs_model()) {
    const char* bin = std::getenv("KVEVAL_BIN");
    std::string out;
    REQUIRE(run(std::string(bin ? bin : "kveval") + " bench -m " + test::model_path() +
                    " -t 1 -b 1,4 -r 2 --tests mc --mc-docs 3 --mc-prefix 5 --mc-context 4 --mc-choices 3"
                    " --mc-choice-tokens 2 --output json",
                out) == 0);
    const auto j = nlohmann::json::parse(out);
    const McCounts n = mc_counts(kShape, 2048);  // the model's context length holds the one row
    int rows = 0;
    for (const auto& r : j["results"]) {
      REQUIRE(r["test"] == "mc");
      ++rows;
      const bool packed = r["name"] == "packed";
      CHECK((packed || r["name"] == "unpacked"));
      CHECK(r["unit"] == "tok/s");
      CHECK(r["median"].get<double>() > 0);
      CHECK(r["requests"] == 9);
      CHECK(r["tokens_requested"] == n.requested);
      CHECK(r["tokens_computed"] == (packed ? n.computed_shared : n.requested));
      CHECK(r["logit_rows"] == (packed ? n.logit_rows_shared : n.logit_rows_alone));
      // both rates are medians over the repetitions of tokens / that repetition's time (-r 2: the mean of two)
      const double per_token = r["tokens_computed"].get<double>() / r["tokens_requested"].get<double>();
      CHECK(r["computed_tok_s"].get<double>() == doctest::Approx(r["median"].get<double>() * per_token).epsilon(1e-12));
    }
    CHECK(rows == 4);  // batches 1 and 4, packed and unpacked
    CHECK(j["meta"]["options"]["mc"]["docs"] == 3);
  }
}
