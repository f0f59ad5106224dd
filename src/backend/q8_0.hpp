#pragma once
// Internal to src/backend: products with Q8_0 weights kept as blocks (Dtype::Q8_0).
#include <cstdint>

#include "backend/backend.hpp"

namespace kveval::backend {

/// y[m, n_out] (+)= x[m, n_in] · Wᵀ for a Q8_0 weight, in f32 without widening
/// W: each output is sum over blocks b of d_b * (Σ_j q_bj x_bj), the 32 products
/// of a block in 8 lanes (4 fused multiply-adds per lane, in order), blocks
/// alternating between two 8-lane accumulators, lanes summed pairwise at the
/// end. AVX2+FMA when the CPU has them, else q8_0_dot_scalar; both give the same
/// bits. Each output's arithmetic depends only on its x row and W row, so the
/// result is the same for every m and thread count. Rows of W are split among
/// `threads` OpenMP threads (one thread below 2^20 multiply-adds).
void q8_0_matmul(const float* x, int64_t m, const Weight& w, float* y, bool accumulate, int threads);

/// One output of q8_0_matmul in portable C++ (std::fma), bit-identical to the
/// vector kernel: Σ_b d[b] * (Σ_j q[32b + j] x[32b + j]) over n_in / 32 blocks.
float q8_0_dot_scalar(const int8_t* q, const float* d, const float* x, int64_t n_in);

/// Widens columns [n0, n0 + nc) of Wᵀ for a Q8_0 weight into dst [n_in, nc]
/// (row stride ld >= nc): dst[k * ld + j] = d * q of W's row n0 + j, element k
/// (the same f32 values dequantize_rows gives).
void q8_0_dequantize_transposed(const Weight& w, int64_t n0, int64_t nc, float* dst, int64_t ld);

/// True when q8_0_matmul runs its AVX2+FMA kernel on this CPU.
bool q8_0_has_simd();

}  // namespace kveval::backend
