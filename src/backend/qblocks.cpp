// Q8_0 and Q4_0 weights kept as blocks: the f32 kernel for decode-sized
// products and the row-chunk widening for long ones (ggml's formats:
// ggml-common.h block_q8_0, block_q4_0). One kernel for both formats: a format
// (Q8, Q4 below) only says how a block's quants become floats.
#include "backend/qblocks.hpp"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "backend/file_qblocks.hpp"
#include "backend/kernel_isa.hpp"
#include "backend/kquants.hpp"
#include "util/error.hpp"

// GCC 12's AVX-512 conversion intrinsics warn about their own undefined
// pass-through operand (false -Wmaybe-uninitialized/-Wuninitialized in avx512fintrin.h).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace kveval::backend {

namespace {

// The arithmetic of one output (dot_scalar spells it out): 16 lanes; block b
// adds to lane l of accumulator b % 2 the value d_b * fma(q[16+l], x[16+l], q[l] * x[l]);
// the two accumulators are added, then lanes are summed as a tree: l + 8, l + 4, l + 2, l + 1.

// Lanes 0-3 of `t` (t_l = a_l + a_{l+8}) summed as (t0 + t4, ...) then pairs.
__attribute__((target("avx2,fma"))) inline float reduce8(__m256 t) {
  __m128 u = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));  // t_l + t_{l+4}
  u = _mm_add_ps(u, _mm_movehl_ps(u, u));                                            // u_0 + u_2, u_1 + u_3
  return _mm_cvtss_f32(_mm_add_ss(u, _mm_shuffle_ps(u, u, 1)));
}

__attribute__((target("avx2,fma"))) inline __m256 cvt8(__m128i q) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)); }

/// Q8_0 quants of a block: 32 int8 (block_q8_0 qs).
struct Q8 {
  static constexpr int64_t kBytes = 32;
  /// Elements 0-7, 8-15, 16-23, 24-31 as floats.
  __attribute__((target("avx2,fma"))) static void load8(const uint8_t* p, __m256 (&q)[4]) {
    for (int i = 0; i < 4; ++i) q[i] = cvt8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8 * i)));
  }
  /// Elements 0-15 and 16-31 as floats.
  __attribute__((target("avx512f,avx512dq,avx2,fma"))) static void load16(const uint8_t* p, __m512& a, __m512& b) {
    a = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
    b = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16))));
  }
  /// The 32 quants as floats.
  static void decode(const uint8_t* p, float* v) {
    for (int j = 0; j < 32; ++j) v[j] = static_cast<float>(static_cast<int8_t>(p[j]));
  }
};

/// Q4_0 quants of a block: 16 bytes (block_q4_0 qs), element j < 16 the low
/// nibble of byte j, element j + 16 its high nibble; quant = nibble - 8.
struct Q4 {
  static constexpr int64_t kBytes = 16;
  /// Nibbles minus 8 as int8: elements 0-15 (lo) and 16-31 (hi).
  __attribute__((target("avx2,fma"))) static void split(const uint8_t* p, __m128i& lo, __m128i& hi) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i m = _mm_set1_epi8(15), eight = _mm_set1_epi8(8);
    lo = _mm_sub_epi8(_mm_and_si128(v, m), eight);
    hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(v, 4), m), eight);
  }
  __attribute__((target("avx2,fma"))) static void load8(const uint8_t* p, __m256 (&q)[4]) {
    __m128i lo, hi;
    split(p, lo, hi);
    q[0] = cvt8(lo);
    q[1] = cvt8(_mm_srli_si128(lo, 8));
    q[2] = cvt8(hi);
    q[3] = cvt8(_mm_srli_si128(hi, 8));
  }
  /// Each byte widened to a 32-bit lane; vpermps picks table[lane & 15] =
  /// nibble - 8 as a float, so no integer-to-float conversion is needed
  /// (measured: docs/design/decode-kernels.md, "Q8_0 and Q4_0 blocks").
  __attribute__((target("avx512f,avx512dq,avx2,fma"))) static void load16(const uint8_t* p, __m512& a, __m512& b) {
    const __m512 table = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
    const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    a = _mm512_permutexvar_ps(v, table);                         // low nibbles (the index's bits 0-3)
    b = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), table);  // high nibbles
  }
  static void decode(const uint8_t* p, float* v) {
    for (int j = 0; j < 16; ++j) {
      v[j] = static_cast<float>((p[j] & 15) - 8);
      v[j + 16] = static_cast<float>((p[j] >> 4) - 8);
    }
  }
};

