// K-quant weights kept as the file's super-blocks (Q2_K, Q3_K, Q4_K, Q5_K,
// Q6_K): the exact-mode f32 kernel for decode-sized products and the decoder
// behind the row-chunk widening for long ones (ggml's formats: ggml-common.h
// block_q2_K ... block_q6_K). A format (Q2K ... Q6K below) says how a
// super-block becomes its 16 groups of 16 floats; block_kernel.hpp multiplies them.
#include "backend/kquants.hpp"

#include <fmt/format.h>

#include "backend/block_kernel.hpp"
#include "util/error.hpp"

namespace kveval::backend {

namespace {

using file_blocks::load16b;
using file_blocks::load_f16;

/// Q2_K: {u8 scales[16]; u8 qs[64]; f16 d, dmin}. Element e = 128 h + 32 k + l
/// is bits 2k..2k+1 of qs[32 h + l], in group (sub-block) e / 16, whose scales
/// byte holds the 4-bit scale (low nibble) and min (high); value (d * sc) * q - (dmin * m).
struct Q2K {
  static constexpr int64_t kBytes = 84, kElements = kKBlock, kAheadBlocks = 4;
  static constexpr int kPrefetchLines = 2;
  /// The 16 groups' d * sc and dmin * m.
  static void scales(const uint8_t* b, float* d1, float* m1) {
    const float d = load_f16(b + 80), dmin = load_f16(b + 82);
    for (int s = 0; s < 16; ++s) {
      d1[s] = d * static_cast<float>(b[s] & 15);
      m1[s] = dmin * static_cast<float>(b[s] >> 4);
    }
  }
  static void decode(const uint8_t* b, float* v) {
    float d1[16], m1[16];
    scales(b, d1, m1);
    const uint8_t* qs = b + 16;
    for (int e = 0; e < kKBlock; ++e) {
      const int h = e / 128, k = (e % 128) / 32, l = e % 32, g = e / 16;
      v[e] = d1[g] * static_cast<float>((qs[32 * h + l] >> (2 * k)) & 3) - m1[g];
    }
  }
  /// d * q - m, lane-wise, for the 2 bits of q at `shift`.
  KV_AVX512 static inline __m512 val(__m512i q, int shift, float d, float m) {
    const __m512i v = _mm512_and_si512(_mm512_srlv_epi32(q, _mm512_set1_epi32(shift)), _mm512_set1_epi32(3));
    return _mm512_sub_ps(_mm512_mul_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(v)), _mm512_set1_ps(m));
  }
  /// The 16 groups in order: group 8 h + 2 k from bytes 32 h .. + 15, 8 h + 2 k + 1 from the next 16.
  template <class Sink>
  KV_AVX512 static inline void groups(const uint8_t* b, Sink& sink) {
    float d1[16], m1[16];
    scales(b, d1, m1);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m512i q0 = _mm512_cvtepu8_epi32(load16b(b + 16 + 32 * h));
      const __m512i q1 = _mm512_cvtepu8_epi32(load16b(b + 32 + 32 * h));
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        const int g = 8 * h + 2 * k;
        sink.template add<0>(g, val(q0, 2 * k, d1[g], m1[g]));
        sink.template add<1>(g + 1, val(q1, 2 * k, d1[g + 1], m1[g + 1]));
      }
    }
  }
};

