#pragma once
// bfloat16 <-> float32, the one definition every layer uses (the GGUF reader,
// the dequantizers, the backend's bf16 weights and activations).
// Rounding as ggml_compute_fp32_to_bf16 (ggml/src/ggml-impl.h): round to
// nearest even on the upper 16 bits; a NaN stays NaN (made quiet: bit 6 of the
// bf16 set) instead of rounding into an infinity.
#include <bit>
#include <cstddef>
#include <cstdint>

namespace kveval::util {

/// float -> bfloat16 bits, round to nearest even, NaN kept (quiet).
inline uint16_t f32_to_bf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 64u);  // NaN: force quiet
  return static_cast<uint16_t>((x + (0x7fffu + ((x >> 16) & 1u))) >> 16);
}

/// bfloat16 bits -> float (exact).
inline float bf16_to_f32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

/// y[i] = f32_to_bf16(x[i]) for i < n, on the calling thread (a loop the
/// compiler vectorises; x and y must not overlap).
inline void f32_to_bf16_n(const float* x, uint16_t* y, size_t n) {
#pragma omp simd
  for (size_t i = 0; i < n; ++i) y[i] = f32_to_bf16(x[i]);
}

}  // namespace kveval::util
