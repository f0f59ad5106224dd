// Matrices of files quantized by llama.cpp (../shared/quant) in the types kept
// as the file's blocks (Q4_1, Q5_0, Q5_1, Q2_K ... Q6_K) held in a
// backend::Weight: widened rows equal the model layer's dequantizer
// (bit-identical to gguf-py's numpy) element for element, the exact-mode block
// kernel matches a float64 product of those values within f32 rounding, and
// rows looked up from kept token_embd blocks (every quantized type; random
// blocks with extreme scales too) equal the dequantizer's rows bit for bit.
// Skipped, with a message, when ../shared (KVEVAL_SHARED_DIR) is absent.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backend/backend.hpp"
#include "backend/qblocks.hpp"
#include "model/dequantize.hpp"
#include "model/gguf.hpp"
#include "test_support.hpp"

using namespace kveval;

namespace {

/// Tensor `t` (a type with a kept-block kernel) in a block weight, built as the loader builds it.
backend::Weight kept_weight(const gguf::File& f, const gguf::TensorInfo& t) {
  const auto K = static_cast<int64_t>(t.row_length()), N = static_cast<int64_t>(t.n_rows());
  const backend::Dtype dt = *gguf::type_info(t.type).kept;
  backend::Weight w(N, K, dt);
  if (backend::is_file_blocks(dt)) {
    w.set_rows_file_blocks(0, t.data, N);
    return w;
  }
  std::vector<uint8_t> q(static_cast<size_t>(N * K / backend::kQBlock * backend::block_quant_bytes(dt)));
  std::vector<float> d(static_cast<size_t>(N * K / backend::kQBlock));
  split_block_rows(f, t, 0, static_cast<uint64_t>(N), q.data(), d.data());
  if (dt == backend::Dtype::Q4_0)
    w.set_rows_q4_0(0, q.data(), d.data(), N);
  else
    w.set_rows_q8_0(0, reinterpret_cast<const int8_t*>(q.data()), d.data(), N);
  return w;
}

/// Looks up rows `ids` of `w` (gather_rows) and compares each with `want` ([n_out, n_in], the dequantizer's
/// values) bit for bit; returns the rows that differ.
int rows_differing(const backend::Weight& w, const std::vector<int32_t>& ids, const std::vector<float>& want) {
  const auto K = static_cast<size_t>(w.n_in());
  std::vector<float> got(ids.size() * K);
  backend::gather_rows(w, ids, got.data());
  int differ = 0;
  for (size_t i = 0; i < ids.size(); ++i)
    differ += std::memcmp(got.data() + i * K, want.data() + static_cast<size_t>(ids[i]) * K, K * sizeof(float)) != 0;
  return differ;
}

}  // namespace

