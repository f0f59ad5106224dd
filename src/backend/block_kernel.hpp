#pragma once
// Internal to src/backend: the exact-mode kernel shared by every dtype kept as
// the file's blocks (is_file_blocks: kquants.cpp, file_qblocks.cpp). A format F
// says how one block becomes floats; this header multiplies them:
//   F::kBytes, F::kElements (a multiple of 16), F::kAheadBlocks and
//   F::kPrefetchLines (how far ahead and how many cache lines a row prefetches);
//   F::decode(b, v): the block's kElements values in element order, the scalar
//     spec (values as gguf-py's numpy dequantizer rounds them);
//   F::groups(b, sink) (AVX-512): the same values as groups g of 16 elements
//     (elements 16 g .. 16 g + 15), sink.template add<g % 2>(g, v), each parity
//     receiving its groups in ascending order.
// Included by those two units only (compiled with -ffp-contract=off).
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "backend/backend.hpp"
#include "backend/kernel_isa.hpp"
#include "util/half.hpp"

// GCC 12's AVX-512 conversion intrinsics warn about their own undefined
// pass-through operand (false -Wmaybe-uninitialized/-Wuninitialized in avx512fintrin.h).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#define KV_AVX512 __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma,f16c")))

namespace kveval::backend::file_blocks {

/// The little-endian f16 at p as f32 (exact).
inline float load_f16(const uint8_t* p) { return util::f16_to_f32(static_cast<uint16_t>(p[0] | (p[1] << 8))); }

/// load_f16 in one instruction (F16C's vcvtph2ps: exact, subnormals included, MXCSR's DAZ ignored).
KV_AVX512 inline float load_f16_fast(const uint8_t* p) { return _cvtsh_ss(static_cast<uint16_t>(p[0] | (p[1] << 8))); }

/// 16 bytes at p (any alignment).
inline __m128i load16b(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }

/// One output in portable C++, the spec the vector kernel matches bit for bit:
/// 16 lanes; group g of each block adds fma(v, x, acc) lane-wise to
/// accumulator g % 2, blocks in order; then the two accumulators are added and
/// the lanes summed as a tree (l + 8, l + 4, l + 2, l + 1).
template <class F>
float dot_scalar(const uint8_t* row, const float* x, int64_t n_in) {
  float acc[2][16] = {};
  const int64_t nb = n_in / F::kElements;
  for (int64_t b = 0; b < nb; ++b) {
    float v[F::kElements];
    F::decode(row + b * F::kBytes, v);
    const float* xb = x + b * F::kElements;
    for (int g = 0; g < F::kElements / 16; ++g)
      for (int l = 0; l < 16; ++l) acc[g & 1][l] = std::fma(v[16 * g + l], xb[16 * g + l], acc[g & 1][l]);
  }
  float a[16];
  for (int l = 0; l < 16; ++l) a[l] = acc[0][l] + acc[1][l];
  float t[8];
  for (int l = 0; l < 8; ++l) t[l] = a[l] + a[l + 8];
  return ((t[0] + t[4]) + (t[2] + t[6])) + ((t[1] + t[5]) + (t[3] + t[7]));
}

/// Accumulators of MR rows of x against one block's groups.
template <int MR>
struct DotSink {
  __m512 acc[MR][2];
  const float* xb;  // row 0's elements of the current block
  int64_t K;        // row stride of x
  template <int P>
  KV_AVX512 inline void add(int g, __m512 v) {
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) acc[r][P] = _mm512_fmadd_ps(v, _mm512_loadu_ps(xb + r * K + 16 * g), acc[r][P]);
  }
};

/// Stores the groups of one block at dst.
struct StoreSink {
  float* dst;
  template <int P>
  KV_AVX512 inline void add(int g, __m512 v) {
    _mm512_storeu_ps(dst + 16 * g, v);
  }
};

/// One row of W (nb blocks at `row`) against MR rows of x (stride K): out[r].
template <class F, int MR>
KV_AVX512 void row_avx512(const uint8_t* row, int64_t nb, const float* x, int64_t K, float* out) {
  DotSink<MR> s;
  for (int r = 0; r < MR; ++r) s.acc[r][0] = s.acc[r][1] = _mm512_setzero_ps();
  s.K = K;
  for (int64_t b = 0; b < nb; ++b) {
    // kAheadBlocks blocks ahead; as an integer, since near the end of W that
    // lies past the allocation (a prefetch never faults).
    const auto ahead = reinterpret_cast<uintptr_t>(row) + static_cast<uintptr_t>((b + F::kAheadBlocks) * F::kBytes);
    for (int l = 0; l < F::kPrefetchLines; ++l) _mm_prefetch(reinterpret_cast<const char*>(ahead + 64 * l), _MM_HINT_T0);
    s.xb = x + b * F::kElements;
    F::groups(row + b * F::kBytes, s);
  }
  for (int r = 0; r < MR; ++r) {
    const __m512 t = _mm512_add_ps(s.acc[r][0], s.acc[r][1]);
    const __m256 u8 = _mm256_add_ps(_mm512_castps512_ps256(t), _mm512_extractf32x8_ps(t, 1));  // a_l + a_{l+8}
    __m128 u = _mm_add_ps(_mm256_castps256_ps128(u8), _mm256_extractf128_ps(u8, 1));          // t_l + t_{l+4}
    u = _mm_add_ps(u, _mm_movehl_ps(u, u));
    out[r] = _mm_cvtss_f32(_mm_add_ss(u, _mm_shuffle_ps(u, u, 1)));
  }
}

