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

#include <oneapi/dnnl/dnnl.hpp>

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
  __attribute__((target("avx512f,avx512dq,avx2,fma"))) static void load16(const uint8_t* p, __m512& a, __m512& b) {
    __m128i lo, hi;
    split(p, lo, hi);
    a = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(lo));
    b = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(hi));
  }
  static void decode(const uint8_t* p, float* v) {
    for (int j = 0; j < 16; ++j) {
      v[j] = static_cast<float>((p[j] & 15) - 8);
      v[j + 16] = static_cast<float>((p[j] >> 4) - 8);
    }
  }
};

/// One output in portable C++: the spec the vector tiles match bit for bit.
template <class F>
float dot_scalar(const uint8_t* q, const float* d, const float* x, int64_t n_in) {
  float acc[2][16] = {};
  const int64_t nb = n_in / kQBlock;
  for (int64_t b = 0; b < nb; ++b) {
    float v[32];
    F::decode(q + b * F::kBytes, v);
    const float* xb = x + b * kQBlock;
    for (int l = 0; l < 16; ++l) {
      const float p = std::fma(v[16 + l], xb[16 + l], v[l] * xb[l]);
      acc[b & 1][l] = std::fma(d[b], p, acc[b & 1][l]);
    }
  }
  float a[16];
  for (int l = 0; l < 16; ++l) a[l] = acc[0][l] + acc[1][l];
  float t[8];
  for (int l = 0; l < 8; ++l) t[l] = a[l] + a[l + 8];
  return ((t[0] + t[4]) + (t[2] + t[6])) + ((t[1] + t[5]) + (t[3] + t[7]));
}

// A tile: R rows of W (quants `rs` bytes apart, scales nb apart) against MR rows
// of x (row stride K): out[r][i] = W row i · x row r. Each block is converted to
// f32 once per tile, so MR rows of x share the conversion. Each 64-byte line of
// the next group of R rows is prefetched while this group is read: measured on
// Sapphire Rapids (1 thread, 6 MiB of Q8_0 rows, median of 7) 17.1 G weights/s
// against 12.3 without. The next group's scales (a separate array) likewise, one
// line per 16 blocks: on a Zen 5 VM, s110m q8_0 tg128 at 1 thread was faster in 6
// of 7 alternating pairs (median ratio 1.09), but that VM flips between ~95 and
// ~135 tok/s states run to run, so the gain is suggestive only; q4_0, s15m and 2
// threads within noise. Kept because the scales were the one unprefetched stream.
/// For block b of a row (quants at qb, its scale at db): the same place in the
/// next group of R rows, once per 64-byte line of quants and of scales.
template <class F, int R>
inline void prefetch_next(const uint8_t* qb, const float* db, int64_t b, int64_t rs, int64_t nb) {
  constexpr int64_t kLine = 64 / F::kBytes;  // blocks per cache line of quants
  if (b % kLine == 0) _mm_prefetch(reinterpret_cast<const char*>(qb) + R * rs, _MM_HINT_T0);
  if (b % 16 == 0) _mm_prefetch(reinterpret_cast<const char*>(db + R * nb), _MM_HINT_T0);
}

