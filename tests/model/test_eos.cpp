// EOS on a copy of stories260K whose eos_token_id is the id of ".": greedy
// generation must stop with StopReason::Eos right after the first sentence
// (position taken from the reference greedy ids, not from a run), cached and
// uncached; with stop_at_eos off it runs on to max_gen_toks.
#include <doctest/doctest.h>

#include <algorithm>

#include "gguf_copy.hpp"
#include "model/context.hpp"
#include "model/model.hpp"
#include "test_support.hpp"

using namespace kveval;

namespace {

struct EosModel {
  test::ScratchDir dir{"eos_model"};
  int32_t dot = -1;
  std::unique_ptr<Model> model;
  std::unique_ptr<Context> ctx;
  EosModel() {
    const std::string p = dir.file("stories260K_eos_dot.gguf");
    dot = test::write_eos_dot_copy(test::model_path(), p);
    model = Model::load(p, {.threads = 1});
    ctx = std::make_unique<Context>(*model);
  }
};

EosModel& eos_model() {
  static EosModel m;
  return m;
}

}  // namespace

TEST_SUITE("model.eos") {
  TEST_CASE("greedy generation stops with EOS after the first sentence" * kveval::test::needs_model()) {
    EosModel& em = eos_model();
    Context& m = *em.ctx;
    REQUIRE(m.model().tokenizer().eos() == em.dot);
    for (const auto& g : test::reference_cases("greedy")) {
      const std::string prompt = g["prompt"];
      CAPTURE(prompt);
      const auto ref = g["ids"].get<std::vector<int32_t>>();
      const auto first_dot = std::find(ref.begin(), ref.end(), em.dot);
      REQUIRE(first_dot != ref.end());
      const std::vector<int32_t> want(ref.begin(), first_dot + 1);  // EOS included
      GenerateOptions o;
      o.max_gen_toks = {g["max_gen_toks"].get<int>()};
      const auto p = m.model().tokenizer().encode(prompt, true);
      std::vector<Generation> cached;
      {
        KvCacheScope scope(m, 1, 128);
        cached = generate_greedy(m, {p}, o);
      }
      CHECK(cached[0].reason == StopReason::Eos);
      CHECK(cached[0].ids == want);
      const auto uncached = generate_greedy_uncached(m, {p}, o, 128);
      CHECK(uncached[0].reason == StopReason::Eos);
      CHECK(uncached[0].ids == want);
      // without EOS handling the reference continues past the "."
      o.stop_at_eos = false;
      KvCacheScope scope(m, 1, 128);
      const auto all = generate_greedy(m, {p}, o);
      CHECK(all[0].reason == StopReason::MaxTokens);
      CHECK(all[0].ids == ref);
    }
  }

  TEST_CASE("rows of one batch stop at EOS independently" * kveval::test::needs_model()) {
    EosModel& em = eos_model();
    Context& m = *em.ctx;
    const auto& cases = test::reference_cases("greedy");
    std::vector<std::vector<int32_t>> prompts;
    std::vector<size_t> want_len;
    for (const auto& g : cases) {
      prompts.push_back(m.model().tokenizer().encode(g["prompt"].get<std::string>(), true));
      const auto ref = g["ids"].get<std::vector<int32_t>>();
      want_len.push_back(size_t(std::find(ref.begin(), ref.end(), em.dot) - ref.begin()) + 1);
    }
    GenerateOptions o;
    o.max_gen_toks = {40};
    KvCacheScope scope(m, int(prompts.size()), 128);
    const auto g = generate_greedy(m, prompts, o);
    for (size_t r = 0; r < prompts.size(); ++r) {
      CAPTURE(r);
      CHECK(g[r].reason == StopReason::Eos);
      CHECK(g[r].ids.size() == want_len[r]);
    }
  }
}
