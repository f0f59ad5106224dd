// Q4_K, Q5_K and Q6_K weights kept as the file's super-blocks: the exact-mode f32
// kernel for decode-sized products and the decoder behind the row-chunk
// widening for long ones (ggml's formats: ggml-common.h block_q4_K,
// block_q5_K, block_q6_K). A format (Q4K, Q5K, Q6K below) says how a super-block becomes its 16
// groups of 16 floats; one kernel multiplies them.
#include "backend/kquants.hpp"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "backend/kernel_isa.hpp"
#include "util/error.hpp"
#include "util/half.hpp"

// GCC 12's AVX-512 conversion intrinsics warn about their own undefined
// pass-through operand (false -Wmaybe-uninitialized/-Wuninitialized in avx512fintrin.h).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#define KV_AVX512 __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma")))

namespace kveval::backend {

namespace {

/// The little-endian f16 at p as f32 (exact).
inline float load_f16(const uint8_t* p) { return util::f16_to_f32(static_cast<uint16_t>(p[0] | (p[1] << 8))); }

inline __m128i load16b(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }

/// Q4_K: {f16 d, dmin; u8 scales[12]; u8 qs[128]}. Element e = 64 c + 32 k + l
/// is nibble k of qs[32 c + l], in sub-block 2 c + k; value (d * sc) * q - (dmin * m).
struct Q4K {
  static constexpr int64_t kBytes = 144;
  /// The 8 sub-blocks' d * sc and dmin * m (6-bit sc, m: ggml's get_scale_min_k4).
  static void scales(const uint8_t* b, float* d1, float* m1) {
    const float d = load_f16(b), dmin = load_f16(b + 2);
    const uint8_t* s = b + 4;
    for (int j = 0; j < 4; ++j) {
      d1[j] = d * static_cast<float>(s[j] & 63);
      m1[j] = dmin * static_cast<float>(s[j + 4] & 63);
      d1[j + 4] = d * static_cast<float>((s[j + 8] & 15) | ((s[j] >> 6) << 4));
      m1[j + 4] = dmin * static_cast<float>((s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4));
    }
  }
  /// The 256 values in element order: the scalar spec the vector decoder matches.
  static void decode(const uint8_t* b, float* v) {
    float d1[8], m1[8];
    scales(b, d1, m1);
    const uint8_t* qs = b + 16;
    for (int c = 0; c < 4; ++c)
      for (int k = 0; k < 2; ++k)
        for (int l = 0; l < 32; ++l)
          v[64 * c + 32 * k + l] = d1[2 * c + k] * static_cast<float>((qs[32 * c + l] >> (4 * k)) & 15) - m1[2 * c + k];
  }
  /// The 16 groups g = 0..15 (elements 16 g .. 16 g + 15) in order, as sink.add<g % 2>(g, values).
  template <class Sink>
  KV_AVX512 static inline void groups(const uint8_t* b, Sink& sink) {
    float d1[8], m1[8];
    scales(b, d1, m1);
    const uint8_t* qs = b + 16;
    const __m512i lo4 = _mm512_set1_epi32(15);
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m512i q0 = _mm512_cvtepu8_epi32(load16b(qs + 32 * c)), q1 = _mm512_cvtepu8_epi32(load16b(qs + 32 * c + 16));
      const __m512 da = _mm512_set1_ps(d1[2 * c]), ma = _mm512_set1_ps(m1[2 * c]);
      const __m512 db = _mm512_set1_ps(d1[2 * c + 1]), mb = _mm512_set1_ps(m1[2 * c + 1]);
      sink.template add<0>(4 * c, _mm512_sub_ps(_mm512_mul_ps(da, _mm512_cvtepi32_ps(_mm512_and_si512(q0, lo4))), ma));
      sink.template add<1>(4 * c + 1, _mm512_sub_ps(_mm512_mul_ps(da, _mm512_cvtepi32_ps(_mm512_and_si512(q1, lo4))), ma));
      sink.template add<0>(4 * c + 2, _mm512_sub_ps(_mm512_mul_ps(db, _mm512_cvtepi32_ps(_mm512_srli_epi32(q0, 4))), mb));
      sink.template add<1>(4 * c + 3, _mm512_sub_ps(_mm512_mul_ps(db, _mm512_cvtepi32_ps(_mm512_srli_epi32(q1, 4))), mb));
    }
  }
};

/// Q5_K: {f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}. Low 4 bits as
/// Q4_K's nibbles (qs at byte 48), bit 4 of element 32 s + l is bit s of qh[l];
/// value (d * sc) * q - (dmin * m), scales and mins as Q4_K's.
struct Q5K {
  static constexpr int64_t kBytes = 176;
  static void decode(const uint8_t* b, float* v) {
    float d1[8], m1[8];
    Q4K::scales(b, d1, m1);
    const uint8_t* qh = b + 16;
    const uint8_t* qs = b + 48;
    for (int c = 0; c < 4; ++c)
      for (int k = 0; k < 2; ++k) {
        const int s = 2 * c + k;
        for (int l = 0; l < 32; ++l) {
          const int q = ((qs[32 * c + l] >> (4 * k)) & 15) | (((qh[l] >> s) & 1) << 4);
          v[32 * s + l] = d1[s] * static_cast<float>(q) - m1[s];
        }
      }
  }
  /// The 16 groups in order, as Q4K::groups.
  template <class Sink>
  KV_AVX512 static inline void groups(const uint8_t* b, Sink& sink) {
    float d1[8], m1[8];
    Q4K::scales(b, d1, m1);
    const uint8_t* qs = b + 48;
    const __m512i lo4 = _mm512_set1_epi32(15), one = _mm512_set1_epi32(1);
    const __m512i h0 = _mm512_cvtepu8_epi32(load16b(b + 16)), h1 = _mm512_cvtepu8_epi32(load16b(b + 32));
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m512i q0 = _mm512_cvtepu8_epi32(load16b(qs + 32 * c)), q1 = _mm512_cvtepu8_epi32(load16b(qs + 32 * c + 16));
      const int sa = 2 * c, sb = 2 * c + 1;
      const __m512 da = _mm512_set1_ps(d1[sa]), ma = _mm512_set1_ps(m1[sa]);
      const __m512 db = _mm512_set1_ps(d1[sb]), mb = _mm512_set1_ps(m1[sb]);
      const __m512i a0 = _mm512_or_si512(_mm512_and_si512(q0, lo4), hbit(h0, sa, one));
      const __m512i a1 = _mm512_or_si512(_mm512_and_si512(q1, lo4), hbit(h1, sa, one));
      const __m512i b0 = _mm512_or_si512(_mm512_srli_epi32(q0, 4), hbit(h0, sb, one));
      const __m512i b1 = _mm512_or_si512(_mm512_srli_epi32(q1, 4), hbit(h1, sb, one));
      sink.template add<0>(4 * c, _mm512_sub_ps(_mm512_mul_ps(da, _mm512_cvtepi32_ps(a0)), ma));
      sink.template add<1>(4 * c + 1, _mm512_sub_ps(_mm512_mul_ps(da, _mm512_cvtepi32_ps(a1)), ma));
      sink.template add<0>(4 * c + 2, _mm512_sub_ps(_mm512_mul_ps(db, _mm512_cvtepi32_ps(b0)), mb));
      sink.template add<1>(4 * c + 3, _mm512_sub_ps(_mm512_mul_ps(db, _mm512_cvtepi32_ps(b1)), mb));
    }
  }
  /// Bit s of each lane of h, moved to bit 4.
  KV_AVX512 static inline __m512i hbit(__m512i h, int s, __m512i one) {
    return _mm512_slli_epi32(_mm512_and_si512(_mm512_srlv_epi32(h, _mm512_set1_epi32(s)), one), 4);
  }
};

