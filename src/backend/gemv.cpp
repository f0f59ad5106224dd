// Decode-step products of up to 8 rows (F32 on AVX-512, BF16 with AVX512-BF16;
// one F32 row elsewhere): Wᵀ read front to back, 16 rows at a time, into output
// rows kept in cache, each row's bits the same whatever the row count.
//
// Why not oneDNN here: read front to back, the matrix is one sequential
// stream, which oneDNN's one-row product does not reach on these shapes. Two
// threads each stream one fixed half of Wᵀ's rows (gemv_split), so the bits do
// not depend on the thread count.
//
// BF16 weights (AVX-512 with AVX512-BF16) are kept in oneDNN's BA16a64b2a
// panels (Weight::bf16_panels): per 64 columns, the rows of Wᵀ in pairs (k,
// k + 1), each column's pair adjacent, which is the operand order of vdpbf16ps.
// So a 64-byte load is 16 columns of a pair of rows, one instruction per load
// and row of x, and each thread reads its run of panels front to back as one
// stream; oneDNN's brgemm reads the same bytes for longer products, and since
// the chains follow its K blocks (bf16_chunk) both give the same bits. x is
// packed into bf16 pairs once per product (pack_x); 1-6 rows take one pass
// over each panel, 7-8 rows two passes over each block of pairs, prefetching
// ahead. Measurements and the variants tried: docs/design/decode-kernels.md.
#include "backend/gemv.hpp"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "backend/kernel_isa.hpp"
#include "util/bf16.hpp"
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
/// kPrefetchAhead floats ahead (prefetch_at). 32 columns per step and the
/// prefetch were chosen by measurement (docs/design/decode-kernels.md).
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
float chain_bf16_scalar(const Weight& w, int64_t k0, int64_t k1, const uint32_t* xp, int64_t n) {
  const uint16_t* wt = w.bf16();
  float acc = 0.0f;
  for (int64_t k = k0; k < k1; k += 2) {
    const bool pair = k + 1 < k1;
    acc = dp_step(acc, bf16_to_f32(wt[w.bf16_index(k, n)]), x_of(xp, k),
                  pair ? bf16_to_f32(wt[w.bf16_index(k + 1, n)]) : 0.0f, pair ? x_of(xp, k + 1) : 0.0f);
  }
  return acc;
}

/// Output n over all rows of bf16 Wᵀ before the base: the chains over the
/// chunks of bf16_chunk(n_in) rows, each from 0, summed in order.
float col_bf16_scalar(const Weight& w, const uint32_t* xp, int64_t n) {
  const int64_t K = w.n_in(), chunk = bf16_chunk(K);
  float tot = chain_bf16_scalar(w, 0, std::min(K, chunk), xp, n);
  for (int64_t k0 = chunk; k0 < K; k0 += chunk) tot += chain_bf16_scalar(w, k0, std::min(K, k0 + chunk), xp, n);
  return tot;
}

/// Pairs of rows per block when 7-8 rows of x share a panel (cols_bf16): 8 KiB.
constexpr int64_t kPanelBlockPairs = 32;
/// How far ahead (bytes) the two passes over a block prefetch: two blocks.
/// Rows 0-3 prefetch the first two lines of each pair of rows, rows 4-7 the
/// other two (block size and distance measured: docs/design/decode-kernels.md).
constexpr int64_t kPanelBlockAhead = 2 * kPanelBlockPairs * 256;
/// Rows of x whose chains all stay in registers over a whole panel: 6 rows x 4
/// accumulators + 4 weight vectors + 1 broadcast = 29 of AVX-512's 32.
constexpr int kPanelPassRows = 6;
/// How far ahead (bytes) a whole-panel pass prefetches its stream (1 KiB beat
/// 512 B, 2 KiB and 4 KiB: docs/design/decode-kernels.md).
constexpr int64_t kPanelPrefetchBytes = 1024;

