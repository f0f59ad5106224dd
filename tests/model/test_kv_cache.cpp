// KvCache on its own, from shape numbers (no model): sizes, appends read back
// for each element type (bit patterns computed by hand), n_past per row,
// reset_row, f16 overflow counting and the refusals.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "model/kv_cache.hpp"
#include "util/error.hpp"

using namespace kveval;

namespace {

// Shape of the cases: 2 layers, 2 kv heads of 4 values.
constexpr int kLayers = 2, kHeads = 2, kHd = 4;

/// Float index of (layer, row, head, pos, d) in a cache of `batch` rows x `cap` positions.
size_t index(int batch, int cap, int layer, int row, int head, int pos, int d) {
  return ((static_cast<size_t>(layer) * batch + row) * kHeads + head) * cap * kHd + static_cast<size_t>(pos) * kHd + d;
}

/// One token's K (or V) for both heads: head h, element d = base + 10 h + d.
std::vector<float> token(float base) {
  std::vector<float> t(kHeads * kHd);
  for (int h = 0; h < kHeads; ++h)
    for (int d = 0; d < kHd; ++d) t[static_cast<size_t>(h * kHd + d)] = base + 10.0f * h + d;
  return t;
}

/// Element (head, pos, d) of a bf16/f16 view's K or V as raw bits.
uint16_t bits(const void* base, int cap, int head, int pos, int d) {
  return static_cast<const uint16_t*>(base)[static_cast<size_t>(head) * cap * kHd + static_cast<size_t>(pos) * kHd + d];
}

}  // namespace

