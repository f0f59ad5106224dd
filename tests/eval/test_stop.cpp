// Where generation stops, counted in tokens: for stop strings cut from the
// reference greedy continuation (its ids and their pieces come from the
// reference file, not from a run), the runner must generate exactly up to the
// token that completes the stop string, cut the text right before it, and
// report stop_reason "until"; a stop string at the very start of the output
// leaves an empty output; EOS (a copy of the model whose EOS is ".") stops
// with "eos" after the first sentence.
#include <doctest/doctest.h>

#include <algorithm>

#include "eval/runner.hpp"
#include "context_support.hpp"
#include "eval_test_util.hpp"
#include "gguf_copy.hpp"
#include "test_support.hpp"

using kveval::test::gen_task;
using kveval::test::real_context;
using namespace kveval;
using namespace kveval::eval;
using nlohmann::json;

namespace {

/// The reference greedy case for `prompt`: its ids and the byte offset where each id's piece ends.
struct RefContinuation {
  std::string prompt, text;
  std::vector<int32_t> ids;
  std::vector<size_t> ends;  ///< ends[k]: bytes of text after token k
};

RefContinuation reference_continuation(const std::string& prompt) {
  for (const auto& g : kveval::test::reference_cases("greedy")) {
    if (g["prompt"] != prompt) continue;
    RefContinuation c{prompt, g["text"], g["ids"].get<std::vector<int32_t>>(), {}};
    std::string acc;
    for (int32_t id : c.ids) {
      acc += real_context().model().tokenizer().token_to_piece(id);
      c.ends.push_back(acc.size());
    }
    REQUIRE(acc == c.text);  // plain ASCII pieces: the pieces concatenate to the text
    return c;
  }
  FAIL("no reference greedy case for prompt '" << prompt << "'");
  return {};
}

/// A stop string and what it must do: stop after `tokens` generated tokens, leave `output`.
struct StopCase {
  std::string stop;
  int tokens;
  std::string output;
};

/// Runs one single-document task per case (in batches of 8, each row with its
/// own until list) on `prompt`, and checks tokens, output and stop_reason.
void check_stops(const std::string& prompt, const std::vector<StopCase>& cases, int max_gen_toks) {
  REQUIRE(!cases.empty());
  json tasks = json::array();
  for (size_t i = 0; i < cases.size(); ++i) tasks.push_back(gen_task("stop" + std::to_string(i), {prompt}, max_gen_toks, {cases[i].stop}));
  json j = {{"model", kveval::test::model_path()}, {"batch_size", 8}, {"max_length", 128}, {"tasks", tasks}};
  EvalSpec s = parse_spec(j, "stops.json", ".");
  RunResult r = run_eval(s, real_context());
  REQUIRE(r.outcomes.size() == cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    CAPTURE(cases[i].stop);
    const RequestOutcome& o = r.outcomes[i];
    CHECK(o.tokens == cases[i].tokens);
    CHECK(o.output_ids.size() == static_cast<size_t>(cases[i].tokens));
    CHECK(o.output == cases[i].output);
    CHECK(o.stop_reason == "until");
  }
}

}  // namespace