/// Q6_K: {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}. Element e = 128 h + r:
/// low 4 bits nibble r / 64 of ql[64 h + r % 64], high 2 bits bits 2 (r / 32)
/// of qh[32 h + r % 32]; value (d * scales[e / 16]) * (q - 32).
struct Q6K {
  static constexpr int64_t kBytes = 210;
  static void scales(const uint8_t* b, float* d1) {
    const float d = load_f16(b + 208);
    for (int s = 0; s < 16; ++s) d1[s] = d * static_cast<float>(static_cast<int8_t>(b[192 + s]));
  }
  static void decode(const uint8_t* b, float* v) {
    float d1[16];
    scales(b, d1);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = b + 64 * h;
      const uint8_t* qh = b + 128 + 32 * h;
      const float* sc = d1 + 8 * h;
      float* yh = v + 128 * h;
      for (int l = 0; l < 32; ++l) {
        const int lo0 = ql[l], lo1 = ql[l + 32], hi = qh[l], s = l / 16;
        yh[l] = sc[s] * static_cast<float>(((lo0 & 15) | ((hi & 3) << 4)) - 32);
        yh[l + 32] = sc[s + 2] * static_cast<float>(((lo1 & 15) | (((hi >> 2) & 3) << 4)) - 32);
        yh[l + 64] = sc[s + 4] * static_cast<float>(((lo0 >> 4) | (((hi >> 4) & 3) << 4)) - 32);
        yh[l + 96] = sc[s + 6] * static_cast<float>(((lo1 >> 4) | (((hi >> 6) & 3) << 4)) - 32);
      }
    }
  }
  /// sc * ((low | high2 << 4) - 32), lane-wise.
  KV_AVX512 static inline __m512 val(__m512i low, __m512i high2, float sc) {
    const __m512i q = _mm512_sub_epi32(_mm512_or_si512(low, _mm512_slli_epi32(high2, 4)), _mm512_set1_epi32(32));
    return _mm512_mul_ps(_mm512_set1_ps(sc), _mm512_cvtepi32_ps(q));
  }
  /// Groups 8 h + P, + 2, + 4, + 6 of half h (elements l0 = 16 P .. of each 32).
  template <int P, class Sink>
  KV_AVX512 static inline void quarter(const uint8_t* b, const float* sc, int h, Sink& sink) {
    const uint8_t* ql = b + 64 * h + 16 * P;
    const __m512i lo0 = _mm512_cvtepu8_epi32(load16b(ql)), lo1 = _mm512_cvtepu8_epi32(load16b(ql + 32));
    const __m512i hi = _mm512_cvtepu8_epi32(load16b(b + 128 + 32 * h + 16 * P));
    const __m512i m4 = _mm512_set1_epi32(15), m2 = _mm512_set1_epi32(3);
    const int g = 8 * h + P;
    sink.template add<P>(g, val(_mm512_and_si512(lo0, m4), _mm512_and_si512(hi, m2), sc[P]));
    sink.template add<P>(g + 2, val(_mm512_and_si512(lo1, m4), _mm512_and_si512(_mm512_srli_epi32(hi, 2), m2), sc[P + 2]));
    sink.template add<P>(g + 4, val(_mm512_srli_epi32(lo0, 4), _mm512_and_si512(_mm512_srli_epi32(hi, 4), m2), sc[P + 4]));
    sink.template add<P>(g + 6, val(_mm512_srli_epi32(lo1, 4), _mm512_srli_epi32(hi, 6), sc[P + 6]));
  }
  /// The 16 groups as sink.add<g % 2>(g, values): each accumulator parity
  /// receives its groups in ascending order (the two parities interleave
  /// differently from Q4K, which the independent accumulators do not see).
  template <class Sink>
  KV_AVX512 static inline void groups(const uint8_t* b, Sink& sink) {
    float d1[16];
    scales(b, d1);
    for (int h = 0; h < 2; ++h) {
      quarter<0>(b, d1 + 8 * h, h, sink);
      quarter<1>(b, d1 + 8 * h, h, sink);
    }
  }
};

