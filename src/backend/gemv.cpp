// Decode-step products of up to 8 rows (F32 on AVX-512, BF16 with AVX512-BF16;
// one F32 row elsewhere): Wᵀ read front to back, 16 rows at a time, into output
// rows kept in cache, each row's bits the same whatever the row count.
//
// Why not oneDNN here: measured on a Zen 4 VM (1 thread, a decode step's
// matrices of the s110m shape in sequence, out of cache, median of 9), oneDNN's
// runtime-M gemv streamed 15.4 GB/s against a 22.7 GB/s `stream read`; this
// loop 20.5-21.4 GB/s with 16 rows per pass (8: 19-20.5, 32: 10.6-11.6). The
// same loop on BF16 weights (16 columns widened with a shift) measured
// 14.8-17.8 GB/s alone but tied with oneDNN at 1 thread and lost at 2 inside
// the model on Zen 4 (s110m tg128 68.8-74.3 vs 72.2-77.5 and 94.7-97.5 vs
// 111.7-121.5 tok/s); the 32-column loop below wins on Zen 5. Two threads each
// stream one half of Wᵀ's rows: 45-47 GB/s on the same sequence against 31-34
// GB/s with the columns split.
//
// BF16 weights (AVX-512 with AVX512-BF16): rows k and k + 1 of Wᵀ, 32 columns
// each, are interleaved into bf16 pairs by two 16-bit unpacks and multiplied
// by vdpbf16ps against the broadcast pair (x_k, x_k+1), so one instruction
// takes two rows of Wᵀ for 16 columns and each row of x; the chains are kept
// permuted per 32 columns and put back in order once at the end. Measured on a
// Zen 5 VM through matmul (s110m's 49 matrices per pass, out of cache, medians
// of 9, three alternating rounds), the earlier kernel (two fmas per 64-byte load
// and row, the weights widened by a shift and a mask) -> this one, ms per pass:
// 1 thread M = 1 8.0-8.7 -> 7.2-7.5, M = 8 15.8-18.0 -> 10.0-13.0; 2 threads
// M = 1 4.5-4.7 -> 4.3-4.6, M = 8 10.0-10.2 -> 7.2-7.7 (M = 2 and 4 within
// noise of each other). Up to 8 rows of x share each load of Wᵀ (gemv_rows);
// at 12 or 16 the accumulators no longer fit in registers (a prototype: 1.4-2.3x
// slower than oneDNN). Since stop 28 each row of Wᵀ is prefetched 256 bytes
// ahead, as in the F32 pass, and up to 4 rows of x take 64 columns per step:
// s110m tg128 in bf16 at 1 thread 95-98 -> 110-118 tok/s (six alternating rounds).
#include "backend/gemv.hpp"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "backend/kernel_isa.hpp"
#include "util/error.hpp"

// GCC 12's AVX-512 intrinsics warn about their own undefined pass-through operand.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace kveval::backend {

