// Q4_1: blocks of 32, {f16 d; f16 m; u8 qs[16]} (20 bytes). Nibbles as Q4_0;
// value d * q + m. Quantizer: ggml's quantize_row_q4_1_ref (min/max fit).
#include <algorithm>
#include <limits>

#include "model/gguf.hpp"
#include "model/quant/quant.hpp"

namespace kveval::quant {

namespace {
constexpr int64_t kBytes = 20;
}

void dequantize_q4_1(const std::byte* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const std::byte* b = src + i * kBytes;
    const float d = load_f16(b), m = load_f16(b + 2);
    float* y = dst + i * QK4_1;
    for (int j = 0; j < 16; ++j) {
      const int q = u8(b + 4, j);
      y[j] = d * static_cast<float>(q & 15) + m;
      y[j + 16] = d * static_cast<float>(q >> 4) + m;
    }
  }
}

void quantize_q4_1(const float* src, std::byte* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const float* x = src + i * QK4_1;
    std::byte* b = dst + i * kBytes;
    float min = std::numeric_limits<float>::max(), max = -std::numeric_limits<float>::max();
    for (int j = 0; j < QK4_1; ++j) {
      min = std::min(min, x[j]);
      max = std::max(max, x[j]);
    }
    const float d = (max - min) / 15;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    store_u16(b, gguf::f32_to_f16(d));
    store_u16(b + 2, gguf::f32_to_f16(min));
    for (int j = 0; j < 16; ++j) {
      const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>((x[j] - min) * id + 0.5f)));
      const int q1 = std::min(15, static_cast<int>(static_cast<int8_t>((x[j + 16] - min) * id + 0.5f)));
      b[4 + j] = static_cast<std::byte>(q0 | (q1 << 4));
    }
  }
}

}  // namespace kveval::quant
