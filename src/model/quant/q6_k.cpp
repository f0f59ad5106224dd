// Q6_K: super-blocks of 256, {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}
// (210 bytes). Element e = 128 h + r (h < 2, r < 128): low 4 bits are nibble
// r / 64 of ql[64 h + r % 64], high 2 bits are bits 2(r / 32).. of
// qh[32 h + r % 32]; value (d * scales[e / 16]) * (q - 32).
#include <algorithm>
#include <cmath>

#include "model/gguf.hpp"
#include "model/quant/quant.hpp"

namespace kveval::quant {

namespace {
constexpr int64_t kBytes = 210;
}

void dequantize_q6_k(const std::byte* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const std::byte* b = src + i * kBytes;
    const float d = load_f16(b + 208);
    float d1[16];  // d * scale of each sub-block of 16
    for (int s = 0; s < 16; ++s) d1[s] = d * static_cast<float>(static_cast<int8_t>(u8(b + 192, s)));
    float* y = dst + i * QK_K;
    for (int h = 0; h < 2; ++h) {
      const std::byte* ql = b + 64 * h;
      const std::byte* qh = b + 128 + 32 * h;
      const float* sc = d1 + 8 * h;
      float* yh = y + 128 * h;
      // r = l, l + 32, l + 64, l + 96: ql nibble r / 64 of ql[r % 64], qh bits 2(r / 32)
      for (int l = 0; l < 32; ++l) {
        const int lo0 = u8(ql, l), lo1 = u8(ql, l + 32), hi = u8(qh, l);
        const int s = l / 16;
        yh[l] = sc[s] * static_cast<float>(((lo0 & 15) | ((hi & 3) << 4)) - 32);
        yh[l + 32] = sc[s + 2] * static_cast<float>(((lo1 & 15) | (((hi >> 2) & 3) << 4)) - 32);
        yh[l + 64] = sc[s + 4] * static_cast<float>(((lo0 >> 4) | (((hi >> 4) & 3) << 4)) - 32);
        yh[l + 96] = sc[s + 6] * static_cast<float>(((lo1 >> 4) | (((hi >> 6) & 3) << 4)) - 32);
      }
    }
  }
}

void quantize_q6_k(const float* src, std::byte* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const float* x = src + i * QK_K;
    std::byte* b = dst + i * kBytes;
    std::fill(b, b + kBytes, std::byte{0});
    // Sub-block scale: the signed value of largest magnitude maps to q = -32.
    float scale[16], big = 0;
    for (int s = 0; s < 16; ++s) {
      const float max = signed_absmax(x + 16 * s, 16);
      scale[s] = max / -32;
      if (std::fabs(scale[s]) > std::fabs(big)) big = scale[s];
    }
    store_u16(b + 208, gguf::f32_to_f16(big / -128));
    const float d = load_f16(b + 208);
    for (int s = 0; s < 16; ++s) {
      const int ls = d != 0 ? std::clamp(round_away(scale[s] / d), -128, 127) : 0;
      b[192 + s] = static_cast<std::byte>(static_cast<uint8_t>(static_cast<int8_t>(ls)));
      const float d1 = d * static_cast<float>(ls);
      for (int l = 0; l < 16; ++l) {
        const int e = 16 * s + l;
        const int v = (d1 != 0 ? std::clamp(round_away(x[e] / d1), -32, 31) : 0) + 32;
        const int h = e / 128, r = e % 128;
        b[64 * h + r % 64] |= static_cast<std::byte>((v & 15) << (4 * (r / 64)));
        b[128 + 32 * h + r % 32] |= static_cast<std::byte>((v >> 4) << (2 * (r / 32)));
      }
    }
  }
}

}  // namespace kveval::quant