namespace {

constexpr int kRows = 16;  // rows of Wᵀ per pass over y
/// Floats of a row of Wᵀ the F32 pass prefetches ahead of its loads (256 bytes;
/// 128, 192, 384, 512 bytes and the T1/T2/NTA hints measured no better in a
/// throwaway loop over the same matrices).
constexpr int64_t kPrefetchAhead = 64;
/// The same distance in bytes for a BF16 row: 128 elements.
constexpr int64_t kPrefetchAheadBf16 = 128;

/// Prefetches the line holding p[ahead] (F32 or BF16 elements) into L1. The
/// address is computed as an integer: near the end of Wᵀ it lies past the
/// allocation, where forming the pointer p + ahead would be undefined (a
/// prefetch never faults).
template <class T>
inline void prefetch_at(const T* p, int64_t ahead) {
  const auto a = reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(ahead) * sizeof(T);
  _mm_prefetch(reinterpret_cast<const char*>(a), _MM_HINT_T0);
}

/// Output n over rows [k0, k1) of Wᵀ, starting from acc: the spec the vector passes match.
float col_scalar(const float* wt, int64_t ld, int64_t k0, int64_t k1, const float* x, int64_t n, float acc) {
  for (int64_t k = k0; k < k1; ++k) acc = std::fma(x[k], wt[k * ld + n], acc);
  return acc;
}

/// Rows [k, k + KU) of Wᵀ into columns [n0, n1) of y, n1 - n0 a multiple of 8.
template <int KU>
__attribute__((target("avx2,fma"))) void pass_avx2(const float* wt, int64_t ld, int64_t k, const float* x, int64_t n0,
                                                   int64_t n1, float* y) {
  __m256 xs[KU];
  for (int u = 0; u < KU; ++u) xs[u] = _mm256_set1_ps(x[k + u]);
  for (int64_t n = n0; n < n1; n += 8) {
    __m256 a = _mm256_loadu_ps(y + n);
    for (int u = 0; u < KU; ++u) a = _mm256_fmadd_ps(xs[u], _mm256_loadu_ps(wt + (k + u) * ld + n), a);
    _mm256_storeu_ps(y + n, a);
  }
}

/// a[r] = y[r N + n .. + 16), b[r] = y[r N + n + 16 .. + 32) for MR rows.
template <int MR>
__attribute__((target("avx512f"), always_inline)) inline void load_rows32(const float* y, int64_t N, int64_t n,
                                                                        __m512* a, __m512* b) {
  for (int r = 0; r < MR; ++r) {
    a[r] = _mm512_loadu_ps(y + r * N + n);
    b[r] = _mm512_loadu_ps(y + r * N + n + 16);
  }
}

/// The inverse of load_rows32.
template <int MR>
__attribute__((target("avx512f"), always_inline)) inline void store_rows32(float* y, int64_t N, int64_t n,
                                                                         const __m512* a, const __m512* b) {
  for (int r = 0; r < MR; ++r) {
    _mm512_storeu_ps(y + r * N + n, a[r]);
    _mm512_storeu_ps(y + r * N + n + 16, b[r]);
  }
}

/// Rows [k, k + KU) of Wᵀ into columns [n0, n1) of MR rows of y (row r at
/// y + r * N, its x at x + r * K): one load of 32 columns of Wᵀ feeds 2 MR fmas
/// (in the tail, one masked load of up to 16 feeds MR), each output's fmas in k
/// order whatever MR is; in the 32-column loop each row of Wᵀ is prefetched
/// kPrefetchAhead floats ahead (prefetch_at). (16 columns per
/// step measured 0.6-0.9x oneDNN's brgemm over M = 2-8; 32 columns 0.9-1.14x,
/// matmul.cpp. On a Zen 5 VM, s110m's 49 decode matrices out of cache, 1
/// thread, ms per pass: one row 11.6-13.3 against 14.0-16.7 for the earlier
/// masked 16-column pass; 8 rows 17.5-19.1 with the prefetch, 21.2-21.9
/// without it.)
template <int MR, int KU>
__attribute__((target("avx512f,avx2,fma"))) void pass_rows_avx512(const float* wt, int64_t ld, int64_t k,
                                                                  const float* x, int64_t K, int64_t n0, int64_t n1,
                                                                  float* y, int64_t N) {
  int64_t n = n0;
  for (; n + 32 <= n1; n += 32) {
    __m512 a[MR], b[MR];
    load_rows32<MR>(y, N, n, a, b);
#pragma GCC unroll 16
    for (int u = 0; u < KU; ++u) {
      const float* row = wt + (k + u) * ld + n;
      prefetch_at(row, kPrefetchAhead);
      prefetch_at(row, kPrefetchAhead + 16);
      const __m512 w0 = _mm512_loadu_ps(row), w1 = _mm512_loadu_ps(row + 16);
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) {
        const __m512 xb = _mm512_set1_ps(x[r * K + k + u]);
        a[r] = _mm512_fmadd_ps(xb, w0, a[r]);
        b[r] = _mm512_fmadd_ps(xb, w1, b[r]);
      }
    }
    store_rows32<MR>(y, N, n, a, b);
  }
  for (; n < n1; n += 16) {
    const __mmask16 m = n + 16 <= n1 ? __mmask16(0xFFFF) : __mmask16((1u << (n1 - n)) - 1);
    __m512 a[MR];
    for (int r = 0; r < MR; ++r) a[r] = _mm512_maskz_loadu_ps(m, y + r * N + n);
#pragma GCC unroll 16
    for (int u = 0; u < KU; ++u) {
      const __m512 w = _mm512_maskz_loadu_ps(m, wt + (k + u) * ld + n);
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) a[r] = _mm512_fmadd_ps(_mm512_set1_ps(x[r * K + k + u]), w, a[r]);
    }
    for (int r = 0; r < MR; ++r) _mm512_mask_storeu_ps(y + r * N + n, m, a[r]);
  }
}

