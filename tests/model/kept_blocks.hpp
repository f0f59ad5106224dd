#pragma once
// The quant-fixture checks shared by the kept-block dtype suites (q8_0, q4_0):
// rolling log-probs and decode steps against f32 and the float64 reference of
// ../shared/quant/expected.json (see its README). Tests skip with a message
// when the fixtures are absent.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/model.hpp"
#include "context_support.hpp"
#include "test_support.hpp"

namespace kveval::test {

/// ../shared/quant/<name>, or "" (with a SKIPPED message) when the fixtures are absent.
inline std::string quant_file(const std::string& name) {
  const std::string shared = shared_dir();
  const auto file = std::filesystem::path(shared) / "quant" / name;
  if (shared.empty() || !std::filesystem::exists(file)) {
    MESSAGE("SKIPPED: no " << file.string() << " (set KVEVAL_SHARED_DIR)");
    return "";
  }
  return file.string();
}

/// Elements of every quant fixture (2 layers, n_embd 256, 2 KV heads of 64
/// (kv dim 128), n_ff 768, untied output, 512 tokens): those loaded as F32
/// whatever the dtype (token_embd and norms), and those of the matrices
/// (output and the layers), which a kept-block dtype holds as blocks.
struct FixtureElements {
  static constexpr uint64_t D = 256, F = 768, KV = 128, V = 512, L = 2;
  static constexpr uint64_t f32 = V * D + D + L * 2 * D;
  static constexpr uint64_t matrices = V * D + L * (2 * D * D + 2 * KV * D + 3 * D * F);
};

/// Per-token log-probs of `ids` scored as one rolling request.
inline std::vector<double> rolling(Context& m, const std::vector<int32_t>& ids) {
  ScoreRequest r{ids, 1};
  return score(m, std::span<const ScoreRequest>(&r, 1), 1)[0].logprobs;
}

/// Largest per-token |Δ log-prob| of `dtype` against f32 and against the float64 reference.
struct RollingGap {
  double vs_f32 = 0, vs_ref = 0;
  size_t tokens = 0;
};

/// Scores the `rolling` texts of expected.json for fixture `file` (a path from
/// quant_file) with the model loaded as f32 and as `dtype`; checks that the
/// latter reports `dtype` and weight_dtype `weight_dtype`.
inline RollingGap rolling_gap(const std::string& file, ComputeDtype dtype, const std::string& weight_dtype) {
  const auto path = std::filesystem::path(file);
  const auto ex = nlohmann::json::parse(std::ifstream(path.parent_path() / "expected.json"));
  auto f = test::load_context(file, {.threads = 2, .dtype = ComputeDtype::F32});
  auto q = test::load_context(file, {.threads = 2, .dtype = dtype});
  CHECK(q->model().dtype() == dtype);
  CHECK(q->model().load_summary().weight_dtype == weight_dtype);
  RollingGap g;
  for (const auto& r : ex["files"][path.filename().string()]["rolling"]) {
    const auto ids = r["ids"].get<std::vector<int32_t>>();
    const auto want = r["token_logprobs"].get<std::vector<double>>();
    auto lf = rolling(*f, ids), lq = rolling(*q, ids);
    REQUIRE(lq.size() == want.size());
    REQUIRE(lf.size() == want.size());
    for (size_t i = 0; i < lq.size(); ++i) {
      g.vs_f32 = std::max(g.vs_f32, std::abs(lq[i] - lf[i]));
      g.vs_ref = std::max(g.vs_ref, std::abs(lq[i] - want[i]));
    }
    g.tokens += lq.size();
  }
  MESSAGE(std::string(to_string(dtype)) << " on " << path.filename().string() << ": max |Δ log-prob| vs f32 " << g.vs_f32
                           << ", vs float64 reference " << g.vs_ref << " over " << g.tokens << " tokens");
  return g;
}

/// Greedy decoding of a few prompts with `file` loaded as f32 and as `dtype`:
/// checks equal token ids and returns the largest |Δ| of the step log-probs.
/// Leaves `dtype`'s model in `out` for further checks.
inline double greedy_gap(const std::string& file, ComputeDtype dtype, const std::vector<std::vector<int32_t>>& prompts,
                         std::unique_ptr<Model>& out) {
  auto f = test::load_context(file, {.threads = 2, .dtype = ComputeDtype::F32});
  out = Model::load(file, {.threads = 2, .dtype = dtype});
  GenerateOptions go;
  go.max_gen_toks = {24};
  go.stop_at_eos = false;
  go.logprobs = true;
  std::vector<Generation> rf, rq;
  {
    KvCacheScope scope(*f, static_cast<int>(prompts.size()), 128);
    rf = generate_greedy(*f, prompts, go);
  }
  {
    Context q(*out);
    KvCacheScope scope(q, static_cast<int>(prompts.size()), 128);
    rq = generate_greedy(q, prompts, go);
  }
  REQUIRE(rf.size() == rq.size());
  double worst = 0;
  for (size_t i = 0; i < rf.size(); ++i) {
    CHECK(rf[i].ids == rq[i].ids);
    REQUIRE(rf[i].logprobs.size() == rq[i].logprobs.size());
    for (size_t j = 0; j < rf[i].logprobs.size(); ++j) worst = std::max(worst, std::abs(rf[i].logprobs[j] - rq[i].logprobs[j]));
  }
  MESSAGE(std::string(to_string(dtype)) << " vs f32 greedy step log-probs: max |Δ| " << worst);
  return worst;
}

/// One decode step of 3 rows: 4-token prompts prefilled into the cache, then
/// one token per row (a 3-row product: the block kernel for kept blocks);
/// returns the largest |Δ logit| of that step between f32 and `dtype`.
inline double decode_logit_gap(const std::string& file, ComputeDtype dtype) {
  const std::vector<int32_t> prompt = {1, 5, 9, 14, 1, 20, 30, 40, 1, 100, 7, 8}, next = {3, 4, 5};
  const std::vector<int> n4 = {4, 4, 4}, n1 = {1, 1, 1};
  std::vector<std::vector<float>> step;
  for (ComputeDtype d : {ComputeDtype::F32, dtype}) {
    auto m = test::load_context(file, {.threads = 2, .dtype = d});
    const auto V = static_cast<size_t>(m->model().hparams().n_vocab);
    std::vector<float> logits(3 * V);
    KvCacheScope scope(*m, 3, 16);
    m->forward(prompt, 3, 4, n4, Context::Logits::Last, logits);
    m->forward(next, 3, 1, n1, Context::Logits::Last, logits);
    step.push_back(logits);
  }
  double worst = 0;
  for (size_t i = 0; i < step[0].size(); ++i) worst = std::max(worst, std::abs(double(step[0][i]) - step[1][i]));
  MESSAGE(std::string(to_string(dtype)) << " vs f32 decode-step logits: max |Δ| " << worst);
  return worst;
}

}  // namespace kveval::test
