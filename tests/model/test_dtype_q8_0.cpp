// Compute dtype q8_0 (Q8_0 matrices kept as blocks): selection, resident bytes,
// log-probs against f32 and the float64 reference on the quant fixture, greedy
// decoding through the Q8_0 kernel, and a warm decode step that creates and
// allocates nothing.
#include <doctest/doctest.h>

#include <string>

#include "backend/backend.hpp"
#include "model/gguf.hpp"
#include "model/model.hpp"
#include "model/warm_decode.hpp"
#include "model/kept_blocks.hpp"
#include "model/random_model.hpp"
#include "test_support.hpp"

using namespace kveval;
using test::quant_file;

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
    const test::RollingGap g = test::rolling_gap(file, ComputeDtype::Q8_0, "Q8_0");
    REQUIRE(g.tokens > 10);
    CHECK(g.vs_f32 < 1e-5);
    CHECK(g.vs_ref < 1e-3);
  }

  TEST_CASE("q8_0 keeps the file's 1.0625 bytes per matrix element (token_embd too); the memory estimate is the resident size") {
    const std::string file = quant_file("model-Q8_0.gguf");
    if (file.empty()) return;
    auto m = Model::load(file, {.threads = 1, .dtype = ComputeDtype::Q8_0});
    REQUIRE(!m->hparams().tied_output);
    const uint64_t f32_elems = test::FixtureElements::f32, mat_elems = test::FixtureElements::matrices;
    const uint64_t embd = test::FixtureElements::V * test::FixtureElements::D;  // token_embd: kept, not F32
    const uint64_t kept = (f32_elems - embd) * 4 + (mat_elems + embd) / 32 * 34;  // block_q8_0: 34 bytes per 32
    CHECK(m->load_summary().resident_bytes == kept);
    CHECK(m->weight_bytes() == kept);
    const gguf::File g(file);
    CHECK(estimate_weight_bytes(g, DType::F32, ComputeDtype::Q8_0) == m->load_summary().resident_bytes);
    // Another file type: q8_0 asked, nothing to keep, the matrices load as F32.
    const std::string k = quant_file("model-Q4_K_M.gguf");
    if (k.empty()) return;
    auto mk = Model::load(k, {.threads = 1, .dtype = ComputeDtype::Q8_0});
    CHECK(mk->load_summary().weight_dtype == "F32");
    CHECK(mk->dtype_note().find("no Q8_0 matrix in the file: every matrix widened to F32") != std::string::npos);
    CHECK(mk->load_summary().resident_bytes == (f32_elems + mat_elems) * 4);
  }

  TEST_CASE("a fused projection with one part not Q8_0 loads as F32, and the memory estimate agrees") {
    // tiny: n_embd 64, 2 layers, n_head 4, n_head_kv 2, n_ff 96; every matrix Q8_0
    // but blk.0.attn_k (F32): blk.0's fused QKV is F32, the rest stays Q8_0.
    static const test::ScratchDir dir("dtype_q8_0_mixed");
    RandomModelSpec spec = random_model_preset("tiny");
    spec.matrix_types["blk.0.attn_k.weight"] = gguf::TensorType::F32;
    const std::string p = (dir.path / "mixed.gguf").string();
    write_random_model(p, spec, 5, gguf::TensorType::Q8_0);
    auto m = Model::load(p, {.threads = 1, .dtype = ComputeDtype::Q8_0});
    CHECK(m->load_summary().weight_dtype == "Q8_0+F32");
    // Hand count: QKV of blk.0 [64 + 32 + 32, 64] F32 (8192 elements, 4 bytes); every other matrix,
    // token_embd [300, 64] and the output included, 34 bytes per 32 elements; the norms F32.
    const uint64_t D = 64, F = 96, V = 300, qkv = (64 + 32 + 32) * D, layer = qkv + D * D + 3 * D * F;
    const uint64_t expect = qkv * 4 + (2 * layer - qkv + 2 * V * D) / 32 * 34 + (D + 2 * 2 * D) * 4;
    CHECK(m->load_summary().resident_bytes == expect);
    CHECK(estimate_weight_bytes(gguf::File(p), DType::F32, ComputeDtype::Q8_0) == expect);
  }

  TEST_CASE("q8_0 greedy decoding gives f32's tokens; a warm step creates no primitive and allocates nothing") {
    const std::string file = quant_file("model-Q8_0.gguf");
    if (file.empty()) return;
    const std::vector<std::vector<int32_t>> prompts = {{1, 5, 9, 14}, {1, 20, 30}, {1, 100}};
    std::unique_ptr<Model> q;
    // decode steps run the Q8_0 kernel (another summation order than sgemm)
    CHECK(test::greedy_gap(file, ComputeDtype::Q8_0, prompts, q) < 1e-4);
    Context ctx(*q);
    KvCacheScope scope(ctx, 3, 128);
    test::check_warm_decode(ctx, prompts);
  }
}