/// Columns [n0, n1) of y (holding the starting values) over rows [k0, k1) of
/// Wᵀ without AVX-512: AVX2 takes columns in vectors of 8 and the rest one by
/// one; scalar takes all one by one.
void cols(const float* wt, int64_t ld, int64_t k0, int64_t k1, const float* x, int64_t n0, int64_t n1, float* y) {
  const int64_t nv = kernel_isa() == KernelIsa::Scalar ? n0 : n0 + (n1 - n0) / 8 * 8;
  if (nv > n0) {
    const int64_t kmain = k0 + (k1 - k0) / kRows * kRows;
    for (int64_t k = k0; k < kmain; k += kRows) pass_avx2<kRows>(wt, ld, k, x, n0, nv, y);
    for (int64_t k = kmain; k < k1; ++k) pass_avx2<1>(wt, ld, k, x, n0, nv, y);  // the last (k1 - k0) % kRows rows
  }
  for (int64_t n = nv; n < n1; ++n) y[n] = col_scalar(wt, ld, k0, k1, x, n, y[n]);
}

/// Columns [n0, n1) of MR rows of y (holding the starting values; x row r at
/// x + r * K, y row r at y + r * N) over rows [k0, k1) of Wᵀ: on AVX-512 one
/// pass over Wᵀ for all rows, elsewhere cols row by row (the same bits either way).
template <int MR>
void cols_rows(const float* wt, int64_t ld, int64_t k0, int64_t k1, const float* x, int64_t K, int64_t n0, int64_t n1,
               float* y, int64_t N) {
  if (kernel_isa() != KernelIsa::Avx512) {
    for (int r = 0; r < MR; ++r) cols(wt, ld, k0, k1, x + r * K, n0, n1, y + r * N);
    return;
  }
  const int64_t kmain = k0 + (k1 - k0) / kRows * kRows;
  for (int64_t k = k0; k < kmain; k += kRows) pass_rows_avx512<MR, kRows>(wt, ld, k, x, K, n0, n1, y, N);
  for (int64_t k = kmain; k < k1; ++k) pass_rows_avx512<MR, 1>(wt, ld, k, x, K, n0, n1, y, N);
}

/// cols_rows for m (1 .. kGemvMaxRows) rows.
void cols_m(int64_t m, const float* wt, int64_t ld, int64_t k0, int64_t k1, const float* x, int64_t K, int64_t n0,
            int64_t n1, float* y, int64_t N) {
  static_assert(kGemvMaxRows == 8);
  switch (m) {
    case 1: return cols_rows<1>(wt, ld, k0, k1, x, K, n0, n1, y, N);
    case 2: return cols_rows<2>(wt, ld, k0, k1, x, K, n0, n1, y, N);
    case 3: return cols_rows<3>(wt, ld, k0, k1, x, K, n0, n1, y, N);
    case 4: return cols_rows<4>(wt, ld, k0, k1, x, K, n0, n1, y, N);
    case 5: return cols_rows<5>(wt, ld, k0, k1, x, K, n0, n1, y, N);
    case 6: return cols_rows<6>(wt, ld, k0, k1, x, K, n0, n1, y, N);
    case 7: return cols_rows<7>(wt, ld, k0, k1, x, K, n0, n1, y, N);
    default: return cols_rows<8>(wt, ld, k0, k1, x, K, n0, n1, y, N);
  }
}

/// The tasks of a one-pass product: the two halves of Wᵀ's rows (one when
/// split is 0), each over `groups` column groups of a multiple of `align`
/// columns (a third and fourth thread split the columns); each thread streams a
/// contiguous part of Wᵀ.
struct Tasks {
  /// One task: half h (0, 1) of Wᵀ's rows, rows [k0, k1), columns [n0, n1) (none when n0 >= n1).
  struct Task {
    int64_t h, k0, k1, n0, n1;
  };
  int64_t n_out, n_in, split;
  int threads;
  int64_t halves, groups, per;
  /// For a product of n_out x n_in split at `split` (gemv_split), columns in multiples of `align`.
  Tasks(int64_t n_out_, int64_t n_in_, int64_t split_, int threads_wanted, int64_t align)
      : n_out(n_out_),
        n_in(n_in_),
        split(split_),
        threads(split == 0 ? 1 : std::max(1, threads_wanted)),
        halves(split > 0 ? 2 : 1),
        groups(std::max(1, threads / 2)),
        per((n_out / align + groups - 1) / groups * align) {}
  int64_t count() const { return halves * groups; }
  Task operator[](int64_t i) const {
    const int64_t g = i % groups, h = i / groups, n0 = std::min(n_out, g * per);
    return {h, h == 0 ? 0 : split, h == 0 && split > 0 ? split : n_in, n0,
            g == groups - 1 ? n_out : std::min(n_out, n0 + per)};
  }
};

