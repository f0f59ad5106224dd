#pragma once
// Internal to src/backend: products of 1-8 rows (decode steps) with F32 or BF16
// weights, Wᵀ read as one sequential stream per pass.
#include <cstdint>

#include "backend/backend.hpp"

namespace kveval::backend {

/// Where gemv splits an F32 Wᵀ's rows: 0 (one chain over all n_in rows) for
/// products under kDecodeParallelMacs multiply-adds (kernel_isa.hpp), else
/// n_in / 2 rounded down to a multiple of 16. The path taken: kernel_isa().
/// (BF16 chains follow bf16_chunk instead.)
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
/// A BF16 weight: x is rounded to bf16 first (as oneDNN's bf16 matmul reads
/// it), and output n is base + (((c_0 + c_1) + c_2) + ...), base = y[n]
/// (accumulate) or 0, where c_i is the chain over rows [i C, (i + 1) C) of Wᵀ,
/// C = bf16_chunk(n_in), from 0, in steps over the pairs of rows (k, k + 1) as
/// the AVX512-BF16 instruction vdpbf16ps computes them (Intel SDM): acc +
/// x_k+1 w_k+1 first, then + x_k w_k, each sum rounded to nearest even and
/// flushed to zero when subnormal, subnormal inputs read as zero (a last row
/// alone pairs with zero). That is the order of oneDNN 2.6's bf16 brgemm on the
/// same panels (matmul.cpp, bf16_paths_agree). With kernel_has_bf16_dot() (the
/// weight then in panels, Weight::bf16_panels) each thread reads a run of
/// 64-column panels (gemv.cpp); otherwise the scalar chains run (matmul then
/// routes bf16 decode steps to oneDNN instead). `part` for BF16: 2 NP + n_in
/// floats per row, NP = n_out rounded up to 64. Throws ArgumentError for a
/// weight that is neither F32 nor BF16, or a missing `part`.
void gemv(const float* x, const Weight& w, float* y, bool accumulate, int threads, float* part);

/// Rows of Wᵀ per chain of a BF16 product (gemv): 512 for n_in <= 1024, else
/// 1024, the K blocks oneDNN 2.6's bf16 brgemm sums (measured bit for bit;
/// docs/design/decode-kernels.md, "Chains in oneDNN's K blocks").
int64_t bf16_chunk(int64_t n_in);

/// Rows gemv_rows takes at most (decode steps of up to 8 sequences).
inline constexpr int64_t kGemvMaxRows = 8;

/// y[m, n_out] (+)= x[m, n_in] · Wᵀ for an F32 or BF16 weight and 1 <= m <=
/// kGemvMaxRows rows (decode steps of a few sequences): each row as gemv
/// computes it alone, bit for bit, whatever m is. One pass over Wᵀ serves all
/// rows: F32 on AVX-512 (a load of 32 columns feeds 2 m fmas; other paths run
/// gemv row by row), BF16 with AVX512-BF16 (a load of 16 columns of a pair of
/// rows of Wᵀ feeds one vdpbf16ps per row, up to 6 rows in one pass; of 7-8
/// rows, rows 4-7 reread each 8 KiB block of a panel from L1). `scratch`: gemv_scratch(w, m) floats (may be null
/// when that is 0). Throws ArgumentError for another dtype, m out of range or a
/// missing scratch.
void gemv_rows(const float* x, int64_t m, const Weight& w, float* y, bool accumulate, int threads, float* scratch);

/// Floats of scratch gemv (m = 1) or gemv_rows needs for `w`: m n_out when an
/// F32 product splits (0 otherwise), m (2 NP + n_in) for BF16 (the running
/// total and the current chunk's chains over whole 64-column panels, NP =
/// n_out rounded up to 64, and x packed into bf16 pairs, per row).
int64_t gemv_scratch(const Weight& w, int64_t m = 1);

/// Output n of gemv in portable C++ (std::fma), from y0 (y0 = 0 without
/// accumulate). Throws as gemv.
float gemv_scalar(const float* x, const Weight& w, int64_t n, float y0);

}  // namespace kveval::backend
