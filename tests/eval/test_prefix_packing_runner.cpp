// The log-likelihood phase with prefix packing (RunOptions::pack_prefixes)
// against the same run without it, on the real model (stories260K): lm-eval's
// _encode_pair splits (a choice that merges with the context's last characters,
// an empty-looking " " choice, a choice that is a prefix of another, identical
// choices), a context longer than max_length (left-truncated, then packed like
// the others), and the phase counters.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include "context_support.hpp"
#include "eval/requests.hpp"
#include "eval/runner.hpp"
#include "test_support.hpp"

using namespace kveval;
using namespace kveval::eval;
using nlohmann::json;

namespace {

EvalSpec packing_spec(int batch_size) {
  std::string long_ctx;
  for (int k = 0; k < 12; ++k) long_ctx += "Lily and Tom went to the park to play. ";
  json docs = {
      // "the" + "re" / "the" + "m": the continuation joins the context's last word when encoded whole
      {{"q", "Once upon a time, the"}, {"c", {"re", " cat", "m", " ", " cat", " cat sat"}}, {"g", 1}},
      {{"q", "The dog ran "}, {"c", {"fast", " fast", "far away"}}, {"g", 0}},
      {{"q", long_ctx}, {"c", {" ball", " big red ball"}}, {"g", 0}},
  };
  json mc = {{"name", "mc"},         {"output_type", "multiple_choice"}, {"docs", docs},
             {"doc_to_text", "q"},   {"doc_to_choice", "c"},             {"doc_to_target", "g"},
             {"target_delimiter", ""}};
  json spec = {{"batch_size", batch_size}, {"max_length", 64}, {"tasks", {mc}}};
  spec["model"] = kveval::test::model_path();
  return parse_spec(spec, "test.json", ".");
}

/// Tokens computed and logit rows of `requests` scored as tries in rows of at
/// most `budget` tokens, counted with sets of prefixes: the requests sorted by
/// their tokens, a row taking the next while its distinct prefixes of the
/// requests' tokens [0, size - 1) stay within budget; a logit row per distinct
/// prefix tokens[0, p) that predicts a scored token p.
std::pair<uint64_t, uint64_t> trie_counts(const std::vector<Request>& requests, size_t budget) {
  std::vector<std::pair<std::vector<int32_t>, int>> reqs;  // tokens, score_from
  for (const Request& r : requests)
    if (r.error.empty()) reqs.emplace_back(r.score.tokens, r.score.score_from);
  std::sort(reqs.begin(), reqs.end());
  uint64_t tokens = 0, logits = 0;
  std::set<std::vector<int32_t>> row, scoring;
  auto close = [&] {
    tokens += row.size();
    logits += scoring.size();
    row.clear();
    scoring.clear();
  };
  for (const auto& [seq, from] : reqs) {
    std::set<std::vector<int32_t>> more = row;
    for (size_t n = 1; n < seq.size(); ++n) more.emplace(seq.begin(), seq.begin() + long(n));
    if (!row.empty() && more.size() > budget) {
      close();
      for (size_t n = 1; n < seq.size(); ++n) row.emplace(seq.begin(), seq.begin() + long(n));
    } else {
      row = std::move(more);
    }
    for (size_t p = size_t(from); p < seq.size(); ++p) scoring.emplace(seq.begin(), seq.begin() + long(p));
  }
  close();
  return {tokens, logits};
}

}  // namespace

TEST_SUITE("eval.prefix_packing_runner") {
  TEST_CASE("packed runs give the unpacked log-likelihoods and is_greedy, bit for bit, at any batch size" *
            kveval::test::needs_model()) {
    const EvalSpec s1 = packing_spec(1);
    RunOptions off;
    off.pack_prefixes = false;
    const RunResult plain = run_eval(s1, kveval::test::real_context(), off);
    CHECK(plain.ll_tokens_computed == plain.ll_tokens_requested);
    bool truncated = false;
    for (const Request& r : plain.requests) truncated |= r.truncated_tokens > 0;
    CHECK(truncated);  // the long context is left-truncated to max_length
    for (int b : {1, 4}) {
      CAPTURE(b);
      const RunResult packed = run_eval(packing_spec(b), kveval::test::real_context());
      REQUIRE(packed.outcomes.size() == plain.outcomes.size());
      for (size_t i = 0; i < plain.outcomes.size(); ++i) {
        CAPTURE(i);
        CHECK(packed.outcomes[i].ran == plain.outcomes[i].ran);
        CHECK(packed.outcomes[i].logprob == plain.outcomes[i].logprob);
        CHECK(packed.outcomes[i].is_greedy == plain.outcomes[i].is_greedy);
      }
      CHECK(packed.ll_tokens_requested == plain.ll_tokens_requested);
      // Tokens computed and logit rows: the tries' (rows of at most max_length = 64 tokens);
      // unpacked: every request's own tokens and every scored token.
      const auto [tokens, logits] = trie_counts(plain.requests, 64);
      CHECK(packed.ll_tokens_computed == tokens);
      CHECK(packed.ll_logit_rows == logits);
      CHECK(tokens < plain.ll_tokens_computed);
      int64_t scored = 0;
      for (const RequestOutcome& o : packed.outcomes) scored += o.tokens;
      CHECK(plain.ll_logit_rows == static_cast<uint64_t>(scored));
      CHECK(logits < static_cast<uint64_t>(scored));
    }
  }
}
