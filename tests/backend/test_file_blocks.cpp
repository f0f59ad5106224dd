// Weights kept as the file's blocks (the file-block dtypes: Q4_1, Q5_0, Q5_1
// and the K-quants Q2_K ... Q6_K): decoded values against a naive decoder
// written from ggml's dequantize_row_* loops, the kernel against its scalar twin
// (same bits) and a float64 reference, the widened path for long products,
// batch invariance and a warm engine that allocates nothing; every case for
// every format. The AVX2 runs of this suite (backend.avx2) take the scalar
// twin, so both ISA paths are held to the same bits.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/file_qblocks.hpp"
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

constexpr Dtype kFormats[] = {Dtype::Q4_1, Dtype::Q5_0, Dtype::Q5_1, Dtype::Q2_K,
                              Dtype::Q3_K, Dtype::Q4_K, Dtype::Q5_K, Dtype::Q6_K};

/// f32 a * b, rounded once (the product of two floats is exact in double).
float mul(float a, float b) { return static_cast<float>(double(a) * double(b)); }
/// f32 a - b and a + b, rounded once (double rounding is innocuous for binary32 in binary64).
float sub(float a, float b) { return static_cast<float>(double(a) - double(b)); }
float add(float a, float b) { return static_cast<float>(double(a) + double(b)); }
/// The little-endian f16 at p.
float f16(const uint8_t* p) { return kveval::util::f16_to_f32(static_cast<uint16_t>(p[0] | p[1] << 8)); }

/// A block of Q4_1, Q5_0 or Q5_1 as floats, from ggml's dequantize_row_q4_1 /
/// q5_0 / q5_1 (ggml-quants.c), each product and sum rounded to f32.
void naive_decode32(Dtype dt, const uint8_t* b, float* y) {
  const float d = f16(b);
  if (dt == Dtype::Q4_1) {
    const float m = f16(b + 2);
    for (int j = 0; j < 16; ++j) {
      y[j] = add(mul(float(b[4 + j] & 0x0F), d), m);
      y[j + 16] = add(mul(float(b[4 + j] >> 4), d), m);
    }
    return;
  }
  const bool one = dt == Dtype::Q5_1;
  const uint8_t* h = b + (one ? 4 : 2);
  const uint8_t* qs = h + 4;
  uint32_t qh;
  std::memcpy(&qh, h, 4);  // little-endian, as ggml's memcpy
  for (int j = 0; j < 16; ++j) {
    const uint8_t xh_0 = static_cast<uint8_t>(((qh >> (j + 0)) << 4) & 0x10);
    const uint8_t xh_1 = static_cast<uint8_t>(((qh >> (j + 12))) & 0x10);
    const int x0 = ((qs[j] & 0x0F) | xh_0) - (one ? 0 : 16);
    const int x1 = ((qs[j] >> 4) | xh_1) - (one ? 0 : 16);
    y[j] = one ? add(mul(float(x0), d), f16(b + 2)) : mul(float(x0), d);
    y[j + 16] = one ? add(mul(float(x1), d), f16(b + 2)) : mul(float(x1), d);
  }
}

