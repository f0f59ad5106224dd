// Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 weights kept as the file's blocks of 32: the
// formats (ggml-common.h block_q8_0, block_q4_0, block_q4_1, block_q5_0,
// block_q5_1) for block_kernel.hpp's exact-mode kernel and decoder. A block is
// two groups of 16: elements 0-15 (Q8_0: qs[0..15]; the others: the low
// nibbles of qs) and 16-31 (qs[16..31]; the high nibbles).
#include "backend/file_qblocks.hpp"

#include <fmt/format.h>

#include "backend/block_kernel.hpp"
#include "util/error.hpp"

namespace kveval::backend {

namespace {

using file_blocks::load16b;
using file_blocks::load_f16;
using file_blocks::load_f16_fast;

/// The little-endian u32 at p (qh of block_q5_0 / block_q5_1).
inline uint32_t load_u32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
}

/// The 5-bit quants of a Q5_0/Q5_1 block as ints: element j < 16 the low nibble
/// of qs[j], j + 16 its high nibble, bit 4 of element j bit j of qh.
inline void quants5(const uint8_t* qs, uint32_t qh, int* q) {
  for (int j = 0; j < 16; ++j) {
    q[j] = (qs[j] & 15) | static_cast<int>(((qh >> j) & 1u) << 4);
    q[j + 16] = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
  }
}

/// The same quants as two vectors (elements 0-15 and 16-31): bit 4 set where qh's bit is.
KV_AVX512 inline void quants5(const uint8_t* qs, uint32_t qh, __m512i& lo, __m512i& hi) {
  const __m512i q = _mm512_cvtepu8_epi32(load16b(qs)), sixteen = _mm512_set1_epi32(16);
  lo = _mm512_and_si512(q, _mm512_set1_epi32(15));
  hi = _mm512_srli_epi32(q, 4);
  lo = _mm512_mask_or_epi32(lo, static_cast<__mmask16>(qh & 0xFFFF), lo, sixteen);
  hi = _mm512_mask_or_epi32(hi, static_cast<__mmask16>(qh >> 16), hi, sixteen);
}

/// Block-of-32 geometry shared by the three formats: about 512 bytes ahead, one line a block.
struct Small {
  static constexpr int64_t kElements = 32, kAheadBlocks = 24;
  static constexpr int kPrefetchLines = 1;
};

/// Q8_0: {f16 d; i8 qs[32]}; value d * q (exact in f32: an 11-bit d times a 7-bit q).
struct Q80 : Small {
  static constexpr int64_t kBytes = 34;
  static void decode(const uint8_t* b, float* v) {
    const float d = load_f16(b);
    for (int j = 0; j < 32; ++j) v[j] = d * static_cast<float>(static_cast<int8_t>(b[2 + j]));
  }
  template <class Sink>
  KV_AVX512 static inline void groups(const uint8_t* b, Sink& sink) {
    const __m512 d = _mm512_set1_ps(load_f16_fast(b));
    sink.template add<0>(0, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(load16b(b + 2)))));
    sink.template add<1>(1, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(load16b(b + 18)))));
  }
};

/// Q4_0: {f16 d; u8 qs[16]}; value d * (q - 8) (exact in f32).
struct Q40 : Small {
  static constexpr int64_t kBytes = 18;
  static void decode(const uint8_t* b, float* v) {
    const float d = load_f16(b);
    for (int j = 0; j < 16; ++j) {
      v[j] = d * static_cast<float>((b[2 + j] & 15) - 8);
      v[j + 16] = d * static_cast<float>((b[2 + j] >> 4) - 8);
    }
  }
  /// Each byte widened to a 32-bit lane; vpermps picks table[lane & 15] = d * (nibble - 8), the
  /// 16 possible values computed once a block (no integer-to-float conversion per element).
  template <class Sink>
  KV_AVX512 static inline void groups(const uint8_t* b, Sink& sink) {
    const __m512 table = _mm512_mul_ps(_mm512_set1_ps(load_f16_fast(b)),
                                       _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7));
    const __m512i q = _mm512_cvtepu8_epi32(load16b(b + 2));
    sink.template add<0>(0, _mm512_permutexvar_ps(q, table));                         // low nibbles (bits 0-3)
    sink.template add<1>(1, _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), table));  // high nibbles
  }
};

