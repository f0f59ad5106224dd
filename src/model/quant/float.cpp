// F32, F16 and BF16 tensors: one element per block. F16 -> F32 is exact
// (util::f16_to_f32_n: F16C instructions when the build targets them);
// BF16 -> F32 is the 16 bits shifted up (gguf-py: `int16 << 16`).
#include <cstring>

#include "model/gguf.hpp"
#include "model/quant/quant.hpp"
#include "util/half.hpp"

namespace kveval::quant {

void dequantize_f32(const std::byte* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void dequantize_f16(const std::byte* src, float* dst, int64_t n) { util::f16_to_f32_n(src, dst, static_cast<size_t>(n)); }

void dequantize_bf16(const std::byte* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    std::memcpy(dst + i, &bits, 4);
  }
}

void quantize_f32(const float* src, std::byte* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void quantize_f16(const float* src, std::byte* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) store_u16(dst + 2 * i, gguf::f32_to_f16(src[i]));
}

void quantize_bf16(const float* src, std::byte* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) store_u16(dst + 2 * i, gguf::f32_to_bf16(src[i]));
}

}  // namespace kveval::quant
