// Decode products on kept Q8_0, Q4_0, Q4_K, Q5_K and Q6_K blocks with int8 activations:
// see int8_dot.hpp. Each format has a scalar form (the spec) and an AVX-512
// VNNI form; the integer sums are exact in both and every f32 step is the same
// operation in the same order, so they give the same bits.
#include "backend/int8_dot.hpp"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "backend/kernel_isa.hpp"
#include "util/error.hpp"
#include "util/half.hpp"

// GCC 12's AVX-512 conversion intrinsics warn about their own undefined
// pass-through operand (false -Wmaybe-uninitialized/-Wuninitialized in avx512fintrin.h).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#define KV_VNNI __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx512vnni,avx2,fma")))

namespace kveval::backend {

namespace {

constexpr int64_t kQ4KBytes = 144, kQ5KBytes = 176, kQ6KBytes = 210;

/// The little-endian f16 at p as f32 (exact).
inline float load_f16(const uint8_t* p) { return util::f16_to_f32(static_cast<uint16_t>(p[0] | (p[1] << 8))); }

/// ggml's nearest_int (ggml-quants.c): round half to even for |v| < 2^22.
inline int nearest_int(float v) {
  const float f = v + 12582912.0f;
  int32_t i;
  std::memcpy(&i, &f, sizeof i);
  return (i & 0x007fffff) - 0x00400000;
}

/// The quantized activation rows in a scratch buffer: quants [m, K], scales [m, K / 32]
/// (Q8_0) or [m, K / 256] (Q8_K) and, for Q8_K, bsums [m, K / 256, 16].
struct Int8Rows {
  int8_t* qs = nullptr;
  float* d = nullptr;
  int16_t* bsums = nullptr;
};

constexpr int64_t round64(int64_t bytes) { return (bytes + 63) / 64 * 64; }

Int8Rows carve(float* scratch, int64_t m, int64_t K) {
  auto* base = reinterpret_cast<uint8_t*>(scratch);
  const int64_t d_bytes = round64(4 * m * (K / kQBlock)), bs_bytes = round64(2 * m * (K / kKBlock) * 16);
  return {reinterpret_cast<int8_t*>(base + d_bytes + bs_bytes), scratch, reinterpret_cast<int16_t*>(base + d_bytes)};
}

// ---- Q4_K ----------------------------------------------------------------

/// The 8 sub-blocks' 6-bit scales and mins (ggml's get_scale_min_k4).
inline void q4k_scales(const uint8_t* b, int32_t* sc, int32_t* mn) {
  const uint8_t* s = b + 4;
  for (int j = 0; j < 4; ++j) {
    sc[j] = s[j] & 63;
    mn[j] = s[j + 4] & 63;
    sc[j + 4] = (s[j + 8] & 15) | ((s[j] >> 6) << 4);
    mn[j + 4] = (s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4);
  }
}

/// Σ_j m_j (bsums[2 j] + bsums[2 j + 1]): the mins' integer part.
inline int32_t q4k_msum(const int16_t* bs, const int32_t* mn) {
  int32_t s = 0;
  for (int j = 0; j < 8; ++j) s += mn[j] * (bs[2 * j] + bs[2 * j + 1]);
  return s;
}

/// One super-block's f32 step (the same in both forms).
inline float q4k_step(float acc, float d, float dmin, float dx, int32_t isum, int32_t msum) {
  acc = std::fma(d * dx, static_cast<float>(isum), acc);
  return std::fma(-(dmin * dx), static_cast<float>(msum), acc);
}

/// Σ_j sc_j Σ_{e in sub-block j} q_e xq_e of a Q4_K super-block, or with
/// `Five` of a Q5_K one (qh[32] at byte 16, qs at 48: bit 4 of element 32 j + l
/// is bit j of qh[l]).
template <bool Five>
int32_t q4k_isum_scalar(const uint8_t* blk, const int8_t* xq, const int32_t* sc) {
  const uint8_t* qs = blk + (Five ? 48 : 16);
  const uint8_t* qh = blk + 16;
  int32_t isum = 0;
  for (int c = 0; c < 4; ++c)
    for (int k = 0; k < 2; ++k) {
      const int j = 2 * c + k;
      int32_t s = 0;
      for (int l = 0; l < 32; ++l) {
        const int q = ((qs[32 * c + l] >> (4 * k)) & 15) | (Five ? ((qh[l] >> j) & 1) << 4 : 0);
        s += q * xq[64 * c + 32 * k + l];
      }
      isum += sc[j] * s;
    }
  return isum;
}

template <bool Five>
void q4k_row_scalar(const uint8_t* row, int64_t nb, const Int8Rows& xr, int64_t K, int64_t m, float* out) {
  const int64_t kb = K / kKBlock, bytes = Five ? kQ5KBytes : kQ4KBytes;
  for (int64_t r = 0; r < m; ++r) {
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = row + b * bytes;
      int32_t sc[8], mn[8];
      q4k_scales(blk, sc, mn);
      const int32_t isum = q4k_isum_scalar<Five>(blk, xr.qs + r * K + b * kKBlock, sc);
      const int32_t msum = q4k_msum(xr.bsums + (r * kb + b) * 16, mn);
      acc = q4k_step(acc, load_f16(blk), load_f16(blk + 2), xr.d[r * kb + b], isum, msum);
    }
    out[r] = acc;
  }
}

template <bool Five>
KV_VNNI void q4k_row_vnni(const uint8_t* row, int64_t nb, const Int8Rows& xr, int64_t K, int64_t m, float* out) {
  const int64_t kb = K / kKBlock, bytes = Five ? kQ5KBytes : kQ4KBytes;
  float acc[kInt8MaxRows] = {};
  const __m512i m4 = _mm512_set1_epi8(15), zero = _mm512_setzero_si512();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = row + b * bytes;
    const auto ahead = reinterpret_cast<uintptr_t>(blk) + static_cast<uintptr_t>(4 * bytes);  // never dereferenced
    for (int l = 0; l < 3; ++l) _mm_prefetch(reinterpret_cast<const char*>(ahead + 64 * l), _MM_HINT_T0);
    int32_t sc[8], mn[8];
    q4k_scales(blk, sc, mn);
    const __m512i sc16 = _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sc)));
    __m512i w[4], s[4];
    for (int c = 0; c < 4; ++c) {
      // elements 64 c .. 64 c + 31 (low nibbles) then 64 c + 32 .. 64 c + 63 (high nibbles)
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + (Five ? 48 : 16) + 32 * c));
      w[c] = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(raw), _mm256_srli_epi16(raw, 4), 1), m4);
      if constexpr (Five) {  // bit 4: bit 2 c (low half) and 2 c + 1 (high half) of qh[l]
        const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16)), one = _mm256_set1_epi8(1);
        const __m256i ha = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * c)), one);
        const __m256i hb = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * c + 1)), one);
        w[c] = _mm512_or_si512(w[c], _mm512_slli_epi16(_mm512_inserti64x4(_mm512_castsi256_si512(ha), hb, 1), 4));
      }
      const __m512i idx = _mm512_set_epi32(2 * c + 1, 2 * c + 1, 2 * c + 1, 2 * c + 1, 2 * c + 1, 2 * c + 1, 2 * c + 1,
                                           2 * c + 1, 2 * c, 2 * c, 2 * c, 2 * c, 2 * c, 2 * c, 2 * c, 2 * c);
      s[c] = _mm512_permutexvar_epi32(idx, sc16);  // lanes 0-7: sub-block 2 c, 8-15: 2 c + 1
    }
    const float d = load_f16(blk), dmin = load_f16(blk + 2);
    for (int64_t r = 0; r < m; ++r) {
      const int8_t* xq = xr.qs + r * K + b * kKBlock;
      __m512i a = zero;
      for (int c = 0; c < 4; ++c) {
        const __m512i dp = _mm512_dpbusd_epi32(zero, w[c], _mm512_loadu_si512(xq + 64 * c));
        a = _mm512_add_epi32(a, _mm512_mullo_epi32(dp, s[c]));
      }
      const int32_t isum = _mm512_reduce_add_epi32(a);
      const int32_t msum = q4k_msum(xr.bsums + (r * kb + b) * 16, mn);
      acc[r] = q4k_step(acc[r], d, dmin, xr.d[r * kb + b], isum, msum);
    }
  }
  for (int64_t r = 0; r < m; ++r) out[r] = acc[r];
}

