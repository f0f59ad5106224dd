#pragma once
// Internal to src/backend: one-row products (decode steps) with F32 or BF16
// weights, read as one sequential stream of Wᵀ.
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
/// bits of gemv_scalar. `part`: scratch of gemv_scratch(w) floats (may be null
/// when that is 0).
///
/// A BF16 weight (layout as F32, bf16 elements): x is rounded to bf16 first (as
/// oneDNN's bf16 matmul reads it); c0 and c1 are chains of fma over the same
/// halves, both starting from 0, and output n is base + (c0 + c1) (base + c0
/// when s = 0), base = y[n] (accumulate) or 0. On AVX-512 columns are read 32 at
/// a time (gemv.cpp); other paths run the scalar chains. Throws ArgumentError
/// for a weight that is neither F32 nor BF16, or a missing `part`.
void gemv(const float* x, const Weight& w, float* y, bool accumulate, int threads, float* part);

/// Floats of scratch gemv needs for `w`: n_out when an F32 product splits (0
/// otherwise), 2 n_out + n_in for BF16 (both halves' chains and x rounded).
int64_t gemv_scratch(const Weight& w);

/// Output n of gemv in portable C++ (std::fma), from y0 (y0 = 0 without
/// accumulate). Throws as gemv.
float gemv_scalar(const float* x, const Weight& w, int64_t n, float y0);

}  // namespace kveval::backend
