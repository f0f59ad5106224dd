// IEEE half <-> float conversions (util/half.hpp). The scalar forms follow IEEE
// 754's convertFormat with round to nearest even; the F16C path gives the same
// bits (vcvtps2ph with imm8 = round to nearest even, exceptions suppressed).
#include "util/half.hpp"

#include <bit>
#include <cmath>
#include <cstring>

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace kveval::util {

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf / NaN (payload kept)
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);  // 127 - 15 = 112
  } else if (mant == 0) {
    bits = sign;  // +-0
  } else {
    // subnormal half: mant * 2^-24; normalise.
    int e = 113;  // exponent of 2^-14 is 127-14 = 113
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --e;
    }
    mant &= 0x3ffu;
    bits = sign | (static_cast<uint32_t>(e) << 23) | (mant << 13);
  }
  return std::bit_cast<float>(bits);
}

uint16_t f32_to_f16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {  // inf or NaN
    if (ax == 0x7f800000u) return sign | 0x7c00u;
    return sign | 0x7e00u | static_cast<uint16_t>((ax >> 13) & 0x3ffu);  // quiet NaN
  }
  if (ax >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: overflow to inf
  if (ax >= 0x38800000u) {                       // normal half (>= 2^-14)
    uint32_t mant = ax & 0x7fffffu;
    uint32_t exp = (ax >> 23) - 112u;
    uint32_t h = (exp << 10) | (mant >> 13);
    uint32_t rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // nearest even; carry into exponent is correct
    return sign | static_cast<uint16_t>(h);
  }
  if (ax < 0x33000000u) return sign;  // < 2^-25: rounds to 0 (2^-25 exactly ties to even 0)
  // subnormal half: value = m * 2^-24, m in [0, 1024].
  const uint32_t exp = ax >> 23;                      // biased, 102..112
  const uint32_t mant = (ax & 0x7fffffu) | 0x800000u;  // 24-bit significand
  const uint32_t shift = 126u - exp;                   // value = mant * 2^(exp-150); /2^-24 -> shift by 126-exp
  uint32_t h = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (h & 1u))) ++h;
  return sign | static_cast<uint16_t>(h);
}

void f16_to_f32_n(const void* src, float* dst, size_t n) {
  const auto* b = static_cast<const unsigned char*>(src);
  size_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2 * i))));
#endif
  for (; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, b + 2 * i, 2);
    dst[i] = f16_to_f32(h);
  }
}

size_t f32_to_f16_n(const float* x, uint16_t* y, size_t n) {
  size_t i = 0, overflowed = 0;
#if defined(__F16C__)
  const __m256 big = _mm256_set1_ps(65520.0f);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    // finite and >= 65520 in magnitude: rounded to Inf (NaN compares false, Inf is not finite)
    const __m256 a = _mm256_and_ps(v, abs_mask);
    const int m = _mm256_movemask_ps(_mm256_and_ps(_mm256_cmp_ps(a, big, _CMP_GE_OQ),
                                                   _mm256_cmp_ps(a, _mm256_set1_ps(INFINITY), _CMP_LT_OQ)));
    overflowed += static_cast<size_t>(std::popcount(static_cast<unsigned>(m)));
  }
#endif
  for (; i < n; ++i) {
    y[i] = f32_to_f16(x[i]);
    const float a = x[i] < 0 ? -x[i] : x[i];
    overflowed += (a >= 65520.0f && a < INFINITY) ? 1 : 0;
  }
  return overflowed;
}

}  // namespace kveval::util
