#include <doctest/doctest.h>

#include <numeric>

#include "eval/requests.hpp"
#include "util/error.hpp"

using namespace kveval;
using namespace kveval::eval;

namespace {

// A hand-made SentencePiece vocabulary: ids 3.. are pieces; higher score merges first.
//   0 <unk> 1 <s> 2 </s> 3 ▁ 4 a 5 b 6 c 7 ▁a 8 ▁b 9 ▁c 10 ab 11 ▁ab
const Tokenizer& tiny() {
  static const Tokenizer tok(
      {"<unk>", "<s>", "</s>", "\xE2\x96\x81", "a", "b", "c", "\xE2\x96\x81" "a", "\xE2\x96\x81" "b",
       "\xE2\x96\x81" "c", "ab", "\xE2\x96\x81" "ab"},
      {0, 0, 0, -1, -2, -2, -2, -3, -3, -3, -4, -5}, {2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1}, 1, 2, 0, true);
  return tok;
}

std::vector<int32_t> iota_seq(int n) {
  std::vector<int32_t> s(static_cast<size_t>(n));
  std::iota(s.begin(), s.end(), 100);
  s[0] = 1;  // BOS
  return s;
}

}  // namespace

TEST_SUITE("eval.requests") {
  TEST_CASE("the hand-made tokenizer merges as expected") {
    CHECK(tiny().encode("a b", true) == std::vector<int32_t>{1, 7, 8});
    CHECK(tiny().encode("ab", true) == std::vector<int32_t>{1, 11});
    CHECK(tiny().encode("a ", true) == std::vector<int32_t>{1, 7, 3});
  }

  TEST_CASE("encode_pair moves trailing spaces of the context to the continuation") {
    EncodedPair p = encode_pair(tiny(), "a ", "b");
    CHECK(p.context == std::vector<int32_t>{1, 7});
    CHECK(p.continuation == std::vector<int32_t>{8});
    EncodedPair q = encode_pair(tiny(), "a", " b");
    CHECK(q.context == p.context);
    CHECK(q.continuation == p.continuation);
    // empty context: the context is BOS alone (lm-eval's prefix token)
    EncodedPair e = encode_pair(tiny(), "", "a b");
    CHECK(e.context == std::vector<int32_t>{1});
    CHECK(e.continuation == std::vector<int32_t>{7, 8});
  }

  TEST_CASE("a continuation merged into the context's last token has zero tokens") {
    EncodedPair p = encode_pair(tiny(), "a", "b");  // whole = [BOS, ▁ab], context = [BOS, ▁a]
    CHECK(p.continuation.empty());
  }

  TEST_CASE("rolling windows score every position after BOS exactly once") {
    for (int n : {2, 3, 7, 10, 33}) {
      for (int w : {2, 3, 4, 5, 8, 32, 64}) {
        auto seq = iota_seq(n);
        auto wins = rolling_windows(seq, w);
        std::vector<int> scored(static_cast<size_t>(n), 0);
        for (const auto& r : wins) {
          REQUIRE(r.tokens.size() <= static_cast<size_t>(w));
          REQUIRE(r.score_from >= 1);
          // the window is a contiguous slice of seq; find where it starts
          size_t start = static_cast<size_t>(r.tokens[0] == 1 ? 0 : r.tokens[0] - 100);
          for (size_t k = 0; k < r.tokens.size(); ++k) REQUIRE(r.tokens[k] == seq[start + k]);
          for (size_t k = static_cast<size_t>(r.score_from); k < r.tokens.size(); ++k) ++scored[start + k];
          // as much left context as fits: every window but a first short one is full
          if (&r != &wins.front()) CHECK(r.tokens.size() == static_cast<size_t>(w));
        }
        CHECK(scored[0] == 0);
        for (int i = 1; i < n; ++i) CHECK(scored[static_cast<size_t>(i)] == 1);
        if (w >= n) CHECK(wins.size() == 1);
      }
    }
    CHECK(rolling_windows(iota_seq(1), 4).empty());
    CHECK_THROWS_AS(rolling_windows(iota_seq(5), 1), ArgumentError);
  }

  TEST_CASE("rolling windows match lm-eval's get_rolling_token_windows for N=10, W=4") {
    // lm-eval (context_len=1, max_seq_len=3) on tokens t1..t9 gives inputs [BOS t1 t2], [t3 t4 t5], [t6 t7 t8]
    // predicting [t1..t3], [t4..t6], [t7..t9]; a kveval window is that input plus its last predicted token.
    auto wins = rolling_windows(iota_seq(10), 4);
    REQUIRE(wins.size() == 3);
    CHECK(wins[0].tokens == std::vector<int32_t>{1, 101, 102, 103});
    CHECK(wins[0].score_from == 1);
    CHECK(wins[1].tokens == std::vector<int32_t>{103, 104, 105, 106});
    CHECK(wins[1].score_from == 1);
    CHECK(wins[2].tokens == std::vector<int32_t>{106, 107, 108, 109});
    CHECK(wins[2].score_from == 1);
  }

  TEST_CASE("build_requests: fan-out, per-request errors, truncation, canonical order") {
    nlohmann::json j = nlohmann::json::parse(R"({"model": "m", "tasks": [
      {"name": "zgen", "output_type": "generate_until", "docs": [{"p": "a b a b a b a b"}, {"p": "a"}], "doc_to_text": "p",
       "generation_kwargs": {"until": ["c"], "max_gen_toks": 3}},
      {"name": "mc", "output_type": "multiple_choice", "docs": [{"q": "a", "g": 1}], "doc_to_text": "q",
       "doc_to_choice": ["a", "b", "c b"], "doc_to_target": "g"},
      {"name": "ll", "output_type": "loglikelihood", "docs": [{"q": "a", "t": "b"}], "doc_to_text": "q", "doc_to_target": "t",
       "target_delimiter": ""},
      {"name": "roll", "output_type": "loglikelihood_rolling", "docs": [{"t": ""}, {"t": "a b c a b c"}], "doc_to_target": "t"}]})");
    EvalSpec s = parse_spec(j, "s.json", ".");
    std::vector<std::string> warnings;
    auto reqs = build_requests(s, tiny(), 6, &warnings);
    // 2 generate + 3 choices + 1 loglikelihood + 1 error (empty doc) + 2 windows (7 tokens, W=6)
    REQUIRE(reqs.size() == 9);
    CHECK(reqs[0].kind == RequestKind::Generate);
    CHECK(reqs[0].prompt.size() == 3);  // room = 6 - 3: BOS + last 2 tokens
    CHECK(reqs[0].prompt[0] == 1);
    CHECK(reqs[0].truncated_tokens == 6);
    CHECK(reqs[0].until == std::vector<std::string>{"c"});
    REQUIRE(warnings.size() == 1);
    CHECK(warnings[0].find("task zgen: 1 request left-truncated") == 0);
    CHECK(reqs[2].index == 0);
    CHECK(reqs[4].score.tokens == std::vector<int32_t>{1, 7, 9, 8});  // "a" + " c b"
    CHECK(reqs[4].score.score_from == 2);
    CHECK(!reqs[5].error.empty());  // "a" + "b" merges into ▁ab: zero continuation tokens
    CHECK(reqs[5].error.find("zero tokens") != std::string::npos);
    CHECK(reqs[6].error.find("empty document") != std::string::npos);
    CHECK(reqs[7].kind == RequestKind::RollingWindow);
    CHECK(reqs[7].score.tokens.size() == 6);
    CHECK(reqs[8].score.tokens.size() == 6);
    CHECK(reqs[7].n_continuation_tokens + reqs[8].n_continuation_tokens == 6);

    auto order = canonical_score_order(s, reqs);
    // runnable scoring requests only: 3 choices + 2 windows
    REQUIRE(order.size() == 5);
    for (size_t k = 1; k < order.size(); ++k)
      CHECK(reqs[order[k - 1]].score.tokens.size() >= reqs[order[k]].score.tokens.size());
    // same length 6: "roll" windows; ties broken by task name, doc, index
    CHECK(order[0] == 7);
    CHECK(order[1] == 8);
    auto gorder = canonical_generate_order(s, reqs);
    CHECK(gorder == std::vector<size_t>{0, 1});
  }

  TEST_CASE("a continuation too long for max_length: a multiple-choice request names its choice") {
    nlohmann::json j = nlohmann::json::parse(R"({"model": "m", "tasks": [
      {"name": "mc", "output_type": "multiple_choice", "docs": [{"q": "a", "g": 1}], "doc_to_text": "q",
       "doc_to_choice": ["a", "c b"], "doc_to_target": "g"},
      {"name": "ll", "output_type": "loglikelihood", "docs": [{"q": "a", "t": "c b"}], "doc_to_text": "q", "doc_to_target": "t"}]})");
    EvalSpec s = parse_spec(j, "s.json", ".");
    auto reqs = build_requests(s, tiny(), 2, nullptr);  // room for 1 continuation token; " c b" has 2
    REQUIRE(reqs.size() == 3);
    CHECK(reqs[0].error.empty());
    CHECK(reqs[1].error == "s.json: tasks[0].docs[0]: choice 1: continuation of 2 tokens does not fit max_length 2");
    CHECK(reqs[2].error == "s.json: tasks[1].docs[0]: continuation of 2 tokens does not fit max_length 2");
  }

  TEST_CASE("max_gen_toks must leave room for BOS") {
    nlohmann::json j = nlohmann::json::parse(R"({"model": "m", "tasks": [
      {"name": "g", "output_type": "generate_until", "docs": [{"p": "a"}], "doc_to_text": "p",
       "generation_kwargs": {"max_gen_toks": 8}}]})");
    EvalSpec s = parse_spec(j, "s.json", ".");
    CHECK_THROWS_WITH_AS(build_requests(s, tiny(), 8, nullptr),
                         "s.json: tasks[0].generation_kwargs.max_gen_toks: 8 tokens do not fit max_length 8 (the prompt needs at least BOS)",
                         SpecError);
    CHECK_NOTHROW(build_requests(s, tiny(), 9, nullptr));
  }
}