/// One output in portable C++: the spec the vector kernel matches bit for bit.
template <class F>
float dot_scalar(const uint8_t* row, const float* x, int64_t n_in) {
  float acc[2][16] = {};
  const int64_t nb = n_in / kKBlock;
  for (int64_t b = 0; b < nb; ++b) {
    float v[kKBlock];
    F::decode(row + b * F::kBytes, v);
    const float* xb = x + b * kKBlock;
    for (int g = 0; g < 16; ++g)
      for (int l = 0; l < 16; ++l) acc[g & 1][l] = std::fma(v[16 * g + l], xb[16 * g + l], acc[g & 1][l]);
  }
  float a[16];
  for (int l = 0; l < 16; ++l) a[l] = acc[0][l] + acc[1][l];
  float t[8];
  for (int l = 0; l < 8; ++l) t[l] = a[l] + a[l + 8];
  return ((t[0] + t[4]) + (t[2] + t[6])) + ((t[1] + t[5]) + (t[3] + t[7]));
}

/// Accumulators of MR rows of x against one super-block's groups.
template <int MR>
struct DotSink {
  __m512 acc[MR][2];
  const float* xb;  // row 0's elements of the current super-block
  int64_t K;        // row stride of x
  template <int P>
  KV_AVX512 inline void add(int g, __m512 v) {
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) acc[r][P] = _mm512_fmadd_ps(v, _mm512_loadu_ps(xb + r * K + 16 * g), acc[r][P]);
  }
};

/// Stores the groups of one super-block at dst.
struct StoreSink {
  float* dst;
  template <int P>
  KV_AVX512 inline void add(int g, __m512 v) {
    _mm512_storeu_ps(dst + 16 * g, v);
  }
};

