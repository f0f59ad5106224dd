#pragma once
// Internal to src/backend: products with Q8_0 and Q4_0 weights kept as blocks
// (Dtype::Q8_0, Dtype::Q4_0; ggml-common.h block_q8_0, block_q4_0).
#include <cstdint>

#include "backend/backend.hpp"

namespace kveval::backend {

/// y[m, n_out] (+)= x[m, n_in] · Wᵀ for a Q8_0 weight, in f32 without widening
/// W: each output is Σ_b d_b * p_b over the n_in / 32 blocks, with the 32
/// products of a block in 16 lanes (lane l: fma(q[16+l] x[16+l], q[l] x[l])),
/// blocks alternating between two 16-lane accumulators, lanes summed as a tree
/// at the end (q8_0_dot_scalar). AVX-512, else AVX2+FMA, else the scalar twin:
/// all give the same bits. Each output's arithmetic depends only on its x row
/// and W row, so the result is the same for every m and thread count. Groups of
/// 4 rows of W are split among `threads` OpenMP threads (one thread below
/// kDecodeParallelMacs multiply-adds, kernel_isa.hpp; the path: kernel_isa()).
void q8_0_matmul(const float* x, int64_t m, const Weight& w, float* y, bool accumulate, int threads);

/// q8_0_matmul for a Q4_0 weight: the same arithmetic with q = nibble - 8 (lane
/// l of a block: the low nibble of its byte l and the high nibble, element
/// 16 + l), the same bits on every path (q4_0_dot_scalar), the same threading.
void q4_0_matmul(const float* x, int64_t m, const Weight& w, float* y, bool accumulate, int threads);

/// q8_0_matmul, q4_0_matmul, (K-quants) kquant_matmul or (Q4_1, Q5_0, Q5_1)
/// file_qblocks_matmul, by w's dtype (as widen_rows); throws ArgumentError for
/// a weight of another dtype.
void blocks_matmul(const float* x, int64_t m, const Weight& w, float* y, bool accumulate, int threads);

/// One output of q8_0_matmul in portable C++ (std::fma), bit-identical to the
/// vector kernels: q [n_in] quants, d [n_in / 32] scales, x [n_in].
float q8_0_dot_scalar(const int8_t* q, const float* d, const float* x, int64_t n_in);

/// One output of q4_0_matmul, likewise: q [n_in / 2] packed bytes (block b at
/// q + 16 b, as block_q4_0's qs), d [n_in / 32] scales, x [n_in].
float q4_0_dot_scalar(const uint8_t* q, const float* d, const float* x, int64_t n_in);

/// Widens rows [n0, n0 + nc) of a Q8_0 or Q4_0 weight into dst [nc, n_in] (row
/// stride ld >= n_in): dst[j * ld + k] = d * q of W's element (n0 + j, k)
/// (Q4_0: d * (nibble - 8)), the same f32 values as model/dequantize's
/// dequantize_rows; rows split among `threads` OpenMP threads. A K-quant
/// weight: kquant_widen_rows; Q4_1, Q5_0, Q5_1: file_qblocks_widen_rows.
/// Throws ArgumentError for another dtype.
void widen_rows(const Weight& w, int64_t n0, int64_t nc, float* dst, int64_t ld, int threads);

}  // namespace kveval::backend
