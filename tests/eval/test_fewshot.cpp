// Few-shot examples drawn as lm-eval draws them (lm_eval/api/samplers.py
// ContextSampler: random.Random(seed), per document sample(docs, n + 1) minus the
// document itself, [:n]); the expected indices were printed by CPython 3.11:
//   r = random.Random(seed)
//   [[x for x in r.sample(range(6), 3) if x != d][:2] for d in range(6)]
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "eval/spec.hpp"

using namespace kveval::eval;
using nlohmann::json;

namespace {

EvalSpec six_docs(uint64_t seed, const std::string& sampler = "") {
  json docs = json::array();
  for (int i = 0; i < 6; ++i) docs.push_back({{"q", "q" + std::to_string(i)}, {"a", "a" + std::to_string(i)}});
  json task = {{"name", "t"}, {"output_type", "loglikelihood"}, {"docs", docs}, {"doc_to_text", "q"},
               {"doc_to_target", "a"}, {"num_fewshot", 2}};
  if (!sampler.empty()) task["fewshot_config"] = {{"sampler", sampler}};
  return parse_spec({{"model", "m.gguf"}, {"seed", seed}, {"tasks", json::array({task})}}, "test.json", ".");
}

std::string context_of(const std::vector<int>& shots, int doc) {
  std::string s;
  for (int k : shots) s += "q" + std::to_string(k) + " a" + std::to_string(k) + "\n\n";
  return s + "q" + std::to_string(doc);
}

}  // namespace

TEST_SUITE("eval.fewshot") {
  TEST_CASE("the default sampler reproduces lm-eval's indices for seeds 0, 1234 and 42") {
    const std::vector<std::pair<uint64_t, std::vector<std::vector<int>>>> table = {
        {0, {{3, 5}, {2, 4}, {3, 5}, {2, 4}, {1, 2}, {1, 0}}},
        {1234, {{3, 4}, {0, 4}, {5, 0}, {2, 1}, {0, 5}, {4, 3}}},
        {42, {{5, 4}, {5, 2}, {1, 5}, {5, 4}, {3, 0}, {0, 1}}},
    };
    for (const auto& [seed, shots] : table) {
      CAPTURE(seed);
      EvalSpec s = six_docs(seed);
      REQUIRE(s.tasks[0].docs.size() == 6);
      for (int d = 0; d < 6; ++d) {
        CAPTURE(d);
        CHECK(s.tasks[0].docs[static_cast<size_t>(d)].context == context_of(shots[static_cast<size_t>(d)], d));
      }
    }
  }

  TEST_CASE("first_n takes the first documents in order, without the document itself") {
    EvalSpec s = six_docs(0, "first_n");
    CHECK(s.tasks[0].docs[0].context == context_of({1, 2}, 0));
    CHECK(s.tasks[0].docs[1].context == context_of({0, 2}, 1));
    CHECK(s.tasks[0].docs[5].context == context_of({0, 1}, 5));
  }
}
