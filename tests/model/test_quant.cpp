// Block codecs (src/model/quant/): for every supported type
// - a handcrafted block decoded to values computed by hand (in the comments);
// - random blocks decoded against a naive double-precision reference written
//   here from ggml's dequantize_row_* loops (ggml-quants.c), with its own
//   IEEE-half decoder: a structure independent of kveval's index formulas;
// - kveval's quantizers round-tripped through the dequantizers (error bounds),
//   and the parallel entry points equal to one thread.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <vector>

#include "model/dequantize.hpp"
#include "model/gguf.hpp"
#include "model/quant/quant.hpp"
#include "util/error.hpp"

using namespace kveval;
using gguf::TensorType;

namespace {

using Bytes = std::vector<std::byte>;

/// IEEE binary16 -> double, from the definition (sign, 5-bit exponent bias 15, 10-bit fraction).
double half(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 31, f = h & 1023;
  const double v = e == 0 ? std::ldexp(f, -24) : std::ldexp(1024 + f, e - 25);
  return s ? -v : v;
}

uint8_t at(const Bytes& b, size_t i) { return static_cast<uint8_t>(b[i]); }
double f16_at(const Bytes& b, size_t i) { return half(static_cast<uint16_t>(at(b, i) | (at(b, i + 1) << 8))); }

void put16(Bytes& b, size_t i, uint16_t v) {
  b[i] = static_cast<std::byte>(v & 255);
  b[i + 1] = static_cast<std::byte>(v >> 8);
}

/// Decodes one or more blocks with kveval's codec.
std::vector<float> decode(TensorType t, const Bytes& b) {
  const auto& ti = gguf::type_info(t);
  const uint64_t n = b.size() / ti.type_size * ti.block_size;
  std::vector<float> y(n);
  dequantize(t, b.data(), y.data(), n, 1);
  return y;
}

// ---- naive references (one block each), after ggml-quants.c -----------------

using Ref = std::function<std::vector<double>(const Bytes& blk)>;

std::vector<double> ref_q4_0(const Bytes& x) {
  std::vector<double> y(32);
  const double d = f16_at(x, 0);
  for (int j = 0; j < 16; ++j) {
    y[j] = ((at(x, 2 + j) & 0x0F) - 8) * d;
    y[j + 16] = ((at(x, 2 + j) >> 4) - 8) * d;
  }
  return y;
}
std::vector<double> ref_q4_1(const Bytes& x) {
  std::vector<double> y(32);
  const double d = f16_at(x, 0), m = f16_at(x, 2);
  for (int j = 0; j < 16; ++j) {
    y[j] = (at(x, 4 + j) & 0x0F) * d + m;
    y[j + 16] = (at(x, 4 + j) >> 4) * d + m;
  }
  return y;
}
uint32_t qh32(const Bytes& x, size_t i) {
  return at(x, i) | (at(x, i + 1) << 8) | (at(x, i + 2) << 16) | (static_cast<uint32_t>(at(x, i + 3)) << 24);
}
std::vector<double> ref_q5_0(const Bytes& x) {
  std::vector<double> y(32);
  const double d = f16_at(x, 0);
  const uint32_t qh = qh32(x, 2);
  for (int j = 0; j < 16; ++j) {
    const int xh_0 = ((qh >> (j + 0)) << 4) & 0x10;
    const int xh_1 = ((qh >> (j + 12))) & 0x10;
    y[j] = (((at(x, 6 + j) & 0x0F) | xh_0) - 16) * d;
    y[j + 16] = (((at(x, 6 + j) >> 4) | xh_1) - 16) * d;
  }
  return y;
}
std::vector<double> ref_q5_1(const Bytes& x) {
  std::vector<double> y(32);
  const double d = f16_at(x, 0), m = f16_at(x, 2);
  const uint32_t qh = qh32(x, 4);
  for (int j = 0; j < 16; ++j) {
    const int xh_0 = ((qh >> (j + 0)) << 4) & 0x10;
    const int xh_1 = ((qh >> (j + 12))) & 0x10;
    y[j] = ((at(x, 8 + j) & 0x0F) | xh_0) * d + m;
    y[j + 16] = ((at(x, 8 + j) >> 4) | xh_1) * d + m;
  }
  return y;
}
std::vector<double> ref_q8_0(const Bytes& x) {
  std::vector<double> y(32);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<int8_t>(at(x, 2 + j)) * f16_at(x, 0);
  return y;
}
std::vector<double> ref_q2_k(const Bytes& x) {
  std::vector<double> y;
  const double d = f16_at(x, 80), min = f16_at(x, 82);
  size_t q = 16;
  int is = 0;
  for (int n = 0; n < 256; n += 128) {
    int shift = 0;
    for (int j = 0; j < 4; ++j) {
      int sc = at(x, is++);
      double dl = d * (sc & 0xF), ml = min * (sc >> 4);
      for (int l = 0; l < 16; ++l) y.push_back(dl * ((at(x, q + l) >> shift) & 3) - ml);
      sc = at(x, is++);
      dl = d * (sc & 0xF), ml = min * (sc >> 4);
      for (int l = 0; l < 16; ++l) y.push_back(dl * ((at(x, q + l + 16) >> shift) & 3) - ml);
      shift += 2;
    }
    q += 32;
  }
  return y;
}
std::vector<double> ref_q3_k(const Bytes& x) {
  // scales: 12 bytes at 96 -> 16 six-bit values, via ggml's 32-bit word shuffles
  uint32_t aux[4];
  std::memcpy(aux, x.data() + 96, 12);
  const uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f, tmp = aux[2];
  aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
  aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
  aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
  aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
  int8_t scales[16];
  std::memcpy(scales, aux, 16);
  const double d_all = f16_at(x, 108);
  std::vector<double> y;
  size_t q = 32;
  int is = 0;
  uint8_t m = 1;
  for (int n = 0; n < 256; n += 128) {
    int shift = 0;
    for (int j = 0; j < 4; ++j) {
      double dl = d_all * (scales[is++] - 32);
      for (int l = 0; l < 16; ++l) y.push_back(dl * (((at(x, q + l) >> shift) & 3) - ((at(x, l) & m) ? 0 : 4)));
      dl = d_all * (scales[is++] - 32);
      for (int l = 0; l < 16; ++l)
        y.push_back(dl * (((at(x, q + l + 16) >> shift) & 3) - ((at(x, l + 16) & m) ? 0 : 4)));
      shift += 2;
      m = static_cast<uint8_t>(m << 1);
    }
    q += 32;
  }
  return y;
}
void get_scale_min_k4(int j, const Bytes& x, size_t q, int& d, int& m) {
  if (j < 4) {
    d = at(x, q + j) & 63;
    m = at(x, q + j + 4) & 63;
  } else {
    d = (at(x, q + j + 4) & 0xF) | ((at(x, q + j - 4) >> 6) << 4);
    m = (at(x, q + j + 4) >> 4) | ((at(x, q + j) >> 6) << 4);
  }
}
std::vector<double> ref_q4_k(const Bytes& x) {
  std::vector<double> y;
  const double d = f16_at(x, 0), min = f16_at(x, 2);
  size_t q = 16;
  int is = 0, sc, m;
  for (int j = 0; j < 256; j += 64) {
    get_scale_min_k4(is + 0, x, 4, sc, m);
    const double d1 = d * sc, m1 = min * m;
    get_scale_min_k4(is + 1, x, 4, sc, m);
    const double d2 = d * sc, m2 = min * m;
    for (int l = 0; l < 32; ++l) y.push_back(d1 * (at(x, q + l) & 0xF) - m1);
    for (int l = 0; l < 32; ++l) y.push_back(d2 * (at(x, q + l) >> 4) - m2);
    q += 32;
    is += 2;
  }
  return y;
}
std::vector<double> ref_q5_k(const Bytes& x) {
  std::vector<double> y;
  const double d = f16_at(x, 0), min = f16_at(x, 2);
  size_t ql = 48;
  const size_t qh = 16;
  int is = 0, sc, m;
  uint8_t u1 = 1, u2 = 2;
  for (int j = 0; j < 256; j += 64) {
    get_scale_min_k4(is + 0, x, 4, sc, m);
    const double d1 = d * sc, m1 = min * m;
    get_scale_min_k4(is + 1, x, 4, sc, m);
    const double d2 = d * sc, m2 = min * m;
    for (int l = 0; l < 32; ++l) y.push_back(d1 * ((at(x, ql + l) & 0xF) + (at(x, qh + l) & u1 ? 16 : 0)) - m1);
    for (int l = 0; l < 32; ++l) y.push_back(d2 * ((at(x, ql + l) >> 4) + (at(x, qh + l) & u2 ? 16 : 0)) - m2);
    ql += 32;
    is += 2;
    u1 = static_cast<uint8_t>(u1 << 2);
    u2 = static_cast<uint8_t>(u2 << 2);
  }
  return y;
}
std::vector<double> ref_q6_k(const Bytes& x) {
  std::vector<double> y(256);
  const double d = f16_at(x, 208);
  size_t ql = 0, qh = 128, sc = 192, out = 0;
  for (int n = 0; n < 256; n += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((at(x, ql + l + 0) & 0xF) | (((at(x, qh + l) >> 0) & 3) << 4)) - 32;
      const int q2 = ((at(x, ql + l + 32) & 0xF) | (((at(x, qh + l) >> 2) & 3) << 4)) - 32;
      const int q3 = ((at(x, ql + l + 0) >> 4) | (((at(x, qh + l) >> 4) & 3) << 4)) - 32;
      const int q4 = ((at(x, ql + l + 32) >> 4) | (((at(x, qh + l) >> 6) & 3) << 4)) - 32;
      auto s = [&](int k) { return static_cast<int8_t>(at(x, sc + k)); };
      y[out + l + 0] = d * s(is + 0) * q1;
      y[out + l + 32] = d * s(is + 2) * q2;
      y[out + l + 64] = d * s(is + 4) * q3;
      y[out + l + 96] = d * s(is + 6) * q4;
    }
    out += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
  return y;
}

struct Case {
  TensorType type;
  Ref ref;
  std::vector<size_t> f16_fields;  ///< byte offsets of the block's f16 scales
};

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {TensorType::Q4_0, ref_q4_0, {0}},     {TensorType::Q4_1, ref_q4_1, {0, 2}},
      {TensorType::Q5_0, ref_q5_0, {0}},     {TensorType::Q5_1, ref_q5_1, {0, 2}},
      {TensorType::Q8_0, ref_q8_0, {0}},     {TensorType::Q2_K, ref_q2_k, {80, 82}},
      {TensorType::Q3_K, ref_q3_k, {108}},   {TensorType::Q4_K, ref_q4_k, {0, 2}},
      {TensorType::Q5_K, ref_q5_k, {0, 2}},  {TensorType::Q6_K, ref_q6_k, {208}},
  };
  return c;
}

