// Q8_0 and Q4_0 weights kept as the file's blocks (Dtype::Q8_0, Dtype::Q4_0):
// the vector kernel against its scalar twin (same bits) and a naive
// double-precision reference (extreme and zero scales included), the widened path for long products, batch invariance, and a warm
// engine that creates and allocates nothing; every case for both formats.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/random_values.hpp"
#include "backend/warm_products.hpp"
#include "backend/kernel_isa.hpp"
#include "backend/file_qblocks.hpp"
#include "backend/qblocks.hpp"
#include "util/error.hpp"
#include "util/half.hpp"

using namespace kveval::backend;

namespace {

using kveval::test::randv;

constexpr Dtype kFormats[] = {Dtype::Q8_0, Dtype::Q4_0};

/// The f16 bits of a block's scale: most random in [1e-4, 1e-2] (rounded to f16), and at fixed
/// blocks the extremes: f16's largest finite (65504), its smallest subnormal (2^-24), its largest
/// subnormal, and 0 with every quant 0 (an all-zero block).
uint16_t scale_bits(size_t block, std::mt19937& g) {
  switch (block % 13) {
    case 3: return 0x7BFF;  // 65504
    case 6: return 0x0001;  // 2^-24
    case 9: return 0x03FF;  // (1023 / 1024) * 2^-14
    case 11: return 0x0000;
    default: return kveval::util::f32_to_f16(std::uniform_real_distribution<float>(1e-4f, 1e-2f)(g));
  }
}

/// A random Q8_0 or Q4_0 matrix [n_out, n_in] in the file's layout (ggml-common.h block_q8_0: f16 d,
/// 32 int8; block_q4_0: f16 d, 16 bytes of nibbles): Q8_0 quants any int8 but -128 (ggml never writes
/// it), Q4_0 bytes any (nibbles 0..15, quants -8..7); scales as scale_bits.
struct Blocks {
  Dtype dt;
  int64_t n_out, n_in, bb, rs;  // bb: bytes per block; rs: bytes per row
  std::vector<uint8_t> q;
  Blocks(Dtype t, int64_t no, int64_t ni, uint32_t seed)
      : dt(t), n_out(no), n_in(ni), bb(t == Dtype::Q4_0 ? 18 : 34), rs(ni / 32 * bb), q(static_cast<size_t>(no * rs)) {
    std::mt19937 g(seed);
    std::uniform_int_distribution<int> qi(t == Dtype::Q8_0 ? -127 : 0, t == Dtype::Q8_0 ? 127 : 255);
    for (size_t b = 0; b < q.size() / static_cast<size_t>(bb); ++b) {
      uint8_t* blk = q.data() + b * static_cast<size_t>(bb);
      const uint16_t h = scale_bits(b, g);
      blk[0] = static_cast<uint8_t>(h & 0xFF);
      blk[1] = static_cast<uint8_t>(h >> 8);
      for (int64_t j = 2; j < bb; ++j) blk[j] = static_cast<uint8_t>(h == 0 ? (t == Dtype::Q4_0 ? 0x88 : 0) : qi(g));
    }
  }
  Weight weight() const {
    Weight w(n_out, n_in, dt);
    w.set_rows_file_blocks(0, q.data(), n_out);
    return w;
  }
  /// The quant of element (n, k), read straight from ggml's block layouts.
  int quant(int64_t n, int64_t k) const {
    const uint8_t* qs = q.data() + n * rs + k / 32 * bb + 2;
    const int j = static_cast<int>(k % 32);
    if (dt == Dtype::Q8_0) return static_cast<int8_t>(qs[j]);
    return (j < 16 ? qs[j] & 15 : qs[j - 16] >> 4) - 8;
  }
  /// The scale of element (n, k)'s block, its f16 bits decoded here by hand (sign, 5-bit exponent, 10-bit mantissa).
  double scale(int64_t n, int64_t k) const {
    const uint8_t* blk = q.data() + n * rs + k / 32 * bb;
    const int h = blk[0] | (blk[1] << 8), e = (h >> 10) & 31, mant = h & 1023;
    const double v = e == 0 ? std::ldexp(mant, -24) : std::ldexp(1024 + mant, e - 25);
    return (h & 0x8000) ? -v : v;
  }
  /// The scalar twin of the kernel for row n of W and x.
  float dot(int64_t n, const float* x) const { return file_qblocks_dot_scalar(dt, q.data() + n * rs, x, n_in); }
  /// Σ_k d * q * x in double, and Σ |d q x| (the scale of the rounding error).
  std::pair<double, double> ref(int64_t n, const float* x) const {
    double s = 0, a = 0;
    for (int64_t k = 0; k < n_in; ++k) {
      const double t = scale(n, k) * quant(n, k) * x[k];
      s += t;
      a += std::fabs(t);
    }
    return {s, a};
  }
};

/// The block kernel for w's dtype.
void kernel(const float* x, int64_t m, const Weight& w, float* y, bool acc, int threads) {
  blocks_matmul(x, m, w, y, acc, threads);
}

}  // namespace