/// Pairs [j0, j1) of rows of one 64-column panel of Wᵀ (Weight::bf16_panels;
/// `panel` its first element) into the chains of MR (1-6) rows, from 0 or
/// (`resume`) from the values at yp: row r's 64 chains stored at yp + r * NP,
/// its packed x at xp + r * K2. Each pair of rows is 16 columns per 64-byte
/// load, already in vdpbf16ps's pair order: one instruction per load and row of
/// x, the chains kept in registers over the whole range. Each chain takes the
/// same instructions in the same order whatever MR is. A pair with only row k
/// (odd n_in) meets the panel's zero padding, and x's zero high half. Lines
/// [pc0, pc1) of each 4-line pair of rows are prefetched `ahead` bytes ahead.
template <int MR>
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void panel_bf16_avx512(const uint16_t* panel, int64_t j0,
                                                                              int64_t j1, bool resume,
                                                                              const uint32_t* xp, int64_t K2,
                                                                              float* yp, int64_t NP, int64_t ahead, int pc0, int pc1) {
  __m512 a[MR][4];
  for (int r = 0; r < MR; ++r)
    for (int c = 0; c < 4; ++c) a[r][c] = resume ? _mm512_loadu_ps(yp + r * NP + 16 * c) : _mm512_setzero_ps();
#pragma GCC unroll 4
  for (int64_t j = j0; j < j1; ++j) {
    const uint16_t* row = panel + j * 128;
    __m512bh wv[4];
    for (int c = 0; c < 4; ++c) {
      if (c >= pc0 && c < pc1) prefetch_at(row, ahead / 2 + 32 * c);
      wv[c] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(row + 32 * c));
    }
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m512bh xb = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(xp[r * K2 + j])));
      for (int c = 0; c < 4; ++c) a[r][c] = _mm512_dpbf16_ps(a[r][c], wv[c], xb);
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int c = 0; c < 4; ++c) _mm512_storeu_ps(yp + r * NP + 16 * c, a[r][c]);
}

/// Output columns [n0, n1) (n0 a multiple of 64) of MR rows over all of k,
/// before the base: chains over the chunks of bf16_chunk(n_in) rows of Wᵀ,
/// each from 0, summed in order into `tot` (rows of NP = n_out rounded up to 64
/// floats; the last panel's padding columns are written too), `chain` holding
/// the current chunk's chains. With panels and kernel_has_bf16_dot, panel by
/// panel (one thread reads its panels front to back as one stream), a whole
/// panel per pass for up to kPanelPassRows (6) rows of x, prefetching
/// kPanelPrefetchBytes ahead; for 7-8 rows, blocks of kPanelBlockPairs pairs
/// for rows 0-3 and then (from L1) for the others, the chains stored and
/// reloaded between blocks, each pass prefetching half of every pair of rows
/// kPanelBlockAhead ahead; otherwise the scalar chains.
template <int MR>
void cols_bf16(const Weight& w, const uint32_t* xp, int64_t K2, int64_t n0, int64_t n1, float* chain, float* tot,
               int64_t NP) {
  const int64_t K = w.n_in(), chunk = bf16_chunk(K);
  if (!(w.bf16_panels() && kernel_has_bf16_dot())) {
    for (int r = 0; r < MR; ++r)
      for (int64_t n = n0; n < n1; ++n) tot[r * NP + n] = col_bf16_scalar(w, xp + r * K2, n);
    return;
  }
  for (int64_t p = n0 / 64; p < (n1 + 63) / 64; ++p) {
    const uint16_t* panel = w.bf16() + p * w.ld();
    float* cp = chain + 64 * p;
    float* tp = tot + 64 * p;
    for (int64_t k0 = 0; k0 < K; k0 += chunk) {
      const int64_t j0 = k0 / 2, j1 = std::min(K2, (k0 + chunk) / 2);
      float* yp = k0 == 0 ? tp : cp;  // the first chunk's chains are the total so far
      if constexpr (MR <= kPanelPassRows) {
        panel_bf16_avx512<MR>(panel, j0, j1, false, xp, K2, yp, NP, kPanelPrefetchBytes, 0, 4);
      } else {
        // Rows 0-3 then rows 4.. over each block; the two passes prefetch
        // two halves of each 256-byte pair of rows two blocks ahead, so that
        // requests go out at an even pace in both (kPanelBlockAhead).
        for (int64_t jb = j0; jb < j1; jb += kPanelBlockPairs) {
          const int64_t je = std::min(j1, jb + kPanelBlockPairs);
          panel_bf16_avx512<4>(panel, jb, je, jb > j0, xp, K2, yp, NP, kPanelBlockAhead, 0, 2);
          panel_bf16_avx512<MR - 4>(panel, jb, je, jb > j0, xp + 4 * K2, K2, yp + 4 * NP, NP, kPanelBlockAhead, 2, 4);
        }
      }
      if (k0 > 0)
        for (int r = 0; r < MR; ++r)
          for (int c = 0; c < 64; ++c) tp[r * NP + c] += cp[r * NP + c];
    }
  }
}