/// Row n of W against rows [0, m) of x, out[r] for r < m, on this CPU's path.
template <class F>
void row_dot(const uint8_t* row, int64_t K, const float* x, int64_t m, float* out) {
  const int64_t nb = K / F::kElements;
  if (kernel_isa() != KernelIsa::Avx512) {
    for (int64_t r = 0; r < m; ++r) out[r] = dot_scalar<F>(row, x + r * K, K);
    return;
  }
  for (int64_t r0 = 0; r0 < m; r0 += 8) {
    const float* xr = x + r0 * K;
    float* o = out + r0;
    switch (std::min<int64_t>(8, m - r0)) {
      case 1: row_avx512<F, 1>(row, nb, xr, K, o); break;
      case 2: row_avx512<F, 2>(row, nb, xr, K, o); break;
      case 3: row_avx512<F, 3>(row, nb, xr, K, o); break;
      case 4: row_avx512<F, 4>(row, nb, xr, K, o); break;
      case 5: row_avx512<F, 5>(row, nb, xr, K, o); break;
      case 6: row_avx512<F, 6>(row, nb, xr, K, o); break;
      case 7: row_avx512<F, 7>(row, nb, xr, K, o); break;
      default: row_avx512<F, 8>(row, nb, xr, K, o); break;
    }
  }
}

/// Most rows of x one pass of matmul's row loop serves (backend::matmul sends at most 32).
inline constexpr int64_t kMaxRowsPerPass = 32;

/// y[m, n_out] (+)= x[m, n_in] · Wᵀ: output n is dot_scalar of W's row n and
/// the x row (on every path); the rows of W in contiguous ranges among
/// `threads` OpenMP threads (one below kDecodeParallelMacs multiply-adds).
template <class F>
void matmul(const float* x, int64_t m, const Weight& w, float* y, bool accumulate, int threads) {
  const int64_t N = w.n_out(), K = w.n_in(), ld = w.ld();
  const auto* q = static_cast<const uint8_t*>(w.raw());
  const int t = m * N * K < kDecodeParallelMacs ? 1 : std::max(1, threads);
  for (int64_t r0 = 0; r0 < m; r0 += kMaxRowsPerPass) {
    const int64_t mr = std::min(kMaxRowsPerPass, m - r0);
    const float* xr = x + r0 * K;
    float* yr = y + r0 * N;
#pragma omp parallel for schedule(static) num_threads(t)
    for (int64_t n = 0; n < N; ++n) {  // static: each thread a contiguous range of rows
      float v[kMaxRowsPerPass];
      row_dot<F>(q + n * ld, K, xr, mr, v);
      for (int64_t r = 0; r < mr; ++r) yr[r * N + n] = accumulate ? yr[r * N + n] + v[r] : v[r];
    }
  }
}

/// One block decoded on this CPU's path (the same values either way).
template <class F>
void decode_block(const uint8_t* b, float* dst) {
  if (kernel_isa() == KernelIsa::Avx512) {
    StoreSink s{dst};
    F::groups(b, s);
  } else {
    F::decode(b, dst);
  }
}

/// `n_blocks` blocks decoded in element order with F::decode.
template <class F>
void decode(const uint8_t* blocks, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) F::decode(blocks + i * F::kBytes, dst + i * F::kElements);
}

/// Rows [n0, n0 + nc) of W widened into dst [nc, n_in] (row stride ld), rows split among `threads`.
template <class F>
void widen(const Weight& w, int64_t n0, int64_t nc, float* dst, int64_t ld, int threads) {
  const int64_t K = w.n_in(), nb = K / F::kElements;
  const auto* q = static_cast<const uint8_t*>(w.raw());
#pragma omp parallel for schedule(static) num_threads(std::max(1, threads))
  for (int64_t j = 0; j < nc; ++j)
    for (int64_t b = 0; b < nb; ++b) decode_block<F>(q + (n0 + j) * w.ld() + b * F::kBytes, dst + j * ld + b * F::kElements);
}

}  // namespace kveval::backend::file_blocks
