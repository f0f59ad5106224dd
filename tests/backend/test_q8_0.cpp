// Q8_0 weights kept as blocks (Dtype::Q8_0): the vector kernel against its
// scalar twin (same bits) and a naive double-precision reference, the widened
// path for long products, batch invariance, and a warm engine that creates and
// allocates nothing.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/random_values.hpp"
#include "backend/q8_0.hpp"
#include "util/error.hpp"

using namespace kveval::backend;

namespace {

using kveval::test::randv;

/// A random Q8_0 matrix [n_out, n_in]: quants in [-127, 127], scales in (0, 0.01].
struct Q8 {
  int64_t n_out, n_in;
  std::vector<int8_t> q;
  std::vector<float> d;
  Q8(int64_t no, int64_t ni, uint32_t seed) : n_out(no), n_in(ni), q(static_cast<size_t>(no * ni)), d(static_cast<size_t>(no * ni / 32)) {
    std::mt19937 g(seed);
    std::uniform_int_distribution<int> qi(-127, 127);
    std::uniform_real_distribution<float> di(1e-4f, 1e-2f);
    for (auto& v : q) v = static_cast<int8_t>(qi(g));
    for (auto& v : d) v = di(g);
  }
  Weight weight() const {
    Weight w(n_out, n_in, Dtype::Q8_0);
    w.set_rows_q8_0(0, q.data(), d.data(), n_out);
    return w;
  }
  /// Σ_k d * q * x in double, and Σ |d q x| (the scale of the rounding error).
  std::pair<double, double> ref(int64_t n, const float* x) const {
    double s = 0, a = 0;
    for (int64_t k = 0; k < n_in; ++k) {
      const double t = double(d[static_cast<size_t>((n * n_in + k) / 32)]) * q[static_cast<size_t>(n * n_in + k)] * x[k];
      s += t;
      a += std::fabs(t);
    }
    return {s, a};
  }
};

}  // namespace