/// One output in portable C++: the spec the vector tiles match bit for bit.
/// Block b's quants at q + b * qs bytes, its scale at d[b * ds].
template <class F>
float dot_scalar(const uint8_t* q, int64_t qs, const float* d, int64_t ds, const float* x, int64_t n_in) {
  float acc[2][16] = {};
  const int64_t nb = n_in / kQBlock;
  for (int64_t b = 0; b < nb; ++b) {
    float v[32];
    F::decode(q + b * qs, v);
    const float* xb = x + b * kQBlock;
    for (int l = 0; l < 16; ++l) {
      const float p = std::fma(v[16 + l], xb[16 + l], v[l] * xb[l]);
      acc[b & 1][l] = std::fma(d[b * ds], p, acc[b & 1][l]);
    }
  }
  float a[16];
  for (int l = 0; l < 16; ++l) a[l] = acc[0][l] + acc[1][l];
  float t[8];
  for (int l = 0; l < 8; ++l) t[l] = a[l] + a[l + 8];
  return ((t[0] + t[4]) + (t[2] + t[6])) + ((t[1] + t[5]) + (t[3] + t[7]));
}

// A tile: R rows of one group of kQGroup rows of W (the group's quants at q,
// block b of its row i at q + (b * kQGroup + i) * F::kBytes; its scales at d,
// likewise d[b * kQGroup + i]) against MR rows of x (row stride K):
// out[r][i] = W row i · x row r. Each block is converted to f32 once per tile,
// so MR rows of x share the conversion. The interleaved layout makes a decode
// step one sequential stream of quants and one of scales (measured against 4
// separate row streams: docs/design/decode-kernels.md).
template <class F>
inline void prefetch_ahead(const uint8_t* q, const float* d, int64_t b) {
  constexpr int64_t kAhead = 1024;                                  // bytes of quants
  constexpr int64_t kLines = 2 * kQGroup * F::kBytes / 64;          // lines per pair of blocks
  constexpr int64_t kScaleAhead = kAhead / (kQGroup * F::kBytes);   // the same distance in blocks
  const char* p = reinterpret_cast<const char*>(q + b * kQGroup * F::kBytes) + kAhead;
  for (int64_t l = 0; l < kLines; ++l) _mm_prefetch(p + 64 * l, _MM_HINT_T0);
  if (b % 4 == 0) _mm_prefetch(reinterpret_cast<const char*>(d + (b + kScaleAhead) * kQGroup), _MM_HINT_T0);
}

template <class F, int R, int MR>
__attribute__((target("avx2,fma"))) inline void step_avx2(const uint8_t* q, const float* d, int64_t K,
                                                          const float* x, int64_t b, __m256 (&lo)[MR][R],
                                                          __m256 (&hi)[MR][R]) {
  for (int i = 0; i < R; ++i) {
    const __m256 db = _mm256_broadcast_ss(d + b * kQGroup + i);
    __m256 qv[4];
    F::load8(q + (b * kQGroup + i) * F::kBytes, qv);
    for (int r = 0; r < MR; ++r) {
      const float* xb = x + r * K + b * kQBlock;
      const __m256 pl = _mm256_fmadd_ps(qv[2], _mm256_loadu_ps(xb + 16), _mm256_mul_ps(qv[0], _mm256_loadu_ps(xb)));
      const __m256 ph = _mm256_fmadd_ps(qv[3], _mm256_loadu_ps(xb + 24), _mm256_mul_ps(qv[1], _mm256_loadu_ps(xb + 8)));
      lo[r][i] = _mm256_fmadd_ps(db, pl, lo[r][i]);
      hi[r][i] = _mm256_fmadd_ps(db, ph, hi[r][i]);
    }
  }
}

template <class F, int R, int MR>
__attribute__((target("avx2,fma"))) void tile_avx2(const uint8_t* q, const float* d, int64_t K, const float* x,
                                                   float (*out)[4]) {
  const int64_t nb = K / kQBlock;
  __m256 lo[2][MR][R], hi[2][MR][R];  // lanes 0-7 and 8-15 of the two accumulators (even, odd blocks)
  for (int a = 0; a < 2; ++a)
    for (int r = 0; r < MR; ++r)
      for (int i = 0; i < R; ++i) lo[a][r][i] = hi[a][r][i] = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 1 < nb; b += 2) {
    prefetch_ahead<F>(q, d, b);
    step_avx2<F, R, MR>(q, d, K, x, b, lo[0], hi[0]);
    step_avx2<F, R, MR>(q, d, K, x, b + 1, lo[1], hi[1]);
  }
  if (b < nb) step_avx2<F, R, MR>(q, d, K, x, b, lo[0], hi[0]);
  for (int r = 0; r < MR; ++r)
    for (int i = 0; i < R; ++i)
      out[r][i] = reduce8(_mm256_add_ps(_mm256_add_ps(lo[0][r][i], lo[1][r][i]), _mm256_add_ps(hi[0][r][i], hi[1][r][i])));
}