template <class F, int R, int MR>
__attribute__((target("avx2,fma"))) void tile_avx2(const uint8_t* q, const float* d, int64_t rs, int64_t K,
                                                   const float* x, float (*out)[4]) {
  const int64_t nb = K / kQBlock;
  __m256 lo[MR][R][2], hi[MR][R][2];  // lanes 0-7 and 8-15 of the two accumulators
  for (int r = 0; r < MR; ++r)
    for (int i = 0; i < R; ++i) lo[r][i][0] = lo[r][i][1] = hi[r][i][0] = hi[r][i][1] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const int a = static_cast<int>(b & 1);
    for (int i = 0; i < R; ++i) {
      const uint8_t* qb = q + i * rs + b * F::kBytes;
      prefetch_next<F, R>(qb, d + i * nb + b, b, rs, nb);
      const __m256 db = _mm256_broadcast_ss(d + i * nb + b);
      __m256 qv[4];
      F::load8(qb, qv);
      for (int r = 0; r < MR; ++r) {
        const float* xb = x + r * K + b * kQBlock;
        const __m256 pl = _mm256_fmadd_ps(qv[2], _mm256_loadu_ps(xb + 16), _mm256_mul_ps(qv[0], _mm256_loadu_ps(xb)));
        const __m256 ph = _mm256_fmadd_ps(qv[3], _mm256_loadu_ps(xb + 24), _mm256_mul_ps(qv[1], _mm256_loadu_ps(xb + 8)));
        lo[r][i][a] = _mm256_fmadd_ps(db, pl, lo[r][i][a]);
        hi[r][i][a] = _mm256_fmadd_ps(db, ph, hi[r][i][a]);
      }
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int i = 0; i < R; ++i)
      out[r][i] = reduce8(_mm256_add_ps(_mm256_add_ps(lo[r][i][0], lo[r][i][1]), _mm256_add_ps(hi[r][i][0], hi[r][i][1])));
}

