// Q8_0 weights kept as blocks: the f32 kernel for decode-sized products and the
// row-chunk widening for long ones (ggml's Q8_0: ggml-common.h block_q8_0).
#include "backend/q8_0.hpp"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>

#include <oneapi/dnnl/dnnl.hpp>

// GCC 12's AVX-512 conversion intrinsics warn about their own undefined
// pass-through operand (false -Wmaybe-uninitialized/-Wuninitialized in avx512fintrin.h).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace kveval::backend {

namespace {

// The arithmetic of one output (q8_0_dot_scalar spells it out): 16 lanes; block b
// adds to lane l of accumulator b % 2 the value d_b * fma(q[16+l], x[16+l], q[l] * x[l]);
// the two accumulators are added, then lanes are summed as a tree: l + 8, l + 4, l + 2, l + 1.

// Lanes 0-3 of `t` (t_l = a_l + a_{l+8}) summed as (t0 + t4, ...) then pairs.
__attribute__((target("avx2,fma"))) inline float reduce8(__m256 t) {
  __m128 u = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));  // t_l + t_{l+4}
  u = _mm_add_ps(u, _mm_movehl_ps(u, u));                                            // u_0 + u_2, u_1 + u_3
  return _mm_cvtss_f32(_mm_add_ss(u, _mm_shuffle_ps(u, u, 1)));
}

__attribute__((target("avx2,fma"))) inline __m256 load_q8(const int8_t* q) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q))));
}

// A tile: R rows of W (row stride K bytes, scale stride nb) against MR rows of x
// (row stride K): out[r][i] = W row i · x row r. Each weight is converted to f32
// once per tile, so MR rows of x share the conversion. Each 64-byte line of the
// next group of R rows is prefetched while this group is read: measured on
// Sapphire Rapids (1 thread, 6 MiB of Q8_0 rows, median of 7) 17.1 G weights/s
// against 12.3 without.
template <int R, int MR>
__attribute__((target("avx2,fma"))) void tile_avx2(const int8_t* q, const float* d, int64_t K, const float* x,
                                                   float (*out)[4]) {
  const int64_t nb = K / kQ8Block;
  __m256 lo[MR][R][2], hi[MR][R][2];  // lanes 0-7 and 8-15 of the two accumulators
  for (int r = 0; r < MR; ++r)
    for (int i = 0; i < R; ++i) lo[r][i][0] = lo[r][i][1] = hi[r][i][0] = hi[r][i][1] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const int a = static_cast<int>(b & 1);
    for (int i = 0; i < R; ++i) {
      const int8_t* qb = q + i * K + b * kQ8Block;
      if ((b & 1) == 0) _mm_prefetch(reinterpret_cast<const char*>(qb) + R * K, _MM_HINT_T0);
      const __m256 db = _mm256_broadcast_ss(d + i * nb + b);
      const __m256 q0 = load_q8(qb), q1 = load_q8(qb + 8), q2 = load_q8(qb + 16), q3 = load_q8(qb + 24);
      for (int r = 0; r < MR; ++r) {
        const float* xb = x + r * K + b * kQ8Block;
        const __m256 pl = _mm256_fmadd_ps(q2, _mm256_loadu_ps(xb + 16), _mm256_mul_ps(q0, _mm256_loadu_ps(xb)));
        const __m256 ph = _mm256_fmadd_ps(q3, _mm256_loadu_ps(xb + 24), _mm256_mul_ps(q1, _mm256_loadu_ps(xb + 8)));
        lo[r][i][a] = _mm256_fmadd_ps(db, pl, lo[r][i][a]);
        hi[r][i][a] = _mm256_fmadd_ps(db, ph, hi[r][i][a]);
      }
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int i = 0; i < R; ++i)
      out[r][i] = reduce8(_mm256_add_ps(_mm256_add_ps(lo[r][i][0], lo[r][i][1]), _mm256_add_ps(hi[r][i][0], hi[r][i][1])));
}

template <int R, int MR>
__attribute__((target("avx512f,avx512dq,avx2,fma"))) void tile_avx512(const int8_t* q, const float* d, int64_t K,
                                                                      const float* x, float (*out)[4]) {
  const int64_t nb = K / kQ8Block;
  __m512 acc[MR][R][2];
  for (int r = 0; r < MR; ++r)
    for (int i = 0; i < R; ++i) acc[r][i][0] = acc[r][i][1] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const int a = static_cast<int>(b & 1);
    for (int i = 0; i < R; ++i) {
      const int8_t* qb = q + i * K + b * kQ8Block;
      if ((b & 1) == 0) _mm_prefetch(reinterpret_cast<const char*>(qb) + R * K, _MM_HINT_T0);
      const __m512 q0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qb))));
      const __m512 q1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qb + 16))));
      const __m512 db = _mm512_set1_ps(d[i * nb + b]);
      for (int r = 0; r < MR; ++r) {
        const float* xb = x + r * K + b * kQ8Block;
        const __m512 p = _mm512_fmadd_ps(q1, _mm512_loadu_ps(xb + 16), _mm512_mul_ps(q0, _mm512_loadu_ps(xb)));
        acc[r][i][a] = _mm512_fmadd_ps(db, p, acc[r][i][a]);
      }
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int i = 0; i < R; ++i) {
      const __m512 t = _mm512_add_ps(acc[r][i][0], acc[r][i][1]);
      out[r][i] = reduce8(_mm256_add_ps(_mm512_castps512_ps256(t), _mm512_extractf32x8_ps(t, 1)));
    }
}

