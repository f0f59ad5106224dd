// Q2_K: super-blocks of 256, {u8 scales[16]; u8 qs[64]; f16 d; f16 dmin}
// (84 bytes). 16 sub-blocks of 16; scales[s] holds the 4-bit scale (low) and
// min (high) of sub-block s. Element e = 128 h + 32 k + l (h < 2, k < 4,
// l < 32) is bits 2k..2k+1 of qs[32 h + l]; value (d * sc) * q - (dmin * m).
#include <algorithm>
#include <cmath>

#include "model/gguf.hpp"
#include "model/quant/quant.hpp"

namespace kveval::quant {

namespace {
constexpr int64_t kBytes = 84;
}

void dequantize_q2_k(const std::byte* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const std::byte* b = src + i * kBytes;
    const float d = load_f16(b + 80), dmin = load_f16(b + 82);
    float dl[16], ml[16];  // per sub-block of 16: d * scale, dmin * min
    for (int s = 0; s < 16; ++s) {
      dl[s] = d * static_cast<float>(u8(b, s) & 15);
      ml[s] = dmin * static_cast<float>(u8(b, s) >> 4);
    }
    float* y = dst + i * QK_K;
    for (int h = 0; h < 2; ++h) {
      const std::byte* qs = b + 16 + 32 * h;
      for (int k = 0; k < 4; ++k) {
        float* yk = y + 128 * h + 32 * k;
        const int s0 = 8 * h + 2 * k;  // sub-blocks s0 (l < 16) and s0 + 1
        for (int l = 0; l < 32; ++l)
          yk[l] = dl[s0 + l / 16] * static_cast<float>((u8(qs, l) >> (2 * k)) & 3) - ml[s0 + l / 16];
      }
    }
  }
}

void quantize_q2_k(const float* src, std::byte* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const float* x = src + i * QK_K;
    std::byte* b = dst + i * kBytes;
    std::fill(b, b + kBytes, std::byte{0});
    float scale[16], min[16], max_scale = 0, max_min = 0;
    for (int s = 0; s < 16; ++s) {
      float lo = 0, hi = x[16 * s];
      for (int l = 0; l < 16; ++l) {
        lo = std::min(lo, x[16 * s + l]);
        hi = std::max(hi, x[16 * s + l]);
      }
      scale[s] = (hi - lo) / 3;
      min[s] = -lo;
      max_scale = std::max(max_scale, scale[s]);
      max_min = std::max(max_min, min[s]);
    }
    store_u16(b + 80, gguf::f32_to_f16(max_scale / 15));
    store_u16(b + 82, gguf::f32_to_f16(max_min / 15));
    const float d = load_f16(b + 80), dmin = load_f16(b + 82);
    for (int s = 0; s < 16; ++s) {
      const int ls = d > 0 ? std::clamp(round_away(scale[s] / d), scale[s] > 0 ? 1 : 0, 15) : 0;
      const int lm = dmin > 0 ? std::clamp(round_away(min[s] / dmin), 0, 15) : 0;
      b[s] = static_cast<std::byte>(ls | (lm << 4));
      const float dl = d * static_cast<float>(ls), ml = dmin * static_cast<float>(lm);
      for (int l = 0; l < 16; ++l) {
        const int e = 16 * s + l;
        const int q = dl > 0 ? std::clamp(round_away((x[e] + ml) / dl), 0, 3) : 0;
        const int h = e / 128, k = (e % 128) / 32, j = e % 32;
        b[16 + 32 * h + j] |= static_cast<std::byte>(q << (2 * k));
      }
    }
  }
}

}  // namespace kveval::quant