/// A bf16 value of x_k or W as vdpbf16ps reads it: subnormals as zero (DAZ).
inline float daz(float v) { return std::fpclassify(v) == FP_SUBNORMAL ? std::copysign(0.0f, v) : v; }

/// x_k (k < K) from the packed pairs of one row: pair j holds bf16(x_2j) in its low
/// 16 bits and bf16(x_2j+1) in its high 16 (x_K = 0 when K is odd).
inline float x_of(const uint32_t* xp, int64_t k) {
  return bf16_to_f32(static_cast<uint16_t>(xp[k / 2] >> (16 * (k & 1))));
}

/// One step of the bf16 chain over the pair (k, k + 1), as Intel's SDM defines
/// vdpbf16ps (and measured bit for bit on a Zen 5 CPU): the odd product is
/// added first, then the even one, each sum rounded to nearest even and
/// flushed to zero when subnormal (FTZ); inputs read with DAZ; the products of
/// two bf16 values are exact.
inline float dp_step(float acc, float w0, float x0, float w1, float x1) {
  acc = daz(std::fma(daz(w1), daz(x1), daz(acc)));
  return daz(std::fma(daz(w0), daz(x0), acc));
}

/// Chain over rows [k0, k1) of bf16 Wᵀ for output n, from 0, in steps over the
/// pairs (k0, k0 + 1), (k0 + 2, k0 + 3), ... (k0 even; a last row alone is
/// paired with a zero row). xp: the row's packed x (x_of).
float col_bf16_scalar(const uint16_t* wt, int64_t ld, int64_t k0, int64_t k1, const uint32_t* xp, int64_t n) {
  float acc = 0.0f;
  for (int64_t k = k0; k < k1; k += 2) {
    const bool pair = k + 1 < k1;
    acc = dp_step(acc, bf16_to_f32(wt[k * ld + n]), x_of(xp, k), pair ? bf16_to_f32(wt[(k + 1) * ld + n]) : 0.0f,
                  pair ? x_of(xp, k + 1) : 0.0f);
  }
  return acc;
}

/// Rows [k, k + 2 KP) of bf16 Wᵀ (KP pairs; with `alone`, KP = 1 and row k
/// only, paired with zeros) into the chains of MR rows: row r's at yp + r * N,
/// its packed x at xp + r * K2; columns [n0, n0 + 32 CB), CB blocks of 32.
/// Rows k and k + 1 are interleaved by 16-bit unpacks (no second copy of the
/// weight), so per 32 columns the chains are kept permuted: the first 16 hold
/// columns 0-3, 8-11, 16-19, 24-27, the next 16 columns 4-7, 12-15, 20-23,
/// 28-31. Each row's chains take the same instructions in the same order
/// whatever MR and CB are; each row of Wᵀ read is prefetched kPrefetchAheadBf16
/// elements (256 bytes) ahead per block.
template <int MR, int KP, int CB>
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void step_bf16_avx512(const uint16_t* wt, int64_t ld, int64_t k,
                                                                             bool alone, const uint32_t* xp, int64_t K2,
                                                                             int64_t n, float* yp, int64_t N) {
  __m512 a[MR][2 * CB];
  for (int r = 0; r < MR; ++r)
    for (int c = 0; c < 2 * CB; ++c) a[r][c] = _mm512_loadu_ps(yp + r * N + n + 16 * c);
#pragma GCC unroll 8
  for (int p = 0; p < KP; ++p) {
    const uint16_t* lo_row = wt + (k + 2 * p) * ld + n;
    const uint16_t* hi_row = lo_row + ld;
#pragma GCC unroll 2
    for (int b = 0; b < CB; ++b) {
      prefetch_at(lo_row, kPrefetchAheadBf16 + 32 * b);
      if (!alone) prefetch_at(hi_row, kPrefetchAheadBf16 + 32 * b);
      const __m512i lo = _mm512_loadu_si512(lo_row + 32 * b);
      const __m512i hi = alone ? _mm512_setzero_si512() : _mm512_loadu_si512(hi_row + 32 * b);
      const __m512bh w0 = reinterpret_cast<__m512bh>(_mm512_unpacklo_epi16(lo, hi));
      const __m512bh w1 = reinterpret_cast<__m512bh>(_mm512_unpackhi_epi16(lo, hi));
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) {
        const __m512bh xb = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(xp[r * K2 + (k / 2) + p])));
        a[r][2 * b] = _mm512_dpbf16_ps(a[r][2 * b], w0, xb);
        a[r][2 * b + 1] = _mm512_dpbf16_ps(a[r][2 * b + 1], w1, xb);
      }
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int c = 0; c < 2 * CB; ++c) _mm512_storeu_ps(yp + r * N + n + 16 * c, a[r][c]);
}

