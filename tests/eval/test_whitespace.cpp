// Unicode whitespace as lm-eval's Python sees it: word
// counts of word_perplexity and the context/continuation split.
// The model values are computed by lm-eval's formulas:
// word_perplexity = exp(-ll / len(re.split(r"\s+", doc))), and the context's
// trailing whitespace (str.rstrip()) moved to the continuation.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "eval/metrics.hpp"
#include "eval/requests.hpp"
#include "eval/runner.hpp"
#include "test_skip.hpp"
#include "test_support.hpp"
#include "context_support.hpp"

using kveval::test::real_context;
using namespace kveval;
using namespace kveval::eval;
using nlohmann::json;

namespace {

const char* kNbsp = "\u00a0";

/// tasks/short_stories.jsonl line 1 with a no-break space (instead of a space) after each sentence.
std::string nbsp_story() {
  return std::string("Once upon a time, there was a little girl named Lily.") + kNbsp +
         "She loved to play outside in the park." + kNbsp + "One day, she saw a big, red ball." + kNbsp +
         "She kicked it and laughed.";
}

EvalSpec spec_of(json j) {
  j["model"] = kveval::test::model_path();
  return parse_spec(j, "test.json", ".");
}

}  // namespace

TEST_SUITE("eval.whitespace") {
  TEST_CASE("count_words uses Python's whitespace") {
    CHECK(count_words(nbsp_story()) == 32);  // len(re.split(r"\s+", story)); ASCII-only counting gives 29
    CHECK(count_words("a\u3000b\u2028c\u0085d") == 4);
    CHECK(count_words("a\u200bb") == 1);  // U+200B is not whitespace in Python
  }

  TEST_CASE("word_perplexity of the no-break-space story on stories260K: 32 words, 75.8586" * kveval::test::needs_model()) {
    EvalSpec s = spec_of({{"tasks",
                           {{{"name", "nbsp"}, {"output_type", "loglikelihood_rolling"},
                             {"docs", {{{"text", nbsp_story()}}}}, {"doc_to_target", "text"}}}}});
    RunResult r = run_eval(s, real_context());
    REQUIRE(r.docs[0][0].ok);
    const double ll = r.docs[0][0].logprob;
    CHECK(ll == doctest::Approx(-138.5239).epsilon(1e-6));
    const MetricValue& wp = r.metrics[0][0];
    REQUIRE(wp.name == "word_perplexity");
    REQUIRE(wp.value.has_value());
    CHECK(std::abs(*wp.value - std::exp(-ll / 32.0)) < 1e-9);  // the formula with 32 words
    CHECK(std::abs(*wp.value - 75.8586) < 5e-5);                // the value (29 words gave 118.7102)
  }

  TEST_CASE("a context ending in U+00A0 moves it to the continuation: -38.3503 over 4 tokens" * kveval::test::needs_model()) {
    // lm-eval: context.rstrip() strips the no-break space; it is scored with "park"
    EvalSpec s = spec_of({{"tasks",
                           {{{"name", "nbsp"}, {"output_type", "loglikelihood"},
                             {"docs", {{{"c", std::string("Lily went to the") + kNbsp}, {"x", "park"}}}},
                             {"doc_to_text", "c"}, {"doc_to_target", "x"}, {"target_delimiter", ""}}}}});
    RunResult r = run_eval(s, real_context());
    REQUIRE(r.outcomes.size() == 1);
    CHECK(r.outcomes[0].tokens == 4);                          // U+00A0 takes tokens of its own (kveval kept it: 3)
    // the value (kveval had -13.6945), printed to 4 decimals: 5e-5 of rounding plus 5e-5 for the
    // engine's float32 summation order and exp (SwiGLU/softmax use a 2-ulp vectorised exp)
    CHECK(std::abs(r.outcomes[0].logprob - (-38.3503)) < 1e-4);
    // the context tokens are those of the stripped context
    EvalSpec plain = spec_of({{"tasks",
                               {{{"name", "plain"}, {"output_type", "loglikelihood"},
                                 {"docs", {{{"c", "Lily went to the"}, {"x", "park"}}}},
                                 {"doc_to_text", "c"}, {"doc_to_target", "x"}, {"target_delimiter", ""}}}}});
    RunResult p = run_eval(plain, real_context());
    CHECK(r.requests[0].n_context_tokens == p.requests[0].n_context_tokens);
    const Tokenizer& tok = real_context().model().tokenizer();
    const std::string ideographic = std::string("Lily went to the \u3000\u2029");
    CHECK(encode_pair(tok, ideographic, "park").context == tok.encode("Lily went to the", true));
    CHECK(encode_pair(tok, "Lily went to the\u200b", "park").context != tok.encode("Lily went to the", true));
  }
}
