#pragma once
// Internal to src/backend: products with K-quant weights kept as the GGUF
// file's super-blocks (Dtype::Q2_K, Q3_K, Q4_K, Q5_K, Q6_K; ggml-common.h
// block_q2_K ... block_q6_K). The kernel is block_kernel.hpp's.
#include <cstdint>

#include "backend/backend.hpp"

namespace kveval::backend {

/// y[m, n_out] (+)= x[m, n_in] · Wᵀ for a K-quant weight, in f32 without
/// widening W ("exact" mode: each weight decoded to the f32 value
/// kquant_decode gives, products and sums in f32). Output n is the
/// kquant_dot_scalar of W's row n and the x row: 16 lanes, the 16 groups of
/// 16 elements of a super-block alternating between two accumulators (group g
/// adds fma(v, x, acc) lane-wise to accumulator g % 2), super-blocks in order,
/// then the two accumulators added and the lanes summed as a tree (l + 8,
/// l + 4, l + 2, l + 1). AVX-512, else the scalar twin: the same bits. Each
/// output depends only on its x row and W row, so the result is the same for
/// every m and thread count. The rows of W are split into contiguous ranges
/// among `threads` OpenMP threads (one thread below kDecodeParallelMacs
/// multiply-adds, kernel_isa.hpp), each thread streaming its own bytes; up to 8
/// rows of x share each decoded super-block. Throws ArgumentError for another dtype.
void kquant_matmul(const float* x, int64_t m, const Weight& w, float* y, bool accumulate, int threads);

/// One output of kquant_matmul in portable C++ (std::fma), bit-identical to the
/// vector kernel: `row` holds n_in / kKBlock super-blocks of K-quant dtype `d`
/// in the file's layout, x [n_in]. Throws ArgumentError for another dtype.
float kquant_dot_scalar(Dtype d, const uint8_t* row, const float* x, int64_t n_in);

/// Decodes `n_blocks` super-blocks of K-quant dtype `d` into n_blocks *
/// kKBlock floats, rounding as gguf-py's numpy reference (and model/quant's
/// dequantize_q2_k ... q6_k) does, each product and difference in f32, never
/// fused: Q2_K, Q4_K and Q5_K (d * sc) * q - (dmin * m), Q3_K (d * (sc - 32)) * q,
/// Q6_K (d * sc) * (q - 32). Throws ArgumentError for another dtype.
void kquant_decode(Dtype d, const uint8_t* blocks, float* dst, int64_t n_blocks);

/// Widens rows [n0, n0 + nc) of a K-quant weight into dst [nc, n_in]
/// (row stride ld >= n_in) with kquant_decode's values (the AVX-512 decoder
/// gives the same bits), rows split among `threads` OpenMP threads. Throws
/// ArgumentError for another dtype.
void kquant_widen_rows(const Weight& w, int64_t n0, int64_t nc, float* dst, int64_t ld, int threads);

}  // namespace kveval::backend