/// Rows [k, k + 2 KP) of bf16 Wᵀ over columns [n0, n1) (n1 - n0 a multiple of
/// 32), as step_bf16_avx512: 64 columns per step for up to 4 rows of x (8 or
/// 16 accumulators), 32 for more. (On a Zen 5 VM, s110m's 49 bf16 decode
/// matrices out of cache, 1 thread, 15-25 repetitions interleaved, medians over
/// three runs, ms per pass: one row 10.4-11.8 -> 7.9-9.3 with 64 columns and
/// the prefetch, against 8.9-10.4 with 32 columns and the prefetch; 4 rows
/// 9.1-11.4 -> 7.5-9.2; 8 rows 11.4-13.9 -> 10.3-12.4.)
template <int MR, int KP>
void pass_bf16_avx512(const uint16_t* wt, int64_t ld, int64_t k, bool alone, const uint32_t* xp, int64_t K2,
                      int64_t n0, int64_t n1, float* yp, int64_t N) {
  int64_t n = n0;
  if constexpr (MR <= 4)
    for (; n + 64 <= n1; n += 64) step_bf16_avx512<MR, KP, 2>(wt, ld, k, alone, xp, K2, n, yp, N);
  for (; n < n1; n += 32) step_bf16_avx512<MR, KP, 1>(wt, ld, k, alone, xp, K2, n, yp, N);
}

/// Chains of MR rows, columns [n0, n1), over rows [k0, k1) of bf16 Wᵀ into yp
/// (zeroed here): columns below `nv` permuted per 32 (vector path), the rest in order.
template <int MR>
void cols_bf16(const uint16_t* wt, int64_t ld, int64_t k0, int64_t k1, const uint32_t* xp, int64_t K2, int64_t n0,
               int64_t n1, int64_t nv, float* yp, int64_t N) {
  for (int r = 0; r < MR; ++r) std::memset(yp + r * N + n0, 0, sizeof(float) * static_cast<size_t>(n1 - n0));
  const int64_t v1 = std::clamp(nv, n0, n1);
  if (v1 > n0) {
    const int64_t kmain = k0 + (k1 - k0) / kRows * kRows;
    int64_t k = k0;
    for (; k < kmain; k += kRows) pass_bf16_avx512<MR, kRows / 2>(wt, ld, k, false, xp, K2, n0, v1, yp, N);
    for (; k + 1 < k1; k += 2) pass_bf16_avx512<MR, 1>(wt, ld, k, false, xp, K2, n0, v1, yp, N);
    if (k < k1) pass_bf16_avx512<MR, 1>(wt, ld, k, true, xp, K2, n0, v1, yp, N);
  }
  for (int r = 0; r < MR; ++r)
    for (int64_t n = v1; n < n1; ++n) yp[r * N + n] = col_bf16_scalar(wt, ld, k0, k1, xp + r * K2, n);
}

