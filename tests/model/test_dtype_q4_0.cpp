// Compute dtype q4_0 (Q4_0 matrices kept as the file's blocks, ggml-common.h block_q4_0):
// selection, resident bytes, the loader's copy plus the backend's widening
// against the Q4_0 dequantizer, log-probs against f32 and the float64
// reference on the quant fixture, decode steps through the Q4_0 kernel, and a
// warm decode step that creates and allocates nothing.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/qblocks.hpp"
#include "model/copy_blocks.hpp"
#include "model/dequantize.hpp"
#include "model/gguf.hpp"
#include "model/kept_blocks.hpp"
#include "model/model.hpp"
#include "model/warm_decode.hpp"
#include "util/error.hpp"

using namespace kveval;
using test::quant_file;

TEST_SUITE("model.dtype_q4_0") {
  TEST_CASE("q4_0 is asked for by name only: auto never picks it") {
    using D = ComputeDtype;
    CHECK(parse_compute_dtype("q4_0") == D::Q4_0);
    CHECK(std::string(to_string(D::Q4_0)) == "q4_0");
    for (bool cpu : {false, true})
      for (bool q8 : {false, true}) {
        CHECK(resolve_dtype(D::Q4_0, cpu, false, q8) == D::Q4_0);
        CHECK(resolve_dtype(D::Auto, cpu, false, q8) != D::Q4_0);
      }
  }

  TEST_CASE("the loader's Q4_0 blocks, widened by the backend, give the Q4_0 dequantizer's values bit for bit") {
    const std::string file = quant_file("model-Q4_0.gguf");
    if (file.empty()) return;
    const gguf::File g(file);
    int checked = 0;
    for (const gguf::TensorInfo& t : g.tensors()) {
      if (t.type != gguf::TensorType::Q4_0) continue;
      const auto rows = static_cast<int64_t>(t.n_rows()), n_in = static_cast<int64_t>(t.row_length());
      backend::Weight w(rows, n_in, backend::Dtype::Q4_0);
      copy_file_block_rows(g, t, w, 0, {.check_finite = true, .threads = 2});
      CHECK(w.bytes() == t.n_bytes);  // the file's bytes, no more
      CHECK(std::memcmp(w.raw(), t.data, t.n_bytes) == 0);
      std::vector<float> widened(static_cast<size_t>(rows * n_in)), want(widened.size());
      backend::widen_rows(w, 0, rows, widened.data(), n_in, 2);
      dequantize_rows(g, t, 0, t.n_rows(), DType::F32, want.data());
      INFO(t.name);
      CHECK(std::memcmp(widened.data(), want.data(), sizeof(float) * want.size()) == 0);
      ++checked;
    }
    CHECK(checked >= 15);  // every matrix of the fixture (token_embd and output included)
  }

  TEST_CASE("q4_0 log-probs on the Q4_0 fixture equal f32's to 1e-5 and the float64 reference to 1e-4 per token") {
    const std::string file = quant_file("model-Q4_0.gguf");
    if (file.empty()) return;
    const test::RollingGap g = test::rolling_gap(file, ComputeDtype::Q4_0, "Q4_0");
    REQUIRE(g.tokens > 10);
    CHECK(g.vs_f32 < 1e-5);
    CHECK(g.vs_ref < 1e-4);
  }

  TEST_CASE("q4_0 keeps the file's 0.5625 bytes per matrix element; the memory estimate is the resident size") {
    const std::string file = quant_file("model-Q4_0.gguf");
    if (file.empty()) return;
    auto m = Model::load(file, {.threads = 1, .dtype = ComputeDtype::Q4_0});
    REQUIRE(!m->hparams().tied_output);
    const uint64_t all_f32 = (test::FixtureElements::f32 + test::FixtureElements::matrices) * 4;
    const uint64_t embd = test::FixtureElements::V * test::FixtureElements::D;  // token_embd: kept, not F32
    const uint64_t kept = (test::FixtureElements::f32 - embd) * 4 + (test::FixtureElements::matrices + embd) * 9 / 16;  // 18 bytes per 32
    CHECK(m->load_summary().resident_bytes == kept);
    CHECK(m->weight_bytes() == kept);
    CHECK(m->dtype_note() == "q4_0");  // a dtype given is named alone; every matrix kept
    CHECK(estimate_weight_bytes(gguf::File(file), DType::F32, ComputeDtype::Q4_0) == kept);
    // A Q8_0 file: q4_0 asked, nothing to keep, the matrices load as F32.
    const std::string k = quant_file("model-Q8_0.gguf");
    if (k.empty()) return;
    auto mk = Model::load(k, {.threads = 1, .dtype = ComputeDtype::Q4_0});
    CHECK(mk->load_summary().weight_dtype == "F32");
    CHECK(mk->dtype_note().find("no Q4_0 matrix in the file: every matrix widened to F32") != std::string::npos);
    CHECK(mk->load_summary().resident_bytes == all_f32);
    CHECK(estimate_weight_bytes(gguf::File(k), DType::F32, ComputeDtype::Q4_0) == all_f32);
  }

  TEST_CASE("q4_0 decode steps: logits within 1e-4 of f32's, greedy tokens equal; a warm step creates and allocates nothing") {
    const std::string file = quant_file("model-Q4_0.gguf");
    if (file.empty()) return;
    CHECK(test::decode_logit_gap(file, ComputeDtype::Q4_0) < 1e-4);
    const std::vector<std::vector<int32_t>> prompts = {{1, 5, 9, 14}, {1, 20, 30}, {1, 100}};
    std::unique_ptr<Model> q;
    CHECK(test::greedy_gap(file, ComputeDtype::Q4_0, prompts, q) < 1e-4);
    Context ctx(*q);
    KvCacheScope scope(ctx, 3, 128);
    test::check_warm_decode(ctx, prompts);
  }
}