Bytes block(TensorType t) { return Bytes(gguf::type_info(t).type_size, std::byte{0}); }
void set(Bytes& b, size_t i, uint8_t v) { b[i] = static_cast<std::byte>(v); }

}  // namespace

TEST_SUITE("model.quant") {
  TEST_CASE("type table: block sizes and bytes per block (gguf-py GGML_QUANT_SIZES)") {
    const std::map<TensorType, std::pair<uint32_t, uint32_t>> want = {
        {TensorType::F32, {1, 4}},      {TensorType::F16, {1, 2}},      {TensorType::BF16, {1, 2}},
        {TensorType::Q4_0, {32, 18}},   {TensorType::Q4_1, {32, 20}},   {TensorType::Q5_0, {32, 22}},
        {TensorType::Q5_1, {32, 24}},   {TensorType::Q8_0, {32, 34}},   {TensorType::Q2_K, {256, 84}},
        {TensorType::Q3_K, {256, 110}}, {TensorType::Q4_K, {256, 144}}, {TensorType::Q5_K, {256, 176}},
        {TensorType::Q6_K, {256, 210}}, {TensorType::Q8_K, {256, 292}}, {TensorType::IQ4_XS, {256, 136}},
        {TensorType::TQ2_0, {256, 66}}, {TensorType::MXFP4, {32, 17}}};
    for (const auto& [t, bs] : want) {
      const std::string name = gguf::type_name(t);
      CAPTURE(name);
      CHECK(gguf::type_info(t).block_size == bs.first);
      CHECK(gguf::type_info(t).type_size == bs.second);
    }
    CHECK(gguf::supported_types().size() == 13);
    for (TensorType t : gguf::supported_types()) CHECK(gguf::type_info(t).supported());
    for (TensorType t : {TensorType::Q8_K, TensorType::IQ2_XXS, TensorType::TQ1_0, TensorType::MXFP4, TensorType::Q8_1})
      CHECK_FALSE(gguf::type_info(t).supported());
    CHECK(gguf::type_info(4u) == nullptr);   // Q4_2, removed
    CHECK(gguf::type_info(31u) == nullptr);  // Q4_0_4_4, removed
    CHECK(std::string(gguf::type_name(static_cast<TensorType>(99))) == "unknown");
    CHECK(tensor_bytes(TensorType::Q4_K, 512) == 288);
    CHECK_THROWS_AS(tensor_bytes(TensorType::Q4_K, 100), ArgumentError);
    CHECK_THROWS_AS(tensor_bytes(TensorType::IQ2_XXS, 256), ArgumentError);
  }

  TEST_CASE("handcrafted blocks decode to hand-computed values") {
    SUBCASE("F16, BF16") {
      Bytes h(6);
      put16(h, 0, 0x3C00);  // 1
      put16(h, 2, 0xC100);  // -2.5
      put16(h, 4, 0x0001);  // 2^-24
      CHECK(decode(TensorType::F16, h) == std::vector<float>{1.0f, -2.5f, std::ldexp(1.0f, -24)});
      Bytes b(4);
      put16(b, 0, 0x3F80);  // 1
      put16(b, 2, 0xC020);  // -2.5
      CHECK(decode(TensorType::BF16, b) == std::vector<float>{1.0f, -2.5f});
    }
    SUBCASE("Q4_0: d * (q - 8)") {
      Bytes b = block(TensorType::Q4_0);
      put16(b, 0, 0x3800);  // d = 0.5
      set(b, 2, 0x9F);      // element 0: 15 -> (15-8)*0.5 = 3.5; element 16: 9 -> 0.5
      const auto y = decode(TensorType::Q4_0, b);
      CHECK(y[0] == 3.5f);
      CHECK(y[16] == 0.5f);
      CHECK(y[15] == -4.0f);  // q = 0 -> -8 * 0.5
      CHECK(y[31] == -4.0f);
    }
    SUBCASE("Q4_1: d * q + m") {
      Bytes b = block(TensorType::Q4_1);
      put16(b, 0, 0x3400);  // d = 0.25
      put16(b, 2, 0xBC00);  // m = -1
      set(b, 4, 0x3A);      // element 0: 10 -> 1.5; element 16: 3 -> -0.25
      const auto y = decode(TensorType::Q4_1, b);
      CHECK(y[0] == 1.5f);
      CHECK(y[16] == -0.25f);
      CHECK(y[1] == -1.0f);
    }
    SUBCASE("Q5_0: fifth bit from qh") {
      Bytes b = block(TensorType::Q5_0);
      put16(b, 0, 0x3C00);  // d = 1
      set(b, 2, 0x01);      // qh bit 0: element 0
      set(b, 4, 0x01);      // qh bit 16: element 16
      set(b, 6, 0x21);      // element 0: 1 | 16 -> 17 - 16 = 1; element 16: 2 | 16 -> 2
      const auto y = decode(TensorType::Q5_0, b);
      CHECK(y[0] == 1.0f);
      CHECK(y[16] == 2.0f);
      CHECK(y[1] == -16.0f);
    }
    SUBCASE("Q5_1") {
      Bytes b = block(TensorType::Q5_1);
      put16(b, 0, 0x3800);  // d = 0.5
      put16(b, 2, 0x4000);  // m = 2
      set(b, 7, 0x80);      // qh bit 31: element 31
      set(b, 8 + 15, 0xF0); // element 31: 15 | 16 = 31 -> 31 * 0.5 + 2 = 17.5; element 15: 0 -> 2
      const auto y = decode(TensorType::Q5_1, b);
      CHECK(y[31] == 17.5f);
      CHECK(y[15] == 2.0f);
    }
    SUBCASE("Q8_0") {
      Bytes b = block(TensorType::Q8_0);
      put16(b, 0, 0x3000);  // d = 0.125
      set(b, 2, 0x80);      // -128 -> -16
      set(b, 3, 0x7F);      // 127 -> 15.875
      const auto y = decode(TensorType::Q8_0, b);
      CHECK(y[0] == -16.0f);
      CHECK(y[1] == 15.875f);
    }
    SUBCASE("Q2_K: (d * sc) * q - dmin * m, 16 sub-blocks of 16") {
      Bytes b = block(TensorType::Q2_K);
      put16(b, 80, 0x3C00);  // d = 1
      put16(b, 82, 0x3800);  // dmin = 0.5
      set(b, 0, 0x23);       // sub-block 0: sc 3, m 2
      set(b, 2, 0x01);       // sub-block 2: sc 1, m 0
      set(b, 4, 0x15);       // sub-block 4: sc 5, m 1
      set(b, 16, 0xE4);      // qs[0] = 11 10 01 00: elements 0, 32, 64, 96 get q = 0, 1, 2, 3
      const auto y = decode(TensorType::Q2_K, b);
      CHECK(y[0] == -1.0f);   // 3*0 - 0.5*2
      CHECK(y[32] == 1.0f);   // 1*1 - 0
      CHECK(y[64] == 9.5f);   // 5*2 - 0.5*1
      CHECK(y[96] == 0.0f);   // sub-block 6: sc 0, m 0
      CHECK(y[16] == 0.0f);   // sub-block 1: sc 0, m 0, q 0
    }
    SUBCASE("Q3_K: (d * (sc - 32)) * q, q = low 2 bits - 4 unless the hmask bit is set") {
      Bytes b = block(TensorType::Q3_K);
      put16(b, 108, 0x4000);  // d = 2
      set(b, 96 + 0, 0x01);   // sub-block 0: low nibble 1
      set(b, 96 + 8, 0x02);   // sub-block 0: high bits 2 -> 33 - 32 = 1; sub-block 15: stored 0 -> -32
      set(b, 32 + 0, 0x03);   // element 0: low bits 3
      set(b, 32 + 1, 0x03);   // element 1: low bits 3
      set(b, 0, 0x01);        // hmask[0] bit 0: element 0 has no -4
      set(b, 32 + 63, 0x80);  // element 255 (h 1, k 3, l 31): low bits 2
      set(b, 31, 0x80);       // hmask[31] bit 7: element 255 has no -4
      const auto y = decode(TensorType::Q3_K, b);
      CHECK(y[0] == 6.0f);       // 2 * 1 * 3
      CHECK(y[1] == -2.0f);      // 2 * 1 * (3 - 4)
      CHECK(y[255] == -128.0f);  // 2 * -32 * 2
      CHECK(y[2] == -8.0f);      // 2 * 1 * (0 - 4)
    }
    SUBCASE("Q4_K: 6-bit scales and mins, 8 sub-blocks of 32") {
      Bytes b = block(TensorType::Q4_K);
      put16(b, 0, 0x3800);  // d = 0.5
      put16(b, 2, 0x3400);  // dmin = 0.25
      set(b, 4 + 0, 10);    // sc[0] = 10
      set(b, 4 + 4, 4);     // m[0] = 4
      set(b, 4 + 3, 0xC0);  // sc[7] high bits 3
      set(b, 4 + 7, 0x80);  // m[7] high bits 2
      set(b, 4 + 11, 0x1F); // sc[7] low 15 -> 63; m[7] low 1 -> 33
      set(b, 16 + 0, 0x07);        // element 0: 7
      set(b, 16 + 96 + 31, 0xF0);  // element 255 (c 3, k 1, l 31): 15
      const auto y = decode(TensorType::Q4_K, b);
      CHECK(y[0] == 34.0f);       // 0.5*10*7 - 0.25*4
      CHECK(y[255] == 464.25f);   // 0.5*63*15 - 0.25*33
      CHECK(y[32] == 0.0f);       // sub-block 1: sc 0, m 0
    }
    SUBCASE("Q5_K: Q4_K plus a fifth bit") {
      Bytes b = block(TensorType::Q5_K);
      put16(b, 0, 0x3800);
      put16(b, 2, 0x3400);
      set(b, 4 + 0, 10);
      set(b, 4 + 4, 4);
      set(b, 4 + 3, 0xC0);
      set(b, 4 + 7, 0x80);
      set(b, 4 + 11, 0x1F);
      set(b, 16 + 0, 0x01);        // qh[0] bit 0: element 0
      set(b, 16 + 31, 0x80);       // qh[31] bit 7: element 255
      set(b, 48 + 0, 0x07);
      set(b, 48 + 96 + 31, 0xF0);
      const auto y = decode(TensorType::Q5_K, b);
      CHECK(y[0] == 114.0f);      // 0.5*10*23 - 1
      CHECK(y[255] == 968.25f);   // 0.5*63*31 - 8.25
    }
    SUBCASE("Q6_K: (d * sc) * (q - 32), int8 scales") {
      Bytes b = block(TensorType::Q6_K);
      put16(b, 208, 0x3800);     // d = 0.5
      set(b, 192 + 0, 2);        // sub-block 0 scale 2
      set(b, 192 + 15, 0xFD);    // sub-block 15 scale -3
      set(b, 0, 0x05);           // element 0 low 4 bits: 5
      set(b, 128, 0x02);         // element 0 high 2 bits: 2 -> 37 - 32 = 5
      set(b, 64 + 63, 0xF0);     // element 255 (h 1, r 127): low 4 bits 15, high 0 -> -17
      const auto y = decode(TensorType::Q6_K, b);
      CHECK(y[0] == 5.0f);       // 0.5*2*5
      CHECK(y[255] == 25.5f);    // 0.5*-3*-17
      CHECK(y[1] == -32.0f);     // 0.5*2*(0-32)
    }
  }

  TEST_CASE("random blocks agree with the naive double-precision reference") {
    std::mt19937_64 rng(42);
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> scale(-2.0f, 2.0f);
    for (const Case& c : cases()) {
      const std::string name = gguf::type_name(c.type);
      CAPTURE(name);
      const auto& ti = gguf::type_info(c.type);
      const int n_blocks = 64;
      Bytes all(static_cast<size_t>(n_blocks) * ti.type_size);
      for (auto& x : all) x = static_cast<std::byte>(byte(rng));
      for (int k = 0; k < n_blocks; ++k)
        for (size_t off : c.f16_fields) put16(all, k * ti.type_size + off, gguf::f32_to_f16(scale(rng)));
      const auto got = decode(c.type, all);
      double worst = 0;
      for (int k = 0; k < n_blocks; ++k) {
        const Bytes blk(all.begin() + k * ti.type_size, all.begin() + (k + 1) * ti.type_size);
        const auto want = c.ref(blk);
        REQUIRE(want.size() == ti.block_size);
        // float32 rounds each product and sum: allow 1e-6 of the block's largest value
        // (a misplaced bit moves a value by a whole quant step, far more).
        double big = 0;
        for (double w : want) big = std::max(big, std::fabs(w));
        for (size_t i = 0; i < want.size(); ++i)
          worst = std::max(worst, std::fabs(got[k * ti.block_size + i] - want[i]) / (1e-6 * big + 1e-30));
      }
      CHECK(worst <= 1.0);
    }
  }

  TEST_CASE("quantizers round-trip through the dequantizers within each type's error bound") {
    std::mt19937_64 rng(7);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    const uint64_t n = 8192;
    std::vector<float> x(n);
    for (auto& v : x) v = normal(rng);
    x[100] = 0.3f;  // an outlier
    double rms_x = 0;
    for (float v : x) rms_x += static_cast<double>(v) * v;
    rms_x = std::sqrt(rms_x / n);
    // Relative RMS error bounds, about 1.25x what these quantizers give on this
    // data (a quant step / sqrt(12) per element: Q4_0 d = absmax/8 ~ 0.26 sigma -> 0.08).
    // Measured: F16 0.0002, BF16 0.0017, Q8_0 0.0056, Q4_0 0.088, Q4_1 0.079, Q5_0 0.044,
    // Q5_1 0.038, Q2_K 0.33, Q3_K 0.157, Q4_K 0.080, Q5_K 0.038, Q6_K 0.019.
    const std::map<TensorType, double> bound = {
        {TensorType::F32, 0.0},    {TensorType::F16, 3e-4},   {TensorType::BF16, 2.5e-3}, {TensorType::Q8_0, 0.007},
        {TensorType::Q4_0, 0.11},  {TensorType::Q4_1, 0.10},  {TensorType::Q5_0, 0.055},  {TensorType::Q5_1, 0.048},
        {TensorType::Q2_K, 0.41},  {TensorType::Q3_K, 0.2},   {TensorType::Q4_K, 0.1},    {TensorType::Q5_K, 0.048},
        {TensorType::Q6_K, 0.024}};
    for (TensorType t : gguf::supported_types()) {
      const std::string name = gguf::type_name(t);
      CAPTURE(name);
      Bytes q(tensor_bytes(t, n));
      quantize(t, x.data(), q.data(), n, 1);
      std::vector<float> y(n);
      dequantize(t, q.data(), y.data(), n, 1);
      double err = 0, max_err = 0;
      for (uint64_t i = 0; i < n; ++i) {
        const double e = static_cast<double>(y[i]) - x[i];
        err += e * e;
        max_err = std::max(max_err, std::fabs(e));
      }
      const double rel = std::sqrt(err / n) / rms_x;
      MESSAGE(name << ": relative RMS error " << rel << ", max |error| " << max_err);
      CHECK(rel <= bound.at(t));
      if (t == TensorType::Q8_0) {
        // ggml's reference: |x - q d| <= d/2 plus the f16 rounding of d; d = absmax/127 per block.
        for (uint64_t b = 0; b < n / 32; ++b) {
          float amax = 0;
          for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
          for (int j = 0; j < 32; ++j) CHECK(std::fabs(y[b * 32 + j] - x[b * 32 + j]) <= 0.57f * amax / 127);
        }
      }
      // Threads change nothing.
      Bytes q2(q.size());
      quantize(t, x.data(), q2.data(), n, 2);
      CHECK(q2 == q);
      std::vector<float> y2(n);
      dequantize(t, q.data(), y2.data(), n, 2);
      CHECK(y2 == y);
    }
  }
}
