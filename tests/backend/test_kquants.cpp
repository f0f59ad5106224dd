// Q4_K, Q5_K and Q6_K weights kept as the file's super-blocks (Dtype::Q4_K,
// Q5_K, Q6_K): decoded values against a naive decoder written from ggml's
// dequantize_row_q4_K / q6_K, the kernel against its scalar twin (same bits)
// and a float64 reference, the widened path for long products, batch
// invariance and a warm engine that allocates nothing; every case for both formats.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/kernel_isa.hpp"
#include "backend/kquants.hpp"
#include "backend/qblocks.hpp"
#include "backend/random_values.hpp"
#include "backend/warm_products.hpp"
#include "util/error.hpp"
#include "util/half.hpp"

using namespace kveval::backend;

namespace {

using kveval::test::randv;

constexpr Dtype kFormats[] = {Dtype::Q4_K, Dtype::Q5_K, Dtype::Q6_K};

/// f32 a * b, rounded once (the product of two floats is exact in double).
float mul(float a, float b) { return static_cast<float>(double(a) * double(b)); }
/// f32 a - b, rounded once (double rounding is innocuous for binary32 in binary64).
float sub(float a, float b) { return static_cast<float>(double(a) - double(b)); }

/// Super-block i of a row as floats, from ggml's dequantize_row_q4_K, q5_K
/// and q6_K (ggml-quants.c), each product and difference rounded to f32.
void naive_decode(Dtype dt, const uint8_t* b, float* y) {
  if (dt == Dtype::Q4_K || dt == Dtype::Q5_K) {
    const bool five = dt == Dtype::Q5_K;
    const float d = kveval::util::f16_to_f32(static_cast<uint16_t>(b[0] | b[1] << 8));
    const float dmin = kveval::util::f16_to_f32(static_cast<uint16_t>(b[2] | b[3] << 8));
    const uint8_t* q = b + 4;  // scales[12]
    const auto scale_min = [q](int j, int& sc, int& m) {  // ggml's get_scale_min_k4
      if (j < 4) {
        sc = q[j] & 63;
        m = q[j + 4] & 63;
      } else {
        sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
      }
    };
    const uint8_t* qs = b + (five ? 48 : 16);
    const uint8_t* qh = b + 16;  // Q5_K only
    int is = 0;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0; j < 256; j += 64) {
      int sc, m;
      scale_min(is, sc, m);
      const float d1 = mul(d, float(sc)), m1 = mul(dmin, float(m));
      scale_min(is + 1, sc, m);
      const float d2 = mul(d, float(sc)), m2 = mul(dmin, float(m));
      for (int l = 0; l < 32; ++l) *y++ = sub(mul(d1, float((qs[l] & 0xF) + (five && (qh[l] & u1) ? 16 : 0))), m1);
      for (int l = 0; l < 32; ++l) *y++ = sub(mul(d2, float((qs[l] >> 4) + (five && (qh[l] & u2) ? 16 : 0))), m2);
      qs += 32;
      is += 2;
      u1 = static_cast<uint8_t>(u1 << 2);
      u2 = static_cast<uint8_t>(u2 << 2);
    }
    return;
  }
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = kveval::util::f16_to_f32(static_cast<uint16_t>(b[208] | b[209] << 8));
  for (int n = 0; n < 256; n += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = mul(mul(d, float(sc[is])), float(q1));
      y[l + 32] = mul(mul(d, float(sc[is + 2])), float(q2));
      y[l + 64] = mul(mul(d, float(sc[is + 4])), float(q3));
      y[l + 96] = mul(mul(d, float(sc[is + 6])), float(q4));
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

/// A random Q4_K, Q5_K or Q6_K matrix [n_out, n_in] in the file's bytes. Super-blocks
/// cycle through kinds: random bytes with d (and dmin) of moderate size and
/// either sign; extreme scales (d = 65504, the largest f16, or the smallest
/// subnormal 2^-24, with every 6-bit scale 63 and every quant at its end);
/// and all-zero blocks.
struct KBlocks {
  Dtype dt;
  int64_t n_out, n_in, rs;  // rs: bytes per row
  std::vector<uint8_t> b;
  std::vector<float> v;  // naive_decode of every super-block, [n_out, n_in]
  KBlocks(Dtype t, int64_t no, int64_t ni, uint32_t seed)
      : dt(t), n_out(no), n_in(ni), rs(ni / 256 * kquant_block_bytes(t)), b(static_cast<size_t>(no * rs)),
        v(static_cast<size_t>(no * ni)) {
    std::mt19937 g(seed);
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> mag(1e-4f, 1e-1f);
    const int64_t bb = kquant_block_bytes(t), nb = no * ni / 256;
    for (int64_t i = 0; i < nb; ++i) {
      uint8_t* p = b.data() + i * bb;
      const int kind = static_cast<int>(i % 7);
      for (int64_t j = 0; j < bb; ++j) p[j] = kind == 6 ? 0 : kind == 5 ? 0xFF : static_cast<uint8_t>(byte(g));
      uint16_t dh = kveval::util::f32_to_f16(mag(g) * (byte(g) & 1 ? -1.0f : 1.0f));
      uint16_t mh = kveval::util::f32_to_f16(mag(g));
      if (kind == 4) dh = mh = 0x7BFF;          // 65504
      if (kind == 5) dh = mh = 0x0001;          // 2^-24, with every bit of scales and quants set
      if (kind == 6) dh = mh = 0;               // all-zero block
      if (t != Dtype::Q6_K) {
        p[0] = dh & 0xFF, p[1] = dh >> 8, p[2] = mh & 0xFF, p[3] = mh >> 8;
        if (kind == 4) std::fill(p + 4, p + 16, uint8_t{0xFF});  // every sc and m 63
      } else {
        p[208] = dh & 0xFF, p[209] = dh >> 8;
        if (kind == 4) std::fill(p + 192, p + 208, uint8_t{0x80});  // every scale -128
      }
      naive_decode(t, p, v.data() + i * 256);
    }
  }
  Weight weight() const {
    Weight w(n_out, n_in, dt);
    w.set_rows_kquant(0, b.data(), n_out);
    return w;
  }
  float dot(int64_t n, const float* x) const { return kquant_dot_scalar(dt, b.data() + n * rs, x, n_in); }
  /// Σ_k v x in double, and Σ |v x| (the scale of the rounding error).
  std::pair<double, double> ref(int64_t n, const float* x) const {
    double s = 0, a = 0;
    for (int64_t k = 0; k < n_in; ++k) {
      const double t = double(v[static_cast<size_t>(n * n_in + k)]) * x[k];
      s += t;
      a += std::fabs(t);
    }
    return {s, a};
  }
};

}  // namespace

TEST_SUITE("backend.kquants") {
  TEST_CASE("Q4_K, Q5_K and Q6_K decode to ggml's values, every element, on every path") {
    for (Dtype dt : kFormats) {
      INFO(std::string(to_string(dt)));
      const KBlocks mat(dt, 9, 1792, 21);  // 63 super-blocks: every kind 9 times
      std::vector<float> dec(mat.v.size());
      kquant_decode(dt, mat.b.data(), dec.data(), 9 * 7);
      CHECK(std::memcmp(dec.data(), mat.v.data(), sizeof(float) * dec.size()) == 0);
      const Weight w = mat.weight();
      CHECK(w.bytes() == mat.b.size());
      std::vector<float> t(static_cast<size_t>(5 * 1800), -1.0f);
      widen_rows(w, 3, 5, t.data(), 1800, 2);  // rows 3..7, row stride 1800
      int64_t differ = 0;
      for (int64_t j = 0; j < 5; ++j)
        differ += std::memcmp(t.data() + j * 1800, mat.v.data() + (3 + j) * 1792, sizeof(float) * 1792) != 0;
      CHECK(differ == 0);
      CHECK(t[1792] == -1.0f);  // the row padding is not written
      bool zeros = true, huge = false;
      for (int e = 0; e < 256; ++e) zeros = zeros && mat.v[6 * 256 + e] == 0.0f;
      for (int e = 0; e < 256; ++e) huge = huge || std::fabs(mat.v[4 * 256 + e]) > 1e6f;
      CHECK(zeros);
      CHECK(huge);
    }
  }

  TEST_CASE("the Q4_K, Q5_K and Q6_K kernels give the scalar twin's bits and the double reference within f32 rounding") {
    MESSAGE("K-quant kernel: " << std::string(kernel_isa_name(kernel_isa())));
    for (Dtype dt : kFormats)
      for (int64_t n_in : {256, 512, 1792, 4096}) {
        // 67 rows: with 2 threads the shares are rows 0-33 and 34-66, so the
        // first and last row of each share are among those checked.
        const int64_t n_out = 67;
        const KBlocks mat(dt, n_out, n_in, static_cast<uint32_t>(n_in + 1));
        const Weight w = mat.weight();
        const auto x = randv(static_cast<size_t>(33 * n_in), 5);
        const auto y0 = randv(static_cast<size_t>(33 * n_out), 6);
        for (int threads : {1, 2})
          for (bool acc : {false, true})
            for (int64_t m : {1, 2, 3, 5, 7, 8, 9, 16, 33}) {
              std::vector<float> y(y0);
              kquant_matmul(x.data(), m, w, y.data(), acc, threads);
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
              // Each lane's chain is n_in / 32 fmas, then 5 sums: that many roundings of relative 2^-24.
              CHECK(worst < double(n_in / 32 + 5) * 0x1p-24);
            }
      }
  }

  TEST_CASE("hand-computed Q4_K and Q6_K products") {
    // Q4_K: d = 1, dmin = 0.5; sc 0-3 = 2, m 0-3 = 3, sc/m 4-7 = 0; every qs
    // byte 0x21 (low nibble 1, high 2). Sub-blocks 0, 2: 2 * 1 - 1.5 = 0.5;
    // 1, 3: 2 * 2 - 1.5 = 2.5; 4-7: 0. Against x = 1: 32 * 6 = 192.
    std::vector<uint8_t> b(144, 0);
    b[1] = 0x3C, b[3] = 0x38;
    std::fill(b.begin() + 4, b.begin() + 8, uint8_t{2});
    std::fill(b.begin() + 8, b.begin() + 12, uint8_t{3});
    std::fill(b.begin() + 16, b.end(), uint8_t{0x21});
    Weight w(1, 256, Dtype::Q4_K);
    w.set_rows_kquant(0, b.data(), 1);
    std::vector<float> x(256, 1.0f);
    float y = 100.0f;
    Engine eng(1);
    matmul(eng, x.data(), 1, w, &y, true);
    CHECK(y == 292.0f);
    matmul(eng, x.data(), 1, w, &y, false, true);  // the widened, batch-invariant path
    CHECK(y == 192.0f);
    std::vector<float> t(256);
    widen_rows(w, 0, 1, t.data(), 256, 1);
    CHECK(t[0] == 0.5f);
    CHECK(t[32] == 2.5f);
    CHECK(t[64] == 0.5f);
    CHECK(t[255] == 0.0f);
    // Q6_K: d = 0.5, scales 0-7 = 2, 8-15 = -1, every quant 0 - 32: the first
    // half 0.5 * 2 * -32 = -32, the second 0.5 * -1 * -32 = 16; then element 0's
    // low nibble 5 (quant -27): -27. Against x = 1: -4096 + 2048 + 5 = -2043.
    std::vector<uint8_t> q(210, 0);
    std::fill(q.begin() + 192, q.begin() + 200, uint8_t{2});
    std::fill(q.begin() + 200, q.begin() + 208, uint8_t{0xFF});
    q[209] = 0x38;
    q[0] = 0x05;
    Weight w6(1, 256, Dtype::Q6_K);
    w6.set_rows_kquant(0, q.data(), 1);
    y = 0.0f;
    matmul(eng, x.data(), 1, w6, &y, true);
    CHECK(y == -2043.0f);
    matmul(eng, x.data(), 1, w6, &y, false, true);
    CHECK(y == -2043.0f);
    widen_rows(w6, 0, 1, t.data(), 256, 1);
    CHECK(t[0] == -27.0f);
    CHECK(t[1] == -32.0f);
    CHECK(t[200] == 16.0f);
  }

  TEST_CASE("long and batch-invariant K-quant products: widened chunks match the reference, rows alone match rows in a batch") {
    // n_out 3000 > one chunk of widened rows for n_in 512 (2048 rows), so two chunks.
    for (Dtype dt : kFormats) {
      INFO(std::string(to_string(dt)));
      const KBlocks mat(dt, 3000, 512, 9);
      const Weight w = mat.weight();
      const int64_t M = 40;  // above the block kernel's 32 rows: the widened path
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
        // Decode steps (block kernel): each row's bits as alone, whatever m.
        std::vector<float> few(static_cast<size_t>(8 * 3000)), one(few.size());
        matmul(eng, x.data(), 8, w, few.data());
        for (int64_t r = 0; r < 8; ++r) matmul(eng, x.data() + r * 512, 1, w, one.data() + r * 3000);
        CHECK(std::memcmp(few.data(), one.data(), sizeof(float) * few.size()) == 0);
      }
    }
  }