/// One row of W (nb super-blocks at `row`) against MR rows of x (stride K): out[r].
template <class F, int MR>
KV_AVX512 void row_avx512(const uint8_t* row, int64_t nb, const float* x, int64_t K, float* out) {
  DotSink<MR> s;
  for (int r = 0; r < MR; ++r) s.acc[r][0] = s.acc[r][1] = _mm512_setzero_ps();
  s.K = K;
  for (int64_t b = 0; b < nb; ++b) {
    // 4 super-blocks ahead; as an integer, since near the end of W that lies
    // past the allocation (a prefetch never faults).
    const auto ahead = reinterpret_cast<uintptr_t>(row) + static_cast<uintptr_t>((b + 4) * F::kBytes);
    for (int l = 0; l < 3; ++l) _mm_prefetch(reinterpret_cast<const char*>(ahead + 64 * l), _MM_HINT_T0);
    s.xb = x + b * kKBlock;
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
  const int64_t nb = K / kKBlock;
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

/// Most rows of x one call of kquant_matmul's row loop serves (matmul sends at most 32).
constexpr int64_t kMaxRowsPerPass = 32;

template <class F>
void matmul_k(const float* x, int64_t m, const Weight& w, float* y, bool accumulate, int threads) {
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

/// One super-block decoded on this CPU's path (the same values either way).
template <class F>
void decode_block(const uint8_t* b, float* dst) {
  if (kernel_isa() == KernelIsa::Avx512) {
    StoreSink s{dst};
    F::groups(b, s);
  } else {
    F::decode(b, dst);
  }
}

template <class F>
void widen_k(const Weight& w, int64_t n0, int64_t nc, float* dst, int64_t ld, int threads) {
  const int64_t K = w.n_in(), nb = K / kKBlock;
  const auto* q = static_cast<const uint8_t*>(w.raw());
#pragma omp parallel for schedule(static) num_threads(std::max(1, threads))
  for (int64_t j = 0; j < nc; ++j)
    for (int64_t b = 0; b < nb; ++b) decode_block<F>(q + (n0 + j) * w.ld() + b * F::kBytes, dst + j * ld + b * kKBlock);
}

[[noreturn]] void bad_dtype(Dtype d, const char* who) {
  throw ArgumentError(fmt::format("{}: a {} weight (Q4_K, Q5_K or Q6_K only)", who, to_string(d)));
}

}  // namespace

void kquant_matmul(const float* x, int64_t m, const Weight& w, float* y, bool accumulate, int threads) {
  if (w.dtype() == Dtype::Q4_K) return matmul_k<Q4K>(x, m, w, y, accumulate, threads);
  if (w.dtype() == Dtype::Q5_K) return matmul_k<Q5K>(x, m, w, y, accumulate, threads);
  if (w.dtype() == Dtype::Q6_K) return matmul_k<Q6K>(x, m, w, y, accumulate, threads);
  bad_dtype(w.dtype(), "kquant_matmul");
}

float kquant_dot_scalar(Dtype d, const uint8_t* row, const float* x, int64_t n_in) {
  if (d == Dtype::Q4_K) return dot_scalar<Q4K>(row, x, n_in);
  if (d == Dtype::Q5_K) return dot_scalar<Q5K>(row, x, n_in);
  if (d == Dtype::Q6_K) return dot_scalar<Q6K>(row, x, n_in);
  bad_dtype(d, "kquant_dot_scalar");
}

void kquant_decode(Dtype d, const uint8_t* blocks, float* dst, int64_t n_blocks) {
  if (!is_kquant(d)) bad_dtype(d, "kquant_decode");
  for (int64_t i = 0; i < n_blocks; ++i) {
    if (d == Dtype::Q4_K)
      Q4K::decode(blocks + i * Q4K::kBytes, dst + i * kKBlock);
    else if (d == Dtype::Q5_K)
      Q5K::decode(blocks + i * Q5K::kBytes, dst + i * kKBlock);
    else
      Q6K::decode(blocks + i * Q6K::kBytes, dst + i * kKBlock);
  }
}

void kquant_widen_rows(const Weight& w, int64_t n0, int64_t nc, float* dst, int64_t ld, int threads) {
  if (w.dtype() == Dtype::Q4_K) return widen_k<Q4K>(w, n0, nc, dst, ld, threads);
  if (w.dtype() == Dtype::Q5_K) return widen_k<Q5K>(w, n0, nc, dst, ld, threads);
  if (w.dtype() == Dtype::Q6_K) return widen_k<Q6K>(w, n0, nc, dst, ld, threads);
  bad_dtype(w.dtype(), "kquant_widen_rows");
}

}  // namespace kveval::backend
