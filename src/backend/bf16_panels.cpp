// f32 rows rounded to bf16 pairs of oneDNN's BA16a64b2a panels: per 64
// columns of Wᵀ (rows of W), rows k and k + 1 of Wᵀ interleaved, so pair q of
// column j is the 32-bit word q * 64 + j.
#include "backend/bf16_panels.hpp"

#include <immintrin.h>

#include "backend/kernel_isa.hpp"
#include "util/bf16.hpp"

// GCC 12's AVX-512 intrinsics warn about their own undefined pass-through operand.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace kveval::backend {

namespace {

/// 16 floats' bits rounded as util::f32_to_bf16, the bf16 in each lane's upper
/// half: x + 0x7fff + bit 16 of x, a NaN as x with bit 22 set (quiet).
__attribute__((target("avx512f"), always_inline)) inline __m512i round_bf16_high(__m512i x) {
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i bias = _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(_mm512_srli_epi32(x, 16), one));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  return _mm512_mask_or_epi32(_mm512_add_epi32(x, bias), nan, x, _mm512_set1_epi32(0x00400000));
}

/// Pairs q0 .. q0 + 15 of one row: 32 floats rounded, the upper halves packed in order.
__attribute__((target("avx512f,avx512bw"), always_inline)) inline __m512i row_pairs(const float* src, __m512i odd) {
  const __m512i a = round_bf16_high(_mm512_loadu_si512(src));
  const __m512i b = round_bf16_high(_mm512_loadu_si512(src + 16));
  return _mm512_permutex2var_epi16(a, odd, b);
}

/// r[j] (pairs of row j) -> r[q] (pair q of rows 0..15): a 16 x 16 transpose of 32-bit words.
__attribute__((target("avx512f"), always_inline)) inline void transpose16(__m512i* r) {
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  __m512i s[16];  // s[4i + c], 128-bit lane L: word 4L + c of rows 4i .. 4i + 3
  for (int i = 0; i < 4; ++i) {
    s[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    s[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    s[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    s[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int c = 0; c < 4; ++c) {
    const __m512i a = _mm512_shuffle_i32x4(s[c], s[4 + c], 0x88), b = _mm512_shuffle_i32x4(s[c], s[4 + c], 0xdd);
    const __m512i e = _mm512_shuffle_i32x4(s[8 + c], s[12 + c], 0x88), d = _mm512_shuffle_i32x4(s[8 + c], s[12 + c], 0xdd);
    r[c] = _mm512_shuffle_i32x4(a, e, 0x88);
    r[8 + c] = _mm512_shuffle_i32x4(a, e, 0xdd);
    r[4 + c] = _mm512_shuffle_i32x4(b, d, 0x88);
    r[12 + c] = _mm512_shuffle_i32x4(b, d, 0xdd);
  }
}

/// The pairs of words [q0, q1) of rows 0..jn-1 from src, as pack_panel_pairs_scalar.
void pack_tail(const float* src, int64_t ld, int64_t jn, int64_t q0, int64_t q1, uint32_t* dst) {
  for (int64_t j = 0; j < jn; ++j)
    for (int64_t q = q0; q < q1; ++q)
      dst[q * 64 + j] = uint32_t(util::f32_to_bf16(src[j * ld + 2 * q])) | uint32_t(util::f32_to_bf16(src[j * ld + 2 * q + 1])) << 16;
}

__attribute__((target("avx512f,avx512bw"))) void pack_avx512(const float* src, int64_t ld, int64_t jn, int64_t kp,
                                                             uint32_t* dst) {
  alignas(64) static constexpr uint16_t kOdd[32] = {1,  3,  5,  7,  9,  11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31,
                                                    33, 35, 37, 39, 41, 43, 45, 47, 49, 51, 53, 55, 57, 59, 61, 63};
  const __m512i odd = _mm512_load_si512(kOdd);
  const __mmask16 lanes = static_cast<__mmask16>((1u << jn) - 1u);
  const int64_t kv = kp / 16 * 16;
  for (int64_t q0 = 0; q0 < kv; q0 += 16) {
    __m512i r[16];
    for (int64_t j = 0; j < 16; ++j) r[j] = j < jn ? row_pairs(src + j * ld + 2 * q0, odd) : _mm512_setzero_si512();
    transpose16(r);
    for (int64_t q = 0; q < 16; ++q) _mm512_mask_storeu_epi32(dst + (q0 + q) * 64, lanes, r[q]);
  }
  pack_tail(src, ld, jn, kv, kp, dst);
}

/// pack_avx512 with VCVTNE2PS2BF16 rounding: 32 floats of a row to 16 pairs in
/// one instruction. 16 rows at a 64-byte aligned dst fill whole cache lines, so
/// they are stored non-temporally: the panels of a chunk (tens of MiB) are read
/// back by oneDNN from memory anyway, and a plain store would first read each
/// line (measured 2-9 tok/s faster on pp512 at 2 threads).
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void pack_avx512_bf16(const float* src, int64_t ld, int64_t jn,
                                                                             int64_t kp, uint32_t* dst) {
  const __mmask16 lanes = static_cast<__mmask16>((1u << jn) - 1u);
  const int64_t kv = kp / 16 * 16;
  const bool stream = jn == 16 && reinterpret_cast<uintptr_t>(dst) % 64 == 0;
  for (int64_t q0 = 0; q0 < kv; q0 += 16) {
    __m512i r[16];
    for (int64_t j = 0; j < 16; ++j) {
      const float* s = src + j * ld + 2 * q0;
      r[j] = j < jn ? (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(s + 16), _mm512_loadu_ps(s)) : _mm512_setzero_si512();
    }
    transpose16(r);
    if (stream)
      for (int64_t q = 0; q < 16; ++q) _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + (q0 + q) * 64), r[q]);
    else
      for (int64_t q = 0; q < 16; ++q) _mm512_mask_storeu_epi32(dst + (q0 + q) * 64, lanes, r[q]);
  }
  if (stream) _mm_sfence();
  pack_tail(src, ld, jn, kv, kp, dst);
}

}  // namespace

void pack_panel_pairs_normal(const float* src, int64_t ld, int64_t jn, int64_t kp, uint32_t* dst) {
  if (jn <= 0 || kp <= 0) return;
  if (jn <= 16 && kernel_has_bf16_dot()) return pack_avx512_bf16(src, ld, jn, kp, dst);
  pack_panel_pairs(src, ld, jn, kp, dst);
}

void pack_panel_pairs_scalar(const float* src, int64_t ld, int64_t jn, int64_t kp, uint32_t* dst) {
  for (int64_t q0 = 0; q0 < kp; q0 += 16) {  // [jn rows, 16 pairs] -> [16 pairs, jn rows]
    const int64_t q1 = q0 + 16 < kp ? q0 + 16 : kp;
    for (int64_t j = 0; j < jn; ++j)
      for (int64_t q = q0; q < q1; ++q)
        dst[q * 64 + j] = uint32_t(util::f32_to_bf16(src[j * ld + 2 * q])) | uint32_t(util::f32_to_bf16(src[j * ld + 2 * q + 1])) << 16;
  }
}

void pack_panel_pairs(const float* src, int64_t ld, int64_t jn, int64_t kp, uint32_t* dst) {
  if (jn <= 0 || kp <= 0) return;
  if (jn <= 16 && kernel_isa() == KernelIsa::Avx512) return pack_avx512(src, ld, jn, kp, dst);
  pack_panel_pairs_scalar(src, ld, jn, kp, dst);
}

}  // namespace kveval::backend
