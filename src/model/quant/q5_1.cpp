// Q5_1: blocks of 32, {f16 d; f16 m; u8 qh[4]; u8 qs[16]} (24 bytes). Bits as
// Q5_0; value d * q + m. Quantizer: ggml's quantize_row_q5_1_ref.
#include <algorithm>
#include <limits>

#include "model/gguf.hpp"
#include "model/quant/quant.hpp"

namespace kveval::quant {

namespace {
constexpr int64_t kBytes = 24;
}

void dequantize_q5_1(const std::byte* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const std::byte* b = src + i * kBytes;
    const float d = load_f16(b), m = load_f16(b + 2);
    const uint32_t qh = load_u32(b + 4);
    float* y = dst + i * QK5_1;
    for (int j = 0; j < 16; ++j) {
      const int q = u8(b + 8, j);
      const int h0 = static_cast<int>((qh >> j) & 1u) << 4, h1 = static_cast<int>((qh >> (j + 16)) & 1u) << 4;
      y[j] = d * static_cast<float>((q & 15) | h0) + m;
      y[j + 16] = d * static_cast<float>((q >> 4) | h1) + m;
    }
  }
}

void quantize_q5_1(const float* src, std::byte* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const float* x = src + i * QK5_1;
    std::byte* b = dst + i * kBytes;
    float min = std::numeric_limits<float>::max(), max = -std::numeric_limits<float>::max();
    for (int j = 0; j < QK5_1; ++j) {
      min = std::min(min, x[j]);
      max = std::max(max, x[j]);
    }
    const float d = (max - min) / 31;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    store_u16(b, gguf::f32_to_f16(d));
    store_u16(b + 2, gguf::f32_to_f16(min));
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      const int q0 = std::min(31, static_cast<int>(static_cast<uint8_t>((x[j] - min) * id + 0.5f)));
      const int q1 = std::min(31, static_cast<int>(static_cast<uint8_t>((x[j + 16] - min) * id + 0.5f)));
      b[8 + j] = static_cast<std::byte>((q0 & 15) | ((q1 & 15) << 4));
      qh |= static_cast<uint32_t>(q0 >> 4) << j;
      qh |= static_cast<uint32_t>(q1 >> 4) << (j + 16);
    }
    store_u16(b + 4, static_cast<uint16_t>(qh & 0xffff));
    store_u16(b + 6, static_cast<uint16_t>(qh >> 16));
  }
}

}  // namespace kveval::quant