  TEST_CASE("gather_rows decodes the looked-up K-quant rows to the naive decoder's bits, extreme and zero blocks included") {
    for (Dtype dt : kFormats) {
      INFO(std::string(to_string(dt)));
      const KBlocks mat(dt, 9, 512, 41);  // 18 super-blocks: every kind of KBlocks, extreme scales and zeros
      const Weight w = mat.weight();
      // row 2: blocks 4 and 5 (the largest and the smallest scales); row 3: block 6 (all zero)
      const std::vector<int32_t> ids = {8, 0, 2, 2, 3};
      std::vector<float> got(ids.size() * 512);
      gather_rows(w, ids, got.data());
      for (size_t i = 0; i < ids.size(); ++i)
        CHECK(std::memcmp(got.data() + i * 512, mat.v.data() + static_cast<size_t>(ids[i]) * 512, 512 * sizeof(float)) == 0);
      const std::vector<int32_t> past = {9};
      CHECK_THROWS_AS(gather_rows(w, past, got.data()), kveval::ArgumentError);
    }
  }

  TEST_CASE("warm K-quant products create no primitive and allocate nothing") {
    for (Dtype dt : kFormats) {
      const KBlocks mat(dt, 1024, 256, 3);
      kveval::test::check_warm_products_allocate_nothing(mat.weight());
    }
  }