enum class Isa { Scalar, Avx2, Avx512 };
/// The widest path this CPU has, capped like oneDNN's own kernels (its
/// effective ISA follows DNNL_MAX_CPU_ISA, so the AVX2 test run covers AVX2 here too).
Isa isa() {
  static const Isa v = [] {
    const auto cap = dnnl::get_effective_cpu_isa();
    if (cap >= dnnl::cpu_isa::avx512_core && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq"))
      return Isa::Avx512;
    if (cap >= dnnl::cpu_isa::avx2 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::Avx2;
    return Isa::Scalar;
  }();
  return v;
}

/// A tile of R rows of W and MR rows of x on this CPU's best path (out[r][i]).
template <int R, int MR>
void tile(const int8_t* q, const float* d, int64_t K, const float* x, float (*out)[4]) {
  switch (isa()) {
    case Isa::Avx512: tile_avx512<R, MR>(q, d, K, x, out); break;
    case Isa::Avx2: tile_avx2<R, MR>(q, d, K, x, out); break;
    default:
      for (int r = 0; r < MR; ++r)
        for (int i = 0; i < R; ++i) out[r][i] = q8_0_dot_scalar(q + i * K, d + i * (K / kQ8Block), x + r * K, K);
  }
}

/// Rows [r0, r0 + mr) of x (mr <= 4) against rows of W [n, n + rows) (rows <= 4): out[r][i].
void tile_any(const int8_t* q, const float* d, int64_t K, const float* x, int64_t rows, int64_t mr, float (*out)[4]) {
  const int64_t nb = K / kQ8Block;
  if (rows == 4 && mr == 1) return tile<4, 1>(q, d, K, x, out);
  for (int64_t i = 0; i < rows; i += 2) {  // W rows in pairs (a last single one), x rows as many as given
    const int8_t* qi = q + i * K;
    const float* di = d + i * nb;
    float o[4][4];
    const bool pair = i + 1 < rows;
    switch (mr * 2 + pair) {
      case 2: tile<1, 1>(qi, di, K, x, o); break;
      case 3: tile<2, 1>(qi, di, K, x, o); break;
      case 4: tile<1, 2>(qi, di, K, x, o); break;
      case 5: tile<2, 2>(qi, di, K, x, o); break;
      case 6: tile<1, 3>(qi, di, K, x, o); break;
      case 7: tile<2, 3>(qi, di, K, x, o); break;
      case 8: tile<1, 4>(qi, di, K, x, o); break;
      default: tile<2, 4>(qi, di, K, x, o); break;
    }
    for (int64_t r = 0; r < mr; ++r) {
      out[r][i] = o[r][0];
      if (pair) out[r][i + 1] = o[r][1];
    }
  }
}

}  // namespace

const char* q8_0_kernel_name() {
  const Isa i = isa();
  return i == Isa::Avx512 ? "avx512" : (i == Isa::Avx2 ? "avx2" : "scalar");
}

float q8_0_dot_scalar(const int8_t* q, const float* d, const float* x, int64_t n_in) {
  float acc[2][16] = {};
  const int64_t nb = n_in / kQ8Block;
  for (int64_t b = 0; b < nb; ++b) {
    const int8_t* qb = q + b * kQ8Block;
    const float* xb = x + b * kQ8Block;
    for (int l = 0; l < 16; ++l) {
      const float p = std::fma(static_cast<float>(qb[16 + l]), xb[16 + l], static_cast<float>(qb[l]) * xb[l]);
      acc[b & 1][l] = std::fma(d[b], p, acc[b & 1][l]);
    }
  }
  float a[16];
  for (int l = 0; l < 16; ++l) a[l] = acc[0][l] + acc[1][l];
  float t[8];
  for (int l = 0; l < 8; ++l) t[l] = a[l] + a[l + 8];
  return ((t[0] + t[4]) + (t[2] + t[6])) + ((t[1] + t[5]) + (t[3] + t[7]));
}

void q8_0_matmul(const float* x, int64_t m, const Weight& w, float* y, bool accumulate, int threads) {
  constexpr int64_t R = 4;  // rows of W per group: four streams from memory
  const int64_t N = w.n_out(), K = w.n_in(), nb = K / kQ8Block, groups = (N + R - 1) / R;
  const int8_t* q = w.q8();
  const float* d = w.q8_scales();
  const int t = m * N * K < (int64_t(1) << 20) ? 1 : std::max(1, threads);
#pragma omp parallel for schedule(static) num_threads(t)
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t n = g * R, rows = std::min(R, N - n);
    for (int64_t r0 = 0; r0 < m; r0 += 4) {  // up to 4 rows of x share each conversion of W
      const int64_t mr = std::min<int64_t>(4, m - r0);
      float v[4][4];
      tile_any(q + n * K, d + n * nb, K, x + r0 * K, rows, mr, v);
      for (int64_t r = 0; r < mr; ++r) {
        float* yr = y + (r0 + r) * N + n;
        for (int64_t i = 0; i < rows; ++i) yr[i] = accumulate ? yr[i] + v[r][i] : v[r][i];
      }
    }
  }
}

void q8_0_widen_rows(const Weight& w, int64_t n0, int64_t nc, float* dst, int64_t ld, int threads) {
  const int64_t K = w.n_in(), nb = K / kQ8Block;
  const int8_t* q = w.q8() + n0 * K;
  const float* d = w.q8_scales() + n0 * nb;
#pragma omp parallel for schedule(static) num_threads(std::max(1, threads))
  for (int64_t j = 0; j < nc; ++j)
    for (int64_t b = 0; b < nb; ++b) {
      const float s = d[j * nb + b];
      const int8_t* qb = q + j * K + b * kQ8Block;
      float* o = dst + j * ld + b * kQ8Block;
#pragma omp simd
      for (int i = 0; i < kQ8Block; ++i) o[i] = s * static_cast<float>(qb[i]);
    }
}

}  // namespace kveval::backend
