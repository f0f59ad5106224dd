// Compute dtype: the selection logic (ISA as a parameter), bf16 log-probs
// against f32 on the quant fixtures, and a warm decode step that creates no
// oneDNN primitive and allocates nothing in either dtype.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>

#include "model/model.hpp"
#include "test_support.hpp"
#include "util/error.hpp"

using namespace kveval;

namespace {

std::vector<double> rolling(Model& m, const std::vector<int32_t>& ids) {
  ScoreRequest r{ids, 1};
  return score(m, std::span<const ScoreRequest>(&r, 1), 1)[0].logprobs;
}

}  // namespace

TEST_SUITE("model.dtype") {
  TEST_CASE("auto picks bf16 only on a bf16 CPU with a non-F32 file; explicit requests are kept") {
    using D = ComputeDtype;
    CHECK(resolve_dtype(D::Auto, true, false) == D::BF16);
    CHECK(resolve_dtype(D::Auto, true, true) == D::F32);
    CHECK(resolve_dtype(D::Auto, false, false) == D::F32);  // e.g. AVX2 only: falls back to f32
    CHECK(resolve_dtype(D::Auto, false, true) == D::F32);
    for (bool cpu : {false, true})
      for (bool f32 : {false, true}) {
        CHECK(resolve_dtype(D::F32, cpu, f32) == D::F32);
        CHECK(resolve_dtype(D::BF16, cpu, f32) == D::BF16);
      }
    CHECK(parse_compute_dtype("bf16") == D::BF16);
    CHECK(parse_compute_dtype("auto") == D::Auto);
    CHECK(std::string(to_string(D::F32)) == "f32");
    CHECK_THROWS_WITH_AS(parse_compute_dtype("fp16", "--dtype"), "--dtype 'fp16': expected 'f32', 'bf16' or 'auto'",
                         ArgumentError);
  }

  TEST_CASE("an F32 file loads in f32 under auto; bf16 halves the matrix bytes" * kveval::test::needs_model()) {
    auto f = Model::load(test::model_path(), {.threads = 1, .dtype = ComputeDtype::Auto});
    CHECK(f->dtype() == ComputeDtype::F32);
    auto b = Model::load(test::model_path(), {.threads = 1, .dtype = ComputeDtype::BF16});
    CHECK(b->dtype() == ComputeDtype::BF16);
    CHECK(b->weight_bytes() < f->weight_bytes());
    CHECK(b->dtype_note().find("bf16 -> bf16") == 0);
  }

  TEST_CASE("bf16 log-probs on the F16 fixture are within 2e-2 per token of f32") {
    const std::string shared = test::shared_dir();
    const auto file = std::filesystem::path(shared) / "quant" / "model-F16.gguf";
    if (shared.empty() || !std::filesystem::exists(file)) {
      MESSAGE("SKIPPED: no " << file << " (set KVEVAL_SHARED_DIR)");
      return;
    }
    auto f = Model::load(file.string(), {.threads = 2, .dtype = ComputeDtype::F32});
    auto b = Model::load(file.string(), {.threads = 2, .dtype = ComputeDtype::BF16});
    CHECK(b->dtype() == ComputeDtype::BF16);
    auto ids = f->tokenizer().encode("Once upon a time there was a little girl who loved to play in the park with her dog.", true);
    REQUIRE(ids.size() > 10);
    auto lf = rolling(*f, ids), lb = rolling(*b, ids);
    REQUIRE(lf.size() == lb.size());
    double worst = 0, diff = 0;
    for (size_t i = 0; i < lf.size(); ++i) {
      worst = std::max(worst, std::abs(lf[i] - lb[i]));
      diff += std::abs(lf[i] - lb[i]);
    }
    MESSAGE("bf16 vs f32 on model-F16.gguf: max |Δ log-prob| " << worst << " over " << lf.size() << " tokens");
    CHECK(worst < 2e-2);
    CHECK(diff > 0);  // bf16 really computed in reduced precision
  }

  TEST_CASE("a warm decode step creates no primitive and allocates nothing (f32 and bf16)" * kveval::test::needs_model()) {
    for (ComputeDtype dt : {ComputeDtype::F32, ComputeDtype::BF16}) {
      CAPTURE(to_string(dt));
      auto m = Model::load(test::model_path(), {.threads = 2, .dtype = dt});
      KvCacheScope scope(*m, 2, 128);
      std::vector<std::vector<int32_t>> prompts = {{1, 5, 9, 14}, {1, 20, 30}};
      GenerateOptions go;
      go.max_gen_toks = {3};
      go.stop_at_eos = false;
      generate_greedy(*m, prompts, go);  // warm-up: prefill and decode shapes
      const auto p0 = m->primitives_created(), a0 = m->backend_allocations(), b0 = m->stats().buffer_allocations;
      const auto steps0 = m->stats().forward_calls;
      go.max_gen_toks = {40};
      generate_greedy(*m, prompts, go);
      CHECK(m->stats().forward_calls - steps0 >= 40);
      CHECK(m->primitives_created() == p0);
      CHECK(m->backend_allocations() == a0);
      CHECK(m->stats().buffer_allocations == b0);
    }
  }
}