// ---- Q6_K ----------------------------------------------------------------

/// One super-block's f32 step (the same in both forms).
inline float q6k_step(float acc, float d, float dx, int32_t isum) { return std::fma(d * dx, static_cast<float>(isum), acc); }

int32_t q6k_isum_scalar(const uint8_t* blk, const int8_t* xq, const int16_t* bs) {
  const auto* sc = reinterpret_cast<const int8_t*>(blk + 192);
  int32_t g[16] = {};
  for (int h = 0; h < 2; ++h) {
    const uint8_t* ql = blk + 64 * h;
    const uint8_t* qh = blk + 128 + 32 * h;
    const int8_t* x = xq + 128 * h;
    int32_t* gh = g + 8 * h;
    for (int l = 0; l < 32; ++l) {
      const int q0 = (ql[l] & 15) | ((qh[l] & 3) << 4), q1 = (ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4);
      const int q2 = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4), q3 = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
      gh[l / 16] += q0 * x[l];
      gh[2 + l / 16] += q1 * x[l + 32];
      gh[4 + l / 16] += q2 * x[l + 64];
      gh[6 + l / 16] += q3 * x[l + 96];
    }
  }
  int32_t isum = 0, osum = 0;
  for (int j = 0; j < 16; ++j) {
    isum += sc[j] * g[j];
    osum += sc[j] * bs[j];
  }
  return isum - 32 * osum;
}

