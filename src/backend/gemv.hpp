#pragma once
// Internal to src/backend: one-row products (decode steps) with F32 weights,
// read as one sequential stream of Wᵀ.
#include <cstdint>

#include "backend/backend.hpp"

namespace kveval::backend {

/// Where gemv splits Wᵀ's rows: 0 (one chain over all n_in rows) for products
/// under kDecodeParallelMacs multiply-adds (kernel_isa.hpp), else n_in / 2
/// rounded down to a multiple of 16. The path taken: kernel_isa().
int64_t gemv_split(int64_t n_out, int64_t n_in);

/// y[n_out] (+)= x[n_in] · Wᵀ for one row x and an F32 weight (layout Wᵀ
/// [n_in, n_out], row stride w.ld()). With s = gemv_split(n_out, n_in), output n
/// is c0 + c1 where c0 is one chain of fma over k = 0 .. s - 1 in order,
/// acc = fma(x_k, W(n, k), acc), starting from y[n] (accumulate) or 0, and c1 the
/// chain over k = s .. n_in - 1 starting from 0 (c0 alone when s = 0). The two
/// halves are two tasks (two threads each stream one contiguous half of Wᵀ; a
/// third and fourth thread split the columns in multiples of 16), so the result
/// is the same for every thread count. The vector paths (AVX-512, AVX2) read 16
/// consecutive rows of Wᵀ per pass over the output, front to back, and give the
/// bits of gemv_scalar. `part`: scratch of n_out floats for c1 (may be null when
/// s = 0). Throws ArgumentError for a weight that is not F32 or a missing `part`.
void gemv(const float* x, const Weight& w, float* y, bool accumulate, int threads, float* part);

/// Output n of gemv in portable C++ (std::fma), starting from y0. Throws as gemv.
float gemv_scalar(const float* x, const Weight& w, int64_t n, float y0);

}  // namespace kveval::backend
