// f32 rows rounded into bf16 pairs of BA16a64b2a panels (pack_panel_pairs):
// hand-computed words, and the AVX-512 path against the scalar one bit for bit
// on random rows with rounding ties, subnormals, infinities and NaNs, for
// every row count 1..16 and pair counts with and without a tail of 16.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <vector>

#include "backend/backend.hpp"
#include "backend/bf16_panels.hpp"
#include "backend/kernel_isa.hpp"

using namespace kveval::backend;

namespace {

/// n floats: uniform values of mixed magnitude, with every 7th one a special
/// case (a rounding tie either way, a subnormal that rounds to a nonzero bf16,
/// ±0, ±inf, a quiet and a signalling NaN).
std::vector<float> awkward(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  const float special[] = {1.0f + 1.0f / 256,  1.0f + 3.0f / 256, std::bit_cast<float>(0x0000ffffu),
                           std::bit_cast<float>(0x8001a000u), -0.0f, 0.0f,
                           std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN(), std::bit_cast<float>(0x7f800001u),
                           std::bit_cast<float>(0x7f7fffffu), 3.0e-39f};
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = i % 7 == 3 ? special[(i / 7) % std::size(special)] : u(g) * std::ldexp(1.0f, static_cast<int>(g() % 40) - 20);
  return v;
}

}  // namespace

TEST_SUITE("backend.bf16_panels") {
  TEST_CASE("pack_panel_pairs writes f32_to_bf16 of columns 2q and 2q + 1 into word q * 64 + j") {
    const std::vector<float> src = {1.0f, 1.0f + 3.0f / 256, -2.0f, 1.0f + 1.0f / 256,   // row 0: pairs 0, 1
                                    0.5f, -0.0f, 65504.0f, 1.0f + 1.0f / 256 + 1.0f / 65536};  // row 1
    std::vector<uint32_t> dst(2 * 64, 0xdeadbeefu);
    pack_panel_pairs(src.data(), 4, 2, 2, dst.data());
    CHECK(dst[0] == 0x3f823f80u);
    CHECK(dst[1] == 0x80003f00u);
    CHECK(dst[64] == 0x3f80c000u);
    CHECK(dst[65] == 0x3f814780u);
    CHECK(dst[2] == 0xdeadbeefu);  // lanes of other rows are left alone
    CHECK(dst[66] == 0xdeadbeefu);
  }

  TEST_CASE("the AVX-512 pack gives the scalar pack's bits for 1..16 rows and any pair count") {
    if (kernel_isa() != KernelIsa::Avx512) MESSAGE("no AVX-512 on this CPU: both are the scalar pack");
    const int64_t ld = 2 * 50 + 6;
    const std::vector<float> src = awkward(static_cast<size_t>(16 * ld), 7);
    for (int64_t kp : {1, 15, 16, 17, 48, 50}) {
      for (int64_t jn = 1; jn <= 16; ++jn) {
        INFO("kp " << kp << " jn " << jn);
        std::vector<uint32_t> want(static_cast<size_t>(kp * 64), 0x5a5a5a5au), got = want;
        pack_panel_pairs_scalar(src.data(), ld, jn, kp, want.data());
        pack_panel_pairs(src.data(), ld, jn, kp, got.data());
        CHECK(got == want);
        int64_t written = 0;
        for (uint32_t u : want) written += u != 0x5a5a5a5au;
        CHECK(written >= jn * kp - 1);  // the spec wrote the jn x kp words (one may equal the fill)
      }
    }
  }

  TEST_CASE("pack_panel_pairs_normal gives the scalar pack's bits on finite normal rows, aligned or not") {
    if (!kernel_has_bf16_dot()) MESSAGE("no AVX512-BF16 on this CPU: it is pack_panel_pairs");
    const int64_t ld = 2 * 50 + 6;
    std::vector<float> src = awkward(static_cast<size_t>(16 * ld), 11);
    for (float& f : src)  // widened blocks hold no subnormal, infinity or NaN; keep the rounding ties and zeros
      if (!std::isfinite(f) || (f != 0.0f && std::fabs(f) < std::numeric_limits<float>::min())) f = 1.0f + 1.0f / 256;
    for (int64_t offset : {0, 3}) {  // a 64-byte aligned dst (stored non-temporally at 16 rows) and an unaligned one
      for (int64_t kp : {1, 16, 17, 50}) {
        for (int64_t jn : {1, 7, 15, 16}) {
          INFO("offset " << offset << " kp " << kp << " jn " << jn);
          std::vector<uint32_t> want(static_cast<size_t>(kp * 64 + 16), 0x5a5a5a5au);
          auto* buf = static_cast<uint32_t*>(std::aligned_alloc(64, want.size() * sizeof(uint32_t)));
          std::copy(want.begin(), want.end(), buf);
          pack_panel_pairs_scalar(src.data(), ld, jn, kp, want.data() + offset);
          pack_panel_pairs_normal(src.data(), ld, jn, kp, buf + offset);
          CHECK(std::equal(want.begin(), want.end(), buf));
          std::free(buf);
        }
      }
    }
  }

  TEST_CASE("the scalar pack rounds each element as f32_to_bf16 does") {
    const int64_t kp = 20, ld = 2 * kp;
    const std::vector<float> src = awkward(static_cast<size_t>(3 * ld), 9);
    std::vector<uint32_t> dst(static_cast<size_t>(kp * 64));
    pack_panel_pairs_scalar(src.data(), ld, 3, kp, dst.data());
    int64_t differ = 0;
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t q = 0; q < kp; ++q) {
        const uint32_t w = dst[static_cast<size_t>(q * 64 + j)];
        differ += (w & 0xffffu) != f32_to_bf16(src[static_cast<size_t>(j * ld + 2 * q)]);
        differ += (w >> 16) != f32_to_bf16(src[static_cast<size_t>(j * ld + 2 * q + 1)]);
      }
    CHECK(differ == 0);
  }
}
