// Q4_K, Q5_K and Q6_K matrices of files quantized by llama.cpp (../shared/quant)
// kept as blocks in a backend::Weight: widened rows equal the model layer's
// dequantizer (bit-identical to gguf-py's numpy) element for element, and the
// exact-mode block kernel matches a float64 product of those values within f32
// rounding. Skipped, with a message, when ../shared (KVEVAL_SHARED_DIR) is absent.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/kquants.hpp"
#include "backend/qblocks.hpp"
#include "model/dequantize.hpp"
#include "model/gguf.hpp"
#include "test_support.hpp"

using namespace kveval;

TEST_SUITE("model.kquant_blocks") {
  TEST_CASE("llama.cpp's Q4_K, Q5_K and Q6_K tensors kept as blocks: widened rows equal the dequantizer, products the float64 reference") {
    const std::string shared = test::shared_dir();
    if (shared.empty() || !std::ifstream(shared + "/quant/model-Q4_K_M.gguf")) {
      MESSAGE("skipped: no ../shared/quant fixtures (KVEVAL_SHARED_DIR or <source>/../shared)");
      return;
    }
    int checked[3] = {0, 0, 0};
    for (const char* name : {"model-Q4_K.gguf", "model-Q5_K.gguf", "model-Q6_K.gguf", "model-Q4_K_M.gguf", "model-Q5_K_M.gguf"}) {
      const gguf::File file(shared + "/quant/" + name);
      for (const auto& t : file.tensors()) {
        if (t.dims.size() != 2) continue;
        const auto dt = t.type == gguf::TensorType::Q4_K   ? backend::Dtype::Q4_K
                        : t.type == gguf::TensorType::Q5_K ? backend::Dtype::Q5_K
                        : t.type == gguf::TensorType::Q6_K ? backend::Dtype::Q6_K
                                                           : backend::Dtype::F32;
        if (dt == backend::Dtype::F32) continue;
        const auto K = static_cast<int64_t>(t.row_length()), N = static_cast<int64_t>(t.n_rows());
        INFO(name << " " << t.name);
        backend::Weight w(N, K, dt);
        w.set_rows_kquant(0, t.data, N);
        CHECK(w.bytes() == t.n_bytes);
        std::vector<float> want(static_cast<size_t>(N * K)), got(want.size());
        dequantize(t.type, t.data, want.data(), t.n_elements, 1);
        backend::widen_rows(w, 0, N, got.data(), K, 2);
        CHECK(std::memcmp(want.data(), got.data(), sizeof(float) * want.size()) == 0);
        std::vector<float> x(static_cast<size_t>(3 * K)), y(static_cast<size_t>(3 * N));
        std::mt19937 g(7);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        for (float& v : x) v = u(g);
        backend::kquant_matmul(x.data(), 3, w, y.data(), false, 2);
        double worst = 0;
        for (int64_t r = 0; r < 3; ++r)
          for (int64_t n = 0; n < N; ++n) {
            double s = 0, a = 0;
            for (int64_t k = 0; k < K; ++k) {
              const double p = double(want[static_cast<size_t>(n * K + k)]) * x[static_cast<size_t>(r * K + k)];
              s += p;
              a += std::fabs(p);
            }
            worst = std::max(worst, std::fabs(double(y[static_cast<size_t>(r * N + n)]) - s) / (a + 1e-30));
          }
        CHECK(worst < double(K / 32 + 5) * 0x1p-24);
        ++checked[dt == backend::Dtype::Q4_K ? 0 : dt == backend::Dtype::Q5_K ? 1 : 2];
      }
    }
    CHECK(checked[0] > 0);
    CHECK(checked[1] > 0);
    CHECK(checked[2] > 0);
  }
}
