#pragma once
// Internal to src/backend: products with Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1
// weights kept as the GGUF file's blocks of 32 (Dtype::Q8_0, Q4_0, Q4_1, Q5_0,
// Q5_1; ggml-common.h block_q8_0, block_q4_0, block_q4_1, block_q5_0, block_q5_1). The kernel is block_kernel.hpp's, as
// for the K-quants (kquants.hpp).
#include <cstdint>

#include "backend/backend.hpp"

namespace kveval::backend {

/// y[m, n_out] (+)= x[m, n_in] · Wᵀ for a Q8_0, Q4_0, Q4_1, Q5_0 or Q5_1 weight in exact
/// mode, as kquant_matmul: each weight decoded to the f32 value
/// file_qblocks_decode gives, output n the file_qblocks_dot_scalar of W's row n
/// and the x row (16 lanes; a block's elements 0-15 fma'd into accumulator 0,
/// 16-31 into accumulator 1; blocks in order; the accumulators added and the
/// lanes summed as a tree). AVX-512, else the scalar twin: the same bits, for
/// every m and thread count; rows of W split as kquant_matmul splits them.
/// Throws ArgumentError for another dtype.
void file_qblocks_matmul(const float* x, int64_t m, const Weight& w, float* y, bool accumulate, int threads);

/// One output of file_qblocks_matmul in portable C++ (std::fma), bit-identical
/// to the vector kernel: `row` holds n_in / 32 blocks of dtype `d` (Q8_0, Q4_0,
/// Q4_1, Q5_0 or Q5_1) in the file's layout, x [n_in]. Throws ArgumentError for another dtype.
float file_qblocks_dot_scalar(Dtype d, const uint8_t* row, const float* x, int64_t n_in);

/// Decodes `n_blocks` blocks of dtype `d` (Q8_0, Q4_0, Q4_1, Q5_0 or Q5_1) into
/// n_blocks * 32 floats, rounding as gguf-py's numpy reference (and model/quant's
/// dequantize_q8_0 / q4_0 / q4_1 / q5_0 / q5_1) does: Q8_0 d * q, Q4_0
/// d * (q - 8) (both exact), Q4_1 and Q5_1 d * q + m, Q5_0 d * (q - 16), the
/// product and the sum in f32, never fused. Throws
/// ArgumentError for another dtype.
void file_qblocks_decode(Dtype d, const uint8_t* blocks, float* dst, int64_t n_blocks);

/// Widens rows [n0, n0 + nc) of a Q8_0, Q4_0, Q4_1, Q5_0 or Q5_1 weight into dst [nc, n_in]
/// (row stride ld >= n_in) with file_qblocks_decode's values (the AVX-512
/// decoder gives the same bits), rows split among `threads` OpenMP threads.
/// Throws ArgumentError for another dtype.
void file_qblocks_widen_rows(const Weight& w, int64_t n0, int64_t nc, float* dst, int64_t ld, int threads);

}  // namespace kveval::backend