void q6k_row_scalar(const uint8_t* row, int64_t nb, const Int8Rows& xr, int64_t K, int64_t m, float* out) {
  const int64_t kb = K / kKBlock;
  for (int64_t r = 0; r < m; ++r) {
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = row + b * kQ6KBytes;
      const int32_t isum = q6k_isum_scalar(blk, xr.qs + r * K + b * kKBlock, xr.bsums + (r * kb + b) * 16);
      acc = q6k_step(acc, load_f16(blk + 208), xr.d[r * kb + b], isum);
    }
    out[r] = acc;
  }
}

KV_VNNI void q6k_row_vnni(const uint8_t* row, int64_t nb, const Int8Rows& xr, int64_t K, int64_t m, float* out) {
  const int64_t kb = K / kKBlock;
  float acc[kInt8MaxRows] = {};
  const __m512i m4 = _mm512_set1_epi8(15), zero = _mm512_setzero_si512();
  const __m256i m2 = _mm256_set1_epi8(3);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = row + b * kQ6KBytes;
    const auto ahead = reinterpret_cast<uintptr_t>(blk) + static_cast<uintptr_t>(4 * kQ6KBytes);  // never dereferenced
    for (int l = 0; l < 4; ++l) _mm_prefetch(reinterpret_cast<const char*>(ahead + 64 * l), _MM_HINT_T0);
    __m512i w[4], s[4];
    for (int h = 0; h < 2; ++h) {  // chunk 2 h: elements 128 h .. + 63, chunk 2 h + 1: 128 h + 64 .. + 127
      const __m512i ql = _mm512_loadu_si512(blk + 64 * h);
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * h));
      const __m512i ha = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(qh, m2)),
                                            _mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 1);
      const __m512i hb = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2)),
                                            _mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 1);
      w[2 * h] = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_slli_epi16(ha, 4));
      w[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4), _mm512_slli_epi16(hb, 4));
    }
    const __m512i sc32 = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192)));
    for (int k = 0; k < 4; ++k) {  // lane i of chunk k: elements 64 k + 4 i .. + 3, group 4 k + i / 4
      const int g = 4 * k;
      const __m512i idx = _mm512_set_epi32(g + 3, g + 3, g + 3, g + 3, g + 2, g + 2, g + 2, g + 2, g + 1, g + 1, g + 1,
                                           g + 1, g, g, g, g);
      s[k] = _mm512_permutexvar_epi32(idx, sc32);
    }
    const float d = load_f16(blk + 208);
    for (int64_t r = 0; r < m; ++r) {
      const int8_t* xq = xr.qs + r * K + b * kKBlock;
      __m512i a = zero;
      for (int k = 0; k < 4; ++k) {
        const __m512i dp = _mm512_dpbusd_epi32(zero, w[k], _mm512_loadu_si512(xq + 64 * k));
        a = _mm512_add_epi32(a, _mm512_mullo_epi32(dp, s[k]));
      }
      const __m512i bs = _mm512_cvtepi16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr.bsums + (r * kb + b) * 16)));
      const int32_t isum = _mm512_reduce_add_epi32(a) - 32 * _mm512_reduce_add_epi32(_mm512_mullo_epi32(sc32, bs));
      acc[r] = q6k_step(acc[r], d, xr.d[r * kb + b], isum);
    }
  }
  for (int64_t r = 0; r < m; ++r) out[r] = acc[r];
}