TEST_SUITE("model.kv_cache") {
  TEST_CASE("bytes: 2 x n_layer x batch x n_kv_head x max_seq x head_dim x element size") {
    KvCache f32(kLayers, kHeads, kHd);
    CHECK(f32.dtype() == KvCacheDtype::F32);
    CHECK(f32.bytes_for(3, 5) == 2u * 2 * 3 * 2 * 5 * 4 * 4);  // 1920
    CHECK(f32.bytes() == 0);
    CHECK_FALSE(f32.is_setup());
    KvCache bf16(kLayers, kHeads, kHd, KvCacheDtype::BF16), f16(kLayers, kHeads, kHd, KvCacheDtype::F16);
    CHECK(bf16.bytes_for(3, 5) == 960);
    CHECK(f16.bytes_for(3, 5) == 960);
    CHECK(f32.setup(3, 5));
    CHECK(f32.bytes() == 1920);
    CHECK(f32.batch_size() == 3);
    CHECK(f32.capacity() == 5);
    CHECK_FALSE(f32.setup(3, 5));  // same shape: rewound, not reallocated
    CHECK(f32.setup(2, 5));        // another shape: reallocated
    CHECK(f32.bytes() == 1280);
    f32.release();
    CHECK_FALSE(f32.is_setup());
    CHECK(f32.bytes() == 0);
    CHECK(f32.batch_size() == 0);
    CHECK(f32.capacity() == 0);
    CHECK(f32.data(0) == nullptr);
  }

  TEST_CASE("f32: appended K and V read back at [layer][row][head][pos][d]; n_past per row") {
    KvCache c(kLayers, kHeads, kHd);
    c.setup(2, 4);
    // two tokens of row 1, layer 1, packed with a stride of 3 heads' width (the qkv layout)
    const int stride = 3 * kHd;
    std::vector<float> k(2 * stride, -1.0f), v(2 * stride, -1.0f);
    for (int i = 0; i < 2; ++i) {
      const auto tk = token(100.0f * (i + 1)), tv = token(-100.0f * (i + 1));
      std::copy(tk.begin(), tk.end(), k.begin() + i * stride);
      std::copy(tv.begin(), tv.end(), v.begin() + i * stride);
    }
    CHECK(c.append(1, 1, 2, k.data(), v.data(), stride) == 0);
    CHECK(c.n_past(1) == 0);  // append does not advance
    c.advance(1, 2);
    CHECK(c.n_past(1) == 2);
    CHECK(c.n_past(0) == 0);
    // K of layer 1, row 1, head 1, position 1, element 3 = 200 + 10 + 3
    CHECK(c.data(0)[index(2, 4, 1, 1, 1, 1, 3)] == 213.0f);
    CHECK(c.data(0)[index(2, 4, 1, 1, 0, 0, 0)] == 100.0f);
    CHECK(c.data(1)[index(2, 4, 1, 1, 1, 0, 2)] == -100.0f + 10.0f + 2.0f);
    // a third token goes to position 2
    const auto t3 = token(300.0f);
    c.append(1, 1, 1, t3.data(), t3.data(), kHeads * kHd);
    c.advance(1, 1);
    CHECK(c.n_past(1) == 3);
    CHECK(c.data(0)[index(2, 4, 1, 1, 0, 2, 1)] == 301.0f);
    CHECK(c.data(1)[index(2, 4, 1, 1, 1, 2, 0)] == 310.0f);
    // the view of (layer 1, row 1) starts there: pos_stride head_dim, head_stride capacity x head_dim
    const backend::KvView view = c.view(1, 1);
    CHECK(view.pos_stride == kHd);
    CHECK(view.head_stride == 4 * kHd);
    CHECK(view.dtype == backend::Dtype::F32);
    CHECK(static_cast<const float*>(view.k) == c.data(0) + index(2, 4, 1, 1, 0, 0, 0));
    CHECK(static_cast<const float*>(view.v)[1 * 4 * kHd + 2 * kHd + 3] == 313.0f);
  }

  TEST_CASE("bf16: round to nearest even, ties to even") {
    KvCache c(1, 1, kHd, KvCacheDtype::BF16);
    c.setup(1, 2);
    // 1 = 0x3F80; -2 = 0xC000; 1 + 2^-8 lies halfway between 0x3F80 and 0x3F81: even 0x3F80;
    // 1 + 3 * 2^-8 halfway between 0x3F81 and 0x3F82: even 0x3F82.
    const float k[kHd] = {1.0f, -2.0f, 1.00390625f, 1.01171875f};
    const float v[kHd] = {0.5f, 3.0f, -0.0f, 65536.0f};  // 0x3F00, 0x4040, 0x8000, 0x4780
    CHECK(c.append(0, 0, 1, k, v, kHd) == 0);
    const backend::KvView view = c.view(0, 0);
    CHECK(view.dtype == backend::Dtype::BF16);
    CHECK(bits(view.k, 2, 0, 0, 0) == 0x3F80);
    CHECK(bits(view.k, 2, 0, 0, 1) == 0xC000);
    CHECK(bits(view.k, 2, 0, 0, 2) == 0x3F80);
    CHECK(bits(view.k, 2, 0, 0, 3) == 0x3F82);
    CHECK(bits(view.v, 2, 0, 0, 0) == 0x3F00);
    CHECK(bits(view.v, 2, 0, 0, 1) == 0x4040);
    CHECK(bits(view.v, 2, 0, 0, 2) == 0x8000);
    CHECK(bits(view.v, 2, 0, 0, 3) == 0x4780);
    CHECK_THROWS_AS(c.data(0), CacheError);  // raw floats only for an f32 cache
  }

  TEST_CASE("f16: half bits, |x| >= 65520 stored as ±Inf and counted per row") {
    KvCache c(1, 1, kHd, KvCacheDtype::F16);
    c.setup(2, 3);
    // 1 = 0x3C00; 0.5 = 0x3800; 65504 (largest half) = 0x7BFF; 65519 rounds down to 65504;
    // 65520 rounds past it: +Inf 0x7C00; -70000: -Inf 0xFC00.
    const float k[kHd] = {1.0f, 0.5f, 65504.0f, 65519.0f};
    const float v[kHd] = {65520.0f, -70000.0f, -1.0f, 2.0f};  // .., .., 0xBC00, 0x4000
    CHECK(c.append(0, 1, 1, k, v, kHd) == 2);
    c.advance(1, 1);
    CHECK(c.f16_overflows(1) == 2);
    CHECK(c.f16_overflows(0) == 0);
    const backend::KvView view = c.view(0, 1);
    CHECK(view.dtype == backend::Dtype::F16);
    CHECK(bits(view.k, 3, 0, 0, 0) == 0x3C00);
    CHECK(bits(view.k, 3, 0, 0, 1) == 0x3800);
    CHECK(bits(view.k, 3, 0, 0, 2) == 0x7BFF);
    CHECK(bits(view.k, 3, 0, 0, 3) == 0x7BFF);
    CHECK(bits(view.v, 3, 0, 0, 0) == 0x7C00);
    CHECK(bits(view.v, 3, 0, 0, 1) == 0xFC00);
    CHECK(bits(view.v, 3, 0, 0, 2) == 0xBC00);
    CHECK(bits(view.v, 3, 0, 0, 3) == 0x4000);
    // one more overflow at position 1 adds to the row's count
    const float big[kHd] = {1e6f, 0.0f, 0.0f, 0.0f};
    CHECK(c.append(0, 1, 1, big, big, kHd) == 2);
    CHECK(c.f16_overflows(1) == 4);
    c.reset_row(1);
    CHECK(c.f16_overflows(1) == 0);
    CHECK(c.n_past(1) == 0);
  }

  TEST_CASE("reset_row rewinds one row; reset rewinds all, keeping the allocation") {
    KvCache c(kLayers, kHeads, kHd);
    c.setup(3, 4);
    const auto t = token(1.0f);
    for (int r = 0; r < 3; ++r) {
      for (int l = 0; l < kLayers; ++l) c.append(l, r, 1, t.data(), t.data(), kHeads * kHd);
      c.advance(r, 1);
    }
    c.advance(2, 2);
    c.reset_row(1);
    CHECK(c.n_past(0) == 1);
    CHECK(c.n_past(1) == 0);
    CHECK(c.n_past(2) == 3);
    const float* k = c.data(0);
    c.reset();
    CHECK(c.n_past(0) == 0);
    CHECK(c.n_past(2) == 0);
    CHECK(c.data(0) == k);
    CHECK(c.bytes() == c.bytes_for(3, 4));
  }

  TEST_CASE("capacity and range errors") {
    CHECK_THROWS_AS(KvCache(0, kHeads, kHd), ArgumentError);
    CHECK_THROWS_AS(KvCache(kLayers, kHeads, kHd, KvCacheDtype::Auto), ArgumentError);
    KvCache c(kLayers, kHeads, kHd);
    CHECK_THROWS_AS(c.setup(0, 4), ArgumentError);
    CHECK_THROWS_AS(c.setup(1, 0), ArgumentError);
    CHECK_THROWS_AS(c.n_past(0), ArgumentError);  // not set up
    c.setup(2, 3);
    const auto t = token(0.0f);
    std::vector<float> four(4 * kHeads * kHd, 0.0f);
    CHECK_THROWS_AS(c.append(0, 0, 4, four.data(), four.data(), kHeads * kHd), CacheError);  // 4 > 3 positions
    c.append(0, 0, 3, four.data(), four.data(), kHeads * kHd);
    c.advance(0, 3);
    CHECK_THROWS_WITH_AS(c.append(0, 0, 1, t.data(), t.data(), kHeads * kHd),
                         doctest::Contains("max_seq_len >= 4"), CacheError);
    CHECK_THROWS_AS(c.advance(0, 1), CacheError);
    CHECK(c.n_past(0) == 3);
    CHECK_THROWS_AS(c.append(2, 1, 1, t.data(), t.data(), kHeads * kHd), ArgumentError);  // layer 2 of 2
    CHECK_THROWS_AS(c.append(0, 2, 1, t.data(), t.data(), kHeads * kHd), ArgumentError);  // row 2 of 2
    CHECK_THROWS_AS(c.view(0, -1), ArgumentError);
    CHECK_THROWS_AS(c.reset_row(2), ArgumentError);
    CHECK_THROWS_AS(c.f16_overflows(5), ArgumentError);
    CHECK_THROWS_AS(c.set_dtype(KvCacheDtype::BF16), CacheError);  // set up: release first
    c.release();
    c.set_dtype(KvCacheDtype::BF16);
    CHECK(c.dtype() == KvCacheDtype::BF16);
  }
}