TEST_SUITE("eval.stop") {
  TEST_CASE("a stop string ends generation at the token that completes it (1-3 tokens spanned)" * kveval::test::needs_model()) {
    const RefContinuation c = reference_continuation("Once upon a time");
    std::vector<StopCase> cases;
    // Stop strings of 3, 6 and 9 bytes whose last 1 or 2 bytes are the start of token k.
    for (size_t k = 3; k < 30; ++k)
      for (size_t len : {3, 6, 9})
        for (size_t j : {1, 2}) {
          const size_t start_k = c.ends[k - 1];
          if (c.ends[k] - start_k < j) continue;
          const size_t end = start_k + j;
          if (end < len) continue;
          const std::string stop = c.text.substr(end - len, len);
          if (c.text.find(stop) != end - len) continue;  // must first occur here
          cases.push_back({stop, static_cast<int>(k) + 1, c.text.substr(0, end - len)});
        }
    CHECK(cases.size() >= 40);
    check_stops(c.prompt, cases, 40);
  }

  TEST_CASE("a stop string at the very start of the output leaves it empty" * kveval::test::needs_model()) {
    const RefContinuation c = reference_continuation("Once upon a time");
    const RefContinuation t = reference_continuation("Tom had a red ball");
    REQUIRE(c.text.substr(0, 1) == ",");
    REQUIRE(t.text.substr(0, 1) == ".");
    // first byte; the whole first token; the first token and one byte of the second
    check_stops(c.prompt, {{",", 1, ""}, {c.text.substr(0, c.ends[0]), 1, ""}, {c.text.substr(0, c.ends[0] + 1), 2, ""}}, 40);
    const int through4 = static_cast<int>(std::find_if(t.ends.begin(), t.ends.end(), [](size_t e) { return e >= 4; }) -
                                          t.ends.begin()) + 1;  // tokens up to byte 4
    check_stops(t.prompt, {{".", 1, ""}, {t.text.substr(0, 4), through4, ""}}, 40);
  }

  TEST_CASE("a stop string found only in the prompt does not stop; none found runs to max_gen_toks" * kveval::test::needs_model()) {
    const RefContinuation c = reference_continuation("Once upon a time");
    REQUIRE(c.text.substr(0, c.ends[19]).find("upon") == std::string::npos);
    json j = {{"model", kveval::test::model_path()},
              {"max_length", 64},
              {"tasks", {gen_task("prompt_only", {c.prompt}, 20, {"upon"})}}};
    EvalSpec s = parse_spec(j, "stops.json", ".");
    RunResult r = run_eval(s, real_context());
    CHECK(r.outcomes[0].tokens == 20);
    CHECK(r.outcomes[0].output == c.text.substr(0, c.ends[19]));
    CHECK(r.outcomes[0].stop_reason == "max_gen_toks");
  }

  TEST_CASE("EOS stops generation with reason eos after the first sentence" * kveval::test::needs_model()) {
    const kveval::test::ScratchDir dir("stop_eos");
    const std::string path = dir.file("stories260K_eos_dot.gguf");
    const int32_t dot = kveval::test::write_eos_dot_copy(kveval::test::model_path(), path);
    auto eos_model = test::load_context(path, ModelOptions{1});
    REQUIRE(eos_model->model().tokenizer().eos() == dot);
    json tasks = json::array();
    std::vector<RefContinuation> refs;
    for (const std::string prompt : {"Once upon a time", "Tom had a red ball"}) {
      refs.push_back(reference_continuation(prompt));
      tasks.push_back(gen_task("eos" + std::to_string(refs.size()), {prompt}, 40, {}));
    }
    json j = {{"model", path}, {"batch_size", 2}, {"max_length", 128}, {"tasks", tasks}};
    EvalSpec s = parse_spec(j, "eos.json", ".");
    RunResult r = run_eval(s, *eos_model);
    for (size_t i = 0; i < refs.size(); ++i) {
      CAPTURE(refs[i].prompt);
      const auto& ids = refs[i].ids;
      const size_t k = static_cast<size_t>(std::find(ids.begin(), ids.end(), dot) - ids.begin());
      REQUIRE(k < ids.size());
      const RequestOutcome& o = r.outcomes[i];
      CHECK(o.stop_reason == "eos");
      CHECK(o.tokens == static_cast<int>(k) + 1);
      CHECK(o.output_ids == std::vector<int32_t>(ids.begin(), ids.begin() + static_cast<long>(k) + 1));
      const std::string before = refs[i].text.substr(0, k == 0 ? 0 : refs[i].ends[k - 1]);
      CHECK(o.output.rfind(before, 0) == 0);  // the sentence up to the "." (whether the EOS piece is shown or not)
      CHECK(o.output.size() <= before.size() + 1);
    }
  }
}
