#pragma once
// exp(x) for float in a form GCC vectorises inside `#pragma omp simd` loops
// (std::exp stays a scalar libm call without -ffast-math). Internal to src/backend.
#include <bit>
#include <cmath>
#include <cstdint>

namespace kveval::backend::detail {

/// e^x within ~2 ulp of std::exp for x in [-87.3, 88.3]: Cody-Waite range
/// reduction x = n ln2 + r and the degree-6 polynomial of Cephes' expf
/// (S. L. Moshier, Cephes Math Library, expf.c), scaled by 2^n through the
/// exponent bits. x > 88.3 gives +inf (std::exp: finite up to 88.72), x < -87.3
/// gives 0 (std::exp: subnormals down to -103.9), NaN gives NaN.
inline float simd_exp(float x) {
  constexpr float lo = -87.3365402f, hi = 88.3762626f;
  float xc = x < lo ? lo : (x > hi ? hi : x);
  xc = xc == xc ? xc : 0.0f;  // NaN: computed on 0 (no NaN to int conversion), restored below
  // n = round(x / ln2) with the 1.5 * 2^23 trick (round to nearest even in the add)
  const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = xc - n * 0.693359375f;  // ln 2 split in two (Cephes C1, C2)
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const float scale = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  float y = p * scale;
  y = x > hi ? INFINITY : y;
  y = x < lo ? 0.0f : y;
  return x == x ? y : x;
}

}  // namespace kveval::backend::detail