/// Q4_1: {f16 d, m; u8 qs[16]}; value d * q + m.
struct Q41 : Small {
  static constexpr int64_t kBytes = 20;
  static void decode(const uint8_t* b, float* v) {
    const float d = load_f16(b), m = load_f16(b + 2);
    for (int j = 0; j < 16; ++j) {
      v[j] = d * static_cast<float>(b[4 + j] & 15) + m;
      v[j + 16] = d * static_cast<float>(b[4 + j] >> 4) + m;
    }
  }
  template <class Sink>
  KV_AVX512 static inline void groups(const uint8_t* b, Sink& sink) {
    const __m512 d = _mm512_set1_ps(load_f16(b)), m = _mm512_set1_ps(load_f16(b + 2));
    const __m512i q = _mm512_cvtepu8_epi32(load16b(b + 4));
    const __m512i lo = _mm512_and_si512(q, _mm512_set1_epi32(15)), hi = _mm512_srli_epi32(q, 4);
    sink.template add<0>(0, _mm512_add_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(lo)), m));
    sink.template add<1>(1, _mm512_add_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(hi)), m));
  }
};

/// Q5_0: {f16 d; u8 qh[4]; u8 qs[16]}; value d * (q - 16).
struct Q50 : Small {
  static constexpr int64_t kBytes = 22;
  static void decode(const uint8_t* b, float* v) {
    const float d = load_f16(b);
    int q[32];
    quants5(b + 6, load_u32(b + 2), q);
    for (int j = 0; j < 32; ++j) v[j] = d * static_cast<float>(q[j] - 16);
  }
  template <class Sink>
  KV_AVX512 static inline void groups(const uint8_t* b, Sink& sink) {
    const __m512 d = _mm512_set1_ps(load_f16(b));
    const __m512i sixteen = _mm512_set1_epi32(16);
    __m512i lo, hi;
    quants5(b + 6, load_u32(b + 2), lo, hi);
    sink.template add<0>(0, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(lo, sixteen))));
    sink.template add<1>(1, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(hi, sixteen))));
  }
};

/// Q5_1: {f16 d, m; u8 qh[4]; u8 qs[16]}; value d * q + m.
struct Q51 : Small {
  static constexpr int64_t kBytes = 24;
  static void decode(const uint8_t* b, float* v) {
    const float d = load_f16(b), m = load_f16(b + 2);
    int q[32];
    quants5(b + 8, load_u32(b + 4), q);
    for (int j = 0; j < 32; ++j) v[j] = d * static_cast<float>(q[j]) + m;
  }
  template <class Sink>
  KV_AVX512 static inline void groups(const uint8_t* b, Sink& sink) {
    const __m512 d = _mm512_set1_ps(load_f16(b)), m = _mm512_set1_ps(load_f16(b + 2));
    __m512i lo, hi;
    quants5(b + 8, load_u32(b + 4), lo, hi);
    sink.template add<0>(0, _mm512_add_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(lo)), m));
    sink.template add<1>(1, _mm512_add_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(hi)), m));
  }
};

/// fn(F{}) for the format F of dtype `d`; throws ArgumentError (naming `who`) for another dtype.
template <class Fn>
decltype(auto) with_format(Dtype d, const char* who, Fn&& fn) {
  switch (d) {
    case Dtype::Q8_0: return fn(Q80{});
    case Dtype::Q4_0: return fn(Q40{});
    case Dtype::Q4_1: return fn(Q41{});
    case Dtype::Q5_0: return fn(Q50{});
    case Dtype::Q5_1: return fn(Q51{});
    default: throw ArgumentError(fmt::format("{}: a {} weight (Q8_0, Q4_0, Q4_1, Q5_0 or Q5_1 only)", who, to_string(d)));
  }
}

}  // namespace

void file_qblocks_matmul(const float* x, int64_t m, const Weight& w, float* y, bool accumulate, int threads) {
  with_format(w.dtype(), "file_qblocks_matmul",
              [&](auto f) { file_blocks::matmul<decltype(f)>(x, m, w, y, accumulate, threads); });
}

float file_qblocks_dot_scalar(Dtype d, const uint8_t* row, const float* x, int64_t n_in) {
  return with_format(d, "file_qblocks_dot_scalar",
                     [&](auto f) { return file_blocks::dot_scalar<decltype(f)>(row, x, n_in); });
}

void file_qblocks_decode(Dtype d, const uint8_t* blocks, float* dst, int64_t n_blocks) {
  with_format(d, "file_qblocks_decode", [&](auto f) { file_blocks::decode<decltype(f)>(blocks, dst, n_blocks); });
}

void file_qblocks_widen_rows(const Weight& w, int64_t n0, int64_t nc, float* dst, int64_t ld, int threads) {
  with_format(w.dtype(), "file_qblocks_widen_rows",
              [&](auto f) { file_blocks::widen<decltype(f)>(w, n0, nc, dst, ld, threads); });
}

}  // namespace kveval::backend
