#pragma once
// Internal to src/backend: one-row products (decode steps) with F32 weights,
// read as one sequential stream of Wᵀ.
#include <cstdint>

#include "backend/backend.hpp"

namespace kveval::backend {

/// y[n_out] (+)= x[n_in] · Wᵀ for one row x and an F32 weight (layout Wᵀ
/// [n_in, n_out], row stride w.ld()). Output n is one chain of fma over
/// k = 0 .. n_in - 1 in order: acc = fma(x_k, W(n, k), acc), starting from y[n]
/// (accumulate) or 0. The vector paths (AVX-512, AVX2) read 16 consecutive rows
/// of Wᵀ per pass over y, so the matrix is read front to back; they give the
/// bits of gemv_scalar for every thread count (columns are split among
/// `threads` OpenMP threads in multiples of 16; one thread below 2^16
/// multiply-adds). Throws ArgumentError for a weight that is not F32.
void gemv(const float* x, const Weight& w, float* y, bool accumulate, int threads);

/// Output n of gemv in portable C++ (std::fma), starting from y0. Throws as gemv.
float gemv_scalar(const float* x, const Weight& w, int64_t n, float y0);

/// The path gemv takes on this CPU: "avx512", "avx2" or "scalar".
const char* gemv_kernel_name();

}  // namespace kveval::backend