/// cols_bf16 for mr (1 .. kGemvMaxRows) rows.
void cols_bf16_rows(int64_t mr, const Weight& w, const uint32_t* xp, int64_t K2, int64_t n0, int64_t n1, float* chain,
                    float* tot, int64_t NP) {
  static_assert(kGemvMaxRows == 8);
  switch (mr) {
    case 1: return cols_bf16<1>(w, xp, K2, n0, n1, chain, tot, NP);
    case 2: return cols_bf16<2>(w, xp, K2, n0, n1, chain, tot, NP);
    case 3: return cols_bf16<3>(w, xp, K2, n0, n1, chain, tot, NP);
    case 4: return cols_bf16<4>(w, xp, K2, n0, n1, chain, tot, NP);
    case 5: return cols_bf16<5>(w, xp, K2, n0, n1, chain, tot, NP);
    case 6: return cols_bf16<6>(w, xp, K2, n0, n1, chain, tot, NP);
    case 7: return cols_bf16<7>(w, xp, K2, n0, n1, chain, tot, NP);
    default: return cols_bf16<8>(w, xp, K2, n0, n1, chain, tot, NP);
  }
}

/// Row r of x packed into bf16 pairs for the kernel (x_of reads them back).
/// The whole pairs in a loop the compiler vectorises (a conversion call per
/// element is slower: docs/design/decode-kernels.md), then an odd
/// K's last element with a zero high half.
void pack_x(const float* x, int64_t K, uint32_t* xp) {
  const int64_t K2 = K / 2;
#pragma omp simd
  for (int64_t j = 0; j < K2; ++j)
    xp[j] = static_cast<uint32_t>(util::f32_to_bf16(x[2 * j])) |
            (static_cast<uint32_t>(util::f32_to_bf16(x[2 * j + 1])) << 16);
  if (K % 2 != 0) xp[K2] = util::f32_to_bf16(x[K - 1]);
}

/// n_out rounded up to whole 64-column panels: the width of gemv_bf16's chain rows.
int64_t panel_width(int64_t n_out) { return (n_out + 63) / 64 * 64; }

/// gemv_rows for a BF16 weight (see gemv.hpp); m <= kGemvMaxRows.
void gemv_bf16(const float* x, int64_t m, const Weight& w, float* y, bool accumulate, int threads, float* scratch) {
  const int64_t N = w.n_out(), K = w.n_in(), K2 = (K + 1) / 2, NP = panel_width(N);
  float* tot = scratch;
  float* chain = scratch + m * NP;
  auto* xp = reinterpret_cast<uint32_t*>(scratch + 2 * m * NP);
  for (int64_t r = 0; r < m; ++r) pack_x(x + r * K, K, xp + r * K2);
  // Each thread takes a contiguous run of panels: one stream per thread.
  // Products under kDecodeParallelMacs run on one thread.
  const int64_t panels = NP / 64;
  const int nt = static_cast<int>(std::clamp<int64_t>(N * K >= kDecodeParallelMacs ? threads : 1, 1, panels));
#pragma omp parallel num_threads(nt)
  {
#pragma omp for schedule(static)
    for (int64_t t = 0; t < nt; ++t) {
      const int64_t p0 = panels * t / nt, p1 = panels * (t + 1) / nt;
      if (p0 < p1) cols_bf16_rows(m, w, xp, K2, 64 * p0, std::min(N, 64 * p1), chain, tot, NP);
    }
#pragma omp for schedule(static)
    for (int64_t r = 0; r < m; ++r) {
      const float* a = tot + r * NP;
      float* yr = y + r * N;
      if (accumulate)
        for (int64_t n = 0; n < N; ++n) yr[n] += a[n];
      else
        std::memcpy(yr, a, sizeof(float) * static_cast<size_t>(N));
    }
  }
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

int64_t bf16_chunk(int64_t n_in) { return n_in <= 1024 ? 512 : 1024; }

int64_t gemv_split(int64_t n_out, int64_t n_in) {
  return n_out * n_in < kDecodeParallelMacs ? 0 : n_in / 2 / kRows * kRows;
}

int64_t gemv_scratch(const Weight& w, int64_t m) {
  if (w.dtype() == Dtype::BF16) return m * (2 * panel_width(w.n_out()) + w.n_in());
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
    const int64_t K = w.n_in();
    std::vector<uint32_t> xp(static_cast<size_t>((K + 1) / 2));
    pack_x(x, K, xp.data());
    return y0 + col_bf16_scalar(w, xp.data(), n);
  }
  require_f32(w, "gemv_scalar");
  const int64_t K = w.n_in(), split = gemv_split(w.n_out(), K);
  if (split == 0) return col_scalar(w.data(), w.ld(), 0, K, x, n, y0);
  return col_scalar(w.data(), w.ld(), 0, split, x, n, y0) + col_scalar(w.data(), w.ld(), split, K, x, n, 0.0f);
}

}  // namespace kveval::backend
