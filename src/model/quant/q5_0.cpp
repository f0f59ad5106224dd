// Q5_0: blocks of 32, {f16 d; u8 qh[4]; u8 qs[16]} (22 bytes). The low 4 bits
// as Q4_0's nibbles; bit j of the little-endian u32 qh is bit 4 of element j;
// value d * (q - 16). Quantizer: ggml's quantize_row_q5_0_ref.
#include <algorithm>
#include <cmath>

#include "model/gguf.hpp"
#include "model/quant/quant.hpp"

namespace kveval::quant {

namespace {
constexpr int64_t kBytes = 22;
}

void dequantize_q5_0(const std::byte* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const std::byte* b = src + i * kBytes;
    const float d = load_f16(b);
    const uint32_t qh = load_u32(b + 2);
    float* y = dst + i * QK5_0;
    for (int j = 0; j < 16; ++j) {
      const int q = u8(b + 6, j);
      const int h0 = static_cast<int>((qh >> j) & 1u) << 4, h1 = static_cast<int>((qh >> (j + 16)) & 1u) << 4;
      y[j] = d * static_cast<float>(((q & 15) | h0) - 16);
      y[j + 16] = d * static_cast<float>(((q >> 4) | h1) - 16);
    }
  }
}

void quantize_q5_0(const float* src, std::byte* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const float* x = src + i * QK5_0;
    std::byte* b = dst + i * kBytes;
    const float max = signed_absmax(x, QK5_0);
    const float d = max / -16;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    store_u16(b, gguf::f32_to_f16(d));
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      const int q0 = std::min(31, static_cast<int>(static_cast<int8_t>(x[j] * id + 16.5f)));
      const int q1 = std::min(31, static_cast<int>(static_cast<int8_t>(x[j + 16] * id + 16.5f)));
      b[6 + j] = static_cast<std::byte>((q0 & 15) | ((q1 & 15) << 4));
      qh |= static_cast<uint32_t>(q0 >> 4) << j;
      qh |= static_cast<uint32_t>(q1 >> 4) << (j + 16);
    }
    store_u16(b + 2, static_cast<uint16_t>(qh & 0xffff));
    store_u16(b + 4, static_cast<uint16_t>(qh >> 16));
  }
}

}  // namespace kveval::quant
