// Q4_0: blocks of 32, {f16 d; u8 qs[16]} (18 bytes). Element j < 16 is the low
// nibble of qs[j], element j + 16 its high nibble; value d * (q - 8).
// Quantizer: ggml's quantize_row_q4_0_ref (d = signed absmax / -8).
#include <algorithm>
#include <cmath>

#include "model/gguf.hpp"
#include "model/quant/quant.hpp"

namespace kveval::quant {

namespace {
constexpr int64_t kBytes = 18;
}

void dequantize_q4_0(const std::byte* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const std::byte* b = src + i * kBytes;
    const float d = load_f16(b);
    float* y = dst + i * QK4_0;
    for (int j = 0; j < 16; ++j) {
      const int q = u8(b + 2, j);
      y[j] = d * static_cast<float>((q & 15) - 8);
      y[j + 16] = d * static_cast<float>((q >> 4) - 8);
    }
  }
}

void quantize_q4_0(const float* src, std::byte* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const float* x = src + i * QK4_0;
    std::byte* b = dst + i * kBytes;
    const float max = signed_absmax(x, QK4_0);
    const float d = max / -8;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    store_u16(b, gguf::f32_to_f16(d));
    for (int j = 0; j < 16; ++j) {
      const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>(x[j] * id + 8.5f)));
      const int q1 = std::min(15, static_cast<int>(static_cast<int8_t>(x[j + 16] * id + 8.5f)));
      b[2 + j] = static_cast<std::byte>(q0 | (q1 << 4));
    }
  }
}

}  // namespace kveval::quant