/// cols_bf16 for mr (1 .. kGemvMaxRows) rows.
void cols_bf16_rows(int64_t mr, const uint16_t* wt, int64_t ld, int64_t k0, int64_t k1, const uint32_t* xp,
                    int64_t K2, int64_t n0, int64_t n1, int64_t nv, float* yp, int64_t N) {
  static_assert(kGemvMaxRows == 8);
  switch (mr) {
    case 1: return cols_bf16<1>(wt, ld, k0, k1, xp, K2, n0, n1, nv, yp, N);
    case 2: return cols_bf16<2>(wt, ld, k0, k1, xp, K2, n0, n1, nv, yp, N);
    case 3: return cols_bf16<3>(wt, ld, k0, k1, xp, K2, n0, n1, nv, yp, N);
    case 4: return cols_bf16<4>(wt, ld, k0, k1, xp, K2, n0, n1, nv, yp, N);
    case 5: return cols_bf16<5>(wt, ld, k0, k1, xp, K2, n0, n1, nv, yp, N);
    case 6: return cols_bf16<6>(wt, ld, k0, k1, xp, K2, n0, n1, nv, yp, N);
    case 7: return cols_bf16<7>(wt, ld, k0, k1, xp, K2, n0, n1, nv, yp, N);
    default: return cols_bf16<8>(wt, ld, k0, k1, xp, K2, n0, n1, nv, yp, N);
  }
}

/// y[0..32) = base + (c0 + c1) for one permuted chunk of 32 chains (pass_bf16_avx512's order).
__attribute__((target("avx512f,avx2,fma"))) void unpermute32(const float* c0, const float* c1, float* y,
                                                            bool accumulate) {
  const __m512i lo = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
  const __m512i hi = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
  __m512 e = _mm512_loadu_ps(c0), o = _mm512_loadu_ps(c0 + 16);
  if (c1 != nullptr) {
    e = _mm512_add_ps(e, _mm512_loadu_ps(c1));
    o = _mm512_add_ps(o, _mm512_loadu_ps(c1 + 16));
  }
  const __m512 b0 = accumulate ? _mm512_loadu_ps(y) : _mm512_setzero_ps();
  const __m512 b1 = accumulate ? _mm512_loadu_ps(y + 16) : _mm512_setzero_ps();
  _mm512_storeu_ps(y, _mm512_add_ps(b0, _mm512_permutex2var_ps(e, lo, o)));
  _mm512_storeu_ps(y + 16, _mm512_add_ps(b1, _mm512_permutex2var_ps(e, hi, o)));
}

/// Row r of x packed into bf16 pairs for the kernel (x_of reads them back).
void pack_x(const float* x, int64_t K, uint32_t* xp) {
  for (int64_t j = 0; j < (K + 1) / 2; ++j) {
    const uint32_t lo = f32_to_bf16(x[2 * j]), hi = 2 * j + 1 < K ? f32_to_bf16(x[2 * j + 1]) : 0u;
    xp[j] = lo | (hi << 16);
  }
}

/// gemv_rows for a BF16 weight (see gemv.hpp); m <= kGemvMaxRows.
void gemv_bf16(const float* x, int64_t m, const Weight& w, float* y, bool accumulate, int threads, float* scratch) {
  const int64_t N = w.n_out(), K = w.n_in(), K2 = (K + 1) / 2, ld = w.ld(), split = gemv_split(N, K);
  const int64_t nv = kernel_has_bf16_dot() ? N / 32 * 32 : 0;  // permuted columns
  float* c0 = scratch;
  float* c1 = split > 0 ? scratch + m * N : nullptr;
  auto* xp = reinterpret_cast<uint32_t*>(scratch + 2 * m * N);
  for (int64_t r = 0; r < m; ++r) pack_x(x + r * K, K, xp + r * K2);
  const Tasks tasks(N, K, split, threads, 32);
  const int64_t chunks = nv / 32;
#pragma omp parallel num_threads(tasks.threads)
  {
#pragma omp for schedule(static)
    for (int64_t i = 0; i < tasks.count(); ++i) {
      const auto t = tasks[i];
      if (t.n0 < t.n1) cols_bf16_rows(m, w.bf16(), ld, t.k0, t.k1, xp, K2, t.n0, t.n1, nv, t.h == 0 ? c0 : c1, N);
    }
#pragma omp for schedule(static)
    for (int64_t i = 0; i < m * chunks; ++i) {
      const int64_t o = (i / chunks) * N + (i % chunks) * 32;
      unpermute32(c0 + o, c1 == nullptr ? nullptr : c1 + o, y + o, accumulate);
    }
  }
  for (int64_t r = 0; r < m; ++r)
    for (int64_t n = r * N + nv; n < (r + 1) * N; ++n)
      y[n] = (accumulate ? y[n] : 0.0f) + (c1 == nullptr ? c0[n] : c0[n] + c1[n]);
}

