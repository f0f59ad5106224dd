#pragma once
// Block codecs of ggml's tensor types, one unit per format (q4_0.cpp, q4_k.cpp,
// ...). Block layouts are ggml's (ggml/src/ggml-common.h: block_q4_0, ...,
// block_q6_K); dequantization rounds exactly as gguf-py's numpy reference
// (gguf-py/gguf/quants.py): each product and sum in float32, in the same order,
// never fused (these files are compiled with -ffp-contract=off), so results are
// bit-identical to it.
//
// Quantizers exist so that `kveval make-model` and the tests can write files
// of every type. Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 follow ggml's reference
// quantizers (quantize_row_*_ref); the K-quant quantizers are simple min/max
// (or absmax) fits of each sub-block with the scales quantized to the format's
// bits. They are valid encodings but not llama.cpp's error-minimising search:
// use llama.cpp's llama-quantize for real models.
#include <cstddef>
#include <cstdint>

namespace kveval::quant {

constexpr int64_t QK4_0 = 32, QK4_1 = 32, QK5_0 = 32, QK5_1 = 32, QK8_0 = 32;  ///< elements per block
constexpr int64_t QK_K = 256;  ///< elements per K-quant super-block

/// Decodes `n_blocks` blocks at `src` (the format's byte layout, any alignment)
/// into n_blocks * block_size floats at `dst`. Never throws; non-finite scales
/// give non-finite outputs (the caller checks).
using DequantizeFn = void (*)(const std::byte* src, float* dst, int64_t n_blocks);
/// Encodes n_blocks * block_size floats (finite) into `n_blocks` blocks.
using QuantizeFn = void (*)(const float* src, std::byte* dst, int64_t n_blocks);

// F32, F16, BF16: one element per "block".
void dequantize_f32(const std::byte* src, float* dst, int64_t n);
void dequantize_f16(const std::byte* src, float* dst, int64_t n);
void dequantize_bf16(const std::byte* src, float* dst, int64_t n);
void quantize_f32(const float* src, std::byte* dst, int64_t n);
void quantize_f16(const float* src, std::byte* dst, int64_t n);
void quantize_bf16(const float* src, std::byte* dst, int64_t n);

// 32-element blocks.
void dequantize_q4_0(const std::byte* src, float* dst, int64_t n_blocks);  ///< {f16 d; u8 qs[16]}: d * (q - 8)
void dequantize_q4_1(const std::byte* src, float* dst, int64_t n_blocks);  ///< {f16 d, m; u8 qs[16]}: d * q + m
void dequantize_q5_0(const std::byte* src, float* dst, int64_t n_blocks);  ///< {f16 d; u8 qh[4]; u8 qs[16]}: d * (q - 16)
void dequantize_q5_1(const std::byte* src, float* dst, int64_t n_blocks);  ///< {f16 d, m; u8 qh[4]; u8 qs[16]}: d * q + m
void dequantize_q8_0(const std::byte* src, float* dst, int64_t n_blocks);  ///< {f16 d; i8 qs[32]}: d * q
void quantize_q4_0(const float* src, std::byte* dst, int64_t n_blocks);
void quantize_q4_1(const float* src, std::byte* dst, int64_t n_blocks);
void quantize_q5_0(const float* src, std::byte* dst, int64_t n_blocks);
void quantize_q5_1(const float* src, std::byte* dst, int64_t n_blocks);
void quantize_q8_0(const float* src, std::byte* dst, int64_t n_blocks);

// 256-element super-blocks.
/// {u8 scales[16]; u8 qs[64]; f16 d, dmin}: (d * sc) * q - (dmin * m), 16 sub-blocks of 16, 2-bit q.
void dequantize_q2_k(const std::byte* src, float* dst, int64_t n_blocks);
/// {u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d}: (d * (sc - 32)) * q, 6-bit scales, 3-bit q in [-4, 3].
void dequantize_q3_k(const std::byte* src, float* dst, int64_t n_blocks);
/// {f16 d, dmin; u8 scales[12]; u8 qs[128]}: (d * sc) * q - (dmin * m), 8 sub-blocks of 32, 6-bit sc/m, 4-bit q.
void dequantize_q4_k(const std::byte* src, float* dst, int64_t n_blocks);
/// {f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}: as Q4_K with 5-bit q.
void dequantize_q5_k(const std::byte* src, float* dst, int64_t n_blocks);
/// {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}: (d * sc) * (q - 32), 16 sub-blocks of 16, 6-bit q.
void dequantize_q6_k(const std::byte* src, float* dst, int64_t n_blocks);
void quantize_q2_k(const float* src, std::byte* dst, int64_t n_blocks);
void quantize_q3_k(const float* src, std::byte* dst, int64_t n_blocks);
void quantize_q4_k(const float* src, std::byte* dst, int64_t n_blocks);
void quantize_q5_k(const float* src, std::byte* dst, int64_t n_blocks);
void quantize_q6_k(const float* src, std::byte* dst, int64_t n_blocks);

// ---- helpers shared by the units -------------------------------------------

/// Little-endian loads/stores at any alignment.
inline uint16_t load_u16(const std::byte* p) {
  return static_cast<uint16_t>(static_cast<unsigned>(p[0]) | (static_cast<unsigned>(p[1]) << 8));
}
inline uint32_t load_u32(const std::byte* p) {
  return static_cast<uint32_t>(load_u16(p)) | (static_cast<uint32_t>(load_u16(p + 2)) << 16);
}
inline void store_u16(std::byte* p, uint16_t v) {
  p[0] = static_cast<std::byte>(v & 0xff);
  p[1] = static_cast<std::byte>(v >> 8);
}
inline uint8_t u8(const std::byte* p, int64_t i) { return static_cast<uint8_t>(p[i]); }
/// IEEE half at `p` as float (exact).
float load_f16(const std::byte* p);
/// Rounds half away from zero, like C's roundf (ggml's reference quantizers).
int round_away(float x);
/// The element of x[0..n) with the largest magnitude, with its sign (the first
/// on ties; 0 for an all-zero block): the value ggml's reference quantizers map
/// to the most negative quant (ggml-quants.c, quantize_row_q4_0_ref and kin).
float signed_absmax(const float* x, int n);

/// Packs the 6-bit scales and mins of Q4_K/Q5_K (8 each) into 12 bytes and back (ggml's get_scale_min_k4).
void pack_scale_min_k4(const uint8_t sc[8], const uint8_t m[8], std::byte out[12]);
void unpack_scale_min_k4(const std::byte in[12], uint8_t sc[8], uint8_t m[8]);
/// Q4_K/Q5_K quantizer core: min/max fit of the 8 sub-blocks of 32 of `x` with
/// `levels` quant levels; writes d, dmin and the packed scales at `b` (bytes
/// 0-15) and each element's level to `q[256]`.
void fit_k4(const float* x, std::byte* b, int levels, uint8_t* q);

}  // namespace kveval::quant
