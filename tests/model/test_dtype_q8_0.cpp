// Compute dtype q8_0 (Q8_0 matrices kept as blocks): selection, resident bytes,
// log-probs against f32 and the float64 reference on the quant fixture, greedy
// decoding through the Q8_0 kernel, and a warm decode step that creates and
// allocates nothing.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "backend/backend.hpp"
#include "model/gguf.hpp"
#include "model/model.hpp"
#include "model/warm_decode.hpp"
#include "test_support.hpp"

using namespace kveval;

namespace {

std::vector<double> rolling(Model& m, const std::vector<int32_t>& ids) {
  ScoreRequest r{ids, 1};
  return score(m, std::span<const ScoreRequest>(&r, 1), 1)[0].logprobs;
}

/// ../shared/quant/<name>, or "" (with a SKIPPED message) when the fixtures are absent.
std::string quant_file(const std::string& name) {
  const std::string shared = test::shared_dir();
  const auto file = std::filesystem::path(shared) / "quant" / name;
  if (shared.empty() || !std::filesystem::exists(file)) {
    MESSAGE("SKIPPED: no " << file.string() << " (set KVEVAL_SHARED_DIR)");
    return "";
  }
  return file.string();
}

}  // namespace

TEST_SUITE("model.dtype_q8_0") {
  TEST_CASE("auto picks q8_0 for an all-Q8_0 file on a CPU without bf16; explicit q8_0 is kept") {
    using D = ComputeDtype;
    CHECK(resolve_dtype(D::Auto, false, false, true) == D::Q8_0);  // AVX2: 1.0625 bytes per weight, not f32's 4
    CHECK(resolve_dtype(D::Auto, true, false, true) == D::BF16);   // bf16 CPU: bf16 as for any non-F32 file
    CHECK(resolve_dtype(D::Auto, false, false, false) == D::F32);
    for (bool cpu : {false, true})
      for (bool q8 : {false, true}) CHECK(resolve_dtype(D::Q8_0, cpu, false, q8) == D::Q8_0);
    CHECK(parse_compute_dtype("q8_0") == D::Q8_0);
    CHECK(std::string(to_string(D::Q8_0)) == "q8_0");
  }

  TEST_CASE("q8_0 log-probs on the Q8_0 fixture equal f32's to 1e-5 and the float64 reference to 1e-3 per token") {
    const std::string file = quant_file("model-Q8_0.gguf");
    if (file.empty()) return;
    const auto ex = nlohmann::json::parse(std::ifstream(std::filesystem::path(file).parent_path() / "expected.json"));
    auto f = Model::load(file, {.threads = 2, .dtype = ComputeDtype::F32});
    auto q = Model::load(file, {.threads = 2, .dtype = ComputeDtype::Q8_0});
    CHECK(q->dtype() == ComputeDtype::Q8_0);
    CHECK(q->load_summary().weight_dtype == "Q8_0");
    double vs_f32 = 0, vs_ref = 0;
    size_t n = 0;
    for (const auto& r : ex["files"]["model-Q8_0.gguf"]["rolling"]) {
      const auto ids = r["ids"].get<std::vector<int32_t>>();
      const auto want = r["token_logprobs"].get<std::vector<double>>();
      auto lf = rolling(*f, ids), lq = rolling(*q, ids);
      REQUIRE(lq.size() == want.size());
      REQUIRE(lf.size() == want.size());
      for (size_t i = 0; i < lq.size(); ++i) {
        vs_f32 = std::max(vs_f32, std::abs(lq[i] - lf[i]));
        vs_ref = std::max(vs_ref, std::abs(lq[i] - want[i]));
      }
      n += lq.size();
    }
    REQUIRE(n > 10);
    MESSAGE("q8_0 on model-Q8_0.gguf: max |Δ log-prob| vs f32 " << vs_f32 << ", vs float64 reference " << vs_ref
                                                                << " over " << n << " tokens");
    CHECK(vs_f32 < 1e-5);
    CHECK(vs_ref < 1e-3);
  }

  TEST_CASE("q8_0 keeps 1.125 bytes per matrix element; the memory estimate is the resident size") {
    const std::string file = quant_file("model-Q8_0.gguf");
    if (file.empty()) return;
    auto m = Model::load(file, {.threads = 1, .dtype = ComputeDtype::Q8_0});
    // fixture: 2 layers, n_embd 256, 2 KV heads of 64 (kv dim 128), n_ff 768, untied output, 512 tokens
    REQUIRE(!m->hparams().tied_output);
    const uint64_t D = 256, F = 768, KV = 128, V = 512, L = 2;
    const uint64_t f32_elems = V * D + D + L * 2 * D;                             // token_embd and norms
    const uint64_t mat_elems = V * D + L * (2 * D * D + 2 * KV * D + 3 * D * F);  // output and the layers
    CHECK(m->load_summary().resident_bytes == f32_elems * 4 + mat_elems + mat_elems / 32 * 4);
    CHECK(m->weight_bytes() == f32_elems * 4 + mat_elems + mat_elems / 32 * 4);
    const gguf::File g(file);
    CHECK(estimate_weight_bytes(g, DType::F32, true) == m->load_summary().resident_bytes);
    // Another file type: q8_0 asked, nothing to keep, the matrices load as F32.
    const std::string k = quant_file("model-Q4_K_M.gguf");
    if (k.empty()) return;
    auto mk = Model::load(k, {.threads = 1, .dtype = ComputeDtype::Q8_0});
    CHECK(mk->load_summary().weight_dtype == "F32");
    CHECK(mk->dtype_note().find("no Q8_0 matrix in the file: every matrix widened to F32") != std::string::npos);
    CHECK(mk->load_summary().resident_bytes == (f32_elems + mat_elems) * 4);
  }

  TEST_CASE("q8_0 greedy decoding gives f32's tokens; a warm step creates no primitive and allocates nothing") {
    const std::string file = quant_file("model-Q8_0.gguf");
    if (file.empty()) return;
    auto f = Model::load(file, {.threads = 2, .dtype = ComputeDtype::F32});
    auto q = Model::load(file, {.threads = 2, .dtype = ComputeDtype::Q8_0});
    std::vector<std::vector<int32_t>> prompts = {{1, 5, 9, 14}, {1, 20, 30}, {1, 100}};
    GenerateOptions go;
    go.max_gen_toks = {24};
    go.stop_at_eos = false;
    go.logprobs = true;
    std::vector<Generation> rf, rq;
    {
      KvCacheScope scope(*f, 3, 128);
      rf = generate_greedy(*f, prompts, go);
    }
    KvCacheScope scope(*q, 3, 128);
    rq = generate_greedy(*q, prompts, go);
    REQUIRE(rf.size() == rq.size());
    double worst = 0;  // decode steps run the Q8_0 kernel (another summation order than sgemm)
    for (size_t i = 0; i < rf.size(); ++i) {
      CHECK(rf[i].ids == rq[i].ids);
      REQUIRE(rf[i].logprobs.size() == rq[i].logprobs.size());
      for (size_t j = 0; j < rf[i].logprobs.size(); ++j) worst = std::max(worst, std::abs(rf[i].logprobs[j] - rq[i].logprobs[j]));
    }
    MESSAGE("q8_0 vs f32 greedy step log-probs: max |Δ| " << worst);
    CHECK(worst < 1e-4);
    test::check_warm_decode(*q, prompts);
  }
}
