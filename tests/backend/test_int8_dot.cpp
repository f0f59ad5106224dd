// Decode products with int8 activations (MatmulMode::Int8, int8_dot.hpp) on
// Q8_0, Q4_0, Q4_K, Q5_K and Q6_K blocks: the quantizers against ggml's reference
// formulas, the kernels against a naive reference that decodes the blocks'
// integers itself and sums in int64 / double, the VNNI and scalar forms bit for
// bit, edge cases (zero, tiny and huge activations, sizes) and matmul's routing.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "backend/int8_dot.hpp"
#include "backend/random_values.hpp"
#include "util/error.hpp"
#include "util/half.hpp"

using namespace kveval::backend;
using kveval::test::randv;

namespace {

constexpr Dtype kTypes[] = {Dtype::Q8_0, Dtype::Q4_0, Dtype::Q4_K, Dtype::Q5_K, Dtype::Q6_K};

uint16_t h16(float f) { return kveval::util::f32_to_f16(f); }
/// Q8_0 or Q4_0: blocks of 32 with int8 activations quantized per 32 (quantize_row_q8_0).
bool q32(Dtype dt) { return dt == Dtype::Q8_0 || dt == Dtype::Q4_0; }
float f16(const uint8_t* p) { return kveval::util::f16_to_f32(static_cast<uint16_t>(p[0] | p[1] << 8)); }

/// A random matrix of `dt` [n_out, n_in]: its bytes (Q8_0, Q4_0: quants and
/// scales apart, written into the file's blocks for the Weight) and a Weight. With `unit`, every scale is 1 (d, dmin of the
/// K-quants; Q8_0's d) and the K-quants' 6-bit / int8 scales small, so that
/// products with integer activations are exact in f32. Otherwise blocks cycle
/// through random bytes with moderate scales, extreme ones (f16 65504 with every
/// bit of the quants and scales set; Q8_0, Q4_0: also f16's least subnormal) and all-zero blocks.
struct Mat {
  Dtype dt;
  int64_t n_out, n_in;
  std::vector<uint8_t> b;      // K-quants: rows of super-blocks; Q8_0: int8 quants [n_out, n_in]; Q4_0: [n_out, n_in / 2]
  std::vector<float> scales;   // Q8_0, Q4_0: [n_out, n_in / 32]
  Weight w;
  Mat(Dtype t, int64_t no, int64_t ni, uint32_t seed, bool unit = false) : dt(t), n_out(no), n_in(ni) {
    std::mt19937 g(seed);
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> mag(1e-3f, 1e-1f);
    if (q32(t)) {
      const int64_t qb = t == Dtype::Q4_0 ? 16 : 32;  // quant bytes per block
      b.resize(static_cast<size_t>(no * ni / kQBlock * qb));
      scales.resize(static_cast<size_t>(no * ni / kQBlock));
      for (auto& q : b) q = static_cast<uint8_t>(byte(g));
      for (size_t i = 0; i < scales.size(); ++i)
        scales[i] = unit ? 1.0f : i % 5 == 3 ? 65504.0f : i % 5 == 4 ? 0.0f : i % 7 == 6 ? 0x1p-24f  // f16's least subnormal
                    : f16v(mag(g) * (byte(g) & 1 ? -1 : 1));
      std::vector<uint8_t> file(scales.size() * static_cast<size_t>(qb + 2));  // ggml's block_q8_0 / block_q4_0
      for (size_t i = 0; i < scales.size(); ++i) {
        uint8_t* p = file.data() + i * static_cast<size_t>(qb + 2);
        const uint16_t h = h16(scales[i]);
        p[0] = h & 0xFF, p[1] = h >> 8;
        std::memcpy(p + 2, b.data() + i * static_cast<size_t>(qb), static_cast<size_t>(qb));
      }
      w = Weight(no, ni, t);
      w.set_rows_file_blocks(0, file.data(), no);
      return;
    }
    const int64_t bb = kquant_block_bytes(t), nb = no * ni / kKBlock;
    b.resize(static_cast<size_t>(nb * bb));
    for (int64_t i = 0; i < nb; ++i) {
      uint8_t* p = b.data() + i * bb;
      const int kind = unit ? 0 : static_cast<int>(i % 5);
      for (int64_t j = 0; j < bb; ++j) p[j] = kind == 4 ? 0 : kind == 3 ? 0xFF : static_cast<uint8_t>(byte(g));
      uint16_t d = h16(unit ? 1.0f : mag(g) * (byte(g) & 1 ? -1.0f : 1.0f)), dm = h16(unit ? 1.0f : mag(g));
      if (kind == 3) d = dm = 0x7BFF;  // 65504
      if (kind == 4) d = dm = 0;
      if (t != Dtype::Q6_K) {
        p[0] = d & 0xFF, p[1] = d >> 8, p[2] = dm & 0xFF, p[3] = dm >> 8;
        if (unit) std::fill(p + 4, p + 16, uint8_t{0x03});  // every scale and min 3
      } else {
        p[208] = d & 0xFF, p[209] = d >> 8;
        if (unit)
          for (int s = 0; s < 16; ++s) p[192 + s] = static_cast<uint8_t>(static_cast<int8_t>(s % 7 - 3));
      }
    }
    w = Weight(no, ni, t);
    w.set_rows_file_blocks(0, b.data(), no);
  }
  static float f16v(float f) { return kveval::util::f16_to_f32(h16(f)); }
};

/// The quantized activations, from the library's quantizers (checked apart).
struct QRows {
  std::vector<int8_t> qs;
  std::vector<float> d;
  std::vector<int16_t> bs;
};

QRows quantize(Dtype dt, const float* x, int64_t m, int64_t K) {
  QRows q;
  q.qs.resize(static_cast<size_t>(m * K));
  const int64_t blk = q32(dt) ? kQBlock : kKBlock;
  q.d.resize(static_cast<size_t>(m * K / blk));
  q.bs.resize(static_cast<size_t>(m * K / kKBlock * 16) + 1);
  for (int64_t r = 0; r < m; ++r) {
    if (q32(dt))
      quantize_row_q8_0(x + r * K, K, q.qs.data() + r * K, q.d.data() + r * K / blk);
    else
      quantize_row_q8_K(x + r * K, K, q.qs.data() + r * K, q.d.data() + r * K / blk, q.bs.data() + r * K / kKBlock * 16);
  }
  return q;
}

/// The kernel's int32 lane (int8_dot.hpp) of element e (0-255) of a K-quant super-block:
/// 4 (p / 16) + 2 s + (p % 16) / 8 with r = e % 128, Q4_K/Q5_K s = (r / 32) % 2,
/// p = r % 32 + 32 (r / 64); Q6_K s = r / 64, p = r % 64.
int kquant_lane(Dtype dt, int e) {
  const int r = e % 128, s = dt == Dtype::Q6_K ? r / 64 : (r / 32) % 2;
  const int p = dt == Dtype::Q6_K ? r % 64 : r % 32 + 32 * (r / 64);
  return 4 * (p / 16) + 2 * s + (p % 16) / 8;
}

/// Naive output (n, r) from the blocks' integers: per block the integer sum in
/// int64 (the K-quants' mins from the quants themselves, not bsums), scaled in
/// double. `isum_max` receives the largest |integer sum| of a block; `mag` the
/// sum of |terms| (the scale of the kernel's f32 rounding): the kernel adds each
/// block as lane partials, so the terms are the partials' (Q8_0/Q4_0: 8 lanes of
/// 4 products; K-quants: 16 lanes of the scaled quants, and for Q4_K/Q5_K 4 lanes
/// of the mins of 2 sub-blocks).
double naive(const Mat& a, const QRows& q, int64_t n, int64_t r, double& mag, int64_t& isum_max) {
  const int64_t K = a.n_in;
  const int8_t* xq = q.qs.data() + r * K;
  double s = 0;
  mag = 0;
  isum_max = 0;
  if (q32(a.dt)) {
    for (int64_t b = 0; b < K / kQBlock; ++b) {
      int64_t is = 0, lanes = 0;  // lanes: Σ over the 8 lanes of |the lane's 4 products| (the kernel's f32 partials)
      for (int l = 0; l < 8; ++l) {
        int64_t p = 0;
        for (int k = 0; k < 4; ++k) {
          // Q4_0 (ggml's dequantize_row_q4_0): element j < 16 the low nibble of byte j, j + 16 the high one, minus 8
          const int j = 4 * l + k;
          const uint8_t* q4 = a.b.data() + n * K / 2 + b * 16;
          const int v = a.dt == Dtype::Q8_0 ? int8_t(a.b[n * K + b * 32 + j]) : (j < 16 ? q4[j] & 15 : q4[j - 16] >> 4) - 8;
          p += int64_t(v) * xq[b * 32 + j];
        }
        is += p, lanes += std::abs(p);
      }
      const double sc = double(a.scales[n * K / 32 + b]) * q.d[r * K / 32 + b];
      s += sc * double(is), mag += std::abs(sc) * double(lanes), isum_max = std::max(isum_max, std::abs(is));
    }
    return s;
  }
  const int64_t bb = kquant_block_bytes(a.dt);
  for (int64_t b = 0; b < K / kKBlock; ++b) {
    const uint8_t* p = a.b.data() + n * (K / kKBlock) * bb + b * bb;
    const int8_t* x = xq + b * kKBlock;
    const double dx = q.d[r * K / kKBlock + b];
    int64_t is = 0, ms = 0, li[16] = {}, lm[4] = {}, lsum = 0, msum = 0;
    if (a.dt != Dtype::Q6_K) {
      const uint8_t* sc = p + 4;
      const bool five = a.dt == Dtype::Q5_K;  // ggml's dequantize_row_q5_K: bit 4 of element 32 j + l is bit j of qh[l]
      for (int e = 0; e < 256; ++e) {
        const int j = e / 32, c = e / 64, k = (e / 32) % 2, l = e % 32;
        const int scale = j < 4 ? sc[j] & 63 : (sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4);
        const int mn = j < 4 ? sc[j + 4] & 63 : (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
        const int qv = ((p[(five ? 48 : 16) + 32 * c + l] >> (4 * k)) & 15) | (five ? ((p[16 + l] >> j) & 1) << 4 : 0);
        is += int64_t(scale) * qv * x[e];
        ms += int64_t(mn) * x[e];
        li[kquant_lane(a.dt, e)] += int64_t(scale) * qv * x[e];
        lm[j / 2] += int64_t(mn) * x[e];
      }
      for (int64_t v : li) lsum += std::abs(v);
      for (int64_t v : lm) msum += std::abs(v);
      const double t1 = double(f16(p)) * dx * double(is), t2 = double(f16(p + 2)) * dx * double(ms);
      s += t1 - t2, mag += std::abs(double(f16(p)) * dx) * double(lsum) + std::abs(double(f16(p + 2)) * dx) * double(msum);
      isum_max = std::max({isum_max, std::abs(is), std::abs(ms)});
    } else {
      for (int e = 0; e < 256; ++e) {
        const int h = e / 128, rr = e % 128, l = rr % 32, sh = 2 * (rr / 32);
        const int lo = rr < 64 ? p[64 * h + rr] & 15 : p[64 * h + rr - 64] >> 4;
        const int qv = (lo | (((p[128 + 32 * h + l] >> sh) & 3) << 4)) - 32;
        is += int64_t(int8_t(p[192 + e / 16])) * qv * x[e];
        li[kquant_lane(a.dt, e)] += int64_t(int8_t(p[192 + e / 16])) * qv * x[e];
      }
      for (int64_t v : li) lsum += std::abs(v);
      const double t = double(f16(p + 208)) * dx * double(is);
      s += t, mag += std::abs(double(f16(p + 208)) * dx) * double(lsum), isum_max = std::max(isum_max, std::abs(is));
    }
  }
  return s;
}

/// int8_matmul of m rows on the given form into y [m, n_out].
std::vector<float> run(const Mat& a, const std::vector<float>& x, int64_t m, bool vnni, int threads = 1,
                       bool accumulate = false, float y0 = 0.0f) {
  std::vector<float> y(static_cast<size_t>(m * a.n_out), y0), scratch(static_cast<size_t>(int8_scratch_floats(m, a.n_in)));
  int8_matmul(x.data(), m, a.w, y.data(), accumulate, threads, scratch.data(), vnni);
  return y;
}

/// Both forms where the CPU has VNNI, else the scalar one.
std::vector<bool> forms() { return int8_has_vnni() ? std::vector<bool>{false, true} : std::vector<bool>{false}; }

}  // namespace

TEST_SUITE("backend.int8_dot") {
  TEST_CASE("quantize_row_q8_K and quantize_row_q8_0 follow ggml's reference formulas") {
    auto x = randv(1024, 11, 3.0f);
    x[5] = -7.5f;   // the block's max magnitude, negative: d > 0
    x[300] = 9.0f;  // positive: d < 0 (ggml's iscale = -127 / max)
    std::vector<int8_t> q(1024);
    std::vector<float> d(4);
    std::vector<int16_t> bs(64);
    quantize_row_q8_K(x.data(), 1024, q.data(), d.data(), bs.data());
    for (int b = 0; b < 4; ++b) {
      float amax = 0, mx = 0;
      for (int j = 0; j < 256; ++j)
        if (std::fabs(x[b * 256 + j]) > amax) amax = std::fabs(x[b * 256 + j]), mx = x[b * 256 + j];
      const float iscale = -127.0f / mx;
      CHECK(d[b] == 1.0f / iscale);
      for (int j = 0; j < 256; ++j) {
        const int v = std::min(127, static_cast<int>(std::nearbyint(iscale * x[b * 256 + j])));
        CHECK(q[b * 256 + j] == v);
        CHECK(std::abs(double(d[b]) * q[b * 256 + j] - x[b * 256 + j]) <= 0.5001 * std::abs(d[b]));
      }
      for (int g = 0; g < 16; ++g) {
        int s = 0;
        for (int l = 0; l < 16; ++l) s += q[b * 256 + 16 * g + l];
        CHECK(bs[b * 16 + g] == s);
      }
    }
    CHECK(d[0] > 0);  // block 0's max is -7.5
    CHECK(d[1] < 0);  // block 1's is +9
    std::vector<float> d0(32);
    quantize_row_q8_0(x.data(), 1024, q.data(), d0.data());
    for (int b = 0; b < 32; ++b) {
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
      const float dd = amax / 127.0f;
      CHECK(d0[b] == kveval::util::f16_to_f32(h16(dd)));
      for (int j = 0; j < 32; ++j) CHECK(q[b * 32 + j] == static_cast<int>(std::round(x[b * 32 + j] * (1.0f / dd))));
    }
    CHECK_THROWS_AS(quantize_row_q8_K(x.data(), 300, q.data(), d.data(), bs.data()), kveval::ArgumentError);
    CHECK_THROWS_AS(quantize_row_q8_0(x.data(), 40, q.data(), d0.data()), kveval::ArgumentError);
  }

  TEST_CASE("integer activations on unit scales: every output equals the int64 sum exactly") {
    // x integer in [-127, 127] with 127 in every block: both quantizers keep x as it is with d = +-1
    // (Q8_K: iscale = -1; Q8_0: 127 / 127), so each output is an integer sum that f32 holds exactly.
    for (Dtype dt : kTypes) {
      const std::string type = to_string(dt);
      CAPTURE(type);
      const Mat a(dt, 12, 512, 3, true);
      std::mt19937 g(5);
      std::uniform_int_distribution<int> u(-127, 127);
      std::vector<float> x(3 * 512);
      for (auto& v : x) v = static_cast<float>(u(g));
      for (int64_t i = 0; i < 3 * 512; i += 32) x[static_cast<size_t>(i)] = 127.0f;
      const QRows q = quantize(dt, x.data(), 3, 512);
      for (bool vnni : forms()) {
        const auto y = run(a, x, 3, vnni);
        for (int64_t r = 0; r < 3; ++r)
          for (int64_t n = 0; n < a.n_out; ++n) {
            double mag;
            int64_t imax;
            const double want = naive(a, q, n, r, mag, imax);
            REQUIRE(mag < double(1 << 23));  // every partial sum exact in f32
            CHECK(double(y[r * a.n_out + n]) == want);
          }
      }
    }
  }

  TEST_CASE("random blocks, extreme and zero blocks: within f32 rounding of the naive int64/double reference") {
    // Per block the kernel's integer sum is exact; its f32 part rounds each scale product, the
    // int-to-float conversion and each fma once (2^-24 each, relative), and the accumulation over
    // nb blocks (Q8_0: per lane, then 4 levels of the lane tree) at most nb + 8 times: the bound
    // (nb + 8) 2^-24 Σ|terms| holds for any order of the same operations. Q8_0 and Q4_0 add a block
    // as 8 lane partials (4 products each), so their terms are the partials, |d_w dx| Σ_l |p_l|.
    for (Dtype dt : kTypes) {
      for (int64_t K : {int64_t(256), int64_t(1024), int64_t(1792)}) {  // K-quants: 1, 4 and 7 super-blocks
        const std::string type = to_string(dt);
      CAPTURE(type);
        CAPTURE(K);
        const Mat a(dt, 37, K, static_cast<uint32_t>(K) + 1);
        const auto x = randv(static_cast<size_t>(5 * K), 21, 2.0f);
        const QRows q = quantize(dt, x.data(), 5, K);
        const int64_t nb = K / (q32(dt) ? kQBlock : kKBlock);
        for (bool vnni : forms())
          for (int64_t m : {int64_t(5), int64_t(1)}) {  // one row: the VNNI form's per-row path
            CAPTURE(m);
            const auto y = run(a, x, m, vnni);
            for (int64_t r = 0; r < m; ++r)
              for (int64_t n = 0; n < a.n_out; ++n) {
                double mag;
                int64_t imax;
                const double want = naive(a, q, n, r, mag, imax);
                CHECK(imax < (int64_t(1) << 31));
                INFO("n " << n << " r " << r << " y " << y[r * a.n_out + n] << " want " << want << " mag " << mag);
                CHECK(std::abs(double(y[r * a.n_out + n]) - want) <= double(nb + 8) * 0x1p-24 * mag + 1e-30);
              }
          }
      }
    }
  }

  TEST_CASE("the VNNI and scalar forms give the same bits for 1-16 rows, any thread count, accumulate") {
    if (!int8_has_vnni()) {
      MESSAGE("SKIPPED: no AVX512-VNNI form on this CPU or under DNNL_MAX_CPU_ISA");
      return;
    }
    for (Dtype dt : kTypes) {
      const std::string type = to_string(dt);
      CAPTURE(type);
      // Q8_0, Q4_0: 21 blocks, an odd one last; K-quants: 7 super-blocks, 4 at a time then 3 one by one
      const int64_t K = q32(dt) ? 96 * 7 : 256 * 7;
      const Mat a(dt, 53, K, 9);
      const auto x = randv(static_cast<size_t>(16 * K), 8, 4.0f);
      for (int64_t m = 1; m <= kInt8MaxRows; ++m) {
        CAPTURE(m);
        const auto s = run(a, x, m, false, 1), v = run(a, x, m, true, 2);
        CHECK(std::memcmp(s.data(), v.data(), sizeof(float) * s.size()) == 0);
        const auto sa = run(a, x, m, false, 1, true, 0.25f), va = run(a, x, m, true, 3, true, 0.25f);
        CHECK(std::memcmp(sa.data(), va.data(), sizeof(float) * sa.size()) == 0);
      }
      // a row alone gets the bits it gets among 16
      const auto all = run(a, x, 16, true, 2);
      const std::vector<float> x7(x.begin() + 7 * K, x.begin() + 8 * K);
      const auto one = run(a, x7, 1, true, 1);
      CHECK(std::memcmp(one.data(), all.data() + 7 * a.n_out, sizeof(float) * static_cast<size_t>(a.n_out)) == 0);
    }
  }

  TEST_CASE("zero, tiny and huge activation rows: no NaN; zero rows give exactly 0") {
    for (Dtype dt : kTypes) {
      const std::string type = to_string(dt);
      CAPTURE(type);
      const Mat a(dt, 8, 512, 4);
      std::vector<float> x(4 * 512, 0.0f);
      for (int j = 0; j < 512; ++j) x[512 + j] = (j % 3 - 1) * 1e-39f;  // subnormal: iscale / the f16 scale underflow
      for (int j = 0; j < 512; ++j) x[1024 + j] = (j % 5 - 2) * 1e-37f;
      for (int j = 0; j < 512; ++j) x[1536 + j] = (j % 7 - 3) * 3e25f;  // Q8_0's scale beyond f16
      for (bool vnni : forms()) {
        const auto y = run(a, x, 4, vnni);
        for (int64_t n = 0; n < 8; ++n) {
          CHECK(y[n] == 0.0f);
          CHECK(y[8 + n] == 0.0f);
          CHECK(std::isfinite(y[16 + n]));
          CHECK(std::isfinite(y[24 + n]));
        }
        const QRows q = quantize(dt, x.data(), 4, 512);
        for (int64_t n = 0; n < 8; ++n) {
          double mag;
          int64_t imax;
          const double want = naive(a, q, n, 3, mag, imax);
          CHECK(std::abs(double(y[24 + n]) - want) <= double(512 / kQBlock + 8) * 0x1p-24 * mag);
        }
      }
    }
  }

  TEST_CASE("int8_matmul refuses other dtypes, row counts outside [1, 16] and a missing scratch") {
    const Mat a(Dtype::Q4_K, 4, 256, 1);
    const auto x = randv(17 * 256, 2);
    std::vector<float> y(17 * 4), s(static_cast<size_t>(int8_scratch_floats(17, 256)));
    CHECK_THROWS_AS(int8_matmul(x.data(), 0, a.w, y.data(), false, 1, s.data(), false), kveval::ArgumentError);
    CHECK_THROWS_AS(int8_matmul(x.data(), 17, a.w, y.data(), false, 1, s.data(), false), kveval::ArgumentError);
    CHECK_THROWS_AS(int8_matmul(x.data(), 1, a.w, y.data(), false, 1, nullptr, false), kveval::ArgumentError);
    const Weight f(std::vector<float>(4 * 256, 1.0f), 4, 256);
    CHECK_THROWS_AS(int8_matmul(x.data(), 1, f, y.data(), false, 1, s.data(), false), kveval::ArgumentError);
    for (Dtype t : kTypes) CHECK(int8_kernel(t));
    CHECK(!int8_kernel(Dtype::BF16));
  }

  TEST_CASE("matmul in MatmulMode::Int8: decode steps take int8_matmul, long and batch-invariant products stay exact") {
    for (Dtype dt : kTypes) {
      const std::string type = to_string(dt);
      CAPTURE(type);
      const Mat a(dt, 64, 512, 6);
      const auto x = randv(40 * 512, 12);
      Engine exact(2), int8(2);
      int8.set_matmul_mode(MatmulMode::Int8);
      CHECK(int8.matmul_mode() == MatmulMode::Int8);
      CHECK(exact.matmul_mode() == MatmulMode::Exact);
      for (int64_t m : {int64_t(1), int64_t(4), int64_t(16)}) {
        std::vector<float> yi(static_cast<size_t>(m * 64)), ye(yi.size());
        matmul(int8, x.data(), m, a.w, yi.data());
        const auto want = run(a, x, m, int8_has_vnni(), 2);
        CHECK(std::memcmp(yi.data(), want.data(), sizeof(float) * yi.size()) == 0);
        matmul(exact, x.data(), m, a.w, ye.data());
        CHECK(std::memcmp(yi.data(), ye.data(), sizeof(float) * yi.size()) != 0);  // int8 is not exact
      }
      for (const auto& [m, inv] : {std::pair<int64_t, bool>{20, false}, {3, true}, {40, false}}) {
        std::vector<float> yi(static_cast<size_t>(m * 64)), ye(yi.size());
        matmul(int8, x.data(), m, a.w, yi.data(), false, inv);
        matmul(exact, x.data(), m, a.w, ye.data(), false, inv);
        CHECK(std::memcmp(yi.data(), ye.data(), sizeof(float) * yi.size()) == 0);
      }
      // warm: further decode steps allocate nothing
      std::vector<float> y(16 * 64);
      const auto a0 = int8.buffer_allocations();
      for (int step = 0; step < 10; ++step) matmul(int8, x.data(), step % 2 ? 1 : 16, a.w, y.data(), true);
      CHECK(int8.buffer_allocations() == a0);
    }
    CHECK(std::string(to_string(MatmulMode::Int8)) == "int8");
    CHECK(std::string(to_string(MatmulMode::Exact)) == "exact");
  }
}
