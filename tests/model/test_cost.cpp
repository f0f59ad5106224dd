// Parameter, FLOP and byte counts of a forward pass: hand-computed for the s15m, gqa and stories260K shapes.
#include <doctest/doctest.h>

#include "model/cost.hpp"
#include "model/gguf.hpp"
#include "model/model.hpp"
#include "model/random_model.hpp"
#include "test_support.hpp"

using namespace kveval;

namespace {
/// s15m: dim 288, 6 layers, 6 heads (6 kv), FFN 768, vocab 32000, context 256, untied output.
HParams s15m() {
  HParams hp;
  hp.n_vocab = 32000;
  hp.n_embd = 288;
  hp.n_layer = 6;
  hp.n_head = 6;
  hp.n_head_kv = 6;
  hp.n_ff = 768;
  hp.n_ctx_train = 256;
  return hp;
}
/// gqa: dim 2048, 4 layers, 32 heads / 4 kv heads (kv dim 256), FFN 5632.
HParams gqa() {
  HParams hp = s15m();
  hp.n_embd = 2048;
  hp.n_layer = 4;
  hp.n_head = 32;
  hp.n_head_kv = 4;
  hp.n_ff = 5632;
  hp.n_ctx_train = 4096;
  return hp;
}
}  // namespace

TEST_SUITE("model.cost") {
  TEST_CASE("matmul FLOPs per token") {
    // Per layer: 2*288^2 (wq, wo) + 2*288*288 (wk, wv) + 3*288*768 (w1, w3, w2) = 995328 weights.
    CHECK(layer_matmul_flops_per_token(s15m()) == doctest::Approx(2.0 * 6 * 995328));
    CHECK(output_matmul_flops_per_token(s15m()) == doctest::Approx(2.0 * 288 * 32000));
    // gqa per layer: 2*2048^2 + 2*256*2048 + 3*2048*5632 = 8388608 + 1048576 + 34603008.
    CHECK(layer_matmul_flops_per_token(gqa()) == doctest::Approx(2.0 * 4 * 44040192));
  }

  TEST_CASE("parameters count embeddings, layers, norms and an untied output") {
    HParams hp = s15m();
    const double layers = 6 * (995328 + 2 * 288);
    CHECK(n_params(hp) == doctest::Approx(32000.0 * 288 * 2 + layers + 288));
    hp.tied_output = true;
    CHECK(n_params(hp) == doctest::Approx(32000.0 * 288 + layers + 288));
  }

  TEST_CASE("causal attention and prompt FLOPs") {
    // 2 * 64^2 * 288 * 6 layers.
    CHECK(attention_flops_causal(s15m(), 64) == doctest::Approx(2.0 * 64 * 64 * 288 * 6));
    const double per_row = 64 * (2.0 * 6 * 995328 + 2.0 * 288 * 32000) + 2.0 * 64 * 64 * 288 * 6;
    CHECK(prompt_flops(s15m(), 64, 3) == doctest::Approx(3 * per_row));
  }

  TEST_CASE("ideal cached/uncached ratio at P = 16, G = 240") {
    const double l = 2.0 * 6 * 995328, o = 2.0 * 288 * 32000;
    const double cached = l * (16 + 240 - 1) + o * 240;
    const double uncached = l * (240.0 * 16 + 240.0 * 239 / 2) + o * 240;
    CHECK(generate_matmul_flops(s15m(), 16, 240, true) == doctest::Approx(cached));
    CHECK(generate_matmul_flops(s15m(), 16, 240, false) == doctest::Approx(uncached));
    // G = 1: both paths run the prompt once.
    CHECK(generate_matmul_flops(s15m(), 16, 1, false) == doctest::Approx(generate_matmul_flops(s15m(), 16, 1, true)));
  }

  TEST_CASE("streamed weight bytes: the resident bytes less the table only the embedding lookup reads") {
    // tiny: n_vocab 300, n_embd 64. F32 rows, untied: the F32 table is not streamed; Q8_0 blocks untied: its blocks
    // are not streamed; Q8_0 tied: the output multiplies token_embd's own blocks, so every resident byte is streamed.
    const kveval::test::ScratchDir dir("streamed");
    const std::string path = dir.file("m.gguf");
    struct Case {
      gguf::TensorType type;
      bool tied;
      ComputeDtype dtype;
      uint64_t lookup_only;
    };
    for (const Case& c : {Case{gguf::TensorType::F32, false, ComputeDtype::F32, 300 * 64 * 4},
                          Case{gguf::TensorType::Q8_0, false, ComputeDtype::Blocks, 300 * 64 / 32 * 34},  // block_q8_0: 34 bytes
                          Case{gguf::TensorType::Q8_0, true, ComputeDtype::Blocks, 0},
                          Case{gguf::TensorType::Q8_0, true, ComputeDtype::F32, 300 * 64 * 4}}) {
      CAPTURE(c.tied);
      CAPTURE(to_string(c.dtype));
      RandomModelSpec spec = random_model_preset("tiny");
      REQUIRE(spec.n_vocab == 300);
      REQUIRE(spec.n_embd == 64);
      spec.tied_output = c.tied;
      write_random_llama(path, spec, 3, c.type);
      const LoadSummary s = Model::load(path, {.threads = 1, .dtype = c.dtype})->load_summary();
      CHECK(s.lookup_only_bytes == c.lookup_only);
      CHECK(streamed_weight_bytes(s) == double(s.resident_bytes) - double(c.lookup_only));
      CHECK(streamed_weight_bytes(s) > 0);
    }
  }

  TEST_CASE("gemm shapes of one forward add up to the FLOP counts") {
    const HParams hp = gqa();
    const auto shapes = weight_gemm_shapes(hp, 8, 2);
    double layers = 0, out = 0;
    for (const auto& s : shapes) (s.n == hp.n_vocab ? out : layers) += s.flops();
    CHECK(layers == doctest::Approx(8 * layer_matmul_flops_per_token(hp)));
    CHECK(out == doctest::Approx(2 * output_matmul_flops_per_token(hp)));
    // wk/wv: 256 outputs from 2048 inputs, twice per layer.
    bool found_kv = false;
    for (const auto& s : shapes) found_kv |= (s.n == 256 && s.k == 2048 && s.count == 8 && s.m == 8);
    CHECK(found_kv);
  }

  TEST_CASE("stories260K's shape, counted by hand") {
    // dim 64, 5 layers, 8 heads of 8 (4 kv heads: kv dim 32), FFN 172, vocab 512, untied output.
    HParams hp;
    hp.n_vocab = 512;
    hp.n_embd = 64;
    hp.n_layer = 5;
    hp.n_head = 8;
    hp.n_head_kv = 4;
    hp.n_ff = 172;
    hp.n_ctx_train = 2048;
    // Per layer: wq, wo 2*64*64 = 8192; wk, wv 2*32*64 = 4096; gate, up, down 3*64*172 = 33024: 45312 weights.
    // 512*64 token_embd + 5*(45312 + 2*64 norms) + 64 output_norm + 512*64 output = 292800.
    CHECK(n_params(hp) == 292800.0);
    // Matrix products: 5*45312 + 64*512 (output) = 259328 weights.
    CHECK(matmul_params(hp) == 259328.0);
    CHECK(layer_matmul_flops_per_token(hp) == 2.0 * 5 * 45312);
    CHECK(output_matmul_flops_per_token(hp) == 65536.0);
    // 2 * 10^2 * 64 * 5 layers.
    CHECK(attention_flops_causal(hp, 10) == 64000.0);
    // 2 rows * (10 * (453120 + 65536) + 64000).
    CHECK(prompt_flops(hp, 10, 2) == 10501120.0);
    // P = 4, G = 3: cached 453120*(4+3-1) + 65536*3; uncached 453120*(3*4 + 3) + 65536*3.
    CHECK(generate_matmul_flops(hp, 4, 3, true) == 2915328.0);
    CHECK(generate_matmul_flops(hp, 4, 3, false) == 6993408.0);
    hp.tied_output = true;
    CHECK(n_params(hp) == 292800.0 - 512 * 64);
    CHECK(matmul_params(hp) == 259328.0);  // the tied output's product still runs
  }

  TEST_CASE("the file's tensors hold n_params elements in stories260K" * kveval::test::needs_model()) {
    const gguf::File f(test::model_path());
    CHECK(file_parameters(f) == 292800);  // 48 tensors, all F32
    auto model = Model::load(test::model_path(), {1});
    CHECK(n_params(model->hparams()) == static_cast<double>(file_parameters(f)));
    CHECK(model->load_summary().parameters == 292800);
  }
}