template <class F, int R, int MR>
__attribute__((target("avx512f,avx512dq,avx2,fma"))) inline void step_avx512(const uint8_t* q, const float* d,
                                                                             int64_t K, const float* x, int64_t b,
                                                                             __m512 (&acc)[MR][R]) {
  for (int i = 0; i < R; ++i) {
    __m512 q0, q1;
    F::load16(q + (b * kQGroup + i) * F::kBytes, q0, q1);
    const __m512 db = _mm512_set1_ps(d[b * kQGroup + i]);
    for (int r = 0; r < MR; ++r) {
      const float* xb = x + r * K + b * kQBlock;
      const __m512 p = _mm512_fmadd_ps(q1, _mm512_loadu_ps(xb + 16), _mm512_mul_ps(q0, _mm512_loadu_ps(xb)));
      acc[r][i] = _mm512_fmadd_ps(db, p, acc[r][i]);
    }
  }
}

template <class F, int R, int MR>
__attribute__((target("avx512f,avx512dq,avx2,fma"))) void tile_avx512(const uint8_t* q, const float* d, int64_t K,
                                                                      const float* x, float (*out)[4]) {
  const int64_t nb = K / kQBlock;
  __m512 acc[2][MR][R];  // the two accumulators: even and odd blocks
  for (int a = 0; a < 2; ++a)
    for (int r = 0; r < MR; ++r)
      for (int i = 0; i < R; ++i) acc[a][r][i] = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 1 < nb; b += 2) {
    prefetch_ahead<F>(q, d, b);
    step_avx512<F, R, MR>(q, d, K, x, b, acc[0]);
    step_avx512<F, R, MR>(q, d, K, x, b + 1, acc[1]);
  }
  if (b < nb) step_avx512<F, R, MR>(q, d, K, x, b, acc[0]);
  for (int r = 0; r < MR; ++r)
    for (int i = 0; i < R; ++i) {
      const __m512 t = _mm512_add_ps(acc[0][r][i], acc[1][r][i]);
      out[r][i] = reduce8(_mm256_add_ps(_mm512_castps512_ps256(t), _mm512_extractf32x8_ps(t, 1)));
    }
}

/// A tile of R rows of a group of W and MR rows of x on this CPU's best path (out[r][i]).
template <class F, int R, int MR>
void tile(const uint8_t* q, const float* d, int64_t K, const float* x, float (*out)[4]) {
  switch (kernel_isa()) {
    case KernelIsa::Avx512: tile_avx512<F, R, MR>(q, d, K, x, out); break;
    case KernelIsa::Avx2: tile_avx2<F, R, MR>(q, d, K, x, out); break;
    default:
      for (int r = 0; r < MR; ++r)
        for (int i = 0; i < R; ++i)
          out[r][i] = dot_scalar<F>(q + i * F::kBytes, kQGroup * F::kBytes, d + i, kQGroup, x + r * K, K);
  }
}

/// The kQGroup rows of one group of W (quants q, scales d) against rows
/// [r0, r0 + mr) of x (mr <= 4): out[r][i]. The whole group in one pass while
/// the accumulators fit in registers (2 * mr * 4 of them: AVX-512's 32 zmm up
/// to 3 rows of x, AVX2's 16 ymm hold lanes 0-7 and 8-15 apart, 1 row), else
/// in two passes of 2 rows of W.
template <class F>
void group_tile(const uint8_t* q, const float* d, int64_t K, const float* x, int64_t mr, float (*out)[4]) {
  static_assert(kQGroup == 4);
  if (mr == 1) return tile<F, 4, 1>(q, d, K, x, out);
  const bool wide = kernel_isa() == KernelIsa::Avx512;
  if (wide && mr == 2) return tile<F, 4, 2>(q, d, K, x, out);
  if (wide && mr == 3) return tile<F, 4, 3>(q, d, K, x, out);
  for (int i = 0; i < 4; i += 2) {
    const uint8_t* qi = q + i * F::kBytes;
    const float* di = d + i;
    float o[4][4];
    switch (mr) {
      case 2: tile<F, 2, 2>(qi, di, K, x, o); break;
      case 3: tile<F, 2, 3>(qi, di, K, x, o); break;
      default: tile<F, 2, 4>(qi, di, K, x, o); break;
    }
    for (int64_t r = 0; r < mr; ++r) {
      out[r][i] = o[r][0];
      out[r][i + 1] = o[r][1];
    }
  }
}

void require(const Weight& w, Dtype want, const char* who) {
  if (w.dtype() != want) throw ArgumentError(fmt::format("{}: a {} weight", who, to_string(w.dtype())));
}

