#pragma once
// Internal to src/backend: products and widening for every kept-block weight
// (the file-block dtypes, is_file_blocks), dispatched by dtype to the K-quant
// (kquants.hpp) or blocks-of-32 (file_qblocks.hpp) kernels.
#include <cstdint>

#include "backend/backend.hpp"

namespace kveval::backend {

/// y[m, n_out] (+)= x[m, n_in] · Wᵀ in exact mode: kquant_matmul for a K-quant
/// weight, file_qblocks_matmul for Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 (each weight
/// decoded to f32, the same bits on every ISA, for every m and thread count);
/// throws ArgumentError for a weight of another dtype.
void blocks_matmul(const float* x, int64_t m, const Weight& w, float* y, bool accumulate, int threads);

/// Widens rows [n0, n0 + nc) of a kept-block weight into dst [nc, n_in] (row
/// stride ld >= n_in), each element the f32 value model/dequantize's
/// dequantize_rows gives (Q8_0 d * q, Q4_0 d * (nibble - 8)); rows split among
/// `threads` OpenMP threads: kquant_widen_rows or file_qblocks_widen_rows.
/// Throws ArgumentError for another dtype.
void widen_rows(const Weight& w, int64_t n0, int64_t nc, float* dst, int64_t ld, int threads);

}  // namespace kveval::backend
