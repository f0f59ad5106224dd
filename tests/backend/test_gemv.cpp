// One-row products with F32 and BF16 weights (gemv.cpp): the vector kernels
// against their scalar twins (same bits, every thread count) and a naive
// double-precision reference; hand-computed cases; matmul routing one-row
// decode steps to them.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/gemv.hpp"
#include "backend/kernel_isa.hpp"
#include "backend/random_values.hpp"
#include "util/error.hpp"

using namespace kveval::backend;
using kveval::test::randv;

namespace {

/// |got - e| / (|start| + sum |x_k w_k|) for e = start + sum x_k w_k in double
/// (the naive reference); with `bf16`, x_k and w_k rounded to bf16 first (what a
/// bf16 product multiplies). w: the output's weight row [n_in].
double relative_error(float got, float start, const float* x, const float* w, int64_t n_in, bool bf16) {
  const auto operand = [bf16](float v) { return double(bf16 ? bf16_to_f32(f32_to_bf16(v)) : v); };
  double e = start, a = std::fabs(start);
  for (int64_t k = 0; k < n_in; ++k) {
    const double t = operand(x[k]) * operand(w[k]);
    e += t;
    a += std::fabs(t);
  }
  return std::fabs(double(got) - e) / (a + 1e-30);
}

/// gemv (m = 1) and gemv_rows (m = 3, 6, 8; bf16: 6 rows is the widest
/// whole-panel pass, 8 the two passes per block) on a random [n_out, n_in] weight of
/// `dt`, with and without accumulation, 1-4 threads: every row bit-identical to
/// gemv_scalar of the row alone, and within f32 rounding of the double reference.
void check_rows_against_twin(Dtype dt, int64_t n_out, int64_t n_in) {
  const bool bf16 = dt == Dtype::BF16;
  const auto wv = randv(static_cast<size_t>(n_out * n_in), static_cast<uint32_t>((bf16 ? 3 : 1) * n_out + n_in));
  const Weight w(wv, n_out, n_in, dt);
  const auto x = randv(static_cast<size_t>(kGemvMaxRows * n_in), 17);
  const auto y0 = randv(static_cast<size_t>(kGemvMaxRows * n_out), 18);
  for (int64_t m : {1, 3, 6, 8}) {
    std::vector<float> scratch(static_cast<size_t>(gemv_scratch(w, m)));
    // bf16: both halves' chains over whole 64-column panels, and x in pairs
    const int64_t want_scratch = bf16 ? m * (2 * ((n_out + 63) / 64 * 64) + n_in) : (gemv_split(n_out, n_in) > 0 ? m * n_out : 0);
    REQUIRE(scratch.size() == static_cast<size_t>(want_scratch));
    for (bool acc : {false, true})
      for (int threads : {1, 2, 3, 4}) {
        std::vector<float> y(y0);
        if (m == 1)
          gemv(x.data(), w, y.data(), acc, threads, scratch.data());
        else
          gemv_rows(x.data(), m, w, y.data(), acc, threads, scratch.data());
        int64_t differ = 0;
        double worst = 0;
        for (int64_t r = 0; r < m; ++r)
          for (int64_t n = 0; n < n_out; ++n) {
            const size_t i = static_cast<size_t>(r * n_out + n);
            const float start = acc ? y0[i] : 0.0f;
            const float* xr = x.data() + r * n_in;
            const float want = gemv_scalar(xr, w, n, start);  // the row alone
            if (std::memcmp(&want, &y[i], sizeof(float)) != 0) ++differ;
            worst = std::max(worst, relative_error(want, start, xr, wv.data() + n * n_in, n_in, bf16));
          }
        INFO(std::string(to_string(dt)) << " [" << n_out << ", " << n_in << "] m=" << m << " acc=" << acc << " threads=" << threads);
        CHECK(differ == 0);
        CHECK(worst < double(n_in + 3) * 6e-8);  // one rounding of relative 2^-24 per fma and add
      }
  }
}

/// matmul on a [300, 70] weight of `dt`: a one-row decode step (and, with
/// `five_rows`, a 5-row one) runs kveval's kernel (no oneDNN primitive, each row
/// gemv_scalar's bits); the batch-invariant one-row product runs oneDNN (one
/// primitive), within 1e-4 of the kernel (|y| ~ 5).
void check_matmul_routing(Dtype dt, bool five_rows) {
  Engine eng(2);
  const int64_t n_out = 300, n_in = 70;
  const Weight w(randv(static_cast<size_t>(n_out * n_in), 3), n_out, n_in, dt);
  const auto x = randv(static_cast<size_t>(5 * n_in), 4);
  const int64_t m = five_rows ? 5 : 1;
  std::vector<float> y(static_cast<size_t>(n_out)), y5(static_cast<size_t>(5 * n_out)), yi(static_cast<size_t>(n_out));
  matmul(eng, x.data(), 1, w, y.data(), false, false);
  if (five_rows) matmul(eng, x.data(), 5, w, y5.data(), false, false);
  CHECK(eng.primitives_created() == 0);  // the decode steps did not go through oneDNN
  for (int64_t r = 0; r < m; ++r)
    for (int64_t n = 0; n < n_out; ++n) {
      const float want = gemv_scalar(x.data() + r * n_in, w, n, 0.0f);
      const float got = r == 0 ? y[static_cast<size_t>(n)] : y5[static_cast<size_t>(r * n_out + n)];
      CHECK(std::memcmp(&want, &got, sizeof(float)) == 0);
      if (five_rows && r == 0) CHECK(std::memcmp(&want, &y5[static_cast<size_t>(n)], sizeof(float)) == 0);
    }
  matmul(eng, x.data(), 1, w, yi.data(), false, true);  // batch-invariant: oneDNN
  CHECK(eng.primitives_created() == 1);
  double worst = 0;
  for (int64_t n = 0; n < n_out; ++n)
    worst = std::max(worst, double(std::fabs(yi[static_cast<size_t>(n)] - y[static_cast<size_t>(n)])));
  CHECK(worst < 1e-4);
}

}  // namespace

