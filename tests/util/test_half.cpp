// IEEE half conversions (util/half.hpp): the vector forms (F16C when the build
// targets it) give the scalar forms' bits, and the f16 KV cache's overflow
// count is exact. The scalar forms' bit patterns are hand-checked in
// model.gguf ("f16 conversion: exact bit patterns").
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "util/half.hpp"

using namespace kveval;

TEST_SUITE("util.half") {
  TEST_CASE("f16_to_f32_n widens all 65536 halves as f16_to_f32 does (NaNs stay NaN)") {
    std::vector<uint16_t> h(65536 + 3);
    for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<uint16_t>(i);
    std::vector<float> out(h.size());
    // an odd byte offset: the source needs no alignment
    std::vector<unsigned char> bytes(2 * h.size() + 1);
    std::memcpy(bytes.data() + 1, h.data(), 2 * h.size());
    util::f16_to_f32_n(bytes.data() + 1, out.data(), h.size());
    int bad = 0;
    for (size_t i = 0; i < h.size(); ++i) {
      const float want = util::f16_to_f32(h[i]);
      if (std::isnan(want) ? !std::isnan(out[i]) : std::bit_cast<uint32_t>(want) != std::bit_cast<uint32_t>(out[i])) ++bad;
    }
    CHECK(bad == 0);
    CHECK(out[0x0001] == std::ldexp(1.0f, -24));  // smallest subnormal, exact
    CHECK(out[0x7BFF] == util::kF16Max);
    CHECK(out[0xFC00] == -std::numeric_limits<float>::infinity());
  }

  TEST_CASE("f32_to_f16_n rounds as f32_to_f16 does and counts the finite values that became Inf") {
    std::vector<float> x;
    // every half, the midpoints between neighbours (ties to even) and just either side of them
    for (uint32_t h = 0; h < 0x7C00; ++h) {
      const float a = util::f16_to_f32(static_cast<uint16_t>(h)), b = util::f16_to_f32(static_cast<uint16_t>(h + 1));
      const float mid = (a + b) / 2;  // exact in float
      for (float v : {a, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
        x.push_back(v);
        x.push_back(-v);
      }
    }
    std::mt19937 g(5);
    std::uniform_real_distribution<float> u(-70000.0f, 70000.0f);
    for (int i = 0; i < 10000; ++i) x.push_back(u(g));
    const float inf = std::numeric_limits<float>::infinity();
    for (float v : {65504.0f, 65519.99f, 65520.0f, -65520.0f, 1e30f, -3.4e38f, inf, -inf,
                    std::numeric_limits<float>::quiet_NaN(), 1e-30f, -0.0f})
      x.push_back(v);
    size_t want_over = 0;
    for (float v : x) want_over += (std::isfinite(v) && std::fabs(v) >= 65520.0f) ? 1 : 0;
    REQUIRE(want_over > 100);
    for (size_t off : {size_t{0}, size_t{3}}) {  // the 8-wide loop and a scalar tail
      CAPTURE(off);
      std::vector<uint16_t> y(x.size() - off);
      const size_t over = util::f32_to_f16_n(x.data() + off, y.data(), y.size());
      size_t want = 0, bad = 0;
      for (size_t i = 0; i < y.size(); ++i) {
        const float v = x[i + off];
        want += (std::isfinite(v) && std::fabs(v) >= 65520.0f) ? 1 : 0;
        bad += y[i] != util::f32_to_f16(v);
      }
      CHECK(bad == 0);
      CHECK(over == want);
    }
    uint16_t one;
    CHECK(util::f32_to_f16_n(std::vector<float>{70000.0f}.data(), &one, 1) == 1);
    CHECK(one == 0x7C00);
    CHECK(util::f32_to_f16_n(std::vector<float>{inf}.data(), &one, 1) == 0);  // already Inf: not an overflow
  }
}
