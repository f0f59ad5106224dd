// Batch-invariant matmuls: each row of an M-row product is bit-identical to the
// same row computed alone, for every M, on the CPU's own ISA. The ctest entry
// backend.invariance.avx2 runs these cases again under DNNL_MAX_CPU_ISA=AVX2,
// where oneDNN 2.7's sgemm is not row-invariant by itself (tail rows and
// M >= 384 take other kernels): without matmul's row blocks on AVX2, 56 of
// these checks fail there.
#include <doctest/doctest.h>

#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/random_values.hpp"

using namespace kveval::backend;

namespace {

using kveval::test::randv;

}  // namespace

TEST_SUITE("backend.invariance") {
  TEST_CASE("batch-invariant rows are bit-identical to the row alone, for every M") {
    MESSAGE("oneDNN ISA: " << std::string(cpu_isa_name()));
    struct Shape {
      int64_t k, n;
    };
    std::vector<Dtype> dtypes{Dtype::F32};
    if (bf16_matmul_available()) dtypes.push_back(Dtype::BF16);
    for (Dtype dt : dtypes)
    for (Shape s : {Shape{288, 768}, Shape{200, 1000}}) {
      const int64_t max_m = 500;
      const auto w = randv(static_cast<size_t>(s.n * s.k), 7);
      const auto x = randv(static_cast<size_t>(max_m * s.k), 11);
      const auto y0 = randv(static_cast<size_t>(max_m * s.n), 13);
      const Weight W(w, s.n, s.k, dt);
      for (int threads : {1, 2}) {
        Engine eng(threads);
        for (bool acc : {false, true}) {
          // Each row alone (M = 1, batch-invariant) is the reference.
          std::vector<float> alone(y0);
          for (int64_t r = 0; r < max_m; ++r) matmul(eng, x.data() + r * s.k, 1, W, alone.data() + r * s.n, acc, true);
          for (int64_t m : std::initializer_list<int64_t>{2, 15, 16, 17, 20, 24, 25, 31, 32, 40, 47, 48, 64, 100, 191, 200, 383, 384, 400, max_m}) {
            std::vector<float> y(y0);
            matmul(eng, x.data(), m, W, y.data(), acc, true);
            int64_t bad_rows = 0;
            for (int64_t r = 0; r < m; ++r)
              if (std::memcmp(y.data() + r * s.n, alone.data() + r * s.n, sizeof(float) * static_cast<size_t>(s.n)) != 0)
                ++bad_rows;
            INFO(std::string(to_string(dt)) << " k=" << s.k << " n=" << s.n << " threads=" << threads << " accumulate=" << acc << " M=" << m);
            CHECK(bad_rows == 0);
          }
        }
      }
    }
  }
}