TEST_SUITE("model.file_blocks") {
  TEST_CASE("token_embd rows looked up from kept blocks equal the dequantizer's rows, bit for bit") {
    const std::string shared = test::shared_dir();
    if (shared.empty() || !std::ifstream(shared + "/quant/model-Q4_K_M.gguf")) {
      MESSAGE("skipped: no ../shared/quant fixtures (KVEVAL_SHARED_DIR or <source>/../shared)");
      return;
    }
    std::set<std::string> types;
    for (const char* name : {"model-Q4_K.gguf", "model-Q5_K.gguf", "model-Q6_K.gguf", "model-Q4_K_M.gguf",
                             "model-Q5_K_M.gguf", "model-Q8_0.gguf", "model-Q4_0.gguf", "model-Q4_1.gguf",
                             "model-Q5_0.gguf", "model-Q5_1.gguf", "model-Q2_K.gguf", "model-Q3_K.gguf"}) {
      const gguf::File file(shared + "/quant/" + name);
      const gguf::TensorInfo& t = file.tensor("token_embd.weight");
      INFO(name << " " << gguf::type_name(t.type));
      REQUIRE(gguf::type_info(t.type).kept.has_value());
      const backend::Weight w = kept_weight(file, t);
      std::vector<float> want(t.n_elements);
      dequantize(t.type, t.data, want.data(), t.n_elements, 1);
      const auto V = static_cast<int32_t>(t.n_rows());
      std::vector<int32_t> ids = {0, V - 1, 1, 2, 3, V - 2, 7, 7};
      std::mt19937 g(3);
      for (int i = 0; i < 64; ++i) ids.push_back(std::uniform_int_distribution<int32_t>(0, V - 1)(g));
      CHECK(rows_differing(w, ids, want) == 0);
      types.insert(gguf::type_name(t.type));
    }
    MESSAGE("token_embd types checked: " << fmt::format("{}", fmt::join(types, ", ")));
    CHECK(types.size() >= 9);
  }

  TEST_CASE("rows looked up from random file blocks (extreme and subnormal scales, zero blocks) equal dequantize()") {
    using gguf::TensorType;
    for (const TensorType type : {TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1, TensorType::Q2_K,
                                  TensorType::Q3_K, TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K}) {
      const gguf::TypeInfo& ti = gguf::type_info(type);
      INFO(ti.name);
      const int64_t N = 12, K = 512, bb = ti.type_size, nb = N * K / ti.block_size;
      std::vector<std::byte> b(static_cast<size_t>(nb * bb));
      std::mt19937 g(17);
      for (auto& v : b) v = static_cast<std::byte>(g() & 0xFF);
      for (int64_t i = 0; i < nb; ++i) {  // super-block kinds by i % 4: random, largest d, subnormal d, zero
        std::byte* p = b.data() + i * bb;
        const int kind = static_cast<int>(i % 4);
        if (kind == 3) std::fill(p, p + bb, std::byte{0});
        const uint16_t d = kind == 1 ? 0x7BFF : kind == 2 ? 0x0001 : 0x1C00;  // 65504, 2^-24, 2^-8
        // the f16 d, and the second f16 (m, dmin) where the format has one
        const int64_t at = type == TensorType::Q6_K ? 208 : type == TensorType::Q3_K ? 108 : type == TensorType::Q2_K ? 80 : 0;
        const bool second = type != TensorType::Q6_K && type != TensorType::Q3_K && type != TensorType::Q5_0;
        if (kind == 3) continue;
        p[at] = std::byte(d & 0xFF), p[at + 1] = std::byte(d >> 8);
        if (second) p[at + 2] = p[at], p[at + 3] = p[at + 1];  // m or dmin = d
      }
      backend::Weight w(N, K, *ti.kept);
      w.set_rows_file_blocks(0, b.data(), N);
      std::vector<float> want(static_cast<size_t>(N * K));
      dequantize(type, b.data(), want.data(), static_cast<uint64_t>(N * K), 1);
      CHECK(rows_differing(w, {11, 0, 1, 5, 5, 10}, want) == 0);
    }
  }


  TEST_CASE("llama.cpp's tensors kept as the file's blocks: widened rows equal the dequantizer, products the float64 reference") {
    const std::string shared = test::shared_dir();
    if (shared.empty() || !std::ifstream(shared + "/quant/model-Q4_K_M.gguf")) {
      MESSAGE("skipped: no ../shared/quant fixtures (KVEVAL_SHARED_DIR or <source>/../shared)");
      return;
    }
    std::set<std::string> checked;
    for (const char* name : {"model-Q4_K.gguf", "model-Q5_K.gguf", "model-Q6_K.gguf", "model-Q4_K_M.gguf", "model-Q5_K_M.gguf",
                             "model-Q4_1.gguf", "model-Q5_0.gguf", "model-Q5_1.gguf", "model-Q2_K.gguf", "model-Q3_K.gguf"}) {
      const gguf::File file(shared + "/quant/" + name);
      for (const auto& t : file.tensors()) {
        if (t.dims.size() != 2) continue;
        const auto kept = gguf::type_info(t.type).kept;
        if (!kept || !backend::is_file_blocks(*kept)) continue;
        const backend::Dtype dt = *kept;
        const auto K = static_cast<int64_t>(t.row_length()), N = static_cast<int64_t>(t.n_rows());
        INFO(name << " " << t.name);
        backend::Weight w(N, K, dt);
        w.set_rows_file_blocks(0, t.data, N);
        CHECK(w.bytes() == t.n_bytes);
        std::vector<float> want(static_cast<size_t>(N * K)), got(want.size());
        dequantize(t.type, t.data, want.data(), t.n_elements, 1);
        backend::widen_rows(w, 0, N, got.data(), K, 2);
        CHECK(std::memcmp(want.data(), got.data(), sizeof(float) * want.size()) == 0);
        std::vector<float> x(static_cast<size_t>(3 * K)), y(static_cast<size_t>(3 * N));
        std::mt19937 g(7);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        for (float& v : x) v = u(g);
        backend::blocks_matmul(x.data(), 3, w, y.data(), false, 2);
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
        checked.insert(gguf::type_name(t.type));
      }
    }
    CHECK(checked == std::set<std::string>{"Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"});
  }
}