TEST_SUITE("backend.qblocks") {
  TEST_CASE("the Q8_0 and Q4_0 kernels give the scalar twin's bits and the double reference within f32 rounding") {
    MESSAGE("Q8_0/Q4_0 kernel: " << std::string(kernel_isa_name(kernel_isa())));
    for (Dtype dt : kFormats)
      for (int64_t n_in : {32, 64, 288, 768, 4096}) {
        const int64_t n_out = 67;
        const Blocks mat(dt, n_out, n_in, static_cast<uint32_t>(n_in));
        const Weight w = mat.weight();
        const auto elems = static_cast<size_t>(n_out * n_in);
        CHECK(w.bytes() == elems / 32 * (dt == Dtype::Q4_0 ? 18 : 34));  // the file's bytes
        const auto x = randv(static_cast<size_t>(16 * n_in), 5);
        const auto y0 = randv(static_cast<size_t>(16 * n_out), 6);
        for (int threads : {1, 2})
          for (bool acc : {false, true})
            for (int64_t m : {1, 2, 3, 4, 5, 7, 8, 16}) {
              std::vector<float> y(y0);
              kernel(x.data(), m, w, y.data(), acc, threads);
              int64_t differ = 0;
              double worst = 0;
              for (int64_t r = 0; r < m; ++r)
                for (int64_t n = 0; n < n_out; ++n) {
                  const float s = mat.dot(n, x.data() + r * n_in);
                  const float want = acc ? y0[static_cast<size_t>(r * n_out + n)] + s : s;
                  if (std::memcmp(&want, &y[static_cast<size_t>(r * n_out + n)], sizeof(float)) != 0) ++differ;
                  const auto [e, a] = mat.ref(n, x.data() + r * n_in);
                  worst = std::max(worst, std::fabs(double(s) - e) / (a + 1e-30));
                }
              INFO(std::string(to_string(dt)) << " n_in=" << n_in << " threads=" << threads << " acc=" << acc << " m=" << m);
              CHECK(differ == 0);
              CHECK(worst < 1e-6);  // n_in / 32 + 4 roundings of relative 2^-24 each
            }
      }
  }

  TEST_CASE("hand-computed Q8_0 and Q4_0 products") {
    // One row, two blocks: block 0 all quants 2 with d = 0.5 (f16 0x3800), block 1 quants -1 with
    // d = 0.25 (0x3400); each block its little-endian d, then its quants.
    std::vector<uint8_t> q(2 * 34, 2);
    std::fill(q.begin() + 34, q.end(), uint8_t{0xFF});
    q[0] = 0x00, q[1] = 0x38, q[34] = 0x00, q[35] = 0x34;
    Weight w(1, 64, Dtype::Q8_0);
    w.set_rows_file_blocks(0, q.data(), 1);
    CHECK(w.bytes() == 68);
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
    widen_rows(w, 0, 1, t.data(), 64, 1);
    CHECK(t[0] == 1.0f);
    CHECK(t[63] == -0.25f);
    // The same values in Q4_0: quant 2 is nibble 10 (0xAA: both halves of a
    // byte), quant -1 nibble 7 (0x77); then block 1 element 20 (a high nibble) -> quant 7 (nibble 15).
    std::vector<uint8_t> p(2 * 18, 0xAA);
    std::fill(p.begin() + 18, p.end(), uint8_t{0x77});
    p[0] = 0x00, p[1] = 0x38, p[18] = 0x00, p[19] = 0x34;
    p[18 + 2 + 4] = 0xF7;  // block 1, element 4 (low) stays -1, element 20 (high) becomes 7
    Weight w4(1, 64, Dtype::Q4_0);
    w4.set_rows_file_blocks(0, p.data(), 1);
    CHECK(w4.bytes() == 36);
    x[52] = 2.0f;  // block 1 element 20: 0.25 * (7 * 2 - (-1) * 1) more: -9 + 3.75 = -5.25
    y = 100.0f;
    matmul(eng, x.data(), 1, w4, &y, true);
    CHECK(y == 128.75f);
    matmul(eng, x.data(), 1, w4, &y, false, true);
    CHECK(y == 28.75f);
    widen_rows(w4, 0, 1, t.data(), 64, 1);
    CHECK(t[0] == 1.0f);
    CHECK(t[36] == -0.25f);
    CHECK(t[52] == 1.75f);
  }

  TEST_CASE("long and batch-invariant Q8_0/Q4_0 products: widened chunks match the reference, rows alone match rows in a batch") {
    // n_out 3000 > one chunk of widened rows for n_in 512 (2048 rows), so two chunks.
    for (Dtype dt : kFormats) {
      INFO(std::string(to_string(dt)));
      const Blocks mat(dt, 3000, 512, 9);
      const Weight w = mat.weight();
      const int64_t M = 40;
      const auto x = randv(static_cast<size_t>(M * 512), 10);
      for (int threads : {1, 2}) {
        Engine eng(threads);
        kveval::test::check_long_products(eng, mat, w, x, M, 3000, 512);
    }
    }
  }

  TEST_CASE("bf16 tiles: long and batch-invariant products give a BF16 weight's bits from the same values") {
    // n_out 4200 with n_in 512: three chunks of 2048 panels' rows (the last one partial, 104 rows: two
    // panels, one padded); 40 rows (> the block kernels' 32) and single batch-invariant rows; accumulate.
    if (!kernel_has_bf16_dot()) {
      MESSAGE("SKIPPED: no bf16 dot products on this CPU");
      return;
    }
    for (Dtype dt : kFormats) {
      INFO(std::string(to_string(dt)));
      const Blocks mat(dt, 4200, 512, 21);
      const Weight w = mat.weight();
      std::vector<float> values(static_cast<size_t>(4200 * 512));
      widen_rows(w, 0, 4200, values.data(), 512, 2);
      const Weight b(values, 4200, 512, Dtype::BF16);
      const int64_t M = 40;
      const auto x = randv(static_cast<size_t>(M * 512), 22);
      const auto y0 = randv(static_cast<size_t>(M * 4200), 23);
      for (int threads : {1, 2}) {
        Engine eng(threads);
        eng.set_block_tiles_bf16(true);
        for (bool acc : {false, true}) {
          std::vector<float> yt = y0, yb = y0;
          matmul(eng, x.data(), M, w, yt.data(), acc);
          matmul(eng, x.data(), M, b, yb.data(), acc);
          CHECK(std::memcmp(yt.data(), yb.data(), sizeof(float) * yt.size()) == 0);
        }
        // single batch-invariant rows: the BF16 weight's values within f32 summation order (oneDNN's brgemm may
        // block one row differently for the chunk's width than for the whole matrix, so bits are not promised)
        std::vector<float> alone(4200), want(4200);
        for (int64_t r = 0; r < M; r += 13) {
          matmul(eng, x.data() + r * 512, 1, w, alone.data(), false, true);
          matmul(eng, x.data() + r * 512, 1, b, want.data(), false, true);
          double worst = 0;
          for (size_t n = 0; n < want.size(); ++n)
            worst = std::max(worst, std::fabs(double(alone[n]) - want[n]) / (1.0 + std::fabs(want[n])));
          CHECK(worst < 1e-5);
        }
        Engine exact(threads);  // without bf16 tiles: f32 widening, not the BF16 weight's bits
        std::vector<float> yf(static_cast<size_t>(M * 4200)), yb(yf.size());
        matmul(exact, x.data(), M, w, yf.data());
        matmul(exact, x.data(), M, b, yb.data());
        CHECK(std::memcmp(yf.data(), yb.data(), sizeof(float) * yf.size()) != 0);
      }
    }
  }

  TEST_CASE("widen_rows gives d * quant read from ggml's layout for every element") {
    for (Dtype dt : kFormats) {
      const Blocks mat(dt, 5, 96, 11);
      const Weight w = mat.weight();
      std::vector<float> t(static_cast<size_t>(3 * 100), -1.0f);
      widen_rows(w, 2, 3, t.data(), 100, 2);  // rows 2..4, row stride 100
      int64_t differ = 0;
      for (int64_t j = 0; j < 3; ++j)
        for (int64_t k = 0; k < 96; ++k)
          differ += t[static_cast<size_t>(j * 100 + k)] != mat.scale(2 + j, k) * static_cast<float>(mat.quant(2 + j, k));
      INFO(std::string(to_string(dt)));
      CHECK(differ == 0);
      CHECK(t[96] == -1.0f);  // the row padding is not written
    }
  }

  TEST_CASE("gather_rows decodes the looked-up rows (the last row included) to d * quant") {
    for (Dtype dt : kFormats) {
      const Blocks mat(dt, 7, 96, 13);
      const Weight w = mat.weight();
      const std::vector<int32_t> ids = {6, 0, 3, 3, 4};
      std::vector<float> t(ids.size() * 96, -1.0f);
      gather_rows(w, ids, t.data());
      int64_t differ = 0;
      for (size_t i = 0; i < ids.size(); ++i)
        for (int64_t k = 0; k < 96; ++k)
          differ += t[i * 96 + static_cast<size_t>(k)] != mat.scale(ids[i], k) * static_cast<float>(mat.quant(ids[i], k));
      INFO(std::string(to_string(dt)));
      CHECK(differ == 0);
      const std::vector<int32_t> past = {7}, negative = {-1};
      CHECK_THROWS_AS(gather_rows(w, past, t.data()), kveval::ArgumentError);
      CHECK_THROWS_AS(gather_rows(w, negative, t.data()), kveval::ArgumentError);
    }
    const Weight f32(std::vector<float>(64, 1.0f), 2, 32);
    std::vector<float> t(32);
    const std::vector<int32_t> zero = {0};
    CHECK_THROWS_AS(gather_rows(f32, zero, t.data()), kveval::ArgumentError);
  }

  TEST_CASE("warm Q8_0/Q4_0 products create no primitive and allocate nothing") {
    for (Dtype dt : kFormats) {
      const Blocks mat(dt, 1024, 256, 3);
      kveval::test::check_warm_products_allocate_nothing(mat.weight());
    }
  }

  TEST_CASE("Q8_0 and Q4_0 weights refuse bad shapes and the other setters") {
    CHECK_THROWS_AS(Weight(4, 48, Dtype::Q8_0), kveval::ArgumentError);
    CHECK_THROWS_AS(Weight(4, 48, Dtype::Q4_0), kveval::ArgumentError);
    Weight w4(4, 64, Dtype::Q4_0);
    CHECK(w4.ld() == 36);
    std::vector<uint8_t> p(5 * 36);
    std::vector<float> x(64), y(4);
    CHECK_THROWS_AS(w4.set_rows_file_blocks(0, p.data(), 5), kveval::ArgumentError);
    CHECK_THROWS_AS(w4.set_rows(0, x.data(), 1), kveval::ArgumentError);
    CHECK(std::string(to_string(Dtype::Q4_0)) == "q4_0");
    CHECK(file_blocks_bytes(Dtype::Q4_0, 64) == 36);
    Weight w(4, 64, Dtype::Q8_0);
    CHECK(w.ld() == 68);
    std::vector<float> f(256);
    CHECK_THROWS_AS(w.set_rows(0, f.data(), 4), kveval::ArgumentError);
    CHECK_THROWS_AS(w.set_rows_file_blocks(3, p.data(), 2), kveval::ArgumentError);
    CHECK(file_blocks_bytes(Dtype::Q8_0, 64) == 68);
    CHECK(std::string(to_string(Dtype::Q8_0)) == "q8_0");
  }

  TEST_CASE("widened_bf16_bytes: the whole matrix's panels up to 64 MiB, and one f32 tile of 16 rows per thread") {
    // Llama-3.2-1B's [gate; up]: 16384 x 2048, 256 panels of 2048 x 64 bf16 (64 MiB) + 2 x 16 x 2048 floats
    CHECK(widened_bf16_bytes(16384, 2048, 2) == 67108864 + 262144);
    // a 128,256-token output layer widens 64 MiB at a time
    CHECK(widened_bf16_bytes(128256, 2048, 2) == 67108864 + 262144);
    // 100 x 777: n_in padded to 800, 2 panels of 800 x 64 bf16 + 16 x 777 floats
    CHECK(widened_bf16_bytes(100, 777, 1) == 2 * 800 * 64 * 2 + 16 * 777 * 4);
  }
}