// ---- Q8_0 ----------------------------------------------------------------
// A row's block b: quants at q + b * kQGroup * kQBlock, scale at d[b * kQGroup]
// (Weight's interleaved groups of kQGroup rows, see Weight::raw).

/// 16 lanes summed: a_l = v_l + v_{l+8}, t_l = a_l + a_{l+4}, (t_0 + t_2) + (t_1 + t_3).
inline float reduce16(const float* v) {
  float a[8], t[4];
  for (int l = 0; l < 8; ++l) a[l] = v[l] + v[l + 8];
  for (int l = 0; l < 4; ++l) t[l] = a[l] + a[l + 4];
  return (t[0] + t[2]) + (t[1] + t[3]);
}

/// Q8_0's quants (int8), or with `Four` Q4_0's (element j < 16 the low nibble
/// of byte j, j + 16 its high nibble, minus 8): block b's at q + b * kQGroup * bytes.
template <bool Four>
float q8_0_dot_scalar(const uint8_t* q, const float* d, int64_t nb, const int8_t* xq, const float* xd) {
  constexpr int64_t bytes = Four ? kQBlock / 2 : kQBlock;
  float acc[16] = {};
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* qb = q + b * kQGroup * bytes;
    const int8_t* xb = xq + b * kQBlock;
    const float s = d[b * kQGroup] * xd[b];
    float* lane = acc + 8 * (b & 1);
    int v[kQBlock];
    for (int j = 0; j < kQBlock; ++j)
      v[j] = Four ? (j < 16 ? qb[j] & 15 : qb[j - 16] >> 4) - 8 : static_cast<int8_t>(qb[j]);
    for (int l = 0; l < 8; ++l) {
      int32_t p = 0;
      for (int k = 0; k < 4; ++k) p += v[4 * l + k] * xb[4 * l + k];
      lane[l] = std::fma(s, static_cast<float>(p), lane[l]);
    }
  }
  return reduce16(acc);
}

/// |w| as unsigned bytes against x with w's sign: vpdpbusd's u8 x s8 products
/// equal w x (x in [-127, 127], as both quantizers give).
KV_VNNI inline __m512i dot_signed(__m512i w, __m512i x) {
  const __m512i zero = _mm512_setzero_si512();
  return _mm512_dpbusd_epi32(zero, _mm512_abs_epi8(w), _mm512_mask_sub_epi8(x, _mm512_movepi8_mask(w), zero, x));
}

/// Q4_0's 16 bytes at p as the block's 32 nibbles in element order (u8).
KV_VNNI inline __m256i nibbles(const uint8_t* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), m4 = _mm_set1_epi8(15);
  return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(v, m4)), _mm_and_si128(_mm_srli_epi16(v, 4), m4), 1);
}

/// Block products of 8 lanes per block: Q8_0 (signed quants) or Q4_0 (nibble - 8: the
/// nibbles' u8 x s8 sums minus 8 times the activations' sums, both from vpdpbusd).
template <bool Four>
KV_VNNI inline __m512i block_dot(__m512i w, __m512i x) {
  if constexpr (Four) {
    const __m512i zero = _mm512_setzero_si512();
    return _mm512_sub_epi32(_mm512_dpbusd_epi32(zero, w, x), _mm512_dpbusd_epi32(zero, _mm512_set1_epi8(8), x));
  } else {
    return dot_signed(w, x);
  }
}

/// Block b's quants as 32 bytes (Q4_0: the nibbles).
template <bool Four>
KV_VNNI inline __m256i block_bytes(const uint8_t* q, int64_t b) {
  if constexpr (Four) return nibbles(q + b * kQGroup * (kQBlock / 2));
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + b * kQGroup * kQBlock));
}