/// A Q2_K or Q3_K super-block as floats, from ggml's dequantize_row_q2_K / q3_K.
void naive_decode_low(Dtype dt, const uint8_t* b, float* y) {
  if (dt == Dtype::Q2_K) {
    const float d = f16(b + 80), min = f16(b + 82);
    const uint8_t* q = b + 16;
    int is = 0;
    for (int n = 0; n < 256; n += 128) {
      for (int shift = 0; shift < 8; shift += 2) {
        uint8_t sc = b[is++];
        float dl = mul(d, float(sc & 0xF)), ml = mul(min, float(sc >> 4));
        for (int l = 0; l < 16; ++l) *y++ = sub(mul(dl, float((q[l] >> shift) & 3)), ml);
        sc = b[is++];
        dl = mul(d, float(sc & 0xF)), ml = mul(min, float(sc >> 4));
        for (int l = 0; l < 16; ++l) *y++ = sub(mul(dl, float((q[l + 16] >> shift) & 3)), ml);
      }
      q += 32;
    }
    return;
  }
  const uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
  uint32_t aux[4];
  std::memcpy(aux, b + 96, 12);
  const uint32_t tmp = aux[2];
  aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
  aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
  aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
  aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
  int8_t scales[16];
  std::memcpy(scales, aux, 16);
  const float d_all = f16(b + 108);
  const uint8_t* q = b + 32;
  const uint8_t* hm = b;
  uint8_t m = 1;
  int is = 0;
  for (int n = 0; n < 256; n += 128) {
    for (int shift = 0; shift < 8; shift += 2) {
      float dl = mul(d_all, float(scales[is++] - 32));
      for (int l = 0; l < 16; ++l) *y++ = mul(dl, float(((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4)));
      dl = mul(d_all, float(scales[is++] - 32));
      for (int l = 0; l < 16; ++l) *y++ = mul(dl, float(((q[l + 16] >> shift) & 3) - ((hm[l + 16] & m) ? 0 : 4)));
      m = static_cast<uint8_t>(m << 1);
    }
    q += 32;
  }
}

/// Block i of a row as floats, from ggml's dequantize_row_* (ggml-quants.c),
/// each product and difference rounded to f32.
void naive_decode(Dtype dt, const uint8_t* b, float* y) {
  if (!is_kquant(dt)) return naive_decode32(dt, b, y);
  if (dt == Dtype::Q2_K || dt == Dtype::Q3_K) return naive_decode_low(dt, b, y);
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

/// Byte offsets of a format's f16 scale d and second f16 (Q4_1, Q5_1 m; K-quant dmin), -1 when it has none.
std::pair<int, int> scale_fields(Dtype t) {
  switch (t) {
    case Dtype::Q2_K: return {80, 82};
    case Dtype::Q3_K: return {108, -1};
    case Dtype::Q6_K: return {208, -1};
    case Dtype::Q5_0: return {0, -1};
    default: return {0, 2};  // Q4_1, Q5_1, Q4_K, Q5_K
  }
}

/// A random matrix [n_out, n_in] of a file-block dtype in the file's bytes. Blocks
/// cycle through kinds: random bytes with d (and m / dmin) of moderate size and
/// either sign; extreme scales (d = 65504, the largest f16, with every 6-bit
/// scale at its largest magnitude; or the smallest subnormal 2^-24 with every
/// bit of scales and quants set); and all-zero blocks.
struct KBlocks {
  Dtype dt;
  int64_t n_out, n_in, rs, be;  // rs: bytes per row; be: elements per block
  std::vector<uint8_t> b;
  std::vector<float> v;  // naive_decode of every block, [n_out, n_in]
  KBlocks(Dtype t, int64_t no, int64_t ni, uint32_t seed)
      : dt(t), n_out(no), n_in(ni), rs(ni / file_block_elements(t) * file_block_bytes(t)), be(file_block_elements(t)),
        b(static_cast<size_t>(no * rs)), v(static_cast<size_t>(no * ni)) {
    std::mt19937 g(seed);
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> mag(1e-4f, 1e-1f);
    const int64_t bb = file_block_bytes(t), nb = no * ni / be;
    const auto [at_d, at_m] = scale_fields(t);
    for (int64_t i = 0; i < nb; ++i) {
      uint8_t* p = b.data() + i * bb;
      const int kind = static_cast<int>(i % 7);
      for (int64_t j = 0; j < bb; ++j) p[j] = kind == 6 ? 0 : kind == 5 ? 0xFF : static_cast<uint8_t>(byte(g));
      uint16_t dh = kveval::util::f32_to_f16(mag(g) * (byte(g) & 1 ? -1.0f : 1.0f));
      uint16_t mh = kveval::util::f32_to_f16(mag(g));
      if (kind == 4) dh = mh = 0x7BFF;          // 65504
      if (kind == 5) dh = mh = 0x0001;          // 2^-24, with every bit of scales and quants set
      if (kind == 6) dh = mh = 0;               // all-zero block
      p[at_d] = dh & 0xFF, p[at_d + 1] = dh >> 8;
      if (at_m >= 0) p[at_m] = mh & 0xFF, p[at_m + 1] = mh >> 8;
      if (kind == 4) {  // every scale (and min) at its largest magnitude
        if (t == Dtype::Q4_K || t == Dtype::Q5_K) std::fill(p + 4, p + 16, uint8_t{0xFF});  // sc, m 63
        if (t == Dtype::Q6_K) std::fill(p + 192, p + 208, uint8_t{0x80});                   // -128
        if (t == Dtype::Q2_K) std::fill(p, p + 16, uint8_t{0xFF});                          // sc, m 15
        if (t == Dtype::Q3_K) std::fill(p + 96, p + 108, uint8_t{0x00});                    // 0 - 32
      }
      naive_decode(t, p, v.data() + i * be);
    }
  }
  Weight weight() const {
    Weight w(n_out, n_in, dt);
    w.set_rows_file_blocks(0, b.data(), n_out);
    return w;
  }
  float dot(int64_t n, const float* x) const {
    const uint8_t* row = b.data() + n * rs;
    return is_kquant(dt) ? kquant_dot_scalar(dt, row, x, n_in) : file_qblocks_dot_scalar(dt, row, x, n_in);
  }
  void decode(float* dst) const {
    if (is_kquant(dt))
      kquant_decode(dt, b.data(), dst, n_out * n_in / be);
    else
      file_qblocks_decode(dt, b.data(), dst, n_out * n_in / be);
  }
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

TEST_SUITE("backend.file_blocks") {
  TEST_CASE("every file-block dtype decodes to ggml's values, every element, on every path") {
    for (Dtype dt : kFormats) {
      INFO(std::string(to_string(dt)));
      const int64_t be = file_block_elements(dt), K = 7 * be, ld = K + 8;
      const KBlocks mat(dt, 9, K, 21);  // 63 blocks: every kind 9 times
      std::vector<float> dec(mat.v.size());
      mat.decode(dec.data());
      CHECK(std::memcmp(dec.data(), mat.v.data(), sizeof(float) * dec.size()) == 0);
      const Weight w = mat.weight();
      CHECK(w.bytes() == mat.b.size());
      std::vector<float> t(static_cast<size_t>(5 * ld), -1.0f);
      widen_rows(w, 3, 5, t.data(), ld, 2);  // rows 3..7, row stride K + 8
      int64_t differ = 0;
      for (int64_t j = 0; j < 5; ++j)
        differ += std::memcmp(t.data() + j * ld, mat.v.data() + (3 + j) * K, sizeof(float) * K) != 0;
      CHECK(differ == 0);
      CHECK(t[K] == -1.0f);  // the row padding is not written
      bool zeros = true, huge = false;
      for (int64_t e = 0; e < be; ++e) zeros = zeros && mat.v[6 * be + e] == 0.0f;
      for (int64_t e = 0; e < be; ++e) huge = huge || std::fabs(mat.v[4 * be + e]) > 1e5f;
      CHECK(zeros);
      CHECK(huge);
    }
  }

  TEST_CASE("every file-block kernel gives the scalar twin's bits and the double reference within f32 rounding") {
    MESSAGE("file-block kernel: " << std::string(kernel_isa_name(kernel_isa())));
    for (Dtype dt : kFormats)
      for (int64_t blocks : {1, 2, 7, 16}) {
        const int64_t n_in = blocks * file_block_elements(dt);
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
              blocks_matmul(x.data(), m, w, y.data(), acc, threads);
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
    w.set_rows_file_blocks(0, b.data(), 1);
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
    w6.set_rows_file_blocks(0, q.data(), 1);
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

  TEST_CASE("hand-computed Q4_1, Q5_0, Q5_1, Q2_K and Q3_K products") {
    Engine eng(1);
    // One row against x = 1 on the block kernel (accumulating onto 100) and on the
    // widened, batch-invariant path; `first` is element 0 widened.
    const auto check = [&](Dtype dt, const std::vector<uint8_t>& row, float sum, float first) {
      INFO(std::string(to_string(dt)));
      const int64_t K = static_cast<int64_t>(row.size()) / file_block_bytes(dt) * file_block_elements(dt);
      Weight w(1, K, dt);
      w.set_rows_file_blocks(0, row.data(), 1);
      std::vector<float> x(static_cast<size_t>(K), 1.0f), t(static_cast<size_t>(K));
      float y = 100.0f;
      matmul(eng, x.data(), 1, w, &y, true);
      CHECK(y == 100.0f + sum);
      matmul(eng, x.data(), 1, w, &y, false, true);
      CHECK(y == sum);
      widen_rows(w, 0, 1, t.data(), K, 1);
      CHECK(t[0] == first);
    };
    // Q4_1: d = 0.5, m = -1, two blocks of qs 0x32 (low nibble 2: 0.5 * 2 - 1 = 0;
    // high 3: 0.5); block 1's first byte 0x3F (15: 6.5). 16 * 0.5 * 2 + 6.5 = 22.5.
    std::vector<uint8_t> q41(40, 0x32);
    for (int b = 0; b < 2; ++b) q41[20 * b] = 0x00, q41[20 * b + 1] = 0x38, q41[20 * b + 2] = 0x00, q41[20 * b + 3] = 0xBC;
    q41[24] = 0x3F;
    check(Dtype::Q4_1, q41, 22.5f, 0.0f);
    // Q5_0: d = 2, qh bits 0-15 set (elements 0-15: 16 + nibble), qs 0 but
    // byte 0 = 0x01: element 0 (17 - 16) * 2 = 2, 1-15: 0, 16-31: -32. Sum 2 - 512.
    std::vector<uint8_t> q50(22, 0);
    q50[1] = 0x40, q50[2] = 0xFF, q50[3] = 0xFF, q50[6] = 0x01;
    check(Dtype::Q5_0, q50, -510.0f, 2.0f);
    // Q5_1: d = 1, m = 0.5, qh bits 16-31 set, qs 0x11: elements 0-15 1.5, 16-31 17.5. Sum 304.
    std::vector<uint8_t> q51(24, 0x11);
    q51[0] = 0x00, q51[1] = 0x3C, q51[2] = 0x00, q51[3] = 0x38;
    q51[4] = 0x00, q51[5] = 0x00, q51[6] = 0xFF, q51[7] = 0xFF;
    check(Dtype::Q5_1, q51, 304.0f, 1.5f);
    // Q2_K: d = 1, dmin = 0.5, every scales byte 0x12 (sc 2, min 1), every qs
    // byte 0xE4 (bits 2k..2k+1 = k): element 128 h + 32 k + l is 2 k - 0.5.
    // Sum 64 * (-0.5 + 1.5 + 3.5 + 5.5) = 640.
    std::vector<uint8_t> q2(84, 0x12);
    std::fill(q2.begin() + 16, q2.begin() + 80, uint8_t{0xE4});
    q2[80] = 0x00, q2[81] = 0x3C, q2[82] = 0x00, q2[83] = 0x38;
    check(Dtype::Q2_K, q2, 640.0f, -0.5f);
    // Q3_K: d = 1, every 6-bit scale 33 (low nibbles 1, high bits 2: scales
    // bytes 0-7 0x11, 8-11 0xAA) so d * (33 - 32) = 1; qs 0xE4 (q = k), hmask all
    // set but bit 0 of byte 0: element 0 is 0 - 4. Sum 64 * (0 + 1 + 2 + 3) - 4 = 380.
    std::vector<uint8_t> q3(110, 0xFF);
    q3[0] = 0xFE;
    std::fill(q3.begin() + 32, q3.begin() + 96, uint8_t{0xE4});
    std::fill(q3.begin() + 96, q3.begin() + 104, uint8_t{0x11});
    std::fill(q3.begin() + 104, q3.begin() + 108, uint8_t{0xAA});
    q3[108] = 0x00, q3[109] = 0x3C;
    check(Dtype::Q3_K, q3, 380.0f, -4.0f);
  }

  TEST_CASE("long and batch-invariant file-block products: widened chunks match the reference, rows alone match rows in a batch") {
    // n_out 3000 > one chunk of widened rows for n_in 512 (2048 rows), so two chunks.
    for (Dtype dt : kFormats) {
      INFO(std::string(to_string(dt)));
      const KBlocks mat(dt, 3000, 512, 9);
      const Weight w = mat.weight();
      const int64_t M = 40;  // above the block kernel's 32 rows: the widened path
      const auto x = randv(static_cast<size_t>(M * 512), 10);
      for (int threads : {1, 2}) {
        Engine eng(threads);
        kveval::test::check_long_products(eng, mat, w, x, M, 3000, 512);
        // Decode steps (block kernel): each row's bits as alone, whatever m.
        std::vector<float> few(static_cast<size_t>(8 * 3000)), one(few.size());
        matmul(eng, x.data(), 8, w, few.data());
        for (int64_t r = 0; r < 8; ++r) matmul(eng, x.data() + r * 512, 1, w, one.data() + r * 3000);
        CHECK(std::memcmp(few.data(), one.data(), sizeof(float) * few.size()) == 0);
      }
    }
  }

  TEST_CASE("gather_rows decodes the looked-up file-block rows to the naive decoder's bits, extreme and zero blocks included") {
    for (Dtype dt : kFormats) {
      INFO(std::string(to_string(dt)));
      const KBlocks mat(dt, 9, 512, 41);  // every kind of KBlocks, extreme scales and zeros
      const Weight w = mat.weight();
      // K-quants: row 2 holds blocks 4 and 5 (the largest and the smallest scales), row 3 block 6 (all
      // zero); blocks of 32: every row holds every kind
      const std::vector<int32_t> ids = {8, 0, 2, 2, 3};
      std::vector<float> got(ids.size() * 512);
      gather_rows(w, ids, got.data());
      for (size_t i = 0; i < ids.size(); ++i)
        CHECK(std::memcmp(got.data() + i * 512, mat.v.data() + static_cast<size_t>(ids[i]) * 512, 512 * sizeof(float)) == 0);
      const std::vector<int32_t> past = {9};
      CHECK_THROWS_AS(gather_rows(w, past, got.data()), kveval::ArgumentError);
    }
  }

  TEST_CASE("warm file-block products create no primitive and allocate nothing") {
    for (Dtype dt : kFormats) {
      const KBlocks mat(dt, 1024, 256, 3);
      kveval::test::check_warm_products_allocate_nothing(mat.weight());
    }
  }

  TEST_CASE("file-block weights refuse bad shapes and the other setters") {
    CHECK_THROWS_AS(Weight(4, 288, Dtype::Q4_K), kveval::ArgumentError);
    CHECK_THROWS_AS(Weight(4, 128, Dtype::Q6_K), kveval::ArgumentError);
    CHECK_THROWS_AS(Weight(4, 128, Dtype::Q3_K), kveval::ArgumentError);
    CHECK_THROWS_AS(Weight(4, 48, Dtype::Q5_0), kveval::ArgumentError);
    const Weight w41(3, 96, Dtype::Q4_1);
    CHECK(w41.ld() == 60);
    CHECK(w41.bytes() == 180);
    Weight w(4, 256, Dtype::Q6_K);
    CHECK(w.ld() == 210);
    CHECK(w.bytes() == 4 * 210);
    std::vector<uint8_t> p(5 * 210);
    std::vector<float> f(5 * 256), y(4);
    CHECK_THROWS_AS(w.set_rows_file_blocks(0, p.data(), 5), kveval::ArgumentError);
    CHECK_THROWS_AS(w.set_rows(0, f.data(), 1), kveval::ArgumentError);
    Weight wf(4, 256, Dtype::F32);
    CHECK_THROWS_AS(wf.set_rows_file_blocks(0, p.data(), 1), kveval::ArgumentError);
    Weight w8(4, 256, Dtype::Q8_0);
    CHECK_THROWS_AS(kquant_matmul(f.data(), 1, w8, y.data(), false, 1), kveval::ArgumentError);
    CHECK_THROWS_AS(file_qblocks_matmul(f.data(), 1, w, y.data(), false, 1), kveval::ArgumentError);
    CHECK_THROWS_AS(kquant_matmul(f.data(), 1, w41, y.data(), false, 1), kveval::ArgumentError);
    CHECK(std::string(to_string(Dtype::Q4_K)) == "q4_k");
    CHECK(std::string(to_string(Dtype::Q5_K)) == "q5_k");
    CHECK(std::string(to_string(Dtype::Q6_K)) == "q6_k");
    CHECK(kquant_bytes(Dtype::Q5_K, 512) == 352);
    CHECK(kquant_bytes(Dtype::Q4_K, 512) == 288);
    CHECK(kquant_bytes(Dtype::Q6_K, 512) == 420);
    CHECK(std::string(to_string(Dtype::Q4_1)) == "q4_1");
    CHECK(std::string(to_string(Dtype::Q5_0)) == "q5_0");
    CHECK(std::string(to_string(Dtype::Q5_1)) == "q5_1");
    CHECK(std::string(to_string(Dtype::Q2_K)) == "q2_k");
    CHECK(std::string(to_string(Dtype::Q3_K)) == "q3_k");
    // the file's bytes: ggml-common.h's block sizes per 32 or 256 elements
    CHECK(file_blocks_bytes(Dtype::Q8_0, 512) == 544);
    CHECK(file_blocks_bytes(Dtype::Q4_0, 512) == 288);
    CHECK(file_blocks_bytes(Dtype::Q4_1, 512) == 320);
    CHECK(file_blocks_bytes(Dtype::Q5_0, 512) == 352);
    CHECK(file_blocks_bytes(Dtype::Q5_1, 512) == 384);
    CHECK(file_blocks_bytes(Dtype::Q2_K, 512) == 168);
    CHECK(file_blocks_bytes(Dtype::Q3_K, 512) == 220);
  }
}
