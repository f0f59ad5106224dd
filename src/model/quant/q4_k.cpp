// Q4_K: super-blocks of 256, {f16 d; f16 dmin; u8 scales[12]; u8 qs[128]}
// (144 bytes). 8 sub-blocks of 32 with 6-bit scales and mins (packing in
// common.cpp). Element e = 64 c + 32 k + l (c < 4, k < 2, l < 32) is nibble k
// of qs[32 c + l], in sub-block 2c + k; value (d * sc) * q - (dmin * m).
#include <algorithm>
#include <cmath>

#include "model/gguf.hpp"
#include "model/quant/quant.hpp"

namespace kveval::quant {

namespace {
constexpr int64_t kBytes = 144;
}

void dequantize_q4_k(const std::byte* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const std::byte* b = src + i * kBytes;
    const float d = load_f16(b), dmin = load_f16(b + 2);
    uint8_t sc[8], m[8];
    unpack_scale_min_k4(b + 4, sc, m);
    const std::byte* qs = b + 16;
    float* y = dst + i * QK_K;
    for (int c = 0; c < 4; ++c)
      for (int k = 0; k < 2; ++k) {
        const float d1 = d * static_cast<float>(sc[2 * c + k]);
        const float m1 = dmin * static_cast<float>(m[2 * c + k]);
        for (int l = 0; l < 32; ++l)
          y[64 * c + 32 * k + l] = d1 * static_cast<float>((u8(qs, 32 * c + l) >> (4 * k)) & 15) - m1;
      }
  }
}

void fit_k4(const float* x, std::byte* b, int levels, uint8_t* q) {
  float scale[8], min[8], max_scale = 0, max_min = 0;
  for (int s = 0; s < 8; ++s) {
    float lo = 0, hi = x[32 * s];
    for (int l = 0; l < 32; ++l) {
      lo = std::min(lo, x[32 * s + l]);
      hi = std::max(hi, x[32 * s + l]);
    }
    scale[s] = (hi - lo) / static_cast<float>(levels - 1);
    min[s] = -lo;
    max_scale = std::max(max_scale, scale[s]);
    max_min = std::max(max_min, min[s]);
  }
  store_u16(b, gguf::f32_to_f16(max_scale / 63));
  store_u16(b + 2, gguf::f32_to_f16(max_min / 63));
  const float d = load_f16(b), dmin = load_f16(b + 2);
  uint8_t ls[8], lm[8];
  for (int s = 0; s < 8; ++s) {
    ls[s] = static_cast<uint8_t>(d > 0 ? std::clamp(round_away(scale[s] / d), scale[s] > 0 ? 1 : 0, 63) : 0);
    lm[s] = static_cast<uint8_t>(dmin > 0 ? std::clamp(round_away(min[s] / dmin), 0, 63) : 0);
    const float d1 = d * static_cast<float>(ls[s]), m1 = dmin * static_cast<float>(lm[s]);
    for (int l = 0; l < 32; ++l)
      q[32 * s + l] =
          static_cast<uint8_t>(d1 > 0 ? std::clamp(round_away((x[32 * s + l] + m1) / d1), 0, levels - 1) : 0);
  }
  pack_scale_min_k4(ls, lm, b + 4);
}

void quantize_q4_k(const float* src, std::byte* dst, int64_t n_blocks) {
  uint8_t q[QK_K];
  for (int64_t i = 0; i < n_blocks; ++i) {
    std::byte* b = dst + i * kBytes;
    std::fill(b, b + kBytes, std::byte{0});
    fit_k4(src + i * QK_K, b, 16, q);
    for (int e = 0; e < QK_K; ++e) b[16 + 32 * (e / 64) + e % 32] |= static_cast<std::byte>(q[e] << (4 * ((e / 32) % 2)));
  }
}

}  // namespace kveval::quant
