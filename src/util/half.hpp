#pragma once
// IEEE 754 binary16 ("half", GGML_TYPE_F16) <-> float32, the one definition
// every layer uses (the GGUF reader and dequantizers, the f16 KV cache).
#include <cstddef>
#include <cstdint>

namespace kveval::util {

/// Largest finite half: 65504. A float of magnitude >= 65520 rounds to ±Inf.
inline constexpr float kF16Max = 65504.0f;

/// IEEE half bits -> float (exact, subnormals included; a NaN keeps its payload).
float f16_to_f32(uint16_t h);
/// dst[i] = f16_to_f32(half i at src) for i < n; src needs no alignment
/// (F16C's vcvtph2ps when the build targets it).
void f16_to_f32_n(const void* src, float* dst, size_t n);
/// float -> IEEE half bits, round to nearest even (IEEE 754 convertFormat);
/// magnitudes >= 65520 become ±Inf, a NaN stays NaN (made quiet).
uint16_t f32_to_f16(float f);
/// y[i] = f32_to_f16(x[i]) for i < n, bit for bit (F16C's vcvtps2ph when the
/// build targets it). Returns how many finite x[i] became ±Inf (|x| >= 65520);
/// x and y must not overlap.
size_t f32_to_f16_n(const float* x, uint16_t* y, size_t n);

}  // namespace kveval::util