void require_f32(const Weight& w, const char* who) {
  if (w.dtype() != Dtype::F32) throw ArgumentError(fmt::format("{}: a {} weight (F32 only)", who, to_string(w.dtype())));
}

/// gemv for m (1 .. kGemvMaxRows) rows of an F32 weight; `part`: m n_out floats when the product splits.
void gemv_f32(const float* x, int64_t m, const Weight& w, float* y, bool accumulate, int threads, float* part) {
  const int64_t N = w.n_out(), K = w.n_in(), ld = w.ld(), split = gemv_split(N, K);
  if (split > 0 && part == nullptr) throw ArgumentError("gemv: no scratch row for the second half of Wᵀ");
  const Tasks tasks(N, K, split, threads, 16);
#pragma omp parallel num_threads(tasks.threads)
  {
#pragma omp for schedule(static)
    for (int64_t i = 0; i < tasks.count(); ++i) {
      const auto t = tasks[i];
      if (t.n0 >= t.n1) continue;
      float* dst = t.h == 0 ? y : part;
      if (t.h == 1 || !accumulate)
        for (int64_t r = 0; r < m; ++r)
          std::memset(dst + r * N + t.n0, 0, sizeof(float) * static_cast<size_t>(t.n1 - t.n0));
      cols_m(m, w.data(), ld, t.k0, t.k1, x, K, t.n0, t.n1, dst, N);
    }
    if (split > 0) {
#pragma omp for schedule(static)
      for (int64_t n = 0; n < m * N; ++n) y[n] += part[n];
    }
  }
}

}  // namespace

int64_t gemv_split(int64_t n_out, int64_t n_in) {
  return n_out * n_in < kDecodeParallelMacs ? 0 : n_in / 2 / kRows * kRows;
}

int64_t gemv_scratch(const Weight& w, int64_t m) {
  if (w.dtype() == Dtype::BF16) return m * (2 * w.n_out() + w.n_in());
  return gemv_split(w.n_out(), w.n_in()) > 0 ? m * w.n_out() : 0;
}

void gemv_rows(const float* x, int64_t m, const Weight& w, float* y, bool accumulate, int threads, float* scratch) {
  if (w.dtype() != Dtype::BF16 && w.dtype() != Dtype::F32)
    throw ArgumentError(fmt::format("gemv_rows: a {} weight (F32 or BF16 only)", to_string(w.dtype())));
  if (m < 1 || m > kGemvMaxRows) throw ArgumentError(fmt::format("gemv_rows: {} rows (1 to {})", m, kGemvMaxRows));
  if (w.dtype() == Dtype::F32) return gemv_f32(x, m, w, y, accumulate, threads, scratch);
  if (scratch == nullptr) throw ArgumentError("gemv_rows: no scratch for a bf16 weight");
  gemv_bf16(x, m, w, y, accumulate, threads, scratch);
}


void gemv(const float* x, const Weight& w, float* y, bool accumulate, int threads, float* part) {
  if (w.dtype() == Dtype::BF16) return gemv_rows(x, 1, w, y, accumulate, threads, part);
  require_f32(w, "gemv");
  gemv_f32(x, 1, w, y, accumulate, threads, part);
}

float gemv_scalar(const float* x, const Weight& w, int64_t n, float y0) {
  if (w.dtype() == Dtype::BF16) {
    const int64_t K = w.n_in(), split = gemv_split(w.n_out(), K);
    std::vector<uint32_t> xp(static_cast<size_t>((K + 1) / 2));
    pack_x(x, K, xp.data());
    const float c0 = col_bf16_scalar(w.bf16(), w.ld(), 0, split > 0 ? split : K, xp.data(), n);
    return y0 + (split > 0 ? c0 + col_bf16_scalar(w.bf16(), w.ld(), split, K, xp.data(), n) : c0);
  }
  require_f32(w, "gemv_scalar");
  const int64_t K = w.n_in(), split = gemv_split(w.n_out(), K);
  if (split == 0) return col_scalar(w.data(), w.ld(), 0, K, x, n, y0);
  return col_scalar(w.data(), w.ld(), 0, split, x, n, y0) + col_scalar(w.data(), w.ld(), split, K, x, n, 0.0f);
}

}  // namespace kveval::backend