template <class F>
void matmul_blocks(const float* x, int64_t m, const Weight& w, float* y, bool accumulate, int threads) {
  const int64_t N = w.n_out(), K = w.n_in(), nb = K / kQBlock, groups = (N + kQGroup - 1) / kQGroup;
  const auto* q = static_cast<const uint8_t*>(w.raw());
  const float* d = w.scales();
  const int t = m * N * K < kDecodeParallelMacs ? 1 : std::max(1, threads);
#pragma omp parallel for schedule(static) num_threads(t)
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t n = g * kQGroup, rows = std::min(kQGroup, N - n);
    for (int64_t r0 = 0; r0 < m; r0 += 4) {  // up to 4 rows of x share each conversion of W
      const int64_t mr = std::min<int64_t>(4, m - r0);
      float v[4][4];
      group_tile<F>(q + g * nb * kQGroup * F::kBytes, d + g * nb * kQGroup, K, x + r0 * K, mr, v);
      for (int64_t r = 0; r < mr; ++r) {
        float* yr = y + (r0 + r) * N + n;
        for (int64_t i = 0; i < rows; ++i) yr[i] = accumulate ? yr[i] + v[r][i] : v[r][i];
      }
    }
  }
}

template <class F>
void widen(const Weight& w, int64_t n0, int64_t nc, float* dst, int64_t ld, int threads) {
  const int64_t K = w.n_in(), nb = K / kQBlock;
  const auto* q = static_cast<const uint8_t*>(w.raw());
  const float* d = w.scales();
#pragma omp parallel for schedule(static) num_threads(std::max(1, threads))
  for (int64_t j = 0; j < nc; ++j)
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t i = w.block_index(n0 + j, b);
      const float s = d[i];
      float v[kQBlock];
      F::decode(q + i * F::kBytes, v);
      float* o = dst + j * ld + b * kQBlock;
#pragma omp simd
      for (int e = 0; e < kQBlock; ++e) o[e] = s * v[e];
    }
}

}  // namespace

float q8_0_dot_scalar(const int8_t* q, const float* d, const float* x, int64_t n_in) {
  return dot_scalar<Q8>(reinterpret_cast<const uint8_t*>(q), Q8::kBytes, d, 1, x, n_in);
}

float q4_0_dot_scalar(const uint8_t* q, const float* d, const float* x, int64_t n_in) {
  return dot_scalar<Q4>(q, Q4::kBytes, d, 1, x, n_in);
}

void q8_0_matmul(const float* x, int64_t m, const Weight& w, float* y, bool accumulate, int threads) {
  require(w, Dtype::Q8_0, "q8_0_matmul");
  matmul_blocks<Q8>(x, m, w, y, accumulate, threads);
}

void q4_0_matmul(const float* x, int64_t m, const Weight& w, float* y, bool accumulate, int threads) {
  require(w, Dtype::Q4_0, "q4_0_matmul");
  matmul_blocks<Q4>(x, m, w, y, accumulate, threads);
}

void blocks_matmul(const float* x, int64_t m, const Weight& w, float* y, bool accumulate, int threads) {
  if (is_kquant(w.dtype())) return kquant_matmul(x, m, w, y, accumulate, threads);
  if (is_file_blocks(w.dtype())) return file_qblocks_matmul(x, m, w, y, accumulate, threads);
  if (w.dtype() == Dtype::Q4_0) return q4_0_matmul(x, m, w, y, accumulate, threads);
  q8_0_matmul(x, m, w, y, accumulate, threads);  // throws for another dtype
}

void widen_rows(const Weight& w, int64_t n0, int64_t nc, float* dst, int64_t ld, int threads) {
  if (is_kquant(w.dtype())) return kquant_widen_rows(w, n0, nc, dst, ld, threads);
  if (is_file_blocks(w.dtype())) return file_qblocks_widen_rows(w, n0, nc, dst, ld, threads);
  if (w.dtype() == Dtype::Q4_0) return widen<Q4>(w, n0, nc, dst, ld, threads);
  require(w, Dtype::Q8_0, "widen_rows");
  widen<Q8>(w, n0, nc, dst, ld, threads);
}

void gather_rows(const Weight& w, std::span<const int32_t> ids, float* dst) {
  if (!is_blocks(w.dtype()) && !is_file_blocks(w.dtype()))
    throw ArgumentError(fmt::format("gather_rows: a {} weight (a kept-block dtype expected)", to_string(w.dtype())));
  const int64_t n_in = w.n_in();
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= w.n_out())
      throw ArgumentError(fmt::format("gather_rows: row {} outside [0, {})", id, w.n_out()));
    widen_rows(w, id, 1, dst + static_cast<int64_t>(i) * n_in, n_in, 1);
  }
}

}  // namespace kveval::backend