  TEST_CASE("K-quant weights refuse bad shapes and the other setters") {
    CHECK_THROWS_AS(Weight(4, 288, Dtype::Q4_K), kveval::ArgumentError);
    CHECK_THROWS_AS(Weight(4, 128, Dtype::Q6_K), kveval::ArgumentError);
    Weight w(4, 256, Dtype::Q6_K);
    CHECK(w.ld() == 210);
    CHECK(w.bytes() == 4 * 210);
    std::vector<uint8_t> p(5 * 210);
    std::vector<float> f(5 * 256), y(4);
    CHECK_THROWS_AS(w.set_rows_kquant(0, p.data(), 5), kveval::ArgumentError);
    CHECK_THROWS_AS(w.set_rows(0, f.data(), 1), kveval::ArgumentError);
    CHECK_THROWS_AS(w.set_rows_q8_0(0, reinterpret_cast<const int8_t*>(p.data()), f.data(), 1), kveval::ArgumentError);
    Weight w8(4, 256, Dtype::Q8_0);
    CHECK_THROWS_AS(w8.set_rows_kquant(0, p.data(), 1), kveval::ArgumentError);
    CHECK_THROWS_AS(kquant_matmul(f.data(), 1, w8, y.data(), false, 1), kveval::ArgumentError);
    CHECK_THROWS_AS(q8_0_matmul(f.data(), 1, w, y.data(), false, 1), kveval::ArgumentError);
    CHECK(std::string(to_string(Dtype::Q4_K)) == "q4_k");
    CHECK(std::string(to_string(Dtype::Q5_K)) == "q5_k");
    CHECK(std::string(to_string(Dtype::Q6_K)) == "q6_k");
    CHECK(kquant_bytes(Dtype::Q5_K, 512) == 352);
    CHECK(kquant_bytes(Dtype::Q4_K, 512) == 288);
    CHECK(kquant_bytes(Dtype::Q6_K, 512) == 420);
  }
}