TEST_SUITE("eval.requests") {
  TEST_CASE("plan_requests: kept ids bounded by the text and max_length, the largest encode call, hand-computed") {
    EvalSpec spec;
    TaskSpec ll;
    ll.output_type = OutputType::Loglikelihood;
    ll.target_delimiter = " ";
    Doc a;
    a.context = std::string(100, 'c');  // 100 + 1 + 3 = 104 bytes -> at most 106 ids, kept min(106, 32) = 32
    a.target = "dog";
    ll.docs.push_back(a);
    TaskSpec mc;
    mc.output_type = OutputType::MultipleChoice;
    mc.target_delimiter = " ";
    Doc b;
    b.context = "Q";  // "Q" + " " + "yes" = 5 -> 7 ids; "Q" + " " + "no" = 4 -> 6 ids
    b.choices = {"yes", "no"};
    mc.docs.push_back(b);
    TaskSpec roll;
    roll.output_type = OutputType::LoglikelihoodRolling;
    roll.rolling_method = RollingMethod::LlamaCpp;
    Doc c;
    c.target = std::string(10, 't');  // 12 ids, windows at most twice: 24; joined text 10 + 2 = 12 -> 14 ids
    roll.docs.push_back(c);
    TaskSpec gen;
    gen.output_type = OutputType::GenerateUntil;
    Doc g;
    g.context = std::string(20, 'p');  // 22 ids
    gen.docs.push_back(g);
    spec.tasks = {ll, mc, roll, gen};
    const RequestsPlan p = plan_requests(spec, 32);
    const uint64_t ids = 32 + 7 + 6 + 24 + 14 + 22, records = 6;
    CHECK(p.token_ids == ids * 4 + records * sizeof(Request));
    CHECK(p.longest_text == 104);
    CHECK(p.tokenizer == 104 * 64);
  }
}
