// The `blocks` compute dtype: every matrix whose GGUF type has a kept-block
// kernel stays in its own blocks (K-quant super-blocks copied as they are), on
// llama.cpp's K-quant fixtures (../shared/quant: pure Q4_K, Q5_K, Q6_K and the
// Q4_K_M mix): log-probs against f32 and expected.json's float64 reference,
// and resident bytes against the file's tensor bytes.
#include <doctest/doctest.h>

#include "model/gguf.hpp"
#include "model/kept_blocks.hpp"

using namespace kveval;

namespace {

/// Resident bytes when every matrix but token_embd is kept as the file holds it and token_embd
/// (and the F32 norms) are F32: the file's tensor bytes with token_embd widened.
uint64_t file_bytes_embd_widened(const gguf::File& f) {
  uint64_t bytes = 0;
  for (const auto& t : f.tensors()) bytes += t.name == "token_embd.weight" ? t.n_elements * 4 : t.n_bytes;
  return bytes;
}

}  // namespace

TEST_SUITE("model.dtype_blocks") {
  TEST_CASE("blocks: pure K-quant files stay in their blocks; log-probs within 1e-4 of the float64 reference") {
    for (const auto& [name, type] : std::vector<std::pair<std::string, std::string>>{
             {"model-Q4_K.gguf", "Q4_K"}, {"model-Q5_K.gguf", "Q5_K"}, {"model-Q6_K.gguf", "Q6_K"}}) {
      CAPTURE(name);
      const std::string file = test::quant_file(name);
      if (file.empty()) return;
      const test::RollingGap g = test::rolling_gap(file, ComputeDtype::Blocks, type);
      CHECK(g.tokens >= 30);  // both texts of expected.json
      CHECK(g.vs_f32 < 1e-5);
      CHECK(g.vs_ref < 1e-4);  // the widened path's bound (model.quant_shared)
      auto m = Model::load(file, {.threads = 2, .dtype = ComputeDtype::Blocks});
      const gguf::File f(file);
      const uint64_t want = file_bytes_embd_widened(f);
      CHECK(m->load_summary().resident_bytes == want);
      CHECK(estimate_weight_bytes(f, DType::F32, ComputeDtype::Blocks) == want);
      MESSAGE(name << ": resident " << m->load_summary().resident_bytes << " bytes, file tensors "
                   << m->load_summary().file_tensor_bytes);
    }
  }

  TEST_CASE("blocks: the Q4_K_M mix keeps Q4_K and Q6_K matrices; a fused matrix of two types is widened") {
    const std::string file = test::quant_file("model-Q4_K_M.gguf");
    if (file.empty()) return;
    const gguf::File f(file);
    // Which matrices can stay: the fused [q; k; v] and [gate; up] only when their parts share one type.
    bool widened = false;
    for (int l = 0; l < 2; ++l) {
      const std::string b = "blk." + std::to_string(l) + ".";
      auto type = [&](const char* n) { return f.tensor(b + n + ".weight").type; };
      widened = widened || type("attn_q") != type("attn_k") || type("attn_k") != type("attn_v") ||
                type("ffn_gate") != type("ffn_up");
    }
    const test::RollingGap g = test::rolling_gap(file, ComputeDtype::Blocks, widened ? "Q4_K+Q6_K+F32" : "Q4_K+Q6_K");
    CHECK(g.vs_f32 < 1e-5);
    CHECK(g.vs_ref < 1e-4);
    auto m = Model::load(file, {.threads = 2, .dtype = ComputeDtype::Blocks});
    CHECK(m->load_summary().resident_bytes == estimate_weight_bytes(f, DType::F32, ComputeDtype::Blocks));
    CHECK(m->load_summary().resident_bytes >= file_bytes_embd_widened(f));
    MESSAGE("Q4_K_M: resident " << m->load_summary().resident_bytes << " bytes, file tensors "
                                << m->load_summary().file_tensor_bytes << ", weights " << m->load_summary().weight_dtype);
  }

  TEST_CASE("blocks: decode steps on K-quant blocks match f32 (logits within 1e-4, greedy tokens equal)") {
    const std::string file = test::quant_file("model-Q4_K_M.gguf");
    if (file.empty()) return;
    CHECK(test::decode_logit_gap(file, ComputeDtype::Blocks) < 1e-4);
    std::unique_ptr<Model> q;
    CHECK(test::greedy_gap(file, ComputeDtype::Blocks, {{1, 5, 9}, {1, 100, 7, 8}}, q) < 1e-4);
  }

  TEST_CASE("blocks keeps Q8_0 as q8_0 does") {
    const std::string file = test::quant_file("model-Q8_0.gguf");
    if (file.empty()) return;
    auto b = Model::load(file, {.threads = 2, .dtype = ComputeDtype::Blocks});
    auto q = Model::load(file, {.threads = 2, .dtype = ComputeDtype::Q8_0});
    CHECK(b->load_summary().weight_dtype == "Q8_0");
    CHECK(b->load_summary().resident_bytes == q->load_summary().resident_bytes);
  }
}