TEST_SUITE("backend.q8_0") {
  TEST_CASE("the Q8_0 kernel gives the scalar twin's bits and the double reference within f32 rounding") {
    MESSAGE("Q8_0 kernel: " << std::string(q8_0_kernel_name()));
    for (int64_t n_in : {32, 64, 288, 768}) {
      const int64_t n_out = 67;
      const Q8 mat(n_out, n_in, static_cast<uint32_t>(n_in));
      const Weight w = mat.weight();
      CHECK(w.bytes() == static_cast<size_t>(n_out * n_in + n_out * n_in / 32 * 4));
      const auto x = randv(static_cast<size_t>(16 * n_in), 5);
      const auto y0 = randv(static_cast<size_t>(16 * n_out), 6);
      for (int threads : {1, 2})
        for (bool acc : {false, true})
          for (int64_t m : {1, 2, 3, 5, 8, 16}) {
            std::vector<float> y(y0);
            q8_0_matmul(x.data(), m, w, y.data(), acc, threads);
            int64_t differ = 0;
            double worst = 0;
            for (int64_t r = 0; r < m; ++r)
              for (int64_t n = 0; n < n_out; ++n) {
                const float s = q8_0_dot_scalar(mat.q.data() + n * n_in, mat.d.data() + n * n_in / 32, x.data() + r * n_in, n_in);
                const float want = acc ? y0[static_cast<size_t>(r * n_out + n)] + s : s;
                if (std::memcmp(&want, &y[static_cast<size_t>(r * n_out + n)], sizeof(float)) != 0) ++differ;
                const auto [e, a] = mat.ref(n, x.data() + r * n_in);
                worst = std::max(worst, std::fabs(double(s) - e) / (a + 1e-30));
              }
            INFO("n_in=" << n_in << " threads=" << threads << " acc=" << acc << " m=" << m);
            CHECK(differ == 0);
            CHECK(worst < 1e-6);  // n_in / 32 + 4 roundings of relative 2^-24 each
          }
    }
  }

  TEST_CASE("hand-computed Q8_0 product") {
    // One row, two blocks: block 0 all quants 2 with d = 0.5, block 1 quants -1 with d = 0.25.
    std::vector<int8_t> q(64, 2);
    std::fill(q.begin() + 32, q.end(), int8_t{-1});
    const std::vector<float> d = {0.5f, 0.25f};
    Weight w(1, 64, Dtype::Q8_0);
    w.set_rows_q8_0(0, q.data(), d.data(), 1);
    std::vector<float> x(64, 1.0f);
    x[0] = 3.0f;   // block 0: 0.5 * 2 * (31 + 3) = 34
    x[40] = 5.0f;  // block 1: 0.25 * -1 * (31 + 5) = -9
    float y = 100.0f;
    Engine eng(1);
    matmul(eng, x.data(), 1, w, &y, true);
    CHECK(y == 125.0f);
    matmul(eng, x.data(), 1, w, &y, false, true);  // the widened, batch-invariant path
    CHECK(y == 25.0f);
    std::vector<float> t(64);
    q8_0_widen_rows(w, 0, 1, t.data(), 64, 1);
    CHECK(t[0] == 1.0f);
    CHECK(t[63] == -0.25f);
  }

  TEST_CASE("long and batch-invariant Q8_0 products: widened chunks match the reference, rows alone match rows in a batch") {
    // n_out 3000 > one chunk of widened rows for n_in 512 (2048 rows), so two chunks.
    const Q8 mat(3000, 512, 9);
    const Weight w = mat.weight();
    const int64_t M = 40;
    const auto x = randv(static_cast<size_t>(M * 512), 10);
    for (int threads : {1, 2}) {
      Engine eng(threads);
      std::vector<float> y(static_cast<size_t>(M * 3000));
      matmul(eng, x.data(), M, w, y.data());
      double worst = 0;
      for (int64_t r = 0; r < M; r += 7)
        for (int64_t n = 0; n < 3000; n += 13) {
          const auto [e, a] = mat.ref(n, x.data() + r * 512);
          worst = std::max(worst, std::fabs(double(y[static_cast<size_t>(r * 3000 + n)]) - e) / (a + 1e-30));
        }
      CHECK(worst < 1e-6);
      std::vector<float> batch(y.size()), alone(y.size());
      matmul(eng, x.data(), M, w, batch.data(), false, true);
      for (int64_t r = 0; r < M; ++r) matmul(eng, x.data() + r * 512, 1, w, alone.data() + r * 3000, false, true);
      CHECK(std::memcmp(batch.data(), alone.data(), sizeof(float) * batch.size()) == 0);
    }
  }

  TEST_CASE("warm Q8_0 products create no primitive and allocate nothing") {
    const Q8 mat(1024, 256, 3);
    const Weight w = mat.weight();
    const auto x = randv(static_cast<size_t>(64 * 256), 4);
    std::vector<float> y(static_cast<size_t>(64 * 1024));
    Engine eng(2);
    for (int64_t m : {64, 1, 4}) matmul(eng, x.data(), m, w, y.data(), true);
    matmul(eng, x.data(), 3, w, y.data(), false, true);
    const auto p0 = eng.primitives_created(), a0 = eng.buffer_allocations();
    for (int step = 0; step < 20; ++step) matmul(eng, x.data(), step % 2 ? 1 : 4, w, y.data(), true);
    matmul(eng, x.data(), 64, w, y.data(), true);
    matmul(eng, x.data(), 3, w, y.data(), false, true);
    CHECK(eng.primitives_created() == p0);
    CHECK(eng.buffer_allocations() == a0);
  }

  TEST_CASE("Q8_0 weights refuse bad shapes and the other setters") {
    CHECK_THROWS_AS(Weight(4, 48, Dtype::Q8_0), kveval::ArgumentError);
    Weight w(4, 64, Dtype::Q8_0);
    std::vector<float> f(256);
    CHECK_THROWS_AS(w.set_rows(0, f.data(), 4), kveval::ArgumentError);
    std::vector<int8_t> q(5 * 64);
    std::vector<float> d(10);
    CHECK_THROWS_AS(w.set_rows_q8_0(0, q.data(), d.data(), 5), kveval::ArgumentError);
    CHECK(std::string(to_string(Dtype::Q8_0)) == "q8_0");
  }
}
