// Q8_0 weights kept as blocks: the f32 kernel for decode-sized products and the
// column-chunk widening for large ones (ggml's Q8_0: ggml-common.h block_q8_0).
#include "backend/q8_0.hpp"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>

namespace kveval::backend {

namespace {

// The per-lane sum of one block: lane l gets q[l]x[l] + q[8+l]x[8+l] + q[16+l]x[16+l] + q[24+l]x[24+l]
// as one multiply then three fused multiply-adds, in that order.
inline float block_lane(const int8_t* q, const float* x, int l) {
  float p = static_cast<float>(q[l]) * x[l];
  p = std::fma(static_cast<float>(q[8 + l]), x[8 + l], p);
  p = std::fma(static_cast<float>(q[16 + l]), x[16 + l], p);
  return std::fma(static_cast<float>(q[24 + l]), x[24 + l], p);
}

__attribute__((target("avx2,fma"))) inline __m256 load_q(const int8_t* q) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q))));
}

__attribute__((target("avx2,fma"))) float dot_avx2(const int8_t* q, const float* d, const float* x, int64_t nb) {
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t b = 0; b < nb; ++b) {
    const int8_t* qb = q + b * kQ8Block;
    const float* xb = x + b * kQ8Block;
    __m256 p = _mm256_mul_ps(load_q(qb), _mm256_loadu_ps(xb));
    p = _mm256_fmadd_ps(load_q(qb + 8), _mm256_loadu_ps(xb + 8), p);
    p = _mm256_fmadd_ps(load_q(qb + 16), _mm256_loadu_ps(xb + 16), p);
    p = _mm256_fmadd_ps(load_q(qb + 24), _mm256_loadu_ps(xb + 24), p);
    acc[b & 1] = _mm256_fmadd_ps(_mm256_set1_ps(d[b]), p, acc[b & 1]);
  }
  const __m256 a = _mm256_add_ps(acc[0], acc[1]);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));  // a_i + a_{i+4}
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));                                            // (0+2), (1+3)
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
}

const bool kSimd = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");

}  // namespace

bool q8_0_has_simd() { return kSimd; }

float q8_0_dot_scalar(const int8_t* q, const float* d, const float* x, int64_t n_in) {
  float acc[2][8] = {};
  const int64_t nb = n_in / kQ8Block;
  for (int64_t b = 0; b < nb; ++b)
    for (int l = 0; l < 8; ++l)
      acc[b & 1][l] = std::fma(d[b], block_lane(q + b * kQ8Block, x + b * kQ8Block, l), acc[b & 1][l]);
  float a[8];
  for (int l = 0; l < 8; ++l) a[l] = acc[0][l] + acc[1][l];
  return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

void q8_0_matmul(const float* x, int64_t m, const Weight& w, float* y, bool accumulate, int threads) {
  const int64_t N = w.n_out(), K = w.n_in(), nb = K / kQ8Block;
  const int8_t* q = w.q8();
  const float* d = w.q8_scales();
  const int t = m * N * K < (int64_t(1) << 20) ? 1 : std::max(1, threads);
#pragma omp parallel for schedule(static) num_threads(t)
  for (int64_t n = 0; n < N; ++n) {
    const int8_t* qn = q + n * K;
    const float* dn = d + n * nb;
    for (int64_t r = 0; r < m; ++r) {
      const float v = kSimd ? dot_avx2(qn, dn, x + r * K, nb) : q8_0_dot_scalar(qn, dn, x + r * K, K);
      y[r * N + n] = accumulate ? y[r * N + n] + v : v;
    }
  }
}

void q8_0_dequantize_transposed(const Weight& w, int64_t n0, int64_t nc, float* dst, int64_t ld) {
  const int64_t K = w.n_in(), nb = K / kQ8Block;
  const int8_t* q = w.q8();
  const float* d = w.q8_scales();
  constexpr int64_t J = 16;  // 16 columns: one 64-byte line of dst per k
#pragma omp parallel for schedule(static)
  for (int64_t j0 = 0; j0 < nc; j0 += J) {
    const int64_t j1 = std::min(nc, j0 + J);
    for (int64_t j = j0; j < j1; ++j) {
      const int8_t* qn = q + (n0 + j) * K;
      const float* dn = d + (n0 + j) * nb;
      for (int64_t k = 0; k < K; ++k) dst[k * ld + j] = dn[k / kQ8Block] * static_cast<float>(qn[k]);
    }
  }
}

}  // namespace kveval::backend