template <bool Four>
KV_VNNI float q8_0_dot_vnni(const uint8_t* q, const float* d, int64_t nb, const int8_t* xq, const float* xd) {
  __m512 acc = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 1 < nb; b += 2) {
    const __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(block_bytes<Four>(q, b)), block_bytes<Four>(q, b + 1), 1);
    const __m512i dp = block_dot<Four>(w, _mm512_loadu_si512(xq + b * kQBlock));
    const __m512 s = _mm512_insertf32x8(_mm512_set1_ps(d[b * kQGroup] * xd[b]),
                                        _mm256_set1_ps(d[(b + 1) * kQGroup] * xd[b + 1]), 1);
    acc = _mm512_fmadd_ps(s, _mm512_cvtepi32_ps(dp), acc);
  }
  if (b < nb) {  // the last, even block: lanes 0-7 only
    const __m512i w = _mm512_zextsi256_si512(block_bytes<Four>(q, b));
    const __m512i x = _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + b * kQBlock)));
    const __m512 s = _mm512_set1_ps(d[b * kQGroup] * xd[b]);
    acc = _mm512_mask3_fmadd_ps(s, _mm512_cvtepi32_ps(block_dot<Four>(w, x)), acc, 0x00FF);
  }
  alignas(64) float v[16];
  _mm512_store_ps(v, acc);
  return reduce16(v);
}

// ---- the product ---------------------------------------------------------

/// Row n of W against the m quantized rows: out[r].
void row_dot(const Weight& w, int64_t n, const Int8Rows& xr, int64_t m, bool vnni, float* out) {
  const int64_t K = w.n_in();
  const auto* raw = static_cast<const uint8_t*>(w.raw());
  if (is_blocks(w.dtype())) {
    const int64_t nb = K / kQBlock, i = w.block_index(n, 0);
    const uint8_t* q = raw + i * block_quant_bytes(w.dtype());
    const float* d = w.scales() + i;
    const bool four = w.dtype() == Dtype::Q4_0;
    for (int64_t r = 0; r < m; ++r) {
      const int8_t* xq = xr.qs + r * K;
      const float* xd = xr.d + r * nb;
      out[r] = vnni ? (four ? q8_0_dot_vnni<true>(q, d, nb, xq, xd) : q8_0_dot_vnni<false>(q, d, nb, xq, xd))
                    : (four ? q8_0_dot_scalar<true>(q, d, nb, xq, xd) : q8_0_dot_scalar<false>(q, d, nb, xq, xd));
    }
    return;
  }
  const uint8_t* row = raw + n * w.ld();
  const int64_t nb = K / kKBlock;
  switch (w.dtype()) {
    case Dtype::Q4_K: return vnni ? q4k_row_vnni<false>(row, nb, xr, K, m, out) : q4k_row_scalar<false>(row, nb, xr, K, m, out);
    case Dtype::Q5_K: return vnni ? q4k_row_vnni<true>(row, nb, xr, K, m, out) : q4k_row_scalar<true>(row, nb, xr, K, m, out);
    default: return vnni ? q6k_row_vnni(row, nb, xr, K, m, out) : q6k_row_scalar(row, nb, xr, K, m, out);
  }
}

}  // namespace

bool int8_kernel(Dtype d) { return is_blocks(d) || d == Dtype::Q4_K || d == Dtype::Q5_K || d == Dtype::Q6_K; }

bool int8_has_vnni() {
  static const bool v = kernel_isa() == KernelIsa::Avx512 && __builtin_cpu_supports("avx512vnni") &&
                        onednn_isa_includes(dnnl::cpu_isa::avx512_core_vnni);
  return v;
}

int64_t int8_scratch_floats(int64_t m, int64_t n_in) {
  return (round64(4 * m * (n_in / kQBlock)) + round64(2 * m * (n_in / kKBlock) * 16) + round64(m * n_in)) / 4;
}

