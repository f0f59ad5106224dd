#pragma once
// Internal to src/backend: f32 rows rounded to bf16 (util::f32_to_bf16) into
// oneDNN's BA16a64b2a panels (Weight::bf16_panels), the layout kept-block
// weights are widened into for bf16 products (matmul_widened_bf16).
#include <cstdint>

namespace kveval::backend {

/// Rounds `jn` <= 16 rows of f32, src [jn, 2 * kp] (row stride ld), to bf16
/// pairs of a panel: dst[q * 64 + j] = f32_to_bf16(src[j * ld + 2q]) |
/// f32_to_bf16(src[j * ld + 2q + 1]) << 16 for q < kp, j < jn; dst's other
/// lanes are left as they are. AVX-512 (kernel_isa() Avx512: 16 x 16 pairs
/// transposed in registers, the rounding done on the integer bits, so NaN and
/// subnormal inputs round as f32_to_bf16 does), else pack_panel_pairs_scalar:
/// the same bits.
void pack_panel_pairs(const float* src, int64_t ld, int64_t jn, int64_t kp, uint32_t* dst);

/// pack_panel_pairs for rows whose values are all finite and each zero or normal
/// (as widened blocks are: every decoded weight is 0 or a multiple of 2^-24,
/// far above f32's subnormals, and the load checks they are finite). There
/// round to nearest even is all of f32_to_bf16, so with AVX512-BF16
/// (kernel_has_bf16_dot) the rounding is VCVTNE2PS2BF16's, which flushes
/// subnormals instead; else pack_panel_pairs. The same bits as
/// pack_panel_pairs_scalar on such rows. With 16 rows at a 64-byte aligned dst
/// the stores are non-temporal (an sfence before returning).
void pack_panel_pairs_normal(const float* src, int64_t ld, int64_t jn, int64_t kp, uint32_t* dst);

/// pack_panel_pairs in portable C++ (the specification the vector path matches).
void pack_panel_pairs_scalar(const float* src, int64_t ld, int64_t jn, int64_t kp, uint32_t* dst);

}  // namespace kveval::backend
