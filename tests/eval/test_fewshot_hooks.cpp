// `!function` in fewshot_config (tests/data/lm_eval_hooks/fewshot_hooks.yaml and
// extras.py): `samples` called once for the list of examples, and the examples'
// own doc_to_text / doc_to_target hooks. Expected prompts are written by hand
// from extras.py.
#include <doctest/doctest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "eval/spec.hpp"
#include "eval_test_util.hpp"
#include "util/error.hpp"

using kveval::SpecError;
using kveval::eval::EvalSpec;
using nlohmann::json;

namespace {

std::string hooks_dir() { return kveval::test::source_dir() + "/tests/data/lm_eval_hooks"; }

EvalSpec load_yaml(const std::string& yaml, const json& extra = json::object()) {
  json entry = {{"lm_eval_yaml", yaml}};
  entry.update(extra);
  return kveval::eval::parse_spec({{"model", "m.gguf"}, {"tasks", {entry}}}, "spec.json", hooks_dir());
}

}  // namespace

TEST_SUITE("eval.fewshot_hooks") {
  TEST_CASE("samples: !function gives the examples; their doc_to_text and doc_to_target hooks render them") {
    const EvalSpec s = load_yaml("fewshot_hooks.yaml");
    const auto& t = s.tasks[0];
    REQUIRE(t.docs.size() == 4);
    CHECK(t.fewshot_samples.size() == 3);
    // first_n, two examples (the samples are not the test split: no extra draw)
    const std::string shots = "Oslo lies in Norway\n\nBern lies in Switzerland\n\n";
    CHECK(t.docs[0].context == shots + "Paris is in");
    CHECK(t.docs[3].context == shots + "Lima is in");
    // the documents keep the task's own mappings
    CHECK(t.docs[0].target == "France");
  }

  TEST_CASE("num_fewshot past the samples is one line naming the key") {
    try {
      load_yaml("fewshot_hooks.yaml", {{"num_fewshot", 4}});
      FAIL("no SpecError");
    } catch (const SpecError& e) {
      CHECK(std::string(e.what()) == "spec.json: tasks[0].num_fewshot: num_fewshot: 4 examples requested but only 3 available");
    }
  }
}
