// Q8_0: blocks of 32, {f16 d; i8 qs[32]} (34 bytes); value q * d.
// Quantizer: ggml's quantize_row_q8_0_ref (d = absmax / 127, round half away from zero).
#include <cmath>

#include "model/gguf.hpp"
#include "model/quant/quant.hpp"

namespace kveval::quant {

namespace {
constexpr int64_t kBytes = 34;
}

void dequantize_q8_0(const std::byte* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const std::byte* b = src + i * kBytes;
    const float d = load_f16(b);
    float* y = dst + i * QK8_0;
    for (int j = 0; j < QK8_0; ++j) y[j] = static_cast<float>(static_cast<int8_t>(u8(b + 2, j))) * d;
  }
}

void quantize_q8_0(const float* src, std::byte* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const float* x = src + i * QK8_0;
    std::byte* b = dst + i * kBytes;
    float amax = 0;
    for (int j = 0; j < QK8_0; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    store_u16(b, gguf::f32_to_f16(d));
    for (int j = 0; j < QK8_0; ++j) b[2 + j] = static_cast<std::byte>(static_cast<int8_t>(round_away(x[j] * id)));
  }
}

}  // namespace kveval::quant