TEST_SUITE("backend.gemv") {
  TEST_CASE("f32 gemv and gemv_rows give the scalar twin's bits for every row count and thread count, and the double reference within f32 rounding") {
    MESSAGE("gemv kernel: " << std::string(kernel_isa_name(kernel_isa())));
    // Shapes: tails of 16-column vectors and of 16-row passes, 4 KiB rows (the
    // padded row stride of Weight::ld), one chain (under 2^16 multiply-adds or
    // n_in < 32) and two halves (gemv_split > 0) with odd half lengths.
    const int64_t shapes[][2] = {{1, 1},     {17, 33},    {100, 7},    {768, 64},  {1024, 48},
                                 {2048, 40}, {4100, 19},  {300, 300},  {17, 5000}, {1000, 97}};
    for (const auto& s : shapes) check_rows_against_twin(Dtype::F32, s[0], s[1]);
  }

  TEST_CASE("hand-computed one-row product") {
    // W = [[1, 2, 3], [-1, 0.5, 4]], x = [2, -1, 0.25]: y = [2 - 2 + 0.75, -2 - 0.5 + 1] = [0.75, -1.5].
    const Weight w(std::vector<float>{1, 2, 3, -1, 0.5f, 4}, 2, 3);
    const std::vector<float> x = {2, -1, 0.25f};
    std::vector<float> y = {10, 20};
    gemv(x.data(), w, y.data(), false, 1, nullptr);
    CHECK(y[0] == 0.75f);
    CHECK(y[1] == -1.5f);
    gemv(x.data(), w, y.data(), true, 2, nullptr);
    CHECK(y[0] == 1.5f);
    CHECK(y[1] == -3.0f);
  }

  TEST_CASE("gemv refuses weights that are neither F32 nor BF16 and a missing scratch") {
    const Weight q(4, 32, Dtype::Q8_0), b(std::vector<float>(128, 1.0f), 4, 32, Dtype::BF16);
    std::vector<float> x(32, 1.0f), y(4);
    CHECK_THROWS_AS(gemv(x.data(), q, y.data(), false, 1, nullptr), kveval::ArgumentError);
    CHECK_THROWS_AS(gemv(x.data(), b, y.data(), false, 1, nullptr), kveval::ArgumentError);
    const Weight big(randv(300 * 300, 9), 300, 300);  // split in two halves: needs the scratch row
    REQUIRE(gemv_split(300, 300) == 144);
    std::vector<float> xb(300, 1.0f), yb(300);
    CHECK_THROWS_AS(gemv(xb.data(), big, yb.data(), false, 1, nullptr), kveval::ArgumentError);
  }

  TEST_CASE("matmul runs f32 decode steps through gemv (1 row; 1-8 on AVX-512) and scoring rows through oneDNN") {
    check_matmul_routing(Dtype::F32, decode_invariant_rows(Dtype::F32) >= 5);
  }

  TEST_CASE("bf16 gemv and gemv_rows give the scalar twin's bits for every row count and thread count, and the double reference within f32 rounding") {
    MESSAGE("gemv kernel: " << std::string(kernel_isa_name(kernel_isa())));
    // Shapes: whole and partial 64-column panels, fewer panels than threads,
    // odd n_in (a last pair meets the panels' zero padding), several blocks of
    // 32 pairs (5-8 rows), one chunk and several (bf16_chunk).
    // n_in 600 and 1100: two chunks of bf16_chunk rows (512, 1024) each.
    const int64_t shapes[][2] = {{1, 1},     {31, 17},   {32, 33},    {64, 7},    {100, 70},   {130, 600},
                                 {768, 64},  {2048, 40}, {4100, 19},  {17, 5000}, {1000, 97},  {80, 1100}};
    for (const auto& s : shapes) check_rows_against_twin(Dtype::BF16, s[0], s[1]);
  }

  TEST_CASE("bf16 decode steps and oneDNN's product on the panels give the same bits (bf16_paths_agree)") {
    if (!bf16_matmul_available() || !kernel_has_bf16_dot()) {
      MESSAGE("SKIPPED: no bf16 decode kernel here (" << std::string(cpu_isa_name()) << ")");
      return;
    }
    const bool amx = std::string(cpu_isa_name()) == "avx512_core_amx";
    MESSAGE("bf16_paths_agree: " << bf16_paths_agree() << " (oneDNN ISA " << std::string(cpu_isa_name()) << ")");
    // oneDNN 2.6's avx512_core_bf16 brgemm sums K in blocks of 512 / 1024 (measured); AMX tiles differ.
    if (!amx) REQUIRE(bf16_paths_agree());
    if (amx) CHECK_FALSE(bf16_paths_agree());  // brgemm's order depends on M there: never claimed
    CHECK(matmul_rows_invariant(Dtype::BF16) == bf16_paths_agree());
    CHECK_FALSE(matmul_rows_invariant(Dtype::F32));
    if (!bf16_paths_agree()) return;
    const int64_t shapes[][2] = {{300, 70}, {130, 600}, {64, 1024}, {80, 1100}, {7, 3001}, {2304, 768}};
    for (const auto& s : shapes) {
      const int64_t n_out = s[0], n_in = s[1];
      const Weight w(randv(static_cast<size_t>(n_out * n_in), 21), n_out, n_in, Dtype::BF16);
      const auto x = randv(static_cast<size_t>(20 * n_in), 22);
      const auto y0 = randv(static_cast<size_t>(20 * n_out), 23);
      for (int threads : {1, 2})
        for (bool acc : {false, true}) {
          Engine eng(threads);
          std::vector<float> ref(y0);  // 20 rows through oneDNN (batch-invariant: brgemm on the panels)
          matmul(eng, x.data(), 20, w, ref.data(), acc, true);
          for (int64_t m = 1; m <= kGemvMaxRows; ++m) {
            std::vector<float> y(y0);
            matmul(eng, x.data(), m, w, y.data(), acc, false);  // a decode step: kveval's kernel
            INFO("[" << n_out << ", " << n_in << "] threads=" << threads << " acc=" << acc << " m=" << m);
            CHECK(std::memcmp(y.data(), ref.data(), sizeof(float) * static_cast<size_t>(m * n_out)) == 0);
          }
        }
    }
  }

  TEST_CASE("gemv_rows refuses block dtypes, row counts outside 1..kGemvMaxRows and a missing scratch") {
    const Weight q(4, 32, Dtype::Q8_0), b(std::vector<float>(128, 1.0f), 4, 32, Dtype::BF16);
    std::vector<float> x(32 * (kGemvMaxRows + 1), 1.0f), y(4 * (kGemvMaxRows + 1)), scratch(1000);
    CHECK_THROWS_AS(gemv_rows(x.data(), 2, q, y.data(), false, 1, scratch.data()), kveval::ArgumentError);
    CHECK_THROWS_AS(gemv_rows(x.data(), 0, b, y.data(), false, 1, scratch.data()), kveval::ArgumentError);
    CHECK_THROWS_AS(gemv_rows(x.data(), kGemvMaxRows + 1, b, y.data(), false, 1, scratch.data()), kveval::ArgumentError);
    CHECK_THROWS_AS(gemv_rows(x.data(), 2, b, y.data(), false, 1, nullptr), kveval::ArgumentError);
    gemv_rows(x.data(), 2, b, y.data(), false, 1, scratch.data());
    CHECK(y[0] == 32.0f);
    CHECK(y[7] == 32.0f);
  }

  TEST_CASE("hand-computed bf16 one-row product over 96 columns (checks the column order of a whole and a partial 64-column panel)") {
    // W(n, k) = (k + 1) * (n - 32), x = [2, -1, 0.25]: y_n = (2 - 2 + 0.75) * (n - 32), exact in bf16
    // (integers up to 3 * 63 = 189 < 2^8) and f32.
    const int64_t n_out = 96, n_in = 3;
    std::vector<float> wv(static_cast<size_t>(n_out * n_in));
    for (int64_t n = 0; n < n_out; ++n)
      for (int64_t k = 0; k < n_in; ++k) wv[static_cast<size_t>(n * n_in + k)] = float((k + 1) * (n - 32));
    const Weight w(wv, n_out, n_in, Dtype::BF16);
    const std::vector<float> x = {2, -1, 0.25f};
    std::vector<float> y(static_cast<size_t>(n_out), 1.0f), scratch(static_cast<size_t>(gemv_scratch(w)));
    gemv(x.data(), w, y.data(), false, 1, scratch.data());
    for (int64_t n = 0; n < n_out; ++n) CHECK(y[static_cast<size_t>(n)] == 0.75f * float(n - 32));
    gemv(x.data(), w, y.data(), true, 2, scratch.data());
    for (int64_t n = 0; n < n_out; ++n) CHECK(y[static_cast<size_t>(n)] == 1.5f * float(n - 32));
  }

  TEST_CASE("hand-computed bf16 chains: the odd product of a pair first, subnormal inputs read as zero, subnormal sums flushed") {
    // Column 5 of a 32-column panel, the other columns zero; one chain (one chunk).
    // Pair order: w = [1, 0, 2^-12, -1], x = [1, 1, 2^-12, 1]: products 1, 0, 2^-24, -1. vdpbf16ps
    // adds the odd product of each pair first: (0 + 0) + 1 = 1, then (1 - 1) + 2^-24 = 2^-24; the
    // even one first would give (1 + 2^-24) - 1 = 0 (1 + 2^-24 rounds to 1).
    // DAZ: x = [2^-130 (a bf16 subnormal), 0, 0, 0] with w = [1, 0, 0, 0] gives 0, not 2^-130.
    // FTZ: x = [2^-70, 0, 0, 0], w = [2^-70, 0, 0, 0]: the product 2^-140 is exact but the sum is
    // subnormal, so 0.
    const int64_t n_out = 32, n_in = 4, col = 5;
    const auto run = [&](std::vector<float> wcol, const std::vector<float>& x, int64_t m) {
      std::vector<float> wv(static_cast<size_t>(n_out * n_in), 0.0f);
      for (int64_t k = 0; k < n_in; ++k) wv[static_cast<size_t>(col * n_in + k)] = wcol[static_cast<size_t>(k)];
      const Weight w(wv, n_out, n_in, Dtype::BF16);
      std::vector<float> xs, y(static_cast<size_t>(m * n_out), 7.0f), scratch(static_cast<size_t>(gemv_scratch(w, m)));
      for (int64_t r = 0; r < m; ++r) xs.insert(xs.end(), x.begin(), x.end());
      gemv_rows(xs.data(), m, w, y.data(), false, 1, scratch.data());
      CHECK(gemv_scalar(x.data(), w, col, 0.0f) == y[static_cast<size_t>(col)]);
      for (int64_t r = 1; r < m; ++r) CHECK(y[static_cast<size_t>(r * n_out + col)] == y[static_cast<size_t>(col)]);
      return y[static_cast<size_t>(col)];
    };
    for (int64_t m : {1, 4}) {
      CHECK(run({1, 0, std::ldexp(1.0f, -12), -1}, {1, 1, std::ldexp(1.0f, -12), 1}, m) == std::ldexp(1.0f, -24));
      CHECK(run({1, 0, 0, 0}, {std::ldexp(1.0f, -130), 0, 0, 0}, m) == 0.0f);
      CHECK(run({std::ldexp(1.0f, -70), 0, 0, 0}, {std::ldexp(1.0f, -70), 0, 0, 0}, m) == 0.0f);
      CHECK(run({1, 0, 0, 0}, {std::ldexp(1.0f, -120), 0, 0, 0}, m) == std::ldexp(1.0f, -120));  // normal: kept
    }
  }

  TEST_CASE("matmul runs bf16 decode steps through gemv with AVX512-BF16, within f32 rounding of oneDNN's bf16 product") {
    if (!bf16_matmul_available() || !kernel_has_bf16_dot()) {
      MESSAGE("SKIPPED: bf16 one-row products stay on oneDNN here (" << std::string(cpu_isa_name()) << ")");
      return;
    }
    check_matmul_routing(Dtype::BF16, decode_invariant_rows(Dtype::BF16) >= 5);  // 2..8 rows too, not on AMX
  }
}