void quantize_row_q8_K(const float* x, int64_t n, int8_t* qs, float* d, int16_t* bsums) {
  if (n % kKBlock != 0) throw ArgumentError(fmt::format("quantize_row_q8_K: {} values (a multiple of {} expected)", n, kKBlock));
  for (int64_t b = 0; b < n / kKBlock; ++b) {
    const float* xb = x + b * kKBlock;
    int8_t* q = qs + b * kKBlock;
    int16_t* bs = bsums + b * 16;
    float max = 0.0f, amax = 0.0f;
    for (int j = 0; j < kKBlock; ++j) {
      const float ax = std::fabs(xb[j]);
      if (ax > amax) {
        amax = ax;
        max = xb[j];
      }
    }
    const float iscale = amax > 0.0f ? -127.0f / max : 0.0f;
    if (iscale == 0.0f || !std::isfinite(iscale)) {
      d[b] = 0.0f;
      std::memset(q, 0, kKBlock);
      std::memset(bs, 0, 16 * sizeof(int16_t));
      continue;
    }
    for (int j = 0; j < kKBlock; ++j) q[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * xb[j])));
    for (int g = 0; g < 16; ++g) {
      int s = 0;
      for (int l = 0; l < 16; ++l) s += q[16 * g + l];
      bs[g] = static_cast<int16_t>(s);
    }
    d[b] = 1.0f / iscale;
  }
}

void quantize_row_q8_0(const float* x, int64_t n, int8_t* qs, float* d) {
  if (n % kQBlock != 0) throw ArgumentError(fmt::format("quantize_row_q8_0: {} values (a multiple of {} expected)", n, kQBlock));
  for (int64_t b = 0; b < n / kQBlock; ++b) {
    const float* xb = x + b * kQBlock;
    int8_t* q = qs + b * kQBlock;
    float amax = 0.0f;
    for (int j = 0; j < kQBlock; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float dd = amax / 127.0f;
    float dh = util::f16_to_f32(util::f32_to_f16(dd));
    if (std::isinf(dh)) dh = dd;  // beyond f16's range
    if (!(dh != 0.0f)) {          // 0 (or NaN): the block contributes nothing
      d[b] = 0.0f;
      std::memset(q, 0, kQBlock);
      continue;
    }
    const float id = 1.0f / dd;
    for (int j = 0; j < kQBlock; ++j) {
      const float v = std::round(xb[j] * id);
      q[j] = static_cast<int8_t>(v >= -127.0f && v <= 127.0f ? v : 0.0f);  // always within for finite x
    }
    d[b] = dh;
  }
}

void int8_matmul(const float* x, int64_t m, const Weight& w, float* y, bool accumulate, int threads, float* scratch,
                 bool vnni) {
  if (!int8_kernel(w.dtype()))
    throw ArgumentError(fmt::format("int8_matmul: a {} weight (Q8_0, Q4_0, Q4_K, Q5_K or Q6_K only)", to_string(w.dtype())));
  if (m < 1 || m > kInt8MaxRows) throw ArgumentError(fmt::format("int8_matmul: {} rows outside [1, {}]", m, kInt8MaxRows));
  if (vnni && !int8_has_vnni()) throw ArgumentError("int8_matmul: the VNNI form asked for on a CPU without it");
  if (scratch == nullptr) throw ArgumentError("int8_matmul: no scratch");
  const int64_t N = w.n_out(), K = w.n_in();
  const Int8Rows xr = carve(scratch, m, K);
  for (int64_t r = 0; r < m; ++r) {
    if (is_blocks(w.dtype()))
      quantize_row_q8_0(x + r * K, K, xr.qs + r * K, xr.d + r * (K / kQBlock));
    else
      quantize_row_q8_K(x + r * K, K, xr.qs + r * K, xr.d + r * (K / kKBlock), xr.bsums + r * (K / kKBlock) * 16);
  }
  const int t = m * N * K < kDecodeParallelMacs ? 1 : std::max(1, threads);
#pragma omp parallel for schedule(static) num_threads(t)
  for (int64_t n = 0; n < N; ++n) {  // static: each thread a contiguous range of rows
    float v[kInt8MaxRows];
    row_dot(w, n, xr, m, vnni, v);
    for (int64_t r = 0; r < m; ++r) y[r * N + n] = accumulate ? y[r * N + n] + v[r] : v[r];
  }
}

}  // namespace kveval::backend
