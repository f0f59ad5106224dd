// The bench's generation paths: synthetic prompts, cached and uncached
// generation giving the same ids, and option validation (nothing here is
// timed: only token ids are asserted).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "backend/backend.hpp"
#include "bench/gen.hpp"
#include "bench/run.hpp"
#include "model/gguf.hpp"
#include "model/model.hpp"
#include "context_support.hpp"
#include "model/random_model.hpp"
#include "test_support.hpp"
#include "util/error.hpp"

using namespace kveval;
using namespace kveval::bench;
namespace fs = std::filesystem;

namespace {

fs::path temp_dir() {
  static const test::ScratchDir dir("bench");  // removed at exit
  return dir.path;
}

void check_same_ids(Context& model, int batch, int n_prompt, int n_gen) {
  const auto prompts = synthetic_prompts(model.model(), batch, n_prompt, 42);
  GenerateTiming tc, tu;
  const auto cached = bench_generate(model, prompts, n_gen, true, &tc);
  const auto uncached = bench_generate(model, prompts, n_gen, false, &tu);
  REQUIRE(cached.size() == static_cast<size_t>(batch));
  for (int r = 0; r < batch; ++r) {
    CHECK(cached[static_cast<size_t>(r)].size() == static_cast<size_t>(n_gen));
    CHECK(cached[static_cast<size_t>(r)] == uncached[static_cast<size_t>(r)]);
  }
  CHECK(tc.decode_tokens == static_cast<int64_t>(batch) * n_gen);
  CHECK(tu.decode_tokens == static_cast<int64_t>(batch) * n_gen);
  CHECK_FALSE(model.caches_are_enabled());
}

}  // namespace

TEST_SUITE("bench.run") {
  TEST_CASE("synthetic prompts start with BOS, avoid specials and are deterministic" * kveval::test::needs_model()) {
    auto model = test::load_context(test::model_path(), {1});
    const auto a = synthetic_prompts(model.model(), 3, 20, 7), b = synthetic_prompts(model.model(), 3, 20, 7);
    CHECK(a == b);
    CHECK(a != synthetic_prompts(model.model(), 3, 20, 8));
    for (const auto& row : a) {
      REQUIRE(row.size() == 20);
      CHECK(row[0] == model->model().tokenizer().bos());
      for (size_t i = 1; i < row.size(); ++i) {
        CHECK(row[i] >= 3);
        CHECK(row[i] < model->model().hparams().n_vocab);
        CHECK(row[i] != model->model().tokenizer().eos());
      }
    }
  }

  TEST_CASE("cached and uncached paths give the same token ids on stories260K" * kveval::test::needs_model()) {
    auto model = test::load_context(test::model_path(), {1});
    check_same_ids(*model, 1, 8, 24);
    check_same_ids(*model, 3, 5, 16);
  }

  TEST_CASE("cached and uncached paths give the same token ids on the tiny random model") {
    const fs::path path = temp_dir() / "tiny.gguf";
    write_random_model(path.string(), random_model_preset("tiny"), 3);
    auto model = test::load_context(path.string(), {2});
    check_same_ids(*model, 2, 6, 40);
  }

  TEST_CASE("bench_generate refuses ragged prompts and overlong generations" * kveval::test::needs_model()) {
    auto model = test::load_context(test::model_path(), {1});
    auto prompts = synthetic_prompts(model.model(), 2, 4, 1);
    prompts[1].push_back(5);
    CHECK_THROWS_AS(bench_generate(*model, prompts, 4, true), ArgumentError);
    const auto ok = synthetic_prompts(model.model(), 1, 4, 1);
    CHECK_THROWS_AS(bench_generate(*model, ok, model->model().hparams().n_ctx_train, false), ArgumentError);
  }

  TEST_CASE("options are validated with the option's name") {
    Options o;
    o.model_path = "m.gguf";
    o.threads = {1};
    CHECK_NOTHROW(validate(o));
    o.tests = {"tg", "bogus"};
    CHECK_THROWS_WITH_AS(validate(o), doctest::Contains("--tests"), ArgumentError);
    o.tests = {};
    o.batches = {0};
    CHECK_THROWS_WITH_AS(validate(o), doctest::Contains("--batch-size"), ArgumentError);
  }
}