/// Q3_K: {u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d}. Element e = 128 h +
/// 32 k + l is bits 2k..2k+1 of qs[32 h + l], minus 4 when bit 4 h + k of
/// hmask[l] is clear (q in [-4, 3]). Group s = e / 16 has a 6-bit scale stored
/// + 32: low 4 bits scales[s] & 15 (s < 8) or scales[s - 8] >> 4, high 2 bits
/// bits 2 (s / 4).. of scales[8 + s % 4]; value (d * (sc - 32)) * q.
struct Q3K {
  static constexpr int64_t kBytes = 110, kElements = kKBlock, kAheadBlocks = 4;
  static constexpr int kPrefetchLines = 2;
  /// The 16 groups' d * (sc - 32).
  static void scales(const uint8_t* b, float* d1) {
    const float d = load_f16(b + 108);
    const uint8_t* sc = b + 96;
    for (int s = 0; s < 16; ++s) {
      const int lo = s < 8 ? (sc[s] & 15) : (sc[s - 8] >> 4);
      const int hi = (sc[8 + s % 4] >> (2 * (s / 4))) & 3;
      d1[s] = d * static_cast<float>((lo | (hi << 4)) - 32);
    }
  }
  static void decode(const uint8_t* b, float* v) {
    float d1[16];
    scales(b, d1);
    const uint8_t* qs = b + 32;
    for (int e = 0; e < kKBlock; ++e) {
      const int h = e / 128, k = (e % 128) / 32, l = e % 32;
      const int q = ((qs[32 * h + l] >> (2 * k)) & 3) - (((b[l] >> (4 * h + k)) & 1) ? 0 : 4);
      v[e] = d1[e / 16] * static_cast<float>(q);
    }
  }
  /// d * ((low 2 bits of q at `shift`) | (bit `bit` of hm) << 2) - 4), lane-wise.
  KV_AVX512 static inline __m512 val(__m512i q, __m512i hm, int shift, int bit, float d) {
    const __m512i lo = _mm512_and_si512(_mm512_srlv_epi32(q, _mm512_set1_epi32(shift)), _mm512_set1_epi32(3));
    const __m512i hi = _mm512_and_si512(_mm512_srlv_epi32(hm, _mm512_set1_epi32(bit)), _mm512_set1_epi32(1));
    const __m512i v = _mm512_sub_epi32(_mm512_or_si512(lo, _mm512_slli_epi32(hi, 2)), _mm512_set1_epi32(4));
    return _mm512_mul_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(v));
  }
  /// The 16 groups in order, as Q2K::groups (hmask bytes 0-15 for even groups, 16-31 for odd).
  template <class Sink>
  KV_AVX512 static inline void groups(const uint8_t* b, Sink& sink) {
    float d1[16];
    scales(b, d1);
    const __m512i hm0 = _mm512_cvtepu8_epi32(load16b(b)), hm1 = _mm512_cvtepu8_epi32(load16b(b + 16));
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m512i q0 = _mm512_cvtepu8_epi32(load16b(b + 32 + 32 * h));
      const __m512i q1 = _mm512_cvtepu8_epi32(load16b(b + 48 + 32 * h));
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        const int g = 8 * h + 2 * k;
        sink.template add<0>(g, val(q0, hm0, 2 * k, 4 * h + k, d1[g]));
        sink.template add<1>(g + 1, val(q1, hm1, 2 * k, 4 * h + k, d1[g + 1]));
      }
    }
  }
};

/// Q4_K: {f16 d, dmin; u8 scales[12]; u8 qs[128]}. Element e = 64 c + 32 k + l
/// is nibble k of qs[32 c + l], in sub-block 2 c + k; value (d * sc) * q - (dmin * m).
struct Q4K {
  static constexpr int64_t kBytes = 144, kElements = kKBlock, kAheadBlocks = 4;
  static constexpr int kPrefetchLines = 3;
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
  static constexpr int64_t kBytes = 176, kElements = kKBlock, kAheadBlocks = 4;
  static constexpr int kPrefetchLines = 3;
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
  static constexpr int64_t kBytes = 210, kElements = kKBlock, kAheadBlocks = 4;
  static constexpr int kPrefetchLines = 3;
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

[[noreturn]] void bad_dtype(Dtype d, const char* who) {
  throw ArgumentError(fmt::format("{}: a {} weight (Q2_K, Q3_K, Q4_K, Q5_K or Q6_K only)", who, to_string(d)));
}

/// fn(F{}) for the format F of K-quant dtype `d`; throws ArgumentError (naming `who`) for another dtype.
template <class Fn>
decltype(auto) with_format(Dtype d, const char* who, Fn&& fn) {
  switch (d) {
    case Dtype::Q2_K: return fn(Q2K{});
    case Dtype::Q3_K: return fn(Q3K{});
    case Dtype::Q4_K: return fn(Q4K{});
    case Dtype::Q5_K: return fn(Q5K{});
    case Dtype::Q6_K: return fn(Q6K{});
    default: bad_dtype(d, who);
  }
}

}  // namespace

void kquant_matmul(const float* x, int64_t m, const Weight& w, float* y, bool accumulate, int threads) {
  with_format(w.dtype(), "kquant_matmul",
              [&](auto f) { file_blocks::matmul<decltype(f)>(x, m, w, y, accumulate, threads); });
}

float kquant_dot_scalar(Dtype d, const uint8_t* row, const float* x, int64_t n_in) {
  return with_format(d, "kquant_dot_scalar", [&](auto f) { return file_blocks::dot_scalar<decltype(f)>(row, x, n_in); });
}

void kquant_decode(Dtype d, const uint8_t* blocks, float* dst, int64_t n_blocks) {
  with_format(d, "kquant_decode", [&](auto f) { file_blocks::decode<decltype(f)>(blocks, dst, n_blocks); });
}

void kquant_widen_rows(const Weight& w, int64_t n0, int64_t nc, float* dst, int64_t ld, int threads) {
  with_format(w.dtype(), "kquant_widen_rows",
              [&](auto f) { file_blocks::widen<decltype(f)>(w, n0, nc, dst, ld, threads); });
}

}  // namespace kveval::backend
