// Q3_K: super-blocks of 256, {u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d}
// (110 bytes). 16 sub-blocks of 16 with 6-bit scales stored + 32: the low 4
// bits of scale s are scales[s] & 15 (s < 8) or scales[s - 8] >> 4, the high
// 2 bits are bits 2(s / 4).. of scales[8 + s % 4]. Element e = 128 h + 32 k + l
// takes 2 low bits from bits 2k.. of qs[32 h + l] and subtracts 4 when bit
// e / 32 of hmask[l] is clear; value (d * (sc - 32)) * q, q in [-4, 3].
#include <algorithm>
#include <cmath>

#include "model/gguf.hpp"
#include "model/quant/quant.hpp"

namespace kveval::quant {

namespace {
constexpr int64_t kBytes = 110;

int scale6(const std::byte* sc, int s) {
  const int lo = s < 8 ? (u8(sc, s) & 15) : (u8(sc, s - 8) >> 4);
  const int hi = (u8(sc, 8 + s % 4) >> (2 * (s / 4))) & 3;
  return (lo | (hi << 4)) - 32;
}
}  // namespace

void dequantize_q3_k(const std::byte* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const std::byte* b = src + i * kBytes;
    const std::byte* hmask = b;
    const float d = load_f16(b + 108);
    float dl[16];  // d * (scale - 32) of each sub-block of 16
    for (int s = 0; s < 16; ++s) dl[s] = d * static_cast<float>(scale6(b + 96, s));
    float* y = dst + i * QK_K;
    for (int h = 0; h < 2; ++h) {
      const std::byte* qs = b + 32 + 32 * h;
      for (int k = 0; k < 4; ++k) {
        const int bit = 4 * h + k;  // hmask bit of elements 128h + 32k + [0, 32)
        float* yk = y + 128 * h + 32 * k;
        const float* sc = dl + 8 * h + 2 * k;
        for (int l = 0; l < 32; ++l) {
          const int q = ((u8(qs, l) >> (2 * k)) & 3) - (((u8(hmask, l) >> bit) & 1) ? 0 : 4);
          yk[l] = sc[l / 16] * static_cast<float>(q);
        }
      }
    }
  }
}

void quantize_q3_k(const float* src, std::byte* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const float* x = src + i * QK_K;
    std::byte* b = dst + i * kBytes;
    std::fill(b, b + kBytes, std::byte{0});
    // Sub-block scale: the signed value of largest magnitude maps to q = -4.
    float scale[16], big = 0;
    for (int s = 0; s < 16; ++s) {
      const float max = signed_absmax(x + 16 * s, 16);
      scale[s] = max / -4;
      if (std::fabs(scale[s]) > std::fabs(big)) big = scale[s];
    }
    store_u16(b + 108, gguf::f32_to_f16(big / -32));
    const float d = load_f16(b + 108);
    for (int s = 0; s < 16; ++s) {
      const int ls = d != 0 ? std::clamp(round_away(scale[s] / d), -32, 31) : 0;
      const int u = ls + 32;  // stored 6-bit value
      if (s < 8)
        b[96 + s] |= static_cast<std::byte>(u & 15);
      else
        b[96 + s - 8] |= static_cast<std::byte>((u & 15) << 4);
      b[96 + 8 + s % 4] |= static_cast<std::byte>((u >> 4) << (2 * (s / 4)));
      const float dl = d * static_cast<float>(ls);
      for (int l = 0; l < 16; ++l) {
        const int e = 16 * s + l;
        const int q = dl != 0 ? std::clamp(round_away(x[e] / dl), -4, 3) : 0;
        const int v = q + 4;  // bit 2 set <=> no -4 offset
        const int h = e / 128, k = (e % 128) / 32, j = e % 32;
        b[32 + 32 * h + j] |= static_cast<std::byte>((v & 3) << (2 * k));
        b[j] |= static_cast<std::byte>((v >> 2) << (e / 32));
      }
    }
  }
}

}  // namespace kveval::quant
