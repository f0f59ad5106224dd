#pragma once
// Tensor conversion at load: any supported GGUF tensor type (gguf.hpp's type
// table) to the weight dtype kept in memory, block by block, in parallel
// (OpenMP), with the finite check of the weights fused into the same pass.
#include <cstddef>
#include <cstdint>
#include <string>

#include "model/gguf.hpp"

namespace kveval {

/// Element type of weights in memory: F32, or BF16 (bfloat16 bits, the upper
/// half of an IEEE-754 binary32, rounded to nearest even; NaN stays NaN).
enum class DType { F32, BF16 };
/// "F32" / "BF16".
const char* dtype_name(DType d);
/// Bytes per element of `d`.
size_t dtype_size(DType d);

/// Options of dequantize_rows.
struct ConvertOptions {
  /// Refuse NaN and ±Inf: throws FormatError naming the file, tensor and first bad element.
  bool check_finite = true;
  /// OpenMP threads (0 = OpenMP's default, all cores).
  int threads = 0;
};

/// Converts rows [row0, row0 + rows) of tensor `t` of `file` (rows of
/// t.row_length() elements, in GGUF order) to `dtype`, writing
/// rows * t.row_length() elements to `dst` (float for F32, uint16_t bf16 bits
/// for BF16). F32 values are those of gguf-py's numpy dequantizers bit for bit
/// (F32 products and sums in its order); BF16 values are those F32 values
/// rounded to nearest even (a BF16 tensor is copied exactly).
/// Throws ArgumentError if the rows fall outside the tensor; FormatError
/// "<file>: tensor 'T' holds NaN at element I (row R, column C): ..." when
/// check_finite and a converted value is not finite (I is the flat index in
/// the tensor of the first such element; for BF16 also a finite F32 value
/// beyond the bf16 range, which rounds to ±Inf).
void dequantize_rows(const gguf::File& file, const gguf::TensorInfo& t, uint64_t row0, uint64_t rows, DType dtype,
                     void* dst, const ConvertOptions& opts = {});

/// Whether every f16 scale field of `n_blocks` blocks of `type` at `src` is finite: d, and dmin or m
/// where the format has one (ggml-common.h: Q2_K d, dmin at bytes 80, 82; Q3_K d at 108; Q4_K, Q5_K,
/// Q4_1, Q5_1 at 0, 2; Q6_K d at 208; Q5_0, Q8_0, Q4_0 d at 0). For these types a finite scale makes every decoded
/// weight finite (the largest, Q6_K's d·sc·(q − 32), is at most 65504·128·32, far inside f32), so a
/// block whose scales pass needs no decoding to be known finite. Returns false for any other type.
bool block_scales_finite(gguf::TensorType type, const std::byte* src, uint64_t n_blocks);

/// Dequantizes `n_elements` (a multiple of the block size) of type `type` from
/// `src` to float32 at `dst`, in parallel (`threads`, 0 = OpenMP's default).
/// With `check_finite`, each converted chunk is scanned while in cache; returns
/// the index of the first NaN/Inf element, or UINT64_MAX when none (or no check).
/// Throws ArgumentError for an unsupported type or a count that is not a
/// multiple of the block size.
uint64_t dequantize(gguf::TensorType type, const std::byte* src, float* dst, uint64_t n_elements, int threads = 0,
                    bool check_finite = false);

/// Quantizes `n_elements` finite floats (a multiple of the block size) to
/// `type` (see quant/quant.hpp for the quantizers), in parallel; writes
/// n_elements / block_size * type_size bytes. Throws ArgumentError as dequantize.
void quantize(gguf::TensorType type, const float* src, std::byte* dst, uint64_t n_elements, int threads = 0);

/// Bytes of `n_elements` of `type` (n_elements a multiple of the block size; ArgumentError otherwise).
uint64_t tensor_bytes(gguf::TensorType type, uint64_t n_elements);

}  // namespace kveval