template <class F, int R, int MR>
__attribute__((target("avx512f,avx512dq,avx2,fma"))) void tile_avx512(const uint8_t* q, const float* d, int64_t rs,
                                                                      int64_t K, const float* x, float (*out)[4]) {
  const int64_t nb = K / kQBlock;
  __m512 acc[MR][R][2];
  for (int r = 0; r < MR; ++r)
    for (int i = 0; i < R; ++i) acc[r][i][0] = acc[r][i][1] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const int a = static_cast<int>(b & 1);
    for (int i = 0; i < R; ++i) {
      const uint8_t* qb = q + i * rs + b * F::kBytes;
      prefetch_next<F, R>(qb, d + i * nb + b, b, rs, nb);
      __m512 q0, q1;
      F::load16(qb, q0, q1);
      const __m512 db = _mm512_set1_ps(d[i * nb + b]);
      for (int r = 0; r < MR; ++r) {
        const float* xb = x + r * K + b * kQBlock;
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
template <class F, int R, int MR>
void tile(const uint8_t* q, const float* d, int64_t rs, int64_t K, const float* x, float (*out)[4]) {
  switch (isa()) {
    case Isa::Avx512: tile_avx512<F, R, MR>(q, d, rs, K, x, out); break;
    case Isa::Avx2: tile_avx2<F, R, MR>(q, d, rs, K, x, out); break;
    default:
      for (int r = 0; r < MR; ++r)
        for (int i = 0; i < R; ++i) out[r][i] = dot_scalar<F>(q + i * rs, d + i * (K / kQBlock), x + r * K, K);
  }
}

/// Rows [r0, r0 + mr) of x (mr <= 4) against rows of W [n, n + rows) (rows <= 4): out[r][i].
template <class F>
void tile_any(const uint8_t* q, const float* d, int64_t rs, int64_t K, const float* x, int64_t rows, int64_t mr,
              float (*out)[4]) {
  const int64_t nb = K / kQBlock;
  if (rows == 4 && mr == 1) return tile<F, 4, 1>(q, d, rs, K, x, out);
  for (int64_t i = 0; i < rows; i += 2) {  // W rows in pairs (a last single one), x rows as many as given
    const uint8_t* qi = q + i * rs;
    const float* di = d + i * nb;
    float o[4][4];
    const bool pair = i + 1 < rows;
    switch (mr * 2 + pair) {
      case 2: tile<F, 1, 1>(qi, di, rs, K, x, o); break;
      case 3: tile<F, 2, 1>(qi, di, rs, K, x, o); break;
      case 4: tile<F, 1, 2>(qi, di, rs, K, x, o); break;
      case 5: tile<F, 2, 2>(qi, di, rs, K, x, o); break;
      case 6: tile<F, 1, 3>(qi, di, rs, K, x, o); break;
      case 7: tile<F, 2, 3>(qi, di, rs, K, x, o); break;
      case 8: tile<F, 1, 4>(qi, di, rs, K, x, o); break;
      default: tile<F, 2, 4>(qi, di, rs, K, x, o); break;
    }
    for (int64_t r = 0; r < mr; ++r) {
      out[r][i] = o[r][0];
      if (pair) out[r][i + 1] = o[r][1];
    }
  }
}

void require(const Weight& w, Dtype want, const char* who) {
  if (w.dtype() != want) throw ArgumentError(fmt::format("{}: a {} weight", who, to_string(w.dtype())));
}

template <class F>
void matmul_blocks(const float* x, int64_t m, const Weight& w, float* y, bool accumulate, int threads) {
  constexpr int64_t R = 4;  // rows of W per group: four streams from memory
  const int64_t N = w.n_out(), K = w.n_in(), nb = K / kQBlock, rs = w.ld(), groups = (N + R - 1) / R;
  const auto* q = static_cast<const uint8_t*>(w.raw());
  const float* d = w.scales();
  const int t = m * N * K < (int64_t(1) << 20) ? 1 : std::max(1, threads);
#pragma omp parallel for schedule(static) num_threads(t)
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t n = g * R, rows = std::min(R, N - n);
    for (int64_t r0 = 0; r0 < m; r0 += 4) {  // up to 4 rows of x share each conversion of W
      const int64_t mr = std::min<int64_t>(4, m - r0);
      float v[4][4];
      tile_any<F>(q + n * rs, d + n * nb, rs, K, x + r0 * K, rows, mr, v);
      for (int64_t r = 0; r < mr; ++r) {
        float* yr = y + (r0 + r) * N + n;
        for (int64_t i = 0; i < rows; ++i) yr[i] = accumulate ? yr[i] + v[r][i] : v[r][i];
      }
    }
  }
}

template <class F>
void widen(const Weight& w, int64_t n0, int64_t nc, float* dst, int64_t ld, int threads) {
  const int64_t K = w.n_in(), nb = K / kQBlock, rs = w.ld();
  const uint8_t* q = static_cast<const uint8_t*>(w.raw()) + n0 * rs;
  const float* d = w.scales() + n0 * nb;
#pragma omp parallel for schedule(static) num_threads(std::max(1, threads))
  for (int64_t j = 0; j < nc; ++j)
    for (int64_t b = 0; b < nb; ++b) {
      const float s = d[j * nb + b];
      float v[kQBlock];
      F::decode(q + j * rs + b * F::kBytes, v);
      float* o = dst + j * ld + b * kQBlock;
#pragma omp simd
      for (int i = 0; i < kQBlock; ++i) o[i] = s * v[i];
    }
}

}  // namespace

const char* qblock_kernel_name() {
  const Isa i = isa();
  return i == Isa::Avx512 ? "avx512" : (i == Isa::Avx2 ? "avx2" : "scalar");
}

float q8_0_dot_scalar(const int8_t* q, const float* d, const float* x, int64_t n_in) {
  return dot_scalar<Q8>(reinterpret_cast<const uint8_t*>(q), d, x, n_in);
}

float q4_0_dot_scalar(const uint8_t* q, const float* d, const float* x, int64_t n_in) {
  return dot_scalar<Q4>(q, d, x, n_in);
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
  if (w.dtype() == Dtype::Q4_0) return q4_0_matmul(x, m, w, y, accumulate, threads);
  q8_0_matmul(x, m, w, y, accumulate, threads);  // throws for another dtype
}

void widen_rows(const Weight& w, int64_t n0, int64_t nc, float* dst, int64_t ld, int threads) {
  if (w.dtype() == Dtype::Q4_0) return widen<Q4>(w, n0, nc, dst, ld, threads);
  require(w, Dtype::Q8_0, "widen_rows");
  widen<Q8>(w, n0, nc, dst, ld, threads);
}

}  // namespace kveval::backend
