// Q5_K: super-blocks of 256, {f16 d; f16 dmin; u8 scales[12]; u8 qh[32];
// u8 qs[128]} (176 bytes). Low 4 bits as Q4_K's nibbles; bit 4 of element e is
// bit e / 32 of qh[e % 32]; value (d * sc) * q - (dmin * m).
#include <algorithm>

#include "model/quant/quant.hpp"

namespace kveval::quant {

namespace {
constexpr int64_t kBytes = 176;
}

void dequantize_q5_k(const std::byte* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const std::byte* b = src + i * kBytes;
    const float d = load_f16(b), dmin = load_f16(b + 2);
    uint8_t sc[8], m[8];
    unpack_scale_min_k4(b + 4, sc, m);
    const std::byte* qh = b + 16;
    const std::byte* qs = b + 48;
    float* y = dst + i * QK_K;
    for (int c = 0; c < 4; ++c)
      for (int k = 0; k < 2; ++k) {
        const int s = 2 * c + k;  // sub-block, also the qh bit of its elements
        const float d1 = d * static_cast<float>(sc[s]);
        const float m1 = dmin * static_cast<float>(m[s]);
        for (int l = 0; l < 32; ++l) {
          const int q = ((u8(qs, 32 * c + l) >> (4 * k)) & 15) | (((u8(qh, l) >> s) & 1) << 4);
          y[32 * s + l] = d1 * static_cast<float>(q) - m1;
        }
      }
  }
}

void quantize_q5_k(const float* src, std::byte* dst, int64_t n_blocks) {
  uint8_t q[QK_K];
  for (int64_t i = 0; i < n_blocks; ++i) {
    std::byte* b = dst + i * kBytes;
    std::fill(b, b + kBytes, std::byte{0});
    fit_k4(src + i * QK_K, b, 32, q);
    for (int e = 0; e < QK_K; ++e) {
      b[48 + 32 * (e / 64) + e % 32] |= static_cast<std::byte>((q[e] & 15) << (4 * ((e / 32) % 2)));
      b[16 + e % 32] |= static_cast<std::byte>((q[e] >> 4) << (e / 32));
    }
  }
}

}  // namespace kveval::quant
